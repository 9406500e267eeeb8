/*
 * coll_run.c — a decided call, run on its buffers.  The front door (coll.c)
 * has started the call agreement and the switcher has decided the strategy
 * and design; this file runs the call where its buffers live:
 *
 *   host buffers     the transport's own collective (native), one of our
 *                    designs over its messages (coll_algos.c), or, on a
 *                    transport without message entries (NCCL), its own;
 *   device buffers   (an MPI communicator after zipcclCommSetDevice)
 *     staged         sendbuf down into host staging (pinned, from the
 *                    caller's table), the host run above on the staging
 *                    with the CPU codec, what was received back up: every
 *                    strategy and design, the same bits as on host buffers;
 *     coded          a compressed AllGather or ReduceScatter on a table that
 *                    codes on the device (CUDA, or host memory standing in:
 *                    zipcclDeviceMemoryHost).  AllGather:
 *                    this rank's block is compressed where it lives and only
 *                    its frame goes down; the frames' sizes are summed over
 *                    the ranks (each rank adds its own at its index), the
 *                    frames travel by the raw AlltoAllv design (ours to
 *                    every peer, each peer's into its slot), the received
 *                    ones go up and each is decoded into its block of
 *                    recvbuf.  ReduceScatter: each peer's block compressed
 *                    on the device, the (n, n) sizes summed, the frames
 *                    exchanged the same way, each received one decoded and
 *                    added on the device in the canonical order, our own
 *                    block last, one rounding.  The bus carries frames, not
 *                    raw blocks.
 *
 * The copies come after the work on the call's stream (the table orders
 * them) and are complete before the call returns, so the caller's next use
 * of recvbuf on that stream sees the data.  A copy that fails leaves the
 * peers waiting for this rank: they time out naming it, as for a stopped
 * rank, and the communicator breaks.
 *
 * Left out: coding AllReduce and the All-to-Alls on the device
 * (staged: the CPU codec codes them on the host), pipelining the coded
 * calls' copies and codec with their messages (one frame per peer per call;
 * ReduceScatter's sizes are an (n, n) all-reduce of doubles), device
 * buffers over NCCL with this table (an NCCL communicator's buffers are
 * device memory already).
 */
#include <stdio.h>
#include <string.h>

#include "coll_agree.h"
#include "coll_algos.h"
#include "coll_run.h"

/* ---- host buffers ------------------------------------------------------------ */

static zipcclResult_t runHost(struct zipcclComm* c, const zipcclOp* op, zipcclStrategy_t s, zipcclExecStats* st) {
    const zipcclTransport* tp = c->tp;
    if (s == zipcclStrategyNative) {
        ZIPCCL_TRY(zipcclAgreeWait(c)); /* the transport's collectives cannot survive ranks that disagree */
        double yieldS = -1;
        ZIPCCL_TRY(tp->nativeStart(c, op, st, c->agree.ctl, &yieldS));
        ZIPCCL_TRY(zipcclWaitSlots(c, c->agree.ctl, 1, zipcclCollName(op->kind), yieldS, &st->wireSeconds));
        return tp->nativeFinish(c, op, st);
    }
    if (tp->runOwn) return tp->runOwn(c, op, s, st);
    return zipcclRunAlgo(c, op, st);
}

/* ---- the device's memory ------------------------------------------------------- */

enum { kStageSend = 0, kStageRecv = 1 }; /* host staging slots */
enum { kDevFrames = 0, kDevWork = 1, kDevAcc = 2, kDevTmp = 3 }; /* device scratch slots */

/* Grow *p to at least `bytes` (by 1/8 more, as the communicator's
 * scratch) with the table's device allocator (dev) or its host staging one;
 * old contents are not kept.  NULL when out of memory. */
