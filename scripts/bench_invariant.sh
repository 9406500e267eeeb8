#!/usr/bin/env bash
# bench_invariant.sh [CONFIG] [STEPS] [REPS] [--set ...] — what
# train.rank_invariant costs (issue 51, docs/RUNTIME.md "Rank-invariant
# training"): CONFIG (default configs/llama-100m.yaml) with
# train.grad_groups=4, at 1 rank (grad_accum 4) and 4 ranks (grad_accum 1),
# rank_invariant off and on alternated, REPS times each (default 3), STEPS
# steps a run (default 4; the first step is left out). The same micro-batches
# either way: what differs is the tree (an All-to-All and pairwise adds in
# place of the reduce-scatter, the binary counter over micro-batches), the
# norm's per-block sums and its all-gather, and the padding.
# EP=K (a MoE config): parallelism.ep K at 4 ranks and 1 at 1 rank, with
# moe.aux_loss_scope rank either way (what rank_invariant needs).
# Prints one JSON line per run (the median step time of its steps 2..STEPS)
# and a summary per rank count (the median over runs, on / off); the lines
# are appended to $OUT (default docs/bench/invariant_cpu.jsonl).
set -u
cd "$(dirname "$0")/.."
CFG=${1:-configs/llama-100m.yaml}
STEPS=${2:-4}
REPS=${3:-3}
shift $(($# < 3 ? $# : 3))
OUT=${OUT:-docs/bench/invariant_cpu.jsonl}
[ -x build/train ] || { echo "bench_invariant: build/train is not built (make)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cores=$(nproc)
host=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
median() { python3 -c 'import sys, statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
declare -A runs
for rep in $(seq 1 "$REPS"); do
  for np in 1 4; do
    for mode in false true; do
      threads=$((cores / np)); [ "$threads" -ge 1 ] || threads=1
      moe=()
      [ -n "${EP:-}" ] && moe=(--set parallelism.ep="$([ "$np" = 1 ] && echo 1 || echo "$EP")"
                               --set moe.aux_loss_scope=rank)
      log="$tmp/r.jsonl"
      rm -f "$log"
      if ! OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads mpirun --bind-to none -n "$np" \
          -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS build/train "$CFG" --set train.grad_groups=4 \
          --set train.steps="$STEPS" --set train.rank_invariant="$mode" --set data.val_every=0 \
          --log-json "$log" "${moe[@]}" "$@" >"$tmp/out.log" 2>&1; then
        echo "bench_invariant: run failed (np $np, rank_invariant $mode):"; tail -5 "$tmp/out.log"; exit 1
      fi
      ms=$(python3 -c '
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if "\"ms\"" in l and "final" not in l]
print(statistics.median(s["ms"] for s in steps[1:]))' "$log")
      runs[$np,$mode]="${runs[$np,$mode]:-} $ms"
      ep=1; [ -n "${EP:-}" ] && [ "$np" != 1 ] && ep=$EP
      line=$(printf '{"bench": "rank_invariant", "config": "%s", "args": "%s", "nranks": %d, "ep": %d, "rank_invariant": %s, "rep": %d, "steps": %d, "median_step_ms": %.1f, "host": "%s", "cores": %d, "date": "%s"}' \
        "$CFG" "$*" "$np" "$ep" "$mode" "$rep" "$STEPS" "$ms" "$host" "$cores" "$(date -u +%F)")
      echo "$line"; echo "$line" >>"$OUT"
    done
  done
done
for np in 1 4; do
  # shellcheck disable=SC2086
  off=$(median ${runs[$np,false]}); on=$(median ${runs[$np,true]})
  python3 -c 'import sys; off, on = float(sys.argv[2]), float(sys.argv[3]); print("# %s ranks: off %.1f ms, on %.1f ms per step (medians): on / off = %.3f (%+.1f%%)" % (sys.argv[1], off, on, on / off, 100 * (on / off - 1)))' "$np" "$off" "$on"
done
