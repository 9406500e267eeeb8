// test: ranks=2 timeout=60
/*
 * test_sched_exec.c — the scheduler's executor (runtime/scheduler.c) against the
 * real model, at 2 ranks with expert parallelism 2 and a chunked expert
 * exchange (moe.overlap_chunks 3): the run-time checks that the model's hook
 * calls follow the plan.
 *
 *   test_sched_exec            one training micro-batch through the
 *                              scheduler's hooks, overlap on and off: the
 *                              loss is finite and the same bits both ways
 *   test_sched_exec DEVIATION  the same step through hooks that deviate
 *                              like a changed model would, which must stop
 *                              the run (tests/test_train_sched.sh checks the
 *                              message): `swap` waits for chunk 1 where the
 *                              model asked for chunk 0, `skip` drops the
 *                              last chunk's combine_send, `early` calls
 *                              combine before any chunk was waited
 *
 * Left out: the trainer's step loop (tests/test_train_sched.sh).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <mpi.h>

#include "config.h"
#include "fsdp.h"
#include "llama.h"
#include "scheduler.h"
#include "testutil.h"
#include "mpitest.h"

static LlamaParamHooks g_real;
static const char* g_mode = "";

static int dev_dispatch_wait(void* ctx, int layer, int phase, int chunk, const float** recv,
                             int* n_recv, const int** recv_counts) {
    if (!strcmp(g_mode, "swap") && chunk == 0) chunk = 1;
    if (!strcmp(g_mode, "early")) return g_real.combine(ctx, layer, phase, NULL);
    return g_real.dispatch_wait(ctx, layer, phase, chunk, recv, n_recv, recv_counts);
}

static int dev_combine_send(void* ctx, int layer, int phase, int chunk, const float* local,
                            float* rows) {
    if (!strcmp(g_mode, "skip") && chunk == 2) return 0;
    return g_real.combine_send(ctx, layer, phase, chunk, local, rows);
}

static float one_step(int overlap, int deviate) {
    TrainConfig cfg;
    char err[512];
    config_defaults(&cfg);
    const char* sets[] = {"model.vocab_size=256", "model.dim=16", "model.n_layers=2",
                          "model.n_heads=2", "model.n_kv_heads=1", "model.ffn_hidden=32",
                          "model.max_seq_len=8", "model.n_experts=4", "model.n_experts_per_tok=2",
                          "model.moe_ffn_hidden=8", "parallelism.ep=2", "moe.overlap_chunks=3",
                          "data.seq_len=8", "data.batch_size=2"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        if (config_set(&cfg, sets[i], err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return NAN;
        }
    cfg.parallel.overlap = overlap;
    if (config_validate(&cfg, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return NAN;
    }
    Fsdp f;
    CommPlan plan;
    if (fsdp_plan_build(&cfg, &plan, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return NAN;
    }
    fsdp_init(&f, &cfg, zrt_kernels_cpu(), &plan);
    Sched* s = sched_create(&f, &cfg, 0);
    LlamaParamHooks h = sched_hooks(s);
    g_real = h;
    if (deviate) {
        h.dispatch_wait = dev_dispatch_wait;
        h.combine_send = dev_combine_send;
    }
    const int B = 2, T = 8;
    int tok[16], tgt[16];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + rank * 3) % 256, tgt[i] = (i * 5 + 1) % 256;
    LlamaActs* a = llama_acts_alloc(&cfg.model, B, T, zrt_kernels_cpu());
    sched_begin_step(s, 1);
    sched_begin_micro(s);
    const float loss = llama_step(&cfg.model, a, tok, tgt, B, T, &h, 1, NULL);
    sched_end_micro(s);
    sched_end_step(s);
    llama_acts_free(a);
    sched_destroy(s);
    fsdp_free(&f);
    return loss;
}

int main(int argc, char** argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc > 1) { /* a deviation: the scheduler must stop the run inside this step */
        g_mode = argv[1];
        one_step(1, 1);
        if (rank == 0) printf("FAIL deviation_%s_not_caught\n", g_mode);
        MPI_Finalize();
        return 1;
    }
    if (nranks != 2) {
        if (rank == 0) printf("note: test_sched_exec needs 2 ranks (EP 2)\n");
        MPI_Finalize();
        return 0;
    }
    const float on = one_step(1, 0), off = one_step(0, 0);
    int ok = 1;
    EXPECT(isfinite(on) && on == off, "loss %.9g with overlap, %.9g without", (double)on,
           (double)off);
    report(ok, "chunked_step_through_the_hooks_overlap_neutral");
    MPI_Finalize();
    return tu_exit();
}
