/*
 * transport_mpi.c — ZipCCL's transport over Open MPI: the table of
 * transport.h on host buffers.  Messages are MPI_Isend / MPI_Irecv of bytes
 * on a duplicate of the caller's communicator (the data channel) and on a
 * second duplicate (the control channel: call descriptors, liveness
 * pings); request slots are MPI_Requests; the small collectives are
 * MPI_Iallreduce / MPI_Ibarrier, waited by the caller with its deadline;
 * native is Open MPI's own non-blocking collectives.
 *
 * Native numerics are MPI's: for bf16/fp16 sums MPI has no type, so we
 * register commutative user ops on MPI_UINT16_T that add two values in fp32
 * and round to the dtype at every combine (the pairwise rounding a user of
 * MPI would get); avg is the native sum divided by n afterwards, in fp32,
 * rounded once more.
 *
 * Every collective on the data channel (native, the switcher's agreements
 * and barriers) is started by the caller only after the call agreement
 * (coll_agree.c): ranks in different calls must never meet in different MPI
 * collectives, which Open MPI does not survive (a native AllGather whose
 * counts differ by one aborts the job from MPI_Testall, whatever the error
 * handler).
 *
 * Left out: MPI one-sided, persistent requests, counts above INT_MAX on the
 * native path (refused with zipcclUnsupported; raw/compressed handle them).
 */
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_state.h"
#include "zipccl_float.h"

typedef struct {
    MPI_Comm data, control;  /* our two duplicates                            */
    MPI_Status* stats;       /* testSome's statuses, grown as needed          */
    int statsCap;
    void* stage;             /* native in-place staging, grown as needed      */
    size_t stageCap;
    int* counts;             /* native AlltoAllv's int counts (4n)            */
} MpiState;

static MpiState* state(const struct zipcclComm* c) { return (MpiState*)c->tpState; }
static MPI_Comm chanComm(const struct zipcclComm* c, int chan) {
    return chan == zipcclChanControl ? state(c)->control : state(c)->data;
}
static MPI_Request* slot(void* reqs, int i) { return (MPI_Request*)reqs + i; }

static zipcclResult_t mpiError(int mpiErr, const char* what) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0, cls = 0;
    MPI_Error_class(mpiErr, &cls);
    MPI_Error_string(mpiErr, msg, &len);
    if (cls == MPI_ERR_TRUNCATE)
        return zipcclSetError(zipcclMismatch,
                              "%s: a peer sent more data than this rank expects (ranks disagree "
                              "on counts, dtype or the collective called): %s",
                              what, msg);
    return zipcclSetError(zipcclTransportError, "%s: MPI error: %s", what, msg);
}
#define MPI_TRY(call, what)                                   \
    do {                                                      \
        int mpi_try_err_ = (call);                            \
        if (mpi_try_err_ != MPI_SUCCESS) return mpiError(mpi_try_err_, what); \
    } while (0)

static void* stageFor(MpiState* s, size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (s->stageCap < bytes) {
        free(s->stage);
        s->stage = malloc(bytes);
        s->stageCap = s->stage ? bytes : 0;
    }
    return s->stage;
}

/* ---- lifetime ------------------------------------------------------------ */

/* Ranks per node for the hier designs (c->nodeSize).  A rank's node: with
 * ZIPCCL_NODE_SIZE=k (coll.c readEnv; c->nodeSize = k on entry) its
 * MPI_COMM_WORLD rank / k, the emulated nodes; else the launcher's
 * placement, MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) of this
 * communicator, named by the smallest MPI_COMM_WORLD rank on it.  The
 * designs need nodes that are blocks of k consecutive ranks of this
 * communicator, all of one size (node of r = r / k); any other placement,
 * such as a sub-communicator taking one rank of each node pair, counts
 * every rank as a node of its own (k = 1: hier then codes every hop,
 * correct but with nothing raw).  Every rank decides from the same
 * gathered list, so all agree. */
