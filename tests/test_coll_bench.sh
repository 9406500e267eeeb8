#!/usr/bin/env bash
# test: timeout=240
# test_coll_bench.sh — zipccl-bench end to end: every collective and strategy
# on 2 and 3 ranks with small sizes, its JSON rows checked by an independent
# reading (python): #wrong == 0 everywhere, the nccl-tests size and bus
# bandwidth conventions, compression on Gaussian bf16; its #wrong column shown
# to count a corrupted element; file input; bad flags -> exit code 2.
# Under the sanitizer build it runs as well (leak checks off: Open MPI keeps
# allocations until exit that LeakSanitizer would report).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$BUILD/zipccl-bench
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; }
check() { if [ "$2" = 0 ]; then pass "$1"; else fail "$1" "$3"; fi; }

if [ ! -x "$BIN" ]; then
  fail bench_built "$BIN missing (make $BIN)"
  exit 1
fi

mpi() { local n=$1; shift; timeout 100 mpirun --oversubscribe --bind-to none -n "$n" "$@"; }

# Validate JSON rows: validate.py FILE NRANKS DTYPE EXPECT_ROWS [extra checks...]
cat >"$tmp/validate.py" <<'EOF'
import json, sys
path, n, dtype, expect_rows = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
flags = set(sys.argv[5:])
es = {"bf16": 2, "fp16": 2, "fp32": 4}[dtype]
rows = [json.loads(l) for l in open(path) if l.startswith("{")]
errs = []
def err(m):
    if len(errs) < 8: errs.append(m)
if len(rows) != expect_rows:
    err("%d rows, expected %d" % (len(rows), expect_rows))
need = ["coll", "dtype", "bytes", "nranks", "strategy", "time_us", "algbw_gbps", "busbw_gbps",
        "ratio", "wrong"]
bus = {"allgather": (n - 1) / n, "reducescatter": (n - 1) / n, "allreduce": 2 * (n - 1) / n,
       "alltoall": (n - 1) / n, "alltoallv": (n - 1) / n}
for r in rows:
    tag = "%s/%s/%s" % (r.get("coll"), r.get("bytes"), r.get("strategy"))
    miss = [k for k in need if k not in r]
    if miss:
        err("%s: missing %s" % (tag, miss)); continue
    red = r["coll"] in ("reducescatter", "allreduce")
    if r["wrong"] is None:
        # Only MPI's own reductions (pairwise rounding in MPI's order) are exempt
        # from the bit-exact check; they must still say how far they are from raw.
        exempt = red and (r["strategy"] == "native" or "native" in r.get("picked", ""))
        if not exempt or not isinstance(r.get("differ"), int):
            err("%s: wrong = null without a reason" % tag)
    elif r["wrong"] != 0:
        err("%s: wrong = %s" % (tag, r["wrong"]))
    if r["nranks"] != n or r["dtype"] != dtype:
        err("%s: nranks/dtype %s/%s" % (tag, r["nranks"], r["dtype"]))
    # nccl-tests size conventions, from the per-call count the row reports.
    c = r["count"]
    want = {"allgather": c * n * es, "reducescatter": c * n * es, "allreduce": c * es,
            "alltoall": c * n * es, "alltoallv": c * n * es}[r["coll"]]
    if r["bytes"] != want:
        err("%s: bytes %d != %d for count %d" % (tag, r["bytes"], want, c))
    if not r["time_us"] > 0:
        err("%s: time %s" % (tag, r["time_us"]))
    algbw = r["bytes"] / (r["time_us"] * 1e-6) / 1e9
    # time_us is printed to 1 ns: allow for that rounding on tiny times
    if abs(r["algbw_gbps"] - algbw) > algbw * (1e-3 + 1e-3 / r["time_us"]) + 2e-4:
        err("%s: algbw %s != bytes/time %.4f" % (tag, r["algbw_gbps"], algbw))
    if abs(r["busbw_gbps"] - r["algbw_gbps"] * bus[r["coll"]]) > 1e-3 * r["algbw_gbps"] + 2e-4:
        err("%s: busbw %s != algbw x %.3f" % (tag, r["busbw_gbps"], bus[r["coll"]]))
    if r["strategy"] in ("native", "raw") and abs(r["ratio"] - 1.0) > 0.01:
        err("%s: uncompressed strategy reports ratio %s" % (tag, r["ratio"]))
    if r["strategy"] in ("compressed", "auto") and "codec" not in r:
        err("%s: no codec key" % tag)
    # auto may change its mind between iterations: "raw+compressed" names both;
    # a non-default codec or design follows: "compressed/dense", "raw/ring"
    parts = r.get("picked", "").split("/")
    picked, extra = parts[0].split("+"), [x for p in parts[1:] for x in p.split("+")]
    if r["strategy"] == "auto" and (not picked or not set(picked) <= {"native", "raw", "compressed"}
                                    or not set(extra) <= {"fast", "dense", "f3", "ring", "direct", "oneshot"}):
        err("%s: auto picked %r" % (tag, r.get("picked")))
