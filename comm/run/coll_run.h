/*
 * coll_run.h — what run/coll_run.c offers the front door: running a call
 * whose design is decided, on host buffers or on device buffers over a host
 * transport, and freeing a communicator's device staging.  It calls down
 * only: the designs (coll_algos.h), the call agreement's waits and small
 * all-reduce (coll_agree.h), the transport and codec tables, common.c.
 * Not installed.
 */
#ifndef ZIPCCL_COLL_RUN_H
#define ZIPCCL_COLL_RUN_H

#include "comm_state.h"

/* Run `op` with strategy s (native, raw or compressed) and the design of
 * op->cfg, already decided and the same on every rank; what it cost goes
 * into *st. */
zipcclResult_t zipcclRunDecided(struct zipcclComm* c, const zipcclOp* op, zipcclStrategy_t s, zipcclExecStats* st);
#endif /* ZIPCCL_COLL_RUN_H */
