/*
 * device_cuda_stub.c — zdev_cuda in builds without CUDA (NO_CUDA=1, the
 * sanitizer build, a machine without nvcc): no device, and the reason.
 * With CUDA, device_cuda.cu defines them instead.
 */
#include "device.h"

#ifndef ZIPCCL_HAVE_CUDA
ZDevice* zdev_cuda(int ordinal) {
    zdev_set_error("CUDA device %d: this build has no CUDA (built with NO_CUDA=1 or without nvcc)", ordinal);
    return NULL;
}
int zdev_cuda_count(void) { return 0; }
#else
/* ISO C forbids an empty translation unit. */
typedef int zdev_cuda_stub_unused_t;
#endif
