// test: ranks=1,2,4 timeout=240
/*
 * test_coll_device.c — device buffers over MPI (zipcclCommSetDevice,
 * comm/run/coll_run.c), on machines without a GPU.  Two devices of
 * device/device.h stand in:
 *   - guarded (zdev_cpu_guarded): every allocation is its own mapping,
 *     PROT_NONE except inside the device's own copies, so any host read or
 *     write of "device" memory by ZipCCL dies with SIGSEGV; staged (the CPU
 *     codec on the host);
 *   - hostcoded (zdev_cpu, zipcclDeviceCoded): host memory coded in place, so a
 *     compressed AllGather or ReduceScatter takes the device-coded path
 *     (frames compressed in place, only frames staged, sizes summed, frames
 *     exchanged by the AlltoAllv design, decoded, ReduceScatter's sum in the
 *     canonical order) with the CPU codec and the host's reduction in the
 *     CUDA ones' place: every step but the CUDA kernels.
 * For each device, every collective (AllGather, ReduceScatter, AllReduce,
 * AlltoAll, AlltoAllv with gaps in recvbuf; in-place AllGather,
 * ReduceScatter and AllReduce), strategy (native, raw,
 * compressed; ring and direct designs) and dtype (bf16, fp32): the device
 * communicator's result equals the host communicator's bit for bit (the
 * host path is checked against MPI's collectives by test_coll), AlltoAllv
 * leaves the gaps of recvbuf alone, and the counters say what crossed the
 * bus (staged: the whole send and receive; coded AllGather: frames only,
 * less than staged).  Then the refusals: a bad coding, coding where no codec
 * can read the memory, the CUDA codec where it cannot run, a copy that fails
 * on one rank (it says so, its peers time out naming it instead of hanging,
 * and a fresh communicator works), zdev_cuda without a device, an NCCL-free
 * build's stub, and ranks that disagree on where the AllGather is coded
 * or on the pieces it is coded in (zipcclMismatch on every rank, naming
 * it).  Each coded table runs again in pieces (ZIPCCL_DEVICE_PIECE_BYTES,
 * kPieceBytes): the same bits, each piece coded, exchanged and decoded
 * while the next is coded.
 * With --cuda (scripts/test_gpu.sh, on a GPU machine) the same comparison
 * runs on zdev_cuda, coded: the CUDA codec codes every compressed call on
 * the device and must give the host path's bits.  Without a GPU the same
 * --cuda run goes through the warp emulator (BUILD/gpu/
 * test_coll_device_emu, tests/test_coll_device_cuda_emu.sh: device_cuda.cu,
 * the codec's kernels and the reduction kernels as plain C++ over
 * tests/gpu/emu), where it also runs the designs over the host stand-in
 * network; what only a GPU shows is NCCL, streams that really overlap, and
 * the device's own arithmetic and speed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mpi.h>

#include "device.h"
#include "gauss.h"
#include "testutil.h"
#include "zipccl.h"
#include "zipccl_internal.h"
#include "mpitest.h"

/* ---- the devices ------------------------------------------------------------- */

/* A device and how a communicator runs calls on it. */
typedef struct {
    const char* name;
    ZDevice* dev;
    zipcclDeviceCoding_t coding;
} Dev;
static Dev kGuarded, kHostCoded;

/* ---- the streamed stand-in ---------------------------------------------------------- */

/* Host memory whose streams and events are bookkeeping: every copy of
 * ZipCCL's (g_inCall) must run on a communicator's stream, after the event
 * of its call was recorded on the caller's stream (the compute stream: the
 * tests pass NULL) and waited there; every call synchronises it (and each
 * blocking copy does), except over a network, where it records its end on
 * the communicator's stream and the caller's stream waits for that. */
static int g_inCall;
typedef struct { int id; } FakeStream;
typedef struct { int recorded, onComm, seq, timing; } FakeEvent;
static FakeStream g_callerStream = {0xCA11};
static struct {
    int streams, streamsFreed, events, eventsFreed, records, waits, waitsUnrecorded, syncs, onStream, offStream;
    int copies;                 /* copies during calls */
    int d2d;                    /* of which device to device (asynchronous: one rank's own block) */
    int doneRecords, doneWaits; /* ends recorded on a communicator's stream; the caller's waits for them */
    int timed, seq;             /* timing events recorded; a clock for all of them */
} g_st;
static int known(void* stream) { return stream && ((FakeStream*)stream)->id == 0x5EA; }
static int caller(void* stream) { return stream == &g_callerStream; }
static int sCopy(ZDevice* d, void* dst, const void* src, size_t bytes, ZDevDir dir, void* stream) {
    (void)d;
    if (g_inCall) {
        g_st.copies++;
        g_st.d2d += dir == ZDEV_DEVICE_TO_DEVICE;
        if (known(stream)) g_st.onStream++;
        else g_st.offStream++;
    }
    memcpy(dst, src, bytes);
    return 0;
}
static int sStreamCreate(ZDevice* d, void** stream) {
    (void)d;
    FakeStream* s = malloc(sizeof *s);
    s->id = 0x5EA;
    *stream = s;
    g_st.streams++;
    return 0;
}
static void sStreamDestroy(ZDevice* d, void* stream) {
    (void)d;
    g_st.streamsFreed += known(stream);
    if (!caller(stream)) free(stream);
}
static int sStreamSync(ZDevice* d, void* stream) {
    (void)d;
    if (known(stream)) g_st.syncs++;
    return 0;
}
static int sEventCreate(ZDevice* d, void** event, int timing) {
    (void)d;
    FakeEvent* e = calloc(1, sizeof *e);
    e->timing = timing;
    *event = e;
    g_st.events++;
    return 0;
}
static void sEventDestroy(ZDevice* d, void* event) {
    (void)d;
    g_st.eventsFreed++;
    free(event);
}
static int sEventRecord(ZDevice* d, void* event, void* stream) {
    (void)d;
    FakeEvent* e = event;
    if (!known(stream) && !caller(stream)) g_st.offStream++;
    e->onComm = known(stream);
    if (e->timing) { /* a span's start or end */
        e->seq = ++g_st.seq;
        g_st.timed++;
        return 0;
    }
    e->recorded = 1;
    if (known(stream)) g_st.doneRecords++;
    else g_st.records++;
    return 0;
}
static int sStreamWaitEvent(ZDevice* d, void* stream, void* event) {
    (void)d;
    FakeEvent* e = event;
    /* the communicator's stream waits for the caller's event; the caller's
     * for the communicator's */
    if (!e || !e->recorded || (known(stream) ? e->onComm : !caller(stream) || !e->onComm)) g_st.waitsUnrecorded++;
    else if (known(stream)) e->recorded = 0, g_st.waits++; /* each record waited once */
    else e->recorded = 0, g_st.doneWaits++;
    return 0;
}
static int sEventSync(ZDevice* d, void* event) {
    (void)d, (void)event;
    return 0;
}
static int sElapsed(ZDevice* d, void* a, void* b, double* ms) {
    (void)d, (void)a, (void)b;
    *ms = 0;
    return 0;
}
static int sSynchronize(ZDevice* d) {
    (void)d;
    return 0;
}
static ZDeviceOps kStreamedOps;
static ZDevice kStreamedDev;
static Dev kStreamed;
static void streamedInit(void) {
    kStreamedOps = *zdev_cpu()->ops; /* host memory; streams and events below */
    kStreamedOps.copy = sCopy;
    kStreamedOps.stream_create = sStreamCreate, kStreamedOps.stream_destroy = sStreamDestroy;
    kStreamedOps.stream_sync = sStreamSync;
    kStreamedOps.event_create = sEventCreate, kStreamedOps.event_destroy = sEventDestroy;
    kStreamedOps.event_record = sEventRecord, kStreamedOps.stream_wait_event = sStreamWaitEvent;
    kStreamedOps.event_sync = sEventSync, kStreamedOps.event_elapsed_ms = sElapsed;
    kStreamedOps.synchronize = sSynchronize;
    kStreamedDev = *zdev_cpu();
    kStreamedDev.name = "streamed";
    kStreamedDev.kind = ZDEV_KIND_OTHER;
    kStreamedDev.ops = &kStreamedOps;
    kStreamedDev.stream = &g_callerStream;
    kStreamed = (Dev){"streamed", &kStreamedDev, zipcclDeviceCoded};
}

