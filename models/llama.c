/*
 * llama.c — the decoders of llama.h (Llama-3, Qwen3, Qwen3-MoE): parameter
 * layout, deterministic init, forward, backward, and the activation arena.
 *
 * Read top to bottom: configuration checks and parameter layout, init, the
 * activation layout (one allocation, a pointer table computed per step),
 * block_forward / block_backward, then llama_step, which walks the units in
 * the order documented in llama.h and talks to the runtime only through the
 * hooks. All compute goes through the kernel table (kernels/kernels.h); the
 * MoE MLP lives in moe.c.
 *
 * Memory discipline (FSDP frees gathered parameters between passes): the
 * forward keeps every activation the backward reads and nothing else, or,
 * with recomputation (LlamaMemOpts.recompute), only each block's input:
 * the backward then runs the block's forward again into one block's worth
 * of buffers before its backward (a MoE block's expert MLP keeps its
 * activations: recomputing it would repeat the expert exchange). Attention
 * keeps its (B, H, T) log-sum-exp, never (T, T) probabilities, and the
 * output layer computes logits, loss and dlogits a chunk of token rows at
 * a time, in the backward's hold of the head (no (N, V) tensor). The
 * backward re-acquires each unit with phase 1 and never holds a parameter
 * pointer across release().
 *
 * Backend memory (kernels.h): the arena, the tokens and every parameter and
 * gradient pointer the hooks hand over belong to the table the activations
 * were allocated on (llama_acts_alloc); this file touches them only
 * through that table, and so does moe.c.
 *
 * Parameters come in fp32, or in bf16 when FSDP gathered them so
 * (LlamaParamHooks.bf16_units): the blocks read them through weights.h
 * (BlockParams below), the same bits either way.
 *
 * Leaves out: KV cache / inference, dropout, biases, sequence packing
 * (every row of the batch is one sequence starting at position 0),
 * and recomputing part of a block (selective).
 */
#include "llama.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "moe.h"
#include "weights.h"

/* --------------------------------------------------------------- config */

int llama_config_check(const LlamaConfig* cfg, char* err, size_t errlen) {
#define BAD(...)                                              \
    do {                                                      \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
        return -1;                                            \
    } while (0)
    if (!cfg) BAD("llama config: NULL");
    if (cfg->vocab_size <= 0) BAD("llama config: vocab_size must be > 0 (got %d)", cfg->vocab_size);
    if (cfg->dim <= 0) BAD("llama config: dim must be > 0 (got %d)", cfg->dim);
    if (cfg->n_layers <= 0) BAD("llama config: n_layers must be > 0 (got %d)", cfg->n_layers);
    if (cfg->n_heads <= 0) BAD("llama config: n_heads must be > 0 (got %d)", cfg->n_heads);
    if (cfg->n_kv_heads <= 0)
        BAD("llama config: n_kv_heads must be > 0 (got %d)", cfg->n_kv_heads);
    if (!cfg->head_dim && cfg->dim % cfg->n_heads)
        BAD("llama config: dim %d is not a multiple of n_heads %d (or set head_dim)", cfg->dim,
            cfg->n_heads);
    if (cfg->n_heads % cfg->n_kv_heads)
        BAD("llama config: n_kv_heads %d does not divide n_heads %d", cfg->n_kv_heads,
            cfg->n_heads);
    if (!cfg->head_dim && (cfg->dim / cfg->n_heads) % 2)
        BAD("llama config: head dim %d (dim/n_heads) must be even for RoPE pairs",
            cfg->dim / cfg->n_heads);
    if (cfg->ffn_hidden <= 0) BAD("llama config: ffn_hidden must be > 0 (got %d)", cfg->ffn_hidden);
    if (cfg->max_seq_len <= 0)
        BAD("llama config: max_seq_len must be > 0 (got %d)", cfg->max_seq_len);
    if (!(cfg->rope_theta > 1.0f) || !isfinite(cfg->rope_theta))
        BAD("llama config: rope_theta must be a finite number > 1 (got %g)",
            (double)cfg->rope_theta);
    if (!(cfg->norm_eps > 0.0f) || !(cfg->norm_eps < 1.0f))
        BAD("llama config: norm_eps must be in (0, 1) (got %g)", (double)cfg->norm_eps);
    if (cfg->tie_embeddings != 0 && cfg->tie_embeddings != 1)
        BAD("llama config: tie_embeddings must be 0 or 1 (got %d)", cfg->tie_embeddings);
    if (cfg->head_dim < 0 || cfg->head_dim % 2)
        BAD("llama config: head_dim must be 0 (dim / n_heads) or an even number > 0 (got %d)",
            cfg->head_dim);
    if (cfg->qk_norm != 0 && cfg->qk_norm != 1)
        BAD("llama config: qk_norm must be 0 or 1 (got %d)", cfg->qk_norm);
    if (cfg->n_experts < 0) BAD("llama config: n_experts must be >= 0 (got %d)", cfg->n_experts);
    if (cfg->n_experts > 0) {
        if (cfg->n_experts_per_tok < 1 || cfg->n_experts_per_tok > cfg->n_experts)
            BAD("llama config: n_experts_per_tok must be in [1, n_experts = %d] (got %d)",
                cfg->n_experts, cfg->n_experts_per_tok);
        if (cfg->moe_ffn_hidden <= 0)
            BAD("llama config: moe_ffn_hidden must be > 0 (got %d)", cfg->moe_ffn_hidden);
        if (cfg->decoder_sparse_step < 1)
            BAD("llama config: decoder_sparse_step must be >= 1 (got %d)",
                cfg->decoder_sparse_step);
        if (cfg->norm_topk_prob != 0 && cfg->norm_topk_prob != 1)
            BAD("llama config: norm_topk_prob must be 0 or 1 (got %d)", cfg->norm_topk_prob);
        if (!(cfg->capacity_factor >= 0.0f) || !isfinite(cfg->capacity_factor))
            BAD("llama config: capacity_factor must be 0 (dropless) or a finite number > 0 (got "
                "%g)",
                (double)cfg->capacity_factor);
        if (!(cfg->router_aux_loss_coef >= 0.0f) || !isfinite(cfg->router_aux_loss_coef))
            BAD("llama config: router_aux_loss_coef must be a finite number >= 0 (got %g)",
                (double)cfg->router_aux_loss_coef);
        if (cfg->n_layers > 256)
            BAD("llama config: MoE models have at most 256 layers here (got %d)", cfg->n_layers);
        if ((double)cfg->moe_ffn_hidden * cfg->dim > 2147483647.0)
            BAD("llama config: an expert matrix has more than 2^31-1 elements (Fe*C)");
    }
    // BLAS takes int dimensions and leading dimensions
    const double big = 2147483647.0;
    if ((double)cfg->vocab_size * cfg->dim > big || (double)cfg->ffn_hidden * cfg->dim > big ||
        (double)llama_head_dim(cfg) * cfg->n_heads * cfg->dim > big)
        BAD("llama config: a weight matrix has more than 2^31-1 elements (V*C, F*C or H*hd*C)");
    return 0;
#undef BAD
}

/* ------------------------------------------------------ parameter layout */

int llama_head_dim(const LlamaConfig* cfg) {
    return cfg->head_dim ? cfg->head_dim : cfg->dim / cfg->n_heads;
}

