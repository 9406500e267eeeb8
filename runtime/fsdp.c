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
 * the receiver widens to fp32 for compute, so every rank computes with
 * exactly the same bf16 values while the master weights stay fp32.
 * reduce_dtype bf16: the full gradient is rounded to bf16 before the
 * reduce-scatter; the reduced shard is widened and accumulated in fp32.
 *
 * Prefetch. When the model acquires block u it also starts the all-gather of
 * the block it will ask for next (u+1 in forward, u-1 in backward) as an
 * Async call, so one gather is in flight while the model computes. At most
 * two blocks and the root unit are gathered at any time. "blocked_s" counts
 * only the time the compute thread waits on a collective: the exposed
 * communication time of the step log.
 *
 * Every collective names its strategy per unit and kind (config.c's
 * config_strategy_for: comm.strategy, comm.allgather / comm.reducescatter,
 * then per-layer overrides by fnmatch on the unit name).
 */
#include "fsdp.h"

#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels.h"
#include "log.h"
#include "optim.h"
#include "safetensors.h"

static void unit_name(const LlamaConfig* m, int u, char* out, size_t n) {
    if (u == 0) snprintf(out, n, "outer");
    else if (llama_unit_is_experts(m, u)) snprintf(out, n, "layers.%d.experts", llama_unit_layer(m, u));
    else snprintf(out, n, "layers.%d", u - 1);
}

static int group_rank(const Fsdp* f, const FsdpUnit* U) { return U->group ? f->edp_rank : f->rank; }
static int group_size(const Fsdp* f, const FsdpUnit* U) { return U->group ? f->edp_size : f->nranks; }
static zipcclComm_t ag_comm(const Fsdp* f, const FsdpUnit* U) { return U->group ? f->comm_ag_x : f->comm_ag; }
static zipcclComm_t rs_comm(const Fsdp* f, const FsdpUnit* U) { return U->group ? f->comm_rs_x : f->comm_rs; }

