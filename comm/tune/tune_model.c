/*
 * tune_model.c — auto's cost model (tune.h): per call, estimate the time
 * of each design (native; raw direct, ring or one-shot; compressed
 * fast/dense direct or ring, fast one-shot, f3 direct) with an
 * alpha-beta-codec model, NCCL's tuner being the template:
 *
 *   t(design) = messages * alpha
 *             + max(wireBytes / beta, codecBytes / codecThroughput)   (pipelined)
 *             + one piece of codec work (the pipeline fill)
 *             + reduction bytes / memory bandwidth                    (RS, AR)
 *
 * wireBytes for a compressed design is rawBytes / ratio, where the ratio is
 * the last observed ratio for (collective, dtype, codec), starting from the
 * Gaussian figures in DESIGN.md.  Pure functions of their arguments: no
 * communicator, no environment, no communication.
 *
 * zipcclTuneEstimateTwoLevel puts it on a two-level cluster (nodes joined by
 * slower links) for the projection (runtime/project.c); auto itself still
 * assumes every pair has the same link.
 */
#include <math.h>
#include <string.h>

#include "transport.h"
#include "tune.h"

/* Model constants per compressed frame: frame + chunk headers and chunk
 * table (16 + 8 + 4 bytes for one chunk), and encode + decode overhead. */
static const double kFrameHeaderBytes = 28, kFrameCodecS = 2e-6;

int zipcclTuneDtypeIndex(zipcclDataType_t dt) {
    return dt == zipcclBfloat16 ? 0 : dt == zipcclFloat16 ? 1 : 2;
}
size_t zipcclTunePieceBytes(double beta) {
    static const double kPieceSeconds = 0.004;
    static const size_t kMin = (size_t)512 << 10, kMax = (size_t)4 << 20, kStep = (size_t)64 << 10;
    const double want = beta * kPieceSeconds;
    return want >= (double)kMax ? kMax : want <= (double)kMin ? kMin : (size_t)want / kStep * kStep;
}
/* The model's codecs, in its arrays' order. */
const zipcclCodec_t zipcclTuneCodecs[ZIPCCL_MODEL_CODECS] = {zipcclCodecFast, zipcclCodecDense, zipcclCodecF3};
int zipcclTuneCodecIndex(zipcclCodec_t codec) {
    return codec == zipcclCodecDense ? 1 : codec == zipcclCodecF3 ? 2 : 0;
}

void zipcclTuneInit(zipcclTuneModel* m) {
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
}

/* The one-shot design (AllGather, AllReduce; MPI) saves latency steps for
 * more bytes on the wire (AllReduce: n-1 whole buffers per rank) or more
 * concurrent flows per link (AllGather), which only small messages win by.
 * It is a candidate below kOneShotAgBytes of contribution per rank for
 * AllGather, below kOneShotArBytes of buffer for AllReduce: in the repeated
 * sweeps of docs/lab/auto_tuning.md (4 ranks, 10 Gbit/s and unthrottled) one-shot
 * AllGather was 1.13-1.35x faster than every other design up to 1 MiB but at
 * 256 KiB (0.98-1.00x), one-shot AllReduce 1.29-1.72x at 4 and 16 KiB and
 * 0.53-0.60x from 64 KiB. */
static const double kOneShotAgBytes = 1 << 20, kOneShotArBytes = 64 << 10;
static int oneShotFits(const zipcclTuneQuery* q) {
    const zipcclCollKind_t kind = q->kind;
    const double total = q->bytes;
    if (!(q->caps & zipcclTpOneShot)) return 0;
    if (kind == zipcclCollAllGather) return total < kOneShotAgBytes;
    return kind == zipcclCollAllReduce && total < kOneShotArBytes;
}
/* ---- the estimate ------------------------------------------------------------ */

/* Bytes this rank sends (raw), encodes, decodes and reduces for one design.
 * `block` = bytes of one rank's share, `total` = bytes of one rank's input. */
