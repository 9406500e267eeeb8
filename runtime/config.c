/*
 * config.c — YAML config reader (libyaml document API) and --set overrides.
 *
 * Every scalar key lives in one table (kKeys) with its type, its place in
 * TrainConfig and its range. The YAML walker flattens nested mappings into
 * dotted keys ("model.dim") and hands each scalar to the same setter that
 * `--set` uses, so both paths refuse the same things with the same words;
 * the setter records where each value came from (file line or --set), so a
 * later cross-field check blames the right place. Unknown keys get the
 * nearest known key suggested (edit distance). The table also classifies
 * every key for resuming (config_resume_check): may it change between the
 * checkpoint's run and the resumed one? The non-scalar keys, comm.overrides
 * (a list of mappings) and checkpoint.allow_changes (a list of names), are
 * read by hand.
 *
 * What the file or the command line said (keys, values, paths, --set
 * assignments) is quoted through zrt_printable (log.h); a `where` string
 * ("FILE:LINE", "--set a=b", "DIR/config.json: 'field'") is made printable
 * when it is composed, so messages print it as it is.
 *
 * Left out: anchors and merge keys beyond libyaml's own resolution.
 */
#include "config.h"
#include "kernels.h" /* ZRT_SUMSQ_BLOCK */
#include "log.h"

#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

/* K_LAYERS: a set of block indices (< 256) held as a bit mask (uint64_t[4]);
 * written as a YAML list [1, 3] or, with --set, "1,3" ("" for none). */
typedef enum {
    K_INT, K_I64, K_FLOAT, K_BOOL, K_STR, K_STRATEGY, K_CODEC, K_ALGO, K_DTYPE, K_LAYERS
} KeyType;

/* What a change of the key means when a run resumes from a checkpoint. */
typedef enum {
    R_FREE,  /* nothing the steps to come compute: where to stop, logging,
              * checkpoint cadence, lossless strategy choices. Announced. */
    R_ASK,   /* training a user may mean to change (global batch, schedule,
              * optimizer, communication dtypes): refused unless named in
              * checkpoint.allow_changes, then announced as a warning */
    R_NEVER, /* the model, the data and its order, the seeds: another run,
              * not the continuation of the checkpoint's */
} ResumeClass;

typedef struct {
    const char* name;
    KeyType type;
    size_t offset;
    double lo, hi;     /* numeric range, inclusive */
    size_t size;       /* K_STR: buffer size */
    const char* help;  /* shown with range errors */
    ResumeClass resume;
} KeyDesc;

