/*
 * cpu.c — the CPU kernel backend: OpenBLAS SGEMM for every matrix product
 * (linear layers and the per-head attention products), OpenMP for the
 * element-wise and row-wise loops.
 *
 * Performance comes from the GEMMs: every FLOP-heavy operation is one
 * cblas_sgemm call, including attention, which runs tiled (FlashAttention-2:
 * QK^T and PV per (query block, key block) tile straight out of the
 * (B, T, H, hd) layout, no transposes, no tile above the diagonal, and only
 * the (B, H, T) log-sum-exp kept for the backward).
 *
 * Determinism: every loop either writes disjoint outputs per iteration or
 * reduces in a fixed order (the embedding backward splits channels, not
 * tokens, across threads; GQA sums the heads of a group in head order).
 *
 * The bf16 twin (zrt_kernels_cpu_bf16, model.compute: bf16) rounds the
 * linear layers' operands to bf16, and attention's operands and P and dS
 * where the CUDA bf16 table runs attention on tensor cores: the reference of
 * that table, whose sums are fp32 as here.
 *
 * Leaves out: fused kernels beyond attention's tiles, low-precision
 * arithmetic (the twin rounds operands, it never sums in bf16).
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "kernels.h"
#include "moe_route.h"

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

/* Tiled causal attention: the FlashAttention-2 algorithm with SGEMM tiles.
 *
 * Forward, per (batch, head, block of ATT_BR query rows): walk the key
 * blocks of ATT_BC columns up to the diagonal, S = scale Q_i K_j^T, keep a
 * running row max m and sum l (the online softmax: when the max grows, the
 * sum and the output rows so far are rescaled by exp(m_old - m_new)), and
 * O_i += exp(S - m) V_j; at the end O_i /= l and the log-sum-exp
 * lse = m + log l is all the backward keeps: (B, H, T) floats instead of
 * the (B, H, T, T) probabilities, and no key block above the diagonal is
 * computed.
 *
 * Backward, per (batch, kv head): for each query head of the group, query
 * block and key block up to the diagonal, recompute P = exp(S - lse), then
 *   dV_j += P^T dO_i,  dP = dO_i V_j^T,  dS = scale P (dP - D),
 *   dQ_i += dS K_j,    dK_j += dS^T Q_i,   D (rows) = rowsum(dO_i * O_i).
 * One thread owns a kv head's dK, dV and its heads' dQ, and walks heads,
 * query blocks and key blocks in a fixed order: the sums do not depend on
 * the thread count. The tiles are each thread's own (malloc'd in the
 * parallel region, a few hundred KiB), so the table's scratch is empty. */
enum { ATT_BR = 64, ATT_BC = 128 };

static size_t cpu_attention_scratch_floats(int B, int T, int H, int KV, int hd) {
    (void)B, (void)T, (void)H, (void)KV, (void)hd;
    return 0;
}

/* Keys s of the block starting at j0 (width bc) that query row t sees. */
static int att_visible(int t, int j0, int bc) {
    const int n = t - j0 + 1;
    return n < 0 ? 0 : n > bc ? bc : n;
}

static void* att_tile(size_t floats) {
    void* p = malloc(floats * sizeof(float));
    if (!p) {
        fprintf(stderr, "cpu attention: out of memory for a %zu-float tile\n", floats);
        exit(1);
    }
    return p;
}

static float bf16_round(float x) { return zipcclBf16ToFloat(zipcclFloatToBf16(x)); }

/* round_p: the bf16 twin's rounding of P (the l sums add the rounded P),
 * in key blocks of FA_BC = 64 as the CUDA flash kernel (P is rounded
 * against the running max, which moves at the block boundaries) */
