/*
 * codec_cuda.cu — ZipCCL's CUDA codec: the frame format of docs/FORMAT.md,
 * encoded and decoded on the device, byte-identical to the CPU reference
 * encoder (codec_cpu.c) for the same input and parameters (FORMAT.md §7).
 *
 * Shape of the work:
 *   compress    k_encode_t (codec fast: T chunks, C for a constant chunk) /
 *               k_encode_f3 (codec f3): one block of 8 warps per chunk,
 *               each warp a run of its groups, a scan over the warps placing
 *               every section, each byte written once; k_encode_f2 (codec
 *               f2) / k_encode_r (codec dense): one warp per chunk.  One
 *               pass over the output: each chunk learns its size before it
 *               writes, its place from the chunks before it by a decoupled
 *               look-back (zk_lookback), and writes itself, its table entry
 *               and its XXH32 straight into the frame; k_head (one warp)
 *               writes the header and its checksum.  The host reads the
 *               total (it needs it anyway to post the send) and emits a
 *               stored frame instead when the coded one would not be
 *               smaller.  The workspace: 8 bytes a chunk.
 *   decompress  k_dhead reads and checks the 16-byte header on the device
 *               (zk_hdr_parse, the host's own rules); k_dplan checks the
 *               header checksum and the chunk table and prefix-sums the
 *               chunk offsets; k_dsums checks chunk checksums; k_ddecode
 *               (blocks of 8 warps over the chunks: T and F3 chunks split
 *               over the warps as the encoders split them, F2 and R by warp
 *               0) validates and decodes each chunk; k_dstore copies a
 *               stored frame's data once it passed.  The host reads the
 *               verdicts (and the header, to name a fault) in one copy at
 *               the end: one host wait. Every read
 *               is bounded by sizes validated before it, so a corrupt frame
 *               returns zipcclCorruptStream and never faults or writes outside
 *               the caller's output.
 *
 * Lane mapping. F3 and F2 primary planes and the fp16 rest planes: a warp
 * handles a 64-element group, lane l owning elements 64g+l and 64g+32+l, so
 * each u64 plane word is two ballots. F2's second tier and all escapes are
 * sequences in element order: a ballot over a 32-element half gives each
 * lane its rank (popc of the lanes below) after a running count. Secondary
 * plane words are built compacted: lane t fetches (shuffle) the code of the
 * half's t-th second-tier entry, so a ballot yields 32 consecutive entries'
 * bits. R: lane l is the format's rANS lane l (elements l, l+32, ...), so a
 * warp step covers 32 consecutive elements.
 *
 * Host emulation. With ZIPCCL_CUDA_EMU defined this file compiles as plain
 * C++: the kernels' bodies run on the host under the warp emulator of
 * tests/gpu/cuda_emu.cc, which checks them byte for byte against the CPU
 * codec on machines without a GPU. Every warp intrinsic, launch and copy goes
 * through the ZK_* macros for that reason.
 *
 * Batched entries (zipcclCompressCudaBatch / zipcclDecompressCudaBatch,
 * section 10): compress codes up to ZK_BATCH_MAX buffers in one launch of
 * the encoder and one of k_head (their chunks numbered one after the
 * other), the totals written into the workspace's head; decompress reads
 * and checks the headers on the device too and runs its five kernels once
 * for up to ZK_BATCH_MAX frames (section 8b), each frame's verdict and
 * header left in the workspace's head.  Each is read in one copy: one host
 * wait for k frame sizes, one for k verdicts.  The same kernels as k
 * single calls, so the same bytes.
 *
 * Left out: an encoder for chunk_log2 other than 14 (decoding accepts 10..20),
 * 16-byte vector loads of the input (the encoders load elements), frame sizes
 * handed to the next kernel without the host (the collectives need them on
 * the host for MPI anyway), overlapping several frames on streams (the
 * collectives do that).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "zipccl_internal.h"
}
#include "codec_format.h"
#include "device.h" /* zdev_count_sync: the codec's host waits are counted with the device's */

/* ------------------------------------------------------------------------ */
/* 1. Execution-space shims: CUDA or the host warp emulator                  */
/* ------------------------------------------------------------------------ */

#ifdef ZIPCCL_CUDA_EMU
/* emu_tid, emu_bid, emu_smem, emu_ballot, emu_shfl, emu_syncwarp, emu_check_align, emu_fail,
 * emu_syncthreads and emu_launch are defined by the including emulator. */
#define ZK static inline
#define ZKHD static inline
#define ZK_TID() emu_tid()
#define ZK_BID() emu_bid()
#define ZK_SMEM() emu_smem()
#define ZK_BALLOT(p) emu_ballot((p) ? 1 : 0)
#define ZK_SHFL(v, src) emu_shfl((uint32_t)(v), (int)(src))
#define ZK_SYNCWARP() emu_syncwarp()
#define ZK_SYNCTHREADS() emu_syncthreads()
#define ZK_ATOMIC_OR(p, v) (*(p) |= (v))
#define ZK_ATOMIC_MAX(p, v) (*(p) = *(p) > (v) ? *(p) : (v))
#define ZK_TICKET(p) ((*(p))++)
#define ZK_LOOK_LD(p) (*(p))
#define ZK_LOOK_ST(p, v) (*(p) = (v))
/* Blocks run one after another: a look-back waits only on a warp of its own
 * block, which runs on at the waiter's next ballot.  A wait that never
 * ends is a bug, not a slow peer. */
ZK void zk_lb_pause(uint64_t spins) {
    if (spins > 1000000) emu_fail("look-back: a chunk before this one never published its size");
}
#define ZK_LB_KEEP(c) ((c) % 37 == 0)
/* What the look-backs did, for tests/gpu/cuda_emu.cc to see every path run. */
struct ZkLbStats {
    uint64_t waits, aggregates, windows;
};
inline ZkLbStats zk_lb_stats;
#define ZK_LB_COUNT(field, n) (zk_lb_stats.field += (n))
#define ZK_UNROLL
ZK int zk_popc(uint32_t x) { return __builtin_popcount(x); }
/* The aligned accesses fault on a device when misaligned: here they stop
 * the emulator (emu_check_align) instead. */
ZK uint16_t zk_ld16a(const uint8_t* p) { uint16_t v; emu_check_align(p, 2); memcpy(&v, p, 2); return v; }
ZK uint32_t zk_ld32a(const uint8_t* p) { uint32_t v; emu_check_align(p, 4); memcpy(&v, p, 4); return v; }
ZK uint64_t zk_ld64a(const uint8_t* p) { uint64_t v; emu_check_align(p, 8); memcpy(&v, p, 8); return v; }
ZK void zk_st16a(uint8_t* p, uint16_t v) { emu_check_align(p, 2); memcpy(p, &v, 2); }
ZK void zk_st32a(uint8_t* p, uint32_t v) { emu_check_align(p, 4); memcpy(p, &v, 4); }
ZK void zk_st64a(uint8_t* p, uint64_t v) { emu_check_align(p, 8); memcpy(p, &v, 8); }
#else
#include <cuda_runtime.h>
#define ZK static __device__ __forceinline__
#define ZKHD static __host__ __device__ __forceinline__
extern __shared__ __align__(16) uint8_t zk_smem_dyn[];
#define ZK_TID() threadIdx.x
#define ZK_BID() blockIdx.x
#define ZK_SMEM() zk_smem_dyn
#define ZK_BALLOT(p) __ballot_sync(0xffffffffu, (p) ? 1 : 0)
#define ZK_SHFL(v, src) __shfl_sync(0xffffffffu, (uint32_t)(v), (int)(src))
#define ZK_SYNCWARP() __syncwarp()
#define ZK_SYNCTHREADS() __syncthreads()
#define ZK_ATOMIC_OR(p, v) atomicOr((p), (v))
#define ZK_ATOMIC_MAX(p, v) atomicMax((p), (v))
#define ZK_TICKET(p) atomicAdd((p), 1u)
#define ZK_LOOK_LD(p) (*(volatile uint64_t*)(p)) /* one 64-bit access: state and value together */
#define ZK_LOOK_ST(p, v) (*(volatile uint64_t*)(p) = (v))
ZK void zk_lb_pause(uint64_t spins) { __nanosleep(spins < 8 ? 32 : 256); }
#define ZK_LB_KEEP(c) 1
#define ZK_LB_COUNT(field, n) ((void)0)
#define ZK_UNROLL _Pragma("unroll") /* loops over register arrays: keep them in registers */
ZK int zk_popc(uint32_t x) { return __popc(x); }
ZK uint16_t zk_ld16a(const uint8_t* p) { return *(const uint16_t*)p; }
ZK uint32_t zk_ld32a(const uint8_t* p) { return *(const uint32_t*)p; }
ZK uint64_t zk_ld64a(const uint8_t* p) { return *(const uint64_t*)p; }
ZK void zk_st16a(uint8_t* p, uint16_t v) { *(uint16_t*)p = v; }
ZK void zk_st32a(uint8_t* p, uint32_t v) { *(uint32_t*)p = v; }
ZK void zk_st64a(uint8_t* p, uint64_t v) { *(uint64_t*)p = v; }
#endif

#define ZK_LANE() (ZK_TID() & 31u)
#define ZK_WARP() (ZK_TID() >> 5)
#define ZK_WARPS_PER_BLOCK 4 /* warp-per-chunk kernels: 128 threads a block */
#define ZK_T_WARPS 8         /* block-per-chunk kernels (T, F3, the decoder): 256 threads */
#define ZK_SCAN_THREADS 1024

ZK uint64_t zk_shfl64(uint64_t v, uint32_t src) {
    uint32_t lo = ZK_SHFL((uint32_t)v, src), hi = ZK_SHFL((uint32_t)(v >> 32), src);
    return ((uint64_t)hi << 32) | lo;
}
ZK uint32_t zk_lanemask_lt(uint32_t lane) { return (1u << lane) - 1u; }

/* Loads/stores that use the aligned instruction when the address allows. */
ZK uint64_t zk_ld64(const uint8_t* p) { return ((uintptr_t)p & 7) ? zcf_ld64(p) : zk_ld64a(p); }
ZK void zk_st64(uint8_t* p, uint64_t v) {
    if ((uintptr_t)p & 7) zcf_st64(p, v);
    else zk_st64a(p, v);
}
ZK uint32_t zk_ld_elem(const uint8_t* p, int es, int aligned) {
    if (aligned) return es == 2 ? zk_ld16a(p) : zk_ld32a(p);
    return es == 2 ? zcf_ld16(p) : zcf_ld32(p);
}
/* Element i of a chunk of n elements at in, or 0 past its end (the encoders'
 * loads of whole 32-element half groups). */
ZK uint32_t zk_ld_chunk_elem(const uint8_t* in, uint32_t i, uint32_t n, int es, int aligned) {
    return i < n ? zk_ld_elem(in + (size_t)i * es, es, aligned) : 0;
}
ZK void zk_st_elem(uint8_t* p, uint32_t v, int es, int aligned) {
    if (es == 2) {
        if (aligned) zk_st16a(p, (uint16_t)v);
        else zcf_st16(p, (uint16_t)v);
    } else {
        if (aligned) zk_st32a(p, v);
        else zcf_st32(p, v);
    }
}

/* ------------------------------------------------------------------------ */
/* 2. XXH32 (seed 0), written from the public xxHash specification           */
/* ------------------------------------------------------------------------ */

#define ZK_P1 0x9E3779B1u
#define ZK_P2 0x85EBCA77u
#define ZK_P3 0xC2B2AE3Du
#define ZK_P4 0x27D4EB2Fu
#define ZK_P5 0x165667B1u

ZKHD uint32_t zk_rotl(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }
ZKHD uint32_t zk_xxh_round(uint32_t acc, uint32_t in) { return zk_rotl(acc + in * ZK_P2, 13) * ZK_P1; }

/* Everything after the 16-byte stripes: acc already holds the merged (or
 * short-input) accumulator plus the total length. */
ZKHD uint32_t zk_xxh_tail(uint32_t acc, const uint8_t* p, size_t rem) {
    for (; rem >= 4; rem -= 4, p += 4) acc = zk_rotl(acc + zcf_ld32(p) * ZK_P3, 17) * ZK_P4;
    for (; rem; rem--, p++) acc = zk_rotl(acc + (uint32_t)*p * ZK_P5, 11) * ZK_P1;
    acc ^= acc >> 15;
    acc *= ZK_P2;
    acc ^= acc >> 13;
    acc *= ZK_P3;
    acc ^= acc >> 16;
    return acc;
}

/* One thread, any input (host: header checksums of stored frames). */
ZKHD uint32_t zk_xxh32(const uint8_t* p, size_t len) {
    size_t i = 0;
    uint32_t acc;
    if (len >= 16) {
        uint32_t v1 = ZK_P1 + ZK_P2, v2 = ZK_P2, v3 = 0, v4 = 0u - ZK_P1;
        for (; i + 16 <= len; i += 16) {
            v1 = zk_xxh_round(v1, zcf_ld32(p + i));
            v2 = zk_xxh_round(v2, zcf_ld32(p + i + 4));
            v3 = zk_xxh_round(v3, zcf_ld32(p + i + 8));
            v4 = zk_xxh_round(v4, zcf_ld32(p + i + 12));
        }
        acc = zk_rotl(v1, 1) + zk_rotl(v2, 7) + zk_rotl(v3, 12) + zk_rotl(v4, 18);
    } else {
        acc = ZK_P5;
    }
    return zk_xxh_tail(acc + (uint32_t)len, p + i, len - i);
}

/* A warp: XXH32's four accumulators are independent, so lanes 0..3 run one
 * each over the stripes; every lane returns the hash. */
ZK uint32_t zk_xxh32_warp(const uint8_t* p, size_t len, uint32_t lane) {
    size_t stripes = len / 16;
    uint32_t v = lane == 0 ? ZK_P1 + ZK_P2 : lane == 1 ? ZK_P2 : lane == 2 ? 0u : 0u - ZK_P1;
    if (lane < 4) {
        const uint8_t* q = p + 4 * lane;
        if (((uintptr_t)p & 3) == 0)
            for (size_t s = 0; s < stripes; s++) v = zk_xxh_round(v, zk_ld32a(q + 16 * s));
        else
            for (size_t s = 0; s < stripes; s++) v = zk_xxh_round(v, zcf_ld32(q + 16 * s));
    }
    uint32_t v1 = ZK_SHFL(v, 0), v2 = ZK_SHFL(v, 1), v3 = ZK_SHFL(v, 2), v4 = ZK_SHFL(v, 3);
    uint32_t acc = stripes ? zk_rotl(v1, 1) + zk_rotl(v2, 7) + zk_rotl(v3, 12) + zk_rotl(v4, 18) : ZK_P5;
    return zk_xxh_tail(acc + (uint32_t)len, p + 16 * stripes, len - 16 * stripes);
}

/* ------------------------------------------------------------------------ */
/* 3. Element fields (FORMAT.md §1, §4.1)                                    */
/* ------------------------------------------------------------------------ */

/* Rest byte plane(s) of element i of a chunk of n; rest points at R0. */
ZK void zk_put_rest(uint8_t* rest, uint32_t n, uint32_t i, uint32_t bits, int dt) {
    if (dt == ZCF_DT_BF16) {
        rest[i] = (uint8_t)((bits & 0x7Fu) | ((bits >> 8) & 0x80u));
    } else if (dt == ZCF_DT_FP16) {
        rest[i] = (uint8_t)bits;
    } else {
        rest[i] = (uint8_t)bits;
        rest[n + i] = (uint8_t)(bits >> 8);
        rest[2 * (size_t)n + i] = (uint8_t)(((bits >> 24) & 0x80u) | ((bits >> 16) & 0x7Fu));
    }
}
/* fp16's three high rest bits: sign<<2 | mant10>>8. */
ZK uint32_t zk_fp16_hi3(uint32_t bits) { return ((bits >> 13) & 4u) | ((bits >> 8) & 3u); }

/* Rest bytes of element i, packed R0 | R1<<8 | R2<<16 (fp32) or R0. */
ZK uint32_t zk_get_rest(int dt, const uint8_t* rest, uint32_t n, uint32_t i) {
    if (dt != ZCF_DT_FP32) return rest[i];
    return rest[i] | ((uint32_t)rest[n + i] << 8) | ((uint32_t)rest[2 * (size_t)n + i] << 16);
}
/* Element rebuilt from its exponent e and packed rest r; hv = fp16's hi3. */
ZK uint32_t zk_rebuild(int dt, uint32_t r, uint32_t e, uint32_t hv) {
    if (dt == ZCF_DT_BF16) return ((r & 0x80u) << 8) | (e << 7) | (r & 0x7Fu);
    if (dt == ZCF_DT_FP16) return ((hv & 4u) << 13) | (e << 10) | ((hv & 3u) << 8) | r;
    return ((r & 0x800000u) << 8) | (e << 23) | (r & 0x7FFFFFu);
}

/* np (2 or 3) u64 plane words of one group: bit j of word k is bit k of the
 * value of element 64g+j. v0 / v1: this lane's values for elements l, 32+l
 * (0 past the chunk end, as the format requires). */
ZK void zk_put_planes(uint8_t* w, uint32_t v0, uint32_t v1, uint32_t lane, uint32_t np) {
    uint64_t mine = 0;
    for (uint32_t k = 0; k < np; k++) {
        uint64_t wk = (uint64_t)ZK_BALLOT((v0 >> k) & 1u) | ((uint64_t)ZK_BALLOT((v1 >> k) & 1u) << 32);
        if (lane == k) mine = wk;
    }
    if (lane < np) zk_st64(w + 8 * lane, mine);
}
ZK uint32_t zk_plane_bits(uint64_t w0, uint64_t w1, uint64_t w2, uint32_t j) {
    return (uint32_t)(((w0 >> j) & 1u) | (((w1 >> j) & 1u) << 1) | (((w2 >> j) & 1u) << 2));
}
ZK int zk_popc64(uint64_t x) { return zk_popc((uint32_t)x) + zk_popc((uint32_t)(x >> 32)); }
/* fp16's three hi3 plane words of group g (rest at rp, n elements: the
 * planes follow the n R0 bytes, FORMAT.md §4.1). */
ZK void zk_hi3_words(const uint8_t* rp, uint32_t n, uint32_t g, uint64_t* h0, uint64_t* h1, uint64_t* h2) {
    const uint8_t* hw = rp + n + 24 * (size_t)g;
    *h0 = zk_ld64(hw), *h1 = zk_ld64(hw + 8), *h2 = zk_ld64(hw + 16);
}

/* Bit position of the t-th set bit (from 0) of b, for t < popc(b): a binary
 * search with popc, so the device and the emulator run the same code. */
ZK uint32_t zk_select(uint32_t b, uint32_t t) {
    uint32_t pos = 0;
    for (uint32_t w = 16; w; w >>= 1) {
        uint32_t c = zk_popc((b >> pos) & ((1u << w) - 1u));
        if (t >= c) { t -= c; pos += w; }
    }
    return pos;
}

/* ------------------------------------------------------------------------ */
/* 4. Encoder                                                                */
/* ------------------------------------------------------------------------ */

typedef struct {
    uint16_t f[ZIPCCL_RANS_NTABLES][ZIPCCL_RANS_NSYM];    /* FORMAT.md §5, by value     */
    uint16_t cost[ZIPCCL_RANS_NTABLES][ZIPCCL_RANS_NSYM]; /* §7 item 2: code lengths  */
    uint8_t top_off[ZIPCCL_RANS_NCLASSES];                /* §7 item 2: window tops    */
} ZkTables;

/* The encoders write the frame in place (one pass over the output): a
 * chunk's block (or warp) learns the chunk's size before it writes a byte,
 * and its place from the chunks before it by a decoupled look-back over
 * `look` (zk_lookback).  One launch codes up to ZK_BATCH_MAX buffers (a
 * batch's): their chunks are numbered one after the other and taken in
 * ticket order, so a chunk waits only for chunks whose blocks are already
 * running. */
