/*
 * moe.h — the mixture-of-experts MLP of a Qwen3-MoE block, inside models/
 * (llama.c calls it; the runtime never does).
 *
 *   x (N, C) -> router logits (N, E) = x Wr^T -> softmax (fp32) -> top-k
 *     -> (token, slot) pairs grouped by expert ("expert-major", tokens in
 *        order inside an expert) -> dispatch hook -> this rank's experts:
 *        SwiGLU per expert on its rows -> combine hook -> out (N, C) =
 *        sum over the k slots of weight * expert output, in slot order
 *
 * Without dispatch/combine hooks every expert is computed here (EP = 1);
 * with them the runtime moves the grouped rows to the experts' owners and
 * back (runtime/expert.c) and the model code is the same.
 *
 * Capacity (capacity_factor > 0): each expert computes at most
 * ceil(cf * N * k / E) of the micro-batch's pairs on this rank, the first in
 * token order (Switch Transformer's policy); a dropped pair adds nothing to
 * its token's output (the residual carries the token on) and has no
 * gradient. The aux loss counts the routing choices, dropped or not.
 *
 * The experts' GEMMs: one grouped GEMM per projection over all local
 * experts where the table has the grouped entries (kernels.h: the bf16
 * tables, with bf16 activations), else one GEMM per expert and projection.
 *
 * What this leaves out: shared experts, router noise or z-loss, other drop
 * policies (by probability).
 */
#ifndef MODELS_MOE_H
#define MODELS_MOE_H
#include <stddef.h>

#include "kernels.h"
#include "llama.h"
#include "weights.h"

typedef struct {
    int N, C, E, k, Fe;    /* tokens, dim, experts, top-k, expert width */
    int norm_topk;         /* 1: the k weights are divided by their sum */
    float capacity_factor; /* 0: dropless (llama.h) */
    /* memory (both 0: every block keeps all it computed):
     * exchange: the runtime moves the rows to the experts' owners (dispatch
     *   hooks, EP > 1): the experts' input is the received copy (xl), so
     *   the rows sent (xs) are one buffer for all blocks;
     * recompute: the experts' gate, up and hid are one buffer for all
     *   blocks, recomputed from xl in the backward (two of the three expert
     *   GEMMs again; no second exchange) */
    int exchange, recompute;
    /* a16 (a bf16 table with the a16 entries, kernels.h "bf16 activations"):
     * the GEMMs read their inputs in bf16 as they would round them anyway:
     * a chunk's xin rows rounded once (MoeActs.xin16) instead of once per
     * GEMM, hid kept in bf16 (MoeLayer.hid16, half its memory) */
    int a16;
} MoeDims;

/* What one MoE block's forward saves for its backward. Float arrays and
 * sel / pos are backend memory (the kernel table the activations were
 * allocated on); the _host arrays, counts and routed are host memory: the
 * grouping of the pairs by expert is a counting sort on the host, after
 * one download of sel per block (the host must know the rows per expert to
 * size each expert's GEMMs and the exchange anyway: TorchTitan and Megatron
 * make the same one device-to-host sync for their splits). */
typedef struct {
    float* probs;     /* (N, E) softmax of the router logits */
    int* sel;         /* (N, k) chosen experts, by descending probability */
    float* w;         /* (N, k) routing weights of the chosen experts */
    int* pos;         /* (N, k) row of pair (n, j) in the expert-major order,
                       * -1 when the capacity limit dropped it */
    int* sel_host;    /* (N, k) host copies of sel and pos (pinned: pos goes up */
    int* pos_host;    /* without a wait, and stays unchanged until the block's
                       * next route, which a download of sel precedes) */
    int* counts;      /* (E) pairs each expert computes (host) */
    int* routed;      /* (E) pairs each expert was chosen for (>= counts; host) */
    long long dropped;/* pairs dropped, sum of routed - counts */
    float* xs;        /* (N*k, C) the input rows, expert-major (what dispatch sends;
                       * with d.exchange the blocks' shared buffer, free again
                       * once the block's dispatch completed) */
    float* ys;        /* (N*k, C) the expert outputs, expert-major (what combine returns) */
    /* The rows this rank's experts computed: N*k at EP = 1, any number with
     * a dispatch hook (the buffers grow; their capacity is cap rows), in
     * n_chunks chunks (1 at EP = 1; the runtime's choice with the hooks),
     * chunk c at rows [chunk_off[c], chunk_off[c+1]), grouped by local
     * expert inside the chunk (host arrays). */
    int n_recv, n_local, first_expert, cap, xl_cap;
    int n_chunks, chunk_cap;
    int* chunk_counts; /* (n_chunks, n_local) rows per chunk and local expert */
    int* chunk_off;    /* (n_chunks + 1) first row of each chunk */
    const float* xin; /* (n_recv, C) the experts' input rows: xs, or xl after a dispatch */
    float* xl;        /* (xl_cap, C) a copy of the dispatched rows (NULL until one) */
    /* gate, up, hid: this block's own (cap rows), or with d.recompute
     * views of the shared ones (sg_*), valid until the next block's
     * forward or backward (the backward recomputes them) */
    float* gate;      /* (cap, Fe) x Wg^T */
    float* up;        /* (cap, Fe) x Wu^T */
    float* hid;       /* (cap, Fe) silu(gate) * up, input of w_down */
    uint16_t* hid16;  /* with d.a16 hid in bf16 instead (hid NULL) */
} MoeLayer;