enum { FA_BC = 64 };
static void attention_forward_tiles(float* out, float* lse, const float* q, const float* k,
                                    const float* v, int B, int T, int H, int KV, int hd,
                                    int round_p) {
    const int BC = round_p ? FA_BC : ATT_BC;
    blas_single_threaded(); // one sgemm per tile, inside the team
    const int rep = H / KV, nqb = (T + ATT_BR - 1) / ATT_BR;
    const float scale = 1.0f / sqrtf((float)hd);
    const int ldq = H * hd, ldkv = KV * hd;
#pragma omp parallel
    {
        float* S = att_tile((size_t)ATT_BR * ATT_BC + 2 * ATT_BR); // (BR, BC) | m | l
        float *m = S + (size_t)ATT_BR * ATT_BC, *l = m + ATT_BR;
#pragma omp for schedule(static)
        for (int task = 0; task < B * H * nqb; task++) {
            const int b = task / (H * nqb), h = task / nqb % H, g = h / rep;
            const int i0 = task % nqb * ATT_BR, br = T - i0 < ATT_BR ? T - i0 : ATT_BR;
            const float* qi = q + ((size_t)b * T + i0) * ldq + (size_t)h * hd; // (br, hd), ld H*hd
            const float* kb = k + (size_t)b * T * ldkv + (size_t)g * hd;      // (T, hd), ld KV*hd
            const float* vb = v + (size_t)b * T * ldkv + (size_t)g * hd;
            float* oi = out + ((size_t)b * T + i0) * ldq + (size_t)h * hd;    // (br, hd), ld H*hd
            for (int r = 0; r < br; r++) {
                m[r] = -INFINITY;
                l[r] = 0.0f;
                memset(oi + (size_t)r * ldq, 0, (size_t)hd * sizeof(float));
            }
            for (int j0 = 0; j0 < i0 + br; j0 += BC) {
                const int bc = i0 + br - j0 < BC ? i0 + br - j0 : BC;
                // S (br, bc) = scale Q_i K_j^T
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, br, bc, hd, scale, qi, ldq,
                            kb + (size_t)j0 * ldkv, ldkv, 0.0f, S, ATT_BC);
                for (int r = 0; r < br; r++) {
                    float* row = S + (size_t)r * ATT_BC;
                    const int n = att_visible(i0 + r, j0, bc);
                    float mx = m[r];
                    for (int s = 0; s < n; s++) mx = row[s] > mx ? row[s] : mx;
                    float sum = 0.0f;
                    for (int s = 0; s < n; s++) {
                        row[s] = expf(row[s] - mx);
                        if (round_p) row[s] = bf16_round(row[s]);
                        sum += row[s];
                    }
                    for (int s = n; s < bc; s++) row[s] = 0.0f;
                    if (n && mx != m[r]) { // the max grew: rescale what is summed so far
                        const float corr = expf(m[r] - mx); // 0 for the first block
                        float* o = oi + (size_t)r * ldq;
                        for (int c = 0; c < hd; c++) o[c] *= corr;
                        l[r] *= corr;
                        m[r] = mx;
                    }
                    l[r] += sum;
                }
                // O_i (br, hd) += P (br, bc) V_j (bc, hd)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, br, hd, bc, 1.0f, S,
                            ATT_BC, vb + (size_t)j0 * ldkv, ldkv, 1.0f, oi, ldq);
            }
            float* lrow = lse + ((size_t)b * H + h) * T + i0; // (br) of (B, H, T)
            for (int r = 0; r < br; r++) {
                const float inv = 1.0f / l[r];
                float* o = oi + (size_t)r * ldq;
                for (int c = 0; c < hd; c++) o[c] *= inv;
                lrow[r] = m[r] + logf(l[r]);
            }
        }
        free(S);
    }
}

static void cpu_attention_forward(float* out, float* lse, const float* q, const float* k,
                                  const float* v, int B, int T, int H, int KV, int hd,
                                  float* scratch) {
    (void)scratch;
    attention_forward_tiles(out, lse, q, k, v, B, T, H, KV, hd, 0);
}

/* dout the operand of the products, dout_d the one of D = rowsum(dO * O)
 * (the same but in the bf16 twin, where the products take dO rounded);
 * round: P and dS rounded to bf16 before the products that take them */
