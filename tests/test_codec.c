// test: timeout=300
/*
 * test_codec.c — the CPU codec against docs/FORMAT.md.
 *
 * The independent reference is a small encoder written here straight from
 * FORMAT.md (§2–§4 and the §7 choices, plain loops and plain division, no
 * code shared with comm/codec/codec_cpu.c): every frame the library writes, on
 * every SIMD path, must equal the reference bytes, and must decode back to
 * the input bit for bit. Then the decoder is attacked: truncations, bit
 * flips, hostile headers and chunks, and it must answer with an error code.
 *
 * ZIPCCL_TEST_LONG=1 widens the random sweeps.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <xxhash.h>

#include "codec_format.h" /* ZCF_VERSION: the newest version the codec reads */
#include "codec_tables.h" /* the normative rANS tables of FORMAT.md §5 */
#include "gpu/codec_boundary.h" /* chunks coded to raw - 1, raw, raw + 1 bytes */
#include "testutil.h"
#include "zipccl.h"

/* AddressSanitizer's build (make asan-all): GCC and clang say so */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

/* ------------------------------------------------------------------------ */
/* Data                                                                      */
/* ------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double gauss(void) {
    double u = ((rnd() >> 11) + 1) * (1.0 / 9007199254740993.0), v = (rnd() >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static uint16_t f32_to_bf16(float f) { uint32_t u = f32_bits(f); return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16); }
static uint16_t f32_to_f16(float f) { /* round to nearest even; no _Float16 needed */
    uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000, a = u & 0x7FFFFFFF;
    if (a >= 0x7F800000) return (uint16_t)(sign | 0x7C00 | (a > 0x7F800000 ? 0x200 : 0));
    if (a >= 0x477FF000) return (uint16_t)(sign | 0x7C00);                       /* >= 65520: inf */
    if (a < 0x38800000) return (uint16_t)(sign | (uint32_t)lrintf(fabsf(f) * 16777216.0f)); /* subnormal */
    uint32_t r = a - 0x38000000;
    r += 0xFFF + ((r >> 13) & 1);
    return (uint16_t)(sign | (r >> 13));
}

static size_t esize(zipcclDataType_t dt) { return zipcclTypeSize(dt); }

/* count Gaussian elements of sigma into a new buffer */
static uint8_t* make_gauss(zipcclDataType_t dt, size_t count, double sigma) {
    uint8_t* p = malloc(count * esize(dt) + 1);
    for (size_t i = 0; i < count; i++) {
        float f = (float)(gauss() * sigma);
        if (dt == zipcclBfloat16) { uint16_t v = f32_to_bf16(f); memcpy(p + 2 * i, &v, 2); }
        else if (dt == zipcclFloat16) { uint16_t v = f32_to_f16(f); memcpy(p + 2 * i, &v, 2); }
        else memcpy(p + 4 * i, &f, 4);
    }
    return p;
}

/* ------------------------------------------------------------------------ */
/* Reference encoder, from FORMAT.md only                                    */
/* ------------------------------------------------------------------------ */

/* The frequency tables are the normative ones of FORMAT.md §5 (the header
 * the codecs compile; tests/test_codec_tables.sh holds it to the generator
 * and the document). Tables 0..7, those of version 1-3 frames, as they were
 * written before the tail classes: check_v1_tables holds the header to them,
 * so old frames decode as they did. */
#define REF_F zipccl_rans_freq
static const uint16_t REF_F_V1[8][16] = {
    {1, 227, 1158, 1195, 732, 385, 195, 98, 49, 24, 12, 6, 3, 2, 1, 8},
    {2, 322, 1224, 1150, 678, 354, 179, 90, 45, 22, 11, 6, 3, 1, 1, 8},
    {5, 434, 1276, 1092, 628, 325, 164, 82, 41, 21, 10, 5, 3, 1, 1, 8},
    {13, 559, 1306, 1031, 580, 299, 150, 75, 38, 19, 9, 5, 2, 1, 1, 8},
    {28, 692, 1314, 969, 535, 274, 138, 69, 35, 17, 9, 4, 2, 1, 1, 8},
    {53, 824, 1304, 908, 493, 252, 127, 63, 32, 16, 8, 4, 2, 1, 1, 8},
    {93, 950, 1280, 847, 454, 231, 116, 58, 29, 15, 7, 4, 2, 1, 1, 8},
    {150, 1063, 1243, 788, 418, 212, 107, 53, 27, 13, 7, 3, 2, 1, 1, 8},
};

typedef struct { int code, es, E, M; } ref_dt_t;
static ref_dt_t ref_dt(zipcclDataType_t dt) {
    if (dt == zipcclBfloat16) return (ref_dt_t){1, 2, 8, 7};
    if (dt == zipcclFloat16) return (ref_dt_t){2, 2, 5, 10};
    return (ref_dt_t){3, 4, 8, 23};
}
/* FORMAT.md §7: sample element k of s from a chunk of n: all when n <= s,
 * else k * (floor(n * 2654435769 / 2^32) | 1) mod n. */
static size_t ref_sample(size_t k, size_t n, size_t s) {
    if (n <= s) return k;
    unsigned long long step = ((unsigned long long)n * 2654435769ull / 4294967296ull) | 1ull;
    return (size_t)(k * step % n);
}

static uint32_t ref_get(const uint8_t* p, size_t i, int es) {
    uint32_t v = 0;
    for (int b = 0; b < es; b++) v |= (uint32_t)p[es * i + b] << (8 * b);
    return v;
}
static void put32(uint8_t* p, uint32_t v) { for (int b = 0; b < 4; b++) p[b] = (uint8_t)(v >> (8 * b)); }
static void put64(uint8_t* p, uint64_t v) { for (int b = 0; b < 8; b++) p[b] = (uint8_t)(v >> (8 * b)); }
static uint32_t get32(const uint8_t* p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

/* The chunk mode each codec writes (FORMAT.md §7), and the codecs that
 * compress in turn: fast, dense, f3 (stored skipped). */
static int mode_of(int codec) {
    return codec == zipcclCodecDense ? 2 : codec == zipcclCodecF3 ? 1 : codec == zipcclCodecF2 ? 3 : 4;
}
static int next_coded(int codec) { return codec == zipcclCodecDense ? zipcclCodecF3 : codec + 1; }
#define LAST_CODEC zipcclCodecF2

/* T (FORMAT.md 4.6), written from the text: the tier and code of window
 * position d under shape (a, b), as a rank 0..13. */
static int ref_t_rank(int a, int b, int d) {
    if (d < 0 || d > 12) return 13;
    int t1 = a + b;                                    /* tier 1: t1, t1+1, t1+2 */
    if (d >= t1 && d <= t1 + 2) return d - t1;
    int k = 0;                                         /* tier 2, in increasing d */
    for (int x = b; x < t1; x++, k++) if (x == d) return 3 + k;
    for (int x = t1 + 3; x < t1 + 3 + 3 - a; x++, k++) if (x == d) return 3 + k;
    k = 0;                                             /* tier 3, in increasing d */
    for (int x = 0; x < b; x++, k++) if (x == d) return 6 + k;
    for (int x = t1 + 6 - a; x <= 12; x++, k++) if (x == d) return 6 + k;
    return -1; /* not reached */
}
static const int REF_T_LEN[14] = {2, 2, 2, 4, 4, 4, 7, 7, 7, 7, 7, 7, 7, 15};

/* The sample of FORMAT.md §7 item 3: its S = min(n, 1024) exponents into
 * e (caller frees), its s8 (from the normal ones) into *s8. */
static size_t ref_sample_exps(const uint8_t* x, size_t n, int es, int M, int emax, int** e, int* s8) {
    size_t S = n < 1024 ? n : 1024;
    uint64_t sum = 0, cnt = 0;
    *e = malloc(sizeof(int) * (S + 1));
    for (size_t k = 0; k < S; k++) {
        (*e)[k] = (int)((ref_get(x, ref_sample(k, n, S), es) >> M) & (uint32_t)emax);
        if ((*e)[k] > 0 && (*e)[k] < emax) { sum += (uint64_t)(*e)[k]; cnt++; }
    }
    *s8 = cnt ? (int)((8 * sum + cnt / 2) / cnt) + 11 : 40;
    return S;
}

/* FORMAT.md §7.2 by brute force: every candidate's code length summed over
 * the sample element by element. Returns 0 if no candidate is valid. */
static int ref_t_choose(const uint8_t* x, size_t n, int es, int M, int emax, int* top, int* shape) {
    int *e, s8;
    size_t S = ref_sample_exps(x, n, es, M, emax, &e, &s8);
    int kk = s8 / 8, found = 0;
    long best = 0;
    for (int c = kk - 2; c <= kk + 2; c++)
        for (int j = 0; j < 32; j++) {
            int a = j / 8, b = j % 8, t = c + a + b;
            if (t < 0 || t > emax) continue;
            long bits = 0;
            for (size_t k = 0; k < S; k++) bits += REF_T_LEN[ref_t_rank(a, b, t - e[k])];
            if (!found || bits < best) { found = 1; best = bits; *top = t; *shape = j; }
        }
    free(e);
    return found;
}

/* FORMAT.md §7 item 2 by brute force: over tail classes c (window tops k + 2 +
 * o[c], o = 0, 1, 2, 3, 3), tables 8c + t and tops one either side, every
 * candidate's code length summed over the 1024-element sample element by
 * element, with code lengths round(256 log2(4096 / f)) (+ 8 bits for an
 * escape) from the normative frequency tables. */
static void ref_r_choose(const uint8_t* x, size_t n, int es, int M, int emax, int* top, int* table) {
    static const int off[5] = {0, 1, 2, 3, 3};
    int *e, s8;
    size_t S = ref_sample_exps(x, n, es, M, emax, &e, &s8);
    int kk = s8 / 8, found = 0;
    long best = 0;
    for (int c = 0; c < 5; c++)
        for (int t = 0; t < 8; t++)
            for (int dt = -1; dt <= 1; dt++) {
                int tp = kk + 2 + off[c] + dt, tb = 8 * c + t;
                if (tp < 0 || tp > emax) continue;
                long bits = 0;
                for (size_t k = 0; k < S; k++) {
                    int d = tp - e[k], sym = d >= 0 && d <= 14 ? d : 15;
                    bits += lround(256.0 * log2(4096.0 / zipccl_rans_freq[tb][sym])) + (sym == 15 ? 2048 : 0);
                }
                if (!found || bits < best) { found = 1; best = bits; *top = tp; *table = tb; }
            }
    if (!found) { *top = kk + 2 > emax ? emax : kk + 2; *table = s8 % 8; }
    free(e);
}

/* Planes of `w` words per 64 entries from m values v (bit k of v[i] at
 * bit i%64 of word k of group i/64); returns the bytes written. */
static size_t ref_planes(uint8_t* out, const uint8_t* v, size_t m, int w) {
    size_t H = (m + 63) / 64;
    memset(out, 0, 8 * (size_t)w * H);
    for (size_t i = 0; i < m; i++)
        for (int k = 0; k < w; k++)
            if (v[i] >> k & 1) out[8 * (size_t)w * (i / 64) + 8 * k + (i % 64) / 8] |= (uint8_t)(1u << (i % 8));
    return 8 * (size_t)w * H;
}

/* One chunk per FORMAT.md §4 (mode 1, 2, 3 or 4), raw if not smaller; the
 * coded size it compared with raw is left in ref_coded_size (0: T had no
 * candidate). */
static size_t ref_coded_size;
static size_t ref_chunk(ref_dt_t d, int mode, const uint8_t* x, size_t n, uint8_t* final) {
    uint8_t* out = malloc(8 + 64 + 8 * n + 48 * ((n + 63) / 64) + 64); /* any encoding fits */
    uint32_t emax = (1u << d.E) - 1;
    size_t S = n < 256 ? n : 256;
    uint64_t sum = 0, cnt = 0;
    for (size_t k = 0; k < S; k++) {
        uint32_t e = (ref_get(x, ref_sample(k, n, S), d.es) >> d.M) & emax;
        if (e > 0 && e < emax) { sum += e; cnt++; }
    }
    int s8 = cnt ? (int)((8 * sum + cnt / 2) / cnt) + 11 : 40;
    int table = s8 % 8;
    int top = mode == 2 ? s8 / 8 + 2 : mode == 3 ? s8 / 8 + 1 + (table >= 4) : s8 / 8 + 1 + (table >= 6);
    if (top > (int)emax) top = (int)emax;
    int W = mode == 1 ? 7 : mode == 3 ? 10 : mode == 4 ? 13 : 15;
    int tshape = 0, traw = 0;
    if (mode == 4) {
        traw = !ref_t_choose(x, n, d.es, d.M, (int)emax, &top, &tshape);
        table = tshape;
    }
    if (mode == 2) ref_r_choose(x, n, d.es, d.M, (int)emax, &top, &table);
    size_t G = (n + 63) / 64, pos = 8;
    uint8_t* rest = malloc(3 * n + 24 * G + 1);
    uint8_t* esc = malloc(n + 1);
    uint8_t* sym = malloc(n + 1);
    size_t rlen = 0, nesc = 0;
    memset(rest, 0, 3 * n + 24 * G + 1);
    for (size_t i = 0; i < n; i++) {
        uint32_t v = ref_get(x, i, d.es), e = (v >> d.M) & emax;
        int dd = top - (int)e;
        sym[i] = (uint8_t)((dd >= 0 && dd < W) ? dd : W);
        if (sym[i] == W) esc[nesc++] = (uint8_t)e;
        uint32_t sign = v >> (d.es * 8 - 1), mant = v & ((1u << d.M) - 1);
        if (d.code == 1) rest[i] = (uint8_t)(sign << 7 | mant);
        else if (d.code == 2) {
            rest[i] = (uint8_t)(mant & 0xFF);
            uint32_t hb = sign << 2 | mant >> 8;
            for (int k = 0; k < 3; k++)
                if (hb >> k & 1) rest[n + 24 * (i / 64) + 8 * k + (i % 64) / 8] |= (uint8_t)(1u << (i % 8));
        } else {
            rest[i] = (uint8_t)(mant & 0xFF);
            rest[n + i] = (uint8_t)((mant >> 8) & 0xFF);
            rest[2 * n + i] = (uint8_t)(sign << 7 | mant >> 16);
        }
    }
    rlen = d.code == 1 ? n : d.code == 2 ? n + 24 * G : 3 * n;
    out[0] = (uint8_t)mode; out[1] = (uint8_t)top; out[2] = (uint8_t)(mode == 2 || mode == 4 ? table : 0); out[3] = 0;
    put32(out + 4, (uint32_t)nesc);
    if (mode == 1) {
        memcpy(out + pos, rest, rlen); pos += rlen;
        memset(out + pos, 0, 24 * G);
        for (size_t i = 0; i < n; i++)
            for (int k = 0; k < 3; k++)
                if (sym[i] >> k & 1) out[pos + 24 * (i / 64) + 8 * k + (i % 64) / 8] |= (uint8_t)(1u << (i % 8));
        pos += 24 * G;
    } else if (mode == 4) { /* ranks; tier 1 of every element, tiers 2 and 3 of those continuing */
        memcpy(out + pos, rest, rlen); pos += rlen;
        uint8_t* v1 = malloc(n + 1);
        uint8_t* v2 = malloc(n + 1);
        uint8_t* v3 = malloc(n + 1);
        size_t m2 = 0, m3 = 0;
        for (size_t i = 0; i < n; i++) {
            int r = ref_t_rank(tshape / 8, tshape % 8, sym[i] == 13 ? -1 : sym[i]);
            v1[i] = (uint8_t)(r < 3 ? r : 3);
            if (r >= 3) v2[m2++] = (uint8_t)(r < 6 ? r - 3 : 3);
            if (r >= 6) v3[m3++] = (uint8_t)(r - 6);
        }
        pos += ref_planes(out + pos, v1, n, 2);
        pos += ref_planes(out + pos, v2, m2, 2);
        pos += ref_planes(out + pos, v3, m3, 3);
        free(v1); free(v2); free(v3);
    } else if (mode == 3) { /* primary p, then the second tier's q in element order */
        memcpy(out + pos, rest, rlen); pos += rlen;
        memset(out + pos, 0, 16 * G);
        uint8_t* q = malloc(n + 1);
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            int p = sym[i] >= 1 && sym[i] <= 3 ? sym[i] - 1 : 3;
            for (int k = 0; k < 2; k++)
                if (p >> k & 1) out[pos + 16 * (i / 64) + 8 * k + (i % 64) / 8] |= (uint8_t)(1u << (i % 8));
            if (p == 3) q[m++] = (uint8_t)(sym[i] == 0 ? 0 : sym[i] - 3);
        }
        pos += 16 * G;
        size_t H = (m + 63) / 64;
        memset(out + pos, 0, 24 * H);
        for (size_t i = 0; i < m; i++)
            for (int k = 0; k < 3; k++)
                if (q[i] >> k & 1) out[pos + 24 * (i / 64) + 8 * k + (i % 64) / 8] |= (uint8_t)(1u << (i % 8));
        pos += 24 * H;
        free(q);
    } else {
        size_t lane_at = pos; pos += 64;
        memcpy(out + pos, rest, rlen); pos += rlen;
        uint32_t cum[16], c = 0;
        for (int s = 0; s < 16; s++) { cum[s] = c; c += REF_F[table][s]; }
        uint16_t* words = malloc(sizeof(uint16_t) * (n / 32 + 2));
        for (size_t l = 0; l < 32; l++) {
            size_t nl = n > l ? (n - l + 31) / 32 : 0, nw = 0;
            if (!nl) { out[lane_at + 2 * l] = out[lane_at + 2 * l + 1] = 0; continue; }
            uint32_t st = 1u << 16;
            for (size_t k = nl; k-- > 0;) {
                uint32_t s = sym[32 * k + l], f = REF_F[table][s];
                if (st >= (f << 20)) { words[nw++] = (uint16_t)st; st >>= 16; }
                st = ((st / f) << 12) + (st % f) + cum[s];
            }
            size_t ls = 4 + 2 * nw;
            out[lane_at + 2 * l] = (uint8_t)ls; out[lane_at + 2 * l + 1] = (uint8_t)(ls >> 8);
            put32(out + pos, st); pos += 4;
            for (size_t w = nw; w-- > 0;) { out[pos++] = (uint8_t)words[w]; out[pos++] = (uint8_t)(words[w] >> 8); }
        }
        free(words);
    }
    memcpy(out + pos, esc, nesc); pos += nesc;
    free(rest); free(esc); free(sym);
    ref_coded_size = traw ? 0 : pos;
    if (pos >= 8 + n * d.es || traw) {
        memset(out, 0, 8);
        memcpy(out + 8, x, n * d.es);
        pos = 8 + n * d.es;
    }
    memcpy(final, out, pos);
    free(out);
    return pos;
}

