/*
 * gauss.h — the collective tests' deterministic Gaussian data.
 *
 * An Irwin-Hall sum of four uniforms, scaled to sigma = 0.02 (gradient-like,
 * so the codec really compresses it), rounded fp32 -> bf16 to nearest even.
 * Every rank can regenerate any rank's input from its seed, which is how the
 * tests build independent references. `salt` keeps the streams of different
 * tests apart.
 */
#ifndef TESTS_GAUSS_H
#define TESTS_GAUSS_H
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float gauss_next(uint64_t* s) {
    double u = 0;
    for (int k = 0; k < 4; k++) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        u += (double)(*s >> 11) * 0x1p-53;
    }
    return (float)((u - 2.0) * 0.02 * 1.732);
}

static inline uint16_t gauss_bf16_round(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
}

static inline void gauss_fill_bf16(uint16_t* x, size_t n, uint64_t seed, uint64_t salt) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + salt;
    for (size_t i = 0; i < n; i++) x[i] = gauss_bf16_round(gauss_next(&s));
}
/* A standard normal value drawn from a key alone (splitmix64, Box-Muller),
 * for tests whose every element is addressed by (seed, rank, index). */
static inline uint64_t gauss_mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
static inline double gauss_of(uint64_t key) {
    double u1 = ((double)(gauss_mix(key) >> 11) + 0.5) * 0x1p-53;
    double u2 = (double)(gauss_mix(key ^ 0xABCDEFull) >> 11) * 0x1p-53;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}
#endif