static void attention_backward_tiles(float* dq, float* dk, float* dv, const float* dout,
                                     const float* dout_d, const float* out, const float* lse,
                                     const float* q, const float* k, const float* v, int B,
                                     int T, int H, int KV, int hd, int round) {
    blas_single_threaded();
    const int rep = H / KV;
    const float scale = 1.0f / sqrtf((float)hd);
    const int ldq = H * hd, ldkv = KV * hd;
#pragma omp parallel
    {
        float* P = att_tile(2 * (size_t)ATT_BR * ATT_BC + ATT_BR); // P | dP (BR, BC) | D (BR)
        float *dP = P + (size_t)ATT_BR * ATT_BC, *D = dP + (size_t)ATT_BR * ATT_BC;
#pragma omp for schedule(static)
        for (int bg = 0; bg < B * KV; bg++) {
            const int b = bg / KV, g = bg % KV;
            const float* kb = k + (size_t)b * T * ldkv + (size_t)g * hd; // (T, hd), ld KV*hd
            const float* vb = v + (size_t)b * T * ldkv + (size_t)g * hd;
            float* dkb = dk + (size_t)b * T * ldkv + (size_t)g * hd;
            float* dvb = dv + (size_t)b * T * ldkv + (size_t)g * hd;
            for (int t = 0; t < T; t++) {
                memset(dkb + (size_t)t * ldkv, 0, (size_t)hd * sizeof(float));
                memset(dvb + (size_t)t * ldkv, 0, (size_t)hd * sizeof(float));
            }
            for (int r = 0; r < rep; r++) {
                const int h = g * rep + r;
                for (int i0 = 0; i0 < T; i0 += ATT_BR) {
                    const int br = T - i0 < ATT_BR ? T - i0 : ATT_BR;
                    const size_t row0 = ((size_t)b * T + i0) * ldq + (size_t)h * hd;
                    const float *qi = q + row0, *doi = dout + row0, *oi = out + row0,
                                *ddi = dout_d + row0;
                    const float* lrow = lse + ((size_t)b * H + h) * T + i0;
                    float* dqi = dq + row0; // (br, hd), ld H*hd
                    for (int x = 0; x < br; x++) {
                        float d = 0.0f;
                        for (int c = 0; c < hd; c++)
                            d += ddi[(size_t)x * ldq + c] * oi[(size_t)x * ldq + c];
                        D[x] = d;
                        memset(dqi + (size_t)x * ldq, 0, (size_t)hd * sizeof(float));
                    }
                    for (int j0 = 0; j0 < i0 + br; j0 += ATT_BC) {
                        const int bc = i0 + br - j0 < ATT_BC ? i0 + br - j0 : ATT_BC;
                        const float *kj = kb + (size_t)j0 * ldkv, *vj = vb + (size_t)j0 * ldkv;
                        // P (br, bc) = exp(scale Q_i K_j^T - lse), 0 where masked
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, br, bc, hd, scale, qi,
                                    ldq, kj, ldkv, 0.0f, P, ATT_BC);
                        for (int x = 0; x < br; x++) {
                            float* row = P + (size_t)x * ATT_BC;
                            const int n = att_visible(i0 + x, j0, bc);
                            for (int s = 0; s < n; s++) row[s] = expf(row[s] - lrow[x]);
                            for (int s = n; s < bc; s++) row[s] = 0.0f;
                        }
                        // dP (br, bc) = dO_i V_j^T, then dS = scale P (dP - D) in place
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, br, bc, hd, 1.0f, doi,
                                    ldq, vj, ldkv, 0.0f, dP, ATT_BC);
                        for (int x = 0; x < br; x++) {
                            float* pr = P + (size_t)x * ATT_BC;
                            float* dr = dP + (size_t)x * ATT_BC;
                            for (int s = 0; s < bc; s++) dr[s] = scale * pr[s] * (dr[s] - D[x]);
                            if (round)
                                for (int s = 0; s < bc; s++)
                                    dr[s] = bf16_round(dr[s]), pr[s] = bf16_round(pr[s]);
                        }
                        // dV_j (bc, hd) += P^T dO_i
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bc, hd, br, 1.0f, P,
                                    ATT_BC, doi, ldq, 1.0f, dvb + (size_t)j0 * ldkv, ldkv);
                        // dQ_i (br, hd) += dS K_j ; dK_j (bc, hd) += dS^T Q_i
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, br, hd, bc, 1.0f,
                                    dP, ATT_BC, kj, ldkv, 1.0f, dqi, ldq);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bc, hd, br, 1.0f, dP,
                                    ATT_BC, qi, ldq, 1.0f, dkb + (size_t)j0 * ldkv, ldkv);
                    }
                }
            }
        }
        free(P);
    }
}

static void cpu_attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                   const float* out, const float* lse, const float* q,
                                   const float* k, const float* v, int B, int T, int H, int KV,
                                   int hd, float* scratch) {
    (void)scratch;
    attention_backward_tiles(dq, dk, dv, dout, dout, out, lse, q, k, v, B, T, H, KV, hd, 0);
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

static void cpu_embedding_forward_w16(float* out, const int* tokens, const uint16_t* table,
                                      int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const uint16_t* row = table + (size_t)tokens[n] * C;
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = zipcclBf16ToFloat(row[c]);
    }
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

static void cpu_crossentropy_forward_backward(float* dlogits, float* losses,
                                              const float* logits, const int* targets, int N,
                                              int V, float dscale, double* loss_sum) {
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
    for (int n = 0; n < N; n++)
        if (targets[n] >= 0) total += losses[n];
    *loss_sum += total;
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

static void cpu_add_bf16(float* acc, const uint16_t* in, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) acc[i] += zipcclBf16ToFloat(in[i]);
}

/* ------------------------------------------------------------- optimizer */

/* adamw on one slice, its gradient read as (g * gscale) * clip (1, 1: g) */
static void adamw_slice(float* p, const float* g, float* m, float* v, size_t n,
                        const ZrtAdamWStep* s, float wd, float gscale, float clip) {
    const float b1 = s->beta1, b2 = s->beta2, c1 = s->one_minus_beta1, c2 = s->one_minus_beta2;
    const float bc1 = s->bc1, bc2 = s->bc2, eps = s->eps, lr = s->lr;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        const float gi = g[i] * gscale * clip; /* exact when both are 1 */
        const float mi = b1 * m[i] + c1 * gi;
        const float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float mhat = mi / bc1, vhat = vi / bc2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    }
}