#define OFF(field) offsetof(TrainConfig, field)
#define SZ(field) sizeof(((TrainConfig*)0)->field)
static const KeyDesc kKeys[] = {
    {"model.vocab_size", K_INT, OFF(model.vocab_size), 2, 1 << 24, 0,
     "tokens in the vocabulary", R_NEVER},
    {"model.dim", K_INT, OFF(model.dim), 1, 65536, 0, "model width C", R_NEVER},
    {"model.n_layers", K_INT, OFF(model.n_layers), 1, 1024, 0, "transformer blocks", R_NEVER},
    {"model.n_heads", K_INT, OFF(model.n_heads), 1, 1024, 0, "attention heads", R_NEVER},
    {"model.n_kv_heads", K_INT, OFF(model.n_kv_heads), 1, 1024, 0, "key/value heads", R_NEVER},
    {"model.ffn_hidden", K_INT, OFF(model.ffn_hidden), 1, 1 << 20, 0,
     "SwiGLU hidden width", R_NEVER},
    {"model.max_seq_len", K_INT, OFF(model.max_seq_len), 1, 1 << 20, 0,
     "longest sequence", R_NEVER},
    {"model.rope_theta", K_FLOAT, OFF(model.rope_theta), 1, 1e12, 0, "RoPE base", R_NEVER},
    {"model.norm_eps", K_FLOAT, OFF(model.norm_eps), 1e-12, 1, 0, "RMSNorm epsilon", R_NEVER},
    {"model.tie_embeddings", K_BOOL, OFF(model.tie_embeddings), 0, 1, 0, "", R_NEVER},
    {"model.head_dim", K_INT, OFF(model.head_dim), 0, 65536, 0, "0: dim / n_heads", R_NEVER},
    {"model.qk_norm", K_BOOL, OFF(model.qk_norm), 0, 1, 0, "RMSNorm on q and k heads (Qwen3)",
     R_NEVER},
    {"model.n_experts", K_INT, OFF(model.n_experts), 0, 65536, 0, "0: a dense model", R_NEVER},
    {"model.n_experts_per_tok", K_INT, OFF(model.n_experts_per_tok), 0, 65536, 0, "top-k",
     R_NEVER},
    {"model.moe_ffn_hidden", K_INT, OFF(model.moe_ffn_hidden), 0, 1 << 20, 0,
     "expert SwiGLU width", R_NEVER},
    {"model.decoder_sparse_step", K_INT, OFF(model.decoder_sparse_step), 1, 1024, 0,
     "every n-th block is MoE", R_NEVER},
    {"model.mlp_only_layers", K_LAYERS, OFF(model.mlp_only_layers), 0, 255, 0,
     "blocks that keep a dense MLP", R_NEVER},
    {"model.norm_topk_prob", K_BOOL, OFF(model.norm_topk_prob), 0, 1, 0,
     "divide the k routing weights by their sum", R_NEVER},
    {"model.router_aux_loss_coef", K_FLOAT, OFF(model.router_aux_loss_coef), 0, 1000, 0,
     "weight of the load-balancing loss", R_ASK},
    {"model.capacity_factor", K_FLOAT, OFF(model.capacity_factor), 0, 1e6, 0,
     "0: dropless; else pairs per expert <= ceil(cf * tokens * k / experts)", R_ASK},
    {"model.init_from", K_STR, OFF(init_from), 0, 0, SZ(init_from),
     "Hugging Face model directory: config.json gives the model keys, its safetensors the "
     "weights",
     R_FREE},
    {"data.path", K_STR, OFF(data.path), 0, 0, SZ(data.path), "text or .bin token file", R_FREE},
    {"data.tokenizer", K_STR, OFF(data.tokenizer), 0, 0, SZ(data.tokenizer),
     "byte|bpe|u16|i32", R_NEVER},
    {"data.bpe_merges", K_INT, OFF(data.bpe_merges), 1, 65536, 0,
     "BPE merges (tokenizer bpe)", R_NEVER},
    {"data.seq_len", K_INT, OFF(data.seq_len), 1, 1 << 20, 0, "tokens per sequence", R_NEVER},
    {"data.batch_size", K_INT, OFF(data.batch_size), 1, 1 << 16, 0, "sequences per rank", R_ASK},
    {"data.grad_accum", K_INT, OFF(data.grad_accum), 1, 1 << 16, 0,
     "micro-batches per step", R_ASK},
    {"data.val_fraction", K_FLOAT, OFF(data.val_fraction), 0, 0.5, 0, "validation share", R_NEVER},
    {"data.val_every", K_INT, OFF(data.val_every), 0, INT_MAX, 0, "0 disables validation", R_FREE},
    {"data.val_batches", K_INT, OFF(data.val_batches), 1, 1 << 16, 0, "", R_FREE},
    {"data.seed", K_I64, OFF(data.seed), 0, 9e18, 0, "", R_NEVER},
    {"train.steps", K_INT, OFF(train.steps), 1, INT_MAX, 0, "optimizer steps", R_FREE},
    {"train.seed", K_I64, OFF(train.seed), 0, 9e18, 0, "parameter init seed", R_NEVER},
    {"train.recompute", K_STR, OFF(train.recompute), 0, 0, SZ(train.recompute),
     "auto|none|full: full keeps each block's input only and recomputes its forward in the "
     "backward (same bits); auto: full only when the memory plan does not fit without it",
     R_FREE},
    {"train.logits_rows", K_INT, OFF(train.logits_rows), 0, INT_MAX, 0,
     "token rows of the output layer at once, 0: as many as 128 MiB of logits hold", R_FREE},
    {"train.rank_invariant", K_BOOL, OFF(train.rank_invariant), 0, 1, 0,
     "the same parameters bit for bit at any rank count (dense models; ranks and "
     "grad_accum powers of two): gradients summed in one fixed binary tree over the global "
     "batch's micro-batches",
     R_ASK},
    {"train.grad_groups", K_INT, OFF(train.grad_groups), 0, 1 << 16, 0,
     "micro-batches per global batch; > 0: data.grad_accum = grad_groups / ranks, so one "
     "config runs alike on any rank count that divides it (0: ranks x data.grad_accum)",
     R_FREE},
    {"optimizer.lr", K_FLOAT, OFF(optim.lr), 0, 10, 0, "peak learning rate", R_ASK},
    {"optimizer.min_lr", K_FLOAT, OFF(optim.min_lr), 0, 10, 0,
     "lr at the end of the cosine", R_ASK},
    {"optimizer.beta1", K_FLOAT, OFF(optim.beta1), 0, 0.999999, 0, "", R_ASK},
    {"optimizer.beta2", K_FLOAT, OFF(optim.beta2), 0, 0.99999999, 0, "", R_ASK},
    {"optimizer.eps", K_FLOAT, OFF(optim.eps), 0, 1, 0, "", R_ASK},
    {"optimizer.weight_decay", K_FLOAT, OFF(optim.weight_decay), 0, 10, 0, "", R_ASK},
    {"optimizer.grad_clip", K_FLOAT, OFF(optim.grad_clip), 0, 1e9, 0, "0 disables clipping", R_ASK},
    {"schedule.warmup_steps", K_INT, OFF(schedule.warmup_steps), 0, INT_MAX, 0, "", R_ASK},
    {"schedule.total_steps", K_INT, OFF(schedule.total_steps), 0, INT_MAX, 0,
     "cosine length, 0 = train.steps", R_ASK},
    {"parallelism.fsdp", K_BOOL, OFF(parallel.fsdp), 1, 1, 0, "FSDP is the only mode", R_FREE},
    {"parallelism.reshard_after_forward", K_BOOL, OFF(parallel.reshard_after_forward), 0, 1, 0,
     "", R_FREE},
    {"parallelism.prefetch", K_BOOL, OFF(parallel.prefetch), 0, 1, 0,
     "false: prefetch_depth 0", R_FREE},
    {"parallelism.prefetch_depth", K_INT, OFF(parallel.prefetch_depth), 0, 64, 0,
     "all-gathers issued ahead of the unit computing", R_FREE},
    {"parallelism.max_inflight_bytes", K_I64, OFF(parallel.max_inflight_bytes), 0, 9e18, 0,
     "gathered parameters + full gradients alive at once, 0: no bound", R_FREE},
    {"parallelism.max_reduces_in_flight", K_INT, OFF(parallel.max_reduces_in_flight), 0, 1024, 0,
     "full gradients being reduce-scattered at once (oldest retired first), 0: no bound",
     R_FREE},
    {"parallelism.overlap", K_BOOL, OFF(parallel.overlap), 0, 1, 0,
     "false: every collective waited at issue", R_FREE},
    {"parallelism.ep", K_INT, OFF(parallel.ep), 1, 65536, 0,
     "expert parallelism: divides the ranks and model.n_experts", R_FREE},
    {"moe.overlap_chunks", K_INT, OFF(moe.overlap_chunks), 1, 64, 0,
     "chunks of each MoE block's expert exchange, pipelined with the experts (1: whole)",
     R_FREE},
    {"moe.aux_loss_scope", K_STR, OFF(moe.aux_loss_scope), 0, 0, SZ(moe.aux_loss_scope),
     "global|rank: the load-balancing loss over the micro-batch of all ranks, or each rank's "
     "own (meaned)", R_ASK},
    {"comm.strategy", K_STRATEGY, OFF(comm.strategy), 1, 4, 0,
     "native|raw|compressed|auto", R_FREE},
    {"comm.allgather", K_STRATEGY, OFF(comm.allgather), 0, 4, 0,
     "default|native|raw|compressed|auto", R_FREE},
    {"comm.reducescatter", K_STRATEGY, OFF(comm.reducescatter), 0, 4, 0,
     "default|native|raw|compressed|auto", R_FREE},
    {"comm.alltoall", K_STRATEGY, OFF(comm.alltoall), 0, 4, 0,
     "default|native|raw|compressed|auto", R_FREE},
    {"comm.codec", K_CODEC, OFF(comm.codec), 0, 0, 0, "fast|dense|f2|f3", R_FREE},
    {"comm.algo", K_ALGO, OFF(comm.algo), 0, 0, 0, "default|ring|direct|oneshot|hier", R_FREE},
    {"comm.param_dtype", K_DTYPE, OFF(comm.param_dtype), 0, 0, 0, "fp32|bf16", R_ASK},
    {"comm.reduce_dtype", K_DTYPE, OFF(comm.reduce_dtype), 0, 0, 0, "fp32|bf16", R_ASK},
    {"comm.alltoall_dtype", K_DTYPE, OFF(comm.alltoall_dtype), 0, 0, 0,
     "fp32|bf16: the expert exchange's rows", R_ASK},
    {"logging.every", K_INT, OFF(log.every), 1, INT_MAX, 0, "", R_FREE},
    {"logging.json", K_STR, OFF(log.json), 0, 0, SZ(log.json), "JSON-lines log path", R_FREE},
    {"checkpoint.dir", K_STR, OFF(ckpt.dir), 0, 0, SZ(ckpt.dir), "\"\" disables", R_FREE},
    {"checkpoint.every", K_INT, OFF(ckpt.every), 0, INT_MAX, 0, "0: only at the end", R_FREE},
    {"checkpoint.keep", K_INT, OFF(ckpt.keep), 0, INT_MAX, 0, "0 keeps all", R_FREE},
    {"checkpoint.allow_changes", K_STR, OFF(ckpt.allow_changes), 0, 0, SZ(ckpt.allow_changes),
     "keys --resume may change, comma-separated", R_FREE},
    {"checkpoint.hf", K_BOOL, OFF(ckpt.hf), 0, 1, 0,
     "also write each checkpoint as a Hugging Face directory (step_N/hf)", R_FREE},
    {"checkpoint.hf_dtype", K_DTYPE, OFF(ckpt.hf_dtype), 0, 1, 0, "fp32|bf16|fp16", R_FREE},
    {"model.compute", K_STR, OFF(runtime.compute), 0, 0, SZ(runtime.compute),
     "fp32|bf16: the linear layers' products (bf16: tensor cores, fp32 accumulation)", R_ASK},
    {"runtime.device", K_STR, OFF(runtime.device), 0, 0, SZ(runtime.device),
     "cpu|cuda|cpu_guarded: where the model computes", R_FREE},
    {"runtime.memory_gib", K_FLOAT, OFF(runtime.memory_gib), 0, 1 << 20, 0,
     "memory per rank the plan must fit, GiB (the device's with a device); 0: 90% of what the "
     "host has available (the device free), shared by its ranks; --plan: 80", R_FREE},
    {"comm.net", K_STR, OFF(runtime.net), 0, 0, SZ(runtime.net),
     "mpi|nccl: a device's collectives through host memory over MPI, or device to device over NCCL "
     "(runtime.device cuda; control stays on MPI)", R_FREE},
    {"checkpoint.hf_shard_bytes", K_I64, OFF(ckpt.hf_shard_bytes), 1, 9e18, 0,
     "largest safetensors file of the HF directory", R_FREE},
    /* --project's cluster (runtime/project.h); a run ignores these */
    {"cluster.gpus_min", K_INT, OFF(cluster.gpus_min), 1, 1 << 20, 0, "fewest GPUs projected", R_FREE},
    {"cluster.gpus_max", K_INT, OFF(cluster.gpus_max), 1, 1 << 20, 0, "most GPUs projected", R_FREE},
    {"cluster.gpus_per_node", K_INT, OFF(cluster.gpus_per_node), 1, 1024, 0, "GPUs in a node", R_FREE},
    {"cluster.intra_gbs", K_FLOAT, OFF(cluster.intra_gbs), 1e-3, 1e6, 0,
     "GB/s per GPU inside a node (NCCL's bus bandwidth)", R_FREE},
    {"cluster.intra_us", K_FLOAT, OFF(cluster.intra_us), 0, 1e6, 0, "latency per message inside a node, us",
     R_FREE},
    {"cluster.inter_gbit", K_FLOAT, OFF(cluster.inter_gbit), 1e-3, 1e6, 0, "one NIC's line rate, Gbit/s",
     R_FREE},
    {"cluster.nics_per_node", K_INT, OFF(cluster.nics_per_node), 1, 1024, 0, "NICs in a node", R_FREE},
    {"cluster.inter_us", K_FLOAT, OFF(cluster.inter_us), 0, 1e6, 0, "latency per message between nodes, us",
     R_FREE},
    {"cluster.peak_tflops", K_FLOAT, OFF(cluster.peak_tflops), 1e-6, 1e6, 0,
     "a GPU's dense peak for model.compute, TFLOP/s", R_FREE},
    {"cluster.mem_gbs", K_FLOAT, OFF(cluster.mem_gbs), 1e-3, 1e6, 0,
     "a GPU's memory bandwidth, GB/s", R_FREE},
    {"cluster.mfu", K_FLOAT, OFF(cluster.mfu), 1e-4, 1, 0, "the compute's fraction of that peak", R_FREE},
    {"cluster.codec_enc_gbs", K_FLOAT, OFF(cluster.codec_enc_gbs), 1e-3, 1e6, 0,
     "codec compress throughput, GB/s of raw bytes", R_FREE},
    {"cluster.codec_dec_gbs", K_FLOAT, OFF(cluster.codec_dec_gbs), 1e-3, 1e6, 0,
     "codec decompress throughput, GB/s of raw bytes", R_FREE},
    {"cluster.codec_call_us", K_FLOAT, OFF(cluster.codec_call_us), 0, 1e6, 0,
     "fixed cost per encode or decode call, us", R_FREE},
    {"cluster.codec_pipelined", K_BOOL, OFF(cluster.codec_pipelined), 0, 1, 0,
     "codec and wire overlap in pieces (else one after the other)", R_FREE},
    {"cluster.ratio_params", K_FLOAT, OFF(cluster.ratio_params), 0, 100, 0,
     "raw/wire of the gathers (0: by comm.param_dtype)", R_FREE},
    {"cluster.ratio_grads", K_FLOAT, OFF(cluster.ratio_grads), 0, 100, 0,
     "raw/wire of the reduce-scatters (0: by comm.reduce_dtype)", R_FREE},
    {"cluster.ratio_a2a", K_FLOAT, OFF(cluster.ratio_a2a), 0, 100, 0,
     "raw/wire of the expert exchange (0: by comm.alltoall_dtype)", R_FREE},
    {"cluster.baseline", K_STRATEGY, OFF(cluster.baseline), 1, 0, 0,
     "native|raw: the uncompressed way compared against", R_FREE},
    {"cluster.contention", K_FLOAT, OFF(cluster.contention), 0, 10, 0,
     "compute slowed by this fraction while a collective runs", R_FREE},
    {"cluster.comm_contention", K_FLOAT, OFF(cluster.comm_contention), 0, 100, 0,
     "a collective slowed by this fraction while compute runs beside it", R_FREE},
    {"cluster.maxvio", K_FLOAT, OFF(cluster.maxvio), 0, 100, 0,
     "MoE: the busiest rank's expert load above the mean (MaxVio)", R_FREE},
};
#define N_KEYS (sizeof kKeys / sizeof kKeys[0])
_Static_assert(N_KEYS <= CFG_MAX_KEYS, "TrainConfig.origin needs room for every key");

