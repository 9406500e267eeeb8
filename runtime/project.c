/*
 * project.c — the projection (project.h, docs/SCALE.md): one training step
 * replayed from the scheduler's own plan on a described cluster.
 *
 *   plan events (sched_plan_for_config)      what the replay does at each
 *   ---------------------------------------  -------------------------------
 *   gathers issued (ag_pre / ag_post)        queue the unit's AllGather on
 *                                            the rank's link
 *   acquire (its gather)                     wait for that gather  [exposed AG]
 *   release, forward                         the unit's forward compute
 *   grads_ready                              its backward compute, then queue
 *                                            its ReduceScatter
 *   reduce-scatters retired (rs_pre/post)    wait for them         [exposed RS]
 *   dispatch / combine (EP > 1)              the exchange, on the compute's
 *                                            path                  [exposed A2A]
 *   the step's end                           every reduce-scatter, then AdamW
 *
 * Collectives' times: zipcclTuneEstimateTwoLevel (comm/tune), the model auto
 * decides with, on the cluster's two link classes.
 */
#include "project.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp.h"
#include "llama.h"
#include "plan.h"
#include "log.h"
#include "scheduler.h"
#include "tune.h"

/* raw/wire when the cluster file gives none, by the dtype a collective
 * sends: docs/BENCHMARKS.md "Real tensors", llama-100m, codec fast (params
 * bf16 1.497, grads bf16 1.406, fp32 1.169; fp32 params as the fp32 grads'
 * bound, 1.198) and "Mixture-of-experts training" (dispatched activations:
 * bf16 1.43-1.48, fp32 1.19) */
static double default_ratio(int kind, zipcclDataType_t dt) {
    const int b16 = dt != zipcclFloat32;
    if (kind == 0) return b16 ? 1.497 : 1.198;
    if (kind == 1) return b16 ? 1.406 : 1.169;
    return b16 ? 1.45 : 1.19;
}

/* Everything one replay needs, at one GPU count. */
typedef struct {
    const TrainConfig* cfg;
    int n, gpn, ep, way;
    double ratio[3];      /* gathers, reduce-scatters, exchange        */
    double flops_s;       /* achieved FLOP/s of one GPU                 */
    zipcclTuneModel intra, inter;
    size_t piece;
    CommPlan plan; /* PROJ_PLAN: what each unit's calls ask for */
} Proj;

/* ---- the model's FLOPs per unit ------------------------------------------- */

/* Forward FLOPs per token of unit u's compute (llama_flops_per_token / 3,
 * split by unit: a block's attention (projections and the T x T square) and
 * its dense MLP or router, a MoE block's k experts, the head). The
 * embedding's lookup is no matmul; a head tied to it is head_fwd_flops,
 * charged where the plan holds it (the embedding's unit). */
static double unit_fwd_flops(const LlamaConfig* m, int T, int u) {
    const double C = m->dim, hd = llama_head_dim(m), QD = hd * m->n_heads, KVD = hd * m->n_kv_heads;
    if (u == 0) return 0;
    if (llama_unit_is_experts(m, u)) return 2.0 * m->n_experts_per_tok * 3.0 * m->moe_ffn_hidden * C;
    if (u > m->n_layers) return 2.0 * m->vocab_size * C; /* the untied head's unit */
    const int l = u - 1;
    const double attn = 2.0 * (2.0 * QD * C + 2.0 * KVD * C) + 4.0 * T * QD;
    return attn + (llama_layer_is_moe(m, l) ? 2.0 * m->n_experts * C : 2.0 * 3.0 * m->ffn_hidden * C);
}
static double head_fwd_flops(const LlamaConfig* m) { return 2.0 * m->vocab_size * m->dim; }

/* ---- collectives ---------------------------------------------------------- */

/* The design a request runs (zipcclAlgoRun) as the cost model names it:
 * the All-to-Alls' pairwise exchange and one-shot priced as direct. */