int llama_layer_is_moe(const LlamaConfig* cfg, int layer) {
    if (cfg->n_experts <= 0 || layer < 0 || layer >= cfg->n_layers || layer >= 256) return 0;
    if (cfg->mlp_only_layers[layer / 64] >> (layer % 64) & 1) return 0;
    return (layer + 1) % cfg->decoder_sparse_step == 0;
}

static int n_moe_layers(const LlamaConfig* cfg) {
    int n = 0;
    for (int l = 0; l < cfg->n_layers; l++) n += llama_layer_is_moe(cfg, l);
    return n;
}

int llama_num_units(const LlamaConfig* cfg) {
    return 1 + cfg->n_layers + n_moe_layers(cfg) + !cfg->tie_embeddings;
}

int llama_head_unit(const LlamaConfig* cfg) {
    return cfg->tie_embeddings ? 0 : 1 + cfg->n_layers + n_moe_layers(cfg);
}

int llama_expert_unit(const LlamaConfig* cfg, int layer) {
    if (!llama_layer_is_moe(cfg, layer)) return -1;
    int u = 1 + cfg->n_layers;
    for (int l = 0; l < layer; l++) u += llama_layer_is_moe(cfg, l);
    return u;
}

int llama_unit_is_experts(const LlamaConfig* cfg, int unit) {
    return unit > cfg->n_layers && unit < 1 + cfg->n_layers + n_moe_layers(cfg);
}

int llama_unit_layer(const LlamaConfig* cfg, int unit) {
    if (unit >= 1 && unit <= cfg->n_layers) return unit - 1;
    for (int l = 0; l < cfg->n_layers; l++)
        if (llama_expert_unit(cfg, l) == unit) return l;
    return -1;
}

/* Offsets (in floats) of the tensors of block l inside its unit; the same
 * layout serves parameters and gradients. A tensor a block does not have
 * has the size 0 (its offset equals the next one's). */
typedef struct {
    size_t attn_norm, wq, wk, wv, q_norm, k_norm, wo, mlp_norm, w_gate, w_up, w_down, router,
        total;
} BlockLayout;

static BlockLayout block_layout(const LlamaConfig* cfg, int layer) {
    const size_t C = cfg->dim, hd = llama_head_dim(cfg), QD = hd * cfg->n_heads,
                 KVD = hd * cfg->n_kv_heads, F = cfg->ffn_hidden, E = cfg->n_experts;
    const int moe = llama_layer_is_moe(cfg, layer), qkn = cfg->qk_norm;
    BlockLayout b;
    size_t o = 0;
    b.attn_norm = o, o += C;                  // (C)
    b.wq = o, o += QD * C;                    // (H*hd, C)
    b.wk = o, o += KVD * C;                   // (KV*hd, C)
    b.wv = o, o += KVD * C;                   // (KV*hd, C)
    b.q_norm = o, o += qkn ? hd : 0;          // (hd)
    b.k_norm = o, o += qkn ? hd : 0;          // (hd)
    b.wo = o, o += C * QD;                    // (C, H*hd)
    b.mlp_norm = o, o += C;                   // (C)
    b.w_gate = o, o += moe ? 0 : F * C;       // (F, C)
    b.w_up = o, o += moe ? 0 : F * C;         // (F, C)
    b.w_down = o, o += moe ? 0 : C * F;       // (C, F)
    b.router = o, o += moe ? E * C : 0;       // (E, C)
    b.total = o;
    return b;
}

/* Offsets inside the head unit (llama_head_unit). Tied: unit 0 is
 * tok_emb (V, C) | final_norm (C) and the head's weights are tok_emb;
 * untied: the head unit is final_norm (C) | lm_head (V, C). */
static size_t head_final_norm(const LlamaConfig* cfg) {
    return cfg->tie_embeddings ? (size_t)cfg->vocab_size * cfg->dim : 0;
}
static size_t head_lm_head(const LlamaConfig* cfg) {
    return cfg->tie_embeddings ? 0 : (size_t)cfg->dim;
}

size_t llama_expert_numel(const LlamaConfig* cfg) {
    return 3 * (size_t)cfg->moe_ffn_hidden * cfg->dim;
}

size_t llama_unit_numel(const LlamaConfig* cfg, int unit) {
    if (unit < 0 || unit >= llama_num_units(cfg)) return 0;
    if (llama_unit_is_experts(cfg, unit)) return (size_t)cfg->n_experts * llama_expert_numel(cfg);
    const size_t VC = (size_t)cfg->vocab_size * cfg->dim;
    if (unit > 0 && unit == llama_head_unit(cfg)) return (size_t)cfg->dim + VC;
    if (unit > 0) return block_layout(cfg, unit - 1).total;
    return VC + (cfg->tie_embeddings ? (size_t)cfg->dim : 0);
}

size_t llama_num_params(const LlamaConfig* cfg) {
    size_t n = 0;
    for (int u = 0; u < llama_num_units(cfg); u++) n += llama_unit_numel(cfg, u);
    return n;
}

size_t llama_active_params(const LlamaConfig* cfg) {
    size_t n = llama_num_params(cfg);
    const size_t idle = (size_t)(cfg->n_experts - cfg->n_experts_per_tok) * llama_expert_numel(cfg);
    if (cfg->n_experts > 0) n -= (size_t)n_moe_layers(cfg) * idle;
    return n;
}

int llama_unit_tensors(const LlamaConfig* cfg, int unit, char names[][64], size_t rows[],
                       size_t cols[], int max) {
    const size_t C = cfg->dim, hd = llama_head_dim(cfg), QD = hd * cfg->n_heads,
                 KVD = hd * cfg->n_kv_heads, F = cfg->ffn_hidden, V = cfg->vocab_size,
                 E = cfg->n_experts, Fe = cfg->moe_ffn_hidden;
    int n = 0;
#define ADD(r, c, ...)                                               \
    do {                                                             \
        if (n < max) {                                               \
            if (names) snprintf(names[n], 64, __VA_ARGS__);          \
            if (rows) rows[n] = (r);                                 \
            if (cols) cols[n] = (c);                                 \
        }                                                            \
        n++;                                                         \
    } while (0)
    if (unit < 0 || unit >= llama_num_units(cfg)) return 0;
    if (unit == 0) {
        ADD(V, C, "tok_emb");
        if (cfg->tie_embeddings) ADD(C, 1, "final_norm");
        return n;
    }
    if (unit == llama_head_unit(cfg)) {
        ADD(C, 1, "final_norm");
        ADD(V, C, "lm_head");
        return n;
    }
    const int l = llama_unit_layer(cfg, unit);
    if (llama_unit_is_experts(cfg, unit)) {
        for (size_t e = 0; e < E; e++) {
            ADD(Fe, C, "layers.%d.experts.%zu.w_gate", l, e);
            ADD(Fe, C, "layers.%d.experts.%zu.w_up", l, e);
            ADD(C, Fe, "layers.%d.experts.%zu.w_down", l, e);
        }
        return n;
    }
    const int moe = llama_layer_is_moe(cfg, l);
    ADD(C, 1, "layers.%d.attn_norm", l);
    ADD(QD, C, "layers.%d.wq", l);
    ADD(KVD, C, "layers.%d.wk", l);
    ADD(KVD, C, "layers.%d.wv", l);
    if (cfg->qk_norm) {
        ADD(hd, 1, "layers.%d.q_norm", l);
        ADD(hd, 1, "layers.%d.k_norm", l);
    }
    ADD(C, QD, "layers.%d.wo", l);
    ADD(C, 1, "layers.%d.mlp_norm", l);
    if (moe) {
        ADD(E, C, "layers.%d.router", l);
    } else {
        ADD(F, C, "layers.%d.w_gate", l);
        ADD(F, C, "layers.%d.w_up", l);
        ADD(C, F, "layers.%d.w_down", l);
    }
    return n;
#undef ADD
}

