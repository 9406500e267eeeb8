/*
 * project.h — what compression buys at 8 to 1024 GPUs, before buying them:
 * `build/train CONFIG --project CLUSTER.yaml` (docs/SCALE.md).
 *
 * For each GPU count (powers of two, cluster.gpus_min .. gpus_max) the
 * projection replays one training step of CONFIG as the run itself would
 * schedule it at that count (sched_plan_for_config: the same events, the
 * same gathers issued ahead, the same reduce-scatters retired at the same
 * points), with
 *   - compute per unit and phase: the unit's model FLOPs (llama.h's
 *     accounting, split by unit) over cluster.peak_tflops x cluster.mfu,
 *     slowed by cluster.contention while a collective is on the link; a
 *     MoE block's experts by 1 + cluster.maxvio (the busiest rank sets the
 *     pace of the exchange that follows);
 *   - every collective's time from the switcher's own cost model
 *     (comm/tune: zipcclTuneEstimateTwoLevel on the cluster's two link
 *     classes), the gathers and reduce-scatters of a rank queued on its
 *     link in issue order, the expert exchange on the compute's path;
 *   - the optimizer as its bytes over the GPU's memory bandwidth.
 * Four ways to communicate, each a whole step: raw (cluster.baseline: NCCL's
 * own collectives or ZipCCL's raw designs), compressed (flat direct,
 * cluster.codec_*), compressed hierarchical (comm.algo hier: raw inside a
 * node, frames between nodes), and the config's own plan (PROJ_PLAN).
 * Printed: the inputs with where each came from, then per GPU count the
 * step times, the exposed gather / reduce-scatter / exchange time of the
 * best compressed way, its speedup over raw with a band (the corners of
 * ratio +-5%, codec speed +-20%, MFU +-10%), the inter-node rate below which
 * compression pays, and what bounds the step (compute, link or latency).
 * --log-json FILE: the same as JSON lines (scripts/plot_project.py).
 *
 * Left out: pipeline and tensor parallelism (FSDP and EP only, as the
 * runtime); codecs other than the cluster's one (a plan's codec choice is
 * priced at cluster.codec_*); NCCL's own algorithms at scale (rings and trees are
 * the flat designs' estimates); the expert exchange's chunks overlapping
 * the experts (moe.overlap_chunks: charged whole).
 */
#ifndef RUNTIME_PROJECT_H
#define RUNTIME_PROJECT_H
#include <stdio.h>

#include "config.h"

/* One step at one GPU count, one way of communicating. */
typedef struct {
    double step_s;     /* the step's time                                 */
    double compute_s;  /* its compute alone (no waits, no contention)     */
    double exposed[3]; /* compute waiting on gathers, reduce-scatters, the exchange */
    double busy_s;     /* time the rank's link was busy                   */
} ProjStep;

/* The ways: the baseline, flat compressed, hierarchical compressed, and the
 * config's own plan (per unit and kind the strategy and algorithm
 * fsdp_plan_build gives it: comm.strategy, comm.allgather / reducescatter /
 * alltoall, comm.algo, comm.overrides; auto as auto decides, the cheaper
 * of raw and compressed by the same model). */
enum { PROJ_RAW = 0, PROJ_COMPRESSED, PROJ_HIER, PROJ_PLAN, PROJ_NWAYS };

/* The step of cfg at n GPUs, communicating `way` (PROJ_*). Returns 0, or -1
 * with err (a schedule the config's bounds refuse at that count). */
int project_step(const TrainConfig* cfg, int n, int way, ProjStep* out, char* err, size_t errlen);

/* Print the projection of cfg (its cluster.* keys) to f, JSON lines to
 * json (NULL: none). Returns 0 or -1 with err. */
int project_run(const TrainConfig* cfg, FILE* f, FILE* json, char* err, size_t errlen);

#endif
