# test: timeout=120
# test_codec_bench.sh — zipccl-codec-bench as a user meets it: flags, JSON, inputs.
#
# Runs the benchmark in --quick mode on small inputs and checks its JSON lines
# with Python's json module: required keys and types, the bench's own
# arithmetic (ratio = bytes / compressed_bytes, memcpy ratio 1), the Gaussian
# generator (the measured exponent-entropy bound must match the Gaussian
# model's 1.517 / 1.181 / 1.206 for bf16 / fp16 / fp32 at sigma 1), the fast
# codec's ratio on bf16 (> 1.3), --input on a .safetensors file and on a raw
# file (bound recomputed independently in Python from the file's bytes), and
# that bad usage exits with status 2 and a message.
set -u
BUILD=${BUILD:-build}
BENCH=$BUILD/zipccl-codec-bench
tmp=$(mktemp -d /tmp/test_codec_bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }
# a Python block that raised stopped its remaining checks: that is a failure
pyblock_done() { # pyblock_done RC NAME
  [ "$1" -eq 0 ] || fail "$2" "the Python checks stopped with exit status $1 (traceback above)"
}

if [ ! -x "$BENCH" ]; then
  fail bench_built "$BENCH is missing (make BUILD=$BUILD $BENCH)"
  exit 1
fi

# 1. Synthetic inputs, every dtype, all SIMD paths and the checksum variants.
"$BENCH" --quick -s 256K --all-paths --checksum --json >"$tmp/synth.jsonl" 2>"$tmp/synth.err"
rc=$?
if [ $rc -eq 0 ]; then pass synthetic_exit_0; else fail synthetic_exit_0 "exit $rc: $(tail -3 "$tmp/synth.err")"; fi
grep -q '^# machine: ' "$tmp/synth.err" && grep -q '^# zipccl-codec-bench  20' "$tmp/synth.err" \
  && pass header_machine_and_date || fail header_machine_and_date "no '# machine:' / date line on stderr"

python3 - "$tmp/synth.jsonl" <<'EOF'
import json, math, sys
def check(ok, name, why=""):
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}")
rows, bad = [], []
for i, line in enumerate(open(sys.argv[1])):
    try:
        rows.append(json.loads(line))
    except ValueError as e:
        bad.append(f"line {i + 1}: {e}: {line[:80]!r}")
check(rows and not bad, "json_lines_parse", "; ".join(bad[:3]) or "no lines")
required = {"codec": str, "dtype": str, "dist": str, "bytes": int, "ratio": float,
            "compress_gbps": float, "decompress_gbps": float, "bound": float}
missing = [r for r in rows if "sigma" not in r or any(
    not isinstance(r.get(k), t) and not (t is float and isinstance(r.get(k), int))
    for k, t in required.items())]
check(rows and not missing, "json_required_keys", f"{len(missing)} rows lack keys, e.g. {missing[:1]}")
check(all((r["sigma"] is None) == (r["dist"] != "gauss") for r in rows), "json_sigma_null_iff_not_gauss")
codecs = {r["codec"] for r in rows}
want = {"memcpy", "zstd-1", "zstd-1-bg", "lz4", "zipccl-fast", "zipccl-dense",
        "zipccl-fast-ck", "zipccl-dense-ck"}
check(want <= codecs and "zstd-19" not in codecs, "codecs_present_quick_skips_zstd19", f"{sorted(codecs)}")
combos = {(r["dtype"], r["dist"], r["sigma"]) for r in rows}
check(len(combos) == 3 * 6, "inputs_all_dtypes_sigmas_random", f"{len(combos)} inputs")
check(all(r["bytes"] == 262144 for r in rows), "size_flag_honoured", "bytes differ from 256K")
arith = [r for r in rows if abs(r["ratio"] - r["bytes"] / r["compressed_bytes"]) > 1e-4 * r["ratio"]
         or (r["codec"] == "memcpy" and r["ratio"] != 1.0)
         or not (r["compress_gbps"] > 0 and r["decompress_gbps"] > 0)]
check(not arith, "ratio_arithmetic", f"{arith[:1]}")
paths = {r["path"] for r in rows if r["codec"] == "zipccl-fast"}
check("scalar" in paths, "all_paths_include_scalar", f"{paths}")
model = {"bf16": 16 / (8 + 2.545), "fp16": 16 / (11 + 2.545), "fp32": 32 / (24 + 2.545)}
for dt, b in model.items():
    got = [r["bound"] for r in rows if r["dtype"] == dt and r["sigma"] == 1 and r["codec"] == "memcpy"]
    check(got and abs(got[0] - b) < 0.01, f"gauss_bound_{dt}_matches_model", f"{got} vs {b:.4f}")
rnd = [r["bound"] for r in rows if r["dist"] == "random" and r["codec"] == "memcpy"]
check(rnd and all(abs(b - 1) < 0.02 for b in rnd), "random_bound_near_1", f"{rnd}")
fast = [r["ratio"] for r in rows if r["codec"] == "zipccl-fast" and r["dtype"] == "bf16"
        and r["sigma"] == 1]
check(fast and min(fast) > 1.3, "zipccl_fast_bf16_sigma1_ratio_gt_1.3", f"{fast}")
# No exponent-only coder can beat the entropy of the exponents it codes.
above = [r for r in rows if r["codec"].startswith("zipccl") and r["ratio"] > r["bound"] + 1e-3]
check(not above, "zipccl_ratio_not_above_bound", f"{above[:1]}")
EOF
pyblock_done $? python_block_1

