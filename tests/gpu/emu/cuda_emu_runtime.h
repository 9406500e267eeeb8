/*
 * cuda_emu_runtime.h — the parts of the CUDA runtime, bf16 header and cuBLAS
 * that kernels/cuda.cu uses, as plain C++ over the warp emulator
 * (tests/gpu/warp_emu.h), so the model's CUDA kernel table compiles and runs
 * on a machine without a GPU and is checked against the CPU table
 * (tests/test_model_cuda_emu.sh).
 *
 * How kernels/cuda.cu becomes host code (the Makefile's rule for
 * BUILD/gpu/test_model_emu): a sed rewrites each launch `k<<<g, b>>>(args)`
 * into `emu::launcher(k, g, b)(args)`; this directory comes first on the
 * include path, so <cuda_runtime.h>, <cuda_bf16.h> and <cublas_v2.h> are the
 * files here; everything else in the file compiles as it is.
 *
 *   - threads: threadIdx, blockIdx, blockDim, gridDim read the emulator's
 *     state; __syncthreads and __shfl_xor_sync are its collectives; a
 *     __shared__ array is a static (blocks run one after another).
 *   - memory: "device" memory is host memory, but every allocation is
 *     recorded, and a copy whose direction does not match where its
 *     pointers live fails as CUDA would not (it would corrupt or fault).
 *   - cuBLAS: its three GEMMs through the host's BLAS (OpenBLAS's SGEMM; bf16
 *     operands widened first): the emulator checks the project's kernels,
 *     not cuBLAS, and the checks keep cuBLAS-sized bounds.
 *   - arithmetic: __fadd_rn and friends are the host's IEEE operations, no
 *     contraction (nvcc contracts a*b+c into an FMA elsewhere, so results
 *     other than the _rn paths differ from a GPU's in the last bits).
 *
 *   - streams: by default work runs when it is issued, in order.  With
 *     ZK_EMU_ASYNC=1 every stream's work (kernels, async copies and sets,
 *     cuBLAS on the handle's stream, the codec's launches) is queued on its
 *     stream and runs only when something waits for it: a stream or event
 *     synchronisation, a free (CUDA's cudaFree synchronises the device), a
 *     stream's wait for an event on another (it runs that stream up to the
 *     event when its turn comes).  A host read, or a second stream, that is
 *     not ordered after the work sees it undone, as it may on a device; so a
 *     missing event or wait changes the bits the tests compare.  The legacy
 *     stream (NULL) runs at once, after every queue.  The blocking
 *     cudaMemcpy does not wait for the non-blocking streams, as on a device.
 *
 * Not modelled: concurrency between streams (queued work runs in the order
 * it is forced), memory-ordering races, timing. Events read the host clock.
 */
#ifndef ZIPCCL_TEST_CUDA_EMU_RUNTIME_H
#define ZIPCCL_TEST_CUDA_EMU_RUNTIME_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <type_traits>
#include <vector>

#include <cblas.h>

#include "../warp_emu.h"

/* ---- execution spaces and thread indices ---------------------------------- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define ZK_UNROLL /* #pragma unroll is nvcc's; g++ -Wall would warn */
#define __shared__ static /* one block at a time: one copy serves each block in turn */

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

/* a stream: its queue (ZK_EMU_ASYNC), how many ops were issued and run */
struct CUstream_emu {
    int flags;
    std::deque<std::function<void()>> q;
    uint64_t issued, done;
};

