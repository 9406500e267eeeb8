/*
 * switcher.c — what an auto call goes through: the decision
 * (zipcclModelDecide: the cost model of tune_model.c, or the measured
 * selection of tune_explore.c on top), and everything that keeps the
 * model's inputs identical on every rank, which is what lets every rank
 * reach the same decision (a wrong choice across ranks would deadlock):
 *   - calibration at creation: the link by the transport's ping-pong and
 *     the codecs on this CPU, agreed over the ranks;
 *   - observations of calls pooled with one small all-reduce before they
 *     change the model: at an auto call that is a multiple of kAgreeEvery
 *     once kAgreeBytes of auto calls have passed since the last pooling;
 *   - AlltoAllv's size, which is rank-local: the calls decide from an
 *     agreed largest size, which the size words in our designs' message
 *     tags keep current, and for native an agreement every
 *     ZIPCCL_A2AV_AGREE_EVERY-th call (a2avTotal).
 *
 * Environment: ZIPCCL_CALIBRATE=0 skips measuring (defaults), ZIPCCL_LINK_GBPS
 * / ZIPCCL_LINK_ALPHA_US override the link (between nodes, on a
 * communicator whose ranks span several nodes), ZIPCCL_INTRA_GBPS /
 * ZIPCCL_INTRA_ALPHA_US declare the link inside a node (the model then
 * prices the hier designs on two levels), ZIPCCL_LOG=1 prints each
 * decision with its estimates on rank 0 (stderr), ZIPCCL_AUTO_EXPLORE=0
 * turns measured selection off.
 *
 * Left out: transports without host-side control (NCCL) use the defaults +
 * the env override, without refinement or measured selection, and run
 * AlltoAllv native under auto when they have several ranks (no size is
 * known to all of them without a device-side agreement).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_agree.h"
#include "comm_state.h"
#include "switcher.h"
#include "tune_explore.h"

/* Pooling observations is a blocking MPI_Allreduce inside an auto call:
 * ~250 us on the 4-rank emulated cluster, more than a whole 16 KiB
 * AlltoAll.  Small calls teach the model little (the link is refined only
 * from calls of kBetaMinBytes, the codec from 1 MB pooled), so the pooling
 * waits for kAgreeBytes of calls: every 2048 calls at 4 KiB, 128 at 64
 * KiB, 32 from 256 KiB (every 8 calls had cost ~10% on average at 4 KiB). */
enum { kAgreeEvery = 32 };
static const double kAgreeBytes = 8 << 20;
/* The smallest raw call (bytes this rank sent) whose time refines beta. */
static const double kBetaMinBytes = 4 << 20;

void zipcclModelDefaults(zipcclModel* m) {
    memset(m, 0, sizeof *m);
    zipcclTuneInit(&m->cost);
    /* A declared link (ZIPCCL_LINK_GBPS) says the link is not what this
     * process can measure (planning for another network, tests), so then
     * auto plans with the model unless measuring is asked for explicitly. */
    const char* e = getenv("ZIPCCL_AUTO_EXPLORE");
    const char* link = getenv("ZIPCCL_LINK_GBPS");
    m->explore = e && *e ? strcmp(e, "0") != 0 : !(link && atof(link) > 0);
}

static void applyEnv(zipcclModel* m) {
    const char* s = getenv("ZIPCCL_LINK_GBPS");
    if (s && atof(s) > 0) m->cost.beta = atof(s) * 1e9 / 8;
    s = getenv("ZIPCCL_LINK_ALPHA_US");
    if (s && atof(s) > 0) m->cost.alpha = atof(s) * 1e-6;
    /* the link inside a node (tune.h: the model then prices hier) */
    s = getenv("ZIPCCL_INTRA_GBPS");
    if (s && atof(s) > 0) m->cost.intraBeta = atof(s) * 1e9 / 8;
    s = getenv("ZIPCCL_INTRA_ALPHA_US");
    if (s && atof(s) > 0) m->cost.intraAlpha = atof(s) * 1e-6;
}