/* ---- the comparison --------------------------------------------------------------- */


static void fill(void* x, size_t n, zipcclDataType_t dt, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 11;
    for (size_t i = 0; i < n; i++) zipcclFromFloat(x, i, gauss_next(&s), dt);
}

typedef struct {
    size_t sendElems, recvElems;
    size_t sc[8], sd[8], rc[8], rd[8]; /* AlltoAllv (nranks <= 8) */
} Shape;

/* Sizes of a call with `count` (per block) on nranks; AlltoAllv: rank r
 * sends (count + r + 2p) % 5 * count / 3 + p elements to p, with a gap of 3
 * elements before each block it receives. */
static Shape shapeOf(zipcclCollKind_t kind, size_t count) {
    Shape s;
    memset(&s, 0, sizeof s);
    const size_t n = (size_t)nranks;
    switch (kind) {
    case zipcclCollAllGather: s.sendElems = count, s.recvElems = n * count; break;
    case zipcclCollReduceScatter: s.sendElems = n * count, s.recvElems = count; break;
    case zipcclCollAllReduce: s.sendElems = s.recvElems = count; break;
    case zipcclCollAlltoAll: s.sendElems = s.recvElems = n * count; break;
    default: {
        size_t so = 0, ro = 0;
        for (int p = 0; p < nranks; p++) {
            s.sc[p] = (count + (size_t)rank + 2 * (size_t)p) % 5 * count / 3 + (size_t)p;
            s.sd[p] = so, so += s.sc[p];
            s.rc[p] = (count + (size_t)p + 2 * (size_t)rank) % 5 * count / 3 + (size_t)rank;
            s.rd[p] = ro + 3, ro += 3 + s.rc[p];
        }
        s.sendElems = so, s.recvElems = ro;
    }
    }
    return s;
}

static zipcclResult_t call(zipcclCollKind_t kind, const void* sb, void* rb, size_t count, const Shape* s,
                           zipcclDataType_t dt, zipcclComm_t c, const zipcclCallConfig_t* cfg) {
    switch (kind) {
    case zipcclCollAllGather: return zipcclAllGather(sb, rb, count, dt, c, cfg, NULL);
    case zipcclCollReduceScatter: return zipcclReduceScatter(sb, rb, count, dt, zipcclSum, c, cfg, NULL);
    case zipcclCollAllReduce: return zipcclAllReduce(sb, rb, count, dt, zipcclSum, c, cfg, NULL);
    case zipcclCollAlltoAll: return zipcclAlltoAll(sb, rb, count, dt, c, cfg, NULL);
    default: return zipcclAlltoAllv(sb, s->sc, s->sd, rb, s->rc, s->rd, dt, c, cfg, NULL);
    }
}

/* One table: every collective x strategy/design x dtype on the device
 * communicator against the host one. */
/* A device communicator on `mem`, over the network `net` names: NULL, "host"
 * (zipcclDeviceNetHost) or "nccl" (zipcclCommUseNccl). */
static zipcclComm_t devComm(const Dev* mem, const char* net) {
    MPI_Comm w = MPI_COMM_WORLD;
    zipcclComm_t dev = NULL;
    int ok = zipcclCommInitMpi(&dev, &w) == zipcclSuccess;
    ok = ok && zipcclCommSetDevice(dev, mem->dev, mem->coding) == zipcclSuccess;
    if (ok && net && (!strcmp(net, "host") || !strcmp(net, "hostsizes"))) {
        zipcclDeviceNet_t t;
        ok = zipcclDeviceNetHost(dev, &t) == zipcclSuccess && zipcclCommSetNet(dev, &t) == zipcclSuccess;
        if (!strcmp(net, "hostsizes")) zipcclTestSizesOverNet(dev); /* as NCCL's own communicators */
    } else if (ok && net) {
        ok = zipcclCommUseNccl(dev) == zipcclSuccess;
    }
    if (!agree(ok)) {
        snprintf(why, sizeof why, "communicator on %s%s%s: %s", mem->name, net ? " over " : "", net ? net : "",
                 zipcclGetLastErrorDetail());
        report(0, "device_comm_created");
        zipcclCommDestroy(dev);
        return NULL;
    }
    return dev;
}

/* devComm with ZIPCCL_DEVICE_PIECE_BYTES set to pieceBytes while it is
 * created (0: the default). */
