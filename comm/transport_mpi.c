/*
 * transport_mpi.c — the MPI side of ZipCCL: waiting on point-to-point
 * requests with a deadline (so no collective can hang), turning MPI errors
 * into zipcclResult_t, the native strategy (Open MPI's own non-blocking
 * collectives), and the ping-pong the switcher calibrates with.
 *
 * Native numerics are MPI's: for bf16/fp16 sums MPI has no type, so we
 * register commutative user ops on MPI_UINT16_T that add two values in fp32
 * and round to the dtype at every combine (the pairwise rounding a user of
 * MPI would get); avg is the native sum divided by n afterwards, in fp32,
 * rounded once more.  Our own algorithms live in coll_algos.c.
 *
 * Every collective of ours on the communicator's MPI_Comm (native, the
 * switcher's agreements, barriers and ping-pong) first waits for the call
 * agreement (coll_agree.c): ranks that are in different calls, or disagree
 * on this one, then learn it there and never meet in different MPI
 * collectives (which Open MPI does not survive: a native AllGather whose
 * counts differ by one aborts the job from MPI_Testall, whatever the
 * communicator's error handler).
 *
 * Left out: MPI one-sided, persistent requests, counts above INT_MAX on the
 * native path (refused with zipcclUnsupported; raw/compressed handle them).
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "coll_internal.h"

zipcclResult_t zipcclMpiCheckThreads(int* multiple) {
    int inited = 0, level = MPI_THREAD_SINGLE;
    MPI_Initialized(&inited);
    if (!inited) return zipcclSetError(zipcclInvalidArgument, "MPI is not initialised");
    MPI_Query_thread(&level);
    *multiple = (level >= MPI_THREAD_MULTIPLE);
    return zipcclSuccess;
}

zipcclResult_t zipcclMpiError(int mpiErr, const char* what) {
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
 * within run-to-run noise (docs/bench/wait_yield_ab.jsonl,
 * docs/BENCHMARKS.md).  kNapSoonS: the one wait that naps early (native
 * ReduceScatter, zipcclRunMpiNative). */
static const double kYieldS = 20e-3, kNapSoonS = 200e-6;
static void idleFor(struct zipcclComm* c, double idleSeconds, double yieldSeconds) {
    zipcclAnswerPings(c); /* rate-limited: a look every 10 ms at most */
    if (idleSeconds < yieldSeconds) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}
void zipcclIdle(struct zipcclComm* c, double idleSeconds) { idleFor(c, idleSeconds, kYieldS); }

/* Wait for reqs with the communicator's timeout, yielding the core for
 * the first yieldSeconds between polls (idleFor).  These are MPI's own
 * collectives, which do not say whom they wait for: a warning (if a peer
 * died, Open MPI ends the job right after, and it says where) asks the
 * peers whether they are inside ZipCCL and names those that do not answer. */
static zipcclResult_t waitReqs(struct zipcclComm* c, int n, MPI_Request* reqs, const char* what,
                               double* waitSeconds, double yieldSeconds) {
    double t0 = zipcclNow(), note = zipcclFirstNote(c);
    for (;;) {
        int flag = 0;
        int err = MPI_Testall(n, reqs, &flag, MPI_STATUSES_IGNORE);
        if (err != MPI_SUCCESS) return zipcclMpiError(err, what);
        if (flag) break;
        double waited = zipcclNow() - t0;
        if (c->timeoutS > 0 && waited > c->timeoutS)
            return zipcclSetError(zipcclTimeout,
                                  "%s on rank %d: timed out after %.1f s (ZIPCCL_TIMEOUT_S) inside MPI's own "
                                  "collective (which does not say for whom; the warnings name the ranks "
                                  "that did not answer)",
                                  what, c->rank, waited);
        if (waited > note) {
            char query[300];
            zipcclQueryPeers(c, query, sizeof query);
            fprintf(stderr, "zipccl: rank %d: %s still waiting after %.1f s (timeout %g s) inside MPI's own "
                    "collective, which does not say for whom; %s\n",
                    c->rank, what, waited, c->timeoutS, query);
            note *= 2;
        }
        idleFor(c, waited, yieldSeconds);
    }
    if (waitSeconds) *waitSeconds += zipcclNow() - t0;
    return zipcclSuccess;
}