typedef struct { /* one buffer of a launch */
    const uint8_t* src;
    uint8_t* dst;      /* the frame: header | table | sums | chunks        */
    uint64_t* look;    /* (n_chunks) look-back words, zeroed (zk_lookback) */
    uint32_t* cflag;   /* set by a C chunk (zeroed)                         */
    uint64_t* total;   /* the chunks' bytes, set by the last chunk          */
    uint64_t count, n_chunks;
    uint64_t first;    /* its first chunk's ticket                          */
    uint64_t prefix;   /* header, table and checksums: the first chunk's place */
    uint64_t cap;      /* a chunk that would end past cap writes nothing    */
    int checksum, src_aligned;
} EncBuf;

#define ZK_BATCH_MAX 8 /* the buffers of a launch: the arguments stay under 4 KB */
typedef struct {
    EncBuf buf[ZK_BATCH_MAX];
    uint32_t* ticket;  /* zeroed */
    uint64_t n_chunks; /* all buffers' */
    int k;
    ZkTables tab;
} EncArgs;

/* FORMAT.md §7.1 with the sample spread over the lanes; same integers. */
ZK int zk_estimate_s8(const uint8_t* in, uint32_t n, int dt, int es, int al, uint32_t lane) {
    uint32_t S = n < (uint32_t)ZCF_SAMPLE ? n : (uint32_t)ZCF_SAMPLE, emax = (1u << zcf_exp_bits(dt)) - 1u;
    uint32_t acc = 0; /* cnt << 17 | sum: sum <= 256*255 < 2^17 */
    for (uint32_t k = lane; k < S; k += 32) {
        uint64_t idx = zcf_sample_index(k, n, S);
        uint32_t e = zcf_exponent(dt, zk_ld_elem(in + idx * es, es, al));
        if (e > 0 && e < emax) acc += (1u << 17) + e;
    }
    for (uint32_t m = 16; m; m >>= 1) acc += ZK_SHFL(acc, lane ^ m);
    uint32_t cnt = acc >> 17, sum = acc & 0x1FFFFu;
    if (!cnt) return 40;
    return (int)((8 * sum + cnt / 2) / cnt) + ZCF_EST_BIAS8;
}

/* len bytes from s to d, any alignment of either, thread t of nt: a u32
 * store per aligned word of d (read as bytes where s is not aligned with it). */
ZK void zk_copy_bytes(uint8_t* d, const uint8_t* s, uint32_t len, uint32_t t, uint32_t nt) {
    uint32_t head = (uint32_t)((4 - ((uintptr_t)d & 3)) & 3);
    if (head > len) head = len;
    if (t < head) d[t] = s[t];
    const uint32_t words = (len - head) / 4;
    uint8_t* dw = d + head;
    const uint8_t* sw = s + head;
    if (((uintptr_t)sw & 3) == 0)
        for (uint32_t j = t; j < words; j += nt) zk_st32a(dw + 4 * j, zk_ld32a(sw + 4 * j));
    else
        for (uint32_t j = t; j < words; j += nt) zk_st32a(dw + 4 * j, zcf_ld32(sw + 4 * j));
    for (uint32_t k = head + 4 * words + t; k < len; k += nt) d[k] = s[k];
}

/* A raw chunk (FORMAT.md §4.1) at out, thread t of nt. */
ZK void zk_write_raw(uint8_t* out, const uint8_t* in, uint32_t nbytes, uint32_t t, uint32_t nt) {
    if (t < 8) out[t] = 0; /* mode 0, top 0, table 0, reserved 0, n_esc 0 */
    zk_copy_bytes(out + 8, in, nbytes, t, nt);
}

/* Records a written chunk in the frame: its size in the table and (if
 * asked) its checksum in the sums. */
ZK void zk_finish_chunk(const EncBuf& a, uint64_t c, const uint8_t* out, uint32_t size, uint32_t lane) {
    ZK_SYNCWARP(); /* every lane's bytes of the chunk are visible to all */
    if (lane == 0) zcf_st32(a.dst + ZCF_HEADER_SIZE + 4 * c, size);
    if (a.checksum) {
        uint32_t h = zk_xxh32_warp(out, size, lane);
        if (lane == 0) zcf_st32(a.dst + ZCF_HEADER_SIZE + 4 * a.n_chunks + 4 + 4 * c, h);
    }
}

/* Decoupled look-back (Merrill and Garland, "Single-pass Parallel Prefix
 * Scan with Decoupled Look-back", 2016).  look[c] holds size << 2 | state:
 * state 0 not yet, 1 chunk c's own size (its aggregate), 2 the bytes of
 * chunks 0..c (its inclusive prefix).  Chunk c publishes its aggregate,
 * then its warp reads the 32 words before it at once: it waits while any
 * is 0, sums the words up to the nearest inclusive one, and if there is
 * none, goes 32 further back.  Then it publishes its own inclusive prefix;
 * the last chunk also writes the total.  Every lane returns the chunk's
 * offset among the chunks.  (Under the emulator blocks run one after
 * another and publish their inclusive prefix only now and then,
 * ZK_LB_KEEP, so that the walk over aggregates and across windows runs.) */
#define ZK_LB_AGG 1u
#define ZK_LB_INCL 2u
ZK uint64_t zk_lookback(const EncBuf& a, uint64_t c, uint32_t size, uint32_t lane) {
    if (lane == 0) ZK_LOOK_ST(&a.look[c], ((uint64_t)size << 2) | (c == 0 ? ZK_LB_INCL : ZK_LB_AGG));
    uint64_t excl = 0, spins = 0;
    for (uint64_t end = c; end > 0;) { /* lane l reads chunk end - 1 - l */
        const uint64_t v = lane < end ? ZK_LOOK_LD(&a.look[end - 1 - lane]) : (uint64_t)ZK_LB_INCL; /* before 0: 0 bytes */
        if (ZK_BALLOT((v & 3) == 0)) { /* a chunk before has not published yet */
            if (lane == 0) ZK_LB_COUNT(waits, 1);
            zk_lb_pause(++spins);
            continue;
        }
        const uint32_t incl = ZK_BALLOT((v & 3) == ZK_LB_INCL), upto = incl ? zk_select(incl, 0) : 31;
        if (lane == 0) ZK_LB_COUNT(windows, 1), ZK_LB_COUNT(aggregates, upto + (incl ? 0 : 1));
        uint64_t sum = lane <= upto ? v >> 2 : 0;
        for (uint32_t m = 16; m; m >>= 1) sum += zk_shfl64(sum, lane ^ m);
        excl += sum;
        if (incl) break;
        end -= 32; /* end > 32 here: lanes past chunk 0 read as inclusive */
    }
    if (lane == 0) {
        if (c == 0 || ZK_LB_KEEP(c)) ZK_LOOK_ST(&a.look[c], ((excl + size) << 2) | ZK_LB_INCL);
        if (c + 1 == a.n_chunks) *a.total = excl + size;
    }
    return excl;
}

/* Chunk c of `size` bytes placed (zk_lookback): its address in the frame,
 * or NULL where it would end past the caller's capacity (the frame will be
 * refused or stored; the chunk writes nothing).  One warp. */
ZK uint8_t* zk_place(const EncBuf& a, uint64_t c, uint32_t size, uint32_t lane) {
    const uint64_t at = a.prefix + zk_lookback(a, c, size, lane);
    return at + size <= a.cap ? a.dst + at : (uint8_t*)0;
}
/* The same by a block: warp 0 looks back, every thread gets the address
 * through sh (2 words of shared memory). */
ZK uint8_t* zk_place_block(const EncBuf& a, uint64_t c, uint32_t size, uint32_t* sh) {
    if (ZK_WARP() == 0) {
        uint8_t* out = zk_place(a, c, size, ZK_LANE());
        const uint64_t off = out ? (uint64_t)(out - a.dst) : ~0ull;
        if (ZK_LANE() == 0) sh[0] = (uint32_t)off, sh[1] = (uint32_t)(off >> 32);
    }
    ZK_SYNCTHREADS();
    const uint64_t off = ((uint64_t)sh[1] << 32) | sh[0];
    ZK_SYNCTHREADS(); /* sh may be reused */
    return off == ~0ull ? (uint8_t*)0 : a.dst + off;
}

/* The ticket of the chunk a warp (zk_ticket_warp) or block
 * (zk_ticket_block, through sh[0]) encodes: tickets in the order blocks
 * start, so the chunks a look-back waits for are already being encoded. */
ZK uint64_t zk_ticket_warp(const EncArgs& A, uint32_t lane) {
    uint32_t t = 0;
    if (lane == 0) t = ZK_TICKET(A.ticket);
    return ZK_SHFL(t, 0);
}
ZK uint64_t zk_ticket_block(const EncArgs& A, uint32_t* sh) {
    if (ZK_TID() == 0) sh[0] = ZK_TICKET(A.ticket);
    ZK_SYNCTHREADS();
    const uint64_t t = sh[0];
    ZK_SYNCTHREADS(); /* sh may be reused */
    return t;
}
/* Ticket t's buffer, and *c its chunk there. */
ZK const EncBuf& zk_buf_of(const EncArgs& A, uint64_t t, uint64_t* c) {
    int i = 0;
    while (i + 1 < A.k && t >= A.buf[i + 1].first) i++;
    *c = t - A.buf[i].first;
    return A.buf[i];
}

#define ZK_F3_UNROLL 4 /* groups loaded before any is processed */
#define ZK_R_BATCH 8   /* rANS steps whose loads are issued together */

/* Chunk c of the input: returns its element count; *in: its elements,
 * *s8 (F3, F2; NULL for T and R, which take the larger sample of their
 * own): its scale estimate (FORMAT.md §7). */
ZK uint32_t zk_enc_chunk(const EncBuf& a, uint64_t c, int dt, int es, uint32_t lane, const uint8_t** in, int* s8) {
    uint64_t first = c << ZCF_CHUNK_LOG2;
    *in = a.src + first * es;
    const uint32_t n = (uint32_t)(a.count - first < (1u << ZCF_CHUNK_LOG2) ? a.count - first : (1u << ZCF_CHUNK_LOG2));
    if (s8) *s8 = zk_estimate_s8(*in, n, dt, es, a.src_aligned, lane);
    return n;
}

/* The 8-byte chunk header (FORMAT.md §4), written by lane 0. */
ZK void zk_put_chunk_header(uint8_t* out, uint32_t mode, uint32_t top, uint32_t table, uint32_t nesc,
                            uint32_t lane) {
    if (lane) return;
    out[0] = (uint8_t)mode; out[1] = (uint8_t)top; out[2] = (uint8_t)table; out[3] = 0;
    zcf_st32(out + 4, nesc);
}

/* The end of a chunk encoded by a block (T, F3): the raw chunk (header
 * and bytes, by every thread) when it was not coded, then warp 0 records
 * its size and checksum once every byte is visible. */
ZK void zk_block_finish(const EncBuf& a, uint64_t c, uint8_t* out, const uint8_t* in, uint32_t nbytes,
                        uint32_t size, int coded) {
    if (!coded) zk_write_raw(out, in, nbytes, ZK_TID(), 32 * ZK_T_WARPS);
    ZK_SYNCTHREADS();
    if (ZK_WARP() == 0) zk_finish_chunk(a, c, out, size, ZK_LANE());
}

/* An F3 chunk (FORMAT.md §4.3), the block's ticket, by a block of
 * ZK_T_WARPS warps, each a run of consecutive groups (T's split): every
 * warp counts its escapes, a scan over the warps gives each its first
 * escape byte and the total decides the fit and the size, the look-back
 * the place; then each warp writes its rest bytes, code planes and escapes
 * in place in the frame.  sh: ZK_T_WARPS words of shared memory. */
template <int DT>
ZK void zk_encode_f3_chunk(const EncArgs& A, uint32_t* sh) {
    uint64_t c;
    const EncBuf& a = zk_buf_of(A, zk_ticket_block(A, sh), &c);
    const int dt = DT, es = DT == ZCF_DT_FP32 ? 4 : 2, al = a.src_aligned;
    const uint32_t tid = ZK_TID(), lane = ZK_LANE(), warp = ZK_WARP();
    const uint8_t* in;
    int s8;
    const uint32_t n = zk_enc_chunk(a, c, dt, es, lane, &in, &s8); /* every warp: the same s8 */
    const uint32_t top = zcf_f3_top(dt, s8);
    const uint32_t raw = 8 + n * es, G = (n + 63) / 64, rest = (uint32_t)zcf_rest_size(dt, n);
    const uint32_t base = 8 + rest + 24 * G;
    const uint32_t per = (G + ZK_T_WARPS - 1) / ZK_T_WARPS, g0 = warp * per < G ? warp * per : G,
                   g1 = g0 + per < G ? g0 + per : G;
    uint32_t size = raw, first = 0, run = 0; /* this warp's first escape; all of them */
    int coded = 0;                           /* uniform over the block */
    if (base < raw) {
        uint32_t ce = 0; /* pass 1: this warp's escapes */
        for (uint32_t g = g0; g < g1; g++)
            for (int h = 0; h < 2; h++) {
                uint32_t i = 64 * g + 32 * h + lane;
                int d = (int)top - (int)zcf_exponent(dt, zk_ld_chunk_elem(in, i, n, es, al));
                ce += zk_popc(ZK_BALLOT(i < n && !(d >= 0 && d <= 6)));
            }
        if (lane == 0) sh[warp] = ce;
        ZK_SYNCTHREADS();
        for (uint32_t w = 0; w < ZK_T_WARPS; w++) {
            if (w == warp) first = run;
            run += sh[w];
        }
        ZK_SYNCTHREADS(); /* sh is zk_place_block's next */
        if (base + run < raw) { /* fits */
            coded = 1;
            size = base + run;
        }
    }
    uint8_t* out = zk_place_block(a, c, size, sh);
    if (!out) return;
    if (coded) {
        uint8_t* rp = out + 8;        /* R0 (and R1, R2 for fp32)     */
        uint8_t* hp = out + 8 + n;    /* fp16 hi3 planes              */
        uint8_t* cp = out + 8 + rest; /* code planes                  */
        for (uint32_t g = g0; g < g1; g++) { /* pass 2: the writes */
            uint32_t code[2], hv[2], e[2];
            for (int h = 0; h < 2; h++) {
                uint32_t i = 64 * g + 32 * h + lane;
                uint32_t bits = zk_ld_chunk_elem(in, i, n, es, al);
                e[h] = zcf_exponent(dt, bits);
                int d = (int)top - (int)e[h];
                code[h] = (d >= 0 && d <= 6) ? (uint32_t)d : (uint32_t)ZCF_F3_ESC;
                hv[h] = 0;
                if (i < n) {
                    zk_put_rest(rp, n, i, bits, dt);
                    hv[h] = zk_fp16_hi3(bits);
                } else {
                    code[h] = 0;
                }
            }
            zk_put_planes(cp + 24 * g, code[0], code[1], lane, 3);
            if (dt == ZCF_DT_FP16) zk_put_planes(hp + 24 * g, hv[0], hv[1], lane, 3);
            for (int h = 0; h < 2; h++) {
                int esc = code[h] == ZCF_F3_ESC;
                uint32_t b = ZK_BALLOT(esc);
                if (esc) out[base + first + zk_popc(b & zk_lanemask_lt(lane))] = (uint8_t)e[h];
                first += zk_popc(b);
            }
        }
        zk_put_chunk_header(out, ZCF_MODE_F3, top, 0, run, tid); /* by thread 0 */
    }
    zk_block_finish(a, c, out, in, n * es, size, coded);
}

/* F2's secondary planes as the second tier grows (FORMAT.md §4.5). b: ballot
 * of this half's second-tier lanes, q: this lane's secondary code, m: entries
 * before this half (so the half's entries are m, m+1, ...). Lane t takes the
 * code of the half's t-th entry, so one ballot per plane gives the bits of
 * popc(b) consecutive entries; they are appended at bit m % 64 of *pend, the
 * word of plane `lane` (lanes 0..2) of group m / 64, which is stored at sp
 * once full. Every lane calls it, with the same b and m. */
ZK void zk_tier2_add(uint8_t* sp, uint64_t* pend, uint32_t m, uint32_t b, uint32_t q, uint32_t lane) {
    uint32_t cnt = zk_popc(b), f = m & 63, mine = 0;
    uint32_t qt = ZK_SHFL(q, lane < cnt ? zk_select(b, lane) : lane);
    for (uint32_t k = 0; k < 3; k++) {
        uint32_t wk = ZK_BALLOT(lane < cnt && ((qt >> k) & 1u));
        if (lane == k) mine = wk;
    }
    *pend |= (uint64_t)mine << f;
    if (f + cnt >= 64) { /* cnt <= 32, so f >= 32 here and the shift below is 1..32 */
        if (lane < 3) zk_st64(sp + 24 * (size_t)(m >> 6) + 8 * lane, *pend);
        *pend = (uint64_t)mine >> (64 - f);
    }
}

/* An F2 chunk (FORMAT.md §4.5) by one warp.  Pass 1 counts the second-tier
 * entries and the escapes group by group; the sizes only grow, so the
 * chunk fits if it fits at its last group (the count stops at the first
 * group past raw).  The look-back places it; pass 2 writes every section
 * in place: rest bytes, primary planes, secondary planes as the second
 * tier grows, escapes in element order after them. */
template <int DT>
ZK void zk_encode_f2_chunk(const EncBuf& a, uint64_t c, uint32_t lane) {
    const int dt = DT, es = DT == ZCF_DT_FP32 ? 4 : 2, al = a.src_aligned;
    const int U = DT == ZCF_DT_BF16 ? ZK_F3_UNROLL : 3; /* fp16, fp32: 4 groups would spill */
    const uint8_t* in;
    int s8;
    const uint32_t n = zk_enc_chunk(a, c, dt, es, lane, &in, &s8);
    const uint32_t top = zcf_f2_top(dt, s8);
    const uint32_t raw = 8 + n * es, G = (n + 63) / 64, rest = (uint32_t)zcf_rest_size(dt, n);
    const uint32_t base = 8 + rest + 16 * G; /* the secondary planes */
    uint32_t fits = base < raw, M = 0, NE = 0; /* second-tier entries, escapes */
    for (uint32_t g0 = 0; g0 < G && fits; g0 += U) { /* pass 1: counts */
        uint32_t bits[U][2];
        for (int u = 0; u < U; u++)
            for (int h = 0; h < 2; h++) bits[u][h] = zk_ld_chunk_elem(in, 64 * (g0 + u) + 32 * h + lane, n, es, al);
        ZK_UNROLL
        for (int u = 0; u < U && g0 + u < G && fits; u++) {
            uint32_t m1 = M, nesc1 = NE;
            for (int h = 0; h < 2; h++) {
                int valid = 64 * (g0 + u) + 32 * h + lane < n;
                int d = (int)top - (int)zcf_exponent(dt, bits[u][h]);
                uint32_t sym = (d >= 0 && d <= 9) ? (uint32_t)d : (uint32_t)ZCF_F2_ESC;
                m1 += zk_popc(ZK_BALLOT(valid && zcf_f2_primary(sym) == 3));
                nesc1 += zk_popc(ZK_BALLOT(valid && sym == ZCF_F2_ESC));
            }
            fits = base + 24 * ((m1 + 63) / 64) + nesc1 < raw; /* uniform; if not, goes raw */
            M = m1, NE = nesc1;
        }
    }
    const uint32_t ep = base + 24 * ((M + 63) / 64), size = fits ? ep + NE : raw;
    uint8_t* out = zk_place(a, c, size, lane);
    if (!out) return;
    if (fits) {
        uint8_t* rp = out + 8;        /* R0 (and R1, R2 for fp32)      */
        uint8_t* hp = out + 8 + n;    /* fp16 hi3 planes               */
        uint8_t* pp = out + 8 + rest; /* primary planes                */
        uint8_t* sp = out + base;     /* secondary planes              */
        uint32_t m = 0, nesc = 0;     /* second-tier entries, escapes so far */
        uint64_t pend = 0;            /* see zk_tier2_add */
        for (uint32_t g0 = 0; g0 < G; g0 += U) { /* pass 2: the writes */
            uint32_t bits[U][2];
            for (int u = 0; u < U; u++)
                for (int h = 0; h < 2; h++) bits[u][h] = zk_ld_chunk_elem(in, 64 * (g0 + u) + 32 * h + lane, n, es, al);
            ZK_UNROLL
            for (int u = 0; u < U && g0 + u < G; u++) {
                uint32_t g = g0 + u, e[2], pc[2], q[2], esc[2];
                for (int h = 0; h < 2; h++) {
                    uint32_t i = 64 * g + 32 * h + lane;
                    e[h] = zcf_exponent(dt, bits[u][h]);
                    int d = (int)top - (int)e[h];
                    uint32_t sym = (d >= 0 && d <= 9) ? (uint32_t)d : (uint32_t)ZCF_F2_ESC;
                    pc[h] = i < n ? zcf_f2_primary(sym) : 0;
                    q[h] = zcf_f2_secondary(sym);
                    esc[h] = i < n && sym == ZCF_F2_ESC;
                    if (i < n) zk_put_rest(rp, n, i, bits[u][h], dt);
                }
                if (dt == ZCF_DT_FP16)
                    zk_put_planes(hp + 24 * g, 64 * g + lane < n ? zk_fp16_hi3(bits[u][0]) : 0,
                                  64 * g + 32 + lane < n ? zk_fp16_hi3(bits[u][1]) : 0, lane, 3);
                zk_put_planes(pp + 16 * g, pc[0], pc[1], lane, 2);
                for (int h = 0; h < 2; h++) {
                    const uint32_t bt = ZK_BALLOT(pc[h] == 3), be = ZK_BALLOT(esc[h]);
                    if (bt) zk_tier2_add(sp, &pend, m, bt, q[h], lane);
                    m += zk_popc(bt);
                    if ((be >> lane) & 1u) out[ep + nesc + zk_popc(be & zk_lanemask_lt(lane))] = (uint8_t)e[h];
                    nesc += zk_popc(be);
                }
            }
        }
        if ((m & 63) && lane < 3) zk_st64(sp + 24 * (size_t)(m >> 6) + 8 * lane, pend); /* last, partial group */
        zk_put_chunk_header(out, ZCF_MODE_F2, top, 0, NE, lane);
    } else {
        zk_write_raw(out, in, n * es, lane, 32);
    }
    zk_finish_chunk(a, c, out, size, lane);
}

