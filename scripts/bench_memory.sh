#!/usr/bin/env bash
# bench_memory.sh — the memory plan against the measured peak.
#
#   scripts/bench_memory.sh [--out FILE] [--steps N] [--ranks "1 2 4"]
#                           [--seq "256 1024"] [--recompute "none full"]
#                           [--configs "configs/llama-100m.yaml configs/qwen3-moe-100m.yaml"]
#
# Per config, sequence length, recomputation mode and rank count: STEPS
# steps of training (the same tokens per micro-batch at every T: batch
# 1024/T... of the config's batch at T = 256), then from the run's final
# JSON line the largest resident-set high-water mark of its ranks
# (VmHWM) and the plan's host bytes per rank (runtime/memplan.h). One JSON
# line per run in FILE (default build/bench_memory.jsonl) and a markdown
# table on stdout: plan, measured, and the difference. The MoE config runs
# at EP = its parallelism.ep where the ranks allow, else EP = ranks.
set -u
cd "$(dirname "$0")/.."
OUT=build/bench_memory.jsonl STEPS=2 RANKS="1 2 4" SEQS="256 1024" MODES="none full"
CONFIGS="configs/llama-100m.yaml configs/qwen3-moe-100m.yaml"
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;; --steps) STEPS=$2; shift 2 ;; --ranks) RANKS=$2; shift 2 ;;
    --seq) SEQS=$2; shift 2 ;; --recompute) MODES=$2; shift 2 ;; --configs) CONFIGS=$2; shift 2 ;;
    *) echo "bench_memory.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
TRAIN=${TRAIN:-build/train}
[ -x "$TRAIN" ] || { echo "bench_memory.sh: $TRAIN not built (make)" >&2; exit 1; }
[ -f data/fortunes.txt ] || scripts/prepare_data.sh || exit 1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
: >"$OUT"
echo "| config | T | B | recompute | ranks | plan per rank | measured peak | difference |"
echo "|---|---|---|---|---|---|---|---|"
for cfg in $CONFIGS; do
  B0=$(sed -n 's/^ *batch_size: *\([0-9]*\).*/\1/p' "$cfg" | head -1)
  EP0=$(sed -n 's/^ *ep: *\([0-9]*\).*/\1/p' "$cfg" | head -1)
  for T in $SEQS; do
    B=$((B0 * 256 / T)); [ "$B" -ge 1 ] || B=1
    for mode in $MODES; do
      for np in $RANKS; do
        set_ep=()
        if [ -n "$EP0" ]; then ep=$EP0; [ "$np" -lt "$ep" ] && ep=$np; set_ep=(--set parallelism.ep=$ep); fi
        args=("$cfg" --set train.steps="$STEPS" --set model.max_seq_len="$T" --set data.seq_len="$T"
              --set data.batch_size="$B" --set data.val_every=0 --set train.recompute="$mode"
              --set checkpoint.every=0 "${set_ep[@]}" --log-json "$tmp/r.jsonl")
        if [ "$np" = 1 ]; then "$TRAIN" "${args[@]}" >"$tmp/r.log" 2>&1
        else mpirun --oversubscribe --bind-to none -n "$np" "$TRAIN" "${args[@]}" >"$tmp/r.log" 2>&1; fi
        rc=$?
        if [ $rc -ne 0 ]; then echo "| $cfg | $T | $B | $mode | $np | run failed (exit $rc): $(tail -1 "$tmp/r.log") |"; continue; fi
        python3 - "$tmp/r.jsonl" "$cfg" "$T" "$B" "$mode" "$np" "$OUT" <<'PY'
import json, sys
path, cfg, T, B, mode, np, out = sys.argv[1:]
fin = [json.loads(l) for l in open(path) if '"final"' in l][-1]
plan, rss = fin["plan_host_bytes"], fin["rss_peak_bytes"]
row = {"config": cfg, "seq_len": int(T), "batch_size": int(B), "recompute": mode, "ranks": int(np),
       "plan_host_bytes": plan, "rss_peak_bytes": rss, "diff": rss / plan - 1}
open(out, "a").write(json.dumps(row) + "\n")
gib = lambda x: "%.2f GiB" % (x / 2**30)
print("| %s | %s | %s | %s | %s | %s | %s | %+.1f%% |" % (cfg.split("/")[-1], T, B, mode, np, gib(plan), gib(rss), 100 * (rss / plan - 1)))
PY
      done
    done
  done
done
