/*
 * coll_bench.c — zipccl-bench: time ZipCCL collectives per size and strategy,
 * in the manner of nccl-tests, and check every result bit for bit.
 *
 *   mpirun -n 4 build/zipccl-bench -b 4K -e 64M -f 4 -n 5 -w 1 --coll allgather --json
 *
 * For each collective, size and strategy (native, raw, compressed, auto) it
 * prints the median time over the timed iterations (each iteration's time is
 * the slowest rank's), algbw = bytes/time, busbw with the nccl-tests factors,
 * the compression ratio seen by the library's counters (raw bytes / wire
 * bytes, all ranks together) and #wrong: elements that differ from the
 * reference result (strategy raw; for AllGather and the All-to-Alls also
 * MPI's own collective).  The data are deterministic (a seeded generator or a
 * file), so every strategy sees the same input.
 *
 * This file is the driver: options, data, the timing loop, the check and the
 * report, the same for every collective.  What differs between collectives
 * (buffer sizes, the call, the expected result, the busbw factor) is one
 * CollTest each in coll/ (coll/coll.h), and the driver loops over the table
 * kColls.  Read it top to bottom: the table, options, data, one size of one
 * collective (check, report, timing), then the header and main.
 *
 * What it leaves out: NCCL's own communicators (zipcclCommInitNccl; --net
 * nccl gives an MPI communicator's device buffers an NCCL network), in-place
 * calls, and the non-blocking API
 * (the entries can start a call with a request; the timed calls block).
 * It links libzipccl only; a .safetensors input is read as one flat array of
 * its data section (every tensor must have the requested dtype), which needs
 * no runtime library.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "coll/coll.h"
#include "device.h"
#include "zipccl.h"
#include "zipccl_float.h"
#include "zipccl_tune.h"

/* ------------------------------------------------------------------------ */
/* The collectives, in the order they run and print                         */
/* ------------------------------------------------------------------------ */

static const CollTest* const kColls[] = {&allGatherTest, &reduceScatterTest, &allReduceTest,
                                         &alltoAllTest, &alltoAllvTest};
enum { NCOLLS = sizeof kColls / sizeof kColls[0] };

/* ZCHECK and MCHECK (coll/coll.h) abort all ranks with file:line. */
void* benchAlloc(size_t n) {
    void* p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "zipccl-bench: out of memory allocating %zu bytes\n", n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

/* ------------------------------------------------------------------------ */
/* Options                                                                  */
/* ------------------------------------------------------------------------ */

enum { DIST_GAUSSIAN, DIST_RANDOM };
#define MAX_STRATS 12

/* Untimed calls auto needs at one size before it can have settled (the
 * library's count, for the size auto files the call under: AllGather's
 * per-rank input, for the others the bench's bytes); zipcclAutoSettled then
 * says whether close contenders still need runs. */
static size_t autoBytes(const CollTest* coll, size_t bytes, int nranks) {
    return coll->autoPerRank ? bytes / (size_t)nranks : bytes;
}
static int autoWarmup(const CollTest* coll, size_t bytes, int nranks) {
    return zipcclAutoWarmupCalls(coll->kind, autoBytes(coll, bytes, nranks));
}

typedef struct {
    size_t minBytes, maxBytes;
    double factor;
    int iters, warmup, check, json;
    int sequential; /* --order sequential: each strategy's timed calls back to back */
    int gapMs;      /* --gap: every rank idles this long before each timed call */
    int device;     /* --device: 0 host buffers, 1 cuda, 2 host memory standing in (coded in place) */
    int net;        /* --net: 0 mpi (through host memory), 1 nccl, 2 host (the stand-in network) */
    int injectError; /* tests: corrupt one element of compressed results */
    zipcclRedOp_t op;
    zipcclDataType_t dtype;
    int doColl[NCOLLS];     /* by index in kColls */
    zipcclStrategy_t strats[MAX_STRATS]; /* the entries of --strategy, in order      */
    zipcclAlgo_t algos[MAX_STRATS];      /* per entry: STRATEGY:ALGO, else --algo    */
    zipcclCodec_t codecs[MAX_STRATS];    /* per entry: compressed:CODEC, else --codec */
    int nstrats;
    zipcclCodec_t codec;
    zipcclAlgo_t algo;
    const char* input;
    double sigma;
    int dist;
} Options;

static void usage(FILE* f) {
    fprintf(f,
        "usage: mpirun -n N zipccl-bench [options]\n"
        "  -b, --minbytes SIZE     smallest size (default 4K); suffixes K, M, G (powers of 1024)\n"
        "  -e, --maxbytes SIZE     largest size (default 64M)\n"
        "  -f, --stepfactor F      multiply the size by F each step (default 4, > 1)\n"
        "  -n, --iters N           timed iterations per size and strategy (default 5)\n"
        "  -w, --warmup N          untimed iterations first (default 1; at least 36-140 for auto,\n"
        "                          whose first calls per size explore and re-measure designs,\n"
        "                          and then as many as it takes to settle)\n"
        "  -c, --check 0|1         compare every result with the reference (default 1)\n"
        "  -o, --op sum|avg        reduction (default sum)\n"
        "  -d, --dtype bf16|fp16|fp32   element type (default bf16)\n"
        "  --coll LIST             allgather,reducescatter,allreduce,alltoall,alltoallv (default all)\n"
        "  --strategy LIST         native,raw,compressed,auto (default all four); raw and\n"
        "                          compressed also as raw:ring, compressed:direct:f3, ... to\n"
        "                          time one design or codec beside another (up to 8 entries)\n"
        "  --codec fast|dense|f3   codec of the compressed wire (default: library default)\n"
        "  --algo ring|direct      algorithm of raw/compressed (default: library default)\n"
        "  --input FILE            take the data from FILE: a raw little-endian dump of the\n"
        "                          dtype, or a .safetensors file (its data section as one flat\n"
        "                          array; all tensors must have the dtype); used cyclically\n"
        "  --dist gaussian|random  synthetic data: N(0, sigma^2) (default) or random bits\n"
        "                          (exponent never all-ones, so no Inf/NaN)\n"
        "  --sigma S               Gaussian scale (default 0.02)\n"
        "  --order interleaved|sequential   timed calls round by round, each strategy once per\n"
        "                          round in a shuffled order (default), or each strategy's\n"
        "                          calls back to back as nccl-tests does\n"
        "  --gap MS                every rank sleeps MS milliseconds before each timed call\n"
        "                          (default 0: calls back to back); a call issued after idle\n"
        "                          time, as training issues its collectives between computes\n"
        "  --device host|cuda|hostcoded   where the buffers live (default host): cuda puts them\n"
        "                          on each rank's GPU (zipcclCommSetDevice: calls staged through\n"
        "                          pinned memory, a compressed AllGather coded on the GPU);\n"
        "                          hostcoded runs that path on host memory with the CPU codec\n"
        "                          (what a machine without a GPU can check); the copies are timed\n"
        "  --net mpi|nccl|host     how device buffers travel (default mpi: through host memory):\n"
        "                          nccl device to device over an NCCL communicator made from\n"
        "                          MPI's (--device cuda); host: the stand-in network\n"
        "                          (--device hostcoded)\n"
        "  --json                  one JSON object per result line instead of the table\n"
        "  --inject-error          (tests) flip one bit of rank 0's compressed result before\n"
        "                          the check, to prove #wrong counts\n"
        "  -h, --help              this text\n"
        "\n"
        "'bytes' follows nccl-tests: AllGather, the whole output buffer (n x per-rank input);\n"
        "ReduceScatter, the whole input buffer (n x per-rank output); AllReduce, the buffer;\n"
        "AlltoAll and AlltoAllv, one rank's send buffer (n blocks; AlltoAllv blocks are uneven,\n"
        "1/2..3/2 of the mean, with every rank's send and receive total equal to 'bytes').\n"
        "time: median over the timed iterations of the slowest rank's time of each iteration.\n"
        "algbw = bytes / time; busbw = algbw x (n-1)/n for AllGather, ReduceScatter, AlltoAll(v),\n"
        "x 2(n-1)/n for AllReduce; both in GB/s (1e9 bytes per second), as nccl-tests prints.\n"
        "ratio = raw bytes / wire bytes from zipcclCommGetCounters, summed over ranks;\n"
        "bus_bytes (JSON, --device) = bytes copied between the device and host memory per call\n"
        "and rank (zipcclCommGetCounters' busBytes).\n"
        "#wrong: elements differing bit-wise from the reference, summed over ranks.  The reference\n"
        "is strategy raw, itself checked against MPI's collective (AllGather, AlltoAll(v)) or\n"
        "against the documented reduction recomputed here (ReduceScatter, AllReduce: fp32 sum in\n"
        "the order b+1, ..., b-1, b for block b, one rounding).  Native ReduceScatter/AllReduce\n"
        "round at every MPI combine, so they print n/a (JSON null) and 'differ' = elements that\n"
        "differ from raw; auto is checked against whatever strategy it picked.\n"
        "Exit codes: 0 ok, 1 a check found wrong elements or a call failed, 2 bad arguments.\n");
}

static int rank0ForMessages(void) {
    /* Arguments are parsed before MPI_Init so a bad flag never starts the
     * transport; the launcher's rank variables keep the message to one copy. */
    const char* v = getenv("OMPI_COMM_WORLD_RANK");
    if (!v) v = getenv("PMI_RANK");
    return !v || atoi(v) == 0;
}

static void badArg(const char* fmt, const char* what) {
    if (rank0ForMessages()) {
        fprintf(stderr, "zipccl-bench: ");
        fprintf(stderr, fmt, what);
        fprintf(stderr, "\n(zipccl-bench --help lists the options)\n");
    }
    exit(2);
}

/* "64M" -> 67108864.  Suffixes K/M/G (optionally followed by B or iB). */
static int parseSize(const char* s, size_t* out) {
    errno = 0;
    char* end;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0)) return 0;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mul > 1 && (end[0] == 'i' || end[0] == 'I')) end++;
    if (end[0] == 'B' || end[0] == 'b') end++;
    if (*end) return 0;
    double b = v * mul;
    if (b < 1 || b > 1e15 || b != floor(b)) return 0;
    *out = (size_t)b;
    return 1;
}

