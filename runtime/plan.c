/*
 * plan.c — per-unit, per-kind strategy, codec and algorithm from the YAML.
 *
 * Resolution, for unit u and kind k (allgather, reducescatter, alltoall):
 *
 *   strategy  comm.strategy -> comm.<kind> (unless "default") -> rules
 *   codec     comm.codec    -> rules
 *   algo      comm.algo (where it applies to k) -> rules
 *
 * where the rules are comm.overrides in file order, each matching unit
 * names with fnmatch ("layers.1*") and kinds (kind: all | one kind), and
 * setting only the fields it names, so later rules win field by field, the
 * way later lines of a config do. `--set comm.strategy=X` forces X on every
 * call (A/B runs), the rules' codecs and algorithms still apply.
 *
 * An algorithm applies to a kind when ZipCCL runs it for that kind
 * (zipcclAlgoRun): ring, oneshot and hier for allgather, ring, direct and
 * hier for reducescatter, hier for alltoall (else pairwise whatever is
 * asked; hier: raw to peers of the same node, frames to the others). A rule
 * whose algorithm applies to none of its kinds is refused, like a rule
 * matching no unit: both are config mistakes that would otherwise change
 * nothing silently.
 *
 * Left out: rules over anything but unit names (sizes, steps).
 */
#include "plan.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static const zipcclCollKind_t kColl[PLAN_NKINDS] = {zipcclCollAllGather, zipcclCollReduceScatter,
                                                    zipcclCollAlltoAllv};

const char* plan_kind_name(int k) {
    return k == PLAN_AG ? "allgather" : k == PLAN_RS ? "reducescatter" : "alltoall";
}

static int algo_applies(int k, zipcclAlgo_t a) {
    return a == zipcclAlgoDefault || zipcclAlgoRun(kColl[k], a) == a;
}

static int rule_has_kind(const CommOverride* o, int k) {
    return o->kind < 0 || o->kind == (int)kColl[k];
}

int plan_build(CommPlan* p, const TrainConfig* cfg, int n_units, const char (*names)[32],
               const int (*has)[PLAN_NKINDS], char* err, size_t errlen) {
    memset(p, 0, sizeof *p);
    p->n_units = n_units;
    const zipcclStrategy_t per_kind[PLAN_NKINDS] = {cfg->comm.allgather, cfg->comm.reducescatter,
                                                    cfg->comm.alltoall};
    const char* file = cfg->source[0] ? PRINTABLE(cfg->source) : "config";
    for (int j = 0; j < cfg->comm.n_overrides; j++) {
        const CommOverride* o = &cfg->comm.overrides[j];
        int matched = 0, algo_ok = o->algo < 0;
        for (int u = 0; u < n_units; u++)
            for (int k = 0; k < PLAN_NKINDS; k++) {
                if (!has[u][k] || !rule_has_kind(o, k) || fnmatch(o->pattern, names[u], 0)) continue;
                matched = 1;
                algo_ok |= algo_applies(k, (zipcclAlgo_t)o->algo);
            }
        if (!matched) {
            char list[256] = "";
            size_t used = 0;
            for (int u = 0; u < n_units && used < sizeof list - 8; u++) {
                int any = 0;
                for (int k = 0; k < PLAN_NKINDS; k++) any |= has[u][k] && rule_has_kind(o, k);
                if (any) used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                                                  used ? ", " : "", names[u]);
            }
            return zrt_errf(err, errlen,
                            "%s:%d: key 'comm.overrides': rule %d (pattern \"%s\", kind %s) matches "
                            "no unit (units with that kind: %s)",
                            file, o->line, j + 1, PRINTABLE(o->pattern),
                            o->kind < 0 ? "all" : plan_kind_name(o->kind == zipcclCollAllGather ? 0 : o->kind == zipcclCollReduceScatter ? 1 : 2),
                            list[0] ? list : "none");
        }
        if (!algo_ok)
            return zrt_errf(err, errlen,
                            "%s:%d: key 'comm.overrides.algo': rule %d asks for '%s', which runs for "
                            "none of the collectives it matches (allgather: ring|oneshot|hier, "
                            "reducescatter: ring|direct|hier, alltoall: hier)",
                            file, o->line, j + 1, zipcclAlgoName((zipcclAlgo_t)o->algo));
    }
    /* the rules are valid: nothing to free on the error paths above */
    p->names = zrt_calloc((size_t)n_units, sizeof *p->names, "plan");
    p->e = zrt_calloc((size_t)n_units, sizeof *p->e, "plan");
    p->st = zrt_calloc((size_t)n_units, sizeof *p->st, "plan");
    for (int u = 0; u < n_units; u++) {
        snprintf(p->names[u], sizeof p->names[u], "%s", names[u]);
        for (int k = 0; k < PLAN_NKINDS; k++) {
            PlanEntry* e = &p->e[u][k];
            e->applies = has[u][k];
            if (!e->applies) continue;
            zipcclCallConfig_t c = {cfg->comm.strategy, cfg->comm.codec, zipcclAlgoDefault};
            if (per_kind[k] != zipcclStrategyDefault) c.strategy = per_kind[k];
            if (algo_applies(k, cfg->comm.algo)) c.algo = cfg->comm.algo;
            for (int j = 0; j < cfg->comm.n_overrides; j++) {
                const CommOverride* o = &cfg->comm.overrides[j];
                if (!rule_has_kind(o, k) || fnmatch(o->pattern, names[u], 0)) continue;
                if (o->strategy != zipcclStrategyDefault) c.strategy = o->strategy;
                if (o->codec != zipcclCodecDefault) c.codec = o->codec;
                if (o->algo >= 0 && algo_applies(k, (zipcclAlgo_t)o->algo))
                    c.algo = (zipcclAlgo_t)o->algo;
            }
            if (cfg->comm.strategy_forced) c.strategy = cfg->comm.strategy;
            e->cfg = c;
        }
    }
    return 0;
}

