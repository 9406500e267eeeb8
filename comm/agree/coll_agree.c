/*
 * coll_agree.c — the call agreement: how the ranks of a communicator
 * find out, before any receive of a call is posted, whether they are all
 * making the same call; and the liveness queries that let a long wait say
 * which rank it is stuck on.
 *
 * Why.  Our designs post each receive with the size the piece can have under
 * the receiver's own view of the call.  A rank that disagrees (another count,
 * dtype, collective, strategy or design) sends messages of other sizes, and
 * Open MPI 4.1's default shared-memory transport writes a message larger than
 * its non-blocking receive past the receive's end (memory corruption in the
 * receiver), while MPI's own collectives abort the job on it.  Checking the
 * messages after they land is too late, and a rank can only check what it
 * receives (an AlltoAllv count one rank gets wrong is seen by that rank
 * alone).  So every call begins with an exchange of descriptors: each rank
 * sends every peer a few words saying what it is about to do, and receives
 * theirs.  Every rank then holds every rank's descriptor and reaches the same
 * verdict; a disagreement is zipcclMismatch on all of them, and no receive of
 * the call has been posted, so nothing can be truncated.
 *
 * What a descriptor says (ZIPCCL_DESC_WORDS uint64 words):
 *   [0] the shape: collective, dtype, requested strategy, the design our
 *       algorithms run (raw/compressed), the reduction op (ReduceScatter,
 *       AllReduce), whether compressed calls are coded on the device and whether device buffers move over a device
 *       network (coll_run.c: its messages differ); the codec is left out,
 *       since every frame says how it is coded and any codec decodes to the
 *       same bits;
 *   [1] the count (elements); AlltoAllv: the elements this rank sends to the
 *       receiving peer;
 *   [2] AlltoAllv: the elements this rank expects from that peer;
 *   [3] AlltoAllv: a digest of all of this rank's counts (below);
 *   [4] the piece size, which shapes every message (ZIPCCL_PIECE_BYTES);
 *   [5] the piece size of calls coded on the device, which sets how many
 *       frames a block goes in (ZIPCCL_DEVICE_PIECE_BYTES);
 *   [6] the largest block this rank sends or receives (AlltoAllv: its
 *       largest send or receive count; else the count), not compared: the
 *       largest of all ranks' sets an AlltoAllv's pieces on the device
 *       (zipcclAgreedMaxBlock), which no rank could know alone.
 * AlltoAllv's counts are pairwise, so no rank sees the whole matrix.  Each
 * rank's digest is the XOR of a 64-bit hash of (sender, receiver, count) over
 * its sends and over its receives; across all ranks every consistent pair
 * then contributes its term twice and cancels, so the XOR of the n digests
 * is 0 exactly when every pair agrees (up to a 2^-64 chance).  All ranks
 * compute it from the same n words, so all learn of a count only one rank
 * could see; a second, short exchange (failures only) tells them which pair.
 *
 * The cost is one round of n-1 small messages each way per call.  It does
 * not wait in front of the data: our designs send their first pieces while
 * the descriptors travel and post their receives when the agreement is in
 * (coll_algos.c, armRecvs), so a one-step call pays little more than before.
 * The transport's own collectives (native; the switcher's barriers and
 * agreements) wait for it first, since ranks in different calls must never
 * meet in different MPI collectives (transport_mpi.c).  Descriptors travel
 * on the transport's control channel, so they never meet our data receives
 * (which take any tag), and each call's descriptors carry its sequence
 * number as their tag.
 *
 * Liveness queries.  A wait that drags on (zipcclFirstNote) prints warnings;
 * to name the rank it is stuck on even where MPI does not say (inside MPI's
 * own collectives, or behind a peer that itself waits), it pings every peer
 * on the control channel and names those that do not answer within half a
 * second.  This file also holds the waits of the transport's own
 * collectives (zipcclWaitSlots), which use those queries.  Every idle poll of every wait answers pings (zipcclAnswerPings),
 * so the ranks that do not answer are stopped, hung, or outside ZipCCL.
 *
 * Left out: transports without a control channel (NCCL: no host-side
 * agreement; NCCL has no timeouts either); a tree for very many ranks (the exchange is all pairs:
 * one round, n-1 messages per rank, like the one-shot and all-to-all
 * designs themselves).
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_agree.h"
#include "comm_state.h"

#define W ZIPCCL_DESC_WORDS
enum { kDescVersion = 1 };
/* Tags on the control channel (the tag bound is >= 2^24-1: transport init). */
#define TAG_SEQ_MASK ((1 << 22) - 1)
#define TAG_DETAIL (1 << 22) /* the second exchange, AlltoAllv counts */
#define TAG_PING (1 << 23)
#define TAG_PONG ((1 << 23) | 1)
/* How long a liveness query waits for answers; how often idle polls look. */
static const double kQueryS = 0.5, kAnswerEveryS = 0.01;

