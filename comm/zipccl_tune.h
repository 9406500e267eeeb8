/*
 * zipccl_tune.h — hooks for benchmarks, tests and tuning tools: what the
 * auto strategy's measured selection has settled on, and the pipelining
 * parameters a communicator sized to its link.  Training code does not need
 * them; zipccl.h is the contract users call.
 */
#ifndef ZIPCCL_TUNE_H
#define ZIPCCL_TUNE_H

#include "zipccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How many auto calls of one size an MPI communicator spends measuring before
 * it settles (exploration and the first re-measured pair; AlltoAllv also
 * the calls that still run the previous size's agreed design), for
 * benchmarks that time auto once settled.  `bytes` is the size auto files a
 * call under: AllGather's per-rank input, ReduceScatter's and the
 * All-to-Alls' per-rank input, AllReduce's buffer. */
int zipcclAutoWarmupCalls(zipcclCollKind_t kind, size_t bytes);
/* Whether auto calls of `kind`, `dtype` and `bytes` (the size as for
 * zipcclAutoWarmupCalls) on `comm` have settled: their bucket's exploration,
 * the close contenders' extra runs included, and its first re-measured pair
 * are done, so the next call runs the chosen design without measuring.  The
 * contenders' runs depend on the measured times, so a benchmark makes
 * zipcclAutoWarmupCalls calls (at least that many are needed) and then more
 * until this says 1.  The answer is the same on every rank; 1 on
 * communicators that choose by the model alone (NCCL, one rank,
 * ZIPCCL_AUTO_EXPLORE=0).  Call it with no collective of `comm` in flight. */
zipcclResult_t zipcclAutoSettled(zipcclComm_t comm, zipcclCollKind_t kind, zipcclDataType_t dtype, size_t bytes,
                                 int* settled);
/* The piece size this communicator's MPI algorithms pipeline with
 * (ZIPCCL_PIECE_BYTES, else ~4 ms of its link; docs/COLLECTIVES.md §2). */
zipcclResult_t zipcclCommPieceBytes(zipcclComm_t comm, size_t* bytes);
/* The piece sends this communicator keeps in flight in its all-to-all
 * exchanges (AlltoAll(v), direct ReduceScatter), 0 for no limit but the
 * AlltoAll's step window (ZIPCCL_A2A_INFLIGHT, else 1 on a link below 300
 * MB/s and 0 above; docs/COLLECTIVES.md §2). */
zipcclResult_t zipcclCommA2aInflight(zipcclComm_t comm, int* pieces);

#ifdef __cplusplus
}
#endif
#endif /* ZIPCCL_TUNE_H */
