/*
 * codec_bench.c — zipccl-codec-bench: the CPU codec against baselines, one thread.
 *
 *   build/zipccl-codec-bench                       # bf16/fp16/fp32, 1 MiB + 32 MiB
 *   build/zipccl-codec-bench -s 32M -d bf16 --json > out.jsonl
 *   build/zipccl-codec-bench --input dump.safetensors
 *
 * For every input (synthetic Gaussian tensors over a range of scales, uniform
 * random bits, or real tensors from a file) and every codec (ours: fast and
 * dense, optionally with checksums and on each SIMD path; baselines: memcpy,
 * zstd -1 / -19 on plain and byte-grouped bytes, lz4) it prints the ratio,
 * compress and decompress GB/s on the uncompressed byte count (median of the
 * repetitions) and the entropy bound of exponent-only coding for that very
 * data, so a reader sees at a glance how close each codec gets.  Every round
 * trip is checked bit for bit; a mismatch is an error and a non-zero exit.
 * Times are wall-clock by default; --clock cpu counts this thread's CPU time,
 * which stays meaningful when other jobs oversubscribe the machine.
 *
 * "Byte-grouped" (-bg) regroups the bytes by their position in the element
 * (all high bytes, then the next, ..., then all low bytes) before zstd: the
 * classic trick that lets a general-purpose compressor see the exponent bytes
 * together, and the fair baseline for an exponent coder.
 *
 * Left out: multi-threaded throughput (the codec's scaling belongs to the
 * collective benchmark), GPU codecs (scripts/test_gpu.sh), and the runtime:
 * it links libzipccl alone and reads a .safetensors file itself (its JSON
 * header through jansson), taking only what it measures from it.
 */
#include <errno.h>
#include <jansson.h>
#include <lz4.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "zipccl.h"
#include "zipccl_float.h"

/* ------------------------------------------------------------------------ */
/* Fatal checks and small helpers                                           */
/* ------------------------------------------------------------------------ */

#define benchCheck(cond, ...)                                                    \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "zipccl-codec-bench: error at %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fprintf(stderr, "\n");                                               \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

static void usage_error(const char* fmt, const char* arg) {
    fprintf(stderr, "zipccl-codec-bench: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see --help)\n");
    exit(2);
}

/* Wall time by default.  --clock cpu reads this thread's CPU time instead:
 * on a shared, oversubscribed machine wall time counts the slices other
 * processes ran, CPU time only ours (the codec runs on this one thread). */
