/*
 * coll_agree.h — what the call agreement (coll_agree.c) offers the layers
 * above it: the designs (algo/), the switcher and explorer (tune/) and the
 * front door (coll.c).  The agreement sits below the designs because a
 * design finishes it itself (its first sends go out while the descriptors
 * travel; its receives are posted once the agreement is in) and answers
 * liveness queries in its waits (zipcclIdle).  It calls only common.c and
 * the transport table.  Not installed.
 */
#ifndef ZIPCCL_COLL_AGREE_H
#define ZIPCCL_COLL_AGREE_H

#include "comm_state.h"

zipcclResult_t zipcclAgreeInit(struct zipcclComm* c); /* after the transport's init */
void zipcclAgreeFree(struct zipcclComm* c);
/* Post this call's descriptors (a no-op without zipcclTpHostControl and on
 * one-rank communicators). */
zipcclResult_t zipcclAgreeStart(struct zipcclComm* c, const zipcclOp* op);
/* *done = the agreement is complete (or none is in flight); returns its
 * verdict: zipcclMismatch when the ranks disagree, the same on every rank. */
zipcclResult_t zipcclAgreeTest(struct zipcclComm* c, int* done);
/* Wait for it, with the communicator's timeout (warnings name the ranks whose
 * descriptors are missing).  Every collective of the transport's (native,
 * the switcher's agreements and barriers) comes after this, so ranks that
 * are in different calls never meet in different collectives. */
zipcclResult_t zipcclAgreeWait(struct zipcclComm* c);
/* After zipcclAgreeWait succeeded for the call in hand (with host control
 * and more than one rank): the largest block any rank sends or receives
 * in it (descriptor word 6). */
size_t zipcclAgreedMaxBlock(const struct zipcclComm* c);
/* Answer the liveness queries of peers in a long wait (rate-limited; called
 * from every idle poll). */
void zipcclAnswerPings(struct zipcclComm* c);
/* Ask every peer whether it is inside a call on this communicator; `out`
 * gets e.g. "rank 3 does not answer (...)".  ~0.5 s; for slow-wait warnings. */
void zipcclQueryPeers(struct zipcclComm* c, char* out, size_t cap);
/* Seconds into a wait at which it prints its first warning: 10, or half
 * the timeout if that is sooner; each wait doubles it after every warning. */
double zipcclFirstNote(const struct zipcclComm* c);
/* "rank 3" / "ranks 1, 2, 5" from the ranks whose flag is set. */
void zipcclRankList(char* out, size_t cap, const char* flags, int n);
/* Between empty polls of a wait: answer pings, then the transport's idle. */
void zipcclIdle(struct zipcclComm* c, double idleSeconds);
/* Wait for request slots [0, n) of a collective of the transport's own
 * (which does not say whom it waits for) with the communicator's timeout;
 * warnings name the peers that do not answer a liveness query.  `what`
 * names the call; waitSeconds (may be NULL) accumulates the time. */
zipcclResult_t zipcclWaitSlots(struct zipcclComm* c, void* reqs, int n, const char* what, double yieldS,
                               double* waitSeconds);
/* After the call agreement: in[0, n) reduced over the ranks into out (may
 * be in), and a barrier (an ibarrier waited with the timeout, then the
 * transport's blocking one), both with the communicator's timeout. */
zipcclResult_t zipcclAgreedAllreduce(struct zipcclComm* c, const double* in, double* out, int n, zipcclTpOp op,
                                     const char* what);
zipcclResult_t zipcclAgreedBarrier(struct zipcclComm* c, const char* what);

#endif /* ZIPCCL_COLL_AGREE_H */
