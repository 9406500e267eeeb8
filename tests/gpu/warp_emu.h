/*
 * warp_emu.h — a small deterministic emulator of CUDA's execution model, so
 * the project's CUDA kernels run on machines without a GPU.
 *
 * Every CUDA thread of a block is a coroutine (ucontext) with its own stack.
 * A thread runs until it reaches a collective (ballot, shuffle, __syncwarp:
 * its warp; __syncthreads: its block), then the next runs; a collective
 * completes once every live lane it needs has arrived, which also catches
 * divergent collectives (a hang or undefined behaviour on a device). Blocks
 * run one after another, so a block's shared memory can be any storage the
 * block's threads see alike. What it does not model: memory-ordering races,
 * timing, alignment faults; a run on a device covers those.
 *
 * Two users: tests/gpu/cuda_emu.cc (the CUDA codec, through its ZK_* macros)
 * and tests/gpu/emu/ (a CUDA runtime and cuBLAS stand-in under which
 * kernels/cuda.cu, the model's kernel table, compiles as plain C++).
 * Header-only, for one translation unit of each program.
 */
#ifndef ZIPCCL_TEST_WARP_EMU_H
#define ZIPCCL_TEST_WARP_EMU_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <vector>

namespace emu {
enum { RUN, WAIT_WARP, WAIT_BLOCK, DONE };
enum { OP_BALLOT, OP_SHFL, OP_SYNCWARP };
struct Thread {
    ucontext_t ctx;
    int state, op, src;
    uint32_t val, res;
};
static const size_t kStack = 256 * 1024;
static std::vector<Thread> threads;
static std::vector<char*> stacks;
static ucontext_t sched;
static unsigned cur, nthreads;
static uint64_t block_id;                /* linear: x + gx * (y + gy * z) */
static unsigned grid_dim[3] = {1, 1, 1}; /* of the running launch */
static std::vector<uint8_t> smem;
static const std::function<void()>* body;

[[noreturn]] static inline void die(const char* what) {
    printf("FAIL warp_emu: %s (block %llu)\n", what, (unsigned long long)block_id);
    fflush(stdout);
    exit(1);
}

static inline void entry() {
    (*body)();
    threads[cur].state = DONE;
} /* returns to sched through uc_link */

static inline uint32_t collective(int op, uint32_t val, int src) {
    unsigned me = cur;
    threads[me].op = op;
    threads[me].val = val;
    threads[me].src = src;
    threads[me].state = WAIT_WARP;
    swapcontext(&threads[me].ctx, &sched);
    return threads[me].res;
}

static inline void syncthreads() {
    unsigned me = cur;
    threads[me].state = WAIT_BLOCK;
    swapcontext(&threads[me].ctx, &sched);
}

/* Run fn as `grid` blocks (x, y, z) of `block` threads (1..1024; a last
 * partial warp has fewer lanes), each block with smem_bytes of garbage
 * shared memory (emu::smem). */
static inline void launch3(const unsigned grid[3], unsigned block, size_t smem_bytes,
                           const std::function<void()>& fn) {
    if (block == 0 || block > 1024) die("block size must be 1..1024");
    if (threads.size() < block) {
        threads.resize(block);
        while (stacks.size() < block) stacks.push_back((char*)malloc(kStack));
    }
    nthreads = block;
    body = &fn;
    memcpy(grid_dim, grid, sizeof grid_dim);
    const uint64_t nblocks = (uint64_t)grid[0] * grid[1] * grid[2];
    for (uint64_t b = 0; b < nblocks; b++) {
        block_id = b;
        smem.assign(smem_bytes + 16, 0xCD); /* garbage, as on a device */
        for (unsigned t = 0; t < block; t++) {
            Thread& T = threads[t];
            getcontext(&T.ctx);
            T.ctx.uc_stack.ss_sp = stacks[t];
            T.ctx.uc_stack.ss_size = kStack;
            T.ctx.uc_link = &sched;
            makecontext(&T.ctx, entry, 0);
            T.state = RUN;
        }
        for (;;) {
            for (unsigned t = 0; t < block; t++)
                if (threads[t].state == RUN) {
                    cur = t;
                    swapcontext(&sched, &threads[t].ctx);
                }
            int progress = 0, live = 0, at_barrier = 0;
            for (unsigned w = 0; w < (block + 31) / 32; w++) {
                Thread* T = &threads[32 * w];
                const unsigned lanes = block - 32 * w < 32 ? block - 32 * w : 32;
                unsigned waiting = 0;
                for (unsigned l = 0; l < lanes; l++) waiting += T[l].state == WAIT_WARP;
                if (waiting == 0) continue;
                if (waiting != lanes) die("warp collective reached by only part of the warp");
                for (unsigned l = 1; l < lanes; l++)
                    if (T[l].op != T[0].op) die("lanes of a warp are in different collectives");
                uint32_t ballot = 0;
                for (unsigned l = 0; l < lanes; l++) ballot |= (T[l].val & 1u) << l;
                for (unsigned l = 0; l < lanes; l++) {
                    const unsigned src = (unsigned)T[l].src & 31;
                    if (T[0].op == OP_SHFL && src >= lanes) die("shuffle from a lane the warp lacks");
                    T[l].res = T[0].op == OP_BALLOT ? ballot : T[0].op == OP_SHFL ? T[src].val : 0;
                    T[l].state = RUN;
                }
                progress = 1;
            }
            for (unsigned t = 0; t < block; t++) {
                live += threads[t].state != DONE;
                at_barrier += threads[t].state == WAIT_BLOCK;
            }
            if (!live) break;
            if (!progress) {
                if (at_barrier != live) die("deadlock");
                for (unsigned t = 0; t < block; t++)
                    if (threads[t].state == WAIT_BLOCK) threads[t].state = RUN;
            }
        }
    }
}

static inline void launch(uint64_t grid, unsigned block, size_t smem_bytes,
                          const std::function<void()>& fn) {
    if (grid > 0xffffffffu) die("grid too large");
    const unsigned g[3] = {(unsigned)grid, 1, 1};
    launch3(g, block, smem_bytes, fn);
}
} // namespace emu

#endif
