/*
 * device_host.c — the two devices whose memory is host memory: zdev_cpu()
 * (plain memory the host may read) and zdev_cpu_guarded() (memory the host
 * cannot touch outside the device's own calls and the kernels that enter
 * the guard).
 *
 * Both finish every copy and memset before returning, so a stream is a
 * token, a wait is already satisfied and an event is the host's monotonic
 * clock at the moment it is recorded (what --trace times on a CPU run).
 *
 * The guard.  Every guarded allocation is its own anonymous mapping, kept
 * PROT_NONE except while a device call or a kernel (zdev_guard_enter /
 * zdev_guard_leave, kernels/cpu_guarded.c) runs: a host loop that reads a
 * device pointer anywhere in models/ or runtime/ dies with SIGSEGV at the
 * line that did it, on a machine without a GPU, instead of on the first GPU
 * run.  One recursive lock is held from enter to leave (and around
 * allocation), so ZipCCL's progress threads may copy device buffers while
 * the compute thread runs kernels: they take turns, and no thread sees a
 * mapping another has just closed.  Pinned host memory (host_alloc) is
 * plain malloc on both.
 *
 * Leaves out: reads of freed memory after its mapping is reused (freed
 * mappings are unmapped, so those fault too), the kernels' own index
 * arithmetic (AddressSanitizer's job).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "device.h"

/* ---- shared: pinned memory, streams, events --------------------------------- */

static void* h_host_alloc(ZDevice* d, size_t bytes) {
    void* p = malloc(bytes);
    if (!p) zdev_set_error("%s: out of host memory (%zu bytes)", d->name, bytes);
    return p;
}
static void h_host_free(ZDevice* d, void* p) {
    (void)d;
    free(p);
}

static char g_compute_token; /* the compute stream of both devices */

static int h_stream_create(ZDevice* d, void** stream) {
    *stream = malloc(1);
    return *stream ? 0 : zdev_set_error("%s: out of host memory for a stream", d->name);
}
static void h_stream_destroy(ZDevice* d, void* stream) {
    (void)d;
    if (stream != &g_compute_token) free(stream);
}
static int h_stream_sync(ZDevice* d, void* stream) {
    (void)d, (void)stream;
    return 0;
}
static int h_event_create(ZDevice* d, void** event, int timing) {
    (void)timing;
    *event = calloc(1, sizeof(double));
    return *event ? 0 : zdev_set_error("%s: out of host memory for an event", d->name);
}
static void h_event_destroy(ZDevice* d, void* event) {
    (void)d;
    free(event);
}
static int h_event_record(ZDevice* d, void* event, void* stream) {
    (void)d, (void)stream;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *(double*)event = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    return 0;
}
static int h_stream_wait_event(ZDevice* d, void* stream, void* event) {
    (void)d, (void)stream;
    return event ? 0 : zdev_set_error("%s: waiting for a null event", d->name);
}
static int h_event_sync(ZDevice* d, void* event) {
    (void)d, (void)event;
    return 0;
}
static int h_event_elapsed_ms(ZDevice* d, void* a, void* b, double* ms) {
    (void)d;
    *ms = (*(double*)b - *(double*)a) * 1e3;
    return 0;
}
static int h_synchronize(ZDevice* d) {
    (void)d;
    return 0;
}
static int h_mem_info(ZDevice* d, size_t* free_bytes, size_t* total_bytes) {
    (void)d, (void)free_bytes, (void)total_bytes;
    return -1; /* host memory: the trainer's estimate reads /proc itself */
}

/* ---- zdev_cpu ----------------------------------------------------------------- */

/* 64-byte aligned (the activation arena's SIMD loads); size rounded up so
 * aligned_alloc's contract holds */
static void* c_alloc(ZDevice* d, size_t bytes) {
    void* p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) zdev_set_error("%s: out of memory (%zu bytes)", d->name, bytes);
    return p;
}
static void c_free(ZDevice* d, void* p) {
    (void)d;
    free(p);
}
static int c_copy(ZDevice* d, void* dst, const void* src, size_t bytes, ZDevDir dir, void* stream) {
    (void)d, (void)dir, (void)stream;
    memmove(dst, src, bytes);
    return 0;
}
static int c_memset(ZDevice* d, void* p, int value, size_t bytes, void* stream) {
    (void)d, (void)stream;
    memset(p, value, bytes);
    return 0;
}

