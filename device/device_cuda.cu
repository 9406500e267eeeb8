/*
 * device_cuda.cu — zdev_cuda(ordinal): one CUDA device as a ZDevice, and
 * the project's only caller of cudaSetDevice, cudaMalloc, cudaHostAlloc,
 * cudaStreamCreate and cudaEventCreate (tests aside).
 *
 * Opening a device binds the calling thread to it and creates its compute
 * stream: non-blocking, so it neither waits for nor is waited by the legacy
 * default stream, and every ordering between it and ZipCCL's streams is an
 * event.  Pinned host memory is cudaHostAlloc(portable), so a progress
 * thread's copies run at the bus's speed too.  A failure is reported (-1,
 * zdev_error: what failed and CUDA's message), never fatal here: the
 * kernel table makes it fatal, ZipCCL a result code.
 *
 * The build without CUDA has device_cuda_stub.c instead; the warp
 * emulator's build compiles this file as C++ over its stand-ins
 * (tests/gpu/emu), so the emulated GPU runs this very code.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "device.h"

namespace {

const int kMaxDevices = 64;
ZDevice g_dev[kMaxDevices];
int g_open[kMaxDevices];
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

int fail(ZDevice* d, const char* what, cudaError_t e) {
    (void)cudaGetLastError(); /* not sticky: the caller decides */
    return zdev_set_error("CUDA device %d: %s: %s", d->ordinal, what, cudaGetErrorString(e));
}
#define TRY(d, call)                                   \
    do {                                               \
        cudaError_t e_ = (call);                       \
        if (e_ != cudaSuccess) return fail(d, #call, e_); \
    } while (0)

int bind(ZDevice* d) {
    TRY(d, cudaSetDevice(d->ordinal));
    return 0;
}

void* alloc(ZDevice* d, size_t bytes) {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        fail(d, "cudaMalloc", e);
        return nullptr;
    }
    return p;
}
void dfree(ZDevice* d, void* p) {
    (void)d;
    cudaFree(p);
}
void* host_alloc(ZDevice* d, size_t bytes) {
    void* p = nullptr;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        fail(d, "cudaHostAlloc", e);
        return nullptr;
    }
    return p;
}
void host_free(ZDevice* d, void* p) {
    (void)d;
    cudaFreeHost(p);
}

int copy(ZDevice* d, void* dst, const void* src, size_t bytes, ZDevDir dir, void* stream) {
    const cudaMemcpyKind kind = dir == ZDEV_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                                : dir == ZDEV_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                             : cudaMemcpyDeviceToDevice;
    TRY(d, cudaMemcpyAsync(dst, src, bytes, kind, (cudaStream_t)stream));
    return 0;
}
int dmemset(ZDevice* d, void* p, int value, size_t bytes, void* stream) {
    TRY(d, cudaMemsetAsync(p, value, bytes, (cudaStream_t)stream));
    return 0;
}

int stream_create(ZDevice* d, void** stream) {
    cudaStream_t s = nullptr;
    TRY(d, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = (void*)s;
    return 0;
}
void stream_destroy(ZDevice* d, void* stream) {
    (void)d;
    cudaStreamDestroy((cudaStream_t)stream);
}
int stream_sync(ZDevice* d, void* stream) {
    TRY(d, cudaStreamSynchronize((cudaStream_t)stream));
    return 0;
}
int event_create(ZDevice* d, void** event, int timing) {
    cudaEvent_t e = nullptr;
    TRY(d, cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
    *event = (void*)e;
    return 0;
}
void event_destroy(ZDevice* d, void* event) {
    (void)d;
    cudaEventDestroy((cudaEvent_t)event);
}
int event_record(ZDevice* d, void* event, void* stream) {
    TRY(d, cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
    return 0;
}
int stream_wait_event(ZDevice* d, void* stream, void* event) {
    TRY(d, cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
    return 0;
}
int event_sync(ZDevice* d, void* event) {
    TRY(d, cudaEventSynchronize((cudaEvent_t)event));
    return 0;
}
int event_elapsed_ms(ZDevice* d, void* a, void* b, double* ms) {
    float f = 0.0f;
    TRY(d, cudaEventElapsedTime(&f, (cudaEvent_t)a, (cudaEvent_t)b));
    *ms = (double)f;
    return 0;
}
int synchronize(ZDevice* d) {
    TRY(d, cudaDeviceSynchronize());
    return 0;
}
int mem_info(ZDevice* d, size_t* free_bytes, size_t* total_bytes) {
    TRY(d, cudaMemGetInfo(free_bytes, total_bytes));
    return 0;
}

ZDeviceOps make_ops() {
    ZDeviceOps o;
    memset(&o, 0, sizeof o);
    o.bind = bind;
    o.alloc = alloc;
    o.free = dfree;
    o.host_alloc = host_alloc;
    o.host_free = host_free;
    o.copy = copy;
    o.memset = dmemset;
    o.stream_create = stream_create;
    o.stream_destroy = stream_destroy;
    o.stream_sync = stream_sync;
    o.event_create = event_create;
    o.event_destroy = event_destroy;
    o.event_record = event_record;
    o.stream_wait_event = stream_wait_event;
    o.event_sync = event_sync;
    o.event_elapsed_ms = event_elapsed_ms;
    o.synchronize = synchronize;
    o.mem_info = mem_info;
    return o;
}
const ZDeviceOps cuda_ops = make_ops();

} // namespace

extern "C" int zdev_cuda_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" ZDevice* zdev_cuda(int ordinal) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        zdev_set_error("no usable CUDA device (cudaGetDeviceCount: %s, %d devices)", cudaGetErrorString(e), n);
        return nullptr;
    }
    if (ordinal < 0 || ordinal >= n || ordinal >= kMaxDevices) {
        zdev_set_error("CUDA device %d asked for, but this machine has %d", ordinal, n);
        return nullptr;
    }
    pthread_mutex_lock(&g_mu);
    ZDevice* d = &g_dev[ordinal];
    if (!g_open[ordinal]) {
        d->name = "cuda";
        d->kind = ZDEV_KIND_CUDA;
        d->host_access = 0;
        d->ordinal = ordinal;
        d->ops = &cuda_ops;
        d->ctx = nullptr;
        cudaDeviceProp prop;
        void* s = nullptr;
        if ((e = cudaSetDevice(ordinal)) != cudaSuccess || (e = cudaGetDeviceProperties(&prop, ordinal)) != cudaSuccess) {
            fail(d, "opening it", e);
            pthread_mutex_unlock(&g_mu);
            return nullptr;
        }
        if (stream_create(d, &s)) {
            pthread_mutex_unlock(&g_mu);
            return nullptr;
        }
        snprintf(d->label, sizeof d->label, "%s (device %d of %d)", prop.name, ordinal, n);
        d->stream = s;
        g_open[ordinal] = 1;
    } else if (bind(d)) {
        pthread_mutex_unlock(&g_mu);
        return nullptr;
    }
    pthread_mutex_unlock(&g_mu);
    return d;
}
