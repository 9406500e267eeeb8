/*
 * fsdp.c — fully sharded data parallelism: the one file to read to learn it.
 *
 * The picture, for N ranks and one unit of P (padded) parameters:
 *
 *   rank r owns   param[r*S : (r+1)*S]   S = P / N      (fp32 master weights)
 *                 grad [r*S : (r+1)*S]   m, v likewise  (AdamW state)
 *
 *   forward   acquire(u)    all-gather the N shards -> full[P]    (comm_ag)
 *             release(u)    free full[] (reshard_after_forward)
 *   backward  acquire(u)    all-gather again (unless still held)
 *             grad_buffer   full-size gfull[P], the model accumulates into it
 *             grads_ready   reduce-scatter(sum) gfull -> this rank's S values
 *                           (comm_rs), added to grad[] at the micro-batch end
 *   step      grad *= 1/(N * grad_accum): the mean over the global batch
 *             clip by the global norm, AdamW on the shards (train.c)
 *
 * Unit 0 (embedding, final norm, head) is the "root" unit: the model reads
 * it first and last in forward and first again in backward, so it stays
 * gathered for the whole step instead of being gathered three times.
 *
 * Mixed precision. param_dtype bf16: each rank rounds its fp32 shard to bf16
 * (round to nearest even), the all-gather moves bf16 (half the bytes), and
 * the model reads the gathered unit in bf16 as it is (half the memory of
 * a held unit; models/weights.h), so every rank computes with exactly the
 * same bf16 values while the master weights stay fp32.
 * reduce_dtype bf16: the full gradient is rounded to bf16 before the
 * reduce-scatter; the reduced shard is widened and accumulated in fp32.
 *
 * When. This file is the mechanism only: runtime/scheduler.c decides when each
 * gather and reduce-scatter is issued and waited, and owns the buffers
 * (the model reaches these functions only through the scheduler's hooks).
 * "blocked_s" counts the time the compute thread waits on a collective: the
 * exposed communication time of the step log.
 *
 * Every collective names its strategy, codec and algorithm per unit and
 * kind: the communication plan (runtime/plan.c) built here at start.
 */
#include "fsdp.h"

#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "device_setup.h"
#include "kernels.h"
#include "zipccl_float.h"
#include "log.h"
#include "optim.h"
#include "safetensors.h"

void fsdp_unit_name(const LlamaConfig* m, int u, char* out, size_t n) {
    if (u == 0) snprintf(out, n, "outer");
    else if (u == llama_head_unit(m)) snprintf(out, n, "head");
    else if (llama_unit_is_experts(m, u)) snprintf(out, n, "layers.%d.experts", llama_unit_layer(m, u));
    else snprintf(out, n, "layers.%d", u - 1);
}

void fsdp_unit_kinds(const LlamaConfig* m, int ep, int u, int has[PLAN_NKINDS]) {
    has[PLAN_AG] = has[PLAN_RS] = 1;
    /* the expert exchange of block l is filed under its unit layers.l */
    has[PLAN_A2A] = ep > 1 && m->n_experts > 0 && u >= 1 && u <= m->n_layers &&
                    llama_layer_is_moe(m, u - 1);
}

static int group_rank(const Fsdp* f, const FsdpUnit* U) { return U->group ? f->edp_rank : f->rank; }
static int group_size(const Fsdp* f, const FsdpUnit* U) { return U->group ? f->edp_size : f->nranks; }
static zipcclComm_t ag_comm(const Fsdp* f, const FsdpUnit* U) { return U->group ? f->comm_ag_x : f->comm_ag; }
static void sumsq_table(Fsdp* f);
static zipcclComm_t rs_comm(const Fsdp* f, const FsdpUnit* U) { return U->group ? f->comm_rs_x : f->comm_rs; }

int fsdp_plan_build(const TrainConfig* cfg, CommPlan* plan, char* err, size_t errlen) {
    const LlamaConfig* m = &cfg->model;
    const int n = llama_num_units(m), ep = m->n_experts > 0 ? cfg->parallel.ep : 1;
    char (*names)[32] = zrt_calloc((size_t)n, sizeof *names, "unit names");
    int (*has)[PLAN_NKINDS] = zrt_calloc((size_t)n, sizeof *has, "unit kinds");
    for (int u = 0; u < n; u++) {
        fsdp_unit_name(m, u, names[u], sizeof names[u]);
        fsdp_unit_kinds(m, ep, u, has[u]);
    }
    const int rc = plan_build(plan, cfg, n, (const char(*)[32])names,
                              (const int(*)[PLAN_NKINDS])has, err, errlen);
    free(names);
    free(has);
    return rc;
}