static const ZDeviceOps cpu_ops = {
    .alloc = c_alloc, .free = c_free, .host_alloc = h_host_alloc, .host_free = h_host_free,
    .copy = c_copy, .memset = c_memset, .stream_create = h_stream_create,
    .stream_destroy = h_stream_destroy, .stream_sync = h_stream_sync, .event_create = h_event_create,
    .event_destroy = h_event_destroy, .event_record = h_event_record,
    .stream_wait_event = h_stream_wait_event, .event_sync = h_event_sync,
    .event_elapsed_ms = h_event_elapsed_ms, .synchronize = h_synchronize, .mem_info = h_mem_info,
};

static ZDevice cpu_device = {.name = "cpu", .kind = ZDEV_KIND_CPU, .host_access = 1, .ordinal = -1,
                             .label = "host memory", .ops = &cpu_ops, .stream = &g_compute_token};

ZDevice* zdev_cpu(void) { return &cpu_device; }

/* ---- zdev_cpu_guarded ---------------------------------------------------------- */

typedef struct {
    void* p;
    size_t len; /* mapped bytes, whole pages */
} Mapping;

static Mapping* g_maps;
static size_t g_n, g_cap;
static int g_open; /* nesting depth: a kernel may call another (under g_mu) */
static pthread_mutex_t g_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static size_t page_round(size_t n) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

static void protect_all(int prot) {
    for (size_t i = 0; i < g_n; i++)
        if (mprotect(g_maps[i].p, g_maps[i].len, prot)) {
            perror("cpu_guarded: mprotect");
            abort();
        }
}

void zdev_guard_enter(void) {
    pthread_mutex_lock(&g_mu);
    if (g_open++ == 0) protect_all(PROT_READ | PROT_WRITE);
}

void zdev_guard_leave(void) {
    if (--g_open == 0) protect_all(PROT_NONE);
    pthread_mutex_unlock(&g_mu);
}

static void* g_alloc(ZDevice* d, size_t bytes) {
    const size_t len = page_round(bytes);
    pthread_mutex_lock(&g_mu);
    void* p = mmap(NULL, len, g_open ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        pthread_mutex_unlock(&g_mu);
        zdev_set_error("%s: out of memory (mmap of %zu bytes)", d->name, len);
        return NULL;
    }
    if (g_n == g_cap) {
        const size_t cap = g_cap ? 2 * g_cap : 64;
        Mapping* m = realloc(g_maps, cap * sizeof *m);
        if (!m) {
            munmap(p, len);
            pthread_mutex_unlock(&g_mu);
            zdev_set_error("%s: out of host memory for the mapping table", d->name);
            return NULL;
        }
        g_maps = m;
        g_cap = cap;
    }
    g_maps[g_n++] = (Mapping){p, len};
    pthread_mutex_unlock(&g_mu);
    return p;
}

static void g_free(ZDevice* d, void* p) {
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_n; i++)
        if (g_maps[i].p == p) {
            munmap(p, g_maps[i].len);
            g_maps[i] = g_maps[--g_n];
            pthread_mutex_unlock(&g_mu);
            return;
        }
    fprintf(stderr, "%s: free of %p, which this device did not allocate\n", d->name, p);
    abort();
}

static int g_copy(ZDevice* d, void* dst, const void* src, size_t bytes, ZDevDir dir, void* stream) {
    zdev_guard_enter();
    c_copy(d, dst, src, bytes, dir, stream);
    zdev_guard_leave();
    return 0;
}
static int g_memset(ZDevice* d, void* p, int value, size_t bytes, void* stream) {
    zdev_guard_enter();
    c_memset(d, p, value, bytes, stream);
    zdev_guard_leave();
    return 0;
}

static const ZDeviceOps guarded_ops = {
    .alloc = g_alloc, .free = g_free, .host_alloc = h_host_alloc, .host_free = h_host_free,
    .copy = g_copy, .memset = g_memset, .stream_create = h_stream_create,
    .stream_destroy = h_stream_destroy, .stream_sync = h_stream_sync, .event_create = h_event_create,
    .event_destroy = h_event_destroy, .event_record = h_event_record,
    .stream_wait_event = h_stream_wait_event, .event_sync = h_event_sync,
    .event_elapsed_ms = h_event_elapsed_ms, .synchronize = h_synchronize, .mem_info = h_mem_info,
};

static ZDevice guarded_device = {.name = "cpu_guarded", .kind = ZDEV_KIND_GUARDED, .host_access = 0,
                                 .ordinal = -1, .label = "host memory, guarded",
                                 .ops = &guarded_ops, .stream = &g_compute_token};

ZDevice* zdev_cpu_guarded(void) { return &guarded_device; }
