/*
 * switcher.h — what the switcher (switcher.c) offers the front door: the
 * model's set-up, link calibration, the per-call decision (strategy, codec,
 * design) and the observations after the call.  It calls down only: the
 * measured selection (tune_explore.h), the cost model (tune.h), the call
 * agreement's waits (coll_agree.h), the CPU codec (calibration), common.c.
 * Not installed.
 */
#ifndef ZIPCCL_SWITCHER_H
#define ZIPCCL_SWITCHER_H

#include "comm_state.h"

void zipcclModelDefaults(zipcclModel* m);
/* alpha and beta, once per communicator (collective): the ping-pong unless
 * ZIPCCL_CALIBRATE=0 (or NCCL), then ZIPCCL_LINK_GBPS/_ALPHA_US override;
 * with neither, the defaults (5 us, 5 GB/s). */
zipcclResult_t zipcclModelLink(struct zipcclComm* c);
zipcclResult_t zipcclModelCalibrate(struct zipcclComm* c);
/* Resolve strategy/codec/algo for `op` (cfg->strategy may be auto), the
 * same on every rank.  A call it chose to measure has model.probeBucket
 * set: the caller runs zipcclExploreBeforeRun and times from there. */
zipcclResult_t zipcclModelDecide(struct zipcclComm* c, const zipcclOp* op, zipcclCallConfig_t* out);
/* Before the communicator is freed: complete the AlltoAllv size agreement
 * still in flight (it writes into the model).  Fails after the timeout. */
zipcclResult_t zipcclModelFinish(struct zipcclComm* c);
zipcclResult_t zipcclModelObserve(struct zipcclComm* c, const zipcclOp* op,
                                  const zipcclExecStats* st, int wasAuto);

#endif /* ZIPCCL_SWITCHER_H */