/* Codec throughput on a synthetic Gaussian bf16 buffer (sigma 0.02). */
static zipcclResult_t measureCodec(struct zipcclComm* c, double out[2 * ZIPCCL_MODEL_CODECS]) {
    const size_t n = 1 << 17; /* 256 KiB of bf16 */
    uint16_t* x = zipcclScratch(c, 0, n * 2 + zipcclCompressBound(n, zipcclBfloat16, 0) + n * 2);
    if (!x) return zipcclSetError(zipcclSystemError, "calibration: out of memory");
    char* frame = (char*)(x + n);
    uint16_t* back = (uint16_t*)(frame + zipcclCompressBound(n, zipcclBfloat16, 0));
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) { /* sum of 4 uniforms: close enough to a Gaussian */
        double u = 0;
        for (int k = 0; k < 4; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            u += (double)(s >> 11) * 0x1p-53;
        }
        zipcclFromFloat(x, i, (float)((u - 2.0) * 0.02 * 1.732), zipcclBfloat16);
    }
    for (int codec = 0; codec < ZIPCCL_MODEL_CODECS; codec++) {
        zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
        p.codec = zipcclTuneCodecs[codec];
        size_t size = 0, cnt = 0;
        double enc = 1e9, dec = 1e9;
        /* Best of three after a warm-up run (first touches, table set-up):
         * a shared machine's noise only ever makes a run slower. */
        for (int rep = 0; rep < 4; rep++) {
            double t0 = zipcclNow();
            ZIPCCL_TRY(zipcclCompress(x, n, zipcclBfloat16, frame, zipcclCompressBound(n, zipcclBfloat16, 0), &size, &p));
            double t1 = zipcclNow();
            ZIPCCL_TRY(zipcclDecompress(frame, size, back, n * 2, &cnt, zipcclBfloat16, NULL));
            double t2 = zipcclNow();
            if (rep) enc = fmin(enc, t1 - t0), dec = fmin(dec, t2 - t1);
        }
        out[2 * codec] = (double)(n * 2) / fmax(enc, 1e-6);
        out[2 * codec + 1] = (double)(n * 2) / fmax(dec, 1e-6);
    }
    return zipcclSuccess;
}

static int measuring(const struct zipcclComm* c) {
    const char* s = getenv("ZIPCCL_CALIBRATE");
    return !(s && !strcmp(s, "0")) && zipcclHostControl(c);
}

/* The transport's ping-pong between two ranks, then the maximum over all
 * of its zeros and rank 0's measurement, so every rank models the same link. */
static zipcclResult_t pingPong(struct zipcclComm* c, double* alpha, double* beta) {
    ZIPCCL_TRY(zipcclAgreeWait(c));
    double res[2] = {*alpha, *beta};
    ZIPCCL_TRY(c->tp->pingPong(c, &res[0], &res[1]));
    if (c->nranks >= 2) {
        if (c->rank != 0) res[0] = res[1] = 0;
        ZIPCCL_TRY(zipcclAgreedAllreduce(c, res, res, 2, zipcclTpMax, "calibration"));
    }
    *alpha = res[0];
    *beta = res[1];
    return zipcclSuccess;
}

zipcclResult_t zipcclModelLink(struct zipcclComm* c) {
    zipcclModel* m = &c->model;
    if (m->linkKnown) return zipcclSuccess;
    if (measuring(c)) ZIPCCL_TRY(pingPong(c, &m->cost.alpha, &m->cost.beta));
    applyEnv(m);
    m->linkKnown = 1;
    return zipcclSuccess;
}

zipcclResult_t zipcclModelCalibrate(struct zipcclComm* c) {
    zipcclModel* m = &c->model;
    double t0 = zipcclNow();
    ZIPCCL_TRY(zipcclModelLink(c));
    if (measuring(c)) {
        double thr[2 * ZIPCCL_MODEL_CODECS];
        ZIPCCL_TRY(measureCodec(c, thr));
        /* The slowest rank paces a pipelined collective; all ranks agree. */
        ZIPCCL_TRY(zipcclAgreedAllreduce(c, thr, thr, 2 * ZIPCCL_MODEL_CODECS, zipcclTpMin, "calibration"));
        for (int k = 0; k < ZIPCCL_MODEL_CODECS; k++) m->cost.enc[k] = thr[2 * k], m->cost.dec[k] = thr[2 * k + 1];
    }
    m->calibrated = 1;
    if (m->log && c->rank == 0)
        fprintf(stderr,
                "zipccl: calibrated in %.0f ms: alpha %.1f us, link %.0f MB/s, fast %.0f/%.0f MB/s, "
                "dense %.0f/%.0f MB/s, f3 %.0f/%.0f MB/s (enc/dec)\n",
                1e3 * (zipcclNow() - t0), m->cost.alpha * 1e6, m->cost.beta / 1e6, m->cost.enc[0] / 1e6, m->cost.dec[0] / 1e6,
                m->cost.enc[1] / 1e6, m->cost.dec[1] / 1e6, m->cost.enc[2] / 1e6, m->cost.dec[2] / 1e6);
    return zipcclSuccess;
}

