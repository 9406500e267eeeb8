/*
 * llama.h — Llama-3-style and Qwen3-style decoders, dense and mixture of
 * experts: parameter layout, forward, backward.
 *
 *   tokens -> embedding -> L x [ RMSNorm -> GQA attention (RoPE) -> +residual
 *                                -> RMSNorm -> MLP -> +residual ]
 *          -> RMSNorm -> LM head (tied or untied) -> cross-entropy
 *
 * Qwen3 adds two things to Llama: QK-norm (qk_norm: an RMSNorm over head_dim
 * on every q and k head, after the projection, before RoPE) and, in
 * Qwen3-MoE, mixture-of-experts MLPs (n_experts > 0): a router (linear, no
 * bias) -> softmax over all experts in fp32 -> top-k -> optionally the k
 * weights divided by their sum (norm_topk_prob) -> k SwiGLU experts of width
 * moe_ffn_hidden, outputs weighted and summed. Block l (0-based) is MoE when
 * (l + 1) % decoder_sparse_step == 0 and bit l of mlp_only_layers is clear;
 * the others keep a dense SwiGLU of width ffn_hidden. The load-balancing
 * loss (HF's load_balancing_loss_func: over the router rows of all MoE
 * layers pooled, aux = E * sum_e f_e * P_e, f_e the share of (token, slot)
 * pairs routed to e per slot, P_e the mean router probability; balanced
 * value k) enters the gradient with weight router_aux_loss_coef; llama_step
 * returns the cross-entropy and llama_acts_aux_loss() the aux term.
 * models/moe.c has the MoE MLP.
 *
 * The model knows nothing of ranks. Parameters are grouped in "units": unit 0
 * holds the embedding (and, tied, the final norm: the embedding is the head
 * too), unit 1+l holds block l, each MoE block's experts form one more unit,
 * after all blocks (llama_expert_unit), and an untied model's head (final norm
 * and LM head) is the last unit (llama_head_unit): the embedding is needed at
 * the forward's start only (its backward reads no parameters) and the head
 * at the forward's end and the backward's start, so apart they are never
 * held together for the whole step. Each unit is one contiguous fp32 array in a fixed order
 * (below), so the runtime can shard, gather, checkpoint and reduce a unit as
 * one flat buffer. Before the model reads a unit it calls hooks->acquire(),
 * and it tells the runtime when it is done with it (forward) or when that
 * unit's gradients are complete (backward): that is where FSDP gathers and
 * reduce-scatters (runtime/fsdp.c). Expert parallelism reaches the runtime
 * the same way, through the dispatch/combine hooks (LlamaParamHooks).
 *
 * Unit layout (shapes as (rows, cols), row-major, y = x W^T for (out, in)):
 *   unit 0:  tok_emb (V, C) [| final_norm (C), if tied]
 *   head:    final_norm (C) | lm_head (V, C)   (untied only: the last unit)
 *   block:   attn_norm (C) | wq (H*hd, C) | wk (KV*hd, C) | wv (KV*hd, C) |
 *            [q_norm (hd) | k_norm (hd), if qk_norm] | wo (C, H*hd) | mlp_norm (C) |
 *            dense: w_gate (F, C) | w_up (F, C) | w_down (C, F)
 *            MoE:   router (E, C)
 *   experts: for e = 0..E-1: w_gate (Fe, C) | w_up (Fe, C) | w_down (C, Fe)
 *            (expert-major, so a range of experts is a contiguous slice)
 * with C = dim, H = n_heads, KV = n_kv_heads, hd = head_dim (default C / H),
 * F = ffn_hidden, E = n_experts, Fe = moe_ffn_hidden.
 */
#ifndef MODELS_LLAMA_H
#define MODELS_LLAMA_H
#include <stddef.h>
#include <stdint.h>

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
    int head_dim;        /* hd; 0: dim / n_heads (Qwen3 sets it apart from dim) */
    int qk_norm;         /* 1: RMSNorm (eps norm_eps) over hd on q and k heads */
    /* mixture of experts; n_experts = 0: every MLP is dense */
    int n_experts;           /* E */
    int n_experts_per_tok;   /* k, top-k, 1 <= k <= E */
    int moe_ffn_hidden;      /* Fe */
    int decoder_sparse_step; /* >= 1 */
    int norm_topk_prob;      /* 1: the k weights are divided by their sum */
    float router_aux_loss_coef;    /* weight of the load-balancing loss (HF 0.001) */
    float capacity_factor;         /* 0: dropless; else an expert takes at most
                                    * ceil(cf * N * k / E) of a micro-batch's pairs
                                    * on each rank, in token order, and drops the rest */
    uint64_t mlp_only_layers[4];   /* bit l: block l (< 256) keeps a dense MLP */
} LlamaConfig;

