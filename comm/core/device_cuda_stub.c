/*
 * device_cuda_stub.c — zipcclDeviceMemoryCuda for builds without nvcc: it
 * reports zipcclUnsupported with a detail instead of failing to link.
 * Builds with CUDA compile this file to nothing; the table lives in
 * device_cuda.cu.
 */
#ifndef ZIPCCL_HAVE_CUDA
#include "zipccl.h"
#include "zipccl_internal.h"

zipcclResult_t zipcclDeviceMemoryCuda(int device, zipcclDeviceMemory_t* out) {
    (void)device;
    (void)out;
    return zipcclSetError(zipcclUnsupported, "zipcclDeviceMemoryCuda: libzipccl was built without CUDA (no nvcc)");
}
#else
/* ISO C forbids an empty translation unit. */
typedef int zipccl_device_cuda_stub_unused_t;
#endif