/* ---- AlltoAllv's size ------------------------------------------------------------ */

/* AlltoAllv is the one collective whose size is rank-local, and agreeing on
 * it before every call would cost a collective, as much as a 4 KiB
 * AlltoAllv.  So calls decide from an agreed largest size, kept current
 * without a collective of its own where possible:
 * - our designs put each rank's size bucket into the tags of the messages
 *   every pair exchanges anyway (coll_algos.c, TAG_SIZE_SHIFT), so after
 *   such a call every rank knows the largest bucket, the same on all; if it
 *   is not the agreed size's, the next call agrees again, blocking;
 * - the others (native; or an MPI_TAG_UB too small for the word) start a
 *   non-blocking MPI_MAX of the size every ZIPCCL_A2AV_AGREE_EVERY-th such call, which
 *   progresses with the call's own messages and is complete when the next
 *   call starts (a2avStartAgreement).
 * The agreed size is the same on every rank, so any design may run, native
 * included; a call whose size lies in another bucket runs the agreed
 * bucket's design, for one call (tagged) or at most ZIPCCL_A2AV_AGREE_EVERY.  The size is
 * agreed before the call, blocking, for the first call and when the agreed
 * bucket would measure: a measurement must be filed under the size it was
 * taken at. */
static zipcclResult_t a2avTotal(struct zipcclComm* c, const zipcclOp* op, double mine, double* total) {
    zipcclModel* m = &c->model;
    if (c->tp->reqActive(m->a2avReq, 0)) {
        ZIPCCL_TRY(zipcclWaitSlots(c, m->a2avReq, 1, "AlltoAllv (auto: an earlier call's size agreement)", -1, NULL));
        m->a2avAgreed = m->a2avMax, m->a2avKnown = 1;
    }
    if (!m->a2avKnown || m->a2avStale || (zipcclExploreOn(c) && zipcclExploreMeasuresNext(zipcclExploreBucket(m, op, m->a2avAgreed)))) {
        ZIPCCL_TRY(zipcclAgreedAllreduce(c, &mine, total, 1, zipcclTpMax, "AlltoAllv (auto size agreement)"));
        m->a2avAgreed = *total, m->a2avKnown = 1, m->a2avStale = 0;
        m->a2avUntagged = 0; /* the next native call starts the next agreement */
    } else {
        *total = m->a2avAgreed;
    }
    return zipcclSuccess;
}

/* After the design is chosen: one that carries no size words keeps the
 * agreed size current by an agreement every ZIPCCL_A2AV_AGREE_EVERY-th such call,
 * counted from the last blocking agreement. */
static zipcclResult_t a2avStartAgreement(struct zipcclComm* c, const zipcclCallConfig_t* design, double mine) {
    zipcclModel* m = &c->model;
    if ((c->tagSizes && design->strategy != zipcclStrategyNative) || m->a2avUntagged++ % ZIPCCL_A2AV_AGREE_EVERY)
        return zipcclSuccess;
    ZIPCCL_TRY(zipcclAgreeWait(c)); /* a collective: only once the ranks agree on the call */
    m->a2avMine = mine;
    zipcclResult_t res = c->tp->iallreduce(c, &m->a2avMine, &m->a2avMax, 1, zipcclTpMax, m->a2avReq);
    return res == zipcclSuccess ? res : zipcclPrefixError(res, "AlltoAllv (auto size agreement)");
}

zipcclResult_t zipcclModelFinish(struct zipcclComm* c) {
    zipcclModel* m = &c->model;
    if (!m->a2avReq || !c->tp->reqActive(m->a2avReq, 0)) return zipcclSuccess;
    return zipcclWaitSlots(c, m->a2avReq, 1, "communicator destroy (AlltoAllv size agreement)", -1, NULL);
}

