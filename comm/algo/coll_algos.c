/*
 * coll_algos.c — ZipCCL's own collective algorithms, each written once over
 * the messages of the transport table (transport.h: post a send or a
 * receive of a piece, test, withdraw), on host buffers, coding pieces with
 * the communicator's codec table (codec_ops.h; the CPU codec on them).
 * One code path serves two strategies: "raw" sends the
 * elements as they are, "compressed" sends each piece as a codec frame.
 * Everything else (pieces, message order, reduction order) is shared, which
 * is why compressed == raw bit for bit: the codec is lossless and the sums
 * see the same values in the same order.  docs/COLLECTIVES.md explains the
 * designs; the short version:
 *
 *   - Data moves in pieces (~4 ms of the link, 512 KiB-4 MiB, or
 *     ZIPCCL_PIECE_BYTES; coll.c sizeToLink); each piece is one
 *     message (one frame when compressed).  A call's receives are posted
 *     together, each with the largest size the piece can have
 *     (the codec's bound), so no size exchange is needed; the frame header
 *     (count, dtype) and the message tag (collective, piece index, last-piece
 *     flag) let the receiver verify what arrived.  Sends go out as soon as a
 *     piece is encoded and arrivals are decoded between encodes: the codec
 *     overlaps the wire.
 *   - The receives are posted once the call agreement (coll_agree.c) says
 *     every rank makes this same call (armRecvs): a peer that disagrees could
 *     send a message larger than the receive, which Open MPI's shared-memory
 *     transport writes past the receive's end.  Sends need not wait for it:
 *     a peer that disagrees posts no receive for them, so the first pieces go
 *     out while the descriptors travel.
 *   - Schedules keep one flow per link, since competing TCP flows through a
 *     shaped link lose much of its rate: AllGather is a ring that passes
 *     frames on unchanged, AlltoAll(v) a pairwise exchange with two steps
 *     in flight.  The one-shot AllGather/AllReduce gives that up for a
 *     single step (every rank to every peer at once), for small messages.
 *   - Reductions: block b is summed in fp32 in the canonical order
 *     b+1, b+2, ..., b+n-1, b (mod n) — the owner last — then divided by n
 *     for avg and rounded once to the dtype (round to nearest even).  Ring
 *     and direct produce exactly this order, so they agree bit for bit.
 *
 * Hierarchical designs (hier, two levels: raw within a node, frames between
 * nodes) run these bodies on groups of ranks; see their section below.
 *
 * Left out: fused AllReduce
 * (it runs ReduceScatter then AllGather), device buffers: NCCL runs designs
 * of its own (transport_nccl.c) until its transport has message entries.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_agree.h"
#include "coll_algos.h"
#include "comm_state.h"
#include "zipccl_float.h"

/* The reduction arithmetic is common.c's (zipcclAccumulate, zipcclFinalize),
 * shared with the host stand-in of a device (coll_run.c). */

/* ---- shared machinery ------------------------------------------------------ */

/* Scratch slots (coll.c keeps them per communicator, grown on demand):
 * 0 staged input (in-place AlltoAll), 1 request tables, 2 receive staging,
 * 3 send staging, 4 fp32 accumulators, 5 AllReduce's reduced block,
 * 6 decode temporary, 7 arrival flags. */
enum { kSlotInput = 0, kSlotReqs, kSlotRecv, kSlotSend, kSlotAcc, kSlotBlock, kSlotTmp, kSlotFlags };

/* Tags: collective kind in bits 20..22, last-piece flag in bit 19, piece (or
 * step*pieces+piece on the ring) in bits 0..18.  AlltoAllv's messages also
 * carry the sender's size word in bits 23..28 where the tag bound allows
 * (c->tagSizes): 1 + the size bucket of all the bytes it sends in the call,
 * so every rank learns every rank's bucket from the messages it receives
 * anyway, and auto needs no extra collective to notice that the largest
 * one has moved (switcher.c, a2avTotal).  Open MPI's tag bound is 2^31-1;
 * the transport's init checks it. */
#define TAG_LAST (1 << 19)
#define TAG_SIZE_SHIFT 23
#define TAG_CORE_MASK ((1 << TAG_SIZE_SHIFT) - 1)
#define TAG_INDEX_MAX ((size_t)1 << 19)
#define TAG_BAD_INDEX (TAG_INDEX_MAX - 1) /* a poisoned piece passed on (AllGather ring) */

typedef struct {
    void* buf;     /* where the message lands                               */
    size_t bytes;  /* its size once arrived                                 */
    int peer, step;
    size_t piece;
    size_t cap;    /* the receive's size, and its tag, for armRecvs          */
    int tag;
} RecvRec;

typedef struct {
    struct zipcclComm* c;
    const zipcclOp* op;
    zipcclExecStats* st;
    const char* what;
    int compressed; /* our messages are codec frames                        */
    const zipcclCodecOps* codec; /* the communicator's (c->codec)            */
    zipcclCodecCtx codecCtx;     /* what a device codec needs; unused on the CPU */
    int sizeWord;   /* AlltoAllv: the largest size word seen (ours included) */
    zipcclCodecParams_t params;
    double t0;
    int armed;      /* the receives are posted (the call agreement is in)   */
    /* The ranks the body runs among: x->n of them, we are x->r, peer i is
     * rank map[i] of the communicator (map NULL: all ranks, i itself).  The
     * hier designs run the flat bodies on groups: one node's ranks, or the
     * ranks of one local index across the nodes.  Peers the bodies name
     * (postRecv, postSend, RecvRec.peer) are group indices. */
    int n, r;
    const int* map;
    /* hier All-to-Alls: frames only to and from other nodes (peerWire);
     * `coded` is the call's strategy, `compressed` the current peer's. */
    int intraRaw, coded;
    /* Outstanding requests: receives first (all listed before any send),
     * then sends. */
    void* reqs;     /* the transport's request slots                        */
    int nrecv, nsend, cap;
    int* peerOf;
    int* idx;
    zipcclTpStatus* stats;
    RecvRec* rec;
    /* The first data error (mismatch, corrupt frame).  The call carries on
     * with its sends and receives so no peer is left waiting on us, then
     * reports it. */
    zipcclResult_t soft;
    char softDetail[400];
} Ctx;

/* Record a data error; returns 1 if `res` is one (the caller skips the item). */
static int softFail(Ctx* x, zipcclResult_t res) {
    if (res == zipcclSuccess) return 0;
    if (x->soft == zipcclSuccess) {
        x->soft = res;
        snprintf(x->softDetail, sizeof x->softDetail, "%s", zipcclGetLastErrorDetail());
    }
    return 1;
}

static size_t pieceElems(const struct zipcclComm* c, size_t wireEsz) {
    size_t p = c->pieceBytes / wireEsz;
    p &= ~(size_t)16383; /* whole codec chunks (FORMAT.md: C = 2^14) */
    return p ? p : 16384;
}
static size_t numPieces(size_t count, size_t P) { return (count + P - 1) / P; }
static size_t pieceLen(size_t count, size_t P, size_t k) {
    return (k + 1) * P <= count ? P : count - k * P;
}
static int makeTag(zipcclCollKind_t kind, size_t index, int last) {
    return ((int)kind << 20) | (last ? TAG_LAST : 0) | (int)index;
}
static size_t wireCap(const Ctx* x, size_t count, zipcclDataType_t dt) {
    return x->compressed ? x->codec->bound(count, dt, 0) : count * zipcclTypeSize(dt);
}
/* Bytes needed to stage all pieces of `count` elements. */
static size_t stageFor(const Ctx* x, size_t count, size_t P, zipcclDataType_t dt) {
    size_t K = numPieces(count, P), b = 0;
    for (size_t k = 0; k < K; k++) b += wireCap(x, pieceLen(count, P, k), dt);
    return b;
}

static zipcclResult_t oom(const Ctx* x) {
    return zipcclSetError(zipcclSystemError, "%s: out of memory for staging buffers", x->what);
}

static zipcclResult_t ctxInit(Ctx* x, struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st,
                              size_t maxReqs) {
    memset(x, 0, sizeof *x);
    x->c = c;
    x->op = op;
    x->st = st;
    x->what = zipcclCollName(op->kind);
    x->compressed = x->coded = st->strategy == zipcclStrategyCompressed;
    x->codec = c->codec;
    x->codecCtx.stream = op->stream;
    zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
    p.codec = st->codec;
    x->params = p;
    x->t0 = zipcclNow();
    if (maxReqs > (size_t)1 << 28) return zipcclSetError(zipcclUnsupported, "%s: too many pieces", x->what);
    x->cap = (int)maxReqs;
    size_t m = maxReqs + 1;
    const size_t rsz = (c->tp->reqSize + 7) & ~(size_t)7; /* keeps what follows aligned */
    size_t per = sizeof(RecvRec) + sizeof(zipcclTpStatus) + rsz + 2 * sizeof(int);
    char* mem = zipcclScratch(c, kSlotReqs, m * per);
    if (!mem) return oom(x);
    x->rec = (RecvRec*)mem;
    x->stats = (zipcclTpStatus*)(x->rec + m);
    x->reqs = x->stats + m;
    x->peerOf = (int*)((char*)x->reqs + m * rsz);
    c->tp->reqInit(x->reqs, (int)m);
    x->idx = x->peerOf + m;
    x->armed = !c->agree.pending;
    x->n = c->nranks;
    x->r = c->rank;
    return zipcclSuccess;
}

static int rankOf(const Ctx* x, int i) { return x->map ? x->map[i] : i; }

/* Before coding for, or taking from, group peer `peer`: whether its
 * messages are frames.  Only the hier All-to-Alls mix them: raw within our
 * node, frames to and from other nodes. */
static void peerWire(Ctx* x, int peer) {
    if (!x->intraRaw) return;
    const struct zipcclComm* c = x->c;
    const int k = c->nodeSize > 0 ? c->nodeSize : 1;
    x->compressed = x->coded && rankOf(x, peer) / k != c->rank / k;
}

/* List a receive; it is posted at once if the call agreement is in, else
 * by armRecvs when it is. */
static zipcclResult_t postRecv(Ctx* x, void* buf, size_t cap, int src, int tag, int step,
                               size_t piece) {
    if (x->nrecv + x->nsend >= x->cap)
        return zipcclSetError(zipcclInternalError, "%s: request table full", x->what);
    int i = x->nrecv++;
    x->peerOf[i] = rankOf(x, src);
    x->rec[i] = (RecvRec){buf, 0, src, step, piece, cap, tag};
    if (!x->armed) return zipcclSuccess;
    return x->c->tp->irecv(x->c, zipcclChanData, buf, cap, x->peerOf[i], tag, x->reqs, i);
}

/* The call agreement is in and every rank makes this call: post the listed
 * receives, in their order (messages from one peer match them in it). */
static zipcclResult_t armRecvs(Ctx* x) {
    x->armed = 1;
    for (int i = 0; i < x->nrecv; i++) {
        const RecvRec* rc = &x->rec[i];
        ZIPCCL_TRY(x->c->tp->irecv(x->c, zipcclChanData, rc->buf, rc->cap, x->peerOf[i], rc->tag, x->reqs, i));
    }
    return zipcclSuccess;
}

