// test: timeout=120
/*
 * test_model.c — checks of the dense Llama model (models/llama.c), its CPU
 * kernels and the AdamW optimizer (runtime/optim.c).
 *
 *   (no args)              the unit checks below, PASS/FAIL lines (< 20 s)
 *   --dump DIR [flags]     write config, weights, batch, logits, loss and
 *                          gradients for tests/test_model_ref.py (JAX)
 *   --dump-train DIR [..]  also run 10 AdamW steps and write the losses
 *   --bench [flags]        time forward+backward of a ~100M model and an
 *                          SGEMM loop in the same run; print GFLOP/s
 * flags: --V --C --L --H --KV --F --T --B --tied --theta, and for Qwen3 / MoE
 * --hd --qkn --E --K --Fe --sparse --normtopk --aux --mlponly (see parse_flags).
 *
 * The independent references here: fp32 central finite differences for
 * every tensor's gradient, cross-entropy recomputed in double from the
 * logits, a double-precision AdamW, and a frexp/nearbyint bf16 rounding.
 * The JAX reimplementation lives in test_model_ref.py.
 */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attention_cudnn.h"
#include "kernels.h"
#include "llama.h"
#include "moe.h"
#include "optim.h"
#include "testutil.h"

/* The CPU table's sum of squares of host memory (kernels.h: into a double
 * of the device's memory, which on the CPU table is the host's). */
static double host_sumsq(const float* x, size_t n) {
    double s = 0;
    zrt_kernels_cpu()->sumsq(&s, x, n);
    return s;
}

/* ------------------------------------------------------- a tiny "runtime" */

#define MAX_UNITS 64
#define MAX_EVENTS 256

/* Parameters and gradients of every unit, plus hooks that behave like FSDP:
 * acquire() hands out a fresh copy that release() poisons with NaN and frees,
 * so a model that keeps a pointer across release() reads NaN (or trips ASan). */
typedef struct {
    LlamaConfig cfg;
    int nunits;
    float* params[MAX_UNITS];
    float* grads[MAX_UNITS];
    float* gathered[MAX_UNITS];
    int fsdp_like; // copy + poison on acquire/release
    char events[MAX_EVENTS][16];
    int nevents;
    int misuse; // release without acquire, double acquire, ...
    // expert dispatch emulated inside one process (model_moe_hooks): the
    // rows are copied out and back, all experts stay local
    float* xbuf;
    size_t xcap, xrows;
    int xcounts[64], xccounts[64];
    int xchunks;       // chunks the emulated dispatch hands over (0: 1)
    int fail_dispatch; // 1: dispatch reports a failure
} Model;

static void log_event(Model* m, const char* fmt, int unit, int phase) {
    if (m->nevents < MAX_EVENTS) snprintf(m->events[m->nevents], 16, fmt, unit, phase);
    m->nevents++;
}

/* 1 if the hook events logged are exactly want[0..n); got receives them all. */
static int events_are(const Model* m, const char* const* want, int n, char* got, size_t len) {
    int same = m->nevents == n;
    for (int i = 0; same && i < n; i++) same = !strcmp(m->events[i], want[i]);
    got[0] = '\0';
    for (int i = 0; i < m->nevents && i < MAX_EVENTS; i++) {
        strncat(got, m->events[i], len - strlen(got) - 2);
        strncat(got, " ", len - strlen(got) - 1);
    }
    return same;
}

static const void* h_acquire(void* ctx, int unit, int phase) {
    Model* m = ctx;
    log_event(m, "A%d%c", unit, phase ? 'b' : 'f');
    if (unit < 0 || unit >= m->nunits || m->gathered[unit]) {
        m->misuse++;
        return NULL;
    }
    if (!m->fsdp_like) return m->gathered[unit] = m->params[unit];
    size_t n = llama_unit_numel(&m->cfg, unit);
    float* buf = malloc(n * sizeof(float));
    if (!buf) return NULL;
    memcpy(buf, m->params[unit], n * sizeof(float));
    return m->gathered[unit] = buf;
}

static void h_release(void* ctx, int unit, int phase) {
    Model* m = ctx;
    log_event(m, "R%d%c", unit, phase ? 'b' : 'f');
    if (unit < 0 || unit >= m->nunits || !m->gathered[unit]) {
        m->misuse++;
        return;
    }
    if (m->fsdp_like) {
        size_t n = llama_unit_numel(&m->cfg, unit);
        for (size_t i = 0; i < n; i++) m->gathered[unit][i] = NAN;
        free(m->gathered[unit]);
    }
    m->gathered[unit] = NULL;
}

static float* h_grad_buffer(void* ctx, int unit) {
    Model* m = ctx;
    log_event(m, "G%d", unit, 0);
    if (unit < 0 || unit >= m->nunits) {
        m->misuse++;
        return NULL;
    }
    return m->grads[unit];
}

static void h_grads_ready(void* ctx, int unit) {
    Model* m = ctx;
    log_event(m, "D%d", unit, 0);
}

static LlamaParamHooks model_hooks(Model* m) {
    LlamaParamHooks h = {.ctx = m,
                         .acquire = h_acquire,
                         .release = h_release,
                         .grad_buffer = h_grad_buffer,
                         .grads_ready = h_grads_ready};
    return h;
}

/* A dispatch that moves the rows through a buffer of its own and back, in
 * m->xchunks contiguous runs of the expert-major rows (a run may straddle
 * experts), as a chunking runtime hands them over: the hook path of the
 * model, at EP = 1, must give the bits of the no-hook path with one chunk. */
static int h_dispatch(void* ctx, int layer, int phase, const float* rows, const int* counts,
                      int C, int* n_chunks, int* n_recv, int* n_local, int* first_expert) {
    Model* m = ctx;
    log_event(m, phase ? "X%db" : "X%df", layer, 0);
    if (m->fail_dispatch) return -1;
    const int E = m->cfg.n_experts;
    size_t n = 0;
    for (int e = 0; e < E; e++) n += (size_t)(m->xcounts[e] = counts[e]);
    if (n * C > m->xcap) {
        free(m->xbuf);
        m->xbuf = malloc(n * C * sizeof(float));
        m->xcap = m->xbuf ? n * C : 0;
        if (!m->xbuf) return -1;
    }
    memcpy(m->xbuf, rows, n * C * sizeof(float));
    m->xrows = n;
    *n_chunks = m->xchunks > 0 ? m->xchunks : 1;
    *n_recv = (int)n;
    *n_local = E;
    *first_expert = 0;
    return 0;
}

static void chunk_range(const Model* m, int chunk, int* lo, int* hi) {
    const int nc = m->xchunks > 0 ? m->xchunks : 1, n = (int)m->xrows;
    *lo = n * chunk / nc;
    *hi = n * (chunk + 1) / nc;
}

static int h_dispatch_wait(void* ctx, int layer, int phase, int chunk, const float** recv,
                           int* n_recv, const int** recv_counts) {
    Model* m = ctx;
    (void)layer, (void)phase;
    int lo, hi;
    chunk_range(m, chunk, &lo, &hi);
    for (int e = 0, e0 = 0; e < m->cfg.n_experts; e0 += m->xcounts[e], e++) {
        const int e1 = e0 + m->xcounts[e], a = e0 > lo ? e0 : lo, z = e1 < hi ? e1 : hi;
        m->xccounts[e] = z > a ? z - a : 0;
    }
    *recv = m->xbuf + (size_t)lo * m->cfg.dim;
    *n_recv = hi - lo;
    *recv_counts = m->xccounts;
    return 0;
}

static int h_combine_send(void* ctx, int layer, int phase, int chunk, const float* local,
                          float* rows) {
    Model* m = ctx;
    (void)layer, (void)phase;
    int lo, hi;
    chunk_range(m, chunk, &lo, &hi);
    memcpy(rows + (size_t)lo * m->cfg.dim, local, (size_t)(hi - lo) * m->cfg.dim * sizeof(float));
    return 0;
}

static int h_combine(void* ctx, int layer, int phase, float* rows) {
    Model* m = ctx;
    (void)rows;
    log_event(m, phase ? "Y%db" : "Y%df", layer, 0);
    return 0;
}

static int model_init(Model* m, const LlamaConfig* cfg, unsigned long long seed) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->nunits = llama_num_units(cfg);
    if (m->nunits > MAX_UNITS) return -1;
    for (int u = 0; u < m->nunits; u++) {
        size_t n = llama_unit_numel(cfg, u);
        m->params[u] = malloc(n * sizeof(float));
        m->grads[u] = calloc(n, sizeof(float));
        if (!m->params[u] || !m->grads[u]) return -1;
        llama_unit_init(cfg, u, seed, m->params[u]);
    }
    return 0;
}

static void model_free(Model* m) {
    free(m->xbuf);
    for (int u = 0; u < m->nunits; u++) {
        free(m->params[u]);
        free(m->grads[u]);
    }
}

static void model_zero_grads(Model* m) {
    for (int u = 0; u < m->nunits; u++)
        memset(m->grads[u], 0, llama_unit_numel(&m->cfg, u) * sizeof(float));
}

/* Perturb every parameter so norms are not all-ones and weights are large
 * enough that gradients stand well above fp32 noise in the FD check. */
static void model_randomize(Model* m, unsigned seed, float scale) {
    srand(seed);
    for (int u = 0; u < m->nunits; u++) {
        size_t n = llama_unit_numel(&m->cfg, u);
        for (size_t i = 0; i < n; i++) {
            float r = ((float)rand() / (float)RAND_MAX - 0.5f) * 2.0f * scale;
            m->params[u][i] = m->params[u][i] == 1.0f ? 1.0f + r : r; // norms stay near 1
        }
    }
}

static void make_batch(int* tokens, int* targets, int B, int T, int V, unsigned seed) {
    srand(seed);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) tokens[b * T + t] = rand() % V;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int i = b * T + t;
            targets[i] = t + 1 < T ? tokens[i + 1] : rand() % V;
        }
    targets[1] = -1; // ignored targets must not count
    if (B * T > 5) targets[B * T - 3] = -7;
}

/* --------------------------------------------------------------- configs */

static LlamaConfig tiny_config(int tied) {
    LlamaConfig c = {.vocab_size = 37, .dim = 16, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                     .ffn_hidden = 24, .max_seq_len = 7, .rope_theta = 10000.0f,
                     .norm_eps = 1e-5f, .tie_embeddings = tied};
    return c;
}

