/*
 * cpu_guarded.c — the guarded CPU backend: the CPU kernel table with
 * "device" memory the host cannot touch outside a table call.
 *
 * Why: the GPU path's rule is that models/ and runtime/ reach backend memory
 * only through the table (kernels.h). On a machine without a GPU nothing
 * would catch a host loop reading a device pointer, until the first GPU run
 * crashed or, worse, read stale memory. Here every allocation is its own
 * anonymous mapping, PROT_NONE between calls; each table entry opens every
 * mapping (PROT_READ | PROT_WRITE), runs the CPU kernel, and closes them
 * again. A stray host dereference is a SIGSEGV at the line that did it.
 *
 * Same kernels, same bits as the host table it guards (zrt_kernels_cpu(),
 * or zrt_kernels_cpu_bf16() for model.compute: bf16); slower by two mprotect
 * calls per mapping and entry (the tests' models have a few dozen mappings).
 * Thread-safe by serialising: one recursive lock is held from an entry's
 * open to its close (and around allocation), so ZipCCL's progress threads may
 * copy a collective's device buffers (upload, download) while the trainer's
 * compute thread runs kernels: the two take turns, and no thread ever sees a
 * mapping another thread has just closed.
 *
 * Leaves out: catching reads of freed memory after the mapping is reused
 * (freed mappings are unmapped, so such a read faults too), and any check of
 * the kernels' own index arithmetic (AddressSanitizer's job).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels.h"

typedef struct {
    void* p;
    size_t len; /* mapped bytes, whole pages */
} Mapping;

static Mapping* g_maps;
static size_t g_n, g_cap;
static int g_open; /* nesting depth: an entry may call another (under g_mu) */
static pthread_mutex_t g_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static size_t page_round(size_t n) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (n + pg - 1) / pg * pg;
}

static void protect_all(int prot) {
    for (size_t i = 0; i < g_n; i++)
        if (mprotect(g_maps[i].p, g_maps[i].len, prot)) {
            perror("cpu_guarded: mprotect");
            abort();
        }
}

static void open_all(void) {
    pthread_mutex_lock(&g_mu);
    if (g_open++ == 0) protect_all(PROT_READ | PROT_WRITE);
}
static void close_all(void) {
    if (--g_open == 0) protect_all(PROT_NONE);
    pthread_mutex_unlock(&g_mu);
}

static const ZrtKernels* g_base; /* the host table it guards (cpu or cpu_bf16) */
static const ZrtKernels* C(void) { return g_base ? g_base : zrt_kernels_cpu(); }

/* --------------------------------------------------------------- memory */

static void* g_alloc_locked(size_t bytes);
static void* g_alloc(size_t bytes) {
    pthread_mutex_lock(&g_mu);
    void* p = g_alloc_locked(bytes);
    pthread_mutex_unlock(&g_mu);
    return p;
}
static void* g_alloc_locked(size_t bytes) {
    const size_t len = page_round(bytes ? bytes : 1);
    void* p = mmap(NULL, len, g_open ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (g_n == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 64;
        Mapping* m = realloc(g_maps, cap * sizeof *m);
        if (!m) {
            munmap(p, len);
            return NULL;
        }
        g_maps = m;
        g_cap = cap;
    }
    g_maps[g_n++] = (Mapping){p, len};
    return p;
}

static void g_free(void* p) {
    if (!p) return;
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_n; i++)
        if (g_maps[i].p == p) {
            munmap(p, g_maps[i].len);
            g_maps[i] = g_maps[--g_n];
            pthread_mutex_unlock(&g_mu);
            return;
        }
    fprintf(stderr, "cpu_guarded: free of %p, which this backend did not allocate\n", p);
    abort();
}

/* host memory is plain host memory here (not guarded) */
static void* g_host_alloc(size_t bytes) { return C()->host_alloc(bytes); }
static void g_host_free(void* p) { C()->host_free(p); }

static void g_copy(void* dst, const void* src, size_t bytes) {
    open_all();
    C()->copy(dst, src, bytes);
    close_all();
}
static void g_memset0(void* p, size_t bytes) {
    open_all();
    C()->memset0(p, bytes);
    close_all();
}
static void g_synchronize(void) {}
static int g_mem_info(size_t* free_bytes, size_t* total_bytes) {
    return C()->mem_info(free_bytes, total_bytes);
}
/* events are host memory (the host table's): not guarded */
static void* g_event_record(void) { return C()->event_record(); }
static double g_event_elapsed_ms(void* a, void* b) { return C()->event_elapsed_ms(a, b); }
static void g_event_free(void* e) { C()->event_free(e); }

/* ---------------------------------------------------------------- kernels */