/* Before any receive is posted: whether the agreement is in (then post
 * them), waiting for it with `block`.  *ready = 0 if not yet. */
static zipcclResult_t armWhenAgreed(Ctx* x, int block, int* ready) {
    *ready = 1;
    if (x->armed) return zipcclSuccess;
    if (block) ZIPCCL_TRY(zipcclAgreeWait(x->c));
    else {
        ZIPCCL_TRY(zipcclAgreeTest(x->c, ready));
        if (!*ready) return zipcclSuccess;
    }
    return armRecvs(x);
}

/* The peers of our requests [from, to) still pending, as "rank 3" /
 * "ranks 1-2" (for slow-wait warnings and timeouts). */
static void pendingPeers(Ctx* x, int from, int to, char* out, size_t cap) {
    const int n = x->c->nranks;
    char flags[n];
    memset(flags, 0, sizeof flags);
    for (int i = from; i < to; i++)
        if (x->c->tp->reqActive(x->reqs, i)) flags[x->peerOf[i]] = 1;
    zipcclRankList(out, cap, flags, n);
}

static zipcclResult_t postSend(Ctx* x, const void* buf, size_t bytes, int dst, int tag) {
    if (x->nrecv + x->nsend >= x->cap)
        return zipcclSetError(zipcclInternalError, "%s: request table full", x->what);
    int i = x->nrecv + x->nsend++;
    const struct zipcclComm* c = x->c;
    dst = rankOf(x, dst);
    x->peerOf[i] = dst;
    x->st->wireBytes += bytes;
    if (c->nodeSize > 0 && dst / c->nodeSize == c->rank / c->nodeSize) x->st->intraBytes += bytes;
    return x->c->tp->isend(x->c, zipcclChanData, buf, bytes, dst, tag, x->reqs, i);
}

/* Complete some receives: with `block`, wait (up to the deadline) until at
 * least one arrives or none is left; otherwise only test.  *n gets how many
 * completed; their indices are in x->idx, statuses in x->stats. */
static zipcclResult_t pollRecvs(Ctx* x, int block, int* n) {
    double t0 = zipcclNow(), note = zipcclFirstNote(x->c); /* idle time: resets at every arrival */
    *n = 0;
    int ready = 0;
    ZIPCCL_TRY(armWhenAgreed(x, block, &ready));
    if (!ready) return zipcclSuccess;
    for (;;) {
        const zipcclTransport* tp = x->c->tp;
        int out = 0;
        ZIPCCL_TRY(tp->testSome(x->c, x->reqs, x->nrecv, &out, x->idx, x->stats));
        if (out < 0) break; /* nothing left to receive */
        int kept = 0;
        for (int k = 0; k < out; k++) {
            /* A truncated message (a peer sent more than we expect) is a
             * data error: drop it from the completed list and carry on. */
            if (x->stats[k].truncated) {
                softFail(x, zipcclSetError(zipcclMismatch, "%s on rank %d: rank %d sent more data than this rank "
                                           "expects (ranks disagree on counts, dtype or the collective called)",
                                           x->what, x->c->rank, x->stats[k].peer));
                x->rec[x->idx[k]].bytes = (size_t)-1;
                continue;
            }
            x->idx[kept] = x->idx[k];
            x->stats[kept++] = x->stats[k];
        }
        if (out > 0 && !kept && block) continue;
        out = kept;
        if (x->nsend) { /* lets the transport retire finished sends */
            int f;
            ZIPCCL_TRY(tp->testAll(x->c, zipcclSlot(x->c, x->reqs, x->nrecv), x->nsend, &f));
        }
        if (out > 0 || !block) { *n = out; break; }
        double now = zipcclNow(), waited = now - x->t0;
        if (x->c->timeoutS > 0 && waited > x->c->timeoutS) {
            char who[200];
            pendingPeers(x, 0, x->nrecv, who, sizeof who);
            x->st->wireSeconds += now - t0;
            return zipcclSetError(zipcclTimeout,
                                  "%s on rank %d: timed out after %.1f s (ZIPCCL_TIMEOUT_S) waiting "
                                  "for data from %s",
                                  x->what, x->c->rank, waited, who);
        }
        if (now - t0 > note) {
            char who[200], query[300];
            pendingPeers(x, 0, x->nrecv, who, sizeof who);
            zipcclQueryPeers(x->c, query, sizeof query);
            fprintf(stderr, "zipccl: rank %d: %s still waiting after %.1f s (timeout %g s) for data from %s; %s\n",
                    x->c->rank, x->what, now - t0, x->c->timeoutS, who, query);
            note *= 2;
        }
        zipcclIdle(x->c, now - t0);
    }
    x->st->wireSeconds += zipcclNow() - t0;
    return zipcclSuccess;
}

/* After a timeout: the peer of the first of our sends [from, nsend) still
 * incomplete, -1 if none is (testAll may complete none when it
 * returns false, so each is tested alone). */
static int stuckSendPeer(Ctx* x, int from) {
    for (int i = x->nrecv + from; i < x->nrecv + x->nsend; i++) {
        int done = 0;
        x->c->tp->test(x->c, x->reqs, i, &done);
        if (!done) return x->peerOf[i];
    }
    return -1;
}

/* Our sends from `from` on did not complete within ZIPCCL_TIMEOUT_S.  A peer
 * that found a mismatch may have withdrawn the receives they were for; then
 * the mismatch we saw ourselves, if any, is the error to report: it says
 * what went wrong, the timeout only how long it took.  Before the call
 * agreement is in, what it waits for is the cause (zipcclAgreeWait then
 * times out at once, naming the ranks that never entered the call). */
static zipcclResult_t sendsTimedOut(Ctx* x, int from) {
    if (!x->armed) {
        ZIPCCL_TRY(zipcclAgreeWait(x->c));
        ZIPCCL_TRY(armRecvs(x));
    }
    int who = stuckSendPeer(x, from);
    double waited = zipcclNow() - x->t0;
    if (x->soft != zipcclSuccess)
        return zipcclSetError(x->soft, "%s; then timed out after %.1f s (ZIPCCL_TIMEOUT_S) waiting for rank %d "
                              "to take its sends", x->softDetail, waited, who);
    return zipcclSetError(zipcclTimeout, "%s on rank %d: timed out after %.1f s (ZIPCCL_TIMEOUT_S) waiting for "
                          "rank %d to take its sends", x->what, x->c->rank, waited, who);
}

static zipcclResult_t waitSends(Ctx* x, int lim, int* doneTo, int* got);

/* The end of every body: wait for our sends, then report a data error. */
static zipcclResult_t finishSends(Ctx* x) {
    int doneTo = 0, got = 0;
    ZIPCCL_TRY(waitSends(x, x->nsend, &doneTo, &got)); /* every receive is in: got stays 0 */
    if (x->soft != zipcclSuccess) return zipcclSetError(x->soft, "%s", x->softDetail);
    return zipcclSuccess;
}

/* After a failure: withdraw what we posted so nothing lands in the caller's
 * buffers later.  Receives are cancelled; sends cannot be, so their buffers
 * (the communicator's scratch) are kept and coll.c marks the communicator
 * broken.  A receive that a stopped peer's message has already matched
 * cannot be cancelled either: they get a second together, then the
 * transport finishes them alone, so a timeout is not prolonged until that
 * peer resumes (transport_mpi.c, mpiAbandon). */
static void ctxAbandon(Ctx* x) { x->c->tp->abandon(x->c, x->reqs, x->nrecv, x->nsend); }

static zipcclResult_t encode(Ctx* x, const void* src, size_t count, zipcclDataType_t dt, void* dst,
                             size_t cap, size_t* size) {
    double t0 = zipcclNow();
    zipcclResult_t r = x->codec->compress(&x->codecCtx, src, count, dt, dst, cap, size, &x->params);
    x->st->codecSeconds += zipcclNow() - t0;
    if (r != zipcclSuccess) return zipcclPrefixError(r, "%s on rank %d: compressing a piece of %zu %s elements",
                                                     x->what, x->c->rank, count, zipcclTypeName(dt));
    return zipcclSuccess;
}

/* What a piece of count elements at src goes out as: as it is, or
 * (compressed) a frame encoded into stage + *stageOff, which then advances
 * by the frame bound (the staging must outlive the send); *src then points
 * at the frame and *bytes is its size. */
static zipcclResult_t stagePiece(Ctx* x, const void** src, size_t count, zipcclDataType_t dt, char* stage,
                                 size_t* stageOff, size_t* bytes) {
    *bytes = count * zipcclTypeSize(dt);
    x->st->rawBytes += *bytes;
    if (!x->compressed) return zipcclSuccess;
    size_t cap = x->codec->bound(count, dt, 0);
    ZIPCCL_TRY(encode(x, *src, count, dt, stage + *stageOff, cap, bytes));
    *src = stage + *stageOff;
    *stageOff += cap;
    return zipcclSuccess;
}

/* Send `count` elements at src as one message (stagePiece, then postSend). */
static zipcclResult_t sendPiece(Ctx* x, const void* src, size_t count, zipcclDataType_t dt, char* stage,
                                size_t* stageOff, int dst, int tag) {
    size_t bytes = 0;
    ZIPCCL_TRY(stagePiece(x, &src, count, dt, stage, stageOff, &bytes));
    return postSend(x, src, bytes, dst, tag);
}

/* Pacing of the all-to-all exchanges (AlltoAll(v), direct ReduceScatter)
 * before their next send: wait until sends 0..lim-1 have completed, and on
 * a communicator with a2aInflight = Q > 0 all but the last Q-1 of them
 * (*doneTo are known to have completed).  Returns early with *got > 0 when
 * receives complete meanwhile, for the caller to take before it calls
 * again; *got == 0 means the sends are done.  Deadline as in pollRecvs; the
 * time waited counts as wire time. */
static zipcclResult_t waitSends(Ctx* x, int lim, int* doneTo, int* got) {
    struct zipcclComm* c = x->c;
    const int Q = c->a2aInflight;
    if (Q > 0 && x->nsend - Q + 1 > lim) lim = x->nsend - Q + 1;
    *got = 0;
    if (lim <= *doneTo) return zipcclSuccess;
    double w0 = zipcclNow(), note = zipcclFirstNote(c);
    while (lim > *doneTo) {
        int done = 0;
        ZIPCCL_TRY(c->tp->testAll(c, zipcclSlot(c, x->reqs, x->nrecv + *doneTo), lim - *doneTo, &done));
        if (done) {
            *doneTo = lim;
            break;
        }
        ZIPCCL_TRY(pollRecvs(x, 0, got));
        if (*got) break;
        double now = zipcclNow();
        if (c->timeoutS > 0 && now - x->t0 > c->timeoutS) return sendsTimedOut(x, *doneTo);
        if (now - w0 > note) {
            char who[200], query[300];
            for (int i = x->nrecv + *doneTo; i < x->nrecv + lim; i++) { /* retire the done ones (Testall did not) */
                int done = 0;
                c->tp->test(c, x->reqs, i, &done);
            }
            pendingPeers(x, x->nrecv + *doneTo, x->nrecv + lim, who, sizeof who);
            zipcclQueryPeers(c, query, sizeof query);
            fprintf(stderr, "zipccl: rank %d: %s still waiting after %.1f s (timeout %g s) for %s to take its "
                    "sends; %s\n", c->rank, x->what, now - w0, c->timeoutS, who, query);
            note *= 2;
        }
        zipcclIdle(c, now - w0);
    }
    x->st->wireSeconds += zipcclNow() - w0;
    return zipcclSuccess;
}

