/*
 * scheduler.c — the overlap scheduler: the one file that answers "when".
 *
 * One training step, two blocks, prefetch depth 1 (A = acquire, R = release,
 * G = grad buffer, D = grads ready; AG/RS the collectives the plan issues on
 * their own communicators, beneath the compute that hides them):
 *
 *   compute  |A0 emb|A1 blk1|A2 blk2|A0 head|A0b head|A2b blk2  D2|A1b blk1  D1|emb D0|opt|
 *   comm_ag  [AG 0]  [AG 1][AG 2]            [AG 2b]  [AG 1b]
 *   comm_rs                                                    [RS 2]      [RS 1]  [RS 0]
 *              ^ waits: AG 0 (nothing to hide it), then each AG just before its A
 *
 * The planner walks the model's hook events of the whole step (every
 * micro-batch, forward then backward, the MoE blocks' expert units and
 * exchanges included: sched_model_order, the order models/llama.h
 * documents) and decides, from sizes alone:
 *
 *   - which acquisitions need a gather: a unit is held from the gather its
 *     first acquisition waits for to its drop (release in backward, release
 *     in forward with reshard_after_forward; a tied model's unit "outer"
 *     (embedding and head) stays for the whole step, an untied model's
 *     "outer" (the embedding: its backward reads no parameters) goes after
 *     its forward and its "head" after the backward's first hold), so later
 *     acquisitions of a held unit are free;
 *   - when each gather is issued: in need order (a communicator runs its
 *     calls in issue order, so issuing out of order gains nothing), as early
 *     as possible after the previous hold of its unit was dropped, at most
 *     `prefetch_depth` gathers ahead of the one being waited for, and only
 *     while the bytes alive until it is needed stay under
 *     `max_inflight_bytes`;
 *   - reduce-scatters are issued at grads_ready (the moment a unit's
 *     gradient is final) and retired (waited, added into the shard, their
 *     buffers freed) in issue order: once more than
 *     `max_reduces_in_flight` are in flight (the oldest first), before the
 *     same unit's next gradient buffer (the next micro-batch's) is made,
 *     when the byte bound needs room, else at the end of the micro-batch's
 *     backward. Without the
 *     count bound, gradient accumulation would keep every micro-batch's
 *     full gradients alive until the step's end. Issue-order retirement keeps the fp32 sums into each
 *     shard in micro-batch order whatever the timing.
 *
 * Waits sit just before first use: an acquisition waits for its own gather
 * only. With `overlap: false` nothing is issued ahead and each
 * reduce-scatter is waited at once: the blocking reference every overlap
 * setting must equal bit for bit (a gather moves bytes, a reduce-scatter
 * sums in ZipCCL's canonical order, and shards are summed in issue order, so
 * timing never reaches the numbers).
 *
 * The executor checks at every hook that the model's call is the plan's
 * next event, that a unit is read only after its gather completed, that no
 * buffer goes back to the pool while a collective still reads or writes it,
 * and that the bytes alive stay under the bound. It reuses buffers from a
 * pool instead of allocating per call (a page-faulting malloc per gathered
 * unit was a visible part of small steps), and it records each call:
 * ZipCCL's counters, read at every hook, give each call's bytes, codec time
 * and duration; a communicator runs its calls one at a time in issue order,
 * so a call starts when it was issued or when its predecessor ended,
 * whichever is later, which is the timeline of --trace. Two calls that
 * finish between two readings share one reading, split by size (counted).
 *
 * A MoE block's expert exchange comes in moe.overlap_chunks chunks, each an
 * AlltoAllv each way on the exchange's own communicator (events DISP,
 * then XWAIT c / XSEND c per chunk, then COMB): with overlap every chunk's
 * dispatch is issued at DISP, chunk c is waited just before its experts
 * run, and its combine goes out at once and is waited at COMB:
 *
 *   compute   |route|A x|  experts c0 |  experts c1 |  experts c2 |REL|sum|
 *   comm_a2a  [d0][d1][d2]............[c0]..........[c1]..........[c2]
 *                   ^w d0 (exposed)     ^ d1, d2 arrived under c0's compute
 *
 * Left out: reordering compute, adaptive plans, a bound on the exchange's
 * bytes in flight (a block's chunks are all issued at once).
 */
#include "scheduler.h"

#include <errno.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "expert.h"
#include "kernels.h"
#include "log.h"

/* ---- the model's order ---------------------------------------------------- */

static void put(SchedEvent* out, int max, int* n, int type, int unit, int phase) {
    if (*n < max) out[*n] = (SchedEvent){.type = (uint8_t)type, .phase = (uint8_t)phase,
                                         .unit = unit, .gather = -1, .rs = -1};
    (*n)++;
}

static void put_chunks(SchedEvent* out, int max, int* n, int layer, int phase, int chunks) {
    for (int c = 0; c < chunks; c++) {
        if (*n < max) out[*n] = (SchedEvent){.type = EV_XWAIT, .phase = (uint8_t)phase,
                                             .unit = layer, .chunk = c, .gather = -1, .rs = -1};
        (*n)++;
        if (*n < max) out[*n] = (SchedEvent){.type = EV_XSEND, .phase = (uint8_t)phase,
                                             .unit = layer, .chunk = c, .gather = -1, .rs = -1};
        (*n)++;
    }
}

int sched_model_order(const LlamaConfig* m, int ep_chunks, int backward, SchedEvent* out, int max) {
    int n = 0;
    const int ep_hooks = ep_chunks > 0;
    const int L = m->n_layers;
    put(out, max, &n, EV_ACQ, 0, 0); /* embedding */
    put(out, max, &n, EV_REL, 0, 0);
    for (int l = 0; l < L; l++) {
        put(out, max, &n, EV_ACQ, 1 + l, 0);
        const int xu = llama_expert_unit(m, l);
        if (xu > 0) { /* the experts, acquired inside the block after the dispatch */
            if (ep_hooks) put(out, max, &n, EV_DISP, l, 0);
            put(out, max, &n, EV_ACQ, xu, 0);
            put_chunks(out, max, &n, l, 0, ep_chunks);
            put(out, max, &n, EV_REL, xu, 0);
            if (ep_hooks) put(out, max, &n, EV_COMB, l, 0);
        }
        put(out, max, &n, EV_REL, 1 + l, 0);
    }
    const int hu = llama_head_unit(m); /* the final norm and the head */
    if (!backward) {
        put(out, max, &n, EV_ACQ, hu, 0);
        put(out, max, &n, EV_REL, hu, 0);
        return n;
    }
    put(out, max, &n, EV_ACQ, hu, 1); /* the head's forward and backward, one hold */
    put(out, max, &n, EV_GBUF, hu, 1);
    if (hu != 0) put(out, max, &n, EV_GRDY, hu, 1);
    put(out, max, &n, EV_REL, hu, 1);
    for (int l = L - 1; l >= 0; l--) {
        put(out, max, &n, EV_ACQ, 1 + l, 1);
        put(out, max, &n, EV_GBUF, 1 + l, 1);
        const int xu = llama_expert_unit(m, l);
        if (xu > 0) {
            if (ep_hooks) put(out, max, &n, EV_DISP, l, 1);
            put(out, max, &n, EV_ACQ, xu, 1);
            put(out, max, &n, EV_GBUF, xu, 1);
            put_chunks(out, max, &n, l, 1, ep_chunks);
            put(out, max, &n, EV_GRDY, xu, 1);
            put(out, max, &n, EV_REL, xu, 1);
            if (ep_hooks) put(out, max, &n, EV_COMB, l, 1);
        }
        put(out, max, &n, EV_GRDY, 1 + l, 1);
        put(out, max, &n, EV_REL, 1 + l, 1);
    }
    put(out, max, &n, EV_GBUF, 0, 1); /* embedding backward: no acquire */
    put(out, max, &n, EV_GRDY, 0, 1);
    return n;
}

static const char* ev_name(int t) {
    static const char* const n[] = {"acquire", "release", "grad_buffer", "grads_ready", "dispatch",
                                    "combine", "dispatch_wait", "combine_send"};
    return t >= 0 && t <= EV_XSEND ? n[t] : "?";
}

/* ---- the planner -------------------------------------------------------------- */

#define GT(sp, u) ((sp)->gtrans ? (sp)->gtrans[u] : 0.0)
#define RF(sp, u) ((sp)->rflight ? (sp)->rflight[u] : (sp)->rbytes[u])

/* Bytes of the gathers issued ahead (index needed .. issued-1) still to be
 * needed after event t. */
static double ahead_at(const SchedPlan* p, const SchedParams* sp, int needed, int issued, int t) {
    double a = 0;
    for (int g = needed; g < issued; g++)
        if (p->ag[g].need > t) a += sp->gbytes[p->ag[g].unit] + GT(sp, p->ag[g].unit);
    return a;
}

