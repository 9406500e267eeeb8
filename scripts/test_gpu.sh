#!/usr/bin/env bash
# test_gpu.sh — every GPU check in one short call (`make test-gpu`): build,
# then run the CUDA codec tests, the GPU codec benchmark and every other GPU
# test program, writing all output to one folder ($OUT if set, else
# BUILD/gpu-out) and to stdout. Ends with "N passed, N failed".
#
# Convention for everyone adding GPU tests: any executable BUILD/gpu/test_*
# is a GPU test and is run here (the Makefile builds tests/gpu/test_*.cu into
# BUILD/gpu/test_* when nvcc exists; add your own rule for anything else).
# It must print "PASS name" / "FAIL name: why" lines, exit non-zero on
# failure, and finish in under a minute: this whole script has ~5 minutes on
# an H200 machine with 16 cores, and each step is time-limited.
#
# Files written to the output folder (at most a handful, so a remote run can
# bring them all back): test_gpu.log (everything), build.log, nvidia-smi.txt,
# gpu_codec_bench.jsonl (one JSON line per codec x dtype).
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

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  say "no CUDA device: skipped"
  exit 0
fi
nvidia-smi >"$OUT_DIR/nvidia-smi.txt" 2>&1 || true
say "== $(date -u '+%F %T') UTC on $(nvidia-smi -L | head -1)"

# the GPU programs first, so an unrelated broken target cannot starve them
gpu_targets=$(for f in tests/gpu/*.cu; do [ -f "$f" ] && echo "$BUILD/gpu/$(basename "$f" .cu)"; done)
say "== build: make -k -j16 BUILD=$BUILD" $gpu_targets "all"
t0=$SECONDS
timeout 150 make -k -j16 BUILD="$BUILD" $gpu_targets >"$OUT_DIR/build.log" 2>&1
if ! timeout 120 make -k -j16 BUILD="$BUILD" all >>"$OUT_DIR/build.log" 2>&1; then
  say "build had errors (see build.log); running what was built:"
  grep -E 'error|Error' "$OUT_DIR/build.log" | head -20 | tee -a "$LOG"
fi
say "   build took $((SECONDS - t0))s"

codec="$BUILD/gpu/test_gpu_codec"
if [ ! -x "$codec" ]; then
  say "FAIL gpu: $codec was not built"
  say "0 passed, 1 failed"
  exit 1
fi
probe=$("$codec" --probe 2>&1)
if [ $? -eq 2 ]; then
  say "$probe"
  say "   (nvidia-smi sees: $(nvidia-smi -L 2>&1 | head -2 | tr '\n' ' '); a driver older than the toolkit looks like this)"
  exit 0
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
run_step gpu_codec_bench 120 "$codec" --bench --json "$OUT_DIR/gpu_codec_bench.jsonl"
for t in "$BUILD"/gpu/test_*; do
  [ -x "$t" ] && [ -f "$t" ] || continue
  [ "$t" = "$codec" ] && continue
  run_step "$(basename "$t")" 90 "$t"
done
rm -f "$step_out"
say "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
