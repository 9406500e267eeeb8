/*
 * comm_state.h — the ground of libzipccl's collective layers (comm/base/,
 * with common.c and zipccl_internal.h), which every layer above includes
 * and which calls nothing: the
 * communicator, the queued operation (which is also the request handle),
 * what a run cost, the state of the switcher and of the call agreement (the
 * communicator holds them), and small inline helpers any layer may use.  It
 * declares no file's functions: each layer offers the one above it a header
 * of its own.  Not installed.
 *
 * Layers, top to bottom; a call goes down, never up (scripts/check_layers.sh
 * checks the objects, docs/COLLECTIVES.md §0 has the map):
 *   core/coll.c     front door: API, validation, queue, counters
 *   switcher.h      tune/: auto's decision (switcher.c) over the measured
 *   tune_explore.h  selection (tune_explore.c) over the cost model (tune.h)
 *   coll_run.h      run/coll_run.c: a decided call on its buffers (host: the
 *                   transport's collective or a design; device: staged or
 *                   coded on the device), the front door's only way down to a run
 *   coll_algos.h    algo/: our designs, written once over the transport table
 *   coll_agree.h    agree/: the call agreement, liveness queries, the waits of the
 *                   transport's own collectives (the designs finish the
 *                   agreement themselves, so it sits below them)
 *   transport.h     the transport table (transport_mpi.c, transport_nccl.c)
 *   codec_ops.h     the codec table (CPU or CUDA, as the transport's buffers live)
 *   common.c        base/: errors, names, dtype helpers, the clock (zipccl_internal.h)
 *   device.h        device/ (outside comm/): the device model of a
 *                   communicator's device buffers
 */
#ifndef ZIPCCL_COMM_STATE_H
#define ZIPCCL_COMM_STATE_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include <math.h>

#include "codec_ops.h"
#include "device.h"
#include "transport.h"
#include "tune.h"
#include "zipccl.h"
#include "zipccl_tune.h"
#include "zipccl_internal.h"

/* One collective call as queued on a communicator; it is also the request
 * handle the public header calls struct zipcclRequest. */
typedef struct zipcclRequest {
    struct zipcclComm* comm;
    zipcclCollKind_t kind;
    const void* sendbuf;
    void* recvbuf;
    size_t count; /* AG: sendcount, RS: recvcount, AR/A2A: count (per rank)  */
    size_t* sendcounts; /* AlltoAllv only: copies of the caller's arrays     */
    size_t* sdispls;
    size_t* recvcounts;
    size_t* rdispls;
    zipcclDataType_t dtype;
    zipcclRedOp_t op;
    zipcclCallConfig_t cfg; /* as requested (strategy may still be auto)    */
    void* stream;
    /* Filled by the executor. */
    zipcclResult_t result;
    char detail[512];
    int done;
    struct zipcclRequest* next;
    void* devEvent; /* device buffers with a stream of the communicator's own:
                     * the caller's stream at issue (kept with the pooled op) */
    void* doneEvent; /* over a network: the communicator's stream after the
                      * call's work, which the caller's stream waits for at
                      * zipcclWait (kept with the pooled op) */
    int doneRecorded;
    void *spanBegin, *spanEnd; /* timing events of the call's device work
                                * (coll_run.c), until handed over by
                                * zipcclWaitSpan or freed */
} zipcclOp;

/* What one executed call cost; folded into the counters and the switcher. */
struct zipcclExecStats {
    zipcclStrategy_t strategy; /* native / raw / compressed as executed    */
    zipcclCodec_t codec;
    zipcclAlgo_t algo;
    uint64_t rawBytes, wireBytes;
    uint64_t intraBytes; /* of wireBytes, those sent within our node          */
    double codecSeconds, wireSeconds, totalSeconds;
    double runSeconds; /* the design's own run, after the decision (which, on
                        * a measuring call, ends with the barrier aligning the ranks) */
    /* AlltoAllv over our designs on a communicator with tagSizes: 1 + the
     * largest size bucket (zipcclSizeBucket of a rank's bytes sent) of all
     * ranks, read from the message tags; 0 when not known. */
    int a2avSizeWord;
    /* Device buffers (coll_run.c): bytes copied between the device and host
     * memory, and the time those copies took. */
    uint64_t busBytes;
    double busSeconds;
    /* The call's device span (coll_run.c): timing events when its work
     * started and ended on the communicator's stream. */
    void *spanBegin, *spanEnd;
};

