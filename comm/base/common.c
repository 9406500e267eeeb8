/*
 * common.c — what every file of libzipccl may use and that depends on
 * nothing else of it: result strings, per-thread error detail, dtype
 * helpers, element conversions by dtype, the clock, and the names of the
 * collectives' enums.
 *
 * Everything in libzipccl reports failure through zipcclResult_t; the
 * human-readable "what exactly" goes through zipcclSetError() into a
 * thread-local buffer that zipcclGetLastErrorDetail() returns.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "zipccl.h"
#include "zipccl_internal.h"
#include "zipccl_float.h"

static const char* const kResultStrings[zipcclNumResults] = {
    [zipcclSuccess] = "success",
    [zipcclInvalidArgument] = "invalid argument",
    [zipcclDstTooSmall] = "destination buffer too small",
    [zipcclCorruptStream] = "corrupt or truncated stream",
    [zipcclChecksumMismatch] = "checksum mismatch",
    [zipcclUnsupported] = "unsupported by this build or format version",
    [zipcclSystemError] = "system error",
    [zipcclTransportError] = "transport (MPI/NCCL) error",
    [zipcclMismatch] = "ranks disagree on the call's arguments",
    [zipcclTimeout] = "timed out",
    [zipcclInternalError] = "internal error",
    [zipcclCommBroken] = "communicator broken by an earlier failure",
};

const char* zipcclGetErrorString(zipcclResult_t result) {
    if ((int)result < 0 || result >= zipcclNumResults || !kResultStrings[result])
        return "unknown result code";
    return kResultStrings[result];
}

static _Thread_local char tls_detail[512];

const char* zipcclGetLastErrorDetail(void) { return tls_detail; }

zipcclResult_t zipcclSetError(zipcclResult_t code, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_detail, sizeof tls_detail, fmt, ap);
    va_end(ap);
    return code;
}

zipcclResult_t zipcclPrefixError(zipcclResult_t code, const char* fmt, ...) {
    /* The current detail is an argument of the new one: copy it first, since
     * formatting into the buffer it is read from repeated the prefix and lost
     * the reason. */
    char reason[sizeof tls_detail];
    snprintf(reason, sizeof reason, "%s", tls_detail);
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(tls_detail, sizeof tls_detail, fmt, ap);
    va_end(ap);
    size_t at = len < 0 ? 0 : (size_t)len, room = sizeof tls_detail;
    if (reason[0] && at + 2 < room) {
        memcpy(tls_detail + at, ": ", 2);
        at += 2;
        size_t r = strlen(reason);
        if (r > room - 1 - at) r = room - 1 - at; /* cut the reason, not the prefix */
        memcpy(tls_detail + at, reason, r);
        tls_detail[at + r] = '\0';
    }
    return code;
}

void zipcclClearError(void) { tls_detail[0] = '\0'; }

size_t zipcclTypeSize(zipcclDataType_t dtype) {
    switch (dtype) {
    case zipcclBfloat16:
    case zipcclFloat16: return 2;
    case zipcclFloat32: return 4;
    }
    return 0;
}

const char* zipcclTypeName(zipcclDataType_t dtype) {
    switch (dtype) {
    case zipcclBfloat16: return "bf16";
    case zipcclFloat16: return "fp16";
    case zipcclFloat32: return "fp32";
    }
    return "?";
}

int zipcclTypeParse(const char* name, zipcclDataType_t* out) {
    if (!strcmp(name, "bf16") || !strcmp(name, "bfloat16")) *out = zipcclBfloat16;
    else if (!strcmp(name, "fp16") || !strcmp(name, "half") || !strcmp(name, "float16")) *out = zipcclFloat16;
    else if (!strcmp(name, "fp32") || !strcmp(name, "float") || !strcmp(name, "float32")) *out = zipcclFloat32;
    else return 0;
    return 1;
}

