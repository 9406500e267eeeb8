/*
 * optim.h — AdamW with decoupled weight decay on a flat fp32 shard, the
 * learning-rate schedule, and gradient-norm clipping helpers. The
 * element-wise work runs in the kernel table (adamw, sumsq, scale), on the
 * memory the shards live in.
 *
 * The optimizer knows nothing of tensors or ranks: FSDP hands it the slice of
 * parameters, gradients and moments a rank owns, as flat arrays. Everything
 * is element-wise or summed in a fixed order, so results do not depend on
 * the thread count, and N ranks each updating their shard equal one rank
 * updating the whole (bit for bit), given the same clip factor.
 *
 * Clipping by global norm across ranks: each rank sums its shard's squares
 * (the table's sumsq), the runtime all-reduces the partial sums (in a fixed
 * rank order), then optim_clip_factor(sqrt(total), max_norm) and the
 * table's scale on the shard.
 *
 * Leaves out: parameter groups (call adamw_update once per range with its
 * own weight_decay), fused/low-precision moments, amsgrad.
 */
#ifndef RUNTIME_OPTIM_H
#define RUNTIME_OPTIM_H
#include <stddef.h>

#include "kernels.h"

typedef struct {
    float lr;           /* peak learning rate */
    float min_lr;       /* floor of the cosine decay */
    int warmup_steps;   /* linear warmup from lr/warmup_steps to lr */
    int total_steps;    /* cosine decay reaches min_lr at this step */
    float beta1, beta2; /* e.g. 0.9, 0.95 */
    float eps;          /* e.g. 1e-8 */
    float weight_decay; /* decoupled: p -= lr * wd * p */
} AdamWConfig;

/* Checks ranges (lr >= min_lr >= 0, betas in [0, 1), eps > 0, wd >= 0,
 * 0 <= warmup_steps <= total_steps, total_steps > 0); 0 or -1 + message. */
int adamw_config_check(const AdamWConfig* cfg, char* err, size_t errlen);

/* Learning rate of 0-based step s:
 *   s < warmup:            lr * (s + 1) / warmup
 *   warmup <= s < total:   min_lr + (lr - min_lr) * (1 + cos(pi * (s - warmup) / (total - warmup))) / 2
 *   s >= total:            min_lr */
float adamw_lr(const AdamWConfig* cfg, int step);

/* The constants of AdamW step t (1-based, for the bias corrections) with
 * learning rate lr (adamw_lr) and weight decay wd, as the backend's adamw
 * entry takes them (kernels.h):
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p = p - lr * ( (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * p )
 * m and v start at zero. */
ZrtAdamWStep adamw_step(const AdamWConfig* cfg, int t, float lr, float weight_decay);

/* One AdamW step on n elements of backend K's memory (its adamw entry). */
void adamw_update(const ZrtKernels* K, const AdamWConfig* cfg, float* params, const float* grads,
                  float* m, float* v, size_t n, int t, float lr, float weight_decay);

/* min(1, max_norm / (global_norm + 1e-6)); 1 when max_norm <= 0 (clipping
 * off) or the norm is not finite (the caller should skip the step). */
float optim_clip_factor(double global_norm, float max_norm);
#endif
