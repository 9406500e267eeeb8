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
#include "codec_boundary.h"
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

typedef enum { D_GAUSS, D_GAUSS_SMALL, D_GAUSS_BIG, D_ALLBITS, D_RANDBITS, D_SPECIAL, D_ZERO, D_MIXED, D_SPARSE } cc_dist_t;
static const char* cc_dist_name(cc_dist_t d) {
    static const char* n[] = {"gauss", "gauss1e-3", "gauss1e3", "allbits", "randbits", "special", "zero", "mixed",
                              "sparse"};
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
        case D_SPARSE: { /* zeros (escapes: e = 0 is outside every window, and the
                          * scale estimate ignores it) at 5/30/42/60% by chunk */
            static const double frac[] = {0.05, 0.30, 0.42, 0.60};
            bits = cc_uniform() < frac[(i >> 14) % 4] ? 0 : cc_from_float(dt, (float)cc_gauss());
            break;
        }
        default: /* D_MIXED: chunks of different scales, some post-ReLU */
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
    return c == zipcclCodecFast ? "fast" : c == zipcclCodecDense ? "dense" : c == zipcclCodecStored ? "stored"
         : c == zipcclCodecF3 ? "f3" : c == zipcclCodecF2 ? "f2" : "default";
}
/* The codecs that compress, and the chunk mode each writes (FORMAT.md §7). */
static const zipcclCodec_t cc_codecs[] = {zipcclCodecFast, zipcclCodecF3, zipcclCodecDense, zipcclCodecF2};
#define CC_NCODECS 4
static int cc_mode_of(zipcclCodec_t c) {
    return c == zipcclCodecDense ? 2 : c == zipcclCodecF3 ? 1 : c == zipcclCodecF2 ? 3 : 4;
}

static uint32_t cc_ld32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