/* Room for value_text of any key: a string key's every byte escaped (\\xNN), in quotes. */
#define VALUE_TEXT_MAX (4 * CFG_PATH_MAX + 8)

static const char* const kSections[] = {"model",       "data", "train",   "optimizer",
                                        "schedule",    "parallelism", "moe",  "comm",
                                        "logging",     "checkpoint", "runtime", "cluster"};

void config_defaults(TrainConfig* c) {
    memset(c, 0, sizeof *c);
    c->model = (LlamaConfig){.vocab_size = 256, .dim = 64, .n_layers = 2, .n_heads = 4,
                             .n_kv_heads = 2, .ffn_hidden = 192, .max_seq_len = 64,
                             .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tie_embeddings = 1};
    snprintf(c->data.path, sizeof c->data.path, "data/fortunes.txt");
    snprintf(c->data.tokenizer, sizeof c->data.tokenizer, "byte");
    c->data.bpe_merges = 512;
    c->data.seq_len = 64;
    c->data.batch_size = 4;
    c->data.grad_accum = 1;
    c->data.val_fraction = 0.05;
    c->data.val_every = 0;
    c->data.val_batches = 4;
    c->data.seed = 1234;
    c->train.steps = 100;
    c->train.seed = 42;
    c->optim.lr = 1e-3;
    c->optim.min_lr = 1e-4;
    c->optim.beta1 = 0.9;
    c->optim.beta2 = 0.95;
    c->optim.eps = 1e-8;
    c->optim.weight_decay = 0.1;
    c->optim.grad_clip = 1.0;
    c->schedule.warmup_steps = 0;
    c->schedule.total_steps = 0;
    c->parallel.fsdp = 1;
    c->parallel.reshard_after_forward = 1;
    c->parallel.prefetch = 1;
    c->parallel.prefetch_depth = 1;
    c->parallel.max_inflight_bytes = 0;
    c->parallel.max_reduces_in_flight = 2;
    c->parallel.overlap = 1;
    c->parallel.ep = 1;
    c->moe.overlap_chunks = 1;
    snprintf(c->moe.aux_loss_scope, sizeof c->moe.aux_loss_scope, "global");
    c->model.decoder_sparse_step = 1;
    c->model.router_aux_loss_coef = 0.001f; /* HF's default */
    c->comm.strategy = zipcclStrategyCompressed;
    c->comm.allgather = zipcclStrategyDefault;
    c->comm.reducescatter = zipcclStrategyDefault;
    c->comm.alltoall = zipcclStrategyDefault;
    c->comm.codec = zipcclCodecFast;
    c->comm.param_dtype = zipcclFloat32;
    c->comm.reduce_dtype = zipcclFloat32;
    c->comm.alltoall_dtype = zipcclFloat32;
    c->log.every = 1;
    c->ckpt.every = 0;
    c->ckpt.keep = 2;
    /* --project's default cluster: DGX H100 nodes (8 GPUs, NVLink at NCCL's
     * ~370 GB/s AllGather bus bandwidth, 8 x 400 Gbit/s NICs), a bf16 model
     * at 45% MFU, the CUDA codec as measured on an H200 (docs/BENCHMARKS.md
     * "Codec (GPU"): 161 / 266 GB/s, ~0.4 ms per 1 MiB call, serial */
    c->cluster.gpus_min = 8;
    c->cluster.gpus_max = 1024;
    c->cluster.gpus_per_node = 8;
    c->cluster.intra_gbs = 370;
    c->cluster.intra_us = 3;
    c->cluster.inter_gbit = 400;
    c->cluster.nics_per_node = 8;
    c->cluster.inter_us = 10;
    c->cluster.peak_tflops = 989.5;
    c->cluster.mem_gbs = 3350; /* H100 SXM's HBM3 */
    c->cluster.mfu = 0.45;
    c->cluster.codec_enc_gbs = 161;
    c->cluster.codec_dec_gbs = 266;
    c->cluster.codec_call_us = 400;
    c->cluster.codec_pipelined = 0;
    c->cluster.baseline = zipcclStrategyNative;
    c->ckpt.hf_dtype = zipcclFloat32;
    c->ckpt.hf_shard_bytes = 5000000000ll; /* HF's "5GB" */
    snprintf(c->runtime.device, sizeof c->runtime.device, "cpu");
    snprintf(c->runtime.net, sizeof c->runtime.net, "mpi");
    snprintf(c->runtime.compute, sizeof c->runtime.compute, "fp32");
    snprintf(c->train.recompute, sizeof c->train.recompute, "auto");
}


static const char* strategy_names[] = {"default", "native", "raw", "compressed", "auto"};

const char* config_codec_name(zipcclCodec_t c) {
    return zipcclCodecName(c == zipcclCodecDefault ? zipcclCodecFast : c);
}

static int parse_strategy(const char* v, int allow_default, zipcclStrategy_t* out) {
    for (int i = allow_default ? 0 : 1; i < 5; i++)
        if (!strcmp(v, strategy_names[i])) { *out = (zipcclStrategy_t)i; return 0; }
    return -1;
}

/* Parse one key's text value into c. `where` starts the error messages:
 * "FILE:LINE" or "--set key=value". */
static int set_value(TrainConfig* c, const KeyDesc* k, const char* v, const char* where, char* err,
                     size_t errlen) {
    char* base = (char*)c + k->offset;
    char* end = NULL;
    switch (k->type) {
    case K_INT:
    case K_I64: {
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (!*v || *end || errno)
            return zrt_errf(err, errlen, "%s: key '%s': expected an integer, got '%s'", where,
                        k->name, PRINTABLE(v));
        if ((double)x < k->lo || (double)x > k->hi)
            return zrt_errf(err, errlen, "%s: key '%s': %lld is out of range [%.0f, %.0f]%s%s",
                        where, k->name, x, k->lo, k->hi, *k->help ? " — " : "", k->help);
        if (k->type == K_INT) *(int*)base = (int)x;
        else *(long long*)base = x;
        return 0;
    }
    case K_FLOAT: {
        errno = 0;
        double x = strtod(v, &end);
        if (!*v || *end || errno || !isfinite(x))
            return zrt_errf(err, errlen, "%s: key '%s': expected a number, got '%s'", where, k->name,
                        PRINTABLE(v));
        if (x < k->lo || x > k->hi)
            return zrt_errf(err, errlen, "%s: key '%s': %g is out of range [%g, %g]%s%s", where,
                        k->name, x, k->lo, k->hi, *k->help ? " — " : "", k->help);
        /* LlamaConfig holds floats; everything else is double. */
        if (!strncmp(k->name, "model.", 6)) *(float*)base = (float)x;
        else *(double*)base = x;
        return 0;
    }
    case K_BOOL: {
        int x;
        if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcasecmp(v, "on") ||
            !strcmp(v, "1"))
            x = 1;
        else if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off") ||
                 !strcmp(v, "0"))
            x = 0;
        else
            return zrt_errf(err, errlen, "%s: key '%s': expected true or false, got '%s'", where,
                        k->name, PRINTABLE(v));
        if (x < k->lo || x > k->hi)
            return zrt_errf(err, errlen, "%s: key '%s': only %s is supported%s%s", where, k->name,
                        k->lo ? "true" : "false", *k->help ? " — " : "", k->help);
        *(int*)base = x;
        return 0;
    }
    case K_STR:
        if (strlen(v) >= k->size)
            return zrt_errf(err, errlen, "%s: key '%s': value longer than %zu characters", where,
                        k->name, k->size - 1);
        snprintf(base, k->size, "%s", v);
        return 0;
    case K_STRATEGY: {
        zipcclStrategy_t s;
        if (parse_strategy(v, k->lo == 0, &s))
            return zrt_errf(err, errlen, "%s: key '%s': unknown strategy '%s' (expected %s)", where,
                        k->name, PRINTABLE(v), k->help);
        *(zipcclStrategy_t*)base = s;
        return 0;
    }
    case K_CODEC:
        if (zipcclCodecParse(v, (zipcclCodec_t*)base) != zipcclSuccess)
            return zrt_errf(err, errlen, "%s: key '%s': unknown codec '%s' (expected fast|dense|f2|f3)",
                        where, k->name, PRINTABLE(v));
        return 0;
    case K_ALGO: {
        zipcclAlgo_t a = zipcclAlgoDefault;
        if (strcmp(v, "default") && zipcclAlgoParse(v, &a) != zipcclSuccess)
            return zrt_errf(err, errlen,
                            "%s: key '%s': unknown algorithm '%s' (expected default|ring|direct|"
                            "oneshot|hier)",
                            where, k->name, PRINTABLE(v));
        *(zipcclAlgo_t*)base = a;
        return 0;
    }
    case K_LAYERS: {
        uint64_t mask[4] = {0};
        const char* p = v;
        while (*p) {
            while (*p == ' ' || *p == ',') p++;
            if (!*p) break;
            errno = 0;
            long x = strtol(p, &end, 10);
            if (end == p || errno || (*end && *end != ',' && *end != ' '))
                return zrt_errf(err, errlen, "%s: key '%s': expected block indices, got '%s'",
                                where, k->name, PRINTABLE(v));
            if (x < k->lo || x > k->hi)
                return zrt_errf(err, errlen, "%s: key '%s': block %ld is out of range [%.0f, %.0f]",
                                where, k->name, x, k->lo, k->hi);
            mask[x / 64] |= 1ull << (x % 64);
            p = end;
        }
        memcpy(base, mask, sizeof mask);
        return 0;
    }
    case K_DTYPE: /* hi = 1: fp16 too (files; the collectives take fp32|bf16) */
        if (!strcmp(v, "fp32")) *(zipcclDataType_t*)base = zipcclFloat32;
        else if (!strcmp(v, "bf16")) *(zipcclDataType_t*)base = zipcclBfloat16;
        else if (!strcmp(v, "fp16") && k->hi == 1) *(zipcclDataType_t*)base = zipcclFloat16;
        else
            return zrt_errf(err, errlen, "%s: key '%s': unknown dtype '%s' (expected %s)",
                        where, k->name, PRINTABLE(v), k->hi == 1 ? "fp32|bf16|fp16" : "fp32|bf16");
        return 0;
    }
    return zrt_errf(err, errlen, "%s: key '%s': internal: bad key type", where, k->name);
}

