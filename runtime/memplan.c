/*
 * memplan.c — the memory plan of memplan.h: the per-rank breakdown from the
 * config, the schedule's simulated peak and the model's activation layout.
 */
#include "memplan.h"

#include <string.h>

#include "fsdp.h"
#include "llama.h"
#include "log.h"
#include "scheduler.h"

int memplan_build(const TrainConfig* cfg, int nranks, const ZrtKernels* K, double data_bytes,
                  double base, MemPlan* mp, char* err, size_t errlen) {
    memset(mp, 0, sizeof *mp);
    const LlamaConfig* m = &cfg->model;
    const int EP = m->n_experts > 0 ? cfg->parallel.ep : 1;
    if (nranks < 1 || nranks % EP)
        return zrt_errf(err, errlen, "key 'parallelism.ep': %d does not divide the %d ranks", EP,
                        nranks);
    mp->nranks = nranks;
    double shards = 0, largest = 0;
    for (int u = 0; u < llama_num_units(m); u++) {
        const int experts = llama_unit_is_experts(m, u) && EP > 1;
        const size_t G = (size_t)(experts ? nranks / EP : nranks);
        const size_t numel = llama_unit_numel(m, u) / (experts ? (size_t)EP : 1);
        const double padded = (double)fsdp_pad(numel, G, cfg->train.rank_invariant);
        shards += padded / (double)G;
        if (padded > largest) largest = padded;
    }
    mp->params = mp->grads = 4 * shards;
    if (cfg->train.rank_invariant) { /* the micro-batch tree's levels, a bf16 tree's scratch (fsdp.h) */
        int levels = 0;
        while ((1 << levels) < cfg->data.grad_accum) levels++;
        mp->grads += 4 * shards * levels +
                     (cfg->comm.reduce_dtype == zipcclBfloat16 ? 4 * largest : 0);
        if (m->n_experts > 0 && EP > 1) { /* the experts' tree over sources (models/moe.c) */
            int xl = 0;
            while ((1 << xl) < EP) xl++;
            mp->grads += 4.0 * (xl + 2) * (double)llama_expert_numel(m);
        }
    }
    mp->optim = 8 * shards;
    if (sched_check_config(cfg, nranks, &mp->inflight, err, errlen)) return -1;
    const int B = cfg->data.batch_size, T = cfg->data.seq_len;
    const int exchange = m->n_experts > 0 && EP > 1;
    LlamaMemOpts o = {.recompute = 0, .logits_rows = cfg->train.logits_rows,
                      .expert_exchange = exchange};
    mp->acts_none = (double)llama_acts_bytes_opts(m, B, T, K, &o);
    o.recompute = 1;
    mp->acts_full = (double)llama_acts_bytes_opts(m, B, T, K, &o);
    /* auto starts without recomputation (memplan_recompute) */
    mp->recompute_auto = !strcmp(cfg->train.recompute, "auto");
    mp->recompute = !strcmp(cfg->train.recompute, "full");
    mp->acts = mp->recompute ? mp->acts_full : mp->acts_none;
    /* ZipCCL's staging, which each communicator keeps at its largest call
     * (grown by 1/8 more, comm/base/comm_state.h): a gather's frames (its
     * shard out, the n-1 others in: about one unit at the wire dtype) and a
     * reduce-scatter's (n-1 blocks out, n-1 in: 2 (n-1)/n of a unit, and
     * its fp32 accumulator, 1/n); nothing at one rank, and nothing with
     * comm.net: nccl (the scratch is the device's, below) */
    const double wp = cfg->comm.param_dtype == zipcclBfloat16 ? 2 : 4,
                 wr = cfg->comm.reduce_dtype == zipcclBfloat16 ? 2 : 4;
    const int nccl = !K->dev->host_access && !strcmp(cfg->runtime.net, "nccl");
    mp->comm = nranks > 1 && !nccl ? 1.125 * largest * (wp + (2 * wr * (nranks - 1) + 4) / nranks) : 0;
    /* the expert exchange's buffers, shared by the MoE blocks
     * (runtime/expert.c): three fp32 row sets of the N*k rows a rank sends
     * or receives (the average), four bf16 ones with a bf16 exchange (the
     * model's memory: on a device, the device's), and ZipCCL's frames both
     * ways */
    double xsets = 0, xframes = 0; /* bytes of the exchange's row sets (the model's memory) and frames */
    if (exchange) {
        const double cf = m->capacity_factor > 0 ? m->capacity_factor : 1.0;
        const double rows = cf * B * T * m->n_experts_per_tok * m->dim,
                     wa = cfg->comm.alltoall_dtype == zipcclBfloat16 ? 2 : 4;
        xsets = rows * (12 + (wa == 2 ? 8 : 0));
        xframes = rows * 2 * 1.125 * wa;
        mp->comm += xsets + (nccl ? 0 : xframes);
    }
    mp->data = data_bytes;
    mp->base = base;
    const double shard_total = mp->params + mp->grads + mp->optim;
    mp->host = mp->base + mp->data + mp->comm;
    if (K->dev->host_access) {
        mp->host += shard_total + mp->acts + mp->inflight;
    } else {
        /* the shards, activations and the collectives' buffers in flight on
         * the device (ZipCCL takes device buffers; its pinned staging is the
         * host's comm above), and a host copy of params, m and v while a
         * checkpoint is written (fsdp_shard_host) */
        mp->device = shard_total + mp->acts + mp->inflight;
        mp->host += mp->params + mp->optim;
        /* a CUDA device codes compressed calls on the GPU
         * (algo/coll_device.c), each communicator keeping the scratch of its
         * largest call: a gather's frames (its own and the n others': (n+1)/n
         * of a unit at the wire dtype), a reduce-scatter's both ways (2
         * units) with its fp32 accumulator and decoded block (1/n each), the
         * exchange's frames both ways; over NCCL also a raw reduce-scatter's
         * n received blocks (a unit) */
        if ((nccl || !strncmp(K->name, "cuda", 4)) && nranks > 1)
            mp->device += 1.125 * largest * (wp * (nranks + 1) / nranks + (nccl ? 3 : 2) * wr + (4 + wr) / nranks) +
                          xframes;
        /* the exchange's row sets are the device's (expert.c); without
         * NCCL its frames are ZipCCL's pinned staging too */
        mp->device += xsets;
        mp->host -= xsets;
    }
    return 0;
}