/* ------------------------------------------------------------------ init */

/* splitmix64: tiny, good enough for init, and identical everywhere */
static uint64_t splitmix64(uint64_t* s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* normal(0, std) by Box-Muller in double, one value per call (no caching,
 * so a tensor's values depend only on the seed and its position) */
static void fill_normal(float* x, size_t n, float std, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        double u1 = ((splitmix64(&s) >> 11) + 1.0) * (1.0 / 9007199254740993.0); // (0, 1]
        double u2 = (splitmix64(&s) >> 11) * (1.0 / 9007199254740992.0);         // [0, 1)
        x[i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2));
    }
}

static void fill_ones(float* x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = 1.0f;
}

void llama_unit_init(const LlamaConfig* cfg, int unit, unsigned long long seed, float* params) {
    const float std = 0.02f, std_resid = 0.02f / sqrtf(2.0f * (float)cfg->n_layers);
    // each tensor gets its own stream: seed, unit and tensor index mixed (the
    // head's tensors keep unit 0's streams, where they lived before it split)
    const int head = unit > 0 && unit == llama_head_unit(cfg);
    uint64_t base = (uint64_t)seed * 0x100000001b3ull ^ ((uint64_t)(head ? 0 : unit) << 32);
#define STREAM(i) (base + 0x9e3779b97f4a7c15ull * (uint64_t)((i) + 1))
    const size_t VC = (size_t)cfg->vocab_size * cfg->dim;
    if (unit == 0) {
        fill_normal(params, VC, std, STREAM(0));
        if (cfg->tie_embeddings) fill_ones(params + head_final_norm(cfg), (size_t)cfg->dim);
        return;
    }
    if (head) {
        fill_ones(params + head_final_norm(cfg), (size_t)cfg->dim);
        fill_normal(params + head_lm_head(cfg), VC, std, STREAM(2));
        return;
    }
    if (llama_unit_is_experts(cfg, unit)) {
        const size_t FC = (size_t)cfg->moe_ffn_hidden * cfg->dim;
        for (int e = 0; e < cfg->n_experts; e++) {
            float* p = params + (size_t)e * llama_expert_numel(cfg);
            fill_normal(p, FC, std, STREAM(3 * e));
            fill_normal(p + FC, FC, std, STREAM(3 * e + 1));
            fill_normal(p + 2 * FC, FC, std_resid, STREAM(3 * e + 2));
        }
        return;
    }
    const BlockLayout b = block_layout(cfg, unit - 1);
    fill_ones(params + b.attn_norm, b.wq - b.attn_norm);
    fill_normal(params + b.wq, b.wk - b.wq, std, STREAM(1));
    fill_normal(params + b.wk, b.wv - b.wk, std, STREAM(2));
    fill_normal(params + b.wv, b.q_norm - b.wv, std, STREAM(3));
    fill_ones(params + b.q_norm, b.wo - b.q_norm); // q_norm and k_norm
    fill_normal(params + b.wo, b.mlp_norm - b.wo, std_resid, STREAM(4));
    fill_ones(params + b.mlp_norm, b.w_gate - b.mlp_norm);
    fill_normal(params + b.w_gate, b.w_up - b.w_gate, std, STREAM(6));
    fill_normal(params + b.w_up, b.w_down - b.w_up, std, STREAM(7));
    fill_normal(params + b.w_down, b.router - b.w_down, std_resid, STREAM(8));
    fill_normal(params + b.router, b.total - b.router, std, STREAM(9));
#undef STREAM
}

/* ----------------------------------------------------------------- FLOPs */

double llama_flops_per_token(const LlamaConfig* cfg, int seq_len) {
    // 6 N + 12 L T d_attn (the PaLM / llm.c accounting): N counts the
    // parameters that take part in a matmul (all block matrices and the LM
    // head; the embedding lookup and norms are not matmuls); the second term
    // is QK^T and PV, forward (2 x 2 T d) plus backward (2x forward), over the
    // full T x T square, which is also what the kernels compute.
    // A MoE block counts its router and the k experts a token visits.
    const double C = cfg->dim, hd = llama_head_dim(cfg), QD = hd * cfg->n_heads,
                 KVD = hd * cfg->n_kv_heads, F = cfg->ffn_hidden, L = cfg->n_layers;
    const double n_moe = n_moe_layers(cfg), attn = 2.0 * QD * C + 2.0 * KVD * C,
                 moe = cfg->n_experts * C + cfg->n_experts_per_tok * 3.0 * cfg->moe_ffn_hidden * C;
    const double n_matmul = L * attn + (L - n_moe) * 3.0 * F * C + n_moe * moe +
                            (double)cfg->vocab_size * C;
    return 6.0 * n_matmul + 12.0 * L * (double)seq_len * QD;
}

/* ----------------------------------------------------------- activations */

/* Every tensor the forward saves for the backward, plus the backward's
 * scratch; N = B*T. Filled per step from the actual (B, T). With
 * recomputation the per-block tensors below resid have one block's slot
 * (L and Ld read 1), which every block's forward and recompute reuse; R is
 * the output layer's chunk of rows. */
typedef struct {
    float* resid;     // (L+1, N, C) residual stream: [0] embeddings, [l+1] block l out
    float* ln1;       // (L, N, C) attn_norm output
    float* ln1_rstd;  // (L, N)
    float* q;         // (L, N, H*hd) after QK-norm and RoPE
    float* k;         // (L, N, KV*hd) after QK-norm and RoPE
    float* q_raw;     // (L, N, H*hd) projection before QK-norm (qk_norm only)
    float* k_raw;     // (L, N, KV*hd)
    float* q_rstd;    // (L, N*H) QK-norm 1/rms per head
    float* k_rstd;    // (L, N*KV)
    float* v;         // (L, N, KV*hd)
    float* lse;       // (L, B, H, T) attention log-sum-exp per query row
    float* atty;      // (L, N, H*hd) attention output, input of wo
    float* resid_mid; // (L, N, C) residual after attention
    float* ln2;       // (L, N, C) mlp_norm output
    float* ln2_rstd;  // (L, N)
    float* gate;      // (Ld, N, F) x W_gate^T, Ld = dense blocks
    float* up;        // (Ld, N, F) x W_up^T
    float* hid;       // (Ld, N, F) silu(gate) * up, input of w_down
    float* lnf;       // (N, C) final_norm output
    float* lnf_rstd;  // (N)
    float* logits;    // (R, V) one chunk of logits; dlogits in place during backward
    float* losses;    // (N) per-token loss
    float* rope;      // (T, hd/2, 2) cos, sin
    // backward / scratch, shared by all layers
    float* dresid;    // (N, C) gradient of the residual stream
    float* dln;       // (N, C) gradient of a norm output; forward: projection temp
    float* dq;        // (N, H*hd)
    float* dk;        // (N, KV*hd)
    float* dq_raw;    // (N, H*hd) gradient before QK-norm (qk_norm only)
    float* dk_raw;    // (N, KV*hd)
    float* dv;        // (N, KV*hd)
    float* datty;     // (N, H*hd)
    float* dgate;     // (N, F)
    float* dup;       // (N, F)
    float* dhid;      // (N, F)
    float* att_scratch; // attention_scratch_floats(B, T, H, KV, hd)
    float* wvec;      // (3C + 2hd) the norm weights of a bf16 unit, widened:
                      // a block's attn_norm | q_norm | k_norm | mlp_norm, the head's final_norm
    // bf16 activations (acts_a16): these replace ln1, ln2 and hid, which
    // then have no room
    uint16_t* ln1_16; // (L, N, C)
    uint16_t* ln2_16; // (L, N, C) dense models only (moe.c reads ln2 in fp32)
    uint16_t* hid_16; // (Ld, N, F)
    uint16_t* lnf_16; // (N, C) the final norm's output, the head's input
    uint16_t* q_16;   // (L, N, H*hd) q, k, v after RoPE where attention runs on
    uint16_t* k_16;   // (L, N, KV*hd) tensor cores (ActA16.qkv); replace q, k, v
    uint16_t* v_16;   // (L, N, KV*hd)
} ActPtrs;

