/*
 * coll.c — the collectives' front door: communicators, argument checks,
 * the per-communicator executor (queue + progress thread), requests (a
 * pool per communicator: no allocation per call), strategy resolution and
 * counters.  One call, top to bottom: issue() checks and queues it;
 * execute() starts the call agreement (coll_agree.c), asks the switcher
 * (switcher.c) for the design, runs it (zipcclRunDecided: the transport's native
 * collective, or one of coll_algos.c's designs over the transport's
 * messages, on host buffers or staged from a device's: coll_run.c) and
 * folds what it cost into the counters.  The transports
 * (transport.h: transport_mpi.c, transport_nccl.c) are all this file and
 * those reach the wire through.
 *
 * Execution model.  Each MPI communicator owns duplicates of the caller's
 * MPI communicator (transport_mpi.c) and one progress thread that runs its calls one at a
 * time in issue order; a blocking call is an async call plus a wait.  Calls
 * on different communicators run concurrently on their own threads and
 * their own MPI contexts, so they neither interfere nor deadlock, and calls
 * on one communicator cannot deadlock because every rank runs them in the
 * same order.  This needs MPI_THREAD_MULTIPLE; under a lower thread level
 * every call (async ones too) runs to completion in the caller's thread at
 * issue, which is still correct when all ranks issue in the same order.
 * NCCL communicators run at issue too: their work is stream-ordered.
 *
 * Every call on a communicator of several ranks whose transport has a
 * control channel (MPI) starts with the call
 * agreement (coll_agree.c): the ranks exchange descriptors of the call, so
 * ranks that disagree on it all return zipcclMismatch before any receive is
 * posted, instead of corrupting memory, aborting inside MPI or returning
 * wrong data.
 *
 * Left out: cancelling a queued call; re-using a communicator after a
 * mid-flight failure (timeout, mismatch, transport error) — it is marked
 * broken and answers every further call with zipcclCommBroken, since peers
 * may still send to it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll_agree.h"
#include "coll_algos.h"
#include "coll_device.h"
#include "comm_state.h"
#include "coll_run.h"
#include "switcher.h"
#include "tune_explore.h"

static zipcclResult_t checkConfig(const zipcclCallConfig_t* cfg) {
    if ((int)cfg->strategy < 0 || cfg->strategy > zipcclStrategyAuto)
        return zipcclSetError(zipcclInvalidArgument, "call config: strategy %d out of range", (int)cfg->strategy);
    if ((int)cfg->codec < 0 || cfg->codec > zipcclCodecF2 || cfg->codec == zipcclCodecStored)
        return zipcclSetError(zipcclInvalidArgument,
                              "call config: codec %d is not fast (1), dense (2), f3 (4) or f2 (5); a "
                              "compressed strategy with the stored codec would not compress",
                              (int)cfg->codec);
    if ((int)cfg->algo < 0 || cfg->algo >= ZIPCCL_NALGOS)
        return zipcclSetError(zipcclInvalidArgument, "call config: algo %d out of range", (int)cfg->algo);
    return zipcclSuccess;
}

/* ---- executor ------------------------------------------------------------------ */


static void execute(struct zipcclComm* c, zipcclOp* op) {
    zipcclExecStats st;
    memset(&st, 0, sizeof st);
    double t0 = zipcclNow();
    zipcclResult_t res;
    zipcclClearError();
    int wasAuto = op->cfg.strategy == zipcclStrategyAuto;
    zipcclCallConfig_t cfg = op->cfg;
    if (c->broken) {
        res = zipcclSetError(zipcclCommBroken,
                             "%s: the communicator is broken by an earlier failure and refuses every call; "
                             "destroy it (the failure: %s)",
                             zipcclCollName(op->kind), c->brokenWhy);
        goto out;
    }
    /* First the call agreement's descriptors go out; the decision may
     * communicate (calibration, agreements, the barrier before a measuring
     * call), and whatever communicates waits for the agreement first.  If
     * either fails, the communicator breaks below like after a failed run. */
    res = zipcclAgreeStart(c, op);
    if (res == zipcclSuccess) res = zipcclModelDecide(c, op, &cfg);
    if (res == zipcclSuccess) res = zipcclExploreBeforeRun(c, op); /* a measured call starts together */
    st.strategy = cfg.strategy;
    st.codec = cfg.codec;
    st.algo = zipcclAlgoRun(op->kind, cfg.algo);
    double t1 = zipcclNow();
    if (res == zipcclSuccess) res = zipcclRunDecided(c, op, cfg.strategy, &st);
    op->spanBegin = st.spanBegin, op->spanEnd = st.spanEnd; /* freed at finish unless handed over */
    /* Over a network the work stays on the communicator's stream: the call
     * completes with an event there, which the caller's stream waits for
     * (zipcclWait), so neither the host nor the caller's stream stalls on
     * the device here. */
    if (res == zipcclSuccess && c->hasNet && c->devStream) {
        if (zipcclDevRecord(c, &op->doneEvent, c->devStream) == 0) op->doneRecorded = 1;
        else res = zipcclDevFail(c, zipcclCollName(op->kind), "recording its end on the communicator's stream");
    }
    /* A call that moved no data (count 0) still completes its agreement, and
     * after a local failure the agreement's verdict, if it is a disagreement,
     * is the cause to report (the same on every rank). */
    if (c->agree.pending || c->agree.result != zipcclSuccess) {
        char local[sizeof op->detail];
        snprintf(local, sizeof local, "%s", zipcclGetLastErrorDetail());
        zipcclResult_t agreed = zipcclAgreeWait(c);
        if (res == zipcclSuccess || (agreed != zipcclSuccess && res != agreed)) res = agreed;
        else if (res != zipcclSuccess) zipcclSetError(res, "%s", local);
    }
    st.totalSeconds = zipcclNow() - t0;
    st.runSeconds = t0 + st.totalSeconds - t1;
    if (res == zipcclSuccess) {
        pthread_mutex_lock(&c->mu);
        zipcclCounters_t* k = &c->counters[op->kind];
        k->calls++;
        k->rawBytes += st.rawBytes;
        k->wireBytes += st.wireBytes;
        k->intraBytes += st.intraBytes;
        k->codecSeconds += st.codecSeconds;
        k->wireSeconds += st.wireSeconds;
        k->totalSeconds += st.totalSeconds;
        k->busBytes += st.busBytes;
        k->busSeconds += st.busSeconds;
        k->byStrategy[st.strategy]++;
        if (st.strategy == zipcclStrategyCompressed) k->byCodec[st.codec]++;
        if (op->kind != zipcclCollAlltoAll && op->kind != zipcclCollAlltoAllv &&
            st.strategy != zipcclStrategyNative)
            k->byAlgo[st.algo]++;
        pthread_mutex_unlock(&c->mu);
        res = zipcclModelObserve(c, op, &st, wasAuto);
    }
    if (res != zipcclSuccess && res != zipcclInvalidArgument && res != zipcclUnsupported) {
        /* Messages may still be in flight to or from this communicator. */
        c->broken = 1;
        const char* d = zipcclGetLastErrorDetail();
        snprintf(c->brokenWhy, sizeof c->brokenWhy, "%s", d[0] ? d : zipcclGetErrorString(res));
    }
out:
    op->result = res;
    snprintf(op->detail, sizeof op->detail, "%s", res == zipcclSuccess ? "" : zipcclGetLastErrorDetail());
}

