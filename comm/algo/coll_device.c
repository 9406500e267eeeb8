/*
 * coll_device.c — the designs on device buffers: a call whose sendbuf and
 * recvbuf are a device's memory (zipcclCommSetDevice), run where they live.
 * run/coll_run.c stages the other calls through host memory (the host
 * designs on pinned staging); the ones here keep the data on the device:
 *
 *   coded on the device, frames through host memory (a table that codes on
 *       the device, no network): a compressed AllGather compresses this
 *       rank's block where it lives and only its frame goes down; the
 *       frames' sizes are summed over the ranks (each adds its own at its
 *       index); the frames travel by the raw AlltoAllv design over the host
 *       staging; the received ones go up and each is decoded into its block
 *       of recvbuf.  A compressed ReduceScatter compresses each peer's block
 *       on the device, sums the (n, n) sizes, exchanges the frames the same
 *       way, decodes each received frame and adds it on the device in the
 *       canonical order (r+1, ..., r-1, own last), one rounding.  AllReduce
 *       is that ReduceScatter then that AllGather (the host designs' block
 *       split); AlltoAll(v) compresses each non-empty block for a peer, sums
 *       the (n, n) sizes, exchanges the frames, decodes each into place (its
 *       own block from its frame, which never goes down).  The bus carries
 *       frames, not raw blocks.
 *   over a network (zipcclCommSetNet: NCCL, or the host stand-in below):
 *       nothing crosses the bus; every call is rounds of the network's
 *       grouped exchange with exact sizes (runNet).  native: the network's
 *       own collective (NCCL's), else raw; raw: the blocks as they are, the
 *       direct designs (a reduction sums the received blocks on the device
 *       in the canonical order); compressed: the coded calls above with
 *       their frames exchanged device to device, and the same for
 *       AllReduce (coded ReduceScatter, then coded AllGather) and the
 *       All-to-Alls (each block its frame, (n, n) sizes).  The sizes are
 *       summed over MPI (the agreement's all-reduce) by the progress thread,
 *       so the caller never waits for them; on NCCL's own communicators
 *       (zipcclCommInitNccl, no MPI) they travel over the network itself.
 *
 * On one rank a compressed call codes nothing (selfCopy, below): the blocks
 * are copied on the device.
 *
 * Every design here gives the host designs' bits: the codec is lossless,
 * blocks are split as the host designs split them, and sums run in the
 * canonical order (docs/COLLECTIVES.md §3) through the table's accumulate
 * and finalize.
 *
 * Left out: pipelining the codec, copies and messages of one call (one
 * frame per peer per call); ring and one-shot designs over a network (the
 * direct ones only: an explicit request for another is refused).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_agree.h"
#include "coll_algos.h"
#include "coll_device.h"

/* ---- the device's memory ------------------------------------------------------- */

enum { kDevFrames = 0, kDevWork = 1, kDevAcc = 2, kDevTmp = 3, kDevBlocks = 4, kDevBlock = 5, kDevSizes = 6 }; /* device scratch */

/* Grow *p to at least `bytes` (by 1/8 more, as the communicator's
 * scratch) in the device's memory (dev) or its pinned host memory; old
 * contents are not kept.  NULL when out of memory. */
static void* grow(ZDevice* d, int dev, void** p, size_t* cap, size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (*cap >= bytes) return *p;
    dev ? zdev_free(d, *p) : zdev_host_free(d, *p);
    *cap = bytes + bytes / 8;
    *p = dev ? zdev_alloc(d, *cap) : zdev_host_alloc(d, *cap);
    if (!*p) *cap = 0;
    return *p;
}
void* zipcclHostStage(struct zipcclComm* c, int slot, size_t bytes) {
    return grow(c->dev, 0, &c->hostStage[slot], &c->hostStageCap[slot], bytes);
}
static void* devScratch(struct zipcclComm* c, int slot, size_t bytes) {
    return grow(c->dev, 1, &c->devScratch[slot], &c->devScratchCap[slot], bytes);
}

void zipcclDeviceRelease(struct zipcclComm* c) {
    if (!c->onDevice) return;
    ZDevice* d = c->dev;
    zdev_bind(d);
    if (c->devStream) {
        zdev_stream_sync(d, c->devStream);
        zdev_stream_destroy(d, c->devStream);
        c->devStream = NULL;
    }
    for (int i = 0; i < ZIPCCL_DEV_SLOTS; i++) {
        zdev_free(d, c->devScratch[i]);
        c->devScratch[i] = NULL;
        c->devScratchCap[i] = 0;
    }
    for (int i = 0; i < 2; i++) {
        zdev_host_free(d, c->hostStage[i]);
        c->hostStage[i] = NULL;
        c->hostStageCap[i] = 0;
    }
}

/* Device -> host (down) and host -> device (up), counted on the call. */
static zipcclResult_t busCopy(struct zipcclComm* c, const zipcclOp* op, void* dst, const void* src, size_t bytes,
                              zipcclExecStats* st, int up, int async) {
    if (!bytes) return zipcclSuccess;
    const double t = zipcclNow();
    const ZDevDir dir = up ? ZDEV_HOST_TO_DEVICE : ZDEV_DEVICE_TO_HOST;
    const int bad = async ? zdev_copy_async(c->dev, dst, src, bytes, dir, op->stream)
                          : zdev_copy(c->dev, dst, src, bytes, dir, op->stream);
    st->busSeconds += zipcclNow() - t;
    st->busBytes += bytes;
    if (!bad) return zipcclSuccess;
    char doing[96];
    snprintf(doing, sizeof doing, up ? "copying %zu bytes from the host to the device"
                                     : "copying %zu bytes from the device to the host", bytes);
    return zipcclDevFail(c, zipcclCollName(op->kind), doing);
}
zipcclResult_t zipcclDown(struct zipcclComm* c, const zipcclOp* op, void* host, const void* dev, size_t bytes,
                          zipcclExecStats* st) {
    return busCopy(c, op, host, dev, bytes, st, 0, 0);
}
zipcclResult_t zipcclUp(struct zipcclComm* c, const zipcclOp* op, void* dev, const void* host, size_t bytes,
                        zipcclExecStats* st) {
    return busCopy(c, op, dev, host, bytes, st, 1, 0);
}
zipcclResult_t zipcclUpAsync(struct zipcclComm* c, const zipcclOp* op, void* dev, const void* host, size_t bytes,
                             zipcclExecStats* st) {
    return busCopy(c, op, dev, host, bytes, st, 1, 1);
}

