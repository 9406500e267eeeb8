// test: ranks=4,8 asan_ranks=4 timeout=300
/*
 * test_coll_hier.c — the hierarchical designs (algo hier) on emulated nodes:
 * ZIPCCL_NODE_SIZE=k makes ranks 0..k-1 node 0, k..2k-1 node 1, ... on one
 * machine (2 x 2 at 4 ranks, 4 x 2 and 2 x 4 at 8, 3 x 2 when run at 6; and, with the
 * variable unset, the one node MPI_Comm_split_type reports here); the
 * ReduceScatter's two ways between nodes (ZIPCCL_HIER_RS=chain, forward)
 * both at node size 2, auto's pick at the others.  AlltoAll and AlltoAllv
 * (uneven, with empty pairs) likewise against MPI's own.  Sub-communicators
 * see the nodes of their ranks (ZIPCCL_NODE_SIZE counts MPI_COMM_WORLD
 * ranks).
 * AllGather, ReduceScatter and AllReduce, bf16 and fp32, sum and avg, uneven
 * sizes: hier compressed == hier raw == flat compressed (ring and direct) ==
 * flat raw == the reference bit for bit (AllGather: MPI_Allgather;
 * reductions: the canonical sum recomputed here, docs/COLLECTIVES.md §3).
 * Counters: a hier call sends exactly as many bytes within the node
 * compressed as raw (intraBytes: nothing inside a node is coded), and fewer
 * between nodes (Gaussian data compresses); a flat compressed AllGather codes
 * its in-node hops too.  Small pieces (ZIPCCL_PIECE_BYTES=65536) so blocks
 * span several.  Auto at 2 x 2 (4 x 2 at 8 ranks) measures the hier designs,
 * and on one node never runs them (autoHier); by the model alone it runs
 * them when a fast node link is declared, and not when it is slow
 * (modelHier).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "testutil.h"
#include "zipccl.h"
#include "zipccl_tune.h"
#include "gauss.h"
#include "mpitest.h"

static float toF(const void* p, size_t i, zipcclDataType_t dt) {
    if (dt == zipcclFloat32) return ((const float*)p)[i];
    uint32_t u = (uint32_t)((const uint16_t*)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* Round to nearest even (bf16), written independently of the library's. */
static void fromF(void* p, size_t i, float v, zipcclDataType_t dt) {
    if (dt == zipcclFloat32) { ((float*)p)[i] = v; return; }
    uint32_t u;
    memcpy(&u, &v, 4);
    uint16_t h = (uint16_t)(u >> 16);
    uint32_t lsb = (u >> 16) & 1, rem = u & 0xFFFF;
    if (isnan(v)) h |= 0x40;
    else if (rem > 0x8000 || (rem == 0x8000 && lsb)) h++;
    ((uint16_t*)p)[i] = h;
}
static void fill(void* buf, size_t count, zipcclDataType_t dt, int r, uint64_t seed) {
    for (size_t i = 0; i < count; i++)
        fromF(buf, i, (float)(0.02 * gauss_of(seed * 0x1000193ull + ((uint64_t)r << 40) + i)), dt);
}

/* Block b (elements [d, d + cnt) of every rank's input) summed in fp32 in the
 * order b+1, ..., b-1, b, divided by n for avg, rounded once, into out. */
static void canonical(void* out, size_t d, size_t cnt, int b, void* const* inputs, zipcclDataType_t dt,
                      zipcclRedOp_t op) {
    for (size_t i = 0; i < cnt; i++) {
        float acc = 0;
        for (int j = 1; j <= nranks; j++) {
            float v = toF(inputs[(b + j) % nranks], d + i, dt);
            acc = j == 1 ? v : acc + v;
        }
        if (op == zipcclAvg) acc = acc / (float)nranks;
        fromF(out, i, acc, dt);
    }
}

typedef struct {
    const char* name;
    zipcclStrategy_t s;
    zipcclAlgo_t a;
} Run;
static const Run kRuns[] = {
    {"hier-fast", zipcclStrategyCompressed, zipcclAlgoHier}, {"hier-raw", zipcclStrategyRaw, zipcclAlgoHier},
    {"ring-fast", zipcclStrategyCompressed, zipcclAlgoRing}, {"direct-fast", zipcclStrategyCompressed, zipcclAlgoDirect},
    {"direct-raw", zipcclStrategyRaw, zipcclAlgoDirect},
};
enum { kRunsN = sizeof kRuns / sizeof kRuns[0] };

