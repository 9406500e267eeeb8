/*
 * transport_nccl.c — ZipCCL's transport over NCCL (transport.h's table):
 * device buffers, work enqueued on the caller's CUDA stream.
 *
 *   native      ncclAllGather / ncclReduceScatter / ncclAllReduce (NCCL's own
 *               numerics, ncclAvg for avg) and grouped ncclSend/ncclRecv for
 *               AlltoAll(v), which NCCL has no collective for.
 *   raw         designs of this transport's own (runOwn) over grouped
 *               ncclSend/ncclRecv, uncompressed: NCCL's receives take
 *               exactly the message's size and its work is stream-ordered,
 *               so the table's message entries, which coll_algos.c's
 *               designs run on, are not implemented here yet.
 *   compressed  the same designs with each block coded once on the device
 *               (the communicator's codec table, c->codec: the CUDA codec,
 *               codec_ops.h), frame sizes exchanged first (8 bytes per
 *               pair: NCCL needs the size of a receive up front), frames
 *               exchanged, decoded on the device, whose frame header carries
 *               count and dtype so a receiver detects a peer that disagrees
 *               on counts.
 *
 * Every exchange includes the rank itself (a self send/receive), so a
 * single-GPU communicator still runs the whole compressed path.  Reductions
 * use the canonical order of docs/COLLECTIVES.md (block b: ranks b+1, ...,
 * b in fp32, one rounding) with the kernels of transport_nccl_kernels.cu,
 * so a GPU raw/compressed result equals the CPU one bit for bit.
 *
 * Left out (documented in COLLECTIVES.md): the ring ReduceScatter
 * (zipcclUnsupported on NCCL), piece-level pipelining of the codec with the
 * wire (the device codec is fast next to the link), and timeouts: NCCL calls
 * block inside NCCL.  Calls run at issue; the request completes when the
 * host part is done and the device work is ordered on the stream.
 */
#include <stdio.h>
#include <string.h>

#include "coll_internal.h"

/* ---- the entries every transport shares here: no request slots ---------- */
/* NCCL's work is ordered on the caller's stream, so a slot is never in
 * flight: a native call leaves it empty and its wait returns at once. */
static void ncclReqInit(void* reqs, int n) { memset(reqs, 0, sizeof(int) * (size_t)n); }
static int ncclReqActive(const void* reqs, int i) { (void)reqs, (void)i; return 0; }
static zipcclResult_t ncclTest(struct zipcclComm* c, void* reqs, int i, int* done) {
    (void)c, (void)reqs, (void)i;
    *done = 1;
    return zipcclSuccess;
}
static zipcclResult_t ncclTestAll(struct zipcclComm* c, void* reqs, int n, int* done) {
    (void)c, (void)reqs, (void)n;
    *done = 1;
    return zipcclSuccess;
}
static void ncclAbandon(struct zipcclComm* c, void* reqs, int n, int nsend) { (void)c, (void)reqs, (void)n, (void)nsend; }
static void ncclIdle(struct zipcclComm* c, double idleSeconds, double yieldSeconds) {
    (void)c, (void)idleSeconds, (void)yieldSeconds;
}

#ifndef ZIPCCL_HAVE_CUDA

static zipcclResult_t ncclInit(struct zipcclComm* c, const void* handle) {
    (void)c, (void)handle;
    return zipcclSetError(zipcclUnsupported,
                          "zipcclCommInitNccl: libzipccl was built without CUDA/NCCL (no nvcc)");
}
static void ncclDestroy(struct zipcclComm* c) { (void)c; }
static zipcclResult_t ncclNativeStart(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, void* req,
                                      double* yieldS) {
    (void)c, (void)op, (void)st, (void)req, (void)yieldS;
    return zipcclSetError(zipcclUnsupported, "NCCL transport: built without CUDA");
}
static zipcclResult_t ncclRunOwn(struct zipcclComm* c, const zipcclOp* op, zipcclStrategy_t strategy,
                                 zipcclExecStats* st) {
    (void)c, (void)op, (void)strategy, (void)st;
    return zipcclSetError(zipcclUnsupported, "NCCL transport: built without CUDA");
}

