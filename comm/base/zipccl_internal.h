/*
 * zipccl_internal.h — shared between the files of libzipccl, not installed.
 */
#ifndef ZIPCCL_INTERNAL_H
#define ZIPCCL_INTERNAL_H
#include "zipccl.h"

/* Record a detail message for zipcclGetLastErrorDetail() and return code. */
zipcclResult_t zipcclSetError(zipcclResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The same, with the current detail appended after ": " (the reason a call
 * below gave), e.g. "AllGather on rank 1: frame from rank 0: <reason>". */
zipcclResult_t zipcclPrefixError(zipcclResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
void zipcclClearError(void);
/* Tests: a communicator with a network sums its frame sizes over the network,
 * as NCCL's own communicators (no host control) must, though it has MPI's. */
void zipcclTestSizesOverNet(zipcclComm_t comm);

/* "bf16"/"fp16"/"fp32" (and long names) -> dtype; returns 0 if unknown. */
int zipcclTypeParse(const char* name, zipcclDataType_t* out);

/* Element i of a bf16/fp16/fp32 array as fp32, and back (round to nearest
 * even), for loops that take the dtype at run time (common.c). */
float zipcclToFloat(const void* p, size_t i, zipcclDataType_t dtype);
void zipcclFromFloat(void* p, size_t i, float v, zipcclDataType_t dtype);
/* fp16 bits -> fp32, all 65536 (built on first use; fetch once per loop). */
const float* zipcclFp16Table(void);

/* The host's reduction arithmetic (common.c; the canonical order's, docs/
 * COLLECTIVES.md §3): acc[i] = x[i] (first) or acc[i] += x[i] in fp32; then
 * out[i] = round(acc[i]) (avg: acc[i] / n first), one rounding to dtype. */
void zipcclAccumulate(float* acc, const void* x, size_t count, zipcclDataType_t dtype, int first);
void zipcclFinalize(void* out, const float* acc, size_t count, zipcclDataType_t dtype, zipcclRedOp_t op, int n);

/* Seconds on the monotonic clock (common.c). */
double zipcclNow(void);

/* Host memory for the communicators' staging buffers (common.c): *bytes or
 * more, released with free(). From 2 MiB up the block is 2 MiB-aligned, its
 * size rounded up to whole 2 MiB pages (*bytes says how much) and Linux is
 * asked to back it with transparent huge pages (madvise MADV_HUGEPAGE; a
 * hint: where the system refuses, it stays 4 KiB pages): one TLB entry per
 * 2 MiB instead of 512 for buffers the codec and the transport sweep on every
 * call. NULL when out of memory. */
void* zipcclHostAlloc(size_t* bytes);

/* Propagate a non-success result. */
#define ZIPCCL_TRY(call)                                  \
    do {                                                  \
        zipcclResult_t zipccl_try_res_ = (call);          \
        if (zipccl_try_res_ != zipcclSuccess) return zipccl_try_res_; \
    } while (0)

#endif
