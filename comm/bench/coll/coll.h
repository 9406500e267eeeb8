/*
 * coll.h — what zipccl-bench (comm/bench/coll_bench.c) knows of a collective:
 * one CollTest per collective, in the manner of nccl-tests' testColl.
 *
 * An entry says how big one call's buffers are for a table size, how to fill
 * the send buffer deterministically, how to make the call (blocking, or
 * non-blocking with a request), how to compute the result it must produce
 * (independently of the library) and how algbw turns into busbw.  The driver
 * loops over a table of entries and knows nothing else of any collective.
 * One file per family: allgather.c, reduce.c (ReduceScatter, AllReduce: one
 * documented reduction), alltoall.c (AlltoAll, AlltoAllv).
 *
 * Left out: in-place calls (the driver has none), and timing, counters,
 * reporting and device buffers (the driver's, the same for every entry: with
 * --device it hands the calls device twins of the buffers and the checks
 * host copies).
 */
#ifndef ZIPCCL_BENCH_COLL_H
#define ZIPCCL_BENCH_COLL_H

#include <mpi.h>
#include <stddef.h>
#include <stdio.h>

#include "zipccl.h"

/* Fatal checks (the bench is a program: failing loudly is its job). */
#define ZCHECK(call)                                                                       \
    do {                                                                                   \
        zipcclResult_t r_ = (call);                                                        \
        if (r_ != zipcclSuccess) {                                                         \
            fprintf(stderr, "zipccl-bench: %s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, \
                    #call, zipcclGetErrorString(r_), zipcclGetLastErrorDetail());          \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                  \
        }                                                                                  \
    } while (0)

#define MCHECK(call)                                                                     \
    do {                                                                                 \
        int r_ = (call);                                                                 \
        if (r_ != MPI_SUCCESS) {                                                         \
            fprintf(stderr, "zipccl-bench: %s:%d: %s failed (MPI error %d)\n", __FILE__, \
                    __LINE__, #call, r_);                                                \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                \
        }                                                                                \
    } while (0)

typedef struct BenchData BenchData; /* the driver's inputs: a seeded generator or a file */

/* The run as an entry sees it; fixed from start to end. */
typedef struct {
    int rank, nranks;
    zipcclDataType_t dtype;
    zipcclRedOp_t op;
    zipcclComm_t comm;
    MPI_Datatype elem;     /* one element as opaque bytes, for MPI's own collectives */
    const BenchData* data;
} CollEnv;

/* One call's buffers at one table size. */
typedef struct {
    size_t count;            /* the call's count argument (per rank, per peer or whole) */
    size_t sendElems, recvElems;
    size_t bytes;            /* the table's 'bytes' (nccl-tests' meaning, see --help)  */
    size_t* blocks;          /* AlltoAllv: sendcounts, sdispls, recvcounts, rdispls, n
                              * each (one allocation, freed by the driver); else NULL  */
} CollShape;

typedef struct {
    const char* name;        /* --coll and the output's 'coll' column               */
    zipcclCollKind_t kind;   /* the library's kind: counters, auto, algorithm names */
    double busFactor;        /* busbw = algbw x busFactor x (n-1)/n (x 1 on one rank) */
    int reduction;           /* MPI's own version rounds at every combine, so native
                              * is not bit-comparable with the library's result      */
    int autoPerRank;         /* auto files a call under bytes/n (the per-rank input),
                              * else under the table's bytes                         */
    zipcclAlgo_t ownAlgo;    /* the design the library runs by default; 'picked'
                              * names a design only when another one ran             */
    /* The buffers of one call for `bytes` on e's ranks. */
    void (*shape)(CollShape* s, size_t bytes, const CollEnv* e);
    /* Fill this rank's send buffer: element i depends only on (collective, rank, i),
     * so any rank can regenerate any rank's input (benchFill). */
    void (*init)(void* send, const CollShape* s, const CollEnv* e);
    /* One call with cfg: blocking when req is NULL, else started and left in *req. */
    zipcclResult_t (*run)(const void* send, void* recv, const CollShape* s, const CollEnv* e,
                          const zipcclCallConfig_t* cfg, zipcclRequest_t* req);
    /* The result this rank must receive, computed without the library: MPI's own
     * collective, or the documented reduction recomputed here. */
    void (*expected)(void* want, const void* send, const CollShape* s, const CollEnv* e);
} CollTest;

extern const CollTest allGatherTest, reduceScatterTest, allReduceTest, alltoAllTest,
    alltoAllvTest;

/* Services of the driver. */
void* benchAlloc(size_t n); /* malloc or abort */
/* Elements first..first+count-1 of rank `rank`'s send buffer (of `total`
 * elements) for collective `kind`, the same on every rank. */
void benchFill(const CollEnv* e, zipcclCollKind_t kind, int rank, size_t first, size_t count,
               size_t total, void* dst);

#endif /* ZIPCCL_BENCH_COLL_H */
