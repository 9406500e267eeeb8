/*
 * train_setup.c — everything the trainer does before its first step, in
 * order: arguments; the config (YAML, --set, a Hugging Face config.json,
 * the token file's metadata), checked before any work; a checkpoint to
 * resume, judged against it; the communication plan; the device; the
 * memory plan (refused when it cannot fit); the data; the model's shards,
 * activations and scheduler; the weights (init, Hugging Face or the
 * checkpoint). train.c calls train_setup() and then runs the steps.
 * Arguments, paths and values of the config quoted in messages and log
 * lines go through zrt_printable (log.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "device_setup.h"
#include "hf.h"
#include "log.h"
#include "project.h"
#include "train_run.h"

static int g_rank, g_nranks; /* this process, for the helpers' messages */

static int rank(void) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}
static int nranks(void) {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

/* Errors every rank sees alike (bad arguments, bad config): rank 0 says
 * it once and all ranks leave with status 2, no MPI_Abort needed. */
void train_config_fail(const char* msg) {
    if (rank() == 0) {
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
void train_agree_or_fail(int bad, const char* msg) {
    const int me = rank(), n = nranks();
    int who = bad ? me : n, first = n;
    MPI_Allreduce(&who, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == n) return;
    if (me == first) {
        fflush(stdout);
        fprintf(stderr, "train: error: %s\n", msg);
        fflush(stderr);
    }
    MPI_Finalize();
    exit(2);
}

static void usage(FILE* f) {
    fprintf(f,
            "usage: build/train CONFIG.yaml [--set key=value ...] [--log-json FILE]\n"
            "                   [--dump-tensors STEPS DIR] [--resume DIR] [--init-from DIR]\n"
            "                   [--trace-data FILE] [--trace FILE] [--plan NRANKS]\n"
            "                   [--project CLUSTER.yaml]\n"
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
            "  --project CLUSTER.yaml print what compression buys on that cluster at\n"
            "                         cluster.gpus_min..gpus_max GPUs (docs/SCALE.md) and exit\n"
            "  --plan NRANKS          print the memory plan per rank at NRANKS ranks (shards,\n"
            "                         units in flight, activations, ...) and exit\n"
            "                         for runtime.memory_gib per rank (default there 80:\n"
            "                         an 80 GB card); train.recompute: auto recomputes if\n"
            "                         it must\n"
            "SIGTERM or SIGUSR1: finish the step, write its checkpoint (checkpoint.dir) and exit\n"
            "with status 75; build/supervise restarts runs that fail (docs/RUNTIME.md)\n");
}

static void parse_args(int argc, char** argv, TrainArgs* a) {
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char* s = argv[i];
        char msg[600];
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            if (g_rank == 0) usage(stdout);
            MPI_Finalize();
            exit(0);
        } else if (!strcmp(s, "--set") && i + 1 < argc) {
            if (a->n_sets == TRAIN_MAX_SETS) train_config_fail("too many --set options");
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
                             (int)(sizeof a->dump_steps / sizeof a->dump_steps[0]),
                             PRINTABLE(list));
                    train_config_fail(msg);
                }
                a->dump_steps[a->n_dump_steps++] = (int)v;
                if (!*end) break;
                q = end + 1;
            }
            a->dump_dir = argv[++i];
        } else if (!strcmp(s, "--plan") && i + 1 < argc) {
            char* end;
            const long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 1 << 20) train_config_fail("--plan: a rank count from 1 up");
            a->plan = (int)v;
        } else if (!strcmp(s, "--project") && i + 1 < argc) {
            a->project = argv[++i];
        } else if (!strcmp(s, "--resume") && i + 1 < argc) {
            a->resume = argv[++i];
        } else if (!strcmp(s, "--init-from") && i + 1 < argc) {
            if (a->n_sets == TRAIN_MAX_SETS) train_config_fail("too many --set options");
            snprintf(a->init_from, sizeof a->init_from, "model.init_from=%s", argv[++i]);
            a->sets[a->n_sets++] = a->init_from;
        } else if (!strcmp(s, "--trace-data") && i + 1 < argc) {
            a->trace_data = argv[++i];
        } else if (!strcmp(s, "--trace") && i + 1 < argc) {
            a->trace = argv[++i];
        } else if (s[0] == '-') {
            if (g_rank == 0) usage(stderr);
            snprintf(msg, sizeof msg, "unknown or incomplete option '%s'", PRINTABLE(s));
            train_config_fail(msg);
        } else if (!a->config) {
            a->config = s;
        } else {
            snprintf(msg, sizeof msg, "unexpected argument '%s' (one config file only)",
                     PRINTABLE(s));
            train_config_fail(msg);
        }
    }
    if (!a->config) {
        if (g_rank == 0) usage(stderr);
        train_config_fail("no config file given");
    }
}

/* The backend the model computes on (runtime.device; device_setup.c), every
 * rank bound to the GPU of its node-local rank for cuda. A device that
 * cannot be used is an error naming the key, agreed by every rank. */
static const ZrtKernels* select_backend(const TrainConfig* cfg, int local_rank) {
    char why[512] = "", msg[1000], w[400];
    const ZrtKernels* K = device_select(cfg, local_rank, why, sizeof why);
    snprintf(msg, sizeof msg, "%s: key 'runtime.device': %s: %s",
             config_where(cfg, "runtime.device", w, sizeof w), PRINTABLE(cfg->runtime.device), why);
    train_agree_or_fail(K == NULL, msg);
    return K;
}