/* One collective at one size on comm: every run equals the reference; the
 * hier runs' counters as the header says.  Returns ok. */
static int check(zipcclComm_t comm, int k, zipcclCollKind_t kind, zipcclDataType_t dt, zipcclRedOp_t op,
                 size_t count, uint64_t seed) {
    const size_t e = zipcclTypeSize(dt);
    /* count: AllGather / ReduceScatter per rank, AllReduce in all */
    const size_t inN = kind == zipcclCollReduceScatter ? count * (size_t)nranks : count;
    const size_t outN = kind == zipcclCollAllGather ? count * (size_t)nranks
                      : kind == zipcclCollReduceScatter ? count : count;
    void* inputs[nranks];
    for (int r = 0; r < nranks; r++) {
        inputs[r] = malloc(inN * e + 1);
        fill(inputs[r], inN, dt, r, seed);
    }
    void* want = malloc(outN * e + 1);
    void* got = malloc(outN * e + 1);
    if (kind == zipcclCollAllGather) {
        MPI_Datatype mt = dt == zipcclFloat32 ? MPI_FLOAT : MPI_UINT16_T;
        MPI_Allgather(inputs[rank], (int)count, mt, want, (int)count, mt, MPI_COMM_WORLD);
    } else if (kind == zipcclCollReduceScatter) {
        canonical(want, (size_t)rank * count, count, rank, inputs, dt, op);
    } else { /* AllReduce: blocks as zipcclSplitBlocks (the first count % n one longer) */
        size_t base = count / (size_t)nranks, extra = count % (size_t)nranks, d = 0;
        for (int b = 0; b < nranks; b++) {
            size_t cb = base + ((size_t)b < extra);
            canonical((char*)want + d * e, d, cb, b, inputs, dt, op);
            d += cb;
        }
    }
    int ok = 1;
    zipcclCounters_t c0, c1;
    uint64_t intra[kRunsN], inter[kRunsN];
    for (int ri = 0; ri < kRunsN; ri++) {
        zipcclCallConfig_t cfg = {kRuns[ri].s, zipcclCodecFast, kRuns[ri].a};
        memset(got, 0xEE, outN * e);
        zipcclCommGetCounters(comm, kind, &c0);
        zipcclResult_t res;
        if (kind == zipcclCollAllGather) res = zipcclAllGather(inputs[rank], got, count, dt, comm, &cfg, NULL);
        else if (kind == zipcclCollReduceScatter) res = zipcclReduceScatter(inputs[rank], got, count, dt, op, comm, &cfg, NULL);
        else res = zipcclAllReduce(inputs[rank], got, count, dt, op, comm, &cfg, NULL);
        zipcclCommGetCounters(comm, kind, &c1);
        intra[ri] = c1.intraBytes - c0.intraBytes;
        inter[ri] = (c1.wireBytes - c0.wireBytes) - intra[ri];
        EXPECT(res == zipcclSuccess, "rank %d: %s %s: %s", rank, zipcclCollName(kind), kRuns[ri].name,
               zipcclGetLastErrorDetail());
        if (res == zipcclSuccess && memcmp(got, want, outN * e)) {
            size_t i = 0;
            while (i < outN && !memcmp((char*)got + i * e, (char*)want + i * e, e)) i++;
            EXPECT(0, "rank %d: %s %s %s count %zu: element %zu differs from the reference", rank,
                   zipcclCollName(kind), kRuns[ri].name, dt == zipcclFloat32 ? "fp32" : "bf16", count, i);
        }
        uint64_t algo = c1.byAlgo[zipcclAlgoHier] - c0.byAlgo[zipcclAlgoHier];
        EXPECT(algo == (kRuns[ri].a == zipcclAlgoHier), "rank %d: %s %s: byAlgo[hier] moved by %llu", rank,
               zipcclCollName(kind), kRuns[ri].name, (unsigned long long)algo);
    }
    /* Inside a node nothing is coded: hier compressed sends what hier raw
     * sends there, byte for byte; between nodes (there are some when k < n)
     * frames of Gaussian data are smaller, once a block is large. */
    EXPECT(intra[0] == intra[1], "rank %d: %s count %zu: hier compressed sent %llu bytes within the node, raw %llu",
           rank, zipcclCollName(kind), count, (unsigned long long)intra[0], (unsigned long long)intra[1]);
    if (k < nranks && count >= 4096)
        EXPECT(inter[0] < inter[1], "rank %d: %s count %zu: hier compressed sent %llu bytes between nodes, raw %llu",
               rank, zipcclCollName(kind), count, (unsigned long long)inter[0], (unsigned long long)inter[1]);
    if (k > 1 && kind == zipcclCollAllGather) {
        /* AllGather's bytes within a node: N rings of k, each rank sending k-1 blocks in each */
        uint64_t want_ = (uint64_t)(nranks / k) * (uint64_t)(k - 1) * count * e;
        EXPECT(intra[0] == want_, "rank %d: AllGather hier: %llu bytes within the node, expected %llu raw", rank,
               (unsigned long long)intra[0], (unsigned long long)want_);
        /* the flat ring (raw: "direct-raw", AllGather's design being the
         * ring) codes the hop to its right neighbour even within a node */
        if (count >= 4096 && intra[4])
            EXPECT(intra[2] < intra[4], "rank %d: AllGather ring: %llu bytes within the node compressed, %llu raw",
                   rank, (unsigned long long)intra[2], (unsigned long long)intra[4]);
    }
    for (int r = 0; r < nranks; r++) free(inputs[r]);
    free(want);
    free(got);
    return ok;
}

