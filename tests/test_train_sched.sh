#!/usr/bin/env bash
# test: asan=no timeout=600
# test_train_sched.sh — the overlap scheduler (runtime/scheduler.c) and the
# per-layer communication plan (runtime/plan.c), end to end.
#   (a) overlap is numerically neutral: with overlap on (prefetch depth 0, 1
#       and 3, the tightest in-flight bound, units kept gathered between
#       forward and backward) every step's loss, grad norm, lr and the final
#       parameter hash equal the run with overlap off, bit for bit, dense at
#       1, 2 and 4 ranks with 2 micro-batches (bf16 gathers, fp32 and bf16
#       reductions; at 4 ranks depth 1 only, the rest with
#       ZIPCCL_TEST_LONG=1), and MoE with expert
#       parallelism at 2 and 4 ranks, and with the expert exchange in chunks
#       (moe.overlap_chunks 3, 4 and 7, and 2 with ZIPCCL_TEST_LONG=1; EP 1, 2
#       and 4; fp32 and bf16 rows; dropless and with a capacity factor), and the trace shows the chunk pipeline:
#       chunk c+1's dispatch issued before chunk c's combine with overlap,
#       after it without; a model deviating from the plan (chunks out of
#       order or missing) is stopped by the executor's checks;
#   (b) a per-layer plan mixing raw, native and compressed, the dense codec
#       and a ring reduce-scatter equals the plain compressed run bit for
#       bit, and its end-of-run table shows each unit ran what it planned;
#   (c) overlap happens: with depth 1 the trace shows every block's forward
#       gather issued before the previous block's compute ended, with overlap
#       off none (so (a) would fail to mean anything if prefetch did nothing);
#   (d) --trace writes Chrome trace-event JSON with a compute track per rank
#       and a track per communicator, scripts/plot_trace.py draws a step, and
#       the JSON log has exposed time per kind and the overlap fraction;
#   (e) bad input is refused before any step, exit 2, naming the key: a
#       negative prefetch depth, a bound below what the step needs, a rule
#       matching no unit, an unknown kind, codec or algorithm, an algorithm
#       of another kind.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh

scripts/prepare_data.sh "$tmp/corpus.txt" >/dev/null || { echo "FAIL train_sched: no corpus"; exit 1; }
cat >"$tmp/tiny.yaml" <<YAML
model: {vocab_size: 256, dim: 32, n_layers: 3, n_heads: 4, n_kv_heads: 2, ffn_hidden: 64,
        max_seq_len: 32, rope_theta: 10000, norm_eps: 1.0e-5, tie_embeddings: false}
data: {path: $tmp/corpus.txt, tokenizer: byte, seq_len: 32, batch_size: 2, grad_accum: 2,
       val_fraction: 0.05, val_every: 3, val_batches: 1, seed: 7}
train: {steps: 6, seed: 3}
optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, weight_decay: 0.1, grad_clip: 1.0}
schedule: {warmup_steps: 2}
comm: {strategy: compressed, param_dtype: bf16, reduce_dtype: fp32}
YAML
cat >"$tmp/moe.yaml" <<YAML
model: {vocab_size: 256, dim: 32, n_layers: 3, n_heads: 4, n_kv_heads: 2, head_dim: 8,
        qk_norm: true, ffn_hidden: 64, n_experts: 4, n_experts_per_tok: 2, moe_ffn_hidden: 32,
        decoder_sparse_step: 1, mlp_only_layers: [0], norm_topk_prob: true,
        router_aux_loss_coef: 0.01, max_seq_len: 32, rope_theta: 10000, norm_eps: 1.0e-6,
        tie_embeddings: true}
data: {path: $tmp/corpus.txt, tokenizer: byte, seq_len: 32, batch_size: 2, grad_accum: 2,
       val_fraction: 0.05, val_every: 0, seed: 7}
train: {steps: 6, seed: 3}
optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, weight_decay: 0.1, grad_clip: 1.0}
schedule: {warmup_steps: 2}
parallelism: {ep: 2}
comm: {strategy: compressed, param_dtype: bf16, reduce_dtype: fp32}
YAML