void fsdp_init(Fsdp* f, const TrainConfig* cfg, const ZrtKernels* K, CommPlan* plan) {
    memset(f, 0, sizeof *f);
    f->cfg = cfg;
    f->K = K;
    MPI_Comm_rank(MPI_COMM_WORLD, &f->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &f->nranks);
    f->n_units = llama_num_units(&cfg->model);
    trainCheck(f->n_units <= FSDP_MAX_UNITS, "model has %d units, FSDP handles at most %d",
               f->n_units, FSDP_MAX_UNITS);
    f->param_dtype = cfg->comm.param_dtype;
    f->reduce_dtype = cfg->comm.reduce_dtype;
    f->invariant = cfg->train.rank_invariant;
    /* ZRT_CHECK_MIN_RATIO=R: a step shrinks when raw / wire exceeds R
     * (default 1: any saving; fsdp_check_compression), read once */
    const char* env = getenv("ZRT_CHECK_MIN_RATIO");
    f->check_min_ratio = 1.0;
    if (env && *env) {
        char* end;
        f->check_min_ratio = strtod(env, &end);
        trainCheck(*end == 0 && f->check_min_ratio >= 1 && f->check_min_ratio < 1e6,
                   "ZRT_CHECK_MIN_RATIO='%s': expected a number >= 1 (raw / wire a step must beat)",
                   env);
    }
    while (f->invariant && (1 << f->levels) < cfg->data.grad_accum) f->levels++;

    /* Three communicators so parameter gathers, gradient reductions and the
     * small bookkeeping gathers never queue behind each other. */
    MPI_Comm world = MPI_COMM_WORLD;
    zipcclCheck(zipcclCommInitMpi(&f->comm_ag, &world));
    zipcclCheck(zipcclCommInitMpi(&f->comm_rs, &world));
    zipcclCheck(zipcclCommInitMpi(&f->comm_misc, &world));

    /* Expert parallelism: EP groups of consecutive ranks (expert.c); the
     * ranks with the same place in their groups hold the same experts and
     * form the expert-data-parallel group. */
    f->ep = cfg->model.n_experts > 0 ? cfg->parallel.ep : 1;
    f->edp_rank = f->rank;
    f->edp_size = f->nranks;
    /* The plan first (the caller built it from the config, once): the
     * expert exchange takes its configs from it. */
    trainCheck(plan && plan->n_units == f->n_units, "fsdp: a communication plan of %d units "
               "for a model of %d", plan ? plan->n_units : -1, f->n_units);
    f->plan = *plan;
    memset(plan, 0, sizeof *plan);
    if (f->ep > 1) {
        char err[256];
        zipcclCallConfig_t* xc = zrt_malloc((size_t)cfg->model.n_layers * sizeof *xc, "EP configs");
        for (int l = 0; l < cfg->model.n_layers; l++) {
            const PlanEntry* e = &f->plan.e[1 + l][PLAN_A2A];
            xc[l] = e->applies ? e->cfg
                               : (zipcclCallConfig_t){cfg->comm.strategy, cfg->comm.codec,
                                                      zipcclAlgoDefault};
        }
        trainCheck(!expert_init(&f->expert, f->ep, cfg->model.n_experts, cfg->model.n_layers, xc,
                                cfg->comm.alltoall_dtype, K, err, sizeof err),
                   "%s", err);
        free(xc);
        MPI_Comm edp;
        MPI_Comm_split(MPI_COMM_WORLD, f->rank % f->ep, f->rank / f->ep, &edp);
        MPI_Comm_rank(edp, &f->edp_rank);
        MPI_Comm_size(edp, &f->edp_size);
        zipcclCheck(zipcclCommInitMpi(&f->comm_ag_x, &edp));
        zipcclCheck(zipcclCommInitMpi(&f->comm_rs_x, &edp));
        MPI_Comm_free(&edp);
    }
    /* On a device the gathers, reduce-scatters and the expert exchange take
     * device buffers: ZipCCL stages them, or codes compressed calls on the
     * GPU (COLLECTIVES.md §5a). */
    if (device_comms_on_device(K)) {
        zipcclComm_t dev[5] = {f->comm_ag, f->comm_rs, f->comm_ag_x, f->comm_rs_x, f->expert.comm};
        device_attach_comms(cfg, K, dev, f->ep > 1 ? 5 : 2, f->rank, f->ep > 1);
    }

    f->units = zrt_calloc((size_t)f->n_units, sizeof(FsdpUnit), "FSDP units");
    f->host_state = zrt_calloc((size_t)f->n_units * 3, sizeof(float*), "FSDP host copies");
    float* init = NULL;
    size_t init_cap = 0;
    for (int u = 0; u < f->n_units; u++) {
        FsdpUnit* U = &f->units[u];
        fsdp_unit_name(&cfg->model, u, U->name, sizeof U->name);
        U->full_numel = U->numel = llama_unit_numel(&cfg->model, u);
        if (f->ep > 1 && llama_unit_is_experts(&cfg->model, u)) {
            U->group = 1;
            U->numel = (size_t)f->expert.E_local * llama_expert_numel(&cfg->model);
            U->full_off = (size_t)f->expert.first * llama_expert_numel(&cfg->model);
        }
        const size_t G = (size_t)group_size(f, U);
        U->padded = fsdp_pad(U->numel, G, f->invariant);
        U->shard = U->padded / G;
        float** st[4] = {&U->param, &U->grad, &U->m, &U->v};
        for (int i = 0; i < 4; i++) {
            *st[i] = zdev_alloc(K->dev, U->shard * sizeof(float));
            trainCheck(*st[i], "out of %s memory for the shards of %s (%zu floats each)", K->name,
                       U->name, U->shard);
            zdevCheck(zdev_memset_async(K->dev, *st[i], 0, U->shard * sizeof(float), NULL));
        }
        if (f->invariant) { /* the micro-batch tree's pending subtrees (fsdp.h) */
            U->tree_level = zrt_calloc((size_t)f->levels + 1, sizeof(float*), "tree levels");
            for (int k = 0; k < f->levels; k++) {
                U->tree_level[k] = zdev_alloc(K->dev, U->shard * sizeof(float));
                trainCheck(U->tree_level[k], "out of %s memory for the gradient tree of %s",
                           K->name, U->name);
            }
            f->n_blocks += U->shard / ZRT_SUMSQ_BLOCK;
            if (f->reduce_dtype == zipcclBfloat16 && U->padded > f->n_scratch) f->n_scratch = U->padded;
        }
        U->ag_cfg = f->plan.e[u][PLAN_AG].cfg;
        U->rs_cfg = f->plan.e[u][PLAN_RS].cfg;

        /* Every rank runs the same seeded init of the whole unit and keeps
         * its slice: the result is independent of the rank count and EP.
         * Weights from a Hugging Face directory (model.init_from) replace it
         * (hf_load, or a checkpoint on resume), so it is skipped: a normal
         * draw per parameter, for nothing. */
        if (cfg->init_from[0]) continue;
        const size_t need = U->full_numel > U->padded ? U->full_numel : U->padded;
        if (need > init_cap) {
            free(init);
            init_cap = need;
            init = zrt_malloc(init_cap * sizeof(float), "init buffer");
        }
        memset(init, 0, init_cap * sizeof(float));
        llama_unit_init(&cfg->model, u, (unsigned long long)cfg->train.seed, init);
        fsdp_load_full(f, u, 0, init);
    }
    free(init);
    if (f->invariant) {
        if (f->n_scratch) {
            f->tree_scratch = zdev_alloc(K->dev, f->n_scratch * sizeof(float));
            trainCheck(f->tree_scratch, "out of %s memory for the gradient tree's scratch", K->name);
        }
        f->blocks_dev = zdev_alloc(K->dev, f->n_blocks * sizeof(double));
        trainCheck(f->blocks_dev, "out of %s memory for the norm's block sums", K->name);
        f->blocks_host = zrt_malloc(f->n_blocks * sizeof(double), "the norm's block sums");
        f->blocks_all = zrt_malloc(f->n_blocks * f->nranks * sizeof(double), "the norm's block sums");
    }
    sumsq_table(f);
}

