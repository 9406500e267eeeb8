/*
 * tune_explore.h — what the measured selection (tune_explore.c) offers the
 * switcher (the choice among the model's candidates) and the front door
 * (the barrier before a measured call).  It calls down only: the cost model
 * (tune.h), the call agreement's waits (coll_agree.h), common.c.  Not
 * installed.
 */
#ifndef ZIPCCL_TUNE_EXPLORE_H
#define ZIPCCL_TUNE_EXPLORE_H

#include "comm_state.h"

/* Auto chooses by measuring (ZIPCCL_AUTO_EXPLORE, a transport with host
 * control, several ranks); 0: by the cost model alone. */
int zipcclExploreOn(const struct zipcclComm* c);
/* A settled bucket's call: *out is its fastest measured design (returns 1). */
int zipcclExploreSettled(struct zipcclComm* c, const zipcclOp* op, double total, zipcclCallConfig_t* out);
/* Pick among the model's candidates from the bucket's measurements (*best:
 * an index into cand); sets model.probeBucket when this call is measured.
 * Returns a word for the log.  Does not communicate. */
const char* zipcclExploreChoose(zipcclModel* m, const zipcclOp* op, double total, const zipcclTuneDesign* cand,
                                int nc, int* best);
/* Before a measured call runs: the barrier that starts it on all ranks. */
zipcclResult_t zipcclExploreBeforeRun(struct zipcclComm* c, const zipcclOp* op);
/* After it ran: its time into the bucket, agreed over the ranks when the
 * exploration or a re-measured pair is complete. */
zipcclResult_t zipcclExploreRecord(struct zipcclComm* c, double seconds);
zipcclTuneBucket* zipcclExploreBucket(zipcclModel* m, const zipcclOp* op, double total);
double zipcclExploreRunsMedian(const zipcclTuneBucket* b, int i);
/* Will the bucket's next auto call be measured? */
int zipcclExploreMeasuresNext(const zipcclTuneBucket* b);

#endif /* ZIPCCL_TUNE_EXPLORE_H */