/* Decide issue and retire points for one setting; returns the peak bytes.
 * during[t]: bytes of held units and unsent gradients while event t runs,
 * after[t]: once it is done (a dropped unit gone, a sent gradient moved to
 * the reduce-scatters in flight). */
static double simulate(SchedPlan* p, const SchedParams* sp, const double* during,
                       const double* after, const int* prev_drop, int depth, int overlap,
                       double M) {
    int issued = 0, needed = 0, rs_issued = 0, retired = 0;
    double rs_bytes = 0, peak = 0;
    for (int g = 0; g < p->n_ag; g++) p->ag[g].issue = -2;
    for (int t = 0; t < p->n_ev; t++) {
        SchedEvent* e = &p->ev[t];
        if (e->type == EV_ACQ && e->gather >= 0) {
            if (e->gather >= issued) { /* forced: nothing issued it earlier */
                p->ag[e->gather].issue = t - 1;
                issued = e->gather + 1;
            }
            needed = e->gather + 1;
        }
        /* a unit's new gradient buffer waits for the reduce-scatter of its
         * previous one (the micro-batch before): two full gradients of one
         * unit are never alive at once */
        if (e->type == EV_GBUF && e->gbuf_new)
            for (int j = rs_issued - 1; j >= retired; j--)
                if (p->rs_unit[j] == e->unit) {
                    while (retired <= j) rs_bytes -= RF(sp, p->rs_unit[retired++]);
                    break;
                }
        double mem = during[t] + ahead_at(p, sp, needed, issued, t) + rs_bytes;
        while (M > 0 && mem > M && retired < rs_issued) {
            rs_bytes -= RF(sp, p->rs_unit[retired]);
            mem -= RF(sp, p->rs_unit[retired++]);
        }
        e->ag_pre = issued;
        e->rs_pre = retired;
        if (mem > peak) peak = mem;
        if (e->type == EV_GRDY) rs_bytes += RF(sp, p->rs_unit[rs_issued++]);
        /* the count bound: the oldest reduce-scatters retire (in issue
         * order) once more than max_rs are in flight */
        while (overlap && sp->max_rs > 0 && rs_issued - retired > sp->max_rs)
            rs_bytes -= RF(sp, p->rs_unit[retired++]);
        /* a micro-batch's backward ends by waiting for its reduce-scatters
         * (FSDP's post-backward wait): none holds a full gradient across
         * the next micro-batch's forward (the embedding's, issued last, did
         * until the head's came, with the head's gather and gradient) */
        if (!overlap || (t + 1 < p->n_ev && p->ev[t + 1].micro != e->micro)) {
            rs_bytes = 0;
            retired = rs_issued;
        }
        /* prefetch: the next gathers, in order, while they are few enough
         * ahead, their unit's previous hold is over, and the bytes alive
         * until each is needed fit the bound (reduce-scatters in flight can
         * always be retired to make room, so they do not count here) */
        while (overlap && issued < p->n_ag && issued - needed < depth &&
               prev_drop[issued] <= t) {
            int fits = 1;
            for (int t2 = t; M > 0 && fits && t2 < p->ag[issued].need; t2++)
                fits = (t2 == t ? after[t] : during[t2]) +
                           ahead_at(p, sp, needed, issued + 1, t2) <= M;
            if (!fits) break;
            p->ag[issued++].issue = t;
        }
        mem = after[t] + ahead_at(p, sp, needed, issued, t) + rs_bytes;
        while (M > 0 && mem > M && retired < rs_issued) {
            rs_bytes -= RF(sp, p->rs_unit[retired]);
            mem -= RF(sp, p->rs_unit[retired++]);
        }
        if (mem > peak) peak = mem;
        e->ag_post = issued;
        e->rs_post = retired;
    }
    return peak;
}

int sched_plan_build(SchedPlan* p, const SchedParams* sp, char* err, size_t errlen) {
    memset(p, 0, sizeof *p);
    const int per = sched_model_order(sp->model, sp->ep_chunks, sp->backward, NULL, 0);
    p->n_ev = per * sp->micro;
    p->ev = zrt_calloc((size_t)p->n_ev + 1, sizeof *p->ev, "plan events");
    for (int a = 0; a < sp->micro; a++) {
        sched_model_order(sp->model, sp->ep_chunks, sp->backward, p->ev + (size_t)a * per, per);
        for (int i = 0; i < per; i++) p->ev[(size_t)a * per + i].micro = (int16_t)a;
    }
    p->ag = zrt_calloc((size_t)p->n_ev + 1, sizeof *p->ag, "plan gathers");
    p->rs_unit = zrt_calloc((size_t)p->n_ev + 1, sizeof *p->rs_unit, "plan reduce-scatters");
    int* held = zrt_calloc((size_t)sp->n_units, sizeof(int), "plan");
    int* gb_live = zrt_calloc((size_t)sp->n_units, sizeof(int), "plan");
    int* last_drop = zrt_malloc((size_t)sp->n_units * sizeof(int), "plan");
    int* prev_drop = zrt_malloc(((size_t)p->n_ev + 1) * sizeof(int), "plan");
    double* during = zrt_calloc((size_t)p->n_ev + 1, sizeof(double), "plan");
    double* after = zrt_calloc((size_t)p->n_ev + 1, sizeof(double), "plan");
    for (int u = 0; u < sp->n_units; u++) last_drop[u] = -1;
    double cur = 0;
    for (int t = 0; t < p->n_ev; t++) {
        SchedEvent* e = &p->ev[t];
        const int u = e->unit;
        if (e->type == EV_ACQ && !held[u]) {
            e->gather = p->n_ag;
            p->ag[p->n_ag] = (SchedGather){.unit = u, .need = t, .issue = -2};
            prev_drop[p->n_ag++] = last_drop[u];
            held[u] = 1;
            cur += sp->gbytes[u];
        } else if (e->type == EV_GBUF && !gb_live[u]) {
            e->gbuf_new = 1;
            gb_live[u] = 1;
            cur += sp->rbytes[u];
        }
        /* momentary: the gather's receive buffer while it is decoded, the
         * gradient beside its bf16 copy while it is cast */
        during[t] = cur + (e->type == EV_ACQ && e->gather >= 0 ? GT(sp, u) : 0) +
                    (e->type == EV_GRDY && sp->rflight ? sp->rflight[u] : 0);
        /* unit 0 of a tied model (embedding and head) stays the whole step;
         * an untied model's unit 0 (the embedding) goes at its only release */
        const int drop = u != 0 ? e->phase == 1 || sp->reshard : !sp->model->tie_embeddings;
        if (e->type == EV_REL && drop) {
            e->drop = 1;
            held[u] = 0;
            last_drop[u] = t;
            cur -= sp->gbytes[u];
        } else if (e->type == EV_GRDY) {
            e->rs = p->n_rs;
            p->rs_unit[p->n_rs++] = u;
            gb_live[u] = 0;
            cur -= sp->rbytes[u]; /* from here on a reduce-scatter in flight */
        }
        after[t] = cur;
    }
    p->floor_bytes = simulate(p, sp, during, after, prev_drop, 0, 0, 0);
    int rc = 0;
    if (sp->max_bytes > 0 && sp->max_bytes < p->floor_bytes) {
        int big = 0;
        for (int u = 1; u < sp->n_units; u++)
            if (sp->gbytes[u] + sp->rbytes[u] > sp->gbytes[big] + sp->rbytes[big]) big = u;
        char a[32], b[32], c[32];
        rc = zrt_errf(err, errlen,
                      "key 'parallelism.max_inflight_bytes': %.0f (%s) is below the %.0f bytes "
                      "(%s) the step needs with nothing prefetched (the units held at once; the "
                      "largest, unit %d, has %s gathered + gradient); raise it, or 0 for no bound",
                      sp->max_bytes, zrt_fmt_bytes(sp->max_bytes, a, sizeof a), p->floor_bytes,
                      zrt_fmt_bytes(p->floor_bytes, b, sizeof b), big,
                      zrt_fmt_bytes(sp->gbytes[big] + sp->rbytes[big], c, sizeof c));
    } else {
        const int depth = sp->overlap ? sp->depth : 0;
        p->peak_bytes = simulate(p, sp, during, after, prev_drop, depth, sp->overlap, sp->max_bytes);
    }
    free(held);
    free(gb_live);
    free(last_drop);
    free(prev_drop);
    free(during);
    free(after);
    if (rc) sched_plan_free(p);
    return rc;
}

void sched_plan_free(SchedPlan* p) {
    free(p->ev);
    free(p->ag);
    free(p->rs_unit);
    memset(p, 0, sizeof *p);
}

