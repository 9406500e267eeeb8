// test: ranks=1,2,4,8 timeout=240
/*
 * test_coll_async.c — the collectives' behaviour around the data path:
 *   - non-blocking calls: two in flight on two communicators (an AllGather
 *     and a ReduceScatter, as FSDP uses them) and several on one, waited in
 *     reverse order and by zipcclTest polling; results equal blocking calls;
 *   - bad arguments get the right error code and a detail message;
 *   - mismatched counts across ranks are reported as zipcclMismatch by the
 *     call agreement, not a hang, on every rank (also AlltoAllv counts only
 *     one rank can see wrong), and the communicator then answers
 *     zipcclCommBroken; test_coll_mismatch.c has the full matrix;
 *   - one rank skipping a call makes the others fail with zipcclTimeout
 *     within ZIPCCL_TIMEOUT_S, naming that rank, and the broken communicator
 *     refuses new calls with zipcclCommBroken;
 *   - counters, and auto choosing compressed on a (declared) slow link and
 *     agreeing across ranks.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "gauss.h"
#include "testutil.h"
#include "zipccl.h"
#include "zipccl_tune.h"
#include "mpitest.h"



static void fillBf16(uint16_t* x, size_t n, uint64_t seed) { gauss_fill_bf16(x, n, seed, 1); }

static const zipcclCallConfig_t kRaw = {zipcclStrategyRaw, zipcclCodecFast, zipcclAlgoDirect};
static const zipcclCallConfig_t kFast = {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoDirect};
static const zipcclCallConfig_t kDenseRing = {zipcclStrategyCompressed, zipcclCodecDense, zipcclAlgoRing};



/* ---- several calls in flight ------------------------------------------------- */

