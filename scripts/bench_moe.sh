#!/usr/bin/env bash
# bench_moe.sh — MoE training, end to end: step time and tokens/s at EP = 1, 2
# and 4 on this machine, and the expert exchange compressed against raw on
# the emulated slow-link cluster.
#
#   scripts/bench_moe.sh [--local] [--cluster RATE] [--steps N] [--reps R]
#                        [--config F] [--out FILE] [--dtypes "fp32 bf16"]
#                        [--ep "1 2 4"] [--chunks "1"] [--alltoall "raw compressed"]
#                        [--set key=value ...]   (passed on to every run)
#
# --local (default when neither is given): 4 ranks on this machine, each of
#   EP = 1, 2, 4 for STEPS steps of CONFIG, REPS times in turn (EP 1, 2, 4,
#   1, 2, 4, ...: the machine's noise falls on all alike). Per run: the
#   median step time over steps 3.. (the first two warm up), tokens/s, and
#   the share of the step spent waiting on the expert exchange.
# --cluster RATE: scripts/cluster.sh up 4 RATE (4 hosts, one rank each),
#   EP = 4, comm.alltoall raw and compressed alternating run by run, with
#   the rows as fp32 and as bf16 (comm.alltoall_dtype; the other collectives
#   compressed in all), REPS runs each: the median per step of the
#   exchange's time, the step time, and the raw and wire bytes.
# --chunks LIST: each configuration also at each moe.overlap_chunks in LIST
#   (the expert exchange pipelined in chunks; 1 = whole), alternating with
#   the others run by run; EP 1 runs only at 1 (no exchange to cut). --ep
#   (local) and --alltoall (cluster) narrow what else alternates.
# Every run's summary is one JSON line in OUT (default
# docs/bench/moe_<mode>.jsonl); the script ends with a table of the medians
# over the repetitions. Needs root for --cluster. CONFIG defaults to
# configs/qwen3-moe-100m.yaml.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
STEPS=12 REPS=3 CONFIG=configs/qwen3-moe-100m.yaml OUT="" LOCAL=0 RATE="" DTYPES="fp32 bf16" SETS=()
EPS="1 2 4" CHUNKS="1" A2AS="raw compressed"
while [ $# -gt 0 ]; do
  case "$1" in
    --local) LOCAL=1; shift ;;
    --cluster) RATE=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --config) CONFIG=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --dtypes) DTYPES=$2; shift 2 ;;
    --ep) EPS=$2; shift 2 ;;
    --chunks) CHUNKS=$2; shift 2 ;;
    --alltoall) A2AS=$2; shift 2 ;;
    --set) SETS+=(--set "$2"); shift 2 ;;
    -h | --help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "bench_moe.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ -z "$RATE" ] && LOCAL=1
TRAIN=$BUILD/train
[ -x "$TRAIN" ] || { echo "bench_moe.sh: $TRAIN not built (make)" >&2; exit 1; }
[ -f data/fortunes.txt ] || scripts/prepare_data.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; [ -n "$RATE" ] && scripts/cluster.sh down >/dev/null 2>&1' EXIT
trap 'exit 130' INT TERM

# summarize LOG TAG...: one JSON line from a run's --log-json file
summarize() {
  python3 - "$@" <<'PY'
import json, statistics, sys
path, tags = sys.argv[1], sys.argv[2:]
rows = [json.loads(l) for l in open(path) if '"final"' not in l]
use = rows[2:] if len(rows) > 3 else rows
med = lambda k: statistics.median(r[k] for r in use)
out = dict(t.split("=", 1) for t in tags)
out.update(steps=len(rows), step_ms=med("ms"), tokens_per_s=med("tokens_per_s"),
           alltoall_ms=med("alltoall_exposed_ms") if "alltoall_exposed_ms" in use[0] else 0.0,
           alltoall_sync_ms=med("alltoall_sync_ms") if "alltoall_sync_ms" in use[0] else 0.0,
           alltoall_raw_bytes=med("alltoall_raw_bytes") if "alltoall_raw_bytes" in use[0] else 0,
           alltoall_wire_bytes=med("alltoall_wire_bytes") if "alltoall_wire_bytes" in use[0] else 0,
           exposed_ms=med("exposed_comm_ms"), loss_last=rows[-1]["loss"])
out["alltoall_share"] = out["alltoall_ms"] / out["step_ms"] if out["step_ms"] else 0.0
out["exchange_ms"] = out["alltoall_ms"] - out["alltoall_sync_ms"]
print(json.dumps(out))
PY
}