/* A size's bucket for auto's measurements: floor(log2 bytes), the last
 * bucket holding all larger sizes. */
#define ZIPCCL_TUNE_BUCKETS 48
static inline int zipcclSizeBucket(double bytes) {
    if (bytes < 1) return 0;
    int e;
    frexp(bytes, &e); /* bytes = m * 2^e, m in [0.5, 1) */
    return e - 1 < ZIPCCL_TUNE_BUCKETS ? e - 1 : ZIPCCL_TUNE_BUCKETS - 1;
}

/* AlltoAllv: the bytes one rank sends in a call (its size for auto and for
 * the size word in its tags). */
static inline double zipcclA2avSendBytes(const size_t* sendcounts, int nranks, size_t esz) {
    double bytes = 0;
    for (int i = 0; i < nranks; i++) bytes += (double)(sendcounts[i] * esz);
    return bytes;
}

/* Measured selection (tune_explore.c): for one (collective, dtype, floor(log2
 * bytes)) bucket, the candidate designs and their rank-agreed wall times. */
#define ZIPCCL_TUNE_CANDS 8 /* the fixed strategies' designs (and their hier twins when the
                             * ranks span nodes), then the model's likeliest others: 6 in all
                             * on one node, 8 across nodes */
#define ZIPCCL_TUNE_RUNS 21 /* the most exploration runs per candidate */
typedef struct {
    int n;                             /* candidates; 0 = bucket not seen yet */
    int target;                        /* runs per candidate in the first round */
    int want[ZIPCCL_TUNE_CANDS];       /* runs candidate i is explored for (target,
                                        * twice that for a close contender); its
                                        * time is the lower median of its last want[i] */
    int pairs;                         /* re-measured pairs done              */
    int design[ZIPCCL_TUNE_CANDS];     /* index into switcher.c's design table */
    int runs[ZIPCCL_TUNE_CANDS];       /* measurements taken                  */
    double seen[ZIPCCL_TUNE_CANDS][ZIPCCL_TUNE_RUNS]; /* the last runs (agreed once the
                                                        * exploration is), oldest replaced */
    double last[ZIPCCL_TUNE_CANDS];    /* re-measured pair: this rank's seconds, 0 = not in it */
    double t[ZIPCCL_TUNE_CANDS];       /* agreed seconds (see switcher.c)     */
    uint64_t calls;                    /* auto calls in this bucket           */
    uint64_t pairAt;                   /* bucket call of the next re-measured pair */
    int pairEvery;                     /* bucket calls from that pair to the next */
} zipcclTuneBucket;

/* Auto's state (switcher.c, tune_explore.c).  Every field is identical on
 * all ranks. */
typedef struct {
    int calibrated;
    int linkKnown;       /* cost.alpha/beta settled (zipcclModelLink)       */
    zipcclTuneModel cost; /* the cost model's inputs (tune.h)               */
    /* Local observations since the last agreement (switcher.c lays it out). */
    double obs[zipcclNumCollKinds * 3 * ZIPCCL_MODEL_CODECS * 2 + 2 + 2 * ZIPCCL_MODEL_CODECS];
    uint64_t autoCalls;
    double agreeBytes;   /* auto calls' bytes since the last agreement     */
    int log;
    int explore;         /* measured selection on (ZIPCCL_AUTO_EXPLORE != 0)  */
    double contend;      /* close contenders' margin (ZIPCCL_AUTO_CONTEND / 100) */
    zipcclTuneBucket tune[zipcclNumCollKinds][3][ZIPCCL_TUNE_BUCKETS];
    zipcclTuneBucket* probeBucket; /* the current call is a measurement of   */
    int probeCand;                 /* probeBucket->design[probeCand]         */
    int probeAgree;                /* after it, agree the bucket's times     */
    /* AlltoAllv's size is rank-local: the calls decide from an agreed
     * largest size, kept current by the size words in our designs' tags
     * and, for the others, by an agreement every few calls (switcher.c,
     * a2avTotal). */
    void* a2avReq;                 /* one request slot: in flight, or empty  */
    double a2avMine, a2avMax;      /* its buffers                            */
    double a2avAgreed;             /* the size calls decide from             */
    int a2avKnown;                 /* a2avAgreed holds an agreed size        */
    int a2avStale;                 /* the last call's tags saw another bucket */
    uint64_t a2avUntagged;         /* auto calls run without size words      */
    zipcclCallConfig_t lastLogged; /* the last decision (log level 1 prints changes) */
    zipcclCollKind_t lastLoggedKind;
} zipcclModel;

