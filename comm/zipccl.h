/*
 * zipccl.h — the public contract of ZipCCL.
 *
 * ZipCCL moves floating-point tensors between ranks with their payloads
 * compressed losslessly.  Two layers live behind this one header:
 *
 *   1. The codec.  zipcclCompress / zipcclDecompress turn a bf16, fp16 or fp32
 *      array into a self-describing frame (docs/FORMAT.md) and back, bit for
 *      bit.  The exponent field is coded with a code derived from a Gaussian
 *      model of the tensor (no histogram pass); sign and mantissa stay raw.
 *      CPU (scalar, AVX2, AVX-512) and CUDA encoders emit identical bytes.
 *
 *   2. The collectives.  AllGather, ReduceScatter, AllReduce, AlltoAll and
 *      AlltoAllv over an Open MPI communicator (host buffers) or NCCL (device
 *      buffers), with a per-call strategy: the transport's own collective
 *      (native), our algorithm over an uncompressed wire (raw), the same
 *      algorithm over a compressed wire (compressed), or a cost model that
 *      picks one per call (auto).  compressed == raw, bit for bit, always.
 *
 * Conventions (after NCCL and zstd):
 *   - every call returns a zipcclResult_t; zipcclGetErrorString() names it,
 *     zipcclGetLastErrorDetail() says what exactly was wrong (thread-local);
 *   - nothing in the hot path allocates: outputs go to caller buffers sized
 *     with the *Bound() functions;
 *   - collectives share one argument order:
 *       (sendbuf, recvbuf, count, dtype, [op], comm, cfg, stream)
 *     where cfg may be NULL (communicator defaults) and stream is a
 *     cudaStream_t for NCCL communicators, a stream of the communicator's
 *     device (zipcclCommSetDevice; NULL: its compute stream) for MPI ones
 *     on device buffers, and NULL (ignored) for MPI ones on host buffers.
 *   - counts are in elements, sizes in bytes.
 */
#ifndef ZIPCCL_H
#define ZIPCCL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZIPCCL_VERSION_MAJOR 0
#define ZIPCCL_VERSION_MINOR 1
/* The newest frame version this library reads and writes (docs/FORMAT.md);
 * it reads every older one (1, 2, 3). It writes 4 for every compressed frame
 * of codec dense and the lowest that fits for every other frame (FORMAT.md
 * §2). tests/test_codec.c holds it to the codec's own. */
#define ZIPCCL_FORMAT_VERSION 4

/* ------------------------------------------------------------------------ */
/* Result codes                                                             */
/* ------------------------------------------------------------------------ */

typedef enum {
    zipcclSuccess = 0,
    zipcclInvalidArgument = 1,  /* null pointer, bad dtype/op/count, ...     */
    zipcclDstTooSmall = 2,      /* caller buffer smaller than needed         */
    zipcclCorruptStream = 3,    /* frame fails validation                    */
    zipcclChecksumMismatch = 4, /* frame checksum does not match its bytes   */
    zipcclUnsupported = 5,      /* valid request this build/format can't do  */
    zipcclSystemError = 6,      /* OS / allocation / CUDA runtime failure    */
    zipcclTransportError = 7,   /* MPI or NCCL reported an error             */
    zipcclMismatch = 8,         /* ranks disagree on the call (collective,
                                 * dtype, op, count, strategy, design, piece
                                 * size, AlltoAllv counts): every rank gets it
                                 * (MPI communicators; see below)           */
    zipcclTimeout = 9,          /* collective did not complete in time       */
    /* 10 was zipcclInProgress, never returned (zipcclTest reports an
     * unfinished request through its flag); the number stays retired. */
    zipcclInternalError = 11,
    zipcclCommBroken = 12,      /* an earlier call on this communicator failed
                                 * mid-flight (timeout, mismatch, transport
                                 * error): it refuses every call; the detail
                                 * names that failure.  Destroy it.          */
    zipcclNumResults = 13
} zipcclResult_t;

const char* zipcclGetErrorString(zipcclResult_t result);
/* Human-readable detail of the last error raised on this thread ("" if none). */
const char* zipcclGetLastErrorDetail(void);

