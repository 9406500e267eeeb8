/*
 * codec_cpu.c — the CPU codec: zipcclCompress, zipcclDecompress,
 * zipcclGetFrameInfo, zipcclCompressBound, zipcclSimdDetect. It writes and
 * reads docs/FORMAT.md byte for byte; the encoder makes the reference choices
 * of FORMAT.md §7 (via codec_format.h) so it emits the same bytes as the CUDA
 * codec.
 *
 * Reading order, top to bottom:
 *   1. element <-> (exponent, rest) helpers and chunk geometry
 *   2. scalar group kernels: split (encode) / merge (decode) 64 elements
 *   3. AVX-512 and AVX2 group kernels: the same bytes, chosen at run time;
 *      F2's tiers (symbols <-> primary and second-tier planes)
 *   4. rANS: 32 interleaved lanes, scalar and AVX-512 (gathers/scatters)
 *   5. chunk encoder and decoder (all validation lives here)
 *   6. frame encoder and decoder, public API
 *
 * A "group" is 64 consecutive elements of a chunk: the unit of the bit planes.
 * Split turns a chunk's elements into its rest section, its codes (F3: three
 * plane words per group; R and F2: one symbol byte per element, fed to rANS
 * or cut into F2's two tiers) and its escape bytes; merge does the reverse
 * and checks every code. SIMD kernels do
 * full groups and leave a chunk's last partial group to the scalar one, so the
 * scalar code is the reference every path is tested against byte for byte.
 * R and F2 chunks are decoded in segments of ZC_SEG elements (rANS or tiers
 * -> symbols -> merge) so no buffer grows with chunk_log2 (decoders accept
 * up to 2^20).
 *
 * Left out on purpose: threads (chunks are independent, callers can split
 * frames), encoding with chunk_log2 other than 14 (decoding accepts 10..20),
 * AVX2 rANS (without gathers/scatters worth having, the scalar lanes serve).
 * The hot path never allocates: per-chunk scratch (about 66 KB for a dense
 * chunk) lives on the stack.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "codec_format.h"
#include "zipccl.h"
#include "zipccl_internal.h"

/* ------------------------------------------------------------------------ */
/* 1. Elements, geometry                                                     */
/* ------------------------------------------------------------------------ */

#define ZC_ENC_CHUNK (1u << ZCF_CHUNK_LOG2) /* elements per chunk, encoder     */
#define ZC_LANE_CAP (4 + 2 * (ZC_ENC_CHUNK / ZCF_R_LANES)) /* max bytes of a lane */
#define ZC_SEG 2048 /* R decoding: elements per rANS->merge segment          */

static inline uint64_t zc_ld64(const uint8_t* p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline void zc_st64(uint8_t* p, uint64_t v) { memcpy(p, &v, 8); }
static inline uint32_t zc_ld_elem(const uint8_t* p, int es) { return es == 2 ? zcf_ld16(p) : zcf_ld32(p); }
static inline void zc_st_elem(uint8_t* p, int es, uint32_t v) {
    if (es == 2) zcf_st16(p, (uint16_t)v); else zcf_st32(p, v);
}

/* The public dtype -> the format's dtype code (0 if unknown). */
static int zc_dt(zipcclDataType_t dtype) {
    switch (dtype) {
    case zipcclBfloat16: return ZCF_DT_BF16;
    case zipcclFloat16: return ZCF_DT_FP16;
    case zipcclFloat32: return ZCF_DT_FP32;
    }
    return 0;
}
static zipcclDataType_t zc_dtype(int dt) {
    return dt == ZCF_DT_BF16 ? zipcclBfloat16 : dt == ZCF_DT_FP16 ? zipcclFloat16 : zipcclFloat32;
}

static inline size_t zc_groups(size_t n) { return (n + 63) / 64; }
static inline size_t zc_raw_chunk_size(int dt, size_t n) {
    return ZCF_CHUNK_HEADER_SIZE + n * (size_t)zcf_elem_size(dt);
}

/* The code that marks an escape (F3's plane code, R's and F2's symbol): the
 * largest window distance + 1. */
static inline uint32_t zc_esc_code(int mode) {
    return mode == ZCF_MODE_F3 ? ZCF_F3_ESC : mode == ZCF_MODE_F2 ? ZCF_F2_ESC : mode == ZCF_MODE_T ? ZCF_T_ESC : ZCF_R_ESC;
}

/* ------------------------------------------------------------------------ */
/* 2. Scalar group kernels (the reference every SIMD path must match)       */
/* ------------------------------------------------------------------------ */

/* Split group g of a chunk of n elements: rest bytes/bits into the rest
 * section, codes (F3: plane words at codes + 24g; R, F2: symbols at codes + i),
 * escape bytes appended at esc[*nesc]. */
static void split_group_scalar(int dt, int mode, size_t n, size_t g, const uint8_t* src,
                               uint32_t top, uint8_t* rest, uint8_t* codes, uint8_t* esc,
                               uint32_t* nesc) {
    int es = zcf_elem_size(dt);
    size_t i0 = 64 * g, cnt = n - i0 < 64 ? n - i0 : 64;
    uint32_t W = zc_esc_code(mode);
    uint64_t p0 = 0, p1 = 0, p2 = 0, h0 = 0, h1 = 0, h2 = 0;
    for (size_t j = 0; j < cnt; j++) {
        size_t i = i0 + j;
        uint32_t x = zc_ld_elem(src + i * es, es);
        uint32_t e = zcf_exponent(dt, x);
        uint32_t c = (e <= top && top - e < W) ? top - e : W;
        if (c == W) esc[(*nesc)++] = (uint8_t)e;
        if (mode == ZCF_MODE_F3) {
            p0 |= (uint64_t)(c & 1) << j;
            p1 |= (uint64_t)((c >> 1) & 1) << j;
            p2 |= (uint64_t)((c >> 2) & 1) << j;
        } else {
            codes[i] = (uint8_t)c;
        }
        if (dt == ZCF_DT_BF16) {
            rest[i] = (uint8_t)((x & 0x7F) | ((x >> 8) & 0x80));
        } else if (dt == ZCF_DT_FP16) {
            rest[i] = (uint8_t)x;
            h0 |= (uint64_t)((x >> 8) & 1) << j;
            h1 |= (uint64_t)((x >> 9) & 1) << j;
            h2 |= (uint64_t)((x >> 15) & 1) << j;
        } else {
            rest[i] = (uint8_t)x;
            rest[n + i] = (uint8_t)(x >> 8);
            rest[2 * n + i] = (uint8_t)(((x >> 16) & 0x7F) | ((x >> 24) & 0x80));
        }
    }
    if (mode == ZCF_MODE_F3) {
        zc_st64(codes + 24 * g, p0);
        zc_st64(codes + 24 * g + 8, p1);
        zc_st64(codes + 24 * g + 16, p2);
    }
    if (dt == ZCF_DT_FP16) {
        uint8_t* h = rest + n + 24 * g;
        zc_st64(h, h0);
        zc_st64(h + 8, h1);
        zc_st64(h + 16, h2);
    }
}

/* Merge group g: codes of this group at `codes` (F3: 3 plane words; R, F2: cnt
 * symbol bytes). Returns -1 on a code outside the window or too few escape
 * bytes. Escape bytes were range-checked by the caller. */
static int merge_group_scalar(int dt, int mode, size_t n, size_t g, const uint8_t* rest,
                              const uint8_t* codes, const uint8_t* esc, uint32_t n_esc,
                              uint32_t* pos, uint32_t top, uint8_t* dst) {
    int es = zcf_elem_size(dt);
    size_t i0 = 64 * g, cnt = n - i0 < 64 ? n - i0 : 64;
    uint32_t W = zc_esc_code(mode);
    uint64_t p0 = 0, p1 = 0, p2 = 0, h0 = 0, h1 = 0, h2 = 0;
    if (mode == ZCF_MODE_F3) { p0 = zc_ld64(codes); p1 = zc_ld64(codes + 8); p2 = zc_ld64(codes + 16); }
    if (dt == ZCF_DT_FP16) {
        const uint8_t* h = rest + n + 24 * g;
        h0 = zc_ld64(h); h1 = zc_ld64(h + 8); h2 = zc_ld64(h + 16);
    }
    for (size_t j = 0; j < cnt; j++) {
        size_t i = i0 + j;
        uint32_t c = mode == ZCF_MODE_F3
                         ? (uint32_t)(((p0 >> j) & 1) | (((p1 >> j) & 1) << 1) | (((p2 >> j) & 1) << 2))
                         : codes[j];
        uint32_t e;
        if (c == W) {
            if (*pos >= n_esc) return -1;
            e = esc[(*pos)++];
        } else {
            if (c > top) return -1;
            e = top - c;
        }
        uint32_t x;
        if (dt == ZCF_DT_BF16) {
            uint32_t r = rest[i];
            x = (r & 0x7F) | ((r & 0x80) << 8) | (e << 7);
        } else if (dt == ZCF_DT_FP16) {
            x = rest[i] | (uint32_t)((h0 >> j) & 1) << 8 | (uint32_t)((h1 >> j) & 1) << 9 |
                (uint32_t)((h2 >> j) & 1) << 15 | (e << 10);
        } else {
            uint32_t r2 = rest[2 * n + i];
            x = rest[i] | ((uint32_t)rest[n + i] << 8) | ((r2 & 0x7F) << 16) | ((r2 & 0x80) << 24) |
                (e << 23);
        }
        zc_st_elem(dst + i * es, es, x);
    }
    return 0;
}

/* Whole-chunk split (encoder; g0 = 0) and group-range merge (decoder). */
typedef uint32_t (*zc_split_fn)(int dt, int mode, size_t n, const uint8_t* src, uint32_t top,
                                uint8_t* rest, uint8_t* codes, uint8_t* esc);
typedef int (*zc_merge_fn)(int dt, int mode, size_t n, size_t g0, size_t g1, const uint8_t* rest,
                           const uint8_t* codes, const uint8_t* esc, uint32_t n_esc,
                           uint32_t* pos, uint32_t top, uint8_t* dst);

static uint32_t split_scalar(int dt, int mode, size_t n, const uint8_t* src, uint32_t top,
                             uint8_t* rest, uint8_t* codes, uint8_t* esc) {
    uint32_t nesc = 0;
    for (size_t g = 0; g < zc_groups(n); g++)
        split_group_scalar(dt, mode, n, g, src, top, rest, codes, esc, &nesc);
    return nesc;
}

static int merge_scalar(int dt, int mode, size_t n, size_t g0, size_t g1, const uint8_t* rest,
                        const uint8_t* codes, const uint8_t* esc, uint32_t n_esc, uint32_t* pos,
                        uint32_t top, uint8_t* dst) {
    size_t stride = mode == ZCF_MODE_F3 ? 24 : 64;
    for (size_t g = g0; g < g1; g++)
        if (merge_group_scalar(dt, mode, n, g, rest, codes + (g - g0) * stride, esc, n_esc, pos,
                               top, dst))
            return -1;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* 3a. AVX-512 kernels (F, BW, VL, VBMI, VBMI2)                              */
/* ------------------------------------------------------------------------ */
/* Per group: vpermt2b gathers the bytes of 64 elements into byte vectors;
 * the exponent vector e gives codes c = top - e (escape where e > top or the
 * distance reaches the escape code); F3 planes are test_epi8_mask of c,
 * escapes leave through vpcompressb and come back through vpexpandb. */

#define ZC_T512 \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,bmi,bmi2,popcnt")))

/* Byte index tables for vpermt2b (bit 6 selects the second source). */
static const uint8_t kEven[64] __attribute__((aligned(64))) = {
    0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42,
    44, 46, 48, 50, 52, 54, 56, 58, 60, 62, 64, 66, 68, 70, 72, 74, 76, 78, 80, 82, 84, 86,
    88, 90, 92, 94, 96, 98, 100, 102, 104, 106, 108, 110, 112, 114, 116, 118, 120, 122, 124, 126};
static uint8_t kIdxOdd[64], kIota[64], kIlv0[64], kIlv1[64], kF32P[64], kF32Q[64];
static uint16_t kW16a[32], kW16b[32];
static pthread_once_t kIdxOnce = PTHREAD_ONCE_INIT;
static void zc_init_idx(void) {
    for (int j = 0; j < 64; j++) {
        kIdxOdd[j] = (uint8_t)(2 * j + 1);
        kIota[j] = (uint8_t)j;
        kIlv0[j] = (uint8_t)((j & 1) ? 64 + j / 2 : j / 2);
        kIlv1[j] = (uint8_t)(kIlv0[j] + 32);
        kF32P[j] = (uint8_t)(j < 32 ? 4 * j : 4 * (j - 32) + 1);
        kF32Q[j] = (uint8_t)(j < 32 ? 4 * j + 2 : 4 * (j - 32) + 3);
    }
    for (int j = 0; j < 32; j++) {
        kW16a[j] = (uint16_t)((j & 1) ? 32 + j / 2 : j / 2);
        kW16b[j] = (uint16_t)(kW16a[j] + 16);
    }
}

/* Codes and escape mask from 64 exponent bytes. */
ZC_T512 static inline __m512i zc512_codes(__m512i e, __m512i topv, __m512i Wv, __mmask64* esc) {
    __m512i d = _mm512_sub_epi8(topv, e);
    __mmask64 m = _mm512_cmpgt_epu8_mask(e, topv) | _mm512_cmpge_epu8_mask(d, Wv);
    *esc = m;
    return _mm512_mask_mov_epi8(d, m, Wv);
}

ZC_T512 static inline void zc512_put(int mode, size_t g, __m512i c, __mmask64 m, __m512i e,
                                     uint8_t* codes, uint8_t* esc, uint32_t* nesc) {
    if (mode == ZCF_MODE_F3) {
        zc_st64(codes + 24 * g, _mm512_test_epi8_mask(c, _mm512_set1_epi8(1)));
        zc_st64(codes + 24 * g + 8, _mm512_test_epi8_mask(c, _mm512_set1_epi8(2)));
        zc_st64(codes + 24 * g + 16, _mm512_test_epi8_mask(c, _mm512_set1_epi8(4)));
    } else {
        _mm512_storeu_si512(codes + 64 * g, c);
    }
    if (m) {
        _mm512_storeu_si512(esc + *nesc, _mm512_maskz_compress_epi8(m, e));
        *nesc += (uint32_t)_mm_popcnt_u64(m);
    }
}

ZC_T512 static __attribute__((always_inline)) inline uint32_t split_avx512_impl(int dt, int mode, size_t n, const uint8_t* src, uint32_t top,
                                     uint8_t* rest, uint8_t* codes, uint8_t* esc) {
    pthread_once(&kIdxOnce, zc_init_idx);
    const __m512i topv = _mm512_set1_epi8((char)top), Wv = _mm512_set1_epi8((char)zc_esc_code(mode));
    const __m512i even = _mm512_load_si512(kEven), odd = _mm512_loadu_si512(kIdxOdd);
    size_t full = n / 64;
    uint32_t nesc = 0;
    __mmask64 m;
    if (dt == ZCF_DT_BF16) {
        const __m512i m7f = _mm512_set1_epi16(0x7F);
        for (size_t g = 0; g < full; g++) {
            __m512i a = _mm512_loadu_si512(src + 128 * g), b = _mm512_loadu_si512(src + 128 * g + 64);
            /* rest word: low byte sign<<7|mant7; exponent: high byte of x<<1 */
            __m512i ra = _mm512_ternarylogic_epi32(m7f, a, _mm512_srli_epi16(a, 8), 0xCA);
            __m512i rb = _mm512_ternarylogic_epi32(m7f, b, _mm512_srli_epi16(b, 8), 0xCA);
            __m512i r = _mm512_permutex2var_epi8(ra, even, rb);
            __m512i e = _mm512_permutex2var_epi8(_mm512_slli_epi16(a, 1), odd, _mm512_slli_epi16(b, 1));
            _mm512_storeu_si512(rest + 64 * g, r);
            __m512i c = zc512_codes(e, topv, Wv, &m);
            zc512_put(mode, g, c, m, e, codes, esc, &nesc);
        }
    } else if (dt == ZCF_DT_FP16) {
        const __m512i m1f = _mm512_set1_epi8(0x1F);
        for (size_t g = 0; g < full; g++) {
            __m512i a = _mm512_loadu_si512(src + 128 * g), b = _mm512_loadu_si512(src + 128 * g + 64);
            __m512i lo = _mm512_permutex2var_epi8(a, even, b), hi = _mm512_permutex2var_epi8(a, odd, b);
            _mm512_storeu_si512(rest + 64 * g, lo);
            uint8_t* h = rest + n + 24 * g;
            zc_st64(h, _mm512_test_epi8_mask(hi, _mm512_set1_epi8(1)));
            zc_st64(h + 8, _mm512_test_epi8_mask(hi, _mm512_set1_epi8(2)));
            zc_st64(h + 16, _mm512_test_epi8_mask(hi, _mm512_set1_epi8((char)0x80)));
            __m512i e = _mm512_and_si512(_mm512_srli_epi16(hi, 2), m1f);
            __m512i c = zc512_codes(e, topv, Wv, &m);
            zc512_put(mode, g, c, m, e, codes, esc, &nesc);
        }
    } else {
        const __m512i ip = _mm512_loadu_si512(kF32P), iq = _mm512_loadu_si512(kF32Q);
        const __m512i m7f = _mm512_set1_epi8(0x7F), mfe = _mm512_set1_epi8((char)0xFE);
        for (size_t g = 0; g < full; g++) {
            const uint8_t* s = src + 256 * g;
            __m512i a = _mm512_loadu_si512(s), b = _mm512_loadu_si512(s + 64);
            __m512i c2 = _mm512_loadu_si512(s + 128), d2 = _mm512_loadu_si512(s + 192);
            __m512i p = _mm512_permutex2var_epi8(a, ip, b), q = _mm512_permutex2var_epi8(a, iq, b);
            __m512i p2 = _mm512_permutex2var_epi8(c2, ip, d2), q2 = _mm512_permutex2var_epi8(c2, iq, d2);
            __m512i B0 = _mm512_shuffle_i64x2(p, p2, 0x44), B1 = _mm512_shuffle_i64x2(p, p2, 0xEE);
            __m512i B2 = _mm512_shuffle_i64x2(q, q2, 0x44), B3 = _mm512_shuffle_i64x2(q, q2, 0xEE);
            _mm512_storeu_si512(rest + 64 * g, B0);
            _mm512_storeu_si512(rest + n + 64 * g, B1);
            _mm512_storeu_si512(rest + 2 * n + 64 * g, _mm512_ternarylogic_epi32(m7f, B2, B3, 0xCA));
            __m512i e = _mm512_ternarylogic_epi32(mfe, _mm512_slli_epi16(B3, 1), _mm512_srli_epi16(B2, 7), 0xCA);
            __m512i c = zc512_codes(e, topv, Wv, &m);
            zc512_put(mode, g, c, m, e, codes, esc, &nesc);
        }
    }
    if (full * 64 < n) split_group_scalar(dt, mode, n, full, src, top, rest, codes, esc, &nesc);
    return nesc;
}

ZC_T512 static __attribute__((always_inline)) inline int merge_avx512_impl(int dt, int mode, size_t n, size_t g0, size_t g1,
                                const uint8_t* rest, const uint8_t* codes, const uint8_t* esc,
                                uint32_t n_esc, uint32_t* pos, uint32_t top, uint8_t* dst) {
    pthread_once(&kIdxOnce, zc_init_idx);
    const __m512i topv = _mm512_set1_epi8((char)top), one = _mm512_set1_epi8(1);
    const __m512i two = _mm512_set1_epi8(2), four = _mm512_set1_epi8(4);
    const __m512i escv = _mm512_set1_epi8((char)zc_esc_code(mode));
    const __m512i m7f = _mm512_set1_epi8(0x7F);
    const __m512i il0 = _mm512_loadu_si512(kIlv0), il1 = _mm512_loadu_si512(kIlv1);
    size_t gend = g1;
    if (g1 * 64 > n) gend = g1 - 1; /* the partial last group goes scalar */
    __mmask64 bad = 0;
    uint32_t p = *pos;
    for (size_t g = g0; g < gend; g++) {
        __m512i c;
        __mmask64 m;
        if (mode == ZCF_MODE_F3) {
            const uint8_t* w = codes + 24 * (g - g0);
            __mmask64 w0 = zc_ld64(w), w1 = zc_ld64(w + 8), w2 = zc_ld64(w + 16);
            c = _mm512_ternarylogic_epi32(_mm512_maskz_mov_epi8(w0, one), _mm512_maskz_mov_epi8(w1, two),
                                          _mm512_maskz_mov_epi8(w2, four), 0xFE);
            m = w0 & w1 & w2;
        } else {
            c = _mm512_loadu_si512(codes + 64 * (g - g0));
            m = _mm512_cmpeq_epi8_mask(c, escv);
        }
        bad |= _mm512_cmpgt_epu8_mask(c, topv) & ~m;
        __m512i e = _mm512_sub_epi8(topv, c);
        if (m) {
            uint32_t k = (uint32_t)_mm_popcnt_u64(m);
            if (k > n_esc - p) return -1;
            e = _mm512_mask_expandloadu_epi8(e, m, esc + p);
            p += k;
        }
        if (dt == ZCF_DT_BF16) {
            __m512i r = _mm512_loadu_si512(rest + 64 * g);
            /* lo = (e&1)<<7 | mant7, hi = sign<<7 | e>>1 */
            __m512i lo = _mm512_ternarylogic_epi32(m7f, r, _mm512_slli_epi16(e, 7), 0xCA);
            __m512i hi = _mm512_ternarylogic_epi32(m7f, _mm512_srli_epi16(e, 1), r, 0xCA);
            _mm512_storeu_si512(dst + 128 * g, _mm512_permutex2var_epi8(lo, il0, hi));
            _mm512_storeu_si512(dst + 128 * g + 64, _mm512_permutex2var_epi8(lo, il1, hi));
        } else if (dt == ZCF_DT_FP16) {
            __m512i lo = _mm512_loadu_si512(rest + 64 * g);
            const uint8_t* h = rest + n + 24 * g;
            __m512i hb = _mm512_ternarylogic_epi32(
                _mm512_maskz_mov_epi8(zc_ld64(h), one), _mm512_maskz_mov_epi8(zc_ld64(h + 8), two),
                _mm512_maskz_mov_epi8(zc_ld64(h + 16), _mm512_set1_epi8((char)0x80)), 0xFE);
            __m512i hi = _mm512_or_si512(hb, _mm512_slli_epi16(e, 2)); /* e < 32: no spill */
            _mm512_storeu_si512(dst + 128 * g, _mm512_permutex2var_epi8(lo, il0, hi));
            _mm512_storeu_si512(dst + 128 * g + 64, _mm512_permutex2var_epi8(lo, il1, hi));
        } else {
            __m512i B0 = _mm512_loadu_si512(rest + 64 * g), B1 = _mm512_loadu_si512(rest + n + 64 * g);
            __m512i R2 = _mm512_loadu_si512(rest + 2 * n + 64 * g);
            __m512i B2 = _mm512_ternarylogic_epi32(m7f, R2, _mm512_slli_epi16(e, 7), 0xCA);
            __m512i B3 = _mm512_ternarylogic_epi32(m7f, _mm512_srli_epi16(e, 1), R2, 0xCA);
            __m512i P0 = _mm512_permutex2var_epi8(B0, il0, B1), P1 = _mm512_permutex2var_epi8(B0, il1, B1);
            __m512i Q0 = _mm512_permutex2var_epi8(B2, il0, B3), Q1 = _mm512_permutex2var_epi8(B2, il1, B3);
            const __m512i wa = _mm512_loadu_si512(kW16a), wb = _mm512_loadu_si512(kW16b);
            uint8_t* o = dst + 256 * g;
            _mm512_storeu_si512(o, _mm512_permutex2var_epi16(P0, wa, Q0));
            _mm512_storeu_si512(o + 64, _mm512_permutex2var_epi16(P0, wb, Q0));
            _mm512_storeu_si512(o + 128, _mm512_permutex2var_epi16(P1, wa, Q1));
            _mm512_storeu_si512(o + 192, _mm512_permutex2var_epi16(P1, wb, Q1));
        }
    }
    *pos = p;
    if (bad) return -1;
    if (gend < g1) {
        size_t stride = mode == ZCF_MODE_F3 ? 24 : 64;
        return merge_group_scalar(dt, mode, n, gend, rest, codes + (gend - g0) * stride, esc, n_esc,
                                  pos, top, dst);
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* 3b. AVX2 kernels                                                          */
/* ------------------------------------------------------------------------ */
/* A group is two halves of 32 elements, one ymm of bytes each; bit planes
 * come from movemask of shifted codes and go back through a byte broadcast +
 * bit test. Escapes leave through a scalar loop over the escape mask (rare:
 * ~2.5% of Gaussian values) and come back through pshufb expansion patterns,
 * which avoids reloading a vector just patched byte by byte (a store-forward
 * stall on every half with an escape). */

#define ZC_T256 __attribute__((target("avx2,bmi,bmi2,popcnt")))

/* How many entries of `groups` 2-plane groups (16 bytes each: low plane,
 * high plane) have code 3, both bits set: a T chunk's tier-2 (or tier-3)
 * length from its tier 1 (tier 2), an F2 chunk's secondary length. The
 * decoder counts this for every chunk; the scalar copy calls libgcc's
 * popcount on a baseline x86-64 build, the other the instruction. */
static size_t zc_count3_scalar(const uint8_t* planes, size_t groups) {
    size_t m = 0;
    for (size_t g = 0; g < groups; g++) m += (size_t)__builtin_popcountll(zc_ld64(planes + 16 * g) & zc_ld64(planes + 16 * g + 8));
    return m;
}
ZC_T256 static size_t zc_count3_popcnt(const uint8_t* planes, size_t groups) {
    size_t m = 0;
    for (size_t g = 0; g < groups; g++) m += (size_t)_mm_popcnt_u64(zc_ld64(planes + 16 * g) & zc_ld64(planes + 16 * g + 8));
    return m;
}

ZC_T256 static inline __m256i zc256_fix(__m256i packed) { /* undo packus lane interleave */
    return _mm256_permute4x64_epi64(packed, 0xD8);
}

/* Codes and escape mask of 32 exponent bytes. */
ZC_T256 static inline __m256i zc256_codes(__m256i e, __m256i topv, __m256i Wv, uint32_t* esc) {
    __m256i d = _mm256_sub_epi8(topv, e);
    __m256i above = _mm256_xor_si256(_mm256_max_epu8(e, topv), topv);    /* nonzero: e > top */
    __m256i far = _mm256_cmpeq_epi8(_mm256_max_epu8(d, Wv), d);          /* d >= W        */
    __m256i m = _mm256_or_si256(far, _mm256_xor_si256(_mm256_cmpeq_epi8(above, _mm256_setzero_si256()),
                                                      _mm256_set1_epi8(-1)));
    *esc = (uint32_t)_mm256_movemask_epi8(m);
    return _mm256_blendv_epi8(d, Wv, m);
}

/* Emit the codes and escapes of one 32-element half (h = 0 or 1) of group g. */
ZC_T256 static inline void zc256_put(int mode, size_t g, int h, __m256i c, uint32_t m, __m256i e,
                                     uint8_t* codes, uint8_t* esc, uint32_t* nesc, uint32_t pl[3]) {
    if (mode == ZCF_MODE_F3) {
        pl[0] = (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(c, 7));
        pl[1] = (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(c, 6));
        pl[2] = (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(c, 5));
    } else {
        _mm256_storeu_si256((__m256i*)(codes + 64 * g + 32 * h), c);
    }
    if (m) {
        uint8_t tmp[32];
        _mm256_storeu_si256((__m256i*)tmp, e);
        uint32_t k = *nesc;
        while (m) { esc[k++] = tmp[_tzcnt_u32(m)]; m &= m - 1; }
        *nesc = k;
    }
}

ZC_T256 static __attribute__((always_inline)) inline uint32_t split_avx2_impl(int dt, int mode, size_t n, const uint8_t* src, uint32_t top,
                                   uint8_t* rest, uint8_t* codes, uint8_t* esc) {
    const __m256i topv = _mm256_set1_epi8((char)top), Wv = _mm256_set1_epi8((char)zc_esc_code(mode));
    size_t full = n / 64;
    uint32_t nesc = 0;
    for (size_t g = 0; g < full; g++) {
        uint32_t pl[2][3], hb[2][3];
        for (int h = 0; h < 2; h++) {
            size_t i = 64 * g + 32 * h;
            __m256i e, c;
            uint32_t m;
            if (dt == ZCF_DT_BF16) {
                __m256i a = _mm256_loadu_si256((const __m256i*)(src + 2 * i));
                __m256i b = _mm256_loadu_si256((const __m256i*)(src + 2 * i + 32));
                const __m256i m7f = _mm256_set1_epi16(0x7F), m80 = _mm256_set1_epi16(0x80), mff = _mm256_set1_epi16(0xFF);
                __m256i ra = _mm256_or_si256(_mm256_and_si256(a, m7f), _mm256_and_si256(_mm256_srli_epi16(a, 8), m80));
                __m256i rb = _mm256_or_si256(_mm256_and_si256(b, m7f), _mm256_and_si256(_mm256_srli_epi16(b, 8), m80));
                _mm256_storeu_si256((__m256i*)(rest + i), zc256_fix(_mm256_packus_epi16(ra, rb)));
                e = zc256_fix(_mm256_packus_epi16(_mm256_and_si256(_mm256_srli_epi16(a, 7), mff),
                                                  _mm256_and_si256(_mm256_srli_epi16(b, 7), mff)));
            } else if (dt == ZCF_DT_FP16) {
                __m256i a = _mm256_loadu_si256((const __m256i*)(src + 2 * i));
                __m256i b = _mm256_loadu_si256((const __m256i*)(src + 2 * i + 32));
                const __m256i mff = _mm256_set1_epi16(0xFF);
                __m256i lo = zc256_fix(_mm256_packus_epi16(_mm256_and_si256(a, mff), _mm256_and_si256(b, mff)));
                __m256i hi = zc256_fix(_mm256_packus_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8)));
                _mm256_storeu_si256((__m256i*)(rest + i), lo);
                hb[h][0] = (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(hi, 7));
                hb[h][1] = (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(hi, 6));
                hb[h][2] = (uint32_t)_mm256_movemask_epi8(hi);
                e = _mm256_and_si256(_mm256_srli_epi16(hi, 2), _mm256_set1_epi8(0x1F));
            } else {
                const __m256i shuf = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                                      0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
                const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
                const uint8_t* s = src + 4 * i;
                __m256i v0 = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i*)s), shuf);
                __m256i v1 = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i*)(s + 32)), shuf);
                __m256i v2 = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i*)(s + 64)), shuf);
                __m256i v3 = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i*)(s + 96)), shuf);
                __m256i t0 = _mm256_unpacklo_epi32(v0, v1), t1 = _mm256_unpackhi_epi32(v0, v1);
                __m256i t2 = _mm256_unpacklo_epi32(v2, v3), t3 = _mm256_unpackhi_epi32(v2, v3);
                __m256i B0 = _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi64(t0, t2), perm);
                __m256i B1 = _mm256_permutevar8x32_epi32(_mm256_unpackhi_epi64(t0, t2), perm);
                __m256i B2 = _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi64(t1, t3), perm);
                __m256i B3 = _mm256_permutevar8x32_epi32(_mm256_unpackhi_epi64(t1, t3), perm);
                const __m256i m7f = _mm256_set1_epi8(0x7F), m80 = _mm256_set1_epi8((char)0x80);
                _mm256_storeu_si256((__m256i*)(rest + i), B0);
                _mm256_storeu_si256((__m256i*)(rest + n + i), B1);
                _mm256_storeu_si256((__m256i*)(rest + 2 * n + i),
                                    _mm256_or_si256(_mm256_and_si256(B2, m7f), _mm256_and_si256(B3, m80)));
                e = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(B3, 1), _mm256_set1_epi8((char)0xFE)),
                                    _mm256_and_si256(_mm256_srli_epi16(B2, 7), _mm256_set1_epi8(1)));
            }
            c = zc256_codes(e, topv, Wv, &m);
            zc256_put(mode, g, h, c, m, e, codes, esc, &nesc, pl[h]);
        }
        if (mode == ZCF_MODE_F3)
            for (int k = 0; k < 3; k++) zc_st64(codes + 24 * g + 8 * k, pl[0][k] | (uint64_t)pl[1][k] << 32);
        if (dt == ZCF_DT_FP16)
            for (int k = 0; k < 3; k++) zc_st64(rest + n + 24 * g + 8 * k, hb[0][k] | (uint64_t)hb[1][k] << 32);
    }
    if (full * 64 < n) split_group_scalar(dt, mode, n, full, src, top, rest, codes, esc, &nesc);
    return nesc;
}

