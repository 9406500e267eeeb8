/*
 * codec_ops.c — the two codec tables of codec_ops.h over the public entry
 * points: the CPU one over zipcclCompress / zipcclDecompress, the CUDA one
 * over zipcclCompressCuda / zipcclDecompressCuda (which report
 * zipcclUnsupported in a build without CUDA: codec_cuda_stub.c).  Each entry
 * only forwards, so a call through the table writes the same bytes as the
 * function it wraps, at the cost of one indirect call.
 */
#include "codec_ops.h"

/* ---- CPU: host buffers, no context ----------------------------------------- */

static int cpuAvailable(void) { return 1; }
static size_t cpuWorkspace(size_t count, zipcclDataType_t dtype) {
    (void)count, (void)dtype;
    return 0;
}
static zipcclResult_t cpuCompress(const zipcclCodecCtx* ctx, const void* src, size_t count, zipcclDataType_t dtype,
                                  void* dst, size_t dstCapacity, size_t* dstSize, const zipcclCodecParams_t* params) {
    (void)ctx;
    return zipcclCompress(src, count, dtype, dst, dstCapacity, dstSize, params);
}
static zipcclResult_t cpuDecompress(const zipcclCodecCtx* ctx, const void* src, size_t srcSize, void* dst,
                                    size_t dstCapacity, size_t* count, zipcclDataType_t expectDtype,
                                    const zipcclCodecParams_t* params) {
    (void)ctx;
    return zipcclDecompress(src, srcSize, dst, dstCapacity, count, expectDtype, params);
}

static size_t cpuWorkspaceBatch(int k, size_t count, zipcclDataType_t dtype, int decompress) {
    (void)k, (void)count, (void)dtype, (void)decompress;
    return 0;
}
static zipcclResult_t cpuCompressBatch(const zipcclCodecCtx* ctx, int k, const void* const* src, const size_t* count,
                                       zipcclDataType_t dtype, void* const* dst, const size_t* dstCapacity,
                                       size_t* dstSize, const zipcclCodecParams_t* params, int* failed) {
    (void)ctx;
    *failed = -1;
    for (int i = 0; i < k; i++) {
        zipcclResult_t r = zipcclCompress(src[i], count[i], dtype, dst[i], dstCapacity[i], &dstSize[i], params);
        if (r != zipcclSuccess) return *failed = i, r;
    }
    return zipcclSuccess;
}
static zipcclResult_t cpuDecompressBatch(const zipcclCodecCtx* ctx, int k, const void* const* src,
                                         const size_t* srcSize, void* const* dst, const size_t* dstCapacity,
                                         size_t* count, zipcclDataType_t expectDtype, int* failed) {
    (void)ctx;
    *failed = -1;
    for (int i = 0; i < k; i++) {
        zipcclResult_t r = zipcclDecompress(src[i], srcSize[i], dst[i], dstCapacity[i], &count[i], expectDtype, NULL);
        if (r != zipcclSuccess) return *failed = i, r;
    }
    return zipcclSuccess;
}

/* The halves on the CPU: Start does the work, leaving each buffer's frame
 * size or count in `pending` (8 bytes a buffer); End copies them out. */
static size_t cpuPendingBytes(int k, int decompress) {
    (void)decompress;
    return k > 0 ? (size_t)k * sizeof(size_t) : 0;
}
static zipcclResult_t cpuCompressStart(const zipcclCodecCtx* ctx, int k, const void* const* src, const size_t* count,
                                       zipcclDataType_t dtype, void* const* dst, const size_t* dstCapacity,
                                       const zipcclCodecParams_t* params, void* pending, int* failed) {
    return cpuCompressBatch(ctx, k, src, count, dtype, dst, dstCapacity, (size_t*)pending, params, failed);
}
static zipcclResult_t cpuCompressEnd(const zipcclCodecCtx* ctx, int k, const void* const* src, const size_t* count,
                                     zipcclDataType_t dtype, void* const* dst, const size_t* dstCapacity,
                                     const zipcclCodecParams_t* params, const void* pending, size_t* dstSize,
                                     int* failed) {
    (void)ctx, (void)src, (void)count, (void)dtype, (void)dst, (void)dstCapacity, (void)params;
    *failed = -1;
    for (int i = 0; i < k; i++) dstSize[i] = ((const size_t*)pending)[i];
    return zipcclSuccess;
}
static zipcclResult_t cpuDecompressStart(const zipcclCodecCtx* ctx, int k, const void* const* src,
                                         const size_t* srcSize, void* const* dst, const size_t* dstCapacity,
                                         zipcclDataType_t expectDtype, void* pending, int* failed) {
    return cpuDecompressBatch(ctx, k, src, srcSize, dst, dstCapacity, (size_t*)pending, expectDtype, failed);
}
static zipcclResult_t cpuDecompressEnd(const zipcclCodecCtx* ctx, int k, const void* const* src, const size_t* srcSize,
                                       void* const* dst, const size_t* dstCapacity, zipcclDataType_t expectDtype,
                                       const void* pending, size_t* count, int* failed) {
    (void)ctx, (void)src, (void)srcSize, (void)dst, (void)dstCapacity, (void)expectDtype;
    *failed = -1;
    for (int i = 0; i < k; i++) count[i] = ((const size_t*)pending)[i];
    return zipcclSuccess;
}