/* set_value, then remember where the value came from: line of the file
 * being read, or the --set assignment (set != NULL). */
static int set_key(TrainConfig* c, const KeyDesc* k, const char* v, const char* where, int line,
                   const char* set, char* err, size_t errlen) {
    if (set_value(c, k, v, where, err, errlen)) return -1;
    size_t i = (size_t)(k - kKeys);
    c->origin[i].line = set ? 0 : line;
    snprintf(c->origin[i].set, sizeof c->origin[i].set, "%s", set ? set : "");
    c->origin[i].ext[0] = '\0';
    return 0;
}

static const KeyDesc* find_key(const char* name) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (!strcmp(kKeys[i].name, name)) return &kKeys[i];
    return NULL;
}

static int is_section(const char* s) {
    for (size_t i = 0; i < sizeof kSections / sizeof kSections[0]; i++)
        if (!strcmp(kSections[i], s)) return 1;
    return 0;
}

/* Edit distance with adjacent transpositions counted as one edit (optimal
 * string alignment): "modle" is one edit from "model", like a typist sees
 * it. Names here are short (< 64 characters); longer ones never match. */
static int edit_distance(const char* a, const char* b) {
    enum { M = 64 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= M || m >= M) return INT_MAX;
    int d[M][M];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int cost = a[i - 1] != b[j - 1];
            int x = d[i - 1][j] + 1, y = d[i][j - 1] + 1, z = d[i - 1][j - 1] + cost;
            int best = x < y ? x : y;
            if (z < best) best = z;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

/* The known name nearest to `name`, or NULL when none is close: at most two
 * edits, and fewer than half the letters of the part after the dot, so a
 * short unrelated word is not "corrected". A key put in the wrong section
 * ("model.seq_len") finds the one key with that exact name elsewhere.
 * Sections are the candidates for a name without a dot. */
static const char* nearest_key(const char* name) {
    static const char* const extra[] = {"comm.overrides"};
    const char* dot = strchr(name, '.');
    const char* leaf = dot ? dot + 1 : name;
    const int limit = (int)strlen(leaf) / 2 < 2 ? (int)strlen(leaf) / 2 : 2;
    const char* best = NULL;
    int best_d = limit + 1;
    const size_t n_sec = sizeof kSections / sizeof kSections[0];
    for (size_t i = 0; i < N_KEYS + 1 + n_sec; i++) {
        const char* cand = i < N_KEYS    ? kKeys[i].name
                           : i == N_KEYS ? extra[0]
                                         : kSections[i - N_KEYS - 1];
        const char* cdot = strchr(cand, '.');
        if (!dot != !cdot) continue; /* keys for keys, sections for sections */
        int d = edit_distance(name, cand);
        if (d < best_d) {
            best_d = d;
            best = cand;
        }
    }
    if (best || !dot) return best;
    /* The same name in another section, if exactly one key has it. */
    const char* found = NULL;
    for (size_t i = 0; i < N_KEYS; i++) {
        const char* kd = strchr(kKeys[i].name, '.');
        if (!strcmp(kd + 1, leaf)) {
            if (found) return NULL;
            found = kKeys[i].name;
        }
    }
    return found;
}

/* " (did you mean 'x'?)" or "" — static storage, one message at a time. */
static const char* suggestion(const char* name) {
    static char buf[96];
    const char* k = nearest_key(name);
    if (!k) return "";
    snprintf(buf, sizeof buf, " (did you mean '%s'?)", k);
    return buf;
}

/* ---- YAML ---------------------------------------------------------------- */

typedef struct {
    yaml_document_t* doc;
    const char* file; /* printable (zrt_printable), for messages */
    char* err;
    size_t errlen;
} Walk;

static const char* scalar(yaml_node_t* n) { return (const char*)n->data.scalar.value; }

static int read_overrides(TrainConfig* c, Walk* w, yaml_node_t* seq) {
    if (seq->type != YAML_SEQUENCE_NODE)
        return zrt_errf(w->err, w->errlen,
                    "%s:%zu: key 'comm.overrides': expected a list of {pattern, strategy}",
                    w->file, seq->start_mark.line + 1);
    c->comm.n_overrides = 0;
    for (yaml_node_item_t* it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
         it++) {
        yaml_node_t* m = yaml_document_get_node(w->doc, *it);
        size_t line = m->start_mark.line + 1;
        if (m->type != YAML_MAPPING_NODE)
            return zrt_errf(w->err, w->errlen,
                        "%s:%zu: key 'comm.overrides': each entry is a mapping "
                        "{pattern: \"layers.1*\", strategy: raw}",
                        w->file, line);
        if (c->comm.n_overrides == CFG_MAX_OVERRIDES)
            return zrt_errf(w->err, w->errlen, "%s:%zu: key 'comm.overrides': more than %d entries",
                        w->file, line, CFG_MAX_OVERRIDES);
        CommOverride o = {.kind = -1, .strategy = zipcclStrategyDefault,
                          .codec = zipcclCodecDefault, .algo = -1, .line = (int)line};
        for (yaml_node_pair_t* p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top;
             p++) {
            yaml_node_t* k = yaml_document_get_node(w->doc, p->key);
            yaml_node_t* v = yaml_document_get_node(w->doc, p->value);
            size_t kl = k->start_mark.line + 1;
            if (k->type != YAML_SCALAR_NODE || v->type != YAML_SCALAR_NODE)
                return zrt_errf(w->err, w->errlen,
                            "%s:%zu: key 'comm.overrides': keys and values must be scalars",
                            w->file, kl);
            const char* ks = scalar(k);
            const char* vs = scalar(v);
            if (!strcmp(ks, "pattern")) {
                if (strlen(vs) >= sizeof o.pattern || !*vs)
                    return zrt_errf(w->err, w->errlen,
                                "%s:%zu: key 'comm.overrides.pattern': empty or too long",
                                w->file, kl);
                snprintf(o.pattern, sizeof o.pattern, "%s", vs);
            } else if (!strcmp(ks, "strategy")) {
                if (parse_strategy(vs, 0, &o.strategy))
                    return zrt_errf(w->err, w->errlen,
                                "%s:%zu: key 'comm.overrides.strategy': unknown strategy '%s' "
                                "(expected native|raw|compressed|auto)",
                                w->file, kl, PRINTABLE(vs));
            } else if (!strcmp(ks, "codec")) {
                if (zipcclCodecParse(vs, &o.codec) != zipcclSuccess)
                    return zrt_errf(w->err, w->errlen,
                                "%s:%zu: key 'comm.overrides.codec': unknown codec '%s' "
                                "(expected fast|dense|f2|f3)",
                                w->file, kl, PRINTABLE(vs));
            } else if (!strcmp(ks, "algo")) {
                zipcclAlgo_t a = zipcclAlgoDefault;
                if (strcmp(vs, "default") && zipcclAlgoParse(vs, &a) != zipcclSuccess)
                    return zrt_errf(w->err, w->errlen,
                                "%s:%zu: key 'comm.overrides.algo': unknown algorithm '%s' "
                                "(expected default|ring|direct|oneshot|hier)",
                                w->file, kl, PRINTABLE(vs));
                o.algo = (int)a;
            } else if (!strcmp(ks, "kind")) {
                if (!strcmp(vs, "all")) o.kind = -1;
                else if (!strcmp(vs, "allgather")) o.kind = zipcclCollAllGather;
                else if (!strcmp(vs, "reducescatter")) o.kind = zipcclCollReduceScatter;
                else if (!strcmp(vs, "alltoall")) o.kind = zipcclCollAlltoAllv;
                else
                    return zrt_errf(w->err, w->errlen,
                                "%s:%zu: key 'comm.overrides.kind': unknown kind '%s' "
                                "(expected all|allgather|reducescatter|alltoall)",
                                w->file, kl, PRINTABLE(vs));
            } else {
                return zrt_errf(w->err, w->errlen,
                            "%s:%zu: unknown key 'comm.overrides.%s' (expected pattern, "
                            "strategy, codec, algo, kind)",
                            w->file, kl, PRINTABLE(ks));
            }
        }
        if (!o.pattern[0] ||
            (o.strategy == zipcclStrategyDefault && o.codec == zipcclCodecDefault && o.algo < 0))
            return zrt_errf(w->err, w->errlen,
                        "%s:%zu: key 'comm.overrides': entry needs both pattern and strategy "
                        "(or a codec or algo to set)",
                        w->file, line);
        c->comm.overrides[c->comm.n_overrides++] = o;
    }
    return 0;
}

/* Walk a mapping node, prefix is "" at the root or "model." etc. */
static int walk_mapping(TrainConfig* c, Walk* w, yaml_node_t* map, const char* prefix) {
    for (yaml_node_pair_t* p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t* k = yaml_document_get_node(w->doc, p->key);
        yaml_node_t* v = yaml_document_get_node(w->doc, p->value);
        size_t line = k->start_mark.line + 1;
        if (k->type != YAML_SCALAR_NODE)
            return zrt_errf(w->err, w->errlen, "%s:%zu: keys must be plain names", w->file, line);
        char name[160];
        snprintf(name, sizeof name, "%s%s", prefix, scalar(k));
        if (!*prefix) {
            if (!is_section(name))
                return zrt_errf(w->err, w->errlen,
                            "%s:%zu: unknown key '%s'%s (sections: model, data, train, optimizer, "
                            "schedule, parallelism, comm, logging, checkpoint)",
                            w->file, line, PRINTABLE(name), suggestion(name));
            if (v->type == YAML_SCALAR_NODE && !*scalar(v)) continue; /* empty section */
            if (v->type != YAML_MAPPING_NODE)
                return zrt_errf(w->err, w->errlen, "%s:%zu: key '%s': expected a mapping", w->file,
                            line, name);
            char sub[170];
            snprintf(sub, sizeof sub, "%s.", name);
            if (walk_mapping(c, w, v, sub)) return -1;
            continue;
        }
        if (!strcmp(name, "comm.overrides")) {
            if (read_overrides(c, w, v)) return -1;
            continue;
        }
        const KeyDesc* kd = find_key(name);
        if (!kd)
            return zrt_errf(w->err, w->errlen, "%s:%zu: unknown key '%s'%s", w->file, line,
                        PRINTABLE(name), suggestion(name));
        char where[ZRT_PRINTABLE_CAP + 32];
        snprintf(where, sizeof where, "%s:%zu", w->file, v->start_mark.line + 1);
        if ((kd->offset == OFF(ckpt.allow_changes) || kd->type == K_LAYERS) &&
            v->type == YAML_SEQUENCE_NODE) {
            /* A YAML list (of key names, of block indices) reads as the
             * comma-separated text that --set takes. */
            char list[SZ(ckpt.allow_changes) + 64] = "";
            size_t used = 0;
            for (yaml_node_item_t* it = v->data.sequence.items.start;
                 it < v->data.sequence.items.top; it++) {
                yaml_node_t* e = yaml_document_get_node(w->doc, *it);
                if (e->type != YAML_SCALAR_NODE)
                    return zrt_errf(w->err, w->errlen, "%s: key '%s': expected a list of %s",
                                where, name, kd->type == K_LAYERS ? "block indices" : "key names");
                int k = snprintf(list + used, sizeof list - used, "%s%s", used ? "," : "",
                                 scalar(e));
                if (k < 0 || (size_t)k >= sizeof list - used)
                    return zrt_errf(w->err, w->errlen, "%s: key '%s': list too long", where, name);
                used += (size_t)k;
            }
            if (set_key(c, kd, list, where, (int)v->start_mark.line + 1, NULL, w->err, w->errlen))
                return -1;
            continue;
        }
        if (v->type != YAML_SCALAR_NODE)
            return zrt_errf(w->err, w->errlen, "%s:%zu: key '%s': expected a single value", w->file,
                        v->start_mark.line + 1, name);
        if (set_key(c, kd, scalar(v), where, (int)v->start_mark.line + 1, NULL, w->err, w->errlen))
            return -1;
    }
    return 0;
}

int config_load(TrainConfig* c, const char* path, char* err, size_t errlen) {
    FILE* f = fopen(path, "rb");
    if (!f)
        return zrt_errf(err, errlen, "%s: cannot open config: %s", PRINTABLE(path),
                        strerror(errno));
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        return zrt_errf(err, errlen, "%s: libyaml failed to initialise", PRINTABLE(path));
    }
    yaml_parser_set_input_file(&parser, f);
    int rc = 0;
    if (!yaml_parser_load(&parser, &doc)) {
        rc = zrt_errf(err, errlen, "%s:%zu:%zu: YAML syntax error: %s%s%s", PRINTABLE(path),
                  parser.problem_mark.line + 1, parser.problem_mark.column + 1,
                  parser.problem ? parser.problem : "?", parser.context ? " " : "",
                  parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        fclose(f);
        return rc;
    }
    /* Known before the walk: origins recorded while walking refer to it. */
    snprintf(c->source, sizeof c->source, "%s", path);
    yaml_node_t* root = yaml_document_get_root_node(&doc);
    char file[ZRT_PRINTABLE_CAP];
    Walk w = {&doc, zrt_printable(path, file, sizeof file), err, errlen};
    if (!root) rc = zrt_errf(err, errlen, "%s: empty config", w.file);
    else if (root->type != YAML_MAPPING_NODE)
        rc = zrt_errf(err, errlen, "%s:%zu: the top level must be a mapping of sections", w.file,
                  root->start_mark.line + 1);
    else rc = walk_mapping(c, &w, root, "");
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}

int config_set(TrainConfig* c, const char* a, char* err, size_t errlen) {
    const char* eq = strchr(a, '=');
    if (!eq || eq == a)
        return zrt_errf(err, errlen, "--set '%s': expected dotted.key=value", PRINTABLE(a));
    char name[160];
    size_t n = (size_t)(eq - a);
    if (n >= sizeof name) return zrt_errf(err, errlen, "--set '%s': key too long", PRINTABLE(a));
    memcpy(name, a, n);
    name[n] = '\0';
    char where[ZRT_PRINTABLE_CAP + 8];
    snprintf(where, sizeof where, "--set %s", PRINTABLE(a));
    const KeyDesc* kd = find_key(name);
    if (!kd)
        return zrt_errf(err, errlen, "%s: unknown key '%s'%s", where, PRINTABLE(name),
                        suggestion(name));
    if (set_key(c, kd, eq + 1, where, 0, a, err, errlen)) return -1;
    /* The command line's strategy is meant for A/B runs: it names the
     * strategy of every collective, so per-kind and per-layer choices from
     * the file step aside. */
    if (!strcmp(name, "comm.strategy")) c->comm.strategy_forced = 1;
    return 0;
}

const char* config_where(const TrainConfig* c, const char* key, char* buf, size_t n) {
    const char* src = c->source[0] ? PRINTABLE(c->source) : "the defaults";
    size_t kl = strlen(key);
    if (kl && key[kl - 1] == '.') {
        /* Sections ("optimizer.,schedule."): the file, and every --set that
         * touched one of them. */
        size_t used = (size_t)snprintf(buf, n, "%s", src);
        int first = 1;
        const char* ext = NULL; /* another file that gave keys of these sections */
        for (size_t i = 0; i < N_KEYS && used < n; i++) {
            const char* dot = strchr(kKeys[i].name, '.');
            char section[32];
            snprintf(section, sizeof section, "%.*s.", (int)(dot - kKeys[i].name), kKeys[i].name);
            const char* hit = strstr(key, section);
            if (!hit || (hit != key && hit[-1] != ',')) continue;
            if (!ext && c->origin[i].ext[0]) ext = c->origin[i].ext;
            if (!c->origin[i].set[0]) continue;
            used += (size_t)snprintf(buf + used, n - used, "%s--set %s", first ? " with " : ", ",
                                     PRINTABLE(c->origin[i].set));
            first = 0;
        }
        if (ext && used < n) {
            /* "DIR/config.json: 'hidden_size'" -> the file alone */
            const char* field = strstr(ext, ": '");
            const int len = (int)(field ? (size_t)(field - ext) : strlen(ext));
            used += (size_t)snprintf(buf + used, n - used, " and %.*s", len, ext);
        }
        return buf;
    }
    const KeyDesc* k = find_key(key);
    size_t i = k ? (size_t)(k - kKeys) : 0;
    if (k && c->origin[i].set[0]) snprintf(buf, n, "--set %s", PRINTABLE(c->origin[i].set));
    else if (k && c->origin[i].ext[0]) snprintf(buf, n, "%s", c->origin[i].ext);
    else if (k && c->origin[i].line > 0) snprintf(buf, n, "%s:%d", src, c->origin[i].line);
    else snprintf(buf, n, "%s", src);
    return buf;
}

static const char* value_text(const TrainConfig* c, const KeyDesc* k, char* buf, size_t n);

int config_given(const TrainConfig* c, const char* key) {
    const KeyDesc* k = find_key(key);
    if (!k) return 0;
    const size_t i = (size_t)(k - kKeys);
    return c->origin[i].line > 0 || c->origin[i].set[0];
}


/* Equal values, as the key means them: head_dim 0 is dim / n_heads. */
static int same_value(const TrainConfig* a, const TrainConfig* b, const KeyDesc* k) {
    char x[VALUE_TEXT_MAX], y[VALUE_TEXT_MAX];
    if (k->offset == OFF(model.head_dim))
        return llama_head_dim(&a->model) == llama_head_dim(&b->model);
    return !strcmp(value_text(a, k, x, sizeof x), value_text(b, k, y, sizeof y));
}

int config_load_cluster(TrainConfig* c, const char* path, char* err, size_t errlen) {
    TrainConfig* cl = malloc(sizeof *cl);
    if (!cl) return zrt_errf(err, errlen, "out of memory");
    config_defaults(cl);
    int rc = config_load(cl, path, err, errlen);
    for (size_t i = 0; !rc && i < N_KEYS; i++) {
        const KeyDesc* k = &kKeys[i];
        if (cl->origin[i].line <= 0) continue;
        if (strncmp(k->name, "cluster.", 8)) {
            rc = zrt_errf(err, errlen,
                          "%s:%d: key '%s': a cluster file holds cluster.* keys only (the model "
                          "and the run come from the config)",
                          PRINTABLE(path), cl->origin[i].line, k->name);
            break;
        }
        memcpy((char*)c + k->offset, (const char*)cl + k->offset,
               k->type == K_FLOAT ? sizeof(double) : k->type == K_STRATEGY ? sizeof(zipcclStrategy_t) : sizeof(int));
        c->origin[i].line = 0;
        snprintf(c->origin[i].ext, sizeof c->origin[i].ext, "%s:%d", PRINTABLE(path), cl->origin[i].line);
    }
    free(cl);
    return rc;
}

int config_set_external(TrainConfig* c, const char* key, const char* value, const char* where,
                        char* err, size_t errlen) {
    const KeyDesc* k = find_key(key);
    if (!k) return zrt_errf(err, errlen, "%s: internal: no key '%s'", where, key);
    const size_t i = (size_t)(k - kKeys);
    if (config_given(c, key)) {
        TrainConfig* theirs = malloc(sizeof *theirs);
        if (!theirs) return zrt_errf(err, errlen, "out of memory");
        memcpy(theirs, c, sizeof *theirs);
        int rc = set_value(theirs, k, value, where, err, errlen);
        if (!rc && !same_value(c, theirs, k)) {
            char mine[VALUE_TEXT_MAX], w[400];
            value_text(c, k, mine, sizeof mine);
            rc = zrt_errf(err, errlen,
                          "%s: key '%s': %s contradicts %s, which says %s (the key's value "
                          "comes from there: drop the key, or make it agree)",
                          config_where(c, key, w, sizeof w), key, mine, where, PRINTABLE(value));
        }
        free(theirs);
        if (rc) return rc;
    }
    if (set_value(c, k, value, where, err, errlen)) return -1;
    if (!config_given(c, key)) {
        c->origin[i].line = 0;
        snprintf(c->origin[i].ext, sizeof c->origin[i].ext, "%s", where);
    }
    return 0;
}

/* The allow_changes list: entry `i` (0-based) into out, or 0 when there
 * are no more. Entries are separated by commas, spaces around them trimmed. */
static int allow_entry(const char* list, int i, char* out, size_t n) {
    const char* p = list;
    for (;;) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) return 0;
        const char* e = p;
        while (*e && *e != ',') e++;
        const char* t = e;
        while (t > p && t[-1] == ' ') t--;
        if (i-- == 0) {
            snprintf(out, n, "%.*s", (int)(t - p), p);
            return 1;
        }
        p = e;
    }
}

