/*
 * device.h — the one device model of the project: memory, copies, streams,
 * events and binding, as a table of function pointers (ggml's backend
 * interface in miniature).  Everything above it takes a ZDevice: the kernel
 * tables (kernels/kernels.h: a table's kernels launch on its device's
 * compute stream), ZipCCL (comm/zipccl.h, zipcclCommSetDevice: a
 * communicator's copies, codec and sums run on a stream of its own, ordered
 * against the caller's by events), models/ and runtime/ (shards, optimizer
 * state, activations and the expert exchange live in a device's memory).
 *
 * Three devices ship:
 *   zdev_cpu()          host memory; the host may read it (host_access 1);
 *                       streams are tokens, work is done when a call returns,
 *                       an event is the host clock at record;
 *   zdev_cpu_guarded()  host memory the host cannot touch outside the
 *                       device's own calls (device_guarded.c): a stray host
 *                       dereference of device memory crashes on a machine
 *                       without a GPU, as it would later and less clearly on
 *                       a GPU;
 *   zdev_cuda(ordinal)  one CUDA device (device_cuda.cu, the project's only
 *                       caller of cudaMalloc, cudaHostAlloc,
 *                       cudaStreamCreate, cudaEventCreate and cudaSetDevice).
 * A caller may make its own (a ZDevice with its own ops), as the tests do
 * to check the stream discipline.
 *
 * Streams.  Every stream argument may be NULL, which means the device's
 * compute stream (ZDevice.stream; for CUDA a non-blocking stream the device
 * creates, never the legacy default stream).  Work on one stream runs in
 * issue order; work on two streams is ordered only by events
 * (zdev_event_record on one, zdev_stream_wait_event on the other).
 *
 * Host waits.  The calls that make the host wait for the device
 * (zdev_stream_sync, zdev_event_sync, zdev_synchronize, the blocking copies
 * zdev_copy / zdev_upload / zdev_download, zdev_event_elapsed_ms) and every
 * allocation and free are counted, process-wide, split between the compute
 * thread (zdev_set_compute_thread) and the others (ZipCCL's progress
 * threads): tests/test_host_waits.sh holds a training step to a budget of
 * them, on every device alike, since the counting is here and not in the
 * devices.
 *
 * Results: 0 on success, -1 on failure with the reason in zdev_error()
 * (per thread).  Programs wrap calls in zdevCheck (fatal, with file:line);
 * ZipCCL turns a failure into zipcclSystemError with the reason.
 *
 * Leaves out: several devices per process for one table (a rank uses one
 * device), peer copies between devices, graphs, memory pools (the callers
 * keep their buffers for the run, so a steady step allocates nothing).
 */
#ifndef ZDEV_DEVICE_H
#define ZDEV_DEVICE_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ZDEV_HOST_TO_DEVICE = 0,
    ZDEV_DEVICE_TO_HOST = 1,
    ZDEV_DEVICE_TO_DEVICE = 2
} ZDevDir;

typedef enum {
    ZDEV_KIND_CPU = 0,     /* host memory the host may read and write      */
    ZDEV_KIND_GUARDED = 1, /* host memory the host may not touch           */
    ZDEV_KIND_CUDA = 2,    /* a CUDA device's memory                       */
    ZDEV_KIND_OTHER = 3    /* a caller's own table                         */
} ZDevKind;

typedef struct ZDevice ZDevice;

/* What a device implements.  Copies and memsets are asynchronous: ordered
 * on the stream, maybe not done on return (the host devices finish them at
 * once).  Every stream argument reaching an entry is a real stream (the
 * API below replaces NULL by the compute stream).  Return 0, or -1 after
 * zdev_set_error. */
typedef struct {
    int (*bind)(ZDevice* d); /* the calling thread uses the device; NULL: nothing to do */
    void* (*alloc)(ZDevice* d, size_t bytes); /* NULL on out of memory, error set */
    void (*free)(ZDevice* d, void* p);        /* p not NULL */
    void* (*host_alloc)(ZDevice* d, size_t bytes); /* host memory copies are fast with */
    void (*host_free)(ZDevice* d, void* p);
    int (*copy)(ZDevice* d, void* dst, const void* src, size_t bytes, ZDevDir dir, void* stream);
    int (*memset)(ZDevice* d, void* p, int value, size_t bytes, void* stream);
    int (*stream_create)(ZDevice* d, void** stream);
    void (*stream_destroy)(ZDevice* d, void* stream);
    int (*stream_sync)(ZDevice* d, void* stream);
    /* timing 0: for ordering only (cheaper on CUDA); 1: zdev_event_elapsed_ms can time it */
    int (*event_create)(ZDevice* d, void** event, int timing);
    void (*event_destroy)(ZDevice* d, void* event);
    int (*event_record)(ZDevice* d, void* event, void* stream);
    int (*stream_wait_event)(ZDevice* d, void* stream, void* event);
    int (*event_sync)(ZDevice* d, void* event);
    /* milliseconds from a to b, both complete (the API synchronises b first) */
    int (*event_elapsed_ms)(ZDevice* d, void* a, void* b, double* ms);
    int (*synchronize)(ZDevice* d); /* every stream of the device */
    /* free and total bytes; -1 (no error needed) when unknown */
    int (*mem_info)(ZDevice* d, size_t* free_bytes, size_t* total_bytes);
} ZDeviceOps;