static zipcclComm_t devCommPieces(const Dev* mem, const char* net, int pieceBytes) {
    if (pieceBytes) {
        char v[16];
        snprintf(v, sizeof v, "%d", pieceBytes);
        setenv("ZIPCCL_DEVICE_PIECE_BYTES", v, 1);
    }
    zipcclComm_t dev = devComm(mem, net);
    unsetenv("ZIPCCL_DEVICE_PIECE_BYTES");
    return dev;
}

/* kPieceBytes: the run in pieces (ZIPCCL_DEVICE_PIECE_BYTES), a block of
 * `count` elements in 3 (bf16) or 5 (fp32) frames: the same bits as in one
 * piece and as the host designs, in more host waits (two a piece). */
enum { kPieceBytes = 4096 };
static size_t piecesOf(size_t bytes) { return (bytes + kPieceBytes - 1) / kPieceBytes; }

static void compareAll(const Dev* mem, zipcclComm_t host, const char* net, int pieces) {
    zipcclComm_t dev = devCommPieces(mem, net, pieces ? kPieceBytes : 0);
    if (!dev) return;
    static const zipcclCollKind_t kinds[] = {zipcclCollAllGather, zipcclCollReduceScatter, zipcclCollAllReduce,
                                             zipcclCollAlltoAll, zipcclCollAlltoAllv};
    static const struct { zipcclStrategy_t s; zipcclAlgo_t a; const char* name; } runs[] = {
        {zipcclStrategyNative, zipcclAlgoDefault, "native"},
        {zipcclStrategyRaw, zipcclAlgoRing, "raw_ring"},
        {zipcclStrategyCompressed, zipcclAlgoRing, "compressed_ring"},
        {zipcclStrategyCompressed, zipcclAlgoDirect, "compressed_direct"}};
    static const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat32};
    const size_t count = 5000;
    int nCases = 0, same = 1, gaps = 1, bus = 1, codedSmaller = 1, wireSmaller = 1, noCodec = 1;
    uint64_t maxWaits[5] = {0, 0, 0, 0, 0}; /* per kind: the most host waits of a coded call */
    uint64_t waitBound[5] = {4, 4, 8, 4, 4}; /* below */
    int piecesRan = 0, noEvidence = 0; /* bit 1: an AllGather ran in pieces, bit 2: an AlltoAllv */
    char whySame[sizeof why] = "";
    why[0] = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++)
            for (size_t di = 0; di < 2; di++) {
                const zipcclCollKind_t kind = kinds[k];
                if (runs[ri].a == zipcclAlgoDirect && kind == zipcclCollAllGather) continue; /* ring / oneshot only */
                const zipcclDataType_t dt = dts[di];
                const size_t esz = zipcclTypeSize(dt);
                zipcclCallConfig_t cfg = {runs[ri].s, zipcclCodecFast, runs[ri].a}, hostCfg = cfg;
                if (net && cfg.algo == zipcclAlgoRing) cfg.algo = zipcclAlgoDefault; /* direct only */
                /* A network without collectives of its own runs native calls
                 * raw (compare with the host's raw); NCCL's own sums add in
                 * their own order (not compared bit for bit). */
                const int reduces = kind == zipcclCollReduceScatter || kind == zipcclCollAllReduce;
                if (net && runs[ri].s == zipcclStrategyNative && reduces) {
                    if (strncmp(net, "host", 4)) continue;
                    hostCfg.strategy = zipcclStrategyRaw;
                }
                const Shape s = shapeOf(kind, count);
                const size_t sB = s.sendElems * esz, rB = s.recvElems * esz;
                char* in = malloc(sB + 1);
                char* outH = malloc(rB + 1);
                char* outD = malloc(rB + 1);
                fill(in, s.sendElems, dt, (uint64_t)(rank * 1000 + k * 10 + di));
                memset(outH, 0x5A, rB + 1);
                memset(outD, 0x5A, rB + 1);
                void* dIn = zdev_alloc(mem->dev, sB + 1);
                void* dOut = zdev_alloc(mem->dev, rB + 1);
                zdev_upload(mem->dev, dIn, in, sB);
                zdev_upload(mem->dev, dOut, outD, rB); /* the gaps' sentinel */
                zipcclResult_t rh = call(kind, in, outH, count, &s, dt, host, &hostCfg);
                zipcclCounters_t before, after;
                zipcclCommGetCounters(dev, kind, &before);
                ZDevCounters wb, wa;
                zdev_counters(&wb);
                g_inCall = 1;
                zipcclResult_t rd = call(kind, dIn, dOut, count, &s, dt, dev, &cfg);
                g_inCall = 0;
                zdev_counters(&wa);
                zipcclCommGetCounters(dev, kind, &after);
                /* the host waits of the call, on every thread */
                const uint64_t waits = wa.compute.syncs + wa.compute.copies + wa.other.syncs + wa.other.copies -
                                       (wb.compute.syncs + wb.compute.copies + wb.other.syncs + wb.other.copies);
                zdev_download(mem->dev, outD, dOut, rB);
                char label[120];
                snprintf(label, sizeof label, "%s %s %s", zipcclCollName(kind), runs[ri].name,
                         dt == zipcclBfloat16 ? "bf16" : "fp32");
                if (rh != zipcclSuccess || rd != zipcclSuccess) {
                    if (same) snprintf(whySame, sizeof whySame, "%s: host %d, device %d (%s)", label, (int)rh, (int)rd,
                                       zipcclGetLastErrorDetail());
                    same = 0;
                } else if (memcmp(outH, outD, rB)) {
                    size_t i = 0;
                    while (outH[i] == outD[i]) i++;
                    if (same) snprintf(whySame, sizeof whySame, "%s: byte %zu of %zu differs", label, i, rB);
                    same = 0;
                }
                if (kind == zipcclCollAlltoAllv)
                    for (int p = 0; p < nranks; p++)
                        for (size_t g = (s.rd[p] - 3) * esz; g < s.rd[p] * esz; g++)
                            if ((unsigned char)outD[g] != 0x5A) gaps = 0;
                const uint64_t moved = after.busBytes - before.busBytes;
                const int coded = runs[ri].s == zipcclStrategyCompressed && mem->coding != zipcclDeviceStaged;
                /* Over a network nothing crosses the bus, and compressed calls
                 * send fewer bytes than they stand for. */
                /* (sizes over the network: only the frame sizes, up and down) */
                /* the call's pieces: of its largest block (AlltoAllv: any
                 * rank's, shapeOf's formula over every pair) */
                size_t most = count;
                for (int a = 0; kind == zipcclCollAlltoAllv && a < nranks; a++)
                    for (int b = 0; b < nranks; b++) {
                        const size_t m = (count + (size_t)a + 2 * (size_t)b) % 5 * count / 3 + (size_t)b;
                        most = a == 0 && b == 0 ? m : m > most ? m : most;
                    }
                const size_t K = pieces ? piecesOf(most * esz) : 1;
                const size_t sizesBus = !strcmp(net ? net : "", "hostsizes")
                                            ? 2 * 8 * K * (size_t)(nranks + nranks * nranks) : 0;
                if (net && moved > sizesBus) bus = 0;
                if (net && coded && nranks > 1 &&
                    !(after.wireBytes - before.wireBytes < after.rawBytes - before.rawBytes)) {
                    if (wireSmaller) snprintf(why, sizeof why, "%s: wire %llu bytes, raw %llu", label,
                                              (unsigned long long)(after.wireBytes - before.wireBytes),
                                              (unsigned long long)(after.rawBytes - before.rawBytes));
                    wireSmaller = 0;
                }
                if (!net && !coded && kind != zipcclCollAlltoAllv && moved != sB + rB) {
                    if (bus) snprintf(why + strlen(why), sizeof why - strlen(why) > 1 ? sizeof why - strlen(why) : 1,
                                      " [%s: bus %llu bytes, staged %zu]", label, (unsigned long long)moved, sB + rB);
                    bus = 0;
                }
                /* Coded: only frames cross the bus, smaller than the raw blocks
                 * they stand for (Gaussian data compresses).  AllGather: our
                 * frame down, n-1 up; ReduceScatter: n-1 frames down and n-1
                 * up; AllReduce: both, over blocks of count/n; the
                 * All-to-Alls: the n-1 blocks for peers down, n-1 up.  None at
                 * one rank: no codec there, the blocks copied on the device. */
                const size_t n1 = (size_t)(nranks - 1), blk = count * esz;
                size_t rawAcross = 0;
                switch (kind) {
                case zipcclCollAllGather: rawAcross = n1 ? (1 + n1) * blk : 0; break;
                case zipcclCollReduceScatter: rawAcross = 2 * n1 * blk; break;
                case zipcclCollAllReduce: rawAcross = n1 ? blk * (2 * n1 + 1 + n1) / (size_t)nranks : 0; break;
                case zipcclCollAlltoAll: rawAcross = 2 * n1 * blk; break;
                default:
                    for (int p = 0; p < nranks; p++)
                        if (p != rank) rawAcross += (s.sc[p] + s.rc[p]) * esz;
                }
                if (!net && coded && (rawAcross ? !(moved > 0 && moved < rawAcross) : moved != 0)) {
                    if (codedSmaller) snprintf(why, sizeof why, "%s: bus %llu bytes, raw blocks %zu", label,
                                               (unsigned long long)moved, rawAcross);
                    codedSmaller = 0;
                }
                /* One rank: a coded call runs no codec (the blocks are
                 * copied on the device) and sends nothing. */
                if (coded && nranks == 1 &&
                    (after.codecSeconds != before.codecSeconds || after.wireBytes != before.wireBytes ||
                     after.rawBytes != before.rawBytes)) {
                    if (noCodec) snprintf(why, sizeof why, "%s: codec %g s, wire %llu, raw %llu bytes at one rank",
                                          label, after.codecSeconds - before.codecSeconds,
                                          (unsigned long long)(after.wireBytes - before.wireBytes),
                                          (unsigned long long)(after.rawBytes - before.rawBytes));
                    noCodec = 0;
                }
                if (coded && waits > maxWaits[k]) maxWaits[k] = waits;
                /* In pieces: two waits a piece (its sizes, its frames down)
                 * where one piece took two; the bound grows with the pieces,
                 * and a call of several pieces shows more waits than one. */
                if (coded && pieces) {
                    /* (the sizes over the network: two more a piece) */
                    const uint64_t b = (sizesBus ? 4 : 2) * K + 2;
                    const uint64_t want = kind == zipcclCollAllReduce ? 2 * b : b;
                    if (want > waitBound[k]) waitBound[k] = want;
                    /* the evidence: staged, a wait for each piece's frames
                     * to come down; sizes over the network, each piece's
                     * sizes up and down (8 + 8n bytes); over the network
                     * with the CUDA codec, its waits (none with the CPU's:
                     * no check there) */
                    const int bit = kind == zipcclCollAllGather ? 1 : kind == zipcclCollAlltoAllv ? 2 : 0;
                    if (bit && nranks > 1) {
                        int ran = 0;
                        if (!net) ran = waits > 4;
                        else if (sizesBus) ran = moved >= 2 * 8 * (size_t)(nranks + (bit == 2 ? nranks : 1));
                        else if (mem->dev->kind == ZDEV_KIND_CUDA) ran = waits > 2;
                        else noEvidence = 1;
                        if (ran) piecesRan |= bit;
                    }
                }
                nCases++;
                zdev_free(mem->dev, dIn);
                zdev_free(mem->dev, dOut);
                free(in), free(outH), free(outD);
            }
    char name[120], tag[60];
    snprintf(tag, sizeof tag, "%s%s%s%s", mem->name, net ? "_net_" : "", net ? net : "", pieces ? "_pieces" : "");
    snprintf(name, sizeof name, "device_%s_equals_host_%d_cases", tag, nCases);
    if (!same) snprintf(why, sizeof why, "%s", whySame); /* (the other checks below write why too) */
    report(same, name);
    snprintf(name, sizeof name, "device_%s_alltoallv_keeps_gaps", tag);
    report(gaps, name);
    snprintf(name, sizeof name, net ? "device_%s_moves_nothing_over_the_bus" : "device_%s_staged_bus_bytes", tag);
    report(bus, name);
    if (net) {
        snprintf(name, sizeof name, "device_%s_compressed_calls_send_fewer_bytes", tag);
        report(wireSmaller, name);
    } else if (mem->coding != zipcclDeviceStaged) {
        snprintf(name, sizeof name, "device_%s_coded_calls_move_frames_only", tag);
        report(codedSmaller, name);
    }
    if (nranks == 1 && mem->coding != zipcclDeviceStaged) {
        snprintf(name, sizeof name, "device_%s_one_rank_runs_no_codec", tag);
        report(noCodec, name);
    }
    /* Host waits of a coded call, whatever the rank count: the codec's
     * batches (one wait for the frame sizes, one for the verdicts: the
     * headers are read on the device), the frames down together (one), the
     * call's end (one); AllReduce is two such calls; a network saves the
     * copies, its size exchange adds two. */
    int fewWaits = 1;
    for (int k = 0; k < 5; k++) fewWaits &= maxWaits[k] <= waitBound[k];
    snprintf(why, sizeof why, "%s: host waits of a coded call at most AllGather %llu, ReduceScatter %llu, "
             "AllReduce %llu, AlltoAll %llu, AlltoAllv %llu at %d ranks (bounds %llu, %llu, %llu, %llu, %llu)", tag,
             (unsigned long long)maxWaits[0], (unsigned long long)maxWaits[1], (unsigned long long)maxWaits[2],
             (unsigned long long)maxWaits[3], (unsigned long long)maxWaits[4], nranks,
             (unsigned long long)waitBound[0], (unsigned long long)waitBound[1], (unsigned long long)waitBound[2],
             (unsigned long long)waitBound[3], (unsigned long long)waitBound[4]);
    if (mem->coding != zipcclDeviceStaged) { /* (staged calls copy each received AlltoAllv block up) */
        if (rank == 0) printf("note: %s\n", why);
        snprintf(name, sizeof name, "device_%s_coded_calls_wait_a_few_times", tag);
        report(fewWaits, name);
    }
    if (pieces && nranks > 1 && !noEvidence) {
        snprintf(why, sizeof why, "%s: in pieces: AllGather %s, AlltoAllv %s (by their waits or sizes' bytes)", tag,
                 piecesRan & 1 ? "yes" : "no", piecesRan & 2 ? "yes" : "no");
        snprintf(name, sizeof name, "device_%s_coded_calls_ran_in_pieces", tag);
        report(piecesRan == 3, name);
    }
    zipcclCommDestroy(dev);
}

