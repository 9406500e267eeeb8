/*
 * scheduler.h — the overlap scheduler (runtime/scheduler.c; neither is
 * called sched.h, which would shadow the system header of that name under
 * -Iruntime): which collective of a step runs when (see scheduler.c for the
 * picture).
 *
 * Two layers. The planner (sched_plan_build) is a pure function of the
 * model's unit order, the units' sizes and the knobs (prefetch depth,
 * in-flight bound, overlap on/off): it lists the hook events of one step in
 * the order models/llama.h documents and says, at each event, how many
 * parameter all-gathers must have been issued and how many gradient
 * reduce-scatters retired. Because it is computed before the step from
 * sizes alone, every rank issues the same collectives in the same order,
 * and no choice depends on timing. The executor (Sched) is the set of hooks
 * the model calls: it follows the plan, checks that the model's calls are
 * the plan's events, drives FSDP's mechanism (fsdp.h), and records what
 * every call cost (per-unit statistics, the Chrome trace).
 *
 * Left out: reordering the model's compute; an adaptive plan that learns
 * from measured times (the plan is fixed for a run); a bound on the expert
 * exchange's bytes in flight (all of a block's chunks may be).
 */
#ifndef RUNTIME_SCHED_H
#define RUNTIME_SCHED_H
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "fsdp.h"
#include "llama.h"
#include "plan.h"

/* DISP / COMB: a MoE block's exchange begins (counts, the chunk cut) and
 * ends (every chunk back); XWAIT / XSEND: chunk c of it arrives for the
 * experts / leaves with their outputs. */
typedef enum { EV_ACQ = 0, EV_REL, EV_GBUF, EV_GRDY, EV_DISP, EV_COMB, EV_XWAIT, EV_XSEND } SchedEvType;

typedef struct {
    uint8_t type;   /* SchedEvType                                             */
    uint8_t phase;  /* 0 forward, 1 backward                                   */
    int16_t micro;  /* micro-batch of the step                                 */
    int unit;       /* the unit (DISP / COMB / XWAIT / XSEND: the block index)  */
    int chunk;      /* XWAIT / XSEND: the chunk                                */
    int gather;     /* ACQ: the gather it waits for, -1: the unit is held      */
    int drop;       /* REL: the unit's gathered buffer is freed after it       */
    int gbuf_new;   /* GBUF: the unit's first in this micro-batch (zeroed)     */
    int rs;         /* GRDY: the reduce-scatter it issues                      */
    int ag_pre, ag_post; /* gathers issued before / after the event (counts)   */
    int rs_pre, rs_post; /* reduce-scatters retired before / after it          */
} SchedEvent;

typedef struct {
    int unit, need; /* need: the event (ACQ) that reads it */
    int issue;      /* the event after which it is issued (-1: before the first) */
} SchedGather;

typedef struct {
    int n_ev, n_ag, n_rs;
    SchedEvent* ev;
    SchedGather* ag;
    int* rs_unit;        /* (n_rs) the unit each reduce-scatter carries        */
    double peak_bytes;   /* largest gathered + gradient bytes alive at once   */
    double floor_bytes;  /* the same with nothing ahead and each RS at once   */
} SchedPlan;

/* What the planner needs: the model (its unit order), per unit the bytes a
 * gathered copy holds and the bytes of its full gradient, and the knobs.
 * gtrans and rflight refine them where the buffers change (NULL: 0 and
 * rbytes): a gather in flight also holds gtrans bytes (a bf16 receive
 * buffer and send shard) until its unit is acquired and decoded; a
 * gradient, once its reduce-scatter is issued, holds rflight bytes (its
 * bf16 copy and the received shard) instead of rbytes until retired. */
typedef struct {
    const LlamaConfig* model;
    int n_units;
    const double* gbytes;  /* (n_units) a gathered unit, held */
    const double* rbytes;  /* (n_units) a gradient being accumulated */
    const double* gtrans;  /* (n_units) or NULL */
    const double* rflight; /* (n_units) or NULL */
    int ep_chunks;        /* 0: no exchange hooks (EP = 1), else the model calls
                           * dispatch / combine with this many chunks (EP > 1) */
    int micro;            /* micro-batches in the step                         */
    int backward;         /* 0: forward only (validation)                      */
    int depth;            /* prefetch depth: gathers issued ahead               */
    double max_bytes;     /* in-flight bound, 0: none                           */
    int max_rs;           /* reduce-scatters in flight at once, 0: no bound     */
    int overlap;          /* 0: nothing ahead, every reduce-scatter waited at once */
    int reshard;          /* reshard_after_forward                              */
} SchedParams;