/* kExpand[b]: pshufb pattern that spreads the first popcount(b) bytes of a
 * source over the set bit positions of b (zero elsewhere). */
static uint64_t kExpand[256];
static pthread_once_t kExpandOnce = PTHREAD_ONCE_INIT;
static void zc_init_expand(void) {
    for (int b = 0; b < 256; b++) {
        uint64_t v = 0;
        for (int j = 0, k = 0; j < 8; j++)
            v |= (uint64_t)((b >> j & 1) ? k++ : 0x80) << (8 * j);
        kExpand[b] = v;
    }
}

/* The escape bytes esc[p..] spread over the set bits of m (32 elements).
 * Two 16-byte loads, one per 16 elements: the second quarter's pattern has
 * its indices moved past the first quarter's bytes (0x80 + at most 8 keeps
 * its high bit: still a zero), so one pshufb serves two quarters. Reads
 * esc[0, min(popcount(m), 16) + 16), which the caller guarantees. */
ZC_T256 static inline __m256i zc256_expand(const uint8_t* esc, uint32_t m) {
    const uint64_t ones = 0x0101010101010101ull;
    uint32_t b0 = m & 0xFF, b1 = (m >> 8) & 0xFF, b2 = (m >> 16) & 0xFF, b3 = m >> 24;
    uint32_t c0 = (uint32_t)_mm_popcnt_u32(b0), c2 = (uint32_t)_mm_popcnt_u32(b2);
    uint32_t c01 = (uint32_t)_mm_popcnt_u32(m & 0xFFFF);
    __m128i lo = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)esc),
                                  _mm_set_epi64x((long long)(kExpand[b1] + c0 * ones), (long long)kExpand[b0]));
    __m128i hi = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(esc + c01)),
                                  _mm_set_epi64x((long long)(kExpand[b3] + c2 * ones), (long long)kExpand[b2]));
    return _mm256_set_m128i(hi, lo);
}

/* 32 bits -> 32 bytes, 0xFF where the bit is set. */
ZC_T256 static inline __m256i zc256_bits(uint32_t bits) {
    const __m256i rep = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), rep);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

