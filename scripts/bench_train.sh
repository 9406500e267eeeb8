#!/usr/bin/env bash
# bench_train.sh — end-to-end training step time on the emulated cluster
# (scripts/cluster.sh: 4 hosts, one rank each, or --hosts H x --per-host K
# ranks: loopback inside a host, shaped links between), strategy by strategy
# and overlap off / on, the runs of one table alternating, repeated.
#
#   scripts/bench_train.sh --rate 1gbit [--reps 3] [--steps 14] [--warmup 4]
#                          [--hosts 4] [--per-host 1]
#                          [--config configs/llama-20m-commbound.yaml] [--tag NAME]
#                          [--variants "raw:on compressed:on ..."] [--set key=value ...]
#
# A variant is STRATEGY[/ALGO]:OVERLAP (overlap on or off; ALGO a comm.algo,
# e.g. compressed/hier:on). Each run trains --steps
# steps and reports the median over the steps after --warmup (auto settles
# there) of: step time, exposed communication per kind, codec time and time
# inside the collectives; compute = step time - exposed communication. One
# JSON line per run goes to docs/bench/train_TAG.jsonl (with the load average
# and the time), and scripts/bench_train_report.py turns the file into the
# table and the stacked-bar PNG. A MoE config: the lines add MaxVio and the
# exchange's ratio; with ZRT_EP_SYNC=1 in the environment (runtime/expert.h)
# alltoall_sync_ms is the wait for the busiest rank's experts.
#
# Left out: more hosts than 4, other models than the config's.
set -u
cd "$(dirname "$0")/.."
RATE=1gbit REPS=3 STEPS=14 WARMUP=4 CONFIG=configs/llama-20m-commbound.yaml TAG="" SETS=() HOSTS=4 PER_HOST=1
VARIANTS="native:off raw:off compressed:off auto:off native:on raw:on compressed:on auto:on"
TRAIN=${TRAIN:-build/train}
while [ $# -gt 0 ]; do
  case $1 in
    --rate) RATE=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --hosts) HOSTS=$2; shift 2 ;;
    --per-host) PER_HOST=$2; shift 2 ;;
    --variants) VARIANTS=$2; shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    *) echo "bench_train.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "bench_train.sh: the cluster needs root" >&2; exit 1; }
[ -x "$TRAIN" ] || { echo "bench_train.sh: $TRAIN not built" >&2; exit 1; }
out=docs/bench/train_${TAG:-$RATE}.jsonl
mkdir -p docs/bench
tmp=$(mktemp -d)
export ZCL_PREFIX=${ZCL_PREFIX:-zbt} ZCL_SUBNET=${ZCL_SUBNET:-10.78.0}
trap 'rm -rf "$tmp"; scripts/cluster.sh down >/dev/null 2>&1' EXIT
scripts/cluster.sh up "$HOSTS" "$RATE" >/dev/null || exit 1
export ZCL_RANKS_PER_HOST=$PER_HOST BT_HOSTS=$HOSTS
for ((rep = 1; rep <= REPS; rep++)); do
  for v in $VARIANTS; do
    s=${v%%:*} o=${v##*:} algo=()
    case $s in */*) algo=(--set comm.algo="${s#*/}") ;; esac
    ov=true; [ "$o" = off ] && ov=false
    echo "== $RATE rep $rep/$REPS: $s, overlap $o"
    load=$(cut -d' ' -f1 /proc/loadavg)
    scripts/cluster.sh run "$PWD/$TRAIN" "$PWD/$CONFIG" --set comm.strategy="${s%%/*}" "${algo[@]}" \
      --set parallelism.overlap=$ov --set train.steps="$STEPS" --set data.path="$PWD/data/fortunes.txt" \
      "${SETS[@]}" --log-json "$tmp/run.jsonl" >"$tmp/run.log" 2>&1 || { tail -5 "$tmp/run.log"; exit 1; }
    python3 - "$tmp/run.jsonl" "$WARMUP" "$RATE" "$s" "$o" "$rep" "$load" "$CONFIG" "${SETS[*]:-}" >>"$out" <<'PY'
import json, os, statistics, sys, time
path, warm, rate, strat, ov, rep, load, cfg, sets = sys.argv[1:10]
rows = [json.loads(l) for l in open(path) if '"final"' not in l]
rows = [r for r in rows if r["step"] > int(warm)]
med = lambda k: statistics.median(r.get(k, 0) for r in rows)
x = {k: med(k) for k in ("ms", "exposed_comm_ms", "exposed_allgather_ms", "exposed_reducescatter_ms",
                         "exposed_alltoall_ms", "exposed_misc_ms", "codec_ms", "comm_allgather_ms",
                         "comm_reducescatter_ms", "overlap", "comm_ratio", "comm_raw_bytes",
                         "expert_maxvio", "expert_rank_vio", "alltoall_ratio", "alltoall_raw_bytes",
                         "alltoall_sync_ms")}
x["compute_ms"] = statistics.median(r["ms"] - r["exposed_comm_ms"] for r in rows)
print(json.dumps(dict(rate=rate, strategy=strat, overlap_on=ov == "on", rep=int(rep), load=float(load),
                      time=time.strftime("%Y-%m-%dT%H:%M:%S"), config=cfg, sets=sets,
                      steps=len(rows), hosts=int(os.environ["BT_HOSTS"]),
                      per_host=int(os.environ["ZCL_RANKS_PER_HOST"]), **x)))
PY
    tail -1 "$out" | cut -c1-200
  done
done