/* C (FORMAT.md 4.7), written from the text: codec fast stores a chunk whose
 * n >= 2 elements all have one bit pattern as that value alone (§7.4).
 * Element by element, not memcmp or the encoders' sample. Returns the
 * chunk's size, or 0 if the chunk is not constant. */
static size_t ref_c_chunk(ref_dt_t d, const uint8_t* x, size_t n, uint8_t* out) {
    if (n < 2) return 0;
    for (size_t i = 1; i < n; i++)
        if (ref_get(x, i, d.es) != ref_get(x, 0, d.es)) return 0;
    memset(out, 0, 8);
    out[0] = 5;
    memcpy(out + 8, x, d.es);
    return 8 + d.es;
}

/* Whole frame; returns its size. out must hold the stored bound + 12 per chunk. */
static size_t ref_frame_log2(zipcclDataType_t dtype, int codec, int checksum, const uint8_t* x, size_t count,
                             uint8_t* out, int chunk_log2) {
    ref_dt_t d = ref_dt(dtype);
    size_t C = (size_t)1 << chunk_log2, nc = (count + C - 1) / C, cs = checksum ? 4 + 4 * nc : 0;
    size_t stored = 16 + cs + count * d.es;
    memcpy(out, "ZCC1", 4); out[4] = 1; out[5] = (uint8_t)d.code;
    out[7] = (uint8_t)chunk_log2; put64(out + 8, count);
    if (codec == zipcclCodecFast && count) out[4] = 2; /* version 2: T chunks (FORMAT.md §2) */
    if (codec == zipcclCodecDense && count) out[4] = 4; /* version 4: R tail tables (FORMAT.md §2) */
    if (codec != zipcclCodecStored && count) {
        out[6] = (uint8_t)(checksum ? 1 : 0);
        size_t pos = 16 + 4 * nc + cs;
        for (size_t k = 0; k < nc; k++) {
            size_t n = count - k * C < C ? count - k * C : C;
            size_t sz = codec == zipcclCodecFast || codec == zipcclCodecDense ? ref_c_chunk(d, x + k * C * d.es, n, out + pos) : 0;
            if (sz) { if (out[4] < 3) out[4] = 3; } /* version 3: C chunks (FORMAT.md §2); dense frames are 4 */
            else sz = ref_chunk(d, mode_of(codec), x + k * C * d.es, n, out + pos);
            put32(out + 16 + 4 * k, (uint32_t)sz);
            pos += sz;
        }
        if (pos < stored) {
            if (checksum) {
                put32(out + 16 + 4 * nc, XXH32(out, 16 + 4 * nc, 0));
                size_t at = 16 + 4 * nc + cs;
                for (size_t k = 0; k < nc; k++) {
                    uint32_t sz = get32(out + 16 + 4 * k);
                    put32(out + 16 + 4 * nc + 4 + 4 * k, XXH32(out + at, sz, 0));
                    at += sz;
                }
            }
            return pos;
        }
    }
    out[4] = 1; /* a stored frame is version 1 whatever the codec */
    out[6] = (uint8_t)(2 | (checksum ? 1 : 0));
    if (checksum) {
        put32(out + 16, XXH32(out, 16, 0));
        for (size_t k = 0; k < nc; k++) {
            size_t n = count - k * C < C ? count - k * C : C;
            put32(out + 20 + 4 * k, XXH32(x + k * C * d.es, n * d.es, 0));
        }
    }
    memcpy(out + 16 + cs, x, count * d.es);
    return stored;
}

static size_t ref_frame(zipcclDataType_t dtype, int codec, int checksum, const uint8_t* x, size_t count, uint8_t* out) {
    return ref_frame_log2(dtype, codec, checksum, x, count, out, 14);
}

/* ------------------------------------------------------------------------ */
/* Round trips on every path                                                 */
/* ------------------------------------------------------------------------ */

static zipcclSimd_t paths[3];
static int npaths;
static const char* simd_name(zipcclSimd_t s) { return s == zipcclSimdAvx512 ? "avx512" : s == zipcclSimdAvx2 ? "avx2" : "scalar"; }
static const char* codec_name(int c) {
    return c == zipcclCodecDense ? "dense" : c == zipcclCodecStored ? "stored" : c == zipcclCodecF3 ? "f3"
           : c == zipcclCodecF2 ? "f2" : "fast";
}

/* Compress x on every path (optionally from/to misaligned buffers), check
 * every frame equals the reference, decode every frame on every path and
 * compare. Returns 1 if all good; why holds the first failure. Also returns
 * the frame size through *fsize. */
static int roundtrip(zipcclDataType_t dt, int codec, int checksum, const uint8_t* x, size_t count,
                     size_t misalign, size_t* fsize, char* why, size_t whylen) {
    size_t bytes = count * esize(dt), bound = zipcclCompressBound(count, dt, checksum);
    size_t nc = (count + 16383) / 16384;
    uint8_t* ref = malloc(bound + 12 * nc + 64);
    size_t rsize = ref_frame(dt, codec, checksum, x, count, ref);
    uint8_t* srcbuf = malloc(bytes + 64);
    uint8_t* src = srcbuf + misalign;
    memcpy(src, x, bytes);
    uint8_t* fbuf = malloc(bound + 64);
    uint8_t* frame = fbuf + misalign;
    uint8_t* obuf = malloc(bytes + 64);
    uint8_t* out = obuf + (misalign ? 64 - misalign : 0) % 64;
    int ok = 1;
    for (int a = 0; a < npaths && ok; a++) {
        zipcclCodecParams_t p = {(zipcclCodec_t)codec, checksum, paths[a]};
        size_t fs = 0;
        zipcclResult_t r = zipcclCompress(src, count, dt, frame, bound, &fs, &p);
        if (r != zipcclSuccess) { snprintf(why, whylen, "compress[%s]: %s (%s)", simd_name(paths[a]), zipcclGetErrorString(r), zipcclGetLastErrorDetail()); ok = 0; break; }
        if (fs != rsize || memcmp(frame, ref, fs)) {
            size_t at = 0;
            while (at < fs && at < rsize && frame[at] == ref[at]) at++;
            snprintf(why, whylen, "frame[%s] differs from the reference: size %zu vs %zu, first diff at %zu", simd_name(paths[a]), fs, rsize, at);
            ok = 0; break;
        }
        *fsize = fs;
        for (int b = 0; b < npaths && ok; b++) {
            zipcclCodecParams_t q = {zipcclCodecDefault, 0, paths[b]};
            size_t got = 12345;
            memset(out, 0xA5, bytes);
            r = zipcclDecompress(frame, fs, out, bytes, &got, dt, &q);
            if (r != zipcclSuccess) { snprintf(why, whylen, "decompress[%s]: %s (%s)", simd_name(paths[b]), zipcclGetErrorString(r), zipcclGetLastErrorDetail()); ok = 0; }
            else if (got != count) { snprintf(why, whylen, "count %zu != %zu", got, count); ok = 0; }
            else if (memcmp(out, x, bytes)) {
                size_t at = 0;
                while (out[at] == x[at]) at++;
                snprintf(why, whylen, "decoded[%s] differs at byte %zu", simd_name(paths[b]), at);
                ok = 0;
            }
        }
    }
    free(ref); free(srcbuf); free(fbuf); free(obuf);
    return ok;
}

static void check_rt(const char* name, zipcclDataType_t dt, const uint8_t* x, size_t count) {
    char why[256] = "";
    int ok = 1;
    size_t fs;
    for (int codec = 1; codec <= LAST_CODEC && ok; codec++)
        for (int cs = 0; cs < 2 && ok; cs++)
            if (!roundtrip(dt, codec, cs, x, count, 0, &fs, why, sizeof why)) {
                char w2[300];
                snprintf(w2, sizeof w2, "%s checksum=%d: %s", codec_name(codec), cs, why);
                memcpy(why, w2, sizeof why - 1);
                ok = 0;
            }
    CHECK(ok, name, "%s", why);
}