const char* zipcclCodecName(zipcclCodec_t c) {
    switch (c) {
    case zipcclCodecDefault: return "default";
    case zipcclCodecFast: return "fast";
    case zipcclCodecDense: return "dense";
    case zipcclCodecStored: return "stored";
    case zipcclCodecF3: return "f3";
    case zipcclCodecF2: return "f2";
    }
    return "?";
}

/* ---- element conversions by dtype (zipccl_float.h does the arithmetic) ---- */

/* fp16 -> fp32 by table: exact, and far faster than the bit arithmetic in
 * loops over many elements.  Loops fetch it once. */
static float fp16Table[65536];
static pthread_once_t fp16Once = PTHREAD_ONCE_INIT;
static void fp16TableInit(void) {
    for (uint32_t h = 0; h < 65536; h++) fp16Table[h] = zipcclFp16ToFloat((uint16_t)h);
}
const float* zipcclFp16Table(void) {
    pthread_once(&fp16Once, fp16TableInit);
    return fp16Table;
}

float zipcclToFloat(const void* p, size_t i, zipcclDataType_t dtype) {
    if (dtype == zipcclFloat32) return ((const float*)p)[i];
    uint16_t h = ((const uint16_t*)p)[i];
    return dtype == zipcclBfloat16 ? zipcclBf16ToFloat(h) : zipcclFp16Table()[h];
}

void zipcclFromFloat(void* p, size_t i, float v, zipcclDataType_t dtype) {
    if (dtype == zipcclFloat32) ((float*)p)[i] = v;
    else ((uint16_t*)p)[i] = dtype == zipcclBfloat16 ? zipcclFloatToBf16(v) : zipcclFloatToFp16(v);
}

double zipcclNow(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- staging memory ---------------------------------------------------------- */

void* zipcclHostAlloc(size_t* bytes) {
    const size_t huge = (size_t)2 << 20;
    if (*bytes < huge) return malloc(*bytes ? *bytes : 1);
    const size_t n = (*bytes + huge - 1) / huge * huge;
    void* p = NULL;
    if (posix_memalign(&p, huge, n) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, n, MADV_HUGEPAGE); /* a hint; its failure changes nothing */
#endif
    *bytes = n;
    return p;
}

/* ---- names of the collectives' enums ----------------------------------------- */

const char* zipcclCollName(zipcclCollKind_t kind) {
    static const char* const names[zipcclNumCollKinds] = {"AllGather", "ReduceScatter",
                                                          "AllReduce", "AlltoAll", "AlltoAllv"};
    return (int)kind >= 0 && kind < zipcclNumCollKinds ? names[kind] : "?";
}

const char* zipcclStrategyName(zipcclStrategy_t s) {
    switch (s) {
    case zipcclStrategyDefault: return "default";
    case zipcclStrategyNative: return "native";
    case zipcclStrategyRaw: return "raw";
    case zipcclStrategyCompressed: return "compressed";
    case zipcclStrategyAuto: return "auto";
    }
    return "?";
}

zipcclResult_t zipcclStrategyParse(const char* name, zipcclStrategy_t* out) {
    if (!name || !out) return zipcclSetError(zipcclInvalidArgument, "zipcclStrategyParse: null argument");
    static const char* const names[] = {"native", "raw", "compressed", "auto"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, names[i])) { *out = (zipcclStrategy_t)(i + 1); return zipcclSuccess; }
    return zipcclSetError(zipcclInvalidArgument,
                          "unknown strategy '%s' (expected native, raw, compressed or auto)", name);
}

const char* zipcclAlgoName(zipcclAlgo_t a) {
    static const char* const names[ZIPCCL_NALGOS] = {"default", "ring", "direct", "oneshot", "hier"};
    return (int)a >= 0 && a < ZIPCCL_NALGOS ? names[a] : "?";
}

