// test: ranks=1,2,3,4,8 timeout=300
/*
 * test_coll.c — every collective x dtype x strategy x count on real MPI
 * ranks, checked bit for bit against independent references:
 *   - AllGather / AlltoAll / AlltoAllv: MPI's own collective on the same data;
 *   - ReduceScatter / AllReduce: every rank regenerates every rank's input
 *     and forms the canonical sum itself (docs/COLLECTIVES.md: block b is
 *     summed in fp32 in the order b+1, ..., b-1, b, divided by n for avg,
 *     rounded once); native (MPI's own order) within a tolerance.
 * Raw, compressed-fast, compressed-dense, ring and direct must all equal the
 * reference exactly, so they equal each other.  Compressed calls on Gaussian
 * data must put fewer bytes on the wire than raw ones (the counters).
 * Pieces are set small (ZIPCCL_PIECE_BYTES=65536) so even 8 ranks pipeline
 * several pieces per block.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "testutil.h"
#include "zipccl.h"
#include "gauss.h"
#include "mpitest.h"


/* ---- deterministic data: any rank can regenerate any rank's input ---------- */

static size_t esz(zipcclDataType_t dt) { return zipcclTypeSize(dt); }

static float toF(const void* p, size_t i, zipcclDataType_t dt) {
    if (dt == zipcclFloat32) return ((const float*)p)[i];
    uint16_t h = ((const uint16_t*)p)[i];
    if (dt == zipcclBfloat16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    _Float16 x;
    memcpy(&x, &h, 2);
    return (float)x;
}
/* Round to nearest even, written independently of the library's version. */
static void fromF(void* p, size_t i, float v, zipcclDataType_t dt) {
    if (dt == zipcclFloat32) { ((float*)p)[i] = v; return; }
    uint16_t h;
    if (dt == zipcclBfloat16) {
        uint32_t u;
        memcpy(&u, &v, 4);
        if (isnan(v)) h = (uint16_t)((u >> 16) | 0x40);
        else {
            uint32_t lsb = (u >> 16) & 1, rem = u & 0xFFFF;
            h = (uint16_t)(u >> 16);
            if (rem > 0x8000 || (rem == 0x8000 && lsb)) h++;
        }
    } else {
        _Float16 x = (_Float16)v;
        memcpy(&h, &x, 2);
    }
    ((uint16_t*)p)[i] = h;
}

/* Element i of rank r's input for test `seed`: Gaussian (sigma 0.02), or
 * random bit patterns when bits != 0 (stored frames, NaNs and all). */
static void fill(void* buf, size_t count, zipcclDataType_t dt, int r, uint64_t seed, int bits) {
    for (size_t i = 0; i < count; i++) {
        uint64_t key = seed * 0x1000193ull + ((uint64_t)r << 40) + i;
        if (bits) {
            uint64_t b = gauss_mix(key);
            if (esz(dt) == 4) ((uint32_t*)buf)[i] = (uint32_t)b;
            else ((uint16_t*)buf)[i] = (uint16_t)b;
        } else {
            fromF(buf, i, (float)(0.02 * gauss_of(key)), dt);
        }
    }
}

/* ---- verdicts ---------------------------------------------------------------- */


typedef struct {
    const char* name;
    zipcclStrategy_t strategy;
    zipcclCodec_t codec;
    zipcclAlgo_t algo;
} Strat;
static const Strat kStrats[] = {
    {"native", zipcclStrategyNative, zipcclCodecFast, zipcclAlgoDirect},
    {"raw", zipcclStrategyRaw, zipcclCodecFast, zipcclAlgoDirect},
    {"fast", zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoDirect},
    {"dense", zipcclStrategyCompressed, zipcclCodecDense, zipcclAlgoDirect},
    {"f3", zipcclStrategyCompressed, zipcclCodecF3, zipcclAlgoDirect},
    {"auto", zipcclStrategyAuto, zipcclCodecFast, zipcclAlgoDirect},
    {"raw-ring", zipcclStrategyRaw, zipcclCodecFast, zipcclAlgoRing},
    {"fast-ring", zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoRing},
    {"dense-ring", zipcclStrategyCompressed, zipcclCodecDense, zipcclAlgoRing},
    {"raw-oneshot", zipcclStrategyRaw, zipcclCodecFast, zipcclAlgoOneShot},
    {"fast-oneshot", zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoOneShot},
};
enum { kNumStrats = sizeof kStrats / sizeof kStrats[0] };

/* Which collectives a table entry is run on: the ring on the reductions, the
 * one-shot design on AllGather and AllReduce; auto is tested on the
 * data-movement collectives by test_coll_auto. */
static int applies(const Strat* s, zipcclCollKind_t kind) {
    int red = kind == zipcclCollReduceScatter || kind == zipcclCollAllReduce;
    if (s->strategy == zipcclStrategyAuto || s->algo == zipcclAlgoRing) return red;
    if (s->algo == zipcclAlgoOneShot) return kind == zipcclCollAllGather || kind == zipcclCollAllReduce;
    return 1;
}

/* The design a raw/compressed call runs (zipccl.h, zipcclAlgo_t): AllGather
 * is a ring unless one-shot, ReduceScatter direct unless ring. */
static zipcclAlgo_t designRun(zipcclCollKind_t kind, zipcclAlgo_t a) {
    if (kind == zipcclCollAllGather) return a == zipcclAlgoOneShot ? a : zipcclAlgoRing;
    if (kind == zipcclCollReduceScatter) return a == zipcclAlgoRing ? a : zipcclAlgoDirect;
    return a;
}

static const zipcclDataType_t kTypes[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};

static size_t kCounts[4];
static zipcclComm_t comm;
static char variant[32] = ""; /* appended to check names: "_w1" etc. */

static zipcclResult_t lastRes;
#define ZCHECK(call)                                                                  \
    do {                                                                              \
        lastRes = (call);                                                             \
        if (lastRes != zipcclSuccess) {                                               \
            snprintf(why, sizeof why, "rank %d: %s: %s", rank, zipcclGetErrorString(lastRes), \
                     zipcclGetLastErrorDetail());                                     \
            ok = 0;                                                                   \
        }                                                                             \
    } while (0)

/* Compressed on Gaussian data must have put fewer bytes on the wire. */
static int checkCompressed(zipcclCollKind_t kind, const Strat* s, zipcclCounters_t* before) {
    zipcclCounters_t after;
    zipcclCommGetCounters(comm, kind, &after);
    int ok = after.calls == before->calls + 1;
    /* the design's codec and algorithm are counted (auto: whatever it ran);
     * the All-to-Alls have one design and count none */
    int red = kind != zipcclCollAlltoAll && kind != zipcclCollAlltoAllv;
    uint64_t coded = 0, algos = 0;
    for (int i = 0; i < ZIPCCL_NCODECS; i++) coded += after.byCodec[i] - before->byCodec[i];
    for (int i = 0; i < ZIPCCL_NALGOS; i++) algos += after.byAlgo[i] - before->byAlgo[i];
    uint64_t comp = after.byStrategy[zipcclStrategyCompressed] - before->byStrategy[zipcclStrategyCompressed];
    uint64_t nat = after.byStrategy[zipcclStrategyNative] - before->byStrategy[zipcclStrategyNative];
    ok &= coded == comp && algos == (red ? 1 - nat : 0);
    if (s->strategy == zipcclStrategyCompressed)
        ok &= after.byCodec[s->codec] == before->byCodec[s->codec] + 1;
    zipcclAlgo_t ran = designRun(kind, s->algo);
    if (red && (s->strategy == zipcclStrategyRaw || s->strategy == zipcclStrategyCompressed))
        ok &= after.byAlgo[ran] == before->byAlgo[ran] + 1;
    if (!ok) snprintf(why, sizeof why, "rank %d: %s counters: calls +%llu, codec +%llu, algo +%llu", rank,
                      s->name, (unsigned long long)(after.calls - before->calls),
                      (unsigned long long)coded, (unsigned long long)algos);
    if (s->strategy == zipcclStrategyCompressed) {
        ok &= after.byStrategy[zipcclStrategyCompressed] == before->byStrategy[zipcclStrategyCompressed] + 1;
        uint64_t raw = after.rawBytes - before->rawBytes, wire = after.wireBytes - before->wireBytes;
        if (raw > 100000 && wire >= raw) {
            snprintf(why, sizeof why, "rank %d: compressed sent %llu bytes for %llu raw", rank,
                     (unsigned long long)wire, (unsigned long long)raw);
            ok = 0;
        }
    }
    *before = after;
    return ok;
}

/* ---- AllGather / AlltoAll / AlltoAllv: vs MPI ----------------------------------- */

static void testAllGather(zipcclDataType_t dt) {
    for (int si = 0; si < kNumStrats; si++) {
        const Strat* s = &kStrats[si];
        if (!applies(s, zipcclCollAllGather)) continue;
        zipcclCallConfig_t cfg = {s->strategy, s->codec, s->algo};
        int ok = 1;
        zipcclCounters_t ctr;
        zipcclCommGetCounters(comm, zipcclCollAllGather, &ctr);
        for (int ci = 0; ci < 4; ci++) {
            for (int mode = 0; mode < 3; mode++) { /* 0 gauss, 1 bits, 2 gauss in place */
                if (mode == 1 && ci != 2) continue;
                size_t cnt = kCounts[ci], bytes = cnt * esz(dt);
                char* send = malloc(bytes + 1);
                char* got = malloc(bytes * nranks + 1);
                char* want = malloc(bytes * nranks + 1);
                fill(send, cnt, dt, rank, 100 + ci, mode == 1);
                MPI_Allgather(send, (int)bytes, MPI_BYTE, want, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
                memset(got, 0xEE, bytes * nranks + 1);
                if (mode == 2) {
                    memcpy(got + rank * bytes, send, bytes);
                    ZCHECK(zipcclAllGather(got + rank * bytes, got, cnt, dt, comm, &cfg, NULL));
                } else {
                    ZCHECK(zipcclAllGather(send, got, cnt, dt, comm, &cfg, NULL));
                }
                if (memcmp(got, want, bytes * nranks) || (unsigned char)got[bytes * nranks] != 0xEE) {
                    if (ok) snprintf(why, sizeof why, "rank %d: count %zu mode %d differs from MPI_Allgather", rank, cnt, mode);
                    ok = 0;
                }
                if (mode == 0 && !checkCompressed(zipcclCollAllGather, s, &ctr)) ok = 0;
                zipcclCommGetCounters(comm, zipcclCollAllGather, &ctr);
                free(send), free(got), free(want);
            }
        }
        char name[96];
        snprintf(name, sizeof name, "allgather_%s_%s_np%d", zipcclTypeName(dt), s->name, nranks);
        report(ok, name);
    }
}

static void testAlltoAll(zipcclDataType_t dt) {
    for (int si = 0; si < kNumStrats; si++) {
        const Strat* s = &kStrats[si];
        if (!applies(s, zipcclCollAlltoAll)) continue;
        zipcclCallConfig_t cfg = {s->strategy, s->codec, s->algo};
        int ok = 1;
        zipcclCounters_t ctr;
        zipcclCommGetCounters(comm, zipcclCollAlltoAll, &ctr);
        for (int ci = 0; ci < 4; ci++) {
            for (int mode = 0; mode < 3; mode++) {
                if (mode == 1 && ci != 2) continue;
                size_t cnt = kCounts[ci] / (size_t)nranks + (ci == 2), bytes = cnt * esz(dt);
                if (ci == 1) cnt = 1, bytes = esz(dt);
                char* send = malloc(bytes * nranks + 1);
                char* got = malloc(bytes * nranks + 1);
                char* want = malloc(bytes * nranks + 1);
                fill(send, cnt * nranks, dt, rank, 200 + ci, mode == 1);
                MPI_Alltoall(send, (int)bytes, MPI_BYTE, want, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
                memset(got, 0xEE, bytes * nranks + 1);
                if (mode == 2) {
                    memcpy(got, send, bytes * nranks);
                    ZCHECK(zipcclAlltoAll(got, got, cnt, dt, comm, &cfg, NULL));
                } else {
                    ZCHECK(zipcclAlltoAll(send, got, cnt, dt, comm, &cfg, NULL));
                }
                if (memcmp(got, want, bytes * nranks) || (unsigned char)got[bytes * nranks] != 0xEE) {
                    if (ok) snprintf(why, sizeof why, "rank %d: count %zu mode %d differs from MPI_Alltoall", rank, cnt, mode);
                    ok = 0;
                }
                if (mode == 0 && !checkCompressed(zipcclCollAlltoAll, s, &ctr)) ok = 0;
                zipcclCommGetCounters(comm, zipcclCollAlltoAll, &ctr);
                free(send), free(got), free(want);
            }
        }
        char name[96];
        snprintf(name, sizeof name, "alltoall_%s_%s_np%d%s", zipcclTypeName(dt), s->name, nranks, variant);
        report(ok, name);
    }
}

/* Variable counts with zeros and gaps between blocks. */
static size_t vcount(int from, int to, int scale) {
    size_t base[] = {0, 1, 777, 3000};
    return base[(from * 3 + to * 5 + scale) % 4] * (size_t)(scale ? 7 : 1);
}

static void testAlltoAllv(zipcclDataType_t dt) {
    for (int si = 0; si < kNumStrats; si++) {
        const Strat* s = &kStrats[si];
        if (!applies(s, zipcclCollAlltoAllv)) continue;
        zipcclCallConfig_t cfg = {s->strategy, s->codec, s->algo};
        int ok = 1;
        for (int scale = 0; scale < 3; scale++) {
            for (int inplace = 0; inplace < 2; inplace++) {
                size_t sc[nranks], sd[nranks], rc[nranks], rd[nranks], stot = 0, rtot = 0;
                int isc[nranks], isd[nranks], irc[nranks], ird[nranks];
                for (int p = 0; p < nranks; p++) {
                    sc[p] = vcount(rank, p, scale), rc[p] = vcount(p, rank, scale);
                    sd[p] = stot, rd[p] = rtot;
                    stot += sc[p] + (inplace ? 0 : 5), rtot += rc[p] + (inplace ? 0 : 3);
                }
                if (inplace) { /* same layout for send and receive */
                    size_t t = 0;
                    for (int p = 0; p < nranks; p++) {
                        size_t m = sc[p] > rc[p] ? sc[p] : rc[p];
                        sd[p] = rd[p] = t;
                        t += m;
                    }
                    stot = rtot = t;
                }
                for (int p = 0; p < nranks; p++)
                    isc[p] = (int)sc[p], isd[p] = (int)sd[p], irc[p] = (int)rc[p], ird[p] = (int)rd[p];
                size_t e = esz(dt);
                char* send = calloc(stot + 1, e);
                char* got = malloc((rtot + 1) * e);
                char* want = malloc((rtot + 1) * e);
                fill(send, stot, dt, rank, 300 + scale, scale == 1);
                MPI_Datatype mt = e == 4 ? MPI_FLOAT : MPI_UINT16_T;
                memset(want, 0xEE, (rtot + 1) * e);
                memset(got, 0xEE, (rtot + 1) * e);
                MPI_Alltoallv(send, isc, isd, mt, want, irc, ird, mt, MPI_COMM_WORLD);
                if (inplace) {
                    memcpy(got, send, stot * e);
                    /* untouched gaps keep the input: mirror that in want */
                    for (int p = 0; p < nranks; p++)
                        memcpy(want + (rd[p] + rc[p]) * e, send + (rd[p] + rc[p]) * e,
                               ((p + 1 < nranks ? rd[p + 1] : rtot) - rd[p] - rc[p]) * e);
                    ZCHECK(zipcclAlltoAllv(got, sc, sd, got, rc, rd, dt, comm, &cfg, NULL));
                } else {
                    ZCHECK(zipcclAlltoAllv(send, sc, sd, got, rc, rd, dt, comm, &cfg, NULL));
                }
                if (memcmp(got, want, (rtot + 1) * e)) {
                    if (ok) snprintf(why, sizeof why, "rank %d: scale %d inplace %d differs from MPI_Alltoallv", rank, scale, inplace);
                    ok = 0;
                }
                free(send), free(got), free(want);
            }
        }
        char name[96];
        snprintf(name, sizeof name, "alltoallv_%s_%s_np%d%s", zipcclTypeName(dt), s->name, nranks, variant);
        report(ok, name);
    }
}

/* ---- ReduceScatter / AllReduce: vs the canonical sum ------------------------------- */

/* Reference: element i of block b, summed over ranks b+1, ..., b (mod n). */
static void canonical(void* out, size_t begin, size_t cnt, int b, const void* const* inputs,
                      zipcclDataType_t dt, zipcclRedOp_t op) {
    for (size_t i = 0; i < cnt; i++) {
        float acc = 0;
        for (int j = 1; j <= nranks; j++) {
            float v = toF(inputs[(b + j) % nranks], begin + i, dt);
            acc = j == 1 ? v : acc + v;
        }
        if (op == zipcclAvg) acc /= (float)nranks;
        fromF(out, i, acc, dt);
    }
}

/* Native numerics differ (MPI's order, bf16 rounding per combine): close. */
static int close(const void* a, const void* b, size_t cnt, zipcclDataType_t dt) {
    double tol = dt == zipcclFloat32 ? 1e-5 : dt == zipcclFloat16 ? 2e-3 : 2e-2;
    for (size_t i = 0; i < cnt; i++) {
        double x = toF(a, i, dt), y = toF(b, i, dt);
        if (fabs(x - y) > tol * (0.05 * nranks) + 1e-6) return 0;
    }
    return 1;
}

static void testReduce(zipcclCollKind_t kind, zipcclDataType_t dt) {
    const int allreduce = kind == zipcclCollAllReduce;
    int ok[kNumStrats];
    zipcclCounters_t ctr[kNumStrats];
    char whyS[kNumStrats][sizeof why];
    for (int si = 0; si < kNumStrats; si++) ok[si] = 1, whyS[si][0] = 0;
    const size_t e = esz(dt);
    for (int ci = 0; ci < 4; ci++) {
        /* Inputs and the reference are made once and shared by all strategies. */
        size_t cnt = kCounts[ci]; /* RS: per rank; AR: total */
        size_t total = allreduce ? cnt : cnt * nranks;
        void* inputs[nranks];
        for (int p = 0; p < nranks; p++) {
            inputs[p] = malloc(total * e + 1);
            fill(inputs[p], total, dt, p, 400 + ci, 0);
        }
        char* want[2];
        for (int op = 0; op < 2; op++) {
            want[op] = malloc(cnt * e + 1);
            zipcclRedOp_t rop = op ? zipcclAvg : zipcclSum;
            if (allreduce) {
                size_t base = cnt / nranks, extra = cnt % nranks, d = 0;
                for (int b = 0; b < nranks; b++) {
                    size_t cb = base + ((size_t)b < extra);
                    canonical(want[op] + d * e, d, cb, b, (const void* const*)inputs, dt, rop);
                    d += cb;
                }
            } else {
                canonical(want[op], rank * cnt, cnt, rank, (const void* const*)inputs, dt, rop);
            }
        }
        char* send = malloc(total * e + 1);
        char* got = malloc(cnt * e + 1);
        for (int mode = 0; mode < 3; mode++) { /* 0 sum, 1 avg, 2 sum in place */
            if (mode == 1 && ci != 2) continue;
            zipcclRedOp_t op = mode == 1 ? zipcclAvg : zipcclSum;
            for (int si = 0; si < kNumStrats; si++) {
                const Strat* s = &kStrats[si];
                if (!applies(s, kind)) continue;
                zipcclCallConfig_t cfg = {s->strategy, s->codec, s->algo};
                zipcclCommGetCounters(comm, kind, &ctr[si]);
                memcpy(send, inputs[rank], total * e);
                memset(got, 0xEE, cnt * e + 1);
                char* res = got;
                int okc = 1;
#define ok okc
                if (mode == 2) {
                    if (allreduce) {
                        ZCHECK(zipcclAllReduce(send, send, cnt, dt, op, comm, &cfg, NULL));
                        res = send;
                    } else {
                        ZCHECK(zipcclReduceScatter(send, send + rank * cnt * e, cnt, dt, op, comm, &cfg, NULL));
                        res = send + rank * cnt * e;
                    }
                } else if (allreduce) {
                    ZCHECK(zipcclAllReduce(send, got, cnt, dt, op, comm, &cfg, NULL));
                } else {
                    ZCHECK(zipcclReduceScatter(send, got, cnt, dt, op, comm, &cfg, NULL));
                }
#undef ok
                /* auto never picks a native reduction, so it must match the canonical sum bit for bit */
                int same = s->strategy == zipcclStrategyNative
                               ? close(res, want[op == zipcclAvg], cnt, dt)
                               : !memcmp(res, want[op == zipcclAvg], cnt * e);
                if (!okc || !same || (res == got && (unsigned char)got[cnt * e] != 0xEE)) {
                    if (ok[si] && !why[0]) snprintf(why, sizeof why, "rank %d: count %zu mode %d differs from the canonical sum", rank, cnt, mode);
                    okc = 0;
                }
                if (mode == 0 && !checkCompressed(kind, s, &ctr[si])) okc = 0;
                if (!okc && ok[si]) { ok[si] = 0; snprintf(whyS[si], sizeof whyS[si], "%s", why); }
                why[0] = 0;
            }
        }
        for (int p = 0; p < nranks; p++) free(inputs[p]);
        free(want[0]), free(want[1]), free(send), free(got);
    }
    for (int si = 0; si < kNumStrats; si++) {
        if (!applies(&kStrats[si], kind)) continue;
        char name[96];
        snprintf(name, sizeof name, "%s_%s_%s_np%d", allreduce ? "allreduce" : "reducescatter",
                 zipcclTypeName(dt), kStrats[si].name, nranks);
        memcpy(why, whyS[si], sizeof why);
        report(ok[si], name);
    }
}

int main(int argc, char** argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (rank != 0) tu_quiet_pass = 1;
    setenv("ZIPCCL_PIECE_BYTES", "65536", 1);
    setenv("ZIPCCL_CALIBRATE", "0", 1);
    kCounts[0] = 0, kCounts[1] = 1, kCounts[2] = 777;
    kCounts[3] = ((size_t)1 << 20) / (size_t)nranks + 3; /* ~1M elements in all */
#if defined(__SANITIZE_ADDRESS__)
    kCounts[3] = ((size_t)1 << 17) / (size_t)nranks + 3; /* the ASan build runs ~3x slower */
#endif
    if (getenv("ZIPCCL_TEST_LONG")) kCounts[3] = ((size_t)1 << 22) + 3;
    MPI_Comm world = MPI_COMM_WORLD;
    zipcclResult_t r = zipcclCommInitMpi(&comm, &world);
    if (rank == 0) CHECK(r == zipcclSuccess, "comm_init", "%s", zipcclGetLastErrorDetail());
    if (r != zipcclSuccess) { MPI_Finalize(); return 1; }
    for (int t = 0; t < 3; t++) {
        testAllGather(kTypes[t]);
        testAlltoAll(kTypes[t]);
        testAlltoAllv(kTypes[t]);
        testReduce(zipcclCollReduceScatter, kTypes[t]);
        testReduce(zipcclCollAllReduce, kTypes[t]);
    }
    zipcclCommDestroy(comm);
    /* The All-to-Alls again with one step in flight and with all of them
     * (ZIPCCL_A2A_WINDOW), and with one or two piece sends in flight
     * (ZIPCCL_A2A_INFLIGHT, what a slow link gets; this machine's link is
     * fast, so by default there is no piece limit), then also the direct
     * ReduceScatter and AllReduce.  Both are read when a communicator is
     * created. */
    const struct { const char *var, *val, *tag; } knobs[] = {
        {"ZIPCCL_A2A_WINDOW", "1", "_w1"},
        {"ZIPCCL_A2A_WINDOW", "64", "_w64"},
        {"ZIPCCL_A2A_INFLIGHT", "1", "_i1"},
        {"ZIPCCL_A2A_INFLIGHT", "2", "_i2"},
    };
    for (int w = 0; w < 4; w++) {
        unsetenv("ZIPCCL_A2A_WINDOW");
        unsetenv("ZIPCCL_A2A_INFLIGHT");
        setenv(knobs[w].var, knobs[w].val, 1);
        snprintf(variant, sizeof variant, "%s", knobs[w].tag);
        r = zipcclCommInitMpi(&comm, &world);
        CHECK(r == zipcclSuccess, "comm_init_window", "%s", zipcclGetLastErrorDetail());
        if (r != zipcclSuccess) break;
        testAlltoAll(zipcclBfloat16);
        testAlltoAllv(zipcclBfloat16);
        if (!strcmp(knobs[w].var, "ZIPCCL_A2A_INFLIGHT")) { /* the direct ReduceScatter is paced alike */
            testReduce(zipcclCollReduceScatter, zipcclBfloat16);
            testReduce(zipcclCollAllReduce, zipcclBfloat16);
        }
        zipcclCommDestroy(comm);
    }
    /* Every variable is checked when a communicator is created; the link
     * and log ones were once taken silently (ZIPCCL_LINK_GBPS=0 or -1 then
     * meant "measured", ZIPCCL_LOG=7 full logging). */
    const struct { const char *var, *val; } bad[] = {
        {"ZIPCCL_A2A_WINDOW", "0"}, {"ZIPCCL_A2A_INFLIGHT", "-1"}, {"ZIPCCL_A2A_INFLIGHT", "2x"},
        {"ZIPCCL_AUTO_CONTEND", "-5"}, {"ZIPCCL_AUTO_CONTEND", "0.1"},
        {"ZIPCCL_LINK_GBPS", "0"}, {"ZIPCCL_LINK_GBPS", "-1"}, {"ZIPCCL_LINK_GBPS", "10G"},
        {"ZIPCCL_LINK_ALPHA_US", "0"}, {"ZIPCCL_LINK_ALPHA_US", "-3"}, {"ZIPCCL_INTRA_GBPS", "0"},
        {"ZIPCCL_INTRA_GBPS", "fast"}, {"ZIPCCL_INTRA_ALPHA_US", "-1"}, {"ZIPCCL_LOG", "7"}, {"ZIPCCL_LOG", "-1"},
        {"ZIPCCL_LOG", "yes"}, {"ZIPCCL_CALIBRATE", "2"}, {"ZIPCCL_AUTO_EXPLORE", "on"},
        {"ZIPCCL_TIMEOUT_S", "-1"}, {"ZIPCCL_TIMEOUT_S", "nan"}, {"ZIPCCL_PIECE_BYTES", "100"}};
    const size_t nbad = sizeof bad / sizeof bad[0];
    for (size_t b = 0; b < nbad; b++) {
        for (size_t u = 0; u < nbad; u++) unsetenv(bad[u].var);
        setenv(bad[b].var, bad[b].val, 1);
        r = zipcclCommInitMpi(&comm, &world);
        CHECK(r == zipcclInvalidArgument && strstr(zipcclGetLastErrorDetail(), bad[b].var),
              "env_knob_rejected", "%s=%s gave %s (%s)", bad[b].var, bad[b].val, zipcclGetErrorString(r),
              zipcclGetLastErrorDetail());
        if (r == zipcclSuccess) zipcclCommDestroy(comm);
    }
    for (size_t u = 0; u < nbad; u++) unsetenv(bad[u].var);
    setenv("ZIPCCL_PIECE_BYTES", "65536", 1);
    setenv("ZIPCCL_CALIBRATE", "0", 1);
    MPI_Finalize();
    return tu_exit();
}