static void check_config(void) {
    char err[200];
    LlamaConfig good = tiny_config(1);
    CHECK(llama_config_check(&good, err, sizeof err) == 0, "config_check/accepts_tiny", "%s", err);
    struct {
        const char* name;
        const char* needle;
        void (*edit)(LlamaConfig*);
    } bad[] = {
        {"kv_not_dividing", "n_kv_heads", NULL}, {"dim_not_multiple", "n_heads", NULL},
        {"odd_head_dim", "even", NULL},          {"zero_vocab", "vocab_size", NULL},
        {"zero_eps", "norm_eps", NULL},          {"tie_2", "tie_embeddings", NULL},
        {"theta_1", "rope_theta", NULL},         {"neg_layers", "n_layers", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        LlamaConfig c = good;
        switch (i) {
        case 0: c.n_kv_heads = 3; break;
        case 1: c.dim = 18; break;
        case 2: c.dim = 12, c.n_heads = 4; break; // hd = 3
        case 3: c.vocab_size = 0; break;
        case 4: c.norm_eps = 0.0f; break;
        case 5: c.tie_embeddings = 2; break;
        case 6: c.rope_theta = 1.0f; break;
        case 7: c.n_layers = -1; break;
        }
        err[0] = 0;
        int rc = llama_config_check(&c, err, sizeof err);
        char name[64];
        snprintf(name, sizeof name, "config_check/rejects_%s", bad[i].name);
        CHECK(rc == -1 && strstr(err, bad[i].needle), name, "rc %d, message '%s'", rc, err);
    }
    CHECK(llama_acts_alloc(&good, 2, good.max_seq_len + 1, zrt_kernels_cpu()) == NULL, "acts_alloc/rejects_T_gt_max",
          "allocated T > max_seq_len");
}

static void check_sizes(void) {
    for (int tied = 0; tied <= 1; tied++) {
        LlamaConfig c = tiny_config(tied);
        const size_t V = 37, C = 16, hd = 4, H = 4, KV = 2, F = 24, L = 2;
        // tied: unit 0 = tok_emb | final_norm; untied: unit 0 = tok_emb and
        // the head (final_norm | lm_head) is the last unit, 1 + L
        size_t u0 = V * C + (tied ? C : 0), head = tied ? 0 : C + V * C;
        size_t blk = C + H * hd * C + 2 * KV * hd * C + C * H * hd + C + 3 * F * C;
        char name[64];
        snprintf(name, sizeof name, "sizes/unit0_%s", tied ? "tied" : "untied");
        CHECK(llama_unit_numel(&c, 0) == u0 && llama_num_units(&c) == (int)(1 + L + !tied) &&
                  llama_head_unit(&c) == (tied ? 0 : (int)(1 + L)) &&
                  llama_unit_numel(&c, 1 + L) == head && llama_unit_layer(&c, 1 + L) == -1,
              name, "unit 0 %zu != %zu, or the head unit wrong", llama_unit_numel(&c, 0), u0);
        snprintf(name, sizeof name, "sizes/block_%s", tied ? "tied" : "untied");
        CHECK(llama_unit_numel(&c, 1) == blk && llama_unit_numel(&c, 2) == blk, name, "%zu != %zu",
              llama_unit_numel(&c, 1), blk);
        snprintf(name, sizeof name, "sizes/total_%s", tied ? "tied" : "untied");
        CHECK(llama_num_params(&c) == u0 + L * blk + head, name, "%zu", llama_num_params(&c));
        // the tensor table tiles each unit exactly
        int ok = 1;
        for (int u = 0; u < llama_num_units(&c); u++) {
            char names[16][64];
            size_t rows[16], cols[16], sum = 0;
            int n = llama_unit_tensors(&c, u, names, rows, cols, 16);
            for (int i = 0; i < n; i++) sum += rows[i] * cols[i];
            ok &= sum == llama_unit_numel(&c, u) &&
                  n == (u == 0 ? 1 + tied : u == llama_head_unit(&c) ? 2 : 9);
        }
        snprintf(name, sizeof name, "sizes/tensor_table_%s", tied ? "tied" : "untied");
        CHECK(ok, name, "tensor shapes do not tile the units");
    }
    LlamaConfig c = tiny_config(1);
    LlamaConfig cu = tiny_config(0);
    CHECK(llama_unit_numel(&c, -1) == 0 && llama_unit_numel(&c, 3) == 0 &&
              llama_unit_numel(&cu, 4) == 0, "sizes/out_of_range_unit",
          "nonzero size for a unit that does not exist");
}

/* ------------------------------------------------- finite-difference check */

static double loss_of(Model* m, LlamaActs* acts, const int* tok, const int* tgt, int B, int T) {
    LlamaParamHooks h = model_hooks(m);
    return llama_step(&m->cfg, acts, tok, tgt, B, T, &h, 0, NULL);
}

/* FD tolerance (fp32 central differences, step h = 1e-2 on weights of
 * scale ~0.5): |fd - analytic| <= 2e-3 + 2e-2 * |analytic|. The loss is a
 * float (~4), so its rounding (~2e-7 relative) contributes ~1e-4 to fd; the
 * O(h^2) truncation error stays under the rest at this weight scale. */
#define FD_H 1e-2f
#define FD_ATOL 2e-3
#define FD_RTOL 2e-2

/* The FD check of every tensor of a model, at step fd_h. The objective is
 * what the backward differentiates: the cross-entropy plus, for MoE, the
 * weighted load-balancing loss. */
static double objective_of(Model* m, LlamaActs* acts, const int* tok, const int* tgt, int B,
                           int T) {
    double ce = loss_of(m, acts, tok, tgt, B, T);
    return ce + (double)m->cfg.router_aux_loss_coef * llama_acts_aux_loss(acts);
}

static void check_gradients_of(const LlamaConfig* c, const char* tag, float fd_h) {
    const int B = 2, T = 7;
    LlamaConfig cfg = *c;
    Model m;
    if (model_init(&m, &cfg, 1234)) {
        CHECK(0, "fd/setup", "out of memory");
        return;
    }
    model_randomize(&m, 99, 0.5f);
    m.fsdp_like = 1;
    int tok[14], tgt[14];
    make_batch(tok, tgt, B, T, cfg.vocab_size, 7);
    LlamaActs* acts = llama_acts_alloc(&cfg, B, T, zrt_kernels_cpu());
    LlamaParamHooks h = model_hooks(&m);
    float loss = llama_step(&cfg, acts, tok, tgt, B, T, &h, 1, NULL);
    char name[96];
    snprintf(name, sizeof name, "fd/%s/loss_finite", tag);
    CHECK(isfinite(loss) && m.misuse == 0, name, "loss %g, hook misuse %d", (double)loss, m.misuse);

    for (int u = 0; u < llama_num_units(&cfg); u++) {
        enum { MAXT = 3 * 64 + 16 };
        static char names[MAXT][64];
        size_t rows[MAXT], cols[MAXT], off = 0;
        int nt = llama_unit_tensors(&cfg, u, names, rows, cols, MAXT);
        if (nt > MAXT) nt = MAXT;
        for (int ti = 0; ti < nt; ti++) {
            const size_t n = rows[ti] * cols[ti];
            float* p = m.params[u] + off;
            const float* g = m.grads[u] + off;
            // sample: the largest-gradient element plus 5 spread over the tensor
            size_t idx[6], amax = 0;
            for (size_t i = 1; i < n; i++)
                if (fabsf(g[i]) > fabsf(g[amax])) amax = i;
            idx[0] = amax;
            for (int s = 1; s < 6; s++) idx[s] = ((size_t)s * 7919u + (size_t)u * 31u) % n;
            double worst = 0.0;
            int bad = 0;
            char why[160] = "";
            for (int s = 0; s < 6; s++) {
                const float keep = p[idx[s]];
                p[idx[s]] = keep + fd_h;
                double lp = objective_of(&m, acts, tok, tgt, B, T);
                p[idx[s]] = keep - fd_h;
                double lm = objective_of(&m, acts, tok, tgt, B, T);
                p[idx[s]] = keep;
                double fd = (lp - lm) / (2.0 * fd_h), an = g[idx[s]];
                double err = fabs(fd - an), lim = FD_ATOL + FD_RTOL * fabs(an);
                if (err / lim > worst) worst = err / lim;
                if (err > lim && !bad) {
                    bad = 1;
                    snprintf(why, sizeof why, "elem %zu: fd %.6g analytic %.6g", idx[s], fd, an);
                }
            }
            if (getenv("FD_VERBOSE")) printf("  worst %.3f gmax %.3g\n", worst, (double)g[amax]);
            // an expert no token was routed to has a zero gradient, rightly
            // (the finite differences above agree or the check fails)
            const int idle_ok = llama_unit_is_experts(&cfg, u);
            snprintf(name, sizeof name, "fd/%s/%s", tag, names[ti]);
            CHECK(!bad && (fabsf(g[amax]) > 0.0f || idle_ok), name, "%s (max err/limit %.2f)",
                  bad ? why : "all-zero gradient", worst);
            off += n;
        }
    }
    // accumulation: a second backward adds the same gradients again, exactly
    float* g1 = malloc(llama_unit_numel(&cfg, 1) * sizeof(float));
    memcpy(g1, m.grads[1], llama_unit_numel(&cfg, 1) * sizeof(float));
    llama_step(&cfg, acts, tok, tgt, B, T, &h, 1, NULL);
    int exact = 1;
    for (size_t i = 0; i < llama_unit_numel(&cfg, 1); i++) exact &= m.grads[1][i] == 2.0f * g1[i];
    snprintf(name, sizeof name, "grads/%s/accumulate", tag);
    CHECK(exact, name, "second backward did not add the same gradient");
    free(g1);
    llama_acts_free(acts);
    model_free(&m);
}

static void check_gradients(int tied) {
    LlamaConfig cfg = tiny_config(tied);
    check_gradients_of(&cfg, tied ? "tied" : "untied", FD_H);
}

/* Qwen3-MoE shapes: QK-norm, head_dim apart from dim / n_heads, 4 experts.
 * variant 0: top-2 with renormalised weights, blocks 0 and 2 MoE, block 1
 * dense (mlp_only_layers); variant 1: top-1 without renormalisation, only
 * block 1 MoE (decoder_sparse_step 2), untied. A large aux coefficient makes
 * the load-balancing gradient visible next to the cross-entropy's. */
static LlamaConfig moe_config(int variant) {
    LlamaConfig c = {.vocab_size = 37, .dim = 16, .n_layers = 3, .n_heads = 4, .n_kv_heads = 2,
                     .ffn_hidden = 24, .max_seq_len = 7, .rope_theta = 10000.0f,
                     .norm_eps = 1e-6f, .tie_embeddings = !variant, .head_dim = 6, .qk_norm = 1,
                     .n_experts = 4, .n_experts_per_tok = variant ? 1 : 2, .moe_ffn_hidden = 8,
                     .decoder_sparse_step = variant ? 2 : 1, .norm_topk_prob = !variant,
                     .router_aux_loss_coef = 0.05f};
    if (!variant) c.mlp_only_layers[0] = 1u << 1;
    return c;
}

/* The parameter layout of MoE models: units, tensor tables, active counts. */
static void check_moe_layout(void) {
    LlamaConfig c = moe_config(0);
    const size_t C = 16, hd = 6, H = 4, KV = 2, F = 24, E = 4, Fe = 8, V = 37;
    const size_t attn = C + H * hd * C + 2 * KV * hd * C + 2 * hd + C * H * hd + C;
    int ok = llama_num_units(&c) == 1 + 3 + 2 && llama_layer_is_moe(&c, 0) &&
             !llama_layer_is_moe(&c, 1) && llama_layer_is_moe(&c, 2) &&
             llama_expert_unit(&c, 0) == 4 && llama_expert_unit(&c, 1) == -1 &&
             llama_expert_unit(&c, 2) == 5 && llama_unit_layer(&c, 5) == 2 &&
             llama_unit_is_experts(&c, 4) && !llama_unit_is_experts(&c, 3) &&
             llama_unit_numel(&c, 1) == attn + E * C && llama_unit_numel(&c, 2) == attn + 3 * F * C &&
             llama_unit_numel(&c, 4) == E * 3 * Fe * C && llama_expert_numel(&c) == 3 * Fe * C;
    CHECK(ok, "moe/layout_units", "units %d, block sizes %zu %zu, experts %zu", llama_num_units(&c),
          llama_unit_numel(&c, 1), llama_unit_numel(&c, 2), llama_unit_numel(&c, 4));
    const size_t total = V * C + C + 2 * attn + 2 * E * C + (attn + 3 * F * C) + 2 * E * 3 * Fe * C;
    const size_t active = total - 2 * (E - 2) * 3 * Fe * C;
    CHECK(llama_num_params(&c) == total && llama_active_params(&c) == active, "moe/param_counts",
          "total %zu (want %zu), active %zu (want %zu)", llama_num_params(&c), total,
          llama_active_params(&c), active);
    enum { MAXT = 64 };
    char names[MAXT][64];
    size_t rows[MAXT], cols[MAXT];
    int tiles = 1;
    for (int u = 0; u < llama_num_units(&c); u++) {
        int n = llama_unit_tensors(&c, u, names, rows, cols, MAXT);
        size_t sum = 0;
        for (int i = 0; i < n && i < MAXT; i++) sum += rows[i] * cols[i];
        tiles &= n <= MAXT && sum == llama_unit_numel(&c, u);
    }
    int n4 = llama_unit_tensors(&c, 4, names, rows, cols, MAXT);
    CHECK(tiles && n4 == 12 && !strcmp(names[3], "layers.0.experts.1.w_gate") &&
              llama_unit_tensors(&c, 4, NULL, NULL, NULL, 0) == 12,
          "moe/tensor_tables", "%d expert tensors, 4th '%s'", n4, names[3]);
    char err[200];
    LlamaConfig b = c;
    b.n_experts_per_tok = 5;
    int r1 = llama_config_check(&b, err, sizeof err);
    CHECK(r1 == -1 && strstr(err, "n_experts_per_tok"), "moe/config_rejects_topk_gt_E", "%s", err);
    b = c;
    b.decoder_sparse_step = 0;
    CHECK(llama_config_check(&b, err, sizeof err) == -1 && strstr(err, "decoder_sparse_step"),
          "moe/config_rejects_sparse_step_0", "%s", err);
}

/* MoE through the hooks: the unit sequence (the expert unit inside its
 * block, between dispatch and combine), the emulated dispatch giving the
 * bits of the local path, failures reported as NaN, routing counts, and the
 * aux loss at its balanced value range. */
static void check_moe_hooks(void) {
    const int B = 2, T = 7;
    LlamaConfig cfg = moe_config(1); // block 1 MoE, its experts unit 4
    Model a, b;
    if (model_init(&a, &cfg, 5) || model_init(&b, &cfg, 5)) return;
    model_randomize(&a, 3, 0.5f);
    model_randomize(&b, 3, 0.5f);
    int tok[14], tgt[14];
    make_batch(tok, tgt, B, T, cfg.vocab_size, 3);
    LlamaActs* acts = llama_acts_alloc(&cfg, B, T, zrt_kernels_cpu());
    LlamaParamHooks ha = model_hooks(&a), hb = model_hooks(&b);
    hb.dispatch = h_dispatch;
    hb.dispatch_wait = h_dispatch_wait;
    hb.combine_send = h_combine_send;
    hb.combine = h_combine;
    const float la = llama_step(&cfg, acts, tok, tgt, B, T, &ha, 1, NULL);
    const float aux_a = llama_acts_aux_loss(acts);
    const long long* counts = llama_acts_expert_tokens(acts);
    long long routed = 0;
    for (int e = 0; e < cfg.n_experts; e++) routed += counts[e];
    const float lb = llama_step(&cfg, acts, tok, tgt, B, T, &hb, 1, NULL);
    int same = la == lb && aux_a == llama_acts_aux_loss(acts);
    for (int u = 0; u < llama_num_units(&cfg); u++)
        same &= !memcmp(a.grads[u], b.grads[u], llama_unit_numel(&cfg, u) * sizeof(float));
    CHECK(same && isfinite(la), "moe/dispatch_hooks_bitwise",
          "loss %.9g vs %.9g, or the gradients differ", (double)la, (double)lb);
    CHECK(routed == (long long)B * T * cfg.n_experts_per_tok && aux_a >= 1.0f - 1e-6f &&
              aux_a <= (float)cfg.n_experts,
          "moe/routing_counts_and_aux_range", "%lld pairs routed, aux %g", routed, (double)aux_a);
    // the head is unit 5 (untied), held once, in the backward
    const char* want[] = {"A0f", "R0f", "A1f", "R1f", "A2f", "X1f", "A4f", "R4f", "Y1f", "R2f",
                          "A3f", "R3f", "A5b", "G5",  "D5",  "R5b", "A3b", "G3",  "D3",
                          "R3b", "A2b", "G2",  "X1b", "A4b", "G4",  "D4",  "R4b", "Y1b", "D2",
                          "R2b", "A1b", "G1",  "D1",  "R1b", "G0",  "D0"};
    char got[1024];
    const int order = events_are(&b, want, sizeof want / sizeof want[0], got, sizeof got);
    CHECK(order && b.misuse == 0, "moe/hooks_order", "got: %s", got);
    b.fail_dispatch = 1;
    const float lf = llama_step(&cfg, acts, tok, tgt, B, T, &hb, 1, NULL);
    CHECK(isnan(lf), "moe/dispatch_failure_fails_step", "loss %g", (double)lf);
    llama_acts_free(acts);
    model_free(&a);
    model_free(&b);
}

/* The capacity limit: ceil(cf * N * k / E) pairs per expert, the first in
 * token order, the rest dropped; the routing accessors say so. */
/* Which pairs a full expert drops: the latest in token order (the earlier
 * tokens keep their slots, moe.h). A hand-built routing: two experts, top-1,
 * C = 2, token n's input one-hot on the expert it must pick, the router the
 * identity times 5; tokens 0, 1, 3, 4, 6, 7 pick expert 0 and 2, 5 pick
 * expert 1; capacity_factor 1 gives ceil(8 * 1 / 2) = 4 rows per expert, so
 * expert 0 keeps tokens 0, 1, 3, 4 (rows 0-3) and drops 6 and 7, expert 1
 * keeps 2 and 5 (rows 4, 5). A dropped token's output is 0 (its only slot). */
static const void* cap_acquire(void* ctx, int unit, int phase) {
    (void)unit, (void)phase;
    return ctx;
}
static void cap_release(void* ctx, int unit, int phase) { (void)ctx, (void)unit, (void)phase; }
static void check_moe_capacity_order(void) {
    enum { N = 8, C = 2, E = 2, k = 1, Fe = 3 };
    const MoeDims d = {N, C, E, k, Fe, 0, 1.0f, 0, 0, 0};
    MoeActs* m = moe_acts_alloc(&d, 1, zrt_kernels_cpu());
    if (!CHECK(m != NULL, "moe/capacity_order_setup", "allocation failed")) return;
    const int pick[N] = {0, 0, 1, 0, 0, 1, 0, 0};
    float x[N * C], router[E * C] = {5, 0, 0, 5}, out[N * C], experts[E * 3 * Fe * C];
    for (int n = 0; n < N; n++) x[n * C] = pick[n] == 0, x[n * C + 1] = pick[n] == 1;
    for (int i = 0; i < E * 3 * Fe * C; i++) experts[i] = 0.1f + 0.01f * (float)i;
    LlamaParamHooks h = {.ctx = experts, .acquire = cap_acquire, .release = cap_release};
    moe_begin_step(m, N);
    const int rc = moe_forward(m, 0, zrt_kernels_cpu(), weight_of(router, 0), x, out, &h, 0, 1);
    const int want_pos[N] = {0, 1, 4, 2, 3, 5, -1, -1};
    int same = rc == 0 && m->layer[0].dropped == 2;
    for (int n = 0; n < N; n++) same &= m->layer[0].pos_host[n] == want_pos[n];
    int zero = 1, nonzero = 1;
    for (int n = 0; n < N; n++) {
        const int z = out[n * C] == 0.0f && out[n * C + 1] == 0.0f;
        if (want_pos[n] < 0) zero &= z;
        else nonzero &= !z;
    }
    CHECK(same && zero && nonzero, "moe/capacity_drops_the_latest_tokens",
          "pos %d %d %d %d %d %d %d %d (want 0 1 4 2 3 5 -1 -1), dropped %lld, dropped rows zero %d, "
          "kept rows nonzero %d",
          m->layer[0].pos_host[0], m->layer[0].pos_host[1], m->layer[0].pos_host[2],
          m->layer[0].pos_host[3], m->layer[0].pos_host[4], m->layer[0].pos_host[5],
          m->layer[0].pos_host[6], m->layer[0].pos_host[7], m->layer[0].dropped, zero, nonzero);
    moe_acts_free(m);
}

static void check_moe_capacity(const LlamaConfig* c) {
    const int B = 2, T = 7, N = B * T;
    LlamaConfig cfg = *c;
    Model m;
    if (model_init(&m, &cfg, 5)) return;
    model_randomize(&m, 3, 0.5f);
    int tok[14], tgt[14];
    make_batch(tok, tgt, B, T, cfg.vocab_size, 3);
    LlamaActs* acts = llama_acts_alloc(&cfg, B, T, zrt_kernels_cpu());
    LlamaParamHooks h = model_hooks(&m);
    float loss = llama_step(&cfg, acts, tok, tgt, B, T, &h, 1, NULL);
    const int k = cfg.n_experts_per_tok, E = cfg.n_experts;
    const int cap = (int)ceil((double)cfg.capacity_factor * N * k / E);
    int ok = isfinite(loss), blocks = 0;
    long long dropped_all = 0;
    LlamaMoeRouting r;
    for (int i = 0; llama_acts_routing(acts, i, &r) == 0; i++, blocks++) {
        long long want = 0;
        int seen[64] = {0};
        for (int e = 0; e < E; e++) want += r.routed[e] > cap ? r.routed[e] - cap : 0;
        for (int p = 0; p < N * k; p++) ok &= r.choices[p] >= 0 && r.choices[p] < E && ++seen[r.choices[p]] > 0;
        for (int e = 0; e < E; e++) ok &= seen[e] == r.routed[e];
        ok &= r.dropped == want;
        dropped_all += r.dropped;
    }
    CHECK(ok && blocks == 2 && dropped_all > 0, "moe/capacity_drops_past_the_limit",
          "%d blocks, %lld pairs dropped (limit %d per expert), loss %g", blocks, dropped_all, cap,
          (double)loss);
    llama_acts_free(acts);
    model_free(&m);
}

/* --------------------------------------- hooks order, loss, determinism */

static void check_hooks_and_loss(void) {
    const int B = 2, T = 7;
    LlamaConfig cfg = tiny_config(0);
    Model m;
    if (model_init(&m, &cfg, 5)) return;
    m.fsdp_like = 1;
    int tok[14], tgt[14];
    make_batch(tok, tgt, B, T, cfg.vocab_size, 3);
    LlamaActs* acts = llama_acts_alloc(&cfg, B, T, zrt_kernels_cpu());
    LlamaParamHooks h = model_hooks(&m);
    float* logits = malloc((size_t)B * T * cfg.vocab_size * sizeof(float));
    float loss = llama_step(&cfg, acts, tok, tgt, B, T, &h, 1, logits);
    const char* want[] = {"A0f", "R0f", "A1f", "R1f", "A2f", "R2f", // forward
                          "A3b", "G3",  "D3",  "R3b", "A2b", "G2",  "D2",  "R2b", // head, block 2
                          "A1b", "G1",  "D1",  "R1b", "G0",  "D0"};               // block 1, emb
    char got[1024];
    const int same = events_are(&m, want, sizeof want / sizeof want[0], got, sizeof got);
    CHECK(same && m.misuse == 0, "hooks/order", "got: %s", got);

    // the loss is the mean CE over counted targets, recomputed in double
    double sum = 0.0;
    int count = 0;
    for (int n = 0; n < B * T; n++) {
        if (tgt[n] < 0) continue;
        const float* l = logits + (size_t)n * cfg.vocab_size;
        double mx = l[0], s = 0.0;
        for (int i = 0; i < cfg.vocab_size; i++) mx = l[i] > mx ? l[i] : mx;
        for (int i = 0; i < cfg.vocab_size; i++) s += exp(l[i] - mx);
        sum += log(s) + mx - l[tgt[n]];
        count++;
    }
    CHECK(count == B * T - 2 && fabs(sum / count - loss) < 1e-5 * fabs(loss), "loss/mean_ce_ignores",
          "model %.7f, double %.7f over %d targets", (double)loss, sum / count, count);

    // forward-only: no backward hooks, same loss bit for bit
    m.nevents = 0;
    float loss2 = llama_step(&cfg, acts, tok, tgt, B, T, &h, 0, NULL);
    CHECK(m.nevents == 8 && loss2 == loss, "hooks/forward_only", "%d events, loss %g vs %g",
          m.nevents, (double)loss2, (double)loss);

    // bad tokens are refused before any hook runs
    m.nevents = 0;
    int badtok[14];
    memcpy(badtok, tok, sizeof tok);
    badtok[5] = cfg.vocab_size;
    float lb = llama_step(&cfg, acts, badtok, tgt, B, T, &h, 1, NULL);
    CHECK(isnan(lb) && m.nevents == 0, "step/rejects_bad_token", "loss %g, %d hook calls",
          (double)lb, m.nevents);
    m.nevents = 0;
    float lt = llama_step(&cfg, acts, tok, tgt, B, T + 1, &h, 1, NULL);
    CHECK(isnan(lt) && m.nevents == 0, "step/rejects_T_over_capacity", "loss %g", (double)lt);

    // determinism: a fresh model and the same batch give bit-identical grads
    Model m2;
    model_init(&m2, &cfg, 5);
    LlamaParamHooks h2 = model_hooks(&m2);
    model_zero_grads(&m);
    llama_step(&cfg, acts, tok, tgt, B, T, &h, 1, NULL);
    llama_step(&cfg, acts, tok, tgt, B, T, &h2, 1, NULL);
    int same_bits = 1;
    for (int u = 0; u < llama_num_units(&cfg); u++)
        same_bits &= !memcmp(m.grads[u], m2.grads[u], llama_unit_numel(&cfg, u) * sizeof(float));
    CHECK(same_bits, "grads/deterministic", "two identical steps gave different gradients");
    model_free(&m2);

    // a few AdamW steps on one repeated batch must drive the loss down
    AdamWConfig oc = {.lr = 1e-2f, .min_lr = 1e-3f, .warmup_steps = 2, .total_steps = 20,
                      .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.01f};
    float* mo[MAX_UNITS];
    float* vo[MAX_UNITS];
    for (int u = 0; u < llama_num_units(&cfg); u++) {
        mo[u] = calloc(llama_unit_numel(&cfg, u), sizeof(float));
        vo[u] = calloc(llama_unit_numel(&cfg, u), sizeof(float));
    }
    float first = 0.0f, last = 0.0f;
    for (int s = 0; s < 15; s++) {
        model_zero_grads(&m);
        float l = llama_step(&cfg, acts, tok, tgt, B, T, &h, 1, NULL);
        if (s == 0) first = l;
        last = l;
        double ss = 0.0;
        for (int u = 0; u < llama_num_units(&cfg); u++)
            ss += host_sumsq(m.grads[u], llama_unit_numel(&cfg, u));
        float clip = optim_clip_factor(sqrt(ss), 1.0f);
        for (int u = 0; u < llama_num_units(&cfg); u++) {
            size_t n = llama_unit_numel(&cfg, u);
            zrt_kernels_cpu()->scale(m.grads[u], n, clip);
            adamw_update(zrt_kernels_cpu(), &oc, m.params[u], m.grads[u], mo[u], vo[u], n, s + 1, adamw_lr(&oc, s),
                         oc.weight_decay);
        }
    }
    CHECK(last < 0.5f * first, "train/loss_decreases", "loss %.4f -> %.4f after 15 steps",
          (double)first, (double)last);
    for (int u = 0; u < llama_num_units(&cfg); u++) {
        free(mo[u]);
        free(vo[u]);
    }
    free(logits);
    llama_acts_free(acts);
    model_free(&m);
}

/* The CPU backend shares GEMMs and loops out over OpenMP threads in pieces
 * chosen by shape alone (kernels/cpu.c): 1, 2 and 3 threads give identical
 * bits, whichever OpenBLAS core runs (tests/test_blas_cores.sh repeats these
 * checks under every core the CPU can run). */
static float* rand_floats(size_t n, unsigned seed) {
    float* x = malloc(n * sizeof(float));
    if (!x) return NULL;
    srand(seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return x;
}

/* Every matmul product at 1, 2 and 3 threads, at row counts of one, two and
 * three GEMM blocks with ragged ends, and widths that include OpenBLAS's
 * small-matrix cases (N = 32): forward, dinp (assigned and accumulated) and
 * dweight must match the one-thread bits exactly. */
static void check_matmul_thread_invariance(void) {
    const ZrtKernels* k = zrt_kernels_cpu();
    const int rows[] = {120, 600, 1100, 1537};
    const int widths[][2] = {{64, 32}, {32, 64}, {64, 97}, {96, 128}, {128, 16}};
    const int saved = omp_get_max_threads();
    int bad = 0, cases = 0;
    char first[160] = "";
    for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++)
        for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++) {
            const int N = rows[ri], IC = widths[wi][0], OC = widths[wi][1];
            float* inp = rand_floats((size_t)N * IC, 1);
            float* w = rand_floats((size_t)OC * IC, 2);
            float* dout = rand_floats((size_t)N * OC, 3);
            float* ref[4] = {0}; // out, dinp, dinp accumulated, dweight at 1 thread
            const size_t len[4] = {(size_t)N * OC, (size_t)N * IC, (size_t)N * IC,
                                   (size_t)OC * IC};
            for (int t = 1; t <= 3 && inp && w && dout; t++) {
                omp_set_num_threads(t);
                float* got[4];
                for (int j = 0; j < 4; j++) got[j] = calloc(len[j], sizeof(float));
                if (!got[0] || !got[1] || !got[2] || !got[3]) break;
                for (size_t i = 0; i < len[2]; i++) got[2][i] = 0.25f * inp[i];
                k->matmul_forward(got[0], inp, w, N, IC, OC);
                k->matmul_backward(got[1], got[3], dout, inp, w, N, IC, OC, 0);
                k->matmul_backward(got[2], NULL, dout, inp, w, N, IC, OC, 1);
                for (int j = 0; j < 4; j++) {
                    if (t == 1) {
                        ref[j] = got[j];
                        continue;
                    }
                    cases++;
                    if (memcmp(ref[j], got[j], len[j] * sizeof(float))) {
                        if (!bad++)
                            snprintf(first, sizeof first, "%s at N=%d IC=%d OC=%d, %d threads",
                                     j == 0 ? "forward" : j == 3 ? "dweight" : "dinp", N, IC,
                                     OC, t);
                    }
                    free(got[j]);
                }
            }
            for (int j = 0; j < 4; j++) free(ref[j]);
            free(inp);
            free(w);
            free(dout);
        }
    omp_set_num_threads(saved);
    CHECK(!bad && cases == 4 * 5 * 2 * 4, "matmul/thread_count_invariant",
          "%d of %d products differ from the 1-thread bits; first: %s", bad, cases, first);
}

static void check_attention_thread_invariance(void) {
    const ZrtKernels* k = zrt_kernels_cpu();
    const int B = 3, T = 40, H = 4, KV = 2, hd = 16;
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd,
                 na = (size_t)B * H * T, ns = k->attention_scratch_floats(B, T, H, KV, hd);
    float *q = rand_floats(nq, 4), *kk = rand_floats(nkv, 5), *v = rand_floats(nkv, 6),
          *dd = rand_floats(nq, 7);
    float* r[2][5] = {{0}};
    const size_t len[5] = {nq, na, nq, nkv, nkv};
    const int saved = omp_get_max_threads();
    for (int t = 0; t < 2 && q && kk && v && dd; t++) {
        omp_set_num_threads(t ? 3 : 1);
        for (int j = 0; j < 5; j++) r[t][j] = calloc(len[j], sizeof(float));
        float* scratch = calloc(ns + 1, sizeof(float));
        if (scratch && r[t][0] && r[t][1] && r[t][2] && r[t][3] && r[t][4]) {
            k->attention_forward(r[t][0], r[t][1], q, kk, v, B, T, H, KV, hd, scratch);
            k->attention_backward(r[t][2], r[t][3], r[t][4], dd, r[t][0], r[t][1], q, kk, v, B, T,
                                  H, KV, hd, scratch);
        }
        free(scratch);
    }
    omp_set_num_threads(saved);
    int same = 1;
    for (int j = 0; j < 5; j++)
        same &= r[0][j] && r[1][j] && !memcmp(r[0][j], r[1][j], len[j] * sizeof(float));
    CHECK(same, "attention/thread_count_invariant",
          "out, log-sum-exp, dq, dk or dv differ between 1 and 3 threads");
    for (int t = 0; t < 2; t++)
        for (int j = 0; j < 5; j++) free(r[t][j]);
    free(q);
    free(kk);
    free(v);
    free(dd);
}

/* The attention the tiled kernel replaced, in double: the whole (T, T)
 * probability matrix per head, P = softmax(scale Q K^T) under the causal
 * mask, O = P V; dV = P^T dO, dP = dO V^T, dS = scale P (dP - rowsum(P dP)),
 * dQ = dS K, dK = dS^T Q; the heads of a group add into their kv head. */
