// test: ranks=1,2 timeout=120
/*
 * test_coll_codec_ops.c — the layers below a design: the codec table
 * (comm/codec/codec_ops.h) and the tuner's end (zipcclTuneFinalize).
 *   - the CPU table's entries are the CPU codec: for bf16/fp16/fp32, every
 *     code (fast, dense, f3, f2), with and without checksums, at sizes from
 *     0 to three chunks, its bound equals zipcclCompressBound, its compress
 *     writes the very bytes zipcclCompress writes, and its decompress gives
 *     the input back bit for bit with the count;
 *   - zipcclCodecOpsFor picks the CPU table for host buffers and the CUDA one
 *     for device buffers (same bound, no workspace on the CPU);
 *   - an MPI communicator holds the CPU table and finds it usable, and a
 *     compressed AllGather through it equals MPI_Allgather;
 *   - zipcclTuneFinalize leaves the model all zeros, and Init restores it.
 * What it leaves out: running the CUDA table (no device here; tests/gpu/).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "comm_state.h"
#include "gauss.h"
#include "testutil.h"
#include "zipccl.h"
#include "mpitest.h"

static void fill(void* x, size_t n, zipcclDataType_t dt, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (size_t i = 0; i < n; i++) zipcclFromFloat(x, i, gauss_next(&s), dt);
}

static void testCpuTable(void) {
    const zipcclCodecOps* ops = &zipcclCodecOpsCpu;
    static const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    static const zipcclCodec_t codecs[] = {zipcclCodecFast, zipcclCodecDense, zipcclCodecF3, zipcclCodecF2};
    static const size_t counts[] = {0, 1, 1000, 16384, 40000};
    const size_t maxN = 40000;
    char* x = malloc(maxN * 4);
    char* back = malloc(maxN * 4 + 1); /* + 1: the sentinel byte past the largest case */
    size_t cap = zipcclCompressBound(maxN, zipcclFloat32, 1);
    char* f = malloc(cap);
    char* g = malloc(cap);
    int okBound = 1, okBytes = 1, okTrip = 1, cases = 0;
    char whyBytes[200] = "", whyTrip[200] = "";
    zipcclCodecCtx ctx;
    memset(&ctx, 0, sizeof ctx);
    for (int di = 0; di < 3; di++)
        for (int ci = 0; ci < 4; ci++)
            for (int cs = 0; cs < 2; cs++)
                for (int ni = 0; ni < 5; ni++) {
                    const zipcclDataType_t dt = dts[di];
                    const size_t n = counts[ni], bytes = n * zipcclTypeSize(dt);
                    fill(x, n, dt, (uint64_t)(di * 100 + ci * 10 + ni));
                    zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
                    p.codec = codecs[ci], p.checksum = cs;
                    size_t bound = zipcclCompressBound(n, dt, cs);
                    if (ops->bound(n, dt, cs) != bound) okBound = 0;
                    size_t fs = 0, gs = 0, got = 0;
                    zipcclResult_t r1 = zipcclCompress(x, n, dt, f, bound, &fs, &p);
                    zipcclResult_t r2 = ops->compress(&ctx, x, n, dt, g, bound, &gs, &p);
                    if (r1 != r2 || fs != gs || (r1 == zipcclSuccess && memcmp(f, g, fs))) {
                        if (okBytes)
                            snprintf(whyBytes, sizeof whyBytes, "%s %s cs=%d n=%zu: rc %d/%d, %zu/%zu bytes",
                                     zipcclTypeName(dt), zipcclCodecName(codecs[ci]), cs, n, (int)r1, (int)r2, fs, gs);
                        okBytes = 0;
                        continue;
                    }
                    memset(back, 0xA5, bytes + 1);
                    zipcclResult_t r3 = ops->decompress(&ctx, g, gs, back, bytes, &got, dt, NULL);
                    if (r2 != zipcclSuccess || r3 != zipcclSuccess || got != n || memcmp(back, x, bytes)) {
                        if (okTrip)
                            snprintf(whyTrip, sizeof whyTrip, "%s %s cs=%d n=%zu: rc %d/%d, count %zu",
                                     zipcclTypeName(dt), zipcclCodecName(codecs[ci]), cs, n, (int)r2, (int)r3, got);
                        okTrip = 0;
                    }
                    cases++;
                }
    CHECK(okBound, "codec_ops_cpu_bound", "the table's bound differs from zipcclCompressBound");
    CHECK(okBytes, "codec_ops_cpu_same_bytes", "%s", whyBytes);
    CHECK(okTrip && cases == 3 * 4 * 2 * 5, "codec_ops_cpu_roundtrip", "%s (%d cases)", whyTrip, cases);
    /* A damaged frame is refused through the table as directly. */
    {
        const size_t n = 1000;
        fill(x, n, zipcclBfloat16, 5);
        size_t fs = 0, got = 0;
        zipcclCompress(x, n, zipcclBfloat16, f, zipcclCompressBound(n, zipcclBfloat16, 0), &fs, NULL);
        zipcclResult_t direct = zipcclDecompress(f, fs - 1, back, n * 2, &got, zipcclBfloat16, NULL);
        zipcclResult_t table = ops->decompress(&ctx, f, fs - 1, back, n * 2, &got, zipcclBfloat16, NULL);
        CHECK(direct != zipcclSuccess && table == direct, "codec_ops_cpu_refuses_like_direct",
              "truncated frame: direct %d, table %d", (int)direct, (int)table);
    }
    free(x), free(back), free(f), free(g);
}