/* ------------------------------------------------------------------------ */
/* Data types (numbering follows NCCL's ncclDataType_t)                     */
/* ------------------------------------------------------------------------ */

typedef enum {
    zipcclFloat16 = 6,
    zipcclFloat32 = 7,
    zipcclBfloat16 = 9
} zipcclDataType_t;

/* Bytes per element, or 0 for an unsupported dtype. */
size_t zipcclTypeSize(zipcclDataType_t dtype);
const char* zipcclTypeName(zipcclDataType_t dtype); /* "bf16", "fp16", "fp32" */

/* ------------------------------------------------------------------------ */
/* Codec                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum {
    zipcclCodecDefault = 0, /* fast                                          */
    zipcclCodecFast = 1,    /* three tiers of 2, 2 and 3 bits with a tail
                             * shape chosen per chunk (T; format 2)         */
    zipcclCodecDense = 2,   /* rANS with Gaussian and scale-mixture tables
                             * (R; format 4), constant chunks as fast (C)   */
    zipcclCodecStored = 3,  /* no compression: a stored frame                */
    zipcclCodecF3 = 4,      /* fixed 3-bit exponent window (F3): what fast
                             * wrote before F2; a little faster, ~4% larger  */
    zipcclCodecF2 = 5       /* 2-bit exponent code + 3-bit second tier (F2):
                             * what fast wrote before T (format 1 frames)    */
} zipcclCodec_t;
#define ZIPCCL_NCODECS 6 /* zipcclCodec_t values, for arrays indexed by codec */
const char* zipcclCodecName(zipcclCodec_t c); /* "default", "fast", "dense", "stored", "f3", "f2" */

typedef enum {
    zipcclSimdAuto = 0, /* best path this CPU supports (runtime dispatch)     */
    zipcclSimdScalar = 1,
    zipcclSimdAvx2 = 2,
    zipcclSimdAvx512 = 3
} zipcclSimd_t;

typedef struct {
    zipcclCodec_t codec;
    int checksum;      /* nonzero: append XXH32 checksums (FORMAT.md §6)    */
    zipcclSimd_t simd; /* force a CPU path; unsupported -> zipcclUnsupported */
} zipcclCodecParams_t;

#define ZIPCCL_CODEC_PARAMS_DEFAULT {zipcclCodecDefault, 0, zipcclSimdAuto}

/* Largest frame zipcclCompress can produce for `count` elements (exact). */
size_t zipcclCompressBound(size_t count, zipcclDataType_t dtype, int checksum);

/* Compress `count` elements of `dtype` at src (any alignment) into dst.
 * On success *dstSize holds the frame size.  params may be NULL (defaults). */
zipcclResult_t zipcclCompress(const void* src, size_t count, zipcclDataType_t dtype,
                              void* dst, size_t dstCapacity, size_t* dstSize,
                              const zipcclCodecParams_t* params);

typedef struct {
    uint64_t count;          /* elements in the frame                        */
    zipcclDataType_t dtype;
    size_t frameSize;        /* bytes of the whole frame                     */
    size_t decompressedSize; /* count * zipcclTypeSize(dtype)                */
    int checksum;            /* frame carries checksums                      */
    int stored;              /* frame is stored (uncompressed)               */
    uint32_t numChunks;
} zipcclFrameInfo_t;

/* Read and validate a frame header (does not decode the payload). */
zipcclResult_t zipcclGetFrameInfo(const void* src, size_t srcSize, zipcclFrameInfo_t* info);

/* Decompress one frame.  srcSize must be exactly the frame size.  On success
 * *count (may be NULL) receives the element count; the dtype must match
 * `expectDtype` unless it is 0.  params may be NULL (only .simd is read). */
zipcclResult_t zipcclDecompress(const void* src, size_t srcSize, void* dst, size_t dstCapacity,
                                size_t* count, zipcclDataType_t expectDtype,
                                const zipcclCodecParams_t* params);

/* Which CPU SIMD path zipcclSimdAuto resolves to on this machine. */
zipcclSimd_t zipcclSimdDetect(void);

/* ---- CUDA codec (device buffers; same byte format) ---------------------- */
/* Available when the library was built with nvcc (ZIPCCL_HAVE_CUDA).  Both
 * functions enqueue on `stream` (a cudaStream_t) and block until the frame
 * size is known on the host (it is needed to post the send).  `workspace` is
 * device memory of zipcclCudaWorkspaceSize() bytes. */