/* ------------------------------------------------------------------------ */
/* Exhaustive 16-bit patterns                                                */
/* ------------------------------------------------------------------------ */

static void exhaustive16(zipcclDataType_t dt, const char* tag) {
    size_t N = 65536;
    uint16_t* v = malloc(2 * N * 4);
    char name[96];
    /* natural order: whole binades per chunk, so windows sit everywhere */
    for (size_t i = 0; i < N; i++) v[i] = (uint16_t)i;
    snprintf(name, sizeof name, "%s_exhaustive_sorted_roundtrip", tag);
    check_rt(name, dt, (uint8_t*)v, N);
    /* shuffled */
    for (size_t i = N - 1; i > 0; i--) { size_t j = rnd() % (i + 1); uint16_t t = v[i]; v[i] = v[j]; v[j] = t; }
    snprintf(name, sizeof name, "%s_exhaustive_shuffled_roundtrip", tag);
    check_rt(name, dt, (uint8_t*)v, N);
    /* every pattern among Gaussian neighbours (window + escapes), 1 in 4 */
    uint8_t* g = make_gauss(dt, 4 * N, 1.0);
    uint16_t* w = (uint16_t*)g;
    for (size_t i = 0; i < N; i++) w[4 * i + 1] = (uint16_t)i;
    snprintf(name, sizeof name, "%s_exhaustive_in_gaussian_roundtrip", tag);
    check_rt(name, dt, g, 4 * N);
    /* every pattern among tiny values: the window sits at the bottom, so
     * Inf/NaN exponents are far above top (no wrap-around into the window) */
    uint8_t* t = make_gauss(dt, 4 * N, dt == zipcclBfloat16 ? 1e-36 : 1e-6);
    w = (uint16_t*)t;
    for (size_t i = 0; i < N; i++) w[4 * i + 3] = (uint16_t)i;
    snprintf(name, sizeof name, "%s_exhaustive_in_tiny_roundtrip", tag);
    check_rt(name, dt, t, 4 * N);
    free(v); free(g); free(t);
}

/* ------------------------------------------------------------------------ */
/* Decoder attacks                                                           */
/* ------------------------------------------------------------------------ */

static zipcclResult_t dec(const uint8_t* f, size_t fs, uint8_t* out, size_t cap, zipcclDataType_t expect, zipcclSimd_t s) {
    zipcclCodecParams_t q = {zipcclCodecDefault, 0, s};
    size_t cnt;
    return zipcclDecompress(f, fs, out, cap, &cnt, expect, &q);
}

static void attacks(void) {
    zipcclDataType_t dts[3] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    const char* tags[3] = {"bf16", "fp16", "fp32"};
    char name[128];
    for (int di = 0; di < 3; di++) {
        zipcclDataType_t dt = dts[di];
        size_t count = 16384 + 700; /* two chunks, second partial */
        uint8_t* x = make_gauss(dt, count, 0.02);
        ((uint16_t*)x)[5] = 0x7F80; /* an escape or two */
        size_t bytes = count * esize(dt);
        uint8_t* out = malloc(bytes);
        for (int codec = 1; codec <= LAST_CODEC; codec++)
            for (int cs = 0; cs < 2; cs++) {
                size_t bound = zipcclCompressBound(count, dt, cs), fs;
                uint8_t* f = malloc(bound);
                zipcclCodecParams_t p = {(zipcclCodec_t)codec, cs, zipcclSimdAuto};
                zipcclCompress(x, count, dt, f, bound, &fs, &p);
                uint8_t* m = malloc(fs + 1);
                const char* cn = codec_name(codec);
                /* every truncation, and one byte too many */
                int ok = 1;
                size_t step = fs > 4000 ? 7 : 1;
                for (size_t len = 0; len < fs && ok; len += (len < 200 || fs - len < 200) ? 1 : step) {
                    memcpy(m, f, len);
                    zipcclResult_t r = dec(m, len, out, bytes, 0, zipcclSimdAuto);
                    if (r == zipcclSuccess) ok = 0, snprintf(name, sizeof name, "%zu", len);
                }
                memcpy(m, f, fs); m[fs] = 0;
                if (dec(m, fs + 1, out, bytes, 0, zipcclSimdAuto) == zipcclSuccess) ok = 0;
                char tn[128];
                snprintf(tn, sizeof tn, "%s_%s_cs%d_truncations_rejected", tags[di], cn, cs);
                CHECK(ok, tn, "a truncated or padded frame decoded");
                /* bit flips */
                int detected = 1, crashed_not = 1;
                int flips = getenv("ZIPCCL_TEST_LONG") ? 4000 : 400;
                for (int t = 0; t < flips; t++) {
                    memcpy(m, f, fs);
                    size_t at = rnd() % fs;
                    m[at] ^= (uint8_t)(1u << (rnd() % 8));
                    for (int a = 0; a < npaths; a++) {
                        zipcclResult_t r = dec(m, fs, out, bytes, 0, paths[a]);
                        if (cs && r == zipcclSuccess) detected = 0;
                        if ((int)r < 0 || r >= zipcclNumResults) crashed_not = 0; /* a real result code */
                    }
                }
                snprintf(tn, sizeof tn, "%s_%s_cs%d_bitflips_%s", tags[di], cn, cs, cs ? "detected" : "no_crash");
                CHECK(detected && crashed_not, tn, "a flipped checksummed frame decoded, or a bad result code");
                /* checksum flips must say ChecksumMismatch when only a chunk byte changed */
                if (cs && codec != zipcclCodecStored) {
                    memcpy(m, f, fs);
                    m[fs - 1] ^= 0x40;
                    memset(out, 0xA5, bytes);
                    zipcclResult_t r = dec(m, fs, out, bytes, 0, zipcclSimdAuto);
                    size_t touched = 0;
                    for (size_t i = 0; i < bytes; i++) touched += out[i] != 0xA5;
                    snprintf(tn, sizeof tn, "%s_%s_chunk_checksum_mismatch_before_output", tags[di], cn);
                    CHECK(r == zipcclChecksumMismatch && !touched, tn, "got %s, %zu output bytes written",
                          zipcclGetErrorString(r), touched);
                }
                /* dst too small, expectDtype mismatch */
                zipcclResult_t r = dec(f, fs, out, bytes - 1, 0, zipcclSimdAuto);
                snprintf(tn, sizeof tn, "%s_%s_cs%d_dst_too_small", tags[di], cn, cs);
                CHECK(r == zipcclDstTooSmall, tn, "got %s", zipcclGetErrorString(r));
                r = dec(f, fs, out, bytes, dt == zipcclFloat32 ? zipcclBfloat16 : zipcclFloat32, zipcclSimdAuto);
                snprintf(tn, sizeof tn, "%s_%s_cs%d_expect_dtype_mismatch", tags[di], cn, cs);
                CHECK(r == zipcclMismatch, tn, "got %s", zipcclGetErrorString(r));
                free(m); free(f);
            }
        free(x); free(out);
    }
}

