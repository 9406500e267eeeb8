/*
 * train.c — the trainer: `build/train CONFIG.yaml [options]`, one process per
 * rank under mpirun (or alone as one rank). This file is the step loop;
 * train_setup.c builds the run (config, device, memory plan, data, model)
 * and train_log.c says what happened (train_run.h: what they share).
 *
 *   build/train CONFIG.yaml [--set key=value ...] [--log-json FILE]
 *               [--dump-tensors STEPS DIR] [--resume DIR] [--init-from DIR]
 *               [--trace-data FILE] [--trace FILE] [--plan NRANKS]
 *
 * One step, top to bottom (docs/RUNTIME.md has the long form):
 *   for each of grad_accum micro-batches:
 *       this rank's sequences of the global micro-batch (runtime/data.c)
 *       llama_step: forward and backward; its hooks are the scheduler's
 *         (runtime/scheduler.c), which all-gathers each unit before the model
 *         reads it and reduce-scatters its gradient once complete (FSDP,
 *         runtime/fsdp.c, over ZipCCL)
 *   the last reduce-scatters; mean over the global batch; global-norm clip;
 *   AdamW on this rank's shards (runtime/optim.c through the kernel table)
 *   then: the log line, validation, a checkpoint, the preemption check.
 *
 * Preemption: SIGTERM or SIGUSR1 (what mpirun forwards; build/supervise
 * sends it) only sets a flag. At each step's end the ranks agree whether any
 * got it; then all write a checkpoint of that step and leave with
 * TRAIN_EXIT_PREEMPTED (75, EX_TEMPFAIL: "try again", from the checkpoint).
 *
 * runtime.device: cpu | cuda | cpu_guarded picks the device and its kernel
 * table (runtime/device_setup.c): the model, FSDP's shards, the optimizer,
 * the gathered units and the expert exchange's rows live in its memory, and
 * the collectives take its buffers (ZipCCL codes compressed calls where
 * they live, or stages them). This thread is the device's compute thread:
 * the step's host waits are counted on it (device/device.h, the step log).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "log.h"
#include "safetensors.h"
#include "train_run.h"

static volatile sig_atomic_t g_stop_signal; /* SIGTERM / SIGUSR1 received: stop at the step's end */

static void on_stop_signal(int sig) { g_stop_signal = sig; }

/* Before MPI_Init (which takes a while under mpirun: a signal then must not
 * kill the rank); Open MPI installs no handler of its own for these two.
 * SA_RESTART: a read or write the signal interrupts carries on. */
static void install_stop_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

/* --trace-data: rank 0 gathers every rank's window indices (and a hash of
 * the tokens it will train on) and writes one JSON line per rank, so a test
 * can check the data order from outside (tests/test_data_order.py). */