void plan_free(CommPlan* p) {
    free(p->names);
    free(p->e);
    free(p->st);
    memset(p, 0, sizeof *p);
}

static void cell(const PlanEntry* e, char* buf, size_t n) {
    if (!e->applies) {
        snprintf(buf, n, "-");
        return;
    }
    if (e->local) { /* one rank's group: a cast or nothing, and an add (fsdp.h) */
        snprintf(buf, n, "local (no collective) %dx", e->calls_per_step);
        return;
    }
    const int comp = e->cfg.strategy == zipcclStrategyCompressed || e->cfg.strategy == zipcclStrategyAuto;
    char bytes[32];
    snprintf(buf, n, "%s%s%s/%s %dx %s", zipcclStrategyName(e->cfg.strategy), comp ? "/" : "",
             comp ? config_codec_name(e->cfg.codec) : "", zipcclAlgoName(e->cfg.algo),
             e->calls_per_step, zrt_fmt_bytes((double)e->bytes_per_step, bytes, sizeof bytes));
}

void plan_print(const CommPlan* p, FILE* f) {
    int any_a2a = 0;
    uint64_t tot[PLAN_NKINDS] = {0};
    for (int u = 0; u < p->n_units; u++) {
        any_a2a |= p->e[u][PLAN_A2A].applies;
        for (int k = 0; k < PLAN_NKINDS; k++) tot[k] += p->e[u][k].bytes_per_step;
    }
    fprintf(f, "# plan: unit | allgather | reducescatter%s   (strategy/codec/algo, calls and raw bytes per step, this rank)\n",
            any_a2a ? " | alltoall" : "");
    for (int u = 0; u < p->n_units;) {
        char row[3][96], next[3][96];
        for (int k = 0; k < PLAN_NKINDS; k++) cell(&p->e[u][k], row[k], sizeof row[k]);
        int v = u + 1;
        for (; v < p->n_units; v++) { /* fold identical neighbours */
            int same = 1;
            for (int k = 0; k < PLAN_NKINDS; k++) {
                cell(&p->e[v][k], next[k], sizeof next[k]);
                same &= !strcmp(row[k], next[k]);
            }
            if (!same) break;
        }
        char name[80];
        if (v - u > 1) snprintf(name, sizeof name, "%s .. %s", p->names[u], p->names[v - 1]);
        else snprintf(name, sizeof name, "%s", p->names[u]);
        fprintf(f, "#   %-28s | %-34s | %-34s", name, row[0], row[1]);
        if (any_a2a) fprintf(f, " | %s", row[2]);
        fprintf(f, "%s\n", v - u > 1 ? "   (each)" : "");
        u = v;
    }
    char b[3][32];
    fprintf(f, "#   per step: allgather %s, reducescatter %s", zrt_fmt_bytes((double)tot[0], b[0], 32),
            zrt_fmt_bytes((double)tot[1], b[1], 32));
    if (any_a2a) fprintf(f, ", alltoall (the exchanges' sizes follow the routing)");
    fprintf(f, "\n");
}