static void testInFlight(void) {
    zipcclComm_t params = newComm(), grads = newComm();
    const size_t n = 200003; /* odd, several pieces */
    uint16_t* shard = malloc(n * 2);
    uint16_t* full = malloc(n * 2 * nranks);
    uint16_t* fullRef = malloc(n * 2 * nranks);
    uint16_t* grad = malloc(n * 2 * nranks);
    uint16_t* gshard = malloc(n * 2);
    uint16_t* gshardRef = malloc(n * 2);
    uint16_t* ar = malloc(n * 2);
    uint16_t* arRef = malloc(n * 2);
    uint16_t* ag2 = malloc(n * 2 * nranks);
    fillBf16(shard, n, 1 + rank);
    fillBf16(grad, n * nranks, 100 + rank);
    fillBf16(ar, n, 200 + rank);
    int ok = 1;
    /* References from blocking raw calls. */
    EXPECT(zipcclAllGather(shard, fullRef, n, zipcclBfloat16, params, &kRaw, NULL) == zipcclSuccess, "ref AG");
    EXPECT(zipcclReduceScatter(grad, gshardRef, n, zipcclBfloat16, zipcclAvg, grads, &kRaw, NULL) == zipcclSuccess, "ref RS");
    EXPECT(zipcclAllReduce(ar, arRef, n, zipcclBfloat16, zipcclSum, grads, &kRaw, NULL) == zipcclSuccess, "ref AR");

    /* Two communicators, one call each, waited in reverse order. */
    zipcclRequest_t a, b;
    EXPECT(zipcclAllGatherAsync(shard, full, n, zipcclBfloat16, params, &kFast, NULL, &a) == zipcclSuccess, "AG async");
    EXPECT(zipcclReduceScatterAsync(grad, gshard, n, zipcclBfloat16, zipcclAvg, grads, &kDenseRing, NULL, &b) == zipcclSuccess, "RS async");
    EXPECT(zipcclWait(b) == zipcclSuccess, "RS wait: %s", zipcclGetLastErrorDetail());
    EXPECT(zipcclWait(a) == zipcclSuccess, "AG wait: %s", zipcclGetLastErrorDetail());
    EXPECT(!memcmp(full, fullRef, n * 2 * nranks), "async AllGather differs from blocking raw");
    EXPECT(!memcmp(gshard, gshardRef, n * 2), "async ring ReduceScatter differs from blocking raw direct");
    report(ok, "two_comms_in_flight");

    /* Three on one communicator (plus one on the other), completed by polling. */
    ok = 1;
    uint16_t* arOut = malloc(n * 2);
    zipcclRequest_t r[4];
    int done[4] = {0, 0, 0, 0}, left = 4;
    EXPECT(zipcclAllGatherAsync(shard, full, n, zipcclBfloat16, params, &kFast, NULL, &r[0]) == zipcclSuccess, "1");
    EXPECT(zipcclAllReduceAsync(ar, arOut, n, zipcclBfloat16, zipcclSum, params, &kFast, NULL, &r[1]) == zipcclSuccess, "2");
    EXPECT(zipcclAllGatherAsync(shard, ag2, n, zipcclBfloat16, params, NULL, NULL, &r[2]) == zipcclSuccess, "3");
    EXPECT(zipcclReduceScatterAsync(grad, gshard, n, zipcclBfloat16, zipcclAvg, grads, &kFast, NULL, &r[3]) == zipcclSuccess, "4");
    double t0 = MPI_Wtime();
    while (left && ok && MPI_Wtime() - t0 < 120) {
        for (int i = 3; i >= 0; i--) {
            if (done[i]) continue;
            zipcclResult_t res = zipcclTest(r[i], &done[i]);
            EXPECT(res == zipcclSuccess, "request %d: %s", i, zipcclGetLastErrorDetail());
            if (done[i]) left--;
        }
        usleep(100);
    }
    EXPECT(!left, "requests did not complete");
    EXPECT(!memcmp(full, fullRef, n * 2 * nranks) && !memcmp(ag2, fullRef, n * 2 * nranks), "AllGather in flight differs");
    EXPECT(!memcmp(arOut, arRef, n * 2), "AllReduce in flight differs");
    EXPECT(!memcmp(gshard, gshardRef, n * 2), "ReduceScatter in flight differs");
    report(ok, "several_in_flight_one_comm");

    /* Counters: the compressed calls compressed and were counted. */
    ok = 1;
    zipcclCounters_t ag;
    zipcclCommGetCounters(params, zipcclCollAllGather, &ag);
    EXPECT(ag.calls == 4 && ag.byStrategy[zipcclStrategyCompressed] >= 2 && ag.byStrategy[zipcclStrategyRaw] == 1,
           "AllGather counters: calls %llu compressed %llu raw %llu", (unsigned long long)ag.calls,
           (unsigned long long)ag.byStrategy[zipcclStrategyCompressed], (unsigned long long)ag.byStrategy[zipcclStrategyRaw]);
    if (nranks > 1) {
        EXPECT(ag.wireBytes < ag.rawBytes && ag.codecSeconds > 0 && ag.totalSeconds >= ag.codecSeconds,
               "AllGather counters: wire %llu raw %llu codec %.3g s", (unsigned long long)ag.wireBytes,
               (unsigned long long)ag.rawBytes, ag.codecSeconds);
    }
    zipcclCommResetCounters(params);
    zipcclCommGetCounters(params, zipcclCollAllGather, &ag);
    EXPECT(ag.calls == 0 && ag.rawBytes == 0, "reset did not clear");
    report(ok, "counters");
    zipcclCommDestroy(params);
    zipcclCommDestroy(grads);
    free(shard), free(full), free(fullRef), free(grad), free(gshard), free(gshardRef), free(ar),
        free(arRef), free(ag2), free(arOut);
}

/* ---- bad arguments ----------------------------------------------------------------- */

