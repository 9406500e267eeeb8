/*
 * cuda.cu — the CUDA kernel backend: the same table as kernels/cpu.c, with
 * cuBLAS SGEMM for every matrix product and simple one-purpose kernels for
 * the rest. Every pointer is a device pointer of the table's device
 * (device/device.h, zdev_cuda), and everything runs on that device's compute
 * stream (launches and cuBLAS alike), never on the legacy default stream.
 *
 * The trainer runs the model on this table with runtime.device: cuda
 * (runtime/train.c); tests/test_model.c --cuda checks every entry against
 * the CPU table on a GPU (scripts/test_gpu.sh). Conventions:
 *   - row-major fp32; cuBLAS is column-major, so a row-major C = A B is
 *     computed as the column-major C^T = B^T A^T (operands swapped);
 *   - parameter gradients accumulate (beta = 1);
 *   - reductions in a fixed order (no atomics): the RMSNorm weight gradient
 *     sums rows in fixed chunks, the embedding's sums each token's rows in
 *     row order after a sort by (token, row) (the CPU's additions), GQA sums a
 *     group's heads in head order, the loss is summed on the device in row
 *     order (one thread, in double) and only the sum comes back.
 *
 * Every CUDA call and launch is checked; a failure is fatal (zk_fail: file,
 * line, CUDA's message, exit 1), since the training state after a failed
 * kernel is undefined and the trainer has no way to go on.
 *
 * Two tables: fp32 (cuBLAS in CUBLAS_DEFAULT_MATH with reduced-precision
 * reductions disallowed: true fp32, TF32 off, the CPU-matching mode) and
 * bf16 compute (zrt_kernels_cuda_bf16: the linear layers through
 * cublasGemmEx with bf16 operands converted on the fly and fp32
 * accumulation, on tensor cores; a weight that is bf16 already, a unit
 * FSDP gathered in bf16 (the _w16 entries), goes in as it is; attention
 * (head dims 64 and 128) cuDNN's fused SDPA where cuDNN loads
 * (attention_cudnn.h; "the attention engine" below) or a FlashAttention-2
 * kernel of our own on tensor cores (WMMA; "flash attention" below), the
 * MoE experts' GEMMs as grouped GEMMs
 * (cublasGemmGroupedBatchedEx, "grouped GEMMs" below); everything else the
 * fp32 table's).
 * ZRT_CUDA_PROFILE=1 prints the device time of every entry at exit.
 *
 * Leaves out: fused kernels beyond the bf16 table's attention; tiled
 * attention in fp32: the fp32 table's call holds its (B, H, T, T)
 * probabilities in the scratch, and the backward recomputes them instead of
 * keeping them per layer (products in fp32, the CPU-matching mode); bf16
 * storage of activations beyond the a16 entries' (kernels.h: the norms' and
 * SwiGLU's outputs that only GEMMs read, q, k, v for the flash kernels),
 * streams of its own (it runs on its device's compute stream;
 * ZipCCL's streams order against it by events).
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <array>
#include <map>
#include <type_traits>
#include <vector>

extern "C" {
#include "kernels.h"
}
#include "attention_cudnn.h"
#include "moe_route.h"

namespace {

char g_err[1024];
ZDevice* g_dev = nullptr;        // the device the tables run on, set by the first zrt_kernels_cuda
cudaStream_t g_stream = nullptr; // its compute stream: every launch and cuBLAS call
cublasHandle_t g_handle = nullptr;

[[noreturn]] void zk_fail(const char* what, const char* why, const char* file, int line) {
    fprintf(stderr, "zrt cuda kernels: %s failed at %s:%d: %s\n", what, file, line, why);
    fflush(stderr);
    exit(1);
}
#define CK(call)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) zk_fail(#call, cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)
#define CKB(call)                                                                        \
    do {                                                                                 \
        cublasStatus_t s_ = (call);                                                      \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                 \
            zk_fail(#call, cublasGetStatusString(s_), __FILE__, __LINE__);               \
    } while (0)
/* after every <<<...>>>: a bad launch configuration shows here */
#define CKL(name) CK((cudaGetLastError()))
/* a device call (device/device.h) that cannot fail in a sane run */
#define CKD(call)                                                              \
    do {                                                                       \
        if ((call) != 0) zk_fail(#call, zdev_error(), __FILE__, __LINE__);     \
    } while (0)

/* The kernels' scratch: device memory from the table's device, grown when
 * a call needs more and kept for the process, so a steady step allocates
 * nothing. */
void* scratch_grow(void* p, size_t* cap, size_t bytes) {
    if (bytes <= *cap) return p;
    zdev_free(g_dev, p);
    p = zdev_alloc(g_dev, bytes);
    if (!p) zk_fail("scratch_grow", zdev_error(), __FILE__, __LINE__);
    *cap = bytes;
    return p;
}

cublasHandle_t handle() { return g_handle; }

inline int blocks_for(size_t n, int threads) { return (int)((n + threads - 1) / threads); }

/* Row-major C (M, N) = alpha op(A) (M, K) op(B) (K, N) + beta C, via the
 * column-major identity C^T = op(B)^T op(A)^T. */
void gemm_rm(bool transA, bool transB, int M, int N, int K, float alpha, const float* A, int lda,
             const float* B, int ldb, float beta, float* C, int ldc) {
    CKB(cublasSgemm(handle(), transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                    N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
}

/* strided-batched version of gemm_rm: `batch` products, operand i at
 * pointer + i * stride */
void gemm_rm_batched(bool transA, bool transB, int M, int N, int K, float alpha, const float* A,
                     int lda, long long sA, const float* B, int ldb, long long sB, float beta,
                     float* C, int ldc, long long sC, int batch) {
    CKB(cublasSgemmStridedBatched(handle(), transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, sB,
                                  A, lda, sA, &beta, C, ldc, sC, batch));
}

/* bf16 compute: row-major C (M, N) = alpha op(A) op(B) + beta C with A and B
 * already bf16, fp32 accumulation and output (tensor cores) */
void gemm_rm_bf16(bool transA, bool transB, int M, int N, int K, float alpha,
                  const __nv_bfloat16* A, int lda, const __nv_bfloat16* B, int ldb, float beta,
                  float* C, int ldc) {
    CKB(cublasGemmEx(handle(), transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                     N, M, K, &alpha, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda, &beta, C, CUDA_R_32F,
                     ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
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

/* An activation as it is stored: fp32, or bf16 (the bf16 tables' a16
 * entries, kernels.h: the fp32 value rounded once). */
__device__ __forceinline__ void put_act(float* p, float v) { *p = v; }
__device__ __forceinline__ void put_act(uint16_t* p, float v) { *p = zipcclFloatToBf16(v); }

template <typename T>
__global__ void k_rmsnorm_fwd(T* out, float* rstd, const float* inp, const float* w, int C,
                              float eps) {
    __shared__ float sh[32];
    const float* x = inp + (size_t)blockIdx.x * C;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
    ss = block_sum(ss, sh);
    const float r = rsqrtf(ss / (float)C + eps);
    T* y = out + (size_t)blockIdx.x * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) put_act(y + c, x[c] * r * w[c]);
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

/* The weight gradient in two deterministic passes: partial sums over fixed
 * chunks of RN_ROWS rows (one thread per column and chunk), then the chunks
 * summed in order (one thread per column). The chunking depends on N alone. */
constexpr int RN_ROWS = 128;
__global__ void k_rmsnorm_bwd_w_part(float* part, const float* dout, const float* inp,
                                     const float* rstd, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int n0 = blockIdx.y * RN_ROWS, n1 = min(N, n0 + RN_ROWS);
    float acc = 0.0f;
    for (int n = n0; n < n1; n++) acc += dout[(size_t)n * C + c] * inp[(size_t)n * C + c] * rstd[n];
    part[(size_t)blockIdx.y * C + c] = acc;
}
__global__ void k_rmsnorm_bwd_w_sum(float* dw, const float* part, int chunks, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int i = 0; i < chunks; i++) acc += part[(size_t)i * C + c];
    dw[c] += acc;
}

/* out = x rotated (in place when out == x; bf16 out: the a16 entry) */
template <typename T>
__global__ void k_rope(T* out, const float* x, const float* cs, int B, int T_, int NH, int hd, float sign) {
    const size_t half = hd / 2, total = (size_t)B * T_ * NH * half;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const size_t p = i % half, t = (i / (half * NH)) % T_;
    const float* v = x + (i / half) * hd + 2 * p;
    T* o = out + (i / half) * hd + 2 * p;
    const float c = cs[(t * half + p) * 2], s = sign * cs[(t * half + p) * 2 + 1];
    const float x0 = v[0], x1 = v[1];
    put_act(o, x0 * c - x1 * s);
    put_act(o + 1, x0 * s + x1 * c);
}

/* one block per (b, h, t) row: causal softmax in place over s <= t; lse
 * (one per row, may be NULL) gets max + log(sum) */
__global__ void k_causal_softmax(float* att, float* lse, int T) {
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
    if (lse && threadIdx.x == 0) lse[blockIdx.x] = mx + logf(sum);
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

template <typename T>
__global__ void k_swiglu_fwd(T* h, const float* g, const float* u, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) put_act(h + i, g[i] / (1.0f + expf(-g[i])) * u[i]);
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

__global__ void k_embedding_fwd_w16(float* out, const int* tokens, const uint16_t* table, int N,
                                    int C) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)N * C) return;
    const size_t n = i / C, c = i % C;
    out[i] = zipcclBf16ToFloat(table[(size_t)tokens[n] * C + c]);
}

/* The embedding backward: dtable[t] += dout[n] for every row n with
 * tokens[n] == t, added in row order (the CPU table's additions), in
 * parallel and without atomics. Two kernels:
 *   k_embedding_order: order[p] = the row at position p when the rows are
 *     sorted by the key (token, row). The key is unique, so the order is
 *     the only one whatever computes it: row n's position is the number of
 *     keys below its own, counted over tiles of keys in shared memory
 *     (N^2 comparisons: 67M at N = 8192, microseconds on a GPU; N is one
 *     micro-batch's tokens).
 *   k_embedding_runs: a block per position; the first position of each
 *     token's run sums the run's rows, in row order, into that token's row
 *     of dtable, channels across the threads (coalesced).
 * The additions per element are the CPU's, in the CPU's order: the same
 * bits. (Was: one thread per channel walking all N rows, N dependent
 * read-modify-writes each.) */
enum { EMB_TILE = 256 };

__global__ void k_embedding_order(int* order, const int* tokens, int N) {
    __shared__ int tile[EMB_TILE];
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    const int t = n < N ? tokens[n] : 0;
    int below = 0;
    for (int m0 = 0; m0 < N; m0 += EMB_TILE) {
        __syncthreads(); // the last tile's reads are done
        if (m0 + (int)threadIdx.x < N) tile[threadIdx.x] = tokens[m0 + threadIdx.x];
        __syncthreads();
        const int mend = min(EMB_TILE, N - m0);
        for (int j = 0; j < mend; j++) {
            const int u = tile[j], m = m0 + j;
            below += u < t || (u == t && m < n);
        }
    }
    if (n < N) order[below] = n;
}

__global__ void k_embedding_runs(float* dtable, const float* dout, const int* tokens,
                                 const int* order, int N, int C) {
    const int p = blockIdx.x;
    const int t = tokens[order[p]];
    if (p > 0 && tokens[order[p - 1]] == t) return; // inside a run: its first position sums it
    float* row = dtable + (size_t)t * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = row[c];
        for (int q = p; q < N && tokens[order[q]] == t; q++) acc += dout[(size_t)order[q] * C + c];
        row[c] = acc;
    }
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

/* ---- mixture of experts: one thread per row for the routing (E and k are
 * small), one block per row or pair for the rows of C */

/* the counted rows' losses summed in row order in double (one thread) */
__global__ void k_loss_sum(double* total, const float* losses, const int* targets, int N) {
    double t = 0.0;
    for (int n = 0; n < N; n++)
        if (targets[n] >= 0) t = __dadd_rn(t, (double)losses[n]);
    *total = __dadd_rn(*total, t);
}

__global__ void k_moe_route(float* probs, int* sel_all, float* w_all, const float* logits, int N,
                            int E, int k, int norm_topk) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    moe_route_row(probs + (size_t)n * E, sel_all + (size_t)n * k, w_all + (size_t)n * k,
                  logits + (size_t)n * E, E, k, norm_topk);
}

/* one thread per expert, rows in order, in double: the CPU's order */
__global__ void k_moe_prob_sum(double* acc, const float* probs, int N, int E) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= E) return;
    double a = acc[e];
    for (int n = 0; n < N; n++) a += (double)probs[(size_t)n * E + e];
    acc[e] = a;
}

__global__ void k_moe_gather(float* xs, const float* x, const int* pos, int k, int C) {
    const int i = blockIdx.x, r = pos[i];
    if (r < 0) return;
    const float* src = x + (size_t)(i / k) * C;
    float* dst = xs + (size_t)r * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
}