double zipcclFirstNote(const struct zipcclComm* c) {
    return c->timeoutS > 0 && c->timeoutS / 2 < 10.0 ? c->timeoutS / 2 : 10.0;
}

void zipcclRankList(char* out, size_t cap, const char* flags, int n) {
    int count = 0;
    for (int i = 0; i < n; i++) count += flags[i] != 0;
    size_t len = (size_t)snprintf(out, cap, "%s", count == 1 ? "rank" : "ranks");
    const char* sep = " ";
    for (int i = 0; i < n && len < cap; i++) {
        if (!flags[i]) continue;
        int j = i;
        while (j + 1 < n && flags[j + 1]) j++;
        len += (size_t)(j > i ? snprintf(out + len, cap - len, "%s%d-%d", sep, i, j)
                              : snprintf(out + len, cap - len, "%s%d", sep, i));
        sep = ", ";
        i = j;
    }
}

/* Request slots: descriptors (receives, sends), pongs, a query's receives
 * and sends, one for the small collectives. */
#define PONG(c) (2 * ((c)->nranks - 1))
static int slotCount(int n) { return 2 * (n - 1) + n + 2 * n + 1; }

zipcclResult_t zipcclAgreeInit(struct zipcclComm* c) {
    zipcclAgree* a = &c->agree;
    memset(a, 0, sizeof *a);
    const size_t n = (size_t)c->nranks;
    a->out = calloc(2 * n * W + 3 * n + 5, sizeof(uint64_t));
    a->reqs = malloc((size_t)slotCount(c->nranks) * c->tp->reqSize);
    if (!a->out || !a->reqs) return zipcclSetError(zipcclSystemError, "zipcclCommInit: out of memory");
    a->in = a->out + n * W;
    a->pingBuf = a->in + n * W;
    a->pongBuf = a->pingBuf + 2 * n;
    a->detailBuf = a->pongBuf + n;
    a->query = zipcclSlot(c, a->reqs, PONG(c) + c->nranks);
    a->ctl = zipcclSlot(c, a->query, 2 * c->nranks);
    c->tp->reqInit(a->reqs, slotCount(c->nranks));
    return zipcclSuccess;
}

void zipcclAgreeFree(struct zipcclComm* c) {
    zipcclAgree* a = &c->agree;
    /* After a failure our sends of descriptors or answers may be pending and
     * read their buffers: keep them, as coll.c keeps the scratch buffers. */
    if (!c->broken) {
        free(a->out);
        free(a->reqs);
    }
    memset(a, 0, sizeof *a);
}

/* ---- descriptors --------------------------------------------------------------- */

static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
/* The term of "rank s sends `count` elements to rank d" in the digests. */
static uint64_t pairTerm(int s, int d, size_t count) {
    return mix64(mix64(((uint64_t)(uint32_t)s << 32) | (uint32_t)d) ^ (uint64_t)count);
}