static zipcclResult_t mpiNodeSize(struct zipcclComm* c, MPI_Comm comm) {
    int world = 0, wsize = 1, node = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (c->nodeSize > 0) {
        if (wsize % c->nodeSize)
            return zipcclSetError(zipcclInvalidArgument, "ZIPCCL_NODE_SIZE=%d does not divide the %d ranks of "
                                  "MPI_COMM_WORLD", c->nodeSize, wsize);
        node = world / c->nodeSize;
    } else {
        MPI_Comm local = MPI_COMM_NULL;
        MPI_TRY(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local),
                "MPI_Comm_split_type");
        int err = MPI_Allreduce(&world, &node, 1, MPI_INT, MPI_MIN, local);
        MPI_Comm_free(&local);
        MPI_TRY(err, "MPI_Allreduce (node name)");
    }
    const int n = c->nranks;
    int* ids = malloc(sizeof(int) * (size_t)n);
    if (!ids) return zipcclSetError(zipcclSystemError, "zipcclCommInitMpi: out of memory");
    int err = MPI_Allgather(&node, 1, MPI_INT, ids, 1, MPI_INT, comm);
    if (err != MPI_SUCCESS) {
        free(ids);
        return mpiError(err, "MPI_Allgather (nodes)");
    }
    int k = 1;
    while (k < n && ids[k] == ids[0]) k++;
    int ok = n % k == 0;
    for (int r = 0; ok && r < n; r++) ok = ids[r] == ids[r - r % k];        /* blocks of one node each */
    for (int a = 0; ok && a < n; a += k)
        for (int b = a + k; ok && b < n; b += k) ok = ids[a] != ids[b];      /* of different nodes */
    free(ids);
    c->nodeSize = ok ? k : 1;
    return zipcclSuccess;
}

static zipcclResult_t mpiInit(struct zipcclComm* c, const void* handle) {
    int inited = 0, level = MPI_THREAD_SINGLE;
    MPI_Initialized(&inited);
    if (!inited) return zipcclSetError(zipcclInvalidArgument, "MPI is not initialised");
    MPI_Query_thread(&level);
    c->threaded = level >= MPI_THREAD_MULTIPLE;
    MpiState* s = calloc(1, sizeof *s);
    if (!s) return zipcclSetError(zipcclSystemError, "zipcclCommInitMpi: out of memory");
    s->data = s->control = MPI_COMM_NULL;
    c->tpState = s;
    MPI_TRY(MPI_Comm_dup(*(const MPI_Comm*)handle, &s->data), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(s->data, MPI_ERRORS_RETURN);
    MPI_Comm_rank(s->data, &c->rank);
    MPI_Comm_size(s->data, &c->nranks);
    /* The tag bound is the MPI library's, cached on MPI_COMM_WORLD only (a
     * communicator split from it may carry no MPI_TAG_UB attribute). */
    int* tagUb = NULL;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUb, &flag);
    if (!flag || *tagUb < (1 << 24) - 1)
        return zipcclSetError(zipcclUnsupported, "MPI_TAG_UB %d is below the 2^24 ZipCCL tags need",
                              flag ? *tagUb : -1);
    /* AlltoAllv's tags carry the sender's size bucket in bits 23..28
     * (coll_algos.c) where the bound allows; Open MPI's is 2^31-1. */
    c->tagSizes = *tagUb >= (1 << 29) - 1;
    MPI_TRY(MPI_Comm_dup(s->data, &s->control), "MPI_Comm_dup (control channel)");
    MPI_Comm_set_errhandler(s->control, MPI_ERRORS_RETURN);
    s->counts = malloc(sizeof(int) * 4 * (size_t)c->nranks);
    if (!s->counts) return zipcclSetError(zipcclSystemError, "zipcclCommInitMpi: out of memory");
    return mpiNodeSize(c, s->data);
}

/* The MPI communicators this communicator duplicated are not freed: a peer
 * may still have traffic for them that can never complete, a non-blocking
 * all-reduce or barrier of a call agreement this rank never joined, or
 * joined and abandoned at a timeout (Open MPI cannot cancel those), and sends
 * nobody will receive. Freed, their context ids go back to MPI, and the next
 * communicator over the same MPI communicator hung in its MPI_Comm_dup: at
 * 2, 3 and 5 ranks after a call one rank skipped or entered after the
 * others timed out, also when only the skipping rank (which saw no error)
 * freed its copies. Kept, that traffic stays on communicators nobody
 * reuses; the cost is two of MPI's context ids and a few hundred bytes per
 * communicator, for the life of the process (zipccl.h, zipcclCommDestroy). */
