/*
 * switcher.c — strategy auto: per call, estimate the time of each design
 * (native; raw direct, ring or one-shot; compressed fast/dense direct or
 * ring, fast one-shot, f3 direct) with an alpha-beta-codec model and run
 * the cheapest.
 * NCCL's tuner is the model:
 *
 *   t(design) = messages * alpha
 *             + max(wireBytes / beta, codecBytes / codecThroughput)   (pipelined)
 *             + one piece of codec work (the pipeline fill)
 *             + reduction bytes / memory bandwidth                    (RS, AR)
 *
 * wireBytes for a compressed design is rawBytes / ratio, where the ratio is
 * the last observed ratio for (collective, dtype, codec), starting from the
 * Gaussian figures in DESIGN.md.  A wrong choice across ranks would
 * deadlock, so every model input is identical on all ranks: calibration
 * results are broadcast / all-reduced at creation, and observations from
 * calls are pooled with one small MPI_Allreduce before they change the
 * model: at an auto call that is a multiple of kAgreeEvery once kAgreeBytes
 * of auto calls have passed since the last pooling.  AlltoAllv's size is
 * rank-local: the calls decide from an agreed largest size, which the
 * size words in our designs' message tags keep current, and for native an
 * agreement every kA2avEvery-th call (a2avTotal).
 *
 * On a shared, CPU-bound machine the model's inputs are often wrong by more
 * than the gaps between designs, so on MPI communicators the model only
 * nominates: per (collective, dtype, floor(log2 bytes)) bucket a few
 * candidates (the fixed strategies' designs plus the model's plausible
 * others) are each run kRunsTiny, kRunsSmall or kRunsLarge times (close
 * contenders for the lead twice that, contendRuns), each such call
 * started on all ranks together (a barrier) and its time agreed across ranks
 * (the max, run by run, then the median of the runs), and then the fastest
 * measured design is run; the incumbent and a challenger (the runner-up
 * every other time, the other candidates in turn between) are re-measured
 * in pairs (first at the bucket's call firstReprobe; the next kReprobeEvery
 * calls after a pair that changed the incumbent, twice the spacing before,
 * at most kReprobeMost, after one that kept it) so a misled exploration is
 * corrected and drift is followed.
 * The measurements are agreed and the bucket's call sequence is the same on
 * all ranks, so the choice stays identical everywhere.
 *
 * Environment: ZIPCCL_CALIBRATE=0 skips measuring (defaults below),
 * ZIPCCL_LINK_GBPS / ZIPCCL_LINK_ALPHA_US override the link, ZIPCCL_LOG=1
 * prints each decision with its estimates on rank 0 (stderr),
 * ZIPCCL_AUTO_EXPLORE=0 turns measured selection off (model only); it is
 * off by default when ZIPCCL_LINK_GBPS declares the link.
 *
 * Left out: topology (every pair is assumed to have the same link); NCCL
 * communicators use defaults + the env override, without refinement or
 * measured selection, and run AlltoAllv native under auto when they have
 * several ranks (no size is known to all of them without a device-side
 * agreement).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_internal.h"

/* Pooling observations is a blocking MPI_Allreduce inside an auto call:
 * ~250 us on the 4-rank emulated cluster, more than a whole 16 KiB
 * AlltoAll.  Small calls teach the model little (the link is refined only
 * from calls of kBetaMinBytes, the codec from 1 MB pooled), so the pooling
 * waits for kAgreeBytes of calls: every 2048 calls at 4 KiB, 128 at 64
 * KiB, 32 from 256 KiB (every 8 calls had cost ~10% on average at 4 KiB). */
enum { kAgreeEvery = 32 };
static const double kAgreeBytes = 8 << 20;
/* Measured selection: runs per candidate before exploiting, the re-measure
 * spacing in bucket calls, and how far (x the model's best estimate) a
 * design beyond the fixed strategies' ones may be and still be tried.  A
 * re-measured pair costs two calls started from a barrier and one
 * agreement (~0.7 ms on the emulated cluster): every 64 calls that was ~7
 * us per 16 KiB call, 4% of its time.  So each pair that keeps the
 * incumbent doubles the spacing to the next (from kReprobeEvery, at most
 * kReprobeMost), and one that changes it brings it back to kReprobeEvery. */
enum { kReprobeEvery = 64, kReprobeMost = 1024 };
/* Runs per candidate while exploring: the median of 21 below kTinyBytes,
 * of 7 below kSmallBytes, of 5 above (larger calls cost more and vary
 * less).  Calls below 1 MiB take ~0.1-2 ms, and the shared 2-core machine
 * moves one design's time by 10-30% from call to call; below 128 KiB a
 * whole exploration of 7 runs per design lasted a few ms, about one
 * scheduler time slice, so one slow phase could mislead it.  auto against
 * the best of native, raw and compressed, AllGather, ReduceScatter,
 * AlltoAll(v) 4-64 KiB, 4 ranks unthrottled, 200 timed calls, 108 points
 * each: median 1.067x with 7 runs, 1.043x with 15, 1.032x with 21 (within 3%:
 * 28, 42, 51); docs/lab/auto_tuning.md.  From 1 MiB, 3 runs settled 10 Gbit/s
 * AllGather 64 MiB on raw in 2 of 3 sweep runs where native was 15% faster;
 * with 5, auto / fastest fixed design at 4-64 MiB (AllGather, AlltoAll(v),
 * 5 runs x 9 timed calls each) was 1.016x in the median against 1.019x
 * (mean 1.020 against 1.027, within 3%: 32 against 26 of 45;
 * docs/lab/data/auto_runs_large_ab.jsonl), for 2 more calls per candidate once
 * per bucket. */