/* What the backend's matmul_forward (the compute dtype's products) reaches
 * on this rank (FLOP/s): a probe, printed as one, and MFU's denominator
 * only on a card runtime/peaks.c lacks. The best of three rounds of four
 * n^3 products through the table, timed after a warm-up; fewer rounds once
 * 0.3 s have gone. n is 2048 unless one product of the size before takes
 * over 20 ms (a slow device: the test suite's emulated GPU, whose bf16
 * products run at ~9 GFLOP/s, stops at 512, where 2048 took ~10 s of
 * every emulated bf16 run). */
static double backend_matmul_peak(const ZrtKernels* K) {
    const int most = 2048;
    const size_t bytes = (size_t)most * most * sizeof(float);
    float* h = zrt_malloc(bytes, "matmul probe");
    for (size_t i = 0; i < (size_t)most * most; i++) h[i] = (float)(i % 17) * 0.01f;
    float *a = zdev_alloc(K->dev, bytes), *b = zdev_alloc(K->dev, bytes), *c = zdev_alloc(K->dev, bytes);
    trainCheck(a && b && c, "out of %s memory for the matmul probe", K->name);
    zdevCheck(zdev_upload(K->dev, a, h, bytes));
    zdevCheck(zdev_upload(K->dev, b, h, bytes));
    int n = 256;
    K->matmul_forward(c, a, b, n, n, n); /* the first call's set-up, untimed */
    zdevCheck(zdev_stream_sync(K->dev, NULL));
    for (; n < most; n *= 2) { /* the size: up while one product stays short */
        const double t0 = zrt_now();
        K->matmul_forward(c, a, b, n, n, n);
        zdevCheck(zdev_stream_sync(K->dev, NULL));
        if (zrt_now() - t0 > 0.02) break;
    }
    K->matmul_forward(c, a, b, n, n, n);
    zdevCheck(zdev_stream_sync(K->dev, NULL));
    double best = 0;
    const double start = zrt_now();
    for (int r = 0; r < 3 && (r == 0 || zrt_now() - start < 0.3); r++) {
        const double t0 = zrt_now();
        for (int i = 0; i < 4; i++) K->matmul_forward(c, a, b, n, n, n);
        zdevCheck(zdev_stream_sync(K->dev, NULL));
        const double f = 4 * 2.0 * n * (double)n * n / (zrt_now() - t0);
        best = f > best ? f : best;
    }
    zdev_free(K->dev, a);
    zdev_free(K->dev, b);
    zdev_free(K->dev, c);
    free(h);
    return best;
}

/* The activations' memory options: recomputation as the memory plan
 * resolved it (train.recompute: auto), train.logits_rows. */
static LlamaMemOpts train_mem_opts(const TrainConfig* cfg, const MemPlan* mp) {
    return (LlamaMemOpts){.recompute = mp->recompute,
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
        train_config_fail(err);
    /* Ranks on this host (node: their communicator) share its memory, the
     * ranks on one device its free memory. */
    int local = 1, sharing = 1;
    MPI_Comm_size(node, &local);
    const double avail = (double)zrt_mem_available();
    size_t dfree = 0, dtotal = 0;
    const int dev = !K->dev->host_access, dev_info = dev && zdev_mem_info(K->dev, &dfree, &dtotal) == 0;
    if (dev_info) {
        MPI_Comm dc; /* the ranks of this host on this device */
        MPI_Comm_split(node, K->dev->ordinal, 0, &dc);
        MPI_Comm_size(dc, &sharing);
        MPI_Comm_free(&dc);
    }
    /* A rank's budget: 90% of its share of what the host has available
     * (and of the device's free memory), or runtime.memory_gib if less. */
    const double limit = cfg->runtime.memory_gib * (double)(1ull << 30);
    double host_budget = avail > 0 ? 0.9 * avail / local : 0,
           dev_budget = dev_info ? 0.9 * (double)dfree / sharing : 0;
    if (limit > 0 && !dev) host_budget = host_budget > 0 && host_budget < limit ? host_budget : limit;
    if (limit > 0 && dev) dev_budget = dev_budget > 0 && dev_budget < limit ? dev_budget : limit;
    /* train.recompute: auto: recompute when the plan without it does not
     * fit on some rank, all ranks alike */
    if (mp->recompute_auto) {
        int fits = memplan_fits(mp, K, host_budget, dev_budget), all = 0;
        MPI_Allreduce(&fits, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (!all) memplan_recompute(mp, K);
    }
    if (g_rank == 0) memplan_print(mp, cfg, K, stdout);
    const char* hint = mp->recompute ? "" : "train.recompute: full, ";
    const double need = mp->host * local;
    if (dev) {
        const int dev_bad = dev_budget > 0 && mp->device > dev_budget;
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
            char lim[64] = "";
            if (limit > 0) snprintf(lim, sizeof lim, " (runtime.memory_gib %g)", cfg->runtime.memory_gib);
            snprintf(msg, sizeof msg,
                     "%s: key 'runtime.device': the model does not fit on the device: "
                     "activations %s + gathered units and gradients in flight %s per rank, x %d "
                     "rank%s on one device, but %s is free%s. Hint: %sa "
                     "smaller data.batch_size / seq_len, or more devices.",
                     config_where(cfg, "runtime.device", w, sizeof w),
                     zrt_fmt_bytes(mp->acts, b[0], 32), zrt_fmt_bytes(mp->inflight, b[1], 32),
                     sharing, sharing > 1 ? "s" : "",
                     zrt_fmt_bytes(limit > 0 && (!dfree || limit < 0.9 * (double)dfree / sharing) ? limit * sharing
                                                                                          : (double)dfree,
                                   b[2], 32),
                     lim, hint);
            train_config_fail(msg);
        }
    }
    if (g_rank == 0)
        printf("# host memory: %d rank%s on this host need %s of %s available\n", local,
               local > 1 ? "s" : "", zrt_fmt_bytes(need, (char[32]){0}, 32),
               zrt_fmt_bytes(avail, (char[32]){0}, 32));
    /* Decide together: a rank that stopped alone would leave the others
     * waiting in their first collective. */
    int bad = host_budget > 0 && mp->host > host_budget, any_bad = 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any_bad) {
        char b[8][32], msg[2048], lim[96] = "";
        if (limit > 0)
            snprintf(lim, sizeof lim, " or than runtime.memory_gib (%g GiB per rank)",
                     cfg->runtime.memory_gib);
        snprintf(msg, sizeof msg,
                 "%s: the model does not fit: %.3g B parameters need %s per rank (shards %s, "
                 "gathered units + gradients in flight %s, activations %s, comm %s, data %s, "
                 "process %s); %d ranks on this host need %s, more than 90%% of the %s "
                 "available (%s)%s. Hint: "
                 "more hosts, %sa smaller model, or a smaller "
                 "data.batch_size / seq_len.",
                 PRINTABLE(cfg->source), (double)llama_num_params(&cfg->model) / 1e9,
                 zrt_fmt_bytes(mp->host, b[0], 32),
                 zrt_fmt_bytes(mp->params + mp->grads + mp->optim, b[1], 32),
                 zrt_fmt_bytes(mp->inflight, b[2], 32),
                 zrt_fmt_bytes(K->dev->host_access ? mp->acts : 0, b[3], 32),
                 zrt_fmt_bytes(mp->comm, b[4], 32), zrt_fmt_bytes(mp->data, b[5], 32),
                 zrt_fmt_bytes(mp->base, b[6], 32), local, zrt_fmt_bytes(need, b[7], 32),
                 zrt_fmt_bytes(avail, (char[32]){0}, 32),
                 zrt_fmt_bytes(0.9 * avail, (char[32]){0}, 32), lim, hint);
        train_config_fail(msg);
    }
}