void fsdp_free(Fsdp* f) {
    if (!f->units) return;
    for (int u = 0; u < f->n_units; u++) {
        FsdpUnit* U = &f->units[u];
        zdev_free(f->K->dev, U->param);
        zdev_free(f->K->dev, U->grad);
        zdev_free(f->K->dev, U->m);
        zdev_free(f->K->dev, U->v);
        for (int k = 0; k < f->levels && U->tree_level; k++) zdev_free(f->K->dev, U->tree_level[k]);
        free(U->tree_level);
    }
    if (f->tree_scratch) zdev_free(f->K->dev, f->tree_scratch);
    if (f->blocks_dev) zdev_free(f->K->dev, f->blocks_dev);
    free(f->blocks_host);
    free(f->blocks_all);
    fsdp_host_release(f);
    free(f->host_state);
    free(f->slices);
    free(f->grad_of);
    free(f->grad_n);
    free(f->units);
    plan_free(&f->plan);
    free(f->dump_param);
    free(f->dump_grad);
    zipcclCommDestroy(f->comm_ag);
    zipcclCommDestroy(f->comm_rs);
    zipcclCommDestroy(f->comm_misc);
    if (f->ep > 1) {
        expert_free(&f->expert);
        zipcclCommDestroy(f->comm_ag_x);
        zipcclCommDestroy(f->comm_rs_x);
    }
    memset(f, 0, sizeof *f);
}

/* ---- the mechanism the scheduler drives ---------------------------------- */

zipcclComm_t fsdp_comm(const Fsdp* f, int u, int kind) {
    const FsdpUnit* U = &f->units[u];
    return kind == PLAN_AG ? ag_comm(f, U) : rs_comm(f, U);
}

/* The collectives' buffers are K's memory (the scheduler's pools: host
 * memory on a host table, the device's on a device, where ZipCCL takes
 * device buffers), so one path serves both: a bf16 gather sends the
 * shard's cast in `send`, an fp32 one the shard itself. */
int fsdp_unit_local(const Fsdp* f, int u) { return group_size(f, &f->units[u]) == 1; }

void fsdp_gather_start(Fsdp* f, int u, void* send, void* recv, zipcclRequest_t* req) {
    FsdpUnit* U = &f->units[u];
    if (fsdp_unit_local(f, u)) { /* the cast a bf16 unit is read as, or nothing */
        *req = NULL;
        if (f->param_dtype == zipcclBfloat16) f->K->round_to_bf16(recv, U->param, U->shard);
        else trainCheck(recv == U->param, "fsdp: %s is local: the model reads its shard", U->name);
        return;
    }
    const void* out = U->param;
    if (f->param_dtype == zipcclBfloat16) {
        trainCheck(send, "fsdp: the gather of %s without its send buffer", U->name);
        f->K->round_to_bf16(send, U->param, U->shard);
        out = send;
    }
    zipcclCheck(zipcclAllGatherAsync(out, recv, U->shard, f->param_dtype, ag_comm(f, U),
                                     &U->ag_cfg, NULL, req));
    f->gathers++;
}

void fsdp_gather_finish(Fsdp* f, int u, const void* recv) {
    /* the model reads recv as it is, a bf16 unit too (LlamaParamHooks.bf16_units) */
    fsdp_dump_param(f, u, recv);
}

size_t fsdp_recv_count(const Fsdp* f, int u) {
    return f->invariant ? f->units[u].padded : f->units[u].shard;
}

/* ---- train.rank_invariant: the gradient tree (fsdp.h) ---- */

static void dev_copy(Fsdp* f, float* dst, const float* src, size_t n) {
    zdevCheck(zdev_copy_async(f->K->dev, dst, src, n * sizeof(float), ZDEV_DEVICE_TO_DEVICE, NULL));
}

/* A node of the tree: left + right into out (fp32; then rounded to bf16
 * values with a bf16 reduction). */
static void tree_node(Fsdp* f, float* out, const float* left, const float* right, size_t n) {
    f->K->add(out, left, right, n);
    if (f->reduce_dtype == zipcclBfloat16) f->K->round_bf16_inplace(out, n);
}

/* Micro-batch a's subtree v (shard floats; overwritten) into unit U's
 * binary counter: while a has a 1 at level k, v := level[k] + v (the
 * earlier micro-batches on the left); at its first 0 bit v waits there;
 * past the top, v is the step's sum, the gradient shard. */
static void tree_add(Fsdp* f, FsdpUnit* U, float* v) {
    const int a = U->tree_micro++;
    trainCheck(a < (1 << f->levels), "fsdp: %s: micro-batch %d of a tree of %d", U->name, a,
               1 << f->levels);
    for (int k = 0; k < f->levels; k++) {
        if (!((a >> k) & 1)) {
            dev_copy(f, U->tree_level[k], v, U->shard);
            return;
        }
        tree_node(f, v, U->tree_level[k], v, U->shard);
    }
    dev_copy(f, U->grad, v, U->shard);
}

