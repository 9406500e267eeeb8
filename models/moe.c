/*
 * moe.c — the mixture-of-experts MLP of moe.h: router, top-k, the
 * expert-major grouping, experts, combine, the load-balancing loss, and the
 * backward of all of it, router included.
 *
 * Read top to bottom: allocation, routing (softmax, top-k, grouping), the
 * experts' SwiGLU over their rows, moe_forward, the aux loss, moe_backward.
 *
 * Determinism: routing is per row; the grouping is a stable counting sort
 * of the (token, slot) pairs in (token, slot) order; every sum runs in a
 * fixed order (slots in order, rows in order, experts in order), so results
 * depend on neither timing nor thread count.
 *
 * The router's backward, for one row with probabilities p (E), chosen set
 * S (k) and weights w_j = p_S[j] (or p_S[j] / s, s = sum_j p_S[j]):
 *   dw_j    = <dout, y_j>                      (y_j: expert j's output)
 *   dp_S[j] = dw_j, or (dw_j - sum_i dw_i w_i) / s with norm_topk_prob
 *   dp_e   += coef * E * F_e / (R_a * R)       (aux loss; F_e pair counts
 *                                               and R_a rows of the batch the
 *                                               aux covers, R this one's rows)
 *   dlogit  = p * (dp - <dp, p>)               (softmax)
 * The top-k choice itself has no gradient (as in HF: the one-hot mask and
 * the index are constants). When the aux covers this micro-batch only,
 * R_a = R and the term is the aux's own gradient; when it covers the
 * micro-batches of W ranks (R_a = W R, hooks->aux_reduce), it is W times the
 * whole batch's gradient w.r.t. this rank's probabilities, F_e global and
 * constant: the runtime means the W ranks' gradients, which gives the whole
 * batch's.
 */
#include "moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ allocation */

static size_t layer_fixed_floats(const MoeDims* d) {
    const size_t N = d->N, E = d->E, k = d->k, C = d->C;
    // probs, sel, w, pos, counts, routed, xs, ys (the estimate's count)
    return N * E + 3 * N * k + 2 * E + 2 * N * k * C;
}

/* With d->exchange the rows a rank's experts receive are the routing's
 * choice: counted at the capacity bound, capacity_factor * N*k, when there
 * is one, else at the average N*k (an uneven router makes a rank receive
 * more; its buffers grow). */
size_t moe_rows_received(const MoeDims* d) {
    const double nk = (double)d->N * d->k;
    return !d->exchange ? (size_t)nk
                        : (size_t)ceil((d->capacity_factor > 0 ? d->capacity_factor : 1.0) * nk);
}

/* Floats a row of gate | up | hid takes (hid in bf16 with d->a16), and a
 * row of the expert side's scratch (yl or dxl, dgate, dup, dhid, and with
 * d->a16 xin16). */
static size_t swiglu_row_floats(const MoeDims* d) { return 2 * (size_t)d->Fe + (d->a16 ? ((size_t)d->Fe + 1) / 2 : (size_t)d->Fe); }
static size_t scratch_row_floats(const MoeDims* d) {
    return (size_t)d->C + 3 * (size_t)d->Fe + (d->a16 ? ((size_t)d->C + 1) / 2 : 0);
}

size_t moe_acts_bytes(const MoeDims* d, int n_layers) {
    const size_t N = d->N, E = d->E, k = d->k, C = d->C, cap = moe_rows_received(d), sw = swiglu_row_floats(d);
    // per block: the fixed arrays (with xs, unless shared), xl with an
    // exchange, gate/up/hid unless recomputed
    const size_t per_layer = layer_fixed_floats(d) - (d->exchange ? N * k * C : 0) +
                             (d->exchange ? cap * C : 0) + (d->recompute ? 0 : cap * sw);
    const size_t shared = N * E + N * k + 2 * N * k * C + cap * scratch_row_floats(d) +
                          (d->exchange ? N * k * C : 0) + (d->recompute ? cap * sw : 0);
    return ((size_t)n_layers * per_layer + shared) * sizeof(float) +
           E * (sizeof(long long) + 2 * sizeof(double));
}

/* A buffer that must grow past its size (an exchange that received more
 * rows than the plan's count) grows by an eighth more, so a router's
 * wandering maximum does not reallocate it step after step. */
static int grown(int rows) { return rows + rows / 8; }

/* gate, up, hid for `rows` rows: the block's own (grown as needed), or the
 * shared ones with d->recompute. The contents are not kept. */
static int swiglu_reserve(MoeActs* m, MoeLayer* L, int rows) {
    const size_t Fe = m->d.Fe;
    if (!m->d.recompute) {
        if (rows <= L->cap) return 0;
        rows = grown(rows);
        float* mem = zdev_alloc(m->K->dev, (size_t)rows * swiglu_row_floats(&m->d) * sizeof(float));
        if (!mem) return -1;
        zdev_free(m->K->dev, L->gate);
        L->gate = mem;
        L->cap = rows;
    } else {
        if (rows > m->sg_cap) {
            rows = grown(rows);
            float* mem = zdev_alloc(m->K->dev, (size_t)rows * swiglu_row_floats(&m->d) * sizeof(float));
            if (!mem) return -1;
            zdev_free(m->K->dev, m->sg_mem);
            m->sg_mem = mem;
            m->sg_cap = rows;
        }
        L->gate = m->sg_mem;
        L->cap = m->sg_cap;
    }
    L->up = L->gate + (size_t)L->cap * Fe;
    L->hid = m->d.a16 ? NULL : L->up + (size_t)L->cap * Fe;
    L->hid16 = m->d.a16 ? (uint16_t*)(L->up + (size_t)L->cap * Fe) : NULL;
    return 0;
}

