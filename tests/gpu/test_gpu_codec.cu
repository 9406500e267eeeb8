/*
 * test_gpu_codec.cu — the CUDA codec on a real device, checked against the
 * CPU codec, and its benchmark.
 *
 *   test_gpu_codec            tests: for bf16/fp16/fp32, fast (F2)/f3/dense,
 *                             checksum on/off and many counts and
 *                             distributions, the GPU frame equals the CPU frame
 *                             byte for byte and each side decodes the other's;
 *                             damaged frames (random and F2-specific faults)
 *                             get the CPU decoder's verdict without writes
 *                             past the output; chunks whose coding takes
 *                             exactly raw - 1, raw and raw + 1 bytes
 *                             (codec_boundary.h) coded or raw as the CPU
 *                             codes them.
 *   test_gpu_codec --bench [--json FILE]
 *                             throughput and per-call time on
 *                             device-resident Gaussian data, bf16/fp16/fp32,
 *                             every codec, 64 KiB to 1 GiB, the
 *                             device-to-device copy beside it (cudaEvent
 *                             timing, median after a warm-up); each frame
 *                             checked against the CPU codec's bytes.
 *   test_gpu_codec --contention [--json FILE]
 *                             how much the codec slows a bf16 GEMM beside it
 *                             and the GEMM the codec (issue 49 item 5, the
 *                             projection's contention input): cuBLAS bf16
 *                             8192^3 on one stream, alone and while another
 *                             host thread compresses and decompresses 256 MiB
 *                             of bf16 on its own stream, each codec.
 *   test_gpu_codec --sanitize [small]
 *                             a few frames of every codec and dtype (3
 *                             chunks) and, unless small, 81 chunks of mixed
 *                             scales (the encoders' look-back across
 *                             windows of 32, F2 and R frames decoded a warp
 *                             a chunk) and the batch: small enough to run
 *                             under compute-sanitizer (scripts/test_gpu.sh:
 *                             memcheck on all, racecheck on the small set).
 *   test_gpu_codec --probe    exit 0 if a CUDA device is usable, else 2.
 *
 * Run by scripts/test_gpu.sh (make test-gpu). Prints "PASS name" /
 * "FAIL name: why" lines and a closing "N passed, N failed".
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "codec_cases.h"

#define CUDA_OK(call)                                                                                   \
    do {                                                                                                \
        cudaError_t e_ = (call);                                                                        \
        if (e_ != cudaSuccess) {                                                                        \
            printf("FAIL cuda: %s at %s:%d: %s\n", #call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                                    \
        }                                                                                               \
    } while (0)

static cudaStream_t g_stream;
static size_t g_misalign = 0; /* device buffers start this many bytes into their allocation */

/* ---- the device backend -------------------------------------------------- */

static zipcclResult_t dev_compress(const void* src, size_t count, zipcclDataType_t dt, const zipcclCodecParams_t* p,
                                   std::vector<uint8_t>* frame) {
    size_t es = zipcclTypeSize(dt) ? zipcclTypeSize(dt) : 2;
    size_t cap = zipcclCompressBound(count, dt, p ? p->checksum : 0) + 64;
    size_t wsz = zipcclCudaWorkspaceSize(count, dt);
    uint8_t *d_in, *d_out, *d_ws;
    CUDA_OK(cudaMalloc(&d_in, count * es + 16));
    CUDA_OK(cudaMalloc(&d_out, cap + 16));
    CUDA_OK(cudaMalloc(&d_ws, wsz + 16));
    /* every copy on g_stream: a pageable cudaMemcpy may return before its DMA
     * lands, and a non-blocking stream would not wait for it */
    if (count) CUDA_OK(cudaMemcpyAsync(d_in + g_misalign, src, count * es, cudaMemcpyHostToDevice, g_stream));
    size_t size = 0;
    zipcclResult_t r = zipcclCompressCuda(d_in + g_misalign, count, dt, d_out + 3 * g_misalign, cap, &size, p,
                                          d_ws + 5 * g_misalign, wsz, g_stream);
    CUDA_OK(cudaStreamSynchronize(g_stream));
    if (r == zipcclSuccess) {
        frame->resize(size);
        if (size) CUDA_OK(cudaMemcpyAsync(frame->data(), d_out + 3 * g_misalign, size, cudaMemcpyDeviceToHost, g_stream));
        CUDA_OK(cudaStreamSynchronize(g_stream));
    }
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaFree(d_ws));
    return r;
}

