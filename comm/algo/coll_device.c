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
 * A coded call goes in pieces (ZIPCCL_DEVICE_PIECE_BYTES a block, 8 MiB by
 * default; runCoded): each piece is coded, its sizes summed, its frames
 * exchanged and decoded as the whole call would be, and while piece k is on
 * the wire the device encodes piece k+1 and brings piece k-1 up and decodes
 * it (over a network the exchange has a stream of its own): about
 * max(device work, wire) a piece instead of their sum.  AlltoAllv's pieces
 * come from the largest block of any rank, which the call agreement
 * carries (without one, and for an in-place AlltoAll, one piece).
 *
 * Left out: ring and one-shot designs over a network (the direct ones only:
 * an explicit request for another is refused).
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
    if (c->netStream) {
        zdev_stream_sync(d, c->netStream);
        zdev_stream_destroy(d, c->netStream);
        c->netStream = NULL;
    }
    for (int i = 0; i < 4; i++) {
        if (c->pieceEvent[i]) zdev_event_destroy(d, c->pieceEvent[i]);
        c->pieceEvent[i] = NULL;
    }
    for (int i = 0; i < 3; i++) {
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

/* One coded call's frames: `sendSlots` slots for what this rank sends and
 * n for what it receives, on the device, and (without a network) their
 * twins in host staging, which is what crosses between the ranks; the
 * codec and its context on the call's stream; host memory for what the
 * codec's halves leave for the host (pinned: the copies into it do not
 * wait).  A call in pieces keeps several sets, piece p using set p % sets
 * (usePiece): three of the send slots (piece p + 2 is encoded before piece
 * p's own frame is decoded, runCoded) and two of the received frames (the
 * next piece arrives while this one goes up or is decoded: on the host
 * without a network, on the device over one).  A slot holds the largest frame
 * of the call's largest piece, 256-byte aligned (the device codec's aligned
 * loads and stores), with room for the pad byte of the 2-byte elements the
 * staged frames travel as. */
typedef struct {
    const zipcclCodecOps* codec;
    zipcclCodecCtx cx;
    zipcclCodecParams_t params;
    size_t slot;
    int sendSlots, sendSets, recvSets, hostRecvSets;
    char *dsend, *drecv; /* device */
    char *hsend, *hrecv; /* host staging; NULL over a network */
    char *dcur, *rcur, *hrcur; /* the sets of the piece at hand (usePiece) */
    char *encPend, *decPend; /* host: the encoder's, then one decoder share per piece */
    size_t decShare;
} Frames;

static zipcclResult_t framesInit(struct zipcclComm* c, const zipcclOp* op, const zipcclExecStats* st, int sendSlots,
                                 size_t maxCount, int decodes, size_t pieces, Frames* f) {
    const int n = c->nranks, sets = pieces > 1 ? 3 : 1, recvSets = pieces > 1 && c->hasNet ? 2 : 1,
              hostRecvSets = pieces > 1 && !c->hasNet ? 2 : 1;
    f->sendSets = sets, f->recvSets = recvSets, f->hostRecvSets = hostRecvSets;
    f->codec = zipcclCodecOpsFor(c->dev->kind == ZDEV_KIND_CUDA);
    f->slot = (f->codec->bound(maxCount, op->dtype, 0) + 1 + 255) & ~(size_t)255;
    f->sendSlots = sendSlots;
    const size_t all = (size_t)(sets * sendSlots + recvSets * n) * f->slot;
    f->dsend = devScratch(c, kDevFrames, all);
    if (!f->dsend) return zipcclNoMemory(c, op, "d:frames", all);
    f->drecv = f->dsend + (size_t)(sets * sendSlots) * f->slot;
    /* one batch of up to sendSlots encodes, one of `decodes` decodes */
    const size_t we = f->codec->workspaceBatch(sendSlots, maxCount, op->dtype, 0),
                 wd = f->codec->workspaceBatch(decodes, maxCount, op->dtype, 1), wsz = we > wd ? we : wd;
    void* work = wsz ? devScratch(c, kDevWork, wsz) : NULL;
    if (wsz && !work) return zipcclNoMemory(c, op, "d:codec workspace", wsz);
    f->hsend = f->hrecv = NULL;
    if (!c->hasNet) {
        f->hsend = zipcclHostStage(c, zipcclStageSend, (size_t)sendSlots * f->slot);
        f->hrecv = f->hsend ? zipcclHostStage(c, zipcclStageRecv, (size_t)(hostRecvSets * n) * f->slot) : NULL;
        if (!f->hsend || !f->hrecv) return zipcclNoMemory(c, op, "h:frame staging", all);
    }
    const size_t ep = (f->codec->pendingBytes(sendSlots, 0) + 63) & ~(size_t)63;
    f->decShare = (f->codec->pendingBytes(decodes, 1) + 63) & ~(size_t)63;
    const size_t pend = ep + pieces * f->decShare;
    f->encPend = zipcclHostStage(c, zipcclStagePending, pend);
    if (!f->encPend) return zipcclNoMemory(c, op, "h:the codec's results", pend);
    f->decPend = f->encPend + ep;
    f->dcur = f->dsend, f->rcur = f->drecv, f->hrcur = f->hrecv;
    f->cx = (zipcclCodecCtx){.workspace = work, .workspaceSize = wsz, .stream = op->stream};
    f->params = (zipcclCodecParams_t)ZIPCCL_CODEC_PARAMS_DEFAULT;
    f->params.codec = st->codec;
    return zipcclSuccess;
}

/* The sets piece p uses. */
static void usePiece(Frames* f, size_t p, int n) {
    f->dcur = f->dsend + (size_t)(p % (size_t)f->sendSets) * (size_t)f->sendSlots * f->slot;
    f->rcur = f->drecv + (size_t)(p % (size_t)f->recvSets) * (size_t)n * f->slot;
    f->hrcur = f->hrecv ? f->hrecv + (size_t)(p % (size_t)f->hostRecvSets) * (size_t)n * f->slot : NULL;
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
 * slotOf[p] (of the piece's set); from each, rb[p] bytes into receive slot
 * p (the rank itself: none).  Over the network device to device, else by
 * the raw AlltoAllv design over the host staging, as 2-byte elements. */
static zipcclResult_t exchange(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, const Frames* f,
                               const int* slotOf, const size_t* sb, const size_t* rb) {
    const int n = c->nranks;
    if (c->hasNet) {
        const void* send[n];
        void* recv[n];
        for (int p = 0; p < n; p++) {
            send[p] = f->dcur + (size_t)slotOf[p] * f->slot;
            recv[p] = f->rcur + (size_t)p * f->slot;
        }
        return netRound(c, op, st, send, sb, recv, rb);
    }
    size_t sc[n], sd[n], rc[n], rd[n];
    for (int p = 0; p < n; p++) {
        sc[p] = (sb[p] + 1) / 2, sd[p] = (size_t)slotOf[p] * f->slot / 2;
        rc[p] = (rb[p] + 1) / 2, rd[p] = (size_t)p * f->slot / 2;
    }
    zipcclOp x = {.comm = c, .kind = zipcclCollAlltoAllv, .sendbuf = f->hsend, .recvbuf = f->hrcur,
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

/* ---- the coded designs, in pieces ---------------------------------------------------- */

/* A coded call as runCoded runs it (the designs below fill it):
 *   enc: the blocks this rank compresses, block e (encCount[e] elements at
 *        encSrc[e]) for rank encTo[e] (-1: every rank) into send slot
 *        encSlot[e];
 *   rows: the sizes' shape, 1 (AllGather: one frame a rank, to all) or n
 *        ([sender][receiver]);
 *   dec: the frames this rank decodes, frame d from rank decFrom[d] (its
 *        own send slot decSlot[d] when decSent[d], else receive slot
 *        decSlot[d]) into decCount[d] elements at decDst[d];
 *   sum (ReduceScatter): the decoded blocks, in dec's order (ranks r+1,
 *        ..., r-1), then `own`, added into the fp32 accumulator `acc` and
 *        rounded once into `out`, sumCount elements;
 *   emptyFrames: an empty block still has a frame (AllGather and
 *        ReduceScatter, whose blocks the host designs split; not the
 *        All-to-Alls, where an empty block sends nothing).
 * The blocks go in pieces of `piece` elements: piece p of a block is its
 * elements [p * piece, (p + 1) * piece), each piece coded, exchanged and
 * decoded as the whole call would be, and the sum taken piece by piece: the
 * same bits for any piece size (the codec is lossless, the sum
 * elementwise). */
typedef struct {
    int nEnc;
    const char* const* encSrc;
    const size_t* encCount;
    const int *encTo, *encSlot;
    int rows;
    int nDec;
    const int *decSent, *decSlot, *decFrom;
    char* const* decDst;
    const size_t* decCount;
    int sum;
    const char* own;
    float* acc;
    void* out;
    size_t sumCount;
    int emptyFrames;
    size_t piece;
    size_t pieces; /* the call's pieces where no rank knows all blocks (AlltoAllv), else 0 */
} Coded;

/* Pieces of a block of m elements, and piece p's length (0: none). */
static size_t piecesOf(const Coded* x, size_t m) { return m ? (m + x->piece - 1) / x->piece : (size_t)x->emptyFrames; }
static int hasPiece(const Coded* x, size_t m, size_t p) { return p < piecesOf(x, m); }
static size_t pieceLen(const Coded* x, size_t m, size_t p) {
    const size_t at = p * x->piece;
    return m > at ? (m - at < x->piece ? m - at : x->piece) : 0;
}

/* The piece size of a call of `maxBlock` elements at most a block: as many
 * pieces as the communicator's size (ZIPCCL_DEVICE_PIECE_BYTES, 0: none)
 * asks, at most kMaxPieces, of equal size (so a call in pieces keeps no
 * more frames than in one: its sets hold 4 or 5 pieces where the whole call
 * holds 2 blocks, and a block just over the size goes in two halves, not
 * one piece and a sliver); the whole block when `whole`. */
enum { kMaxPieces = 64 };
static size_t pieceElems(const struct zipcclComm* c, const zipcclOp* op, size_t maxBlock, int whole) {
    const size_t esz = zipcclTypeSize(op->dtype), p = c->devPieceBytes / esz;
    if (whole || !p || p >= maxBlock) return maxBlock ? maxBlock : 1;
    size_t k = (maxBlock + p - 1) / p;
    if (k > kMaxPieces) k = kMaxPieces;
    return (maxBlock + k - 1) / k;
}

/* Mark the stream here (for a call in pieces; event ev of the
 * communicator's two), and wait for the mark: an event where the call is in
 * pieces (the stream may hold later work by then), else the stream itself
 * (the waits of the call unpipelined). */
static zipcclResult_t markHere(struct zipcclComm* c, const zipcclOp* op, int pieced, int ev) {
    if (!pieced || !zipcclDevRecord(c, &c->pieceEvent[ev], op->stream)) return zipcclSuccess;
    return zipcclDevFail(c, zipcclCollName(op->kind), "recording an event on the call's stream");
}
static zipcclResult_t waitMark(struct zipcclComm* c, const zipcclOp* op, int pieced, int ev, const char* doing) {
    const int bad = pieced ? zdev_event_sync(c->dev, c->pieceEvent[ev]) : zdev_stream_sync(c->dev, op->stream);
    return bad ? zipcclDevFail(c, zipcclCollName(op->kind), doing) : zipcclSuccess;
}

/* The codec's arguments for piece p of the k blocks which[0..k) (send
 * slots of the piece's set), and the error naming a block's peer. */
static void encArgs(const zipcclOp* op, Frames* f, const Coded* x, size_t p, int n, int k, const int* which,
                    const void** src, size_t* cnt, void** frame, size_t* cap) {
    const size_t esz = zipcclTypeSize(op->dtype);
    usePiece(f, p, n);
    for (int i = 0; i < k; i++) {
        const int e = which[i];
        src[i] = x->encSrc[e] + p * x->piece * esz, cnt[i] = pieceLen(x, x->encCount[e], p);
        frame[i] = f->dcur + (size_t)x->encSlot[e] * f->slot, cap[i] = f->slot;
    }
}
static zipcclResult_t encFail(const struct zipcclComm* c, const zipcclOp* op, const Coded* x, const int* which,
                              int bad, zipcclResult_t res) {
    const int to = bad < 0 ? -1 : x->encTo[which[bad]];
    return zipcclPrefixError(res, "%s: compressing the block for rank %d on the device", zipcclCollName(op->kind),
                             to < 0 ? c->rank : to);
}

/* Piece p's encodes started on the stream (the codec's first half): the
 * blocks that have a piece p, into the piece's send set; *k how many. */
static zipcclResult_t encStart(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, Frames* f,
                               const Coded* x, size_t p, int* k, int* which) {
    *k = 0;
    for (int e = 0; e < x->nEnc; e++)
        if (hasPiece(x, x->encCount[e], p)) which[(*k)++] = e;
    if (!*k) return zipcclSuccess;
    const void* src[*k];
    size_t cnt[*k], cap[*k];
    void* frame[*k];
    encArgs(op, f, x, p, c->nranks, *k, which, src, cnt, frame, cap);
    int bad = -1;
    const double t = zipcclNow();
    zipcclResult_t res = f->codec->compressStart(&f->cx, *k, src, cnt, op->dtype, frame, cap, &f->params, f->encPend, &bad);
    st->codecSeconds += zipcclNow() - t;
    return res == zipcclSuccess ? res : encFail(c, op, x, which, bad, res);
}

/* Its second half, once the stream has passed the first: the frames' sizes
 * into bytes[e] (0 for a block with no piece p). */
static zipcclResult_t encEnd(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, Frames* f,
                             const Coded* x, size_t p, int k, const int* which, size_t* bytes) {
    for (int e = 0; e < x->nEnc; e++) bytes[e] = 0;
    if (!k) return zipcclSuccess;
    const void* src[k];
    size_t cnt[k], cap[k], got[k];
    void* frame[k];
    encArgs(op, f, x, p, c->nranks, k, which, src, cnt, frame, cap);
    int bad = -1;
    const double t = zipcclNow();
    zipcclResult_t res = f->codec->compressEnd(&f->cx, k, src, cnt, op->dtype, frame, cap, &f->params, f->encPend,
                                               got, &bad);
    st->codecSeconds += zipcclNow() - t;
    if (res != zipcclSuccess) return encFail(c, op, x, which, bad, res);
    for (int i = 0; i < k; i++) bytes[which[i]] = got[i];
    return zipcclSuccess;
}

/* Without a network, the piece's frames a peer reads go down into their
 * staging slots (padded to 2 bytes), queued on the stream. */
static zipcclResult_t framesDown(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, const Frames* f,
                                 const Coded* x, const size_t* bytes) {
    if (c->hasNet) return zipcclSuccess;
    const double t = zipcclNow();
    for (int e = 0; e < x->nEnc; e++) {
        if (!bytes[e] || x->encTo[e] == c->rank) continue; /* only this rank reads it */
        char* host = f->hsend + (size_t)x->encSlot[e] * f->slot;
        if (zdev_copy_async(c->dev, host, f->dcur + (size_t)x->encSlot[e] * f->slot, bytes[e], ZDEV_DEVICE_TO_HOST,
                            op->stream))
            return zipcclDevFail(c, zipcclCollName(op->kind), "copying a frame from the device to the host");
        st->busBytes += bytes[e];
    }
    st->busSeconds += zipcclNow() - t;
    return zipcclSuccess;
}

/* Piece p's frames decoded on the device (the codec's first half; the
 * verdicts are read once the call's work is done, decEnd): the received
 * ones go up from the staging first (without a network); then, for a sum,
 * the piece's decoded blocks and our own added in the canonical order and
 * rounded. */
static zipcclResult_t decStart(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, Frames* f,
                               const Coded* x, size_t p, const size_t* fbytes) {
    const char* what = zipcclCollName(op->kind);
    const size_t esz = zipcclTypeSize(op->dtype), off = p * x->piece;
    const int m = x->nDec ? x->nDec : 1;
    const void* frame[m];
    void* dst[m];
    size_t cap[m], fb[m];
    int k = 0, which[m];
    usePiece(f, p, c->nranks);
    double t = zipcclNow();
    for (int d = 0; d < x->nDec; d++) {
        if (!hasPiece(x, x->decCount[d], p)) continue;
        char* fr = (x->decSent[d] ? f->dcur : f->rcur) + (size_t)x->decSlot[d] * f->slot;
        frame[k] = fr, fb[k] = fbytes[d], dst[k] = x->decDst[d] + off * esz;
        cap[k] = pieceLen(x, x->decCount[d], p) * esz, which[k++] = d;
        if (x->decSent[d] || c->hasNet) continue;
        if (zdev_copy_async(c->dev, fr, f->hrcur + (size_t)x->decSlot[d] * f->slot, fbytes[d], ZDEV_HOST_TO_DEVICE,
                            op->stream))
            return zipcclDevFail(c, what, "copying a frame from the host to the device");
        st->busBytes += fbytes[d];
    }
    st->busSeconds += zipcclNow() - t;
    if (k) {
        int bad = -1;
        t = zipcclNow();
        zipcclResult_t res = f->codec->decompressStart(&f->cx, k, frame, fb, dst, cap, op->dtype,
                                                       f->decPend + p * f->decShare, &bad);
        st->codecSeconds += zipcclNow() - t;
        if (res != zipcclSuccess)
            return zipcclPrefixError(res, "%s: decoding rank %d's frame on the device", what,
                                     bad < 0 ? c->rank : x->decFrom[which[bad]]);
    }
    if (!x->sum) return zipcclSuccess;
    const size_t len = pieceLen(x, x->sumCount, p);
    if (!len) return zipcclSuccess;
    for (int d = 0; d < x->nDec; d++) /* ranks r+1, ..., r-1 */
        ZIPCCL_TRY(accumulate(c, op, x->acc + off, x->decDst[d] + off * esz, len, d == 0));
    ZIPCCL_TRY(accumulate(c, op, x->acc + off, x->own + off * esz, len, x->nDec == 0)); /* our own last */
    return finalize(c, op, (char*)x->out + off * esz, x->acc + off, len);
}

/* Piece p's verdicts, after the call's work: each frame whole and holding
 * its piece's count. */
static zipcclResult_t decEnd(struct zipcclComm* c, const zipcclOp* op, Frames* f, const Coded* x, size_t p,
                             const size_t* fbytes) {
    const char* what = zipcclCollName(op->kind);
    const size_t esz = zipcclTypeSize(op->dtype), off = p * x->piece;
    const int m = x->nDec ? x->nDec : 1;
    const void* frame[m];
    void* dst[m];
    size_t cap[m], fb[m], got[m];
    int k = 0, which[m];
    usePiece(f, p, c->nranks);
    for (int d = 0; d < x->nDec; d++) {
        if (!hasPiece(x, x->decCount[d], p)) continue;
        frame[k] = (x->decSent[d] ? f->dcur : f->rcur) + (size_t)x->decSlot[d] * f->slot;
        fb[k] = fbytes[(size_t)p * x->nDec + d], dst[k] = x->decDst[d] + off * esz;
        cap[k] = pieceLen(x, x->decCount[d], p) * esz, got[k] = 0, which[k++] = d;
    }
    if (!k) return zipcclSuccess;
    int bad = -1;
    zipcclResult_t res = f->codec->decompressEnd(&f->cx, k, frame, fb, dst, cap, op->dtype,
                                                 f->decPend + p * f->decShare, got, &bad);
    if (res != zipcclSuccess)
        return zipcclPrefixError(res, "%s: decoding rank %d's frame on the device", what,
                                 bad < 0 ? c->rank : x->decFrom[which[bad]]);
    for (int i = 0; i < k; i++)
        if (got[i] != cap[i] / esz)
            return zipcclSetError(zipcclCorruptStream, "%s: rank %d's frame holds %zu elements, not %zu", what,
                                  x->decFrom[which[i]], got[i], cap[i] / esz);
    return zipcclSuccess;
}

/* Piece p made ready to go (its encoder started before): wait for its
 * sizes, finish it (bytes), send its frames down (without a network) and
 * mark them (event 1), mark it for the network's stream (event 2, over a
 * network in pieces), then start piece p + 1's encoder and mark it (event
 * 0); *k and which say what that encoder codes. */
static zipcclResult_t prepare(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, Frames* f,
                              const Coded* x, size_t p, size_t K, int* k, int* which, size_t* bytes) {
    const int pieced = K > 1, dev = f->codec->device, n = c->nranks;
    if (*k && dev) ZIPCCL_TRY(waitMark(c, op, pieced, 0, "waiting for the frames' sizes"));
    ZIPCCL_TRY(encEnd(c, op, st, f, x, p, *k, which, bytes));
    ZIPCCL_TRY(framesDown(c, op, st, f, x, bytes));
    if (!c->hasNet && n > 1) ZIPCCL_TRY(markHere(c, op, pieced, 1));
    if (c->hasNet && n > 1) ZIPCCL_TRY(markHere(c, op, pieced, 2));
    if (p + 1 >= K) return zipcclSuccess;
    ZIPCCL_TRY(encStart(c, op, st, f, x, p + 1, k, which));
    return *k && dev ? markHere(c, op, pieced, 0) : zipcclSuccess;
}

/* A coded call, piece by piece.  The host, for piece p: sum its sizes,
 * wait for its frames to be down, exchange them (the wire), then make
 * piece p + 1 ready (wait for its sizes, queue its frames down and piece
 * p + 2's encoder: prepare) and only then queue piece p's frames up, its
 * decode and its sum.  So the call's stream holds, in order:
 *
 *   enc 0, down 0, enc 1 | down 1, enc 2, up 0, dec 0 | down 2, enc 3,
 *   up 1, dec 1 | ...
 *
 * and while piece p is on the wire the device runs enc p+1, up p-1 and
 * dec p-1; the wire of piece p + 1 waits only for its frames to be down.
 * One stream orders everything else: the staging for sends is rewritten
 * only after the wire is done with it; piece p uses set p % 3 of the send
 * slots (its own frame, which AllGather decodes, outlives the encoders of
 * p + 1 and p + 2) and set p % 2 of the received frames (the next piece
 * arrives before this one went up).  Over a network the exchange runs on a
 * stream of its own (c->netStream), after the piece's frames (event 2),
 * and the decode after it (event 3).  Events (markHere, waitMark) let the
 * host wait for a point of the stream, not its end.  In one piece it is
 * the call unpipelined, with its waits: sizes, frames down, verdicts.  The
 * sizes: each piece's (rows x n), summed over the ranks as the whole
 * call's were; the verdicts read once, after the last piece.
 * tests/test_coll_device_cuda_emu.sh runs it with the emulator's streams
 * deferred (ZK_EMU_ASYNC=1): one set of received frames instead of two
 * fails there. */
static zipcclResult_t runCoded(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, const Coded* x,
                               size_t maxBlock, double* size) {
    const int n = c->nranks, r = c->rank, rows = x->rows;
    size_t K = 1; /* the call's pieces: the most any block has (the same on every rank) */
    for (int e = 0; e < x->nEnc; e++)
        if (piecesOf(x, x->encCount[e]) > K) K = piecesOf(x, x->encCount[e]);
    for (int d = 0; d < x->nDec; d++)
        if (piecesOf(x, x->decCount[d]) > K) K = piecesOf(x, x->decCount[d]);
    if (x->sum && piecesOf(x, x->sumCount) > K) K = piecesOf(x, x->sumCount);
    if (x->pieces > K) K = x->pieces;
    const int pieced = K > 1;
    Frames f;
    ZIPCCL_TRY(framesInit(c, op, st, rows == 1 ? 1 : n, maxBlock < x->piece ? maxBlock : x->piece,
                          x->nDec ? x->nDec : 1, K, &f));
    const int ne = x->nEnc ? x->nEnc : 1, nd = x->nDec ? x->nDec : 1;
    size_t bytes[2][ne]; /* this piece's frame sizes and the next one's */
    int which[ne], k = 0;
    size_t* fb = malloc(K * (size_t)nd * sizeof *fb); /* every piece's frame sizes, for the verdicts */
    if (!fb) return zipcclNoMemory(c, op, "h:the frame sizes", K * (size_t)nd * sizeof *fb);
    /* what this rank expects from rank i: the count of its block, -1 for none */
    long long expect[n];
    for (int i = 0; i < n; i++) expect[i] = -1;
    for (int d = 0; d < x->nDec; d++)
        if (!x->decSent[d]) expect[x->decFrom[d]] = (long long)x->decCount[d];
    int slotOf[n];
    size_t sb[n], rb[n];
    for (int i = 0; i < n; i++) slotOf[i] = rows == 1 ? 0 : i;
    /* the codec's results wait for the device only on one (the CPU
     * codec's are in when its Start returns) */
    const int dev = f.codec->device;
    int decoded = 0;
    /* over a network in pieces, the exchange on a stream of its own
     * (c->netStream): it waits for the piece's frames (event 2), the
     * piece's decode for it (event 3), and the codec runs on beside it */
    const int two = pieced && c->hasNet && n > 1, down = !c->hasNet && n > 1;
    zipcclOp xop = *op;
    zipcclResult_t res = zipcclSuccess;
    if (two && !c->netStream && zdev_stream_create(c->dev, &c->netStream))
        res = zipcclDevFail(c, zipcclCollName(op->kind), "creating the network's stream");
    if (two) xop.stream = c->netStream;
    if (res == zipcclSuccess) res = encStart(c, op, st, &f, x, 0, &k, which);
    if (res == zipcclSuccess && k && dev) res = markHere(c, op, pieced, 0);
    if (res == zipcclSuccess) res = prepare(c, op, st, &f, x, 0, K, &k, which, bytes[0]);
    for (size_t p = 0; p < K && res == zipcclSuccess; p++) {
        const size_t* mine = bytes[p % 2];
        /* the sizes: rows x n, this rank's part filled */
        memset(size, 0, (size_t)rows * n * sizeof(double));
        for (int e = 0; e < x->nEnc; e++)
            if (rows == 1) size[r] = (double)mine[e];
            else if (x->encTo[e] >= 0) size[(size_t)r * n + x->encTo[e]] = (double)mine[e];
        res = sumSizes(c, op, st, size, rows);
        for (int i = 0; i < n && res == zipcclSuccess; i++) {
            const double in = rows == 1 ? size[i] : size[(size_t)i * n + r];
            const int want = i != r && expect[i] >= 0 && hasPiece(x, (size_t)expect[i], p);
            if (want) res = sizeOk(op, i, in, f.slot);
            else if (i != r && in != 0)
                res = zipcclSetError(zipcclMismatch, "%s: rank %d sends rank %d a frame it does not expect (piece "
                                     "%zu; recvcounts[%d] %lld)", zipcclCollName(op->kind), i, r, p, i,
                                     expect[i] < 0 ? 0 : expect[i]);
            sb[i] = i == r ? 0 : (size_t)(rows == 1 ? size[r] : size[(size_t)r * n + i]);
            rb[i] = i == r ? 0 : (size_t)in;
        }
        for (int d = 0; d < x->nDec; d++) {
            const int i = x->decFrom[d];
            fb[p * (size_t)nd + d] = x->decSent[d] ? (rows == 1 ? (size_t)size[r] : (size_t)size[(size_t)r * n + i])
                                                   : (rows == 1 ? (size_t)size[i] : (size_t)size[(size_t)i * n + r]);
        }
        /* piece p on the wire (the device encodes piece p + 1 meanwhile) */
        if (res == zipcclSuccess && down) res = waitMark(c, op, pieced, 1, "waiting for the frames to come down");
        if (res == zipcclSuccess && two && zdev_stream_wait_event(c->dev, xop.stream, c->pieceEvent[2]))
            res = zipcclDevFail(c, zipcclCollName(op->kind), "ordering the exchange after the encoder");
        usePiece(&f, p, n);
        if (res == zipcclSuccess && n > 1) res = exchange(c, &xop, st, &f, slotOf, sb, rb);
        if (res == zipcclSuccess && two && zipcclDevRecord(c, &c->pieceEvent[3], xop.stream))
            res = zipcclDevFail(c, zipcclCollName(op->kind), "marking the exchange's end");
        /* piece p + 1's frames down and piece p + 2's encoder queued before
         * piece p's decode, so the next exchange need not wait for it */
        if (res == zipcclSuccess && p + 1 < K) res = prepare(c, op, st, &f, x, p + 1, K, &k, which, bytes[(p + 1) % 2]);
        if (res == zipcclSuccess && two && zdev_stream_wait_event(c->dev, op->stream, c->pieceEvent[3]))
            res = zipcclDevFail(c, zipcclCollName(op->kind), "ordering the decoder after the exchange");
        if (res == zipcclSuccess) res = decStart(c, op, st, &f, x, p, fb + p * (size_t)nd);
        for (int d = 0; d < x->nDec; d++) decoded |= hasPiece(x, x->decCount[d], p);
    }
    /* the one wait for every piece's decoding, then the verdicts */
    if (res == zipcclSuccess && dev && decoded && zdev_stream_sync(c->dev, op->stream))
        res = zipcclDevFail(c, zipcclCollName(op->kind), "waiting for the frames to be decoded");
    for (size_t p = 0; p < K && res == zipcclSuccess; p++) res = decEnd(c, op, &f, x, p, fb);
    free(fb);
    return res;
}

/* ---- AllGather coded on the device ------------------------------------------------- */

/* Rank r's block `mine` is compressed on the device (once, for every peer);
 * the frames' sizes are summed over the ranks (each adds its own at its
 * index); the frames are exchanged; all n are decoded into their blocks of
 * recvbuf, ours too (what a peer decodes of it, and no copy). */
static zipcclResult_t codedAllGather(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, const void* mine,
                                     const size_t* counts, const size_t* displs, void* recvbuf, double* size) {
    const int n = c->nranks, r = c->rank;
    const size_t esz = zipcclTypeSize(op->dtype), most = maxOf(counts, n);
    const char* src = mine;
    const int every = -1, zero = 0;
    int sent[n], slot[n], from[n];
    char* dst[n];
    for (int i = 0; i < n; i++) {
        sent[i] = i == r, slot[i] = i == r ? 0 : i, from[i] = i;
        dst[i] = (char*)recvbuf + displs[i] * esz;
    }
    st->rawBytes += (size_t)(n - 1) * counts[r] * esz;
    const Coded x = {.nEnc = 1, .encSrc = &src, .encCount = &counts[r], .encTo = &every, .encSlot = &zero,
                     .rows = 1, .nDec = n, .decSent = sent, .decSlot = slot, .decFrom = from, .decDst = dst,
                     .decCount = counts, .emptyFrames = 1, .piece = pieceElems(c, op, most, 0)};
    return runCoded(c, op, st, &x, most, size);
}

/* ---- ReduceScatter coded on the device --------------------------------------------- */

/* Each peer's block of sendbuf is compressed on the device into a frame of
 * its own; every rank's n sizes are summed over the ranks into the (n, n)
 * matrix `size` (row: sender), so each knows what it will receive; the
 * frames are exchanged; the received ones are decoded and added in the
 * canonical order (ranks r+1, ..., r-1, then our own block,
 * docs/COLLECTIVES.md §3) into an fp32 accumulator on the device, rounded
 * once into out: the bits of the host designs. */
static zipcclResult_t codedReduceScatter(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st,
                                         const char* sendbuf, const size_t* counts, const size_t* displs, void* out,
                                         double* size) {
    const int n = c->nranks, r = c->rank;
    const size_t esz = zipcclTypeSize(op->dtype), count = counts[r], most = maxOf(counts, n);
    float* acc = devScratch(c, kDevAcc, count * sizeof(float));
    if (!acc) return zipcclNoMemory(c, op, "d:the fp32 accumulator", count * sizeof(float));
    const size_t blk = count * esz; /* the n - 1 decoded blocks, in the canonical order */
    char* tmp = n > 1 ? devScratch(c, kDevTmp, (size_t)(n - 1) * blk) : NULL;
    if (n > 1 && !tmp) return zipcclNoMemory(c, op, "d:the decoded blocks", (size_t)(n - 1) * blk);
    const int m = n > 1 ? n - 1 : 1;
    const char* src[m];
    size_t ecnt[m], dcnt[m];
    int to[m], eslot[m], sent[m], dslot[m], from[m], k = 0;
    char* dst[m];
    for (int j = 0; j < n; j++) {
        if (j == r) continue;
        src[k] = sendbuf + displs[j] * esz, ecnt[k] = counts[j], eslot[k] = j, to[k] = j;
        st->rawBytes += counts[j] * esz;
        k++;
    }
    for (int d = 1; d < n; d++) { /* the d-th from rank r+d into decoded block d-1 */
        const int i = (r + d) % n;
        sent[d - 1] = 0, dslot[d - 1] = i, from[d - 1] = i, dcnt[d - 1] = count;
        dst[d - 1] = tmp + (size_t)(d - 1) * blk;
    }
    const Coded x = {.nEnc = n - 1, .encSrc = src, .encCount = ecnt, .encTo = to, .encSlot = eslot, .rows = n,
                     .nDec = n - 1, .decSent = sent, .decSlot = dslot, .decFrom = from, .decDst = dst,
                     .decCount = dcnt, .sum = 1, .own = sendbuf + displs[r] * esz, .acc = acc, .out = out,
                     .sumCount = count, .emptyFrames = 1, .piece = pieceElems(c, op, most, 0)};
    return runCoded(c, op, st, &x, most, size);
}

/* ---- the All-to-Alls coded on the device -------------------------------------------- */

/* Every non-empty block compressed on the device, ours too; the (n, n)
 * sizes summed; the frames exchanged; each received one (and ours) decoded
 * into its place in recvbuf.  An empty block has no frame.  In pieces
 * (not in place: piece p is decoded before piece p + 1 is encoded), sized
 * by the largest block of the call: AlltoAll's count, and for AlltoAllv
 * the largest any rank sends or receives, which the call agreement tells
 * every rank (zipcclAgreedMaxBlock; without one, NCCL's own communicators,
 * AlltoAllv goes in one piece). */
static zipcclResult_t codedAlltoAll(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, const size_t* sc,
                                    const size_t* sd, const size_t* rc, const size_t* rd, double* size) {
    const int n = c->nranks, r = c->rank;
    const size_t esz = zipcclTypeSize(op->dtype);
    size_t most = maxOf(sc, n) > maxOf(rc, n) ? maxOf(sc, n) : maxOf(rc, n);
    const int v = op->kind == zipcclCollAlltoAllv, inPlace = op->sendbuf == op->recvbuf;
    size_t all = most, pieces = 0; /* the largest block of every rank's */
    const int agreed = v && !inPlace && n > 1 && zipcclHostControl(c) && c->devPieceBytes;
    if (agreed) {
        ZIPCCL_TRY(zipcclAgreeWait(c));
        all = zipcclAgreedMaxBlock(c);
    }
    /* AlltoAllv's blocks change from call to call (an expert exchange's with
     * the routing): frames and workspace sized for the next power of two,
     * so a steady run stops growing them once a block near its largest has
     * passed (a grow is an allocation in the step) */
    if (v) most = pow2Ceil(most);
    const size_t piece = pieceElems(c, op, all, inPlace || (v && !agreed));
    if (agreed) pieces = all ? (all + piece - 1) / piece : 1;
    const char* src[n];
    size_t ecnt[n], dcnt[n];
    int to[n], eslot[n], sent[n], dslot[n], from[n], ke = 0, kd = 0;
    char* dst[n];
    for (int j = 0; j < n; j++) {
        if (!sc[j]) continue;
        src[ke] = (const char*)op->sendbuf + sd[j] * esz, ecnt[ke] = sc[j], eslot[ke] = j, to[ke] = j;
        if (j != r) st->rawBytes += sc[j] * esz;
        ke++;
    }
    for (int i = 0; i < n; i++) {
        if (!rc[i]) continue;
        sent[kd] = i == r, dslot[kd] = i, from[kd] = i, dcnt[kd] = rc[i];
        dst[kd] = (char*)op->recvbuf + rd[i] * esz;
        kd++;
    }
    const Coded x = {.nEnc = ke, .encSrc = src, .encCount = ecnt, .encTo = to, .encSlot = eslot, .rows = n,
                     .nDec = kd, .decSent = sent, .decSlot = dslot, .decFrom = from, .decDst = dst,
                     .decCount = dcnt, .emptyFrames = 0, .piece = piece, .pieces = pieces};
    return runCoded(c, op, st, &x, most, size);
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
        return coded ? codedAllGather(c, op, st, op->sendbuf, counts, displs, op->recvbuf, size)
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
            return codedAllGather(c, op, st, block, counts, displs, op->recvbuf, size);
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