/* FORMAT.md §7.2's sample, 1024 elements spread over the lanes: returns
 * s8 from the normal exponents and fills the 27-bin histogram around k =
 * s8 / 8, bin by bin (every lane ends with the same counts). *same (every
 * lane): whether every sampled element has element 0's bits, the first
 * half of the constant-chunk test (FORMAT.md §7.4). */
ZK int zk_sample(const uint8_t* in, uint32_t n, int dt, int es, int al, uint32_t lane, uint32_t h[ZCF_T_BINS],
                 int* same) {
    uint32_t S = n < (uint32_t)ZCF_T_SAMPLE ? n : (uint32_t)ZCF_T_SAMPLE, emax = (1u << zcf_exp_bits(dt)) - 1u;
    uint32_t e[ZCF_T_SAMPLE / 32], sum = 0, cnt = 0; /* sum <= 1024 * 254 < 2^32 */
    uint32_t x0 = zk_ld_elem(in, es, al), diff = 0; /* n >= 1 */
    for (uint32_t r = 0; r < ZCF_T_SAMPLE / 32; r++) {
        uint32_t k = 32 * r + lane;
        uint32_t x = k < S ? zk_ld_elem(in + zcf_sample_index(k, n, S) * es, es, al) : x0;
        diff |= x ^ x0;
        e[r] = k < S ? zcf_exponent(dt, x) : 0xFFFFu;
        if (k < S && e[r] > 0 && e[r] < emax) { sum += e[r]; cnt++; }
    }
    *same = ZK_BALLOT(diff != 0) == 0;
    for (uint32_t m = 16; m; m >>= 1) { sum += ZK_SHFL(sum, lane ^ m); cnt += ZK_SHFL(cnt, lane ^ m); }
    int s8 = zcf_s8_of(sum, cnt), kk = s8 / 8;
    for (int i = 0; i < ZCF_T_BINS; i++) {
        uint32_t c = 0, want = (uint32_t)(kk - 14 + i); /* a negative exponent wraps: no element has it */
        for (uint32_t r = 0; r < ZCF_T_SAMPLE / 32; r++) c += e[r] == want;
        for (uint32_t m = 16; m; m >>= 1) c += ZK_SHFL(c, lane ^ m);
        h[i] = c;
    }
    return s8;
}

/* FORMAT.md §7.2: T's top and shape from the sample, on every lane. */
ZK int zk_t_choose(const uint8_t* in, uint32_t n, int dt, int es, int al, uint32_t lane, uint32_t* top,
                   uint32_t* shape, int* same) {
    uint32_t h[ZCF_T_BINS];
    int kk = zk_sample(in, n, dt, es, al, lane, h, same) / 8;
    return zcf_t_pick(h, kk, (1 << zcf_exp_bits(dt)) - 1, top, shape);
}

/* Whether all n elements have element 0's bits (the CPU: memcmp of the
 * chunk against itself shifted by one element); the warp leaves at the first
 * 256 elements that hold a difference. */
ZK int zk_chunk_constant(const uint8_t* in, uint32_t n, int es, int al, uint32_t lane) {
    uint32_t x0 = zk_ld_elem(in, es, al);
    for (uint32_t b = 0; b < n; b += 256) {
        uint32_t diff = 0;
        for (uint32_t j = lane; j < 256; j += 32)
            if (b + j < n) diff |= zk_ld_elem(in + (size_t)(b + j) * es, es, al) ^ x0;
        if (ZK_BALLOT(diff != 0)) return 0;
    }
    return 1;
}

/* Whether a chunk is a C chunk (FORMAT.md §4.7, §7 item 4): its sample was
 * constant (same) and the whole chunk is. */
ZK int zk_is_c_chunk(const uint8_t* in, uint32_t n, int es, int al, int same, uint32_t lane) {
    return same && n >= 2 && zk_chunk_constant(in, n, es, al, lane); /* 8 + es < raw */
}
/* Chunk c as a C chunk at out (one warp); the frame becomes version 3. */
ZK void zk_write_c_chunk(const EncBuf& a, uint64_t c, const uint8_t* in, int es, uint8_t* out, uint32_t lane) {
    if (lane < 8) out[lane] = lane == 0 ? (uint8_t)ZCF_MODE_C : 0; /* top, table, n_esc 0 */
    if (lane < (uint32_t)es) out[8 + lane] = in[lane];
    if (lane == 0) ZK_ATOMIC_OR(a.cflag, 1u);
    zk_finish_chunk(a, c, out, 8 + es, lane);
}

/* A T chunk (FORMAT.md §4.6), the block's ticket, by a block of ZK_T_WARPS
 * warps, or a C chunk (§4.7) when every element has one bit pattern.  Warp
 * 0 takes the sample and decides; then each warp owns a run of consecutive
 * 64-element groups:
 *   pass 1  it counts its groups' tier-2, tier-3 and escape entries; a scan
 *           over the warps gives each its first entry of each kind, and the
 *           totals give every section's place, and whether the chunk fits
 *           (the sizes only grow group by group, so fitting at the end is
 *           fitting at every group, the CPU's test);
 *   place   the chunk's size known, the look-back gives its place in the
 *           frame (zk_place_block);
 *   pass 2  it writes its groups' rest bytes and tier-1 planes, its escape
 *           bytes at their final places, and its tier-2 and tier-3 entries'
 *           bits into plane words in shared memory (atomic ORs: a word's 64
 *           entries may come from two warps), which the block then copies
 *           out.
 * Every section is written once, in place: no staging past raw, no moves.
 * Shared memory (ZK_T_SMEM bytes): 64 words of decisions and counts, then
 * the tier-2 words (2 planes x 256) and tier-3 words (3 planes x 256) as
 * u32 halves. */
#define ZK_T_SMEM (4 * (64 + 2 * 2 * 256 + 3 * 2 * 256))

/* Bits of q (np planes) of tier entry m into the u32-halved words at w. */
ZK void zk_tier_bits(uint32_t* w, uint32_t m, uint32_t q, uint32_t np) {
    for (uint32_t k = 0; k < np; k++)
        if ((q >> k) & 1u) ZK_ATOMIC_OR(&w[2 * (np * (m >> 6) + k) + ((m >> 5) & 1u)], 1u << (m & 31u));
}

template <int DT>
ZK void zk_encode_t_chunk(const EncArgs& A, uint8_t* smem) {
    uint32_t* sh = (uint32_t*)smem; /* [0] verdict, [1] top, [2] shape, [4 + 3w ..] warp w's counts, [32..] place */
    uint32_t* t2w = sh + 64;        /* tier-2 words */
    uint32_t* t3w = t2w + 2 * 2 * 256;
    uint64_t c;
    const EncBuf& a = zk_buf_of(A, zk_ticket_block(A, sh + 32), &c);
    const int dt = DT, es = DT == ZCF_DT_FP32 ? 4 : 2, al = a.src_aligned;
    const uint32_t tid = ZK_TID(), lane = ZK_LANE(), warp = ZK_WARP(), nt = 32 * ZK_T_WARPS;
    const uint8_t* in;
    const uint32_t n = zk_enc_chunk(a, c, dt, es, lane, &in, NULL);
    const uint32_t raw = 8 + n * es, G = (n + 63) / 64, rest = (uint32_t)zcf_rest_size(dt, n);
    const uint32_t base = 8 + rest + 16 * G; /* the tier-2 planes */
    if (warp == 0) { /* the sample, the table, the constant-chunk test */
        uint32_t top = 0, shape = 0;
        int same = 0, ok = zk_t_choose(in, n, dt, es, al, lane, &top, &shape, &same);
        int cc = zk_is_c_chunk(in, n, es, al, same, lane);
        if (lane == 0) sh[0] = cc ? 2u : (ok && base < raw) ? 0u : 1u, sh[1] = top, sh[2] = shape;
    }
    ZK_SYNCTHREADS();
    const uint32_t verdict = sh[0], top = sh[1], shape = sh[2]; /* 0: try T, 1: raw, 2: C */
    /* warp w's groups [g0, g1) */
    const uint32_t per = (G + ZK_T_WARPS - 1) / ZK_T_WARPS, g0 = warp * per < G ? warp * per : G,
                   g1 = g0 + per < G ? g0 + per : G;
    uint32_t size = verdict == 2 ? 8 + es : raw;
    uint32_t m2 = 0, m3 = 0, nesc = 0, M2 = 0, M3 = 0, NE = 0, t3 = 0, ep = 0; /* this warp's first entries; totals */
    int coded = 0; /* uniform over the block */
    if (verdict == 0) {
        uint32_t c2 = 0, c3 = 0, ce = 0; /* pass 1: counts */
        for (uint32_t g = g0; g < g1; g++)
            for (int h = 0; h < 2; h++) {
                uint32_t i = 64 * g + 32 * h + lane;
                int valid = i < n;
                uint32_t e = zcf_exponent(dt, zk_ld_chunk_elem(in, i, n, es, al));
                int d = (int)top - (int)e;
                uint32_t r = zcf_t_rank(shape, (d >= 0 && d <= 12) ? (uint32_t)d : (uint32_t)ZCF_T_ESC);
                c2 += zk_popc(ZK_BALLOT(valid && r >= 3));
                c3 += zk_popc(ZK_BALLOT(valid && r >= 6));
                ce += zk_popc(ZK_BALLOT(valid && r == ZCF_T_ESC));
            }
        if (lane == 0) sh[4 + 3 * warp] = c2, sh[5 + 3 * warp] = c3, sh[6 + 3 * warp] = ce;
        ZK_SYNCTHREADS();
        for (uint32_t w = 0; w < ZK_T_WARPS; w++) {
            if (w == warp) m2 = M2, m3 = M3, nesc = NE;
            M2 += sh[4 + 3 * w], M3 += sh[5 + 3 * w], NE += sh[6 + 3 * w];
        }
        t3 = base + 16 * ((M2 + 63) / 64), ep = t3 + 24 * ((M3 + 63) / 64);
        if (ep + NE < raw) { /* fits (the coded chunk is smaller than raw) */
            coded = 1;
            size = ep + NE;
        }
    }
    uint8_t* out = zk_place_block(a, c, size, sh + 32);
    if (!out) return;
    if (verdict == 2) {
        if (warp == 0) zk_write_c_chunk(a, c, in, es, out, lane);
        return;
    }
    if (coded) {
        const uint32_t w2 = 2 * 2 * ((M2 + 63) / 64), w3 = 2 * 3 * ((M3 + 63) / 64);
        for (uint32_t j = tid; j < w2; j += nt) t2w[j] = 0;
        for (uint32_t j = tid; j < w3; j += nt) t3w[j] = 0;
        ZK_SYNCTHREADS();
        uint8_t* rp = out + 8;
        uint8_t* hp = out + 8 + n;
        uint8_t* pp = out + 8 + rest;
        for (uint32_t g = g0; g < g1; g++) { /* pass 2: the writes */
            uint32_t bits[2], p1[2];
            for (int h = 0; h < 2; h++) {
                uint32_t i = 64 * g + 32 * h + lane;
                int valid = i < n;
                bits[h] = zk_ld_chunk_elem(in, i, n, es, al);
                uint32_t e = zcf_exponent(dt, bits[h]);
                int d = (int)top - (int)e;
                uint32_t r = zcf_t_rank(shape, (d >= 0 && d <= 12) ? (uint32_t)d : (uint32_t)ZCF_T_ESC);
                p1[h] = valid ? (r < 3 ? r : 3) : 0;
                uint32_t b2 = ZK_BALLOT(valid && r >= 3), b3 = ZK_BALLOT(valid && r >= 6),
                         be = ZK_BALLOT(valid && r == ZCF_T_ESC), below = zk_lanemask_lt(lane);
                if ((b2 >> lane) & 1u) zk_tier_bits(t2w, m2 + zk_popc(b2 & below), r >= 6 ? 3 : r - 3, 2);
                if ((b3 >> lane) & 1u) zk_tier_bits(t3w, m3 + zk_popc(b3 & below), r - 6, 3);
                if ((be >> lane) & 1u) out[ep + nesc + zk_popc(be & below)] = (uint8_t)e;
                m2 += zk_popc(b2), m3 += zk_popc(b3), nesc += zk_popc(be);
                if (valid) zk_put_rest(rp, n, i, bits[h], dt);
            }
            if (dt == ZCF_DT_FP16)
                zk_put_planes(hp + 24 * g, 64 * g + lane < n ? zk_fp16_hi3(bits[0]) : 0,
                              64 * g + 32 + lane < n ? zk_fp16_hi3(bits[1]) : 0, lane, 3);
            zk_put_planes(pp + 16 * g, p1[0], p1[1], lane, 2);
        }
        ZK_SYNCTHREADS(); /* every entry's bits are in the words */
        for (uint32_t j = tid; j < w2; j += nt) zcf_st32(out + base + 4 * j, t2w[j]);
        for (uint32_t j = tid; j < w3; j += nt) zcf_st32(out + t3 + 4 * j, t3w[j]);
        zk_put_chunk_header(out, ZCF_MODE_T, top, shape, NE, tid); /* by thread 0 */
    }
    zk_block_finish(a, c, out, in, n * es, size, coded);
}

/* R chunk c (FORMAT.md §4.4) by one warp; smem: 128 bytes of table, then
 * the lanes' pushed words, interleaved (word k of lane l at 32k + l). */
template <int DT>
ZK void zk_encode_r_chunk(const EncBuf& a, const ZkTables& tab, uint64_t c, uint32_t lane, uint8_t* smem) {
    const int dt = DT, es = DT == ZCF_DT_FP32 ? 4 : 2, al = a.src_aligned;
    const uint8_t* in;
    const uint32_t n = zk_enc_chunk(a, c, dt, es, lane, &in, NULL);
    /* FORMAT.md §7 item 2: tail class, table and top from T's larger sample */
    uint32_t top = 0, tbl = 0, h[ZCF_T_BINS];
    int same;
    const int s8 = zk_sample(in, n, dt, es, al, lane, h, &same);
    if (zk_is_c_chunk(in, n, es, al, same, lane)) {
        uint8_t* out = zk_place(a, c, 8 + es, lane);
        if (out) zk_write_c_chunk(a, c, in, es, out, lane);
        return;
    }
    zcf_r_pick(h, n, s8, dt, tab.cost, tab.top_off, &top, &tbl);
    uint32_t* fq = (uint32_t*)smem;
    uint32_t* cm = fq + 16;
    uint16_t* words = (uint16_t*)(smem + 128);
    if (lane < 16) {
        uint32_t cacc = 0;
        for (uint32_t k = 0; k < lane; k++) cacc += tab.f[tbl][k];
        fq[lane] = tab.f[tbl][lane];
        cm[lane] = cacc;
    }
    ZK_SYNCWARP();
    uint32_t kmax = (n + 31) / 32, nl = lane < n ? (n - lane + 31) / 32 : 0;
    uint32_t x = ZCF_R_L, nw = 0, nesc = 0;
    /* reverse order, as rANS encodes; a batch's loads go out before its
     * (serial) rANS steps, since few warps share an SM here */
    for (uint32_t kb = kmax; kb > 0;) {
        uint32_t B = kb < ZK_R_BATCH ? kb : ZK_R_BATCH, eb[ZK_R_BATCH];
        for (uint32_t t = 0; t < ZK_R_BATCH; t++) {
            uint32_t i = 32 * (kb - 1 - (t < B ? t : 0)) + lane;
            eb[t] = t < B && i < n ? zcf_exponent(dt, zk_ld_elem(in + (size_t)i * es, es, al)) : 0;
        }
        for (uint32_t t = 0; t < B; t++) {
            uint32_t i = 32 * (kb - 1 - t) + lane;
            int valid = i < n;
            int d = (int)top - (int)eb[t];
            uint32_t s = (d >= 0 && d <= 14) ? (uint32_t)d : (uint32_t)ZCF_R_ESC;
            nesc += zk_popc(ZK_BALLOT(valid && s == ZCF_R_ESC));
            if (valid) {
                uint32_t f = fq[s];
                if ((uint64_t)x >= ((uint64_t)f << 20)) {
                    words[32 * nw + lane] = (uint16_t)x;
                    nw++;
                    x >>= 16;
                }
                x = ((x / f) << ZCF_R_PROB_BITS) + (x % f) + cm[s];
            }
        }
        kb -= B;
    }
    uint32_t lsz = nl ? 4 + 2 * nw : 0, incl = lsz;
    for (uint32_t d = 1; d < 32; d <<= 1) {
        uint32_t t = ZK_SHFL(incl, lane >= d ? lane - d : lane);
        if (lane >= d) incl += t;
    }
    uint32_t off = incl - lsz, lanes_total = ZK_SHFL(incl, 31);
    uint32_t rest = (uint32_t)zcf_rest_size(dt, n), S0 = 8 + 2 * ZCF_R_LANES + rest;
    const uint32_t raw = 8 + n * es, total = S0 + lanes_total + nesc, size = total < raw ? total : raw;
    uint8_t* out = zk_place(a, c, size, lane);
    if (!out) return;
    if (total < raw) {
        zk_put_chunk_header(out, ZCF_MODE_R, top, tbl, nesc, lane);
        zcf_st16(out + 8 + 2 * lane, (uint16_t)lsz);
        if (nl) zcf_st32(out + S0 + off, x);
        ZK_SYNCWARP(); /* every lane's pushed words are visible to all */
        for (uint32_t j = 0; j < 32; j++) { /* lane j's words, last pushed first */
            uint32_t nwj = ZK_SHFL(nw, j), offj = ZK_SHFL(off, j);
            uint8_t* dst = out + S0 + offj + 4;
            for (uint32_t w = lane; w < nwj; w += 32) zcf_st16(dst + 2 * w, words[32 * (nwj - 1 - w) + j]);
        }
        /* forward pass: rest section and escapes, in element order */
        uint8_t* rp = out + 8 + 2 * ZCF_R_LANES;
        uint32_t run = 0, G = (n + 63) / 64, esc_base = S0 + lanes_total;
        for (uint32_t g = 0; g < G; g++) {
            uint32_t hv[2], bits2[2];
            for (int h = 0; h < 2; h++) { /* both loads in flight at once */
                uint32_t i = 64 * g + 32 * h + lane;
                bits2[h] = zk_ld_chunk_elem(in, i, n, es, al);
            }
            for (int h = 0; h < 2; h++) {
                uint32_t i = 64 * g + 32 * h + lane;
                int valid = i < n;
                uint32_t bits = bits2[h];
                uint32_t e = zcf_exponent(dt, bits);
                int d = (int)top - (int)e;
                int esc = valid && !(d >= 0 && d <= 14);
                hv[h] = valid ? zk_fp16_hi3(bits) : 0;
                if (valid) zk_put_rest(rp, n, i, bits, dt);
                uint32_t b = ZK_BALLOT(esc);
                if (esc) out[esc_base + run + zk_popc(b & zk_lanemask_lt(lane))] = (uint8_t)e;
                run += zk_popc(b);
            }
            if (dt == ZCF_DT_FP16) zk_put_planes(rp + n + 24 * g, hv[0], hv[1], lane, 3);
        }
    } else {
        zk_write_raw(out, in, n * es, lane, 32);
    }
    zk_finish_chunk(a, c, out, size, lane);
}