static void mpiDestroy(struct zipcclComm* c) {
    MpiState* s = state(c);
    if (!s) return;
    free(s->stats);
    if (!c->broken) free(s->stage); /* else an in-flight native send may read it */
    free(s->counts);
    free(s);
    c->tpState = NULL;
}

/* ---- messages -------------------------------------------------------------- */

static void mpiReqInit(void* reqs, int n) {
    for (int i = 0; i < n; i++) *slot(reqs, i) = MPI_REQUEST_NULL;
}
static int mpiReqActive(const void* reqs, int i) { return ((const MPI_Request*)reqs)[i] != MPI_REQUEST_NULL; }

static zipcclResult_t mpiIsend(struct zipcclComm* c, int chan, const void* buf, size_t bytes, int peer, int tag,
                               void* reqs, int i) {
    if (bytes > (size_t)INT_MAX) return zipcclSetError(zipcclUnsupported, "MPI: a %zu-byte message", bytes);
    MPI_TRY(MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, chanComm(c, chan), slot(reqs, i)), "MPI_Isend");
    return zipcclSuccess;
}

static zipcclResult_t mpiIrecv(struct zipcclComm* c, int chan, void* buf, size_t cap, int peer, int tag,
                               void* reqs, int i) {
    if (cap > (size_t)INT_MAX) return zipcclSetError(zipcclUnsupported, "MPI: a %zu-byte receive", cap);
    MPI_TRY(MPI_Irecv(buf, (int)cap, MPI_BYTE, peer, tag == ZIPCCL_ANY_TAG ? MPI_ANY_TAG : tag,
                      chanComm(c, chan), slot(reqs, i)), "MPI_Irecv");
    return zipcclSuccess;
}

/* A truncated message (a peer sent more than the receive holds) completes
 * its slot with st.truncated; any other error is the call's. */
static zipcclResult_t mpiTestSome(struct zipcclComm* c, void* reqs, int n, int* count, int* idx,
                                  zipcclTpStatus* st) {
    MpiState* s = state(c);
    if (s->statsCap < n) {
        MPI_Status* grown = realloc(s->stats, sizeof(MPI_Status) * (size_t)n);
        if (!grown) return zipcclSetError(zipcclSystemError, "MPI: out of memory for %d statuses", n);
        s->stats = grown, s->statsCap = n;
    }
    int out = 0;
    int err = MPI_Testsome(n, (MPI_Request*)reqs, &out, idx, s->stats);
    if (err != MPI_SUCCESS && err != MPI_ERR_IN_STATUS) return mpiError(err, "MPI_Testsome");
    if (out == MPI_UNDEFINED) {
        *count = -1;
        return zipcclSuccess;
    }
    for (int k = 0; k < out; k++) {
        const MPI_Status* m = &s->stats[k];
        int e = err == MPI_ERR_IN_STATUS ? m->MPI_ERROR : MPI_SUCCESS, cls = MPI_SUCCESS;
        if (e != MPI_SUCCESS) MPI_Error_class(e, &cls);
        if (e != MPI_SUCCESS && cls != MPI_ERR_TRUNCATE) return mpiError(e, "MPI_Testsome");
        int bytes = 0;
        if (e == MPI_SUCCESS) MPI_Get_count(m, MPI_BYTE, &bytes);
        st[k] = (zipcclTpStatus){m->MPI_SOURCE, m->MPI_TAG, (size_t)bytes, e != MPI_SUCCESS};
    }
    *count = out;
    return zipcclSuccess;
}

static zipcclResult_t mpiTestAll(struct zipcclComm* c, void* reqs, int n, int* done) {
    (void)c;
    MPI_TRY(MPI_Testall(n, (MPI_Request*)reqs, done, MPI_STATUSES_IGNORE), "MPI_Testall");
    return zipcclSuccess;
}

