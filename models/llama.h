/*
 * llama.h — a Llama-3-style dense decoder: parameter layout, forward, backward.
 *
 *   tokens -> embedding -> L x [ RMSNorm -> GQA attention (RoPE) -> +residual
 *                                -> RMSNorm -> SwiGLU MLP -> +residual ]
 *          -> RMSNorm -> LM head (tied or untied) -> cross-entropy
 *
 * The model knows nothing of ranks. Parameters are grouped in "units": unit 0
 * holds the outer parameters (embedding, final norm, LM head), unit 1+l holds
 * block l. Each unit is one contiguous fp32 array in a fixed order (below), so
 * the runtime can shard, gather, checkpoint and reduce a unit as one flat
 * buffer. Before the model reads a unit it calls hooks->acquire(), and it
 * tells the runtime when it is done with it (forward) or when that unit's
 * gradients are complete (backward): that is where FSDP gathers and
 * reduce-scatters (runtime/fsdp.c).
 *
 * Unit layout (shapes as (rows, cols), row-major, y = x W^T for (out, in)):
 *   unit 0:  tok_emb (V, C) | final_norm (C) | lm_head (V, C) [only if untied]
 *   block:   attn_norm (C) | wq (H*hd, C) | wk (KV*hd, C) | wv (KV*hd, C) |
 *            wo (C, H*hd) | mlp_norm (C) | w_gate (F, C) | w_up (F, C) | w_down (C, F)
 * with C = dim, H = n_heads, KV = n_kv_heads, hd = C / H, F = ffn_hidden.
 */
#ifndef MODELS_LLAMA_H
#define MODELS_LLAMA_H
#include <stddef.h>

typedef struct {
    int vocab_size;      /* V */
    int dim;             /* C */
    int n_layers;        /* L */
    int n_heads;         /* H */
    int n_kv_heads;      /* KV, divides H */
    int ffn_hidden;      /* F */
    int max_seq_len;     /* T max */
    float rope_theta;    /* e.g. 500000 for Llama 3 */
    float norm_eps;      /* RMSNorm epsilon, e.g. 1e-5 */
    int tie_embeddings;  /* 1: lm_head = tok_emb */
} LlamaConfig;

/* Validate shapes; returns 0 and writes nothing on success, else writes a
 * message into err (size errlen) and returns -1. */
int llama_config_check(const LlamaConfig* cfg, char* err, size_t errlen);

/* Parameter counts. */
size_t llama_unit_numel(const LlamaConfig* cfg, int unit); /* unit 0..L */
size_t llama_num_params(const LlamaConfig* cfg);          /* sum over units */
/* Name and element count of each tensor of a unit, in layout order, for
 * checkpoints: returns the number of tensors; fills names ("layers.3.wq",
 * "tok_emb", ...) and shapes (rows, cols; cols = 1 for vectors) up to max. */
int llama_unit_tensors(const LlamaConfig* cfg, int unit, char names[][64], size_t rows[],
                       size_t cols[], int max);

/* Deterministic init of a whole unit from a seed (same on every rank and
 * every rank count): normal(0, 0.02) for matrices, residual projections
 * (wo, w_down) scaled by 1/sqrt(2L), ones for norms. */
void llama_unit_init(const LlamaConfig* cfg, int unit, unsigned long long seed, float* params);

/* FLOPs of one training step (forward + backward) per token, for MFU. */
double llama_flops_per_token(const LlamaConfig* cfg, int seq_len);

/* Bytes of activation memory llama_acts_alloc() needs for (B, T). */
size_t llama_acts_bytes(const LlamaConfig* cfg, int B, int T);

typedef struct LlamaActs LlamaActs; /* opaque, model-owned activations */
LlamaActs* llama_acts_alloc(const LlamaConfig* cfg, int B, int T); /* NULL on OOM */
void llama_acts_free(LlamaActs* acts);

/* How the model gets its parameters and hands back gradients. */
typedef struct {
    void* ctx;
    /* Full (gathered) parameters of `unit`, valid until release(). phase is
     * 0 for the forward pass and 1 for the backward pass. */
    const float* (*acquire)(void* ctx, int unit, int phase);
    /* Done reading `unit` in this phase (forward: may reshard). */
    void (*release)(void* ctx, int unit, int phase);
    /* Full-size gradient buffer of `unit` (the model ACCUMULATES into it). */
    float* (*grad_buffer)(void* ctx, int unit);
    /* All gradients of `unit` for this micro-batch are in its grad buffer. */
    void (*grads_ready)(void* ctx, int unit);
} LlamaParamHooks;

/* One micro-batch: forward, loss, and (if backward) backward.
 * tokens, targets: (B, T) int32; targets < 0 are ignored (no loss).
 * Returns the mean cross-entropy over counted targets. If logits_out is not
 * NULL it receives (B, T, V) logits (for reference checks).
 * Unit order: forward acquires 0, 1..L, then 0 again for the head;
 * backward walks 0 (head), L..1, 0 (embedding), calling grads_ready(unit) as
 * soon as a unit's gradients are final for this micro-batch. The embedding
 * backward reads no parameters, so it calls only grad_buffer(0) and
 * grads_ready(0), no acquire (exact sequence: docs/MODEL.md). Bad input
 * (token/target out of range, B or T over the acts capacity) returns NaN
 * before any hook is called, with a message on stderr. */
float llama_step(const LlamaConfig* cfg, LlamaActs* acts, const int* tokens, const int* targets,
                 int B, int T, const LlamaParamHooks* hooks, int backward, float* logits_out);

#endif