__global__ void k_moe_combine(float* out, const float* ys, const float* w, const int* pos, int k,
                              int C) {
    const int n = blockIdx.x;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float o = 0.0f;
        for (int j = 0; j < k; j++) {
            const int r = pos[n * k + j];
            if (r < 0) continue;
            o += (w ? w[n * k + j] : 1.0f) * ys[(size_t)r * C + c];
        }
        out[(size_t)n * C + c] = o;
    }
}

/* one block per pair: dys row and the dot product (a fixed block tree) */
__global__ void k_moe_combine_bwd(float* dw, float* dys, const float* dout, const float* ys,
                                  const float* w, const int* pos, int k, int C) {
    __shared__ float sh[32];
    const int i = blockIdx.x, r = pos[i];
    if (r < 0) {
        if (threadIdx.x == 0) dw[i] = 0.0f;
        return;
    }
    const float* g = dout + (size_t)(i / k) * C;
    const float* y = ys + (size_t)r * C;
    float* dy = dys + (size_t)r * C;
    const float wj = w[i];
    float dot = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        dot += g[c] * y[c];
        dy[c] = wj * g[c];
    }
    dot = block_sum(dot, sh);
    if (threadIdx.x == 0) dw[i] = dot;
}

__global__ void k_moe_router_bwd(float* dlogits, const float* probs, const int* sel_all,
                                 const float* w_all, const float* dw_all, const float* aux, int N,
                                 int E, int k, int norm_topk) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    const float* pr = probs + (size_t)n * E;
    const int* sel = sel_all + (size_t)n * k;
    const float *w = w_all + (size_t)n * k, *dw = dw_all + (size_t)n * k;
    float* dl = dlogits + (size_t)n * E;
    for (int e = 0; e < E; e++) dl[e] = aux[e];
    if (norm_topk) {
        float s = 0.0f, dot = 0.0f;
        for (int j = 0; j < k; j++) {
            s += pr[sel[j]];
            dot += dw[j] * w[j];
        }
        for (int j = 0; j < k; j++) dl[sel[j]] += (dw[j] - dot) / s;
    } else {
        for (int j = 0; j < k; j++) dl[sel[j]] += dw[j];
    }
    float dp = 0.0f;
    for (int e = 0; e < E; e++) dp += dl[e] * pr[e];
    for (int e = 0; e < E; e++) dl[e] = pr[e] * (dl[e] - dp);
}

/* (B, T, H, hd) <-> (B, H, T, hd), one thread per element */
__global__ void k_bthd_to_bhtd(float* dst, const float* src, int B, int T, int H, int hd) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * H * hd) return;
    const size_t d = i % hd, h = (i / hd) % H, t = (i / ((size_t)hd * H)) % T,
                 b = i / ((size_t)hd * H * T);
    dst[((b * H + h) * T + t) * hd + d] = src[i];
}
__global__ void k_bhtd_to_bthd(float* dst, const float* src, int B, int T, int H, int hd) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * T * H * hd) return;
    const size_t d = i % hd, h = (i / hd) % H, t = (i / ((size_t)hd * H)) % T,
                 b = i / ((size_t)hd * H * T);
    dst[i] = src[((b * H + h) * T + t) * hd + d];
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

__global__ void k_to_nv_bf16(__nv_bfloat16* out, const float* in, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __ushort_as_bfloat16(zipcclFloatToBf16(in[i]));
}

/* G slices of n elements, slice g at in + g * stride, into out + g * n
 * (the grouped GEMMs' fp32 weights, rounded as bf16_operand rounds) */
__global__ void k_to_nv_bf16_slices(__nv_bfloat16* out, const float* in, size_t n, size_t stride) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t g = blockIdx.y;
    if (i < n) out[g * n + i] = __ushort_as_bfloat16(zipcclFloatToBf16(in[g * stride + i]));
}

/* The grouped GEMM's operand pointers (cuBLAS reads them from device
 * memory), made on the device from the launch's arguments: nothing to
 * upload, so no host buffer has to outlive the call. */
constexpr int GG_MAX = 64; /* problems per grouped launch */
struct GroupPtrArgs {
    const void* p[3][GG_MAX]; /* cuBLAS's A, B and C of each problem */
    int n;
};
__global__ void k_group_ptrs(const void** ptrs, const GroupPtrArgs a) {
    const int j = threadIdx.x;
    if (j < a.n)
        for (int t = 0; t < 3; t++) ptrs[t * GG_MAX + j] = a.p[t][j];
}

__global__ void k_round_bf16(float* x, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = zipcclBf16ToFloat(zipcclFloatToBf16(x[i]));
}

__global__ void k_add_bf16(float* acc, const uint16_t* in, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] = __fadd_rn(acc[i], zipcclBf16ToFloat(in[i]));
}

/* The optimizer's element-wise steps with explicit round-to-nearest
 * intrinsics: nvcc would otherwise fuse a * b + c into one FMA, whose single
 * rounding differs from the CPU's two (kernels.h: no fused multiply-add). */
__global__ void k_adamw(float* p, const float* g, float* m, float* v, size_t n, ZrtAdamWStep s) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float gi = g[i];
    const float mi = __fadd_rn(__fmul_rn(s.beta1, m[i]), __fmul_rn(s.one_minus_beta1, gi));
    const float vi =
        __fadd_rn(__fmul_rn(s.beta2, v[i]), __fmul_rn(__fmul_rn(s.one_minus_beta2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float mhat = __fdiv_rn(mi, s.bc1), vhat = __fdiv_rn(vi, s.bc2);
    const float step = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), s.eps)),
                                 __fmul_rn(s.weight_decay, p[i]));
    p[i] = __fsub_rn(p[i], __fmul_rn(s.lr, step));
}

/* AdamW over many slices in one launch: block b runs chunk b, a piece of
 * at most kAdamChunk elements of one slice (chunk[b]: the slice, the start),
 * its gradient read as (g * gscale) * clip (kernels.h adamw_multi) */
enum { kAdamChunk = 16384 };
struct AdamChunk {
    int slice;
    size_t start;
};
__global__ void k_adamw_multi(const ZrtAdamWSlice* sl, const AdamChunk* chunk, ZrtAdamWStep s,
                              float gscale, float clip) {
    const AdamChunk c = chunk[blockIdx.x];
    const ZrtAdamWSlice t = sl[c.slice];
    const size_t end = c.start + kAdamChunk < t.n ? c.start + kAdamChunk : t.n;
    for (size_t i = c.start + threadIdx.x; i < end; i += blockDim.x) {
        const float gi = __fmul_rn(__fmul_rn(t.g[i], gscale), clip);
        const float mi = __fadd_rn(__fmul_rn(s.beta1, t.m[i]), __fmul_rn(s.one_minus_beta1, gi));
        const float vi =
            __fadd_rn(__fmul_rn(s.beta2, t.v[i]), __fmul_rn(__fmul_rn(s.one_minus_beta2, gi), gi));
        t.m[i] = mi;
        t.v[i] = vi;
        const float mhat = __fdiv_rn(mi, s.bc1), vhat = __fdiv_rn(vi, s.bc2);
        const float step = __fadd_rn(__fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), s.eps)),
                                     __fmul_rn(t.weight_decay, t.p[i]));
        t.p[i] = __fsub_rn(t.p[i], __fmul_rn(s.lr, step));
    }
}

/* sumsq_multi's block sums: thread b sums block b of all arrays' blocks
 * (blk[b]: the array, its start), x * gscale, in index order, in double */
struct SumsqBlock {
    int array;
    size_t start;
};
__global__ void k_sumsq_multi_blocks(double* part, const float* const* x, const size_t* n,
                                     const SumsqBlock* blk, size_t nblocks, float gscale) {
    const size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= nblocks) return;
    const SumsqBlock k = blk[b];
    const float* a = x[k.array];
    const size_t e = k.start + ZRT_SUMSQ_BLOCK < n[k.array] ? k.start + ZRT_SUMSQ_BLOCK : n[k.array];
    double sum = 0.0;
    for (size_t i = k.start; i < e; i++) {
        const double xi = (double)__fmul_rn(a[i], gscale);
        sum = __dadd_rn(sum, __dmul_rn(xi, xi));
    }
    part[b] = sum;
}

/* out[k] = the block sums of array k (part[first[k]] .. part[first[k+1]-1])
 * added in order: one thread per array */
__global__ void k_sum_runs_in_order(double* out, const double* part, const size_t* first, int nx) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= nx) return;
    double total = 0.0;
    for (size_t i = first[k]; i < first[k + 1]; i++) total = __dadd_rn(total, part[i]);
    out[k] = total;
}

/* one thread per ZRT_SUMSQ_BLOCK block, in index order, in double: the
 * CPU's order; k_sum_in_order adds the block sums in order */
__global__ void k_sumsq_blocks(double* part, const float* x, size_t n, size_t nblocks) {
    const size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= nblocks) return;
    const size_t a = b * ZRT_SUMSQ_BLOCK, e = a + ZRT_SUMSQ_BLOCK < n ? a + ZRT_SUMSQ_BLOCK : n;
    double sum = 0.0;
    for (size_t i = a; i < e; i++) {
        const double xi = (double)x[i];
        sum = __dadd_rn(sum, __dmul_rn(xi, xi));
    }
    part[b] = sum;
}

/* out = part[0] + part[1] + ... in that order, in double (one thread: the
 * order is the point; a few hundred values per unit) */
__global__ void k_sum_in_order(double* out, const double* part, size_t n) {
    double total = 0.0;
    for (size_t i = 0; i < n; i++) total = __dadd_rn(total, part[i]);
    *out = total;
}

__global__ void k_scale(float* x, size_t n, float factor) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __fmul_rn(x[i], factor);
}

/* ---- ZRT_CUDA_PROFILE=1: the device time of every table entry (events
 * around each call, synchronized: it serializes the device, so it is a
 * diagnostic, not a mode to train in), printed at exit to stderr. */
#define ZK_PROF_ENTRIES(X) X(matmul_forward) X(matmul_backward) X(rmsnorm_forward) \
    X(rmsnorm_backward) X(rope_table) X(rope_forward) X(rope_backward) X(attention_forward) \
    X(attention_backward) X(swiglu_forward) X(swiglu_backward) X(embedding_forward) \
    X(embedding_backward) X(crossentropy_forward_backward) X(moe_route) X(moe_prob_sum) \
    X(moe_gather) X(moe_combine) X(moe_combine_backward) X(moe_router_backward) X(add) X(zero) \
    X(round_to_bf16) X(bf16_to_float) X(matmul_forward_grouped) X(matmul_backward_grouped) \
    X(round_bf16_inplace) X(add_bf16) X(adamw) X(sumsq) X(scale) X(adamw_multi) X(sumsq_multi)
enum ProfId {
#define ZK_PROF_ID(n) P_##n,
    ZK_PROF_ENTRIES(ZK_PROF_ID)
#undef ZK_PROF_ID
    P_N
};
const char* const kProfName[P_N] = {
#define ZK_PROF_NAME(n) #n,
    ZK_PROF_ENTRIES(ZK_PROF_NAME)
#undef ZK_PROF_NAME
};
struct Prof {
    int on;
    void *a, *b; /* timing events of the device */
    double ms[P_N];
    long long calls[P_N];
} g_prof;

void prof_print() {
    double total = 0;
    for (int i = 0; i < P_N; i++) total += g_prof.ms[i];
    fprintf(stderr, "zrt cuda profile (ZRT_CUDA_PROFILE=1): %.1f ms of device time in table calls\n",
            total);
    int order[P_N];
    for (int i = 0; i < P_N; i++) order[i] = i;
    for (int i = 0; i < P_N; i++)
        for (int j = i + 1; j < P_N; j++)
            if (g_prof.ms[order[j]] > g_prof.ms[order[i]]) {
                const int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    for (int r = 0; r < P_N; r++) {
        const int i = order[r];
        if (!g_prof.calls[i]) continue;
        fprintf(stderr, "  %-30s %9lld calls %10.1f ms %5.1f%%\n", kProfName[i], g_prof.calls[i],
                g_prof.ms[i], total > 0 ? 100.0 * g_prof.ms[i] / total : 0.0);
    }
}

void prof_start() {
    const char* e = getenv("ZRT_CUDA_PROFILE");
    if (!e || !*e || !strcmp(e, "0")) return;
    CKD(zdev_event_create(g_dev, &g_prof.a, 1));
    CKD(zdev_event_create(g_dev, &g_prof.b, 1));
    g_prof.on = 1;
    atexit(prof_print);
}

struct ProfScope {
    int id;
    explicit ProfScope(int i) : id(i) {
        if (g_prof.on) CKD(zdev_event_record(g_dev, g_prof.a, nullptr));
    }
    ~ProfScope() {
        if (!g_prof.on) return;
        double ms = 0;
        CKD(zdev_event_record(g_dev, g_prof.b, nullptr));
        CKD(zdev_event_elapsed_ms(g_dev, g_prof.a, g_prof.b, &ms));
        g_prof.ms[id] += ms;
        g_prof.calls[id]++;
    }
};
#define PROF(name) ProfScope prof_scope_(P_##name)

/* ------------------------------------------------------- table entries */

/* The fp32 linear layer (the entries below add the profile scope) */
void matmul_forward_fp32(float* out, const float* inp, const float* weight, int N, int IC, int OC) {
    gemm_rm(false, true, N, OC, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);
}
void matmul_backward_fp32(float* dinp, float* dweight, const float* dout, const float* inp,
                          const float* weight, int N, int IC, int OC, int accumulate) {
    if (dinp)
        gemm_rm(false, false, N, IC, OC, 1.0f, dout, OC, weight, IC, accumulate ? 1.0f : 0.0f,
                dinp, IC);
    if (dweight) gemm_rm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
}

void cu_matmul_forward(float* out, const float* inp, const float* weight, int N, int IC, int OC) {
    PROF(matmul_forward);
    matmul_forward_fp32(out, inp, weight, N, IC, OC);
}

void cu_matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                        const float* weight, int N, int IC, int OC, int accumulate) {
    PROF(matmul_backward);
    matmul_backward_fp32(dinp, dweight, dout, inp, weight, N, IC, OC, accumulate);
}