static uint64_t shapeWord(const zipcclOp* op) {
    const zipcclStrategy_t s = op->cfg.strategy;
    const int ours = s == zipcclStrategyRaw || s == zipcclStrategyCompressed;
    const int reduce = op->kind == zipcclCollReduceScatter || op->kind == zipcclCollAllReduce;
    return (uint64_t)kDescVersion << 56 | (uint64_t)op->kind << 48 | (uint64_t)(op->dtype & 0xFF) << 40 |
           (uint64_t)s << 32 | (uint64_t)(ours ? zipcclAlgoRun(op->kind, op->cfg.algo) : 0) << 24 |
           (uint64_t)(reduce ? op->op & 0xFF : 0) << 16 | (uint64_t)(zipcclCodedOnDevice(op->comm) | op->comm->hasNet << 1) << 8;
}
static int fieldOf(uint64_t shape, int shift) { return (int)((shape >> shift) & 0xFF); }

zipcclResult_t zipcclAgreeStart(struct zipcclComm* c, const zipcclOp* op) {
    zipcclAgree* a = &c->agree;
    a->pending = 0;
    a->result = zipcclSuccess;
    a->detail[0] = '\0';
    if (!zipcclHostControl(c) || c->nranks == 1) return zipcclSuccess;
    const int n = c->nranks, r = c->rank, tag = (int)(++a->seq & TAG_SEQ_MASK);
    const int a2av = op->kind == zipcclCollAlltoAllv;
    uint64_t digest = 0;
    if (a2av)
        for (int p = 0; p < n; p++) digest ^= pairTerm(r, p, op->sendcounts[p]) ^ pairTerm(p, r, op->recvcounts[p]);
    const uint64_t shape = shapeWord(op);
    uint64_t most = a2av ? 0 : op->count;
    for (int p = 0; a2av && p < n; p++) {
        if (op->sendcounts[p] > most) most = op->sendcounts[p];
        if (op->recvcounts[p] > most) most = op->recvcounts[p];
    }
    for (int p = 0; p < n; p++) {
        uint64_t* d = a->out + (size_t)p * W;
        d[0] = shape;
        d[1] = a2av ? op->sendcounts[p] : op->count;
        d[2] = a2av ? op->recvcounts[p] : 0;
        d[3] = digest;
        d[4] = c->pieceBytes;
        d[5] = c->devPieceBytes;
        d[6] = most;
    }
    memcpy(a->in + (size_t)r * W, a->out + (size_t)r * W, W * sizeof(uint64_t));
    a->kind = op->kind;
    a->op = op;
    a->t0 = zipcclNow();
    const zipcclTransport* tp = c->tp;
    const size_t bytes = W * sizeof(uint64_t);
    zipcclResult_t res = zipcclSuccess;
    for (int j = 1; j < n && res == zipcclSuccess; j++) {
        int p = (r + j) % n;
        res = tp->irecv(c, zipcclChanControl, a->in + (size_t)p * W, bytes, p, tag, a->reqs, j - 1);
    }
    for (int j = 1; j < n && res == zipcclSuccess; j++) {
        int p = (r - j + n) % n; /* opposite order: each rank hears first from a different peer */
        res = tp->isend(c, zipcclChanControl, a->out + (size_t)p * W, bytes, p, tag, a->reqs, n - 1 + j - 1);
    }
    if (res != zipcclSuccess) {
        a->result = zipcclPrefixError(res, "%s: the call agreement", zipcclCollName(op->kind));
        snprintf(a->detail, sizeof a->detail, "%s", zipcclGetLastErrorDetail());
        return a->result;
    }
    a->pending = 1;
    return zipcclSuccess;
}

/* The values of one field on every rank as "AllReduce on rank 0, AllGather on
 * ranks 1-4" (the same text on every rank). */