/* The keys of a mixture-of-experts model: a dense model (n_experts 0) may
 * not be given them, and config_print leaves them out of its printout. */
static int is_moe_key(const char* key) {
    static const char* const moe_keys[] = {
        "model.n_experts_per_tok", "model.moe_ffn_hidden", "model.decoder_sparse_step",
        "model.mlp_only_layers",   "model.norm_topk_prob", "model.router_aux_loss_coef",
        "model.capacity_factor",   "moe.aux_loss_scope"};
    for (size_t i = 0; i < sizeof moe_keys / sizeof moe_keys[0]; i++)
        if (!strcmp(key, moe_keys[i])) return 1;
    return 0;
}

int config_validate(const TrainConfig* c, char* err, size_t errlen) {
    char merr[256], w1[400], w2[400];
    if (llama_config_check(&c->model, merr, sizeof merr))
        return zrt_errf(err, errlen, "%s: model: %s", config_where(c, "model.", w1, sizeof w1),
                        merr);
    if (c->data.seq_len > c->model.max_seq_len)
        return zrt_errf(err, errlen, "%s: key 'data.seq_len': %d exceeds model.max_seq_len %d (%s)",
                        config_where(c, "data.seq_len", w1, sizeof w1), c->data.seq_len,
                        c->model.max_seq_len, config_where(c, "model.max_seq_len", w2, sizeof w2));
    if (strcmp(c->data.tokenizer, "byte") && strcmp(c->data.tokenizer, "bpe") &&
        strcmp(c->data.tokenizer, "u16") && strcmp(c->data.tokenizer, "i32"))
        return zrt_errf(err, errlen,
                        "%s: key 'data.tokenizer': unknown tokenizer '%s' (byte|bpe|u16|i32)",
                        config_where(c, "data.tokenizer", w1, sizeof w1),
                        PRINTABLE(c->data.tokenizer));
    if (strcmp(c->runtime.device, "cpu") && strcmp(c->runtime.device, "cuda") &&
        strcmp(c->runtime.device, "cpu_guarded"))
        return zrt_errf(err, errlen,
                        "%s: key 'runtime.device': unknown device '%s' (cpu|cuda|cpu_guarded)",
                        config_where(c, "runtime.device", w1, sizeof w1),
                        PRINTABLE(c->runtime.device));
    if (strcmp(c->runtime.net, "mpi") && strcmp(c->runtime.net, "nccl"))
        return zrt_errf(err, errlen, "%s: key 'comm.net': unknown network '%s' (mpi|nccl)",
                        config_where(c, "comm.net", w1, sizeof w1), PRINTABLE(c->runtime.net));
    if (!strcmp(c->runtime.net, "nccl") && strcmp(c->runtime.device, "cuda"))
        return zrt_errf(err, errlen, "%s: key 'comm.net': nccl moves GPU memory, but runtime.device is '%s' (%s); "
                        "use comm.net: mpi",
                        config_where(c, "comm.net", w1, sizeof w1), PRINTABLE(c->runtime.device),
                        config_where(c, "runtime.device", w2, sizeof w2));
    if (strcmp(c->train.recompute, "none") && strcmp(c->train.recompute, "full") &&
        strcmp(c->train.recompute, "auto"))
        return zrt_errf(err, errlen, "%s: key 'train.recompute': unknown mode '%s' (auto|none|full)",
                        config_where(c, "train.recompute", w1, sizeof w1),
                        PRINTABLE(c->train.recompute));
    /* rank_invariant at EP > 1: the experts run per source rank in one
     * chunk (models/moe.c), rows exchanged exactly, and each expert starts
     * on a block of the norm (fsdp_grad_norm_of) */
    if (c->train.rank_invariant && c->model.n_experts > 0 && c->parallel.ep > 1) {
        const long long en = 3LL * c->model.moe_ffn_hidden * c->model.dim;
        const struct {
            int bad;
            const char *key, *why;
        } need[] = {
            {c->moe.overlap_chunks > 1, "moe.overlap_chunks",
             "the exchange runs in one chunk (a chunk cuts a source's rows of an expert in two "
             "GEMMs, which EP 1 runs as one): set moe.overlap_chunks: 1"},
            {c->comm.alltoall_dtype == zipcclBfloat16, "comm.alltoall_dtype",
             "the expert rows travel exactly (EP 1 rounds nothing): set comm.alltoall_dtype: fp32"},
        };
        for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
            if (need[i].bad)
                return zrt_errf(err, errlen,
                                "%s: key 'train.rank_invariant': with expert parallelism %s (%s)",
                                config_where(c, "train.rank_invariant", w1, sizeof w1), need[i].why,
                                config_where(c, need[i].key, w2, sizeof w2));
        if (en % ZRT_SUMSQ_BLOCK)
            return zrt_errf(err, errlen,
                            "%s: key 'train.rank_invariant': with expert parallelism an expert's "
                            "3 x moe_ffn_hidden x dim = %lld parameters must be a multiple of %d "
                            "(the gradient norm's block, so every rank's experts start on one: "
                            "true of real models, e.g. Qwen3-30B-A3B's 3 x 768 x 2048)",
                            config_where(c, "train.rank_invariant", w1, sizeof w1), en,
                            ZRT_SUMSQ_BLOCK);
    }
    if (c->train.rank_invariant && c->model.n_experts > 0 && strcmp(c->moe.aux_loss_scope, "rank"))
        return zrt_errf(err, errlen,
                        "%s: key 'train.rank_invariant': the aux loss must cover each "
                        "micro-batch of batch_size sequences, the tree's leaf, at any rank count: "
                        "set moe.aux_loss_scope: rank (global covers the micro-batch of all ranks, "
                        "which depends on the rank count)",
                        config_where(c, "train.rank_invariant", w1, sizeof w1));
    if (strcmp(c->runtime.compute, "fp32") && strcmp(c->runtime.compute, "bf16"))
        return zrt_errf(err, errlen, "%s: key 'model.compute': unknown mode '%s' (fp32|bf16)",
                        config_where(c, "model.compute", w1, sizeof w1),
                        PRINTABLE(c->runtime.compute));
    if (!strcmp(c->data.tokenizer, "bpe") && c->model.vocab_size < 256 + c->data.bpe_merges)
        return zrt_errf(err, errlen,
                        "%s: key 'model.vocab_size': %d is too small for the bpe tokenizer with %d "
                        "merges (needs >= %d)",
                        config_where(c, "model.vocab_size", w1, sizeof w1), c->model.vocab_size,
                        c->data.bpe_merges, 256 + c->data.bpe_merges);
    if (!strcmp(c->data.tokenizer, "byte") && c->model.vocab_size < 256)
        return zrt_errf(err, errlen,
                        "%s: key 'model.vocab_size': %d is too small for the byte tokenizer "
                        "(>= 256)",
                        config_where(c, "model.vocab_size", w1, sizeof w1), c->model.vocab_size);
    if (c->optim.min_lr > c->optim.lr)
        return zrt_errf(err, errlen, "%s: key 'optimizer.min_lr': %g exceeds optimizer.lr %g (%s)",
                        config_where(c, "optimizer.min_lr", w1, sizeof w1), c->optim.min_lr,
                        c->optim.lr, config_where(c, "optimizer.lr", w2, sizeof w2));
    if (!c->data.path[0])
        return zrt_errf(err, errlen, "%s: key 'data.path' is empty",
                        config_where(c, "data.path", w1, sizeof w1));
    if (c->comm.alltoall != zipcclStrategyDefault && !c->comm.strategy_forced &&
        (c->model.n_experts == 0 || c->parallel.ep < 2))
        return zrt_errf(err, errlen,
                        "%s: key 'comm.alltoall': %s asked for, but there is no expert all-to-all "
                        "to carry it (%s; it runs only with parallelism.ep > 1)",
                        config_where(c, "comm.alltoall", w1, sizeof w1),
                        strategy_names[c->comm.alltoall],
                        c->model.n_experts ? "parallelism.ep is 1: every expert is local"
                                           : "model.n_experts is 0: a dense model");
    if (c->model.n_experts == 0) {
        /* A MoE key given to a dense model is a config mistake, not a no-op. */
        for (size_t ki = 0; ki < N_KEYS; ki++)
            if (is_moe_key(kKeys[ki].name) && (c->origin[ki].line > 0 || c->origin[ki].set[0]))
                return zrt_errf(err, errlen,
                                "%s: key '%s' is for mixture-of-experts models, but "
                                "model.n_experts is 0 (%s)",
                                config_where(c, kKeys[ki].name, w1, sizeof w1), kKeys[ki].name,
                                config_where(c, "model.n_experts", w2, sizeof w2));
    }
    if (strcmp(c->moe.aux_loss_scope, "global") && strcmp(c->moe.aux_loss_scope, "rank"))
        return zrt_errf(err, errlen, "%s: key 'moe.aux_loss_scope': unknown scope '%s' (global|rank)",
                        config_where(c, "moe.aux_loss_scope", w1, sizeof w1),
                        PRINTABLE(c->moe.aux_loss_scope));
    if (c->moe.overlap_chunks > 1 && (c->model.n_experts == 0 || c->parallel.ep < 2))
        return zrt_errf(err, errlen,
                        "%s: key 'moe.overlap_chunks': %d chunks asked for, but there is no "
                        "expert exchange to cut (%s; it runs only with parallelism.ep > 1)",
                        config_where(c, "moe.overlap_chunks", w1, sizeof w1),
                        c->moe.overlap_chunks,
                        c->model.n_experts ? "parallelism.ep is 1: every expert is local"
                                           : "model.n_experts is 0: a dense model");
    if (c->parallel.ep > 1 && c->model.n_experts == 0)
        return zrt_errf(err, errlen,
                        "%s: key 'parallelism.ep': %d needs experts to spread (model.n_experts is 0)",
                        config_where(c, "parallelism.ep", w1, sizeof w1), c->parallel.ep);
    if (c->parallel.ep > 1 && c->model.n_experts % c->parallel.ep)
        return zrt_errf(err, errlen,
                        "%s: key 'parallelism.ep': %d does not divide model.n_experts %d (%s)",
                        config_where(c, "parallelism.ep", w1, sizeof w1), c->parallel.ep,
                        c->model.n_experts, config_where(c, "model.n_experts", w2, sizeof w2));
    char name[160];
    for (int i = 0; allow_entry(c->ckpt.allow_changes, i, name, sizeof name); i++) {
        const KeyDesc* k = find_key(name);
        config_where(c, "checkpoint.allow_changes", w1, sizeof w1);
        if (!k)
            return zrt_errf(err, errlen, "%s: key 'checkpoint.allow_changes': unknown key '%s'%s",
                            w1, PRINTABLE(name), suggestion(name));
        if (k->resume == R_NEVER)
            return zrt_errf(err, errlen,
                            "%s: key 'checkpoint.allow_changes': '%s' can never change when "
                            "resuming (the model, the data and the seeds are the checkpoint's)",
                            w1, name);
    }
    return 0;
}