static void* workerMain(void* arg) {
    struct zipcclComm* c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->head && !c->stopping) pthread_cond_wait(&c->cv, &c->mu);
        if (!c->head) break;
        zipcclOp* op = c->head;
        pthread_mutex_unlock(&c->mu);
        execute(c, op);
        pthread_mutex_lock(&c->mu);
        c->head = op->next;
        if (!c->head) c->tail = NULL;
        op->done = 1;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- communicators ---------------------------------------------------------------- */

/* *v = the integer in environment variable name, if set, within [lo, hi]. */
static zipcclResult_t envInt(const char* name, long long lo, long long hi, const char* want, long long* v) {
    const char* s = getenv(name);
    if (!s || !*s) return zipcclSuccess;
    char* end;
    long long x = strtoll(s, &end, 10);
    if (*end || x < lo || x > hi) return zipcclSetError(zipcclInvalidArgument, "%s='%s' (want %s)", name, s, want);
    *v = x;
    return zipcclSuccess;
}

/* *v = the number in environment variable name, if set, with lo < x (or
 * lo <= x when lo is allowed) and x <= hi. */
static zipcclResult_t envNumber(const char* name, double lo, int loAllowed, double hi, const char* want,
                                double* v) {
    const char* s = getenv(name);
    if (!s || !*s) return zipcclSuccess;
    char* end;
    double x = strtod(s, &end);
    if (*end || !(x == x) || (loAllowed ? x < lo : x <= lo) || x > hi)
        return zipcclSetError(zipcclInvalidArgument, "%s='%s' (want %s)", name, s, want);
    *v = x;
    return zipcclSuccess;
}

/* The default per-call timeout.  A training step's collectives take
 * milliseconds to seconds here (64 MiB over 1 Gbit/s: about one), so a call
 * still waiting after 100 s has a stopped or hung peer, and every second
 * beyond stalls the whole job (300 s, the default before, held a job with
 * one stopped rank for five minutes).  TorchTitan uses the same 100 s for
 * its training steps (comm.train_timeout_seconds, with a longer timeout for
 * its first step); PyTorch's ProcessGroupNCCL waits 10 minutes.  Creating a
 * communicator is collective, so its ranks start together, and a longer
 * first-call timeout is left out.  ZIPCCL_TIMEOUT_S overrides it (0 = wait
 * forever). */
static const double kDefaultTimeoutS = 100;

static zipcclResult_t readEnv(struct zipcclComm* c) {
    zipcclCallConfig_t d = {zipcclStrategyAuto, zipcclCodecFast, zipcclAlgoDefault};
    const char* s = getenv("ZIPCCL_STRATEGY");
    if (s && *s) ZIPCCL_TRY(zipcclStrategyParse(s, &d.strategy));
    s = getenv("ZIPCCL_CODEC");
    if (s && *s && zipcclCodecParse(s, &d.codec) != zipcclSuccess)
        return zipcclSetError(zipcclInvalidArgument, "ZIPCCL_CODEC='%s' (expected fast, dense, f3 or f2)", s);
    s = getenv("ZIPCCL_ALGO");
    if (s && *s && zipcclAlgoParse(s, &d.algo) != zipcclSuccess)
        return zipcclSetError(zipcclInvalidArgument, "ZIPCCL_ALGO='%s' (expected ring, direct, oneshot or hier)", s);
    c->defaults = d;
    c->timeoutS = kDefaultTimeoutS;
    ZIPCCL_TRY(envNumber("ZIPCCL_TIMEOUT_S", 0, 1, 1e9, "seconds >= 0; 0 = no timeout", &c->timeoutS));
    /* Read where they are used (switcher.c); refused here like the others. */
    double x = 0;
    ZIPCCL_TRY(envNumber("ZIPCCL_LINK_GBPS", 0, 0, 1e6, "Gbit/s > 0", &x));
    ZIPCCL_TRY(envNumber("ZIPCCL_LINK_ALPHA_US", 0, 0, 1e9, "microseconds > 0", &x));
    ZIPCCL_TRY(envNumber("ZIPCCL_INTRA_GBPS", 0, 0, 1e6, "Gbit/s > 0", &x));
    ZIPCCL_TRY(envNumber("ZIPCCL_INTRA_ALPHA_US", 0, 0, 1e9, "microseconds > 0", &x));
    long long v = 0;
    ZIPCCL_TRY(envInt("ZIPCCL_LOG", 0, 2, "0, 1 or 2", &v));
    c->model.log = (int)v;
    ZIPCCL_TRY(envInt("ZIPCCL_CALIBRATE", 0, 1, "0 or 1", &v));
    ZIPCCL_TRY(envInt("ZIPCCL_AUTO_EXPLORE", 0, 1, "0 or 1", &v));
    v = 0; /* unset: sized to the link at init (sizeToLink) */
    ZIPCCL_TRY(envInt("ZIPCCL_PIECE_BYTES", 32768, 1ll << 40, "an integer >= 32768", &v));
    c->pieceBytes = (size_t)v;
    v = 8ll << 20; /* a block's pieces on the device: each costs two host waits and a sizes' all-reduce */
    ZIPCCL_TRY(envInt("ZIPCCL_DEVICE_PIECE_BYTES", 0, 1ll << 40, "an integer >= 0; 0 = one piece a block", &v));
    c->devPieceBytes = (size_t)v;
    v = 2;
    ZIPCCL_TRY(envInt("ZIPCCL_A2A_WINDOW", 1, 1 << 20, "an integer >= 1", &v));
    c->a2aWindow = (int)v;
    v = -1; /* unset: sized to the link at init (sizeToLink) */
    ZIPCCL_TRY(envInt("ZIPCCL_A2A_INFLIGHT", 0, 1 << 20, "an integer >= 0; 0 = no limit", &v));
    c->a2aInflight = (int)v;
    v = 10;
    ZIPCCL_TRY(envInt("ZIPCCL_AUTO_CONTEND", 0, 1000, "a percentage >= 0; 0 = no extra runs", &v));
    c->model.contend = (double)v / 100;
    v = 0; /* unset: the transport asks MPI (transport_mpi.c, mpiNodeSize) */
    ZIPCCL_TRY(envInt("ZIPCCL_NODE_SIZE", 1, 1 << 20, "an integer >= 1 (ranks per node)", &v));
    c->nodeSize = (int)v;
    s = getenv("ZIPCCL_HIER_RS");
    if (s && *s) {
        if (!strcmp(s, "chain")) c->hierRs = 1;
        else if (!strcmp(s, "forward")) c->hierRs = 2;
        else if (strcmp(s, "auto"))
            return zipcclSetError(zipcclInvalidArgument, "ZIPCCL_HIER_RS='%s' (expected auto, chain or forward)", s);
    }
    return zipcclSuccess;
}