/* fp32 <-> bf16 (the table's conversions, without a profile scope: the
 * entries below that use them have their own) */
void widen_into(float* out, const uint16_t* in, size_t n) {
    k_from_bf16<<<blocks_for(n, 256), 256, 0, g_stream>>>(out, in, n);
    CKL(k_from_bf16);
}
void round_into(uint16_t* out, const float* in, size_t n) {
    k_to_bf16<<<blocks_for(n, 256), 256, 0, g_stream>>>(out, in, n);
    CKL(k_to_bf16);
}

/* bf16 copies of the operands, in three device buffers that grow */
const __nv_bfloat16* bf16_operand(int slot, const float* x, size_t n) {
    static void* buf[3];
    static size_t cap[3];
    buf[slot] = scratch_grow(buf[slot], &cap[slot], n * sizeof(__nv_bfloat16));
    __nv_bfloat16* b = (__nv_bfloat16*)buf[slot];
    k_to_nv_bf16<<<blocks_for(n, 256), 256, 0, g_stream>>>(b, x, n);
    CKL(k_to_nv_bf16);
    return b;
}

void cu_matmul_forward_bf16(float* out, const float* inp, const float* weight, int N, int IC,
                            int OC) {
    PROF(matmul_forward);
    const __nv_bfloat16* a = bf16_operand(0, inp, (size_t)N * IC);
    const __nv_bfloat16* w = bf16_operand(1, weight, (size_t)OC * IC);
    gemm_rm_bf16(false, true, N, OC, IC, 1.0f, a, IC, w, IC, 0.0f, out, OC);
}

/* The bf16 backward given its weight operand w (bf16 already; NULL without
 * dinp): dout and inp as bf16 copies, fp32 accumulation. */
void matmul_backward_bf16_operands(float* dinp, float* dweight, const float* dout,
                                   const float* inp, const __nv_bfloat16* w, int N, int IC, int OC,
                                   int accumulate) {
    const __nv_bfloat16* g = bf16_operand(0, dout, (size_t)N * OC);
    if (dinp)
        gemm_rm_bf16(false, false, N, IC, OC, 1.0f, g, OC, w, IC, accumulate ? 1.0f : 0.0f, dinp,
                     IC);
    if (dweight) {
        const __nv_bfloat16* a = bf16_operand(2, inp, (size_t)N * IC);
        gemm_rm_bf16(true, false, OC, IC, N, 1.0f, g, OC, a, IC, 1.0f, dweight, IC);
    }
}

void cu_matmul_backward_bf16(float* dinp, float* dweight, const float* dout, const float* inp,
                             const float* weight, int N, int IC, int OC, int accumulate) {
    PROF(matmul_backward);
    const __nv_bfloat16* w = dinp ? bf16_operand(1, weight, (size_t)OC * IC) : nullptr;
    matmul_backward_bf16_operands(dinp, dweight, dout, inp, w, N, IC, OC, accumulate);
}

/* bf16 weights (a unit gathered in bf16): the fp32 table widens the weight
 * into a device buffer that grows (exact) and runs SGEMM; the bf16 table
 * hands it to the tensor cores as it is, rounding only the other operands. */
const float* widened_operand(const uint16_t* w, size_t n) {
    static void* scratch;
    static size_t cap;
    scratch = scratch_grow(scratch, &cap, n * sizeof(float));
    float* buf = (float*)scratch;
    widen_into(buf, w, n);
    return buf;
}

void cu_matmul_forward_w16(float* out, const float* inp, const uint16_t* weight, int N, int IC,
                           int OC) {
    PROF(matmul_forward);
    matmul_forward_fp32(out, inp, widened_operand(weight, (size_t)OC * IC), N, IC, OC);
}

void cu_matmul_backward_w16(float* dinp, float* dweight, const float* dout, const float* inp,
                            const uint16_t* weight, int N, int IC, int OC, int accumulate) {
    PROF(matmul_backward);
    const float* w = dinp ? widened_operand(weight, (size_t)OC * IC) : nullptr;
    matmul_backward_fp32(dinp, dweight, dout, inp, w, N, IC, OC, accumulate);
}

const __nv_bfloat16* as_nv_bf16(const uint16_t* w) {
    return reinterpret_cast<const __nv_bfloat16*>(w);
}

void cu_matmul_forward_bf16_w16(float* out, const float* inp, const uint16_t* weight, int N,
                                int IC, int OC) {
    PROF(matmul_forward);
    const __nv_bfloat16* a = bf16_operand(0, inp, (size_t)N * IC);
    gemm_rm_bf16(false, true, N, OC, IC, 1.0f, a, IC, as_nv_bf16(weight), IC, 0.0f, out, OC);
}

void cu_matmul_backward_bf16_w16(float* dinp, float* dweight, const float* dout,
                                 const float* inp, const uint16_t* weight, int N, int IC, int OC,
                                 int accumulate) {
    PROF(matmul_backward);
    matmul_backward_bf16_operands(dinp, dweight, dout, inp, as_nv_bf16(weight), N, IC, OC,
                                  accumulate);
}

/* A bf16 input (kernels.h, bf16 activations): it goes to the tensor cores
 * as it is; an fp32 weight is rounded as above, a bf16 one goes as it is. */
const __nv_bfloat16* weight_operand(const float* weight, const uint16_t* weight16, size_t n) {
    return weight ? bf16_operand(1, weight, n) : as_nv_bf16(weight16);
}

void cu_matmul_forward_a16(float* out, const uint16_t* inp, const float* weight,
                           const uint16_t* weight16, int N, int IC, int OC) {
    PROF(matmul_forward);
    const __nv_bfloat16* w = weight_operand(weight, weight16, (size_t)OC * IC);
    gemm_rm_bf16(false, true, N, OC, IC, 1.0f, as_nv_bf16(inp), IC, w, IC, 0.0f, out, OC);
}

void cu_matmul_backward_a16(float* dinp, float* dweight, const float* dout, const uint16_t* inp,
                            const float* weight, const uint16_t* weight16, int N, int IC, int OC,
                            int accumulate) {
    PROF(matmul_backward);
    const __nv_bfloat16* w = dinp ? weight_operand(weight, weight16, (size_t)OC * IC) : nullptr;
    const __nv_bfloat16* g = bf16_operand(0, dout, (size_t)N * OC);
    if (dinp)
        gemm_rm_bf16(false, false, N, IC, OC, 1.0f, g, OC, w, IC, accumulate ? 1.0f : 0.0f, dinp,
                     IC);
    if (dweight)
        gemm_rm_bf16(true, false, OC, IC, N, 1.0f, g, OC, as_nv_bf16(inp), IC, 1.0f, dweight, IC);
}

/* ---- grouped GEMMs (kernels.h): the MoE experts' products in one
 * cublasGemmGroupedBatchedEx launch per GG_MAX problems, each problem a
 * group of its own (their shapes differ), bf16 operands, fp32 output and
 * accumulation as gemm_rm_bf16. Where cuBLAS refuses the call (a cuBLAS
 * without bf16 -> fp32 grouped GEMMs), the problems run one cublasGemmEx
 * each, said once on stderr; ZRT_GROUPED_GEMM=0 leaves the entries out of
 * the table (the model's loop over experts). */
struct GemmProblem { /* row-major, as gemm_rm_bf16's arguments */
    bool transA, transB;
    int M, N, K;
    const __nv_bfloat16* A;
    int lda;
    const __nv_bfloat16* B;
    int ldb;
    float beta;
    float* C;
    int ldc;
};
int g_grouped_refused; /* cuBLAS refused a grouped call: one GEMM per problem from then on */

void gemm_grouped_bf16(const GemmProblem* p, int n) {
    static void* ptrs;
    static size_t cap;
    ptrs = scratch_grow(ptrs, &cap, 3 * GG_MAX * sizeof(void*));
    int done = 0; // problems the grouped launches took
    for (; done < n && !g_grouped_refused; done += GG_MAX) {
        const int m = n - done < GG_MAX ? n - done : GG_MAX;
        cublasOperation_t ta[GG_MAX], tb[GG_MAX];
        int mm[GG_MAX], nn[GG_MAX], kk[GG_MAX], lda[GG_MAX], ldb[GG_MAX], ldc[GG_MAX], one[GG_MAX];
        float alpha[GG_MAX], beta[GG_MAX];
        GroupPtrArgs a{};
        a.n = m;
        for (int j = 0; j < m; j++) {
            const GemmProblem& q = p[done + j];
            ta[j] = q.transB ? CUBLAS_OP_T : CUBLAS_OP_N, tb[j] = q.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
            mm[j] = q.N, nn[j] = q.M, kk[j] = q.K, lda[j] = q.ldb, ldb[j] = q.lda, ldc[j] = q.ldc;
            alpha[j] = 1.0f, beta[j] = q.beta, one[j] = 1;
            // column-major C^T = op(B)^T op(A)^T: cuBLAS's A is our B, its B our A
            a.p[0][j] = q.B, a.p[1][j] = q.A, a.p[2][j] = q.C;
        }
        const void** P = (const void**)ptrs;
        k_group_ptrs<<<1, GG_MAX, 0, g_stream>>>(P, a);
        CKL(k_group_ptrs);
        const cublasStatus_t st = cublasGemmGroupedBatchedEx(
            handle(), ta, tb, mm, nn, kk, alpha, P, CUDA_R_16BF, lda, P + GG_MAX, CUDA_R_16BF, ldb, beta,
            (void* const*)(P + 2 * GG_MAX), CUDA_R_32F, ldc, m, one, CUBLAS_COMPUTE_32F);
        if (st == CUBLAS_STATUS_SUCCESS) continue;
        fprintf(stderr, "zrt cuda: cublasGemmGroupedBatchedEx (bf16 in, fp32 out): %s; the grouped GEMMs run "
                        "one cublasGemmEx per problem\n", cublasGetStatusString(st));
        g_grouped_refused = 1;
        break;
    }
    for (int j = done; j < n; j++) // what cuBLAS refused to group, one by one
        gemm_rm_bf16(p[j].transA, p[j].transB, p[j].M, p[j].N, p[j].K, 1.0f, p[j].A, p[j].lda, p[j].B, p[j].ldb,
                     p[j].beta, p[j].C, p[j].ldc);
}

/* The groups' weights as bf16 operands: bf16 already, or the G fp32 slices
 * rounded into a buffer that grows (slice g at g * OC * IC: its stride) */
const __nv_bfloat16* grouped_weights(const float* weight, const uint16_t* weight16, size_t w_stride, int G,
                                     size_t n, size_t* stride) {
    if (!weight) {
        *stride = w_stride;
        return as_nv_bf16(weight16);
    }
    static void* buf;
    static size_t cap;
    buf = scratch_grow(buf, &cap, (size_t)G * n * sizeof(__nv_bfloat16));
    __nv_bfloat16* b = (__nv_bfloat16*)buf;
    k_to_nv_bf16_slices<<<dim3(blocks_for(n, 256), G), 256, 0, g_stream>>>(b, weight, n, w_stride);
    CKL(k_to_nv_bf16_slices);
    *stride = n;
    return b;
}

void cu_matmul_forward_grouped_a16(float* out, const uint16_t* inp, const float* weight, const uint16_t* weight16,
                                   size_t w_stride, const int* rows, int G, int IC, int OC) {
    PROF(matmul_forward_grouped);
    std::vector<GemmProblem> p;
    size_t ws;
    const __nv_bfloat16* W = grouped_weights(weight, weight16, w_stride, G, (size_t)OC * IC, &ws);
    for (int g = 0, o = 0; g < G; o += rows[g], g++)
        if (rows[g]) // out rows (rows, OC) = inp rows (rows, IC) W_g^T
            p.push_back({false, true, rows[g], OC, IC, as_nv_bf16(inp) + (size_t)o * IC, IC, W + g * ws, IC,
                         0.0f, out + (size_t)o * OC, OC});
    gemm_grouped_bf16(p.data(), (int)p.size());
}

