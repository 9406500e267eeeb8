/*
 * reduce.c — zipccl-bench's reductions, ReduceScatter and AllReduce, and the
 * one reference both are checked against: the library's documented
 * reduction (docs/COLLECTIVES.md §3) recomputed here from regenerated
 * inputs, so the result is checked against arithmetic that never went over
 * the wire.
 *
 * bytes = ReduceScatter's whole input buffer (n x count), AllReduce's
 * buffer; busbw factors (n-1)/n and 2(n-1)/n.  Left out: in-place calls, and
 * any reference for MPI's own reductions (they round at every combine in
 * MPI's order, so the driver reports how many elements differ instead).
 */
#include <stdint.h>
#include <stdlib.h>

#include "coll.h"
#include "zipccl_float.h"

static float loadFloat(const void* p, size_t i, zipcclDataType_t dtype) {
    if (dtype == zipcclFloat32) return ((const float*)p)[i];
    uint16_t h = ((const uint16_t*)p)[i];
    return dtype == zipcclBfloat16 ? zipcclBf16ToFloat(h) : zipcclFp16ToFloat(h);
}

static void storeFloat(void* p, size_t i, float v, zipcclDataType_t dtype) {
    if (dtype == zipcclFloat32) ((float*)p)[i] = v;
    else ((uint16_t*)p)[i] = dtype == zipcclBfloat16 ? zipcclFloatToBf16(v) : zipcclFloatToFp16(v);
}

/* Elements [off, off+len) of the reduced buffer into out: the fp32 sum of
 * the ranks' inputs (each `total` elements, regenerated) in the order b+1,
 * ..., b+n-1, b (mod n) for block b, divided by n for avg, rounded once to
 * the dtype.  Works in chunks so a large buffer needs little scratch. */
static void reduceBlock(const CollEnv* e, zipcclCollKind_t kind, int b, size_t off, size_t len,
                        size_t total, void* out) {
    const int n = e->nranks;
    const size_t es = zipcclTypeSize(e->dtype), chunk = 1u << 18;
    float* acc = benchAlloc(chunk * sizeof(float));
    unsigned char* in = benchAlloc(chunk * es);
    for (size_t c0 = 0; c0 < len; c0 += chunk) {
        size_t m = len - c0 < chunk ? len - c0 : chunk;
        for (int k = 1; k <= n; k++) {
            benchFill(e, kind, (b + k) % n, off + c0, m, total, in);
            for (size_t i = 0; i < m; i++)
                acc[i] = k == 1 ? loadFloat(in, i, e->dtype) : acc[i] + loadFloat(in, i, e->dtype);
        }
        for (size_t i = 0; i < m; i++)
            storeFloat((char*)out + c0 * es, i, e->op == zipcclAvg ? acc[i] / (float)n : acc[i],
                       e->dtype);
    }
    free(in);
    free(acc);
}

/* ---- ReduceScatter: rank r receives block r (count elements) ------------ */

static void shapeRs(CollShape* s, size_t bytes, const CollEnv* e) {
    size_t per = bytes / zipcclTypeSize(e->dtype);
    s->count = per / e->nranks ? per / e->nranks : 1;
    s->sendElems = s->count * e->nranks;
    s->recvElems = s->count;
    s->bytes = s->sendElems * zipcclTypeSize(e->dtype);
}

static void initRs(void* send, const CollShape* s, const CollEnv* e) {
    benchFill(e, zipcclCollReduceScatter, e->rank, 0, s->sendElems, s->sendElems, send);
}

static zipcclResult_t runRs(const void* send, void* recv, const CollShape* s, const CollEnv* e,
                            const zipcclCallConfig_t* cfg, zipcclRequest_t* req) {
    if (!req) return zipcclReduceScatter(send, recv, s->count, e->dtype, e->op, e->comm, cfg, NULL);
    return zipcclReduceScatterAsync(send, recv, s->count, e->dtype, e->op, e->comm, cfg, NULL, req);
}

static void expectedRs(void* want, const void* send, const CollShape* s, const CollEnv* e) {
    (void)send;
    reduceBlock(e, zipcclCollReduceScatter, e->rank, (size_t)e->rank * s->count, s->count,
                s->sendElems, want);
}

const CollTest reduceScatterTest = {
    .name = "reducescatter", .kind = zipcclCollReduceScatter, .busFactor = 1.0, .reduction = 1,
    .ownAlgo = zipcclAlgoDirect, .shape = shapeRs, .init = initRs, .run = runRs,
    .expected = expectedRs,
};

/* ---- AllReduce: every rank receives the whole reduced buffer ------------ */

static void shapeAr(CollShape* s, size_t bytes, const CollEnv* e) {
    size_t per = bytes / zipcclTypeSize(e->dtype);
    s->count = per ? per : 1;
    s->sendElems = s->recvElems = s->count;
    s->bytes = s->count * zipcclTypeSize(e->dtype);
}

static void initAr(void* send, const CollShape* s, const CollEnv* e) {
    benchFill(e, zipcclCollAllReduce, e->rank, 0, s->sendElems, s->sendElems, send);
}

static zipcclResult_t runAr(const void* send, void* recv, const CollShape* s, const CollEnv* e,
                            const zipcclCallConfig_t* cfg, zipcclRequest_t* req) {
    if (!req) return zipcclAllReduce(send, recv, s->count, e->dtype, e->op, e->comm, cfg, NULL);
    return zipcclAllReduceAsync(send, recv, s->count, e->dtype, e->op, e->comm, cfg, NULL, req);
}

/* The buffer's blocks: count/n elements each, the first count%n one longer. */
static void expectedAr(void* want, const void* send, const CollShape* s, const CollEnv* e) {
    (void)send;
    const size_t n = (size_t)e->nranks, base = s->count / n, extra = s->count % n;
    const size_t es = zipcclTypeSize(e->dtype);
    for (size_t b = 0; b < n; b++) {
        size_t off = b * base + (b < extra ? b : extra);
        reduceBlock(e, zipcclCollAllReduce, (int)b, off, base + (b < extra), s->sendElems,
                    (char*)want + off * es);
    }
}

const CollTest allReduceTest = {
    .name = "allreduce", .kind = zipcclCollAllReduce, .busFactor = 2.0, .reduction = 1,
    .ownAlgo = zipcclAlgoDirect, .shape = shapeAr, .init = initAr, .run = runAr,
    .expected = expectedAr,
};