static struct zipcclComm* commAlloc(const zipcclTransport* tp) {
    struct zipcclComm* c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->tp = tp;
    c->codec = zipcclCodecOpsFor(tp->device); /* where its buffers live */
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    zipcclModelDefaults(&c->model);
    return c;
}

/* The pooled requests' device events (zipcclCommSetDevice's streams), with
 * the table that made them. */
static void dropEvents(struct zipcclComm* c) {
    for (zipcclOp* op = c->freeOps; op; op = op->next) {
        zdev_event_destroy(c->dev, op->devEvent);
        zdev_event_destroy(c->dev, op->doneEvent);
        op->devEvent = op->doneEvent = NULL;
    }
}

/* The device network's own state (zipcclCommSetNet), with its destroy. */
static void dropNet(struct zipcclComm* c) {
    if (c->hasNet && c->net.destroy) c->net.destroy(c->net.ctx);
    c->hasNet = 0;
    memset(&c->net, 0, sizeof c->net);
}

static void freeOps(zipcclOp* op) {
    while (op) {
        zipcclOp* next = op->next;
        free(op);
        op = next;
    }
}

static void commFree(struct zipcclComm* c) {
    if (!c->broken) { /* else in-flight sends may still read them */
        for (int i = 0; i < ZIPCCL_SCRATCH_SLOTS; i++) free(c->scratch[i]);
        zipcclDeviceRelease(c);
    }
    dropNet(c);
    zipcclAgreeFree(c);
    c->tp->destroy(c);
    free(c->model.a2avReq);
    zipcclTuneFinalize(&c->model.cost);
    dropEvents(c);
    freeOps(c->freeOps);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

/* A request from the communicator's pool (under c->mu); the pool grows
 * only when more calls are in flight than ever before on it. */
static zipcclOp* opTake(struct zipcclComm* c) {
    zipcclOp* op = c->freeOps;
    if (op) {
        c->freeOps = op->next;
        return op;
    }
    op = malloc(sizeof *op + 4 * (size_t)c->nranks * sizeof(size_t));
    if (op) op->devEvent = op->doneEvent = NULL;
    return op;
}
static void opGive(struct zipcclComm* c, zipcclOp* op) {
    op->next = c->freeOps;
    c->freeOps = op;
}

/* What is sized to the communicator's link (zipcclModelLink) unless the
 * environment set it; the link is rank-agreed, so every rank chooses alike.
 * Unmeasured (ZIPCCL_CALIBRATE=0, one rank) the link is the model's default
 * 5 GB/s.
 *
 * Piece size (ZIPCCL_PIECE_BYTES): about kPieceSeconds of wire time, within
 * [512 KiB, 4 MiB].  A piece is the unit a ring forwards and a receiver
 * decodes, so a pipeline fills and drains in a few piece times; each piece
 * is also one MPI message with its handshake.  On the emulated 4-host
 * cluster (bf16, 64 MiB per rank) 512 KiB pieces beat 4 MiB ones at 1
 * Gbit/s (ReduceScatter compressed 332 vs 440 ms, AllGather 1.19 vs 1.23 s)
 * and lost at 10 Gbit/s (AllGather 146 vs 129 ms, AlltoAll raw 172 vs 150
 * ms): 4 ms of wire is ~512 KiB at 1 Gbit/s and ~4 MiB at 10 Gbit/s.
 *
 * All-to-all sends in flight (ZIPCCL_A2A_INFLIGHT: AlltoAll(v) and the
 * direct ReduceScatter): one piece at a time on a link slower than
 * kSlowLinkBps, so a link carries one flow but at step boundaries; no limit
 * but the step window on faster ones.  Emulated cluster, 64 MiB per rank,
 * median of 3-4 runs (docs/COLLECTIVES.md): at 1 Gbit/s one in flight took
 * AlltoAll compressed 308 vs 328 ms and raw 439 vs 472 ms, AlltoAllv 263 vs
 * 292 and 379 vs 417 ms, the direct ReduceScatter 344 vs 402 and 442 vs 522
 * ms (against all sends at once); at 10 Gbit/s it was slower at most sizes,
 * by up to 6% (the ranks' CPU, the kernel's copies included, is then what is
 * short, and a second flow keeps it busy).  The ping-pong reads 1 Gbit/s as
 * ~150 MB/s and 10 Gbit/s as 0.6-1.1 GB/s. */
static zipcclResult_t sizeToLink(struct zipcclComm* c) {
    static const double kSlowLinkBps = 300e6;
    if (c->pieceBytes && c->a2aInflight >= 0) return zipcclSuccess; /* both from the environment */
    double t0 = zipcclNow();
    ZIPCCL_TRY(zipcclModelLink(c));
    if (!c->pieceBytes) c->pieceBytes = zipcclTunePieceBytes(c->model.cost.beta);
    if (c->a2aInflight < 0) c->a2aInflight = c->model.cost.beta < kSlowLinkBps ? 1 : 0;
    if (c->model.log && c->rank == 0)
        fprintf(stderr, "zipccl: link %.0f MB/s (%.0f ms): pieces of %zu KiB, all-to-all pieces in flight: %d%s\n",
                c->model.cost.beta / 1e6, 1e3 * (zipcclNow() - t0), c->pieceBytes >> 10, c->a2aInflight,
                c->a2aInflight ? "" : " (no limit)");
    return zipcclSuccess;
}

/* Requests made at creation: a training step keeps a few calls in flight
 * per communicator (a prefetched gather, two reduce-scatters), so these are
 * what the steady state needs. */
enum { kOpPoolInit = 8 };

/* Creation on any transport: the environment, the transport's own init,
 * whether the codec for its buffers (c->codec, commAlloc) can run, the
 * agreement's buffers, sizing to the link (transports with host-side
 * control, which can measure it) and the progress thread. */
static zipcclResult_t commInit(zipcclComm_t* comm, const zipcclTransport* tp, const void* handle,
                               const char* what) {
    *comm = NULL;
    struct zipcclComm* c = commAlloc(tp);
    if (!c) return zipcclSetError(zipcclSystemError, "%s: out of memory", what);
    zipcclResult_t res = readEnv(c);
    if (res == zipcclSuccess) res = tp->init(c, handle);
    if (res == zipcclSuccess) c->codecOk = c->codec->available(); /* CUDA: a device is usable */
    if (res == zipcclSuccess) res = zipcclAgreeInit(c);
    if (res == zipcclSuccess && !(c->model.a2avReq = malloc(tp->reqSize)))
        res = zipcclSetError(zipcclSystemError, "%s: out of memory", what);
    for (int i = 0; res == zipcclSuccess && i < kOpPoolInit; i++) {
        zipcclOp* op = opTake(c);
        if (!op) res = zipcclSetError(zipcclSystemError, "%s: out of memory", what);
        else opGive(c, op);
    }
    if (res != zipcclSuccess) { commFree(c); return res; }
    tp->reqInit(c->model.a2avReq, 1);
    if (tp->caps & zipcclTpHostControl) {
        res = sizeToLink(c);
        if (res == zipcclSuccess && c->defaults.strategy == zipcclStrategyAuto)
            res = zipcclModelCalibrate(c); /* collective; the same on every rank */
    } else { /* nothing to measure the link with: the model's defaults (and ZIPCCL_LINK_GBPS) */
        if (!c->pieceBytes) c->pieceBytes = (size_t)4 << 20;
        if (c->a2aInflight < 0) c->a2aInflight = 0;
        c->model.calibrated = 1;
    }
    if (res != zipcclSuccess) { commFree(c); return res; }
    if (c->threaded && pthread_create(&c->worker, NULL, workerMain, c) != 0) {
        commFree(c);
        return zipcclSetError(zipcclSystemError, "%s: cannot start progress thread", what);
    }
    *comm = c;
    return zipcclSuccess;
}

zipcclResult_t zipcclCommInitMpi(zipcclComm_t* comm, const void* mpiComm) {
    if (!comm || !mpiComm) return zipcclSetError(zipcclInvalidArgument, "zipcclCommInitMpi: null argument");
    return commInit(comm, &zipcclTransportMpi, mpiComm, "zipcclCommInitMpi");
}

static zipcclResult_t setDevice(struct zipcclComm* c, ZDevice* dev, zipcclDeviceCoding_t coding);

/* NCCL's own communicator: its buffers are the device memory of the NCCL
 * communicator's GPU (the CUDA table) and move over that same communicator
 * as the network, so every call runs algo/coll_device.c's designs. */
zipcclResult_t zipcclCommInitNccl(zipcclComm_t* comm, void* ncclComm) {
    if (!comm || !ncclComm) return zipcclSetError(zipcclInvalidArgument, "zipcclCommInitNccl: null argument");
    ZIPCCL_TRY(commInit(comm, &zipcclTransportNccl, ncclComm, "zipcclCommInitNccl"));
    struct zipcclComm* c = *comm;
    int device = 0;
    zipcclDeviceNet_t net;
    ZDevice* dev = NULL;
    zipcclResult_t res = zipcclNcclTransportNet(c, &device, &net);
    if (res != zipcclSuccess) goto fail;
    dev = zdev_cuda(device);
    res = dev ? setDevice(c, dev, zipcclDeviceCoded)
              : zipcclSetError(zipcclUnsupported, "NCCL's device %d: %s", device, zdev_error());
    if (res == zipcclSuccess) res = zipcclCommSetNet(c, &net);
    if (res == zipcclSuccess) return res;
    if (!c->hasNet && net.destroy) net.destroy(net.ctx);
fail:
    res = zipcclPrefixError(res, "zipcclCommInitNccl");
    zipcclCommDestroy(c);
    *comm = NULL;
    return res;
}

zipcclResult_t zipcclCommDestroy(zipcclComm_t c) {
    if (!c) return zipcclSuccess;
    if (c->threaded) {
        pthread_mutex_lock(&c->mu);
        c->stopping = 1; /* the worker finishes what is queued first */
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->worker, NULL);
    }
    /* The switcher's AlltoAllv size agreement may still be in flight and
     * writes into the communicator: complete it (every rank posted it), or,
     * on a broken communicator or after the timeout, leave the memory to it. */
    zipcclResult_t res = zipcclSuccess;
    if (!c->broken) res = zipcclModelFinish(c);
    else if (c->model.a2avReq) {
        int done = 0;
        c->tp->test(c, c->model.a2avReq, 0, &done);
    }
    if (res != zipcclSuccess || (c->model.a2avReq && c->tp->reqActive(c->model.a2avReq, 0))) {
        c->tp->destroy(c);
        return res == zipcclSuccess ? zipcclSetError(zipcclTransportError, "zipcclCommDestroy: an AlltoAllv "
                                                      "size agreement could not complete; its memory is leaked")
                                    : res;
    }
    commFree(c);
    return zipcclSuccess;
}

