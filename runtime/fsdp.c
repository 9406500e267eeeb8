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

static void unit_name(int u, char* out, size_t n) {
    if (u == 0) snprintf(out, n, "outer");
    else snprintf(out, n, "layers.%d", u - 1);
}

void fsdp_init(Fsdp* f, const TrainConfig* cfg) {
    memset(f, 0, sizeof *f);
    f->cfg = cfg;
    MPI_Comm_rank(MPI_COMM_WORLD, &f->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &f->nranks);
    f->n_units = cfg->model.n_layers + 1;
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

    f->units = zrt_calloc((size_t)f->n_units, sizeof(FsdpUnit), "FSDP units");
    float* init = NULL;
    size_t init_cap = 0;
    for (int u = 0; u < f->n_units; u++) {
        FsdpUnit* U = &f->units[u];
        unit_name(u, U->name, sizeof U->name);
        U->numel = llama_unit_numel(&cfg->model, u);
        U->padded = (U->numel + (size_t)f->nranks - 1) / (size_t)f->nranks * (size_t)f->nranks;
        U->shard = U->padded / (size_t)f->nranks;
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
         * its slice: the result is independent of the rank count. */
        if (U->padded > init_cap) {
            free(init);
            init_cap = U->padded;
            init = zrt_malloc(init_cap * sizeof(float), "init buffer");
        }
        memset(init, 0, U->padded * sizeof(float));
        llama_unit_init(&cfg->model, u, (unsigned long long)cfg->train.seed, init);
        memcpy(U->param, init + (size_t)f->rank * U->shard, U->shard * sizeof(float));
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
                                         f->comm_ag, &U->ag_cfg, NULL, &U->ag_req));
    } else {
        zipcclCheck(zipcclAllGatherAsync(U->param, U->full, U->shard, zipcclFloat32, f->comm_ag,
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
    int L = f->n_units - 1;
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
    if (U->state == UNIT_FREE) start_gather(f, u);
    if (U->state == UNIT_INFLIGHT) finish_gather(f, u);
    if (f->prefetch) {
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
                                         f->comm_rs, &U->rs_cfg, NULL, &U->rs_req));
    U->rs_pending = 1;
    trainCheck(f->n_rs < FSDP_MAX_UNITS, "too many reduce-scatters in one micro-batch");
    f->rs_order[f->n_rs++] = u;
    /* Bound the full-size gradients alive at once: a few units, not the
     * whole model. */
    while (f->n_rs - f->rs_head > FSDP_MAX_RS_IN_FLIGHT) drain_one(f);
}

LlamaParamHooks fsdp_hooks(Fsdp* f) {
    return (LlamaParamHooks){.ctx = f,
                             .acquire = hook_acquire,
                             .release = hook_release,
                             .grad_buffer = hook_grad_buffer,
                             .grads_ready = hook_grads_ready};
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

void fsdp_gather_full(Fsdp* f, int u, int which, float* out) {
    FsdpUnit* U = &f->units[u];
    zipcclCheck(zipcclAllGather(state_of(U, which), out, U->shard, zipcclFloat32, f->comm_ag,
                                &U->ag_cfg, NULL));
}

void fsdp_load_full(Fsdp* f, int u, int which, const float* full) {
    FsdpUnit* U = &f->units[u];
    float* dst = state_of(U, which);
    size_t lo = (size_t)f->rank * U->shard;
    for (size_t i = 0; i < U->shard; i++) dst[i] = lo + i < U->numel ? full[lo + i] : 0.0f;
}

uint64_t fsdp_param_hash(Fsdp* f) {
    uint64_t h = ZRT_FNV_INIT;
    for (int u = 0; u < f->n_units; u++) {
        FsdpUnit* U = &f->units[u];
        float* full = zrt_malloc(U->padded * sizeof(float), "hash buffer");
        fsdp_gather_full(f, u, 0, full);
        h = zrt_fnv1a64(h, full, U->numel * sizeof(float));
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
    zipcclComm_t comms[3] = {f->comm_ag, f->comm_rs, f->comm_misc};
    for (int i = 0; i < 3; i++) {
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

void fsdp_check_compression(Fsdp* f, const zipcclCounters_t before[2]) {
    if (f->nranks < 2) return; /* one rank sends nothing */
    for (int k = 0; k < 2; k++) {
        zipcclCollKind_t kind = k == 0 ? zipcclCollAllGather : zipcclCollReduceScatter;
        int wanted = 0;
        for (int u = 0; u < f->n_units; u++) {
            zipcclStrategy_t s = k == 0 ? f->units[u].ag_cfg.strategy : f->units[u].rs_cfg.strategy;
            wanted |= s == zipcclStrategyCompressed;
        }
        if (!wanted) continue;
        zipcclComm_t comm = k == 0 ? f->comm_ag : f->comm_rs;
        zipcclCounters_t now;
        zipcclCheck(zipcclCommGetCounters(comm, kind, &now));
        uint64_t ncomp = now.byStrategy[zipcclStrategyCompressed] -
                         before[k].byStrategy[zipcclStrategyCompressed];
        uint64_t raw = now.rawBytes - before[k].rawBytes;
        uint64_t wire = now.wireBytes - before[k].wireBytes;
        trainCheck(ncomp > 0 && wire < raw,
                   "comm.strategy asks for compressed %s but it is not compressing: %llu "
                   "compressed calls, %llu raw bytes, %llu wire bytes (hint: check the codec, "
                   "or choose strategy raw)",
                   zipcclCollName(kind), (unsigned long long)ncomp, (unsigned long long)raw,
                   (unsigned long long)wire);
    }
}