/* The rows an expert side can hold (with_x: also a copy of its input rows);
 * grows the buffers, whose contents are not kept (this runs before they are
 * written). */
static int layer_reserve(MoeActs* m, MoeLayer* L, int rows, int with_x) {
    const ZrtKernels* K = m->K;
    const size_t C = m->d.C;
    if (swiglu_reserve(m, L, rows)) return -1;
    if (with_x && rows > L->xl_cap) {
        rows = grown(rows);
        float* x = zdev_alloc(K->dev, (size_t)rows * C * sizeof(float) + 1);
        if (!x) return -1;
        zdev_free(K->dev, L->xl);
        L->xl = x;
        L->xl_cap = rows;
    }
    return 0;
}

/* Room for the layout of n_chunks chunks of n_local experts (contents not
 * kept; host memory). */
static int chunks_reserve(MoeLayer* L, int n_chunks, int n_local) {
    const long long need = (long long)n_chunks * n_local + n_chunks + 1;
    if (need <= L->chunk_cap) return 0;
    if (need > (1 << 28)) return -1;
    int* mem = malloc((size_t)need * sizeof(int));
    if (!mem) return -1;
    free(L->chunk_counts);
    L->chunk_counts = mem;
    L->chunk_cap = (int)need;
    return 0;
}

static int scratch_reserve(MoeActs* m, int rows) {
    if (rows <= m->cap) return 0;
    rows = grown(rows);
    const size_t C = m->d.C, Fe = m->d.Fe;
    float* mem = zdev_alloc(m->K->dev, (size_t)rows * scratch_row_floats(&m->d) * sizeof(float));
    if (!mem) return -1;
    zdev_free(m->K->dev, m->yl);
    // yl is forward scratch (free once the block's combine completed), dxl
    // backward scratch: every forward runs before every backward, and the
    // recomputing backward does not run the experts' forward, so one buffer
    m->yl = mem;
    m->dxl = mem;
    m->dgate = m->dxl + (size_t)rows * C;
    m->dup = m->dgate + (size_t)rows * Fe;
    m->dhid = m->dup + (size_t)rows * Fe;
    m->xin16 = m->d.a16 ? (uint16_t*)(m->dhid + (size_t)rows * Fe) : NULL;
    m->cap = rows;
    return 0;
}

MoeActs* moe_acts_alloc(const MoeDims* d, int n_layers, const ZrtKernels* K) {
    MoeActs* m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->d = *d;
    m->K = K;
    m->n_layers = n_layers;
    m->layer = calloc((size_t)n_layers, sizeof *m->layer);
    const size_t N = d->N, E = d->E, k = d->k, C = d->C;
    m->logits = zdev_alloc(K->dev, (N * E + N * k + 2 * N * k * C + E) * sizeof(float));
    m->tokens_per_expert = calloc(E, sizeof(long long));
    m->prob_sum = calloc(E, sizeof(double));
    m->prob_sum_dev = zdev_alloc(K->dev, E * sizeof(double));
    m->aux_host = zdev_host_alloc(K->dev, E * sizeof(float));
    m->aux_stats = calloc(2 * E + 1, sizeof(double));
    /* the rows an expert side holds: the plan's count (moe_rows_received),
     * reserved now so a steady step allocates nothing */
    const int rows0 = (int)moe_rows_received(d);
    int ok = m->layer && m->logits && m->tokens_per_expert && m->prob_sum && m->prob_sum_dev &&
             m->aux_host &&
             m->aux_stats &&
             !scratch_reserve(m, rows0);
    if (ok) {
        m->dw = m->logits + N * E;
        m->dys = m->dw + N * k;
        m->dxs = m->dys + N * k * C;
        m->aux_dev = m->dxs + N * k * C;
    }
    if (ok && d->exchange) ok = (m->xs_shared = zdev_alloc(K->dev, N * k * C * sizeof(float) + 1)) != NULL;
    const size_t own_xs = d->exchange ? 0 : N * k * C;
    for (int i = 0; ok && i < n_layers; i++) {
        MoeLayer* L = &m->layer[i];
        // backend: probs (N, E) | sel (N, k) | w (N, k) | pos (N, k) | ys | xs (own)
        float* f = zdev_alloc(K->dev, (N * E + 3 * N * k + N * k * C + own_xs) * sizeof(float));
        // host (pinned): sel, pos (N, k) | counts, routed (E)
        int* h = zdev_host_alloc(K->dev, (2 * N * k + 2 * E) * sizeof(int));
        if (!f || !h) {
            zdev_free(K->dev, f);
            zdev_host_free(K->dev, h);
            ok = 0;
            break;
        }
        L->probs = f, f += N * E;
        L->sel = (int*)f, f += N * k;
        L->w = f, f += N * k;
        L->pos = (int*)f, f += N * k;
        L->ys = f, f += N * k * C;
        L->xs = d->exchange ? m->xs_shared : f;
        L->sel_host = h, h += N * k;
        L->pos_host = h, h += N * k;
        L->counts = h, h += E;
        L->routed = h;
        ok = !layer_reserve(m, L, rows0, d->exchange) && !chunks_reserve(L, 1, d->E);
    }
    if (!ok) {
        moe_acts_free(m);
        return NULL;
    }
    return m;
}

