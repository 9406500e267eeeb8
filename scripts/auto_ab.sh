#!/usr/bin/env bash
# auto_ab.sh — compare builds of zipccl-bench (library changes to auto,
# usually) on the emulated cluster, alternating the builds run by run so
# that the machine's drifting load hits them alike, and print auto against
# the best of native, raw and compressed timed in the same run.
#
#   scripts/auto_ab.sh [options] LABEL=BIN[:VAR=VALUE...] LABEL=BIN ...
#
#   --rate R        link rate for scripts/cluster.sh up (default none =
#                   unthrottled); --no-up uses the cluster already up
#   --hosts N       hosts (default 4)
#   --runs N        runs per build (default 12)
#   --coll LIST     zipccl-bench --coll (default alltoall,alltoallv)
#   --strategy LIST zipccl-bench --strategy (default native,raw,auto)
#   -b, -e, -f, -n  sizes, their step factor and timed calls (default 4K, 64K, 4, 400)
#   --out FILE      the rows as JSON lines (default docs/bench/auto_ab.jsonl):
#                   {"version","run","coll","bytes","strategy","time_us","picked","wrong"},
#                   strategy naming an entry's own codec or algorithm ("compressed/f3")
#
# VAR=VALUE after a binary is exported to its ranks (mpirun -x), so one
# build can run twice with an experiment knob.  The summary gives, per point
# and build, the median over the runs of auto / best of native, raw and
# compressed, and how many runs were within 3%; then, as the sweep's verdict
# reads a point (scripts/plot_coll.py), auto's median over the runs against
# the fastest fixed entry's (every design timed, "compressed/f3" included).
# docs/lab/auto_tuning.md's A/B tables were made this way (their rows are
# docs/lab/data/auto_*_ab.jsonl at commit b08f58b: git show b08f58b:PATH).
set -u
cd "$(dirname "$0")/.."
ARGS="$*"
RATE=none HOSTS=4 RUNS=12 COLLS=alltoall,alltoallv STRATS=native,raw,auto MINB=4K MAXB=64K STEP=4 ITERS=400
OUT=docs/bench/auto_ab.jsonl UP=1
usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
builds=()
while [ $# -gt 0 ]; do
  case $1 in
    --rate) RATE=$2; shift 2 ;;
    --no-up) UP=0; shift ;;
    --hosts) HOSTS=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --coll) COLLS=$2; shift 2 ;;
    --strategy) STRATS=$2; shift 2 ;;
    -b) MINB=$2; shift 2 ;;
    -e) MAXB=$2; shift 2 ;;
    -f) STEP=$2; shift 2 ;;
    -n) ITERS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "auto_ab.sh: unknown option $1" >&2; usage ;;
    *=*) builds+=("$1"); shift ;;
    *) echo "auto_ab.sh: '$1' is not LABEL=BIN" >&2; usage ;;
  esac