/* Which linear-layer inputs the arena keeps in bf16 (kernels.h, "bf16
 * activations"): with a table that has the a16 entries (the bf16 compute
 * tables), the attention norm's output ln1, the dense MLP's hidden state hid,
 * the final norm's output lnf (the head's input), q, k and v after RoPE
 * where attention runs on tensor cores (its flash kernels round them as
 * they load them; zrt_attention_bf16_head_dim) and, in a model without MoE
 * blocks, the MLP norm's output ln2 (moe.c's
 * router and gather read it in fp32). Nothing but GEMMs, which round their
 * inputs to bf16 anyway, reads these, so the step has the same bits in half
 * their memory, and each is rounded once instead of once per GEMM. */
typedef struct {
    int ln1, ln2, hid, lnf, qkv;
} ActA16;

static ActA16 acts_a16(const LlamaConfig* cfg, const ZrtKernels* K) {
    const int on = K->rmsnorm_forward_a16 && K->swiglu_forward_a16 && K->matmul_forward_a16 &&
                   K->matmul_backward_a16;
    const int qkv = on && K->rope_forward_a16 && K->attention_forward_a16 && K->attention_backward_a16 &&
                    zrt_attention_bf16_head_dim(llama_head_dim(cfg));
    return (ActA16){on, on && n_moe_layers(cfg) == 0, on, on, qkv};
}

struct LlamaActs {
    LlamaConfig cfg;
    const ZrtKernels* K; // the backend that owns mem, tok and tgt
    LlamaMemOpts opts;   // recompute, and logits_rows resolved for (B, T)
    int B, T;     // capacity this arena was sized for
    size_t bytes; // of mem, plus the MoE activations
    float* mem;   // backend memory: the activation arena
    int* tok;     // (B*T) backend copy of the step's tokens
    int* tgt;     // (B*T) backend copy of the step's targets
    MoeActs* moe; // the MoE blocks' activations (NULL for a dense model)
    int rope_B, rope_T; // the RoPE table in the arena is the last step's for (B, T);
                        // 0: none yet (only a step of another shape moves it)
    double* loss;       // (1) backend: the step's summed loss, read back by the step
    double* loss_sink;  // set (llama_acts_set_loss_sink): the caller's slot instead,
                        // and the step reads nothing back
    int async_batch;    // llama_acts_set_async_batch: the batch goes up without a wait
};

static MoeDims moe_dims(const LlamaConfig* cfg, int N, const LlamaMemOpts* o, const ZrtKernels* K) {
    return (MoeDims){N,        cfg->dim, cfg->n_experts, cfg->n_experts_per_tok,
                     cfg->moe_ffn_hidden, cfg->norm_topk_prob, cfg->capacity_factor,
                     o->expert_exchange, o->recompute, acts_a16(cfg, K).hid};
}

/* Index of block l among the dense blocks (for the dense MLP activations). */
static int dense_index(const LlamaConfig* cfg, int layer) {
    int i = 0;
    for (int l = 0; l < layer; l++) i += !llama_layer_is_moe(cfg, l);
    return i;
}

/* Lays the tensors out from offset 0, each on a 64-byte boundary; with
 * base == NULL only counts. Returns the number of floats. */
static size_t acts_layout(const LlamaConfig* cfg, const ZrtKernels* K, const LlamaMemOpts* mo,
                          int B, int T, float* base, ActPtrs* p) {
    const size_t Lall = cfg->n_layers, N = (size_t)B * T, C = cfg->dim, H = cfg->n_heads,
                 hd = llama_head_dim(cfg), KV = cfg->n_kv_heads, F = cfg->ffn_hidden,
                 V = cfg->vocab_size, Ldall = Lall - n_moe_layers(cfg), qn = cfg->qk_norm ? 1 : 0;
    const size_t Fd = Ldall ? F : 0; // dense-MLP backward scratch only with dense blocks
    // saved per block, or one block's slot with recomputation
    const size_t L = mo->recompute ? 1 : Lall, Ld = mo->recompute ? (Ldall ? 1 : 0) : Ldall;
    const size_t R = (size_t)mo->logits_rows;
    const ActA16 h = acts_a16(cfg, K);
    size_t o = 0;
    float** slots[] = {&p->resid,  &p->ln1,    &p->ln1_rstd,  &p->q,        &p->k,
                       &p->q_raw,  &p->k_raw,  &p->q_rstd,    &p->k_rstd,   &p->v,
                       &p->lse,    &p->atty,   &p->resid_mid, &p->ln2,      &p->ln2_rstd,
                       &p->gate,   &p->up,     &p->hid,       &p->lnf,      &p->lnf_rstd,
                       &p->logits, &p->losses, &p->rope,      &p->dresid,   &p->dln,
                       &p->dq,     &p->dk,     &p->dq_raw,    &p->dk_raw,   &p->dv,
                       &p->datty,  &p->dgate,  &p->dup,       &p->dhid,     &p->att_scratch,
                       &p->wvec};
    const size_t sizes[] = {(Lall + 1) * N * C,  !h.ln1 * L * N * C, L * N,
                            !h.qkv * L * N * H * hd, !h.qkv * L * N * KV * hd, qn * L * N * H * hd,
                            qn * L * N * KV * hd, qn * L * N * H,    qn * L * N * KV,
                            !h.qkv * L * N * KV * hd, L * B * H * T, L * N * H * hd,
                            L * N * C,           !h.ln2 * L * N * C, L * N,
                            Ld * N * F,          Ld * N * F,         !h.hid * Ld * N * F,
                            !h.lnf * N * C,      N,                  R * V,
                            N,                   T * hd,             N * C,
                            N * C,               N * H * hd,         N * KV * hd,
                            qn * N * H * hd,     qn * N * KV * hd,   N * KV * hd,
                            N * H * hd,          N * Fd,             N * Fd,
                            N * Fd,              K->attention_scratch_floats(B, T, (int)H, (int)KV, (int)hd),
                            3 * C + 2 * hd};
    _Static_assert(sizeof slots / sizeof slots[0] == sizeof sizes / sizeof sizes[0],
                   "one size per activation tensor");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        if (base) *slots[i] = base + o;
        o += (sizes[i] + 15) & ~(size_t)15;
    }
    // the bf16 tensors, two to a float; none without a16
    uint16_t** slots16[] = {&p->ln1_16, &p->ln2_16, &p->hid_16, &p->lnf_16, &p->q_16, &p->k_16, &p->v_16};
    const size_t sizes16[] = {h.ln1 * L * N * C, h.ln2 * L * N * C, h.hid * Ld * N * F, h.lnf * N * C,
                              h.qkv * L * N * H * hd, h.qkv * L * N * KV * hd, h.qkv * L * N * KV * hd};
    for (size_t i = 0; i < sizeof sizes16 / sizeof sizes16[0]; i++) {
        if (base) *slots16[i] = (uint16_t*)(base + o);
        o += ((sizes16[i] + 1) / 2 + 15) & ~(size_t)15;
    }
    return o;
}