void sched_unit_bytes(const TrainConfig* cfg, int nranks, int u, SchedUnitBytes* b) {
    const LlamaConfig* m = &cfg->model;
    const int EP = m->n_experts > 0 ? cfg->parallel.ep : 1;
    const int experts = llama_unit_is_experts(m, u) && EP > 1;
    const size_t G = (size_t)(experts ? nranks / EP : nranks);
    const size_t numel = llama_unit_numel(m, u) / (experts ? (size_t)EP : 1);
    const double padded = (double)fsdp_pad(numel, G, cfg->train.rank_invariant),
                 shard = padded / (double)G;
    const int p16 = cfg->comm.param_dtype == zipcclBfloat16,
              r16 = cfg->comm.reduce_dtype == zipcclBfloat16;
    b->held = padded * (p16 ? 2 : 4); /* the unit in param_dtype, as gathered and read */
    b->trans = p16 ? shard * 2 : 0;   /* the bf16 send shard */
    b->acc = padded * 4;                         /* the fp32 gradient */
    /* sent, received (rank_invariant: every rank's block, fsdp_recv_count) */
    const double recv = cfg->train.rank_invariant ? padded : shard;
    b->flight = r16 ? padded * 2 + recv * 2 : padded * 4 + recv * 4;
    if (G == 1) { /* a local unit (fsdp_unit_local): no collective */
        b->held = p16 ? padded * 2 : 0; /* its bf16 cast, or the shard itself */
        b->trans = 0;
        b->flight = 0; /* the gradient goes into the shard when it is ready */
    }
}

static void params_for(SchedParams* sp, const TrainConfig* cfg, int backward) {
    sp->model = &cfg->model;
    sp->ep_chunks = cfg->model.n_experts > 0 && cfg->parallel.ep > 1 ? cfg->moe.overlap_chunks : 0;
    sp->micro = backward ? cfg->data.grad_accum : 1;
    sp->backward = backward;
    sp->depth = cfg->parallel.prefetch ? cfg->parallel.prefetch_depth : 0;
    sp->max_bytes = (double)cfg->parallel.max_inflight_bytes;
    sp->max_rs = cfg->parallel.max_reduces_in_flight;
    sp->overlap = cfg->parallel.overlap;
    sp->reshard = cfg->parallel.reshard_after_forward;
}

/* Four arrays of n in one allocation: held | trans | acc | flight. */
static double* unit_sizes(const TrainConfig* cfg, int nranks, int n) {
    double* a = zrt_malloc(4 * (size_t)n * sizeof(double), "unit sizes");
    for (int u = 0; u < n; u++) {
        SchedUnitBytes b;
        sched_unit_bytes(cfg, nranks, u, &b);
        a[u] = b.held, a[n + u] = b.trans, a[2 * n + u] = b.acc, a[3 * n + u] = b.flight;
    }
    return a;
}

int sched_plan_for_config(const TrainConfig* cfg, int nranks, SchedPlan* p, char* err, size_t errlen) {
    const int n = llama_num_units(&cfg->model);
    double* a = unit_sizes(cfg, nranks, n);
    SchedParams sp = {.n_units = n, .gbytes = a, .gtrans = a + n, .rbytes = a + 2 * n,
                      .rflight = a + 3 * n};
    params_for(&sp, cfg, 1);
    const int rc = sched_plan_build(p, &sp, err, errlen);
    free(a);
    return rc;
}

int sched_check_config(const TrainConfig* cfg, int nranks, double* peak, char* err, size_t errlen) {
    SchedPlan p;
    const int rc = sched_plan_for_config(cfg, nranks, &p, err, errlen);
    if (!rc) {
        *peak = p.peak_bytes;
        sched_plan_free(&p);
    }
    return rc;
}

/* ---- the buffer pool ---------------------------------------------------------- */

/* Buffers come back to the pool and are handed out again to a request of
 * at most their size and at least half of it (blocks are alike, so this
 * reuses nearly everything); `busy` marks a buffer a collective is reading
 * or writing, and giving such a buffer back is a fatal error. The pool
 * holds at most `limit` bytes (the plan's peak) where it can: at the bound
 * a request nothing fits takes a larger idle buffer if there is one, else
 * frees idle buffers, the largest first, before allocating, so buffers of
 * sizes no later request matches do not pile up beyond the plan (a unit's
 * shape mix made them 20-70% more than the peak). */
typedef struct {
    void* p;
    size_t cap;
    int used, busy;
} PoolBuf;

typedef struct {
    PoolBuf* b;
    int n, cap;
    const ZrtKernels* K; /* set: that backend's memory (the device pool) */
    double total, limit; /* bytes held; the bound (0: none) */
} Pool;

static void pool_release(Pool* pl, PoolBuf* b) {
    if (pl->K) zdev_free(pl->K->dev, b->p);
    else free(b->p);
    pl->total -= (double)b->cap;
    *b = pl->b[--pl->n];
}

static PoolBuf* pool_find(Pool* pl, const void* p) {
    for (int i = 0; i < pl->n; i++)
        if (pl->b[i].p == p) return &pl->b[i];
    return NULL;
}

static void* pool_get(Pool* pl, size_t bytes, int zero) {
    if (bytes == 0) bytes = 1;
    PoolBuf* best = NULL;
    for (int i = 0; i < pl->n; i++) {
        PoolBuf* b = &pl->b[i];
        if (!b->used && b->cap >= bytes && b->cap / 2 <= bytes && (!best || b->cap < best->cap))
            best = b;
    }
    /* At the bound, an idle buffer larger than twice the request serves it
     * before any is freed: a device allocation and free in a steady step
     * cost more than the bytes (cudaFree waits for the device). */
    if (!best && pl->limit > 0 && pl->total + (double)bytes > pl->limit)
        for (int i = 0; i < pl->n; i++) {
            PoolBuf* b = &pl->b[i];
            if (!b->used && b->cap >= bytes && (!best || b->cap < best->cap)) best = b;
        }
    while (!best && pl->limit > 0 && pl->total + (double)bytes > pl->limit) {
        PoolBuf* idle = NULL;
        for (int i = 0; i < pl->n; i++)
            if (!pl->b[i].used && (!idle || pl->b[i].cap > idle->cap)) idle = &pl->b[i];
        if (!idle) break;
        pool_release(pl, idle);
    }
    if (!best) {
        if (pl->n == pl->cap) {
            pl->cap = pl->cap ? 2 * pl->cap : 64;
            PoolBuf* nb = realloc(pl->b, (size_t)pl->cap * sizeof *nb);
            trainCheck(nb, "out of memory for the buffer pool");
            pl->b = nb;
        }
        void* p = pl->K ? zdev_alloc(pl->K->dev, bytes) : zrt_malloc(bytes, "scheduler buffer");
        trainCheck(p, "out of %s memory: %zu bytes for a gathered unit or a gradient "
                      "(runtime.device: see the memory estimate at start)",
                   pl->K ? pl->K->name : "host", bytes);
        best = &pl->b[pl->n++];
        *best = (PoolBuf){.p = p, .cap = bytes};
        pl->total += (double)bytes;
    }
    best->used = 1;
    best->busy = 0;
    if (zero && pl->K) zdevCheck(zdev_memset_async(pl->K->dev, best->p, 0, bytes, NULL));
    else if (zero) memset(best->p, 0, bytes);
    return best->p;
}

static void pool_busy(Pool* pl, const void* p, int busy) {
    PoolBuf* b = pool_find(pl, p);
    trainCheck(b && b->used, "scheduler: a collective's buffer is not one of the pool's");
    b->busy = busy;
}

static void pool_put(Pool* pl, void* p, const char* what, const char* unit) {
    if (!p) return;
    PoolBuf* b = pool_find(pl, p);
    trainCheck(b && b->used, "scheduler: %s of %s returned twice", what, unit);
    trainCheck(!b->busy, "scheduler: %s of %s returned while a collective still uses it", what,
               unit);
    b->used = 0;
}

static void pool_free(Pool* pl) {
    while (pl->n > 0) pool_release(pl, &pl->b[pl->n - 1]);
    free(pl->b);
    memset(pl, 0, sizeof *pl);
}

/* ---- the executor ------------------------------------------------------------- */

enum { SLOT_AG = 0, SLOT_RS, SLOT_AGX, SLOT_RSX, SLOT_A2A, NSLOTS };
static const char* const kSlotName[NSLOTS] = {"comm_ag", "comm_rs", "comm_ag_x", "comm_rs_x",
                                              "comm_a2a"};

typedef struct {
    int unit, kind, slot, micro, phase, strat_req;
    double weight;                 /* elements x size: how a shared reading splits */
    double t_issue, t_start, t_end;
    uint64_t raw, wire;
    double codec_s, total_s;
    int strategy, codec, shared, accounted;
    int chunk, xdir; /* alltoall: the chunk, and 1 dispatch / 2 combine */
} CallRec;