void cu_matmul_backward_grouped_a16(float* dinp, float* dweight, size_t dw_stride, const float* dout,
                                    const uint16_t* inp, const float* weight, const uint16_t* weight16,
                                    size_t w_stride, const int* rows, int G, int IC, int OC, int accumulate) {
    PROF(matmul_backward_grouped);
    size_t N = 0, ws = 0;
    for (int g = 0; g < G; g++) N += (size_t)rows[g];
    if (!N) return;
    const __nv_bfloat16* W =
        dinp ? grouped_weights(weight, weight16, w_stride, G, (size_t)OC * IC, &ws) : nullptr;
    const __nv_bfloat16* d = bf16_operand(0, dout, N * OC); // every group's dout, rounded once
    const __nv_bfloat16* x = as_nv_bf16(inp);
    std::vector<GemmProblem> p;
    for (int g = 0, o = 0; g < G; o += rows[g], g++) {
        if (!rows[g]) continue;
        const __nv_bfloat16* dg = d + (size_t)o * OC;
        if (dinp) // dinp rows (rows, IC) (=|+=) dout rows (rows, OC) W_g
            p.push_back({false, false, rows[g], IC, OC, dg, OC, W + g * ws, IC, accumulate ? 1.0f : 0.0f,
                         dinp + (size_t)o * IC, IC});
        if (dweight) // dW_g (OC, IC) += dout rows^T inp rows
            p.push_back({true, false, OC, IC, rows[g], dg, OC, x + (size_t)o * IC, IC, 1.0f,
                         dweight + g * dw_stride, IC});
    }
    gemm_grouped_bf16(p.data(), (int)p.size());
}

void cu_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N,
                        int C, float eps) {
    PROF(rmsnorm_forward);
    auto kern = k_rmsnorm_fwd<float>; // (a launch names a plain identifier: the emulator's rewrite)
    kern<<<N, 256, 0, g_stream>>>(out, rstd, inp, weight, C, eps);
    CKL(k_rmsnorm_fwd);
}

void cu_rmsnorm_forward_a16(uint16_t* out, float* rstd, const float* inp, const float* weight,
                            int N, int C, float eps) {
    PROF(rmsnorm_forward);
    auto kern = k_rmsnorm_fwd<uint16_t>; // (a launch names a plain identifier: the emulator's rewrite)
    kern<<<N, 256, 0, g_stream>>>(out, rstd, inp, weight, C, eps);
    CKL(k_rmsnorm_fwd);
}

void cu_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                         const float* weight, const float* rstd, int N, int C) {
    PROF(rmsnorm_backward);
    k_rmsnorm_bwd_x<<<N, 256, 0, g_stream>>>(dinp, dout, inp, weight, rstd, C);
    CKL(k_rmsnorm_bwd_x);
    static void* scratch = nullptr; // grows, kept for the process (a few hundred KB)
    static size_t cap = 0;
    const int chunks = (N + RN_ROWS - 1) / RN_ROWS;
    if (chunks > 65535) zk_fail("rmsnorm_backward", "more than 65535 * 128 rows", __FILE__, __LINE__);
    scratch = scratch_grow(scratch, &cap, (size_t)chunks * C * sizeof(float));
    float* part = (float*)scratch;
    k_rmsnorm_bwd_w_part<<<dim3(blocks_for(C, 64), chunks), 64, 0, g_stream>>>(part, dout, inp, rstd, N, C);
    CKL(k_rmsnorm_bwd_w_part);
    k_rmsnorm_bwd_w_sum<<<blocks_for(C, 128), 128, 0, g_stream>>>(dweight, part, chunks, C);
    CKL(k_rmsnorm_bwd_w_sum);
}

void cu_rope_table(float* cos_sin, int T, int hd, float theta) {
    PROF(rope_table);
    // tiny: computed on the host in double, like the CPU table, then copied
    const size_t n = (size_t)T * hd;
    float* h = (float*)malloc(n * sizeof(float));
    if (!h) zk_fail("rope_table", "out of host memory", __FILE__, __LINE__);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hd / 2; i++) {
            const double a = (double)t * pow((double)theta, -2.0 * i / (double)hd);
            h[((size_t)t * (hd / 2) + i) * 2] = (float)cos(a);
            h[((size_t)t * (hd / 2) + i) * 2 + 1] = (float)sin(a);
        }
    CKD(zdev_upload(g_dev, cos_sin, h, n * sizeof(float))); // a host wait: h is freed next
    free(h);
}

void cu_rope_forward(float* x, const float* cs, int B, int T, int NH, int hd) {
    PROF(rope_forward);
    const size_t n = (size_t)B * T * NH * (hd / 2);
    auto kern = k_rope<float>;
    kern<<<blocks_for(n, 256), 256, 0, g_stream>>>(x, x, cs, B, T, NH, hd, 1.0f);
    CKL(k_rope);
}

void cu_rope_forward_a16(uint16_t* out, const float* x, const float* cs, int B, int T, int NH, int hd) {
    PROF(rope_forward);
    const size_t n = (size_t)B * T * NH * (hd / 2);
    auto kern = k_rope<uint16_t>;
    kern<<<blocks_for(n, 256), 256, 0, g_stream>>>(out, x, cs, B, T, NH, hd, 1.0f);
    CKL(k_rope);
}

void cu_rope_backward(float* dx, const float* cs, int B, int T, int NH, int hd) {
    PROF(rope_backward);
    const size_t n = (size_t)B * T * NH * (hd / 2);
    auto kern = k_rope<float>;
    kern<<<blocks_for(n, 256), 256, 0, g_stream>>>(dx, dx, cs, B, T, NH, hd, -1.0f);
    CKL(k_rope);
}

/* P (B, H, T, T) | dS (B, H, T, T) | dO, Q and dQ head-major (B, H, T, hd)
 * each. The probabilities live in the scratch for one call only: the
 * backward recomputes them (the forward's GEMM and softmax, the same bits),
 * so no layer keeps a (T, T) tensor between its forward and backward. */
size_t cu_attention_scratch_floats(int B, int T, int H, int KV, int hd) {
    (void)KV;
    return 2 * (size_t)B * H * T * T + 3 * (size_t)B * H * T * hd;
}

/* P (B, H, T, T) = causal softmax(scale Q K^T), lse (B, H, T) its rows'
 * log-sum-exp (NULL: not written) */
static void cu_attention_probs(float* att, float* lse, const float* q, const float* k, int B,
                               int T, int H, int KV, int hd) {
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
    k_causal_softmax<<<B * H * T, 128, 0, g_stream>>>(att, lse, T);
    CKL(k_causal_softmax);
}

void cu_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                          int B, int T, int H, int KV, int hd, float* scratch) {
    PROF(attention_forward);
    const int rep = H / KV, ldq = H * hd, ldkv = KV * hd;
    float* att = scratch; // (B, H, T, T)
    cu_attention_probs(att, lse, q, k, B, T, H, KV, hd);
    for (int b = 0; b < B; b++)
        for (int g = 0; g < KV; g++) {
            const float* vg = v + (size_t)b * T * ldkv + (size_t)g * hd;
            const float* pg = att + ((size_t)b * H + (size_t)g * rep) * T * T;
            float* og = out + (size_t)b * T * ldq + (size_t)g * rep * hd;
            gemm_rm_batched(false, false, T, hd, T, 1.0f, pg, T, (long long)T * T, vg, ldkv, 0,
                            0.0f, og, ldq, hd, rep);
        }
}

/* The backward per (batch, kv group) as whole-group GEMMs: with dO and Q
 * head-major, the rep query heads of group g are one (rep*T, hd) matrix, so
 *   dP_g (rep*T, T) = dO_g V_g^T          dQ_g (rep*T, hd) = dS_g K_g
 *   dV_g (T, hd)    = P_g^T dO_g          dK_g (T, hd)     = dS_g^T Q_g
 * are four GEMMs (strided-batched over the KV groups of a batch element),
 * the sums over a group's heads inside cuBLAS's own fixed order. P comes
 * from recomputing the forward's (out and lse are not needed). */
void cu_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                           const float* lse, const float* q, const float* k, const float* v,
                           int B, int T, int H, int KV, int hd, float* scratch) {
    PROF(attention_backward);
    (void)out, (void)lse;
    const int rep = H / KV, ldkv = KV * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t TT = (size_t)T * T, Thd = (size_t)T * hd, n = (size_t)B * T * H * hd;
    float* att = scratch;                      // (B, H, T, T)
    float* dS = att + (size_t)B * H * TT;      // (B, H, T, T)
    float* dOh = dS + (size_t)B * H * TT;      // (B, H, T, hd)
    float* Qh = dOh + n;
    float* dQh = Qh + n;
    cu_attention_probs(att, NULL, q, k, B, T, H, KV, hd);
    k_bthd_to_bhtd<<<blocks_for(n, 256), 256, 0, g_stream>>>(dOh, dout, B, T, H, hd);
    CKL(k_bthd_to_bhtd);
    k_bthd_to_bhtd<<<blocks_for(n, 256), 256, 0, g_stream>>>(Qh, q, B, T, H, hd);
    CKL(k_bthd_to_bhtd);
    for (int b = 0; b < B; b++) { // dP for every group of batch element b
        const size_t bh = (size_t)b * H;
        gemm_rm_batched(false, true, rep * T, T, hd, 1.0f, dOh + bh * Thd, hd, (long long)rep * Thd,
                        v + (size_t)b * T * ldkv, ldkv, hd, 0.0f, dS + bh * TT, T,
                        (long long)rep * TT, KV);
    }
    k_softmax_bwd<<<B * H * T, 128, 0, g_stream>>>(dS, att, T, scale);
    CKL(k_softmax_bwd);
    for (int b = 0; b < B; b++) {
        const size_t bh = (size_t)b * H, bkv = (size_t)b * T * ldkv;
        gemm_rm_batched(false, false, rep * T, hd, T, 1.0f, dS + bh * TT, T, (long long)rep * TT,
                        k + bkv, ldkv, hd, 0.0f, dQh + bh * Thd, hd, (long long)rep * Thd, KV);
        gemm_rm_batched(true, false, T, hd, rep * T, 1.0f, att + bh * TT, T, (long long)rep * TT,
                        dOh + bh * Thd, hd, (long long)rep * Thd, 0.0f, dv + bkv, ldkv, hd, KV);
        gemm_rm_batched(true, false, T, hd, rep * T, 1.0f, dS + bh * TT, T, (long long)rep * TT,
                        Qh + bh * Thd, hd, (long long)rep * Thd, 0.0f, dk + bkv, ldkv, hd, KV);
    }
    k_bhtd_to_bthd<<<blocks_for(n, 256), 256, 0, g_stream>>>(dq, dQh, B, T, H, hd);
    CKL(k_bhtd_to_bthd);
}

/* ------------------------------------------ flash attention (bf16 table)
 *
 * model.compute: bf16's attention: FlashAttention-2 on tensor cores, one
 * kernel per pass, no (T, T) tensor anywhere. The engine is WMMA
 * (nvcuda::wmma, 16x16x16 tiles, bf16 operands, fp32 accumulators); the
 * code never relies on which elements a lane's fragment holds (WMMA leaves
 * that unspecified): fragments only go load -> mma -> store, and everything
 * done per row (masking, the online softmax, rescaling) is done by the
 * block's threads on shared memory in fp32.
 *
 * Tiles of FA_BR = 64 queries and FA_BC = 64 keys; four warps, warp w owning
 * the 16-row strip w of a tile, and within it each lane pair one row, each
 * lane half of its columns. q, k, v, dO are fp32 in memory and rounded to
 * bf16 as a tile comes into shared memory (the CPU twin's rounding);
 * rows at or past T come in as zeros. Key tiles above the diagonal are
 * never loaded nor computed (query tile i sees key tiles 0..i, BR == BC);
 * the diagonal tile is masked per element.
 *
 * Forward (grid: query tiles x B*H): S = Q K^T per key tile into shared
 * memory, then per row s = scale S (masked: -inf), running max m and sum l;
 * P = exp(s - m) rounded to bf16 and l sums the rounded P, so out is the
 * P-weighted mean of V the tensor cores computed; O (fp32, in shared
 * memory) is rescaled by exp(m_old - m) and O += P V; at the end out = O / l
 * and lse = m + log l.
 *
 * Backward, deterministic and without atomics, in three launches:
 *   D (B, H, T) = rowsum(dO * O) (one warp per row, fixed order);
 *   dK, dV (grid: key tiles x B*KV): a block owns one key tile of one kv
 *     head and walks its query heads in head order and, per head, the query
 *     tiles from the diagonal down: P = exp(scale S - lse), dP = dO V^T,
 *     dS = scale P (dP - D), dV += P^T dO, dK += dS^T Q (accumulators in
 *     registers: the GQA sum over a group's heads is in one block, in order);
 *   dQ (grid: query tiles x B*H): recomputes P and dS per key tile up to
 *     the diagonal, dQ += dS K.
 * P and dS go to the tensor cores rounded to bf16 (dS is formed from the
 * fp32 P). The second pass recomputes S and dP (seven tile products instead
 * of FlashAttention-2's five), the price of no atomics on dQ.
 *
 * A first, readable version: no asynchronous copies (cp.async, TMA), no
 * double buffering, the softmax through shared memory rather than in
 * registers. Checked on the warp emulator (tests/gpu/emu/mma.h); not yet
 * run on a GPU, so its speed is an estimate (docs/MODEL.md).
 *
 * The scratch says what was computed: the forward writes, per block, the
 * number of key tiles it computed (scratch[bh * nt + qt]); the backward D
 * (B*H*T floats), then the tiles of each dK/dV block, then of each dQ
 * block. test_model counts them (the masked tiles are skipped).
 *
 * Grids are (tiles, B*H) or (tiles, B*KV): B*H at most 65535 (CUDA's
 * grid y limit; a larger one fails at launch, loudly).
 *
 * Head dims 64 and 128 (the kernels are templates on it); any other falls
 * back to the fp32 table's SGEMM attention (which needs its larger scratch;
 * attention_scratch_floats says so). */