namespace emu {
inline dim3 thread_idx() { return dim3(cur, 0, 0); }
inline dim3 block_idx() {
    const uint64_t b = block_id, gx = grid_dim[0], gy = grid_dim[1];
    return dim3((unsigned)(b % gx), (unsigned)(b / gx % gy), (unsigned)(b / (gx * gy)));
}
inline dim3 block_dim() { return dim3(nthreads, 1, 1); }
inline dim3 grid_dims() { return dim3(grid_dim[0], grid_dim[1], grid_dim[2]); }

/* ---- streams (ZK_EMU_ASYNC=1: queued until waited for) ---- */
inline bool async_streams() {
    static const bool on = [] {
        const char* v = getenv("ZK_EMU_ASYNC");
        return v && !strcmp(v, "1");
    }();
    return on;
}
/* every queue, and the work running from it, under one lock: a
 * communicator's progress thread and the caller's take turns */
inline std::recursive_mutex queue_lock;
inline std::set<CUstream_emu*>& live_streams() {
    static std::set<CUstream_emu*> s;
    return s;
}
/* run stream s's queue until `seq` of its ops have run */
inline void run_until(CUstream_emu* s, uint64_t seq) {
    std::lock_guard<std::recursive_mutex> hold(queue_lock);
    while (s->done < seq && !s->q.empty()) {
        std::function<void()> fn = std::move(s->q.front());
        s->q.pop_front();
        s->done++;
        fn();
    }
}
inline void run_all() {
    std::lock_guard<std::recursive_mutex> hold(queue_lock);
    for (CUstream_emu* s : live_streams()) run_until(s, s->issued);
}
inline void enqueue(void* stream, std::function<void()> fn) {
    std::lock_guard<std::recursive_mutex> hold(queue_lock);
    CUstream_emu* s = (CUstream_emu*)stream;
    if (!async_streams()) return fn();
    if (!s) { /* the legacy stream: after everything queued */
        run_all();
        return fn();
    }
    s->q.push_back(std::move(fn));
    s->issued++;
}
inline void sync_stream(void* stream) {
    if (stream) run_until((CUstream_emu*)stream, ((CUstream_emu*)stream)->issued);
    else run_all();
}
/* the codec's launches and copies (warp_emu.h's hooks) go the same way */
inline const bool hooks_set = [] {
    stream_enqueue = enqueue;
    stream_sync = sync_stream;
    return true;
}();
template <class S>
inline void* as_stream(S s) {
    if constexpr (std::is_pointer<S>::value) return (void*)s;
    else return nullptr;
}

/* k<<<grid, block, smem, stream>>>(args) becomes launcher(k, grid, block,
 * smem, stream)(args): the kernel runs to completion under the emulator,
 * when its stream gets to it (its arguments copied at the launch, as CUDA
 * copies them). */
template <class F>
struct Launcher {
    F kernel;
    unsigned grid[3], block;
    size_t smem;
    void* stream;
    template <class... A>
    void operator()(A... args) const {
        const F k = kernel;
        const unsigned g[3] = {grid[0], grid[1], grid[2]}, b = block;
        const size_t sm = smem;
        enqueue(stream, [=]() {
            const unsigned gg[3] = {g[0], g[1], g[2]};
            launch3(gg, b, sm, [&]() { k(args...); });
        });
    }
};
template <class F, class S = void*>
Launcher<F> launcher(F kernel, dim3 grid, dim3 block, size_t smem = 0, S stream = nullptr) {
    if (block.y != 1 || block.z != 1) die("kernels/cuda.cu launches one-dimensional blocks only");
    if (!grid.x || !grid.y || !grid.z) die("a launch with an empty grid (CUDA refuses it)");
    Launcher<F> l;
    l.kernel = kernel;
    l.grid[0] = grid.x, l.grid[1] = grid.y, l.grid[2] = grid.z;
    l.block = block.x;
    l.smem = smem;
    l.stream = as_stream(stream);
    return l;
}
} // namespace emu

#define threadIdx (emu::thread_idx())
#define blockIdx (emu::block_idx())
#define blockDim (emu::block_dim())
#define gridDim (emu::grid_dims())

inline void __syncthreads() { emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    if (mask != 0xffffffffu) emu::die("__syncwarp with a partial mask");
    emu::collective(emu::OP_SYNCWARP, 0, 0);
}

/* Dynamic shared memory (`extern __shared__ T name[]` on a device, which
 * C++ cannot spell): kernels/cuda.cu declares it through this macro, here
 * the launch's emu::smem, sized by its third launch argument. */
#define ZK_DYNAMIC_SMEM(name) unsigned char* name = emu::smem.data()

template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
    static_assert(sizeof(T) == 4, "the emulator shuffles 32-bit values");
    if (mask != 0xffffffffu) emu::die("__shfl_xor_sync with a partial mask");
    uint32_t u;
    memcpy(&u, &v, 4);
    const uint32_t r = emu::collective(emu::OP_SHFL, u, (int)((emu::cur & 31) ^ (unsigned)lane_mask));
    T out;
    memcpy(&out, &r, 4);
    return out;
}