static zipcclResult_t dev_decompress(const uint8_t* frame, size_t size, uint8_t* out, size_t cap, size_t* count,
                                     zipcclDataType_t expect) {
    uint8_t *d_f, *d_out, *d_ws;
    size_t wsz = 2 * size + 4096; /* 8 bytes a chunk, and a chunk has >= 4 table bytes */
    CUDA_OK(cudaMalloc(&d_f, size + 16));
    CUDA_OK(cudaMalloc(&d_out, cap + CC_GUARD + 16));
    CUDA_OK(cudaMalloc(&d_ws, wsz));
    if (size) CUDA_OK(cudaMemcpyAsync(d_f + g_misalign, frame, size, cudaMemcpyHostToDevice, g_stream));
    CUDA_OK(cudaMemsetAsync(d_out, 0xA5, cap + CC_GUARD + 16, g_stream));
    zipcclResult_t r = zipcclDecompressCuda(d_f + g_misalign, size, d_out + 2 * g_misalign, cap, count, expect,
                                            d_ws + 3 * g_misalign, wsz, g_stream);
    CUDA_OK(cudaStreamSynchronize(g_stream));
    CUDA_OK(cudaMemcpyAsync(out, d_out + 2 * g_misalign, cap + CC_GUARD, cudaMemcpyDeviceToHost, g_stream));
    CUDA_OK(cudaStreamSynchronize(g_stream));
    CUDA_OK(cudaFree(d_f));
    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaFree(d_ws));
    return r;
}

static const Backend kDev = {"gpu", dev_compress, dev_decompress};

/* The batched entries on the GPU: k buffers (Gaussian, empty, random bits,
 * a chunk and a bit) give the single calls' frames byte for byte and decode
 * back, for every codec and dtype. */
