/*
 * codec_format.h — constants and tiny helpers of the frame format
 * (docs/FORMAT.md), shared by the CPU codec (codec_cpu.c) and the CUDA codec
 * (codec_cuda.cu) so both read the same definitions and make the same encoder
 * choices. Plain C; every function is static inline and also compiles as
 * __host__ __device__ under nvcc.
 */
#ifndef ZIPCCL_CODEC_FORMAT_H
#define ZIPCCL_CODEC_FORMAT_H
#include <stddef.h>
#include <stdint.h>

#include "codec_tables.h"

#ifdef __CUDACC__
#define ZIPCCL_HD __host__ __device__ __forceinline__
#else
#define ZIPCCL_HD static inline
#endif

enum {
    ZCF_MAGIC = 0x3143435Au, /* "ZCC1" little-endian                      */
    ZCF_VERSION = 4,     /* the newest this build reads: R tail tables 8.. */
    ZCF_VERSION_R = 4,   /* codec dense frames (R tables 8 .. 39)          */
    ZCF_VERSION_C = 3,   /* codec fast frames with a C chunk (mode 5)      */
    ZCF_VERSION_T = 2,   /* codec fast frames without a C chunk            */
    ZCF_VERSION_MIN = 1, /* F3 and F2 frames are still written as 1       */
    ZCF_HEADER_SIZE = 16,
    ZCF_CHUNK_LOG2 = 14, /* version 1 encoders                          */
    ZCF_CHUNK_LOG2_MIN = 10,
    ZCF_CHUNK_LOG2_MAX = 20,
    ZCF_FLAG_CHECKSUM = 1,
    ZCF_FLAG_STORED = 2,
    ZCF_CHUNK_HEADER_SIZE = 8,
    ZCF_MODE_RAW = 0,
    ZCF_MODE_F3 = 1,
    ZCF_MODE_R = 2,
    ZCF_MODE_F2 = 3,
    ZCF_MODE_T = 4,
    ZCF_MODE_C = 5, /* constant chunk: one value (FORMAT.md 4.7), version 3 */
    ZCF_DT_BF16 = 1,
    ZCF_DT_FP16 = 2,
    ZCF_DT_FP32 = 3,
    ZCF_F3_ESC = 7,
    ZCF_F2_ESC = 10, /* symbol s of an escaped exponent (FORMAT.md 4.5)  */
    ZCF_T_ESC = 13,    /* T: window positions 0..12, 13 = escape           */
    ZCF_T_SHAPES = 32, /* T: shape = 8a + b (FORMAT.md 4.6)                */
    ZCF_T_SAMPLE = 1024,
    ZCF_T_BINS = 27,   /* sample histogram: exponents k-14 .. k+12        */
    ZCF_R_LANES = 32,
    ZCF_R_ESC = 15,
    ZCF_R_PROB_BITS = 12,
    ZCF_R_M = 1 << 12,
    ZCF_R_L = 1 << 16,
    ZCF_SAMPLE = 256,
    ZCF_EST_BIAS8 = 11 /* round(8 * 1.4164): log2(sigma) - E[exponent] */
};

/* Per-dtype geometry (dt is a ZCF_DT_* code). */
ZIPCCL_HD int zcf_elem_size(int dt) { return dt == ZCF_DT_FP32 ? 4 : 2; }
ZIPCCL_HD int zcf_exp_bits(int dt) { return dt == ZCF_DT_FP16 ? 5 : 8; }
ZIPCCL_HD int zcf_mant_bits(int dt) { return dt == ZCF_DT_BF16 ? 7 : dt == ZCF_DT_FP16 ? 10 : 23; }

/* Exponent field of an element given as its raw bits (u16 or u32). */
ZIPCCL_HD uint32_t zcf_exponent(int dt, uint32_t bits) {
    int m = zcf_mant_bits(dt);
    return (bits >> m) & ((1u << zcf_exp_bits(dt)) - 1u);
}