/* Check a completed receive (status g) against what the algorithm expects:
 * the tag (collective, piece, last flag) and, raw, the exact size.  Ranks
 * that disagree on the call are stopped by the call agreement before any
 * receive is posted, so what fails here is a damaged message (or a bug);
 * it is still zipcclMismatch naming the peer, and the call completes its
 * protocol before reporting it. */
static zipcclResult_t verify(Ctx* x, int g, int expectTag, size_t count, zipcclDataType_t dt) {
    const zipcclTpStatus* s = &x->stats[g];
    RecvRec* rc = &x->rec[x->idx[g]];
    const size_t bytes = s->bytes;
    rc->bytes = bytes;
    const int tag = s->tag;
    if (tag != expectTag && (tag & TAG_LAST) && !(expectTag & TAG_LAST)) {
        /* The peer has no more pieces for us than this one: withdraw the
         * receives still waiting for it, or we would wait for the timeout. */
        for (int i = 0; i < x->nrecv; i++)
            if (x->peerOf[i] == s->peer) x->c->tp->abandon(x->c, zipcclSlot(x->c, x->reqs, i), 1, 0);
    }
    if (tag != expectTag && (tag & (int)TAG_BAD_INDEX) == (int)TAG_BAD_INDEX)
        return zipcclSetError(zipcclMismatch,
                              "%s on rank %d: rank %d passed on a piece that failed verification "
                              "upstream",
                              x->what, x->c->rank, s->peer);
    if (tag != expectTag)
        return zipcclSetError(zipcclMismatch,
                              "%s on rank %d: rank %d sent a message tagged 0x%x where 0x%x was "
                              "expected",
                              x->what, x->c->rank, s->peer, (unsigned)tag,
                              (unsigned)expectTag);
    if (!x->compressed && bytes != count * zipcclTypeSize(dt))
        return zipcclSetError(zipcclMismatch,
                              "%s on rank %d: rank %d sent a piece of %zu bytes where %zu bytes (%zu %s "
                              "elements) were expected",
                              x->what, x->c->rank, s->peer, bytes, count * zipcclTypeSize(dt), count,
                              zipcclTypeName(dt));
    return zipcclSuccess;
}

/* Decode an arrived message into dst (compressed: check the frame's
 * count/dtype, then decompress; raw: copy unless it already landed at dst).
 * The header is read here on the host; a device codec's frames are in
 * device memory, and there the decoder's own checks (the dtype, the
 * capacity, the count it returns) stand in for it. */
static zipcclResult_t decode(Ctx* x, const RecvRec* rc, void* dst, size_t count,
                             zipcclDataType_t dt) {
    size_t esz = zipcclTypeSize(dt);
    if (!x->compressed) {
        if (rc->buf != dst && count) memcpy(dst, rc->buf, count * esz);
        return zipcclSuccess;
    }
    zipcclResult_t r = zipcclSuccess;
    if (!x->codec->device) {
        zipcclFrameInfo_t fi;
        memset(&fi, 0, sizeof fi);
        r = zipcclGetFrameInfo(rc->buf, rc->bytes, &fi);
        if (r == zipcclSuccess && (fi.count != count || fi.dtype != dt))
            return zipcclSetError(zipcclMismatch,
                                  "%s on rank %d: rank %d sent a frame of %llu %s elements where %zu %s "
                                  "elements were expected",
                                  x->what, x->c->rank, rankOf(x, rc->peer), (unsigned long long)fi.count,
                                  zipcclTypeName(fi.dtype), count, zipcclTypeName(dt));
    }
    double t0 = zipcclNow();
    size_t got = 0;
    if (r == zipcclSuccess) r = x->codec->decompress(&x->codecCtx, rc->buf, rc->bytes, dst, count * esz, &got, dt, NULL);
    x->st->codecSeconds += zipcclNow() - t0;
    if (r != zipcclSuccess)
        return zipcclPrefixError(r, "%s on rank %d: the %zu-byte frame from rank %d", x->what, x->c->rank,
                                 rc->bytes, rankOf(x, rc->peer));
    if (got != count) /* a device frame of fewer elements (the header check catches it on the host) */
        return zipcclSetError(zipcclMismatch, "%s on rank %d: rank %d sent a frame of %zu elements where %zu "
                              "were expected", x->what, x->c->rank, rankOf(x, rc->peer), got, count);
    return zipcclSuccess;
}

#define TRY_OR_ABANDON(x, call)                      \
    do {                                             \
        zipcclResult_t res_ = (call);                \
        if (res_ != zipcclSuccess) {                 \
            ctxAbandon(x);                           \
            return res_;                             \
        }                                            \
    } while (0)

/* ---- AllGather (variable block sizes, so AllReduce can reuse it) ----------- */

/* A ring: block b (counts[b] elements at displs[b] of recvbuf) comes from
 * rank b.  At step s = 0..n-2 rank r sends block r-s to r+1 and receives
 * block r-s-1 from r-1, so every link carries one flow (a token-bucket
 * shaped link loses most of its rate to competing flows).  Each rank encodes
 * its own block once; what arrives is forwarded as the bytes that arrived
 * (frames are never re-encoded) and decoded into recvbuf alongside.
 *
 * All messages from r-1 match our receives in posting order (MPI keeps the
 * order per source), so we must send to r+1 in the same (step, piece) order:
 * own pieces first, then arrivals strictly in receive order.  A piece that
 * failed verification is replaced by a poison message (tag index
 * TAG_BAD_INDEX), so every rank downstream also reports the mismatch and no
 * rank waits for a message that will not come. */
static zipcclResult_t allGatherBody(Ctx* x, const void* mine, void* recvbuf, const size_t* counts,
                                    const size_t* displs) {
    struct zipcclComm* c = x->c;
    const int n = x->n, r = x->r, left = (r - 1 + n) % n, right = (r + 1) % n;
    const zipcclDataType_t dt = x->op->dtype;
    const zipcclCollKind_t kind = x->op->kind;
    const size_t esz = zipcclTypeSize(dt), P = pieceElems(c, esz);
    char* out = recvbuf;
    char* myBlock = out + displs[r] * esz;
#define SHARD_AT(s) ((r - (s) - 1 + 2 * n) % n) /* block received at step s */

    if (n == 1) {
        if (mine != myBlock) memmove(myBlock, mine, counts[r] * esz);
        return zipcclSuccess;
    }
    size_t recvStage = 0;
    for (int s = 0; s < n; s++)
        if (s != r && x->compressed) recvStage += stageFor(x, counts[s], P, dt);
    char* rstage = x->compressed ? zipcclScratch(c, kSlotRecv, recvStage + 1) : NULL;
    char* sstage = x->compressed ? zipcclScratch(c, kSlotSend, stageFor(x, counts[r], P, dt) + 1) : NULL;
    if (x->compressed && (!rstage || !sstage)) return oom(x);

    /* Every receive comes from r-1, in step order. */
    size_t off = 0;
    int fwdEnd = 0; /* receives of steps 0..n-3 are passed on */
    for (int s = 0; s < n - 1; s++) {
        int b = SHARD_AT(s);
        if (s == n - 2) fwdEnd = x->nrecv;
        for (size_t k = 0, K = numPieces(counts[b], P); k < K; k++) {
            size_t cap = wireCap(x, pieceLen(counts[b], P, k), dt);
            void* buf = x->compressed ? rstage + off : out + (displs[b] + k * P) * esz;
            ZIPCCL_TRY(postRecv(x, buf, cap, left, ZIPCCL_ANY_TAG, s, k));
            if (x->compressed) off += cap;
        }
    }
    /* state[i] of receive i: 0 pending, 1 verified and decoded, 2 bad. */
    char* state = zipcclScratch(c, kSlotFlags, (size_t)x->nrecv + 1);
    if (!state) return oom(x);
    memset(state, 0, (size_t)x->nrecv);

    const size_t K = numPieces(counts[r], P);
    size_t soff = 0;
    int fwd = 0;
    for (size_t k = 0; k <= K; k++) {
        if (k < K) {
            size_t pc = pieceLen(counts[r], P, k);
            const char* own = (const char*)mine + k * P * esz;
            ZIPCCL_TRY(sendPiece(x, own, pc, dt, sstage, &soff, right, makeTag(kind, k, k + 1 == K)));
            /* Our own block goes into place piece by piece once the piece is
             * on its way, not all before the first send (64 MiB of memmove
             * would delay the whole ring by ~20 ms). */
            if (own != myBlock + k * P * esz) memmove(myBlock + k * P * esz, own, pc * esz);
        }
        /* After our own pieces: pass arrivals on, then wait for the next,
         * until every receive is in. */
        int got = 0, drained = 0;
        do {
            /* Pass arrivals on in receive order once our own pieces are out;
             * when nothing is left to receive, what never arrived
             * (truncated, withdrawn) goes on as poison. */
            while (k == K && fwd < fwdEnd && (state[fwd] || drained)) {
                const RecvRec* rc = &x->rec[fwd];
                int b = SHARD_AT(rc->step);
                size_t Kb = numPieces(counts[b], P);
                if (state[fwd] == 1) {
                    x->st->rawBytes += pieceLen(counts[b], P, rc->piece) * esz;
                    ZIPCCL_TRY(postSend(x, rc->buf, rc->bytes, right,
                                        makeTag(kind, rc->piece, rc->piece + 1 == Kb)));
                } else {
                    ZIPCCL_TRY(postSend(x, rc->buf, 0, right, makeTag(kind, TAG_BAD_INDEX, 0)));
                }
                fwd++;
            }
            if (drained) break;
            ZIPCCL_TRY(pollRecvs(x, k == K, &got));
            for (int g = 0; g < got; g++) {
                const RecvRec* rc = &x->rec[x->idx[g]];
                int b = SHARD_AT(rc->step);
                size_t Kb = numPieces(counts[b], P), pc = pieceLen(counts[b], P, rc->piece);
                int bad = softFail(x, verify(x, g, makeTag(kind, rc->piece, rc->piece + 1 == Kb), pc, dt));
                if (!bad) bad = softFail(x, decode(x, rc, out + (displs[b] + rc->piece * P) * esz, pc, dt));
                state[x->idx[g]] = bad ? 2 : 1;
            }
            if (k == K && got == 0) drained = 1;
        } while (k == K);
    }
#undef SHARD_AT
    return finishSends(x);
}

/* The ring among a group of ranks (map: see Ctx; NULL all of them), as
 * frames unless `raw`. */