zipcclResult_t zipcclModelDecide(struct zipcclComm* c, const zipcclOp* op, zipcclCallConfig_t* out) {
    *out = op->cfg;
    c->model.probeBucket = NULL; /* a failed call may have left one */
    if (out->codec == zipcclCodecDefault) out->codec = zipcclCodecFast;
    if (out->algo == zipcclAlgoDefault) out->algo = zipcclAlgoDirect;
    if (out->strategy != zipcclStrategyAuto) return zipcclSuccess;

    zipcclModel* m = &c->model;
    if (!m->calibrated) ZIPCCL_TRY(zipcclModelCalibrate(c));
    const size_t esz = zipcclTypeSize(op->dtype);
    double total, mine = 0; /* mine: AlltoAllv's bytes sent by this rank */
    const int a2avAgree = op->kind == zipcclCollAlltoAllv && c->nranks > 1; /* NCCL returns below */
    switch (op->kind) {
    case zipcclCollAllGather: total = (double)(op->count * esz); break;
    case zipcclCollReduceScatter: total = (double)(op->count * esz * (size_t)c->nranks); break;
    case zipcclCollAlltoAll: total = (double)(op->count * esz * (size_t)c->nranks); break;
    case zipcclCollAlltoAllv: {
        total = mine = zipcclA2avSendBytes(op->sendcounts, c->nranks, esz);
        if (!zipcclHostControl(c) && c->nranks > 1) { /* see "Left out" above */
            out->strategy = zipcclStrategyNative;
            return zipcclSuccess;
        }
        if (a2avAgree) ZIPCCL_TRY(a2avTotal(c, op, mine, &total));
        break;
    }
    default: total = (double)(op->count * esz); break;
    }
    m->agreeBytes += total; /* the same on every rank (AlltoAllv: the agreed size) */
    if (zipcclExploreSettled(c, op, total, out)) return a2avAgree ? a2avStartAgreement(c, out, mine) : zipcclSuccess;
    zipcclTuneDesign cand[ZIPCCL_TUNE_NDESIGNS];
    int nc = 0;
    /* ranks on several nodes of several ranks each: the hier designs apply */
    const int nodeSize = c->nodeSize > 1 && c->nodeSize < c->nranks ? c->nodeSize : 0;
    const zipcclTuneQuery q = {op->kind, op->dtype, total, c->nranks, c->pieceBytes, c->tp->caps, c->codecOk,
                               nodeSize};
    int best = zipcclTuneDecide(&m->cost, &q, cand, &nc);
    const char* why = NULL;
    if (zipcclExploreOn(c)) why = zipcclExploreChoose(m, op, total, cand, nc, &best);
    out->strategy = cand[best].strategy;
    out->codec = cand[best].codec;
    out->algo = cand[best].algo;
    if (a2avAgree) ZIPCCL_TRY(a2avStartAgreement(c, out, mine));
    /* Log level 1: decisions that measure or change the design (the
     * model's, or a bucket's settled one); level 2: every decision. */
    int changed = cand[best].strategy != m->lastLogged.strategy || cand[best].codec != m->lastLogged.codec ||
                  cand[best].algo != m->lastLogged.algo || op->kind != m->lastLoggedKind;
    m->lastLogged = *out, m->lastLoggedKind = op->kind;
    if (m->log && c->rank == 0 && (m->log > 1 || changed || (why && strcmp(why, "exploit")))) {
        fprintf(stderr, "zipccl auto: %s %s %.0f KiB/rank n=%d -> %s/%s/%s (%s; est %.3f ms;", zipcclCollName(op->kind),
                zipcclTypeName(op->dtype), total / 1024, c->nranks, zipcclStrategyName(out->strategy),
                zipcclCodecName(out->codec), zipcclAlgoName(out->algo),
                why ? why : "model", cand[best].t * 1e3);
        for (int i = 0; i < nc; i++) fprintf(stderr, " %s %.3f", cand[i].name, cand[i].t * 1e3);
        const double* r = m->cost.ratio[op->kind][zipcclTuneDtypeIndex(op->dtype)];
        fprintf(stderr, "; link %.0f MB/s, ratio fast %.3f dense %.3f f3 %.3f)\n", m->cost.beta / 1e6, r[0], r[1], r[2]);
        if (why) {
            const zipcclTuneBucket* b = zipcclExploreBucket(m, op, total);
            fprintf(stderr, "zipccl auto: measured (bucket call %llu):", (unsigned long long)b->calls);
            for (int i = 0; i < b->n; i++) {
                /* to the ns: a 2-rank call of a few KiB takes ~10 us, and
                 * close designs' times then tie at 0.1 us */
                if (b->runs[i] && b->t[i] > 0) fprintf(stderr, " %s %.6f ms x%d", zipcclTuneDesigns[b->design[i]].name, b->t[i] * 1e3, b->runs[i]);
                else if (b->runs[i]) fprintf(stderr, " %s %.6f ms on rank 0 x%d", zipcclTuneDesigns[b->design[i]].name,
                                             zipcclExploreRunsMedian(b, i) * 1e3, b->runs[i]);
                else fprintf(stderr, " %s unmeasured", zipcclTuneDesigns[b->design[i]].name);
            }
            fprintf(stderr, "\n");
        }
    }
    return zipcclSuccess;
}