void moe_acts_free(MoeActs* m) {
    if (!m) return;
    const ZrtKernels* K = m->K;
    for (int i = 0; m->layer && i < m->n_layers; i++) {
        MoeLayer* L = &m->layer[i];
        zdev_free(K->dev, L->xl);
        if (!m->d.recompute) zdev_free(K->dev, L->gate);
        zdev_free(K->dev, L->probs);
        zdev_host_free(K->dev, L->sel_host);
        free(L->chunk_counts);
    }
    free(m->layer);
    zdev_free(K->dev, m->logits);
    zdev_free(K->dev, m->yl);
    zdev_free(K->dev, m->xs_shared);
    zdev_free(K->dev, m->sg_mem);
    zdev_free(K->dev, m->gtree);
    free(m->tokens_per_expert);
    free(m->prob_sum);
    zdev_free(K->dev, m->prob_sum_dev);
    zdev_host_free(K->dev, m->aux_host);
    free(m->aux_stats);
    free(m);
}

void moe_begin_step(MoeActs* m, int N) {
    m->d.N = N;
    m->dropped = 0;
    memset(m->tokens_per_expert, 0, (size_t)m->d.E * sizeof(long long));
    zdevCheck(zdev_memset_async(m->K->dev, m->prob_sum_dev, 0, (size_t)m->d.E * sizeof(double), NULL));
    m->aux = 0.0f;
    m->aux_uploaded = 0;
}

/* --------------------------------------------------------------- routing */

/* probs, the top-k choices and their weights on the backend (moe_route);
 * then on the host, from one download of the choices: the pair counts per
 * expert and each pair's row in the expert-major order, uploaded for the
 * gather and the combine. */
static void route(const MoeDims* d, MoeLayer* L, const ZrtKernels* K, const float* logits) {
    const int N = d->N, E = d->E, k = d->k;
    K->moe_route(L->probs, L->sel, L->w, logits, N, E, k, d->norm_topk);
    zdevCheck(zdev_download(K->dev, L->sel_host, L->sel, (size_t)N * k * sizeof(int)));
    // stable counting sort of the pairs (n, j) by expert; past an expert's
    // capacity a pair is dropped (pos -1), so earlier tokens keep their slots
    const long long cap = d->capacity_factor > 0
                              ? (long long)ceil((double)d->capacity_factor * N * k / E)
                              : (long long)N * k;
    memset(L->routed, 0, (size_t)E * sizeof(int));
    for (int i = 0; i < N * k; i++) L->routed[L->sel_host[i]]++;
    L->dropped = 0;
    for (int e = 0; e < E; e++) {
        L->counts[e] = L->routed[e] < cap ? L->routed[e] : (int)cap;
        L->dropped += L->routed[e] - L->counts[e];
    }
    int next[E > 0 ? E : 1], seen[E > 0 ? E : 1];
    for (int e = 0, o = 0; e < E; e++) {
        next[e] = o;
        seen[e] = 0;
        o += L->counts[e];
    }
    for (int i = 0; i < N * k; i++) {
        const int e = L->sel_host[i];
        L->pos_host[i] = seen[e]++ < L->counts[e] ? next[e]++ : -1;
    }
    // no wait: pos_host stays as it is until this block's next route, after
    // the download above has waited for the stream (and with it this copy)
    zdevCheck(zdev_copy_async(K->dev, L->pos, L->pos_host, (size_t)N * k * sizeof(int),
                              ZDEV_HOST_TO_DEVICE, NULL));
}

/* ---------------------------------------------------------------- experts */

/* Offsets inside one expert's parameters: w_gate (Fe, C) | w_up (Fe, C) |
 * w_down (C, Fe). */
static size_t expert_numel(const MoeDims* d) { return 3 * (size_t)d->Fe * d->C; }

/* The runs of rows the experts compute in chunk c: one per local expert,
 * or with `src` (train.rank_invariant, LlamaParamHooks.dispatch_sources)
 * one per (expert, source rank), the rows source s sent, so that every GEMM
 * has the shape the source's rows have at EP = 1. run_rows gives run i's
 * expert, first row (in the layout of the whole block) and row count. */
typedef struct {
    const int* rc;  /* (n_local) rows per local expert in the chunk */
    const int* src; /* (n_src, n_local) rows per source and local expert, or NULL */
    int n_local, n_src, base;
} Runs;

static Runs runs_of(const MoeLayer* L, int chunk, const int* src, int n_src) {
    Runs r = {L->chunk_counts + (size_t)chunk * L->n_local, src, L->n_local, src ? n_src : 1,
              L->chunk_off[chunk]};
    return r;
}

/* the rows of expert j from source s (s = 0 without src: all of j's) */
static int run_rows(const Runs* r, int j, int s) {
    return r->src ? r->src[(size_t)s * r->n_local + j] : r->rc[j];
}