if "compress" in flags:
    # Gaussian data must compress at the largest size, for every collective.
    for coll in bus:
        big = [r for r in rows if r["coll"] == coll and r["strategy"] == "compressed"]
        if not big:
            continue
        top = max(big, key=lambda r: r["bytes"])
        if not top["ratio"] > (1.2 if dtype == "bf16" else 1.0):
            err("%s compressed at %d bytes: ratio %s" % (coll, top["bytes"], top["ratio"]))
if "strategies" in flags:
    got = {(r["coll"], r["strategy"]) for r in rows}
    want = {(c, s) for c in bus for s in ("native", "raw", "compressed", "auto")}
    if got != want:
        err("missing (coll, strategy) pairs: %s" % sorted(want - got))
print("; ".join(errs) if errs else "ok")
sys.exit(1 if errs else 0)
EOF

# 1. Every collective and strategy, bf16 Gaussian, 2 and 3 ranks.
for n in 2 3; do
  mpi "$n" "$BIN" -b 1K -e 256K -f 4 -n 2 -w 1 --json >"$tmp/np$n.out" 2>"$tmp/np$n.err"
  rc=$?
  check "bench_np${n}_exit0" "$rc" "exit $rc: $(tail -3 "$tmp/np$n.err" | tr '\n' ' ')"
  # 5 collectives x 5 sizes (1K 4K 16K 64K 256K) x 4 strategies
  msg=$(python3 "$tmp/validate.py" "$tmp/np$n.out" "$n" bf16 100 compress strategies)
  check "bench_np${n}_rows_valid_wrong0_ratio" $? "$msg"
  grep -q "^# hosts 0:" "$tmp/np$n.out"
  check "bench_np${n}_header" $? "no '# hosts' header line"
done
# The default order interleaves the strategies' timed calls; the counters and
# the check must still be per strategy (validate: raw ratio 1, compressed > 1.2).
[ "$(grep -c '"order":"interleaved"' "$tmp/np2.out")" = 100 ]
check bench_default_order_interleaved $? "rows do not all say order interleaved"
mpi 2 "$BIN" -b 16K -e 64K -f 4 -n 3 -w 1 --coll allgather,reducescatter --order sequential --json \
  >"$tmp/seq.out" 2>"$tmp/seq.err"
rc=$?
msg=$(python3 "$tmp/validate.py" "$tmp/seq.out" 2 bf16 16 compress); v=$?
[ "$(grep -c '"order":"sequential"' "$tmp/seq.out")" = 16 ]
check bench_order_sequential $((rc | v | $?)) "exit $rc: $msg $(tail -2 "$tmp/seq.err" | tr '\n' ' ')"
# --gap MS: every rank idles MS before each timed call. 2 strategies x 4
# timed calls of one size, 150 ms each, must take at least 1.2 s (the rows
# carry gap_ms; the results are still exact).
t0=$(date +%s.%N)
mpi 2 "$BIN" -b 16K -e 16K -n 4 -w 0 --coll allgather --strategy raw,compressed --gap 150 --json \
  >"$tmp/gap.out" 2>"$tmp/gap.err"
