/*
 * train_run.h — what the trainer's three files share: one run's state.
 *
 *   runtime/train.c        main and the step loop (read this one first)
 *   runtime/train_setup.c  arguments, config, checkpoint to resume, device,
 *                          memory plan, data, model, FSDP and scheduler
 *   runtime/train_log.c    one step's figures (the log line, the JSON line)
 *                          and the run's closing report
 *
 * Not a library interface: build/train is the only program that uses it.
 */
#ifndef RUNTIME_TRAIN_RUN_H
#define RUNTIME_TRAIN_RUN_H
#include <stdio.h>

#include "checkpoint.h"
#include "config.h"
#include "data.h"
#include "fsdp.h"
#include "kernels.h"
#include "llama.h"
#include "memplan.h"
#include "optim.h"
#include "peaks.h"
#include "plan.h"
#include "scheduler.h"

#define TRAIN_MAX_SETS 64
/* Exit status of a run stopped by SIGTERM / SIGUSR1 at a step's end, after
 * the checkpoint of that step is written (when checkpoint.dir is set). */
#define TRAIN_EXIT_PREEMPTED 75

typedef struct {
    const char* config;
    const char* sets[TRAIN_MAX_SETS];
    int n_sets;
    const char* log_json;
    int dump_steps[16]; /* --dump-tensors STEP[,STEP...]: ascending */
    int n_dump_steps;
    const char* dump_dir;
    const char* resume;
    int plan; /* --plan N: print the memory plan at N ranks and exit */
    const char* project; /* --project CLUSTER.yaml: print the projection and exit */
    const char* trace_data;
    const char* trace; /* --trace FILE: Chrome trace-event JSON of the steps */
    char init_from[CFG_PATH_MAX + 32]; /* --init-from DIR, as the --set it stands for */
} TrainArgs;

/* A MoE block's expert load over one step: pairs per expert, all ranks. */
typedef struct {
    long long min, max;
    double maxvio; /* (max - mean) / mean: 0 when balanced */
} TrainBlockLoad;

typedef struct {
    int rank, nranks;
    TrainArgs args;
    TrainConfig cfg;
    AdamWConfig oc;      /* the optimizer and its schedule */
    CheckpointInfo ck;   /* --resume: the checkpoint, read before anything is built */
    char notes[4096];    /* what the resumed run changes, said after the config */
    TrainState st;       /* steps done, samples consumed (checkpointed) */
    int first_step;      /* st.step when this process started */

    const ZrtKernels* K; /* the kernel table the model and the shards use */
    /* MFU's denominator (docs/RUNTIME.md "Logs"), all ranks together */
    double peak;         /* FLOP/s: the spec, the probe or the host's SGEMM */
    const char* peak_source; /* "spec" (card, runtime/peaks.c) | "probe" (a device
                              * the table lacks) | "sgemm" (the host, measured) */
    const ZrtCardPeak* card; /* the spec's card (every rank's in the table), or NULL */
    int n_devices;       /* the devices under the ranks, counted once each */
    double probe;        /* the matmul probe (a device's through its kernel
                          * table, the host's SGEMM), FLOP/s, all ranks */
    MemPlan mplan;       /* the memory plan (memplan.h) */
    CommPlan comm_plan;  /* built at set-up from the config; FSDP takes it over */

    Dataset ds;
    Fsdp fsdp;
    Sched* sched;
    LlamaParamHooks hooks; /* the scheduler's: how the model reaches its units */
    LlamaActs* acts;
    int *tok, *tgt;      /* (B, T) a micro-batch (validation) */
    int* batch_ring;     /* (grad_accum, 2, B*T) pinned host memory: micro-batch a's
                          * tokens then targets, uploaded without a wait; rewritten a
                          * step later, after the step's read-back */
    double* step_scalars; /* device: each micro-batch's summed loss (grad_accum), then
                          * each unit's gradient sum of squares (n_units): one copy
                          * back per step, into step_scalars_host */
    double* step_scalars_host;
    int* loss_counts;    /* (grad_accum) its counted targets (host)         */
    long long* windows;  /* (B) its windows' indices (--trace-data) */
    float* dump_logits;  /* --dump-tensors: (B, T, V) */
    FILE* json;          /* the JSON log (rank 0; NULL without one) */
    FILE* trace_data;    /* --trace-data file (rank 0) */

    /* MoE: pairs per (MoE block, expert), then the drops, over one step */
    int moe, n_moe;
    long long* expert_load;
    double* aux_micro;   /* MoE: each micro-batch's aux loss of the step (grad_accum) */
    TrainBlockLoad* block_load;

    double t_start;        /* the end of set-up: the run's clock */
    double comm_before[3]; /* collective time so far per kind (ms): AG, RS, a2a */
} TrainRun;

/* One step's figures: what the log line and the JSON line say. */
typedef struct {
    int step; /* 1-based */
    double loss, aux, norm, val;
    float lr;
    double maxvio;
    /* expert parallelism: how far the busiest EP rank's expert rows are
     * above the EP ranks' mean, over the step's MoE blocks: sum over blocks
     * of the busiest slice's rows / sum of the mean slice's rows - 1 (0 at
     * EP 1 or when balanced). Each block's exchange waits for its busiest
     * rank, so this is the step's expert compute slowdown (the projection's
     * cluster.maxvio); from the step's counts summed over micro-batches and
     * EP groups, a lower bound of the per-micro-batch figure. */
    double rank_vio;
    long long dropped;
    /* marks at the step's start (train_log_start) */
    zipcclCounters_t c0[3];
    double x0[SCHED_NX], blocked0, a2a_blocked0, a2a_sync0;
    double x1[SCHED_NX]; /* the exposed times at the optimizer's end */
    /* times (s, ms) */
    double t0, dt, data_s, model_s, tail_ms, opt_ms;
    /* communication (train_log_finish) */
    zipcclCounters_t c1[3];
    double raw[3], wire[3], codec_ms, comm_ms[3], xms[SCHED_NX], exposed_ms;
    double bus_bytes, bus_ms; /* device: ZipCCL's device <-> host copies (gathers, reduce-scatters) */
    double a2a_ms, a2a_sync_ms;
    /* the device's counts (device.h) at the step's start and end: host
     * waits (synchronisations, blocking copies) of the compute thread and of
     * ZipCCL's progress threads, allocations and frees */
    ZDevCounters d0, d1;
} TrainStepLog;

/* ---- train_setup.c ---- */
/* Errors every rank sees alike (bad arguments, bad config): rank 0 says it,
 * all ranks leave with status 2. */
void train_config_fail(const char* msg);
/* Errors a rank may find on its own: the ranks agree, the first that failed
 * says why, all leave with status 2. */
void train_agree_or_fail(int bad, const char* msg);
/* Everything before the first step. Returns 1 after --plan N printed the
 * plan (nothing else was built), else 0. */
int train_setup(TrainRun* r, int argc, char** argv);
/* Frees what train_setup built. */
void train_teardown(TrainRun* r);

/* ---- train_log.c ---- */
void train_log_start(TrainRun* r, TrainStepLog* s);  /* the step's marks */
void train_log_finish(TrainRun* r, TrainStepLog* s); /* its communication figures */
void train_log_step(TrainRun* r, const TrainStepLog* s); /* rank 0: console, JSON */
/* The run's end: the plan as it ran, the trace, the memory against the
 * plan, the final hash and line; preempted > 0: how many ranks were. */
void train_log_end(TrainRun* r, int preempted, int saved_step);

#endif