static void testBadArgs(void) {
    zipcclComm_t c = newComm();
    int ok = 1;
    uint16_t buf[64 * 8];
    size_t counts[8] = {0}, displs[8] = {0};
    zipcclRequest_t req;
#define BAD(call, code, what)                                                              \
    do {                                                                                   \
        zipcclResult_t r_ = (call);                                                        \
        EXPECT(r_ == (code) && zipcclGetLastErrorDetail()[0], "%s: got %s", what, zipcclGetErrorString(r_)); \
    } while (0)
    BAD(zipcclAllGather(NULL, buf, 4, zipcclBfloat16, c, NULL, NULL), zipcclInvalidArgument, "null sendbuf");
    BAD(zipcclAllGather(buf, NULL, 4, zipcclBfloat16, c, NULL, NULL), zipcclInvalidArgument, "null recvbuf");
    BAD(zipcclAllGather(buf, buf, 4, (zipcclDataType_t)3, c, NULL, NULL), zipcclInvalidArgument, "bad dtype");
    BAD(zipcclAllGather(buf, buf, 4, zipcclBfloat16, NULL, NULL, NULL), zipcclInvalidArgument, "null comm");
    BAD(zipcclReduceScatter(buf, buf, 4, zipcclFloat16, (zipcclRedOp_t)2, c, NULL, NULL), zipcclInvalidArgument, "bad op");
    BAD(zipcclAllReduce(buf, buf, 4, zipcclFloat32, (zipcclRedOp_t)1, c, NULL, NULL), zipcclInvalidArgument, "bad op (prod)");
    zipcclCallConfig_t stored = {zipcclStrategyCompressed, zipcclCodecStored, zipcclAlgoDefault};
    BAD(zipcclAlltoAll(buf, buf + 32, 4, zipcclBfloat16, c, &stored, NULL), zipcclInvalidArgument, "stored codec");
    zipcclCallConfig_t badStrat = {(zipcclStrategy_t)9, zipcclCodecFast, zipcclAlgoDefault};
    BAD(zipcclAlltoAll(buf, buf + 32, 4, zipcclBfloat16, c, &badStrat, NULL), zipcclInvalidArgument, "bad strategy");
    BAD(zipcclAlltoAllv(buf, NULL, displs, buf, counts, displs, zipcclBfloat16, c, NULL, NULL), zipcclInvalidArgument, "null counts");
    BAD(zipcclAllGatherAsync(buf, buf, 4, zipcclBfloat16, c, NULL, NULL, NULL), zipcclInvalidArgument, "null request");
    BAD(zipcclWait(NULL), zipcclInvalidArgument, "wait null");
    BAD(zipcclCommInitMpi(NULL, NULL), zipcclInvalidArgument, "init null");
    zipcclStrategy_t st;
    BAD(zipcclStrategyParse("fastest", &st), zipcclInvalidArgument, "parse strategy");
    EXPECT(zipcclStrategyParse("compressed", &st) == zipcclSuccess && st == zipcclStrategyCompressed, "parse compressed");
    /* count 0 with null buffers is a valid no-op */
    EXPECT(zipcclAllGather(NULL, NULL, 0, zipcclBfloat16, c, NULL, NULL) == zipcclSuccess, "count 0 null buffers");
    (void)req;
    report(ok, "bad_arguments");
    zipcclCommDestroy(c);
}

/* ---- ranks that disagree ------------------------------------------------------------ */

static void testMismatch(void) {
    if (nranks < 2) return;
    const zipcclCallConfig_t* cfgs[2] = {&kRaw, &kFast};
    for (int k = 0; k < 2; k++) {
        zipcclComm_t c = newComm();
        int ok = 1;
        size_t n = 100 + (rank == 1); /* rank 1 thinks the shard is one longer */
        uint16_t* in = calloc(n, 2);
        uint16_t* out = calloc(n * nranks, 2);
        fillBf16(in, n, 7);
        zipcclResult_t r = zipcclAllGather(in, out, n, zipcclBfloat16, c, cfgs[k], NULL);
        /* every rank either sends to or receives from rank 1 */
        EXPECT(r == zipcclMismatch, "rank %d: %s AllGather with mismatched counts returned %s (%s)", rank,
               k ? "compressed" : "raw", zipcclGetErrorString(r), zipcclGetLastErrorDetail());
        r = zipcclAllGather(in, out, n, zipcclBfloat16, c, cfgs[k], NULL);
        EXPECT(r == zipcclCommBroken && strstr(zipcclGetLastErrorDetail(), "disagree"),
               "a broken communicator answered %s (%s)", zipcclGetErrorString(r), zipcclGetLastErrorDetail());
        report(ok, k ? "mismatch_allgather_compressed" : "mismatch_allgather_raw");
        MPI_Barrier(MPI_COMM_WORLD);
        zipcclCommDestroy(c);
        free(in), free(out);
    }
    /* AlltoAllv: rank 0 expects one element more from rank 1 than it sends.
     * Only rank 0 could see it in the data; every rank learns it from the
     * agreement's digests, and every rank names the same pair. */
    for (int k = 0; k < 2; k++) {
        zipcclComm_t c = newComm();
        int ok = 1;
        size_t sc[nranks], sd[nranks], rc[nranks], rd[nranks];
        for (int p = 0; p < nranks; p++) sc[p] = rc[p] = 50, sd[p] = rd[p] = (size_t)p * 64;
        if (rank == 0) rc[1] = 51;
        uint16_t* in = calloc(64 * nranks, 2);
        uint16_t* out = calloc(64 * nranks, 2);
        zipcclResult_t r = zipcclAlltoAllv(in, sc, sd, out, rc, rd, zipcclBfloat16, c, cfgs[k], NULL);
        EXPECT(r == zipcclMismatch && strstr(zipcclGetLastErrorDetail(), "rank 1 sends 50 elements to rank 0"),
               "rank %d: AlltoAllv recvcounts mismatch returned %s (%s)", rank, zipcclGetErrorString(r),
               zipcclGetLastErrorDetail());
        report(ok, k ? "mismatch_alltoallv_compressed" : "mismatch_alltoallv_raw");
        MPI_Barrier(MPI_COMM_WORLD);
        zipcclCommDestroy(c);
        free(in), free(out);
    }
}