#ifndef ZK_DYNAMIC_SMEM
#define ZK_DYNAMIC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif
#ifndef ZK_UNROLL
#define ZK_UNROLL _Pragma("unroll")
#endif

namespace wmma = nvcuda::wmma;
typedef __nv_bfloat16 bf16;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragAcc;
constexpr int FA_BR = 64, FA_BC = 64, FA_THREADS = 128; // BR == BC: tile i sees tiles 0..i
constexpr int FA_LDS = FA_BC + 4;                        // row stride of fp32 (BR, BC) tiles
constexpr int FA_LDP = FA_BC + 8;                        // row stride of bf16 (BR, BC) tiles

/* Shared memory of the three kernels, in bytes (every part a multiple of
 * 32 bytes, as WMMA's pointers must be) */
template <int HD>
struct FaSmem {
    static constexpr int LDB = HD + 8; // row stride of bf16 (64, HD) tiles: Q, K, V, dO
    static constexpr int LDO = HD + 4; // row stride of the forward's fp32 O (BR, HD)
    static constexpr size_t tile = (size_t)FA_BR * LDB * 2;
    static constexpr size_t s = (size_t)FA_BR * FA_LDS * 4;
    static constexpr size_t p = (size_t)FA_BR * FA_LDP * 2;
    static constexpr size_t o = (size_t)FA_BR * LDO * 4;
    static constexpr size_t rows = (size_t)FA_BR * 4;
    static constexpr size_t fwd = 3 * tile + s + p + o;              // Q K V | S | P | O
    static constexpr size_t dkdv = 4 * tile + 2 * s + 2 * p + 2 * rows; // K V Q dO | S dP | P dS | lse D
    static constexpr size_t dq = 4 * tile + 2 * s + p + 2 * rows;       // Q dO K V | S dP | dS | lse D
};

__device__ __forceinline__ bf16 fa_bf16(float x) { return __ushort_as_bfloat16(zipcclFloatToBf16(x)); }

/* An element of q, k, v or dO as the tiles take it: fp32 rounded, or bf16
 * (the a16 entries: rounded once, where RoPE wrote it) as it is. */
__device__ __forceinline__ bf16 fa_in(const float* p) { return fa_bf16(*p); }
__device__ __forceinline__ bf16 fa_in(const uint16_t* p) { return __ushort_as_bfloat16(*p); }

/* dst (64, HD) bf16, row stride LDB = rows r0.. of src (T, HD), row stride
 * ld, rounded; rows at or past T are zeros. The whole block. */
template <int HD, typename TS>
__device__ __forceinline__ void fa_load_tile(bf16* dst, const TS* src, int ld, int r0, int T) {
    for (int x = threadIdx.x; x < FA_BR * HD; x += FA_THREADS) {
        const int r = x / HD, c = x % HD;
        dst[r * FaSmem<HD>::LDB + c] = r0 + r < T ? fa_in(src + (size_t)(r0 + r) * ld + c) : fa_bf16(0.0f);
    }
}

/* One warp: S (16, BC) fp32, row stride FA_LDS = A B^T with A the warp's
 * strip (16, HD) and B a (BC, HD) tile, both bf16 with row stride LDB
 * (the scores Q K^T and dP = dO V^T). */
template <int HD>
__device__ __forceinline__ void fa_strip_abt(float* S, const bf16* A, const bf16* B) {
    constexpr int LDB = FaSmem<HD>::LDB;
    ZK_UNROLL
    for (int n = 0; n < FA_BC / 16; n++) {
        FragAcc acc;
        wmma::fill_fragment(acc, 0.0f);
        ZK_UNROLL
        for (int kk = 0; kk < HD / 16; kk++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b; // B^T
            wmma::load_matrix_sync(a, A + kk * 16, LDB);
            wmma::load_matrix_sync(b, B + (size_t)n * 16 * LDB + kk * 16, LDB);
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(S + n * 16, acc, FA_LDS, wmma::mem_row_major);
    }
}

/* One warp: acc (16, HD) += A (16, 64) B (64, HD), B bf16 row stride LDB;
 * A bf16 with row stride lda, LayoutA col_major for a transposed operand
 * (P^T, dS^T: A points at the strip's first column of the (64, 64) tile). */
template <int HD, class LayoutA>
__device__ __forceinline__ void fa_strip_ab(FragAcc* acc, const bf16* A, int lda, const bf16* B) {
    constexpr int LDB = FaSmem<HD>::LDB;
    constexpr bool trans = std::is_same<LayoutA, wmma::col_major>::value;
    ZK_UNROLL
    for (int kk = 0; kk < 64 / 16; kk++) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LayoutA> a;
        wmma::load_matrix_sync(a, A + (trans ? (size_t)kk * 16 * lda : (size_t)kk * 16), lda);
        ZK_UNROLL
        for (int n = 0; n < HD / 16; n++) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
            wmma::load_matrix_sync(b, B + (size_t)kk * 16 * LDB + n * 16, LDB);
            wmma::mma_sync(acc[n], a, b, acc[n]);
        }
    }
}

/* One warp writes its accumulator strip (16, HD) to rows r0.. of dst (T,
 * HD), row stride ld (rows at or past T dropped), through stage (16, FA_LDS)
 * fp32 of shared memory that only this warp uses. */
template <int HD>
__device__ __forceinline__ void fa_store_strip(float* dst, int ld, const FragAcc* acc,
                                               float* stage, int r0, int T) {
    const int lane = threadIdx.x % 32;
    ZK_UNROLL
    for (int n = 0; n < HD / 16; n++) {
        wmma::store_matrix_sync(stage, acc[n], FA_LDS, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
            const int r = e / 16, c = e % 16;
            if (r0 + r < T) dst[(size_t)(r0 + r) * ld + n * 16 + c] = stage[r * FA_LDS + c];
        }
        __syncwarp();
    }
}

/* A lane's 32 columns of its row of the backward tiles: query i, keys
 * j.. j+31: P = exp(scale S - lse) (0 where masked and for rows past T),
 * dS = scale P (dP - D), rounded to bf16 (prow may be NULL). */
__device__ __forceinline__ void fa_grad_row(bf16* prow, bf16* dsrow, const float* srow,
                                            const float* dprow, int i, int j, int T, float lse_i,
                                            float d_i, float scale) {
    for (int c = 0; c < 32; c++) {
        const float p = j + c <= i && i < T ? expf(srow[c] * scale - lse_i) : 0.0f;
        if (prow) prow[c] = fa_bf16(p);
        dsrow[c] = fa_bf16(scale * p * (dprow[c] - d_i));
    }
}