enum { kRunsTiny = ZIPCCL_TUNE_RUNS, kRunsSmall = 7, kRunsLarge = 5 };
static const double kTinyBytes = 128 << 10, kSmallBytes = 1 << 20;
static int tuneRuns(double total) { return total < kTinyBytes ? kRunsTiny : total < kSmallBytes ? kRunsSmall : kRunsLarge; }
/* Close contenders: once every candidate has its runs, those whose agreed
 * time is within m->contend (ZIPCCL_AUTO_CONTEND, 10% by default) of the
 * fastest's, the fastest included, are run as many times again when there
 * are two or more, and the bucket ranks them by the lower median of all
 * their runs.  The runs that decide between designs a few percent apart
 * need the most samples, and they are cheap: each costs at most 10% (the
 * margin) more than the best design's call.  Offline, on 240 recorded explorations at
 * 4-256 KiB (docs/lab/data/auto_explore_ranking.jsonl, scripts/
 * auto_rank_check.py): with 5 runs the mean regret (timed median of the
 * pick over the fastest candidate's) went from 1.028 to 1.022 and picks
 * more than 3% off from 25% to 19%, for ~7 more calls per bucket; with 7
 * runs from 1.023 to 1.014 and 21% to 15% for ~11; doubling every
 * candidate's runs instead gave 1.019 and 1.018 for 25 and 35 more calls.
 * Not below kTinyBytes, whose 21 runs fill the run table. */
static int contendRuns(int target) { return 2 * target <= ZIPCCL_TUNE_RUNS ? 2 * target : target; }
/* The smallest raw call (bytes this rank sent) whose time refines beta. */
static const double kBetaMinBytes = 4 << 20;
/* The one-shot design (AllGather, AllReduce; MPI) saves latency steps for
 * more bytes on the wire (AllReduce: n-1 whole buffers per rank) or more
 * concurrent flows per link (AllGather), which only small messages win by.
 * It is a candidate below kSmallBytes of contribution per rank for
 * AllGather, below kOneShotArBytes of buffer for AllReduce: in the repeated
 * sweeps of docs/lab/auto_tuning.md (4 ranks, 10 Gbit/s and unthrottled) one-shot
 * AllGather was 1.13-1.35x faster than every other design up to 1 MiB but at
 * 256 KiB (0.98-1.00x), one-shot AllReduce 1.29-1.72x at 4 and 16 KiB and
 * 0.53-0.60x from 64 KiB. */
static const double kOneShotArBytes = 64 << 10;
static int oneShotFits(const struct zipcclComm* c, zipcclCollKind_t kind, double total) {
    if (!(c->tp->caps & zipcclTpOneShot)) return 0;
    if (kind == zipcclCollAllGather) return total < kSmallBytes;
    return kind == zipcclCollAllReduce && total < kOneShotArBytes;
}
/* A bucket's first re-measured pair comes soon after its longest possible
 * exploration without contenders (bucket calls 34 and 35 with 5 runs, 46
 * and 47 with 7, 130 and 131 with 21), or 4 calls after the contenders'
 * runs end (tuneRecord); tuneRecord schedules the ones after it (pairAt). */
static int firstReprobe(int runs) { return ZIPCCL_TUNE_CANDS * runs + 4; }
/* A number drawn from x (splitmix64's finaliser): the same on every rank. */
static uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
/* Which of the re-measured pair bucket call `call` runs: 0 the challenger
 * (pairChallenger), 1 the incumbent, -1 neither (a bucket of one candidate
 * has no pair).
 * Which of the two goes first is drawn per re-measure, so that neither
 * always follows the same call (see tuneChoose). */
static int reprobePhase(const zipcclTuneBucket* b, uint64_t call) {
    return b->n <= 1 || call < b->pairAt || call > b->pairAt + 1 ? -1 : (int)(call - b->pairAt);
}
static int reprobeSlot(const zipcclTuneBucket* b, uint64_t call) {
    const int p = reprobePhase(b, call);
    return p < 0 ? -1 : p ^ (int)(mix64(b->pairAt) & 1);
}
/* The design a re-measured pair holds against the incumbent `first`: the
 * runner-up `second` in every other pair (pairs 0, 2, ...), and in the ones
 * between each of the other candidates in turn (bucket order).  With the
 * runner-up alone, a design that a misled exploration (or a slow phase
 * since) ranked third or lower was never measured again, so neither noise
 * nor drift could bring it back; one such call costs at most what a slow
 * candidate costs once per pair (pairs come every 64-1024 bucket calls). */
static int pairChallenger(const zipcclTuneBucket* b, int first, int second) {
    if (b->n <= 2 || b->pairs % 2 == 0) return second;
    int k = (b->pairs / 2) % (b->n - 2); /* the k-th candidate that is neither */
    for (int i = 0; i < b->n; i++)
        if (i != first && i != second && k-- == 0) return i;
    return second; /* not reached */
}
/* AlltoAllv: an auto call in this many that runs without size words
 * (native) starts a size agreement (a2avTotal).  Every call did at first,
 * which cost 20-30 us per call (4 ranks, 4-256 KiB, unthrottled emulated
 * cluster, against 60-350 us calls); one call in 8 of every design still
 * left auto 1.050x the best of native and raw there, size words 1.030x,
 * and no agreement at all 1.021x (medians of 30 runs, docs/lab/auto_tuning.md). */