/* ---- a failing copy and in-place calls -------------------------------------------- */

/* The host device whose copies to the host fail on rank 1 from the
 * `failAfter`-th on: rank 1 reports the copy (naming the device), its peers
 * time out (ZIPCCL_TIMEOUT_S=2) naming whom they waited for instead of
 * hanging, and a fresh communicator over the same MPI communicator works. */
static int g_copies, g_failAfter = -1;
static int failingCopyOp(ZDevice* d, void* dst, const void* src, size_t bytes, ZDevDir dir, void* stream) {
    if (dir == ZDEV_DEVICE_TO_HOST && rank == 1 && g_failAfter >= 0 && g_copies++ >= g_failAfter)
        return zdev_set_error("a planted failure of the test's device");
    return zdev_cpu()->ops->copy(d, dst, src, bytes, dir, stream);
}

static void failingCopy(void) {
    if (nranks < 2) return;
    static ZDeviceOps ops;
    static ZDevice fdev;
    ops = *zdev_cpu()->ops;
    ops.copy = failingCopyOp;
    fdev = *zdev_cpu();
    fdev.name = "failing";
    fdev.ops = &ops;
    MPI_Comm w = MPI_COMM_WORLD;
    zipcclComm_t c = NULL;
    setenv("ZIPCCL_TIMEOUT_S", "2", 1);
    int ok = zipcclCommInitMpi(&c, &w) == zipcclSuccess &&
             zipcclCommSetDevice(c, &fdev, zipcclDeviceCoded) == zipcclSuccess;
    unsetenv("ZIPCCL_TIMEOUT_S");
    const size_t n = 4096;
    float* in = malloc(n * sizeof(float));
    float* out = malloc(n * (size_t)nranks * sizeof(float));
    fill(in, n, zipcclFloat32, (uint64_t)rank);
    zipcclCallConfig_t raw = {zipcclStrategyRaw, zipcclCodecFast, zipcclAlgoRing};
    g_copies = 0, g_failAfter = 0;
    const double t0 = MPI_Wtime();
    zipcclResult_t r = ok ? zipcclAllGather(in, out, n, zipcclFloat32, c, &raw, NULL) : zipcclInternalError;
    const double dt = MPI_Wtime() - t0;
    g_failAfter = -1;
    const char* d = zipcclGetLastErrorDetail();
    if (rank == 1)
        EXPECT(r == zipcclSystemError && strstr(d, "(failing)") && strstr(d, "planted failure"), "rank 1 got %d (%s)",
               (int)r, d);
    else
        /* the ring's ranks wait on their left neighbour, which waits on
         * rank 1: the ring's rank 2 names rank 1, the others the one they wait for */
        EXPECT(r == zipcclTimeout && strstr(d, rank == 2 || nranks == 2 ? "rank 1" : "from rank ") && dt < 30,
               "rank %d got %d after %.1f s (%s)", rank, (int)r, dt, d);
    report(ok, "device_failing_copy_is_reported_peers_time_out_naming_it");
    zipcclCommDestroy(c);
    /* a fresh communicator on the same ranks works */
    ok = zipcclCommInitMpi(&c, &w) == zipcclSuccess &&
         zipcclCommSetDevice(c, kHostCoded.dev, kHostCoded.coding) == zipcclSuccess &&
         zipcclAllGather(in, out, n, zipcclFloat32, c, &raw, NULL) == zipcclSuccess;
    for (int p = 0; ok && p < nranks; p++) {
        float* want = malloc(n * sizeof(float));
        fill(want, n, zipcclFloat32, (uint64_t)p);
        EXPECT(!memcmp(want, out + (size_t)p * n, n * sizeof(float)), "block %d differs after the failure", p);
        free(want);
    }
    report(ok, "device_fresh_communicator_after_a_failed_copy");
    zipcclCommDestroy(c);
    free(in), free(out);
}

