/*
 * kernels.h — the compute kernels the models call, as a backend table.
 *
 * A backend is a struct of function pointers (ggml-style): the model code
 * calls kernels through zrt_kernels_cpu() today and a CUDA table can slot in
 * with the same signatures, so models/ never branches on the device. Every
 * pointer argument is a device pointer of that backend (host memory for CPU).
 *
 * Conventions (shared by every backend):
 *   - fp32 everywhere; N = number of token rows (B*T), row-major tensors.
 *   - Linear layers follow PyTorch: weight (OC, IC), out = inp @ weight^T.
 *   - *_backward kernels ACCUMULATE parameter gradients (dweight += ...),
 *     because the runtime's gradient buffers accumulate over micro-batches.
 *     Activation gradients (dinp) are overwritten unless the kernel takes an
 *     `accumulate` flag; where it does, 1 means dinp += ..., 0 means dinp = ...
 *   - Reductions run in a fixed order and work is split over threads in
 *     pieces chosen by shape alone, so a step gives the same bits at any
 *     thread count (OMP_NUM_THREADS; the CPU backend runs OpenBLAS
 *     single-threaded inside its OpenMP team), on any OpenBLAS core.
 *   - RoPE pairs INTERLEAVED elements (x[2i], x[2i+1]) of each head, the
 *     convention of Meta's reference Llama (complex multiply), with frequency
 *     theta^(-2i/hd) and position t = index within the sequence.
 *
 * What this leaves out: no bias terms, no dropout, no fused kernels beyond
 * softmax+cross-entropy, no KV cache (training only), no half-precision
 * compute (bf16 is only a storage format here: see the rounding helpers).
 */
#ifndef KERNELS_KERNELS_H
#define KERNELS_KERNELS_H
#include <stddef.h>
#include <stdint.h>

#include "zipccl_float.h"

typedef struct {
    const char* name; /* "cpu", "cuda" */

    /* out (N, OC) = inp (N, IC) @ weight (OC, IC)^T */
    void (*matmul_forward)(float* out, const float* inp, const float* weight, int N, int IC,
                           int OC);
    /* dinp (N, IC) (=|+=) dout @ weight; dweight (OC, IC) += dout^T @ inp.
     * dinp or dweight may be NULL to skip that product. */
    void (*matmul_backward)(float* dinp, float* dweight, const float* dout, const float* inp,
                            const float* weight, int N, int IC, int OC, int accumulate);

    /* out (N, C) = inp * rstd * weight, rstd (N) = 1/sqrt(mean(inp^2) + eps) */
    void (*rmsnorm_forward)(float* out, float* rstd, const float* inp, const float* weight, int N,
                            int C, float eps);
    /* dinp (N, C) += ..., dweight (C) += ... */
    void (*rmsnorm_backward)(float* dinp, float* dweight, const float* dout, const float* inp,
                             const float* weight, const float* rstd, int N, int C);

    /* In place on x (B, T, NH, hd): rotate each interleaved pair by t*freq.
     * cos_sin (T, hd/2, 2) from rope_table(). Backward rotates by -t*freq. */
    void (*rope_table)(float* cos_sin, int T, int hd, float theta);
    void (*rope_forward)(float* x, const float* cos_sin, int B, int T, int NH, int hd);
    void (*rope_backward)(float* dx, const float* cos_sin, int B, int T, int NH, int hd);

    /* Causal grouped-query attention, softmax scale 1/sqrt(hd).
     * q (B, T, H, hd), k, v (B, T, KV, hd); head h reads kv head h / (H/KV).
     * out (B, T, H, hd); att (B, H, T, T) receives the probabilities (the
     * upper triangle is written as 0) and is all the backward needs.
     * scratch: attention_scratch_floats(B, T, KV) floats. */
    void (*attention_forward)(float* out, float* att, const float* q, const float* k,
                              const float* v, int B, int T, int H, int KV, int hd, float* scratch);
    /* dq (B, T, H, hd), dk, dv (B, T, KV, hd) are overwritten. */
    void (*attention_backward)(float* dq, float* dk, float* dv, const float* dout,
                               const float* att, const float* q, const float* k, const float* v,
                               int B, int T, int H, int KV, int hd, float* scratch);
    size_t (*attention_scratch_floats)(int B, int T, int KV);

    /* h (N, F) = silu(gate) * up */
    void (*swiglu_forward)(float* h, const float* gate, const float* up, int N, int F);
    /* dgate, dup (N, F) overwritten from dh */
    void (*swiglu_backward)(float* dgate, float* dup, const float* dh, const float* gate,
                            const float* up, int N, int F);

    /* out (N, C) = table[tokens[n]] */
    void (*embedding_forward)(float* out, const int* tokens, const float* table, int N, int C);
    /* dtable[tokens[n]] += dout[n], summed in token order (deterministic) */
    void (*embedding_backward)(float* dtable, const float* dout, const int* tokens, int N, int C);

    /* Row-wise softmax cross-entropy over logits (N, V). targets < 0 are
     * ignored. losses (N) receives each row's loss (0 for ignored rows);
     * returns their SUM over counted rows (double, in row order) and sets
     * *count. If dlogits is not NULL it receives
     * (softmax - onehot(target)) * dscale for counted rows and 0 for ignored
     * rows; dlogits may alias logits (in place). */
    double (*crossentropy_forward_backward)(float* dlogits, float* losses, const float* logits,
                                            const int* targets, int N, int V, float dscale,
                                            int* count);

    /* Small vector helpers, so models/ never touches backend memory itself:
     * out (n) = a + b (out may alias a or b); x (n) = 0. */
    void (*add)(float* out, const float* a, const float* b, size_t n);
    void (*zero)(float* x, size_t n);

    /* Round fp32 -> bf16 (round to nearest, ties to even; NaN stays NaN). */
    void (*round_to_bf16)(uint16_t* out, const float* in, size_t n);
    void (*bf16_to_float)(float* out, const uint16_t* in, size_t n);
    /* x[i] = float(bf16(x[i])) in place: fp32 storage with bf16 values. */
    void (*round_bf16_inplace)(float* x, size_t n);
} ZrtKernels;

/* The CPU backend (OpenBLAS SGEMM + OpenMP loops). Never NULL. */
const ZrtKernels* zrt_kernels_cpu(void);

/* Process setup for the CPU backend, called first thing in main(); it may
 * re-execute the program (same argv, /proc/self/exe) with two environment
 * variables that the libraries read only when they load:
 *  - OPENBLAS_CORETYPE: Debian's OpenBLAS does not know recent Xeons
 *    (family 6 model 207 here) and falls back to its SSE3 "Prescott" SGEMM,
 *    5-8x slower than its AVX-512 kernel. If OpenBLAS chose Prescott on a
 *    CPU with AVX-512 (or AVX2), set Cooperlake / SkylakeX (Haswell).
 *  - OMP_WAIT_POLICY=passive: idle OpenMP threads sleep instead of spinning,
 *    which on these shared 2-core machines halved the step time under load
 *    (spinning threads steal the core the GEMM needs).
 * A variable the user already set is left alone. Returns (only when no
 * re-exec happened or it failed) the OpenBLAS core name in use. */
const char* zrt_blas_select_core(char** argv);

/* The CUDA backend, or NULL when the build has no CUDA. */
const ZrtKernels* zrt_kernels_cuda(void);

/* The bf16 <-> fp32 helpers the backends must match bit for bit are
 * zipcclFloatToBf16 / zipcclBf16ToFloat (comm/zipccl_float.h, host and device). */
#endif