static void cpu_adamw(float* p, const float* g, float* m, float* v, size_t n,
                      const ZrtAdamWStep* s) {
    adamw_slice(p, g, m, v, n, s, s->weight_decay, 1.0f, 1.0f);
}

static void cpu_adamw_multi(const ZrtAdamWSlice* sl, int ns, const ZrtAdamWStep* s, float gscale,
                            float clip) {
    for (int k = 0; k < ns; k++)
        adamw_slice(sl[k].p, sl[k].g, sl[k].m, sl[k].v, sl[k].n, s, sl[k].weight_decay, gscale, clip);
}

/* sumsq of x * gscale (1: of x) */
/* One block's sum of squares (n <= ZRT_SUMSQ_BLOCK), in element order. */
static double block_sumsq(const float* x, size_t n, float gscale) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double xi = x[i] * gscale;
        sum += xi * xi;
    }
    return sum;
}

static double sumsq_scaled(const float* x, size_t n, float gscale) {
    const size_t nblocks = (n + ZRT_SUMSQ_BLOCK - 1) / ZRT_SUMSQ_BLOCK;
    double total = 0.0;
    enum { PART = 1024 }; /* block sums computed in parallel this many at a time */
    double part[PART];
    for (size_t b0 = 0; b0 < nblocks; b0 += PART) {
        const size_t nb = nblocks - b0 < PART ? nblocks - b0 : PART;
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < nb; j++) {
            const size_t a = (b0 + j) * ZRT_SUMSQ_BLOCK;
            part[j] = block_sumsq(x + a, (a + ZRT_SUMSQ_BLOCK < n ? ZRT_SUMSQ_BLOCK : n - a), gscale);
        }
        for (size_t j = 0; j < nb; j++) total += part[j];
    }
    return total;
}

static void cpu_sumsq(double* out, const float* x, size_t n) { *out = sumsq_scaled(x, n, 1.0f); }

/* Parts of one block or less (the rank-invariant norm's: tens of thousands
 * a step) in one parallel loop; a larger part parallel over its blocks. A
 * one-block part's sum is sumsq_scaled's (0 + the block's sum), bit for bit. */
static void cpu_sumsq_multi(double* out, float* const* x, const size_t* n, int nx, float gscale) {
#pragma omp parallel for schedule(static)
    for (int k = 0; k < nx; k++)
        if (n[k] <= ZRT_SUMSQ_BLOCK) out[k] = block_sumsq(x[k], n[k], gscale);
    for (int k = 0; k < nx; k++)
        if (n[k] > ZRT_SUMSQ_BLOCK) out[k] = sumsq_scaled(x[k], n[k], gscale);
}

static void cpu_scale(float* x, size_t n, float factor) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= factor;
}

/* ---- bf16 operands. The bf16 compute tables (model.compute: bf16) multiply
 * bf16-rounded operands and sum in fp32: what a tensor-core GEMM with bf16
 * inputs and fp32 accumulation computes (each product of two bf16 values is
 * exact in fp32), so the CPU is the reference of the CUDA bf16 table. A
 * bf16 weight (the _w16 entries: a unit gathered in bf16) is widened, which
 * is exact. The rounded or widened copies live in per-thread buffers (slot
 * 0: the input or output gradient, 1: the weight, 2: the input of dweight;
 * attention: q, k, v, dO in 0..3) that grow. */
static float* operand_buffer(int slot, size_t n) {
    static _Thread_local float* buf[4];
    static _Thread_local size_t cap[4];
    if (n > cap[slot]) {
        free(buf[slot]);
        buf[slot] = malloc(n * sizeof(float));
        cap[slot] = buf[slot] ? n : 0;
        if (!buf[slot]) {
            fprintf(stderr, "zrt cpu kernels: out of memory for a bf16 operand (%zu floats)\n", n);
            abort();
        }
    }
    return buf[slot];
}

