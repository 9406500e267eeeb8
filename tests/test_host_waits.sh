#!/usr/bin/env bash
# test: timeout=600 asan=no
# test_host_waits.sh — a budget of host waits per training step, held
# without a GPU.
#
# device/device.c counts, per process, every host wait (stream, event and
# device synchronisations, blocking copies, the host value a kernel returns,
# the CUDA codec's frame-size waits) and every allocation and free, split
# between the trainer's compute thread and ZipCCL's progress threads; the
# step log carries the step's counts (host_waits, host_waits_comm,
# dev_allocs, dev_frees; rank 0's). Here the suite's tiny dense and MoE
# models train 4 steps (2 micro-batches each) at 1 and 2 ranks on the
# guarded CPU device (collectives staged through host memory) and on the
# warp emulator's CUDA device (BUILD/gpu/train_emu: compressed calls coded
# by the CUDA codec's kernels), and each steady step (3 and 4, after two
# warm-up steps: a buffer sized by the first step's calls may still grow
# in the second, where a progress thread's first call of a size can fall)
# must
#   - allocate and free nothing on the device or in pinned memory;
#   - stay within the budget below, per case: the compute thread's waits
#     and the progress threads'. The budget is the count measured when it
#     was written: a change that adds a wait fails here, and a change that
#     removes some lowers the budget in the same commit (the GPU issues).
# The table of counts is printed either way.
#
# On a GPU (scripts/test_gpu.sh): DEV=cuda TRAIN=build/train runs the
# emulator's cases on the real device and checks its counts equal the
# emulator's (the same program: a difference is a wait one of them takes
# that the other does not).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
DEV=${DEV:-}
EMU=${EMU:-$BUILD/gpu/train_emu}

# case -> "compute comm": the budget (the emulator's counts for the cuda
# cases, which a GPU run must equal)
declare -A BUDGET=(
  [guarded_dense_np1]="1 0"
  [guarded_dense_np2]="1 40"
  [guarded_moe_np1]="5 0"
  [guarded_moe_l4_np1]="9 0"
  [guarded_moe_ep2_np2]="5 56"
  [cuda_dense_np1]="1 0"
  [cuda_dense_np2]="1 80"
  [cuda_moe_ep2_np2]="5 112"
)

tiny_yaml 4 2 0 1
M=$TINY_MOE

# counts FILE STEP: "compute comm allocs frees" of that step's JSON line
counts() {
  python3 - "$1" "$2" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    if d.get("step") == int(sys.argv[2]) and "host_waits" in d and not d.get("final"):
        print(d["host_waits"], d["host_waits_comm"], d["dev_allocs"], d["dev_frees"])
        break
PY
}

printf '%-22s %8s %8s %8s %8s\n' "# case (steady step)" compute comm allocs frees
# one NAME TRAINER DEVICE NP [args...]
one() {
  local name=$1 trainer=$2 device=$3 np=$4; shift 4
  local out=$tmp/$name.jsonl
  # shellcheck disable=SC2086
  if ! TRAIN=$trainer run "$np" "$out" --set runtime.device="$device" "$@"; then
    fail "host_waits_$name" "the run failed"
    return
  fi
  local s2 s3
  s2=$(counts "$out" 3)
  s3=$(counts "$out" 4)
  if [ -z "$s2" ] || [ -z "$s3" ]; then
    fail "host_waits_$name" "no host_waits in the step log"
    return
  fi
  read -r c2 m2 a2 f2 <<<"$s2"
  read -r c3 m3 a3 f3 <<<"$s3"
  printf '%-22s %8s %8s %8s %8s\n' "$name" "$c3" "$m3" "$a3" "$f3"
  if [ "$a2$f2$a3$f3" != 0000 ]; then
    fail "host_waits_${name}_no_allocation" "steps 3 and 4 allocated $a2, $a3 and freed $f2, $f3"
  else
    pass "host_waits_${name}_no_allocation_in_a_steady_step"
  fi
  if [ "$c2 $m2" != "$c3 $m3" ]; then
    fail "host_waits_${name}_steady" "step 3 waited $c2 + $m2 times, step 4 $c3 + $m3"
  fi
  read -r bc bm <<<"${BUDGET[$name]}"
  if [ -n "$DEV" ]; then # on a GPU: the emulator's counts, exactly
    if [ "$c3 $m3" = "$bc $bm" ]; then pass "host_waits_${name}_equal_the_emulators ($c3 + $m3)"
    else fail "host_waits_${name}_equal_the_emulators" "this device $c3 + $m3, the emulator $bc + $bm"; fi
  elif [ "$c3" -le "$bc" ] && [ "$m3" -le "$bm" ]; then
    pass "host_waits_${name}_within_budget (compute $c3 <= $bc, comm $m3 <= $bm)"
  else
    fail "host_waits_${name}_within_budget" "compute $c3 (budget $bc), comm $m3 (budget $bm)"
  fi
}

if [ -n "$DEV" ]; then
  one cuda_dense_np1 "$TRAIN" "$DEV" 1
  one cuda_dense_np2 "$TRAIN" "$DEV" 2
  # shellcheck disable=SC2086
  one cuda_moe_ep2_np2 "$TRAIN" "$DEV" 2 $M --set parallelism.ep=2
else
  [ -x "$TRAIN" ] || { echo "FAIL host_waits: $TRAIN not built"; exit 1; }
  one guarded_dense_np1 "$TRAIN" cpu_guarded 1
  one guarded_dense_np2 "$TRAIN" cpu_guarded 2
  # shellcheck disable=SC2086
  one guarded_moe_np1 "$TRAIN" cpu_guarded 1 $M
  # three MoE blocks: their routing statistics are read once per forward,
  # not once per block
  # shellcheck disable=SC2086
  one guarded_moe_l4_np1 "$TRAIN" cpu_guarded 1 $M --set model.n_layers=4
  # shellcheck disable=SC2086
  one guarded_moe_ep2_np2 "$TRAIN" cpu_guarded 2 $M --set parallelism.ep=2
  if [ -x "$EMU" ]; then
    one cuda_dense_np1 "$EMU" cuda 1
    one cuda_dense_np2 "$EMU" cuda 2
    # shellcheck disable=SC2086
    one cuda_moe_ep2_np2 "$EMU" cuda 2 $M --set parallelism.ep=2
  else
    echo "FAIL host_waits_emulator: $EMU not built"
  fi
fi
exit $((fails > 0))
