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
 * Chunks (moe.overlap_chunks = nc): the rows each pair of ranks exchanges
 * are cut into nc near-equal runs, chunk c being rows [n*c/nc, n*(c+1)/nc)
 * of the pair's n, so sender and receiver derive the same cut from the one
 * count exchange (a run may straddle two experts; each chunk is regrouped
 * expert-major on its own). Each chunk is one AlltoAllv each way, started
 * and waited apart, so that the scheduler (scheduler.c) can keep chunk c+1 on
 * the wire while the experts compute chunk c and chunk c-1 travels back:
 *
 *   dispatch_begin: counts (forward) -> the cut; nothing moves yet
 *   dispatch_issue(c) ... dispatch_wait(c) -> chunk c expert-major
 *   combine_issue(c)  ... combine_wait(c); combine_end: all back in place
 *
 * With one chunk this is the blocking exchange above (expert_dispatch and
 * expert_combine do exactly that).
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
    int* local;       /* (E_local) rows per local expert                   */
    int n_send, n_recv;
    int C;            /* floats per row, from the dispatch */
    /* The chunks (forward's, kept for the backward): the rows between two
     * ranks cut into nc near-equal runs, chunk c of a pair being rows
     * [n*c/nc, n*(c+1)/nc) of the n the pair exchanges, so both ends know
     * every chunk from the one count exchange. */
    int nc, nc_cap;
    int* csend;       /* (nc * EP) rows to rank q in chunk c                 */
    int* csoff;       /* (nc * EP) where they start in the sender's rows     */
    int* crecv;       /* (nc * EP) rows from rank s in chunk c               */
    int* csplit;      /* (nc * EP * E_local) of those, rows for local expert j */
    int* clocal;      /* (nc * E_local) rows per local expert in chunk c      */
    int* coff;        /* (nc + 1) first row of chunk c in what this rank receives */
};

/* Buffers shared by all blocks: a block's rows are in flight only between
 * its dispatch and its combine. */
struct ExpertScratch {
    size_t cap;              /* floats */
    float *ranked, *grouped; /* (n_recv, C) received rank-major / handed over expert-major */
    float* back;             /* (n_recv, C) the experts' outputs rank-major, being sent back */
    uint16_t *dsend16, *drecv16, *csend16, *crecv16; /* (cap) bf16 copies of each direction */
    int nc_cap;
    size_t* sc;              /* (nc * 8 * EP) AlltoAllv counts and displacements, per chunk
                              * and direction (alive while its call is in flight) */
    zipcclRequest_t *dreq, *creq; /* (nc) the chunks' requests in flight */
    const float* rows;       /* the block's dispatched rows (the model's) */
    float* out;              /* where combine brings them back (the model's) */
    int layer, phase;        /* the block in flight */
    zipcclCounters_t mark;   /* counters when the block's exchange began */
};

int expert_init(Expert* x, int ep, int n_experts, int n_layers, const zipcclCallConfig_t* cfgs,
                zipcclDataType_t dtype, const ZrtKernels* K, char* err, size_t errlen) {
    memset(x, 0, sizeof *x);
    x->K = K;
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
    x->scratch->layer = -1;
    return 0;
}