zipcclResult_t zipcclNoMemory(const struct zipcclComm* c, const zipcclOp* op, const char* where, size_t bytes) {
    return zipcclSetError(zipcclSystemError, "%s: out of %s memory for %zu bytes of %s", zipcclCollName(op->kind),
                          where[0] == 'd' ? c->dev->name : "host", bytes, where + 2);
}

/* ---- the canonical sum on the device ---------------------------------------- */

#ifdef ZIPCCL_HAVE_CUDA
/* transport/transport_nccl_kernels.cu */
int zipcclCudaAccumulate(float* acc, const void* x, size_t n, int dtype, int first, void* stream);
int zipcclCudaFinalize(void* out, const float* acc, size_t n, int dtype, int avg, int nranks, void* stream);
#endif

/* acc[i] = x[i] (first) or acc[i] += x[i] in fp32, on the call's stream:
 * the CUDA kernels on a CUDA device, the host's arithmetic (the same bits)
 * on a device the host may read. */
static zipcclResult_t accumulate(struct zipcclComm* c, const zipcclOp* op, float* acc, const void* x, size_t count,
                                 int first) {
    if (c->dev->kind != ZDEV_KIND_CUDA) {
        zipcclAccumulate(acc, x, count, op->dtype, first);
        return zipcclSuccess;
    }
#ifdef ZIPCCL_HAVE_CUDA
    if (zipcclCudaAccumulate(acc, x, count, (int)op->dtype, first, op->stream) == 0) return zipcclSuccess;
#endif
    return zipcclSetError(zipcclSystemError, "%s: the accumulate kernel failed on %s", zipcclCollName(op->kind),
                          c->dev->name);
}

/* out[i] = one rounding of acc[i] to the dtype (avg: acc[i] / n first). */
static zipcclResult_t finalize(struct zipcclComm* c, const zipcclOp* op, void* out, const float* acc, size_t count) {
    if (c->dev->kind != ZDEV_KIND_CUDA) {
        zipcclFinalize(out, acc, count, op->dtype, op->op, c->nranks);
        return zipcclSuccess;
    }
#ifdef ZIPCCL_HAVE_CUDA
    if (zipcclCudaFinalize(out, acc, count, (int)op->dtype, op->op == zipcclAvg, c->nranks, op->stream) == 0)
        return zipcclSuccess;
#endif
    return zipcclSetError(zipcclSystemError, "%s: the finalize kernel failed on %s", zipcclCollName(op->kind),
                          c->dev->name);
}

/* AlltoAllv: elements from buffer start to the end of the last block. */
size_t zipcclExtentOf(const size_t* counts, const size_t* displs, int n) {
    size_t e = 0;
    for (int i = 0; i < n; i++)
        if (counts[i] && displs[i] + counts[i] > e) e = displs[i] + counts[i];
    return e;
}

/* ---- device buffers, coded on the device: what every coded call shares ------------ */

/* One coded call's frames: `sendSlots` slots for what this rank sends and n
 * for what it receives, on the device, and (without a network) their twins
 * in host staging, which is what crosses between the ranks; the codec and
 * its context on the call's stream.  A slot holds the largest frame of the
 * call's largest block, 256-byte aligned (the device codec's aligned loads
 * and stores), with room for the pad byte of the 2-byte elements the
 * staged frames travel as. */
typedef struct {
    const zipcclCodecOps* codec;
    zipcclCodecCtx cx;
    zipcclCodecParams_t params;
    size_t slot;
    char *dsend, *drecv; /* device */
    char *hsend, *hrecv; /* host staging; NULL over a network */
} Frames;

static zipcclResult_t framesInit(struct zipcclComm* c, const zipcclOp* op, const zipcclExecStats* st, int sendSlots,
                                 size_t maxCount, int decodes, Frames* f) {
    const int n = c->nranks;
    f->codec = zipcclCodecOpsFor(c->dev->kind == ZDEV_KIND_CUDA);
    f->slot = (f->codec->bound(maxCount, op->dtype, 0) + 1 + 255) & ~(size_t)255;
    const size_t all = (size_t)(sendSlots + n) * f->slot;
    f->dsend = devScratch(c, kDevFrames, all);
    if (!f->dsend) return zipcclNoMemory(c, op, "d:frames", all);
    f->drecv = f->dsend + (size_t)sendSlots * f->slot;
    /* one batch of up to sendSlots encodes, one of `decodes` decodes */
    const size_t we = f->codec->workspaceBatch(sendSlots, maxCount, op->dtype, 0),
                 wd = f->codec->workspaceBatch(decodes, maxCount, op->dtype, 1), wsz = we > wd ? we : wd;
    void* work = wsz ? devScratch(c, kDevWork, wsz) : NULL;
    if (wsz && !work) return zipcclNoMemory(c, op, "d:codec workspace", wsz);
    f->hsend = f->hrecv = NULL;
    if (!c->hasNet) {
        f->hsend = zipcclHostStage(c, zipcclStageSend, (size_t)sendSlots * f->slot);
        f->hrecv = f->hsend ? zipcclHostStage(c, zipcclStageRecv, (size_t)n * f->slot) : NULL;
        if (!f->hsend || !f->hrecv) return zipcclNoMemory(c, op, "h:frame staging", all);
    }
    f->cx = (zipcclCodecCtx){.workspace = work, .workspaceSize = wsz, .stream = op->stream};
    f->params = (zipcclCodecParams_t)ZIPCCL_CODEC_PARAMS_DEFAULT;
    f->params.codec = st->codec;
    return zipcclSuccess;
}

