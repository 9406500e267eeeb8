/*
 * codec_cases.h — the CUDA codec's test cases, shared by the host emulation
 * (tests/gpu/cuda_emu.cc, runs in the normal suite) and the device test
 * (tests/gpu/test_gpu_codec.cu, runs on a GPU machine).
 *
 * Each case checks the codec under test (a Backend: device or emulated)
 * against the independent CPU codec (zipcclCompress / zipcclDecompress):
 * identical frame bytes, and both decoders restoring the input bit for bit
 * from either side's frame. Corruption cases check that damaged frames are
 * refused and that nothing is written outside the caller's buffer.
 */
#ifndef ZIPCCL_TEST_CODEC_CASES_H
#define ZIPCCL_TEST_CODEC_CASES_H
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include <xxhash.h>

#include "../testutil.h"
#include "zipccl.h"

typedef struct {
    const char* name;
    /* frame <- compress(src); returns the result code */
    zipcclResult_t (*compress)(const void* src, size_t count, zipcclDataType_t dt,
                               const zipcclCodecParams_t* p, std::vector<uint8_t>* frame);
    /* decompress frame into out[0, cap); out has `guard` extra bytes after cap
     * that the backend must leave untouched (the caller checks them) */
    zipcclResult_t (*decompress)(const uint8_t* frame, size_t size, uint8_t* out, size_t cap,
                                 size_t* count, zipcclDataType_t expect);
} Backend;

/* ---- deterministic data -------------------------------------------------- */