/* The GEMMs' inputs at row o (Act, weights.h): xin's rows, in bf16 with
 * d->a16 (m->xin16, which x16_chunk fills for the chunk at hand), and hid,
 * kept in bf16 with d->a16. */
static Act xin_at(const MoeActs* m, const MoeLayer* L, int o) {
    const size_t at = (size_t)o * m->d.C;
    return m->d.a16 ? (Act){NULL, m->xin16 + at} : (Act){(float*)L->xin + at, NULL};
}
static Act hid_at(const MoeDims* d, const MoeLayer* L, int o) { return act_at(L->hid, L->hid16, d->a16, (size_t)o * d->Fe); }
/* With d->a16: the chunk's xin rows rounded to bf16 once, for all its GEMMs. */
static void x16_chunk(MoeActs* m, const MoeLayer* L, int chunk) {
    const int b = L->chunk_off[chunk];
    const size_t rows = (size_t)(L->chunk_off[chunk + 1] - b), C = m->d.C;
    if (m->d.a16 && rows) m->K->round_to_bf16(m->xin16 + (size_t)b * C, L->xin + (size_t)b * C, rows * C);
}

/* The experts' GEMMs as grouped GEMMs (kernels.h: one launch for all local
 * experts, the bits of one call per expert): where the table has them and
 * the GEMMs read bf16 inputs, for runs of one expert each (not the
 * rank-invariant source runs, whose shapes must be EP = 1's one GEMM each). */
static int grouped(const MoeActs* m, const int* src) {
    return m->d.a16 && !src && m->K->matmul_forward_grouped_a16 && m->K->matmul_backward_grouped_a16;
}

/* One run's gate and up: rows [o, o + c) of xin times expert we's w_gate
 * and w_up. */
static void run_gate_up(const MoeActs* m, const MoeLayer* L, Weight we, int o, int c) {
    const MoeDims* d = &m->d;
    const size_t Fe = d->Fe, FC = Fe * d->C;
    const Act x = xin_at(m, L, o);
    act_linear_forward(m->K, L->gate + (size_t)o * Fe, x, we, c, d->C, d->Fe);
    act_linear_forward(m->K, L->up + (size_t)o * Fe, x, weight_at(we, FC), c, d->C, d->Fe);
}

/* Chunk c's gate and up, run by run, then its hid = SwiGLU(gate, up) in
 * one call over all its rows (elementwise: the bits of one call per run,
 * a launch per chunk instead of per expert). Returns the chunk's runs. */
static Runs chunk_gate_up(MoeActs* m, const MoeLayer* L, Weight p, int chunk, const int* src, int n_src) {
    const MoeDims* d = &m->d;
    const Runs r = runs_of(L, chunk, src, n_src);
    const size_t Fe = d->Fe, FC = Fe * d->C, rows = (size_t)(L->chunk_off[chunk + 1] - r.base);
    x16_chunk(m, L, chunk);
    if (grouped(m, src)) { /* every expert's gate, then every expert's up: one launch each */
        const Weight wu = weight_at(p, FC);
        const uint16_t* x = xin_at(m, L, r.base).bf16;
        m->K->matmul_forward_grouped_a16(L->gate + (size_t)r.base * Fe, x, p.f32, p.bf16, expert_numel(d), r.rc,
                                         r.n_local, d->C, d->Fe);
        m->K->matmul_forward_grouped_a16(L->up + (size_t)r.base * Fe, x, wu.f32, wu.bf16, expert_numel(d), r.rc,
                                         r.n_local, d->C, d->Fe);
    } else {
        for (int j = 0, o = r.base; j < r.n_local; j++) {
            const Weight we = weight_at(p, (size_t)j * expert_numel(d));
            for (int s = 0; s < r.n_src; s++) {
                const int c = run_rows(&r, j, s);
                if (c) run_gate_up(m, L, we, o, c);
                o += c;
            }
        }
    }
    if (rows)
        act_swiglu(m->K, hid_at(d, L, r.base), L->gate + (size_t)r.base * Fe, L->up + (size_t)r.base * Fe, (int)rows,
                   d->Fe);
    return r;
}

/* yl at chunk c's rows = the SwiGLU of each local expert over its rows of
 * that chunk of xin: gate and up run by run, SwiGLU over the chunk, the
 * down projection run by run. */
static void experts_forward(MoeActs* m, const MoeLayer* L, Weight p, float* yl, int chunk, const int* src, int n_src) {
    const MoeDims* d = &m->d;
    const size_t C = d->C, FC = (size_t)d->Fe * C;
    const Runs r = chunk_gate_up(m, L, p, chunk, src, n_src);
    if (grouped(m, src)) {
        const Weight wd = weight_at(p, 2 * FC);
        m->K->matmul_forward_grouped_a16(yl + (size_t)r.base * C, hid_at(d, L, r.base).bf16, wd.f32, wd.bf16,
                                         expert_numel(d), r.rc, r.n_local, d->Fe, d->C);
        return;
    }
    for (int j = 0, o = r.base; j < r.n_local; j++) {
        const Weight wd = weight_at(p, (size_t)j * expert_numel(d) + 2 * FC);
        for (int s = 0; s < r.n_src; s++) {
            const int c = run_rows(&r, j, s);
            if (c) act_linear_forward(m->K, yl + (size_t)o * C, hid_at(d, L, o), wd, c, d->Fe, d->C);
            o += c;
        }
    }
}