static void trace_batch(const TrainRun* r, int step, int micro, const char* split, long long first, int B,
                        const long long* windows, const int* tok, int T) {
    if (!r->args.trace_data) return; /* every rank takes part */
    long long* mine = zrt_malloc((size_t)(B + 1) * sizeof(long long), "trace");
    uint64_t h = zrt_fnv1a64(ZRT_FNV_INIT, tok, (size_t)B * T * sizeof(int));
    mine[0] = (long long)h;
    memcpy(mine + 1, windows, (size_t)B * sizeof(long long));
    long long* all = r->rank == 0 ? zrt_malloc((size_t)r->nranks * (B + 1) * sizeof(long long),
                                              "trace") : NULL;
    MPI_Gather(mine, B + 1, MPI_LONG_LONG, all, B + 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    free(mine);
    if (r->rank != 0) return;
    for (int q = 0; q < r->nranks; q++) {
        const long long* w = all + (size_t)q * (B + 1);
        fprintf(r->trace_data,
                "{\"step\": %d, \"micro\": %d, \"split\": \"%s\", \"rank\": %d, \"nranks\": %d, "
                "\"first_sample\": %lld, \"tokens_fnv1a64\": \"%016" PRIx64 "\", \"windows\": [",
                step, micro, split, q, r->nranks, first, (uint64_t)w[0]);
        for (int b = 0; b < B; b++) fprintf(r->trace_data, "%s%lld", b ? ", " : "", w[1 + b]);
        fprintf(r->trace_data, "]}\n");
    }
    fflush(r->trace_data);
    free(all);
}

/* --dump-tensors: what the model saw and said in the dump step's first
 * micro-batch, per rank: tokens and targets (B, T), logits (B, T, V), and
 * its loss (the mean cross-entropy llama_step returned, as metadata). */
static void dump_batch(int rank, const char* dir, int step, const int* tok, const int* tgt,
                       const float* logits, int B, int T, int V, float loss) {
    char err[512], path[1100], lbuf[32];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        trainCheck(0, "--dump-tensors: cannot create %s: %s", PRINTABLE(dir), strerror(errno));
    st_writer* w = st_writer_begin();
    trainCheck(w, "out of memory for the batch dump");
    const int64_t bt[2] = {B, T}, btv[3] = {B, T, V};
    const size_t n = (size_t)B * T;
    trainCheck(!st_writer_add(w, "tokens", "I32", 2, bt, tok, n * sizeof(int), err, sizeof err) &&
                   !st_writer_add(w, "targets", "I32", 2, bt, tgt, n * sizeof(int), err,
                                  sizeof err) &&
                   !st_writer_add(w, "logits", "F32", 3, btv, logits, n * V * sizeof(float), err,
                                  sizeof err),
               "batch dump: %s", err);
    snprintf(lbuf, sizeof lbuf, "%.9g", (double)loss);
    st_writer_set_metadata(w, "loss", lbuf, err, sizeof err);
    snprintf(path, sizeof path, "%s/step%d_rank%d_batch.safetensors", dir, step, rank);
    trainCheck(!st_writer_write(w, path, err, sizeof err), "batch dump %s: %s", PRINTABLE(path),
               err);
    st_writer_free(w);
}

/* train.rank_invariant: the mean over the global batch's micro-batches of
 * one value each (mine: this rank's A), added in the gradient's tree (leaf
 * a * ranks + q is micro-batch a of rank q; fsdp.h), the same on every
 * rank and at every rank count. */
static double tree_mean(TrainRun* r, const double* mine, int A) {
    const int G = r->nranks * A;
    double* all = zrt_malloc((size_t)2 * G * sizeof(double), "micro-batch values");
    fsdp_gather_over_ranks(&r->fsdp, mine, (size_t)A, all);
    double* leaf = all + G;
    for (int q = 0; q < r->nranks; q++)
        for (int a = 0; a < A; a++) leaf[(size_t)a * r->nranks + q] = all[(size_t)q * A + a];
    const double m = fsdp_tree_sum(leaf, G) / G;
    free(all);
    return m;
}

/* The validation loss: val_batches global micro-batches of the validation
 * split, forward only, the mean over ranks. train.rank_invariant: val_batches
 * x grad_accum global micro-batches, so val_batches x ranks x grad_accum
 * leaves of B sequences (the same samples at every rank count when
 * train.grad_groups fixes ranks x grad_accum), their mean in the tree. */
static double validate(TrainRun* r, int step) {
    const TrainConfig* cfg = &r->cfg;
    int *tok = r->tok, *tgt = r->tgt;
    long long* windows = r->windows;
    const int B = cfg->data.batch_size, T = cfg->data.seq_len;
    /* Validation batch k is global micro-batch k of the split in file order:
     * samples k*G .. k*G+G-1, G = B * ranks (rank_invariant: leaf k, and
     * val_batches x grad_accum of them, the same windows at any rank count) */
    const int inv = cfg->train.rank_invariant;
    const int K = cfg->data.val_batches * (inv ? cfg->data.grad_accum : 1);
    double* loss = zrt_malloc((size_t)K * sizeof(double), "validation losses");
    for (int k = 0; k < K; k++) {
        const long long first = (long long)k * B * r->nranks;
        data_batch(&r->ds, 1, first, r->rank, r->nranks, B, tok, tgt, windows);
        trace_batch(r, step, k, "val", first, B, windows, tok, T);
        sched_begin_step(r->sched, 0);
        sched_begin_micro(r->sched);
        loss[k] = llama_step(&cfg->model, r->acts, tok, tgt, B, T, &r->hooks, 0, NULL);
        sched_end_micro(r->sched);
        sched_end_step(r->sched);
    }
    double m = 0;
    if (inv) { /* the leaves' mean in the gradient's tree */
        m = tree_mean(r, loss, K);
    } else { /* this rank's mean, then the mean over ranks */
        for (int k = 0; k < K; k++) m += loss[k];
        m = fsdp_mean_over_ranks(&r->fsdp, m / K);
    }
    free(loss);
    return m;
}

/* The MoE blocks' expert load of the step: pairs per expert summed over
 * micro-batches and ranks; per block its min, max and MaxVio, and over the
 * blocks the EP ranks' imbalance (rank_vio: the experts of EP slice j are
 * E/EP consecutive ones, runtime/expert.c). */
static void expert_load_stats(TrainRun* r, TrainStepLog* s) {
    const LlamaConfig* mc = &r->cfg.model;
    const int cells = (r->n_moe + 1) * mc->n_experts, ep = r->fsdp.ep, per = mc->n_experts / ep;
    MPI_Allreduce(MPI_IN_PLACE, r->expert_load, cells, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    s->dropped = r->expert_load[(size_t)r->n_moe * mc->n_experts];
    s->maxvio = 0;
    double busiest = 0, mean_sum = 0; /* rows, summed over the blocks */
    for (int i = 0; i < r->n_moe; i++) {
        const long long* ld = r->expert_load + (size_t)i * mc->n_experts;
        long long top = 0, low = ld[0], total = 0, slice_top = 0;
        for (int e = 0; e < mc->n_experts; e++) {
            total += ld[e];
            top = ld[e] > top ? ld[e] : top;
            low = ld[e] < low ? ld[e] : low;
        }
        for (int j = 0; j < ep; j++) {
            long long rows = 0;
            for (int e = j * per; e < (j + 1) * per; e++) rows += ld[e];
            slice_top = rows > slice_top ? rows : slice_top;
        }
        busiest += (double)slice_top;
        mean_sum += (double)total / ep;
        const double mean = (double)total / mc->n_experts;
        TrainBlockLoad* b = &r->block_load[i];
        b->min = low;
        b->max = top;
        b->maxvio = mean > 0 ? ((double)top - mean) / mean : 0;
        if (b->maxvio > s->maxvio) s->maxvio = b->maxvio;
    }
    s->rank_vio = mean_sum > 0 ? busiest / mean_sum - 1 : 0;
}

/* Micro-batch a's mean loss from its summed loss (sums: the step's scalars
 * as copied back), as llama_step would have returned it. */
static float micro_loss(const TrainRun* r, const double* sums, int a) {
    const int count = r->loss_counts[a];
    return count ? (float)(sums[a] / count) : 0.0f;
}

/* One optimizer step: every micro-batch forward and backward (the
 * scheduler's hooks gather and reduce beneath), then the mean over the
 * global batch, the global norm, clipping and AdamW. Fills the step's
 * losses, norm, lr and times. */
static void train_step(TrainRun* r, int step, int dump_now, TrainStepLog* s) {
    const TrainConfig* cfg = &r->cfg;
    const LlamaConfig* mc = &cfg->model;
    const int B = cfg->data.batch_size, T = cfg->data.seq_len, A = cfg->data.grad_accum;
    Fsdp* fsdp = &r->fsdp;
    Sched* sched = r->sched;
    const int step_no = step + 1;

    fsdp_zero_grads(fsdp);
    sched_begin_step(sched, 1);
    double loss_sum = 0, aux_sum = 0;
    double* aux_micro = r->aux_micro; /* rank_invariant: each micro-batch's aux loss */
    int refused = 0;
    s->data_s = s->model_s = 0;
    if (r->moe)
        memset(r->expert_load, 0, (size_t)(r->n_moe + 1) * mc->n_experts * sizeof *r->expert_load);
    for (int a = 0; a < A; a++) {
        /* Step s, micro-batch a reads global samples
         * (s*A + a)*G .. +G-1 (G = B * ranks): st.samples counts them. */
        const double td = zrt_now();
        /* micro-batch a's own host buffers: their copies up need no wait (the
         * step's read-back at its end waits for them before step + 1 rewrites) */
        int* tok = r->batch_ring + (size_t)a * 2 * B * T;
        int* tgt = tok + (size_t)B * T;
        data_batch(&r->ds, 0, r->st.samples, r->rank, r->nranks, B, tok, tgt, r->windows);
        trace_batch(r, step_no, a, "train", r->st.samples, B, r->windows, tok, T);
        sched_trace_span(sched, "data", td, zrt_now());
        s->data_s += zrt_now() - td;
        sched_begin_micro(sched);
        /* --dump-tensors: the first micro-batch's logits too */
        float* logits = dump_now && a == 0 ? r->dump_logits : NULL;
        const double tm = zrt_now();
        /* the loss stays on the device (slot a) and comes back at the step's end */
        llama_acts_set_loss_sink(r->acts, r->step_scalars + a);
        llama_acts_set_async_batch(r->acts, 1);
        const float l = llama_step(mc, r->acts, tok, tgt, B, T, &r->hooks, 1, logits);
        llama_acts_set_async_batch(r->acts, 0);
        llama_acts_set_loss_sink(r->acts, NULL);
        refused |= isnan(l); /* bad input: no loss in the slot; the step's check below says so */
        s->model_s += zrt_now() - tm;
        int count = 0;
        for (int n = 0; n < B * T; n++) count += tgt[n] >= 0;
        r->loss_counts[a] = count;
        if (logits) { /* its loss now (one more wait, on dump steps only) */
            double sum0 = 0;
            zdevCheck(zdev_download(r->K->dev, &sum0, r->step_scalars, sizeof sum0));
            dump_batch(r->rank, r->args.dump_dir, step_no, tok, tgt, logits, B, T,
                       mc->vocab_size, micro_loss(r, &sum0, 0));
        }
        if (r->moe) { /* per MoE block: pairs routed to each expert; then the drops */
            aux_micro[a] = llama_acts_aux_loss(r->acts);
            aux_sum += aux_micro[a];
            LlamaMoeRouting rt;
            for (int i = 0; llama_acts_routing(r->acts, i, &rt) == 0; i++) {
                for (int e = 0; e < mc->n_experts; e++)
                    r->expert_load[(size_t)i * mc->n_experts + e] += rt.routed[e];
                r->expert_load[(size_t)r->n_moe * mc->n_experts] += rt.dropped;
            }
        }
        sched_end_micro(sched);
        r->st.samples += (long long)B * r->nranks;
    }
    const double t_rs = zrt_now();
    sched_end_step(sched);
    sched_trace_span(sched, "the last reduce-scatters", t_rs, zrt_now());

    const double t_opt = zrt_now();
    /* Sum over ranks and micro-batches -> mean over the global batch: the
     * scale the norm and AdamW read the gradient shards with (kernels.h
     * adamw_multi: the bits of scaling them in memory first). */
    const float gscale = 1.0f / (float)(r->nranks * A);
    /* the step's one read-back: the micro-batches' summed losses and every
     * unit's gradient sum of squares, together */
    fsdp_grad_sumsq(fsdp, r->step_scalars + A, gscale);
    double* sc = r->step_scalars_host;
    zdevCheck(zdev_download(r->K->dev, sc, r->step_scalars, ((size_t)A + fsdp->n_units) * sizeof(double)));
    /* each micro-batch's mean loss, added in order, as each step's returned loss was */
    for (int a = 0; a < A; a++) loss_sum += micro_loss(r, sc, a);
    if (refused) loss_sum = NAN;
    if (cfg->train.rank_invariant) { /* the micro-batches' losses in the gradient's tree */
        double* mine = zrt_malloc((size_t)A * sizeof(double), "losses");
        for (int a = 0; a < A; a++) mine[a] = refused ? NAN : micro_loss(r, sc, a);
        s->loss = tree_mean(r, mine, A);
        free(mine);
    } else {
        s->loss = fsdp_mean_over_ranks(fsdp, loss_sum / A);
    }
    /* MoE: the aux loss, mean over micro-batches (moe.aux_loss_scope global:
     * each micro-batch's is that of all ranks, the same on each; rank: also
     * the mean over ranks of each rank's own) and how far the busiest expert
     * is above the mean load over the whole global batch (MaxVio, 0 when
     * balanced). */
    s->aux = s->maxvio = s->rank_vio = 0;
    s->dropped = 0;
    if (r->moe) {
        const int global = !strcmp(cfg->moe.aux_loss_scope, "global");
        s->aux = cfg->train.rank_invariant ? tree_mean(r, aux_micro, A)
                 : global                  ? aux_sum / A
                                           : fsdp_mean_over_ranks(fsdp, aux_sum / A);
        expert_load_stats(r, s);
    }
    s->norm = fsdp_grad_norm_of(fsdp, sc + A);
    trainCheck(isfinite(s->loss) && isfinite(s->norm),
               "step %d: loss %g, grad norm %g are not finite (hint: lower optimizer.lr, "
               "raise warmup_steps)",
               step_no, s->loss, s->norm);
    const float clip = optim_clip_factor(s->norm, (float)cfg->optim.grad_clip);
    s->lr = adamw_lr(&r->oc, step);
    const ZrtAdamWStep as = adamw_step(&r->oc, step_no, s->lr, r->oc.weight_decay);
    fsdp_adamw(fsdp, &as, gscale, clip);
    sched_trace_span(sched, "loss, norm, clip, AdamW", t_opt, zrt_now());
    s->opt_ms = (zrt_now() - t_opt) * 1e3;
    s->tail_ms = (t_opt - t_rs) * 1e3;
}

int main(int argc, char** argv) {
    /* Before anything loads OpenBLAS's kernels: pick the right SGEMM core for
     * this CPU (may re-exec once with the environment set; kernels/kernels.h). */
    zrt_blas_select_core(argv);
    install_stop_handlers();
    /* MPI_THREAD_MULTIPLE lets each ZipCCL communicator run its own progress
     * thread, so asynchronous gathers and reduce-scatters overlap compute. */
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    zdev_set_compute_thread(); /* ZipCCL's progress threads count apart */
    static TrainRun run; /* large (configs): not on the stack */
    TrainRun* r = &run;
    if (train_setup(r, argc, argv)) { /* --plan N: printed, nothing to train */
        MPI_Finalize();
        return 0;
    }
    const TrainConfig* cfg = &r->cfg;

    int saved_step = -1; /* the step of the last checkpoint this run wrote */
    int preempted = 0;   /* ranks that got SIGTERM / SIGUSR1, agreed at a step's end */
    for (int step = r->st.step; step < cfg->train.steps; step++) {
        const int step_no = step + 1; /* 1-based: the step being computed */
        int dump_now = 0;
        for (int k = 0; k < r->args.n_dump_steps; k++) dump_now |= r->args.dump_steps[k] == step_no;
        TrainStepLog s = {.step = step_no};
        train_log_start(r, &s);
        zipcclCounters_t chk[3];
        fsdp_check_compression_begin(&r->fsdp, chk);
        if (dump_now) fsdp_dump_arm(&r->fsdp);

        train_step(r, step, dump_now, &s);

        char span[32];
        snprintf(span, sizeof span, "step %d", step_no);
        sched_trace_span(r->sched, span, s.t0, zrt_now());
        r->st.step = step_no;
        s.dt = zrt_now() - s.t0;
        sched_exposed(r->sched, s.x1);
        if (dump_now) {
            fsdp_dump_write(&r->fsdp, r->args.dump_dir, step_no);
            if (r->rank == 0)
                printf("# dumped the step %d tensors to %s\n", step_no,
                       PRINTABLE(r->args.dump_dir));
        }
        fsdp_check_compression(&r->fsdp, chk, step_no);
        train_log_finish(r, &s);
        if (cfg->data.val_every > 0 &&
            (step_no % cfg->data.val_every == 0 || step_no == cfg->train.steps) &&
            r->ds.n_windows[1] > 0)
            s.val = validate(r, step_no);
        train_log_step(r, &s);

        if (cfg->ckpt.dir[0] && cfg->ckpt.every > 0 && step_no % cfg->ckpt.every == 0 &&
            step_no != cfg->train.steps) {
            checkpoint_save(&r->fsdp, cfg, &r->st);
            saved_step = step_no;
        }
        /* Preemption: did any rank get SIGTERM / SIGUSR1? One small
         * all-gather on the scalars' communicator (it has ZipCCL's timeout),
         * after the step's log line so its time is no step's. */
        if (step_no < cfg->train.steps) {
            preempted = (int)lround(
                fsdp_mean_over_ranks(&r->fsdp, g_stop_signal ? 1.0 : 0.0) * r->nranks);
            if (preempted) break;
        }
    }
    if (cfg->ckpt.dir[0] && r->st.step > r->first_step && saved_step != r->st.step) {
        checkpoint_save(&r->fsdp, cfg, &r->st);
        saved_step = r->st.step;
    }
    train_log_end(r, preempted, saved_step);
    train_teardown(r);
    MPI_Finalize();
    return preempted ? TRAIN_EXIT_PREEMPTED : 0;
}