static float* bf16_copy(int slot, const float* x, size_t n) {
    float* b = operand_buffer(slot, n); /* the team's threads share this one */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) b[i] = zipcclBf16ToFloat(zipcclFloatToBf16(x[i]));
    return b;
}

static float* widened_copy(int slot, const uint16_t* x, size_t n) {
    float* b = operand_buffer(slot, n);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) b[i] = zipcclBf16ToFloat(x[i]);
    return b;
}

/* Attention at the head dims where the CUDA bf16 table runs it on tensor
 * cores (zrt_attention_bf16_head_dim): the same tiles on q, k, v and dO
 * rounded to bf16, P rounded before P V and P^T dO, dS before dS K and
 * dS^T Q (the flash kernels' roundings; D takes the fp32 dO as theirs
 * does), fp32 sums. Other head dims: the fp32 attention, as the CUDA table. */
static void cpu_attention_forward_bf16(float* out, float* lse, const float* q, const float* k,
                                       const float* v, int B, int T, int H, int KV, int hd,
                                       float* scratch) {
    (void)scratch;
    if (!zrt_attention_bf16_head_dim(hd)) {
        attention_forward_tiles(out, lse, q, k, v, B, T, H, KV, hd, 0);
        return;
    }
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd;
    const float *q16 = bf16_copy(0, q, nq), *k16 = bf16_copy(1, k, nkv), *v16 = bf16_copy(2, v, nkv);
    attention_forward_tiles(out, lse, q16, k16, v16, B, T, H, KV, hd, 1);
}

static void cpu_attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout,
                                        const float* out, const float* lse, const float* q,
                                        const float* k, const float* v, int B, int T, int H,
                                        int KV, int hd, float* scratch) {
    (void)scratch;
    if (!zrt_attention_bf16_head_dim(hd)) {
        attention_backward_tiles(dq, dk, dv, dout, dout, out, lse, q, k, v, B, T, H, KV, hd, 0);
        return;
    }
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd;
    const float *q16 = bf16_copy(0, q, nq), *k16 = bf16_copy(1, k, nkv), *v16 = bf16_copy(2, v, nkv),
                *d16 = bf16_copy(3, dout, nq);
    attention_backward_tiles(dq, dk, dv, d16, dout, out, lse, q16, k16, v16, B, T, H, KV, hd, 1);
}

static void cpu_matmul_forward_bf16(float* out, const float* inp, const float* weight, int N,
                                    int IC, int OC) {
    const float* a = bf16_copy(0, inp, (size_t)N * IC);
    const float* w = bf16_copy(1, weight, (size_t)OC * IC);
    cpu_matmul_forward(out, a, w, N, IC, OC);
}

/* The bf16 backward given its weight operand w (rounded or widened by the
 * caller; NULL without dinp): dout and inp rounded to bf16, fp32 sums. */
static void matmul_backward_bf16_operands(float* dinp, float* dweight, const float* dout,
                                          const float* inp, const float* w, int N, int IC,
                                          int OC, int accumulate) {
    const float* g = bf16_copy(0, dout, (size_t)N * OC);
    const float* a = dweight ? bf16_copy(2, inp, (size_t)N * IC) : NULL;
    cpu_matmul_backward(dinp, dweight, g, a, w, N, IC, OC, accumulate);
}

static void cpu_matmul_backward_bf16(float* dinp, float* dweight, const float* dout,
                                     const float* inp, const float* weight, int N, int IC, int OC,
                                     int accumulate) {
    const float* w = dinp ? bf16_copy(1, weight, (size_t)OC * IC) : NULL;
    matmul_backward_bf16_operands(dinp, dweight, dout, inp, w, N, IC, OC, accumulate);
}

/* bf16 weights: the fp32 table widens the weight and multiplies in fp32;
 * the bf16 table rounds the other operands as above (its weight is bf16
 * already: rounding it again would change nothing). */
static void cpu_matmul_forward_w16(float* out, const float* inp, const uint16_t* weight, int N,
                                   int IC, int OC) {
    cpu_matmul_forward(out, inp, widened_copy(1, weight, (size_t)OC * IC), N, IC, OC);
}

static void cpu_matmul_backward_w16(float* dinp, float* dweight, const float* dout,
                                    const float* inp, const uint16_t* weight, int N, int IC,
                                    int OC, int accumulate) {
    const float* w = dinp ? widened_copy(1, weight, (size_t)OC * IC) : NULL;
    cpu_matmul_backward(dinp, dweight, dout, inp, w, N, IC, OC, accumulate);
}