static int parseInt(const char* s, int lo, int hi, int* out) {
    char* end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) return 0;
    *out = (int)v;
    return 1;
}

/* Split a comma list in place-free fashion: calls fn for each item. */
static void parseList(const char* list, const char* flag, void (*fn)(const char*, Options*),
                      Options* o) {
    char buf[256];
    if (strlen(list) >= sizeof buf || !*list) badArg("bad list for %s", flag);
    strcpy(buf, list);
    for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) fn(tok, o);
}

static void addColl(const char* name, Options* o) {
    char names[128] = "";
    for (int k = 0; k < NCOLLS; k++) {
        if (!strcmp(name, kColls[k]->name)) {
            o->doColl[k] = 1;
            return;
        }
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "",
                 kColls[k]->name);
    }
    char msg[192];
    snprintf(msg, sizeof msg, "unknown collective '%%s' (%s)", names);
    badArg(msg, name);
}

/* One --strategy entry: STRATEGY, then for raw and compressed optional
 * ":ring"/":direct"/":oneshot" and for compressed ":fast"/":dense"/":f3", in
 * any order, so that one run can time, say, the ring beside the direct design
 * or one codec beside another.  An entry whose algorithm does not apply to a
 * collective (ring and direct: reductions; oneshot: AllGather, AllReduce) is
 * skipped for it. */
static void addStrat(const char* entry, Options* o) {
    char name[48];
    snprintf(name, sizeof name, "%s", entry);
    char* colon = strchr(name, ':');
    zipcclAlgo_t a = zipcclAlgoDefault;
    zipcclCodec_t cd = zipcclCodecDefault;
    for (char* tok = colon; tok;) {
        *tok++ = '\0';
        char* next = strchr(tok, ':');
        if (next) *next = '\0';
        if (zipcclAlgoParse(tok, &a) != zipcclSuccess && zipcclCodecParse(tok, &cd) != zipcclSuccess)
            badArg("unknown algorithm or codec in strategy '%s' (ring, direct, oneshot, hier, fast, dense, f3)", entry);
        if (next) *next = ':';
        tok = next;
    }
    zipcclStrategy_t s;
    if (zipcclStrategyParse(name, &s) != zipcclSuccess || s == zipcclStrategyDefault)
        badArg("unknown strategy '%s' (native, raw, compressed, auto)", entry);
    if (a != zipcclAlgoDefault && s != zipcclStrategyRaw && s != zipcclStrategyCompressed)
        badArg("strategy '%s': only raw and compressed take an algorithm", entry);
    if (cd != zipcclCodecDefault && s != zipcclStrategyCompressed)
        badArg("strategy '%s': only compressed takes a codec", entry);
    for (int i = 0; i < o->nstrats; i++)
        if (o->strats[i] == s && o->algos[i] == a && o->codecs[i] == cd) return;
    if (o->nstrats == MAX_STRATS) badArg("too many strategies in '%s'", entry);
    o->strats[o->nstrats] = s;
    o->codecs[o->nstrats] = cd;
    o->algos[o->nstrats++] = a;
}

