/*
 * tune_explore.c — auto's measured selection, the optional layer on top of
 * the cost model (tune.h) on communicators whose transport has host-side
 * control (MPI).  On a shared, CPU-bound machine the model's inputs are
 * often wrong by more than the gaps between designs, so the model only
 * nominates: per (collective, dtype, floor(log2 bytes)) bucket a few
 * candidates (the fixed strategies' designs plus the model's plausible
 * others) are each run kRunsTiny, kRunsSmall or kRunsLarge times (close
 * contenders for the lead twice that, contendRuns), each such call started
 * on all ranks together (zipcclExploreBeforeRun's barrier) and its time
 * agreed across ranks (the max, run by run, then the median of the runs,
 * zipcclExploreRecord), and then the fastest measured design is run; the
 * incumbent and a challenger (the runner-up every other time, the other
 * candidates in turn between) are re-measured in pairs (first at the
 * bucket's call firstReprobe; the next kReprobeEvery calls after a pair that
 * changed the incumbent, twice the spacing before, at most kReprobeMost,
 * after one that kept it) so a misled exploration is corrected and drift is
 * followed.  The measurements are agreed and the bucket's call sequence is
 * the same on all ranks, so the choice stays identical everywhere.
 *
 * Its communication (the barrier before a measuring call, the agreement of
 * the measured times) happens before the run and after it, never inside
 * the decision (zipcclExploreChoose only reads the buckets).
 *
 * ZIPCCL_AUTO_EXPLORE=0 turns it off (model only); it is off by default
 * when ZIPCCL_LINK_GBPS declares the link.
 *
 * Left out: transports without host-side control (NCCL).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_agree.h"
#include "comm_state.h"
#include "tune_explore.h"

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
 * docs/lab/auto_tuning.md), for 2 more calls per candidate once
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
/* A bucket's candidates on ranks of one node (ZIPCCL_TUNE_CANDS: across
 * nodes two more, the hier twins). */
enum { kFlatCands = 6 };
static int hasHier(const zipcclTuneDesign* cand, int nc) {
    for (int i = 0; i < nc; i++)
        if (cand[i].algo == zipcclAlgoHier) return 1;
    return 0;
}
/* A bucket's first re-measured pair comes soon after its longest possible
 * exploration without contenders (bucket calls 34 and 35 with 5 runs, 46
 * and 47 with 7, 130 and 131 with 21; across nodes, with 8 candidates, 44
 * and 45, 60 and 61, 172 and 173), or 4 calls after the contenders'
 * runs end (zipcclExploreRecord), which schedules the ones after it (pairAt). */
static int firstReprobe(int runs, int cands) { return (cands > kFlatCands ? cands : kFlatCands) * runs + 4; }
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
 * always follows the same call (see zipcclExploreChoose). */
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
int zipcclAutoWarmupCalls(zipcclCollKind_t kind, size_t bytes) {
    /* through the first re-measured pair; on ranks of several nodes hier's
     * two more candidates take longer (zipcclAutoSettled says when) */
    const int calls = firstReprobe(tuneRuns((double)bytes), kFlatCands) + 2;
    return kind == zipcclCollAlltoAllv ? calls + ZIPCCL_A2AV_AGREE_EVERY : calls;
}
static const double kPlausible = 2.0;

/* Does auto choose by measuring (zipcclExploreChoose), or by the model alone? */
int zipcclExploreOn(const struct zipcclComm* c) {
    return c->model.explore && zipcclHostControl(c) && c->nranks > 1;
}

static zipcclTuneBucket* bucketAt(zipcclModel* m, zipcclCollKind_t kind, zipcclDataType_t dtype, double total) {
    return &m->tune[kind][zipcclTuneDtypeIndex(dtype)][zipcclSizeBucket(total)];
}
zipcclTuneBucket* zipcclExploreBucket(zipcclModel* m, const zipcclOp* op, double total) {
    return bucketAt(m, op->kind, op->dtype, total);
}

/* The candidates of a new bucket: the designs of the fixed strategies
 * (native where allowed, raw, compressed with the default fast/direct), so
 * auto can always match the best of them, then the model's other designs
 * cheapest first while within kPlausible of its best estimate. */
static void tuneSetup(zipcclTuneBucket* b, double total, const zipcclTuneDesign* cand, int nc, int best) {
    int order[ZIPCCL_TUNE_NDESIGNS];
    for (int i = 0; i < nc; i++) order[i] = i;
    for (int i = 1; i < nc; i++) /* insertion sort by estimate; ties keep table order */
        for (int j = i; j > 0 && cand[order[j]].t < cand[order[j - 1]].t; j--) {
            int x = order[j];
            order[j] = order[j - 1], order[j - 1] = x;
        }
    b->n = 0, b->pairs = 0;
    b->target = tuneRuns(total);
    b->pairEvery = kReprobeEvery;
    const int cap = kFlatCands + 2 * hasHier(cand, nc); /* <= ZIPCCL_TUNE_CANDS */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nc && b->n < cap; i++) {
            int id = zipcclTuneDesignId(&cand[order[i]]);
            /* native, raw, compressed/fast direct, and across nodes their
             * hier twins: the model cannot rank hier (one link), so it is
             * always measured where it applies */
            int fixed = id <= 2 || cand[order[i]].algo == zipcclAlgoHier;
            if (pass == 0 ? !fixed : (fixed || cand[order[i]].t > kPlausible * cand[best].t)) continue;
            b->design[b->n] = id, b->want[b->n] = b->target, b->runs[b->n] = 0, b->t[b->n] = 0, b->last[b->n] = 0;
            b->n++;
        }
    b->pairAt = (uint64_t)firstReprobe(b->target, b->n);
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
 * a re-measure due)?  zipcclExploreChoose's rule, without choosing. */