/* Hostile headers and chunk fields on a small valid frame (no checksum). */
static void hostile(void) {
    size_t count = 1000;
    uint8_t* x = make_gauss(zipcclBfloat16, count, 1.0);
    uint8_t out[4000];
    for (int codec = zipcclCodecFast; codec <= LAST_CODEC; codec = next_coded(codec)) {
        size_t bound = zipcclCompressBound(count, zipcclBfloat16, 0), fs;
        uint8_t* f = malloc(bound + 64);
        uint8_t* m = malloc(bound + 64);
        zipcclCodecParams_t p = {(zipcclCodec_t)codec, 0, zipcclSimdAuto};
        zipcclCompress(x, count, zipcclBfloat16, f, bound, &fs, &p);
        const char* cn = codec_name(codec);
        char tn[128];
        struct { const char* what; size_t at; uint8_t val; } cases[] = {
            {"magic", 0, 'X'}, {"version", 4, 5}, {"dtype0", 5, 0}, {"dtype4", 5, 4}, {"flags_unknown", 6, 4},
            {"flags_stored", 6, 2}, {"flags_checksum", 6, 1}, {"chunk_log2_9", 7, 9}, {"chunk_log2_21", 7, 21},
            {"count_high", 15, 0x40}, {"count_low", 8, (uint8_t)(1000 - 1)},
            {"chunk_size", 16, 0}, {"mode_9", 20, 9}, {"mode_raw", 20, 0}, {"top_256_bf16_ok_but_wrong", 21, 2},
            {"table_nonzero", 22, 40}, {"reserved", 23, 1}, {"n_esc", 24, 0xFF}, {"n_esc_high", 27, 1},
        };
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            memcpy(m, f, fs);
            if (m[cases[k].at] == cases[k].val) m[cases[k].at] ^= 1;
            else m[cases[k].at] = cases[k].val;
            zipcclResult_t r = dec(m, fs, out, sizeof out, 0, zipcclSimdAuto);
            int want_fail = 1;
            /* a different top in range is a valid (wrong) frame only if all codes stay in range */
            if (!strcmp(cases[k].what, "top_256_bf16_ok_but_wrong")) want_fail = 0;
            snprintf(tn, sizeof tn, "hostile_%s_%s_rejected", cn, cases[k].what);
            if (want_fail) CHECK(r != zipcclSuccess, tn, "accepted");
        }
        /* top 0 with codes above it */
        memcpy(m, f, fs); m[21] = 0;
        zipcclResult_t r = dec(m, fs, out, sizeof out, 0, zipcclSimdAuto);
        snprintf(tn, sizeof tn, "hostile_%s_top_below_codes_rejected", cn);
        CHECK(r == zipcclCorruptStream, tn, "got %s", zipcclGetErrorString(r));
        if (codec == zipcclCodecDense) {
            /* lane sizes: shift two bytes from lane 0 to lane 1 */
            memcpy(m, f, fs);
            uint16_t l0 = (uint16_t)(m[28] | m[29] << 8), l1 = (uint16_t)(m[30] | m[31] << 8);
            l0 -= 2; l1 += 2;
            m[28] = (uint8_t)l0; m[29] = (uint8_t)(l0 >> 8); m[30] = (uint8_t)l1; m[31] = (uint8_t)(l1 >> 8);
            r = dec(m, fs, out, sizeof out, 0, zipcclSimdAuto);
            CHECK(r == zipcclCorruptStream, "hostile_dense_lane_sizes_shifted_rejected", "got %s", zipcclGetErrorString(r));
            /* one word too many in lane 0: frame grows by 2, table and lane size agree */
            {
                size_t l0end = 16 + 4 + 8 + 64 + 1000 + (size_t)(f[28] | f[29] << 8);
                uint8_t* g = malloc(fs + 2);
                memcpy(g, f, l0end); g[l0end] = 0x12; g[l0end + 1] = 0x34;
                memcpy(g + l0end + 2, f + l0end, fs - l0end);
                uint32_t cs0 = get32(g + 16) + 2;
                put32(g + 16, cs0);
                uint16_t nl0 = (uint16_t)((f[28] | f[29] << 8) + 2);
                g[28] = (uint8_t)nl0; g[29] = (uint8_t)(nl0 >> 8);
                for (int a = 0; a < npaths; a++) {
                    r = dec(g, fs + 2, out, sizeof out, 0, paths[a]);
                    snprintf(tn, sizeof tn, "hostile_dense_leftover_lane_word_rejected_%s", simd_name(paths[a]));
                    CHECK(r == zipcclCorruptStream, tn, "got %s", zipcclGetErrorString(r));
                }
                free(g);
            }
            /* tables 8 .. 39 (tail classes) are version 4's: the chunk's
             * table in a version 1 frame, and table 40 anywhere, are refused */
            CHECK(f[4] == 4, "hostile_dense_writes_version_4", "version %u", f[4]);
            memcpy(m, f, fs); m[4] = 1; m[22] = 8;
            r = dec(m, fs, out, sizeof out, 0, zipcclSimdAuto);
            CHECK(r == zipcclCorruptStream, "hostile_dense_tail_table_in_version_1_rejected", "got %s", zipcclGetErrorString(r));
            memcpy(m, f, fs); m[22] = 40;
            r = dec(m, fs, out, sizeof out, 0, zipcclSimdAuto);
            CHECK(r == zipcclCorruptStream, "hostile_dense_table_40_rejected", "got %s", zipcclGetErrorString(r));
            /* a different (valid-looking) initial state: final state != L */
            {
                size_t lane0 = 16 + 4 + 8 + 64 + 1000;
                memcpy(m, f, fs); m[lane0] ^= 0x5A;
                for (int a = 0; a < npaths; a++) {
                    r = dec(m, fs, out, sizeof out, 0, paths[a]);
                    snprintf(tn, sizeof tn, "hostile_dense_wrong_initial_state_rejected_%s", simd_name(paths[a]));
                    CHECK(r == zipcclCorruptStream, tn, "got %s", zipcclGetErrorString(r));
                }
            }
            memcpy(m, f, fs); m[28] = 3; m[29] = 0;
            r = dec(m, fs, out, sizeof out, 0, zipcclSimdAuto);
            CHECK(r == zipcclCorruptStream, "hostile_dense_lane_size_odd_rejected", "got %s", zipcclGetErrorString(r));
            /* initial state below L */
            size_t lane0 = 16 + 4 + 8 + 64 + 1000;
            memcpy(m, f, fs); m[lane0 + 2] = 0; m[lane0 + 3] = 0;
            r = dec(m, fs, out, sizeof out, 0, zipcclSimdAuto);
            CHECK(r == zipcclCorruptStream, "hostile_dense_state_below_L_rejected", "got %s", zipcclGetErrorString(r));
        } else if (codec == zipcclCodecF3) {
            /* padding bits of the last group set */
            size_t planes = 16 + 4 + 8 + 1000, last = planes + 24 * 15;
            memcpy(m, f, fs); m[last + 7] |= 0x80;
            r = dec(m, fs, out, sizeof out, 0, zipcclSimdAuto);
            CHECK(r == zipcclCorruptStream, "hostile_f3_padding_bits_rejected", "got %s", zipcclGetErrorString(r));
        } else if (codec == zipcclCodecFast) { /* T: 1000 elements = 16 tier-1 groups, the last one 40 wide */
            size_t t1 = 16 + 4 + 8 + 1000, t2 = t1 + 16 * 16, m2 = 0, m3 = 0;
            CHECK(f[20] == 4 && f[4] == 2, "hostile_fast_writes_t_in_version_2", "chunk mode %u, version %u", f[20], f[4]);
            for (size_t i = 0; i < 1000; i++)
                m2 += (f[t1 + 16 * (i / 64) + (i % 64) / 8] >> (i % 8) & 1) && (f[t1 + 16 * (i / 64) + 8 + (i % 64) / 8] >> (i % 8) & 1);
            for (size_t i = 0; i < m2; i++)
                m3 += (f[t2 + 16 * (i / 64) + (i % 64) / 8] >> (i % 8) & 1) && (f[t2 + 16 * (i / 64) + 8 + (i % 64) / 8] >> (i % 8) & 1);
            size_t t3 = t2 + 16 * ((m2 + 63) / 64);
            CHECK(fs == t3 + 24 * ((m3 + 63) / 64) + get32(f + 24), "hostile_fast_t_size_from_tiers",
                  "frame of %zu bytes, tiers %zu / %zu", fs, m2, m3);
            memcpy(m, f, fs); m[4] = 1; /* mode 4 in a version-1 frame */
            r = dec(m, fs, out, sizeof out, 0, zipcclSimdAuto);
            CHECK(r == zipcclCorruptStream, "hostile_fast_t_in_version_1_rejected", "got %s", zipcclGetErrorString(r));
            memcpy(m, f, fs); m[22] = 32;
            r = dec(m, fs, out, sizeof out, 0, zipcclSimdAuto);
            CHECK(r == zipcclCorruptStream, "hostile_fast_t_shape_32_rejected", "got %s", zipcclGetErrorString(r));
            memcpy(m, f, fs); m[t1 + 16 * 15 + 7] |= 0x80; /* tier-1 padding (bit 63 of the last group) */
            r = dec(m, fs, out, sizeof out, 0, zipcclSimdAuto);
            CHECK(r == zipcclCorruptStream, "hostile_fast_t_tier1_padding_rejected", "got %s", zipcclGetErrorString(r));
            struct { size_t m, at; int words; const char* what; } pads[2] = {{m2, t2, 2, "tier2"}, {m3, t3, 3, "tier3"}};
            for (int k = 0; k < 2; k++) {
                if (!(pads[k].m % 64)) continue;
                memcpy(m, f, fs); m[pads[k].at + 8 * (size_t)pads[k].words * (pads[k].m / 64) + 7] |= 0x80;
                for (int a = 0; a < npaths; a++) {
                    r = dec(m, fs, out, sizeof out, 0, paths[a]);
                    snprintf(tn, sizeof tn, "hostile_fast_t_%s_padding_rejected_%s", pads[k].what, simd_name(paths[a]));
                    CHECK(r == zipcclCorruptStream, tn, "got %s", zipcclGetErrorString(r));
                }
            }
        } else { /* F2: 1000 elements = 16 primary groups, the last one 40 wide */
            size_t prim = 16 + 4 + 8 + 1000, sec = prim + 16 * 16, tier = 0;
            CHECK(f[20] == 3 && f[4] == 1, "hostile_f2_writes_f2_in_version_1", "chunk mode %u", f[20]);
            for (size_t g = 0; g < 16; g++)
                for (int b = 0; b < 64; b++)
                    tier += (f[prim + 16 * g + b / 8] >> (b % 8) & 1) && (f[prim + 16 * g + 8 + b / 8] >> (b % 8) & 1);
            CHECK(fs == sec + 24 * ((tier + 63) / 64) + get32(f + 24), "hostile_f2_size_from_tier",
                  "frame of %zu bytes, second tier %zu", fs, tier);
            memcpy(m, f, fs); m[prim + 16 * 15 + 7] |= 0x80; /* primary padding (P0, bit 63) */
            r = dec(m, fs, out, sizeof out, 0, zipcclSimdAuto);
            CHECK(r == zipcclCorruptStream, "hostile_f2_primary_padding_rejected", "got %s", zipcclGetErrorString(r));
            if (tier % 64) { /* secondary padding (Q2 of the last tier group, bit 63) */
                memcpy(m, f, fs); m[sec + 24 * (tier / 64) + 16 + 7] |= 0x80;
                for (int a = 0; a < npaths; a++) {
                    r = dec(m, fs, out, sizeof out, 0, paths[a]);
                    snprintf(tn, sizeof tn, "hostile_f2_secondary_padding_rejected_%s", simd_name(paths[a]));
                    CHECK(r == zipcclCorruptStream, tn, "got %s", zipcclGetErrorString(r));
                }
            }
        }
        free(f); free(m);
    }
    /* a frame whose count needs 2^62 bytes, and a huge chunk count */
    uint8_t h[64] = {'Z', 'C', 'C', '1', 1, 3, 0, 10};
    put64(h + 8, 1ull << 61);
    CHECK(dec(h, sizeof h, out, sizeof out, 0, zipcclSimdAuto) == zipcclCorruptStream, "hostile_huge_count_rejected", "accepted");
    put64(h + 8, 1ull << 50);
    zipcclFrameInfo_t fi;
    CHECK(zipcclGetFrameInfo(h, sizeof h, &fi) == zipcclCorruptStream, "hostile_huge_chunk_table_rejected", "accepted");
    CHECK(dec(NULL, 0, out, 1, 0, zipcclSimdAuto) == zipcclInvalidArgument, "decompress_null_src_rejected", "accepted");
    CHECK(dec(h, sizeof h, out, sizeof out, (zipcclDataType_t)3, zipcclSimdAuto) == zipcclInvalidArgument,
          "decompress_bad_expect_dtype_rejected", "accepted");
    free(x);
}

/* FORMAT.md §8's ordering rules, the faults whose result is not left open:
 * (1) shorter than a header is corrupt even with the magic and an unknown
 * version, (2) a whole header with the magic and an unknown version is
 * unsupported whatever else is wrong, (3) a checksummed frame's header
 * checksum is checked before its chunk table is used. */
static void precedence(void) {
    uint8_t out[64];
    char tn[128];
    /* (1) 5..15 bytes: the magic, an unknown version, the rest garbage */
    const uint8_t versions[3] = {0, 5, 255};
    for (int v = 0; v < 3; v++) {
        int ok = 1;
        char why[160] = "";
        for (size_t len = 5; len < 16 && ok; len++) {
            uint8_t h[16];
            memset(h, 0xAB, sizeof h);
            memcpy(h, "ZCC1", 4);
            h[4] = versions[v];
            zipcclFrameInfo_t fi;
            zipcclResult_t ri = zipcclGetFrameInfo(h, len, &fi);
            for (int a = 0; a < npaths && ok; a++) {
                zipcclResult_t r = dec(h, len, out, sizeof out, 0, paths[a]);
                if (r != zipcclCorruptStream || ri != zipcclCorruptStream)
                    ok = 0, snprintf(why, sizeof why, "%zu bytes [%s]: decompress %s, frame info %s", len,
                                     simd_name(paths[a]), zipcclGetErrorString(r), zipcclGetErrorString(ri));
            }
        }
        snprintf(tn, sizeof tn, "precedence_short_frame_version_%u_corrupt", versions[v]);
        CHECK(ok, tn, "%s", why);
        /* (2) the same bytes as a whole header: unsupported, although dtype,
         * flags, chunk_log2 and count are all out of range */
        uint8_t h[16];
        memset(h, 0xAB, sizeof h);
        memcpy(h, "ZCC1", 4);
        h[4] = versions[v];
        zipcclFrameInfo_t fi;
        zipcclResult_t ri = zipcclGetFrameInfo(h, sizeof h, &fi), r = dec(h, sizeof h, out, sizeof out, 0, zipcclSimdAuto);
        snprintf(tn, sizeof tn, "precedence_header_version_%u_unsupported", versions[v]);
        CHECK(r == zipcclUnsupported && ri == zipcclUnsupported, tn, "decompress %s, frame info %s",
              zipcclGetErrorString(r), zipcclGetErrorString(ri));
    }
    /* (3) a checksummed compressed frame of two chunks whose chunk table is
     * wrong (sizes that no longer sum to the frame, an entry below 8, one far
     * past the end): a header checksum mismatch, and no output */
    size_t count = 16384 + 700, bytes = count * 2;
    uint64_t rng_saved = rng_state; /* the later checks keep their inputs */
    uint8_t* x = make_gauss(zipcclBfloat16, count, 0.02);
    rng_state = rng_saved;
    uint8_t* o = malloc(bytes);
    for (int codec = zipcclCodecFast; codec <= LAST_CODEC; codec = next_coded(codec)) {
        size_t bound = zipcclCompressBound(count, zipcclBfloat16, 1), fs;
        uint8_t* f = malloc(bound);
        uint8_t* m = malloc(bound);
        zipcclCodecParams_t p = {(zipcclCodec_t)codec, 1, zipcclSimdAuto};
        zipcclResult_t rc = zipcclCompress(x, count, zipcclBfloat16, f, bound, &fs, &p);
        snprintf(tn, sizeof tn, "precedence_%s_setup", codec_name(codec));
        int ok = CHECK(rc == zipcclSuccess && f[6] == 1, tn, "compress %s, flags %u", zipcclGetErrorString(rc), f[6]);
        struct { const char* what; uint32_t entry; } cases[] = {
            {"plus_one", get32(f + 16) + 1}, {"below_8", 3}, {"past_the_end", 0xFFFFFFF0u},
        };
        for (size_t k = 0; ok && k < sizeof cases / sizeof cases[0]; k++)
            for (int a = 0; a < npaths; a++) {
                memcpy(m, f, fs);
                put32(m + 16, cases[k].entry);
                memset(o, 0xA5, bytes);
                zipcclResult_t r = dec(m, fs, o, bytes, 0, paths[a]);
                size_t touched = 0;
                for (size_t i = 0; i < bytes; i++) touched += o[i] != 0xA5;
                snprintf(tn, sizeof tn, "precedence_%s_header_checksum_before_chunk_table_%s_%s", codec_name(codec),
                         cases[k].what, simd_name(paths[a]));
                CHECK(r == zipcclChecksumMismatch && !touched, tn, "got %s, %zu output bytes written",
                      zipcclGetErrorString(r), touched);
            }
        free(f); free(m);
    }
    free(x); free(o);
}

/* ------------------------------------------------------------------------ */
/* C chunks (FORMAT.md 4.7, version 3)                                       */
/* ------------------------------------------------------------------------ */

static void put_elem(uint8_t* x, size_t i, int es, uint32_t v) {
    for (int b = 0; b < es; b++) x[(size_t)es * i + b] = (uint8_t)(v >> (8 * b));
}

/* The fast frame of x on every path, equal to the reference (check_rt
 * compares every codec's frames with ref_frame, whose C test is its own);
 * returns the frame in *f (caller frees) and its size. */
static size_t fast_frame(zipcclDataType_t dt, const uint8_t* x, size_t count, int cs, uint8_t** f) {
    size_t bound = zipcclCompressBound(count, dt, cs), fs = 0;
    *f = malloc(bound);
    zipcclCodecParams_t p = {zipcclCodecFast, cs, zipcclSimdAuto};
    if (zipcclCompress(x, count, dt, *f, bound, &fs, &p) != zipcclSuccess) fs = 0;
    return fs;
}

/* Mode of each chunk of a compressed frame (no checksums) into modes[]. */
static size_t frame_modes(const uint8_t* f, size_t fs, int* modes, size_t max) {
    if (fs < 16 || (f[6] & 2)) return 0;
    size_t nc = 0, count = 0;
    for (int k = 0; k < 8; k++) count |= (size_t)f[8 + k] << (8 * k);
    nc = (count + 16383) / 16384;
    size_t at = 16 + 4 * nc + ((f[6] & 1) ? 4 + 4 * nc : 0);
    for (size_t k = 0; k < nc && k < max; k++) {
        modes[k] = f[at];
        at += get32(f + 16 + 4 * k);
    }
    return nc;
}