/* F2 and R: one warp per chunk, the warp's ticket (warps past the last
 * chunk leave at once) */
template <int DT>
ZK void zk_encode_f2_warp(const EncArgs& A) {
    const uint64_t t = zk_ticket_warp(A, ZK_LANE());
    uint64_t c;
    if (t < A.n_chunks) {
        const EncBuf& a = zk_buf_of(A, t, &c);
        zk_encode_f2_chunk<DT>(a, c, ZK_LANE());
    }
}
template <int DT>
ZK void zk_encode_r_warp(const EncArgs& A) { /* one warp a block: 32 KB of words */
    const uint64_t t = zk_ticket_warp(A, ZK_LANE());
    uint64_t c;
    if (t < A.n_chunks) {
        const EncBuf& a = zk_buf_of(A, t, &c);
        zk_encode_r_chunk<DT>(a, A.tab, c, ZK_LANE(), ZK_SMEM());
    }
}
/* T: one block of ZK_T_WARPS warps per chunk */
ZK void encode_t_bf16_body(const EncArgs& a) { zk_encode_t_chunk<ZCF_DT_BF16>(a, ZK_SMEM()); }
ZK void encode_t_fp16_body(const EncArgs& a) { zk_encode_t_chunk<ZCF_DT_FP16>(a, ZK_SMEM()); }
ZK void encode_t_fp32_body(const EncArgs& a) { zk_encode_t_chunk<ZCF_DT_FP32>(a, ZK_SMEM()); }
ZK void encode_f2_bf16_body(const EncArgs& a) { zk_encode_f2_warp<ZCF_DT_BF16>(a); }
ZK void encode_f2_fp16_body(const EncArgs& a) { zk_encode_f2_warp<ZCF_DT_FP16>(a); }
ZK void encode_f2_fp32_body(const EncArgs& a) { zk_encode_f2_warp<ZCF_DT_FP32>(a); }
/* F3: one block of ZK_T_WARPS warps per chunk, as T */
ZK void encode_f3_bf16_body(const EncArgs& a) { zk_encode_f3_chunk<ZCF_DT_BF16>(a, (uint32_t*)ZK_SMEM()); }
ZK void encode_f3_fp16_body(const EncArgs& a) { zk_encode_f3_chunk<ZCF_DT_FP16>(a, (uint32_t*)ZK_SMEM()); }
ZK void encode_f3_fp32_body(const EncArgs& a) { zk_encode_f3_chunk<ZCF_DT_FP32>(a, (uint32_t*)ZK_SMEM()); }
ZK void encode_r_bf16_body(const EncArgs& a) { zk_encode_r_warp<ZCF_DT_BF16>(a); }
ZK void encode_r_fp16_body(const EncArgs& a) { zk_encode_r_warp<ZCF_DT_FP16>(a); }
ZK void encode_r_fp32_body(const EncArgs& a) { zk_encode_r_warp<ZCF_DT_FP32>(a); }
static size_t zk_encode_r_smem(void) { return 128 + 2 * ((size_t)1 << ZCF_CHUNK_LOG2); }

/* ------------------------------------------------------------------------ */
/* 5. Chunk table: prefix sums and validation (one block, decompress)       */
/* ------------------------------------------------------------------------ */

typedef struct {
    const uint8_t* frame;  /* the frame (table at +16)                       */
    uint64_t* offs;        /* (n_chunks + 1) chunk offsets in the payload    */
    uint32_t* status;      /* status[0] |= 1 corrupt, 2 checksum             */
    uint64_t n_chunks, payload, max_chunk;
    int checksum;
} PlanArgs;

/* Exclusive scan over the block; sm holds 33 u64. */
ZK uint64_t zk_block_scan(uint64_t v, uint64_t* sm, uint64_t* total) {
    uint32_t lane = ZK_LANE(), warp = ZK_WARP(), nwarps = ZK_SCAN_THREADS / 32;
    uint64_t incl = v;
    for (uint32_t d = 1; d < 32; d <<= 1) {
        uint64_t t = zk_shfl64(incl, lane >= d ? lane - d : lane);
        if (lane >= d) incl += t;
    }
    if (lane == 31) sm[warp] = incl;
    ZK_SYNCTHREADS();
    if (warp == 0) {
        uint64_t w = lane < nwarps ? sm[lane] : 0, wi = w;
        for (uint32_t d = 1; d < 32; d <<= 1) {
            uint64_t t = zk_shfl64(wi, lane >= d ? lane - d : lane);
            if (lane >= d) wi += t;
        }
        sm[lane] = wi - w;
        if (lane == 31) sm[32] = wi;
    }
    ZK_SYNCTHREADS();
    uint64_t ex = sm[warp] + incl - v;
    *total = sm[32];
    ZK_SYNCTHREADS(); /* sm is reused by the next call */
    return ex;
}

ZK void plan_body(const PlanArgs& a) {
    uint32_t tid = ZK_TID(), lane = ZK_LANE();
    uint64_t* sm = (uint64_t*)ZK_SMEM();
    if (tid == 0) sm[33] = 0;
    ZK_SYNCTHREADS();
    if (a.checksum && ZK_WARP() == 0) { /* the header checksum covers the table */
        size_t len = ZCF_HEADER_SIZE + 4 * a.n_chunks;
        uint32_t h = zk_xxh32_warp(a.frame, len, lane);
        if (lane == 0 && h != zcf_ld32(a.frame + len)) sm[33] = 2;
    }
    ZK_SYNCTHREADS();
    if (sm[33]) {
        if (tid == 0) ZK_ATOMIC_OR(&a.status[0], 2u);
        return;
    }
    uint64_t carry = 0;
    uint32_t bad = 0;
    for (uint64_t b = 0; b < a.n_chunks; b += ZK_SCAN_THREADS) {
        uint64_t c = b + tid, v = 0, total;
        if (c < a.n_chunks) {
            v = zcf_ld32(a.frame + ZCF_HEADER_SIZE + 4 * c);
            if (v < ZCF_CHUNK_HEADER_SIZE || v > a.max_chunk) bad = 1;
        }
        uint64_t ex = zk_block_scan(v, sm, &total);
        if (c < a.n_chunks) a.offs[c] = carry + ex;
        carry += total;
    }
    if (tid == 0) {
        a.offs[a.n_chunks] = carry;
        if (carry != a.payload) bad = 1;
    }
    if (bad) ZK_ATOMIC_OR(&a.status[0], 1u);
}

/* ------------------------------------------------------------------------ */
/* 6. Frame header (compress)                                                */
/* ------------------------------------------------------------------------ */

typedef struct {
    uint8_t* dst;
    const uint64_t* total; /* the chunks' bytes (the encoder's last chunk)      */
    const uint32_t* cflag; /* nonzero: a C chunk, the frame is version 3 (4: R) */
    uint64_t n_chunks, prefix; /* prefix: header + table + sums */
    uint64_t bound, cap;   /* write only a frame < bound that fits in cap       */
    uint8_t header[16];
} HeadBuf;
typedef struct {
    HeadBuf buf[ZK_BATCH_MAX];
    int checksum;
} HeadArgs;

/* One warp per buffer of the launch, after the encoder: the 16-byte header
 * and, if asked, its checksum over header and table.  Launched before the
 * host has read the totals, so the GPU never waits on the host in between:
 * a frame is finished only if the host will keep it (smaller than the
 * stored frame, fits the caller's buffer; else the host refuses it, or
 * writes the stored frame over what the chunks wrote). */
ZK void head_body(const HeadArgs& A) {
    const HeadBuf& a = A.buf[ZK_BID()];
    const uint64_t size = a.prefix + *a.total;
    if (!(size < a.bound && size <= a.cap)) return;
    const uint32_t lane = ZK_LANE();
    if (lane < 16) a.dst[lane] = lane == 4 && *a.cflag && a.header[4] < ZCF_VERSION_C ? (uint8_t)ZCF_VERSION_C : a.header[lane];
    ZK_SYNCWARP();
    if (!A.checksum) return;
    const uint64_t len = ZCF_HEADER_SIZE + 4 * a.n_chunks;
    uint32_t h = zk_xxh32_warp(a.dst, len, lane);
    if (lane == 0) zcf_st32(a.dst + len, h);
}

typedef struct {
    uint8_t* dst;
    uint32_t len;
    uint8_t b[24];
} PutArgs;

ZK void put_body(const PutArgs& a) {
    if (ZK_TID() < a.len) a.dst[ZK_TID()] = a.b[ZK_TID()];
}

/* ------------------------------------------------------------------------ */
/* 7. Checksums of chunks or stored slices: write or verify, warp per item   */
/* ------------------------------------------------------------------------ */

typedef struct {
    const uint8_t* data;  /* payload: chunks (offs) or slices (slice_bytes)  */
    const uint64_t* offs; /* NULL: slices of slice_bytes over data_bytes     */
    uint8_t* sums;        /* the frame's checksum array                       */
    uint32_t* status;     /* verify: status[0] |= 2 on a mismatch; NULL: write */
    uint64_t n, slice_bytes, data_bytes;
} SumArgs;

ZK void zk_sum_item(const SumArgs& a, uint64_t c, uint32_t lane) {
    if (a.status && ZK_BALLOT(a.status[0] != 0)) return; /* table or checksum already bad */
    const uint8_t* p;
    uint64_t len;
    if (a.offs) {
        p = a.data + a.offs[c];
        len = a.offs[c + 1] - a.offs[c];
    } else {
        p = a.data + c * a.slice_bytes;
        len = a.data_bytes - c * a.slice_bytes < a.slice_bytes ? a.data_bytes - c * a.slice_bytes : a.slice_bytes;
    }
    uint32_t h = zk_xxh32_warp(p, len, lane);
    if (lane == 0) {
        if (!a.status) zcf_st32(a.sums + 4 * c, h);
        else if (h != zcf_ld32(a.sums + 4 * c)) ZK_ATOMIC_OR(&a.status[0], 2u);
    }
}
ZK void sums_body(const SumArgs& a) {
    uint64_t c = (uint64_t)ZK_BID() * ZK_WARPS_PER_BLOCK + ZK_WARP();
    if (c < a.n) zk_sum_item(a, c, ZK_LANE());
}

/* ------------------------------------------------------------------------ */
/* 8. Decoder                                                                */
/* ------------------------------------------------------------------------ */

typedef struct {
    const uint8_t* payload; /* chunk 0                                       */
    const uint64_t* offs;   /* (n_chunks + 1), validated by k_dplan           */
    uint8_t* dst;
    uint32_t* status;       /* [0] plan/verify, [1] decode error, [2] ~first bad chunk */
    uint64_t count, n_chunks;
    int version, dt, es, chunk_log2, dst_aligned;
} DecArgs;

/* The last group's plane bits past the end of a sequence of n entries must
 * be 0 (the CPU decoder rejects them too, so both accept the same frames);
 * planes: np u64 words a group. */
ZK int zk_pad_bad(const uint8_t* planes, uint32_t n, uint32_t np) {
    uint32_t tail = n % 64;
    if (!tail) return 0;
    const uint8_t* w = planes + 8 * np * (size_t)((n + 63) / 64 - 1);
    uint64_t any = 0;
    for (uint32_t k = 0; k < np; k++) any |= zcf_ld64(w + 8 * k);
    return (any & (~0ull << tail)) != 0;
}

#define ZK_DEC_UNROLL 4 /* groups whose loads are issued before any is decoded */

/* A chunk whose header fields passed the checks common to F3, R and F2. */
typedef struct {
    const uint8_t* p;  /* chunk header                                       */
    const uint8_t* rp; /* rest section                                       */
    uint8_t* out;      /* the chunk's first element in the destination       */
    uint64_t size, rest, G;
    uint32_t n, top, tbl, nesc, emax;
} ZkChunk;

/* One element's exponent from its code c, the step F3, F2 and R share: an
 * escaped element (esc) takes the next escape byte in element order (ballot
 * + popc from *run), any other e = top - c. Sets *err on a code above top, a
 * missing escape byte or one past the exponent range. Every lane calls it
 * (the ballot); active: the lane holds an element. */
ZK uint32_t zk_exponent_of(int active, int esc, uint32_t c, uint32_t top, const uint8_t* ep, uint32_t nesc,
                           uint32_t emax, uint32_t lane, uint32_t* run, uint32_t* err) {
    uint32_t b = ZK_BALLOT(active && esc), e = 0;
    if (active && esc) {
        uint32_t idx = *run + zk_popc(b & zk_lanemask_lt(lane));
        if (idx < nesc) e = ep[idx];
        if (idx >= nesc || e > emax) *err = 1;
    } else if (active) {
        if (c > top) *err = 1;
        else e = top - c;
    }
    *run += zk_popc(b);
    return e & emax;
}

/* The decoders below return nonzero (on every lane) if the chunk is corrupt.
 * Each checks the chunk size against its layout before reading past the
 * header: k_dplan guarantees only that [p, p + size) lies in the frame. */

/* F3 chunk by the block's ZK_T_WARPS warps, each a run of consecutive
 * groups: a warp's first escape byte is the count of escape codes (all
 * three plane bits set; padding codes are 0) in the groups before its own,
 * and every warp counts the whole chunk's for the verdict.  sc: one word of
 * shared memory.  Returns nonzero on every thread if the chunk is corrupt. */
template <int DT>
ZK int zk_decode_f3(const DecArgs& a, const ZkChunk& k, uint32_t lane, uint32_t warp, uint32_t* sc) {
    const int dt = DT, es = DT == ZCF_DT_FP32 ? 4 : 2, al = a.dst_aligned;
    const uint32_t n = k.n, top = k.top, nesc = k.nesc, emax = k.emax;
    const uint64_t G = k.G;
    const uint8_t* rp = k.rp;
    if (k.tbl || k.size != 8 + k.rest + 24 * G + nesc) return 1;
    const uint8_t* cp = rp + k.rest;
    const uint8_t* ep = cp + 24 * G;
    if (zk_pad_bad(cp, n, 3) || (dt == ZCF_DT_FP16 && zk_pad_bad(rp + n, n, 3))) return 1;
    const uint32_t per = (uint32_t)((G + ZK_T_WARPS - 1) / ZK_T_WARPS);
    const uint32_t g0 = warp * per < G ? warp * per : (uint32_t)G, g1 = g0 + per < G ? g0 + per : (uint32_t)G;
    uint32_t run = 0, total = 0; /* escapes before this warp's groups; in the chunk */
    for (uint64_t g = lane; g < G; g += 32) {
        const uint8_t* w = cp + 24 * g;
        uint32_t c = zk_popc64(zk_ld64(w) & zk_ld64(w + 8) & zk_ld64(w + 16));
        total += c;
        if (g < g0) run += c;
    }
    for (uint32_t d = 16; d; d >>= 1) total += ZK_SHFL(total, lane ^ d), run += ZK_SHFL(run, lane ^ d);
    uint32_t err = 0;
    for (uint32_t g = g0; g < g1; g++) {
        const uint8_t* w = cp + 24 * g;
        uint64_t w0 = zk_ld64(w), w1 = zk_ld64(w + 8), w2 = zk_ld64(w + 16), h0 = 0, h1 = 0, h2 = 0;
        if (dt == ZCF_DT_FP16) zk_hi3_words(rp, n, g, &h0, &h1, &h2);
        for (uint32_t h = 0; h < 2; h++) {
            uint32_t j = 32 * h + lane, i = 64 * g + j;
            int valid = i < n;
            uint32_t cd = zk_plane_bits(w0, w1, w2, j);
            uint32_t e = zk_exponent_of(valid, cd == ZCF_F3_ESC, cd, top, ep, nesc, emax, lane, &run, &err);
            if (valid)
                zk_st_elem(k.out + (size_t)i * es,
                           zk_rebuild(dt, zk_get_rest(dt, rp, n, i), e, zk_plane_bits(h0, h1, h2, j)), es, al);
        }
    }
    if (warp == 0 && lane == 0) sc[0] = 0;
    ZK_SYNCTHREADS();
    if (ZK_BALLOT(err) && lane == 0) ZK_ATOMIC_OR(&sc[0], 1u);
    ZK_SYNCTHREADS();
    const int bad = sc[0] != 0 || total != nesc;
    ZK_SYNCTHREADS(); /* sc is read by all before the next use */
    return bad;
}

/* F2 (FORMAT.md §4.5): m, and with it where the secondary planes end, is
 * the popcount of P0 & P1 over all primary groups, so those are counted
 * (and their padding checked) before the size can be. */