enum { kA2avEvery = 8 };

int zipcclAutoWarmupCalls(zipcclCollKind_t kind, size_t bytes) {
    const int calls = firstReprobe(tuneRuns((double)bytes)) + 2; /* through the first re-measured pair */
    return kind == zipcclCollAlltoAllv ? calls + kA2avEvery : calls;
}
static const double kPlausible = 2.0;
/* Model constants per compressed frame: frame + chunk headers and chunk
 * table (16 + 8 + 4 bytes for one chunk), and encode + decode overhead. */
static const double kFrameHeaderBytes = 28, kFrameCodecS = 2e-6;

static int dtypeIndex(zipcclDataType_t dt) {
    return dt == zipcclBfloat16 ? 0 : dt == zipcclFloat16 ? 1 : 2;
}
/* The model's codecs, in its arrays' order. */
static const zipcclCodec_t kModelCodecs[ZIPCCL_MODEL_CODECS] = {zipcclCodecFast, zipcclCodecDense, zipcclCodecF3};
static int codecIndex(zipcclCodec_t codec) {
    return codec == zipcclCodecDense ? 1 : codec == zipcclCodecF3 ? 2 : 0;
}

void zipcclModelDefaults(zipcclModel* m) {
    memset(m, 0, sizeof *m);
    m->alpha = 5e-6; /* shared memory-ish; calibration replaces these */
    m->beta = 5e9;
    static const double enc0[ZIPCCL_MODEL_CODECS] = {1.0e9, 0.3e9, 1.5e9};
    static const double dec0[ZIPCCL_MODEL_CODECS] = {1.5e9, 0.4e9, 2.0e9};
    memcpy(m->enc, enc0, sizeof enc0);
    memcpy(m->dec, dec0, sizeof dec0);
    m->memBw = 4e9;
    /* raw/wire on Gaussian data (fast, dense, f3): DESIGN.md limits, a bit
     * below the ideal; f3 below fast (docs/lab/collectives_history.md: 1.43 vs 1.47, bf16) */
    static const double r0[3][ZIPCCL_MODEL_CODECS] = {{1.45, 1.48, 1.42}, {1.14, 1.16, 1.12}, {1.18, 1.19, 1.16}};
    for (int k = 0; k < zipcclNumCollKinds; k++)
        for (int d = 0; d < 3; d++)
            for (int c = 0; c < ZIPCCL_MODEL_CODECS; c++) m->ratio[k][d][c] = r0[d][c];
    /* A declared link (ZIPCCL_LINK_GBPS) says the link is not what this
     * process can measure (planning for another network, tests), so then
     * auto plans with the model unless measuring is asked for explicitly. */
    const char* e = getenv("ZIPCCL_AUTO_EXPLORE");
    const char* link = getenv("ZIPCCL_LINK_GBPS");
    m->explore = e && *e ? strcmp(e, "0") != 0 : !(link && atof(link) > 0);
}

static void applyEnv(zipcclModel* m) {
    const char* s = getenv("ZIPCCL_LINK_GBPS");
    if (s && atof(s) > 0) m->beta = atof(s) * 1e9 / 8;
    s = getenv("ZIPCCL_LINK_ALPHA_US");
    if (s && atof(s) > 0) m->alpha = atof(s) * 1e-6;
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
        p.codec = kModelCodecs[codec];
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
    return !(s && !strcmp(s, "0")) && (c->tp->caps & zipcclTpHostControl);
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
    if (measuring(c)) ZIPCCL_TRY(pingPong(c, &m->alpha, &m->beta));
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
        for (int k = 0; k < ZIPCCL_MODEL_CODECS; k++) m->enc[k] = thr[2 * k], m->dec[k] = thr[2 * k + 1];
    }
    m->calibrated = 1;
    if (m->log && c->rank == 0)
        fprintf(stderr,
                "zipccl: calibrated in %.0f ms: alpha %.1f us, link %.0f MB/s, fast %.0f/%.0f MB/s, "
                "dense %.0f/%.0f MB/s, f3 %.0f/%.0f MB/s (enc/dec)\n",
                1e3 * (zipcclNow() - t0), m->alpha * 1e6, m->beta / 1e6, m->enc[0] / 1e6, m->dec[0] / 1e6,
                m->enc[1] / 1e6, m->dec[1] / 1e6, m->enc[2] / 1e6, m->dec[2] / 1e6);
    return zipcclSuccess;
}

/* ---- the estimate ------------------------------------------------------------ */

typedef struct {
    zipcclStrategy_t strategy;
    zipcclCodec_t codec;
    zipcclAlgo_t algo;
    const char* name; /* for the log */
    double t;
} Design;

/* Bytes this rank sends (raw), encodes, decodes and reduces for one design.
 * `block` = bytes of one rank's share, `total` = bytes of one rank's input. */
