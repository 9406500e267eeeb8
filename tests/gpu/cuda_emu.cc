/*
 * cuda_emu.cc — runs the CUDA codec's kernels on the host, under a small
 * deterministic warp emulator, and checks them against the CPU codec.
 *
 * Why: machines without a GPU cannot run comm/codec/codec_cuda.cu, yet it must be
 * right the first time it meets one. This program includes that file with
 * ZIPCCL_CUDA_EMU defined, so the very same kernel bodies and host-side
 * launch sequence run here, with device memory replaced by host memory.
 *
 * The emulator (tests/gpu/warp_emu.h): every CUDA thread of a block is a
 * coroutine that runs until it reaches a warp or block collective; blocks
 * run one after another. It does not model memory-ordering races, timing or
 * alignment faults; the device test covers those.
 *
 * Built by the Makefile as BUILD/gpu/cuda_emu (plain g++, no CUDA needed);
 * run in the suite by tests/test_codec_cuda_emu.sh. Argument --long adds
 * bigger inputs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <vector>

#include "warp_emu.h"


#define ZIPCCL_CUDA_EMU 1
#include "../../comm/codec/codec_cuda.cu"

#include <xxhash.h>

#include "codec_cases.h"

/* ---- the emulated backend ------------------------------------------------ */

/* "Device" buffers are host buffers placed at odd offsets inside bigger ones,
 * so unaligned paths run too when asked. */
static int g_misalign = 0;

static zipcclResult_t emu_compress(const void* src, size_t count, zipcclDataType_t dt, const zipcclCodecParams_t* p,
                                   std::vector<uint8_t>* frame) {
    size_t es = zipcclTypeSize(dt) ? zipcclTypeSize(dt) : 2;
    size_t cap = zipcclCompressBound(count, dt, p ? p->checksum : 0) + 64;
    std::vector<uint8_t> in(count * es + 16), out(cap + 16), ws(zk_workspace_size(count, dt) + 16);
    if (count) memcpy(in.data() + g_misalign, src, count * es);
    size_t size = 0;
    zipcclResult_t r = zk_compress(count ? in.data() + g_misalign : src, count, dt, out.data() + 3 * g_misalign, cap,
                                   &size, p, ws.data() + 7 * g_misalign, ws.size() - 16, NULL);
    if (r == zipcclSuccess) frame->assign(out.begin() + 3 * g_misalign, out.begin() + 3 * g_misalign + size);
    return r;
}

static zipcclResult_t emu_decompress(const uint8_t* frame, size_t size, uint8_t* out, size_t cap, size_t* count,
                                     zipcclDataType_t expect) {
    std::vector<uint8_t> f(size + 16);
    if (size) memcpy(f.data() + g_misalign, frame, size);
    /* workspace for the largest count this frame could name within its size */
    std::vector<uint8_t> ws(zk_layout_decompress(size + 1).total + 256 + 8);
    return zk_decompress(f.data() + g_misalign, size, out, cap, count, expect, ws.data() + 5 * g_misalign,
                         ws.size() - 8, NULL);
}

static const Backend kEmu = {"emu", emu_compress, emu_decompress};

/* ---- checks of the pieces ------------------------------------------------ */

static void check_xxh32(void) {
    int ok = 1;
    std::vector<uint8_t> buf(300);
    for (size_t i = 0; i < buf.size(); i++) buf[i] = (uint8_t)cc_next();
    for (size_t len = 0; len < buf.size() && ok; len++)
        for (size_t off = 0; off < 4 && ok; off++) {
            if (off + len > buf.size()) continue;
            uint32_t want = XXH32(buf.data() + off, len, 0);
            uint32_t one = zk_xxh32(buf.data() + off, len), warp = 0;
            emu_launch(1, 32, 0, [&]() {
                uint32_t h = zk_xxh32_warp(buf.data() + off, len, emu_tid());
                if (emu_tid() == 0) warp = h;
            });
            if (one != want || warp != want) ok = 0;
        }
    CHECK(ok, "emu/xxh32_matches_libxxhash", "a length/offset disagrees with libxxhash");
}