static zipcclResult_t mpiTest(struct zipcclComm* c, void* reqs, int i, int* done) {
    (void)c;
    *done = 1;
    if (*slot(reqs, i) == MPI_REQUEST_NULL) return zipcclSuccess;
    MPI_TRY(MPI_Test(slot(reqs, i), done, MPI_STATUS_IGNORE), "MPI_Test");
    return zipcclSuccess;
}

/* MPI_Cancel cannot withdraw a receive that a message has already matched:
 * Open MPI then finishes it only with the sender's help (a large message
 * from a stopped peer never does), so waiting for it after a timeout hung the
 * call until that peer resumed.  Wait at most kWithdrawS, then let MPI
 * finish it alone; its buffer may then still be written if that peer
 * resumes (zipccl.h says so after zipcclTimeout).  Sends cannot be
 * cancelled: their slots are freed and their buffers kept. */
static const double kWithdrawS = 1.0;
static void mpiAbandon(struct zipcclComm* c, void* reqs, int n, int nsend) {
    (void)c;
    MPI_Request* q = reqs;
    for (int i = 0; i < n; i++)
        if (q[i] != MPI_REQUEST_NULL) MPI_Cancel(&q[i]);
    int left = 0;
    const double t0 = zipcclNow();
    while (n && zipcclNow() - t0 < kWithdrawS) {
        int some[n];
        if (MPI_Testsome(n, q, &left, some, MPI_STATUSES_IGNORE) != MPI_SUCCESS || left == MPI_UNDEFINED) break;
        sched_yield();
    }
    for (int i = 0; i < n + nsend; i++)
        if (q[i] != MPI_REQUEST_NULL) MPI_Request_free(&q[i]);
}

static zipcclResult_t mpiPoll(struct zipcclComm* c, int chan, int tag, void* buf, size_t bytes, int* peer) {
    *peer = -1;
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    MPI_TRY(MPI_Improbe(MPI_ANY_SOURCE, tag, chanComm(c, chan), &flag, &msg, &st), "MPI_Improbe");
    if (!flag) return zipcclSuccess;
    MPI_TRY(MPI_Mrecv(buf, (int)bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE), "MPI_Mrecv");
    *peer = st.MPI_SOURCE;
    return zipcclSuccess;
}

/* Between polls that found nothing: yield the core while the wait (since
 * it began, or since the last arrival for our designs' receives) is younger
 * than yieldSeconds, then nap 50 us.  Open MPI's TCP transport and its
 * non-blocking collectives advance only inside MPI_Test*, so a nap stalls
 * the handshake or round that was due; waits yield for their first kYieldS,
 * and past that the peers are busy elsewhere (an application's uneven
 * compute, or a long transfer draining) and the core is better given away.
 * Yielding for 20 ms instead of 200 us (4 ranks, unthrottled emulated
 * cluster, 3 runs x 60 calls, medians): raw AllGather 1 MiB 2.57 -> 1.80 ms,
 * AllReduce 1 MiB 6.33 -> 5.16 ms, AlltoAll 4 MiB 7.99 -> 6.04 ms; at
 * 1 Gbit/s, 64 MiB compressed, and the `make run` training job, the same
 * within run-to-run noise (docs/BENCHMARKS.md).  kNapSoonS: the one wait
 * that naps early (native ReduceScatter, mpiNativeStart). */