int zipcclCudaAvailable(void); /* 1 if built with CUDA and a device is usable */
size_t zipcclCudaWorkspaceSize(size_t count, zipcclDataType_t dtype);
zipcclResult_t zipcclCompressCuda(const void* d_src, size_t count, zipcclDataType_t dtype,
                                  void* d_dst, size_t dstCapacity, size_t* dstSize,
                                  const zipcclCodecParams_t* params, void* d_workspace,
                                  size_t workspaceSize, void* stream);
zipcclResult_t zipcclDecompressCuda(const void* d_src, size_t srcSize, void* d_dst,
                                    size_t dstCapacity, size_t* count,
                                    zipcclDataType_t expectDtype, void* d_workspace,
                                    size_t workspaceSize, void* stream);
/* Batched (as nvCOMP's batched API): k buffers or frames in one call, the
 * same bytes as k single calls, with one host wait for all k frame sizes
 * (compress) and one for all k verdicts (decompress: the headers are read
 * on the device) instead of one and two per buffer.  Arrays of k;
 * workspace: zipcclCudaWorkspaceSizeBatch(k, the largest count, dtype,
 * 0 to compress / 1 to decompress) bytes.  On an error *failed (may be
 * NULL) names the buffer or frame (-1: the batch itself); a stored frame
 * whose checksum fails writes nothing. */
size_t zipcclCudaWorkspaceSizeBatch(int k, size_t maxCount, zipcclDataType_t dtype, int decompress);
zipcclResult_t zipcclCompressCudaBatch(int k, const void* const* d_src, const size_t* count,
                                       zipcclDataType_t dtype, void* const* d_dst,
                                       const size_t* dstCapacity, size_t* dstSize,
                                       const zipcclCodecParams_t* params, void* d_workspace,
                                       size_t workspaceSize, void* stream, int* failed);
zipcclResult_t zipcclDecompressCudaBatch(int k, const void* const* d_src, const size_t* srcSize,
                                         void* const* d_dst, const size_t* dstCapacity,
                                         size_t* count, zipcclDataType_t expectDtype,
                                         void* d_workspace, size_t workspaceSize, void* stream,
                                         int* failed);

/* The batched calls in two halves (as nvCOMP's asynchronous API), for a
 * caller that has other work while the device codes: ...Start checks the
 * arguments, enqueues the kernels on `stream` and the copy of what the host
 * needs into `pending` (host memory of zipcclCudaPendingBytes(k,
 * decompress) bytes; pinned, or the copy waits), and returns without
 * waiting.  Once the caller has waited for the stream, or for an event it
 * recorded there after Start, ...End (the same arguments) reads it: the
 * frame sizes (End may enqueue the stored frame where coding did not pay:
 * launches only) or the verdicts and counts.  End never waits.  The
 * batched calls above are Start, one stream synchronisation, End. */
size_t zipcclCudaPendingBytes(int k, int decompress);
zipcclResult_t zipcclCompressCudaBatchStart(int k, const void* const* d_src, const size_t* count,
                                            zipcclDataType_t dtype, void* const* d_dst,
                                            const size_t* dstCapacity, const zipcclCodecParams_t* params,
                                            void* d_workspace, size_t workspaceSize, void* stream,
                                            void* pending, int* failed);
zipcclResult_t zipcclCompressCudaBatchEnd(int k, const void* const* d_src, const size_t* count,
                                          zipcclDataType_t dtype, void* const* d_dst,
                                          const size_t* dstCapacity, const zipcclCodecParams_t* params,
                                          const void* pending, size_t* dstSize, void* stream, int* failed);
zipcclResult_t zipcclDecompressCudaBatchStart(int k, const void* const* d_src, const size_t* srcSize,
                                              void* const* d_dst, const size_t* dstCapacity,
                                              zipcclDataType_t expectDtype, void* d_workspace,
                                              size_t workspaceSize, void* stream, void* pending,
                                              int* failed);