/* ---- refinement from what calls actually did ------------------------------------ */

/* Observations as tune.h lays them out (ZIPCCL_OBS_LEN). */
#define OBS_RATIO ZIPCCL_OBS_RATIO
#define OBS_LEN ZIPCCL_OBS_LEN

zipcclResult_t zipcclModelObserve(struct zipcclComm* c, const zipcclOp* op,
                                  const zipcclExecStats* st, int wasAuto) {
    zipcclModel* m = &c->model;
    double* obs = m->obs;
    _Static_assert(sizeof m->obs == OBS_LEN * sizeof(double), "obs layout");
    if (!zipcclHostControl(c)) return zipcclSuccess;
    int di = zipcclTuneDtypeIndex(op->dtype), ci = zipcclTuneCodecIndex(st->codec);
    if (st->strategy == zipcclStrategyCompressed && st->rawBytes) {
        double* o = obs + (((int)op->kind * 3 + di) * ZIPCCL_MODEL_CODECS + ci) * 2;
        o[0] += (double)st->rawBytes, o[1] += (double)st->wireBytes;
        obs[OBS_RATIO + 2 + 2 * ci] += (double)st->rawBytes * 2;
        obs[OBS_RATIO + 3 + 2 * ci] += st->codecSeconds;
    }
    /* The link's bandwidth from raw calls large enough for bytes to dominate
     * their time, less the model's latency of their n-1 messages: counting
     * small calls whole had taken an unthrottled link's 2.5 GB/s down to
     * 345 MB/s after a few hundred 16 KiB AlltoAlls. */
    if (st->strategy == zipcclStrategyRaw && (double)st->wireBytes >= kBetaMinBytes) {
        obs[OBS_RATIO] += (double)st->wireBytes;
        obs[OBS_RATIO + 1] += fmax(st->totalSeconds - st->codecSeconds - (c->nranks - 1) * m->cost.alpha, 1e-7);
    }
    if (!wasAuto) return zipcclSuccess;
    /* The largest AlltoAllv size moved to another bucket: agree on it at the
     * next call (the word is the same on every rank). */
    if (st->a2avSizeWord && st->a2avSizeWord - 1 != zipcclSizeBucket(m->a2avAgreed)) m->a2avStale = 1;
    if (m->probeBucket) ZIPCCL_TRY(zipcclExploreRecord(c, st->runSeconds)); /* only with zipcclTpHostControl */
    if (++m->autoCalls % kAgreeEvery || m->agreeBytes < kAgreeBytes) return zipcclSuccess;
    m->agreeBytes = 0;
    /* Same call index on every rank: pool, then update the shared model. */
    double pooled[OBS_LEN];
    ZIPCCL_TRY(zipcclAgreedAllreduce(c, obs, pooled, OBS_LEN, zipcclTpSum, "switcher (observation agreement)"));
    memset(obs, 0, sizeof m->obs);
    zipcclTuneObserve(&m->cost, pooled);
    applyEnv(m); /* an explicit link override stays in force */
    if (m->log > 1 && c->rank == 0)
        fprintf(stderr, "zipccl: model refined: link %.0f MB/s, fast %.0f/%.0f MB/s\n", m->cost.beta / 1e6,
                m->cost.enc[0] / 1e6, m->cost.dec[0] / 1e6);
    return zipcclSuccess;
}