const zipcclCodecOps zipcclCodecOpsCpu = {
    .name = "cpu",
    .device = 0,
    .available = cpuAvailable,
    .bound = zipcclCompressBound,
    .workspace = cpuWorkspace,
    .compress = cpuCompress,
    .decompress = cpuDecompress,
    .workspaceBatch = cpuWorkspaceBatch,
    .compressBatch = cpuCompressBatch,
    .decompressBatch = cpuDecompressBatch,
    .pendingBytes = cpuPendingBytes,
    .compressStart = cpuCompressStart,
    .compressEnd = cpuCompressEnd,
    .decompressStart = cpuDecompressStart,
    .decompressEnd = cpuDecompressEnd,
};

/* ---- CUDA: device buffers, the context's workspace and stream -------------- */

static zipcclResult_t cudaCompress(const zipcclCodecCtx* ctx, const void* src, size_t count, zipcclDataType_t dtype,
                                   void* dst, size_t dstCapacity, size_t* dstSize, const zipcclCodecParams_t* params) {
    return zipcclCompressCuda(src, count, dtype, dst, dstCapacity, dstSize, params, ctx->workspace,
                              ctx->workspaceSize, ctx->stream);
}
/* params: the CPU decoder reads only its SIMD path; the device has none. */
static zipcclResult_t cudaDecompress(const zipcclCodecCtx* ctx, const void* src, size_t srcSize, void* dst,
                                     size_t dstCapacity, size_t* count, zipcclDataType_t expectDtype,
                                     const zipcclCodecParams_t* params) {
    (void)params;
    return zipcclDecompressCuda(src, srcSize, dst, dstCapacity, count, expectDtype, ctx->workspace,
                                ctx->workspaceSize, ctx->stream);
}

static zipcclResult_t cudaCompressBatch(const zipcclCodecCtx* ctx, int k, const void* const* src, const size_t* count,
                                        zipcclDataType_t dtype, void* const* dst, const size_t* dstCapacity,
                                        size_t* dstSize, const zipcclCodecParams_t* params, int* failed) {
    return zipcclCompressCudaBatch(k, src, count, dtype, dst, dstCapacity, dstSize, params, ctx->workspace,
                                   ctx->workspaceSize, ctx->stream, failed);
}
static zipcclResult_t cudaDecompressBatch(const zipcclCodecCtx* ctx, int k, const void* const* src,
                                          const size_t* srcSize, void* const* dst, const size_t* dstCapacity,
                                          size_t* count, zipcclDataType_t expectDtype, int* failed) {
    return zipcclDecompressCudaBatch(k, src, srcSize, dst, dstCapacity, count, expectDtype, ctx->workspace,
                                     ctx->workspaceSize, ctx->stream, failed);
}

static zipcclResult_t cudaCompressStart(const zipcclCodecCtx* ctx, int k, const void* const* src, const size_t* count,
                                        zipcclDataType_t dtype, void* const* dst, const size_t* dstCapacity,
                                        const zipcclCodecParams_t* params, void* pending, int* failed) {
    return zipcclCompressCudaBatchStart(k, src, count, dtype, dst, dstCapacity, params, ctx->workspace,
                                        ctx->workspaceSize, ctx->stream, pending, failed);
}
static zipcclResult_t cudaCompressEnd(const zipcclCodecCtx* ctx, int k, const void* const* src, const size_t* count,
                                      zipcclDataType_t dtype, void* const* dst, const size_t* dstCapacity,
                                      const zipcclCodecParams_t* params, const void* pending, size_t* dstSize,
                                      int* failed) {
    return zipcclCompressCudaBatchEnd(k, src, count, dtype, dst, dstCapacity, params, pending, dstSize, ctx->stream,
                                      failed);
}
static zipcclResult_t cudaDecompressStart(const zipcclCodecCtx* ctx, int k, const void* const* src,
                                          const size_t* srcSize, void* const* dst, const size_t* dstCapacity,
                                          zipcclDataType_t expectDtype, void* pending, int* failed) {
    return zipcclDecompressCudaBatchStart(k, src, srcSize, dst, dstCapacity, expectDtype, ctx->workspace,
                                          ctx->workspaceSize, ctx->stream, pending, failed);
}
static zipcclResult_t cudaDecompressEnd(const zipcclCodecCtx* ctx, int k, const void* const* src,
                                        const size_t* srcSize, void* const* dst, const size_t* dstCapacity,
                                        zipcclDataType_t expectDtype, const void* pending, size_t* count, int* failed) {
    (void)ctx;
    return zipcclDecompressCudaBatchEnd(k, src, srcSize, dst, dstCapacity, expectDtype, pending, count, failed);
}

const zipcclCodecOps zipcclCodecOpsCuda = {
    .name = "cuda",
    .device = 1,
    .available = zipcclCudaAvailable,
    .bound = zipcclCompressBound,
    .workspace = zipcclCudaWorkspaceSize,
    .compress = cudaCompress,
    .decompress = cudaDecompress,
    .workspaceBatch = zipcclCudaWorkspaceSizeBatch,
    .compressBatch = cudaCompressBatch,
    .decompressBatch = cudaDecompressBatch,
    .pendingBytes = zipcclCudaPendingBytes,
    .compressStart = cudaCompressStart,
    .compressEnd = cudaCompressEnd,
    .decompressStart = cudaDecompressStart,
    .decompressEnd = cudaDecompressEnd,
};

const zipcclCodecOps* zipcclCodecOpsFor(int device) { return device ? &zipcclCodecOpsCuda : &zipcclCodecOpsCpu; }
