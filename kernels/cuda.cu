/*
 * cuda.cu — the CUDA kernel backend: the same table as kernels/cpu.c, with
 * cuBLAS SGEMM for every matrix product and simple one-purpose kernels for
 * the rest. Every pointer is a device pointer; everything runs on the
 * default stream of the calling thread's current device.
 *
 * Status: compiled here (no GPU on the build machines), not yet run. The
 * model (models/llama.c) still drives the CPU table and memcpy's logits, so
 * nothing in the runtime calls this table yet; it is the seam a GPU trainer
 * plugs into, written to the same conventions:
 *   - row-major fp32; cuBLAS is column-major, so a row-major C = A B is
 *     computed as the column-major C^T = B^T A^T (operands swapped);
 *   - parameter gradients accumulate (beta = 1);
 *   - reductions in a fixed order (no atomics): RMSNorm/embedding weight
 *     gradients use one thread per channel walking rows in order, GQA sums a
 *     group's heads in head order, the loss is summed on the host in row order.
 *
 * Leaves out: fused kernels, flash-style attention, tensor-core math (cuBLAS
 * runs in CUBLAS_DEFAULT_MATH, true fp32), streams and events.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "kernels.h"
}

namespace {

cublasHandle_t handle() {
    static cublasHandle_t h = nullptr;
    if (!h && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "zrt cuda kernels: cublasCreate failed\n");
        h = nullptr;
    }
    return h;
}

inline int blocks_for(size_t n, int threads) { return (int)((n + threads - 1) / threads); }

/* Row-major C (M, N) = alpha op(A) (M, K) op(B) (K, N) + beta C, via the
 * column-major identity C^T = op(B)^T op(A)^T. */
void gemm_rm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
             const float* B, int ldb, float beta, float* C, int ldc) {
    cublasSgemm(handle(), transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc);
}

/* strided-batched version of gemm_rm: `batch` products, operand i at
 * pointer + i * stride */
void gemm_rm_batched(bool transA, bool transB, int M, int N, int K, float alpha, const float* A,
                     int lda, long long sA, const float* B, int ldb, long long sB, float beta,
                     float* C, int ldc, long long sC, int batch) {
    cublasSgemmStridedBatched(handle(), transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                              transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, sB, A,
                              lda, sA, &beta, C, ldc, sC, batch);
}

/* ------------------------------------------------------------- kernels */

__device__ float block_sum(float v, float* shared) { // blockDim.x a multiple of 32, <= 1024
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); // shared may still be read by a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    const int nw = blockDim.x >> 5;
    v = lane < nw ? shared[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ float block_max(float v, float* shared) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    const int nw = blockDim.x >> 5;
    v = lane < nw ? shared[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__global__ void k_rmsnorm_fwd(float* out, float* rstd, const float* inp, const float* w, int C,
                              float eps) {
    __shared__ float sh[32];
    const float* x = inp + (size_t)blockIdx.x * C;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
    ss = block_sum(ss, sh);
    const float r = rsqrtf(ss / (float)C + eps);
    float* y = out + (size_t)blockIdx.x * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) y[c] = x[c] * r * w[c];
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
}

__global__ void k_rmsnorm_bwd_x(float* dinp, const float* dout, const float* inp, const float* w,
                                const float* rstd, int C) {
    __shared__ float sh[32];
    const size_t row = (size_t)blockIdx.x * C;
    const float r = rstd[blockIdx.x];
    float dot = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dot += w[c] * dout[row + c] * inp[row + c];
    dot = block_sum(dot, sh);
    const float k = dot * r * r * r / (float)C;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        dinp[row + c] += r * w[c] * dout[row + c] - inp[row + c] * k;
}

__global__ void k_rmsnorm_bwd_w(float* dw, const float* dout, const float* inp, const float* rstd,
                                int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int n = 0; n < N; n++) acc += dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * rstd[n];
    dw[c] += acc;
}

__global__ void k_rope(float* x, const float* cs, int B, int T, int NH, int hd, float sign) {
    const size_t half = hd / 2, total = (size_t)B * T * NH * half;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const size_t p = i % half, t = (i / (half * NH)) % T;
    float* v = x + (i / half) * hd + 2 * p;
    const float c = cs[(t * half + p) * 2], s = sign * cs[(t * half + p) * 2 + 1];
    const float x0 = v[0], x1 = v[1];
    v[0] = x0 * c - x1 * s;
    v[1] = x0 * s + x1 * c;
}

