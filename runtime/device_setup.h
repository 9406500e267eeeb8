/*
 * device_setup.h — which device a rank computes on, and how its
 * communicators reach that device (runtime/device_setup.c).
 */
#ifndef ZRT_DEVICE_SETUP_H
#define ZRT_DEVICE_SETUP_H
#include <stddef.h>

#include "config.h"
#include "kernels.h"
#include "zipccl.h"

/* The kernel table for runtime.device and runtime.compute, on its device
 * (device/device.h): cpu, cpu_guarded, or cuda on the GPU of the rank's
 * node-local rank (local_rank % devices).  NULL with the reason in err when
 * the device cannot be used. */
const ZrtKernels* device_select(const TrainConfig* cfg, int local_rank, char* err, size_t errlen);

/* Give each communicator K's device (zipcclCommSetDevice) and, for
 * comm.net: nccl, an NCCL network; rank 0 prints one line saying how the
 * collectives move.  On a host table only with the test hooks (see the .c);
 * `ep_exchange` says the expert exchange's communicator is among them (for
 * the message).  Fatal on failure (the trainer cannot go on). */
void device_attach_comms(const TrainConfig* cfg, const ZrtKernels* K, zipcclComm_t* comms, int n, int rank,
                         int ep_exchange);

/* 1 when device_attach_comms has something to do for this table (a device
 * table, or a host table with ZRT_COMM_HOSTCODED=1). */
int device_comms_on_device(const ZrtKernels* K);
#endif
