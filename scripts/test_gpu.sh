#!/usr/bin/env bash
# test_gpu.sh — every GPU check in one short call (`make test-gpu`): the CUDA
# codec tests, the GPU codec benchmark, the NCCL collectives at one rank, the
# CUDA kernel table against the CPU table, device buffers over MPI with the
# CUDA table and codec at 2 and 4 ranks (test_coll_device --cuda, zipccl-bench
# --device cuda), NCCL as their device network at one rank (--cuda --nccl),
# the training checks, the PyTorch baseline of the same model beside them
# (scripts/torch_baseline.py: a figure), a steady step's host waits beside
# the warp emulator's (tests/test_host_waits.sh), and every other GPU test
# program, writing all output to one folder ($OUT if set, else
# BUILD/gpu-out) and to stdout. Ends with "N passed, N failed".
#
#   scripts/test_gpu.sh                 build here (make -j16), then run
#   GPU_SKIP_CODEC_BENCH=1              leave out the codec benchmark (its sweep
#                                       takes ~45 s of a short device lease)
#   GPU_TORCH_COMPILE=1                 the PyTorch baseline adds its torch.compile
#                                       row (compilation takes a minute or more)
#   scripts/test_gpu.sh --bundle FILE   run the programs of a bundle made by
#                                       scripts/gpu_bundle.sh (`make gpu-bundle`)
#                                       on a machine that has CUDA, cuBLAS and
#                                       NCCL but not our Debian packages
#
# Convention for everyone adding GPU tests: any executable gpu/test_gpu_* is a
# GPU test and is run here (the Makefile builds tests/gpu/test_gpu_*.cu into
# BUILD/gpu/test_gpu_* when nvcc exists; BUILD/gpu/*_emu are the warp
# emulator's programs, which make test runs). It must print "PASS name" /
# "FAIL name: why" lines, exit non-zero on failure, and finish in under a
# minute: this whole script has ~5 minutes on an H200 machine with 16 cores,
# and each step is time-limited. A step that prints no PASS and no FAIL
# counts as a failure: nothing passes that did not run.
#
# Files written to the output folder (at most 8, so a remote run can bring
# them all back): test_gpu.log (everything), build.log, nvidia-smi.txt,
# gpu_codec_bench.jsonl (one JSON line per codec x dtype x size, 64 KiB to
# 1 GiB, and one per codec beside a bf16 GEMM, "kind": "contention"),
# coll_bench_cuda.jsonl (zipccl-bench --device cuda at 2 and 4 ranks; and
# compressed calls in one piece and in 8 MiB pieces, "device_piece_bytes"),
# train_gpu.log and train_gpu_runs.jsonl (scripts/test_train_gpu.sh),
# torch_baseline.jsonl (scripts/torch_baseline.py, one line per row).
#
# Without a CUDA device (no nvidia-smi, or no usable device) it prints
# "no CUDA device: skipped" and exits 0.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT_DIR=${OUT:-$BUILD/gpu-out}
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/test_gpu.log"
: >"$LOG"
say() { echo "$*" | tee -a "$LOG"; }

BUNDLE=
if [ "${1:-}" = "--bundle" ]; then
  BUNDLE=${2:?--bundle needs the archive made by scripts/gpu_bundle.sh}
fi

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  say "no CUDA device: skipped"
  exit 0
fi
nvidia-smi >"$OUT_DIR/nvidia-smi.txt" 2>&1 || true
say "== $(date -u '+%F %T') UTC on $(nvidia-smi -L | head -1)"