zipcclResult_t zipcclDecompressCudaBatchEnd(int k, const void* const* d_src, const size_t* srcSize,
                                            void* const* d_dst, const size_t* dstCapacity,
                                            zipcclDataType_t expectDtype, const void* pending,
                                            size_t* count, int* failed);

/* ------------------------------------------------------------------------ */
/* Collectives                                                              */
/* ------------------------------------------------------------------------ */

typedef struct zipcclComm* zipcclComm_t;
typedef struct zipcclRequest* zipcclRequest_t;

typedef enum { zipcclSum = 0, zipcclAvg = 4 } zipcclRedOp_t; /* NCCL numbering */

typedef enum {
    zipcclStrategyDefault = 0,    /* the communicator's default              */
    zipcclStrategyNative = 1,     /* MPI_Allgather / ncclAllGather, ...       */
    zipcclStrategyRaw = 2,        /* our algorithm, uncompressed wire         */
    zipcclStrategyCompressed = 3, /* our algorithm, compressed wire           */
    zipcclStrategyAuto = 4        /* cost model picks per call                */
} zipcclStrategy_t;

/* The design of our own (raw / compressed) algorithms.  Where a design does
 * not apply to a collective, the collective runs its own: AllGather is a ring
 * unless one-shot or hier, ReduceScatter direct unless ring or hier (its
 * direct design is one step already), AlltoAll(v) a pairwise exchange
 * (hier: raw to the ranks of our node). */
typedef enum {
    zipcclAlgoDefault = 0,
    zipcclAlgoRing = 1,    /* ReduceScatter/AllReduce: decompress-reduce-recompress per hop
                              (fp32 partials; MPI only) */
    zipcclAlgoDirect = 2,  /* ReduceScatter/AllReduce: each chunk compressed once, reduced by owner */
    zipcclAlgoOneShot = 3  /* AllGather/AllReduce: one step; every rank sends its whole
                              contribution (AllReduce: its whole input) to every peer,
                              encoded once, and AllReduce reduces every block itself in
                              the canonical order; for small messages (MPI only) */,
    zipcclAlgoHier = 4     /* every collective: two levels, knowing the node boundary
                              (ZIPCCL_NODE_SIZE, else MPI_Comm_split_type shared): raw
                              within a node, frames only between nodes, each coded once;
                              AlltoAll(v): the pairwise exchange, raw to the node's
                              ranks; same bits as the flat designs (MPI only;
                              docs/COLLECTIVES.md, hierarchical designs) */
} zipcclAlgo_t;
#define ZIPCCL_NALGOS 5 /* zipcclAlgo_t values, for arrays indexed by algorithm */

typedef enum {
    zipcclCollAllGather = 0,
    zipcclCollReduceScatter = 1,
    zipcclCollAllReduce = 2,
    zipcclCollAlltoAll = 3,
    zipcclCollAlltoAllv = 4,
    zipcclNumCollKinds = 5
} zipcclCollKind_t;

const char* zipcclCollName(zipcclCollKind_t kind);
const char* zipcclStrategyName(zipcclStrategy_t s);
/* Parse "native"|"raw"|"compressed"|"auto"; zipcclInvalidArgument otherwise. */
zipcclResult_t zipcclStrategyParse(const char* name, zipcclStrategy_t* out);
/* "default" | "ring" | "direct" | "oneshot" | "hier", and the parse of the last four. */
const char* zipcclAlgoName(zipcclAlgo_t a);
zipcclResult_t zipcclAlgoParse(const char* name, zipcclAlgo_t* out);
/* The design a raw or compressed call of `kind` runs when `requested` is
 * asked for (see zipcclAlgo_t); zipcclAlgoDefault for the All-to-Alls, whose
 * one design is a pairwise exchange.  A request applies to `kind` when this
 * returns it. */
zipcclAlgo_t zipcclAlgoRun(zipcclCollKind_t kind, zipcclAlgo_t requested);
/* A collective's codec by name: "fast"|"dense"|"f3"|"f2" (the codecs that
 * compress); zipcclInvalidArgument otherwise. */
zipcclResult_t zipcclCodecParse(const char* name, zipcclCodec_t* out);

/* Per-call configuration; pass NULL for the communicator's defaults. */
typedef struct {
    zipcclStrategy_t strategy;
    zipcclCodec_t codec;
    zipcclAlgo_t algo;
} zipcclCallConfig_t;