report() { # report FILE KEY...: medians over the repetitions, one row per configuration
  python3 - "$@" <<'PY'
import json, statistics, sys
path, keys = sys.argv[1], sys.argv[2:]
rows = [json.loads(l) for l in open(path) if l.startswith("{") and "header" not in l]
groups = {}
for r in rows:
    groups.setdefault(tuple(r[k] for k in keys), []).append(r)
print("| " + " | ".join(keys) + " | runs | step ms | tokens/s | a2a ms | a2a share | of it: imbalance wait ms | exchange ms | a2a MB raw -> wire |")
print("|" + "---|" * (len(keys) + 8))
for g, rs in sorted(groups.items()):
    m = lambda k: statistics.median(r[k] for r in rs)
    print("| " + " | ".join(map(str, g)) + f" | {len(rs)} | {m('step_ms'):.1f} | {m('tokens_per_s'):.0f} | "
          f"{m('alltoall_ms'):.1f} | {100 * m('alltoall_share'):.1f}% | {m('alltoall_sync_ms'):.1f} | "
          f"{m('exchange_ms'):.1f} | "
          f"{m('alltoall_raw_bytes') / 1e6:.2f} -> {m('alltoall_wire_bytes') / 1e6:.2f} |")
PY
}

header() {
  printf '{"header":"bench_moe.sh %s","config":"%s","steps":%d,"reps":%d,"date":"%s","load_before":"%s","cpu":"%s"}\n' \
    "$1" "$CONFIG" "$STEPS" "$REPS" "$(date -u +%FT%TZ)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')" >"$2"
}

if [ "$LOCAL" = 1 ]; then
  out=${OUT:-docs/bench/moe_local.jsonl}
  mkdir -p "$(dirname "$out")"
  header "local ${SETS[*]}" "$out"
  for ((rep = 1; rep <= REPS; rep++)); do
    for ep in $EPS; do
      for nc in $CHUNKS; do
        [ "$ep" = 1 ] && [ "$nc" != 1 ] && continue
        echo "== local rep $rep/$REPS: EP $ep, $nc chunk(s)"
        mpirun --oversubscribe --bind-to none -n 4 "$TRAIN" "$CONFIG" --set parallelism.ep=$ep \
          --set moe.overlap_chunks=$nc --set train.steps="$STEPS" "${SETS[@]}" \
          --log-json "$tmp/run.jsonl" >"$tmp/run.log" 2>&1 ||
          { tail -5 "$tmp/run.log"; exit 1; }
        summarize "$tmp/run.jsonl" mode=local ep=$ep chunks=$nc rep=$rep load="$(cut -d' ' -f1 /proc/loadavg)" >>"$out"
      done
    done
  done
  report "$out" ep chunks
fi

if [ -n "$RATE" ]; then
  out=${OUT:-docs/bench/moe_${RATE}.jsonl}
  mkdir -p "$(dirname "$out")"
  [ "$(id -u)" = 0 ] || { echo "bench_moe.sh: --cluster needs root" >&2; exit 1; }
  ZCL_BURST=256kb scripts/cluster.sh up 4 "$RATE" || exit 1
  # a barrier before each exchange, its wait counted apart: the exchange's
  # own time, without the experts' load imbalance (runtime/expert.h)
  export ZRT_EP_SYNC=1
  header "cluster $RATE ${SETS[*]}" "$out"
  for ((rep = 1; rep <= REPS; rep++)); do
    for dt in $DTYPES; do
      for s in $A2AS; do
        for nc in $CHUNKS; do
          echo "== cluster $RATE rep $rep/$REPS: alltoall $s, rows $dt, $nc chunk(s)"
          scripts/cluster.sh run "$PWD/$TRAIN" "$PWD/$CONFIG" --set parallelism.ep=4 \
            --set comm.alltoall=$s --set comm.alltoall_dtype=$dt --set moe.overlap_chunks=$nc \
            --set train.steps="$STEPS" \
            --set data.path="$PWD/data/fortunes.txt" "${SETS[@]}" --log-json "$tmp/run.jsonl" \
            >"$tmp/run.log" 2>&1 ||
            { tail -5 "$tmp/run.log"; exit 1; }
          summarize "$tmp/run.jsonl" mode="cluster_$RATE" alltoall=$s dtype=$dt chunks=$nc rep=$rep \
            load="$(cut -d' ' -f1 /proc/loadavg)" >>"$out"
        done
      done
    done
  done
  report "$out" dtype alltoall chunks
fi