static void* grow(const zipcclDeviceMemory_t* d, int dev, void** p, size_t* cap, size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (*cap >= bytes) return *p;
    if (*p) dev ? d->free(d->ctx, *p) : d->hostFree ? d->hostFree(d->ctx, *p) : free(*p);
    *cap = bytes + bytes / 8;
    *p = dev ? d->alloc(d->ctx, *cap) : d->hostAlloc ? d->hostAlloc(d->ctx, *cap) : malloc(*cap);
    if (!*p) *cap = 0;
    return *p;
}
static void* hostStage(struct zipcclComm* c, int slot, size_t bytes) {
    return grow(&c->dev, 0, &c->hostStage[slot], &c->hostStageCap[slot], bytes);
}
static void* devScratch(struct zipcclComm* c, int slot, size_t bytes) {
    return grow(&c->dev, 1, &c->devScratch[slot], &c->devScratchCap[slot], bytes);
}

void zipcclDeviceRelease(struct zipcclComm* c) {
    if (!c->onDevice) return;
    const zipcclDeviceMemory_t* d = &c->dev;
    if (d->bind) d->bind(d->ctx);
    if (c->devStream) {
        d->synchronize(d->ctx, c->devStream);
        d->streamDestroy(d->ctx, c->devStream);
        c->devStream = NULL;
    }
    for (int i = 0; i < ZIPCCL_DEV_SLOTS; i++) {
        if (c->devScratch[i]) d->free(d->ctx, c->devScratch[i]);
        c->devScratch[i] = NULL;
        c->devScratchCap[i] = 0;
    }
    for (int i = 0; i < 2; i++) {
        if (c->hostStage[i]) d->hostFree ? d->hostFree(d->ctx, c->hostStage[i]) : free(c->hostStage[i]);
        c->hostStage[i] = NULL;
        c->hostStageCap[i] = 0;
    }
}

/* Device -> host (down) and host -> device (up), counted on the call. */
static zipcclResult_t down(struct zipcclComm* c, const zipcclOp* op, void* host, const void* dev, size_t bytes,
                           zipcclExecStats* st) {
    if (!bytes) return zipcclSuccess;
    const double t = zipcclNow();
    zipcclResult_t r = c->dev.toHost(c->dev.ctx, host, dev, bytes, op->stream);
    st->busSeconds += zipcclNow() - t;
    st->busBytes += bytes;
    if (r == zipcclSuccess) return r;
    return zipcclPrefixError(r, "%s: copying %zu bytes from %s memory to the host", zipcclCollName(op->kind), bytes,
                             c->dev.name);
}

static zipcclResult_t up(struct zipcclComm* c, const zipcclOp* op, void* dev, const void* host, size_t bytes,
                         zipcclExecStats* st) {
    if (!bytes) return zipcclSuccess;
    const double t = zipcclNow();
    zipcclResult_t r = c->dev.toDevice(c->dev.ctx, dev, host, bytes, op->stream);
    st->busSeconds += zipcclNow() - t;
    st->busBytes += bytes;
    if (r == zipcclSuccess) return r;
    return zipcclPrefixError(r, "%s: copying %zu bytes from the host to %s memory", zipcclCollName(op->kind), bytes,
                             c->dev.name);
}

static zipcclResult_t noMemory(const struct zipcclComm* c, const zipcclOp* op, const char* where, size_t bytes) {
    return zipcclSetError(zipcclSystemError, "%s: out of %s memory for %zu bytes of %s", zipcclCollName(op->kind),
                          where[0] == 'd' ? c->dev.name : "host", bytes, where + 2);
}

/* ---- device buffers, staged ------------------------------------------------------ */

/* AlltoAllv: elements from buffer start to the end of the last block. */
static size_t extentOf(const size_t* counts, const size_t* displs, int n) {
    size_t e = 0;
    for (int i = 0; i < n; i++)
        if (counts[i] && displs[i] + counts[i] > e) e = displs[i] + counts[i];
    return e;
}