/* AlltoAll (v: 0) or AlltoAllv (v: 1; rank s sends cnt(s, d) elements to
 * rank d, some of them 0) under hier compressed, hier raw, flat compressed
 * and flat raw == MPI_Alltoall(v) bit for bit; hier sends raw within the
 * node (the same bytes there as hier raw), frames to other nodes. */
static size_t a2aCnt(int s, int d, size_t count, uint64_t seed) {
    if (((uint64_t)s * 7 + (uint64_t)d * 13 + seed) % 5 == 0) return 0;
    return count - (size_t)(((uint64_t)s * 31 + (uint64_t)d * 17) % (count / 2 + 1));
}
static int checkA2a(zipcclComm_t comm, int k, int v, zipcclDataType_t dt, size_t count, uint64_t seed) {
    const size_t e = zipcclTypeSize(dt);
    size_t sc[nranks], sd[nranks], rc[nranks], rd[nranks], st = 0, rt = 0;
    int isc[nranks], isd[nranks], irc[nranks], ird[nranks];
    for (int p = 0; p < nranks; p++) {
        sc[p] = v ? a2aCnt(rank, p, count, seed) : count, rc[p] = v ? a2aCnt(p, rank, count, seed) : count;
        sd[p] = st, rd[p] = rt, st += sc[p], rt += rc[p];
        isc[p] = (int)sc[p], isd[p] = (int)sd[p], irc[p] = (int)rc[p], ird[p] = (int)rd[p];
    }
    void* in = malloc(st * e + 1);
    void* want = malloc(rt * e + 1);
    void* got = malloc(rt * e + 1);
    fill(in, st, dt, rank, seed);
    MPI_Datatype mt = dt == zipcclFloat32 ? MPI_FLOAT : MPI_UINT16_T;
    MPI_Alltoallv(in, isc, isd, mt, want, irc, ird, mt, MPI_COMM_WORLD);
    const zipcclCollKind_t kind = v ? zipcclCollAlltoAllv : zipcclCollAlltoAll;
    int ok = 1;
    uint64_t intra[kRunsN], inter[kRunsN];
    for (int ri = 0; ri < kRunsN; ri++) {
        zipcclCallConfig_t cfg = {kRuns[ri].s, zipcclCodecFast, kRuns[ri].a};
        zipcclCounters_t c0, c1;
        memset(got, 0xEE, rt * e);
        zipcclCommGetCounters(comm, kind, &c0);
        zipcclResult_t res = v ? zipcclAlltoAllv(in, sc, sd, got, rc, rd, dt, comm, &cfg, NULL)
                               : zipcclAlltoAll(in, got, count, dt, comm, &cfg, NULL);
        zipcclCommGetCounters(comm, kind, &c1);
        intra[ri] = c1.intraBytes - c0.intraBytes;
        inter[ri] = (c1.wireBytes - c0.wireBytes) - intra[ri];
        EXPECT(res == zipcclSuccess, "rank %d: %s %s: %s", rank, zipcclCollName(kind), kRuns[ri].name,
               zipcclGetLastErrorDetail());
        EXPECT(res != zipcclSuccess || !memcmp(got, want, rt * e), "rank %d: %s %s count %zu: differs from MPI's",
               rank, zipcclCollName(kind), kRuns[ri].name, count);
    }
    EXPECT(intra[0] == intra[1], "rank %d: %s count %zu: hier compressed sent %llu bytes within the node, raw %llu",
           rank, zipcclCollName(kind), count, (unsigned long long)intra[0], (unsigned long long)intra[1]);
    /* (where this rank sends something: some pairs send nothing) */
    if (k < nranks && inter[1] > 8192)
        EXPECT(inter[0] < inter[1], "rank %d: %s count %zu: hier compressed sent %llu bytes between nodes, raw %llu",
               rank, zipcclCollName(kind), count, (unsigned long long)inter[0], (unsigned long long)inter[1]);
    if (k > 1 && intra[1] > 8192) /* flat compressed codes its in-node messages */
        EXPECT(intra[3] < intra[1], "rank %d: %s count %zu: flat compressed sent %llu bytes within the node, "
               "hier %llu", rank, zipcclCollName(kind), count, (unsigned long long)intra[3],
               (unsigned long long)intra[1]);
    free(in);
    free(want);
    free(got);
    return ok;
}