template <int HD, typename TQ>
__global__ void __launch_bounds__(FA_THREADS)
    k_flash_fwd_bf16(float* out, float* lse, float* tiles, const TQ* q, const TQ* k,
                     const TQ* v, int T, int H, int KV, float scale) {
    typedef FaSmem<HD> M;
    constexpr int LDB = M::LDB, LDO = M::LDO;
    ZK_DYNAMIC_SMEM(smem);
    bf16* Qs = (bf16*)smem;                                 // (BR, HD)
    bf16* Ks = (bf16*)(smem + M::tile);                     // (BC, HD)
    bf16* Vs = (bf16*)(smem + 2 * M::tile);                 // (BC, HD)
    float* Ss = (float*)(smem + 3 * M::tile);               // (BR, BC) scores
    bf16* Ps = (bf16*)(smem + 3 * M::tile + M::s);          // (BR, BC) probabilities
    float* Os = (float*)(smem + 3 * M::tile + M::s + M::p); // (BR, HD) unnormalised output
    const int qt = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H, g = h / (H / KV);
    const int i0 = qt * FA_BR, ldq = H * HD, ldkv = KV * HD;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = warp * 16 + lane / 2, half = lane % 2; // the lane pair's row, this lane's half
    const int i = i0 + row;                                 // its query
    const TQ* kb = k + (size_t)b * T * ldkv + (size_t)g * HD; // (T, HD), row stride ldkv
    const TQ* vb = v + (size_t)b * T * ldkv + (size_t)g * HD;
    fa_load_tile<HD>(Qs, q + (size_t)b * T * ldq + (size_t)h * HD, ldq, i0, T);
    for (int x = threadIdx.x; x < FA_BR * HD; x += FA_THREADS) Os[x / HD * LDO + x % HD] = 0.0f;
    float m = -INFINITY, l = 0.0f; // the row's running max and sum (both lanes of the pair alike)
    const int ntiles = qt + 1;     // key tiles up to the diagonal; those above are never touched
    for (int kt = 0; kt < ntiles; kt++) {
        const int j0 = kt * FA_BC;
        __syncthreads(); // every warp is done with the previous K and V
        fa_load_tile<HD>(Ks, kb, ldkv, j0, T);
        fa_load_tile<HD>(Vs, vb, ldkv, j0, T);
        __syncthreads();
        fa_strip_abt<HD>(Ss + warp * 16 * FA_LDS, Qs + warp * 16 * LDB, Ks); // S = Q K^T
        __syncwarp();
        // online softmax of the row's 64 scores, a lane's 32 at a time
        float* srow = Ss + row * FA_LDS + half * 32;
        bf16* prow = Ps + row * FA_LDP + half * 32;
        float mx = -INFINITY;
        for (int c = 0; c < 32; c++) {
            const float s = j0 + half * 32 + c <= i ? srow[c] * scale : -INFINITY;
            srow[c] = s;
            mx = fmaxf(mx, s);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float mnew = fmaxf(m, mx); // finite: key j0 <= i0 <= i is always visible
        float sum = 0.0f;
        for (int c = 0; c < 32; c++) {
            const uint16_t p = zipcclFloatToBf16(expf(srow[c] - mnew));
            prow[c] = __ushort_as_bfloat16(p);
            sum += zipcclBf16ToFloat(p);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        const float corr = expf(m - mnew); // 0 on the first tile
        float* orow = Os + row * LDO + half * (HD / 2);
        for (int c = 0; c < HD / 2; c++) orow[c] *= corr;
        l = l * corr + sum;
        m = mnew;
        __syncwarp();
        // O strip (16, HD) += P strip (16, BC) V (BC, HD), through shared memory
        FragAcc o[HD / 16];
        ZK_UNROLL
        for (int n = 0; n < HD / 16; n++)
            wmma::load_matrix_sync(o[n], Os + warp * 16 * LDO + n * 16, LDO, wmma::mem_row_major);
        fa_strip_ab<HD, wmma::row_major>(o, Ps + warp * 16 * FA_LDP, FA_LDP, Vs);
        ZK_UNROLL
        for (int n = 0; n < HD / 16; n++)
            wmma::store_matrix_sync(Os + warp * 16 * LDO + n * 16, o[n], LDO, wmma::mem_row_major);
        __syncwarp();
    }
    if (i < T) {
        const float inv = 1.0f / l;
        float* dst = out + ((size_t)b * T + i) * ldq + (size_t)h * HD + half * (HD / 2);
        const float* orow = Os + row * LDO + half * (HD / 2);
        for (int c = 0; c < HD / 2; c++) dst[c] = orow[c] * inv;
        if (!half) lse[(size_t)bh * T + i] = m + logf(l);
    }
    if (threadIdx.x == 0) tiles[(size_t)bh * gridDim.x + qt] = (float)ntiles;
}

/* D (B, H, T) = rowsum(dO * O), one warp per row of dO (B, T, H, hd) */
__global__ void k_att_rowdot(float* D, const float* dout, const float* out, int B, int T, int H,
                             int hd) {
    const size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= (size_t)B * T * H) return; // the whole warp
    float s = 0.0f;
    for (int c = lane; c < hd; c += 32) s += dout[r * hd + c] * out[r * hd + c];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    const size_t b = r / ((size_t)T * H), t = r / H % T, h = r % H;
    if (lane == 0) D[(b * H + h) * T + t] = s;
}

template <int HD, typename TQ>
__global__ void __launch_bounds__(FA_THREADS)
    k_flash_dkdv_bf16(float* dk, float* dv, float* tiles, const float* dout, const float* D,
                      const float* lse, const TQ* q, const TQ* k, const TQ* v, int T,
                      int H, int KV, float scale) {
    typedef FaSmem<HD> M;
    constexpr int LDB = M::LDB;
    ZK_DYNAMIC_SMEM(smem);
    bf16* Ks = (bf16*)smem;                                   // (BC, HD)
    bf16* Vs = (bf16*)(smem + M::tile);                       // (BC, HD)
    bf16* Qs = (bf16*)(smem + 2 * M::tile);                   // (BR, HD)
    bf16* dOs = (bf16*)(smem + 3 * M::tile);                  // (BR, HD)
    float* Ss = (float*)(smem + 4 * M::tile);                 // (BR, BC)
    float* dPs = (float*)(smem + 4 * M::tile + M::s);         // (BR, BC)
    bf16* Pb = (bf16*)(smem + 4 * M::tile + 2 * M::s);        // (BR, BC)
    bf16* dSb = (bf16*)(smem + 4 * M::tile + 2 * M::s + M::p); // (BR, BC)
    float* Ls = (float*)(smem + 4 * M::tile + 2 * M::s + 2 * M::p); // (BR) lse
    float* Ds = Ls + FA_BR;                                          // (BR) D
    const int kt = blockIdx.x, nt = gridDim.x, bg = blockIdx.y, b = bg / KV, g = bg % KV;
    const int rep = H / KV, j0 = kt * FA_BC, ldq = H * HD, ldkv = KV * HD;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = warp * 16 + lane / 2, half = lane % 2;
    fa_load_tile<HD>(Ks, k + (size_t)b * T * ldkv + (size_t)g * HD, ldkv, j0, T);
    fa_load_tile<HD>(Vs, v + (size_t)b * T * ldkv + (size_t)g * HD, ldkv, j0, T);
    FragAcc dk_acc[HD / 16], dv_acc[HD / 16]; // this warp's keys j0 + 16 warp .. + 15
    ZK_UNROLL
    for (int n = 0; n < HD / 16; n++) wmma::fill_fragment(dk_acc[n], 0.0f), wmma::fill_fragment(dv_acc[n], 0.0f);
    int ntiles = 0;
    for (int r = 0; r < rep; r++) { // the group's query heads, in order
        const int h = g * rep + r;
        const size_t hoff = (size_t)b * T * ldq + (size_t)h * HD;
        for (int qt = kt; qt < nt; qt++, ntiles++) { // query tiles from the diagonal down
            const int i0 = qt * FA_BR;
            __syncthreads(); // every warp is done with the previous Q, dO, P, dS
            fa_load_tile<HD>(Qs, q + hoff, ldq, i0, T);
            fa_load_tile<HD>(dOs, dout + hoff, ldq, i0, T);
            for (int x = threadIdx.x; x < FA_BR; x += FA_THREADS) {
                const bool in = i0 + x < T;
                Ls[x] = in ? lse[((size_t)b * H + h) * T + i0 + x] : 0.0f;
                Ds[x] = in ? D[((size_t)b * H + h) * T + i0 + x] : 0.0f;
            }
            __syncthreads();
            fa_strip_abt<HD>(Ss + warp * 16 * FA_LDS, Qs + warp * 16 * LDB, Ks);  // S = Q K^T
            fa_strip_abt<HD>(dPs + warp * 16 * FA_LDS, dOs + warp * 16 * LDB, Vs); // dP = dO V^T
            __syncwarp();
            const int o = row * FA_LDS + half * 32, ob = row * FA_LDP + half * 32;
            fa_grad_row(Pb + ob, dSb + ob, Ss + o, dPs + o, i0 + row, j0 + half * 32, T, Ls[row],
                        Ds[row], scale);
            __syncthreads(); // the products below read every warp's rows of P and dS
            fa_strip_ab<HD, wmma::col_major>(dv_acc, Pb + warp * 16, FA_LDP, dOs); // dV += P^T dO
            fa_strip_ab<HD, wmma::col_major>(dk_acc, dSb + warp * 16, FA_LDP, Qs); // dK += dS^T Q
        }
    }
    // this warp's rows of Ss are its own since the last __syncthreads
    float* stage = Ss + warp * 16 * FA_LDS;
    const size_t kvoff = (size_t)b * T * ldkv + (size_t)g * HD;
    fa_store_strip<HD>(dk + kvoff, ldkv, dk_acc, stage, j0 + warp * 16, T);
    fa_store_strip<HD>(dv + kvoff, ldkv, dv_acc, stage, j0 + warp * 16, T);
    if (threadIdx.x == 0) tiles[(size_t)bg * nt + kt] = (float)ntiles;
}

template <int HD, typename TQ>
__global__ void __launch_bounds__(FA_THREADS)
    k_flash_dq_bf16(float* dq, float* tiles, const float* dout, const float* D, const float* lse,
                    const TQ* q, const TQ* k, const TQ* v, int T, int H, int KV,
                    float scale) {
    typedef FaSmem<HD> M;
    constexpr int LDB = M::LDB;
    ZK_DYNAMIC_SMEM(smem);
    bf16* Qs = (bf16*)smem;                                  // (BR, HD)
    bf16* dOs = (bf16*)(smem + M::tile);                     // (BR, HD)
    bf16* Ks = (bf16*)(smem + 2 * M::tile);                  // (BC, HD)
    bf16* Vs = (bf16*)(smem + 3 * M::tile);                  // (BC, HD)
    float* Ss = (float*)(smem + 4 * M::tile);                // (BR, BC)
    float* dPs = (float*)(smem + 4 * M::tile + M::s);        // (BR, BC)
    bf16* dSb = (bf16*)(smem + 4 * M::tile + 2 * M::s);      // (BR, BC)
    float* Ls = (float*)(smem + 4 * M::tile + 2 * M::s + M::p); // (BR) lse
    float* Ds = Ls + FA_BR;                                     // (BR) D
    const int qt = blockIdx.x, bh = blockIdx.y, b = bh / H, h = bh % H, g = h / (H / KV);
    const int i0 = qt * FA_BR, ldq = H * HD, ldkv = KV * HD;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = warp * 16 + lane / 2, half = lane % 2;
    const size_t hoff = (size_t)b * T * ldq + (size_t)h * HD, kvoff = (size_t)b * T * ldkv + (size_t)g * HD;
    fa_load_tile<HD>(Qs, q + hoff, ldq, i0, T);
    fa_load_tile<HD>(dOs, dout + hoff, ldq, i0, T);
    for (int x = threadIdx.x; x < FA_BR; x += FA_THREADS) {
        const bool in = i0 + x < T;
        Ls[x] = in ? lse[(size_t)bh * T + i0 + x] : 0.0f;
        Ds[x] = in ? D[(size_t)bh * T + i0 + x] : 0.0f;
    }
    FragAcc dq_acc[HD / 16]; // this warp's queries i0 + 16 warp .. + 15
    ZK_UNROLL
    for (int n = 0; n < HD / 16; n++) wmma::fill_fragment(dq_acc[n], 0.0f);
    const int ntiles = qt + 1;
    for (int kt = 0; kt < ntiles; kt++) {
        const int j0 = kt * FA_BC;
        __syncthreads(); // every warp is done with the previous K and V
        fa_load_tile<HD>(Ks, k + kvoff, ldkv, j0, T);
        fa_load_tile<HD>(Vs, v + kvoff, ldkv, j0, T);
        __syncthreads();
        fa_strip_abt<HD>(Ss + warp * 16 * FA_LDS, Qs + warp * 16 * LDB, Ks);
        fa_strip_abt<HD>(dPs + warp * 16 * FA_LDS, dOs + warp * 16 * LDB, Vs);
        __syncwarp();
        const int o = row * FA_LDS + half * 32;
        fa_grad_row(nullptr, dSb + row * FA_LDP + half * 32, Ss + o, dPs + o, i0 + row,
                    j0 + half * 32, T, Ls[row], Ds[row], scale);
        __syncwarp();
        fa_strip_ab<HD, wmma::row_major>(dq_acc, dSb + warp * 16 * FA_LDP, FA_LDP, Ks); // dQ += dS K
    }
    fa_store_strip<HD>(dq + hoff, ldq, dq_acc, Ss + warp * 16 * FA_LDS, i0 + warp * 16, T);
    if (threadIdx.x == 0) tiles[(size_t)bh * gridDim.x + qt] = (float)ntiles;
}

bool fa_supported(int hd) { return zrt_attention_bf16_head_dim(hd); }

size_t cu_attention_scratch_floats_bf16(int B, int T, int H, int KV, int hd) {
    if (!fa_supported(hd)) return cu_attention_scratch_floats(B, T, H, KV, hd);
    const size_t nt = (size_t)(T + FA_BR - 1) / FA_BR;
    return (size_t)B * H * T + nt * B * KV + nt * B * H; // D | dK/dV tiles | dQ tiles
}

template <int HD, typename TQ>
void fa_forward(float* out, float* lse, const TQ* q, const TQ* k, const TQ* v, int B,
                int T, int H, int KV, float* scratch) {
    auto kern = k_flash_fwd_bf16<HD, TQ>;
    const size_t smem = FaSmem<HD>::fwd;
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((T + FA_BR - 1) / FA_BR, B * H);
    kern<<<grid, FA_THREADS, smem, g_stream>>>(out, lse, scratch, q, k, v, T, H, KV,
                                               1.0f / sqrtf((float)HD));
    CKL(k_flash_fwd_bf16);
}

template <int HD, typename TQ>
void fa_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                 const float* lse, const TQ* q, const TQ* k, const TQ* v, int B, int T,
                 int H, int KV, float* scratch) {
    const int nt = (T + FA_BR - 1) / FA_BR;
    const float scale = 1.0f / sqrtf((float)HD);
    float* D = scratch;                            // (B, H, T)
    float* dkdv_tiles = D + (size_t)B * H * T;     // (B*KV, nt)
    float* dq_tiles = dkdv_tiles + (size_t)B * KV * nt; // (B*H, nt)
    const size_t rows = (size_t)B * T * H;
    k_att_rowdot<<<blocks_for(rows, 4), 128, 0, g_stream>>>(D, dout, out, B, T, H, HD);
    CKL(k_att_rowdot);
    auto kdkdv = k_flash_dkdv_bf16<HD, TQ>;
    CK(cudaFuncSetAttribute(kdkdv, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)FaSmem<HD>::dkdv));
    kdkdv<<<dim3(nt, B * KV), FA_THREADS, FaSmem<HD>::dkdv, g_stream>>>(
        dk, dv, dkdv_tiles, dout, D, lse, q, k, v, T, H, KV, scale);
    CKL(k_flash_dkdv_bf16);
    auto kdq = k_flash_dq_bf16<HD, TQ>;
    CK(cudaFuncSetAttribute(kdq, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)FaSmem<HD>::dq));
    kdq<<<dim3(nt, B * H), FA_THREADS, FaSmem<HD>::dq, g_stream>>>(dq, dq_tiles, dout, D, lse, q,
                                                                   k, v, T, H, KV, scale);
    CKL(k_flash_dq_bf16);
}

void cu_attention_forward_bf16(float* out, float* lse, const float* q, const float* k,
                               const float* v, int B, int T, int H, int KV, int hd,
                               float* scratch) {
    if (!fa_supported(hd)) return cu_attention_forward(out, lse, q, k, v, B, T, H, KV, hd, scratch);
    PROF(attention_forward);
    if (hd == 64) fa_forward<64>(out, lse, q, k, v, B, T, H, KV, scratch);
    else fa_forward<128>(out, lse, q, k, v, B, T, H, KV, scratch);
}

void cu_attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout,
                                const float* out, const float* lse, const float* q, const float* k,
                                const float* v, int B, int T, int H, int KV, int hd,
                                float* scratch) {
    if (!fa_supported(hd))
        return cu_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, B, T, H, KV, hd, scratch);
    PROF(attention_backward);
    if (hd == 64) fa_backward<64>(dq, dk, dv, dout, out, lse, q, k, v, B, T, H, KV, scratch);
    else fa_backward<128>(dq, dk, dv, dout, out, lse, q, k, v, B, T, H, KV, scratch);
}

/* q, k, v in bf16 (the a16 entries): the flash kernels read them as they
 * are; only at the head dims the flash kernels take (the model keeps q, k,
 * v in bf16 only there). */
void fa_a16_require(int hd) {
    if (!fa_supported(hd)) zk_fail("attention_a16", "head dim without the flash kernels", __FILE__, __LINE__);
}