/* Every MoE block's saved tensors plus the scratch they share. */
typedef struct {
    MoeDims d;
    const ZrtKernels* K; /* the backend of every float array below */
    int n_layers;    /* MoE blocks */
    MoeLayer* layer; /* (n_layers) */
    /* scratch: logits/dlogits (N, E), dw (N, k), dys/dxs (N*k, C), and the
     * expert side's yl (forward) / dxl (backward) one (cap, C) buffer,
     * dgate/dup/dhid (cap, Fe); aux_dev
     * (E) the load-balancing term of the router gradient */
    float *logits, *dw, *dys, *dxs, *aux_dev;
    int cap;
    float *yl, *dxl, *dgate, *dup, *dhid;
    uint16_t* xin16; /* d.a16: (cap, C) a chunk's xin rows in bf16, rounded per chunk */
    /* d.exchange: xs of every block (N*k, C); d.recompute: gate | up | hid
     * of every block, sg_cap rows */
    float *xs_shared, *sg_mem;
    int sg_cap;
    /* rank-invariant runs (LlamaParamHooks.dispatch_sources): the experts'
     * gradient tree over source ranks, (levels + 2) experts' parameters,
     * allocated at the first such backward */
    float* gtree;
    size_t gtree_cap;
    /* pooled over the MoE blocks of the last step, for the aux loss (host) */
    long long* tokens_per_expert; /* (E) (token, slot) pairs */
    double* prob_sum;             /* (E) sum of router probabilities over rows */
    double* prob_sum_dev;         /* (E) the same on the backend, added to by
                                   * every block, read once per forward */
    float* aux_host;              /* (E) aux_dev's host side (pinned) */
    int aux_uploaded;             /* aux_dev holds this backward's term */
    /* the statistics the aux loss is computed from (host): counts (E) |
     * probability sums (E) | rows (1), this micro-batch's own, or summed
     * over the batch the aux covers (moe_aux_stats) */
    double* aux_stats;            /* (2E + 1) */
    float aux;                    /* E * sum_e f_e P_e of the last forward */
    long long dropped;            /* pairs the capacity dropped, all blocks */
} MoeActs;

size_t moe_acts_bytes(const MoeDims* d, int n_layers);
/* Rows one rank's experts compute per block, as the plan counts them: N*k
 * without an exchange; with one, capacity_factor * N*k (a bound) or, when
 * dropless, N*k (the average: an uneven router can exceed it). */
size_t moe_rows_received(const MoeDims* d);
/* On backend K (kernels.h). NULL on OOM. */
MoeActs* moe_acts_alloc(const MoeDims* d, int n_layers, const ZrtKernels* K);
void moe_acts_free(MoeActs* m);
/* Set N for this step (<= the N allocated for) and clear the pooled stats. */
void moe_begin_step(MoeActs* m, int N);

/* Forward of MoE block i (the i-th MoE block, model block `layer`): x (N, C)
 * is the normed MLP input, out (N, C) is written. router (E, C) is a slice
 * of the block's unit; the experts come from hooks->acquire(expert_unit),
 * in the dtype hooks->bf16_units says (weights.h).
 * Returns 0, or -1 with a message on stderr (a hook failed). */
int moe_forward(MoeActs* m, int i, const ZrtKernels* K, Weight router, const float* x,
                float* out, const LlamaParamHooks* hooks, int layer, int expert_unit);

/* After the forward of every MoE block: the statistics of the aux loss
 * (m->aux_stats): this micro-batch's pooled counts, probability sums and
 * rows, then, with hooks and hooks->aux_reduce, the sums over the batch the
 * aux loss covers. Returns 0, or -1 with a message (the hook failed). */
int moe_aux_stats(MoeActs* m, const LlamaParamHooks* hooks);

/* The load-balancing loss from m->aux_stats (moe_aux_stats first; also kept
 * in m->aux): E * sum_e (F_e / R) (P_e / R), R the rows it covers. */
float moe_aux_loss(MoeActs* m);

/* Backward of MoE block i: dout (N, C) is dLoss/d out; dx (N, C) is
 * overwritten with dLoss/d x; drouter (E, C) accumulates. aux_coef weights
 * the load-balancing loss in the loss being differentiated. */
int moe_backward(MoeActs* m, int i, const ZrtKernels* K, Weight router, const float* x,
                 const float* dout, float* dx, float* drouter, float aux_coef,
                 const LlamaParamHooks* hooks, int layer, int expert_unit);

#endif
