/*
 * fsdp.h — fully sharded data parallelism over ZipCCL (see fsdp.c).
 *
 * Each of the model's units (llama.h) is one flat fp32 array, padded to a
 * multiple of the rank count N and cut into N equal shards; rank r owns
 * shard r of every unit: its fp32 master weights, its gradient and its
 * optimizer state (m, v). This file is the mechanism: start and finish the
 * all-gather of a unit into a buffer, start and finish the reduce-scatter
 * of a unit's full gradient into its shard. When each runs, and which
 * buffers they use, is the scheduler's (sched.h); the model sees full units
 * only through the scheduler's hooks.
 *
 * Expert units (MoE, llama.h) with expert parallelism EP > 1: a rank holds
 * only the experts its EP group gives it (expert.h), and shards that slice
 * over the expert-data-parallel group (the N / EP ranks holding the same
 * experts) on communicators of their own; at EP = 1 an expert unit is a
 * unit like the others.
 *
 * The shards live in the memory of the run's kernel table (host, guarded or
 * CUDA), where the optimizer updates them (optim.h); the collectives take
 * buffers of that memory (ZipCCL on device buffers: comm/algo/coll_device.c).
 *
 * Left out: hybrid sharding, CPU offload.
 */
#ifndef RUNTIME_FSDP_H
#define RUNTIME_FSDP_H
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "expert.h"
#include "kernels.h"
#include "llama.h"
#include "plan.h"
#include "zipccl.h"

#define FSDP_MAX_UNITS 1100

typedef struct {
    char name[32];        /* "outer", "layers.0", "layers.0.experts", ...    */
    int group;            /* sharded over 0: all N ranks, 1: the expert-data-
                           * parallel group (expert units at EP > 1)          */
    size_t numel;         /* elements of the unit this rank's group holds    */
    size_t full_numel;    /* elements of the whole unit (all experts)        */
    size_t full_off;      /* where this rank's part starts in the whole unit */
    size_t padded;        /* numel rounded up to a multiple of the group     */
    size_t shard;         /* padded / group size: elements this rank owns    */
    /* the shards, in the kernel table's memory (Fsdp.K: host or device) */
    float* param;         /* (shard) fp32 master weights                     */
    float* grad;          /* (shard) fp32 gradient, summed over micro-batches */
    float* m;             /* (shard) AdamW first moment                      */
    float* v;             /* (shard) AdamW second moment                     */
    zipcclCallConfig_t ag_cfg, rs_cfg; /* what the plan asks for (plan.h)    */
    /* train.rank_invariant: the tree's pending left subtrees, one per level
     * below the top (the step's sum, in grad), and the micro-batches of
     * this step already added (fsdp_tree_add) */
    float** tree_level;
    int tree_micro;
} FsdpUnit;

typedef struct {
    const TrainConfig* cfg;
    const ZrtKernels* K;   /* the memory the shards live in, the optimizer's table */
    int rank, nranks, n_units;
    FsdpUnit* units;
    float** host_state;    /* a device's host copies (unit, which), fsdp_shard_host */
    zipcclComm_t comm_ag;  /* parameter all-gathers                          */
    zipcclComm_t comm_rs;  /* gradient reduce-scatters                       */
    zipcclComm_t comm_misc;/* small all-gathers: losses, norms               */
    /* expert parallelism (ep > 1): the exchange, and the expert-data-parallel
     * group's own gather and reduce-scatter communicators */
    int ep, edp_rank, edp_size;
    Expert expert;
    zipcclComm_t comm_ag_x, comm_rs_x;
    zipcclDataType_t param_dtype, reduce_dtype;
    CommPlan plan;         /* per unit and kind: strategy, codec, algorithm  */
    /* train.rank_invariant (fsdp_pad, fsdp_reduce_start, fsdp_grad_sumsq):
     * levels = log2(grad_accum) of the micro-batch tree; a bf16 tree's fp32
     * scratch (the largest unit); the norm's block sums (device, host, all
     * ranks') */
    int invariant, levels;
    float* tree_scratch;
    double *blocks_dev, *blocks_host, *blocks_all;
    size_t n_blocks, n_scratch;

    /* statistics */
    double blocked_s;      /* compute thread waiting on collectives (all)    */
    double misc_s;         /* of which the bookkeeping scalars               */
    uint64_t gathers;      /* all-gathers issued                             */

    /* the optimizer's tables (fsdp_adamw, fsdp_grad_sumsq), host memory:
     * the slices remade each step in place, the norm's parts made once;
     * the same every step, so a device uploads them once (kernels.h
     * adamw_multi, sumsq_multi) */
    ZrtAdamWSlice* slices; /* every tensor's part of this rank's shards      */
    int n_slices, cap_slices;
    float** grad_of;       /* the norm's parts (fsdp_grad_sumsq): per unit, */
    size_t* grad_n;        /* or per block (rank_invariant); made at init  */
    int n_sumsq;

    /* fsdp_check_compression: per kind, steps in a row that did not shrink,
     * and how many did in all (the first is reported) */
    int no_shrink[3], no_shrink_warned[3];
    double check_min_ratio; /* ZRT_CHECK_MIN_RATIO (1: any saving), read at init */

    /* --dump-tensors: when armed, keep what each collective sent this step */
    int dump_armed;
    void** dump_param;     /* per unit: full gathered unit (param dtype)     */
    void** dump_grad;      /* per unit: full gradient as sent (reduce dtype) */
} Fsdp;