zipcclResult_t zipcclCommRank(zipcclComm_t c, int* rank) {
    if (!c || !rank) return zipcclSetError(zipcclInvalidArgument, "zipcclCommRank: null argument");
    *rank = c->rank;
    return zipcclSuccess;
}

zipcclResult_t zipcclCommSize(zipcclComm_t c, int* size) {
    if (!c || !size) return zipcclSetError(zipcclInvalidArgument, "zipcclCommSize: null argument");
    *size = c->nranks;
    return zipcclSuccess;
}

zipcclResult_t zipcclCommNodeSize(zipcclComm_t c, int* size) {
    if (!c || !size) return zipcclSetError(zipcclInvalidArgument, "zipcclCommNodeSize: null argument");
    *size = c->nodeSize;
    return zipcclSuccess;
}

zipcclResult_t zipcclCommPieceBytes(zipcclComm_t c, size_t* bytes) {
    if (!c || !bytes) return zipcclSetError(zipcclInvalidArgument, "zipcclCommPieceBytes: null argument");
    *bytes = c->pieceBytes;
    return zipcclSuccess;
}

zipcclResult_t zipcclCommA2aInflight(zipcclComm_t c, int* pieces) {
    if (!c || !pieces) return zipcclSetError(zipcclInvalidArgument, "zipcclCommA2aInflight: null argument");
    *pieces = c->a2aInflight;
    return zipcclSuccess;
}