static void describeField(char* out, size_t cap, const uint64_t* vals, int n,
                          void (*name)(char*, size_t, uint64_t)) {
    char done[n], mark[n], list[160], value[64];
    memset(done, 0, sizeof done);
    size_t len = 0;
    int groups = 0;
    out[0] = '\0';
    for (int i = 0; i < n && len < cap; i++) {
        if (done[i]) continue;
        for (int j = 0; j < n; j++) mark[j] = !done[j] && vals[j] == vals[i];
        for (int j = 0; j < n; j++) done[j] |= mark[j];
        if (++groups > 4) {
            len += (size_t)snprintf(out + len, cap - len, "; other values on other ranks");
            break;
        }
        zipcclRankList(list, sizeof list, mark, n);
        name(value, sizeof value, vals[i]);
        len += (size_t)snprintf(out + len, cap - len, "%s%s on %s", groups > 1 ? "; " : "", value, list);
    }
}
static void nameKind(char* o, size_t cap, uint64_t v) { snprintf(o, cap, "%s", zipcclCollName((zipcclCollKind_t)v)); }
static void nameDtype(char* o, size_t cap, uint64_t v) { snprintf(o, cap, "%s", zipcclTypeName((zipcclDataType_t)v)); }
static void nameStrategy(char* o, size_t cap, uint64_t v) { snprintf(o, cap, "%s", zipcclStrategyName((zipcclStrategy_t)v)); }
static void nameAlgo(char* o, size_t cap, uint64_t v) { snprintf(o, cap, "%s", zipcclAlgoName((zipcclAlgo_t)v)); }
static void nameOp(char* o, size_t cap, uint64_t v) { snprintf(o, cap, "%s", v == zipcclAvg ? "avg" : v == zipcclSum ? "sum" : "?"); }
static void nameCoding(char* o, size_t cap, uint64_t v) {
    snprintf(o, cap, "%s", v == 3 ? "on the device, over a device network (zipcclCommSetNet)"
                           : v ? "on the device (zipcclCommSetDevice, a coding table)" : "on the host");
}
static void nameElems(char* o, size_t cap, uint64_t v) { snprintf(o, cap, "%llu elements", (unsigned long long)v); }
static void nameBytes(char* o, size_t cap, uint64_t v) { snprintf(o, cap, "%llu bytes", (unsigned long long)v); }

static const char* countMeaning(zipcclCollKind_t kind) {
    switch (kind) {
    case zipcclCollAllGather: return "sendcount (elements of each rank's sendbuf)";
    case zipcclCollReduceScatter: return "recvcount (elements of each rank's recvbuf)";
    case zipcclCollAllReduce: return "count (elements of sendbuf and recvbuf)";
    default: return "count (elements per peer in sendbuf and recvbuf)";
    }
}

/* AlltoAllv's counts disagree somewhere (the digests say so on every rank):
 * each rank reports the first pair it receives wrongly, if any, to all; every
 * rank then names the same pair.  Only on failure, so it may take a round. */
static void a2avDetail(struct zipcclComm* c, const zipcclOp* op, char* out, size_t cap) {
    zipcclAgree* a = &c->agree;
    const int n = c->nranks, r = c->rank, tag = TAG_DETAIL | (int)(a->seq & TAG_SEQ_MASK);
    /* (found, sender, receiver, sent, expected); ours must outlive its sends */
    uint64_t* mine = a->detailBuf, all[n][5];
    memset(mine, 0, 5 * sizeof *mine);
    for (int s = 0; s < n && !mine[0]; s++) {
        uint64_t sent = a->in[(size_t)s * W + 1];
        if (sent != op->recvcounts[s]) mine[0] = 1, mine[1] = (uint64_t)s, mine[2] = (uint64_t)r, mine[3] = sent,
                                       mine[4] = op->recvcounts[s];
    }
    memcpy(all[r], mine, sizeof all[r]);
    const zipcclTransport* tp = c->tp;
    void* q = a->query; /* receives [0, n), sends [n, 2n) */
    zipcclResult_t res = zipcclSuccess;
    for (int p = 0; p < n && res == zipcclSuccess; p++) {
        if (p == r) continue;
        res = tp->irecv(c, zipcclChanControl, all[p], sizeof all[p], p, tag, q, p);
        if (res == zipcclSuccess) res = tp->isend(c, zipcclChanControl, mine, sizeof all[p], p, tag, q, n + p);
    }
    /* Every rank has reached this verdict; allow a few seconds at most. */
    const double limit = c->timeoutS > 0 && c->timeoutS < 5 ? c->timeoutS : 5, t0 = zipcclNow();
    int flag = 0;
    while (res == zipcclSuccess && !flag && zipcclNow() - t0 < limit) {
        if (tp->testAll(c, q, 2 * n, &flag) != zipcclSuccess) break;
        if (!flag) sched_yield();
    }
    int best = -1;
    for (int p = 0; flag && p < n; p++)
        if (all[p][0] && (best < 0 || all[p][2] < all[best][2] || (all[p][2] == all[best][2] && all[p][1] < all[best][1])))
            best = p;
    if (!flag) {
        tp->abandon(c, q, n, n);
        /* Our own pair, if we saw one; else what every rank knows. */
        if (mine[0]) memcpy(all[r], mine, sizeof all[r]), best = r;
    }
    if (best < 0) {
        snprintf(out, cap, "ranks disagree on the counts: some rank's recvcounts differ from what its peer "
                           "sends it (sendcounts); this rank's agree with its peers'");
        return;
    }
    const uint64_t* b = all[best];
    snprintf(out, cap, "ranks disagree on the counts: rank %llu sends %llu elements to rank %llu (its "
                       "sendcounts[%llu]), which expects %llu (its recvcounts[%llu])",
             (unsigned long long)b[1], (unsigned long long)b[3], (unsigned long long)b[2],
             (unsigned long long)b[2], (unsigned long long)b[4], (unsigned long long)b[1]);
}