#define ZIPCCL_CALL_CONFIG_DEFAULT {zipcclStrategyDefault, zipcclCodecDefault, zipcclAlgoDefault}

/* Communicator creation.  MPI: pass a pointer to an MPI_Comm (it is
 * duplicated).  NCCL: pass an initialised ncclComm_t (not owned).
 * Defaults come from the environment, each checked when a communicator is
 * created (a bad value is zipcclInvalidArgument naming the variable):
 *   ZIPCCL_STRATEGY=native|raw|compressed|auto   (default: auto)
 *   ZIPCCL_CODEC=fast|dense|f3|f2                (default: fast)
 *   ZIPCCL_TIMEOUT_S=seconds                     (default: 100; 0 = none)
 *   ZIPCCL_LOG=0|1|2                              (switcher decisions)
 *   ZIPCCL_ALGO=ring|direct|oneshot|hier         (default: direct)
 *   ZIPCCL_NODE_SIZE=k  nodes for the hier designs: MPI_COMM_WORLD ranks
 *       0..k-1 are node 0, k..2k-1 node 1, ... (k divides the world size).
 *       Unset (the default), MPI says: MPI_Comm_split_type(
 *       MPI_COMM_TYPE_SHARED), i.e. the hosts the launcher placed the ranks
 *       on.  A communicator whose nodes are not blocks of consecutive ranks
 *       of one size counts each rank as a node (hier then compresses every
 *       hop).  For emulating nodes on one host (tests/test_coll_hier.c,
 *       scripts/cluster.sh); NCCL communicators ignore it.
 *   ZIPCCL_HIER_RS=auto|chain|forward  hier ReduceScatter between nodes
 *       (docs/COLLECTIVES.md): auto (default) takes the one that sends fewer
 *       bytes; the bits are the same.
 *   ZIPCCL_PIECE_BYTES, ZIPCCL_CALIBRATE=0|1, ZIPCCL_LINK_GBPS (> 0),
 *   ZIPCCL_LINK_ALPHA_US (> 0), ZIPCCL_INTRA_GBPS (> 0, the link inside a
 *   node: auto's model then prices hier), ZIPCCL_INTRA_ALPHA_US (> 0), ...:
 *   see docs/COLLECTIVES.md §8.
 * The timeout is per call.  100 s, as TorchTitan's training steps use
 * (comm.train_timeout_seconds; PyTorch's ProcessGroupNCCL waits 10 min): a
 * collective of a training step here takes milliseconds to seconds, so one
 * that still waits after 100 s has a stopped or hung peer, and every second
 * more stalls the whole job.  A wait prints a warning after 10 s (or half
 * the timeout, if sooner), 20, 40, 80 s, naming the rank(s) it waits for
 * and those that do not answer a liveness query; the zipcclTimeout detail
 * names them too.  A rank that dies ends the job through Open MPI at once.
 * After zipcclTimeout, a message a stopped peer had begun may still land in
 * recvbuf if that peer resumes: end the job, or keep recvbuf alive.
 * MPI: each communicator runs its calls on its own progress thread, which
 * needs MPI_THREAD_MULTIPLE (MPI_Init_thread); below that level every call,
 * async ones too, completes at issue.
 * MPI communicators of several ranks start every call with a call
 * agreement: each rank sends every peer a small descriptor of its call
 * (collective, dtype, op, count, strategy, design, piece size; AlltoAllv:
 * the pair's counts and a digest of all of them), so ranks that disagree all
 * return zipcclMismatch, with one detail naming what differs on which ranks,
 * before any receive is posted (docs/COLLECTIVES.md §5).  The codec need not
 * agree (every frame says how it is coded), nor in-place use.  NCCL
 * communicators have no agreement (NCCL itself hangs on such calls).
 * After a call fails mid-flight (timeout, mismatch, transport error) the
 * communicator answers every further call with zipcclCommBroken, naming the
 * failure: destroy it, and create a fresh one over the same MPI
 * communicator (every rank; the skipping or late rank of the failure too):
 * it works (tests/test_coll_recover.c).  zipcclCommDestroy does not free the
 * MPI communicators it duplicated, since a peer may still have traffic for
 * them from a call it abandoned: two of MPI's context ids per communicator
 * stay in use for the life of the process.  Reductions sum in the canonical order of
 * docs/COLLECTIVES.md §3 (block b: ranks b+1, ..., b-1, b, in fp32, one
 * rounding), identical for raw/compressed and ring/direct.                 */
