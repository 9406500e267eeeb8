/*
 * transport_nccl.c — NCCL in ZipCCL, two ways, one network:
 *
 *   a device network (zipcclNcclNetCreate, behind zipcclCommUseNccl): an
 *       NCCL communicator joined with a unique id that an MPI communicator
 *       spread, owned by the network.  The MPI communicator keeps the
 *       control (call agreement, frame sizes, timeouts of the agreement);
 *       NCCL only moves device memory;
 *   a transport (zipcclCommInitNccl over the caller's ncclComm_t): rank and
 *       size from it, no host control and no message entries.  The front
 *       door gives such a communicator the CUDA table of the NCCL
 *       communicator's device and the network over the same ncclComm_t
 *       (zipcclNcclTransportNet, not owned), so its calls run the designs of
 *       algo/coll_device.c like any communicator with a network, the frame
 *       sizes travelling over NCCL itself.
 *
 * The network's entries: exchange = one group of ncclSend/ncclRecv of exact
 * sizes (the rank itself included: NCCL copies a self send on the device),
 * ordered on the call's stream; collective = ncclAllGather /
 * ncclReduceScatter / ncclAllReduce (ncclAvg for avg), strategy native.
 * Every NCCL result is checked and named in the error (which call, with
 * which peer); a failed group is still closed.
 *
 * Left out: timeouts inside NCCL (a dead peer hangs its kernels; the
 * communicator's stream synchronisation then waits with it), NCCL's
 * non-blocking communicators (ncclCommInitRankConfig with blocking = 0).
 */
#include <stdio.h>
#include <string.h>

#include "comm_state.h"

/* ---- the request entries of a transport without messages ------------------ */
/* Calls run on the device through the network: no request slot is ever in
 * flight. */
static void ncclReqInit(void* reqs, int n) { memset(reqs, 0, sizeof(int) * (size_t)n); }
static int ncclReqActive(const void* reqs, int i) { (void)reqs, (void)i; return 0; }
static zipcclResult_t ncclTest(struct zipcclComm* c, void* reqs, int i, int* done) {
    (void)c, (void)reqs, (void)i;
    *done = 1;
    return zipcclSuccess;
}
static zipcclResult_t ncclTestAll(struct zipcclComm* c, void* reqs, int n, int* done) {
    (void)c, (void)reqs, (void)n;
    *done = 1;
    return zipcclSuccess;
}
static void ncclAbandon(struct zipcclComm* c, void* reqs, int n, int nsend) { (void)c, (void)reqs, (void)n, (void)nsend; }
static void ncclIdle(struct zipcclComm* c, double idleSeconds, double yieldSeconds) {
    (void)c, (void)idleSeconds, (void)yieldSeconds;
}

#ifndef ZIPCCL_HAVE_CUDA

#define NO_NCCL "libzipccl was built without CUDA/NCCL (no nvcc)"
static zipcclResult_t ncclInit(struct zipcclComm* c, const void* handle) {
    (void)c, (void)handle;
    return zipcclSetError(zipcclUnsupported, "zipcclCommInitNccl: " NO_NCCL);
}
static void ncclDestroy(struct zipcclComm* c) { (void)c; }
zipcclResult_t zipcclNcclUniqueId(unsigned char id[ZIPCCL_NCCL_ID_BYTES]) {
    (void)id;
    return zipcclSetError(zipcclUnsupported, "zipcclCommUseNccl: " NO_NCCL);
}
zipcclResult_t zipcclNcclNetCreate(int rank, int nranks, const unsigned char id[ZIPCCL_NCCL_ID_BYTES],
                                   zipcclDeviceNet_t* out) {
    (void)rank, (void)nranks, (void)id, (void)out;
    return zipcclSetError(zipcclUnsupported, "zipcclCommUseNccl: " NO_NCCL);
}
zipcclResult_t zipcclNcclTransportNet(struct zipcclComm* c, int* device, zipcclDeviceNet_t* out) {
    (void)c, (void)device, (void)out;
    return zipcclSetError(zipcclUnsupported, "zipcclCommInitNccl: " NO_NCCL);
}

#else

#include <nccl.h>
#include <stdlib.h>

static zipcclResult_t ncclOk(ncclResult_t e, const char* what) {
    if (e == ncclSuccess || e == ncclInProgress) return zipcclSuccess;
    return zipcclSetError(zipcclTransportError, "%s: NCCL error: %s", what, ncclGetErrorString(e));
}

/* The sends and receives of one group: the first failure is kept and named
 * (which call, to or from which peer), the group is still closed (an open
 * group would take the next calls in), and the failure wins over the
 * group's own result. */
typedef struct {
    ncclResult_t rc;
    char call[64];
} NcclGroup;
static void groupCall(NcclGroup* g, ncclResult_t rc, const char* call, int peer) {
    if (g->rc != ncclSuccess || rc == ncclSuccess || rc == ncclInProgress) return;
    g->rc = rc;
    snprintf(g->call, sizeof g->call, "%s with peer %d", call, peer);
}
static zipcclResult_t groupEnd(const NcclGroup* g, const char* what) {
    const ncclResult_t end = ncclGroupEnd();
    if (g->rc != ncclSuccess)
        return zipcclSetError(zipcclTransportError, "%s: %s: NCCL error: %s", what, g->call,
                              ncclGetErrorString(g->rc));
    return ncclOk(end, what);
}

static ncclDataType_t ncclType(zipcclDataType_t dt) {
    return dt == zipcclFloat32 ? ncclFloat32 : dt == zipcclFloat16 ? ncclFloat16 : ncclBfloat16;
}

/* ---- the network -------------------------------------------------------------- */