template <int DT>
ZK int zk_decode_f2(const DecArgs& a, const ZkChunk& k, uint32_t lane) {
    const int dt = DT, es = DT == ZCF_DT_FP32 ? 4 : 2, al = a.dst_aligned;
    const uint32_t n = k.n, top = k.top, nesc = k.nesc, emax = k.emax;
    const uint64_t G = k.G, fixed = 8 + k.rest + 16 * G;
    const uint8_t* rp = k.rp;
    if (k.tbl || k.size < fixed + nesc) return 1;
    const uint8_t* pp = rp + k.rest;
    if (zk_pad_bad(pp, n, 2)) return 1;
    uint32_t m = 0; /* <= 64 G: with padding bits 0, the second-tier elements */
    for (uint64_t g = lane; g < G; g += 32) m += zk_popc64(zk_ld64(pp + 16 * g) & zk_ld64(pp + 16 * g + 8));
    for (uint32_t d = 16; d; d >>= 1) m += ZK_SHFL(m, lane ^ d);
    uint64_t H = (m + 63) / 64;
    if (k.size != fixed + 24 * H + nesc) return 1;
    const uint8_t* sp = pp + 16 * G;
    const uint8_t* ep = sp + 24 * H;
    if (zk_pad_bad(sp, m, 3) || (dt == ZCF_DT_FP16 && zk_pad_bad(rp + n, n, 3))) return 1;
    uint32_t err = 0, run = 0, run2 = 0; /* escapes, second-tier entries so far */
    const int U = DT == ZCF_DT_FP16 ? 2 : ZK_DEC_UNROLL; /* fp16: 4 groups of hi3 words would spill */
    for (uint32_t g0 = 0; g0 < G; g0 += U) {
        /* ph: primary code | fp16 hi3 << 2, packed to spare registers */
        uint32_t ph[U][2], r[U][2];
        for (int u = 0; u < U; u++) {
            uint32_t g = g0 + u < G ? g0 + u : g0; /* past the end: reload a valid group */
            uint64_t w0 = zk_ld64(pp + 16 * g), w1 = zk_ld64(pp + 16 * g + 8), h0 = 0, h1 = 0, h2 = 0;
            if (dt == ZCF_DT_FP16) zk_hi3_words(rp, n, g, &h0, &h1, &h2);
            for (int h = 0; h < 2; h++) {
                uint32_t i = 64 * g + 32 * h + lane;
                r[u][h] = i < n ? zk_get_rest(dt, rp, n, i) : 0;
                ph[u][h] = zk_plane_bits(w0, w1, 0, 32 * h + lane) | (zk_plane_bits(h0, h1, h2, 32 * h + lane) << 2);
            }
        }
        for (int u = 0; u < U && g0 + u < G; u++) {
            uint32_t g = g0 + u;
            for (uint32_t h = 0; h < 2; h++) {
                uint32_t i = 64 * g + 32 * h + lane, pc = ph[u][h] & 3u, q = 0;
                int valid = i < n, tier2 = valid && pc == 3;
                uint32_t bt = ZK_BALLOT(tier2);
                if (tier2) { /* entry t < m: run2 counts the same bits as m */
                    uint32_t t = run2 + zk_popc(bt & zk_lanemask_lt(lane));
                    const uint8_t* w = sp + 24 * (size_t)(t >> 6) + ((t & 63) >> 3); /* the bytes of bit t */
                    q = ((w[0] >> (t & 7)) & 1u) | (((w[8] >> (t & 7)) & 1u) << 1) | (((w[16] >> (t & 7)) & 1u) << 2);
                }
                run2 += zk_popc(bt);
                uint32_t e = zk_exponent_of(valid, tier2 && q == 7, zcf_f2_symbol(pc, q), top, ep, nesc, emax,
                                            lane, &run, &err);
                if (valid) zk_st_elem(k.out + (size_t)i * es, zk_rebuild(dt, r[u][h], e, ph[u][h] >> 2), es, al);
            }
        }
    }
    return ZK_BALLOT(err || run != nesc) != 0;
}

/* T (FORMAT.md 4.6): m2 (tier-2 entries) is the popcount of the tier-1
 * code-3 bits, m3 that of tier 2's, so both are counted (and padding
 * checked) before the size can be. Each element's codes come from its own
 * lane: a ballot gives its rank among the half's tier-2 (tier-3) entries. */
/* T chunk by the block's ZK_T_WARPS warps (the encoder's split: warp w
 * decodes a run of consecutive groups).  Every warp checks the layout
 * itself (the same reads, the same verdict on every warp, so the block
 * leaves together); a warp's first tier-2 and tier-3 entries are counts over
 * the planes before its groups (popcounts of the tier-1 and tier-2 words);
 * its first escape byte comes from a scan over the warps of the escapes each
 * counts in its groups.  sc: ZK_T_WARPS + 1 words of shared memory.
 * Returns nonzero on every thread if the chunk is corrupt. */
template <int DT>
ZK int zk_decode_t(const DecArgs& a, const ZkChunk& k, uint32_t lane, uint32_t warp, uint32_t* sc) {
    const int dt = DT, es = DT == ZCF_DT_FP32 ? 4 : 2, al = a.dst_aligned;
    const uint32_t n = k.n, top = k.top, nesc = k.nesc, emax = k.emax, shape = k.tbl;
    const uint64_t G = k.G, fixed = 8 + k.rest + 16 * G;
    const uint8_t* rp = k.rp;
    if (shape >= ZCF_T_SHAPES || a.version < 2 || k.size < fixed + nesc) return 1;
    const uint8_t* pp = rp + k.rest;
    if (zk_pad_bad(pp, n, 2)) return 1;
    /* warp w's groups [g0, g1) */
    const uint32_t per = (uint32_t)((G + ZK_T_WARPS - 1) / ZK_T_WARPS);
    const uint32_t g0 = warp * per < G ? warp * per : (uint32_t)G, g1 = g0 + per < G ? g0 + per : (uint32_t)G;
    uint32_t m2 = 0, m3 = 0, s2 = 0, s3 = 0; /* totals; this warp's first entries */
    for (uint64_t g = lane; g < G; g += 32) {
        uint32_t c = zk_popc64(zk_ld64(pp + 16 * g) & zk_ld64(pp + 16 * g + 8));
        m2 += c;
        if (g < g0) s2 += c;
    }
    for (uint32_t d = 16; d; d >>= 1) m2 += ZK_SHFL(m2, lane ^ d), s2 += ZK_SHFL(s2, lane ^ d);
    uint64_t H2 = (m2 + 63) / 64;
    if (k.size < fixed + 16 * H2 + nesc) return 1;
    const uint8_t* sp = pp + 16 * G;
    if (zk_pad_bad(sp, m2, 2)) return 1;
    for (uint64_t g = lane; g < H2; g += 32) {
        uint64_t w = zk_ld64(sp + 16 * g) & zk_ld64(sp + 16 * g + 8);
        m3 += zk_popc64(w);
        if (64 * g + 64 <= s2) s3 += zk_popc64(w); /* tier-2 entries before s2: this warp's first tier-3 entry */
        else if (64 * g < s2) s3 += zk_popc64(w & ((1ull << (s2 - 64 * g)) - 1));
    }
    for (uint32_t d = 16; d; d >>= 1) m3 += ZK_SHFL(m3, lane ^ d), s3 += ZK_SHFL(s3, lane ^ d);
    uint64_t H3 = (m3 + 63) / 64;
    if (k.size != fixed + 16 * H2 + 24 * H3 + nesc) return 1;
    const uint8_t* tp = sp + 16 * H2;
    const uint8_t* ep = tp + 24 * H3;
    if (zk_pad_bad(tp, m3, 3) || (dt == ZCF_DT_FP16 && zk_pad_bad(rp + n, n, 3))) return 1;
    /* one element's rank r from its tier-1 code and the tiers' running counts */
    auto rank = [&](uint64_t w0, uint64_t w1, uint32_t j, int valid, uint32_t* run2, uint32_t* run3) {
        uint32_t r = zk_plane_bits(w0, w1, 0, j), q2 = 0;
        int tier2 = valid && r == 3;
        uint32_t b2 = ZK_BALLOT(tier2);
        if (tier2) { /* entry t < m2: run2 counts the same bits as m2 */
            uint32_t t = *run2 + zk_popc(b2 & zk_lanemask_lt(lane));
            const uint8_t* w = sp + 16 * (size_t)(t >> 6) + ((t & 63) >> 3);
            q2 = ((w[0] >> (t & 7)) & 1u) | (((w[8] >> (t & 7)) & 1u) << 1);
            r = 3 + q2;
        }
        *run2 += zk_popc(b2);
        int tier3 = tier2 && q2 == 3;
        uint32_t b3 = ZK_BALLOT(tier3);
        if (tier3) {
            uint32_t t = *run3 + zk_popc(b3 & zk_lanemask_lt(lane));
            const uint8_t* w = tp + 24 * (size_t)(t >> 6) + ((t & 63) >> 3);
            r = 6 + (((w[0] >> (t & 7)) & 1u) | (((w[8] >> (t & 7)) & 1u) << 1) | (((w[16] >> (t & 7)) & 1u) << 2));
        }
        *run3 += zk_popc(b3);
        return r;
    };
    /* pass 1: this warp's escapes, then a scan over the warps */
    uint32_t run2 = s2, run3 = s3, ce = 0;
    for (uint32_t g = g0; g < g1; g++) {
        uint64_t w0 = zk_ld64(pp + 16 * g), w1 = zk_ld64(pp + 16 * g + 8);
        for (uint32_t h = 0; h < 2; h++) {
            uint32_t j = 32 * h + lane, i = 64 * g + j;
            int valid = i < n;
            uint32_t r = rank(w0, w1, j, valid, &run2, &run3);
            ce += zk_popc(ZK_BALLOT(valid && zcf_t_pos(shape, r) == ZCF_T_ESC));
        }
    }
    if (lane == 0) sc[warp] = ce;
    ZK_SYNCTHREADS();
    uint32_t run = 0, total = 0;
    for (uint32_t w = 0; w < ZK_T_WARPS; w++) {
        if (w == warp) run = total;
        total += sc[w];
    }
    ZK_SYNCTHREADS(); /* sc is read by all before it is written again */
    /* pass 2: the elements */
    uint32_t err = 0;
    run2 = s2, run3 = s3;
    for (uint32_t g = g0; g < g1; g++) {
        uint64_t w0 = zk_ld64(pp + 16 * g), w1 = zk_ld64(pp + 16 * g + 8), h0 = 0, h1 = 0, h2 = 0;
        if (dt == ZCF_DT_FP16) zk_hi3_words(rp, n, g, &h0, &h1, &h2);
        for (uint32_t h = 0; h < 2; h++) {
            uint32_t j = 32 * h + lane, i = 64 * g + j;
            int valid = i < n;
            uint32_t r = rank(w0, w1, j, valid, &run2, &run3);
            uint32_t d = zcf_t_pos(shape, r);
            uint32_t e = zk_exponent_of(valid, d == ZCF_T_ESC, d, top, ep, nesc, emax, lane, &run, &err);
            if (valid) {
                uint32_t hv = zk_plane_bits(h0, h1, h2, j);
                zk_st_elem(k.out + (size_t)i * es, zk_rebuild(dt, zk_get_rest(dt, rp, n, i), e, hv), es, al);
            }
        }
    }
    if (lane == 0) sc[ZK_T_WARPS] = 0;
    ZK_SYNCTHREADS();
    if (ZK_BALLOT(err) && lane == 0) ZK_ATOMIC_OR(&sc[ZK_T_WARPS], 1u);
    ZK_SYNCTHREADS();
    const int bad = sc[ZK_T_WARPS] != 0 || total != nesc;
    ZK_SYNCTHREADS(); /* sc is read by all before the next use */
    return bad;
}

/* R chunk; sm: 33 u32 of this warp's shared memory for the table. */
template <int DT>
ZK int zk_decode_r(const DecArgs& a, const ZkTables& tab, const ZkChunk& k, uint32_t lane, uint32_t* sm) {
    const int dt = DT, es = DT == ZCF_DT_FP32 ? 4 : 2, al = a.dst_aligned;
    const uint32_t n = k.n, top = k.top, tbl = k.tbl, nesc = k.nesc, emax = k.emax;
    const uint8_t *p = k.p, *rp = k.rp;
    if (tbl >= (a.version >= ZCF_VERSION_R ? ZIPCCL_RANS_NTABLES : ZIPCCL_RANS_NTABLES_V1)) return 1;
    uint64_t S0 = 8 + 2 * ZCF_R_LANES + k.rest;
    if (k.size < S0 + nesc) return 1;
    if (dt == ZCF_DT_FP16 && zk_pad_bad(rp + n, n, 3)) return 1;
    uint32_t err = 0, run = 0;
    uint32_t nl = lane < n ? (n - lane + 31) / 32 : 0;
    uint32_t lsz = zcf_ld16(p + 8 + 2 * lane), incl = lsz;
    int bad = nl ? (lsz < 4 || (lsz & 1)) : lsz != 0;
    for (uint32_t d = 1; d < 32; d <<= 1) {
        uint32_t t = ZK_SHFL(incl, lane >= d ? lane - d : lane);
        if (lane >= d) incl += t;
    }
    uint32_t off = incl - lsz, lanes_total = ZK_SHFL(incl, 31);
    if (ZK_BALLOT(bad) || S0 + lanes_total + nesc != k.size) return 1;
    uint32_t* fq = sm;
    uint32_t* cm = sm + 16; /* 17 entries: cm[16] = M */
    if (lane < 16) {
        uint32_t cacc = 0;
        for (uint32_t k = 0; k < lane; k++) cacc += tab.f[tbl][k];
        fq[lane] = tab.f[tbl][lane];
        cm[lane] = cacc;
    }
    if (lane == 16) cm[16] = ZCF_R_M;
    ZK_SYNCWARP();
    const uint8_t* st = p + S0 + off;
    const uint8_t* ep = p + S0 + lanes_total;
    uint32_t x = ZCF_R_L, nwords = 0, wi = 0;
    if (nl) {
        x = zcf_ld32(st);
        nwords = (lsz - 4) / 2;
        if (x < ZCF_R_L) err = 1;
    }
    if (ZK_BALLOT(err)) return 1;
    uint32_t kmax = (n + 31) / 32;
    for (uint32_t k0 = 0; k0 < kmax; k0 += ZK_R_BATCH) {
        uint32_t rb[ZK_R_BATCH], hb[ZK_R_BATCH]; /* rest and fp16 hi3 bits, loaded ahead */
        for (uint32_t t = 0; t < ZK_R_BATCH; t++) {
            uint32_t i = 32 * (k0 + t) + lane;
            rb[t] = i < n ? zk_get_rest(dt, rp, n, i) : 0;
            hb[t] = 0;
            if (dt == ZCF_DT_FP16 && i < n) {
                const uint8_t* hw = rp + n + 24 * (size_t)(i >> 6);
                hb[t] = zk_plane_bits(zk_ld64(hw), zk_ld64(hw + 8), zk_ld64(hw + 16), i & 63);
            }
        }
        for (uint32_t t = 0; t < ZK_R_BATCH && k0 + t < kmax; t++) {
            uint32_t i = 32 * (k0 + t) + lane;
            int active = i < n;
            uint32_t s = 0;
            if (active) {
                uint32_t slot = x & (ZCF_R_M - 1);
                s = slot >= cm[8] ? 8 : 0;
                s += slot >= cm[s + 4] ? 4 : 0;
                s += slot >= cm[s + 2] ? 2 : 0;
                s += slot >= cm[s + 1] ? 1 : 0;
                x = fq[s] * (x >> ZCF_R_PROB_BITS) + slot - cm[s];
                if (x < ZCF_R_L) {
                    if (wi < nwords) x = (x << 16) | zcf_ld16(st + 4 + 2 * wi++);
                    else err = 1;
                }
            }
            uint32_t e = zk_exponent_of(active, s == ZCF_R_ESC, s, top, ep, nesc, emax, lane, &run, &err);
            if (active) zk_st_elem(k.out + (size_t)i * es, zk_rebuild(dt, rb[t], e, hb[t]), es, al);
        }
    }
    if (nl && (x != ZCF_R_L || wi != nwords)) err = 1;
    return ZK_BALLOT(err || run != nesc) != 0;
}

/* Chunk c's view (*k) and its mode byte. */
template <int DT>
ZK uint32_t zk_chunk_view(const DecArgs& a, uint64_t c, ZkChunk* k) {
    const int es = DT == ZCF_DT_FP32 ? 4 : 2;
    const uint64_t first = c << a.chunk_log2, C = 1ull << a.chunk_log2;
    k->n = (uint32_t)(a.count - first < C ? a.count - first : C);
    k->p = a.payload + a.offs[c];
    k->size = a.offs[c + 1] - a.offs[c]; /* >= 8, checked by k_dplan */
    k->out = a.dst + first * es;
    k->top = k->p[1];
    k->tbl = k->p[2];
    k->nesc = zcf_ld32(k->p + 4);
    k->emax = (1u << zcf_exp_bits(DT)) - 1u;
    k->rest = zcf_rest_size(DT, k->n);
    k->G = (k->n + 63) / 64;
    k->rp = k->p + 8 + (k->p[0] == ZCF_MODE_R ? 2 * (int)ZCF_R_LANES : 0);
    return k->p[0];
}
/* F2 and R chunks are decoded by one warp; the others by the block. */
ZK int zk_warp_mode(uint32_t mode) { return mode == ZCF_MODE_F2 || mode == ZCF_MODE_R; }

/* A raw, C, T or F3 chunk (or one of no known mode) by the whole block;
 * returns nonzero (on every lane) if it is corrupt.  sm: the T and F3
 * decoders' scan words. */
template <int DT>
ZK int zk_decode_block_chunk(const DecArgs& a, const ZkChunk& k, uint32_t mode, uint32_t lane, uint32_t warp,
                             uint32_t* sm) {
    const int es = DT == ZCF_DT_FP32 ? 4 : 2;
    if (k.p[3]) return 1;
    const uint32_t tid = 32 * warp + lane, nt = 32 * ZK_T_WARPS;
    if (mode == ZCF_MODE_RAW) { /* every warp copies */
        if (k.top || k.tbl || k.nesc || k.size != 8 + (uint64_t)k.n * es) return 1;
        zk_copy_bytes(k.out, k.p + 8, k.n * (uint32_t)es, tid, nt); /* a u32 store per word of out */
        return 0;
    }
    if (mode == ZCF_MODE_C) { /* FORMAT.md 4.7: version 3 only */
        if (a.version < 3 || k.top || k.tbl || k.nesc || k.size != 8 + (uint64_t)es) return 1;
        uint32_t v = es == 2 ? zcf_ld16(k.p + 8) : zcf_ld32(k.p + 8);
        int al = a.dst_aligned;
        for (uint32_t i = tid; i < k.n; i += nt) zk_st_elem(k.out + (size_t)i * es, v, es, al);
        return 0;
    }
    if (k.top > k.emax || k.nesc > k.n) return 1;
    if (mode == ZCF_MODE_T) return zk_decode_t<DT>(a, k, lane, warp, sm);
    if (mode == ZCF_MODE_F3) return zk_decode_f3<DT>(a, k, lane, warp, sm);
    return 1;
}
/* An F2 or R chunk by one warp; sm: this warp's 40 words (R's table). */
template <int DT>
ZK int zk_decode_warp_chunk(const DecArgs& a, const ZkTables& tab, const ZkChunk& k, uint32_t mode, uint32_t lane,
                            uint32_t* sm) {
    if (k.p[3] || k.top > k.emax || k.nesc > k.n) return 1;
    if (mode == ZCF_MODE_F2) return zk_decode_f2<DT>(a, k, lane);
    return zk_decode_r<DT>(a, tab, k, lane, sm);
}
ZK void zk_chunk_bad(const DecArgs& a, uint64_t c) { /* lane 0 of a warp that found chunk c corrupt */
    ZK_ATOMIC_OR(&a.status[1], 1u);
    ZK_ATOMIC_MAX(&a.status[2], 0xFFFFFFFFu - (uint32_t)(c < 0xFFFFFFFEu ? c : 0xFFFFFFFEu));
}

/* A block of ZK_T_WARPS warps decodes slots j, j + per, ... of its frame, a
 * slot W chunks: W = 1 where the frame's chunks are decoded by blocks (T
 * and F3 frames: all warps on the chunk, as the encoders split it), W =
 * ZK_T_WARPS where they are decoded by warps (F2 and R frames: warp w takes
 * the slot's chunk w).  Either way a raw, C, T or F3 chunk takes the whole
 * block, an F2 or R chunk one warp.  Shared memory: ZK_DEC_SMEM bytes
 * (each warp's R table, then the T and F3 decoders' scan words). */
#define ZK_DEC_SMEM (4 * (40 * ZK_T_WARPS + ZK_T_WARPS + 1))
template <int DT>
ZK void zk_decode_frame(const DecArgs& a, const ZkTables& tab, uint64_t j, uint64_t per, uint32_t W) {
    const uint32_t lane = ZK_LANE(), warp = ZK_WARP();
    if (ZK_BALLOT(a.status[0] != 0)) return; /* table or checksum failed: write nothing (uniform) */
    uint32_t* sm = (uint32_t*)ZK_SMEM();
    for (uint64_t s = j; s * W < a.n_chunks; s += per) {
        const uint64_t c0 = s * W, cn = c0 + W < a.n_chunks ? c0 + W : a.n_chunks;
        ZkChunk k;
        for (uint64_t c = c0; c < cn; c++) { /* the block's chunks, one after the other */
            const uint32_t mode = zk_chunk_view<DT>(a, c, &k);
            if (zk_warp_mode(mode)) continue;
            if (zk_decode_block_chunk<DT>(a, k, mode, lane, warp, sm + 40 * ZK_T_WARPS) && lane == 0) zk_chunk_bad(a, c);
            ZK_SYNCTHREADS(); /* the scan words are the next chunk's */
        }
        for (uint64_t c = c0 + warp; c < cn; c += ZK_T_WARPS) { /* the warps' chunks, side by side */
            const uint32_t mode = zk_chunk_view<DT>(a, c, &k);
            if (zk_warp_mode(mode) && zk_decode_warp_chunk<DT>(a, tab, k, mode, lane, sm + 40 * warp) && lane == 0)
                zk_chunk_bad(a, c);
        }
        ZK_SYNCTHREADS();
    }
}

