/*
 * expert.c — expert parallelism: the one file to read to learn how a token
 * reaches its expert on another rank and comes back.
 *
 * One MoE block, EP = 2, E = 4 (rank 0 owns experts 0 and 1, rank 1 owns 2
 * and 3). Each rank's model hands over its (token, slot) rows grouped by
 * expert, with counts per expert:
 *
 *   rank 0 rows:  e0 e0 e1 | e2 e3 e3        counts [2 1 1 2]
 *   rank 1 rows:  e1 | e2 e2 e3              counts [0 1 2 1]
 *
 * 1. counts: an all-to-all of each rank's counts for the experts of each
 *    destination (MPI_Alltoall of ints on the EP group: a few bytes, so
 *    it goes straight over MPI; it is also the one host sync per block).
 *    Rank 0 learns it gets [2 1] from itself and [0 1] from rank 1.
 * 2. rows: one ZipCCL AlltoAllv of the activations (the kind `alltoall` of
 *    the communication plan: native, raw, compressed or auto; as fp32, or
 *    rounded to bf16 with comm.alltoall_dtype). The experts
 *    of a destination are contiguous in the sender's grouping, so the send
 *    buffer is the model's own. The receiver gets them rank-major:
 *      rank 0 receives  [from 0: e0 e0 e1] [from 1: e1]
 * 3. permute rank-major -> expert-major (local expert j: its rows from
 *    rank 0, then rank 1, ...), which the model computes expert by expert:
 *      rank 0 computes  e0 e0 | e1 e1        recv_counts [2 2]
 * combine is the inverse: expert-major -> rank-major, the reverse
 * AlltoAllv (sizes swapped), and every row is back where the model had it.
 *
 * The backward runs the same two exchanges on the gradients (dispatch moves
 * the gradients of the expert outputs, combine brings back those of the
 * inputs); the routing is the forward's, so no counts are exchanged again:
 * the block's split sizes are kept from forward to backward and checked.
 *
 * Everything is in a fixed order (source rank, then row), so the experts
 * see the same rows in the same order however the messages arrive.
 */
#include "expert.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "log.h"

struct ExpertLayer {
    int valid;        /* a forward dispatch has filled this block's sizes */
    int* send;        /* (EP) rows this rank sends to each rank           */
    int* split;       /* (EP * E_local) rows from rank s for local expert j: [s*E_local + j] */
    int* local;       /* (E_local) rows per local expert (what the model computes) */
    int n_send, n_recv;
    int C;            /* floats per row, from the dispatch */
};

/* Buffers shared by all blocks: a block's rows are in flight only between
 * its dispatch and its combine. */
struct ExpertScratch {
    size_t cap;              /* floats */
    float *ranked, *grouped; /* (n_recv, C) rank-major / expert-major */
    uint16_t *send16, *recv16; /* (cap) the rows as bf16 (alltoall_dtype bf16) */
    size_t* sc;              /* (4 * EP) AlltoAllv counts and displacements */
};

int expert_init(Expert* x, int ep, int n_experts, int n_layers, const zipcclCallConfig_t* cfgs,
                zipcclDataType_t dtype, char* err, size_t errlen) {
    memset(x, 0, sizeof *x);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (ep < 1 || n % ep)
        return zrt_errf(err, errlen, "parallelism.ep %d does not divide the %d ranks", ep, n);
    if (n_experts < 1 || n_experts % ep)
        return zrt_errf(err, errlen, "parallelism.ep %d does not divide model.n_experts %d", ep,
                        n_experts);
    if (dtype != zipcclFloat32 && dtype != zipcclBfloat16)
        return zrt_errf(err, errlen, "comm.alltoall_dtype: fp32 or bf16");
    x->dtype = dtype;
    x->ep = ep;
    x->ep_rank = rank % ep;
    const char* sync = getenv("ZRT_EP_SYNC");
    x->sync = sync && !strcmp(sync, "1");
    x->E = n_experts;
    x->E_local = n_experts / ep;
    x->first = x->ep_rank * x->E_local;
    x->n_layers = n_layers;
    MPI_Comm* c = zrt_malloc(sizeof *c, "EP communicator");
    MPI_Comm_split(MPI_COMM_WORLD, rank / ep, x->ep_rank, c);
    x->mpi_ep = c;
    zipcclCheck(zipcclCommInitMpi(&x->comm, c));
    x->cfg = zrt_malloc((size_t)n_layers * sizeof *x->cfg, "EP call configs");
    memcpy(x->cfg, cfgs, (size_t)n_layers * sizeof *x->cfg);
    x->layer = zrt_calloc((size_t)n_layers, sizeof *x->layer, "EP block state");
    for (int l = 0; l < n_layers; l++) {
        ExpertLayer* L = &x->layer[l];
        L->send = zrt_calloc((size_t)ep, sizeof(int), "EP sizes");
        L->split = zrt_calloc((size_t)ep * x->E_local, sizeof(int), "EP sizes");
        L->local = zrt_calloc((size_t)x->E_local, sizeof(int), "EP sizes");
    }
    x->tokens = zrt_calloc((size_t)n_layers * n_experts, sizeof(long long), "EP stats");
    x->received = zrt_calloc((size_t)n_layers, sizeof(long long), "EP stats");
    x->bytes = zrt_calloc((size_t)n_layers * 8, sizeof(uint64_t), "EP byte counts");
    x->scratch = zrt_calloc(1, sizeof *x->scratch, "EP buffers");
    x->scratch->sc = zrt_calloc(4 * (size_t)ep, sizeof(size_t), "EP counts");
    return 0;
}