typedef struct {
    ncclComm_t nccl;
    int nranks;
    int owned; /* made by zipcclNcclNetCreate: destroyed with the network */
} NcclNet;

static zipcclResult_t netExchange(void* ctx, const void* const* send, const size_t* sendBytes, void* const* recv,
                                  const size_t* recvBytes, void* stream) {
    NcclNet* x = ctx;
    ZIPCCL_TRY(ncclOk(ncclGroupStart(), "NCCL exchange"));
    NcclGroup g = {ncclSuccess, ""};
    for (int p = 0; p < x->nranks; p++) {
        if (sendBytes[p]) groupCall(&g, ncclSend(send[p], sendBytes[p], ncclUint8, p, x->nccl, stream), "ncclSend", p);
        if (recvBytes[p]) groupCall(&g, ncclRecv(recv[p], recvBytes[p], ncclUint8, p, x->nccl, stream), "ncclRecv", p);
    }
    return groupEnd(&g, "NCCL exchange");
}

static zipcclResult_t netCollective(void* ctx, zipcclCollKind_t kind, const void* sendbuf, void* recvbuf, size_t count,
                                    zipcclDataType_t dtype, zipcclRedOp_t op, void* stream) {
    NcclNet* x = ctx;
    const ncclDataType_t t = ncclType(dtype);
    const ncclRedOp_t rop = op == zipcclAvg ? ncclAvg : ncclSum;
    switch (kind) {
    case zipcclCollAllGather: return ncclOk(ncclAllGather(sendbuf, recvbuf, count, t, x->nccl, stream), "ncclAllGather");
    case zipcclCollReduceScatter:
        return ncclOk(ncclReduceScatter(sendbuf, recvbuf, count, t, rop, x->nccl, stream), "ncclReduceScatter");
    case zipcclCollAllReduce:
        return ncclOk(ncclAllReduce(sendbuf, recvbuf, count, t, rop, x->nccl, stream), "ncclAllReduce");
    default: return zipcclSetError(zipcclInternalError, "NCCL network: no native %s", zipcclCollName(kind));
    }
}

static void netDestroy(void* ctx) {
    NcclNet* x = ctx;
    if (x->owned && x->nccl) ncclCommDestroy(x->nccl);
    free(x);
}

static zipcclResult_t netOf(ncclComm_t nc, int nranks, int owned, zipcclDeviceNet_t* out) {
    NcclNet* x = calloc(1, sizeof *x);
    if (!x) return zipcclSetError(zipcclSystemError, "NCCL network: out of memory");
    *x = (NcclNet){.nccl = nc, .nranks = nranks, .owned = owned};
    *out = (zipcclDeviceNet_t){.name = "nccl", .ctx = x, .exchange = netExchange, .collective = netCollective,
                               .destroy = netDestroy};
    return zipcclSuccess;
}

_Static_assert(sizeof(ncclUniqueId) == ZIPCCL_NCCL_ID_BYTES, "NCCL's unique id is 128 bytes");

zipcclResult_t zipcclNcclUniqueId(unsigned char id[ZIPCCL_NCCL_ID_BYTES]) {
    ncclUniqueId u;
    ZIPCCL_TRY(ncclOk(ncclGetUniqueId(&u), "zipcclCommUseNccl: ncclGetUniqueId"));
    memcpy(id, &u, sizeof u);
    return zipcclSuccess;
}

zipcclResult_t zipcclNcclNetCreate(int rank, int nranks, const unsigned char id[ZIPCCL_NCCL_ID_BYTES],
                                   zipcclDeviceNet_t* out) {
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclComm_t nc = NULL;
    ZIPCCL_TRY(ncclOk(ncclCommInitRank(&nc, nranks, u, rank), "zipcclCommUseNccl: ncclCommInitRank"));
    zipcclResult_t res = netOf(nc, nranks, 1, out);
    if (res != zipcclSuccess) ncclCommDestroy(nc);
    return res;
}

/* ---- the transport ------------------------------------------------------------ */

static zipcclResult_t ncclInit(struct zipcclComm* c, const void* handle) {
    ncclComm_t nc = (ncclComm_t)handle;
    ZIPCCL_TRY(ncclOk(ncclCommUserRank(nc, &c->rank), "ncclCommUserRank"));
    ZIPCCL_TRY(ncclOk(ncclCommCount(nc, &c->nranks), "ncclCommCount"));
    c->tpState = nc; /* the caller's, not owned */
    c->nodeSize = 0; /* no hier designs over NCCL (ZIPCCL_NODE_SIZE ignored) */
    c->threaded = 1; /* a progress thread: compressed calls wait for their sizes there, not in the caller */
    return zipcclSuccess;
}
static void ncclDestroy(struct zipcclComm* c) { c->tpState = NULL; }

zipcclResult_t zipcclNcclTransportNet(struct zipcclComm* c, int* device, zipcclDeviceNet_t* out) {
    ncclComm_t nc = c->tpState;
    ZIPCCL_TRY(ncclOk(ncclCommCuDevice(nc, device), "zipcclCommInitNccl: ncclCommCuDevice"));
    return netOf(nc, c->nranks, 0, out);
}

#endif /* ZIPCCL_HAVE_CUDA */

/* No message entries and no host-side control: the front door runs every
 * call through the network (algo/coll_device.c), whose native is NCCL's. */
const zipcclTransport zipcclTransportNccl = {
    .name = "nccl",
    .caps = 0,
    .device = 1,
    .reqSize = sizeof(int),
    .init = ncclInit,
    .destroy = ncclDestroy,
    .reqInit = ncclReqInit,
    .reqActive = ncclReqActive,
    .testAll = ncclTestAll,
    .test = ncclTest,
    .abandon = ncclAbandon,
    .idle = ncclIdle,
};
