/*
 * train.c — the trainer: `build/train CONFIG.yaml [options]`, one process per
 * rank under mpirun (or alone as one rank).
 *
 *   build/train CONFIG.yaml [--set key=value ...] [--log-json FILE]
 *               [--dump-tensors STEP DIR] [--resume DIR] [--init-from DIR]
 *               [--trace-data FILE] [--trace FILE]
 *
 * One step, top to bottom (docs/RUNTIME.md has the long form):
 *   config (YAML, --set, a Hugging Face config.json with model.init_from:
 *           runtime/hf.c) -> weights (train.seed, a checkpoint, or HF's)
 *   -> data (this rank's sequences of the global batch)
 *          -> llama_step per micro-batch, with FSDP hooks that all-gather
 *             each unit before the model reads it and reduce-scatter its
 *             gradient when it is complete (runtime/fsdp.c, over ZipCCL)
 *          -> mean over the global batch, global-norm clip, AdamW on shards
 *          -> one log line (rank 0), checkpoints, validation.
 *
 * Preemption: SIGTERM or SIGUSR1 (what mpirun forwards; build/supervise
 * sends it) only sets a flag. At each step's end the ranks agree whether any
 * got it; then all write a checkpoint of that step and leave with
 * TRAIN_EXIT_PREEMPTED (75, EX_TEMPFAIL: "try again", from the checkpoint).
 *
 * runtime.device: cpu | cuda | cpu_guarded picks the kernel table the model
 * computes on; FSDP's shards, the collectives and AdamW stay on the host
 * (the scheduler stages each gathered unit to the device and each finished
 * gradient back). Left out: MoE on a device, FSDP and the optimizer on
 * device buffers (the GPU issues' part 2).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "config.h"
#include "data.h"
#include "fsdp.h"
#include "hf.h"
#include "kernels.h"
#include "llama.h"
#include "log.h"
#include "memplan.h"
#include "optim.h"
#include "safetensors.h"
#include "scheduler.h"

#define MAX_SETS 64
/* Exit status of a run stopped by SIGTERM / SIGUSR1 at a step's end, after
 * the checkpoint of that step is written (when checkpoint.dir is set). */
#define TRAIN_EXIT_PREEMPTED 75

typedef struct {
    const char* config;
    const char* sets[MAX_SETS];
    int n_sets;
    const char* log_json;
    int dump_steps[16]; /* --dump-tensors STEP[,STEP...]: ascending */
    int n_dump_steps;
    const char* dump_dir;
    const char* resume;
    int plan; /* --plan N: print the memory plan at N ranks and exit */
    const char* trace_data;
    const char* trace; /* --trace FILE: Chrome trace-event JSON of the steps */
    char init_from[CFG_PATH_MAX + 32]; /* --init-from DIR, as the --set it stands for */
} Args;

static int g_rank, g_nranks;
static volatile sig_atomic_t g_stop_signal; /* SIGTERM / SIGUSR1 received: stop at the step's end */
static int g_tracing;  /* --trace-data given (every rank takes part) */
static FILE* g_trace;  /* its file, open on rank 0 */

static void usage(FILE* f) {
    fprintf(f,
            "usage: build/train CONFIG.yaml [--set key=value ...] [--log-json FILE]\n"
            "                   [--dump-tensors STEPS DIR] [--resume DIR] [--init-from DIR]\n"
            "                   [--trace-data FILE] [--trace FILE] [--plan NRANKS]\n"
            "  --set key=value        override a config key (dotted: train.steps=20,\n"
            "                         comm.strategy=raw|native|compressed|auto, ...)\n"
            "  --log-json FILE        one JSON object per step, last line the param hash\n"
            "  --dump-tensors STEPS D write the tensors the collectives send at each step of\n"
            "                         STEPS (one or a comma list: 2,20,100) to D, and the\n"
            "                         first micro-batch's tokens, targets and logits\n"
            "  --resume DIR           continue from a checkpoint (step dir or root)\n"
            "  --init-from DIR        start from a Hugging Face model directory (config.json,\n"
            "                         safetensors): --set model.init_from=DIR\n"
            "  --trace-data FILE      one JSON line per rank and micro-batch: the windows read\n"
            "  --trace FILE           Chrome trace-event JSON (Perfetto, chrome://tracing): every\n"
            "                         rank's compute and collectives, per unit; plot one step\n"
            "                         with scripts/plot_trace.py\n"
            "  --plan NRANKS          print the memory plan per rank at NRANKS ranks (shards,\n"
            "                         units in flight, activations, ...) and exit\n"
            "SIGTERM or SIGUSR1: finish the step, write its checkpoint (checkpoint.dir) and exit\n"
            "with status 75; build/supervise restarts runs that fail (docs/RUNTIME.md)\n");
}

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

/* Errors every rank sees alike (bad arguments, bad config): rank 0 says
 * it once and all ranks leave with status 2, no MPI_Abort needed. */
static void config_fail(const char* msg) {
    if (g_rank == 0) {
        fprintf(stderr, "train: error: %s\n", msg);
        fflush(stderr);
    }
    MPI_Finalize();
    exit(2);
}

/* Errors a rank may find on its own (a file it reads): every rank learns
 * whether any failed, the first that did says why, and all leave with
 * status 2 together. MPI_Abort from several ranks at once is what made Open
 * MPI print its own ORTE_ERROR_LOG noise over the message. */
static void agree_or_fail(int bad, const char* msg) {
    int who = bad ? g_rank : g_nranks, first = g_nranks;
    MPI_Allreduce(&who, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == g_nranks) return;
    if (g_rank == first) {
        fflush(stdout);
        fprintf(stderr, "train: error: %s\n", msg);
        fflush(stderr);
    }
    MPI_Finalize();
    exit(2);
}

static void parse_args(int argc, char** argv, Args* a) {
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char* s = argv[i];
        char msg[600];
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            if (g_rank == 0) usage(stdout);
            MPI_Finalize();
            exit(0);
        } else if (!strcmp(s, "--set") && i + 1 < argc) {
            if (a->n_sets == MAX_SETS) config_fail("too many --set options");
            a->sets[a->n_sets++] = argv[++i];
        } else if (!strcmp(s, "--log-json") && i + 1 < argc) {
            a->log_json = argv[++i];
        } else if (!strcmp(s, "--dump-tensors") && i + 2 < argc) {
            const char* list = argv[++i];
            const char* q = list;
            a->n_dump_steps = 0;
            for (;;) {
                char* end;
                long v = strtol(q, &end, 10);
                const int prev = a->n_dump_steps ? a->dump_steps[a->n_dump_steps - 1] : 0;
                if (end == q || (*end && *end != ',') || v <= prev || v > 1000000000 ||
                    a->n_dump_steps == (int)(sizeof a->dump_steps / sizeof a->dump_steps[0])) {
                    snprintf(msg, sizeof msg,
                             "--dump-tensors: STEPS must be ascending step numbers >= 1, comma-separated "
                             "(at most %d), got '%s'",
                             (int)(sizeof a->dump_steps / sizeof a->dump_steps[0]), list);
                    config_fail(msg);
                }
                a->dump_steps[a->n_dump_steps++] = (int)v;
                if (!*end) break;
                q = end + 1;
            }
            a->dump_dir = argv[++i];
        } else if (!strcmp(s, "--plan") && i + 1 < argc) {
            char* end;
            const long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 1 << 20) config_fail("--plan: a rank count from 1 up");
            a->plan = (int)v;
        } else if (!strcmp(s, "--resume") && i + 1 < argc) {
            a->resume = argv[++i];
        } else if (!strcmp(s, "--init-from") && i + 1 < argc) {
            if (a->n_sets == MAX_SETS) config_fail("too many --set options");
            snprintf(a->init_from, sizeof a->init_from, "model.init_from=%s", argv[++i]);
            a->sets[a->n_sets++] = a->init_from;
        } else if (!strcmp(s, "--trace-data") && i + 1 < argc) {
            a->trace_data = argv[++i];
        } else if (!strcmp(s, "--trace") && i + 1 < argc) {
            a->trace = argv[++i];
        } else if (s[0] == '-') {
            if (g_rank == 0) usage(stderr);
            snprintf(msg, sizeof msg, "unknown or incomplete option '%s'", s);
            config_fail(msg);
        } else if (!a->config) {
            a->config = s;
        } else {
            snprintf(msg, sizeof msg, "unexpected argument '%s' (one config file only)", s);
            config_fail(msg);
        }
    }
    if (!a->config) {
        if (g_rank == 0) usage(stderr);
        config_fail("no config file given");
    }
}

