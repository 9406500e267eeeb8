/*
 * codec_boundary.h — inputs whose coded chunk lands exactly on the raw
 * chunk's size, for the CPU codec's test (tests/test_codec.c), the CUDA
 * codec's emulation (tests/gpu/cuda_emu.cc) and its device test
 * (tests/gpu/test_gpu_codec.cu), through codec_cases.h's cc_boundary.
 *
 * Why: a chunk is coded only when its coding is smaller than its raw chunk
 * (FORMAT.md §7 item 5), and every encoder tests that its own way (the CUDA
 * encoders while the chunk grows, group by group). Gaussian data lands far
 * from the boundary, so an encoder that kept a coding of exactly raw bytes
 * (the CUDA R encoder's `< raw` made `<= raw`) or sent a coding of raw - 1
 * bytes raw passed every check before these cases
 * (tests/mutate_codec_boundary.sh plants both kinds in every encoder).
 * Here, for each codec that codes (fast: T, f2, f3, dense: R), each dtype
 * and two chunk lengths (a full first chunk, a short last one), a search
 * finds chunks whose coding takes exactly raw - 1 bytes (the largest an
 * encoder may keep: its escapes fill the room but for one byte), raw (they
 * fill it exactly: the chunk must go raw) and raw + 1.
 *
 * How: a chunk of Gaussian elements (scale spread by the seed, so that T
 * takes several tail shapes and R several tail classes) gets k escapes, at
 * elements outside the encoders' samples (so the choices of window, shape
 * and table stay put as k grows), the chunk's last element first; a size
 * function (zcb_coded, the format's sizes under the reference encoders'
 * choices, FORMAT.md §4 and §7) gives the coded size whatever raw is, and a
 * bisection over k, then a few neighbours, hits the target or moves to the
 * next seed. Deterministic (own splitmix64 stream); a few ms per case.
 * What it leaves out: C chunks (constant; they never meet the boundary),
 * checksums (frame-level; the runners vary them) and the frame's own
 * boundary (compressed frame against stored, FORMAT.md §7 item 6).
 *
 * The size function is the generator's, not a check of the encoders: the
 * runners check the encoders' frames (the CPU's against FORMAT.md's
 * reference encoder in test_codec.c, which also checks zcb_coded's sizes).
 * Plain C, compiles as C++ too.
 */
#ifndef ZIPCCL_TEST_CODEC_BOUNDARY_H
#define ZIPCCL_TEST_CODEC_BOUNDARY_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec_format.h"
#include "codec_tables.h"
#include "zipccl.h"

#define ZCB_CHUNK 16384   /* the encoders' chunk (chunk_log2 14)                 */
#define ZCB_FILLER 1000   /* the coded chunk after a full boundary chunk          */
#define ZCB_SHORT 3037    /* a short last chunk: 47 groups and 29 elements, and
                           * more than T's and R's 1024-element sample           */
#define ZCB_SEEDS 64      /* seeds tried per target before giving up             */

/* One frame: a boundary chunk and a filler chunk (Gaussian, coded), so the
 * frame is compressed, not stored, whatever the boundary chunk does. */
typedef struct {
    zipcclDataType_t dt;
    zipcclCodec_t codec;
    int tail;             /* 0: boundary chunk first (full), filler last;
                           * 1: filler first (full), boundary chunk last (short) */
    int delta;            /* its coded size - its raw size: -1, 0 or +1           */
    size_t count;         /* elements of the frame                                */
    size_t index, at, n;  /* the boundary chunk: index, first element, elements   */
    size_t raw, coded;    /* its raw size, its coded size (= raw + delta)         */
    size_t k;             /* escapes planted                                      */
    uint32_t seed;        /* the seed that hit                                    */
    uint32_t top, table;  /* the encoders' window top and table / T shape         */
    uint32_t nesc;        /* escapes of the coding, planted and Gaussian          */
    uint8_t* data;        /* count elements (little-endian); free() it            */
} zcb_case_t;

