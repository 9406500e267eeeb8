/*
 * transport_nccl_kernels.cu — the two device kernels ZipCCL's NCCL
 * ReduceScatter/AllReduce need: add one contribution into an fp32
 * accumulator, and round the accumulator to the dtype (dividing by n for
 * avg first).  They implement the canonical order's arithmetic exactly like
 * the CPU (coll_algos.c): fp32 adds (no FMA: there is no multiply), IEEE
 * division, and the conversions of zipccl_float.h (the CPU's, to the bit), so
 * a GPU reduction equals the CPU one bit for bit.  transport_nccl.c calls
 * them in rank order.
 *
 * Left out: vectorised loads (these are memory-bound and simple).
 */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "zipccl_float.h"

namespace {

enum { kFp16 = 6, kFp32 = 7, kBf16 = 9 }; /* zipcclDataType_t numbering */

__device__ float loadF(const void* p, size_t i, int dt) {
    if (dt == kFp32) return static_cast<const float*>(p)[i];
    uint16_t h = static_cast<const uint16_t*>(p)[i];
    return dt == kBf16 ? zipcclBf16ToFloat(h) : zipcclFp16ToFloat(h);
}

__device__ void storeF(void* p, size_t i, float v, int dt) {
    if (dt == kFp32) static_cast<float*>(p)[i] = v;
    else static_cast<uint16_t*>(p)[i] = dt == kBf16 ? zipcclFloatToBf16(v) : zipcclFloatToFp16(v);
}

__global__ void kAccumulate(float* acc, const void* x, size_t n, int dt, int first) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = loadF(x, i, dt);
        acc[i] = first ? v : __fadd_rn(acc[i], v);
    }
}

__global__ void kFinalize(void* out, const float* acc, size_t n, int dt, int avg, int nranks) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = acc[i];
        if (avg) v = __fdiv_rn(v, static_cast<float>(nranks));
        storeF(out, i, v, dt);
    }
}

unsigned gridFor(size_t n) {
    size_t g = (n + 255) / 256;
    return static_cast<unsigned>(g < 4096 ? (g ? g : 1) : 4096);
}

} // namespace

extern "C" int zipcclCudaAccumulate(float* acc, const void* x, size_t n, int dtype, int first,
                                    void* stream) {
    if (!n) return 0;
    kAccumulate<<<gridFor(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(acc, x, n, dtype, first);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int zipcclCudaFinalize(void* out, const float* acc, size_t n, int dtype, int avg,
                                  int nranks, void* stream) {
    if (!n) return 0;
    kFinalize<<<gridFor(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(out, acc, n, dtype, avg, nranks);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