/* Bytes of the rest section (FORMAT.md 4.1) for a chunk of n elements. */
ZIPCCL_HD size_t zcf_rest_size(int dt, size_t n) {
    size_t groups = (n + 63) / 64;
    if (dt == ZCF_DT_BF16) return n;
    if (dt == ZCF_DT_FP16) return n + 24 * groups;
    return 3 * n;
}

/* Number of chunks for count elements. */
ZIPCCL_HD size_t zcf_num_chunks(uint64_t count, int chunk_log2) {
    return (size_t)((count + ((1ull << chunk_log2) - 1)) >> chunk_log2);
}

/* Element k (0 <= k < s) of the reference encoders' sample of a chunk of n
 * elements (FORMAT.md §7): every element when n <= s, otherwise the lattice
 * k * step mod n with step = floor(0.618 n) made odd. Not evenly spaced
 * (k n / s): that stride is a power of two for full chunks, so in a chunk of
 * a matrix whose rows are a power of two long it meets the same few columns
 * in every row (8 of 128 for a 128-wide gradient), and gradients and
 * activations have per-column scales. An odd step meets every column and
 * many rows. k * step < 2^30 for n <= 2^20 and s <= 1024. */
ZIPCCL_HD size_t zcf_sample_index(size_t k, size_t n, size_t s) {
    if (n <= s) return k;
    uint32_t step = (uint32_t)(((uint64_t)n * 0x9E3779B9u) >> 32) | 1u;
    return (size_t)(((uint64_t)k * step) % n);
}

/* Reference encoder's scale estimate (FORMAT.md section 7): returns s8, an
 * estimate of 8*log2(sigma) in exponent-field units, from a fixed sample of
 * at most 256 elements. `load(ctx, i)` returns the raw bits of element i. */
ZIPCCL_HD int zcf_estimate_s8_u16(int dt, const uint16_t* x, size_t n) {
    size_t s = n < (size_t)ZCF_SAMPLE ? n : (size_t)ZCF_SAMPLE;
    uint32_t emax = (1u << zcf_exp_bits(dt)) - 1u;
    uint64_t sum = 0, cnt = 0;
    for (size_t k = 0; k < s; k++) {
        uint32_t e = zcf_exponent(dt, x[zcf_sample_index(k, n, s)]);
        if (e > 0 && e < emax) { sum += e; cnt++; }
    }
    if (cnt == 0) return 40;
    return (int)((8 * sum + cnt / 2) / cnt) + ZCF_EST_BIAS8;
}
ZIPCCL_HD int zcf_estimate_s8_u32(const uint32_t* x, size_t n) {
    size_t s = n < (size_t)ZCF_SAMPLE ? n : (size_t)ZCF_SAMPLE;
    uint64_t sum = 0, cnt = 0;
    for (size_t k = 0; k < s; k++) {
        uint32_t e = zcf_exponent(ZCF_DT_FP32, x[zcf_sample_index(k, n, s)]);
        if (e > 0 && e < 255) { sum += e; cnt++; }
    }
    if (cnt == 0) return 40;
    return (int)((8 * sum + cnt / 2) / cnt) + ZCF_EST_BIAS8;
}

/* Window tops chosen by the reference encoders from s8. */
ZIPCCL_HD uint32_t zcf_clamp_top(int dt, int top) {
    int emax = (1 << zcf_exp_bits(dt)) - 1;
    return (uint32_t)(top < 0 ? 0 : top > emax ? emax : top);
}
ZIPCCL_HD uint32_t zcf_f3_top(int dt, int s8) {
    return zcf_clamp_top(dt, s8 / 8 + 1 + ((s8 & 7) >= 6 ? 1 : 0));
}
ZIPCCL_HD uint32_t zcf_f2_top(int dt, int s8) {
    return zcf_clamp_top(dt, s8 / 8 + 1 + ((s8 & 7) >= 4 ? 1 : 0));
}
/* F2 (FORMAT.md 4.5): symbol s (0..10) <-> primary code p (0..3) and, for
 * p = 3, secondary code q (0..7). */