zipcclResult_t zipcclNcclUniqueId(unsigned char id[ZIPCCL_NCCL_ID_BYTES]) {
    (void)id;
    return zipcclSetError(zipcclUnsupported, "zipcclCommUseNccl: libzipccl was built without CUDA/NCCL (no nvcc)");
}
zipcclResult_t zipcclNcclNetCreate(int rank, int nranks, const unsigned char id[ZIPCCL_NCCL_ID_BYTES],
                                   zipcclDeviceNet_t* out) {
    (void)rank, (void)nranks, (void)id, (void)out;
    return zipcclSetError(zipcclUnsupported, "zipcclCommUseNccl: libzipccl was built without CUDA/NCCL (no nvcc)");
}

#else

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

/* transport_nccl_kernels.cu */
int zipcclCudaAccumulate(float* acc, const void* x, size_t n, int dtype, int first, void* stream);
int zipcclCudaFinalize(void* out, const float* acc, size_t n, int dtype, int avg, int nranks,
                       void* stream);

enum { kDevSlots = 6 };
typedef struct {
    ncclComm_t nccl;      /* the caller's (not owned)                       */
    void* dev[kDevSlots]; /* 0 send frames, 1 recv frames, 2 acc, 3 tmp, 4 block, 5 codec workspace */
    size_t cap[kDevSlots];
    uint64_t* dSizes;     /* 2n sizes on the device for the size exchange */
    uint64_t* hSizes;     /* their host copy */
} NcclState;

static zipcclResult_t cudaOk(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return zipcclSuccess;
    return zipcclSetError(zipcclSystemError, "%s: CUDA error: %s", what, cudaGetErrorString(e));
}
static zipcclResult_t ncclOk(ncclResult_t e, const char* what) {
    if (e == ncclSuccess || e == ncclInProgress) return zipcclSuccess;
    return zipcclSetError(zipcclTransportError, "%s: NCCL error: %s", what, ncclGetErrorString(e));
}

/* The sends and receives of one group: the first failure is kept and named
 * (which call, to or from which peer), the group is still closed (an open
 * group would take the next calls in), and the failure wins over the
 * group's own result. */
typedef struct {
    ncclResult_t rc;
    char call[64];
} NcclGroup;
static void groupCall(NcclGroup* g, ncclResult_t rc, const char* call, int peer) {
    if (g->rc != ncclSuccess || rc == ncclSuccess || rc == ncclInProgress) return;
    g->rc = rc;
    snprintf(g->call, sizeof g->call, "%s with peer %d", call, peer);
}
static zipcclResult_t groupEnd(const NcclGroup* g, const char* what) {
    const ncclResult_t end = ncclGroupEnd();
    if (g->rc != ncclSuccess)
        return zipcclSetError(zipcclTransportError, "%s: %s: NCCL error: %s", what, g->call,
                              ncclGetErrorString(g->rc));
    return ncclOk(end, what);
}

static zipcclResult_t devScratch(struct zipcclComm* c, int slot, size_t bytes, void** out) {
    NcclState* s = c->tpState;
    if (bytes == 0) bytes = 1;
    if (s->cap[slot] < bytes) {
        if (s->dev[slot]) cudaFree(s->dev[slot]);
        s->dev[slot] = NULL;
        s->cap[slot] = 0;
        ZIPCCL_TRY(cudaOk(cudaMalloc(&s->dev[slot], bytes), "device scratch"));
        s->cap[slot] = bytes;
    }
    *out = s->dev[slot];
    return zipcclSuccess;
}

static ncclDataType_t ncclType(zipcclDataType_t dt) {
    return dt == zipcclFloat32 ? ncclFloat32 : dt == zipcclFloat16 ? ncclFloat16 : ncclBfloat16;
}

static zipcclResult_t ncclInit(struct zipcclComm* c, const void* handle) {
    ncclComm_t nc = (ncclComm_t)handle;
    ZIPCCL_TRY(ncclOk(ncclCommUserRank(nc, &c->rank), "ncclCommUserRank"));
    ZIPCCL_TRY(ncclOk(ncclCommCount(nc, &c->nranks), "ncclCommCount"));
    NcclState* s = calloc(1, sizeof *s);
    if (!s) return zipcclSetError(zipcclSystemError, "zipcclCommInitNccl: out of memory");
    s->nccl = nc;
    c->tpState = s;
    ZIPCCL_TRY(cudaOk(cudaMalloc((void**)&s->dSizes, 2 * sizeof(uint64_t) * (size_t)c->nranks), "size buffer"));
    ZIPCCL_TRY(cudaOk(cudaMallocHost((void**)&s->hSizes, 2 * sizeof(uint64_t) * (size_t)c->nranks), "size buffer"));
    c->threaded = 0; /* calls run at issue: their work is stream-ordered */
    return zipcclSuccess;
}