/* All descriptors are in: the verdict, the same on every rank. */
static zipcclResult_t agreeCheck(struct zipcclComm* c, const zipcclOp* op) {
    zipcclAgree* a = &c->agree;
    const int n = c->nranks;
    uint64_t vals[n], digest = 0;
    const char* what = zipcclCollName(a->kind);
    char text[400];
    text[0] = '\0';
    /* The fields in the order that explains a disagreement best: the call
     * itself, its element type and how it is run, then its sizes. */
    static const struct { int shift; const char* label; void (*name)(char*, size_t, uint64_t); } fields[] = {
        {48, "collective called", nameKind}, {40, "dtype", nameDtype}, {32, "strategy", nameStrategy},
        {24, "design (zipcclAlgo_t)", nameAlgo}, {16, "reduction op", nameOp},
        {8, "place compressed calls are coded and how device buffers travel", nameCoding}};
    for (size_t f = 0; f < sizeof fields / sizeof fields[0] && !text[0]; f++) {
        int differ = 0;
        for (int s = 0; s < n; s++) {
            vals[s] = (uint64_t)fieldOf(a->in[(size_t)s * W], fields[f].shift);
            differ |= vals[s] != vals[0];
        }
        if (!differ) continue;
        char list[300];
        describeField(list, sizeof list, vals, n, fields[f].name);
        snprintf(text, sizeof text, "ranks disagree on the %s: %s", fields[f].label, list);
    }
    for (int s = 0; s < n; s++) digest ^= a->in[(size_t)s * W + 3];
    const int versions = fieldOf(a->in[0], 56);
    for (int s = 0; s < n && !text[0]; s++)
        if (fieldOf(a->in[(size_t)s * W], 56) != versions)
            snprintf(text, sizeof text, "ranks run different versions of ZipCCL's call agreement");
    static const int words[3] = {1, 4, 5}; /* the count (not AlltoAllv's), the piece sizes */
    for (int i = 0; i < 3 && !text[0]; i++) {
        const int w = words[i];
        if (w == 1 && a->kind == zipcclCollAlltoAllv) continue;
        int differ = 0;
        for (int s = 0; s < n; s++) {
            vals[s] = a->in[(size_t)s * W + w];
            differ |= vals[s] != vals[0];
        }
        if (!differ) continue;
        char list[300];
        describeField(list, sizeof list, vals, n, w == 1 ? nameElems : nameBytes);
        snprintf(text, sizeof text, "ranks disagree on the %s: %s",
                 w == 1   ? countMeaning(a->kind)
                 : w == 4 ? "piece size (ZIPCCL_PIECE_BYTES)"
                          : "piece size of calls coded on the device (ZIPCCL_DEVICE_PIECE_BYTES)",
                 list);
    }
    if (!text[0] && a->kind == zipcclCollAlltoAllv && digest != 0) a2avDetail(c, op, text, sizeof text);
    if (!text[0]) return zipcclSuccess;
    return zipcclSetError(zipcclMismatch, "%s on rank %d: %s", what, c->rank, text);
}

