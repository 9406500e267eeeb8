/*
 * transport.h — what ZipCCL's collectives need from a transport, as one
 * table of function pointers (the ggml-backend / NCCL-net-plugin pattern).
 * A communicator holds a pointer to its transport's table and the
 * transport's private state; the designs (coll_algos.c), the call agreement
 * (coll_agree.c), the switcher (switcher.c) and the front door (coll.c)
 * reach the wire only through it, so nothing but the transport files
 * includes mpi.h or nccl.h.
 *
 * The model is MPI's, which the designs were written for: messages are
 * bytes with a peer and a tag, posted without blocking into request slots
 * the caller owns (an array of `reqSize`-byte handles it allocates), and
 * completed by testing; a receive may be posted with a capacity larger than
 * the message (a compressed piece's size is only bounded in advance) and
 * learns the size on completion; messages between two ranks on one channel
 * match receives in posting order.  Two channels: data (the designs'
 * pieces) and control (call descriptors, liveness pings), so control
 * traffic never matches a data receive.
 *
 * Transports: transport_mpi.c (host buffers, every entry) and
 * transport_nccl.c (device buffers).  NCCL's point-to-point has no
 * receive larger than its message and orders work on streams, so it has
 * none of the message entries: an NCCL communicator's calls run over a
 * device network (zipcclDeviceNet_t, zipccl.h: rounds of grouped sends and
 * receives of exact sizes) by the designs of algo/coll_device.c, the same
 * ones an MPI communicator with device buffers runs over NCCL
 * (zipcclCommUseNccl); see docs/COLLECTIVES.md.
 *
 * Left out: one-sided operations, registration of user buffers, more than
 * one data channel.
 */
#ifndef ZIPCCL_TRANSPORT_H
#define ZIPCCL_TRANSPORT_H

#include <stddef.h>

#include "zipccl.h"

struct zipcclComm;
struct zipcclRequest;

enum { zipcclChanData = 0, zipcclChanControl = 1 };
#define ZIPCCL_ANY_TAG (-1)

/* A completed receive: who sent it, its tag and size.  `truncated`: the
 * message was larger than the receive's capacity (a peer that disagrees on
 * the call); bytes is then meaningless. */
typedef struct {
    int peer, tag;
    size_t bytes;
    int truncated;
} zipcclTpStatus;

/* The reductions of the small agreement all-reduce (over doubles). */
typedef enum { zipcclTpMax = 0, zipcclTpMin = 1, zipcclTpSum = 2 } zipcclTpOp;

/* What a transport can do beyond the message entries. */
enum {
    zipcclTpHostControl = 1 << 0, /* control channel, agreement all-reduce and
                                   * barrier with deadlines: the call
                                   * agreement, calibration and measured
                                   * selection run on it                    */
    zipcclTpRing = 1 << 1,        /* the ring ReduceScatter / AllReduce      */
    zipcclTpOneShot = 1 << 2      /* the one-shot AllGather / AllReduce      */
};

typedef struct zipcclExecStats zipcclExecStats;

