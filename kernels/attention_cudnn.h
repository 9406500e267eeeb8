/*
 * attention_cudnn.h — cuDNN's fused scaled-dot-product attention (its flash
 * engine) as an engine of the bf16 CUDA table's attention (kernels/cuda.cu),
 * through the cuDNN frontend's graph API, header-only, with cuDNN itself
 * loaded at run time (dlopen of libcudnn.so.9): a build needs the
 * frontend's headers and cudnn.h, a run finds the library where the dynamic
 * loader looks (LD_LIBRARY_PATH; a GPU machine's PyTorch ships one), and
 * without it the table runs its own flash kernels and says why.
 *
 * Causal, softmax scale 1/sqrt(hd), grouped-query (KV heads shared by
 * H/KV query heads), bf16 q, k, v in the table's layout (B, T, heads, hd),
 * fp32 statistics: the log-sum-exp of each row's scaled scores, the same
 * quantity as the table's lse, so either engine's backward can follow
 * either's forward. Outputs in bf16 (cuDNN's io type); kernels/cuda.cu
 * widens them into its fp32 outputs.
 *
 * One graph per direction and shape, built at first use and kept. Every
 * entry returns 0, or -1 with the reason in why (cuDNN absent, no engine for
 * the shape, a failed execution); the caller falls back. Built without the
 * frontend (ZRT_CUDNN_SDPA undefined) every entry returns -1, saying so.
 */
#ifndef KERNELS_ATTENTION_CUDNN_H
#define KERNELS_ATTENTION_CUDNN_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "device.h"

/* Load cuDNN and make its handle on `stream` (a cudaStream_t). Once per
 * process; later calls return the first one's result. */
int zrt_cudnn_sdpa_open(void* stream, char* why, size_t n);
/* "cuDNN 9.x.y" once open, else "" */
const char* zrt_cudnn_sdpa_version(void);

/* o (B, T, H, hd) bf16, stats (B, H, T) fp32 from q (B, T, H, hd), k, v
 * (B, T, KV, hd) bf16; dev gives the workspace. */
int zrt_cudnn_sdpa_forward(ZDevice* dev, uint16_t* o, float* stats, const uint16_t* q, const uint16_t* k,
                           const uint16_t* v, int B, int T, int H, int KV, int hd, char* why, size_t n);
/* dq (B, T, H, hd), dk, dv (B, T, KV, hd) bf16, overwritten, from do_ and
 * the forward's o and stats. */
int zrt_cudnn_sdpa_backward(ZDevice* dev, uint16_t* dq, uint16_t* dk, uint16_t* dv, const uint16_t* do_,
                            const uint16_t* o, const float* stats, const uint16_t* q, const uint16_t* k,
                            const uint16_t* v, int B, int T, int H, int KV, int hd, char* why, size_t n);

#ifdef __cplusplus
}
#endif
#endif