/* one block per (b, h, t) row: causal softmax in place over s <= t */
__global__ void k_causal_softmax(float* att, int T) {
    __shared__ float sh[32];
    const int t = blockIdx.x % T;
    float* row = att + (size_t)blockIdx.x * T;
    float mx = -INFINITY;
    for (int s = threadIdx.x; s <= t; s += blockDim.x) mx = fmaxf(mx, row[s]);
    mx = block_max(mx, sh);
    float sum = 0.0f;
    for (int s = threadIdx.x; s <= t; s += blockDim.x) {
        float e = expf(row[s] - mx);
        row[s] = e;
        sum += e;
    }
    sum = block_sum(sum, sh);
    const float inv = 1.0f / sum;
    for (int s = threadIdx.x; s < T; s += blockDim.x) row[s] = s <= t ? row[s] * inv : 0.0f;
}

/* dS = scale * P * (dP - rowsum(P * dP)), zero above the diagonal */
__global__ void k_softmax_bwd(float* ds, const float* p, int T, float scale) {
    __shared__ float sh[32];
    const int t = blockIdx.x % T;
    const size_t off = (size_t)blockIdx.x * T;
    float dot = 0.0f;
    for (int s = threadIdx.x; s <= t; s += blockDim.x) dot += p[off + s] * ds[off + s];
    dot = block_sum(dot, sh);
    for (int s = threadIdx.x; s < T; s += blockDim.x)
        ds[off + s] = s <= t ? scale * p[off + s] * (ds[off + s] - dot) : 0.0f;
}

__global__ void k_swiglu_fwd(float* h, const float* g, const float* u, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

__global__ void k_swiglu_bwd(float* dg, float* du, const float* dh, const float* g, const float* u,
                             size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float s = 1.0f / (1.0f + expf(-g[i]));
    dg[i] = dh[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
    du[i] = dh[i] * g[i] * s;
}

__global__ void k_embedding_fwd(float* out, const int* tokens, const float* table, int N, int C) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    const size_t n = i / C, c = i % C;
    out[i] = table[(size_t)tokens[n] * C + c];
}

/* one thread per channel, tokens in order: deterministic, no atomics */
__global__ void k_embedding_bwd(float* dtable, const float* dout, const int* tokens, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int n = 0; n < N; n++) dtable[(size_t)tokens[n] * C + c] += dout[(size_t)n * C + c];
}

__global__ void k_crossentropy(float* dlogits, float* losses, const float* logits,
                               const int* targets, int V, float dscale) {
    __shared__ float sh[32];
    const size_t row = (size_t)blockIdx.x * V;
    const int tgt = targets[blockIdx.x];
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, logits[row + i]);
    mx = block_max(mx, sh);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(logits[row + i] - mx);
    sum = block_sum(sum, sh);
    const float lt = tgt >= 0 ? logits[row + tgt] : 0.0f;
    __syncthreads(); // every thread has read logits[tgt] before any in-place write
    if (threadIdx.x == 0) losses[blockIdx.x] = tgt >= 0 ? logf(sum) + mx - lt : 0.0f;
    if (!dlogits) return;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        const float p = expf(logits[row + i] - mx) / sum;
        dlogits[row + i] = tgt >= 0 ? (p - (i == tgt ? 1.0f : 0.0f)) * dscale : 0.0f;
    }
}

__global__ void k_add(float* out, const float* a, const float* b, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

__global__ void k_to_bf16(uint16_t* out, const float* in, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = zipcclFloatToBf16(in[i]);
}

__global__ void k_from_bf16(float* out, const uint16_t* in, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = zipcclBf16ToFloat(in[i]);
}

__global__ void k_round_bf16(float* x, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = zipcclBf16ToFloat(zipcclFloatToBf16(x[i]));
}

/* ------------------------------------------------------- table entries */

void cu_matmul_forward(float* out, const float* inp, const float* weight, int N, int IC, int OC) {
    gemm_rm(false, true, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);
}

void cu_matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                        const float* weight, int N, int IC, int OC, int accumulate) {
    if (dinp)
        gemm_rm(false, false, N, IC, OC, 1.0f, dout, OC, weight, IC, accumulate ? 1.0f : 0.0f,
                dinp, IC);
    if (dweight) gemm_rm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
}