/* Sub-communicators: the nodes as ZIPCCL_NODE_SIZE=2 makes them, seen from
 * the halves of the world (node blocks where a half has an even size) and
 * from the even and odd ranks (one rank of each node: every rank a node);
 * a hier AllReduce on each == the flat one. */
static void subComms(void) {
    for (int how = 0; how < 2; how++) {
        const int half = nranks / 2;
        MPI_Comm sub;
        MPI_Comm_split(MPI_COMM_WORLD, how ? rank % 2 : rank / half, rank, &sub);
        zipcclComm_t comm = NULL;
        int ok = 1, k = -1;
        EXPECT(zipcclCommInitMpi(&comm, &sub) == zipcclSuccess, "rank %d: %s", rank, zipcclGetLastErrorDetail());
        if (comm) {
            zipcclCommNodeSize(comm, &k);
            int want = how ? 1 : half % 2 ? 1 : 2;
            EXPECT(k == want, "rank %d: %s: node size %d, expected %d", rank, how ? "even/odd ranks" : "halves", k,
                   want);
            const size_t count = 5001;
            float* in = malloc(count * 4);
            float* a = malloc(count * 4);
            float* b = malloc(count * 4);
            fill(in, count, zipcclFloat32, rank, 99);
            zipcclCallConfig_t hier = {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoHier};
            zipcclCallConfig_t flat = {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoDirect};
            EXPECT(zipcclAllReduce(in, a, count, zipcclFloat32, zipcclSum, comm, &hier, NULL) == zipcclSuccess &&
                       zipcclAllReduce(in, b, count, zipcclFloat32, zipcclSum, comm, &flat, NULL) == zipcclSuccess &&
                       !memcmp(a, b, count * 4),
                   "rank %d: %s: hier AllReduce differs from direct (%s)", rank, how ? "even/odd" : "halves",
                   zipcclGetLastErrorDetail());
            free(in);
            free(a);
            free(b);
            zipcclCommDestroy(comm);
        }
        report(ok, how ? "sub-communicator of even/odd ranks: every rank a node, hier == flat"
                       : "sub-communicator of half the ranks: the nodes in it, hier == flat");
        MPI_Comm_free(&sub);
    }
}

/* In place (zipccl.h's forms), hier compressed == the same call out of
 * place, for AllGather, ReduceScatter, AllReduce and AlltoAll. */