static clockid_t g_clock = CLOCK_MONOTONIC;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(g_clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void* alloc64(size_t n) {
    void* p = aligned_alloc(64, (n + 63) / 64 * 64 + 64);
    benchCheck(p, "out of memory allocating %zu bytes", n);
    memset(p, 0, (n + 63) / 64 * 64 + 64); /* touch the pages now, not in a timed run */
    return p;
}

static const char* simd_name(zipcclSimd_t s) {
    switch (s) {
    case zipcclSimdScalar: return "scalar";
    case zipcclSimdAvx2: return "avx2";
    case zipcclSimdAvx512: return "avx512";
    default: return "auto";
    }
}

/* ------------------------------------------------------------------------ */
/* Deterministic data: xoshiro256**, Box-Muller, round-to-nearest-even      */
/* ------------------------------------------------------------------------ */

typedef struct {
    uint64_t s[4];
} rng_t;

static uint64_t splitmix64(uint64_t* x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void rng_seed(rng_t* r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng_t* r) {
    uint64_t* s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
    return out;
}


/* ------------------------------------------------------------------------ */
/* Inputs                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char* dist;    /* "gauss", "random", "file" */
    double sigma;        /* gauss only */
    zipcclDataType_t dtype;
    size_t count, bytes;
    void* data;          /* 64-byte aligned */
    char name[256];      /* --input: tensor or file name; else "" */
    double bound;        /* bits / (bits - E + H(exponent)) */
} input_t;

static void fill_gauss(input_t* in, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    const double two_pi = 6.283185307179586;
    for (size_t i = 0; i < in->count; i += 2) {
        double u1 = (double)((rng_next(&r) >> 11) + 1) * 0x1p-53; /* (0, 1] */
        double u2 = (double)(rng_next(&r) >> 11) * 0x1p-53;
        double rad = sqrt(-2.0 * log(u1));
        float z[2] = {(float)(in->sigma * rad * cos(two_pi * u2)),
                      (float)(in->sigma * rad * sin(two_pi * u2))};
        for (size_t k = 0; k < 2 && i + k < in->count; k++) {
            if (in->dtype == zipcclFloat32) ((float*)in->data)[i + k] = z[k];
            else if (in->dtype == zipcclBfloat16) ((uint16_t*)in->data)[i + k] = zipcclFloatToBf16(z[k]);
            else ((uint16_t*)in->data)[i + k] = zipcclFloatToFp16(z[k]);
        }
    }
}

static void fill_random(input_t* in, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    unsigned char* p = in->data;
    for (size_t i = 0; i < in->bytes; i += 8) {
        uint64_t x = rng_next(&r);
        memcpy(p + i, &x, in->bytes - i < 8 ? in->bytes - i : 8);
    }
}

/* Entropy of the exponent field, from the data's own histogram: the best any
 * coder of the exponent alone (sign and mantissa raw) could do on it. */
static double exponent_bound(const input_t* in) {
    uint64_t hist[256] = {0};
    int bits = in->dtype == zipcclFloat32 ? 32 : 16, ebits = in->dtype == zipcclFloat16 ? 5 : 8;
    for (size_t i = 0; i < in->count; i++) {
        if (in->dtype == zipcclFloat32) hist[(((const uint32_t*)in->data)[i] >> 23) & 0xFF]++;
        else if (in->dtype == zipcclBfloat16) hist[(((const uint16_t*)in->data)[i] >> 7) & 0xFF]++;
        else hist[(((const uint16_t*)in->data)[i] >> 10) & 0x1F]++;
    }
    double h = 0;
    for (int e = 0; e < 256; e++)
        if (hist[e]) {
            double p = (double)hist[e] / (double)in->count;
            h -= p * log2(p);
        }
    return bits / (bits - ebits + h);
}

/* ------------------------------------------------------------------------ */
/* Real tensors: a .safetensors file                                        */
/* ------------------------------------------------------------------------ */

/* A .safetensors file is a u64 little-endian header length N, N bytes of
 * JSON ({"name": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [begin,
 * end]}, ..., "__metadata__": {...}}), then the data, the offsets counted
 * from its first byte.  The bench wants no more than each tensor's name,
 * dtype tag, element count and bytes; it checks what it uses (offsets inside
 * the file, shape x element size == bytes for the dtypes it measures) and
 * leaves the rest of the format's rules to the runtime's reader. */
typedef struct {
    char name[256];
    char dtype[16];      /* the file's tag: "BF16", "F16", "F32", "I64", ... */
    uint64_t count;      /* product of the shape (1 for a scalar)             */
    uint64_t begin, end; /* data_offsets, from the start of the data          */
} st_entry;

typedef struct {
    FILE* fp;
    uint64_t data_start; /* 8 + N */
    st_entry* t;         /* in header order */
    size_t n;
} st_list;

/* The dtypes measured; 0 for any other tag. */
static int st_float_dtype(const char* tag, zipcclDataType_t* dtype) {
    if (!strcmp(tag, "BF16")) *dtype = zipcclBfloat16;
    else if (!strcmp(tag, "F16")) *dtype = zipcclFloat16;
    else if (!strcmp(tag, "F32")) *dtype = zipcclFloat32;
    else return 0;
    return 1;
}

static void st_list_open(const char* path, st_list* st) {
    memset(st, 0, sizeof *st);
    st->fp = fopen(path, "rb");
    benchCheck(st->fp, "cannot open '%s': %s", path, strerror(errno));
    fseek(st->fp, 0, SEEK_END);
    long size = ftell(st->fp);
    fseek(st->fp, 0, SEEK_SET);
    unsigned char len8[8];
    benchCheck(size >= 8 && fread(len8, 1, 8, st->fp) == 8,
               "'%s': %ld bytes, too short for the 8-byte header length", path, size);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | len8[i];
    benchCheck(hl <= (uint64_t)size - 8 && hl <= 100u << 20,
               "'%s': header length %llu does not fit the file (%ld bytes)", path,
               (unsigned long long)hl, size);
    char* hdr = malloc(hl ? hl : 1);
    benchCheck(hdr && fread(hdr, 1, hl, st->fp) == hl, "short read of the header of '%s'", path);
    json_error_t jerr;
    json_t* root = json_loadb(hdr, hl, JSON_REJECT_DUPLICATES, &jerr);
    free(hdr);
    benchCheck(root, "'%s': header JSON, byte %d: %s", path, jerr.position, jerr.text);
    benchCheck(json_is_object(root), "'%s': the header is not a JSON object", path);
    st->data_start = 8 + hl;
    const uint64_t data_size = (uint64_t)size - st->data_start;
    st->t = calloc(json_object_size(root) + 1, sizeof *st->t);
    benchCheck(st->t, "out of memory reading the header of '%s'", path);
    const char* key;
    json_t* v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) continue;
        st_entry* t = &st->t[st->n++];
        json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
               *off = json_object_get(v, "data_offsets");
        json_int_t b = json_integer_value(json_array_get(off, 0));
        json_int_t e = json_integer_value(json_array_get(off, 1));
        benchCheck(json_is_string(dt) && json_is_array(shape) && json_array_size(off) == 2 &&
                       json_is_integer(json_array_get(off, 0)) &&
                       json_is_integer(json_array_get(off, 1)) && 0 <= b && b <= e,
                   "'%s': tensor '%s' needs a dtype, a shape and data_offsets [begin, end]", path, key);
        snprintf(t->name, sizeof t->name, "%s", key);
        snprintf(t->dtype, sizeof t->dtype, "%s", json_string_value(dt));
        t->count = 1, t->begin = (uint64_t)b, t->end = (uint64_t)e;
        size_t i;
        json_t* d;
        json_array_foreach(shape, i, d) {
            json_int_t n = json_integer_value(d);
            benchCheck(json_is_integer(d) && n >= 0 && (!n || t->count <= UINT64_MAX / (uint64_t)n),
                       "'%s': tensor '%s': bad shape", path, key);
            t->count *= (uint64_t)n;
        }
        benchCheck(t->end <= data_size,
                   "'%s': tensor '%s': data_offsets [%lld, %lld] run past the end of the data "
                   "(%llu bytes; file truncated?)", path, key, (long long)b, (long long)e,
                   (unsigned long long)data_size);
        zipcclDataType_t dtype;
        benchCheck(!st_float_dtype(t->dtype, &dtype) ||
                       (t->count <= (t->end - t->begin) / zipcclTypeSize(dtype) &&
                        t->count * zipcclTypeSize(dtype) == t->end - t->begin),
                   "'%s': tensor '%s': shape x %s size is not the %llu bytes data_offsets span",
                   path, key, t->dtype, (unsigned long long)(t->end - t->begin));
    }
    json_decref(root);
}

/* Tensor t's bytes (t->end - t->begin) into dst. */
static void st_list_read(const st_list* st, const st_entry* t, void* dst, const char* path) {
    size_t n = (size_t)(t->end - t->begin);
    benchCheck(!fseek(st->fp, (long)(st->data_start + t->begin), SEEK_SET) &&
                   fread(dst, 1, n, st->fp) == n,
               "'%s': short read of tensor '%s'", path, t->name);
}

