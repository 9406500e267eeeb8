// test: ranks=1,2,3,4 timeout=120
/*
 * test_expert.c — expert parallelism's dispatch and combine (runtime/expert.c)
 * at 1-4 ranks, EP = every divisor of the rank count.
 *
 * The reference is MPI's own MPI_Allgather: every rank gathers every rank's
 * counts and rows and computes, independently of expert.c, which rows each
 * rank must receive and in which order (its local experts in order; for each,
 * the rows of its EP group's ranks in rank order; inside a rank, that rank's
 * own order). Checked: dispatch delivers exactly those rows (bit for bit),
 * with native, raw and compressed AlltoAllv alike; combine of a function of
 * the received rows brings back that function of every rank's own rows, in
 * place (Megatron's dispatcher test in spirit: dispatch + combine = identity
 * on what the experts did); the backward exchange reuses the forward's sizes
 * and refuses other ones; experts with zero rows, a rank sending nothing, and
 * EP = 1 work. Chunked (moe.overlap_chunks 2 and 7, every chunk started
 * before the first is waited): each chunk's rows per local expert are the
 * reference's (as a set), the chunks add up, chunk-wise combine comes back
 * in place, a backward with another chunk count is refused.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "expert.h"
#include "kernels.h"
#include "testutil.h"
#include "mpitest.h"

/* mpitest.h's agreed verdict, with this check's reason */
static void verdict(int ok, const char* name, const char* reason) {
    if (!ok) snprintf(why, sizeof why, "%s", reason);
    report(ok, name);
}

/* A row's values say whose it is: (rank, row, column). */
static float value(int r, int row, int c) { return (float)(r * 100000 + row * 16 + c % 16) + 0.25f; }