/* ---- device arithmetic ---------------------------------------------------- */

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

/* ---- bf16 ------------------------------------------------------------------ */

struct __nv_bfloat16 {
    uint16_t bits;
};
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
    __nv_bfloat16 b;
    b.bits = u;
    return b;
}
static_assert(sizeof(__nv_bfloat16) == 2, "bf16 is two bytes");

/* ---- the runtime: errors, devices, memory, events ------------------------- */

typedef enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 } cudaError_t;
typedef cudaError_t cudaError;
typedef enum {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3
} cudaMemcpyKind;
typedef CUstream_emu* cudaStream_t;
enum { cudaStreamDefault = 0, cudaStreamNonBlocking = 1 };
enum { cudaEventDefault = 0, cudaEventDisableTiming = 2 };
enum { cudaHostAllocDefault = 0, cudaHostAllocPortable = 1 };
/* an event: the host clock when it ran, and where it was recorded (the
 * stream and how many of its ops come before it) */
struct CUevent_emu {
    double t;
    unsigned flags;
    CUstream_emu* s;
    uint64_t seq;
};
typedef CUevent_emu* cudaEvent_t;
struct cudaDeviceProp {
    char name[256];
};

namespace emu {
/* every live allocation: base -> bytes; device (1) or pinned host (0) */
struct Alloc {
    size_t bytes;
    int device;
};
inline std::map<const char*, Alloc>& allocs() {
    static std::map<const char*, Alloc> m;
    return m;
}
inline std::recursive_mutex map_lock; /* the map is shared by every thread */
inline cudaError_t& last_error() {
    static cudaError_t e = cudaSuccess;
    return e;
}
/* 1 if [p, p + n) lies in a device allocation, 0 if it touches none, and a
 * failure (CUDA would fault or corrupt) if it straddles one's end */
inline int on_device(const void* p, size_t n) {
    std::lock_guard<std::recursive_mutex> hold(map_lock);
    auto& m = allocs();
    auto it = m.upper_bound((const char*)p);
    if (it == m.begin()) return 0;
    --it;
    const char* base = it->first;
    if ((const char*)p >= base + it->second.bytes) return 0;
    if ((const char*)p + n > base + it->second.bytes) die("a copy runs past the end of its allocation");
    return it->second.device;
}
inline void* allocate(size_t bytes, int device) {
    void* p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!p) return nullptr;
    memset(p, 0xCD, bytes); /* garbage, as cudaMalloc leaves it */
    std::lock_guard<std::recursive_mutex> hold(map_lock);
    allocs()[(const char*)p] = Alloc{bytes, device};
    return p;
}
inline cudaError_t release(void* p, int device) {
    if (!p) return cudaSuccess;
    std::lock_guard<std::recursive_mutex> hold(map_lock);
    auto it = allocs().find((const char*)p);
    if (it == allocs().end() || it->second.device != device) die("freeing memory this API did not allocate");
    allocs().erase(it);
    free(p);
    return cudaSuccess;
}
inline double now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
} // namespace emu

inline const char* cudaGetErrorString(cudaError_t e) {
    return e == cudaSuccess ? "no error" : e == cudaErrorMemoryAllocation ? "out of memory" : "invalid argument";
}
inline cudaError_t cudaGetLastError() {
    const cudaError_t e = emu::last_error();
    emu::last_error() = cudaSuccess;
    return e;
}
inline cudaError_t cudaGetDeviceCount(int* n) {
    *n = 1;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidValue; }