/* One run's backward: dxl at rows [o, o + c) from dy (the run's rows), the
 * expert's weight gradient added into ge. */
static void run_backward(const MoeDims* d, const MoeLayer* L, MoeActs* m, const ZrtKernels* K,
                         Weight we, float* ge, const float* dy, float* dxl, int o, int c) {
    const size_t C = d->C, Fe = d->Fe, FC = Fe * C;
    const Act x = xin_at(m, L, o), h = hid_at(d, L, o);
    float *gt = L->gate + (size_t)o * Fe, *u = L->up + (size_t)o * Fe;
    float* dx = dxl + (size_t)o * C;
    if (d->recompute) { // the forward's gate, up and hid again: same kernels, same bits
        act_linear_forward(K, gt, x, we, c, d->C, d->Fe);
        act_linear_forward(K, u, x, weight_at(we, FC), c, d->C, d->Fe);
        act_swiglu(K, h, gt, u, c, d->Fe);
    }
    act_linear_backward(K, m->dhid, ge + 2 * FC, dy, h, weight_at(we, 2 * FC), c, d->Fe, d->C, 0);
    K->swiglu_backward(m->dgate, m->dup, m->dhid, gt, u, c, d->Fe);
    act_linear_backward(K, dx, ge, m->dgate, x, we, c, d->C, d->Fe, 0);
    act_linear_backward(K, dx, ge + FC, m->dup, x, weight_at(we, FC), c, d->C, d->Fe, 1);
}

/* Chunk c's backward with one run per local expert: (recomputed gate, up
 * and hid, as the forward makes them), each expert's down projection
 * (dhid at the run's rows of the chunk), one SwiGLU backward over the
 * chunk's rows, then each expert's gate and up.  Every tensor sees the
 * per-run order's operations in the same order (each expert's gradient
 * regions belong to its run alone; a row's dx is gate's, then up's added),
 * so the bits are run_backward's, with one SwiGLU launch a chunk. */
static void experts_backward_phased(const MoeDims* d, const MoeLayer* L, MoeActs* m, const ZrtKernels* K,
                                    Weight p, float* g, const float* dyl, float* dxl, int chunk) {
    const size_t C = d->C, Fe = d->Fe, FC = Fe * C, en = expert_numel(d);
    Runs r;
    if (d->recompute) {
        r = chunk_gate_up(m, L, p, chunk, NULL, 0);
    } else {
        r = runs_of(L, chunk, NULL, 0);
        x16_chunk(m, L, chunk); /* the forward's xin16 is another block's by now */
    }
    const size_t rows = (size_t)(L->chunk_off[chunk + 1] - r.base), b = (size_t)r.base;
    if (grouped(m, NULL)) { /* the same products, one launch per projection */
        const Weight wd = weight_at(p, 2 * FC), wu = weight_at(p, FC);
        const uint16_t* x = xin_at(m, L, r.base).bf16;
        K->matmul_backward_grouped_a16(m->dhid, g + 2 * FC, en, dyl, hid_at(d, L, r.base).bf16, wd.f32, wd.bf16, en,
                                       r.rc, r.n_local, d->Fe, d->C, 0);
        if (rows) K->swiglu_backward(m->dgate, m->dup, m->dhid, L->gate + b * Fe, L->up + b * Fe, (int)rows, d->Fe);
        K->matmul_backward_grouped_a16(dxl + b * C, g, en, m->dgate, x, p.f32, p.bf16, en, r.rc, r.n_local, d->C,
                                       d->Fe, 0);
        K->matmul_backward_grouped_a16(dxl + b * C, g + FC, en, m->dup, x, wu.f32, wu.bf16, en, r.rc, r.n_local,
                                       d->C, d->Fe, 1);
        return;
    }
    for (int j = 0, o = r.base; j < r.n_local; j++) {
        const int c = run_rows(&r, j, 0);
        const size_t at = (size_t)(o - r.base);
        if (c)
            act_linear_backward(K, m->dhid + at * Fe, g + (size_t)j * en + 2 * FC, dyl + at * C, hid_at(d, L, o),
                                weight_at(p, (size_t)j * en + 2 * FC), c, d->Fe, d->C, 0);
        o += c;
    }
    if (rows) K->swiglu_backward(m->dgate, m->dup, m->dhid, L->gate + b * Fe, L->up + b * Fe, (int)rows, d->Fe);
    for (int j = 0, o = r.base; j < r.n_local; j++) {
        const int c = run_rows(&r, j, 0);
        const size_t at = (size_t)(o - r.base);
        const Act x = xin_at(m, L, o);
        float* dx = dxl + (size_t)o * C;
        const Weight we = weight_at(p, (size_t)j * en);
        if (c) {
            act_linear_backward(K, dx, g + (size_t)j * en, m->dgate + at * Fe, x, we, c, d->C, d->Fe, 0);
            act_linear_backward(K, dx, g + (size_t)j * en + FC, m->dup + at * Fe, x, weight_at(we, FC), c, d->C,
                                d->Fe, 1);
        }
        o += c;
    }
}