static void check_estimator(void) {
    int ok = 1;
    const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    const size_t ns[] = {1, 2, 31, 255, 256, 257, 1000, 16384};
    for (int d = 0; d < 3; d++)
        for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
            std::vector<uint8_t> v = cc_make(dts[d], k % 2 ? D_MIXED : D_SPECIAL, ns[k]);
            int dt = zk_dt(dts[d]), want, got = -1;
            if (dt == ZCF_DT_FP32) want = zcf_estimate_s8_u32((const uint32_t*)v.data(), ns[k]);
            else want = zcf_estimate_s8_u16(dt, (const uint16_t*)v.data(), ns[k]);
            emu_launch(1, 32, 0, [&]() {
                int s = zk_estimate_s8(v.data(), (uint32_t)ns[k], dt, zcf_elem_size(dt), 1, emu_tid());
                if (emu_tid() == 0) got = s;
            });
            if (got != want) {
                ok = 0;
                printf("  estimator dt %d n %zu: got %d want %d\n", dt, ns[k], got, want);
            }
        }
    CHECK(ok, "emu/estimator_matches_codec_format_h", "see above");
}

/* zk_select (F2's second-tier compaction) against a plain scan. */
static void check_select(void) {
    int ok = 1;
    for (int k = 0; k < 2000 && ok; k++) {
        uint32_t r = (uint32_t)cc_next();
        uint32_t b = k % 3 == 0 ? r & (uint32_t)cc_next() : k % 3 == 1 ? ~0u >> (k % 32) : r; /* sparse, dense, half */
        for (uint32_t t = 0, pos = 0; pos < 32; pos++)
            if ((b >> pos) & 1u) ok &= zk_select(b, t++) == pos;
    }
    CHECK(ok, "emu/select_finds_the_t_th_set_bit", "a mask disagrees with a scan");
}

static void check_scan(void) {
    /* k_dplan's block scan over a chunk table of more chunks than threads */
    std::vector<uint32_t> sizes(2500);
    for (auto& s : sizes) s = 8 + (uint32_t)(cc_next() % 50000);
    std::vector<uint8_t> frame(ZCF_HEADER_SIZE + 4 * sizes.size());
    uint64_t sum = 0;
    for (size_t i = 0; i < sizes.size(); i++) zcf_st32(frame.data() + ZCF_HEADER_SIZE + 4 * i, sizes[i]), sum += sizes[i];
    std::vector<uint64_t> offs(sizes.size() + 1, 0);
    uint32_t status[2] = {0, 0};
    PlanArgs a;
    memset(&a, 0, sizeof a);
    a.frame = frame.data();
    a.offs = offs.data();
    a.status = status;
    a.n_chunks = sizes.size();
    a.payload = sum;
    a.max_chunk = ~0ull;
    emu_launch(1, ZK_SCAN_THREADS, 34 * 8, [&]() { plan_body(a); });
    uint64_t acc = 0;
    int ok = status[0] == 0;
    for (size_t i = 0; i < sizes.size(); i++) {
        if (offs[i] != acc) ok = 0;
        acc += sizes[i];
    }
    a.payload = sum + 1; /* a table that does not add up to the payload */
    emu_launch(1, ZK_SCAN_THREADS, 34 * 8, [&]() { plan_body(a); });
    CHECK(ok && offs[sizes.size()] == acc && status[0] == 1, "emu/plan_prefix_sums",
          "offsets differ from a serial sum, or a table that misses the payload passed (status %u)", status[0]);
}

/* The frame is written only when it fits: exact capacity works, one byte
 * less is zipcclDstTooSmall with nothing written past the capacity. */
