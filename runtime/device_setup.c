/*
 * device_setup.c — which device a rank computes on, and how its
 * communicators reach that device.  Everything else in runtime/ sees a
 * kernel table and the device under it (K->dev), never CUDA itself: this
 * file is where runtime.device, runtime.compute and comm.net become a
 * device, a table and ZipCCL settings.
 *
 *   runtime.device cpu           zrt_kernels_cpu on zdev_cpu: host buffers
 *                                everywhere, the collectives on them
 *   runtime.device cpu_guarded   the CPU kernels on zdev_cpu_guarded; the
 *                                collectives take its buffers, staged
 *                                through host memory (the CPU codec)
 *   runtime.device cuda          the CUDA table on zdev_cuda(local rank %
 *                                devices); compressed calls coded on the
 *                                GPU, the rest staged through pinned memory,
 *                                or, with comm.net: nccl, everything device
 *                                to device over NCCL
 *
 * Test hooks, not modes to train in (tests/test_train_device.sh): on a host
 * table ZRT_COMM_HOSTCODED=1 gives the collectives the host device coded
 * in place by the CPU codec, the path a GPU run takes with the CUDA codec;
 * ZRT_COMM_HOSTNET=1 as well moves them over ZipCCL's host stand-in for a
 * device network, the path comm.net: nccl takes.
 */
#include "device_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static int env_on(const char* name) {
    const char* v = getenv(name);
    return v && !strcmp(v, "1");
}

const ZrtKernels* device_select(const TrainConfig* cfg, int local_rank, char* err, size_t errlen) {
    const char* dev = cfg->runtime.device;
    const int bf16 = !strcmp(cfg->runtime.compute, "bf16");
    const ZrtKernels* host = bf16 ? zrt_kernels_cpu_bf16() : zrt_kernels_cpu();
    if (!strcmp(dev, "cpu")) return host;
    if (!strcmp(dev, "cpu_guarded")) return zrt_kernels_guarded(host);
    const int n = zdev_cuda_count();
    ZDevice* d = zdev_cuda(n > 0 ? (local_rank < 0 ? 0 : local_rank) % n : 0);
    if (!d) {
        snprintf(err, errlen, "%s", zdev_error());
        return NULL;
    }
    const ZrtKernels* K = bf16 ? zrt_kernels_cuda_bf16(d) : zrt_kernels_cuda(d);
    if (!K) snprintf(err, errlen, "%s", zrt_cuda_error());
    return K;
}

int device_comms_on_device(const ZrtKernels* K) {
    return !K->dev->host_access || env_on("ZRT_COMM_HOSTCODED");
}

/* comm.net: nccl gives each communicator an NCCL communicator over its
 * ranks, made from it; the host stand-in likewise.  Returns the network's
 * name, or NULL for none. */
static const char* attach_net(const TrainConfig* cfg, const ZrtKernels* K, zipcclComm_t* comms, int n) {
    if (!strcmp(cfg->runtime.net, "nccl")) {
        for (int i = 0; i < n; i++) zipcclCheck(zipcclCommUseNccl(comms[i]));
        return "nccl";
    }
    if (K->dev->host_access && env_on("ZRT_COMM_HOSTNET")) {
        for (int i = 0; i < n; i++) {
            zipcclDeviceNet_t net;
            zipcclCheck(zipcclDeviceNetHost(comms[i], &net));
            zipcclCheck(zipcclCommSetNet(comms[i], &net));
        }
        return "host";
    }
    return NULL;
}

void device_attach_comms(const TrainConfig* cfg, const ZrtKernels* K, zipcclComm_t* comms, int n, int rank,
                         int ep_exchange) {
    ZDevice* d = K->dev;
    /* Coded where the buffers live when a codec can read them there: the
     * CUDA codec on a GPU, the CPU codec on host memory (the test hook);
     * the guarded device's memory neither can, so its calls are staged. */
    const zipcclDeviceCoding_t coding =
        d->kind == ZDEV_KIND_CUDA || d->host_access ? zipcclDeviceCoded : zipcclDeviceStaged;
    for (int i = 0; i < n; i++) zipcclCheck(zipcclCommSetDevice(comms[i], d, coding));
    const char* net = attach_net(cfg, K, comms, n);
    if (rank != 0) return;
    const char* ex = ep_exchange ? "; so does the expert exchange's AlltoAllv" : "";
    if (net)
        printf("# collectives: the gathers and reduce-scatters take %s buffers, moved device to device over "
               "%s%s (every call direct; compressed ones coded by the %s codec)%s\n", d->name, net,
               strcmp(net, "host") ? "" : " (host memory standing in: ZRT_COMM_HOSTNET)",
               d->kind == ZDEV_KIND_CUDA ? "CUDA" : "CPU", ex);
    else
        printf("# collectives: the gathers and reduce-scatters take %s buffers (%s)%s\n", d->name,
               coding == zipcclDeviceStaged ? "staged through host memory, the CPU codec"
               : d->kind == ZDEV_KIND_CUDA  ? "compressed calls coded on the GPU by the CUDA codec, "
                                              "the others staged through pinned host memory"
                                            : "host memory standing in for a device: compressed calls "
                                              "coded in place by the CPU codec (ZRT_COMM_HOSTCODED)",
               ex);
}
