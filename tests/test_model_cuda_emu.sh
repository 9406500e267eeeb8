#!/usr/bin/env bash
# test: timeout=300 asan=no
# test_model_cuda_emu.sh — the model's CUDA kernel table (kernels/cuda.cu) on
# machines without a GPU: the file compiles as plain C++ over the warp
# emulator (tests/gpu/warp_emu.h, tests/gpu/emu/: CUDA runtime and cuBLAS
# stand-ins) and test_model's CUDA checks run against it: every kernel against
# the CPU table (1e-5), the memory, optimizer (bit for bit) and event entries,
# whole steps dense and MoE in fp32 and bf16 compute, the bf16-weight entries
# and steps over bf16 units, the bf16 table's flash attention (WMMA, through
# tests/gpu/emu/mma.h) against the CPU's tiled attention within 1e-2 and the
# CPU's bf16 twin within 1e-4 at head dims 64 and 128, its masked tiles
# skipped and its bits repeatable, and whole bf16 steps at hd 64. What the emulator cannot show (cuBLAS's and the
# GPU's own arithmetic, races, timing) waits for make test-gpu on a device.
# Built by `make` as BUILD/gpu/test_model_emu.
bin="${BUILD:-build}/gpu/test_model_emu"
if [ ! -x "$bin" ]; then
  echo "FAIL test_model_cuda_emu: $bin is not built (make BUILD=${BUILD:-build} $bin)"
  exit 1
fi
# ZRT_TEST_EMULATED: the checks whose bounds differ on the emulator (its
# expf is the host's, as the CPU twin's) take the emulator's
# The bf16 table's attention engine (ZRT_ATTENTION, kernels/cuda.cu): the
# emulator has no cuDNN, so auto runs the flash kernels and says why;
# ZRT_ATTENTION=cudnn is refused with that reason, an unknown engine by its
# name (one layer's attention through --bench-attention at a small shape)
engine() { # engine NAME ENV EXPECT_RC PATTERN
  local out rc
  out=$(env "$2" "$bin" --bench-attention 1 64 2 1 64 1 2>&1); rc=$?
  if [ "$rc" = "$3" ] && grep -q -- "$4" <<<"$out"; then echo "PASS $1"
  else echo "FAIL $1: exit $rc, $(grep -m1 -E 'zrt cuda|FAIL' <<<"$out")"; fi
}
engine attention_engine_auto_says_own_without_cudnn ZRT_ATTENTION=auto 0 \
  "attention (bf16, hd 64/128): own flash kernels (cuDNN: the warp emulator has no cuDNN)"
engine attention_engine_cudnn_insisted_refused ZRT_ATTENTION=cudnn 1 \
  "ZRT_ATTENTION=cudnn failed .*: the warp emulator has no cuDNN"
engine attention_engine_unknown_refused ZRT_ATTENTION=fast 1 "ZRT_ATTENTION failed .*not one of auto, cudnn, own"
ZRT_TEST_EMULATED=1 exec "$bin" --cuda