static void parseArgs(int argc, char** argv, Options* o) {
    memset(o, 0, sizeof *o);
    o->minBytes = 4096;
    o->maxBytes = 64u << 20;
    o->factor = 4;
    o->iters = 5;
    o->warmup = 1;
    o->check = 1;
    o->op = zipcclSum;
    o->dtype = zipcclBfloat16;
    o->codec = zipcclCodecDefault;
    o->algo = zipcclAlgoDefault;
    o->sigma = 0.02;
    o->dist = DIST_GAUSSIAN;
    int anyColl = 0;

    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        char flag[64];
        const char* val = NULL;
        /* --flag=value is the same as --flag value */
        const char* eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        if (eq && (size_t)(eq - a) < sizeof flag) {
            memcpy(flag, a, (size_t)(eq - a));
            flag[eq - a] = '\0';
            val = eq + 1;
        } else {
            snprintf(flag, sizeof flag, "%s", a);
        }
#define IS(s, l) (!strcmp(flag, s) || !strcmp(flag, l))
#define VALUE() (val ? val : (i + 1 < argc ? argv[++i] : (badArg("%s needs a value", flag), "")))
        if (IS("-h", "--help")) {
            if (rank0ForMessages()) usage(stdout);
            exit(0);
        } else if (IS("--json", "--json")) {
            o->json = 1;
        } else if (IS("--order", "--order")) {
            const char* v = VALUE();
            if (!strcmp(v, "interleaved")) o->sequential = 0;
            else if (!strcmp(v, "sequential")) o->sequential = 1;
            else badArg("bad order '%s' (interleaved, sequential)", v);
        } else if (IS("--device", "--device")) {
            const char* v = VALUE();
            if (!strcmp(v, "host")) o->device = 0;
            else if (!strcmp(v, "cuda")) o->device = 1;
            else if (!strcmp(v, "hostcoded")) o->device = 2;
            else badArg("--device %s: host, cuda or hostcoded", v);
        } else if (IS("--net", "--net")) {
            const char* v = VALUE();
            if (!strcmp(v, "mpi")) o->net = 0;
            else if (!strcmp(v, "nccl")) o->net = 1;
            else if (!strcmp(v, "host")) o->net = 2;
            else badArg("--net %s: mpi, nccl or host", v);
        } else if (IS("--gap", "--gap")) {
            const char* v = VALUE();
            if (!parseInt(v, 0, 10000, &o->gapMs)) badArg("bad gap '%s' (milliseconds, 0..10000)", v);
        } else if (IS("--inject-error", "--inject-error")) {
            o->injectError = 1;
        } else if (IS("-b", "--minbytes")) {
            const char* v = VALUE();
            if (!parseSize(v, &o->minBytes)) badArg("bad size for -b: '%s' (e.g. 4K, 64M)", v);
        } else if (IS("-e", "--maxbytes")) {
            const char* v = VALUE();
            if (!parseSize(v, &o->maxBytes)) badArg("bad size for -e: '%s' (e.g. 4K, 64M)", v);
        } else if (IS("-f", "--stepfactor")) {
            const char* v = VALUE();
            char* end;
            o->factor = strtod(v, &end);
            if (end == v || *end || !(o->factor > 1.0) || o->factor > 1e6)
                badArg("bad step factor '%s' (a number > 1)", v);
        } else if (IS("-n", "--iters")) {
            const char* v = VALUE();
            if (!parseInt(v, 1, 1000000, &o->iters)) badArg("bad iteration count '%s'", v);
        } else if (IS("-w", "--warmup")) {
            const char* v = VALUE();
            if (!parseInt(v, 0, 1000000, &o->warmup)) badArg("bad warmup count '%s'", v);
        } else if (IS("-c", "--check")) {
            const char* v = VALUE();
            if (!parseInt(v, 0, 1, &o->check)) badArg("bad -c '%s' (0 or 1)", v);
        } else if (IS("-o", "--op")) {
            const char* v = VALUE();
            if (!strcmp(v, "sum")) o->op = zipcclSum;
            else if (!strcmp(v, "avg")) o->op = zipcclAvg;
            else badArg("bad op '%s' (sum, avg)", v);
        } else if (IS("-d", "--dtype")) {
            const char* v = VALUE();
            if (!strcmp(v, "bf16")) o->dtype = zipcclBfloat16;
            else if (!strcmp(v, "fp16")) o->dtype = zipcclFloat16;
            else if (!strcmp(v, "fp32")) o->dtype = zipcclFloat32;
            else badArg("bad dtype '%s' (bf16, fp16, fp32)", v);
        } else if (IS("--coll", "--colls")) {
            parseList(VALUE(), "--coll", addColl, o);
            anyColl = 1;
        } else if (IS("--strategy", "--strategies")) {
            parseList(VALUE(), "--strategy", addStrat, o);
        } else if (IS("--codec", "--codec")) {
            const char* v = VALUE();
            if (zipcclCodecParse(v, &o->codec) != zipcclSuccess) badArg("bad codec '%s' (fast, dense, f3)", v);
        } else if (IS("--algo", "--algo")) {
            const char* v = VALUE();
            if (zipcclAlgoParse(v, &o->algo) != zipcclSuccess) badArg("bad algo '%s' (ring, direct, oneshot, hier)", v);
        } else if (IS("--input", "--input")) {
            o->input = VALUE();
        } else if (IS("--sigma", "--sigma")) {
            const char* v = VALUE();
            char* end;
            o->sigma = strtod(v, &end);
            if (end == v || *end || !(o->sigma > 0) || !isfinite(o->sigma))
                badArg("bad sigma '%s' (a positive number)", v);
        } else if (IS("--dist", "--dist")) {
            const char* v = VALUE();
            if (!strcmp(v, "gaussian")) o->dist = DIST_GAUSSIAN;
            else if (!strcmp(v, "random")) o->dist = DIST_RANDOM;
            else badArg("bad distribution '%s' (gaussian, random)", v);
        } else {
            badArg("unknown option '%s'", a);
        }
#undef IS
#undef VALUE
    }
    if (o->minBytes > o->maxBytes) badArg("%s", "-b is larger than -e");
    if (o->net == 1 && o->device != 1) badArg("%s", "--net nccl moves GPU memory: it needs --device cuda");
    if (o->net == 2 && o->device != 2) badArg("%s", "--net host stands in for a device network: it needs --device hostcoded");
    /* MPI's reference collectives take int counts of elements. */
    if (o->maxBytes / zipcclTypeSize(o->dtype) > (size_t)INT_MAX)
        badArg("%s", "-e is too large (at most 2^31-1 elements)");
    if (!anyColl)
        for (int k = 0; k < NCOLLS; k++) o->doColl[k] = 1;
    if (o->nstrats == 0) {
        const zipcclStrategy_t all[4] = {zipcclStrategyNative, zipcclStrategyRaw,
                                                  zipcclStrategyCompressed, zipcclStrategyAuto};
        memcpy(o->strats, all, sizeof all);
        o->nstrats = 4;
    }
}

