#!/usr/bin/env bash
# bench_hier_coll.sh — the hier vs flat vs native collectives tables of
# docs/BENCHMARKS.md ("Hierarchical designs"): zipccl-bench on two-level
# emulated clusters (scripts/cluster.sh, 2 ranks per host), every run's rows
# tagged "run": k in docs/bench/coll_hier_TAG.jsonl; tables by
# scripts/coll_hier_table.py. Needs root (network namespaces).
#   scripts/bench_hier_coll.sh      2 hosts x 2 at 10 Gbit/s (3 runs, 4-64 MiB),
#                                   4 hosts x 2 at 1 Gbit/s (2 runs, 4-16 MiB)
#   scripts/bench_hier_coll.sh H RATE  H hosts x 2 at RATE alone (2 runs, 4-16 MiB)
#   scripts/bench_hier_coll.sh auto 2 hosts x 2 at 1 Gbit/s with strategy auto
#                                   beside the fixed designs (2 runs, 4-16 MiB):
#                                   what auto settles on across nodes
set -u
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench_hier_coll.sh: the cluster needs root" >&2; exit 1; }
trap 'scripts/cluster.sh down >/dev/null 2>&1' EXIT
export ZCL_PREFIX=zhc ZCL_SUBNET=10.79.0
STRATS=native,raw,compressed,raw:hier,compressed:hier
run_one() { # HOSTS RATE TAG REPS MAXB
  local hosts=$1 rate=$2 tag=$3 reps=$4 maxb=$5
  scripts/cluster.sh up "$hosts" "$rate" >/dev/null || exit 1
  out=docs/bench/coll_hier_${tag}.jsonl
  : >"$out"
  echo "{\"header\": \"hier vs flat, ${hosts} hosts x 2 ranks, $rate\", \"rate\": \"hier_${tag}\", \"date\": \"$(date -u +%FT%TZ)\", \"load_before\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >>"$out"
  for ((r = 1; r <= reps; r++)); do
    ZCL_RANKS_PER_HOST=2 scripts/cluster.sh run "$PWD/build/zipccl-bench" -b 4M -e "$maxb" -f 4 -n 5 -w 1 \
      --coll allgather,reducescatter,allreduce --strategy "$STRATS" --json \
      2>/dev/null | grep '^{' | sed "s/^{/{\"run\": $r, /" >>"$out"
    echo "$tag run $r: $(wc -l <"$out") lines"
  done
  scripts/cluster.sh down >/dev/null 2>&1
}
if [ -n "${2:-}" ]; then
  run_one "$1" "$2" "${1}x2_$2" 2 16M
  exit 0
fi
if [ "${1:-}" = auto ]; then
  STRATS=$STRATS,auto
  run_one 2 1gbit 2x2_1gbit_auto 2 16M
  exit 0
fi
run_one 2 10gbit 2x2_10gbit 3 64M
run_one 4 1gbit 4x2_1gbit 2 16M