static void ncclDestroy(struct zipcclComm* c) {
    NcclState* s = c->tpState;
    if (!s) return;
    for (int i = 0; i < kDevSlots; i++)
        if (s->dev[i]) cudaFree(s->dev[i]);
    if (s->dSizes) cudaFree(s->dSizes);
    if (s->hSizes) cudaFreeHost(s->hSizes);
    free(s);
    c->tpState = NULL;
}

/* ---- the exchange every design is built from -------------------------------- */

typedef struct {
    struct zipcclComm* c;
    const zipcclOp* op;
    zipcclExecStats* st;
    cudaStream_t stream;
    int compressed;
    zipcclCodecParams_t params;
    zipcclCodecCtx codec; /* the device workspace and the stream */
} Nx;

/* Send sendBytes[p] bytes at sendPtr[p] to every p and receive from every p
 * into recvPtr[p]: recvBytes[p] is known (raw) or learnt by a size exchange
 * first (compressed; then recvCap[p] bounds it). */
static zipcclResult_t exchange(Nx* x, void* const* sendPtr, const size_t* sendBytes,
                               void* const* recvPtr, size_t* recvBytes, const size_t* recvCap) {
    struct zipcclComm* c = x->c;
    NcclState* s = c->tpState;
    ncclComm_t nc = ((NcclState*)c->tpState)->nccl;
    const int n = c->nranks;
    const char* what = zipcclCollName(x->op->kind);
    double t0 = zipcclNow();
    if (x->compressed) {
        for (int p = 0; p < n; p++) s->hSizes[p] = sendBytes[p];
        ZIPCCL_TRY(cudaOk(cudaMemcpyAsync(s->dSizes, s->hSizes, sizeof(uint64_t) * n, cudaMemcpyHostToDevice, x->stream), what));
        ZIPCCL_TRY(ncclOk(ncclGroupStart(), what));
        NcclGroup g = {ncclSuccess, ""};
        for (int p = 0; p < n; p++) {
            groupCall(&g, ncclSend(s->dSizes + p, 1, ncclUint64, p, nc, x->stream), "ncclSend (frame size)", p);
            groupCall(&g, ncclRecv(s->dSizes + n + p, 1, ncclUint64, p, nc, x->stream), "ncclRecv (frame size)", p);
        }
        ZIPCCL_TRY(groupEnd(&g, what));
        ZIPCCL_TRY(cudaOk(cudaMemcpyAsync(s->hSizes + n, s->dSizes + n, sizeof(uint64_t) * n, cudaMemcpyDeviceToHost, x->stream), what));
        ZIPCCL_TRY(cudaOk(cudaStreamSynchronize(x->stream), what));
        for (int p = 0; p < n; p++) {
            if (s->hSizes[n + p] > recvCap[p])
                return zipcclSetError(zipcclMismatch,
                                      "%s on rank %d: rank %d sends a %llu-byte frame, more than the %zu "
                                      "bytes its expected count can take (ranks disagree on counts)",
                                      what, c->rank, p, (unsigned long long)s->hSizes[n + p], recvCap[p]);
            recvBytes[p] = s->hSizes[n + p];
        }
    }
    ZIPCCL_TRY(ncclOk(ncclGroupStart(), what));
    NcclGroup g = {ncclSuccess, ""};
    for (int p = 0; p < n; p++) {
        if (sendBytes[p]) groupCall(&g, ncclSend(sendPtr[p], sendBytes[p], ncclUint8, p, nc, x->stream), "ncclSend", p);
        if (recvBytes[p]) groupCall(&g, ncclRecv(recvPtr[p], recvBytes[p], ncclUint8, p, nc, x->stream), "ncclRecv", p);
        if (p != c->rank) x->st->wireBytes += sendBytes[p];
    }
    ZIPCCL_TRY(groupEnd(&g, what));
    x->st->wireSeconds += zipcclNow() - t0;
    return zipcclSuccess;
}