t0=$SECONDS
if [ -n "$BUNDLE" ]; then
  # the programs and libraries built on a Debian machine; cuBLAS and NCCL
  # from this machine (its CUDA toolkit, or the pip packages of its PyTorch)
  U=${TMPDIR:-/tmp}/zipccl-gpu
  rm -rf "$U" && mkdir -p "$U"
  if ! tar -C "$U" -xJf "$BUNDLE" 2>>"$LOG"; then
    python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$BUNDLE" "$U" \
      || { say "FAIL bundle: cannot unpack $BUNDLE"; say "0 passed, 1 failed"; exit 1; }
  fi
  B=$U/gpu-bundle
  cudalibs=
  # (libcudnn.so.9: the bf16 table's cuDNN attention loads it at run time;
  # without it the run says so and uses the flash kernels)
  for name in libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9; do
    d=$(find /usr/local/cuda/lib64 /usr/local/cuda/targets /usr/lib/x86_64-linux-gnu /opt /usr/local/lib \
          -name "$name" -print -quit 2>/dev/null)
    [ -n "$d" ] || d=$(find / -xdev -name "$name" -print -quit 2>/dev/null)
    if [ -n "$d" ]; then
      cudalibs=$cudalibs:$(dirname "$d")
      say "   $name: $d"
    else
      say "   $name: not found on this machine"
    fi
  done
  export LD_LIBRARY_PATH=$B/lib$cudalibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OPAL_PREFIX=$B/ompi PATH=$B/ompi/bin:$PATH
  export OMPI_MCA_mca_base_component_show_load_errors=0 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
  export OMPI_MCA_osc=^ucx OMPI_MCA_mtl=^ofi,psm,psm2 OMPI_MCA_ess_singleton_isolated=1
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
  mkdir -p data && cp -n "$B/data/fortunes.txt" data/ 2>/dev/null
  BIN_GPU=$B/bin BIN_TESTS=$B/bin BIN=$B/bin
  say "   unpacked $BUNDLE in $((SECONDS - t0))s"
  # the relocated Open MPI: two CPU ranks of the trainer, two steps
  mp=$(timeout 60 mpirun -n 2 "$BIN/train" configs/llama-tiny.yaml --set train.steps=2 2>&1 | tail -1)
  say "   mpirun -n 2 train (CPU, 2 steps): ${mp:-no output}"