static zipcclResult_t groupAllGather(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st,
                                     const int* map, int n, int r, int raw, const void* mine, void* recvbuf,
                                     const size_t* counts, const size_t* displs) {
    size_t P = pieceElems(c, zipcclTypeSize(op->dtype)), reqs = 1;
    for (int s = 0; s < n; s++) {
        size_t K = numPieces(counts[s], P);
        if (K >= TAG_BAD_INDEX)
            return zipcclSetError(zipcclUnsupported, "%s: %zu elements per rank make %zu pieces, more than the "
                                  "message tags can number (%zu); use native or larger ZIPCCL_PIECE_BYTES",
                                  zipcclCollName(op->kind), counts[s], K, (size_t)TAG_BAD_INDEX - 1);
        reqs += 2 * K; /* received once, sent once (own block: sent only) */
    }
    Ctx x;
    ZIPCCL_TRY(ctxInit(&x, c, op, st, reqs));
    x.map = map, x.n = n, x.r = r;
    x.compressed = x.compressed && !raw;
    TRY_OR_ABANDON(&x, allGatherBody(&x, mine, recvbuf, counts, displs));
    return zipcclSuccess;
}

static zipcclResult_t allGatherCore(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st,
                                    const void* mine, void* recvbuf, const size_t* counts,
                                    const size_t* displs) {
    return groupAllGather(c, op, st, NULL, c->nranks, c->rank, 0, mine, recvbuf, counts, displs);
}

/* ---- AlltoAll(v) ------------------------------------------------------------ */

/* Verify and decode the receives pollRecvs just completed. */
static void alltoallTake(Ctx* x, int got, char* recvbuf, const size_t* recvcounts,
                         const size_t* rdispls, int minOne, size_t P) {
    const zipcclDataType_t dt = x->op->dtype;
    const size_t esz = zipcclTypeSize(dt);
    for (int g = 0; g < got; g++) {
        const RecvRec* rc = &x->rec[x->idx[g]];
        const int word = x->stats[g].tag >> TAG_SIZE_SHIFT;
        if (word > x->sizeWord) x->sizeWord = word;
        x->stats[g].tag &= TAG_CORE_MASK;
        peerWire(x, rc->peer);
        size_t cnt = recvcounts[rc->peer], Ks = minOne && cnt == 0 ? 1 : numPieces(cnt, P);
        size_t pcs = pieceLen(cnt, P, rc->piece);
        if (softFail(x, verify(x, g, makeTag(x->op->kind, rc->piece, rc->piece + 1 == Ks), pcs, dt))) continue;
        softFail(x, decode(x, rc, recvbuf + (rdispls[rc->peer] + rc->piece * P) * esz, pcs, dt));
    }
}

/* Pairwise exchange: at step j = 1..n-1 rank r sends its block for r+j and
 * receives the block of r-j, so a link carries one or two flows, not n-1.
 * The sends of step j are posted once those of step j-W have completed, and
 * on slow links each piece's send once all but a2aInflight - 1 earlier ones
 * have (so one flow per link but where steps meet); every piece is encoded
 * before its wait, so the codec overlaps the wire, and arrivals are decoded
 * while we wait.  Receives are posted up
 * front with bounds from recvcounts; only senders start flows, so that does
 * not add competing ones.  AlltoAllv always sends at least one (possibly
 * empty) message per pair, so a receiver can tell a peer's count from its
 * own expectation even when one of them is 0. */
static zipcclResult_t alltoallBody(Ctx* x, const char* sendbuf, const size_t* sendcounts,
                                   const size_t* sdispls, char* recvbuf, const size_t* recvcounts,
                                   const size_t* rdispls, int minOne) {
    struct zipcclComm* c = x->c;
    const int n = x->n, r = x->r;
    const zipcclDataType_t dt = x->op->dtype;
    const zipcclCollKind_t kind = x->op->kind;
    const size_t esz = zipcclTypeSize(dt), P = pieceElems(c, esz);
#define KOF(cnt) (minOne && (cnt) == 0 ? 1 : numPieces((cnt), P))

    /* Frames arrive in staging; raw messages land in recvbuf directly. */
    int staged = 0;
    size_t recvStage = 0, sendStage = 0;
    for (int s = 0; s < n; s++) {
        peerWire(x, s);
        if (s == r || !x->compressed) continue;
        staged = 1;
        recvStage += recvcounts[s] ? stageFor(x, recvcounts[s], P, dt) : wireCap(x, 0, dt);
        sendStage += sendcounts[s] ? stageFor(x, sendcounts[s], P, dt) : wireCap(x, 0, dt);
    }
    char* rstage = staged ? zipcclScratch(c, kSlotRecv, recvStage + 1) : NULL;
    char* sstage = staged ? zipcclScratch(c, kSlotSend, sendStage + 1) : NULL;
    if (staged && (!rstage || !sstage)) return oom(x);

    size_t off = 0;
    for (int j = 1; j < n; j++) {
        int s = (r - j + n) % n;
        peerWire(x, s);
        for (size_t k = 0, K = KOF(recvcounts[s]); k < K; k++) {
            size_t cap = wireCap(x, pieceLen(recvcounts[s], P, k), dt);
            void* buf = x->compressed ? rstage + off : recvbuf + (rdispls[s] + k * P) * esz;
            ZIPCCL_TRY(postRecv(x, buf, cap, s, ZIPCCL_ANY_TAG, j, k));
            if (x->compressed) off += cap;
        }
    }
    /* Our own block is copied once the first step's sends are out, so the
     * copy (24 MiB in the benchmark's AlltoAllv) does not delay the wire. */
    const int copySelf = sendcounts[r] == recvcounts[r] && sendcounts[r] > 0;
    char* selfDst = recvbuf + rdispls[r] * esz;
    const char* selfSrc = sendbuf + sdispls[r] * esz;
    if (sendcounts[r] != recvcounts[r])
        softFail(x, zipcclSetError(zipcclMismatch, "%s on rank %d: sendcounts[%d] is %zu elements but "
                                   "recvcounts[%d] is %zu", x->what, r, r, sendcounts[r], r, recvcounts[r]));
    if (n == 1 && copySelf) memmove(selfDst, selfSrc, sendcounts[r] * esz);

    /* AlltoAllv: our size word goes on every message (see TAG_SIZE_SHIFT). */
    int sizeTag = 0;
    if (kind == zipcclCollAlltoAllv && c->tagSizes) {
        x->sizeWord = zipcclSizeBucket(zipcclA2avSendBytes(sendcounts, n, esz)) + 1;
        sizeTag = x->sizeWord << TAG_SIZE_SHIFT;
    }

    size_t soff = 0;
    /* Step j starts once the sends of step j-W are done (W = a2aWindow,
     * ZIPCCL_A2A_WINDOW, default 2): two steps in flight measured faster
     * than one on the emulated 1 Gbit/s cluster (AlltoAll 64 MiB bf16, 4
     * ranks, raw: 0.58 s vs 0.69 s; all steps at once 0.67 s), since the
     * next step's handshake then hides under the current step's tail. */
    const int W = c->a2aWindow < n ? c->a2aWindow : n;
    int ends[n + 1]; /* x->nsend after step j, by j % (W + 1) */
    memset(ends, 0, sizeof ends);
    int doneTo = 0; /* sends 0..doneTo-1 are known complete */
    for (int j = 1; j < n; j++) {
        int d = (r + j) % n, stepLim = j - W >= 1 ? ends[(j - W) % (W + 1)] : 0;
        for (size_t k = 0, K = KOF(sendcounts[d]); k < K; k++) {
            const void* src = sendbuf + (sdispls[d] + k * P) * esz;
            size_t bytes = 0;
            peerWire(x, d); /* alltoallTake sets it for the peers it takes from */
            ZIPCCL_TRY(stagePiece(x, &src, pieceLen(sendcounts[d], P, k), dt, sstage, &soff, &bytes));
            /* Step j-W's sends complete before the step's first (and the
             * communicator's piece limit before every send, waitSends). */
            int got;
            do {
                ZIPCCL_TRY(waitSends(x, k == 0 ? stepLim : 0, &doneTo, &got));
                alltoallTake(x, got, recvbuf, recvcounts, rdispls, minOne, P);
            } while (got);
            ZIPCCL_TRY(postSend(x, src, bytes, d, makeTag(kind, k, k + 1 == K) | sizeTag));
            ZIPCCL_TRY(pollRecvs(x, 0, &got));
            alltoallTake(x, got, recvbuf, recvcounts, rdispls, minOne, P);
        }
        ends[j % (W + 1)] = x->nsend;
        if (j == 1 && copySelf) memmove(selfDst, selfSrc, sendcounts[r] * esz);
    }
    int got = 0;
    do {
        ZIPCCL_TRY(pollRecvs(x, 1, &got));
        alltoallTake(x, got, recvbuf, recvcounts, rdispls, minOne, P);
    } while (got > 0);
#undef KOF
    ZIPCCL_TRY(finishSends(x));
    x->st->a2avSizeWord = x->sizeWord; /* 0 unless tagged */
    return zipcclSuccess;
}

static zipcclResult_t alltoallCore(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st,
                                   const size_t* sendcounts, const size_t* sdispls,
                                   const size_t* recvcounts, const size_t* rdispls, int minOne) {
    const int n = c->nranks;
    const size_t esz = zipcclTypeSize(op->dtype), P = pieceElems(c, esz);
    size_t reqs = 1, extent = 0;
    for (int s = 0; s < n; s++) {
        size_t Ks = numPieces(sendcounts[s], P) + 1, Kr = numPieces(recvcounts[s], P) + 1;
        if (Ks > TAG_INDEX_MAX || Kr > TAG_INDEX_MAX)
            return zipcclSetError(zipcclUnsupported, "%s: %zu elements for one peer make more pieces than the "
                                  "message tags can number (%zu); use native or larger ZIPCCL_PIECE_BYTES",
                                  zipcclCollName(op->kind), Ks > Kr ? sendcounts[s] : recvcounts[s],
                                  (size_t)TAG_INDEX_MAX - 1);
        reqs += Ks + Kr;
        if (sdispls[s] + sendcounts[s] > extent) extent = sdispls[s] + sendcounts[s];
    }
    const char* sendbuf = op->sendbuf;
    if (op->sendbuf == op->recvbuf && n > 1 && extent) { /* in place: stage the input */
        char* tmp = zipcclScratch(c, kSlotInput, extent * esz);
        if (!tmp) return zipcclSetError(zipcclSystemError, "%s: out of memory staging %zu bytes of sendbuf (in place)",
                                        zipcclCollName(op->kind), extent * esz);
        memcpy(tmp, op->sendbuf, extent * esz);
        sendbuf = tmp;
    }
    Ctx x;
    ZIPCCL_TRY(ctxInit(&x, c, op, st, reqs));
    x.intraRaw = st->algo == zipcclAlgoHier; /* frames only between nodes */
    TRY_OR_ABANDON(&x, alltoallBody(&x, sendbuf, sendcounts, sdispls, op->recvbuf, recvcounts,
                                    rdispls, minOne));
    return zipcclSuccess;
}

/* ---- ReduceScatter, direct ------------------------------------------------- */

/* An owner's running state: arrived[j*K + k] says the j-th contributor's
 * piece k is in (its receive: recIndex[j*K + k]); nextPos[k] is the next
 * position to add for piece k (n = finished). */
typedef struct {
    int *arrived, *nextPos, *recIndex;
    float* acc;
    char* tmp; /* compressed: one decoded piece */
    const char* own;
    void* out;
    size_t K, P, mine;
} RsOwner;

/* Verify the receives pollRecvs just completed and add every contribution
 * that is now next in line, finishing pieces whose last one came in. */