ZC_T256 static __attribute__((always_inline)) inline int merge_avx2_impl(int dt, int mode, size_t n, size_t g0, size_t g1, const uint8_t* rest,
                              const uint8_t* codes, const uint8_t* esc, uint32_t n_esc, uint32_t* pos,
                              uint32_t top, uint8_t* dst) {
    pthread_once(&kExpandOnce, zc_init_expand);
    const __m256i topv = _mm256_set1_epi8((char)top), m7f = _mm256_set1_epi8(0x7F);
    const __m256i m80 = _mm256_set1_epi8((char)0x80);
    size_t gend = g1;
    if (g1 * 64 > n) gend = g1 - 1;
    uint32_t bad = 0, p = *pos;
    for (size_t g = g0; g < gend; g++) {
        for (int h = 0; h < 2; h++) {
            size_t i = 64 * g + 32 * h;
            __m256i c;
            uint32_t m;
            if (mode == ZCF_MODE_F3) {
                const uint8_t* w = codes + 24 * (g - g0) + 4 * h;
                uint32_t w0, w1, w2;
                memcpy(&w0, w, 4); memcpy(&w1, w + 8, 4); memcpy(&w2, w + 16, 4);
                c = _mm256_or_si256(_mm256_and_si256(zc256_bits(w0), _mm256_set1_epi8(1)),
                                    _mm256_or_si256(_mm256_and_si256(zc256_bits(w1), _mm256_set1_epi8(2)),
                                                    _mm256_and_si256(zc256_bits(w2), _mm256_set1_epi8(4))));
                m = w0 & w1 & w2;
            } else {
                c = _mm256_loadu_si256((const __m256i*)(codes + 64 * (g - g0) + 32 * h));
                m = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(c, _mm256_set1_epi8((char)zc_esc_code(mode))));
            }
            /* c > top  <=>  max(c, top) != top */
            bad |= ~(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_max_epu8(c, topv), topv)) & ~m;
            __m256i e = _mm256_sub_epi8(topv, c);
            if (m) {
                uint32_t k = (uint32_t)_mm_popcnt_u32(m);
                if (k > n_esc - p) return -1;
                if (n_esc - p >= k + 16) { /* room for the 16-byte loads */
                    e = _mm256_blendv_epi8(e, zc256_expand(esc + p, m), zc256_bits(m));
                    p += k;
                } else { /* the chunk's last few escapes */
                    uint8_t tmp[32];
                    _mm256_storeu_si256((__m256i*)tmp, e);
                    while (m) { tmp[_tzcnt_u32(m)] = esc[p++]; m &= m - 1; }
                    e = _mm256_loadu_si256((const __m256i*)tmp);
                }
            }
            if (dt == ZCF_DT_FP32) {
                __m256i B0 = _mm256_loadu_si256((const __m256i*)(rest + i));
                __m256i B1 = _mm256_loadu_si256((const __m256i*)(rest + n + i));
                __m256i R2 = _mm256_loadu_si256((const __m256i*)(rest + 2 * n + i));
                __m256i B2 = _mm256_or_si256(_mm256_and_si256(R2, m7f), _mm256_and_si256(_mm256_slli_epi16(e, 7), m80));
                __m256i B3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(e, 1), m7f), _mm256_and_si256(R2, m80));
                __m256i wl01 = _mm256_unpacklo_epi8(B0, B1), wh01 = _mm256_unpackhi_epi8(B0, B1);
                __m256i wl23 = _mm256_unpacklo_epi8(B2, B3), wh23 = _mm256_unpackhi_epi8(B2, B3);
                __m256i d0 = _mm256_unpacklo_epi16(wl01, wl23), d1 = _mm256_unpackhi_epi16(wl01, wl23);
                __m256i d2 = _mm256_unpacklo_epi16(wh01, wh23), d3 = _mm256_unpackhi_epi16(wh01, wh23);
                uint8_t* o = dst + 4 * i;
                _mm256_storeu_si256((__m256i*)o, _mm256_permute2x128_si256(d0, d1, 0x20));
                _mm256_storeu_si256((__m256i*)(o + 32), _mm256_permute2x128_si256(d2, d3, 0x20));
                _mm256_storeu_si256((__m256i*)(o + 64), _mm256_permute2x128_si256(d0, d1, 0x31));
                _mm256_storeu_si256((__m256i*)(o + 96), _mm256_permute2x128_si256(d2, d3, 0x31));
                continue;
            }
            __m256i lo, hi;
            if (dt == ZCF_DT_BF16) {
                __m256i r = _mm256_loadu_si256((const __m256i*)(rest + i));
                lo = _mm256_or_si256(_mm256_and_si256(r, m7f), _mm256_and_si256(_mm256_slli_epi16(e, 7), m80));
                hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(e, 1), m7f), _mm256_and_si256(r, m80));
            } else {
                lo = _mm256_loadu_si256((const __m256i*)(rest + i));
                const uint8_t* hp = rest + n + 24 * g + 4 * h;
                uint32_t h0, h1, h2;
                memcpy(&h0, hp, 4); memcpy(&h1, hp + 8, 4); memcpy(&h2, hp + 16, 4);
                hi = _mm256_or_si256(_mm256_slli_epi16(e, 2),
                                     _mm256_or_si256(_mm256_and_si256(zc256_bits(h0), _mm256_set1_epi8(1)),
                                                     _mm256_or_si256(_mm256_and_si256(zc256_bits(h1), _mm256_set1_epi8(2)),
                                                                     _mm256_and_si256(zc256_bits(h2), m80))));
            }
            __m256i o0 = _mm256_unpacklo_epi8(lo, hi), o1 = _mm256_unpackhi_epi8(lo, hi);
            _mm256_storeu_si256((__m256i*)(dst + 2 * i), _mm256_permute2x128_si256(o0, o1, 0x20));
            _mm256_storeu_si256((__m256i*)(dst + 2 * i + 32), _mm256_permute2x128_si256(o0, o1, 0x31));
        }
    }
    *pos = p;
    if (bad) return -1;
    if (gend < g1) {
        size_t stride = mode == ZCF_MODE_F3 ? 24 : 64;
        return merge_group_scalar(dt, mode, n, gend, rest, codes + (gend - g0) * stride, esc, n_esc,
                                  pos, top, dst);
    }
    return 0;
}

/* Specialise the kernels per (dtype, mode): constant arguments let the
 * compiler drop every per-dtype branch from the inner loops. */
#define ZC_SPECIALISE(T, isa)                                                                     \
    T static uint32_t split_##isa(int dt, int mode, size_t n, const uint8_t* src, uint32_t top,   \
                                  uint8_t* rest, uint8_t* codes, uint8_t* esc) {                  \
        switch (dt * 8 + mode) {                                                                  \
        case ZCF_DT_BF16 * 8 + ZCF_MODE_F3: return split_##isa##_impl(ZCF_DT_BF16, ZCF_MODE_F3, n, src, top, rest, codes, esc); \
        case ZCF_DT_BF16 * 8 + ZCF_MODE_R: return split_##isa##_impl(ZCF_DT_BF16, ZCF_MODE_R, n, src, top, rest, codes, esc);   \
        case ZCF_DT_BF16 * 8 + ZCF_MODE_F2: return split_##isa##_impl(ZCF_DT_BF16, ZCF_MODE_F2, n, src, top, rest, codes, esc); \
        case ZCF_DT_FP16 * 8 + ZCF_MODE_F3: return split_##isa##_impl(ZCF_DT_FP16, ZCF_MODE_F3, n, src, top, rest, codes, esc); \
        case ZCF_DT_FP16 * 8 + ZCF_MODE_R: return split_##isa##_impl(ZCF_DT_FP16, ZCF_MODE_R, n, src, top, rest, codes, esc);   \
        case ZCF_DT_FP16 * 8 + ZCF_MODE_F2: return split_##isa##_impl(ZCF_DT_FP16, ZCF_MODE_F2, n, src, top, rest, codes, esc); \
        case ZCF_DT_FP32 * 8 + ZCF_MODE_F3: return split_##isa##_impl(ZCF_DT_FP32, ZCF_MODE_F3, n, src, top, rest, codes, esc); \
        case ZCF_DT_FP32 * 8 + ZCF_MODE_F2: return split_##isa##_impl(ZCF_DT_FP32, ZCF_MODE_F2, n, src, top, rest, codes, esc); \
        case ZCF_DT_BF16 * 8 + ZCF_MODE_T: return split_##isa##_impl(ZCF_DT_BF16, ZCF_MODE_T, n, src, top, rest, codes, esc); \
        case ZCF_DT_FP16 * 8 + ZCF_MODE_T: return split_##isa##_impl(ZCF_DT_FP16, ZCF_MODE_T, n, src, top, rest, codes, esc); \
        case ZCF_DT_FP32 * 8 + ZCF_MODE_T: return split_##isa##_impl(ZCF_DT_FP32, ZCF_MODE_T, n, src, top, rest, codes, esc); \
        default: return split_##isa##_impl(ZCF_DT_FP32, ZCF_MODE_R, n, src, top, rest, codes, esc);                             \
        }                                                                                         \
    }                                                                                             \
    T static int merge_##isa(int dt, int mode, size_t n, size_t g0, size_t g1, const uint8_t* rest, \
                             const uint8_t* codes, const uint8_t* esc, uint32_t n_esc, uint32_t* pos, \
                             uint32_t top, uint8_t* dst) {                                        \
        switch (dt * 8 + mode) {                                                                  \
        case ZCF_DT_BF16 * 8 + ZCF_MODE_F3: return merge_##isa##_impl(ZCF_DT_BF16, ZCF_MODE_F3, n, g0, g1, rest, codes, esc, n_esc, pos, top, dst); \
        case ZCF_DT_BF16 * 8 + ZCF_MODE_R: return merge_##isa##_impl(ZCF_DT_BF16, ZCF_MODE_R, n, g0, g1, rest, codes, esc, n_esc, pos, top, dst);   \
        case ZCF_DT_BF16 * 8 + ZCF_MODE_F2: return merge_##isa##_impl(ZCF_DT_BF16, ZCF_MODE_F2, n, g0, g1, rest, codes, esc, n_esc, pos, top, dst); \
        case ZCF_DT_FP16 * 8 + ZCF_MODE_F3: return merge_##isa##_impl(ZCF_DT_FP16, ZCF_MODE_F3, n, g0, g1, rest, codes, esc, n_esc, pos, top, dst); \
        case ZCF_DT_FP16 * 8 + ZCF_MODE_R: return merge_##isa##_impl(ZCF_DT_FP16, ZCF_MODE_R, n, g0, g1, rest, codes, esc, n_esc, pos, top, dst);   \
        case ZCF_DT_FP16 * 8 + ZCF_MODE_F2: return merge_##isa##_impl(ZCF_DT_FP16, ZCF_MODE_F2, n, g0, g1, rest, codes, esc, n_esc, pos, top, dst); \
        case ZCF_DT_FP32 * 8 + ZCF_MODE_F3: return merge_##isa##_impl(ZCF_DT_FP32, ZCF_MODE_F3, n, g0, g1, rest, codes, esc, n_esc, pos, top, dst); \
        case ZCF_DT_FP32 * 8 + ZCF_MODE_F2: return merge_##isa##_impl(ZCF_DT_FP32, ZCF_MODE_F2, n, g0, g1, rest, codes, esc, n_esc, pos, top, dst); \
        case ZCF_DT_BF16 * 8 + ZCF_MODE_T: return merge_##isa##_impl(ZCF_DT_BF16, ZCF_MODE_T, n, g0, g1, rest, codes, esc, n_esc, pos, top, dst); \
        case ZCF_DT_FP16 * 8 + ZCF_MODE_T: return merge_##isa##_impl(ZCF_DT_FP16, ZCF_MODE_T, n, g0, g1, rest, codes, esc, n_esc, pos, top, dst); \
        case ZCF_DT_FP32 * 8 + ZCF_MODE_T: return merge_##isa##_impl(ZCF_DT_FP32, ZCF_MODE_T, n, g0, g1, rest, codes, esc, n_esc, pos, top, dst); \
        default: return merge_##isa##_impl(ZCF_DT_FP32, ZCF_MODE_R, n, g0, g1, rest, codes, esc, n_esc, pos, top, dst);                             \
        }                                                                                         \
    }
ZC_SPECIALISE(ZC_T512, avx512)
ZC_SPECIALISE(ZC_T256, avx2)

/* ------------------------------------------------------------------------ */
/* 3c. F2 tiers (FORMAT.md 4.5): symbols <-> primary and secondary planes    */
/* ------------------------------------------------------------------------ */
/* An F2 chunk is split and merged as symbols (s = top - e, 10 = escape) by
 * the kernels above; these functions turn a chunk's symbol bytes into its
 * two primary plane words per group plus the second tier's codes, and back.
 * The second tier passes through a byte buffer (one q per entry, in element
 * order) that is then cut into planes of 64 entries. Compaction: vpcompressb
 * on AVX-512, a loop over set bits elsewhere; expansion: vpexpandb on
 * AVX-512, pshufb (zc256_expand) on AVX2, a bit loop in scalar code. */

/* Group g of n symbols: primary words at prim + 16g; the second tier's q
 * bytes appended at q[*m]. */
static void f2_pack_group_scalar(const uint8_t* sym, size_t n, size_t g, uint8_t* prim, uint8_t* q,
                                 size_t* m) {
    size_t i0 = 64 * g, cnt = n - i0 < 64 ? n - i0 : 64;
    uint64_t w0 = 0, w1 = 0;
    for (size_t j = 0; j < cnt; j++) {
        uint32_t s = sym[i0 + j], p = zcf_f2_primary(s);
        w0 |= (uint64_t)(p & 1) << j;
        w1 |= (uint64_t)(p >> 1) << j;
        if (p == 3) q[(*m)++] = (uint8_t)zcf_f2_secondary(s);
    }
    zc_st64(prim + 16 * g, w0);
    zc_st64(prim + 16 * g + 8, w1);
}

/* The m q bytes as H = ceil(m/64) groups of three plane words; q must have
 * room for 64 bytes past m (zeroed here: the padding bits). */
static void f2_planes_scalar(uint8_t* q, size_t m, uint8_t* sec) {
    memset(q + m, 0, 64);
    for (size_t h = 0; h < zc_groups(m); h++) {
        uint64_t w[3] = {0, 0, 0};
        for (int j = 0; j < 64; j++)
            for (int k = 0; k < 3; k++) w[k] |= (uint64_t)((q[64 * h + j] >> k) & 1) << j;
        for (int k = 0; k < 3; k++) zc_st64(sec + 24 * h + 8 * k, w[k]);
    }
}

/* Encoder: symbols of a chunk of n -> primary planes and secondary planes;
 * q is scratch of n + 64 bytes. Returns m, the second tier's size. */
typedef size_t (*zc_f2pack_fn)(const uint8_t* sym, size_t n, uint8_t* prim, uint8_t* sec, uint8_t* q);
/* Decoder: groups [g0, g1) of the primary planes (prim points at group g0)
 * -> symbols at sym[0..], taking second-tier codes from the secondary
 * planes sec (m entries, validated) from entry *cur on. */
typedef void (*zc_f2unpack_fn)(const uint8_t* prim, const uint8_t* sec, size_t m, size_t n, size_t g0,
                               size_t g1, size_t* cur, uint8_t* sym);

static size_t f2_pack_scalar(const uint8_t* sym, size_t n, uint8_t* prim, uint8_t* sec, uint8_t* q) {
    size_t m = 0;
    for (size_t g = 0; g < zc_groups(n); g++) f2_pack_group_scalar(sym, n, g, prim, q, &m);
    f2_planes_scalar(q, m, sec);
    return m;
}

static void f2_unpack_scalar(const uint8_t* prim, const uint8_t* sec, size_t m, size_t n, size_t g0,
                             size_t g1, size_t* cur, uint8_t* sym) {
    size_t k = *cur;
    for (size_t g = g0; g < g1; g++) {
        const uint8_t* w = prim + 16 * (g - g0);
        uint64_t w0 = zc_ld64(w), w1 = zc_ld64(w + 8);
        size_t i0 = 64 * g, cnt = n - i0 < 64 ? n - i0 : 64;
        for (size_t j = 0; j < cnt; j++) {
            uint32_t p = (uint32_t)(((w0 >> j) & 1) | (((w1 >> j) & 1) << 1)), q = 0;
            if (p == 3) { /* k < m: the caller counted P0 & P1 */
                const uint8_t* v = sec + 24 * (k / 64);
                size_t b = k % 64;
                q = (uint32_t)(((zc_ld64(v) >> b) & 1) | (((zc_ld64(v + 8) >> b) & 1) << 1) |
                               (((zc_ld64(v + 16) >> b) & 1) << 2));
                k++;
            }
            sym[i0 + j - 64 * g0] = (uint8_t)zcf_f2_symbol(p, q);
        }
    }
    (void)m;
    *cur = k;
}

ZC_T512 static size_t f2_pack_avx512(const uint8_t* sym, size_t n, uint8_t* prim, uint8_t* sec,
                                     uint8_t* q) {
    const __m512i one = _mm512_set1_epi8(1), two = _mm512_set1_epi8(2), three = _mm512_set1_epi8(3);
    size_t m = 0, full = n / 64;
    for (size_t g = 0; g < full; g++) {
        __m512i s = _mm512_loadu_si512(sym + 64 * g);
        __m512i p = _mm512_min_epu8(_mm512_sub_epi8(s, one), three); /* s = 0 wraps to 255 -> 3 */
        __mmask64 w0 = _mm512_test_epi8_mask(p, one), w1 = _mm512_test_epi8_mask(p, two), t = w0 & w1;
        zc_st64(prim + 16 * g, w0);
        zc_st64(prim + 16 * g + 8, w1);
        _mm512_storeu_si512(q + m, _mm512_maskz_compress_epi8(t, _mm512_subs_epu8(s, three)));
        m += (size_t)_mm_popcnt_u64(t);
    }
    if (full * 64 < n) f2_pack_group_scalar(sym, n, full, prim, q, &m);
    memset(q + m, 0, 64);
    for (size_t h = 0; h < zc_groups(m); h++) {
        __m512i v = _mm512_loadu_si512(q + 64 * h);
        zc_st64(sec + 24 * h, _mm512_test_epi8_mask(v, one));
        zc_st64(sec + 24 * h + 8, _mm512_test_epi8_mask(v, two));
        zc_st64(sec + 24 * h + 16, _mm512_test_epi8_mask(v, _mm512_set1_epi8(4)));
    }
    return m;
}

/* Secondary group h as 64 q bytes (zeros past the last group). */
ZC_T512 static inline __m512i f2_sec_bytes(const uint8_t* sec, size_t m, size_t h) {
    if (h >= zc_groups(m)) return _mm512_setzero_si512();
    const uint8_t* v = sec + 24 * h;
    return _mm512_ternarylogic_epi32(_mm512_maskz_mov_epi8(zc_ld64(v), _mm512_set1_epi8(1)),
                                     _mm512_maskz_mov_epi8(zc_ld64(v + 8), _mm512_set1_epi8(2)),
                                     _mm512_maskz_mov_epi8(zc_ld64(v + 16), _mm512_set1_epi8(4)), 0xFE);
}

ZC_T512 static void f2_unpack_avx512(const uint8_t* prim, const uint8_t* sec, size_t m, size_t n,
                                     size_t g0, size_t g1, size_t* cur, uint8_t* sym) {
    pthread_once(&kIdxOnce, zc_init_idx);
    const __m512i one = _mm512_set1_epi8(1), two = _mm512_set1_epi8(2), three = _mm512_set1_epi8(3);
    const __m512i iota = _mm512_loadu_si512(kIota);
    size_t gend = g1 * 64 > n ? g1 - 1 : g1, k = *cur, h = k / 64;
    /* q bytes of secondary groups h (qa) and h + 1 (qb), kept in registers:
     * entries k.. are bytes k - 64h.. of qa:qb, one vpermt2b away. */
    __m512i qa = f2_sec_bytes(sec, m, h), qb = f2_sec_bytes(sec, m, h + 1);
    for (size_t g = g0; g < gend; g++) {
        const uint8_t* w = prim + 16 * (g - g0);
        __mmask64 w0 = zc_ld64(w), w1 = zc_ld64(w + 8), t = w0 & w1;
        __m512i s = _mm512_add_epi8(
            _mm512_or_si512(_mm512_maskz_mov_epi8(w0, one), _mm512_maskz_mov_epi8(w1, two)), one);
        if (t) {
            __m512i idx = _mm512_add_epi8(iota, _mm512_set1_epi8((char)(k - 64 * h)));
            __m512i qv = _mm512_maskz_expand_epi8(t, _mm512_permutex2var_epi8(qa, idx, qb));
            __mmask64 nz = _mm512_test_epi8_mask(qv, qv);
            s = _mm512_mask_mov_epi8(s, t, _mm512_maskz_add_epi8(nz, qv, three)); /* q=0 -> s=0 */
            k += (size_t)_mm_popcnt_u64(t);
            if (k / 64 != h) { /* at most one group per 64 elements */
                h++;
                qa = qb;
                qb = f2_sec_bytes(sec, m, h + 1);
            }
        }
        _mm512_storeu_si512(sym + 64 * (g - g0), s);
    }
    *cur = k;
    if (gend < g1) f2_unpack_scalar(prim + 16 * (gend - g0), sec, m, n, gend, g1, cur, sym + 64 * (gend - g0));
}

