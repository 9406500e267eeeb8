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
#include <mutex>
#include <vector>

namespace emu {
enum { RUN, WAIT_WARP, WAIT_BLOCK, DONE };
enum { OP_BALLOT, OP_SHFL, OP_SYNCWARP };
/* A coroutine starts on its own stack through ucontext (makecontext, then
 * setcontext: one system call, for the signal mask) and from then on
 * switches with GCC's __builtin_setjmp / __builtin_longjmp, which save and
 * restore only the registers: the emulator switches at every collective,
 * so this is most of its speed. */
typedef void* JmpBuf[5];
struct Thread {
    ucontext_t ctx;
    JmpBuf jb;
    int state, op, src, started;
    uint32_t val, res;
};
/* One emulator per process (C++17 inline variables: every translation unit
 * that includes this sees the same), used by one launch at a time: a launch
 * takes `lock`, so threads that launch (a communicator's progress thread
 * beside the caller's) take turns. */
inline const size_t kStack = 256 * 1024;
inline std::vector<Thread> threads;
inline std::vector<char*> stacks;
inline JmpBuf sched_jb; /* where run_block waits for the thread it resumed */
inline unsigned cur, nthreads;
inline uint64_t block_id;                /* linear: x + gx * (y + gy * z) */
inline unsigned grid_dim[3] = {1, 1, 1}; /* of the running launch */
inline std::vector<uint8_t> smem;
inline const std::function<void()>* body;
inline std::recursive_mutex lock;
inline uint64_t launches; /* kernels launched so far */

[[noreturn]] inline void die(const char* what) {
    printf("FAIL warp_emu: %s (block %llu)\n", what, (unsigned long long)block_id);
    fflush(stdout);
    exit(1);
}

/* (__builtin_longjmp may not be called from the function that called
 * __builtin_setjmp: the jumps live in a function of their own.) */
__attribute__((noinline)) inline void jump(JmpBuf b) { __builtin_longjmp(b, 1); }

/* The running thread gives the scheduler back its turn. */
__attribute__((noinline)) inline void yield() {
    if (__builtin_setjmp(threads[cur].jb)) return; /* resumed */
    jump(sched_jb);
}

/* The scheduler runs thread t until it yields or ends. */
__attribute__((noinline)) inline void resume(unsigned t) {
    cur = t;
    if (__builtin_setjmp(sched_jb)) return; /* it yielded or ended */
    if (!threads[t].started) {
        threads[t].started = 1;
        setcontext(&threads[t].ctx); /* its first run, on its own stack */
    }
    jump(threads[t].jb);
}

inline void entry() {
    (*body)();
    threads[cur].state = DONE;
    jump(sched_jb); /* never returns: its stack is done with */
}

inline uint32_t collective(int op, uint32_t val, int src) {
    unsigned me = cur;
    threads[me].op = op;
    threads[me].val = val;
    threads[me].src = src;
    threads[me].state = WAIT_WARP;
    yield();
    return threads[me].res;
}

inline void syncthreads() {
    threads[cur].state = WAIT_BLOCK;
    yield();
}

/* One block of `block` threads to completion (getcontext lives here, apart
 * from the launch's loop, whose locals it would otherwise clobber). */
__attribute__((noinline)) inline void run_block(uint64_t b, unsigned block, size_t smem_bytes) {
    block_id = b;
    smem.assign(smem_bytes + 16, 0xCD); /* garbage, as on a device */
    for (unsigned t = 0; t < block; t++) {
        Thread& T = threads[t];
        T.ctx.uc_stack.ss_sp = stacks[t];
        T.ctx.uc_stack.ss_size = kStack;
        T.ctx.uc_link = nullptr; /* entry never returns */
        makecontext(&T.ctx, entry, 0);
        T.state = RUN;
        T.started = 0;
    }
    for (;;) {
        for (unsigned t = 0; t < block; t++)
            if (threads[t].state == RUN) resume(t);
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
        if (!live) return;
        if (!progress) {
            if (at_barrier != live) die("deadlock");
            for (unsigned t = 0; t < block; t++)
                if (threads[t].state == WAIT_BLOCK) threads[t].state = RUN;
        }
    }
}

/* Run fn as `grid` blocks (x, y, z) of `block` threads (1..1024; a last
 * partial warp has fewer lanes), each block with smem_bytes of garbage
 * shared memory (emu::smem). */
inline void launch3(const unsigned grid[3], unsigned block, size_t smem_bytes,
                    const std::function<void()>& fn) {
    std::lock_guard<std::recursive_mutex> hold(lock);
    if (block == 0 || block > 1024) die("block size must be 1..1024");
    /* a context to make coroutines from, once per slot; a ucontext_t points
     * into itself (its FP state), so the slots never move: room for the
     * largest block is reserved once */
    threads.reserve(1024);
    while (threads.size() < block) {
        threads.emplace_back();
        stacks.push_back((char*)malloc(kStack));
        getcontext(&threads.back().ctx);
    }
    nthreads = block;
    body = &fn;
    launches++;
    memcpy(grid_dim, grid, sizeof grid_dim);
    const uint64_t nblocks = (uint64_t)grid[0] * grid[1] * grid[2];
    for (uint64_t b = 0; b < nblocks; b++) run_block(b, block, smem_bytes);
}

inline void launch(uint64_t grid, unsigned block, size_t smem_bytes,
                   const std::function<void()>& fn) {
    if (grid > 0xffffffffu) die("grid too large");
    const unsigned g[3] = {(unsigned)grid, 1, 1};
    launch3(g, block, smem_bytes, fn);
}
} // namespace emu