static void rsDirectTake(Ctx* x, RsOwner* o, int got) {
    const int n = x->c->nranks;
    const zipcclDataType_t dt = x->op->dtype;
    const size_t esz = zipcclTypeSize(dt), K = o->K, P = o->P;
    for (int g = 0; g < got; g++) {
        const RecvRec* rc = &x->rec[x->idx[g]];
        size_t kk = rc->piece, pc = pieceLen(o->mine, P, kk);
        if (softFail(x, verify(x, g, makeTag(x->op->kind, kk, kk + 1 == K), pc, dt))) continue;
        o->arrived[(size_t)rc->step * K + kk] = 1;
        while (o->nextPos[kk] < n && o->arrived[(size_t)o->nextPos[kk] * K + kk]) {
            const RecvRec* src = &x->rec[o->recIndex[(size_t)o->nextPos[kk] * K + kk]];
            const void* data = src->buf;
            if (x->compressed) {
                if (softFail(x, decode(x, src, o->tmp, pc, dt))) memset(o->tmp, 0, pc * esz);
                data = o->tmp;
            }
            zipcclAccumulate(o->acc + kk * P, data, pc, dt, o->nextPos[kk] == 1);
            if (++o->nextPos[kk] == n) {
                zipcclAccumulate(o->acc + kk * P, o->own + kk * P * esz, pc, dt, 0);
                zipcclFinalize((char*)o->out + kk * P * esz, o->acc + kk * P, pc, dt, x->op->op, n);
            }
        }
    }
}

/* Block b of every rank's input (counts[b] elements at displs[b]) is reduced
 * by rank b into out.  Each rank sends block d to rank d (encoded once),
 * addressing first the owner that needs it first in the canonical order:
 * rank r is the j-th contributor of block r-j, so it sends to r-1, r-2, ...
 * The owner adds piece by piece in the canonical order as contributions
 * arrive, its own data last. */
static zipcclResult_t rsDirectBody(Ctx* x, const char* sendbuf, const size_t* counts,
                                   const size_t* displs, void* out) {
    struct zipcclComm* c = x->c;
    const int n = c->nranks, r = c->rank;
    const zipcclDataType_t dt = x->op->dtype;
    const zipcclCollKind_t kind = x->op->kind;
    const size_t esz = zipcclTypeSize(dt), P = pieceElems(c, esz);
    const size_t mine = counts[r], K = numPieces(mine, P);
    RsOwner o = {.own = sendbuf + displs[r] * esz, .out = out, .K = K, .P = P, .mine = mine};

    o.acc = zipcclScratch(c, kSlotAcc, mine * sizeof(float) + 1);
    if (!o.acc) return oom(x);
    size_t recvStage = (size_t)(n - 1) * stageFor(x, mine, P, dt), sendStage = 0;
    for (int d = 0; d < n; d++)
        if (d != r && x->compressed) sendStage += stageFor(x, counts[d], P, dt);
    char* rstage = zipcclScratch(c, kSlotRecv, recvStage + 1);
    char* sstage = x->compressed ? zipcclScratch(c, kSlotSend, sendStage + 1) : NULL;
    o.tmp = x->compressed ? zipcclScratch(c, kSlotTmp, P * esz) : NULL;
    o.arrived = zipcclScratch(c, kSlotFlags, sizeof(int) * ((size_t)n + 1) * (K + 1));
    if (!rstage || (x->compressed && (!sstage || !o.tmp)) || !o.arrived) return oom(x);
    o.nextPos = o.arrived + (size_t)n * K;
    memset(o.arrived, 0, sizeof(int) * (size_t)n * K);
    o.recIndex = zipcclScratch(c, kSlotInput, sizeof(int) * (size_t)n * (K + 1));
    if (!o.recIndex) return oom(x);

    size_t off = 0;
    for (int j = 1; j < n; j++) {
        int s = (r + j) % n;
        for (size_t k = 0; k < K; k++) {
            size_t cap = wireCap(x, pieceLen(mine, P, k), dt);
            o.recIndex[(size_t)j * K + k] = x->nrecv;
            ZIPCCL_TRY(postRecv(x, rstage + off, cap, s, ZIPCCL_ANY_TAG, j, k));
            off += cap;
        }
    }
    for (size_t k = 0; k < K; k++) o.nextPos[k] = 1;

    /* Sends in order of need, paced like the AlltoAll's (waitSends). */
    size_t soff = 0;
    int doneTo = 0, got = 0;
    for (int j = 1; j < n; j++) {
        int d = (r - j + n) % n;
        for (size_t k = 0, Kd = numPieces(counts[d], P); k < Kd; k++) {
            const void* src = sendbuf + (displs[d] + k * P) * esz;
            size_t bytes = 0;
            ZIPCCL_TRY(stagePiece(x, &src, pieceLen(counts[d], P, k), dt, sstage, &soff, &bytes));
            do {
                ZIPCCL_TRY(waitSends(x, 0, &doneTo, &got));
                rsDirectTake(x, &o, got);
            } while (got);
            ZIPCCL_TRY(postSend(x, src, bytes, d, makeTag(kind, k, k + 1 == Kd)));
            ZIPCCL_TRY(pollRecvs(x, 0, &got));
            rsDirectTake(x, &o, got);
        }
    }
    do {
        ZIPCCL_TRY(pollRecvs(x, 1, &got));
        rsDirectTake(x, &o, got);
    } while (got > 0);
    return finishSends(x);
}

/* ---- ReduceScatter, ring ----------------------------------------------------- */

/* Step s (0..n-2): rank r sends the partial sum of block r-1-s to r+1 and
 * receives that of block r-2-s from r-1, adds its own contribution and
 * passes it on; at step n-2 the received block is r itself.  The partial
 * travels in fp32 (step 0 carries the dtype: converting it is exact), so
 * the sum is formed in the canonical order b+1, ..., b-1, b with a single
 * rounding, exactly like the direct design.  Pieces of different steps are
 * independent, so the ring pipelines piece by piece. */
static zipcclResult_t rsRingBody(Ctx* x, const char* sendbuf, const size_t* counts,
                                 const size_t* displs, void* out) {
    struct zipcclComm* c = x->c;
    const int n = c->nranks, r = c->rank, left = (r - 1 + n) % n, right = (r + 1) % n;
    const zipcclDataType_t dt = x->op->dtype;
    const zipcclCollKind_t kind = x->op->kind;
    const size_t esz = zipcclTypeSize(dt), P = pieceElems(c, 4);
    size_t Kmax = 0;
    for (int b = 0; b < n; b++)
        if (numPieces(counts[b], P) > Kmax) Kmax = numPieces(counts[b], P);
#define BLOCK_AT(s) ((r - 2 - (s) + 2 * n) % n) /* block received at step s */

    /* Per step: the partial sums (fp32) and, compressed, the staged frames. */
    size_t partialElems = 0, recvStage = 0, sendStage = 0;
    for (int s = 0; s < n - 1; s++) {
        size_t cnt = counts[BLOCK_AT(s)];
        partialElems += cnt;
        recvStage += stageFor(x, cnt, P, s == 0 ? dt : zipcclFloat32);
        if (s < n - 2 && x->compressed) sendStage += stageFor(x, cnt, P, zipcclFloat32);
    }
    sendStage += x->compressed ? stageFor(x, counts[(r - 1 + n) % n], P, dt) : 0;
    float* partial = zipcclScratch(c, kSlotAcc, partialElems * sizeof(float) + 1);
    char* rstage = zipcclScratch(c, kSlotRecv, recvStage + 1);
    char* sstage = x->compressed ? zipcclScratch(c, kSlotSend, sendStage + 1) : NULL;
    char* tmp = zipcclScratch(c, kSlotTmp, P * esz);
    size_t* stepOff = zipcclScratch(c, kSlotFlags, sizeof(size_t) * 3 * (size_t)n);
    if (!partial || !rstage || (x->compressed && !sstage) || !tmp || !stepOff) return oom(x);
    size_t* sendOff = stepOff + n; /* compressed staging offset per step */

    size_t off = 0, pOff = 0, sOff = 0;
    for (int s = 0; s < n - 1; s++) {
        size_t cnt = counts[BLOCK_AT(s)];
        zipcclDataType_t wdt = s == 0 ? dt : zipcclFloat32;
        stepOff[s] = pOff;
        pOff += cnt;
        for (size_t k = 0, K = numPieces(cnt, P); k < K; k++) {
            size_t cap = wireCap(x, pieceLen(cnt, P, k), wdt);
            ZIPCCL_TRY(postRecv(x, rstage + off, cap, left, makeTag(kind, (size_t)s * Kmax + k, 0), s, k));
            off += cap;
        }
    }
    for (int s = 1; s < n - 1; s++) { /* frames we send at step s (s >= 1) */
        sendOff[s] = sOff;
        if (x->compressed) sOff += stageFor(x, counts[BLOCK_AT(s - 1)], P, zipcclFloat32);
    }

    /* Step 0: our own contribution to block r-1, in the dtype. */
    const size_t b0 = (size_t)((r - 1 + n) % n), K0 = numPieces(counts[b0], P);
    for (size_t k = 0; k <= K0; k++) {
        if (k < K0)
            ZIPCCL_TRY(sendPiece(x, sendbuf + (displs[b0] + k * P) * esz, pieceLen(counts[b0], P, k), dt,
                                 sstage, &sOff, right, makeTag(kind, k, 0)));
        int got = 0;
        do {
            ZIPCCL_TRY(pollRecvs(x, k == K0, &got));
            for (int g = 0; g < got; g++) {
                const RecvRec* rc = &x->rec[x->idx[g]];
                int s = rc->step, b = BLOCK_AT(s);
                size_t kk = rc->piece, pc = pieceLen(counts[b], P, kk);
                zipcclDataType_t wdt = s == 0 ? dt : zipcclFloat32;
                float* part = partial + stepOff[s] + kk * P;
                /* On a data error the ring still passes a (zeroed) partial on,
                 * so every rank finishes the protocol. */
                int bad = softFail(x, verify(x, g, makeTag(kind, (size_t)s * Kmax + kk, 0), pc, wdt));
                if (!bad && s == 0 && dt != zipcclFloat32) {
                    bad = softFail(x, decode(x, rc, tmp, pc, dt));
                    if (!bad) zipcclAccumulate(part, tmp, pc, dt, 1);
                } else if (!bad) {
                    bad = softFail(x, decode(x, rc, part, pc, zipcclFloat32));
                }
                if (bad) memset(part, 0, pc * sizeof(float));
                zipcclAccumulate(part, sendbuf + (displs[b] + kk * P) * esz, pc, dt, 0);
                if (s == n - 2) {
                    zipcclFinalize((char*)out + kk * P * esz, part, pc, dt, x->op->op, n);
                    continue;
                }
                const void* src = part;
                size_t bytes = pc * 4;
                x->st->rawBytes += bytes;
                if (x->compressed) {
                    size_t cap = x->codec->bound(pc, zipcclFloat32, 0);
                    char* dst = sstage + sendOff[s + 1] + kk * x->codec->bound(P, zipcclFloat32, 0);
                    ZIPCCL_TRY(encode(x, part, pc, zipcclFloat32, dst, cap, &bytes));
                    src = dst;
                }
                ZIPCCL_TRY(postSend(x, src, bytes, right, makeTag(kind, (size_t)(s + 1) * Kmax + kk, 0)));
            }
        } while (k == K0 && got > 0);
    }
#undef BLOCK_AT
    return finishSends(x);
}