zipcclStrategy_t config_strategy_for(const TrainConfig* c, zipcclCollKind_t kind,
                                     const char* unit_name) {
    if (c->comm.strategy_forced) return c->comm.strategy;
    zipcclStrategy_t s = c->comm.strategy;
    zipcclStrategy_t per_kind = kind == zipcclCollAllGather       ? c->comm.allgather
                                : kind == zipcclCollReduceScatter ? c->comm.reducescatter
                                : kind == zipcclCollAlltoAllv     ? c->comm.alltoall
                                                                  : zipcclStrategyDefault;
    if (per_kind != zipcclStrategyDefault) s = per_kind;
    /* Later overrides win, like later lines of a config usually do. */
    for (int i = 0; i < c->comm.n_overrides; i++) {
        const CommOverride* o = &c->comm.overrides[i];
        if (o->strategy != zipcclStrategyDefault && (o->kind < 0 || o->kind == (int)kind) &&
            unit_name && fnmatch(o->pattern, unit_name, 0) == 0)
            s = o->strategy;
    }
    return s;
}

/* A number in the fewest digits that read back to the same value, so a
 * printed config (a checkpoint's config.yaml) holds exactly the values of
 * the run and compares equal to them. */
static void fmt_number(char* buf, size_t n, double x, int is_float) {
    for (int digits = is_float ? 6 : 15; digits <= 17; digits++) {
        snprintf(buf, n, "%.*g", digits, x);
        if (is_float ? strtof(buf, NULL) == (float)x : strtod(buf, NULL) == x) return;
    }
}

