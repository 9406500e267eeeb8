/*
 * hf.h — Hugging Face model directories in and out: the one place that
 * answers "how does a transformers checkpoint map onto ours" (hf.c holds
 * the whole mapping, both ways; docs/MODEL.md, "Hugging Face checkpoints",
 * is its long form).
 *
 *   import  model.init_from: DIR (or --init-from DIR)
 *           DIR/config.json  -> the model keys (hf_apply_config: a YAML or
 *                               --set value that contradicts it is an error)
 *           DIR/model.safetensors, or DIR/model.safetensors.index.json and
 *           its shards, bf16 / fp16 / fp32 -> every unit in our layout and
 *           RoPE convention (hf_open checks every tensor before any is read,
 *           hf_load fills the FSDP shards at any rank count and EP)
 *   export  checkpoint.hf: true (DIR/step_N/hf) and build/export-hf CKPT OUT
 *           whole units -> OUT/config.json, OUT/model.safetensors (or
 *           model-0000k-of-0000n.safetensors + model.safetensors.index.json
 *           above hf_shard_bytes), fp32 / bf16 / fp16, and the tokenizer
 *           files of the model it started from (hf_export)
 *
 * Architectures (as transformers 5.24 defines them): LlamaForCausalLM
 * (no QK-norm), Qwen3ForCausalLM (QK-norm), Qwen3MoeForCausalLM (QK-norm,
 * MoE blocks). Names, ours -> HF, block l, expert e:
 *
 *   tok_emb (V, C)              model.embed_tokens.weight
 *   final_norm (C)              model.norm.weight
 *   lm_head (V, C)              lm_head.weight (untied only)
 *   layers.l.attn_norm (C)      model.layers.l.input_layernorm.weight
 *   layers.l.wq (H*hd, C)       model.layers.l.self_attn.q_proj.weight   rows permuted (RoPE)
 *   layers.l.wk (KV*hd, C)      model.layers.l.self_attn.k_proj.weight   rows permuted (RoPE)
 *   layers.l.wv (KV*hd, C)      model.layers.l.self_attn.v_proj.weight
 *   layers.l.q_norm (hd)        model.layers.l.self_attn.q_norm.weight   permuted (RoPE)
 *   layers.l.k_norm (hd)        model.layers.l.self_attn.k_norm.weight   permuted (RoPE)
 *   layers.l.wo (C, H*hd)       model.layers.l.self_attn.o_proj.weight
 *   layers.l.mlp_norm (C)       model.layers.l.post_attention_layernorm.weight
 *   layers.l.w_gate/w_up/w_down model.layers.l.mlp.{gate,up,down}_proj.weight (dense blocks)
 *   layers.l.router (E, C)      model.layers.l.mlp.gate.weight
 *   layers.l.experts.e.w_gate   model.layers.l.mlp.experts.e.gate_proj.weight (Fe, C)
 *   layers.l.experts.e.w_up     model.layers.l.mlp.experts.e.up_proj.weight   (Fe, C)
 *   layers.l.experts.e.w_down   model.layers.l.mlp.experts.e.down_proj.weight (C, Fe)
 *
 * The per-expert names are what transformers 5.24's save_pretrained writes
 * and what published Qwen3-MoE checkpoints use; export writes them. Import
 * also reads the stacked form transformers 5.x holds in memory:
 * model.layers.l.mlp.experts.gate_up_proj (E, 2*Fe, C), gate rows first, and
 * model.layers.l.mlp.experts.down_proj (E, C, Fe).
 *
 * RoPE: we rotate interleaved pairs (x[2i], x[2i+1]) of a head, HF rotates
 * (x[i], x[i + hd/2]) ("rotate_half"). Row i of a head in HF's q/k is our row
 * perm[i], perm = (0, 2, 4, ..., hd-2, 1, 3, ..., hd-1); q_norm and k_norm
 * (one head) likewise. The permutation is exact: an import then an export
 * gives back the same bits.
 *
 * Left out: other architectures, rope scaling (llama3, yarn, linear, ...),
 * biases, sliding windows, quantized checkpoints, pytorch_model.bin (pickle)
 * files, reading only this rank's slice of each tensor (every rank reads
 * whole units, as checkpoint loading does).
 */
#ifndef RUNTIME_HF_H
#define RUNTIME_HF_H
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "fsdp.h"
#include "llama.h"
#include "zipccl.h"

typedef enum { HF_LLAMA = 0, HF_QWEN3 = 1, HF_QWEN3_MOE = 2 } HfArch;
const char* hf_arch_name(HfArch a); /* "LlamaForCausalLM", ... */

/* config.json of DIR as our model (no TrainConfig involved): the
 * architecture and the LlamaConfig transformers would build. Refuses, with a
 * message naming the file and field, what the model does not implement
 * (rope scaling, biases, sliding windows, other activations, unknown
 * fields). Returns 0, or -1 with the message in err. */
