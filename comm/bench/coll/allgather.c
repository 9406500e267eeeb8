/*
 * allgather.c — zipccl-bench's AllGather: every rank's `count` elements,
 * gathered in rank order on every rank.
 *
 * bytes = the whole output buffer (n x count x element), busbw factor
 * (n-1)/n, the expected result MPI_Allgather's on the same bytes.  Left out:
 * in-place calls (sendbuf inside recvbuf).
 */
#include "coll.h"

static void shape(CollShape* s, size_t bytes, const CollEnv* e) {
    size_t per = bytes / zipcclTypeSize(e->dtype);
    s->count = per / e->nranks ? per / e->nranks : 1;
    s->sendElems = s->count;
    s->recvElems = s->count * e->nranks;
    s->bytes = s->recvElems * zipcclTypeSize(e->dtype);
}

static void init(void* send, const CollShape* s, const CollEnv* e) {
    benchFill(e, zipcclCollAllGather, e->rank, 0, s->sendElems, s->sendElems, send);
}

static zipcclResult_t run(const void* send, void* recv, const CollShape* s, const CollEnv* e,
                          const zipcclCallConfig_t* cfg, zipcclRequest_t* req) {
    if (!req) return zipcclAllGather(send, recv, s->count, e->dtype, e->comm, cfg, NULL);
    return zipcclAllGatherAsync(send, recv, s->count, e->dtype, e->comm, cfg, NULL, req);
}

static void expected(void* want, const void* send, const CollShape* s, const CollEnv* e) {
    MCHECK(MPI_Allgather(send, (int)s->count, e->elem, want, (int)s->count, e->elem,
                         MPI_COMM_WORLD));
}

const CollTest allGatherTest = {
    .name = "allgather", .kind = zipcclCollAllGather, .busFactor = 1.0, .autoPerRank = 1,
    .ownAlgo = zipcclAlgoRing, .shape = shape, .init = init, .run = run, .expected = expected,
};