static void cpu_matmul_forward_bf16_w16(float* out, const float* inp, const uint16_t* weight,
                                        int N, int IC, int OC) {
    const float* a = bf16_copy(0, inp, (size_t)N * IC);
    cpu_matmul_forward(out, a, widened_copy(1, weight, (size_t)OC * IC), N, IC, OC);
}

static void cpu_matmul_backward_bf16_w16(float* dinp, float* dweight, const float* dout,
                                         const float* inp, const uint16_t* weight, int N, int IC,
                                         int OC, int accumulate) {
    const float* w = dinp ? widened_copy(1, weight, (size_t)OC * IC) : NULL;
    matmul_backward_bf16_operands(dinp, dweight, dout, inp, w, N, IC, OC, accumulate);
}

/* bf16 activations (kernels.h): the fp32 kernel, then one rounding; a bf16
 * input widens exactly, so each GEMM below sees the operands the fp32-input
 * entries above would have rounded it to. */
static void round_into(uint16_t* out, const float* x, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = zipcclFloatToBf16(x[i]);
}

static void cpu_rmsnorm_forward_a16(uint16_t* out, float* rstd, const float* inp,
                                    const float* weight, int N, int C, float eps) {
    float* y = operand_buffer(0, (size_t)N * C);
    cpu_rmsnorm_forward(y, rstd, inp, weight, N, C, eps);
    round_into(out, y, (size_t)N * C);
}

static void cpu_swiglu_forward_a16(uint16_t* h, const float* gate, const float* up, int N,
                                   int F) {
    float* y = operand_buffer(0, (size_t)N * F);
    cpu_swiglu_forward(y, gate, up, N, F);
    round_into(h, y, (size_t)N * F);
}

static void cpu_rope_forward_a16(uint16_t* out, const float* x, const float* cs, int B, int T, int NH,
                                 int hd) {
    const size_t n = (size_t)B * T * NH * hd;
    float* y = operand_buffer(0, n);
    memcpy(y, x, n * sizeof(float));
    cpu_rope_forward(y, cs, B, T, NH, hd);
    round_into(out, y, n);
}

/* q, k, v in bf16: widened (exact), the bf16 twin's tiles as above */
static void cpu_attention_forward_a16(float* out, float* lse, const uint16_t* q, const uint16_t* k,
                                      const uint16_t* v, int B, int T, int H, int KV, int hd,
                                      float* scratch) {
    (void)scratch;
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd;
    const float *qw = widened_copy(0, q, nq), *kw = widened_copy(1, k, nkv), *vw = widened_copy(2, v, nkv);
    attention_forward_tiles(out, lse, qw, kw, vw, B, T, H, KV, hd, 1);
}

static void cpu_attention_backward_a16(float* dq, float* dk, float* dv, const float* dout,
                                       const float* out, const float* lse, const uint16_t* q,
                                       const uint16_t* k, const uint16_t* v, int B, int T, int H,
                                       int KV, int hd, float* scratch) {
    (void)scratch;
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd;
    const float *qw = widened_copy(0, q, nq), *kw = widened_copy(1, k, nkv), *vw = widened_copy(2, v, nkv),
                *d16 = bf16_copy(3, dout, nq);
    attention_backward_tiles(dq, dk, dv, d16, dout, out, lse, qw, kw, vw, B, T, H, KV, hd, 1);
}

/* the weight operand: fp32 rounded, or bf16 widened */
static const float* weight_operand(const float* weight, const uint16_t* weight16, size_t n) {
    return weight ? bf16_copy(1, weight, n) : widened_copy(1, weight16, n);
}

static void cpu_matmul_forward_a16(float* out, const uint16_t* inp, const float* weight,
                                   const uint16_t* weight16, int N, int IC, int OC) {
    const float* a = widened_copy(0, inp, (size_t)N * IC);
    cpu_matmul_forward(out, a, weight_operand(weight, weight16, (size_t)OC * IC), N, IC, OC);
}

static void cpu_matmul_backward_a16(float* dinp, float* dweight, const float* dout,
                                    const uint16_t* inp, const float* weight,
                                    const uint16_t* weight16, int N, int IC, int OC,
                                    int accumulate) {
    const float* w = dinp ? weight_operand(weight, weight16, (size_t)OC * IC) : NULL;
    const float* g = bf16_copy(0, dout, (size_t)N * OC);
    const float* a = dweight ? widened_copy(2, inp, (size_t)N * IC) : NULL;
    cpu_matmul_backward(dinp, dweight, g, a, w, N, IC, OC, accumulate);
}

