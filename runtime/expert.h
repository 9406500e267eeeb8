/*
 * expert.h — expert parallelism: which rank owns which experts, and the
 * token dispatch / combine of MoE blocks over ZipCCL's AlltoAllv (expert.c).
 *
 * The world's N ranks form N / EP groups of EP consecutive ranks (EP divides
 * N and the expert count E). Inside a group, rank i owns experts
 * [i*E/EP, (i+1)*E/EP) of every MoE block; ranks with the same index in
 * different groups hold the same experts and shard them FSDP-style among
 * themselves (the expert-data-parallel group, N / EP ranks; fsdp.c).
 *
 * The model calls the hooks below (llama.h, LlamaParamHooks.dispatch and
 * .combine) with its rows grouped by global expert; Expert moves them to the
 * owners and back. EP = 1 needs none of this: the model computes every
 * expert locally when the hooks are NULL.
 *
 * The exchange of a block comes in chunks (the rows of every pair of ranks
 * cut into near-equal runs), each started and waited on its own; what is
 * in flight when is the scheduler's choice (scheduler.c).
 *
 * The rows live in the kernel table's memory: on a device the exchange's
 * communicator takes device buffers (fsdp_init gives it the device's table).
 * Left out: chunking at EP = 1 (nothing moves there).
 */
#ifndef RUNTIME_EXPERT_H
#define RUNTIME_EXPERT_H
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "zipccl.h"

typedef struct ExpertLayer ExpertLayer;
struct ExpertScratch;

typedef struct {
    int ep, ep_rank;          /* EP group size and this rank's index in it     */
    int E, E_local, first;    /* experts in all, per rank, this rank's first   */
    int n_layers;             /* model blocks (a table slot per block)          */
    void* mpi_ep;             /* MPI_Comm* of the EP group (counts exchange)    */
    zipcclComm_t comm;        /* the EP group's AlltoAllv of rows (own comm)    */
    zipcclCallConfig_t* cfg;  /* (n_layers) per-block call config (overrides)   */
    ExpertLayer* layer;       /* (n_layers) per-block exchange state            */
    struct ExpertScratch* scratch; /* buffers the blocks share (one in flight)   */
    const ZrtKernels* K;      /* the model's kernel table: the rows' memory (the
                               * row buffers, casts and regrouping go through it) */
    zipcclDataType_t dtype;   /* what the rows travel as: fp32 (exact), or bf16
                               * (rounded to nearest even, half the bytes)      */

    /* statistics since the last expert_reset_stats */
    double blocked_s;         /* compute thread waiting on the exchange, all of it */
    /* Measuring the exchange apart from the load imbalance: with ZRT_EP_SYNC=1
     * in the environment every exchange starts with a barrier of the EP group,
     * and sync_s counts the wait in it (a rank whose peers' experts had more
     * rows to compute waits there, not in the AlltoAllv). Off by default: it
     * costs a barrier per exchange and changes no result. */
    int sync;
    double sync_s;            /* part of blocked_s spent in those barriers      */
    long long* tokens;        /* (n_layers * E) pairs routed to each expert by
                               * this rank, forward only                         */
    long long* received;      /* (n_layers) rows this rank's experts computed    */
    /* (n_layers * 4 * 2): raw and wire bytes this rank sent per block and
     * exchange: [l][0] forward dispatch (activations), [l][1] forward combine
     * (expert outputs), [l][2] backward dispatch (gradients of the outputs),
     * [l][3] backward combine (gradients of the inputs). Kept over the run. */
    uint64_t* bytes;
    /* --trace on a device (set by the scheduler; NULL: off): each exchange's
     * device span, ZipCCL's timing events (zipcclWaitSpan) handed over at its
     * wait; dir 1 dispatch, 2 combine. */
    void (*on_span)(void* ctx, void* begin, void* end, int layer, int phase, int chunk, int dir);
    void* span_ctx;
} Expert;

/* Split MPI_COMM_WORLD into EP groups and make the exchange communicator.
 * Collective over MPI_COMM_WORLD. cfgs: (n_layers) call configs, copied;
 * dtype: zipcclFloat32 or zipcclBfloat16 (comm.alltoall_dtype). Returns 0,
 * or -1 with a message in err (EP not dividing N or E, another dtype). */
int expert_init(Expert* x, int ep, int n_experts, int n_layers, const zipcclCallConfig_t* cfgs,
                zipcclDataType_t dtype, const ZrtKernels* K, char* err, size_t errlen);
void expert_free(Expert* x);

/* One block's exchange in chunks (ctx = Expert*; scheduler.c drives them in
 * the order of LlamaParamHooks). dispatch_begin: the count exchange
 * (forward; the backward checks its counts and chunks against the
 * forward's), the cut into `chunks` chunks, *n_recv rows for this rank's
 * *n_local experts; `rows` (the model's) is read until the last chunk is
 * waited. dispatch_issue starts chunk c, dispatch_wait(c) waits for it and
 * returns its rows expert-major (valid until the next block's dispatch).
 * combine_issue(c) starts chunk c's outputs back into `rows`, combine_wait
 * waits for one, combine_end (every chunk waited) finishes them (bf16:
 * widens). A failure reports why on stderr and returns -1 (the step fails). */
int expert_dispatch_begin(Expert* x, int layer, int phase, const float* rows, const int* counts,
                          int C, int chunks, int* n_chunks, int* n_recv, int* n_local,
                          int* first_expert);
int expert_dispatch_issue(Expert* x, int layer, int phase, int chunk);
int expert_dispatch_wait(Expert* x, int layer, int phase, int chunk, const float** recv,
                         int* n_recv, const int** recv_counts);
int expert_combine_issue(Expert* x, int layer, int phase, int chunk, const float* local,
                         float* rows);
int expert_combine_wait(Expert* x, int layer, int phase, int chunk);
int expert_combine_end(Expert* x, int layer, int phase, float* rows);
/* Chunk `chunk` of block `layer` by source rank (EP, E_local): rows from
 * rank s for local expert j at [s * E_local + j], as dispatch_wait hands
 * them over (local expert j: its rows from rank 0, then rank 1, ...). NULL
 * before a dispatch of that chunk. */
const int* expert_chunk_sources(const Expert* x, int layer, int chunk);

/* The whole block at once, blocking (one chunk): dispatch returns every
 * received row, combine brings the outputs back into rows (n, C). */
int expert_dispatch(void* ctx, int layer, int phase, const float* rows, const int* counts, int C,
                    const float** recv, int* n_recv, const int** recv_counts, int* n_local,
                    int* first_expert);
int expert_combine(void* ctx, int layer, int phase, const float* local, float* rows);

void expert_reset_stats(Expert* x);

#endif
