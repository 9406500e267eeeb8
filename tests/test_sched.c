/*
 * test_sched.c — the overlap scheduler's planner (runtime/sched.c) and the
 * communication plan (runtime/plan.c), without MPI.
 *
 *   1. sched_model_order is the model's real hook order: a tiny dense model,
 *      a MoE model computing its experts itself, and a MoE model with
 *      dispatch/combine hooks, each run through llama_step with recording
 *      hooks, forward only and with backward; with the exchange handed over
 *      in 1, 2, 4 and 5 chunks (each chunk's dispatch_wait and combine_send,
 *      with its chunk index, where the plan has them).
 *   2. Every plan over a grid of settings (prefetch depth 0..3, in-flight
 *      bounds from the floor up, overlap off, reshard on and off, 1 and 2
 *      micro-batches, dense and MoE) keeps the invariants the executor
 *      relies on: each gather issued before the acquisition that waits for
 *      it and after its unit's previous hold was dropped, gathers issued in
 *      need order, never more than `depth` ahead, the bytes alive at every
 *      event within the bound; overlap off issues nothing ahead and retires
 *      every reduce-scatter at once; depth 1 on a dense model prefetches
 *      the next block (so the test fails if prefetch does nothing).
 *   3. A bound below the floor, a rule matching no unit and an algorithm
 *      no matched kind runs are refused naming the key.
 *
 * Left out: the executor (it needs ranks: tests/test_sched_exec.c,
 * tests/test_train_sched.sh).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "fsdp.h"
#include "llama.h"
#include "plan.h"
#include "scheduler.h"
#include "testutil.h"

#define MAXEV 4096

typedef struct {
    LlamaConfig cfg;
    float* params[64];
    float* grads[64];
    SchedEvent ev[MAXEV];
    int n;
    int last_rows, C, chunks;
    int xcounts[64], ccounts[64];
    const float* rows;
    int ev_chunk[MAXEV];
} Rec;

static void rec(Rec* r, int type, int unit, int phase) {
    if (r->n < MAXEV) r->ev[r->n] = (SchedEvent){.type = (uint8_t)type, .phase = (uint8_t)phase, .unit = unit};
    r->n++;
}
static const void* r_acq(void* c, int u, int ph) { rec(c, EV_ACQ, u, ph); return ((Rec*)c)->params[u]; }
static void r_rel(void* c, int u, int ph) { rec(c, EV_REL, u, ph); }
static float* r_gbuf(void* c, int u) { rec(c, EV_GBUF, u, 1); return ((Rec*)c)->grads[u]; }
static void r_grdy(void* c, int u) { rec(c, EV_GRDY, u, 1); }
/* Every expert is here; the rows come in r->chunks contiguous runs of the
 * expert-major order (a run may straddle experts), as a chunking runtime
 * would hand them over. */
static int r_disp(void* c, int layer, int ph, const float* rows, const int* counts, int C,
                  int* n_chunks, int* n_recv, int* n_local, int* first) {
    Rec* r = c;
    rec(r, EV_DISP, layer, ph);
    int n = 0;
    for (int e = 0; e < r->cfg.n_experts; e++) n += r->xcounts[e] = counts[e];
    r->last_rows = n;
    r->C = C;
    r->rows = rows;
    *n_chunks = r->chunks;
    *n_recv = n;
    *n_local = r->cfg.n_experts;
    *first = 0;
    return 0;
}
static int r_wait(void* c, int layer, int ph, int chunk, const float** recv, int* n_recv,
                  const int** rc) {
    Rec* r = c;
    r->ev_chunk[r->n < MAXEV ? r->n : 0] = chunk;
    rec(r, EV_XWAIT, layer, ph);
    const int E = r->cfg.n_experts, n = r->last_rows;
    const int lo = n * chunk / r->chunks, hi = n * (chunk + 1) / r->chunks;
    for (int e = 0, e0 = 0; e < E; e0 += r->xcounts[e], e++) {
        const int e1 = e0 + r->xcounts[e], a = e0 > lo ? e0 : lo, z = e1 < hi ? e1 : hi;
        r->ccounts[e] = z > a ? z - a : 0;
    }
    *recv = r->rows + (size_t)lo * r->C;
    *n_recv = hi - lo;
    *rc = r->ccounts;
    return 0;
}
static int r_send(void* c, int layer, int ph, int chunk, const float* local, float* rows) {
    Rec* r = c;
    r->ev_chunk[r->n < MAXEV ? r->n : 0] = chunk;
    rec(r, EV_XSEND, layer, ph);
    const int n = r->last_rows, lo = n * chunk / r->chunks, hi = n * (chunk + 1) / r->chunks;
    memcpy(rows + (size_t)lo * r->C, local, (size_t)(hi - lo) * r->C * sizeof(float));
    return 0;
}
static int r_comb(void* c, int layer, int ph, float* rows) {
    (void)rows;
    rec(c, EV_COMB, layer, ph);
    return 0;
}