/* Head dimension (head_dim, or dim / n_heads when 0). */
int llama_head_dim(const LlamaConfig* cfg);
/* 1 if block l has a mixture-of-experts MLP. */
int llama_layer_is_moe(const LlamaConfig* cfg, int layer);

/* Validate shapes; returns 0 and writes nothing on success, else writes a
 * message into err (size errlen) and returns -1. */
int llama_config_check(const LlamaConfig* cfg, char* err, size_t errlen);

/* Units: 0, blocks 1..L, then one expert unit per MoE block in layer order,
 * then (untied) the head.
 * llama_expert_unit: the expert unit of block `layer`, or -1 (dense block);
 * llama_unit_layer: the block a unit belongs to (-1 for unit 0 and the head);
 * llama_head_unit: the unit holding the final norm and the head's weights
 * (0 when tied). */
int llama_num_units(const LlamaConfig* cfg);
int llama_head_unit(const LlamaConfig* cfg);
int llama_expert_unit(const LlamaConfig* cfg, int layer);
int llama_unit_is_experts(const LlamaConfig* cfg, int unit);
int llama_unit_layer(const LlamaConfig* cfg, int unit);

/* Parameter counts. */
size_t llama_unit_numel(const LlamaConfig* cfg, int unit); /* unit 0..num_units-1 */
size_t llama_expert_numel(const LlamaConfig* cfg);        /* one expert: 3 Fe C */
size_t llama_num_params(const LlamaConfig* cfg);          /* sum over units */
/* Parameters one token's forward multiplies with (all experts counted k of
 * E): what FLOPs follow. */
size_t llama_active_params(const LlamaConfig* cfg);
/* Name and element count of each tensor of a unit, in layout order, for
 * checkpoints: returns the number of tensors (also when it exceeds max: an
 * expert unit has 3 E); fills names ("layers.3.wq", "tok_emb",
 * "layers.1.experts.5.w_up", ...) and shapes (rows, cols; cols = 1 for
 * vectors) of the first max. Any of names, rows, cols may be NULL. */
int llama_unit_tensors(const LlamaConfig* cfg, int unit, char names[][64], size_t rows[],
                       size_t cols[], int max);

/* Deterministic init of a whole unit from a seed (same on every rank and
 * every rank count): normal(0, 0.02) for matrices, residual projections
 * (wo, w_down) scaled by 1/sqrt(2L), ones for norms. */
void llama_unit_init(const LlamaConfig* cfg, int unit, unsigned long long seed, float* params);

/* FLOPs of one training step (forward + backward) per token, for MFU. */
double llama_flops_per_token(const LlamaConfig* cfg, int seq_len);

/* How the activations trade memory for compute (train.recompute, and the
 * output layer's chunk). Zero-initialised: keep everything, chunk by size. */
typedef struct {
    int recompute;   /* 0: the forward keeps every tensor the backward reads;
                      * 1 (full): a block keeps only its input, and its
                      * backward first runs its forward again (same kernels,
                      * same inputs: the same bits). A MoE block's routing
                      * and the rows its experts received are kept (no
                      * second exchange); its attention, router input and
                      * the experts' gate, up and hid are recomputed. */
    int logits_rows; /* token rows of the output layer at once; 0: as many as
                      * fit 128 MiB of logits (all of them in small models:
                      * the bits of an unchunked layer). Logits, loss and
                      * dlogits never exist for more rows than this. */
    int expert_exchange; /* 1: the hooks move MoE rows to other ranks
                          * (dispatch, EP > 1): the rows sent are not kept
                          * (the experts read the received copy), one
                          * buffer for all blocks; the step then fails
                          * without dispatch hooks */
} LlamaMemOpts;

/* Bytes of activation memory llama_acts_alloc() needs for (B, T) on
 * backend K (its attention scratch differs), and with options (NULL: the
 * defaults). */