static void check_batch(void) {
    const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    enum { K = 4 };
    const size_t counts[K] = {100000, 0, 5000, 16385};
    const cc_dist_t dist[K] = {D_GAUSS, D_GAUSS, D_RANDBITS, D_GAUSS};
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < CC_NCODECS; c++) {
            const zipcclDataType_t dt = dts[d];
            const size_t es = zipcclTypeSize(dt);
            zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
            p.codec = cc_codecs[c];
            p.checksum = d == 1;
            std::vector<uint8_t> src[K], ref[K], back[K];
            const void* din[K];
            void *dout[K], *ddec[K];
            size_t cap[K], size[K], cnt[K], dcap[K];
            int ok = 1;
            for (int i = 0; i < K; i++) {
                src[i] = cc_make(dt, dist[i], counts[i]);
                ok &= dev_compress(src[i].data(), counts[i], dt, &p, &ref[i]) == zipcclSuccess;
                cap[i] = zipcclCompressBound(counts[i], dt, p.checksum);
                dcap[i] = counts[i] * es;
                void* di;
                CUDA_OK(cudaMalloc(&di, counts[i] * es + 16));
                CUDA_OK(cudaMalloc(&dout[i], cap[i] + 16));
                CUDA_OK(cudaMalloc(&ddec[i], dcap[i] + 16));
                if (counts[i]) CUDA_OK(cudaMemcpyAsync(di, src[i].data(), counts[i] * es, cudaMemcpyHostToDevice, g_stream));
                din[i] = di;
            }
            const size_t we = zipcclCudaWorkspaceSizeBatch(K, counts[0], dt, 0),
                         wd = zipcclCudaWorkspaceSizeBatch(K, counts[0], dt, 1);
            void* ws;
            CUDA_OK(cudaMalloc(&ws, we > wd ? we : wd));
            int failed = 0;
            zipcclResult_t r = zipcclCompressCudaBatch(K, din, counts, dt, dout, cap, size, &p, ws, we, g_stream, &failed);
            for (int i = 0; i < K && r == zipcclSuccess; i++) {
                std::vector<uint8_t> got(size[i]);
                if (size[i]) CUDA_OK(cudaMemcpyAsync(got.data(), dout[i], size[i], cudaMemcpyDeviceToHost, g_stream));
                CUDA_OK(cudaStreamSynchronize(g_stream));
                ok &= got == ref[i];
            }
            zipcclResult_t rd = r == zipcclSuccess
                                    ? zipcclDecompressCudaBatch(K, (const void* const*)dout, size, ddec, dcap, cnt, dt,
                                                                ws, wd, g_stream, &failed)
                                    : r;
            for (int i = 0; i < K && rd == zipcclSuccess; i++) {
                back[i].resize(counts[i] * es);
                if (counts[i]) CUDA_OK(cudaMemcpyAsync(back[i].data(), ddec[i], counts[i] * es, cudaMemcpyDeviceToHost, g_stream));
                CUDA_OK(cudaStreamSynchronize(g_stream));
                ok &= cnt[i] == counts[i] && back[i] == src[i];
            }
            char n[96];
            snprintf(n, sizeof n, "gpu/batch/%s/%s", zipcclTypeName(dt), cc_codec_name(p.codec));
            CHECK(ok && r == zipcclSuccess && rd == zipcclSuccess && failed == -1, n, "ok %d, compress %d, decompress %d (%s)",
                  ok, r, rd, zipcclGetLastErrorDetail());
            for (int i = 0; i < K; i++) {
                CUDA_OK(cudaFree((void*)din[i]));
                CUDA_OK(cudaFree(dout[i]));
                CUDA_OK(cudaFree(ddec[i]));
            }
            CUDA_OK(cudaFree(ws));
        }
}

static int run_tests(void) {
    check_batch();
    cc_api(&kDev);
    cc_chunk_log2(&kDev);
    cc_small_chunks(&kDev);
    cc_f2_shapes(&kDev);
    cc_tail_tables(&kDev);
    cc_constant(&kDev);
    cc_boundary(&kDev);
    cc_constant_damage(&kDev, zipcclBfloat16);
    cc_constant_damage(&kDev, zipcclFloat16);
    cc_constant_damage(&kDev, zipcclFloat32);
    cc_precedence(&kDev);
    const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    const zipcclCodec_t* codecs = cc_codecs; /* fast (F2), f3, dense */
    const size_t counts[] = {0, 1, 63, 64, 65, 1000, 16383, 16384, 16385, 1u << 20};
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < CC_NCODECS; c++)
            for (int cs = 0; cs < 2; cs++)
                for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
                    cc_roundtrip(&kDev, dts[d], codecs[c], cs, D_GAUSS, counts[k]);
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < CC_NCODECS; c++)
            for (int dist = D_GAUSS_SMALL; dist <= D_SPARSE; dist++)
                cc_roundtrip(&kDev, dts[d], codecs[c], dist % 2, (cc_dist_t)dist, dist == D_MIXED ? 300000 : 100000);
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < CC_NCODECS; c++)
            for (int cs = 0; cs < 2; cs++) cc_roundtrip(&kDev, dts[d], codecs[c], cs, D_ALLBITS, 65536);
    for (int c = 0; c < CC_NCODECS; c++) cc_roundtrip(&kDev, zipcclFloat32, codecs[c], 1, D_RANDBITS, 100000);
    for (int d = 0; d < 3; d++) cc_roundtrip(&kDev, dts[d], zipcclCodecStored, 1, D_GAUSS, 40000);
    cudaStream_t own = g_stream;
    g_stream = 0; /* the legacy default stream works too */
    for (int c = 0; c < CC_NCODECS; c++) cc_roundtrip(&kDev, zipcclBfloat16, codecs[c], 1, D_GAUSS, 100000);
    g_stream = own;
    g_misalign = 1; /* odd addresses: the unaligned load/store paths */
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < CC_NCODECS; c++) cc_roundtrip(&kDev, dts[d], codecs[c], 1, D_SPECIAL, 40000);
    for (int d = 0; d < 3; d++) /* C chunks */
        for (int c = 0; c < 2; c++) cc_roundtrip(&kDev, dts[d], c ? zipcclCodecDense : zipcclCodecFast, 1, D_ZERO, 40000);
    g_misalign = 0;
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < CC_NCODECS; c++)
            for (int cs = 0; cs < 2; cs++) cc_corruption(&kDev, dts[d], codecs[c], cs, 40000, 150);
    for (int cs = 0; cs < 2; cs++) cc_corruption(&kDev, zipcclFloat16, zipcclCodecStored, cs, 20000, 150);
    for (int d = 0; d < 3; d++) cc_f2_damage(&kDev, dts[d]);
    printf("%d passed, %d failed\n", tu_passes, tu_failures);
    return tu_exit();
}