void cu_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N,
                        int C, float eps) {
    k_rmsnorm_fwd<<<N, 256>>>(out, rstd, inp, weight, C, eps);
}

void cu_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                         const float* weight, const float* rstd, int N, int C) {
    k_rmsnorm_bwd_x<<<N, 256>>>(dinp, dout, inp, weight, rstd, C);
    k_rmsnorm_bwd_w<<<blocks_for(C, 256), 256>>>(dweight, dout, inp, rstd, N, C);
}

void cu_rope_table(float* cos_sin, int T, int hd, float theta) {
    // tiny: computed on the host in double, like the CPU table, then copied
    const size_t n = (size_t)T * hd;
    float* h = (float*)malloc(n * sizeof(float));
    if (!h) return;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hd / 2; i++) {
            const double a = (double)t * pow((double)theta, -2.0 * i / (double)hd);
            h[((size_t)t * (hd / 2) + i) * 2] = (float)cos(a);
            h[((size_t)t * (hd / 2) + i) * 2 + 1] = (float)sin(a);
        }
    cudaMemcpy(cos_sin, h, n * sizeof(float), cudaMemcpyHostToDevice);
    free(h);
}

void cu_rope_forward(float* x, const float* cs, int B, int T, int NH, int hd) {
    const size_t n = (size_t)B * T * NH * (hd / 2);
    k_rope<<<blocks_for(n, 256), 256>>>(x, cs, B, T, NH, hd, 1.0f);
}

void cu_rope_backward(float* dx, const float* cs, int B, int T, int NH, int hd) {
    const size_t n = (size_t)B * T * NH * (hd / 2);
    k_rope<<<blocks_for(n, 256), 256>>>(dx, cs, B, T, NH, hd, -1.0f);
}

size_t cu_attention_scratch_floats(int B, int T, int KV) { return (size_t)B * KV * T * T; }

void cu_attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                          int B, int T, int H, int KV, int hd, float* scratch) {
    (void)scratch;
    const int rep = H / KV, ldq = H * hd, ldkv = KV * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    // per (batch, kv head): the rep query heads are a strided batch (stride
    // hd in q, 0 in k and v: they share the kv head)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < KV; g++) {
            const float* qg = q + (size_t)b * T * ldq + (size_t)g * rep * hd;
            const float* kg = k + (size_t)b * T * ldkv + (size_t)g * hd;
            float* pg = att + ((size_t)b * H + (size_t)g * rep) * T * T;
            gemm_rm_batched(false, true, T, T, hd, scale, qg, ldq, hd, kg, ldkv, 0, 0.0f, pg, T,
                            (long long)T * T, rep);
        }
    k_causal_softmax<<<B * H * T, 128>>>(att, T);
    for (int b = 0; b < B; b++)
        for (int g = 0; g < KV; g++) {
            const float* vg = v + (size_t)b * T * ldkv + (size_t)g * hd;
            const float* pg = att + ((size_t)b * H + (size_t)g * rep) * T * T;
            float* og = out + (size_t)b * T * ldq + (size_t)g * rep * hd;
            gemm_rm_batched(false, false, T, hd, T, 1.0f, pg, T, (long long)T * T, vg, ldkv, 0,
                            0.0f, og, ldq, hd, rep);
        }
}

void cu_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* att,
                           const float* q, const float* k, const float* v, int B, int T, int H,
                           int KV, int hd, float* scratch) {
    const int rep = H / KV, ldq = H * hd, ldkv = KV * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int b = 0; b < B; b++)
        for (int g = 0; g < KV; g++) {
            const size_t bq = (size_t)b * T * ldq, bkv = (size_t)b * T * ldkv + (size_t)g * hd;
            float* ds = scratch + ((size_t)b * KV + g) * T * T;
            for (int r = 0; r < rep; r++) { // head order: a fixed sum order for dK, dV
                const int h = g * rep + r;
                const float beta = r == 0 ? 0.0f : 1.0f;
                const float* p = att + ((size_t)b * H + h) * T * T;
                const float* doh = dout + bq + (size_t)h * hd;
                gemm_rm(true, false, T, hd, T, 1.0f, p, T, doh, ldq, beta, dv + bkv, ldkv);
                gemm_rm(false, true, T, T, hd, 1.0f, doh, ldq, v + bkv, ldkv, 0.0f, ds, T);
                k_softmax_bwd<<<T, 128>>>(ds, p, T, scale);
                gemm_rm(false, false, T, hd, T, 1.0f, ds, T, k + bkv, ldkv, 0.0f,
                        dq + bq + (size_t)h * hd, ldq);
                gemm_rm(true, false, T, hd, T, 1.0f, ds, T, q + bq + (size_t)h * hd, ldq, beta,
                        dk + bkv, ldkv);
            }
        }
}