zipcclResult_t zipcclCommInitMpi(zipcclComm_t* comm, const void* mpiComm);
zipcclResult_t zipcclCommInitNccl(zipcclComm_t* comm, void* ncclComm);
zipcclResult_t zipcclCommDestroy(zipcclComm_t comm);
zipcclResult_t zipcclCommRank(zipcclComm_t comm, int* rank);
zipcclResult_t zipcclCommSize(zipcclComm_t comm, int* size);
zipcclResult_t zipcclCommSetDefaults(zipcclComm_t comm, const zipcclCallConfig_t* cfg);
/* Ranks per node as the hier designs see them (ZIPCCL_NODE_SIZE above):
 * node of rank r = r / *size; 0 where unknown (NCCL). */
zipcclResult_t zipcclCommNodeSize(zipcclComm_t comm, int* size);

/* ---- Device buffers ---------------------------------------------------------
 * An MPI communicator's buffers are host memory until zipcclCommSetDevice
 * says they live on a device (device/device.h: the one device model the
 * project's kernels use too); from then on every call's sendbuf and recvbuf
 * are that device's memory and `stream` is one of its streams (NULL: its
 * compute stream).  The communicator gets a stream of its own on the
 * device: each call records an event on the caller's stream when it is
 * issued, and its copies, codec and sums run on the communicator's stream
 * after that event (so after the work that wrote sendbuf, overlapping the
 * caller's later work).  Each call is run in one of two ways:
 *   - zipcclDeviceStaged: sendbuf goes down to host memory the device copies
 *     fast with (pinned), the call runs there as on host buffers (every
 *     strategy and design, the CPU codec), and what it received goes back up;
 *   - zipcclDeviceCoded: a compressed call is coded where the buffers live
 *     (the CUDA codec on a CUDA device; the CPU codec in place on a device
 *     the host may read, such as zdev_cpu(), which runs the path on machines
 *     without a GPU), so only frames cross the bus: AllGather compresses
 *     this rank's block; ReduceScatter compresses each peer's block, decodes
 *     and sums what it receives on the device in the canonical order
 *     (docs/COLLECTIVES.md §3: the host's bits); AllReduce is that
 *     ReduceScatter then that AllGather; the All-to-Alls compress each block
 *     for a peer.  Raw and native calls are staged.
 * Every rank of a communicator sets the same coding (the call agreement
 * compares it).  An NCCL communicator's buffers are device memory already:
 * zipcclCommSetDevice refuses it.  Call it before the first collective, on a
 * communicator with no call in flight; the device must outlive the
 * communicator.
 *
 * Which do I call?
 *   host buffers over MPI          zipcclCommInitMpi, nothing else
 *   device buffers, staged         + zipcclCommSetDevice(c, dev, zipcclDeviceStaged)
 *   device buffers, coded there    + zipcclCommSetDevice(c, dev, zipcclDeviceCoded)
 *   MPI control, NCCL data         + zipcclCommSetDevice(c, cuda, zipcclDeviceCoded)
 *                                    + zipcclCommUseNccl(c)
 *   NCCL alone                     zipcclCommInitNccl (device buffers, no
 *                                    call agreement over MPI)              */
typedef enum {
    zipcclDeviceStaged = 0, /* every call staged, the CPU codec on the host   */
    zipcclDeviceCoded = 1   /* compressed calls coded on the device           */
} zipcclDeviceCoding_t;

typedef struct ZDevice ZDevice; /* device/device.h */

zipcclResult_t zipcclCommSetDevice(zipcclComm_t comm, ZDevice* dev, zipcclDeviceCoding_t coding);