/* The ranks' subtree of this micro-batch from their blocks of our shard,
 * block q from rank q (G of them, a power of two): pairs at distance 1,
 * then 2, 4, ...: ((b0 + b1) + (b2 + b3)) + ...; the result in block 0. */
static void tree_ranks(Fsdp* f, float* b, size_t n, int G) {
    for (int d = 1; d < G; d *= 2)
        for (int q = 0; q + d < G; q += 2 * d) tree_node(f, b + (size_t)q * n, b + (size_t)q * n, b + (size_t)(q + d) * n, n);
}

/* A leaf of a bf16 tree as the reduce-scatter's owner sees it: 0 + the
 * widened bf16 value (add_bf16 into zeros), from bf16 (in16) or from fp32
 * rounded in place (in32): the same bits either way. */
static float* tree_leaves_bf16(Fsdp* f, const uint16_t* in16, float* in32, size_t n) {
    zdevCheck(zdev_memset_async(f->K->dev, f->tree_scratch, 0, n * sizeof(float), NULL));
    if (in16) {
        f->K->add_bf16(f->tree_scratch, in16, n);
    } else {
        f->K->round_bf16_inplace(in32, n);
        f->K->add(f->tree_scratch, f->tree_scratch, in32, n);
    }
    return f->tree_scratch;
}

void fsdp_reduce_start(Fsdp* f, int u, const float* gfull, void* send, void* recv,
                       zipcclRequest_t* req) {
    FsdpUnit* U = &f->units[u];
    if (fsdp_unit_local(f, u) && f->invariant) { /* the one leaf of this micro-batch */
        *req = NULL;
        fsdp_dump_grad(f, u, gfull);
        float* v = (float*)gfull; /* the model's buffer, free after this */
        if (f->reduce_dtype == zipcclBfloat16) v = tree_leaves_bf16(f, NULL, v, U->shard);
        tree_add(f, U, v);
        return;
    }
    if (fsdp_unit_local(f, u)) { /* into the fp32 shard, no rounding */
        *req = NULL;
        fsdp_dump_grad(f, u, gfull);
        f->K->add(U->grad, U->grad, gfull, U->shard);
        return;
    }
    if (f->reduce_dtype == zipcclBfloat16) {
        trainCheck(send, "fsdp: the reduce-scatter of %s without its send buffer", U->name);
        f->K->round_to_bf16(send, gfull, U->padded);
    } else {
        send = (void*)gfull;
    }
    fsdp_dump_grad(f, u, send);
    if (f->invariant) { /* every rank's block of our shard, summed in the tree at finish */
        zipcclCheck(zipcclAlltoAllAsync(send, recv, U->shard, f->reduce_dtype, rs_comm(f, U),
                                        &U->rs_cfg, NULL, req));
        return;
    }
    zipcclCheck(zipcclReduceScatterAsync(send, recv, U->shard, f->reduce_dtype, zipcclSum,
                                         rs_comm(f, U), &U->rs_cfg, NULL, req));
}

/* Called for a unit's reduce-scatters in issue order, so the fp32 sums into
 * the shard never depend on which collective happened to finish first. */
void fsdp_reduce_finish(Fsdp* f, int u, const void* recv) {
    FsdpUnit* U = &f->units[u];
    if (fsdp_unit_local(f, u)) return; /* added at start */
    if (f->invariant) {
        const int G = group_size(f, U);
        float* b = f->reduce_dtype == zipcclBfloat16
                       ? tree_leaves_bf16(f, recv, NULL, U->padded)
                       : (float*)recv; /* the scheduler's buffer, free after this */
        tree_ranks(f, b, U->shard, G);
        tree_add(f, U, b);
        return;
    }
    if (f->reduce_dtype == zipcclBfloat16) f->K->add_bf16(U->grad, recv, U->shard);
    else f->K->add(U->grad, U->grad, recv, U->shard);
}

/* A dump copies what a collective sent or received (K's memory). */
static void dump_copy(Fsdp* f, void* dst, const void* src, size_t bytes) {
    if (f->K->dev->host_access) memcpy(dst, src, bytes);
    else zdevCheck(zdev_download(f->K->dev, dst, src, bytes));
}

void fsdp_dump_param(Fsdp* f, int u, const void* buf) {
    if (!f->dump_armed || f->dump_param[u]) return;
    size_t bytes = f->units[u].padded * zipcclTypeSize(f->param_dtype);
    f->dump_param[u] = zrt_malloc(bytes, "tensor dump");
    dump_copy(f, f->dump_param[u], buf, bytes);
}

void fsdp_dump_grad(Fsdp* f, int u, const void* buf) {
    if (!f->dump_armed || f->dump_grad[u]) return;
    const size_t n = f->units[u].padded;
    f->dump_grad[u] = zrt_malloc(n * zipcclTypeSize(f->reduce_dtype), "tensor dump");
    if (!fsdp_unit_local(f, u) || f->reduce_dtype != zipcclBfloat16) {
        dump_copy(f, f->dump_grad[u], buf, n * zipcclTypeSize(f->reduce_dtype));
        return;
    }
    /* a local unit's gradient is fp32 (fsdp_unit_local); the file holds the
     * reduce dtype's cast, as a reduce-scatter would have sent it */
    float* g = zrt_malloc(n * sizeof(float), "tensor dump");
    dump_copy(f, g, buf, n * sizeof(float));
    uint16_t* out = f->dump_grad[u];
    for (size_t i = 0; i < n; i++) out[i] = zipcclFloatToBf16(g[i]);
    free(g);
}