static zipcclAlgo_t run_algo(zipcclCollKind_t kind, zipcclAlgo_t requested) {
    const zipcclAlgo_t a = zipcclAlgoRun(kind, requested);
    return a == zipcclAlgoDefault || a == zipcclAlgoOneShot ? zipcclAlgoDirect : a;
}

/* Seconds of one call of `kind` moving `bytes` (tune.h's query size) over a
 * group of G ranks, k of them per node, the way p->way (PROJ_PLAN: as
 * `want` asks); ratio raw/wire. */
static double coll_s(const Proj* p, zipcclCollKind_t kind, zipcclDataType_t dt, double bytes, int G, int k,
                     double ratio, const zipcclCallConfig_t* want) {
    if (G < 2 || bytes <= 0) return 0;
    zipcclTuneModel a = p->intra, b = p->inter;
    const int di = zipcclTuneDtypeIndex(dt);
    /* every kind: a design's inner stages ask for other kinds than its own */
    for (int x = 0; x < zipcclNumCollKinds; x++) a.ratio[x][di][0] = b.ratio[x][di][0] = ratio;
    const zipcclTuneQuery q = {kind, dt, bytes, G, p->piece, 0, 1, 0};
    const int links = p->cfg->cluster.nics_per_node;
    if (p->way == PROJ_PLAN) { /* the design the plan asks for, as it runs */
        zipcclTuneDesign d = {want->strategy, zipcclCodecFast, run_algo(kind, want->algo), "", 0};
        if (want->strategy != zipcclStrategyAuto) return zipcclTuneEstimateTwoLevel(&a, &b, k, links, &q, &d);
        /* auto: the cheaper of raw and compressed (it never picks hier,
         * nor native for a reduction) */
        zipcclTuneDesign r = {zipcclStrategyRaw, zipcclCodecFast, run_algo(kind, zipcclAlgoDirect), "", 0},
                         c = {zipcclStrategyCompressed, zipcclCodecFast, r.algo, "", 0};
        return fmin(zipcclTuneEstimateTwoLevel(&a, &b, k, links, &q, &r),
                    zipcclTuneEstimateTwoLevel(&a, &b, k, links, &q, &c));
    }
    /* raw: cluster.baseline, the transport's own collective (NCCL's or
     * MPI's; logarithmic latency) or ZipCCL's raw design */
    zipcclTuneDesign d = {p->way == PROJ_RAW ? p->cfg->cluster.baseline : zipcclStrategyCompressed, zipcclCodecFast,
                          run_algo(kind, p->way == PROJ_HIER ? zipcclAlgoHier : zipcclAlgoDirect), "", 0};
    return zipcclTuneEstimateTwoLevel(&a, &b, k, links, &q, &d);
}

/* A unit's group (its gathers' and reduce-scatters' ranks) and its ranks per
 * node: every rank, or an expert unit's expert-data-parallel group (the
 * ranks of one EP index, strided by EP: EP groups are consecutive ranks). */
static void unit_group(const Proj* p, int u, int* G, int* k) {
    const int experts = llama_unit_is_experts(&p->cfg->model, u) && p->ep > 1;
    *G = experts ? p->n / p->ep : p->n;
    const int gpn = p->gpn < p->n ? p->gpn : p->n;
    *k = experts ? (p->ep < gpn ? gpn / p->ep : 1) : gpn;
}

static double unit_padded(const Proj* p, int u, int G) {
    const LlamaConfig* m = &p->cfg->model;
    const int experts = llama_unit_is_experts(m, u) && p->ep > 1;
    const size_t numel = llama_unit_numel(m, u) / (experts ? (size_t)p->ep : 1);
    return (double)fsdp_pad(numel, (size_t)G, p->cfg->train.rank_invariant);
}