/* Each entry: open, the CPU kernel, close. */
#define GUARD(call)   \
    do {              \
        open_all();   \
        call;         \
        close_all();  \
    } while (0)

static void g_matmul_forward(float* out, const float* inp, const float* weight, int N, int IC,
                             int OC) {
    GUARD(C()->matmul_forward(out, inp, weight, N, IC, OC));
}
static void g_matmul_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                              const float* weight, int N, int IC, int OC, int accumulate) {
    GUARD(C()->matmul_backward(dinp, dweight, dout, inp, weight, N, IC, OC, accumulate));
}
static void g_matmul_forward_w16(float* out, const float* inp, const uint16_t* weight, int N,
                                 int IC, int OC) {
    GUARD(C()->matmul_forward_w16(out, inp, weight, N, IC, OC));
}
static void g_matmul_backward_w16(float* dinp, float* dweight, const float* dout,
                                  const float* inp, const uint16_t* weight, int N, int IC, int OC,
                                  int accumulate) {
    GUARD(C()->matmul_backward_w16(dinp, dweight, dout, inp, weight, N, IC, OC, accumulate));
}
static void g_rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight,
                              int N, int C_, float eps) {
    GUARD(C()->rmsnorm_forward(out, rstd, inp, weight, N, C_, eps));
}
static void g_rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, const float* rstd, int N, int C_) {
    GUARD(C()->rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C_));
}
static void g_rope_table(float* cos_sin, int T, int hd, float theta) {
    GUARD(C()->rope_table(cos_sin, T, hd, theta));
}
static void g_rope_forward(float* x, const float* cs, int B, int T, int NH, int hd) {
    GUARD(C()->rope_forward(x, cs, B, T, NH, hd));
}
static void g_rope_backward(float* dx, const float* cs, int B, int T, int NH, int hd) {
    GUARD(C()->rope_backward(dx, cs, B, T, NH, hd));
}
static void g_attention_forward(float* out, float* lse, const float* q, const float* k,
                                const float* v, int B, int T, int H, int KV, int hd,
                                float* scratch) {
    GUARD(C()->attention_forward(out, lse, q, k, v, B, T, H, KV, hd, scratch));
}
static void g_attention_backward(float* dq, float* dk, float* dv, const float* dout,
                                 const float* out, const float* lse, const float* q,
                                 const float* k, const float* v, int B, int T, int H, int KV,
                                 int hd, float* scratch) {
    GUARD(C()->attention_backward(dq, dk, dv, dout, out, lse, q, k, v, B, T, H, KV, hd, scratch));
}
static size_t g_attention_scratch_floats(int B, int T, int H, int KV, int hd) {
    return C()->attention_scratch_floats(B, T, H, KV, hd);
}
static void g_swiglu_forward(float* h, const float* gate, const float* up, int N, int F) {
    GUARD(C()->swiglu_forward(h, gate, up, N, F));
}
static void g_swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate,
                              const float* up, int N, int F) {
    GUARD(C()->swiglu_backward(dgate, dup, dh, gate, up, N, F));
}
static void g_embedding_forward(float* out, const int* tokens, const float* table, int N, int C_) {
    GUARD(C()->embedding_forward(out, tokens, table, N, C_));
}
static void g_embedding_forward_w16(float* out, const int* tokens, const uint16_t* table, int N,
                                    int C_) {
    GUARD(C()->embedding_forward_w16(out, tokens, table, N, C_));
}
static void g_embedding_backward(float* dtable, const float* dout, const int* tokens, int N,
                                 int C_) {
    GUARD(C()->embedding_backward(dtable, dout, tokens, N, C_));
}
static double g_crossentropy(float* dlogits, float* losses, const float* logits,
                             const int* targets, int N, int V, float dscale, int* count) {
    double r;
    GUARD(r = C()->crossentropy_forward_backward(dlogits, losses, logits, targets, N, V, dscale,
                                                 count));
    return r;
}
static void g_add(float* out, const float* a, const float* b, size_t n) {
    GUARD(C()->add(out, a, b, n));
}
static void g_zero(float* x, size_t n) { GUARD(C()->zero(x, n)); }
static void g_moe_route(float* probs, int* sel, float* w, const float* logits, int N, int E, int k,
                        int norm_topk) {
    GUARD(C()->moe_route(probs, sel, w, logits, N, E, k, norm_topk));
}
static void g_moe_prob_sum(double* acc, const float* probs, int N, int E) {
    GUARD(C()->moe_prob_sum(acc, probs, N, E));
}
static void g_moe_gather(float* xs, const float* x, const int* pos, int N, int k, int C_) {
    GUARD(C()->moe_gather(xs, x, pos, N, k, C_));
}
static void g_moe_combine(float* out, const float* ys, const float* w, const int* pos, int N, int k,
                          int C_) {
    GUARD(C()->moe_combine(out, ys, w, pos, N, k, C_));
}
static void g_moe_combine_backward(float* dw, float* dys, const float* dout, const float* ys,
                                   const float* w, const int* pos, int N, int k, int C_) {
    GUARD(C()->moe_combine_backward(dw, dys, dout, ys, w, pos, N, k, C_));
}
static void g_moe_router_backward(float* dlogits, const float* probs, const int* sel,
                                  const float* w, const float* dw, const float* aux, int N, int E,
                                  int k, int norm_topk) {
    GUARD(C()->moe_router_backward(dlogits, probs, sel, w, dw, aux, N, E, k, norm_topk));
}
static void g_round_to_bf16(uint16_t* out, const float* in, size_t n) {
    GUARD(C()->round_to_bf16(out, in, n));
}
static void g_bf16_to_float(float* out, const uint16_t* in, size_t n) {
    GUARD(C()->bf16_to_float(out, in, n));
}
static void g_round_bf16_inplace(float* x, size_t n) { GUARD(C()->round_bf16_inplace(x, n)); }
static void g_add_bf16(float* acc, const uint16_t* in, size_t n) { GUARD(C()->add_bf16(acc, in, n)); }
static void g_adamw(float* p, const float* g, float* m, float* v, size_t n,
                    const ZrtAdamWStep* s) {
    GUARD(C()->adamw(p, g, m, v, n, s));
}
static double g_sumsq(const float* x, size_t n) {
    double r;
    GUARD(r = C()->sumsq(x, n));
    return r;
}
static void g_scale(float* x, size_t n, float factor) { GUARD(C()->scale(x, n, factor)); }