/* Compress k blocks on the device in one batch: block i (count[i]
 * elements at src[i], for rank to[i], or -1: every rank) into send slot
 * slot[i], bytes[i] its frame's size (one host wait for all k on CUDA).
 * Without a network, the frames a peer reads then come down into their
 * staging slots together (padded to 2 bytes): one more wait. */
static zipcclResult_t encodeMany(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, Frames* f, int k,
                                 const void* const* src, const size_t* count, const int* slot, const int* to,
                                 size_t* bytes) {
    if (k == 0) return zipcclSuccess;
    void* frame[k];
    size_t cap[k];
    for (int i = 0; i < k; i++) frame[i] = f->dsend + (size_t)slot[i] * f->slot, cap[i] = f->slot;
    int bad = -1;
    double t = zipcclNow();
    zipcclResult_t res =
        f->codec->compressBatch(&f->cx, k, src, count, op->dtype, frame, cap, bytes, &f->params, &bad);
    st->codecSeconds += zipcclNow() - t;
    if (res != zipcclSuccess)
        return zipcclPrefixError(res, "%s: compressing the block for rank %d on the device", zipcclCollName(op->kind),
                                 bad < 0 || to[bad] < 0 ? c->rank : to[bad]);
    if (c->hasNet) return zipcclSuccess;
    t = zipcclNow();
    int down = 0;
    for (int i = 0; i < k; i++) {
        if (to[i] == c->rank) continue; /* only this rank reads it */
        char* host = f->hsend + (size_t)slot[i] * f->slot;
        if (zdev_copy_async(c->dev, host, frame[i], bytes[i], ZDEV_DEVICE_TO_HOST, op->stream))
            return zipcclDevFail(c, zipcclCollName(op->kind), "copying a frame from the device to the host");
        if (bytes[i] & 1) host[bytes[i]] = 0; /* the pad byte of the last 2-byte element */
        st->busBytes += bytes[i];
        down = 1;
    }
    if (down && zdev_stream_sync(c->dev, op->stream))
        return zipcclDevFail(c, zipcclCollName(op->kind), "waiting for the frames to come down");
    st->busSeconds += zipcclNow() - t;
    return zipcclSuccess;
}

/* One round over the network, counted on the call. */
static zipcclResult_t netRound(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st,
                               const void* const* send, const size_t* sb, void* const* recv, const size_t* rb) {
    const double t = zipcclNow();
    zipcclResult_t res = c->net.exchange(c->net.ctx, send, sb, recv, rb, op->stream);
    st->wireSeconds += zipcclNow() - t;
    for (int p = 0; p < c->nranks; p++)
        if (p != c->rank) st->wireBytes += sb[p];
    return res == zipcclSuccess ? res
                                : zipcclPrefixError(res, "%s: exchanging over %s", zipcclCollName(op->kind),
                                                    c->net.name);
}

/* The frames' sizes summed over the ranks.  `size` holds `rows` x n
 * doubles, zero but for this rank's part: its own frame at index r
 * (AllGather, rows 1) or its row r (the sizes of what it sends each rank,
 * rows n).  With MPI's host control, the agreement's small all-reduce (the
 * progress thread waits, not the caller); on a communicator without one
 * (NCCL's own) every rank's part travels over the network to every rank,
 * device to device, and comes down. */
static zipcclResult_t sumSizes(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, double* size,
                               int rows) {
    const int n = c->nranks, r = c->rank;
    const char* what = zipcclCollName(op->kind);
    if (n == 1) return zipcclSuccess;
    if (zipcclHostControl(c) && !c->sizesOverNet) {
        char why[80];
        snprintf(why, sizeof why, "%s: the sizes of the frames", what);
        return zipcclAgreedAllreduce(c, size, size, rows * n, zipcclTpSum, why);
    }
    if (!c->hasNet) return zipcclSetError(zipcclInternalError, "%s: no way to sum the frame sizes", what);
    const size_t part = (rows == 1 ? 1 : (size_t)n) * sizeof(double); /* each rank's share */
    char* dev = devScratch(c, kDevSizes, part * (size_t)(n + 1));
    if (!dev) return zipcclNoMemory(c, op, "d:the frame sizes", part * (size_t)(n + 1));
    ZIPCCL_TRY(zipcclUp(c, op, dev, (const char*)size + (size_t)r * part, part, st));
    const void* send[n];
    void* recv[n];
    size_t sb[n], rb[n];
    for (int p = 0; p < n; p++) send[p] = dev, sb[p] = rb[p] = part, recv[p] = dev + part * (size_t)(p + 1);
    ZIPCCL_TRY(netRound(c, op, st, send, sb, recv, rb));
    return zipcclDown(c, op, size, dev + part, part * (size_t)n, st);
}

/* The frames between the ranks: to each peer p, sb[p] bytes of send slot
 * slotOf[p]; from each, rb[p] bytes into receive slot p (the rank itself:
 * none).  Over the network device to device, else by the raw AlltoAllv
 * design over the host staging, as 2-byte elements. */
