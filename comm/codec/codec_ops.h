/*
 * codec_ops.h — the codec as a table of function pointers, one per place
 * buffers live: zipcclCodecOpsCpu (host memory: codec_cpu.c) and
 * zipcclCodecOpsCuda (device memory: codec_cuda.cu, or its stub in a build
 * without CUDA).  Both write the one byte format of docs/FORMAT.md, so a
 * frame from either decodes with the other.
 *
 * A communicator holds the table for its transport's buffers
 * (zipcclCodecOpsFor(transport->device), set at creation by coll.c), and the
 * designs reach the codec only through it, so a design written once runs
 * with either codec: coll_algos.c (host buffers) and transport_nccl.c
 * (device buffers) call c->codec->compress / decompress / bound.
 *
 * What a CUDA call needs beyond the buffers (its device workspace and the
 * stream it enqueues on) travels in a zipcclCodecCtx the caller fills per
 * call; the CPU entries ignore it.  The entries never allocate: the caller
 * owns every buffer, sized by `bound` and `workspace`.
 *
 * "Codec" here is the implementation (CPU or CUDA); which code a frame uses
 * (fast, dense, f3, f2) is zipcclCodecParams_t.codec, as in zipccl.h.
 * Not installed.  Left out: a per-communicator codec state (neither codec
 * keeps one; the workspace is the caller's scratch).
 */
#ifndef ZIPCCL_CODEC_OPS_H
#define ZIPCCL_CODEC_OPS_H

#include <stddef.h>

#include "zipccl.h"

/* One call's context: the CUDA codec's device workspace (`workspace`
 * bytes as the table's `workspace` entry sizes it) and its cudaStream_t. */
typedef struct {
    void* workspace;
    size_t workspaceSize;
    void* stream;
} zipcclCodecCtx;

typedef struct zipcclCodecOps {
    const char* name; /* "cpu", "cuda" */
    int device;       /* its buffers are device memory                       */

    /* 1 if the codec can run here (CUDA: built with it and a device is
     * usable); the communicator asks once, at creation. */
    int (*available)(void);
    /* The largest frame of `count` elements (zipcclCompressBound: one
     * format, one bound). */
    size_t (*bound)(size_t count, zipcclDataType_t dtype, int checksum);
    /* Device workspace bytes one call on up to `count` elements needs (0 on
     * the CPU). */
    size_t (*workspace)(size_t count, zipcclDataType_t dtype);
    /* zipcclCompress / zipcclDecompress (zipccl.h) on this codec's memory;
     * the CUDA entries block until the frame size (the count) is known on
     * the host.  params may be NULL (defaults). */
    zipcclResult_t (*compress)(const zipcclCodecCtx* ctx, const void* src, size_t count, zipcclDataType_t dtype,
                               void* dst, size_t dstCapacity, size_t* dstSize, const zipcclCodecParams_t* params);
    zipcclResult_t (*decompress)(const zipcclCodecCtx* ctx, const void* src, size_t srcSize, void* dst,
                                 size_t dstCapacity, size_t* count, zipcclDataType_t expectDtype,
                                 const zipcclCodecParams_t* params);
    /* The same for k buffers or frames at once (zipcclCompressCudaBatch,
     * zipcclDecompressCudaBatch): the same bytes, one host wait for all the
     * frame sizes and two for all the verdicts on CUDA; on the CPU, k single
     * calls.  *failed: the buffer or frame an error names (-1 if none).
     * workspaceBatch: device bytes for k of up to `count` elements
     * (decompress: 1 for the decoder's, 0 for the encoder's). */
    size_t (*workspaceBatch)(int k, size_t count, zipcclDataType_t dtype, int decompress);
    zipcclResult_t (*compressBatch)(const zipcclCodecCtx* ctx, int k, const void* const* src, const size_t* count,
                                    zipcclDataType_t dtype, void* const* dst, const size_t* dstCapacity,
                                    size_t* dstSize, const zipcclCodecParams_t* params, int* failed);
    zipcclResult_t (*decompressBatch)(const zipcclCodecCtx* ctx, int k, const void* const* src, const size_t* srcSize,
                                      void* const* dst, const size_t* dstCapacity, size_t* count,
                                      zipcclDataType_t expectDtype, int* failed);
    /* The batches in two halves (zipcclCompressCudaBatchStart / End, ...):
     * Start enqueues the batch and the copy of what End reads into
     * `pending` (host memory of pendingBytes(k, decompress) bytes), without
     * a wait; after the caller has waited for ctx->stream (or an event
     * recorded there after Start), End (the same arguments) gives the frame
     * sizes or the verdicts and counts, without a wait.  On the CPU, Start
     * does the work and End copies its results. */
    size_t (*pendingBytes)(int k, int decompress);
    zipcclResult_t (*compressStart)(const zipcclCodecCtx* ctx, int k, const void* const* src, const size_t* count,
                                    zipcclDataType_t dtype, void* const* dst, const size_t* dstCapacity,
                                    const zipcclCodecParams_t* params, void* pending, int* failed);
    zipcclResult_t (*compressEnd)(const zipcclCodecCtx* ctx, int k, const void* const* src, const size_t* count,
                                  zipcclDataType_t dtype, void* const* dst, const size_t* dstCapacity,
                                  const zipcclCodecParams_t* params, const void* pending, size_t* dstSize,
                                  int* failed);
    zipcclResult_t (*decompressStart)(const zipcclCodecCtx* ctx, int k, const void* const* src,
                                      const size_t* srcSize, void* const* dst, const size_t* dstCapacity,
                                      zipcclDataType_t expectDtype, void* pending, int* failed);
    zipcclResult_t (*decompressEnd)(const zipcclCodecCtx* ctx, int k, const void* const* src, const size_t* srcSize,
                                    void* const* dst, const size_t* dstCapacity, zipcclDataType_t expectDtype,
                                    const void* pending, size_t* count, int* failed);
} zipcclCodecOps;

extern const zipcclCodecOps zipcclCodecOpsCpu;
extern const zipcclCodecOps zipcclCodecOpsCuda;

/* The table for buffers in device memory (device != 0) or host memory. */
const zipcclCodecOps* zipcclCodecOpsFor(int device);

#endif /* ZIPCCL_CODEC_OPS_H */