static void attention_reference(double* o, double* lse, double* dq, double* dk, double* dv,
                                const float* q, const float* k, const float* v, const float* dout,
                                int B, int T, int H, int KV, int hd) {
    const int rep = H / KV;
    const double scale = 1.0 / sqrt((double)hd);
    double* p = malloc((size_t)T * T * sizeof(double));
    double* ds = malloc((size_t)T * T * sizeof(double));
    if (!p || !ds) abort();
    memset(dk, 0, (size_t)B * T * KV * hd * sizeof(double));
    memset(dv, 0, (size_t)B * T * KV * hd * sizeof(double));
#define Q_(b, t, h, c) q[(((size_t)(b) * T + (t)) * H + (h)) * hd + (c)]
#define DO_(b, t, h, c) dout[(((size_t)(b) * T + (t)) * H + (h)) * hd + (c)]
#define KV_(x, b, t, g, c) x[(((size_t)(b) * T + (t)) * KV + (g)) * hd + (c)]
#define P_(t, s) p[(size_t)(t) * T + (s)]
#define DS_(t, s) ds[(size_t)(t) * T + (s)]
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int g = h / rep;
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY, sum = 0;
                for (int s = 0; s <= t; s++) {
                    double x = 0;
                    for (int c = 0; c < hd; c++) x += (double)Q_(b, t, h, c) * KV_(k, b, s, g, c);
                    P_(t, s) = x * scale;
                    mx = fmax(mx, x * scale);
                }
                for (int s = 0; s <= t; s++) sum += exp(P_(t, s) - mx);
                for (int s = 0; s <= t; s++) P_(t, s) = exp(P_(t, s) - mx) / sum;
                lse[((size_t)b * H + h) * T + t] = mx + log(sum);
                for (int c = 0; c < hd; c++) {
                    double x = 0;
                    for (int s = 0; s <= t; s++) x += P_(t, s) * KV_(v, b, s, g, c);
                    o[(((size_t)b * T + t) * H + h) * hd + c] = x;
                }
            }
            for (int t = 0; t < T; t++) {
                double dot = 0;
                for (int s = 0; s <= t; s++) {
                    double x = 0;
                    for (int c = 0; c < hd; c++) x += (double)DO_(b, t, h, c) * KV_(v, b, s, g, c);
                    DS_(t, s) = x;
                    dot += x * P_(t, s);
                }
                for (int s = 0; s <= t; s++) DS_(t, s) = scale * P_(t, s) * (DS_(t, s) - dot);
            }
            for (int t = 0; t < T; t++)
                for (int c = 0; c < hd; c++) {
                    double x = 0;
                    for (int s = 0; s <= t; s++) x += DS_(t, s) * KV_(k, b, s, g, c);
                    dq[(((size_t)b * T + t) * H + h) * hd + c] = x;
                }
            for (int s = 0; s < T; s++)
                for (int c = 0; c < hd; c++) {
                    double xk = 0, xv = 0;
                    for (int t = s; t < T; t++) {
                        xk += DS_(t, s) * Q_(b, t, h, c);
                        xv += P_(t, s) * DO_(b, t, h, c);
                    }
                    KV_(dk, b, s, g, c) += xk;
                    KV_(dv, b, s, g, c) += xv;
                }
        }
#undef Q_
#undef DO_
#undef KV_
#undef P_
#undef DS_
    free(p);
    free(ds);
}

/* max |x - ref| / max |ref| */
static double rel_err_d(const float* x, const double* ref, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        e = fmax(e, fabs((double)x[i] - ref[i]));
        m = fmax(m, fabs(ref[i]));
    }
    return m > 0 ? e / m : e;
}

/* The bf16 twin's attention (the CUDA flash kernel's roundings, at hd 64
 * and 128): within bf16's 1e-2 of the fp32 tiles on bf16-representable
 * inputs but not equal (the rounding of P and dS happened), and at other
 * head dims the fp32 attention's bits. */
static void randf(float* x, size_t n, float scale);
static void check_attention_twin(void) {
    const ZrtKernels *F = zrt_kernels_cpu(), *W = zrt_kernels_cpu_bf16();
    enum { B = 1, T = 70, H = 2, KV = 1 };
    for (int hd = 8; hd <= 64; hd += 56) {
        const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd, nl = B * H * T;
        float* buf = malloc((4 * nq + 2 * nkv + nl) * 2 * sizeof(float) + 1);
        float *q = buf, *dout = q + nq, *k = dout + nq, *v = k + nkv;
        float* r[2][5]; // out, lse, dq, dk, dv of the fp32 table and the twin
        float* p = v + nkv;
        for (int t = 0; t < 2; t++) {
            r[t][0] = p, r[t][1] = p + nq, r[t][2] = r[t][1] + nl, r[t][3] = r[t][2] + nq,
            r[t][4] = r[t][3] + nkv;
            p = r[t][4] + nkv;
        }
        srand(99);
        randf(q, nq, 1.5f), randf(k, nkv, 1.5f), randf(v, nkv, 1.0f), randf(dout, nq, 1.0f);
        for (float* x = q; x < v + nkv; x++) *x = zipcclBf16ToFloat(zipcclFloatToBf16(*x));
        for (int t = 0; t < 2; t++) {
            const ZrtKernels* K = t ? W : F;
            K->attention_forward(r[t][0], r[t][1], q, k, v, B, T, H, KV, hd, NULL);
            K->attention_backward(r[t][2], r[t][3], r[t][4], dout, r[t][0], r[t][1], q, k, v, B,
                                  T, H, KV, hd, NULL);
        }
        const size_t n[5] = {nq, nl, nq, nkv, nkv};
        double worst = 0;
        int same = 1;
        for (int x = 0; x < 5; x++) {
            double md = 0, mx = 0;
            for (size_t i = 0; i < n[x]; i++) {
                md = fmax(md, fabs((double)r[1][x][i] - r[0][x][i]));
                mx = fmax(mx, fabs((double)r[0][x][i]));
            }
            worst = fmax(worst, md / mx);
            same &= !memcmp(r[0][x], r[1][x], n[x] * sizeof(float));
        }
        char what[64];
        snprintf(what, sizeof what, "attention/bf16_twin_hd%d", hd);
        if (hd == 64)
            CHECK(worst < 1e-2 && !same, what, "relative to fp32 %.3g (bound 1e-2, and not 0)", worst),
                printf("note: %s: %.2e relative to fp32\n", what, worst);
        else
            CHECK(same, what, "differs from the fp32 attention by %.3g at a head dim the "
                              "device runs in fp32", worst);
        free(buf);
    }
}

/* The tiled attention (only the log-sum-exp kept, tiles of 64 queries x
 * 128 keys) against the stored-probability attention it replaced, in
 * double: within 1e-6 of each tensor's largest value, on shapes with one
 * tile, a ragged last tile, several key blocks, grouped heads and T = 1. */
static void check_attention_reference(void) {
    const ZrtKernels* K = zrt_kernels_cpu();
    const int shapes[][5] = {{2, 1, 2, 1, 8}, {2, 40, 4, 2, 16}, {1, 200, 4, 1, 16},
                             {1, 300, 2, 2, 32}, {2, 129, 6, 3, 8}};
    double worst[2] = {0, 0};
    int ok = 1;
    for (unsigned i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int B = shapes[i][0], T = shapes[i][1], H = shapes[i][2], KV = shapes[i][3],
                  hd = shapes[i][4];
        const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd,
                     nl = (size_t)B * H * T;
        float *q = rand_floats(nq, 11 + i), *k = rand_floats(nkv, 21 + i),
              *v = rand_floats(nkv, 31 + i), *dout = rand_floats(nq, 41 + i);
        for (size_t j = 0; q && j < nq; j++) q[j] *= 4.0f; // peaked softmax rows too
        float *o = malloc(nq * 4), *lse = malloc(nl * 4), *dq = malloc(nq * 4),
              *dk = malloc(nkv * 4), *dv = malloc(nkv * 4),
              *scr = malloc((K->attention_scratch_floats(B, T, H, KV, hd) + 1) * 4);
        double *ro = malloc(nq * 8), *rl = malloc(nl * 8), *rq = malloc(nq * 8),
               *rk = malloc(nkv * 8), *rv = malloc(nkv * 8);
        if (!q || !k || !v || !dout || !o || !lse || !dq || !dk || !dv || !scr || !ro || !rl ||
            !rq || !rk || !rv) {
            ok = 0;
        } else {
            K->attention_forward(o, lse, q, k, v, B, T, H, KV, hd, scr);
            K->attention_backward(dq, dk, dv, dout, o, lse, q, k, v, B, T, H, KV, hd, scr);
            attention_reference(ro, rl, rq, rk, rv, q, k, v, dout, B, T, H, KV, hd);
            worst[0] = fmax(worst[0], fmax(rel_err_d(o, ro, nq), rel_err_d(lse, rl, nl)));
            worst[1] = fmax(worst[1], fmax(rel_err_d(dq, rq, nq),
                                           fmax(rel_err_d(dk, rk, nkv), rel_err_d(dv, rv, nkv))));
        }
        free(q), free(k), free(v), free(dout), free(o), free(lse), free(dq), free(dk), free(dv);
        free(scr), free(ro), free(rl), free(rq), free(rk), free(rv);
    }
    CHECK(ok && worst[0] < 1e-6 && worst[1] < 1e-6, "attention/tiled_matches_reference",
          "forward (out, lse) %.3g, backward (dq, dk, dv) %.3g of the largest value", worst[0],
          worst[1]);
}

static LlamaConfig moe_config(int variant);

/* A whole step: B*T = 600 rows, two GEMM blocks for every activation
 * product, so the threads really share the work; dense, and MoE (about 300
 * rows per expert). */
static void check_thread_invariance_of(const LlamaConfig* c, const char* name) {
    LlamaConfig cfg = *c;
    enum { B = 5, T = 120 };
    cfg.max_seq_len = T;
    Model m[3];
    for (int i = 0; i < 3; i++)
        if (model_init(&m[i], &cfg, 9)) return;
    int* tok = malloc(sizeof(int) * B * T);
    int* tgt = malloc(sizeof(int) * B * T);
    LlamaActs* acts = llama_acts_alloc(&cfg, B, T, zrt_kernels_cpu());
    if (!tok || !tgt || !acts) return;
    make_batch(tok, tgt, B, T, cfg.vocab_size, 5);
    const int saved = omp_get_max_threads();
    float loss[3];
    for (int i = 0; i < 3; i++) {
        LlamaParamHooks h = model_hooks(&m[i]);
        omp_set_num_threads(i + 1);
        loss[i] = llama_step(&cfg, acts, tok, tgt, B, T, &h, 1, NULL);
    }
    omp_set_num_threads(saved);
    int same = loss[0] == loss[1] && loss[0] == loss[2];
    for (int i = 1; i < 3; i++)
        for (int u = 0; u < llama_num_units(&cfg); u++)
            same &= !memcmp(m[0].grads[u], m[i].grads[u],
                            llama_unit_numel(&cfg, u) * sizeof(float));
    CHECK(same, name, "1, 2, 3 threads: loss %.9g, %.9g, %.9g, or the gradients differ",
          (double)loss[0], (double)loss[1], (double)loss[2]);
    llama_acts_free(acts);
    free(tok);
    free(tgt);
    for (int i = 0; i < 3; i++) model_free(&m[i]);
}

static void check_thread_invariance(void) {
    LlamaConfig dense = {.vocab_size = 97, .dim = 64, .n_layers = 2, .n_heads = 4,
                         .n_kv_heads = 2, .ffn_hidden = 96, .rope_theta = 10000.0f,
                         .norm_eps = 1e-5f, .tie_embeddings = 1};
    check_thread_invariance_of(&dense, "grads/thread_count_invariant");
    LlamaConfig moe = moe_config(0);
    moe.dim = 64;
    moe.moe_ffn_hidden = 48;
    check_thread_invariance_of(&moe, "grads/moe_thread_count_invariant");
}

/* --------------------------------------------------------- optimizer, bf16 */