static void st_list_close(st_list* st) {
    fclose(st->fp);
    free(st->t);
}

/* ------------------------------------------------------------------------ */
/* Codecs                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum { K_MEMCPY, K_ZSTD, K_LZ4, K_ZIPCCL } kind_t;

typedef struct {
    char name[32];
    kind_t kind;
    int level;      /* zstd */
    int bytegroup;  /* zstd */
    zipcclCodecParams_t zp;
} codec_t;

typedef struct {
    unsigned char* c;      /* compressed */
    unsigned char* d;      /* decompressed */
    unsigned char* g;      /* byte-grouped scratch */
    size_t ccap;
    ZSTD_CCtx* cctx;
    ZSTD_DCtx* dctx;
} bufs_t;

/* Bytes by position in the element, most significant plane first.  The
 * baseline deserves a fast transposition (SSE2 pack/unpack, ~5 GB/s) or its
 * time would be dominated by a strided byte loop, not by zstd. */
#ifdef __SSE2__
#define SPLIT_BYTES(a, b, lo, hi)                                                  \
    do {                                                                           \
        __m128i m_ = _mm_set1_epi16(0xFF);                                         \
        lo = _mm_packus_epi16(_mm_and_si128(a, m_), _mm_and_si128(b, m_));         \
        hi = _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8));         \
    } while (0)
#define LD(p) _mm_loadu_si128((const __m128i*)(p))
#define ST(p, v) _mm_storeu_si128((__m128i*)(p), v)
#endif

static void group_bytes(const unsigned char* src, unsigned char* dst, size_t count, size_t esz) {
    size_t i = 0;
#ifdef __SSE2__
    if (esz == 2) {
        for (; i + 16 <= count; i += 16) {
            __m128i lo, hi;
            SPLIT_BYTES(LD(src + 2 * i), LD(src + 2 * i + 16), lo, hi);
            ST(dst + i, hi);
            ST(dst + count + i, lo);
        }
    } else if (esz == 4) {
        for (; i + 16 <= count; i += 16) {
            const unsigned char* s = src + 4 * i;
            __m128i e0, o0, e1, o1, p0, p1, p2, p3;
            SPLIT_BYTES(LD(s), LD(s + 16), e0, o0); /* e: bytes 0,2 of 8 elements; o: 1,3 */
            SPLIT_BYTES(LD(s + 32), LD(s + 48), e1, o1);
            SPLIT_BYTES(e0, e1, p0, p2);
            SPLIT_BYTES(o0, o1, p1, p3);
            ST(dst + i, p3);
            ST(dst + count + i, p2);
            ST(dst + 2 * count + i, p1);
            ST(dst + 3 * count + i, p0);
        }
    }
#endif
    for (; i < count; i++)
        for (size_t b = 0; b < esz; b++) dst[b * count + i] = src[i * esz + esz - 1 - b];
}

static void ungroup_bytes(const unsigned char* src, unsigned char* dst, size_t count, size_t esz) {
    size_t i = 0;
#ifdef __SSE2__
    if (esz == 2) {
        for (; i + 16 <= count; i += 16) {
            __m128i hi = LD(src + i), lo = LD(src + count + i);
            ST(dst + 2 * i, _mm_unpacklo_epi8(lo, hi));
            ST(dst + 2 * i + 16, _mm_unpackhi_epi8(lo, hi));
        }
    } else if (esz == 4) {
        for (; i + 16 <= count; i += 16) {
            __m128i p3 = LD(src + i), p2 = LD(src + count + i);
            __m128i p1 = LD(src + 2 * count + i), p0 = LD(src + 3 * count + i);
            __m128i e0 = _mm_unpacklo_epi8(p0, p2), e1 = _mm_unpackhi_epi8(p0, p2);
            __m128i o0 = _mm_unpacklo_epi8(p1, p3), o1 = _mm_unpackhi_epi8(p1, p3);
            unsigned char* d = dst + 4 * i;
            ST(d, _mm_unpacklo_epi8(e0, o0));
            ST(d + 16, _mm_unpackhi_epi8(e0, o0));
            ST(d + 32, _mm_unpacklo_epi8(e1, o1));
            ST(d + 48, _mm_unpackhi_epi8(e1, o1));
        }
    }
#endif
    for (; i < count; i++)
        for (size_t b = 0; b < esz; b++) dst[i * esz + esz - 1 - b] = src[b * count + i];
}

/* One compression; returns 0 and the compressed size, or a message. */
static int do_compress(const codec_t* c, const input_t* in, bufs_t* b, size_t* csize,
                       char* why, size_t whylen) {
    size_t esz = zipcclTypeSize(in->dtype);
    switch (c->kind) {
    case K_MEMCPY:
        memcpy(b->c, in->data, in->bytes);
        *csize = in->bytes;
        return 0;
    case K_ZSTD: {
        const void* src = in->data;
        if (c->bytegroup) group_bytes(in->data, b->g, in->count, esz), src = b->g;
        size_t r = ZSTD_compressCCtx(b->cctx, b->c, b->ccap, src, in->bytes, c->level);
        if (ZSTD_isError(r)) return snprintf(why, whylen, "%s", ZSTD_getErrorName(r)), -1;
        *csize = r;
        return 0;
    }
    case K_LZ4: {
        int r = LZ4_compress_default((const char*)in->data, (char*)b->c, (int)in->bytes,
                                     (int)(b->ccap > 0x7FFFFFFF ? 0x7FFFFFFF : b->ccap));
        if (r <= 0) return snprintf(why, whylen, "LZ4_compress_default failed"), -1;
        *csize = (size_t)r;
        return 0;
    }
    case K_ZIPCCL: {
        zipcclResult_t r =
            zipcclCompress(in->data, in->count, in->dtype, b->c, b->ccap, csize, &c->zp);
        if (r != zipcclSuccess) {
            snprintf(why, whylen, "%s: %s", zipcclGetErrorString(r), zipcclGetLastErrorDetail());
            return r == zipcclUnsupported ? 1 : -1;
        }
        return 0;
    }
    }
    return -1;
}