/* AVX2: the plane words come from movemask; for want of a byte compress
 * instruction the second tier is compacted by a loop over the set bits of
 * P0 & P1 (about 15 of 64 on Gaussian data). */
ZC_T256 static inline uint32_t f2_bit_mask256(__m256i v, int bit) { /* bit `bit` of each byte */
    return (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(v, 7 - bit));
}

ZC_T256 static size_t f2_pack_avx2(const uint8_t* sym, size_t n, uint8_t* prim, uint8_t* sec,
                                   uint8_t* q) {
    const __m256i one = _mm256_set1_epi8(1), three = _mm256_set1_epi8(3);
    size_t m = 0, full = n / 64;
    for (size_t g = 0; g < full; g++) {
        const uint8_t* sg = sym + 64 * g;
        uint64_t w0 = 0, w1 = 0;
        for (int h = 0; h < 2; h++) {
            __m256i s = _mm256_loadu_si256((const __m256i*)(sg + 32 * h));
            __m256i p = _mm256_min_epu8(_mm256_sub_epi8(s, one), three); /* s = 0 wraps -> 3 */
            w0 |= (uint64_t)f2_bit_mask256(p, 0) << (32 * h);
            w1 |= (uint64_t)f2_bit_mask256(p, 1) << (32 * h);
        }
        zc_st64(prim + 16 * g, w0);
        zc_st64(prim + 16 * g + 8, w1);
        for (uint64_t t = w0 & w1; t; t &= t - 1) q[m++] = (uint8_t)zcf_f2_secondary(sg[_tzcnt_u64(t)]);
    }
    if (full * 64 < n) f2_pack_group_scalar(sym, n, full, prim, q, &m);
    memset(q + m, 0, 64);
    for (size_t h = 0; h < zc_groups(m); h++) {
        __m256i lo = _mm256_loadu_si256((const __m256i*)(q + 64 * h));
        __m256i hi = _mm256_loadu_si256((const __m256i*)(q + 64 * h + 32));
        for (int k = 0; k < 3; k++)
            zc_st64(sec + 24 * h + 8 * k, f2_bit_mask256(lo, k) | (uint64_t)f2_bit_mask256(hi, k) << 32);
    }
    return m;
}

/* Secondary group h as q bytes at out[0..64) (zeros past the last group). */
ZC_T256 static inline void f2_sec_bytes256(const uint8_t* sec, size_t m, size_t h, uint8_t* out) {
    for (int half = 0; half < 2; half++) {
        __m256i v = _mm256_setzero_si256();
        if (h < zc_groups(m))
            for (int k = 0; k < 3; k++)
                v = _mm256_or_si256(v, _mm256_and_si256(zc256_bits((uint32_t)(zc_ld64(sec + 24 * h + 8 * k) >> (32 * half))),
                                                        _mm256_set1_epi8((char)(1 << k))));
        _mm256_storeu_si256((__m256i*)(out + 32 * half), v);
    }
}

ZC_T256 static void f2_unpack_avx2(const uint8_t* prim, const uint8_t* sec, size_t m, size_t n,
                                   size_t g0, size_t g1, size_t* cur, uint8_t* sym) {
    pthread_once(&kExpandOnce, zc_init_expand);
    const __m256i one = _mm256_set1_epi8(1), two = _mm256_set1_epi8(2), three = _mm256_set1_epi8(3);
    size_t gend = g1 * 64 > n ? g1 - 1 : g1, k = *cur, h = k / 64;
    /* q bytes of secondary groups h and h + 1; zc256_expand reads at most
     * 32 bytes past k - 64h < 64 */
    uint8_t win[128];
    f2_sec_bytes256(sec, m, h, win);
    f2_sec_bytes256(sec, m, h + 1, win + 64);
    for (size_t g = g0; g < gend; g++) {
        const uint8_t* w = prim + 16 * (g - g0);
        uint64_t w0 = zc_ld64(w), w1 = zc_ld64(w + 8);
        for (int half = 0; half < 2; half++) {
            uint32_t b0 = (uint32_t)(w0 >> (32 * half)), b1 = (uint32_t)(w1 >> (32 * half)), t = b0 & b1;
            __m256i s = _mm256_add_epi8(_mm256_or_si256(_mm256_and_si256(zc256_bits(b0), one),
                                                        _mm256_and_si256(zc256_bits(b1), two)), one);
            if (t) {
                __m256i q = zc256_expand(win + (k - 64 * h), t);
                __m256i tq = _mm256_andnot_si256(_mm256_cmpeq_epi8(q, _mm256_setzero_si256()),
                                                 _mm256_add_epi8(q, three)); /* q = 0 -> s = 0 */
                s = _mm256_blendv_epi8(s, tq, zc256_bits(t));
                k += (size_t)_mm_popcnt_u32(t);
                if (k / 64 != h) { /* at most one group per 32 elements */
                    h++;
                    memcpy(win, win + 64, 64);
                    f2_sec_bytes256(sec, m, h + 1, win + 64);
                }
            }
            _mm256_storeu_si256((__m256i*)(sym + 64 * (g - g0) + 32 * half), s);
        }
    }
    *cur = k;
    if (gend < g1) f2_unpack_scalar(prim + 16 * (gend - g0), sec, m, n, gend, g1, cur, sym + 64 * (gend - g0));
}

/* ------------------------------------------------------------------------ */
/* 3d. T tiers (FORMAT.md 4.6): symbols <-> ranks <-> three tiers of planes  */
/* ------------------------------------------------------------------------ */
/* A T chunk is split and merged as window positions (d = top - e, 13 =
 * escape) by the kernels of 3a/3b, like R and F2. Here a chunk's positions
 * become ranks (the shape's LUT) and the ranks three tiers: a tier pass
 * writes min(v, 3) as two plane words per 64 entries and compacts v - 3 of
 * the entries whose code is 3 into the next tier's bytes; the last tier's
 * bytes (0..7) become three plane words per 64 entries. Decoding walks the
 * tier-1 groups with a cursor into each lower tier: the codes of the next 64
 * entries of a tier come from two plane words shifted together, and go back
 * to their elements through vpexpandb (AVX-512), pshufb expansion (AVX2,
 * below) or a bit loop (scalar). */

/* One tier pass over m bytes (through lut if not NULL): plane words at
 * planes (16 bytes per 64 entries, padding bits 0), continuing entries'
 * v - 3 appended at next (room for m + 64). Returns their number. */
typedef size_t (*zc_tpass_fn)(const uint8_t* in, size_t m, const uint8_t* lut, uint8_t* planes, uint8_t* next);
/* Decoder: tier-1 groups [g0, g1) (t1 points at group g0) -> window
 * positions at sym[0..], taking tier-2 and tier-3 codes from entry *k2 and
 * *k3 on (h2, h3: their plane groups, validated). */
typedef void (*zc_tunpack_fn)(const uint8_t* t1, const uint8_t* t2, size_t h2, const uint8_t* t3, size_t h3,
                              const uint8_t* inv, size_t n, size_t g0, size_t g1, size_t* k2, size_t* k3,
                              uint8_t* sym);

static size_t t_pass_group_scalar(const uint8_t* in, size_t m, size_t g, const uint8_t* lut, uint8_t* planes,
                                  uint8_t* next, size_t c) {
    size_t i0 = 64 * g, cnt = m - i0 < 64 ? m - i0 : 64;
    uint64_t w0 = 0, w1 = 0;
    for (size_t j = 0; j < cnt; j++) {
        uint32_t v = lut ? lut[in[i0 + j]] : in[i0 + j], p = v < 3 ? v : 3;
        w0 |= (uint64_t)(p & 1) << j;
        w1 |= (uint64_t)(p >> 1) << j;
        if (p == 3) next[c++] = (uint8_t)(v - 3);
    }
    zc_st64(planes + 16 * g, w0);
    zc_st64(planes + 16 * g + 8, w1);
    return c;
}

static size_t t_pass_scalar(const uint8_t* in, size_t m, const uint8_t* lut, uint8_t* planes, uint8_t* next) {
    size_t c = 0;
    for (size_t g = 0; g < zc_groups(m); g++) c = t_pass_group_scalar(in, m, g, lut, planes, next, c);
    return c;
}

ZC_T512 static size_t t_pass_avx512(const uint8_t* in, size_t m, const uint8_t* lut, uint8_t* planes,
                                    uint8_t* next) {
    const __m512i one = _mm512_set1_epi8(1), two = _mm512_set1_epi8(2), three = _mm512_set1_epi8(3);
    __m512i lv = _mm512_setzero_si512();
    if (lut) lv = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)lut));
    size_t c = 0, full = m / 64;
    for (size_t g = 0; g < full; g++) {
        __m512i v = _mm512_loadu_si512(in + 64 * g);
        if (lut) v = _mm512_permutexvar_epi8(v, lv); /* v <= 13 */
        __m512i p = _mm512_min_epu8(v, three);
        __mmask64 w0 = _mm512_test_epi8_mask(p, one), w1 = _mm512_test_epi8_mask(p, two), t = w0 & w1;
        zc_st64(planes + 16 * g, w0);
        zc_st64(planes + 16 * g + 8, w1);
        _mm512_storeu_si512(next + c, _mm512_maskz_compress_epi8(t, _mm512_sub_epi8(v, three)));
        c += (size_t)_mm_popcnt_u64(t);
    }
    if (full * 64 < m) c = t_pass_group_scalar(in, m, full, lut, planes, next, c);
    return c;
}

/* Bits of entry k of a tier with `words` plane words per group. */
static inline uint32_t t_entry(const uint8_t* planes, int words, size_t k) {
    const uint8_t* w = planes + 8 * (size_t)words * (k / 64);
    uint32_t v = 0;
    for (int b = 0; b < words; b++) v |= (uint32_t)((zc_ld64(w + 8 * b) >> (k % 64)) & 1) << b;
    return v;
}

static void t_unpack_scalar(const uint8_t* t1, const uint8_t* t2, size_t h2, const uint8_t* t3, size_t h3,
                            const uint8_t* inv, size_t n, size_t g0, size_t g1, size_t* k2, size_t* k3,
                            uint8_t* sym) {
    size_t c2 = *k2, c3 = *k3; /* entries < m2, m3: the caller counted the code-3 bits */
    for (size_t g = g0; g < g1; g++) {
        const uint8_t* w = t1 + 16 * (g - g0);
        uint64_t w0 = zc_ld64(w), w1 = zc_ld64(w + 8);
        size_t i0 = 64 * g, cnt = n - i0 < 64 ? n - i0 : 64;
        for (size_t j = 0; j < cnt; j++) {
            uint32_t r = (uint32_t)(((w0 >> j) & 1) | (((w1 >> j) & 1) << 1));
            if (r == 3) {
                uint32_t p2 = t_entry(t2, 2, c2++);
                r = 3 + p2;
                if (p2 == 3) r = 6 + t_entry(t3, 3, c3++);
            }
            sym[i0 + j - 64 * g0] = inv[r];
        }
    }
    (void)h2; (void)h3;
    *k2 = c2;
    *k3 = c3;
}

/* The last tier: m bytes (0..7; q has room for m + 64, zeroed here) as
 * three plane words per 64 entries. */
ZC_T512 static void t_planes3_avx512(uint8_t* q, size_t m, uint8_t* out) {
    memset(q + m, 0, 64);
    for (size_t h = 0; h < zc_groups(m); h++) {
        __m512i v = _mm512_loadu_si512(q + 64 * h);
        zc_st64(out + 24 * h, _mm512_test_epi8_mask(v, _mm512_set1_epi8(1)));
        zc_st64(out + 24 * h + 8, _mm512_test_epi8_mask(v, _mm512_set1_epi8(2)));
        zc_st64(out + 24 * h + 16, _mm512_test_epi8_mask(v, _mm512_set1_epi8(4)));
    }
}

/* AVX2 tiers. Without vpcompressb, a tier pass compacts the continuing
 * entries 8 at a time: a pshufb pattern per 8-bit mask (kCompress) gathers
 * the selected bytes to the front and an 8-byte store lands them at the
 * cursor, the next store overwriting what lies past them. Decoding spreads
 * the next entries of a lower tier over the code-3 positions with
 * zc256_expand, from a window holding that tier's current and next plane
 * groups as bytes; the spread codes are zero elsewhere, so a rank is the
 * sum p1 + p2 + p3 of what each tier put there. No pdep or pext: they are
 * microcoded, hundreds of cycles, on the AMD Zen 2 cores this path serves. */

/* kCompress[b]: pshufb pattern that gathers the bytes at the set bit
 * positions of b to the front (what follows them is unspecified). */
static uint64_t kCompress[256];
static pthread_once_t kCompressOnce = PTHREAD_ONCE_INIT;
static void zc_init_compress(void) {
    for (int b = 0; b < 256; b++) {
        uint64_t v = 0;
        for (int j = 0, k = 0; j < 8; j++)
            if (b >> j & 1) v |= (uint64_t)j << (8 * k++);
        kCompress[b] = v;
    }
}

/* Append the bytes of x (16 of them) at the set bits of mask (16 bits) to
 * out + c; returns the new c. Writes up to 8 bytes past it. */
ZC_T256 static inline size_t zc128_compact(__m128i x, uint32_t mask, uint8_t* out, size_t c) {
    uint32_t lo = mask & 0xFF, hi = (mask >> 8) & 0xFF;
    __m128i a = _mm_shuffle_epi8(x, _mm_cvtsi64_si128((long long)kCompress[lo]));
    /* | 8: the same pattern on the upper 8 bytes */
    __m128i b = _mm_shuffle_epi8(x, _mm_cvtsi64_si128((long long)(kCompress[hi] | 0x0808080808080808ull)));
    _mm_storel_epi64((__m128i*)(out + c), a);
    c += (size_t)_mm_popcnt_u32(lo);
    _mm_storel_epi64((__m128i*)(out + c), b);
    return c + (size_t)_mm_popcnt_u32(hi);
}

ZC_T256 static size_t t_pass_avx2(const uint8_t* in, size_t m, const uint8_t* lut, uint8_t* planes,
                                  uint8_t* next) {
    pthread_once(&kCompressOnce, zc_init_compress);
    const __m256i three = _mm256_set1_epi8(3);
    __m256i lv = _mm256_setzero_si256();
    if (lut) lv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)lut));
    size_t c = 0, full = m / 64;
    for (size_t g = 0; g < full; g++) {
        __m256i v0 = _mm256_loadu_si256((const __m256i*)(in + 64 * g));
        __m256i v1 = _mm256_loadu_si256((const __m256i*)(in + 64 * g + 32));
        if (lut) { /* in <= 13: the index never has its high bit set */
            v0 = _mm256_shuffle_epi8(lv, v0);
            v1 = _mm256_shuffle_epi8(lv, v1);
        }
        __m256i p0 = _mm256_min_epu8(v0, three), p1 = _mm256_min_epu8(v1, three);
        uint64_t w0 = (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(p0, 7)) |
                      (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(p1, 7)) << 32;
        uint64_t w1 = (uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(p0, 6)) |
                      (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_slli_epi16(p1, 6)) << 32;
        uint64_t t = w0 & w1;
        zc_st64(planes + 16 * g, w0);
        zc_st64(planes + 16 * g + 8, w1);
        __m256i d0 = _mm256_sub_epi8(v0, three), d1 = _mm256_sub_epi8(v1, three);
        c = zc128_compact(_mm256_castsi256_si128(d0), (uint32_t)t & 0xFFFF, next, c);
        c = zc128_compact(_mm256_extracti128_si256(d0, 1), (uint32_t)(t >> 16) & 0xFFFF, next, c);
        c = zc128_compact(_mm256_castsi256_si128(d1), (uint32_t)(t >> 32) & 0xFFFF, next, c);
        c = zc128_compact(_mm256_extracti128_si256(d1, 1), (uint32_t)(t >> 48), next, c);
    }
    if (full * 64 < m) c = t_pass_group_scalar(in, m, full, lut, planes, next, c);
    return c;
}

/* The last tier: m bytes (0..7; q has room for m + 64, zeroed here) as
 * three plane words per 64 entries. */
ZC_T256 static void t_planes3_avx2(uint8_t* q, size_t m, uint8_t* out) {
    memset(q + m, 0, 64);
    for (size_t h = 0; h < zc_groups(m); h++) {
        __m256i lo = _mm256_loadu_si256((const __m256i*)(q + 64 * h));
        __m256i hi = _mm256_loadu_si256((const __m256i*)(q + 64 * h + 32));
        for (int k = 0; k < 3; k++)
            zc_st64(out + 24 * h + 8 * k, f2_bit_mask256(lo, k) | (uint64_t)f2_bit_mask256(hi, k) << 32);
    }
}

/* Plane group h of a tier with `words` plane words per group as 64 code
 * bytes at out (zeros past its hn groups). */
ZC_T256 static inline void t_group_bytes256(const uint8_t* planes, int words, size_t hn, size_t h, uint8_t* out) {
    for (int half = 0; half < 2; half++) {
        __m256i v = _mm256_setzero_si256();
        if (h < hn)
            for (int w = 0; w < words; w++) {
                uint32_t b = (uint32_t)(zc_ld64(planes + 8 * (size_t)words * h + 8 * w) >> (32 * half));
                v = _mm256_or_si256(v, _mm256_and_si256(zc256_bits(b), _mm256_set1_epi8((char)(1 << w))));
            }
        _mm256_storeu_si256((__m256i*)(out + 32 * half), v);
    }
}

/* Entries [c, c + cnt) of a tier (hn plane groups) as code bytes: entry k
 * at out[k - 64 * (c / 64)], followed by 32 zero bytes (what zc256_expand
 * may read past the last entry). out holds cnt + 64 + 32 bytes. */