/* The config: YAML, --set, a Hugging Face model's config.json
 * (model.init_from) and the token file's metadata, validated; the
 * optimizer's settings from it. */
static int is_pow2(long long x) { return x > 0 && !(x & (x - 1)); }

/* train.grad_groups fixes the global batch's micro-batches G: grad_accum is
 * G / ranks, so one config runs alike at every rank count dividing G.
 * train.rank_invariant sums them in one binary tree (fsdp.h): G and the
 * rank count powers of two, so every rank's micro-batches and the ranks
 * themselves are whole subtrees of it. */
static int batch_layout(TrainConfig* cfg, int nranks, char* err, size_t errlen) {
    char w[400], w2[400];
    const int G = cfg->train.grad_groups;
    if (G > 0) {
        config_where(cfg, "train.grad_groups", w, sizeof w);
        if (G % nranks)
            return zrt_errf(err, errlen,
                            "%s: train.grad_groups %d is not a multiple of the %d ranks: each "
                            "rank takes grad_groups / ranks micro-batches",
                            w, G, nranks);
        /* the more specific key wins, and says so (the shipped configs write
         * grad_accum: 1) */
        if (config_given(cfg, "data.grad_accum") && cfg->data.grad_accum != G / nranks && g_rank == 0)
            printf("# note: data.grad_accum %d (%s) replaced by %d: train.grad_groups %d (%s) over %d "
                   "rank%s\n",
                   cfg->data.grad_accum, config_where(cfg, "data.grad_accum", w2, sizeof w2),
                   G / nranks, G, w, nranks, nranks > 1 ? "s" : "");
        cfg->data.grad_accum = G / nranks;
    }
    if (cfg->train.rank_invariant && (!is_pow2(nranks) || !is_pow2(cfg->data.grad_accum)))
        return zrt_errf(err, errlen,
                        "%s: train.rank_invariant sums the global batch's micro-batches in one "
                        "binary tree, so the ranks (%d) and data.grad_accum (%d) must be powers "
                        "of two",
                        config_where(cfg, "train.rank_invariant", w, sizeof w), nranks,
                        cfg->data.grad_accum);
    return 0;
}