/* ------------------------------------------------------------------------ */
/* 8b. Decompress on the device: header, table, checksums, chunks, stored    */
/* ------------------------------------------------------------------------ */

/* A frame's header (FORMAT.md §2) as read and checked. */
typedef struct {
    uint64_t count, nc, prefix, total; /* nc: chunks; prefix: header, sums, table */
    int dt, es, cs, stored, log2, version;
} ZkHdr;

/* zk_hdr_parse's verdicts, in the CPU decoder's order of checks. */
enum {
    ZK_H_OK = 0, ZK_H_MAGIC, ZK_H_VERSION, ZK_H_DTYPE, ZK_H_FLAGS, ZK_H_LOG2, ZK_H_COUNT, ZK_H_HOLD,
    ZK_H_HSUM, ZK_H_SIZE, ZK_H_MISMATCH, ZK_H_DSTSMALL, ZK_H_NODST, ZK_H_WORKSPACE
};

/* Checks the header h (ZCF_HEADER_SIZE + 4 bytes, zero past srcSize) of a
 * frame of srcSize bytes to be decoded into cap bytes (have_dst: a
 * destination was given), as a dtype code expect (0: any): ZK_H_OK and *o,
 * or the first check that fails (o's count, nc, prefix and total set from
 * ZK_H_HOLD on, for the messages).  The device decides by it whether to
 * decode; the host names the fault by it (zk_dec_header). */
ZKHD int zk_hdr_parse(const uint8_t* h, uint64_t srcSize, uint64_t cap, int expect, int have_dst, ZkHdr* o) {
    if (zcf_ld32(h) != ZCF_MAGIC) return ZK_H_MAGIC;
    if (h[4] < ZCF_VERSION_MIN || h[4] > ZCF_VERSION) return ZK_H_VERSION;
    const int dt = h[5];
    if (dt < ZCF_DT_BF16 || dt > ZCF_DT_FP32) return ZK_H_DTYPE;
    if (h[6] & ~(ZCF_FLAG_CHECKSUM | ZCF_FLAG_STORED)) return ZK_H_FLAGS;
    const int cs = (h[6] & ZCF_FLAG_CHECKSUM) != 0, stored = (h[6] & ZCF_FLAG_STORED) != 0, log2 = h[7];
    if (log2 < ZCF_CHUNK_LOG2_MIN || log2 > ZCF_CHUNK_LOG2_MAX) return ZK_H_LOG2;
    const uint64_t count = zcf_ld64(h + 8);
    const int es = zcf_elem_size(dt);
    if (count >= (1ull << 62) / es) return ZK_H_COUNT;
    const uint64_t nc = zcf_num_chunks(count, log2), total = count * es;
    const uint64_t prefix = ZCF_HEADER_SIZE + (cs ? 4 + 4 * nc : 0) + (stored ? 0 : 4 * nc);
    o->count = count, o->nc = nc, o->prefix = prefix, o->total = total; /* for the faults below */
    if (prefix + (stored ? total : 0) > srcSize) return ZK_H_HOLD;
    if (cs && (stored || nc == 0) && zk_xxh32(h, ZCF_HEADER_SIZE) != zcf_ld32(h + ZCF_HEADER_SIZE)) return ZK_H_HSUM;
    if ((stored || nc == 0) && prefix + (stored ? total : 0) != srcSize) return ZK_H_SIZE;
    if (expect && dt != expect) return ZK_H_MISMATCH;
    if (cap < total) return ZK_H_DSTSMALL;
    if (total && !have_dst) return ZK_H_NODST;
    o->dt = dt, o->es = es, o->cs = cs, o->stored = stored, o->log2 = log2, o->version = h[4];
    return ZK_H_OK;
}

/* What the device learned of a frame, read back by the host in one copy
 * with the other frames' (the decompress's one host wait). Zeroed first. */
typedef struct {
    uint8_t h[ZCF_HEADER_SIZE + 4]; /* the header as read: the host names a fault from it */
    uint32_t code;                  /* zk_hdr_parse's (ZK_H_WORKSPACE: offs too small)   */
    uint32_t warp_frame;            /* an R frame, or chunk 0 is F2 or R: decoded by warps */
    uint32_t status[4];             /* [0] |= 1 table, 2 checksum; [1] a chunk corrupt; [2] ~first bad chunk */
    ZkHdr hdr;
} ZkInfo;

typedef struct { /* one frame of a launch */
    const uint8_t* src;
    uint8_t* dst;
    ZkInfo* info;
    uint64_t* offs;            /* room for offs_cap + 1 chunk offsets */
    uint64_t srcSize, cap, offs_cap;
} DecBuf;
typedef struct {
    DecBuf buf[ZK_BATCH_MAX];
    int k, expect; /* expect: a dtype code, 0 for any */
    uint32_t per;  /* blocks per frame: each takes every per-th chunk (or 64 KiB of a stored frame) */
    ZkTables tab;
} DecLaunch;

/* Kernel 1, one warp per frame: the header read and checked on the device. */
ZK void dhead_body(const DecLaunch& A) {
    const DecBuf& b = A.buf[ZK_BID()];
    if (ZK_LANE()) return;
    ZkInfo* in = b.info;
    for (uint32_t i = 0; i < ZCF_HEADER_SIZE + 4; i++) in->h[i] = i < b.srcSize ? b.src[i] : 0;
    ZkHdr o;
    memset(&o, 0, sizeof o);
    uint32_t code = (uint32_t)zk_hdr_parse(in->h, b.srcSize, b.cap, A.expect, b.dst != NULL, &o);
    if (code == ZK_H_OK && !o.stored && o.nc > b.offs_cap) code = ZK_H_WORKSPACE;
    if (code == ZK_H_OK && !o.stored && o.nc && o.prefix < b.srcSize) { /* how its chunks are decoded */
        const uint32_t mode0 = b.src[o.prefix];
        in->warp_frame = o.version == ZCF_VERSION_R || zk_warp_mode(mode0);
    }
    in->hdr = o;
    in->code = code;
}
/* The frame a block works on (A.per blocks each) and its index there. */
ZK const DecBuf& zk_dec_buf(const DecLaunch& A, uint64_t* j) {
    *j = ZK_BID() % A.per;
    return A.buf[ZK_BID() / A.per];
}
/* Kernel 2, a block per coded frame: the header checksum over the table,
 * the table checked and prefix-summed into offs (k_plan's body). */
ZK void dplan_body(const DecLaunch& A) {
    const DecBuf& b = A.buf[ZK_BID()];
    const ZkInfo* in = b.info;
    if (in->code || in->hdr.stored || in->hdr.nc == 0) return;
    PlanArgs pl;
    memset(&pl, 0, sizeof pl);
    pl.frame = b.src;
    pl.offs = b.offs;
    pl.status = b.info->status;
    pl.n_chunks = in->hdr.nc;
    pl.payload = b.srcSize - in->hdr.prefix;
    pl.max_chunk = 256 + (8ull << in->hdr.log2); /* far above any valid chunk; keeps sums < 2^63 */
    pl.checksum = in->hdr.cs;
    plan_body(pl);
}
/* Kernel 3, warps over the chunks (or a stored frame's slices): their
 * checksums verified. */
ZK void dsums_body(const DecLaunch& A) {
    uint64_t j;
    const DecBuf& b = zk_dec_buf(A, &j);
    const ZkInfo* in = b.info;
    const ZkHdr& x = in->hdr;
    if (in->code || !x.cs || x.nc == 0) return;
    SumArgs s;
    memset(&s, 0, sizeof s);
    s.data = b.src + x.prefix;
    s.status = b.info->status;
    s.n = x.nc;
    if (x.stored) {
        s.sums = (uint8_t*)b.src + ZCF_HEADER_SIZE + 4;
        s.slice_bytes = (uint64_t)x.es << x.log2;
        s.data_bytes = x.total;
    } else {
        s.offs = b.offs;
        s.sums = (uint8_t*)b.src + ZCF_HEADER_SIZE + 4 * x.nc + 4;
    }
    for (uint64_t c = j * ZK_WARPS_PER_BLOCK + ZK_WARP(); c < x.nc; c += (uint64_t)A.per * ZK_WARPS_PER_BLOCK)
        zk_sum_item(s, c, ZK_LANE());
}
/* Kernel 4, blocks of ZK_T_WARPS warps over the chunks: decoded. */
ZK void ddecode_body(const DecLaunch& A) {
    uint64_t j;
    const DecBuf& b = zk_dec_buf(A, &j);
    const ZkInfo* in = b.info;
    const ZkHdr& x = in->hdr;
    if (in->code || x.stored || x.nc == 0) return;
    DecArgs d;
    memset(&d, 0, sizeof d);
    d.payload = b.src + x.prefix;
    d.offs = b.offs;
    d.dst = b.dst;
    d.status = b.info->status;
    d.count = x.count;
    d.n_chunks = x.nc;
    d.dt = x.dt;
    d.version = x.version;
    d.es = x.es;
    d.chunk_log2 = x.log2;
    d.dst_aligned = ((uintptr_t)b.dst % x.es) == 0;
    const uint32_t W = in->warp_frame ? ZK_T_WARPS : 1;
    if (x.dt == ZCF_DT_BF16) zk_decode_frame<ZCF_DT_BF16>(d, A.tab, j, A.per, W);
    else if (x.dt == ZCF_DT_FP16) zk_decode_frame<ZCF_DT_FP16>(d, A.tab, j, A.per, W);
    else zk_decode_frame<ZCF_DT_FP32>(d, A.tab, j, A.per, W);
}
/* Kernel 5, blocks over 64 KiB pieces: a stored frame's data copied out,
 * once its checksums passed (a damaged one writes nothing). */
#define ZK_STORE_PIECE (64u << 10)
ZK void dstore_body(const DecLaunch& A) {
    uint64_t j;
    const DecBuf& b = zk_dec_buf(A, &j);
    const ZkInfo* in = b.info;
    const ZkHdr& x = in->hdr;
    if (in->code || !x.stored || in->status[0]) return;
    for (uint64_t at = j * ZK_STORE_PIECE; at < x.total; at += (uint64_t)A.per * ZK_STORE_PIECE) {
        const uint32_t len = (uint32_t)(x.total - at < ZK_STORE_PIECE ? x.total - at : ZK_STORE_PIECE);
        zk_copy_bytes(b.dst + at, b.src + x.prefix + at, len, ZK_TID(), 256);
    }
}

/* ------------------------------------------------------------------------ */
/* 9. Kernels and launches                                                   */
/* ------------------------------------------------------------------------ */

#ifdef ZIPCCL_CUDA_EMU
/* on the stream (emu::on_stream: at once, or queued where the runtime
 * stand-in defers streams), the arguments copied as a launch copies them */