static zipcclResult_t encodeDev(Nx* x, const void* src, size_t count, void* dst, size_t cap, size_t* size) {
    double t0 = zipcclNow();
    zipcclResult_t r = x->c->codec->compress(&x->codec, src, count, x->op->dtype, dst, cap, size, &x->params);
    x->st->codecSeconds += zipcclNow() - t0;
    return r;
}

static zipcclResult_t decodeDev(Nx* x, const void* src, size_t size, void* dst, size_t count, int peer) {
    double t0 = zipcclNow();
    size_t got = 0;
    zipcclResult_t r = x->c->codec->decompress(&x->codec, src, size, dst, count * zipcclTypeSize(x->op->dtype), &got,
                                               x->op->dtype, NULL);
    x->st->codecSeconds += zipcclNow() - t0;
    if (r == zipcclSuccess && got != count)
        r = zipcclSetError(zipcclMismatch, "%s on rank %d: rank %d sent %zu elements, expected %zu",
                           zipcclCollName(x->op->kind), x->c->rank, peer, got, count);
    else if (r == zipcclDstTooSmall)
        r = zipcclSetError(zipcclMismatch, "%s on rank %d: rank %d sent more elements than expected (%zu)",
                           zipcclCollName(x->op->kind), x->c->rank, peer, count);
    return r;
}

/* ---- designs ------------------------------------------------------------------ */

/* AllGather of blocks counts[p] at displs[p] (elements); `mine` is ours. */
static zipcclResult_t gatherDev(Nx* x, const void* mine, void* recvbuf, const size_t* counts,
                                const size_t* displs) {
    struct zipcclComm* c = x->c;
    const int n = c->nranks, r = c->rank;
    const size_t esz = zipcclTypeSize(x->op->dtype);
    void *sp[n], *rp[n];
    size_t sb[n], rb[n], rcap[n], off = 0;
    char* out = recvbuf;
    memset(sp, 0, sizeof sp), memset(rp, 0, sizeof rp), memset(sb, 0, sizeof sb), memset(rb, 0, sizeof rb);
    if (!x->compressed) {
        for (int p = 0; p < n; p++) {
            sp[p] = (void*)mine, sb[p] = p == r ? 0 : counts[r] * esz;
            rp[p] = out + displs[p] * esz, rb[p] = p == r ? 0 : counts[p] * esz;
        }
        if (mine != out + displs[r] * esz && counts[r])
            ZIPCCL_TRY(cudaOk(cudaMemcpyAsync(out + displs[r] * esz, mine, counts[r] * esz, cudaMemcpyDeviceToDevice, x->stream), "AllGather"));
        x->st->rawBytes += counts[r] * esz * (size_t)(n - 1);
        return exchange(x, sp, sb, rp, rb, NULL);
    }
    for (int p = 0; p < n; p++) rcap[p] = c->codec->bound(counts[p], x->op->dtype, 0), off += rcap[p];
    void *frame, *stage;
    ZIPCCL_TRY(devScratch(c, 0, rcap[r], &frame));
    ZIPCCL_TRY(devScratch(c, 1, off, &stage));
    size_t fsz = 0;
    ZIPCCL_TRY(encodeDev(x, mine, counts[r], frame, rcap[r], &fsz)); /* once, for every peer */
    off = 0;
    for (int p = 0; p < n; p++) {
        sp[p] = frame, sb[p] = fsz;
        rp[p] = (char*)stage + off, off += rcap[p];
    }
    x->st->rawBytes += counts[r] * esz * (size_t)(n - 1);
    ZIPCCL_TRY(exchange(x, sp, sb, rp, rb, rcap));
    for (int p = 0; p < n; p++)
        ZIPCCL_TRY(decodeDev(x, rp[p], rb[p], out + displs[p] * esz, counts[p], p));
    return zipcclSuccess;
}