static void read_config(TrainRun* r, DataMeta* dmeta) {
    TrainConfig* cfg = &r->cfg;
    const TrainArgs* args = &r->args;
    char err[1024], herr[4096]; /* herr: messages naming model directories and files */
    config_defaults(cfg);
    if (config_load(cfg, args->config, err, sizeof err)) train_config_fail(err);
    if (args->project && config_load_cluster(cfg, args->project, err, sizeof err)) train_config_fail(err);
    for (int i = 0; i < args->n_sets; i++)
        if (config_set(cfg, args->sets[i], err, sizeof err)) train_config_fail(err);
    if (args->log_json) snprintf(cfg->log.json, sizeof cfg->log.json, "%s", args->log_json);
    /* A Hugging Face model directory gives the model keys (its config.json;
     * the weights come below). Every rank reads the same files and reaches
     * the same verdict, but a file missing on one host must not leave the
     * others waiting: they agree. */
    if (cfg->init_from[0])
        train_agree_or_fail(hf_apply_config(cfg, cfg->init_from, herr, sizeof herr) != 0, herr);
    /* Token files of scripts/prepare_data.py say what they hold (PATH.json). */
    train_agree_or_fail(data_read_meta(cfg->data.path, dmeta, herr, sizeof herr) != 0, herr);
    if (dmeta->present) {
        char where[1300];
        snprintf(where, sizeof where, "%s: 'dtype'", PRINTABLE(dmeta->path));
        train_agree_or_fail(
            config_set_external(cfg, "data.tokenizer", dmeta->dtype, where, herr, sizeof herr) != 0,
            herr);
    }
    if (config_validate(cfg, err, sizeof err)) train_config_fail(err);
    if (batch_layout(cfg, args->plan ? args->plan : args->project ? cfg->cluster.gpus_min : r->nranks, err,
                     sizeof err))
        train_config_fail(err);
    if (dmeta->present && dmeta->vocab_size > cfg->model.vocab_size) {
        char msg[4096], w[1400];
        snprintf(msg, sizeof msg,
                 "%s: the tokenizer that made %s has %lld tokens (vocab_size), more than the "
                 "model's %d (model.vocab_size, %s): its ids would index past the embedding",
                 PRINTABLE(dmeta->path), PRINTABLE(cfg->data.path), dmeta->vocab_size,
                 cfg->model.vocab_size,
                 config_where(cfg, "model.vocab_size", w, sizeof w));
        train_config_fail(msg);
    }
    AdamWConfig* oc = &r->oc;
    *oc = (AdamWConfig){(float)cfg->optim.lr, (float)cfg->optim.min_lr, cfg->schedule.warmup_steps,
                      cfg->schedule.total_steps ? cfg->schedule.total_steps : cfg->train.steps,
                      (float)cfg->optim.beta1, (float)cfg->optim.beta2, (float)cfg->optim.eps,
                      (float)cfg->optim.weight_decay};
    if (oc->warmup_steps > oc->total_steps) {
        /* Short runs of a long config (--set train.steps=5) keep working. */
        if (r->rank == 0)
            printf("# note: schedule.warmup_steps %d > %d total steps: warmup clamped to %d\n",
                   oc->warmup_steps, oc->total_steps, oc->total_steps);
        oc->warmup_steps = oc->total_steps;
    }
    if (adamw_config_check(oc, err, sizeof err)) {
        char msg[2000], w[800];
        snprintf(msg, sizeof msg, "%s: optimizer/schedule: %s",
                 config_where(cfg, "optimizer.,schedule.", w, sizeof w), err);
        train_config_fail(msg);
    }
}

/* --resume: the checkpoint, read and judged against the config before
 * anything is built. */
static void read_resume(TrainRun* r) {
    TrainConfig* cfg = &r->cfg;
    const TrainArgs* args = &r->args;
    CheckpointInfo* ck = &r->ck;
    TrainState* st = &r->st;
    char err[1024];
    if (args->resume) {
        char msg[8192];
        int bad = checkpoint_open(args->resume, ck, err, sizeof err);
        train_agree_or_fail(bad, err);
        if (config_resume_check(&ck->cfg, ck->nranks, cfg, r->nranks, r->notes, sizeof r->notes, msg,
                                sizeof msg)) {
            char full[sizeof msg + 2200];
            char shown[1000];
            snprintf(full, sizeof full, "--resume %s (%s): %s",
                     zrt_printable(args->resume, shown, sizeof shown), PRINTABLE(ck->dir), msg);
            train_config_fail(full);
        }
        *st = ck->st;
        if (st->step > cfg->train.steps) {
            snprintf(msg, sizeof msg,
                     "--resume %s: the checkpoint is at step %d, beyond train.steps %d (hint: "
                     "--set train.steps=N)",
                     PRINTABLE(args->resume), st->step, cfg->train.steps);
            train_config_fail(msg);
        }
    }
}