rc=$?
t1=$(date +%s.%N)
msg=$(python3 "$tmp/validate.py" "$tmp/gap.out" 2 bf16 2); v=$?
[ "$(grep -c '"gap_ms":150' "$tmp/gap.out")" = 2 ] && python3 -c "import sys; sys.exit(0 if $t1 - $t0 >= 1.2 else 1)"
check bench_gap_idles_before_calls $((rc | v | $?)) "exit $rc: $msg $(tail -2 "$tmp/gap.err" | tr '\n' ' ')"

# 2. Other dtypes, ops, codec and algorithm choices (3 ranks: uneven splits).
mpi 3 "$BIN" -b 4K -e 64K -f 4 -n 2 -w 0 -d fp32 -o avg --coll reducescatter,allreduce \
  --strategy raw,compressed --algo direct --codec dense --json >"$tmp/fp32.out" 2>"$tmp/fp32.err"
rc=$?
msg=$(python3 "$tmp/validate.py" "$tmp/fp32.out" 3 fp32 12); v=$?
check bench_fp32_avg_direct_dense $((rc | v)) "exit $rc: $msg $(tail -2 "$tmp/fp32.err" | tr '\n' ' ')"
grep -q '"algo":"direct"' "$tmp/fp32.out" && grep -q '"codec":"dense"' "$tmp/fp32.out"
check bench_reports_codec_algo $? "rows lack codec/algo"
# Codecs side by side in one run: each row names its own codec, all exact,
# and on Gaussian bf16 fast (F2) packs tighter than f3 (FORMAT.md §7).  An
# entry's own algorithm shows in its row, and an entry whose algorithm does
# not apply to a collective (the ring on AlltoAll) is skipped there.
mpi 2 "$BIN" -b 256K -e 256K -n 2 -w 1 --coll reducescatter,alltoall \
  --codec fast --strategy compressed,compressed:f3,compressed:dense,compressed:f3:ring --json \
  >"$tmp/codecs.out" 2>"$tmp/codecs.err"
rc=$?
msg=$(python3 "$tmp/validate.py" "$tmp/codecs.out" 2 bf16 7 compress); v=$?
python3 - "$tmp/codecs.out" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ok = True
for coll in ("reducescatter", "alltoall"):
    by = {r["codec"] + ("/" + r["algo"] if r["algo"] != "default" else ""): r for r in rows if r["coll"] == coll}
    want = {"fast", "f3", "dense"} | ({"f3/ring"} if coll == "reducescatter" else set())
    ok &= set(by) == want and by["fast"]["ratio"] > by["f3"]["ratio"] * 1.02
sys.exit(0 if ok else 1)
EOF
check bench_codec_entries $((rc | v | $?)) "exit $rc: $msg $(tail -2 "$tmp/codecs.err" | tr '\n' ' ')"
# The one-shot design beside the default one, on 3 ranks (so its n-1 sends
# per piece differ from a pairwise exchange): exact, named in its rows, and
# timed only where it applies (AllGather, AllReduce; not AlltoAll).
mpi 3 "$BIN" -b 4K -e 64K -f 16 -n 2 -w 0 --coll allgather,allreduce,alltoall \
  --strategy raw,raw:oneshot,compressed:oneshot --json >"$tmp/oneshot.out" 2>"$tmp/oneshot.err"
rc=$?
msg=$(python3 "$tmp/validate.py" "$tmp/oneshot.out" 3 bf16 14); v=$?
python3 - "$tmp/oneshot.out" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
one = [r for r in rows if r["algo"] == "oneshot"]
ok = len(one) == 8 and {r["coll"] for r in one} == {"allgather", "allreduce"}
ok &= all(r["wrong"] == 0 for r in one) and all(r["ratio"] > 1.2 for r in one if r["strategy"] == "compressed")
sys.exit(0 if ok else 1)
EOF
check bench_oneshot $((rc | v | $?)) "exit $rc: $msg $(tail -2 "$tmp/oneshot.err" | tr '\n' ' ')"
mpi 2 "$BIN" -b 16K -e 16K -n 2 -w 1 -d fp16 --coll alltoallv,allgather --json \
  >"$tmp/fp16.out" 2>"$tmp/fp16.err"