static void testChoice(void) {
    const zipcclCodecOps *h = zipcclCodecOpsFor(0), *d = zipcclCodecOpsFor(1);
    CHECK(h == &zipcclCodecOpsCpu && !h->device && !strcmp(h->name, "cpu") && h->available() == 1 &&
              h->workspace(1 << 20, zipcclBfloat16) == 0,
          "codec_ops_host_is_cpu", "host buffers got table '%s' (device %d)", h->name, h->device);
    CHECK(d == &zipcclCodecOpsCuda && d->device && !strcmp(d->name, "cuda") &&
              d->available() == zipcclCudaAvailable() &&
              d->bound(12345, zipcclFloat16, 1) == zipcclCompressBound(12345, zipcclFloat16, 1),
          "codec_ops_device_is_cuda", "device buffers got table '%s' (device %d)", d->name, d->device);
}

static void testCommTable(void) {
    zipcclComm_t c = newComm();
    int ok = 1;
    EXPECT(c->codec == &zipcclCodecOpsCpu, "rank %d: an MPI communicator holds codec table '%s'", rank,
           c->codec ? c->codec->name : "(none)");
    EXPECT(c->codecOk == 1, "rank %d: the CPU codec reads as not usable", rank);
    report(ok, "codec_ops_mpi_comm_cpu");

    /* A compressed AllGather, whose pieces go through the table. */
    const size_t n = 40000;
    uint16_t* mine = malloc(n * 2);
    uint16_t* out = malloc(n * 2 * (size_t)nranks);
    uint16_t* ref = malloc(n * 2 * (size_t)nranks);
    gauss_fill_bf16(mine, n, (uint64_t)rank, 41);
    zipcclCallConfig_t cfg = {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoDefault};
    zipcclResult_t r = zipcclAllGather(mine, out, n, zipcclBfloat16, c, &cfg, NULL);
    MPI_Allgather(mine, (int)n * 2, MPI_BYTE, ref, (int)n * 2, MPI_BYTE, MPI_COMM_WORLD);
    zipcclCounters_t k;
    zipcclCommGetCounters(c, zipcclCollAllGather, &k);
    ok = 1;
    EXPECT(r == zipcclSuccess, "rank %d: %s", rank, zipcclGetLastErrorDetail());
    EXPECT(r != zipcclSuccess || !memcmp(out, ref, n * 2 * (size_t)nranks), "rank %d: differs from MPI_Allgather",
           rank);
    EXPECT(k.byStrategy[zipcclStrategyCompressed] == 1, "rank %d: %llu compressed calls", rank,
           (unsigned long long)k.byStrategy[zipcclStrategyCompressed]);
    EXPECT(nranks == 1 || k.wireBytes < k.rawBytes, "rank %d: wire %llu >= raw %llu bytes", rank,
           (unsigned long long)k.wireBytes, (unsigned long long)k.rawBytes);
    report(ok, "codec_ops_mpi_allgather_compressed");
    free(mine), free(out), free(ref);
    ok = zipcclCommDestroy(c) == zipcclSuccess;
    report(ok, "codec_ops_comm_destroy");
}

static void testTuneFinalize(void) {
    zipcclTuneModel m, zero, fresh;
    zipcclTuneInit(&m);
    fresh = m;
    m.ratio[0][0][0] = 9; /* as observations would */
    zipcclTuneFinalize(&m);
    memset(&zero, 0, sizeof zero);
    int cleared = !memcmp(&m, &zero, sizeof m);
    zipcclTuneInit(&m);
    CHECK(cleared && !memcmp(&m, &fresh, sizeof m), "tune_finalize_resets", "finalize left %s; init after it %s",
          cleared ? "zeros" : "values", memcmp(&m, &fresh, sizeof m) ? "differs from a fresh one" : "is fresh");
}

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    setenv("ZIPCCL_CALIBRATE", "0", 1);
    if (rank == 0) {
        testCpuTable();
        testChoice();
        testTuneFinalize();
    }
    testCommTable();
    int failed = tu_failures;
    MPI_Finalize();
    return failed ? 1 : 0;
}