/* Key k's value as config_print writes it. A string goes through
 * zrt_printable (the printout is on the terminal too) in double quotes:
 * its escapes of ASCII bytes (\\, \xNN) are YAML's, so it reads back; a
 * byte of a C1 control or of invalid UTF-8 does not (YAML's \xNN is a code
 * point). */
static const char* value_text(const TrainConfig* c, const KeyDesc* k, char* buf, size_t n) {
    const char* base = (const char*)c + k->offset;
    switch (k->type) {
    case K_INT: snprintf(buf, n, "%d", *(const int*)base); break;
    case K_I64: snprintf(buf, n, "%lld", *(const long long*)base); break;
    case K_FLOAT:
        if (!strncmp(k->name, "model.", 6)) fmt_number(buf, n, *(const float*)base, 1);
        else fmt_number(buf, n, *(const double*)base, 0);
        break;
    case K_BOOL: snprintf(buf, n, "%s", *(const int*)base ? "true" : "false"); break;
    case K_STR:
        /* A path that is not UTF-8 (--set takes the bytes a file name may
         * hold) has no YAML form: its lone bytes print as \xNN, which read
         * back as other characters. VALUE_TEXT_MAX holds every byte
         * escaped: the fallback is for a smaller buf. */
        if (zrt_yaml_quoted(base, buf, n)) {
            char shown[VALUE_TEXT_MAX];
            snprintf(buf, n, "\"%s\"", zrt_printable(base, shown, sizeof shown));
        }
        break;
    case K_STRATEGY:
        /* A forced strategy prints as the only one, so the printout
         * reads back (checkpoints store it) to the same behaviour. */
        snprintf(buf, n, "%s",
                 strategy_names[c->comm.strategy_forced && k->lo == 0
                                    ? zipcclStrategyDefault
                                    : *(const zipcclStrategy_t*)base]);
        break;
    case K_CODEC: snprintf(buf, n, "%s", config_codec_name(*(const zipcclCodec_t*)base)); break;
    case K_ALGO: snprintf(buf, n, "%s", zipcclAlgoName(*(const zipcclAlgo_t*)base)); break;
    case K_DTYPE: {
        const zipcclDataType_t d = *(const zipcclDataType_t*)base;
        snprintf(buf, n, "%s", d == zipcclBfloat16 ? "bf16" : d == zipcclFloat16 ? "fp16" : "fp32");
        break;
    }
    case K_LAYERS: {
        uint64_t mask[4];
        memcpy(mask, base, sizeof mask);
        size_t used = (size_t)snprintf(buf, n, "[");
        for (int l = 0; l < 256 && used < n; l++)
            if (mask[l / 64] >> (l % 64) & 1)
                used += (size_t)snprintf(buf + used, n - used, "%s%d", used > 1 ? ", " : "", l);
        if (used < n) snprintf(buf + used, n - used, "]");
        break;
    }
    }
    return buf;
}

static const char* kind_name(int kind) {
    return kind < 0                              ? "all"
           : kind == zipcclCollAllGather         ? "allgather"
           : kind == zipcclCollReduceScatter     ? "reducescatter"
                                                 : "alltoall";
}

/* One rule as YAML flow text, only the fields it sets (it reads back). */
static void override_text(const CommOverride* o0, int forced, char* buf, size_t n) {
    /* A forced strategy (--set comm.strategy) drops the rules' strategies,
     * not their codecs and algorithms. */
    CommOverride o1 = *o0;
    if (forced) o1.strategy = zipcclStrategyDefault;
    const CommOverride* o = &o1;
    /* the pattern as YAML reads it back ('"' and '\\' escaped: a fuzzed
     * pattern o"uter printed raw in quotes did not parse) */
    char q[4 * sizeof o->pattern + 3];
    if (zrt_yaml_quoted(o->pattern, q, sizeof q)) snprintf(q, sizeof q, "\"%s\"", PRINTABLE(o->pattern));
    size_t used = (size_t)snprintf(buf, n, "{pattern: %s", q);
    if (o->strategy != zipcclStrategyDefault && used < n)
        used += (size_t)snprintf(buf + used, n - used, ", strategy: %s", strategy_names[o->strategy]);
    if (o->codec != zipcclCodecDefault && used < n)
        used += (size_t)snprintf(buf + used, n - used, ", codec: %s", zipcclCodecName(o->codec));
    if (o->algo >= 0 && used < n)
        used += (size_t)snprintf(buf + used, n - used, ", algo: %s", zipcclAlgoName((zipcclAlgo_t)o->algo));
    if (used < n) snprintf(buf + used, n - used, ", kind: %s}", kind_name(o->kind));
}

