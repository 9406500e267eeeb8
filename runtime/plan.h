/*
 * plan.h — the communication plan: for every unit and every collective kind
 * of a step, which strategy, codec and algorithm its calls ask ZipCCL for
 * (see plan.c), and, once the run is over, what actually ran.
 *
 * Kinds: the parameter all-gather (allgather), the gradient reduce-scatter
 * (reducescatter) and the expert exchange of a MoE block (alltoall, filed
 * under the block's unit "layers.N"). When the calls happen is the
 * scheduler's business (sched.h); the plan only says how.
 *
 * Left out: per-call choices inside a unit (every call of one unit and kind
 * asks for the same thing; `auto` lets ZipCCL's switcher choose per call).
 */
#ifndef RUNTIME_PLAN_H
#define RUNTIME_PLAN_H
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "zipccl.h"

typedef enum { PLAN_AG = 0, PLAN_RS = 1, PLAN_A2A = 2, PLAN_NKINDS = 3 } PlanKind;

/* What ran, summed over the run, for one unit and kind (this rank's calls). */
typedef struct {
    uint64_t calls;
    uint64_t by_strategy[5];           /* zipcclStrategy_t that executed      */
    uint64_t by_codec[ZIPCCL_NCODECS]; /* compressed calls per codec          */
    uint64_t raw, wire;                /* bytes (ZipCCL's counters)           */
    double codec_s, total_s;           /* codec time, time inside the calls   */
    double exposed_s;                  /* the compute thread waiting on them  */
    uint64_t shared;                   /* calls whose counters came in one
                                        * reading with a neighbour's (split
                                        * between them: scheduler.c)               */
} PlanStats;

typedef struct {
    int applies;             /* the unit has collectives of this kind            */
    zipcclCallConfig_t cfg;  /* what its calls ask for                           */
    int local;               /* its group is this rank alone: no collective
                              * (fsdp_unit_local; scheduler.c sets it)          */
    int calls_per_step;      /* from the schedule (scheduler.c fills these two)      */
    uint64_t bytes_per_step; /* raw bytes this rank's calls move per step        */
} PlanEntry;

typedef struct {
    int n_units;
    char (*names)[32];
    PlanEntry (*e)[PLAN_NKINDS];
    PlanStats (*st)[PLAN_NKINDS];
} CommPlan;

const char* plan_kind_name(int kind); /* "allgather", "reducescatter", "alltoall" */

/* Build the plan of n_units units named names[u] (fsdp's "outer",
 * "layers.N", "layers.N.experts"), has[u][k] saying which kinds each unit
 * has, from cfg: defaults (comm.strategy, comm.codec, comm.algo), per kind
 * (comm.allgather / reducescatter / alltoall), then comm.overrides in order
 * (later rules win, a rule sets only the fields it names). Returns 0, or -1
 * with a message naming the key and its place in err: a rule that matches
 * no unit of its kind, an algorithm that applies to none of its kinds. */
int plan_build(CommPlan* p, const TrainConfig* cfg, int n_units, const char (*names)[32],
               const int (*has)[PLAN_NKINDS], char* err, size_t errlen);
void plan_free(CommPlan* p);

/* The effective plan: one row per unit, per kind strategy/codec/algo and
 * the raw bytes per step; units with identical rows are folded into one
 * line ("layers.0 .. layers.7"). */
void plan_print(const CommPlan* p, FILE* f);
/* What ran: per unit and kind, the calls per strategy and codec, raw and
 * wire bytes, their ratio, codec and exposed time. */
void plan_print_actual(const CommPlan* p, FILE* f);
/* Units and kinds the plan asks to compress with a call that did not run
 * compressed: returns how many, with the first named in err. */
int plan_check_compressed(const CommPlan* p, char* err, size_t errlen);

#endif
