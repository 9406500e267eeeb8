/*
 * memplan.h — the memory plan of a run: per rank, what each part of
 * training holds at its peak, on the host and on the device, from the
 * config alone (before anything is allocated), so a run that cannot fit is
 * refused with the breakdown, and `build/train CONFIG --plan N` answers
 * "how much per rank at N ranks?" without N ranks.
 *
 * The parts (bytes per rank):
 *   shards     parameters, gradients, AdamW m and v: fp32 shards of every
 *              unit (an expert unit over its EP group's data-parallel
 *              ranks)
 *   inflight   gathered units (with a bf16 gather, its receive buffer and
 *              the shard cast for sending) and full gradients in flight at the step's
 *              peak (the schedule's own simulation, runtime/scheduler.c): set
 *              by prefetch depth, max_reduces_in_flight and the largest
 *              units, not by the model's size
 *   acts       activations for (batch_size, seq_len) with the run's
 *              train.recompute and train.logits_rows (models/llama.h);
 *              acts_none / acts_full: the same without and with
 *              recomputation, for comparison. train.recompute: auto plans
 *              without recomputation, and the caller switches it on
 *              (memplan_recompute) when that does not fit its memory
 *   comm       ZipCCL's staging: the frames of the largest unit's gather
 *              (one unit at the wire dtype) and reduce-scatter (2 (n-1)/n
 *              of one, and a 1/n fp32 accumulator), 1/8 growth room; none
 *              at one rank; with expert parallelism, the exchange's row
 *              buffers and frames (N*k rows of C, the average a rank moves)
 *   data       the training tokens, read whole into memory (int32 each)
 *   base       the process before the model (libraries, MPI, OpenBLAS):
 *              measured, not modelled (the caller's resident set at start)
 * With a device backend the shards, the activations and the device copies
 * of the units and gradients in flight are device memory, with the staging
 * of one shard and, with an exchange, the received rows; the host keeps the
 * rest, three pinned row sets of the exchange's staging, and a copy of
 * params, m and v while a checkpoint is written.
 *
 * What it leaves out: allocator fragmentation and the OS page cache; a
 * routing so uneven that a rank receives more than the average N*k rows. docs/BENCHMARKS.md "Memory plan" compares the
 * plan with measured peaks.
 */
#ifndef RUNTIME_MEMPLAN_H
#define RUNTIME_MEMPLAN_H
#include <stdio.h>

#include "config.h"
#include "kernels.h"

typedef struct {
    int nranks;
    double params, grads, optim; /* the shards */
    double inflight;
    double acts, acts_none, acts_full;
    int recompute;      /* 1: acts is acts_full (train.recompute: full, or auto switched by
                         * memplan_recompute); what the run builds its activations with */
    int recompute_auto; /* train.recompute: auto: the caller decides against its budget */
    double comm, data, base;
    double host, device; /* totals: per rank; device 0 on a host backend */
} MemPlan;

/* The plan of cfg at nranks ranks on backend K (its activations and
 * attention scratch), data_bytes of tokens, base bytes measured. Returns 0,
 * or -1 with the reason in err (the schedule's refusals, naming the key). */
int memplan_build(const TrainConfig* cfg, int nranks, const ZrtKernels* K, double data_bytes,
                  double base, MemPlan* mp, char* err, size_t errlen);

/* Whether the plan fits host_budget bytes of host memory and (on a
 * device) device_budget of device memory per rank; a budget <= 0 bounds
 * nothing. */
int memplan_fits(const MemPlan* mp, const ZrtKernels* K, double host_budget, double device_budget);

/* Switch the plan to recomputation (acts_full, and the totals with it):
 * what train.recompute: auto does when the plan without it does not fit. */
void memplan_recompute(MemPlan* mp, const ZrtKernels* K);

/* The breakdown, one "# memory ..." line per part, to f. */
void memplan_print(const MemPlan* mp, const TrainConfig* cfg, const ZrtKernels* K, FILE* f);

#endif