static const ZrtKernels guarded_kernels = {
    .name = "cpu_guarded",
    .host_memory = 0,
    .alloc = g_alloc,
    .free = g_free,
    .host_alloc = g_host_alloc,
    .host_free = g_host_free,
    .upload = g_copy,
    .download = g_copy,
    .copy = g_copy,
    .memset0 = g_memset0,
    .synchronize = g_synchronize,
    .mem_info = g_mem_info,
    .event_record = g_event_record,
    .event_elapsed_ms = g_event_elapsed_ms,
    .event_free = g_event_free,
    .matmul_forward = g_matmul_forward,
    .matmul_backward = g_matmul_backward,
    .matmul_forward_w16 = g_matmul_forward_w16,
    .matmul_backward_w16 = g_matmul_backward_w16,
    .rmsnorm_forward = g_rmsnorm_forward,
    .rmsnorm_backward = g_rmsnorm_backward,
    .rope_table = g_rope_table,
    .rope_forward = g_rope_forward,
    .rope_backward = g_rope_backward,
    .attention_forward = g_attention_forward,
    .attention_backward = g_attention_backward,
    .attention_scratch_floats = g_attention_scratch_floats,
    .swiglu_forward = g_swiglu_forward,
    .swiglu_backward = g_swiglu_backward,
    .embedding_forward = g_embedding_forward,
    .embedding_forward_w16 = g_embedding_forward_w16,
    .embedding_backward = g_embedding_backward,
    .crossentropy_forward_backward = g_crossentropy,
    .add = g_add,
    .zero = g_zero,
    .moe_route = g_moe_route,
    .moe_prob_sum = g_moe_prob_sum,
    .moe_gather = g_moe_gather,
    .moe_combine = g_moe_combine,
    .moe_combine_backward = g_moe_combine_backward,
    .moe_router_backward = g_moe_router_backward,
    .round_to_bf16 = g_round_to_bf16,
    .bf16_to_float = g_bf16_to_float,
    .round_bf16_inplace = g_round_bf16_inplace,
    .add_bf16 = g_add_bf16,
    .adamw = g_adamw,
    .sumsq = g_sumsq,
    .scale = g_scale,
};

const ZrtKernels* zrt_kernels_cpu_guarded(void) { return zrt_kernels_guarded(zrt_kernels_cpu()); }

const ZrtKernels* zrt_kernels_guarded(const ZrtKernels* base) {
    static ZrtKernels bf16_twin;
    if (!base || !base->host_memory) return NULL;
    if (g_base && g_base != base) {
        fprintf(stderr, "cpu_guarded: one guarded table per process (asked for %s after %s)\n",
                base->name, g_base->name);
        abort();
    }
    g_base = base;
    if (base == zrt_kernels_cpu()) return &guarded_kernels;
    bf16_twin = guarded_kernels; /* same wrappers, its name says which kernels */
    bf16_twin.name = "cpu_guarded_bf16";
    return &bf16_twin;
}