static LlamaConfig tiny(int moe) {
    LlamaConfig m = {.vocab_size = 64, .dim = 16, .n_layers = 3, .n_heads = 2, .n_kv_heads = 1,
                     .ffn_hidden = 32, .max_seq_len = 8, .rope_theta = 10000, .norm_eps = 1e-5f,
                     .tie_embeddings = 0, .decoder_sparse_step = 1};
    if (moe) {
        m.n_experts = 4;
        m.n_experts_per_tok = 2;
        m.moe_ffn_hidden = 8;
        m.decoder_sparse_step = 2; /* block 1 is MoE, 0 and 2 dense */
        m.router_aux_loss_coef = 0.001f;
    }
    return m;
}

/* ep_chunks: 0, no exchange hooks; else the chunks the mock hands over. */
static void check_order(const char* name, int moe, int ep_chunks, int backward) {
    static Rec r;
    memset(&r, 0, sizeof r);
    r.cfg = tiny(moe);
    r.chunks = ep_chunks;
    const int nu = llama_num_units(&r.cfg);
    for (int u = 0; u < nu; u++) {
        size_t n = llama_unit_numel(&r.cfg, u);
        r.params[u] = calloc(n, sizeof(float));
        r.grads[u] = calloc(n, sizeof(float));
        llama_unit_init(&r.cfg, u, 7, r.params[u]);
    }
    LlamaParamHooks h = {.ctx = &r, .acquire = r_acq, .release = r_rel, .grad_buffer = r_gbuf,
                         .grads_ready = r_grdy};
    if (ep_chunks) {
        h.dispatch = r_disp;
        h.dispatch_wait = r_wait;
        h.combine_send = r_send;
        h.combine = r_comb;
    }
    const int B = 2, T = 4;
    int tok[8], tgt[8];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7) % 64, tgt[i] = (i * 5 + 3) % 64;
    LlamaActs* a = llama_acts_alloc(&r.cfg, B, T, zrt_kernels_cpu());
    float loss = llama_step(&r.cfg, a, tok, tgt, B, T, &h, backward, NULL);
    static SchedEvent want[MAXEV];
    int n = sched_model_order(&r.cfg, ep_chunks, backward, want, MAXEV);
    int same = n == r.n && isfinite(loss), at = -1, n_chunk_ev = 0;
    for (int i = 0; same && i < n; i++) {
        const SchedEvent *x = &want[i], *y = &r.ev[i];
        const int chunked = x->type == EV_XWAIT || x->type == EV_XSEND;
        same = x->type == y->type && x->unit == y->unit && x->phase == y->phase &&
               (!chunked || x->chunk == r.ev_chunk[i]);
        n_chunk_ev += chunked;
        if (!same) at = i;
    }
    /* each MoE block: a wait and a send per chunk, each way (so the test
     * fails if the chunks are not there at all) */
    const int moe_blocks = moe ? 1 : 0;
    same &= n_chunk_ev == 2 * ep_chunks * moe_blocks * (backward ? 2 : 1);
    CHECK(same, name, "%d events planned, the model made %d; first difference at %d (loss %g)", n,
          r.n, at, loss);
    llama_acts_free(a);
    for (int u = 0; u < nu; u++) {
        free(r.params[u]);
        free(r.grads[u]);
    }
}

