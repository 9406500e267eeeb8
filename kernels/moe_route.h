/*
 * moe_route.h — the MoE router's routing of one row, written once for both
 * kernel tables: kernels/cpu.c calls it per row from an OpenMP loop,
 * kernels/cuda.cu from a kernel with one thread per row (and the warp
 * emulator compiles that file as plain C++, where it is an ordinary inline
 * function). One copy keeps the two tables' floating-point operations in
 * one order and their tie rule one rule; they differ only in their expf.
 *
 * Leaves out: the loop over rows (the tables' business) and the backward
 * (moe_router_backward, per table).
 */
#ifndef KERNELS_MOE_ROUTE_H
#define KERNELS_MOE_ROUTE_H
#include <math.h>

#ifdef __CUDACC__
#define MOE_ROUTE_FN __host__ __device__ static inline
#else
#define MOE_ROUTE_FN static inline
#endif

/* One row of kernels.h's moe_route: p (E) = softmax(l) (E); sel (k) the k
 * most probable experts, descending, ties to the lower index (a later
 * expert must be strictly more probable to displace one); w (k) their
 * probabilities, divided by their sum when norm_topk. k <= E. The maximum
 * is a compare and select, not fmaxf: both skip NaNs and differ only in the
 * sign of a zero maximum, which leaves every expf(l[e] - mx) the same. */
MOE_ROUTE_FN void moe_route_row(float* p, int* sel, float* w, const float* l, int E, int k,
                                int norm_topk) {
    float mx = -INFINITY, sum = 0.0f;
    for (int e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++) sum += p[e] = expf(l[e] - mx);
    const float inv = 1.0f / sum;
    for (int e = 0; e < E; e++) p[e] *= inv;
    float wsum = 0.0f;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j; i++) taken |= sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[j] = best;
        wsum += w[j] = p[best];
    }
    if (norm_topk)
        for (int j = 0; j < k; j++) w[j] /= wsum;
}

#undef MOE_ROUTE_FN
#endif
