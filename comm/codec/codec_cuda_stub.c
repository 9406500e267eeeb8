/*
 * codec_cuda_stub.c — the CUDA codec entry points for builds without nvcc.
 *
 * When the library is built without ZIPCCL_HAVE_CUDA, zipccl.h still declares
 * zipcclCompressCuda / zipcclDecompressCuda; these definitions make them
 * report zipcclUnsupported (with a detail message) instead of failing to
 * link. Builds with CUDA compile this file to nothing; the real functions
 * live in codec_cuda.cu.
 */
#ifndef ZIPCCL_HAVE_CUDA
#include "zipccl.h"
#include "zipccl_internal.h"

int zipcclCudaAvailable(void) { return 0; }

size_t zipcclCudaWorkspaceSize(size_t count, zipcclDataType_t dtype) {
    (void)count;
    (void)dtype;
    return 0;
}

zipcclResult_t zipcclCompressCuda(const void* d_src, size_t count, zipcclDataType_t dtype,
                                  void* d_dst, size_t dstCapacity, size_t* dstSize,
                                  const zipcclCodecParams_t* params, void* d_workspace,
                                  size_t workspaceSize, void* stream) {
    (void)d_src; (void)count; (void)dtype; (void)d_dst; (void)dstCapacity; (void)dstSize;
    (void)params; (void)d_workspace; (void)workspaceSize; (void)stream;
    return zipcclSetError(zipcclUnsupported,
                          "zipcclCompressCuda: libzipccl was built without CUDA (no nvcc)");
}

zipcclResult_t zipcclDecompressCuda(const void* d_src, size_t srcSize, void* d_dst,
                                    size_t dstCapacity, size_t* count,
                                    zipcclDataType_t expectDtype, void* d_workspace,
                                    size_t workspaceSize, void* stream) {
    (void)d_src; (void)srcSize; (void)d_dst; (void)dstCapacity; (void)count;
    (void)expectDtype; (void)d_workspace; (void)workspaceSize; (void)stream;
    return zipcclSetError(zipcclUnsupported,
                          "zipcclDecompressCuda: libzipccl was built without CUDA (no nvcc)");
}

size_t zipcclCudaWorkspaceSizeBatch(int k, size_t maxCount, zipcclDataType_t dtype, int decompress) {
    (void)k; (void)maxCount; (void)dtype; (void)decompress;
    return 0;
}

zipcclResult_t zipcclCompressCudaBatch(int k, const void* const* d_src, const size_t* count,
                                       zipcclDataType_t dtype, void* const* d_dst,
                                       const size_t* dstCapacity, size_t* dstSize,
                                       const zipcclCodecParams_t* params, void* d_workspace,
                                       size_t workspaceSize, void* stream, int* failed) {
    (void)k; (void)d_src; (void)count; (void)dtype; (void)d_dst; (void)dstCapacity; (void)dstSize;
    (void)params; (void)d_workspace; (void)workspaceSize; (void)stream;
    if (failed) *failed = -1;
    return zipcclSetError(zipcclUnsupported,
                          "zipcclCompressCudaBatch: libzipccl was built without CUDA (no nvcc)");
}

zipcclResult_t zipcclDecompressCudaBatch(int k, const void* const* d_src, const size_t* srcSize,
                                         void* const* d_dst, const size_t* dstCapacity,
                                         size_t* count, zipcclDataType_t expectDtype,
                                         void* d_workspace, size_t workspaceSize, void* stream,
                                         int* failed) {
    (void)k; (void)d_src; (void)srcSize; (void)d_dst; (void)dstCapacity; (void)count;
    (void)expectDtype; (void)d_workspace; (void)workspaceSize; (void)stream;
    if (failed) *failed = -1;
    return zipcclSetError(zipcclUnsupported,
                          "zipcclDecompressCudaBatch: libzipccl was built without CUDA (no nvcc)");
}

size_t zipcclCudaPendingBytes(int k, int decompress) {
    (void)k; (void)decompress;
    return 0;
}

static zipcclResult_t noCuda(const char* who, int* failed) {
    if (failed) *failed = -1;
    return zipcclSetError(zipcclUnsupported, "%s: libzipccl was built without CUDA (no nvcc)", who);
}

zipcclResult_t zipcclCompressCudaBatchStart(int k, const void* const* d_src, const size_t* count,
                                            zipcclDataType_t dtype, void* const* d_dst,
                                            const size_t* dstCapacity, const zipcclCodecParams_t* params,
                                            void* d_workspace, size_t workspaceSize, void* stream,
                                            void* pending, int* failed) {
    (void)k; (void)d_src; (void)count; (void)dtype; (void)d_dst; (void)dstCapacity; (void)params;
    (void)d_workspace; (void)workspaceSize; (void)stream; (void)pending;
    return noCuda("zipcclCompressCudaBatchStart", failed);
}

zipcclResult_t zipcclCompressCudaBatchEnd(int k, const void* const* d_src, const size_t* count,
                                          zipcclDataType_t dtype, void* const* d_dst,
                                          const size_t* dstCapacity, const zipcclCodecParams_t* params,
                                          const void* pending, size_t* dstSize, void* stream, int* failed) {
    (void)k; (void)d_src; (void)count; (void)dtype; (void)d_dst; (void)dstCapacity; (void)params;
    (void)pending; (void)dstSize; (void)stream;
    return noCuda("zipcclCompressCudaBatchEnd", failed);
}

zipcclResult_t zipcclDecompressCudaBatchStart(int k, const void* const* d_src, const size_t* srcSize,
                                              void* const* d_dst, const size_t* dstCapacity,
                                              zipcclDataType_t expectDtype, void* d_workspace,
                                              size_t workspaceSize, void* stream, void* pending,
                                              int* failed) {
    (void)k; (void)d_src; (void)srcSize; (void)d_dst; (void)dstCapacity; (void)expectDtype;
    (void)d_workspace; (void)workspaceSize; (void)stream; (void)pending;
    return noCuda("zipcclDecompressCudaBatchStart", failed);
}

zipcclResult_t zipcclDecompressCudaBatchEnd(int k, const void* const* d_src, const size_t* srcSize,
                                            void* const* d_dst, const size_t* dstCapacity,
                                            zipcclDataType_t expectDtype, const void* pending,
                                            size_t* count, int* failed) {
    (void)k; (void)d_src; (void)srcSize; (void)d_dst; (void)dstCapacity; (void)expectDtype;
    (void)pending; (void)count;
    return noCuda("zipcclDecompressCudaBatchEnd", failed);
}
#else
/* ISO C forbids an empty translation unit. */
typedef int zipccl_codec_cuda_stub_unused_t;
#endif