static double ag_s(const Proj* p, int u) {
    int G, k;
    unit_group(p, u, &G, &k);
    const zipcclDataType_t dt = p->cfg->comm.param_dtype;
    return coll_s(p, zipcclCollAllGather, dt, unit_padded(p, u, G) / G * zipcclTypeSize(dt), G, k, p->ratio[0],
                  p->way == PROJ_PLAN ? &p->plan.e[u][PLAN_AG].cfg : NULL);
}

static double rs_s(const Proj* p, int u) {
    int G, k;
    unit_group(p, u, &G, &k);
    const zipcclDataType_t dt = p->cfg->comm.reduce_dtype;
    /* rank_invariant reduces by an All-to-All of the same blocks (fsdp.h) */
    const zipcclCollKind_t kind = p->cfg->train.rank_invariant ? zipcclCollAlltoAll : zipcclCollReduceScatter;
    return coll_s(p, kind, dt, unit_padded(p, u, G) * zipcclTypeSize(dt), G, k, p->ratio[1],
                  p->way == PROJ_PLAN ? &p->plan.e[u][PLAN_RS].cfg : NULL);
}

/* One direction of MoE block `layer`'s exchange: every token's k rows. */
static double a2a_s(const Proj* p, int layer) {
    const TrainConfig* c = p->cfg;
    const double rows = (double)c->data.batch_size * c->data.seq_len * c->model.n_experts_per_tok;
    const zipcclDataType_t dt = c->comm.alltoall_dtype;
    const int gpn = p->gpn < p->n ? p->gpn : p->n;
    return coll_s(p, zipcclCollAlltoAllv, dt, rows * c->model.dim * zipcclTypeSize(dt), p->ep,
                  p->ep < gpn ? p->ep : gpn, p->ratio[2],
                  p->way == PROJ_PLAN ? &p->plan.e[1 + layer][PLAN_A2A].cfg : NULL);
}

/* ---- the replay ----------------------------------------------------------- */

typedef struct {
    const Proj* p;
    double t, link;   /* the compute's clock; when the rank's link is next free */
    double* ag_done;  /* per gather of the plan */
    double* rs_done;  /* per reduce-scatter     */
    int ag_issued, rs_issued, rs_retired;
    ProjStep* out;
} Replay;

static void compute(Replay* r, double s) {
    r->out->compute_s += s;
    if (r->link > r->t) s *= 1 + r->p->cfg->cluster.contention; /* a collective on the link */
    r->t += s;
}

/* The compute thread waits for a collective that ends at *done. While it
 * waits nothing computes beside it: what is left of it runs at full speed
 * (cluster.comm_contention no longer applies), and the calls queued behind
 * it on the link move up by what that saves. */
static void wait_for(Replay* r, double* done, int kind) {
    if (*done <= r->t) return;
    const double cc = r->p->cfg->parallel.overlap ? r->p->cfg->cluster.comm_contention : 0;
    const double end = r->t + (*done - r->t) / (1 + cc), saved = *done - end, old = *done;
    if (saved > 0) {
        for (int g = 0; g < r->ag_issued; g++)
            if (r->ag_done[g] > old) r->ag_done[g] -= saved;
        for (int q = 0; q < r->rs_issued; q++)
            if (r->rs_done[q] > old) r->rs_done[q] -= saved;
        if (r->link >= old) r->link -= saved;
        *done = end;
    }
    r->out->exposed[kind] += *done - r->t;
    r->t = *done;
}

/* A collective of s seconds on the rank's link, after those queued: with
 * compute beside it (overlap on), cluster.comm_contention slower. */
static double on_link(Replay* r, double s) {
    const double start = r->link > r->t ? r->link : r->t;
    if (r->p->cfg->parallel.overlap) s *= 1 + r->p->cfg->cluster.comm_contention;
    r->link = start + s;
    r->out->busy_s += s;
    return r->link;
}