void expert_free(Expert* x) {
    if (!x->layer) return;
    for (int l = 0; l < x->n_layers; l++) {
        free(x->layer[l].send);
        free(x->layer[l].split);
        free(x->layer[l].local);
        free(x->layer[l].csend);
    }
    free(x->layer);
    free(x->cfg);
    free(x->tokens);
    free(x->received);
    free(x->bytes);
    zipcclCommDestroy(x->comm);
    MPI_Comm_free((MPI_Comm*)x->mpi_ep);
    free(x->mpi_ep);
    if (x->scratch->ranked) zdev_free(x->K->dev, x->scratch->ranked);
    if (x->scratch->dsend16) zdev_free(x->K->dev, x->scratch->dsend16);
    free(x->scratch->sc);
    free(x->scratch->dreq);
    free(x->scratch);
    x->scratch = NULL;
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

/* The row buffers are the kernel table's memory (a device's, where the
 * model's rows are): the exchange's collectives take them as they are. */
static int reserve(const ZrtKernels* K, struct ExpertScratch* b, size_t floats) {
    if (floats <= b->cap) return 0;
    floats += floats / 8; /* by an eighth more: the router's maximum wanders */
    float* m = zdev_alloc(K->dev, 3 * floats * sizeof(float) + 1);
    uint16_t* h = zdev_alloc(K->dev, 4 * floats * sizeof(uint16_t) + 1);
    if (!m || !h) {
        if (m) zdev_free(K->dev, m);
        if (h) zdev_free(K->dev, h);
        return -1;
    }
    if (b->ranked) zdev_free(K->dev, b->ranked);
    if (b->dsend16) zdev_free(K->dev, b->dsend16);
    b->ranked = m;
    b->grouped = m + floats;
    b->back = m + 2 * floats;
    b->dsend16 = h;
    b->drecv16 = h + floats;
    b->csend16 = h + 2 * floats;
    b->crecv16 = h + 3 * floats;
    b->cap = floats;
    return 0;
}

static int reserve_chunks(Expert* x, ExpertLayer* L, int nc) {
    const size_t P = (size_t)x->ep, El = (size_t)x->E_local;
    if (nc > L->nc_cap) {
        int* m = malloc(((size_t)nc * (3 * P + P * El + El) + (size_t)nc + 1) * sizeof(int));
        if (!m) return -1;
        free(L->csend);
        L->csend = m;
        L->csoff = m + nc * P;
        L->crecv = L->csoff + nc * P;
        L->csplit = L->crecv + nc * P;
        L->clocal = L->csplit + nc * P * El;
        L->coff = L->clocal + nc * El;
        L->nc_cap = nc;
    }
    struct ExpertScratch* b = x->scratch;
    if (nc > b->nc_cap) {
        size_t* sc = malloc((size_t)nc * 8 * P * sizeof(size_t));
        zipcclRequest_t* r = calloc(2 * (size_t)nc, sizeof *r);
        if (!sc || !r) {
            free(sc);
            free(r);
            return -1;
        }
        free(b->sc);
        free(b->dreq);
        b->sc = sc;
        b->dreq = r;
        b->creq = r + nc;
        b->nc_cap = nc;
    }
    return 0;
}

/* Cut every pair's rows into L->nc runs (the layout both ends derive from
 * the counts alone: L->send and L->split). */
static void cut_chunks(const Expert* x, ExpertLayer* L) {
    const int P = x->ep, El = x->E_local, nc = L->nc;
    int off = 0;
    for (int q = 0; q < P; q++) {
        const long long n = L->send[q];
        for (int c = 0; c < nc; c++) {
            const int lo = (int)(n * c / nc), hi = (int)(n * (c + 1) / nc);
            L->csend[c * P + q] = hi - lo;
            L->csoff[c * P + q] = off + lo;
        }
        off += (int)n;
    }
    for (int c = 0; c <= nc; c++) L->coff[c] = 0;
    for (int c = 0; c < nc; c++) {
        int total = 0;
        for (int j = 0; j < El; j++) L->clocal[c * El + j] = 0;
        for (int s = 0; s < P; s++) {
            long long n = 0;
            for (int j = 0; j < El; j++) n += L->split[s * El + j];
            const long long lo = n * c / nc, hi = n * (c + 1) / nc;
            L->crecv[c * P + s] = (int)(hi - lo);
            total += (int)(hi - lo);
            // the sender's rows for this rank run expert by expert: local
            // expert j holds [e0, e0 + split) of them; the chunk takes the
            // part of that inside [lo, hi)
            long long e0 = 0;
            for (int j = 0; j < El; j++) {
                const long long e1 = e0 + L->split[s * El + j];
                const long long a = e0 > lo ? e0 : lo, z = e1 < hi ? e1 : hi;
                const int r = z > a ? (int)(z - a) : 0;
                L->csplit[((size_t)c * P + s) * El + j] = r;
                L->clocal[c * El + j] += r;
                e0 = e1;
            }
        }
        L->coff[c + 1] = L->coff[c] + total;
    }
}

/* Starts one AlltoAllv of rows of C floats: send[q] rows to rank q from
 * row soff[q] of sendbuf, recv[s] rows from rank s into row roff[s] of
 * recvbuf (both per rank). sc: 4 * EP size_t that stay alive until the
 * call completes. bf16: the buffers are uint16_t. */
static zipcclResult_t exchange_start(Expert* x, int layer, const void* sendbuf, const int* send,
                                     const int* soff, void* recvbuf, const int* recv,
                                     const int* roff, int C, size_t* sc, zipcclRequest_t* req) {
    const int P = x->ep;
    size_t *sd = sc + P, *rc = sd + P, *rd = rc + P;
    for (int q = 0; q < P; q++) {
        sc[q] = (size_t)send[q] * C;
        sd[q] = (size_t)soff[q] * C;
        rc[q] = (size_t)recv[q] * C;
        rd[q] = (size_t)roff[q] * C;
    }
    return zipcclAlltoAllvAsync(sendbuf, sc, sd, recvbuf, rc, rd, x->dtype, x->comm,
                                &x->cfg[layer], NULL, req);
}

static zipcclResult_t wait_timed(Expert* x, zipcclRequest_t* req, int layer, int phase, int chunk, int dir) {
    if (!*req) return zipcclSuccess;
    const double t0 = zrt_now();
    zipcclResult_t r;
    if (x->on_span) {
        void *a = NULL, *b = NULL;
        r = zipcclWaitSpan(*req, &a, &b);
        if (a) x->on_span(x->span_ctx, a, b, layer, phase, chunk, dir); /* both or neither */
    } else {
        r = zipcclWait(*req);
    }
    *req = NULL;
    x->blocked_s += zrt_now() - t0;
    return r;
}

/* What the exchanges of the block in flight moved since the mark, filed as
 * `which` (0..3: dispatch / combine, forward / backward); the mark moves on. */
static void count_bytes(Expert* x, int which) {
    struct ExpertScratch* b = x->scratch;
    zipcclCounters_t c;
    if (zipcclCommGetCounters(x->comm, zipcclCollAlltoAllv, &c) != 0) return;
    uint64_t* by = x->bytes + ((size_t)b->layer * 4 + which) * 2;
    by[0] += c.rawBytes - b->mark.rawBytes;
    by[1] += c.wireBytes - b->mark.wireBytes;
    b->mark = c;
}

/* rank-major (s, j) blocks <-> expert-major (j, s) blocks of rows, for the
 * split sizes split (EP * E_local) with per-expert totals local (E_local):
 * block copies through the kernel table (device-to-device on a device). */
static void regroup(const Expert* x, const int* split, const int* local, const float* from,
                    float* to, int C, int to_expert_major) {
    const int P = x->ep, El = x->E_local;
    size_t rm = 0; // offset of block (s, j) in rank-major order
    for (int s = 0; s < P; s++)
        for (int j = 0; j < El; j++) {
            size_t em = 0; // offset of block (j, s) in expert-major order
            for (int jj = 0; jj < j; jj++) em += (size_t)local[jj];
            for (int ss = 0; ss < s; ss++) em += (size_t)split[ss * El + j];
            const size_t n = (size_t)split[s * El + j] * C;
            if (n && to_expert_major) zdevCheck(zdev_copy_async(x->K->dev, to + em * C, from + rm * C, n * sizeof(float), ZDEV_DEVICE_TO_DEVICE, NULL));
            else if (n) zdevCheck(zdev_copy_async(x->K->dev, to + rm * C, from + em * C, n * sizeof(float), ZDEV_DEVICE_TO_DEVICE, NULL));
            rm += (size_t)split[s * El + j];
        }
}

/* ZRT_EP_SYNC=1: wait for the EP group before an exchange, so that the time
 * a rank spends for its peers' experts is counted apart (sync_s). */
static void ep_barrier(Expert* x) {
    const double ts = zrt_now();
    MPI_Barrier(*(MPI_Comm*)x->mpi_ep);
    const double dt = zrt_now() - ts;
    x->sync_s += dt;
    x->blocked_s += dt;
}

static ExpertLayer* in_flight(Expert* x, int layer, int phase, int chunk, const char* what) {
    if (layer < 0 || layer >= x->n_layers || !x->layer[layer].valid ||
        x->scratch->layer != layer || x->scratch->phase != phase) {
        fail(layer, phase, what, 0);
        return NULL;
    }
    ExpertLayer* L = &x->layer[layer];
    if (chunk < 0 || chunk >= L->nc) {
        fprintf(stderr, "expert: block %d %s: %s: no chunk %d of %d\n", layer,
                phase ? "backward" : "forward", what, chunk, L->nc);
        return NULL;
    }
    return L;
}

int expert_dispatch_begin(Expert* x, int layer, int phase, const float* rows, const int* counts,
                          int C, int chunks, int* n_chunks, int* n_recv, int* n_local,
                          int* first_expert) {
    if (layer < 0 || layer >= x->n_layers) return fail(layer, phase, "no such block", 0);
    if (chunks < 1) return fail(layer, phase, "fewer than one chunk asked for", 0);
    ExpertLayer* L = &x->layer[layer];
    const int P = x->ep, El = x->E_local;
    struct ExpertScratch* b = x->scratch;
    int send[P];
    for (int q = 0; q < P; q++) {
        send[q] = 0;
        for (int j = 0; j < El; j++) send[q] += counts[q * El + j];
    }
    if (x->sync) ep_barrier(x);
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
        if (reserve_chunks(x, L, chunks))
            return fail(layer, phase, "out of memory for the chunk layout", 0);
        L->nc = chunks;
        cut_chunks(x, L);
        L->valid = 1;
    } else {
        if (!L->valid) return fail(layer, phase, "backward dispatch before a forward one", 0);
        if (memcmp(send, L->send, sizeof send) || C != L->C)
            return fail(layer, phase, "the backward's rows per expert differ from the forward's",
                        0);
        if (chunks != L->nc)
            return fail(layer, phase, "the backward asks for other chunks than the forward", 0);
    }
    const int most = L->n_recv > L->n_send ? L->n_recv : L->n_send;
    if (reserve(x->K, b, (size_t)most * C + 1))
        return fail(layer, phase, "out of memory for the received rows", 0);
    b->layer = layer;
    b->phase = phase;
    b->rows = rows;
    b->out = NULL;
    zipcclCommGetCounters(x->comm, zipcclCollAlltoAllv, &b->mark);
    if (x->dtype == zipcclBfloat16) {
        /* rounded to nearest even on the way out, widened exactly on the way in */
        const size_t n = (size_t)L->n_send * C;
        x->K->round_to_bf16(b->dsend16, rows, n);
    }
    *n_chunks = L->nc;
    *n_recv = L->n_recv;
    *n_local = El;
    *first_expert = x->first;
    return 0;
}