typedef struct {
    zipcclComm_t comm;
    zipcclCollKind_t kind;
    zipcclCounters_t last;
    int* q;        /* records waiting for their counters, issue order */
    int qh, qt, qcap;
    double last_end;
} Slot;

typedef struct {
    int state; /* 0 free, 1 gather in flight, 2 gathered */
    int gather;
    /* the gathered unit in param_dtype: the gather receives into it and the
     * model reads it as it is (a bf16 one too: LlamaParamHooks.bf16_units),
     * in the model's pool (the device pool with a device backend) */
    void* unit;
    int pooled; /* unit is the pool's (not: an fp32 local unit's shard itself) */
    void* send; /* the shard as sent: its bf16 cast (bf16 gathers) */
    zipcclRequest_t req;
    int rec;
    float* gbuf;
    /* with a device backend (sched_set_backend): the model's copy of the
     * unit's gradient, in the device pool */
    float* dgbuf;
    double t_acq;
    void* ev_acq; /* --trace on a device: the compute stream at the acquisition */
} SUnit;

/* --trace on a device: one unit's compute on the device, between the
 * events recorded on the compute stream at its acquisition and release
 * (kind -1), or one of its collectives on its communicator's stream, between
 * the events ZipCCL recorded when the work started and ended
 * (zipcclWaitSpan; kind: PLAN_AG, PLAN_RS, PLAN_A2A with its chunk and
 * direction, 1 dispatch / 2 combine) */
typedef struct {
    void *a, *b;
    int unit, phase, micro, kind, chunk, xdir;
} DevSpan;

typedef struct {
    int unit, rec;
    float* gfull;
    uint16_t* g16;
    void* recv;
    zipcclRequest_t req;
} SReduce;

struct Sched {
    Fsdp* f;
    const TrainConfig* cfg;
    SchedPlan train, eval;
    const SchedPlan* p;
    int cur, micro, ag_issued, rs_issued, rs_retired;
    SUnit* u;
    SReduce* rs;
    Pool pool;
    Pool dpool; /* device buffers (dpool.K set): the model's side of each unit */
    double *gb, *gt, *rb, *rf; /* per unit: SchedUnitBytes' held, trans, acc, flight */
    double live, max_bytes;
    double exposed[SCHED_NX];
    Slot slot[NSLOTS];
    CallRec* rec;
    int n_rec, cap_rec;
    int x_chunks; /* chunks of the expert exchange in flight */
    /* --trace on a device: the step's reference event (recorded with the
     * device idle, at host time dref_t) and its compute spans */
    void* dref;
    double dref_t;
    DevSpan* dspan;
    int n_dspan, cap_dspan;
    int trace;
    char* tb;
    size_t tlen, tcap;
    double t0;
};

/* The pool of the model's memory: the device's with a device backend. */
static Pool* model_pool(Sched* s) { return s->dpool.K ? &s->dpool : &s->pool; }

static void tprintf(Sched* s, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void tprintf(Sched* s, const char* fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(s->tb + s->tlen, s->tcap - s->tlen, fmt, ap);
        va_end(ap);
        if (n >= 0 && s->tlen + (size_t)n < s->tcap) {
            s->tlen += (size_t)n;
            return;
        }
        s->tcap = s->tcap ? 2 * s->tcap + (size_t)n : 1 << 16;
        s->tb = realloc(s->tb, s->tcap);
        trainCheck(s->tb, "out of memory for the trace");
    }
}

static double us(const Sched* s, double t) { return (t - s->t0) * 1e6; }

void sched_trace_span(Sched* s, const char* name, double t0, double t1) {
    if (!s->trace) return;
    tprintf(s, ",\n{\"name\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": 0, \"ts\": %.1f, "
               "\"dur\": %.1f}",
            name, s->f->rank, us(s, t0), (t1 - t0) * 1e6);
}

static int slot_of(const Sched* s, int u, int kind) {
    if (kind == PLAN_A2A) return SLOT_A2A;
    const int x = s->f->units[u].group;
    return kind == PLAN_AG ? (x ? SLOT_AGX : SLOT_AG) : (x ? SLOT_RSX : SLOT_RS);
}

static int new_rec(Sched* s, int u, int kind, double weight) {
    if (s->n_rec == s->cap_rec) {
        s->cap_rec = s->cap_rec ? 2 * s->cap_rec : 256;
        CallRec* r = realloc(s->rec, (size_t)s->cap_rec * sizeof *r);
        trainCheck(r, "out of memory for the call records");
        s->rec = r;
    }
    CallRec* r = &s->rec[s->n_rec];
    const PlanEntry* e = &s->f->plan.e[u][kind];
    *r = (CallRec){.unit = u, .kind = kind, .slot = slot_of(s, u, kind), .micro = s->micro,
                   .phase = s->cur < s->p->n_ev ? s->p->ev[s->cur].phase : 0,
                   .strat_req = e->cfg.strategy, .weight = weight, .t_issue = zrt_now()};
    Slot* sl = &s->slot[r->slot];
    if (sl->qt == sl->qcap) {
        sl->qcap = sl->qcap ? 2 * sl->qcap : 64;
        int* q = realloc(sl->q, (size_t)sl->qcap * sizeof *q);
        trainCheck(q, "out of memory for the call records");
        sl->q = q;
    }
    sl->q[sl->qt++] = s->n_rec;
    return s->n_rec++;
}

/* Read a communicator's counters and hand what completed since the last
 * reading to the oldest waiting records. */
static void poll_slot(Sched* s, int k) {
    Slot* sl = &s->slot[k];
    if (!sl->comm || sl->qh == sl->qt) return;
    zipcclCounters_t c;
    fsdp_comm_counters(s->f, sl->comm, sl->kind, &c);
    int d = (int)(c.calls - sl->last.calls);
    if (d <= 0) return;
    if (d > sl->qt - sl->qh) d = sl->qt - sl->qh; /* calls of no record (checkpoint gathers) */
    const double raw = (double)(c.rawBytes - sl->last.rawBytes),
                 wire = (double)(c.wireBytes - sl->last.wireBytes),
                 codec = c.codecSeconds - sl->last.codecSeconds,
                 total = c.totalSeconds - sl->last.totalSeconds;
    uint64_t bys[5], byc[ZIPCCL_NCODECS];
    for (int i = 0; i < 5; i++) bys[i] = c.byStrategy[i] - sl->last.byStrategy[i];
    for (int i = 0; i < ZIPCCL_NCODECS; i++) byc[i] = c.byCodec[i] - sl->last.byCodec[i];
    double wsum = 0, wcomp = 0, raw_plain = 0;
    for (int i = 0; i < d; i++) wsum += s->rec[sl->q[sl->qh + i]].weight;
    /* Split: a raw or native call's wire bytes are its raw bytes; the rest
     * of the wire and all the codec time belong to the compressing calls. */
    for (int i = 0; i < d; i++) {
        CallRec* r = &s->rec[sl->q[sl->qh + i]];
        if (d == 1) r->strategy = 0;
        else if (r->strat_req != zipcclStrategyAuto && bys[r->strat_req] > 0) {
            r->strategy = r->strat_req;
            bys[r->strat_req]--;
        } else r->strategy = -1;
    }
    for (int i = 0; i < d; i++) { /* auto calls of a shared reading: what is left, in order */
        CallRec* r = &s->rec[sl->q[sl->qh + i]];
        for (int k2 = 1; r->strategy < 0 && k2 < 5; k2++)
            if (bys[k2] > 0) {
                r->strategy = k2;
                bys[k2]--;
            }
        if (r->strategy < 0) r->strategy = zipcclStrategyRaw;
        if (d > 1) {
            const double rr = wsum > 0 ? raw * r->weight / wsum : 0;
            if (r->strategy == zipcclStrategyCompressed) wcomp += r->weight;
            else raw_plain += rr;
        }
    }
    for (int i = 0; i < d; i++) {
        CallRec* r = &s->rec[sl->q[sl->qh + i]];
        if (d == 1) {
            for (int k2 = 1; k2 < 5; k2++)
                if (bys[k2]) r->strategy = k2;
            r->raw = (uint64_t)raw;
            r->wire = (uint64_t)wire;
            r->codec_s = codec;
            r->total_s = total;
            r->codec = -1;
            for (int k2 = 0; k2 < ZIPCCL_NCODECS; k2++)
                if (byc[k2]) r->codec = k2;
        } else {
            const double share = wsum > 0 ? r->weight / wsum : 1.0 / d;
            r->raw = (uint64_t)(raw * share);
            r->total_s = total * share;
            r->shared = 1;
            r->codec = -1;
            if (r->strategy == zipcclStrategyCompressed) {
                const double cs = wcomp > 0 ? r->weight / wcomp : 0;
                r->wire = (uint64_t)((wire - raw_plain) * cs);
                r->codec_s = codec * cs;
                for (int k2 = 0; k2 < ZIPCCL_NCODECS && r->codec < 0; k2++)
                    if (byc[k2]) {
                        r->codec = k2;
                        byc[k2]--;
                    }
            } else {
                r->wire = r->raw;
            }
        }
        r->t_start = r->t_issue > sl->last_end ? r->t_issue : sl->last_end;
        r->t_end = r->t_start + r->total_s;
        sl->last_end = r->t_end;
        r->accounted = 1;
        PlanStats* st = &s->f->plan.st[r->unit][r->kind];
        st->calls++;
        st->by_strategy[r->strategy]++;
        if (r->codec >= 0) st->by_codec[r->codec]++;
        st->raw += r->raw;
        st->wire += r->wire;
        st->codec_s += r->codec_s;
        st->total_s += r->total_s;
        st->shared += (uint64_t)r->shared;
    }
    sl->qh += d;
    sl->last = c;
    if (sl->qh == sl->qt) sl->qh = sl->qt = 0;
}