static zipcclResult_t alltoallDev(Nx* x, const char* sendbuf, const size_t* sc, const size_t* sd,
                                  char* recvbuf, const size_t* rc, const size_t* rd) {
    struct zipcclComm* c = x->c;
    const int n = c->nranks, r = c->rank;
    const zipcclDataType_t dt = x->op->dtype;
    const size_t esz = zipcclTypeSize(dt);
    void *sp[n], *rp[n];
    size_t sb[n], rb[n], rcap[n], scap = 0, rtot = 0, extent = 0;
    memset(sp, 0, sizeof sp), memset(rp, 0, sizeof rp), memset(sb, 0, sizeof sb), memset(rb, 0, sizeof rb);
    for (int p = 0; p < n; p++)
        if (sd[p] + sc[p] > extent) extent = sd[p] + sc[p];
    if (sendbuf == recvbuf && extent) { /* in place: stage the input */
        void* tmp;
        ZIPCCL_TRY(devScratch(c, 4, extent * esz, &tmp));
        ZIPCCL_TRY(cudaOk(cudaMemcpyAsync(tmp, sendbuf, extent * esz, cudaMemcpyDeviceToDevice, x->stream), "AlltoAll"));
        sendbuf = tmp;
    }
    for (int p = 0; p < n; p++)
        if (p != r) x->st->rawBytes += sc[p] * esz;
    if (!x->compressed) {
        for (int p = 0; p < n; p++) {
            sp[p] = (void*)(sendbuf + sd[p] * esz), sb[p] = sc[p] * esz;
            rp[p] = recvbuf + rd[p] * esz, rb[p] = rc[p] * esz;
        }
        return exchange(x, sp, sb, rp, rb, NULL);
    }
    for (int p = 0; p < n; p++) {
        scap += c->codec->bound(sc[p], dt, 0);
        rcap[p] = c->codec->bound(rc[p], dt, 0), rtot += rcap[p];
    }
    void *frames, *stage;
    ZIPCCL_TRY(devScratch(c, 0, scap, &frames));
    ZIPCCL_TRY(devScratch(c, 1, rtot, &stage));
    size_t so = 0, ro = 0;
    for (int p = 0; p < n; p++) {
        size_t cap = c->codec->bound(sc[p], dt, 0);
        sp[p] = (char*)frames + so;
        ZIPCCL_TRY(encodeDev(x, sendbuf + sd[p] * esz, sc[p], sp[p], cap, &sb[p]));
        so += cap;
        rp[p] = (char*)stage + ro, ro += rcap[p];
    }
    ZIPCCL_TRY(exchange(x, sp, sb, rp, rb, rcap));
    for (int p = 0; p < n; p++) ZIPCCL_TRY(decodeDev(x, rp[p], rb[p], recvbuf + rd[p] * esz, rc[p], p));
    return zipcclSuccess;
}

/* Direct ReduceScatter: block d of our input goes to rank d; we add the n
 * contributions to our block in the canonical order r+1, ..., r. */
static zipcclResult_t reduceScatterDev(Nx* x, const char* sendbuf, const size_t* counts,
                                       const size_t* displs, void* out) {
    struct zipcclComm* c = x->c;
    const int n = c->nranks, r = c->rank;
    const zipcclDataType_t dt = x->op->dtype;
    const size_t esz = zipcclTypeSize(dt), mine = counts[r];
    void *sp[n], *rp[n];
    size_t sb[n], rb[n], rcap[n], scap = 0, rtot = 0;
    void *acc, *tmp, *frames = NULL, *stage;
    memset(sp, 0, sizeof sp), memset(rp, 0, sizeof rp), memset(sb, 0, sizeof sb), memset(rb, 0, sizeof rb);
    ZIPCCL_TRY(devScratch(c, 2, mine * sizeof(float), &acc));
    ZIPCCL_TRY(devScratch(c, 3, mine * esz, &tmp));
    for (int p = 0; p < n; p++) {
        rcap[p] = x->compressed ? c->codec->bound(mine, dt, 0) : mine * esz, rtot += rcap[p];
        scap += x->compressed ? c->codec->bound(counts[p], dt, 0) : 0;
        if (p != r) x->st->rawBytes += counts[p] * esz;
    }
    ZIPCCL_TRY(devScratch(c, 1, rtot, &stage));
    if (x->compressed) ZIPCCL_TRY(devScratch(c, 0, scap, &frames));
    size_t so = 0, ro = 0;
    for (int p = 0; p < n; p++) {
        const char* blk = sendbuf + displs[p] * esz;
        if (x->compressed) {
            size_t cap = c->codec->bound(counts[p], dt, 0);
            sp[p] = (char*)frames + so, so += cap;
            ZIPCCL_TRY(encodeDev(x, blk, counts[p], sp[p], cap, &sb[p]));
        } else {
            sp[p] = (void*)blk, sb[p] = counts[p] * esz;
        }
        rp[p] = (char*)stage + ro, ro += rcap[p], rb[p] = mine * esz;
    }
    ZIPCCL_TRY(exchange(x, sp, sb, rp, rb, rcap));
    for (int j = 1; j <= n; j++) {
        int p = (r + j) % n;
        const void* src = rp[p];
        if (x->compressed) {
            ZIPCCL_TRY(decodeDev(x, rp[p], rb[p], tmp, mine, p));
            src = tmp;
        }
        if (zipcclCudaAccumulate(acc, src, mine, (int)dt, j == 1, x->stream))
            return zipcclSetError(zipcclSystemError, "ReduceScatter: accumulate kernel failed");
    }
    if (zipcclCudaFinalize(out, acc, mine, (int)dt, x->op->op == zipcclAvg, n, x->stream))
        return zipcclSetError(zipcclSystemError, "ReduceScatter: finalize kernel failed");
    return zipcclSuccess;
}