/* ---- the attention engine of the bf16 table (hd 64 and 128): cuDNN's
 * fused SDPA (kernels/attention_cudnn.h) where cuDNN loads, else the flash
 * kernels above. ZRT_ATTENTION=own keeps the flash kernels, =cudnn insists
 * on cuDNN (fatal without it), auto (the default) takes cuDNN when it opens
 * and, at each shape's first forward, agrees with the flash kernels within
 * 2e-2 (out against its largest value, lse against 1 + |lse|; one download
 * of both engines' outputs, once per shape); a shape cuDNN has no plan for,
 * or one that disagrees, runs
 * the flash kernels. What ran is said once on stderr. The warp emulator has
 * no cuDNN: it always runs the flash kernels. */
enum AttEngine { ATT_UNSET, ATT_OWN, ATT_CUDNN };
AttEngine g_att = ATT_UNSET;
int g_att_insist; /* ZRT_ATTENTION=cudnn */

AttEngine att_engine() {
    if (g_att != ATT_UNSET) return g_att;
    const char* e = getenv("ZRT_ATTENTION");
    const char* want = e && *e ? e : "auto";
    char why[256] = "";
    g_att = ATT_OWN;
    if (strcmp(want, "own") && strcmp(want, "cudnn") && strcmp(want, "auto"))
        zk_fail("ZRT_ATTENTION", "not one of auto, cudnn, own", __FILE__, __LINE__);
    g_att_insist = !strcmp(want, "cudnn");
    if (!strcmp(want, "own")) {
        snprintf(why, sizeof why, "ZRT_ATTENTION=own");
    } else {
#ifdef ZIPCCL_HAVE_CUDA
        if (!zrt_cudnn_sdpa_open((void*)g_stream, why, sizeof why)) g_att = ATT_CUDNN;
#else
        snprintf(why, sizeof why, "the warp emulator has no cuDNN");
#endif
        if (g_att != ATT_CUDNN && g_att_insist) zk_fail("ZRT_ATTENTION=cudnn", why, __FILE__, __LINE__);
    }
    if (g_att == ATT_CUDNN)
        fprintf(stderr, "zrt cuda: attention (bf16, hd 64/128): %s fused SDPA (ZRT_ATTENTION=%s)\n",
                zrt_cudnn_sdpa_version(), want);
    else
        fprintf(stderr, "zrt cuda: attention (bf16, hd 64/128): own flash kernels (cuDNN: %s)\n", why);
    return g_att;
}

/* bf16 buffers of the cuDNN engine: o, do, dq, dk, dv; grown, kept */
uint16_t* att16(int slot, size_t n) {
    static void* buf[5];
    static size_t cap[5];
    buf[slot] = scratch_grow(buf[slot], &cap[slot], n * sizeof(uint16_t));
    return (uint16_t*)buf[slot];
}

/* The shapes cuDNN ran (1) or must not run (-1), by (B, T, H, KV, hd);
 * absent: not tried yet. */
std::map<std::array<int, 5>, int> g_att_shapes;
int& att_shape(int B, int T, int H, int KV, int hd) { return g_att_shapes[{B, T, H, KV, hd}]; }

/* cuDNN's forward into out and lse; 0, or -1 when this shape runs the
 * flash kernels (said once) */
int cudnn_forward(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v, int B, int T,
                  int H, int KV, int hd, float* scratch) {
    if (att_engine() != ATT_CUDNN) return -1;
    const int st = att_shape(B, T, H, KV, hd);
    if (st < 0) return -1;
    const size_t n = (size_t)B * T * H * hd;
    uint16_t* o16 = att16(0, n);
    char why[512];
    if (zrt_cudnn_sdpa_forward(g_dev, o16, lse, q, k, v, B, T, H, KV, hd, why, sizeof why)) {
        if (g_att_insist) zk_fail("ZRT_ATTENTION=cudnn", why, __FILE__, __LINE__);
        fprintf(stderr, "zrt cuda: attention at (B %d, T %d, H %d, KV %d, hd %d): own flash kernels (%s)\n", B, T, H,
                KV, hd, why);
        att_shape(B, T, H, KV, hd) = -1;
        return -1;
    }
    widen_into(out, o16, n);
    if (st == 0) { /* this shape's first forward: the flash kernels' output beside it */
        att_shape(B, T, H, KV, hd) = 1;
        std::vector<float> a(n), b(n);
        CKD(zdev_download(g_dev, a.data(), out, n * sizeof(float)));
        float* own = (float*)zdev_alloc(g_dev, n * sizeof(float));
        float* own_lse = (float*)zdev_alloc(g_dev, (size_t)B * H * T * sizeof(float));
        if (!own || !own_lse) zk_fail("attention self-check", zdev_error(), __FILE__, __LINE__);
        if (hd == 64) fa_forward<64>(own, own_lse, q, k, v, B, T, H, KV, scratch);
        else fa_forward<128>(own, own_lse, q, k, v, B, T, H, KV, scratch);
        CKD(zdev_download(g_dev, b.data(), own, n * sizeof(float)));
        // and the statistics (the flash backward may follow this forward)
        const size_t nl = (size_t)B * H * T;
        std::vector<float> la(nl), lb(nl);
        CKD(zdev_download(g_dev, la.data(), lse, nl * sizeof(float)));
        CKD(zdev_download(g_dev, lb.data(), own_lse, nl * sizeof(float)));
        zdev_free(g_dev, own), zdev_free(g_dev, own_lse);
        double md = 0, mx = 0, ld = 0;
        for (size_t i = 0; i < n; i++) {
            md = fmax(md, fabs((double)a[i] - b[i]));
            mx = fmax(mx, fabs((double)b[i]));
        }
        for (size_t i = 0; i < nl; i++) ld = fmax(ld, fabs((double)la[i] - lb[i]) / (1.0 + fabs((double)lb[i])));
        const double rel = fmax(md / (mx + 1e-30), ld);
        if (!(rel <= 2e-2)) {
            if (g_att_insist) zk_fail("ZRT_ATTENTION=cudnn", "cuDNN's output disagrees with the flash kernels'",
                                      __FILE__, __LINE__);
            fprintf(stderr, "zrt cuda: attention: cuDNN's forward is %.3g (relative: the output's largest value, "
                            "lse's 1 + |lse|) from the flash kernels' at (B %d, T %d, H %d, KV %d, hd %d): own "
                            "flash kernels from now on\n",
                    rel, B, T, H, KV, hd);
            g_att = ATT_OWN;
            return -1;
        }
        fprintf(stderr, "zrt cuda: attention at (B %d, T %d, H %d, KV %d, hd %d): cuDNN, within %.2g of the flash "
                        "kernels\n", B, T, H, KV, hd, rel);
    }
    return 0;
}

int cudnn_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                   const uint16_t* q, const uint16_t* k, const uint16_t* v, int B, int T, int H, int KV, int hd) {
    if (att_engine() != ATT_CUDNN || att_shape(B, T, H, KV, hd) <= 0) return -1;
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd;
    uint16_t *o16 = att16(0, nq), *do16 = att16(1, nq), *dq16 = att16(2, nq), *dk16 = att16(3, nkv),
             *dv16 = att16(4, nkv);
    round_into(o16, out, nq); // exact: out is the widening of cuDNN's bf16 output
    round_into(do16, dout, nq);
    char why[512];
    if (zrt_cudnn_sdpa_backward(g_dev, dq16, dk16, dv16, do16, o16, lse, q, k, v, B, T, H, KV, hd, why,
                                sizeof why)) {
        if (g_att_insist) zk_fail("ZRT_ATTENTION=cudnn", why, __FILE__, __LINE__);
        fprintf(stderr, "zrt cuda: attention backward at (B %d, T %d, H %d, KV %d, hd %d): own flash kernels from "
                        "now on, both directions (%s)\n", B, T, H, KV, hd, why);
        att_shape(B, T, H, KV, hd) = -1;
        return -1;
    }
    widen_into(dq, dq16, nq), widen_into(dk, dk16, nkv), widen_into(dv, dv16, nkv);
    return 0;
}

void cu_attention_forward_a16(float* out, float* lse, const uint16_t* q, const uint16_t* k,
                              const uint16_t* v, int B, int T, int H, int KV, int hd, float* scratch) {
    PROF(attention_forward);
    fa_a16_require(hd);
    if (!cudnn_forward(out, lse, q, k, v, B, T, H, KV, hd, scratch)) return;
    if (hd == 64) fa_forward<64>(out, lse, q, k, v, B, T, H, KV, scratch);
    else fa_forward<128>(out, lse, q, k, v, B, T, H, KV, scratch);
}

void cu_attention_backward_a16(float* dq, float* dk, float* dv, const float* dout, const float* out,
                               const float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                               int B, int T, int H, int KV, int hd, float* scratch) {
    PROF(attention_backward);
    fa_a16_require(hd);
    if (!cudnn_backward(dq, dk, dv, dout, out, lse, q, k, v, B, T, H, KV, hd)) return;
    if (hd == 64) fa_backward<64>(dq, dk, dv, dout, out, lse, q, k, v, B, T, H, KV, scratch);
    else fa_backward<128>(dq, dk, dv, dout, out, lse, q, k, v, B, T, H, KV, scratch);
}

void cu_swiglu_forward(float* h, const float* gate, const float* up, int N, int F) {
    PROF(swiglu_forward);
    const size_t n = (size_t)N * F;
    auto kern = k_swiglu_fwd<float>;
    kern<<<blocks_for(n, 256), 256, 0, g_stream>>>(h, gate, up, n);
    CKL(k_swiglu_fwd);
}

void cu_swiglu_forward_a16(uint16_t* h, const float* gate, const float* up, int N, int F) {
    PROF(swiglu_forward);
    const size_t n = (size_t)N * F;
    auto kern = k_swiglu_fwd<uint16_t>;
    kern<<<blocks_for(n, 256), 256, 0, g_stream>>>(h, gate, up, n);
    CKL(k_swiglu_fwd);
}

void cu_swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate,
                        const float* up, int N, int F) {
    PROF(swiglu_backward);
    const size_t n = (size_t)N * F;
    k_swiglu_bwd<<<blocks_for(n, 256), 256, 0, g_stream>>>(dgate, dup, dh, gate, up, n);
    CKL(k_swiglu_bwd);
}

void cu_embedding_forward(float* out, const int* tokens, const float* table, int N, int C) {
    PROF(embedding_forward);
    k_embedding_fwd<<<blocks_for((size_t)N * C, 256), 256, 0, g_stream>>>(out, tokens, table, N, C);
    CKL(k_embedding_fwd);
}

void cu_embedding_forward_w16(float* out, const int* tokens, const uint16_t* table, int N,
                              int C) {
    PROF(embedding_forward);
    k_embedding_fwd_w16<<<blocks_for((size_t)N * C, 256), 256, 0, g_stream>>>(out, tokens, table, N, C);
    CKL(k_embedding_fwd_w16);
}

void cu_embedding_backward(float* dtable, const float* dout, const int* tokens, int N, int C) {
    PROF(embedding_backward);
    if (N <= 0) return;
    static void* scratch = nullptr; // order (N), kept for the process
    static size_t cap = 0;
    scratch = scratch_grow(scratch, &cap, (size_t)N * sizeof(int));
    int* order = (int*)scratch;
    k_embedding_order<<<blocks_for(N, EMB_TILE), EMB_TILE, 0, g_stream>>>(order, tokens, N);
    CKL(k_embedding_order);
    k_embedding_runs<<<N, 128, 0, g_stream>>>(dtable, dout, tokens, order, N, C);
    CKL(k_embedding_runs);
}

void cu_crossentropy_forward_backward(float* dlogits, float* losses, const float* logits,
                                      const int* targets, int N, int V, float dscale,
                                      double* loss_sum) {
    PROF(crossentropy_forward_backward);
    k_crossentropy<<<N, 256, 0, g_stream>>>(dlogits, losses, logits, targets, V, dscale);
    CKL(k_crossentropy);
    // the sum on the device in row order, in double, like the CPU backend
    // (one thread: the order is the point), added into *loss_sum there
    k_loss_sum<<<1, 1, 0, g_stream>>>(loss_sum, losses, targets, N);
    CKL(k_loss_sum);
}

void cu_moe_route(float* probs, int* sel, float* w, const float* logits, int N, int E, int k,
                  int norm_topk) {
    PROF(moe_route);
    if (N <= 0) return;
    k_moe_route<<<blocks_for(N, 128), 128, 0, g_stream>>>(probs, sel, w, logits, N, E, k, norm_topk);
    CKL(k_moe_route);
}

void cu_moe_prob_sum(double* acc, const float* probs, int N, int E) {
    PROF(moe_prob_sum);
    if (E <= 0) return;
    k_moe_prob_sum<<<blocks_for(E, 128), 128, 0, g_stream>>>(acc, probs, N, E);
    CKL(k_moe_prob_sum);
}

