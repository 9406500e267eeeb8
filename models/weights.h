/*
 * weights.h — a unit's parameters as the model reads them: fp32, or bf16.
 *
 * FSDP's bf16 gathers (comm.param_dtype: bf16) bring a unit in bf16, and it
 * stays bf16 while the model reads it (LlamaParamHooks.bf16_units): half the
 * memory of every held unit, and on a GPU the bf16 compute table feeds it to
 * the tensor cores without a conversion. The linear layers and the
 * embedding read such weights through the table's _w16 entries; the norms'
 * weight vectors (a few C per unit) are widened into fp32 first (llama.c).
 * Widening is exact, so a step over bf16 units has the bits of a step over
 * their fp32 widenings (tests/test_model.c checks it on every table).
 *
 * llama.c and moe.c include this; nothing outside models/ does.
 */
#ifndef MODELS_WEIGHTS_H
#define MODELS_WEIGHTS_H
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

/* A weight in a backend's memory: exactly one pointer is set. */
typedef struct {
    const float* f32;
    const uint16_t* bf16;
} Weight;

/* A unit as acquire() returned it, in the unit's dtype. */
static inline Weight weight_of(const void* unit, int bf16) {
    Weight w = {NULL, NULL};
    if (bf16) w.bf16 = unit;
    else w.f32 = unit;
    return w;
}

/* The tensor `off` elements into w. */
static inline Weight weight_at(Weight w, size_t off) {
    if (w.bf16) w.bf16 += off;
    else w.f32 += off;
    return w;
}

/* out (N, OC) = inp (N, IC) @ w (OC, IC)^T */
static inline void linear_forward(const ZrtKernels* K, float* out, const float* inp, Weight w,
                                  int N, int IC, int OC) {
    if (w.bf16) K->matmul_forward_w16(out, inp, w.bf16, N, IC, OC);
    else K->matmul_forward(out, inp, w.f32, N, IC, OC);
}

/* dinp (N, IC) (=|+=) dout @ w; dweight (OC, IC) += dout^T @ inp (fp32) */
static inline void linear_backward(const ZrtKernels* K, float* dinp, float* dweight,
                                   const float* dout, const float* inp, Weight w, int N, int IC,
                                   int OC, int accumulate) {
    if (w.bf16) K->matmul_backward_w16(dinp, dweight, dout, inp, w.bf16, N, IC, OC, accumulate);
    else K->matmul_backward(dinp, dweight, dout, inp, w.f32, N, IC, OC, accumulate);
}

/* A linear layer's input as the activations keep it: fp32, or bf16 (the
 * bf16 tables' a16 entries, kernels.h "bf16 activations"); exactly one
 * pointer is set. The norm or SwiGLU that makes it writes it, the GEMMs
 * read it. */
typedef struct {
    float* f32;
    uint16_t* bf16;
} Act;

/* Row block `off` of a tensor kept as f32 or as b16 (is16). */
static inline Act act_at(float* f32, uint16_t* b16, int is16, size_t off) {
    return is16 ? (Act){NULL, b16 + off} : (Act){f32 + off, NULL};
}

/* swiglu_forward into either kind of tensor */
static inline void act_swiglu(const ZrtKernels* K, Act h, const float* gate, const float* up, int N, int F) {
    if (h.bf16) K->swiglu_forward_a16(h.bf16, gate, up, N, F);
    else K->swiglu_forward(h.f32, gate, up, N, F);
}

/* linear_forward / linear_backward over either kind of input */
static inline void act_linear_forward(const ZrtKernels* K, float* out, Act x, Weight w, int N, int IC, int OC) {
    if (x.bf16) K->matmul_forward_a16(out, x.bf16, w.f32, w.bf16, N, IC, OC);
    else linear_forward(K, out, x.f32, w, N, IC, OC);
}
static inline void act_linear_backward(const ZrtKernels* K, float* dinp, float* dweight, const float* dout, Act x,
                                       Weight w, int N, int IC, int OC, int accumulate) {
    if (x.bf16) K->matmul_backward_a16(dinp, dweight, dout, x.bf16, w.f32, w.bf16, N, IC, OC, accumulate);
    else linear_backward(K, dinp, dweight, dout, x.f32, w, N, IC, OC, accumulate);
}

/* out (N, C) = table[tokens[n]] */
static inline void embedding_forward(const ZrtKernels* K, float* out, const int* tokens,
                                     Weight table, int N, int C) {
    if (table.bf16) K->embedding_forward_w16(out, tokens, table.bf16, N, C);
    else K->embedding_forward(out, tokens, table.f32, N, C);
}

#endif