/* MPI_Cancel cannot withdraw a receive that a message has already matched:
 * Open MPI then finishes it only with the sender's help (a large message
 * from a stopped peer never does), so waiting for it after a timeout hung the
 * call until that peer resumed.  Wait at most kWithdrawS, then let MPI
 * finish it alone; its buffer may then still be written if that peer
 * resumes (zipccl.h says so after zipcclTimeout). */
static const double kWithdrawS = 1.0;
void zipcclMpiWithdrawRecv(MPI_Request* req) {
    if (*req == MPI_REQUEST_NULL) return;
    MPI_Cancel(req);
    const double t0 = zipcclNow();
    int done = 0;
    while (!done && zipcclNow() - t0 < kWithdrawS) {
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (!done) sched_yield();
    }
    if (!done) MPI_Request_free(req);
}

zipcclResult_t zipcclMpiWaitAll(struct zipcclComm* c, int n, MPI_Request* reqs, const char* what,
                                double* waitSeconds) {
    return waitReqs(c, n, reqs, what, waitSeconds, kYieldS);
}

zipcclResult_t zipcclMpiAllreduceTimed(struct zipcclComm* c, const void* in, void* out, int n,
                                      MPI_Datatype dt, MPI_Op op, const char* what) {
    ZIPCCL_TRY(zipcclAgreeWait(c));
    MPI_Request req;
    int err = MPI_Iallreduce(in, out, n, dt, op, c->mpi, &req);
    if (err != MPI_SUCCESS) return zipcclMpiError(err, what);
    return zipcclMpiWaitAll(c, 1, &req, what, NULL);
}

/* The barrier that starts each of the switcher's measuring calls, so that
 * its time is measured as zipccl-bench (like nccl-tests) times calls: from
 * MPI_Barrier.  How the ranks leave the barrier moves what is measured.
 * AlltoAll(v) 4-64 KiB, 4 ranks, unthrottled emulated cluster, medians over
 * 20 runs per point (docs/bench/auto_barrier_variants.jsonl):
 *   barrier before a measuring call   auto measured raw/native  auto settled on
 *   MPI_Ibarrier, waited yielding     0.99-1.06x                native 78 of 120
 *   MPI_Barrier                       0.85-0.93x                raw 96 of 120
 * while the benchmark's own calls had raw at 0.84-0.94x native's time.  An
 * Ibarrier waited by busy polling, or a dissemination barrier of our own,
 * measured like the Ibarrier (6 runs each); the Ibarrier followed by
 * MPI_Barrier, below, like MPI_Barrier (0.85-0.95x, raw 57 of 72; 12 runs).
 * MPI_Barrier cannot time out, so an MPI_Ibarrier waited with the
 * communicator's timeout comes first: once it completes on a rank, every
 * rank has entered this function and goes on into the MPI_Barrier, which
 * then waits for no rank that is elsewhere.  (A peer that dies in between
 * ends the job, as in any MPI call; one whose own Ibarrier wait times out at
 * that very moment breaks its communicator and returns the error to the
 * application.) */
zipcclResult_t zipcclMpiBarrierTimed(struct zipcclComm* c, const char* what) {
    ZIPCCL_TRY(zipcclAgreeWait(c));
    MPI_Request req;
    int err = MPI_Ibarrier(c->mpi, &req);
    if (err != MPI_SUCCESS) return zipcclMpiError(err, what);
    ZIPCCL_TRY(zipcclMpiWaitAll(c, 1, &req, what, NULL));
    err = MPI_Barrier(c->mpi);
    return err == MPI_SUCCESS ? zipcclSuccess : zipcclMpiError(err, what);
}

/* ---- bf16 / fp16 sums for the native path -------------------------------- */