static zipcclResult_t exchange(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, const Frames* f,
                               const int* slotOf, const size_t* sb, const size_t* rb) {
    const int n = c->nranks;
    if (c->hasNet) {
        const void* send[n];
        void* recv[n];
        for (int p = 0; p < n; p++) {
            send[p] = f->dsend + (size_t)slotOf[p] * f->slot;
            recv[p] = f->drecv + (size_t)p * f->slot;
        }
        return netRound(c, op, st, send, sb, recv, rb);
    }
    size_t sc[n], sd[n], rc[n], rd[n];
    for (int p = 0; p < n; p++) {
        sc[p] = (sb[p] + 1) / 2, sd[p] = (size_t)slotOf[p] * f->slot / 2;
        rc[p] = (rb[p] + 1) / 2, rd[p] = (size_t)p * f->slot / 2;
    }
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
    return res == zipcclSuccess ? res
                                : zipcclPrefixError(res, "%s: exchanging the frames", zipcclCollName(op->kind));
}

/* Decode k frames on the device in one batch (one host wait for all k
 * on CUDA): frame i is send slot slot[i] (sent[i]: one this rank encoded)
 * or receive slot slot[i] (rank from[i]'s; without a network it goes up
 * from the staging first, all of them together before the batch's first
 * wait), bytes[i] long, decoded into count[i] elements at dst[i]. */
static zipcclResult_t decodeMany(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, Frames* f, int k,
                                 const int* sent, const int* slot, const int* from, const size_t* bytes,
                                 void* const* dst, const size_t* count) {
    if (k == 0) return zipcclSuccess;
    const char* what = zipcclCollName(op->kind);
    const size_t esz = zipcclTypeSize(op->dtype);
    const void* frame[k];
    size_t cap[k], got[k];
    double t = zipcclNow();
    for (int i = 0; i < k; i++) {
        char* fr = (sent[i] ? f->dsend : f->drecv) + (size_t)slot[i] * f->slot;
        frame[i] = fr, cap[i] = count[i] * esz, got[i] = 0;
        if (sent[i] || c->hasNet) continue;
        if (zdev_copy_async(c->dev, fr, f->hrecv + (size_t)slot[i] * f->slot, bytes[i], ZDEV_HOST_TO_DEVICE,
                            op->stream))
            return zipcclDevFail(c, what, "copying a frame from the host to the device");
        st->busBytes += bytes[i];
    }
    st->busSeconds += zipcclNow() - t;
    int bad = -1;
    t = zipcclNow();
    zipcclResult_t res = f->codec->decompressBatch(&f->cx, k, frame, bytes, dst, cap, got, op->dtype, &bad);
    st->codecSeconds += zipcclNow() - t;
    if (res != zipcclSuccess)
        return zipcclPrefixError(res, "%s: decoding rank %d's frame on the device", what, bad < 0 ? c->rank : from[bad]);
    for (int i = 0; i < k; i++)
        if (got[i] != count[i])
            return zipcclSetError(zipcclCorruptStream, "%s: rank %d's frame holds %zu elements, not %zu", what,
                                  from[i], got[i], count[i]);
    return zipcclSuccess;
}

/* A frame size the sizes' all-reduce reported, checked against the slot. */
static zipcclResult_t sizeOk(const zipcclOp* op, int i, double bytes, size_t slot) {
    if (bytes >= 1 && bytes < (double)slot) return zipcclSuccess;
    return zipcclSetError(zipcclCorruptStream, "%s: rank %d's frame would be %.0f bytes, outside (0, %zu)",
                          zipcclCollName(op->kind), i, bytes, slot);
}

/* The least power of two >= x (x itself when 0 or 1). */
static size_t pow2Ceil(size_t x) {
    size_t p = 1;
    while (p < x) p <<= 1;
    return x ? p : 0;
}

/* Blocks of a call: rank i's block has counts[i] elements at displs[i]. */
static size_t maxOf(const size_t* v, int n) {
    size_t m = 0;
    for (int i = 0; i < n; i++)
        if (v[i] > m) m = v[i];
    return m;
}

/* ---- AllGather coded on the device ------------------------------------------------- */

/* Rank r's block `mine` is compressed on the device (once, for every peer);
 * the frames' sizes are summed over the ranks (each adds its own at its
 * index); the frames are exchanged; all n are decoded in one batch into
 * their blocks of recvbuf, ours too (what a peer decodes of it, and no
 * copy). */
static zipcclResult_t codedAllGather(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, const void* mine,
                                     const size_t* counts, const size_t* displs, void* recvbuf) {
    const int n = c->nranks, r = c->rank;
    const size_t esz = zipcclTypeSize(op->dtype);
    Frames f;
    ZIPCCL_TRY(framesInit(c, op, st, 1, maxOf(counts, n), n, &f));
    size_t own = 0;
    const int zero = 0, every = -1;
    ZIPCCL_TRY(encodeMany(c, op, st, &f, 1, &mine, &counts[r], &zero, &every, &own));
    double size[n];
    for (int i = 0; i < n; i++) size[i] = i == r ? (double)own : 0;
    if (n > 1) {
        ZIPCCL_TRY(sumSizes(c, op, st, size, 1));
        int slotOf[n];
        size_t sb[n], rb[n];
        for (int i = 0; i < n; i++) {
            ZIPCCL_TRY(sizeOk(op, i, size[i], f.slot));
            slotOf[i] = 0;
            sb[i] = i == r ? 0 : own;
            rb[i] = i == r ? 0 : (size_t)size[i];
        }
        ZIPCCL_TRY(exchange(c, op, st, &f, slotOf, sb, rb));
    }
    st->rawBytes += (size_t)(n - 1) * counts[r] * esz;
    int sent[n], slot[n], from[n];
    size_t bytes[n];
    void* dst[n];
    for (int i = 0; i < n; i++) {
        sent[i] = i == r, slot[i] = i == r ? 0 : i, from[i] = i, bytes[i] = (size_t)size[i];
        dst[i] = (char*)recvbuf + displs[i] * esz;
    }
    return decodeMany(c, op, st, &f, n, sent, slot, from, bytes, dst, counts);
}