static void check_compress_capacity(void) {
    const zipcclCodec_t* codecs = cc_codecs;
    for (int c = 0; c < CC_NCODECS; c++)
        for (int cs = 0; cs < 2; cs++) {
            size_t count = 20000;
            std::vector<uint8_t> src = cc_make(zipcclBfloat16, D_GAUSS, count), ref;
            zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
            p.codec = codecs[c];
            p.checksum = cs;
            int ok = emu_compress(src.data(), count, zipcclBfloat16, &p, &ref) == zipcclSuccess;
            std::vector<uint8_t> ws(zk_workspace_size(count, zipcclBfloat16)), out(ref.size() + 64, 0xEE);
            size_t size = 0;
            ok &= zk_compress(src.data(), count, zipcclBfloat16, out.data(), ref.size(), &size, &p, ws.data(), ws.size(),
                              NULL) == zipcclSuccess &&
                  size == ref.size() && !memcmp(out.data(), ref.data(), size);
            std::fill(out.begin(), out.end(), 0xEE);
            zipcclResult_t r = zk_compress(src.data(), count, zipcclBfloat16, out.data(), ref.size() - 1, &size, &p,
                                           ws.data(), ws.size(), NULL);
            for (size_t i = ref.size() - 1; i < out.size(); i++) ok &= out[i] == 0xEE;
            char n[96];
            snprintf(n, sizeof n, "emu/compress_capacity/%s/cs%d", cc_codec_name(codecs[c]), cs);
            CHECK(ok && r == zipcclDstTooSmall, n, "ok %d, short buffer gave %d", ok, r);
        }
}

/* The encoders' decoupled look-back (zk_lookback) over frames of 80
 * chunks, every codec: under the emulator a chunk publishes its inclusive
 * prefix only at every 37th chunk, so look-backs sum aggregates across
 * 32-chunk windows.  Every third chunk is random bits (a raw chunk, whose
 * warp reaches its look-back first), so F2's warps of one block wait for
 * the warp before them.  The frame is the CPU codec's byte for byte; a
 * capacity that ends mid-frame is zipcclDstTooSmall with nothing written
 * past it. */
static void check_lookback(void) {
    const size_t count = 80 * 16384 + 777;
    std::vector<uint8_t> src = cc_make(zipcclBfloat16, D_GAUSS, count);
    for (size_t i = 0; i < 2 * count; i++)
        if ((i / 2 / 16384) % 3 == 1) src[i] = (uint8_t)((i * 0x9E3779B97F4A7C15ull) >> 56); /* cc_next's stream untouched */
    for (int c = 0; c < CC_NCODECS; c++) {
        zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
        p.codec = cc_codecs[c];
        p.checksum = c % 2;
        std::vector<uint8_t> ref(zipcclCompressBound(count, zipcclBfloat16, p.checksum)), f;
        size_t rsize = 0;
        int ok = zipcclCompress(src.data(), count, zipcclBfloat16, ref.data(), ref.size(), &rsize, &p) == zipcclSuccess;
        const ZkLbStats before = zk_lb_stats;
        ok &= emu_compress(src.data(), count, zipcclBfloat16, &p, &f) == zipcclSuccess && f.size() == rsize &&
              !memcmp(f.data(), ref.data(), rsize);
        const uint64_t windows = zk_lb_stats.windows - before.windows, aggs = zk_lb_stats.aggregates - before.aggregates,
                       waits = zk_lb_stats.waits - before.waits;
        std::vector<uint8_t> ws(zk_workspace_size(count, zipcclBfloat16)), out(rsize + 64, 0xEE);
        size_t size = 0, cut = rsize / 2;
        zipcclResult_t r = zk_compress(src.data(), count, zipcclBfloat16, out.data(), cut, &size, &p, ws.data(),
                                       ws.size(), NULL);
        int untouched = 1;
        for (size_t i = cut; i < out.size(); i++) untouched &= out[i] == 0xEE;
        char n[96];
        snprintf(n, sizeof n, "emu/lookback/%s", cc_codec_name(p.codec));
        CHECK(ok && rsize < count * 2 && windows > 80 && aggs > 80 * 10 && (p.codec != zipcclCodecF2 || waits > 0) &&
                  r == zipcclDstTooSmall && untouched,
              n, "same bytes %d (size %zu), windows %llu, aggregates %llu, waits %llu; cut at %zu: %d, untouched past it %d",
              ok, rsize, (unsigned long long)windows, (unsigned long long)aggs, (unsigned long long)waits, cut, r,
              untouched);
    }
}

