#!/usr/bin/env bash
# test: timeout=600 asan=no
# test_codec_cuda_emu.sh — the CUDA codec (comm/codec/codec_cuda.cu) on machines
# without a GPU: its kernels run on the host under the warp emulator of
# tests/gpu/cuda_emu.cc and must emit the CPU codec's frames byte for byte,
# decode the CPU's frames, and refuse damaged ones; ZIPCCL_TEST_LONG=1 adds
# both checksum settings at every size, more damage and 1M-element frames. Built by `make` as
# BUILD/gpu/cuda_emu (plain C++, needs no CUDA toolkit); the suite runs its
# UBSan build, BUILD/gpu/cuda_emu_ubsan (the same checks; undefined behaviour
# in the codec's kernels or host code stops it).
bin="${BUILD:-build}/gpu/cuda_emu_ubsan"
if [ ! -x "$bin" ]; then
  echo "FAIL cuda_emu: $bin is not built (make BUILD=${BUILD:-build} $bin)"
  exit 1
fi
exec "$bin" ${ZIPCCL_TEST_LONG:+--long}