/* In-place calls on device buffers (AllGather from its own block of recvbuf,
 * ReduceScatter into its own block of sendbuf, AllReduce), staged and coded,
 * equal the host communicator's out-of-place results. */
static void inPlace(const Dev* mem, zipcclComm_t host, const char* net, int pieces) {
    /* (in pieces: blocks of 3000 bf16 in two) */
    zipcclComm_t dev = devCommPieces(mem, net, pieces ? kPieceBytes : 0);
    if (!dev) return;
    int ok = 1;
    const size_t n = 3000, N = n * (size_t)nranks, esz = 2;
    const zipcclDataType_t dt = zipcclBfloat16;
    char* in = malloc(N * esz);
    char* ref = malloc(N * esz);
    char* got = malloc(N * esz);
    static const zipcclStrategy_t strats[] = {zipcclStrategyRaw, zipcclStrategyCompressed};
    for (int si = 0; si < 2; si++) {
        zipcclCallConfig_t cfg = {strats[si], zipcclCodecFast, net ? zipcclAlgoDefault : zipcclAlgoRing};
        const char* sn = si ? "compressed" : "raw";
        void* d = zdev_alloc(mem->dev, N * esz);
        /* AllGather: this rank's block already in place */
        fill(in, n, dt, (uint64_t)(rank + 50));
        zipcclAllGather(in, ref, n, dt, host, &cfg, NULL);
        zdev_upload(mem->dev, (char*)d + (size_t)rank * n * esz, in, n * esz);
        zipcclResult_t r = zipcclAllGather((char*)d + (size_t)rank * n * esz, d, n, dt, dev, &cfg, NULL);
        zdev_download(mem->dev, got, d, N * esz);
        EXPECT(r == zipcclSuccess && !memcmp(ref, got, N * esz), "%s AllGather in place: %d (%s)", sn, (int)r,
               zipcclGetLastErrorDetail());
        /* ReduceScatter: the result lands in this rank's block of sendbuf */
        fill(in, N, dt, (uint64_t)(rank + 70));
        zipcclReduceScatter(in, ref, n, dt, zipcclSum, host, &cfg, NULL);
        zdev_upload(mem->dev, d, in, N * esz);
        char* mine = (char*)d + (size_t)rank * n * esz;
        r = zipcclReduceScatter(d, mine, n, dt, zipcclSum, dev, &cfg, NULL);
        zdev_download(mem->dev, got, mine, n * esz);
        EXPECT(r == zipcclSuccess && !memcmp(ref, got, n * esz), "%s ReduceScatter in place: %d (%s)", sn, (int)r,
               zipcclGetLastErrorDetail());
        /* AllReduce */
        fill(in, n, dt, (uint64_t)(rank + 90));
        zipcclAllReduce(in, ref, n, dt, zipcclSum, host, &cfg, NULL);
        zdev_upload(mem->dev, d, in, n * esz);
        r = zipcclAllReduce(d, d, n, dt, zipcclSum, dev, &cfg, NULL);
        zdev_download(mem->dev, got, d, n * esz);
        EXPECT(r == zipcclSuccess && !memcmp(ref, got, n * esz), "%s AllReduce in place: %d (%s)", sn, (int)r,
               zipcclGetLastErrorDetail());
        /* AlltoAll */
        fill(in, N, dt, (uint64_t)(rank + 110));
        zipcclAlltoAll(in, ref, n, dt, host, &cfg, NULL);
        zdev_upload(mem->dev, d, in, N * esz);
        r = zipcclAlltoAll(d, d, n, dt, dev, &cfg, NULL);
        zdev_download(mem->dev, got, d, N * esz);
        EXPECT(r == zipcclSuccess && !memcmp(ref, got, N * esz), "%s AlltoAll in place: %d (%s)", sn, (int)r,
               zipcclGetLastErrorDetail());
        zdev_free(mem->dev, d);
    }
    char name[80];
    snprintf(name, sizeof name, "device_%s%s%s%s_in_place_equals_host", mem->name, net ? "_net_" : "", net ? net : "",
             pieces ? "_pieces" : "");
    report(ok, name);
    zipcclCommDestroy(dev);
    free(in), free(ref), free(got);
}