run() { # run NP YAML OUT [args...]
  local np=$1 y=$2 out=$3; shift 3
  if [ "$np" = 1 ]; then "$TRAIN" "$y" --log-json "$out" "$@" >"$out.log" 2>&1
  else mpirun --oversubscribe --bind-to none -n "$np" "$TRAIN" "$y" --log-json "$out" "$@" >"$out.log" 2>&1; fi
  local rc=$?
  [ $rc -eq 0 ] || { echo "--- $out.log (exit $rc)"; tail -5 "$out.log"; }
  return $rc
}
same() { python3 tests/compare_runs.py "$1" "$2" exact --same-steps; }
# neutral NAME NP YAML REF_OUT [--set ...]: the run equals REF bit for bit
neutral() {
  local name=$1 np=$2 y=$3 ref=$4; shift 4
  local out="$tmp/$name.jsonl"
  if run "$np" "$y" "$out" "$@"; then
    why=$(same "$ref" "$out") && pass "$name" || fail "$name" "$why"
  else fail "$name" "run failed"; fi
}
[ -x "$TRAIN" ] || { echo "FAIL train_sched: $TRAIN not built"; exit 1; }

# (a) dense
for np in 1 2 4; do
  b=$((4 / np))
  for red in fp32 bf16; do
    ref="$tmp/off_${np}_$red.jsonl"
    if ! run "$np" "$tmp/tiny.yaml" "$ref" --set data.batch_size=$b --set comm.reduce_dtype=$red \
         --set parallelism.overlap=false; then fail "overlap_off_np${np}_$red" "run failed"; continue; fi
    neutral "depth1_np${np}_$red" "$np" "$tmp/tiny.yaml" "$ref" --set data.batch_size=$b --set comm.reduce_dtype=$red
    [ "$np" = 1 ] && continue
    # the suite's time: at 4 ranks depth 1 only (the rest at 2 ranks, and at
    # 4 with ZIPCCL_TEST_LONG=1)
    [ "$np" = 4 ] && [ -z "${ZIPCCL_TEST_LONG:-}" ] && continue
    neutral "depth3_np${np}_$red" "$np" "$tmp/tiny.yaml" "$ref" --set data.batch_size=$b \
      --set comm.reduce_dtype=$red --set parallelism.prefetch_depth=3
    if [ "$np" = 2 ]; then # the reduce-scatter count bound: tightest, and none (retired at the end)
      neutral "reduces_in_flight1_np${np}_$red" "$np" "$tmp/tiny.yaml" "$ref" --set data.batch_size=$b \
        --set comm.reduce_dtype=$red --set parallelism.max_reduces_in_flight=1
      neutral "reduces_unbounded_np${np}_$red" "$np" "$tmp/tiny.yaml" "$ref" --set data.batch_size=$b \
        --set comm.reduce_dtype=$red --set parallelism.max_reduces_in_flight=0
    fi
    neutral "depth0_keep_gathered_np${np}_$red" "$np" "$tmp/tiny.yaml" "$ref" --set data.batch_size=$b \
      --set comm.reduce_dtype=$red --set parallelism.prefetch_depth=0 \
      --set parallelism.reshard_after_forward=false
    # the tightest bound the step allows: the floor the refusal below names
    floor=$(run "$np" "$tmp/tiny.yaml" "$tmp/x.jsonl" --set data.batch_size=$b --set comm.reduce_dtype=$red \
              --set parallelism.max_inflight_bytes=1 >/dev/null 2>&1; \
            sed -n 's/.*is below the \([0-9]*\) bytes.*/\1/p' "$tmp/x.jsonl.log" | head -1)
    bytes=${floor:-0}
    if [ "$bytes" -gt 0 ]; then
      neutral "tight_bound_depth2_np${np}_$red" "$np" "$tmp/tiny.yaml" "$ref" --set data.batch_size=$b \
        --set comm.reduce_dtype=$red --set parallelism.prefetch_depth=2 \
        --set parallelism.max_inflight_bytes=$bytes
    else fail "tight_bound_depth2_np${np}_$red" "no floor in: $(tail -2 "$tmp/x.jsonl.log")"; fi
  done
done

# (a) MoE with expert parallelism
for np in 2 4; do
  ref="$tmp/moe_off_$np.jsonl"
  if run "$np" "$tmp/moe.yaml" "$ref" --set parallelism.overlap=false; then
    neutral "moe_ep2_depth2_np$np" "$np" "$tmp/moe.yaml" "$ref" --set parallelism.prefetch_depth=2
  else fail "moe_overlap_off_np$np" "run failed"; fi
