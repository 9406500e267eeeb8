#!/usr/bin/env bash
# bench_targets.sh — the issue's 1 Gbit/s target points, measured several
# times so that one noisy run does not decide the verdict.
#
#   scripts/bench_targets.sh [--reps 3] [--iters 5] [--out docs/bench/coll_1gbit_targets.jsonl]
#
# Brings up the emulated 4-host cluster at 1 Gbit/s (tbf burst 256 KB, like
# scripts/bench_sweep.sh), then REPS times over: AllGather with 64 MiB bf16
# per rank (256M in nccl-tests' convention), ReduceScatter, AllReduce,
# AlltoAll and AlltoAllv with 64 MiB per rank, each as its own zipccl-bench
# run with all four strategies plus compressed with codec f3 (each figure
# there: the median of ITERS calls of the slowest rank), then native again
# under Open MPI's default TCP flags ("native-put"; cluster.sh's runs use
# btl_tcp_flags=send).  The JSON lines go to OUT; scripts/bench_targets.py
# then prints, per collective and strategy, the median over the repetitions
# and the verdict against the targets.  The cluster is torn down on exit.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
REPS=3 ITERS=5 OUT=docs/bench/coll_1gbit_targets.jsonl
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "bench_targets.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
BENCH=$BUILD/zipccl-bench
[ -x "$BENCH" ] || { echo "bench_targets.sh: $BENCH not built (make $BENCH)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bench_targets.sh: needs root for the emulated cluster" >&2; exit 1; }
trap 'scripts/cluster.sh down >/dev/null 2>&1' EXIT
trap 'exit 130' INT TERM
mkdir -p "$(dirname "$OUT")"
ZCL_BURST=256kb scripts/cluster.sh up 4 1gbit || exit 1
printf '{"header":"bench_targets.sh reps %d iters %d","date":"%s","load_before":"%s","link_probe":"%s"}\n' \
  "$REPS" "$ITERS" "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
  "$(scripts/cluster.sh bw 64 2>&1 | tail -1)" >"$OUT"
# One zipccl-bench run of the point, its JSON lines tagged with the rep and
# then rewritten by the sed expression $1 (strategy renames); the rest of the
# arguments go to the bench.
measure() {
  local rename=$1; shift
  scripts/cluster.sh run "$BENCH" -b "$size" -e "$size" -n "$ITERS" -w 1 -c 1 -d bf16 \
    --dist gaussian --sigma 0.02 --coll "$coll" --json "$@" 2>&1 |
    grep '^{' | sed -e "s/^{/{\"rep\":$rep,/" -e "$rename" >>"$OUT"
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "bench_targets.sh: zipccl-bench failed" >&2; exit 1; }
}
for ((rep = 1; rep <= REPS; rep++)); do
  for point in allgather:256M reducescatter:64M allreduce:64M alltoall:64M alltoallv:64M; do
    coll=${point%%:*} size=${point#*:}
    echo "== rep $rep/$REPS: $coll $size"
    # every strategy, and the compressed design once more with codec f3
    # (F3, what fast wrote before F2), interleaved in the same run
    measure '/"codec":"f3"/s/"strategy":"compressed"/"strategy":"compressed:f3"/' \
      --strategy native,raw,compressed,auto,compressed:f3
    # MPI's own collective once more under Open MPI's default btl_tcp_flags
    # (cluster.sh runs with "send"), so the baseline is the faster of both.
    ZCL_BTL_TCP_FLAGS=default measure 's/"strategy":"native"/"strategy":"native-put"/' --strategy native
  done
done
python3 scripts/bench_targets.py "$OUT"