int expert_dispatch_issue(Expert* x, int layer, int phase, int chunk) {
    ExpertLayer* L = in_flight(x, layer, phase, chunk, "dispatch of a chunk");
    if (!L) return -1;
    struct ExpertScratch* b = x->scratch;
    const int P = x->ep;
    int roff[P];
    for (int s = 0, o = L->coff[chunk]; s < P; o += L->crecv[chunk * P + s], s++) roff[s] = o;
    const int bf = x->dtype == zipcclBfloat16;
    zipcclResult_t r = exchange_start(
        x, layer, bf ? (const void*)b->dsend16 : (const void*)b->rows, L->csend + chunk * P,
        L->csoff + chunk * P, bf ? (void*)b->drecv16 : (void*)b->ranked, L->crecv + chunk * P,
        roff, L->C, b->sc + (size_t)chunk * 8 * P, &b->dreq[chunk]);
    if (r != zipcclSuccess) return fail(layer, phase, "AlltoAllv of the rows", r);
    return 0;
}

int expert_dispatch_wait(Expert* x, int layer, int phase, int chunk, const float** recv,
                         int* n_recv, const int** recv_counts) {
    ExpertLayer* L = in_flight(x, layer, phase, chunk, "wait for a chunk");
    if (!L) return -1;
    struct ExpertScratch* b = x->scratch;
    const int P = x->ep, El = x->E_local, C = L->C;
    if (!b->dreq[chunk]) return fail(layer, phase, "wait for a chunk never dispatched", 0);
    zipcclResult_t r = wait_timed(x, &b->dreq[chunk], layer, phase, chunk, 1);
    if (r != zipcclSuccess) return fail(layer, phase, "AlltoAllv of the rows", r);
    const size_t o = (size_t)L->coff[chunk] * C, n = (size_t)(L->coff[chunk + 1] - L->coff[chunk]);
    if (x->dtype == zipcclBfloat16)
        x->K->bf16_to_float(b->ranked + o, b->drecv16 + o, n * C);
    regroup(x, L->csplit + (size_t)chunk * P * El, L->clocal + (size_t)chunk * El, b->ranked + o,
            b->grouped + o, C, 1);
    if (chunk == L->nc - 1) count_bytes(x, 2 * phase);
    *recv = b->grouped + o;
    *n_recv = (int)n;
    *recv_counts = L->clocal + (size_t)chunk * El;
    return 0;
}