void cu_swiglu_forward(float* h, const float* gate, const float* up, int N, int F) {
    const size_t n = (size_t)N * F;
    k_swiglu_fwd<<<blocks_for(n, 256), 256>>>(h, gate, up, n);
}

void cu_swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate,
                        const float* up, int N, int F) {
    const size_t n = (size_t)N * F;
    k_swiglu_bwd<<<blocks_for(n, 256), 256>>>(dgate, dup, dh, gate, up, n);
}

void cu_embedding_forward(float* out, const int* tokens, const float* table, int N, int C) {
    k_embedding_fwd<<<blocks_for((size_t)N * C, 256), 256>>>(out, tokens, table, N, C);
}

void cu_embedding_backward(float* dtable, const float* dout, const int* tokens, int N, int C) {
    k_embedding_bwd<<<blocks_for(C, 128), 128>>>(dtable, dout, tokens, N, C);
}

double cu_crossentropy_forward_backward(float* dlogits, float* losses, const float* logits,
                                        const int* targets, int N, int V, float dscale,
                                        int* count) {
    k_crossentropy<<<N, 256>>>(dlogits, losses, logits, targets, V, dscale);
    // the sum in row order on the host, like the CPU backend
    float* hl = (float*)malloc((size_t)N * sizeof(float));
    int* ht = (int*)malloc((size_t)N * sizeof(int));
    double total = 0.0;
    int counted = 0;
    if (hl && ht && cudaMemcpy(hl, losses, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost) ==
                        cudaSuccess &&
        cudaMemcpy(ht, targets, (size_t)N * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess) {
        for (int n = 0; n < N; n++)
            if (ht[n] >= 0) {
                total += hl[n];
                counted++;
            }
    } else {
        total = NAN;
    }
    free(hl);
    free(ht);
    *count = counted;
    return total;
}

void cu_add(float* out, const float* a, const float* b, size_t n) {
    k_add<<<blocks_for(n, 256), 256>>>(out, a, b, n);
}

void cu_zero(float* x, size_t n) { cudaMemset(x, 0, n * sizeof(float)); }

void cu_round_to_bf16(uint16_t* out, const float* in, size_t n) {
    k_to_bf16<<<blocks_for(n, 256), 256>>>(out, in, n);
}

void cu_bf16_to_float(float* out, const uint16_t* in, size_t n) {
    k_from_bf16<<<blocks_for(n, 256), 256>>>(out, in, n);
}

void cu_round_bf16_inplace(float* x, size_t n) {
    k_round_bf16<<<blocks_for(n, 256), 256>>>(x, n);
}

ZrtKernels make_table() {
    ZrtKernels t;
    t.name = "cuda";
    t.matmul_forward = cu_matmul_forward;
    t.matmul_backward = cu_matmul_backward;
    t.rmsnorm_forward = cu_rmsnorm_forward;
    t.rmsnorm_backward = cu_rmsnorm_backward;
    t.rope_table = cu_rope_table;
    t.rope_forward = cu_rope_forward;
    t.rope_backward = cu_rope_backward;
    t.attention_forward = cu_attention_forward;
    t.attention_backward = cu_attention_backward;
    t.attention_scratch_floats = cu_attention_scratch_floats;
    t.swiglu_forward = cu_swiglu_forward;
    t.swiglu_backward = cu_swiglu_backward;
    t.embedding_forward = cu_embedding_forward;
    t.embedding_backward = cu_embedding_backward;
    t.crossentropy_forward_backward = cu_crossentropy_forward_backward;
    t.add = cu_add;
    t.zero = cu_zero;
    t.round_to_bf16 = cu_round_to_bf16;
    t.bf16_to_float = cu_bf16_to_float;
    t.round_bf16_inplace = cu_round_bf16_inplace;
    return t;
}

const ZrtKernels cuda_table = make_table();

} // namespace

/* NULL when no device is visible, so a caller can fall back to the CPU. */
extern "C" const ZrtKernels* zrt_kernels_cuda(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return NULL;
    return handle() ? &cuda_table : NULL;
}