void expert_free(Expert* x) {
    if (!x->layer) return;
    for (int l = 0; l < x->n_layers; l++) {
        free(x->layer[l].send);
        free(x->layer[l].split);
        free(x->layer[l].local);
    }
    free(x->layer);
    free(x->cfg);
    free(x->tokens);
    free(x->received);
    free(x->bytes);
    zipcclCommDestroy(x->comm);
    MPI_Comm_free((MPI_Comm*)x->mpi_ep);
    free(x->mpi_ep);
    free(x->scratch->ranked);
    free(x->scratch->send16);
    free(x->scratch->sc);
    free(x->scratch);
    memset(x, 0, sizeof *x);
}

void expert_reset_stats(Expert* x) {
    x->blocked_s = 0;
    x->sync_s = 0;
    memset(x->tokens, 0, (size_t)x->n_layers * x->E * sizeof(long long));
    memset(x->received, 0, (size_t)x->n_layers * sizeof(long long));
}

static int fail(int layer, int phase, const char* what, zipcclResult_t r) {
    fprintf(stderr, "expert: block %d %s: %s%s%s%s\n", layer, phase ? "backward" : "forward", what,
            r != zipcclSuccess ? ": " : "", r != zipcclSuccess ? zipcclGetErrorString(r) : "",
            r != zipcclSuccess ? zipcclGetLastErrorDetail() : "");
    return -1;
}

static int reserve(struct ExpertScratch* b, size_t floats) {
    if (floats <= b->cap) return 0;
    float* m = malloc(2 * floats * sizeof(float) + 1);
    uint16_t* h = malloc(2 * floats * sizeof(uint16_t) + 1);
    if (!m || !h) {
        free(m);
        free(h);
        return -1;
    }
    free(b->ranked);
    free(b->send16);
    b->ranked = m;
    b->grouped = m + floats;
    b->send16 = h;
    b->recv16 = h + floats;
    b->cap = floats;
    return 0;
}

/* One AlltoAllv of rows of C floats: send[q] rows to rank q, recv[s] rows
 * from rank s, both packed in rank order. */
static zipcclResult_t exchange(Expert* x, int layer, int which, const float* sendbuf,
                               const int* send, float* recvbuf, const int* recv, int C) {
    const int P = x->ep;
    struct ExpertScratch* b = x->scratch;
    size_t *sc = b->sc, *sd = sc + P, *rc = sd + P, *rd = rc + P;
    size_t so = 0, ro = 0;
    for (int q = 0; q < P; q++) {
        sc[q] = (size_t)send[q] * C;
        sd[q] = so;
        so += sc[q];
        rc[q] = (size_t)recv[q] * C;
        rd[q] = ro;
        ro += rc[q];
    }
    zipcclCounters_t c0, c1;
    zipcclCommGetCounters(x->comm, zipcclCollAlltoAllv, &c0);
    if (x->sync) {
        const double ts = zrt_now();
        MPI_Barrier(*(MPI_Comm*)x->mpi_ep);
        x->sync_s += zrt_now() - ts;
        x->blocked_s += zrt_now() - ts;
    }
    const double t0 = zrt_now();
    zipcclResult_t r;
    if (x->dtype == zipcclBfloat16) {
        /* rounded to nearest even on the way out, widened exactly on the way in */
        for (size_t i = 0; i < so; i++) b->send16[i] = zrt_f32_to_bf16(sendbuf[i]);
        r = zipcclAlltoAllv(b->send16, sc, sd, b->recv16, rc, rd, zipcclBfloat16, x->comm,
                            &x->cfg[layer], NULL);
        for (size_t i = 0; r == zipcclSuccess && i < ro; i++) recvbuf[i] = zrt_bf16_to_f32(b->recv16[i]);
    } else {
        r = zipcclAlltoAllv(sendbuf, sc, sd, recvbuf, rc, rd, zipcclFloat32, x->comm,
                            &x->cfg[layer], NULL);
    }
    x->blocked_s += zrt_now() - t0;
    if (r == zipcclSuccess && zipcclCommGetCounters(x->comm, zipcclCollAlltoAllv, &c1) == 0) {
        uint64_t* b = x->bytes + ((size_t)layer * 4 + which) * 2;
        b[0] += c1.rawBytes - c0.rawBytes;
        b[1] += c1.wireBytes - c0.wireBytes;
    }
    return r;
}