static void print_config(TrainRun* r, const DataMeta* dmeta) {
    TrainConfig* cfg = &r->cfg;
    const TrainArgs* args = &r->args;
    const LlamaConfig* mc = &cfg->model;
    const int B = cfg->data.batch_size, T = cfg->data.seq_len, A = cfg->data.grad_accum;
    if (r->rank == 0) {
        printf("# effective config (%s, %d rank%s)\n", PRINTABLE(cfg->source), r->nranks,
               r->nranks > 1 ? "s" : "");
        config_print(cfg, stdout);
        printf("# model: %.3f M parameters, %d units; global batch %d x %d x %d ranks x %d accum "
               "= %lld tokens/step\n",
               (double)llama_num_params(mc) / 1e6, llama_num_units(mc), B, T, r->nranks, A,
               (long long)B * T * r->nranks * A);
        const int N = args->plan ? args->plan : r->nranks; /* --plan N: planned for N */
        if (cfg->train.rank_invariant)
            printf("# rank-invariant: the global batch's %d micro-batches of %d sequences summed "
                   "in one binary tree (ranks below, micro-batches above): the same parameters "
                   "bit for bit on any power-of-two rank count up to %d with batch_size %d\n",
                   N * A, B, N * A, B);
        if (mc->n_experts > 0) {
            int n_moe = 0;
            for (int l = 0; l < mc->n_layers; l++) n_moe += llama_layer_is_moe(mc, l);
            printf("# experts: %d MoE blocks of %d experts, top-%d, %.3f M active parameters per "
                   "token; expert parallelism %d (%d experts per rank), aux loss coefficient %g\n",
                   n_moe, mc->n_experts, mc->n_experts_per_tok,
                   (double)llama_active_params(mc) / 1e6, cfg->parallel.ep,
                   mc->n_experts / cfg->parallel.ep, (double)mc->router_aux_loss_coef);
        }
        fputs(r->notes, stdout);
        if (cfg->init_from[0] && args->resume)
            printf("# model.init_from %s: the model keys come from its config.json, the weights "
                   "from the checkpoint\n", PRINTABLE(cfg->init_from));
        if (cfg->init_from[0] && dmeta->present && dmeta->tokenizer[0]) {
            /* the data's tokenizer (its copy beside the tokens) against the model's */
            char tp[CFG_PATH_MAX + 32];
            uint64_t h, hd;
            snprintf(tp, sizeof tp, "%s/tokenizer.json", cfg->init_from);
            if (!zrt_file_fnv1a64(tp, &h, NULL) && !zrt_file_fnv1a64(dmeta->tokenizer, &hd, NULL) &&
                h != hd)
                printf("# warning: %s was made with another tokenizer.json (%s) than the model's "
                       "(%s): the ids may not mean what the model learnt\n",
                       PRINTABLE(cfg->data.path), PRINTABLE(dmeta->tokenizer), PRINTABLE(tp));
        }
        fflush(stdout);
    }
}

/* The communication plan and the step's schedule from the config alone;
 * --plan N prints the memory plan at N ranks (returns 1: nothing more). */
static int plan_or_refuse(TrainRun* r) {
    TrainConfig* cfg = &r->cfg;
    const TrainArgs* args = &r->args;
    const LlamaConfig* mc = &cfg->model;
    char err[1024];
    if (args->project) { /* the projection onto cluster.*, and nothing else (project.h) */
        if (r->rank == 0) {
            FILE* json = NULL;
            if (cfg->log.json[0] && !(json = fopen(cfg->log.json, "w")))
                train_config_fail("--log-json: cannot write the projection's JSON lines there");
            if (project_run(cfg, stdout, json, err, sizeof err)) train_config_fail(err);
            if (json) fclose(json);
        }
        return 1;
    }
    if (!args->plan && mc->n_experts > 0 && r->nranks % cfg->parallel.ep) {
        char msg[600], w[400];
        snprintf(msg, sizeof msg, "%s: key 'parallelism.ep': %d does not divide the %d ranks",
                 config_where(cfg, "parallelism.ep", w, sizeof w), cfg->parallel.ep, r->nranks);
        train_config_fail(msg);
    }
    /* The communication plan (built here, once: FSDP takes it over) and the
     * step's schedule, from the config alone: a bad rule or bound stops the
     * run here, before any work. */
    if (fsdp_plan_build(cfg, &r->comm_plan, err, sizeof err)) train_config_fail(err);
    double inflight = 0;
    if (!args->plan && sched_check_config(cfg, r->nranks, &inflight, err, sizeof err))
        train_config_fail(err);
    if (args->plan) { /* the plan at args->plan ranks, and nothing else */
        if (r->rank == 0) {
            /* the table the run would compute on (its activation arena:
             * model.compute: bf16 keeps some activations in bf16) */
            const int bf16 = !strcmp(cfg->runtime.compute, "bf16");
            const ZrtKernels* PK = bf16 ? zrt_kernels_cpu_bf16() : zrt_kernels_cpu();
            if (!strcmp(cfg->runtime.device, "cuda") && zrt_kernels_cuda(NULL))
                PK = bf16 ? zrt_kernels_cuda_bf16(NULL) : zrt_kernels_cuda(NULL);
            MemPlan mp;
            /* OpenBLAS's work buffers into the base, as in a run */
            if (PK->dev->host_access) zrt_sgemm_peak(0.05);
            if (memplan_build(cfg, args->plan, PK, data_bytes(cfg), (double)zrt_rss_now(), &mp,
                              err, sizeof err))
                train_config_fail(err);
            /* the budget: the card's memory with a device, else the host's */
            const double gib = cfg->runtime.memory_gib > 0 ? cfg->runtime.memory_gib : 80,
                         budget = gib * (double)(1ull << 30);
            const double hb = PK->dev->host_access ? budget : 0;
            if (mp.recompute_auto && !memplan_fits(&mp, PK, hb, budget)) memplan_recompute(&mp, PK);
            memplan_print(&mp, cfg, PK, stdout);
            char b[32];
            printf("# fits %g GiB per rank (runtime.memory_gib): %s (%s %s)\n", gib,
                   memplan_fits(&mp, PK, hb, budget) ? "yes" : "no",
                   PK->dev->host_access ? "host" : "device",
                   zrt_fmt_bytes(PK->dev->host_access ? mp.host : mp.device, b, sizeof b));
        }
        plan_free(&r->comm_plan);
        return 1;
    }
    return 0;
}

/* MFU's denominator, all ranks together (docs/RUNTIME.md "Logs"). On a
 * CUDA device: the card's dense spec peak for the compute dtype
 * (runtime/peaks.c), once per device however many ranks share it; the
 * matmul probe through the kernel table runs anyway, is printed as a probe,
 * and stands in when a rank's card is not in the table. On the host: the
 * SGEMM peak measured on every rank at once, summed (a shared machine has
 * no spec peak). */