ZC_T256 static void t_tier_bytes256(const uint8_t* planes, int words, size_t hn, size_t c, size_t cnt, uint8_t* out) {
    size_t h0 = c / 64, h1 = cnt ? (c + cnt - 1) / 64 + 1 : h0;
    for (size_t h = h0; h < h1; h++) t_group_bytes256(planes, words, hn, h, out + 64 * (h - h0));
    _mm256_storeu_si256((__m256i*)(out + 64 * (h1 - h0)), _mm256_setzero_si256());
}

/* How many of tier-2 entries [c, c + cnt) have code 3 (continue to tier 3). */
ZC_T256 static size_t t_count3(const uint8_t* t2, size_t c, size_t cnt) {
    size_t total = 0, end = c + cnt;
    for (size_t h = c / 64; 64 * h < end; h++) {
        uint64_t w = zc_ld64(t2 + 16 * h) & zc_ld64(t2 + 16 * h + 8);
        size_t lo = c > 64 * h ? c - 64 * h : 0, hi = end - 64 * h < 64 ? end - 64 * h : 64;
        uint64_t keep = (hi == 64 ? ~0ull : (1ull << hi) - 1) & (~0ull << lo);
        total += (size_t)_mm_popcnt_u64(w & keep);
    }
    return total;
}

ZC_T256 static void t_unpack_avx2(const uint8_t* t1, const uint8_t* t2, size_t h2, const uint8_t* t3, size_t h3,
                                  const uint8_t* inv, size_t n, size_t g0, size_t g1, size_t* k2, size_t* k3,
                                  uint8_t* sym) {
    pthread_once(&kExpandOnce, zc_init_expand);
    const __m256i one = _mm256_set1_epi8(1), two = _mm256_set1_epi8(2), three = _mm256_set1_epi8(3);
    const __m256i iv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)inv));
    size_t gend = g1 * 64 > n ? g1 - 1 : g1, c2 = *k2, c3 = *k3;
    /* The segment's tier-2 and tier-3 entries, counted from the planes, go
     * to bytes before the main loop: its loads then never wait on a store
     * just made (a window refilled as the cursor moves on did, once per 64
     * entries). */
    size_t m2 = zc_count3_popcnt(t1, gend - g0);
    size_t m3 = t_count3(t2, c2, m2);
    uint8_t b2[ZC_SEG + 128], b3[ZC_SEG + 128];
    t_tier_bytes256(t2, 2, h2, c2, m2, b2);
    t_tier_bytes256(t3, 3, h3, c3, m3, b3);
    uint8_t* q2 = b2 + c2 % 64;
    const uint8_t* q3 = b3 + c3 % 64;
    /* tier 3 into tier 2 first, in the compact order of the tier-2
     * entries: code 3 + p3 where p2 = 3, the rest as they are; entries past
     * m2 (the next segment's) are left alone */
    for (size_t k = 0; k < m2; k += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i*)(q2 + k));
        uint32_t live = m2 - k >= 32 ? ~0u : (1u << (m2 - k)) - 1;
        uint32_t u = (uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(v, three)) & live;
        if (u) {
            _mm256_storeu_si256((__m256i*)(q2 + k), _mm256_add_epi8(v, zc256_expand(q3, u)));
            q3 += _mm_popcnt_u32(u);
        }
    }
    for (size_t g = g0; g < gend; g++) {
        const uint8_t* w = t1 + 16 * (g - g0);
        uint64_t w0 = zc_ld64(w), w1 = zc_ld64(w + 8);
        for (int half = 0; half < 2; half++) {
            uint32_t b0 = (uint32_t)(w0 >> (32 * half)), b1 = (uint32_t)(w1 >> (32 * half)), t = b0 & b1;
            __m256i r = _mm256_or_si256(_mm256_and_si256(zc256_bits(b0), one), _mm256_and_si256(zc256_bits(b1), two));
            if (t) { /* p1 = 3 there: 3 + p2, or 6 + p3 */
                r = _mm256_add_epi8(r, zc256_expand(q2, t));
                q2 += _mm_popcnt_u32(t);
            }
            _mm256_storeu_si256((__m256i*)(sym + 64 * (g - g0) + 32 * half), _mm256_shuffle_epi8(iv, r));
        }
    }
    *k2 = c2 + m2;
    *k3 = c3 + m3;
    if (gend < g1) t_unpack_scalar(t1 + 16 * (gend - g0), t2, h2, t3, h3, inv, n, gend, g1, k2, k3, sym + 64 * (gend - g0));
}

/* AVX-512 tiers, decoding as the AVX2 kernel above does: the segment's
 * tier-2 and tier-3 entries go to bytes first (ranks: 3 + p2, 6 + p3), tier
 * 3 is folded into tier 2, and the main loop takes one vpexpandb per 64
 * elements, its only serial dependence the cursor's popcount. */

/* Entries [c, c + cnt) of a tier (hn plane groups) as base + code bytes:
 * entry k at out[k - 64 * (c / 64)], followed by 64 zero bytes. out holds
 * cnt + 64 + 64 bytes. */
ZC_T512 static inline void t_tier_bytes512(const uint8_t* planes, int words, size_t hn, size_t c, size_t cnt,
                                           char base, uint8_t* out) {
    size_t h0 = c / 64, h1 = cnt ? (c + cnt - 1) / 64 + 1 : h0;
    const __m512i bv = _mm512_set1_epi8(base);
    for (size_t h = h0; h < h1; h++) {
        __m512i v = bv;
        if (h < hn) {
            const uint8_t* w = planes + 8 * (size_t)words * h;
            v = _mm512_mask_add_epi8(v, zc_ld64(w), v, _mm512_set1_epi8(1));
            v = _mm512_mask_add_epi8(v, zc_ld64(w + 8), v, _mm512_set1_epi8(2));
            if (words == 3) v = _mm512_mask_add_epi8(v, zc_ld64(w + 16), v, _mm512_set1_epi8(4));
        }
        _mm512_storeu_si512(out + 64 * (h - h0), v);
    }
    _mm512_storeu_si512(out + 64 * (h1 - h0), _mm512_setzero_si512());
}

ZC_T512 static void t_unpack_avx512(const uint8_t* t1, const uint8_t* t2, size_t h2, const uint8_t* t3,
                                    size_t h3, const uint8_t* inv, size_t n, size_t g0, size_t g1, size_t* k2,
                                    size_t* k3, uint8_t* sym) {
    const __m512i one = _mm512_set1_epi8(1), two = _mm512_set1_epi8(2), six = _mm512_set1_epi8(6);
    const __m512i iv = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)inv));
    size_t gend = g1 * 64 > n ? g1 - 1 : g1, c2 = *k2, c3 = *k3;
    size_t m2 = zc_count3_popcnt(t1, gend - g0);
    size_t m3 = t_count3(t2, c2, m2);
    uint8_t b2[ZC_SEG + 128], b3[ZC_SEG + 128];
    t_tier_bytes512(t2, 2, h2, c2, m2, 3, b2);
    t_tier_bytes512(t3, 3, h3, c3, m3, 6, b3);
    uint8_t* q2 = b2 + c2 % 64;
    const uint8_t* q3 = b3 + c3 % 64;
    /* tier 3 into tier 2: rank 6 + p3 where 3 + p2 = 6; entries past m2
     * (the next segment's) are left alone */
    for (size_t k = 0; k < m2; k += 64) {
        __m512i v = _mm512_loadu_si512(q2 + k);
        __mmask64 live = m2 - k >= 64 ? ~0ull : (1ull << (m2 - k)) - 1;
        __mmask64 u = _mm512_mask_cmpeq_epi8_mask(live, v, six);
        if (u) {
            _mm512_storeu_si512(q2 + k, _mm512_mask_expand_epi8(v, u, _mm512_loadu_si512(q3)));
            q3 += _mm_popcnt_u64(u);
        }
    }
    for (size_t g = g0; g < gend; g++) {
        const uint8_t* w = t1 + 16 * (g - g0);
        __mmask64 w0 = zc_ld64(w), w1 = zc_ld64(w + 8), t = w0 & w1;
        __m512i r = _mm512_maskz_mov_epi8(w0, one);
        r = _mm512_mask_add_epi8(r, w1, r, two);
        if (t) { /* p1 = 3 there: the folded rank */
            r = _mm512_mask_expand_epi8(r, t, _mm512_loadu_si512(q2));
            q2 += _mm_popcnt_u64(t);
        }
        _mm512_storeu_si512(sym + 64 * (g - g0), _mm512_permutexvar_epi8(r, iv));
    }
    *k2 = c2 + m2;
    *k3 = c3 + m3;
    if (gend < g1) t_unpack_scalar(t1 + 16 * (gend - g0), t2, h2, t3, h3, inv, n, gend, g1, k2, k3, sym + 64 * (gend - g0));
}

/* The shape's LUTs: window position -> rank (enc) and rank -> position (dec). */
static void t_luts(uint32_t shape, uint8_t enc[16], uint8_t dec[16]) {
    for (uint32_t v = 0; v < 16; v++) {
        enc[v] = (uint8_t)(v <= ZCF_T_ESC ? zcf_t_rank(shape, v) : ZCF_T_ESC);
        dec[v] = (uint8_t)(v <= ZCF_T_ESC ? zcf_t_pos(shape, v) : ZCF_T_ESC);
    }
}

/* ------------------------------------------------------------------------ */
/* Run-time dispatch                                                         */
/* ------------------------------------------------------------------------ */

typedef struct {
    zc_split_fn split;
    zc_merge_fn merge;
    zc_f2pack_fn f2pack;
    zc_f2unpack_fn f2unpack;
    zc_tpass_fn tpass;
    zc_tunpack_fn tunpack;
    void (*tplanes3)(uint8_t* q, size_t m, uint8_t* out); /* T's last tier -> planes */
    /* the 1024-element sample of T and R: returns s8, fills the bins around s8 / 8 */
    int (*sample)(int dt, const uint8_t* src, size_t n, uint32_t h[ZCF_T_BINS], int* same);
    int rans512; /* rANS lanes in AVX-512 (gathers, scatters)  */
    size_t (*count3)(const uint8_t* planes, size_t groups); /* entries of code 3 in 2-plane groups */
} zc_kernels_t;

static int zc_cpu_has(zipcclSimd_t s) {
    __builtin_cpu_init();
    switch (s) {
    case zipcclSimdScalar: return 1;
    case zipcclSimdAvx2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2") &&
               __builtin_cpu_supports("popcnt");
    case zipcclSimdAvx512:
        return zc_cpu_has(zipcclSimdAvx2) && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2");
    default: return 0;
    }
}

zipcclSimd_t zipcclSimdDetect(void) {
    if (zc_cpu_has(zipcclSimdAvx512)) return zipcclSimdAvx512;
    if (zc_cpu_has(zipcclSimdAvx2)) return zipcclSimdAvx2;
    return zipcclSimdScalar;
}

/* The T and R encoders' sample (FORMAT.md §7 items 2 and 3). */
static int zc_sample(int dt, const uint8_t* src, size_t n, uint32_t h[ZCF_T_BINS], int* same);
ZC_T512 static int zc_sample_avx512(int dt, const uint8_t* src, size_t n, uint32_t h[ZCF_T_BINS], int* same);
ZC_T256 static int zc_sample_avx2(int dt, const uint8_t* src, size_t n, uint32_t h[ZCF_T_BINS], int* same);

static zipcclResult_t zc_pick(const zipcclCodecParams_t* params, zc_kernels_t* k) {
    zipcclSimd_t s = params ? params->simd : zipcclSimdAuto;
    if (s == zipcclSimdAuto) s = zipcclSimdDetect();
    if (s < zipcclSimdScalar || s > zipcclSimdAvx512)
        return zipcclSetError(zipcclInvalidArgument, "unknown SIMD path %d", (int)s);
    if (!zc_cpu_has(s))
        return zipcclSetError(zipcclUnsupported, "this CPU lacks the %s instructions",
                              s == zipcclSimdAvx2 ? "AVX2" : "AVX-512 (F/BW/VL/VBMI/VBMI2)");
    k->rans512 = s == zipcclSimdAvx512;
    k->count3 = s == zipcclSimdScalar ? zc_count3_scalar : zc_count3_popcnt;
    k->f2pack = s == zipcclSimdAvx512 ? f2_pack_avx512 : s == zipcclSimdAvx2 ? f2_pack_avx2 : f2_pack_scalar;
    k->f2unpack = s == zipcclSimdAvx512 ? f2_unpack_avx512 : s == zipcclSimdAvx2 ? f2_unpack_avx2 : f2_unpack_scalar;
    k->tpass = s == zipcclSimdAvx512 ? t_pass_avx512 : s == zipcclSimdAvx2 ? t_pass_avx2 : t_pass_scalar;
    k->tunpack = s == zipcclSimdAvx512 ? t_unpack_avx512 : s == zipcclSimdAvx2 ? t_unpack_avx2 : t_unpack_scalar;
    k->tplanes3 = s == zipcclSimdAvx512 ? t_planes3_avx512 : s == zipcclSimdAvx2 ? t_planes3_avx2 : f2_planes_scalar;
    k->sample = s == zipcclSimdAvx512 ? zc_sample_avx512 : s == zipcclSimdAvx2 ? zc_sample_avx2 : zc_sample;
    if (s == zipcclSimdAvx512) { k->split = split_avx512; k->merge = merge_avx512; }
    else if (s == zipcclSimdAvx2) { k->split = split_avx2; k->merge = merge_avx2; }
    else { k->split = split_scalar; k->merge = merge_scalar; }
    return zipcclSuccess;
}

/* ------------------------------------------------------------------------ */
/* 4. rANS lanes (FORMAT.md 4.4)                                            */
/* ------------------------------------------------------------------------ */

/* Decode table entry per slot: f (bits 0..12), slot - cum[s] (13..24), s (28..31). */
static uint32_t kRansLut[ZIPCCL_RANS_NTABLES][ZCF_R_M];
static uint16_t kRansCum[ZIPCCL_RANS_NTABLES][ZIPCCL_RANS_NSYM];
static uint64_t kRansRcp[ZIPCCL_RANS_NTABLES][ZIPCCL_RANS_NSYM];
static pthread_once_t kRansOnce = PTHREAD_ONCE_INIT;

static void zc_rans_init(void) {
    for (int t = 0; t < ZIPCCL_RANS_NTABLES; t++) {
        uint32_t cum = 0;
        for (int s = 0; s < ZIPCCL_RANS_NSYM; s++) {
            uint32_t f = zipccl_rans_freq[t][s];
            kRansCum[t][s] = (uint16_t)cum;
            /* x < f<<20 after renormalisation and f <= 4096, so
             * (x * ceil(2^44/f)) >> 44 == x / f exactly (and fits 64 bits) */
            kRansRcp[t][s] = ((1ull << 44) + f - 1) / f;
            for (uint32_t k = 0; k < f; k++) kRansLut[t][cum + k] = f | (k << 13) | ((uint32_t)s << 28);
            cum += f;
        }
    }
}

/* One encoding step of lane l (FORMAT.md 4.4, reference encoder): push the
 * low word unconditionally and keep it only when renormalising (no branch). */
static inline void rans_put(uint32_t* x, uint32_t* at, uint8_t* buf, uint32_t s, const uint16_t* F,
                            const uint16_t* C, const uint64_t* R) {
    uint32_t f = F[s], v = *x;
    uint32_t push = v >= (f << 20);
    zcf_st16(buf + *at - 2, (uint16_t)v);
    *at -= 2 * push;
    v = push ? v >> 16 : v;
    uint32_t q = (uint32_t)(((uint64_t)v * R[s]) >> 44);
    *x = (q << 12) + (v - q * f) + C[s];
}

/* Full rounds [0, k1) in reverse on 2 x 16 lanes: f and cum come from vpermd
 * on the 16-symbol table, x / f from a double reciprocal (x < f << 20, so
 * q < 2^20 and x*(1/f) is within 2^-32 of x/f, whose fraction is 0 or at
 * least 1/f >= 2^-12: adding 2^-14 and truncating is exact), renormalisation
 * words leave through a masked scatter of (x << 16) to at - 4, which only
 * clobbers the two bytes below, written later by the next push or the state. */
ZC_T512 static void rans_encode_avx512(const uint8_t* sym, size_t k1, int t,
                                       uint8_t lane[ZCF_R_LANES][ZC_LANE_CAP], uint32_t* xs,
                                       uint32_t* ats) {
    __m512i Fv = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)zipccl_rans_freq[t]));
    __m512i Cv = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)kRansCum[t]));
    double rd[16];
    for (int k = 0; k < 16; k++) rd[k] = 1.0 / zipccl_rans_freq[t][k];
    const __m512d R0 = _mm512_loadu_pd(rd), R1 = _mm512_loadu_pd(rd + 8), bias = _mm512_set1_pd(1.0 / 16384);
    const __m512i two = _mm512_set1_epi32(2);
    __m512i x[2], at[2], base[2];
    for (int h = 0; h < 2; h++) {
        x[h] = _mm512_loadu_si512(xs + 16 * h);
        at[h] = _mm512_loadu_si512(ats + 16 * h);
        base[h] = _mm512_mullo_epi32(_mm512_add_epi32(_mm512_set1_epi32(16 * h),
                                                      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
                                     _mm512_set1_epi32(ZC_LANE_CAP));
    }
    for (size_t k = k1; k-- > 0;) {
        for (int h = 0; h < 2; h++) {
            __m512i sv = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(sym + 32 * k + 16 * h)));
            __m512i f = _mm512_permutexvar_epi32(sv, Fv), cum = _mm512_permutexvar_epi32(sv, Cv);
            __m512i v = x[h];
            __mmask16 push = _mm512_cmpge_epu32_mask(v, _mm512_slli_epi32(f, 20));
            _mm512_mask_i32scatter_epi32(lane, push, _mm512_sub_epi32(_mm512_add_epi32(base[h], at[h]), _mm512_set1_epi32(4)),
                                         _mm512_slli_epi32(v, 16), 1);
            at[h] = _mm512_mask_sub_epi32(at[h], push, at[h], two);
            v = _mm512_mask_srli_epi32(v, push, v, 16);
            __m512d rlo = _mm512_permutex2var_pd(R0, _mm512_cvtepu32_epi64(_mm512_castsi512_si256(sv)), R1);
            __m512d rhi = _mm512_permutex2var_pd(R0, _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(sv, 1)), R1);
            __m256i qlo = _mm512_cvttpd_epu32(_mm512_fmadd_pd(_mm512_cvtepu32_pd(_mm512_castsi512_si256(v)), rlo, bias));
            __m256i qhi = _mm512_cvttpd_epu32(_mm512_fmadd_pd(_mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(v, 1)), rhi, bias));
            __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(qlo), qhi, 1);
            x[h] = _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(q, 12), _mm512_sub_epi32(v, _mm512_mullo_epi32(q, f))), cum);
        }
    }
    for (int h = 0; h < 2; h++) {
        _mm512_storeu_si512(xs + 16 * h, x[h]);
        _mm512_storeu_si512(ats + 16 * h, at[h]);
    }
}