/* The decoder learns a frame's chunk count on the device: a workspace
 * whose share for the chunk offsets is too small for it is refused there
 * (zipcclInvalidArgument, nothing written), one 256-byte step more decodes.
 * 40 constant chunks: 32 offsets fit in the small share, 64 in the next. */
static void check_decompress_workspace(void) {
    const size_t count = 40 * 16384;
    std::vector<uint8_t> src(count * 2, 0), frame(zipcclCompressBound(count, zipcclBfloat16, 1));
    zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
    p.checksum = 1;
    size_t size = 0, got = 0;
    int ok = zipcclCompress(src.data(), count, zipcclBfloat16, frame.data(), frame.size(), &size, &p) == zipcclSuccess;
    std::vector<uint8_t> out(count * 2 + 16, 0xEE), ws(zk_info_head(1) + 2 * 256 + 255);
    zipcclResult_t small = zk_decompress(frame.data(), size, out.data(), count * 2, &got, zipcclBfloat16, ws.data(),
                                         ws.size() - 256, NULL);
    int untouched = 1;
    for (size_t i = 0; i < out.size(); i++) untouched &= out[i] == 0xEE;
    zipcclResult_t big =
        zk_decompress(frame.data(), size, out.data(), count * 2, &got, zipcclBfloat16, ws.data(), ws.size(), NULL);
    ok &= big == zipcclSuccess && got == count && !memcmp(out.data(), src.data(), count * 2);
    CHECK(ok && small == zipcclInvalidArgument && untouched, "emu/decompress_workspace",
          "frame ok %d, small workspace: %d (%s), untouched %d, next size: %d", ok, small,
          zipcclGetLastErrorDetail(), untouched, big);
}

/* The batched entries (zipcclCompressCudaBatch / zipcclDecompressCudaBatch):
 * k buffers of every codec and dtype, empty, stored, incompressible and
 * Gaussian ones mixed, with and without checksums, give the single calls'
 * frames byte for byte with one host wait for the batch (decompress too: the headers are read on the device)
 * and decode back to their inputs; a damaged frame in the middle is
 * reported by its index, and a damaged stored frame writes nothing. */
static uint64_t emu_syncs(void) {
    ZDevCounters c;
    zdev_counters(&c);
    return c.compute.syncs + c.other.syncs;
}

