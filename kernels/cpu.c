/*
 * cpu.c — the CPU kernel backend: OpenBLAS SGEMM for every matrix product
 * (linear layers and the per-head attention products), OpenMP for the
 * element-wise and row-wise loops.
 *
 * Performance comes from the GEMMs: every FLOP-heavy operation is one
 * cblas_sgemm call, including attention, where each (batch, kv-head) group
 * runs QK^T and PV as strided GEMMs straight out of the (B, T, H, hd) layout
 * (no transposes, no copies). The causal mask is applied after a full T x T
 * product, so attention spends 2x the causal minimum; at the sequence
 * lengths this trainer runs on CPU that is a few percent of a step.
 *
 * Determinism: every loop either writes disjoint outputs per iteration or
 * reduces in a fixed order (the embedding backward splits channels, not
 * tokens, across threads; GQA sums the heads of a group in head order).
 *
 * Leaves out: fused kernels, causal-block skipping, low-precision compute.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "kernels.h"

/* ---------------------------------------------------------------- matmul */

/* Threading. The backend has ONE thread team, OpenMP's (OMP_NUM_THREADS);
 * OpenBLAS always runs single-threaded inside it. Letting OpenBLAS's own
 * pthread pool run next to the OpenMP team measured 1.5-2.5x the CPU time per
 * step on these 2-core machines: the two pools spin against each other, and
 * concurrent sgemm calls from an OpenMP region queue on OpenBLAS's server
 * lock (27% of cycles in exec_blas_async). It would also make the bits
 * depend on the thread count: OpenBLAS picks kernels and partitions by its
 * thread count. */
static void blas_set_single_thread(void) { openblas_set_num_threads(1); }
static pthread_once_t blas_threads_once = PTHREAD_ONCE_INIT;
static void blas_single_threaded(void) { pthread_once(&blas_threads_once, blas_set_single_thread); }

/* C (M, N) = alpha op(A) (M, K) op(B) (K, N) + beta C, row-major, computed
 * as row blocks, one single-threaded cblas_sgemm per block, the blocks shared
 * out over the OpenMP team.
 *
 * Why the blocks depend on M alone, never on the thread count: an element's
 * bits depend on the call that computes it, not only on its summation over
 * K. OpenBLAS chooses among kernels by the call's shape (0.3.21's AVX-512
 * "small matrix" kernels take N = 8, 16, 32 below a size limit) and orders a
 * row's sum by the row's place in a kernel's row unroll, so a slice of a
 * product need not give the bits of the whole product: a 120 x 32 x 64
 * product cut at row 96 did not with the SkylakeX and Cooperlake kernels,
 * and cuts at multiples of 16 did not with Haswell's. Cut by M alone, every
 * element comes from the same call at 1, 2 or 16 threads: the result cannot
 * depend on the thread count, whatever kernels the CPU gets.
 *
 * The price: each block packs op(B) again, which costs a one-thread step a
 * share that falls with the block's height (docs/MODEL.md, "Threads", has
 * the measurement behind kGemmRows), and threads idle in GEMMs whose M has
 * fewer blocks than the team has threads. */
enum { kGemmRows = 512, kGemmRowAlign = 16 };
static void gemm_row_blocks(int transA, int transB, int M, int N, int K, float alpha,
                            const float* A, int lda, const float* B, int ldb, float beta, float* C,
                            int ldc) {
    const CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
    blas_single_threaded();
    // equal blocks (the last one shorter), kGemmRowAlign rows apart
    const int nblocks = (M + kGemmRows - 1) / kGemmRows;
    const int per = nblocks ? ((M + nblocks - 1) / nblocks + kGemmRowAlign - 1) / kGemmRowAlign *
                                  kGemmRowAlign
                            : 0;
#pragma omp parallel for schedule(dynamic, 1) if (nblocks > 1 && !omp_in_parallel())
    for (int bi = 0; bi < nblocks; bi++) {
        const int m0 = bi * per, m = m0 + per <= M ? per : M - m0;
        if (m <= 0) continue;
        // row m0 of op(A): a row of A, or a column of A when transposed
        const float* a = A + (transA ? (size_t)m0 : (size_t)m0 * lda);
        cblas_sgemm(CblasRowMajor, ta, tb, m, N, K, alpha, a, lda, B, ldb, beta,
                    C + (size_t)m0 * ldc, ldc);
    }
}

static void cpu_matmul_forward(float* out, const float* inp, const float* weight, int N, int IC,
                               int OC) {
    // out (N, OC) = inp (N, IC) @ weight (OC, IC)^T
    gemm_row_blocks(0, 1, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);
}