/* Encode a chunk's n symbols into 32 lane streams. lane[l] receives its
 * stream at lane[l] + ZC_LANE_CAP - size[l]. n <= ZC_ENC_CHUNK. */
static void rans_encode(const uint8_t* sym, size_t n, int t, int wide,
                        uint8_t lane[ZCF_R_LANES][ZC_LANE_CAP], uint32_t size[ZCF_R_LANES]) {
    const uint16_t* F = zipccl_rans_freq[t];
    const uint16_t* C = kRansCum[t];
    const uint64_t* R = kRansRcp[t];
    uint32_t x[ZCF_R_LANES], at[ZCF_R_LANES];
    for (int l = 0; l < ZCF_R_LANES; l++) { x[l] = ZCF_R_L; at[l] = ZC_LANE_CAP; }
    size_t full = n / ZCF_R_LANES;
    for (size_t l = 0; l < n % ZCF_R_LANES; l++) /* the partial round comes first */
        rans_put(&x[l], &at[l], lane[l], sym[32 * full + l], F, C, R);
    if (wide) {
        rans_encode_avx512(sym, full, t, lane, x, at);
    } else {
        for (size_t k = full; k-- > 0;)
            for (size_t l = 0; l < ZCF_R_LANES; l++) rans_put(&x[l], &at[l], lane[l], sym[32 * k + l], F, C, R);
    }
    for (int l = 0; l < ZCF_R_LANES; l++) {
        if ((size_t)l >= n) { size[l] = 0; continue; }
        zcf_st32(lane[l] + at[l] - 4, x[l]);
        size[l] = ZC_LANE_CAP - (at[l] - 4);
    }
}

typedef struct {
    const uint8_t* base;        /* the chunk                                   */
    uint32_t x[ZCF_R_LANES];
    uint32_t off[ZCF_R_LANES];  /* next word of the lane, from base            */
    uint32_t left[ZCF_R_LANES]; /* words not yet read                          */
} zc_rans_dec_t;

static const uint8_t kZeroWord[2];

/* Decode rounds [k0, k1): symbol of element 32k+l to sym[32(k-k0)+l].
 * Returns nonzero if a lane needed a word it did not have (decoding goes on
 * with zero words, in bounds, and the caller rejects the chunk). */
static uint32_t rans_decode(zc_rans_dec_t* st, const uint32_t* lut, size_t n, size_t k0, size_t k1,
                            uint8_t* sym) {
    /* local copies: the byte stores to sym must not force state reloads */
    uint32_t x[ZCF_R_LANES], left[ZCF_R_LANES], off[ZCF_R_LANES], err = 0;
    const uint8_t* base = st->base;
    memcpy(x, st->x, sizeof x);
    memcpy(left, st->left, sizeof left);
    memcpy(off, st->off, sizeof off);
    for (size_t k = k0; k < k1; k++) {
        size_t lanes = n - 32 * k < 32 ? n - 32 * k : 32;
        uint8_t* out = sym + 32 * (k - k0);
        for (size_t l = 0; l < lanes; l++) {
            uint32_t v = lut[x[l] & (ZCF_R_M - 1)];
            uint32_t y = (v & 0x1FFF) * (x[l] >> ZCF_R_PROB_BITS) + ((v >> 13) & 0xFFF);
            uint32_t need = y < ZCF_R_L, have = left[l] != 0;
            const uint8_t* wp = have ? base + off[l] : kZeroWord;
            uint32_t w = zcf_ld16(wp);
            err |= need & !have;
            x[l] = need ? (y << 16) | w : y;
            uint32_t adv = need & have;
            left[l] -= adv;
            off[l] += 2 * adv;
            out[l] = (uint8_t)(v >> 28);
        }
    }
    memcpy(st->x, x, sizeof x);
    memcpy(st->left, left, sizeof left);
    memcpy(st->off, off, sizeof off);
    return err;
}

/* The same on 2 x 16 lanes of AVX-512, for full rounds only: the slot
 * lookup and the renormalisation words are gathers. A word is fetched as the
 * dword ending with it (offset - 2), which stays inside its lane because
 * every lane starts with its 4-byte state. */
ZC_T512 static uint32_t rans_decode_avx512(zc_rans_dec_t* st, const uint32_t* lut, size_t k0,
                                           size_t k1, uint8_t* sym) {
    const __m512i slotm = _mm512_set1_epi32(ZCF_R_M - 1), fm = _mm512_set1_epi32(0x1FFF);
    const __m512i bm = _mm512_set1_epi32(0xFFF), Lv = _mm512_set1_epi32(ZCF_R_L);
    const __m512i two = _mm512_set1_epi32(2), one = _mm512_set1_epi32(1);
    __m512i x[2], off[2], left[2];
    for (int h = 0; h < 2; h++) {
        x[h] = _mm512_loadu_si512(st->x + 16 * h);
        off[h] = _mm512_loadu_si512(st->off + 16 * h);
        left[h] = _mm512_loadu_si512(st->left + 16 * h);
    }
    __mmask16 err = 0;
    for (size_t k = k0; k < k1; k++) {
        for (int h = 0; h < 2; h++) {
            __m512i v = _mm512_i32gather_epi32(_mm512_and_si512(x[h], slotm), lut, 4);
            __m512i y = _mm512_add_epi32(
                _mm512_mullo_epi32(_mm512_and_si512(v, fm), _mm512_srli_epi32(x[h], ZCF_R_PROB_BITS)),
                _mm512_and_si512(_mm512_srli_epi32(v, 13), bm));
            __mmask16 need = _mm512_cmplt_epu32_mask(y, Lv);
            __mmask16 have = _mm512_test_epi32_mask(left[h], left[h]);
            __mmask16 take = need & have;
            err |= need & ~have;
            __m512i w = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), take,
                                                    _mm512_sub_epi32(off[h], two), st->base, 1);
            x[h] = _mm512_mask_mov_epi32(y, need, _mm512_or_si512(_mm512_slli_epi32(y, 16), _mm512_srli_epi32(w, 16)));
            off[h] = _mm512_mask_add_epi32(off[h], take, off[h], two);
            left[h] = _mm512_mask_sub_epi32(left[h], take, left[h], one);
            _mm_storeu_si128((__m128i*)(sym + 32 * (k - k0) + 16 * h),
                             _mm512_cvtepi32_epi8(_mm512_srli_epi32(v, 28)));
        }
    }
    for (int h = 0; h < 2; h++) {
        _mm512_storeu_si512(st->x + 16 * h, x[h]);
        _mm512_storeu_si512(st->off + 16 * h, off[h]);
        _mm512_storeu_si512(st->left + 16 * h, left[h]);
    }
    return err;
}

/* ------------------------------------------------------------------------ */
/* 5. Chunks                                                                 */
/* ------------------------------------------------------------------------ */

static void zc_put_chunk_header(uint8_t* p, int mode, uint32_t top, uint32_t table, uint32_t n_esc) {
    p[0] = (uint8_t)mode;
    p[1] = (uint8_t)top;
    p[2] = (uint8_t)table;
    p[3] = 0;
    zcf_st32(p + 4, n_esc);
}

/* The step of zcf_sample_index's lattice (1 when the sample is the whole
 * chunk). The encoders walk k * step mod n by adding step and wrapping once
 * (step < n): the same indices without a 64-bit division per sampled
 * element, which cost more than coding the chunk. */
static inline size_t zc_sample_step(size_t n, size_t s) {
    return n <= s ? 1 : (size_t)((uint32_t)(((uint64_t)n * 0x9E3779B9u) >> 32) | 1u);
}
/* The lattice index after i: i + step mod n, for i < n and step < n. */
static inline size_t zc_lattice_next(size_t i, size_t step, size_t n) {
    return i + step >= n ? i + step - n : i + step;
}

/* The first `lanes` lattice indices, for the vector samplers. */
static inline void zc_lattice_first(uint32_t* first, int lanes, size_t step, size_t n) {
    for (size_t k = 0, i = 0; k < (size_t)lanes; k++, i = zc_lattice_next(i, step, n)) first[k] = (uint32_t)i;
}

/* The lattice touches most cache lines of a chunk in no order the hardware
 * prefetchers follow: ask for them in order first, or the sample waits on
 * one miss after another. */
static inline void zc_prefetch_chunk(const uint8_t* src, size_t bytes) {
    for (size_t b = 0; b < bytes; b += 64) _mm_prefetch((const char*)src + b, _MM_HINT_T0);
}

/* Reference scale estimate of FORMAT.md §7 on an unaligned chunk: gather the
 * sample into an aligned array, which codec_format.h then reads in order. */
static int zc_estimate(int dt, const uint8_t* src, size_t n) {
    size_t s = n < ZCF_SAMPLE ? n : ZCF_SAMPLE, step = zc_sample_step(n, s), i = 0;
    if (dt == ZCF_DT_FP32) {
        uint32_t v[ZCF_SAMPLE];
        for (size_t k = 0; k < s; k++, i = zc_lattice_next(i, step, n)) v[k] = zcf_ld32(src + 4 * i);
        return zcf_estimate_s8_u32(v, s);
    }
    uint16_t v[ZCF_SAMPLE];
    for (size_t k = 0; k < s; k++, i = zc_lattice_next(i, step, n)) v[k] = zcf_ld16(src + 2 * i);
    return zcf_estimate_s8_u16(dt, v, s);
}

/* The ZCF_T_BINS bins of T and R (exponents kk - 14 up) from two
 * histograms of the sampled exponents (alternate samples). */
static inline void zc_bins(uint16_t hist[2][256], int kk, int emax, uint32_t h[ZCF_T_BINS]) {
    for (int b = 0; b < ZCF_T_BINS; b++) {
        int v = kk - 14 + b;
        h[b] = v >= 0 && v <= emax ? (uint32_t)hist[0][v] + hist[1][v] : 0;
    }
}

/* The sample of FORMAT.md §7.2 (up to 1024 elements): returns s8 (as §7.1
 * computes it from 256) and fills hist (two histograms of every exponent
 * value, alternate samples: a run of one value, and most samples fall in
 * three, then increments two counters in turn instead of waiting on one).
 * *same: whether every sampled element has the bits of element 0 (the
 * first sampled), the cheap half of the constant-chunk test (§7.4). */
static inline __attribute__((always_inline)) int zc_sample_impl(int dt, const uint8_t* src, size_t n,
                                                               uint16_t hist[2][256], int* same) {
    size_t S = n < ZCF_T_SAMPLE ? n : ZCF_T_SAMPLE;
    int es = zcf_elem_size(dt), emax = (1 << zcf_exp_bits(dt)) - 1;
    memset(hist, 0, 2 * 256 * sizeof(uint16_t));
    uint32_t sum = 0, cnt = 0; /* < 1024 * 255 */
    uint32_t x0 = n ? zc_ld_elem(src, es) : 0, diff = 0;
    zc_prefetch_chunk(src, n * (size_t)es);
    size_t step = zc_sample_step(n, S), i = 0;
    for (size_t k = 0; k < S; k++, i = zc_lattice_next(i, step, n)) {
        uint32_t x = zc_ld_elem(src + (size_t)es * i, es);
        diff |= x ^ x0;
        uint32_t e = zcf_exponent(dt, x), normal = e - 1 < (uint32_t)emax - 1;
        hist[k & 1][e]++;
        sum += normal ? e : 0;
        cnt += normal;
    }
    *same = diff == 0;
    return zcf_s8_of(sum, cnt);
}

/* The sample's s8 and bins, one copy per dtype (no per-sample branches on it). */
static inline __attribute__((always_inline)) int zc_sample_bins(int dt, const uint8_t* src, size_t n,
                                                               uint32_t h[ZCF_T_BINS], int* same) {
    uint16_t hist[2][256];
    int s8 = zc_sample_impl(dt, src, n, hist, same);
    zc_bins(hist, s8 / 8, (1 << zcf_exp_bits(dt)) - 1, h);
    return s8;
}
static int zc_sample(int dt, const uint8_t* src, size_t n, uint32_t h[ZCF_T_BINS], int* same) {
    switch (dt) {
    case ZCF_DT_BF16: return zc_sample_bins(ZCF_DT_BF16, src, n, h, same);
    case ZCF_DT_FP16: return zc_sample_bins(ZCF_DT_FP16, src, n, h, same);
    default: return zc_sample_bins(ZCF_DT_FP32, src, n, h, same);
    }
}

/* The same sample on AVX-512 for a chunk larger than it: 16
 * lattice indices at a time (each block of 16 is the last plus 16 * step mod
 * n), gathered, their exponents summed and stored as bytes, the 27 bins
 * then counted by byte compares. A 16-bit element is gathered as the dword
 * that starts with it, or for the chunk's last element the dword that ends
 * with it, so no read leaves the chunk. */
ZC_T512 static int zc_sample_avx512(int dt, const uint8_t* src, size_t n, uint32_t h[ZCF_T_BINS], int* same) {
    if (n <= ZCF_T_SAMPLE) return zc_sample(dt, src, n, h, same);
    int es = zcf_elem_size(dt), emax = (1 << zcf_exp_bits(dt)) - 1;
    zc_prefetch_chunk(src, n * (size_t)es);
    size_t step = zc_sample_step(n, ZCF_T_SAMPLE);
    uint32_t first[16];
    zc_lattice_first(first, 16, step, n);
    __m512i I = _mm512_loadu_si512(first);
    const __m512i d16 = _mm512_set1_epi32((int)((16 * step) % n)), nv = _mm512_set1_epi32((int)n);
    const __m512i last = _mm512_set1_epi32((int)(n - 1)), em = _mm512_set1_epi32(emax);
    const __m512i x0 = _mm512_set1_epi32((int)zc_ld_elem(src, es)), one = _mm512_set1_epi32(1);
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF), sh16 = _mm512_set1_epi32(16), nm = _mm512_set1_epi32(emax - 1);
    __m512i diff = _mm512_setzero_si512(), sum = _mm512_setzero_si512();
    uint32_t cnt = 0;
    uint8_t e8[ZCF_T_SAMPLE] __attribute__((aligned(64)));
    for (int b = 0; b < ZCF_T_SAMPLE / 16; b++) {
        __m512i x;
        if (es == 4) {
            x = _mm512_i32gather_epi32(I, src, 4);
        } else {
            __mmask16 end = _mm512_cmpeq_epi32_mask(I, last);
            x = _mm512_i32gather_epi32(_mm512_mask_sub_epi32(I, end, I, one), src, 2);
            x = _mm512_and_si512(_mm512_srlv_epi32(x, _mm512_maskz_mov_epi32(end, sh16)), lo16);
        }
        diff = _mm512_or_si512(diff, _mm512_xor_si512(x, x0));
        __m512i e = _mm512_and_si512(_mm512_srli_epi32(x, zcf_mant_bits(dt)), em);
        __mmask16 normal = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(e, one), nm);
        sum = _mm512_mask_add_epi32(sum, normal, sum, e);
        cnt += (uint32_t)_mm_popcnt_u32(normal);
        _mm_store_si128((__m128i*)(e8 + 16 * b), _mm512_cvtepi32_epi8(e));
        I = _mm512_add_epi32(I, d16);
        I = _mm512_mask_sub_epi32(I, _mm512_cmpge_epu32_mask(I, nv), I, nv);
    }
    *same = !_mm512_test_epi32_mask(diff, diff);
    int s8 = zcf_s8_of((uint32_t)_mm512_reduce_add_epi32(sum), cnt), kk = s8 / 8;
    for (int b = 0; b < ZCF_T_BINS; b++) {
        int v = kk - 14 + b;
        h[b] = 0;
        if (v < 0 || v > emax) continue;
        __m512i vv = _mm512_set1_epi8((char)v);
        for (int j = 0; j < ZCF_T_SAMPLE / 64; j++)
            h[b] += (uint32_t)_mm_popcnt_u64(_mm512_cmpeq_epi8_mask(_mm512_load_si512(e8 + 64 * j), vv));
    }
    return s8;
}

/* A full chunk's T sample in increasing index order. The histogram, the
 * sum and the constant test do not depend on the order the sample is read
 * in, and read in order the gathers follow the chunk's prefetch stream
 * instead of stalling on lines it has not reached yet (the chunk's first
 * touch from memory). */
static uint32_t kFullSample[ZCF_T_SAMPLE];
static pthread_once_t kFullSampleOnce = PTHREAD_ONCE_INIT;
static int zc_cmp_u32(const void* a, const void* b) {
    uint32_t x = *(const uint32_t*)a, y = *(const uint32_t*)b;
    return (x > y) - (x < y);
}
static void zc_init_full_sample(void) {
    size_t step = zc_sample_step(ZC_ENC_CHUNK, ZCF_T_SAMPLE), i = 0;
    for (size_t k = 0; k < ZCF_T_SAMPLE; k++, i = zc_lattice_next(i, step, ZC_ENC_CHUNK)) kFullSample[k] = (uint32_t)i;
    qsort(kFullSample, ZCF_T_SAMPLE, sizeof kFullSample[0], zc_cmp_u32);
}

/* The same on AVX2, 8 lanes a time, the bins counted from the stored
 * exponent bytes by a scalar loop (byte compares would take 27 passes). */