/* The per-unit overrides as one line of YAML flow text ("" when none act). */
static const char* overrides_text(const TrainConfig* c, char* buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int j = 0; j < c->comm.n_overrides && used < n; j++) {
        const CommOverride* o = &c->comm.overrides[j];
        if (c->comm.strategy_forced && o->codec == zipcclCodecDefault && o->algo < 0) continue;
        char one[512];
        override_text(o, c->comm.strategy_forced, one, sizeof one);
        used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "", one);
    }
    return buf;
}

void config_print(const TrainConfig* c, FILE* f) {
    const char* section = "";
    char buf[VALUE_TEXT_MAX];
    for (size_t i = 0; i < N_KEYS; i++) {
        const KeyDesc* k = &kKeys[i];
        /* what a dense model may not be given (config_validate) */
        if (c->model.n_experts == 0 && is_moe_key(k->name)) continue;
        if (!strncmp(k->name, "cluster.", 8)) continue; /* --project prints its own */
        const char* dot = strchr(k->name, '.');
        size_t sl = (size_t)(dot - k->name);
        if (strncmp(section, k->name, sl) || section[sl] != '.') {
            fprintf(f, "%.*s:\n", (int)sl, k->name);
            section = k->name;
        }
        fprintf(f, "  %s: %s\n", dot + 1, value_text(c, k, buf, sizeof buf));
        char rules[CFG_MAX_OVERRIDES * 256];
        if (!strcmp(k->name, "comm.reduce_dtype") && overrides_text(c, rules, sizeof rules)[0]) {
            fprintf(f, "  overrides:\n");
            for (int j = 0; j < c->comm.n_overrides; j++) {
                const CommOverride* o = &c->comm.overrides[j];
                if (c->comm.strategy_forced && o->codec == zipcclCodecDefault && o->algo < 0)
                    continue;
                char one[256];
                override_text(o, c->comm.strategy_forced, one, sizeof one);
                fprintf(f, "    - %s\n", one);
            }
        }
    }
}

/* ---- resuming ------------------------------------------------------------ */

/* Text appended to a fixed buffer, silently cut at its end (messages). */
typedef struct {
    char* p;
    size_t n, used;
} Out;

static void out_add(Out* o, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_add(Out* o, const char* fmt, ...) {
    if (!o->n || o->used >= o->n - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->p + o->used, o->n - o->used, fmt, ap);
    va_end(ap);
    if (k > 0) o->used += (size_t)k < o->n - o->used ? (size_t)k : o->n - o->used - 1;
}

static int allowed(const TrainConfig* c, const char* key) {
    char name[160];
    for (int i = 0; allow_entry(c->ckpt.allow_changes, i, name, sizeof name); i++)
        if (!strcmp(name, key)) return 1;
    return 0;
}

/* What a resumed run keeps of the checkpoint's, said when a key of it
 * changed. */
static const char* never_reason(const char* key) {
    if (!strncmp(key, "model.", 6)) return "model";
    if (!strcmp(key, "train.seed")) return "parameter-init seed";
    if (!strcmp(key, "data.seed")) return "data order";
    return "data";
}

int config_resume_check(const TrainConfig* saved, int saved_nranks, const TrainConfig* now,
                        int nranks, char* notes, size_t notes_len, char* err, size_t errlen) {
    Out bad = {err, errlen, 0}, warn = {notes, notes_len, 0};
    char free_list[2048] = "";
    Out fr = {free_list, sizeof free_list, 0};
    char a[VALUE_TEXT_MAX], b[VALUE_TEXT_MAX], where[400];
    int n_bad = 0;
    if (errlen) err[0] = '\0';
    if (notes_len) notes[0] = '\0';
    out_add(&bad, "the run's config differs from the checkpoint's:");
    for (size_t i = 0; i < N_KEYS; i++) {
        const KeyDesc* k = &kKeys[i];
        if (!strcmp(value_text(saved, k, a, sizeof a), value_text(now, k, b, sizeof b)) ||
            k->offset == OFF(ckpt.allow_changes))
            continue;
        /* Derived below: what matters is the global batch and the schedule
         * length, not the keys one by one. */
        if (!strcmp(k->name, "data.batch_size") || !strcmp(k->name, "data.grad_accum") ||
            !strcmp(k->name, "schedule.total_steps") || !strcmp(k->name, "train.steps"))
            continue;
        config_where(now, k->name, where, sizeof where);
        if (k->resume == R_NEVER) {
            out_add(&bad, "\n  %s: %s in the checkpoint, %s now (%s): refused, a resumed run "
                          "keeps the checkpoint's %s",
                    k->name, a, b, where, never_reason(k->name));
            n_bad++;
        } else if (k->resume == R_ASK && !allowed(now, k->name)) {
            out_add(&bad, "\n  %s: %s in the checkpoint, %s now (%s): changes the training; "
                          "allow it with checkpoint.allow_changes: [%s]",
                    k->name, a, b, where, k->name);
            n_bad++;
        } else if (k->resume == R_ASK) {
            out_add(&warn, "# warning: resume: %s %s -> %s (%s; allowed by "
                           "checkpoint.allow_changes)\n",
                    k->name, a, b, where);
        } else {
            out_add(&fr, "%s%s %s -> %s", fr.used ? ", " : "", k->name, a, b);
        }
    }
    {
        char oa[1024], ob[1024];
        if (strcmp(overrides_text(saved, oa, sizeof oa), overrides_text(now, ob, sizeof ob)))
            out_add(&fr, "%scomm.overrides [%s] -> [%s]", fr.used ? ", " : "", oa, ob);
    }

    /* The global batch: sequences per optimizer step. The same batch cut
     * differently (other rank count, batch size, accumulation) continues
     * the same data order and the same mathematics. */
    const long long gs = (long long)saved->data.batch_size * saved->data.grad_accum * saved_nranks,
                    gn = (long long)now->data.batch_size * now->data.grad_accum * nranks;
    char split_s[96], split_n[96];
    snprintf(split_s, sizeof split_s, "batch_size %d x %d rank%s x grad_accum %d",
             saved->data.batch_size, saved_nranks, saved_nranks > 1 ? "s" : "",
             saved->data.grad_accum);
    snprintf(split_n, sizeof split_n, "batch_size %d x %d rank%s x grad_accum %d",
             now->data.batch_size, nranks, nranks > 1 ? "s" : "", now->data.grad_accum);
    if (gs != gn) {
        const int ok = allowed(now, "data.batch_size") || allowed(now, "data.grad_accum");
        if (ok) {
            out_add(&warn, "# warning: resume: global batch %lld -> %lld sequences per step (%s -> "
                           "%s; allowed by checkpoint.allow_changes)\n",
                    gs, gn, split_s, split_n);
        } else {
            out_add(&bad, "\n  global batch: %lld sequences per step in the checkpoint (%s), %lld "
                          "now (%s): changes the training; allow it with "
                          "checkpoint.allow_changes: [data.batch_size]",
                    gs, split_s, gn, split_n);
            n_bad++;
        }
    } else if (saved->train.rank_invariant && now->train.rank_invariant &&
               saved->data.batch_size == now->data.batch_size &&
               (saved_nranks != nranks || saved->data.grad_accum != now->data.grad_accum)) {
        out_add(&warn, "# resume: global batch %lld sequences per step as before, cut as %s (was "
                       "%s): train.rank_invariant, the same micro-batches in the same tree, so "
                       "the same bits as an uninterrupted run\n",
                gn, split_n, split_s);
    } else if (saved_nranks != nranks || saved->data.batch_size != now->data.batch_size ||
               saved->data.grad_accum != now->data.grad_accum) {
        out_add(&warn, "# resume: global batch %lld sequences per step as before, cut as %s (was "
                       "%s): same data, sums in another order, so not bitwise equal to an "
                       "uninterrupted run\n",
                gn, split_n, split_s);
    }

    /* The schedule's length: schedule.total_steps, or train.steps when 0. */
    const int ts = saved->schedule.total_steps ? saved->schedule.total_steps : saved->train.steps,
              tn = now->schedule.total_steps ? now->schedule.total_steps : now->train.steps;
    if (ts != tn) {
        config_where(now, now->schedule.total_steps ? "schedule.total_steps" : "train.steps",
                     where, sizeof where);
        if (allowed(now, "schedule.total_steps")) {
            out_add(&warn, "# warning: resume: learning-rate schedule over %d -> %d steps (%s; "
                           "allowed by checkpoint.allow_changes)\n",
                    ts, tn, where);
        } else {
            out_add(&bad, "\n  schedule.total_steps: the learning-rate schedule runs over %d steps "
                          "in the checkpoint, %d now (%s%s): changes the training; keep it with "
                          "schedule.total_steps: %d, or allow it with checkpoint.allow_changes: "
                          "[schedule.total_steps]",
                    ts, tn, where,
                    now->schedule.total_steps ? "" : "; schedule.total_steps 0 follows train.steps",
                    ts);
            n_bad++;
        }
    }
    if (saved->train.steps != now->train.steps)
        out_add(&fr, "%strain.steps %d -> %d", fr.used ? ", " : "", saved->train.steps,
                now->train.steps);
    if (saved->schedule.total_steps != now->schedule.total_steps && ts == tn)
        out_add(&fr, "%sschedule.total_steps %d -> %d (the same %d steps)", fr.used ? ", " : "",
                saved->schedule.total_steps, now->schedule.total_steps, tn);

    if (n_bad) {
        out_add(&bad, "\n  (the checkpoint's config.yaml holds its values; a key marked 'allow' "
                      "may change when named in checkpoint.allow_changes, e.g. --set "
                      "checkpoint.allow_changes=optimizer.lr,data.batch_size)");
        return -1;
    }
    if (fr.used)
        out_add(&warn, "# resume: changed from the checkpoint's config, nothing the numerics "
                       "depend on: %s\n",
                free_list);
    return 0;
}