/* ---- refusals ----------------------------------------------------------------------- */

static void refusals(void) {
    MPI_Comm w = MPI_COMM_WORLD;
    zipcclComm_t c = NULL;
    zipcclCommInitMpi(&c, &w);
    int ok = 1;
    EXPECT(zipcclCommSetDevice(c, zdev_cpu(), (zipcclDeviceCoding_t)7) == zipcclInvalidArgument &&
               strstr(zipcclGetLastErrorDetail(), "coding 7"),
           "coding 7: %s", zipcclGetLastErrorDetail());
    EXPECT(zipcclCommSetDevice(c, zdev_cpu_guarded(), zipcclDeviceCoded) == zipcclInvalidArgument &&
               strstr(zipcclGetLastErrorDetail(), "neither codec"),
           "coded on memory no codec can read: %s", zipcclGetLastErrorDetail());
    ZDevice fakeCuda = *zdev_cpu(); /* says CUDA, is not */
    fakeCuda.kind = ZDEV_KIND_CUDA, fakeCuda.host_access = 0, fakeCuda.name = "fakecuda";
    if (!zipcclCudaAvailable())
        EXPECT(zipcclCommSetDevice(c, &fakeCuda, zipcclDeviceCoded) == zipcclUnsupported &&
                   strstr(zipcclGetLastErrorDetail(), "CUDA codec"),
               "cuda coding without a device: %s", zipcclGetLastErrorDetail());
    if (!zipcclCudaAvailable())
        EXPECT(zdev_cuda(0) == NULL && zdev_error()[0], "zdev_cuda without a device: %s", zdev_error());
    EXPECT(zipcclCommSetDevice(NULL, zdev_cpu(), zipcclDeviceCoded) == zipcclInvalidArgument,
           "a null communicator was taken");
    EXPECT(zipcclCommSetDevice(c, NULL, zipcclDeviceCoded) == zipcclInvalidArgument, "a null device was taken");
    report(ok, "device_refusals");
    zipcclCommDestroy(c);

    /* Networks: only for device buffers coded where they are; an exchange
     * entry; NCCL only on a CUDA device (and only with NCCL). */
    ok = 1;
    zipcclCommInitMpi(&c, &w);
    zipcclDeviceNet_t net;
    EXPECT(zipcclDeviceNetHost(c, &net) == zipcclSuccess, "zipcclDeviceNetHost: %s", zipcclGetLastErrorDetail());
    EXPECT(zipcclCommSetNet(c, &net) == zipcclInvalidArgument && strstr(zipcclGetLastErrorDetail(), "SetDevice"),
           "a network on host buffers: %s", zipcclGetLastErrorDetail());
    zipcclCommSetDevice(c, kGuarded.dev, kGuarded.coding);
    EXPECT(zipcclCommSetNet(c, &net) == zipcclInvalidArgument && strstr(zipcclGetLastErrorDetail(), "code"),
           "a network on a staged device: %s", zipcclGetLastErrorDetail());
    EXPECT(zipcclCommUseNccl(c) == zipcclInvalidArgument && strstr(zipcclGetLastErrorDetail(), "zdev_cuda"),
           "NCCL on a device that is not CUDA's: %s", zipcclGetLastErrorDetail());
    zipcclCommSetDevice(c, kHostCoded.dev, kHostCoded.coding);
    zipcclDeviceNet_t bad = net;
    bad.exchange = NULL;
    EXPECT(zipcclCommSetNet(c, &bad) == zipcclInvalidArgument && strstr(zipcclGetLastErrorDetail(), "no exchange"),
           "a network without exchange: %s", zipcclGetLastErrorDetail());
    EXPECT(zipcclCommSetNet(c, &net) == zipcclSuccess, "a network on the host-coded device: %s",
           zipcclGetLastErrorDetail());
    void* buf = zdev_alloc(zdev_cpu(), 64 * (size_t)nranks);
    zipcclCallConfig_t ring = {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoRing};
    EXPECT(zipcclAllGather(buf, buf, 8, zipcclFloat32, c, &ring, NULL) == zipcclUnsupported &&
               strstr(zipcclGetLastErrorDetail(), "direct"),
           "a ring asked for over a network: %s", zipcclGetLastErrorDetail());
    zdev_free(zdev_cpu(), buf);
    report(ok, "device_net_refusals");
    zipcclCommDestroy(c);

    if (nranks < 2) return;
    /* Rank 0 codes its AllGather on the device, the others stage theirs. */
    zipcclCommInitMpi(&c, &w);
    const Dev* m = rank == 0 ? &kHostCoded : &kGuarded;
    zipcclCommSetDevice(c, m->dev, m->coding);
    void* d = zdev_alloc(m->dev, 4096);
    void* e = zdev_alloc(m->dev, 4096 * (size_t)nranks);
    zipcclCallConfig_t cfg = {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoRing};
    zipcclResult_t r = zipcclAllGather(d, e, 1000, zipcclFloat32, c, &cfg, NULL);
    ok = 1;
    EXPECT(r == zipcclMismatch && strstr(zipcclGetLastErrorDetail(), "coded"),
           "rank %d: mixed coding gave %d (%s)", rank, (int)r, zipcclGetLastErrorDetail());
    report(ok, "device_mixed_coding_is_a_mismatch_on_every_rank");
    zipcclCommDestroy(c);
    zdev_free(m->dev, d);
    zdev_free(m->dev, e);

    /* Rank 0 moves its buffers over a network, the others stage them. */
    c = devComm(&kHostCoded, NULL);
    if (rank == 0 && c) {
        zipcclDeviceNet_t hn;
        zipcclDeviceNetHost(c, &hn);
        zipcclCommSetNet(c, &hn);
    }
    d = zdev_alloc(zdev_cpu(), 4096);
    e = zdev_alloc(zdev_cpu(), 4096 * (size_t)nranks);
    cfg.strategy = zipcclStrategyRaw;
    r = c ? zipcclAllGather(d, e, 1000, zipcclFloat32, c, &cfg, NULL) : zipcclInternalError;
    ok = 1;
    EXPECT(r == zipcclMismatch && strstr(zipcclGetLastErrorDetail(), "network"),
           "rank %d: a network on rank 0 only gave %d (%s)", rank, (int)r, zipcclGetLastErrorDetail());
    report(ok, "device_net_on_some_ranks_is_a_mismatch_on_every_rank");
    zipcclCommDestroy(c);

    /* Rank 0 codes its blocks in other pieces than its peers (a block of
     * 1000 fp32 in one piece on rank 0, in pieces of 1024 bytes elsewhere):
     * refused on every rank before any frame moves. */
    c = devCommPieces(&kHostCoded, NULL, rank ? 1024 : 0);
    cfg.strategy = zipcclStrategyCompressed;
    cfg.algo = zipcclAlgoDefault;
    r = c ? zipcclAllGather(d, e, 1000, zipcclFloat32, c, &cfg, NULL) : zipcclInternalError;
    ok = 1;
    EXPECT(r == zipcclMismatch && strstr(zipcclGetLastErrorDetail(), "ZIPCCL_DEVICE_PIECE_BYTES"),
           "rank %d: pieces of 1024 bytes on some ranks only gave %d (%s)", rank, (int)r, zipcclGetLastErrorDetail());
    report(ok, "device_piece_size_differs_is_a_mismatch_on_every_rank");
    zipcclCommDestroy(c);
    zdev_free(zdev_cpu(), d);
    zdev_free(zdev_cpu(), e);
}

