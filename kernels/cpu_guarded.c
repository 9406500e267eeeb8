/*
 * cpu_guarded.c — the guarded CPU backend: the CPU kernel table on the
 * guarded device (zdev_cpu_guarded(), device/device_host.c), whose memory
 * the host cannot touch outside the device's own calls.
 *
 * Why: the GPU path's rule is that models/ and runtime/ reach device memory
 * only through the device and the kernel table. On a machine without a GPU
 * nothing would catch a host loop reading a device pointer, until the first
 * GPU run crashed or, worse, read stale memory. The guarded device keeps
 * every allocation PROT_NONE between calls; each kernel here opens the
 * guard (zdev_guard_enter: every mapping readable and writable, under the
 * guard's lock), runs the CPU kernel and closes it again. A stray host
 * dereference is a SIGSEGV at the line that did it.
 *
 * Same kernels, same bits as the host table it guards (zrt_kernels_cpu(),
 * or zrt_kernels_cpu_bf16() for model.compute: bf16); slower by two
 * mprotect calls per mapping and kernel (the tests' models have a few dozen
 * mappings). Thread-safe: the guard's lock serialises the kernels and
 * ZipCCL's copies from its progress threads.
 *
 * Leaves out: the kernels' own index arithmetic (AddressSanitizer's job).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

static const ZrtKernels* g_base; /* the host table it guards (cpu or cpu_bf16) */
static const ZrtKernels* C(void) { return g_base ? g_base : zrt_kernels_cpu(); }


/* ---------------------------------------------------------------- kernels */

/* Each entry: open, the CPU kernel, close. */
#define GUARD(call)          \
    do {                     \
        zdev_guard_enter();  \
        call;                \
        zdev_guard_leave();  \
    } while (0)

