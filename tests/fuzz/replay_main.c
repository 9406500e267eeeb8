/*
 * replay_main.c — a plain main() for the fuzz targets: feeds every file of
 * the directories (or files) named on the command line to
 * LLVMFuzzerTestOneInput once. The Makefile links it with each
 * tests/fuzz/fuzz_*.c so the grown corpus is replayed by the normal test
 * suite without clang or libFuzzer. No mutation, no coverage feedback.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static int replay_file(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "replay: cannot open %s\n", path); return -1; }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t* buf = malloc(len > 0 ? (size_t)len : 1);
    size_t got = len > 0 ? fread(buf, 1, (size_t)len, f) : 0;
    fclose(f);
    if (len > 0 && got != (size_t)len) { free(buf); fprintf(stderr, "replay: short read %s\n", path); return -1; }
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

int main(int argc, char** argv) {
    size_t files = 0;
    int errors = 0;
    for (int a = 1; a < argc; a++) {
        struct stat st;
        if (stat(argv[a], &st) != 0) { fprintf(stderr, "replay: no such path %s\n", argv[a]); errors++; continue; }
        if (!S_ISDIR(st.st_mode)) { errors += replay_file(argv[a]) != 0; files++; continue; }
        DIR* d = opendir(argv[a]);
        if (!d) { errors++; continue; }
        struct dirent* e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[a], e->d_name);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) { errors += replay_file(path) != 0; files++; }
        }
        closedir(d);
    }
    printf("replayed %zu inputs, %d unreadable\n", files, errors);
    return errors ? 1 : 0;
}
