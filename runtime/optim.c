/*
 * optim.c — AdamW, the warmup + cosine schedule and clipping helpers of
 * optim.h. Element-wise loops (OpenMP), and one fixed-order reduction.
 */
#include "optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int adamw_config_check(const AdamWConfig* c, char* err, size_t errlen) {
#define BAD(...)                                              \
    do {                                                      \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
        return -1;                                            \
    } while (0)
    if (!c) BAD("adamw: NULL config");
    if (!(c->lr >= 0.0f) || !isfinite(c->lr)) BAD("adamw: lr must be finite and >= 0 (got %g)", (double)c->lr);
    if (!(c->min_lr >= 0.0f) || c->min_lr > c->lr)
        BAD("adamw: min_lr must be in [0, lr] (got %g, lr %g)", (double)c->min_lr, (double)c->lr);
    if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f)) BAD("adamw: beta1 must be in [0, 1) (got %g)", (double)c->beta1);
    if (!(c->beta2 >= 0.0f && c->beta2 < 1.0f)) BAD("adamw: beta2 must be in [0, 1) (got %g)", (double)c->beta2);
    if (!(c->eps > 0.0f)) BAD("adamw: eps must be > 0 (got %g)", (double)c->eps);
    if (!(c->weight_decay >= 0.0f)) BAD("adamw: weight_decay must be >= 0 (got %g)", (double)c->weight_decay);
    if (c->total_steps <= 0) BAD("adamw: total_steps must be > 0 (got %d)", c->total_steps);
    if (c->warmup_steps < 0 || c->warmup_steps > c->total_steps)
        BAD("adamw: warmup_steps must be in [0, total_steps] (got %d, total %d)", c->warmup_steps,
            c->total_steps);
    return 0;
#undef BAD
}

float adamw_lr(const AdamWConfig* c, int step) {
    if (step < 0) step = 0;
    if (step < c->warmup_steps) return c->lr * (float)(step + 1) / (float)c->warmup_steps;
    if (step >= c->total_steps) return c->min_lr;
    const int span = c->total_steps - c->warmup_steps; // > 0 here
    const double progress = (double)(step - c->warmup_steps) / (double)span;
    const double cosine = 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
    return (float)(c->min_lr + (c->lr - c->min_lr) * cosine);
}

void adamw_update(const AdamWConfig* c, float* params, const float* grads, float* m, float* v,
                  size_t n, int t, float lr, float weight_decay) {
    const float b1 = c->beta1, b2 = c->beta2, eps = c->eps;
    // bias corrections in double, rounded once: every element (and every
    // rank's shard) uses the same two constants
    const float bc1 = (float)(1.0 - pow((double)b1, (double)t));
    const float bc2 = (float)(1.0 - pow((double)b2, (double)t));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float g = grads[i];
        const float mi = b1 * m[i] + (1.0f - b1) * g;
        const float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        const float mhat = mi / bc1, vhat = vi / bc2;
        params[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * params[i]);
    }
}

double optim_sumsq(const float* x, size_t n) {
    enum { BLOCK = 4096 };
    const size_t nblocks = (n + BLOCK - 1) / BLOCK;
    if (nblocks == 0) return 0.0;
    double small[64];
    double* part = nblocks <= 64 ? small : malloc(nblocks * sizeof(double));
    if (!part) { // out of memory: fall back to one sequential pass, same order per block
        double total = 0.0;
        for (size_t b = 0; b < nblocks; b++) {
            double s = 0.0;
            for (size_t i = b * BLOCK; i < n && i < (b + 1) * BLOCK; i++) s += (double)x[i] * x[i];
            total += s;
        }
        return total;
    }
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nblocks; b++) {
        double s = 0.0;
        const size_t end = (b + 1) * BLOCK < n ? (b + 1) * BLOCK : n;
        for (size_t i = b * BLOCK; i < end; i++) s += (double)x[i] * x[i];
        part[b] = s;
    }
    double total = 0.0;
    for (size_t b = 0; b < nblocks; b++) total += part[b];
    if (part != small) free(part);
    return total;
}

float optim_clip_factor(double global_norm, float max_norm) {
    if (!(max_norm > 0.0f) || !isfinite(global_norm)) return 1.0f;
    const double f = (double)max_norm / (global_norm + 1e-6);
    return f < 1.0 ? (float)f : 1.0f;
}

void optim_scale(float* x, size_t n, float factor) {
    if (factor == 1.0f) return;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= factor;
}
