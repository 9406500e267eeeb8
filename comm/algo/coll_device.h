/*
 * coll_device.h — what the designs on device buffers (algo/coll_device.c)
 * offer the layer that runs a decided call (run/coll_run.c): a device
 * communicator's memory (its device scratch, its pinned host staging, the
 * copies between them, counted on the call) and the calls that run on the
 * device: over a device network (every collective), or coded on the device
 * with the frames through host memory (every compressed call).  They call down only: the host designs (coll_algos.h) for
 * the staged frames' exchange, the call agreement's small all-reduce and
 * waits (coll_agree.h), the transport and codec tables, common.c.
 * Not installed.
 */
#ifndef ZIPCCL_COLL_DEVICE_H
#define ZIPCCL_COLL_DEVICE_H

#include "comm_state.h"

/* ---- a device communicator's memory ---- */
enum { zipcclStageSend = 0, zipcclStageRecv = 1, zipcclStagePending = 2 }; /* host staging slots */
/* Host staging slot `slot` of at least `bytes` (the table's pinned
 * allocator, grown by 1/8 more); NULL when out of memory. */
void* zipcclHostStage(struct zipcclComm* c, int slot, size_t bytes);
/* Device -> host (down) and host -> device (up) with the table's copies,
 * after the call's stream, counted as bus bytes and time; a failure names
 * the table. */
zipcclResult_t zipcclDown(struct zipcclComm* c, const zipcclOp* op, void* host, const void* dev, size_t bytes,
                          zipcclExecStats* st);
zipcclResult_t zipcclUp(struct zipcclComm* c, const zipcclOp* op, void* dev, const void* host, size_t bytes,
                        zipcclExecStats* st);
/* The same up, without a wait: ordered on the call's stream, done by the
 * call's closing synchronisation (host must stay unchanged until then). */
zipcclResult_t zipcclUpAsync(struct zipcclComm* c, const zipcclOp* op, void* dev, const void* host, size_t bytes,
                             zipcclExecStats* st);
/* zipcclSystemError "out of ... memory": where is "d:what" (the device's)
 * or "h:what" (host memory). */
zipcclResult_t zipcclNoMemory(const struct zipcclComm* c, const zipcclOp* op, const char* where, size_t bytes);
/* AlltoAllv: elements from buffer start to the end of the last block. */
size_t zipcclExtentOf(const size_t* counts, const size_t* displs, int n);
/* Free the device scratch, host staging and stream of c->dev (no call in
 * flight). */
void zipcclDeviceRelease(struct zipcclComm* c);

/* ---- calls on the device ---- */
/* Whether zipcclRunOnDevice runs this call (else it is staged): every call
 * over a network; every compressed call on a table that codes on the
 * device. */
int zipcclRunsOnDevice(const struct zipcclComm* c, zipcclStrategy_t s);
/* Run it, on the call's stream (op->stream: the communicator's own where it
 * has one). */
zipcclResult_t zipcclRunOnDevice(struct zipcclComm* c, const zipcclOp* op, zipcclStrategy_t s, zipcclExecStats* st);

#endif /* ZIPCCL_COLL_DEVICE_H */