zipcclResult_t zipcclCommSetDefaults(zipcclComm_t c, const zipcclCallConfig_t* cfg) {
    if (!c || !cfg) return zipcclSetError(zipcclInvalidArgument, "zipcclCommSetDefaults: null argument");
    ZIPCCL_TRY(checkConfig(cfg));
    pthread_mutex_lock(&c->mu);
    if (cfg->strategy != zipcclStrategyDefault) c->defaults.strategy = cfg->strategy;
    if (cfg->codec != zipcclCodecDefault) c->defaults.codec = cfg->codec;
    if (cfg->algo != zipcclAlgoDefault) c->defaults.algo = cfg->algo;
    pthread_mutex_unlock(&c->mu);
    return zipcclSuccess;
}

/* A communicator with no call in flight (the set-up calls need it). */
static int noCallsInFlight(struct zipcclComm* c) {
    pthread_mutex_lock(&c->mu);
    const int busy = c->head != NULL;
    pthread_mutex_unlock(&c->mu);
    return !busy;
}

zipcclResult_t zipcclCommSetDevice(zipcclComm_t c, ZDevice* dev, zipcclDeviceCoding_t coding) {
    if (!c || !dev) return zipcclSetError(zipcclInvalidArgument, "zipcclCommSetDevice: null argument");
    if (c->tp->device)
        return zipcclSetError(zipcclInvalidArgument, "zipcclCommSetDevice: the buffers of a %s communicator are "
                              "device memory already", c->tp->name);
    return setDevice(c, dev, coding);
}

static zipcclResult_t setDevice(struct zipcclComm* c, ZDevice* dev, zipcclDeviceCoding_t coding) {
    const char* name = dev->name ? dev->name : "the device";
    if ((int)coding < 0 || coding > zipcclDeviceCoded)
        return zipcclSetError(zipcclInvalidArgument, "zipcclCommSetDevice: coding %d is not staged (0) or coded (1)",
                              (int)coding);
    if (coding == zipcclDeviceCoded && dev->kind != ZDEV_KIND_CUDA && !dev->host_access)
        return zipcclSetError(zipcclInvalidArgument, "zipcclCommSetDevice: %s's memory can be coded by neither codec "
                              "(the CUDA codec needs a CUDA device, the CPU codec memory the host may read): "
                              "use zipcclDeviceStaged", name);
    if (coding == zipcclDeviceCoded && dev->kind == ZDEV_KIND_CUDA && !zipcclCudaAvailable())
        return zipcclSetError(zipcclUnsupported, "zipcclCommSetDevice: %s codes with the CUDA codec, which cannot "
                              "run here (a build without CUDA, or no usable device)", name);
    if (!noCallsInFlight(c))
        return zipcclSetError(zipcclInvalidArgument, "zipcclCommSetDevice: the communicator has calls in flight; "
                              "set the device before the first call");
    /* the previous device's memory, stream and events, and a network that
     * moved its memory */
    zipcclDeviceRelease(c);
    dropEvents(c);
    dropNet(c);
    void* stream = NULL;
    if (zdev_bind(dev) || zdev_stream_create(dev, &stream))
        return zipcclSetError(zipcclSystemError, "zipcclCommSetDevice: creating %s's stream for the communicator: %s",
                              name, zdev_error());
    c->dev = dev;
    c->devCoding = coding;
    c->devStream = stream;
    c->onDevice = 1;
    return zipcclSuccess;
}

zipcclResult_t zipcclCommSetNet(zipcclComm_t c, const zipcclDeviceNet_t* net) {
    if (!c || !net) return zipcclSetError(zipcclInvalidArgument, "zipcclCommSetNet: null argument");
    const char* name = net->name ? net->name : "the network";
    if (!net->exchange)
        return zipcclSetError(zipcclInvalidArgument, "zipcclCommSetNet: %s's table has no exchange entry", name);
    if (!c->onDevice || c->devCoding == zipcclDeviceStaged)
        return zipcclSetError(zipcclInvalidArgument, "zipcclCommSetNet: %s moves device buffers, and compressed "
                              "calls code them where they are: call zipcclCommSetDevice with zipcclDeviceCoded "
                              "first", name);
    if (!noCallsInFlight(c))
        return zipcclSetError(zipcclInvalidArgument, "zipcclCommSetNet: the communicator has calls in flight; "
                              "set the network before the first call");
    dropNet(c);
    c->net = *net;
    c->net.name = name;
    c->hasNet = 1;
    return zipcclSuccess;
}