static zipcclResult_t runStaged(struct zipcclComm* c, const zipcclOp* op, zipcclStrategy_t s, zipcclExecStats* st) {
    const int n = c->nranks;
    const size_t esz = zipcclTypeSize(op->dtype), blk = op->count * esz;
    size_t sendB = 0, recvB = 0;
    switch (op->kind) {
    case zipcclCollAllGather: sendB = blk, recvB = (size_t)n * blk; break;
    case zipcclCollReduceScatter: sendB = (size_t)n * blk, recvB = blk; break;
    case zipcclCollAllReduce: sendB = recvB = blk; break;
    case zipcclCollAlltoAll: sendB = recvB = (size_t)n * blk; break;
    case zipcclCollAlltoAllv:
        sendB = extentOf(op->sendcounts, op->sdispls, n) * esz;
        recvB = extentOf(op->recvcounts, op->rdispls, n) * esz;
        break;
    default: return zipcclSetError(zipcclInternalError, "staged run of collective %d", (int)op->kind);
    }
    char* hs = hostStage(c, kStageSend, sendB);
    if (!hs) return noMemory(c, op, "h:the send staging", sendB);
    char* hr = hostStage(c, kStageRecv, recvB);
    if (!hr) return noMemory(c, op, "h:the receive staging", recvB);
    ZIPCCL_TRY(down(c, op, hs, op->sendbuf, sendB, st));
    zipcclOp h = *op;
    h.sendbuf = hs;
    h.recvbuf = hr;
    ZIPCCL_TRY(runHost(c, &h, s, st));
    if (op->kind != zipcclCollAlltoAllv) return up(c, op, op->recvbuf, hr, recvB, st);
    /* Only the blocks received: the gaps between them are the caller's. */
    for (int i = 0; i < n; i++) {
        const size_t at = op->rdispls[i] * esz;
        ZIPCCL_TRY(up(c, op, (char*)op->recvbuf + at, hr + at, op->recvcounts[i] * esz, st));
    }
    return zipcclSuccess;
}

/* ---- device buffers, coded on the device: what both coded calls share ------------- */

/* One coded call's buffers: a frame slot per rank on the device and in host
 * staging (send: `sendSlots` slots, receive: n), the codec and its context
 * on the call's stream.  Slots are 256-byte aligned (the device codec's
 * aligned loads and stores; an even size, since the frames travel as 2-byte
 * elements). */
typedef struct {
    const zipcclCodecOps* codec;
    zipcclCodecCtx cx;
    zipcclCodecParams_t params;
    size_t slot;
    char *dframes, *hsend, *hrecv;
} Frames;

static zipcclResult_t framesInit(struct zipcclComm* c, const zipcclOp* op, const zipcclExecStats* st, int sendSlots,
                                 Frames* f) {
    const int n = c->nranks;
    f->codec = zipcclCodecOpsFor(c->dev.coding == zipcclDeviceCodeCuda);
    f->slot = (f->codec->bound(op->count, op->dtype, 0) + 255) & ~(size_t)255;
    f->dframes = devScratch(c, kDevFrames, (size_t)n * f->slot);
    if (!f->dframes) return noMemory(c, op, "d:frames", (size_t)n * f->slot);
    const size_t wsz = f->codec->workspace(op->count, op->dtype);
    void* work = wsz ? devScratch(c, kDevWork, wsz) : NULL;
    if (wsz && !work) return noMemory(c, op, "d:codec workspace", wsz);
    f->hsend = hostStage(c, kStageSend, (size_t)sendSlots * f->slot);
    f->hrecv = f->hsend ? hostStage(c, kStageRecv, (size_t)n * f->slot) : NULL;
    if (!f->hsend || !f->hrecv) return noMemory(c, op, "h:frame staging", (size_t)(sendSlots + n) * f->slot);
    f->cx = (zipcclCodecCtx){.workspace = work, .workspaceSize = wsz, .stream = op->stream};
    f->params = (zipcclCodecParams_t)ZIPCCL_CODEC_PARAMS_DEFAULT;
    f->params.codec = st->codec;
    return zipcclSuccess;
}

/* Compress `op->count` elements at src on the device into frame slot `i`,
 * and bring the frame down into host staging `host` (padded to 2 bytes). */
static zipcclResult_t encodeDown(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, Frames* f,
                                 const void* src, int i, char* host, size_t* bytes) {
    const double t = zipcclNow();
    zipcclResult_t res = f->codec->compress(&f->cx, src, op->count, op->dtype, f->dframes + (size_t)i * f->slot,
                                            f->slot, bytes, &f->params);
    st->codecSeconds += zipcclNow() - t;
    if (res != zipcclSuccess)
        return zipcclPrefixError(res, "%s: compressing rank %d's block on the device", zipcclCollName(op->kind), i);
    ZIPCCL_TRY(down(c, op, host, f->dframes + (size_t)i * f->slot, *bytes, st));
    if (*bytes & 1) host[*bytes] = 0; /* the pad byte of the last 2-byte element */
    return zipcclSuccess;
}