static void constant_chunks(void) {
    zipcclDataType_t dts[3] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    const char* tags[3] = {"bf16", "fp16", "fp32"};
    /* +0, -0, 1.0, quiet NaN, signalling NaN, -NaN with a payload, +inf, all ones */
    const uint32_t vals[3][8] = {{0, 0x8000, 0x3F80, 0x7FC0, 0x7F81, 0xFFC1, 0x7F80, 0xFFFF},
                                 {0, 0x8000, 0x3C00, 0x7E00, 0x7C01, 0xFE01, 0x7C00, 0xFFFF},
                                 {0, 0x80000000u, 0x3F800000u, 0x7FC00000u, 0x7F800001u, 0xFFC00001u, 0x7F800000u, 0xFFFFFFFFu}};
    const char* vnames[8] = {"zero", "neg_zero", "one", "qnan", "snan", "neg_nan_payload", "inf", "all_ones"};
    const size_t counts[] = {1, 2, 3, 64, 1000, 16384, 16385, 16386, 2 * 16384 + 4097};
    char tn[160];
    for (int di = 0; di < 3; di++) {
        zipcclDataType_t dt = dts[di];
        int es = (int)esize(dt);
        size_t maxn = 2 * 16384 + 4097;
        uint8_t* x = malloc(maxn * 4 + 8);
        /* every value, every count: the reference's bytes on every path and
         * codec, and for fast: C exactly for the chunks of n >= 2 */
        for (int v = 0; v < 8; v++) {
            int ok = 1;
            char why[200] = "";
            for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                size_t n = counts[ci];
                for (size_t i = 0; i < n; i++) put_elem(x, i, es, vals[di][v]);
                snprintf(tn, sizeof tn, "%s_const_%s_n%zu_roundtrip_equals_reference", tags[di], vnames[v], n);
                check_rt(tn, dt, x, n);
                uint8_t* f;
                size_t fs = fast_frame(dt, x, n, 0, &f);
                int modes[4];
                size_t nc = frame_modes(f, fs, modes, 4), anyc = 0;
                for (size_t k = 0; k < nc; k++) {
                    size_t nk = n - 16384 * k < 16384 ? n - 16384 * k : 16384;
                    if (modes[k] != (nk >= 2 ? 5 : 0)) ok = 0, snprintf(why, sizeof why, "n=%zu chunk %zu mode %d", n, k, modes[k]);
                    anyc |= modes[k] == 5;
                }
                /* under 8 elements, header and table outweigh the data: stored */
                if (n >= 8 && (!nc || f[4] != 3)) ok = 0, snprintf(why, sizeof why, "n=%zu: version %u, %zu chunks", n, fs ? f[4] : 0, nc);
                if (n < 8 && (nc || f[4] != 1)) ok = 0, snprintf(why, sizeof why, "n=%zu not a stored frame", n);
                /* a C chunk and the raw chunk of one element are both 8 + es */
                if (anyc && fs != 16 + nc * (4 + 8 + (size_t)es))
                    ok = 0, snprintf(why, sizeof why, "n=%zu: frame of %zu bytes", n, fs);
                free(f);
            }
            snprintf(tn, sizeof tn, "%s_const_%s_fast_writes_c_chunks_in_version_3", tags[di], vnames[v]);
            CHECK(ok, tn, "%s", why);
        }
        /* near-constant chunks are not C: one element differs at the first,
         * second, a sampled, an unsampled and the last position; +0 / -0 and
         * two NaNs of different bits are different patterns */
        {
            size_t n = 16384 + 3000, S = 1024, unsampled = 0;
            int* hit = calloc(16384, sizeof(int));
            for (size_t k = 0; k < S; k++) hit[ref_sample(k, 16384, S)] = 1;
            while (hit[unsampled]) unsampled++;
            free(hit);
            const size_t at[] = {0, 1, ref_sample(7, 16384, S), unsampled, 16383, 16384, n - 1};
            const struct { uint32_t base, other; const char* what; } pairs[] = {
                {vals[di][0], vals[di][1], "pos_zero_one_neg_zero"},
                {vals[di][1], vals[di][0], "neg_zero_one_pos_zero"},
                {vals[di][3], vals[di][4], "qnan_one_snan"},
                {vals[di][2], vals[di][2] + 1, "one_one_ulp_up"},
                {vals[di][0], 1, "zero_one_denormal"}};
            for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++) {
                int ok = 1;
                char why[200] = "";
                for (size_t ai = 0; ai < sizeof at / sizeof at[0]; ai++) {
                    for (size_t i = 0; i < n; i++) put_elem(x, i, es, pairs[pi].base);
                    put_elem(x, at[ai], es, pairs[pi].other);
                    snprintf(tn, sizeof tn, "%s_near_const_%s_at_%zu_roundtrip_equals_reference", tags[di], pairs[pi].what, at[ai]);
                    check_rt(tn, dt, x, n);
                    uint8_t* f;
                    size_t fs = fast_frame(dt, x, n, 0, &f);
                    int modes[2] = {-1, -1};
                    frame_modes(f, fs, modes, 2);
                    int bad = at[ai] < 16384 ? 0 : 1; /* the chunk that holds the odd one out */
                    if (modes[bad] == 5 || modes[1 - bad] != 5 || f[4] != 3)
                        ok = 0, snprintf(why, sizeof why, "odd one at %zu: modes %d %d, version %u", at[ai], modes[0], modes[1], f[4]);
                    free(f);
                }
                snprintf(tn, sizeof tn, "%s_near_const_%s_not_c", tags[di], pairs[pi].what);
                CHECK(ok, tn, "%s", why);
            }
            /* +0 and -0 alternating: never C */
            for (size_t i = 0; i < n; i++) put_elem(x, i, es, vals[di][i & 1]);
            snprintf(tn, sizeof tn, "%s_zero_signs_alternating_roundtrip_equals_reference", tags[di]);
            check_rt(tn, dt, x, n);
            uint8_t* f;
            size_t fs = fast_frame(dt, x, n, 0, &f);
            int modes[2] = {-1, -1};
            frame_modes(f, fs, modes, 2);
            snprintf(tn, sizeof tn, "%s_zero_signs_alternating_not_c_version_2", tags[di]);
            CHECK(modes[0] != 5 && modes[1] != 5 && f[4] == (fs == 16 + n * (size_t)es ? 1 : 2), tn, "modes %d %d, version %u", modes[0], modes[1], f[4]);
            free(f);
        }
        /* a Gaussian chunk, a zero chunk, a partial Gaussian chunk: T C T,
         * version 3; the same without the zero chunk: version 2 */
        {
            size_t n = 2 * 16384 + 5000;
            uint8_t* g = make_gauss(dt, n, 0.02);
            memset(g + 16384 * (size_t)es, 0, 16384 * (size_t)es);
            snprintf(tn, sizeof tn, "%s_gauss_zero_gauss_roundtrip_equals_reference", tags[di]);
            check_rt(tn, dt, g, n);
            for (int cs = 0; cs < 2; cs++) {
                uint8_t* f;
                size_t fs = fast_frame(dt, g, n, cs, &f);
                int modes[3] = {-1, -1, -1};
                frame_modes(f, fs, modes, 3);
                zipcclFrameInfo_t fi;
                int info = zipcclGetFrameInfo(f, fs, &fi) == zipcclSuccess && fi.count == n && fi.numChunks == 3 && !fi.stored;
                snprintf(tn, sizeof tn, "%s_cs%d_gauss_zero_gauss_is_t_c_t_version_3", tags[di], cs);
                CHECK(modes[0] == 4 && modes[1] == 5 && modes[2] == 4 && f[4] == 3 && info, tn, "modes %d %d %d, version %u, info %d",
                      modes[0], modes[1], modes[2], f[4], info);
                free(f);
            }
            uint8_t* h = make_gauss(dt, n, 0.02);
            uint8_t* f;
            size_t fs = fast_frame(dt, h, n, 0, &f);
            snprintf(tn, sizeof tn, "%s_gauss_only_stays_version_2", tags[di]);
            CHECK(fs && f[4] == 2, tn, "version %u", f[4]);
            free(f); free(g); free(h);
        }
        /* attacks on a frame of two C chunks (16384 + 1000 elements of 1.0) */
        {
            size_t n = 16384 + 1000, bytes = n * (size_t)es;
            for (size_t i = 0; i < n; i++) put_elem(x, i, es, vals[di][2]);
            uint8_t* f;
            size_t fs = fast_frame(dt, x, n, 0, &f);
            size_t c1 = 16 + 8 + 8 + (size_t)es; /* the second chunk */
            snprintf(tn, sizeof tn, "%s_c_frame_layout", tags[di]);
            CHECK(fs == 16 + 8 + 2 * (8 + (size_t)es) && f[4] == 3 && f[24] == 5 && f[c1] == 5 && get32(f + 16) == 8u + (uint32_t)es &&
                      get32(f + 20) == 8u + (uint32_t)es && !memcmp(f + c1 + 8, x, (size_t)es),
                  tn, "frame of %zu bytes, version %u", fs, f[4]);
            uint8_t* out = malloc(bytes + 64);
            uint8_t* m = malloc(fs + 64);
            struct { const char* what; size_t at; uint8_t val; zipcclResult_t want; } cases[] = {
                {"version_2_claiming_mode_5", 4, 2, zipcclCorruptStream},
                {"version_1_claiming_mode_5", 4, 1, zipcclCorruptStream},
                {"version_5_unsupported", 4, 5, zipcclUnsupported},
                {"top_nonzero", c1 + 1, 1, zipcclCorruptStream},
                {"table_nonzero", c1 + 2, 1, zipcclCorruptStream},
                {"reserved_nonzero", c1 + 3, 1, zipcclCorruptStream},
                {"n_esc_nonzero", c1 + 4, 1, zipcclCorruptStream},
                {"n_esc_high", c1 + 7, 0x80, zipcclCorruptStream},
                {"mode_6", c1, 6, zipcclCorruptStream},
                {"mode_raw", c1, 0, zipcclCorruptStream},
                {"mode_t", c1, 4, zipcclCorruptStream},
                {"table_entry_minus_one", 20, (uint8_t)(7 + es), zipcclCorruptStream},
                {"table_entry_plus_one", 20, (uint8_t)(9 + es), zipcclCorruptStream},
            };
            for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
                for (int a = 0; a < npaths; a++) {
                    memcpy(m, f, fs);
                    m[cases[k].at] = cases[k].val;
                    zipcclResult_t r = dec(m, fs, out, bytes, 0, paths[a]);
                    snprintf(tn, sizeof tn, "%s_c_%s_rejected_%s", tags[di], cases[k].what, simd_name(paths[a]));
                    CHECK(r == cases[k].want, tn, "got %s", zipcclGetErrorString(r));
                }
            /* wrong chunk lengths that the table agrees with: one byte more
             * (a trailing value byte) and one less (half a value) */
            for (int d = -1; d <= 1; d += 2) {
                size_t gs = fs + (size_t)(ptrdiff_t)d;
                memcpy(m, f, fs < gs ? fs : gs);
                if (d > 0) m[fs] = 0;
                put32(m + 20, (uint32_t)(8 + es + d));
                for (int a = 0; a < npaths; a++) {
                    zipcclResult_t r = dec(m, gs, out, bytes, 0, paths[a]);
                    snprintf(tn, sizeof tn, "%s_c_chunk_%s_one_byte_rejected_%s", tags[di], d > 0 ? "plus" : "minus", simd_name(paths[a]));
                    CHECK(r == zipcclCorruptStream, tn, "got %s", zipcclGetErrorString(r));
                }
            }
            /* every truncation, and a trailing byte */
            int ok = 1;
            for (size_t len = 0; len < fs; len++)
                if (dec(f, len, out, bytes, 0, zipcclSimdAuto) == zipcclSuccess) ok = 0;
            memcpy(m, f, fs); m[fs] = 0;
            if (dec(m, fs + 1, out, bytes, 0, zipcclSimdAuto) == zipcclSuccess) ok = 0;
            snprintf(tn, sizeof tn, "%s_c_truncations_rejected", tags[di]);
            CHECK(ok, tn, "a truncated or padded frame decoded");
            /* a different value is a valid frame: that value everywhere in chunk 1 */
            ok = 1;
            for (int a = 0; a < npaths; a++) {
                memcpy(m, f, fs);
                m[c1 + 8] ^= 0x5A;
                memset(out, 0xA5, bytes);
                ok &= dec(m, fs, out, bytes, 0, paths[a]) == zipcclSuccess && !memcmp(out, x, 16384 * (size_t)es);
                for (size_t i = 16384; i < n; i++) ok &= !memcmp(out + (size_t)es * i, m + c1 + 8, (size_t)es);
            }
            snprintf(tn, sizeof tn, "%s_c_other_value_decodes_to_it", tags[di]);
            CHECK(ok, tn, "wrong output");
            free(f);
            /* with checksums every flipped bit is caught */
            fs = fast_frame(dt, x, n, 1, &f);
            ok = fs && f[4] == 3;
            for (size_t at = 0; at < fs && ok; at++)
                for (int b = 0; b < 8; b++) {
                    memcpy(m, f, fs);
                    m[at] ^= (uint8_t)(1u << b);
                    if (dec(m, fs, out, bytes, 0, zipcclSimdAuto) == zipcclSuccess) { ok = 0; break; }
                }
            snprintf(tn, sizeof tn, "%s_c_cs1_every_bit_flip_rejected", tags[di]);
            CHECK(ok, tn, "a flipped checksummed C frame decoded");
            free(f); free(out); free(m);
        }
        free(x);
    }
}

