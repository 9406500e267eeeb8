/*
 * alltoall.c — zipccl-bench's AlltoAll and AlltoAllv: rank i's block j goes
 * to rank j, where it lands as block i.
 *
 * bytes = one rank's send buffer (n blocks), busbw factor (n-1)/n, the
 * expected result MPI's own MPI_Alltoall(v) on the same bytes.  AlltoAllv's
 * blocks are uneven (1/2 .. 3/2 of the mean) yet every rank sends and
 * receives exactly `bytes`, so its rows compare with AlltoAll's.  Left out:
 * in-place calls and zero-sized blocks.
 */
#include <stdlib.h>

#include "coll.h"

static void shapeEven(CollShape* s, size_t bytes, const CollEnv* e) {
    size_t per = bytes / zipcclTypeSize(e->dtype);
    s->count = per / e->nranks ? per / e->nranks : 1;
    s->sendElems = s->recvElems = s->count * e->nranks;
    s->bytes = s->sendElems * zipcclTypeSize(e->dtype);
}

/* ---- AlltoAll ----------------------------------------------------------- */

static void initA2a(void* send, const CollShape* s, const CollEnv* e) {
    benchFill(e, zipcclCollAlltoAll, e->rank, 0, s->sendElems, s->sendElems, send);
}

static zipcclResult_t runA2a(const void* send, void* recv, const CollShape* s, const CollEnv* e,
                             const zipcclCallConfig_t* cfg, zipcclRequest_t* req) {
    if (!req) return zipcclAlltoAll(send, recv, s->count, e->dtype, e->comm, cfg, NULL);
    return zipcclAlltoAllAsync(send, recv, s->count, e->dtype, e->comm, cfg, NULL, req);
}

static void expectedA2a(void* want, const void* send, const CollShape* s, const CollEnv* e) {
    MCHECK(MPI_Alltoall(send, (int)s->count, e->elem, want, (int)s->count, e->elem,
                        MPI_COMM_WORLD));
}

const CollTest alltoAllTest = {
    .name = "alltoall", .kind = zipcclCollAlltoAll, .busFactor = 1.0,
    .ownAlgo = zipcclAlgoDirect, .shape = shapeEven, .init = initA2a, .run = runA2a,
    .expected = expectedA2a,
};

/* ---- AlltoAllv ---------------------------------------------------------- */

/* Block from rank i to rank j: base + base/2 * w[(j - i) mod n], w = +1 for
 * the first n/2 offsets, -1 for the last n/2, 0 in the middle.  Each row and
 * each column of w sums to zero, so every rank sends and receives exactly
 * n * base elements while the blocks are uneven. */
static size_t a2avBlock(size_t base, int i, int j, int n) {
    int k = ((j - i) % n + n) % n;
    size_t d = base / 2;
    if (k < n / 2) return base + d;
    if (k >= n - n / 2) return base - d;
    return base;
}

static void shapeA2av(CollShape* s, size_t bytes, const CollEnv* e) {
    const int n = e->nranks;
    shapeEven(s, bytes, e);
    s->blocks = benchAlloc(4 * (size_t)n * sizeof(size_t));
    size_t *scounts = s->blocks, *sdispls = scounts + n, *rcounts = scounts + 2 * n,
           *rdispls = scounts + 3 * n;
    size_t so = 0, ro = 0;
    for (int j = 0; j < n; j++) {
        scounts[j] = a2avBlock(s->count, e->rank, j, n);
        rcounts[j] = a2avBlock(s->count, j, e->rank, n);
        sdispls[j] = so, so += scounts[j];
        rdispls[j] = ro, ro += rcounts[j];
    }
}

static void initA2av(void* send, const CollShape* s, const CollEnv* e) {
    benchFill(e, zipcclCollAlltoAllv, e->rank, 0, s->sendElems, s->sendElems, send);
}

static zipcclResult_t runA2av(const void* send, void* recv, const CollShape* s, const CollEnv* e,
                              const zipcclCallConfig_t* cfg, zipcclRequest_t* req) {
    const size_t n = (size_t)e->nranks, *b = s->blocks;
    if (!req)
        return zipcclAlltoAllv(send, b, b + n, recv, b + 2 * n, b + 3 * n, e->dtype, e->comm, cfg,
                               NULL);
    return zipcclAlltoAllvAsync(send, b, b + n, recv, b + 2 * n, b + 3 * n, e->dtype, e->comm,
                                cfg, NULL, req);
}

static void expectedA2av(void* want, const void* send, const CollShape* s, const CollEnv* e) {
    const int n = e->nranks;
    int* iblocks = benchAlloc(4 * (size_t)n * sizeof(int)); /* MPI takes int counts */
    for (int k = 0; k < 4 * n; k++) iblocks[k] = (int)s->blocks[k];
    MCHECK(MPI_Alltoallv(send, iblocks, iblocks + n, e->elem, want, iblocks + 2 * n,
                         iblocks + 3 * n, e->elem, MPI_COMM_WORLD));
    free(iblocks);
}

const CollTest alltoAllvTest = {
    .name = "alltoallv", .kind = zipcclCollAlltoAllv, .busFactor = 1.0,
    .ownAlgo = zipcclAlgoDirect, .shape = shapeA2av, .init = initA2av, .run = runA2av,
    .expected = expectedA2av,
};