double zipcclTuneEstimate(const zipcclTuneModel* m, const zipcclTuneQuery* q, zipcclTuneDesign* d) {
    const zipcclCollKind_t kind = q->kind;
    const zipcclDataType_t dt = q->dtype;
    const double total = q->bytes;
    const int n = q->nranks;
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
        double piece = fmin((double)q->pieceBytes, block);
        double pieces = ceil(block / fmax((double)q->pieceBytes, 1));
        t = (msgs * fmax(pieces, 1)) * m->alpha + red / m->memBw;
        if (d->strategy == zipcclStrategyRaw) {
            t += send / m->beta + (pipeSteps - 1) * piece / m->beta;
        } else {
            const int ci = zipcclTuneCodecIndex(d->codec);
            double ratio = m->ratio[kind][zipcclTuneDtypeIndex(dt)][ci], encBw = m->enc[ci], decBw = m->dec[ci];
            /* plus per frame: its headers on the wire and a fixed codec cost
             * (~1 us per encode or decode of a 4 KiB frame in zipccl-bench's
             * codec_us), which is what keeps tiny messages raw */
            double frames = msgs * fmax(pieces, 1);
            double wire = (send / ratio + frames * kFrameHeaderBytes) / m->beta;
            double codec = enc / encBw + dec / decBw + frames * kFrameCodecS;
            if (m->serialCodec) { /* code, then send, then decode: the sum, plus each call's fixed
                                   * cost (a block coded once per peer; AllGather's once) */
                const double encCalls = kind == zipcclCollAllGather || oneshot ? 1 : n1;
                t += wire + codec + (encCalls + n1) * m->codecCallS;
            }
            else if (ring) /* every hop waits for one piece to arrive, decode and re-encode */
                t += fmax(wire, codec) + pipeSteps * piece * (1 / encBw + 1 / decBw + 1 / ratio / m->beta);
            else /* two stages over P pieces: the slower one's whole, the faster one's 1/P */
                t += fmax(wire, codec) + fmin(wire, codec) / fmax(pieces, 1);
        }
    }
    d->t = t;
    return t;
}

/* ---- two levels (the projection's) -------------------------------------------- */

/* m with its link made 1/share as loaded: a rank's bytes spread over peers,
 * `share` of them over this link (the rest in parallel over another). */
static zipcclTuneModel share_of(const zipcclTuneModel* m, double share) {
    zipcclTuneModel s = *m;
    s.beta = share > 0 ? m->beta / share : INFINITY;
    return s;
}

static double est_on(const zipcclTuneModel* m, zipcclCollKind_t kind, const zipcclTuneQuery* q, double bytes,
                     int nranks, zipcclStrategy_t strategy, zipcclCodec_t codec, zipcclAlgo_t algo) {
    if (nranks < 2) return 0;
    zipcclTuneQuery q2 = *q;
    q2.kind = kind, q2.bytes = bytes, q2.nranks = nranks;
    zipcclTuneDesign d = {strategy, codec, algo, "", 0};
    return zipcclTuneEstimate(m, &q2, &d);
}

