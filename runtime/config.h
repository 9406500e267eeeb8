/*
 * config.h — the trainer's configuration: one struct, read from YAML.
 *
 * A config file has the sections model, data, train, optimizer, schedule,
 * parallelism, comm, logging, checkpoint and runtime (see configs/llama-tiny.yaml and
 * docs/RUNTIME.md). Every key is described once, in a table in config.c, with
 * its type and allowed range; the YAML reader and the command line's
 * `--set dotted.key=value` both go through that table, so both refuse an
 * unknown key (suggesting the nearest known one), a wrong type or an
 * out-of-range value with a message naming where the value came from: the
 * file and line, or the `--set key=value` itself. The same table says what a
 * change of each key means when a run resumes from a checkpoint
 * (config_resume_check).
 *
 * Left out: includes, anchors/merges beyond what libyaml resolves itself,
 * environment interpolation.
 */
#ifndef RUNTIME_CONFIG_H
#define RUNTIME_CONFIG_H
#include <stddef.h>
#include <stdio.h>

#include "llama.h"
#include "zipccl.h"

#define CFG_MAX_OVERRIDES 32
#define CFG_PATH_MAX 512
#define CFG_MAX_KEYS 128 /* room for the key table of config.c */

/* A per-layer strategy override: units whose name matches `pattern`
 * (fnmatch; unit names are "outer", "layers.0", "layers.1", ...) use
 * `strategy` for the collective kinds selected by `kind`. */
typedef struct {
    char pattern[64];
    int kind; /* -1: every kind, else zipcclCollAllGather / zipcclCollReduceScatter /
               * zipcclCollAlltoAllv (the expert dispatch, kind "alltoall") */
    zipcclStrategy_t strategy; /* Default: the rule leaves the strategy alone */
    zipcclCodec_t codec;       /* Default: the rule leaves the codec alone    */
    int algo;                  /* -1: the rule leaves the algorithm alone, else a
                                * zipcclAlgo_t (zipcclAlgoDefault: the collective's own) */
    int line;                  /* where the rule is in the config file (0: unknown) */
} CommOverride;

