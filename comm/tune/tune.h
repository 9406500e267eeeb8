/*
 * tune.h — auto's cost model, apart from everything that communicates: a
 * pure function of (collective, dtype, bytes, ranks, piece size, the
 * transport's designs, link, codec speeds, measured ratios), behind an
 * interface in the spirit of NCCL's tuner plugin (init, getCollInfo,
 * finalize), four calls and one to end with:
 *
 *   zipcclTuneInit      the defaults, before calibration replaces them
 *                       (the communicator's creation, zipcclModelDefaults)
 *   zipcclTuneDecide    per auto call: the designs that apply, each with its
 *                       estimate, and the cheapest that can run
 *   zipcclTuneEstimate  the estimate of one design (Decide's, and the
 *                       measured selection's candidates)
 *   zipcclTuneObserve   fold observations pooled over the ranks in
 *   zipcclTuneFinalize  at the communicator's destroy: release what the
 *                       model holds (nothing on the heap today: it is reset)
 *
 * The model is identical on every rank because its inputs are (switcher.c
 * agrees them); tune_model.c implements it, tune_explore.c is the optional
 * measured selection on top, switcher.c the glue a call goes through.
 * Not installed.
 */
#ifndef ZIPCCL_TUNE_MODEL_H
#define ZIPCCL_TUNE_MODEL_H

#include <stddef.h>

#include "zipccl.h"

#define ZIPCCL_MODEL_CODECS 3 /* the codecs auto chooses among: fast, dense, f3 */
#define ZIPCCL_TUNE_NDESIGNS 12

/* The model's inputs that are not the call's. */
typedef struct {
    double alpha;  /* seconds per message                                    */
    double beta;   /* link bytes per second                                  */
    double enc[ZIPCCL_MODEL_CODECS], dec[ZIPCCL_MODEL_CODECS]; /* codec raw bytes/second */
    double memBw;  /* reduction / copy bytes per second                      */
    double ratio[zipcclNumCollKinds][3][ZIPCCL_MODEL_CODECS]; /* EWMA raw/wire by kind,
                                                               * dtype (bf16, fp16, fp32), codec */
    /* How a compressed call's codec meets its wire. 0 (auto's, the host
     * designs): pipelined over pieces; 1: one after the other, with
     * codecCallS of fixed cost per encode and per decode (the device path
     * today: docs/COLLECTIVES.md §5a). Set only by the projection
     * (runtime/project.c); Init leaves both 0. */
    int serialCodec;
    double codecCallS;
    /* The link inside a node, when it is declared (ZIPCCL_INTRA_GBPS,
     * switcher.c; 0: unknown). With it, a query with a nodeSize is priced
     * on two levels (zipcclTuneEstimateTwoLevel: inside a node at intraBeta
     * and intraAlpha, or alpha if 0; between nodes at beta and alpha), so
     * the model can choose the hier designs; without it, one link. */
    double intraBeta, intraAlpha;
} zipcclTuneModel;

/* One call as the model sees it. */
typedef struct {
    zipcclCollKind_t kind;
    zipcclDataType_t dtype;
    double bytes;      /* the size auto files the call under (zipccl_tune.h)  */
    int nranks;
    size_t pieceBytes; /* the pipelining granularity of our designs           */
    int caps;          /* the transport's zipcclTp* flags (transport.h)       */
    int codecOk;       /* compressed designs can run                          */
    int nodeSize;      /* ranks per node when the ranks span several nodes of
                        * several ranks each (the hier designs apply), else 0 */
} zipcclTuneQuery;

typedef struct {
    zipcclStrategy_t strategy;
    zipcclCodec_t codec;
    zipcclAlgo_t algo;
    const char* name; /* for the log */
    double t;         /* the estimate, seconds */
} zipcclTuneDesign;

/* Every design auto may run, in a fixed order (the measured selection's
 * tables store indices into it); the first three are the fixed strategies'
 * (native, raw, compressed/fast direct), the last two their hierarchical
 * twins (raw/hier, compressed/fast/hier), which apply only to a query with
 * a nodeSize. */
extern const zipcclTuneDesign zipcclTuneDesigns[ZIPCCL_TUNE_NDESIGNS];
int zipcclTuneDesignId(const zipcclTuneDesign* d); /* -1 if not in the table */

