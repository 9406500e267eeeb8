/*
 * fuzz_decode.c — libFuzzer target for the CPU codec (docs/FORMAT.md).
 *
 * Each input is used twice:
 *   (a) as a frame: every SIMD path must decode it without crashing, and the
 *       paths must agree on the result code and, on success, on every byte;
 *   (b) as raw element data: a codec (fast, dense, stored, f3), a dtype and
 *       checksums or not, chosen by the input's first byte (the fuzzer
 *       explores the 24 combinations as it explores the data; trying all of
 *       them on every input made an execution ~24 times dearer: ~270 a
 *       second here, 10^7 out of reach), on every SIMD path, must produce
 *       the same frame bytes and decode back to the input bit for bit.
 * Any disagreement aborts, which libFuzzer reports as a crash. Built with
 * clang -fsanitize=fuzzer by scripts/fuzz.sh, and with gcc plus
 * replay_main.c (a plain main over corpus files) by the Makefile.
 * fuzz-sources: comm/codec/codec_cpu.c comm/base/common.c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zipccl.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static void fail(const char* what) {
    fprintf(stderr, "fuzz_decode: %s\n", what);
    abort();
}

static int paths(zipcclSimd_t out[3]) {
    int n = 0;
    zipcclSimd_t best = zipcclSimdDetect();
    out[n++] = zipcclSimdScalar;
    if (best >= zipcclSimdAvx2) out[n++] = zipcclSimdAvx2;
    if (best >= zipcclSimdAvx512) out[n++] = zipcclSimdAvx512;
    return n;
}

static void as_frame(const uint8_t* data, size_t size, const zipcclSimd_t* p, int np) {
    zipcclFrameInfo_t fi;
    size_t cap = 1 << 16;
    if (zipcclGetFrameInfo(data, size, &fi) == zipcclSuccess && fi.decompressedSize <= (64u << 20))
        cap = fi.decompressedSize;
    uint8_t* first = malloc(cap + 1);
    uint8_t* out = malloc(cap + 1);
    zipcclResult_t r0 = zipcclSuccess;
    size_t c0 = 0;
    for (int k = 0; k < np; k++) {
        zipcclCodecParams_t prm = {zipcclCodecDefault, 0, p[k]};
        size_t cnt = 0;
        zipcclResult_t r = zipcclDecompress(data, size, k ? out : first, cap, &cnt, (zipcclDataType_t)0, &prm);
        if (k == 0) { r0 = r; c0 = cnt; continue; }
        if (r != r0) fail("SIMD paths disagree on a frame's result code");
        if (r == zipcclSuccess && (cnt != c0 || memcmp(first, out, cap)))
            fail("SIMD paths decode a frame differently");
    }
    free(first);
    free(out);
}

static void as_data(const uint8_t* data, size_t size, const zipcclSimd_t* p, int np) {
    static const zipcclDataType_t dts[3] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    if (size < 1) return;
    const int sel = data[0] % 24; /* dtype x codec x checksums */
    data++, size--;
    const zipcclDataType_t dt = dts[sel % 3];
    const int codec = zipcclCodecFast + (sel / 3) % 4, cs = sel / 12;
    const size_t es = zipcclTypeSize(dt), count = size / es, bytes = count * es;
    size_t bound = zipcclCompressBound(count, dt, cs), fs0 = 0;
    uint8_t* f0 = malloc(bound);
    uint8_t* f = malloc(bound);
    uint8_t* out = malloc(bytes + 1);
    for (int k = 0; k < np; k++) {
        zipcclCodecParams_t prm = {(zipcclCodec_t)codec, cs, p[k]};
        size_t fs = 0;
        if (zipcclCompress(data, count, dt, k ? f : f0, bound, &fs, &prm) != zipcclSuccess)
            fail("compress failed with a buffer of the bound");
        if (fs > bound) fail("frame larger than the bound");
        if (k == 0) fs0 = fs;
        else if (fs != fs0 || memcmp(f, f0, fs)) fail("SIMD paths emit different frames");
    }
    for (int j = 0; j < np; j++) { /* one frame for all paths: decode it on each */
        zipcclCodecParams_t q = {zipcclCodecDefault, 0, p[j]};
        size_t got = 0;
        if (zipcclDecompress(f0, fs0, out, bytes, &got, dt, &q) != zipcclSuccess)
            fail("a fresh frame does not decode");
        if (got != count || memcmp(out, data, bytes)) fail("round trip is not lossless");
    }
    free(f0);
    free(f);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    zipcclSimd_t p[3];
    int np = paths(p);
    as_frame(data, size, p, np);
    as_data(data, size, p, np);
    return 0;
}