/* The frames between the ranks: the raw AlltoAllv design over 2-byte
 * elements, sc/rc sizes and sd/rd offsets in them. */
static zipcclResult_t exchange(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, const Frames* f,
                               size_t* sc, size_t* sd, size_t* rc, size_t* rd) {
    zipcclOp x = {.comm = c, .kind = zipcclCollAlltoAllv, .sendbuf = f->hsend, .recvbuf = f->hrecv,
                  .sendcounts = sc, .sdispls = sd, .recvcounts = rc, .rdispls = rd,
                  .dtype = zipcclBfloat16, .op = zipcclSum, .stream = op->stream};
    x.cfg = op->cfg;
    x.cfg.strategy = zipcclStrategyRaw;
    zipcclExecStats xs;
    memset(&xs, 0, sizeof xs);
    xs.strategy = zipcclStrategyRaw;
    xs.codec = st->codec;
    xs.algo = zipcclAlgoRun(zipcclCollAlltoAllv, x.cfg.algo);
    zipcclResult_t res = zipcclRunAlgo(c, &x, &xs);
    st->wireBytes += xs.wireBytes;
    st->wireSeconds += xs.wireSeconds;
    st->rawBytes += (size_t)(c->nranks - 1) * op->count * zipcclTypeSize(op->dtype);
    return res == zipcclSuccess ? res
                                : zipcclPrefixError(res, "%s: exchanging the frames", zipcclCollName(op->kind));
}

/* Rank i's frame of `bytes` (up from the receive staging unless it is ours,
 * already on the device), decoded on the device into dst. */
static zipcclResult_t upDecode(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, Frames* f, int i,
                               size_t bytes, void* dst) {
    char* frame = f->dframes + (size_t)i * f->slot;
    if (i != c->rank) ZIPCCL_TRY(up(c, op, frame, f->hrecv + (size_t)i * f->slot, bytes, st));
    size_t got = 0;
    const double t = zipcclNow();
    zipcclResult_t res = f->codec->decompress(&f->cx, frame, bytes, dst, op->count * zipcclTypeSize(op->dtype), &got,
                                              op->dtype, NULL);
    st->codecSeconds += zipcclNow() - t;
    const char* what = zipcclCollName(op->kind);
    if (res != zipcclSuccess) return zipcclPrefixError(res, "%s: decoding rank %d's frame on the device", what, i);
    if (got != op->count)
        return zipcclSetError(zipcclCorruptStream, "%s: rank %d's frame holds %zu elements, not %zu", what, i, got,
                              op->count);
    return zipcclSuccess;
}

/* A frame size the sizes' all-reduce reported, checked against the slot. */
static zipcclResult_t sizeOk(const zipcclOp* op, int i, double bytes, size_t slot) {
    if (bytes >= 1 && bytes <= (double)slot) return zipcclSuccess;
    return zipcclSetError(zipcclCorruptStream, "%s: rank %d's frame would be %.0f bytes, outside (0, %zu]",
                          zipcclCollName(op->kind), i, bytes, slot);
}

/* ---- device buffers, AllGather coded on the device -------------------------------- */

static zipcclResult_t runCodedAllGather(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st) {
    const int n = c->nranks, r = c->rank;
    const size_t blk = op->count * zipcclTypeSize(op->dtype);
    if (!op->count) return zipcclSuccess;
    Frames f;
    ZIPCCL_TRY(framesInit(c, op, st, 1, &f));
    size_t mine = 0;
    ZIPCCL_TRY(encodeDown(c, op, st, &f, op->sendbuf, r, f.hsend, &mine));
    double size[n];
    for (int i = 0; i < n; i++) size[i] = i == r ? (double)mine : 0;
    if (n > 1) {
        ZIPCCL_TRY(zipcclAgreedAllreduce(c, size, size, n, zipcclTpSum, "AllGather: the sizes of the frames"));
        size_t sc[n], sd[n], rc[n], rd[n];
        for (int i = 0; i < n; i++) {
            ZIPCCL_TRY(sizeOk(op, i, size[i], f.slot));
            sc[i] = i == r ? 0 : (mine + 1) / 2;
            sd[i] = 0;
            rc[i] = i == r ? 0 : ((size_t)size[i] + 1) / 2;
            rd[i] = (size_t)i * f.slot / 2;
        }
        ZIPCCL_TRY(exchange(c, op, st, &f, sc, sd, rc, rd));
    }
    /* Every block from its frame, ours too (what a peer decodes of it, and no
     * device-to-device copy entry needed). */
    for (int i = 0; i < n; i++) ZIPCCL_TRY(upDecode(c, op, st, &f, i, (size_t)size[i], (char*)op->recvbuf + i * blk));
    return zipcclSuccess;
}