/* The options with logits_rows resolved for N rows: at most LOGITS_FLOATS
 * floats of logits at once, whole when they fit (one chunk: the bits of an
 * unchunked output layer). */
enum { LOGITS_FLOATS = 32 << 20 }; /* 128 MiB of fp32 logits */
static LlamaMemOpts resolve_opts(const LlamaConfig* cfg, int N, const LlamaMemOpts* o) {
    LlamaMemOpts r = o ? *o : (LlamaMemOpts){0};
    if (r.logits_rows <= 0) {
        const long long fit = LOGITS_FLOATS / cfg->vocab_size;
        r.logits_rows = fit < 1 ? 1 : (int)fit;
    }
    if (r.logits_rows > N) r.logits_rows = N;
    return r;
}

size_t llama_acts_bytes(const LlamaConfig* cfg, int B, int T, const ZrtKernels* K) {
    return llama_acts_bytes_opts(cfg, B, T, K, NULL);
}

size_t llama_acts_bytes_opts(const LlamaConfig* cfg, int B, int T, const ZrtKernels* K,
                             const LlamaMemOpts* opts) {
    ActPtrs p;
    const LlamaMemOpts o = resolve_opts(cfg, B * T, opts);
    size_t bytes = acts_layout(cfg, K, &o, B, T, NULL, &p) * sizeof(float) +
                   2 * (size_t)B * T * sizeof(int);
    if (cfg->n_experts > 0) {
        const MoeDims d = moe_dims(cfg, B * T, &o, K);
        bytes += moe_acts_bytes(&d, n_moe_layers(cfg));
    }
    return bytes;
}

LlamaActs* llama_acts_alloc(const LlamaConfig* cfg, int B, int T, const ZrtKernels* K) {
    return llama_acts_alloc_opts(cfg, B, T, K, NULL);
}

LlamaActs* llama_acts_alloc_opts(const LlamaConfig* cfg, int B, int T, const ZrtKernels* K,
                                 const LlamaMemOpts* opts) {
    if (llama_config_check(cfg, NULL, 0) || B <= 0 || T <= 0 || T > cfg->max_seq_len || !K ||
        (opts && ((opts->recompute != 0 && opts->recompute != 1) ||
                  (opts->expert_exchange != 0 && opts->expert_exchange != 1))))
        return NULL;
    LlamaActs* a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->cfg = *cfg;
    a->K = K;
    a->opts = resolve_opts(cfg, B * T, opts);
    a->B = B;
    a->T = T;
    a->bytes = llama_acts_bytes_opts(cfg, B, T, K, opts);
    ActPtrs p;
    const size_t arena = acts_layout(cfg, K, &a->opts, B, T, NULL, &p) * sizeof(float);
    a->mem = zdev_alloc(K->dev, arena);
    a->tok = zdev_alloc(K->dev, (size_t)B * T * sizeof(int));
    a->tgt = zdev_alloc(K->dev, (size_t)B * T * sizeof(int));
    a->loss = zdev_alloc(K->dev, sizeof(double));
    if (a->mem && cfg->n_experts > 0) {
        const MoeDims d = moe_dims(cfg, B * T, &a->opts, K);
        a->moe = moe_acts_alloc(&d, n_moe_layers(cfg), K);
    }
    if (!a->mem || !a->tok || !a->tgt || !a->loss || (cfg->n_experts > 0 && !a->moe)) {
        llama_acts_free(a);
        return NULL;
    }
    return a;
}

void llama_acts_free(LlamaActs* acts) {
    if (!acts) return;
    moe_acts_free(acts->moe);
    if (acts->K) {
        zdev_free(acts->K->dev, acts->mem);
        zdev_free(acts->K->dev, acts->tok);
        zdev_free(acts->K->dev, acts->tgt);
        zdev_free(acts->K->dev, acts->loss);
    }
    free(acts);
}

void llama_acts_set_loss_sink(LlamaActs* acts, double* sum) { acts->loss_sink = sum; }

void llama_acts_set_async_batch(LlamaActs* acts, int on) { acts->async_batch = on; }

float llama_acts_aux_loss(const LlamaActs* acts) { return acts && acts->moe ? acts->moe->aux : 0; }

const long long* llama_acts_expert_tokens(const LlamaActs* acts) {
    return acts && acts->moe ? acts->moe->tokens_per_expert : NULL;
}

int llama_acts_routing(const LlamaActs* acts, int i, LlamaMoeRouting* out) {
    if (!acts || !acts->moe || i < 0 || i >= acts->moe->n_layers || !out) return -1;
    const MoeLayer* L = &acts->moe->layer[i];
    *out = (LlamaMoeRouting){L->sel_host, L->routed, L->dropped};
    return 0;
}

/* ---------------------------------------------------------------- blocks */

typedef struct {
    const LlamaConfig* cfg;
    const ZrtKernels* K;
    int B, T, N, C, H, KV, hd, F;
    int recompute;                // 1: per-block tensors in slot 0 (LlamaMemOpts)
    int bf16;                     // 1: the hooks hand units over in bf16 (weights.h)
    MoeActs* moe;                 // NULL for a dense model
    const LlamaParamHooks* hooks; // for the experts of MoE blocks
    ActA16 a16;                   // the inputs kept in bf16 (acts_a16)
} Dims;

/* rmsnorm_forward into either kind of tensor (Act, weights.h) */
static void act_rmsnorm(const ZrtKernels* K, Act out, float* rstd, const float* inp, const float* w, int N,
                        int C, float eps) {
    if (out.bf16) K->rmsnorm_forward_a16(out.bf16, rstd, inp, w, N, C, eps);
    else K->rmsnorm_forward(out.f32, rstd, inp, w, N, C, eps);
}

/* Where block l's saved tensors live: its own slot, or with recomputation
 * the one slot every block shares. */
static size_t slot(const Dims* d, int l) { return d->recompute ? 0 : (size_t)l; }
static size_t dense_slot(const Dims* d, int l) {
    return d->recompute ? 0 : (size_t)dense_index(d->cfg, l);
}

/* Block l's parameters as the block reads them: the matrices in the unit's
 * dtype (weights.h), the norm weights in fp32 (a bf16 unit's widened into
 * the arena's wvec, which the block keeps until its release). */
typedef struct {
    Weight wq, wk, wv, wo, w_gate, w_up, w_down, router;
    const float *attn_norm, *q_norm, *k_norm, *mlp_norm;
} BlockParams;