static void issue_gathers(Replay* r, const SchedPlan* sp, int upto) {
    for (; r->ag_issued < upto; r->ag_issued++)
        r->ag_done[r->ag_issued] = on_link(r, ag_s(r->p, sp->ag[r->ag_issued].unit));
}

static void retire(Replay* r, int upto) {
    for (; r->rs_retired < upto; r->rs_retired++) wait_for(r, &r->rs_done[r->rs_retired], 1);
}

int project_step(const TrainConfig* cfg, int n, int way, ProjStep* out, char* err, size_t errlen) {
    const LlamaConfig* m = &cfg->model;
    const double BT = (double)cfg->data.batch_size * cfg->data.seq_len;
    const int recompute = !strcmp(cfg->train.recompute, "full");
    Proj p = {.cfg = cfg, .n = n, .gpn = cfg->cluster.gpus_per_node, .way = way,
              .ep = m->n_experts > 0 ? cfg->parallel.ep : 1};
    const double ratio[3] = {cfg->cluster.ratio_params, cfg->cluster.ratio_grads, cfg->cluster.ratio_a2a};
    const zipcclDataType_t dts[3] = {cfg->comm.param_dtype, cfg->comm.reduce_dtype, cfg->comm.alltoall_dtype};
    for (int k = 0; k < 3; k++) p.ratio[k] = ratio[k] > 0 ? ratio[k] : default_ratio(k, dts[k]);
    p.flops_s = cfg->cluster.peak_tflops * 1e12 * cfg->cluster.mfu;
    zipcclTuneInit(&p.intra);
    p.intra.alpha = cfg->cluster.intra_us * 1e-6;
    p.intra.beta = cfg->cluster.intra_gbs * 1e9;
    for (int c = 0; c < ZIPCCL_MODEL_CODECS; c++) {
        p.intra.enc[c] = cfg->cluster.codec_enc_gbs * 1e9;
        p.intra.dec[c] = cfg->cluster.codec_dec_gbs * 1e9;
    }
    p.intra.memBw = cfg->cluster.mem_gbs * 1e9;
    p.intra.serialCodec = !cfg->cluster.codec_pipelined;
    p.intra.codecCallS = cfg->cluster.codec_call_us * 1e-6;
    p.inter = p.intra;
    p.inter.alpha = cfg->cluster.inter_us * 1e-6;
    /* a node's NICs shared by its GPUs */
    p.inter.beta = cfg->cluster.inter_gbit / 8 * 1e9 * cfg->cluster.nics_per_node / cfg->cluster.gpus_per_node;
    p.piece = zipcclTunePieceBytes(n > p.gpn ? p.inter.beta : p.intra.beta);

    if (way == PROJ_PLAN && fsdp_plan_build(cfg, &p.plan, err, errlen)) return -1;
    SchedPlan sp;
    if (sched_plan_for_config(cfg, n, &sp, err, errlen)) {
        if (way == PROJ_PLAN) plan_free(&p.plan);
        return -1;
    }
    memset(out, 0, sizeof *out);
    Replay r = {.p = &p, .out = out};
    r.ag_done = zrt_calloc((size_t)sp.n_ag + 1, sizeof(double), "projection");
    r.rs_done = zrt_calloc((size_t)sp.n_rs + 1, sizeof(double), "projection");
    const int hu = llama_head_unit(m);
    for (int i = 0; i < sp.n_ev; i++) {
        const SchedEvent* e = &sp.ev[i];
        retire(&r, e->rs_pre);
        issue_gathers(&r, &sp, e->ag_pre);
        const double per = BT / p.flops_s; /* seconds per FLOP per token */
        const int u = e->unit;
        const double xv = llama_unit_is_experts(m, u) ? 1 + cfg->cluster.maxvio : 1;
        switch (e->type) {
        case EV_ACQ:
            if (e->gather >= 0) {
                issue_gathers(&r, &sp, e->gather + 1);
                wait_for(&r, &r.ag_done[e->gather], 0);
            }
            break;
        case EV_REL:
            if (e->phase == 0) compute(&r, unit_fwd_flops(m, cfg->data.seq_len, u) * per * xv);
            else if (u == hu && hu == 0) compute(&r, 3 * head_fwd_flops(m) * per); /* tied head */
            break;
        case EV_GRDY: {
            double f = unit_fwd_flops(m, cfg->data.seq_len, u);
            double s = 2 * f; /* backward */
            if (u == hu && hu != 0) s += f; /* the head's forward runs in its backward hold */
            else if (recompute && u > 0) s += f;
            compute(&r, s * per * xv);
            if (e->rs >= 0 && e->rs < sp.n_rs) r.rs_done[r.rs_issued++] = on_link(&r, rs_s(&p, u));
            break;
        }
        case EV_DISP:
        case EV_COMB: { /* the exchange on the compute's path, its own link time */
            const double t0 = r.t, a2a = a2a_s(&p, u); /* u: the block */
            r.t += a2a;
            out->exposed[2] += r.t - t0;
            out->busy_s += a2a;
            break;
        }
        default: break;
        }
        issue_gathers(&r, &sp, e->ag_post);
        retire(&r, e->rs_post);
    }
    retire(&r, r.rs_issued);
    /* AdamW over this rank's shards: p, g, m, v read, p, m, v and the bf16
     * copy written, the norm's read: 34 bytes per parameter */
    double shard = 0;
    for (int u = 0; u < llama_num_units(m); u++) {
        int G, k;
        unit_group(&p, u, &G, &k);
        shard += unit_padded(&p, u, G) / G;
    }
    r.t += shard * 34 / (cfg->cluster.mem_gbs * 1e9);
    out->step_s = r.t;
    free(r.ag_done);
    free(r.rs_done);
    sched_plan_free(&sp);
    if (way == PROJ_PLAN) plan_free(&p.plan);
    return 0;
}

