/*
 * train_log.c — what the trainer says: one step's figures (the console line
 * of rank 0 and the JSON log's line, docs/RUNTIME.md "Logs") from ZipCCL's
 * counters and the scheduler's exposed times, and the run's closing report
 * (the plan as it ran, the trace, the memory against the plan, the final
 * parameter hash).
 */
#include <inttypes.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "train_run.h"

static void fmt_eta(double s, char* buf, size_t n) {
    if (s < 0 || !isfinite(s)) s = 0;
    int h = (int)(s / 3600), m = (int)(s / 60) % 60, sec = (int)s % 60;
    if (h) snprintf(buf, n, "%dh%02dm", h, m);
    else snprintf(buf, n, "%dm%02ds", m, sec);
}

static const zipcclCollKind_t kKinds[3] = {zipcclCollAllGather, zipcclCollReduceScatter,
                                           zipcclCollAlltoAllv};

/* Time inside the collectives of each kind so far (ms): the gathers', the
 * reduce-scatters' and the expert exchange's communicators (the bookkeeping
 * scalars' communicator left out). */
static void comm_ms_so_far(const Fsdp* fsdp, double out[3]) {
    zipcclComm_t cs[3] = {fsdp->comm_ag, fsdp->comm_rs, fsdp->ep > 1 ? fsdp->expert.comm : NULL};
    zipcclComm_t cx[3] = {fsdp->ep > 1 ? fsdp->comm_ag_x : NULL,
                          fsdp->ep > 1 ? fsdp->comm_rs_x : NULL, NULL};
    for (int k = 0; k < 3; k++) {
        out[k] = 0;
        zipcclComm_t two[2] = {cs[k], cx[k]};
        for (int i = 0; i < 2; i++) {
            if (!two[i]) continue;
            zipcclCounters_t c;
            fsdp_comm_counters(fsdp, two[i], kKinds[k], &c);
            out[k] += c.totalSeconds * 1e3;
        }
    }
}

void train_log_start(TrainRun* r, TrainStepLog* s) {
    Fsdp* fsdp = &r->fsdp;
    if (s->step == r->first_step + 1) /* the run's first step: the collectives so far */
        comm_ms_so_far(fsdp, r->comm_before);
    for (int k = 0; k < 3; k++) fsdp_counters(fsdp, kKinds[k], &s->c0[k]);
    s->blocked0 = fsdp->blocked_s;
    s->a2a_blocked0 = fsdp->ep > 1 ? fsdp->expert.blocked_s : 0;
    s->a2a_sync0 = fsdp->ep > 1 ? fsdp->expert.sync_s : 0;
    sched_exposed(r->sched, s->x0);
    zdev_counters(&s->d0);
    s->t0 = zrt_now();
    s->val = NAN;
}

/* The step's host waits, allocations and frees (device.h's counts). */
static long long waits_of(const ZDevCount* a, const ZDevCount* b) {
    return (long long)((b->syncs + b->copies) - (a->syncs + a->copies));
}
static long long allocs_of(const TrainStepLog* s) {
    return (long long)((s->d1.compute.allocs + s->d1.other.allocs) - (s->d0.compute.allocs + s->d0.other.allocs));
}
static long long frees_of(const TrainStepLog* s) {
    return (long long)((s->d1.compute.frees + s->d1.other.frees) - (s->d0.compute.frees + s->d0.other.frees));
}