void zipcclTestSizesOverNet(zipcclComm_t c) {
    if (c) c->sizesOverNet = 1;
}

zipcclResult_t zipcclCommUseNccl(zipcclComm_t c) {
    if (!c) return zipcclSetError(zipcclInvalidArgument, "zipcclCommUseNccl: null argument");
    if (!zipcclHostControl(c))
        return zipcclSetError(zipcclInvalidArgument, "zipcclCommUseNccl: the %s communicator has no host control to "
                              "spread NCCL's unique id with (use an MPI communicator)", c->tp->name);
    if (!c->onDevice || c->devCoding != zipcclDeviceCoded || c->dev->kind != ZDEV_KIND_CUDA)
        return zipcclSetError(zipcclInvalidArgument, "zipcclCommUseNccl: NCCL moves CUDA memory: call "
                              "zipcclCommSetDevice with a CUDA device (zdev_cuda) and zipcclDeviceCoded first");
    if (!noCallsInFlight(c))
        return zipcclSetError(zipcclInvalidArgument, "zipcclCommUseNccl: the communicator has calls in flight");
    /* Rank 0's unique id, byte by byte as doubles, summed with the others'
     * zeros: every rank ends with rank 0's bytes. */
    unsigned char id[ZIPCCL_NCCL_ID_BYTES];
    double v[ZIPCCL_NCCL_ID_BYTES];
    memset(id, 0, sizeof id);
    zipcclResult_t res = c->rank == 0 ? zipcclNcclUniqueId(id) : zipcclSuccess;
    double failed = res == zipcclSuccess ? 0 : 1, anyFailed = 0;
    ZIPCCL_TRY(zipcclAgreedAllreduce(c, &failed, &anyFailed, 1, zipcclTpSum,
                                     "zipcclCommUseNccl: rank 0's NCCL unique id"));
    if (res != zipcclSuccess) return res;
    if (anyFailed) return zipcclSetError(zipcclUnsupported, "zipcclCommUseNccl: rank 0 could not make an NCCL unique id");
    for (int i = 0; i < ZIPCCL_NCCL_ID_BYTES; i++) v[i] = id[i];
    ZIPCCL_TRY(zipcclAgreedAllreduce(c, v, v, ZIPCCL_NCCL_ID_BYTES, zipcclTpSum, "zipcclCommUseNccl: spreading the id"));
    for (int i = 0; i < ZIPCCL_NCCL_ID_BYTES; i++) id[i] = (unsigned char)v[i];
    if (zdev_bind(c->dev))
        return zipcclSetError(zipcclSystemError, "zipcclCommUseNccl: binding %s: %s", c->dev->name, zdev_error());
    zipcclDeviceNet_t net;
    ZIPCCL_TRY(zipcclNcclNetCreate(c->rank, c->nranks, id, &net));
    res = zipcclCommSetNet(c, &net);
    if (res != zipcclSuccess && net.destroy) net.destroy(net.ctx);
    return res;
}

zipcclResult_t zipcclCommGetCounters(zipcclComm_t c, zipcclCollKind_t kind, zipcclCounters_t* out) {
    if (!c || !out) return zipcclSetError(zipcclInvalidArgument, "zipcclCommGetCounters: null argument");
    if ((int)kind < 0 || kind >= zipcclNumCollKinds)
        return zipcclSetError(zipcclInvalidArgument, "zipcclCommGetCounters: kind %d out of range", (int)kind);
    pthread_mutex_lock(&c->mu);
    *out = c->counters[kind];
    pthread_mutex_unlock(&c->mu);
    return zipcclSuccess;
}

zipcclResult_t zipcclCommResetCounters(zipcclComm_t c) {
    if (!c) return zipcclSetError(zipcclInvalidArgument, "zipcclCommResetCounters: null comm");
    pthread_mutex_lock(&c->mu);
    memset(c->counters, 0, sizeof c->counters);
    pthread_mutex_unlock(&c->mu);
    return zipcclSuccess;
}

/* ---- issuing calls ------------------------------------------------------------------- */

static int mulOverflows(size_t a, size_t b) { return b && a > SIZE_MAX / b; }

