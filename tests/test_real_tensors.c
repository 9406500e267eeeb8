/*
 * test_real_tensors.c — the codec on a sample of the trainer's own tensors.
 *
 * tests/real_tensors/sample.safetensors holds slices of the real-tensor corpus
 * (scripts/real_tensor_corpus.sh; docs/BENCHMARKS.md, "Real tensors"):
 * gradients as the reduce-scatters send them and parameters as the
 * all-gathers bring them, bf16 and fp32, early and late in training, from
 * the tiny and the 100M Llama and the tiny MoE. Each tensor is named
 * "<kind>.<dtype>.<config>.step<N>.<tensor>", kind = grads or params.
 *
 * Checked, per tensor: fast and dense round-trip bit for bit and every CPU
 * path writes the same bytes; each ratio stays above the floor measured when
 * the sample was made (a regression in the encoder's choices shows here
 * first, Gaussian tests do not see it). Per kind and dtype, byte-weighted,
 * against figures computed in this run from the same bytes: fast against
 * zstd -1 on byte-grouped bytes and against the exponent-entropy bound.
 * Ratios only: speed is the benchmark's (zipccl-codec-bench), not a test's.
 *
 * Left out: the MoE expert exchange rows (the corpus has none, see the
 * script).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "safetensors.h"
#include "testutil.h"
#include "zipccl.h"

#define SAMPLE "tests/real_tensors/sample.safetensors"

/* Floors: the ratio measured when the sample was made (scripts/
 * real_tensor_corpus.sh, then this test with ZIPCCL_PRINT_RATIOS=1), minus
 * 0.01, rounded down. A tensor without a line here fails: a new sample
 * needs its floors measured. */
typedef struct { const char* name; double fast, dense; } floor_t;
static const floor_t FLOORS[] = {
#include "real_tensors/floors.h"
};

/* Per kind and dtype (byte-weighted over the sample): fast against zstd -1
 * byte-grouped and against the per-tensor exponent-entropy bound, both
 * computed here. The targets are fast >= zstd and >= 0.95 bound on
 * bf16 gradients; these are what holds now, with a margin
 * (docs/BENCHMARKS.md says where and why the targets are missed). */
typedef struct { const char* kind; const char* dtype; double vs_zstd, vs_bound; } group_floor_t;
static const group_floor_t GROUPS[] = {
    {"grads", "bf16", 1.02, 0.93},  /* measured 1.045 and 0.946 */
    {"grads", "fp32", 1.07, 0.98},  /* 1.101, 0.992 */
    {"params", "bf16", 1.14, 0.98}, /* 1.174, 0.990 */
    {"params", "fp32", 1.08, 0.98}, /* 1.113, 0.994 */
};

/* zstd -1 on byte-grouped bytes (all lowest bytes, then the next, ...): the
 * baseline of docs/BENCHMARKS.md. */
static size_t zstd_bg(const uint8_t* x, size_t bytes, int es) {
    size_t n = bytes / (size_t)es, cap = ZSTD_compressBound(bytes);
    uint8_t* g = malloc(bytes);
    uint8_t* c = malloc(cap);
    for (int b = 0; b < es; b++)
        for (size_t i = 0; i < n; i++) g[(size_t)b * n + i] = x[(size_t)es * i + (size_t)b];
    size_t r = ZSTD_compress(c, cap, g, bytes, 1);
    free(g);
    free(c);
    return ZSTD_isError(r) ? bytes : r;
}

/* bits / (bits - 8 + H(exponent histogram)): exponent-only coding's limit. */
static double exp_bound(const uint8_t* x, size_t bytes, int es) {
    size_t n = bytes / (size_t)es, h[256] = {0};
    for (size_t i = 0; i < n; i++) {
        uint32_t v = es == 2 ? (uint32_t)(x[2 * i] | x[2 * i + 1] << 8)
                             : (uint32_t)x[4 * i] | (uint32_t)x[4 * i + 1] << 8 |
                                   (uint32_t)x[4 * i + 2] << 16 | (uint32_t)x[4 * i + 3] << 24;
        h[es == 2 ? (v >> 7) & 0xFF : (v >> 23) & 0xFF]++;
    }
    double H = 0;
    for (int e = 0; e < 256; e++)
        if (h[e]) H -= (double)h[e] / (double)n * log2((double)h[e] / (double)n);
    return 8.0 * es / (8.0 * es - 8 + H);
}