int memplan_fits(const MemPlan* mp, const ZrtKernels* K, double host_budget, double device_budget) {
    return (host_budget <= 0 || mp->host <= host_budget) &&
           (device_budget <= 0 || K->dev->host_access || mp->device <= device_budget);
}

void memplan_recompute(MemPlan* mp, const ZrtKernels* K) {
    if (mp->recompute) return;
    const double less = mp->acts_none - mp->acts_full; /* the device's on a device */
    mp->recompute = 1;
    mp->acts = mp->acts_full;
    if (K->dev->host_access) mp->host -= less;
    else mp->device -= less;
}

void memplan_print(const MemPlan* mp, const TrainConfig* cfg, const ZrtKernels* K, FILE* f) {
    char b[14][32];
    const int dev = !K->dev->host_access;
    fprintf(f,
            "# memory plan per rank at %d rank%s (%s): shards %s (params %s, grads %s, AdamW m+v "
            "%s) + gathered units and gradients in flight %s (the schedule's peak) "
            "+ activations %s%s (recompute %s; none %s, full %s) + comm %s + data %s + process "
            "%s = host %s",
            mp->nranks, mp->nranks > 1 ? "s" : "", K->name,
            zrt_fmt_bytes(mp->params + mp->grads + mp->optim, b[0], 32),
            zrt_fmt_bytes(mp->params, b[1], 32), zrt_fmt_bytes(mp->grads, b[2], 32),
            zrt_fmt_bytes(mp->optim, b[3], 32),
            zrt_fmt_bytes(mp->inflight, b[5], 32), zrt_fmt_bytes(mp->acts, b[6], 32),
            dev ? " on the device" : "",
            mp->recompute_auto ? (mp->recompute ? "auto: full" : "auto: none") : cfg->train.recompute,
            zrt_fmt_bytes(mp->acts_none, b[7], 32), zrt_fmt_bytes(mp->acts_full, b[8], 32),
            zrt_fmt_bytes(mp->comm, b[9], 32), zrt_fmt_bytes(mp->data, b[10], 32),
            zrt_fmt_bytes(mp->base, b[11], 32), zrt_fmt_bytes(mp->host, b[12], 32));
    if (dev) fprintf(f, ", device %s", zrt_fmt_bytes(mp->device, b[13], 32));
    fprintf(f, "\n");
    if (cfg->model.n_experts > 0 && cfg->parallel.ep > 1 && cfg->model.capacity_factor <= 0)
        fprintf(f, "# note: dropless routing: the plan counts the rows a rank's experts receive "
                   "at the average (tokens x top-k); an uneven router sends some ranks more "
                   "(model.capacity_factor bounds it)\n");
}