void plan_print_actual(const CommPlan* p, FILE* f) {
    fprintf(f, "# what ran (this rank, the run): unit kind | calls native/raw/compressed/auto? | "
               "codec fast/dense/f3 | raw -> wire (ratio) | codec ms | exposed ms\n");
    uint64_t shared = 0, calls = 0;
    for (int u = 0; u < p->n_units; u++)
        for (int k = 0; k < PLAN_NKINDS; k++) {
            const PlanStats* s = &p->st[u][k];
            if (!p->e[u][k].applies || !s->calls) continue;
            char a[32], b[32];
            fprintf(f,
                    "#   %-20s %-13s | %4llu: %llu/%llu/%llu | %llu/%llu/%llu | %s -> %s (x%.3f) | "
                    "%.1f | %.1f\n",
                    p->names[u], plan_kind_name(k), (unsigned long long)s->calls,
                    (unsigned long long)s->by_strategy[zipcclStrategyNative],
                    (unsigned long long)s->by_strategy[zipcclStrategyRaw],
                    (unsigned long long)s->by_strategy[zipcclStrategyCompressed],
                    (unsigned long long)s->by_codec[zipcclCodecFast],
                    (unsigned long long)s->by_codec[zipcclCodecDense],
                    (unsigned long long)s->by_codec[zipcclCodecF3],
                    zrt_fmt_bytes((double)s->raw, a, sizeof a),
                    zrt_fmt_bytes((double)s->wire, b, sizeof b),
                    s->wire ? (double)s->raw / (double)s->wire : 1.0, s->codec_s * 1e3,
                    s->exposed_s * 1e3);
            shared += s->shared;
            calls += s->calls;
        }
    if (shared)
        fprintf(f, "#   (%llu of %llu calls finished together with a neighbour on their "
                   "communicator: their bytes and times are split between them by size)\n",
                (unsigned long long)shared, (unsigned long long)calls);
}

int plan_check_compressed(const CommPlan* p, char* err, size_t errlen) {
    int bad = 0;
    for (int u = 0; u < p->n_units; u++)
        for (int k = 0; k < PLAN_NKINDS; k++) {
            const PlanStats* s = &p->st[u][k];
            /* a group of one rank (expert units at EP = ranks) sends nothing */
            if (!p->e[u][k].applies || p->e[u][k].cfg.strategy != zipcclStrategyCompressed ||
                !s->calls || !s->raw)
                continue;
            /* Every call must have run compressed; that each unit's wire is
             * smaller is not asked (an embedding gradient that is mostly
             * zeros rows may not shrink: the codec stores such chunks), the
             * per-kind check of every step (fsdp_check_compression) holds
             * the bytes. */
            if (s->by_strategy[zipcclStrategyCompressed] == s->calls) continue;
            if (!bad++)
                snprintf(err, errlen,
                         "the plan asks for compressed %s of %s, but of its %llu calls %llu "
                         "ran compressed (%llu raw bytes -> %llu wire bytes; hint: check the "
                         "codec, or plan raw for it)",
                         plan_kind_name(k), p->names[u], (unsigned long long)s->calls,
                         (unsigned long long)s->by_strategy[zipcclStrategyCompressed],
                         (unsigned long long)s->raw, (unsigned long long)s->wire);
        }
    return bad;
}
