/*
 * kernels.h — the compute kernels the models call, as a backend table.
 *
 * A backend is a struct of function pointers (ggml-style): the model code
 * calls every kernel through the table it was given (CPU, guarded CPU or
 * CUDA), so models/ never branches on the device. The table holds kernels
 * only: memory, copies, streams and events are its device's (the `dev`
 * field, device/device.h, the one device model ZipCCL takes too). Every
 * pointer argument is that device's memory, which models/ and runtime/
 * obtain and move only through the device: the host reads it only at the
 * edges (the batch in; the loss, norms and metrics out; checkpoints, dumps
 * and the Hugging Face export). FSDP's shards, AdamW's moments, the
 * gathered units, the collectives' buffers and the expert exchange's rows
 * live there too. The guarded CPU table (zrt_kernels_cpu_guarded, on
 * zdev_cpu_guarded()) makes that a rule the tests enforce: outside a
 * device call or a kernel its memory cannot be touched.
 *
 * Conventions (shared by every backend):
 *   - fp32 everywhere (but the bf16 weights of the _w16 entries); N = number
 *     of token rows (B*T), row-major tensors.
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
 * softmax+cross-entropy, no KV cache (training only); bf16 storage of
 * activations only for the linear layers' inputs nothing else reads and for
 * q, k, v where attention runs on tensor cores (the a16 entries below; the
 * other GEMM inputs are rounded on the fly); weights
 * are read in bf16 only by the linear layers and the embedding (the _w16
 * entries), the norms' small vectors are widened.
 */
#ifndef KERNELS_KERNELS_H
#define KERNELS_KERNELS_H
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "zipccl_float.h"

/* One AdamW step's constants (runtime/optim.c computes them once per
 * step, so every element and every rank's shard uses the same floats). */
typedef struct {
    float beta1, beta2, one_minus_beta1, one_minus_beta2; /* b1, b2, 1 - b1, 1 - b2 */
    float bc1, bc2;      /* bias corrections 1 - b^t, in double rounded once */
    float eps, lr, weight_decay;
} ZrtAdamWStep;

enum { ZRT_SUMSQ_BLOCK = 4096 };

/* The head dims at which model.compute: bf16 runs attention in bf16: the
 * CUDA bf16 table's flash kernels (kernels/cuda.cu) and the CPU twin's
 * mirror of their roundings (kernels/cpu.c); other head dims keep the fp32
 * attention in both. */
static inline int zrt_attention_bf16_head_dim(int hd) { return hd == 64 || hd == 128; }

/* One tensor slice of the multi-tensor optimizer (adamw_multi): n
 * elements of the parameters, the gradient and AdamW's moments (the
 * device's memory), and the weight decay the slice takes (0 for norms). */
typedef struct {
    float* p;
    const float* g;
    float* m;
    float* v;
    size_t n;
    float weight_decay;
} ZrtAdamWSlice;