static double estimate(const zipcclModel* m, const struct zipcclComm* c, zipcclCollKind_t kind,
                       zipcclDataType_t dt, double total, Design* d) {
    const int n = c->nranks;
    const double n1 = n - 1, esz = (double)zipcclTypeSize(dt);
    double block = kind == zipcclCollAllGather ? total : total / n;
    double send = 0, enc = 0, dec = 0, red = 0, msgs = n1, pipeSteps = 1;
    int ring = d->algo == zipcclAlgoRing, oneshot = d->algo == zipcclAlgoOneShot;
    if (oneshot) msgs = 1; /* its n-1 messages go out together: one latency */
    switch (kind) {
    case zipcclCollAllGather: send = block * n1, enc = block, dec = block * n1; break;
    case zipcclCollAlltoAll:
    case zipcclCollAlltoAllv: send = total * n1 / n, enc = send, dec = send; break;
    case zipcclCollReduceScatter:
    case zipcclCollAllReduce:
        if (oneshot) { /* AllReduce: the whole buffer to every peer, every rank reduces all of it */
            block = total, send = total * n1, enc = total, dec = total * n1, red = total * n * (4 / esz) * 2;
            break;
        }
        /* the ring carries fp32 partials after the first hop */
        send = ring ? block * (1 + (n1 - 1) * 4 / esz) : block * n1;
        enc = send, dec = send, red = block * n * (4 / esz) * 2;
        if (ring) pipeSteps = n1;
        if (kind == zipcclCollAllReduce) {
            send += block * n1, enc += block, dec += block * n1, msgs *= 2;
        }
        break;
    default: break;
    }
    double t;
    if (d->strategy == zipcclStrategyNative) {
        /* MPI's own algorithms: bandwidth-optimal for large messages,
         * logarithmic in messages for small ones; bf16/fp16 sums pay for
         * the user op's per-element conversions. */
        t = ceil(log2((double)n)) * m->alpha + send / m->beta;
        if (red > 0) t += red / m->memBw * (esz == 2 ? 2 : 1);
    } else {
        double piece = fmin((double)c->pieceBytes, block);
        double pieces = ceil(block / fmax((double)c->pieceBytes, 1));
        t = (msgs * fmax(pieces, 1)) * m->alpha + red / m->memBw;
        if (d->strategy == zipcclStrategyRaw) {
            t += send / m->beta + (pipeSteps - 1) * piece / m->beta;
        } else {
            const int ci = codecIndex(d->codec);
            double ratio = m->ratio[kind][dtypeIndex(dt)][ci], encBw = m->enc[ci], decBw = m->dec[ci];
            /* plus per frame: its headers on the wire and a fixed codec cost
             * (~1 us per encode or decode of a 4 KiB frame in zipccl-bench's
             * codec_us), which is what keeps tiny messages raw */
            double frames = msgs * fmax(pieces, 1);
            double wire = (send / ratio + frames * kFrameHeaderBytes) / m->beta;
            double codec = enc / encBw + dec / decBw + frames * kFrameCodecS;
            if (ring) /* every hop waits for one piece to arrive, decode and re-encode */
                t += fmax(wire, codec) + pipeSteps * piece * (1 / encBw + 1 / decBw + 1 / ratio / m->beta);
            else /* two stages over P pieces: the slower one's whole, the faster one's 1/P */
                t += fmax(wire, codec) + fmin(wire, codec) / fmax(pieces, 1);
        }
    }
    d->t = t;
    return t;
}

/* ---- measured selection --------------------------------------------------------- */

/* Every design auto may run; the bucket tables store indices into this. */
enum { kNumDesigns = 10 };
static const Design kDesigns[kNumDesigns] = {
    {zipcclStrategyNative, zipcclCodecFast, zipcclAlgoDirect, "native", 0},
    {zipcclStrategyRaw, zipcclCodecFast, zipcclAlgoDirect, "raw", 0},
    {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoDirect, "compressed/fast", 0},
    {zipcclStrategyCompressed, zipcclCodecDense, zipcclAlgoDirect, "compressed/dense", 0},
    {zipcclStrategyRaw, zipcclCodecFast, zipcclAlgoRing, "raw/ring", 0},
    {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoRing, "compressed/fast/ring", 0},
    {zipcclStrategyCompressed, zipcclCodecDense, zipcclAlgoRing, "compressed/dense/ring", 0},
    {zipcclStrategyRaw, zipcclCodecFast, zipcclAlgoOneShot, "raw/oneshot", 0},
    {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoOneShot, "compressed/fast/oneshot", 0},
    {zipcclStrategyCompressed, zipcclCodecF3, zipcclAlgoDirect, "compressed/f3", 0},
};

static int designId(const Design* d) {
    for (int i = 0; i < kNumDesigns; i++)
        if (kDesigns[i].strategy == d->strategy && kDesigns[i].codec == d->codec && kDesigns[i].algo == d->algo)
            return i;
    return -1;
}

/* Does auto choose by measuring (tuneChoose), or by the model alone? */
static int measuredSelection(const struct zipcclComm* c) {
    return c->model.explore && (c->tp->caps & zipcclTpHostControl) && c->nranks > 1;
}

static zipcclTuneBucket* bucketAt(zipcclModel* m, zipcclCollKind_t kind, zipcclDataType_t dtype, double total) {
    return &m->tune[kind][dtypeIndex(dtype)][zipcclSizeBucket(total)];
}
static zipcclTuneBucket* tuneBucket(zipcclModel* m, const zipcclOp* op, double total) {
    return bucketAt(m, op->kind, op->dtype, total);
}

/* The candidates of a new bucket: the designs of the fixed strategies
 * (native where allowed, raw, compressed with the default fast/direct), so
 * auto can always match the best of them, then the model's other designs
 * cheapest first while within kPlausible of its best estimate. */