static void cpu_matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                const float* weight, int N, int IC, int OC, int accumulate) {
    if (dinp) // dinp (N, IC) = dout (N, OC) @ weight (OC, IC)
        gemm_row_blocks(0, 0, N, IC, OC, 1.0f, dout, OC, weight, IC, accumulate ? 1.0f : 0.0f,
                        dinp, IC);
    if (dweight) // dweight (OC, IC) += dout^T (OC, N) @ inp (N, IC)
        gemm_row_blocks(1, 0, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
}

/* --------------------------------------------------------------- rmsnorm */

static void cpu_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight,
                                int N, int C, float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float* y = out + (size_t)n * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
        for (int c = 0; c < C; c++) y[c] = x[c] * r * weight[c];
        rstd[n] = r;
    }
}

static void cpu_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                 const float* weight, const float* rstd, int N, int C) {
    // y = w * x * r with r = (mean(x^2) + eps)^(-1/2):
    // dx_j = r * w_j dy_j - x_j * r^3 / C * sum_i(w_i dy_i x_i);  dw_i += dy_i x_i r
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        const float* dy = dout + (size_t)n * C;
        float* dx = dinp + (size_t)n * C;
        float r = rstd[n], dot = 0.0f;
        for (int c = 0; c < C; c++) dot += weight[c] * dy[c] * x[c];
        float k = dot * r * r * r / (float)C;
        for (int c = 0; c < C; c++) dx[c] += r * weight[c] * dy[c] - x[c] * k;
    }
    // dweight: a column reduction over rows. Threads split channels in
    // cache-line chunks of 16, and each channel is summed in row order, so
    // the result does not depend on the thread count.
    enum { CHUNK = 16 };
    const int nchunks = (C + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < nchunks; ch++) {
        const int c0 = ch * CHUNK, nc = c0 + CHUNK < C ? CHUNK : C - c0;
        float acc[CHUNK] = {0};
        for (int n = 0; n < N; n++) {
            const float* dy = dout + (size_t)n * C + c0;
            const float* x = inp + (size_t)n * C + c0;
            for (int j = 0; j < nc; j++) acc[j] += dy[j] * x[j] * rstd[n];
        }
        for (int j = 0; j < nc; j++) dweight[c0 + j] += acc[j];
    }
}

/* ------------------------------------------------------------------ RoPE */

static void cpu_rope_table(float* cos_sin, int T, int hd, float theta) {
    // double precision here so the table is exact to fp32 rounding
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hd / 2; i++) {
            double freq = pow((double)theta, -2.0 * i / (double)hd);
            double a = (double)t * freq;
            cos_sin[((size_t)t * (hd / 2) + i) * 2 + 0] = (float)cos(a);
            cos_sin[((size_t)t * (hd / 2) + i) * 2 + 1] = (float)sin(a);
        }
}

static void rope_rotate(float* x, const float* cos_sin, int B, int T, int NH, int hd, float sign) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float* cs = cos_sin + (size_t)t * hd;
            for (int h = 0; h < NH; h++) {
                float* v = x + (((size_t)b * T + t) * NH + h) * hd;
                for (int i = 0; i < hd / 2; i++) {
                    float c = cs[2 * i], s = sign * cs[2 * i + 1];
                    float x0 = v[2 * i], x1 = v[2 * i + 1];
                    v[2 * i] = x0 * c - x1 * s;
                    v[2 * i + 1] = x0 * s + x1 * c;
                }
            }
        }
}

static void cpu_rope_forward(float* x, const float* cos_sin, int B, int T, int NH, int hd) {
    rope_rotate(x, cos_sin, B, T, NH, hd, 1.0f);
}

static void cpu_rope_backward(float* dx, const float* cos_sin, int B, int T, int NH, int hd) {
    // a rotation's transpose is the rotation by the opposite angle
    rope_rotate(dx, cos_sin, B, T, NH, hd, -1.0f);
}

/* ------------------------------------------------------------- attention */

static size_t cpu_attention_scratch_floats(int B, int T, int KV) {
    return (size_t)B * KV * T * T; // one (T, T) dP/dS tile per (batch, kv head)
}