static void poll_all(Sched* s) {
    for (int k = 0; k < NSLOTS; k++) poll_slot(s, k);
}

static void push_dspan(Sched* s, DevSpan d) {
    if (s->n_dspan == s->cap_dspan) {
        s->cap_dspan = s->cap_dspan ? 2 * s->cap_dspan : 64;
        DevSpan* p = realloc(s->dspan, (size_t)s->cap_dspan * sizeof *p);
        trainCheck(p, "out of memory for the trace");
        s->dspan = p;
    }
    s->dspan[s->n_dspan++] = d;
}

/* The expert exchange's device spans (Expert.on_span). */
static void expert_span(void* ctx, void* a, void* b, int layer, int phase, int chunk, int dir) {
    Sched* s = ctx;
    push_dspan(s, (DevSpan){a, b, 1 + layer, phase, s->micro, PLAN_A2A, chunk, dir});
}

/* The compute thread waits on request *req of unit u, kind k.  Tracing on a
 * device, the call's device span comes with it (ZipCCL's timing events on
 * its communicator's stream, made by the device's own event type). */
static void wait_req(Sched* s, zipcclRequest_t* req, int u, int kind, int xk) {
    if (!*req) return; /* a local unit's: no collective (fsdp_unit_local) */
    const double t0 = zrt_now();
    if (s->trace && s->dpool.K) {
        void *a = NULL, *b = NULL;
        zipcclCheck(zipcclWaitSpan(*req, &a, &b));
        if (a) push_dspan(s, (DevSpan){a, b, u, 0, s->micro, kind, 0, 0}); /* both or neither */
    } else {
        zipcclCheck(zipcclWait(*req));
    }
    *req = NULL;
    const double t1 = zrt_now(), dt = t1 - t0;
    s->exposed[xk] += dt;
    s->f->blocked_s += dt;
    s->f->plan.st[u][kind].exposed_s += dt;
    if (s->trace && dt > 2e-6)
        tprintf(s, ",\n{\"name\": \"wait %s %s\", \"cat\": \"wait\", \"ph\": \"X\", \"pid\": %d, "
                   "\"tid\": 0, \"ts\": %.1f, \"dur\": %.1f}",
                plan_kind_name(kind), s->f->units[u].name, s->f->rank, us(s, t0), dt * 1e6);
}

static void issue_gather(Sched* s) {
    Fsdp* f = s->f;
    const SchedGather* g = &s->p->ag[s->ag_issued];
    SUnit* U = &s->u[g->unit];
    const FsdpUnit* F = &f->units[g->unit];
    trainCheck(U->state == 0, "scheduler: the gather of %s was issued while the unit is still held",
               F->name);
    const int p16 = f->param_dtype == zipcclBfloat16;
    /* The collective's buffers are the model's memory (ZipCCL takes device
     * buffers): the gather lands in the unit the model will read, in
     * param_dtype; a bf16 one sends the shard's cast. */
    Pool* P = model_pool(s);
    const int local = fsdp_unit_local(f, g->unit); /* no collective: fsdp.h */
    U->pooled = !local || p16;
    U->unit = U->pooled ? pool_get(P, F->padded * zipcclTypeSize(f->param_dtype), 0) : F->param;
    if (U->pooled) pool_busy(P, U->unit, 1);
    U->send = p16 && !local ? pool_get(P, F->shard * sizeof(uint16_t), 0) : NULL;
    if (U->send) pool_busy(P, U->send, 1);
    U->rec = local ? -1 : new_rec(s, g->unit, PLAN_AG, (double)F->padded * (p16 ? 2 : 4));
    fsdp_gather_start(f, g->unit, U->send, U->unit, &U->req);
    U->state = 1;
    U->gather = s->ag_issued++;
    s->live += s->gb[g->unit] + s->gt[g->unit];
    trainCheck(s->max_bytes <= 0 || s->live <= s->max_bytes + 0.5,
               "scheduler: %.0f bytes in flight exceed parallelism.max_inflight_bytes %.0f",
               s->live, s->max_bytes);
}

static void retire_reduce(Sched* s) {
    SReduce* r = &s->rs[s->rs_retired];
    const char* name = s->f->units[r->unit].name;
    wait_req(s, &r->req, r->unit, PLAN_RS, SCHED_X_RS);
    Pool* P = model_pool(s);
    if (r->recv) { /* else a local unit's, added at issue */
        pool_busy(P, r->recv, 0);
        if (r->g16) pool_busy(P, r->g16, 0);
        else pool_busy(P, r->gfull, 0);
    }
    fsdp_reduce_finish(s->f, r->unit, r->recv);
    pool_put(P, r->recv, "the reduce-scatter output", name);
    pool_put(P, r->g16, "the bf16 gradient", name);
    pool_put(P, r->gfull, "the full gradient", name);
    r->recv = r->g16 = NULL;
    r->gfull = NULL;
    s->live -= s->rf[r->unit];
    s->rs_retired++;
}

static void to_counts(Sched* s, int ag, int rs) {
    while (s->rs_retired < rs) retire_reduce(s);
    while (s->ag_issued < ag) issue_gather(s);
}

static const SchedEvent* expect(Sched* s, int type, int unit, int phase) {
    trainCheck(s->p, "scheduler: the model called %s(%d) outside a step", ev_name(type), unit);
    trainCheck(s->cur < s->p->n_ev,
               "scheduler: the model called %s(%d) after the plan's last event (%d)",
               ev_name(type), unit, s->p->n_ev);
    const SchedEvent* e = &s->p->ev[s->cur];
    const int phased = type != EV_GBUF && type != EV_GRDY;
    trainCheck(e->type == type && e->unit == unit && (!phased || e->phase == phase),
               "scheduler: the model called %s(%d, phase %d) where the plan has %s(%d, phase %d) "
               "(event %d of micro-batch %d): the model's hook order is not the one "
               "models/llama.h documents and sched_model_order follows",
               ev_name(type), unit, phase, ev_name(e->type), e->unit, e->phase, s->cur, s->micro);
    to_counts(s, e->ag_pre, e->rs_pre);
    return e;
}

static void done(Sched* s, const SchedEvent* e) {
    to_counts(s, e->ag_post, e->rs_post);
    s->cur++;
    poll_all(s);
}

static void* trace_event(Sched* s); /* --trace on a device (below) */

static const void* hook_acquire(void* ctx, int u, int phase) {
    Sched* s = ctx;
    const SchedEvent* e = expect(s, EV_ACQ, u, phase);
    SUnit* U = &s->u[u];
    if (e->gather >= 0) {
        trainCheck(U->state == 1 && U->gather == e->gather,
                   "scheduler: %s acquired, but its gather %d is not the one in flight",
                   s->f->units[u].name, e->gather);
        wait_req(s, &U->req, u, PLAN_AG, SCHED_X_AG);
        Pool* P = model_pool(s);
        if (U->pooled) pool_busy(P, U->unit, 0);
        if (U->send) {
            pool_busy(P, U->send, 0);
            pool_put(P, U->send, "the send shard", s->f->units[u].name);
            U->send = NULL;
        }
        fsdp_gather_finish(s->f, u, U->unit);
        s->live -= s->gt[u]; /* the send shard went back */
        U->state = 2;
    }
    /* the invariant: nothing reads a unit whose gather has not completed */
    trainCheck(U->state == 2 && U->unit, "scheduler: %s read before its gather completed",
               s->f->units[u].name);
    U->t_acq = zrt_now();
    if (s->trace && s->dpool.K) U->ev_acq = trace_event(s);
    done(s, e);
    return U->unit;
}