static int do_decompress(const codec_t* c, const input_t* in, bufs_t* b, size_t csize,
                         char* why, size_t whylen) {
    size_t esz = zipcclTypeSize(in->dtype);
    switch (c->kind) {
    case K_MEMCPY:
        memcpy(b->d, b->c, in->bytes);
        return 0;
    case K_ZSTD: {
        void* dst = c->bytegroup ? b->g : b->d;
        size_t r = ZSTD_decompressDCtx(b->dctx, dst, in->bytes, b->c, csize);
        if (ZSTD_isError(r)) return snprintf(why, whylen, "%s", ZSTD_getErrorName(r)), -1;
        if (r != in->bytes) return snprintf(why, whylen, "zstd returned %zu bytes", r), -1;
        if (c->bytegroup) ungroup_bytes(b->g, b->d, in->count, esz);
        return 0;
    }
    case K_LZ4: {
        int r = LZ4_decompress_safe((const char*)b->c, (char*)b->d, (int)csize, (int)in->bytes);
        if (r != (int)in->bytes) return snprintf(why, whylen, "LZ4_decompress_safe: %d", r), -1;
        return 0;
    }
    case K_ZIPCCL: {
        size_t count = 0;
        zipcclResult_t r =
            zipcclDecompress(b->c, csize, b->d, in->bytes, &count, in->dtype, &c->zp);
        if (r != zipcclSuccess)
            return snprintf(why, whylen, "%s: %s", zipcclGetErrorString(r),
                            zipcclGetLastErrorDetail()), -1;
        if (count != in->count)
            return snprintf(why, whylen, "decoded %zu elements, want %zu", count, in->count), -1;
        return 0;
    }
    }
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Measurement                                                              */
/* ------------------------------------------------------------------------ */

typedef struct {
    int iters, warmup;
    double max_time; /* stop repeating once a measurement has taken this long */
    int json;
    FILE* table; /* where the human table goes */
} opts_t;

typedef struct {
    size_t csize;
    double comp_s, decomp_s; /* medians */
    int comp_reps, decomp_reps;
    uint64_t frame_hash;
} result_t;

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

static double median(double* t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static uint64_t fnv1a64(const unsigned char* p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Time one direction: warm-up runs, then timed runs until o->iters are done
 * or o->max_time seconds were spent (at least one).  A run slower than half a
 * second needs no warming (caches are a rounding error at that length), so it
 * ends the warm-up and counts as the first timed run: zstd -19 on 32 MiB
 * then costs one run, not two.  Decompression writes into a poisoned buffer
 * every time, so a decoder that skips work cannot pass on an earlier output.
 * Returns the median seconds, or -1 when the first call reports the path
 * unsupported. */
static double time_runs(const codec_t* c, const input_t* in, bufs_t* b, const opts_t* o,
                        int decompress, size_t* csize, int* reps) {
    char why[512] = "";
    double times[1024], spent = 0;
    int maxn = o->iters < 1024 ? o->iters : 1024, n = 0, calls = 0;
    for (int w = 0; w < o->warmup + maxn && n < maxn && (n == 0 || spent < o->max_time); w++) {
        int timed = w >= o->warmup;
        if (decompress) memset(b->d, 0xA5, in->bytes);
        double t0 = now_s();
        int rc = decompress ? do_decompress(c, in, b, *csize, why, sizeof why)
                            : do_compress(c, in, b, csize, why, sizeof why);
        double dt = now_s() - t0;
        if (rc == 1 && calls == 0) return -1;
        calls++;
        benchCheck(rc == 0, "%s %s failed on %s %s: %s", c->name,
                   decompress ? "decompress" : "compress", zipcclTypeName(in->dtype), in->dist,
                   why);
        if (!timed && dt > 0.5) {
            timed = 1;
            w = o->warmup - 1; /* warm-up over */
        }
        if (timed) times[n++] = dt, spent += dt;
    }
    *reps = n;
    return median(times, n);
}

/* Returns 0 measured, 1 skipped (path unsupported), exits on any failure. */
static int measure(const codec_t* c, const input_t* in, bufs_t* b, const opts_t* o,
                   result_t* res) {
    size_t csize = 0;
    res->comp_s = time_runs(c, in, b, o, 0, &csize, &res->comp_reps);
    if (res->comp_s < 0) return 1;
    res->csize = csize;
    if (c->kind == K_ZIPCCL) {
        size_t bound = zipcclCompressBound(in->count, in->dtype, c->zp.checksum);
        benchCheck(csize <= bound, "%s: frame of %zu bytes exceeds zipcclCompressBound %zu",
                   c->name, csize, bound);
    }
    res->frame_hash = fnv1a64(b->c, csize);
    res->decomp_s = time_runs(c, in, b, o, 1, &csize, &res->decomp_reps);
    if (memcmp(b->d, in->data, in->bytes)) {
        size_t i = 0;
        while (((unsigned char*)in->data)[i] == b->d[i]) i++;
        fprintf(stderr,
                "zipccl-codec-bench: ROUND TRIP MISMATCH: codec %s, %s %s sigma %g, %zu bytes%s%s: "
                "first difference at byte %zu (0x%02x, want 0x%02x)\n",
                c->name, zipcclTypeName(in->dtype), in->dist, in->sigma, in->bytes,
                in->name[0] ? ", " : "", in->name, i, b->d[i], ((unsigned char*)in->data)[i]);
        exit(1);
    }
    return 0;
}

static void print_json_string(const char* s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 0x20) printf("\\u%04x", ch);
        else putchar(ch);
    }
    putchar('"');
}

static void print_table_header(const opts_t* o, int with_name) {
    fprintf(o->table, "#\n# %-5s %-6s %7s %10s  %-15s %-6s %7s %10s %10s %7s %5s%s\n", "dtype",
            "dist", "sigma", "bytes", "codec", "path", "ratio", "comp GB/s", "dec GB/s", "bound",
            "reps", with_name ? "  name" : "");
}

static void report(const codec_t* c, const input_t* in, const result_t* r, const opts_t* o) {
    zipcclSimd_t simd = c->zp.simd == zipcclSimdAuto ? zipcclSimdDetect() : c->zp.simd;
    const char* path = c->kind == K_ZIPCCL ? simd_name(simd) : "-";
    double ratio = (double)in->bytes / (double)r->csize;
    /* A clock tick is the floor: JSON has no "inf" for an unmeasurably fast run. */
    double cg = (double)in->bytes / fmax(r->comp_s, 1e-9) / 1e9;
    double dg = (double)in->bytes / fmax(r->decomp_s, 1e-9) / 1e9;
    int reps = r->comp_reps < r->decomp_reps ? r->comp_reps : r->decomp_reps;
    char sig[16];
    if (!strcmp(in->dist, "gauss")) snprintf(sig, sizeof sig, "%.0e", in->sigma);
    else snprintf(sig, sizeof sig, "-");
    fprintf(o->table, "  %-5s %-6s %7s %10zu  %-15s %-6s %7.4f %10.3f %10.3f %7.4f %5d%s%s\n",
            zipcclTypeName(in->dtype), in->dist, sig, in->bytes, c->name, path, ratio, cg, dg,
            in->bound, reps, in->name[0] ? "  " : "", in->name);
    fflush(o->table);
    if (!o->json) return;
    printf("{\"codec\":\"%s\",\"path\":\"%s\",\"dtype\":\"%s\",\"dist\":\"%s\",\"sigma\":", c->name,
           path, zipcclTypeName(in->dtype), in->dist);
    if (!strcmp(in->dist, "gauss")) printf("%.17g", in->sigma);
    else printf("null");
    printf(",\"bytes\":%zu,\"compressed_bytes\":%zu,\"ratio\":%.6f,\"compress_gbps\":%.4f,"
           "\"decompress_gbps\":%.4f,\"bound\":%.6f,\"reps\":%d,\"clock\":\"%s\"",
           in->bytes, r->csize, ratio, cg, dg, in->bound, reps,
           g_clock == CLOCK_MONOTONIC ? "wall" : "cpu");
    if (in->name[0]) printf(",\"name\":"), print_json_string(in->name);
    printf("}\n");
    fflush(stdout);
}

/* All codecs on one input; with --all-paths, also check that every SIMD path
 * emits the same frame bytes (FORMAT.md promises it). */
static int run_input(const codec_t* codecs, int ncodecs, input_t* in, bufs_t* b, const opts_t* o) {
    in->bound = exponent_bound(in);
    int bad = 0;
    const char* ref_name = NULL; /* first path measured of the current codec */
    uint64_t ref_hash = 0;
    for (int i = 0; i < ncodecs; i++) {
        const codec_t* c = &codecs[i];
        result_t r;
        if (measure(c, in, b, o, &r)) {
            fprintf(o->table, "  # %s path %s: not supported here, skipped\n", c->name,
                    simd_name(c->zp.simd));
            continue;
        }
        report(c, in, &r, o);
        if (c->kind != K_ZIPCCL) continue;
        if (!ref_name || strcmp(ref_name, c->name)) {
            ref_name = c->name, ref_hash = r.frame_hash;
        } else if (r.frame_hash != ref_hash) {
            fprintf(stderr, "zipccl-codec-bench: %s: path %s emits different bytes than the "
                    "first path measured\n", c->name, simd_name(c->zp.simd));
            bad = 1;
        }
    }
    return bad;
}

/* ------------------------------------------------------------------------ */
/* Command line                                                             */
/* ------------------------------------------------------------------------ */

static void help(void) {
    printf(
        "usage: zipccl-codec-bench [options]\n"
        "\n"
        "Measures the ZipCCL CPU codec and baselines on one thread: ratio (raw/compressed),\n"
        "compress and decompress GB/s on the uncompressed bytes (median of the repetitions),\n"
        "and the exponent-entropy bound of the ratio for the same data.  Every round trip is\n"
        "checked bit for bit (mismatch: message and exit 1).\n"
        "\n"
        "Inputs (synthetic, deterministic):\n"
        "  -s, --sizes LIST     bytes per input, suffix K/M/G = KiB/MiB/GiB (default 1M,32M)\n"
        "  -d, --dtypes LIST    bf16,fp16,fp32 (default all three)\n"
        "  -D, --dists LIST     gauss,random (default both)\n"
        "      --sigmas LIST    Gaussian scales (default 1e-4,1e-3,1e-2,0.1,1)\n"
        "      --seed N         generator seed (default 1)\n"
        "Inputs (real tensors; -s -d -D --sigmas are then ignored):\n"
        "      --input FILE     a .safetensors file (every bf16/fp16/fp32 tensor, by name)\n"
        "                       or a raw little-endian array (needs --dtype)\n"
        "      --dtype T        element type of a raw --input file: bf16, fp16 or fp32\n"
        "Codecs:\n"
        "  -c, --codecs LIST    subset of: memcpy, zstd-1, zstd-1-bg, zstd-19, zstd-19-bg, lz4,\n"
        "                       zipccl-fast (T, C), zipccl-dense (R), zipccl-f3 (F3), zipccl-f2 (F2)\n"
        "                       (and -ck forms with --checksum)\n"
        "      --checksum       also measure zipccl-fast-ck and zipccl-dense-ck (XXH32 frames)\n"
        "      --all-paths      our codecs on each SIMD path (scalar, avx2, avx512) this CPU\n"
        "                       has, and check that all paths emit identical frames\n"
        "Timing:\n"
        "  -n, --iters N        timed repetitions, median reported (default 5)\n"
        "  -w, --warmup N       untimed runs first (default 1)\n"
        "      --max-time S     stop repeating a measurement after S seconds once one\n"
        "                       repetition is done (default 10; the 'reps' column says\n"
        "                       how many were taken)\n"
        "      --clock wall|cpu time in wall-clock seconds (default) or in this thread's\n"
        "                       CPU seconds (steadier when other processes share the cores)\n"
        "      --quick          smoke test: no zstd-19, 1 repetition, no warm-up\n"
        "Output:\n"
        "      --json           one JSON object per line on stdout (codec, path, dtype, dist,\n"
        "                       sigma, bytes, compressed_bytes, ratio, compress_gbps,\n"
        "                       decompress_gbps, bound, reps, clock[, name]); the table goes\n"
        "                       to stderr\n"
        "  -h, --help           this text\n"
        "\n"
        "Exit status: 0 success, 1 a codec failed or a round trip mismatched, 2 bad usage.\n");
}

static size_t parse_size(const char* s) {
    char* end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || errno || *s == '-') usage_error("bad size '%s'", s);
    unsigned long long mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1ull << 10, end++;
    else if (*end == 'M' || *end == 'm') mul = 1ull << 20, end++;
    else if (*end == 'G' || *end == 'g') mul = 1ull << 30, end++;
    if (*end || v == 0 || v > (1ull << 40) / mul) usage_error("bad size '%s'", s);
    return (size_t)(v * mul);
}