/* Shard every unit of cfg->model into memory of K, with the communication
 * plan `plan` (fsdp_plan_build; taken over), initialised with
 * llama_unit_init(seed) on every rank (each keeps only its shard); with
 * model.init_from the shards stay zero for hf_load (runtime/hf.h) or a
 * checkpoint to fill. Collective over MPI_COMM_WORLD. */
void fsdp_init(Fsdp* f, const TrainConfig* cfg, const ZrtKernels* K, CommPlan* plan);

/* The communication plan of cfg's model (plan.h: every unit and kind, its
 * strategy, codec and algorithm), built once from the config: a bad rule
 * is an error naming its key (0, or -1 with err). fsdp_init takes it over
 * (and leaves *plan empty). */
int fsdp_plan_build(const TrainConfig* cfg, CommPlan* plan, char* err, size_t errlen);
void fsdp_free(Fsdp* f);

/* The unit names the plan and the logs use: "outer", "layers.N",
 * "layers.N.experts". */
void fsdp_unit_name(const LlamaConfig* m, int u, char* out, size_t n);
/* Which kinds of collectives unit u has (plan.h), with EP ep. */
void fsdp_unit_kinds(const LlamaConfig* m, int ep, int u, int has[PLAN_NKINDS]);

/* The mechanism the scheduler drives. The collectives' buffers are the
 * model's memory, K's (ZipCCL takes a device's buffers: fsdp_init gives the
 * gather and reduce-scatter communicators the device's memory table).
 * Gather: send holds `shard` bf16 elements (bf16 gathers; NULL for fp32,
 * which sends the shard itself), recv `padded` of param_dtype, which is the
 * unit the model reads once finish has run (bf16 as it is:
 * LlamaParamHooks.bf16_units). Reduce: gfull is the model's full fp32 gradient
 * (padded), send a padded bf16 buffer (bf16 reductions; NULL for fp32, which
 * sends gfull), recv `shard` elements of reduce_dtype; finish adds recv into
 * the gradient shard. Calls of one communicator are issued in the same
 * order on every rank: the scheduler's plan sees to that. */
void fsdp_gather_start(Fsdp* f, int u, void* send, void* recv, zipcclRequest_t* req);
void fsdp_gather_finish(Fsdp* f, int u, const void* recv);
void fsdp_reduce_start(Fsdp* f, int u, const float* gfull, void* send, void* recv,
                       zipcclRequest_t* req);
void fsdp_reduce_finish(Fsdp* f, int u, const void* recv);
/* train.rank_invariant: the same bits at any rank count (docs/RUNTIME.md,
 * "Rank-invariant training"). The global batch's G = ranks x grad_accum
 * micro-batches are the leaves of one binary tree; micro-batch a of rank r
 * is leaf a * ranks + r (the data order already gives rank r the r-th B
 * sequences of each global micro-batch), so each micro-batch's ranks form a
 * subtree and the micro-batches the levels above. A node is left + right in
 * fp32 (with reduce_dtype bf16 the leaves and every node are rounded to
 * bf16: the same rounding points at every rank count). The reduce-scatter
 * is an All-to-All of the gradient's blocks (the same bytes, compressed as
 * the plan says) whose owner sums the ranks' blocks in the tree; a local
 * unit's gradient is the one leaf. The micro-batch levels: a binary counter
 * of partial sums per unit (tree_level, log2(grad_accum) shards). recv then
 * holds `padded` elements (every rank's block), not `shard`. */
size_t fsdp_recv_count(const Fsdp* f, int u);
/* The padding of a unit of numel elements over a group of G ranks:
 * a multiple of G, and with rank_invariant of G x ZRT_SUMSQ_BLOCK, so the
 * norm's blocks never straddle two shards. */
static inline size_t fsdp_pad(size_t numel, size_t G, int invariant) {
    const size_t m = invariant ? G * ZRT_SUMSQ_BLOCK : G;
    return (numel + m - 1) / m * m;
}
/* Whether unit u is not sharded: its group is this rank alone (one rank,
 * or an expert unit at EP = the rank count). Such a unit has no
 * collectives, codec or staging: for an fp32 gather the model reads the
 * shard itself (the scheduler passes U->param as recv and start does
 * nothing), for a bf16 one start casts the shard into recv (send unused);
 * reduce start adds gfull into the gradient shard in fp32, whatever
 * comm.reduce_dtype says (send and recv unused, finish does nothing): what
 * an fp32 reduce-scatter over one rank gives, bit for bit. *req is NULL. */
int fsdp_unit_local(const Fsdp* f, int u);
/* The communicator unit u's calls of kind k (PLAN_AG, PLAN_RS) go over. */
zipcclComm_t fsdp_comm(const Fsdp* f, int u, int kind);
/* --dump-tensors, when armed: keep a copy of what unit u's gather brought
 * (param dtype) or its reduce-scatter sent (reduce dtype). */