static void tuneSetup(zipcclTuneBucket* b, double total, const Design* cand, int nc, int best) {
    int order[kNumDesigns];
    for (int i = 0; i < nc; i++) order[i] = i;
    for (int i = 1; i < nc; i++) /* insertion sort by estimate; ties keep table order */
        for (int j = i; j > 0 && cand[order[j]].t < cand[order[j - 1]].t; j--) {
            int x = order[j];
            order[j] = order[j - 1], order[j - 1] = x;
        }
    b->n = 0, b->pairs = 0;
    b->target = tuneRuns(total);
    b->pairAt = (uint64_t)firstReprobe(b->target), b->pairEvery = kReprobeEvery;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nc && b->n < ZIPCCL_TUNE_CANDS; i++) {
            int id = designId(&cand[order[i]]);
            int fixed = id <= 2; /* native, raw, compressed/fast direct */
            if (pass == 0 ? !fixed : (fixed || cand[order[i]].t > kPlausible * cand[best].t)) continue;
            b->design[b->n] = id, b->want[b->n] = b->target, b->runs[b->n] = 0, b->t[b->n] = 0, b->last[b->n] = 0;
            b->n++;
        }
}

/* The candidate with the smallest agreed time (the incumbent), and in
 * *second the next one (-1 in a bucket of one candidate). */
static int fastest(const zipcclTuneBucket* b, int* second) {
    int first = 0, next = -1;
    for (int i = 1; i < b->n; i++)
        if (b->t[i] < b->t[first]) first = i;
    for (int i = 0; i < b->n; i++)
        if (i != first && (next < 0 || b->t[i] < b->t[next])) next = i;
    if (second) *second = next;
    return first;
}

/* Will the bucket's next auto call be measured (exploration not complete, or
 * a re-measure due)?  tuneChoose's rule, without choosing. */
static int bucketMeasuresNext(const zipcclTuneBucket* b) {
    if (b->n == 0) return 1;
    for (int i = 0; i < b->n; i++)
        if (b->runs[i] < b->want[i]) return 1;
    return reprobeSlot(b, b->calls) >= 0;
}

/* Pick the design for an auto call from the bucket's measurements; sets
 * m->probeBucket when this call is to be measured.  Returns a word for the
 * log ("explore", "reprobe", "exploit"). */
static const char* tuneChoose(zipcclModel* m, const zipcclOp* op, double total, const Design* cand, int nc,
                              int* best) {
    zipcclTuneBucket* b = tuneBucket(m, op, total);
    if (b->n == 0) tuneSetup(b, total, cand, nc, *best);
    uint64_t call = b->calls++;
    int pick = -1;
    const char* why = "exploit";
    /* Round by round (fewest runs first): the bucket's first calls also pay
     * for first touches of buffers and connections, and a burst of load on
     * the machine lasts a few calls; spreading each design's runs apart keeps
     * both from landing on all the runs of one design.  The first round goes
     * in the bucket's order (tuneSetup), so its first call runs the fixed
     * strategy's design the model rates best;
     * each later round in an order drawn from the round's number (alike on
     * all ranks): the call before moves a call's time by a few percent
     * (zipccl-bench's roundOrder), and a fixed order would put each design
     * behind the same predecessor in every run. */
    uint64_t key = 0;
    for (int i = 0; i < b->n; i++) {
        if (b->runs[i] >= b->want[i]) continue;
        uint64_t ki = b->runs[i] ? mix64(((uint64_t)b->runs[i] << 8) + (uint64_t)i) : (uint64_t)i;
        if (pick < 0 || b->runs[i] < b->runs[pick] || (b->runs[i] == b->runs[pick] && ki < key))
            pick = i, key = ki, why = "explore";
    }
    const int exploring = pick >= 0;
    int second;
    const int first = fastest(b, &second);
    /* Re-measure a challenger and the incumbent: first soon after the
     * exploration (a burst of load may have misled it), then periodically. */
    const int slot = pick < 0 ? reprobeSlot(b, call) : -1;
    if (slot >= 0) pick = slot ? first : pairChallenger(b, first, second), why = "reprobe";
    const int pairEnds = slot >= 0 && reprobePhase(b, call) == 1; /* agreed after the pair's second call */
    if (pick >= 0) {
        m->probeBucket = b, m->probeCand = pick;
        /* Agree once the exploration is complete or the re-measured pair is
         * in, not after every measuring call: an agreement leaves the ranks
         * unevenly (each measuring call is aligned by its own barrier). */
        int left = 0; /* exploration runs still to do, this one included */
        for (int i = 0; i < b->n; i++) left += b->runs[i] < b->want[i] ? b->want[i] - b->runs[i] : 0;
        m->probeAgree = exploring ? left == 1 : pairEnds;
    } else {
        pick = first;
    }
    for (int i = 0; i < nc; i++)
        if (designId(&cand[i]) == b->design[pick]) *best = i;
    return why;
}

/* The lower median of v[0..k), k <= ZIPCCL_TUNE_RUNS (of 3: the middle; of
 * 2: the smaller, since the first run pays for first touches). */
static double lowerMedian(const double* v, int k) {
    double s[ZIPCCL_TUNE_RUNS];
    for (int a = 0; a < k; a++) {
        int j = a;
        for (; j > 0 && s[j - 1] > v[a]; j--) s[j] = s[j - 1];
        s[j] = v[a];
    }
    return s[(k - 1) / 2];
}