static void cpu_attention_forward(float* out, float* att, const float* q, const float* k,
                                  const float* v, int B, int T, int H, int KV, int hd,
                                  float* scratch) {
    (void)scratch;
    blas_single_threaded(); // one sgemm per (batch, head), inside the team
    const int rep = H / KV;
    const float scale = 1.0f / sqrtf((float)hd);
    const int ldq = H * hd, ldkv = KV * hd;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * H; bh++) {
        const int b = bh / H, h = bh % H, g = h / rep;
        const float* qh = q + (size_t)b * T * ldq + (size_t)h * hd;    // (T, hd), ld H*hd
        const float* kg = k + (size_t)b * T * ldkv + (size_t)g * hd;   // (T, hd), ld KV*hd
        const float* vg = v + (size_t)b * T * ldkv + (size_t)g * hd;   // (T, hd), ld KV*hd
        float* p = att + (size_t)bh * T * T;                           // (T, T)
        float* oh = out + (size_t)b * T * ldq + (size_t)h * hd;        // (T, hd), ld H*hd
        // S = scale * Q K^T, full square; the mask is applied in the softmax
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, qh, ldq, kg, ldkv,
                    0.0f, p, T);
        for (int t = 0; t < T; t++) {
            float* row = p + (size_t)t * T;
            float mx = -INFINITY;
            for (int s = 0; s <= t; s++) mx = row[s] > mx ? row[s] : mx;
            float sum = 0.0f;
            for (int s = 0; s <= t; s++) {
                row[s] = expf(row[s] - mx);
                sum += row[s];
            }
            float inv = 1.0f / sum;
            for (int s = 0; s <= t; s++) row[s] *= inv;
            for (int s = t + 1; s < T; s++) row[s] = 0.0f;
        }
        // O = P V
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, p, T, vg, ldkv,
                    0.0f, oh, ldq);
    }
}

static void cpu_attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                   const float* att, const float* q, const float* k,
                                   const float* v, int B, int T, int H, int KV, int hd,
                                   float* scratch) {
    blas_single_threaded();
    const int rep = H / KV;
    const float scale = 1.0f / sqrtf((float)hd);
    const int ldq = H * hd, ldkv = KV * hd;
    // one iteration per (batch, kv head): the heads sharing a kv head add
    // their dK, dV contributions in head order, inside one thread
#pragma omp parallel for schedule(static)
    for (int bg = 0; bg < B * KV; bg++) {
        const int b = bg / KV, g = bg % KV;
        const float* kg = k + (size_t)b * T * ldkv + (size_t)g * hd;
        const float* vg = v + (size_t)b * T * ldkv + (size_t)g * hd;
        float* dkg = dk + (size_t)b * T * ldkv + (size_t)g * hd;
        float* dvg = dv + (size_t)b * T * ldkv + (size_t)g * hd;
        float* ds = scratch + (size_t)bg * T * T; // (T, T): dP, then dS in place
        for (int r = 0; r < rep; r++) {
            const int h = g * rep + r;
            const float beta = r == 0 ? 0.0f : 1.0f;
            const float* p = att + ((size_t)b * H + h) * T * T;
            const float* qh = q + (size_t)b * T * ldq + (size_t)h * hd;
            const float* doh = dout + (size_t)b * T * ldq + (size_t)h * hd;
            float* dqh = dq + (size_t)b * T * ldq + (size_t)h * hd;
            // dV += P^T dO
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, p, T, doh, ldq,
                        beta, dvg, ldkv);
            // dP = dO V^T
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, doh, ldq, vg,
                        ldkv, 0.0f, ds, T);
            // dS = scale * P * (dP - rowsum(P * dP)); zero above the diagonal
            for (int t = 0; t < T; t++) {
                const float* pr = p + (size_t)t * T;
                float* dr = ds + (size_t)t * T;
                float dot = 0.0f;
                for (int s = 0; s <= t; s++) dot += pr[s] * dr[s];
                for (int s = 0; s <= t; s++) dr[s] = scale * pr[s] * (dr[s] - dot);
                for (int s = t + 1; s < T; s++) dr[s] = 0.0f;
            }
            // dQ = dS K ; dK += dS^T Q
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, ds, T, kg, ldkv,
                        0.0f, dqh, ldq);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, ds, T, qh, ldq,
                        beta, dkg, ldkv);
        }
    }
}

/* ---------------------------------------------------------------- SwiGLU */

static void cpu_swiglu_forward(float* h, const float* gate, const float* up, int N, int F) {
    const size_t n = (size_t)N * F;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        h[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static void cpu_swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate,
                                const float* up, int N, int F) {
    // silu(g) = g s, s = sigmoid(g); silu'(g) = s (1 + g (1 - s))
    const size_t n = (size_t)N * F;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = gate[i], s = 1.0f / (1.0f + expf(-g));
        float d = dh[i];
        dgate[i] = d * up[i] * s * (1.0f + g * (1.0f - s));
        dup[i] = d * g * s;
    }
}

/* ------------------------------------------------------------- embedding */

static void cpu_embedding_forward(float* out, const int* tokens, const float* table, int N,
                                  int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, table + (size_t)tokens[n] * C, (size_t)C * sizeof(float));
}