static void mfu_peak(TrainRun* r, MPI_Comm node) {
    const ZrtKernels* K = r->K;
    const int cuda = K->dev->kind == ZDEV_KIND_CUDA;
    const double probe = K->dev->host_access ? zrt_sgemm_peak(0.3) : backend_matmul_peak(K);
    const ZrtCardPeak* card = cuda ? zrt_card_peak(K->dev->label) : NULL;
    const double spec = zrt_card_peak_flops(card, r->cfg.runtime.compute);
    int sharing = 1; /* the ranks of this host on this device */
    if (cuda) {
        MPI_Comm dc;
        MPI_Comm_split(node, K->dev->ordinal, 0, &dc);
        MPI_Comm_size(dc, &sharing);
        MPI_Comm_free(&dc);
    }
    double mine[3] = {probe, spec / sharing, 1.0 / sharing}, all[3];
    int known = spec > 0, all_known = 0;
    MPI_Allreduce(mine, all, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&known, &all_known, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    r->probe = all[0];
    r->n_devices = (int)lround(all[2]);
    r->card = all_known ? card : NULL;
    r->peak = all_known ? all[1] : all[0];
    r->peak_source = all_known ? "spec" : K->dev->host_access ? "sgemm" : "probe";
}

/* FLOP/s for a header: TFLOP/s from 1e12 on. */
static const char* fmt_flops(double f, char* buf, size_t n) {
    if (f >= 1e12) snprintf(buf, n, "%.1f TFLOP/s", f / 1e12);
    else snprintf(buf, n, "%.2f GFLOP/s", f / 1e9);
    return buf;
}

/* The run header's line on what MFU is against. */
static void print_mfu_peak(const TrainRun* r) {
    const ZrtKernels* K = r->K;
    char a[32];
    if (r->card) {
        printf("# MFU against %s's %s dense peak %.6g TFLOP/s (spec: %s, runtime/peaks.c)",
               r->card->name, r->cfg.runtime.compute,
               zrt_card_peak_flops(r->card, r->cfg.runtime.compute) / 1e12, r->card->source);
        if (r->n_devices > 1) printf(" x %d devices = %.6g TFLOP/s", r->n_devices, r->peak / 1e12);
        printf("; %s matmul probe through the kernel table: %s (all ranks), a probe, not the spec\n",
               r->cfg.runtime.compute, fmt_flops(r->probe, a, sizeof a));
    } else if (!K->dev->host_access) {
        /* this rank's card may be in the table and another rank's not */
        char which[sizeof K->dev->label + 2] = "another rank's device";
        if (!zrt_card_peak_flops(zrt_card_peak(K->dev->label), r->cfg.runtime.compute))
            snprintf(which, sizeof which, "\"%s\"", K->dev->label);
        printf("# MFU against the %s matmul probe through the kernel table: %s (all ranks), a "
               "probe, not the spec: runtime/peaks.c has no %s peak for %s\n",
               r->cfg.runtime.compute, fmt_flops(r->peak, a, sizeof a), r->cfg.runtime.compute, which);
    } else {
        printf("# MFU against the host's SGEMM peak %s (all ranks), measured at start-up: a "
               "shared machine has no spec peak\n",
               fmt_flops(r->peak, a, sizeof a));
    }
}

/* The kernel table (runtime.device), MFU's peak and the memory plan,
 * refused when it does not fit. */
static void choose_device(TrainRun* r) {
    TrainConfig* cfg = &r->cfg;
    MPI_Comm node; /* the ranks on this host: device binding and memory */
    int local_rank = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local_rank);
    const ZrtKernels* K = r->K = select_backend(cfg, local_rank);
    if (r->rank == 0 && !K->dev->host_access)
        printf("# device: %s%s%s; the model, FSDP's shards, the optimizer and the collectives' "
               "buffers live there\n",
               K->name, K->dev->kind == ZDEV_KIND_CUDA ? ", " : "",
               K->dev->kind == ZDEV_KIND_CUDA ? K->dev->label : "");
    if (r->rank == 0 && strcmp(cfg->runtime.compute, "fp32"))
        printf("# compute: %s (kernel table %s): the linear layers multiply bf16 operands, fp32 "
               "accumulation; attention, norms and the loss stay fp32\n",
               cfg->runtime.compute, K->name);
    /* ---- MFU's peak, before the memory plan, whose measured base then
     * holds OpenBLAS's work buffers (the host's SGEMM probe) ---- */
    mfu_peak(r, node);
    check_memory(cfg, K, node, &r->mplan);
    MPI_Comm_free(&node);
}