/* The source tree's buffers (src runs): a zero expert, the leaf, and one
 * pending left subtree per level, each one expert's parameters. */
static float* tree_buffers(MoeActs* m, int n_src) {
    int levels = 0;
    while ((1 << levels) < n_src) levels++;
    const size_t need = (size_t)(levels + 2) * expert_numel(&m->d);
    if (need > m->gtree_cap) {
        float* mem = zdev_alloc(m->K->dev, need * sizeof(float));
        if (!mem) return NULL;
        zdev_free(m->K->dev, m->gtree);
        m->gtree = mem;
        m->gtree_cap = need;
        zdevCheck(zdev_memset_async(m->K->dev, mem, 0, expert_numel(&m->d) * sizeof(float), NULL));
    }
    return m->gtree;
}

/* dxl at chunk c's rows from dyl (the chunk's rows only, (rows of c, C));
 * the experts' gradients accumulate in g, chunk after chunk. With src
 * (rank-invariant) expert j's gradient is its sources' in a binary tree:
 * leaf s = 0 + that source's GEMMs (0 + its bf16 rounding with tree_bf16,
 * as fsdp.c takes a leaf), node = left + right (rounded likewise), the
 * pending left subtrees kept per level (a binary counter over s, which
 * n_src, a power of two, fills; a leaf or node is written where it waits,
 * never copied); the top is added into g. Returns -1 when the tree's
 * buffers cannot be had. */
static int experts_backward(const MoeDims* d, const MoeLayer* L, MoeActs* m, const ZrtKernels* K,
                            Weight p, float* g, const float* dyl, float* dxl, int chunk,
                            const int* src, int n_src, int tree_bf16) {
    const size_t C = d->C, en = expert_numel(d);
    const Runs r = runs_of(L, chunk, src, n_src);
    float* tb = NULL;
    if (src) {
        if (n_src < 1 || (n_src & (n_src - 1)) || !(tb = tree_buffers(m, n_src))) return -1;
    }
    if (!src) { /* one run per expert: the experts' phases one after the other */
        experts_backward_phased(d, L, m, K, p, g, dyl, dxl, chunk);
        return 0;
    }
    x16_chunk(m, L, chunk);
    for (int j = 0, o = r.base; j < r.n_local; j++) {
        const size_t off = (size_t)j * en;
        const Weight we = weight_at(p, off);
        for (int s = 0; s < r.n_src; s++) {
            const int c = run_rows(&r, j, s);
            const float* dy = dyl + (size_t)(o - r.base) * C;
            // s's trailing ones: the merges with pending left subtrees; then
            // the result waits at level `ones`, or (the last s) is the top
            int ones = 0;
            while ((s >> ones) & 1) ones++;
            const int top = s == n_src - 1;
            float *zero = tb, *v = tb + en, *level = tb + 2 * en;
            float* wait_at = top ? NULL : level + (size_t)ones * en;
            float* leaf = ones == 0 && !top ? wait_at : v; // no copy for a leaf that waits
            zdevCheck(zdev_memset_async(K->dev, leaf, 0, en * sizeof(float), NULL));
            if (c) run_backward(d, L, m, K, we, leaf, dy, dxl, o, c);
            o += c;
            if (tree_bf16) {
                K->round_bf16_inplace(leaf, en);
                K->add(leaf, zero, leaf, en);
            }
            // node = left + right, into where it goes: the top into g's
            // expert region, which is zero here (rank_invariant: one chunk,
            // so each region is written once, into the micro-batch's fresh
            // gradient buffer), so g = 0 + top, the accumulation's bits
            for (int k = 0; k < ones; k++) {
                float* out = k < ones - 1 ? v : top ? g + off : wait_at;
                K->add(out, level + (size_t)k * en, v, en);
                if (tree_bf16) K->round_bf16_inplace(out, en);
            }
            if (top && !ones) K->add(g + off, g + off, v, en); // n_src 1: the leaf is the top
        }
    }
    return 0;
}

static int moe_error(const char* what, int layer) {
    fprintf(stderr, "moe: block %d: %s\n", layer, what);
    return -1;
}

/* Starts sending the expert-major rows `rows` (with L->counts) to the
 * experts' owners: the layout of what this rank computes (phase 0 keeps it,
 * phase 1 must get the same: the same routing). Without hooks every expert
 * is here: one chunk, computed in place. */