static uint64_t cc_rng = 0x9E3779B97F4A7C15ull;
static uint64_t cc_next(void) { /* splitmix64 */
    uint64_t z = (cc_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double cc_uniform(void) { return ((cc_next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static double cc_gauss(void) {
    return sqrt(-2.0 * log(cc_uniform())) * cos(6.283185307179586 * cc_uniform());
}
static uint32_t cc_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static uint16_t cc_bf16(float f) { /* round to nearest even; NaN kept NaN */
    uint32_t u = cc_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}
static uint16_t cc_fp16(float f) { /* round to nearest even, with subnormals */
    uint32_t u = cc_f32_bits(f), sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* rounds to inf */
    if (a < 0x38800000u) {                                     /* subnormal or zero */
        float af;
        memcpy(&af, &a, 4);
        double scaled = (double)af * 16777216.0; /* / 2^-24 */
        double r = nearbyint(scaled);
        return (uint16_t)(sign | (uint32_t)r);
    }
    uint32_t m = a + 0xFFFu + ((a >> 13) & 1);
    return (uint16_t)(sign | ((m - 0x38000000u) >> 13));
}

typedef enum { D_GAUSS, D_GAUSS_SMALL, D_GAUSS_BIG, D_ALLBITS, D_RANDBITS, D_SPECIAL, D_ZERO, D_MIXED } cc_dist_t;
static const char* cc_dist_name(cc_dist_t d) {
    static const char* n[] = {"gauss", "gauss1e-3", "gauss1e3", "allbits", "randbits", "special", "zero", "mixed"};
    return n[d];
}

static size_t cc_es(zipcclDataType_t dt) { return dt == zipcclFloat32 ? 4 : 2; }

static uint32_t cc_from_float(zipcclDataType_t dt, float f) {
    return dt == zipcclBfloat16 ? cc_bf16(f) : dt == zipcclFloat16 ? cc_fp16(f) : cc_f32_bits(f);
}

static std::vector<uint8_t> cc_make(zipcclDataType_t dt, cc_dist_t dist, size_t count) {
    size_t es = cc_es(dt);
    std::vector<uint8_t> v(count * es + 1);
    static const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-45f, 6e-8f,
                                     65504.0f, 3.4e38f, 1e-30f, 1.0f};
    for (size_t i = 0; i < count; i++) {
        uint32_t bits;
        switch (dist) {
        case D_GAUSS: bits = cc_from_float(dt, (float)cc_gauss()); break;
        case D_GAUSS_SMALL: bits = cc_from_float(dt, (float)(1e-3 * cc_gauss())); break;
        case D_GAUSS_BIG: bits = cc_from_float(dt, (float)(1e3 * cc_gauss())); break;
        case D_ALLBITS: bits = (uint32_t)(i * 40503u) & (es == 2 ? 0xFFFFu : 0xFFFFFFFFu); break;
        case D_RANDBITS: bits = (uint32_t)cc_next(); break;
        case D_SPECIAL:
            bits = cc_next() % 8 == 0 ? cc_from_float(dt, specials[cc_next() % 12])
                                      : cc_from_float(dt, (float)cc_gauss());
            break;
        case D_ZERO: bits = 0; break;
        default: /* chunks of different scales, some post-ReLU */
            bits = cc_from_float(dt, (float)(((i >> 14) % 3 == 0 ? 0.01 : 4.0) * ((i >> 14) % 2 ? fabs(cc_gauss()) : cc_gauss())));
        }
        if (es == 2) { v[i * 2] = (uint8_t)bits; v[i * 2 + 1] = (uint8_t)(bits >> 8); }
        else memcpy(&v[i * 4], &bits, 4);
    }
    v.resize(count * es);
    return v;
}

/* ---- the checks ---------------------------------------------------------- */

static const char* cc_dt_name(zipcclDataType_t dt) { return zipcclTypeName(dt); }
static const char* cc_codec_name(zipcclCodec_t c) {
    return c == zipcclCodecFast ? "fast" : c == zipcclCodecDense ? "dense" : c == zipcclCodecStored ? "stored" : "default";
}

#define CC_GUARD 64

/* Decompress with a guard zone after the output; checks the guard. */
static zipcclResult_t cc_decode(const Backend* b, const uint8_t* f, size_t size, std::vector<uint8_t>* out,
                                size_t cap, size_t* count, int* guard_ok) {
    out->assign(cap + CC_GUARD, 0xA5);
    zipcclResult_t r = b->decompress(f, size, out->data(), cap, count, (zipcclDataType_t)0);
    *guard_ok = 1;
    for (size_t i = cap; i < cap + CC_GUARD; i++)
        if ((*out)[i] != 0xA5) *guard_ok = 0;
    out->resize(cap);
    return r;
}

/* One input through both codecs, in both directions. */
static void cc_roundtrip(const Backend* b, zipcclDataType_t dt, zipcclCodec_t codec, int cs, cc_dist_t dist,
                         size_t count) {
    char name[160];
    snprintf(name, sizeof name, "%s/%s/%s/cs%d/%s/n=%zu", b->name, cc_dt_name(dt), cc_codec_name(codec), cs,
             cc_dist_name(dist), count);
    std::vector<uint8_t> src = cc_make(dt, dist, count);
    zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
    p.codec = codec;
    p.checksum = cs;
    size_t bound = zipcclCompressBound(count, dt, cs), csize = 0;
    std::vector<uint8_t> cf(bound), gf;
    zipcclResult_t rc = zipcclCompress(src.data(), count, dt, cf.data(), bound, &csize, &p);
    zipcclResult_t rg = b->compress(src.data(), count, dt, &p, &gf);
    cf.resize(csize);
    if (!CHECK(rc == zipcclSuccess && rg == zipcclSuccess, name, "compress: cpu %d, %s %d (%s)", rc, b->name, rg,
               zipcclGetLastErrorDetail()))
        return;
    size_t first_diff = 0;
    while (first_diff < cf.size() && first_diff < gf.size() && cf[first_diff] == gf[first_diff]) first_diff++;
    int same = cf.size() == gf.size() && first_diff == cf.size();
    char n2[200];
    snprintf(n2, sizeof n2, "%s/same_bytes", name);
    CHECK(same, n2, "cpu frame %zu bytes, %s frame %zu bytes, first difference at byte %zu", cf.size(), b->name,
          gf.size(), first_diff);
    /* the backend decodes the CPU frame */
    std::vector<uint8_t> out;
    size_t got = 0;
    int guard_ok;
    zipcclResult_t r = cc_decode(b, cf.data(), cf.size(), &out, count * cc_es(dt), &got, &guard_ok);
    snprintf(n2, sizeof n2, "%s/%s_decodes_cpu", name, b->name);
    CHECK(r == zipcclSuccess && got == count && out == src && guard_ok, n2, "result %d (%s), count %zu, equal %d, guard %d",
          r, zipcclGetLastErrorDetail(), got, out == src, guard_ok);
    /* the CPU decodes the backend's frame */
    std::vector<uint8_t> out2(count * cc_es(dt) + 1);
    size_t got2 = 0;
    r = zipcclDecompress(gf.data(), gf.size(), out2.data(), count * cc_es(dt), &got2, dt, NULL);
    out2.resize(count * cc_es(dt));
    snprintf(n2, sizeof n2, "%s/cpu_decodes_%s", name, b->name);
    CHECK(r == zipcclSuccess && got2 == count && out2 == src, n2, "result %d (%s)", r, zipcclGetLastErrorDetail());
}

/* Damaged frames: truncated, extended, bit-flipped, header fields. With
 * checksums every flip must be refused; without, the backend must agree with
 * the CPU decoder on accept/refuse (both implement the same MUSTs) and never
 * write past the output. */
static void cc_corruption(const Backend* b, zipcclDataType_t dt, zipcclCodec_t codec, int cs, size_t count, int flips) {
    char name[160];
    snprintf(name, sizeof name, "%s/corrupt/%s/%s/cs%d/n=%zu", b->name, cc_dt_name(dt), cc_codec_name(codec), cs, count);
    std::vector<uint8_t> src = cc_make(dt, D_SPECIAL, count);
    zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
    p.codec = codec;
    p.checksum = cs;
    std::vector<uint8_t> f;
    if (!CHECK(b->compress(src.data(), count, dt, &p, &f) == zipcclSuccess, name, "compress failed: %s",
               zipcclGetLastErrorDetail()))
        return;
    size_t cap = count * cc_es(dt);
    std::vector<uint8_t> out, cpu_out(cap + 1);
    size_t got;
    int guard_ok, ok = 1, agree = 1, guards = 1, n_tried = 0;
    char why[200] = "";
    /* truncations and one extra byte */
    size_t cuts[] = {f.size() - 1, f.size() - 2, f.size() / 2, 20, 16, 15, 0};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        if (cuts[k] > f.size()) continue;
        zipcclResult_t r = cc_decode(b, f.data(), cuts[k], &out, cap, &got, &guard_ok);
        n_tried++;
        if (r == zipcclSuccess) { ok = 0; snprintf(why, sizeof why, "truncated to %zu accepted", cuts[k]); }
        guards &= guard_ok;
    }
    std::vector<uint8_t> longer(f);
    longer.push_back(0);
    if (cc_decode(b, longer.data(), longer.size(), &out, cap, &got, &guard_ok) == zipcclSuccess) {
        ok = 0;
        snprintf(why, sizeof why, "frame with a trailing byte accepted");
    }
    guards &= guard_ok;
    /* header fields */
    struct { size_t at; uint8_t v; } hdr[] = {{0, 0x5B}, {4, 2}, {5, 0}, {5, 4}, {6, 4}, {7, 9}, {7, 21}, {15, 0x40}};
    for (size_t k = 0; k < sizeof hdr / sizeof hdr[0]; k++) {
        std::vector<uint8_t> g(f);
        g[hdr[k].at] = hdr[k].v;
        zipcclResult_t r = cc_decode(b, g.data(), g.size(), &out, cap, &got, &guard_ok);
        n_tried++;
        if (r == zipcclSuccess) { ok = 0; snprintf(why, sizeof why, "header byte %zu = %u accepted", hdr[k].at, hdr[k].v); }
        guards &= guard_ok;
    }
    /* bit flips anywhere */
    for (int k = 0; k < flips; k++) {
        std::vector<uint8_t> g(f);
        size_t at = (size_t)(cc_next() % g.size());
        g[at] ^= (uint8_t)(1u << (cc_next() % 8));
        zipcclResult_t r = cc_decode(b, g.data(), g.size(), &out, cap, &got, &guard_ok);
        size_t cgot;
        zipcclResult_t rc = zipcclDecompress(g.data(), g.size(), cpu_out.data(), cap, &cgot, (zipcclDataType_t)0, NULL);
        n_tried++;
        guards &= guard_ok;
        if (cs && r == zipcclSuccess) { ok = 0; snprintf(why, sizeof why, "flip at byte %zu accepted despite checksums", at); }
        if ((r == zipcclSuccess) != (rc == zipcclSuccess)) {
            agree = 0;
            snprintf(why, sizeof why, "flip at byte %zu: %s %d, cpu %d", at, b->name, r, rc);
        }
        if (r == zipcclSuccess && rc == zipcclSuccess && memcmp(out.data(), cpu_out.data(), cap) != 0) {
            agree = 0;
            snprintf(why, sizeof why, "flip at byte %zu: both accept but decode differently", at);
        }
    }
    /* a set padding bit in the last group's planes (FORMAT.md 4.1, 4.3: MUST
     * be 0) -- random flips rarely land there */
    size_t es = cc_es(dt), nc = (count + 16383) / 16384, n_last = count - (nc - 1) * 16384;
    if (!(f[6] & 2) && nc && n_last % 64) {
        size_t at = 16 + 4 * nc + (cs ? 4 + 4 * nc : 0), G = (n_last + 63) / 64;
        for (size_t k = 0; k + 1 < nc; k++) at += (size_t)f[16 + 4 * k] | (size_t)f[17 + 4 * k] << 8 | (size_t)f[18 + 4 * k] << 16;
        size_t rest = es == 4 ? 3 * n_last : es == 2 && dt == zipcclFloat16 ? n_last + 24 * G : n_last;
        std::vector<size_t> spots;
        if (f[at] == 1) spots.push_back(at + 8 + rest + 24 * (G - 1) + 7);
        if (dt == zipcclFloat16 && f[at] != 0) spots.push_back(at + 8 + (f[at] == 2 ? 64 : 0) + n_last + 24 * (G - 1) + 15);
        for (size_t at2 : spots) {
            std::vector<uint8_t> g(f);
            g[at2] |= 0x80;
            zipcclResult_t r = cc_decode(b, g.data(), g.size(), &out, cap, &got, &guard_ok);
            size_t cgot;
            zipcclResult_t rc = zipcclDecompress(g.data(), g.size(), cpu_out.data(), cap, &cgot, (zipcclDataType_t)0, NULL);
            n_tried++;
            guards &= guard_ok;
            if (r == zipcclSuccess || rc == zipcclSuccess) {
                ok = 0;
                snprintf(why, sizeof why, "padding bit at byte %zu accepted: %s %d, cpu %d", at2, b->name, r, rc);
            }
        }
    }
    char n2[200];
    snprintf(n2, sizeof n2, "%s/refused", name);
    CHECK(ok, n2, "%s", why);
    snprintf(n2, sizeof n2, "%s/agrees_with_cpu", name);
    CHECK(agree, n2, "%s", why);
    snprintf(n2, sizeof n2, "%s/no_write_past_output", name);
    CHECK(guards, n2, "guard zone changed in one of %d trials", n_tried);
}

/* Decoders accept any chunk_log2 in 10..20 (FORMAT.md §2), though our
 * encoders write 14: hand-built frames of raw chunks, with checksums. */
static void cc_chunk_log2(const Backend* b) {
    const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    for (int log2 = 10; log2 <= 20; log2 += 6)
        for (int d = 0; d < 3; d++) {
            size_t count = 3000, es = cc_es(dts[d]), C = (size_t)1 << log2, nc = (count + C - 1) / C;
            std::vector<uint8_t> src = cc_make(dts[d], D_GAUSS, count), f(16 + 8 * nc + 4);
            memcpy(f.data(), "ZCC1", 4);
            f[4] = 1;
            f[5] = (uint8_t)(d + 1);
            f[6] = 1; /* checksums */
            f[7] = (uint8_t)log2;
            for (int k = 0; k < 8; k++) f[8 + k] = (uint8_t)((uint64_t)count >> (8 * k));
            std::vector<uint8_t> chunks;
            for (size_t c = 0; c < nc; c++) {
                size_t n = count - c * C < C ? count - c * C : C, sz = 8 + n * es;
                std::vector<uint8_t> ch(8, 0);
                ch.insert(ch.end(), src.begin() + c * C * es, src.begin() + (c * C + n) * es);
                uint32_t h = XXH32(ch.data(), sz, 0);
                for (int k = 0; k < 4; k++) {
                    f[16 + 4 * c + k] = (uint8_t)(sz >> (8 * k));
                    f[16 + 4 * nc + 4 + 4 * c + k] = (uint8_t)(h >> (8 * k));
                }
                chunks.insert(chunks.end(), ch.begin(), ch.end());
            }
            uint32_t hh = XXH32(f.data(), 16 + 4 * nc, 0);
            for (int k = 0; k < 4; k++) f[16 + 4 * nc + k] = (uint8_t)(hh >> (8 * k));
            f.insert(f.end(), chunks.begin(), chunks.end());
            std::vector<uint8_t> out, cpu(count * es);
            size_t got = 0, cgot = 0;
            int guard_ok;
            zipcclResult_t r = cc_decode(b, f.data(), f.size(), &out, count * es, &got, &guard_ok);
            zipcclResult_t rc = zipcclDecompress(f.data(), f.size(), cpu.data(), cpu.size(), &cgot, (zipcclDataType_t)0, NULL);
            char n2[160];
            snprintf(n2, sizeof n2, "%s/chunk_log2_%d/%s", b->name, log2, cc_dt_name(dts[d]));
            CHECK(r == zipcclSuccess && rc == zipcclSuccess && out == src && cpu == src && guard_ok, n2,
                  "%s %d, cpu %d (%s)", b->name, r, rc, zipcclGetLastErrorDetail());
        }
}

/* F3 and R chunks under chunk_log2 = 10: a frame spliced from two CPU
 * frames of 1024 and 976 elements (each one chunk, so its bytes are valid
 * chunks of the bigger frame). */
static void cc_small_chunks(const Backend* b) {
    const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    const zipcclCodec_t codecs[] = {zipcclCodecFast, zipcclCodecDense};
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < 2; c++) {
            size_t es = cc_es(dts[d]), count = 2000;
            std::vector<uint8_t> src = cc_make(dts[d], D_GAUSS, count), f(16 + 8, 0), part(4096 * 4);
            zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
            p.codec = codecs[c];
            size_t parts[2] = {1024, 976}, at = 0, psize = 0;
            int ok = 1;
            for (int k = 0; k < 2; k++) {
                ok &= zipcclCompress(src.data() + at * es, parts[k], dts[d], part.data(), part.size(), &psize, &p) ==
                      zipcclSuccess && !(part[6] & 2) && psize > 20;
                size_t sz = psize - 20;
                for (int j = 0; j < 4; j++) f[16 + 4 * k + j] = (uint8_t)(sz >> (8 * j));
                f.insert(f.end(), part.begin() + 20, part.begin() + psize);
                at += parts[k];
            }
            memcpy(f.data(), part.data(), 16);
            f[7] = 10;
            for (int k = 0; k < 8; k++) f[8 + k] = (uint8_t)((uint64_t)count >> (8 * k));
            std::vector<uint8_t> out;
            size_t got = 0;
            int guard_ok = 0;
            zipcclResult_t r = ok ? cc_decode(b, f.data(), f.size(), &out, count * es, &got, &guard_ok) : zipcclInternalError;
            char n2[160];
            snprintf(n2, sizeof n2, "%s/chunk_log2_10/%s/%s", b->name, cc_dt_name(dts[d]), cc_codec_name(codecs[c]));
            CHECK(ok && r == zipcclSuccess && out == src && guard_ok, n2, "parts ok %d, result %d (%s)", ok, r,
                  zipcclGetLastErrorDetail());
        }
}

/* API-level argument checks that need no data. */
static void cc_api(const Backend* b) {
    char n[160];
    std::vector<uint8_t> src = cc_make(zipcclBfloat16, D_GAUSS, 1000), f;
    zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
    p.codec = (zipcclCodec_t)9;
    snprintf(n, sizeof n, "%s/api/bad_codec", b->name);
    CHECK(b->compress(src.data(), 1000, zipcclBfloat16, &p, &f) == zipcclInvalidArgument, n, "not refused");
    snprintf(n, sizeof n, "%s/api/bad_dtype", b->name);
    CHECK(b->compress(src.data(), 1000, (zipcclDataType_t)3, NULL, &f) == zipcclInvalidArgument, n, "not refused");
    CHECK(b->compress(src.data(), 1000, zipcclBfloat16, NULL, &f) == zipcclSuccess, "api/default_params", "%s",
          zipcclGetLastErrorDetail());
    std::vector<uint8_t> out(2000 + CC_GUARD);
    size_t got;
    snprintf(n, sizeof n, "%s/api/dst_too_small", b->name);
    CHECK(b->decompress(f.data(), f.size(), out.data(), 1999, &got, (zipcclDataType_t)0) == zipcclDstTooSmall, n,
          "not refused");
    snprintf(n, sizeof n, "%s/api/dtype_mismatch", b->name);
    CHECK(b->decompress(f.data(), f.size(), out.data(), 2000, &got, zipcclFloat16) == zipcclMismatch, n,
          "not refused");
    snprintf(n, sizeof n, "%s/api/dtype_expected_ok", b->name);
    CHECK(b->decompress(f.data(), f.size(), out.data(), 2000, &got, zipcclBfloat16) == zipcclSuccess && got == 1000 &&
              !memcmp(out.data(), src.data(), 2000),
          n, "%s", zipcclGetLastErrorDetail());
}

#endif