static void check_batch(void) {
    const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < CC_NCODECS + 1; c++)
            for (int cs = 0; cs < 2; cs++) {
                const zipcclDataType_t dt = dts[d];
                const size_t es = zipcclTypeSize(dt);
                zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
                p.codec = c < CC_NCODECS ? cc_codecs[c] : zipcclCodecStored;
                p.checksum = cs;
                /* five buffers: Gaussian, empty, random bits (stored fallback), a chunk and a bit, one element */
                const size_t counts[] = {20000, 0, 5000, 16385, 1};
                const cc_dist_t dist[] = {D_GAUSS, D_GAUSS, D_RANDBITS, D_GAUSS, D_GAUSS};
                enum { K = 5 };
                std::vector<uint8_t> src[K], ref[K], out[K], dec[K];
                const void* sp[K];
                void* dp[K];
                size_t cap[K], size[K], cnt[K], dcap[K];
                int ok = 1;
                size_t most = 0;
                for (int i = 0; i < K; i++) {
                    src[i] = cc_make(dt, dist[i], counts[i]);
                    ok &= emu_compress(src[i].data(), counts[i], dt, &p, &ref[i]) == zipcclSuccess;
                    cap[i] = zipcclCompressBound(counts[i], dt, cs);
                    out[i].assign(cap[i] + 8, 0xEE);
                    sp[i] = src[i].data(), dp[i] = out[i].data();
                    if (counts[i] > most) most = counts[i];
                }
                std::vector<uint8_t> ws(zk_workspace_size_batch(K, most, dt, 0));
                int failed = 7;
                uint64_t s0 = emu_syncs();
                zipcclResult_t r = zk_compress_batch(K, sp, counts, dt, dp, cap, size, &p, ws.data(), ws.size(), NULL,
                                                     &failed);
                const uint64_t csyncs = emu_syncs() - s0;
                for (int i = 0; i < K && r == zipcclSuccess; i++)
                    ok &= size[i] == ref[i].size() && !memcmp(out[i].data(), ref[i].data(), size[i]);
                /* back */
                const void* fp[K];
                void* op[K];
                for (int i = 0; i < K; i++) {
                    dec[i].assign(counts[i] * es + 8, 0xEE);
                    fp[i] = out[i].data(), op[i] = dec[i].data(), dcap[i] = counts[i] * es;
                }
                std::vector<uint8_t> dws(zk_workspace_size_batch(K, most, dt, 1));
                s0 = emu_syncs();
                zipcclResult_t rd = r == zipcclSuccess
                                        ? zk_decompress_batch(K, fp, size, op, dcap, cnt, dt, dws.data(), dws.size(),
                                                              NULL, &failed)
                                        : r;
                const uint64_t dsyncs = emu_syncs() - s0;
                for (int i = 0; i < K && rd == zipcclSuccess; i++)
                    ok &= cnt[i] == counts[i] && !memcmp(dec[i].data(), src[i].data(), counts[i] * es);
                char n[96];
                snprintf(n, sizeof n, "emu/batch/%s/%s/cs%d", zipcclTypeName(dt), cc_codec_name(p.codec), cs);
                CHECK(ok && r == zipcclSuccess && rd == zipcclSuccess && failed == -1 && csyncs == 1 && dsyncs == 1, n,
                      "ok %d, compress %d, decompress %d, failed %d, host waits %llu and %llu (want 1 and 1)", ok, r,
                      rd, failed, (unsigned long long)csyncs, (unsigned long long)dsyncs);
                if (rd != zipcclSuccess || d || (c > 0 && c < CC_NCODECS)) continue; /* damage: bf16, fast and stored */
                /* damage frame 3 (a coded one), then frame 2 (stored: random bits) */
                for (int victim = 3; victim >= 2; victim--) {
                    if (!cs) continue; /* without checksums a flipped payload bit may decode (no verdict) */
                    std::vector<uint8_t> keep = out[victim];
                    out[victim][size[victim] - 1] ^= 0x40;
                    for (int i = 0; i < K; i++) std::fill(dec[i].begin(), dec[i].end(), 0xEE);
                    rd = zk_decompress_batch(K, fp, size, op, dcap, cnt, dt, dws.data(), dws.size(), NULL, &failed);
                    int untouched = 1;
                    for (size_t j = 0; j < dcap[victim]; j++) untouched &= dec[victim][j] == 0xEE;
                    const int storedFrame = victim == 2 || p.codec == zipcclCodecStored;
                    snprintf(n, sizeof n, "emu/batch_damage/%s/frame%d/cs%d", cc_codec_name(p.codec), victim, cs);
                    CHECK(rd != zipcclSuccess && failed == victim && (!storedFrame || untouched) &&
                              !memcmp(dec[0].data(), src[0].data(), counts[0] * es),
                          n, "result %d (%s), failed %d (want %d), stored frame untouched %d", rd,
                          zipcclGetLastErrorDetail(), failed, victim, untouched);
                    out[victim] = keep;
                }
            }
    /* 19 buffers (3 empty): the 16 coded in two launches of the encoder and
     * two of k_head (8 buffers a launch; 2 x 16 before), each frame the
     * single call's */
    for (int c = 0; c < CC_NCODECS; c++) {
        enum { K = 19 };
        zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
        p.codec = cc_codecs[c];
        p.checksum = c % 2;
        std::vector<uint8_t> src[K], ref[K], out[K];
        const void* sp[K];
        void* dp[K];
        size_t counts[K], cap[K], size[K], most = 0;
        int ok = 1;
        for (int i = 0; i < K; i++) {
            counts[i] = i % 6 == 5 ? 0 : 1000 + 2777 * (size_t)i;
            src[i] = cc_make(zipcclBfloat16, i % 4 == 3 ? D_RANDBITS : D_GAUSS, counts[i]);
            ok &= emu_compress(src[i].data(), counts[i], zipcclBfloat16, &p, &ref[i]) == zipcclSuccess;
            cap[i] = zipcclCompressBound(counts[i], zipcclBfloat16, p.checksum);
            out[i].assign(cap[i] + 8, 0xEE);
            sp[i] = src[i].data(), dp[i] = out[i].data();
            if (counts[i] > most) most = counts[i];
        }
        std::vector<uint8_t> ws(zk_workspace_size_batch(K, most, zipcclBfloat16, 0));
        int failed = 7;
        const uint64_t l0 = emu::launches, s0 = emu_syncs();
        zipcclResult_t r = zk_compress_batch(K, sp, counts, zipcclBfloat16, dp, cap, size, &p, ws.data(), ws.size(),
                                             NULL, &failed);
        const uint64_t launches = emu::launches - l0, syncs = emu_syncs() - s0;
        for (int i = 0; i < K && r == zipcclSuccess; i++)
            ok &= size[i] == ref[i].size() && !memcmp(out[i].data(), ref[i].data(), size[i]);
        char n[96];
        snprintf(n, sizeof n, "emu/batch/%s/19_buffers_in_two_launches", cc_codec_name(p.codec));
        /* and each stored frame (the empty ones, the random bits' fallback)
         * its k_put, with checksums the random ones their k_sums too */
        uint64_t want = 4;
        for (int i = 0; i < K; i++) want += counts[i] == 0 ? 1 : i % 4 == 3 ? 1 + p.checksum : 0;
        CHECK(ok && r == zipcclSuccess && failed == -1 && syncs == 1 && launches == want, n,
              "same frames %d, result %d, failed %d, host waits %llu (want 1), launches %llu (want %llu)", ok, r,
              failed, (unsigned long long)syncs, (unsigned long long)launches, (unsigned long long)want);
    }
    /* a batch of none, and a workspace too small */
    int failed = 3;
    CHECK(zk_compress_batch(0, NULL, NULL, zipcclBfloat16, NULL, NULL, NULL, NULL, NULL, 0, NULL, &failed) ==
                  zipcclSuccess && failed == -1,
          "emu/batch/empty", "a batch of none");
    std::vector<uint8_t> a = cc_make(zipcclBfloat16, D_GAUSS, 20000), o(zipcclCompressBound(20000, zipcclBfloat16, 0));
    std::vector<uint8_t> small(300); /* the batch head alone takes 256 */
    const void* ap[1] = {a.data()};
    void* opp[1] = {o.data()};
    size_t cnt1[1] = {20000}, cap1[1] = {o.size()}, sz1[1];
    zipcclResult_t r = zk_compress_batch(1, ap, cnt1, zipcclBfloat16, opp, cap1, sz1, NULL, small.data(), small.size(),
                                         NULL, &failed);
    CHECK(r == zipcclInvalidArgument && strstr(zipcclGetLastErrorDetail(), "workspace"), "emu/batch/small_workspace",
          "%d: %s", r, zipcclGetLastErrorDetail());
}