/* The arrays' indices of a dtype (bf16, fp16, fp32) and a codec (fast,
 * dense, f3), and the codecs in that order. */
int zipcclTuneDtypeIndex(zipcclDataType_t dt);
/* The pipeline's piece for a link of beta bytes/s: about 4 ms of it, in
 * 64 KiB steps between 512 KiB and 4 MiB (what a communicator sizes its
 * pieces to at init, coll.c, unless ZIPCCL_PIECE_BYTES says; the
 * projection, runtime/project.c, prices calls with it). */
size_t zipcclTunePieceBytes(double beta);
int zipcclTuneCodecIndex(zipcclCodec_t codec);
extern const zipcclCodec_t zipcclTuneCodecs[ZIPCCL_MODEL_CODECS];

/* Defaults: 5 us, 5 GB/s, codec speeds and Gaussian ratios (replaced by
 * calibration and observations). */
void zipcclTuneInit(zipcclTuneModel* m);
/* The designs that apply to q into cand (their estimates in .t; *nc of
 * them, at most ZIPCCL_TUNE_NDESIGNS); returns the index of the cheapest
 * that can run.  Native reductions never apply (their order is not the
 * canonical one).  The hier designs apply when q->nodeSize is set and the
 * transport has host-side control.  With a declared intra-node link
 * (m->intraBeta) every design of such a query is priced on two levels
 * (zipcclTuneEstimateTwoLevel, one NIC per rank), hier included; without
 * one, this one-link model prices the hier designs as their flat direct
 * twins (it sees no node boundary), which come first in the table and so
 * win a tie: the model alone never picks hier, the measured selection
 * (tune_explore.c) measures it. */
int zipcclTuneDecide(const zipcclTuneModel* m, const zipcclTuneQuery* q, zipcclTuneDesign* cand, int* nc);
/* The estimate of one design (also stored in d->t). */
double zipcclTuneEstimate(const zipcclTuneModel* m, const zipcclTuneQuery* q, zipcclTuneDesign* d);

/* A two-level cluster: nodes of nodeSize consecutive ranks (q->nranks a
 * multiple of it, or below it: one node), links inside a node `intra`'s,
 * between nodes `inter`'s (per rank: a node's NICs shared by its ranks).
 * Flat direct and one-shot designs send a rank's bytes to peers in and out
 * of the node at once, inter's share per rank for the latter; a flat ring
 * (one channel) crosses each node boundary once, on one of the node's
 * nodeLinks NICs (k / nodeLinks of inter's per-rank share), every hop as
 * slow as the slowest; native AllGather, ReduceScatter and AllReduce are
 * NCCL's rings, one channel per NIC, at the slower of the node's whole NIC
 * rate (k x inter's per-rank share) and intra's; d->algo == zipcclAlgoHier is
 * COLLECTIVES.md's hierarchical design stage by stage (raw inside a node,
 * d's strategy between nodes): AllGather = the ring across nodes + raw
 * rings in the node; ReduceScatter = the raw exchange to the node's
 * stations + chain or forward across nodes (the design's own choice);
 * AllReduce = both; All-to-All(v) = raw to the node's ranks in parallel with
 * frames to the others. With one node (or nodeSize 1) it is
 * zipcclTuneEstimate on intra's (inter's) link. Sets and returns d->t. */
double zipcclTuneEstimateTwoLevel(const zipcclTuneModel* intra, const zipcclTuneModel* inter, int nodeSize,
                                  int nodeLinks, const zipcclTuneQuery* q, zipcclTuneDesign* d);
/* Observations pooled over the ranks: [kind][dtype][codec] raw and wire
 * bytes of compressed calls, then raw calls' link bytes and seconds, then
 * per codec the codec's bytes and seconds. */
#define ZIPCCL_OBS_RATIO (zipcclNumCollKinds * 3 * ZIPCCL_MODEL_CODECS * 2)
#define ZIPCCL_OBS_LEN (ZIPCCL_OBS_RATIO + 2 + 2 * ZIPCCL_MODEL_CODECS)
void zipcclTuneObserve(zipcclTuneModel* m, const double pooled[ZIPCCL_OBS_LEN]);
/* Release what the model holds; it is all zeros afterwards (Init it again
 * before another use).  Called by the communicator's destroy. */
void zipcclTuneFinalize(zipcclTuneModel* m);

#endif /* ZIPCCL_TUNE_MODEL_H */