rc=$?
msg=$(python3 "$tmp/validate.py" "$tmp/fp16.out" 2 fp16 8); v=$?
check bench_fp16 $((rc | v)) "exit $rc: $msg $(tail -2 "$tmp/fp16.err" | tr '\n' ' ')"

# Device buffers (--device hostcoded: host memory standing in for a GPU,
# compressed calls coded in place), and over the host stand-in for a device
# network (--net host, the path of --net nccl): every collective and strategy
# exact on 3 ranks, the rows say where the buffers were (KEY=VALUE), the
# compressed COLL compresses (coded on the "device"), and the bus carries
# nothing over a network, and fewer bytes for compressed calls than raw
# ones (staged) without one.
device_rows() { # device_rows NAME KEY VALUE COLL [bench options...]
  local name=$1 key=$2 value=$3 coll=$4 rc v
  shift 4
  mpi 3 "$BIN" -b 64K -e 64K -n 2 -w 1 --json "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  rc=$?
  msg=$(python3 "$tmp/validate.py" "$tmp/$name.out" 3 bf16 20); v=$?
  python3 - "$tmp/$name.out" "$key" "$value" "$coll" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
key, value, coll = sys.argv[2:5]
ok = len(rows) == 20 and all(r.get(key) == value for r in rows)
ok &= any(r["coll"] == coll and r["strategy"] == "compressed" and r["ratio"] > 1.2 for r in rows)
# bus_bytes: over a network nothing crosses the bus; otherwise a compressed
# call moves only frames, fewer bytes than the raw call's staging
bus = {(r["coll"], r["strategy"]): r.get("bus_bytes") for r in rows}
if key == "net":
    ok &= all(b == 0 for b in bus.values())
else:
    ok &= all(bus[(c, "compressed")] < bus[(c, "raw")] for c in {r["coll"] for r in rows})
sys.exit(0 if ok else 1)
EOF
  check "$name" $((rc | v | $?)) "exit $rc: $msg $(tail -2 "$tmp/$name.err" | tr '\n' ' ')"
}
device_rows bench_device_hostcoded buffers hostcoded allgather --device hostcoded
device_rows bench_device_net_host net host alltoall --device hostcoded --net host
mpi 1 "$BIN" --net nccl -b 4K -e 4K >"$tmp/netbad.out" 2>&1
rc=$?
grep -q "needs --device cuda" "$tmp/netbad.out"
check bench_net_nccl_needs_cuda $(( (rc != 2) | $? )) "exit $rc: $(tail -2 "$tmp/netbad.out" | tr '\n' ' ')"

# 3. #wrong must see a corrupted element: one flipped bit on rank 0 per compressed row,
#    with one timed call per strategy and with three interleaved ones (the check
#    must read each strategy's own last result, not the next strategy's).
for iters in 1 3; do
  mpi 2 "$BIN" -b 4K -e 16K -f 4 -n $iters -w 0 --coll allgather,allreduce --strategy raw,compressed,auto \
    --json --inject-error >"$tmp/inj.out" 2>/dev/null
  rc=$?
  python3 - "$tmp/inj.out" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
bad = [r for r in rows if r["wrong"] != (1 if r["strategy"] == "compressed" else 0)]
sys.exit(1 if bad or len(rows) != 12 else 0)
EOF
  v=$?
  check bench_wrong_counts_injected_error_n$iters $v "rows: $(grep -c '^{' "$tmp/inj.out"), wrong column did not show exactly the flipped element"
  [ "$rc" = 1 ]
  check bench_wrong_gives_exit1_n$iters $? "exit code $rc, expected 1 when #wrong > 0"
done