void fsdp_init(Fsdp* f, const TrainConfig* cfg) {
    memset(f, 0, sizeof *f);
    f->cfg = cfg;
    MPI_Comm_rank(MPI_COMM_WORLD, &f->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &f->nranks);
    f->n_units = llama_num_units(&cfg->model);
    trainCheck(f->n_units <= FSDP_MAX_UNITS, "model has %d units, FSDP handles at most %d",
               f->n_units, FSDP_MAX_UNITS);
    f->param_dtype = cfg->comm.param_dtype;
    f->reduce_dtype = cfg->comm.reduce_dtype;
    f->reshard_after_forward = cfg->parallel.reshard_after_forward;
    f->prefetch = cfg->parallel.prefetch;

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
    if (f->ep > 1) {
        char err[256];
        zipcclCallConfig_t* xc = zrt_malloc((size_t)cfg->model.n_layers * sizeof *xc, "EP configs");
        for (int l = 0; l < cfg->model.n_layers; l++) {
            char name[32];
            snprintf(name, sizeof name, "layers.%d", l);
            xc[l] = (zipcclCallConfig_t){config_strategy_for(cfg, zipcclCollAlltoAllv, name),
                                         cfg->comm.codec, zipcclAlgoDefault};
        }
        trainCheck(!expert_init(&f->expert, f->ep, cfg->model.n_experts, cfg->model.n_layers, xc,
                                cfg->comm.alltoall_dtype, err, sizeof err),
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

    f->units = zrt_calloc((size_t)f->n_units, sizeof(FsdpUnit), "FSDP units");
    float* init = NULL;
    size_t init_cap = 0;
    for (int u = 0; u < f->n_units; u++) {
        FsdpUnit* U = &f->units[u];
        unit_name(&cfg->model, u, U->name, sizeof U->name);
        U->full_numel = U->numel = llama_unit_numel(&cfg->model, u);
        if (f->ep > 1 && llama_unit_is_experts(&cfg->model, u)) {
            U->group = 1;
            U->numel = (size_t)f->expert.E_local * llama_expert_numel(&cfg->model);
            U->full_off = (size_t)f->expert.first * llama_expert_numel(&cfg->model);
        }
        const size_t G = (size_t)group_size(f, U);
        U->padded = (U->numel + G - 1) / G * G;
        U->shard = U->padded / G;
        U->param = zrt_calloc(U->shard, sizeof(float), "parameter shard");
        U->grad = zrt_calloc(U->shard, sizeof(float), "gradient shard");
        U->m = zrt_calloc(U->shard, sizeof(float), "AdamW m shard");
        U->v = zrt_calloc(U->shard, sizeof(float), "AdamW v shard");
        U->grecv = zrt_calloc(U->shard, sizeof(float), "reduce-scatter output");
        if (f->param_dtype == zipcclBfloat16)
            U->send16 = zrt_malloc(U->shard * sizeof(uint16_t), "bf16 send shard");
        zipcclCallConfig_t c = {config_strategy_for(cfg, zipcclCollAllGather, U->name),
                                cfg->comm.codec, zipcclAlgoDefault};
        U->ag_cfg = c;
        c.strategy = config_strategy_for(cfg, zipcclCollReduceScatter, U->name);
        U->rs_cfg = c;

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
}

void fsdp_free(Fsdp* f) {
    if (!f->units) return;
    fsdp_end_step(f);
    for (int u = 0; u < f->n_units; u++) {
        FsdpUnit* U = &f->units[u];
        free(U->param);
        free(U->grad);
        free(U->m);
        free(U->v);
        free(U->grecv);
        free(U->send16);
        free(U->gfull);
        free(U->gfull16);
    }
    free(f->units);
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

/* ---- parameters: all-gather on acquire, free on release ------------------ */

static void start_gather(Fsdp* f, int u) {
    FsdpUnit* U = &f->units[u];
    trainCheck(U->state == UNIT_FREE, "unit %s gathered twice", U->name);
    U->full = zrt_malloc(U->padded * sizeof(float), "gathered unit");
    if (f->param_dtype == zipcclBfloat16) {
        for (size_t i = 0; i < U->shard; i++) U->send16[i] = zrt_f32_to_bf16(U->param[i]);
        U->full16 = zrt_malloc(U->padded * sizeof(uint16_t), "gathered bf16 unit");
        zipcclCheck(zipcclAllGatherAsync(U->send16, U->full16, U->shard, zipcclBfloat16,
                                         ag_comm(f, U), &U->ag_cfg, NULL, &U->ag_req));
    } else {
        zipcclCheck(zipcclAllGatherAsync(U->param, U->full, U->shard, zipcclFloat32, ag_comm(f, U),
                                         &U->ag_cfg, NULL, &U->ag_req));
    }
    U->state = UNIT_INFLIGHT;
    f->gathers++;
}

static void finish_gather(Fsdp* f, int u) {
    FsdpUnit* U = &f->units[u];
    double t0 = zrt_now();
    zipcclCheck(zipcclWait(U->ag_req));
    f->blocked_s += zrt_now() - t0;
    U->ag_req = NULL;
    if (f->param_dtype == zipcclBfloat16) {
        for (size_t i = 0; i < U->padded; i++) U->full[i] = zrt_bf16_to_f32(U->full16[i]);
    }
    if (f->dump_armed && !f->dump_param[u]) {
        size_t bytes = U->padded * zipcclTypeSize(f->param_dtype);
        f->dump_param[u] = zrt_malloc(bytes, "tensor dump");
        memcpy(f->dump_param[u], f->param_dtype == zipcclBfloat16 ? (void*)U->full16 : U->full,
               bytes);
    }
    free(U->full16);
    U->full16 = NULL;
    U->state = UNIT_READY;
}

static void drop_unit(FsdpUnit* U) {
    if (U->state == UNIT_INFLIGHT) zipcclCheck(zipcclWait(U->ag_req));
    free(U->full);
    free(U->full16);
    U->full = NULL;
    U->full16 = NULL;
    U->ag_req = NULL;
    U->state = UNIT_FREE;
}

/* The block the model will acquire after `u` in `phase` (-1: none), from
 * the order llama.h promises: forward 0, 1..L, 0 (head); backward 0 (head),
 * L..1, 0 (embedding). The root unit appears twice per phase; the count of
 * blocks seen so far in the phase tells the two apart. */
static int next_block(const Fsdp* f, int u, int phase) {
    int L = f->cfg->model.n_layers;
    if (phase == 0) {
        if (u > 0) return u < L ? u + 1 : -1;
        if (f->blocks_seen[0] == 0) return 1;
        return f->backward ? L : -1; /* head: backward starts with block L */
    }
    if (u > 0) return u > 1 ? u - 1 : -1;
    return f->blocks_seen[1] == 0 ? L : -1;
}

static const float* hook_acquire(void* ctx, int u, int phase) {
    Fsdp* f = ctx;
    trainCheck(u >= 0 && u < f->n_units, "model asked for unit %d of %d", u, f->n_units);
    trainCheck(phase == 0 || phase == 1, "model passed phase %d", phase);
    FsdpUnit* U = &f->units[u];
    const LlamaConfig* m = &f->cfg->model;
    if (U->state == UNIT_FREE) start_gather(f, u);
    if (U->state == UNIT_INFLIGHT) finish_gather(f, u);
    if (llama_unit_is_experts(m, u)) return U->full; /* acquired inside its block */
    if (f->prefetch) {
        /* a MoE block's experts first (it reads them next), then the block after */
        int xu = u > 0 ? llama_expert_unit(m, u - 1) : -1;
        if (xu > 0 && f->units[xu].state == UNIT_FREE) start_gather(f, xu);
        int nx = next_block(f, u, phase);
        if (nx > 0 && f->units[nx].state == UNIT_FREE) start_gather(f, nx);
    }
    if (u > 0) f->blocks_seen[phase]++;
    return U->full;
}

static void hook_release(void* ctx, int u, int phase) {
    Fsdp* f = ctx;
    if (u == 0) return; /* the root unit stays until fsdp_end_step */
    if (phase == 1 || f->reshard_after_forward) drop_unit(&f->units[u]);
}

/* ---- gradients: full buffer per unit, reduce-scatter when complete ------- */

static float* hook_grad_buffer(void* ctx, int u) {
    Fsdp* f = ctx;
    FsdpUnit* U = &f->units[u];
    if (!U->gfull) U->gfull = zrt_calloc(U->padded, sizeof(float), "full gradient");
    return U->gfull;
}

/* Complete the oldest outstanding reduce-scatter and add it into its shard.
 * Completing in issue order keeps the fp32 sums independent of which
 * collective happened to finish first. */
static void drain_one(Fsdp* f) {
    FsdpUnit* U = &f->units[f->rs_order[f->rs_head++]];
    double t0 = zrt_now();
    zipcclCheck(zipcclWait(U->rs_req));
    f->blocked_s += zrt_now() - t0;
    U->rs_req = NULL;
    U->rs_pending = 0;
    if (f->reduce_dtype == zipcclBfloat16) {
        const uint16_t* r = U->grecv;
        for (size_t j = 0; j < U->shard; j++) U->grad[j] += zrt_bf16_to_f32(r[j]);
    } else {
        const float* r = U->grecv;
        for (size_t j = 0; j < U->shard; j++) U->grad[j] += r[j];
    }
    free(U->gfull);
    free(U->gfull16);
    U->gfull = NULL;
    U->gfull16 = NULL;
}

static void hook_grads_ready(void* ctx, int u) {
    Fsdp* f = ctx;
    FsdpUnit* U = &f->units[u];
    trainCheck(U->gfull, "grads_ready(%d) before any gradient was written", u);
    trainCheck(!U->rs_pending, "grads_ready(%d) twice in one micro-batch", u);
    const void* send = U->gfull;
    if (f->reduce_dtype == zipcclBfloat16) {
        U->gfull16 = zrt_malloc(U->padded * sizeof(uint16_t), "bf16 gradient");
        for (size_t i = 0; i < U->padded; i++) U->gfull16[i] = zrt_f32_to_bf16(U->gfull[i]);
        send = U->gfull16;
    }
    if (f->dump_armed && !f->dump_grad[u]) {
        size_t bytes = U->padded * zipcclTypeSize(f->reduce_dtype);
        f->dump_grad[u] = zrt_malloc(bytes, "tensor dump");
        memcpy(f->dump_grad[u], send, bytes);
    }
    zipcclCheck(zipcclReduceScatterAsync(send, U->grecv, U->shard, f->reduce_dtype, zipcclSum,
                                         rs_comm(f, U), &U->rs_cfg, NULL, &U->rs_req));
    U->rs_pending = 1;
    trainCheck(f->n_rs < FSDP_MAX_UNITS, "too many reduce-scatters in one micro-batch");
    f->rs_order[f->n_rs++] = u;
    /* Bound the full-size gradients alive at once: a few units, not the
     * whole model. */
    while (f->n_rs - f->rs_head > FSDP_MAX_RS_IN_FLIGHT) drain_one(f);
}

/* ---- expert parallelism: the exchange is expert.c's -------------------- */

static int hook_dispatch(void* ctx, int layer, int phase, const float* rows, const int* counts,
                         int C, const float** recv, int* n_recv, const int** recv_counts,
                         int* n_local, int* first_expert) {
    Fsdp* f = ctx;
    const double b0 = f->expert.blocked_s;
    int rc = expert_dispatch(&f->expert, layer, phase, rows, counts, C, recv, n_recv, recv_counts,
                             n_local, first_expert);
    f->blocked_s += f->expert.blocked_s - b0;
    return rc;
}

static int hook_combine(void* ctx, int layer, int phase, const float* local, float* rows) {
    Fsdp* f = ctx;
    const double b0 = f->expert.blocked_s;
    int rc = expert_combine(&f->expert, layer, phase, local, rows);
    f->blocked_s += f->expert.blocked_s - b0;
    return rc;
}

LlamaParamHooks fsdp_hooks(Fsdp* f) {
    LlamaParamHooks h = {.ctx = f,
                         .acquire = hook_acquire,
                         .release = hook_release,
                         .grad_buffer = hook_grad_buffer,
                         .grads_ready = hook_grads_ready};
    if (f->ep > 1) { /* at EP = 1 the model computes every expert itself */
        h.dispatch = hook_dispatch;
        h.combine = hook_combine;
    }
    return h;
}

void fsdp_begin_microbatch(Fsdp* f, int backward) {
    f->backward = backward;
    f->blocks_seen[0] = f->blocks_seen[1] = 0;
    f->n_rs = f->rs_head = 0;
}

void fsdp_end_microbatch(Fsdp* f) {
    while (f->rs_head < f->n_rs) drain_one(f);
    f->n_rs = f->rs_head = 0;
}

void fsdp_end_step(Fsdp* f) {
    for (int u = 0; u < f->n_units; u++) drop_unit(&f->units[u]);
}

void fsdp_zero_grads(Fsdp* f) {
    for (int u = 0; u < f->n_units; u++)
        memset(f->units[u].grad, 0, f->units[u].shard * sizeof(float));
}

void fsdp_scale_grads(Fsdp* f, float s) {
    if (s == 1.0f) return;
    for (int u = 0; u < f->n_units; u++) {
        FsdpUnit* U = &f->units[u];
        for (size_t i = 0; i < U->shard; i++) U->grad[i] *= s;
    }
}

/* One double per rank, added in rank order on every rank. The double
 * travels as two fp32 words through a native (MPI) all-gather, which moves
 * bytes untouched; scalars have nothing to compress, and keeping them off
 * the compressed path keeps the per-kind compression counters about the
 * tensors only. */
static double sum_over_ranks(Fsdp* f, double x) {
    float mine[2];
    memcpy(mine, &x, sizeof x);
    float* all = zrt_malloc((size_t)f->nranks * sizeof mine, "rank values");
    zipcclCallConfig_t c = {zipcclStrategyNative, zipcclCodecDefault, zipcclAlgoDefault};
    double t0 = zrt_now();
    zipcclCheck(zipcclAllGather(mine, all, 2, zipcclFloat32, f->comm_misc, &c, NULL));
    f->blocked_s += zrt_now() - t0;
    double s = 0;
    for (int r = 0; r < f->nranks; r++) {
        double v;
        memcpy(&v, all + 2 * r, sizeof v);
        s += v;
    }
    free(all);
    return s;
}

double fsdp_mean_over_ranks(Fsdp* f, double x) { return sum_over_ranks(f, x) / f->nranks; }

double fsdp_grad_norm(Fsdp* f) {
    double ss = 0;
    for (int u = 0; u < f->n_units; u++) {
        const FsdpUnit* U = &f->units[u];
        ss += optim_sumsq(U->grad, U->shard);
    }
    return sqrt(sum_over_ranks(f, ss));
}

static float* state_of(FsdpUnit* U, int which) {
    return which == 0 ? U->param : which == 1 ? U->m : U->v;
}

size_t fsdp_full_floats(const Fsdp* f, int u) {
    const FsdpUnit* U = &f->units[u];
    return U->full_numel > U->padded ? U->full_numel : U->padded;
}

void fsdp_gather_full(Fsdp* f, int u, int which, float* out) {
    FsdpUnit* U = &f->units[u];
    if (!U->group) {
        zipcclCheck(zipcclAllGather(state_of(U, which), out, U->shard, zipcclFloat32, f->comm_ag,
                                    &U->ag_cfg, NULL));
        return;
    }
    /* The group's slice (its experts), then the EP group's slices side by
     * side: EP rank i holds experts [i*E/EP, (i+1)*E/EP), so rank order is
     * expert order. Checkpoints only: plain MPI on the EP communicator. */
    float* mine = zrt_malloc(U->padded * sizeof(float), "expert gather");
    zipcclCheck(zipcclAllGather(state_of(U, which), mine, U->shard, zipcclFloat32, f->comm_ag_x,
                                &U->ag_cfg, NULL));
    trainCheck(U->numel <= (size_t)INT32_MAX, "expert unit %s too large to gather", U->name);
    trainCheck(MPI_Allgather(mine, (int)U->numel, MPI_FLOAT, out, (int)U->numel, MPI_FLOAT,
                             *(MPI_Comm*)f->expert.mpi_ep) == MPI_SUCCESS,
               "gathering the experts of %s failed", U->name);
    free(mine);
}

void fsdp_shard_range(const Fsdp* f, int u, size_t* lo, size_t* hi) {
    const FsdpUnit* U = &f->units[u];
    size_t a = (size_t)group_rank(f, U) * U->shard, b = a + U->shard;
    if (a > U->numel) a = U->numel;
    if (b > U->numel) b = U->numel;
    *lo = U->full_off + a;
    *hi = U->full_off + b;
}

void fsdp_load_full(Fsdp* f, int u, int which, const float* full) {
    FsdpUnit* U = &f->units[u];
    float* dst = state_of(U, which);
    size_t lo = (size_t)group_rank(f, U) * U->shard;
    for (size_t i = 0; i < U->shard; i++)
        dst[i] = lo + i < U->numel ? full[U->full_off + lo + i] : 0.0f;
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
    trainCheck(!st_writer_write(w, path, err, sizeof err), "tensor dump %s: %s", path, err);
    st_writer_free(w);
}

void fsdp_dump_write(Fsdp* f, const char* dir, int step) {
    if (!f->dump_armed) return;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        trainCheck(0, "--dump-tensors: cannot create %s: %s", dir, strerror(errno));
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
        zipcclCheck(zipcclCommGetCounters(comms[i], kind, &c));
        out->calls += c.calls;
        out->rawBytes += c.rawBytes;
        out->wireBytes += c.wireBytes;
        out->codecSeconds += c.codecSeconds;
        out->wireSeconds += c.wireSeconds;
        out->totalSeconds += c.totalSeconds;
        for (int s = 0; s < 5; s++) out->byStrategy[s] += c.byStrategy[s];
        for (int s = 0; s < ZIPCCL_NCODECS; s++) out->byCodec[s] += c.byCodec[s];
        for (int s = 0; s < ZIPCCL_NALGOS; s++) out->byAlgo[s] += c.byAlgo[s];
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
        zipcclCheck(zipcclCommGetCounters(comms[i], kind, &c));
        out->rawBytes += c.rawBytes;
        out->wireBytes += c.wireBytes;
        for (int s = 0; s < 5; s++) out->byStrategy[s] += c.byStrategy[s];
    }
}

void fsdp_check_compression_begin(Fsdp* f, zipcclCounters_t before[3]) {
    for (int k = 0; k < 3; k++) kind_counters(f, k, &before[k]);
}

void fsdp_check_compression(Fsdp* f, const zipcclCounters_t before[3]) {
    if (f->nranks < 2) return; /* one rank sends nothing */
    for (int k = 0; k < 3; k++) {
        int wanted = 0;
        if (k < 2) {
            for (int u = 0; u < f->n_units; u++) {
                zipcclStrategy_t s = k == 0 ? f->units[u].ag_cfg.strategy : f->units[u].rs_cfg.strategy;
                wanted |= s == zipcclStrategyCompressed;
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
        trainCheck(ncomp > 0 && wire < raw,
                   "comm asks for compressed %s but it is not compressing: %llu "
                   "compressed calls, %llu raw bytes, %llu wire bytes (hint: check the codec, "
                   "or choose strategy raw)",
                   what, (unsigned long long)ncomp, (unsigned long long)raw,
                   (unsigned long long)wire);
    }
}