static void hook_release(void* ctx, int u, int phase) {
    Sched* s = ctx;
    const SchedEvent* e = expect(s, EV_REL, u, phase);
    SUnit* U = &s->u[u];
    /* the device's end of the span first, then the host's clock, so that on a
     * host device the two spans end together */
    void* ev_rel = s->trace && s->dpool.K && U->ev_acq ? trace_event(s) : NULL;
    const double t_rel = zrt_now();
    if (s->trace)
        tprintf(s, ",\n{\"name\": \"%s %s\", \"cat\": \"compute\", \"ph\": \"X\", \"pid\": %d, "
                   "\"tid\": 0, \"ts\": %.1f, \"dur\": %.1f, \"args\": {\"micro\": %d}}",
                phase ? "bwd" : "fwd", s->f->units[u].name, s->f->rank, us(s, U->t_acq),
                (t_rel - U->t_acq) * 1e6, s->micro);
    if (s->trace && s->dpool.K && U->ev_acq) {
        push_dspan(s, (DevSpan){U->ev_acq, ev_rel, u, phase, s->micro, -1, 0, 0});
        U->ev_acq = NULL;
    }
    if (e->drop) {
        if (U->pooled) pool_put(model_pool(s), U->unit, "the gathered unit", s->f->units[u].name);
        U->unit = NULL;
        U->state = 0;
        s->live -= s->gb[u];
    }
    done(s, e);
}

static float* hook_grad_buffer(void* ctx, int u) {
    Sched* s = ctx;
    const SchedEvent* e = expect(s, EV_GBUF, u, 1);
    SUnit* U = &s->u[u];
    if (e->gbuf_new) {
        trainCheck(!U->gbuf && !U->dgbuf, "scheduler: a second gradient buffer for %s",
                   s->f->units[u].name);
        const size_t bytes = s->f->units[u].padded * sizeof(float);
        /* with a device, the model accumulates on the device; the host
         * only receives the finished gradient as sent (grads_ready) */
        if (s->dpool.K) U->dgbuf = pool_get(&s->dpool, bytes, 1);
        else U->gbuf = pool_get(&s->pool, bytes, 1);
        s->live += s->rb[u];
    }
    float* g = s->dpool.K ? U->dgbuf : U->gbuf;
    trainCheck(g, "scheduler: no gradient buffer for %s", s->f->units[u].name);
    done(s, e);
    return g;
}

static void hook_grads_ready(void* ctx, int u) {
    Sched* s = ctx;
    const SchedEvent* e = expect(s, EV_GRDY, u, 1);
    SUnit* U = &s->u[u];
    Fsdp* f = s->f;
    const FsdpUnit* F = &f->units[u];
    const int dev = s->dpool.K != NULL;
    float* g = dev ? U->dgbuf : U->gbuf; /* the model's gradient */
    trainCheck(g, "grads_ready(%d) before any gradient was written", u);
    trainCheck(e->rs == s->rs_issued, "scheduler: reduce-scatter %d issued out of order", e->rs);
    SReduce* r = &s->rs[s->rs_issued++];
    const int r16 = f->reduce_dtype == zipcclBfloat16;
    /* what the collective sends, in the model's memory: the bf16 cast of the
     * gradient (the model's buffer is free once it is made), or the gradient
     * itself (held until the reduce-scatter retires) */
    Pool* P = model_pool(s);
    *r = (SReduce){.unit = u};
    if (fsdp_unit_local(f, u)) { /* added into the shard now: no collective (fsdp.h) */
        r->rec = -1;
        fsdp_reduce_start(f, u, g, NULL, NULL, &r->req);
        pool_put(P, g, "the full gradient", F->name);
        U->gbuf = U->dgbuf = NULL;
        s->live += s->rf[u] - s->rb[u];
        done(s, e);
        return;
    }
    void* send = NULL;
    if (r16) send = r->g16 = pool_get(P, F->padded * sizeof(uint16_t), 0);
    else r->gfull = g;
    r->recv = pool_get(P, fsdp_recv_count(f, u) * (r16 ? 2 : 4), 0);
    r->rec = new_rec(s, u, PLAN_RS, (double)F->padded * (r16 ? 2 : 4));
    fsdp_reduce_start(f, u, g, send, r->recv, &r->req);
    pool_busy(P, r->recv, 1);
    pool_busy(P, r16 ? (void*)r->g16 : (void*)r->gfull, 1);
    if (r16) pool_put(P, g, "the full gradient", F->name);
    U->gbuf = U->dgbuf = NULL;
    s->live += s->rf[u] - s->rb[u]; /* from here on what the reduce-scatter holds */
    done(s, e);
}

/* The expert exchange (expert.c) of a MoE block, in chunks. With overlap
 * every chunk's dispatch is started at the block's dispatch, so the
 * communicator carries chunk c+1 while the experts compute chunk c, and
 * each chunk's combine is started as soon as its outputs are there and
 * waited only at the block's combine; without overlap each chunk's call is
 * waited at issue (the blocking reference). The calls and their data are
 * the same either way, and a call's result does not depend on what else is
 * in flight, so overlap changes no bit. The compute thread's time inside
 * these hooks waiting on the exchange (the count exchange included) is
 * exposed a2a time. */
typedef struct {
    int layer, phase, chunk;
    const float* rows;
    const int* counts;
    int C;
    int *n_chunks, *n_recv, *n_local, *first;
    const float** recv;
    const int** recv_counts;
    const float* local;
    float* out;
} XArgs;

static int a2a_issue(Sched* s, int layer, int phase, int chunk, int dir, const XArgs* a) {
    const int r = new_rec(s, 1 + layer, PLAN_A2A, 1);
    s->rec[r].chunk = chunk;
    s->rec[r].xdir = dir;
    Expert* x = &s->f->expert;
    return dir == 1 ? expert_dispatch_issue(x, layer, phase, chunk)
                    : expert_combine_issue(x, layer, phase, chunk, a->local, a->out);
}


static int xstep(Sched* s, int type, XArgs* a) {
    Expert* x = &s->f->expert;
    const int l = a->layer, ph = a->phase, ov = s->cfg->parallel.overlap;
    int rc = 0;
    switch (type) {
    case EV_DISP:
        rc = expert_dispatch_begin(x, l, ph, a->rows, a->counts, a->C, s->cfg->moe.overlap_chunks,
                                   a->n_chunks, a->n_recv, a->n_local, a->first);
        s->x_chunks = rc ? 0 : *a->n_chunks;
        for (int c = 0; !rc && ov && c < s->x_chunks; c++) rc = a2a_issue(s, l, ph, c, 1, a);
        break;
    case EV_XWAIT:
        if (!ov) rc = a2a_issue(s, l, ph, a->chunk, 1, a);
        if (!rc) rc = expert_dispatch_wait(x, l, ph, a->chunk, a->recv, a->n_recv, a->recv_counts);
        break;
    case EV_XSEND:
        rc = a2a_issue(s, l, ph, a->chunk, 2, a);
        if (!rc && !ov) rc = expert_combine_wait(x, l, ph, a->chunk);
        break;
    case EV_COMB:
        for (int c = 0; !rc && c < s->x_chunks; c++) rc = expert_combine_wait(x, l, ph, c);
        if (!rc) rc = expert_combine_end(x, l, ph, a->out);
        break;
    }
    return rc;
}

static int exchange(Sched* s, int type, XArgs* a) {
    const SchedEvent* e = expect(s, type, a->layer, a->phase);
    trainCheck(e->chunk == a->chunk,
               "scheduler: the model called %s(layers.%d, chunk %d) where the plan has chunk %d "
               "(event %d of micro-batch %d): moe.overlap_chunks is %d",
               ev_name(type), a->layer, a->chunk, e->chunk, s->cur, s->micro,
               s->cfg->moe.overlap_chunks);
    Fsdp* f = s->f;
    const double b0 = f->expert.blocked_s, t0 = zrt_now();
    int rc = xstep(s, type, a);
    const double dt = f->expert.blocked_s - b0;
    f->blocked_s += dt;
    s->exposed[SCHED_X_A2A] += dt;
    f->plan.st[1 + a->layer][PLAN_A2A].exposed_s += dt;
    if (s->trace && dt > 2e-6)
        tprintf(s, ",\n{\"name\": \"%s layers.%d\", \"cat\": \"wait\", \"ph\": \"X\", \"pid\": %d, "
                   "\"tid\": 0, \"ts\": %.1f, \"dur\": %.1f, \"args\": {\"chunk\": %d}}",
                ev_name(type), a->layer, f->rank, us(s, t0), (zrt_now() - t0) * 1e6, a->chunk);
    done(s, e);
    return rc;
}