/* ---- ReduceScatter coded on the device --------------------------------------------- */

/* Each peer's block of sendbuf is compressed on the device into a frame of
 * its own; every rank's n sizes are summed over the ranks into the (n, n)
 * matrix `size` (row: sender), so each knows what it will receive; the
 * frames are exchanged; the received ones are decoded one at a time and
 * added in the canonical order (ranks r+1, ..., r-1, then our own block,
 * docs/COLLECTIVES.md §3) into an fp32 accumulator on the device, rounded
 * once into out: the bits of the host designs. */
static zipcclResult_t codedReduceScatter(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st,
                                         const char* sendbuf, const size_t* counts, const size_t* displs, void* out,
                                         double* size) {
    const int n = c->nranks, r = c->rank;
    const zipcclDataType_t dt = op->dtype;
    const size_t esz = zipcclTypeSize(dt), count = counts[r];
    Frames f;
    ZIPCCL_TRY(framesInit(c, op, st, n, maxOf(counts, n), n - 1, &f));
    float* acc = devScratch(c, kDevAcc, count * sizeof(float));
    if (!acc) return zipcclNoMemory(c, op, "d:the fp32 accumulator", count * sizeof(float));
    const size_t blk = count * esz; /* the n - 1 decoded blocks, in rank order */
    char* tmp = n > 1 ? devScratch(c, kDevTmp, (size_t)(n - 1) * blk) : NULL;
    if (n > 1 && !tmp) return zipcclNoMemory(c, op, "d:the decoded blocks", (size_t)(n - 1) * blk);
    zipcclResult_t res = zipcclSuccess;

    if (n > 1) {
        memset(size, 0, (size_t)n * n * sizeof(double)); /* [sender][receiver] */
        const void* src[n - 1];
        size_t cnt[n - 1], bytes[n - 1];
        int slot[n - 1], to[n - 1], k = 0;
        for (int j = 0; j < n; j++) {
            if (j == r) continue;
            src[k] = sendbuf + displs[j] * esz, cnt[k] = counts[j], slot[k] = j, to[k] = j;
            st->rawBytes += counts[j] * esz;
            k++;
        }
        ZIPCCL_TRY(encodeMany(c, op, st, &f, k, src, cnt, slot, to, bytes));
        for (int i = 0; i < k; i++) size[(size_t)r * n + to[i]] = (double)bytes[i];
        ZIPCCL_TRY(sumSizes(c, op, st, size, n));
        int slotOf[n];
        size_t sb[n], rb[n];
        for (int i = 0; i < n; i++) {
            if (i != r) ZIPCCL_TRY(sizeOk(op, i, size[(size_t)i * n + r], f.slot));
            slotOf[i] = i;
            sb[i] = i == r ? 0 : (size_t)size[(size_t)r * n + i];
            rb[i] = i == r ? 0 : (size_t)size[(size_t)i * n + r];
        }
        ZIPCCL_TRY(exchange(c, op, st, &f, slotOf, sb, rb));
        /* every received frame in one batch (the k-th from rank r+k into
         * decoded block k-1), then the sum in the canonical order: r+1,
         * ..., r-1 */
        int sent[n - 1], from[n - 1];
        size_t fb[n - 1], cnt2[n - 1];
        void* dst[n - 1];
        for (int k = 1; k < n; k++) {
            const int i = (r + k) % n;
            sent[k - 1] = 0, slot[k - 1] = i, from[k - 1] = i, fb[k - 1] = (size_t)size[(size_t)i * n + r];
            dst[k - 1] = tmp + (size_t)(k - 1) * blk, cnt2[k - 1] = count;
        }
        ZIPCCL_TRY(decodeMany(c, op, st, &f, n - 1, sent, slot, from, fb, dst, cnt2));
        for (int k = 1; k < n && res == zipcclSuccess; k++)
            res = accumulate(c, op, acc, tmp + (size_t)(k - 1) * blk, count, k == 1);
    }
    /* Our own block last (alone on one rank), then one rounding. */
    if (res == zipcclSuccess) res = accumulate(c, op, acc, sendbuf + displs[r] * esz, count, n == 1);
    if (res == zipcclSuccess) res = finalize(c, op, out, acc, count);
    return res;
}

/* ---- the All-to-Alls coded on the device (over a network) -------------------------- */

/* Every non-empty block compressed on the device, ours too; the (n, n)
 * sizes summed; the frames exchanged; each received one (and ours) decoded
 * into its place in recvbuf.  An empty block has no frame.  In place is
 * fine: every block is encoded before any is decoded. */