/* The name is the emulator's own, or ZRT_EMU_DEVICE_NAME: a test runs the
 * trainer as if on a named card (tests/test_train_cuda_emu.sh: MFU against
 * that card's spec peak, runtime/peaks.c). */
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (d != 0) return cudaErrorInvalidValue;
    const char* as = getenv("ZRT_EMU_DEVICE_NAME");
    snprintf(p->name, sizeof p->name, "%s", as && *as ? as : "warp emulator (tests/gpu/warp_emu.h)");
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
    emu::run_all();
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    size_t used = 0;
    std::lock_guard<std::recursive_mutex> hold(emu::map_lock);
    for (auto& a : emu::allocs()) used += a.second.device ? a.second.bytes : 0;
    *total_bytes = (size_t)1 << 34;
    *free_bytes = *total_bytes > used ? *total_bytes - used : 0;
    return cudaSuccess;
}
template <class T>
inline cudaError_t cudaMalloc(T** p, size_t bytes) {
    *p = (T*)emu::allocate(bytes, 1);
    return *p ? cudaSuccess : (emu::last_error() = cudaErrorMemoryAllocation);
}
template <class T>
inline cudaError_t cudaMallocHost(T** p, size_t bytes) {
    *p = (T*)emu::allocate(bytes, 0);
    return *p ? cudaSuccess : (emu::last_error() = cudaErrorMemoryAllocation);
}
template <class T>
inline cudaError_t cudaHostAlloc(T** p, size_t bytes, unsigned flags) {
    (void)flags;
    return cudaMallocHost(p, bytes);
}
/* (CUDA's frees wait for the device first) */
inline cudaError_t cudaFree(void* p) {
    emu::run_all();
    return emu::release(p, 1);
}
inline cudaError_t cudaFreeHost(void* p) {
    emu::run_all();
    return emu::release(p, 0);
}
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    const int dd = emu::on_device(dst, n), sd = emu::on_device(src, n);
    const int want_d = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const int want_s = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (dd != want_d || sd != want_s) emu::die("cudaMemcpy: a pointer is not where its kind says");
    memmove(dst, src, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                                   cudaStream_t s) {
    const int dd = emu::on_device(dst, n), sd = emu::on_device(src, n);
    const int want_d = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const int want_s = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (dd != want_d || sd != want_s) emu::die("cudaMemcpyAsync: a pointer is not where its kind says");
    emu::enqueue(s, [=]() { memmove(dst, src, n); });
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void* p, int v, size_t n) {
    if (!emu::on_device(p, n)) emu::die("cudaMemset on memory that is not the device's");
    memset(p, v, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
    if (!emu::on_device(p, n)) emu::die("cudaMemsetAsync on memory that is not the device's");
    emu::enqueue(s, [=]() { memset(p, v, n); });
    return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
    *e = new CUevent_emu{0.0, flags, nullptr, 0};
    return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> hold(emu::queue_lock);
    e->s = emu::async_streams() ? s : nullptr;
    e->seq = s ? s->issued : 0;
    emu::enqueue(s, [e]() { e->t = emu::now_ms(); });
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (e->s) emu::run_until(e->s, e->seq + 1); /* its work and the record itself */
    return cudaSuccess;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    if ((a->flags | b->flags) & cudaEventDisableTiming) return cudaErrorInvalidValue; /* as CUDA */
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}
typedef enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 } cudaFuncAttribute;
/* a kernel's opt-in to more than 48 KiB of dynamic shared memory: the
 * emulator's blocks take any size, so only the sizes are checked (an H100's
 * and an H200's limit per block, 227 KiB) */
template <class F>
inline cudaError_t cudaFuncSetAttribute(F kernel, cudaFuncAttribute attr, int value) {
    (void)kernel, (void)attr;
    return value >= 0 && value <= 227 * 1024 ? cudaSuccess : (emu::last_error() = cudaErrorInvalidValue);
}

/* Streams: work runs when it is issued, so a stream is only a token and
 * every wait is already satisfied. */
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
    std::lock_guard<std::recursive_mutex> hold(emu::queue_lock);
    *s = new CUstream_emu{(int)flags, {}, 0, 0};
    emu::live_streams().insert(*s);
    return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    std::lock_guard<std::recursive_mutex> hold(emu::queue_lock);
    emu::run_until(s, s->issued); /* CUDA lets its work finish */
    emu::live_streams().erase(s);
    delete s;
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    emu::sync_stream(s);
    return cudaSuccess;
}
/* s's later work waits for e's: when s gets there, e's stream runs up to
 * it (an event recorded after the wait was issued does not count, as on a
 * device) */
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    (void)flags;
    if (!e) return cudaErrorInvalidValue;
    if (e->s && e->s != s) {
        CUstream_emu* es = e->s;
        const uint64_t seq = e->seq + 1;
        emu::enqueue(s, [es, seq]() { emu::run_until(es, seq); });
    }
    return cudaSuccess;
}