static zipcclResult_t ncclNativeStart(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, void* req,
                                      double* yieldS) {
    (void)req, (void)yieldS; /* stream-ordered: nothing for the caller to wait for */
    ncclComm_t nc = ((NcclState*)c->tpState)->nccl;
    cudaStream_t s = (cudaStream_t)op->stream;
    const int n = c->nranks, r = c->rank;
    const size_t esz = zipcclTypeSize(op->dtype);
    const ncclDataType_t t = ncclType(op->dtype);
    const ncclRedOp_t rop = op->op == zipcclAvg ? ncclAvg : ncclSum;
    const char* what = zipcclCollName(op->kind);
    double t0 = zipcclNow();
    switch (op->kind) {
    case zipcclCollAllGather:
        ZIPCCL_TRY(ncclOk(ncclAllGather(op->sendbuf, op->recvbuf, op->count, t, nc, s), what));
        st->rawBytes = op->count * esz * (size_t)(n - 1);
        break;
    case zipcclCollReduceScatter:
        ZIPCCL_TRY(ncclOk(ncclReduceScatter(op->sendbuf, op->recvbuf, op->count, t, rop, nc, s), what));
        st->rawBytes = op->count * esz * (size_t)(n - 1);
        break;
    case zipcclCollAllReduce:
        ZIPCCL_TRY(ncclOk(ncclAllReduce(op->sendbuf, op->recvbuf, op->count, t, rop, nc, s), what));
        st->rawBytes = 2 * op->count * esz * (size_t)(n - 1) / (size_t)n;
        break;
    case zipcclCollAlltoAll:
    case zipcclCollAlltoAllv: {
        int v = op->kind == zipcclCollAlltoAllv;
        const char* src = op->sendbuf;
        size_t extent = 0;
        for (int p = 0; p < n; p++) {
            size_t e = v ? op->sdispls[p] + op->sendcounts[p] : (size_t)(p + 1) * op->count;
            if (e > extent) extent = e;
        }
        if (op->sendbuf == op->recvbuf && extent) {
            void* tmp;
            ZIPCCL_TRY(devScratch(c, 4, extent * esz, &tmp));
            ZIPCCL_TRY(cudaOk(cudaMemcpyAsync(tmp, op->sendbuf, extent * esz, cudaMemcpyDeviceToDevice, s), what));
            src = tmp;
        }
        ZIPCCL_TRY(ncclOk(ncclGroupStart(), what));
        NcclGroup g = {ncclSuccess, ""};
        for (int p = 0; p < n; p++) {
            size_t scnt = v ? op->sendcounts[p] : op->count, sdsp = v ? op->sdispls[p] : (size_t)p * op->count;
            size_t rcnt = v ? op->recvcounts[p] : op->count, rdsp = v ? op->rdispls[p] : (size_t)p * op->count;
            if (scnt) groupCall(&g, ncclSend(src + sdsp * esz, scnt, t, p, nc, s), "ncclSend", p);
            if (rcnt) groupCall(&g, ncclRecv((char*)op->recvbuf + rdsp * esz, rcnt, t, p, nc, s), "ncclRecv", p);
            if (p != r) st->rawBytes += scnt * esz;
        }
        ZIPCCL_TRY(groupEnd(&g, what));
        break;
    }
    default: return zipcclSetError(zipcclInternalError, "native NCCL: unknown collective");
    }
    st->wireBytes = st->rawBytes;
    st->wireSeconds = zipcclNow() - t0;
    return zipcclSuccess;
}

