/*
 * tests/gpu/emu/mma.h — stands in for CUDA's <mma.h> under the warp emulator
 * (cuda_emu_runtime.h): the subset of nvcuda::wmma that kernels/cuda.cu's
 * flash attention uses, 16x16x16 tiles with bf16 operands and fp32
 * accumulators.
 *
 * A fragment is distributed over the warp as on a device: each of the 32
 * lanes holds 8 of the tile's 256 elements (num_elements, x[]), lane l slot
 * i holding element e = l + 32 i of the row-major 16x16 tile. WMMA leaves
 * the per-lane layout unspecified, and this one is no device's: a kernel
 * that read or wrote x[] as if it knew which element it holds would compute
 * garbage here. Loads and stores move each lane's own elements; mma_sync is
 * a warp collective (every lane publishes its fragments, __syncwarp, each
 * lane computes its 8 outputs from the whole tile, __syncwarp again, so no
 * lane reuses a fragment another is still reading), which also catches a
 * divergent mma. Products of two bf16 values are exact in fp32; they are
 * summed onto the accumulator in k order (a tensor core's order is its own,
 * so sums may differ from a device's in the last bits).
 */
#ifndef ZIPCCL_TEST_EMU_MMA_H
#define ZIPCCL_TEST_EMU_MMA_H
#include <type_traits>

#include "cuda_emu_runtime.h"

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 tiles only");
    enum { num_elements = 8 };
    T x[num_elements];
};

namespace detail {
inline unsigned lane() { return emu::cur & 31; }
inline unsigned warp() { return emu::cur >> 5; }
/* element e of the row-major tile: lane e % 32, slot e / 32 */
inline int elem(unsigned l, int i) { return (int)l + 32 * i; }
inline float widen(__nv_bfloat16 b) {
    const uint32_t u = (uint32_t)b.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline float widen(float f) { return f; }
/* each lane's fragments for the running mma_sync: [warp][lane] */
inline const void* pub_a[32][32];
inline const void* pub_b[32][32];
/* (row, col) of element e in memory, for the fragment's layout */
inline size_t at(int r, int c, unsigned ldm, bool col) {
    return col ? (size_t)c * ldm + r : (size_t)r * ldm + c;
}
} // namespace detail

template <class Use, class T, class L, class P>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L>& f, const P* p, unsigned ldm) {
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load names its layout");
    const bool col = std::is_same<L, col_major>::value;
    for (int i = 0; i < 8; i++) {
        const int e = detail::elem(detail::lane(), i);
        f.x[i] = p[detail::at(e / 16, e % 16, ldm, col)];
    }
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t layout) {
    for (int i = 0; i < 8; i++) {
        const int e = detail::elem(detail::lane(), i);
        f.x[i] = p[detail::at(e / 16, e % 16, ldm, layout == mem_col_major)];
    }
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
    for (int i = 0; i < 8; i++) {
        const int e = detail::elem(detail::lane(), i);
        p[detail::at(e / 16, e % 16, ldm, layout == mem_col_major)] = f.x[i];
    }
}

template <class Use, class T, class L>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L>& f, T v) {
    for (int i = 0; i < 8; i++) f.x[i] = v;
}

/* d = a b + c, every lane of the warp together */
template <class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
                     const fragment<matrix_a, 16, 16, 16, T, LA>& a,
                     const fragment<matrix_b, 16, 16, 16, T, LB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c) {
    typedef fragment<matrix_a, 16, 16, 16, T, LA> FA;
    typedef fragment<matrix_b, 16, 16, 16, T, LB> FB;
    const unsigned w = detail::warp(), l = detail::lane();
    detail::pub_a[w][l] = &a;
    detail::pub_b[w][l] = &b;
    emu_syncwarp();
    float out[8];
    for (int i = 0; i < 8; i++) {
        const int e = detail::elem(l, i), m = e / 16, n = e % 16;
        float s = c.x[i];
        for (int k = 0; k < 16; k++) {
            const int ea = m * 16 + k, eb = k * 16 + n;
            const FA* fa = (const FA*)detail::pub_a[w][ea % 32];
            const FB* fb = (const FB*)detail::pub_b[w][eb % 32];
            s += detail::widen(fa->x[ea / 32]) * detail::widen(fb->x[eb / 32]);
        }
        out[i] = s;
    }
    emu_syncwarp();
    for (int i = 0; i < 8; i++) d.x[i] = out[i];
}
} // namespace wmma
} // namespace nvcuda
#endif