static int hook_dispatch(void* ctx, int layer, int phase, const float* rows, const int* counts,
                         int C, int* n_chunks, int* n_recv, int* n_local, int* first_expert) {
    XArgs a = {.layer = layer, .phase = phase, .rows = rows, .counts = counts, .C = C,
               .n_chunks = n_chunks, .n_recv = n_recv, .n_local = n_local, .first = first_expert};
    return exchange(ctx, EV_DISP, &a);
}

static int hook_dispatch_wait(void* ctx, int layer, int phase, int chunk, const float** recv,
                              int* n_recv, const int** recv_counts) {
    XArgs a = {.layer = layer, .phase = phase, .chunk = chunk, .recv = recv, .n_recv = n_recv,
               .recv_counts = recv_counts};
    return exchange(ctx, EV_XWAIT, &a);
}

static int hook_combine_send(void* ctx, int layer, int phase, int chunk, const float* local,
                             float* rows) {
    XArgs a = {.layer = layer, .phase = phase, .chunk = chunk, .local = local, .out = rows};
    return exchange(ctx, EV_XSEND, &a);
}

static int hook_combine(void* ctx, int layer, int phase, float* rows) {
    XArgs a = {.layer = layer, .phase = phase, .out = rows};
    return exchange(ctx, EV_COMB, &a);
}

/* train.rank_invariant: the model runs the experts per source rank (llama.h) */
static const int* hook_dispatch_sources(void* ctx, int layer, int chunk, int* n_src) {
    Sched* s = ctx;
    *n_src = s->f->expert.ep;
    return expert_chunk_sources(&s->f->expert, layer, chunk);
}

/* The aux loss over the micro-batch of every rank (moe.aux_loss_scope
 * global): its statistics summed over the ranks, in rank order. */
static int hook_aux_reduce(void* ctx, double* stats, int n) {
    Sched* s = ctx;
    fsdp_sum_over_ranks(s->f, stats, n);
    return 0;
}

LlamaParamHooks sched_hooks(Sched* s) {
    LlamaParamHooks h = {.ctx = s,
                         .acquire = hook_acquire,
                         .bf16_units = s->f->param_dtype == zipcclBfloat16,
                         .release = hook_release,
                         .grad_buffer = hook_grad_buffer,
                         .grads_ready = hook_grads_ready};
    if (s->f->ep > 1) { /* at EP = 1 the model computes every expert itself */
        h.dispatch = hook_dispatch;
        h.dispatch_wait = hook_dispatch_wait;
        h.combine_send = hook_combine_send;
        h.combine = hook_combine;
        if (s->cfg->train.rank_invariant) {
            h.dispatch_sources = hook_dispatch_sources;
            h.grad_tree_bf16 = s->f->reduce_dtype == zipcclBfloat16;
        }
    }
    if (s->cfg->model.n_experts > 0 && !strcmp(s->cfg->moe.aux_loss_scope, "global"))
        h.aux_reduce = hook_aux_reduce;
    return h;
}

Sched* sched_create(Fsdp* f, const TrainConfig* cfg, int trace) {
    Sched* s = zrt_calloc(1, sizeof *s, "scheduler");
    s->f = f;
    s->cfg = cfg;
    s->trace = trace;
    const int n = f->n_units;
    s->gb = unit_sizes(cfg, f->nranks, n);
    s->gt = s->gb + n;
    s->rb = s->gb + 2 * n;
    s->rf = s->gb + 3 * n;
    char err[1024];
    SchedParams sp = {.n_units = n, .gbytes = s->gb, .gtrans = s->gt, .rbytes = s->rb,
                      .rflight = s->rf};
    params_for(&sp, cfg, 1);
    trainCheck(!sched_plan_build(&s->train, &sp, err, sizeof err), "%s", err);
    s->pool.limit = s->dpool.limit = s->train.peak_bytes;
    params_for(&sp, cfg, 0);
    trainCheck(!sched_plan_build(&s->eval, &sp, err, sizeof err), "%s", err);
    s->max_bytes = sp.max_bytes;
    s->u = zrt_calloc((size_t)f->n_units, sizeof *s->u, "scheduler units");
    s->rs = zrt_calloc((size_t)s->train.n_rs + 1, sizeof *s->rs, "scheduler reduce-scatters");
    /* calls and bytes per step for the plan's table: this rank sends
     * (G-1)/G of each gathered unit and of each full gradient */
    for (int g = 0; g < s->train.n_ag; g++) {
        const int u = s->train.ag[g].unit;
        const FsdpUnit* F = &f->units[u];
        const double G = (double)F->padded / (double)F->shard;
        f->plan.e[u][PLAN_AG].local = fsdp_unit_local(f, u);
        f->plan.e[u][PLAN_AG].calls_per_step++;
        f->plan.e[u][PLAN_AG].bytes_per_step +=
            (uint64_t)((double)F->padded * zipcclTypeSize(f->param_dtype) * (G - 1) / G);
    }
    for (int i = 0; i < s->train.n_rs; i++) {
        const int u = s->train.rs_unit[i];
        const FsdpUnit* F = &f->units[u];
        const double G = (double)F->padded / (double)F->shard;
        f->plan.e[u][PLAN_RS].local = fsdp_unit_local(f, u);
        f->plan.e[u][PLAN_RS].calls_per_step++;
        f->plan.e[u][PLAN_RS].bytes_per_step +=
            (uint64_t)((double)F->padded * zipcclTypeSize(f->reduce_dtype) * (G - 1) / G);
    }
    for (int t = 0; t < s->train.n_ev; t++)
        if (s->train.ev[t].type == EV_XWAIT || s->train.ev[t].type == EV_XSEND)
            f->plan.e[1 + s->train.ev[t].unit][PLAN_A2A].calls_per_step++;
    s->slot[SLOT_AG] = (Slot){.comm = f->comm_ag, .kind = zipcclCollAllGather};
    s->slot[SLOT_RS] = (Slot){.comm = f->comm_rs, .kind = zipcclCollReduceScatter};
    if (f->ep > 1) {
        s->slot[SLOT_AGX] = (Slot){.comm = f->comm_ag_x, .kind = zipcclCollAllGather};
        s->slot[SLOT_RSX] = (Slot){.comm = f->comm_rs_x, .kind = zipcclCollReduceScatter};
        s->slot[SLOT_A2A] = (Slot){.comm = f->expert.comm, .kind = zipcclCollAlltoAllv};
    }
    /* one clock for every rank's trace: the end of a barrier */
    MPI_Barrier(MPI_COMM_WORLD);
    s->t0 = zrt_now();
    if (trace) {
        tprintf(s, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": "
                   "{\"name\": \"rank %d\"}}",
                f->rank, f->rank);
        tprintf(s, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
                   "\"args\": {\"name\": \"compute\"}}",
                f->rank);
        for (int k = 0; k < NSLOTS; k++)
            if (s->slot[k].comm)
                tprintf(s, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                           "\"args\": {\"name\": \"%s\"}}",
                        f->rank, 1 + k, kSlotName[k]);
    }
    return s;
}

void sched_set_backend(Sched* s, const ZrtKernels* K) {
    trainCheck(!s->p && s->dpool.n == 0 && s->pool.n == 0,
               "scheduler: the backend is set before the first step");
    s->dpool.K = K && !K->dev->host_access ? K : NULL;
    if (s->trace && s->dpool.K && s->f->ep > 1) { /* the exchange's device spans too */
        s->f->expert.on_span = expert_span;
        s->f->expert.span_ctx = s;
    }
    if (s->trace && s->dpool.K)
        tprintf(s, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                   "\"args\": {\"name\": \"device (%s)\"}},\n{\"name\": \"thread_name\", \"ph\": \"M\", "
                   "\"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"device comm (%s)\"}}",
                s->f->rank, 1 + NSLOTS, K->name, s->f->rank, 2 + NSLOTS, K->name);
}

void sched_destroy(Sched* s) {
    if (!s) return;
    for (int k = 0; k < NSLOTS; k++) free(s->slot[k].q);
    for (int u = 0; u < s->f->n_units; u++) {
        if (s->u[u].req) zipcclWait(s->u[u].req);
    }
    free(s->dspan);
    pool_free(&s->pool);
    pool_free(&s->dpool);
    sched_plan_free(&s->train);
    sched_plan_free(&s->eval);
    free(s->u);
    free(s->rs);
    free(s->gb); /* gt, rb, rf live in the same allocation */
    free(s->rec);
    free(s->tb);
    free(s);
}

/* --trace on a device: a timing event recorded now on the compute stream,
 * after the work already issued (NULL when none could be made: the span is
 * left out). */