zipcclResult_t zipcclAlgoParse(const char* name, zipcclAlgo_t* out) {
    if (!name || !out) return zipcclSetError(zipcclInvalidArgument, "zipcclAlgoParse: null argument");
    for (int a = zipcclAlgoRing; a < ZIPCCL_NALGOS; a++)
        if (!strcmp(name, zipcclAlgoName((zipcclAlgo_t)a))) { *out = (zipcclAlgo_t)a; return zipcclSuccess; }
    return zipcclSetError(zipcclInvalidArgument, "algorithm '%s' (expected ring, direct, oneshot or hier)", name);
}

zipcclResult_t zipcclCodecParse(const char* name, zipcclCodec_t* out) {
    if (!name || !out) return zipcclSetError(zipcclInvalidArgument, "zipcclCodecParse: null argument");
    if (!strcmp(name, "fast")) *out = zipcclCodecFast;
    else if (!strcmp(name, "dense")) *out = zipcclCodecDense;
    else if (!strcmp(name, "f3")) *out = zipcclCodecF3;
    else if (!strcmp(name, "f2")) *out = zipcclCodecF2;
    else return zipcclSetError(zipcclInvalidArgument, "codec '%s' (expected fast, dense, f3 or f2)", name);
    return zipcclSuccess;
}

zipcclAlgo_t zipcclAlgoRun(zipcclCollKind_t kind, zipcclAlgo_t a) {
    switch (kind) {
    case zipcclCollAllGather: return a == zipcclAlgoOneShot || a == zipcclAlgoHier ? a : zipcclAlgoRing;
    case zipcclCollReduceScatter: return a == zipcclAlgoRing || a == zipcclAlgoHier ? a : zipcclAlgoDirect;
    case zipcclCollAllReduce: return a == zipcclAlgoDefault ? zipcclAlgoDirect : a;
    default: return a == zipcclAlgoHier ? a : zipcclAlgoDefault; /* the All-to-Alls' pairwise exchange */
    }
}

/* ---- reduction arithmetic (the canonical order's, docs/COLLECTIVES.md §3) ---- */

/* acc[i] (+)= x[i] in fp32, one loop per dtype so the compiler vectorises. */
void zipcclAccumulate(float* acc, const void* x, size_t count, zipcclDataType_t dtype, int first) {
    if (dtype == zipcclFloat32) {
        const float* f = x;
        if (first) memcpy(acc, f, count * 4);
        else for (size_t i = 0; i < count; i++) acc[i] += f[i];
        return;
    }
    const uint16_t* h = x;
    if (dtype == zipcclBfloat16) {
        if (first) for (size_t i = 0; i < count; i++) acc[i] = zipcclBf16ToFloat(h[i]);
        else for (size_t i = 0; i < count; i++) acc[i] += zipcclBf16ToFloat(h[i]);
        return;
    }
    const float* t = zipcclFp16Table();
    if (first) for (size_t i = 0; i < count; i++) acc[i] = t[h[i]];
    else for (size_t i = 0; i < count; i++) acc[i] += t[h[i]];
}

/* out[i] = round(acc[i] (/ n)), one branch-free loop per dtype and op (the
 * dtype was once chosen per element, which cost more than the rounding). */
void zipcclFinalize(void* out, const float* acc, size_t count, zipcclDataType_t dtype,
                     zipcclRedOp_t op, int n) {
    const float div = (float)n;
    const int avg = op == zipcclAvg;
    uint16_t* h = out;
    if (dtype == zipcclFloat32) {
        if (!avg) memmove(out, acc, count * 4);
        else for (size_t i = 0; i < count; i++) ((float*)out)[i] = acc[i] / div;
    } else if (dtype == zipcclBfloat16) {
        if (!avg) for (size_t i = 0; i < count; i++) h[i] = zipcclFloatToBf16(acc[i]);
        else for (size_t i = 0; i < count; i++) h[i] = zipcclFloatToBf16(acc[i] / div);
    } else {
        if (!avg) for (size_t i = 0; i < count; i++) h[i] = zipcclFloatToFp16(acc[i]);
        else for (size_t i = 0; i < count; i++) h[i] = zipcclFloatToFp16(acc[i] / div);
    }
}
