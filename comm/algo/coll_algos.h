/*
 * coll_algos.h — what the designs (algo/coll_algos.c) offer the front door:
 * one call that runs a raw or compressed design over the transport's
 * messages.  The designs call down only: the call agreement (coll_agree.h),
 * the transport and codec tables, common.c.  Not installed.
 */
#ifndef ZIPCCL_COLL_ALGOS_H
#define ZIPCCL_COLL_ALGOS_H

#include "comm_state.h"

/* Run `op` with the design and strategy (raw or compressed) of op->cfg,
 * already decided; what it cost goes into *st. */
zipcclResult_t zipcclRunAlgo(struct zipcclComm* c, const zipcclOp* op, zipcclExecStats* st);
/* AllReduce's blocks: count split as evenly as it goes, the first ones one
 * element longer (every design's split, so their sums agree bit for bit). */
void zipcclSplitBlocks(size_t count, int n, size_t* counts, size_t* displs);

#endif /* ZIPCCL_COLL_ALGOS_H */