done

# (a) MoE with the expert exchange in chunks (moe.overlap_chunks): overlap on
# (every chunk's dispatch in flight while the experts compute) == overlap off
# (each chunk's exchange waited at issue), bit for bit; EP 1 on 1 rank (no
# exchange: nothing to chunk), EP 2 on 2 ranks, EP 2 and 4 on 4 ranks, fp32
# and bf16 rows, dropless and with a capacity factor, 3 to 7 chunks (7: some
# chunks of a pair empty)
ref="$tmp/moe1_off.jsonl"
if run 1 "$tmp/moe.yaml" "$ref" --set parallelism.ep=1 --set data.batch_size=4 --set parallelism.overlap=false; then
  neutral "moe_ep1_np1" 1 "$tmp/moe.yaml" "$ref" --set parallelism.ep=1 --set data.batch_size=4
else fail "moe_ep1_np1_off" "run failed"; fi
# (the suite's time: 2 chunks at EP 2 and 4 in the long run only)
cfgs=("2 2 7 fp32 0" "4 2 3 bf16 0" "4 4 4 fp32 1.0")
[ -n "${ZIPCCL_TEST_LONG:-}" ] && cfgs+=("2 2 2 fp32 0" "4 4 2 fp32 0")
for cfg in "${cfgs[@]}"; do
  set -- $cfg
  np=$1 ep=$2 nc=$3 dt=$4 cf=$5 b=$((4 / $1))
  name="moe_chunks${nc}_np${np}_ep${ep}_$dt$([ "$cf" != 0 ] && echo _cf$cf)"
  args=(--set parallelism.ep=$ep --set data.batch_size=$b --set moe.overlap_chunks=$nc
        --set comm.alltoall_dtype=$dt)
  # with drops a rank left few rows sends chunks too small to shrink (frame
  # overhead): the compression check lets a step of under 64 KiB through
  [ "$cf" != 0 ] && args+=(--set model.capacity_factor=$cf)
  ref="$tmp/${name}_off.jsonl"
  if run "$np" "$tmp/moe.yaml" "$ref" "${args[@]}" --set parallelism.overlap=false; then
    neutral "$name" "$np" "$tmp/moe.yaml" "$ref" "${args[@]}"
  else fail "${name}_off" "run failed"; fi
done
# ZRT_EP_SYNC=1 (the benchmarks' barrier before every dispatch and combine,
# runtime/expert.h) changes no bit either: chunks 2, 4 ranks, EP 4, overlap on
# against the chunked reference with overlap off
ref="$tmp/moe_chunks4_np4_ep4_fp32_cf1.0_off.jsonl"
ZRT_EP_SYNC=1 neutral moe_ep_sync_barriers_np4_ep4 4 "$tmp/moe.yaml" "$ref" --set parallelism.ep=4 \
  --set data.batch_size=1 --set moe.overlap_chunks=4 --set comm.alltoall_dtype=fp32 \
  --set model.capacity_factor=1.0
# the capacity case dropped pairs (so it tested the drops, not a no-op)
name="moe_chunks_capacity_drops_pairs"
if python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if "\"final\"" not in l]; sys.exit(0 if r and r[0].get("dropped_pairs",0)>0 else 1)' \
     "$tmp/moe_chunks4_np4_ep4_fp32_cf1.0.jsonl" 2>/dev/null; then pass "$name"
else fail "$name" "no pairs dropped at capacity_factor 1.0"; fi