/* ---- cuBLAS ----------------------------------------------------------------- */

typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16
} cublasMath_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
struct cublasContext_emu {
    int math;
    cudaStream_t stream;
};
typedef cublasContext_emu* cublasHandle_t;

inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
    *h = new cublasContext_emu{0, nullptr};
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
    h->stream = s;
    return s ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE; /* the tables never use the legacy stream */
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
    h->math = (int)m;
    return CUBLAS_STATUS_SUCCESS;
}
inline const char* cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE";
}

namespace emu {
/* Column-major C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C through
 * the host's BLAS (OpenBLAS, which the CPU table runs too: what the
 * emulator checks is the project's kernels and their launches, not cuBLAS);
 * beta == 0 never reads C (cuBLAS allows C to be garbage then). */
inline cublasStatus_t gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           float alpha, const float* A, int lda, const float* B, int ldb,
                           float beta, float* C, int ldc) {
    if (m < 0 || n < 0 || k < 0 || ldc < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    if (beta == 0.0f)
        for (int j = 0; j < n; j++) memset(C + (size_t)j * ldc, 0, (size_t)m * sizeof(float));
    cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, alpha, A, lda, B, ldb, beta, C,
                ldc);
    return CUBLAS_STATUS_SUCCESS;
}
inline float bf16_load(const void* p, size_t i) {
    uint16_t h;
    memcpy(&h, (const uint16_t*)p + i, 2);
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline void need_device(const void* p, const char* what) {
    if (p && !on_device(p, 1)) {
        char m[96];
        snprintf(m, sizeof m, "cuBLAS given a host pointer for %s", what);
        die(m);
    }
}
} // namespace emu

