// test: timeout=900
/* test_common.c — result strings and dtype helpers, and the reductions'
 * fp32 -> fp16 rounding (zipcclFromFloat) against the compiler's IEEE
 * conversion: every sign and exponent with the mantissas where rounding
 * decides (ties and their neighbours at every bit, every top-10-bit pattern
 * around the fp16 rounding point), a million random patterns, and all 2^32
 * inputs with ZIPCCL_TEST_LONG=1; and fp16 -> fp32 (zipcclToFloat) for all
 * 65536 inputs.  fp32 -> bf16 (zipccl_float.h, the one conversion every
 * reduction, kernel and benchmark uses) against a nearest-value search in
 * double: every input whose low half is a tie or a tie's neighbour, and a
 * million random ones. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm_state.h"
#include "testutil.h"
#include "zipccl.h"
#include "zipccl_float.h"

static uint16_t fp16Reference(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    _Float16 x = (_Float16)f;
    uint16_t h;
    memcpy(&h, &x, 2);
    return h;
}

static uint16_t fp16Ours(uint32_t bits) {
    float f;
    memcpy(&f, &bits, 4);
    uint16_t h;
    zipcclFromFloat(&h, 0, f, zipcclFloat16);
    return h;
}

/* Count a difference from the reference for `bits`; the first goes to *bad. */
static void fp16Differs(uint32_t bits, uint32_t* bad, int* nbad) {
    if (fp16Ours(bits) != fp16Reference(bits) && !(*nbad)++) *bad = bits;
}

static void testFp16Rounding(void) {
    uint32_t bad = 0;
    int nbad = 0;
    long tried = 0;
    static const uint32_t kLow[] = {0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF};
    for (uint32_t se = 0; se < 512; se++) { /* sign and exponent */
        const uint32_t top = se << 23;
        for (int k = 0; k < 23; k++) {
            const uint32_t m[4] = {1u << k, (1u << k) - 1, (1u << k) + 1, ((1u << k) | (1u << (k + 1))) & 0x7FFFFF};
            for (int q = 0; q < 4; q++) fp16Differs(top | (m[q] & 0x7FFFFF), &bad, &nbad), tried++;
        }
        for (uint32_t hi = 0; hi < 1024; hi++)
            for (size_t q = 0; q < sizeof kLow / sizeof kLow[0]; q++)
                fp16Differs(top | hi << 13 | kLow[q], &bad, &nbad), tried++;
        fp16Differs(top | 0x7FFFFF, &bad, &nbad), tried++;
    }
    CHECK(nbad == 0, "fp16_round_edges", "%d of %ld differ, first 0x%08x: 0x%04x, expected 0x%04x", nbad, tried,
          bad, fp16Ours(bad), fp16Reference(bad));
    nbad = 0;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 1000000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        fp16Differs((uint32_t)(x >> 16), &bad, &nbad);
    }
    CHECK(nbad == 0, "fp16_round_random", "%d of 1000000 differ, first 0x%08x: 0x%04x, expected 0x%04x", nbad,
          bad, fp16Ours(bad), fp16Reference(bad));
    if (!getenv("ZIPCCL_TEST_LONG")) return;
    /* every input: ~5.5 min on one core of the 2-core VM (as make test-long
     * runs it: run_tests.sh sets OMP_NUM_THREADS=1), ~3 min on both */
    long differ = 0;
    uint32_t first = UINT32_MAX;
#pragma omp parallel for reduction(+ : differ) reduction(min : first) schedule(dynamic, 64)
    for (long hi = 0; hi < 65536; hi++)
        for (uint32_t lo = 0; lo < 65536; lo++) {
            const uint32_t b = (uint32_t)hi << 16 | lo;
            if (fp16Ours(b) != fp16Reference(b)) {
                differ++;
                if (b < first) first = b;
            }
        }
    CHECK(differ == 0, "fp16_round_all", "%ld of 2^32 differ, first 0x%08x: 0x%04x, expected 0x%04x", differ,
          first, fp16Ours(first), fp16Reference(first));
}

/* fp16 -> fp32 (the table behind zipcclToFloat), all 65536 inputs. */
static void testFp16Widening(void) {
    int nbad = 0;
    uint32_t bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const uint16_t v = (uint16_t)h;
        _Float16 x;
        memcpy(&x, &v, 2);
        const float want = (float)x, got = zipcclToFloat(&v, 0, zipcclFloat16);
        if (memcmp(&want, &got, 4) && !nbad++) bad = h;
    }
    CHECK(nbad == 0, "fp16_widen_all", "%d of 65536 differ, first 0x%04x", nbad, bad);
}

/* The bf16 nearest to bits' float, ties to the even one, found by comparing
 * distances in double (exact for these values); NaN quiet with its top
 * payload; values beyond bf16's largest finite round to Inf. */
