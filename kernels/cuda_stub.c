/*
 * cuda_stub.c — the CUDA tables' entry points (kernels.h) in builds without
 * CUDA (NO_CUDA=1, the sanitizer build, a machine without nvcc): no table,
 * and the reason. With CUDA, kernels/cuda.cu defines them instead; the warp
 * emulator's build (tests/gpu/emu) links its own in their place.
 */
#include "kernels.h"

#ifndef ZIPCCL_HAVE_CUDA
const ZrtKernels* zrt_kernels_cuda(ZDevice* dev) {
    (void)dev;
    return NULL;
}
const ZrtKernels* zrt_kernels_cuda_bf16(ZDevice* dev) {
    (void)dev;
    return NULL;
}
const char* zrt_cuda_error(void) { return "this build has no CUDA (built with NO_CUDA=1 or without nvcc)"; }
#else
/* ISO C forbids an empty translation unit. */
typedef int zrt_cuda_stub_unused_t;
#endif