/* The grouped entries (kernels.h): each group's rows through the a16
 * entries above, one group after the other (the reference of the CUDA
 * table's one-launch grouped GEMM). */
static void cpu_matmul_forward_grouped_a16(float* out, const uint16_t* inp, const float* weight,
                                           const uint16_t* weight16, size_t w_stride, const int* rows,
                                           int G, int IC, int OC) {
    for (int g = 0, o = 0; g < G; o += rows[g], g++) {
        const size_t w = (size_t)g * w_stride;
        if (rows[g])
            cpu_matmul_forward_a16(out + (size_t)o * OC, inp + (size_t)o * IC, weight ? weight + w : NULL,
                                   weight16 ? weight16 + w : NULL, rows[g], IC, OC);
    }
}

static void cpu_matmul_backward_grouped_a16(float* dinp, float* dweight, size_t dw_stride,
                                            const float* dout, const uint16_t* inp, const float* weight,
                                            const uint16_t* weight16, size_t w_stride, const int* rows,
                                            int G, int IC, int OC, int accumulate) {
    for (int g = 0, o = 0; g < G; o += rows[g], g++) {
        const size_t w = (size_t)g * w_stride;
        if (rows[g])
            cpu_matmul_backward_a16(dinp ? dinp + (size_t)o * IC : NULL,
                                    dweight ? dweight + (size_t)g * dw_stride : NULL, dout + (size_t)o * OC,
                                    inp + (size_t)o * IC, weight ? weight + w : NULL,
                                    weight16 ? weight16 + w : NULL, rows[g], IC, OC, accumulate);
    }
}

/* ------------------------------------------------------ mixture of experts */

static void cpu_moe_route(float* probs, int* sel_all, float* w_all, const float* logits, int N,
                          int E, int k, int norm_topk) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        moe_route_row(probs + (size_t)n * E, sel_all + (size_t)n * k, w_all + (size_t)n * k,
                      logits + (size_t)n * E, E, k, norm_topk);
}

static void cpu_moe_prob_sum(double* acc, const float* probs, int N, int E) {
    for (size_t n = 0; n < (size_t)N; n++)
        for (size_t e = 0; e < (size_t)E; e++) acc[e] += probs[n * E + e];
}

static void cpu_moe_gather(float* xs, const float* x, const int* pos, int N, int k, int C) {
    for (size_t i = 0; i < (size_t)N * k; i++)
        if (pos[i] >= 0) memcpy(xs + (size_t)pos[i] * C, x + i / k * C, (size_t)C * sizeof(float));
}

static void cpu_moe_combine(float* out, const float* ys, const float* w, const int* pos, int N,
                            int k, int C) {
#pragma omp parallel for schedule(static)
    for (size_t n = 0; n < (size_t)N; n++) {
        float* o = out + n * C;
        memset(o, 0, (size_t)C * sizeof(float));
        for (size_t j = 0; j < (size_t)k; j++) {
            if (pos[n * k + j] < 0) continue; // dropped: no expert output
            const float* y = ys + (size_t)pos[n * k + j] * C;
            if (w) {
                const float wj = w[n * k + j];
                for (size_t c = 0; c < (size_t)C; c++) o[c] += wj * y[c];
            } else {
                for (size_t c = 0; c < (size_t)C; c++) o[c] += y[c];
            }
        }
    }
}

static void cpu_moe_combine_backward(float* dw, float* dys, const float* dout, const float* ys,
                                     const float* w, const int* pos, int N, int k, int C) {
#pragma omp parallel for schedule(static)
    for (size_t n = 0; n < (size_t)N; n++) {
        const float* g = dout + n * C;
        for (size_t j = 0; j < (size_t)k; j++) {
            if (pos[n * k + j] < 0) { // dropped: the weight had no output to scale
                dw[n * k + j] = 0.0f;
                continue;
            }
            const size_t r = (size_t)pos[n * k + j];
            const float *y = ys + r * C, wj = w[n * k + j];
            float* dy = dys + r * C;
            float dot = 0.0f;
            for (size_t c = 0; c < (size_t)C; c++) {
                dot += g[c] * y[c];
                dy[c] = wj * g[c];
            }
            dw[n * k + j] = dot;
        }
    }
}