void cu_moe_gather(float* xs, const float* x, const int* pos, int N, int k, int C) {
    PROF(moe_gather);
    if (N <= 0) return;
    k_moe_gather<<<N * k, 128, 0, g_stream>>>(xs, x, pos, k, C);
    CKL(k_moe_gather);
}

void cu_moe_combine(float* out, const float* ys, const float* w, const int* pos, int N, int k,
                    int C) {
    PROF(moe_combine);
    if (N <= 0) return;
    k_moe_combine<<<N, 128, 0, g_stream>>>(out, ys, w, pos, k, C);
    CKL(k_moe_combine);
}

void cu_moe_combine_backward(float* dw, float* dys, const float* dout, const float* ys,
                             const float* w, const int* pos, int N, int k, int C) {
    PROF(moe_combine_backward);
    if (N <= 0) return;
    k_moe_combine_bwd<<<N * k, 128, 0, g_stream>>>(dw, dys, dout, ys, w, pos, k, C);
    CKL(k_moe_combine_bwd);
}

void cu_moe_router_backward(float* dlogits, const float* probs, const int* sel, const float* w,
                            const float* dw, const float* aux, int N, int E, int k,
                            int norm_topk) {
    PROF(moe_router_backward);
    if (N <= 0) return;
    k_moe_router_bwd<<<blocks_for(N, 128), 128, 0, g_stream>>>(dlogits, probs, sel, w, dw, aux, N, E, k,
                                                  norm_topk);
    CKL(k_moe_router_bwd);
}

void cu_add(float* out, const float* a, const float* b, size_t n) {
    PROF(add);
    k_add<<<blocks_for(n, 256), 256, 0, g_stream>>>(out, a, b, n);
    CKL(k_add);
}

void cu_zero(float* x, size_t n) {
    PROF(zero);
    CKD(zdev_memset_async(g_dev, x, 0, n * sizeof(float), g_stream));
}

void cu_round_to_bf16(uint16_t* out, const float* in, size_t n) {
    PROF(round_to_bf16);
    round_into(out, in, n);
}

void cu_bf16_to_float(float* out, const uint16_t* in, size_t n) {
    PROF(bf16_to_float);
    widen_into(out, in, n);
}

void cu_round_bf16_inplace(float* x, size_t n) {
    PROF(round_bf16_inplace);
    k_round_bf16<<<blocks_for(n, 256), 256, 0, g_stream>>>(x, n);
    CKL(k_round_bf16);
}

void cu_add_bf16(float* acc, const uint16_t* in, size_t n) {
    PROF(add_bf16);
    if (!n) return;
    k_add_bf16<<<blocks_for(n, 256), 256, 0, g_stream>>>(acc, in, n);
    CKL(k_add_bf16);
}

void cu_adamw(float* p, const float* g, float* m, float* v, size_t n, const ZrtAdamWStep* s) {
    PROF(adamw);
    if (!n) return;
    k_adamw<<<blocks_for(n, 256), 256, 0, g_stream>>>(p, g, m, v, n, *s);
    CKL(k_adamw);
}

void cu_sumsq(double* out, const float* x, size_t n) {
    PROF(sumsq);
    const size_t nb = (n + ZRT_SUMSQ_BLOCK - 1) / ZRT_SUMSQ_BLOCK;
    // the block sums: a device buffer kept for the process
    static void* d = nullptr;
    static size_t cap = 0;
    d = scratch_grow(d, &cap, (nb ? nb : 1) * sizeof(double));
    if (nb) {
        k_sumsq_blocks<<<blocks_for(nb, 128), 128, 0, g_stream>>>((double*)d, x, n, nb);
        CKL(k_sumsq_blocks);
    }
    k_sum_in_order<<<1, 1, 0, g_stream>>>(out, (const double*)d, nb);
    CKL(k_sum_in_order);
}

/* A host table kept on the device: uploaded when its bytes differ from the
 * last upload's (a trainer's tables are the same every step), grown like
 * the scratch. Returns the device copy; *changed (if given) says whether
 * it was uploaded, so tables derived from it need remaking only then. */
struct DevTable {
    void* dev = nullptr;
    size_t cap = 0;
    std::vector<unsigned char> last;
};
static void* dev_table(DevTable* t, const void* host, size_t bytes, bool* changed = nullptr) {
    const bool same = t->last.size() == bytes && !memcmp(t->last.data(), host, bytes);
    if (changed) *changed = !same || !t->dev;
    if (same && t->dev) return t->dev;
    t->dev = scratch_grow(t->dev, &t->cap, bytes ? bytes : 1);
    if (bytes) CKD(zdev_upload(g_dev, t->dev, host, bytes)); // a host wait, when the table changes
    t->last.assign((const unsigned char*)host, (const unsigned char*)host + bytes);
    return t->dev;
}

void cu_adamw_multi(const ZrtAdamWSlice* sl, int ns, const ZrtAdamWStep* s, float gscale, float clip) {
    PROF(adamw_multi);
    static DevTable slices, chunks;
    static std::vector<AdamChunk> host;
    static const AdamChunk* dch = nullptr;
    if (ns <= 0) return;
    bool changed = false;
    const ZrtAdamWSlice* dsl = (const ZrtAdamWSlice*)dev_table(&slices, sl, (size_t)ns * sizeof *sl, &changed);
    /* the chunk list follows from the slices' lengths: remade only when the
     * slice table changed (once), not walked every step */
    if (changed) {
        host.clear();
        for (int k = 0; k < ns; k++)
            for (size_t a = 0; a < sl[k].n; a += kAdamChunk) host.push_back(AdamChunk{k, a});
        if (!host.empty())
            dch = (const AdamChunk*)dev_table(&chunks, host.data(), host.size() * sizeof(AdamChunk));
    }
    if (host.empty()) return;
    k_adamw_multi<<<(unsigned)host.size(), 256, 0, g_stream>>>(dsl, dch, *s, gscale, clip);
    CKL(k_adamw_multi);
}

void cu_sumsq_multi(double* out, float* const* x, const size_t* n, int nx, float gscale) {
    PROF(sumsq_multi);
    static DevTable xs, ns, blks, firsts;
    static std::vector<SumsqBlock> hb;
    static std::vector<size_t> hf;
    static void* part = nullptr;
    static size_t cap = 0;
    static const size_t* df = nullptr;
    static const SumsqBlock* db = nullptr;
    if (nx <= 0) return;
    const float* const* dx = (const float* const*)dev_table(&xs, x, (size_t)nx * sizeof *x);
    bool changed = false;
    const size_t* dn = (const size_t*)dev_table(&ns, n, (size_t)nx * sizeof *n, &changed);
    /* the block list follows from the lengths: remade only when they change */
    if (changed) {
        hb.clear();
        hf.assign(1, 0);
        for (int k = 0; k < nx; k++) {
            for (size_t a = 0; a < n[k]; a += ZRT_SUMSQ_BLOCK) hb.push_back(SumsqBlock{k, a});
            hf.push_back(hb.size());
        }
        df = (const size_t*)dev_table(&firsts, hf.data(), hf.size() * sizeof(size_t));
        if (!hb.empty()) db = (const SumsqBlock*)dev_table(&blks, hb.data(), hb.size() * sizeof(SumsqBlock));
    }
    const size_t nb = hb.size();
    part = scratch_grow(part, &cap, (nb ? nb : 1) * sizeof(double));
    if (nb) {
        k_sumsq_multi_blocks<<<blocks_for(nb, 128), 128, 0, g_stream>>>((double*)part, dx, dn, db, nb, gscale);
        CKL(k_sumsq_multi_blocks);
    }
    k_sum_runs_in_order<<<blocks_for((size_t)nx, 128), 128, 0, g_stream>>>(out, (const double*)part, df, nx);
    CKL(k_sum_runs_in_order);
}

void cu_scale(float* x, size_t n, float factor) {
    PROF(scale);
    if (!n) return;
    k_scale<<<blocks_for(n, 256), 256, 0, g_stream>>>(x, n, factor);
    CKL(k_scale);
}

ZrtKernels make_table() {
    ZrtKernels t{}; // entries a table leaves out are NULL (the fp32 table's a16 entries)
    t.name = "cuda";
    t.dev = nullptr; // set by zrt_kernels_cuda
    t.matmul_forward = cu_matmul_forward;
    t.matmul_backward = cu_matmul_backward;
    t.matmul_forward_w16 = cu_matmul_forward_w16;
    t.matmul_backward_w16 = cu_matmul_backward_w16;
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
    t.embedding_forward_w16 = cu_embedding_forward_w16;
    t.embedding_backward = cu_embedding_backward;
    t.crossentropy_forward_backward = cu_crossentropy_forward_backward;
    t.moe_route = cu_moe_route;
    t.moe_prob_sum = cu_moe_prob_sum;
    t.moe_gather = cu_moe_gather;
    t.moe_combine = cu_moe_combine;
    t.moe_combine_backward = cu_moe_combine_backward;
    t.moe_router_backward = cu_moe_router_backward;
    t.add = cu_add;
    t.zero = cu_zero;
    t.round_to_bf16 = cu_round_to_bf16;
    t.bf16_to_float = cu_bf16_to_float;
    t.round_bf16_inplace = cu_round_bf16_inplace;
    t.add_bf16 = cu_add_bf16;
    t.adamw = cu_adamw;
    t.sumsq = cu_sumsq;
    t.scale = cu_scale;
    t.adamw_multi = cu_adamw_multi;
    t.sumsq_multi = cu_sumsq_multi;
    return t;
}

ZrtKernels cuda_table = make_table();

ZrtKernels make_table_bf16() {
    ZrtKernels t = make_table();
    t.name = "cuda_bf16";
    t.matmul_forward = cu_matmul_forward_bf16;
    t.matmul_backward = cu_matmul_backward_bf16;
    t.matmul_forward_w16 = cu_matmul_forward_bf16_w16;
    t.matmul_backward_w16 = cu_matmul_backward_bf16_w16;
    t.attention_forward = cu_attention_forward_bf16;
    t.attention_backward = cu_attention_backward_bf16;
    t.attention_scratch_floats = cu_attention_scratch_floats_bf16;
    t.rmsnorm_forward_a16 = cu_rmsnorm_forward_a16;
    t.swiglu_forward_a16 = cu_swiglu_forward_a16;
    t.matmul_forward_a16 = cu_matmul_forward_a16;
    t.matmul_backward_a16 = cu_matmul_backward_a16;
    t.rope_forward_a16 = cu_rope_forward_a16;
    t.attention_forward_a16 = cu_attention_forward_a16;
    t.attention_backward_a16 = cu_attention_backward_a16;
    const char* gg = getenv("ZRT_GROUPED_GEMM");
    if (!gg || strcmp(gg, "0")) {
        t.matmul_forward_grouped_a16 = cu_matmul_forward_grouped_a16;
        t.matmul_backward_grouped_a16 = cu_matmul_backward_grouped_a16;
    }
    return t;
}
ZrtKernels cuda_table_bf16 = make_table_bf16();

/* Set up the tables on dev: cuBLAS on its compute stream, true fp32. */
int setup(ZDevice* dev) {
    if (!dev) dev = zdev_cuda(0);
    if (!dev) {
        snprintf(g_err, sizeof g_err, "%s", zdev_error());
        return -1;
    }
    if (g_dev) {
        if (g_dev == dev) return 0;
        snprintf(g_err, sizeof g_err, "the CUDA tables run on %s already (one device per process), not on %s",
                 g_dev->label, dev->label);
        return -1;
    }
    if (dev->kind != ZDEV_KIND_CUDA) {
        snprintf(g_err, sizeof g_err, "the CUDA tables need a CUDA device, not %s", dev->name);
        return -1;
    }
    if (zdev_bind(dev)) {
        snprintf(g_err, sizeof g_err, "%s", zdev_error());
        return -1;
    }
    cublasStatus_t st = cublasCreate(&g_handle);
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasSetStream(g_handle, (cudaStream_t)dev->stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(g_err, sizeof g_err, "cuBLAS on %s: %s", dev->label, cublasGetStatusString(st));
        if (g_handle) cublasDestroy(g_handle);
        g_handle = nullptr;
        return -1;
    }
    // true fp32: no TF32, no reduced-precision reductions (the CPU-matching mode)
    cublasSetMathMode(g_handle, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                               CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    g_dev = dev;
    g_stream = (cudaStream_t)dev->stream;
    cuda_table.dev = cuda_table_bf16.dev = dev;
    prof_start();
    g_err[0] = 0;
    return 0;
}

} // namespace

/* NULL when no device is usable, with the reason in zrt_cuda_error(). */
extern "C" const ZrtKernels* zrt_kernels_cuda(ZDevice* dev) {
    return setup(dev) ? NULL : &cuda_table;
}

extern "C" const ZrtKernels* zrt_kernels_cuda_bf16(ZDevice* dev) {
    return setup(dev) ? NULL : &cuda_table_bf16;
}

extern "C" const char* zrt_cuda_error(void) { return g_err; }
