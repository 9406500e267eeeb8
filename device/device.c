/*
 * device.c — the device API every caller uses (device.h), over any device's
 * table: a NULL stream becomes the compute stream, a blocking copy is the
 * asynchronous copy then a stream synchronisation, and every host wait,
 * allocation and free is counted here, once for all devices, so the counts
 * of the guarded CPU device, the emulated GPU and a real GPU are the same
 * program's.  The devices themselves are device_host.c, device_guarded.c
 * and device_cuda.cu.
 *
 * Leaves out: checking pointers against the allocations they came from
 * (the guarded device faults, the CUDA emulator checks copy directions).
 */
#include "device.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- errors ------------------------------------------------------------- */

static _Thread_local char t_err[512];

const char* zdev_error(void) { return t_err; }

int zdev_set_error(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_err, sizeof t_err, fmt, ap);
    va_end(ap);
    return -1;
}

void zdev_fatal(const char* what, const char* file, int line) {
    fprintf(stderr, "FATAL device call %s failed at %s:%d: %s\n", what, file, line,
            t_err[0] ? t_err : "(no reason given)");
    fflush(stderr);
    exit(1);
}

/* ---- counts ---------------------------------------------------------------- */

static ZDevCounters g_counts;
static pthread_t g_compute;
static int g_compute_set;

void zdev_set_compute_thread(void) {
    g_compute = pthread_self();
    __atomic_store_n(&g_compute_set, 1, __ATOMIC_RELEASE);
}

static ZDevCount* mine(void) {
    if (!__atomic_load_n(&g_compute_set, __ATOMIC_ACQUIRE) || pthread_equal(pthread_self(), g_compute))
        return &g_counts.compute;
    return &g_counts.other;
}
#define COUNT(field) __atomic_fetch_add(&mine()->field, 1, __ATOMIC_RELAXED)

void zdev_counters(ZDevCounters* out) {
    const uint64_t* src = (const uint64_t*)&g_counts;
    uint64_t* dst = (uint64_t*)out;
    for (size_t i = 0; i < sizeof g_counts / sizeof(uint64_t); i++) dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

void zdev_count_sync(void) { COUNT(syncs); }

/* ---- memory ------------------------------------------------------------------ */

void* zdev_alloc(ZDevice* d, size_t bytes) {
    COUNT(allocs);
    return d->ops->alloc(d, bytes ? bytes : 1);
}

void zdev_free(ZDevice* d, void* p) {
    if (!p) return;
    COUNT(frees);
    d->ops->free(d, p);
}

void* zdev_host_alloc(ZDevice* d, size_t bytes) {
    COUNT(allocs);
    return d->ops->host_alloc(d, bytes ? bytes : 1);
}

void zdev_host_free(ZDevice* d, void* p) {
    if (!p) return;
    COUNT(frees);
    d->ops->host_free(d, p);
}

int zdev_copy_async(ZDevice* d, void* dst, const void* src, size_t bytes, ZDevDir dir, void* stream) {
    if (!bytes) return 0;
    return d->ops->copy(d, dst, src, bytes, dir, zdev_stream_of(d, stream));
}

int zdev_copy(ZDevice* d, void* dst, const void* src, size_t bytes, ZDevDir dir, void* stream) {
    if (!bytes) return 0;
    COUNT(copies);
    stream = zdev_stream_of(d, stream);
    if (d->ops->copy(d, dst, src, bytes, dir, stream)) return -1;
    return d->ops->stream_sync(d, stream);
}

int zdev_upload(ZDevice* d, void* dst, const void* src, size_t bytes) {
    return zdev_copy(d, dst, src, bytes, ZDEV_HOST_TO_DEVICE, NULL);
}

int zdev_download(ZDevice* d, void* dst, const void* src, size_t bytes) {
    return zdev_copy(d, dst, src, bytes, ZDEV_DEVICE_TO_HOST, NULL);
}

int zdev_memset_async(ZDevice* d, void* p, int value, size_t bytes, void* stream) {
    if (!bytes) return 0;
    return d->ops->memset(d, p, value, bytes, zdev_stream_of(d, stream));
}

int zdev_mem_info(ZDevice* d, size_t* free_bytes, size_t* total_bytes) {
    return d->ops->mem_info ? d->ops->mem_info(d, free_bytes, total_bytes) : -1;
}

/* ---- streams, events, binding ---------------------------------------------------- */

int zdev_bind(ZDevice* d) { return d->ops->bind ? d->ops->bind(d) : 0; }

int zdev_stream_create(ZDevice* d, void** stream) { return d->ops->stream_create(d, stream); }

void zdev_stream_destroy(ZDevice* d, void* stream) {
    if (stream) d->ops->stream_destroy(d, stream);
}

int zdev_stream_sync(ZDevice* d, void* stream) {
    COUNT(syncs);
    return d->ops->stream_sync(d, zdev_stream_of(d, stream));
}

int zdev_event_create(ZDevice* d, void** event, int timing) { return d->ops->event_create(d, event, timing); }

void zdev_event_destroy(ZDevice* d, void* event) {
    if (event) d->ops->event_destroy(d, event);
}

int zdev_event_record(ZDevice* d, void* event, void* stream) {
    return d->ops->event_record(d, event, zdev_stream_of(d, stream));
}

int zdev_stream_wait_event(ZDevice* d, void* stream, void* event) {
    return d->ops->stream_wait_event(d, zdev_stream_of(d, stream), event);
}

int zdev_event_sync(ZDevice* d, void* event) {
    COUNT(syncs);
    return d->ops->event_sync(d, event);
}

int zdev_event_elapsed_ms(ZDevice* d, void* a, void* b, double* ms) {
    *ms = 0.0;
    if (!a || !b) return zdev_set_error("zdev_event_elapsed_ms: a null event");
    if (zdev_event_sync(d, b)) return -1;
    return d->ops->event_elapsed_ms(d, a, b, ms);
}

int zdev_synchronize(ZDevice* d) {
    COUNT(syncs);
    return d->ops->synchronize(d);
}
