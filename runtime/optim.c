/*
 * optim.c — AdamW's step constants, the warmup + cosine schedule and the
 * clip factor of optim.h; the element-wise loops are the kernel table's.
 */
#include "optim.h"

#include <math.h>
#include <stdio.h>

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

ZrtAdamWStep adamw_step(const AdamWConfig* c, int t, float lr, float weight_decay) {
    // bias corrections in double, rounded once: every element (and every
    // rank's shard) uses the same two constants
    return (ZrtAdamWStep){
        .beta1 = c->beta1,
        .beta2 = c->beta2,
        .one_minus_beta1 = 1.0f - c->beta1,
        .one_minus_beta2 = 1.0f - c->beta2,
        .bc1 = (float)(1.0 - pow((double)c->beta1, (double)t)),
        .bc2 = (float)(1.0 - pow((double)c->beta2, (double)t)),
        .eps = c->eps,
        .lr = lr,
        .weight_decay = weight_decay,
    };
}

void adamw_update(const ZrtKernels* K, const AdamWConfig* c, float* params, const float* grads,
                  float* m, float* v, size_t n, int t, float lr, float weight_decay) {
    const ZrtAdamWStep s = adamw_step(c, t, lr, weight_decay);
    K->adamw(params, grads, m, v, n, &s);
}

float optim_clip_factor(double global_norm, float max_norm) {
    if (!(max_norm > 0.0f) || !isfinite(global_norm)) return 1.0f;
    const double f = (double)max_norm / (global_norm + 1e-6);
    return f < 1.0 ? (float)f : 1.0f;
}