static void inPlace(zipcclComm_t comm, int k) {
    const size_t count = 6007, e = 2, all = count * (size_t)nranks;
    char* in = malloc(all * e);
    char* out = malloc(all * e);
    char* buf = malloc(all * e);
    fill(in, all, zipcclBfloat16, rank, 4242);
    zipcclCallConfig_t cfg = {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoHier};
    const zipcclDataType_t dt = zipcclBfloat16;
    int ok = 1;
    for (int kind = 0; kind < 4; kind++) {
        zipcclResult_t a = zipcclSuccess, b = zipcclSuccess;
        size_t cmp = all * e;
        memcpy(buf, in, all * e);
        if (kind == 0) { /* sendbuf == recvbuf + rank * count */
            a = zipcclAllGather(in + (size_t)rank * count * e, out, count, dt, comm, &cfg, NULL);
            b = zipcclAllGather(buf + (size_t)rank * count * e, buf, count, dt, comm, &cfg, NULL);
        } else if (kind == 1) { /* sendbuf + rank * recvcount == recvbuf */
            a = zipcclReduceScatter(in, out, count, dt, zipcclSum, comm, &cfg, NULL);
            b = zipcclReduceScatter(buf, buf + (size_t)rank * count * e, count, dt, zipcclSum, comm, &cfg, NULL);
            memmove(buf, buf + (size_t)rank * count * e, count * e);
            cmp = count * e;
        } else if (kind == 2) {
            a = zipcclAllReduce(in, out, all, dt, zipcclSum, comm, &cfg, NULL);
            b = zipcclAllReduce(buf, buf, all, dt, zipcclSum, comm, &cfg, NULL);
        } else {
            a = zipcclAlltoAll(in, out, count, dt, comm, &cfg, NULL);
            b = zipcclAlltoAll(buf, buf, count, dt, comm, &cfg, NULL);
        }
        EXPECT(a == zipcclSuccess && b == zipcclSuccess && !memcmp(out, buf, cmp),
               "rank %d: kind %d: in place differs from out of place (%s)", rank, kind, zipcclGetLastErrorDetail());
    }
    char name[120];
    snprintf(name, sizeof name, "in place == out of place, hier (%d x %d)", nranks / k, k);
    report(ok, name);
    free(in);
    free(out);
    free(buf);
}

static void suite(int k, const char* rs) {
    char name[200];
    setenv("ZIPCCL_HIER_RS", rs, 1);
    zipcclComm_t comm = newComm();
    int got = -1;
    zipcclCommNodeSize(comm, &got);
    int ok = 1;
    EXPECT(got == k, "rank %d: node size %d, expected %d", rank, got, k);
    snprintf(name, sizeof name, "node size %d at %d ranks", k, nranks);
    report(ok, name);
    static const zipcclCollKind_t kinds[] = {zipcclCollAllGather, zipcclCollReduceScatter, zipcclCollAllReduce};
    static const size_t counts[] = {1, 7, 4097, 70001};
    uint64_t seed = 1;
    for (int ki = 0; ki < 3; ki++)
        for (int d = 0; d < 2; d++) {
            zipcclDataType_t dt = d ? zipcclFloat32 : zipcclBfloat16;
            for (int o = 0; o < (ki ? 2 : 1); o++) {
                zipcclRedOp_t op = o ? zipcclAvg : zipcclSum;
                ok = 1;
                for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
                    ok &= check(comm, k, kinds[ki], dt, op, counts[ci], seed++);
                snprintf(name, sizeof name, "%s %s%s hier == flat == raw == reference (%d x %d, %s)",
                         zipcclCollName(kinds[ki]), d ? "fp32" : "bf16", ki ? (o ? " avg" : " sum") : "", nranks / k, k,
                         rs);
                report(ok, name);
            }
        }
    inPlace(comm, k);
    for (int v = 0; v < 2; v++)
        for (int d = 0; d < 2; d++) {
            zipcclDataType_t dt = d ? zipcclFloat32 : zipcclBfloat16;
            ok = 1;
            for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
                ok &= checkA2a(comm, k, v, dt, counts[ci], seed++);
            snprintf(name, sizeof name, "%s %s hier == flat == raw == MPI's (%d x %d)",
                     zipcclCollName(v ? zipcclCollAlltoAllv : zipcclCollAlltoAll), d ? "fp32" : "bf16", nranks / k, k);
            report(ok, name);
        }
    zipcclCommDestroy(comm);
}

/* Auto across nodes (comm/tune: the hier designs apply where the ranks
 * span nodes of several ranks, and the measured selection always measures
 * them, since the one-link model cannot rank them): AllGather bf16 at 1 MiB
 * per rank until its bucket settles (zipcclAutoSettled): every call equals
 * MPI_Allgather; the exploration ran hier (byAlgo[hier] moved by at least
 * its two designs' 5 runs each) with nodes of k < n ranks and never with
 * one node (k = n); the settled calls run one design on every rank. */