/* The streamed stand-in through every comparison: the same bits, and the
 * stream discipline (each call: one event recorded at issue on the caller's
 * stream, waited once on the communicator's stream before any copy; every
 * copy on that stream; the stream synchronised once per call besides the
 * blocking copies; one stream per communicator, everything freed at its
 * destroy). */
static void streamed(zipcclComm_t host, const char* net) {
    memset(&g_st, 0, sizeof g_st);
    compareAll(&kStreamed, host, net, 0);
    int ok = 1;
    EXPECT(g_st.streams == 1 && g_st.streamsFreed == 1, "streams: %d created, %d freed (one communicator)",
           g_st.streams, g_st.streamsFreed);
    EXPECT(g_st.records == 38 && g_st.waits == 38 && g_st.waitsUnrecorded == 0,
           "38 calls: %d events recorded at issue, %d waited, %d waits without a matching record", g_st.records,
           g_st.waits, g_st.waitsUnrecorded);
    if (!net)
        EXPECT(g_st.syncs >= 38 + 1 && g_st.syncs <= 38 + g_st.copies - g_st.d2d + 1 && g_st.doneRecords == 0 &&
                   (nranks > 1 || g_st.d2d > 0),
               "%d synchronisations (one per call and one at the destroy, at most one per copy besides (%d; %d "
               "device to device on the stream, with no wait)), %d ends recorded",
               g_st.syncs, g_st.copies, g_st.d2d, g_st.doneRecords);
    else
        EXPECT(g_st.syncs == 1 && g_st.copies == 0 && g_st.doneRecords == 38 && g_st.doneWaits == 38,
               "over a network: %d synchronisations (only the destroy's), %d copies, %d ends recorded on the "
               "communicator's stream, %d waited by the caller's", g_st.syncs, g_st.copies, g_st.doneRecords,
               g_st.doneWaits);
    EXPECT((net || g_st.onStream > 0) && g_st.offStream == 0, "%d copies on the stream, %d off it", g_st.onStream,
           g_st.offStream);
    EXPECT(g_st.events >= 1 && g_st.eventsFreed == g_st.events, "events: %d created, %d freed", g_st.events,
           g_st.eventsFreed);
    EXPECT(g_st.timed == 2 * 38, "%d timing events for 38 calls (a start and an end each)", g_st.timed);
    report(ok, net ? "device_streamed_net_calls_end_with_an_event_the_callers_stream_waits_for"
                   : "device_streamed_calls_follow_the_callers_event_on_their_own_stream");
    /* zipcclWaitSpan hands over the call's start and end, both on the
     * communicator's stream, in that order; zipcclWait freed the others. */
    zipcclComm_t sc = devComm(&kStreamed, net);
    if (sc) {
        ok = 1;
        void* d = zdev_alloc(&kStreamedDev, 4096 * (size_t)nranks);
        zipcclRequest_t req = NULL;
        void *b = NULL, *e = NULL;
        zipcclCallConfig_t cfg = {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoDefault};
        const int seq0 = g_st.seq;
        zipcclResult_t r = zipcclAllGatherAsync(d, d, 1000, zipcclFloat32, sc, &cfg, NULL, &req);
        if (r == zipcclSuccess) r = zipcclWaitSpan(req, &b, &e);
        const FakeEvent *fb = b, *fe = e;
        EXPECT(r == zipcclSuccess && fb && fe && fb->onComm && fe->onComm && seq0 < fb->seq && fb->seq < fe->seq,
               "zipcclWaitSpan: %d (%s), start %p end %p", (int)r, zipcclGetLastErrorDetail(), b, e);
        zdev_event_destroy(&kStreamedDev, b);
        zdev_event_destroy(&kStreamedDev, e);
        zdev_free(&kStreamedDev, d);
        zipcclCommDestroy(sc);
        EXPECT(g_st.events == g_st.eventsFreed, "events: %d created, %d freed", g_st.events, g_st.eventsFreed);
        report(ok, net ? "device_net_wait_span_hands_over_the_calls_start_and_end"
                       : "device_wait_span_hands_over_the_calls_start_and_end");
    }
}

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    setenv("ZIPCCL_CALIBRATE", "0", 1);
    if (nranks > 8) {
        if (rank == 0) fprintf(stderr, "test_coll_device: at most 8 ranks\n");
        MPI_Finalize();
        return 1;
    }
    MPI_Comm w = MPI_COMM_WORLD;
    zipcclComm_t host = NULL;
    kGuarded = (Dev){"guarded", zdev_cpu_guarded(), zipcclDeviceStaged};
    kHostCoded = (Dev){"hostcoded", zdev_cpu(), zipcclDeviceCoded};
    streamedInit();
    if (zipcclCommInitMpi(&host, &w) != zipcclSuccess) MPI_Abort(MPI_COMM_WORLD, 1);
    int cuda = argc > 1 && !strcmp(argv[1], "--cuda");
    int nccl = cuda && argc > 2 && !strcmp(argv[2], "--nccl"); /* one rank per GPU */
    if (cuda) {
        /* On a GPU machine (scripts/test_gpu.sh): the CUDA table and codec,
         * each rank on the GPU of its local rank, or all on GPU 0. */
        MPI_Comm node;
        int local = 0;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &local);
        MPI_Comm_free(&node);
        const int ndev = zdev_cuda_count();
        Dev cu = {"cuda", zdev_cuda(ndev > 0 ? local % ndev : 0), zipcclDeviceCoded};
        int ok = cu.dev != NULL;
        snprintf(why, sizeof why, "rank %d: %s", rank, zdev_error());
        report(ok, "device_cuda_table");
        if (agree(ok)) {
            compareAll(&cu, host, NULL, 0);
            compareAll(&cu, host, NULL, 1);
#ifdef ZIPCCL_TEST_CUDA_EMU
            /* ZK_EMU_ASYNC=1 (tests/test_coll_device_cuda_emu.sh): the
             * emulator defers each stream's work until something waits for
             * it, so the staged designs above run with their stream order
             * checked; the host stand-in network below cannot run deferred
             * (its messages block the host), so it runs only at once */
            const char* async = getenv("ZK_EMU_ASYNC");
            inPlace(&cu, host, NULL, 0);
            inPlace(&cu, host, NULL, 1);
            if (!async || strcmp(async, "1")) {
                /* the warp emulator's device memory is host memory, so the
                 * host stand-in network (MPI messages) can carry it: the
                 * designs over a network with the CUDA codec and kernels, as
                 * over NCCL */
                compareAll(&cu, host, "host", 0);
                compareAll(&cu, host, "host", 1);
                compareAll(&cu, host, "hostsizes", 0);
                inPlace(&cu, host, "host", 0);
            }
#endif
            if (nccl) {
                compareAll(&cu, host, "nccl", 0);
                compareAll(&cu, host, "nccl", 1);
                inPlace(&cu, host, "nccl", 0);
            }
        }
    } else {
        compareAll(&kGuarded, host, NULL, 0);
        compareAll(&kHostCoded, host, NULL, 0);
        compareAll(&kHostCoded, host, NULL, 1);
        compareAll(&kHostCoded, host, "host", 0);
        compareAll(&kHostCoded, host, "host", 1);
        compareAll(&kHostCoded, host, "hostsizes", 0);
        compareAll(&kHostCoded, host, "hostsizes", 1);
        inPlace(&kGuarded, host, NULL, 0);
        inPlace(&kHostCoded, host, NULL, 0);
        inPlace(&kHostCoded, host, NULL, 1);
        inPlace(&kHostCoded, host, "host", 0);
        inPlace(&kHostCoded, host, "host", 1);
        streamed(host, NULL);
        streamed(host, "host");
    }
    zipcclCommDestroy(host);
    refusals();
    if (!cuda) failingCopy();
    int failed = tu_failures;
    MPI_Finalize();
    return failed ? 1 : 0;
}