static void open_data(TrainRun* r) {
    TrainConfig* cfg = &r->cfg;
    const TrainArgs* args = &r->args;
    TrainState* st = &r->st;
    Dataset* ds = &r->ds;
    const LlamaConfig* mc = &cfg->model;
    const int B = cfg->data.batch_size, T = cfg->data.seq_len;
    char err[1024];
    const double t_data = zrt_now();
    /* A BPE is trained once, by rank 0, and cached next to the data; the
     * other ranks wait and read the cache instead of all training at once. */
    const int bpe = !strcmp(cfg->data.tokenizer, "bpe");
    int data_rc = 0;
    if (!bpe || r->rank == 0)
        data_rc = data_open(ds, cfg->data.path, cfg->data.tokenizer, cfg->data.bpe_merges,
                            mc->vocab_size, T, cfg->data.val_fraction, (uint64_t)cfg->data.seed, err,
                            sizeof err);
    if (bpe) {
        MPI_Bcast(&data_rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (r->rank != 0 && data_rc == 0) {
            /* Rank 0 succeeded, so this is a local failure: abort everyone. */
            trainCheck(!data_open(ds, cfg->data.path, cfg->data.tokenizer, cfg->data.bpe_merges,
                                  mc->vocab_size, T, cfg->data.val_fraction,
                                  (uint64_t)cfg->data.seed, err, sizeof err),
                       "%s", err);
        }
    }
    if (data_rc) train_config_fail(err); /* every rank saw it (or rank 0 did and said so) */
    ds->rank_blocks = cfg->train.rank_invariant; /* a micro-batch's samples at any rank count */
    const uint64_t data_fnv = data_hash(ds);
    if (args->resume && st->data_hash && st->data_hash != data_fnv) {
        char msg[2000];
        snprintf(msg, sizeof msg,
                 "--resume %s: the training data is not the checkpoint's: %s with the %s "
                 "tokenizer hashes to %016" PRIx64 ", the checkpoint's to %016" PRIx64
                 " (the file changed, or another one)",
                 PRINTABLE(args->resume), PRINTABLE(cfg->data.path), PRINTABLE(cfg->data.tokenizer),
                 data_fnv, st->data_hash);
        train_agree_or_fail(1, msg);
    }
    st->data_hash = data_fnv;
    if (r->rank == 0)
        printf("# data: %s, %s tokenizer%s, %zu tokens (%zu train, %zu validation), %zu train "
               "sequences, %.1f s\n",
               PRINTABLE(cfg->data.path), PRINTABLE(cfg->data.tokenizer),
               strcmp(cfg->data.tokenizer, "bpe") ? "" : ds->bpe_cached ? " (cached)" : " (trained)",
               ds->n_tokens, ds->n_train, ds->n_tokens - ds->n_train, ds->n_windows[0],
               zrt_now() - t_data);
    const long long val_windows = (long long)cfg->data.val_batches * B * r->nranks;
    if (r->rank == 0 && cfg->data.val_every > 0 && val_windows > (long long)ds->n_windows[1])
        printf("# note: a validation pass reads %lld windows (val_batches %d x batch %d x %d "
               "ranks) but the validation split has %zu: windows repeat (weighted more)\n",
               val_windows, cfg->data.val_batches, B, r->nranks, ds->n_windows[1]);
}

/* The model's shards (FSDP), activations and scheduler; the weights from
 * Hugging Face or the checkpoint; the logs' files; what the run will do. */
static void build_model(TrainRun* r, HfSource** hf_src) {
    TrainConfig* cfg = &r->cfg;
    const TrainArgs* args = &r->args;
    CheckpointInfo* ck = &r->ck;
    TrainState* st = &r->st;
    Fsdp* fsdp = &r->fsdp;
    const ZrtKernels* K = r->K;
    const LlamaConfig* mc = &cfg->model;
    const int B = cfg->data.batch_size, T = cfg->data.seq_len;
    char err[1024], herr[4096];
    fsdp_init(fsdp, cfg, K, &r->comm_plan);
    const LlamaMemOpts mopts = train_mem_opts(cfg, &r->mplan);
    LlamaActs* acts = r->acts = llama_acts_alloc_opts(mc, B, T, K, &mopts);
    trainCheck(acts, "cannot allocate %zu bytes of activations for B=%d T=%d on %s",
               llama_acts_bytes_opts(mc, B, T, K, &mopts), B, T, K->name);
    Sched* sched = r->sched = sched_create(fsdp, cfg, args->trace != NULL);
    sched_set_backend(sched, K);
    r->hooks = sched_hooks(sched);
    r->tok = zrt_malloc((size_t)B * T * sizeof(int), "tokens");
    r->tgt = zrt_malloc((size_t)B * T * sizeof(int), "targets");
    r->batch_ring = zdev_host_alloc(K->dev, (size_t)cfg->data.grad_accum * 2 * B * T * sizeof(int));
    trainCheck(r->batch_ring, "out of pinned host memory for the micro-batches' tokens");
    /* the micro-batches' summed losses and the gradient's sums of squares
     * stay on the device until the optimizer needs the norm: one copy back
     * per step (llama_acts_set_loss_sink, fsdp_grad_sumsq) */
    const size_t n_scalars = (size_t)cfg->data.grad_accum + (size_t)fsdp->n_units;
    r->step_scalars = zdev_alloc(K->dev, n_scalars * sizeof(double));
    r->step_scalars_host = zrt_malloc(n_scalars * sizeof(double), "step scalars");
    r->loss_counts = zrt_malloc((size_t)cfg->data.grad_accum * sizeof(int), "loss counts");
    trainCheck(r->step_scalars, "out of %s memory for the step's losses and norm", K->name);
    zdevCheck(zdev_memset_async(K->dev, r->step_scalars, 0, n_scalars * sizeof(double), NULL));
    if (*hf_src) {
        train_agree_or_fail(hf_load(fsdp, *hf_src, herr, sizeof herr) != 0, herr);
        if (r->rank == 0)
            printf("# weights: %s (%s), fresh optimizer state\n", PRINTABLE(cfg->init_from),
                   hf_source_summary(*hf_src));
        hf_close(*hf_src);
        *hf_src = NULL;
    }

    if (args->resume) {
        train_agree_or_fail(checkpoint_load(fsdp, ck, err, sizeof err), err);
        if (r->rank == 0)
            printf("# resumed from %s at step %d (%lld samples consumed)\n", PRINTABLE(ck->dir),
                   st->step,
                   st->samples);
    }
    r->windows = zrt_malloc((size_t)B * sizeof(long long), "window indices");
    if (args->trace_data && r->rank == 0) {
        r->trace_data = fopen(args->trace_data, "w");
        trainCheck(r->trace_data, "cannot open the data trace %s: %s", PRINTABLE(args->trace_data),
                   strerror(errno));
    }

    if (r->rank == 0 && cfg->log.json[0]) {
        r->json = fopen(cfg->log.json, "w");
        trainCheck(r->json, "cannot open the JSON log %s: %s", PRINTABLE(cfg->log.json),
                   strerror(errno));
    }
    if (r->rank == 0) {
        print_mfu_peak(r);
        printf("# strategies: allgather %s, reducescatter %s",
               zipcclStrategyName(fsdp->units[1 % fsdp->n_units].ag_cfg.strategy),
               zipcclStrategyName(fsdp->units[1 % fsdp->n_units].rs_cfg.strategy));
        if (fsdp->ep > 1)
            printf(", alltoall %s",
                   zipcclStrategyName(config_strategy_for(cfg, zipcclCollAlltoAllv, "layers.0")));
        printf("; param %s, reduce %s, codec %s\n", zipcclTypeName(cfg->comm.param_dtype),
               zipcclTypeName(cfg->comm.reduce_dtype), config_codec_name(cfg->comm.codec));
        char pk[32];
        char xc[64] = "";
        if (fsdp->ep > 1)
            snprintf(xc, sizeof xc, ", expert exchange in %d chunk%s", cfg->moe.overlap_chunks,
                     cfg->moe.overlap_chunks > 1 ? "s" : "");
        printf("# schedule: overlap %s, prefetch depth %d, in-flight bound %s, reshard after "
               "forward %s%s; peak of gathered units + full gradients %s\n",
               cfg->parallel.overlap ? "on" : "off",
               cfg->parallel.overlap && cfg->parallel.prefetch ? cfg->parallel.prefetch_depth : 0,
               cfg->parallel.max_inflight_bytes
                   ? zrt_fmt_bytes((double)cfg->parallel.max_inflight_bytes, pk, sizeof pk)
                   : "none",
               cfg->parallel.reshard_after_forward ? "yes" : "no", xc,
               zrt_fmt_bytes(sched_peak_bytes(sched), pk, sizeof pk));
        plan_print(sched_plan(sched), stdout);
        fflush(stdout);
    }

    /* MoE statistics: pairs per (MoE block, expert) and the drops, summed
     * over the step's micro-batches and ranks; per block min / max / MaxVio. */
    r->moe = mc->n_experts > 0;
    r->n_moe = 0;
    for (int l = 0; l < mc->n_layers; l++) r->n_moe += llama_layer_is_moe(mc, l);
    r->expert_load =
        r->moe ? zrt_calloc((size_t)(r->n_moe + 1) * mc->n_experts, sizeof(long long), "expert load")
            : NULL;
    r->aux_micro = zrt_calloc((size_t)cfg->data.grad_accum, sizeof(double), "aux losses");
    r->block_load =
        r->moe ? zrt_calloc((size_t)r->n_moe, sizeof *r->block_load, "expert load") : NULL;
    if (args->dump_dir)
        r->dump_logits = zrt_malloc((size_t)B * T * mc->vocab_size * sizeof(float), "dump logits");
}

int train_setup(TrainRun* r, int argc, char** argv) {
    MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r->nranks);
    g_rank = r->rank;
    g_nranks = r->nranks;
    parse_args(argc, argv, &r->args);
    static DataMeta dmeta;
    read_config(r, &dmeta);
    read_resume(r);
    /* The weights of model.init_from, checked against the model (every
     * tensor there, shapes, dtypes, nothing left over) before anything is
     * built; read after the shards exist. A resumed run has its own. */
    HfSource* hf = NULL;
    if (r->cfg.init_from[0] && !r->args.resume) {
        char herr[4096];
        train_agree_or_fail(
            hf_open(r->cfg.init_from, &r->cfg.model, &hf, herr, sizeof herr) != 0, herr);
    }
    print_config(r, &dmeta);
    if (plan_or_refuse(r)) {
        if (hf) hf_close(hf);
        return 1;
    }
    choose_device(r);
    open_data(r);
    build_model(r, &hf);
    r->first_step = r->st.step;
    r->t_start = zrt_now();
    return 0;
}

void train_teardown(TrainRun* r) {
    if (r->trace_data) fclose(r->trace_data);
    if (r->json) fclose(r->json);
    free(r->windows);
    free(r->dump_logits);
    free(r->expert_load);
    free(r->aux_micro);
    free(r->block_load);
    free(r->tok);
    free(r->tgt);
    if (r->K) zdev_free(r->K->dev, r->step_scalars);
    if (r->K) zdev_host_free(r->K->dev, r->batch_ring);
    free(r->loss_counts);
    free(r->step_scalars_host);
    llama_acts_free(r->acts);
    sched_destroy(r->sched);
    fsdp_free(&r->fsdp);
    data_close(&r->ds);
}