static void cpu_moe_router_backward(float* dlogits, const float* probs, const int* sel_all,
                                    const float* w_all, const float* dw_all, const float* aux,
                                    int N, int E, int k, int norm_topk) {
#pragma omp parallel for schedule(static)
    for (size_t n = 0; n < (size_t)N; n++) {
        const float* pr = probs + n * E;
        const int* sel = sel_all + n * k;
        const float *w = w_all + n * k, *dw = dw_all + n * k;
        float* dl = dlogits + n * E;
        for (size_t e = 0; e < (size_t)E; e++) dl[e] = aux[e];
        if (norm_topk) {
            float s = 0.0f, dot = 0.0f;
            for (size_t j = 0; j < (size_t)k; j++) {
                s += pr[sel[j]];
                dot += dw[j] * w[j];
            }
            for (size_t j = 0; j < (size_t)k; j++) dl[sel[j]] += (dw[j] - dot) / s;
        } else {
            for (size_t j = 0; j < (size_t)k; j++) dl[sel[j]] += dw[j];
        }
        float dp = 0.0f;
        for (size_t e = 0; e < (size_t)E; e++) dp += dl[e] * pr[e];
        for (size_t e = 0; e < (size_t)E; e++) dl[e] = pr[e] * (dl[e] - dp);
    }
}

/* ---------------------------------------------------------------- table */

/* On zdev_cpu(), set at first use (the device is another file's static). */
static ZrtKernels cpu_kernels = {
    .name = "cpu",
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .matmul_forward_w16 = cpu_matmul_forward_w16,
    .matmul_backward_w16 = cpu_matmul_backward_w16,
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
    .embedding_forward_w16 = cpu_embedding_forward_w16,
    .embedding_backward = cpu_embedding_backward,
    .crossentropy_forward_backward = cpu_crossentropy_forward_backward,
    .add = cpu_add,
    .zero = cpu_zero,
    .moe_route = cpu_moe_route,
    .moe_prob_sum = cpu_moe_prob_sum,
    .moe_gather = cpu_moe_gather,
    .moe_combine = cpu_moe_combine,
    .moe_combine_backward = cpu_moe_combine_backward,
    .moe_router_backward = cpu_moe_router_backward,
    .round_to_bf16 = cpu_round_to_bf16,
    .bf16_to_float = cpu_bf16_to_float,
    .round_bf16_inplace = cpu_round_bf16_inplace,
    .add_bf16 = cpu_add_bf16,
    .adamw = cpu_adamw,
    .sumsq = cpu_sumsq,
    .adamw_multi = cpu_adamw_multi,
    .sumsq_multi = cpu_sumsq_multi,
    .scale = cpu_scale,
};

static void cpu_init(void) { cpu_kernels.dev = zdev_cpu(); }

const ZrtKernels* zrt_kernels_cpu(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, cpu_init);
    return &cpu_kernels;
}

static ZrtKernels cpu_bf16_kernels;
static void cpu_bf16_init(void) {
    cpu_bf16_kernels = *zrt_kernels_cpu();
    cpu_bf16_kernels.name = "cpu_bf16";
    cpu_bf16_kernels.matmul_forward = cpu_matmul_forward_bf16;
    cpu_bf16_kernels.matmul_backward = cpu_matmul_backward_bf16;
    cpu_bf16_kernels.matmul_forward_w16 = cpu_matmul_forward_bf16_w16;
    cpu_bf16_kernels.matmul_backward_w16 = cpu_matmul_backward_bf16_w16;
    cpu_bf16_kernels.attention_forward = cpu_attention_forward_bf16;
    cpu_bf16_kernels.attention_backward = cpu_attention_backward_bf16;
    cpu_bf16_kernels.rmsnorm_forward_a16 = cpu_rmsnorm_forward_a16;
    cpu_bf16_kernels.swiglu_forward_a16 = cpu_swiglu_forward_a16;
    cpu_bf16_kernels.matmul_forward_a16 = cpu_matmul_forward_a16;
    cpu_bf16_kernels.matmul_backward_a16 = cpu_matmul_backward_a16;
    cpu_bf16_kernels.rope_forward_a16 = cpu_rope_forward_a16;
    cpu_bf16_kernels.attention_forward_a16 = cpu_attention_forward_a16;
    cpu_bf16_kernels.attention_backward_a16 = cpu_attention_backward_a16;
    cpu_bf16_kernels.matmul_forward_grouped_a16 = cpu_matmul_forward_grouped_a16;
    cpu_bf16_kernels.matmul_backward_grouped_a16 = cpu_matmul_backward_grouped_a16;
}

const ZrtKernels* zrt_kernels_cpu_bf16(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, cpu_bf16_init);
    return &cpu_bf16_kernels;
}

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
