/*
 * device_cuda.cu — zipcclDeviceMemoryCuda: the table of zipccl.h's device
 * buffers over MPI for one CUDA device.  Each communicator gets a
 * non-blocking stream of its own; a call's copies (cudaMemcpyAsync, then a
 * synchronize), codec and sum run there after an event recorded on the
 * caller's stream at issue (so after the work that wrote sendbuf, while the
 * caller's later work goes on); device scratch is cudaMalloc, host staging
 * cudaHostAlloc (pinned: the copies run at the bus's speed and need no
 * bounce buffer).  The ordinal travels in ctx, and bind makes the calling
 * thread (the communicator's progress thread) use that device.  Coding:
 * the CUDA codec on the device (codec_cuda.cu); a coded ReduceScatter's sum
 * runs the NCCL transport's canonical-order kernels
 * (transport_nccl_kernels.cu).  The stub for builds
 * without CUDA is device_cuda_stub.c.
 */
#include <stdint.h>

#include <cuda_runtime.h>

extern "C" {
#include "zipccl.h"
#include "zipccl_internal.h"
/* The canonical order's kernels (transport/transport_nccl_kernels.cu). */
int zipcclCudaAccumulate(float* acc, const void* x, size_t n, int dtype, int first, void* stream);
int zipcclCudaFinalize(void* out, const float* acc, size_t n, int dtype, int avg, int nranks, void* stream);
}

static int ordinalOf(void* ctx) { return (int)(intptr_t)ctx; }

static zipcclResult_t cudaFail(cudaError_t e, const char* what, void* ctx) {
    return zipcclSetError(zipcclSystemError, "CUDA device %d: %s: %s", ordinalOf(ctx), what, cudaGetErrorString(e));
}

static zipcclResult_t bindDevice(void* ctx) {
    cudaError_t e = cudaSetDevice(ordinalOf(ctx));
    return e == cudaSuccess ? zipcclSuccess : cudaFail(e, "cudaSetDevice", ctx);
}

static zipcclResult_t copy(void* ctx, void* dst, const void* src, size_t bytes, void* stream, cudaMemcpyKind kind,
                           const char* what) {
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    return e == cudaSuccess ? zipcclSuccess : cudaFail(e, what, ctx);
}
static zipcclResult_t toHost(void* ctx, void* dst, const void* src, size_t bytes, void* stream) {
    return copy(ctx, dst, src, bytes, stream, cudaMemcpyDeviceToHost, "cudaMemcpyAsync to the host");
}
static zipcclResult_t toDevice(void* ctx, void* dst, const void* src, size_t bytes, void* stream) {
    return copy(ctx, dst, src, bytes, stream, cudaMemcpyHostToDevice, "cudaMemcpyAsync to the device");
}

static void* devAlloc(void* ctx, size_t bytes) {
    (void)ctx;
    void* p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}
static void devFree(void* ctx, void* p) {
    (void)ctx;
    cudaFree(p);
}
static void* hostAlloc(void* ctx, size_t bytes) {
    (void)ctx;
    void* p = NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}
static void hostFree(void* ctx, void* p) {
    (void)ctx;
    cudaFreeHost(p);
}

static zipcclResult_t accumulate(void* ctx, float* acc, const void* x, size_t count, zipcclDataType_t dtype,
                                 int first, void* stream) {
    if (zipcclCudaAccumulate(acc, x, count, (int)dtype, first, stream) == 0) return zipcclSuccess;
    return cudaFail(cudaGetLastError(), "the accumulate kernel", ctx);
}
static zipcclResult_t finalize(void* ctx, void* out, const float* acc, size_t count, zipcclDataType_t dtype,
                               zipcclRedOp_t op, int n, void* stream) {
    if (zipcclCudaFinalize(out, acc, count, (int)dtype, op == zipcclAvg, n, stream) == 0) return zipcclSuccess;
    return cudaFail(cudaGetLastError(), "the finalize kernel", ctx);
}

/* The communicator's stream: non-blocking, so it does not wait for the
 * legacy default stream's later work (the caller's compute), only for the
 * event each call records at issue. */
static zipcclResult_t streamCreate(void* ctx, void** stream) {
    cudaStream_t st = nullptr;
    cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (e != cudaSuccess) return cudaFail(e, "cudaStreamCreateWithFlags", ctx);
    *stream = st;
    return zipcclSuccess;
}
static void streamDestroy(void* ctx, void* stream) {
    (void)ctx;
    cudaStreamDestroy((cudaStream_t)stream);
}
static zipcclResult_t eventRecord(void* ctx, void* stream, void** event) {
    cudaError_t e = cudaSuccess;
    if (!*event) {
        cudaEvent_t ev = nullptr;
        e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (e != cudaSuccess) return cudaFail(e, "cudaEventCreateWithFlags", ctx);
        *event = ev;
    }
    e = cudaEventRecord((cudaEvent_t)*event, (cudaStream_t)stream);
    return e == cudaSuccess ? zipcclSuccess : cudaFail(e, "cudaEventRecord", ctx);
}
static zipcclResult_t timedEventRecord(void* ctx, void* stream, void** event) {
    cudaEvent_t ev = nullptr;
    cudaError_t e = cudaEventCreate(&ev); /* with timing */
    if (e != cudaSuccess) return cudaFail(e, "cudaEventCreate", ctx);
    e = cudaEventRecord(ev, (cudaStream_t)stream);
    if (e != cudaSuccess) {
        cudaEventDestroy(ev);
        return cudaFail(e, "cudaEventRecord", ctx);
    }
    *event = ev;
    return zipcclSuccess;
}
static zipcclResult_t streamWaitEvent(void* ctx, void* stream, void* event) {
    cudaError_t e = cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0);
    return e == cudaSuccess ? zipcclSuccess : cudaFail(e, "cudaStreamWaitEvent", ctx);
}
static void eventDestroy(void* ctx, void* event) {
    (void)ctx;
    cudaEventDestroy((cudaEvent_t)event);
}
static zipcclResult_t synchronize(void* ctx, void* stream) {
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)stream);
    return e == cudaSuccess ? zipcclSuccess : cudaFail(e, "cudaStreamSynchronize", ctx);
}

extern "C" zipcclResult_t zipcclDeviceMemoryCuda(int device, zipcclDeviceMemory_t* out) {
    if (!out) return zipcclSetError(zipcclInvalidArgument, "zipcclDeviceMemoryCuda: null argument");
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return zipcclSetError(zipcclUnsupported, "zipcclDeviceMemoryCuda: no usable CUDA device (%s)",
                              cudaGetErrorString(e));
    }
    if (device < 0 || device >= n)
        return zipcclSetError(zipcclUnsupported, "zipcclDeviceMemoryCuda: device %d, but this machine has %d", device,
                              n);
    zipcclDeviceMemory_t t = {};
    t.name = "cuda";
    t.ctx = (void*)(intptr_t)device;
    t.coding = zipcclDeviceCodeCuda;
    t.bind = bindDevice;
    t.toHost = toHost;
    t.toDevice = toDevice;
    t.alloc = devAlloc;
    t.free = devFree;
    t.hostAlloc = hostAlloc;
    t.hostFree = hostFree;
    t.accumulate = accumulate;
    t.finalize = finalize;
    t.streamCreate = streamCreate;
    t.streamDestroy = streamDestroy;
    t.eventRecord = eventRecord;
    t.streamWaitEvent = streamWaitEvent;
    t.timedEventRecord = timedEventRecord;
    t.eventDestroy = eventDestroy;
    t.synchronize = synchronize;
    *out = t;
    return zipcclSuccess;
}