/* AlltoAllv where rank 0 expects a second piece from rank 1 that never comes
 * (pieces are 64 Ki bf16 here): every rank must end at once with
 * zipcclMismatch, not after the timeout. */
static void testMissingPiece(void) {
    if (nranks < 2) return;
    const size_t piece = 65536, stride = 2 * piece;
    for (int k = 0; k < 2; k++) { /* raw, compressed; a fresh communicator each */
        setenv("ZIPCCL_TIMEOUT_S", "30", 1);
        zipcclComm_t c = newComm();
        unsetenv("ZIPCCL_TIMEOUT_S");
        int ok = 1;
        size_t sc[nranks], sd[nranks], rc[nranks], rd[nranks];
        for (int p = 0; p < nranks; p++) sc[p] = rc[p] = piece, sd[p] = rd[p] = (size_t)p * stride;
        if (rank == 0) rc[1] = piece + 10;
        uint16_t* in = calloc(stride * nranks, 2);
        uint16_t* out = calloc(stride * nranks, 2);
        fillBf16(in, stride * nranks, 11 + rank);
        double t0 = MPI_Wtime();
        zipcclResult_t r = zipcclAlltoAllv(in, sc, sd, out, rc, rd, zipcclBfloat16, c, k ? &kFast : &kRaw, NULL);
        double t = MPI_Wtime() - t0;
        EXPECT(r == zipcclMismatch && t < 15, "rank %d: missing piece gave %s after %.1f s (%s)", rank,
               zipcclGetErrorString(r), t, zipcclGetLastErrorDetail());
        report(ok, k ? "mismatch_missing_piece_compressed" : "mismatch_missing_piece_raw");
        free(in), free(out);
        MPI_Barrier(MPI_COMM_WORLD);
        zipcclCommDestroy(c);
    }
}

/* AllGather where rank 1 thinks the shard is one element past a piece, so it
 * sends one piece more than the others expect and they one fewer than it
 * expects.  Its upstream neighbour's later sends then go to receives rank 1
 * withdrew; that rank waits for them until ZIPCCL_TIMEOUT_S and must still
 * report the mismatch it saw (the poison passed round the ring), so every
 * rank returns zipcclMismatch. */