double zipcclTuneEstimateTwoLevel(const zipcclTuneModel* intra, const zipcclTuneModel* inter, int nodeSize,
                                  int nodeLinks, const zipcclTuneQuery* q, zipcclTuneDesign* d) {
    const int n = q->nranks, k = nodeSize < 1 ? 1 : nodeSize > n ? n : nodeSize, N = n / k;
    const zipcclStrategy_t S = d->strategy, R = zipcclStrategyRaw;
    double t = 0;
    if (k == n || k == 1) { /* one link class: the flat model on it; hier runs flat there,
                             * raw in one node, every hop coded with nodes of one rank */
        zipcclTuneDesign f = *d;
        if (f.algo == zipcclAlgoHier) {
            f.algo = zipcclAlgoDirect;
            if (k == n) f.strategy = zipcclStrategyRaw;
        }
        t = zipcclTuneEstimate(k == n ? intra : inter, q, &f);
    } else if (d->algo != zipcclAlgoHier) {
        const double off = (double)(n - k) / (n - 1); /* a rank's peers in other nodes */
        zipcclTuneModel m;
        const int rings = q->kind == zipcclCollAllGather || q->kind == zipcclCollReduceScatter ||
                          q->kind == zipcclCollAllReduce;
        if (d->strategy == zipcclStrategyNative && rings) {
            /* NCCL's topology-aware rings: one channel per NIC, a node's
             * boundary crossed once per channel, so a rank's bytes pass
             * its node's links at the node's whole NIC rate (k ranks'
             * shares) or at its own intra-node rate, the slower */
            m = *inter;
            m.beta = fmin(intra->beta, inter->beta * k);
        } else if (d->algo == zipcclAlgoRing) { /* one channel: every hop waits for the slowest,
                                                  * the boundary's on one NIC */
            const int links = nodeLinks < 1 ? 1 : nodeLinks > k ? k : nodeLinks;
            m = *inter;
            m.beta = fmin(intra->beta, inter->beta * k / links);
        } else { /* both links at once: the more loaded one sets the pace */
            const zipcclTuneModel a = share_of(intra, 1 - off), b = share_of(inter, off);
            m = *inter;
            m.beta = fmin(a.beta, b.beta);
        }
        zipcclTuneDesign f = *d;
        t = zipcclTuneEstimate(&m, q, &f);
    } else {
        const double b = q->bytes; /* AllGather: a rank's block; else a rank's whole input */
        const double esz = (double)zipcclTypeSize(q->dtype);
        switch (q->kind) {
        case zipcclCollAllGather: /* frames around the nodes' ring, then raw rings in the node */
            t = est_on(inter, q->kind, q, b, N, S, d->codec, zipcclAlgoRing) +
                est_on(intra, q->kind, q, b * N, k, R, d->codec, zipcclAlgoRing);
            break;
        case zipcclCollReduceScatter:
        case zipcclCollAllReduce: {
            /* stage 1: every rank's contributions raw to the node's stations */
            t = est_on(intra, zipcclCollAlltoAll, q, b, k, R, d->codec, zipcclAlgoDirect);
            /* stage 2, hierReduceScatter's choice: chain (fp32 partials around
             * the stations, a ring's bytes) or forward (the flat direct
             * design's bytes between nodes, as an exchange among stations) */
            if (N * 4.0 < (N - 1) * k * esz)
                t += est_on(inter, zipcclCollReduceScatter, q, b / k, N, S, d->codec, zipcclAlgoRing);
            else
                t += est_on(inter, zipcclCollAlltoAll, q, b, N, S, d->codec, zipcclAlgoDirect);
            if (q->kind == zipcclCollAllReduce) /* then the hierarchical AllGather of the blocks */
                t += est_on(inter, zipcclCollAllGather, q, b / n, N, S, d->codec, zipcclAlgoRing) +
                     est_on(intra, zipcclCollAllGather, q, b / n * N, k, R, d->codec, zipcclAlgoRing);
            break;
        }
        default: { /* All-to-All(v): raw in the node and frames out of it, at once */
            const double off = (double)(n - k) / (n - 1);
            const zipcclTuneModel a = share_of(intra, 1 - off), o = share_of(inter, off);
            t = fmax(est_on(&a, q->kind, q, b, n, R, d->codec, zipcclAlgoDirect),
                     est_on(&o, q->kind, q, b, n, S, d->codec, zipcclAlgoDirect));
            break;
        }
        }
    }
    d->t = t;
    return t;
}

/* Every design auto may run; the bucket tables store indices into this. */
const zipcclTuneDesign zipcclTuneDesigns[ZIPCCL_TUNE_NDESIGNS] = {
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
    {zipcclStrategyRaw, zipcclCodecFast, zipcclAlgoHier, "raw/hier", 0},
    {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoHier, "compressed/fast/hier", 0},
};

int zipcclTuneDesignId(const zipcclTuneDesign* d) {
    for (int i = 0; i < ZIPCCL_TUNE_NDESIGNS; i++) {
        const zipcclTuneDesign* k = &zipcclTuneDesigns[i];
        if (k->strategy == d->strategy && k->codec == d->codec && k->algo == d->algo)
            return i;
    }
    return -1;
}