static const double kYieldS = 20e-3, kNapSoonS = 200e-6;
static void mpiIdle(struct zipcclComm* c, double idleSeconds, double yieldSeconds) {
    (void)c;
    if (idleSeconds < (yieldSeconds < 0 ? kYieldS : yieldSeconds)) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

/* ---- small collectives -------------------------------------------------------- */

static MPI_Op mpiOpOf(zipcclTpOp op) { return op == zipcclTpMax ? MPI_MAX : op == zipcclTpMin ? MPI_MIN : MPI_SUM; }

static zipcclResult_t mpiIallreduce(struct zipcclComm* c, const double* in, double* out, int n, zipcclTpOp op,
                                    void* req) {
    MPI_TRY(MPI_Iallreduce(in == out ? MPI_IN_PLACE : in, out, n, MPI_DOUBLE, mpiOpOf(op), state(c)->data,
                           slot(req, 0)), "MPI_Iallreduce");
    return zipcclSuccess;
}

static zipcclResult_t mpiIbarrier(struct zipcclComm* c, void* req) {
    MPI_TRY(MPI_Ibarrier(state(c)->data, slot(req, 0)), "MPI_Ibarrier");
    return zipcclSuccess;
}

static zipcclResult_t mpiBarrier(struct zipcclComm* c) {
    MPI_TRY(MPI_Barrier(state(c)->data), "MPI_Barrier");
    return zipcclSuccess;
}

/* ---- bf16 / fp16 sums for the native path -------------------------------- */

static void sumBf16(void* in, void* inout, int* len, MPI_Datatype* dt) {
    (void)dt;
    const uint16_t* a = in;
    uint16_t* b = inout;
    for (int i = 0; i < *len; i++) b[i] = zipcclFloatToBf16(zipcclBf16ToFloat(a[i]) + zipcclBf16ToFloat(b[i]));
}
static void sumFp16(void* in, void* inout, int* len, MPI_Datatype* dt) {
    (void)dt;
    const float* t = zipcclFp16Table();
    const uint16_t* a = in;
    uint16_t* b = inout;
    for (int i = 0; i < *len; i++) b[i] = zipcclFloatToFp16(t[a[i]] + t[b[i]]);
}

static pthread_mutex_t opsMu = PTHREAD_MUTEX_INITIALIZER;
static MPI_Op opBf16 = MPI_OP_NULL, opFp16 = MPI_OP_NULL;

static zipcclResult_t sumOp(zipcclDataType_t dtype, MPI_Datatype* dt, MPI_Op* op) {
    if (dtype == zipcclFloat32) { *dt = MPI_FLOAT; *op = MPI_SUM; return zipcclSuccess; }
    pthread_mutex_lock(&opsMu);
    int err = MPI_SUCCESS;
    if (opBf16 == MPI_OP_NULL) err = MPI_Op_create(sumBf16, 1, &opBf16);
    if (err == MPI_SUCCESS && opFp16 == MPI_OP_NULL) err = MPI_Op_create(sumFp16, 1, &opFp16);
    pthread_mutex_unlock(&opsMu);
    if (err != MPI_SUCCESS) return mpiError(err, "MPI_Op_create");
    *dt = MPI_UINT16_T;
    *op = dtype == zipcclBfloat16 ? opBf16 : opFp16;
    return zipcclSuccess;
}

static void divideByN(void* buf, size_t count, zipcclDataType_t dtype, int n) {
    for (size_t i = 0; i < count; i++)
        zipcclFromFloat(buf, i, zipcclToFloat(buf, i, dtype) / (float)n, dtype);
}

static int fitsInt(size_t v) { return v <= (size_t)INT_MAX; }

/* Start the native collective into slot 0 of req; *yieldS is how long its
 * waiter should yield between polls before napping. */
static zipcclResult_t mpiNativeStart(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st, void* reqSlot,
                                     double* yieldS) {
    MpiState* S = state(c);
    MPI_Comm comm = S->data;
    const int n = c->nranks, r = c->rank;
    const size_t esz = zipcclTypeSize(op->dtype);
    const char* what = zipcclCollName(op->kind);
    MPI_Request* req = slot(reqSlot, 0);
    int err = MPI_SUCCESS;
    size_t nominal = 0; /* bytes this rank sends in a textbook algorithm */

    switch (op->kind) {
    case zipcclCollAllGather: {
        size_t bytes = op->count * esz;
        if (!fitsInt(bytes)) goto tooBig;
        const void* src = (op->sendbuf == (char*)op->recvbuf + r * bytes) ? MPI_IN_PLACE : op->sendbuf;
        err = MPI_Iallgather(src, (int)bytes, MPI_BYTE, op->recvbuf, (int)bytes, MPI_BYTE, comm, req);
        nominal = bytes * (size_t)(n - 1);
        break;
    }
    case zipcclCollReduceScatter: {
        if (!fitsInt(op->count)) goto tooBig;
        MPI_Datatype dt;
        MPI_Op mop;
        ZIPCCL_TRY(sumOp(op->dtype, &dt, &mop));
        const void* src = op->sendbuf;
        if ((const char*)op->sendbuf + r * op->count * esz == (char*)op->recvbuf && n > 1) {
            /* MPI's in-place convention differs from ours: stage the input. */
            void* tmp = stageFor(S, op->count * esz * n);
            if (!tmp) return zipcclSetError(zipcclSystemError, "%s: out of memory", what);
            memcpy(tmp, op->sendbuf, op->count * esz * n);
            src = tmp;
        }
        err = MPI_Ireduce_scatter_block(src, op->recvbuf, (int)op->count, dt, mop, comm, req);
        nominal = op->count * esz * (size_t)(n - 1);
        break;
    }
    case zipcclCollAllReduce: {
        if (!fitsInt(op->count)) goto tooBig;
        MPI_Datatype dt;
        MPI_Op mop;
        ZIPCCL_TRY(sumOp(op->dtype, &dt, &mop));
        const void* src = op->sendbuf == op->recvbuf ? MPI_IN_PLACE : op->sendbuf;
        err = MPI_Iallreduce(src, op->recvbuf, (int)op->count, dt, mop, comm, req);
        nominal = 2 * op->count * esz * (size_t)(n - 1) / (size_t)n;
        break;
    }
    case zipcclCollAlltoAll: {
        size_t bytes = op->count * esz;
        if (!fitsInt(bytes)) goto tooBig;
        const void* src = op->sendbuf;
        if (op->sendbuf == op->recvbuf) {
            void* tmp = stageFor(S, bytes * n);
            if (!tmp) return zipcclSetError(zipcclSystemError, "%s: out of memory", what);
            memcpy(tmp, op->sendbuf, bytes * n);
            src = tmp;
        }
        err = MPI_Ialltoall(src, (int)bytes, MPI_BYTE, op->recvbuf, (int)bytes, MPI_BYTE, comm, req);
        nominal = bytes * (size_t)(n - 1);
        break;
    }
    case zipcclCollAlltoAllv: {
        int* iv = S->counts;
        size_t sendExtent = 0;
        for (int i = 0; i < n; i++) {
            if (!fitsInt(op->sendcounts[i]) || !fitsInt(op->sdispls[i]) ||
                !fitsInt(op->recvcounts[i]) || !fitsInt(op->rdispls[i]))
                goto tooBig;
            iv[i] = (int)op->sendcounts[i];
            iv[n + i] = (int)op->sdispls[i];
            iv[2 * n + i] = (int)op->recvcounts[i];
            iv[3 * n + i] = (int)op->rdispls[i];
            if (op->sdispls[i] + op->sendcounts[i] > sendExtent)
                sendExtent = op->sdispls[i] + op->sendcounts[i];
            if (i != r) nominal += op->sendcounts[i] * esz;
        }
        const void* src = op->sendbuf;
        if (op->sendbuf == op->recvbuf && sendExtent) {
            void* tmp = stageFor(S, sendExtent * esz);
            if (!tmp) return zipcclSetError(zipcclSystemError, "%s: out of memory", what);
            memcpy(tmp, op->sendbuf, sendExtent * esz);
            src = tmp;
        }
        MPI_Datatype dt = esz == 4 ? MPI_FLOAT : MPI_UINT16_T;
        err = MPI_Ialltoallv(src, iv, iv + n, dt, op->recvbuf, iv + 2 * n, iv + 3 * n, dt, comm,
                             req);
        break;
    }
    default: return zipcclSetError(zipcclInternalError, "native: unknown collective");
    }
    if (err != MPI_SUCCESS) return mpiError(err, what);
    /* Native calls yield like every wait (mpiIdle): napping after 200 us,
     * as all waits did before, made native calls that crossed it bimodal
     * (16 KiB AlltoAll ~0.26 or ~0.52 ms from run to run).  Native medians,
     * 4 ranks unthrottled, 4 runs x 100 calls, napping -> yielding:
     * AllGather 64 KiB 0.54 -> 0.30 ms, AllReduce 4 KiB 0.94 -> 0.37 ms,
     * AlltoAll 16 KiB 0.53 -> 0.26 ms, AlltoAllv 1 MiB 2.26 -> 1.84 ms.
     * Except ReduceScatter, which still naps after 200 us: Open MPI's
     * MPI_Ireduce_scatter_block reduces the whole buffer to one rank (a
     * binomial tree), then scatters, and ranks that spin meanwhile take the
     * shared cores from the one reducing (1 MiB: 14.3 ms napping, 22.2 ms
     * yielding). */
    *yieldS = op->kind == zipcclCollReduceScatter ? kNapSoonS : kYieldS;
    st->rawBytes = st->wireBytes = nominal;
    return zipcclSuccess;
tooBig:
    return zipcclSetError(zipcclUnsupported,
                          "%s: native MPI path takes at most INT_MAX elements/bytes per count; "
                          "use strategy raw or compressed",
                          what);
}

/* After the native collective completed: avg is the sum divided by n. */
static zipcclResult_t mpiNativeFinish(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st) {
    (void)st;
    const size_t count = op->kind == zipcclCollReduceScatter || op->kind == zipcclCollAllReduce ? op->count : 0;
    if (op->op == zipcclAvg && count) divideByN(op->recvbuf, count, op->dtype, c->nranks);
    return zipcclSuccess;
}

/* ---- calibration ---------------------------------------------------------- */

/* Ranks 0 and n-1 (with ranks placed host by host, the pair most likely to
 * cross hosts) bounce a small and a 1 MiB message; the others return zeros
 * (the caller takes the maximum over the ranks, so every rank agrees).  ~a few ms on shared
 * memory, ~50 ms on a 1 Gbit/s link. */
static zipcclResult_t mpiPingPong(struct zipcclComm* c, double* alpha, double* beta) {
    double res[2] = {*alpha, *beta};
    const int last = c->nranks - 1;
    if (c->nranks >= 2 && (c->rank == 0 || c->rank == last)) {
        enum { kSmallReps = 20, kBigReps = 3 };
        const size_t big = 1 << 20;
        char* buf = stageFor(state(c), big);
        if (!buf) return zipcclSetError(zipcclSystemError, "calibration: out of memory");
        memset(buf, 0, big);
        int peer = c->rank == 0 ? last : 0, tag = 0x7FFF;
        double tSmall = 0, tBig = 0;
        for (int phase = 0; phase < 2; phase++) {
            size_t sz = phase ? big : 8;
            int reps = phase ? kBigReps : kSmallReps;
            double t0 = zipcclNow();
            for (int i = 0; i < reps; i++) {
                if (c->rank == 0) {
                    MPI_Send(buf, (int)sz, MPI_BYTE, peer, tag, state(c)->data);
                    MPI_Recv(buf, (int)sz, MPI_BYTE, peer, tag, state(c)->data, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(buf, (int)sz, MPI_BYTE, peer, tag, state(c)->data, MPI_STATUS_IGNORE);
                    MPI_Send(buf, (int)sz, MPI_BYTE, peer, tag, state(c)->data);
                }
            }
            double t = (zipcclNow() - t0) / (2.0 * reps);
            if (phase) tBig = t; else tSmall = t;
        }
        res[0] = tSmall;
        res[1] = tBig > tSmall ? (double)big / (tBig - tSmall) : 1e10;
    }
    *alpha = res[0];
    *beta = res[1];
    return zipcclSuccess;
}

const zipcclTransport zipcclTransportMpi = {
    .name = "mpi",
    .caps = zipcclTpHostControl | zipcclTpRing | zipcclTpOneShot,
    .device = 0,
    .reqSize = sizeof(MPI_Request),
    .init = mpiInit,
    .destroy = mpiDestroy,
    .reqInit = mpiReqInit,
    .reqActive = mpiReqActive,
    .isend = mpiIsend,
    .irecv = mpiIrecv,
    .testSome = mpiTestSome,
    .testAll = mpiTestAll,
    .test = mpiTest,
    .abandon = mpiAbandon,
    .poll = mpiPoll,
    .idle = mpiIdle,
    .iallreduce = mpiIallreduce,
    .ibarrier = mpiIbarrier,
    .barrier = mpiBarrier,
    .pingPong = mpiPingPong,
    .nativeStart = mpiNativeStart,
    .nativeFinish = mpiNativeFinish,
};