/* The backend the model computes on (runtime.device), every rank bound to
 * the GPU of its node-local rank for cuda. A device that cannot be used
 * is an error naming the key, agreed by every rank. */
static const ZrtKernels* select_backend(const TrainConfig* cfg, int local_rank) {
    const char* dev = cfg->runtime.device;
    const int bf16 = !strcmp(cfg->runtime.compute, "bf16");
    const ZrtKernels* host = bf16 ? zrt_kernels_cpu_bf16() : zrt_kernels_cpu();
    if (!strcmp(dev, "cpu")) return host;
    if (!strcmp(dev, "cpu_guarded")) return zrt_kernels_guarded(host);
    char msg[800], w[400];
    const int bad = zrt_cuda_bind(local_rank) != 0 || !zrt_kernels_cuda();
    snprintf(msg, sizeof msg, "%s: key 'runtime.device': cuda: %s",
             config_where(cfg, "runtime.device", w, sizeof w), zrt_cuda_error());
    agree_or_fail(bad, msg);
    return bf16 ? zrt_kernels_cuda_bf16() : zrt_kernels_cuda();
}

/* What the backend's matmul reaches on this rank (FLOP/s), for MFU on a
 * device: a few 2048^3 products through the table, timed after a warm-up. */
static double backend_matmul_peak(const ZrtKernels* K) {
    const int n = 2048;
    const size_t bytes = (size_t)n * n * sizeof(float);
    float* h = zrt_malloc(bytes, "matmul probe");
    for (size_t i = 0; i < (size_t)n * n; i++) h[i] = (float)(i % 17) * 0.01f;
    float *a = K->alloc(bytes), *b = K->alloc(bytes), *c = K->alloc(bytes);
    trainCheck(a && b && c, "out of %s memory for the matmul probe", K->name);
    K->upload(a, h, bytes);
    K->upload(b, h, bytes);
    K->matmul_forward(c, a, b, n, n, n);
    K->synchronize();
    double best = 0;
    for (int r = 0; r < 3; r++) {
        const double t0 = zrt_now();
        for (int i = 0; i < 4; i++) K->matmul_forward(c, a, b, n, n, n);
        K->synchronize();
        const double f = 4 * 2.0 * n * (double)n * n / (zrt_now() - t0);
        best = f > best ? f : best;
    }
    K->free(a);
    K->free(b);
    K->free(c);
    free(h);
    return best;
}

/* The activations' memory options from the config (train.recompute,
 * train.logits_rows). */
static LlamaMemOpts train_mem_opts(const TrainConfig* cfg) {
    return (LlamaMemOpts){.recompute = !strcmp(cfg->train.recompute, "full"),
                          .logits_rows = cfg->train.logits_rows,
                          .expert_exchange = cfg->model.n_experts > 0 && cfg->parallel.ep > 1};
}

/* Bytes the training tokens take in memory once read (int32 per token:
 * the file itself for i32 token files, 4 per byte for the byte tokenizer,
 * the file's size as an estimate for BPE text); 0 when it is missing. */
static double data_bytes(const TrainConfig* cfg) {
    struct stat st;
    if (stat(cfg->data.path, &st)) return 0;
    return (double)st.st_size * (!strcmp(cfg->data.tokenizer, "byte") ? 4 : 1);
}

/* Refuse at start a model that cannot fit, with the plan (memplan.h). With
 * a device backend the activations and the device copies of the gathered
 * units and gradients in flight live in device memory, and the ranks
 * sharing a device share its free memory. */
static void check_memory(const TrainConfig* cfg, const ZrtKernels* K, MPI_Comm node,
                         MemPlan* mp) {
    char err[1024];
    if (memplan_build(cfg, g_nranks, K, data_bytes(cfg), (double)zrt_rss_now(), mp, err,
                      sizeof err))
        config_fail(err);
    if (g_rank == 0) memplan_print(mp, cfg, K, stdout);
    /* Ranks on this host (node: their communicator) share its memory. */
    int local = 1;
    MPI_Comm_size(node, &local);
    const double avail = (double)zrt_mem_available(), need = mp->host * local;
    if (!K->host_memory) {
        size_t dfree = 0, dtotal = 0;
        int sharing = 1, dev_bad = 0;
        if (K->mem_info(&dfree, &dtotal) == 0) {
            MPI_Comm dc; /* the ranks of this host on this device */
            MPI_Comm_split(node, zrt_cuda_device(), 0, &dc);
            MPI_Comm_size(dc, &sharing);
            MPI_Comm_free(&dc);
            dev_bad = mp->device * sharing > 0.9 * (double)dfree;
        }
        if (g_rank == 0) {
            char b[2][32];
            printf("# device memory: %d rank%s on the device need %s of %s free\n", sharing,
                   sharing > 1 ? "s" : "", zrt_fmt_bytes(mp->device * sharing, b[0], 32),
                   dfree ? zrt_fmt_bytes((double)dfree, b[1], 32) : "(unknown)");
        }
        int any = 0;
        MPI_Allreduce(&dev_bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (any) {
            char msg[1024], b[3][32], w[400];
            snprintf(msg, sizeof msg,
                     "%s: key 'runtime.device': the model does not fit on the device: "
                     "activations %s + gathered units and gradients in flight %s per rank, x %d "
                     "rank%s on one device, but %s is free. Hint: train.recompute: full, a "
                     "smaller data.batch_size / seq_len, or more devices.",
                     config_where(cfg, "runtime.device", w, sizeof w),
                     zrt_fmt_bytes(mp->acts, b[0], 32), zrt_fmt_bytes(mp->inflight, b[1], 32),
                     sharing, sharing > 1 ? "s" : "", zrt_fmt_bytes((double)dfree, b[2], 32));
            config_fail(msg);
        }
    }
    if (g_rank == 0)
        printf("# host memory: %d rank%s on this host need %s of %s available\n", local,
               local > 1 ? "s" : "", zrt_fmt_bytes(need, (char[32]){0}, 32),
               zrt_fmt_bytes(avail, (char[32]){0}, 32));
    /* Decide together: a rank that stopped alone would leave the others
     * waiting in their first collective. */
    int bad = avail > 0 && need > 0.9 * avail, any_bad = 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_bad) {
        char b[8][32], msg[2048];
        snprintf(msg, sizeof msg,
                 "%s: the model does not fit: %.3g B parameters need %s per rank (shards %s, "
                 "gathered units + gradients in flight %s, activations %s, comm %s, data %s, "
                 "process %s); %d ranks on this host need %s, more than 90%% of the %s "
                 "available (%s). Hint: "
                 "more hosts, train.recompute: full, a smaller model, or a smaller "
                 "data.batch_size / seq_len.",
                 cfg->source, (double)llama_num_params(&cfg->model) / 1e9,
                 zrt_fmt_bytes(mp->host, b[0], 32),
                 zrt_fmt_bytes(mp->params + mp->grads + mp->optim, b[1], 32),
                 zrt_fmt_bytes(mp->inflight, b[2], 32),
                 zrt_fmt_bytes(K->host_memory ? mp->acts : 0, b[3], 32),
                 zrt_fmt_bytes(mp->comm, b[4], 32), zrt_fmt_bytes(mp->data, b[5], 32),
                 zrt_fmt_bytes(mp->base, b[6], 32), local, zrt_fmt_bytes(need, b[7], 32),
                 zrt_fmt_bytes(avail, (char[32]){0}, 32),
                 zrt_fmt_bytes(0.9 * avail, (char[32]){0}, 32));
        config_fail(msg);
    }
}