void fsdp_dump_param(Fsdp* f, int u, const void* buf);
void fsdp_dump_grad(Fsdp* f, int u, const void* buf);

/* Zero the gradient shards (start of a step). */
void fsdp_zero_grads(Fsdp* f);
/* The global gradient norm in two halves, so the caller brings the sums of
 * squares back together with its own values in one copy (the trainer: one
 * host wait per step): fsdp_grad_sumsq puts each unit's sum of squares of
 * this rank's gradient shard times gscale (the mean over the global batch,
 * folded in: the shard keeps the sum) into parts[u] (n_units doubles of
 * the device's memory; the table's sumsq_multi: one launch pair, fixed
 * order); fsdp_grad_norm_of adds the copied-back parts in unit order,
 * all-gathers the per-rank sums and adds them in rank order (the same on
 * every rank, every run), and takes the root. */
void fsdp_grad_sumsq(Fsdp* f, double* parts, float gscale);
double fsdp_grad_norm_of(Fsdp* f, const double* parts);
/* AdamW on every shard in one launch (the table's adamw_multi), one slice
 * per tensor so that matrices decay by s->weight_decay and vectors (norms)
 * not, each gradient read as (g * gscale) * clip: the mean's scale and the
 * global-norm clip folded in, the bits of scaling the shards by each in
 * turn. */
void fsdp_adamw(Fsdp* f, const ZrtAdamWStep* s, float gscale, float clip);

/* Mean over ranks of one value per rank, summed in rank order. */
double fsdp_mean_over_ranks(Fsdp* f, double x);
/* x (n) := its sum over ranks, each element added in rank order: the same
 * bits on every rank, every run. A blocking collective on comm_misc. */
void fsdp_sum_over_ranks(Fsdp* f, double* x, int n);
/* all (n x ranks, rank-major) := every rank's x (n doubles); blocking, on
 * comm_misc. */
void fsdp_gather_over_ranks(Fsdp* f, const double* x, size_t n, double* all);
/* v[0] := the sum of v (n, a power of two) in the binary tree: pairs at
 * distance 1, then 2, ... (v overwritten); returned. */
double fsdp_tree_sum(double* v, int n);

/* Gather a unit's whole fp32 array of `which` (0 param, 1 m, 2 v), every
 * expert included, into out (fsdp_full_floats floats) on every rank. */
void fsdp_gather_full(Fsdp* f, int unit, int which, float* out);
size_t fsdp_full_floats(const Fsdp* f, int unit);
/* Take this rank's shard of a whole array (full_numel floats) for `which`. */
void fsdp_load_full(Fsdp* f, int unit, int which, const float* full);
/* This rank's shard of unit u as a range of the whole unit: [*lo, *hi),
 * clipped to the real elements (the padding has no place in the model). */
void fsdp_shard_range(const Fsdp* f, int unit, size_t* lo, size_t* hi);
/* This rank's shard array of `which` (0 param, 1 m, 2 v) of unit u in host
 * memory: its first hi - lo floats are the range above (checkpoints write
 * and read them in place). On a host table the shard itself; on a device a
 * host copy, downloaded when `download`, kept until fsdp_host_release; a
 * caller that wrote into it calls fsdp_shard_commit to upload it. */
float* fsdp_shard_host(Fsdp* f, int unit, int which, int download);
void fsdp_shard_commit(Fsdp* f, int unit, int which);
void fsdp_host_release(Fsdp* f);

/* FNV-1a 64 over the full fp32 params of all units in order (collective). */
uint64_t fsdp_param_hash(Fsdp* f);

/* --dump-tensors: arm before a step, write after it (per rank files in dir). */
void fsdp_dump_arm(Fsdp* f);
void fsdp_dump_write(Fsdp* f, const char* dir, int step);

/* Collective kind `kind`'s counters on communicator c, as the runtime
 * counts them: under train.rank_invariant the gradients' All-to-Alls on
 * comm_rs are its reduce-scatters (fsdp_reduce_start), read there as
 * ReduceScatter and not as AlltoAll. Every reader of the counters of
 * fsdp's communicators goes through here. */
void fsdp_comm_counters(const Fsdp* f, zipcclComm_t c, zipcclCollKind_t kind, zipcclCounters_t* out);

/* Sum of this rank's per-kind counters over the communicators. */
void fsdp_counters(Fsdp* f, zipcclCollKind_t kind, zipcclCounters_t* out);

/* Refuse a requested compressed path that is not compressing: begin takes
 * the counters of each kind (AllGather, ReduceScatter, the expert
 * AlltoAllv), check compares the deltas since then, after step `step`. No
 * compressed call of a kind that wants them stops the run at once; a step
 * that moved data (64 KiB or more) without shrinking it (raw / wire above
 * ZRT_CHECK_MIN_RATIO, default 1) is a warning (the first of each kind
 * printed), and 8 such steps in a row stop the run. */
void fsdp_check_compression_begin(Fsdp* f, zipcclCounters_t before[3]);
void fsdp_check_compression(Fsdp* f, const zipcclCounters_t before[3], int step);

#endif