void fsdp_zero_grads(Fsdp* f) {
    for (int u = 0; u < f->n_units; u++) {
        zdevCheck(zdev_memset_async(f->K->dev, f->units[u].grad, 0, f->units[u].shard * sizeof(float), NULL));
        f->units[u].tree_micro = 0;
    }
}

/* n doubles per rank, each added in rank order on every rank (in place).
 * A double travels as two fp32 words through a native (MPI) all-gather,
 * which moves bytes untouched; scalars have nothing to compress, and keeping
 * them off the compressed path keeps the per-kind compression counters about
 * the tensors only. */
void fsdp_gather_over_ranks(Fsdp* f, const double* x, size_t n, double* all) {
    zipcclCallConfig_t c = {zipcclStrategyNative, zipcclCodecDefault, zipcclAlgoDefault};
    double t0 = zrt_now();
    zipcclCheck(zipcclAllGather(x, all, 2 * n, zipcclFloat32, f->comm_misc, &c, NULL));
    f->blocked_s += zrt_now() - t0;
    f->misc_s += zrt_now() - t0;
}

void fsdp_sum_over_ranks(Fsdp* f, double* x, int n) {
    double* all = zrt_malloc((size_t)f->nranks * n * sizeof(double), "rank values");
    fsdp_gather_over_ranks(f, x, (size_t)n, all);
    for (int i = 0; i < n; i++) {
        double s = 0;
        for (int r = 0; r < f->nranks; r++) s += all[(size_t)r * n + i];
        x[i] = s;
    }
    free(all);
}

double fsdp_tree_sum(double* v, int n) {
    for (int d = 1; d < n; d *= 2)
        for (int q = 0; q + d < n; q += 2 * d) v[q] += v[q + d];
    return n > 0 ? v[0] : 0.0;
}

static double sum_over_ranks(Fsdp* f, double x) {
    fsdp_sum_over_ranks(f, &x, 1);
    return x;
}

double fsdp_mean_over_ranks(Fsdp* f, double x) { return sum_over_ranks(f, x) / f->nranks; }

/* The norm's parts: one per unit, or (rank_invariant) one per
 * ZRT_SUMSQ_BLOCK block of the shards (they start on a block: fsdp_pad),
 * which fsdp_grad_norm_of adds in the whole model's block order. The table
 * of their pointers is made once (sumsq_table, at fsdp_init). */
static void sumsq_table(Fsdp* f) {
    const size_t n = f->invariant ? f->n_blocks : (size_t)f->n_units;
    f->grad_of = zrt_malloc(n * sizeof *f->grad_of, "the norm's table");
    f->grad_n = zrt_malloc(n * sizeof *f->grad_n, "the norm's table");
    size_t k = 0;
    for (int u = 0; u < f->n_units; u++) {
        const FsdpUnit* U = &f->units[u];
        if (!f->invariant) {
            f->grad_of[k] = U->grad;
            f->grad_n[k++] = U->shard;
            continue;
        }
        for (size_t a = 0; a < U->shard; a += ZRT_SUMSQ_BLOCK, k++) {
            f->grad_of[k] = U->grad + a;
            f->grad_n[k] = ZRT_SUMSQ_BLOCK;
        }
    }
    f->n_sumsq = (int)n;
}

void fsdp_grad_sumsq(Fsdp* f, double* parts, float gscale) {
    f->K->sumsq_multi(f->invariant ? f->blocks_dev : parts, f->grad_of, f->grad_n, f->n_sumsq, gscale);
}

double fsdp_grad_norm_of(Fsdp* f, const double* parts) {
    if (f->invariant) { /* every block of the model, in order, as one rank has them */
        zdevCheck(zdev_download(f->K->dev, f->blocks_host, f->blocks_dev, f->n_blocks * sizeof(double)));
        fsdp_gather_over_ranks(f, f->blocks_host, f->n_blocks, f->blocks_all);
        double ss = 0;
        size_t first = 0; /* unit u's first block in each rank's list */
        for (int u = 0; u < f->n_units; u++) {
            const FsdpUnit* U = &f->units[u];
            const size_t nb = U->shard / ZRT_SUMSQ_BLOCK;
            /* the shards in model order: rank order, but an expert unit at
             * EP > 1 is EP slices (ranks i, i + EP, ... hold slice i's
             * shards), each starting on a block (config.c checks the
             * experts' size); the padding's zero blocks add nothing */
            const int ns = U->group ? f->ep : 1, nsh = U->group ? f->edp_size : f->nranks;
            for (int i = 0; i < ns; i++)
                for (int g = 0; g < nsh; g++) {
                    const size_t r = U->group ? (size_t)g * f->ep + i : (size_t)g;
                    for (size_t j = 0; j < nb; j++) ss += f->blocks_all[r * f->n_blocks + first + j];
                }
            first += nb;
        }
        return sqrt(ss);
    }
    double ss = 0;
    for (int u = 0; u < f->n_units; u++) ss += parts[u];
    return sqrt(sum_over_ranks(f, ss));
}

/* The slices: each tensor's overlap with this rank's shard of its unit
 * (an expert unit's: its slice of the experts), in unit and tensor order. */
static void make_slices(Fsdp* f, float wd) {
    f->n_slices = 0;
    for (int u = 0; u < f->n_units; u++) {
        FsdpUnit* U = &f->units[u];
        const int nt = llama_unit_tensors(&f->cfg->model, u, NULL, NULL, NULL, 0);
        size_t rows[nt > 0 ? nt : 1], cols[nt > 0 ? nt : 1];
        llama_unit_tensors(&f->cfg->model, u, NULL, rows, cols, nt);
        size_t lo, hi, off = 0;
        fsdp_shard_range(f, u, &lo, &hi);
        for (int k = 0; k < nt; k++) {
            const size_t a = off, b = off + rows[k] * cols[k];
            off = b;
            if (b <= lo || a >= hi) continue;
            const size_t s = a > lo ? a : lo, e = b < hi ? b : hi;
            if (f->n_slices == f->cap_slices) {
                f->cap_slices = f->cap_slices ? 2 * f->cap_slices : 64;
                f->slices = realloc(f->slices, (size_t)f->cap_slices * sizeof *f->slices);
                trainCheck(f->slices, "out of memory for the optimizer's tables");
            }
            f->slices[f->n_slices++] = (ZrtAdamWSlice){
                U->param + (s - lo), U->grad + (s - lo), U->m + (s - lo), U->v + (s - lo), e - s,
                cols[k] == 1 ? 0.0f : wd};
        }
    }
}