int hf_read_config(const char* dir, HfArch* arch, LlamaConfig* model, char* err, size_t errlen);

/* model.init_from: DIR/config.json -> cfg's model keys, through
 * config_set_external, so a key the YAML or a --set gave with another value
 * is an error naming both places. model.router_aux_loss_coef and
 * model.capacity_factor are training choices: a value given in the YAML
 * stays; config.json's router_aux_loss_coef is the default otherwise. */
int hf_apply_config(TrainConfig* cfg, const char* dir, char* err, size_t errlen);

/* Where one of our tensors lives in an HF checkpoint: the tensor's name
 * and shape there; for a stacked expert tensor, where ours starts in it
 * (elements); rope: rows permuted per head of hd rows. */
typedef struct {
    char name[128];
    int ndim;
    int64_t shape[3];
    size_t offset; /* elements into the HF tensor (stacked experts), else 0 */
    int rope;      /* hd of the permutation, or 0 */
} HfPlace;

/* Our tensor `ours` (a name llama_unit_tensors gives) -> its HF place;
 * stacked: the experts as the stacked 5.x tensors instead of per-expert
 * names. Returns 0, or -1 for a name that has none. */
int hf_place(const LlamaConfig* m, const char* ours, int stacked, HfPlace* p);

/* HF row i of a permuted tensor is our row hf_rope_row(i, hd) (same head). */
static inline size_t hf_rope_row(size_t i, size_t hd) {
    const size_t h = i / hd, r = i % hd;
    return h * hd + (r < hd / 2 ? 2 * r : 2 * (r - hd / 2) + 1);
}

/* The weights of an HF directory, opened and checked against model m:
 * every tensor the model needs is there with its shape and a float dtype
 * (F32, BF16, F16), every tensor there has a place in the model (the
 * rotary inv_freq buffers excepted), every shard the index names exists and
 * holds what the index says, no file is truncated. Only headers are read. */
typedef struct HfSource HfSource;
int hf_open(const char* dir, const LlamaConfig* m, HfSource** out, char* err, size_t errlen);
/* "1 file, bf16", "3 shards, fp32 + bf16, experts stacked", ... */
const char* hf_source_summary(const HfSource* s);
/* Unit `unit` whole (llama_unit_numel floats) in our layout: converted to
 * fp32 exactly, q/k rows permuted. Returns 0, or -1 naming file and tensor. */
int hf_read_unit(HfSource* s, int unit, float* full, char* err, size_t errlen);
void hf_close(HfSource* s);

/* Every unit of s into the FSDP shards (params; the optimizer state stays
 * zero): whole units read on every rank, each keeps its shard, so any rank
 * count and any EP load the same weights. No communication. */
int hf_load(Fsdp* f, HfSource* s, char* err, size_t errlen);

typedef struct {
    zipcclDataType_t dtype;    /* tensors on disk: fp32, bf16 (round to nearest
                                * even) or fp16 (round to nearest even; a value
                                * beyond fp16's range is an error) */
    long long max_shard_bytes; /* one file up to this, else shards + index */
    const char* source_dir;    /* the model.init_from directory: its config.json
                                * fields we do not own are kept, its tokenizer
                                * files copied (NULL or "": none) */
    const char* tokenizer;     /* a tokenizer.json to copy when source_dir has
                                * none (NULL: none) */
    long long bos_id, eos_id;  /* without source_dir: config.json's bos_token_id /
                                * eos_token_id (-1: null) */
} HfExportOptions;

/* Write units (units[u]: llama_unit_numel(m, u) floats, every unit) as an
 * HF directory outdir that AutoModelForCausalLM.from_pretrained loads with
 * no missing or unexpected keys. Files are written to temporary names and
 * renamed; stale model*.safetensors of an earlier export are removed.
 * Returns 0, or -1 with the reason in err. */
int hf_export(const LlamaConfig* m, const float* const* units, const HfExportOptions* o,
              const char* outdir, char* err, size_t errlen);

/* The same, streamed: the export asks get(ctx, u) for unit u's floats when
 * it needs them, in the order hf_export_unit_order gives (asking for the
 * unit it asked for last returns the same pointer: the provider keeps one
 * unit, and may free it at the next request). Memory: one unit plus one
 * output file's converted tensors (max_shard_bytes). */
typedef const float* (*HfUnitFn)(void* ctx, int unit);
int hf_export_stream(const LlamaConfig* m, HfUnitFn get, void* ctx, const HfExportOptions* o,
                     const char* outdir, char* err, size_t errlen);
/* The units hf_export_stream asks for, in order (a unit appears again only
 * after another: a tied model's unit 0 comes first and last). Returns the
 * count (at most max are written). */
int hf_export_unit_order(const LlamaConfig* m, int* order, int max);

#endif