static void sumBf16(void* in, void* inout, int* len, MPI_Datatype* dt) {
    (void)dt;
    for (int i = 0; i < *len; i++)
        zipcclFromFloat(inout, i,
                        zipcclToFloat(in, i, zipcclBfloat16) + zipcclToFloat(inout, i, zipcclBfloat16),
                        zipcclBfloat16);
}
static void sumFp16(void* in, void* inout, int* len, MPI_Datatype* dt) {
    (void)dt;
    const float* t = zipcclFp16Table();
    const uint16_t *a = in, *b = inout;
    for (int i = 0; i < *len; i++) zipcclFromFloat(inout, i, t[a[i]] + t[b[i]], zipcclFloat16);
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
    if (err != MPI_SUCCESS) return zipcclMpiError(err, "MPI_Op_create");
    *dt = MPI_UINT16_T;
    *op = dtype == zipcclBfloat16 ? opBf16 : opFp16;
    return zipcclSuccess;
}

static void divideByN(void* buf, size_t count, zipcclDataType_t dtype, int n) {
    for (size_t i = 0; i < count; i++)
        zipcclFromFloat(buf, i, zipcclToFloat(buf, i, dtype) / (float)n, dtype);
}

static int fitsInt(size_t v) { return v <= (size_t)INT_MAX; }

zipcclResult_t zipcclRunMpiNative(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st) {
    const int n = c->nranks, r = c->rank;
    const size_t esz = zipcclTypeSize(op->dtype);
    const char* what = zipcclCollName(op->kind);
    MPI_Request req = MPI_REQUEST_NULL;
    int err = MPI_SUCCESS;
    size_t nominal = 0; /* bytes this rank sends in a textbook algorithm */
    size_t reduceCount = 0;
    ZIPCCL_TRY(zipcclAgreeWait(c)); /* MPI's collectives cannot survive ranks that disagree */

    switch (op->kind) {
    case zipcclCollAllGather: {
        size_t bytes = op->count * esz;
        if (!fitsInt(bytes)) goto tooBig;
        const void* src = (op->sendbuf == (char*)op->recvbuf + r * bytes) ? MPI_IN_PLACE : op->sendbuf;
        err = MPI_Iallgather(src, (int)bytes, MPI_BYTE, op->recvbuf, (int)bytes, MPI_BYTE, c->mpi, &req);
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
            void* tmp = zipcclScratch(c, 0, op->count * esz * n);
            if (!tmp) return zipcclSetError(zipcclSystemError, "%s: out of memory", what);
            memcpy(tmp, op->sendbuf, op->count * esz * n);
            src = tmp;
        }
        err = MPI_Ireduce_scatter_block(src, op->recvbuf, (int)op->count, dt, mop, c->mpi, &req);
        nominal = op->count * esz * (size_t)(n - 1);
        reduceCount = op->count;
        break;
    }
    case zipcclCollAllReduce: {
        if (!fitsInt(op->count)) goto tooBig;
        MPI_Datatype dt;
        MPI_Op mop;
        ZIPCCL_TRY(sumOp(op->dtype, &dt, &mop));
        const void* src = op->sendbuf == op->recvbuf ? MPI_IN_PLACE : op->sendbuf;
        err = MPI_Iallreduce(src, op->recvbuf, (int)op->count, dt, mop, c->mpi, &req);
        nominal = 2 * op->count * esz * (size_t)(n - 1) / (size_t)n;
        reduceCount = op->count;
        break;
    }
    case zipcclCollAlltoAll: {
        size_t bytes = op->count * esz;
        if (!fitsInt(bytes)) goto tooBig;
        const void* src = op->sendbuf;
        if (op->sendbuf == op->recvbuf) {
            void* tmp = zipcclScratch(c, 0, bytes * n);
            if (!tmp) return zipcclSetError(zipcclSystemError, "%s: out of memory", what);
            memcpy(tmp, op->sendbuf, bytes * n);
            src = tmp;
        }
        err = MPI_Ialltoall(src, (int)bytes, MPI_BYTE, op->recvbuf, (int)bytes, MPI_BYTE, c->mpi, &req);
        nominal = bytes * (size_t)(n - 1);
        break;
    }
    case zipcclCollAlltoAllv: {
        int* iv = zipcclScratch(c, 1, sizeof(int) * 4 * (size_t)n);
        if (!iv) return zipcclSetError(zipcclSystemError, "%s: out of memory", what);
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
            void* tmp = zipcclScratch(c, 0, sendExtent * esz);
            if (!tmp) return zipcclSetError(zipcclSystemError, "%s: out of memory", what);
            memcpy(tmp, op->sendbuf, sendExtent * esz);
            src = tmp;
        }
        MPI_Datatype dt = esz == 4 ? MPI_FLOAT : MPI_UINT16_T;
        err = MPI_Ialltoallv(src, iv, iv + n, dt, op->recvbuf, iv + 2 * n, iv + 3 * n, dt, c->mpi,
                             &req);
        break;
    }
    default: return zipcclSetError(zipcclInternalError, "native: unknown collective");
    }
    if (err != MPI_SUCCESS) return zipcclMpiError(err, what);
    /* Native calls yield like every wait (idleFor): napping after 200 us,
     * as all waits did before, made native calls that crossed it bimodal
     * (16 KiB AlltoAll ~0.26 or ~0.52 ms from run to run).  Native medians,
     * 4 ranks unthrottled, 4 runs x 100 calls, napping -> yielding:
     * AllGather 64 KiB 0.54 -> 0.30 ms, AllReduce 4 KiB 0.94 -> 0.37 ms,
     * AlltoAll 16 KiB 0.53 -> 0.26 ms, AlltoAllv 1 MiB 2.26 -> 1.84 ms
     * (docs/bench/native_wait_ab.jsonl).  Except ReduceScatter, which still
     * naps after 200 us: Open MPI's MPI_Ireduce_scatter_block reduces the
     * whole buffer to one rank (a binomial tree), then scatters, and ranks
     * that spin meanwhile take the shared cores from the one reducing
     * (1 MiB: 14.3 ms napping, 22.2 ms yielding). */
    const double yieldS = op->kind == zipcclCollReduceScatter ? kNapSoonS : kYieldS;
    ZIPCCL_TRY(waitReqs(c, 1, &req, what, &st->wireSeconds, yieldS));
    if (op->op == zipcclAvg && reduceCount) divideByN(op->recvbuf, reduceCount, op->dtype, n);
    st->rawBytes = st->wireBytes = nominal;
    return zipcclSuccess;
