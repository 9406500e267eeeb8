/*
 * idle_touch.c — what touching memory costs right after the process slept:
 * a machine probe, not part of the library.
 *
 *   cc -O2 -o /tmp/idle_touch scripts/idle_touch.c && /tmp/idle_touch [MiB] [gap_ms]
 *
 * Reads one byte per cache line of a MiB-sized buffer (default 8) four times
 * in a row, after sleeping gap_ms (default 100), five times over; once with
 * the buffer on 4 KiB pages (MADV_NOHUGEPAGE) and once on 2 MiB pages
 * (MADV_HUGEPAGE). On bare metal the first read after the sleep costs about
 * what the others do. On a machine that re-maps a guest's pages after it
 * idles (nested virtualisation, some sandboxes) the first read pays per page
 * touched, so 4 KiB pages cost far more than 2 MiB ones: this is what a
 * collective issued after a compute phase meets there (zipccl-bench --gap).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void probe(size_t bytes, int gap_ms, int huge) {
    const size_t align = (size_t)2 << 20;
    bytes = (bytes + align - 1) / align * align;
    volatile char* a = NULL;
    if (posix_memalign((void**)&a, align, bytes)) {
        fprintf(stderr, "idle_touch: out of memory\n");
        exit(1);
    }
    madvise((void*)a, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    memset((void*)a, 1, bytes);
    printf("%-10s after %4d ms asleep, 4 reads of %zu MiB (us):\n", huge ? "2 MiB pages" : "4 KiB pages",
           gap_ms, bytes >> 20);
    for (int k = 0; k < 5; k++) {
        const struct timespec ts = {gap_ms / 1000, (long)(gap_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        printf("   ");
        for (int j = 0; j < 4; j++) {
            const double t0 = now();
            long s = 0;
            for (size_t i = 0; i < bytes; i += 64) s += a[i];
            a[0] = (char)s;
            printf(" %8.0f", (now() - t0) * 1e6);
        }
        printf("\n");
    }
    free((void*)a);
}

int main(int argc, char** argv) {
    const size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 8;
    const int gap = argc > 2 ? atoi(argv[2]) : 100;
    if (mib < 1 || gap < 0) {
        fprintf(stderr, "usage: idle_touch [MiB >= 1] [gap_ms >= 0]\n");
        return 2;
    }
    probe(mib << 20, gap, 0);
    probe(mib << 20, gap, 1);
    return 0;
}