ZC_T256 static int zc_sample_avx2(int dt, const uint8_t* src, size_t n, uint32_t h[ZCF_T_BINS], int* same) {
    if (n <= ZCF_T_SAMPLE) return zc_sample(dt, src, n, h, same);
    int es = zcf_elem_size(dt), emax = (1 << zcf_exp_bits(dt)) - 1;
    zc_prefetch_chunk(src, n * (size_t)es);
    size_t step = zc_sample_step(n, ZCF_T_SAMPLE);
    uint32_t first[8];
    zc_lattice_first(first, 8, step, n);
    __m256i I = _mm256_loadu_si256((const __m256i*)first);
    /* unsigned compares through the sign flip: indices < n < 2^31 */
    const __m256i d8 = _mm256_set1_epi32((int)((8 * step) % n)), nv = _mm256_set1_epi32((int)n);
    const __m256i last = _mm256_set1_epi32((int)(n - 1)), em = _mm256_set1_epi32(emax);
    const __m256i x0 = _mm256_set1_epi32((int)zc_ld_elem(src, es));
    const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
    const __m256i pack = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i diff = _mm256_setzero_si256(), sum = _mm256_setzero_si256(), cnt = _mm256_setzero_si256();
    uint8_t e8[ZCF_T_SAMPLE];
    pthread_once(&kFullSampleOnce, zc_init_full_sample);
    const uint32_t* sorted = n == ZC_ENC_CHUNK ? kFullSample : NULL;
    for (int b = 0; b < ZCF_T_SAMPLE / 8; b++) {
        __m256i x;
        if (sorted) I = _mm256_loadu_si256((const __m256i*)(sorted + 8 * b));
        if (es == 4) {
            x = _mm256_i32gather_epi32((const int*)src, I, 4);
        } else {
            __m256i end = _mm256_cmpeq_epi32(I, last); /* -1 there: one element back, upper half */
            x = _mm256_i32gather_epi32((const int*)src, _mm256_add_epi32(I, end), 2);
            x = _mm256_and_si256(_mm256_srlv_epi32(x, _mm256_and_si256(end, _mm256_set1_epi32(16))), lo16);
        }
        diff = _mm256_or_si256(diff, _mm256_xor_si256(x, x0));
        __m256i e = _mm256_and_si256(_mm256_srli_epi32(x, zcf_mant_bits(dt)), em);
        __m256i normal = _mm256_and_si256(_mm256_cmpgt_epi32(e, _mm256_setzero_si256()), _mm256_cmpgt_epi32(em, e));
        sum = _mm256_add_epi32(sum, _mm256_and_si256(normal, e));
        cnt = _mm256_sub_epi32(cnt, normal);
        __m256i eb = _mm256_shuffle_epi8(e, pack);
        uint32_t w0 = (uint32_t)_mm256_extract_epi32(eb, 0), w1 = (uint32_t)_mm256_extract_epi32(eb, 4);
        memcpy(e8 + 8 * b, &w0, 4);
        memcpy(e8 + 8 * b + 4, &w1, 4);
        if (!sorted) {
            I = _mm256_add_epi32(I, d8);
            I = _mm256_sub_epi32(I, _mm256_andnot_si256(_mm256_cmpgt_epi32(nv, I), nv)); /* I >= n: - n */
        }
    }
    *same = _mm256_testz_si256(diff, diff);
    uint32_t sv[8], cv[8], tsum = 0, tcnt = 0;
    _mm256_storeu_si256((__m256i*)sv, sum);
    _mm256_storeu_si256((__m256i*)cv, cnt);
    for (int l = 0; l < 8; l++) { tsum += sv[l]; tcnt += cv[l]; }
    int s8 = zcf_s8_of(tsum, tcnt);
    uint16_t hist[2][256];
    memset(hist, 0, sizeof hist);
    for (int k = 0; k < ZCF_T_SAMPLE; k++) hist[k & 1][e8[k]]++;
    zc_bins(hist, s8 / 8, emax, h);
    return s8;
}

/* Encode one chunk of n <= ZC_ENC_CHUNK elements into out (room: avail
 * bytes). Returns its size, or 0 if neither the encoding nor the raw chunk
 * fits. A chunk not smaller than raw is written raw. */
static size_t encode_chunk(const zc_kernels_t* K, int dt, int codec, const uint8_t* src, size_t n,
                           uint8_t* out, size_t avail) {
    size_t raw = zc_raw_chunk_size(dt, n), rest = zcf_rest_size(dt, n), G = zc_groups(n);
    uint8_t esc[ZC_ENC_CHUNK + 64];
    /* T and R take the larger sample of FORMAT.md §7 item 3, which also
     * tells whether the chunk may be constant; F3 and F2 the small one */
    uint32_t h[ZCF_T_BINS];
    const int big = codec == zipcclCodecFast || codec == zipcclCodecDense, es = zcf_elem_size(dt);
    int same = 0, s8 = big ? K->sample(dt, src, n, h, &same) : zc_estimate(dt, src, n);
    /* C (codecs fast and dense): a constant sample is confirmed over the
     * whole chunk, element i against element i + 1 for all i (memcmp stops
     * at the first difference); C (8 + es bytes) beats raw from n = 2 on */
    if (big && same && n >= 2 && ZCF_CHUNK_HEADER_SIZE + (size_t)es <= avail &&
        !memcmp(src, src + es, (n - 1) * (size_t)es)) {
        zc_put_chunk_header(out, ZCF_MODE_C, 0, 0, 0);
        memcpy(out + ZCF_CHUNK_HEADER_SIZE, src, (size_t)es);
        return ZCF_CHUNK_HEADER_SIZE + (size_t)es;
    }
    size_t size = 0;
    if (codec == zipcclCodecDense) {
        uint8_t sym[ZC_ENC_CHUNK];
        uint8_t lane[ZCF_R_LANES][ZC_LANE_CAP];
        uint32_t lsize[ZCF_R_LANES];
        size_t fixed = ZCF_CHUNK_HEADER_SIZE + 2 * ZCF_R_LANES + rest;
        if (fixed < avail && fixed < raw) {
            uint32_t top = 0, t = 0;
            zcf_r_pick(h, n, s8, dt, zipccl_rans_cost, zipccl_rans_top_off, &top, &t);
            uint32_t nesc = K->split(dt, ZCF_MODE_R, n, src, top, out + fixed - rest, sym, esc);
            rans_encode(sym, n, (int)t, K->rans512, lane, lsize);
            size = fixed + nesc;
            for (int l = 0; l < ZCF_R_LANES; l++) size += lsize[l];
            if (size < raw && size <= avail) {
                zc_put_chunk_header(out, ZCF_MODE_R, top, t, nesc);
                uint8_t* p = out + fixed;
                for (int l = 0; l < ZCF_R_LANES; l++) {
                    zcf_st16(out + ZCF_CHUNK_HEADER_SIZE + 2 * l, (uint16_t)lsize[l]);
                    memcpy(p, lane[l] + ZC_LANE_CAP - lsize[l], lsize[l]);
                    p += lsize[l];
                }
                memcpy(p, esc, nesc);
                return size;
            }
        }
    } else if (codec == zipcclCodecFast) {
        size_t fixed = ZCF_CHUNK_HEADER_SIZE + rest + 16 * G;
        uint32_t top = 0, shape = 0;
        int ok = zcf_t_pick(h, s8 / 8, (1 << zcf_exp_bits(dt)) - 1, &top, &shape);
        if (fixed < avail && fixed < raw && ok) {
            uint8_t sym[ZC_ENC_CHUNK + 64], q2[ZC_ENC_CHUNK + 64], q3[ZC_ENC_CHUNK + 64];
            uint8_t p2[16 * (ZC_ENC_CHUNK / 64)], p3[24 * (ZC_ENC_CHUNK / 64)], enc[16], dec[16];
            t_luts(shape, enc, dec);
            uint32_t nesc = K->split(dt, ZCF_MODE_T, n, src, top, out + ZCF_CHUNK_HEADER_SIZE, sym, esc);
            size_t m2 = K->tpass(sym, n, enc, out + ZCF_CHUNK_HEADER_SIZE + rest, q2);
            size_t m3 = K->tpass(q2, m2, NULL, p2, q3);
            K->tplanes3(q3, m3, p3);
            size_t H2 = zc_groups(m2), H3 = zc_groups(m3);
            size = fixed + 16 * H2 + 24 * H3 + nesc;
            if (size < raw && size <= avail) {
                zc_put_chunk_header(out, ZCF_MODE_T, top, shape, nesc);
                memcpy(out + fixed, p2, 16 * H2);
                memcpy(out + fixed + 16 * H2, p3, 24 * H3);
                memcpy(out + fixed + 16 * H2 + 24 * H3, esc, nesc);
                return size;
            }
        }
    } else if (codec == zipcclCodecF2) {
        size_t fixed = ZCF_CHUNK_HEADER_SIZE + rest + 16 * G;
        if (fixed < avail && fixed < raw) {
            uint8_t sym[ZC_ENC_CHUNK], q[ZC_ENC_CHUNK + 64], sec[24 * (ZC_ENC_CHUNK / 64)];
            uint32_t top = zcf_f2_top(dt, s8);
            uint32_t nesc = K->split(dt, ZCF_MODE_F2, n, src, top, out + ZCF_CHUNK_HEADER_SIZE, sym, esc);
            size_t m = K->f2pack(sym, n, out + ZCF_CHUNK_HEADER_SIZE + rest, sec, q), H = zc_groups(m);
            size = fixed + 24 * H + nesc;
            if (size < raw && size <= avail) {
                zc_put_chunk_header(out, ZCF_MODE_F2, top, 0, nesc);
                memcpy(out + fixed, sec, 24 * H);
                memcpy(out + fixed + 24 * H, esc, nesc);
                return size;
            }
        }
    } else {
        size_t fixed = ZCF_CHUNK_HEADER_SIZE + rest + 24 * G;
        if (fixed < avail && fixed < raw) {
            uint32_t top = zcf_f3_top(dt, s8);
            uint32_t nesc = K->split(dt, ZCF_MODE_F3, n, src, top, out + ZCF_CHUNK_HEADER_SIZE,
                                     out + ZCF_CHUNK_HEADER_SIZE + rest, esc);
            size = fixed + nesc;
            if (size < raw && size <= avail) {
                zc_put_chunk_header(out, ZCF_MODE_F3, top, 0, nesc);
                memcpy(out + fixed, esc, nesc);
                return size;
            }
        }
    }
    if (raw > avail) return 0;
    zc_put_chunk_header(out, ZCF_MODE_RAW, 0, 0, 0);
    memcpy(out + ZCF_CHUNK_HEADER_SIZE, src, n * (size_t)zcf_elem_size(dt));
    return raw;
}

/* Planes of `words` u64 words per 64-entry group: the last group's bits past
 * entry n must be zero. */
static int zc_pad_ok(const uint8_t* planes, size_t n, int words) {
    size_t tail = n % 64;
    if (!tail) return 1;
    const uint8_t* w = planes + 8 * words * (zc_groups(n) - 1);
    uint64_t any = 0;
    for (int k = 0; k < words; k++) any |= zc_ld64(w + 8 * k);
    return !(any & (~0ull << tail));
}

static int zc_esc_ok(int dt, const uint8_t* esc, uint32_t n_esc) {
    if (dt != ZCF_DT_FP16) return 1;
    uint8_t any = 0;
    for (uint32_t k = 0; k < n_esc; k++) any |= esc[k];
    return any < 32;
}

#define ZC_CORRUPT(...) zipcclSetError(zipcclCorruptStream, __VA_ARGS__)

/* Decode chunk ci (size bytes at c, n elements) into out. */
static zipcclResult_t decode_chunk(const zc_kernels_t* K, int dt, int version, size_t ci, const uint8_t* c,
                                   size_t size, size_t n, uint8_t* out) {
    if (size < ZCF_CHUNK_HEADER_SIZE) return ZC_CORRUPT("chunk %zu: %zu bytes, shorter than its header", ci, size);
    uint32_t mode = c[0], top = c[1], table = c[2], n_esc = zcf_ld32(c + 4);
    uint32_t emax = (1u << zcf_exp_bits(dt)) - 1;
    size_t rest = zcf_rest_size(dt, n), G = zc_groups(n);
    if (c[3] != 0) return ZC_CORRUPT("chunk %zu: reserved byte is %u, not 0", ci, c[3]);
    if (mode == ZCF_MODE_RAW) {
        if (top || table || n_esc) return ZC_CORRUPT("chunk %zu: raw chunk with nonzero top/table/n_esc", ci);
        if (size != zc_raw_chunk_size(dt, n))
            return ZC_CORRUPT("chunk %zu: raw chunk of %zu bytes, expected %zu", ci, size, zc_raw_chunk_size(dt, n));
        memcpy(out, c + ZCF_CHUNK_HEADER_SIZE, n * (size_t)zcf_elem_size(dt));
        return zipcclSuccess;
    }
    if (mode == ZCF_MODE_C && version >= 3) {
        size_t es = (size_t)zcf_elem_size(dt), have = es, total = n * es;
        if (top || table || n_esc) return ZC_CORRUPT("chunk %zu: constant chunk with nonzero top/table/n_esc", ci);
        if (size != ZCF_CHUNK_HEADER_SIZE + es)
            return ZC_CORRUPT("chunk %zu: constant chunk of %zu bytes, expected %zu", ci, size, ZCF_CHUNK_HEADER_SIZE + es);
        memcpy(out, c + ZCF_CHUNK_HEADER_SIZE, es); /* n >= 1 */
        for (; have < total; have *= 2) memcpy(out + have, out, have < total - have ? have : total - have);
        return zipcclSuccess;
    }
    if (mode != ZCF_MODE_F3 && mode != ZCF_MODE_R && mode != ZCF_MODE_F2 && (mode != ZCF_MODE_T || version < 2))
        return ZC_CORRUPT("chunk %zu: unknown mode %u in a version %d frame", ci, mode, version);
    if (top > emax) return ZC_CORRUPT("chunk %zu: window top %u exceeds the exponent range", ci, top);
    if (n_esc > n) return ZC_CORRUPT("chunk %zu: n_esc %u > %zu elements", ci, n_esc, n);
    uint32_t pos = 0;
    if (mode == ZCF_MODE_F3) {
        if (table) return ZC_CORRUPT("chunk %zu: F3 chunk with table byte %u", ci, table);
        size_t want = ZCF_CHUNK_HEADER_SIZE + rest + 24 * G + n_esc;
        if (size != want) return ZC_CORRUPT("chunk %zu: F3 chunk of %zu bytes, expected %zu", ci, size, want);
        const uint8_t* r = c + ZCF_CHUNK_HEADER_SIZE;
        const uint8_t* planes = r + rest;
        const uint8_t* esc = planes + 24 * G;
        if (!zc_pad_ok(planes, n, 3) || (dt == ZCF_DT_FP16 && !zc_pad_ok(r + n, n, 3)))
            return ZC_CORRUPT("chunk %zu: nonzero padding bits in the last group", ci);
        if (!zc_esc_ok(dt, esc, n_esc)) return ZC_CORRUPT("chunk %zu: escape byte out of the exponent range", ci);
        if (K->merge(dt, ZCF_MODE_F3, n, 0, G, r, planes, esc, n_esc, &pos, top, out))
            return ZC_CORRUPT("chunk %zu: code outside the window (top %u) or too few escapes", ci, top);
        if (pos != n_esc) return ZC_CORRUPT("chunk %zu: %u escape codes, header says %u", ci, pos, n_esc);
        return zipcclSuccess;
    }
    if (mode == ZCF_MODE_T) {
        if (table >= ZCF_T_SHAPES) return ZC_CORRUPT("chunk %zu: T shape %u out of range", ci, table);
        size_t fixed = ZCF_CHUNK_HEADER_SIZE + rest + 16 * G;
        if (size < fixed + (size_t)n_esc) return ZC_CORRUPT("chunk %zu: T chunk of %zu bytes is too short", ci, size);
        const uint8_t* r = c + ZCF_CHUNK_HEADER_SIZE;
        const uint8_t* t1 = r + rest;
        if (!zc_pad_ok(t1, n, 2)) return ZC_CORRUPT("chunk %zu: nonzero padding bits in the last tier-1 group", ci);
        size_t m2 = K->count3(t1, G), m3;
        size_t H2 = zc_groups(m2);
        if (size < fixed + 16 * H2 + n_esc) return ZC_CORRUPT("chunk %zu: T chunk of %zu bytes is too short for its tiers", ci, size);
        const uint8_t* t2 = t1 + 16 * G;
        if (!zc_pad_ok(t2, m2, 2)) return ZC_CORRUPT("chunk %zu: nonzero padding bits in the last tier-2 group", ci);
        m3 = K->count3(t2, H2);
        size_t H3 = zc_groups(m3), want = fixed + 16 * H2 + 24 * H3 + n_esc;
        if (size != want) return ZC_CORRUPT("chunk %zu: T chunk of %zu bytes, expected %zu", ci, size, want);
        const uint8_t* t3 = t2 + 16 * H2;
        const uint8_t* esc = t3 + 24 * H3;
        if (!zc_pad_ok(t3, m3, 3) || (dt == ZCF_DT_FP16 && !zc_pad_ok(r + n, n, 3)))
            return ZC_CORRUPT("chunk %zu: nonzero padding bits in the last group", ci);
        if (!zc_esc_ok(dt, esc, n_esc)) return ZC_CORRUPT("chunk %zu: escape byte out of the exponent range", ci);
        uint8_t enc[16], dec[16], sym[ZC_SEG];
        t_luts(table, enc, dec);
        size_t k2 = 0, k3 = 0;
        for (size_t g0 = 0; g0 < G; g0 += ZC_SEG / 64) {
            size_t g1 = g0 + ZC_SEG / 64 < G ? g0 + ZC_SEG / 64 : G;
            K->tunpack(t1 + 16 * g0, t2, H2, t3, H3, dec, n, g0, g1, &k2, &k3, sym);
            if (K->merge(dt, ZCF_MODE_T, n, g0, g1, r, sym, esc, n_esc, &pos, top, out))
                return ZC_CORRUPT("chunk %zu: code outside the exponent range (top %u) or too few escapes", ci, top);
        }
        if (pos != n_esc) return ZC_CORRUPT("chunk %zu: %u escape codes, header says %u", ci, pos, n_esc);
        return zipcclSuccess;
    }
    if (mode == ZCF_MODE_F2) {
        if (table) return ZC_CORRUPT("chunk %zu: F2 chunk with table byte %u", ci, table);
        size_t fixed = ZCF_CHUNK_HEADER_SIZE + rest + 16 * G;
        if (size < fixed + (size_t)n_esc) return ZC_CORRUPT("chunk %zu: F2 chunk of %zu bytes is too short", ci, size);
        const uint8_t* r = c + ZCF_CHUNK_HEADER_SIZE;
        const uint8_t* prim = r + rest;
        if (!zc_pad_ok(prim, n, 2)) return ZC_CORRUPT("chunk %zu: nonzero padding bits in the last primary group", ci);
        size_t m = K->count3(prim, G);
        size_t H = zc_groups(m), want = fixed + 24 * H + n_esc;
        if (size != want) return ZC_CORRUPT("chunk %zu: F2 chunk of %zu bytes, expected %zu", ci, size, want);
        const uint8_t* sec = prim + 16 * G;
        const uint8_t* esc = sec + 24 * H;
        if (!zc_pad_ok(sec, m, 3) || (dt == ZCF_DT_FP16 && !zc_pad_ok(r + n, n, 3)))
            return ZC_CORRUPT("chunk %zu: nonzero padding bits in the last group", ci);
        if (!zc_esc_ok(dt, esc, n_esc)) return ZC_CORRUPT("chunk %zu: escape byte out of the exponent range", ci);
        uint8_t sym[ZC_SEG];
        size_t cur = 0;
        for (size_t g0 = 0; g0 < G; g0 += ZC_SEG / 64) {
            size_t g1 = g0 + ZC_SEG / 64 < G ? g0 + ZC_SEG / 64 : G;
            K->f2unpack(prim + 16 * g0, sec, m, n, g0, g1, &cur, sym);
            if (K->merge(dt, ZCF_MODE_F2, n, g0, g1, r, sym, esc, n_esc, &pos, top, out))
                return ZC_CORRUPT("chunk %zu: code outside the window (top %u) or too few escapes", ci, top);
        }
        if (pos != n_esc) return ZC_CORRUPT("chunk %zu: %u escape codes, header says %u", ci, pos, n_esc);
        return zipcclSuccess;
    }
    /* R chunk */
    if (table >= (version >= ZCF_VERSION_R ? ZIPCCL_RANS_NTABLES : ZIPCCL_RANS_NTABLES_V1))
        return ZC_CORRUPT("chunk %zu: rANS table %u out of range for a version %d frame", ci, table, version);
    size_t fixed = ZCF_CHUNK_HEADER_SIZE + 2 * ZCF_R_LANES + rest;
    if (size < fixed + n_esc) return ZC_CORRUPT("chunk %zu: R chunk of %zu bytes is too short", ci, size);
    const uint8_t* lp = c + fixed;
    size_t lanes_total = 0;
    zc_rans_dec_t st;
    st.base = c;
    for (int l = 0; l < ZCF_R_LANES; l++) {
        size_t ls = zcf_ld16(c + ZCF_CHUNK_HEADER_SIZE + 2 * l);
        size_t nl = n > (size_t)l ? (n - l + 31) / 32 : 0;
        if (nl == 0 ? ls != 0 : (ls < 4 || (ls & 1)))
            return ZC_CORRUPT("chunk %zu: lane %d has an invalid size %zu", ci, l, ls);
        if (ls > size - fixed - n_esc - lanes_total)
            return ZC_CORRUPT("chunk %zu: lane sizes exceed the chunk", ci);
        if (ls) {
            st.x[l] = zcf_ld32(lp);
            if (st.x[l] < ZCF_R_L) return ZC_CORRUPT("chunk %zu: lane %d initial state below L", ci, l);
            st.left[l] = (uint32_t)(ls - 4) / 2;
            st.off[l] = (uint32_t)(lp + 4 - c);
        } else {
            st.x[l] = ZCF_R_L; st.left[l] = 0; st.off[l] = (uint32_t)(lp - c);
        }
        lp += ls;
        lanes_total += ls;
    }
    if (fixed + lanes_total + n_esc != size)
        return ZC_CORRUPT("chunk %zu: R chunk of %zu bytes, parts sum to %zu", ci, size, fixed + lanes_total + n_esc);
    const uint8_t* r = c + ZCF_CHUNK_HEADER_SIZE + 2 * ZCF_R_LANES;
    const uint8_t* esc = lp;
    if (dt == ZCF_DT_FP16 && !zc_pad_ok(r + n, n, 3)) return ZC_CORRUPT("chunk %zu: nonzero padding bits in the last group", ci);
    if (!zc_esc_ok(dt, esc, n_esc)) return ZC_CORRUPT("chunk %zu: escape byte out of the exponent range", ci);
    pthread_once(&kRansOnce, zc_rans_init);
    const uint32_t* lut = kRansLut[table];
    uint8_t sym[ZC_SEG];
    size_t rounds = (n + 31) / 32;
    for (size_t k0 = 0; k0 < rounds; k0 += ZC_SEG / 32) {
        size_t k1 = k0 + ZC_SEG / 32 < rounds ? k0 + ZC_SEG / 32 : rounds;
        size_t kv = K->rans512 ? (k1 < n / 32 ? k1 : n / 32) : k0; /* full rounds go wide */
        uint32_t err = kv > k0 ? rans_decode_avx512(&st, lut, k0, kv, sym) : 0;
        if (kv < k1) err |= rans_decode(&st, lut, n, kv, k1, sym + 32 * (kv - k0));
        if (err) return ZC_CORRUPT("chunk %zu: a rANS lane ran out of words", ci);
        size_t e1 = 32 * k1 < n ? 32 * k1 : n;
        if (K->merge(dt, ZCF_MODE_R, n, k0 / 2, zc_groups(e1), r, sym, esc, n_esc, &pos, top, out))
            return ZC_CORRUPT("chunk %zu: symbol outside the window (top %u) or too few escapes", ci, top);
    }
    for (int l = 0; l < ZCF_R_LANES; l++)
        if (st.x[l] != ZCF_R_L || st.left[l])
            return ZC_CORRUPT("chunk %zu: rANS lane %d ends in state %u with %u words unread", ci, l, st.x[l], st.left[l]);
    if (pos != n_esc) return ZC_CORRUPT("chunk %zu: %u escape symbols, header says %u", ci, pos, n_esc);
    return zipcclSuccess;
}