int zipcclExploreMeasuresNext(const zipcclTuneBucket* b) {
    if (b->n == 0) return 1;
    for (int i = 0; i < b->n; i++)
        if (b->runs[i] < b->want[i]) return 1;
    return reprobeSlot(b, b->calls) >= 0;
}

/* Pick the design for an auto call from the bucket's measurements; sets
 * m->probeBucket when this call is to be measured.  Returns a word for the
 * log ("explore", "reprobe", "exploit"). */
const char* zipcclExploreChoose(zipcclModel* m, const zipcclOp* op, double total, const zipcclTuneDesign* cand, int nc,
                              int* best) {
    zipcclTuneBucket* b = zipcclExploreBucket(m, op, total);
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
        if (zipcclTuneDesignId(&cand[i]) == b->design[pick]) *best = i;
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
double zipcclExploreRunsMedian(const zipcclTuneBucket* b, int i) {
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
            if (b->want[q] == more) fprintf(stderr, " %s %.3f", zipcclTuneDesigns[b->design[q]].name, b->t[q] * 1e3);
        fprintf(stderr, "; %d runs each\n", more);
    }
    return 1;
}

/* Fold one measuring call's wall time into the bucket.  Measuring calls
 * start together on all ranks (zipcclExploreBeforeRun starts them with a barrier), so a
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
zipcclResult_t zipcclExploreRecord(struct zipcclComm* c, double seconds) {
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

zipcclResult_t zipcclAutoSettled(zipcclComm_t c, zipcclCollKind_t kind, zipcclDataType_t dtype, size_t bytes,
                                 int* settled) {
    if (!c || !settled) return zipcclSetError(zipcclInvalidArgument, "zipcclAutoSettled: null argument");
    if ((int)kind < 0 || kind >= zipcclNumCollKinds)
        return zipcclSetError(zipcclInvalidArgument, "zipcclAutoSettled: kind %d out of range", (int)kind);
    if (!zipcclTypeSize(dtype))
        return zipcclSetError(zipcclInvalidArgument, "zipcclAutoSettled: unsupported dtype %d", (int)dtype);
    *settled = 1;
    if (!zipcclExploreOn(c)) return zipcclSuccess;
    const zipcclTuneBucket* b = bucketAt(&c->model, kind, dtype, (double)bytes);
    *settled = !zipcclExploreMeasuresNext(b) && (b->n <= 1 || b->pairs > 0);
    return zipcclSuccess;
}

/* A settled bucket's exploit call needs no estimate: it runs the bucket's
 * fastest measured design (zipcclExploreChoose's choice for such a call).  Estimating
 * every design took ~1.6 us per decision, ~0.4 us remain (rank 0, 4 ranks
 * on the 2-core emulated cluster, 4-64 KiB); no A/B has resolved the
 * difference in the calls' times (docs/lab/auto_tuning.md).  With logging on,
 * decisions take the full path so every line is printed. */
int zipcclExploreSettled(struct zipcclComm* c, const zipcclOp* op, double total, zipcclCallConfig_t* out) {
    zipcclModel* m = &c->model;
    if (!zipcclExploreOn(c) || m->log) return 0;
    zipcclTuneBucket* b = zipcclExploreBucket(m, op, total);
    if (zipcclExploreMeasuresNext(b)) return 0;
    b->calls++;
    const zipcclTuneDesign* d = &zipcclTuneDesigns[b->design[fastest(b, NULL)]];
    out->strategy = d->strategy, out->codec = d->codec, out->algo = d->algo;
    return 1;
}


/* A call measured for all ranks starts together on all of them, as a call
 * after the application's compute does: back to back, a rank's time also
 * holds its wait for peers still in the previous call (on the shared 2-core
 * machine per-rank medians of one design then ranged 0.06-1.3 ms for a 0.3
 * ms AllGather).  So the explorer starts its measuring calls with a
 * barrier, after the decision and before the run, which is timed from here. */
zipcclResult_t zipcclExploreBeforeRun(struct zipcclComm* c, const zipcclOp* op) {
    if (!c->model.probeBucket) return zipcclSuccess;
    char what[96];
    snprintf(what, sizeof what, "%s (auto: the barrier before a measuring call)", zipcclCollName(op->kind));
    return zipcclAgreedBarrier(c, what);
}