static long parse_int(const char* s, long lo, long hi, const char* what) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) {
        char msg[128];
        snprintf(msg, sizeof msg, "bad %s '%%s' (want %ld..%ld)", what, lo, hi);
        usage_error(msg, s);
    }
    return v;
}

static int parse_dtype(const char* s, zipcclDataType_t* out) {
    if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) *out = zipcclBfloat16;
    else if (!strcmp(s, "fp16") || !strcmp(s, "float16")) *out = zipcclFloat16;
    else if (!strcmp(s, "fp32") || !strcmp(s, "float32")) *out = zipcclFloat32;
    else return -1;
    return 0;
}

/* Split a comma list in place; returns the number of items (max cap). */
static int split(char* s, char** items, int cap, const char* what) {
    int n = 0;
    for (char* tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        if (n == cap) usage_error("too many items in the %s list", what);
        items[n++] = tok;
    }
    if (!n) usage_error("empty %s list", what);
    return n;
}

static const char* opt_arg(int argc, char** argv, int* i) {
    if (*i + 1 >= argc) usage_error("option '%s' needs a value", argv[*i]);
    return argv[++*i];
}

static void print_machine(FILE* out, int argc, char** argv, const opts_t* o) {
    char model[256] = "unknown CPU", line[512];
    FILE* fp = fopen("/proc/cpuinfo", "r");
    while (fp && fgets(line, sizeof line, fp))
        if (!strncmp(line, "model name", 10)) {
            char* p = strchr(line, ':');
            if (p) {
                p += 1 + (p[1] == ' ');
                p[strcspn(p, "\n")] = 0;
                snprintf(model, sizeof model, "%s", p);
            }
            break;
        }
    if (fp) fclose(fp);
    time_t t = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime(&t));
    fprintf(out, "# zipccl-codec-bench  %s\n", date);
    fprintf(out, "# machine: %s, %ld cores online; SIMD auto = %s\n", model,
            sysconf(_SC_NPROCESSORS_ONLN), simd_name(zipcclSimdDetect()));
    fprintf(out, "# command:");
    for (int i = 0; i < argc; i++) fprintf(out, " %s", argv[i]);
    fprintf(out, "\n# one thread; zstd %s, lz4 %s; median of up to %d reps (%d warm-up), "
            "GB/s = uncompressed bytes / %s time\n",
            ZSTD_versionString(), LZ4_versionString(), o->iters, o->warmup,
            g_clock == CLOCK_MONOTONIC ? "wall" : "thread CPU");
    double load[3];
    if (getloadavg(load, 3) == 3)
        fprintf(out, "# load average at start: %.2f %.2f %.2f\n", load[0], load[1], load[2]);
    fprintf(out, "# bound = bits / (bits - exponent bits + H(exponent histogram of the input))\n");
}

