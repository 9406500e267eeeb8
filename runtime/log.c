/*
 * log.c — fatal checks, clocks, hashes, machine probes (see log.h).
 */
#include "log.h"

#include <cblas.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void zrt_fatal(const char* file, int line, const char* fmt, ...) {
    int rank = 0, init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    zrt_trim_utf8(msg);
    fflush(stdout);
    fprintf(stderr, "FATAL (rank %d) %s:%d: %s\n", rank, file, line, msg);
    fflush(stderr);
    if (init && !fin) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

void* zrt_malloc(size_t bytes, const char* what) {
    void* p = malloc(bytes ? bytes : 1);
    trainCheck(p, "out of memory allocating %zu bytes for %s", bytes, what);
    return p;
}

void* zrt_calloc(size_t n, size_t size, const char* what) {
    void* p = calloc(n ? n : 1, size ? size : 1);
    trainCheck(p, "out of memory allocating %zu x %zu bytes for %s", n, size, what);
    return p;
}

double zrt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t zrt_fnv1a64(uint64_t h, const void* data, size_t n) {
    const unsigned char* p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

int zrt_file_fnv1a64(const char* path, uint64_t* hash, size_t* bytes) {
    FILE* fp = fopen(path, "rb");
    if (!fp) return -1;
    unsigned char buf[1 << 16];
    uint64_t h = ZRT_FNV_INIT;
    size_t n, total = 0;
    while ((n = fread(buf, 1, sizeof buf, fp)) > 0) {
        h = zrt_fnv1a64(h, buf, n);
        total += n;
    }
    const int bad = ferror(fp);
    fclose(fp);
    if (bad) return -1;
    *hash = h;
    if (bytes) *bytes = total;
    return 0;
}

int zrt_errf(char* err, size_t errlen, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    if (errlen) zrt_trim_utf8(err); /* a cut message ends between characters */
    return -1;
}

double zrt_sgemm_peak(double seconds) {
    /* 1024^3: large enough that every BLAS thread reaches SGEMM's steady state
     * (256^3 underestimated a 2-thread peak by ~40%), small enough that one
     * call takes ~10 ms. The peak is the best single call: on a shared machine
     * the slower calls measure the neighbours, not the hardware. */
    const int n = 1024;
    float* a = zrt_malloc((size_t)n * n * sizeof(float), "sgemm probe");
    float* b = zrt_malloc((size_t)n * n * sizeof(float), "sgemm probe");
    float* c = zrt_malloc((size_t)n * n * sizeof(float), "sgemm probe");
    for (int i = 0; i < n * n; i++) {
        a[i] = (float)((i * 7) % 13) * 0.01f;
        b[i] = (float)((i * 5) % 11) * 0.01f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    const double flops = 2.0 * n * n * (double)n;
    double t0 = zrt_now(), best = 0;
    do {
        double t1 = zrt_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                    n);
        double rate = flops / (zrt_now() - t1);
        if (rate > best) best = rate;
    } while (zrt_now() - t0 < seconds);
    free(a);
    free(b);
    free(c);
    return best;
}

size_t zrt_mem_available(void) {
    FILE* f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                fclose(f);
                return (size_t)kb * 1024;
            }
        fclose(f);
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : 0;
}

/* A "Name:   N kB" line of /proc/self/status, in bytes (0 if absent). */
static size_t proc_status_bytes(const char* name) {
    FILE* f = fopen("/proc/self/status", "r");
    size_t bytes = 0;
    if (f) {
        char line[256];
        const size_t n = strlen(name);
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, name, n) && sscanf(line + n, ": %llu kB", &kb) == 1) {
                bytes = (size_t)kb * 1024;
                break;
            }
        fclose(f);
    }
    return bytes;
}

size_t zrt_rss_peak(void) { return proc_status_bytes("VmHWM"); }
size_t zrt_rss_now(void) { return proc_status_bytes("VmRSS"); }

const char* zrt_fmt_bytes(double bytes, char* buf, size_t n) {
    const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, n, "%.2f %s", bytes, unit[u]);
    return buf;
}

