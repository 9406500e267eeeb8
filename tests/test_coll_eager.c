// test: ranks=1,3,4 timeout=120
/*
 * test_coll_eager.c — the collectives under plain MPI_Init (no
 * MPI_THREAD_MULTIPLE), as programs that do not ask for threads get them:
 * every call, async ones too, then completes at issue in the caller's
 * thread.  Checks that async calls on two communicators and on one still
 * complete (no deadlock when all ranks issue in the same order), give the
 * same bits as MPI_Allgather / a blocking raw call, and that an auto
 * communicator with real calibration (ZIPCCL_CALIBRATE unset) starts
 * quickly and agrees across ranks.  Also the piece size: measured (ranks
 * agree), from ZIPCCL_LINK_GBPS (~4 ms of the link within 512 KiB-4 MiB,
 * recomputed here), from ZIPCCL_PIECE_BYTES, and a compressed AllGather
 * cut into 512 KiB pieces equal to MPI_Allgather.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "gauss.h"
#include "testutil.h"
#include "zipccl.h"
#include "zipccl_tune.h"
#include "mpitest.h"



static void fillBf16(uint16_t* x, size_t n, uint64_t seed) { gauss_fill_bf16(x, n, seed, 3); }

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Comm world = MPI_COMM_WORLD;
    unsetenv("ZIPCCL_CALIBRATE");
    setenv("ZIPCCL_STRATEGY", "auto", 1);
    double t0 = MPI_Wtime();
    zipcclComm_t a = NULL, b = NULL;
    int ok = zipcclCommInitMpi(&a, &world) == zipcclSuccess;
    double initS = MPI_Wtime() - t0;
    ok = ok && zipcclCommInitMpi(&b, &world) == zipcclSuccess;
    ok = agree(ok);
    if (rank == 0) CHECK(ok, "eager_comm_init_calibrated", "%s", zipcclGetLastErrorDetail());
    if (!ok) { MPI_Finalize(); return 1; }
    /* Calibration is a few ms of ping-pong and codec work; allow for a
     * heavily shared machine. */
    double worst = 0;
    MPI_Allreduce(&initS, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0) CHECK(worst < 5.0, "eager_calibration_quick", "comm init took %.2f s", worst);

    /* The communicator's rank and size are MPI's; new defaults apply to the
     * calls that take them (cfg NULL) and show in the counters. */
    int zr = -1, zn = -1;
    ok = zipcclCommRank(a, &zr) == zipcclSuccess && zipcclCommSize(a, &zn) == zipcclSuccess && zr == rank &&
         zn == nranks;
    ok = agree(ok);
    if (rank == 0) CHECK(ok, "eager_comm_rank_size", "rank %d size %d, MPI says %d of %d", zr, zn, rank, nranks);
    {
        zipcclCallConfig_t raw = {zipcclStrategyRaw, zipcclCodecDefault, zipcclAlgoDefault}, bad = raw;
        bad.strategy = (zipcclStrategy_t)9;
        uint16_t v[64], out[64 * 8];
        fillBf16(v, 64, 5 + rank);
        zipcclCounters_t k0, k1;
        zipcclCommGetCounters(b, zipcclCollAllGather, &k0);
        ok = zipcclCommSetDefaults(b, &raw) == zipcclSuccess && zipcclCommSetDefaults(b, &bad) == zipcclInvalidArgument &&
             nranks <= 8 && zipcclAllGather(v, out, 64, zipcclBfloat16, b, NULL, NULL) == zipcclSuccess;
        zipcclCommGetCounters(b, zipcclCollAllGather, &k1);
        ok = ok && k1.byStrategy[zipcclStrategyRaw] == k0.byStrategy[zipcclStrategyRaw] + 1;
        zipcclCallConfig_t back = {zipcclStrategyAuto, zipcclCodecDefault, zipcclAlgoDefault};
        ok = ok && zipcclCommSetDefaults(b, &back) == zipcclSuccess;
        ok = agree(ok);
        if (rank == 0) CHECK(ok, "eager_set_defaults", "a NULL-config call did not run the new default (raw)");
    }

    const size_t n = 100001;
    uint16_t* in = malloc(n * 2);
    uint16_t* grad = malloc(n * 2 * nranks);
    uint16_t* full = malloc(n * 2 * nranks);
    uint16_t* ref = malloc(n * 2 * nranks);
    uint16_t* rs = malloc(n * 2);
    uint16_t* rsRef = malloc(n * 2);
    fillBf16(in, n, 10 + rank);
    fillBf16(grad, n * nranks, 20 + rank);
    MPI_Allgather(in, (int)n * 2, MPI_BYTE, ref, (int)n * 2, MPI_BYTE, MPI_COMM_WORLD);
    zipcclCallConfig_t raw = {zipcclStrategyRaw, zipcclCodecFast, zipcclAlgoDirect};
    zipcclCallConfig_t comp = {zipcclStrategyCompressed, zipcclCodecDense, zipcclAlgoDirect};
    ok = zipcclReduceScatter(grad, rsRef, n, zipcclBfloat16, zipcclSum, b, &raw, NULL) == zipcclSuccess;

    zipcclRequest_t r1, r2, r3;
    ok &= zipcclAllGatherAsync(in, full, n, zipcclBfloat16, a, &comp, NULL, &r1) == zipcclSuccess;
    ok &= zipcclReduceScatterAsync(grad, rs, n, zipcclBfloat16, zipcclSum, b, &comp, NULL, &r2) == zipcclSuccess;
    ok &= zipcclAllGatherAsync(in, full, n, zipcclBfloat16, a, NULL, NULL, &r3) == zipcclSuccess; /* auto */
    int done = 0;
    ok &= zipcclTest(r2, &done) == zipcclSuccess && done; /* eager: already complete */
    ok &= zipcclWait(r3) == zipcclSuccess;
    ok &= zipcclWait(r1) == zipcclSuccess;
    ok &= !memcmp(full, ref, n * 2 * nranks) && !memcmp(rs, rsRef, n * 2);
    ok = agree(ok);
    if (rank == 0) CHECK(ok, "eager_async_two_comms", "async calls without MPI_THREAD_MULTIPLE failed or differ");

    /* Pieces: the measured size is the same on every rank and in range. */
    size_t piece = 0;
    ok = zipcclCommPieceBytes(a, &piece) == zipcclSuccess;
    unsigned long long mine = piece, lo = 0, hi = 0;
    MPI_Allreduce(&mine, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    ok = agree(ok && lo == hi && piece >= (512u << 10) && piece <= (4u << 20) &&
               (piece % (64u << 10) == 0));
    if (rank == 0) CHECK(ok, "eager_pieces_measured_agree", "rank 0 %zu bytes, min %llu max %llu", piece, lo, hi);
    zipcclCommDestroy(a);
    zipcclCommDestroy(b);

    /* From a stated link: 1 Gbit/s -> 500000 B -> 512 KiB floor; 2 Gbit/s ->
     * 1000000 B, rounded down to 64 KiB; 10 Gbit/s -> the 4 MiB ceiling; a
     * set ZIPCCL_PIECE_BYTES wins.  Piece sends in flight in the all-to-all
     * exchanges (AlltoAll(v), direct ReduceScatter): 1 below 300 MB/s (1 and
     * 2 Gbit/s: 125 and 250 MB/s), no limit above; a set ZIPCCL_A2A_INFLIGHT
     * wins. */
    static const struct {
        const char *gbps, *bytes, *inflight;
        size_t want;
        int wantInflight;
    } kPieces[] = {
        {"1", NULL, NULL, 512u << 10, 1}, {"2", NULL, NULL, 1000000u / 65536 * 65536, 1},
        {"2.5", NULL, NULL, 1250000u / 65536 * 65536, 0}, {"10", NULL, NULL, 4u << 20, 0},
        {"1", "98304", NULL, 98304, 1}, {"1", NULL, "0", 512u << 10, 0}, {"10", "98304", "3", 98304, 3},
    };
    unsetenv("ZIPCCL_STRATEGY");
    for (size_t i = 0; i < sizeof kPieces / sizeof kPieces[0]; i++) {
        setenv("ZIPCCL_LINK_GBPS", kPieces[i].gbps, 1);
        if (kPieces[i].bytes) setenv("ZIPCCL_PIECE_BYTES", kPieces[i].bytes, 1);
        else unsetenv("ZIPCCL_PIECE_BYTES");
        if (kPieces[i].inflight) setenv("ZIPCCL_A2A_INFLIGHT", kPieces[i].inflight, 1);
        else unsetenv("ZIPCCL_A2A_INFLIGHT");
        zipcclComm_t p = NULL;
        piece = 0;
        int inflight = -1;
        ok = zipcclCommInitMpi(&p, &world) == zipcclSuccess && zipcclCommPieceBytes(p, &piece) == zipcclSuccess &&
             zipcclCommA2aInflight(p, &inflight) == zipcclSuccess && piece == kPieces[i].want &&
             inflight == kPieces[i].wantInflight;
        ok = agree(ok);
        if (rank == 0)
            CHECK(ok, "eager_pieces_from_link",
                  "%s Gbit/s, ZIPCCL_PIECE_BYTES=%s, ZIPCCL_A2A_INFLIGHT=%s: %zu bytes and %d in flight, want %zu and %d",
                  kPieces[i].gbps, kPieces[i].bytes ? kPieces[i].bytes : "unset",
                  kPieces[i].inflight ? kPieces[i].inflight : "unset", piece, inflight, kPieces[i].want,
                  kPieces[i].wantInflight);
        if (i == 0 && ok) { /* 512 KiB pieces: 3 of them per rank's block */
            const size_t m = 600001;
            uint16_t* blk = malloc(m * 2);
            uint16_t* got = malloc(m * 2 * nranks);
            uint16_t* want = malloc(m * 2 * nranks);
            fillBf16(blk, m, 30 + rank);
            MPI_Allgather(blk, (int)m * 2, MPI_BYTE, want, (int)m * 2, MPI_BYTE, MPI_COMM_WORLD);
            zipcclCallConfig_t fast = {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoDirect};
            ok = zipcclAllGather(blk, got, m, zipcclBfloat16, p, &fast, NULL) == zipcclSuccess &&
                 !memcmp(got, want, m * 2 * nranks);
            ok = agree(ok);
            if (rank == 0) CHECK(ok, "eager_allgather_512k_pieces", "differs from MPI_Allgather");
            free(blk), free(got), free(want);
        }
        if (p) zipcclCommDestroy(p);
    }
    unsetenv("ZIPCCL_LINK_GBPS");
    unsetenv("ZIPCCL_PIECE_BYTES");
    unsetenv("ZIPCCL_A2A_INFLIGHT");
    free(in), free(grad), free(full), free(ref), free(rs), free(rsRef);
    MPI_Finalize();
    return tu_exit();
}