int main(int argc, char** argv) {
    opts_t o = {.iters = 5, .warmup = 1, .max_time = 10.0, .json = 0, .table = stdout};
    char sizes_s[256] = "1M,32M", dtypes_s[64] = "bf16,fp16,fp32", dists_s[64] = "gauss,random";
    char sigmas_s[256] = "1e-4,1e-3,1e-2,0.1,1", codecs_s[512] = "";
    const char *input = NULL, *raw_dtype_s = NULL;
    int checksum = 0, all_paths = 0, quick = 0;
    uint64_t seed = 1;

    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
#define IS(s, l) (!strcmp(a, s) || !strcmp(a, l))
#define COPY(dst) snprintf(dst, sizeof dst, "%s", opt_arg(argc, argv, &i))
        if (IS("-h", "--help")) return help(), 0;
        else if (IS("-s", "--sizes")) COPY(sizes_s);
        else if (IS("-d", "--dtypes")) COPY(dtypes_s);
        else if (IS("-D", "--dists")) COPY(dists_s);
        else if (IS("--sigmas", "--sigma")) COPY(sigmas_s);
        else if (IS("-c", "--codecs")) COPY(codecs_s);
        else if (IS("-n", "--iters")) o.iters = (int)parse_int(opt_arg(argc, argv, &i), 1, 1000, a);
        else if (IS("-w", "--warmup")) o.warmup = (int)parse_int(opt_arg(argc, argv, &i), 0, 100, a);
        else if (!strcmp(a, "--seed")) seed = (uint64_t)parse_int(opt_arg(argc, argv, &i), 0, 1L << 62, a);
        else if (!strcmp(a, "--max-time")) {
            const char* v = opt_arg(argc, argv, &i);
            char* end;
            o.max_time = strtod(v, &end);
            if (end == v || *end || !(o.max_time >= 0)) usage_error("bad --max-time '%s'", v);
        } else if (!strcmp(a, "--clock")) {
            const char* v = opt_arg(argc, argv, &i);
            if (!strcmp(v, "wall")) g_clock = CLOCK_MONOTONIC;
            else if (!strcmp(v, "cpu")) g_clock = CLOCK_THREAD_CPUTIME_ID;
            else usage_error("bad --clock '%s' (wall, cpu)", v);
        } else if (!strcmp(a, "--input")) input = opt_arg(argc, argv, &i);
        else if (!strcmp(a, "--dtype")) raw_dtype_s = opt_arg(argc, argv, &i);
        else if (!strcmp(a, "--checksum")) checksum = 1;
        else if (!strcmp(a, "--all-paths")) all_paths = 1;
        else if (!strcmp(a, "--quick")) quick = 1;
        else if (!strcmp(a, "--json")) o.json = 1;
        else usage_error("unknown option '%s'", a);
#undef IS
#undef COPY
    }
    if (quick) o.iters = 1, o.warmup = 0;
    if (o.json) o.table = stderr;
    if (raw_dtype_s && !input) usage_error("%s needs --input", "--dtype");

    /* Inputs to generate. */
    char* items[64];
    zipcclDataType_t dtypes[3];
    int ndtypes = split(dtypes_s, items, 3, "dtype");
    for (int k = 0; k < ndtypes; k++)
        if (parse_dtype(items[k], &dtypes[k]))
            usage_error("unknown dtype '%s' (bf16, fp16, fp32)", items[k]);
    size_t sizes[32];
    int nsizes = split(sizes_s, items, 32, "size");
    for (int k = 0; k < nsizes; k++) sizes[k] = parse_size(items[k]);
    double sigmas[32];
    int nsigmas = split(sigmas_s, items, 32, "sigma");
    for (int k = 0; k < nsigmas; k++) {
        char* end;
        sigmas[k] = strtod(items[k], &end);
        if (end == items[k] || *end || !(sigmas[k] > 0) || sigmas[k] > 1e30)
            usage_error("bad sigma '%s'", items[k]);
    }
    int gauss = 0, random = 0;
    int ndists = split(dists_s, items, 8, "dist");
    for (int k = 0; k < ndists; k++) {
        if (!strcmp(items[k], "gauss")) gauss = 1;
        else if (!strcmp(items[k], "random")) random = 1;
        else usage_error("unknown dist '%s' (gauss, random)", items[k]);
    }

    /* Codecs to measure. */
    codec_t all[64];
    int nall = 0;
    all[nall++] = (codec_t){.name = "memcpy", .kind = K_MEMCPY};
    for (int lv = 0; lv < 2; lv++) {
        int level = lv ? 19 : 1;
        if (level == 19 && quick) continue;
        for (int bg = 0; bg < 2; bg++) {
            codec_t c = {.kind = K_ZSTD, .level = level, .bytegroup = bg};
            snprintf(c.name, sizeof c.name, "zstd-%d%s", level, bg ? "-bg" : "");
            all[nall++] = c;
        }
    }
    all[nall++] = (codec_t){.name = "lz4", .kind = K_LZ4};
    zipcclSimd_t paths[3] = {zipcclSimdAuto};
    int npaths = 1;
    if (all_paths) {
        npaths = 0;
        for (zipcclSimd_t s = zipcclSimdScalar; s <= zipcclSimdAvx512; s++) paths[npaths++] = s;
    }
    for (int ck = 0; ck <= checksum; ck++)
        for (int m = 0; m < 4; m++)
            for (int p = 0; p < npaths; p++) {
                static const zipcclCodec_t ids[4] = {zipcclCodecFast, zipcclCodecDense, zipcclCodecF3, zipcclCodecF2};
                codec_t c = {.kind = K_ZIPCCL};
                snprintf(c.name, sizeof c.name, "zipccl-%s%s", zipcclCodecName(ids[m]), ck ? "-ck" : "");
                c.zp = (zipcclCodecParams_t){ids[m], ck, paths[p]};
                all[nall++] = c;
            }
    codec_t codecs[64];
    int ncodecs = 0;
    if (codecs_s[0]) {
        int nwant = split(codecs_s, items, 64, "codec");
        for (int k = 0; k < nwant; k++) {
            int found = 0;
            for (int c = 0; c < nall; c++)
                if (!strcmp(all[c].name, items[k])) found = 1;
            if (!found) usage_error("unknown or disabled codec '%s' (zstd-19 is off with --quick; "
                                    "-ck needs --checksum)", items[k]);
        }
        for (int c = 0; c < nall; c++) /* in the canonical order, each once */
            for (int k = 0; k < nwant; k++)
                if (!strcmp(all[c].name, items[k])) {
                    codecs[ncodecs++] = all[c];
                    break;
                }
    } else {
        memcpy(codecs, all, sizeof all);
        ncodecs = nall;
    }

    omp_set_num_threads(1); /* the codec may parallelise over chunks: one core here */
    print_machine(o.table, argc, argv, &o);

    bufs_t b = {0};
    b.cctx = ZSTD_createCCtx();
    b.dctx = ZSTD_createDCtx();
    benchCheck(b.cctx && b.dctx, "cannot create zstd contexts");
    size_t cap_bytes = 0; /* buffers grow to the largest input */
    int bad = 0;