static zipcclResult_t ncclRunOwn(struct zipcclComm* c, const zipcclOp* op, zipcclStrategy_t strategy,
                                 zipcclExecStats* st) {
    const char* what = zipcclCollName(op->kind);
    if ((op->kind == zipcclCollReduceScatter || op->kind == zipcclCollAllReduce) && st->algo == zipcclAlgoRing)
        return zipcclSetError(zipcclUnsupported, "%s: the ring design is implemented for MPI communicators only; use direct", what);
    if (st->algo == zipcclAlgoOneShot)
        return zipcclSetError(zipcclUnsupported, "%s: the one-shot design is implemented for MPI communicators only", what);
    Nx x;
    memset(&x, 0, sizeof x);
    x.c = c, x.op = op, x.st = st, x.stream = (cudaStream_t)op->stream;
    x.compressed = strategy == zipcclStrategyCompressed;
    zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
    p.codec = st->codec;
    x.params = p;
    const int n = c->nranks;
    const size_t esz = zipcclTypeSize(op->dtype);
    size_t counts[n], displs[n], maxCount = 0;
    if (op->kind == zipcclCollAllReduce) {
        size_t base = op->count / (size_t)n, extra = op->count % (size_t)n, d = 0;
        for (int i = 0; i < n; i++) counts[i] = base + ((size_t)i < extra), displs[i] = d, d += counts[i];
    } else {
        for (int i = 0; i < n; i++) counts[i] = op->count, displs[i] = (size_t)i * op->count;
    }
    maxCount = op->count; /* the largest block one codec call sees */
    if (op->kind == zipcclCollAlltoAllv)
        for (int i = 0; i < n; i++) {
            if (op->sendcounts[i] > maxCount) maxCount = op->sendcounts[i];
            if (op->recvcounts[i] > maxCount) maxCount = op->recvcounts[i];
        }
    if (x.compressed) {
        if (!c->codecOk) return zipcclSetError(zipcclUnsupported, "%s: compressed strategy needs the CUDA codec, which is not usable here", what);
        x.codec.workspaceSize = c->codec->workspace(maxCount, op->dtype);
        x.codec.stream = op->stream;
        ZIPCCL_TRY(devScratch(c, 5, x.codec.workspaceSize, &x.codec.workspace));
    }
    switch (op->kind) {
    case zipcclCollAllGather:
        if (!op->count) return zipcclSuccess;
        return gatherDev(&x, op->sendbuf, op->recvbuf, counts, displs);
    case zipcclCollReduceScatter:
        if (!op->count) return zipcclSuccess;
        return reduceScatterDev(&x, op->sendbuf, counts, displs, op->recvbuf);
    case zipcclCollAllReduce: {
        if (!op->count) return zipcclSuccess;
        void* block;
        ZIPCCL_TRY(devScratch(c, 4, counts[c->rank] * esz, &block));
        ZIPCCL_TRY(reduceScatterDev(&x, op->sendbuf, counts, displs, block));
        return gatherDev(&x, block, op->recvbuf, counts, displs);
    }
    case zipcclCollAlltoAll:
        if (!op->count) return zipcclSuccess;
        return alltoallDev(&x, op->sendbuf, counts, displs, op->recvbuf, counts, displs);
    case zipcclCollAlltoAllv:
        return alltoallDev(&x, op->sendbuf, op->sendcounts, op->sdispls, op->recvbuf, op->recvcounts, op->rdispls);
    default: break;
    }
    return zipcclSetError(zipcclInternalError, "NCCL: unknown collective");
}

/* ---- NCCL as a device network (zipcclCommUseNccl) ------------------------------
 * The communicator's control stays with MPI (agreement, frame sizes); NCCL
 * only moves device memory: one round = one group of ncclSend/ncclRecv of
 * exact sizes (the rank itself included: a device-to-device copy), and
 * NCCL's own collectives for strategy native. */

_Static_assert(sizeof(ncclUniqueId) == ZIPCCL_NCCL_ID_BYTES, "NCCL's unique id is 128 bytes");