/* ---- A device network: device buffers moved device to device ---------------
 * A communicator whose device codes there (zipcclDeviceCoded) may also
 * be given a network that moves device memory between its ranks without the
 * host (NCCL's point-to-point).  The MPI communicator keeps the control: the
 * call agreement, the frame sizes of compressed calls (summed on the host,
 * by the progress thread, so the caller never waits for them), timeouts of
 * the agreement.  The data does not cross the bus: every collective runs as
 * rounds of the network's grouped exchange, with exact sizes, on the
 * device:
 *   - native: the network's own collective where it has one (NCCL's
 *     AllGather, ReduceScatter, AllReduce), else raw;
 *   - raw: the blocks exchanged as they are (direct design; a reduction sums
 *     the received blocks in the canonical order on the device);
 *   - compressed: every block coded on the device, the frames' sizes summed
 *     over the ranks, the frames exchanged, decoded on the device (AllReduce
 *     is the coded ReduceScatter then the coded AllGather).
 * Every design is the direct one whatever the call asks (ring and one-shot
 * are the host designs' pipelines).  Every rank sets the same kind of
 * network (the call agreement compares it). */
typedef struct {
    const char* name; /* for messages ("nccl", "host")                       */
    void* ctx;
    /* One round as one group: to each rank p (this one included) send
     * sendBytes[p] bytes at send[p] and receive exactly recvBytes[p] bytes
     * into recv[p] (0: nothing), ordered on the stream after its earlier
     * work.  Returns once the round is ordered there (NCCL) or done. */
    zipcclResult_t (*exchange)(void* ctx, const void* const* send, const size_t* sendBytes, void* const* recv,
                               const size_t* recvBytes, void* stream);
    /* The network's own collective (optional; kind AllGather, ReduceScatter
     * or AllReduce, count as in the call), on the stream. */
    zipcclResult_t (*collective)(void* ctx, zipcclCollKind_t kind, const void* sendbuf, void* recvbuf, size_t count,
                                 zipcclDataType_t dtype, zipcclRedOp_t op, void* stream);
    /* At zipcclCommDestroy or when replaced (optional). */
    void (*destroy)(void* ctx);
} zipcclDeviceNet_t;

/* Device buffers of `comm` move over `net` from now on (the table is
 * copied; its destroy is called when the communicator is destroyed).  Needs
 * zipcclCommSetDevice first, with zipcclDeviceCoded.  Before
 * the first collective, with no call in flight. */
zipcclResult_t zipcclCommSetNet(zipcclComm_t comm, const zipcclDeviceNet_t* net);
/* An NCCL communicator over the ranks of `comm` as its network: rank 0's
 * unique id travels over comm's host control, each rank joins with its
 * rank, on comm's CUDA device (zipcclCommSetDevice with zdev_cuda).
 * Collective over comm.  zipcclUnsupported in a build without NCCL. */
zipcclResult_t zipcclCommUseNccl(zipcclComm_t comm);
/* Host memory standing in for a device network (on zdev_cpu(), coded):
 * the exchange is MPI messages over comm's own transport, so the network's
 * path runs on machines without a GPU. */
zipcclResult_t zipcclDeviceNetHost(zipcclComm_t comm, zipcclDeviceNet_t* out);

/* Blocking collectives.  In-place: AllGather with
 * sendbuf == recvbuf + rank*count*size; ReduceScatter with
 * sendbuf + rank*recvcount*size == recvbuf; AllReduce / AlltoAll with
 * sendbuf == recvbuf. */
zipcclResult_t zipcclAllGather(const void* sendbuf, void* recvbuf, size_t sendcount,
                               zipcclDataType_t dtype, zipcclComm_t comm,
                               const zipcclCallConfig_t* cfg, void* stream);
zipcclResult_t zipcclReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                   zipcclDataType_t dtype, zipcclRedOp_t op, zipcclComm_t comm,
                                   const zipcclCallConfig_t* cfg, void* stream);
zipcclResult_t zipcclAllReduce(const void* sendbuf, void* recvbuf, size_t count,
                               zipcclDataType_t dtype, zipcclRedOp_t op, zipcclComm_t comm,
                               const zipcclCallConfig_t* cfg, void* stream);
zipcclResult_t zipcclAlltoAll(const void* sendbuf, void* recvbuf, size_t count,
                              zipcclDataType_t dtype, zipcclComm_t comm,
                              const zipcclCallConfig_t* cfg, void* stream);