/* AdamW on this rank's shard of every unit, one call per tensor overlap so
 * norms (vectors) are not decayed while matrices are. */
static void optimizer_step(Fsdp* f, const AdamWConfig* oc, int t, float lr) {
    size_t cap = 0, *rows = NULL, *cols = NULL;
    for (int u = 0; u < f->n_units; u++) {
        FsdpUnit* U = &f->units[u];
        const int nt = llama_unit_tensors(&f->cfg->model, u, NULL, NULL, NULL, 0);
        if ((size_t)nt > cap) {
            free(rows);
            cap = (size_t)nt;
            rows = zrt_malloc(2 * cap * sizeof(size_t), "tensor shapes");
            cols = rows + cap;
        }
        llama_unit_tensors(&f->cfg->model, u, NULL, rows, cols, nt);
        // this rank's shard as a range of the whole unit (experts: its slice)
        size_t lo, hi, off = 0;
        fsdp_shard_range(f, u, &lo, &hi);
        for (int k = 0; k < nt; k++) {
            size_t a = off, b = off + rows[k] * cols[k];
            off = b;
            if (b <= lo || a >= hi) continue;
            size_t s = a > lo ? a : lo, e = b < hi ? b : hi;
            float wd = cols[k] == 1 ? 0.0f : oc->weight_decay;
            adamw_update(f->K, oc, U->param + (s - lo), U->grad + (s - lo), U->m + (s - lo),
                         U->v + (s - lo), e - s, t, lr, wd);
        }
    }
    free(rows);
}

/* --trace-data: rank 0 gathers every rank's window indices (and a hash of
 * the tokens it will train on) and writes one JSON line per rank, so a test
 * can check the data order from outside (tests/test_data_order.py). */