/* Compressed size with codec c, or 0 after a failed check. */
static size_t roundtrip(const char* name, const uint8_t* x, size_t bytes, zipcclDataType_t dt,
                        zipcclCodec_t c) {
    const int es = (int)zipcclTypeSize(dt);
    const size_t count = bytes / (size_t)es, bound = zipcclCompressBound(count, dt, 0);
    uint8_t* f = malloc(bound);
    uint8_t* g = malloc(bound);
    uint8_t* y = malloc(bytes);
    size_t size = 0, size2 = 0, ok = 1;
    char what[160];
    zipcclCodecParams_t p = {c, 0, zipcclSimdAuto};
    zipcclResult_t r = zipcclCompress(x, count, dt, f, bound, &size, &p);
    snprintf(what, sizeof what, "%s/%s/roundtrip", name, c == zipcclCodecFast ? "fast" : "dense");
    size_t got = 0;
    if (r == zipcclSuccess) r = zipcclDecompress(f, size, y, bytes, &got, dt, &p);
    ok = CHECK(r == zipcclSuccess && got == count && !memcmp(x, y, bytes), what, "%s", zipcclGetErrorString(r));
    for (int s = zipcclSimdScalar; ok && s <= zipcclSimdAvx512; s++) {
        zipcclCodecParams_t q = {c, 0, (zipcclSimd_t)s};
        r = zipcclCompress(x, count, dt, g, bound, &size2, &q);
        if (r == zipcclUnsupported) continue; /* this CPU lacks the path */
        if (r != zipcclSuccess || size2 != size || memcmp(f, g, size)) {
            snprintf(what, sizeof what, "%s/%s/paths_identical", name,
                     c == zipcclCodecFast ? "fast" : "dense");
            ok = CHECK(0, what, "simd %d wrote %zu bytes, auto %zu", s, size2, size);
        }
    }
    free(f);
    free(g);
    free(y);
    return ok ? size : 0;
}

int main(void) {
    char err[512];
    st_file* sf = NULL;
    if (!CHECK(st_open(SAMPLE, &sf, err, sizeof err) == 0, "sample_opens", "%s", err)) return tu_exit();
    const int print = getenv("ZIPCCL_PRINT_RATIOS") != NULL;
    const size_t ng = sizeof GROUPS / sizeof GROUPS[0];
    double raw[8] = {0}, fast[8] = {0}, zstd[8] = {0}, bnd[8] = {0};
    for (size_t i = 0; i < st_num_tensors(sf); i++) {
        const st_tensor* t = st_tensor_at(sf, i);
        zipcclDataType_t dt = !strcmp(t->dtype, "BF16") ? zipcclBfloat16 : zipcclFloat32;
        const int es = (int)zipcclTypeSize(dt);
        uint8_t* x = malloc(t->bytes);
        if (!CHECK(st_read(sf, t, x, t->bytes, err, sizeof err) == 0, "sample_reads", "%s", err)) {
            free(x);
            break;
        }
        size_t cf = roundtrip(t->name, x, t->bytes, dt, zipcclCodecFast);
        size_t cd = roundtrip(t->name, x, t->bytes, dt, zipcclCodecDense);
        size_t cz = zstd_bg(x, t->bytes, es);
        double b = exp_bound(x, t->bytes, es), rf = cf ? (double)t->bytes / (double)cf : 0,
               rd = cd ? (double)t->bytes / (double)cd : 0;
        if (print)
            printf("# %-48s fast %.4f dense %.4f zstd-1-bg %.4f bound %.4f\n", t->name, rf, rd,
                   (double)t->bytes / (double)cz, b);
        const floor_t* fl = NULL;
        for (size_t k = 0; k < sizeof FLOORS / sizeof FLOORS[0]; k++)
            if (!strcmp(FLOORS[k].name, t->name)) fl = &FLOORS[k];
        char what[160];
        snprintf(what, sizeof what, "%s/ratio_floors", t->name);
        if (fl)
            CHECK(rf >= fl->fast && rd >= fl->dense, what, "fast %.4f (floor %.2f), dense %.4f (floor %.2f)",
                  rf, fl->fast, rd, fl->dense);
        else
            CHECK(0, what, "no floor for this tensor in tests/real_tensors/floors.h");
        for (size_t g = 0; g < ng; g++)
            if (!strncmp(t->name, GROUPS[g].kind, strlen(GROUPS[g].kind)) &&
                t->name[strlen(GROUPS[g].kind)] == '.' &&
                !strncmp(t->name + strlen(GROUPS[g].kind) + 1, GROUPS[g].dtype, 4)) {
                raw[g] += (double)t->bytes;
                fast[g] += (double)cf;
                zstd[g] += (double)cz;
                bnd[g] += (double)t->bytes / b;
            }
        free(x);
    }
    for (size_t g = 0; g < ng; g++) {
        char what[96];
        if (raw[g] == 0) continue;
        double rf = raw[g] / fast[g], rz = raw[g] / zstd[g], rb = raw[g] / bnd[g];
        if (print)
            printf("# %s %s: fast %.4f zstd-1-bg %.4f bound %.4f (fast/zstd %.3f, fast/bound %.3f)\n",
                   GROUPS[g].kind, GROUPS[g].dtype, rf, rz, rb, rf / rz, rf / rb);
        snprintf(what, sizeof what, "%s_%s/fast_vs_zstd_and_bound", GROUPS[g].kind, GROUPS[g].dtype);
        CHECK(rf >= GROUPS[g].vs_zstd * rz && rf >= GROUPS[g].vs_bound * rb, what,
              "fast %.4f, zstd-1-bg %.4f (floor x%.2f), bound %.4f (floor x%.2f)", rf, rz,
              GROUPS[g].vs_zstd, rb, GROUPS[g].vs_bound);
    }
    st_close(sf);
    return tu_exit();
}