/* Where a stream's work goes.  Alone (tests/gpu/cuda_emu.cc) it runs when
 * it is issued; under the CUDA runtime stand-in (tests/gpu/emu/
 * cuda_emu_runtime.h) with ZK_EMU_ASYNC=1 it is queued on its stream and
 * runs only when something waits for it (a stream or event
 * synchronisation, another stream's wait, a free), so a host read or a
 * second stream that is not ordered after the work sees it undone, as it
 * may on a device.  stream_sync runs a stream's queue. */
namespace emu {
inline void (*stream_enqueue)(void* stream, std::function<void()> fn) = nullptr;
inline void (*stream_sync)(void* stream) = nullptr;
inline void on_stream(void* stream, std::function<void()> fn) {
    if (stream_enqueue) stream_enqueue(stream, std::move(fn));
    else fn();
}
} // namespace emu

/* The names comm/codec/codec_cuda.cu's ZK_* macros use in its emulated build. */
inline unsigned emu_tid(void) { return emu::cur; }
inline uint64_t emu_bid(void) { return emu::block_id; }
inline uint8_t* emu_smem(void) { return emu::smem.data(); }
inline uint32_t emu_ballot(int p) { return emu::collective(emu::OP_BALLOT, (uint32_t)p, 0); }
inline uint32_t emu_shfl(uint32_t v, int src) { return emu::collective(emu::OP_SHFL, v, src); }
inline void emu_syncwarp(void) { emu::collective(emu::OP_SYNCWARP, 0, 0); }
inline void emu_syncthreads(void) { emu::syncthreads(); }
/* An aligned load or store of n bytes at p: a device faults where p is not
 * a multiple of n; the emulator stops. */
inline void emu_check_align(const void* p, unsigned n) {
    if ((uintptr_t)p % n) emu::die("misaligned access (a device faults)");
}
/* A kernel found itself in a state a device would hang or fault in. */
inline void emu_fail(const char* what) { emu::die(what); }
inline void emu_launch(uint64_t grid, unsigned block, size_t smem, const std::function<void()>& fn) {
    emu::launch(grid, block, smem, fn);
}

#endif