#define ZK_LAUNCH(name, grid, block, smem, stream, args)                                                       \
    (emu::on_stream((stream), [g_ = (uint64_t)(grid), b_ = (unsigned)(block), s_ = (size_t)(smem), a_ = (args)]() { \
         emu_launch(g_, b_, s_, [&]() { name##_body(a_); });                                                    \
     }),                                                                                                        \
     zipcclSuccess)
static zipcclResult_t zk_memcpy(void* d, const void* s, size_t n, void* stream) {
    if (n) emu::on_stream(stream, [=]() { memmove(d, s, n); });
    return zipcclSuccess;
}
static zipcclResult_t zk_memset(void* d, int v, size_t n, void* stream) {
    emu::on_stream(stream, [=]() { memset(d, v, n); });
    return zipcclSuccess;
}
static zipcclResult_t zk_sync(void* stream) {
    zdev_count_sync();
    if (emu::stream_sync) emu::stream_sync(stream);
    return zipcclSuccess;
}
#else
/* min_blocks: the warp-per-chunk kernels want >= 32 resident warps an SM
 * (<= 64 registers) to keep enough loads in flight. */
/* Kernel arguments travel in the launch, which takes 4 KB on any driver. */
static_assert(sizeof(EncArgs) <= 4096 && sizeof(HeadArgs) <= 4096 && sizeof(DecLaunch) <= 4096,
              "kernel arguments over 4 KB");
#define ZK_KERNEL(name, Args, threads, min_blocks) \
    __global__ void __launch_bounds__(threads, min_blocks) k_##name(const __grid_constant__ Args a) { name##_body(a); }
ZK_KERNEL(encode_t_bf16, EncArgs, 32 * ZK_T_WARPS, 4)
ZK_KERNEL(encode_t_fp16, EncArgs, 32 * ZK_T_WARPS, 4)
ZK_KERNEL(encode_t_fp32, EncArgs, 32 * ZK_T_WARPS, 4)
ZK_KERNEL(encode_f2_bf16, EncArgs, 32 * ZK_WARPS_PER_BLOCK, 8)
ZK_KERNEL(encode_f2_fp16, EncArgs, 32 * ZK_WARPS_PER_BLOCK, 8)
ZK_KERNEL(encode_f2_fp32, EncArgs, 32 * ZK_WARPS_PER_BLOCK, 8)
ZK_KERNEL(encode_f3_bf16, EncArgs, 32 * ZK_T_WARPS, 4)
ZK_KERNEL(encode_f3_fp16, EncArgs, 32 * ZK_T_WARPS, 4)
ZK_KERNEL(encode_f3_fp32, EncArgs, 32 * ZK_T_WARPS, 4)
ZK_KERNEL(encode_r_bf16, EncArgs, 32, 1)
ZK_KERNEL(encode_r_fp16, EncArgs, 32, 1)
ZK_KERNEL(encode_r_fp32, EncArgs, 32, 1)
ZK_KERNEL(head, HeadArgs, 32, 1)
ZK_KERNEL(put, PutArgs, 32, 1)
ZK_KERNEL(sums, SumArgs, 32 * ZK_WARPS_PER_BLOCK, 1)
ZK_KERNEL(dhead, DecLaunch, 32, 1)
ZK_KERNEL(dplan, DecLaunch, ZK_SCAN_THREADS, 1)
ZK_KERNEL(dsums, DecLaunch, 32 * ZK_WARPS_PER_BLOCK, 1)
ZK_KERNEL(ddecode, DecLaunch, 32 * ZK_T_WARPS, 4)
ZK_KERNEL(dstore, DecLaunch, 256, 1)

static zipcclResult_t zk_cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return zipcclSuccess;
    return zipcclSetError(zipcclSystemError, "CUDA codec: %s: %s", what, cudaGetErrorString(e));
}
#define ZK_LAUNCH(name, grid, block, smem, stream, args) \
    (k_##name<<<(unsigned)(grid), (block), (smem), (cudaStream_t)(stream)>>>(args), \
     zk_cuda(cudaGetLastError(), "launch k_" #name))
static zipcclResult_t zk_memcpy(void* d, const void* s, size_t n, void* stream) {
    if (!n) return zipcclSuccess;
    return zk_cuda(cudaMemcpyAsync(d, s, n, cudaMemcpyDefault, (cudaStream_t)stream), "cudaMemcpyAsync");
}
static zipcclResult_t zk_memset(void* d, int v, size_t n, void* stream) {
    return zk_cuda(cudaMemsetAsync(d, v, n, (cudaStream_t)stream), "cudaMemsetAsync");
}
/* a host wait the device layer counts like its own (device.h) */
static zipcclResult_t zk_sync(void* stream) {
    zdev_count_sync();
    return zk_cuda(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
}
#endif

/* ------------------------------------------------------------------------ */
/* 10. Host side: workspace, compress, decompress                            */
/* ------------------------------------------------------------------------ */

static int zk_dt(zipcclDataType_t d) {
    return d == zipcclBfloat16 ? ZCF_DT_BF16 : d == zipcclFloat16 ? ZCF_DT_FP16 : d == zipcclFloat32 ? ZCF_DT_FP32 : 0;
}
static zipcclDataType_t zk_dtype(int dt) {
    return dt == ZCF_DT_BF16 ? zipcclBfloat16 : dt == ZCF_DT_FP16 ? zipcclFloat16 : zipcclFloat32;
}
static size_t zk_align(size_t x) { return (x + 255) & ~(size_t)255; }

/* Workspace layouts. Compress (one launch): look | misc (the look-back
 * words, 8 bytes a chunk; the ticket, the C flags, a single call's total),
 * zeroed before the encoder runs: the frame itself is written in place.
 * Decompress (one frame): info | offs (what the device learns of the
 * frame, zk_dec_run; the chunk offsets).  A frame's chunk_log2 may be as
 * small as 10, so the decompress part is sized for that. */
typedef struct {
    size_t look, offs, misc, total;
} ZkLayout;

static ZkLayout zk_layout_compress(uint64_t n_chunks) {
    ZkLayout L;
    memset(&L, 0, sizeof L);
    L.look = 0;
    L.misc = zk_align(8 * n_chunks);
    L.total = zk_align(L.misc + 128);
    return L;
}
/* The workspace of one launch's buffers of n_chunks chunks in all. */
static size_t zk_launch_ws(uint64_t n_chunks) { return zk_layout_compress(n_chunks).total; }
static size_t zk_info_head(int k) { return zk_align((size_t)k * sizeof(ZkInfo)); }
static ZkLayout zk_layout_decompress(uint64_t n_chunks) {
    ZkLayout L;
    memset(&L, 0, sizeof L);
    L.misc = 0;
    L.offs = zk_info_head(1);
    L.total = L.offs + zk_align(8 * (n_chunks + 1));
    return L;
}

static size_t zk_workspace_size(size_t count, zipcclDataType_t dtype) {
    int dt = zk_dt(dtype);
    if (!dt) return 0;
    size_t c = zk_layout_compress(zcf_num_chunks(count, ZCF_CHUNK_LOG2)).total;
    size_t d = zk_layout_decompress(zcf_num_chunks(count, ZCF_CHUNK_LOG2_MIN)).total;
    return (c > d ? c : d) + 256; /* + room to align a caller's odd pointer */
}

/* The workspace as the kernels want it: 256-aligned, with its usable size. */
static uint8_t* zk_ws_align(void* ws, size_t* size) {
    uintptr_t p = (uintptr_t)ws, a = (p + 255) & ~(uintptr_t)255;
    *size = *size > a - p ? *size - (a - p) : 0;
    return (uint8_t*)a;
}

static void zk_put_header(uint8_t* h, int version, int dt, int flags, uint64_t count) {
    zcf_st32(h, ZCF_MAGIC);
    h[4] = (uint8_t)version;
    h[5] = (uint8_t)dt;
    h[6] = (uint8_t)flags;
    h[7] = ZCF_CHUNK_LOG2;
    zcf_st64(h + 8, count);
}

static ZkTables zk_tables(void) {
    ZkTables t;
    memcpy(t.f, zipccl_rans_freq, sizeof t.f);
    memcpy(t.cost, zipccl_rans_cost, sizeof t.cost);
    memcpy(t.top_off, zipccl_rans_top_off, sizeof t.top_off);
    return t;
}

static zipcclResult_t zk_write_stored(const uint8_t* src, uint64_t count, int dt, int cs, uint8_t* dst,
                                      size_t cap, size_t* dstSize, void* stream) {
    int es = zcf_elem_size(dt);
    uint64_t nc = zcf_num_chunks(count, ZCF_CHUNK_LOG2);
    size_t need = ZCF_HEADER_SIZE + count * es + (cs ? 4 + 4 * nc : 0);
    if (cap < need) return zipcclSetError(zipcclDstTooSmall, "compress (CUDA): stored frame needs %zu bytes, have %zu", need, cap);
    PutArgs h;
    memset(&h, 0, sizeof h);
    h.dst = dst;
    zk_put_header(h.b, ZCF_VERSION_MIN, dt, ZCF_FLAG_STORED | (cs ? ZCF_FLAG_CHECKSUM : 0), count);
    h.len = ZCF_HEADER_SIZE;
    if (cs) {
        zcf_st32(h.b + ZCF_HEADER_SIZE, zk_xxh32(h.b, ZCF_HEADER_SIZE));
        h.len += 4;
    }
    ZIPCCL_TRY(ZK_LAUNCH(put, 1, 32, 0, stream, h));
    size_t data = ZCF_HEADER_SIZE + (cs ? 4 + 4 * nc : 0);
    ZIPCCL_TRY(zk_memcpy(dst + data, src, count * es, stream));
    if (cs && nc) {
        SumArgs s;
        memset(&s, 0, sizeof s);
        s.data = src;
        s.sums = dst + ZCF_HEADER_SIZE + 4;
        s.n = nc;
        s.slice_bytes = (uint64_t)es << ZCF_CHUNK_LOG2;
        s.data_bytes = count * es;
        ZIPCCL_TRY(ZK_LAUNCH(sums, (nc + ZK_WARPS_PER_BLOCK - 1) / ZK_WARPS_PER_BLOCK, 32 * ZK_WARPS_PER_BLOCK, 0, stream, s));
    }
    *dstSize = need;
    return zipcclSuccess;
}

/* One buffer's compression, from its arguments to the frame: the checks
 * (zk_compress_check), the launches (zk_compress_launch: the frame written
 * in place, the coded total left on the device), and once the host has
 * read that total, the choice of the stored frame (zk_compress_finish).
 * zk_compress runs them for one buffer (one host wait), zk_compress_batch
 * for k, ZK_BATCH_MAX to a launch (one host wait for all): the same
 * kernels, the same bytes. */
typedef struct {
    const uint8_t* src;
    uint8_t* dst;
    size_t count, cap;
    int dt, es, cs, stored; /* stored: the stored frame without coding (codec stored, count 0) */
    zipcclCodec_t codec;
    uint64_t nc;
    size_t prefix, bound;    /* the coded frame's header part and the stored frame's size */
} ZkEnc;

static zipcclResult_t zk_compress_check(const void* d_src, size_t count, zipcclDataType_t dtype, void* d_dst,
                                        size_t cap, const zipcclCodecParams_t* params, ZkEnc* e) {
    int dt = zk_dt(dtype);
    if (!dt) return zipcclSetError(zipcclInvalidArgument, "compress (CUDA): unknown dtype %d", (int)dtype);
    if (!d_dst || (count && !d_src))
        return zipcclSetError(zipcclInvalidArgument, "compress (CUDA): null pointer argument");
    int es = zcf_elem_size(dt);
    if (count > ((size_t)1 << 61) / es)
        return zipcclSetError(zipcclInvalidArgument, "compress (CUDA): count %zu too large", count);
    /* read as an int: a C caller may pass any value, which C++ may not load as the enum */
    int cv = (int)zipcclCodecDefault;
    static_assert(sizeof(zipcclCodec_t) == sizeof(int), "zipcclCodec_t is an int");
    if (params) memcpy(&cv, &params->codec, sizeof cv);
    if (cv == (int)zipcclCodecDefault) cv = (int)zipcclCodecFast;
    if (cv < (int)zipcclCodecFast || cv > (int)zipcclCodecF2)
        return zipcclSetError(zipcclInvalidArgument, "compress (CUDA): unknown codec %d", cv);
    const zipcclCodec_t codec = (zipcclCodec_t)cv;
    memset(e, 0, sizeof *e);
    e->src = (const uint8_t*)d_src;
    e->dst = (uint8_t*)d_dst;
    e->count = count;
    e->cap = cap;
    e->dt = dt;
    e->es = es;
    e->cs = params ? params->checksum != 0 : 0;
    e->codec = codec;
    e->stored = codec == zipcclCodecStored || count == 0;
    e->nc = zcf_num_chunks(count, ZCF_CHUNK_LOG2);
    e->prefix = ZCF_HEADER_SIZE + 4 * e->nc + (e->cs ? 4 + 4 * e->nc : 0);
    e->bound = ZCF_HEADER_SIZE + count * es + (e->cs ? 4 + 4 * e->nc : 0);
    return zipcclSuccess;
}

/* The workspace one buffer's launches use (zk_layout_compress; 0 when the
 * frame is stored without coding). */
static size_t zk_compress_ws(const ZkEnc* e) { return e->stored ? 0 : zk_launch_ws(e->nc); }

/* Encode k (1..ZK_BATCH_MAX) buffers into their frames on `stream` in one
 * launch of the encoder and one of k_head: the same dtype, codec and
 * checksum setting, none stored without coding.  The workspace at ws
 * (256-aligned, zk_launch_ws of their chunks): their look-back words one
 * buffer after the other, then the ticket and the C flags.  Buffer i's
 * coded total goes to totals[i] (device). */
static zipcclResult_t zk_compress_launch(const ZkEnc* x, int k, uint8_t* ws, uint64_t* totals, void* stream) {
    const int dt = x[0].dt;
    const zipcclCodec_t codec = x[0].codec;
    uint64_t nc = 0;
    for (int i = 0; i < k; i++) nc += x[i].nc;
    const ZkLayout L = zk_layout_compress(nc);
    uint32_t* misc = (uint32_t*)(ws + L.misc);
    EncArgs e;
    HeadArgs hd;
    memset(&e, 0, sizeof e);
    memset(&hd, 0, sizeof hd);
    e.ticket = misc;
    e.n_chunks = nc;
    e.k = k;
    e.tab = zk_tables();
    hd.checksum = x[0].cs;
    for (int i = 0, first = 0; i < k; first += (int)x[i].nc, i++) {
        EncBuf* b = &e.buf[i];
        b->src = x[i].src;
        b->dst = x[i].dst;
        b->look = (uint64_t*)(ws + L.look) + first;
        b->cflag = misc + 1 + i;
        b->total = totals + i;
        b->count = x[i].count;
        b->n_chunks = x[i].nc;
        b->first = (uint64_t)first;
        b->prefix = x[i].prefix;
        b->cap = x[i].cap;
        b->checksum = x[i].cs;
        b->src_aligned = ((uintptr_t)x[i].src % x[i].es) == 0;
        HeadBuf* h = &hd.buf[i];
        h->dst = x[i].dst;
        h->total = b->total;
        h->cflag = b->cflag;
        h->n_chunks = x[i].nc;
        h->prefix = x[i].prefix;
        h->bound = x[i].bound;
        h->cap = x[i].cap;
        /* version 4 for R frames, 2 only where T chunks may be, 3 (set by
         * k_head) where a C chunk is, as the CPU codec writes */
        zk_put_header(h->header,
                      codec == zipcclCodecDense  ? ZCF_VERSION_R
                      : codec == zipcclCodecFast ? ZCF_VERSION_T
                                                 : ZCF_VERSION_MIN,
                      dt, x[i].cs ? ZCF_FLAG_CHECKSUM : 0, x[i].count);
    }
    const uint64_t warp_blocks = (nc + ZK_WARPS_PER_BLOCK - 1) / ZK_WARPS_PER_BLOCK;
    const unsigned wb = 32 * ZK_WARPS_PER_BLOCK, tb = 32 * ZK_T_WARPS;
    ZIPCCL_TRY(zk_memset(ws, 0, L.total, stream));
    if (codec == zipcclCodecDense && dt == ZCF_DT_BF16)
        ZIPCCL_TRY(ZK_LAUNCH(encode_r_bf16, nc, 32, zk_encode_r_smem(), stream, e));
    else if (codec == zipcclCodecDense && dt == ZCF_DT_FP16)
        ZIPCCL_TRY(ZK_LAUNCH(encode_r_fp16, nc, 32, zk_encode_r_smem(), stream, e));
    else if (codec == zipcclCodecDense)
        ZIPCCL_TRY(ZK_LAUNCH(encode_r_fp32, nc, 32, zk_encode_r_smem(), stream, e));
    else if (codec == zipcclCodecFast && dt == ZCF_DT_BF16)
        ZIPCCL_TRY(ZK_LAUNCH(encode_t_bf16, nc, tb, ZK_T_SMEM, stream, e));
    else if (codec == zipcclCodecFast && dt == ZCF_DT_FP16)
        ZIPCCL_TRY(ZK_LAUNCH(encode_t_fp16, nc, tb, ZK_T_SMEM, stream, e));
    else if (codec == zipcclCodecFast)
        ZIPCCL_TRY(ZK_LAUNCH(encode_t_fp32, nc, tb, ZK_T_SMEM, stream, e));
    else if (codec == zipcclCodecF2 && dt == ZCF_DT_BF16)
        ZIPCCL_TRY(ZK_LAUNCH(encode_f2_bf16, warp_blocks, wb, 0, stream, e));
    else if (codec == zipcclCodecF2 && dt == ZCF_DT_FP16)
        ZIPCCL_TRY(ZK_LAUNCH(encode_f2_fp16, warp_blocks, wb, 0, stream, e));
    else if (codec == zipcclCodecF2)
        ZIPCCL_TRY(ZK_LAUNCH(encode_f2_fp32, warp_blocks, wb, 0, stream, e));
    else if (dt == ZCF_DT_BF16)
        ZIPCCL_TRY(ZK_LAUNCH(encode_f3_bf16, nc, tb, 4 * ZK_T_WARPS, stream, e));
    else if (dt == ZCF_DT_FP16)
        ZIPCCL_TRY(ZK_LAUNCH(encode_f3_fp16, nc, tb, 4 * ZK_T_WARPS, stream, e));
    else
        ZIPCCL_TRY(ZK_LAUNCH(encode_f3_fp32, nc, tb, 4 * ZK_T_WARPS, stream, e));
    return ZK_LAUNCH(head, k, 32, 0, stream, hd);
}

/* With the coded total read: the stored frame where coding did not make
 * it smaller (launches only), else the coded frame's size. */
static zipcclResult_t zk_compress_finish(const ZkEnc* e, uint64_t total, size_t* dstSize, void* stream) {
    if (e->stored || e->prefix + total >= e->bound)
        return zk_write_stored(e->src, e->count, e->dt, e->cs, e->dst, e->cap, dstSize, stream);
    if (e->cap < e->prefix + total)
        return zipcclSetError(zipcclDstTooSmall, "compress (CUDA): frame needs %zu bytes, have %zu",
                              (size_t)(e->prefix + total), e->cap);
    *dstSize = e->prefix + total;
    return zipcclSuccess;
}

static zipcclResult_t zk_compress(const void* d_src, size_t count, zipcclDataType_t dtype, void* d_dst,
                                  size_t cap, size_t* dstSize, const zipcclCodecParams_t* params,
                                  void* d_ws, size_t wsSize, void* stream) {
    ZkEnc e;
    memset(&e, 0, sizeof e);
    if (!dstSize) return zipcclSetError(zipcclInvalidArgument, "compress (CUDA): null pointer argument");
    ZIPCCL_TRY(zk_compress_check(d_src, count, dtype, d_dst, cap, params, &e));
    if (e.stored) return zk_compress_finish(&e, 0, dstSize, stream);
    uint8_t* ws = zk_ws_align(d_ws, &wsSize);
    if (!d_ws || wsSize < zk_compress_ws(&e))
        return zipcclSetError(zipcclInvalidArgument, "compress (CUDA): workspace of %zu usable bytes, need %zu", wsSize,
                              zk_compress_ws(&e));
    uint64_t* total_dev = (uint64_t*)(ws + zk_layout_compress(e.nc).misc + 64);
    ZIPCCL_TRY(zk_compress_launch(&e, 1, ws, total_dev, stream));
    uint64_t total = 0;
    ZIPCCL_TRY(zk_memcpy(&total, total_dev, 8, stream));
    ZIPCCL_TRY(zk_sync(stream));
    return zk_compress_finish(&e, total, dstSize, stream);
}

/* k buffers: the coded ones in launches of up to ZK_BATCH_MAX (one
 * encoder and one k_head each), their totals written by the encoder into
 * the workspace's head.  zk_compress_start checks the k buffers, launches
 * and queues the copy of the coded ones' totals into `pending` (host
 * memory, 8 bytes a buffer: run j's total at j), and returns without a
 * wait; once the caller has waited for the stream, zk_compress_end reads
 * them and finishes each frame (the stored one where coding did not pay:
 * launches only).  zk_compress_batch is the two with one host wait between.
 * The workspace: a 256-byte head per 32 buffers, then each launch's
 * zk_launch_ws, 256-aligned, in order (at most the buffers'
 * zk_compress_ws, 256-aligned, summed).  *failed: the buffer an error names
 * (-1 for none). */
static size_t zk_batch_head(int k) { return zk_align((size_t)k * 32); }

/* The k buffers' checks (e[i]); `run` the coded ones' indices in order,
 * *m their number, *need the workspace the launches take. */
static zipcclResult_t zk_compress_plan(int k, const void* const* d_src, const size_t* count, zipcclDataType_t dtype,
                                       void* const* d_dst, const size_t* cap, const zipcclCodecParams_t* params,
                                       ZkEnc* e, int* run, int* m, size_t* need, int* failed) {
    if (failed) *failed = -1;
    if (k < 0 || (k && (!d_src || !count || !d_dst || !cap)))
        return zipcclSetError(zipcclInvalidArgument, "compress (CUDA, batched): bad batch of %d buffers", k);
    *m = 0;
    *need = zk_batch_head(k);
    for (int i = 0; i < k; i++) {
        zipcclResult_t res = zk_compress_check(d_src[i], count[i], dtype, d_dst[i], cap[i], params, &e[i]);
        if (res != zipcclSuccess) {
            if (failed) *failed = i;
            return res;
        }
        *need += zk_align(zk_compress_ws(&e[i]));
        if (!e[i].stored) run[(*m)++] = i;
    }
    return zipcclSuccess;
}

static zipcclResult_t zk_compress_start(int k, const void* const* d_src, const size_t* count, zipcclDataType_t dtype,
                                        void* const* d_dst, const size_t* cap, const zipcclCodecParams_t* params,
                                        void* d_ws, size_t wsSize, void* stream, uint64_t* pending, int* failed) {
    if (failed) *failed = -1;
    if (k <= 0) return k < 0 ? zipcclSetError(zipcclInvalidArgument, "compress (CUDA, batched): bad batch of %d buffers", k)
                             : zipcclSuccess;
    if (!pending) return zipcclSetError(zipcclInvalidArgument, "compress (CUDA, batched): no pending area");
    ZkEnc* e = (ZkEnc*)malloc((size_t)k * sizeof *e);
    ZkEnc* run = (ZkEnc*)malloc((size_t)k * sizeof *run); /* the coded ones, in order */
    int* idx = (int*)malloc((size_t)k * sizeof *idx);     /* run[j] is buffer idx[j] */
    zipcclResult_t res = e && run && idx ? zipcclSuccess
                                         : zipcclSetError(zipcclSystemError, "compress (CUDA, batched): out of host memory");
    size_t need = 0;
    int m = 0;
    if (res == zipcclSuccess) res = zk_compress_plan(k, d_src, count, dtype, d_dst, cap, params, e, idx, &m, &need, failed);
    for (int j = 0; j < m && res == zipcclSuccess; j++) run[j] = e[idx[j]];
    uint8_t* ws = d_ws ? zk_ws_align(d_ws, &wsSize) : NULL;
    if (res == zipcclSuccess && (!d_ws || wsSize < need))
        res = zipcclSetError(zipcclInvalidArgument, "compress (CUDA, batched): workspace of %zu usable bytes, need %zu",
                             d_ws ? wsSize : 0, need);
    uint64_t* totals = (uint64_t*)ws; /* the head: run j's total at j */
    size_t at = zk_batch_head(k);
    for (int j = 0; j < m && res == zipcclSuccess; j += ZK_BATCH_MAX) {
        const int n = m - j < ZK_BATCH_MAX ? m - j : ZK_BATCH_MAX;
        uint64_t nc = 0;
        for (int i = 0; i < n; i++) nc += run[j + i].nc;
        res = zk_compress_launch(run + j, n, ws + at, totals + j, stream);
        if (res != zipcclSuccess && failed) *failed = idx[j];
        at += zk_align(zk_launch_ws(nc));
    }
    if (res == zipcclSuccess && m) res = zk_memcpy(pending, totals, (size_t)m * 8, stream);
    free(e);
    free(run);
    free(idx);
    return res;
}

static zipcclResult_t zk_compress_end(int k, const void* const* d_src, const size_t* count, zipcclDataType_t dtype,
                                      void* const* d_dst, const size_t* cap, const zipcclCodecParams_t* params,
                                      const uint64_t* pending, size_t* dstSize, void* stream, int* failed) {
    if (failed) *failed = -1;
    if (k <= 0) return k < 0 ? zipcclSetError(zipcclInvalidArgument, "compress (CUDA, batched): bad batch of %d buffers", k)
                             : zipcclSuccess;
    if (!dstSize || !pending) return zipcclSetError(zipcclInvalidArgument, "compress (CUDA, batched): null pointer argument");
    ZkEnc* e = (ZkEnc*)malloc((size_t)k * sizeof *e);
    int* idx = (int*)malloc((size_t)k * sizeof *idx);
    zipcclResult_t res = e && idx ? zipcclSuccess
                                  : zipcclSetError(zipcclSystemError, "compress (CUDA, batched): out of host memory");
    size_t need = 0;
    int m = 0;
    if (res == zipcclSuccess) res = zk_compress_plan(k, d_src, count, dtype, d_dst, cap, params, e, idx, &m, &need, failed);
    for (int i = 0, j = 0; i < k && res == zipcclSuccess; i++) {
        const uint64_t t = j < m && idx[j] == i ? pending[j++] : 0;
        res = zk_compress_finish(&e[i], t, &dstSize[i], stream);
        if (res != zipcclSuccess && failed) *failed = i;
    }
    free(e);
    free(idx);
    return res;
}

static zipcclResult_t zk_compress_batch(int k, const void* const* d_src, const size_t* count, zipcclDataType_t dtype,
                                        void* const* d_dst, const size_t* cap, size_t* dstSize,
                                        const zipcclCodecParams_t* params, void* d_ws, size_t wsSize, void* stream,
                                        int* failed) {
    if (failed) *failed = -1;
    if (k < 0 || (k && (!d_src || !count || !d_dst || !cap || !dstSize)))
        return zipcclSetError(zipcclInvalidArgument, "compress (CUDA, batched): bad batch of %d buffers", k);
    if (!k) return zipcclSuccess;
    uint64_t* pending = (uint64_t*)calloc((size_t)k, 8);
    if (!pending) return zipcclSetError(zipcclSystemError, "compress (CUDA, batched): out of host memory");
    zipcclResult_t res =
        zk_compress_start(k, d_src, count, dtype, d_dst, cap, params, d_ws, wsSize, stream, pending, failed);
    if (res == zipcclSuccess) res = zk_sync(stream);
    if (res == zipcclSuccess) res = zk_compress_end(k, d_src, count, dtype, d_dst, cap, params, pending, dstSize, stream, failed);
    free(pending);
    return res;
}

#define ZK_CORRUPT(...) zipcclSetError(zipcclCorruptStream, __VA_ARGS__)

/* Decompression of k frames (zk_dec_run): the checks of the arguments on
 * the host (zk_dec_args), then on the device, ZK_BATCH_MAX frames to a
 * launch of each kernel: the header read and checked (k_dhead, by
 * zk_hdr_parse), the table checked and prefix-summed (k_dplan), chunk or
 * slice checksums (k_dsums), the chunks decoded (k_ddecode), stored data
 * copied out once it passed (k_dstore).  Then the frames' ZkInfo come to
 * the host in one copy: the one host wait.  A header fault is named by the
 * host from the header bytes the device read (zk_dec_header, in the CPU
 * decoder's order of checks), the rest by the verdict the kernels left
 * (zk_dec_verdict).  Grids are sized before the header is known: a frame
 * gets `per` blocks (enough for its chunks at chunk_log2 14 if its
 * capacity is full, at most ZK_DEC_PER), each taking every per-th chunk. */
#define ZK_DEC_PER 4096u

typedef struct {
    const uint8_t* src;
    uint8_t* dst;
    size_t srcSize, cap;
} ZkDec;

static zipcclResult_t zk_dec_args(const void* d_src, size_t srcSize, void* d_dst, size_t cap, zipcclDataType_t expect,
                                  ZkDec* x) {
    if (!d_src) return zipcclSetError(zipcclInvalidArgument, "decompress (CUDA): null source");
    if (expect && !zk_dt(expect))
        return zipcclSetError(zipcclInvalidArgument, "decompress (CUDA): unknown expected dtype %d", (int)expect);
    if (srcSize < ZCF_HEADER_SIZE)
        return ZK_CORRUPT("frame of %zu bytes is shorter than its header", srcSize);
    x->src = (const uint8_t*)d_src;
    x->dst = (uint8_t*)d_dst;
    x->srcSize = srcSize;
    x->cap = cap;
    return zipcclSuccess;
}

/* The fault zk_hdr_parse found in the device's read of a header (in: the
 * header bytes, the code, the sizes it derived), named as the CPU decoder
 * names it. */
static zipcclResult_t zk_dec_header(const ZkDec* x, const ZkInfo* in, zipcclDataType_t expect) {
    const size_t srcSize = x->srcSize;
    const uint8_t* h = in->h;
    const int dt = h[5], log2 = h[7], stored = (h[6] & ZCF_FLAG_STORED) != 0, code = (int)in->code;
    const uint64_t count = zcf_ld64(h + 8), nc = in->hdr.nc, prefix = in->hdr.prefix, total = in->hdr.total;
    switch (code) {
    case ZK_H_OK: return zipcclSuccess;
    case ZK_H_MAGIC: return ZK_CORRUPT("bad magic 0x%08x", zcf_ld32(h));
    case ZK_H_VERSION:
        return zipcclSetError(zipcclUnsupported, "frame version %u, this build reads %d..%d", h[4], ZCF_VERSION_MIN,
                              ZCF_VERSION);
    case ZK_H_DTYPE: return ZK_CORRUPT("unknown dtype code %u", h[5]);
    case ZK_H_FLAGS: return ZK_CORRUPT("unknown flag bits 0x%02x", h[6]);
    case ZK_H_LOG2: return ZK_CORRUPT("chunk_log2 %d outside %d..%d", log2, ZCF_CHUNK_LOG2_MIN, ZCF_CHUNK_LOG2_MAX);
    case ZK_H_COUNT: return ZK_CORRUPT("count %llu too large", (unsigned long long)count);
    case ZK_H_HOLD:
        return ZK_CORRUPT("frame of %zu bytes cannot hold %llu elements (%s)", srcSize, (unsigned long long)count,
                          stored ? "stored" : "compressed");
    case ZK_H_HSUM: return zipcclSetError(zipcclChecksumMismatch, "header checksum mismatch");
    case ZK_H_SIZE:
        return ZK_CORRUPT("frame is %llu bytes but %zu were given", (unsigned long long)(prefix + total), srcSize);
    case ZK_H_MISMATCH:
        return zipcclSetError(zipcclMismatch, "frame holds %s, caller expects %s", zipcclTypeName(zk_dtype(dt)),
                              zipcclTypeName(expect));
    case ZK_H_DSTSMALL:
        return zipcclSetError(zipcclDstTooSmall, "decompress (CUDA): need %llu bytes, have %zu",
                              (unsigned long long)total, x->cap);
    case ZK_H_NODST: return zipcclSetError(zipcclInvalidArgument, "decompress (CUDA): null destination");
    case ZK_H_WORKSPACE:
        return zipcclSetError(zipcclInvalidArgument, "decompress (CUDA): workspace too small for %llu chunks",
                              (unsigned long long)nc);
    default: return zipcclSetError(zipcclInternalError, "decompress (CUDA): header verdict %d", code);
    }
}

static zipcclResult_t zk_dec_verdict(const ZkInfo* in, size_t srcSize) {
    const uint32_t* st = in->status;
    if (in->hdr.stored) {
        if (in->hdr.cs && st[0]) return zipcclSetError(zipcclChecksumMismatch, "stored frame: slice checksum mismatch");
        return zipcclSuccess;
    }
    if (st[0] & 2) return zipcclSetError(zipcclChecksumMismatch, "header or chunk checksum mismatch");
    if (st[0] & 1) return ZK_CORRUPT("chunk table does not match the frame size of %zu bytes", srcSize);
    if (st[1]) return ZK_CORRUPT("chunk %u is corrupt", 0xFFFFFFFFu - st[2]);
    return zipcclSuccess;
}

/* k frames (1 or more); `who` names the entry in errors.  The workspace
 * (256-aligned, wsSize usable bytes): the k ZkInfo, then an equal share
 * for each frame's chunk offsets.  zk_dec_start checks the arguments,
 * launches and queues the copy of the k ZkInfo into `pending` (host
 * memory), without a wait; once the caller has waited for the stream,
 * zk_dec_end names the first fault.  *failed: the frame an error names (-1
 * for none; the frames before it are decoded). */
static zipcclResult_t zk_dec_check(int k, const void* const* d_src, const size_t* srcSize, void* const* d_dst,
                                   const size_t* cap, zipcclDataType_t expect, ZkDec* x, int* failed) {
    for (int i = 0; i < k; i++) {
        zipcclResult_t res = zk_dec_args(d_src[i], srcSize[i], d_dst[i], cap[i], expect, &x[i]);
        if (res != zipcclSuccess) return *failed = i, res;
    }
    return zipcclSuccess;
}

static zipcclResult_t zk_dec_start(int k, const void* const* d_src, const size_t* srcSize, void* const* d_dst,
                                   const size_t* cap, zipcclDataType_t expect, uint8_t* ws, size_t wsSize,
                                   void* stream, ZkInfo* pending, int* failed, const char* who) {
    *failed = -1;
    ZkDec* x = (ZkDec*)malloc((size_t)k * sizeof *x);
    zipcclResult_t res = x ? zipcclSuccess : zipcclSetError(zipcclSystemError, "%s: out of host memory", who);
    if (res == zipcclSuccess) res = zk_dec_check(k, d_src, srcSize, d_dst, cap, expect, x, failed);
    const size_t head = zk_info_head(k);
    const size_t share = wsSize > head ? ((wsSize - head) / (size_t)k) & ~(size_t)255 : 0;
    if (res == zipcclSuccess && (!ws || share < 256))
        res = zipcclSetError(zipcclInvalidArgument, "%s: workspace of %zu usable bytes, need %zu", who,
                             ws ? wsSize : 0, head + (size_t)k * 256);
    ZkInfo* dinfo = (ZkInfo*)ws;
    if (res == zipcclSuccess) res = zk_memset(ws, 0, head, stream);
    for (int g = 0; g < k && res == zipcclSuccess; g += ZK_BATCH_MAX) {
        const int n = k - g < ZK_BATCH_MAX ? k - g : ZK_BATCH_MAX;
        DecLaunch A;
        memset(&A, 0, sizeof A);
        A.k = n;
        A.expect = expect ? zk_dt(expect) : 0;
        A.tab = zk_tables();
        uint64_t per = 1;
        for (int i = 0; i < n; i++) {
            const ZkDec* y = &x[g + i];
            DecBuf* b = &A.buf[i];
            b->src = y->src;
            b->dst = y->dst;
            b->info = dinfo + g + i;
            b->offs = (uint64_t*)(ws + head + (size_t)(g + i) * share);
            b->srcSize = y->srcSize;
            b->cap = y->cap;
            b->offs_cap = share / 8 - 1;
            const uint64_t want = y->cap / 2 / ((uint64_t)1 << ZCF_CHUNK_LOG2) + 1;
            if (want > per) per = want;
        }
        A.per = (uint32_t)(per < ZK_DEC_PER ? per : ZK_DEC_PER);
        const uint64_t grid = (uint64_t)n * A.per;
        res = ZK_LAUNCH(dhead, n, 32, 0, stream, A);
        if (res == zipcclSuccess) res = ZK_LAUNCH(dplan, n, ZK_SCAN_THREADS, 34 * 8, stream, A);
        if (res == zipcclSuccess) res = ZK_LAUNCH(dsums, grid, 32 * ZK_WARPS_PER_BLOCK, 0, stream, A);
        if (res == zipcclSuccess) res = ZK_LAUNCH(ddecode, grid, 32 * ZK_T_WARPS, ZK_DEC_SMEM, stream, A);
        if (res == zipcclSuccess) res = ZK_LAUNCH(dstore, grid, 256, 0, stream, A);
    }
    if (res == zipcclSuccess) res = zk_memcpy(pending, dinfo, (size_t)k * sizeof *pending, stream);
    free(x);
    return res;
}

static zipcclResult_t zk_dec_end(int k, const void* const* d_src, const size_t* srcSize, void* const* d_dst,
                                 const size_t* cap, size_t* countOut, zipcclDataType_t expect, const ZkInfo* info,
                                 int* failed, const char* who) {
    *failed = -1;
    ZkDec* x = (ZkDec*)malloc((size_t)k * sizeof *x);
    zipcclResult_t res = x ? zipcclSuccess : zipcclSetError(zipcclSystemError, "%s: out of host memory", who);
    if (res == zipcclSuccess) res = zk_dec_check(k, d_src, srcSize, d_dst, cap, expect, x, failed);
    for (int i = 0; i < k && res == zipcclSuccess; i++) {
        res = info[i].code ? zk_dec_header(&x[i], &info[i], expect)
                           : zk_dec_verdict(&info[i], x[i].srcSize);
        if (res == zipcclSuccess && info[i].code)
            res = zipcclSetError(zipcclInternalError, "%s: the device refused a header the host accepts", who);
        if (res != zipcclSuccess) *failed = i;
        else if (countOut) countOut[i] = info[i].hdr.count;
    }
    free(x);
    return res;
}

/* Start, the one host wait, end. */
static zipcclResult_t zk_dec_run(int k, const void* const* d_src, const size_t* srcSize, void* const* d_dst,
                                 const size_t* cap, size_t* countOut, zipcclDataType_t expect, uint8_t* ws,
                                 size_t wsSize, void* stream, int* failed, const char* who) {
    ZkInfo* info = (ZkInfo*)calloc((size_t)k, sizeof *info);
    if (!info) return zipcclSetError(zipcclSystemError, "%s: out of host memory", who);
    zipcclResult_t res = zk_dec_start(k, d_src, srcSize, d_dst, cap, expect, ws, wsSize, stream, info, failed, who);
    if (res == zipcclSuccess) res = zk_sync(stream); /* the one host wait */
    if (res == zipcclSuccess) res = zk_dec_end(k, d_src, srcSize, d_dst, cap, countOut, expect, info, failed, who);
    free(info);
    return res;
}

static zipcclResult_t zk_decompress(const void* d_src, size_t srcSize, void* d_dst, size_t cap,
                                    size_t* countOut, zipcclDataType_t expect, void* d_ws,
                                    size_t wsSize, void* stream) {
    uint8_t* ws = d_ws ? zk_ws_align(d_ws, &wsSize) : NULL;
    int failed;
    return zk_dec_run(1, &d_src, &srcSize, &d_dst, &cap, countOut, expect, ws, wsSize, stream, &failed,
                      "decompress (CUDA)");
}

static zipcclResult_t zk_decompress_batch(int k, const void* const* d_src, const size_t* srcSize,
                                          void* const* d_dst, const size_t* cap, size_t* countOut,
                                          zipcclDataType_t expect, void* d_ws, size_t wsSize, void* stream,
                                          int* failed) {
    int bad = -1;
    if (failed) *failed = -1;
    if (k < 0 || (k && (!d_src || !srcSize || !d_dst || !cap)))
        return zipcclSetError(zipcclInvalidArgument, "decompress (CUDA, batched): bad batch of %d frames", k);
    if (!k) return zipcclSuccess;
    uint8_t* ws = d_ws ? zk_ws_align(d_ws, &wsSize) : NULL;
    zipcclResult_t res = zk_dec_run(k, d_src, srcSize, d_dst, cap, countOut, expect, ws, wsSize, stream, &bad,
                                    "decompress (CUDA, batched)");
    if (failed) *failed = bad;
    return res;
}

/* The split batch: the same checks as zk_decompress_batch, then start or
 * end. */
static zipcclResult_t zk_dec_batch_args(int k, const void* const* d_src, const size_t* srcSize, void* const* d_dst,
                                        const size_t* cap, const void* pending, int* failed) {
    if (failed) *failed = -1;
    if (k < 0 || (k && (!d_src || !srcSize || !d_dst || !cap || !pending)))
        return zipcclSetError(zipcclInvalidArgument, "decompress (CUDA, batched): bad batch of %d frames", k);
    return zipcclSuccess;
}
static zipcclResult_t zk_decompress_start(int k, const void* const* d_src, const size_t* srcSize, void* const* d_dst,
                                          const size_t* cap, zipcclDataType_t expect, void* d_ws, size_t wsSize,
                                          void* stream, void* pending, int* failed) {
    ZIPCCL_TRY(zk_dec_batch_args(k, d_src, srcSize, d_dst, cap, pending, failed));
    if (!k) return zipcclSuccess;
    int bad = -1;
    uint8_t* ws = d_ws ? zk_ws_align(d_ws, &wsSize) : NULL;
    zipcclResult_t res = zk_dec_start(k, d_src, srcSize, d_dst, cap, expect, ws, wsSize, stream, (ZkInfo*)pending,
                                      &bad, "decompress (CUDA, batched)");
    if (failed) *failed = bad;
    return res;
}
static zipcclResult_t zk_decompress_end(int k, const void* const* d_src, const size_t* srcSize, void* const* d_dst,
                                        const size_t* cap, zipcclDataType_t expect, const void* pending,
                                        size_t* countOut, int* failed) {
    ZIPCCL_TRY(zk_dec_batch_args(k, d_src, srcSize, d_dst, cap, pending, failed));
    if (!k) return zipcclSuccess;
    int bad = -1;
    zipcclResult_t res = zk_dec_end(k, d_src, srcSize, d_dst, cap, countOut, expect, (const ZkInfo*)pending, &bad,
                                    "decompress (CUDA, batched)");
    if (failed) *failed = bad;
    return res;
}

/* The workspace of a batch of k buffers or frames of up to maxCount
 * elements: the head, then k of the largest regions, and room to align. */
static size_t zk_workspace_size_batch(int k, size_t maxCount, zipcclDataType_t dtype, int decompress) {
    int dt = zk_dt(dtype);
    if (!dt || k <= 0) return 0;
    if (decompress)
        return zk_info_head(k) + (size_t)k * zk_align(8 * (zcf_num_chunks(maxCount, ZCF_CHUNK_LOG2_MIN) + 1)) + 256;
    return zk_batch_head(k) +
           (size_t)k * zk_align(zk_layout_compress(zcf_num_chunks(maxCount, ZCF_CHUNK_LOG2)).total) +
           256;
}

/* ------------------------------------------------------------------------ */
/* 11. Public entry points (zipccl.h)                                        */
/* ------------------------------------------------------------------------ */

/* Also in the emulated build of tests/gpu/emu/codec_cuda_emu.cc, over its
 * CUDA runtime stand-in. */
#if !defined(ZIPCCL_CUDA_EMU) || defined(ZIPCCL_CUDA_EMU_ENTRY_POINTS)
extern "C" {

int zipcclCudaAvailable(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n > 0;
}

size_t zipcclCudaWorkspaceSize(size_t count, zipcclDataType_t dtype) { return zk_workspace_size(count, dtype); }

zipcclResult_t zipcclCompressCuda(const void* d_src, size_t count, zipcclDataType_t dtype, void* d_dst,
                                  size_t dstCapacity, size_t* dstSize, const zipcclCodecParams_t* params,
                                  void* d_workspace, size_t workspaceSize, void* stream) {
    return zk_compress(d_src, count, dtype, d_dst, dstCapacity, dstSize, params, d_workspace, workspaceSize,
                       stream);
}

zipcclResult_t zipcclDecompressCuda(const void* d_src, size_t srcSize, void* d_dst, size_t dstCapacity,
                                    size_t* count, zipcclDataType_t expectDtype, void* d_workspace,
                                    size_t workspaceSize, void* stream) {
    return zk_decompress(d_src, srcSize, d_dst, dstCapacity, count, expectDtype, d_workspace, workspaceSize,
                         stream);
}

size_t zipcclCudaWorkspaceSizeBatch(int k, size_t maxCount, zipcclDataType_t dtype, int decompress) {
    return zk_workspace_size_batch(k, maxCount, dtype, decompress);
}

zipcclResult_t zipcclCompressCudaBatch(int k, const void* const* d_src, const size_t* count, zipcclDataType_t dtype,
                                       void* const* d_dst, const size_t* dstCapacity, size_t* dstSize,
                                       const zipcclCodecParams_t* params, void* d_workspace, size_t workspaceSize,
                                       void* stream, int* failed) {
    return zk_compress_batch(k, d_src, count, dtype, d_dst, dstCapacity, dstSize, params, d_workspace,
                             workspaceSize, stream, failed);
}

zipcclResult_t zipcclDecompressCudaBatch(int k, const void* const* d_src, const size_t* srcSize, void* const* d_dst,
                                         const size_t* dstCapacity, size_t* count, zipcclDataType_t expectDtype,
                                         void* d_workspace, size_t workspaceSize, void* stream, int* failed) {
    return zk_decompress_batch(k, d_src, srcSize, d_dst, dstCapacity, count, expectDtype, d_workspace,
                               workspaceSize, stream, failed);
}

size_t zipcclCudaPendingBytes(int k, int decompress) {
    return k <= 0 ? 0 : (size_t)k * (decompress ? sizeof(ZkInfo) : 8);
}

zipcclResult_t zipcclCompressCudaBatchStart(int k, const void* const* d_src, const size_t* count,
                                            zipcclDataType_t dtype, void* const* d_dst, const size_t* dstCapacity,
                                            const zipcclCodecParams_t* params, void* d_workspace,
                                            size_t workspaceSize, void* stream, void* pending, int* failed) {
    return zk_compress_start(k, d_src, count, dtype, d_dst, dstCapacity, params, d_workspace, workspaceSize, stream,
                             (uint64_t*)pending, failed);
}

zipcclResult_t zipcclCompressCudaBatchEnd(int k, const void* const* d_src, const size_t* count,
                                          zipcclDataType_t dtype, void* const* d_dst, const size_t* dstCapacity,
                                          const zipcclCodecParams_t* params, const void* pending, size_t* dstSize,
                                          void* stream, int* failed) {
    return zk_compress_end(k, d_src, count, dtype, d_dst, dstCapacity, params, (const uint64_t*)pending, dstSize,
                           stream, failed);
}

zipcclResult_t zipcclDecompressCudaBatchStart(int k, const void* const* d_src, const size_t* srcSize,
                                              void* const* d_dst, const size_t* dstCapacity,
                                              zipcclDataType_t expectDtype, void* d_workspace, size_t workspaceSize,
                                              void* stream, void* pending, int* failed) {
    return zk_decompress_start(k, d_src, srcSize, d_dst, dstCapacity, expectDtype, d_workspace, workspaceSize,
                               stream, pending, failed);
}

zipcclResult_t zipcclDecompressCudaBatchEnd(int k, const void* const* d_src, const size_t* srcSize,
                                            void* const* d_dst, const size_t* dstCapacity,
                                            zipcclDataType_t expectDtype, const void* pending, size_t* count,
                                            int* failed) {
    return zk_decompress_end(k, d_src, srcSize, d_dst, dstCapacity, expectDtype, pending, count, failed);
}

} /* extern "C" */
#endif