/* What a value becomes on the wire: itself in fp32, rounded in bf16. */
static zipcclDataType_t g_dtype = zipcclFloat32;
static float through(float v) {
    return g_dtype == zipcclBfloat16 ? zipcclBf16ToFloat(zipcclFloatToBf16(v)) : v;
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

/* One trial: E experts, EP, rows per rank from a seeded count pattern. */
static void trial(int ep, int E, int C, uint64_t seed, zipcclStrategy_t strategy,
                  zipcclDataType_t dtype, const char* tag) {
    char name[128], reason[256] = "";
    g_dtype = dtype;
    Expert x;
    zipcclCallConfig_t cfg = {strategy, zipcclCodecDefault, zipcclAlgoDefault};
    zipcclCallConfig_t cfgs[2] = {cfg, cfg};
    char err[200];
    if (expert_init(&x, ep, E, 2, cfgs, dtype, zrt_kernels_cpu(), err, sizeof err)) {
        snprintf(name, sizeof name, "%s/init", tag);
        verdict(0, name, err);
        return;
    }
    // counts: some experts empty, rank 1 (if any) sends nothing in trial seed 3
    int* counts = malloc(sizeof(int) * E * nranks);
    for (int r = 0; r < nranks; r++)
        for (int e = 0; e < E; e++) {
            uint64_t h = mix(seed * 1315423911u + (uint64_t)r * 2654435761u + (uint64_t)e);
            counts[r * E + e] = (h % 5 == 0) ? 0 : (int)(h % 7);
            if (seed == 3 && r == 1) counts[r * E + e] = 0;
        }
    int* total = calloc(nranks, sizeof(int));
    for (int r = 0; r < nranks; r++)
        for (int e = 0; e < E; e++) total[r] += counts[r * E + e];
    float* rows = malloc(sizeof(float) * ((size_t)total[rank] * C + 1));
    for (int i = 0; i < total[rank]; i++)
        for (int c = 0; c < C; c++) rows[(size_t)i * C + c] = value(rank, i, c);

    // reference: which rows this rank's experts get, from the gathered counts
    const int El = E / ep, first = (rank % ep) * El, g0 = rank / ep * ep;
    size_t want_n = 0;
    int want_counts[64] = {0};
    for (int j = 0; j < El; j++)
        for (int s = g0; s < g0 + ep; s++) {
            want_counts[j] += counts[s * E + first + j];
            want_n += (size_t)counts[s * E + first + j];
        }
    float* want = malloc(sizeof(float) * (want_n * C + 1));
    size_t o = 0;
    for (int j = 0; j < El; j++)
        for (int s = g0; s < g0 + ep; s++) {
            int start = 0; // row of rank s where expert first+j begins
            for (int e = 0; e < first + j; e++) start += counts[s * E + e];
            for (int i = 0; i < counts[s * E + first + j]; i++, o++)
                for (int c = 0; c < C; c++) want[o * C + c] = through(value(s, start + i, c));
        }

    const float* recv = NULL;
    const int* rc = NULL;
    int n_recv = -1, n_local = -1, fe = -1;
    int rcd = expert_dispatch(&x, 1, 0, rows, counts + rank * E, C, &recv, &n_recv, &rc, &n_local,
                              &fe);
    int ok = rcd == 0 && n_recv == (int)want_n && n_local == El && fe == first &&
             (!want_n || !memcmp(recv, want, want_n * C * sizeof(float)));
    for (int j = 0; ok && j < El; j++) ok = rc[j] == want_counts[j];
    if (!ok)
        snprintf(reason, sizeof reason, "rank %d: rc %d, %d rows (want %zu), %d local from %d (want %d from %d)",
                 rank, rcd, n_recv, want_n, n_local, fe, El, first);
    snprintf(name, sizeof name, "%s/dispatch_delivers_reference_rows", tag);
    verdict(ok, name, reason);

    // the experts: y = 2x - 1 per element; combine must return it in place
    float* y = malloc(sizeof(float) * (want_n * C + 1));
    for (size_t i = 0; i < want_n * C; i++) y[i] = 2.0f * recv[i] - 1.0f;
    float* back = malloc(sizeof(float) * ((size_t)total[rank] * C + 1));
    int rcc = expert_combine(&x, 1, 0, y, back);
    ok = rcc == 0;
    for (size_t i = 0; ok && i < (size_t)total[rank] * C; i++)
        ok = back[i] == through(2.0f * through(rows[i]) - 1.0f);
    snprintf(name, sizeof name, "%s/combine_returns_expert_outputs_in_place", tag);
    verdict(ok, name, "combine did not bring back 2x-1 of this rank's rows");

    // backward: the same sizes, no count exchange; other sizes are refused
    rcd = expert_dispatch(&x, 1, 1, back, counts + rank * E, C, &recv, &n_recv, &rc, &n_local, &fe);
    ok = rcd == 0 && n_recv == (int)want_n;
    for (size_t i = 0; ok && i < want_n * C; i++) ok = recv[i] == through(2.0f * want[i] - 1.0f);
    rcc = ok ? expert_combine(&x, 1, 1, recv, back) : -1;
    for (size_t i = 0; ok && i < (size_t)total[rank] * C; i++)
        ok = back[i] == through(2.0f * through(rows[i]) - 1.0f);
    snprintf(name, sizeof name, "%s/backward_exchange_reuses_sizes", tag);
    verdict(ok && rcc == 0, name, "phase-1 dispatch/combine differ from the forward's layout");
    if (strategy == zipcclStrategyRaw && ep > 1) {
        int other[64];
        memcpy(other, counts + rank * E, sizeof(int) * E);
        other[0] += 1; // every rank claims one more row for expert 0
        float* more = calloc((size_t)(total[rank] + 1) * C, sizeof(float));
        rcd = expert_dispatch(&x, 1, 1, more, other, C, &recv, &n_recv, &rc, &n_local, &fe);
        free(more);
        snprintf(name, sizeof name, "%s/backward_refuses_other_sizes", tag);
        verdict(rcd == -1, name, "a backward dispatch with other counts was accepted");
        int never = expert_combine(&x, 0, 0, y, back); // block 0 never dispatched
        snprintf(name, sizeof name, "%s/combine_without_dispatch_refused", tag);
        verdict(never == -1, name, "combine of a block with no dispatch was accepted");
    }
    // chunks (moe.overlap_chunks), on block 0: every chunk started before
    // any is waited (as the scheduler does with overlap), each chunk's rows
    // per local expert are the reference's rows of that expert (as a set:
    // a chunk takes a run of each source's rows), the chunks' counts add up,
    // chunk-wise 2x-1 comes back in place, and the backward refuses other
    // chunks; 7 chunks leave some empty
    for (int nc = 2; nc <= 7; nc += 5) {
        int got_nc = -1, got_n = -1, got_l = -1, got_f = -1;
        ok = expert_dispatch_begin(&x, 0, 0, rows, counts + rank * E, C, nc, &got_nc, &got_n,
                                   &got_l, &got_f) == 0 &&
             got_nc == nc && got_n == (int)want_n && got_l == El && got_f == first;
        for (int c = 0; ok && c < nc; c++) ok = expert_dispatch_issue(&x, 0, 0, c) == 0;
        float* ych = malloc(sizeof(float) * (want_n * C + 1));
        float* seen = malloc(sizeof(float) * (want_n + 1));
        float* ref = malloc(sizeof(float) * (want_n + 1));
        int per[64] = {0};
        size_t o = 0;
        for (int c = 0; ok && c < nc; c++) {
            const float* cr = NULL;
            const int* cc = NULL;
            int cn = -1;
            ok = expert_dispatch_wait(&x, 0, 0, c, &cr, &cn, &cc) == 0;
            long long sum = 0;
            for (int j = 0; ok && j < El; j++) sum += cc[j], per[j] += cc[j];
            ok = ok && sum == cn;
            for (int i = 0; ok && i < cn * C; i++) ych[o * C + i] = 2.0f * cr[i] - 1.0f;
            // first column of each row, filed by expert: compared as a set below
            for (int j = 0, r0 = 0; ok && j < El; r0 += cc[j], j++) {
                int eo = 0; // where expert j's rows start in the reference
                for (int jj = 0; jj < j; jj++) eo += want_counts[jj];
                for (int i = 0; i < cc[j]; i++) seen[eo + per[j] - cc[j] + i] = cr[(r0 + i) * C];
            }
            ok = ok && expert_combine_issue(&x, 0, 0, c, ych + o * C, back) == 0;
            o += (size_t)cn;
        }
        for (int j = 0; ok && j < El; j++) ok = per[j] == want_counts[j];
        ok = ok && o == want_n;
        for (size_t i = 0; ok && i < want_n; i++) ref[i] = want[i * C];
        if (ok) {
            for (int j = 0, eo = 0; j < El; eo += want_counts[j], j++) { // sort each expert's run
                for (int a = eo; a < eo + want_counts[j]; a++)
                    for (int b2 = a + 1; b2 < eo + want_counts[j]; b2++) {
                        if (seen[b2] < seen[a]) { float t = seen[a]; seen[a] = seen[b2]; seen[b2] = t; }
                        if (ref[b2] < ref[a]) { float t = ref[a]; ref[a] = ref[b2]; ref[b2] = t; }
                    }
            }
            ok = !want_n || !memcmp(seen, ref, want_n * sizeof(float));
        }
        snprintf(name, sizeof name, "%s/chunks%d_deliver_each_experts_rows", tag, nc);
        verdict(ok, name, "the chunks do not hold the reference's rows per expert");
        for (int c = 0; ok && c < nc; c++) ok = expert_combine_wait(&x, 0, 0, c) == 0;
        ok = ok && expert_combine_end(&x, 0, 0, back) == 0;
        for (size_t i = 0; ok && i < (size_t)total[rank] * C; i++)
            ok = back[i] == through(2.0f * through(rows[i]) - 1.0f);
        snprintf(name, sizeof name, "%s/chunks%d_combine_in_place", tag, nc);
        verdict(ok, name, "the chunked combine did not bring back 2x-1 of this rank's rows");
        ok = expert_dispatch_begin(&x, 0, 1, back, counts + rank * E, C, nc + 1, &got_nc, &got_n,
                                   &got_l, &got_f) == -1;
        snprintf(name, sizeof name, "%s/chunks%d_backward_refuses_other_chunks", tag, nc);
        verdict(ok, name, "a backward with another chunk count was accepted");
        free(ych);
        free(seen);
        free(ref);
    }
    long long routed = 0;
    for (int e = 0; e < E; e++) routed += x.tokens[E + e];
    snprintf(name, sizeof name, "%s/stats", tag);
    verdict(routed == total[rank] && x.received[1] == (long long)want_n, name,
           "tokens/received statistics do not match the counts");
    free(counts);
    free(total);
    free(rows);
    free(want);
    free(y);
    free(back);
    expert_free(&x);
}

int main(int argc, char** argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    const zipcclStrategy_t strategies[3] = {zipcclStrategyNative, zipcclStrategyRaw,
                                            zipcclStrategyCompressed};
    const char* sname[3] = {"native", "raw", "compressed"};
    for (int ep = 1; ep <= nranks; ep++) {
        if (nranks % ep) continue;
        for (int si = 0; si < 3; si++)
            for (uint64_t seed = 1; seed <= 3; seed++) {
                char tag[64];
                snprintf(tag, sizeof tag, "np%d/ep%d/%s/seed%d", nranks, ep, sname[si], (int)seed);
                trial(ep, 2 * ep * (seed == 2 ? 3 : 1), 24, seed, strategies[si], zipcclFloat32,
                      tag);
            }
        // the rows as bf16 (comm.alltoall_dtype): each value rounded once on
        // the way out, the layout the same
        for (int si = 1; si < 3; si++) {
            char tag[64];
            snprintf(tag, sizeof tag, "np%d/ep%d/%s/bf16", nranks, ep, sname[si]);
            trial(ep, 2 * ep, 24, 1, strategies[si], zipcclBfloat16, tag);
        }
    }
    // TorchTitan's permute-indices case: rank 0 owns experts 0 and 1 and gets
    // [2, 3] rows from itself and [1, 4] from rank 1; rank-major they are rows
    // 0..9, expert-major [0, 1, 5, 2, 3, 4, 6, 7, 8, 9] with totals [3, 7].
    if (nranks == 2) {
        Expert x;
        char err[200];
        zipcclCallConfig_t cfg = {zipcclStrategyRaw, zipcclCodecDefault, zipcclAlgoDefault};
        if (expert_init(&x, 2, 4, 1, &cfg, zipcclFloat32, zrt_kernels_cpu(), err, sizeof err) == 0) {
            const int mine[2][4] = {{2, 3, 1, 1}, {1, 4, 0, 2}};
            const int* counts = mine[rank];
            const int n = counts[0] + counts[1] + counts[2] + counts[3];
            float rows[16];
            // rank 0's rows to experts 0, 1 are rank-major rows 0..4, rank 1's are 5..9
            for (int i = 0; i < n; i++) rows[i] = (float)(rank == 0 ? i : 5 + i);
            const float* recv;
            const int* rc;
            int n_recv, n_local, fe;
            int r = expert_dispatch(&x, 0, 0, rows, counts, 1, &recv, &n_recv, &rc, &n_local, &fe);
            int ok = r == 0;
            if (ok && rank == 0) {
                const float want[10] = {0, 1, 5, 2, 3, 4, 6, 7, 8, 9};
                ok = n_recv == 10 && n_local == 2 && rc[0] == 3 && rc[1] == 7 &&
                     !memcmp(recv, want, sizeof want);
            }
            verdict(ok, "expert/torchtitan_permute_indices_2x2",
                   "rank 0 did not receive rows [0 1 5 2 3 4 6 7 8 9] with totals [3 7]");
            expert_free(&x);
        }
    }
    // ep must divide the ranks and the experts
    Expert x;
    char err[200] = "";
    zipcclCallConfig_t cfg = {zipcclStrategyRaw, zipcclCodecDefault, zipcclAlgoDefault};
    int bad = expert_init(&x, nranks + 1, 4 * (nranks + 1), 1, &cfg, zipcclFloat32, zrt_kernels_cpu(),
                          err, sizeof err);
    verdict(bad == -1 && strstr(err, "divide"), "expert/init_rejects_ep_not_dividing_ranks", err);
    if (nranks % 2 == 0) {
        bad = expert_init(&x, 2, 3, 1, &cfg, zipcclFloat32, zrt_kernels_cpu(), err, sizeof err);
        verdict(bad == -1 && strstr(err, "n_experts"), "expert/init_rejects_ep_not_dividing_experts",
               err);
    }
    MPI_Finalize();
    return tu_exit();
}