/* Replays a plan the way the executor does and checks the invariants. */
static int check_plan(const SchedPlan* p, const SchedParams* sp, char* why, size_t n) {
    int issued = 0, retired = 0, rs_issued = 0;
    double live = 0;
    int* state = calloc((size_t)sp->n_units, sizeof(int));
    int* needed = calloc((size_t)p->n_ag + 1, sizeof(int));
    int ok = 1;
#define BAD(...) do { snprintf(why, n, __VA_ARGS__); ok = 0; goto out; } while (0)
    for (int t = 0; t < p->n_ev; t++) {
        const SchedEvent* e = &p->ev[t];
        for (int pass = 0; pass < 2; pass++) {
            const int ag = pass ? e->ag_post : e->ag_pre, rs = pass ? e->rs_post : e->rs_pre;
            if (ag < issued || rs < retired) BAD("event %d: counts go backwards", t);
            if (rs > rs_issued) BAD("event %d: retires a reduce-scatter not yet issued", t);
            while (retired < rs) live -= sp->rbytes[p->rs_unit[retired++]];
            while (issued < ag) {
                const int u = p->ag[issued].unit;
                if (state[u]) BAD("event %d: gather %d of unit %d while it is held", t, issued, u);
                state[u] = 1;
                live += sp->gbytes[u];
                issued++;
            }
            int ahead = 0;
            for (int g = 0; g < issued; g++) ahead += !needed[g];
            if (ahead > (sp->overlap ? sp->depth : 0) + (pass == 0 && e->type == EV_ACQ && e->gather >= 0))
                BAD("event %d: %d gathers ahead, depth %d", t, ahead, sp->depth);
            if (sp->max_bytes > 0 && live > sp->max_bytes + 0.5)
                BAD("event %d: %.0f bytes alive over the bound %.0f", t, live, sp->max_bytes);
            if (pass == 1) break;
            /* the event itself */
            if (e->type == EV_ACQ && e->gather >= 0) {
                if (e->gather >= issued) BAD("event %d: acquires gather %d before it was issued", t, e->gather);
                if (p->ag[e->gather].unit != e->unit) BAD("event %d: gather of another unit", t);
                needed[e->gather] = 1;
                state[e->unit] = 2;
            }
            if (e->type == EV_ACQ && state[e->unit] != 2) BAD("event %d: unit %d read ungathered", t, e->unit);
            if (e->type == EV_REL && e->drop) {
                state[e->unit] = 0;
                live -= sp->gbytes[e->unit];
            }
            if (e->type == EV_GBUF && e->gbuf_new) live += sp->rbytes[e->unit];
            if (e->type == EV_GRDY) rs_issued++;
        }
        if (!sp->overlap && (e->ag_post != e->ag_pre || e->rs_post != rs_issued))
            BAD("event %d: overlap off but something is ahead or in flight", t);
    }
out:
    free(state);
    free(needed);
    return ok;
#undef BAD
}