/* rank-major (s, j) blocks <-> expert-major (j, s) blocks of rows. */
static void regroup(const Expert* x, const ExpertLayer* L, const float* from, float* to, int C,
                    int to_expert_major) {
    const int P = x->ep, El = x->E_local;
    size_t rm = 0; // offset of block (s, j) in rank-major order
    for (int s = 0; s < P; s++)
        for (int j = 0; j < El; j++) {
            size_t em = 0; // offset of block (j, s) in expert-major order
            for (int jj = 0; jj < j; jj++) em += (size_t)L->local[jj];
            for (int ss = 0; ss < s; ss++) em += (size_t)L->split[ss * El + j];
            const size_t n = (size_t)L->split[s * El + j] * C;
            if (to_expert_major) memcpy(to + em * C, from + rm * C, n * sizeof(float));
            else memcpy(to + rm * C, from + em * C, n * sizeof(float));
            rm += (size_t)L->split[s * El + j];
        }
}

int expert_dispatch(void* ctx, int layer, int phase, const float* rows, const int* counts, int C,
                    const float** recv, int* n_recv, const int** recv_counts, int* n_local,
                    int* first_expert) {
    Expert* x = ctx;
    if (layer < 0 || layer >= x->n_layers) return fail(layer, phase, "no such block", 0);
    ExpertLayer* L = &x->layer[layer];
    const int P = x->ep, El = x->E_local;
    int send[P], from[P];
    for (int q = 0; q < P; q++) {
        send[q] = 0;
        for (int j = 0; j < El; j++) send[q] += counts[q * El + j];
    }
    if (phase == 0) {
        const double t0 = zrt_now();
        int rc = MPI_Alltoall(counts, El, MPI_INT, L->split, El, MPI_INT, *(MPI_Comm*)x->mpi_ep);
        x->blocked_s += zrt_now() - t0;
        if (rc != MPI_SUCCESS) return fail(layer, phase, "the counts exchange failed", 0);
        memcpy(L->send, send, sizeof send);
        L->n_send = L->n_recv = 0;
        for (int q = 0; q < P; q++) L->n_send += send[q];
        for (int j = 0; j < El; j++) L->local[j] = 0;
        for (int s = 0; s < P; s++)
            for (int j = 0; j < El; j++) {
                const int c = L->split[s * El + j];
                if (c < 0) return fail(layer, phase, "a peer sent a negative count", 0);
                L->local[j] += c;
                L->n_recv += c;
            }
        for (int e = 0; e < x->E; e++) x->tokens[(size_t)layer * x->E + e] += counts[e];
        x->received[layer] += L->n_recv;
        L->C = C;
        L->valid = 1;
    } else {
        if (!L->valid) return fail(layer, phase, "backward dispatch before a forward one", 0);
        if (memcmp(send, L->send, sizeof send) || C != L->C)
            return fail(layer, phase, "the backward's rows per expert differ from the forward's",
                        0);
    }
    for (int s = 0; s < P; s++) {
        from[s] = 0;
        for (int j = 0; j < El; j++) from[s] += L->split[s * El + j];
    }
    const int most = L->n_recv > L->n_send ? L->n_recv : L->n_send;
    if (reserve(x->scratch, (size_t)most * C + 1))
        return fail(layer, phase, "out of memory for the received rows", 0);
    zipcclResult_t r = exchange(x, layer, 2 * phase, rows, send, x->scratch->ranked, from, C);
    if (r != zipcclSuccess) return fail(layer, phase, "AlltoAllv of the rows", r);
    regroup(x, L, x->scratch->ranked, x->scratch->grouped, C, 1);
    *recv = x->scratch->grouped;
    *n_recv = L->n_recv;
    *recv_counts = L->local;
    *n_local = El;
    *first_expert = x->first;
    return 0;
}

int expert_combine(void* ctx, int layer, int phase, const float* local, float* rows) {
    Expert* x = ctx;
    if (layer < 0 || layer >= x->n_layers || !x->layer[layer].valid)
        return fail(layer, phase, "combine without a dispatch", 0);
    ExpertLayer* L = &x->layer[layer];
    const int P = x->ep, El = x->E_local, C = L->C;
    int from[P];
    for (int s = 0; s < P; s++) {
        from[s] = 0;
        for (int j = 0; j < El; j++) from[s] += L->split[s * El + j];
    }
    // expert-major -> rank-major, then the reverse exchange: what came from
    // rank s goes back to it, into the rows its dispatch sent from
    regroup(x, L, local, x->scratch->ranked, C, 0);
    zipcclResult_t r = exchange(x, layer, 2 * phase + 1, x->scratch->ranked, from, rows, L->send, C);
    if (r != zipcclSuccess) return fail(layer, phase, "AlltoAllv back", r);
    return 0;
}