/* ------------------------------------------------------------------------ */
/* Chunks coded to exactly raw - 1, raw and raw + 1 bytes                     */
/* ------------------------------------------------------------------------ */
/* tests/gpu/codec_boundary.h's cases, which the CUDA codec's tests run too
 * (codec_cases.h's cc_boundary): a chunk is coded only when its coding is
 * smaller than raw (FORMAT.md §7 item 5), and these land on either side of
 * that line and on it. Each must be found; FORMAT.md's reference encoder
 * above must agree with the generator's size function on the coded size;
 * every path's frame must equal the reference's and decode; and the chunk
 * is coded (raw - 1 bytes) for raw - 1, raw for raw and raw + 1. */
static void boundary_chunks(void) {
    const zipcclDataType_t dts[3] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    const int codecs[4] = {zipcclCodecFast, zipcclCodecF3, zipcclCodecDense, zipcclCodecF2};
    for (int di = 0; di < 3; di++)
        for (int ci = 0; ci < 4; ci++) {
            int found = 1, sizes = 1, frames = 1, choice = 1;
            char wf[200] = "", ws[200] = "", wr[400] = "", wc[200] = "";
            for (int tail = 0; tail < 2; tail++)
                for (int delta = -1; delta <= 1; delta++) {
                    zcb_case_t k;
                    if (!zcb_find(dts[di], (zipcclCodec_t)codecs[ci], tail, delta, &k)) {
                        found = 0;
                        snprintf(wf, sizeof wf, "%s chunk at raw %+d: no seed of %d gives it",
                                 tail ? "short tail" : "full", delta, ZCB_SEEDS);
                        free(k.data);
                        continue;
                    }
                    size_t es = esize(dts[di]);
                    uint8_t* chunk = malloc(k.raw);
                    ref_chunk(ref_dt(dts[di]), mode_of(codecs[ci]), k.data + k.at * es, k.n, chunk);
                    if (ref_coded_size != k.coded) {
                        sizes = 0;
                        snprintf(ws, sizeof ws, "%s chunk at raw %+d: reference %zu bytes, generator %zu",
                                 tail ? "short tail" : "full", delta, ref_coded_size, k.coded);
                    }
                    free(chunk);
                    for (int cs = 0; cs < 2; cs++) {
                        char w[256];
                        size_t fs;
                        if (!roundtrip(dts[di], codecs[ci], cs, k.data, k.count, 0, &fs, w, sizeof w)) {
                            frames = 0;
                            snprintf(wr, sizeof wr, "%s chunk at raw %+d, checksum %d: %s", tail ? "short tail" : "full",
                                     delta, cs, w);
                        }
                        size_t bound = zipcclCompressBound(k.count, dts[di], cs);
                        uint8_t* f = malloc(bound);
                        zipcclCodecParams_t p = {(zipcclCodec_t)codecs[ci], cs, zipcclSimdAuto};
                        fs = 0;
                        zipcclCompress(k.data, k.count, dts[di], f, bound, &fs, &p);
                        int mode = zcb_chunk_mode(&k, f, fs), want_mode = delta < 0 ? mode_of(codecs[ci]) : 0;
                        size_t got = zcb_chunk_size(&k, f, fs), want = delta < 0 ? k.coded : k.raw;
                        if (mode != want_mode || got != want) {
                            choice = 0;
                            snprintf(wc, sizeof wc, "%s chunk coded to raw %+d, checksum %d: mode %d, %zu bytes; want mode %d, %zu bytes",
                                     tail ? "short tail" : "full", delta, cs, mode, got, want_mode, want);
                        }
                        free(f);
                    }
                    free(k.data);
                }
            char tn[96];
            const char* tag = dts[di] == zipcclBfloat16 ? "bf16" : dts[di] == zipcclFloat16 ? "fp16" : "fp32";
            snprintf(tn, sizeof tn, "boundary/%s/%s/found", tag, codec_name(codecs[ci]));
            CHECK(found, tn, "%s", wf);
            snprintf(tn, sizeof tn, "boundary/%s/%s/reference_coded_size", tag, codec_name(codecs[ci]));
            CHECK(sizes, tn, "%s", ws);
            snprintf(tn, sizeof tn, "boundary/%s/%s/frames_equal_reference_and_roundtrip", tag, codec_name(codecs[ci]));
            CHECK(frames, tn, "%s", wr);
            snprintf(tn, sizeof tn, "boundary/%s/%s/coded_iff_below_raw", tag, codec_name(codecs[ci]));
            CHECK(choice, tn, "%s", wc);
        }
}

/* ------------------------------------------------------------------------ */
/* T tiers on every path: shapes, heavy lower tiers, damaged frames          */
/* ------------------------------------------------------------------------ */
/* Gaussian data leaves most of T's decoder idle: shapes a, b <= 1, tier 3
 * a few percent of the elements, escapes rarer still. These inputs give
 * each 16384-element chunk its own exponent distribution (flat over the
 * window, a heavy tail on either side, random weights over 16 exponents
 * with some outside the window, near the ends of the exponent range), so
 * the SIMD tier kernels see many shapes, full tier-2 halves, long tier-3
 * runs and many escapes, and must match the reference byte for byte. */

static uint8_t* make_tiered(zipcclDataType_t dt, size_t count) {
    size_t es = esize(dt);
    int M = dt == zipcclBfloat16 ? 7 : dt == zipcclFloat16 ? 10 : 23, emax = dt == zipcclFloat16 ? 31 : 255;
    uint8_t* x = malloc(count * es + 1);
    double w[16];
    int k = 0, prof = 0;
    for (size_t i = 0; i < count; i++) {
        if (i % 16384 == 0) { /* a new chunk, a new distribution */
            prof = (int)(rnd() % 6);
            k = 2 + (int)(rnd() % (uint64_t)(emax - 3));
            for (int j = 0; j < 16; j++) {
                double u = (double)(rnd() % 1000 + 1) / 1000.0;
                w[j] = prof == 0 ? (j < 13 ? 1.0 : 0.0)              /* flat over the window */
                     : prof == 1 ? pow(0.8, j)                        /* heavy tail, one side */
                     : prof == 2 ? pow(0.8, 15 - j)                   /* and the other        */
                     : prof == 3 ? u * u * u                          /* random weights       */
                                 : exp(-(j - 6.0) * (j - 6.0) / 8.0); /* narrow, bell-shaped  */
            }
        }
        double tot = 0, pick;
        for (int j = 0; j < 16; j++) tot += w[j];
        pick = tot * (double)(rnd() % 1000000) / 1000000.0;
        int j = 0;
        while (j < 15 && pick >= w[j]) pick -= w[j++];
        /* runs: 64 elements near k, 64 seven exponents below, in turn: the
         * second set goes to tier 2 or 3 whole, halves of all code 3 */
        int e = prof == 5 ? k - ((i / 64) % 2 ? 7 : 0) + j % 3 : k - 8 + j;
        e = e < 0 ? 0 : e > emax ? emax : e;
        uint64_t r = rnd();
        uint32_t v = (uint32_t)(r & ((1u << M) - 1)) | (uint32_t)e << M | (uint32_t)((r >> 40) & 1) << (es == 2 ? 15 : 31);
        put_elem(x, i, (int)es, v);
    }
    return x;
}

/* Sizes of tier 2 and 3 (m2, m3) of T chunk c of n elements. */
static void t_tiers(const uint8_t* c, size_t n, zipcclDataType_t dt, size_t* m2, size_t* m3) {
    size_t G = (n + 63) / 64, rest = dt == zipcclBfloat16 ? n : dt == zipcclFloat16 ? n + 24 * G : 3 * n;
    const uint8_t* t1 = c + 8 + rest;
    *m2 = *m3 = 0;
    for (size_t g = 0; g < G; g++)
        for (int b = 0; b < 8; b++) *m2 += (size_t)__builtin_popcount(t1[16 * g + b] & t1[16 * g + 8 + b]);
    const uint8_t* t2 = t1 + 16 * G;
    for (size_t h = 0; h < (*m2 + 63) / 64; h++)
        for (int b = 0; b < 8; b++) *m3 += (size_t)__builtin_popcount(t2[16 * h + b] & t2[16 * h + 8 + b]);
}

static void tier_heavy(void) {
    zipcclDataType_t dts[3] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    const char* tags[3] = {"bf16", "fp16", "fp32"};
    const size_t counts[] = {16384 * 24 + 1, 16384 * 3 - 31, 5 * 16384 + 16383, 16384 + 65, 1000, 97};
    for (int di = 0; di < 3; di++) {
        zipcclDataType_t dt = dts[di];
        int ok = 1, shapes[32] = {0}, nshapes = 0;
        double max3 = 0;
        size_t halves_full = 0;
        char why[400] = "", tn[96];
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0] && ok; ci++) {
            size_t n = counts[ci], fs;
            uint8_t* x = make_tiered(dt, n);
            for (int mis = 0; mis < 2 && ok; mis++) {
                char w[300];
                if (!roundtrip(dt, zipcclCodecFast, mis, x, n, mis ? 5 : 0, &fs, w, sizeof w)) {
                    snprintf(why, sizeof why, "count %zu checksum %d: %s", n, mis, w);
                    ok = 0;
                }
            }
            /* what the frames exercised (the reference's bytes, checked above) */
            uint8_t* f = NULL;
            size_t ffs = fast_frame(dt, x, n, 0, &f);
            if (ffs && !(f[6] & 2)) {
                size_t nc = (n + 16383) / 16384, at = 16 + 4 * nc;
                for (size_t c = 0; c < nc; c++) {
                    size_t cn = c + 1 < nc ? 16384 : n - 16384 * c;
                    if (f[at] == 4) {
                        size_t m2, m3;
                        if (!shapes[f[at + 2]]++) nshapes++;
                        t_tiers(f + at, cn, dt, &m2, &m3);
                        if ((double)m3 / (double)cn > max3) max3 = (double)m3 / (double)cn;
                        size_t rest = dt == zipcclBfloat16 ? cn : dt == zipcclFloat16 ? cn + 24 * ((cn + 63) / 64) : 3 * cn;
                        const uint8_t* t1 = f + at + 8 + rest;
                        for (size_t g = 0; g < cn / 64; g++)
                            for (int hh = 0; hh < 2; hh++) {
                                uint32_t a0, a1;
                                memcpy(&a0, t1 + 16 * g + 4 * hh, 4);
                                memcpy(&a1, t1 + 16 * g + 8 + 4 * hh, 4);
                                halves_full += (a0 & a1) == 0xFFFFFFFFu;
                            }
                    }
                    at += get32(f + 16 + 4 * c);
                }
            }
            free(f);
            free(x);
        }
        snprintf(tn, sizeof tn, "%s_t_tier_heavy_roundtrip_matches_reference", tags[di]);
        CHECK(ok, tn, "%s", why);
        printf("# %s tier-heavy: %d shapes, largest tier-3 share %.2f, %zu tier-1 halves all code 3\n", tags[di],
               nshapes, max3, halves_full);
        snprintf(tn, sizeof tn, "%s_t_tier_heavy_inputs_reach_the_lower_tiers", tags[di]);
        CHECK(nshapes >= 12 && max3 > 0.4 && halves_full > 0, tn, "%d shapes, tier-3 share %.2f, %zu full halves",
              nshapes, max3, halves_full);
    }

    /* Decoding in segments: a chunk_log2 20 frame of such data (written by
     * the reference) on every path. */
    for (int di = 0; di < 3; di++) {
        zipcclDataType_t dt = dts[di];
        size_t n = (1u << 20) + 777, es = esize(dt);
        uint8_t* x = make_tiered(dt, n);
        uint8_t* f = malloc(16 + 8 * (n / 1024 + 2) + 8 * n + 64 * (n / 1024 + 2));
        uint8_t* out = malloc(n * es);
        size_t fs = ref_frame_log2(dt, zipcclCodecFast, 0, x, n, f, 20);
        int ok = 1;
        for (int a = 0; a < npaths; a++) {
            memset(out, 0xA5, n * es);
            ok &= dec(f, fs, out, n * es, dt, paths[a]) == zipcclSuccess && !memcmp(out, x, n * es);
        }
        char tn[96];
        snprintf(tn, sizeof tn, "%s_t_tier_heavy_chunk_log2_20_decodes_on_every_path", tags[di]);
        CHECK(ok, tn, "a path failed or decoded other values");
        free(x); free(f); free(out);
    }

    /* Damaged frames: every path answers with the same result code, and
     * where the damage still decodes (a flipped rest bit, a tier code moved
     * to another valid one), with the same values. Half the damage lands in
     * the codes (tiers and escapes), where the kernels differ. */
    for (int di = 0; di < 3; di++) {
        zipcclDataType_t dt = dts[di];
        size_t n = 2 * 16384 + 333, es = esize(dt);
        for (int codec = 1; codec <= LAST_CODEC; codec++) {
            if (codec == zipcclCodecStored) continue;
            for (int data = 0; data < 2; data++) {
                uint8_t* x = data ? make_tiered(dt, n) : make_gauss(dt, n, 0.3);
                size_t bound = zipcclCompressBound(n, dt, 0), fs = 0;
                uint8_t* f = malloc(bound);
                zipcclCodecParams_t p = {(zipcclCodec_t)codec, 0, zipcclSimdAuto};
                zipcclCompress(x, n, dt, f, bound, &fs, &p);
                if (f[6] & 2) { /* stored (fp16 F2 of the tiered data): nothing coded to damage */
                    free(f); free(x);
                    continue;
                }
                uint8_t* m = malloc(fs);
                uint8_t* out[3];
                for (int a = 0; a < npaths; a++) out[a] = malloc(n * es);
                size_t rest = dt == zipcclBfloat16 ? 16384 : dt == zipcclFloat16 ? 16384 + 24 * 256 : 3 * 16384;
                int ok = 1, decoded = 0, rejected = 0, tries = codec == zipcclCodecFast || codec == zipcclCodecF2 ? 600 : 150;
                char why[200] = "";
                for (int t = 0; t < tries && ok; t++) {
                    memcpy(m, f, fs);
                    size_t at = rnd() % fs, c0 = 16 + 4 * 3;
                    if (t % 2 && fs > c0 + 8 + rest + 1) /* past chunk 0's rest: its codes, escapes, later chunks */
                        at = c0 + 8 + rest + rnd() % (fs - c0 - 8 - rest);
                    if (t % 3 == 2) m[at] = (uint8_t)rnd();
                    else m[at] ^= (uint8_t)(1u << (rnd() % 8));
                    zipcclResult_t r0 = zipcclSuccess;
                    for (int a = 0; a < npaths && ok; a++) {
                        zipcclResult_t r = dec(m, fs, out[a], n * es, 0, paths[a]);
                        if (a == 0) r0 = r;
                        else if (r != r0) {
                            snprintf(why, sizeof why, "byte %zu: %s says %s, %s says %s", at, simd_name(paths[0]),
                                     zipcclGetErrorString(r0), simd_name(paths[a]), zipcclGetErrorString(r));
                            ok = 0;
                        } else if (r == zipcclSuccess && memcmp(out[a], out[0], n * es)) {
                            snprintf(why, sizeof why, "byte %zu: %s decodes other values than %s", at,
                                     simd_name(paths[a]), simd_name(paths[0]));
                            ok = 0;
                        }
                    }
                    decoded += r0 == zipcclSuccess;
                    rejected += r0 == zipcclCorruptStream;
                }
                char tn[128];
                snprintf(tn, sizeof tn, "%s_%s_%s_damage_same_answer_on_every_path", tags[di], codec_name(codec),
                         data ? "tiered" : "gauss");
                CHECK(ok && decoded > 0 && rejected > 0, tn, "%s (%d decoded, %d rejected)", why, decoded, rejected);
                for (int a = 0; a < npaths; a++) free(out[a]);
                free(m); free(f); free(x);
            }
        }
    }
}