static zipcclResult_t codedAlltoAll(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, const size_t* sc,
                                    const size_t* sd, const size_t* rc, const size_t* rd, double* size) {
    const int n = c->nranks, r = c->rank;
    const size_t esz = zipcclTypeSize(op->dtype);
    size_t most = maxOf(sc, n) > maxOf(rc, n) ? maxOf(sc, n) : maxOf(rc, n);
    /* AlltoAllv's blocks change from call to call (an expert exchange's with
     * the routing): frames and workspace sized for the next power of two,
     * so a steady run stops growing them once a block near its largest has
     * passed (a grow is an allocation in the step) */
    if (op->kind == zipcclCollAlltoAllv) most = pow2Ceil(most);
    Frames f;
    ZIPCCL_TRY(framesInit(c, op, st, n, most, n, &f));
    memset(size, 0, (size_t)n * n * sizeof(double));
    {
        const void* src[n];
        size_t cnt[n], bytes[n];
        int slot[n], to[n], k = 0;
        memset(slot, 0, sizeof slot), memset(to, 0, sizeof to);
        for (int j = 0; j < n; j++) {
            if (!sc[j]) continue;
            src[k] = (const char*)op->sendbuf + sd[j] * esz, cnt[k] = sc[j], slot[k] = j, to[k] = j;
            if (j != r) st->rawBytes += sc[j] * esz;
            k++;
        }
        ZIPCCL_TRY(encodeMany(c, op, st, &f, k, src, cnt, slot, to, bytes));
        for (int i = 0; i < k; i++) size[(size_t)r * n + to[i]] = (double)bytes[i];
    }
    if (n > 1)
        ZIPCCL_TRY(sumSizes(c, op, st, size, n));
    int slotOf[n];
    size_t sb[n], rb[n];
    for (int i = 0; i < n; i++) {
        const double in = size[(size_t)i * n + r];
        if (rc[i]) ZIPCCL_TRY(sizeOk(op, i, in, f.slot));
        else if (in != 0)
            return zipcclSetError(zipcclMismatch, "%s: rank %d sends a frame to rank %d, whose recvcounts[%d] is 0",
                                  zipcclCollName(op->kind), i, r, i);
        slotOf[i] = i;
        sb[i] = i == r ? 0 : (size_t)size[(size_t)r * n + i];
        rb[i] = i == r ? 0 : (size_t)in;
    }
    if (n > 1) ZIPCCL_TRY(exchange(c, op, st, &f, slotOf, sb, rb));
    int sent[n], slot[n], from[n], k = 0;
    size_t fb[n], cnt[n];
    void* dst[n];
    for (int i = 0; i < n; i++) {
        if (!rc[i]) continue;
        sent[k] = i == r, slot[k] = i, from[k] = i, fb[k] = (size_t)size[(size_t)i * n + r];
        dst[k] = (char*)op->recvbuf + rd[i] * esz, cnt[k] = rc[i];
        k++;
    }
    return decodeMany(c, op, st, &f, k, sent, slot, from, fb, dst, cnt);
}

/* ---- raw over a network -------------------------------------------------------------- */

/* A device-to-device copy: a round with only this rank in it. */
static zipcclResult_t netCopy(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, void* dst,
                              const void* src, size_t bytes) {
    const int n = c->nranks;
    const void* send[n];
    void* recv[n];
    size_t sb[n], rb[n];
    memset(sb, 0, sizeof sb), memset(rb, 0, sizeof rb), memset(send, 0, sizeof send), memset(recv, 0, sizeof recv);
    send[c->rank] = src, recv[c->rank] = dst, sb[c->rank] = rb[c->rank] = bytes;
    return bytes ? netRound(c, op, st, send, sb, recv, rb) : zipcclSuccess;
}

/* Rank r's block to every rank (itself too, unless it is in place). */
static zipcclResult_t rawAllGather(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, const void* mine,
                                   const size_t* counts, const size_t* displs, void* recvbuf) {
    const int n = c->nranks, r = c->rank;
    const size_t esz = zipcclTypeSize(op->dtype);
    const int inPlace = mine == (char*)recvbuf + displs[r] * esz;
    const void* send[n];
    void* recv[n];
    size_t sb[n], rb[n];
    for (int p = 0; p < n; p++) {
        const int skip = p == r && inPlace;
        send[p] = mine, sb[p] = skip ? 0 : counts[r] * esz;
        recv[p] = (char*)recvbuf + displs[p] * esz, rb[p] = skip ? 0 : counts[p] * esz;
    }
    st->rawBytes += (size_t)(n - 1) * counts[r] * esz;
    return netRound(c, op, st, send, sb, recv, rb);
}

/* Block p of sendbuf to rank p; the n - 1 blocks received summed with ours
 * in the canonical order on the device. */
static zipcclResult_t rawReduceScatter(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st,
                                       const char* sendbuf, const size_t* counts, const size_t* displs, void* out) {
    const int n = c->nranks, r = c->rank;
    const zipcclDataType_t dt = op->dtype;
    const size_t esz = zipcclTypeSize(dt), count = counts[r], blk = count * esz;
    float* acc = devScratch(c, kDevAcc, count * sizeof(float));
    if (!acc) return zipcclNoMemory(c, op, "d:the fp32 accumulator", count * sizeof(float));
    char* blocks = n > 1 ? devScratch(c, kDevBlocks, (size_t)n * blk) : NULL;
    if (n > 1 && !blocks) return zipcclNoMemory(c, op, "d:the received blocks", (size_t)n * blk);
    const void* send[n];
    void* recv[n];
    size_t sb[n], rb[n];
    for (int p = 0; p < n; p++) {
        send[p] = sendbuf + displs[p] * esz, sb[p] = p == r ? 0 : counts[p] * esz;
        recv[p] = blocks ? blocks + (size_t)p * blk : NULL, rb[p] = p == r ? 0 : blk;
        if (p != r) st->rawBytes += counts[p] * esz;
    }
    if (n > 1) ZIPCCL_TRY(netRound(c, op, st, send, sb, recv, rb));
    zipcclResult_t res = zipcclSuccess;
    for (int k = 1; k <= n && res == zipcclSuccess; k++) {
        const int i = (r + k) % n; /* r+1, ..., r-1, then ours */
        res = accumulate(c, op, acc, i == r ? send[r] : recv[i], count, k == 1);
    }
    if (res == zipcclSuccess) res = finalize(c, op, out, acc, count);
    return res;
}