ZIPCCL_HD uint32_t zcf_f2_primary(uint32_t s) { return s >= 1 && s <= 3 ? s - 1 : 3; }
ZIPCCL_HD uint32_t zcf_f2_secondary(uint32_t s) { return s == 0 ? 0 : s - 3; }
ZIPCCL_HD uint32_t zcf_f2_symbol(uint32_t p, uint32_t q) { return p < 3 ? p + 1 : q == 0 ? 0 : q + 3; }

/* T (FORMAT.md 4.6): window position d (0..12, 13 = escape) <-> rank r
 * (0..2 tier 1, 3..5 tier 2, 6..12 tier 3, 13 escape) for shape 8a + b:
 * tier 1 holds positions a+b .. a+b+2, tier 2 a positions above them and
 * 3-a below, tier 3 b above and 7-b below. */
ZIPCCL_HD uint32_t zcf_t_rank(uint32_t shape, uint32_t d) {
    uint32_t a = shape >> 3, b = shape & 7;
    if (d >= ZCF_T_ESC) return ZCF_T_ESC;
    if (d >= a + b && d < a + b + 3) return d - a - b;
    if (d >= b && d < a + b) return 3 + d - b;
    if (d >= a + b + 3 && d < b + 6) return d - b;
    return d < b ? 6 + d : d;
}
ZIPCCL_HD uint32_t zcf_t_pos(uint32_t shape, uint32_t r) {
    uint32_t a = shape >> 3, b = shape & 7;
    if (r < 3) return a + b + r;
    if (r < 6) return r - 3 < a ? b + r - 3 : b + r;
    if (r < 13) return r - 6 < b ? r - 6 : r;
    return ZCF_T_ESC;
}

/* s8 (FORMAT.md §7.1) from the sum and number of the sample's normal
 * exponents. */
ZIPCCL_HD int zcf_s8_of(uint64_t sum, uint64_t cnt) {
    if (cnt == 0) return 40;
    return (int)((8 * sum + cnt / 2) / cnt) + ZCF_EST_BIAS8;
}

/* The reference encoders' T choice (FORMAT.md §7.2): h[i] counts the
 * sample's exponents equal to k - 14 + i, k = s8 / 8. Over the candidates
 * c = k-2 .. k+2 (the exponent of tier 1's first position) and shapes
 * 0..31, in that order, the first with the fewest code bits on the sample
 * wins (an element outside the window costs 15 bits whatever is chosen, so
 * only the savings against 15 are compared). Candidates whose top = c + a + b
 * lies outside 0 .. emax are skipped; returns 0 if none is left. */
ZIPCCL_HD int zcf_t_pick(const uint32_t* h, int k, int emax, uint32_t* top, uint32_t* shape) {
    uint32_t P[ZCF_T_BINS + 1]; /* prefix sums: P[i] = h[0] + ... + h[i-1] */
    P[0] = 0;
    for (int i = 0; i < ZCF_T_BINS; i++) P[i + 1] = P[i] + h[i];
    int found = 0;
    uint32_t best = 0;
    for (int c = k - 2; c <= k + 2; c++)
        for (int j = 0; j < ZCF_T_SHAPES; j++) {
            int a = j >> 3, b = j & 7, t = c + a + b;
            if (t < 0 || t > emax) continue;
            /* exponents [lo, hi] -> bins [lo - k + 14, hi - k + 14] */
#define ZCF_T_CNT(lo, hi) (P[(hi) - k + 15] - P[(lo) - k + 14])
            uint32_t n1 = ZCF_T_CNT(c - 2, c);
            uint32_t n2 = ZCF_T_CNT(c + 1, c + a) + ZCF_T_CNT(c - 5 + a, c - 3);
            uint32_t n3 = ZCF_T_CNT(c + a + 1, c + a + b) + ZCF_T_CNT(c - 12 + a + b, c - 6 + a);
#undef ZCF_T_CNT
            uint32_t save = 13 * n1 + 11 * n2 + 8 * n3;
            if (!found || save > best) { found = 1; best = save; *top = (uint32_t)t; *shape = (uint32_t)j; }
        }
    return found;
}