static uint16_t bf16Reference(uint32_t bits) {
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((bits >> 16) | 0x40);
    const uint16_t lo = (uint16_t)(bits >> 16), hi = (uint16_t)(lo + 1); /* toward larger magnitude */
    if ((bits & 0xFFFFu) == 0) return lo;
    float f, a, b;
    uint32_t ua = (uint32_t)lo << 16, ub = (uint32_t)hi << 16;
    memcpy(&f, &bits, 4), memcpy(&a, &ua, 4), memcpy(&b, &ub, 4);
    if ((lo & 0x7FFF) == 0x7F7F) { /* above the largest finite: b is Inf; the halfway point decides */
        double half = fabs((double)a) + ldexp(1.0, 127 - 8);
        return fabs((double)f) >= half && !(fabs((double)f) == half && !(lo & 1)) ? hi : lo;
    }
    double da = fabs((double)f - (double)a), db = fabs((double)b - (double)f);
    return da < db ? lo : db < da ? hi : (lo & 1) ? hi : lo;
}

static void testBf16Rounding(void) {
    int nbad = 0;
    uint32_t bad = 0;
    long tried = 0;
    for (uint32_t top = 0; top < 65536; top++) {
        static const uint32_t kLow[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
        for (size_t q = 0; q < sizeof kLow / sizeof kLow[0]; q++, tried++) {
            uint32_t bits = top << 16 | kLow[q];
            float f;
            memcpy(&f, &bits, 4);
            if (zipcclFloatToBf16(f) != bf16Reference(bits) && !nbad++) bad = bits;
        }
    }
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < 1000000; i++, tried++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t bits = (uint32_t)(x >> 20);
        float f;
        memcpy(&f, &bits, 4);
        if (zipcclFloatToBf16(f) != bf16Reference(bits) && !nbad++) bad = bits;
    }
    float fb;
    memcpy(&fb, &bad, 4);
    CHECK(nbad == 0, "bf16_round", "%d of %ld differ, first 0x%08x: 0x%04x, expected 0x%04x", nbad, tried, bad,
          zipcclFloatToBf16(fb), bf16Reference(bad));
    int wbad = 0;
    for (uint32_t h = 0; h < 65536; h++) { /* widening is the exact inverse on every non-NaN */
        float w = zipcclBf16ToFloat((uint16_t)h);
        uint32_t u;
        memcpy(&u, &w, 4);
        if (u != h << 16) wbad++;
    }
    CHECK(wbad == 0, "bf16_widen_all", "%d of 65536 differ", wbad);
}

/* zipcclHostAlloc: small blocks as asked, large ones 2 MiB-aligned and
 * rounded up to whole 2 MiB pages, all writable to their end and freed by
 * free() (the sanitizer build checks both). */
static void testHostAlloc(void) {
    const size_t huge = (size_t)2 << 20;
    size_t small = 1000;
    char* p = zipcclHostAlloc(&small);
    CHECK(p && small == 1000, "hostalloc_small", "p %p bytes %zu", (void*)p, small);
    if (p) memset(p, 1, small);
    free(p);
    size_t sizes[] = {huge, huge + 1, 5 * huge - 3};
    size_t want[] = {huge, 2 * huge, 5 * huge};
    for (int i = 0; i < 3; i++) {
        size_t n = sizes[i];
        char* q = zipcclHostAlloc(&n);
        CHECK(q && n == want[i] && (uintptr_t)q % huge == 0, "hostalloc_huge_aligned",
              "asked %zu: p %p bytes %zu (want %zu, 2 MiB-aligned)", sizes[i], (void*)q, n, want[i]);
        if (q) {
            memset(q, 7, n);
            CHECK(q[0] == 7 && q[n - 1] == 7, "hostalloc_huge_writable", "asked %zu", sizes[i]);
        }
        free(q);
    }
}

int main(void) {
    testHostAlloc();
    testFp16Rounding();
    testBf16Rounding();
    testFp16Widening();
    CHECK(!strcmp(zipcclGetErrorString(zipcclSuccess), "success"), "errstr_success", "got %s",
          zipcclGetErrorString(zipcclSuccess));
    int all_named = 1;
    for (int r = 0; r < zipcclNumResults; r++)
        if (r != 10 && !strcmp(zipcclGetErrorString((zipcclResult_t)r), "unknown result code")) all_named = 0;
    CHECK(all_named, "errstr_all_named", "a result code has no string");
    CHECK(!strcmp(zipcclGetErrorString((zipcclResult_t)10), "unknown result code"), "errstr_retired_10",
          "code 10 (zipcclInProgress, retired) still has a string");
    CHECK(!strcmp(zipcclGetErrorString((zipcclResult_t)999), "unknown result code"),
          "errstr_out_of_range", "out-of-range code not flagged");
    CHECK(zipcclTypeSize(zipcclBfloat16) == 2 && zipcclTypeSize(zipcclFloat16) == 2 &&
              zipcclTypeSize(zipcclFloat32) == 4 && zipcclTypeSize((zipcclDataType_t)3) == 0,
          "type_sizes", "wrong sizes");
    return tu_exit();
}