struct ZrtKernels_;
size_t llama_acts_bytes(const LlamaConfig* cfg, int B, int T, const struct ZrtKernels_* K);
size_t llama_acts_bytes_opts(const LlamaConfig* cfg, int B, int T, const struct ZrtKernels_* K,
                             const LlamaMemOpts* opts);

typedef struct LlamaActs LlamaActs; /* opaque, model-owned activations */
/* On backend K (kernels.h, in its device's memory): the step runs every
 * kernel on K, and the hooks must hand over parameters and gradient
 * buffers in K's memory (and, with the expert-exchange hooks, rows in K's
 * memory). NULL on OOM. */
LlamaActs* llama_acts_alloc(const LlamaConfig* cfg, int B, int T, const struct ZrtKernels_* K);
/* With options (NULL: the defaults; recompute other than 0 or 1: NULL). */
LlamaActs* llama_acts_alloc_opts(const LlamaConfig* cfg, int B, int T,
                                 const struct ZrtKernels_* K, const LlamaMemOpts* opts);
void llama_acts_free(LlamaActs* acts);
/* Where the following steps put their loss: sum (one double of the acts'
 * backend memory) receives each step's summed loss over its counted
 * targets (targets >= 0), and the step returns 0 instead of the mean loss,
 * reading nothing back; the caller reads several steps' sums in one copy
 * and divides each by its count (the trainer: one copy per optimizer
 * step). NULL (the default): each step reads its loss back and returns
 * the mean. */
void llama_acts_set_loss_sink(LlamaActs* acts, double* sum);
/* on: the following steps copy their tokens and targets up without waiting
 * for the copies, so the caller must leave those host buffers unchanged
 * until it has waited for the device after the step (a read-back does:
 * the trainer rewrites a micro-batch's buffers a step later, after the
 * step's loss came back), and on a device they should be pinned memory
 * (zdev_host_alloc). 0 (the default): each step's copies are done when it
 * returns. */
void llama_acts_set_async_batch(LlamaActs* acts, int on);

/* The load-balancing loss of the last llama_step on these activations
 * (before its coefficient; 0 for dense models), and the tokens routed to
 * each expert there, summed over MoE layers: counts (E). */
float llama_acts_aux_loss(const LlamaActs* acts);
const long long* llama_acts_expert_tokens(const LlamaActs* acts);
/* The routing of MoE block i (0-based among the MoE blocks) in the last
 * llama_step: choices (N, k) the experts each token chose, by descending
 * probability; routed (E) the pairs each expert was chosen for; dropped the
 * pairs the capacity limit left uncomputed. Returns 0, or -1 (no such block). */
typedef struct {
    const int* choices;
    const int* routed;
    long long dropped;
} LlamaMoeRouting;
int llama_acts_routing(const LlamaActs* acts, int moe_block, LlamaMoeRouting* out);