zipcclResult_t zipcclAgreeTest(struct zipcclComm* c, int* done) {
    zipcclAgree* a = &c->agree;
    *done = 1;
    if (!a->pending)
        return a->result == zipcclSuccess ? zipcclSuccess : zipcclSetError(a->result, "%s", a->detail);
    const int n = c->nranks;
    int flag = 0;
    zipcclResult_t res = c->tp->testAll(c, a->reqs, 2 * (n - 1), &flag);
    if (res == zipcclSuccess && !flag) {
        *done = 0;
        return zipcclSuccess;
    }
    a->pending = 0;
    a->result = res != zipcclSuccess ? zipcclPrefixError(res, "%s: the call agreement", zipcclCollName(a->kind))
                                     : agreeCheck(c, a->op);
    if (a->result != zipcclSuccess) snprintf(a->detail, sizeof a->detail, "%s", zipcclGetLastErrorDetail());
    return a->result;
}

/* What the agreement waits for: "rank 3 to enter the call (...)" when
 * descriptors are missing, else "rank 0 to take this rank's call
 * descriptor (...)" (a peer that gave up on the call, or is stopped). */
static int waitingFor(struct zipcclComm* c, char* out, size_t cap) {
    zipcclAgree* a = &c->agree;
    const int n = c->nranks, r = c->rank;
    char miss[n], late[n], list[200];
    int missing = 0, unsent = 0;
    memset(miss, 0, sizeof miss);
    memset(late, 0, sizeof late);
    const zipcclTransport* tp = c->tp;
    for (int j = 1; j < n; j++) {
        int flag = 0;
        tp->test(c, a->reqs, j - 1, &flag);
        missing += miss[(r + j) % n] = tp->reqActive(a->reqs, j - 1);
        tp->test(c, a->reqs, n - 1 + j - 1, &flag);
        unsent += late[(r - j + n) % n] = tp->reqActive(a->reqs, n - 1 + j - 1);
    }
    zipcclRankList(list, sizeof list, missing ? miss : late, n);
    if (missing)
        snprintf(out, cap, "%s to enter the call (no call descriptor from %s: stopped, hung, busy outside ZipCCL, "
                 "or in another call)", list, missing > 1 ? "them" : "it");
    else
        snprintf(out, cap, "%s to take this rank's call descriptor (%s the call, or %s stopped)", list,
                 unsent > 1 ? "they left" : "it left", unsent > 1 ? "are" : "is");
    return missing + unsent;
}

size_t zipcclAgreedMaxBlock(const struct zipcclComm* c) {
    const zipcclAgree* a = &c->agree;
    uint64_t most = 0;
    for (int s = 0; s < c->nranks; s++)
        if (a->in[(size_t)s * W + 6] > most) most = a->in[(size_t)s * W + 6];
    return (size_t)most;
}

zipcclResult_t zipcclAgreeWait(struct zipcclComm* c) {
    zipcclAgree* a = &c->agree;
    double note = zipcclFirstNote(c);
    for (;;) {
        int done = 0;
        zipcclResult_t res = zipcclAgreeTest(c, &done);
        if (done) return res;
        double waited = zipcclNow() - a->t0;
        if ((c->timeoutS > 0 && waited > c->timeoutS) || waited > note) {
            char who[400], query[300] = "";
            if (!waitingFor(c, who, sizeof who)) continue; /* it has just completed */
            if (c->timeoutS > 0 && waited > c->timeoutS) {
                /* Withdraw our receives; our sends keep their buffers (coll.c
                 * breaks the communicator). */
                c->tp->abandon(c, a->reqs, c->nranks - 1, c->nranks - 1);
                a->pending = 0;
                a->result = zipcclSetError(zipcclTimeout,
                                           "%s on rank %d: timed out after %.1f s (ZIPCCL_TIMEOUT_S) waiting for %s",
                                           zipcclCollName(a->kind), c->rank, waited, who);
                snprintf(a->detail, sizeof a->detail, "%s", zipcclGetLastErrorDetail());
                return a->result;
            }
            zipcclQueryPeers(c, query, sizeof query);
            fprintf(stderr, "zipccl: rank %d: %s still waiting after %.1f s (timeout %g s) for %s; %s\n",
                    c->rank, zipcclCollName(a->kind), waited, c->timeoutS, who, query);
            note *= 2;
        }
        zipcclIdle(c, waited);
    }
}