void train_log_finish(TrainRun* r, TrainStepLog* s) {
    Fsdp* fsdp = &r->fsdp;
    zdev_counters(&s->d1);
    for (int k = 0; k < 3; k++) fsdp_counters(fsdp, kKinds[k], &s->c1[k]);
    s->codec_ms = 0;
    for (int k = 0; k < 3; k++) {
        s->raw[k] = (double)(s->c1[k].rawBytes - s->c0[k].rawBytes);
        s->wire[k] = (double)(s->c1[k].wireBytes - s->c0[k].wireBytes);
        s->codec_ms += (s->c1[k].codecSeconds - s->c0[k].codecSeconds) * 1e3;
    }
    /* a device's collectives: what crossed between it and the host */
    s->bus_bytes = s->bus_ms = 0;
    for (int k = 0; k < 2; k++) {
        s->bus_bytes += (double)(s->c1[k].busBytes - s->c0[k].busBytes);
        s->bus_ms += (s->c1[k].busSeconds - s->c0[k].busSeconds) * 1e3;
    }
    /* time inside the collectives of each kind and what of it the compute
     * thread waited (exposed) */
    double now[3];
    comm_ms_so_far(fsdp, now);
    for (int k = 0; k < 3; k++) {
        s->comm_ms[k] = now[k] - r->comm_before[k];
        r->comm_before[k] = now[k];
    }
    for (int k = 0; k < SCHED_NX; k++) s->xms[k] = (s->x1[k] - s->x0[k]) * 1e3;
    s->exposed_ms = (fsdp->blocked_s - s->blocked0) * 1e3;
    s->a2a_ms = fsdp->ep > 1 ? (fsdp->expert.blocked_s - s->a2a_blocked0) * 1e3 : 0;
    s->a2a_sync_ms = fsdp->ep > 1 ? (fsdp->expert.sync_s - s->a2a_sync0) * 1e3 : 0;
}