static BlockParams block_params(const Dims* d, const ActPtrs* a, int l, const void* unit) {
    const BlockLayout w = block_layout(d->cfg, l);
    const Weight u = weight_of(unit, d->bf16);
    BlockParams p = {weight_at(u, w.wq),     weight_at(u, w.wk),   weight_at(u, w.wv),
                     weight_at(u, w.wo),     weight_at(u, w.w_gate), weight_at(u, w.w_up),
                     weight_at(u, w.w_down), weight_at(u, w.router), NULL, NULL, NULL, NULL};
    const size_t at[4] = {w.attn_norm, w.q_norm, w.k_norm, w.mlp_norm};
    const size_t n[4] = {d->C, w.k_norm - w.q_norm, w.wo - w.k_norm, d->C}; // hd or 0
    const float** out[4] = {&p.attn_norm, &p.q_norm, &p.k_norm, &p.mlp_norm};
    float* v = a->wvec;
    for (int i = 0; i < 4; i++) {
        if (!d->bf16) {
            *out[i] = u.f32 + at[i];
            continue;
        }
        if (n[i]) d->K->bf16_to_float(v, u.bf16 + at[i], n[i]);
        *out[i] = v;
        v += n[i];
    }
    return p;
}

/* The head's final norm weight in fp32 (C): the unit's own, or a bf16
 * unit's widened past the block's part of wvec. */
static const float* head_norm(const Dims* d, const ActPtrs* a, const void* unit) {
    const Weight u = weight_at(weight_of(unit, d->bf16), head_final_norm(d->cfg));
    if (!d->bf16) return u.f32;
    float* v = a->wvec + 2 * (size_t)d->C + 2 * (size_t)d->hd;
    d->K->bf16_to_float(v, u.bf16, (size_t)d->C);
    return v;
}

/* One block forward: reads resid[l], writes resid[l+1] and the block's
 * saved activations. p: the block's parameters. again = 1 is the
 * backward's recomputation: the same kernels on the same inputs (the same
 * bits) refill what the block's backward reads, and resid[l+1], which it
 * does not read, is left alone (nor is a MoE block's expert MLP run again:
 * moe.c keeps its activations per block). Returns 0, or -1 (a MoE hook
 * failed; moe.c said why). */
static int block_forward(const Dims* d, const ActPtrs* a, int l, const BlockParams* p,
                         int again) {
    const ZrtKernels* K = d->K;
    const size_t N = d->N, C = d->C, QD = (size_t)d->H * d->hd, KVD = (size_t)d->KV * d->hd,
                 F = d->F, ld = dense_slot(d, l), sl = slot(d, l);
    const int qkn = d->cfg->qk_norm, moe = llama_layer_is_moe(d->cfg, l);
    const float eps = d->cfg->norm_eps;
    const float* x = a->resid + l * N * C;           // (N, C)
    float* out = a->resid + (l + 1) * N * C;         // (N, C)
    const Act ln1 = act_at(a->ln1, a->ln1_16, d->a16.ln1, sl * N * C); // (N, C)
    float* ln1_rstd = a->ln1_rstd + sl * N;          // (N)
    // q, k, v: fp32, or with bf16 q, k, v (ActA16.qkv) the backward's
    // scratch until RoPE rounds them into q_16, k_16, v_16
    const int a16 = d->a16.qkv;
    float* q = a16 ? a->dq : a->q + sl * N * QD;     // (N, H*hd)
    float* k = a16 ? a->dk : a->k + sl * N * KVD;    // (N, KV*hd)
    float* v = a16 ? a->dv : a->v + sl * N * KVD;    // (N, KV*hd)
    float* lse = a->lse + sl * N * d->H;             // (B, H, T)
    float* atty = a->atty + sl * N * QD;             // (N, H*hd)
    float* mid = a->resid_mid + sl * N * C;          // (N, C)
    const Act ln2 = act_at(a->ln2, a->ln2_16, d->a16.ln2, sl * N * C); // (N, C)
    float* ln2_rstd = a->ln2_rstd + sl * N;          // (N)
    float* tmp = a->dln;                             // (N, C) scratch

    act_rmsnorm(K, ln1, ln1_rstd, x, p->attn_norm, d->N, d->C, eps);
    if (qkn) { // project into q_raw/k_raw, then an RMSNorm per head into q/k
        float* q_raw = a->q_raw + sl * N * QD;      // (N, H*hd)
        float* k_raw = a->k_raw + sl * N * KVD;     // (N, KV*hd)
        act_linear_forward(K, q_raw, ln1, p->wq, d->N, d->C, (int)QD);
        act_linear_forward(K, k_raw, ln1, p->wk, d->N, d->C, (int)KVD);
        K->rmsnorm_forward(q, a->q_rstd + sl * N * d->H, q_raw, p->q_norm, d->N * d->H,
                           d->hd, eps);
        K->rmsnorm_forward(k, a->k_rstd + sl * N * d->KV, k_raw, p->k_norm, d->N * d->KV,
                           d->hd, eps);
    } else {
        act_linear_forward(K, q, ln1, p->wq, d->N, d->C, (int)QD);
        act_linear_forward(K, k, ln1, p->wk, d->N, d->C, (int)KVD);
    }
    act_linear_forward(K, v, ln1, p->wv, d->N, d->C, (int)KVD);
    if (a16) {
        uint16_t *q16 = a->q_16 + sl * N * QD, *k16 = a->k_16 + sl * N * KVD, *v16 = a->v_16 + sl * N * KVD;
        K->rope_forward_a16(q16, q, a->rope, d->B, d->T, d->H, d->hd);
        K->rope_forward_a16(k16, k, a->rope, d->B, d->T, d->KV, d->hd);
        K->round_to_bf16(v16, v, N * KVD);
        K->attention_forward_a16(atty, lse, q16, k16, v16, d->B, d->T, d->H, d->KV, d->hd, a->att_scratch);
    } else {
        K->rope_forward(q, a->rope, d->B, d->T, d->H, d->hd);
        K->rope_forward(k, a->rope, d->B, d->T, d->KV, d->hd);
        K->attention_forward(atty, lse, q, k, v, d->B, d->T, d->H, d->KV, d->hd, a->att_scratch);
    }
    linear_forward(K, tmp, atty, p->wo, d->N, (int)QD, d->C);
    K->add(mid, x, tmp, N * C);

    act_rmsnorm(K, ln2, ln2_rstd, mid, p->mlp_norm, d->N, d->C, eps);
    if (again && moe) return 0; // the experts' activations are kept (moe.c)
    if (moe) {
        const int eu = llama_expert_unit(d->cfg, l);
        if (moe_forward(d->moe, eu - 1 - d->cfg->n_layers, K, p->router, ln2.f32, tmp, d->hooks,
                        l, eu))
            return -1;
    } else {
        float* gate = a->gate + ld * N * F;          // (N, F)
        float* up = a->up + ld * N * F;              // (N, F)
        const Act hid = act_at(a->hid, a->hid_16, d->a16.hid, ld * N * F); // (N, F)
        act_linear_forward(K, gate, ln2, p->w_gate, d->N, d->C, d->F);
        act_linear_forward(K, up, ln2, p->w_up, d->N, d->C, d->F);
        act_swiglu(K, hid, gate, up, d->N, d->F);
        if (again) return 0; // the backward reads hid, not the block's output
        act_linear_forward(K, tmp, hid, p->w_down, d->N, d->F, d->C);
    }
    K->add(out, mid, tmp, N * C);
    return 0;
}

/* One block backward: on entry a->dresid holds dLoss/d resid[l+1]; on exit
 * dLoss/d resid[l]. Parameter gradients accumulate into g. Returns 0 or -1
 * (a MoE hook failed). */