static int exchange_begin(MoeActs* m, MoeLayer* L, const LlamaParamHooks* hooks, int layer,
                          int phase, const float* rows) {
    const MoeDims* d = &m->d;
    if (!hooks->dispatch) {
        if (d->exchange)
            return moe_error("allocated for an expert exchange (xs shared), but no dispatch hook",
                             layer);
        if (phase == 0) {
            L->xin = rows; // computed in place: no copy at EP = 1
            L->n_recv = (int)(d->N * d->k - L->dropped);
            L->n_local = d->E;
            L->first_expert = 0;
            L->n_chunks = 1;
            memcpy(L->chunk_counts, L->counts, (size_t)d->E * sizeof(int));
            L->chunk_off = L->chunk_counts + d->E;
            L->chunk_off[0] = 0;
            L->chunk_off[1] = L->n_recv;
        }
        return 0;
    }
    int n_chunks = 0, n_recv = 0, n_local = 0, first = 0;
    if (hooks->dispatch(hooks->ctx, layer, phase, rows, L->counts, d->C, &n_chunks, &n_recv,
                        &n_local, &first))
        return moe_error("dispatch failed", layer);
    if (n_chunks < 1 || n_recv < 0 || n_local < 0 || n_local > d->E || first < 0 ||
        first + n_local > d->E)
        return moe_error("dispatch returned an inconsistent layout", layer);
    if (phase == 0) {
        if (layer_reserve(m, L, n_recv, 1) || scratch_reserve(m, n_recv) ||
            chunks_reserve(L, n_chunks, n_local))
            return moe_error("out of memory for the dispatched rows", layer);
        L->n_recv = n_recv;
        L->n_local = n_local;
        L->first_expert = first;
        L->n_chunks = n_chunks;
        L->chunk_off = L->chunk_counts + (size_t)n_chunks * n_local;
        L->chunk_off[0] = 0;
        L->xin = L->xl;
    } else if (n_recv != L->n_recv || n_local != L->n_local || first != L->first_expert ||
               n_chunks != L->n_chunks) {
        return moe_error("the backward dispatch received another layout than the forward", layer);
    }
    return 0;
}

/* Chunk c of the dispatched rows: *recv (rows of c, C). Phase 0 records the
 * chunk's layout and copies its rows into xl (the backward reads them);
 * phase 1 checks the layout is the forward's. */
static int exchange_chunk(MoeLayer* L, const MoeDims* d, const ZrtKernels* K,
                          const LlamaParamHooks* hooks, int layer, int phase, int chunk,
                          const float** recv) {
    int n = 0;
    const int* rc = NULL;
    if (hooks->dispatch_wait(hooks->ctx, layer, phase, chunk, recv, &n, &rc))
        return moe_error("dispatch_wait failed", layer);
    const int o = L->chunk_off[chunk];
    if (n < 0 || o + (long long)n > L->n_recv || (n > 0 && (!*recv || !rc)))
        return moe_error("dispatch_wait returned an inconsistent layout", layer);
    long long total = 0;
    for (int j = 0; j < L->n_local; j++) {
        if (rc[j] < 0) return moe_error("dispatch_wait returned a negative count", layer);
        total += rc[j];
    }
    if (total != n) return moe_error("dispatch_wait's local counts do not sum to its rows", layer);
    if (chunk == L->n_chunks - 1 && o + n != L->n_recv)
        return moe_error("the chunks do not add up to the dispatched rows", layer);
    int* cc = L->chunk_counts + (size_t)chunk * L->n_local;
    if (phase == 0) {
        memcpy(cc, rc, (size_t)L->n_local * sizeof(int));
        L->chunk_off[chunk + 1] = o + n;
        if (n) zdevCheck(zdev_copy_async(K->dev, L->xl + (size_t)o * d->C, *recv, (size_t)n * d->C * sizeof(float), ZDEV_DEVICE_TO_DEVICE, NULL));
    } else if (o + n != L->chunk_off[chunk + 1] ||
               memcmp(rc, cc, (size_t)L->n_local * sizeof(int))) {
        return moe_error("the backward dispatch received another layout than the forward", layer);
    }
    return 0;
}

/* Chunk c's rows by source (rank-invariant runs), or NULL. */
static const int* sources(const LlamaParamHooks* hooks, int layer, int chunk, int* n_src) {
    return hooks->dispatch && hooks->dispatch_sources
               ? hooks->dispatch_sources(hooks->ctx, layer, chunk, n_src)
               : NULL;
}

/* ---------------------------------------------------------------- forward */

int moe_forward(MoeActs* m, int i, const ZrtKernels* K, Weight router, const float* x,
                float* out, const LlamaParamHooks* hooks, int layer, int expert_unit) {
    const MoeDims* d = &m->d;
    MoeLayer* L = &m->layer[i];
    const size_t C = d->C, E = d->E;
    linear_forward(K, m->logits, x, router, d->N, d->C, d->E); // (N, E)
    route(d, L, K, m->logits);
    K->moe_gather(L->xs, x, L->pos, d->N, d->k, d->C);
    for (size_t e = 0; e < E; e++) m->tokens_per_expert[e] += L->routed[e];
    m->dropped += L->dropped;
    K->moe_prob_sum(m->prob_sum_dev, L->probs, d->N, d->E);

    // the exchange, chunk by chunk: while the experts compute chunk c the
    // runtime may already move chunk c+1 in and chunk c-1 out
    if (exchange_begin(m, L, hooks, layer, 0, L->xs)) return -1;
    const void* unit = hooks->acquire(hooks->ctx, expert_unit, 0);
    if (!unit) return moe_error("acquire(experts, forward) returned NULL", layer);
    const Weight p = weight_of(unit, hooks->bf16_units);
    float* yl = hooks->dispatch ? m->yl : L->ys;
    int n_src = 0;
    for (int c = 0; c < L->n_chunks; c++) {
        const float* recv;
        if (hooks->dispatch && exchange_chunk(L, d, K, hooks, layer, 0, c, &recv)) return -1;
        const int* src = sources(hooks, layer, c, &n_src);
        experts_forward(m, L, p, yl, c, src, n_src);
        if (hooks->dispatch &&
            hooks->combine_send(hooks->ctx, layer, 0, c, yl + (size_t)L->chunk_off[c] * C, L->ys))
            return moe_error("combine_send failed", layer);
    }
    hooks->release(hooks->ctx, expert_unit, 0);
    if (hooks->dispatch && hooks->combine(hooks->ctx, layer, 0, L->ys))
        return moe_error("combine failed", layer);

    // out[n] = sum_j w[n, j] * y(n, j), slots in order
    K->moe_combine(out, L->ys, L->w, L->pos, d->N, d->k, d->C);
    return 0;
}