# 4. Data from a file: a raw bf16 dump and the same values as .safetensors.
python3 - "$tmp" <<'EOF'
import json, random, struct, sys
random.seed(7)
def bf16(x):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16
vals = [bf16(random.gauss(0, 0.05)) for _ in range(50000)]
raw = struct.pack("<%dH" % len(vals), *vals)
open(sys.argv[1] + "/t.bf16", "wb").write(raw)
def st(name, dtype):
    hdr = json.dumps({"__metadata__": {"k": "v"},
                      "w": {"dtype": dtype, "shape": [len(vals)], "data_offsets": [0, len(raw)]}}).encode()
    open(sys.argv[1] + "/" + name, "wb").write(struct.pack("<Q", len(hdr)) + hdr + raw)
st("t.safetensors", "BF16")
st("bad.safetensors", "F32")
EOF
for f in t.bf16 t.safetensors; do
  mpi 2 "$BIN" -b 64K -e 64K -n 1 -w 0 --coll allgather,alltoall --strategy raw,compressed \
    --input "$tmp/$f" --json >"$tmp/in.out" 2>"$tmp/in.err"
  rc=$?
  msg=$(python3 "$tmp/validate.py" "$tmp/in.out" 2 bf16 4 compress); v=$?
  check "bench_input_${f#t.}" $((rc | v)) "exit $rc: $msg $(tail -2 "$tmp/in.err" | tr '\n' ' ')"
done

# 4b. auto's link bandwidth (the model's beta) is refined from raw calls large
#     enough for bytes to dominate their time; small raw calls, counted whole,
#     had taken it down ~10x.  400 raw and auto 64 KiB AlltoAlls on 2 ranks
#     (ZIPCCL_LOG=2 prints every refinement): the link the model ends with is
#     at least half of the one it started from.
mpi 2 -x ZIPCCL_LOG=2 "$BIN" -b 64K -e 64K -n 200 -w 0 --coll alltoall \
  --strategy raw,auto --json >"$tmp/beta.out" 2>"$tmp/beta.err"
rc=$?
msg=$(python3 - "$tmp/beta.err" <<'PYEOF'
import re, sys
text = open(sys.argv[1]).read()
first = re.search(r"link (\d+) MB/s", text)
refined = re.findall(r"model refined: link (\d+) MB/s", text)
if not first or not refined:
    print("no link estimate / refinement in the log"); sys.exit(1)
a, b = float(first.group(1)), float(refined[-1])
print("link %.0f MB/s at the start, %.0f MB/s after %d refinements" % (a, b, len(refined)))
sys.exit(0 if b >= 0.5 * a else 1)
PYEOF
)
v=$?
check auto_link_estimate_not_dragged_by_small_calls $((rc | v)) "exit $rc: $msg $(tail -2 "$tmp/beta.err" | tr '\n' ' ')"

# 4c. auto's upkeep inside its own calls stays rare where calls are small.
#     Pooling the observations (an MPI_Allreduce; "model refined" at
#     ZIPCCL_LOG=2) waits for 8 MiB of auto calls, at a multiple of 32 calls:
#     none in 1632 auto AllGathers of 2 KiB per rank (-b 4K on 2 ranks; every
#     32nd call pooled before), three in 112 of 512 KiB.  A re-measured pair
#     ("reprobe") follows the first one (bucket call 131) 64 bucket calls
#     after a pair that changed the incumbent, and at twice the spacing before
#     (from 64, at most 1024) after one that kept it: every gap is 64 or
#     double the one before, and 1632 calls hold fewer than 15 pairs (22 at a
#     fixed 64).
mpi 2 -x ZIPCCL_LOG=2 "$BIN" -b 4K -e 4K -n 1500 -w 0 --coll allgather --strategy auto \
  >/dev/null 2>"$tmp/upkeep.err"
rc=$?
mpi 2 -x ZIPCCL_LOG=2 "$BIN" -b 1M -e 1M -n 64 -w 0 --coll allgather --strategy auto \
  >/dev/null 2>"$tmp/upkeep1m.err"
