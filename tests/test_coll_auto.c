// test: ranks=2,4 timeout=240
/*
 * test_coll_auto.c — strategy auto's measured selection (comm/tune/switcher.c,
 * docs/COLLECTIVES.md §7) on real MPI ranks.  For AllGather bf16 and
 * ReduceScatter fp32 at a small and a large size, 24 auto calls:
 *   - every auto call's result equals the reference bit for bit (MPI_Allgather
 *     for AllGather; the fixed raw strategy for ReduceScatter, which sums in
 *     the canonical order every design auto may pick shares);
 *   - the executed strategies (the byStrategy counters) vary while the bucket
 *     is explored and then settle: the last calls all run one strategy;
 *   - the settled choice is fast: its median rank-agreed time, measured in
 *     rounds interleaved with the fixed strategies (native/raw/compressed with
 *     default codec and algo; native only where auto may run it), is within
 *     1.5x of the best fixed strategy's median (loose: on the shared 2-core
 *     machine the 32 KiB designs differ by ~20% and a bucket explored with 3
 *     runs per design sometimes settles on the runner-up; CI saw 1.41x once
 *     and 2.1x once; a miss must repeat in three measurements apart in
 *     time, and then again after a fresh communicator explored anew; not
 *     in the sanitizer build, whose timings say nothing);
 *   - AllReduce bf16: the one-shot design is explored at 4 KiB and never
 *     runs at 64 KiB (a candidate below 64 KiB only);
 *   - zipcclAutoSettled says 0 before a bucket's first call and 1 after the
 *     exploration, on every rank; 1 at once with ZIPCCL_AUTO_EXPLORE=0; bad
 *     arguments return zipcclInvalidArgument;
 *   - ZIPCCL_AUTO_EXPLORE=0 gives the pure model: a fresh communicator's
 *     first calls (before any model refinement) all run one strategy;
 *   - AlltoAllv: every call equals MPI_Alltoallv and runs one design on all
 *     ranks while rank-local sizes change bucket; a change of the largest
 *     size is followed at the next call after our designs (their tags carry
 *     sizes), within 9 calls after native.
 * What it leaves out: drift following (the periodic re-measurement); when
 * the re-measured pairs come and which design each holds against the
 * incumbent are checked from the log by test_coll_bench.sh (4c, 4e).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "testutil.h"
#include "zipccl.h"
#include "zipccl_tune.h"
#include "mpitest.h"

/* kAutoCalls: a bucket's exploration below 128 KiB (up to 6 candidates x 21
 * runs) and its first re-measured pair (calls 130, 131), then kSettled calls. */
enum { kAutoCalls = 138, kSettled = 6, kRounds = 11 };



/* Gaussian-ish values (sigma 0.02) so the compressed designs compress. */
static void fill(void* buf, size_t count, zipcclDataType_t dt, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + (uint64_t)rank * 0xBF58476D1CE4E5B9ull + 1;
    for (size_t i = 0; i < count; i++) {
        double u = 0;
        for (int k = 0; k < 4; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            u += (double)(s >> 11) * 0x1p-53;
        }
        float v = (float)((u - 2.0) * 0.02 * 1.732);
        if (dt == zipcclFloat32) ((float*)buf)[i] = v;
        else { /* bf16 by truncation: any bit pattern will do as data */
            uint32_t b;
            memcpy(&b, &v, 4);
            ((uint16_t*)buf)[i] = (uint16_t)(b >> 16);
        }
    }
}

typedef struct {
    zipcclCollKind_t kind;
    zipcclDataType_t dt;
    size_t count; /* AllGather: sendcount; ReduceScatter: recvcount */
    void *send, *got;
    zipcclComm_t comm;
} Case;