static void cpu_embedding_backward(float* dtable, const float* dout, const int* tokens, int N,
                                   int C) {
    // repeated tokens hit the same row: split channels across threads and
    // walk tokens in order, so the sum order is fixed
    enum { CHUNK = 64 };
    const int nchunks = (C + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static)
    for (int ch = 0; ch < nchunks; ch++) {
        const int c0 = ch * CHUNK, c1 = c0 + CHUNK < C ? c0 + CHUNK : C;
        for (int n = 0; n < N; n++) {
            float* d = dtable + (size_t)tokens[n] * C;
            const float* g = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) d[c] += g[c];
        }
    }
}

/* ------------------------------------------------- softmax cross-entropy */

static double cpu_crossentropy_forward_backward(float* dlogits, float* losses,
                                                const float* logits, const int* targets, int N,
                                                int V, float dscale, int* count) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* l = logits + (size_t)n * V;
        float mx = -INFINITY;
        for (int i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
        const int tgt = targets[n];
        const float lt = tgt >= 0 ? l[tgt] : 0.0f; // read before an in-place overwrite
        float sum = 0.0f;
        if (dlogits) {
            // one exp per element: keep exp(l - max) in d, normalize after
            float* d = dlogits + (size_t)n * V; // may alias l: each l[i] is read before d[i]
            for (int i = 0; i < V; i++) {
                d[i] = expf(l[i] - mx);
                sum += d[i];
            }
            const float k = tgt >= 0 ? dscale / sum : 0.0f;
            for (int i = 0; i < V; i++) d[i] *= k;
            if (tgt >= 0) d[tgt] -= dscale;
        } else {
            for (int i = 0; i < V; i++) sum += expf(l[i] - mx);
        }
        losses[n] = tgt >= 0 ? logf(sum) + mx - lt : 0.0f;
    }
    // summed in row order here, not with reduction(+), so the result does
    // not depend on the thread count
    double total = 0.0;
    int counted = 0;
    for (int n = 0; n < N; n++)
        if (targets[n] >= 0) {
            total += losses[n];
            counted++;
        }
    *count = counted;
    return total;
}

/* --------------------------------------------------------------- vectors */

static void cpu_add(float* out, const float* a, const float* b, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void cpu_zero(float* x, size_t n) { memset(x, 0, n * sizeof(float)); }

/* ----------------------------------------------------------------- bf16 */

static void cpu_round_to_bf16(uint16_t* out, const float* in, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = zipcclFloatToBf16(in[i]);
}

static void cpu_bf16_to_float(float* out, const uint16_t* in, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = zipcclBf16ToFloat(in[i]);
}

static void cpu_round_bf16_inplace(float* x, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] = zipcclBf16ToFloat(zipcclFloatToBf16(x[i]));
}

/* ---------------------------------------------------------------- table */

static const ZrtKernels cpu_kernels = {
    .name = "cpu",
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rope_table = cpu_rope_table,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .attention_scratch_floats = cpu_attention_scratch_floats,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .crossentropy_forward_backward = cpu_crossentropy_forward_backward,
    .add = cpu_add,
    .zero = cpu_zero,
    .round_to_bf16 = cpu_round_to_bf16,
    .bf16_to_float = cpu_bf16_to_float,
    .round_bf16_inplace = cpu_round_bf16_inplace,
};

const ZrtKernels* zrt_kernels_cpu(void) { return &cpu_kernels; }

const char* zrt_blas_select_core(char** argv) {
    const char* core = openblas_get_corename();
    int changed = 0;
    if (!getenv("OPENBLAS_CORETYPE") && core && !strcasecmp(core, "prescott")) {
        const char* want = NULL;
#if defined(__x86_64__)
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512bf16")) want = "Cooperlake";
        else if (__builtin_cpu_supports("avx512f")) want = "SkylakeX";
        else if (__builtin_cpu_supports("avx2")) want = "Haswell";
#endif
        if (want && !setenv("OPENBLAS_CORETYPE", want, 1)) changed = 1;
    }
    if (!getenv("OMP_WAIT_POLICY") && !setenv("OMP_WAIT_POLICY", "passive", 1)) changed = 1;
    if (!changed || !argv) return core;
    execv("/proc/self/exe", argv); // returns only on failure: run as we are
    return core;
}

/* Builds without CUDA (NO_CUDA=1, the sanitizer build) have no CUDA table;
 * with CUDA, kernels/cuda.cu defines this. */
#ifndef ZIPCCL_HAVE_CUDA
const ZrtKernels* zrt_kernels_cuda(void) { return NULL; }
#endif
