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

const zipcclCodecOps zipcclCodecOpsCpu = {
    .name = "cpu",
    .device = 0,
    .available = cpuAvailable,
    .bound = zipcclCompressBound,
    .workspace = cpuWorkspace,
    .compress = cpuCompress,
    .decompress = cpuDecompress,
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

const zipcclCodecOps zipcclCodecOpsCuda = {
    .name = "cuda",
    .device = 1,
    .available = zipcclCudaAvailable,
    .bound = zipcclCompressBound,
    .workspace = zipcclCudaWorkspaceSize,
    .compress = cudaCompress,
    .decompress = cudaDecompress,
};

const zipcclCodecOps* zipcclCodecOpsFor(int device) { return device ? &zipcclCodecOpsCuda : &zipcclCodecOpsCpu; }
