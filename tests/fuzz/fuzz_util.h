/*
 * fuzz_util.h — what the loaders' fuzz targets (tests/fuzz/fuzz_*.c) share:
 * fail (abort with a reason, which libFuzzer reports as a crash), the
 * printable-message check, and a scratch directory the input is written to
 * when the loader reads files by name. Static functions: each target is one
 * translation unit, built by clang (scripts/fuzz.sh) and gcc (the replay).
 * FUZZ_NAME (the target's name) is defined before this is included.
 */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static inline void fail(const char* what, const char* detail) {
    fprintf(stderr, FUZZ_NAME ": %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

/* Printable text: bytes 0x20..0x7e, or valid UTF-8 of U+00A0 and above. */
static inline void check_printable(const char* s) {
    const unsigned char* p = (const unsigned char*)s;
    while (*p) {
        if (*p >= 0x20 && *p < 0x7f) {
            p++;
            continue;
        }
        if (*p < 0xc2 || *p > 0xf4) fail("a control or non-UTF-8 byte in an error message", s);
        const size_t len = *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : 2;
        for (size_t i = 1; i < len; i++)
            if (p[i] < 0x80 || p[i] > 0xbf) fail("invalid UTF-8 in an error message", s);
        if (*p == 0xc2 && p[1] < 0xa0) fail("a C1 control in an error message", s);
        p += len;
    }
}

/* A refusal: a message, printable, that names `what` (a file or a field). */
static inline void check_refusal(const char* err, const char* what) {
    if (!err[0]) fail("refused without a message", what);
    check_printable(err);
    if (what && !strstr(err, what)) {
        fprintf(stderr, FUZZ_NAME ": the message does not name %s\n", what);
        fail("a refusal that does not say where", err);
    }
}

/* The scratch directory, made once per process under /dev/shm (memory:
 * each input is written there, so a disk's metadata writes would set the
 * pace; /tmp where there is no /dev/shm) and removed, with what the last
 * input left in it, when the process exits. */
static char g_dir[64];

static inline void remove_tree(const char* dir) {
    DIR* d = opendir(dir);
    if (!d) return;
    struct dirent* e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024];
        if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= sizeof p) continue;
        if (unlink(p)) remove_tree(p);
    }
    closedir(d);
    rmdir(dir);
}

static inline void remove_scratch(void) { remove_tree(g_dir); }

static inline const char* scratch_dir(void) {
    if (!g_dir[0]) {
        struct stat st;
        const char* base = !stat("/dev/shm", &st) && S_ISDIR(st.st_mode) && !access("/dev/shm", W_OK) ? "/dev/shm" : "/tmp";
        snprintf(g_dir, sizeof g_dir, "%s/" FUZZ_NAME ".XXXXXX", base);
        if (!mkdtemp(g_dir)) fail("mkdtemp", g_dir);
        atexit(remove_scratch);
    }
    return g_dir;
}

/* Empty the scratch directory (its files; subdirectories too). */
static inline void clear_scratch(void) {
    DIR* d = opendir(scratch_dir());
    if (!d) fail("opendir", g_dir);
    struct dirent* e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[1024];
        if ((size_t)snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name) >= sizeof p) continue;
        if (unlink(p)) remove_tree(p);
    }
    closedir(d);
}

/* Write n bytes as file `name` of the scratch directory; returns its path
 * (a static buffer of its own per call site is the caller's business). */
static inline void write_scratch(const char* name, const void* data, size_t n, char* path, size_t cap) {
    snprintf(path, cap, "%s/%s", scratch_dir(), name);
    FILE* f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) fail("writing a scratch file", path);
}

#endif