# 2. Real tensors: a .safetensors file with bf16, fp16, fp32 and an int tensor.
python3 - "$tmp" <<'EOF'
import json, struct, sys
import numpy as np
tmp = sys.argv[1]
rng = np.random.default_rng(3)
f32 = (rng.standard_normal(50000) * 0.02).astype(np.float32)
bf16 = (f32.view(np.uint32) + 0x7FFF + ((f32.view(np.uint32) >> 16) & 1)) >> 16
tensors = {"layer.0.w_bf16": ("BF16", bf16.astype(np.uint16).tobytes(), [50000]),
           "layer.0.act_f16": ("F16", (rng.standard_normal(30000)).astype(np.float16).tobytes(), [100, 300]),
           "layer.0.grad_f32": ("F32", (rng.standard_normal(20000) * 1e-3).astype(np.float32).tobytes(), [20000]),
           "step": ("I64", np.array([7], np.int64).tobytes(), [1])}
hdr, data, off = {}, b"", 0
for k, (dt, b, shape) in tensors.items():
    hdr[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
    data += b; off += len(b)
h = json.dumps(hdr).encode()
open(f"{tmp}/t.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + data)
open(f"{tmp}/raw.bin", "wb").write(f32.tobytes())
EOF
pyblock_done $? python_block_2
"$BENCH" --quick -c zipccl-fast,zstd-1-bg,memcpy --input "$tmp/t.safetensors" --json \
  >"$tmp/st.jsonl" 2>"$tmp/st.err"
rc=$?
"$BENCH" --quick --clock cpu -c memcpy,zipccl-dense --input "$tmp/raw.bin" --dtype fp32 --json \
  >"$tmp/raw.jsonl" 2>"$tmp/raw.err"
rc2=$?
python3 - "$tmp" $rc $rc2 <<'EOF'
import json, math, sys
import numpy as np
tmp, rc, rc2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def check(ok, name, why=""):
    print(f"PASS {name}" if ok else f"FAIL {name}: {why}")
def load(p):
    try:
        return [json.loads(l) for l in open(p)]
    except ValueError as e:
        return str(e)
rows = load(f"{tmp}/st.jsonl")
ok = rc == 0 and isinstance(rows, list)
names = {(r["name"], r["dtype"], r["dist"], r["sigma"]) for r in rows} if ok else set()
want = {("layer.0.w_bf16", "bf16", "file", None), ("layer.0.act_f16", "fp16", "file", None),
        ("layer.0.grad_f32", "fp32", "file", None)}
check(ok and names == want and len(rows) == 9, "input_safetensors_each_float_tensor",
      f"rc={rc} {rows if not ok else sorted(names)} {open(f'{tmp}/st.err').read()[-300:]}")
err = open(f"{tmp}/st.err").read()
check("step" in err and "skipped" in err, "input_safetensors_int_tensor_skipped", err[-200:])

def bound(bits, ebits, exps):
    _, counts = np.unique(exps, return_counts=True)
    p = counts / counts.sum()
    return bits / (bits - ebits + float(-(p * np.log2(p)).sum()))
raw = np.fromfile(f"{tmp}/raw.bin", dtype=np.uint32)
ref = bound(32, 8, (raw >> 23) & 0xFF)
rows = load(f"{tmp}/raw.jsonl")
ok = rc2 == 0 and isinstance(rows, list) and len(rows) == 2
check(ok and all(r["name"] == "raw.bin" and r["bytes"] == raw.nbytes and r["clock"] == "cpu"
                 and abs(r["bound"] - ref) < 1e-4 for r in rows),
      "input_raw_bound_matches_python", f"rc={rc2} rows={rows} python bound {ref:.6f}")
EOF
pyblock_done $? python_block_3

# 3. Bad usage: exit status 2 and a message naming the problem.
bad_usage() { # LABEL EXPECT ARGS...
  local label=$1 expect=$2; shift 2
  "$BENCH" "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
  local rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$expect" "$tmp/bad.err"; then pass "$label"
  else fail "$label" "exit $rc, stderr: $(head -c 200 "$tmp/bad.err")"; fi
}
bad_usage bad_flag_exit_2 "--no-such-flag" --no-such-flag
bad_usage bad_iters_exit_2 "-n" -n 0
bad_usage bad_size_exit_2 "size" -s 12Q
bad_usage bad_dtype_exit_2 "fp8" -d fp8
bad_usage bad_codec_exit_2 "zstd-99" -c zstd-99
bad_usage missing_value_exit_2 "needs a value" -s
bad_usage raw_input_needs_dtype_exit_2 "--dtype" --input "$tmp/raw.bin"
bad_usage zstd19_with_quick_exit_2 "zstd-19" --quick -c zstd-19
bad_usage bad_clock_exit_2 "--clock" --clock sundial

"$BENCH" --help >"$tmp/help.out" 2>&1
rc=$?
missing=""
for f in --sizes --dtypes --dists --sigmas --seed --input --dtype --codecs --checksum --all-paths \
         --iters --warmup --max-time --clock --quick --json --help; do
  grep -q -- "$f" "$tmp/help.out" || missing="$missing $f"
done
if [ $rc -eq 0 ] && [ -z "$missing" ]; then pass help_documents_flags
else fail help_documents_flags "exit $rc, undocumented:$missing"; fi

# A file that is not a valid safetensors file is a clean error (exit 1), not a crash.
printf 'garbage' >"$tmp/broken.safetensors"
"$BENCH" --quick --input "$tmp/broken.safetensors" >/dev/null 2>"$tmp/broken.err"
rc=$?
if [ $rc -eq 1 ] && grep -q "too short" "$tmp/broken.err"; then pass broken_input_clean_error
else fail broken_input_clean_error "exit $rc: $(head -c 200 "$tmp/broken.err")"; fi
exit $((fails > 0))