struct ZDevice {
    const char* name;      /* "cpu", "cpu_guarded", "cuda", or the caller's */
    ZDevKind kind;
    int host_access;       /* 1: the host may dereference its memory       */
    int ordinal;           /* the CUDA device's index; -1 for the others    */
    char label[320];       /* what it is ("NVIDIA H200 (device 0 of 8)")    */
    const ZDeviceOps* ops;
    void* ctx;             /* the implementation's own state                */
    void* stream;          /* the compute stream: what a NULL stream means  */
};

/* ---- the devices -------------------------------------------------------- */
ZDevice* zdev_cpu(void);
ZDevice* zdev_cpu_guarded(void);
/* The CUDA device `ordinal` (opened once per process: its compute stream
 * created, the calling thread bound to it), or NULL with the reason in
 * zdev_error(): a build without CUDA, no device, a bad ordinal. */
ZDevice* zdev_cuda(int ordinal);
/* CUDA devices on this machine (0 without CUDA or without a device). */
int zdev_cuda_count(void);

/* The guarded device's memory, open to the host while a kernel runs on it
 * (kernels/cpu_guarded.c wraps every kernel in these): nested calls
 * allowed; one lock held from enter to leave, so threads take turns. */
void zdev_guard_enter(void);
void zdev_guard_leave(void);

/* ---- memory -------------------------------------------------------------- */
void* zdev_alloc(ZDevice* d, size_t bytes); /* NULL: out of memory (zdev_error) */
void zdev_free(ZDevice* d, void* p);        /* NULL: nothing */
void* zdev_host_alloc(ZDevice* d, size_t bytes);
void zdev_host_free(ZDevice* d, void* p);
/* Asynchronous on the stream: a host source must stay unchanged, a host
 * destination unread, until the stream has passed the copy. */
int zdev_copy_async(ZDevice* d, void* dst, const void* src, size_t bytes, ZDevDir dir, void* stream);
/* Blocking (a host wait): ordered on the stream, done on return. */
int zdev_copy(ZDevice* d, void* dst, const void* src, size_t bytes, ZDevDir dir, void* stream);
int zdev_upload(ZDevice* d, void* dst, const void* src, size_t bytes);   /* zdev_copy on the compute stream */
int zdev_download(ZDevice* d, void* dst, const void* src, size_t bytes); /* likewise */
int zdev_memset_async(ZDevice* d, void* p, int value, size_t bytes, void* stream);
int zdev_mem_info(ZDevice* d, size_t* free_bytes, size_t* total_bytes);

/* ---- streams, events, binding ---------------------------------------------- */
int zdev_bind(ZDevice* d);
int zdev_stream_create(ZDevice* d, void** stream);
void zdev_stream_destroy(ZDevice* d, void* stream);
int zdev_stream_sync(ZDevice* d, void* stream);
int zdev_event_create(ZDevice* d, void** event, int timing);
void zdev_event_destroy(ZDevice* d, void* event);
int zdev_event_record(ZDevice* d, void* event, void* stream);
int zdev_stream_wait_event(ZDevice* d, void* stream, void* event);
int zdev_event_sync(ZDevice* d, void* event);
/* Waits for b, then the milliseconds from a to b (timing events). */
int zdev_event_elapsed_ms(ZDevice* d, void* a, void* b, double* ms);
int zdev_synchronize(ZDevice* d);
/* The stream a NULL stands for: s, or the compute stream. */
static inline void* zdev_stream_of(const ZDevice* d, void* s) { return s ? s : d->stream; }

/* ---- counts of host waits and allocations ----------------------------------- */
typedef struct {
    uint64_t syncs;   /* stream, event and device synchronisations (and
                       * elapsed-time reads, which synchronise)          */
    uint64_t copies;  /* blocking copies                                  */
    uint64_t allocs;  /* device and pinned-host allocations               */
    uint64_t frees;
} ZDevCount;
typedef struct {
    ZDevCount compute; /* on the compute thread (all threads before one is set) */
    ZDevCount other;   /* on every other thread (ZipCCL's progress threads)    */
} ZDevCounters;
void zdev_set_compute_thread(void); /* the calling thread is the compute thread */
void zdev_counters(ZDevCounters* out);
/* A host wait made outside this API: the CUDA codec's entry points, which
 * synchronise a stream to learn a frame's size, and the host kernel
 * tables' entries that return a value, which stand for the wait a device
 * makes (kernels.h): counted as one sync like the API's own. */
void zdev_count_sync(void);

/* ---- errors ------------------------------------------------------------------ */
const char* zdev_error(void); /* the calling thread's last failure ("" if none) */
int zdev_set_error(const char* fmt, ...) __attribute__((format(printf, 1, 2))); /* returns -1 */

/* Fatal check for programs and the kernel tables: file, line, the reason. */
void zdev_fatal(const char* what, const char* file, int line);
#define zdevCheck(call)                                                   \
    do {                                                                  \
        if ((call) != 0) zdev_fatal(#call, __FILE__, __LINE__);           \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