static void testMismatchedPieces(void) {
    if (nranks < 2) return;
    for (int k = 0; k < 2; k++) { /* raw, compressed */
        setenv("ZIPCCL_TIMEOUT_S", "2", 1);
        zipcclComm_t c = newComm();
        unsetenv("ZIPCCL_TIMEOUT_S");
        int ok = 1;
        size_t pieceBytes = 0;
        zipcclCommPieceBytes(c, &pieceBytes);
        const size_t P = pieceBytes / 2, n = P + (rank == 1);
        uint16_t* in = calloc(n, 2);
        uint16_t* out = calloc((P + 1) * (size_t)nranks, 2);
        fillBf16(in, n, 5 + rank);
        double t0 = MPI_Wtime();
        zipcclResult_t r = zipcclAllGather(in, out, n, zipcclBfloat16, c, k ? &kFast : &kRaw, NULL);
        double t = MPI_Wtime() - t0;
        EXPECT(r == zipcclMismatch && t < 30, "rank %d: %s AllGather, one piece more on rank 1: %s after %.1f s (%s)",
               rank, k ? "compressed" : "raw", zipcclGetErrorString(r), t, zipcclGetLastErrorDetail());
        report(ok, k ? "mismatch_pieces_allgather_compressed" : "mismatch_pieces_allgather_raw");
        free(in), free(out);
        MPI_Barrier(MPI_COMM_WORLD);
        zipcclCommDestroy(c);
    }
}

/* ---- timeouts ----------------------------------------------------------------------- */

static void testTimeout(void) {
    if (nranks < 2) return;
    setenv("ZIPCCL_TIMEOUT_S", "1", 1);
    zipcclComm_t c = newComm();
    unsetenv("ZIPCCL_TIMEOUT_S");
    int ok = 1;
    uint16_t in[16] = {0}, out[16 * 8];
    if (rank != nranks - 1) { /* the last rank skips the call */
        double t0 = MPI_Wtime();
        zipcclResult_t r = zipcclAllGather(in, out, 16, zipcclBfloat16, c, &kFast, NULL);
        double t = MPI_Wtime() - t0;
        EXPECT(r == zipcclTimeout && t < 10, "rank %d: got %s after %.1f s", rank, zipcclGetErrorString(r), t);
        char skipper[32];
        snprintf(skipper, sizeof skipper, "rank %d", nranks - 1);
        EXPECT(strstr(zipcclGetLastErrorDetail(), "AllGather") && strstr(zipcclGetLastErrorDetail(), skipper),
               "detail does not name the collective and %s: %s", skipper, zipcclGetLastErrorDetail());
        r = zipcclAllGather(in, out, 16, zipcclBfloat16, c, &kFast, NULL);
        EXPECT(r == zipcclCommBroken, "broken communicator: got %s", zipcclGetErrorString(r));
    }
    report(ok, "timeout_one_rank_skips");
    MPI_Barrier(MPI_COMM_WORLD);
    zipcclCommDestroy(c);

    /* The same under auto, where the call would next wait in the barrier
     * that aligns the switcher's measuring calls: one call on every rank
     * first (it calibrates the codec, a collective of its own), then the
     * last rank skips a call of another size, whose first call is a
     * measuring one.  The call agreement comes before the barrier, so the
     * error names the rank that did not enter the call. */
    setenv("ZIPCCL_TIMEOUT_S", "1", 1);
    c = newComm();
    unsetenv("ZIPCCL_TIMEOUT_S");
    ok = 1;
    const zipcclCallConfig_t autoCfg = {zipcclStrategyAuto, zipcclCodecDefault, zipcclAlgoDefault};
    EXPECT(zipcclAllGather(in, out, 4, zipcclBfloat16, c, &autoCfg, NULL) == zipcclSuccess, "rank %d: %s", rank,
           zipcclGetLastErrorDetail());
    if (rank != nranks - 1) {
        double t0 = MPI_Wtime();
        zipcclResult_t r = zipcclAllGather(in, out, 16, zipcclBfloat16, c, &autoCfg, NULL);
        double t = MPI_Wtime() - t0;
        EXPECT(r == zipcclTimeout && t < 10, "rank %d: auto got %s after %.1f s", rank, zipcclGetErrorString(r), t);
        char skipper[32];
        snprintf(skipper, sizeof skipper, "rank %d", nranks - 1);
        EXPECT(strstr(zipcclGetLastErrorDetail(), "AllGather") && strstr(zipcclGetLastErrorDetail(), skipper),
               "detail does not name the collective and %s: %s", skipper, zipcclGetLastErrorDetail());
        r = zipcclAllGather(in, out, 16, zipcclBfloat16, c, &autoCfg, NULL);
        EXPECT(r == zipcclCommBroken, "broken communicator: got %s", zipcclGetErrorString(r));
    }
    report(ok, "timeout_one_rank_skips_auto");
    MPI_Barrier(MPI_COMM_WORLD);
    zipcclCommDestroy(c);
}