done
[ ${#builds[@]} -ge 1 ] || usage
for spec in "${builds[@]}"; do
  bin=${spec#*=}; bin=${bin%%:*}
  [ -x "$bin" ] || { echo "auto_ab.sh: $bin is not an executable" >&2; exit 2; }
done

logs=$(mktemp -d)
cleanup() { rm -rf "$logs"; [ "$UP" = 1 ] && scripts/cluster.sh down >/dev/null 2>&1; }
trap cleanup EXIT
if [ "$UP" = 1 ]; then
  ZCL_BURST=${ZCL_BURST:-256kb} scripts/cluster.sh up "$HOSTS" "$RATE" >/dev/null || exit 1
fi

for ((r = 1; r <= RUNS; r++)); do
  for spec in "${builds[@]}"; do
    label=${spec%%=*} rest=${spec#*=}
    bin=${rest%%:*} envs=()
    if [ "$rest" != "$bin" ]; then
      IFS=: read -r -a kv <<<"${rest#*:}"
      for e in "${kv[@]}"; do envs+=(-x "$e"); done
    fi
    scripts/cluster.sh run "${envs[@]}" "$bin" -b "$MINB" -e "$MAXB" -f "$STEP" -n "$ITERS" -w 1 -c 1 -d bf16 \
      --dist gaussian --sigma 0.02 --json --coll "$COLLS" --strategy "$STRATS" \
      >"$logs/$label.$r" 2>"$logs/$label.$r.err" ||
      { echo "auto_ab.sh: run $r of $label failed:" >&2; tail -5 "$logs/$label.$r.err" >&2; exit 1; }
  done
  printf '\rauto_ab.sh: run %d of %d' "$r" "$RUNS" >&2
done
echo >&2

python3 - "$logs" "$OUT" "$RATE" "$ARGS" "${builds[@]}" <<'PYEOF'
import json, os, statistics as st, sys
sys.path.insert(0, "scripts")
from plot_coll import variant  # an entry's series name: "compressed/f3", "raw/ring"
logs, out, rate, args, specs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
labels = [s.split("=", 1)[0] for s in specs]
rows, ratios = [], {}
for fn in sorted(os.listdir(logs)):
    label, _, run = fn.rpartition(".")
    if not run.isdigit():
        continue
    point = {}
    for line in open(os.path.join(logs, fn)):
        if not line.startswith('{"coll"'):
            continue
        j = json.loads(line)
        rows.append({"version": label, "run": int(run), "coll": j["coll"], "bytes": j["bytes"],
                     "strategy": variant(j), "time_us": j["time_us"], "picked": j.get("picked"),
                     "wrong": j["wrong"]})
        if j.get("algo", "default") == "default" and j.get("codec", "default") in ("default", "fast"):
            point.setdefault((j["coll"], j["bytes"]), {})[j["strategy"]] = j["time_us"]
    for k, d in point.items():
        fixed = [d[s] for s in ("native", "raw", "compressed") if s in d]
        if "auto" in d and fixed:
            ratios.setdefault(k, {}).setdefault(label, []).append(d["auto"] / min(fixed))
with open(out, "w") as f:
    f.write(json.dumps({"header": "scripts/auto_ab.sh %s (rate %s); builds: %s" % (args, rate, ", ".join(specs))}) + "\n")
    for r in sorted(rows, key=lambda r: (labels.index(r["version"]), r["run"])):
        f.write(json.dumps(r) + "\n")
print("auto / best of native, raw, compressed in the same run: median over runs (runs within 3%)")
print("%-20s" % "point" + "".join("%22s" % l for l in labels))
allr = {l: [] for l in labels}
for k in sorted(ratios):
    cells = []
    for l in labels:
        x = ratios[k].get(l, [])
        allr[l] += x
        cells.append("%.3f (%d/%d)" % (st.median(x), sum(v <= 1.03 for v in x), len(x)) if x else "-")
    print("%-20s" % ("%s %d" % k) + "".join("%22s" % c for c in cells))
print("%-20s" % "all runs" + "".join("%22s" % ("%.3f" % st.median(allr[l]) if allr[l] else "-") for l in labels))
# The sweep's statistic (scripts/plot_coll.py): each entry's median over the
# runs, auto's against the fastest fixed entry's, every design timed counting.
meds = {}
for r in rows:
    meds.setdefault((r["coll"], r["bytes"]), {}).setdefault(r["version"], {}) \
        .setdefault(r["strategy"], []).append(r["time_us"])
print("\nauto / fastest fixed entry, each entry's median over the runs (fastest entry)")
print("%-20s" % "point" + "".join("%22s" % l for l in labels))
for k in sorted(meds):
    cells = []
    for l in labels:
        d = {v: st.median(x) for v, x in meds[k].get(l, {}).items()}
        fixed = {v: t for v, t in d.items() if v != "auto"}
        cells.append("%.3f %s" % (d["auto"] / min(fixed.values()), min(fixed, key=fixed.get))
                     if "auto" in d and fixed else "-")
    print("%-20s" % ("%s %d" % k) + "".join("%22s" % c for c in cells))
print("wrong: %d in %d rows -> %s" % (sum(r["wrong"] or 0 for r in rows), len(rows), out))
PYEOF