/* ---- the table ------------------------------------------------------------ */

/* The best compressed way's speedup over raw at n GPUs for cfg (with the
 * ways' steps in st when given). */
static int speedup(const TrainConfig* cfg, int n, ProjStep st[PROJ_NWAYS], int* best, double* x, char* err,
                   size_t errlen) {
    ProjStep tmp[PROJ_NWAYS];
    const int ways = st ? PROJ_NWAYS : PROJ_PLAN; /* the plan's column only where printed */
    if (!st) st = tmp;
    for (int w = 0; w < ways; w++)
        if (project_step(cfg, n, w, &st[w], err, errlen)) return -1;
    *best = st[PROJ_HIER].step_s < st[PROJ_COMPRESSED].step_s ? PROJ_HIER : PROJ_COMPRESSED;
    *x = st[PROJ_RAW].step_s / st[*best].step_s;
    return 0;
}

/* The band: the speedup at the corners of ratio +-5%, codec speed +-20%
 * and MFU +-10%. */
static int band(const TrainConfig* cfg, int n, double* lo, double* hi, char* err, size_t errlen) {
    TrainConfig* c = zrt_malloc(sizeof *c, "projection");
    const zipcclDataType_t dts[3] = {cfg->comm.param_dtype, cfg->comm.reduce_dtype, cfg->comm.alltoall_dtype};
    *lo = INFINITY, *hi = 0;
    int rc = 0;
    for (int corner = 0; corner < 8 && !rc; corner++) {
        memcpy(c, cfg, sizeof *c);
        const double fr = corner & 1 ? 1.05 : 0.95, fc = corner & 2 ? 1.2 : 0.8, fm = corner & 4 ? 1.1 : 0.9;
        double* r[3] = {&c->cluster.ratio_params, &c->cluster.ratio_grads, &c->cluster.ratio_a2a};
        for (int k = 0; k < 3; k++) *r[k] = (*r[k] > 0 ? *r[k] : default_ratio(k, dts[k])) * fr;
        c->cluster.codec_enc_gbs *= fc;
        c->cluster.codec_dec_gbs *= fc;
        c->cluster.mfu = fmin(1, c->cluster.mfu * fm);
        int b;
        double x;
        rc = speedup(c, n, NULL, &b, &x, err, errlen);
        if (!rc) *lo = fmin(*lo, x), *hi = fmax(*hi, x);
    }
    free(c);
    return rc;
}