/* ---- the benchmark ------------------------------------------------------- */

__device__ static uint32_t bench_hash(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return (uint32_t)x;
}

__global__ static void bench_gauss(uint8_t* out, size_t count, int dt, float sigma, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        float u1 = (bench_hash(seed + 2 * i) + 0.5f) * 2.3283064e-10f;
        float u2 = (bench_hash(seed + 2 * i + 1) + 0.5f) * 2.3283064e-10f;
        float g = sigma * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
        if (dt == 1) ((uint16_t*)out)[i] = __bfloat16_as_ushort(__float2bfloat16_rn(g));
        else if (dt == 2) ((uint16_t*)out)[i] = __half_as_ushort(__float2half_rn(g));
        else ((float*)out)[i] = g;
    }
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* Time fn() with events on g_stream: one warm-up call, then repeats until 7
 * runs or 1.5 s of device time; the median in ms, or -1 when fn failed. */
template <class F> static double time_median(F fn, zipcclResult_t* r) {
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    std::vector<double> t;
    double total = 0;
    *r = fn();
    CUDA_OK(cudaStreamSynchronize(g_stream));
    while (*r == zipcclSuccess && t.size() < 7 && total < 1500.0) {
        CUDA_OK(cudaEventRecord(e0, g_stream));
        *r = fn();
        CUDA_OK(cudaEventRecord(e1, g_stream));
        CUDA_OK(cudaEventSynchronize(e1));
        float ms;
        CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
        total += ms;
    }
    CUDA_OK(cudaEventDestroy(e0));
    CUDA_OK(cudaEventDestroy(e1));
    return *r == zipcclSuccess ? median(t) : -1.0;
}