/* ---- liveness queries --------------------------------------------------------- */

void zipcclAnswerPings(struct zipcclComm* c) {
    zipcclAgree* a = &c->agree;
    if (!zipcclHostControl(c) || c->nranks == 1 || !a->reqs) return;
    double now = zipcclNow();
    if (now - a->lastAnswer < kAnswerEveryS) return;
    a->lastAnswer = now;
    const zipcclTransport* tp = c->tp;
    void* pongs = zipcclSlot(c, a->reqs, PONG(c));
    for (;;) {
        int p = -1;
        uint64_t q = 0;
        if (tp->poll(c, zipcclChanControl, TAG_PING, &q, sizeof q, &p) != zipcclSuccess || p < 0) return;
        int sent = 1;
        tp->test(c, pongs, p, &sent);
        if (!sent) continue; /* our last answer to it is still on its way */
        a->pongBuf[p] = q;
        tp->isend(c, zipcclChanControl, &a->pongBuf[p], sizeof q, p, TAG_PONG, pongs, p);
    }
}

void zipcclQueryPeers(struct zipcclComm* c, char* out, size_t cap) {
    zipcclAgree* a = &c->agree;
    const int n = c->nranks, r = c->rank;
    out[0] = '\0';
    if (!zipcclHostControl(c) || n == 1 || !a->reqs) return;
    const zipcclTransport* tp = c->tp;
    const uint64_t id = ++a->queryNo;
    void* q = a->query; /* receives [0, n), sends [n, 2n) */
    char silent[n];
    for (int p = 0; p < n; p++) {
        silent[p] = p != r;
        if (p == r) continue;
        a->pingBuf[2 * p] = id;
        tp->irecv(c, zipcclChanControl, &a->pingBuf[2 * p + 1], sizeof(uint64_t), p, TAG_PONG, q, p);
        tp->isend(c, zipcclChanControl, &a->pingBuf[2 * p], sizeof(uint64_t), p, TAG_PING, q, n + p);
    }
    const double t0 = zipcclNow();
    int left = n - 1;
    while (left > 0 && zipcclNow() - t0 < kQueryS) {
        for (int p = 0; p < n; p++) {
            int flag = 0;
            if (!tp->reqActive(q, p)) continue;
            tp->test(c, q, p, &flag);
            if (!flag) continue;
            if (a->pingBuf[2 * p + 1] == id) silent[p] = 0, left--;
            else /* an old answer */
                tp->irecv(c, zipcclChanControl, &a->pingBuf[2 * p + 1], sizeof(uint64_t), p, TAG_PONG, q, p);
        }
        a->lastAnswer = 0; /* peers querying at the same time wait for us too */
        zipcclAnswerPings(c);
        sched_yield();
    }
    for (int p = 0; p < n; p++) { /* sends that completed are gone; the rest are forgotten */
        int flag = 0;
        tp->test(c, q, n + p, &flag);
    }
    tp->abandon(c, q, n, n);
    if (left == 0) {
        snprintf(out, cap, "every other rank answers on this communicator (all wait inside ZipCCL)");
        return;
    }
    char who[200];
    zipcclRankList(who, sizeof who, silent, n);
    snprintf(out, cap, "%s %s not answer on this communicator (stopped, hung, or busy outside ZipCCL)", who,
             left == 1 ? "does" : "do");
}