static zipcclResult_t reduceScatterCore(struct zipcclComm* c, const zipcclOp* op,
                                        zipcclExecStats* st, const size_t* counts,
                                        const size_t* displs, void* out) {
    const int n = c->nranks, r = c->rank;
    const size_t esz = zipcclTypeSize(op->dtype);
    if (n == 1) { /* the canonical order of one: own data, one rounding */
        float* acc = zipcclScratch(c, kSlotAcc, counts[0] * sizeof(float) + 1);
        if (!acc) return zipcclSetError(zipcclSystemError, "%s: out of memory for %zu fp32 accumulators",
                                        zipcclCollName(op->kind), counts[0]);
        zipcclAccumulate(acc, (const char*)op->sendbuf + displs[0] * esz, counts[0], op->dtype, 1);
        zipcclFinalize(out, acc, counts[0], op->dtype, op->op, 1);
        return zipcclSuccess;
    }
    int ring = st->algo == zipcclAlgoRing;
    size_t P = pieceElems(c, ring ? 4 : esz), Kmax = 0, reqs = 2;
    for (int b = 0; b < n; b++) {
        size_t K = numPieces(counts[b], P);
        if (K > Kmax) Kmax = K;
        reqs += ring ? 2 * K : (b == r ? K * (size_t)(n - 1) : K);
    }
    if ((ring ? Kmax * (size_t)n : Kmax) >= TAG_INDEX_MAX)
        return zipcclSetError(zipcclUnsupported, "%s: the blocks make %zu pieces a rank, more than the message "
                              "tags can number (%zu); use larger ZIPCCL_PIECE_BYTES", zipcclCollName(op->kind),
                              ring ? Kmax * (size_t)n : Kmax, (size_t)TAG_INDEX_MAX - 1);
    Ctx x;
    ZIPCCL_TRY(ctxInit(&x, c, op, st, reqs));
    if (ring) TRY_OR_ABANDON(&x, rsRingBody(&x, op->sendbuf, counts, displs, out));
    else TRY_OR_ABANDON(&x, rsDirectBody(&x, op->sendbuf, counts, displs, out));
    return zipcclSuccess;
}

/* ---- One-shot AllGather / AllReduce ----------------------------------------- */

/* Block b of a piece [lo, hi) of the AllReduce buffer, summed in the
 * canonical order b+1, ..., b-1, b from every rank's copy (ours at `mine`,
 * rank s's at land + s*stride) and rounded into out. */
static void oneShotReduce(Ctx* x, const char* mine, const char* land, size_t stride, const size_t* counts,
                          const size_t* displs, size_t lo, size_t hi, float* acc, char* out) {
    const int n = x->c->nranks, r = x->c->rank;
    const zipcclDataType_t dt = x->op->dtype;
    const size_t esz = zipcclTypeSize(dt);
    for (int b = 0; b < n; b++) {
        size_t a = displs[b] > lo ? displs[b] : lo, e = displs[b] + counts[b] < hi ? displs[b] + counts[b] : hi;
        if (a >= e) continue;
        for (int j = 1; j <= n; j++) {
            int s = (b + j) % n;
            zipcclAccumulate(acc, (s == r ? mine : land + (size_t)s * stride) + a * esz, e - a, dt, j == 1);
        }
        zipcclFinalize(out + a * esz, acc, e - a, dt, x->op->op, n);
    }
}

/* One step, for small messages: every rank sends its whole contribution
 * (`count` elements at mine: its block for AllGather, its whole input for
 * AllReduce) to every peer at once, each piece encoded once and the same
 * frame sent to all, and receives every peer's.  That is one message
 * latency where the AllGather ring takes n-1 steps and ReduceScatter +
 * AllGather n, for more bytes: AllGather moves the same, AllReduce n-1
 * times its buffer per rank instead of 2(n-1)/n, and every rank reduces all
 * n blocks itself.  Rank s's contribution lands at land + s*stride (raw:
 * received there; compressed: decoded there): AllGather's recvbuf, or
 * AllReduce's staging, in which case (counts/displs: the blocks) a piece is
 * reduced into out as soon as it has arrived from every peer, block b in the
 * canonical order, so the result equals the other designs' bit for bit. */
static zipcclResult_t oneShotBody(Ctx* x, const char* mine, size_t count, char* land, size_t stride,
                                  const size_t* counts, const size_t* displs, char* out) {
    struct zipcclComm* c = x->c;
    const int n = c->nranks, r = c->rank;
    const zipcclDataType_t dt = x->op->dtype;
    const zipcclCollKind_t kind = x->op->kind;
    const size_t esz = zipcclTypeSize(dt), P = pieceElems(c, esz), K = numPieces(count, P);
    const size_t stage = x->compressed ? stageFor(x, count, P, dt) : 0; /* one rank's frames */
    char* rstage = x->compressed ? zipcclScratch(c, kSlotRecv, (size_t)(n - 1) * stage + 1) : NULL;
    char* sstage = x->compressed ? zipcclScratch(c, kSlotSend, stage + 1) : NULL;
    float* acc = counts ? zipcclScratch(c, kSlotAcc, (count < P ? count : P) * sizeof(float) + 1) : NULL;
    int* have = zipcclScratch(c, kSlotFlags, sizeof(int) * (K + 1)); /* peers arrived, per piece */
    if ((x->compressed && (!rstage || !sstage)) || (counts && !acc) || !have) return oom(x);
    memset(have, 0, sizeof(int) * K);

    size_t off = 0;
    for (int j = 1; j < n; j++) {
        int s = (r - j + n) % n;
        for (size_t k = 0; k < K; k++) {
            size_t cap = wireCap(x, pieceLen(count, P, k), dt);
            char* buf = x->compressed ? rstage + off : land + (size_t)s * stride + k * P * esz;
            ZIPCCL_TRY(postRecv(x, buf, cap, s, ZIPCCL_ANY_TAG, j, k));
            off += x->compressed ? cap : 0;
        }
    }
    size_t soff = 0;
    for (size_t k = 0; k <= K; k++) {
        if (k < K) {
            size_t pc = pieceLen(count, P, k), bytes = pc * esz;
            const char* src = mine + k * P * esz;
            if (x->compressed) {
                size_t cap = x->codec->bound(pc, dt, 0);
                ZIPCCL_TRY(encode(x, src, pc, dt, sstage + soff, cap, &bytes));
                src = sstage + soff;
                soff += cap;
            }
            for (int j = 1; j < n; j++) { /* r+1 first, so each peer hears from a different rank first */
                x->st->rawBytes += pc * esz;
                ZIPCCL_TRY(postSend(x, src, bytes, (r + j) % n, makeTag(kind, k, k + 1 == K)));
            }
            char* place = land + (size_t)r * stride + k * P * esz; /* AllGather: our own block */
            if (!counts && place != mine + k * P * esz) memmove(place, mine + k * P * esz, pc * esz);
        }
        int got = 0;
        do {
            ZIPCCL_TRY(pollRecvs(x, k == K, &got));
            for (int g = 0; g < got; g++) {
                const RecvRec* rc = &x->rec[x->idx[g]];
                size_t kk = rc->piece, pc = pieceLen(count, P, kk);
                if (softFail(x, verify(x, g, makeTag(kind, kk, kk + 1 == K), pc, dt))) continue;
                if (softFail(x, decode(x, rc, land + (size_t)rc->peer * stride + kk * P * esz, pc, dt))) continue;
                if (++have[kk] == n - 1 && counts)
                    oneShotReduce(x, mine, land, stride, counts, displs, kk * P, kk * P + pc, acc, out);
            }
        } while (k == K && got > 0);
    }
    return finishSends(x);
}

static zipcclResult_t oneShotCore(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st,
                                  const char* mine, size_t count, char* land, size_t stride,
                                  const size_t* counts, const size_t* displs, char* out) {
    const size_t K = numPieces(count, pieceElems(c, zipcclTypeSize(op->dtype)));
    if (K >= TAG_BAD_INDEX)
        return zipcclSetError(zipcclUnsupported, "%s: %zu elements make %zu pieces, more than the message tags can "
                              "number (%zu); use larger ZIPCCL_PIECE_BYTES", zipcclCollName(op->kind), count, K,
                              (size_t)TAG_BAD_INDEX - 1);
    Ctx x;
    ZIPCCL_TRY(ctxInit(&x, c, op, st, 2 * (size_t)(c->nranks - 1) * K + 1));
    TRY_OR_ABANDON(&x, oneShotBody(&x, mine, count, land, stride, counts, displs, out));
    return zipcclSuccess;
}

/* ---- Hierarchical (hier): raw within a node, frames between nodes ----------- */

/* Nodes are blocks of k = c->nodeSize consecutive ranks (transport_mpi.c,
 * mpiNodeSize; ZIPCCL_NODE_SIZE): rank r is local index l = r % k of node
 * r / k, N = n / k nodes.  Each design runs the flat bodies above on groups:
 * a node's k ranks (raw: the wire inside a node is memory) or the N ranks of
 * one local index l, one per node (frames, if the call is compressed).  The
 * stages run one after another, each a whole body; a pair of ranks meets in
 * one kind of group only (same node, or same l on different nodes), and
 * MPI keeps the order of a pair's messages, so the stages need no tags of
 * their own. */

static int nodeSizeOf(const struct zipcclComm* c) {
    int k = c->nodeSize;
    return k > 0 && c->nranks % k == 0 ? k : 1;
}

/* AllGather: (1) the ring among the ranks of our local index, one per node,
 * as frames: each rank's block is coded once, by its owner, and passed on
 * unchanged (allGatherBody); (2) within the node, raw, one ring per node m
 * over the blocks of node m's ranks (block i of it came to our node's rank
 * i in stage 1).  Movement only, so the bytes are the flat ring's. */
static zipcclResult_t hierAllGather(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st,
                                    const void* mine, void* recvbuf, const size_t* counts,
                                    const size_t* displs) {
    const int n = c->nranks, k = nodeSizeOf(c), N = n / k, me = c->rank / k, l = c->rank % k;
    const int G = N > k ? N : k;
    int map[G];
    size_t gc[G], gd[G];
    for (int m = 0; m < N; m++) map[m] = m * k + l, gc[m] = counts[m * k + l], gd[m] = displs[m * k + l];
    ZIPCCL_TRY(groupAllGather(c, op, st, map, N, me, 0, mine, recvbuf, gc, gd));
    if (k == 1) return zipcclSuccess;
    const size_t esz = zipcclTypeSize(op->dtype);
    for (int i = 0; i < k; i++) map[i] = me * k + i;
    for (int m = 0; m < N; m++) {
        for (int i = 0; i < k; i++) gc[i] = counts[m * k + i], gd[i] = displs[m * k + i];
        ZIPCCL_TRY(groupAllGather(c, op, st, map, k, l, 1, (char*)recvbuf + displs[m * k + l] * esz, recvbuf,
                                  gc, gd));
    }
    return zipcclSuccess;
}

