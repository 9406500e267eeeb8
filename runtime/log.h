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

#include "printable.h"

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

/* zrt_printable, PRINTABLE: runtime/printable.h (included above). */

#endif