typedef struct {
    LlamaConfig model;
    /* model.init_from: a Hugging Face model directory (runtime/hf.h); the
     * model keys then come from its config.json, the weights from its
     * safetensors. "" = initialise from train.seed. */
    char init_from[CFG_PATH_MAX];
    struct {
        char path[CFG_PATH_MAX]; /* text file, or .bin of uint16 / int32 tokens */
        char tokenizer[16];      /* "byte" | "bpe" (text), "u16" / "i32" (pre-tokenized .bin) */
        int bpe_merges;          /* tokenizer bpe: merges, vocabulary = 256 + merges */
        int seq_len;             /* T */
        int batch_size;          /* B: sequences per rank per micro-batch */
        int grad_accum;          /* micro-batches per optimizer step */
        double val_fraction;     /* tail of the token stream kept for validation */
        int val_every;           /* steps between validation passes (0: never) */
        int val_batches;         /* micro-batches per validation pass */
        long long seed;          /* data order */
    } data;
    struct {
        int steps;               /* optimizer steps to run (end step) */
        long long seed;          /* parameter init */
        char recompute[8];       /* "auto" | "none" | "full": a block keeps only its
                                  * input and its backward runs its forward again
                                  * (llama.h); auto: full when the memory plan does
                                  * not fit without it (memplan.h) */
        int logits_rows;         /* output-layer rows at once, 0: by size (llama.h) */
        int rank_invariant;      /* the same bits at any rank count: each rank's
                                  * micro-batch is one gradient group, groups
                                  * summed in one binary tree (docs/RUNTIME.md
                                  * "Rank-invariant training") */
        int grad_groups;         /* micro-batches of the global batch, G = ranks x
                                  * grad_accum; > 0: fixed, and grad_accum
                                  * follows the rank count (G / ranks) */
    } train;
    struct {
        double lr, min_lr, beta1, beta2, eps, weight_decay, grad_clip;
    } optim;
    struct {
        int warmup_steps;
        int total_steps; /* cosine length; 0 means train.steps */
    } schedule;
    struct {
        int fsdp;                  /* must be true: the only mode */
        int reshard_after_forward; /* free gathered units after forward */
        int prefetch;              /* false: prefetch_depth 0 (the older switch) */
        int prefetch_depth;        /* all-gathers issued ahead of the unit computing */
        long long max_inflight_bytes; /* gathered parameters + full gradients alive at
                                       * once (0: no bound) */
        int max_reduces_in_flight; /* reduce-scatters alive at once, oldest retired
                                    * first (0: no bound, retired at the step's end) */
        int overlap;               /* false: every collective waited at issue */
        int ep;                    /* expert parallelism: ranks an expert group spans */
    } parallel;
    struct {
        int overlap_chunks;        /* chunks of each MoE block's expert exchange (1: whole) */
        char aux_loss_scope[8];    /* "global": the load-balancing loss of the micro-batch
                                    * of all ranks; "rank": each rank's own, meaned */
    } moe;
    struct {
        zipcclStrategy_t strategy;                 /* every collective */
        zipcclStrategy_t allgather, reducescatter; /* Default: follow strategy */
        zipcclStrategy_t alltoall; /* the MoE dispatch/combine; Default: follow strategy */
        zipcclCodec_t codec;
        zipcclAlgo_t algo;         /* Default: each collective's own design */
        zipcclDataType_t param_dtype, reduce_dtype;
        zipcclDataType_t alltoall_dtype; /* what the expert exchange moves: fp32 | bf16 */
        int n_overrides;
        CommOverride overrides[CFG_MAX_OVERRIDES];
        int strategy_forced; /* set by --set comm.strategy: wins over all the rest */
    } comm;
    struct {
        int every;              /* print a step line every N steps */
        char json[CFG_PATH_MAX]; /* JSON-lines log ("" = none) */
    } log;
    struct {
        char dir[CFG_PATH_MAX]; /* "" = no checkpoints */
        int every;              /* steps between saves (0: only at the end) */
        int keep;               /* newest checkpoints kept (0: all) */
        char allow_changes[512]; /* keys --resume may change: "a.b,c.d" */
        int hf;                  /* also write each checkpoint as a Hugging Face
                                  * directory, DIR/step_N/hf (runtime/hf.h) */
        zipcclDataType_t hf_dtype; /* its tensors: fp32, bf16 or fp16 */
        long long hf_shard_bytes;  /* a file holds at most this (one bigger tensor
                                    * has a file of its own), as HF's max_shard_size */
    } ckpt;
    struct {
        char device[16]; /* "cpu" | "cuda" | "cpu_guarded" (the tests' guarded CPU
                          * device, kernels.h): where the model computes */
        char compute[8]; /* key model.compute: "fp32" | "bf16" (the linear
                          * layers' products in bf16, fp32 accumulation) */
        char net[8];     /* key comm.net: "mpi" | "nccl": how a device's
                          * collective buffers travel between the ranks */
        double memory_gib; /* memory per rank the plan must fit, GiB (the
                            * device's with a device); 0: what the machine has
                            * (memplan.h; --plan: 80) */
    } runtime;
    /* The cluster `build/train CONFIG --project CLUSTER.yaml` projects the
     * run onto (runtime/project.h, docs/SCALE.md); a training run ignores
     * it. Link rates are per GPU (a node's NICs shared by its GPUs). */
    struct {
        int gpus_min, gpus_max;  /* GPU counts projected: powers of two between */
        int gpus_per_node;
        double intra_gbs;        /* bytes/s per GPU inside a node, GB/s (NVLink bus bandwidth) */
        double intra_us;         /* latency per message inside a node, us */
        double inter_gbit;       /* one NIC's line rate, Gbit/s */
        int nics_per_node;
        double inter_us;         /* latency per message between nodes, us */
        double peak_tflops;      /* a GPU's dense peak for model.compute */
        double mem_gbs;          /* a GPU's memory bandwidth, GB/s (the optimizer, reductions) */
        double mfu;              /* the model's compute at this fraction of it */
        double codec_enc_gbs, codec_dec_gbs; /* the codec's throughput, GB/s of raw bytes */
        double codec_call_us;    /* fixed cost per encode or decode call, us */
        int codec_pipelined;     /* 1: codec and wire overlap in pieces; 0: one after the other */
        double ratio_params, ratio_grads, ratio_a2a; /* raw/wire; 0: by dtype (project.c) */
        zipcclStrategy_t baseline; /* the uncompressed way compared against: native
                                    * (NCCL's or MPI's own) or raw (ZipCCL's designs) */
        double contention;       /* compute slowed by this fraction while a collective runs */
        double comm_contention;  /* a collective slowed by this fraction while compute runs */
        double maxvio;           /* MoE: the busiest rank's experts above the mean load */
    } cluster;
    char source[CFG_PATH_MAX]; /* the file it came from */
    /* Where each key's value came from, by its place in config.c's table:
     * `set` the --set assignment, else `ext` another file that supplied it
     * (config_set_external: "DIR/config.json: 'hidden_size'"), else `line`
     * of `source` (0: a default). */
    struct {
        int line;
        char set[128];
        char ext[CFG_PATH_MAX + 64];
    } origin[CFG_MAX_KEYS];
} TrainConfig;