zipcclResult_t zipcclNcclUniqueId(unsigned char id[ZIPCCL_NCCL_ID_BYTES]) {
    ncclUniqueId u;
    ZIPCCL_TRY(ncclOk(ncclGetUniqueId(&u), "zipcclCommUseNccl: ncclGetUniqueId"));
    memcpy(id, &u, sizeof u);
    return zipcclSuccess;
}

typedef struct {
    ncclComm_t nccl; /* owned */
    int nranks;
} NcclNet;

static zipcclResult_t netExchange(void* ctx, const void* const* send, const size_t* sendBytes, void* const* recv,
                                  const size_t* recvBytes, void* stream) {
    NcclNet* x = ctx;
    ZIPCCL_TRY(ncclOk(ncclGroupStart(), "NCCL exchange"));
    NcclGroup g = {ncclSuccess, ""};
    for (int p = 0; p < x->nranks; p++) {
        if (sendBytes[p]) groupCall(&g, ncclSend(send[p], sendBytes[p], ncclUint8, p, x->nccl, stream), "ncclSend", p);
        if (recvBytes[p]) groupCall(&g, ncclRecv(recv[p], recvBytes[p], ncclUint8, p, x->nccl, stream), "ncclRecv", p);
    }
    return groupEnd(&g, "NCCL exchange");
}

static zipcclResult_t netCollective(void* ctx, zipcclCollKind_t kind, const void* sendbuf, void* recvbuf, size_t count,
                                    zipcclDataType_t dtype, zipcclRedOp_t op, void* stream) {
    NcclNet* x = ctx;
    const ncclDataType_t t = ncclType(dtype);
    const ncclRedOp_t rop = op == zipcclAvg ? ncclAvg : ncclSum;
    cudaStream_t s = stream;
    switch (kind) {
    case zipcclCollAllGather: return ncclOk(ncclAllGather(sendbuf, recvbuf, count, t, x->nccl, s), "ncclAllGather");
    case zipcclCollReduceScatter:
        return ncclOk(ncclReduceScatter(sendbuf, recvbuf, count, t, rop, x->nccl, s), "ncclReduceScatter");
    case zipcclCollAllReduce: return ncclOk(ncclAllReduce(sendbuf, recvbuf, count, t, rop, x->nccl, s), "ncclAllReduce");
    default: return zipcclSetError(zipcclInternalError, "NCCL network: no native %s", zipcclCollName(kind));
    }
}

static void netDestroy(void* ctx) {
    NcclNet* x = ctx;
    if (x->nccl) ncclCommDestroy(x->nccl);
    free(x);
}

zipcclResult_t zipcclNcclNetCreate(int rank, int nranks, const unsigned char id[ZIPCCL_NCCL_ID_BYTES],
                                   zipcclDeviceNet_t* out) {
    NcclNet* x = calloc(1, sizeof *x);
    if (!x) return zipcclSetError(zipcclSystemError, "zipcclCommUseNccl: out of memory");
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    x->nranks = nranks;
    zipcclResult_t res = ncclOk(ncclCommInitRank(&x->nccl, nranks, u, rank), "zipcclCommUseNccl: ncclCommInitRank");
    if (res != zipcclSuccess) {
        x->nccl = NULL; /* a failed init leaves nothing to destroy */
        free(x);
        return res;
    }
    *out = (zipcclDeviceNet_t){.name = "nccl", .ctx = x, .exchange = netExchange, .collective = netCollective,
                               .destroy = netDestroy};
    return zipcclSuccess;
}

#endif /* ZIPCCL_HAVE_CUDA */

static zipcclResult_t ncclNativeFinish(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st) {
    (void)c, (void)op, (void)st; /* ncclAvg divides on the device */
    return zipcclSuccess;
}

/* No message entries (NCCL's receives take exactly the message's size and
 * order on streams; see transport.h), no host-side control: no call
 * agreement, calibration or measured selection, and designs of its own. */
const zipcclTransport zipcclTransportNccl = {
    .name = "nccl",
    .caps = 0,
    .device = 1,
    .reqSize = sizeof(int),
    .init = ncclInit,
    .destroy = ncclDestroy,
    .reqInit = ncclReqInit,
    .reqActive = ncclReqActive,
    .testAll = ncclTestAll,
    .test = ncclTest,
    .abandon = ncclAbandon,
    .idle = ncclIdle,
    .nativeStart = ncclNativeStart,
    .nativeFinish = ncclNativeFinish,
    .runOwn = ncclRunOwn,
};