void fsdp_adamw(Fsdp* f, const ZrtAdamWStep* s, float gscale, float clip) {
    make_slices(f, s->weight_decay);
    f->K->adamw_multi(f->slices, f->n_slices, s, gscale, clip);
}

static float* state_of(FsdpUnit* U, int which) {
    return which == 0 ? U->param : which == 1 ? U->m : U->v;
}

size_t fsdp_full_floats(const Fsdp* f, int u) {
    const FsdpUnit* U = &f->units[u];
    return U->full_numel > U->padded ? U->full_numel : U->padded;
}

/* A device's host copy of one shard array, freed after a one-off use. */
static void host_copy_free(Fsdp* f, int u, int which) {
    float** h = &f->host_state[(size_t)u * 3 + which];
    free(*h);
    *h = NULL;
}

/* On a device the gather communicators take device buffers: the shard
 * itself goes out and the unit lands in a device buffer, then comes down. */
static void gather_device(Fsdp* f, FsdpUnit* U, int which, zipcclComm_t comm, float* out) {
    const ZrtKernels* K = f->K;
    float* d = zdev_alloc(K->dev, U->padded * sizeof(float));
    trainCheck(d, "out of %s memory gathering %s (%zu floats)", K->name, U->name, U->padded);
    zipcclCheck(zipcclAllGather(state_of(U, which), d, U->shard, zipcclFloat32, comm, &U->ag_cfg, NULL));
    zdevCheck(zdev_download(K->dev, out, d, U->padded * sizeof(float)));
    zdev_free(K->dev, d);
}

void fsdp_gather_full(Fsdp* f, int u, int which, float* out) {
    FsdpUnit* U = &f->units[u];
    const int dev = !f->K->dev->host_access;
    if (!U->group) {
        if (dev) {
            gather_device(f, U, which, f->comm_ag, out);
            return;
        }
        const float* mine = fsdp_shard_host(f, u, which, 1);
        zipcclCheck(zipcclAllGather(mine, out, U->shard, zipcclFloat32, f->comm_ag, &U->ag_cfg,
                                    NULL));
        return;
    }
    /* The group's slice (its experts), then the EP group's slices side by
     * side: EP rank i holds experts [i*E/EP, (i+1)*E/EP), so rank order is
     * expert order. Checkpoints only: plain MPI on the EP communicator. */
    float* slice = zrt_malloc(U->padded * sizeof(float), "expert gather");
    if (dev) {
        gather_device(f, U, which, f->comm_ag_x, slice);
    } else {
        const float* mine = fsdp_shard_host(f, u, which, 1);
        zipcclCheck(zipcclAllGather(mine, slice, U->shard, zipcclFloat32, f->comm_ag_x, &U->ag_cfg,
                                    NULL));
    }
    trainCheck(U->numel <= (size_t)INT32_MAX, "expert unit %s too large to gather", U->name);
    trainCheck(MPI_Allgather(slice, (int)U->numel, MPI_FLOAT, out, (int)U->numel, MPI_FLOAT,
                             *(MPI_Comm*)f->expert.mpi_ep) == MPI_SUCCESS,
               "gathering the experts of %s failed", U->name);
    free(slice);
}

void fsdp_shard_range(const Fsdp* f, int u, size_t* lo, size_t* hi) {
    const FsdpUnit* U = &f->units[u];
    size_t a = (size_t)group_rank(f, U) * U->shard, b = a + U->shard;
    if (a > U->numel) a = U->numel;
    if (b > U->numel) b = U->numel;
    *lo = U->full_off + a;
    *hi = U->full_off + b;
}

float* fsdp_shard_host(Fsdp* f, int u, int which, int download) {
    FsdpUnit* U = &f->units[u];
    float* st = state_of(U, which);
    if (f->K->dev->host_access) return st;
    float** h = &f->host_state[(size_t)u * 3 + which];
    if (!*h) {
        /* plain host memory: pinning a whole model's shards for a
         * checkpoint would cost more than the slower copy */
        *h = malloc(U->shard * sizeof(float));
        trainCheck(*h, "out of host memory for a copy of the shard of %s (%zu floats)", U->name,
                   U->shard);
    }
    if (download) zdevCheck(zdev_download(f->K->dev, *h, st, U->shard * sizeof(float)));
    return *h;
}

void fsdp_shard_commit(Fsdp* f, int u, int which) {
    if (f->K->dev->host_access) return;
    FsdpUnit* U = &f->units[u];
    const float* h = f->host_state[(size_t)u * 3 + which];
    trainCheck(h, "fsdp: %s committed without its host copy", U->name);
    zdevCheck(zdev_upload(f->K->dev, state_of(U, which), h, U->shard * sizeof(float)));
}

void fsdp_host_release(Fsdp* f) {
    if (!f->host_state) return;
    for (int u = 0; u < f->n_units; u++)
        for (int which = 0; which < 3; which++) host_copy_free(f, u, which);
}

void fsdp_load_full(Fsdp* f, int u, int which, const float* full) {
    FsdpUnit* U = &f->units[u];
    float* dst = fsdp_shard_host(f, u, which, 0);
    size_t lo = (size_t)group_rank(f, U) * U->shard;
    for (size_t i = 0; i < U->shard; i++)
        dst[i] = lo + i < U->numel ? full[U->full_off + lo + i] : 0.0f;
    fsdp_shard_commit(f, u, which);
    if (!f->K->dev->host_access) host_copy_free(f, u, which);
}