int zipcclTuneDecide(const zipcclTuneModel* m, const zipcclTuneQuery* q, zipcclTuneDesign* cand, int* nc) {
    const int reduce = q->kind == zipcclCollReduceScatter || q->kind == zipcclCollAllReduce;
    *nc = 0;
    /* Native reductions sum in the transport's own order (and MPI rounds bf16
     * at every pairwise combine), so auto never picks them: every design it
     * chooses from for ReduceScatter/AllReduce gives the same bits (the
     * canonical order, docs/COLLECTIVES.md), and switching never changes a
     * training run. Data-movement collectives are bit-identical anyway. */
    for (int i = 0; i < ZIPCCL_TUNE_NDESIGNS; i++) {
        const zipcclTuneDesign* k = &zipcclTuneDesigns[i];
        if (k->strategy == zipcclStrategyNative && reduce) continue;
        if (k->algo == zipcclAlgoRing && !(reduce && (q->caps & zipcclTpRing))) continue;
        if (k->algo == zipcclAlgoOneShot && !oneShotFits(q)) continue;
        if (k->algo == zipcclAlgoHier && !(q->nodeSize > 1 && q->nodeSize < q->nranks &&
                                           (q->caps & zipcclTpHostControl)))
            continue;
        cand[(*nc)++] = *k;
    }
    const int twoLevel = m->intraBeta > 0 && q->nodeSize > 1 && q->nodeSize < q->nranks;
    zipcclTuneModel intra = *m;
    intra.beta = m->intraBeta;
    if (m->intraAlpha > 0) intra.alpha = m->intraAlpha;
    int best = 0;
    for (int i = 0; i < *nc; i++) {
        if (twoLevel) zipcclTuneEstimateTwoLevel(&intra, m, q->nodeSize, q->nodeSize, q, &cand[i]);
        else zipcclTuneEstimate(m, q, &cand[i]);
        if (cand[i].t < cand[best].t) best = i;
    }
    /* A communicator whose buffers' codec is not usable (NCCL without a
     * device for the CUDA codec) cannot compress. */
    if (!q->codecOk && cand[best].strategy == zipcclStrategyCompressed)
        for (best = 0; cand[best].strategy == zipcclStrategyCompressed; best++) {}
    return best;
}

void zipcclTuneObserve(zipcclTuneModel* m, const double pooled[ZIPCCL_OBS_LEN]) {
    const double w = 0.3; /* EWMA weight of new evidence */
    for (int k = 0; k < zipcclNumCollKinds; k++)
        for (int d = 0; d < 3; d++)
            for (int cc = 0; cc < ZIPCCL_MODEL_CODECS; cc++) {
                const double* o = pooled + ((k * 3 + d) * ZIPCCL_MODEL_CODECS + cc) * 2;
                if (o[1] > 0) m->ratio[k][d][cc] = (1 - w) * m->ratio[k][d][cc] + w * o[0] / o[1];
            }
    if (pooled[ZIPCCL_OBS_RATIO + 1] > 0 && pooled[ZIPCCL_OBS_RATIO] > 1e6)
        m->beta = (1 - w) * m->beta + w * pooled[ZIPCCL_OBS_RATIO] / pooled[ZIPCCL_OBS_RATIO + 1];
    for (int cc = 0; cc < ZIPCCL_MODEL_CODECS; cc++) {
        double b = pooled[ZIPCCL_OBS_RATIO + 2 + 2 * cc], s = pooled[ZIPCCL_OBS_RATIO + 3 + 2 * cc];
        if (s <= 0 || b < 1e6) continue;
        /* observed bytes/s over encode+decode; split like the calibration did */
        double predicted = 2.0 / (1 / m->enc[cc] + 1 / m->dec[cc]), scale = (b / s) / predicted;
        m->enc[cc] *= (1 - w) + w * scale;
        m->dec[cc] *= (1 - w) + w * scale;
    }
}

/* The model is a value (no heap, no handles): finalizing it only clears it,
 * so a finalized model is never taken for a calibrated one. */
void zipcclTuneFinalize(zipcclTuneModel* m) { memset(m, 0, sizeof *m); }