inline cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                  int n, int k, const float* alpha, const float* A, int lda,
                                  const float* B, int ldb, const float* beta, float* C, int ldc) {
    emu::need_device(A, "A"), emu::need_device(B, "B"), emu::need_device(C, "C");
    if (m < 0 || n < 0 || k < 0 || ldc < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
    const float al = *alpha, be = *beta; /* host scalars: read at the call */
    emu::enqueue(h->stream, [=]() { emu::gemm(ta, tb, m, n, k, al, A, lda, B, ldb, be, C, ldc); });
    return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                                cublasOperation_t tb, int m, int n, int k,
                                                const float* alpha, const float* A, int lda,
                                                long long sA, const float* B, int ldb, long long sB,
                                                const float* beta, float* C, int ldc, long long sC,
                                                int batch) {
    for (int b = 0; b < batch; b++) {
        const cublasStatus_t s = cublasSgemm(h, ta, tb, m, n, k, alpha, A + b * sA, lda, B + b * sB, ldb,
                                             beta, C + b * sC, ldc);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}

namespace emu {
inline cublasStatus_t gemm_bf16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                                const void* A, int lda, const void* B, int ldb, float beta, float* C, int ldc) {
    /* the bf16 operands widened (exact), then the fp32 product */
    /* (rows, cols) as stored: the last column ends at its last row */
    const size_t ar = ta == CUBLAS_OP_N ? m : k, ac = ta == CUBLAS_OP_N ? k : m;
    const size_t br = tb == CUBLAS_OP_N ? k : n, bc = tb == CUBLAS_OP_N ? n : k;
    const size_t na = ac ? (size_t)lda * (ac - 1) + ar : 0, nb = bc ? (size_t)ldb * (bc - 1) + br : 0;
    std::vector<float> a(na), b(nb);
    for (size_t i = 0; i < na; i++) a[i] = emu::bf16_load(A, i);
    for (size_t i = 0; i < nb; i++) b[i] = emu::bf16_load(B, i);
    return emu::gemm(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc);
}
} // namespace emu

inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                   int n, int k, const void* alpha, const void* A, cudaDataType at,
                                   int lda, const void* B, cudaDataType bt, int ldb, const void* beta,
                                   void* C, cudaDataType ct, int ldc, cublasComputeType_t comp,
                                   cublasGemmAlgo_t algo) {
    (void)algo;
    if (at != CUDA_R_16BF || bt != CUDA_R_16BF || ct != CUDA_R_32F || comp != CUBLAS_COMPUTE_32F)
        return CUBLAS_STATUS_INVALID_VALUE; /* the only combination kernels/cuda.cu uses */
    emu::need_device(A, "A"), emu::need_device(B, "B"), emu::need_device(C, "C");
    if (m < 0 || n < 0 || k < 0 || ldc < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
    const float al = *(const float*)alpha, be = *(const float*)beta;
    emu::enqueue(h->stream, [=]() { emu::gemm_bf16(ta, tb, m, n, k, al, A, lda, B, ldb, be, (float*)C, ldc); });
    return CUBLAS_STATUS_SUCCESS;
}

/* Grouped GEMMs (cuBLAS 12.5+): group i is group_size[i] problems of one
 * shape; the sizes, scalars and leading dimensions are host arrays (read at
 * the call), the operand pointers device arrays of device pointers, read
 * when the stream runs the call (a kernel earlier on the stream may write
 * them). The same type combination as cublasGemmEx above. One launch
 * computes its problems concurrently on a device, so two problems whose C
 * overlap would race: the emulator refuses that. */
inline cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t h, const cublasOperation_t ta[],
                                                 const cublasOperation_t tb[], const int m[], const int n[],
                                                 const int k[], const void* alpha, const void* const Aarray[],
                                                 cudaDataType at, const int lda[], const void* const Barray[],
                                                 cudaDataType bt, const int ldb[], const void* beta,
                                                 void* const Carray[], cudaDataType ct, const int ldc[],
                                                 int group_count, const int group_size[],
                                                 cublasComputeType_t comp) {
    if (at != CUDA_R_16BF || bt != CUDA_R_16BF || ct != CUDA_R_32F || comp != CUBLAS_COMPUTE_32F || group_count < 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    emu::need_device(Aarray, "Aarray"), emu::need_device(Barray, "Barray"), emu::need_device(Carray, "Carray");
    struct P { cublasOperation_t ta, tb; int m, n, k, lda, ldb, ldc; float al, be; };
    std::vector<P> ps;
    for (int g = 0; g < group_count; g++) {
        if (m[g] < 0 || n[g] < 0 || k[g] < 0 || ldc[g] < (m[g] > 1 ? m[g] : 1) || group_size[g] < 0)
            return CUBLAS_STATUS_INVALID_VALUE;
        for (int i = 0; i < group_size[g]; i++)
            ps.push_back({ta[g], tb[g], m[g], n[g], k[g], lda[g], ldb[g], ldc[g], ((const float*)alpha)[g],
                          ((const float*)beta)[g]});
    }
    emu::enqueue(h->stream, [=]() {
        const size_t np = ps.size();
        for (size_t i = 0; i < np; i++) { /* the problems' outputs must be apart */
            const float* ci = (const float*)Carray[i];
            const size_t ni = ps[i].n ? (size_t)ps[i].ldc * (ps[i].n - 1) + ps[i].m : 0;
            emu::need_device(Aarray[i], "A"), emu::need_device(Barray[i], "B"), emu::need_device(ci, "C");
            for (size_t j = 0; j < i; j++) {
                const float* cj = (const float*)Carray[j];
                const size_t nj = ps[j].n ? (size_t)ps[j].ldc * (ps[j].n - 1) + ps[j].m : 0;
                if (ni && nj && ci < cj + nj && cj < ci + ni)
                    emu::die("cublasGemmGroupedBatchedEx: two problems of one launch write overlapping C");
            }
        }
        for (size_t i = 0; i < np; i++)
            emu::gemm_bf16(ps[i].ta, ps[i].tb, ps[i].m, ps[i].n, ps[i].k, ps[i].al, Aarray[i], ps[i].lda, Barray[i],
                           ps[i].ldb, ps[i].be, (float*)Carray[i], ps[i].ldc);
    });
    return CUBLAS_STATUS_SUCCESS;
}

#endif