/* AlltoAllv: an auto call in this many (switcher.c) that runs without size words
 * (native) starts a size agreement (a2avTotal).  Every call did at first,
 * which cost 20-30 us per call (4 ranks, 4-256 KiB, unthrottled emulated
 * cluster, against 60-350 us calls); one call in 8 of every design still
 * left auto 1.050x the best of native and raw there, size words 1.030x,
 * and no agreement at all 1.021x (medians of 30 runs, docs/lab/auto_tuning.md). */
#define ZIPCCL_A2AV_AGREE_EVERY 8

#define ZIPCCL_SCRATCH_SLOTS 8 /* see coll_algos.c for who uses which */

/* The call agreement (coll_agree.c): every call on a communicator of
 * several ranks whose transport has a control channel starts by sending each
 * peer a descriptor of the call (ZIPCCL_DESC_WORDS words) on that channel,
 * so that ranks that disagree all learn it before any receive is posted.
 * The same channel carries the liveness queries of a long wait. */
#define ZIPCCL_DESC_WORDS 7
typedef struct {
    uint64_t seq;        /* agreements started (each one's tag)               */
    int pending;         /* this call's descriptors are in flight             */
    zipcclResult_t result; /* the last agreement's verdict, once complete     */
    char detail[480];    /* its detail when it failed                         */
    zipcclCollKind_t kind;
    const zipcclOp* op;  /* the call being agreed                             */
    double t0;           /* when it started                                   */
    uint64_t* out;       /* (nranks, W): what we send each peer               */
    uint64_t* in;        /* (nranks, W): what each peer sent (ours at rank)    */
    void* reqs;          /* slots: receives [0, n-1), sends [n-1, 2n-2), pongs [2n-2, 3n-2) */
    uint64_t* detailBuf; /* (5): a failed AlltoAllv's pair, sent to every peer */
    /* Liveness queries (zipcclQueryPeers) and their answers. */
    double lastAnswer;   /* when pings were last looked for                   */
    uint64_t queryNo;
    uint64_t* pingBuf;   /* (nranks, 2): ping sent / pong received, per peer   */
    uint64_t* pongBuf;   /* (nranks): the answer to each peer's last ping      */
    void* query;         /* slots: a query's or a failed AlltoAllv's receives [0, n), sends [n, 2n) */
    void* ctl;           /* one slot: the small collectives, native calls       */
} zipcclAgree;

struct zipcclComm {
    const zipcclTransport* tp;
    void* tpState;       /* the transport's own (its channels, device scratch) */
    int rank, nranks;
    const zipcclCodecOps* codec; /* the codec for the transport's buffers (CPU:
                          * host, CUDA: device; zipcclCodecOpsFor(tp->device)) */
    int codecOk;         /* codec->available(), asked once at creation        */
    zipcclCallConfig_t defaults;
    double timeoutS;     /* 0 = wait forever                                 */
    size_t pieceBytes;   /* pipelining granularity of our algorithms         */
    int a2aWindow;       /* AlltoAll(v): pairwise steps in flight (1..n-1)    */
    int a2aInflight;     /* all-to-all exchanges (AlltoAll(v), direct
                          * ReduceScatter): piece sends in flight (0: no limit;
                          * -1 until sized to the link, sizeToLink)         */
    int tagSizes;        /* the tag bound leaves room for AlltoAllv's size word */
    int nodeSize;        /* ranks per node (node of rank r: r / nodeSize), for
                          * the hier designs and the intraBytes counter: the
                          * transport's (MPI_Comm_split_type), or
                          * ZIPCCL_NODE_SIZE; 0 unknown (NCCL)               */
    int hierRs;          /* hier ReduceScatter between nodes: 0 the fewer bytes,
                          * 1 chain, 2 forward (ZIPCCL_HIER_RS; coll_algos.c) */
    int broken;          /* a collective failed mid-flight: refuse new ones  */
    char brokenWhy[400];
    zipcclAgree agree;   /* its buffers and request slots exist on every communicator */