/* The hook events of one micro-batch in the order llama.h documents (A, R,
 * G, D, dispatch, its chunks, combine), the expert units of MoE blocks
 * included; ep_chunks as in SchedParams: up to max into out; returns the
 * count. */
int sched_model_order(const LlamaConfig* m, int ep_chunks, int backward, SchedEvent* out, int max);

/* Plan a step. Returns 0, or -1 with the reason in err (an in-flight bound
 * below what the step needs with nothing ahead, naming the key). */
int sched_plan_build(SchedPlan* p, const SchedParams* sp, char* err, size_t errlen);
void sched_plan_free(SchedPlan* p);

/* The bytes of unit u for cfg at nranks ranks (what the planner and the
 * memory plan count): gathered and held, extra while its gather is in
 * flight, its gradient while accumulated, and while reduced. A unit whose
 * group is one rank (fsdp_unit_local) holds only its bf16 cast (nothing
 * with fp32 gathers: the model reads the shard) and has nothing in flight. */
typedef struct {
    double held, trans, acc, flight;
} SchedUnitBytes;
void sched_unit_bytes(const TrainConfig* cfg, int nranks, int u, SchedUnitBytes* b);

/* Before any work: the step's schedule from the config alone (the
 * communication plan is fsdp_plan_build's); a bad bound is refused naming
 * the key. *peak gets
 * the schedule's peak bytes of gathered units and full gradients (memory
 * estimate). Returns 0 or -1 with err. */
int sched_check_config(const TrainConfig* cfg, int nranks, double* peak, char* err, size_t errlen);
/* The training step's plan itself at nranks ranks, from the config alone
 * (what a run at that count follows; the projection replays it:
 * runtime/project.h). Returns 0 (free it with sched_plan_free) or -1 with
 * err. */
int sched_plan_for_config(const TrainConfig* cfg, int nranks, SchedPlan* p, char* err, size_t errlen);

/* ---- the executor ------------------------------------------------------- */

typedef struct Sched Sched;

/* Communication time the compute thread waited on, per kind: all-gathers,
 * reduce-scatters, the expert exchange, and the bookkeeping scalars. */
enum { SCHED_X_AG = 0, SCHED_X_RS, SCHED_X_A2A, SCHED_X_MISC, SCHED_NX };

Sched* sched_create(Fsdp* f, const TrainConfig* cfg, int trace);
void sched_destroy(Sched* s);
/* The model's backend (kernels.h), before the first step. With a backend
 * whose memory is not host memory (cuda, cpu_guarded), the steps' buffers
 * (gathered units, gradients, the collectives' send and receive buffers)
 * come from a device pool: the model reads the device buffers, and the
 * collectives take them as they are (FSDP's communicators and the expert
 * exchange's have the device's memory table; docs/RUNTIME.md "Devices").
 * NULL or the CPU table: host buffers. */
struct ZrtKernels_;
void sched_set_backend(Sched* s, const struct ZrtKernels_* K);
LlamaParamHooks sched_hooks(Sched* s);

/* A training step of cfg->data.grad_accum micro-batches, or one forward-only
 * micro-batch (validation): begin, then the micro-batches (each bracketed
 * by begin/end_micro), then end, which retires every reduce-scatter (in
 * issue order, adding each into its gradient shard) and frees every
 * gathered unit. */
void sched_begin_step(Sched* s, int train);
void sched_begin_micro(Sched* s);
void sched_end_micro(Sched* s);
void sched_end_step(Sched* s);

/* Seconds the compute thread has waited, per kind, since the start. */
void sched_exposed(const Sched* s, double out[SCHED_NX]);
const CommPlan* sched_plan(const Sched* s);
/* The step plan's peak of gathered + gradient bytes. */
double sched_peak_bytes(const Sched* s);

/* --trace: a span on this rank's compute track (optimizer, data, ...), and
 * the Chrome trace-event JSON of every rank, written by rank 0 (collective). */
void sched_trace_span(Sched* s, const char* name, double t0, double t1);
void sched_trace_write(Sched* s, const char* path);

#endif