static void autoHier(int k) {
    enum { kMost = 240, kAfter = 4 };
    const size_t count = 512 << 10; /* bf16: 1 MiB per rank, 5 runs per candidate */
    zipcclComm_t comm = newComm();
    uint16_t* in = malloc(count * 2);
    uint16_t* want = malloc(count * 2 * (size_t)nranks);
    uint16_t* got = malloc(count * 2 * (size_t)nranks);
    fill(in, count, zipcclBfloat16, rank, 77);
    MPI_Allgather(in, (int)count, MPI_UINT16_T, want, (int)count, MPI_UINT16_T, MPI_COMM_WORLD);
    zipcclCallConfig_t cfg = {zipcclStrategyAuto, zipcclCodecDefault, zipcclAlgoDefault};
    zipcclCounters_t c0, c1, c2;
    zipcclCommGetCounters(comm, zipcclCollAllGather, &c0);
    int ok = 1, settled = 0, calls = 0;
    for (; calls < kMost && !settled && ok; calls++) {
        memset(got, 0xEE, count * 2 * (size_t)nranks);
        zipcclResult_t r = zipcclAllGather(in, got, count, zipcclBfloat16, comm, &cfg, NULL);
        EXPECT(r == zipcclSuccess, "rank %d: auto AllGather call %d: %s", rank, calls, zipcclGetLastErrorDetail());
        EXPECT(r != zipcclSuccess || !memcmp(got, want, count * 2 * (size_t)nranks),
               "rank %d: auto AllGather call %d differs from MPI_Allgather", rank, calls);
        if (zipcclAutoSettled(comm, zipcclCollAllGather, zipcclBfloat16, count * 2, &settled) != zipcclSuccess)
            EXPECT(0, "rank %d: zipcclAutoSettled: %s", rank, zipcclGetLastErrorDetail());
    }
    EXPECT(settled, "rank %d: not settled after %d calls", rank, calls);
    zipcclCommGetCounters(comm, zipcclCollAllGather, &c1);
    const unsigned long long hier = (unsigned long long)(c1.byAlgo[zipcclAlgoHier] - c0.byAlgo[zipcclAlgoHier]);
    if (k < nranks)
        EXPECT(hier >= 10, "rank %d: %d nodes of %d: the exploration (%d calls) ran hier %llu times, not >= 10",
               rank, nranks / k, k, calls, hier);
    else
        EXPECT(hier == 0, "rank %d: one node: auto ran hier %llu times", rank, hier);
    for (int i = 0; i < kAfter && ok; i++) {
        zipcclResult_t r = zipcclAllGather(in, got, count, zipcclBfloat16, comm, &cfg, NULL);
        EXPECT(r == zipcclSuccess && !memcmp(got, want, count * 2 * (size_t)nranks),
               "rank %d: settled auto AllGather %d: %s", rank, i, zipcclGetLastErrorDetail());
    }
    zipcclCommGetCounters(comm, zipcclCollAllGather, &c2);
    /* the settled design, by algo and strategy, the same on every rank */
    double mine[2 * ZIPCCL_NALGOS + 10], lo[2 * ZIPCCL_NALGOS + 10], hi[2 * ZIPCCL_NALGOS + 10];
    int m = 0;
    for (int a = 0; a < ZIPCCL_NALGOS; a++) mine[m++] = (double)(c2.byAlgo[a] - c1.byAlgo[a]);
    for (int st = 0; st < 5; st++) mine[m++] = (double)(c2.byStrategy[st] - c1.byStrategy[st]);
    MPI_Allreduce(mine, lo, m, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(mine, hi, m, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    EXPECT(!memcmp(lo, hi, (size_t)m * sizeof(double)), "rank %d: the settled calls ran different designs on the ranks",
           rank);
    char name[160];
    snprintf(name, sizeof name, "auto AllGather 1 MiB/rank, %d x %d: == MPI_Allgather, hier %s (%llu runs), settled in %d calls",
             nranks / k, k, k < nranks ? "measured" : "never run", hier, calls);
    report(ok, name);
    free(in), free(want), free(got);
    zipcclCommDestroy(comm);
}

/* Auto by the model alone (a declared link turns the measured selection
 * off) on nodes of k ranks: with ZIPCCL_INTRA_GBPS declaring a node link
 * far faster than the 1 Gbit/s between nodes, every call of a large
 * AllGather runs a hier design; with the node link as slow, none does.
 * Every call equals MPI_Allgather. */
static void modelHier(int k, const char* intraGbps, int wantHier) {
    enum { kCalls = 3 };
    const size_t count = 2 << 20; /* bf16: 4 MiB per rank */
    setenv("ZIPCCL_LINK_GBPS", "1", 1);
    setenv("ZIPCCL_INTRA_GBPS", intraGbps, 1);
    zipcclComm_t comm = newComm();
    uint16_t* in = malloc(count * 2);
    uint16_t* want = malloc(count * 2 * (size_t)nranks);
    uint16_t* got = malloc(count * 2 * (size_t)nranks);
    fill(in, count, zipcclBfloat16, rank, 91);
    MPI_Allgather(in, (int)count, MPI_UINT16_T, want, (int)count, MPI_UINT16_T, MPI_COMM_WORLD);
    zipcclCallConfig_t cfg = {zipcclStrategyAuto, zipcclCodecDefault, zipcclAlgoDefault};
    zipcclCounters_t c0, c1;
    zipcclCommGetCounters(comm, zipcclCollAllGather, &c0);
    int ok = 1;
    for (int i = 0; i < kCalls && ok; i++) {
        memset(got, 0xEE, count * 2 * (size_t)nranks);
        zipcclResult_t r = zipcclAllGather(in, got, count, zipcclBfloat16, comm, &cfg, NULL);
        EXPECT(r == zipcclSuccess && !memcmp(got, want, count * 2 * (size_t)nranks),
               "rank %d: auto AllGather %d: %s", rank, i, r == zipcclSuccess ? "differs from MPI_Allgather"
                                                                           : zipcclGetLastErrorDetail());
    }
    zipcclCommGetCounters(comm, zipcclCollAllGather, &c1);
    const unsigned long long hier = (unsigned long long)(c1.byAlgo[zipcclAlgoHier] - c0.byAlgo[zipcclAlgoHier]);
    EXPECT(hier == (wantHier ? kCalls : 0), "rank %d: node link %s Gbit/s: %llu of %d calls ran hier, want %d",
           rank, intraGbps, hier, kCalls, wantHier ? kCalls : 0);
    char name[160];
    snprintf(name, sizeof name, "auto by the model, %d x %d, node link %s Gbit/s, 1 between nodes: %s", nranks / k, k,
             intraGbps, wantHier ? "hier every call" : "flat every call");
    report(ok, name);
    free(in), free(want), free(got);
    zipcclCommDestroy(comm);
    unsetenv("ZIPCCL_LINK_GBPS");
    unsetenv("ZIPCCL_INTRA_GBPS");
}

int main(int argc, char** argv) {
    int prov;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    setenv("ZIPCCL_PIECE_BYTES", "65536", 1);
    setenv("ZIPCCL_STRATEGY", "raw", 1); /* no calibration at creation */
    /* Unset, MPI_Comm_split_type: every rank of this machine on one node. */
    unsetenv("ZIPCCL_NODE_SIZE");
    suite(nranks, "auto");
    setenv("ZIPCCL_NODE_SIZE", "2", 1);
    suite(2, "chain");
    suite(2, "forward");
    if (nranks == 8) {
        setenv("ZIPCCL_NODE_SIZE", "4", 1);
        suite(4, "auto");
    }
    unsetenv("ZIPCCL_HIER_RS");
    setenv("ZIPCCL_NODE_SIZE", "2", 1);
    subComms();
    unsetenv("ZIPCCL_STRATEGY"); /* auto per call, with its calibration */
    autoHier(2);
    modelHier(2, "100", 1);
    modelHier(2, "1", 0);
    unsetenv("ZIPCCL_NODE_SIZE");
    autoHier(nranks); /* one node here */
    setenv("ZIPCCL_STRATEGY", "raw", 1);
    /* A node size that does not divide the ranks is refused at creation. */
    setenv("ZIPCCL_NODE_SIZE", nranks == 6 ? "4" : "3", 1);
    MPI_Comm w = MPI_COMM_WORLD;
    zipcclComm_t bad = NULL;
    zipcclResult_t r = zipcclCommInitMpi(&bad, &w);
    int ok = 1;
    EXPECT(r == zipcclInvalidArgument && strstr(zipcclGetLastErrorDetail(), "ZIPCCL_NODE_SIZE"),
           "rank %d: ZIPCCL_NODE_SIZE not dividing %d ranks: %s", rank, nranks, zipcclGetLastErrorDetail());
    report(ok, "ZIPCCL_NODE_SIZE that does not divide the ranks refused");
    if (bad) zipcclCommDestroy(bad);
    MPI_Finalize();
    return tu_exit();
}
