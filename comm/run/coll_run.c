/*
 * coll_run.c — a decided call, run on its buffers.  The front door (coll.c)
 * has started the call agreement and the switcher has decided the strategy
 * and design; this file runs the call where its buffers live:
 *
 *   host buffers     the transport's own collective (native) or one of our
 *                    designs over its messages (algo/coll_algos.c);
 *   device buffers   (zipcclCommSetDevice; NCCL's own communicators too)
 *     on the device  every call over a device network, and every compressed
 *                    call on a device set to zipcclDeviceCoded: the designs
 *                    of algo/coll_device.c (coded on the device, frames
 *                    through host memory or over the network);
 *     staged         the rest: sendbuf down into host staging (pinned, from
 *                    the device), the host run above on the staging
 *                    with the CPU codec, what was received back up: every
 *                    strategy and design, the same bits as on host buffers.
 *
 * On a device the call runs on the communicator's stream, after the event
 * recorded on the caller's stream at issue; it is synchronised
 * before the call completes, except over a network, where the call ends
 * with an event the caller's stream waits for (coll.c).  A copy that fails
 * leaves the peers waiting for this rank: they time out naming it, as for a
 * stopped rank, and the communicator breaks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_agree.h"
#include "coll_algos.h"
#include "coll_device.h"
#include "coll_run.h"

/* ---- host buffers ------------------------------------------------------------ */

static zipcclResult_t runHost(struct zipcclComm* c, const zipcclOp* op, zipcclStrategy_t s, zipcclExecStats* st) {
    const zipcclTransport* tp = c->tp;
    if (s == zipcclStrategyNative) {
        ZIPCCL_TRY(zipcclAgreeWait(c)); /* the transport's collectives cannot survive ranks that disagree */
        double yieldS = -1;
        ZIPCCL_TRY(tp->nativeStart(c, op, st, c->agree.ctl, &yieldS));
        ZIPCCL_TRY(zipcclWaitSlots(c, c->agree.ctl, 1, zipcclCollName(op->kind), yieldS, &st->wireSeconds));
        return tp->nativeFinish(c, op, st);
    }
    return zipcclRunAlgo(c, op, st);
}

/* ---- device buffers, staged ------------------------------------------------------ */


static zipcclResult_t runStaged(struct zipcclComm* c, const zipcclOp* op, zipcclStrategy_t s, zipcclExecStats* st) {
    const int n = c->nranks;
    const size_t esz = zipcclTypeSize(op->dtype), blk = op->count * esz;
    size_t sendB = 0, recvB = 0;
    switch (op->kind) {
    case zipcclCollAllGather: sendB = blk, recvB = (size_t)n * blk; break;
    case zipcclCollReduceScatter: sendB = (size_t)n * blk, recvB = blk; break;
    case zipcclCollAllReduce: sendB = recvB = blk; break;
    case zipcclCollAlltoAll: sendB = recvB = (size_t)n * blk; break;
    case zipcclCollAlltoAllv:
        sendB = zipcclExtentOf(op->sendcounts, op->sdispls, n) * esz;
        recvB = zipcclExtentOf(op->recvcounts, op->rdispls, n) * esz;
        break;
    default: return zipcclSetError(zipcclInternalError, "staged run of collective %d", (int)op->kind);
    }
    char* hs = zipcclHostStage(c, zipcclStageSend, sendB);
    if (!hs) return zipcclNoMemory(c, op, "h:the send staging", sendB);
    char* hr = zipcclHostStage(c, zipcclStageRecv, recvB);
    if (!hr) return zipcclNoMemory(c, op, "h:the receive staging", recvB);
    ZIPCCL_TRY(zipcclDown(c, op, hs, op->sendbuf, sendB, st));
    zipcclOp h = *op;
    h.sendbuf = hs;
    h.recvbuf = hr;
    ZIPCCL_TRY(runHost(c, &h, s, st));
    /* Up without a wait: the call's closing synchronisation
     * (zipcclRunDecided) completes them, and the staging is not touched
     * before it. */
    if (op->kind != zipcclCollAlltoAllv) return zipcclUpAsync(c, op, op->recvbuf, hr, recvB, st);
    /* Only the blocks received: the gaps between them are the caller's. */
    for (int i = 0; i < n; i++) {
        const size_t at = op->rdispls[i] * esz;
        ZIPCCL_TRY(zipcclUpAsync(c, op, (char*)op->recvbuf + at, hr + at, op->recvcounts[i] * esz, st));
    }
    return zipcclSuccess;
}

/* ---- the entry ------------------------------------------------------------------- */

/* A timing event on the communicator's stream (a trace's span). */
static zipcclResult_t span(struct zipcclComm* c, const zipcclOp* op, void** event) {
    if (zdev_event_create(c->dev, event, 1) == 0 && zdev_event_record(c->dev, *event, c->devStream) == 0)
        return zipcclSuccess;
    zipcclResult_t r = zipcclDevFail(c, zipcclCollName(op->kind), "recording a timing event");
    zdev_event_destroy(c->dev, *event);
    *event = NULL;
    return r;
}

zipcclResult_t zipcclRunDecided(struct zipcclComm* c, const zipcclOp* op, zipcclStrategy_t s, zipcclExecStats* st) {
    if (!c->onDevice) return runHost(c, op, s, st);
    if (zdev_bind(c->dev)) return zipcclDevFail(c, zipcclCollName(op->kind), "binding this thread");
    /* The call runs on the communicator's stream, after the point the
     * caller's stream had reached at issue, and is complete on return
     * (over a network: ordered, with an event at its end, coll.c). */
    zipcclOp d = *op;
    d.stream = c->devStream;
    if (op->devEvent && zdev_stream_wait_event(c->dev, c->devStream, op->devEvent))
        return zipcclDevFail(c, zipcclCollName(op->kind), "ordering after the caller's stream");
    ZIPCCL_TRY(span(c, op, &st->spanBegin));
    zipcclResult_t res = zipcclRunsOnDevice(c, s) ? zipcclRunOnDevice(c, &d, s, st) : runStaged(c, &d, s, st);
    if (res == zipcclSuccess) res = span(c, op, &st->spanEnd);
    if (res == zipcclSuccess && !c->hasNet && zdev_stream_sync(c->dev, c->devStream))
        res = zipcclDevFail(c, zipcclCollName(op->kind), "synchronising the communicator's stream");
    return res;
}