#define ENSURE_BUFFERS(in)                                                                   \
    do {                                                                                     \
        if ((in)->bytes > cap_bytes) {                                                       \
            free(b.c), free(b.d), free(b.g);                                                 \
            cap_bytes = (in)->bytes;                                                         \
            size_t zb = ZSTD_compressBound(cap_bytes);                                       \
            size_t lb = (size_t)LZ4_compressBound((int)(cap_bytes < 0x7E000000 ? cap_bytes  \
                                                                               : 0x7E000000)); \
            size_t ob = zipcclCompressBound(cap_bytes, zipcclBfloat16, 1) + 64;              \
            b.ccap = zb > lb ? zb : lb;                                                      \
            if (ob > b.ccap) b.ccap = ob;                                                    \
            b.c = alloc64(b.ccap), b.d = alloc64(cap_bytes), b.g = alloc64(cap_bytes);       \
        }                                                                                    \
    } while (0)

    if (input) {
        const char* ext = strrchr(input, '.');
        int is_st = ext && !strcmp(ext, ".safetensors") && !raw_dtype_s;
        const char* base = strrchr(input, '/') ? strrchr(input, '/') + 1 : input;
        print_table_header(&o, 1);
        if (is_st) {
            st_list st;
            st_list_open(input, &st);
            int measured = 0;
            for (size_t k = 0; k < st.n; k++) {
                const st_entry* t = &st.t[k];
                input_t in = {.dist = "file", .sigma = 0};
                if (!st_float_dtype(t->dtype, &in.dtype)) {
                    fprintf(o.table, "  # %s: dtype %s, skipped\n", t->name, t->dtype);
                    continue;
                }
                if (!t->count) continue;
                in.count = t->count, in.bytes = t->end - t->begin;
                snprintf(in.name, sizeof in.name, "%s", t->name);
                ENSURE_BUFFERS(&in);
                in.data = alloc64(in.bytes);
                st_list_read(&st, t, in.data, input);
                bad |= run_input(codecs, ncodecs, &in, &b, &o);
                free(in.data);
                measured++;
            }
            st_list_close(&st);
            benchCheck(measured, "%s holds no non-empty bf16/fp16/fp32 tensor", input);
        } else {
            if (!raw_dtype_s)
                usage_error("--input '%s' is not a .safetensors file: give --dtype for raw data",
                            input);
            input_t in = {.dist = "file"};
            if (parse_dtype(raw_dtype_s, &in.dtype))
                usage_error("unknown --dtype '%s' (bf16, fp16, fp32)", raw_dtype_s);
            FILE* fp = fopen(input, "rb");
            benchCheck(fp, "cannot open '%s': %s", input, strerror(errno));
            fseek(fp, 0, SEEK_END);
            long sz = ftell(fp);
            fseek(fp, 0, SEEK_SET);
            size_t esz = zipcclTypeSize(in.dtype);
            benchCheck(sz > 0 && (size_t)sz % esz == 0,
                       "'%s' has %ld bytes, not a positive multiple of %zu (%s)", input, sz, esz,
                       raw_dtype_s);
            in.bytes = (size_t)sz, in.count = in.bytes / esz;
            snprintf(in.name, sizeof in.name, "%s", base);
            ENSURE_BUFFERS(&in);
            in.data = alloc64(in.bytes);
            benchCheck(fread(in.data, 1, in.bytes, fp) == in.bytes, "short read of '%s'", input);
            fclose(fp);
            bad |= run_input(codecs, ncodecs, &in, &b, &o);
            free(in.data);
        }
    } else {
        print_table_header(&o, 0);
        for (int di = 0; di < ndtypes; di++)
            for (int si = 0; si < nsizes; si++) {
                size_t esz = zipcclTypeSize(dtypes[di]);
                input_t in = {.dtype = dtypes[di], .count = sizes[si] / esz};
                benchCheck(in.count > 0, "size %zu is smaller than one %s element", sizes[si],
                           zipcclTypeName(dtypes[di]));
                in.bytes = in.count * esz;
                ENSURE_BUFFERS(&in);
                in.data = alloc64(in.bytes);
                /* Each input's seed depends only on what it is, so adding or
                 * removing other inputs never changes its data. */
                for (int k = 0; k < (gauss ? nsigmas : 0) + random; k++) {
                    int is_gauss = gauss && k < nsigmas;
                    in.dist = is_gauss ? "gauss" : "random";
                    in.sigma = is_gauss ? sigmas[k] : 0;
                    uint64_t sbits = 0x5A5A5A5Aull, s = seed;
                    if (is_gauss) memcpy(&sbits, &in.sigma, 8);
                    s = splitmix64(&s) ^ (uint64_t)in.dtype;
                    s = splitmix64(&s) ^ (uint64_t)in.bytes;
                    s = splitmix64(&s) ^ sbits;
                    if (is_gauss) fill_gauss(&in, s);
                    else fill_random(&in, s);
                    bad |= run_input(codecs, ncodecs, &in, &b, &o);
                }
                free(in.data);
            }
    }
#undef ENSURE_BUFFERS
    free(b.c), free(b.d), free(b.g);
    ZSTD_freeCCtx(b.cctx);
    ZSTD_freeDCtx(b.dctx);
    if (bad) fprintf(stderr, "zipccl-codec-bench: SIMD paths disagree (see above)\n");
    return bad ? 1 : 0;
}