/* ---- auto ---------------------------------------------------------------------------- */

static void testAuto(void) {
    /* A declared 100 Mbit/s link: compressing a large bf16 AllGather pays, a
     * tiny one does not.  Every rank must make the same choice (or hang). */
    setenv("ZIPCCL_LINK_GBPS", "0.1", 1);
    setenv("ZIPCCL_STRATEGY", "auto", 1);
    zipcclComm_t c = newComm();
    unsetenv("ZIPCCL_LINK_GBPS");
    unsetenv("ZIPCCL_STRATEGY");
    int ok = 1;
    const size_t n = 1 << 19;
    uint16_t* in = malloc(n * 2);
    uint16_t* out = malloc(n * 2 * nranks);
    uint16_t* ref = malloc(n * 2 * nranks);
    fillBf16(in, n, 3 + rank);
    MPI_Allgather(in, (int)n * 2, MPI_BYTE, ref, (int)n * 2, MPI_BYTE, MPI_COMM_WORLD);
    for (int i = 0; i < 10; i++) { /* crosses an observation agreement (every 8 calls) */
        EXPECT(zipcclAllGather(in, out, i == 9 ? 3 : n, zipcclBfloat16, c, NULL, NULL) == zipcclSuccess,
               "auto AllGather: %s", zipcclGetLastErrorDetail());
        if (i < 9) EXPECT(!memcmp(out, ref, n * 2 * nranks), "auto AllGather result differs");
    }
    zipcclCounters_t k;
    zipcclCommGetCounters(c, zipcclCollAllGather, &k);
    if (nranks > 1) {
        EXPECT(k.byStrategy[zipcclStrategyCompressed] >= 9, "auto chose compressed %llu of 10 times on a slow link",
               (unsigned long long)k.byStrategy[zipcclStrategyCompressed]);
        EXPECT(k.byStrategy[zipcclStrategyCompressed] <= 9, "auto compressed a 3-element AllGather");
    }
    report(ok, "auto_slow_link");
    zipcclCommDestroy(c);

    /* The same when each rank's shard is a single piece (4 MiB pieces, 1 MiB
     * shards): the model once charged that piece's wire time twice (as the
     * whole transfer and again as pipeline fill) and chose raw on a 50 Mbit/s
     * link for anything below a piece. */
    setenv("ZIPCCL_LINK_GBPS", "0.05", 1);
    setenv("ZIPCCL_STRATEGY", "auto", 1);
    setenv("ZIPCCL_PIECE_BYTES", "4194304", 1);
    c = newComm();
    unsetenv("ZIPCCL_LINK_GBPS");
    unsetenv("ZIPCCL_STRATEGY");
    unsetenv("ZIPCCL_PIECE_BYTES");
    ok = 1;
    EXPECT(zipcclAllGather(in, out, n, zipcclBfloat16, c, NULL, NULL) == zipcclSuccess, "auto AllGather: %s",
           zipcclGetLastErrorDetail());
    EXPECT(!memcmp(out, ref, n * 2 * nranks), "auto AllGather result differs");
    zipcclCommGetCounters(c, zipcclCollAllGather, &k);
    if (nranks > 1)
        EXPECT(k.byStrategy[zipcclStrategyCompressed] == 1, "auto did not compress a one-piece AllGather on a 50 Mbit/s link");
    report(ok, "auto_slow_link_one_piece");
    zipcclCommDestroy(c);
    free(in), free(out), free(ref);
}

int main(int argc, char** argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    setenv("ZIPCCL_CALIBRATE", "0", 1);
    setenv("ZIPCCL_PIECE_BYTES", "131072", 1);
    if (rank == 0)
        CHECK(provided >= MPI_THREAD_MULTIPLE, "mpi_thread_multiple", "provided level %d", provided);
    testInFlight();
    testBadArgs();
    testMismatch();
    testMissingPiece();
    testMismatchedPieces();
    testAuto();
    testTimeout();
    MPI_Finalize();
    return tu_exit();
}