static void trace_batch(int step, int micro, const char* split, long long first, int B,
                        const long long* windows, const int* tok, int T) {
    if (!g_tracing) return;
    long long* mine = zrt_malloc((size_t)(B + 1) * sizeof(long long), "trace");
    uint64_t h = zrt_fnv1a64(ZRT_FNV_INIT, tok, (size_t)B * T * sizeof(int));
    mine[0] = (long long)h;
    memcpy(mine + 1, windows, (size_t)B * sizeof(long long));
    long long* all = g_rank == 0 ? zrt_malloc((size_t)g_nranks * (B + 1) * sizeof(long long),
                                              "trace") : NULL;
    MPI_Gather(mine, B + 1, MPI_LONG_LONG, all, B + 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    free(mine);
    if (g_rank != 0) return;
    for (int r = 0; r < g_nranks; r++) {
        const long long* w = all + (size_t)r * (B + 1);
        fprintf(g_trace,
                "{\"step\": %d, \"micro\": %d, \"split\": \"%s\", \"rank\": %d, \"nranks\": %d, "
                "\"first_sample\": %lld, \"tokens_fnv1a64\": \"%016" PRIx64 "\", \"windows\": [",
                step, micro, split, r, g_nranks, first, (uint64_t)w[0]);
        for (int b = 0; b < B; b++) fprintf(g_trace, "%s%lld", b ? ", " : "", w[1 + b]);
        fprintf(g_trace, "]}\n");
    }
    fflush(g_trace);
    free(all);
}

/* --dump-tensors: what the model saw and said in the dump step's first
 * micro-batch, per rank: tokens and targets (B, T), logits (B, T, V), and
 * its loss (the mean cross-entropy llama_step returned, as metadata). */
static void dump_batch(const char* dir, int step, const int* tok, const int* tgt,
                       const float* logits, int B, int T, int V, float loss) {
    char err[512], path[1100], lbuf[32];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        trainCheck(0, "--dump-tensors: cannot create %s: %s", dir, strerror(errno));
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
    snprintf(path, sizeof path, "%s/step%d_rank%d_batch.safetensors", dir, step, g_rank);
    trainCheck(!st_writer_write(w, path, err, sizeof err), "batch dump %s: %s", path, err);
    st_writer_free(w);
}

static double validate(Fsdp* f, Sched* sc, Dataset* ds, LlamaActs* acts,
                       const LlamaParamHooks* hooks, int* tok, int* tgt, int step,
                       long long* windows) {
    const TrainConfig* cfg = f->cfg;
    const int B = cfg->data.batch_size, T = cfg->data.seq_len;
    double sum = 0;
    for (int k = 0; k < cfg->data.val_batches; k++) {
        /* Validation batch k is global micro-batch k of the split in file
         * order: samples k*G .. k*G+G-1, G = B * ranks. */
        const long long first = (long long)k * B * g_nranks;
        data_batch(ds, 1, first, g_rank, g_nranks, B, tok, tgt, windows);
        trace_batch(step, k, "val", first, B, windows, tok, T);
        sched_begin_step(sc, 0);
        sched_begin_micro(sc);
        sum += llama_step(&cfg->model, acts, tok, tgt, B, T, hooks, 0, NULL);
        sched_end_micro(sc);
        sched_end_step(sc);
    }
    return fsdp_mean_over_ranks(f, sum / cfg->data.val_batches);
}

static void fmt_eta(double s, char* buf, size_t n) {
    if (s < 0 || !isfinite(s)) s = 0;
    int h = (int)(s / 3600), m = (int)(s / 60) % 60, sec = (int)s % 60;
    if (h) snprintf(buf, n, "%dh%02dm", h, m);
    else snprintf(buf, n, "%dm%02ds", m, sec);
}

int main(int argc, char** argv) {
    /* Before anything loads OpenBLAS's kernels: pick the right SGEMM core for
     * this CPU (may re-exec once with the environment set; kernels/kernels.h). */
    zrt_blas_select_core(argv);
    /* MPI_THREAD_MULTIPLE lets each ZipCCL communicator run its own progress
     * thread, so asynchronous gathers and reduce-scatters overlap compute. */
    install_stop_handlers();
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_nranks);
    Args args;
    parse_args(argc, argv, &args);

    /* ---- config ---- */
    static TrainConfig cfg;
    char err[1024], herr[4096]; /* herr: messages naming model directories and files */
    config_defaults(&cfg);
    if (config_load(&cfg, args.config, err, sizeof err)) config_fail(err);
    for (int i = 0; i < args.n_sets; i++)
        if (config_set(&cfg, args.sets[i], err, sizeof err)) config_fail(err);
    if (args.log_json) snprintf(cfg.log.json, sizeof cfg.log.json, "%s", args.log_json);
    /* A Hugging Face model directory gives the model keys (its config.json;
     * the weights come below). Every rank reads the same files and reaches
     * the same verdict, but a file missing on one host must not leave the
     * others waiting: they agree. */
    if (cfg.init_from[0])
        agree_or_fail(hf_apply_config(&cfg, cfg.init_from, herr, sizeof herr) != 0, herr);
    /* Token files of scripts/prepare_data.py say what they hold (PATH.json). */
    static DataMeta dmeta;
    agree_or_fail(data_read_meta(cfg.data.path, &dmeta, herr, sizeof herr) != 0, herr);
    if (dmeta.present) {
        char where[1300];
        snprintf(where, sizeof where, "%s: 'dtype'", dmeta.path);
        agree_or_fail(
            config_set_external(&cfg, "data.tokenizer", dmeta.dtype, where, herr, sizeof herr) != 0,
            herr);
    }
    if (config_validate(&cfg, err, sizeof err)) config_fail(err);
    if (dmeta.present && dmeta.vocab_size > cfg.model.vocab_size) {
        char msg[4096], w[1400];
        snprintf(msg, sizeof msg,
                 "%s: the tokenizer that made %s has %lld tokens (vocab_size), more than the "
                 "model's %d (model.vocab_size, %s): its ids would index past the embedding",
                 dmeta.path, cfg.data.path, dmeta.vocab_size, cfg.model.vocab_size,
                 config_where(&cfg, "model.vocab_size", w, sizeof w));
        config_fail(msg);
    }
    AdamWConfig oc = {(float)cfg.optim.lr, (float)cfg.optim.min_lr, cfg.schedule.warmup_steps,
                      cfg.schedule.total_steps ? cfg.schedule.total_steps : cfg.train.steps,
                      (float)cfg.optim.beta1, (float)cfg.optim.beta2, (float)cfg.optim.eps,
                      (float)cfg.optim.weight_decay};
    if (oc.warmup_steps > oc.total_steps) {
        /* Short runs of a long config (--set train.steps=5) keep working. */
        if (g_rank == 0)
            printf("# note: schedule.warmup_steps %d > %d total steps: warmup clamped to %d\n",
                   oc.warmup_steps, oc.total_steps, oc.total_steps);
        oc.warmup_steps = oc.total_steps;
    }
    if (adamw_config_check(&oc, err, sizeof err)) {
        char msg[2000], w[800];
        snprintf(msg, sizeof msg, "%s: optimizer/schedule: %s",
                 config_where(&cfg, "optimizer.,schedule.", w, sizeof w), err);
        config_fail(msg);
    }
    /* ---- a checkpoint to resume: read and judged before anything is built */
    static CheckpointInfo ck;
    static char notes[4096]; /* what the resumed run changes, said after the config */
    TrainState st = {0, 0, 0};
    if (args.resume) {
        char msg[8192];
        int bad = checkpoint_open(args.resume, &ck, err, sizeof err);
        agree_or_fail(bad, err);
        if (config_resume_check(&ck.cfg, ck.nranks, &cfg, g_nranks, notes, sizeof notes, msg,
                                sizeof msg)) {
            char full[sizeof msg + 2200];
            snprintf(full, sizeof full, "--resume %.1000s (%.1100s): %s", args.resume, ck.dir, msg);
            config_fail(full);
        }
        st = ck.st;
        if (st.step > cfg.train.steps) {
            snprintf(msg, sizeof msg,
                     "--resume %s: the checkpoint is at step %d, beyond train.steps %d (hint: "
                     "--set train.steps=N)",
                     args.resume, st.step, cfg.train.steps);
            config_fail(msg);
        }
    }
    /* The weights of model.init_from, checked against the model (every
     * tensor there, shapes, dtypes, nothing left over) before anything is
     * built; read after the shards exist. A resumed run has its own. */
    HfSource* hf_src = NULL;
    if (cfg.init_from[0] && !args.resume)
        agree_or_fail(hf_open(cfg.init_from, &cfg.model, &hf_src, herr, sizeof herr) != 0, herr);
    const LlamaConfig* mc = &cfg.model;
    const int B = cfg.data.batch_size, T = cfg.data.seq_len, A = cfg.data.grad_accum;
    if (g_rank == 0) {
        printf("# effective config (%s, %d rank%s)\n", cfg.source, g_nranks,
               g_nranks > 1 ? "s" : "");
        config_print(&cfg, stdout);
        printf("# model: %.3f M parameters, %d units; global batch %d x %d x %d ranks x %d accum "
               "= %lld tokens/step\n",
               (double)llama_num_params(mc) / 1e6, llama_num_units(mc), B, T, g_nranks, A,
               (long long)B * T * g_nranks * A);
        if (mc->n_experts > 0) {
            int n_moe = 0;
            for (int l = 0; l < mc->n_layers; l++) n_moe += llama_layer_is_moe(mc, l);
            printf("# experts: %d MoE blocks of %d experts, top-%d, %.3f M active parameters per "
                   "token; expert parallelism %d (%d experts per rank), aux loss coefficient %g\n",
                   n_moe, mc->n_experts, mc->n_experts_per_tok,
                   (double)llama_active_params(mc) / 1e6, cfg.parallel.ep,
                   mc->n_experts / cfg.parallel.ep, (double)mc->router_aux_loss_coef);
        }
        fputs(notes, stdout);
        if (cfg.init_from[0] && args.resume)
            printf("# model.init_from %s: the model keys come from its config.json, the weights "
                   "from the checkpoint\n", cfg.init_from);
        if (cfg.init_from[0] && dmeta.present && dmeta.tokenizer[0]) {
            /* the data's tokenizer (its copy beside the tokens) against the model's */
            char tp[CFG_PATH_MAX + 32];
            uint64_t h, hd;
            snprintf(tp, sizeof tp, "%s/tokenizer.json", cfg.init_from);
            if (!zrt_file_fnv1a64(tp, &h, NULL) && !zrt_file_fnv1a64(dmeta.tokenizer, &hd, NULL) &&
                h != hd)
                printf("# warning: %s was made with another tokenizer.json (%s) than the model's "
                       "(%s): the ids may not mean what the model learnt\n",
                       cfg.data.path, dmeta.tokenizer, tp);
        }
        fflush(stdout);
    }
    if (!args.plan && mc->n_experts > 0 && g_nranks % cfg.parallel.ep) {
        char msg[600], w[400];
        snprintf(msg, sizeof msg, "%s: key 'parallelism.ep': %d does not divide the %d ranks",
                 config_where(&cfg, "parallelism.ep", w, sizeof w), cfg.parallel.ep, g_nranks);
        config_fail(msg);
    }
    /* The communication plan (built here, once: FSDP takes it over) and the
     * step's schedule, from the config alone: a bad rule or bound stops the
     * run here, before any work. */
    static CommPlan comm_plan;
    if (fsdp_plan_build(&cfg, &comm_plan, err, sizeof err)) config_fail(err);
    double inflight = 0;
    if (!args.plan && sched_check_config(&cfg, g_nranks, &inflight, err, sizeof err))
        config_fail(err);
    if (args.plan) { /* the plan at args.plan ranks, and nothing else */
        if (g_rank == 0) {
            const ZrtKernels* PK = zrt_kernels_cpu();
            if (!strcmp(cfg.runtime.device, "cuda") && zrt_kernels_cuda()) PK = zrt_kernels_cuda();
            MemPlan mp;
            /* OpenBLAS's work buffers into the base, as in a run */
            if (PK->host_memory) zrt_sgemm_peak(0.05);
            if (memplan_build(&cfg, args.plan, PK, data_bytes(&cfg), (double)zrt_rss_now(), &mp,
                              err, sizeof err))
                config_fail(err);
            memplan_print(&mp, &cfg, PK, stdout);
        }
        plan_free(&comm_plan);
        MPI_Finalize();
        return 0;
    }
    MPI_Comm node; /* the ranks on this host: device binding and memory */
    int local_rank = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    const ZrtKernels* K = select_backend(&cfg, local_rank);
    if (g_rank == 0 && !K->host_memory)
        printf("# device: %s%s%s; the model computes there, FSDP's shards, collectives and "
               "optimizer stay on the host\n",
               K->name, strncmp(K->name, "cuda", 4) ? "" : ", ", zrt_cuda_device_name());
    if (g_rank == 0 && strcmp(cfg.runtime.compute, "fp32"))
        printf("# compute: %s (kernel table %s): the linear layers multiply bf16 operands, fp32 "
               "accumulation; attention, norms and the loss stay fp32\n",
               cfg.runtime.compute, K->name);
    /* ---- the matmul peak for MFU: every rank at once, summed (the host's
     * SGEMM, or the device's through the kernel table); before the memory
     * plan, whose measured base then holds OpenBLAS's work buffers ---- */
    double peak_rank = K->host_memory ? zrt_sgemm_peak(0.3) : backend_matmul_peak(K);
    MemPlan mplan;
    check_memory(&cfg, K, node, &mplan);
    MPI_Comm_free(&node);

    /* ---- data ---- */
    Dataset ds;
    const double t_data = zrt_now();
    /* A BPE is trained once, by rank 0, and cached next to the data; the
     * other ranks wait and read the cache instead of all training at once. */
    const int bpe = !strcmp(cfg.data.tokenizer, "bpe");
    int data_rc = 0;
    if (!bpe || g_rank == 0)
        data_rc = data_open(&ds, cfg.data.path, cfg.data.tokenizer, cfg.data.bpe_merges,
                            mc->vocab_size, T, cfg.data.val_fraction, (uint64_t)cfg.data.seed, err,
                            sizeof err);
    if (bpe) {
        MPI_Bcast(&data_rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (g_rank != 0 && data_rc == 0) {
            /* Rank 0 succeeded, so this is a local failure: abort everyone. */
            trainCheck(!data_open(&ds, cfg.data.path, cfg.data.tokenizer, cfg.data.bpe_merges,
                                  mc->vocab_size, T, cfg.data.val_fraction,
                                  (uint64_t)cfg.data.seed, err, sizeof err),
                       "%s", err);
        }
    }
    if (data_rc) config_fail(err); /* every rank saw it (or rank 0 did and said so) */
    const uint64_t data_fnv = data_hash(&ds);
    if (args.resume && st.data_hash && st.data_hash != data_fnv) {
        char msg[2000];
        snprintf(msg, sizeof msg,
                 "--resume %s: the training data is not the checkpoint's: %s with the %s "
                 "tokenizer hashes to %016" PRIx64 ", the checkpoint's to %016" PRIx64
                 " (the file changed, or another one)",
                 args.resume, cfg.data.path, cfg.data.tokenizer, data_fnv, st.data_hash);
        agree_or_fail(1, msg);
    }
    st.data_hash = data_fnv;
    if (g_rank == 0)
        printf("# data: %s, %s tokenizer%s, %zu tokens (%zu train, %zu validation), %zu train "
               "sequences, %.1f s\n",
               cfg.data.path, cfg.data.tokenizer,
               strcmp(cfg.data.tokenizer, "bpe") ? "" : ds.bpe_cached ? " (cached)" : " (trained)",
               ds.n_tokens, ds.n_train, ds.n_tokens - ds.n_train, ds.n_windows[0],
               zrt_now() - t_data);
    const long long val_windows = (long long)cfg.data.val_batches * B * g_nranks;
    if (g_rank == 0 && cfg.data.val_every > 0 && val_windows > (long long)ds.n_windows[1])
        printf("# note: a validation pass reads %lld windows (val_batches %d x batch %d x %d "
               "ranks) but the validation split has %zu: windows repeat (weighted more)\n",
               val_windows, cfg.data.val_batches, B, g_nranks, ds.n_windows[1]);


    /* ---- model + FSDP ---- */
    Fsdp fsdp;
    fsdp_init(&fsdp, &cfg, K, &comm_plan);
    double peak = fsdp_mean_over_ranks(&fsdp, peak_rank) * g_nranks;
    const LlamaMemOpts mopts = train_mem_opts(&cfg);
    LlamaActs* acts = llama_acts_alloc_opts(mc, B, T, K, &mopts);
    trainCheck(acts, "cannot allocate %zu bytes of activations for B=%d T=%d on %s",
               llama_acts_bytes_opts(mc, B, T, K, &mopts), B, T, K->name);
    Sched* sched = sched_create(&fsdp, &cfg, args.trace != NULL);
    sched_set_backend(sched, K);
    LlamaParamHooks hooks = sched_hooks(sched);
    int* tok = zrt_malloc((size_t)B * T * sizeof(int), "tokens");
    int* tgt = zrt_malloc((size_t)B * T * sizeof(int), "targets");
    if (hf_src) {
        agree_or_fail(hf_load(&fsdp, hf_src, herr, sizeof herr) != 0, herr);
        if (g_rank == 0)
            printf("# weights: %s (%s), fresh optimizer state\n", cfg.init_from,
                   hf_source_summary(hf_src));
        hf_close(hf_src);
        hf_src = NULL;
    }

    if (args.resume) {
        agree_or_fail(checkpoint_load(&fsdp, &ck, err, sizeof err), err);
        if (g_rank == 0)
            printf("# resumed from %s at step %d (%lld samples consumed)\n", ck.dir, st.step,
                   st.samples);
    }
    long long* windows = zrt_malloc((size_t)B * sizeof(long long), "window indices");
    g_tracing = args.trace_data != NULL;
    if (g_tracing && g_rank == 0) {
        g_trace = fopen(args.trace_data, "w");
        trainCheck(g_trace, "cannot open the data trace %s: %s", args.trace_data, strerror(errno));
    }

    FILE* jl = NULL;
    if (g_rank == 0 && cfg.log.json[0]) {
        jl = fopen(cfg.log.json, "w");
        trainCheck(jl, "cannot open the JSON log %s: %s", cfg.log.json, strerror(errno));
    }
    if (g_rank == 0) {
        printf("# %s peak %.2f GFLOP/s (all ranks); strategies: allgather %s, reducescatter "
               "%s",
               K->host_memory ? "sgemm" : "matmul", peak / 1e9, zipcclStrategyName(fsdp.units[1 % fsdp.n_units].ag_cfg.strategy),
               zipcclStrategyName(fsdp.units[1 % fsdp.n_units].rs_cfg.strategy));
        if (fsdp.ep > 1)
            printf(", alltoall %s",
                   zipcclStrategyName(config_strategy_for(&cfg, zipcclCollAlltoAllv, "layers.0")));
        printf("; param %s, reduce %s, codec %s\n", zipcclTypeName(cfg.comm.param_dtype),
               zipcclTypeName(cfg.comm.reduce_dtype), config_codec_name(cfg.comm.codec));
        char pk[32];
        char xc[64] = "";
        if (fsdp.ep > 1)
            snprintf(xc, sizeof xc, ", expert exchange in %d chunk%s", cfg.moe.overlap_chunks,
                     cfg.moe.overlap_chunks > 1 ? "s" : "");
        printf("# schedule: overlap %s, prefetch depth %d, in-flight bound %s, reshard after "
               "forward %s%s; peak of gathered units + full gradients %s\n",
               cfg.parallel.overlap ? "on" : "off",
               cfg.parallel.overlap && cfg.parallel.prefetch ? cfg.parallel.prefetch_depth : 0,
               cfg.parallel.max_inflight_bytes
                   ? zrt_fmt_bytes((double)cfg.parallel.max_inflight_bytes, pk, sizeof pk)
                   : "none",
               cfg.parallel.reshard_after_forward ? "yes" : "no", xc,
               zrt_fmt_bytes(sched_peak_bytes(sched), pk, sizeof pk));
        plan_print(sched_plan(sched), stdout);
        fflush(stdout);
    }

    /* MoE statistics: pairs per (MoE block, expert) and the drops, summed
     * over the step's micro-batches and ranks; per block min / max / MaxVio. */
    const int moe = mc->n_experts > 0;
    int n_moe = 0;
    for (int l = 0; l < mc->n_layers; l++) n_moe += llama_layer_is_moe(mc, l);
    long long* expert_load =
        moe ? zrt_calloc((size_t)(n_moe + 1) * mc->n_experts, sizeof(long long), "expert load")
            : NULL;
    struct {
        long long min, max;
        double maxvio;
    }* block_load = moe ? zrt_calloc((size_t)n_moe, sizeof *block_load, "expert load") : NULL;

    /* ---- the loop ---- */
    const double tokens_per_step = (double)B * T * g_nranks * A;
    const double flops_per_step = llama_flops_per_token(mc, T) * tokens_per_step;
    const int first_step = st.step;
    int saved_step = -1;   /* the step of the last checkpoint this run wrote */
    int preempted = 0;     /* ranks that got SIGTERM / SIGUSR1, agreed at a step's end */
    const double t_start = zrt_now();
    float* dump_logits =
        args.dump_dir ? zrt_malloc((size_t)B * T * mc->vocab_size * sizeof(float), "dump logits")
                      : NULL;
    double comm_before[3] = {0, 0, 0}; /* collective time so far, per kind */
    {
        zipcclComm_t cs[3] = {fsdp.comm_ag, fsdp.comm_rs, fsdp.ep > 1 ? fsdp.expert.comm : NULL};
        zipcclComm_t cx[3] = {fsdp.ep > 1 ? fsdp.comm_ag_x : NULL,
                              fsdp.ep > 1 ? fsdp.comm_rs_x : NULL, NULL};
        const zipcclCollKind_t ks[3] = {zipcclCollAllGather, zipcclCollReduceScatter,
                                        zipcclCollAlltoAllv};
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < 2; i++) {
                zipcclComm_t c1 = i ? cx[k] : cs[k];
                zipcclCounters_t c;
                if (c1 && zipcclCommGetCounters(c1, ks[k], &c) == zipcclSuccess)
                    comm_before[k] += c.totalSeconds * 1e3;
            }
    }
    for (int step = st.step; step < cfg.train.steps; step++) {
        const int step_no = step + 1; /* 1-based: the step being computed */
        int dump_now = 0;
        for (int k = 0; k < args.n_dump_steps; k++) dump_now |= args.dump_steps[k] == step_no;
        zipcclCounters_t c0[3], c1[3];
        const zipcclCollKind_t kinds[3] = {zipcclCollAllGather, zipcclCollReduceScatter,
                                           zipcclCollAlltoAllv};
        for (int k = 0; k < 3; k++) fsdp_counters(&fsdp, kinds[k], &c0[k]);
        zipcclCounters_t chk[3];
        fsdp_check_compression_begin(&fsdp, chk);
        const double blocked0 = fsdp.blocked_s;
        const double t0 = zrt_now();
        if (dump_now) fsdp_dump_arm(&fsdp);

        double x0[SCHED_NX], x1[SCHED_NX];
        sched_exposed(sched, x0);
        fsdp_zero_grads(&fsdp);
        sched_begin_step(sched, 1);
        double loss_sum = 0, aux_sum = 0, data_s = 0, model_s = 0;
        const double a2a_blocked0 = fsdp.ep > 1 ? fsdp.expert.blocked_s : 0;
        const double a2a_sync0 = fsdp.ep > 1 ? fsdp.expert.sync_s : 0;
        if (moe) memset(expert_load, 0, (size_t)(n_moe + 1) * mc->n_experts * sizeof *expert_load);
        for (int a = 0; a < A; a++) {
            /* Step s, micro-batch a reads global samples
             * (s*A + a)*G .. +G-1 (G = B * ranks): st.samples counts them. */
            const double td = zrt_now();
            data_batch(&ds, 0, st.samples, g_rank, g_nranks, B, tok, tgt, windows);
            trace_batch(step_no, a, "train", st.samples, B, windows, tok, T);
            sched_trace_span(sched, "data", td, zrt_now());
            data_s += zrt_now() - td;
            sched_begin_micro(sched);
            /* --dump-tensors: the first micro-batch's logits too */
            float* logits = dump_now && a == 0 ? dump_logits : NULL;
            const double tm = zrt_now();
            const float l = llama_step(mc, acts, tok, tgt, B, T, &hooks, 1, logits);
            model_s += zrt_now() - tm;
            if (logits) dump_batch(args.dump_dir, step_no, tok, tgt, logits, B, T, mc->vocab_size, l);
            loss_sum += l;
            if (moe) { /* per MoE block: pairs routed to each expert; then the drops */
                aux_sum += llama_acts_aux_loss(acts);
                LlamaMoeRouting r;
                for (int i = 0; llama_acts_routing(acts, i, &r) == 0; i++) {
                    for (int e = 0; e < mc->n_experts; e++)
                        expert_load[(size_t)i * mc->n_experts + e] += r.routed[e];
                    expert_load[(size_t)n_moe * mc->n_experts] += r.dropped;
                }
            }
            sched_end_micro(sched);
            st.samples += (long long)B * g_nranks;
        }
        const double t_rs = zrt_now();
        sched_end_step(sched);
        sched_trace_span(sched, "the last reduce-scatters", t_rs, zrt_now());
        const double t_opt = zrt_now();
        /* Sum over ranks and micro-batches -> mean over the global batch. */
        fsdp_scale_grads(&fsdp, 1.0f / (float)(g_nranks * A));
        const double loss = fsdp_mean_over_ranks(&fsdp, loss_sum / A);
        /* MoE: the aux loss (mean over ranks and micro-batches) and how far
         * the busiest expert is above the mean load over the whole global
         * batch (MaxVio, 0 when balanced). */
        double aux = 0, maxvio = 0;
        long long dropped = 0;
        if (moe) {
            aux = fsdp_mean_over_ranks(&fsdp, aux_sum / A);
            const int cells = (n_moe + 1) * mc->n_experts;
            MPI_Allreduce(MPI_IN_PLACE, expert_load, cells, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
            dropped = expert_load[(size_t)n_moe * mc->n_experts];
            for (int i = 0; i < n_moe; i++) {
                const long long* ld = expert_load + (size_t)i * mc->n_experts;
                long long top = 0, low = ld[0], total = 0;
                for (int e = 0; e < mc->n_experts; e++) {
                    total += ld[e];
                    top = ld[e] > top ? ld[e] : top;
                    low = ld[e] < low ? ld[e] : low;
                }
                const double mean = (double)total / mc->n_experts;
                block_load[i].min = low;
                block_load[i].max = top;
                block_load[i].maxvio = mean > 0 ? ((double)top - mean) / mean : 0;
                if (block_load[i].maxvio > maxvio) maxvio = block_load[i].maxvio;
            }
        }
        const double a2a_ms = fsdp.ep > 1 ? (fsdp.expert.blocked_s - a2a_blocked0) * 1e3 : 0;
        const double a2a_sync_ms = fsdp.ep > 1 ? (fsdp.expert.sync_s - a2a_sync0) * 1e3 : 0;
        const double norm = fsdp_grad_norm(&fsdp);
        trainCheck(isfinite(loss) && isfinite(norm),
                   "step %d: loss %g, grad norm %g are not finite (hint: lower optimizer.lr, "
                   "raise warmup_steps)",
                   step_no, loss, norm);
        const float clip = optim_clip_factor(norm, (float)cfg.optim.grad_clip);
        if (clip != 1.0f)
            for (int u = 0; u < fsdp.n_units; u++)
                K->scale(fsdp.units[u].grad, fsdp.units[u].shard, clip);
        const float lr = adamw_lr(&oc, step);
        optimizer_step(&fsdp, &oc, step_no, lr);
        sched_trace_span(sched, "loss, norm, clip, AdamW", t_opt, zrt_now());
        const double opt_ms = (zrt_now() - t_opt) * 1e3, tail_ms = (t_opt - t_rs) * 1e3;
        {
            char sn[32];
            snprintf(sn, sizeof sn, "step %d", step_no);
            sched_trace_span(sched, sn, t0, zrt_now());
        }
        st.step = step_no;
        const double dt = zrt_now() - t0;
        sched_exposed(sched, x1);

        if (dump_now) {
            fsdp_dump_write(&fsdp, args.dump_dir, step_no);
            if (g_rank == 0) printf("# dumped the step %d tensors to %s\n", step_no, args.dump_dir);
        }
        fsdp_check_compression(&fsdp, chk);
        for (int k = 0; k < 3; k++) fsdp_counters(&fsdp, kinds[k], &c1[k]);
        double raw[3], wire[3], codec_ms = 0, comm_ms[3], xms[SCHED_NX];
        for (int k = 0; k < 3; k++) {
            raw[k] = (double)(c1[k].rawBytes - c0[k].rawBytes);
            wire[k] = (double)(c1[k].wireBytes - c0[k].wireBytes);
            codec_ms += (c1[k].codecSeconds - c0[k].codecSeconds) * 1e3;
        }
        /* time inside the collectives of each kind (the bookkeeping scalars'
         * communicator left out) and what of it the compute thread waited */
        {
            zipcclComm_t cs[3] = {fsdp.comm_ag, fsdp.comm_rs, fsdp.ep > 1 ? fsdp.expert.comm : NULL};
            zipcclComm_t cx[3] = {fsdp.ep > 1 ? fsdp.comm_ag_x : NULL,
                                  fsdp.ep > 1 ? fsdp.comm_rs_x : NULL, NULL};
            for (int k = 0; k < 3; k++) {
                comm_ms[k] = 0;
                zipcclComm_t two[2] = {cs[k], cx[k]};
                for (int i = 0; i < 2; i++) {
                    if (!two[i]) continue;
                    zipcclCounters_t c;
                    zipcclCheck(zipcclCommGetCounters(two[i], kinds[k], &c));
                    comm_ms[k] += c.totalSeconds * 1e3;
                }
                comm_ms[k] -= comm_before[k];
                comm_before[k] += comm_ms[k];
            }
        }
        for (int k = 0; k < SCHED_NX; k++) xms[k] = (x1[k] - x0[k]) * 1e3;
        const double comm_all = comm_ms[0] + comm_ms[1] + comm_ms[2],
                     xcomm = xms[SCHED_X_AG] + xms[SCHED_X_RS] + xms[SCHED_X_A2A];
        const double overlap_frac = comm_all > 0 ? 1 - (xcomm < comm_all ? xcomm : comm_all) / comm_all : 0;
        const double raw_all = raw[0] + raw[1] + raw[2], wire_all = wire[0] + wire[1] + wire[2];
        const double exposed_ms = (fsdp.blocked_s - blocked0) * 1e3;

        double val = NAN;
        if (cfg.data.val_every > 0 && (step_no % cfg.data.val_every == 0 ||
                                       step_no == cfg.train.steps) && ds.n_windows[1] > 0)
            val = validate(&fsdp, sched, &ds, acts, &hooks, tok, tgt, step_no, windows);

        if (g_rank == 0) {
            const double tps = tokens_per_step / dt, fl = flops_per_step / dt;
            const double elapsed = zrt_now() - t_start;
            char eta[32];
            fmt_eta(elapsed / (step_no - first_step) * (cfg.train.steps - step_no), eta,
                    sizeof eta);
            if (step_no % cfg.log.every == 0 || step_no == cfg.train.steps || !isnan(val)) {
                printf("step %5d/%d | loss %.4f | norm %.4f | lr %.3e | %7.1f ms | %8.0f tok/s | "
                       "%6.2f GFLOP/s | MFU %5.1f%% | comm %.2f MB -> %.2f MB (x%.3f) | codec "
                       "%.1f ms | exposed %.1f ms (ag %.1f rs %.1f a2a %.1f misc %.1f of comm "
                       "%.1f: overlap %.0f%%)",
                       step_no, cfg.train.steps, loss, norm, lr, dt * 1e3, tps, fl / 1e9,
                       100 * fl / peak, raw_all / 1e6, wire_all / 1e6,
                       wire_all > 0 ? raw_all / wire_all : 1.0, codec_ms, exposed_ms,
                       xms[SCHED_X_AG], xms[SCHED_X_RS], xms[SCHED_X_A2A], xms[SCHED_X_MISC],
                       comm_all, 100 * overlap_frac);
                if (moe) {
                    printf(" | aux %.4f | maxvio %.2f", aux, maxvio);
                    if (mc->capacity_factor > 0) printf(" | dropped %lld", dropped);
                    if (fsdp.ep > 1) /* the calls: a chunked exchange is several per block */
                        printf(" | a2a %.2f MB (x%.3f) %llu calls %.1f ms", raw[2] / 1e6,
                               wire[2] > 0 ? raw[2] / wire[2] : 1.0,
                               (unsigned long long)(c1[2].calls - c0[2].calls), a2a_ms);
                }
                if (!isnan(val)) printf(" | val %.4f", val);
                printf(" | eta %s\n", eta);
                fflush(stdout);
            }
            if (jl) {
                fprintf(jl,
                        "{\"step\": %d, \"loss\": %.9g, \"grad_norm\": %.9g, \"lr\": %.9g, "
                        "\"ms\": %.9g, \"tokens_per_s\": %.9g, \"flops_per_s\": %.9g, "
                        "\"mfu\": %.9g, \"comm_raw_bytes\": %.0f, \"comm_wire_bytes\": %.0f, "
                        "\"comm_ratio\": %.9g, \"allgather_ratio\": %.9g, "
                        "\"reducescatter_ratio\": %.9g, \"allgather_raw_bytes\": %.0f, "
                        "\"allgather_wire_bytes\": %.0f, \"reducescatter_raw_bytes\": %.0f, "
                        "\"reducescatter_wire_bytes\": %.0f, \"codec_ms\": %.9g, "
                        "\"exposed_comm_ms\": %.9g",
                        step_no, loss, norm, (double)lr, dt * 1e3, tps, fl, fl / peak, raw_all,
                        wire_all, wire_all > 0 ? raw_all / wire_all : 1.0,
                        wire[0] > 0 ? raw[0] / wire[0] : 1.0,
                        wire[1] > 0 ? raw[1] / wire[1] : 1.0, raw[0], wire[0], raw[1], wire[1],
                        codec_ms, exposed_ms);
                fprintf(jl,
                        ", \"exposed_allgather_ms\": %.9g, \"exposed_reducescatter_ms\": %.9g, "
                        "\"exposed_alltoall_ms\": %.9g, \"exposed_misc_ms\": %.9g, "
                        "\"comm_allgather_ms\": %.9g, \"comm_reducescatter_ms\": %.9g, "
                        "\"comm_alltoall_ms\": %.9g, \"overlap\": %.9g, \"data_ms\": %.9g, "
                        "\"model_ms\": %.9g, \"last_reduce_ms\": %.9g, \"optimizer_ms\": %.9g",
                        xms[SCHED_X_AG], xms[SCHED_X_RS], xms[SCHED_X_A2A], xms[SCHED_X_MISC],
                        comm_ms[0], comm_ms[1], comm_ms[2], overlap_frac, data_s * 1e3,
                        model_s * 1e3, tail_ms, opt_ms);
                if (moe) {
                    fprintf(jl,
                            ", \"aux_loss\": %.9g, \"expert_maxvio\": %.9g, "
                            "\"dropped_pairs\": %lld, \"alltoall_raw_bytes\": %.0f, "
                            "\"alltoall_wire_bytes\": %.0f, \"alltoall_ratio\": %.9g, "
                            "\"alltoall_exposed_ms\": %.9g, \"alltoall_sync_ms\": %.9g, "
                            "\"alltoall_calls\": %llu, \"experts\": [",
                            aux, maxvio, dropped, raw[2], wire[2],
                            wire[2] > 0 ? raw[2] / wire[2] : 1.0, a2a_ms, a2a_sync_ms,
                            (unsigned long long)(c1[2].calls - c0[2].calls));
                    for (int i = 0, l = 0; l < mc->n_layers; l++) {
                        if (!llama_layer_is_moe(mc, l)) continue;
                        fprintf(jl,
                                "%s{\"layer\": %d, \"min\": %lld, \"max\": %lld, "
                                "\"maxvio\": %.9g}",
                                i ? ", " : "", l, block_load[i].min, block_load[i].max,
                                block_load[i].maxvio);
                        i++;
                    }
                    fprintf(jl, "]");
                }
                if (!isnan(val)) fprintf(jl, ", \"val_loss\": %.9g", val);
                fprintf(jl, "}\n");
                fflush(jl);
            }
        }
        if (cfg.ckpt.dir[0] && cfg.ckpt.every > 0 && step_no % cfg.ckpt.every == 0 &&
            step_no != cfg.train.steps) {
            checkpoint_save(&fsdp, &cfg, &st);
            saved_step = step_no;
        }
        /* Preemption: did any rank get SIGTERM / SIGUSR1? One small
         * all-gather on the scalars' communicator (it has ZipCCL's timeout),
         * after the step's log line so its time is no step's. */
        if (step_no < cfg.train.steps) {
            preempted = (int)lround(fsdp_mean_over_ranks(&fsdp, g_stop_signal ? 1.0 : 0.0) *
                                    g_nranks);
            if (preempted) break;
        }
    }
    if (cfg.ckpt.dir[0] && st.step > first_step && saved_step != st.step) {
        checkpoint_save(&fsdp, &cfg, &st);
        saved_step = st.step;
    }

    if (g_rank == 0) {
        plan_print_actual(sched_plan(sched), stdout);
        fflush(stdout);
    }
    if (g_nranks > 1 && st.step > first_step) {
        char perr[1024];
        agree_or_fail(plan_check_compressed(sched_plan(sched), perr, sizeof perr) > 0, perr);
    }
    if (args.trace) {
        sched_trace_write(sched, args.trace);
        if (g_rank == 0) printf("# trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n", args.trace);
    }
    /* The measured peak against the plan: the largest resident-set
     * high-water mark of the ranks, read before the hash below gathers each
     * unit once more (checkpoints add rank 0's gather of whole units on
     * top, which the plan leaves out). */
    double rss_peak = (double)zrt_rss_peak(), rss_max = 0;
    const uint64_t hash = fsdp_param_hash(&fsdp);
    MPI_Allreduce(&rss_peak, &rss_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    /* Expert parallelism: what the exchanges of each MoE block compressed to,
     * all ranks' traffic over the run, activations and gradients apart. */
    char a2a_json[4096] = "";
    if (fsdp.ep > 1) {
        const size_t nb = (size_t)mc->n_layers * 8;
        uint64_t* b = zrt_malloc(nb * sizeof *b, "a2a bytes");
        memcpy(b, fsdp.expert.bytes, nb * sizeof *b);
        MPI_Allreduce(MPI_IN_PLACE, b, (int)nb, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        size_t used = (size_t)snprintf(a2a_json, sizeof a2a_json, ", \"alltoall_by_layer\": [");
        static const char* const what[4] = {"dispatch", "combine", "dispatch_grad", "combine_grad"};
        if (g_rank == 0) printf("# alltoall ratio per MoE block (all ranks, the run): layer:");
        for (int l = 0, first = 1; l < mc->n_layers; l++) {
            if (!llama_layer_is_moe(mc, l)) continue;
            const uint64_t* x = b + (size_t)l * 8;
            if (g_rank == 0)
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
        if (g_rank == 0) printf("  (dispatch/combine)\n");
        if (used < sizeof a2a_json) snprintf(a2a_json + used, sizeof a2a_json - used, "]");
        else a2a_json[0] = '\0'; /* too many blocks for one line: the console has it */
        free(b);
    }
    if (g_rank == 0) {
        char b[2][32];
        printf("# memory: peak resident set %s per rank (the largest of the ranks), the plan "
               "%s (%+.1f%%)\n",
               zrt_fmt_bytes(rss_max, b[0], 32), zrt_fmt_bytes(mplan.host, b[1], 32),
               mplan.host > 0 ? 100 * (rss_max / mplan.host - 1) : 0.0);
    }
    if (g_rank == 0 && preempted) {
        /* No "final" JSON line: the run is not finished. */
        char where[CFG_PATH_MAX + 64] = "no checkpoint.dir: nothing saved";
        if (saved_step == st.step)
            snprintf(where, sizeof where, "checkpoint %s/step_%08d written", cfg.ckpt.dir,
                     st.step);
        printf("# preempted: SIGTERM/SIGUSR1 on %d of %d rank%s; stopped after step %d of %d, "
               "%s; param hash %016" PRIx64 "; exit %d\n",
               preempted, g_nranks, g_nranks > 1 ? "s" : "", st.step, cfg.train.steps, where,
               hash, TRAIN_EXIT_PREEMPTED);
        fflush(stdout);
        if (jl) fclose(jl);
    } else if (g_rank == 0) {
        printf("# done: %d steps, %.1f s, final param hash %016" PRIx64 "\n",
               st.step - first_step, zrt_now() - t_start, hash);
        if (jl) {
            fprintf(jl,
                    "{\"final\": true, \"step\": %d, \"param_hash\": \"%016" PRIx64 "\", "
                    "\"rss_peak_bytes\": %.0f, \"plan_host_bytes\": %.0f, "
                    "\"plan_device_bytes\": %.0f%s}\n",
                    st.step, hash, rss_max, mplan.host, mplan.device, a2a_json);
            fclose(jl);
        }
    }
    if (g_trace) fclose(g_trace);
    free(windows);
    free(dump_logits);
    free(expert_load);
    free(block_load);
    free(tok);
    free(tgt);
    llama_acts_free(acts);
    sched_destroy(sched);
    fsdp_free(&fsdp);
    data_close(&ds);
    MPI_Finalize();
    return preempted ? TRAIN_EXIT_PREEMPTED : 0;
}