/* ------------------------------------------------------------------------ */

/* docs/FORMAT.md's worked examples, read from the document itself (so the
 * spec and the library cannot drift apart): every code block after a line
 * that starts "Worked example", its hex bytes (the leading two-digit tokens of
 * each line, the rest a comment). Returns the number of blocks (at most max). */
typedef struct {
    uint8_t b[256];
    size_t n;
} DocBytes;
static int read_worked_examples(DocBytes* out, int max) {
    FILE* f = fopen("docs/FORMAT.md", "r");
    if (!f) return -1;
    char line[512];
    int n = 0, state = 0; /* 0: prose, 1: after "Worked example", 2: in its block */
    while (fgets(line, sizeof line, f)) {
        if (state == 0 && !strncmp(line, "Worked example", 14)) state = 1;
        else if (state == 1 && !strncmp(line, "```", 3)) {
            if (n == max) break;
            out[n].n = 0;
            state = 2;
        } else if (state == 2 && !strncmp(line, "```", 3)) {
            n++;
            state = 0;
        } else if (state == 2) { /* bytes, then three spaces and a comment */
            char* gap = strstr(line, "   ");
            if (gap) *gap = 0;
            for (char* t = strtok(line, " \n"); t; t = strtok(NULL, " \n")) {
                unsigned v;
                if (strlen(t) != 2 || sscanf(t, "%2x", &v) != 1 || out[n].n == sizeof out[n].b) break;
                out[n].b[out[n].n++] = (uint8_t)v;
            }
        }
    }
    fclose(f);
    return n;
}

/* The worked examples decode to their inputs and the reference encoder
 * writes exactly their bytes; the version byte of a document's frame means
 * what §2 says. */
static void check_worked_examples(void) {
    DocBytes ex[4];
    const int n = read_worked_examples(ex, 4);
    if (!CHECK(n == 2, "format_doc_worked_examples_found", "read %d worked examples from docs/FORMAT.md (want 2)", n))
        return;
    zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
    uint8_t frame[512];
    size_t size = 0, cnt = 0;
    /* §3: a stored frame with checksums */
    const uint16_t small[3] = {0x3F80, 0xC000, 0x3F00};
    uint16_t back[3] = {0};
    p.checksum = 1;
    zipcclResult_t rc = zipcclCompress(small, 3, zipcclBfloat16, frame, sizeof frame, &size, &p);
    zipcclResult_t rd = zipcclDecompress(ex[0].b, ex[0].n, back, sizeof back, &cnt, zipcclBfloat16, NULL);
    CHECK(rc == zipcclSuccess && size == ex[0].n && !memcmp(frame, ex[0].b, size) && rd == zipcclSuccess &&
              cnt == 3 && !memcmp(back, small, sizeof small),
          "format_doc_example_stored_frame", "encoder %d, %zu bytes vs the document's %zu, %s; decoder %d",
          (int)rc, size, ex[0].n, size == ex[0].n && !memcmp(frame, ex[0].b, size) ? "same" : "DIFFERENT",
          (int)rd);
    /* §4.7: two C chunks, version 3 */
    enum { N = 17384 };
    static uint16_t big[N], dec[N];
    for (int i = 0; i < N; i++) big[i] = i < 16384 ? 0x0000 : 0x3F80;
    p.checksum = 0;
    p.codec = zipcclCodecFast;
    rc = zipcclCompress(big, N, zipcclBfloat16, frame, sizeof frame, &size, &p);
    rd = zipcclDecompress(ex[1].b, ex[1].n, dec, sizeof dec, &cnt, zipcclBfloat16, NULL);
    CHECK(rc == zipcclSuccess && size == ex[1].n && !memcmp(frame, ex[1].b, size) && rd == zipcclSuccess &&
              cnt == N && !memcmp(dec, big, sizeof big),
          "format_doc_example_constant_chunks", "encoder %d, %zu bytes vs the document's %zu; decoder %d",
          (int)rc, size, ex[1].n, (int)rd);
    ex[1].b[4] = 2; /* the same bytes as a version 2 frame: mode 5 is unknown there */
    rd = zipcclDecompress(ex[1].b, ex[1].n, dec, sizeof dec, &cnt, zipcclBfloat16, NULL);
    ex[1].b[4] = 5; /* a version this library does not know: unsupported, whatever follows */
    zipcclResult_t ru = zipcclDecompress(ex[1].b, ex[1].n, dec, sizeof dec, &cnt, zipcclBfloat16, NULL);
    CHECK(rd == zipcclCorruptStream && ru == zipcclUnsupported, "format_doc_example_versions",
          "as version 2: %d (want corrupt), as version 5: %d (want unsupported)", (int)rd, (int)ru);
    /* the header's constant is the codec's newest version, and codec dense writes it */
    const uint16_t g[4] = {0x3F80, 0xBF80, 0x4000, 0x3E00};
    static uint16_t gauss[4096];
    for (int i = 0; i < 4096; i++) gauss[i] = g[i % 4] ^ (uint16_t)((i * 37) & 0x7F);
    p.codec = zipcclCodecDense;
    uint8_t* big_frame = malloc(zipcclCompressBound(4096, zipcclBfloat16, 0));
    rc = zipcclCompress(gauss, 4096, zipcclBfloat16, big_frame, zipcclCompressBound(4096, zipcclBfloat16, 0),
                        &size, &p);
    CHECK(ZIPCCL_FORMAT_VERSION == ZCF_VERSION && rc == zipcclSuccess && !(big_frame[6] & 2) &&
              big_frame[4] == ZIPCCL_FORMAT_VERSION,
          "format_version_constant", "ZIPCCL_FORMAT_VERSION %d, the codec's %d, a dense frame's %d (%s)",
          ZIPCCL_FORMAT_VERSION, ZCF_VERSION, big_frame[4], big_frame[6] & 2 ? "stored" : "compressed");
    free(big_frame);
    /* codec dense writes version 4 for every compressed frame, also one that
     * would fit version 1 (R chunks of tables 0..7 only, no C chunk): FORMAT.md
     * §2, zipccl.h */
    size_t nd = 3 * 16384, bound = zipcclCompressBound(nd, zipcclBfloat16, 0);
    uint8_t* f = malloc(bound);
    int found = 0, version = -1;
    uint64_t rng_saved = rng_state; /* the later checks keep their inputs */
    for (int s = 0; s < 8 && !found; s++) {
        uint8_t* x = make_gauss(zipcclBfloat16, nd, ldexp(1.0, -3 * s));
        if (zipcclCompress(x, nd, zipcclBfloat16, f, bound, &size, &p) == zipcclSuccess && !(f[6] & 2)) {
            int fits_v1 = 1;
            for (size_t k = 0, at = 16 + 4 * 3; k < 3; at += get32(f + 16 + 4 * k), k++)
                fits_v1 &= (f[at] == 0 || f[at] == 2) && f[at + 2] < 8;
            if (fits_v1) found = 1, version = f[4];
        }
        free(x);
    }
    rng_state = rng_saved;
    CHECK(found && version == 4, "format_dense_writes_version_4_where_1_fits", "%s, version %d",
          found ? "found" : "no dense frame of tables 0..7 only", version);
    free(f);
}