static void* trace_event(Sched* s) {
    ZDevice* d = s->dpool.K->dev;
    void* e = NULL;
    if (zdev_event_create(d, &e, 1)) return NULL;
    if (zdev_event_record(d, e, NULL)) {
        zdev_event_destroy(d, e);
        return NULL;
    }
    return e;
}

static double elapsed_ms(const ZrtKernels* K, void* a, void* b) {
    double ms = 0;
    return a && b && zdev_event_elapsed_ms(K->dev, a, b, &ms) == 0 ? ms : 0.0;
}

/* An exchange's name on the trace's tracks: which way, and the chunk. */
static void a2a_name(char* out, size_t cap, int xdir, int phase, int chunk) {
    snprintf(out, cap, "%s%s c%d", xdir == 1 ? "dispatch" : "combine", phase ? "_grad" : "", chunk);
}

/* --trace on a device: the step's compute spans as the device ran them,
 * on their own track ("device"), placed by the reference event: ts = the
 * reference's host time + the device time from it. */
static void trace_device_spans(Sched* s) {
    const ZrtKernels* K = s->dpool.K;
    for (int i = 0; i < s->n_dspan; i++) {
        const DevSpan* d = &s->dspan[i];
        const int comm = d->kind >= 0;
        char what[48]; /* as the host's tracks name them */
        if (d->kind == PLAN_A2A) a2a_name(what, sizeof what, d->xdir, d->phase, d->chunk);
        else
            snprintf(what, sizeof what, "%s", comm ? plan_kind_name(d->kind) : d->phase ? "bwd" : "fwd");
        if (d->b && s->dref)
            tprintf(s, ",\n{\"name\": \"%s %s\", \"cat\": \"%s\", \"ph\": \"X\", "
                       "\"pid\": %d, \"tid\": %d, \"ts\": %.1f, \"dur\": %.1f, \"args\": "
                       "{\"micro\": %d}}",
                    what, s->f->units[d->unit].name,
                    comm ? "device_comm" : "device", s->f->rank, 1 + NSLOTS + comm,
                    us(s, s->dref_t) + elapsed_ms(K, s->dref, d->a) * 1e3,
                    elapsed_ms(K, d->a, d->b) * 1e3, d->micro);
        zdev_event_destroy(K->dev, d->a);
        zdev_event_destroy(K->dev, d->b);
    }
    s->n_dspan = 0;
    zdev_event_destroy(K->dev, s->dref);
    s->dref = NULL;
}

void sched_begin_step(Sched* s, int train) {
    trainCheck(!s->p, "scheduler: a step began inside another");
    if (s->trace && s->dpool.K) { /* the reference: recorded with the device idle */
        zdevCheck(zdev_stream_sync(s->dpool.K->dev, NULL));
        s->dref = trace_event(s);
        s->dref_t = zrt_now();
    }
    s->p = train ? &s->train : &s->eval;
    s->cur = s->micro = s->ag_issued = s->rs_issued = s->rs_retired = 0;
    s->n_rec = 0;
    for (int u = 0; u < s->f->n_units; u++)
        trainCheck(s->u[u].state == 0 && !s->u[u].gbuf, "scheduler: %s held across steps",
                   s->f->units[u].name);
    /* calls made outside the plan (checkpoint and hash gathers) are nobody's */
    for (int k = 0; k < NSLOTS; k++) {
        Slot* sl = &s->slot[k];
        if (!sl->comm) continue;
        fsdp_comm_counters(s->f, sl->comm, sl->kind, &sl->last);
        sl->qh = sl->qt = 0;
    }
    to_counts(s, s->p->n_ev ? s->p->ev[0].ag_pre : 0, 0);
}

void sched_begin_micro(Sched* s) {
    trainCheck(s->p && (s->cur == s->p->n_ev || s->p->ev[s->cur].micro == s->micro),
               "scheduler: micro-batch %d begins at event %d", s->micro, s->cur);
}

void sched_end_micro(Sched* s) {
    trainCheck(s->cur == s->p->n_ev || s->p->ev[s->cur].micro == s->micro + 1,
               "scheduler: micro-batch %d ended at event %d of %d: the model skipped hooks "
               "(a failed step?)",
               s->micro, s->cur, s->p->n_ev);
    s->micro++;
}

static void trace_calls(Sched* s) {
    for (int i = 0; i < s->n_rec; i++) {
        const CallRec* r = &s->rec[i];
        if (!r->accounted) continue;
        char what[48];
        if (r->kind == PLAN_A2A) /* which way, and the chunk: the pipeline is visible */
            a2a_name(what, sizeof what, r->xdir, r->phase, r->chunk);
        else
            snprintf(what, sizeof what, "%s", plan_kind_name(r->kind));
        tprintf(s,
                ",\n{\"name\": \"%s %s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, "
                "\"ts\": %.1f, \"dur\": %.1f, \"args\": {\"unit\": \"%s\", \"kind\": \"%s\", "
                "\"chunk\": %d, "
                "\"micro\": %d, \"strategy\": \"%s\", \"codec\": \"%s\", \"raw_bytes\": %llu, "
                "\"wire_bytes\": %llu, \"codec_ms\": %.3f, \"issued_us\": %.1f, \"shared\": %d}}",
                what, s->f->units[r->unit].name, plan_kind_name(r->kind),
                s->f->rank, 1 + r->slot, us(s, r->t_start), r->total_s * 1e6,
                s->f->units[r->unit].name, plan_kind_name(r->kind), r->chunk, r->micro,
                zipcclStrategyName((zipcclStrategy_t)r->strategy),
                r->codec >= 0 ? zipcclCodecName((zipcclCodec_t)r->codec) : "-",
                (unsigned long long)r->raw, (unsigned long long)r->wire, r->codec_s * 1e3,
                us(s, r->t_issue), r->shared);
    }
}

void sched_end_step(Sched* s) {
    trainCheck(s->p, "scheduler: a step ended that never began");
    trainCheck(s->cur == s->p->n_ev, "scheduler: the step ended at event %d of %d", s->cur,
               s->p->n_ev);
    trainCheck(s->ag_issued == s->p->n_ag, "scheduler: %d of %d gathers issued", s->ag_issued,
               s->p->n_ag);
    while (s->rs_retired < s->rs_issued) retire_reduce(s);
    for (int u = 0; u < s->f->n_units; u++) {
        SUnit* U = &s->u[u];
        trainCheck(U->state != 1, "scheduler: the gather of %s was never waited for",
                   s->f->units[u].name);
        if (U->state == 2) {
            if (U->pooled) pool_put(model_pool(s), U->unit, "the gathered unit", s->f->units[u].name);
            U->unit = NULL;
            U->state = 0;
            s->live -= s->gb[u];
        }
    }
    poll_all(s);
    if (s->trace) trace_calls(s);
    if (s->trace && s->dpool.K) trace_device_spans(s);
    s->p = NULL;
}

void sched_exposed(const Sched* s, double out[SCHED_NX]) {
    for (int k = 0; k < SCHED_NX; k++) out[k] = s->exposed[k];
    out[SCHED_X_MISC] = s->f->misc_s;
}

const CommPlan* sched_plan(const Sched* s) { return &s->f->plan; }
double sched_peak_bytes(const Sched* s) { return s->train.peak_bytes; }

void sched_trace_write(Sched* s, const char* path) {
    if (!s->trace) return;
    Fsdp* f = s->f;
    const int len = (int)s->tlen;
    int* lens = f->rank == 0 ? zrt_malloc((size_t)f->nranks * sizeof(int), "trace") : NULL;
    MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
    int* displs = NULL;
    char* all = NULL;
    if (f->rank == 0) {
        displs = zrt_malloc((size_t)f->nranks * sizeof(int), "trace");
        long long tot = 0;
        for (int r = 0; r < f->nranks; r++) {
            displs[r] = (int)tot;
            tot += lens[r];
        }
        trainCheck(tot < (1ll << 31), "--trace: %lld bytes of events do not fit one file; trace "
                   "fewer steps", tot);
        all = zrt_malloc((size_t)tot + 1, "trace");
    }
    MPI_Gatherv(s->tb, len, MPI_CHAR, all, lens, displs, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (f->rank == 0) {
        FILE* fp = fopen(path, "w");
        trainCheck(fp, "--trace: cannot write %s: %s", PRINTABLE(path), strerror(errno));
        fprintf(fp, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
        for (int r = 0; r < f->nranks; r++) {
            if (r) fprintf(fp, ",\n");
            fwrite(all + displs[r], 1, (size_t)lens[r], fp);
        }
        fprintf(fp, "\n]}\n");
        trainCheck(fclose(fp) == 0, "--trace: writing %s failed", PRINTABLE(path));
    }
    free(lens);
    free(displs);
    free(all);
}