static inline int zcb_zdt(zipcclDataType_t dt) {
    return dt == zipcclBfloat16 ? ZCF_DT_BF16 : dt == zipcclFloat16 ? ZCF_DT_FP16 : ZCF_DT_FP32;
}
static inline int zcb_mode(zipcclCodec_t c) {
    return c == zipcclCodecDense ? ZCF_MODE_R : c == zipcclCodecF3 ? ZCF_MODE_F3 : c == zipcclCodecF2 ? ZCF_MODE_F2
                                                                                                        : ZCF_MODE_T;
}
static inline uint32_t zcb_get(const uint8_t* x, size_t i, int es) {
    uint32_t v = 0;
    for (int b = 0; b < es; b++) v |= (uint32_t)x[(size_t)es * i + b] << (8 * b);
    return v;
}
static inline void zcb_put(uint8_t* x, size_t i, int es, uint32_t v) {
    for (int b = 0; b < es; b++) x[(size_t)es * i + b] = (uint8_t)(v >> (8 * b));
}

/* ---- the size function ---------------------------------------------------- */

typedef struct {
    size_t size;         /* header included */
    uint32_t top, table; /* table: R's table, T's shape, else 0 */
    uint32_t nesc;
} zcb_coded_t;

/* The symbol of exponent e under a window top: 0..W-1, W = the escape. */
static inline uint32_t zcb_sym(int mode, uint32_t top, uint32_t e) {
    int W = mode == ZCF_MODE_F3 ? 7 : mode == ZCF_MODE_F2 ? 10 : mode == ZCF_MODE_T ? 13 : 15;
    int d = (int)top - (int)e;
    return (uint32_t)(d >= 0 && d < W ? d : W);
}

/* The size of the n-element chunk x coded in `mode` (ZCF_MODE_F3, R, F2 or
 * T) with the reference encoders' choices (FORMAT.md §7 items 1-3), whatever
 * its raw size: what the encoders write when it is smaller than raw. Returns
 * 0 where T has no valid candidate (the chunk goes raw). */
static inline int zcb_coded(int dt, int mode, const uint8_t* x, size_t n, zcb_coded_t* o) {
    const int es = zcf_elem_size(dt);
    const uint32_t emax = (1u << zcf_exp_bits(dt)) - 1u;
    const size_t G = (n + 63) / 64, rest = zcf_rest_size(dt, n);
    const size_t smax = mode == ZCF_MODE_F3 || mode == ZCF_MODE_F2 ? (size_t)ZCF_SAMPLE : (size_t)ZCF_T_SAMPLE;
    const size_t S = n < smax ? n : smax;
    uint64_t sum = 0, cnt = 0;
    for (size_t k = 0; k < S; k++) {
        uint32_t e = zcf_exponent(dt, zcb_get(x, zcf_sample_index(k, n, S), es));
        if (e > 0 && e < emax) { sum += e; cnt++; }
    }
    const int s8 = zcf_s8_of(sum, cnt);
    uint32_t top = 0, table = 0;
    if (mode == ZCF_MODE_F3) top = zcf_f3_top(dt, s8);
    else if (mode == ZCF_MODE_F2) top = zcf_f2_top(dt, s8);
    else {
        uint32_t h[ZCF_T_BINS];
        memset(h, 0, sizeof h);
        const int kk = s8 / 8;
        for (size_t k = 0; k < S; k++) {
            int i = (int)zcf_exponent(dt, zcb_get(x, zcf_sample_index(k, n, S), es)) - (kk - 14);
            if (i >= 0 && i < ZCF_T_BINS) h[i]++;
        }
        if (mode == ZCF_MODE_T) {
            if (!zcf_t_pick(h, kk, (int)emax, &top, &table)) return 0;
        } else {
            zcf_r_pick(h, n, s8, dt, zipccl_rans_cost, zipccl_rans_top_off, &top, &table);
        }
    }
    size_t nesc = 0, m2 = 0, m3 = 0, size = 8 + rest;
    const uint32_t W = mode == ZCF_MODE_F3 ? 7 : mode == ZCF_MODE_F2 ? 10 : mode == ZCF_MODE_T ? 13 : 15;
    if (mode != ZCF_MODE_R) {
        for (size_t i = 0; i < n; i++) {
            uint32_t s = zcb_sym(mode, top, zcf_exponent(dt, zcb_get(x, i, es)));
            nesc += s == W;
            if (mode == ZCF_MODE_F2) m2 += zcf_f2_primary(s) == 3;
            if (mode == ZCF_MODE_T) {
                uint32_t r = zcf_t_rank(table, s);
                m2 += r >= 3;
                m3 += r >= 6;
            }
        }
        if (mode == ZCF_MODE_F3) size += 24 * G;
        if (mode == ZCF_MODE_F2) size += 16 * G + 24 * ((m2 + 63) / 64);
        if (mode == ZCF_MODE_T) size += 16 * G + 16 * ((m2 + 63) / 64) + 24 * ((m3 + 63) / 64);
    } else { /* FORMAT.md §4.4's reference encoder, lane by lane, counting words */
        const uint16_t* f = zipccl_rans_freq[table];
        uint32_t cum[ZIPCCL_RANS_NSYM], c = 0;
        for (int s = 0; s < ZIPCCL_RANS_NSYM; s++) { cum[s] = c; c += f[s]; }
        size += 2 * ZCF_R_LANES;
        for (size_t l = 0; l < ZCF_R_LANES && l < n; l++) {
            size_t nl = (n - l + 31) / 32, nw = 0;
            uint32_t st = ZCF_R_L;
            for (size_t j = nl; j-- > 0;) {
                uint32_t s = zcb_sym(mode, top, zcf_exponent(dt, zcb_get(x, 32 * j + l, es))), fs = f[s];
                nesc += s == W;
                if ((uint64_t)st >= (uint64_t)fs << 20) { nw++; st >>= 16; }
                st = ((st / fs) << ZCF_R_PROB_BITS) + st % fs + cum[s];
            }
            size += 4 + 2 * nw;
        }
    }
    o->size = size + nesc;
    o->top = top;
    o->table = table;
    o->nesc = (uint32_t)nesc;
    return 1;
}