uint64_t fsdp_param_hash(Fsdp* f) {
    uint64_t h = ZRT_FNV_INIT;
    for (int u = 0; u < f->n_units; u++) {
        FsdpUnit* U = &f->units[u];
        float* full = zrt_malloc(fsdp_full_floats(f, u) * sizeof(float), "hash buffer");
        fsdp_gather_full(f, u, 0, full);
        h = zrt_fnv1a64(h, full, U->full_numel * sizeof(float));
        free(full);
    }
    return h;
}

/* ---- tensor dumps --------------------------------------------------------- */

void fsdp_dump_arm(Fsdp* f) {
    f->dump_param = zrt_calloc((size_t)f->n_units, sizeof(void*), "dump table");
    f->dump_grad = zrt_calloc((size_t)f->n_units, sizeof(void*), "dump table");
    f->dump_armed = 1;
}

static void write_dump(Fsdp* f, void** bufs, zipcclDataType_t dt, const char* path,
                       const char* kind) {
    char err[512];
    st_writer* w = st_writer_begin();
    trainCheck(w, "out of memory for the tensor dump");
    for (int u = 0; u < f->n_units; u++) {
        if (!bufs[u]) continue;
        int64_t shape[1] = {(int64_t)f->units[u].padded};
        trainCheck(!st_writer_add(w, f->units[u].name, dt == zipcclBfloat16 ? "BF16" : "F32", 1,
                                  shape, bufs[u], f->units[u].padded * zipcclTypeSize(dt), err,
                                  sizeof err),
                   "tensor dump: %s", err);
    }
    trainCheck(!st_writer_set_metadata(w, "kind", kind, err, sizeof err), "tensor dump: %s", err);
    /* Where each unit's tensors lie in it ("tensors.<unit>": name:offset:count,...,
     * offsets relative to this rank's part of the unit), so a reader can
     * measure the codec per tensor as well as per collective: a unit mixes
     * tensors of different scales (docs/BENCHMARKS.md, "Real tensors"). */
    const LlamaConfig* mc = &f->cfg->model;
    for (int u = 0; u < f->n_units; u++) {
        if (!bufs[u]) continue;
        const int nt = llama_unit_tensors(mc, u, NULL, NULL, NULL, 0);
        char (*names)[64] = zrt_malloc((size_t)nt * sizeof *names, "dump layout");
        size_t* rows = zrt_malloc((size_t)nt * 2 * sizeof *rows, "dump layout");
        llama_unit_tensors(mc, u, names, rows, rows + nt, nt);
        size_t cap = 64 + (size_t)nt * 96, len = 0, off = 0;
        char* val = zrt_malloc(cap, "dump layout");
        val[0] = 0;
        const size_t lo = f->units[u].full_off, hi = lo + f->units[u].numel;
        for (int t = 0; t < nt; t++) {
            const size_t n = rows[t] * rows[nt + t], a = off > lo ? off : lo,
                         b = off + n < hi ? off + n : hi;
            off += n;
            if (a >= b) continue; /* an expert this rank does not hold */
            len += (size_t)snprintf(val + len, cap - len, "%s%s:%zu:%zu", len ? "," : "",
                                    names[t], a - lo, b - a);
        }
        char key[64];
        snprintf(key, sizeof key, "tensors.%s", f->units[u].name);
        trainCheck(!st_writer_set_metadata(w, key, val, err, sizeof err), "tensor dump: %s", err);
        free(val);
        free(rows);
        free(names);
    }
    trainCheck(!st_writer_write(w, path, err, sizeof err), "tensor dump %s: %s", PRINTABLE(path),
               err);
    st_writer_free(w);
}

void fsdp_dump_write(Fsdp* f, const char* dir, int step) {
    if (!f->dump_armed) return;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        trainCheck(0, "--dump-tensors: cannot create %s: %s", PRINTABLE(dir), strerror(errno));
    char path[1024];
    snprintf(path, sizeof path, "%s/step%d_rank%d_params.safetensors", dir, step, f->rank);
    write_dump(f, f->dump_param, f->param_dtype, path, "params");
    snprintf(path, sizeof path, "%s/step%d_rank%d_grads.safetensors", dir, step, f->rank);
    write_dump(f, f->dump_grad, f->reduce_dtype, path, "grads");
    for (int u = 0; u < f->n_units; u++) {
        free(f->dump_param[u]);
        free(f->dump_grad[u]);
    }
    free(f->dump_param);
    free(f->dump_grad);
    f->dump_param = f->dump_grad = NULL;
    f->dump_armed = 0;
}

/* ---- counters and the compression invariant ------------------------------- */

void fsdp_comm_counters(const Fsdp* f, zipcclComm_t c, zipcclCollKind_t kind, zipcclCounters_t* out) {
    memset(out, 0, sizeof *out);
    if (f->invariant && c == f->comm_rs) { /* the gradients' All-to-Alls are its reduce-scatters */
        if (kind == zipcclCollAlltoAll) return;
        if (kind == zipcclCollReduceScatter) kind = zipcclCollAlltoAll;
    }
    zipcclCheck(zipcclCommGetCounters(c, kind, out));
}

static void add_counters(zipcclCounters_t* out, const zipcclCounters_t* c) {
    out->calls += c->calls;
    out->rawBytes += c->rawBytes;
    out->wireBytes += c->wireBytes;
    out->codecSeconds += c->codecSeconds;
    out->wireSeconds += c->wireSeconds;
    out->totalSeconds += c->totalSeconds;
    out->busBytes += c->busBytes;
    out->busSeconds += c->busSeconds;
    for (int s = 0; s < 5; s++) out->byStrategy[s] += c->byStrategy[s];
    for (int s = 0; s < ZIPCCL_NCODECS; s++) out->byCodec[s] += c->byCodec[s];
    for (int s = 0; s < ZIPCCL_NALGOS; s++) out->byAlgo[s] += c->byAlgo[s];
}