/* How the model gets its parameters and hands back gradients. */
typedef struct {
    void* ctx;
    /* Full (gathered) parameters of `unit`, valid until release(): fp32, or
     * bf16 (uint16_t) when bf16_units is 1. phase is 0 for the forward pass
     * and 1 for the backward pass. */
    const void* (*acquire)(void* ctx, int unit, int phase);
    /* 1: acquire() hands every unit over in bf16 (FSDP's bf16 gathers keep
     * them so, models/weights.h); the step has the bits of one given their
     * fp32 widenings. 0: fp32. */
    int bf16_units;
    /* Done reading `unit` in this phase (forward: may reshard). */
    void (*release)(void* ctx, int unit, int phase);
    /* Full-size gradient buffer of `unit` (the model ACCUMULATES into it). */
    float* (*grad_buffer)(void* ctx, int unit);
    /* All gradients of `unit` for this micro-batch are in its grad buffer. */
    void (*grads_ready)(void* ctx, int unit);
    /* Expert parallelism (MoE blocks). NULL: every expert is computed here,
     * and acquire() of an expert unit returns all E experts.
     * The exchange of a block comes in chunks, so that the runtime can move
     * one chunk while the experts compute another (Tutel-style pipelining);
     * how many, and what is in flight when, is the runtime's choice:
     * dispatch: `rows` (n, C) of block `layer`, grouped by expert in global
     *   expert order with counts (E), start towards the ranks that own their
     *   experts. On return this rank's experts will compute *n_recv rows in
     *   *n_chunks (>= 1) chunks; acquire() of the expert unit returns its
     *   *n_local experts, the first being global expert *first_expert.
     *   `rows` stays untouched until the last dispatch_wait.
     * dispatch_wait: chunk `chunk` has arrived: *recv (*n_recv, C) grouped by
     *   local expert with recv_counts (n_local); valid until combine.
     * combine_send: the experts' outputs of that chunk, `local` laid out as
     *   its *recv, start back to where dispatch took each row from, into
     *   `rows` (n, C), the same buffer for every chunk of the block;
     * combine: every chunk is back in rows.
     * The model calls dispatch, then for chunk 0, 1, ...: dispatch_wait and
     * combine_send, then combine (order in llama_step below). phase 0 moves
     * activations (forward), phase 1 the gradients of the expert outputs
     * (backward), chunked as the forward was. Each returns 0, or -1 (the
     * step fails). All four, or none. */
    int (*dispatch)(void* ctx, int layer, int phase, const float* rows, const int* counts, int C,
                    int* n_chunks, int* n_recv, int* n_local, int* first_expert);
    int (*dispatch_wait)(void* ctx, int layer, int phase, int chunk, const float** recv,
                         int* n_recv, const int** recv_counts);
    int (*combine_send)(void* ctx, int layer, int phase, int chunk, const float* local,
                        float* rows);
    int (*combine)(void* ctx, int layer, int phase, float* rows);
    /* train.rank_invariant (EP > 1; NULL otherwise, or returning NULL): the
     * rows of chunk `chunk` by source rank, (*n_src, n_local) rows from
     * source s for local expert j at [s * n_local + j], valid with the
     * chunk. The experts then run one GEMM per (expert, source), the shape
     * the source's rows have at EP = 1, and each expert's weight gradient
     * is its sources' gradients added in a binary tree over s (pairs at
     * distance 1, 2, ...), the leaves and nodes rounded to bf16 values when
     * grad_tree_bf16 (models/moe.c). */
    const int* (*dispatch_sources)(void* ctx, int layer, int chunk, int* n_src);
    int grad_tree_bf16;
    /* The load-balancing loss's batch (MoE). NULL: this micro-batch. Else
     * called once per step with a backward, after the last block's forward,
     * with `stats` (n) this micro-batch's numbers the aux loss is made of
     * (per expert: (token, slot) pairs, router probabilities summed; rows),
     * which it replaces by their sums over the micro-batches the aux loss is
     * to cover, the same on every participant (added in a fixed order: the
     * result is deterministic). The aux loss is then that batch's, and the
     * gradient the one a participant takes when the participants' gradients
     * are meaned (models/moe.c). Returns 0, or -1 (the step fails). */
    int (*aux_reduce)(void* ctx, double* stats, int n);
} LlamaParamHooks;

/* One micro-batch: forward, loss, and (if backward) backward.
 * tokens, targets: (B, T) int32; targets < 0 are ignored (no loss).
 * Returns the mean cross-entropy over counted targets. If logits_out is not
 * NULL (host memory) it receives (B, T, V) logits (for reference checks).
 * Unit order: forward acquires 0, 1..L, then 0 again for the head;
 * backward walks 0 (head), L..1, 0 (embedding), calling grads_ready(unit) as
 * soon as a unit's gradients are final for this micro-batch. A MoE block
 * acquires its expert unit while it holds the block, after the dispatch,
 * then (backward: grad_buffer of the expert unit) dispatch_wait(c) and
 * combine_send(c) for each chunk c, and releases it (backward: after its
 * grads_ready) before the combine, forward and backward alike; the expert
 * unit's grads_ready comes before the block's. The embedding
 * backward reads no parameters, so it calls only grad_buffer(0) and
 * grads_ready(0), no acquire (exact sequence: docs/MODEL.md). Bad input
 * (token/target out of range, B or T over the acts capacity) returns NaN
 * before any hook is called, with a message on stderr. */
float llama_step(const LlamaConfig* cfg, LlamaActs* acts, const int* tokens, const int* targets,
                 int B, int T, const LlamaParamHooks* hooks, int backward, float* logits_out);

#endif