/* Each block to its rank (ours: a copy); in place, the input copied first. */
static zipcclResult_t rawAlltoAll(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, const size_t* sc,
                                  const size_t* sd, const size_t* rc, const size_t* rd) {
    const int n = c->nranks, r = c->rank;
    const size_t esz = zipcclTypeSize(op->dtype);
    const char* src = op->sendbuf;
    const size_t extent = zipcclExtentOf(sc, sd, n) * esz;
    if (op->sendbuf == op->recvbuf && extent) {
        char* copy = devScratch(c, kDevBlocks, extent);
        if (!copy) return zipcclNoMemory(c, op, "d:the in-place input", extent);
        ZIPCCL_TRY(netCopy(c, op, st, copy, src, extent));
        src = copy;
    }
    const void* send[n];
    void* recv[n];
    size_t sb[n], rb[n];
    for (int p = 0; p < n; p++) {
        send[p] = src + sd[p] * esz, sb[p] = sc[p] * esz;
        recv[p] = (char*)op->recvbuf + rd[p] * esz, rb[p] = rc[p] * esz;
        if (p != r) st->rawBytes += sc[p] * esz;
    }
    return netRound(c, op, st, send, sb, recv, rb);
}

/* ---- one rank: no codec ------------------------------------------------------------- */

/* A compressed call on a communicator of one rank moves nothing between
 * ranks, so coding would only cost time (a compress, a frame down, a
 * decode, two host waits): runDirect copies the blocks on the device
 * instead (over a network, by the network's own copy, as raw does; else
 * asynchronously on the call's stream; nothing at all in place) and counts
 * no raw, wire or bus bytes.  ReduceScatter (and AllReduce, which
 * is its ReduceScatter alone at one rank) keeps its accumulate and one
 * rounding, which codes nothing at one rank: the host designs' bits. */
static zipcclResult_t selfCopy(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, void* dst,
                               const void* src, size_t bytes) {
    if (!bytes || dst == src) return zipcclSuccess;
    if (c->hasNet) return netCopy(c, op, st, dst, src, bytes); /* the network's own copy, as raw's */
    if (!zdev_copy_async(c->dev, dst, src, bytes, ZDEV_DEVICE_TO_DEVICE, op->stream)) return zipcclSuccess;
    char doing[80];
    snprintf(doing, sizeof doing, "copying %zu bytes on the device", bytes);
    return zipcclDevFail(c, zipcclCollName(op->kind), doing);
}

/* ---- a call over a network ------------------------------------------------------------ */

static zipcclResult_t runDirect(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, int coded,
                                double* size);

static zipcclResult_t runNet(struct zipcclComm* c, const zipcclOp* op, zipcclStrategy_t s, zipcclExecStats* st,
                             double* size) {
    const int n = c->nranks;
    const size_t esz = zipcclTypeSize(op->dtype);
    const zipcclCollKind_t k = op->kind;
    /* Exact-size receives: only once every rank is known to make this call. */
    ZIPCCL_TRY(zipcclAgreeWait(c));
    if (s == zipcclStrategyNative && c->net.collective && k != zipcclCollAlltoAll && k != zipcclCollAlltoAllv) {
        const double t = zipcclNow();
        zipcclResult_t res =
            c->net.collective(c->net.ctx, k, op->sendbuf, op->recvbuf, op->count, op->dtype, op->op, op->stream);
        st->wireSeconds += zipcclNow() - t;
        st->rawBytes = st->wireBytes = (k == zipcclCollAllReduce ? 2 * op->count * esz * (size_t)(n - 1) / (size_t)n
                                                                 : op->count * esz * (size_t)(n - 1));
        return res == zipcclSuccess ? res : zipcclPrefixError(res, "%s: %s's own", zipcclCollName(k), c->net.name);
    }
    if (op->cfg.algo == zipcclAlgoRing || op->cfg.algo == zipcclAlgoOneShot || op->cfg.algo == zipcclAlgoHier)
        return zipcclSetError(zipcclUnsupported, "%s: the %s design runs over host messages; over %s every call "
                              "is direct (ask for direct or the default)", zipcclCollName(k),
                              zipcclAlgoName(op->cfg.algo), c->net.name);
    if (s == zipcclStrategyNative) st->strategy = zipcclStrategyRaw; /* the network has none of its own */
    st->algo = zipcclAlgoDirect;
    return runDirect(c, op, st, s == zipcclStrategyCompressed, size);
}

/* The direct designs: raw ones only over a network, coded ones (compressed)
 * over a network or with their frames through host memory. */