static zipcclResult_t validate(const zipcclOp* op) {
    const struct zipcclComm* c = op->comm;
    const char* what = zipcclCollName(op->kind);
    size_t esz = zipcclTypeSize(op->dtype);
    if (!esz)
        return zipcclSetError(zipcclInvalidArgument, "%s: unsupported dtype %d (bf16, fp16 or fp32)",
                              what, (int)op->dtype);
    if ((op->kind == zipcclCollReduceScatter || op->kind == zipcclCollAllReduce) &&
        op->op != zipcclSum && op->op != zipcclAvg)
        return zipcclSetError(zipcclInvalidArgument, "%s: unsupported reduction op %d (sum or avg)",
                              what, (int)op->op);
    if (op->kind == zipcclCollAlltoAllv) {
        const char* none = !op->sendcounts ? "sendcounts" : !op->sdispls ? "sdispls"
                         : !op->recvcounts ? "recvcounts" : !op->rdispls ? "rdispls" : NULL;
        if (none) return zipcclSetError(zipcclInvalidArgument, "%s: %s is NULL", what, none);
        int anySend = 0, anyRecv = 0;
        for (int i = 0; i < c->nranks; i++) {
            anySend |= op->sendcounts[i] != 0;
            anyRecv |= op->recvcounts[i] != 0;
            if (op->sdispls[i] + op->sendcounts[i] < op->sdispls[i] ||
                mulOverflows(op->sdispls[i] + op->sendcounts[i], esz))
                return zipcclSetError(zipcclInvalidArgument, "%s: sdispls[%d] + sendcounts[%d] (%zu + %zu elements) "
                                      "overflows as bytes", what, i, i, op->sdispls[i], op->sendcounts[i]);
            if (op->rdispls[i] + op->recvcounts[i] < op->rdispls[i] ||
                mulOverflows(op->rdispls[i] + op->recvcounts[i], esz))
                return zipcclSetError(zipcclInvalidArgument, "%s: rdispls[%d] + recvcounts[%d] (%zu + %zu elements) "
                                      "overflows as bytes", what, i, i, op->rdispls[i], op->recvcounts[i]);
        }
        if (anySend && !op->sendbuf)
            return zipcclSetError(zipcclInvalidArgument, "%s: sendbuf is NULL but sendcounts are not all 0", what);
        if (anyRecv && !op->recvbuf)
            return zipcclSetError(zipcclInvalidArgument, "%s: recvbuf is NULL but recvcounts are not all 0", what);
        return zipcclSuccess;
    }
    if (mulOverflows(op->count, esz * (size_t)c->nranks))
        return zipcclSetError(zipcclInvalidArgument, "%s: count %zu elements x %d ranks x %zu bytes overflows size_t",
                              what, op->count, c->nranks, esz);
    if (op->count && (!op->sendbuf || !op->recvbuf))
        return zipcclSetError(zipcclInvalidArgument, "%s: %s is NULL with count %zu elements", what,
                              op->sendbuf ? "recvbuf" : "sendbuf", op->count);
    return zipcclSuccess;
}

/* Build, check and queue (or run) one call; *reqOut gets the request. */
static zipcclResult_t issue(zipcclOp* tmpl, const zipcclCallConfig_t* cfg, zipcclRequest_t* reqOut) {
    struct zipcclComm* c = tmpl->comm;
    const char* what = zipcclCollName(tmpl->kind);
    if (!c) return zipcclSetError(zipcclInvalidArgument, "%s: null communicator", what);
    if (!reqOut) return zipcclSetError(zipcclInvalidArgument, "%s: null request pointer", what);
    *reqOut = NULL;
    ZIPCCL_TRY(validate(tmpl));
    zipcclCallConfig_t r = ZIPCCL_CALL_CONFIG_DEFAULT;
    if (cfg) {
        ZIPCCL_TRY(checkConfig(cfg));
        r = *cfg;
    }
    pthread_mutex_lock(&c->mu);
    if (r.strategy == zipcclStrategyDefault) r.strategy = c->defaults.strategy;
    if (r.codec == zipcclCodecDefault) r.codec = c->defaults.codec;
    if (r.algo == zipcclAlgoDefault) r.algo = c->defaults.algo;
    zipcclOp* op = opTake(c);
    pthread_mutex_unlock(&c->mu);
    tmpl->cfg = r;

    const int n = c->nranks;
    if (!op) return zipcclSetError(zipcclSystemError, "%s: out of memory", what);
    void *ev = op->devEvent, *done = op->doneEvent; /* the pooled op keeps its events */
    *op = *tmpl;
    op->devEvent = ev;
    op->doneEvent = done;
    op->doneRecorded = 0;
    op->spanBegin = op->spanEnd = NULL;
    if (c->devStream) { /* the point on the caller's stream the call's copies follow */
        if (zipcclDevRecord(c, &op->devEvent, op->stream)) {
            zipcclResult_t er = zipcclDevFail(c, what, "recording an event on the caller's stream");
            pthread_mutex_lock(&c->mu);
            opGive(c, op);
            pthread_mutex_unlock(&c->mu);
            return er;
        }
    }
    if (tmpl->kind == zipcclCollAlltoAllv) { /* the caller may reuse its arrays at once */
        size_t* a = (size_t*)(op + 1);
        memcpy(a, tmpl->sendcounts, n * sizeof(size_t));
        memcpy(a + n, tmpl->sdispls, n * sizeof(size_t));
        memcpy(a + 2 * n, tmpl->recvcounts, n * sizeof(size_t));
        memcpy(a + 3 * n, tmpl->rdispls, n * sizeof(size_t));
        op->sendcounts = a, op->sdispls = a + n, op->recvcounts = a + 2 * n, op->rdispls = a + 3 * n;
    }
    op->next = NULL;
    op->done = 0;
    if (!c->threaded) {
        execute(c, op);
        op->done = 1;
    } else {
        pthread_mutex_lock(&c->mu);
        if (c->tail) c->tail->next = op;
        else c->head = op;
        c->tail = op;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
    *reqOut = op;
    return zipcclSuccess;
}

/* The request's result; the caller's stream ordered after the call's device
 * work where that is still in flight (over a network); the request goes
 * back to its communicator's pool (c->mu held). */
static zipcclResult_t finish(zipcclOp* op, void** begin, void** end) {
    struct zipcclComm* c = op->comm;
    if (begin && end && op->result == zipcclSuccess) { /* the caller takes the span's events */
        *begin = op->spanBegin, *end = op->spanEnd;
    } else {
        zdev_event_destroy(c->dev, op->spanBegin);
        zdev_event_destroy(c->dev, op->spanEnd);
    }
    op->spanBegin = op->spanEnd = NULL;
    zipcclResult_t res = op->result;
    if (res != zipcclSuccess) zipcclSetError(res, "%s", op->detail);
    if (res == zipcclSuccess && op->doneRecorded) {
        if (zdev_stream_wait_event(c->dev, op->stream, op->doneEvent))
            res = zipcclDevFail(c, zipcclCollName(op->kind), "ordering the caller's stream after it");
    }
    opGive(c, op);
    return res;
}

zipcclResult_t zipcclWait(zipcclRequest_t op) { return zipcclWaitSpan(op, NULL, NULL); }

zipcclResult_t zipcclWaitSpan(zipcclRequest_t op, void** begin, void** end) {
    if (begin) *begin = NULL;
    if (end) *end = NULL;
    if (!op) return zipcclSetError(zipcclInvalidArgument, "zipcclWait: null request");
    struct zipcclComm* c = op->comm;
    pthread_mutex_lock(&c->mu);
    while (!op->done) pthread_cond_wait(&c->cv, &c->mu);
    zipcclResult_t res = finish(op, begin, end);
    pthread_mutex_unlock(&c->mu);
    return res;
}

zipcclResult_t zipcclTest(zipcclRequest_t op, int* done) {
    if (!op || !done) return zipcclSetError(zipcclInvalidArgument, "zipcclTest: null argument");
    struct zipcclComm* c = op->comm;
    pthread_mutex_lock(&c->mu);
    *done = op->done;
    zipcclResult_t res = *done ? finish(op, NULL, NULL) : zipcclSuccess;
    pthread_mutex_unlock(&c->mu);
    return res;
}

/* ---- the public collectives ------------------------------------------------------------ */

#define OP(kind_, sb, rb, cnt, dt, rop, cm, st) \
    {.comm = (cm), .kind = (kind_), .sendbuf = (sb), .recvbuf = (rb), .count = (cnt), \
     .dtype = (dt), .op = (rop), .stream = (st)}

static zipcclResult_t blocking(zipcclOp* tmpl, const zipcclCallConfig_t* cfg) {
    zipcclRequest_t req;
    ZIPCCL_TRY(issue(tmpl, cfg, &req));
    return zipcclWait(req);
}

zipcclResult_t zipcclAllGatherAsync(const void* sendbuf, void* recvbuf, size_t sendcount,
                                    zipcclDataType_t dtype, zipcclComm_t comm,
                                    const zipcclCallConfig_t* cfg, void* stream,
                                    zipcclRequest_t* req) {
    zipcclOp t = OP(zipcclCollAllGather, sendbuf, recvbuf, sendcount, dtype, zipcclSum, comm, stream);
    return issue(&t, cfg, req);
}
zipcclResult_t zipcclAllGather(const void* sendbuf, void* recvbuf, size_t sendcount,
                               zipcclDataType_t dtype, zipcclComm_t comm,
                               const zipcclCallConfig_t* cfg, void* stream) {
    zipcclOp t = OP(zipcclCollAllGather, sendbuf, recvbuf, sendcount, dtype, zipcclSum, comm, stream);
    return blocking(&t, cfg);
}

zipcclResult_t zipcclReduceScatterAsync(const void* sendbuf, void* recvbuf, size_t recvcount,
                                        zipcclDataType_t dtype, zipcclRedOp_t op,
                                        zipcclComm_t comm, const zipcclCallConfig_t* cfg,
                                        void* stream, zipcclRequest_t* req) {
    zipcclOp t = OP(zipcclCollReduceScatter, sendbuf, recvbuf, recvcount, dtype, op, comm, stream);
    return issue(&t, cfg, req);
}
zipcclResult_t zipcclReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                   zipcclDataType_t dtype, zipcclRedOp_t op, zipcclComm_t comm,
                                   const zipcclCallConfig_t* cfg, void* stream) {
    zipcclOp t = OP(zipcclCollReduceScatter, sendbuf, recvbuf, recvcount, dtype, op, comm, stream);
    return blocking(&t, cfg);
}