/* ---- the search ------------------------------------------------------------ */

static inline uint64_t zcb_next(uint64_t* st) { /* splitmix64 */
    uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline double zcb_gauss(uint64_t* st) {
    double u1 = ((zcb_next(st) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = ((zcb_next(st) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
/* f rounded to the dtype (nearest even; the values stay normal and finite) */
static inline uint32_t zcb_from_float(int dt, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (dt == ZCF_DT_FP32) return u;
    if (dt == ZCF_DT_BF16) return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a < 0x38800000u) return sign;       /* below fp16's normals: zero (an escape too) */
    if (a >= 0x477FF000u) return sign | 0x7BFFu; /* the largest finite */
    return sign | ((a + 0xFFFu + ((a >> 13) & 1u) - 0x38000000u) >> 13);
}
/* n Gaussian elements, sigma 1, their log2 scale spread by tau */
static inline void zcb_gaussian(int dt, uint8_t* x, size_t n, double tau, uint64_t seed) {
    uint64_t st = seed;
    for (size_t i = 0; i < n; i++) {
        double g = zcb_gauss(&st), v = g * exp2(tau * zcb_gauss(&st));
        zcb_put(x, i, zcf_elem_size(dt), zcb_from_float(dt, (float)v));
    }
}
/* The escape planted at element i: exponent 0 (a zero or subnormal) or
 * 2^E - 1 (an infinity or NaN), random sign and mantissa: outside every
 * window of σ = 1 data, and neither counts in the samples' statistics. */
static inline uint32_t zcb_escape(int dt, size_t i, uint64_t seed) {
    uint64_t st = seed ^ (0xD1B54A32D192ED03ull * (i + 1));
    uint32_t r = (uint32_t)zcb_next(&st), M = (uint32_t)zcf_mant_bits(dt), E = (uint32_t)zcf_exp_bits(dt);
    uint32_t sign = (r >> 31) << (M + E), mant = r & ((1u << M) - 1u), e = (r >> 30) & 1u ? (1u << E) - 1u : 0u;
    return sign | e << M | mant;
}

/* x = base with escapes at order[0, k), from x with them at order[0, *have). */
static inline void zcb_move(uint8_t* x, const uint8_t* base, const size_t* order, size_t* have, int es, int dt,
                            uint64_t seed, size_t k) {
    for (; *have < k; ++*have) zcb_put(x, order[*have], es, zcb_escape(dt, order[*have], seed));
    for (; *have > k; --*have) memcpy(x + order[*have - 1] * es, base + order[*have - 1] * es, (size_t)es);
}

/* Finds the case (dt, codec, tail, delta): 1 with *c filled (c->data
 * malloc'ed), 0 if no seed of ZCB_SEEDS gives it. */
static inline int zcb_find(zipcclDataType_t dtype, zipcclCodec_t codec, int tail, int delta, zcb_case_t* c) {
    const int dt = zcb_zdt(dtype), es = zcf_elem_size(dt), mode = zcb_mode(codec);
    const size_t n = tail ? ZCB_SHORT : ZCB_CHUNK, fill = tail ? ZCB_CHUNK : ZCB_FILLER;
    memset(c, 0, sizeof *c);
    c->dt = dtype;
    c->codec = codec;
    c->tail = tail;
    c->delta = delta;
    c->count = n + fill;
    c->index = tail ? 1 : 0;
    c->at = tail ? ZCB_CHUNK : 0;
    c->n = n;
    c->raw = 8 + n * (size_t)es;
    c->data = (uint8_t*)malloc(c->count * (size_t)es);
    zcb_gaussian(dt, c->data + (tail ? 0 : n * (size_t)es), fill, 0.0, 0xF111E5ull);
    uint8_t* x = c->data + c->at * (size_t)es;
    uint8_t* base = (uint8_t*)malloc(n * (size_t)es);
    size_t* order = (size_t*)malloc(n * sizeof(size_t));
    uint8_t* sampled = (uint8_t*)calloc(n, 1);
    const size_t S = n < (size_t)ZCF_T_SAMPLE ? n : (size_t)ZCF_T_SAMPLE; /* holds F3's and F2's 256 */
    for (size_t k = 0; k < S; k++) sampled[zcf_sample_index(k, n, S)] = 1;
    const size_t target = delta < 0 ? c->raw - (size_t)-delta : c->raw + (size_t)delta;
    int found = 0;
    for (uint32_t seed = 0; seed < ZCB_SEEDS && !found; seed++) {
        uint64_t st = 0xB0DA0000ull + 977ull * seed + 131ull * (uint64_t)mode + (uint64_t)dt;
        /* the spread cycles with the seed, from a point that depends on the
         * case, so the cases' chunks take several T shapes and R tables */
        zcb_gaussian(dt, base, n, 0.4 * ((seed + 3 * (uint32_t)tail + (uint32_t)(delta + 1)) % 4), zcb_next(&st));
        /* escape order: the last element (if outside the sample), then the
         * others outside the sample, shuffled */
        size_t m = 0;
        if (!sampled[n - 1]) order[m++] = n - 1;
        for (size_t i = 0; i + 1 < n; i++)
            if (!sampled[i]) order[m++] = i;
        for (size_t i = m - 1; i > 1; i--) {
            size_t j = 1 + (size_t)(zcb_next(&st) % i), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        /* x holds base with escapes at order[0, have) */
        memcpy(x, base, n * (size_t)es);
        size_t have = 0;
        zcb_coded_t o;
        /* the smallest k whose size reaches the target (sizes grow with k,
         * by one byte and plane groups; R's lanes by words) */
        size_t lo = 0, hi = m;
        zcb_move(x, base, order, &have, es, dt, seed, hi);
        if (!zcb_coded(dt, mode, x, n, &o) || o.size < target) continue;
        zcb_move(x, base, order, &have, es, dt, seed, 0);
        if (!zcb_coded(dt, mode, x, n, &o) || o.size > target) continue;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            zcb_move(x, base, order, &have, es, dt, seed, mid);
            if (zcb_coded(dt, mode, x, n, &o) && o.size >= target) hi = mid;
            else lo = mid + 1;
        }
        for (size_t k = lo > 4 ? lo - 4 : 0; k <= lo + 4 && k <= m && !found; k++) {
            zcb_move(x, base, order, &have, es, dt, seed, k);
            if (zcb_coded(dt, mode, x, n, &o) && o.size == target) {
                found = 1;
                c->k = k;
                c->seed = seed;
                c->coded = o.size;
                c->top = o.top;
                c->table = o.table;
                c->nesc = o.nesc;
            }
        }
    }
    free(base);
    free(order);
    free(sampled);
    return found;
}

/* The boundary chunk's size in a compressed frame f of c (its chunk-table
 * entry), or 0 for a stored frame. */
static inline size_t zcb_chunk_size(const zcb_case_t* c, const uint8_t* f, size_t size) {
    if (size < 16 + 8 || (f[6] & ZCF_FLAG_STORED)) return 0;
    return zcf_ld32(f + 16 + 4 * c->index);
}
/* Its mode byte in f (-1 for a stored frame). */
static inline int zcb_chunk_mode(const zcb_case_t* c, const uint8_t* f, size_t size) {
    if (size < 16 + 8 || (f[6] & ZCF_FLAG_STORED)) return -1;
    size_t pos = 16 + 8 + (f[6] & ZCF_FLAG_CHECKSUM ? 4 + 8 : 0);
    if (c->index == 1) pos += zcf_ld32(f + 16);
    return pos < size ? f[pos] : -1;
}

#endif
