/*
 * log.h — fatal checks, clocks, hashes and the step log of the trainer.
 *
 * The runtime is a program, not a library others link: when something is
 * wrong (a bad file, a failed collective, out of memory) it says where and
 * why on stderr and takes every rank down with MPI_Abort, llm.c style:
 *
 *     trainCheck(fd >= 0, "cannot open %s: %s", path, strerror(errno));
 *     zipcclCheck(zipcclAllGather(...));     // prints the code and detail
 *
 * Also here: the start-up SGEMM peak used for MFU, /proc/meminfo, FNV-1a,
 * and zrt_printable, through which every message quotes a string that came
 * from a file or the command line.
 * Left out: log rotation, tensorboard, anything that needs a network.
 */
#ifndef RUNTIME_LOG_H
#define RUNTIME_LOG_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "zipccl.h"

/* Print "FATAL (rank R) file:line: message" and abort all ranks. */
void zrt_fatal(const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

#define trainCheck(cond, ...)                                                 \
    do {                                                                      \
        if (!(cond)) zrt_fatal(__FILE__, __LINE__, __VA_ARGS__);              \
    } while (0)

#define zipcclCheck(call)                                                     \
    do {                                                                      \
        zipcclResult_t zrt_r_ = (call);                                       \
        if (zrt_r_ != zipcclSuccess)                                          \
            zrt_fatal(__FILE__, __LINE__, "%s failed: %s (%s)", #call,        \
                      zipcclGetErrorString(zrt_r_), zipcclGetLastErrorDetail()); \
    } while (0)

/* Format an error message into err (errlen bytes) and return -1: the
 * runtime's library functions report failures this way, never exit. */
int zrt_errf(char* err, size_t errlen, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

/* malloc/calloc that never return NULL (they die with the size asked). */
void* zrt_malloc(size_t bytes, const char* what);
void* zrt_calloc(size_t n, size_t size, const char* what);

double zrt_now(void); /* monotonic seconds */

/* FNV-1a 64 over bytes, continuing from h (start with ZRT_FNV_INIT). */
#define ZRT_FNV_INIT 0xcbf29ce484222325ull
uint64_t zrt_fnv1a64(uint64_t h, const void* data, size_t n);
/* FNV-1a 64 of a whole file and its size (bytes may be NULL); -1 (errno
 * set) if it cannot be read. */
int zrt_file_fnv1a64(const char* path, uint64_t* hash, size_t* bytes);

/* fp32 SGEMM FLOP/s on this process's threads, timed for ~seconds. */
double zrt_sgemm_peak(double seconds);

/* MemAvailable from /proc/meminfo (sysconf fallback), bytes. */
size_t zrt_mem_available(void);
/* This process's resident set: its high-water mark (VmHWM) and now (VmRSS),
 * in bytes; 0 where /proc does not say. */
size_t zrt_rss_peak(void);
size_t zrt_rss_now(void);

/* "1.23 GiB" into buf. */
const char* zrt_fmt_bytes(double bytes, char* buf, size_t n);

/* s as text that is safe to print: a name, key, value or path read from a
 * file or given on the command line may hold bytes a terminal obeys (ESC
 * sequences set its title and colours, move the cursor, or fake a log line
 * after a newline), so every error and log line quotes such a string
 * through this. Printable ASCII passes through unchanged, and so does valid
 * UTF-8 of printable characters ("é", "中"). Becomes \xNN (two lower-case
 * hex digits) per byte: the C0 controls 0x00-0x1f (tab and newline too),
 * DEL 0x7f, the C1 controls U+0080-U+009F, the characters that move text
 * (U+2028 and U+2029 line and paragraph separators; the bidirectional
 * marks, embeddings, overrides and isolates U+061C, U+200E-U+200F,
 * U+202A-U+202E, U+2066-U+2069), and every byte that is not part of valid
 * UTF-8 (a lone continuation byte, a cut sequence, an overlong form, a
 * surrogate, past U+10FFFF). A backslash becomes \\, so the result is
 * unambiguous: "\x1b" in it always means the byte 0x1b. For ASCII bytes
 * these are also the escapes of YAML's double-quoted scalars.
 *
 * The result goes into out[cap], always NUL-terminated; when it does not
 * fit it is cut between escapes (never inside one) and ends in "..."; the
 * return value is out (a NULL s gives "(null)"). zrt_printable_n reads n
 * bytes, NUL included, for strings that are not NUL-terminated.
 * Left out: other invisible or look-alike characters (zero-width spaces and
 * joiners, the byte-order mark, homoglyphs, combining marks), which cannot
 * move the cursor or change a terminal's state; quoting; line breaking. */
const char* zrt_printable(const char* s, char* out, size_t cap);
const char* zrt_printable_n(const void* s, size_t n, char* out, size_t cap);

/* zrt_printable into a temporary buffer of ZRT_PRINTABLE_CAP bytes that
 * lives until the end of the enclosing block, for use as an argument:
 *     zrt_errf(err, errlen, "tensor '%s': ...", PRINTABLE(t->name));  */
#define ZRT_PRINTABLE_CAP 1024
#define PRINTABLE(s) zrt_printable((s), (char[ZRT_PRINTABLE_CAP]){0}, ZRT_PRINTABLE_CAP)

#endif