/* ReduceScatter keeps the canonical order (§3): block b is summed in fp32
 * over ranks b+1, b+2, ..., b-1, b (mod n), rounded once.  With nodes of
 * consecutive ranks that sequence is: the ranks of b's node after b (the
 * tail), every other node whole in node order, then b's node from its first
 * rank to b (the head).  So:
 *
 *   (1) within each node, raw: every rank sends its contribution to block
 *       m*k + l to the node's rank l (one exchange per node m,
 *       alltoallBody over the node's ranks): rank l of a node ("the
 *       station" of the blocks m*k + l) then holds the node's k
 *       contributions to each of them;
 *   (2) among the stations of one local index l, one per node, either
 *       - a chain per block (rsChainBody): the owner b's station starts the
 *         fp32 partial with its tail (when b is not its node's last rank),
 *         each next node's station adds its node's k contributions in rank
 *         order and passes it on, as a frame, and the owner adds its head
 *         (its own data last) and rounds once; or
 *       - forward (rsForwardBody): every station sends its node's
 *         contributions to the owner, which sums them in that same order.
 *
 * Every addition is the flat designs' addition in the flat designs' order,
 * on values that travel losslessly, so the result is theirs bit for bit;
 * raw data moves only within a node.  Between nodes the chain sends one
 * fp32 partial per block and node boundary (N per block, N - 1 when b is
 * its node's last rank), forward the n - k contributions of a block in the
 * dtype (the flat direct design's bytes there); hierReduceScatter takes the
 * fewer.  A fixed order admits no node-wide partial sums, which would need
 * fewer still. */
typedef struct {
    const char* sendbuf; /* our input: block b at displs[b]                    */
    const char* land;    /* stage 1: rank i's contribution to block m*k + l    */
    const size_t *counts, *displs, *loff; /* loff[m]: land's offset (elements) for node m */
    int k, l;
} HierRs;

/* Element e of the contribution of our node's rank i to block m*k + l. */
static const char* contrib(const HierRs* h, int m, int i, size_t e, size_t esz) {
    const size_t b = (size_t)m * h->k + h->l;
    if (i == h->l) return h->sendbuf + (h->displs[b] + e) * esz;
    return h->land + (h->loff[m] + (size_t)i * h->counts[b] + e) * esz;
}

/* acc (+)= our node's ranks i0..i1-1 in order, elements [e, e + pc) of
 * block m*k + l; `first`: the first of them sets acc. */
static void addRun(const HierRs* h, zipcclDataType_t dt, float* acc, int m, int i0, int i1, size_t e, size_t pc,
                   int first) {
    const size_t esz = zipcclTypeSize(dt);
    for (int i = i0; i < i1; i++) zipcclAccumulate(acc, contrib(h, m, i, e, esz), pc, dt, first && i == i0);
}

/* Stage 2 over the stations of our local index (x's group: member j is
 * node j's rank l; we are member me).  The chain of member B's block
 * starts at B (its tail; hop 0) or, when the tail is empty (l = k - 1), at
 * B + 1 (hop 1); the message of hop h goes from member B + h - 1 to B + h,
 * and at hop N reaches B.  So what arrives at us at hop h is the partial of
 * block me - h; we add our node's run and send it on at hop h + 1, or at
 * hop N add our head and round.  Pieces are independent, as on the ring. */
static zipcclResult_t rsChainBody(Ctx* x, const HierRs* h, void* out) {
    struct zipcclComm* c = x->c;
    const int N = x->n, me = x->r, left = (me - 1 + N) % N, right = (me + 1) % N;
    const int k = h->k, l = h->l, tail = l < k - 1, h0 = tail ? 1 : 2;
    const zipcclDataType_t dt = x->op->dtype;
    const zipcclCollKind_t kind = x->op->kind;
    const size_t P = pieceElems(c, 4), fb = x->codec->bound(P, zipcclFloat32, 0);
#define BLK(hop) ((me - (hop) + 2 * N) % N) /* the block whose hop `hop` ends at us */
#define CNT(B) (h->counts[(size_t)(B) * k + l])
    size_t Kmax = 0;
    for (int B = 0; B < N; B++)
        if (numPieces(CNT(B), P) > Kmax) Kmax = numPieces(CNT(B), P);
    /* Partials: one per hop h0 - 1 (the chain we start) .. N; frames: the
     * receives of hops h0..N and our sends of hops h0..N. */
    size_t pOff[N + 1], sendOff[N + 1], partialElems = 0, recvStage = 0, sendStage = 0;
    for (int hop = h0 - 1; hop <= N; hop++) {
        pOff[hop] = partialElems;
        partialElems += CNT(BLK(hop));
        if (hop >= h0) recvStage += stageFor(x, CNT(BLK(hop)), P, zipcclFloat32);
        if (hop >= h0) { /* our send of hop `hop` carries block me - hop + 1 */
            sendOff[hop] = sendStage;
            if (x->compressed) sendStage += stageFor(x, CNT(BLK(hop - 1)), P, zipcclFloat32);
        }
    }
    float* partial = zipcclScratch(c, kSlotAcc, partialElems * sizeof(float) + 1);
    char* rstage = zipcclScratch(c, kSlotRecv, recvStage + 1);
    char* sstage = x->compressed ? zipcclScratch(c, kSlotSend, sendStage + 1) : NULL;
    if (!partial || !rstage || (x->compressed && !sstage)) return oom(x);

    size_t off = 0;
    for (int hop = h0; hop <= N; hop++)
        for (size_t kk = 0, K = numPieces(CNT(BLK(hop)), P); kk < K; kk++) {
            size_t cap = wireCap(x, pieceLen(CNT(BLK(hop)), P, kk), zipcclFloat32);
            ZIPCCL_TRY(postRecv(x, rstage + off, cap, left, makeTag(kind, (size_t)hop * Kmax + kk, 0), hop, kk));
            off += cap;
        }

    /* Send piece kk of a partial on at hop `hop`. */
#define SEND_ON(part, pc, hop, kk)                                                                          \
    do {                                                                                                    \
        const void* src_ = (part);                                                                          \
        size_t bytes_ = (pc) * 4;                                                                           \
        x->st->rawBytes += bytes_;                                                                          \
        if (x->compressed) {                                                                                \
            char* dst_ = sstage + sendOff[hop] + (kk) * fb;                                                 \
            ZIPCCL_TRY(encode(x, (part), (pc), zipcclFloat32, dst_, x->codec->bound((pc), zipcclFloat32, 0), \
                              &bytes_));                                                                    \
            src_ = dst_;                                                                                    \
        }                                                                                                   \
        ZIPCCL_TRY(postSend(x, src_, bytes_, right, makeTag(kind, (size_t)(hop) * Kmax + (kk), 0)));        \
    } while (0)

    /* The chain we start: our own block's tail, or the whole node for the
     * block of the member before us. */
    const int B0 = BLK(h0 - 1);
    const size_t K0 = numPieces(CNT(B0), P);
    for (size_t kk = 0; kk <= K0; kk++) {
        if (kk < K0) {
            size_t pc = pieceLen(CNT(B0), P, kk);
            float* part = partial + pOff[h0 - 1] + kk * P;
            addRun(h, dt, part, B0, tail ? l + 1 : 0, k, kk * P, pc, 1);
            SEND_ON(part, pc, h0, kk);
        }
        int got = 0;
        do {
            ZIPCCL_TRY(pollRecvs(x, kk == K0, &got));
            for (int g = 0; g < got; g++) {
                const RecvRec* rc = &x->rec[x->idx[g]];
                const int hop = rc->step, B = BLK(hop);
                const size_t q = rc->piece, pc = pieceLen(CNT(B), P, q);
                float* part = partial + pOff[hop] + q * P;
                /* On a data error the chain still passes a (zeroed) partial
                 * on, so every rank finishes the protocol. */
                int bad = softFail(x, verify(x, g, makeTag(kind, (size_t)hop * Kmax + q, 0), pc, zipcclFloat32));
                if (!bad) bad = softFail(x, decode(x, rc, part, pc, zipcclFloat32));
                if (bad) memset(part, 0, pc * sizeof(float));
                if (hop < N) {
                    addRun(h, dt, part, B, 0, k, q * P, pc, 0);
                    SEND_ON(part, pc, hop + 1, q);
                } else {
                    addRun(h, dt, part, B, 0, l + 1, q * P, pc, 0);
                    zipcclFinalize((char*)out + q * P * zipcclTypeSize(dt), part, pc, dt, x->op->op, c->nranks);
                }
            }
        } while (kk == K0 && got > 0);
    }
#undef SEND_ON
#undef CNT
#undef BLK
    return finishSends(x);
}

/* Stage 2, the other way (rsForwardBody): each station sends its node's k
 * contributions to every other block of its group straight to the block's
 * owner, as frames (each contribution coded once: it has one destination);
 * the owner sums a piece once every node's contributions to it are in, in
 * the canonical order (its tail, the other nodes' ranks in rank order, its
 * head).  Between nodes that moves the flat direct design's bytes, (n - k)
 * contributions per block in the dtype, against the chain's N fp32
 * partials: hierReduceScatter takes whichever is fewer. */