/* FNV-1a 64 of a byte range: the frames' identity in the JSON rows */
static uint64_t fnv1a(const uint8_t* p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* The sweep: every dtype and codec from 1 MiB to 1 GiB of Gaussian data
 * already on the device; the device-to-device copy of the same bytes in the
 * same run is the ceiling. Each frame is checked against the CPU codec's
 * bytes (and its hash printed) and the round trip against the input. */
static int run_bench(const char* json_path) {
    FILE* js = json_path ? fopen(json_path, "w") : NULL;
    cudaDeviceProp prop;
    int dev = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaGetDeviceProperties(&prop, dev));
    const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    const int codes[] = {1, 2, 3};
    const size_t sizes[] = {64u << 10, 256u << 10, 1u << 20, 4u << 20, 16u << 20, 64u << 20, 256u << 20, 1024u << 20};
    const zipcclCodec_t codecs[] = {zipcclCodecFast, zipcclCodecF3, zipcclCodecDense, zipcclCodecF2};
    printf("GPU codec benchmark on %s (%d SMs): Gaussian sigma=1, device-resident, median of up to 7 "
           "timed runs after a warm-up\n", prop.name, prop.multiProcessorCount);
    printf("%-6s %-6s %8s %8s %10s %10s %9s %9s %7s %18s\n", "codec", "dtype", "KiB", "ratio", "comp GB/s",
           "decomp GB/s", "comp us", "decomp us", "cpu==", "frame fnv1a");
    const size_t max_bytes = (size_t)1024 << 20;
    uint8_t *d_in, *d_frame, *d_out, *d_ws;
    size_t cap_max = 0, ws_max = 0;
    for (zipcclDataType_t dt : dts) {
        cap_max = std::max(cap_max, zipcclCompressBound(max_bytes / zipcclTypeSize(dt), dt, 0));
        ws_max = std::max(ws_max, zipcclCudaWorkspaceSize(max_bytes / zipcclTypeSize(dt), dt));
    }
    CUDA_OK(cudaMalloc(&d_in, max_bytes));
    CUDA_OK(cudaMalloc(&d_frame, cap_max));
    CUDA_OK(cudaMalloc(&d_out, max_bytes));
    CUDA_OK(cudaMalloc(&d_ws, ws_max));
    std::vector<uint8_t> in(max_bytes), out(max_bytes), frame(cap_max), cpu(cap_max);
    int bad = 0;
    for (int di = 0; di < 3; di++) {
        const zipcclDataType_t dt = dts[di];
        const size_t es = zipcclTypeSize(dt);
        for (size_t bytes : sizes) {
            const size_t kib = bytes >> 10, count = bytes / es;
            const size_t cap = zipcclCompressBound(count, dt, 0), wsz = zipcclCudaWorkspaceSize(count, dt);
            bench_gauss<<<1024, 256, 0, g_stream>>>(d_in, count, codes[di], 1.0f, 12345 + kib);
            CUDA_OK(cudaGetLastError());
            CUDA_OK(cudaStreamSynchronize(g_stream));
            CUDA_OK(cudaMemcpy(in.data(), d_in, bytes, cudaMemcpyDeviceToHost));
            zipcclResult_t r;
            const double tcopy = time_median(
                [&] {
                    return cudaMemcpyAsync(d_out, d_in, bytes, cudaMemcpyDeviceToDevice, g_stream) == cudaSuccess
                               ? zipcclSuccess
                               : zipcclInternalError;
                },
                &r);
            const double copy_gbps = bytes / (tcopy * 1e-3) / 1e9;
            printf("%-6s %-6s %8zu %8.4f %10.1f %10.1f %9.1f %9.1f %7s %18s\n", "memcpy", zipcclTypeName(dt), kib, 1.0,
                   copy_gbps, copy_gbps, tcopy * 1e3, tcopy * 1e3, "-", "-");
            if (js)
                fprintf(js, "{\"codec\":\"memcpy\",\"dtype\":\"%s\",\"bytes\":%zu,\"gbps\":%.1f,\"device\":\"%s\"}\n",
                        zipcclTypeName(dt), bytes, copy_gbps, prop.name);
            for (zipcclCodec_t codec : codecs) {
                zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
                p.codec = codec;
                size_t fsize = 0, got = 0;
                const double tc = time_median(
                    [&] { return zipcclCompressCuda(d_in, count, dt, d_frame, cap, &fsize, &p, d_ws, wsz, g_stream); },
                    &r);
                double td = -1;
                if (r == zipcclSuccess) {
                    CUDA_OK(cudaMemsetAsync(d_out, 0xA5, bytes, g_stream));
                    td = time_median(
                        [&] { return zipcclDecompressCuda(d_frame, fsize, d_out, bytes, &got, dt, d_ws, wsz, g_stream); },
                        &r);
                }
                char name[96];
                snprintf(name, sizeof name, "bench/%s/%s/%zuKiB/ran", cc_codec_name(codec), zipcclTypeName(dt), kib);
                if (!CHECK(r == zipcclSuccess, name, "result %d: %s", r, zipcclGetLastErrorDetail())) {
                    bad++;
                    continue;
                }
                CUDA_OK(cudaMemcpy(out.data(), d_out, bytes, cudaMemcpyDeviceToHost));
                CUDA_OK(cudaMemcpy(frame.data(), d_frame, fsize, cudaMemcpyDeviceToHost));
                size_t csize = 0;
                zipcclResult_t rc = zipcclCompress(in.data(), count, dt, cpu.data(), cap, &csize, &p);
                const int same = rc == zipcclSuccess && csize == fsize && !memcmp(cpu.data(), frame.data(), fsize);
                const int exact = got == count && !memcmp(in.data(), out.data(), bytes);
                snprintf(name, sizeof name, "bench/%s/%s/%zuKiB/roundtrip_and_cpu_identical", cc_codec_name(codec),
                         zipcclTypeName(dt), kib);
                CHECK(exact && same, name, "round trip %s, cpu frame %zu bytes vs %zu %s", exact ? "exact" : "DIFFERS",
                      csize, fsize, same ? "(same)" : "(different)");
                const uint64_t h = fnv1a(frame.data(), fsize);
                const double ratio = (double)bytes / fsize;
                const double cg = bytes / (tc * 1e-3) / 1e9, dg = bytes / (td * 1e-3) / 1e9;
                printf("%-6s %-6s %8zu %8.4f %10.1f %10.1f %9.1f %9.1f %7s %016llx\n", cc_codec_name(codec),
                       zipcclTypeName(dt), kib, ratio, cg, dg, tc * 1e3, td * 1e3, same ? "yes" : "NO",
                       (unsigned long long)h);
                if (js)
                    fprintf(js,
                            "{\"codec\":\"%s\",\"dtype\":\"%s\",\"dist\":\"gauss\",\"sigma\":1,\"bytes\":%zu,"
                            "\"ratio\":%.5f,\"compress_gbps\":%.1f,\"decompress_gbps\":%.1f,\"memcpy_gbps\":%.1f,"
                            "\"compress_us\":%.1f,\"decompress_us\":%.1f,"
                            "\"cpu_identical\":%s,\"frame_fnv1a\":\"%016llx\",\"device\":\"%s\"}\n",
                            cc_codec_name(codec), zipcclTypeName(dt), bytes, ratio, cg, dg, copy_gbps, tc * 1e3, td * 1e3,
                            same ? "true" : "false", (unsigned long long)h, prop.name);
            }
            fflush(stdout);
        }
    }
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_frame));
    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaFree(d_ws));
    if (js) fclose(js);
    printf("%d passed, %d failed\n", tu_passes, tu_failures);
    return bad || tu_failures ? 1 : 0;
}