void train_log_step(TrainRun* r, const TrainStepLog* s) {
    const TrainConfig* cfg = &r->cfg;
    const LlamaConfig* mc = &cfg->model;
    const Fsdp* fsdp = &r->fsdp;
    const int B = cfg->data.batch_size, T = cfg->data.seq_len, A = cfg->data.grad_accum;
    const double tokens_per_step = (double)B * T * r->nranks * A;
    const double flops_per_step = llama_flops_per_token(mc, T) * tokens_per_step;
    const double comm_all = s->comm_ms[0] + s->comm_ms[1] + s->comm_ms[2],
                 xcomm = s->xms[SCHED_X_AG] + s->xms[SCHED_X_RS] + s->xms[SCHED_X_A2A];
    const double overlap_frac =
        comm_all > 0 ? 1 - (xcomm < comm_all ? xcomm : comm_all) / comm_all : 0;
    const double raw_all = s->raw[0] + s->raw[1] + s->raw[2],
                 wire_all = s->wire[0] + s->wire[1] + s->wire[2];
    if (r->rank == 0) {
        const double tps = tokens_per_step / s->dt, fl = flops_per_step / s->dt;
        const double elapsed = zrt_now() - r->t_start;
        char eta[32];
        fmt_eta(elapsed / (s->step - r->first_step) * (cfg->train.steps - s->step), eta,
                sizeof eta);
        if (s->step % cfg->log.every == 0 || s->step == cfg->train.steps || !isnan(s->val)) {
            printf("step %5d/%d | loss %.4f | norm %.4f | lr %.3e | %7.1f ms | %8.0f tok/s | "
                   "%6.2f GFLOP/s | MFU %5.1f%% | comm %.2f MB -> %.2f MB (x%.3f) | codec "
                   "%.1f ms | exposed %.1f ms (ag %.1f rs %.1f a2a %.1f misc %.1f of comm "
                   "%.1f: overlap %.0f%%)",
                   s->step, cfg->train.steps, s->loss, s->norm, s->lr, s->dt * 1e3, tps, fl / 1e9,
                   100 * fl / r->peak, raw_all / 1e6, wire_all / 1e6,
                   wire_all > 0 ? raw_all / wire_all : 1.0, s->codec_ms, s->exposed_ms,
                   s->xms[SCHED_X_AG], s->xms[SCHED_X_RS], s->xms[SCHED_X_A2A], s->xms[SCHED_X_MISC],
                   comm_all, 100 * overlap_frac);
            if (r->moe) {
                printf(" | aux %.4f | maxvio %.2f", s->aux, s->maxvio);
                if (fsdp->ep > 1) printf(" | rank vio %.2f", s->rank_vio);
                if (mc->capacity_factor > 0) printf(" | dropped %lld", s->dropped);
                if (fsdp->ep > 1) /* the calls: a chunked exchange is several per block */
                    printf(" | a2a %.2f MB (x%.3f) %llu calls %.1f ms", s->raw[2] / 1e6,
                           s->wire[2] > 0 ? s->raw[2] / s->wire[2] : 1.0,
                           (unsigned long long)(s->c1[2].calls - s->c0[2].calls), s->a2a_ms);
            }
            if (!r->K->dev->host_access)
                printf(" | bus %.2f MB %.1f ms | host waits %lld (+%lld comm) allocs %lld", s->bus_bytes / 1e6,
                       s->bus_ms, waits_of(&s->d0.compute, &s->d1.compute), waits_of(&s->d0.other, &s->d1.other),
                       allocs_of(s));
            if (!isnan(s->val)) printf(" | val %.4f", s->val);
            printf(" | eta %s\n", eta);
            fflush(stdout);
        }
        if (r->json) {
            fprintf(r->json,
                    "{\"step\": %d, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, "
                    "\"ms\": %.9g, \"tokens_per_s\": %.9g, \"flops_per_s\": %.9g, "
                    "\"mfu\": %.9g, \"comm_raw_bytes\": %.0f, \"comm_wire_bytes\": %.0f, "
                    "\"comm_ratio\": %.9g, \"allgather_ratio\": %.9g, "
                    "\"reducescatter_ratio\": %.9g, \"allgather_raw_bytes\": %.0f, "
                    "\"allgather_wire_bytes\": %.0f, \"reducescatter_raw_bytes\": %.0f, "
                    "\"reducescatter_wire_bytes\": %.0f, \"codec_ms\": %.9g, "
                    "\"exposed_comm_ms\": %.9g",
                    s->step, s->loss, s->norm, (double)s->lr, s->dt * 1e3, tps, fl, fl / r->peak, raw_all,
                    wire_all, wire_all > 0 ? raw_all / wire_all : 1.0,
                    s->wire[0] > 0 ? s->raw[0] / s->wire[0] : 1.0,
                    s->wire[1] > 0 ? s->raw[1] / s->wire[1] : 1.0, s->raw[0], s->wire[0], s->raw[1], s->wire[1],
                    s->codec_ms, s->exposed_ms);
            fprintf(r->json,
                    ", \"exposed_allgather_ms\": %.9g, \"exposed_reducescatter_ms\": %.9g, "
                    "\"exposed_alltoall_ms\": %.9g, \"exposed_misc_ms\": %.9g, "
                    "\"comm_allgather_ms\": %.9g, \"comm_reducescatter_ms\": %.9g, "
                    "\"comm_alltoall_ms\": %.9g, \"overlap\": %.9g, \"data_ms\": %.9g, "
                    "\"model_ms\": %.9g, \"last_reduce_ms\": %.9g, \"optimizer_ms\": %.9g",
                    s->xms[SCHED_X_AG], s->xms[SCHED_X_RS], s->xms[SCHED_X_A2A], s->xms[SCHED_X_MISC],
                    s->comm_ms[0], s->comm_ms[1], s->comm_ms[2], overlap_frac, s->data_s * 1e3,
                    s->model_s * 1e3, s->tail_ms, s->opt_ms);
            if (r->moe) {
                fprintf(r->json,
                        ", \"aux_loss\": %.9g, \"expert_maxvio\": %.9g, \"expert_rank_vio\": %.9g, "
                        "\"dropped_pairs\": %lld, \"alltoall_raw_bytes\": %.0f, "
                        "\"alltoall_wire_bytes\": %.0f, \"alltoall_ratio\": %.9g, "
                        "\"alltoall_exposed_ms\": %.9g, \"alltoall_sync_ms\": %.9g, "
                        "\"alltoall_calls\": %llu, \"experts\": [",
                        s->aux, s->maxvio, s->rank_vio, s->dropped, s->raw[2], s->wire[2],
                        s->wire[2] > 0 ? s->raw[2] / s->wire[2] : 1.0, s->a2a_ms, s->a2a_sync_ms,
                        (unsigned long long)(s->c1[2].calls - s->c0[2].calls));
                for (int i = 0, l = 0; l < mc->n_layers; l++) {
                    if (!llama_layer_is_moe(mc, l)) continue;
                    fprintf(r->json,
                            "%s{\"layer\": %d, \"min\": %lld, \"max\": %lld, "
                            "\"maxvio\": %.9g}",
                            i ? ", " : "", l, r->block_load[i].min, r->block_load[i].max,
                            r->block_load[i].maxvio);
                    i++;
                }
                fprintf(r->json, "]");
            }
            /* what mfu is against (the run header's "# MFU against" line) */
            fprintf(r->json, ", \"mfu_peak_flops_per_s\": %.9g, \"mfu_peak_source\": \"%s\"", r->peak,
                    r->peak_source);
            if (!r->K->dev->host_access)
                fprintf(r->json, ", \"matmul_probe_flops_per_s\": %.9g", r->probe);
            if (!r->K->dev->host_access) /* ZipCCL's copies of the device's gathers and reduce-scatters */
                fprintf(r->json, ", \"bus_bytes\": %.0f, \"bus_ms\": %.9g", s->bus_bytes, s->bus_ms);
            /* device.h's counts, on every device (rank 0's; every rank runs the same program) */
            fprintf(r->json, ", \"host_waits\": %lld, \"host_waits_comm\": %lld, \"dev_allocs\": %lld, "
                             "\"dev_frees\": %lld",
                    waits_of(&s->d0.compute, &s->d1.compute), waits_of(&s->d0.other, &s->d1.other), allocs_of(s),
                    frees_of(s));
            if (!isnan(s->val)) fprintf(r->json, ", \"val_loss\": %.9g", s->val);
            fprintf(r->json, "}\n");
            fflush(r->json);
        }
    }
}

