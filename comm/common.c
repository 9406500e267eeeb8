/*
 * common.c — result strings, per-thread error detail, dtype helpers and
 * element conversions by dtype.
 *
 * Everything in libzipccl reports failure through zipcclResult_t; the
 * human-readable "what exactly" goes through zipcclSetError() into a
 * thread-local buffer that zipcclGetLastErrorDetail() returns.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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
    [zipcclInProgress] = "operation in progress",
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