typedef struct ZrtKernels_ {
    const char* name; /* "cpu", "cpu_guarded", "cuda" */

    /* The device the kernels run on (device/device.h): every pointer
     * argument below is its memory, allocated, copied and freed through it
     * (zdev_alloc, zdev_upload, ...); the kernels run on its compute stream
     * (ZDevice.stream), in issue order, so a kernel reads what the kernels
     * and copies issued before it on that stream wrote. No entry returns
     * a host value: results stay in the device's memory until the caller
     * reads them (a download: one host wait, which device.h counts on every
     * table alike), so a step's count of waits is the program's, not the
     * device's. */
    ZDevice* dev;

    /* out (N, OC) = inp (N, IC) @ weight (OC, IC)^T */
    void (*matmul_forward)(float* out, const float* inp, const float* weight, int N, int IC,
                           int OC);
    /* dinp (N, IC) (=|+=) dout @ weight; dweight (OC, IC) += dout^T @ inp.
     * dinp or dweight may be NULL to skip that product. */
    void (*matmul_backward)(float* dinp, float* dweight, const float* dout, const float* inp,
                            const float* weight, int N, int IC, int OC, int accumulate);
    /* The same two with a bf16 weight (a unit FSDP gathered in bf16 stays
     * bf16 while the model reads it, models/weights.h): the results are the
     * fp32 entries' given the widened weight (widening is exact), so a step
     * over bf16 units has the bits of one over their fp32 widenings. The
     * bf16 tables hand the weight to the tensor cores as it is. */
    void (*matmul_forward_w16)(float* out, const float* inp, const uint16_t* weight, int N,
                               int IC, int OC);
    void (*matmul_backward_w16)(float* dinp, float* dweight, const float* dout,
                                const float* inp, const uint16_t* weight, int N, int IC, int OC,
                                int accumulate);

    /* ---- bf16 activations (the bf16 tables only; NULL in the fp32 ones).
     * With bf16 compute the model keeps the linear layers' inputs that no
     * other kernel reads in fp32 (the attention and MLP norms' outputs, the
     * MLP's hidden state: models/llama.c) in bf16: one rounding where they
     * are made instead of one per GEMM that reads them, half the memory.
     * The GEMMs round those inputs anyway, so the results have the bits of
     * the fp32-input entries (rounding is idempotent); the CPU twin is the
     * reference as above. */
    /* out (N, C) = bf16(inp * rstd * weight), rstd as rmsnorm_forward's */
    void (*rmsnorm_forward_a16)(uint16_t* out, float* rstd, const float* inp,
                                const float* weight, int N, int C, float eps);
    /* h (N, F) = bf16(silu(gate) * up) */
    void (*swiglu_forward_a16)(uint16_t* h, const float* gate, const float* up, int N, int F);
    /* matmul_forward / matmul_backward with a bf16 input: exactly one of
     * weight (fp32, rounded as the bf16 table does) and weight16 (bf16, a
     * unit gathered in bf16) is not NULL. */
    void (*matmul_forward_a16)(float* out, const uint16_t* inp, const float* weight,
                               const uint16_t* weight16, int N, int IC, int OC);
    void (*matmul_backward_a16)(float* dinp, float* dweight, const float* dout,
                                const uint16_t* inp, const float* weight,
                                const uint16_t* weight16, int N, int IC, int OC, int accumulate);
    /* q, k, v in bf16 where attention runs on tensor cores
     * (zrt_attention_bf16_head_dim): out (B, T, NH, hd) = bf16(RoPE of x),
     * x (fp32) unchanged; attention_forward / attention_backward over such
     * q, k, v (only at those head dims), which they round as they load them
     * anyway: the same bits. */
    void (*rope_forward_a16)(uint16_t* out, const float* x, const float* cos_sin, int B, int T,
                             int NH, int hd);
    void (*attention_forward_a16)(float* out, float* lse, const uint16_t* q, const uint16_t* k,
                                  const uint16_t* v, int B, int T, int H, int KV, int hd,
                                  float* scratch);
    void (*attention_backward_a16)(float* dq, float* dk, float* dv, const float* dout,
                                   const float* out, const float* lse, const uint16_t* q,
                                   const uint16_t* k, const uint16_t* v, int B, int T, int H,
                                   int KV, int hd, float* scratch);
    /* ---- grouped GEMMs (the MoE experts; optional, NULL where a table has
     * none: the model then calls the a16 entries once per expert).
     * G groups of rows one after the other: group g is rows[g] rows (a
     * host array; 0 allowed) starting where group g-1's end, with its own
     * weight at weight (or weight16) + g * w_stride elements and, in the
     * backward, its own weight gradient at dweight + g * dw_stride. Each
     * group is matmul_forward_a16 / matmul_backward_a16 on its rows: the
     * same bits as those calls one group after the other, in one launch
     * (the CUDA table: cublasGemmGroupedBatchedEx, operand pointers made on
     * the device, no host wait). Groups must not share a weight gradient
     * (they would race). */
    void (*matmul_forward_grouped_a16)(float* out, const uint16_t* inp, const float* weight,
                                       const uint16_t* weight16, size_t w_stride, const int* rows,
                                       int G, int IC, int OC);
    void (*matmul_backward_grouped_a16)(float* dinp, float* dweight, size_t dw_stride,
                                        const float* dout, const uint16_t* inp, const float* weight,
                                        const uint16_t* weight16, size_t w_stride, const int* rows,
                                        int G, int IC, int OC, int accumulate);

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
     * out (B, T, H, hd); lse (B, H, T) receives each row's log-sum-exp of
     * the scaled scores, which with out is all the backward needs: no
     * (T, T) probabilities outlive a call (the CPU table is tiled,
     * FlashAttention-2 style; the fp32 CUDA table recomputes one call's
     * probabilities in its scratch; the bf16 CUDA table is FlashAttention-2
     * on tensor cores, P rounded to bf16, for head dims 64 and 128).
     * scratch: attention_scratch_floats(B, T, H, KV, hd) floats. */
    void (*attention_forward)(float* out, float* lse, const float* q, const float* k,
                              const float* v, int B, int T, int H, int KV, int hd, float* scratch);
    /* dq (B, T, H, hd), dk, dv (B, T, KV, hd) are overwritten; out and lse
     * are the forward's. */
    void (*attention_backward)(float* dq, float* dk, float* dv, const float* dout,
                               const float* out, const float* lse, const float* q, const float* k,
                               const float* v, int B, int T, int H, int KV, int hd,
                               float* scratch);
    size_t (*attention_scratch_floats)(int B, int T, int H, int KV, int hd);

    /* h (N, F) = silu(gate) * up */
    void (*swiglu_forward)(float* h, const float* gate, const float* up, int N, int F);
    /* dgate, dup (N, F) overwritten from dh */
    void (*swiglu_backward)(float* dgate, float* dup, const float* dh, const float* gate,
                            const float* up, int N, int F);

    /* out (N, C) = table[tokens[n]] */
    void (*embedding_forward)(float* out, const int* tokens, const float* table, int N, int C);
    /* out (N, C) = float(table[tokens[n]]) for a bf16 table */
    void (*embedding_forward_w16)(float* out, const int* tokens, const uint16_t* table, int N,
                                  int C);
    /* dtable[tokens[n]] += dout[n], summed in token order (deterministic) */
    void (*embedding_backward)(float* dtable, const float* dout, const int* tokens, int N, int C);

    /* Row-wise softmax cross-entropy over logits (N, V). targets < 0 are
     * ignored. losses (N) receives each row's loss (0 for ignored rows);
     * *loss_sum (one double of the device's memory) += their sum over the
     * counted rows, summed in row order in double first (nothing comes back
     * to the host: the caller counts the targets, which it has, and reads
     * the sums when it needs them). If dlogits is not NULL it receives
     * (softmax - onehot(target)) * dscale for counted rows and 0 for ignored
     * rows; dlogits may alias logits (in place). */
    void (*crossentropy_forward_backward)(float* dlogits, float* losses, const float* logits,
                                          const int* targets, int N, int V, float dscale,
                                          double* loss_sum);

    /* Small vector helpers, so models/ never touches backend memory itself:
     * out (n) = a + b (out may alias a or b); x (n) = 0. */
    void (*add)(float* out, const float* a, const float* b, size_t n);
    void (*zero)(float* x, size_t n);

    /* ---- mixture of experts (models/moe.c). A "pair" is (token n, slot j),
     * i = n * k + j; pos (N*k) is each pair's row in the expert-major order,
     * -1 for a pair the capacity limit dropped. */
    /* probs (N, E) = softmax(logits) per row (fp32); sel (N, k) the k most
     * probable experts, descending, ties to the lower index; w (N, k) their
     * probabilities, divided by their sum when norm_topk. */
    void (*moe_route)(float* probs, int* sel, float* w, const float* logits, int N, int E, int k,
                      int norm_topk);
    /* acc (E doubles, the device's memory): acc[e] += probs[n, e] for
     * every row n in order, in double (the load-balancing statistics;
     * models/moe.c reads them once per forward, not once per block). */
    void (*moe_prob_sum)(double* acc, const float* probs, int N, int E);
    /* xs (rows, C): xs[pos[i]] = x[i / k] for every kept pair. */
    void (*moe_gather)(float* xs, const float* x, const int* pos, int N, int k, int C);
    /* out (N, C) = sum over kept slots j, in order, of w[n, j] * ys[pos[n, j]]
     * (w NULL: weight 1, the sum the backward needs). */
    void (*moe_combine)(float* out, const float* ys, const float* w, const int* pos, int N, int k,
                        int C);
    /* The combine's backward: dw (N, k) = <dout[n], ys[pos]> (0 for a
     * dropped pair), dys[pos] = w[n, j] * dout[n]. */
    void (*moe_combine_backward)(float* dw, float* dys, const float* dout, const float* ys,
                                 const float* w, const int* pos, int N, int k, int C);
    /* dlogits (N, E): the router's softmax backward from dw (N, k) through
     * the top-k weights (renormalised or not), plus the load-balancing
     * term aux (E) on every row (models/moe.c has the formula). */
    void (*moe_router_backward)(float* dlogits, const float* probs, const int* sel, const float* w,
                                const float* dw, const float* aux, int N, int E, int k,
                                int norm_topk);

    /* Round fp32 -> bf16 (round to nearest, ties to even; NaN stays NaN). */
    void (*round_to_bf16)(uint16_t* out, const float* in, size_t n);
    void (*bf16_to_float)(float* out, const uint16_t* in, size_t n);
    /* x[i] = float(bf16(x[i])) in place: fp32 storage with bf16 values. */
    void (*round_bf16_inplace)(float* x, size_t n);
    /* acc (n) += float(in) for bf16 in: a bf16 reduce-scatter's output
     * added into an fp32 gradient shard. */
    void (*add_bf16)(float* acc, const uint16_t* in, size_t n);

    /* ---- the optimizer on the shards (runtime/optim.c drives them).
     * Each element in IEEE single precision, operations in the order
     * written (no fused multiply-add), so every backend gives the CPU's bits:
     *   m = b1 m + (1 - b1) g;  v = b2 v + ((1 - b2) g) g
     *   p = p - lr ((m / bc1) / (sqrt(v / bc2) + eps) + wd p) */
    void (*adamw)(float* p, const float* g, float* m, float* v, size_t n, const ZrtAdamWStep* s);
    /* out (1, a double in the device's memory) = sum of x^2 in double: fixed
     * ZRT_SUMSQ_BLOCK-element blocks, each summed in index order, the block
     * sums added in order. Nothing comes back to the host: the caller reads
     * many such sums in one copy (the gradient norm: one per step). */
    void (*sumsq)(double* out, const float* x, size_t n);
    /* x (n) *= factor */
    void (*scale)(float* x, size_t n, float factor);
    /* The step's optimizer in a few launches (one for all slices, however
     * many units and tensors), with the mean's scale and the clip folded in:
     * adamw_multi runs adamw on every slice, each with its own weight
     * decay, reading its gradient as (g * gscale) * clip, two roundings in
     * that order: the bits of scaling the gradient by gscale and then by
     * clip in memory, which it leaves as it is. sumsq_multi: out[k] (nx
     * doubles of the device's memory) = sumsq of (x[k] * gscale), element
     * by element, for every array k (n[k] elements), in sumsq's order.
     * slices, x and n are host arrays; a device keeps their copy and
     * uploads it again only when they change (a trainer's are the same
     * every step: no copy, no wait, after the first). */
    void (*adamw_multi)(const ZrtAdamWSlice* slices, int nslices, const ZrtAdamWStep* s,
                        float gscale, float clip);
    void (*sumsq_multi)(double* out, float* const* x, const size_t* n, int nx, float gscale);
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

/* The guarded CPU backend: the CPU kernels on zdev_cpu_guarded(), whose
 * memory the host cannot touch outside a device call; each kernel opens
 * the guard (zdev_guard_enter) for its run. Same kernels, same bits as the
 * host table it guards; thread-safe (the guard's lock serialises kernels
 * and ZipCCL's copies). */
const ZrtKernels* zrt_kernels_cpu_guarded(void);
/* The same guard over another host table (cpu or cpu_bf16); one base per
 * process. NULL when base is not on zdev_cpu(). */
const ZrtKernels* zrt_kernels_guarded(const ZrtKernels* base);

/* bf16 compute (model.compute: bf16): the linear layers (matmul_forward /
 * matmul_backward) multiply bf16 operands with fp32 accumulation and fp32
 * outputs; every other entry is the fp32 table's. The CPU twin rounds the
 * operands to bf16 and runs SGEMM (each product of bf16 values is exact in
 * fp32), the reference of the CUDA table's tensor-core GEMMs (cublasGemmEx,
 * bf16 in, fp32 compute). Attention's own products stay fp32. */
const ZrtKernels* zrt_kernels_cpu_bf16(void);

/* The CUDA tables on `dev` (a device from zdev_cuda; NULL: device 0), or
 * NULL when the build has no CUDA, dev is not a CUDA device or cuBLAS
 * cannot start on it (why: zrt_cuda_error()). One device per process: the
 * first call sets it up (cuBLAS on the device's compute stream), a later
 * call for another device fails. Kernels launch on dev->stream; a failed
 * launch inside a kernel entry is fatal (file, line and CUDA's message on
 * stderr, exit 1), as a failed kernel would leave the training state
 * undefined. The fp32 table is true fp32 (TF32 off, cuBLAS's reduced-
 * precision reductions disallowed: the CPU-matching mode). */
const ZrtKernels* zrt_kernels_cuda(ZDevice* dev);
const ZrtKernels* zrt_kernels_cuda_bf16(ZDevice* dev);
/* Why the last zrt_kernels_cuda failed ("" if it did not). */
const char* zrt_cuda_error(void);

/* The bf16 <-> fp32 helpers the backends must match bit for bit are
 * zipcclFloatToBf16 / zipcclBf16ToFloat (comm/zipccl_float.h, host and device). */
#endif