/* ------------------------------------------------------------------------ */
/* 6. Frames and the public API                                              */
/* ------------------------------------------------------------------------ */

size_t zipcclCompressBound(size_t count, zipcclDataType_t dtype, int checksum) {
    size_t es = zipcclTypeSize(dtype);
    if (!es || count > ((size_t)1 << 61) / es) return 0;
    size_t nc = zcf_num_chunks(count, ZCF_CHUNK_LOG2);
    return ZCF_HEADER_SIZE + count * es + (checksum ? 4 + 4 * nc : 0);
}

static void zc_put_header(uint8_t* p, int version, int dt, int flags, uint64_t count) {
    zcf_st32(p, ZCF_MAGIC);
    p[4] = (uint8_t)version;
    p[5] = (uint8_t)dt;
    p[6] = (uint8_t)flags;
    p[7] = ZCF_CHUNK_LOG2;
    zcf_st64(p + 8, count);
}

static zipcclResult_t zc_write_stored(const uint8_t* src, size_t count, int dt, int checksum,
                                      uint8_t* dst, size_t cap, size_t* dstSize) {
    size_t es = zcf_elem_size(dt), nc = zcf_num_chunks(count, ZCF_CHUNK_LOG2);
    size_t need = ZCF_HEADER_SIZE + count * es + (checksum ? 4 + 4 * nc : 0);
    if (cap < need) return zipcclSetError(zipcclDstTooSmall, "compress: stored frame needs %zu bytes, have %zu", need, cap);
    zc_put_header(dst, ZCF_VERSION_MIN, dt, ZCF_FLAG_STORED | (checksum ? ZCF_FLAG_CHECKSUM : 0), count);
    uint8_t* p = dst + ZCF_HEADER_SIZE;
    if (checksum) {
        zcf_st32(p, XXH32(dst, ZCF_HEADER_SIZE, 0));
        for (size_t k = 0; k < nc; k++) {
            size_t first = k << ZCF_CHUNK_LOG2, m = count - first < ZC_ENC_CHUNK ? count - first : ZC_ENC_CHUNK;
            zcf_st32(p + 4 + 4 * k, XXH32(src + first * es, m * es, 0));
        }
        p += 4 + 4 * nc;
    }
    if (count) memcpy(p, src, count * es);
    *dstSize = need;
    return zipcclSuccess;
}

zipcclResult_t zipcclCompress(const void* src, size_t count, zipcclDataType_t dtype, void* dst,
                              size_t dstCapacity, size_t* dstSize, const zipcclCodecParams_t* params) {
    int dt = zc_dt(dtype);
    if (!dt) return zipcclSetError(zipcclInvalidArgument, "compress: unknown dtype %d", (int)dtype);
    if (!dst || !dstSize || (count && !src))
        return zipcclSetError(zipcclInvalidArgument, "compress: null pointer argument");
    size_t es = zcf_elem_size(dt);
    if (count > ((size_t)1 << 61) / es)
        return zipcclSetError(zipcclInvalidArgument, "compress: count %zu too large", count);
    zipcclCodec_t codec = params ? params->codec : zipcclCodecDefault;
    int checksum = params ? params->checksum != 0 : 0;
    if (codec == zipcclCodecDefault) codec = zipcclCodecFast;
    if (codec < zipcclCodecFast || codec > zipcclCodecF2)
        return zipcclSetError(zipcclInvalidArgument, "compress: unknown codec %d", (int)codec);
    zc_kernels_t K;
    ZIPCCL_TRY(zc_pick(params, &K));
    if (codec == zipcclCodecDense) pthread_once(&kRansOnce, zc_rans_init);
    const uint8_t* s = (const uint8_t*)src;
    uint8_t* d = (uint8_t*)dst;
    size_t nc = zcf_num_chunks(count, ZCF_CHUNK_LOG2);
    size_t stored = zipcclCompressBound(count, dtype, checksum);
    if (codec != zipcclCodecStored && count) {
        /* a compressed frame is kept only if strictly smaller than stored */
        size_t limit = dstCapacity < stored - 1 ? dstCapacity : stored - 1;
        size_t table = ZCF_HEADER_SIZE + 4 * nc, off = table + (checksum ? 4 + 4 * nc : 0);
        int ok = off <= limit, any_c = 0;
        for (size_t k = 0; ok && k < nc; k++) {
            size_t first = k << ZCF_CHUNK_LOG2, n = count - first < ZC_ENC_CHUNK ? count - first : ZC_ENC_CHUNK;
            size_t sz = encode_chunk(&K, dt, codec, s + first * es, n, d + off, limit - off);
            if (!sz) { ok = 0; break; }
            any_c |= d[off] == ZCF_MODE_C;
            zcf_st32(d + ZCF_HEADER_SIZE + 4 * k, (uint32_t)sz);
            off += sz;
        }
        if (ok) {
            /* version 4 for R frames (tail tables, C chunks too), 3 for T
             * frames with a C chunk, 2 where T chunks may be: every other
             * frame stays readable by older decoders */
            int version = codec == zipcclCodecDense ? ZCF_VERSION_R
                          : codec != zipcclCodecFast ? ZCF_VERSION_MIN
                          : any_c                    ? ZCF_VERSION_C
                                                     : ZCF_VERSION_T;
            zc_put_header(d, version, dt, checksum ? ZCF_FLAG_CHECKSUM : 0, count);
            if (checksum) {
                zcf_st32(d + table, XXH32(d, table, 0));
                const uint8_t* c = d + table + 4 + 4 * nc;
                for (size_t k = 0; k < nc; k++) {
                    uint32_t sz = zcf_ld32(d + ZCF_HEADER_SIZE + 4 * k);
                    zcf_st32(d + table + 4 + 4 * k, XXH32(c, sz, 0));
                    c += sz;
                }
            }
            *dstSize = off;
            return zipcclSuccess;
        }
    }
    return zc_write_stored(s, count, dt, checksum, d, dstCapacity, dstSize);
}

/* Everything the header and chunk table say, validated against srcSize. */
typedef struct {
    int version, dt, checksum, stored, chunk_log2;
    uint64_t count;
    size_t nc, frame, data; /* chunks, frame bytes, offset of chunk 0 / payload */
} zc_frame_t;

static zipcclResult_t zc_parse(const uint8_t* p, size_t srcSize, zc_frame_t* f) {
    if (srcSize < ZCF_HEADER_SIZE) return ZC_CORRUPT("frame of %zu bytes is shorter than its header", srcSize);
    if (zcf_ld32(p) != ZCF_MAGIC) return ZC_CORRUPT("bad magic 0x%08x", zcf_ld32(p));
    if (p[4] < ZCF_VERSION_MIN || p[4] > ZCF_VERSION)
        return zipcclSetError(zipcclUnsupported, "frame version %u, this build reads %d..%d", p[4], ZCF_VERSION_MIN, ZCF_VERSION);
    f->version = p[4];
    f->dt = p[5];
    if (f->dt < ZCF_DT_BF16 || f->dt > ZCF_DT_FP32) return ZC_CORRUPT("unknown dtype code %u", p[5]);
    if (p[6] & ~(ZCF_FLAG_CHECKSUM | ZCF_FLAG_STORED)) return ZC_CORRUPT("unknown flag bits 0x%02x", p[6]);
    f->checksum = p[6] & ZCF_FLAG_CHECKSUM;
    f->stored = (p[6] & ZCF_FLAG_STORED) != 0;
    f->chunk_log2 = p[7];
    if (f->chunk_log2 < ZCF_CHUNK_LOG2_MIN || f->chunk_log2 > ZCF_CHUNK_LOG2_MAX)
        return ZC_CORRUPT("chunk_log2 %d outside %d..%d", f->chunk_log2, ZCF_CHUNK_LOG2_MIN, ZCF_CHUNK_LOG2_MAX);
    f->count = zcf_ld64(p + 8);
    size_t es = zcf_elem_size(f->dt);
    if (f->count >= (1ull << 62) / es) return ZC_CORRUPT("count %llu too large", (unsigned long long)f->count);
    uint64_t nc = zcf_num_chunks(f->count, f->chunk_log2);
    uint64_t cs = f->checksum ? 4 + 4 * nc : 0;
    f->nc = (size_t)nc;
    if (f->stored) {
        uint64_t need = ZCF_HEADER_SIZE + cs + f->count * es;
        if (need > srcSize) return ZC_CORRUPT("stored frame needs %llu bytes, got %zu", (unsigned long long)need, srcSize);
        if (f->checksum && XXH32(p, ZCF_HEADER_SIZE, 0) != zcf_ld32(p + ZCF_HEADER_SIZE))
            return zipcclSetError(zipcclChecksumMismatch, "header checksum mismatch");
        f->data = ZCF_HEADER_SIZE + (size_t)cs;
        f->frame = (size_t)need;
        return zipcclSuccess;
    }
    uint64_t table = ZCF_HEADER_SIZE + 4 * nc;
    if (table + cs > srcSize) return ZC_CORRUPT("frame of %zu bytes is shorter than its chunk table", srcSize);
    if (f->checksum && XXH32(p, (size_t)table, 0) != zcf_ld32(p + table))
        return zipcclSetError(zipcclChecksumMismatch, "header checksum mismatch");
    uint64_t total = table + cs;
    for (size_t k = 0; k < nc; k++) total += zcf_ld32(p + ZCF_HEADER_SIZE + 4 * k);
    if (total > srcSize) return ZC_CORRUPT("chunk table sums to %llu bytes, got %zu", (unsigned long long)total, srcSize);
    f->data = (size_t)(table + cs);
    f->frame = (size_t)total;
    return zipcclSuccess;
}

zipcclResult_t zipcclGetFrameInfo(const void* src, size_t srcSize, zipcclFrameInfo_t* info) {
    if (!src || !info) return zipcclSetError(zipcclInvalidArgument, "frame info: null pointer argument");
    zc_frame_t f;
    ZIPCCL_TRY(zc_parse((const uint8_t*)src, srcSize, &f));
    info->count = f.count;
    info->dtype = zc_dtype(f.dt);
    info->frameSize = f.frame;
    info->decompressedSize = (size_t)f.count * zcf_elem_size(f.dt);
    info->checksum = f.checksum != 0;
    info->stored = f.stored;
    info->numChunks = f.nc > UINT32_MAX ? UINT32_MAX : (uint32_t)f.nc;
    return zipcclSuccess;
}

zipcclResult_t zipcclDecompress(const void* src, size_t srcSize, void* dst, size_t dstCapacity,
                                size_t* count, zipcclDataType_t expectDtype,
                                const zipcclCodecParams_t* params) {
    if (!src) return zipcclSetError(zipcclInvalidArgument, "decompress: null source");
    if (expectDtype && !zc_dt(expectDtype))
        return zipcclSetError(zipcclInvalidArgument, "decompress: unknown expected dtype %d", (int)expectDtype);
    zc_kernels_t K;
    ZIPCCL_TRY(zc_pick(params, &K));
    const uint8_t* p = (const uint8_t*)src;
    zc_frame_t f;
    ZIPCCL_TRY(zc_parse(p, srcSize, &f));
    if (f.frame != srcSize)
        return ZC_CORRUPT("frame is %zu bytes but %zu were given", f.frame, srcSize);
    if (expectDtype && zc_dtype(f.dt) != expectDtype)
        return zipcclSetError(zipcclMismatch, "frame holds %s, caller expects %s",
                              zipcclTypeName(zc_dtype(f.dt)), zipcclTypeName(expectDtype));
    size_t es = zcf_elem_size(f.dt), total = (size_t)f.count * es, C = (size_t)1 << f.chunk_log2;
    if (dstCapacity < total)
        return zipcclSetError(zipcclDstTooSmall, "decompress: need %zu bytes, have %zu", total, dstCapacity);
    if (total && !dst) return zipcclSetError(zipcclInvalidArgument, "decompress: null destination");
    uint8_t* d = (uint8_t*)dst;
    /* per-chunk (or per-slice) checksums sit just before the data, when present */
    const uint8_t* sums = f.checksum ? p + f.data - 4 * f.nc : NULL;
    if (f.stored) {
        if (f.checksum)
            for (size_t k = 0; k < f.nc; k++) {
                size_t first = k * C, m = f.count - first < C ? f.count - first : C;
                if (XXH32(p + f.data + first * es, m * es, 0) != zcf_ld32(sums + 4 * k))
                    return zipcclSetError(zipcclChecksumMismatch, "slice %zu checksum mismatch", k);
            }
        if (total) memcpy(d, p + f.data, total);
    } else {
        if (f.checksum) {
            const uint8_t* c = p + f.data;
            for (size_t k = 0; k < f.nc; k++) {
                uint32_t sz = zcf_ld32(p + ZCF_HEADER_SIZE + 4 * k);
                if (XXH32(c, sz, 0) != zcf_ld32(sums + 4 * k))
                    return zipcclSetError(zipcclChecksumMismatch, "chunk %zu checksum mismatch", k);
                c += sz;
            }
        }
        const uint8_t* c = p + f.data;
        for (size_t k = 0; k < f.nc; k++) {
            size_t sz = zcf_ld32(p + ZCF_HEADER_SIZE + 4 * k);
            size_t first = k * C, n = f.count - first < C ? f.count - first : C;
            ZIPCCL_TRY(decode_chunk(&K, f.dt, f.version, k, c, sz, n, d + first * es));
            c += sz;
        }
    }
    if (count) *count = (size_t)f.count;
    return zipcclSuccess;
}