int moe_aux_stats(MoeActs* m, const LlamaParamHooks* hooks) {
    const int E = m->d.E;
    double* st = m->aux_stats;
    // the blocks' probability sums: one read-back per forward
    zdevCheck(zdev_download(m->K->dev, m->prob_sum, m->prob_sum_dev, (size_t)E * sizeof(double)));
    for (int e = 0; e < E; e++) st[e] = (double)m->tokens_per_expert[e];
    memcpy(st + E, m->prob_sum, (size_t)E * sizeof(double));
    st[2 * E] = (double)m->d.N * m->n_layers;
    if (hooks && hooks->aux_reduce && hooks->aux_reduce(hooks->ctx, st, 2 * E + 1)) {
        fprintf(stderr, "moe: aux_reduce failed\n");
        return -1;
    }
    return 0;
}

float moe_aux_loss(MoeActs* m) {
    const int E = m->d.E;
    const double* st = m->aux_stats;
    const double R = st[2 * E];
    double aux = 0.0;
    for (int e = 0; e < E; e++) aux += st[e] / R * (st[E + e] / R);
    return m->aux = (float)(aux * E);
}

/* --------------------------------------------------------------- backward */

int moe_backward(MoeActs* m, int i, const ZrtKernels* K, Weight router, const float* x,
                 const float* dout, float* dx, float* drouter, float aux_coef,
                 const LlamaParamHooks* hooks, int layer, int expert_unit) {
    const MoeDims* d = &m->d;
    MoeLayer* L = &m->layer[i];
    const size_t C = d->C, E = d->E;

    // the weighted sum: dw[n, j] = <dout[n], y(n, j)>, dy(n, j) = w[n, j] dout[n]
    K->moe_combine_backward(m->dw, m->dys, dout, L->ys, L->w, L->pos, d->N, d->k, d->C);

    if (exchange_begin(m, L, hooks, layer, 1, m->dys)) return -1;
    if (d->recompute && swiglu_reserve(m, L, L->n_recv)) // views of the shared buffers
        return moe_error("out of memory for the recomputed expert activations", layer);
    const void* unit = hooks->acquire(hooks->ctx, expert_unit, 1);
    if (!unit) return moe_error("acquire(experts, backward) returned NULL", layer);
    const Weight p = weight_of(unit, hooks->bf16_units);
    float* g = hooks->grad_buffer(hooks->ctx, expert_unit);
    float* dxl = hooks->dispatch ? m->dxl : m->dxs;
    int n_src = 0;
    for (int c = 0; c < L->n_chunks; c++) {
        const float* dyl = m->dys; // no hooks: one chunk, in place
        if (hooks->dispatch && exchange_chunk(L, d, K, hooks, layer, 1, c, &dyl)) return -1;
        const int* src = sources(hooks, layer, c, &n_src);
        if (experts_backward(d, L, m, K, p, g, dyl, dxl, c, src, n_src, hooks->grad_tree_bf16))
            return moe_error("out of memory for the experts' gradient tree", layer);
        if (hooks->dispatch &&
            hooks->combine_send(hooks->ctx, layer, 1, c, dxl + (size_t)L->chunk_off[c] * C, m->dxs))
            return moe_error("combine_send failed", layer);
    }
    hooks->grads_ready(hooks->ctx, expert_unit);
    hooks->release(hooks->ctx, expert_unit, 1);
    if (hooks->dispatch && hooks->combine(hooks->ctx, layer, 1, m->dxs))
        return moe_error("combine failed", layer);

    // dx[n] = sum_j dx(n, j), slots in order; then the router, whose
    // load-balancing term is the same for every row
    K->moe_combine(dx, m->dxs, NULL, L->pos, d->N, d->k, d->C);
    if (!m->aux_uploaded) { // the same for every block: once per backward, no wait
        // (aux_host is next written by the next step's backward, after its
        // forward's downloads have waited for the stream and this copy)
        const double R = (double)d->N * m->n_layers, Ra = m->aux_stats[2 * E];
        for (size_t e = 0; e < E; e++)
            m->aux_host[e] = (float)(aux_coef * (double)E * m->aux_stats[e] / (Ra * R));
        zdevCheck(zdev_copy_async(K->dev, m->aux_dev, m->aux_host, E * sizeof(float),
                                  ZDEV_HOST_TO_DEVICE, NULL));
        m->aux_uploaded = 1;
    }
    float* dlogits = m->logits; // (N, E), free again after the forward
    K->moe_router_backward(dlogits, L->probs, L->sel, L->w, m->dw, m->aux_dev, d->N, d->E,
                           d->k, d->norm_topk);
    linear_backward(K, dx, drouter, dlogits, x, router, d->N, d->C, d->E, 1);
    return 0;
}