int main(void) {
    paths[npaths++] = zipcclSimdScalar;
    zipcclSimd_t best = zipcclSimdDetect();
    if (best >= zipcclSimdAvx2) paths[npaths++] = zipcclSimdAvx2;
    if (best >= zipcclSimdAvx512) paths[npaths++] = zipcclSimdAvx512;
    printf("# SIMD paths tested: %d (best %s)\n", npaths, simd_name(best));
    int longrun = getenv("ZIPCCL_TEST_LONG") != NULL;

    /* bound */
    CHECK(zipcclCompressBound(0, zipcclBfloat16, 0) == 16 && zipcclCompressBound(0, zipcclBfloat16, 1) == 20 &&
              zipcclCompressBound(16385, zipcclFloat32, 1) == 16 + 4 * 16385 + 4 + 8 &&
              zipcclCompressBound(10, (zipcclDataType_t)3, 0) == 0,
          "compress_bound_values", "wrong bound");

    CHECK(ZIPCCL_RANS_NTABLES_V1 == 8 && !memcmp(zipccl_rans_freq, REF_F_V1, sizeof REF_F_V1), "rans_v1_tables_unchanged",
          "tables 0..7 differ from those of version 1-3 frames");
    check_worked_examples();

    /* exhaustive 16-bit */
    exhaustive16(zipcclBfloat16, "bf16");
    exhaustive16(zipcclFloat16, "fp16");

    /* fp32: random bits, specials, Gaussian */
    {
        size_t n = 70000;
        uint32_t* v = malloc(4 * n);
        for (size_t i = 0; i < n; i++) v[i] = (uint32_t)rnd();
        check_rt("fp32_random_bits_roundtrip", zipcclFloat32, (uint8_t*)v, n);
        uint8_t* g = make_gauss(zipcclFloat32, n, 1.0);
        uint32_t* gw = (uint32_t*)g;
        const uint32_t specials[] = {0, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u,
                                     0xFFFFFFFFu, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu, 0x00800000u};
        for (size_t i = 0; i < n; i += 7) gw[i] = (i / 7) % 3 ? specials[(i / 7) % 11] : (uint32_t)rnd();
        check_rt("fp32_gaussian_with_specials_roundtrip", zipcclFloat32, g, n);
        uint8_t* t = make_gauss(zipcclFloat32, n, 1e-37);
        for (size_t i = 0; i < n; i += 5) ((uint32_t*)t)[i] = specials[(i / 5) % 11];
        check_rt("fp32_tiny_with_inf_nan_roundtrip", zipcclFloat32, t, n);
        free(v); free(g); free(t);
    }

    /* counts and misalignment */
    {
        const size_t counts[] = {0, 1, 2, 7, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 16383, 16384, 16385, 3 * 16384 + 77};
        zipcclDataType_t dts[3] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
        const char* tags[3] = {"bf16", "fp16", "fp32"};
        for (int di = 0; di < 3; di++) {
            int ok = 1;
            char why[300] = "";
            for (size_t ci = 0; ci < sizeof counts / sizeof counts[0] && ok; ci++) {
                uint8_t* x = make_gauss(dts[di], counts[ci] + 1, 3.0);
                for (int codec = 1; codec <= LAST_CODEC && ok; codec++)
                    for (int mis = 0; mis < 2 && ok; mis++) {
                        size_t fs;
                        char w[256];
                        if (!roundtrip(dts[di], codec, mis, x, counts[ci], mis ? 3 : 0, &fs, w, sizeof w)) {
                            snprintf(why, sizeof why, "count %zu %s misaligned=%d: %s", counts[ci], codec_name(codec), mis, w);
                            ok = 0;
                        }
                    }
                free(x);
            }
            char tn[96];
            snprintf(tn, sizeof tn, "%s_counts_and_unaligned_roundtrip", tags[di]);
            CHECK(ok, tn, "%s", why);
        }
    }

    /* large frames, scales (a quarter of the size under AddressSanitizer:
     * the same paths, many chunks still; the plain build runs the full size) */
    {
        const uint64_t rng_saved = rng_state; /* the later checks' inputs do not depend on n */
        size_t n = longrun ? 4000000 : SANITIZED ? 250003 : 1000003;
        zipcclDataType_t dts[3] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
        const char* tags[3] = {"bf16", "fp16", "fp32"};
        const double sig[] = {1.0, 0.003, 37.0};
        for (int di = 0; di < 3; di++) {
            uint8_t* x = make_gauss(dts[di], n, sig[di]);
            char tn[96];
            snprintf(tn, sizeof tn, "%s_large_%zu_roundtrip", tags[di], n);
            check_rt(tn, dts[di], x, n);
            free(x);
        }
        rng_state = rng_saved;
    }

    /* frames with other chunk sizes (decoders accept chunk_log2 10..20) */
    {
        zipcclDataType_t dts[3] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
        const int logs[2] = {10, 20};
        int ok = 1;
        char why[200] = "";
        for (int di = 0; di < 3; di++)
            for (int li = 0; li < 2; li++)
                for (int codec = 1; codec <= LAST_CODEC; codec++) {
                    size_t n = logs[li] == 10 ? 5000 : (1u << 20) + 3001, es = esize(dts[di]);
                    uint8_t* x = make_gauss(dts[di], n, 0.7);
                    uint8_t* f = malloc(16 + 8 * (n / 1024 + 2) + 8 * n + 64 * (n / 1024 + 2));
                    uint8_t* out = malloc(n * es);
                    size_t fs = ref_frame_log2(dts[di], codec, codec >= 2, x, n, f, logs[li]);
                    for (int a = 0; a < npaths; a++) {
                        zipcclCodecParams_t q = {zipcclCodecDefault, 0, paths[a]};
                        size_t got = 0;
                        zipcclResult_t r = zipcclDecompress(f, fs, out, n * es, &got, dts[di], &q);
                        if (r != zipcclSuccess || got != n || memcmp(out, x, n * es)) {
                            snprintf(why, sizeof why, "dtype %d chunk_log2 %d %s on %s: %s", (int)dts[di], logs[li],
                                     codec_name(codec), simd_name(paths[a]), zipcclGetLastErrorDetail());
                            ok = 0;
                        }
                    }
                    free(x); free(f); free(out);
                }
        CHECK(ok, "decode_chunk_log2_10_and_20_frames", "%s", why);
    }

    /* random sweep: dtype, count, scale, specials, codec, checksum, alignment */
    {
        int iters = longrun ? 600 : 40, ok = 1;
        char why[400] = "";
        zipcclDataType_t dts[3] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
        for (int it = 0; it < iters && ok; it++) {
            zipcclDataType_t dt = dts[rnd() % 3];
            size_t n = rnd() % 4 == 0 ? rnd() % 200 : rnd() % 70000;
            double lo = dt == zipcclFloat16 ? -6 : -30, hi = dt == zipcclFloat16 ? 4 : 30;
            double sigma = pow(10.0, lo + (hi - lo) * (double)(rnd() % 1000) / 1000.0);
            uint8_t* x = make_gauss(dt, n, sigma);
            size_t es = esize(dt), nspecial = rnd() % 3 == 0 ? n / (1 + rnd() % 50) : 0;
            for (size_t k = 0; k < nspecial; k++) { /* random bit patterns dropped anywhere */
                size_t i = rnd() % n;
                uint64_t r = rnd();
                memcpy(x + i * es, &r, es);
            }
            int codec = 1 + (int)(rnd() % LAST_CODEC), cs = (int)(rnd() % 2);
            size_t mis = rnd() % 8, fs;
            char w[300];
            if (!roundtrip(dt, codec, cs, x, n, mis, &fs, w, sizeof w)) {
                snprintf(why, sizeof why, "iter %d dtype %d n %zu sigma %g %s cs %d: %s", it, (int)dt, n, sigma,
                         codec_name(codec), cs, w);
                ok = 0;
            }
            free(x);
        }
        CHECK(ok, "random_sweep_roundtrip_matches_reference", "%s", why);
    }

    /* ratios on Gaussian data (each table phase) */
    {
        const uint64_t rng_saved = rng_state; /* the later checks' inputs do not depend on the phases run */
        size_t n = 1 << 20;
        struct { zipcclDataType_t dt; int codec; double min; const char* name; } rq[] = {
            {zipcclBfloat16, zipcclCodecFast, 1.48, "bf16_fast"}, {zipcclBfloat16, zipcclCodecDense, 1.50, "bf16_dense"},
            {zipcclFloat16, zipcclCodecFast, 1.16, "fp16_fast"}, {zipcclFloat16, zipcclCodecDense, 1.16, "fp16_dense"},
            {zipcclFloat32, zipcclCodecFast, 1.19, "fp32_fast"}, {zipcclFloat32, zipcclCodecDense, 1.19, "fp32_dense"},
        };
        for (size_t k = 0; k < sizeof rq / sizeof rq[0]; k++) {
            double worst = 1e9;
            /* ratios are arithmetic, not memory: under AddressSanitizer two
             * of the phases (the plain build checks all eight) */
            for (int ph = 0; ph < 8; ph += SANITIZED ? 4 : 1) {
                double sigma = pow(2.0, ph / 8.0 + 0.03) * (rq[k].dt == zipcclFloat16 ? 0.25 : 1.0);
                uint8_t* x = make_gauss(rq[k].dt, n, sigma);
                size_t bound = zipcclCompressBound(n, rq[k].dt, 0), fs = 0;
                uint8_t* f = malloc(bound);
                zipcclCodecParams_t p = {(zipcclCodec_t)rq[k].codec, 0, zipcclSimdAuto};
                zipcclCompress(x, n, rq[k].dt, f, bound, &fs, &p);
                double ratio = (double)(n * esize(rq[k].dt)) / (double)fs;
                if (ratio < worst) worst = ratio;
                free(x); free(f);
            }
            char tn[96];
            snprintf(tn, sizeof tn, "%s_gaussian_ratio_at_least_%.2f", rq[k].name, rq[k].min);
            printf("# %s worst ratio over %d scale phases: %.4f\n", rq[k].name, SANITIZED ? 2 : 8, worst);
            CHECK(worst >= rq[k].min, tn, "ratio %.4f", worst);
        }
        rng_state = rng_saved;
    }

    /* worst case: uniform random bits -> stored frame of exactly the bound */
    {
        zipcclDataType_t dts[3] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
        int ok = 1;
        for (int di = 0; di < 3; di++)
            for (int codec = zipcclCodecFast; codec <= LAST_CODEC; codec = next_coded(codec))
                for (int cs = 0; cs < 2; cs++) {
                    size_t n = 40000, bytes = n * esize(dts[di]), bound = zipcclCompressBound(n, dts[di], cs), fs;
                    uint8_t* x = malloc(bytes);
                    for (size_t i = 0; i < bytes; i++) x[i] = (uint8_t)rnd();
                    uint8_t* f = malloc(bound);
                    zipcclCodecParams_t p = {(zipcclCodec_t)codec, cs, zipcclSimdAuto};
                    zipcclResult_t r = zipcclCompress(x, n, dts[di], f, bound, &fs, &p);
                    zipcclFrameInfo_t fi;
                    if (r || fs != bound || zipcclGetFrameInfo(f, fs, &fi) || !fi.stored) ok = 0;
                    /* one byte less than the bound: nothing fits */
                    r = zipcclCompress(x, n, dts[di], f, bound - 1, &fs, &p);
                    if (r != zipcclDstTooSmall) ok = 0;
                    free(x); free(f);
                }
        CHECK(ok, "random_bits_stored_frame_equals_bound", "random data did not give a stored frame of the bound");
    }

    /* a destination smaller than the bound: exactly the frame fits, one byte less does not */
    {
        size_t n = 2 * 16384 + 999;
        int ok = 1;
        for (int codec = zipcclCodecFast; codec <= LAST_CODEC; codec = next_coded(codec))
            for (int cs = 0; cs < 2; cs++) {
                uint8_t* x = make_gauss(zipcclBfloat16, n, 0.5);
                size_t bound = zipcclCompressBound(n, zipcclBfloat16, cs), fs, fs2 = 0;
                uint8_t* f = malloc(bound);
                uint8_t* g = malloc(bound);
                zipcclCodecParams_t p = {(zipcclCodec_t)codec, cs, zipcclSimdAuto};
                zipcclCompress(x, n, zipcclBfloat16, f, bound, &fs, &p);
                if (zipcclCompress(x, n, zipcclBfloat16, g, fs, &fs2, &p) != zipcclSuccess || fs2 != fs || memcmp(f, g, fs))
                    ok = 0;
                if (zipcclCompress(x, n, zipcclBfloat16, g, fs - 1, &fs2, &p) != zipcclDstTooSmall) ok = 0;
                free(x); free(f); free(g);
            }
        CHECK(ok, "compress_into_exact_frame_capacity", "tight destination mishandled");
    }

    /* per-chunk raw fallback: one random chunk among Gaussian ones */
    {
        size_t n = 3 * 16384;
        uint8_t* x = make_gauss(zipcclBfloat16, n, 1.0);
        for (size_t i = 2 * 16384 * 2; i < 3 * 16384 * 2; i++) x[i] = (uint8_t)rnd(); /* chunk 2 */
        size_t bound = zipcclCompressBound(n, zipcclBfloat16, 0), fs;
        uint8_t* f = malloc(bound);
        int ok = 1;
        for (int codec = zipcclCodecFast; codec <= LAST_CODEC; codec = next_coded(codec)) {
            zipcclCodecParams_t p = {(zipcclCodec_t)codec, 0, zipcclSimdAuto};
            zipcclCompress(x, n, zipcclBfloat16, f, bound, &fs, &p);
            size_t c0 = get32(f + 16), c1 = get32(f + 20);
            uint8_t* chunk2 = f + 16 + 12 + c0 + c1;
            if (chunk2[0] != 0 || get32(f + 24) != 8 + 32768 || f[16 + 12] != mode_of(codec)) ok = 0;
        }
        check_rt("bf16_raw_chunk_fallback_roundtrip", zipcclBfloat16, x, n);
        CHECK(ok, "bf16_raw_chunk_fallback_mode", "random chunk not stored raw");
        free(x); free(f);
    }

    /* frame info */
    {
        size_t n = 20000;
        uint8_t* x = make_gauss(zipcclFloat16, n, 1.0);
        size_t bound = zipcclCompressBound(n, zipcclFloat16, 1), fs;
        uint8_t* f = malloc(bound);
        zipcclCodecParams_t p = {zipcclCodecDense, 1, zipcclSimdAuto};
        zipcclCompress(x, n, zipcclFloat16, f, bound, &fs, &p);
        zipcclFrameInfo_t fi;
        zipcclResult_t r = zipcclGetFrameInfo(f, fs, &fi);
        CHECK(r == zipcclSuccess && fi.count == n && fi.dtype == zipcclFloat16 && fi.frameSize == fs &&
                  fi.decompressedSize == 2 * n && fi.checksum && !fi.stored && fi.numChunks == 2,
              "frame_info_fields", "r=%d count=%llu size=%zu/%zu", r, (unsigned long long)fi.count, fi.frameSize, fs);
        free(x); free(f);
    }

    /* arguments */
    {
        uint16_t v[4] = {1, 2, 3, 4};
        uint8_t f[64];
        size_t fs;
        zipcclCodecParams_t bad = {(zipcclCodec_t)9, 0, zipcclSimdAuto};
        CHECK(zipcclCompress(v, 4, zipcclBfloat16, f, sizeof f, &fs, &bad) == zipcclInvalidArgument,
              "compress_bad_codec_rejected", "accepted");
        zipcclCodecParams_t bads = {zipcclCodecFast, 0, (zipcclSimd_t)7};
        CHECK(zipcclCompress(v, 4, zipcclBfloat16, f, sizeof f, &fs, &bads) == zipcclInvalidArgument,
              "compress_bad_simd_rejected", "accepted");
        CHECK(zipcclCompress(v, 4, (zipcclDataType_t)2, f, sizeof f, &fs, NULL) == zipcclInvalidArgument,
              "compress_bad_dtype_rejected", "accepted");
        CHECK(zipcclCompress(NULL, 4, zipcclBfloat16, f, sizeof f, &fs, NULL) == zipcclInvalidArgument,
              "compress_null_src_rejected", "accepted");
        CHECK(zipcclCompress(v, 4, zipcclBfloat16, f, 10, &fs, NULL) == zipcclDstTooSmall,
              "compress_dst_too_small", "accepted");
        if (best < zipcclSimdAvx512) {
            zipcclCodecParams_t p512 = {zipcclCodecFast, 0, zipcclSimdAvx512};
            CHECK(zipcclCompress(v, 4, zipcclBfloat16, f, sizeof f, &fs, &p512) == zipcclUnsupported,
                  "compress_unsupported_simd_rejected", "accepted");
        }
    }

    attacks();
    hostile();
    precedence();
    constant_chunks();
    boundary_chunks();
    tier_heavy();
    return tu_exit();
}