static void plan_grid(const char* name, int moe) {
    LlamaConfig m = tiny(moe);
    const int nu = llama_num_units(&m);
    double gb[64], rb[64];
    for (int u = 0; u < nu; u++) {
        gb[u] = 4.0 * (double)llama_unit_numel(&m, u);
        rb[u] = 4.5 * (double)llama_unit_numel(&m, u);
    }
    int plans = 0, bad = 0;
    char why[256] = "", first[512] = "";
    for (int micro = 1; micro <= 2; micro++)
        for (int reshard = 0; reshard <= 1; reshard++)
            for (int overlap = 0; overlap <= 1; overlap++)
                for (int depth = 0; depth <= 3; depth++)
                    for (int b = 0; b < 4; b++) {
                        SchedParams sp = {.model = &m, .n_units = nu, .gbytes = gb, .rbytes = rb,
                                          .ep_chunks = moe ? 3 : 0, .micro = micro, .backward = 1,
                                          .depth = depth, .overlap = overlap, .reshard = reshard};
                        SchedPlan p;
                        if (b > 0) { /* the floor, and a little and much above it */
                            if (sched_plan_build(&p, &sp, why, sizeof why)) continue;
                            sp.max_bytes = p.floor_bytes * (b == 1 ? 1.0 : b == 2 ? 1.3 : 3.0);
                            sched_plan_free(&p);
                        }
                        if (sched_plan_build(&p, &sp, why, sizeof why)) {
                            if (!bad++) snprintf(first, sizeof first, "build failed: %s", why);
                            continue;
                        }
                        plans++;
                        if (!check_plan(&p, &sp, why, sizeof why) && !bad++)
                            snprintf(first, sizeof first, "micro %d reshard %d overlap %d depth %d bound %d: %s",
                                     micro, reshard, overlap, depth, b, why);
                        sched_plan_free(&p);
                    }
    CHECK(!bad && plans > 100, name, "%d of %d plans broke an invariant; first: %s", bad, plans,
          first);
}

static void prefetch_happens(void) {
    LlamaConfig m = tiny(0);
    const int nu = llama_num_units(&m);
    double gb[64], rb[64];
    for (int u = 0; u < nu; u++) gb[u] = rb[u] = 1;
    SchedParams sp = {.model = &m, .n_units = nu, .gbytes = gb, .rbytes = rb, .micro = 1,
                      .backward = 1, .depth = 1, .overlap = 1, .reshard = 1};
    SchedPlan p;
    char why[256];
    int ok = !sched_plan_build(&p, &sp, why, sizeof why);
    /* block 2's forward gather (the second gather of a block) is issued
     * after block 1 is acquired, before block 1 is released */
    int early = 0, forced = 0;
    for (int g = 1; ok && g < p.n_ag; g++) {
        early += p.ag[g].issue >= 0 && p.ag[g].issue < p.ag[g].need - 1;
        forced += p.ag[g].issue == p.ag[g].need - 1;
    }
    CHECK(ok && early == p.n_ag - 1 && forced == 0, "depth1_prefetches_every_block",
          "%d of %d gathers issued ahead, %d at their acquisition", early, p.n_ag - 1, forced);
    if (ok) sched_plan_free(&p);
    sp.overlap = 0;
    ok = !sched_plan_build(&p, &sp, why, sizeof why);
    early = 0;
    for (int g = 0; ok && g < p.n_ag; g++) early += p.ag[g].issue != p.ag[g].need - 1;
    CHECK(ok && early == 0, "overlap_off_issues_at_acquire", "%d gathers issued ahead", early);
    if (ok) sched_plan_free(&p);
}

/* An untied model's embedding and head are two units: the embedding goes
 * after its forward (its backward reads no parameters) and the head is
 * held once, in the backward, so with a vocabulary that outweighs the
 * blocks the peak is about one of them gathered plus its gradient, not
 * both (the 12 GiB of Llama-3-8B's one outer unit); a tied model's unit 0
 * is one unit and stays the whole step. */