static int block_backward(const Dims* d, const ActPtrs* a, int l, const BlockParams* p,
                          float* g) {
    const ZrtKernels* K = d->K;
    const BlockLayout w = block_layout(d->cfg, l);
    const size_t N = d->N, C = d->C, QD = (size_t)d->H * d->hd, KVD = (size_t)d->KV * d->hd,
                 F = d->F, ld = dense_slot(d, l), sl = slot(d, l);
    const int qkn = d->cfg->qk_norm, moe = llama_layer_is_moe(d->cfg, l);
    if (d->recompute && block_forward(d, a, l, p, 1)) return -1;
    const float* x = a->resid + l * N * C;
    const Act ln1 = act_at(a->ln1, a->ln1_16, d->a16.ln1, sl * N * C);
    const float* ln1_rstd = a->ln1_rstd + sl * N;
    const int a16 = d->a16.qkv; // q, k, v in bf16 (the fp32 ones have no room)
    const float* q = a16 ? NULL : a->q + sl * N * QD;
    const float* k = a16 ? NULL : a->k + sl * N * KVD;
    const float* v = a16 ? NULL : a->v + sl * N * KVD;
    const float* lse = a->lse + sl * N * d->H;
    const float* atty = a->atty + sl * N * QD;
    const float* mid = a->resid_mid + sl * N * C;
    const Act ln2 = act_at(a->ln2, a->ln2_16, d->a16.ln2, sl * N * C);
    const float* ln2_rstd = a->ln2_rstd + sl * N;
    float* dresid = a->dresid; // (N, C)
    float* dln = a->dln;       // (N, C)

    if (moe) { // out = mid + moe(ln2)
        const int eu = llama_expert_unit(d->cfg, l);
        if (moe_backward(d->moe, eu - 1 - d->cfg->n_layers, K, p->router, ln2.f32, dresid, dln,
                         g + w.router, d->cfg->router_aux_loss_coef, d->hooks, l, eu))
            return -1;
    } else { // out = mid + hid W_down^T, hid = silu(ln2 W_gate^T) * (ln2 W_up^T)
        const float* gate = a->gate + ld * N * F;
        const float* up = a->up + ld * N * F;
        const Act hid = act_at(a->hid, a->hid_16, d->a16.hid, ld * N * F);
        act_linear_backward(K, a->dhid, g + w.w_down, dresid, hid, p->w_down, d->N, d->F, d->C,
                            0);
        K->swiglu_backward(a->dgate, a->dup, a->dhid, gate, up, d->N, d->F);
        act_linear_backward(K, dln, g + w.w_gate, a->dgate, ln2, p->w_gate, d->N, d->C, d->F, 0);
        act_linear_backward(K, dln, g + w.w_up, a->dup, ln2, p->w_up, d->N, d->C, d->F, 1);
    }
    // dresid becomes dLoss/d mid: the skip path plus the norm's input gradient
    K->rmsnorm_backward(dresid, g + w.mlp_norm, dln, mid, p->mlp_norm, ln2_rstd, d->N, d->C);

    // attention: mid = x + atty W_o^T
    linear_backward(K, a->datty, g + w.wo, dresid, atty, p->wo, d->N, (int)QD, d->C, 0);
    if (a16)
        K->attention_backward_a16(a->dq, a->dk, a->dv, a->datty, atty, lse, a->q_16 + sl * N * QD,
                                  a->k_16 + sl * N * KVD, a->v_16 + sl * N * KVD, d->B, d->T, d->H, d->KV,
                                  d->hd, a->att_scratch);
    else
        K->attention_backward(a->dq, a->dk, a->dv, a->datty, atty, lse, q, k, v, d->B, d->T, d->H,
                              d->KV, d->hd, a->att_scratch);
    K->rope_backward(a->dq, a->rope, d->B, d->T, d->H, d->hd);
    K->rope_backward(a->dk, a->rope, d->B, d->T, d->KV, d->hd);
    const float *dq = a->dq, *dk = a->dk;
    if (qkn) { // back through the per-head RMSNorm (its kernel accumulates dinp)
        K->zero(a->dq_raw, N * QD);
        K->zero(a->dk_raw, N * KVD);
        K->rmsnorm_backward(a->dq_raw, g + w.q_norm, a->dq, a->q_raw + sl * N * QD, p->q_norm,
                            a->q_rstd + sl * N * d->H, d->N * d->H, d->hd);
        K->rmsnorm_backward(a->dk_raw, g + w.k_norm, a->dk, a->k_raw + sl * N * KVD, p->k_norm,
                            a->k_rstd + sl * N * d->KV, d->N * d->KV, d->hd);
        dq = a->dq_raw;
        dk = a->dk_raw;
    }
    act_linear_backward(K, dln, g + w.wq, dq, ln1, p->wq, d->N, d->C, (int)QD, 0);
    act_linear_backward(K, dln, g + w.wk, dk, ln1, p->wk, d->N, d->C, (int)KVD, 1);
    act_linear_backward(K, dln, g + w.wv, a->dv, ln1, p->wv, d->N, d->C, (int)KVD, 1);
    K->rmsnorm_backward(dresid, g + w.attn_norm, dln, x, p->attn_norm, ln1_rstd, d->N, d->C);
    return 0;
}

/* ------------------------------------------------------------------ step */

/* The output layer and the loss, opts.logits_rows token rows at a time:
 * logits (R, V) = lnf W^T, the rows' cross-entropy, and with gW (backward)
 * dlogits in place, dln (rows) = dlogits W and gW += dlogits^T lnf.
 * *loss_sum (device) = the summed loss of the counted rows. One chunk (the rows fit in
 * LOGITS_FLOATS) makes the same calls as an output layer without chunks. */
static void head_chunks(const Dims* d, const ActPtrs* a, const LlamaActs* acts, Weight W,
                        float* gW, float* logits_out, float dscale, double* loss_sum) {
    const ZrtKernels* K = d->K;
    const int N = d->N, C = d->C, V = d->cfg->vocab_size, R = acts->opts.logits_rows;
    zdevCheck(zdev_memset_async(K->dev, loss_sum, 0, sizeof(double), NULL));
    for (int r0 = 0; r0 < N; r0 += R) {
        const int rows = N - r0 < R ? N - r0 : R;
        const Act lnf = act_at(a->lnf, a->lnf_16, d->a16.lnf, (size_t)r0 * C); // (rows, C)
        act_linear_forward(K, a->logits, lnf, W, rows, C, V); // (rows, V)
        if (logits_out)
            zdevCheck(zdev_download(K->dev, logits_out + (size_t)r0 * V, a->logits, (size_t)rows * V * sizeof(float)));
        K->crossentropy_forward_backward(gW ? a->logits : NULL, a->losses + r0, a->logits,
                                         acts->tgt + r0, rows, V, dscale, loss_sum);
        if (gW)
            act_linear_backward(K, a->dln + (size_t)r0 * C, gW, a->logits, lnf, W, rows, C, V, 0);
    }
}

/* The step's mean loss from its summed loss: read back (a host wait), or
 * left in the caller's sink (llama_acts_set_loss_sink) and 0 returned. */
static float step_loss(const LlamaActs* acts, int count) {
    if (acts->loss_sink) return 0.0f;
    double sum = 0;
    zdevCheck(zdev_download(acts->K->dev, &sum, acts->loss, sizeof sum));
    return count ? (float)(sum / count) : 0.0f;
}