zipcclResult_t zipcclAlltoAllv(const void* sendbuf, const size_t* sendcounts,
                               const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                               const size_t* rdispls, zipcclDataType_t dtype, zipcclComm_t comm,
                               const zipcclCallConfig_t* cfg, void* stream);

/* Non-blocking forms: same arguments plus a request, completed with
 * zipcclWait / zipcclTest.  Several may be in flight on one communicator;
 * they complete in issue order's semantics (results never depend on timing). */
zipcclResult_t zipcclAllGatherAsync(const void* sendbuf, void* recvbuf, size_t sendcount,
                                    zipcclDataType_t dtype, zipcclComm_t comm,
                                    const zipcclCallConfig_t* cfg, void* stream,
                                    zipcclRequest_t* req);
zipcclResult_t zipcclReduceScatterAsync(const void* sendbuf, void* recvbuf, size_t recvcount,
                                        zipcclDataType_t dtype, zipcclRedOp_t op,
                                        zipcclComm_t comm, const zipcclCallConfig_t* cfg,
                                        void* stream, zipcclRequest_t* req);
zipcclResult_t zipcclAllReduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                    zipcclDataType_t dtype, zipcclRedOp_t op, zipcclComm_t comm,
                                    const zipcclCallConfig_t* cfg, void* stream,
                                    zipcclRequest_t* req);
zipcclResult_t zipcclAlltoAllAsync(const void* sendbuf, void* recvbuf, size_t count,
                                   zipcclDataType_t dtype, zipcclComm_t comm,
                                   const zipcclCallConfig_t* cfg, void* stream,
                                   zipcclRequest_t* req);
zipcclResult_t zipcclAlltoAllvAsync(const void* sendbuf, const size_t* sendcounts,
                                    const size_t* sdispls, void* recvbuf,
                                    const size_t* recvcounts, const size_t* rdispls,
                                    zipcclDataType_t dtype, zipcclComm_t comm,
                                    const zipcclCallConfig_t* cfg, void* stream,
                                    zipcclRequest_t* req);
zipcclResult_t zipcclWait(zipcclRequest_t req);             /* frees req          */
/* zipcclWait, and the call's device span: timing events recorded on the
 * communicator's stream when its work started and ended (both or neither:
 * NULL on host buffers or after a failure).  They are the caller's, to time
 * with zdev_event_elapsed_ms and free with zdev_event_destroy. */
zipcclResult_t zipcclWaitSpan(zipcclRequest_t req, void** begin, void** end);
zipcclResult_t zipcclTest(zipcclRequest_t req, int* done); /* frees req when done */

/* Per-communicator counters, per collective kind. */
typedef struct {
    uint64_t calls;
    uint64_t rawBytes;    /* bytes the collective would move uncompressed   */
    uint64_t wireBytes;   /* bytes actually sent by this rank               */
    double codecSeconds;  /* time in compress + decompress                  */
    double wireSeconds;   /* time waiting on the transport                  */
    double totalSeconds;  /* wall time inside the collective                */
    uint64_t byStrategy[5]; /* calls per zipcclStrategy_t actually executed */
    uint64_t byCodec[ZIPCCL_NCODECS]; /* compressed calls per zipcclCodec_t used   */
    uint64_t byAlgo[ZIPCCL_NALGOS]; /* raw and compressed AllGather, ReduceScatter and
                             * AllReduce calls per zipcclAlgo_t run: AllGather ring
                             * or oneshot, ReduceScatter ring or direct, AllReduce
                             * ring, direct, oneshot or hier; 0 for the All-to-Alls */
    uint64_t intraBytes;  /* of wireBytes, bytes sent to ranks on this rank's
                           * node (zipcclCommNodeSize): a hier call sends
                           * them raw, and only the rest as frames          */
    uint64_t busBytes;    /* device buffers: bytes copied between the device
                           * and host memory (staging, frames)             */
    double busSeconds;    /* time in those copies                           */
} zipcclCounters_t;

zipcclResult_t zipcclCommGetCounters(zipcclComm_t comm, zipcclCollKind_t kind,
                                     zipcclCounters_t* out);
zipcclResult_t zipcclCommResetCounters(zipcclComm_t comm);

#ifdef __cplusplus
}
#endif
#endif /* ZIPCCL_H */