void fsdp_counters(Fsdp* f, zipcclCollKind_t kind, zipcclCounters_t* out) {
    memset(out, 0, sizeof *out);
    zipcclComm_t comms[6] = {f->comm_ag, f->comm_rs, f->comm_misc};
    int n = 3;
    if (f->ep > 1) {
        comms[n++] = f->comm_ag_x;
        comms[n++] = f->comm_rs_x;
        comms[n++] = f->expert.comm;
    }
    for (int i = 0; i < n; i++) {
        zipcclCounters_t c;
        fsdp_comm_counters(f, comms[i], kind, &c);
        add_counters(out, &c);
    }
}

/* The counters of the communicators that carry collective kind k (0
 * parameter gathers, 1 gradient reduce-scatters, 2 the expert exchange),
 * summed; the bookkeeping communicator's scalars are left out. */
static void kind_counters(Fsdp* f, int k, zipcclCounters_t* out) {
    memset(out, 0, sizeof *out);
    zipcclComm_t comms[2] = {k == 0 ? f->comm_ag : k == 1 ? f->comm_rs : NULL, NULL};
    if (f->ep > 1) comms[1] = k == 0 ? f->comm_ag_x : k == 1 ? f->comm_rs_x : f->expert.comm;
    const zipcclCollKind_t kind = k == 0   ? zipcclCollAllGather
                                  : k == 1 ? zipcclCollReduceScatter
                                           : zipcclCollAlltoAllv;
    for (int i = 0; i < 2; i++) {
        if (!comms[i]) continue;
        zipcclCounters_t c;
        fsdp_comm_counters(f, comms[i], kind, &c);
        add_counters(out, &c);
    }
}

void fsdp_check_compression_begin(Fsdp* f, zipcclCounters_t before[3]) {
    for (int k = 0; k < 3; k++) kind_counters(f, k, &before[k]);
}

/* Below this many raw bytes of a kind in a step, a compressed path may
 * rightly send as much as it got: every chunk is stored raw when it does not
 * shrink, and a frame's header then outweighs the saving (a rank left a few
 * expert rows by a capacity limit, split into chunks). The check still wants
 * compressed calls there; above it, fewer wire bytes as well. */
static const uint64_t kCheckMinBytes = 64 << 10;
/* A step whose data did not shrink is a warning, not an error: the codec is
 * lossless, so the numbers are right, and some tensors are incompressible
 * now and then (a toy model's zero-padded fp32 blocks). This many steps in a
 * row that move data and do not shrink it stop the run: a codec that never
 * shrinks is a wrong choice of strategy. */
enum { kCheckSteps = 8 };

void fsdp_check_compression(Fsdp* f, const zipcclCounters_t before[3], int step) {
    if (f->nranks < 2) return; /* one rank sends nothing */
    const double min_ratio = f->check_min_ratio;
    for (int k = 0; k < 3; k++) {
        int wanted = 0;
        if (k < 2) {
            for (int u = 0; u < f->n_units; u++) {
                zipcclStrategy_t s = k == 0 ? f->units[u].ag_cfg.strategy : f->units[u].rs_cfg.strategy;
                wanted |= s == zipcclStrategyCompressed && !fsdp_unit_local(f, u);
            }
        } else if (f->ep > 1) {
            for (int l = 0; l < f->cfg->model.n_layers; l++)
                wanted |= llama_layer_is_moe(&f->cfg->model, l) &&
                          f->expert.cfg[l].strategy == zipcclStrategyCompressed;
        }
        if (!wanted) continue;
        zipcclCounters_t now;
        kind_counters(f, k, &now);
        uint64_t ncomp = now.byStrategy[zipcclStrategyCompressed] -
                         before[k].byStrategy[zipcclStrategyCompressed];
        uint64_t raw = now.rawBytes - before[k].rawBytes;
        uint64_t wire = now.wireBytes - before[k].wireBytes;
        const char* what = k == 0 ? "AllGather" : k == 1 ? "ReduceScatter" : "AlltoAllv (expert dispatch)";
        if (raw == 0) continue; /* nothing of this kind left this rank in this step */
        /* no compressed call at all: the plan's path is not the one taken */
        trainCheck(ncomp > 0,
                   "comm asks for compressed %s but it is not compressing: %llu "
                   "compressed calls, %llu raw bytes, %llu wire bytes (hint: check the codec, "
                   "or choose strategy raw)",
                   what, (unsigned long long)ncomp, (unsigned long long)raw,
                   (unsigned long long)wire);
        if ((double)wire * min_ratio < (double)raw || raw < kCheckMinBytes) {
            f->no_shrink[k] = 0;
            continue;
        }
        if (!f->no_shrink_warned[k]++)
            fprintf(stderr, "# warning (rank %d): step %d: compressed %s did not shrink this step's "
                            "data (%llu raw bytes, %llu wire bytes%s): incompressible now; %d such "
                            "steps in a row stop the run (further steps are not reported)\n",
                    f->rank, step, what, (unsigned long long)raw, (unsigned long long)wire,
                    min_ratio > 1 ? ", under ZRT_CHECK_MIN_RATIO" : "", kCheckSteps);
        trainCheck(++f->no_shrink[k] < kCheckSteps,
                   "comm asks for compressed %s but it is not compressing: %d steps in a row "
                   "did not shrink what they moved (the last: %llu compressed calls, %llu raw "
                   "bytes, %llu wire bytes%s) (hint: check the codec, or choose strategy raw)",
                   what, kCheckSteps, (unsigned long long)ncomp, (unsigned long long)raw,
                   (unsigned long long)wire, min_ratio > 1 ? ", under ZRT_CHECK_MIN_RATIO" : "");
    }
}