else
  # the GPU programs first, so an unrelated broken target cannot starve them
  gpu_targets=$(for f in tests/gpu/*.cu; do [ -f "$f" ] && echo "$BUILD/gpu/$(basename "$f" .cu)"; done)
  say "== build: make -k -j16 BUILD=$BUILD" $gpu_targets "all"
  timeout 150 make -k -j16 BUILD="$BUILD" $gpu_targets >"$OUT_DIR/build.log" 2>&1
  if ! timeout 120 make -k -j16 BUILD="$BUILD" all >>"$OUT_DIR/build.log" 2>&1; then
    say "build had errors (see build.log); running what was built:"
    grep -E 'error|Error' "$OUT_DIR/build.log" | head -20 | tee -a "$LOG"
  fi
  say "   build took $((SECONDS - t0))s"
  BIN_GPU=$BUILD/gpu BIN_TESTS=$BUILD/tests BIN=$BUILD
fi

codec="$BIN_GPU/test_gpu_codec"
if [ ! -x "$codec" ]; then
  say "FAIL gpu: $codec was not built"
  say "0 passed, 1 failed"
  exit 1
fi
probe=$("$codec" --probe 2>&1)
if [ $? -ne 0 ]; then
  say "$probe"
  say "FAIL gpu: nvidia-smi sees $(nvidia-smi -L 2>&1 | head -2 | tr '\n' ' ') but CUDA cannot use it"
  say "   (a driver older than the toolkit, or a missing library, looks like this)"
  say "0 passed, 1 failed"
  exit 1
fi

pass=0
fail=0
step_out=$(mktemp)
run_step() { # run_step NAME TIMEOUT CMD...
  local name=$1 to=$2 t=$SECONDS rc p f
  shift 2
  say "== $name: $* (limit ${to}s)"
  timeout --kill-after=10 "$to" "$@" >"$step_out" 2>&1
  rc=$?
  tee -a "$LOG" <"$step_out"
  p=$(grep -c '^PASS ' "$step_out")
  f=$(grep -c '^FAIL ' "$step_out")
  if [ "$rc" -ne 0 ]; then
    f=$((f + 1))
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then say "FAIL $name: timed out after ${to}s"
    else say "FAIL $name: exit code $rc"; fi
  elif [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
    f=1
    say "FAIL $name: reported no checks"
  fi
  pass=$((pass + p))
  fail=$((fail + f))
  say "   $name: $p passed, $f failed, $((SECONDS - t))s"
}

run_step gpu_codec_tests 150 "$codec"
# the codec's kernels under compute-sanitizer: out-of-bounds and misaligned
# accesses, look-backs across many chunks (memcheck), shared-memory hazards
# between the warps of a chunk (racecheck, on 3-chunk frames: it is slow);
# GPU_SKIP_SANITIZER=1 leaves them out
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "${GPU_SKIP_SANITIZER:-}" ]; then
  say "== gpu_codec sanitizer runs: skipped (GPU_SKIP_SANITIZER set)"
elif [ -n "$sanitizer" ]; then
  run_step gpu_codec_memcheck 90 "$sanitizer" --tool memcheck --error-exitcode 1 "$codec" --sanitize
  run_step gpu_codec_racecheck 60 "$sanitizer" --tool racecheck --error-exitcode 1 "$codec" --sanitize small
else
  say "== gpu_codec sanitizer runs: compute-sanitizer not found (not run)"
fi
run_step gpu_kernels 60 "$BIN_TESTS/test_model" --cuda
# the same checks with the bf16 table's own flash kernels as its attention
# (the run above takes cuDNN's fused SDPA where libcudnn.so.9 loads; stderr
# says which ran)
run_step gpu_kernels_own_attention 60 env ZRT_ATTENTION=own "$BIN_TESTS/test_model" --cuda
# one layer's attention, fp32 SGEMM path vs the bf16 table's flash kernels
# (device ms, TFLOP/s, their agreement): the Llama-3.2-1B shape at T 2048,
# B 4 (hd 64) and the Llama-3-8B one at B 1 (hd 128); docs/MODEL.md holds
# the estimate these replace
run_step attention_bench_hd64 120 "$BIN_TESTS/test_model" --bench-attention 4 2048 32 8 64 10
run_step attention_bench_hd128 120 "$BIN_TESTS/test_model" --bench-attention 1 2048 32 8 128 10
# the flash kernels' rows when cuDNN ran above (the engine is chosen once a
# process): cuDNN against our own kernels at the same shapes
run_step attention_bench_hd64_own 120 env ZRT_ATTENTION=own "$BIN_TESTS/test_model" --bench-attention 4 2048 32 8 64 10
run_step attention_bench_hd128_own 120 env ZRT_ATTENTION=own "$BIN_TESTS/test_model" --bench-attention 1 2048 32 8 128 10
# device buffers over MPI with the CUDA table and codec: 2 and 4 ranks on
# the GPU(s) here, each result bit for bit the host path's
for n in 2 4; do
  run_step "coll_device_cuda_np$n" 90 mpirun --oversubscribe --bind-to none -n $n "$BIN_TESTS/test_coll_device" --cuda
done
# NCCL as the device network (zipcclCommUseNccl) through every collective
# and strategy at one rank (NCCL refuses two ranks on one GPU): the results
# equal the host path's bit for bit, nothing crosses the bus
run_step coll_device_cuda_nccl_np1 60 mpirun --oversubscribe --bind-to none -n 1 "$BIN_TESTS/test_coll_device" \
  --cuda --nccl
for t in "$BIN_GPU"/test_gpu_*; do
  [ -x "$t" ] && [ -f "$t" ] || continue
  [ "$t" = "$codec" ] && continue
  run_step "$(basename "$t")" 90 "$t"
done
if [ -x scripts/test_train_gpu.sh ]; then
  run_step train_gpu 420 env BIN="$BIN" OUT_DIR="$OUT_DIR" scripts/test_train_gpu.sh
fi
# The side-by-side baseline (docs/BENCHMARKS.md, "PyTorch on the same card"):
# the llama-100m of train_gpu's figure at its shape, batch 32 x 256, trained
# by PyTorch on this card (LlamaForCausalLM, SDPA, bf16 autocast, fused
# AdamW), 3 warmup + 10 timed steps. A figure, not a check: PASS says only
# that it ran and wrote its numbers (torch_baseline.jsonl). It runs with
# torch's own CUDA libraries, not the bundle's LD_LIBRARY_PATH.
torch_baseline_step() { # torch_baseline_step JSON ARGS...
  local json=$1
  shift
  unset LD_LIBRARY_PATH OPAL_PREFIX
  "${PYTHON:-python3}" scripts/torch_baseline.py "$@" --json "$json" || return $?
  "${PYTHON:-python3}" - "$json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    name = "torch_baseline_" + ("compile" if r["compile"] else "eager")
    if r["status"] == "ok" and r["tokens_per_s"] > 0:
        mfu = "MFU %.1f%% of %s" % (100 * r["mfu"], r["peak_source"]) if r["mfu"] else "no peak known"
        print("PASS %s (a figure, not a check: %s, %d x %d, %s: %.1f ms/step, %.0f tok/s, %s)"
              % (name, r["config"], r["batch_size"], r["seq_len"], r["dtype"],
                 r["step_ms_median"], r["tokens_per_s"], mfu))
    elif r["compile"]:
        print("   %s: no row (%s)" % (name, r.get("error", r["status"])))
    else:
        print("FAIL %s: no numbers (%s)" % (name, r.get("error", r["status"])))
if not any(not r["compile"] for r in rows):
    print("FAIL torch_baseline_eager: no row in " + sys.argv[1])
PY
}
export -f torch_baseline_step
rm -f "$OUT_DIR/torch_baseline.jsonl"
run_step torch_baseline "$([ -n "${GPU_TORCH_COMPILE:-}" ] && echo 300 || echo 75)" \
  bash -c 'torch_baseline_step "$@"' _ "$OUT_DIR/torch_baseline.jsonl" configs/llama-100m.yaml \
  --set data.batch_size=32 --device cuda --steps 10 --warmup 3 ${GPU_TORCH_COMPILE:+--compile}
# the host waits of a steady step on this device, next to the warp
# emulator's (tests/test_host_waits.sh's budget): the same program counts
# the same waits, so the two must agree
run_step host_waits 150 env TRAIN="$BIN/train" DEV=cuda bash tests/test_host_waits.sh
# the collective table's GPU twin (issue 36 item 5): zipccl-bench with its
# buffers on the GPU, 2 and 4 ranks over MPI on the GPU(s) here, every row
# checked bit for bit (#wrong), JSON lines in coll_bench_cuda.jsonl
for n in 2 4; do
  run_step "coll_bench_cuda_np$n" 150 sh -c "mpirun --oversubscribe --bind-to none -n $n '$BIN/zipccl-bench' \
    --device cuda --coll allgather,reducescatter,alltoallv --strategy native,raw,compressed \
    -b 1M -e 64M -f 8 -n 3 -w 1 --json >>'$OUT_DIR/coll_bench_cuda.jsonl' && echo PASS coll_bench_cuda_np$n"
done
# the same compressed calls with each block coded in one piece
# (ZIPCCL_DEVICE_PIECE_BYTES=0: codec and wire one after the other) and in
# 8 MiB pieces (the default: piece k+1 coded while piece k is on the wire),
# 8-256 MiB at 2 ranks, into the same file ("device_piece_bytes" 0 and
# 8388608)
for pb in 0 8388608; do
  run_step "coll_bench_cuda_pieces${pb}_np2" 90 sh -c "ZIPCCL_DEVICE_PIECE_BYTES=$pb mpirun --oversubscribe \
    --bind-to none -x ZIPCCL_DEVICE_PIECE_BYTES -n 2 '$BIN/zipccl-bench' --device cuda \
    --coll allgather,reducescatter --strategy compressed -b 8M -e 256M -f 4 -n 3 -w 1 --json \
    >>'$OUT_DIR/coll_bench_cuda.jsonl' && echo PASS coll_bench_cuda_pieces${pb}_np2"
done
if [ -z "${GPU_SKIP_CODEC_BENCH:-}" ]; then
  run_step gpu_codec_bench 180 "$codec" --bench --json "$OUT_DIR/gpu_codec_bench.jsonl"
  # the codec beside a bf16 GEMM (issue 49 item 5, the projection's
  # contention): appended to the same file, "kind": "contention"
  run_step gpu_codec_contention 60 "$codec" --contention --json "$OUT_DIR/gpu_codec_bench.jsonl"
else
  say "== gpu_codec_bench: skipped (GPU_SKIP_CODEC_BENCH set)"
fi
rm -f "$step_out"
say "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