zipcclResult_t zipcclAllReduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                    zipcclDataType_t dtype, zipcclRedOp_t op, zipcclComm_t comm,
                                    const zipcclCallConfig_t* cfg, void* stream,
                                    zipcclRequest_t* req) {
    zipcclOp t = OP(zipcclCollAllReduce, sendbuf, recvbuf, count, dtype, op, comm, stream);
    return issue(&t, cfg, req);
}
zipcclResult_t zipcclAllReduce(const void* sendbuf, void* recvbuf, size_t count,
                               zipcclDataType_t dtype, zipcclRedOp_t op, zipcclComm_t comm,
                               const zipcclCallConfig_t* cfg, void* stream) {
    zipcclOp t = OP(zipcclCollAllReduce, sendbuf, recvbuf, count, dtype, op, comm, stream);
    return blocking(&t, cfg);
}

zipcclResult_t zipcclAlltoAllAsync(const void* sendbuf, void* recvbuf, size_t count,
                                   zipcclDataType_t dtype, zipcclComm_t comm,
                                   const zipcclCallConfig_t* cfg, void* stream,
                                   zipcclRequest_t* req) {
    zipcclOp t = OP(zipcclCollAlltoAll, sendbuf, recvbuf, count, dtype, zipcclSum, comm, stream);
    return issue(&t, cfg, req);
}
zipcclResult_t zipcclAlltoAll(const void* sendbuf, void* recvbuf, size_t count,
                              zipcclDataType_t dtype, zipcclComm_t comm,
                              const zipcclCallConfig_t* cfg, void* stream) {
    zipcclOp t = OP(zipcclCollAlltoAll, sendbuf, recvbuf, count, dtype, zipcclSum, comm, stream);
    return blocking(&t, cfg);
}

zipcclResult_t zipcclAlltoAllvAsync(const void* sendbuf, const size_t* sendcounts,
                                    const size_t* sdispls, void* recvbuf,
                                    const size_t* recvcounts, const size_t* rdispls,
                                    zipcclDataType_t dtype, zipcclComm_t comm,
                                    const zipcclCallConfig_t* cfg, void* stream,
                                    zipcclRequest_t* req) {
    zipcclOp t = OP(zipcclCollAlltoAllv, sendbuf, recvbuf, 0, dtype, zipcclSum, comm, stream);
    t.sendcounts = (size_t*)sendcounts, t.sdispls = (size_t*)sdispls;
    t.recvcounts = (size_t*)recvcounts, t.rdispls = (size_t*)rdispls;
    return issue(&t, cfg, req);
}
zipcclResult_t zipcclAlltoAllv(const void* sendbuf, const size_t* sendcounts,
                               const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                               const size_t* rdispls, zipcclDataType_t dtype, zipcclComm_t comm,
                               const zipcclCallConfig_t* cfg, void* stream) {
    zipcclRequest_t req;
    ZIPCCL_TRY(zipcclAlltoAllvAsync(sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls,
                                    dtype, comm, cfg, stream, &req));
    return zipcclWait(req);
}