/* The NIC line rate (Gbit/s) below which compression pays at n GPUs: where
 * the best compressed step equals the raw one (bisection on a log scale
 * over 0.01 .. 1e5 Gbit/s); INFINITY: it pays at every rate, 0: at none. */
static int break_even(const TrainConfig* cfg, int n, double* gbit, char* err, size_t errlen) {
    TrainConfig* c = zrt_malloc(sizeof *c, "projection");
    memcpy(c, cfg, sizeof *c);
    double lo = log(0.01), hi = log(1e5), x;
    int b, rc = 0;
    c->cluster.inter_gbit = exp(hi);
    if ((rc = speedup(c, n, NULL, &b, &x, err, errlen)) || x > 1) {
        *gbit = INFINITY;
        goto done;
    }
    c->cluster.inter_gbit = exp(lo);
    if ((rc = speedup(c, n, NULL, &b, &x, err, errlen)) || x <= 1) {
        *gbit = 0;
        goto done;
    }
    for (int it = 0; it < 40 && !rc; it++) {
        const double mid = (lo + hi) / 2;
        c->cluster.inter_gbit = exp(mid);
        rc = speedup(c, n, NULL, &b, &x, err, errlen);
        if (x > 1) lo = mid;
        else hi = mid;
    }
    *gbit = exp((lo + hi) / 2);
done:
    free(c);
    return rc;
}

/* What bounds the raw step: "compute" when its exposed communication is
 * under 10% of it; else "latency" when taking the links' latency away
 * halves that exposure, "link" when it does not. */
static const char* bound_of(const TrainConfig* cfg, int n, const ProjStep* raw, char* err, size_t errlen) {
    const double x = raw->exposed[0] + raw->exposed[1] + raw->exposed[2];
    if (x < 0.1 * raw->step_s) return "compute";
    TrainConfig* c = zrt_malloc(sizeof *c, "projection");
    memcpy(c, cfg, sizeof *c);
    c->cluster.intra_us = c->cluster.inter_us = 0;
    ProjStep z;
    const char* what = "link";
    if (project_step(c, n, PROJ_RAW, &z, err, errlen) == 0 &&
        z.exposed[0] + z.exposed[1] + z.exposed[2] < 0.5 * x)
        what = "latency";
    free(c);
    return what;
}

static void echo(const TrainConfig* cfg, FILE* f, const char* key, const char* value) {
    char w[600];
    fprintf(f, "#   %-26s %-14s %s\n", key, value, config_where(cfg, key, w, sizeof w));
}

static void echo_num(const TrainConfig* cfg, FILE* f, const char* key, double v) {
    char b[32];
    snprintf(b, sizeof b, "%g", v);
    echo(cfg, f, key, b);
}