/* Candidate i's time from the runs it has (at most the last b->want[i]). */
static double runsMedian(const zipcclTuneBucket* b, int i) {
    return lowerMedian(b->seen[i], b->runs[i] < b->want[i] ? b->runs[i] : b->want[i]);
}

/* After the first round of exploration is agreed: give the close contenders
 * their extra runs (contendRuns).  Returns whether any were given. */
static int addContenderRuns(const struct zipcclComm* c, zipcclTuneBucket* b) {
    const int first = fastest(b, NULL), more = contendRuns(b->target);
    if (more == b->target || c->model.contend <= 0) return 0;
    const double limit = (1 + c->model.contend) * b->t[first];
    int close = 0;
    for (int q = 0; q < b->n; q++) close += q != first && b->t[q] <= limit;
    if (!close) return 0;
    for (int q = 0; q < b->n; q++)
        if (b->t[q] <= limit) b->want[q] = more;
    if (c->model.log && c->rank == 0) {
        fprintf(stderr, "zipccl auto: close contenders (within %.0f%% of %.3f ms):", 100 * c->model.contend,
                b->t[first] * 1e3);
        for (int q = 0; q < b->n; q++)
            if (b->want[q] == more) fprintf(stderr, " %s %.3f", kDesigns[b->design[q]].name, b->t[q] * 1e3);
        fprintf(stderr, "; %d runs each\n", more);
    }
    return 1;
}

/* Fold one measuring call's wall time into the bucket.  Measuring calls
 * start together on all ranks (zipcclModelDecide ends them with a barrier), so a
 * call's cost is its time on the slowest rank, as for the calls that follow
 * and as zipccl-bench reports it.  A design's time is the lower median of
 * its last b->want[i] agreed runs:
 * - exploration: at its end the runs are agreed run by run (max over ranks).
 *   The minimum, used once, favoured designs whose time varies most (a CI
 *   run settled a 1 MiB fp32 ReduceScatter on a design whose median measured
 *   2.1x the best's);
 * - re-measured pair: agreed the same way once the incumbent's call is in;
 *   each new run replaces the design's oldest, so one noisy run cannot
 *   overturn a clear exploration, two that agree can. */