static void untied_head_apart(void) {
    LlamaConfig m = tiny(0);
    m.vocab_size = 4096;
    const int nu = llama_num_units(&m), hu = llama_head_unit(&m);
    double gb[64], rb[64];
    for (int u = 0; u < nu; u++) gb[u] = rb[u] = (double)llama_unit_numel(&m, u);
    SchedParams sp = {.model = &m, .n_units = nu, .gbytes = gb, .rbytes = rb, .micro = 2,
                      .backward = 1, .depth = 1, .overlap = 1, .reshard = 1, .max_rs = 2};
    SchedPlan p;
    char why[256];
    int ok = hu == nu - 1 && !sched_plan_build(&p, &sp, why, sizeof why);
    int emb_drops = 0, head_fwd = 0;
    for (int t = 0; ok && t < p.n_ev; t++) {
        const SchedEvent* e = &p.ev[t];
        emb_drops += e->type == EV_REL && e->unit == 0 && e->phase == 0 && e->drop;
        head_fwd += e->unit == hu && e->phase == 0 && (e->type == EV_ACQ || e->type == EV_REL);
    }
    const double one = gb[hu] + rb[hu];
    CHECK(ok && emb_drops == 2 && head_fwd == 0 && p.peak_bytes < 1.2 * one, "untied_head_apart",
          "unit 0 dropped after %d of 2 forwards, %d forward head events, peak %.0f vs one "
          "unit and its gradient %.0f", emb_drops, head_fwd, ok ? p.peak_bytes : 0.0, one);
    if (ok) sched_plan_free(&p);
}

/* Gradient accumulation must not keep every micro-batch's full gradients:
 * a unit's reduce-scatter retires before the unit's next gradient buffer
 * is made, so the peak is the same at 2 and 8 micro-batches, with or
 * without the count bound; the count bound (max_rs 2) keeps at most two
 * issued and not retired, and lowers the peak below the unbounded one. */
static void reduce_bound_keeps_peak_flat(void) {
    LlamaConfig m = tiny(0);
    const int nu = llama_num_units(&m);
    double gb[64], rb[64];
    for (int u = 0; u < nu; u++) gb[u] = rb[u] = 1;
    double peak[2][2] = {{0}}; /* [bounded][micro 2, 8] */
    int ok = 1;
    for (int bounded = 0; bounded < 2; bounded++)
        for (int i = 0; i < 2; i++) {
            SchedParams sp = {.model = &m, .n_units = nu, .gbytes = gb, .rbytes = rb,
                              .micro = i ? 8 : 2, .backward = 1, .depth = 1, .overlap = 1,
                              .reshard = 1, .max_rs = bounded ? 2 : 0};
            SchedPlan p;
            char why[256];
            if (sched_plan_build(&p, &sp, why, sizeof why)) {
                ok = 0;
                continue;
            }
            peak[bounded][i] = p.peak_bytes;
            /* the executor's view: never more than max_rs issued and not retired */
            for (int t = 0; bounded && t < p.n_ev; t++) {
                int issued = 0;
                for (int t2 = 0; t2 <= t; t2++) issued += p.ev[t2].type == EV_GRDY;
                ok &= issued - p.ev[t].rs_post <= 2;
            }
            sched_plan_free(&p);
        }
    CHECK(ok && peak[1][0] == peak[1][1] && peak[0][0] == peak[0][1] && peak[0][0] > peak[1][0],
          "reduce_bound_keeps_peak_flat",
          "bounded peaks %.0f (2 micro) %.0f (8), unbounded %.0f %.0f", peak[1][0], peak[1][1],
          peak[0][0], peak[0][1]);
}