/* ---- device buffers, ReduceScatter coded on the device ----------------------------- */

/* Each peer's block of sendbuf is compressed on the device into a frame of
 * its own; the frames go down; every rank's n sizes are summed over the
 * ranks into the (n, n) matrix (row: sender), so each knows what it will
 * receive; the frames travel by the raw AlltoAllv design; the received ones
 * go up and are decoded one at a time and added in the canonical order
 * (ranks r+1, ..., r-1, then our own block, docs/COLLECTIVES.md §3) into an
 * fp32 accumulator on the device, rounded once into recvbuf: the bits of the
 * host designs. */
static zipcclResult_t codedReduceScatter(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st,
                                         double* size) {
    const int n = c->nranks, r = c->rank;
    const zipcclDataType_t dt = op->dtype;
    const size_t count = op->count, blk = count * zipcclTypeSize(dt);
    const zipcclDeviceMemory_t* d = &c->dev;
    if (!count) return zipcclSuccess;
    Frames f;
    ZIPCCL_TRY(framesInit(c, op, st, n, &f));
    float* acc = devScratch(c, kDevAcc, count * sizeof(float));
    if (!acc) return noMemory(c, op, "d:the fp32 accumulator", count * sizeof(float));
    char* tmp = n > 1 ? devScratch(c, kDevTmp, blk) : NULL;
    if (n > 1 && !tmp) return noMemory(c, op, "d:a decoded block", blk);
    zipcclResult_t res = zipcclSuccess;

    if (n > 1) {
        memset(size, 0, (size_t)n * n * sizeof(double)); /* [sender][receiver] */
        for (int j = 0; j < n; j++) {
            if (j == r) continue;
            size_t bytes = 0;
            ZIPCCL_TRY(encodeDown(c, op, st, &f, (const char*)op->sendbuf + (size_t)j * blk, j,
                                  f.hsend + (size_t)j * f.slot, &bytes));
            size[(size_t)r * n + j] = (double)bytes;
        }
        ZIPCCL_TRY(zipcclAgreedAllreduce(c, size, size, n * n, zipcclTpSum, "ReduceScatter: the sizes of the frames"));
        size_t sc[n], sd[n], rc[n], rd[n];
        for (int i = 0; i < n; i++) {
            if (i != r) ZIPCCL_TRY(sizeOk(op, i, size[(size_t)i * n + r], f.slot));
            sc[i] = i == r ? 0 : ((size_t)size[(size_t)r * n + i] + 1) / 2;
            sd[i] = (size_t)i * f.slot / 2;
            rc[i] = i == r ? 0 : ((size_t)size[(size_t)i * n + r] + 1) / 2;
            rd[i] = (size_t)i * f.slot / 2;
        }
        ZIPCCL_TRY(exchange(c, op, st, &f, sc, sd, rc, rd));
        /* In the canonical order: r+1, ..., r-1 from their frames. */
        for (int k = 1; k < n && res == zipcclSuccess; k++) {
            const int i = (r + k) % n;
            ZIPCCL_TRY(upDecode(c, op, st, &f, i, (size_t)size[(size_t)i * n + r], tmp));
            res = d->accumulate(d->ctx, acc, tmp, count, dt, k == 1, op->stream);
        }
    }
    /* Our own block last (alone on one rank), then one rounding. */
    if (res == zipcclSuccess)
        res = d->accumulate(d->ctx, acc, (const char*)op->sendbuf + (size_t)r * blk, count, dt, n == 1, op->stream);
    if (res == zipcclSuccess) res = d->finalize(d->ctx, op->recvbuf, acc, count, dt, op->op, n, op->stream);
    return res == zipcclSuccess ? res : zipcclPrefixError(res, "ReduceScatter: the sum on %s", d->name);
}