/* ---- waits of the transport's own collectives ----------------------------------- */

void zipcclIdle(struct zipcclComm* c, double idleSeconds) {
    zipcclAnswerPings(c); /* rate-limited: a look every 10 ms at most */
    c->tp->idle(c, idleSeconds, -1);
}

zipcclResult_t zipcclWaitSlots(struct zipcclComm* c, void* reqs, int n, const char* what, double yieldS,
                               double* waitSeconds) {
    const zipcclTransport* tp = c->tp;
    double t0 = zipcclNow(), note = zipcclFirstNote(c);
    for (;;) {
        int flag = 0;
        zipcclResult_t res = tp->testAll(c, reqs, n, &flag);
        if (res != zipcclSuccess) return zipcclPrefixError(res, "%s", what);
        if (flag) break;
        double waited = zipcclNow() - t0;
        if (c->timeoutS > 0 && waited > c->timeoutS)
            return zipcclSetError(zipcclTimeout,
                                  "%s on rank %d: timed out after %.1f s (ZIPCCL_TIMEOUT_S) inside the "
                                  "transport's own collective (which does not say for whom; the warnings "
                                  "name the ranks that did not answer)",
                                  what, c->rank, waited);
        if (waited > note) {
            char query[300];
            zipcclQueryPeers(c, query, sizeof query);
            fprintf(stderr, "zipccl: rank %d: %s still waiting after %.1f s (timeout %g s) inside the "
                    "transport's own collective, which does not say for whom; %s\n",
                    c->rank, what, waited, c->timeoutS, query);
            note *= 2;
        }
        zipcclAnswerPings(c);
        tp->idle(c, waited, yieldS);
    }
    if (waitSeconds) *waitSeconds += zipcclNow() - t0;
    return zipcclSuccess;
}

zipcclResult_t zipcclAgreedAllreduce(struct zipcclComm* c, const double* in, double* out, int n, zipcclTpOp op,
                                     const char* what) {
    ZIPCCL_TRY(zipcclAgreeWait(c));
    ZIPCCL_TRY(c->tp->iallreduce(c, in, out, n, op, c->agree.ctl));
    return zipcclWaitSlots(c, c->agree.ctl, 1, what, -1, NULL);
}

/* The barrier that starts each of the switcher's measuring calls, so that
 * its time is measured as zipccl-bench (like nccl-tests) times calls: from
 * MPI_Barrier.  How the ranks leave the barrier moves what is measured.
 * AlltoAll(v) 4-64 KiB, 4 ranks, unthrottled emulated cluster, medians over
 * 20 runs per point:
 *   barrier before a measuring call   auto measured raw/native  auto settled on
 *   MPI_Ibarrier, waited yielding     0.99-1.06x                native 78 of 120
 *   MPI_Barrier                       0.85-0.93x                raw 96 of 120
 * while the benchmark's own calls had raw at 0.84-0.94x native's time.  An
 * Ibarrier waited by busy polling, or a dissemination barrier of our own,
 * measured like the Ibarrier (6 runs each); the Ibarrier followed by
 * MPI_Barrier, below, like MPI_Barrier (0.85-0.95x, raw 57 of 72; 12 runs).
 * A blocking barrier cannot time out, so an ibarrier waited with the
 * communicator's timeout comes first: once it completes on a rank, every
 * rank has entered this function and goes on into the blocking one, which
 * then waits for no rank that is elsewhere.  (A peer that dies in between
 * ends the job, as in any MPI call; one whose own wait times out at that
 * very moment breaks its communicator and returns the error.) */
zipcclResult_t zipcclAgreedBarrier(struct zipcclComm* c, const char* what) {
    ZIPCCL_TRY(zipcclAgreeWait(c));
    ZIPCCL_TRY(c->tp->ibarrier(c, c->agree.ctl));
    ZIPCCL_TRY(zipcclWaitSlots(c, c->agree.ctl, 1, what, -1, NULL));
    zipcclResult_t res = c->tp->barrier(c);
    return res == zipcclSuccess ? res : zipcclPrefixError(res, "%s", what);
}