/* One call; returns the rank-agreed (max) seconds and the executed strategy. */
static double timedCall(Case* k, zipcclStrategy_t s, zipcclStrategy_t* ran, int* ok) {
    zipcclCallConfig_t cfg = ZIPCCL_CALL_CONFIG_DEFAULT;
    cfg.strategy = s;
    zipcclCounters_t before, after;
    zipcclCommGetCounters(k->comm, k->kind, &before);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    zipcclResult_t r = k->kind == zipcclCollAllGather
                           ? zipcclAllGather(k->send, k->got, k->count, k->dt, k->comm, &cfg, NULL)
                           : zipcclReduceScatter(k->send, k->got, k->count, k->dt, zipcclSum, k->comm, &cfg, NULL);
    double dt = MPI_Wtime() - t0, agreed = 0;
    MPI_Allreduce(&dt, &agreed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (r != zipcclSuccess) {
        snprintf(why, sizeof why, "rank %d: %s: %s", rank, zipcclGetErrorString(r), zipcclGetLastErrorDetail());
        *ok = 0;
    }
    zipcclCommGetCounters(k->comm, k->kind, &after);
    *ran = zipcclStrategyDefault;
    for (int i = 0; i < 5; i++)
        if (after.byStrategy[i] != before.byStrategy[i]) *ran = (zipcclStrategy_t)i;
    return agreed;
}

static int cmpDouble(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}
static double median(double* v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmpDouble);
    return v[n / 2];
}