static void bad_input(void) {
    LlamaConfig m = tiny(0);
    const int nu = llama_num_units(&m);
    double gb[64], rb[64];
    for (int u = 0; u < nu; u++) gb[u] = rb[u] = 1000;
    SchedParams sp = {.model = &m, .n_units = nu, .gbytes = gb, .rbytes = rb, .micro = 1,
                      .backward = 1, .depth = 1, .overlap = 1, .reshard = 1, .max_bytes = 1500};
    SchedPlan p;
    char err[512] = "";
    int rc = sched_plan_build(&p, &sp, err, sizeof err);
    CHECK(rc && strstr(err, "parallelism.max_inflight_bytes"), "bound_below_floor_refused",
          "rc %d: %s", rc, err);

    TrainConfig cfg;
    config_defaults(&cfg);
    cfg.model = m;
    snprintf(cfg.source, sizeof cfg.source, "x.yaml");
    char names[64][32];
    int has[64][PLAN_NKINDS];
    for (int u = 0; u < nu; u++) {
        fsdp_unit_name(&m, u, names[u], sizeof names[u]);
        fsdp_unit_kinds(&m, 1, u, has[u]);
    }
    CommPlan plan;
    cfg.comm.n_overrides = 1;
    cfg.comm.overrides[0] = (CommOverride){.pattern = "layer.*", .kind = -1,
                                           .strategy = zipcclStrategyRaw, .algo = -1, .line = 9};
    rc = plan_build(&plan, &cfg, nu, (const char(*)[32])names, (const int(*)[PLAN_NKINDS])has, err, sizeof err);
    CHECK(rc && strstr(err, "x.yaml:9: key 'comm.overrides'") && strstr(err, "matches no unit"),
          "rule_matching_nothing_refused", "rc %d: %s", rc, err);
    cfg.comm.overrides[0] = (CommOverride){.pattern = "layers.1", .kind = zipcclCollAlltoAllv,
                                           .strategy = zipcclStrategyRaw, .algo = -1, .line = 9};
    rc = plan_build(&plan, &cfg, nu, (const char(*)[32])names, (const int(*)[PLAN_NKINDS])has, err, sizeof err);
    CHECK(rc && strstr(err, "matches no unit"), "alltoall_rule_on_dense_refused", "rc %d: %s", rc, err);
    cfg.comm.overrides[0] = (CommOverride){.pattern = "layers.*", .kind = zipcclCollAllGather,
                                           .algo = zipcclAlgoDirect, .line = 9};
    rc = plan_build(&plan, &cfg, nu, (const char(*)[32])names, (const int(*)[PLAN_NKINDS])has, err, sizeof err);
    CHECK(rc && strstr(err, "comm.overrides.algo") && strstr(err, "direct"),
          "algo_of_another_kind_refused", "rc %d: %s", rc, err);
    /* later rules win field by field */
    cfg.comm.n_overrides = 2;
    cfg.comm.overrides[0] = (CommOverride){.pattern = "layers.*", .kind = -1,
                                           .strategy = zipcclStrategyRaw, .algo = -1};
    cfg.comm.overrides[1] = (CommOverride){.pattern = "layers.1", .kind = zipcclCollReduceScatter,
                                           .codec = zipcclCodecDense, .algo = zipcclAlgoRing};
    rc = plan_build(&plan, &cfg, nu, (const char(*)[32])names, (const int(*)[PLAN_NKINDS])has, err, sizeof err);
    int ok = !rc && plan.e[0][PLAN_AG].cfg.strategy == zipcclStrategyCompressed &&
             plan.e[1][PLAN_AG].cfg.strategy == zipcclStrategyRaw &&
             plan.e[2][PLAN_RS].cfg.strategy == zipcclStrategyRaw &&
             plan.e[2][PLAN_RS].cfg.codec == zipcclCodecDense &&
             plan.e[2][PLAN_RS].cfg.algo == zipcclAlgoRing &&
             plan.e[2][PLAN_AG].cfg.codec == zipcclCodecFast &&
             plan.e[2][PLAN_AG].cfg.algo == zipcclAlgoDefault && !plan.e[2][PLAN_A2A].applies;
    CHECK(ok, "rules_resolve_field_by_field", "rc %d %s", rc, err);
    if (!rc) plan_free(&plan);
}

int main(void) {
    check_order("order_dense_forward", 0, 0, 0);
    check_order("order_dense_backward", 0, 0, 1);
    check_order("order_moe_local_experts", 1, 0, 1);
    check_order("order_moe_dispatch_hooks", 1, 1, 1);
    check_order("order_moe_dispatch_forward", 1, 1, 0);
    check_order("order_moe_chunks_2", 1, 2, 1);
    check_order("order_moe_chunks_4_forward", 1, 4, 0);
    check_order("order_moe_chunks_5", 1, 5, 1); /* more chunks than some experts' rows */
    plan_grid("plan_invariants_dense", 0);
    plan_grid("plan_invariants_moe", 1);
    prefetch_happens();
    reduce_bound_keeps_peak_flat();
    untied_head_apart();
    bad_input();
    return tu_exit();
}