rc=$((rc | $?))
msg=$(python3 - "$tmp/upkeep.err" "$tmp/upkeep1m.err" <<'PYEOF'
import re, sys
small, large = open(sys.argv[1]).read().splitlines(), open(sys.argv[2]).read()
errs = []
calls = sum("zipccl auto: AllGather" in l for l in small)
pooled = sum("model refined" in l for l in small)
if calls < 1600: errs.append("only %d auto decisions logged" % calls)
if pooled: errs.append("%d poolings in %d auto calls of 2 KiB per rank (want none before 8 MiB)" % (pooled, calls))
big = large.count("model refined")
if big < 2: errs.append("%d poolings in 112 auto 512 KiB calls (want 3)" % big)
probes = [int(re.search(r"bucket call (\d+)", small[i + 1]).group(1))
          for i, l in enumerate(small[:-1]) if "(reprobe;" in l]
starts = [c for c in probes if c - 1 not in probes]
gaps = [b - a for a, b in zip(starts, starts[1:])]
if not starts or starts[0] != 131: errs.append("first re-measured pair at bucket call %s (want 131)" % starts[:1])
for a, b in zip([64] + gaps, gaps):
    if b != 64 and b != min(2 * a, 1024): errs.append("pair gap %d after %d" % (b, a))
if len(starts) >= 15: errs.append("%d re-measured pairs" % len(starts))
print("; ".join(errs) if errs else "%d calls: %d poolings; pairs at %s; 512 KiB: %d poolings" % (calls, pooled, starts, big))
sys.exit(1 if errs else 0)
PYEOF
)
v=$?
echo "# upkeep: $msg"; check auto_upkeep_rare_for_small_calls $((rc | v)) "exit $rc: $msg $(tail -2 "$tmp/upkeep.err" | tr '\n' ' ')"

# 4e. Each re-measured pair holds a challenger against the incumbent: the
#     runner-up in pairs 0, 2, 4, ..., and in pairs 1, 3, ... each of the other
#     candidates in turn (the k-th, k = pair/2 mod (candidates - 2), in bucket
#     order, of those that are neither), so a design ranked third or lower
#     is measured again.  Read from ZIPCCL_LOG=1 on rank 0 over 4500 auto
#     AllGathers of 64 KiB per rank (eight pairs or more): the line of agreed
#     times printed with a pair's first call gives the incumbent and the
#     runner-up (pairs whose times tie to the log's 1 ns are not judged).
mpi 2 -x ZIPCCL_LOG=1 "$BIN" -b 128K -e 128K -n 4500 -w 0 --coll allgather --strategy auto \
  >/dev/null 2>"$tmp/pairs.err"