# (a) the chunk pipeline happens: with overlap the trace has every chunk's
# call on comm_a2a, each way, and chunk c+1's dispatch issued before chunk
# c's combine; without overlap after it (so the test above compares two
# different schedules, not one)
name="trace_shows_chunked_a2a_pipeline"
targs=(--set parallelism.ep=2 --set data.batch_size=2 --set moe.overlap_chunks=3)
if run 2 "$tmp/moe.yaml" "$tmp/xt1.jsonl" "${targs[@]}" --trace "$tmp/xon.json" &&
   run 2 "$tmp/moe.yaml" "$tmp/xt0.jsonl" "${targs[@]}" --set parallelism.overlap=false --trace "$tmp/xoff.json"; then
  why=$(python3 - "$tmp/xon.json" "$tmp/xoff.json" <<'PY'
import json, sys
def calls(path):
    ev = json.load(open(path))["traceEvents"]
    tid = {e["tid"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"] == "comm_a2a"}
    assert tid, "no comm_a2a track"
    return [e for e in ev if e["ph"] == "X" and e.get("cat") == "alltoall" and e["tid"] in tid and e["pid"] == 0]
def ahead(path):
    c = calls(path)
    names = {e["name"].split(" layers")[0] for e in c}
    want = {f"{w} c{i}" for w in ("dispatch", "combine", "dispatch_grad", "combine_grad") for i in range(3)}
    assert want <= names, f"calls {sorted(names)}"
    n = hits = 0
    for e in c:
        w, ch = e["name"].split(" layers")[0].rsplit(" c", 1)
        if not w.startswith("dispatch") or ch == "0": continue
        unit, micro = e["args"]["unit"], e["args"]["micro"]
        back = "combine" + w[len("dispatch"):] + f" c{int(ch) - 1}"
        prev = [p for p in c if p["name"].startswith(back + " ") and p["args"]["unit"] == unit and p["args"]["micro"] == micro
                and p["args"]["issued_us"] <= e["args"]["issued_us"] + 1e9]
        # the combine of the chunk before, in the same block pass: the nearest one after the previous dispatch
        prev = [p for p in prev if abs(p["args"]["issued_us"] - e["args"]["issued_us"]) < 1e6]
        if not prev: continue
        p = min(prev, key=lambda p: abs(p["args"]["issued_us"] - e["args"]["issued_us"]))
        n += 1; hits += e["args"]["issued_us"] < p["args"]["issued_us"]
    return n, hits
n1, h1 = ahead(sys.argv[1]); n0, h0 = ahead(sys.argv[2])
print(f"overlap on: {h1} of {n1} chunk dispatches issued before the previous chunk's combine; off: {h0} of {n0}")
sys.exit(0 if n1 > 0 and h1 == n1 and n0 > 0 and h0 == 0 else 1)
PY
) && pass "$name" || fail "$name" "$why"
else fail "$name" "run failed"; fi

# (d) the executor stops a model whose hook calls leave the plan (a chunk
# waited out of order, a chunk's combine_send skipped, combine before any
# chunk): tests/test_sched_exec.c runs the real model through deviating hooks
for dev in "swap:dispatch_wait(layers.0, chunk 1) where the plan has chunk 0" \
           "skip:where the plan has combine_send" "early:called combine(0, phase 0) where the plan has dispatch_wait"; do
  mode=${dev%%:*} want=${dev#*:}
  name="deviating_model_stopped_$mode"
  mpirun --oversubscribe --bind-to none -n 2 "$BUILD/tests/test_sched_exec" "$mode" >"$tmp/dev.log" 2>&1; rc=$?
  if [ $rc -ne 0 ] && grep -q "^FATAL (rank [01]) runtime/scheduler.c" "$tmp/dev.log" && grep -qF -- "$want" "$tmp/dev.log" &&
     ! grep -q "not_caught" "$tmp/dev.log"; then pass "$name"
  else fail "$name" "exit $rc: $(grep -m2 'FATAL\|FAIL' "$tmp/dev.log")"; fi
done

# (b) a mixed per-layer plan == the plain compressed run (depth 1, fp32 reduce)
sed 's/^comm: .*/comm: {strategy: compressed, param_dtype: bf16, reduce_dtype: fp32, reducescatter: raw,\
       overrides: [{pattern: "outer", strategy: native}, {pattern: "layers.1", strategy: compressed, kind: reducescatter}, {pattern: "layers.1", kind: allgather, codec: dense},\
                   {pattern: "layers.0", kind: reducescatter, algo: ring}, {pattern: "layers.2", kind: allgather, strategy: raw}]}/' "$tmp/tiny.yaml" >"$tmp/mix.yaml"
name="mixed_plan_equals_compressed_np2"
if run 2 "$tmp/mix.yaml" "$tmp/mix.jsonl" --set data.batch_size=2; then
  why=$(same "$tmp/depth1_np2_fp32.jsonl" "$tmp/mix.jsonl") && pass "$name" || fail "$name" "$why"
  # the plan table and what ran: layers.1 gathers with the dense codec and reduce-scatters
  # compressed, layers.0 reduce-scatters raw over the ring
  name="mixed_plan_table_and_what_ran"
  if grep -q '^#   layers.1 .*| compressed/dense/default .*| compressed/fast/default' "$tmp/mix.jsonl.log" &&
     grep -q '^#   layers.0 .*| raw/ring' "$tmp/mix.jsonl.log" &&
     grep -qE '^#   layers.1 +allgather +\| +[0-9]+: 0/0/[1-9][0-9]* \| 0/[1-9][0-9]*/0' "$tmp/mix.jsonl.log" &&
     grep -qE '^#   layers.1 +reducescatter +\| +[0-9]+: 0/0/[1-9][0-9]* \| [1-9][0-9]*/0/0' "$tmp/mix.jsonl.log" &&
     grep -qE '^#   layers.0 +reducescatter +\| +[0-9]+: 0/[1-9][0-9]*/0 ' "$tmp/mix.jsonl.log" &&
     grep -qE '^#   layers.2 +allgather +\| +[0-9]+: 0/[1-9][0-9]*/0 ' "$tmp/mix.jsonl.log" &&
     grep -qE '^#   outer +allgather +\| +[0-9]+: [1-9][0-9]*/0/0 ' "$tmp/mix.jsonl.log"; then pass "$name"
  else fail "$name" "$(grep '^#   ' "$tmp/mix.jsonl.log" | head -20)"; fi
else fail "$name" "run failed"; fi

# (c) + (d) the trace
name="trace_shows_prefetch_and_its_absence"
if run 2 "$tmp/tiny.yaml" "$tmp/tr1.jsonl" --set data.batch_size=2 --trace "$tmp/on.json" &&
   run 2 "$tmp/tiny.yaml" "$tmp/tr0.jsonl" --set data.batch_size=2 --set parallelism.overlap=false --trace "$tmp/off.json"; then
  why=$(python3 - "$tmp/on.json" "$tmp/off.json" <<'PY'
import json, sys
def ahead(path):
    ev = json.load(open(path))["traceEvents"]
    tracks = {(e["pid"], e.get("args", {}).get("name")) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    need = {"compute", "comm_ag", "comm_rs"}
    have = {t for _, t in tracks}
    assert need <= have, f"tracks {sorted(have)}"
    assert {p for p, _ in tracks} == {0, 1}, "a process per rank"
    comp = [e for e in ev if e["ph"] == "X" and e.get("cat") == "compute" and e["pid"] == 0]
    ag = [e for e in ev if e["ph"] == "X" and e.get("cat") == "allgather" and e["pid"] == 0]
    for a in ag:
        for k in ("raw_bytes", "wire_bytes", "codec_ms", "strategy", "unit"): assert k in a["args"], k
    n = hits = 0
    for c in comp:
        name = c["name"]
        if not name.startswith("fwd layers.") or name == "fwd layers.0": continue
        l = int(name.split(".")[1]); prev = [p for p in comp if p["name"] == f"fwd layers.{l-1}"
                                             and p["args"]["micro"] == c["args"]["micro"] and p["ts"] < c["ts"]]
        p = max(prev, key=lambda p: p["ts"])
        g = [a for a in ag if a["args"]["unit"] == f"layers.{l}" and a["args"]["issued_us"] <= c["ts"]]
        g = max(g, key=lambda a: a["args"]["issued_us"])
        n += 1; hits += g["args"]["issued_us"] < p["ts"] + p["dur"]
    return n, hits
n1, h1 = ahead(sys.argv[1]); n0, h0 = ahead(sys.argv[2])
ok = n1 > 0 and h1 == n1 and n0 > 0 and h0 == 0
print(f"overlap on: {h1} of {n1} block gathers issued during the previous block; off: {h0} of {n0}")
sys.exit(0 if ok else 1)
PY
) && pass "$name" || fail "$name" "$why"
  name="json_log_has_exposed_per_kind_and_overlap"
  python3 - "$tmp/tr1.jsonl" <<'PY' && pass "$name" || fail "$name" "fields missing"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"final"' not in l]
keys = ["exposed_allgather_ms", "exposed_reducescatter_ms", "exposed_alltoall_ms", "exposed_misc_ms",
        "comm_allgather_ms", "comm_reducescatter_ms", "overlap"]
sys.exit(0 if rows and all(all(k in r for k in keys) and 0 <= r["overlap"] <= 1 for r in rows) else 1)
PY
  name="plot_trace_draws_a_step"
  if python3 scripts/plot_trace.py "$tmp/on.json" --step 3 -o "$tmp/step.png" >"$tmp/plot.log" 2>&1 &&
     [ -s "$tmp/step.png" ]; then pass "$name"; else fail "$name" "$(tail -3 "$tmp/plot.log")"; fi
else fail "$name" "run failed"; fi

# (e) bad input: exit 2 before any step, the key named
bad() { # bad NAME WANT [args...]
  local name=$1 want=$2; shift 2
  "$TRAIN" "$@" >"$tmp/bad.log" 2>&1; local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$want" "$tmp/bad.log" && ! grep -q '^step ' "$tmp/bad.log"; then pass "$name"
  else fail "$name" "exit $rc: $(tail -2 "$tmp/bad.log")"; fi
}
bad negative_prefetch_depth "key 'parallelism.prefetch_depth': -1 is out of range" "$tmp/tiny.yaml" --set parallelism.prefetch_depth=-1
bad bound_below_the_largest_unit "key 'parallelism.max_inflight_bytes': 1000 " "$tmp/tiny.yaml" --set parallelism.max_inflight_bytes=1000
sed 's/^comm: .*/comm: {strategy: compressed,\n  overrides: [{pattern: "layer.1", strategy: raw}]}/' "$tmp/tiny.yaml" >"$tmp/b1.yaml"
bad rule_matching_no_unit "b1.yaml:9: key 'comm.overrides': rule 1 (pattern \"layer.1\", kind all) matches no unit" "$tmp/b1.yaml"
sed 's/^comm: .*/comm: {strategy: compressed,\n  overrides: [{pattern: "layers.1", kind: alltoall, strategy: raw}]}/' "$tmp/tiny.yaml" >"$tmp/b2.yaml"
bad alltoall_rule_on_a_dense_model "key 'comm.overrides': rule 1 (pattern \"layers.1\", kind alltoall) matches no unit" "$tmp/b2.yaml"
sed 's/^comm: .*/comm: {strategy: compressed,\n  overrides: [{pattern: "layers.1", kind: allreduce, strategy: raw}]}/' "$tmp/tiny.yaml" >"$tmp/b3.yaml"
bad unknown_kind "key 'comm.overrides.kind': unknown kind 'allreduce'" "$tmp/b3.yaml"
sed 's/^comm: .*/comm: {strategy: compressed,\n  overrides: [{pattern: "layers.1", codec: zip}]}/' "$tmp/tiny.yaml" >"$tmp/b4.yaml"
bad unknown_codec "key 'comm.overrides.codec': unknown codec 'zip'" "$tmp/b4.yaml"
sed 's/^comm: .*/comm: {strategy: compressed,\n  overrides: [{pattern: "layers.1", algo: tree}]}/' "$tmp/tiny.yaml" >"$tmp/b5.yaml"
bad unknown_algo "key 'comm.overrides.algo': unknown algorithm 'tree'" "$tmp/b5.yaml"
sed 's/^comm: .*/comm: {strategy: compressed,\n  overrides: [{pattern: "layers.*", kind: allgather, algo: direct}]}/' "$tmp/tiny.yaml" >"$tmp/b6.yaml"
bad algo_of_another_kind "key 'comm.overrides.algo': rule 1 asks for 'direct'" "$tmp/b6.yaml"
bad unknown_comm_algo "key 'comm.algo': unknown algorithm 'tree'" "$tmp/tiny.yaml" --set comm.algo=tree
bad overlap_chunks_zero "key 'moe.overlap_chunks': 0 is out of range [1, 64]" "$tmp/moe.yaml" --set moe.overlap_chunks=0
bad overlap_chunks_absurd "key 'moe.overlap_chunks': 1000000 is out of range [1, 64]" "$tmp/moe.yaml" --set moe.overlap_chunks=1000000
bad overlap_chunks_on_a_dense_model "key 'moe.overlap_chunks': 2 chunks asked for, but there is no expert exchange to cut (model.n_experts is 0" "$tmp/tiny.yaml" --set moe.overlap_chunks=2
bad overlap_chunks_at_ep1 "key 'moe.overlap_chunks': 2 chunks asked for, but there is no expert exchange to cut (parallelism.ep is 1" "$tmp/moe.yaml" --set parallelism.ep=1 --set moe.overlap_chunks=2
exit $((fails > 0))