/* The batches in halves (zk_compress_start / end, zk_dec_start / end, the
 * entries zipcclCompressCudaBatchStart ... of a pipelined collective): two
 * batches started back to back on one workspace, ends after one wait, give
 * the single calls' frames and elements; neither half waits; a damaged frame
 * is named by the end. */
static void check_split(void) {
    enum { K = 3 };
    const size_t counts[2][K] = {{20000, 0, 5000}, {16385, 1, 7000}};
    zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
    p.checksum = 1;
    for (int c = 0; c < CC_NCODECS; c++) {
        p.codec = cc_codecs[c];
        std::vector<uint8_t> src[2][K], ref[2][K], out[2][K], dec[2][K];
        const void* sp[2][K];
        void* dp[2][K];
        size_t cap[2][K], size[2][K], dcap[2][K], cnt[2][K];
        uint64_t pend[2][K];
        int ok = 1;
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < K; i++) {
                src[b][i] = cc_make(zipcclBfloat16, i == 2 && b ? D_RANDBITS : D_GAUSS, counts[b][i]);
                ok &= emu_compress(src[b][i].data(), counts[b][i], zipcclBfloat16, &p, &ref[b][i]) == zipcclSuccess;
                cap[b][i] = zipcclCompressBound(counts[b][i], zipcclBfloat16, 1);
                out[b][i].assign(cap[b][i] + 8, 0xEE);
                sp[b][i] = src[b][i].data(), dp[b][i] = out[b][i].data();
                dec[b][i].assign(counts[b][i] * 2 + 8, 0xEE);
                dcap[b][i] = counts[b][i] * 2;
            }
        std::vector<uint8_t> ws(zk_workspace_size_batch(K, 20000, zipcclBfloat16, 0));
        int failed = 7;
        const uint64_t s0 = emu_syncs();
        zipcclResult_t r = zipcclSuccess;
        for (int b = 0; b < 2 && r == zipcclSuccess; b++)
            r = zk_compress_start(K, sp[b], counts[b], zipcclBfloat16, dp[b], cap[b], &p, ws.data(), ws.size(), NULL,
                                  pend[b], &failed);
        for (int b = 0; b < 2 && r == zipcclSuccess; b++)
            r = zk_compress_end(K, sp[b], counts[b], zipcclBfloat16, dp[b], cap[b], &p, pend[b], size[b], NULL,
                                &failed);
        const uint64_t csyncs = emu_syncs() - s0;
        for (int b = 0; b < 2 && r == zipcclSuccess; b++)
            for (int i = 0; i < K; i++)
                ok &= size[b][i] == ref[b][i].size() && !memcmp(out[b][i].data(), ref[b][i].data(), size[b][i]);
        /* damage batch 1's frame 2 (stored: random bits): its end names it */
        out[1][2][size[1][2] - 1] ^= 0x40;
        std::vector<uint8_t> dws(zk_workspace_size_batch(K, 20000, zipcclBfloat16, 1));
        std::vector<ZkInfo> info[2] = {std::vector<ZkInfo>(K), std::vector<ZkInfo>(K)};
        const void* fp[2][K];
        void* op[2][K];
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < K; i++) fp[b][i] = out[b][i].data(), op[b][i] = dec[b][i].data();
        const uint64_t s1 = emu_syncs();
        zipcclResult_t rd[2] = {r, r};
        int bad[2] = {7, 7};
        for (int b = 0; b < 2 && r == zipcclSuccess; b++)
            rd[b] = zk_decompress_start(K, fp[b], size[b], op[b], dcap[b], zipcclBfloat16, dws.data(), dws.size(),
                                        NULL, info[b].data(), &bad[b]);
        for (int b = 0; b < 2 && rd[0] == zipcclSuccess && rd[1] == zipcclSuccess; b++)
            rd[b] = zk_decompress_end(K, fp[b], size[b], op[b], dcap[b], zipcclBfloat16, info[b].data(), cnt[b],
                                      &bad[b]);
        const uint64_t dsyncs = emu_syncs() - s1;
        for (int i = 0; i < K && rd[0] == zipcclSuccess; i++)
            ok &= cnt[0][i] == counts[0][i] && !memcmp(dec[0][i].data(), src[0][i].data(), counts[0][i] * 2);
        char n[96];
        snprintf(n, sizeof n, "emu/batch_split/%s", cc_codec_name(p.codec));
        CHECK(ok && r == zipcclSuccess && csyncs == 0 && dsyncs == 0 && rd[0] == zipcclSuccess &&
                  rd[1] == zipcclChecksumMismatch && bad[0] == -1 && bad[1] == 2,
              n, "same bytes %d, compress %d, host waits %llu and %llu (want 0), decompress %d and %d (want %d), "
                 "failed %d and %d (want -1, 2)", ok, r, (unsigned long long)csyncs, (unsigned long long)dsyncs,
              rd[0], rd[1], (int)zipcclChecksumMismatch, bad[0], bad[1]);
    }
}