static void g_matmul_forward(float* out, const float* inp, const float* weight, int N, int IC,
                             int OC) {
    GUARD(C()->matmul_forward(out, inp, weight, N, IC, OC));
}
static void g_matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                              const float* weight, int N, int IC, int OC, int accumulate) {
    GUARD(C()->matmul_backward(dinp, dweight, dout, inp, weight, N, IC, OC, accumulate));
}
static void g_matmul_forward_w16(float* out, const float* inp, const uint16_t* weight, int N,
                                 int IC, int OC) {
    GUARD(C()->matmul_forward_w16(out, inp, weight, N, IC, OC));
}
static void g_matmul_backward_w16(float* dinp, float* dweight, const float* dout,
                                  const float* inp, const uint16_t* weight, int N, int IC, int OC,
                                  int accumulate) {
    GUARD(C()->matmul_backward_w16(dinp, dweight, dout, inp, weight, N, IC, OC, accumulate));
}
static void g_rmsnorm_forward_a16(uint16_t* out, float* rstd, const float* inp,
                                  const float* weight, int N, int C_, float eps) {
    GUARD(C()->rmsnorm_forward_a16(out, rstd, inp, weight, N, C_, eps));
}
static void g_swiglu_forward_a16(uint16_t* h, const float* gate, const float* up, int N, int F) {
    GUARD(C()->swiglu_forward_a16(h, gate, up, N, F));
}
static void g_matmul_forward_a16(float* out, const uint16_t* inp, const float* weight,
                                 const uint16_t* weight16, int N, int IC, int OC) {
    GUARD(C()->matmul_forward_a16(out, inp, weight, weight16, N, IC, OC));
}
static void g_matmul_backward_a16(float* dinp, float* dweight, const float* dout,
                                  const uint16_t* inp, const float* weight,
                                  const uint16_t* weight16, int N, int IC, int OC,
                                  int accumulate) {
    GUARD(C()->matmul_backward_a16(dinp, dweight, dout, inp, weight, weight16, N, IC, OC,
                                   accumulate));
}
static void g_matmul_forward_grouped_a16(float* out, const uint16_t* inp, const float* weight,
                                         const uint16_t* weight16, size_t w_stride, const int* rows, int G,
                                         int IC, int OC) {
    GUARD(C()->matmul_forward_grouped_a16(out, inp, weight, weight16, w_stride, rows, G, IC, OC));
}
static void g_matmul_backward_grouped_a16(float* dinp, float* dweight, size_t dw_stride, const float* dout,
                                          const uint16_t* inp, const float* weight, const uint16_t* weight16,
                                          size_t w_stride, const int* rows, int G, int IC, int OC,
                                          int accumulate) {
    GUARD(C()->matmul_backward_grouped_a16(dinp, dweight, dw_stride, dout, inp, weight, weight16, w_stride,
                                           rows, G, IC, OC, accumulate));
}
static void g_rope_forward_a16(uint16_t* out, const float* x, const float* cs, int B, int T, int NH,
                               int hd) {
    GUARD(C()->rope_forward_a16(out, x, cs, B, T, NH, hd));
}
static void g_attention_forward_a16(float* out, float* lse, const uint16_t* q, const uint16_t* k,
                                    const uint16_t* v, int B, int T, int H, int KV, int hd,
                                    float* scratch) {
    GUARD(C()->attention_forward_a16(out, lse, q, k, v, B, T, H, KV, hd, scratch));
}
static void g_attention_backward_a16(float* dq, float* dk, float* dv, const float* dout,
                                     const float* out, const float* lse, const uint16_t* q,
                                     const uint16_t* k, const uint16_t* v, int B, int T, int H,
                                     int KV, int hd, float* scratch) {
    GUARD(C()->attention_backward_a16(dq, dk, dv, dout, out, lse, q, k, v, B, T, H, KV, hd, scratch));
}
static void g_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight,
                              int N, int C_, float eps) {
    GUARD(C()->rmsnorm_forward(out, rstd, inp, weight, N, C_, eps));
}
static void g_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, const float* rstd, int N, int C_) {
    GUARD(C()->rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C_));
}
static void g_rope_table(float* cos_sin, int T, int hd, float theta) {
    GUARD(C()->rope_table(cos_sin, T, hd, theta));
}
static void g_rope_forward(float* x, const float* cs, int B, int T, int NH, int hd) {
    GUARD(C()->rope_forward(x, cs, B, T, NH, hd));
}
static void g_rope_backward(float* dx, const float* cs, int B, int T, int NH, int hd) {
    GUARD(C()->rope_backward(dx, cs, B, T, NH, hd));
}
static void g_attention_forward(float* out, float* lse, const float* q, const float* k,
                                const float* v, int B, int T, int H, int KV, int hd,
                                float* scratch) {
    GUARD(C()->attention_forward(out, lse, q, k, v, B, T, H, KV, hd, scratch));
}
static void g_attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                 const float* out, const float* lse, const float* q,
                                 const float* k, const float* v, int B, int T, int H, int KV,
                                 int hd, float* scratch) {
    GUARD(C()->attention_backward(dq, dk, dv, dout, out, lse, q, k, v, B, T, H, KV, hd, scratch));
}
static size_t g_attention_scratch_floats(int B, int T, int H, int KV, int hd) {
    return C()->attention_scratch_floats(B, T, H, KV, hd);
}
static void g_swiglu_forward(float* h, const float* gate, const float* up, int N, int F) {
    GUARD(C()->swiglu_forward(h, gate, up, N, F));
}
static void g_swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate,
                              const float* up, int N, int F) {
    GUARD(C()->swiglu_backward(dgate, dup, dh, gate, up, N, F));
}
static void g_embedding_forward(float* out, const int* tokens, const float* table, int N, int C_) {
    GUARD(C()->embedding_forward(out, tokens, table, N, C_));
}
static void g_embedding_forward_w16(float* out, const int* tokens, const uint16_t* table, int N,
                                    int C_) {
    GUARD(C()->embedding_forward_w16(out, tokens, table, N, C_));
}
static void g_embedding_backward(float* dtable, const float* dout, const int* tokens, int N,
                                 int C_) {
    GUARD(C()->embedding_backward(dtable, dout, tokens, N, C_));
}
static void g_crossentropy(float* dlogits, float* losses, const float* logits,
                           const int* targets, int N, int V, float dscale, double* loss_sum) {
    GUARD(C()->crossentropy_forward_backward(dlogits, losses, logits, targets, N, V, dscale,
                                             loss_sum));
}
static void g_add(float* out, const float* a, const float* b, size_t n) {
    GUARD(C()->add(out, a, b, n));
}
static void g_zero(float* x, size_t n) { GUARD(C()->zero(x, n)); }
static void g_moe_route(float* probs, int* sel, float* w, const float* logits, int N, int E, int k,
                        int norm_topk) {
    GUARD(C()->moe_route(probs, sel, w, logits, N, E, k, norm_topk));
}
static void g_moe_prob_sum(double* acc, const float* probs, int N, int E) {
    GUARD(C()->moe_prob_sum(acc, probs, N, E));
}
static void g_moe_gather(float* xs, const float* x, const int* pos, int N, int k, int C_) {
    GUARD(C()->moe_gather(xs, x, pos, N, k, C_));
}
static void g_moe_combine(float* out, const float* ys, const float* w, const int* pos, int N, int k,
                          int C_) {
    GUARD(C()->moe_combine(out, ys, w, pos, N, k, C_));
}
static void g_moe_combine_backward(float* dw, float* dys, const float* dout, const float* ys,
                                   const float* w, const int* pos, int N, int k, int C_) {
    GUARD(C()->moe_combine_backward(dw, dys, dout, ys, w, pos, N, k, C_));
}
static void g_moe_router_backward(float* dlogits, const float* probs, const int* sel,
                                  const float* w, const float* dw, const float* aux, int N, int E,
                                  int k, int norm_topk) {
    GUARD(C()->moe_router_backward(dlogits, probs, sel, w, dw, aux, N, E, k, norm_topk));
}
static void g_round_to_bf16(uint16_t* out, const float* in, size_t n) {
    GUARD(C()->round_to_bf16(out, in, n));
}
static void g_bf16_to_float(float* out, const uint16_t* in, size_t n) {
    GUARD(C()->bf16_to_float(out, in, n));
}
static void g_round_bf16_inplace(float* x, size_t n) { GUARD(C()->round_bf16_inplace(x, n)); }
static void g_add_bf16(float* acc, const uint16_t* in, size_t n) { GUARD(C()->add_bf16(acc, in, n)); }
static void g_adamw(float* p, const float* g, float* m, float* v, size_t n,
                    const ZrtAdamWStep* s) {
    GUARD(C()->adamw(p, g, m, v, n, s));
}
static void g_sumsq(double* out, const float* x, size_t n) { GUARD(C()->sumsq(out, x, n)); }
static void g_scale(float* x, size_t n, float factor) { GUARD(C()->scale(x, n, factor)); }
static void g_adamw_multi(const ZrtAdamWSlice* sl, int ns, const ZrtAdamWStep* s, float gscale,
                          float clip) {
    GUARD(C()->adamw_multi(sl, ns, s, gscale, clip));
}
static void g_sumsq_multi(double* out, float* const* x, const size_t* n, int nx, float gscale) {
    GUARD(C()->sumsq_multi(out, x, n, nx, gscale));
}