static zipcclResult_t tuneRecord(struct zipcclComm* c, double seconds) {
    zipcclModel* m = &c->model;
    zipcclTuneBucket* b = m->probeBucket;
    int i = m->probeCand;
    m->probeBucket = NULL;
    const int exploring = b->runs[i] < b->want[i], slot = b->runs[i] % b->want[i];
    b->runs[i]++;
    if (exploring) b->seen[i][slot] = seconds;
    else b->last[i] = seconds;
    if (!m->probeAgree) return zipcclSuccess;
    if (exploring) {
        double all[ZIPCCL_TUNE_CANDS][ZIPCCL_TUNE_RUNS];
        ZIPCCL_TRY(zipcclAgreedAllreduce(c, &b->seen[0][0], &all[0][0], b->n * ZIPCCL_TUNE_RUNS, zipcclTpMax,
                                         "switcher (measured time agreement)"));
        memcpy(b->seen, all, (size_t)b->n * sizeof all[0]);
    } else {
        double all[ZIPCCL_TUNE_CANDS];
        ZIPCCL_TRY(zipcclAgreedAllreduce(c, b->last, all, b->n, zipcclTpMax, "switcher (measured time agreement)"));
        for (int q = 0; q < b->n; q++) {
            if (all[q] > 0) b->seen[q][(b->runs[q] - 1) % b->want[q]] = all[q];
            b->last[q] = 0;
        }
    }
    const int before = fastest(b, NULL), firstRound = b->t[0] == 0; /* no time agreed yet */
    for (int q = 0; q < b->n; q++) b->t[q] = lowerMedian(b->seen[q], b->want[q]);
    if (exploring) { /* exploration agreed: contenders next, or the first pair 4 calls on */
        if (firstRound && addContenderRuns(c, b)) return zipcclSuccess;
        if (b->pairAt < b->calls + 4) b->pairAt = b->calls + 4;
    } else { /* the re-measured pair is in: when is the next one */
        b->pairs++;
        const int doubled = 2 * b->pairEvery < kReprobeMost ? 2 * b->pairEvery : kReprobeMost;
        b->pairEvery = fastest(b, NULL) == before ? doubled : kReprobeEvery;
        b->pairAt += (uint64_t)b->pairEvery;
    }
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
 *   non-blocking MPI_MAX of the size every kA2avEvery-th such call, which
 *   progresses with the call's own messages and is complete when the next
 *   call starts (a2avStartAgreement).
 * The agreed size is the same on every rank, so any design may run, native
 * included; a call whose size lies in another bucket runs the agreed
 * bucket's design, for one call (tagged) or at most kA2avEvery.  The size is
 * agreed before the call, blocking, for the first call and when the agreed
 * bucket would measure: a measurement must be filed under the size it was
 * taken at. */
static zipcclResult_t a2avTotal(struct zipcclComm* c, const zipcclOp* op, double mine, double* total) {
    zipcclModel* m = &c->model;
    if (c->tp->reqActive(m->a2avReq, 0)) {
        ZIPCCL_TRY(zipcclWaitSlots(c, m->a2avReq, 1, "AlltoAllv (auto: an earlier call's size agreement)", -1, NULL));
        m->a2avAgreed = m->a2avMax, m->a2avKnown = 1;
    }
    if (!m->a2avKnown || m->a2avStale || (measuredSelection(c) && bucketMeasuresNext(tuneBucket(m, op, m->a2avAgreed)))) {
        ZIPCCL_TRY(zipcclAgreedAllreduce(c, &mine, total, 1, zipcclTpMax, "AlltoAllv (auto size agreement)"));
        m->a2avAgreed = *total, m->a2avKnown = 1, m->a2avStale = 0;
        m->a2avUntagged = 0; /* the next native call starts the next agreement */
    } else {
        *total = m->a2avAgreed;
    }
    return zipcclSuccess;
}

/* After the design is chosen: one that carries no size words keeps the
 * agreed size current by an agreement every kA2avEvery-th such call,
 * counted from the last blocking agreement. */
static zipcclResult_t a2avStartAgreement(struct zipcclComm* c, const zipcclCallConfig_t* design, double mine) {
    zipcclModel* m = &c->model;
    if ((c->tagSizes && design->strategy != zipcclStrategyNative) || m->a2avUntagged++ % kA2avEvery)
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

zipcclResult_t zipcclAutoSettled(zipcclComm_t c, zipcclCollKind_t kind, zipcclDataType_t dtype, size_t bytes,
                                 int* settled) {
    if (!c || !settled) return zipcclSetError(zipcclInvalidArgument, "zipcclAutoSettled: null argument");
    if ((int)kind < 0 || kind >= zipcclNumCollKinds)
        return zipcclSetError(zipcclInvalidArgument, "zipcclAutoSettled: kind %d out of range", (int)kind);
    if (!zipcclTypeSize(dtype))
        return zipcclSetError(zipcclInvalidArgument, "zipcclAutoSettled: unsupported dtype %d", (int)dtype);
    *settled = 1;
    if (!measuredSelection(c)) return zipcclSuccess;
    const zipcclTuneBucket* b = bucketAt(&c->model, kind, dtype, (double)bytes);
    *settled = !bucketMeasuresNext(b) && (b->n <= 1 || b->pairs > 0);
    return zipcclSuccess;
}

/* A settled bucket's exploit call needs no estimate: it runs the bucket's
 * fastest measured design (tuneChoose's choice for such a call).  Estimating
 * every design took ~1.6 us per decision, ~0.4 us remain (rank 0, 4 ranks
 * on the 2-core emulated cluster, 4-64 KiB); no A/B has resolved the
 * difference in the calls' times (docs/lab/auto_tuning.md).  With logging on,
 * decisions take the full path so every line is printed. */
static int settledCall(struct zipcclComm* c, const zipcclOp* op, double total, zipcclCallConfig_t* out) {
    zipcclModel* m = &c->model;
    if (!measuredSelection(c) || m->log) return 0;
    zipcclTuneBucket* b = tuneBucket(m, op, total);
    if (bucketMeasuresNext(b)) return 0;
    b->calls++;
    const Design* d = &kDesigns[b->design[fastest(b, NULL)]];
    out->strategy = d->strategy, out->codec = d->codec, out->algo = d->algo;
    return 1;
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
        if (!(c->tp->caps & zipcclTpHostControl) && c->nranks > 1) { /* see "Left out" above */
            out->strategy = zipcclStrategyNative;
            return zipcclSuccess;
        }
        if (a2avAgree) ZIPCCL_TRY(a2avTotal(c, op, mine, &total));
        break;
    }
    default: total = (double)(op->count * esz); break;
    }
    m->agreeBytes += total; /* the same on every rank (AlltoAllv: the agreed size) */
    if (settledCall(c, op, total, out)) return a2avAgree ? a2avStartAgreement(c, out, mine) : zipcclSuccess;
    int reduce = op->kind == zipcclCollReduceScatter || op->kind == zipcclCollAllReduce;
    Design cand[kNumDesigns];
    int nc = 0;
    /* Native reductions sum in the transport's own order (and MPI rounds bf16
     * at every pairwise combine), so auto never picks them: every design it
     * chooses from for ReduceScatter/AllReduce gives the same bits (the
     * canonical order, docs/COLLECTIVES.md), and switching never changes a
     * training run. Data-movement collectives are bit-identical anyway. */
    for (int i = 0; i < kNumDesigns; i++) {
        if (kDesigns[i].strategy == zipcclStrategyNative && reduce) continue;
        if (kDesigns[i].algo == zipcclAlgoRing && !(reduce && (c->tp->caps & zipcclTpRing))) continue;
        if (kDesigns[i].algo == zipcclAlgoOneShot && !oneShotFits(c, op->kind, total)) continue;
        cand[nc++] = kDesigns[i];
    }
    int best = 0;
    for (int i = 0; i < nc; i++) {
        estimate(m, c, op->kind, op->dtype, total, &cand[i]);
        if (cand[i].t < cand[best].t) best = i;
    }
    /* A communicator whose buffers' codec is not usable (NCCL without a
     * device for the CUDA codec) cannot compress. */
    if (!c->codecOk && cand[best].strategy == zipcclStrategyCompressed)
        for (best = 0; cand[best].strategy == zipcclStrategyCompressed; best++) {}
    const char* why = NULL;
    if (measuredSelection(c)) why = tuneChoose(m, op, total, cand, nc, &best);
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
        const double* r = m->ratio[op->kind][dtypeIndex(op->dtype)];
        fprintf(stderr, "; link %.0f MB/s, ratio fast %.3f dense %.3f f3 %.3f)\n", m->beta / 1e6, r[0], r[1], r[2]);
        if (why) {
            const zipcclTuneBucket* b = tuneBucket(m, op, total);
            fprintf(stderr, "zipccl auto: measured (bucket call %llu):", (unsigned long long)b->calls);
            for (int i = 0; i < b->n; i++) {
                /* to the ns: a 2-rank call of a few KiB takes ~10 us, and
                 * close designs' times then tie at 0.1 us */
                if (b->runs[i] && b->t[i] > 0) fprintf(stderr, " %s %.6f ms x%d", kDesigns[b->design[i]].name, b->t[i] * 1e3, b->runs[i]);
                else if (b->runs[i]) fprintf(stderr, " %s %.6f ms on rank 0 x%d", kDesigns[b->design[i]].name,
                                             runsMedian(b, i) * 1e3, b->runs[i]);
                else fprintf(stderr, " %s unmeasured", kDesigns[b->design[i]].name);
            }
            fprintf(stderr, "\n");
        }
    }
    /* A call measured for all ranks starts together on all of them, as a
     * call after the application's compute does: back to back, a rank's time
     * also holds its wait for peers still in the previous call (on the shared
     * 2-core machine per-rank medians of one design then ranged 0.06-1.3 ms
     * for a 0.3 ms AllGather).  The caller times the run from our return. */
    if (m->probeBucket) {
        char what[96];
        snprintf(what, sizeof what, "%s (auto: the barrier before a measuring call)", zipcclCollName(op->kind));
        return zipcclAgreedBarrier(c, what);
    }
    return zipcclSuccess;
}