int expert_combine_issue(Expert* x, int layer, int phase, int chunk, const float* local,
                         float* rows) {
    ExpertLayer* L = in_flight(x, layer, phase, chunk, "combine of a chunk");
    if (!L) return -1;
    struct ExpertScratch* b = x->scratch;
    const int P = x->ep, El = x->E_local, C = L->C;
    if (b->out && b->out != rows) return fail(layer, phase, "combine into two buffers", 0);
    if (x->sync) ep_barrier(x); /* the peers' experts may still be computing */
    b->out = rows;
    // expert-major -> rank-major, then the reverse exchange: what came from
    // rank s goes back to it, into the rows its dispatch sent from
    const size_t o = (size_t)L->coff[chunk] * C, n = (size_t)(L->coff[chunk + 1] - L->coff[chunk]);
    regroup(x, L->csplit + (size_t)chunk * P * El, L->clocal + (size_t)chunk * El, local,
            b->back + o, C, 0);
    const int bf = x->dtype == zipcclBfloat16;
    if (bf) x->K->round_to_bf16(b->csend16 + o, b->back + o, n * C);
    int soff[P];
    for (int s = 0, so = L->coff[chunk]; s < P; so += L->crecv[chunk * P + s], s++) soff[s] = so;
    zipcclResult_t r = exchange_start(
        x, layer, bf ? (const void*)b->csend16 : (const void*)b->back, L->crecv + chunk * P, soff,
        bf ? (void*)b->crecv16 : (void*)rows, L->csend + chunk * P, L->csoff + chunk * P, C,
        b->sc + ((size_t)chunk * 8 + 4) * P, &b->creq[chunk]);
    if (r != zipcclSuccess) return fail(layer, phase, "AlltoAllv back", r);
    return 0;
}