int main(int argc, char** argv) {
    int longrun = argc > 1 && !strcmp(argv[1], "--long");
    tu_quiet_pass = 0;
    check_xxh32();
    check_estimator();
    check_select();
    check_scan();
    check_compress_capacity();
    check_lookback();
    check_decompress_workspace();
    check_batch();
    check_split();
    cc_api(&kEmu);
    cc_chunk_log2(&kEmu);
    cc_small_chunks(&kEmu);
    cc_f2_shapes(&kEmu);
    cc_tail_tables(&kEmu);
    cc_constant(&kEmu);
    cc_boundary(&kEmu);
    cc_constant_damage(&kEmu, zipcclBfloat16);
    cc_constant_damage(&kEmu, zipcclFloat16);
    cc_constant_damage(&kEmu, zipcclFloat32);
    cc_precedence(&kEmu);

    const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    const zipcclCodec_t* codecs = cc_codecs; /* fast (T), f3, dense, f2 */
    const size_t counts[] = {0, 1, 63, 64, 65, 1000, 16383, 16384, 16385, 2 * 16384 + 4097};
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < CC_NCODECS; c++)
            for (int cs = 0; cs < 2; cs++)
                for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
                    if (longrun || (int)((k + d + c) % 2) == cs) /* else each size one checksum setting */
                        cc_roundtrip(&kEmu, dts[d], codecs[c], cs, D_GAUSS, counts[k]);
    /* distributions, a chunk and a bit each; sparse: its four chunk kinds */
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < CC_NCODECS; c++)
            for (int dist = D_GAUSS_SMALL; dist <= D_SPARSE; dist++)
                cc_roundtrip(&kEmu, dts[d], codecs[c], dist % 2, (cc_dist_t)dist,
                             dist == D_SPARSE ? 4 * 16384 + 333 : dist == D_MIXED ? 50000 : 20000);
    /* every 16-bit pattern */
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < CC_NCODECS; c++) cc_roundtrip(&kEmu, dts[d], codecs[c], 1, D_ALLBITS, 65536);
    for (int c = 0; c < CC_NCODECS; c++) cc_roundtrip(&kEmu, zipcclFloat32, codecs[c], 0, D_RANDBITS, 20000);
    cc_roundtrip(&kEmu, zipcclFloat32, zipcclCodecStored, 1,
                 D_GAUSS, 20000);
    /* unaligned buffers */
    g_misalign = 1;
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < CC_NCODECS; c++) cc_roundtrip(&kEmu, dts[d], codecs[c], 1, D_SPECIAL, 16500);
    for (int d = 0; d < 3; d++) /* C chunks */
        for (int c = 0; c < 2; c++) cc_roundtrip(&kEmu, dts[d], c ? zipcclCodecDense : zipcclCodecFast, 1, D_ZERO, 16500);
    g_misalign = 0;
    /* damaged frames */
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < CC_NCODECS; c++)
            for (int cs = 0; cs < 2; cs++) cc_corruption(&kEmu, dts[d], codecs[c], cs, 20000, longrun ? 200 : 40);
    for (int cs = 0; cs < 2; cs++) cc_corruption(&kEmu, zipcclFloat16, zipcclCodecStored, cs, 20000, longrun ? 200 : 40);
    for (int d = 0; d < 3; d++) cc_f2_damage(&kEmu, dts[d]);
    if (longrun) {
        for (int d = 0; d < 3; d++)
            for (int c = 0; c < CC_NCODECS; c++) cc_roundtrip(&kEmu, dts[d], codecs[c], 1, D_GAUSS, 1 << 20);
    }
    printf("%d passed, %d failed\n", tu_passes, tu_failures);
    return tu_exit();
}
