/*
 * zipccl_float.h — the one home of the bf16 / fp16 <-> fp32 conversions,
 * for host code (comm, kernels, runtime, benchmarks, tests) and, compiled by
 * nvcc, device code.  Every reduction, rounding helper and data generator in
 * the tree uses these, so a sum rounded on the CPU, on the GPU, by the
 * native path's MPI user op or by a benchmark's reference check has the same
 * bits.
 *
 * Rounding is to nearest, ties to even, everywhere; a NaN stays a NaN with
 * its sign, made quiet, keeping its top payload bits (bf16: the top 7, fp16:
 * the top 10); fp16 keeps subnormals and overflows to Inf.
 * zipcclFloatToFp16 equals the compiler's (_Float16) conversion for every
 * fp32 input (tests/test_common.c; all 2^32 under ZIPCCL_TEST_LONG=1).
 *
 * Left out: fp8 and other formats (no collective carries them).
 */
#ifndef ZIPCCL_FLOAT_H
#define ZIPCCL_FLOAT_H

#include <stdint.h>

#ifdef __CUDACC__
#define ZIPCCL_HOST_DEVICE __host__ __device__
#else
#define ZIPCCL_HOST_DEVICE
#endif

/* Type punning through a union: defined in C, accepted by g++ and nvcc. */
typedef union {
    float f;
    uint32_t u;
} zipcclFloatBits;

ZIPCCL_HOST_DEVICE static inline float zipcclBf16ToFloat(uint16_t h) {
    zipcclFloatBits x;
    x.u = (uint32_t)h << 16;
    return x.f;
}

/* fp32 -> bf16, round to nearest even; overflow rounds to Inf. */
ZIPCCL_HOST_DEVICE static inline uint16_t zipcclFloatToBf16(float v) {
    zipcclFloatBits x;
    x.f = v;
    if ((x.u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x.u >> 16) | 0x0040u);
    return (uint16_t)((x.u + 0x7FFFu + ((x.u >> 16) & 1u)) >> 16);
}

/* fp16 -> fp32, exact (NaNs come out quiet).  Host loops over many elements use the table of
 * zipcclFp16Table (comm/base/common.c) instead, which is faster without F16C. */
ZIPCCL_HOST_DEVICE static inline float zipcclFp16ToFloat(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    zipcclFloatBits x;
    if (e == 0x1F) { /* Inf, or a NaN made quiet with its payload, as F16C converts */
        x.u = sign | 0x7F800000u | (m ? 0x400000u : 0) | (m << 13);
    } else if (e) {
        x.u = sign | ((e + 112u) << 23) | (m << 13);
    } else {
        x.f = (float)m * 5.9604644775390625e-8f; /* m * 2^-24: exact */
        x.u |= sign;
    }
    return x.f;
}

/* fp32 -> fp16 in integer steps (the compiler's conversion is a library call
 * per element on CPUs compiled for without F16C: ~10 ns, this ~2.5 ns):
 *   |v| >= 65536, Inf, NaN -> Inf, or a NaN made quiet with its top 10
 *                            payload bits (65520..65536 round up to Inf below);
 *   |v| < 2^-14            -> subnormal or zero: |v| + 0.5f rounds |v| at
 *                            2^-24, fp16's last subnormal place, and leaves
 *                            the count of those places in the low bits;
 *   otherwise              -> rebias the exponent (127 -> 15), round away the
 *                            13 low mantissa bits (ties to the even one). */
ZIPCCL_HOST_DEVICE static inline uint16_t zipcclFloatToFp16(float v) {
    zipcclFloatBits x;
    x.f = v;
    const uint32_t sign = (x.u >> 16) & 0x8000u, a = x.u & 0x7FFFFFFFu;
    uint32_t h;
    if (a >= 0x47800000u) {
        h = a > 0x7F800000u ? 0x7E00u | ((a >> 13) & 0x3FFu) : 0x7C00u;
    } else if (a < 0x38800000u) {
        zipcclFloatBits t;
        t.u = a;
        t.f += 0.5f;
        h = t.u - 0x3F000000u;
    } else {
        h = (a - 0x38000000u + 0xFFFu + ((a >> 13) & 1u)) >> 13;
    }
    return (uint16_t)(sign | h);
}

#endif /* ZIPCCL_FLOAT_H */