static void check_optim(void) {
    AdamWConfig c = {.lr = 1e-3f, .min_lr = 1e-4f, .warmup_steps = 10, .total_steps = 110,
                     .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    char err[160];
    CHECK(adamw_config_check(&c, err, sizeof err) == 0, "optim/config_ok", "%s", err);
    AdamWConfig b = c;
    b.beta2 = 1.0f;
    CHECK(adamw_config_check(&b, err, sizeof err) == -1 && strstr(err, "beta2"),
          "optim/config_rejects_beta2", "%s", err);
    b = c;
    b.warmup_steps = 200;
    CHECK(adamw_config_check(&b, err, sizeof err) == -1 && strstr(err, "warmup"),
          "optim/config_rejects_warmup", "%s", err);
    // schedule against its definition, evaluated in double
    int ok = 1;
    for (int s = 0; s < 130; s++) {
        double want;
        if (s < 10) want = 1e-3 * (s + 1) / 10.0;
        else if (s >= 110) want = 1e-4;
        else want = 1e-4 + (1e-3 - 1e-4) * 0.5 * (1 + cos(M_PI * (s - 10) / 100.0));
        ok &= fabs(adamw_lr(&c, s) - want) <= 1e-6 * want + 1e-12;
    }
    CHECK(ok && adamw_lr(&c, 9) == c.lr && adamw_lr(&c, 110) == c.min_lr, "optim/schedule",
          "lr(9) %g lr(110) %g", (double)adamw_lr(&c, 9), (double)adamw_lr(&c, 110));
    // three AdamW steps against a double-precision reference
    enum { n = 1000 };
    float p[n], g[n], m[n] = {0}, v[n] = {0};
    double pd[n], md[n] = {0}, vd[n] = {0};
    srand(11);
    for (int i = 0; i < n; i++) pd[i] = p[i] = (float)rand() / RAND_MAX - 0.5f;
    double maxrel = 0.0;
    for (int t = 1; t <= 3; t++) {
        for (int i = 0; i < n; i++) g[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.1f;
        float lr = adamw_lr(&c, t - 1);
        adamw_update(zrt_kernels_cpu(), &c, p, g, m, v, n, t, lr, c.weight_decay);
        for (int i = 0; i < n; i++) {
            md[i] = 0.9 * md[i] + 0.1 * g[i];
            vd[i] = 0.95 * vd[i] + 0.05 * (double)g[i] * g[i];
            double mh = md[i] / (1 - pow(0.9, t)), vh = vd[i] / (1 - pow(0.95, t));
            pd[i] -= lr * (mh / (sqrt(vh) + 1e-8) + 0.1 * pd[i]);
        }
    }
    for (int i = 0; i < n; i++) {
        double r = fabs(p[i] - pd[i]) / (fabs(pd[i]) + 1e-3);
        maxrel = r > maxrel ? r : maxrel;
    }
    CHECK(maxrel < 1e-5, "optim/adamw_vs_double", "max rel err %.3g", maxrel);
    // sum of squares and clipping
    float* x = malloc(100003 * sizeof(float));
    double want = 0.0;
    for (int i = 0; i < 100003; i++) {
        x[i] = (float)sin(i * 0.37);
        want += (double)x[i] * x[i];
    }
    double got = host_sumsq(x, 100003);
    CHECK(fabs(got - want) < 1e-9 * want, "optim/sumsq", "%.12g vs %.12g", got, want);
    float f = optim_clip_factor(4.0, 1.0f);
    CHECK(fabsf(f - 0.25f) < 1e-6f && optim_clip_factor(0.5, 1.0f) == 1.0f &&
              optim_clip_factor(NAN, 1.0f) == 1.0f && optim_clip_factor(9.0, 0.0f) == 1.0f,
          "optim/clip_factor", "factor(4, 1) = %g", (double)f);
    zrt_kernels_cpu()->scale(x, 100003, 0.5f);
    CHECK(fabs(host_sumsq(x, 100003) - want / 4) < 1e-9 * want, "optim/scale", "scaled sumsq");
    free(x);
}

/* reference bf16 rounding through frexp/nearbyint (ties-to-even mode) */
static float bf16_reference(float f) {
    if (isnan(f) || isinf(f) || f == 0.0f) return f;
    int e;
    double mant = frexp((double)f, &e);        // f = mant * 2^e, 0.5 <= |mant| < 1
    int shift = 8;                             // bf16 keeps 8 significant bits
    if (e < -125) shift = 8 - (-125 - e);      // subnormal: fewer bits
    double r = ldexp(nearbyint(ldexp(mant, shift)), e - shift);
    if (fabs(r) > 3.3895313892515355e38) return f > 0 ? INFINITY : -INFINITY;
    return (float)r;
}

static void check_bf16(void) {
    const ZrtKernels* K = zrt_kernels_cpu();
    enum { n = 20000 };
    static float in[n], out[n];
    static uint16_t h[n];
    srand(4);
    for (int i = 0; i < n; i++) {
        uint32_t u = ((uint32_t)rand() << 16) ^ (uint32_t)rand();
        memcpy(&in[i], &u, 4);
    }
    // edge cases: exact ties both ways, max float, a NaN, signed zero, denormals
    const float edge[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 3.4028235e38f, -0.0f,
                          0x1p-140f * 1.5f, -1.0f - 0x1p-8f, 65535.0f, 0x1.fffffep-127f};
    memcpy(in, edge, sizeof edge);
    in[100] = NAN;
    K->round_to_bf16(h, in, n);
    K->bf16_to_float(out, h, n);
    int bad = 0, first = -1;
    for (int i = 0; i < n; i++) {
        float want = bf16_reference(in[i]);
        int same = isnan(want) ? isnan(out[i]) : (memcmp(&want, &out[i], 4) == 0);
        if (!same && first < 0) first = i;
        bad += !same;
    }
    CHECK(bad == 0, "bf16/round_nearest_even", "%d mismatches, first in %a got %a", bad,
          first >= 0 ? (double)in[first] : 0.0, first >= 0 ? (double)out[first] : 0.0);
    memcpy(out, in, sizeof in);
    K->round_bf16_inplace(out, n);
    int same = 1;
    for (int i = 0; i < n; i++) {
        float w = zipcclBf16ToFloat(h[i]);
        same &= isnan(w) ? isnan(out[i]) : !memcmp(&w, &out[i], 4);
    }
    CHECK(same, "bf16/inplace_matches", "in-place rounding differs from round trip");
}

/* ------------------------------------------------- the guarded CPU device */

/* Does reading (write = 0) or writing p in a child process kill it with
 * SIGSEGV? The child restores the default handler first (a sanitizer's
 * would turn the fault into an exit code). */
static int child_faults(float* p, int write) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        if (write) *(volatile float*)p = 1.0f;
        else (void)*(volatile float*)p;
        _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return 0;
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV;
}

/* The guarded table's memory: reachable through the table, a fault for the
 * host outside it (before and after kernel calls), and the kernels' results
 * are the CPU table's. */
static void check_guarded_device(void) {
    const ZrtKernels* G = zrt_kernels_cpu_guarded();
    const ZrtKernels* K = zrt_kernels_cpu();
    enum { n = 3000 };
    static float a[n], b[n], out[n], ref[n];
    for (int i = 0; i < n; i++) a[i] = 0.25f * (float)(i % 13) - 1.0f, b[i] = (float)i / 7.0f;
    float* da = zdev_alloc(G->dev, n * sizeof(float));
    float* db = zdev_alloc(G->dev, n * sizeof(float));
    CHECK(da && db && !G->dev->host_access && K->dev->host_access, "guarded/alloc", "allocation failed");
    if (!da || !db) return;
    zdevCheck(zdev_upload(G->dev, da, a, sizeof a));
    zdevCheck(zdev_upload(G->dev, db, b, sizeof b));
    CHECK(child_faults(da, 0) && child_faults(db, 1), "guarded/host_access_faults",
          "the host read or wrote guarded memory outside a table call without a fault");
    G->add(da, da, db, n);
    K->add(ref, a, b, n);
    CHECK(child_faults(da, 0), "guarded/closed_after_a_kernel",
          "guarded memory stayed open after a kernel call");
    zdevCheck(zdev_download(G->dev, out, da, sizeof out));
    CHECK(!memcmp(out, ref, sizeof out), "guarded/kernel_matches_cpu",
          "the guarded add differs from the CPU add");
    zdevCheck(zdev_memset_async(G->dev, db, 0, sizeof b, NULL));
    zdevCheck(zdev_download(G->dev, out, db, sizeof out));
    int zero = 1;
    for (int i = 0; i < n; i++) zero &= out[i] == 0.0f;
    CHECK(zero, "guarded/memset0", "memset0 left non-zero values");
    zdev_free(G->dev, da);
    zdev_free(G->dev, db);
}

/* upload -> copy -> download returns the bytes; memset0 zeroes a range;
 * mem_info answers or says it cannot */
static void check_memory_entries(const ZrtKernels* G, const char* name) {
    enum { n = 5000 };
    static float a[n], b[n];
    for (int i = 0; i < n; i++) a[i] = (float)i * 0.5f - 7.0f;
    float *x = zdev_alloc(G->dev, sizeof a), *y = zdev_alloc(G->dev, sizeof a);
    char what[96];
    snprintf(what, sizeof what, "%s/memory_alloc", name);
    if (!CHECK(x && y, what, "alloc failed")) return;
    snprintf(what, sizeof what, "%s/memory_round_trip", name);
    zdevCheck(zdev_upload(G->dev, x, a, sizeof a));
    zdevCheck(zdev_copy_async(G->dev, y, x, sizeof a, ZDEV_DEVICE_TO_DEVICE, NULL));
    zdevCheck(zdev_memset_async(G->dev, x + 100, 0, 50 * sizeof(float), NULL));
    zdevCheck(zdev_download(G->dev, b, y, sizeof b));
    int ok = !memcmp(a, b, sizeof a);
    zdevCheck(zdev_download(G->dev, b, x, sizeof b));
    for (int i = 0; i < n; i++) ok &= b[i] == (i >= 100 && i < 150 ? 0.0f : a[i]);
    zdevCheck(zdev_stream_sync(G->dev, NULL));
    size_t fr = 0, tot = 0;
    const int mi = zdev_mem_info(G->dev, &fr, &tot);
    CHECK(ok && (mi == -1 || (mi == 0 && fr > 0 && fr <= tot)), what,
          "bytes %s, mem_info %d (%zu of %zu)", ok ? "same" : "DIFFER", mi, fr, tot);
    zdev_free(G->dev, x);
    zdev_free(G->dev, y);
}

/* Events on table G: recorded around a product, the time between them is
 * finite and not negative, and a later event is not earlier. */
static void check_events(const ZrtKernels* G, const char* name) {
    enum { n = 256 };
    static float h[n * n];
    for (int i = 0; i < n * n; i++) h[i] = (float)(i % 7) * 0.1f;
    float *a = zdev_alloc(G->dev, sizeof h), *c = zdev_alloc(G->dev, sizeof h);
    char what[96];
    snprintf(what, sizeof what, "%s/events_alloc", name);
    if (!CHECK(a && c, what, "alloc failed")) return;
    snprintf(what, sizeof what, "%s/events", name);
    zdevCheck(zdev_upload(G->dev, a, h, sizeof h));
    void *e0 = NULL, *e1 = NULL, *e2 = NULL;
    int bad = zdev_event_create(G->dev, &e0, 1) || zdev_event_create(G->dev, &e1, 1) ||
              zdev_event_create(G->dev, &e2, 1);
    bad = bad || zdev_event_record(G->dev, e0, NULL);
    G->matmul_forward(c, a, a, n, n, n);
    bad = bad || zdev_event_record(G->dev, e1, NULL);
    G->matmul_forward(c, a, a, n, n, n);
    bad = bad || zdev_event_record(G->dev, e2, NULL);
    double t01 = -1, t02 = -1;
    bad = bad || zdev_event_elapsed_ms(G->dev, e0, e1, &t01) || zdev_event_elapsed_ms(G->dev, e0, e2, &t02);
    CHECK(!bad && isfinite(t01) && t01 >= 0 && t02 >= t01, what, "events %p %p %p, %.3f ms then %.3f ms (%s)", e0,
          e1, e2, t01, t02, bad ? zdev_error() : "");
    zdev_event_destroy(G->dev, e0);
    zdev_event_destroy(G->dev, e1);
    zdev_event_destroy(G->dev, e2);
    zdev_free(G->dev, a);
    zdev_free(G->dev, c);
}

/* The optimizer's entries and the bf16 accumulate on table G against the
 * CPU table, bit for bit (kernels.h: no fused multiply-add, fixed-order
 * sums), through G's own memory entries: AdamW over several steps with
 * weight decay on and off, the sum of squares across a partial last
 * block, scale, add_bf16. */
static void check_optimizer_entries(const ZrtKernels* G, const char* name) {
    const ZrtKernels* K = zrt_kernels_cpu();
    enum { n = 3 * ZRT_SUMSQ_BLOCK + 1234 };
    static float p[n], g[n], m[n], v[n], got[n];
    static uint16_t h16[n];
    srand(5);
    for (int i = 0; i < n; i++) {
        p[i] = (float)rand() / RAND_MAX - 0.5f;
        m[i] = v[i] = 0.0f;
    }
    float *dp = zdev_alloc(G->dev, sizeof p), *dg = zdev_alloc(G->dev, sizeof g), *dm = zdev_alloc(G->dev, sizeof m),
          *dv = zdev_alloc(G->dev, sizeof v);
    uint16_t* d16 = zdev_alloc(G->dev, sizeof h16);
    double* dss = zdev_alloc(G->dev, sizeof(double));
    char what[96];
    snprintf(what, sizeof what, "%s/optimizer_alloc", name);
    if (!CHECK(dp && dg && dm && dv && d16 && dss, what, "alloc failed")) return;
    zdevCheck(zdev_upload(G->dev, dp, p, sizeof p));
    zdevCheck(zdev_memset_async(G->dev, dm, 0, sizeof m, NULL));
    zdevCheck(zdev_memset_async(G->dev, dv, 0, sizeof v, NULL));
    AdamWConfig c = {.lr = 3e-3f, .min_lr = 3e-4f, .warmup_steps = 1, .total_steps = 10,
                     .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    int same = 1;
    double ss_cpu = 0, ss_dev = 0;
    for (int t = 1; t <= 4; t++) {
        for (int i = 0; i < n; i++) g[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.01f * (float)t;
        zdevCheck(zdev_upload(G->dev, dg, g, sizeof g));
        K->sumsq(&ss_cpu, g, n);
        G->sumsq(dss, dg, n);
        zdevCheck(zdev_download(G->dev, &ss_dev, dss, sizeof ss_dev));
        same &= ss_cpu == ss_dev;
        K->scale(g, n, 0.75f);
        G->scale(dg, n, 0.75f);
        const float wd = t % 2 ? c.weight_decay : 0.0f, lr = adamw_lr(&c, t - 1);
        adamw_update(K, &c, p, g, m, v, n, t, lr, wd);
        adamw_update(G, &c, dp, dg, dm, dv, n, t, lr, wd);
    }
    zdevCheck(zdev_download(G->dev, got, dp, sizeof got));
    same &= !memcmp(got, p, sizeof p);
    zdevCheck(zdev_download(G->dev, got, dm, sizeof got));
    same &= !memcmp(got, m, sizeof m);
    zdevCheck(zdev_download(G->dev, got, dv, sizeof got));
    same &= !memcmp(got, v, sizeof v);
    snprintf(what, sizeof what, "%s/adamw_sumsq_scale", name);
    CHECK(same, what, "differ from the CPU table (sumsq %.17g vs %.17g)", ss_dev, ss_cpu);
    K->round_to_bf16(h16, g, n);
    zdevCheck(zdev_upload(G->dev, d16, h16, sizeof h16));
    K->add_bf16(p, h16, n);
    G->add_bf16(dp, d16, n);
    zdevCheck(zdev_download(G->dev, got, dp, sizeof got));
    snprintf(what, sizeof what, "%s/add_bf16", name);
    CHECK(!memcmp(got, p, sizeof p), what, "differs from the CPU table");
    zdev_free(G->dev, dp);
    zdev_free(G->dev, dg);
    zdev_free(G->dev, dm);
    zdev_free(G->dev, dv);
    zdev_free(G->dev, d16);
    zdev_free(G->dev, dss);
}

/* The multi-tensor entries (adamw_multi, sumsq_multi) on table G against
 * the single ones on the CPU with the gradient scaled in memory first (by
 * gscale, then by clip: what the trainer did before they existed), bit for
 * bit: three slices of one buffer (one spanning several of a device's
 * chunks, one a partial sum-of-squares block, one without weight decay),
 * over three steps, the clip on in one of them; and the CPU's own
 * multi-tensor entries against the same reference. */
static void check_optimizer_multi(const ZrtKernels* G, const char* name) {
    const ZrtKernels* K = zrt_kernels_cpu();
    enum { n0 = 40000, n1 = ZRT_SUMSQ_BLOCK + 77, n2 = 515, n = n0 + n1 + n2 };
    const size_t len[3] = {n0, n1, n2}, at[3] = {0, n0, n0 + n1};
    const float wds[3] = {0.1f, 0.0f, 0.1f};
    static float p[3][n], g[n], gs[n], m[3][n], v[3][n], got[n];
    srand(11);
    for (int i = 0; i < n; i++) {
        p[0][i] = p[1][i] = (float)rand() / RAND_MAX - 0.5f;
        m[0][i] = m[1][i] = v[0][i] = v[1][i] = 0.0f;
    }
    float *dp = zdev_alloc(G->dev, sizeof got), *dg = zdev_alloc(G->dev, sizeof got),
          *dm = zdev_alloc(G->dev, sizeof got), *dv = zdev_alloc(G->dev, sizeof got);
    double* dss = zdev_alloc(G->dev, 3 * sizeof(double));
    char what[96];
    snprintf(what, sizeof what, "%s/optimizer_multi_alloc", name);
    if (!CHECK(dp && dg && dm && dv && dss, what, "alloc failed")) return;
    zdevCheck(zdev_upload(G->dev, dp, p[0], sizeof got));
    zdevCheck(zdev_memset_async(G->dev, dm, 0, sizeof got, NULL));
    zdevCheck(zdev_memset_async(G->dev, dv, 0, sizeof got, NULL));
    AdamWConfig c = {.lr = 3e-3f, .min_lr = 3e-4f, .warmup_steps = 1, .total_steps = 10,
                     .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    int same_dev = 1, same_cpu = 1;
    for (int t = 1; t <= 3; t++) {
        for (int i = 0; i < n; i++) g[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.3f * (float)t;
        zdevCheck(zdev_upload(G->dev, dg, g, sizeof got));
        const float gscale = 1.0f / 6.0f, clip = t == 2 ? 0.37f : 1.0f, lr = adamw_lr(&c, t - 1);
        /* the reference: scale in memory, sums of squares, clip, one adamw per slice */
        memcpy(gs, g, sizeof gs);
        K->scale(gs, n, gscale);
        double ref[3], cpu[3], dev[3];
        for (int k = 0; k < 3; k++) K->sumsq(&ref[k], gs + at[k], len[k]);
        if (clip != 1.0f) K->scale(gs, n, clip);
        for (int k = 0; k < 3; k++)
            adamw_update(K, &c, p[0] + at[k], gs + at[k], m[0] + at[k], v[0] + at[k], len[k], t, lr, wds[k]);
        /* the CPU's multi-tensor entries and G's */
        const ZrtAdamWStep st = adamw_step(&c, t, lr, c.weight_decay);
        float* hx[3] = {g, g + at[1], g + at[2]};
        float* dx[3] = {dg, dg + at[1], dg + at[2]};
        K->sumsq_multi(cpu, hx, len, 3, gscale);
        G->sumsq_multi(dss, dx, len, 3, gscale);
        zdevCheck(zdev_download(G->dev, dev, dss, sizeof dev));
        ZrtAdamWSlice hs[3], ds[3];
        for (int k = 0; k < 3; k++) {
            hs[k] = (ZrtAdamWSlice){p[1] + at[k], g + at[k], m[1] + at[k], v[1] + at[k], len[k], wds[k]};
            ds[k] = (ZrtAdamWSlice){dp + at[k], dg + at[k], dm + at[k], dv + at[k], len[k], wds[k]};
        }
        K->adamw_multi(hs, 3, &st, gscale, clip);
        G->adamw_multi(ds, 3, &st, gscale, clip);
        same_cpu &= !memcmp(ref, cpu, sizeof ref);
        same_dev &= !memcmp(ref, dev, sizeof ref);
    }
    same_cpu &= !memcmp(p[0], p[1], sizeof got) && !memcmp(m[0], m[1], sizeof got) &&
                !memcmp(v[0], v[1], sizeof got);
    zdevCheck(zdev_download(G->dev, got, dp, sizeof got));
    same_dev &= !memcmp(got, p[0], sizeof got);
    zdevCheck(zdev_download(G->dev, got, dm, sizeof got));
    same_dev &= !memcmp(got, m[0], sizeof got);
    zdevCheck(zdev_download(G->dev, got, dv, sizeof got));
    same_dev &= !memcmp(got, v[0], sizeof got);
    snprintf(what, sizeof what, "%s/adamw_sumsq_multi_cpu_equals_scaled_single", name);
    CHECK(same_cpu, what, "the CPU's multi-tensor entries differ from scaling in memory");
    snprintf(what, sizeof what, "%s/adamw_sumsq_multi_equals_cpu", name);
    CHECK(same_dev, what, "differ from the CPU's single entries on scaled gradients");
    zdev_free(G->dev, dp);
    zdev_free(G->dev, dg);
    zdev_free(G->dev, dm);
    zdev_free(G->dev, dv);
    zdev_free(G->dev, dss);
}

/* ---------------------------------------------- a whole step on a backend */

/* Hooks over per-unit buffers in a backend's memory (what the scheduler
 * hands the model with runtime.device: cuda or cpu_guarded). */
typedef struct {
    const ZrtKernels* K;
    int nunits;
    void* p[MAX_UNITS]; /* fp32, or bf16 (STEP_BF16_UNITS) */
    float* g[MAX_UNITS];
} DevModel;
static const void* d_acquire(void* ctx, int u, int phase) {
    (void)phase;
    return ((DevModel*)ctx)->p[u];
}
static void d_release(void* ctx, int u, int phase) { (void)ctx, (void)u, (void)phase; }
static float* d_grad_buffer(void* ctx, int u) { return ((DevModel*)ctx)->g[u]; }
static void d_grads_ready(void* ctx, int u) { (void)ctx, (void)u; }

/* Two micro-batches (gradients accumulate) of a model (tiny_config's,
 * untied, with QK-norm and odd shapes, or a MoE one) on backend G against
 * the host table R: the losses, logits and every unit's gradient within
 * tol relative to the largest value (tol 0: bit for bit).
 * STEP_BF16_UNITS: G's hooks hand the units over in bf16 (what FSDP's bf16
 * gathers do) and R's hand their fp32 widenings: the same values, so the
 * same bits on a host table. STEP_RECOMPUTE: both recompute the blocks. */
enum { STEP_BF16_UNITS = 1, STEP_RECOMPUTE = 2, STEP_LOGIT_CHUNKS = 4 /* the head 5 rows at a time */ };
static LlamaConfig moe_config(int variant);
static void check_step_of(const ZrtKernels* G, const ZrtKernels* R, const char* name, double tol,
                          const LlamaConfig* cfg_in, int flags) {
    LlamaConfig cfg = *cfg_in;
    enum { B = 2, T = 7 };
    Model m;
    DevModel d = {.K = G};
    const LlamaMemOpts mo = {.recompute = !!(flags & STEP_RECOMPUTE),
                             .logits_rows = flags & STEP_LOGIT_CHUNKS ? 5 : 0};
    const int b16 = !!(flags & STEP_BF16_UNITS);
    LlamaActs* ac = llama_acts_alloc_opts(&cfg, B, T, R, &mo);
    LlamaActs* ad = llama_acts_alloc_opts(&cfg, B, T, G, &mo);
    char what[96];
    snprintf(what, sizeof what, "%s/step_setup", name);
    if (!CHECK(!model_init(&m, &cfg, 11) && ac && ad, what, "allocation failed")) return;
    model_randomize(&m, 5, 0.3f);
    d.nunits = m.nunits;
    for (int u = 0; u < m.nunits; u++) {
        const size_t n = llama_unit_numel(&cfg, u), bytes = n * sizeof(float);
        d.g[u] = zdev_alloc(G->dev, bytes);
        zdevCheck(zdev_memset_async(G->dev, d.g[u], 0, bytes, NULL));
        if (!b16) {
            d.p[u] = zdev_alloc(G->dev, bytes);
            zdevCheck(zdev_upload(G->dev, d.p[u], m.params[u], bytes));
            continue;
        }
        uint16_t* h = malloc(n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) {
            h[i] = zipcclFloatToBf16(m.params[u][i]);
            m.params[u][i] = zipcclBf16ToFloat(h[i]); /* the reference's widening */
        }
        d.p[u] = zdev_alloc(G->dev, n * sizeof(uint16_t));
        zdevCheck(zdev_upload(G->dev, d.p[u], h, n * sizeof(uint16_t)));
        free(h);
    }
    const LlamaParamHooks hc = model_hooks(&m);
    const LlamaParamHooks hd = {.ctx = &d, .acquire = d_acquire, .release = d_release,
                                .grad_buffer = d_grad_buffer, .grads_ready = d_grads_ready,
                                .bf16_units = b16};
    const int V = cfg.vocab_size;
    int tok[B * T], tgt[B * T];
    static float lc[B * T * 512], ld[B * T * 512];
    double worst_loss = 0, worst_logit = 0;
    for (int mb = 0; mb < 2; mb++) {
        for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + mb * 3) % V, tgt[i] = i % 6 ? (i * 5 + mb) % V : -1;
        const float a = llama_step(&cfg, ac, tok, tgt, B, T, &hc, 1, lc);
        const float b = llama_step(&cfg, ad, tok, tgt, B, T, &hd, 1, ld);
        const double dl = fabs((double)a - b) / fabs((double)a);
        worst_loss = dl > worst_loss ? dl : worst_loss;
        double md = 0, mx = 0;
        for (int i = 0; i < B * T * V; i++) {
            md = fmax(md, fabs((double)lc[i] - ld[i]));
            mx = fmax(mx, fabs((double)lc[i]));
        }
        worst_logit = fmax(worst_logit, md / mx);
    }
    snprintf(what, sizeof what, "%s/step_loss_and_logits", name);
    CHECK(worst_loss <= tol && worst_logit <= tol, what, "loss %.3g, logits %.3g relative (bound %g)",
          worst_loss, worst_logit, tol);
    double worst_grad = 0;
    int worst_unit = 0;
    for (int u = 0; u < m.nunits; u++) {
        const size_t n = llama_unit_numel(&cfg, u);
        float* h = malloc(n * sizeof(float));
        zdevCheck(zdev_download(G->dev, h, d.g[u], n * sizeof(float)));
        double md = 0, mx = 0;
        for (size_t i = 0; i < n; i++) {
            md = fmax(md, fabs((double)h[i] - m.grads[u][i]));
            mx = fmax(mx, fabs((double)m.grads[u][i]));
        }
        if (md / (mx + 1e-30) > worst_grad) worst_grad = md / (mx + 1e-30), worst_unit = u;
        free(h);
        zdev_free(G->dev, d.p[u]);
        zdev_free(G->dev, d.g[u]);
    }
    snprintf(what, sizeof what, "%s/step_gradients", name);
    CHECK(worst_grad <= tol, what, "unit %d differs by %.3g relative (bound %g)", worst_unit,
          worst_grad, tol);
    if (cfg.n_experts > 0) { // the routing statistics the host reads
        LlamaMoeRouting rc, rd;
        int same = 1;
        for (int i = 0; llama_acts_routing(ac, i, &rc) == 0; i++) {
            same &= llama_acts_routing(ad, i, &rd) == 0 && rc.dropped == rd.dropped &&
                    !memcmp(rc.choices, rd.choices, (size_t)B * T * cfg.n_experts_per_tok * sizeof(int)) &&
                    !memcmp(rc.routed, rd.routed, (size_t)cfg.n_experts * sizeof(int));
        }
        const double xa = llama_acts_aux_loss(ac), xd = llama_acts_aux_loss(ad);
        snprintf(what, sizeof what, "%s/step_routing_and_aux", name);
        CHECK(same && fabs(xa - xd) <= tol * fabs(xa), what, "routing %s, aux %.9g vs %.9g",
              same ? "same" : "DIFFERS", xa, xd);
    }
    llama_acts_free(ac);
    llama_acts_free(ad);
    model_free(&m);
}

/* The dense model (QK-norm, untied), the MoE model (top-2 renormalised,
 * top-1, and with a capacity that drops pairs) on backend G against the
 * host table R (R's memory is host memory: the model reads it directly). */
static void check_step_on(const ZrtKernels* G, const ZrtKernels* R, const char* name, double tol) {
    char n2[64];
    LlamaConfig c = tiny_config(0);
    c.qk_norm = 1;
    check_step_of(G, R, name, tol, &c, 0);
    for (int v = 0; v < 3; v++) {
        c = moe_config(v == 1);
        if (v == 2) c.capacity_factor = 0.75f;
        snprintf(n2, sizeof n2, "%s/moe%d", name, v);
        check_step_of(G, R, n2, tol, &c, 0);
    }
}

/* Units in bf16 (FSDP's bf16 gathers): on backend G, a step over bf16 units
 * against host table R over their fp32 widenings, dense untied with QK-norm,
 * dense tied (the final norm in unit 0), with recomputation, and MoE. */
static void check_step_bf16_units(const ZrtKernels* G, const ZrtKernels* R, const char* name,
                                  double tol) {
    char n2[80];
    LlamaConfig c = tiny_config(0);
    c.qk_norm = 1;
    snprintf(n2, sizeof n2, "%s/bf16_units", name);
    check_step_of(G, R, n2, tol, &c, STEP_BF16_UNITS);
    snprintf(n2, sizeof n2, "%s/bf16_units_recompute", name);
    check_step_of(G, R, n2, tol, &c, STEP_BF16_UNITS | STEP_RECOMPUTE);
    c = tiny_config(1);
    snprintf(n2, sizeof n2, "%s/bf16_units_tied", name);
    check_step_of(G, R, n2, tol, &c, STEP_BF16_UNITS);
    c = moe_config(0);
    snprintf(n2, sizeof n2, "%s/bf16_units_moe", name);
    check_step_of(G, R, n2, tol, &c, STEP_BF16_UNITS);
    snprintf(n2, sizeof n2, "%s/bf16_units_moe_recompute", name);
    check_step_of(G, R, n2, tol, &c, STEP_BF16_UNITS | STEP_RECOMPUTE);
}

/* The bf16-weight entries (_w16) of backend G against host table R's fp32
 * entries given the widened weight, on the same inputs (tol 0: the same
 * bits): forward, backward (dinp accumulated and dweight), the embedding. */
static void check_w16_entries(const ZrtKernels* G, const ZrtKernels* R, const char* name,
                              double tol) {
    enum { N = 29, IC = 40, OC = 36, V = 11 };
    static float x[N * IC], w[OC * IC], dy[N * OC], out[N * OC], ref[N * OC], dx[N * IC],
        rdx[N * IC], dw[OC * IC], rdw[OC * IC], emb[N * IC], remb[N * IC], tab[V * IC];
    static uint16_t w16[OC * IC], t16[V * IC];
    int tok[N];
    srand(91);
    for (int i = 0; i < N * IC; i++) x[i] = ((float)rand() / RAND_MAX - 0.5f) * 3.0f;
    for (int i = 0; i < N * OC; i++) dy[i] = ((float)rand() / RAND_MAX - 0.5f);
    for (int i = 0; i < OC * IC; i++) {
        w16[i] = zipcclFloatToBf16(((float)rand() / RAND_MAX - 0.5f) * 0.4f);
        w[i] = zipcclBf16ToFloat(w16[i]);
    }
    for (int i = 0; i < V * IC; i++) {
        t16[i] = zipcclFloatToBf16((float)rand() / RAND_MAX - 0.5f);
        tab[i] = zipcclBf16ToFloat(t16[i]);
    }
    for (int n = 0; n < N; n++) tok[n] = (n * 7 + 3) % V;
    float *dX = zdev_alloc(G->dev, sizeof x), *dY = zdev_alloc(G->dev, sizeof out), *dDY = zdev_alloc(G->dev, sizeof dy),
          *dDX = zdev_alloc(G->dev, sizeof dx), *dDW = zdev_alloc(G->dev, sizeof dw), *dE = zdev_alloc(G->dev, sizeof emb);
    uint16_t *dW = zdev_alloc(G->dev, sizeof w16), *dT = zdev_alloc(G->dev, sizeof t16);
    int* dTok = zdev_alloc(G->dev, sizeof tok);
    zdevCheck(zdev_upload(G->dev, dX, x, sizeof x));
    zdevCheck(zdev_upload(G->dev, dW, w16, sizeof w16));
    zdevCheck(zdev_upload(G->dev, dT, t16, sizeof t16));
    zdevCheck(zdev_upload(G->dev, dTok, tok, sizeof tok));
    zdevCheck(zdev_upload(G->dev, dDY, dy, sizeof dy));
    for (int i = 0; i < N * IC; i++) rdx[i] = dx[i] = 0.25f * (float)(i % 5); /* accumulated into */
    zdevCheck(zdev_upload(G->dev, dDX, dx, sizeof dx));
    zdevCheck(zdev_memset_async(G->dev, dDW, 0, sizeof dw, NULL));
    memset(rdw, 0, sizeof rdw);
    G->matmul_forward_w16(dY, dX, dW, N, IC, OC);
    R->matmul_forward(ref, x, w, N, IC, OC);
    G->matmul_backward_w16(dDX, dDW, dDY, dX, dW, N, IC, OC, 1);
    R->matmul_backward(rdx, rdw, dy, x, w, N, IC, OC, 1);
    G->embedding_forward_w16(dE, dTok, dT, N, IC);
    R->embedding_forward(remb, tok, tab, N, IC);
    zdevCheck(zdev_download(G->dev, out, dY, sizeof out));
    zdevCheck(zdev_download(G->dev, dx, dDX, sizeof dx));
    zdevCheck(zdev_download(G->dev, dw, dDW, sizeof dw));
    zdevCheck(zdev_download(G->dev, emb, dE, sizeof emb));
    double ef = 0, mf = 0, ex = 0, mx = 0, ew = 0, mw = 0;
    for (int i = 0; i < N * OC; i++) ef = fmax(ef, fabs((double)out[i] - ref[i])), mf = fmax(mf, fabs((double)ref[i]));
    for (int i = 0; i < N * IC; i++) ex = fmax(ex, fabs((double)dx[i] - rdx[i])), mx = fmax(mx, fabs((double)rdx[i]));
    for (int i = 0; i < OC * IC; i++) ew = fmax(ew, fabs((double)dw[i] - rdw[i])), mw = fmax(mw, fabs((double)rdw[i]));
    char what[96];
    snprintf(what, sizeof what, "%s/matmul_w16", name);
    CHECK(ef / mf <= tol && ex / mx <= tol && ew / mw <= tol, what,
          "fwd %.3g dinp %.3g dweight %.3g relative to the widened weight's (bound %g)", ef / mf,
          ex / mx, ew / mw, tol);
    snprintf(what, sizeof what, "%s/embedding_w16", name);
    CHECK(!memcmp(emb, remb, sizeof emb), what, "rows differ from the widened table's");
    zdev_free(G->dev, dX), zdev_free(G->dev, dY), zdev_free(G->dev, dDY), zdev_free(G->dev, dDX), zdev_free(G->dev, dDW), zdev_free(G->dev, dE);
    zdev_free(G->dev, dW), zdev_free(G->dev, dT), zdev_free(G->dev, dTok);
}

/* The bf16 linear layers: on the same inputs, backend G's bf16 matmuls
 * equal the CPU twin's within tol (both round the operands the same way;
 * only the fp32 summation order may differ), and they differ from the fp32
 * product by a bf16-sized amount (the rounding happened). */
static void check_matmul_bf16(const ZrtKernels* G, const char* name, double tol) {
    const ZrtKernels* R = zrt_kernels_cpu_bf16();
    const ZrtKernels* F = zrt_kernels_cpu();
    enum { N = 37, IC = 48, OC = 40 };
    static float x[N * IC], w[OC * IC], y[N * OC], dy[N * OC], out[N * OC], ref[N * OC], f32[N * OC],
        dx[N * IC], rdx[N * IC], dw[OC * IC], rdw[OC * IC];
    srand(77);
    for (int i = 0; i < N * IC; i++) x[i] = ((float)rand() / RAND_MAX - 0.5f) * 3.0f;
    for (int i = 0; i < OC * IC; i++) w[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.4f;
    for (int i = 0; i < N * OC; i++) dy[i] = ((float)rand() / RAND_MAX - 0.5f);
    float *dX = zdev_alloc(G->dev, sizeof x), *dW = zdev_alloc(G->dev, sizeof w), *dY = zdev_alloc(G->dev, sizeof y),
          *dDY = zdev_alloc(G->dev, sizeof dy), *dDX = zdev_alloc(G->dev, sizeof dx), *dDW = zdev_alloc(G->dev, sizeof dw);
    zdevCheck(zdev_upload(G->dev, dX, x, sizeof x));
    zdevCheck(zdev_upload(G->dev, dW, w, sizeof w));
    zdevCheck(zdev_upload(G->dev, dDY, dy, sizeof dy));
    zdevCheck(zdev_memset_async(G->dev, dDW, 0, sizeof dw, NULL));
    memset(rdw, 0, sizeof rdw);
    G->matmul_forward(dY, dX, dW, N, IC, OC);
    R->matmul_forward(ref, x, w, N, IC, OC);
    F->matmul_forward(f32, x, w, N, IC, OC);
    G->matmul_backward(dDX, dDW, dDY, dX, dW, N, IC, OC, 0);
    R->matmul_backward(rdx, rdw, dy, x, w, N, IC, OC, 0);
    zdevCheck(zdev_download(G->dev, out, dY, sizeof out));
    zdevCheck(zdev_download(G->dev, dx, dDX, sizeof dx));
    zdevCheck(zdev_download(G->dev, dw, dDW, sizeof dw));
    double e = 0, m = 0, ef = 0;
    for (int i = 0; i < N * OC; i++) {
        e = fmax(e, fabs((double)out[i] - ref[i]));
        ef = fmax(ef, fabs((double)f32[i] - ref[i]));
        m = fmax(m, fabs((double)ref[i]));
    }
    double ex = 0, mx = 0, ew = 0, mw = 0;
    for (int i = 0; i < N * IC; i++) ex = fmax(ex, fabs((double)dx[i] - rdx[i])), mx = fmax(mx, fabs((double)rdx[i]));
    for (int i = 0; i < OC * IC; i++) ew = fmax(ew, fabs((double)dw[i] - rdw[i])), mw = fmax(mw, fabs((double)rdw[i]));
    const double eb = fmax(ex / mx, ew / mw); /* the worse of dx and dw, relative */
    char what[96];
    snprintf(what, sizeof what, "%s/matmul_bf16", name);
    CHECK(e / m <= tol && eb <= tol && ef / m > 1e-4, what,
          "fwd %.3g bwd %.3g relative to the CPU twin (bound %g); fp32 vs bf16 %.3g (must be > 1e-4)",
          e / m, eb, tol, ef / m);
    zdev_free(G->dev, dX), zdev_free(G->dev, dW), zdev_free(G->dev, dY), zdev_free(G->dev, dDY), zdev_free(G->dev, dDX), zdev_free(G->dev, dDW);
}

/* The bf16 activation entries (kernels.h, "bf16 activations") of bf16
 * table G against G's own fp32-input entries on the same values, bit for
 * bit (tol 0 on any table, the GPU's too: the same kernels see the same
 * operands): the norm's and SwiGLU's outputs are the fp32 ones rounded once,
 * a GEMM on a bf16 input equals the GEMM on its widening, with an fp32
 * weight and with a bf16 one, forward and backward (dinp accumulated). */
/* q, k, v in bf16 (rope_forward_a16, attention_*_a16) on table G at head
 * dim 64, bit for bit against G's fp32 entries on the same values: RoPE
 * then one rounding; attention on bf16 q, k, v as on their widenings. */
static void check_a16_attention(const ZrtKernels* G, const char* name) {
    enum { B = 2, T = 70, H = 2, KV = 1, HD = 64 };
    const size_t nq = (size_t)B * T * H * HD, nkv = (size_t)B * T * KV * HD;
    char what[96];
    snprintf(what, sizeof what, "%s/a16_attention", name);
    if (!CHECK(G->rope_forward_a16 && G->attention_forward_a16 && G->attention_backward_a16, what,
               "the bf16 table lacks the q, k, v entries"))
        return;
    float *x = malloc(nq * 4), *wq = malloc(nq * 4), *wk = malloc(nkv * 4), *wv = malloc(nkv * 4),
          *dout = malloc(nq * 4), *r1 = malloc(nq * 4), *r2 = malloc(nq * 4);
    uint16_t *q16 = malloc(nq * 2), *k16 = malloc(nkv * 2), *v16 = malloc(nkv * 2), *h1 = malloc(nq * 2),
             *h2 = malloc(nq * 2);
    srand(321);
    for (size_t i = 0; i < nq; i++) {
        x[i] = ((float)rand() / RAND_MAX - 0.5f) * 2.0f;
        dout[i] = (float)rand() / RAND_MAX - 0.5f;
        q16[i] = zipcclFloatToBf16(x[i]);
        wq[i] = zipcclBf16ToFloat(q16[i]);
    }
    for (size_t i = 0; i < nkv; i++) {
        k16[i] = zipcclFloatToBf16(((float)rand() / RAND_MAX - 0.5f) * 2.0f), wk[i] = zipcclBf16ToFloat(k16[i]);
        v16[i] = zipcclFloatToBf16((float)rand() / RAND_MAX - 0.5f), wv[i] = zipcclBf16ToFloat(v16[i]);
    }
    ZDevice* dv = G->dev;
    const size_t sf = G->attention_scratch_floats(B, T, H, KV, HD);
    float *dX = zdev_alloc(dv, nq * 4), *dCS = zdev_alloc(dv, (size_t)T * HD * 4), *dQ = zdev_alloc(dv, nq * 4),
          *dK = zdev_alloc(dv, nkv * 4), *dV = zdev_alloc(dv, nkv * 4), *dO = zdev_alloc(dv, nq * 4),
          *dL = zdev_alloc(dv, (size_t)B * H * T * 4), *dS = zdev_alloc(dv, sf * 4), *dDO = zdev_alloc(dv, nq * 4),
          *gq = zdev_alloc(dv, nq * 4), *gk = zdev_alloc(dv, nkv * 4), *gv = zdev_alloc(dv, nkv * 4);
    uint16_t *dH = zdev_alloc(dv, nq * 2), *dQ16 = zdev_alloc(dv, nq * 2), *dK16 = zdev_alloc(dv, nkv * 2),
             *dV16 = zdev_alloc(dv, nkv * 2);
    zdevCheck(zdev_upload(dv, dX, x, nq * 4));
    zdevCheck(zdev_upload(dv, dQ, wq, nq * 4));
    zdevCheck(zdev_upload(dv, dK, wk, nkv * 4));
    zdevCheck(zdev_upload(dv, dV, wv, nkv * 4));
    zdevCheck(zdev_upload(dv, dDO, dout, nq * 4));
    zdevCheck(zdev_upload(dv, dQ16, q16, nq * 2));
    zdevCheck(zdev_upload(dv, dK16, k16, nkv * 2));
    zdevCheck(zdev_upload(dv, dV16, v16, nkv * 2));
    G->rope_table(dCS, T, HD, 10000.0f);
    /* RoPE: bf16(rotated), x unchanged */
    G->rope_forward_a16(dH, dX, dCS, B, T, H, HD);
    zdevCheck(zdev_download(dv, h1, dH, nq * 2));
    zdevCheck(zdev_download(dv, r1, dX, nq * 4));
    const int kept = !memcmp(r1, x, nq * 4);
    G->rope_forward(dX, dCS, B, T, H, HD);
    G->round_to_bf16(dH, dX, nq);
    zdevCheck(zdev_download(dv, h2, dH, nq * 2));
    snprintf(what, sizeof what, "%s/a16_rope", name);
    CHECK(kept && !memcmp(h1, h2, nq * 2), what, "input kept %d; output %s the rotation rounded once", kept,
          memcmp(h1, h2, nq * 2) ? "differs from" : "equals");
    /* attention forward and backward */
    int same = 1;
    for (int pass = 0; pass < 2; pass++) {
        if (!pass) G->attention_forward_a16(dO, dL, dQ16, dK16, dV16, B, T, H, KV, HD, dS);
        else G->attention_forward(dO, dL, dQ, dK, dV, B, T, H, KV, HD, dS);
        if (!pass) G->attention_backward_a16(gq, gk, gv, dDO, dO, dL, dQ16, dK16, dV16, B, T, H, KV, HD, dS);
        else G->attention_backward(gq, gk, gv, dDO, dO, dL, dQ, dK, dV, B, T, H, KV, HD, dS);
        float* dst = pass ? r2 : r1;
        zdevCheck(zdev_download(dv, dst, dO, nq * 4));
        float* gd = malloc(nq * 4);
        zdevCheck(zdev_download(dv, gd, gq, nq * 4));
        static float gq0[B * T * H * HD];
        if (!pass) memcpy(gq0, gd, nq * 4);
        else same &= !memcmp(gq0, gd, nq * 4);
        free(gd);
    }
    same &= !memcmp(r1, r2, nq * 4);
    snprintf(what, sizeof what, "%s/a16_attention_hd64", name);
    CHECK(same, what, "attention on bf16 q, k, v differs from attention on their widenings");
    free(x), free(wq), free(wk), free(wv), free(dout), free(r1), free(r2), free(q16), free(k16), free(v16);
    free(h1), free(h2);
    zdev_free(dv, dX), zdev_free(dv, dCS), zdev_free(dv, dQ), zdev_free(dv, dK), zdev_free(dv, dV);
    zdev_free(dv, dO), zdev_free(dv, dL), zdev_free(dv, dS), zdev_free(dv, dDO), zdev_free(dv, gq);
    zdev_free(dv, gk), zdev_free(dv, gv), zdev_free(dv, dH), zdev_free(dv, dQ16), zdev_free(dv, dK16);
    zdev_free(dv, dV16);
}

static void check_a16_entries(const ZrtKernels* G, const char* name) {
    enum { N = 29, IC = 40, OC = 36 };
    static float x[N * IC], xw[N * IC], w[OC * IC], nw[IC], dy[N * OC], u[N * IC];
    static uint16_t x16[N * IC], w16[OC * IC], got16[N * IC], want16[N * IC];
    static float got[N * OC], want[N * OC], gdx[N * IC], wdx[N * IC], gdw[OC * IC], wdw[OC * IC],
        r1[N], r2[N], tmp[N * IC];
    char what[96];
    if (!G->rmsnorm_forward_a16 || !G->swiglu_forward_a16 || !G->matmul_forward_a16 ||
        !G->matmul_backward_a16) {
        snprintf(what, sizeof what, "%s/a16_entries", name);
        CHECK(0, what, "the bf16 table lacks the bf16 activation entries");
        return;
    }
    srand(123);
    for (int i = 0; i < N * IC; i++) {
        x[i] = ((float)rand() / RAND_MAX - 0.5f) * 3.0f;
        u[i] = ((float)rand() / RAND_MAX - 0.5f) * 2.0f;
        x16[i] = zipcclFloatToBf16(x[i]);
        xw[i] = zipcclBf16ToFloat(x16[i]);
    }
    for (int i = 0; i < IC; i++) nw[i] = 1.0f + ((float)rand() / RAND_MAX - 0.5f) * 0.2f;
    for (int i = 0; i < OC * IC; i++) {
        w[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.4f; /* not bf16-representable */
        w16[i] = zipcclFloatToBf16(w[i]);
    }
    for (int i = 0; i < N * OC; i++) dy[i] = (float)rand() / RAND_MAX - 0.5f;
    ZDevice* dv = G->dev;
    float *dX = zdev_alloc(dv, sizeof x), *dXW = zdev_alloc(dv, sizeof xw), *dU = zdev_alloc(dv, sizeof u),
          *dNW = zdev_alloc(dv, sizeof nw), *dW = zdev_alloc(dv, sizeof w), *dDY = zdev_alloc(dv, sizeof dy),
          *dY = zdev_alloc(dv, sizeof got), *dR = zdev_alloc(dv, sizeof r1), *dT = zdev_alloc(dv, sizeof tmp),
          *dDX = zdev_alloc(dv, sizeof gdx), *dDW = zdev_alloc(dv, sizeof gdw);
    uint16_t *dX16 = zdev_alloc(dv, sizeof x16), *dW16 = zdev_alloc(dv, sizeof w16),
             *dO16 = zdev_alloc(dv, sizeof got16);
    zdevCheck(zdev_upload(dv, dX, x, sizeof x));
    zdevCheck(zdev_upload(dv, dXW, xw, sizeof xw));
    zdevCheck(zdev_upload(dv, dU, u, sizeof u));
    zdevCheck(zdev_upload(dv, dNW, nw, sizeof nw));
    zdevCheck(zdev_upload(dv, dW, w, sizeof w));
    zdevCheck(zdev_upload(dv, dDY, dy, sizeof dy));
    zdevCheck(zdev_upload(dv, dX16, x16, sizeof x16));
    zdevCheck(zdev_upload(dv, dW16, w16, sizeof w16));

    /* the norm: bf16(out) and the same rstd */
    G->rmsnorm_forward_a16(dO16, dR, dX, dNW, N, IC, 1e-5f);
    zdevCheck(zdev_download(dv, got16, dO16, sizeof got16));
    zdevCheck(zdev_download(dv, r1, dR, sizeof r1));
    G->rmsnorm_forward(dT, dR, dX, dNW, N, IC, 1e-5f);
    G->round_to_bf16(dO16, dT, (size_t)N * IC);
    zdevCheck(zdev_download(dv, want16, dO16, sizeof want16));
    zdevCheck(zdev_download(dv, r2, dR, sizeof r2));
    snprintf(what, sizeof what, "%s/a16_rmsnorm", name);
    CHECK(!memcmp(got16, want16, sizeof got16) && !memcmp(r1, r2, sizeof r1), what,
          "not the fp32 norm rounded once");
    /* SwiGLU: bf16(silu(gate) * up) */
    G->swiglu_forward_a16(dO16, dX, dU, N, IC);
    zdevCheck(zdev_download(dv, got16, dO16, sizeof got16));
    G->swiglu_forward(dT, dX, dU, N, IC);
    G->round_to_bf16(dO16, dT, (size_t)N * IC);
    zdevCheck(zdev_download(dv, want16, dO16, sizeof want16));
    snprintf(what, sizeof what, "%s/a16_swiglu", name);
    CHECK(!memcmp(got16, want16, sizeof got16), what, "not the fp32 SwiGLU rounded once");

    /* the GEMMs, with an fp32 weight (wk 0) and a bf16 one (wk 1) */
    for (int wk = 0; wk < 2; wk++) {
        const float* W32 = wk ? NULL : dW;
        const uint16_t* W16 = wk ? dW16 : NULL;
        G->matmul_forward_a16(dY, dX16, W32, W16, N, IC, OC);
        zdevCheck(zdev_download(dv, got, dY, sizeof got));
        if (wk) G->matmul_forward_w16(dY, dXW, dW16, N, IC, OC);
        else G->matmul_forward(dY, dXW, dW, N, IC, OC);
        zdevCheck(zdev_download(dv, want, dY, sizeof want));
        for (int pass = 0; pass < 2; pass++) { /* 0: the a16 entry, 1: the reference */
            for (int i = 0; i < N * IC; i++) tmp[i] = 0.125f * (float)(i % 7);
            zdevCheck(zdev_upload(dv, dDX, tmp, sizeof tmp)); /* accumulated into */
            zdevCheck(zdev_memset_async(dv, dDW, 0, sizeof gdw, NULL));
            if (!pass) G->matmul_backward_a16(dDX, dDW, dDY, dX16, W32, W16, N, IC, OC, 1);
            else if (wk) G->matmul_backward_w16(dDX, dDW, dDY, dXW, dW16, N, IC, OC, 1);
            else G->matmul_backward(dDX, dDW, dDY, dXW, dW, N, IC, OC, 1);
            zdevCheck(zdev_download(dv, pass ? wdx : gdx, dDX, sizeof gdx));
            zdevCheck(zdev_download(dv, pass ? wdw : gdw, dDW, sizeof gdw));
        }
        snprintf(what, sizeof what, "%s/a16_matmul_%s", name, wk ? "w16" : "w32");
        CHECK(!memcmp(got, want, sizeof got) && !memcmp(gdx, wdx, sizeof gdx) &&
                  !memcmp(gdw, wdw, sizeof gdw),
              what, "fwd %s, dinp %s, dweight %s the widened input's", memcmp(got, want, sizeof got) ? "differs from" : "equals",
              memcmp(gdx, wdx, sizeof gdx) ? "differs from" : "equals",
              memcmp(gdw, wdw, sizeof gdw) ? "differs from" : "equals");
    }
    zdev_free(dv, dX), zdev_free(dv, dXW), zdev_free(dv, dU), zdev_free(dv, dNW), zdev_free(dv, dW);
    zdev_free(dv, dDY), zdev_free(dv, dY), zdev_free(dv, dR), zdev_free(dv, dT), zdev_free(dv, dDX);
    zdev_free(dv, dDW), zdev_free(dv, dX16), zdev_free(dv, dW16), zdev_free(dv, dO16);
    check_a16_attention(G, name);
}

/* max |a - b| / (max |b| + 1e-30) over n host floats */
static double rel_diff_host(const float* a, const float* b, size_t n) {
    double md = 0.0, mx = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        md = d > md ? d : md;
        mx = fabs(b[i]) > mx ? fabs(b[i]) : mx;
    }
    return md / (mx + 1e-30);
}

/* The grouped entries (the MoE experts' GEMMs in one launch) on table G:
 * within tol of the a16 entries called group after group (tol 0: their
 * bits; a GPU's grouped kernels may sum in another order), forward and
 * backward (dinp overwritten and accumulated, dweight per group at its own
 * stride), with fp32 weights (rounded) and bf16 ones, empty groups among
 * them, and more groups than one CUDA launch takes (kernels/cuda.cu GG_MAX
 * 64: 70 groups). */
static void check_grouped_entries(const ZrtKernels* G, const char* name, double tol) {
    enum { IC = 24, OC = 20, GMAX = 70 };
    char what[96];
    snprintf(what, sizeof what, "%s/grouped_entries", name);
    if (!CHECK(G->matmul_forward_grouped_a16 && G->matmul_backward_grouped_a16, what,
               "the bf16 table lacks the grouped entries"))
        return;
    static const int few[] = {5, 0, 9, 1, 0, 14};
    static int many[GMAX];
    for (int g = 0; g < GMAX; g++) many[g] = g % 5 == 3 ? 0 : 1 + g % 3;
    const size_t ws = 3 * (size_t)OC * IC + 8, dws = 2 * (size_t)OC * IC + 4; /* strides past a group's matrix */
    ZDevice* dv = G->dev;
    for (int shape = 0; shape < 2; shape++) {
        const int* rows = shape ? many : few;
        const int ng = shape ? GMAX : (int)(sizeof few / sizeof few[0]);
        int N = 0;
        for (int g = 0; g < ng; g++) N += rows[g];
        const size_t nx = (size_t)N * IC, ny = (size_t)N * OC, nw = ng * ws, ndw = ng * dws;
        float* w = malloc(nw * sizeof(float));
        float* dy = malloc(ny * sizeof(float));
        float* t = malloc((nx > ndw ? nx : ndw) * sizeof(float));
        float *got = malloc(ny * sizeof(float)), *want = malloc(ny * sizeof(float));
        float *gdx = malloc(nx * sizeof(float)), *wdx = malloc(nx * sizeof(float));
        float *gdw = malloc(ndw * sizeof(float)), *wdw = malloc(ndw * sizeof(float));
        uint16_t *x16 = malloc(nx * 2), *w16 = malloc(nw * 2);
        srand(77 + shape);
        for (size_t i = 0; i < nx; i++) x16[i] = zipcclFloatToBf16(((float)rand() / RAND_MAX - 0.5f) * 3.0f);
        for (size_t i = 0; i < nw; i++) {
            w[i] = ((float)rand() / RAND_MAX - 0.5f) * 0.4f; /* not bf16-representable */
            w16[i] = zipcclFloatToBf16(w[i]);
        }
        for (size_t i = 0; i < ny; i++) dy[i] = (float)rand() / RAND_MAX - 0.5f;
        float *dW = zdev_alloc(dv, nw * 4), *dDY = zdev_alloc(dv, ny * 4), *dY = zdev_alloc(dv, ny * 4),
              *dDX = zdev_alloc(dv, nx * 4), *dDW = zdev_alloc(dv, ndw * 4);
        uint16_t *dX16 = zdev_alloc(dv, nx * 2), *dW16 = zdev_alloc(dv, nw * 2);
        zdevCheck(zdev_upload(dv, dW, w, nw * 4));
        zdevCheck(zdev_upload(dv, dW16, w16, nw * 2));
        zdevCheck(zdev_upload(dv, dX16, x16, nx * 2));
        zdevCheck(zdev_upload(dv, dDY, dy, ny * 4));
        for (int wk = 0; wk < 2; wk++)
            for (int acc = 0; acc < 2; acc++) {
                const float* W32 = wk ? NULL : dW;
                const uint16_t* W16 = wk ? dW16 : NULL;
                for (int pass = 0; pass < 2; pass++) { /* 0: grouped, 1: the a16 entries group by group */
                    for (size_t i = 0; i < nx; i++) t[i] = 0.125f * (float)(i % 7);
                    zdevCheck(zdev_upload(dv, dDX, t, nx * 4)); /* accumulated into with acc */
                    for (size_t i = 0; i < ndw; i++) t[i] = 0.25f * (float)(i % 5);
                    zdevCheck(zdev_upload(dv, dDW, t, ndw * 4));
                    zdevCheck(zdev_memset_async(dv, dY, 0, ny * 4, NULL));
                    if (!pass) {
                        G->matmul_forward_grouped_a16(dY, dX16, W32, W16, ws, rows, ng, IC, OC);
                        G->matmul_backward_grouped_a16(dDX, dDW, dws, dDY, dX16, W32, W16, ws, rows, ng, IC, OC, acc);
                    } else {
                        for (int g = 0, o = 0; g < ng; o += rows[g], g++) {
                            if (!rows[g]) continue;
                            const size_t wo = (size_t)g * ws;
                            G->matmul_forward_a16(dY + (size_t)o * OC, dX16 + (size_t)o * IC, W32 ? W32 + wo : NULL,
                                                  W16 ? W16 + wo : NULL, rows[g], IC, OC);
                            G->matmul_backward_a16(dDX + (size_t)o * IC, dDW + (size_t)g * dws, dDY + (size_t)o * OC,
                                                   dX16 + (size_t)o * IC, W32 ? W32 + wo : NULL,
                                                   W16 ? W16 + wo : NULL, rows[g], IC, OC, acc);
                        }
                    }
                    zdevCheck(zdev_download(dv, pass ? want : got, dY, ny * 4));
                    zdevCheck(zdev_download(dv, pass ? wdx : gdx, dDX, nx * 4));
                    zdevCheck(zdev_download(dv, pass ? wdw : gdw, dDW, ndw * 4));
                }
                snprintf(what, sizeof what, "%s/grouped_%s_%s%s", name, shape ? "70_groups" : "6_groups",
                         wk ? "w16" : "w32", acc ? "_accumulate" : "");
                const double fe = rel_diff_host(got, want, ny), be = rel_diff_host(gdx, wdx, nx),
                             we = rel_diff_host(gdw, wdw, ndw);
                const int ok = tol > 0 ? fe <= tol && be <= tol && we <= tol
                                       : !memcmp(got, want, ny * 4) && !memcmp(gdx, wdx, nx * 4) &&
                                             !memcmp(gdw, wdw, ndw * 4);
                CHECK(ok, what, "forward %.3g, dinp %.3g, dweight %.3g relative from the a16 entries' (bound %g)", fe,
                      be, we, tol);
            }
        zdev_free(dv, dW), zdev_free(dv, dDY), zdev_free(dv, dY), zdev_free(dv, dDX), zdev_free(dv, dDW);
        zdev_free(dv, dX16), zdev_free(dv, dW16);
        free(w), free(dy), free(t), free(got), free(want), free(gdx), free(wdx), free(gdw), free(wdw);
        free(x16), free(w16);
    }
}

/* The model over the bf16 twin keeps ln1, ln2, hid and lnf in bf16 (llama.c's
 * ActA16): a step has the bits of the same twin without the a16 entries
 * (every input still rounded by its GEMMs), dense and MoE, with
 * recomputation and over bf16 units, and its arena is smaller by exactly
 * the halves of those tensors. */
static void check_a16_model(void) {
    static ZrtKernels plain;
    plain = *zrt_kernels_cpu_bf16();
    plain.name = "cpu_bf16_no_a16";
    plain.rmsnorm_forward_a16 = NULL, plain.swiglu_forward_a16 = NULL;
    plain.matmul_forward_a16 = NULL, plain.matmul_backward_a16 = NULL;
    const ZrtKernels* A = zrt_kernels_cpu_bf16();
    LlamaConfig dense = tiny_config(0), qk = tiny_config(1), moe = moe_config(0);
    qk.qk_norm = 1;
    check_step_of(A, &plain, "cpu_bf16/a16_same_bits", 0.0, &dense, 0);
    check_step_of(A, &plain, "cpu_bf16/a16_same_bits_qk_tied", 0.0, &qk, 0);
    check_step_of(A, &plain, "cpu_bf16/a16_same_bits_recompute", 0.0, &dense, STEP_RECOMPUTE);
    check_step_of(A, &plain, "cpu_bf16/a16_same_bits_units", 0.0, &dense, STEP_BF16_UNITS);
    check_step_of(A, &plain, "cpu_bf16/a16_same_bits_logit_chunks", 0.0, &dense, STEP_LOGIT_CHUNKS);
    check_step_of(A, &plain, "cpu_bf16/a16_same_bits_moe", 0.0, &moe, 0);
    check_step_of(A, &plain, "cpu_bf16/a16_same_bits_moe_recompute", 0.0, &moe, STEP_RECOMPUTE);
    check_step_of(A, &plain, "cpu_bf16/a16_same_bits_moe_units", 0.0, &moe, STEP_BF16_UNITS);
    {   /* the experts' grouped GEMMs: the bits of one GEMM per expert */
        static ZrtKernels loop;
        loop = *A;
        loop.name = "cpu_bf16_no_grouped";
        loop.matmul_forward_grouped_a16 = NULL, loop.matmul_backward_grouped_a16 = NULL;
        const LlamaConfig moe1 = moe_config(1);
        check_step_of(A, &loop, "cpu_bf16/grouped_same_bits_moe", 0.0, &moe, 0);
        check_step_of(A, &loop, "cpu_bf16/grouped_same_bits_moe_top1", 0.0, &moe1, 0);
        check_step_of(A, &loop, "cpu_bf16/grouped_same_bits_moe_recompute", 0.0, &moe, STEP_RECOMPUTE);
        check_step_of(A, &loop, "cpu_bf16/grouped_same_bits_moe_units", 0.0, &moe, STEP_BF16_UNITS);
    }
    /* head dim 64: q, k, v in bf16 too (attention's flash tiles) */
    LlamaConfig h64 = tiny_config(0);
    h64.dim = 128, h64.n_heads = 2, h64.n_kv_heads = 1, h64.ffn_hidden = 64;
    check_step_of(A, &plain, "cpu_bf16/a16_same_bits_qkv_hd64", 0.0, &h64, 0);
    check_step_of(A, &plain, "cpu_bf16/a16_same_bits_qkv_hd64_recompute", 0.0, &h64, STEP_RECOMPUTE);
    h64.qk_norm = 1;
    check_step_of(A, &plain, "cpu_bf16/a16_same_bits_qkv_hd64_qknorm", 0.0, &h64, 0);
    {   /* its arena: q, k, v at 2 bytes instead of 4 as well */
        h64.qk_norm = 0;
        enum { B2 = 2, T2 = 7 };
        const size_t N2 = B2 * T2, QD = 128, KVD = 64;
        const size_t saved = llama_acts_bytes(&h64, B2, T2, &plain) - llama_acts_bytes(&h64, B2, T2, A);
        const size_t want = (2 * 2 * N2 * 128 + 2 * N2 * 64 + N2 * 128 + 2 * N2 * (QD + 2 * KVD)) * 2;
        CHECK(saved >= want - 7 * 64 && saved <= want + 7 * 64, "cpu_bf16/a16_arena_qkv_hd64",
              "%zu bytes saved, want %zu (ln1, ln2, hid, lnf, q, k, v halved)", saved, want);
    }
    /* the arena: ln1 and hid (every dense block), lnf and ln2 (dense
     * models) at 2 bytes instead of 4, each tensor rounded up to 64 bytes */
    enum { B = 2, T = 7 };
    const size_t N = B * T, C = dense.dim, F = dense.ffn_hidden, L = dense.n_layers;
    const size_t full = llama_acts_bytes(&dense, B, T, &plain), half = llama_acts_bytes(&dense, B, T, A);
    const size_t want = (L * N * C + L * N * C + L * N * F + N * C) * 2; /* the halves saved */
    CHECK(full - half >= want - 4 * 64 && full - half <= want + 4 * 64, "cpu_bf16/a16_arena",
          "arena %zu -> %zu bytes, %zu saved; ln1, ln2, hid, lnf halved: %zu", full, half, full - half,
          want);
    /* MoE: ln1, the dense blocks' hid and lnf halved (ln2 stays fp32: the
     * router reads it), each MoE block's expert hid halved (cap = N k rows
     * of Fe), and one (cap, C) bf16 copy of a chunk's expert input added */
    for (int v = 0; v < 2; v++) {
        LlamaConfig mc = moe_config(v);
        size_t Lm = 0, Ld = 0;
        for (int l = 0; l < mc.n_layers; l++) llama_layer_is_moe(&mc, l) ? Lm++ : Ld++;
        const size_t cap = N * mc.n_experts_per_tok, Fe = mc.moe_ffn_hidden;
        const size_t mfull = llama_acts_bytes(&mc, B, T, &plain), mhalf = llama_acts_bytes(&mc, B, T, A);
        const long long mwant = (long long)((mc.n_layers * N * mc.dim + Ld * N * mc.ffn_hidden + N * mc.dim) * 2 +
                                            Lm * cap * Fe * 2) - (long long)(cap * mc.dim * 2);
        const long long saved = (long long)mfull - (long long)mhalf;
        char name[64];
        snprintf(name, sizeof name, "cpu_bf16/a16_arena_moe%s", v ? "_variant" : "");
        CHECK(saved >= mwant - 3 * 64 && saved <= mwant + 3 * 64, name,
              "arena %zu -> %zu bytes, %lld saved; want %lld (ln1, dense hid, lnf, expert hid halved, xin16 added)",
              mfull, mhalf, saved, mwant);
    }
}

#ifdef ZIPCCL_HAVE_CUDA
/* The bf16 CUDA table's cuDNN engine (kernels/attention_cudnn.cpp) on a
 * machine without a usable GPU: it refuses to open and says why (cuDNN's
 * version and the failed handle where libcudnn.so.9 loads: its dynamic
 * loading ran; or that the library is absent, or that the build has no
 * frontend), and a forward then fails with the same reason, no crash. With
 * a GPU here, make test-gpu checks the engine instead. */
static void check_cudnn_engine_without_gpu(void) {
    if (zrt_kernels_cuda(NULL)) {
        printf("note: a CUDA device is here: the cuDNN engine is checked by make test-gpu\n");
        return;
    }
    char why[256] = "", why2[256] = "";
    const int r = zrt_cudnn_sdpa_open(NULL, why, sizeof why);
    const int r2 =
        zrt_cudnn_sdpa_forward(NULL, NULL, NULL, NULL, NULL, NULL, 1, 64, 2, 1, 64, why2, sizeof why2);
    CHECK(r == -1 && why[0] && r2 == -1 && !strcmp(why, why2) && !zrt_cudnn_sdpa_version()[0],
          "cudnn/engine_refused_without_gpu", "open %d (%s), forward %d (%s)", r, why, r2, why2);
    printf("note: the cuDNN attention engine here: %s\n", why);
}
#endif

/* ------------------------------------------ a table's kernels vs the CPU's */

/* The checks below reach the table's memory through its own entries only, so
 * they run on the GPU (make test-gpu), on the warp emulator
 * (tests/test_model_cuda_emu.sh) and on the guarded table alike. */
static const ZrtKernels* g_tab; /* the table under test */

static float* dev_copy(const void* h, size_t bytes) {
    void* d = zdev_alloc(g_tab->dev, bytes);
    if (!d) return NULL;
    if (h) zdevCheck(zdev_upload(g_tab->dev, d, h, bytes));
    else zdevCheck(zdev_memset_async(g_tab->dev, d, 0, bytes, NULL));
    return d;
}

/* max |a - b| / (max |b| + 1e-30) over n, b being the CPU result */
static double rel_diff_dev(const float* dev, const float* host, size_t n) {
    float* h = malloc(n * sizeof(float));
    zdevCheck(zdev_download(g_tab->dev, h, dev, n * sizeof(float)));
    double md = 0.0, mx = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)h[i] - host[i]);
        md = d > md ? d : md;
        mx = fabs(host[i]) > mx ? fabs(host[i]) : mx;
    }
    free(h);
    return md / (mx + 1e-30);
}

static void randf(float* x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 2.0f * scale;
}

static void check_embedding_order(const ZrtKernels* G, const char* name);

/* Each kernel of table G against the CPU kernel on the same random inputs:
 * relative max-norm error < 1e-5 (fp32, different summation orders). */
static void check_table_kernels(const ZrtKernels* G, const char* name) {
    const ZrtKernels* K = zrt_kernels_cpu();
    char what[64];
    g_tab = G;
    enum { B = 2, T = 13, H = 6, KV = 3, hd = 8, C = 48, F = 40, V = 53, N = B * T };
    srand(21);
    // dy serves as (N, F), (N, C) and (N, H*hd) upstream gradient: C = H*hd >= F
    static float x[N * C], w[F * C], y[N * F], dy[N * C], r[N], cs[T * hd], g[F * C], dx[N * C];
    static float q[N * H * hd], k[N * KV * hd], v[N * KV * hd], att[B * H * T], o[N * H * hd];
    static float dq[N * H * hd], dk[N * KV * hd], dv[N * KV * hd], scratch[B * KV * T * T];
    static float logits[N * V], dl[N * V], losses[N];
    int tok[N], tgt[N];
    for (int i = 0; i < N; i++) tok[i] = rand() % V, tgt[i] = i % 5 ? rand() % V : -1;
    randf(x, N * C, 1.0f);
    randf(w, F * C, 0.2f);
    randf(dy, N * C, 1.0f);
    float *dX = dev_copy(x, sizeof x), *dW = dev_copy(w, sizeof w), *dY = dev_copy(NULL, sizeof y),
          *dDY = dev_copy(dy, sizeof dy), *dG = dev_copy(NULL, sizeof g),
          *dDX = dev_copy(NULL, sizeof dx), *dR = dev_copy(NULL, sizeof r);
    // matmul
    K->matmul_forward(y, x, w, N, C, F);
    G->matmul_forward(dY, dX, dW, N, C, F);
    double e1 = rel_diff_dev(dY, y, N * F);
    memset(g, 0, sizeof g);
    K->matmul_backward(dx, g, dy, x, w, N, C, F, 0);
    G->matmul_backward(dDX, dG, dDY, dX, dW, N, C, F, 0);
    double e2 = fmax(rel_diff_dev(dDX, dx, N * C), rel_diff_dev(dG, g, F * C));
    snprintf(what, sizeof what, "%s/matmul", name);
    CHECK(e1 < 1e-5 && e2 < 1e-5, what, "fwd %.3g bwd %.3g", e1, e2);
    // rmsnorm (weight = first C of w)
    K->rmsnorm_forward(dx, r, x, w, N, C, 1e-5f);
    G->rmsnorm_forward(dDX, dR, dX, dW, N, C, 1e-5f);
    e1 = rel_diff_dev(dDX, dx, N * C);
    memset(g, 0, sizeof g);
    memset(dx, 0, sizeof dx);
    zdevCheck(zdev_memset_async(G->dev, dG, 0, sizeof g, NULL));
    zdevCheck(zdev_memset_async(G->dev, dDX, 0, sizeof dx, NULL));
    K->rmsnorm_backward(dx, g, dy, x, w, r, N, C);
    G->rmsnorm_backward(dDX, dG, dDY, dX, dW, dR, N, C);
    e2 = fmax(rel_diff_dev(dDX, dx, N * C), rel_diff_dev(dG, g, C));
    snprintf(what, sizeof what, "%s/rmsnorm", name);
    CHECK(e1 < 1e-5 && e2 < 1e-5, what, "fwd %.3g bwd %.3g", e1, e2);
    // rope + attention
    randf(q, sizeof q / 4, 1.0f);
    randf(k, sizeof k / 4, 1.0f);
    randf(v, sizeof v / 4, 1.0f);
    float *dQ = dev_copy(q, sizeof q), *dK = dev_copy(k, sizeof k), *dV = dev_copy(v, sizeof v),
          *dCS = dev_copy(NULL, sizeof cs), *dATT = dev_copy(NULL, sizeof att),
          *dO = dev_copy(NULL, sizeof o),
          *dS = dev_copy(NULL, G->attention_scratch_floats(B, T, H, KV, hd) * sizeof(float)),
          *dDQ = dev_copy(NULL, sizeof dq), *dDK = dev_copy(NULL, sizeof dk),
          *dDV = dev_copy(NULL, sizeof dv);
    K->rope_table(cs, T, hd, 10000.0f);
    G->rope_table(dCS, T, hd, 10000.0f);
    K->rope_forward(q, cs, B, T, H, hd);
    G->rope_forward(dQ, dCS, B, T, H, hd);
    e1 = rel_diff_dev(dQ, q, sizeof q / 4);
    K->rope_backward(q, cs, B, T, H, hd);
    G->rope_backward(dQ, dCS, B, T, H, hd);
    e2 = rel_diff_dev(dQ, q, sizeof q / 4);
    snprintf(what, sizeof what, "%s/rope", name);
    CHECK(e1 < 1e-5 && e2 < 1e-5, what, "fwd %.3g bwd %.3g", e1, e2);
    K->attention_forward(o, att, q, k, v, B, T, H, KV, hd, scratch);
    G->attention_forward(dO, dATT, dQ, dK, dV, B, T, H, KV, hd, dS);
    e1 = fmax(rel_diff_dev(dO, o, sizeof o / 4), rel_diff_dev(dATT, att, sizeof att / 4));
    float* dDO = dev_copy(dy, sizeof o);
    K->attention_backward(dq, dk, dv, dy, o, att, q, k, v, B, T, H, KV, hd, scratch);
    G->attention_backward(dDQ, dDK, dDV, dDO, dO, dATT, dQ, dK, dV, B, T, H, KV, hd, dS);
    e2 = fmax(rel_diff_dev(dDQ, dq, sizeof dq / 4),
              fmax(rel_diff_dev(dDK, dk, sizeof dk / 4), rel_diff_dev(dDV, dv, sizeof dv / 4)));
    snprintf(what, sizeof what, "%s/attention", name);
    CHECK(e1 < 1e-5 && e2 < 1e-5, what, "fwd %.3g bwd %.3g", e1, e2);
    // swiglu (gate = dy, up = y from the matmul above)
    float* dUP = dev_copy(y, sizeof y);
    float *dH = dev_copy(NULL, sizeof y), *dGATE2 = dev_copy(NULL, sizeof y),
          *dUP2 = dev_copy(NULL, sizeof y);
    static float h[N * F], dg2[N * F], du2[N * F];
    K->swiglu_forward(h, dy, y, N, F);
    G->swiglu_forward(dH, dDY, dUP, N, F);
    e1 = rel_diff_dev(dH, h, N * F);
    K->swiglu_backward(dg2, du2, h, dy, y, N, F);
    G->swiglu_backward(dGATE2, dUP2, dH, dDY, dUP, N, F);
    e2 = fmax(rel_diff_dev(dGATE2, dg2, N * F), rel_diff_dev(dUP2, du2, N * F));
    snprintf(what, sizeof what, "%s/swiglu", name);
    CHECK(e1 < 1e-5 && e2 < 1e-5, what, "fwd %.3g bwd %.3g", e1, e2);
    // embedding (table = w viewed as (V, C) needs V*C <= F*C: V = 53 > F = 40, use a fresh one)
    static float table[V * C], dtable[V * C], emb[N * C];
    randf(table, V * C, 1.0f);
    float *dT = dev_copy(table, sizeof table), *dDT = dev_copy(NULL, sizeof table),
          *dE = dev_copy(NULL, sizeof emb);
    int *dTok = (int*)dev_copy(tok, sizeof tok), *dTgt = (int*)dev_copy(tgt, sizeof tgt);
    K->embedding_forward(emb, tok, table, N, C);
    G->embedding_forward(dE, dTok, dT, N, C);
    e1 = rel_diff_dev(dE, emb, N * C);
    memset(dtable, 0, sizeof dtable);
    K->embedding_backward(dtable, x, tok, N, C);
    G->embedding_backward(dDT, dX, dTok, N, C);
    e2 = rel_diff_dev(dDT, dtable, V * C);
    snprintf(what, sizeof what, "%s/embedding", name);
    CHECK(e1 == 0.0 && e2 < 1e-6, what, "fwd %.3g bwd %.3g", e1, e2);
    // cross-entropy
    randf(logits, N * V, 3.0f);
    float *dL = dev_copy(logits, sizeof logits), *dDL = dev_copy(NULL, sizeof dl),
          *dLS = dev_copy(NULL, sizeof losses);
    // the sums add into what the slot holds (1.5 here), in double
    double sc = 1.5, sg = 0;
    double* dSum = (double*)dev_copy(&sc, sizeof sc);
    K->crossentropy_forward_backward(dl, losses, logits, tgt, N, V, 0.1f, &sc);
    G->crossentropy_forward_backward(dDL, dLS, dL, dTgt, N, V, 0.1f, dSum);
    zdevCheck(zdev_download(G->dev, &sg, dSum, sizeof sg));
    e1 = rel_diff_dev(dDL, dl, N * V);
    snprintf(what, sizeof what, "%s/crossentropy", name);
    CHECK(sc != 1.5 && fabs(sc - sg) < 1e-5 * fabs(sc) && e1 < 1e-5, what, "sum %.7g/%.7g dlogits %.3g", sc,
          sg, e1);
    // bf16: bit exact
    static uint16_t hb[N * C];
    uint16_t* dB = (uint16_t*)dev_copy(NULL, sizeof hb);
    K->round_to_bf16(hb, x, N * C);
    G->round_to_bf16(dB, dX, N * C);
    static uint16_t gb[N * C];
    zdevCheck(zdev_download(G->dev, gb, dB, sizeof gb));
    snprintf(what, sizeof what, "%s/bf16", name);
    CHECK(!memcmp(gb, hb, sizeof hb), what, "rounding differs from the CPU");
    void* all[] = {dX, dW, dY, dDY, dG, dDX, dR, dQ, dK, dV, dCS, dATT, dO, dS, dDQ, dDK, dDV,
                   dDO, dUP, dH, dGATE2, dUP2, dT, dDT, dE, dTok, dTgt, dL, dDL, dLS, dB, dSum};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) zdev_free(G->dev, all[i]);
    check_embedding_order(G, name);
}

/* The embedding backward bit for bit against the CPU's: 700 rows (three of
 * the CUDA table's 256-key tiles) of a few tokens, so each token's run is
 * long (one token on every 7th row, three more at random, two tokens of the
 * table never seen), the table's rows non-zero (the gradient accumulates),
 * and values of widely different magnitude, so that adding a token's rows
 * in any other order changes the bits: the reversed order, computed here on
 * the host, must differ, or the check could not fail. */
static void check_embedding_order(const ZrtKernels* G, const char* name) {
    const ZrtKernels* K = zrt_kernels_cpu();
    enum { N = 700, C = 33, V = 6 };
    static int tok[N];
    static float dout[N * C], want[V * C], got[V * C], rev[V * C];
    char what[64];
    srand(5);
    for (int n = 0; n < N; n++) tok[n] = n % 7 == 0 ? 4 : rand() % 3 + (rand() % 4 == 0 ? 3 : 0);
    for (int i = 0; i < N * C; i++)
        dout[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * ldexpf(1.0f, rand() % 24 - 12);
    randf(want, V * C, 1.0f);
    memcpy(rev, want, sizeof rev);
    float *dT = dev_copy(want, sizeof want), *dD = dev_copy(dout, sizeof dout);
    int* dTok = (int*)dev_copy(tok, sizeof tok);
    K->embedding_backward(want, dout, tok, N, C);
    G->embedding_backward(dT, dD, dTok, N, C);
    zdevCheck(zdev_download(G->dev, got, dT, sizeof got));
    for (int n = N - 1; n >= 0; n--)
        for (int c = 0; c < C; c++) rev[tok[n] * C + c] += dout[(size_t)n * C + c];
    snprintf(what, sizeof what, "%s/embedding_backward_row_order", name);
    CHECK(!memcmp(got, want, sizeof got) && memcmp(rev, want, sizeof rev), what,
          "same bits as the CPU: %s; the reversed order differs (the check can fail): %s",
          memcmp(got, want, sizeof got) ? "no" : "yes", memcmp(rev, want, sizeof rev) ? "yes" : "no");
    zdev_free(G->dev, dT), zdev_free(G->dev, dD), zdev_free(G->dev, dTok);
}

/* The bf16 table's flash attention (kernels/cuda.cu: WMMA tiles, P and dS
 * rounded to bf16, fp32 accumulation) against the CPU's tiled fp32
 * attention on the same bf16-representable q, k, v and dO, so what differs
 * is only the rounding of P and dS for the tensor cores and the order of
 * the fp32 sums: out, lse, dq, dk, dv within `tol` (max-norm relative,
 * as rel_diff_dev). Head dims 64 and 128, GQA (H 4, KV 2) and H == KV, T
 * not a multiple of the 64-row tiles. Also: the key tiles above the
 * diagonal are skipped (the kernels' per-block tile counts in the scratch
 * are those of the tiles up to the diagonal), and two runs give the same
 * bits. Other head dims run the fp32 path (not checked here: the table
 * check above covers it at hd 8). The bound: each rounded P and dS is off
 * by at most bf16's unit roundoff 2^-9 (2e-3); measured on the emulator,
 * out <= 1.5e-3, lse <= 3.1e-4, dq, dk, dv <= 4.7e-3 (the note lines);
 * 1e-2 leaves room for a tensor core's own sum order. An off-by-one
 * mask (forward or backward), a skipped query head of a group or a skipped
 * diagonal tile in dK/dV puts some tensor 0.37 or more off (tried).
 * Second, against the CPU's bf16 twin (the same roundings, the same 64-key
 * blocks in the forward) on the fp32 inputs, which both round: within
 * twin_tol. */
static void check_attention_bf16(const ZrtKernels* G, const char* name, double tol,
                                 double twin_tol) {
    const ZrtKernels* K = zrt_kernels_cpu();
    static const int cases[][5] = {// B, T, H, KV, hd
                                   {2, 80, 4, 2, 64},
                                   {2, 200, 4, 4, 64},
                                   {2, 80, 4, 4, 128},
                                   {2, 200, 4, 2, 128}};
    g_tab = G;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int B = cases[ci][0], T = cases[ci][1], H = cases[ci][2], KV = cases[ci][3],
                  hd = cases[ci][4], nt = (T + 63) / 64;
        const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd,
                     nl = (size_t)B * H * T, ns = G->attention_scratch_floats(B, T, H, KV, hd);
        float *q = malloc(nq * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4),
              *dout = malloc(nq * 4), *o = malloc(nq * 4), *lse = malloc(nl * 4),
              *dq = malloc(nq * 4), *dk = malloc(nkv * 4), *dv = malloc(nkv * 4),
              *tiles = malloc(ns * 4);
        srand(1234 + (unsigned)ci);
        // scores of a few units: peaked rows, so the mask and the max matter
        randf(q, nq, 1.5f), randf(k, nkv, 1.5f), randf(v, nkv, 1.0f), randf(dout, nq, 1.0f);
        // the device and the bf16 twin take the fp32 inputs and round them
        // themselves; the fp32 reference takes them rounded
        float *dQ = dev_copy(q, nq * 4), *dK = dev_copy(k, nkv * 4), *dV = dev_copy(v, nkv * 4),
              *dDO = dev_copy(dout, nq * 4), *dS = dev_copy(NULL, ns * 4);
        float *to = malloc(nq * 4), *tl = malloc(nl * 4), *tq = malloc(nq * 4),
              *tk = malloc(nkv * 4), *tv = malloc(nkv * 4);
        const ZrtKernels* W = zrt_kernels_cpu_bf16();
        W->attention_forward(to, tl, q, k, v, B, T, H, KV, hd, NULL);
        W->attention_backward(tq, tk, tv, dout, to, tl, q, k, v, B, T, H, KV, hd, NULL);
        float* all[] = {q, k, v};
        const size_t alln[] = {nq, nkv, nkv};
        for (int a = 0; a < 3; a++)
            for (size_t i = 0; i < alln[a]; i++) all[a][i] = zipcclBf16ToFloat(zipcclFloatToBf16(all[a][i]));
        float* d16 = malloc(nq * 4); // dO rounded for the products, fp32 in D = rowsum(dO O)
        for (size_t i = 0; i < nq; i++) d16[i] = zipcclBf16ToFloat(zipcclFloatToBf16(dout[i]));
        K->attention_forward(o, lse, q, k, v, B, T, H, KV, hd, NULL);
        K->attention_backward(dq, dk, dv, d16, o, lse, q, k, v, B, T, H, KV, hd, NULL);
        float *dO[2], *dL[2], *dDQ[2], *dDK[2], *dDV[2];
        double fwd_tiles = 0, dkdv_tiles = 0, dq_tiles = 0;
        for (int run = 0; run < 2; run++) {
            dO[run] = dev_copy(NULL, nq * 4), dL[run] = dev_copy(NULL, nl * 4);
            dDQ[run] = dev_copy(NULL, nq * 4), dDK[run] = dev_copy(NULL, nkv * 4);
            dDV[run] = dev_copy(NULL, nkv * 4);
            G->attention_forward(dO[run], dL[run], dQ, dK, dV, B, T, H, KV, hd, dS);
            zdevCheck(zdev_download(G->dev, tiles, dS, (size_t)B * H * nt * 4));
            fwd_tiles = 0;
            for (int x = 0; x < B * H * nt; x++) fwd_tiles += tiles[x];
            G->attention_backward(dDQ[run], dDK[run], dDV[run], dDO, dO[run], dL[run], dQ, dK, dV, B,
                                  T, H, KV, hd, dS);
            zdevCheck(zdev_download(G->dev, tiles, dS, ns * 4));
            dkdv_tiles = dq_tiles = 0;
            for (int x = 0; x < B * KV * nt; x++) dkdv_tiles += tiles[nl + x];
            for (int x = 0; x < B * H * nt; x++) dq_tiles += tiles[nl + (size_t)B * KV * nt + x];
        }
        const double eo = rel_diff_dev(dO[0], o, nq), el = rel_diff_dev(dL[0], lse, nl),
                     eq = rel_diff_dev(dDQ[0], dq, nq), ek = rel_diff_dev(dDK[0], dk, nkv),
                     ev = rel_diff_dev(dDV[0], dv, nkv);
        char what[96];
        snprintf(what, sizeof what, "%s/flash_attention_B%d_T%d_H%d_KV%d_hd%d", name, B, T, H, KV, hd);
        CHECK(eo < tol && el < tol && eq < tol && ek < tol && ev < tol, what,
              "relative to the CPU's fp32 tiles: out %.3g lse %.3g dq %.3g dk %.3g dv %.3g (bound %g)",
              eo, el, eq, ek, ev, tol);
        printf("note: %s: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", what, eo, el, eq, ek, ev);
        const double wo = rel_diff_dev(dO[0], to, nq), wl = rel_diff_dev(dL[0], tl, nl),
                     wq = rel_diff_dev(dDQ[0], tq, nq), wk = rel_diff_dev(dDK[0], tk, nkv),
                     wv = rel_diff_dev(dDV[0], tv, nkv);
        snprintf(what, sizeof what, "%s/flash_attention_B%d_T%d_H%d_KV%d_hd%d_twin", name, B, T, H, KV, hd);
        CHECK(wo < twin_tol && wl < twin_tol && wq < twin_tol && wk < twin_tol && wv < twin_tol, what,
              "relative to the CPU's bf16 twin: out %.3g lse %.3g dq %.3g dk %.3g dv %.3g (bound %g)",
              wo, wl, wq, wk, wv, twin_tol);
        printf("note: %s: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", what, wo, wl, wq, wk, wv);
        // tiles up to the diagonal: nt (nt + 1) / 2 per (b, h), of nt^2
        const double want = (double)B * H * nt * (nt + 1) / 2;
        snprintf(what, sizeof what, "%s/flash_attention_T%d_hd%d_skips_masked_tiles", name, T, hd);
        CHECK(fwd_tiles == want && dkdv_tiles == want && dq_tiles == want, what,
              "tiles computed fwd %.0f dk/dv %.0f dq %.0f, expected %.0f (all: %.0f)", fwd_tiles,
              dkdv_tiles, dq_tiles, want, (double)B * H * nt * nt);
        int same = 1;
        float* outs[2][5] = {{dO[0], dL[0], dDQ[0], dDK[0], dDV[0]}, {dO[1], dL[1], dDQ[1], dDK[1], dDV[1]}};
        const size_t outn[5] = {nq, nl, nq, nkv, nkv};
        for (int x = 0; x < 5; x++) {
            float *a = malloc(outn[x] * 4), *b = malloc(outn[x] * 4);
            zdevCheck(zdev_download(G->dev, a, outs[0][x], outn[x] * 4));
            zdevCheck(zdev_download(G->dev, b, outs[1][x], outn[x] * 4));
            same &= !memcmp(a, b, outn[x] * 4);
            free(a), free(b);
        }
        snprintf(what, sizeof what, "%s/flash_attention_T%d_hd%d_deterministic", name, T, hd);
        CHECK(same, what, "two runs differ");
        for (int run = 0; run < 2; run++)
            zdev_free(G->dev, dO[run]), zdev_free(G->dev, dL[run]), zdev_free(G->dev, dDQ[run]),
                zdev_free(G->dev, dDK[run]), zdev_free(G->dev, dDV[run]);
        zdev_free(G->dev, dQ), zdev_free(G->dev, dK), zdev_free(G->dev, dV), zdev_free(G->dev, dDO),
            zdev_free(G->dev, dS);
        free(q), free(k), free(v), free(dout), free(o), free(lse), free(dq), free(dk), free(dv),
            free(tiles), free(d16), free(to), free(tl), free(tq), free(tk), free(tv);
    }
}

/* ---------------------------------------------------- dump for the JAX test */

static int parse_flags(int argc, char** argv, int start, LlamaConfig* c, int* B, int* T) {
    for (int i = start; i + 1 < argc; i += 2) {
        const char* k = argv[i];
        double v = atof(argv[i + 1]);
        if (!strcmp(k, "--V")) c->vocab_size = (int)v;
        else if (!strcmp(k, "--C")) c->dim = (int)v;
        else if (!strcmp(k, "--L")) c->n_layers = (int)v;
        else if (!strcmp(k, "--H")) c->n_heads = (int)v;
        else if (!strcmp(k, "--KV")) c->n_kv_heads = (int)v;
        else if (!strcmp(k, "--F")) c->ffn_hidden = (int)v;
        else if (!strcmp(k, "--T")) *T = (int)v;
        else if (!strcmp(k, "--B")) *B = (int)v;
        else if (!strcmp(k, "--tied")) c->tie_embeddings = (int)v;
        else if (!strcmp(k, "--theta")) c->rope_theta = (float)v;
        else if (!strcmp(k, "--hd")) c->head_dim = (int)v;
        else if (!strcmp(k, "--qkn")) c->qk_norm = (int)v;
        else if (!strcmp(k, "--E")) c->n_experts = (int)v;
        else if (!strcmp(k, "--K")) c->n_experts_per_tok = (int)v;
        else if (!strcmp(k, "--Fe")) c->moe_ffn_hidden = (int)v;
        else if (!strcmp(k, "--sparse")) c->decoder_sparse_step = (int)v;
        else if (!strcmp(k, "--normtopk")) c->norm_topk_prob = (int)v;
        else if (!strcmp(k, "--aux")) c->router_aux_loss_coef = (float)v;
        else if (!strcmp(k, "--mlponly")) c->mlp_only_layers[0] = (uint64_t)v; // a bit mask
        else {
            fprintf(stderr, "unknown flag %s\n", k);
            return -1;
        }
    }
    c->max_seq_len = *T;
    return 0;
}

static int write_bin(const char* dir, const char* name, const void* data, size_t bytes) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE* f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, bytes, f);
    return fclose(f) == 0 && w == bytes ? 0 : -1;
}