static zipcclResult_t runCodedReduceScatter(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st) {
    const size_t n = (size_t)c->nranks;
    double* size = malloc(n * n * sizeof(double));
    if (!size) return noMemory(c, op, "h:the frame sizes", n * n * sizeof(double));
    zipcclResult_t res = codedReduceScatter(c, op, st, size);
    free(size);
    return res;
}

/* ---- the host stand-in ------------------------------------------------------------ */

static zipcclResult_t hostCopy(void* ctx, void* dst, const void* src, size_t bytes, void* stream) {
    (void)ctx, (void)stream;
    memcpy(dst, src, bytes);
    return zipcclSuccess;
}
static void* hostAllocAny(void* ctx, size_t bytes) {
    (void)ctx;
    return malloc(bytes ? bytes : 1);
}
static void hostFreeAny(void* ctx, void* p) {
    (void)ctx;
    free(p);
}
static zipcclResult_t hostAccumulate(void* ctx, float* acc, const void* x, size_t count, zipcclDataType_t dtype,
                                     int first, void* stream) {
    (void)ctx, (void)stream;
    zipcclAccumulate(acc, x, count, dtype, first);
    return zipcclSuccess;
}
static zipcclResult_t hostFinalize(void* ctx, void* out, const float* acc, size_t count, zipcclDataType_t dtype,
                                   zipcclRedOp_t op, int n, void* stream) {
    (void)ctx, (void)stream;
    zipcclFinalize(out, acc, count, dtype, op, n);
    return zipcclSuccess;
}

void zipcclDeviceMemoryHost(zipcclDeviceMemory_t* out) {
    const zipcclDeviceMemory_t t = {.name = "hostcoded", .coding = zipcclDeviceCodeHost, .toHost = hostCopy,
                                    .toDevice = hostCopy, .alloc = hostAllocAny, .free = hostFreeAny,
                                    .accumulate = hostAccumulate, .finalize = hostFinalize};
    if (out) *out = t;
}

/* ---- the entry ------------------------------------------------------------------- */

zipcclResult_t zipcclRunDecided(struct zipcclComm* c, const zipcclOp* op, zipcclStrategy_t s, zipcclExecStats* st) {
    if (!c->onDevice) return runHost(c, op, s, st);
    if (c->dev.bind) {
        zipcclResult_t r = c->dev.bind(c->dev.ctx);
        if (r != zipcclSuccess) return zipcclPrefixError(r, "%s: binding this thread to %s", zipcclCollName(op->kind),
                                                         c->dev.name);
    }
    /* With a stream of its own the call runs there, after the point the
     * caller's stream had reached at issue, and is complete on return. */
    zipcclOp d = *op;
    const zipcclDeviceMemory_t* m = &c->dev;
    if (c->devStream) {
        d.stream = c->devStream;
        if (op->devEvent) {
            zipcclResult_t r = m->streamWaitEvent(m->ctx, c->devStream, op->devEvent);
            if (r != zipcclSuccess)
                return zipcclPrefixError(r, "%s: ordering after the caller's stream (%s)", zipcclCollName(op->kind),
                                         m->name);
        }
    }
    zipcclResult_t res;
    if (s == zipcclStrategyCompressed && zipcclCodedOnDevice(c) && op->kind == zipcclCollAllGather)
        res = runCodedAllGather(c, &d, st);
    else if (s == zipcclStrategyCompressed && zipcclCodedOnDevice(c) && op->kind == zipcclCollReduceScatter)
        res = runCodedReduceScatter(c, &d, st);
    else
        res = runStaged(c, &d, s, st);
    if (res == zipcclSuccess && c->devStream) {
        res = m->synchronize(m->ctx, c->devStream);
        if (res != zipcclSuccess)
            res = zipcclPrefixError(res, "%s: synchronising %s's stream", zipcclCollName(op->kind), m->name);
    }
    return res;
}