/* ---- under compute-sanitizer ------------------------------------------------ */

static int run_sanitize(int small) {
    const zipcclDataType_t dts[] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < CC_NCODECS; c++) cc_roundtrip(&kDev, dts[d], cc_codecs[c], 1, D_GAUSS, 2 * 16384 + 4097);
    if (!small) {
        for (int c = 0; c < CC_NCODECS; c++)
            cc_roundtrip(&kDev, zipcclBfloat16, cc_codecs[c], c % 2, D_MIXED, 81 * 16384 + 777);
        check_batch();
    }
    printf("%d passed, %d failed\n", tu_passes, tu_failures);
    return tu_failures ? 1 : 0;
}

/* ---- the codec beside a GEMM ---------------------------------------------- */

/* A bf16 GEMM (M = N = K = 8192, fp32 accumulation, cuBLAS) on its own
 * stream, the median of 5 timed runs: alone, then while a second host
 * thread compresses and decompresses 256 MiB of bf16 on its own stream,
 * back to back, for each codec; and the codec's own rate alone and beside
 * the GEMMs.  The ratios are what the projection (runtime/project.c) calls
 * compute slowed by concurrent communication. */
static double now_s(void) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static int run_contention(const char* json_path) {
    FILE* js = json_path ? fopen(json_path, "a") : NULL;
    cudaDeviceProp prop;
    int dev = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaGetDeviceProperties(&prop, dev));
    const int G = 8192;
    const size_t gbytes = (size_t)G * G * 2, bytes = (size_t)256 << 20, count = bytes / 2;
    void *A, *B, *C, *d_in, *d_frame, *d_out, *d_ws;
    CUDA_OK(cudaMalloc(&A, gbytes));
    CUDA_OK(cudaMalloc(&B, gbytes));
    CUDA_OK(cudaMalloc(&C, (size_t)G * G * 4));
    CUDA_OK(cudaMemset(A, 0x3c, gbytes)); /* bf16 0x3c3c: about 0.011, finite */
    CUDA_OK(cudaMemset(B, 0x3c, gbytes));
    const size_t cap = zipcclCompressBound(count, zipcclBfloat16, 0), wsz = zipcclCudaWorkspaceSize(count, zipcclBfloat16);
    CUDA_OK(cudaMalloc(&d_in, bytes));
    CUDA_OK(cudaMalloc(&d_frame, cap));
    CUDA_OK(cudaMalloc(&d_out, bytes));
    CUDA_OK(cudaMalloc(&d_ws, wsz));
    bench_gauss<<<1024, 256, 0, g_stream>>>((uint8_t*)d_in, count, 1, 1.0f, 777);
    CUDA_OK(cudaStreamSynchronize(g_stream));
    cudaStream_t gs;
    CUDA_OK(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking));
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cublasSetStream(h, gs) != CUBLAS_STATUS_SUCCESS) {
        printf("FAIL contention/cublas: cuBLAS did not start\n");
        return 1;
    }
    const float one = 1.0f, zero = 0.0f;
    auto gemm_ms = [&]() { /* the median of 5 after one warm-up */
        cudaEvent_t e0, e1;
        CUDA_OK(cudaEventCreate(&e0));
        CUDA_OK(cudaEventCreate(&e1));
        std::vector<double> t;
        for (int i = 0; i < 6; i++) {
            CUDA_OK(cudaEventRecord(e0, gs));
            cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, G, G, G, &one, A, CUDA_R_16BF, G, B,
                                             CUDA_R_16BF, G, &zero, C, CUDA_R_32F, G, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT);
            CUDA_OK(cudaEventRecord(e1, gs));
            CUDA_OK(cudaEventSynchronize(e1));
            float ms = 0;
            CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
            if (st != CUBLAS_STATUS_SUCCESS) return -1.0;
            if (i) t.push_back(ms);
        }
        CUDA_OK(cudaEventDestroy(e0));
        CUDA_OK(cudaEventDestroy(e1));
        return median(t);
    };
    const double alone = gemm_ms();
    const double tflops = 2.0 * G * G * (double)G / (alone * 1e-3) / 1e12;
    printf("contention on %s: bf16 GEMM %d^3 alone %.3f ms (%.0f TFLOP/s)\n", prop.name, G, alone, tflops);
    printf("%-6s %12s %12s %9s %14s %14s\n", "codec", "gemm alone", "gemm beside", "slowdown", "codec GB/s",
           "beside gemm");
    int bad = alone <= 0;
    const zipcclCodec_t codecs[] = {zipcclCodecFast, zipcclCodecF3, zipcclCodecDense, zipcclCodecF2};
    for (zipcclCodec_t codec : codecs) {
        zipcclCodecParams_t p = ZIPCCL_CODEC_PARAMS_DEFAULT;
        p.codec = codec;
        /* the codec alone for 1 s, then beside the GEMMs: round trips of
         * compress + decompress on g_stream from a second host thread */
        auto codec_loop = [&](std::atomic<int>* stop, double* gbps, int* rc) { /* until stopped, 3 s at most */
            CUDA_OK(cudaSetDevice(dev));
            const double t0 = now_s();
            size_t fsize = 0, got = 0, done = 0;
            *rc = 0;
            while (!stop->load() && now_s() - t0 < 3.0) {
                if (zipcclCompressCuda(d_in, count, zipcclBfloat16, d_frame, cap, &fsize, &p, d_ws, wsz, g_stream) ||
                    zipcclDecompressCuda(d_frame, fsize, d_out, bytes, &got, zipcclBfloat16, d_ws, wsz, g_stream)) {
                    *rc = 1;
                    break;
                }
                done++;
            }
            CUDA_OK(cudaStreamSynchronize(g_stream));
            *gbps = 2.0 * done * bytes / (now_s() - t0) / 1e9; /* both directions' input bytes */
        };
        std::atomic<int> stop(0);
        double solo = 0, beside = 0;
        int rc1 = 0, rc2 = 0;
        std::thread t1([&] { codec_loop(&stop, &solo, &rc1); });
        std::this_thread::sleep_for(std::chrono::milliseconds(1000));
        stop = 1;
        t1.join();
        stop = 0;
        std::thread t2([&] { codec_loop(&stop, &beside, &rc2); });
        std::this_thread::sleep_for(std::chrono::milliseconds(50)); /* the codec is running */
        const double with = gemm_ms();
        stop = 1;
        t2.join();
        char name[96];
        snprintf(name, sizeof name, "contention/%s/ran", cc_codec_name(codec));
        if (!CHECK(rc1 == 0 && rc2 == 0 && with > 0, name, "codec %d/%d, gemm %.3f ms: %s", rc1, rc2, with,
                   zipcclGetLastErrorDetail())) {
            bad++;
            continue;
        }
        printf("%-6s %9.3f ms %9.3f ms %8.3fx %14.1f %14.1f\n", cc_codec_name(codec), alone, with, with / alone, solo,
               beside);
        if (js)
            fprintf(js,
                    "{\"kind\":\"contention\",\"codec\":\"%s\",\"dtype\":\"bf16\",\"codec_bytes\":%zu,\"gemm\":\"bf16 "
                    "%dx%dx%d\",\"gemm_ms_alone\":%.4f,\"gemm_ms_beside_codec\":%.4f,\"gemm_slowdown\":%.4f,"
                    "\"codec_gbps_alone\":%.1f,\"codec_gbps_beside_gemm\":%.1f,\"device\":\"%s\"}\n",
                    cc_codec_name(codec), bytes, G, G, G, alone, with, with / alone, solo, beside, prop.name);
    }
    cublasDestroy(h);
    CUDA_OK(cudaStreamDestroy(gs));
    for (void* q : {A, B, C, d_in, d_frame, d_out, d_ws}) CUDA_OK(cudaFree(q));
    if (js) fclose(js);
    printf("%d passed, %d failed\n", tu_passes, tu_failures);
    return bad || tu_failures ? 1 : 0;
}

int main(int argc, char** argv) {
    int bench = 0, probe = 0, contention = 0, sanitize = 0;
    const char* json = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench")) bench = 1;
        else if (!strcmp(argv[i], "--contention")) contention = 1;
        else if (!strcmp(argv[i], "--probe")) probe = 1;
        else if (!strcmp(argv[i], "--sanitize")) sanitize = i + 1 < argc && !strcmp(argv[i + 1], "small") ? (i++, 2) : 1;
        else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--probe | --sanitize [small] | --bench [--json FILE] | --contention [--json FILE]]\n",
                    argv[0]);
            return 2;
        }
    }
    if (!zipcclCudaAvailable()) {
        int n = 0;
        cudaError_t e = cudaGetDeviceCount(&n);
        printf("no CUDA device: skipped (cudaGetDeviceCount: %s, %d devices)\n", cudaGetErrorString(e), n);
        return probe ? 2 : 0;
    }
    if (probe) return 0;
    CUDA_OK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    int rc = contention ? run_contention(json) : bench ? run_bench(json) : sanitize ? run_sanitize(sanitize == 2) : run_tests();
    CUDA_OK(cudaStreamDestroy(g_stream));
    return rc;
}