static float step_error(const char* why) {
    fprintf(stderr, "llama_step: %s\n", why);
    return NAN;
}

float llama_step(const LlamaConfig* cfg, LlamaActs* acts, const int* tokens, const int* targets,
                 int B, int T, const LlamaParamHooks* hooks, int backward, float* logits_out) {
    // refuse bad input before the first hook, so the runtime never sees a
    // half-walked unit sequence
    char err[160];
    if (llama_config_check(cfg, err, sizeof err)) return step_error(err);
    if (!acts || !tokens || !targets || !hooks || !hooks->acquire || !hooks->release)
        return step_error("NULL argument");
    if (backward && (!hooks->grad_buffer || !hooks->grads_ready))
        return step_error("backward needs grad_buffer and grads_ready hooks");
    const int n_xhooks = !!hooks->dispatch + !!hooks->dispatch_wait + !!hooks->combine_send +
                         !!hooks->combine;
    if (n_xhooks != 0 && n_xhooks != 4)
        return step_error("the dispatch, dispatch_wait, combine_send and combine hooks come "
                          "together or not at all");
    if (memcmp(&acts->cfg, cfg, sizeof *cfg))
        return step_error("activations were allocated for a different config");
    if (B <= 0 || T <= 0 || B > acts->B || T > acts->T) {
        snprintf(err, sizeof err, "(B, T) = (%d, %d) outside the activation capacity (%d, %d)", B,
                 T, acts->B, acts->T);
        return step_error(err);
    }
    const int V = cfg->vocab_size, N = B * T;
    for (int n = 0; n < N; n++) {
        if (tokens[n] < 0 || tokens[n] >= V || targets[n] >= V) {
            snprintf(err, sizeof err, "token %d or target %d at position %d outside [0, %d)",
                     tokens[n], targets[n], n, V);
            return step_error(err);
        }
    }

    const ZrtKernels* K = acts->K;
    ActPtrs a;
    acts_layout(cfg, K, &acts->opts, B, T, acts->mem, &a);
    // the batch in: the one upload of a step (targets stay on the host too,
    // for the count below)
    if (acts->async_batch) { // the caller keeps them unchanged until its next wait
        zdevCheck(zdev_copy_async(K->dev, acts->tok, tokens, (size_t)N * sizeof(int), ZDEV_HOST_TO_DEVICE, NULL));
        zdevCheck(zdev_copy_async(K->dev, acts->tgt, targets, (size_t)N * sizeof(int), ZDEV_HOST_TO_DEVICE, NULL));
    } else {
        zdevCheck(zdev_upload(K->dev, acts->tok, tokens, (size_t)N * sizeof(int)));
        zdevCheck(zdev_upload(K->dev, acts->tgt, targets, (size_t)N * sizeof(int)));
    }
    const int L = cfg->n_layers;
    const Dims d = {cfg,           K,
                    B,             T,
                    N,             cfg->dim,
                    cfg->n_heads,  cfg->n_kv_heads,
                    llama_head_dim(cfg), cfg->ffn_hidden,
                    acts->opts.recompute, !!hooks->bf16_units,
                    acts->moe,     hooks,
                    acts_a16(cfg, K)};
    if (acts->moe) moe_begin_step(acts->moe, N);
    const size_t C = cfg->dim;
    const int hu = llama_head_unit(cfg);
    if (acts->rope_B != B || acts->rope_T != T) { // once per shape: a device's table is an upload
        K->rope_table(a.rope, T, d.hd, cfg->rope_theta);
        acts->rope_B = B, acts->rope_T = T;
    }

    // forward: unit 0 (embedding), blocks 1..L; the head only without a
    // backward (with one, the head runs in the backward's hold)
    const void* p = hooks->acquire(hooks->ctx, 0, 0);
    if (!p) return step_error("acquire(0, forward) returned NULL");
    embedding_forward(K, a.resid, acts->tok, weight_of(p, d.bf16), N, d.C); // resid[0] (N, C)
    hooks->release(hooks->ctx, 0, 0);
    for (int l = 0; l < L; l++) {
        p = hooks->acquire(hooks->ctx, 1 + l, 0);
        if (!p) return step_error("acquire(block, forward) returned NULL");
        const BlockParams bp = block_params(&d, &a, l, p);
        if (block_forward(&d, &a, l, &bp, 0)) return step_error("a MoE block failed (forward)");
        hooks->release(hooks->ctx, 1 + l, 0);
    }
    if (acts->moe) {
        if (moe_aux_stats(acts->moe, backward ? hooks : NULL))
            return step_error("the aux loss's statistics failed");
        moe_aux_loss(acts->moe);
    }
    // the head (unit hu: the final norm and the head's weights): the final
    // norm, then logits and loss a chunk of rows at a time; with a backward
    // each chunk's dlogits go straight into the head's gradients
    // (head_chunks), so the head is held once, in the backward
    const float* resid_L = a.resid + (size_t)L * N * C;
    // the mean is over counted targets, so each counted row's gradient is 1/count
    int count = 0;
    for (int n = 0; n < N; n++) count += targets[n] >= 0;
    const float dscale = count ? 1.0f / (float)count : 0.0f;
    p = hooks->acquire(hooks->ctx, hu, backward);
    if (!p) return step_error("acquire(head) returned NULL");
    const float* final_norm = head_norm(&d, &a, p);
    const Weight head = weight_at(weight_of(p, d.bf16), head_lm_head(cfg));
    act_rmsnorm(K, act_at(a.lnf, a.lnf_16, d.a16.lnf, 0), a.lnf_rstd, resid_L, final_norm, N, d.C, cfg->norm_eps);
    double* loss_sum = acts->loss_sink ? acts->loss_sink : acts->loss;
    if (!backward) {
        head_chunks(&d, &a, acts, head, NULL, logits_out, dscale, loss_sum);
        hooks->release(hooks->ctx, hu, 0);
        return step_loss(acts, count);
    }

    // backward: the head (its norm and weights), blocks L..1, unit 0 (embedding)
    float* g = hooks->grad_buffer(hooks->ctx, hu);
    head_chunks(&d, &a, acts, head, g + head_lm_head(cfg), logits_out, dscale, loss_sum);
    K->zero(a.dresid, (size_t)N * C);
    K->rmsnorm_backward(a.dresid, g + head_final_norm(cfg), a.dln, resid_L, final_norm,
                        a.lnf_rstd, N, d.C);
    if (hu != 0) hooks->grads_ready(hooks->ctx, hu);
    hooks->release(hooks->ctx, hu, 1);
    for (int l = L - 1; l >= 0; l--) {
        p = hooks->acquire(hooks->ctx, 1 + l, 1);
        if (!p) return step_error("acquire(block, backward) returned NULL");
        g = hooks->grad_buffer(hooks->ctx, 1 + l);
        const BlockParams bp = block_params(&d, &a, l, p);
        if (block_backward(&d, &a, l, &bp, g)) return step_error("a MoE block failed (backward)");
        hooks->grads_ready(hooks->ctx, 1 + l);
        hooks->release(hooks->ctx, 1 + l, 1);
    }
    // the embedding backward reads no parameters: no acquire, only the grads
    g = hooks->grad_buffer(hooks->ctx, 0);
    K->embedding_backward(g, a.dresid, acts->tok, N, d.C);
    hooks->grads_ready(hooks->ctx, 0);
    return step_loss(acts, count); // at the end: the read-back waits for the whole backward
}