void train_log_end(TrainRun* r, int preempted, int saved_step) {
    const TrainConfig* cfg = &r->cfg;
    const LlamaConfig* mc = &cfg->model;
    const TrainArgs* args = &r->args;
    const TrainState* st = &r->st;
    Fsdp* fsdp = &r->fsdp;
    if (r->rank == 0) {
        plan_print_actual(sched_plan(r->sched), stdout);
        fflush(stdout);
    }
    if (r->nranks > 1 && st->step > r->first_step) {
        char perr[1024];
        train_agree_or_fail(plan_check_compressed(sched_plan(r->sched), perr, sizeof perr) > 0, perr);
    }
    if (args->trace) {
        sched_trace_write(r->sched, args->trace);
        if (r->rank == 0)
            printf("# trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n",
                   PRINTABLE(args->trace));
    }
    /* The measured peak against the plan: the largest resident-set
     * high-water mark of the ranks, read before the hash below gathers each
     * unit once more (checkpoints add rank 0's gather of whole units on
     * top, which the plan leaves out). */
    double rss_peak = (double)zrt_rss_peak(), rss_max = 0;
    const uint64_t hash = fsdp_param_hash(fsdp);
    MPI_Allreduce(&rss_peak, &rss_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    /* Expert parallelism: what the exchanges of each MoE block compressed to,
     * all ranks' traffic over the run, activations and gradients apart. */
    char a2a_json[4096] = "";
    if (fsdp->ep > 1) {
        const size_t nb = (size_t)mc->n_layers * 8;
        uint64_t* b = zrt_malloc(nb * sizeof *b, "a2a bytes");
        memcpy(b, fsdp->expert.bytes, nb * sizeof *b);
        MPI_Allreduce(MPI_IN_PLACE, b, (int)nb, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        size_t used = (size_t)snprintf(a2a_json, sizeof a2a_json, ", \"alltoall_by_layer\": [");
        static const char* const what[4] = {"dispatch", "combine", "dispatch_grad", "combine_grad"};
        if (r->rank == 0) printf("# alltoall ratio per MoE block (all ranks, the run): layer:");
        for (int l = 0, first = 1; l < mc->n_layers; l++) {
            if (!llama_layer_is_moe(mc, l)) continue;
            const uint64_t* x = b + (size_t)l * 8;
            if (r->rank == 0)
                printf(" %d %.3f/%.3f (act) %.3f/%.3f (grad)%s", l, x[1] ? (double)x[0] / x[1] : 1,
                       x[3] ? (double)x[2] / x[3] : 1, x[5] ? (double)x[4] / x[5] : 1,
                       x[7] ? (double)x[6] / x[7] : 1, "");
            used += (size_t)snprintf(a2a_json + used, used < sizeof a2a_json ? sizeof a2a_json - used : 0,
                                     "%s{\"layer\": %d", first ? "" : ", ", l);
            for (int k = 0; k < 4; k++)
                used += (size_t)snprintf(a2a_json + used,
                                         used < sizeof a2a_json ? sizeof a2a_json - used : 0,
                                         ", \"%s_raw_bytes\": %llu, \"%s_wire_bytes\": %llu",
                                         what[k], (unsigned long long)x[2 * k], what[k],
                                         (unsigned long long)x[2 * k + 1]);
            used += (size_t)snprintf(a2a_json + used, used < sizeof a2a_json ? sizeof a2a_json - used : 0, "}");
            first = 0;
        }
        if (r->rank == 0) printf("  (dispatch/combine)\n");
        if (used < sizeof a2a_json) snprintf(a2a_json + used, sizeof a2a_json - used, "]");
        else a2a_json[0] = '\0'; /* too many blocks for one line: the console has it */
        free(b);
    }
    if (r->rank == 0) {
        char b[2][32];
        printf("# memory: peak resident set %s per rank (the largest of the ranks), the plan "
               "%s (%+.1f%%)\n",
               zrt_fmt_bytes(rss_max, b[0], 32), zrt_fmt_bytes(r->mplan.host, b[1], 32),
               r->mplan.host > 0 ? 100 * (rss_max / r->mplan.host - 1) : 0.0);
    }
    if (r->rank == 0 && preempted) {
        /* No "final" JSON line: the run is not finished. */
        char where[CFG_PATH_MAX + 64] = "no checkpoint.dir: nothing saved";
        if (saved_step == st->step)
            snprintf(where, sizeof where, "checkpoint %s/step_%08d written",
                     PRINTABLE(cfg->ckpt.dir), st->step);
        printf("# preempted: SIGTERM/SIGUSR1 on %d of %d rank%s; stopped after step %d of %d, "
               "%s; param hash %016" PRIx64 "; exit %d\n",
               preempted, r->nranks, r->nranks > 1 ? "s" : "", st->step, cfg->train.steps, where,
               hash, TRAIN_EXIT_PREEMPTED);
        fflush(stdout);
    } else if (r->rank == 0) {
        printf("# done: %d steps, %.1f s, final param hash %016" PRIx64 "\n",
               st->step - r->first_step, zrt_now() - r->t_start, hash);
        if (r->json) {
            fprintf(r->json,
                    "{\"final\": true, \"step\": %d, \"param_hash\": \"%016" PRIx64 "\", "
                    "\"rss_peak_bytes\": %.0f, \"plan_host_bytes\": %.0f, "
                    "\"plan_device_bytes\": %.0f%s}\n",
                    st->step, hash, rss_max, r->mplan.host, r->mplan.device, a2a_json);
            fflush(r->json);
        }
    }
}