int project_run(const TrainConfig* cfg, FILE* f, FILE* json, char* err, size_t errlen) {
    const LlamaConfig* m = &cfg->model;
    const struct { const char* key; double v; } num[] = {
        {"cluster.gpus_per_node", cfg->cluster.gpus_per_node}, {"cluster.intra_gbs", cfg->cluster.intra_gbs},
        {"cluster.intra_us", cfg->cluster.intra_us},           {"cluster.inter_gbit", cfg->cluster.inter_gbit},
        {"cluster.nics_per_node", cfg->cluster.nics_per_node}, {"cluster.inter_us", cfg->cluster.inter_us},
        {"cluster.peak_tflops", cfg->cluster.peak_tflops},     {"cluster.mfu", cfg->cluster.mfu},
        {"cluster.mem_gbs", cfg->cluster.mem_gbs},             {"cluster.codec_enc_gbs", cfg->cluster.codec_enc_gbs},
        {"cluster.codec_dec_gbs", cfg->cluster.codec_dec_gbs}, {"cluster.codec_call_us", cfg->cluster.codec_call_us},
        {"cluster.codec_pipelined", cfg->cluster.codec_pipelined},
        {"cluster.contention", cfg->cluster.contention},       {"cluster.comm_contention", cfg->cluster.comm_contention},       {"cluster.maxvio", cfg->cluster.maxvio},
    };
    if (cfg->cluster.baseline != zipcclStrategyNative && cfg->cluster.baseline != zipcclStrategyRaw) {
        char w[600];
        return zrt_errf(err, errlen, "%s: cluster.baseline must be native or raw (the uncompressed way)",
                        config_where(cfg, "cluster.baseline", w, sizeof w));
    }
    if (cfg->cluster.gpus_min > cfg->cluster.gpus_max) {
        char w[600];
        return zrt_errf(err, errlen, "%s: cluster.gpus_min %d is above cluster.gpus_max %d",
                        config_where(cfg, "cluster.gpus_min", w, sizeof w), cfg->cluster.gpus_min,
                        cfg->cluster.gpus_max);
    }
    fprintf(f, "# projection of %s onto the cluster below (docs/SCALE.md); each input, its value, "
               "where it came from\n", cfg->source);
    fprintf(f, "# the run: %.3g B parameters, %d x %d tokens per GPU per micro-batch, %d micro-batches, "
               "%.6g GFLOP per token, model.compute %s, recompute %s, EP %d\n",
            (double)llama_num_params(m) / 1e9, cfg->data.batch_size, cfg->data.seq_len, cfg->data.grad_accum,
            llama_flops_per_token(m, cfg->data.seq_len) / 1e9, cfg->runtime.compute, cfg->train.recompute,
            m->n_experts > 0 ? cfg->parallel.ep : 1);
    fprintf(f, "# the plan: gathers %s, reduce-scatters %s%s, exchange %s; prefetch depth %d, "
               "reduce-scatters in flight %d, overlap %s\n",
            zipcclTypeName(cfg->comm.param_dtype), zipcclTypeName(cfg->comm.reduce_dtype),
            cfg->train.rank_invariant ? " (rank_invariant: All-to-Alls)" : "",
            zipcclTypeName(cfg->comm.alltoall_dtype), cfg->parallel.prefetch ? cfg->parallel.prefetch_depth : 0,
            cfg->parallel.max_reduces_in_flight, cfg->parallel.overlap ? "on" : "off");
    for (size_t i = 0; i < sizeof num / sizeof num[0]; i++) echo_num(cfg, f, num[i].key, num[i].v);
    echo(cfg, f, "cluster.baseline", cfg->cluster.baseline == zipcclStrategyNative ? "native" : "raw");
    const char* rk[3] = {"cluster.ratio_params", "cluster.ratio_grads", "cluster.ratio_a2a"};
    const double rv[3] = {cfg->cluster.ratio_params, cfg->cluster.ratio_grads, cfg->cluster.ratio_a2a};
    const zipcclDataType_t dts[3] = {cfg->comm.param_dtype, cfg->comm.reduce_dtype, cfg->comm.alltoall_dtype};
    for (int k = 0; k < 3; k++) {
        if (rv[k] > 0) {
            echo_num(cfg, f, rk[k], rv[k]);
            continue;
        }
        fprintf(f, "#   %-26s %-14g by %s: docs/BENCHMARKS.md \"Real tensors\" / \"Mixture-of-experts "
                   "training\"\n",
                rk[k], default_ratio(k, dts[k]), zipcclTypeName(dts[k]));
    }
    fprintf(f, "#\n# %6s %5s | %9s %9s %9s %9s | %-10s %8s %8s %8s | %7s %13s | %13s | %s\n", "gpus", "nodes",
            "raw s", "compr s", "hier s", "plan s", "best", "x AG ms", "x RS ms", "x A2A ms", "speedup", "band",
            "pays < Gbit/s", "bound");
    static const char* const way_name[PROJ_NWAYS] = {"raw", "compressed", "hier", "plan"};
    for (long n = cfg->cluster.gpus_min; n <= cfg->cluster.gpus_max; n *= 2) {
        ProjStep st[PROJ_NWAYS];
        int b;
        double x, lo, hi, be;
        if (speedup(cfg, (int)n, st, &b, &x, err, errlen) || band(cfg, (int)n, &lo, &hi, err, errlen) ||
            break_even(cfg, (int)n, &be, err, errlen))
            return -1;
        const char* bound = bound_of(cfg, (int)n, &st[PROJ_RAW], err, errlen);
        const int gpn = cfg->cluster.gpus_per_node, nodes = (int)((n + gpn - 1) / gpn);
        char bes[32];
        if (n <= gpn) snprintf(bes, sizeof bes, "- (1 node)");
        else if (isinf(be)) snprintf(bes, sizeof bes, "any");
        else if (be == 0) snprintf(bes, sizeof bes, "none");
        else snprintf(bes, sizeof bes, "%.3g", be);
        fprintf(f, "  %6ld %5d | %9.4f %9.4f %9.4f %9.4f | %-10s %8.2f %8.2f %8.2f | %6.3fx %5.3f-%5.3fx | %13s | %s\n",
                n, nodes, st[PROJ_RAW].step_s, st[PROJ_COMPRESSED].step_s, st[PROJ_HIER].step_s,
                st[PROJ_PLAN].step_s, way_name[b],
                st[b].exposed[0] * 1e3, st[b].exposed[1] * 1e3, st[b].exposed[2] * 1e3, x, lo, hi, bes, bound);
        if (json)
            fprintf(json,
                    "{\"gpus\": %ld, \"nodes\": %d, \"raw_s\": %.6g, \"compressed_s\": %.6g, \"hier_s\": %.6g, "
                    "\"plan_s\": %.6g, "
                    "\"best\": \"%s\", \"compute_s\": %.6g, \"exposed_ag_s\": %.6g, \"exposed_rs_s\": %.6g, "
                    "\"exposed_a2a_s\": %.6g, \"raw_exposed_s\": %.6g, \"speedup\": %.6g, \"speedup_lo\": %.6g, "
                    "\"speedup_hi\": %.6g, \"pays_below_gbit\": %.6g, \"bound\": \"%s\", \"inter_gbit\": %g, "
                    "\"tokens_per_gpu_s\": %.6g}\n",
                    n, nodes, st[PROJ_RAW].step_s, st[PROJ_COMPRESSED].step_s, st[PROJ_HIER].step_s,
                    st[PROJ_PLAN].step_s, way_name[b], st[b].compute_s, st[b].exposed[0], st[b].exposed[1], st[b].exposed[2],
                    st[PROJ_RAW].exposed[0] + st[PROJ_RAW].exposed[1] + st[PROJ_RAW].exposed[2], x, lo, hi,
                    isinf(be) ? 1e308 : be, bound, cfg->cluster.inter_gbit,
                    (double)cfg->data.batch_size * cfg->data.seq_len * cfg->data.grad_accum / st[b].step_s);
    }
    fprintf(f, "# plan: the config's own strategies and algorithms per unit (comm.*, overrides; auto as auto "
               "decides); speedup: raw step / best compressed step; band: ratio +-5%%, codec +-20%%, MFU +-10%%; "
               "pays < : the NIC rate below which the best compressed way is faster; bound: of the raw step\n");
    return 0;
}