/* The reference encoders' R choice (FORMAT.md §7 item 2), from T's sample
 * histogram h (bins k-14 .. k+12, k = s8 / 8): over tail classes c = 0..4,
 * tables t = 0..7 (table 8c + t) and tops k + 2 + off[c] + dt, dt = -1, 0,
 * 1, in that order, the first with the fewest code bits on the sample wins
 * (cost: zipccl_rans_cost, 1/256 bits, off: zipccl_rans_top_off, passed in
 * so that device code reads its own copies; off[c] + 2 + dt must lie in
 * 1..6). Every window lies inside the bins, so the S - sum(h) sampled
 * exponents outside them (S = min(n, ZCF_T_SAMPLE) for a chunk of n)
 * escape whatever is chosen, at the candidate table's escape cost. Tops
 * outside 0 .. 2^E - 1 are skipped; if none is left, the version 1 rule
 * (top k + 2 clamped, table s8 mod 8). */
ZIPCCL_HD void zcf_r_pick(const uint32_t* h, size_t n, int s8, int dt, const uint16_t (*cost)[ZIPCCL_RANS_NSYM],
                          const uint8_t* off, uint32_t* top, uint32_t* table) {
    const int k = s8 / 8, emax = (1 << zcf_exp_bits(dt)) - 1;
    const uint32_t S = (uint32_t)(n < (size_t)ZCF_T_SAMPLE ? n : (size_t)ZCF_T_SAMPLE);
    /* A top tp = k + j (j = 1..6) puts exponent k - 14 + i at symbol
     * d = j + 14 - i: its window is bins j .. j + 14. w[j][d] counts the
     * sampled exponents of symbol d, w[j][15] the escapes (all others), so a
     * candidate's code bits are one 16-term dot product. */
    uint32_t w[7][ZIPCCL_RANS_NSYM];
    for (int j = 1; j <= 6; j++) {
        uint32_t in = 0;
        for (int d = 0; d < 15; d++) in += w[j][d] = h[j + 14 - d];
        w[j][15] = S - in;
    }
    int found = 0;
    uint32_t best = 0;
    for (int c = 0; c < ZIPCCL_RANS_NCLASSES; c++)
        for (int t = 0; t < 8; t++)
            for (int dt = -1; dt <= 1; dt++) {
                const int j = 2 + off[c] + dt, tp = k + j, tb = 8 * c + t;
                if (tp < 0 || tp > emax) continue;
                uint32_t score = 0;
                for (int s = 0; s < ZIPCCL_RANS_NSYM; s++) score += w[j][s] * cost[tb][s];
                if (!found || score < best) { found = 1; best = score; *top = (uint32_t)tp; *table = (uint32_t)tb; }
            }
    if (!found) {
        *top = zcf_clamp_top(dt, k + 2);
        *table = (uint32_t)(s8 & 7);
    }
}

/* Little-endian loads/stores that never assume alignment. */
ZIPCCL_HD uint16_t zcf_ld16(const uint8_t* p) { return (uint16_t)(p[0] | (p[1] << 8)); }
ZIPCCL_HD uint32_t zcf_ld32(const uint8_t* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
ZIPCCL_HD uint64_t zcf_ld64(const uint8_t* p) {
    return (uint64_t)zcf_ld32(p) | ((uint64_t)zcf_ld32(p + 4) << 32);
}
ZIPCCL_HD void zcf_st16(uint8_t* p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
ZIPCCL_HD void zcf_st32(uint8_t* p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
ZIPCCL_HD void zcf_st64(uint8_t* p, uint64_t v) { zcf_st32(p, (uint32_t)v); zcf_st32(p + 4, (uint32_t)(v >> 32)); }

#endif