static zipcclResult_t runDirect(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, int coded,
                                double* size) {
    const int n = c->nranks, r = c->rank;
    const size_t esz = zipcclTypeSize(op->dtype);
    const zipcclCollKind_t k = op->kind;
    size_t counts[n], displs[n];
    if (k == zipcclCollAllReduce) zipcclSplitBlocks(op->count, n, counts, displs); /* the host designs' split */
    else
        for (int i = 0; i < n; i++) counts[i] = op->count, displs[i] = (size_t)i * op->count;
    if (coded && n == 1) { /* no codec at one rank (selfCopy) */
        switch (k) {
        case zipcclCollAllGather:
        case zipcclCollAlltoAll: return selfCopy(c, op, st, op->recvbuf, op->sendbuf, op->count * esz);
        case zipcclCollAlltoAllv:
            if (op->sendcounts[0] != op->recvcounts[0])
                return zipcclSetError(zipcclMismatch, "%s: sendcounts[0] %zu, recvcounts[0] %zu on one rank",
                                      zipcclCollName(k), op->sendcounts[0], op->recvcounts[0]);
            return selfCopy(c, op, st, (char*)op->recvbuf + op->rdispls[0] * esz,
                            (const char*)op->sendbuf + op->sdispls[0] * esz, op->sendcounts[0] * esz);
        case zipcclCollAllReduce:
            return op->count ? codedReduceScatter(c, op, st, op->sendbuf, counts, displs, op->recvbuf, size)
                             : zipcclSuccess;
        default: break; /* ReduceScatter: below, it codes nothing at one rank */
        }
    }
    switch (k) {
    case zipcclCollAllGather:
        if (!op->count) return zipcclSuccess;
        return coded ? codedAllGather(c, op, st, op->sendbuf, counts, displs, op->recvbuf)
                     : rawAllGather(c, op, st, op->sendbuf, counts, displs, op->recvbuf);
    case zipcclCollReduceScatter:
        if (!op->count) return zipcclSuccess;
        return coded ? codedReduceScatter(c, op, st, op->sendbuf, counts, displs, op->recvbuf, size)
                     : rawReduceScatter(c, op, st, op->sendbuf, counts, displs, op->recvbuf);
    case zipcclCollAllReduce: {
        if (!op->count) return zipcclSuccess;
        char* block = devScratch(c, kDevBlock, counts[r] * esz);
        if (!block) return zipcclNoMemory(c, op, "d:the reduced block", counts[r] * esz);
        if (coded) {
            ZIPCCL_TRY(codedReduceScatter(c, op, st, op->sendbuf, counts, displs, block, size));
            return codedAllGather(c, op, st, block, counts, displs, op->recvbuf);
        }
        ZIPCCL_TRY(rawReduceScatter(c, op, st, op->sendbuf, counts, displs, block));
        return rawAllGather(c, op, st, block, counts, displs, op->recvbuf);
    }
    case zipcclCollAlltoAll:
        if (!op->count) return zipcclSuccess;
        return coded ? codedAlltoAll(c, op, st, counts, displs, counts, displs, size)
                     : rawAlltoAll(c, op, st, counts, displs, counts, displs);
    case zipcclCollAlltoAllv:
        return coded ? codedAlltoAll(c, op, st, op->sendcounts, op->sdispls, op->recvcounts, op->rdispls, size)
                     : rawAlltoAll(c, op, st, op->sendcounts, op->sdispls, op->recvcounts, op->rdispls);
    default: return zipcclSetError(zipcclInternalError, "device run of collective %d", (int)k);
    }
}

/* ---- the host stand-in for a network ---------------------------------------------- */

/* The exchange as messages of the communicator's own transport (the data
 * channel carries nothing else on a communicator with a network), waited
 * with its timeout; its own block a memcpy. */
#define NET_TAG (7 << 20) /* a collective kind no design's tag uses */
static zipcclResult_t hostNetExchange(void* ctx, const void* const* send, const size_t* sb, void* const* recv,
                                      const size_t* rb, void* stream) {
    (void)stream;
    struct zipcclComm* c = ctx;
    const zipcclTransport* tp = c->tp;
    const int n = c->nranks, r = c->rank;
    void* reqs = malloc((size_t)(2 * n) * tp->reqSize);
    if (!reqs) return zipcclSetError(zipcclSystemError, "host network: out of memory");
    tp->reqInit(reqs, 2 * n);
    int nr = 0, ns = 0;
    zipcclResult_t res = zipcclSuccess;
    for (int p = 0; p < n && res == zipcclSuccess; p++)
        if (p != r && rb[p]) res = tp->irecv(c, zipcclChanData, recv[p], rb[p], p, NET_TAG, reqs, nr++);
    for (int p = 0; p < n && res == zipcclSuccess; p++)
        if (p != r && sb[p]) res = tp->isend(c, zipcclChanData, send[p], sb[p], p, NET_TAG, zipcclSlot(c, reqs, nr), ns++);
    if (res == zipcclSuccess && sb[r] != rb[r])
        res = zipcclSetError(zipcclInternalError, "host network: %zu bytes to itself, %zu expected", sb[r], rb[r]);
    if (res == zipcclSuccess && sb[r]) memmove(recv[r], send[r], sb[r]);
    if (res == zipcclSuccess) res = zipcclWaitSlots(c, reqs, nr + ns, "host network exchange", -1, NULL);
    if (res != zipcclSuccess) tp->abandon(c, reqs, nr, ns);
    free(reqs);
    return res;
}

zipcclResult_t zipcclDeviceNetHost(zipcclComm_t comm, zipcclDeviceNet_t* out) {
    if (!comm || !out) return zipcclSetError(zipcclInvalidArgument, "zipcclDeviceNetHost: null argument");
    if (!comm->tp->isend)
        return zipcclSetError(zipcclInvalidArgument, "zipcclDeviceNetHost: the %s transport has no messages",
                              comm->tp->name);
    *out = (zipcclDeviceNet_t){.name = "host", .ctx = comm, .exchange = hostNetExchange};
    return zipcclSuccess;
}

/* ---- the entry -------------------------------------------------------------------- */

int zipcclRunsOnDevice(const struct zipcclComm* c, zipcclStrategy_t s) {
    return c->hasNet || (s == zipcclStrategyCompressed && zipcclCodedOnDevice(c));
}

zipcclResult_t zipcclRunOnDevice(struct zipcclComm* c, const zipcclOp* op, zipcclStrategy_t s, zipcclExecStats* st) {
    const size_t n = (size_t)c->nranks;
    double* size = malloc(n * n * sizeof(double)); /* the (n, n) frame sizes */
    if (!size) return zipcclNoMemory(c, op, "h:the frame sizes", n * n * sizeof(double));
    zipcclResult_t res = c->hasNet ? runNet(c, op, s, st, size) : runDirect(c, op, st, 1, size);
    free(size);
    return res;
}