static const AdamWConfig dump_adamw = {.lr = 3e-3f, .min_lr = 3e-4f, .warmup_steps = 3,
                                       .total_steps = 10, .beta1 = 0.9f, .beta2 = 0.95f,
                                       .eps = 1e-8f, .weight_decay = 0.1f};
#define DUMP_STEPS 10
#define DUMP_CLIP 1.0f

static int dump(const char* dir, int train, int argc, char** argv) {
    LlamaConfig c = {.vocab_size = 61, .dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                     .ffn_hidden = 48, .rope_theta = 10000.0f, .norm_eps = 1e-5f,
                     .tie_embeddings = 1};
    int B = 3, T = 13;
    if (parse_flags(argc, argv, 3, &c, &B, &T)) return 2;
    char err[200];
    if (llama_config_check(&c, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    mkdir(dir, 0755);
    Model m;
    if (model_init(&m, &c, 2024)) return 2;
    LlamaActs* acts = llama_acts_alloc(&c, B, T, zrt_kernels_cpu());
    int* tok = malloc(sizeof(int) * B * T);
    int* tgt = malloc(sizeof(int) * B * T);
    float* logits = malloc(sizeof(float) * B * T * c.vocab_size);
    if (!acts || !tok || !tgt || !logits) return 2;
    make_batch(tok, tgt, B, T, c.vocab_size, 77);
    int rc = 0;
    char fn[64];
    for (int u = 0; u < llama_num_units(&c); u++) {
        snprintf(fn, sizeof fn, "unit_%d.bin", u);
        rc |= write_bin(dir, fn, m.params[u], llama_unit_numel(&c, u) * sizeof(float));
    }
    rc |= write_bin(dir, "tokens.bin", tok, sizeof(int) * B * T);
    rc |= write_bin(dir, "targets.bin", tgt, sizeof(int) * B * T);
    LlamaParamHooks h = model_hooks(&m);
    float loss = llama_step(&c, acts, tok, tgt, B, T, &h, 1, logits);
    const float aux = llama_acts_aux_loss(acts); // before the training steps below
    rc |= write_bin(dir, "logits.bin", logits, sizeof(float) * B * T * c.vocab_size);
    int n_moe = 0;
    for (LlamaMoeRouting r; llama_acts_routing(acts, n_moe, &r) == 0; n_moe++) {
        snprintf(fn, sizeof fn, "routing_%d.bin", n_moe); // (B*T, k) chosen experts
        rc |= write_bin(dir, fn, r.choices, sizeof(int) * B * T * c.n_experts_per_tok);
    }
    for (int u = 0; u < llama_num_units(&c); u++) {
        snprintf(fn, sizeof fn, "grad_%d.bin", u);
        rc |= write_bin(dir, fn, m.grads[u], llama_unit_numel(&c, u) * sizeof(float));
    }
    float losses[DUMP_STEPS];
    if (train) { // fresh start from the dumped weights: step 0 repeats the loss above
        const AdamWConfig* oc = &dump_adamw;
        float* mo[MAX_UNITS];
        float* vo[MAX_UNITS];
        for (int u = 0; u < llama_num_units(&c); u++) {
            mo[u] = calloc(llama_unit_numel(&c, u), sizeof(float));
            vo[u] = calloc(llama_unit_numel(&c, u), sizeof(float));
        }
        for (int s = 0; s < DUMP_STEPS; s++) {
            model_zero_grads(&m);
            losses[s] = llama_step(&c, acts, tok, tgt, B, T, &h, 1, NULL);
            double ss = 0.0;
            for (int u = 0; u < llama_num_units(&c); u++) ss += host_sumsq(m.grads[u], llama_unit_numel(&c, u));
            float clip = optim_clip_factor(sqrt(ss), DUMP_CLIP);
            for (int u = 0; u < llama_num_units(&c); u++) {
                size_t n = llama_unit_numel(&c, u);
                zrt_kernels_cpu()->scale(m.grads[u], n, clip);
                adamw_update(zrt_kernels_cpu(), oc, m.params[u], m.grads[u], mo[u], vo[u], n, s + 1, adamw_lr(oc, s),
                             oc->weight_decay);
            }
        }
        rc |= write_bin(dir, "train_losses.bin", losses, sizeof losses);
        for (int u = 0; u < llama_num_units(&c); u++) {
            free(mo[u]);
            free(vo[u]);
        }
    }
    // the JSON index: config, batch, and each unit's tensor table
    char path[1024];
    snprintf(path, sizeof path, "%s/index.json", dir);
    FILE* f = fopen(path, "w");
    if (!f) return 2;
    fprintf(f,
            "{\"config\": {\"vocab_size\": %d, \"dim\": %d, \"n_layers\": %d, \"n_heads\": %d, "
            "\"n_kv_heads\": %d, \"ffn_hidden\": %d, \"max_seq_len\": %d, \"rope_theta\": %.9g, "
            "\"norm_eps\": %.9g, \"tie_embeddings\": %d, \"head_dim\": %d, \"qk_norm\": %d, "
            "\"n_experts\": %d, \"n_experts_per_tok\": %d, \"moe_ffn_hidden\": %d, "
            "\"decoder_sparse_step\": %d, \"norm_topk_prob\": %d, \"router_aux_loss_coef\": %.9g, "
            "\"mlp_only_layers\": %llu},\n",
            c.vocab_size, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.ffn_hidden, c.max_seq_len,
            (double)c.rope_theta, (double)c.norm_eps, c.tie_embeddings, llama_head_dim(&c),
            c.qk_norm, c.n_experts, c.n_experts_per_tok, c.moe_ffn_hidden, c.decoder_sparse_step,
            c.norm_topk_prob, (double)c.router_aux_loss_coef,
            (unsigned long long)c.mlp_only_layers[0]);
    fprintf(f,
            " \"B\": %d, \"T\": %d, \"loss\": %.9g, \"aux_loss\": %.9g, \"moe_blocks\": %d,\n"
            " \"units\": [",
            B, T, (double)loss, (double)aux, n_moe);
    for (int u = 0; u < llama_num_units(&c); u++) {
        enum { MAXT = 3 * 64 + 16 };
        static char names[MAXT][64];
        size_t rows[MAXT], cols[MAXT], off = 0;
        int nt = llama_unit_tensors(&c, u, names, rows, cols, MAXT);
        if (nt > MAXT) return 2;
        fprintf(f, "%s\n  {\"params\": \"unit_%d.bin\", \"grads\": \"grad_%d.bin\", \"tensors\": [",
                u ? "," : "", u, u);
        for (int i = 0; i < nt; i++) {
            fprintf(f, "%s{\"name\": \"%s\", \"rows\": %zu, \"cols\": %zu, \"offset\": %zu}",
                    i ? ", " : "", names[i], rows[i], cols[i], off);
            off += rows[i] * cols[i];
        }
        fprintf(f, "]}");
    }
    fprintf(f, "]");
    if (train) {
        const AdamWConfig* oc = &dump_adamw;
        fprintf(f,
                ",\n \"train\": {\"steps\": %d, \"clip\": %.9g, \"lr\": %.9g, \"min_lr\": %.9g, "
                "\"warmup_steps\": %d, \"total_steps\": %d, \"beta1\": %.9g, \"beta2\": %.9g, "
                "\"eps\": %.9g, \"weight_decay\": %.9g, \"losses\": \"train_losses.bin\"}",
                DUMP_STEPS, (double)DUMP_CLIP, (double)oc->lr, (double)oc->min_lr,
                oc->warmup_steps, oc->total_steps, (double)oc->beta1, (double)oc->beta2,
                (double)oc->eps, (double)oc->weight_decay);
    }
    fprintf(f, "}\n");
    rc |= fclose(f);
    free(tok);
    free(tgt);
    free(logits);
    llama_acts_free(acts);
    model_free(&m);
    printf("dumped to %s (loss %.6f)\n", dir, (double)loss);
    return rc ? 2 : 0;
}

/* --------------------------------------------------------------- benchmark */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static double cpu_s(void) { // user + system time of the whole process
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + 1e-6 * ru.ru_utime.tv_usec + ru.ru_stime.tv_sec +
           1e-6 * ru.ru_stime.tv_usec;
}

/* best wall-clock GFLOP/s of `reps` SGEMMs; *per_cpu_s gets GFLOP per
 * CPU-second over all of them (the load-independent figure) */
static double sgemm_gflops(int M, int N, int K, int reps, double* per_cpu_s) {
    float* a = malloc(sizeof(float) * M * K);
    float* b = malloc(sizeof(float) * N * K);
    float* c = malloc(sizeof(float) * M * N);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)N * K; i++) b[i] = (float)(i % 5) * 0.1f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, a, K, b, K, 0, c, N);
    double best = 0.0, c0 = cpu_s();
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, a, K, b, K, 0, c, N);
        double g = 2.0 * M * N * K / (now_s() - t0) / 1e9;
        best = g > best ? g : best;
    }
    *per_cpu_s = 2.0 * M * N * K * reps / (cpu_s() - c0) / 1e9;
    free(a);
    free(b);
    free(c);
    return best;
}