static ZrtKernels guarded_kernels = { /* .dev set at first use */
    .name = "cpu_guarded",
    .matmul_forward = g_matmul_forward,
    .matmul_backward = g_matmul_backward,
    .matmul_forward_w16 = g_matmul_forward_w16,
    .matmul_backward_w16 = g_matmul_backward_w16,
    .rmsnorm_forward = g_rmsnorm_forward,
    .rmsnorm_backward = g_rmsnorm_backward,
    .rope_table = g_rope_table,
    .rope_forward = g_rope_forward,
    .rope_backward = g_rope_backward,
    .attention_forward = g_attention_forward,
    .attention_backward = g_attention_backward,
    .attention_scratch_floats = g_attention_scratch_floats,
    .swiglu_forward = g_swiglu_forward,
    .swiglu_backward = g_swiglu_backward,
    .embedding_forward = g_embedding_forward,
    .embedding_forward_w16 = g_embedding_forward_w16,
    .embedding_backward = g_embedding_backward,
    .crossentropy_forward_backward = g_crossentropy,
    .add = g_add,
    .zero = g_zero,
    .moe_route = g_moe_route,
    .moe_prob_sum = g_moe_prob_sum,
    .moe_gather = g_moe_gather,
    .moe_combine = g_moe_combine,
    .moe_combine_backward = g_moe_combine_backward,
    .moe_router_backward = g_moe_router_backward,
    .round_to_bf16 = g_round_to_bf16,
    .bf16_to_float = g_bf16_to_float,
    .round_bf16_inplace = g_round_bf16_inplace,
    .add_bf16 = g_add_bf16,
    .adamw = g_adamw,
    .sumsq = g_sumsq,
    .adamw_multi = g_adamw_multi,
    .sumsq_multi = g_sumsq_multi,
    .scale = g_scale,
};

const ZrtKernels* zrt_kernels_cpu_guarded(void) { return zrt_kernels_guarded(zrt_kernels_cpu()); }

const ZrtKernels* zrt_kernels_guarded(const ZrtKernels* base) {
    static ZrtKernels bf16_twin;
    if (!base || base->dev != zdev_cpu()) return NULL;
    if (g_base && g_base != base) {
        fprintf(stderr, "cpu_guarded: one guarded table per process (asked for %s after %s)\n",
                base->name, g_base->name);
        abort();
    }
    g_base = base;
    guarded_kernels.dev = zdev_cpu_guarded();
    if (base == zrt_kernels_cpu()) return &guarded_kernels;
    bf16_twin = guarded_kernels; /* same wrappers, its name says which kernels */
    bf16_twin.name = "cpu_guarded_bf16";
    /* the bf16 activation entries where the base has them (kernels.h) */
    bf16_twin.rmsnorm_forward_a16 = base->rmsnorm_forward_a16 ? g_rmsnorm_forward_a16 : NULL;
    bf16_twin.swiglu_forward_a16 = base->swiglu_forward_a16 ? g_swiglu_forward_a16 : NULL;
    bf16_twin.matmul_forward_a16 = base->matmul_forward_a16 ? g_matmul_forward_a16 : NULL;
    bf16_twin.matmul_backward_a16 = base->matmul_backward_a16 ? g_matmul_backward_a16 : NULL;
    bf16_twin.rope_forward_a16 = base->rope_forward_a16 ? g_rope_forward_a16 : NULL;
    bf16_twin.attention_forward_a16 = base->attention_forward_a16 ? g_attention_forward_a16 : NULL;
    bf16_twin.attention_backward_a16 = base->attention_backward_a16 ? g_attention_backward_a16 : NULL;
    bf16_twin.matmul_forward_grouped_a16 = base->matmul_forward_grouped_a16 ? g_matmul_forward_grouped_a16 : NULL;
    bf16_twin.matmul_backward_grouped_a16 =
        base->matmul_backward_grouped_a16 ? g_matmul_backward_grouped_a16 : NULL;
    return &bf16_twin;
}
