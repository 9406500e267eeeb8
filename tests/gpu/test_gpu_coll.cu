/*
 * test_gpu_coll.cu — ZipCCL collectives on an NCCL communicator of one GPU
 * (nranks = 1, zipcclCommInitNccl), device buffers: the designs of
 * algo/coll_device.c over NCCL as the network.  At one rank that is NCCL's
 * own collectives (native), self sends and receives (raw AllGather and
 * All-to-Alls, and compressed ones: no codec at one rank, the blocks go
 * through NCCL's self copy) and the fp32 accumulate/finalize kernels; the
 * codec runs in test_gpu_codec, the size and frame exchanges between ranks
 * need two GPUs.  With one rank every collective is the
 * identity (a sum of one value rounds back to itself; avg divides by 1), so
 * the reference is the input itself; raw and compressed must match it bit
 * for bit, and compressed calls must be counted as such with no codec time
 * (issue 49 item 3: no codec at one rank).  The ring
 * design must be refused (zipcclUnsupported) on NCCL, not silently replaced.
 *
 * Written as .cu only so the Makefile's GPU rule builds it; it calls the C
 * API alone.  Run by scripts/test_gpu.sh on a machine with a GPU.
 */
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zipccl.h"
#include "../gauss.h"

static int failures;
static void check(int ok, const char* name, const char* why) {
    if (ok) printf("PASS %s\n", name);
    else { printf("FAIL %s: %s\n", name, why); failures++; }
    fflush(stdout);
}

static void fillGauss(void* buf, size_t n, zipcclDataType_t dt, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (size_t i = 0; i < n; i++) {
        float f = gauss_next(&s);
        if (dt == zipcclFloat32) ((float*)buf)[i] = f;
        else if (dt == zipcclBfloat16) ((uint16_t*)buf)[i] = gauss_bf16_round(f);
        else {
            __half h = __float2half_rn(f);
            memcpy((uint16_t*)buf + i, &h, 2);
        }
    }
}

int main(void) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: nothing checked\n"); /* no PASS for a check that did not run */
        return 2;
    }
    ncclComm_t nc;
    int dev = 0;
    if (ncclCommInitAll(&nc, 1, &dev) != ncclSuccess) {
        check(0, "nccl_init", "ncclCommInitAll failed");
        return 1;
    }
    zipcclComm_t comm;
    zipcclResult_t r = zipcclCommInitNccl(&comm, nc);
    check(r == zipcclSuccess, "comm_init_nccl", zipcclGetLastErrorDetail());
    if (r != zipcclSuccess) return 1;
    cudaStream_t stream;
    cudaStreamCreate(&stream);

    const zipcclDataType_t types[3] = {zipcclBfloat16, zipcclFloat16, zipcclFloat32};
    const zipcclCallConfig_t strats[4] = {{zipcclStrategyNative, zipcclCodecFast, zipcclAlgoDirect},
                                          {zipcclStrategyRaw, zipcclCodecFast, zipcclAlgoDirect},
                                          {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoDirect},
                                          {zipcclStrategyCompressed, zipcclCodecDense, zipcclAlgoDirect}};
    const char* snames[4] = {"native", "raw", "fast", "dense"};
    const size_t counts[4] = {0, 1, 777, (size_t)1 << 20};
    const size_t maxBytes = ((size_t)1 << 20) * 4 + 64;
    char* h_in = (char*)malloc(maxBytes);
    char* h_out = (char*)malloc(maxBytes);
    void *d_in, *d_out;
    cudaMalloc(&d_in, maxBytes);
    cudaMalloc(&d_out, maxBytes);

    for (int t = 0; t < 3; t++) {
        zipcclDataType_t dt = types[t];
        size_t esz = zipcclTypeSize(dt);
        for (int s = 0; s < 4; s++) {
            for (int kind = 0; kind < zipcclNumCollKinds; kind++) {
                char name[96], why[256] = "";
                int ok = 1;
                zipcclCounters_t before, after;
                zipcclCommGetCounters(comm, (zipcclCollKind_t)kind, &before);
                for (int ci = 0; ci < 4 && ok; ci++) {
                    for (int mode = 0; mode < 3 && ok; mode++) { /* 0 sum out of place, 1 avg, 2 in place */
                        size_t n = counts[ci];
                        fillGauss(h_in, n, dt, (uint64_t)(ci * 10 + t));
                        cudaMemcpy(d_in, h_in, n * esz, cudaMemcpyHostToDevice);
                        cudaMemset(d_out, 0xEE, n * esz + 2);
                        void* out = mode == 2 ? d_in : d_out;
                        zipcclRedOp_t op = mode == 1 ? zipcclAvg : zipcclSum;
                        size_t zero = 0, cnt = n;
                        switch (kind) {
                        case zipcclCollAllGather: r = zipcclAllGather(d_in, out, n, dt, comm, &strats[s], stream); break;
                        case zipcclCollReduceScatter: r = zipcclReduceScatter(d_in, out, n, dt, op, comm, &strats[s], stream); break;
                        case zipcclCollAllReduce: r = zipcclAllReduce(d_in, out, n, dt, op, comm, &strats[s], stream); break;
                        case zipcclCollAlltoAll: r = zipcclAlltoAll(d_in, out, n, dt, comm, &strats[s], stream); break;
                        default: r = zipcclAlltoAllv(d_in, &cnt, &zero, out, &cnt, &zero, dt, comm, &strats[s], stream); break;
                        }
                        cudaStreamSynchronize(stream);
                        if (r != zipcclSuccess) {
                            snprintf(why, sizeof why, "count %zu mode %d: %s: %s", n, mode, zipcclGetErrorString(r),
                                     zipcclGetLastErrorDetail());
                            ok = 0;
                            break;
                        }
                        cudaMemcpy(h_out, out, n * esz, cudaMemcpyDeviceToHost);
                        if (memcmp(h_out, h_in, n * esz)) {
                            snprintf(why, sizeof why, "count %zu mode %d: result differs from the input", n, mode);
                            ok = 0;
                        }
                    }
                }
                zipcclCommGetCounters(comm, (zipcclCollKind_t)kind, &after);
                if (ok && strats[s].strategy == zipcclStrategyCompressed &&
                    (after.byStrategy[zipcclStrategyCompressed] <= before.byStrategy[zipcclStrategyCompressed] ||
                     after.codecSeconds != before.codecSeconds)) {
                    snprintf(why, sizeof why, "compressed calls not counted, or codec time at one rank");
                    ok = 0;
                }
                snprintf(name, sizeof name, "gpu_%s_%s_%s", zipcclCollName((zipcclCollKind_t)kind),
                         zipcclTypeName(dt), snames[s]);
                check(ok, name, why);
            }
        }
    }
    zipcclCallConfig_t ring = {zipcclStrategyCompressed, zipcclCodecFast, zipcclAlgoRing};
    r = zipcclReduceScatter(d_in, d_out, 16, zipcclBfloat16, zipcclSum, comm, &ring, stream);
    check(r == zipcclUnsupported, "gpu_ring_refused", zipcclGetErrorString(r));
    r = zipcclAllGather(NULL, d_out, 16, zipcclBfloat16, comm, NULL, stream);
    check(r == zipcclInvalidArgument, "gpu_null_buffer", zipcclGetErrorString(r));

    zipcclCommDestroy(comm);
    ncclCommDestroy(nc);
    cudaFree(d_in), cudaFree(d_out);
    free(h_in), free(h_out);
    cudaStreamDestroy(stream);
    return failures ? 1 : 0;
}