    /* Executor: one progress thread per communicator runs queued ops in
     * issue order; ops run eagerly at issue where the transport cannot take
     * a thread of its own (MPI below MPI_THREAD_MULTIPLE, NCCL).           */
    int threaded;
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* queue non-empty / op done / shutting down        */
    zipcclOp *head, *tail;
    int stopping;
    zipcclOp* freeOps;   /* requests to reuse (coll.c's pool), under mu      */

    /* Scratch buffers reused across calls (only the executor touches them). */
    void* scratch[ZIPCCL_SCRATCH_SLOTS];
    size_t scratchCap[ZIPCCL_SCRATCH_SLOTS];

    /* Device buffers over a host transport (zipcclCommSetDevice, coll_run.c):
     * the device (device/device.h) and how calls run on it, the
     * communicator's own stream there, the device's scratch (frames, codec
     * workspace) and the host staging (send, receive), grown like the
     * scratch above. */
    int onDevice;
    ZDevice* dev;
    zipcclDeviceCoding_t devCoding;
    void* devStream;     /* the communicator's stream on dev                 */
#define ZIPCCL_DEV_SLOTS 7 /* frames, codec workspace, fp32 accumulator, a decoded block,
                            * received blocks (raw on a net), a reduced block,
                            * frame sizes (over a net) */
    void* devScratch[ZIPCCL_DEV_SLOTS];
    size_t devScratchCap[ZIPCCL_DEV_SLOTS];
    void* hostStage[3];  /* send, receive, the codec's results (coll_device.h) */
    size_t hostStageCap[3];
    size_t devPieceBytes; /* coded calls on the device go in pieces of this many
                           * bytes a block (ZIPCCL_DEVICE_PIECE_BYTES; 0: whole) */
    void* pieceEvent[4];  /* their marks: encoded, frames down (the host waits);
                           * coded, exchanged (the streams wait)            */
    void* netStream;      /* over a network, their exchanges' stream         */
    /* Device memory moved device to device (zipcclCommSetNet): every call
     * runs on it (coll_run.c, runNet). */
    int hasNet;
    zipcclDeviceNet_t net;
    int sizesOverNet;    /* frame sizes over the network even with host control
                          * (zipcclTestSizesOverNet: tests of NCCL's own path) */

    zipcclCounters_t counters[zipcclNumCollKinds]; /* under mu               */
    zipcclModel model;   /* executor only                                   */
};

/* A communicator's scratch buffer `slot`, at least `bytes` long (NULL on
 * OOM); grown outside the steady state, by 1/8 more so slowly growing
 * sizes do not reallocate each call.  Only the executor touches them. */
static inline void* zipcclScratch(struct zipcclComm* c, int slot, size_t bytes) {
    if (bytes == 0) bytes = 1;
    if (c->scratchCap[slot] < bytes) {
        free(c->scratch[slot]);
        size_t cap = bytes + bytes / 8;
        c->scratch[slot] = zipcclHostAlloc(&cap);
        c->scratchCap[slot] = c->scratch[slot] ? cap : 0;
    }
    return c->scratch[slot];
}
/* The communicator's transport has host-side control: a control channel,
 * the small collectives, so the call agreement, calibration and measured
 * selection run on it (MPI; not NCCL). */
static inline int zipcclHostControl(const struct zipcclComm* c) { return (c->tp->caps & zipcclTpHostControl) != 0; }

/* A compressed call on this communicator is coded on the device
 * (algo/coll_device.c): its messages differ from the host designs', so the
 * call agreement compares it. */
static inline int zipcclCodedOnDevice(const struct zipcclComm* c) {
    return c->onDevice && c->devCoding != zipcclDeviceStaged;
}

/* A failed device call (device.h) as a result code: what the call was
 * doing, on which device, and the device's reason. */
static inline zipcclResult_t zipcclDevFail(const struct zipcclComm* c, const char* what, const char* doing) {
    return zipcclSetError(zipcclSystemError, "%s: %s (%s): %s", what, doing, c->dev->name, zdev_error());
}

/* Record *event on stream, making it (for ordering only) on first use;
 * 0, or -1 with the device's reason. */
static inline int zipcclDevRecord(struct zipcclComm* c, void** event, void* stream) {
    if (!*event && zdev_event_create(c->dev, event, 0)) return -1;
    return zdev_event_record(c->dev, *event, stream);
}

/* Slot i of a request array of the communicator's transport. */
static inline void* zipcclSlot(const struct zipcclComm* c, void* reqs, int i) {
    return (char*)reqs + (size_t)i * c->tp->reqSize;
}

#endif