static int bench(int argc, char** argv, const char* core) {
    // ~100M parameters: 12 x 6.9M block + 16384 x 768 tied embedding
    LlamaConfig c = {.vocab_size = 16384, .dim = 768, .n_layers = 12, .n_heads = 12,
                     .n_kv_heads = 4, .ffn_hidden = 2304, .rope_theta = 500000.0f,
                     .norm_eps = 1e-5f, .tie_embeddings = 1};
    int B = 4, T = 128, steps = 3;
    if (parse_flags(argc, argv, 2, &c, &B, &T)) return 2;
    char err[200];
    if (llama_config_check(&c, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    Model m;
    LlamaActs* acts = NULL;
    if (model_init(&m, &c, 1) || !(acts = llama_acts_alloc(&c, B, T, zrt_kernels_cpu()))) {
        fprintf(stderr, "out of memory\n");
        return 2;
    }
    int* tok = malloc(sizeof(int) * B * T);
    int* tgt = malloc(sizeof(int) * B * T);
    make_batch(tok, tgt, B, T, c.vocab_size, 1);
    LlamaParamHooks h = model_hooks(&m);
    printf("bench: OpenBLAS core %s, %d BLAS threads, %d OpenMP threads\n", core,
           openblas_get_num_threads(), omp_get_max_threads());
    printf("bench: %.1fM params (V=%d C=%d L=%d H=%d KV=%d F=%d tied=%d), B=%d T=%d, "
           "activations %.0f MiB\n",
           llama_num_params(&c) / 1e6, c.vocab_size, c.dim, c.n_layers, c.n_heads, c.n_kv_heads,
           c.ffn_hidden, c.tie_embeddings, B, T, llama_acts_bytes(&c, B, T, zrt_kernels_cpu()) / 1048576.0);
    // The SGEMM peak runs with the BLAS threads the environment asked for,
    // before the first model step (the CPU backend switches OpenBLAS to one
    // thread per OpenMP thread when it starts). The machine is shared: each
    // figure is the best of several tries, peak and model measured in the
    // same run so they see the same load.
    const int blas_threads = openblas_get_num_threads();
    double cpu_sq, cpu_model;
    const double peak_sq = sgemm_gflops(1024, 1024, 1024, 8, &cpu_sq);
    const double peak_model = sgemm_gflops(B * T, c.ffn_hidden, c.dim, 8, &cpu_model);
    const double peak_cpu = cpu_sq > cpu_model ? cpu_sq : cpu_model;
    const double peak = peak_sq > peak_model ? peak_sq : peak_model;
    llama_step(&c, acts, tok, tgt, B, T, &h, 1, NULL); // warmup
    double best = 1e30, total = 0.0, cpu0 = cpu_s();
    for (int s = 0; s < steps; s++) {
        double t0 = now_s();
        llama_step(&c, acts, tok, tgt, B, T, &h, 1, NULL);
        double dt = now_s() - t0;
        total += dt;
        best = dt < best ? dt : best;
    }
    const double cpu_per_step = (cpu_s() - cpu0) / steps;
    const double flops = llama_flops_per_token(&c, T) * B * T;
    const double model_gf = flops / best / 1e9;
    printf("bench: fwd+bwd best %.3f s, mean %.3f s over %d steps, %.1f tokens/s; "
           "%.3f CPU-s per step (%.2f cores busy)\n",
           best, total / steps, steps, B * T / best, cpu_per_step, cpu_per_step / (total / steps));
    printf("bench: model %.1f GFLOP/step (6N + 12LTd accounting), %.1f GFLOP/s\n", flops / 1e9,
           model_gf);
    printf("bench: sgemm (%d BLAS threads) 1024^3 %.1f GFLOP/s, model-shaped (%d x %d x %d) "
           "%.1f GFLOP/s\n",
           blas_threads, peak_sq, B * T, c.ffn_hidden, c.dim, peak_model);
    printf("bench: model FLOP/s = %.1f%% of sgemm peak (%.1f GFLOP/s)\n", 100.0 * model_gf / peak,
           peak);
    printf("bench: per CPU-second (load-independent): model %.1f GFLOP per CPU-s = %.1f%% of "
           "sgemm's %.1f GFLOP per CPU-s\n",
           flops / cpu_per_step / 1e9, 100.0 * flops / cpu_per_step / 1e9 / peak_cpu, peak_cpu);
    free(tok);
    free(tgt);
    llama_acts_free(acts);
    model_free(&m);
    return 0;
}

/* --bench-attention [B T H KV hd reps] (scripts/test_gpu.sh; default the
 * Llama-3.2-1B shape at T 2048, B 4): one layer's attention forward and
 * backward on the fp32 CUDA table (SGEMM, (T, T) scratch) and on the bf16
 * table's a16 entries (cuDNN's fused SDPA or the flash kernels: the engine
 * training runs, ZRT_ATTENTION), device time per call (events, the median of
 * reps), TFLOP/s of the causal products (forward 2 B H T^2 hd, backward
 * 2.5x that: the useful work, not what either computes), and one check:
 * the two agree within bf16's 2e-2 (q, k, v rounded to bf16 first). */
static int bench_attention(int argc, char** argv) {
    const ZrtKernels *G = zrt_kernels_cuda(NULL), *W = zrt_kernels_cuda_bf16(NULL);
    if (!G || !W) {
        printf("FAIL attention_bench: no usable CUDA device (%s)\n", zrt_cuda_error());
        return 1;
    }
    int a[6] = {4, 2048, 32, 8, 64, 10}; // B T H KV hd reps
    for (int i = 0; i < 6 && 2 + i < argc; i++) a[i] = atoi(argv[2 + i]);
    const int B = a[0], T = a[1], H = a[2], KV = a[3], hd = a[4], reps = a[5] < 1 ? 1 : a[5];
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd, nl = (size_t)B * H * T;
    float *hq = malloc(nq * 4), *hk = malloc(nkv * 4), *hv = malloc(nkv * 4), *hd_o = malloc(nq * 4);
    srand(5);
    randf(hq, nq, 1.5f), randf(hk, nkv, 1.5f), randf(hv, nkv, 1.0f), randf(hd_o, nq, 1.0f);
    for (size_t i = 0; i < nq; i++) hq[i] = zipcclBf16ToFloat(zipcclFloatToBf16(hq[i]));
    for (size_t i = 0; i < nkv; i++)
        hk[i] = zipcclBf16ToFloat(zipcclFloatToBf16(hk[i])), hv[i] = zipcclBf16ToFloat(zipcclFloatToBf16(hv[i]));
    g_tab = G;
    float *q = dev_copy(hq, nq * 4), *k = dev_copy(hk, nkv * 4), *v = dev_copy(hv, nkv * 4),
          *dO = dev_copy(hd_o, nq * 4);
    // the bf16 row runs the a16 entries, as training does (q, k, v in bf16):
    // its engine is cuDNN's fused SDPA or the flash kernels (ZRT_ATTENTION,
    // kernels/cuda.cu; stderr says which)
    uint16_t *q16 = zdev_alloc(G->dev, nq * 2), *k16 = zdev_alloc(G->dev, nkv * 2), *v16 = zdev_alloc(G->dev, nkv * 2);
    if (!q16 || !k16 || !v16) {
        printf("FAIL attention_bench: out of device memory\n");
        return 1;
    }
    W->round_to_bf16(q16, q, nq), W->round_to_bf16(k16, k, nkv), W->round_to_bf16(v16, v, nkv);
    const ZrtKernels* tab[2] = {G, W};
    const char* names[2] = {"sgemm_fp32", "bf16_a16"};
    float *o[2], *l[2], *dq[2], *dk[2], *dv[2];
    double ms[2][2];
    void *e0, *e1;
    zdevCheck(zdev_event_create(G->dev, &e0, 1));
    zdevCheck(zdev_event_create(G->dev, &e1, 1));
    const double fwd_flop = 2.0 * B * H * (double)T * T * hd; // causal: half of 4 B H T^2 hd
    for (int t = 0; t < 2; t++) {
        const ZrtKernels* K = tab[t];
        float* scr = dev_copy(NULL, (K->attention_scratch_floats(B, T, H, KV, hd) + 1) * 4);
        o[t] = dev_copy(NULL, nq * 4), l[t] = dev_copy(NULL, nl * 4), dq[t] = dev_copy(NULL, nq * 4);
        dk[t] = dev_copy(NULL, nkv * 4), dv[t] = dev_copy(NULL, nkv * 4);
        if (!scr || !o[t] || !dv[t]) {
            printf("FAIL attention_bench: out of device memory\n");
            return 1;
        }
        double f[64], b[64];
        const int n = reps > 64 ? 64 : reps;
        for (int r = -1; r < n; r++) { // r = -1: warm-up
            zdevCheck(zdev_event_record(G->dev, e0, NULL));
            if (t) K->attention_forward_a16(o[t], l[t], q16, k16, v16, B, T, H, KV, hd, scr);
            else K->attention_forward(o[t], l[t], q, k, v, B, T, H, KV, hd, scr);
            zdevCheck(zdev_event_record(G->dev, e1, NULL));
            double x = 0;
            zdevCheck(zdev_event_elapsed_ms(G->dev, e0, e1, &x));
            if (r >= 0) f[r] = x;
            zdevCheck(zdev_event_record(G->dev, e0, NULL));
            if (t) K->attention_backward_a16(dq[t], dk[t], dv[t], dO, o[t], l[t], q16, k16, v16, B, T, H, KV, hd, scr);
            else K->attention_backward(dq[t], dk[t], dv[t], dO, o[t], l[t], q, k, v, B, T, H, KV, hd, scr);
            zdevCheck(zdev_event_record(G->dev, e1, NULL));
            zdevCheck(zdev_event_elapsed_ms(G->dev, e0, e1, &x));
            if (r >= 0) b[r] = x;
        }
        for (int i = 0; i < n; i++) // sort both for the median
            for (int j = i + 1; j < n; j++) {
                if (f[j] < f[i]) { const double z = f[i]; f[i] = f[j]; f[j] = z; }
                if (b[j] < b[i]) { const double z = b[i]; b[i] = b[j]; b[j] = z; }
            }
        ms[t][0] = f[n / 2], ms[t][1] = b[n / 2];
        printf("attention_bench %s B %d T %d H %d KV %d hd %d: forward %.3f ms (%.1f TFLOP/s), "
               "backward %.3f ms (%.1f TFLOP/s), scratch %.1f MiB\n",
               names[t], B, T, H, KV, hd, ms[t][0], fwd_flop / ms[t][0] / 1e9, ms[t][1],
               2.5 * fwd_flop / ms[t][1] / 1e9, K->attention_scratch_floats(B, T, H, KV, hd) * 4.0 / (1 << 20));
        zdev_free(G->dev, scr);
    }
    printf("attention_bench: bf16 / sgemm speed-up forward %.2fx, backward %.2fx\n",
           ms[0][0] / ms[1][0], ms[0][1] / ms[1][1]);
    float* ref = malloc(nq * 4);
    float* ref_l = malloc(nl * 4);
    float* ref_k = malloc(nkv * 4);
    zdevCheck(zdev_download(G->dev, ref, o[0], nq * 4));
    double eo = rel_diff_dev(o[1], ref, nq);
    zdevCheck(zdev_download(G->dev, ref_l, l[0], nl * 4));
    const double el = rel_diff_dev(l[1], ref_l, nl);
    zdevCheck(zdev_download(G->dev, ref, dq[0], nq * 4));
    const double eq = rel_diff_dev(dq[1], ref, nq);
    zdevCheck(zdev_download(G->dev, ref_k, dk[0], nkv * 4));
    const double ek = rel_diff_dev(dk[1], ref_k, nkv);
    zdevCheck(zdev_download(G->dev, ref_k, dv[0], nkv * 4));
    const double ev = rel_diff_dev(dv[1], ref_k, nkv);
    CHECK(eo < 2e-2 && el < 2e-2 && eq < 2e-2 && ek < 2e-2 && ev < 2e-2, "attention_bench/flash_matches_sgemm",
          "out %.3g lse %.3g dq %.3g dk %.3g dv %.3g relative (bound 2e-2)", eo, el, eq, ek, ev);
    printf("note: attention_bench flash vs sgemm: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", eo, el,
           eq, ek, ev);
    free(hq), free(hk), free(hv), free(hd_o), free(ref), free(ref_l), free(ref_k);
    zdev_free(G->dev, q16), zdev_free(G->dev, k16), zdev_free(G->dev, v16);
    return tu_exit();
}

int main(int argc, char** argv) {
    const char* core = zrt_blas_select_core(argv); // may re-exec with a faster SGEMM
    if (argc >= 3 && !strcmp(argv[1], "--dump")) return dump(argv[2], 0, argc, argv);
    if (argc >= 3 && !strcmp(argv[1], "--dump-train")) return dump(argv[2], 1, argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "--bench")) return bench(argc, argv, core);
    if (argc >= 2 && !strcmp(argv[1], "--bench-attention")) return bench_attention(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "--cuda")) { // scripts/test_gpu.sh: the GPU checks only
        if (!zrt_kernels_cuda(NULL)) {
            printf("FAIL cuda: no usable CUDA device (or a build without CUDA)\n");
            return 1;
        }
        check_table_kernels(zrt_kernels_cuda(NULL), "cuda");
        check_memory_entries(zrt_kernels_cuda(NULL), "cuda");
        check_optimizer_entries(zrt_kernels_cuda(NULL), "cuda");
        check_optimizer_multi(zrt_kernels_cuda(NULL), "cuda");
        check_events(zrt_kernels_cuda(NULL), "cuda");
        check_step_on(zrt_kernels_cuda(NULL), zrt_kernels_cpu(), "cuda", 1e-5);
        check_matmul_bf16(zrt_kernels_cuda_bf16(NULL), "cuda", 1e-5);
        // against the bf16 twin: the same roundings, so on the emulator (the
        // host's expf on both sides) only fp32 sum orders differ (measured
        // <= 2.9e-6); on a GPU its own expf and sum order may move a P or dS
        // across a bf16 rounding boundary: bf16's bound there
        check_attention_bf16(zrt_kernels_cuda_bf16(NULL), "cuda_bf16", 1e-2,
                             getenv("ZRT_TEST_EMULATED") ? 1e-4 : 1e-2);
        {   // a whole step whose attention is the flash kernel (hd 64), against the
            // bf16 twin (whose attention is fp32): bf16's bound, as the steps below
            LlamaConfig c = tiny_config(0);
            c.dim = 128, c.n_heads = 2, c.n_kv_heads = 1, c.ffn_hidden = 64, c.qk_norm = 1;
            check_step_of(zrt_kernels_cuda_bf16(NULL), zrt_kernels_cpu_bf16(), "cuda_bf16/flash_step_hd64",
                          1e-2, &c, 0);
            check_step_of(zrt_kernels_cuda_bf16(NULL), zrt_kernels_cpu_bf16(),
                          "cuda_bf16/flash_step_hd64_recompute", 1e-2, &c, STEP_RECOMPUTE);
        }
        check_w16_entries(zrt_kernels_cuda(NULL), zrt_kernels_cpu(), "cuda", 1e-5);
        check_w16_entries(zrt_kernels_cuda_bf16(NULL), zrt_kernels_cpu_bf16(), "cuda_bf16", 1e-5);
        check_a16_entries(zrt_kernels_cuda_bf16(NULL), "cuda_bf16");
        check_grouped_entries(zrt_kernels_cuda_bf16(NULL), "cuda_bf16", getenv("ZRT_TEST_EMULATED") ? 0.0 : 1e-5);
        CHECK(!zrt_kernels_cuda(NULL)->matmul_forward_a16, "cuda/a16_fp32_table_has_none",
              "the fp32 table has a bf16 activation entry");
        check_step_bf16_units(zrt_kernels_cuda(NULL), zrt_kernels_cpu(), "cuda", 1e-5);
        // a whole step in bf16: a value that lands a hair apart on the two
        // sides may round to a neighbouring bf16, so the bound is bf16's
        check_step_on(zrt_kernels_cuda_bf16(NULL), zrt_kernels_cpu_bf16(), "cuda_bf16", 1e-2);
        check_step_bf16_units(zrt_kernels_cuda_bf16(NULL), zrt_kernels_cpu_bf16(), "cuda_bf16", 1e-2);
        return tu_exit();
    }
    if (argc >= 2 && !strcmp(argv[1], "--threads")) { // tests/test_blas_cores.sh
        printf("openblas core %s\n", openblas_get_corename());
        check_matmul_thread_invariance();
        check_attention_thread_invariance();
        check_attention_reference();
        check_thread_invariance();
        return tu_exit();
    }
    check_config();
    check_sizes();
    check_gradients(1);
    check_gradients(0);
    check_moe_layout();
    LlamaConfig moe0 = moe_config(0), moe1 = moe_config(1);
    check_gradients_of(&moe0, "moe_top2_norm", 3e-3f);
    check_gradients_of(&moe1, "moe_top1", 3e-3f);
    LlamaConfig moe2 = moe_config(0);
    moe2.capacity_factor = 0.75f; // 14 tokens x 2 / 4 experts x 0.75: 6 pairs each, some dropped
    check_gradients_of(&moe2, "moe_capacity", 3e-3f);
    check_moe_capacity(&moe2);
    check_moe_capacity_order();
    check_moe_hooks();
    check_hooks_and_loss();
    check_matmul_thread_invariance();
    check_attention_thread_invariance();
        check_attention_reference();
    check_attention_twin();
    check_thread_invariance();
    check_optim();
    check_bf16();
    check_guarded_device();
    check_memory_entries(zrt_kernels_cpu(), "cpu");
    check_memory_entries(zrt_kernels_cpu_guarded(), "guarded");
    check_optimizer_entries(zrt_kernels_cpu_guarded(), "guarded");
    check_optimizer_multi(zrt_kernels_cpu_guarded(), "guarded");
    check_events(zrt_kernels_cpu(), "cpu");
    check_events(zrt_kernels_cpu_guarded(), "guarded");
    check_step_on(zrt_kernels_cpu_guarded(), zrt_kernels_cpu(), "guarded", 0.0);
    check_matmul_bf16(zrt_kernels_cpu_bf16(), "cpu", 0.0); /* the twin itself: it rounds */
    check_table_kernels(zrt_kernels_cpu_guarded(), "guarded");
    check_w16_entries(zrt_kernels_cpu(), zrt_kernels_cpu(), "cpu", 0.0);
    check_w16_entries(zrt_kernels_cpu_bf16(), zrt_kernels_cpu_bf16(), "cpu_bf16", 0.0);
    check_a16_entries(zrt_kernels_cpu_bf16(), "cpu_bf16");
    check_grouped_entries(zrt_kernels_cpu_bf16(), "cpu_bf16", 0.0);
    check_a16_model();
    check_w16_entries(zrt_kernels_cpu_guarded(), zrt_kernels_cpu(), "guarded", 0.0);
    check_step_bf16_units(zrt_kernels_cpu(), zrt_kernels_cpu(), "cpu", 0.0);
    check_step_bf16_units(zrt_kernels_cpu_bf16(), zrt_kernels_cpu_bf16(), "cpu_bf16", 0.0);
    check_step_bf16_units(zrt_kernels_cpu_guarded(), zrt_kernels_cpu(), "guarded", 0.0);
#ifdef ZIPCCL_HAVE_CUDA
    check_cudnn_engine_without_gpu();
#endif
    if (zrt_kernels_cuda(NULL)) check_table_kernels(zrt_kernels_cuda(NULL), "cuda");
    else printf("note: CUDA table checks not run here (%s); make test-gpu runs them on a GPU, "
                "tests/test_model_cuda_emu.sh on the warp emulator\n", zrt_cuda_error());
    return tu_exit();
}
