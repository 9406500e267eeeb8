#!/usr/bin/env bash
# test: timeout=300 asan=no
# test_coll_device_cuda_emu.sh — the CUDA device (device/device_cuda.cu,
# the CUDA codec's kernels and entry points, the reduction kernels of
# comm/transport/transport_nccl_kernels.cu) on machines without a GPU: the
# files compile as plain C++ over the warp emulator (tests/gpu/warp_emu.h,
# tests/gpu/emu/) and test_coll_device's --cuda run goes through them at 1, 2
# and 4 ranks: every collective, strategy and dtype on the emulated device
# equals the host communicator bit for bit, staged and coded, over MPI and
# over the host stand-in network, in place too; and at 2 ranks with the
# emulator's streams deferred (ZK_EMU_ASYNC=1), the stream order of the
# staged designs checked. Built by `make` as BUILD/gpu/test_coll_device_emu.
# NCCL, streams that really overlap and the GPU's speed wait for make
# test-gpu on a device.
bin="${BUILD:-build}/gpu/test_coll_device_emu"
if [ ! -x "$bin" ]; then
  echo "FAIL test_coll_device_cuda_emu: $bin is not built (make BUILD=${BUILD:-build} $bin)"
  exit 1
fi
rc=0
for np in 1 2 4; do
  out=$(mpirun --oversubscribe --bind-to none -n "$np" "$bin" --cuda 2>&1) || rc=1
  # the checks, named by rank count (one report per check, from rank 0)
  printf '%s\n' "$out" | sed -E "s/^(PASS|FAIL|SKIP) ([^:]*)/\1 np${np}\/\2/"
done
# Again at 2 ranks with each stream's work deferred until something waits for it
# (ZK_EMU_ASYNC=1, tests/gpu/emu/cuda_emu_runtime.h): the staged designs,
# whole and in pieces, must give the same bits when a host read or a copy
# not ordered after the work would see it undone (a missing wait for a
# piece's frames to come down fails device_cuda_pieces_*).
for np in 2; do
  out=$(ZK_EMU_ASYNC=1 mpirun --oversubscribe --bind-to none -x ZK_EMU_ASYNC -n "$np" "$bin" --cuda 2>&1) || rc=1
  printf '%s\n' "$out" | sed -E "s/^(PASS|FAIL|SKIP) ([^:]*)/\1 async_np${np}\/\2/"
done
exit $rc