tooBig:
    return zipcclSetError(zipcclUnsupported,
                          "%s: native MPI path takes at most INT_MAX elements/bytes per count; "
                          "use strategy raw or compressed",
                          what);
}

/* ---- calibration ---------------------------------------------------------- */

/* Ranks 0 and n-1 (with ranks placed host by host, the pair most likely to
 * cross hosts) bounce a small and a 1 MiB message; everyone receives the
 * result by broadcast so the model inputs agree.  ~a few ms on shared
 * memory, ~50 ms on a 1 Gbit/s link. */
zipcclResult_t zipcclMpiPingPong(struct zipcclComm* c, double* alpha, double* beta) {
    ZIPCCL_TRY(zipcclAgreeWait(c));
    double res[2] = {*alpha, *beta};
    const int last = c->nranks - 1;
    if (c->nranks >= 2 && (c->rank == 0 || c->rank == last)) {
        enum { kSmallReps = 20, kBigReps = 3 };
        const size_t big = 1 << 20;
        char* buf = zipcclScratch(c, 0, big);
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
                    MPI_Send(buf, (int)sz, MPI_BYTE, peer, tag, c->mpi);
                    MPI_Recv(buf, (int)sz, MPI_BYTE, peer, tag, c->mpi, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(buf, (int)sz, MPI_BYTE, peer, tag, c->mpi, MPI_STATUS_IGNORE);
                    MPI_Send(buf, (int)sz, MPI_BYTE, peer, tag, c->mpi);
                }
            }
            double t = (zipcclNow() - t0) / (2.0 * reps);
            if (phase) tBig = t; else tSmall = t;
        }
        res[0] = tSmall;
        res[1] = tBig > tSmall ? (double)big / (tBig - tSmall) : 1e10;
    }
    if (c->nranks >= 2) { /* rank 0's measurement for everyone (max of it and zeros) */
        if (c->rank != 0) res[0] = res[1] = 0;
        ZIPCCL_TRY(zipcclMpiAllreduceTimed(c, MPI_IN_PLACE, res, 2, MPI_DOUBLE, MPI_MAX, "calibration"));
    }
    *alpha = res[0];
    *beta = res[1];
    return zipcclSuccess;
}