/* ---- refinement from what calls actually did ------------------------------------ */

/* Pooled observations: [kind][dtype][codec] raw and wire bytes of
 * compressed calls, then raw-call link bytes and seconds, then per codec
 * codec bytes and seconds. */
#define OBS_RATIO (zipcclNumCollKinds * 3 * ZIPCCL_MODEL_CODECS * 2)
#define OBS_LEN (OBS_RATIO + 2 + 2 * ZIPCCL_MODEL_CODECS)

zipcclResult_t zipcclModelObserve(struct zipcclComm* c, const zipcclOp* op,
                                  const zipcclExecStats* st, int wasAuto) {
    zipcclModel* m = &c->model;
    double* obs = m->obs;
    _Static_assert(sizeof m->obs == OBS_LEN * sizeof(double), "obs layout");
    if (!(c->tp->caps & zipcclTpHostControl)) return zipcclSuccess;
    int di = dtypeIndex(op->dtype), ci = codecIndex(st->codec);
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
        obs[OBS_RATIO + 1] += fmax(st->totalSeconds - st->codecSeconds - (c->nranks - 1) * m->alpha, 1e-7);
    }
    if (!wasAuto) return zipcclSuccess;
    /* The largest AlltoAllv size moved to another bucket: agree on it at the
     * next call (the word is the same on every rank). */
    if (st->a2avSizeWord && st->a2avSizeWord - 1 != zipcclSizeBucket(m->a2avAgreed)) m->a2avStale = 1;
    if (m->probeBucket) ZIPCCL_TRY(tuneRecord(c, st->runSeconds)); /* only with zipcclTpHostControl */
    if (++m->autoCalls % kAgreeEvery || m->agreeBytes < kAgreeBytes) return zipcclSuccess;
    m->agreeBytes = 0;
    /* Same call index on every rank: pool, then update the shared model. */
    double pooled[OBS_LEN];
    ZIPCCL_TRY(zipcclAgreedAllreduce(c, obs, pooled, OBS_LEN, zipcclTpSum, "switcher (observation agreement)"));
    memset(obs, 0, sizeof m->obs);
    const double w = 0.3; /* EWMA weight of new evidence */
    for (int k = 0; k < zipcclNumCollKinds; k++)
        for (int d = 0; d < 3; d++)
            for (int cc = 0; cc < ZIPCCL_MODEL_CODECS; cc++) {
                double* o = pooled + ((k * 3 + d) * ZIPCCL_MODEL_CODECS + cc) * 2;
                if (o[1] > 0) m->ratio[k][d][cc] = (1 - w) * m->ratio[k][d][cc] + w * o[0] / o[1];
            }
    if (pooled[OBS_RATIO + 1] > 0 && pooled[OBS_RATIO] > 1e6)
        m->beta = (1 - w) * m->beta + w * pooled[OBS_RATIO] / pooled[OBS_RATIO + 1];
    for (int cc = 0; cc < ZIPCCL_MODEL_CODECS; cc++) {
        double b = pooled[OBS_RATIO + 2 + 2 * cc], s = pooled[OBS_RATIO + 3 + 2 * cc];
        if (s <= 0 || b < 1e6) continue;
        /* observed bytes/s over encode+decode; split like the calibration did */
        double predicted = 2.0 / (1 / m->enc[cc] + 1 / m->dec[cc]), scale = (b / s) / predicted;
        m->enc[cc] *= (1 - w) + w * scale;
        m->dec[cc] *= (1 - w) + w * scale;
    }
    applyEnv(m); /* an explicit link override stays in force */
    if (m->log > 1 && c->rank == 0)
        fprintf(stderr, "zipccl: model refined: link %.0f MB/s, fast %.0f/%.0f MB/s\n", m->beta / 1e6,
                m->enc[0] / 1e6, m->dec[0] / 1e6);
    return zipcclSuccess;
}
