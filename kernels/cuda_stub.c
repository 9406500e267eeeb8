/*
 * cuda_stub.c — the CUDA table's entry points (kernels.h) in builds without
 * CUDA (NO_CUDA=1, the sanitizer build, a machine without nvcc): no table,
 * and the reason. With CUDA, kernels/cuda.cu defines them instead; the warp
 * emulator's build (tests/gpu/emu) links its own in their place.
 */
#include "kernels.h"

#ifndef ZIPCCL_HAVE_CUDA
const ZrtKernels* zrt_kernels_cuda(void) { return NULL; }
const ZrtKernels* zrt_kernels_cuda_bf16(void) { return NULL; }
int zrt_cuda_bind(int local_rank) {
    (void)local_rank;
    return -1;
}
const char* zrt_cuda_error(void) { return "this build has no CUDA (built with NO_CUDA=1 or without nvcc)"; }
const char* zrt_cuda_device_name(void) { return ""; }
int zrt_cuda_device(void) { return -1; }
#else
/* ISO C forbids an empty translation unit. */
typedef int zrt_cuda_stub_unused_t;
#endif