int expert_combine_wait(Expert* x, int layer, int phase, int chunk) {
    ExpertLayer* L = in_flight(x, layer, phase, chunk, "wait for a chunk back");
    if (!L) return -1;
    zipcclResult_t r = wait_timed(x, &x->scratch->creq[chunk], layer, phase, chunk, 2);
    if (r != zipcclSuccess) return fail(layer, phase, "AlltoAllv back", r);
    return 0;
}

int expert_combine_end(Expert* x, int layer, int phase, float* rows) {
    ExpertLayer* L = in_flight(x, layer, phase, 0, "combine without a dispatch");
    if (!L) return -1;
    struct ExpertScratch* b = x->scratch;
    for (int c = 0; c < L->nc; c++)
        if (b->dreq[c] || b->creq[c]) return fail(layer, phase, "combine with chunks in flight", 0);
    if (b->out && b->out != rows) return fail(layer, phase, "combine into two buffers", 0);
    if (x->dtype == zipcclBfloat16) {
        const size_t n = (size_t)L->n_send * L->C;
        x->K->bf16_to_float(rows, b->crecv16, n);
    }
    count_bytes(x, 2 * phase + 1);
    b->layer = -1;
    return 0;
}

const int* expert_chunk_sources(const Expert* x, int layer, int chunk) {
    if (layer < 0 || layer >= x->n_layers || !x->layer[layer].valid || chunk < 0 ||
        chunk >= x->layer[layer].nc)
        return NULL;
    const ExpertLayer* L = &x->layer[layer];
    return L->csplit + (size_t)chunk * x->ep * x->E_local;
}

/* ---- the whole block at once (one chunk, blocking) ----------------------- */

int expert_dispatch(void* ctx, int layer, int phase, const float* rows, const int* counts, int C,
                    const float** recv, int* n_recv, const int** recv_counts, int* n_local,
                    int* first_expert) {
    Expert* x = ctx;
    int nc, nr;
    if (expert_dispatch_begin(x, layer, phase, rows, counts, C, 1, &nc, &nr, n_local,
                              first_expert) ||
        expert_dispatch_issue(x, layer, phase, 0))
        return -1;
    return expert_dispatch_wait(x, layer, phase, 0, recv, n_recv, recv_counts);
}

int expert_combine(void* ctx, int layer, int phase, const float* local, float* rows) {
    Expert* x = ctx;
    if (layer < 0 || layer >= x->n_layers || !x->layer[layer].valid || x->layer[layer].nc != 1)
        return fail(layer, phase, "combine without a dispatch", 0);
    if (expert_combine_issue(x, layer, phase, 0, local, rows) ||
        expert_combine_wait(x, layer, phase, 0))
        return -1;
    return expert_combine_end(x, layer, phase, rows);
}