/* Defaults for every key (a valid tiny model). */
void config_defaults(TrainConfig* cfg);

/* Read `path` over the current values. Returns 0, or -1 with a message
 * "FILE:LINE: key 'a.b': what is wrong" in err. */
int config_load(TrainConfig* cfg, const char* path, char* err, size_t errlen);

/* Apply "dotted.key=value" (command-line --set) with the same checks;
 * errors name the assignment: "--set data.seq_len=abc: key ...". */
int config_set(TrainConfig* cfg, const char* assignment, char* err, size_t errlen);

/* `build/train CONFIG --project CLUSTER.yaml`: read the cluster.* keys of
 * path over c's, each remembered as given by "PATH:LINE" (config_where);
 * any other key in the file is refused naming it. Returns 0 or -1 with err. */
int config_load_cluster(TrainConfig* c, const char* path, char* err, size_t errlen);

/* A value for `key` from another file (`where` names it and the field,
 * e.g. "runs/hf/config.json: 'hidden_size'", printable: a path in it
 * through zrt_printable, log.h): set it, unless the YAML or a
 * --set gave the key a different value, which is an error naming both
 * places (a value that agrees is fine). Later messages about the key name
 * `where`. Returns 0, or -1 with the message in err. */
int config_set_external(TrainConfig* cfg, const char* key, const char* value, const char* where,
                        char* err, size_t errlen);
/* 1 if the YAML file or a --set gave `key` (not a default, not another file). */
int config_given(const TrainConfig* cfg, const char* key);

/* Cross-field checks (heads divide dim, model shape, ...), after all sets;
 * an error names where the offending value came from. */
int config_validate(const TrainConfig* cfg, char* err, size_t errlen);

/* Where a value came from, for messages: key "data.seq_len" gives
 * "--set data.seq_len=256", "FILE:LINE" or "FILE" (a default); sections
 * "optimizer." or "optimizer.,schedule." give "FILE" plus their --set
 * assignments ("FILE with --set optimizer.lr=2"). */
const char* config_where(const TrainConfig* cfg, const char* key, char* buf, size_t n);

/* Before resuming: compare the run's config `now` (at nranks ranks) with
 * the one the checkpoint was saved with (`saved`, at saved_nranks). Changes
 * of the model, the data or the seeds are refused; changes a user may mean
 * (global batch, schedule, optimizer, communication dtypes) are refused
 * unless named in now->ckpt.allow_changes; everything else (steps, logging,
 * strategies, ...) is free. Returns 0 and writes a line per difference to
 * notes ("# warning: ..." for the allowed ones, "# resume: ..." for the
 * rest), or -1 with every refused key, both values and where the new one
 * came from in err. */
int config_resume_check(const TrainConfig* saved, int saved_nranks, const TrainConfig* now,
                        int nranks, char* notes, size_t notes_len, char* err, size_t errlen);

/* The effective strategy for one collective kind on one unit name. */
zipcclStrategy_t config_strategy_for(const TrainConfig* cfg, zipcclCollKind_t kind,
                                     const char* unit_name);

/* Print the effective config as YAML (it reads back with config_load, and
 * config_validate accepts what it read back when it accepted cfg): strings
 * as YAML double-quoted scalars that read back to the same bytes (a lone
 * byte of one that is not UTF-8, which YAML cannot hold, as \xNN); a dense
 * model's printout leaves out the mixture-of-experts keys, which a dense
 * model may not be given. */
void config_print(const TrainConfig* cfg, FILE* f);

const char* config_codec_name(zipcclCodec_t c);

#endif