/* ------------------------------------------------------------------------ */
/* Deterministic data                                                       */
/* ------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Elements first..first+count-1 of a buffer whose element i depends only on
 * (seed, i): any rank can regenerate any other rank's data, in any piece. */
static void genSynthetic(void* dst, size_t first, size_t count, zipcclDataType_t dtype, int dist,
                         double sigma, uint64_t seed) {
    for (size_t i = 0; i < count; i++) {
        uint64_t h = splitmix64(seed ^ splitmix64(first + i));
        if (dist == DIST_RANDOM) {
            /* Random bits with the exponent kept off all-ones, so sums stay finite-ish and
             * no NaN payload questions arise. */
            if (dtype == zipcclFloat32) {
                uint32_t v = (uint32_t)h;
                if (((v >> 23) & 0xFFu) == 0xFFu) v &= ~(1u << 30);
                ((uint32_t*)dst)[i] = v;
            } else {
                uint16_t v = (uint16_t)h;
                int ebits = dtype == zipcclBfloat16 ? 8 : 5, mbits = 15 - ebits;
                uint16_t emask = (uint16_t)(((1u << ebits) - 1) << mbits);
                if ((v & emask) == emask) v &= (uint16_t)~(1u << 14);
                ((uint16_t*)dst)[i] = v;
            }
            continue;
        }
        /* Box-Muller from two 32-bit halves; u1 in (0, 1]. */
        double u1 = ((double)(h >> 32) + 1.0) / 4294967296.0;
        double u2 = (double)(uint32_t)h / 4294967296.0;
        float x = (float)(sigma * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
        switch (dtype) {
        case zipcclBfloat16: ((uint16_t*)dst)[i] = zipcclFloatToBf16(x); break;
        case zipcclFloat16: ((uint16_t*)dst)[i] = zipcclFloatToFp16(x); break;
        case zipcclFloat32: ((float*)dst)[i] = x; break;
        }
    }
}

typedef struct {
    unsigned char* data; /* the file's values */
    size_t count;        /* elements */
} Pool;

static int dtypeMatchesTag(const char* tag, zipcclDataType_t dtype) {
    return (dtype == zipcclBfloat16 && !strcmp(tag, "BF16")) ||
           (dtype == zipcclFloat16 && !strcmp(tag, "F16")) ||
           (dtype == zipcclFloat32 && !strcmp(tag, "F32"));
}

/* Load --input.  Errors are argument errors (exit 2), found before MPI starts. */
static void loadInput(const char* path, zipcclDataType_t dtype, Pool* pool) {
    size_t es = zipcclTypeSize(dtype);
    FILE* f = fopen(path, "rb");
    if (!f) badArg("cannot open --input '%s'", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (sz <= 0) badArg("--input '%s' is empty or unreadable", path);
    size_t n = strlen(path), skip = 0;
    if (n >= 12 && !strcmp(path + n - 12, ".safetensors")) {
        /* u64 little-endian header length, a JSON header, then the data section. */
        unsigned char len8[8];
        if (fread(len8, 1, 8, f) != 8) badArg("--input '%s': truncated safetensors header", path);
        uint64_t hl = 0;
        for (int i = 7; i >= 0; i--) hl = (hl << 8) | len8[i];
        if (hl == 0 || hl > (uint64_t)sz - 8 || hl > (100u << 20))
            badArg("--input '%s': bad safetensors header length", path);
        char* hdr = benchAlloc(hl + 1);
        if (fread(hdr, 1, hl, f) != hl) badArg("--input '%s': truncated safetensors header", path);
        hdr[hl] = '\0';
        int tensors = 0;
        for (char* p = strstr(hdr, "\"dtype\""); p; p = strstr(p + 7, "\"dtype\"")) {
            char tag[16] = "";
            if (sscanf(p + 7, " : \"%15[A-Z0-9]\"", tag) != 1 || !dtypeMatchesTag(tag, dtype)) {
                free(hdr);
                badArg("--input '%s': a tensor's dtype differs from -d (all must match)", path);
            }
            tensors++;
        }
        free(hdr);
        if (!tensors) badArg("--input '%s': no tensors in the safetensors header", path);
        skip = 8 + hl;
    }
    size_t bytes = (size_t)sz - skip;
    if (bytes < es || bytes % es) badArg("--input '%s': data size is not a multiple of the dtype", path);
    pool->data = benchAlloc(bytes);
    if (fread(pool->data, 1, bytes, f) != bytes) badArg("--input '%s': short read", path);
    fclose(f);
    pool->count = bytes / es;
}

/* The inputs every rank generates alike: the file's values, or the
 * generator's parameters. */
struct BenchData {
    zipcclDataType_t dtype;
    int dist;
    double sigma;
    const Pool* pool;
};

/* Elements first..first+count-1 of rank `rank`'s send buffer (of `total`
 * elements) for collective `kind`: from the file pool (cyclically, from a
 * rank-dependent start) or from the generator. */
void benchFill(const CollEnv* e, zipcclCollKind_t kind, int rank, size_t first, size_t count,
               size_t total, void* dst) {
    const BenchData* d = e->data;
    const Pool* pool = d->pool;
    if (pool->data) {
        size_t es = zipcclTypeSize(d->dtype);
        size_t at = ((size_t)rank * total % pool->count + first % pool->count) % pool->count;
        for (size_t done = 0; done < count;) {
            size_t n = pool->count - at < count - done ? pool->count - at : count - done;
            memcpy((char*)dst + done * es, pool->data + at * es, n * es);
            done += n;
            at = 0;
        }
        return;
    }
    uint64_t seed = splitmix64(0x5A1Bull * 1000003u + (uint64_t)rank * 7919u + (uint64_t)kind);
    genSynthetic(dst, first, count, d->dtype, d->dist, d->sigma, seed);
}

/* ------------------------------------------------------------------------ */
/* One collective at one size                                               */
/* ------------------------------------------------------------------------ */

/* The call config of --strategy entry si: its own algorithm and codec,
 * else --algo's and --codec's. */
static zipcclCallConfig_t entryConfig(const Options* o, int si) {
    zipcclCallConfig_t cfg = {o->strats[si], o->codecs[si] != zipcclCodecDefault ? o->codecs[si] : o->codec,
                              o->algos[si] != zipcclAlgoDefault ? o->algos[si] : o->algo};
    return cfg;
}

static long long countWrong(const void* a, const void* b, size_t n, size_t es) {
    long long wrong = 0;
    if (es == 2) {
        const uint16_t *x = a, *y = b;
        for (size_t i = 0; i < n; i++) wrong += x[i] != y[i];
    } else {
        const uint32_t *x = a, *y = b;
        for (size_t i = 0; i < n; i++) wrong += x[i] != y[i];
    }
    return wrong;
}

static int cmpDouble(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

static double busFactor(const CollTest* coll, int n) {
    if (n <= 1) return 1.0;
    return coll->busFactor * (n - 1) / n;
}

/* Indices from..n-1 of the nonzero counts, most calls first (ties in index
 * order); returns how many. */
static int byCount(const uint64_t* counts, int from, int n, int* order) {
    int k = 0;
    for (int i = from; i < n; i++) {
        if (!counts[i]) continue;
        int j = k++;
        for (; j > 0 && counts[order[j - 1]] < counts[i]; j--) order[j] = order[j - 1];
        order[j] = i;
    }
    return k;
}

/* Append "first+second+..." of the names of order[0..k) to out. */
static void appendNames(char* out, size_t cap, const char* lead, const int* order, int k,
                        const char* (*name)(int)) {
    for (int i = 0; i < k; i++) {
        size_t l = strlen(out);
        snprintf(out + l, cap - l, "%s%s", i ? "+" : lead, name(order[i]));
    }
}
static const char* strategyName(int s) { return zipcclStrategyName((zipcclStrategy_t)s); }
static const char* codecName(int c) { return zipcclCodecName((zipcclCodec_t)c); }
static const char* algoName(int a) { return zipcclAlgoName((zipcclAlgo_t)a); }

/* What the library actually executed, from its counters summed over ranks:
 * the strategy, or several joined by '+' when auto ran more than one (the
 * re-measured pair's runner-up, or a change of mind mid-run), the one with
 * the most calls first; then "/dense" when compressed calls used the dense
 * codec and the design when it is not the collective's own ("/ring" for a
 * reduction's ring, "/oneshot"; "/fast+dense", "/ring+direct" when both ran,
 * again most calls first), e.g. "compressed/dense", "raw+compressed/ring",
 * "raw/oneshot".  The defaults (fast; the AllGather ring, the reductions'
 * direct design) add nothing, so a pick reads like the fixed strategy it
 * equals. */
static void pickedName(const CollTest* coll, const zipcclCounters_t* k, char* out, size_t cap) {
    int order[8];
    _Static_assert(ZIPCCL_NCODECS <= 8 && ZIPCCL_NALGOS <= 8 && zipcclStrategyAuto < 8, "order[] size");
    out[0] = '\0';
    appendNames(out, cap, "", order, byCount(k->byStrategy, zipcclStrategyNative, zipcclStrategyAuto + 1, order),
                strategyName);
    if (!out[0]) {
        snprintf(out, cap, "-");
        return;
    }
    if (k->byCodec[zipcclCodecDense] || k->byCodec[zipcclCodecF3]) /* name every codec used */
        appendNames(out, cap, "/", order, byCount(k->byCodec, 0, ZIPCCL_NCODECS, order), codecName);
    int other = 0;
    for (int a = zipcclAlgoRing; a < ZIPCCL_NALGOS; a++) other |= a != (int)coll->ownAlgo && k->byAlgo[a];
    if (other) appendNames(out, cap, "/", order, byCount(k->byAlgo, zipcclAlgoRing, ZIPCCL_NALGOS, order), algoName);
}

typedef struct {
    CollEnv env;          /* what the collectives see of the run */
    long long totalWrong; /* over every row, all ranks           */
    int onDevice;         /* --device cuda / hostcoded: the calls' buffers are dev's */
    ZDevice* dev;
    const char* devName;  /* "cuda", "hostcoded" */
} Ctx;

/* A device twin of a host buffer (the host one itself on host buffers). */
static void* devTwin(Ctx* c, void* host, size_t bytes) {
    if (!c->onDevice) return host;
    void* d = zdev_alloc(c->dev, bytes ? bytes : 1);
    if (!d) {
        fprintf(stderr, "zipccl-bench: out of %s memory for %zu bytes: %s\n", c->devName, bytes, zdev_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return d;
}
static void devFreeTwin(Ctx* c, void* d, void* host) {
    if (d != host) zdev_free(c->dev, d);
}
static void toDev(Ctx* c, void* d, const void* h, size_t bytes) {
    if (d != h) zdevCheck(zdev_upload(c->dev, d, h, bytes));
}
static void toHost(Ctx* c, void* h, const void* d, size_t bytes) {
    if (d != h) zdevCheck(zdev_download(c->dev, h, d, bytes));
}

/* Counters of one call: after - before, per field. */
static void addDelta(zipcclCounters_t* sum, const zipcclCounters_t* a, const zipcclCounters_t* b) {
    sum->calls += b->calls - a->calls;
    sum->rawBytes += b->rawBytes - a->rawBytes;
    sum->wireBytes += b->wireBytes - a->wireBytes;
    sum->codecSeconds += b->codecSeconds - a->codecSeconds;
    sum->busBytes += b->busBytes - a->busBytes;
    for (int k = 0; k < 5; k++) sum->byStrategy[k] += b->byStrategy[k] - a->byStrategy[k];
    for (int k = 0; k < ZIPCCL_NCODECS; k++) sum->byCodec[k] += b->byCodec[k] - a->byCodec[k];
    for (int k = 0; k < ZIPCCL_NALGOS; k++) sum->byAlgo[k] += b->byAlgo[k] - a->byAlgo[k];
}

/* Check the result in recv of strategy strat; sets *wrong (-1: not
 * bit-comparable) and *differ (-1: not reported), both summed over ranks.
 *
 * The check: raw's result is the reference.  Raw itself is checked against
 * the entry's expected result: MPI's own collective (AllGather, AlltoAll,
 * AlltoAllv) or the documented reduction recomputed locally (ReduceScatter,
 * AllReduce); every other strategy against raw.  Native reductions are the
 * exception: MPI adds pairwise in its own tree order and rounds at every
 * combine (transport_mpi.c), so they are not bit-comparable; their rows
 * report #wrong as n/a and the number of elements that differ from raw as
 * "differ".  When auto picks native for a reduction, its result is compared
 * with native's. */
static void checkResult(Ctx* c, const Options* o, const CollTest* coll, const CollShape* s,
                        zipcclStrategy_t strat, const char* picked, const void* dsend, const void* ref,
                        void* recv, long long refWrong, long long* wrong, long long* differ) {
    const size_t es = zipcclTypeSize(o->dtype);
    const int reduction = coll->reduction;
    *wrong = -1, *differ = -1;
    if (o->injectError && strat == zipcclStrategyCompressed && c->env.rank == 0)
        ((unsigned char*)recv)[(s->recvElems / 2) * es] ^= 1u;
    if (!o->check) return;
    long long v[2] = {0, 0}; /* {wrong, differ} summed over ranks */
    int nativeRed = reduction && strat == zipcclStrategyNative;
    int autoNative = reduction && strat == zipcclStrategyAuto && strchr(picked, '+') == NULL &&
                     !strcmp(picked, "native");
    int autoMixed = reduction && strat == zipcclStrategyAuto && strstr(picked, "native") &&
                    strchr(picked, '+');
    if (strat == zipcclStrategyRaw) {
        v[0] = refWrong + countWrong(ref, recv, s->recvElems, es);
    } else if (nativeRed || autoMixed) {
        v[1] = countWrong(ref, recv, s->recvElems, es);
    } else if (autoNative) {
        /* auto's result against native's own, computed once more now */
        void* nat = benchAlloc(s->recvElems * es);
        void* dnat = devTwin(c, nat, s->recvElems * es);
        const zipcclCallConfig_t native = {zipcclStrategyNative, o->codec, zipcclAlgoDefault};
        ZCHECK(coll->run(dsend, dnat, s, &c->env, &native, NULL));
        toHost(c, nat, dnat, s->recvElems * es);
        devFreeTwin(c, dnat, nat);
        v[0] = countWrong(nat, recv, s->recvElems, es);
        v[1] = countWrong(ref, recv, s->recvElems, es);
        free(nat);
    } else {
        v[0] = countWrong(ref, recv, s->recvElems, es);
    }
    MCHECK(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    if (!(nativeRed || autoMixed)) *wrong = v[0], c->totalWrong += v[0];
    if (nativeRed || autoNative || autoMixed) *differ = v[1];
}

/* One result line (rank 0). */
static void report(const Options* o, const CollShape* s, const CollTest* coll, zipcclCallConfig_t cfg,
                   int nranks, double t, double ratio, double codecUs, double busPerCall, const char* picked,
                   long long wrong, long long differ) {
    const zipcclStrategy_t strat = cfg.strategy;
    const zipcclAlgo_t algo = cfg.algo;
    double algbw = (double)s->bytes / t / 1e9, busbw = algbw * busFactor(coll, nranks);
    const char* sn = zipcclStrategyName(strat);
    int coded = strat == zipcclStrategyCompressed || strat == zipcclStrategyAuto;
    int algoed = strat != zipcclStrategyNative;
    if (o->json) {
        printf("{\"coll\":\"%s\",\"dtype\":\"%s\",\"bytes\":%zu,\"count\":%zu,"
               "\"nranks\":%d,\"buffers\":\"%s\",\"strategy\":\"%s\",",
               coll->name, zipcclTypeName(o->dtype), s->bytes, s->count, nranks,
               o->device == 1 ? "cuda" : o->device == 2 ? "hostcoded" : "host", sn);
        if (o->net) printf("\"net\":\"%s\",", o->net == 1 ? "nccl" : "host");
        if (coded) printf("\"codec\":\"%s\",", zipcclCodecName(cfg.codec));
        if (algoed) printf("\"algo\":\"%s\",", zipcclAlgoName(algo));
        if (strat == zipcclStrategyAuto) printf("\"picked\":\"%s\",", picked);
        printf("\"op\":\"%s\",\"dist\":\"%s\",\"time_us\":%.3f,\"algbw_gbps\":%.4f,"
               "\"busbw_gbps\":%.4f,\"ratio\":%.4f,\"codec_us\":%.2f,\"iters\":%d,\"order\":\"%s\",\"gap_ms\":%d,",
               o->op == zipcclAvg ? "avg" : "sum",
               o->input ? "file" : o->dist == DIST_RANDOM ? "random" : "gaussian", t * 1e6, algbw,
               busbw, ratio, codecUs, o->iters, o->sequential ? "sequential" : "interleaved", o->gapMs);
        if (o->device) printf("\"bus_bytes\":%.0f,", busPerCall);
        if (o->device) { /* the pieces of calls coded on the device (null: the library's default) */
            const char* pb = getenv("ZIPCCL_DEVICE_PIECE_BYTES");
            printf("\"device_piece_bytes\":%s,", pb && *pb && strspn(pb, "0123456789") == strlen(pb) ? pb : "null");
        }
        if (differ >= 0) printf("\"differ\":%lld,", differ);
        if (wrong >= 0) printf("\"wrong\":%lld}\n", wrong);
        else printf("\"wrong\":null}\n");
    } else {
        char wbuf[32];
        if (wrong >= 0) snprintf(wbuf, sizeof wbuf, "%lld", wrong);
        else snprintf(wbuf, sizeof wbuf, "n/a");
        char note[96] = "";
        if (strat == zipcclStrategyAuto) snprintf(note, sizeof note, "%s", picked);
        if (differ >= 0)
            snprintf(note + strlen(note), sizeof note - strlen(note), "%s(%lld differ from raw)",
                     note[0] ? " " : "", differ);
        char label[48]; /* an entry's own algorithm and codec show as STRATEGY:ALGO:CODEC */
        snprintf(label, sizeof label, "%s", sn);
        if (algoed && algo != o->algo) snprintf(label + strlen(label), sizeof label - strlen(label), ":%s", zipcclAlgoName(algo));
        if (coded && cfg.codec != o->codec)
            snprintf(label + strlen(label), sizeof label - strlen(label), ":%s", zipcclCodecName(cfg.codec));
        printf("%14s %12zu %12zu %6s %17s %12.1f %9.3f %9.3f %7.3f %10.1f %7s  %s\n", coll->name,
               s->bytes, s->count, zipcclTypeName(o->dtype), label, t * 1e6, algbw, busbw, ratio,
               codecUs, wbuf, note);
    }
    fflush(stdout);
}

/* The order of one round of timed calls: a permutation of 0..ns-1 drawn from
 * the round's number, so every rank draws the same one.  A rotating order
 * (each round the last one shifted by one) kept every strategy behind the
 * same predecessor, and the call before moves a call's time: two entries of
 * one design (compressed, compressed:fast), 200 timed calls each, the second
 * always behind the first, measured 0.97x the first (median of 30 points,
 * AllGather and AlltoAll 4 KiB-1 MiB, unthrottled emulated cluster, 15 of 30
 * within 3%); shuffled, 0.996x (37 of 40 within 3%). */
static void roundOrder(int* perm, int ns, uint64_t round) {
    for (int i = 0; i < ns; i++) perm[i] = i;
    uint64_t h = splitmix64(0x0DE5ull ^ round);
    for (int i = ns - 1; i > 0; i--) { /* Fisher-Yates */
        h = splitmix64(h);
        int j = (int)(h % (uint64_t)(i + 1));
        int x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
}

/* One size of one collective, every strategy.  Each strategy first runs its
 * warm-up calls; then the timed calls go round by round, every strategy once
 * per round in an order shuffled each round (--order interleaved, the
 * default), so that a burst of load on a shared machine hits all strategies
 * alike instead of whichever ran at the time, and no strategy always follows
 * the same one; --order sequential times each strategy's calls
 * back to back (nccl-tests' way).  The library's counters are read around
 * each timed call, so ratio and codec time stay per strategy.  The check
 * runs on each strategy's last timed call, whose output buffer is poisoned
 * (outside the timing) so that a stale result cannot pass. */
static void benchOne(Ctx* c, const Options* o, const CollTest* coll, size_t bytes) {
    const CollEnv* e = &c->env;
    const zipcclCollKind_t kind = coll->kind;
    size_t es = zipcclTypeSize(o->dtype);
    CollShape s = {0};
    coll->shape(&s, bytes, e);
    void* send = benchAlloc(s.sendElems * es);
    void* recv = benchAlloc(s.recvElems * es);
    void* ref = o->check ? benchAlloc(s.recvElems * es) : NULL;
    coll->init(send, &s, e);
    /* --device: the calls take device twins; the checks read host copies. */
    void* dsend = devTwin(c, send, s.sendElems * es);
    void* drecv = devTwin(c, recv, s.recvElems * es);
    toDev(c, dsend, send, s.sendElems * es);

    /* Raw's result is the reference, itself checked against the entry's
     * expected result (computed into recv, poisoned first). */
    long long refWrong = 0;
    if (o->check) {
        const zipcclCallConfig_t raw = {zipcclStrategyRaw, o->codec, o->algo};
        void* dref = devTwin(c, ref, s.recvElems * es);
        ZCHECK(coll->run(dsend, dref, &s, e, &raw, NULL));
        toHost(c, ref, dref, s.recvElems * es);
        devFreeTwin(c, dref, ref);
        memset(recv, 0xA5, s.recvElems * es);
        coll->expected(recv, send, &s, e);
        refWrong = countWrong(ref, recv, s.recvElems, es);
    }

    /* The entries that apply to this collective (addStrat), by index. */
    int use[MAX_STRATS], ns = 0;
    for (int k = 0; k < o->nstrats; k++)
        if (o->algos[k] == zipcclAlgoDefault || zipcclAlgoRun(kind, o->algos[k]) == o->algos[k]) use[ns++] = k;
    const int iters = o->iters;
    double* times = benchAlloc((size_t)ns * iters * sizeof(double)); /* [strategy][iteration] */
    zipcclCounters_t sum[MAX_STRATS];
    long long wrong[MAX_STRATS], differ[MAX_STRATS];
    char picked[MAX_STRATS][64];
    memset(sum, 0, sizeof sum);
    for (int si = 0; si < ns; si++) {
        /* auto spends its first calls in a size bucket measuring candidate
         * designs (comm/tune/switcher.c); time it once it has settled. */
        zipcclStrategy_t strat = o->strats[use[si]];
        int aw = autoWarmup(coll, bytes, e->nranks);
        int warmup = strat == zipcclStrategyAuto && o->warmup < aw ? aw : o->warmup;
        const zipcclCallConfig_t cfg = entryConfig(o, use[si]);
        for (int it = 0; it < warmup; it++) ZCHECK(coll->run(dsend, drecv, &s, e, &cfg, NULL));
        /* Close contenders get extra runs, as many as the times call for. */
        for (int more = 0, settled = 0; strat == zipcclStrategyAuto && more < 4 * aw; more++) {
            ZCHECK(zipcclAutoSettled(e->comm, kind, o->dtype, autoBytes(coll, bytes, e->nranks), &settled));
            if (settled) break;
            ZCHECK(coll->run(dsend, drecv, &s, e, &cfg, NULL));
        }
    }
    int perm[MAX_STRATS];
    for (int k = 0; k < ns * iters; k++) {
        int si, it;
        if (o->sequential) {
            si = k / iters, it = k % iters;
        } else {
            it = k / ns;
            if (k % ns == 0) roundOrder(perm, ns, (uint64_t)bytes * 131u + (uint64_t)kind * 7u + (uint64_t)it);
            si = perm[k % ns];
        }
        zipcclStrategy_t strat = o->strats[use[si]];
        const zipcclCallConfig_t cfg = entryConfig(o, use[si]);
        const int last = it == iters - 1;
        if (last) { /* a stale result must not pass the check */
            memset(recv, 0xA5, s.recvElems * es);
            toDev(c, drecv, recv, s.recvElems * es);
        }
        zipcclCounters_t before, after;
        ZCHECK(zipcclCommGetCounters(e->comm, kind, &before));
        if (o->gapMs) {
            const struct timespec gap = {o->gapMs / 1000, (long)(o->gapMs % 1000) * 1000000L};
            nanosleep(&gap, NULL);
        }
        MCHECK(MPI_Barrier(MPI_COMM_WORLD));
        double t0 = MPI_Wtime();
        ZCHECK(coll->run(dsend, drecv, &s, e, &cfg, NULL));
        times[si * iters + it] = MPI_Wtime() - t0;
        ZCHECK(zipcclCommGetCounters(e->comm, kind, &after));
        addDelta(&sum[si], &before, &after);
        if (!last) continue;
        zipcclCounters_t all = sum[si];
        MCHECK(MPI_Allreduce(MPI_IN_PLACE, all.byStrategy, 5, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
        MCHECK(MPI_Allreduce(MPI_IN_PLACE, all.byCodec, ZIPCCL_NCODECS, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
        MCHECK(MPI_Allreduce(MPI_IN_PLACE, all.byAlgo, ZIPCCL_NALGOS, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD));
        pickedName(coll, &all, picked[si], sizeof picked[si]);
        toHost(c, recv, drecv, s.recvElems * es);
        checkResult(c, o, coll, &s, strat, picked[si], dsend, ref, recv, refWrong, &wrong[si],
                    &differ[si]);
    }
    for (int si = 0; si < ns; si++) {
        /* Each iteration lasts as long as its slowest rank; report the median. */
        double* ts = times + si * iters;
        MCHECK(MPI_Allreduce(MPI_IN_PLACE, ts, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
        qsort(ts, (size_t)iters, sizeof(double), cmpDouble);
        double t = iters % 2 ? ts[iters / 2] : 0.5 * (ts[iters / 2 - 1] + ts[iters / 2]);
        double sums[4] = {(double)sum[si].rawBytes, (double)sum[si].wireBytes, sum[si].codecSeconds,
                          (double)sum[si].busBytes};
        MCHECK(MPI_Allreduce(MPI_IN_PLACE, sums, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        double ratio = sums[1] > 0 ? sums[0] / sums[1] : 1.0;
        double codecUs = sum[si].calls ? 1e6 * sums[2] / e->nranks / (double)sum[si].calls : 0.0;
        double bus = sum[si].calls ? sums[3] / e->nranks / (double)sum[si].calls : 0.0;
        if (e->rank == 0)
            report(o, &s, coll, entryConfig(o, use[si]), e->nranks, t, ratio, codecUs, bus, picked[si], wrong[si],
                   differ[si]);
    }
    free(times);
    devFreeTwin(c, dsend, send);
    devFreeTwin(c, drecv, recv);
    free(ref);
    free(recv);
    free(send);
    free(s.blocks);
}

/* ------------------------------------------------------------------------ */
/* Header and main                                                          */
/* ------------------------------------------------------------------------ */

static void printHeader(const Ctx* c, const Options* o) {
    /* Host names: the emulated cluster (scripts/cluster.sh) runs every rank
     * under one kernel hostname, so it exports ZCL_HOST per namespace. */
    char me[64] = "";
    const char* h = getenv("ZCL_HOST");
    if (h) snprintf(me, sizeof me, "%.63s", h);
    else {
        int len = 0;
        char name[MPI_MAX_PROCESSOR_NAME];
        MPI_Get_processor_name(name, &len);
        snprintf(me, sizeof me, "%.63s", name);
    }
    char* all = c->env.rank == 0 ? benchAlloc((size_t)c->env.nranks * sizeof me) : NULL;
    MCHECK(MPI_Gather(me, sizeof me, MPI_CHAR, all, sizeof me, MPI_CHAR, 0, MPI_COMM_WORLD));
    if (c->env.rank != 0) return;

    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    struct utsname u;
    uname(&u);
    char cpu[128] = "unknown CPU";
    FILE* f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
                snprintf(cpu, sizeof cpu, "%s", strchr(line, ':') + 2);
                cpu[strcspn(cpu, "\n")] = '\0';
                break;
            }
        fclose(f);
    }
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) < 0) load[0] = -1;

    printf("# zipccl-bench  ZipCCL %d.%d (format %d)\n", ZIPCCL_VERSION_MAJOR,
           ZIPCCL_VERSION_MINOR, ZIPCCL_FORMAT_VERSION);
    printf("# date %s  nranks %d  buffers %s\n# hosts", date, c->env.nranks, c->onDevice ? c->devName : "host");
    for (int r = 0; r < c->env.nranks; r++) printf(" %d:%s", r, all + (size_t)r * sizeof me);
    int nodeSize = 0;
    zipcclCommNodeSize(c->env.comm, &nodeSize); /* the hier designs' nodes (MPI's, or ZIPCCL_NODE_SIZE) */
    printf("\n# node size %d%s", nodeSize, getenv("ZIPCCL_NODE_SIZE") ? " (ZIPCCL_NODE_SIZE)" : " (MPI_Comm_split_type)");
    printf("\n# machine %s %s %s, %s, %ld cpus, load %.2f %.2f %.2f\n", u.nodename, u.sysname,
           u.machine, cpu, sysconf(_SC_NPROCESSORS_ONLN), load[0], load[1], load[2]);
    const char* btlFlags = getenv("OMPI_MCA_btl_tcp_flags"), *piece = getenv("ZIPCCL_PIECE_BYTES");
    printf("# open mpi btl_tcp_flags %s  pieces %s\n", btlFlags ? btlFlags : "(default)",
           piece ? piece : "(sized to the link)");
    printf("# dtype %s  op %s  data %s", zipcclTypeName(o->dtype), o->op == zipcclAvg ? "avg" : "sum",
           o->input ? o->input : o->dist == DIST_RANDOM ? "random bits" : "gaussian");
    if (!o->input && o->dist == DIST_GAUSSIAN) printf(" sigma %g", o->sigma);
    printf("  iters %d  warmup %d  check %d  codec %s  algo %s  order %s  gap %d ms\n", o->iters,
           o->warmup, o->check, zipcclCodecName(o->codec), zipcclAlgoName(o->algo),
           o->sequential ? "sequential" : "interleaved", o->gapMs);
    if (!o->json)
        printf("#\n# %12s %12s %12s %6s %17s %12s %9s %9s %7s %10s %7s  %s\n"
               "# %12s %12s %12s %6s %17s %12s %9s %9s %7s %10s %7s\n",
               "coll", "size", "count", "type", "strategy", "time", "algbw", "busbw", "ratio",
               "codec", "#wrong", "picked", "", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
               "(GB/s)", "", "(us/call)", "");
    fflush(stdout);
    free(all);
}

int main(int argc, char** argv) {
    Options o;
    parseArgs(argc, argv, &o);
    Pool pool = {NULL, 0};
    if (o.input) loadInput(o.input, o.dtype, &pool);
    const BenchData data = {o.dtype, o.dist, o.sigma, &pool};

    MCHECK(MPI_Init(&argc, &argv));
    Ctx c = {.env = {.dtype = o.dtype, .op = o.op, .data = &data}};
    MCHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c.env.rank));
    MCHECK(MPI_Comm_size(MPI_COMM_WORLD, &c.env.nranks));
    MCHECK(MPI_Type_contiguous((int)zipcclTypeSize(o.dtype), MPI_BYTE, &c.env.elem));
    MCHECK(MPI_Type_commit(&c.env.elem));
    MPI_Comm world = MPI_COMM_WORLD;
    ZCHECK(zipcclCommInitMpi(&c.env.comm, &world));
    if (o.device) {
        if (o.device == 1) { /* the GPU of this rank's local rank, or GPU 0 of a single-GPU machine */
            MPI_Comm node;
            int local = 0;
            MCHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
            MCHECK(MPI_Comm_rank(node, &local));
            MPI_Comm_free(&node);
            const int n = zdev_cuda_count();
            c.dev = zdev_cuda(n > 0 ? local % n : 0);
            if (!c.dev) {
                fprintf(stderr, "zipccl-bench: --device cuda: %s\n", zdev_error());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            c.devName = "cuda";
        } else {
            c.dev = zdev_cpu();
            c.devName = "hostcoded";
        }
        ZCHECK(zipcclCommSetDevice(c.env.comm, c.dev, zipcclDeviceCoded));
        c.onDevice = 1;
        if (o.net == 1) ZCHECK(zipcclCommUseNccl(c.env.comm));
        if (o.net == 2) {
            zipcclDeviceNet_t net;
            ZCHECK(zipcclDeviceNetHost(c.env.comm, &net));
            ZCHECK(zipcclCommSetNet(c.env.comm, &net));
        }
    }

    printHeader(&c, &o);
    for (int k = 0; k < NCOLLS; k++) {
        if (!o.doColl[k]) continue;
        size_t last = 0;
        for (double b = (double)o.minBytes; b <= (double)o.maxBytes * (1 + 1e-9); b *= o.factor) {
            size_t bytes = (size_t)(b + 0.5);
            if (bytes == last) continue; /* a small factor can round to the same size */
            last = bytes;
            benchOne(&c, &o, kColls[k], bytes);
        }
    }
    if (c.env.rank == 0 && o.check && !o.json)
        printf("# total #wrong %lld%s\n", c.totalWrong, c.totalWrong ? "  (FAILED)" : "");

    ZCHECK(zipcclCommDestroy(c.env.comm));
    MPI_Type_free(&c.env.elem);
    free(pool.data);
    MPI_Finalize();
    return c.totalWrong ? 1 : 0;
}