static zipcclResult_t rsForwardBody(Ctx* x, const HierRs* h, void* out) {
    struct zipcclComm* c = x->c;
    const int N = x->n, me = x->r, k = h->k, l = h->l;
    const zipcclDataType_t dt = x->op->dtype;
    const zipcclCollKind_t kind = x->op->kind;
    const size_t esz = zipcclTypeSize(dt), P = pieceElems(c, esz);
    const size_t mine = h->counts[(size_t)me * k + l], K = numPieces(mine, P);
    size_t recvStage = x->compressed ? (size_t)(N - 1) * k * stageFor(x, mine, P, dt) : 0, sendStage = 0;
    for (int B = 0; B < N && x->compressed; B++)
        if (B != me) sendStage += (size_t)k * stageFor(x, h->counts[(size_t)B * k + l], P, dt);
    /* REMOTE(j, i): node me + j's rank i's contribution (j = 1..N-1) */
    char* land = zipcclScratch(c, kSlotTmp, (size_t)N * k * mine * esz + 1);
    char* rstage = x->compressed ? zipcclScratch(c, kSlotRecv, recvStage + 1) : NULL;
    char* sstage = x->compressed ? zipcclScratch(c, kSlotSend, sendStage + 1) : NULL;
    float* acc = zipcclScratch(c, kSlotAcc, (mine < P ? mine : P) * sizeof(float) + 1);
    int* have = zipcclScratch(c, kSlotFlags, sizeof(int) * (K + 1));
    if (!land || (x->compressed && (!rstage || !sstage)) || !acc || !have) return oom(x);
    memset(have, 0, sizeof(int) * K);
#define REMOTE(j, i) (land + ((size_t)(j) * k + (size_t)(i)) * mine * esz)

    size_t off = 0;
    for (int j = 1; j < N; j++) /* member me + j sends us node me + j's contributions */
        for (int i = 0; i < k; i++)
            for (size_t q = 0; q < K; q++) {
                size_t cap = wireCap(x, pieceLen(mine, P, q), dt);
                char* buf = x->compressed ? rstage + off : REMOTE(j, i) + q * P * esz;
                ZIPCCL_TRY(postRecv(x, buf, cap, (me + j) % N, makeTag(kind, (size_t)i * K + q, 0), j * k + i, q));
                off += x->compressed ? cap : 0;
            }
    const size_t need = (size_t)(N - 1) * k;
#define TAKE(got_)                                                                                            \
    for (int g = 0; g < (got_); g++) {                                                                        \
        const RecvRec* rc = &x->rec[x->idx[g]];                                                               \
        const int j = rc->step / k, i = rc->step % k;                                                         \
        const size_t q = rc->piece, pc = pieceLen(mine, P, q);                                                \
        char* dst = REMOTE(j, i) + q * P * esz;                                                               \
        int bad = softFail(x, verify(x, g, makeTag(kind, (size_t)i * K + q, 0), pc, dt));                     \
        if (!bad) bad = softFail(x, decode(x, rc, dst, pc, dt));                                              \
        if (bad) memset(dst, 0, pc * esz);                                                                    \
        if (++have[q] < (int)need) continue;                                                                  \
        /* every node's part of piece q is in: the canonical order */                                        \
        if (l < k - 1) addRun(h, dt, acc, me, l + 1, k, q * P, pc, 1);                                        \
        for (int jj = 1; jj < N; jj++)                                                                        \
            for (int ii = 0; ii < k; ii++)                                                                    \
                zipcclAccumulate(acc, REMOTE(jj, ii) + q * P * esz, pc, dt, l == k - 1 && jj == 1 && ii == 0); \
        addRun(h, dt, acc, me, 0, l + 1, q * P, pc, 0);                                                       \
        zipcclFinalize((char*)out + q * P * esz, acc, pc, dt, x->op->op, c->nranks);                          \
    }

    /* Ours to the owners, member me - 1 first, then me - 2, ...: at every
     * moment the members send to different owners. */
    size_t soff = 0;
    int doneTo = 0, got = 0;
    for (int j = 1; j < N; j++) {
        const int B = (me - j + N) % N;
        const size_t cb = h->counts[(size_t)B * k + l], Kb = numPieces(cb, P);
        for (int i = 0; i < k; i++)
            for (size_t q = 0; q < Kb; q++) {
                const void* src = contrib(h, B, i, q * P, esz);
                size_t bytes = 0;
                ZIPCCL_TRY(stagePiece(x, &src, pieceLen(cb, P, q), dt, sstage, &soff, &bytes));
                do {
                    ZIPCCL_TRY(waitSends(x, 0, &doneTo, &got));
                    TAKE(got);
                } while (got);
                ZIPCCL_TRY(postSend(x, src, bytes, B, makeTag(kind, (size_t)i * Kb + q, 0)));
                ZIPCCL_TRY(pollRecvs(x, 0, &got));
                TAKE(got);
            }
    }
    do {
        ZIPCCL_TRY(pollRecvs(x, 1, &got));
        TAKE(got);
    } while (got > 0);
#undef TAKE
#undef REMOTE
    return finishSends(x);
}

static zipcclResult_t hierReduceScatter(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st,
                                        const char* sendbuf, const size_t* counts, const size_t* displs,
                                        void* out) {
    const int n = c->nranks, k = nodeSizeOf(c), N = n / k, me = c->rank / k, l = c->rank % k;
    const zipcclDataType_t dt = op->dtype;
    const size_t esz = zipcclTypeSize(dt);
    size_t loff[N], landElems = 0, sc[k], sd[k], rc[k], rd[k];
    for (int m = 0; m < N; m++) loff[m] = landElems, landElems += (size_t)k * counts[(size_t)m * k + l];
    HierRs h = {.sendbuf = sendbuf, .counts = counts, .displs = displs, .loff = loff, .k = k, .l = l};
    if (k > 1) { /* stage 1: our node's contributions to our blocks, raw */
        char* land = zipcclScratch(c, kSlotInput, landElems * esz + 1);
        int map[k];
        if (!land) return zipcclSetError(zipcclSystemError, "%s: out of memory for %zu bytes of staging",
                                         zipcclCollName(op->kind), landElems * esz);
        h.land = land;
        for (int i = 0; i < k; i++) map[i] = me * k + i;
        const size_t P = pieceElems(c, esz);
        for (int m = 0; m < N; m++) {
            const size_t b = (size_t)m * k + l;
            size_t reqs = 1;
            for (int i = 0; i < k; i++) {
                /* Ours stays in sendbuf (contrib): nothing to or from ourselves. */
                sc[i] = i == l ? 0 : counts[(size_t)m * k + i], sd[i] = displs[(size_t)m * k + i];
                rc[i] = i == l ? 0 : counts[b], rd[i] = loff[m] + (size_t)i * counts[b];
                reqs += numPieces(sc[i], P) + numPieces(rc[i], P) + 2;
            }
            Ctx x;
            ZIPCCL_TRY(ctxInit(&x, c, op, st, reqs));
            x.map = map, x.n = k, x.r = l, x.compressed = 0;
            TRY_OR_ABANDON(&x, alltoallBody(&x, sendbuf, sc, sd, land, rc, rd, 1));
        }
    }
    if (N == 1) { /* one node: the tail, then the head */
        float* acc = zipcclScratch(c, kSlotAcc, counts[c->rank] * sizeof(float) + 1);
        if (!acc) return zipcclSetError(zipcclSystemError, "%s: out of memory for %zu fp32 accumulators",
                                        zipcclCollName(op->kind), counts[c->rank]);
        const size_t cnt = counts[c->rank];
        if (l < k - 1) addRun(&h, dt, acc, 0, l + 1, k, 0, cnt, 1);
        addRun(&h, dt, acc, 0, 0, l + 1, 0, cnt, l == k - 1);
        zipcclFinalize(out, acc, cnt, dt, op->op, n);
        return zipcclSuccess;
    }
    /* Between nodes: the chain's N fp32 partials per block, or the
     * contributions of the n - k ranks of the other nodes in the dtype,
     * whichever is fewer bytes (ties: forward, whose owner-side sum needs no
     * hop after hop); ZIPCCL_HIER_RS=chain|forward fixes it. */
    const int chain = c->hierRs ? c->hierRs == 1 : (size_t)N * 4 < (size_t)(N - 1) * (size_t)k * esz;
    int map[N];
    size_t P = pieceElems(c, chain ? 4 : esz), Kmax = 0, reqs = 1;
    for (int m = 0; m < N; m++) {
        size_t K = numPieces(counts[(size_t)m * k + l], P);
        map[m] = m * k + l;
        if (K > Kmax) Kmax = K;
        reqs += chain ? 2 * K : K * (size_t)k; /* chain: a receive and a send per piece; forward: our sends */
    }
    if (!chain) reqs += numPieces(counts[c->rank], P) * (size_t)k * (size_t)(N - 1); /* forward: our receives */
    const size_t tags = Kmax * (size_t)(chain ? N + 1 : k);
    if (tags >= TAG_INDEX_MAX)
        return zipcclSetError(zipcclUnsupported, "%s: the blocks make %zu pieces a rank, more than the message "
                              "tags can number (%zu); use larger ZIPCCL_PIECE_BYTES", zipcclCollName(op->kind),
                              tags, (size_t)TAG_INDEX_MAX - 1);
    Ctx x;
    ZIPCCL_TRY(ctxInit(&x, c, op, st, reqs));
    x.map = map, x.n = N, x.r = me;
    if (chain) TRY_OR_ABANDON(&x, rsChainBody(&x, &h, out));
    else TRY_OR_ABANDON(&x, rsForwardBody(&x, &h, out));
    return zipcclSuccess;
}

/* ---- dispatch --------------------------------------------------------------- */

void zipcclSplitBlocks(size_t count, int n, size_t* counts, size_t* displs) {
    const size_t base = count / (size_t)n, extra = count % (size_t)n;
    size_t d = 0;
    for (int i = 0; i < n; i++) counts[i] = base + ((size_t)i < extra), displs[i] = d, d += counts[i];
}

zipcclResult_t zipcclRunAlgo(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st) {
    const int n = c->nranks;
    const size_t esz = zipcclTypeSize(op->dtype);
    size_t counts[n], displs[n];
    switch (op->kind) {
    case zipcclCollAllGather:
        if (!op->count) return zipcclSuccess;
        if (st->algo == zipcclAlgoOneShot && n > 1)
            return oneShotCore(c, op, st, op->sendbuf, op->count, op->recvbuf, op->count * esz, NULL, NULL, NULL);
        for (int i = 0; i < n; i++) counts[i] = op->count, displs[i] = (size_t)i * op->count;
        if (st->algo == zipcclAlgoHier) return hierAllGather(c, op, st, op->sendbuf, op->recvbuf, counts, displs);
        return allGatherCore(c, op, st, op->sendbuf, op->recvbuf, counts, displs);
    case zipcclCollReduceScatter:
        if (!op->count) return zipcclSuccess;
        for (int i = 0; i < n; i++) counts[i] = op->count, displs[i] = (size_t)i * op->count;
        if (st->algo == zipcclAlgoHier)
            return hierReduceScatter(c, op, st, op->sendbuf, counts, displs, op->recvbuf);
        return reduceScatterCore(c, op, st, counts, displs, op->recvbuf);
    case zipcclCollAllReduce: {
        if (!op->count) return zipcclSuccess;
        /* ReduceScatter into a block of our own, then AllGather the blocks. */
        zipcclSplitBlocks(op->count, n, counts, displs);
        if (st->algo == zipcclAlgoOneShot && n > 1) {
            /* Every peer's whole input is staged; in place, so is ours: the
             * reduction of a piece can come before our own send of it. */
            const char* mine = op->sendbuf;
            char* land = zipcclScratch(c, kSlotBlock, (size_t)n * op->count * esz + 1);
            if (op->sendbuf == op->recvbuf) {
                char* tmp = zipcclScratch(c, kSlotInput, op->count * esz);
                if (tmp) memcpy(tmp, op->sendbuf, op->count * esz);
                mine = tmp;
            }
            if (!land || !mine) return zipcclSetError(zipcclSystemError, "AllReduce: out of memory for staging buffers");
            return oneShotCore(c, op, st, mine, op->count, land, op->count * esz, counts, displs, op->recvbuf);
        }
        void* block = zipcclScratch(c, kSlotBlock, counts[c->rank] * esz + 1);
        if (!block) return zipcclSetError(zipcclSystemError, "AllReduce: out of memory for the reduced block (%zu bytes)",
                                          counts[c->rank] * esz);
        if (st->algo == zipcclAlgoHier) {
            ZIPCCL_TRY(hierReduceScatter(c, op, st, op->sendbuf, counts, displs, block));
            return hierAllGather(c, op, st, block, op->recvbuf, counts, displs);
        }
        ZIPCCL_TRY(reduceScatterCore(c, op, st, counts, displs, block));
        return allGatherCore(c, op, st, block, op->recvbuf, counts, displs);
    }
    case zipcclCollAlltoAll:
        if (!op->count) return zipcclSuccess;
        for (int i = 0; i < n; i++) counts[i] = op->count, displs[i] = (size_t)i * op->count;
        return alltoallCore(c, op, st, counts, displs, counts, displs, 0);
    case zipcclCollAlltoAllv:
        return alltoallCore(c, op, st, op->sendcounts, op->sdispls, op->recvcounts, op->rdispls, 1);
    default: break;
    }
    return zipcclSetError(zipcclInternalError, "unknown collective kind %d", (int)op->kind);
}