typedef struct zipcclTransport {
    const char* name; /* "mpi", "nccl" */
    int caps;         /* zipcclTp* flags                                    */
    int device;       /* buffers are device memory: the communicator codes
                       * with the CUDA table of codec_ops.h, else the CPU's  */
    size_t reqSize;   /* bytes of one request handle                        */

    /* Rank, size, channels and the tag bound (c->tagSizes) from the
     * caller's handle (an MPI_Comm*, an ncclComm_t); destroy frees what
     * init made, except, on a broken communicator, buffers in-flight sends
     * may still read. */
    zipcclResult_t (*init)(struct zipcclComm* c, const void* handle);
    void (*destroy)(struct zipcclComm* c);

    /* ---- messages (NULL on NCCL, whose calls run over a network) ---- */
    void (*reqInit)(void* reqs, int n);            /* every slot empty      */
    int (*reqActive)(const void* reqs, int i);     /* slot i is in flight   */
    zipcclResult_t (*isend)(struct zipcclComm* c, int chan, const void* buf, size_t bytes, int peer, int tag,
                            void* reqs, int i);
    /* tag may be ZIPCCL_ANY_TAG; cap bounds the message. */
    zipcclResult_t (*irecv)(struct zipcclComm* c, int chan, void* buf, size_t cap, int peer, int tag,
                            void* reqs, int i);
    /* Complete what has arrived among reqs[0, n): *count of them, their
     * slots in idx and statuses in st; *count = -1 when no slot is active.
     * Completed slots become empty. */
    zipcclResult_t (*testSome)(struct zipcclComm* c, void* reqs, int n, int* count, int* idx, zipcclTpStatus* st);
    /* *done = every slot of reqs[0, n) has completed (then all are empty). */
    zipcclResult_t (*testAll)(struct zipcclComm* c, void* reqs, int n, int* done);
    zipcclResult_t (*test)(struct zipcclComm* c, void* reqs, int i, int* done);
    /* After a failure: withdraw receive slots [0, n) (cancelled; one that a
     * message has matched gets a second to finish, then is left to the
     * transport) and forget send slots [n, n + nsend) (their buffers must
     * stay alive: coll.c breaks the communicator). */
    void (*abandon)(struct zipcclComm* c, void* reqs, int n, int nsend);
    /* Take one message with `tag` that is waiting on `chan`, if any
     * (*peer = -1 if none): the liveness pings. */
    zipcclResult_t (*poll)(struct zipcclComm* c, int chan, int tag, void* buf, size_t bytes, int* peer);
    /* Between polls that found nothing, idleSeconds into a wait: yield
     * the core for the first yieldSeconds (< 0: the transport's default),
     * then nap. */
    void (*idle)(struct zipcclComm* c, double idleSeconds, double yieldSeconds);

    /* ---- small collectives on the host (zipcclTpHostControl) ---- */
    /* Non-blocking, into slot 0 of req; the caller waits with its deadline
     * (coll_agree.c, zipcclWaitSlots) and starts them only after the call
     * agreement, so ranks in different calls never meet in them. */
    zipcclResult_t (*iallreduce)(struct zipcclComm* c, const double* in, double* out, int n, zipcclTpOp op,
                                 void* req);
    zipcclResult_t (*ibarrier)(struct zipcclComm* c, void* req);
    /* A blocking barrier, for when every rank is known to have entered it
     * (after an ibarrier): how the measuring calls start (switcher.c). */
    zipcclResult_t (*barrier)(struct zipcclComm* c);
    /* Latency (s) and bandwidth (bytes/s) between two ranks, measured on
     * those two; the others return zeros (the caller takes the maximum). */
    zipcclResult_t (*pingPong)(struct zipcclComm* c, double* alpha, double* beta);

    /* ---- whole collectives (host buffers; NULL on NCCL) ---- */
    /* The transport's own collective (strategy native): started into slot 0
     * of req, waited by the caller, then finished (avg's division by n).
     * *yieldS: how long the waiter should yield between polls before
     * napping (< 0: the default). */
    zipcclResult_t (*nativeStart)(struct zipcclComm* c, const struct zipcclRequest* op, zipcclExecStats* st,
                                  void* req, double* yieldS);
    zipcclResult_t (*nativeFinish)(struct zipcclComm* c, const struct zipcclRequest* op, zipcclExecStats* st);
} zipcclTransport;

/* NCCL as a device network (zipcclCommUseNccl, transport_nccl.c): a unique
 * id made on one rank; an NCCL communicator joined with it on the current
 * device, as a zipcclDeviceNet_t whose exchange is grouped ncclSend /
 * ncclRecv and whose collectives are NCCL's.  zipcclUnsupported without
 * NCCL. */
#define ZIPCCL_NCCL_ID_BYTES 128
zipcclResult_t zipcclNcclUniqueId(unsigned char id[ZIPCCL_NCCL_ID_BYTES]);
zipcclResult_t zipcclNcclNetCreate(int rank, int nranks, const unsigned char id[ZIPCCL_NCCL_ID_BYTES],
                                   zipcclDeviceNet_t* out);
/* The network of an NCCL transport's communicator: its own ncclComm_t (not
 * owned), and the CUDA device that communicator is on. */
zipcclResult_t zipcclNcclTransportNet(struct zipcclComm* c, int* device, zipcclDeviceNet_t* out);

extern const zipcclTransport zipcclTransportMpi;
extern const zipcclTransport zipcclTransportNccl;

#endif /* ZIPCCL_TRANSPORT_H */