rc=$?
msg=$(python3 - "$tmp/pairs.err" <<'PYEOF'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
def design(d):  # the decision's strategy/codec/algo -> the measured line's name
    s, c, a = d.split("/")
    if s == "native": return "native"
    name = "raw" if s == "raw" else "compressed/" + c
    return name if a == "direct" else name + "/" + a
pairs = []  # (designs of the two calls, times at the pair's first call)
for i, l in enumerate(lines[:-1]):
    m = re.match(r"zipccl auto: AllGather \S+ \d+ KiB/rank n=\d+ -> (\S+) \(reprobe;", l)
    if not m: continue
    t = re.findall(r" ([\w/]+) ([\d.]+) ms x\d+", lines[i + 1])
    call = int(re.search(r"bucket call (\d+)", lines[i + 1]).group(1))
    if pairs and pairs[-1][2] == call - 1: pairs[-1][0].append(design(m.group(1)))
    else: pairs.append(([design(m.group(1))], [(n, float(x)) for n, x in t], call))
errs, judged, seen = [], 0, set()
for k, (ran, times, call) in enumerate(pairs):
    if len(ran) != 2: errs.append("pair %d at call %d ran %s" % (k, call, ran)); continue
    names = [n for n, _ in times]
    by = sorted(times, key=lambda x: x[1])
    first, second = by[0][0], by[1][0]
    challenger = [d for d in ran if d != first]
    seen.update(challenger)
    if len(by) > 2 and (by[1][1] - by[0][1] <= 1.1e-6 or by[2][1] - by[1][1] <= 1.1e-6): continue
    judged += 1
    others = [n for n in names if n not in (first, second)]
    want = second if k % 2 == 0 or not others else others[(k // 2) % len(others)]
    if challenger != [want]: errs.append("pair %d (call %d): ran %s, incumbent %s, want %s against it" % (k, call, ran, first, want))
if len(pairs) < 6: errs.append("%d re-measured pairs in 4500 calls" % len(pairs))
if judged < 3: errs.append("only %d pairs without ties" % judged)
if len(seen) < 3: errs.append("challengers %s" % sorted(seen))
print("; ".join(errs) if errs else "%d pairs (%d judged), challengers %s" % (len(pairs), judged, sorted(seen)))
sys.exit(1 if errs else 0)
PYEOF
)
v=$?
echo "# pairs: $msg"; check auto_pairs_challenge_every_candidate $((rc | v)) "exit $rc: $msg $(tail -2 "$tmp/pairs.err" | tr '\n' ' ')"

# 4d. Close contenders (comm/tune/switcher.c): once a bucket's candidates have their
#     runs (7 per design from 128 KiB, 5 from 1 MiB), those whose agreed time
#     is within ZIPCCL_AUTO_CONTEND percent (10 by default) of the fastest,
#     the fastest included, get as many runs again, when there are two or
#     more of them.  Read from ZIPCCL_LOG=1 on rank 0: the bucket's first
#     line of agreed times names the contenders (recomputed here from those
#     times), a "close contenders" line must precede it exactly when there
#     are two or more, and the first re-measured pair's first line shows
#     twice the runs for them and the first count for the others.  With
#     the margin at 1000% every candidate contends, so the bench must make
#     more than zipcclAutoWarmupCalls warm-up calls (zipcclAutoSettled): its
#     timed auto calls then run one design each ("picked" names one).
for margin in 10 1000; do
  mpi 2 -x ZIPCCL_LOG=1 -x ZIPCCL_AUTO_CONTEND=$margin "$BIN" -b 256K -e 1M -f 4 -n 6 \
    --coll allgather,reducescatter,alltoall --strategy auto --json >"$tmp/contend.out" 2>"$tmp/contend.err"
  rc=$?
  msg=$(python3 - "$tmp/contend.err" "$tmp/contend.out" $margin <<'PYEOF'
import json, re, sys
lines = open(sys.argv[1]).read().splitlines()
rows = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
margin = int(sys.argv[3]) / 100
errs, raced, seen = [], 0, 0
buckets = {}  # bucket -> list of (kind, payload) in log order
cur = None
for l in lines:
    m = re.match(r"zipccl auto: (\w+) (\w+) (\d+) KiB/rank n=\d+ -> \S+ \((\w+);", l)
    if m:
        cur = m.group(1, 2, 3)
        buckets.setdefault(cur, []).append(("decide", m.group(4)))
    elif cur and l.startswith("zipccl auto: measured"):
        cands = re.findall(r" ([\w/]+) ([\d.]+) ms( on rank 0)? x(\d+)", l)
        buckets[cur].append(("measured", [(n, float(t), bool(r), int(x)) for n, t, r, x in cands],
                             "unmeasured" in l))
    elif cur and l.startswith("zipccl auto: close contenders"):
        buckets[cur].append(("contend", set(re.findall(r" ([a-z][\w/]*) [\d.]+", l.split("):", 1)[1])),
                             int(re.search(r"; (\d+) runs each", l).group(1))))
for key, ev in buckets.items():
    meas = [e for e in ev if e[0] == "measured"]
    agreed = [i for i, e in enumerate(ev) if e[0] == "measured" and not e[2] and not any(c[2] for c in e[1])]
    if not agreed:
        continue
    seen += 1
    first = ev[agreed[0]][1]
    target = first[0][3]
    best = min(t for _, t, _, _ in first)
    tol = 5e-7 * (2 + margin)  # the log rounds every time to 1 ns
    close = {n for n, t, _, _ in first if t <= (1 + margin) * best + tol}
    sure = {n for n, t, _, _ in first if t <= (1 + margin) * best - tol}
    told = [e for e in ev[:agreed[0]] if e[0] == "contend"]
    if len(sure) >= 2 and not told and target < 21:
        errs.append("%s: %s within %d%% of the fastest, no contenders line" % (" ".join(key), sorted(sure), margin * 100))
    if told:
        raced += 1
        named, runs = told[-1][1], told[-1][2]
        if not (sure <= named <= close) or len(named) < 2 or runs != 2 * target:
            errs.append("%s: contenders %s (%d runs), times say %s" % (" ".join(key), sorted(named), runs, sorted(close)))
        probe = next((i for i, e in enumerate(ev) if e[0] == "decide" and e[1] == "reprobe"), None)
        if probe is None:
            errs.append("%s: no re-measured pair" % " ".join(key))
            continue
        last = ev[probe + 1][1]  # the pair's first call: every exploration run is in
        got = {n: x for n, _, _, x in last}
        want = {n: (runs if n in named else target) for n in got}
        if got != want:
            errs.append("%s: runs before the first pair %s, want %s" % (" ".join(key), got, want))
for r in rows:
    if "+" in r.get("picked", "+"):
        errs.append("%s %d: timed auto calls picked %s" % (r["coll"], r["bytes"], r.get("picked")))
if len(rows) != 6 or seen < 6:
    errs.append("%d rows, %d buckets with agreed times" % (len(rows), seen))
if margin > 1 and raced < seen:
    errs.append("%d of %d buckets had contenders at %d%%" % (raced, seen, margin * 100))
print("; ".join(errs) if errs else "%d buckets, %d with contenders" % (seen, raced))
sys.exit(1 if errs else 0)
PYEOF
)
  v=$?
  echo "# contenders at ${margin}%: $msg"
  check auto_close_contenders_${margin}pct $((rc | v)) "exit $rc: $msg $(tail -2 "$tmp/contend.err" | tr '\n' ' ')"
done

# 5. Bad arguments: exit code 2 and a message naming the problem, also under mpirun.
bad_case() { # bad_case NAME EXPECTED_WORD ARGS...
  local name=$1 word=$2; shift 2
  local out rc
  out=$("$BIN" "$@" 2>&1); rc=$?
  if [ "$rc" = 2 ] && printf '%s' "$out" | grep -qi -- "$word"; then pass "badarg_$name"
  else fail "badarg_$name" "exit $rc, output: $(printf '%s' "$out" | head -2 | tr '\n' ' ')"; fi
}
bad_case unknown_flag "unknown option" --frobnicate
bad_case bad_size "bad size" -b 12Q
bad_case min_gt_max "larger" -b 1M -e 1K
bad_case bad_coll "unknown collective" --coll allgather,broadcast
bad_case bad_strategy "unknown strategy" --strategy fastest
bad_case bad_gap "bad gap" --gap -5
bad_case bad_dtype "bad dtype" -d int8
bad_case bad_iters "iteration" -n 0
bad_case bad_factor "step factor" -f 1
bad_case bad_order "bad order" --order random
bad_case codec_on_raw "only compressed takes a codec" --strategy raw:f3
bad_case unknown_codec_entry "unknown algorithm or codec" --strategy compressed:zstd
bad_case missing_value "needs a value" -e
bad_case missing_input "cannot open" --input "$tmp/nonexistent.bin"
bad_case input_dtype_mismatch "dtype" --input "$tmp/bad.safetensors"
out=$(mpi 2 "$BIN" --coll nope 2>&1); rc=$?
[ "$rc" = 2 ] && [ "$(printf '%s' "$out" | grep -c 'unknown collective')" = 1 ]
check badarg_under_mpirun_once $? "exit $rc; expected 2 and one message: $(printf '%s' "$out" | head -3 | tr '\n' ' ')"
"$BIN" --help | grep -q "ReduceScatter, the whole input"
check help_documents_bytes $? "--help does not explain 'bytes'"
exit 0