/* Offsets of a compressed frame's chunks (empty for a stored frame). */
static std::vector<size_t> cc_chunk_offsets(const std::vector<uint8_t>& f) {
    std::vector<size_t> at;
    if (f.size() < 16 || (f[6] & 2)) return at;
    uint64_t count = 0;
    for (int k = 0; k < 8; k++) count |= (uint64_t)f[8 + k] << (8 * k);
    size_t C = (size_t)1 << f[7], nc = (size_t)((count + C - 1) / C);
    size_t pos = 16 + 4 * nc + ((f[6] & 1) ? 4 + 4 * nc : 0);
    for (size_t k = 0; k < nc; k++) {
        at.push_back(pos);
        pos += cc_ld32(&f[16 + 4 * k]);
    }
    return at;
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

/* A damaged frame through the backend's decoder and the CPU's: both result
 * codes, the backend's guard, and whether the outputs agree. */
struct CcBoth {
    zipcclResult_t r, rc;
    int guard_ok, same;
};
static CcBoth cc_decode_both(const Backend* b, const std::vector<uint8_t>& g, size_t cap) {
    std::vector<uint8_t> out, cpu(cap + 1);
    size_t got = 0, cgot = 0;
    CcBoth x;
    x.r = cc_decode(b, g.data(), g.size(), &out, cap, &got, &x.guard_ok);
    x.rc = zipcclDecompress(g.data(), g.size(), cpu.data(), cap, &cgot, (zipcclDataType_t)0, NULL);
    cpu.resize(cap);
    x.same = out == cpu;
    return x;
}

/* One input through both codecs, in both directions; the frames' chunks are
 * raw or of the codec's mode. Returns the backend's frame. */
static std::vector<uint8_t> cc_roundtrip_data(const Backend* b, zipcclDataType_t dt, zipcclCodec_t codec, int cs,
                                              const char* label, const std::vector<uint8_t>& src, size_t count) {
    char name[160];
    snprintf(name, sizeof name, "%s/%s/%s/cs%d/%s/n=%zu", b->name, cc_dt_name(dt), cc_codec_name(codec), cs, label,
             count);
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
        return gf;
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
    if (codec != zipcclCodecStored) {
        int bad = -1;
        int any_c = 0;
        for (size_t at : cc_chunk_offsets(gf)) {
            int c_ok = (codec == zipcclCodecFast || codec == zipcclCodecDense) && gf[at] == 5; /* C: fast, dense */
            if (gf[at] != 0 && gf[at] != cc_mode_of(codec) && !c_ok) bad = gf[at];
            any_c |= gf[at] == 5;
        }
        snprintf(n2, sizeof n2, "%s/chunk_modes", name);
        CHECK(bad < 0, n2, "a chunk of mode %d", bad);
        /* FORMAT.md §2: version 3 exactly for frames with a C chunk, 4 for
         * R frames (tail tables), 1 for stored ones */
        int stored = gf.size() >= 16 && (gf[6] & 2);
        int want = stored ? 1 : codec == zipcclCodecDense ? 4 : codec != zipcclCodecFast ? 1 : any_c ? 3 : 2;
        snprintf(n2, sizeof n2, "%s/version", name);
        CHECK(gf.size() >= 16 && gf[4] == want, n2, "version %d, expected %d", gf.size() >= 16 ? gf[4] : -1, want);
    }
    return gf;
}
static void cc_roundtrip(const Backend* b, zipcclDataType_t dt, zipcclCodec_t codec, int cs, cc_dist_t dist,
                         size_t count) {
    cc_roundtrip_data(b, dt, codec, cs, cc_dist_name(dist), cc_make(dt, dist, count), count);
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
    struct { size_t at; uint8_t v; } hdr[] = {{0, 0x5B}, {4, 5}, {5, 0}, {5, 4}, {6, 4}, {7, 9}, {7, 21}, {15, 0x40}};
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
    /* a set padding bit in the last group's planes (FORMAT.md 4.1, 4.3, 4.5:
     * MUST be 0) -- random flips rarely land there */
    std::vector<size_t> offs = cc_chunk_offsets(f);
    if (!offs.empty()) {
        size_t at = offs.back(), n_last = count - (offs.size() - 1) * 16384, G = (n_last + 63) / 64;
        size_t rest = dt == zipcclFloat32 ? 3 * n_last : dt == zipcclFloat16 ? n_last + 24 * G : n_last;
        int tail = n_last % 64 != 0;
        std::vector<size_t> spots;
        if (f[at] == 1 && tail) spots.push_back(at + 8 + rest + 24 * (G - 1) + 7);
        if (f[at] == 3) {
            size_t pp = at + 8 + rest, m = 0;
            for (size_t j = 0; j < 16 * G; j += 16)
                for (int k = 0; k < 8; k++) m += __builtin_popcount(f[pp + j + k] & f[pp + j + 8 + k]);
            if (tail) spots.push_back(pp + 16 * (G - 1) + 7);                          /* P0 bit 63 */
            if (m % 64) spots.push_back(pp + 16 * G + 24 * ((m + 63) / 64 - 1) + 15); /* Q1 bit 63 */
        }
        if (dt == zipcclFloat16 && f[at] != 0 && tail)
            spots.push_back(at + 8 + (f[at] == 2 ? 64 : 0) + n_last + 24 * (G - 1) + 15);
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

/* ---- F2 chunks (FORMAT.md 4.5) ------------------------------------------- */

/* Where the parts of an F2 chunk lie, read back from a frame. */
typedef struct {
    size_t at, n, G, m, H, nesc, pp, sp, ep, end; /* pp/sp/ep: primary, secondary, escapes */
} cc_f2_t;

static cc_f2_t cc_f2_parse(const std::vector<uint8_t>& f, size_t at, size_t end, size_t n, zipcclDataType_t dt) {
    cc_f2_t c;
    c.at = at;
    c.end = end;
    c.n = n;
    c.G = (n + 63) / 64;
    c.pp = at + 8 + (dt == zipcclFloat32 ? 3 * n : dt == zipcclFloat16 ? n + 24 * c.G : n);
    c.m = 0;
    for (size_t j = 0; j < 16 * c.G; j += 16)
        for (int k = 0; k < 8; k++) c.m += __builtin_popcount(f[c.pp + j + k] & f[c.pp + j + 8 + k]);
    c.H = (c.m + 63) / 64;
    c.nesc = cc_ld32(&f[at + 4]);
    c.sp = c.pp + 16 * c.G;
    c.ep = c.sp + 24 * c.H;
    return c;
}
/* Byte and bit of plane k of entry t in planes of np words a group. */
static size_t cc_plane_byte(size_t planes, int np, size_t t, int k) { return planes + 8 * np * (t / 64) + 8 * k + (t % 64) / 8; }
static int cc_plane_get(const std::vector<uint8_t>& f, size_t planes, int np, size_t t, int bits) {
    int v = 0;
    for (int k = 0; k < bits; k++) v |= ((f[cc_plane_byte(planes, np, t, k)] >> (t % 8)) & 1) << k;
    return v;
}
static void cc_plane_set(std::vector<uint8_t>& f, size_t planes, int np, size_t t, int bits, int v) {
    for (int k = 0; k < bits; k++) {
        uint8_t& byte = f[cc_plane_byte(planes, np, t, k)];
        byte = (uint8_t)((byte & ~(1u << (t % 8))) | (((v >> k) & 1u) << (t % 8)));
    }
}

/* Elements of one exponent (that of 1.0; random sign and mantissa) with k
 * zeros spread among them: zeros are escapes and the only second tier, so an
 * F2 chunk has m = k exactly. k = 0, 64, 128 give an empty or full last
 * secondary group; many zeros make the encoder's escape bytes overlap their
 * final place (see zk_place_escapes). */
static std::vector<uint8_t> cc_make_tiered(zipcclDataType_t dt, size_t count, size_t k) {
    size_t es = cc_es(dt);
    std::vector<uint8_t> v(count * es);
    for (size_t i = 0; i < count; i++) {
        uint32_t r = (uint32_t)cc_next(), bits;
        if (dt == zipcclBfloat16) bits = 0x3F80u | (r & 0x807Fu);
        else if (dt == zipcclFloat16) bits = 0x3C00u | (r & 0x83FFu);
        else bits = 0x3F800000u | (r & 0x807FFFFFu);
        if ((i * 37) % count < k) bits = 0; /* 37 is prime to the counts used: exactly k zeros */
        memcpy(&v[i * es], &bits, es); /* little-endian host */
    }
    return v;
}

/* Frames of one F2 chunk with a chosen second tier: bytes equal to the
 * CPU's, the chunk F2 exactly when smaller than raw, of the expected size. */
static void cc_f2_shapes(const Backend* b) {
    const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    const size_t ks[] = {0, 1, 63, 64, 65, 128, 129, 400};
    const size_t count = 1000;
    for (int d = 0; d < 3; d++)
        for (size_t k : ks)
            for (int cs = 0; cs < 2; cs++) {
                char label[64], n2[200];
                snprintf(label, sizeof label, "tiered_m%zu", k);
                std::vector<uint8_t> f =
                    cc_roundtrip_data(b, dts[d], zipcclCodecF2, cs, label, cc_make_tiered(dts[d], count, k), count);
                std::vector<size_t> offs = cc_chunk_offsets(f);
                size_t G = (count + 63) / 64, es = cc_es(dts[d]);
                size_t rest = dts[d] == zipcclFloat32 ? 3 * count : dts[d] == zipcclFloat16 ? count + 24 * G : count;
                size_t want = 8 + rest + 16 * G + 24 * ((k + 63) / 64) + k, raw = 8 + count * es;
                int mode = offs.size() == 1 ? f[offs[0]] : -1;
                size_t got = offs.size() == 1 ? f.size() - offs[0] : 0;
                snprintf(n2, sizeof n2, "%s/%s/f2/cs%d/%s/f2_layout", b->name, cc_dt_name(dts[d]), cs, label);
                CHECK(want < raw ? mode == 3 && got == want : offs.empty(), n2,
                      "%zu chunks, mode %d, %zu bytes (F2 would be %zu, raw %zu: then a stored frame)", offs.size(), mode,
                      got, want, raw);
            }
}

/* Damaged F2 chunks, each fault placed on purpose in the last chunk (1000
 * elements: 16 primary groups, the last 40 wide) of a frame without
 * checksums; where the chunk changes size, the chunk table follows, so only
 * the chunk is wrong. The backend must return the CPU decoder's result, the
 * listed faults must be zipcclCorruptStream, and where both accept (a change
 * that leaves a valid chunk) they must decode alike. */
static void cc_f2_damage(const Backend* b, zipcclDataType_t dt) {
    size_t count = 16384 + 1000, es = cc_es(dt), cap = count * es;
    std::vector<uint8_t> src = cc_make(dt, D_SPECIAL, count), f;
    zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
    p.codec = zipcclCodecF2;
    char n2[200];
    snprintf(n2, sizeof n2, "%s/f2_damage/%s/setup", b->name, cc_dt_name(dt));
    int ok = b->compress(src.data(), count, dt, &p, &f) == zipcclSuccess;
    std::vector<size_t> offs = ok ? cc_chunk_offsets(f) : std::vector<size_t>();
    if (!CHECK(offs.size() == 2 && f[offs[1]] == 3, n2, "compress ok %d, %zu chunks, last of mode %d", ok, offs.size(),
               offs.size() == 2 ? f[offs[1]] : -1))
        return;
    cc_f2_t c = cc_f2_parse(f, offs[1], f.size(), 1000, dt);
    size_t tbl = 16 + 4; /* the last chunk's table entry */
    uint32_t emax = dt == zipcclFloat16 ? 31 : 255;
    /* a copy with `len` bytes replaced by `ins` at `pos`, the table adjusted */
    auto splice = [&](size_t pos, size_t len, const std::vector<uint8_t>& ins) {
        std::vector<uint8_t> g(f.begin(), f.begin() + pos);
        g.insert(g.end(), ins.begin(), ins.end());
        g.insert(g.end(), f.begin() + pos + len, f.end());
        uint32_t sz = (uint32_t)(cc_ld32(&f[tbl]) + ins.size() - len);
        for (int k = 0; k < 4; k++) g[tbl + k] = (uint8_t)(sz >> (8 * k));
        return g;
    };
    auto with_nesc = [&](std::vector<uint8_t> g, uint32_t v) {
        for (int k = 0; k < 4; k++) g[c.at + 4 + k] = (uint8_t)(v >> (8 * k));
        return g;
    };
    auto with_byte = [&](size_t pos, uint8_t v) {
        std::vector<uint8_t> g(f);
        g[pos] = v;
        return g;
    };
    /* second-tier entries: one with a code below 7 and one escape, if any */
    size_t t_code = c.m, t_esc = c.m;
    for (size_t t = 0; t < c.m; t++) {
        int q = cc_plane_get(f, c.sp, 3, t, 3);
        if (q != 7 && t_code == c.m) t_code = t;
        if (q == 7 && t_esc == c.m) t_esc = t;
    }
    size_t i_prim = 0; /* an element with a 2-bit code (p < 3) */
    while (i_prim < c.n && cc_plane_get(f, c.pp, 2, i_prim, 2) == 3) i_prim++;
    struct Case {
        const char* name;
        int must_refuse;
        std::vector<uint8_t> g;
    };
    std::vector<Case> cases;
    std::vector<uint8_t> g;
    g = f; g[c.pp + 16 * (c.G - 1) + 7] |= 0x80;
    cases.push_back({"primary_padding", 1, g});
    if (c.m % 64) {
        g = f; g[c.sp + 24 * (c.H - 1) + 16 + 7] |= 0x80;
        cases.push_back({"secondary_padding", 1, g});
    }
    cases.push_back({"truncated_1", 1, splice(c.end - 1, 1, {})});
    if (c.H) cases.push_back({"secondary_group_missing", 1, splice(c.sp + 24 * (c.H - 1), 24, {})});
    cases.push_back({"secondary_group_extra", 1, splice(c.ep, 0, std::vector<uint8_t>(24, 0))});
    cases.push_back({"n_esc_plus_one_with_byte", 1, with_nesc(splice(c.end, 0, {1}), (uint32_t)c.nesc + 1)});
    if (c.nesc) cases.push_back({"n_esc_minus_one_without_byte", 1, with_nesc(splice(c.end - 1, 1, {}), (uint32_t)c.nesc - 1)});
    cases.push_back({"n_esc_plus_one", 1, with_nesc(f, (uint32_t)c.nesc + 1)});
    cases.push_back({"n_esc_above_n", 1, with_nesc(f, (uint32_t)c.n + 1)});
    cases.push_back({"table_size_only", 1, with_byte(tbl, (uint8_t)(f[tbl] + 1))});
    if (c.nesc) cases.push_back({"escape_byte_ff", dt == zipcclFloat16, with_byte(c.ep, 0xFF)});
    cases.push_back({"top_zero", 1, with_byte(c.at + 1, 0)});
    cases.push_back({"top_ff", emax < 0xFF, with_byte(c.at + 1, 0xFF)});
    cases.push_back({"table_nonzero", 1, with_byte(c.at + 2, 1)});
    cases.push_back({"reserved_nonzero", 1, with_byte(c.at + 3, 1)});
    cases.push_back({"mode_4", 1, with_byte(c.at, 4)});
    cases.push_back({"mode_f3", 24 * c.H != 8 * c.G, with_byte(c.at, 1)});
    if (t_code < c.m) {
        g = f; cc_plane_set(g, c.sp, 3, t_code, 3, 7);
        cases.push_back({"secondary_code_to_escape", 1, g});
    }
    if (t_esc < c.m) {
        g = f; cc_plane_set(g, c.sp, 3, t_esc, 3, 1);
        cases.push_back({"escape_to_secondary_code", 1, g});
    }
    if (i_prim < c.n) { /* one more second-tier entry: valid or not, as m and H allow */
        g = f; cc_plane_set(g, c.pp, 2, i_prim, 2, 3);
        cases.push_back({"primary_to_second_tier", 0, g});
    }
    for (const Case& k : cases) {
        const CcBoth x = cc_decode_both(b, k.g, cap);
        snprintf(n2, sizeof n2, "%s/f2_damage/%s/%s", b->name, cc_dt_name(dt), k.name);
        CHECK(x.r == x.rc && (!k.must_refuse || x.r == zipcclCorruptStream) && x.guard_ok &&
                  (x.r != zipcclSuccess || x.same),
              n2, "%s %d, cpu %d, guard %d, same output %d", b->name, x.r, x.rc, x.guard_ok, x.same);
    }
}

/* ---- C chunks (FORMAT.md 4.7) ------------------------------------------- */

static void cc_put(std::vector<uint8_t>& v, size_t i, size_t es, uint32_t bits) {
    for (size_t b = 0; b < es; b++) v[i * es + b] = (uint8_t)(bits >> (8 * b));
}

/* R's tail classes (FORMAT.md §5, tables 8..39, version 4): Gaussian
 * elements whose log2 scale spreads by tau = 0, 1 and 2 (one chunk each,
 * twice), as a gradient's rows and columns do. Both encoders must pick the
 * same tables (the frames are compared byte for byte), the spread chunks
 * must take a tail table and the plain Gaussian ones class 0. */
static void cc_tail_tables(const Backend* b) {
    const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    const double taus[] = {0.0, 1.0, 2.0};
    const size_t n = 6 * 16384;
    for (int d = 0; d < 3; d++) {
        size_t es = cc_es(dts[d]);
        std::vector<uint8_t> src(n * es);
        for (size_t i = 0; i < n; i++) {
            double tau = taus[(i >> 14) % 3], scale = dts[d] == zipcclFloat16 ? 1e-2 : 1.0;
            uint32_t bits = cc_from_float(dts[d], (float)(scale * cc_gauss() * exp2(tau * cc_gauss())));
            for (size_t k = 0; k < es; k++) src[i * es + k] = (uint8_t)(bits >> (8 * k));
        }
        for (int cs = 0; cs < 2; cs++) {
            std::vector<uint8_t> f = cc_roundtrip_data(b, dts[d], zipcclCodecDense, cs, "tail_classes", src, n);
            std::vector<size_t> at = cc_chunk_offsets(f);
            int ok = at.size() == 6;
            char why[160] = "";
            for (size_t k = 0; ok && k < at.size(); k++) {
                int mode = f[at[k]], table = f[at[k] + 2], want_tail = (k % 3) != 0;
                if (mode != 2 || (table >= 8) != want_tail) {
                    ok = 0;
                    snprintf(why, sizeof why, "chunk %zu (tau %.0f): mode %d, table %d", k, taus[k % 3], mode, table);
                }
            }
            char name[128];
            snprintf(name, sizeof name, "%s/%s/dense/cs%d/tail_classes_chosen", b->name, cc_dt_name(dts[d]), cs);
            CHECK(ok, name, "%s", why);
        }
    }
}

/* Constant chunks, zero and not, in every dtype and with partial last
 * chunks, mixed with T chunks and with near-constant ones: the backend's
 * frame equals the CPU's byte for byte (cc_roundtrip_data), and the chunk
 * modes are the expected ones. */
static void cc_constant(const Backend* b) {
    const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    const uint32_t vals[3][5] = {{0, 0x8000, 0x3F80, 0x7FC1, 0xFFFF},
                                 {0, 0x8000, 0x3C00, 0x7E01, 0xFFFF},
                                 {0, 0x80000000u, 0x3F800000u, 0x7FC00001u, 0xFFFFFFFFu}};
    const char* vn[5] = {"zero", "neg_zero", "one", "nan", "all_ones"};
    const size_t counts[] = {2, 8, 63, 1000, 16384, 16385, 16386, 2 * 16384 + 4097};
    for (int d = 0; d < 3; d++) {
        size_t es = cc_es(dts[d]);
        for (int v = 0; v < 5; v++)
            for (size_t n : counts) {
                std::vector<uint8_t> src(n * es);
                for (size_t i = 0; i < n; i++) cc_put(src, i, es, vals[d][v]);
                char label[64], n2[200];
                snprintf(label, sizeof label, "const_%s", vn[v]);
                std::vector<uint8_t> f = cc_roundtrip_data(b, dts[d], zipcclCodecFast, (int)(n % 2), label, src, n);
                std::vector<size_t> offs = cc_chunk_offsets(f);
                int ok = n < 8 ? offs.empty() : offs.size() == (n + 16383) / 16384;
                for (size_t k = 0; k < offs.size(); k++) {
                    size_t nk = n - 16384 * k < 16384 ? n - 16384 * k : 16384;
                    ok &= f[offs[k]] == (nk >= 2 ? 5 : 0);
                }
                snprintf(n2, sizeof n2, "%s/%s/fast/%s/n=%zu/c_chunks", b->name, cc_dt_name(dts[d]), label, n);
                CHECK(ok, n2, "%zu chunks, first of mode %d", offs.size(), offs.empty() ? -1 : f[offs[0]]);
            }
        /* one element differs (first, an unsampled one, last of the chunk),
         * +0 among -0, and T C T */
        size_t n = 16384 + 3000;
        const size_t at[] = {0, 2, 16383, 16384, n - 1};
        for (size_t a : at)
            for (int v = 0; v < 2; v++) {
                std::vector<uint8_t> src(n * es);
                for (size_t i = 0; i < n; i++) cc_put(src, i, es, vals[d][v]);
                cc_put(src, a, es, vals[d][1 - v]);
                char label[64], n2[200];
                snprintf(label, sizeof label, "near_const_%s_odd_at_%zu", vn[v], a);
                std::vector<uint8_t> f = cc_roundtrip_data(b, dts[d], zipcclCodecFast, 0, label, src, n);
                std::vector<size_t> offs = cc_chunk_offsets(f);
                size_t odd = a < 16384 ? 0 : 1;
                snprintf(n2, sizeof n2, "%s/%s/fast/%s/not_c", b->name, cc_dt_name(dts[d]), label);
                CHECK(offs.size() == 2 && f[offs[odd]] != 5 && f[offs[1 - odd]] == 5, n2, "%zu chunks", offs.size());
            }
        std::vector<uint8_t> g = cc_make(dts[d], D_GAUSS, 2 * 16384 + 5000);
        std::fill(g.begin() + 16384 * es, g.begin() + 2 * 16384 * es, 0);
        for (int cs = 0; cs < 2; cs++) cc_roundtrip_data(b, dts[d], zipcclCodecFast, cs, "gauss_zero_gauss", g, 2 * 16384 + 5000);
    }
}

/* Chunks whose coding lands exactly on raw - 1, raw and raw + 1 bytes
 * (tests/gpu/codec_boundary.h), every codec that codes, every dtype, as a
 * full first chunk and as a short last one: the backend's frame equals the
 * CPU's byte for byte (cc_roundtrip_data), and the chunk is coded, of raw - 1
 * bytes, exactly when its coding is smaller than raw, raw otherwise. An
 * encoder whose fits test lets a coding of raw bytes through fails the raw
 * cases; one that stops a byte early fails the raw - 1 ones. */
static void cc_boundary(const Backend* b) {
    const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < CC_NCODECS; c++)
            for (int tail = 0; tail < 2; tail++)
                for (int delta = -1; delta <= 1; delta++) {
                    char label[64], n2[200];
                    snprintf(label, sizeof label, "boundary_%s_raw%+d", tail ? "short_tail" : "full_chunk", delta);
                    snprintf(n2, sizeof n2, "%s/%s/%s/%s/found", b->name, cc_dt_name(dts[d]),
                             cc_codec_name(cc_codecs[c]), label);
                    zcb_case_t k;
                    if (!CHECK(zcb_find(dts[d], cc_codecs[c], tail, delta, &k), n2,
                               "no seed of %d codes a chunk to raw %+d bytes", ZCB_SEEDS, delta)) {
                        free(k.data);
                        continue;
                    }
                    std::vector<uint8_t> src(k.data, k.data + k.count * cc_es(dts[d]));
                    free(k.data);
                    int cs = (d + c + tail + delta + 1) % 2;
                    std::vector<uint8_t> f = cc_roundtrip_data(b, dts[d], cc_codecs[c], cs, label, src, k.count);
                    int mode = zcb_chunk_mode(&k, f.data(), f.size());
                    size_t got = zcb_chunk_size(&k, f.data(), f.size());
                    int want_mode = delta < 0 ? cc_mode_of(cc_codecs[c]) : 0;
                    size_t want = delta < 0 ? k.coded : k.raw;
                    snprintf(n2, sizeof n2, "%s/%s/%s/cs%d/%s/coded_iff_below_raw", b->name, cc_dt_name(dts[d]),
                             cc_codec_name(cc_codecs[c]), cs, label);
                    CHECK(mode == want_mode && got == want, n2,
                          "chunk %zu of %zu elements (coding %zu bytes, raw %zu; %zu escapes planted, seed %u, top %u, "
                          "table %u): mode %d, %zu bytes; want mode %d, %zu bytes",
                          k.index, k.n, k.coded, k.raw, k.k, k.seed, k.top, k.table, mode, got, want_mode, want);
                }
}

/* Damaged C chunks: both decoders refuse them alike (a version-2 frame
 * claiming mode 5 above all). */
static void cc_constant_damage(const Backend* b, zipcclDataType_t dt) {
    size_t count = 16384 + 1000, es = cc_es(dt), cap = count * es;
    std::vector<uint8_t> src(cap), f;
    for (size_t i = 0; i < count; i++) cc_put(src, i, es, i < 16384 ? 0 : 0x3C00u << (dt == zipcclFloat32 ? 16 : 0));
    zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
    p.codec = zipcclCodecFast;
    char n2[200];
    snprintf(n2, sizeof n2, "%s/c_damage/%s/setup", b->name, cc_dt_name(dt));
    int ok = b->compress(src.data(), count, dt, &p, &f) == zipcclSuccess;
    std::vector<size_t> offs = ok ? cc_chunk_offsets(f) : std::vector<size_t>();
    if (!CHECK(offs.size() == 2 && f[offs[0]] == 5 && f[offs[1]] == 5 && f[4] == 3, n2, "compress ok %d, %zu chunks", ok,
               offs.size()))
        return;
    size_t c1 = offs[1];
    struct Case {
        const char* name;
        zipcclResult_t want;
        std::vector<uint8_t> g;
    };
    std::vector<Case> cases;
    auto with = [&](size_t pos, uint8_t v) {
        std::vector<uint8_t> g(f);
        g[pos] = v;
        return g;
    };
    cases.push_back({"version_2_claiming_mode_5", zipcclCorruptStream, with(4, 2)});
    cases.push_back({"version_1_claiming_mode_5", zipcclCorruptStream, with(4, 1)});
    cases.push_back({"version_5", zipcclUnsupported, with(4, 5)});
    cases.push_back({"top_nonzero", zipcclCorruptStream, with(c1 + 1, 1)});
    cases.push_back({"table_nonzero", zipcclCorruptStream, with(c1 + 2, 1)});
    cases.push_back({"reserved_nonzero", zipcclCorruptStream, with(c1 + 3, 1)});
    cases.push_back({"n_esc_nonzero", zipcclCorruptStream, with(c1 + 4, 1)});
    cases.push_back({"mode_6", zipcclCorruptStream, with(c1, 6)});
    cases.push_back({"mode_raw", zipcclCorruptStream, with(c1, 0)});
    std::vector<uint8_t> g(f);
    g.push_back(0);
    g[16 + 4] = (uint8_t)(8 + es + 1); /* the table agrees with one byte more */
    cases.push_back({"chunk_plus_one_byte", zipcclCorruptStream, g});
    g.assign(f.begin(), f.end() - 1);
    g[16 + 4] = (uint8_t)(8 + es - 1);
    cases.push_back({"chunk_minus_one_byte", zipcclCorruptStream, g});
    g.assign(f.begin(), f.end() - 1);
    cases.push_back({"truncated", zipcclCorruptStream, g});
    cases.push_back({"other_value", zipcclSuccess, with(c1 + 8, (uint8_t)(f[c1 + 8] ^ 0x5A))});
    for (const Case& k : cases) {
        const CcBoth x = cc_decode_both(b, k.g, cap);
        snprintf(n2, sizeof n2, "%s/c_damage/%s/%s", b->name, cc_dt_name(dt), k.name);
        CHECK(x.r == x.rc && x.r == k.want && x.guard_ok && (x.r != zipcclSuccess || x.same), n2,
              "%s %d, cpu %d, want %d, guard %d", b->name, x.r, x.rc, k.want, x.guard_ok);
    }
}

/* FORMAT.md §8's ordering rules, both decoders alike: 5..15 bytes with the
 * magic and an unknown version are corrupt (too short for a header), 16 are
 * unsupported whatever else they hold, and a checksummed frame's header
 * checksum is checked before its chunk table is used. */
static void cc_precedence(const Backend* b) {
    char n2[200];
    const uint8_t versions[3] = {0, 5, 255};
    for (int v = 0; v < 3; v++)
        for (size_t len = 5; len <= 16; len++) {
            std::vector<uint8_t> g(len, 0xAB);
            memcpy(g.data(), "ZCC1", 4);
            g[4] = versions[v];
            const CcBoth x = cc_decode_both(b, g, 64);
            zipcclResult_t want = len < 16 ? zipcclCorruptStream : zipcclUnsupported;
            snprintf(n2, sizeof n2, "%s/precedence/version_%u_%zu_bytes", b->name, versions[v], len);
            CHECK(x.r == x.rc && x.r == want && x.guard_ok, n2, "%s %d, cpu %d, want %d, guard %d", b->name, x.r,
                  x.rc, want, x.guard_ok);
        }
    size_t count = 16384 + 700, cap = count * 2;
    std::vector<uint8_t> src = cc_make(zipcclBfloat16, D_GAUSS, count), f;
    const zipcclCodec_t codecs[2] = {zipcclCodecFast, zipcclCodecDense};
    for (int c = 0; c < 2; c++) {
        zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
        p.codec = codecs[c];
        p.checksum = 1;
        snprintf(n2, sizeof n2, "%s/precedence/%s/setup", b->name, cc_codec_name(codecs[c]));
        int ok = b->compress(src.data(), count, zipcclBfloat16, &p, &f) == zipcclSuccess;
        if (!CHECK(ok && f.size() > 24 && f[6] == 1, n2, "compress ok %d, %zu bytes", ok, f.size())) continue;
        const struct { const char* what; uint32_t entry; } cases[] = {
            {"plus_one", cc_ld32(&f[16]) + 1}, {"below_8", 3}, {"past_the_end", 0xFFFFFFF0u}};
        for (const auto& k : cases) {
            std::vector<uint8_t> g(f);
            for (int i = 0; i < 4; i++) g[16 + i] = (uint8_t)(k.entry >> (8 * i));
            const CcBoth x = cc_decode_both(b, g, cap);
            snprintf(n2, sizeof n2, "%s/precedence/%s/header_checksum_before_chunk_table_%s", b->name,
                     cc_codec_name(codecs[c]), k.what);
            CHECK(x.r == x.rc && x.r == zipcclChecksumMismatch && x.guard_ok, n2, "%s %d, cpu %d, guard %d", b->name,
                  x.r, x.rc, x.guard_ok);
        }
    }
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

/* F2, F3 and R chunks under chunk_log2 = 10: a frame spliced from two CPU
 * frames of 1024 and 976 elements (each one chunk, so its bytes are valid
 * chunks of the bigger frame). */
static void cc_small_chunks(const Backend* b) {
    const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    const zipcclCodec_t* codecs = cc_codecs;
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < CC_NCODECS; c++) {
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