static void runCase(zipcclComm_t comm, zipcclCollKind_t kind, zipcclDataType_t dt, size_t count) {
    const size_t e = zipcclTypeSize(dt);
    const size_t in = kind == zipcclCollAllGather ? count : count * (size_t)nranks;
    const size_t outN = kind == zipcclCollAllGather ? count * (size_t)nranks : count;
    Case k = {kind, dt, count, malloc(in * e), malloc(outN * e), comm};
    char* ref = malloc(outN * e);
    char name[128];
    int ok = 1;
    fill(k.send, in, dt, (uint64_t)kind * 1000 + count);
    zipcclStrategy_t ran;
    if (kind == zipcclCollAllGather) {
        MPI_Allgather(k.send, (int)(count * e), MPI_BYTE, ref, (int)(count * e), MPI_BYTE, MPI_COMM_WORLD);
    } else {
        timedCall(&k, zipcclStrategyRaw, &ran, &ok);
        memcpy(ref, k.got, outN * e);
    }
    const char* label = kind == zipcclCollAllGather ? "allgather_bf16" : "reducescatter_fp32";
    size_t kib = in * e / 1024;

    /* Exploration, then exploitation; zipcclAutoSettled says 0 before it
     * and 1 after, the same on every rank. */
    int before = -1, after = -1;
    zipcclResult_t q = zipcclAutoSettled(comm, kind, dt, in * e, &before);
    zipcclStrategy_t seq[kAutoCalls];
    int same = 1;
    for (int i = 0; i < kAutoCalls; i++) {
        memset(k.got, 0xA5, outN * e);
        timedCall(&k, zipcclStrategyAuto, &seq[i], &ok);
        if (ok && memcmp(k.got, ref, outN * e)) {
            snprintf(why, sizeof why, "rank %d: auto call %d (%s) differs from the reference", rank, i,
                     zipcclStrategyName(seq[i]));
            same = 0;
        }
    }
    snprintf(name, sizeof name, "auto_%s_%zuKiB_n%d_bits", label, kib, nranks);
    report(ok && same, name);
    if (q == zipcclSuccess) q = zipcclAutoSettled(comm, kind, dt, in * e, &after);
    int bounds[2] = {before, -after}, all[2];
    MPI_Allreduce(bounds, all, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (q != zipcclSuccess) snprintf(why, sizeof why, "zipcclAutoSettled: %s", zipcclGetLastErrorDetail());
    else if (all[0] != 0 || -all[1] != 1) snprintf(why, sizeof why, "settled %d before and %d after (rank %d)", before, after, rank);
    snprintf(name, sizeof name, "auto_%s_%zuKiB_n%d_settled_query", label, kib, nranks);
    report(q == zipcclSuccess && all[0] == 0 && -all[1] == 1, name);

    int distinct = 0, settled = 1;
    for (int i = 0; i < kAutoCalls - kSettled; i++) distinct |= seq[i] != seq[0];
    for (int i = kAutoCalls - kSettled; i < kAutoCalls; i++) settled &= seq[i] == seq[kAutoCalls - 1];
    if (!distinct) snprintf(why, sizeof why, "every call ran %s: no exploration", zipcclStrategyName(seq[0]));
    else if (!settled) snprintf(why, sizeof why, "the last %d calls ran different strategies", kSettled);
    snprintf(name, sizeof name, "auto_%s_%zuKiB_n%d_explored_then_settled", label, kib, nranks);
    report(distinct && settled, name);

#if defined(__SANITIZE_ADDRESS__)
    /* Timing under the sanitizers measures the sanitizers: the normal build
     * runs the speed check (a 1 MiB AllGather measured 1.4x apart between
     * two runs of the very same design here). */
    free(k.send), free(k.got), free(ref);
    return;
#endif
    /* Rounds: every fixed strategy and auto once each, so drift hits all; the
     * order is shuffled each round (the same on every rank) so that no one
     * follows the same call every round.  A
     * burst of load from other processes can outlast a whole measurement, so
     * a miss is only reported if two more measurements, apart in time,
     * confirm it (the settled design does not change in between). */
    zipcclStrategy_t fixed[3] = {zipcclStrategyNative, zipcclStrategyRaw, zipcclStrategyCompressed};
    int f0 = kind == zipcclCollAllGather ? 0 : 1; /* auto never runs a native reduction */
    double tf[3][kRounds], ta[kRounds], best = 1e30, mAuto = 0;
    int stay = 1, slots = 4 - f0, bestF = f0, fast = 0;
    zipcclStrategy_t settledOn = seq[kAutoCalls - 1];
    zipcclComm_t fresh = NULL;
    for (int attempt = 0; attempt < 6 && !(fast && stay); attempt++) {
        if (attempt) usleep(200000);
        /* each attempt judged on its own: a switch of auto's design under a
         * burst of load (a refinement may re-measure) is repeated like a
         * slow measurement, from the design it switched to */
        stay = 1;
        if (attempt == 3) {
            /* Three misses: the exploration itself may have been misled by
             * a burst of load (3-21 runs per design).  A fresh communicator
             * explores again; the miss is reported only if the design that
             * one settles on misses three times too. */
            MPI_Comm world = MPI_COMM_WORLD;
            if (zipcclCommInitMpi(&fresh, &world) != zipcclSuccess) {
                snprintf(why, sizeof why, "init of a second communicator: %s", zipcclGetLastErrorDetail());
                ok = 0;
                break;
            }
            k.comm = fresh;
            for (int i = 0; i < kAutoCalls; i++) timedCall(&k, zipcclStrategyAuto, &settledOn, &ok);
            if (ok && memcmp(k.got, ref, outN * e)) same = 0;
        }
        for (int r = 0; r < kRounds; r++) {
            int order[4] = {0, 1, 2, 3};
            uint64_t h = 0x9E3779B97F4A7C15ull * (uint64_t)(r + 1 + 16 * attempt);
            for (int i = slots - 1; i > 0; i--) { /* Fisher-Yates */
                h = h * 6364136223846793005ull + 1442695040888963407ull;
                int j = (int)((h >> 33) % (uint64_t)(i + 1)), t = order[i];
                order[i] = order[j], order[j] = t;
            }
            for (int j = 0; j < slots; j++) {
                int f = f0 + order[j]; /* f == 3: auto */
                if (f < 3) {
                    tf[f][r] = timedCall(&k, fixed[f], &ran, &ok);
                    continue;
                }
                zipcclStrategy_t a;
                ta[r] = timedCall(&k, zipcclStrategyAuto, &a, &ok);
                if (a != settledOn) stay = 0, settledOn = a;
                if (ok && memcmp(k.got, ref, outN * e)) same = 0;
            }
        }
        best = 1e30, mAuto = median(ta, kRounds);
        for (int f = f0; f < 3; f++) {
            double m = median(tf[f], kRounds);
            if (m < best) best = m, bestF = f;
        }
        fast = agree(mAuto <= 1.5 * best); /* every rank decides alike whether to repeat */
        stay = agree(stay);
    }
    if (fresh) zipcclCommDestroy(fresh);
    if (rank == 0)
        printf("# %s %zu KiB/rank n=%d: auto -> %s %.3f ms, best fixed %s %.3f ms (%.2fx)%s\n", label, kib, nranks,
               zipcclStrategyName(settledOn), mAuto * 1e3, zipcclStrategyName(fixed[bestF]), best * 1e3,
               mAuto / best, fresh ? " (second exploration)" : "");
    if (!fast)
        snprintf(why, sizeof why, "auto %.3f ms vs best fixed %s %.3f ms", mAuto * 1e3,
                 zipcclStrategyName(fixed[bestF]), best * 1e3);
    else if (!stay)
        snprintf(why, sizeof why, "auto changed strategy during the timing rounds");
    else if (!same)
        snprintf(why, sizeof why, "a timing-round auto call differs from the reference");
    snprintf(name, sizeof name, "auto_%s_%zuKiB_n%d_near_best_fixed", label, kib, nranks);
    report(ok && fast && stay && same, name);
    free(k.send), free(k.got), free(ref);
}

/* With ZIPCCL_AUTO_EXPLORE=0 auto is the model alone, which is frozen until
 * its first refinement (at the earliest the 32nd auto call): the first 7
 * calls agree. */
static void testExploreOff(void) {
    setenv("ZIPCCL_AUTO_EXPLORE", "0", 1);
    zipcclComm_t comm;
    MPI_Comm world = MPI_COMM_WORLD;
    zipcclResult_t r = zipcclCommInitMpi(&comm, &world);
    unsetenv("ZIPCCL_AUTO_EXPLORE");
    if (r != zipcclSuccess) snprintf(why, sizeof why, "init: %s", zipcclGetLastErrorDetail());
    int ok = r == zipcclSuccess, one = 1;
    if (ok) {
        size_t count = 16384;
        Case k = {zipcclCollAllGather, zipcclBfloat16, count, malloc(count * 2), malloc(count * 2 * (size_t)nranks), comm};
        char* ref = malloc(count * 2 * (size_t)nranks);
        fill(k.send, count, zipcclBfloat16, 7);
        MPI_Allgather(k.send, (int)(count * 2), MPI_BYTE, ref, (int)(count * 2), MPI_BYTE, MPI_COMM_WORLD);
        zipcclStrategy_t first = zipcclStrategyDefault, s;
        int settled = 0; /* nothing to measure: settled before any call */
        if (zipcclAutoSettled(comm, zipcclCollAllGather, zipcclBfloat16, count * 2, &settled) != zipcclSuccess || !settled) {
            snprintf(why, sizeof why, "zipcclAutoSettled says %d before the first call (%s)", settled, zipcclGetLastErrorDetail());
            ok = 0;
        }
        for (int i = 0; i < 7 && ok; i++) {
            timedCall(&k, zipcclStrategyAuto, &s, &ok);
            if (i == 0) first = s;
            one &= s == first;
            if (ok && memcmp(k.got, ref, count * 2 * (size_t)nranks)) {
                snprintf(why, sizeof why, "rank %d: call %d differs from MPI_Allgather", rank, i);
                ok = 0;
            }
        }
        if (!one) snprintf(why, sizeof why, "the pure model switched strategy before any refinement");
        free(k.send), free(k.got), free(ref);
        zipcclCommDestroy(comm);
    }
    char name[64];
    snprintf(name, sizeof name, "auto_explore_off_n%d_model_only", nranks);
    report(ok && one, name);
}

/* One auto AlltoAllv of bf16 (as uint16): poisons `got`, runs the call,
 * compares with `ref` (ro elements) and checks that every rank ran one
 * strategy.  Returns that strategy (-1: none counted), or -2 if the call
 * failed; clears *same or *agreed (keeping the first reason in `why`). */
static int a2avAutoCall(zipcclComm_t comm, int call, const uint16_t* send, const size_t* sc, const size_t* sd,
                        uint16_t* got, const size_t* rc, const size_t* rd, const uint16_t* ref, size_t ro,
                        int* same, int* agreed) {
    memset(got, 0xA5, ro * 2);
    zipcclCounters_t before, after;
    zipcclCommGetCounters(comm, zipcclCollAlltoAllv, &before);
    zipcclCallConfig_t cfg = ZIPCCL_CALL_CONFIG_DEFAULT;
    cfg.strategy = zipcclStrategyAuto;
    zipcclResult_t r = zipcclAlltoAllv(send, sc, sd, got, rc, rd, zipcclBfloat16, comm, &cfg, NULL);
    if (r != zipcclSuccess) {
        snprintf(why, sizeof why, "rank %d call %d: %s: %s", rank, call, zipcclGetErrorString(r),
                 zipcclGetLastErrorDetail());
        return -2;
    }
    if (memcmp(got, ref, ro * 2) && *same) {
        snprintf(why, sizeof why, "rank %d: auto AlltoAllv call %d differs from MPI_Alltoallv", rank, call);
        *same = 0;
    }
    zipcclCommGetCounters(comm, zipcclCollAlltoAllv, &after);
    int s = -1, lo = 0, hi = 0;
    for (int i = 0; i < 5; i++)
        if (after.byStrategy[i] != before.byStrategy[i]) s = i;
    MPI_Allreduce(&s, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&s, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (lo != hi && *agreed) {
        snprintf(why, sizeof why, "call %d: ranks ran different strategies (%d..%d)", call, lo, hi);
        *agreed = 0;
    }
    return s;
}

/* AlltoAllv under auto: sizes are rank-local, so each call decides from the
 * previous call's agreed largest size (switcher.c, a2avTotal).  Phase 1:
 * rank 0's sizes move to a new size bucket every call while the others'
 * stay, so the bucket a rank would pick from its own size differs between
 * ranks, and a call's size differs from the previous call's.  Phase 2: the
 * sizes stay, so the bucket explores every candidate, native included.
 * Every call must equal MPI_Alltoallv bit for bit and run the same strategy
 * on every rank. */
static size_t a2avCount(int from, int to, int call) {
    if (from == 0 && call < 12) return ((size_t)16 << call) + (size_t)to; /* 12 buckets */
    return 3000 + (size_t)(7 * from + to);
}
static void testAlltoAllvAgreed(void) {
    enum { kCalls = 33 };
    zipcclComm_t comm;
    MPI_Comm world = MPI_COMM_WORLD;
    zipcclResult_t r = zipcclCommInitMpi(&comm, &world);
    int ok = r == zipcclSuccess, same = 1, agreed = 1;
    if (!ok) snprintf(why, sizeof why, "init: %s", zipcclGetLastErrorDetail());
    size_t maxPer = ((size_t)16 << 11) + (size_t)nranks + 3000 + 8 * (size_t)nranks;
    uint16_t* send = malloc(maxPer * (size_t)nranks * 2);
    uint16_t* got = malloc(maxPer * (size_t)nranks * 2);
    uint16_t* ref = malloc(maxPer * (size_t)nranks * 2);
    size_t sc[64], sd[64], rc[64], rd[64];
    int isc[64], isd[64], irc[64], ird[64];
    uint64_t ran[5] = {0};
    for (int call = 0; call < kCalls && ok; call++) {
        size_t so = 0, ro = 0;
        for (int j = 0; j < nranks; j++) {
            sc[j] = a2avCount(rank, j, call), rc[j] = a2avCount(j, rank, call);
            sd[j] = so, rd[j] = ro, so += sc[j], ro += rc[j];
            isc[j] = (int)sc[j], isd[j] = (int)sd[j], irc[j] = (int)rc[j], ird[j] = (int)rd[j];
        }
        fill(send, so, zipcclBfloat16, 500 + (uint64_t)call);
        MPI_Alltoallv(send, isc, isd, MPI_UINT16_T, ref, irc, ird, MPI_UINT16_T, MPI_COMM_WORLD);
        int s = a2avAutoCall(comm, call, send, sc, sd, got, rc, rd, ref, ro, &same, &agreed);
        if (s == -2) ok = 0;
        else if (s >= 0) ran[s]++;
    }
    int native = nranks == 1 || ran[zipcclStrategyNative] > 0;
    if (ok && same && agreed && !native) snprintf(why, sizeof why, "native never ran (the bucket explores it)");
    char name[64];
    snprintf(name, sizeof name, "auto_alltoallv_n%d_agreed_design_bits", nranks);
    report(ok && same && agreed && native, name);
    if (rank == 0)
        printf("# auto AlltoAllv: calls by strategy native %llu, raw %llu, compressed %llu\n",
               (unsigned long long)ran[zipcclStrategyNative], (unsigned long long)ran[zipcclStrategyRaw],
               (unsigned long long)ran[zipcclStrategyCompressed]);
    if (ok) zipcclCommDestroy(comm); /* not after a failed call: the communicator is broken */
    free(send), free(got), free(ref);
}

/* AlltoAllv under auto follows a change of the largest size (switcher.c,
 * a2avTotal), with the pure model (ZIPCCL_AUTO_EXPLORE=0) at a declared 1
 * Gbit/s link, where it runs compressed from 64 KiB per rank and native for
 * a few hundred bytes.  Calls 0-5 send 32 KiB to every rank, 6-11 32 bytes,
 * 12-29 32 KiB again, 30-31 32 bytes:
 *   - call 6 still runs compressed (it decides from the sizes agreed
 *     before), and its message tags carry every rank's size bucket, so call
 *     7 already runs native, with no collective in between;
 *   - native carries no size words: back at 32 KiB, the agreement every 8th
 *     native call (from call 7 on) brings compressed back at call 16, and it
 *     stays until the drop at call 30;
 *   - call 31 runs native again and starts a size agreement (the first
 *     native call after an agreement does), which zipcclCommDestroy must
 *     complete.
 * Every call equals MPI_Alltoallv and runs one strategy on all ranks. */
static void testAlltoAllvSizeChange(void) {
    enum { kCalls = 32, kBig = 16384, kTiny = 16 };
    setenv("ZIPCCL_AUTO_EXPLORE", "0", 1);
    setenv("ZIPCCL_LINK_GBPS", "1", 1);
    zipcclComm_t comm;
    MPI_Comm world = MPI_COMM_WORLD;
    zipcclResult_t r = zipcclCommInitMpi(&comm, &world);
    unsetenv("ZIPCCL_AUTO_EXPLORE");
    unsetenv("ZIPCCL_LINK_GBPS");
    int ok = r == zipcclSuccess, same = 1, agreed = 1;
    if (!ok) snprintf(why, sizeof why, "init: %s", zipcclGetLastErrorDetail());
    const size_t total = (size_t)kBig * (size_t)nranks;
    uint16_t* send = malloc(total * 2);
    uint16_t* got = malloc(total * 2);
    uint16_t* ref = malloc(total * 2);
    size_t sc[64], sd[64];
    int ic[64], id[64];
    int ran[kCalls];
    for (int call = 0; call < kCalls && ok; call++) {
        const size_t per = (call >= 6 && call < 12) || call >= 30 ? kTiny : kBig;
        for (int j = 0; j < nranks; j++) sc[j] = per, sd[j] = (size_t)j * per, ic[j] = (int)per, id[j] = (int)sd[j];
        fill(send, per * (size_t)nranks, zipcclBfloat16, 900 + (uint64_t)call);
        MPI_Alltoallv(send, ic, id, MPI_UINT16_T, ref, ic, id, MPI_UINT16_T, MPI_COMM_WORLD);
        ran[call] = a2avAutoCall(comm, call, send, sc, sd, got, sc, sd, ref, per * (size_t)nranks, &same, &agreed);
        if (ran[call] == -2) ok = 0;
    }
    int follows = ok;
    if (ok) {
        const int C = zipcclStrategyCompressed, N = zipcclStrategyNative;
        int back = -1; /* the first compressed call after the return to 32 KiB */
        for (int call = 12; call < 30 && back < 0; call++)
            if (ran[call] == C) back = call;
        for (int call = back < 0 ? 30 : back; call <= 30; call++) follows &= ran[call] == C;
        follows &= ran[5] == C && ran[6] == C && ran[7] == N && back == 16 && ran[31] == N;
        if (!follows)
            snprintf(why, sizeof why, "strategies at calls 5, 6, 7: %d %d %d (want compressed, compressed, native); "
                     "compressed again from call %d (want 16, then through call 30); call 31: %d (want native)",
                     ran[5], ran[6], ran[7], back, ran[31]);
    }
    char name[64];
    snprintf(name, sizeof name, "auto_alltoallv_n%d_follows_size_change", nranks);
    report(ok && same && agreed && follows, name);
    if (ok) zipcclCommDestroy(comm); /* not after a failed call: the communicator is broken */
    free(send), free(got), free(ref);
}

/* The one-shot AllReduce is a candidate of auto below 64 KiB of buffer only
 * (switcher.c, oneShotFits: it lost 0.53-0.60x to the other designs from
 * 64 KiB in the sweeps).  On a communicator whose link is declared slow to
 * start a message (ZIPCCL_LINK_ALPHA_US=500), where the model rates the
 * one-shot design, one latency, cheapest at both sizes: per size, a
 * bucket's exploration and first re-measured pair.  At 4 KiB the one-shot
 * design runs (a candidate, explored 21 times), at 64 KiB never; every call
 * equals the raw strategy's result bit for bit (the canonical order all
 * AllReduce designs share). */
static void testOneShotCandidacy(void) {
    if (nranks == 1) return; /* one rank: auto measures nothing */
    setenv("ZIPCCL_LINK_ALPHA_US", "500", 1);
    MPI_Comm world = MPI_COMM_WORLD;
    zipcclComm_t comm = NULL;
    zipcclResult_t init = zipcclCommInitMpi(&comm, &world);
    unsetenv("ZIPCCL_LINK_ALPHA_US");
    if (init != zipcclSuccess) {
        snprintf(why, sizeof why, "init: %s", zipcclGetLastErrorDetail());
        report(0, "auto_allreduce_oneshot_comm_init");
        return;
    }
    const size_t counts[2] = {2048, 32768}; /* bf16: 4 and 64 KiB */
    for (int c = 0; c < 2; c++) {
        const size_t n = counts[c];
        uint16_t *in = malloc(n * 2), *got = malloc(n * 2), *ref = malloc(n * 2);
        fill(in, n, zipcclBfloat16, 900 + (uint64_t)c);
        int ok = 1, same = 1;
        zipcclCallConfig_t cfg = ZIPCCL_CALL_CONFIG_DEFAULT;
        cfg.strategy = zipcclStrategyRaw;
        if (zipcclAllReduce(in, ref, n, zipcclBfloat16, zipcclSum, comm, &cfg, NULL) != zipcclSuccess) ok = 0;
        zipcclCounters_t before, after;
        zipcclCommGetCounters(comm, zipcclCollAllReduce, &before);
        cfg.strategy = zipcclStrategyAuto;
        for (int i = 0; i < kAutoCalls && ok; i++) {
            memset(got, 0xA5, n * 2);
            zipcclResult_t r = zipcclAllReduce(in, got, n, zipcclBfloat16, zipcclSum, comm, &cfg, NULL);
            if (r != zipcclSuccess) {
                snprintf(why, sizeof why, "rank %d call %d: %s", rank, i, zipcclGetLastErrorDetail());
                ok = 0;
            } else if (memcmp(got, ref, n * 2) && same) {
                snprintf(why, sizeof why, "rank %d: auto AllReduce call %d differs from raw", rank, i);
                same = 0;
            }
        }
        zipcclCommGetCounters(comm, zipcclCollAllReduce, &after);
        uint64_t oneshot = after.byAlgo[zipcclAlgoOneShot] - before.byAlgo[zipcclAlgoOneShot];
        int want = c == 0 ? oneshot > 0 : oneshot == 0;
        if (ok && same && !want)
            snprintf(why, sizeof why, "%zu KiB: the one-shot design ran %llu of %d auto calls", n * 2 / 1024,
                     (unsigned long long)oneshot, kAutoCalls);
        char name[80];
        snprintf(name, sizeof name, "auto_allreduce_%zuKiB_n%d_oneshot_%s", n * 2 / 1024, nranks,
                 c == 0 ? "candidate" : "not_candidate");
        report(ok && same && want, name);
        free(in), free(got), free(ref);
    }
    zipcclCommDestroy(comm);
}

int main(int argc, char** argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (rank != 0) tu_quiet_pass = 1;
    unsetenv("ZIPCCL_AUTO_EXPLORE");
    unsetenv("ZIPCCL_STRATEGY");
    MPI_Comm world = MPI_COMM_WORLD;
    zipcclComm_t comm;
    zipcclResult_t r = zipcclCommInitMpi(&comm, &world);
    if (rank == 0) CHECK(r == zipcclSuccess, "comm_init", "%s", zipcclGetLastErrorDetail());
    if (r != zipcclSuccess) { MPI_Finalize(); return 1; }
    /* per-rank inputs of 32 KiB and 1 MiB */
    runCase(comm, zipcclCollAllGather, zipcclBfloat16, 16384);
    runCase(comm, zipcclCollAllGather, zipcclBfloat16, 524288);
    runCase(comm, zipcclCollReduceScatter, zipcclFloat32, 8192 / (size_t)nranks);
    runCase(comm, zipcclCollReduceScatter, zipcclFloat32, 262144 / (size_t)nranks);
    int flag = 0; /* bad arguments: clear errors */
    int bad = zipcclAutoSettled(NULL, zipcclCollAllGather, zipcclBfloat16, 1024, &flag) == zipcclInvalidArgument &&
              zipcclAutoSettled(comm, zipcclCollAllGather, zipcclBfloat16, 1024, NULL) == zipcclInvalidArgument &&
              zipcclAutoSettled(comm, zipcclNumCollKinds, zipcclBfloat16, 1024, &flag) == zipcclInvalidArgument &&
              zipcclAutoSettled(comm, zipcclCollAllGather, (zipcclDataType_t)99, 1024, &flag) == zipcclInvalidArgument;
    if (!bad) snprintf(why, sizeof why, "zipcclAutoSettled accepted a bad argument");
    report(bad, "auto_settled_query_bad_arguments");
    zipcclCommDestroy(comm);
    testOneShotCandidacy();
    testAlltoAllvAgreed();
    testAlltoAllvSizeChange();
    testExploreOff();
    MPI_Finalize();
    return tu_exit();
}
