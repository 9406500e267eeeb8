#!/usr/bin/env bash
# test: asan=no timeout=600
# test_train_memory.sh — trading memory for compute changes no number.
#   (a) train.recompute: full == none, bit for bit (every step's loss, grad
#       norm and lr and the final parameter hash, validation included), for
#       the dense model at 1 and 2 ranks and the MoE model (QK-norm, a
#       dense first block, top-2 of 4 experts) at 1 rank and 2 ranks at
#       EP 2, with gradient accumulation (4 ranks, EP 2, with
#       ZIPCCL_TEST_LONG=1).
#   (b) the output layer in chunks (train.logits_rows): one chunk holding
#       every row is the unchunked layer, bit for bit; 7-row chunks (the
#       head's gradient summed chunk by chunk) stay within 1e-5 relative of
#       it over 20 steps; with recomputation too.
#   (c) a bad train.recompute is refused naming the key.
#   (e) train.recompute: auto (the default) recomputes only when the plan
#       does not fit: a run that fits plans and runs without it; the same
#       run given a runtime.memory_gib between its plans with and without
#       recomputation plans "auto: full" and gives the same bits; below
#       both it is refused naming runtime.memory_gib; the shipped
#       Llama-3-8B and Qwen3-30B-A3B configs plan within issue 37's targets
#       (40 GiB at 8 ranks, 64 GiB at 16) as shipped.
#   (d) the memory plan: --plan N prints the plan at N ranks on one process
#       and exits 0 (Llama-3-8B at 8 ranks, its data file absent), its parts
#       add up to its total, recomputation shrinks the activations, and the
#       count bound on reduce-scatters keeps the units in flight flat in
#       grad_accum; a run's measured peak (the largest VmHWM of its ranks) is
#       within 10% of its plan, at 1 and 2 ranks, with and without
#       recomputation, on a model the process's own libraries do not
#       dominate (checked: under half of the plan); and with a checkpoint
#       every step (each rank writes its slices in place).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
tiny_yaml 20 2 10 5
cat >"$tmp/moe.yaml" <<YAML
model: {vocab_size: 256, dim: 32, n_layers: 3, n_heads: 4, n_kv_heads: 2, head_dim: 8,
        qk_norm: true, ffn_hidden: 64, n_experts: 4, n_experts_per_tok: 2, moe_ffn_hidden: 32,
        decoder_sparse_step: 1, mlp_only_layers: [0], norm_topk_prob: true,
        router_aux_loss_coef: 0.01, max_seq_len: 32, rope_theta: 10000, norm_eps: 1.0e-6,
        tie_embeddings: true}
data: {path: $tmp/corpus.txt, tokenizer: byte, seq_len: 32, batch_size: 2, grad_accum: 2,
       val_fraction: 0.05, val_every: 10, val_batches: 1, seed: 7}
train: {steps: 20, seed: 3}
optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, weight_decay: 0.1, grad_clip: 1.0}
schedule: {warmup_steps: 3, total_steps: 20}
comm: {strategy: compressed, param_dtype: bf16, reduce_dtype: fp32}
YAML
[ -x "$TRAIN" ] || { echo "FAIL train_memory: $TRAIN not built"; exit 1; }
same() { python3 tests/compare_runs.py "$1" "$2" exact --same-steps; }
close() { python3 tests/compare_runs.py "$1" "$2" close "$3" --same-steps; }
# runy NP YAML OUT [args...]: run on another YAML (tests/lib.sh's run uses tiny.yaml)
runy() {
  local np=$1 y=$2; shift 2
  if [ "$np" = 1 ]; then "$TRAIN" "$y" --log-json "$1" "${@:2}" >"$1.log" 2>&1
  else mpirun --oversubscribe --bind-to none -n "$np" "$TRAIN" "$y" --log-json "$1" "${@:2}" >"$1.log" 2>&1; fi
  local rc=$?
  [ $rc -eq 0 ] || { echo "--- $1.log (exit $rc)"; tail -5 "$1.log"; }
  return $rc
}

# (a) dense (4 ranks, and the MoE model's, with ZIPCCL_TEST_LONG=1: the
# suite's time; 2 ranks hold the sharded case)
for np in 1 2 ${ZIPCCL_TEST_LONG:+4}; do
  b=$((4 / np))
  if runy "$np" "$tmp/tiny.yaml" "$tmp/d$np.jsonl" --set data.batch_size=$b &&
     runy "$np" "$tmp/tiny.yaml" "$tmp/dr$np.jsonl" --set data.batch_size=$b --set train.recompute=full; then
    why=$(same "$tmp/d$np.jsonl" "$tmp/dr$np.jsonl") && pass "recompute_dense_np$np" ||
      fail "recompute_dense_np$np" "$why"
  else fail "recompute_dense_np$np" "a run failed"; fi
done
# (a) MoE: EP 1 at one rank, EP 2 at two (and four)
for np in 1 2 ${ZIPCCL_TEST_LONG:+4}; do
  ep=$([ "$np" = 1 ] && echo 1 || echo 2)
  if runy "$np" "$tmp/moe.yaml" "$tmp/m$np.jsonl" --set parallelism.ep=$ep &&
     runy "$np" "$tmp/moe.yaml" "$tmp/mr$np.jsonl" --set parallelism.ep=$ep --set train.recompute=full; then
    why=$(same "$tmp/m$np.jsonl" "$tmp/mr$np.jsonl") && pass "recompute_moe_np${np}_ep$ep" ||
      fail "recompute_moe_np${np}_ep$ep" "$why"
  else fail "recompute_moe_np${np}_ep$ep" "a run failed"; fi
done

# (b) the output layer in chunks, at 1 rank (batch 4 x 32 tokens = 128 rows)
if runy 1 "$tmp/tiny.yaml" "$tmp/c_all.jsonl" --set data.batch_size=4 --set train.logits_rows=128 &&
   runy 1 "$tmp/tiny.yaml" "$tmp/c_def.jsonl" --set data.batch_size=4 &&
   runy 1 "$tmp/tiny.yaml" "$tmp/c7.jsonl" --set data.batch_size=4 --set train.logits_rows=7 &&
   runy 1 "$tmp/tiny.yaml" "$tmp/c7r.jsonl" --set data.batch_size=4 --set train.logits_rows=7 \
     --set train.recompute=full; then
  why=$(same "$tmp/c_def.jsonl" "$tmp/c_all.jsonl") && pass "logits_one_chunk_is_unchunked" ||
    fail "logits_one_chunk_is_unchunked" "$why"
  why=$(close "$tmp/c_def.jsonl" "$tmp/c7.jsonl" 1e-5) && pass "logits_7_row_chunks_close" ||
    fail "logits_7_row_chunks_close" "$why"
  why=$(same "$tmp/c7.jsonl" "$tmp/c7r.jsonl") && pass "logits_chunks_with_recompute_same" ||
    fail "logits_chunks_with_recompute_same" "$why"
else fail "logits_chunks" "a run failed"; fi

# (c)
out=$("$TRAIN" "$tmp/tiny.yaml" --set train.recompute=half 2>&1); rc=$?
if [ $rc = 2 ] && grep -q "key 'train.recompute': unknown mode 'half' (auto|none|full)" <<<"$out"; then
  pass bad_recompute_refused
else fail bad_recompute_refused "exit $rc: $(tail -2 <<<"$out")"; fi
# (d)
planline() { "$TRAIN" "$@" 2>&1 | grep '^# memory plan per rank'; }
p8=$(planline configs/llama3-8b.yaml --plan 8 --set train.recompute=full)
p8n=$(planline configs/llama3-8b.yaml --plan 8 --set train.recompute=none)
p8a=$(planline configs/llama3-8b.yaml --plan 8 --set train.recompute=full --set data.grad_accum=32)
why=$(python3 - "$p8" "$p8n" "$p8a" <<'PY'
import re, sys
U = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
def b(s): v, u = s.split(); return float(v) * U[u]
def parts(line):
    f = lambda k: b(re.search(k + r" ([0-9.]+ \w+)", line).group(1))
    return {k: f(k) for k in ("shards", "in flight", "activations", "comm", "data", "process", "= host")}
full, none, accum = (parts(x) for x in sys.argv[1:4])
if "at 8 ranks" not in sys.argv[1]: print("not at 8 ranks: " + sys.argv[1]); sys.exit(1)
total = sum(v for k, v in full.items() if k != "= host")
if abs(total / full["= host"] - 1) > 0.01: print("parts %g != total %g" % (total, full["= host"])); sys.exit(1)
if not full["activations"] < 0.2 * none["activations"]: print("recompute: %g vs %g" % (full["activations"], none["activations"])); sys.exit(1)
if accum["in flight"] != full["in flight"]: print("grad_accum 32 in flight %g != %g" % (accum["in flight"], full["in flight"])); sys.exit(1)
PY
) && pass plan_adds_up_and_scales || fail plan_adds_up_and_scales "$why"
# model.compute: bf16 plans on the bf16 table, whose arena keeps ln1, ln2,
# hid, q, k and v in bf16 (models/llama.c ActA16): for Llama-3-8B, (2C + F +
# H hd + 2 KV hd) of the floats a block keeps per token, a fifth less
p8b=$(planline configs/llama3-8b.yaml --plan 8 --set train.recompute=none --set model.compute=bf16)
why=$(python3 - "$p8n" "$p8b" <<'PY'
import re, sys
U = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
def acts(line): v, u = re.search(r"activations ([0-9.]+) (\w+)", line).groups(); return float(v) * U[u]
f32, b16 = sys.argv[1:3]
r = acts(b16) / acts(f32)
print("fp32 %.2f GiB, bf16 %.2f GiB (x%.3f); %s" % (acts(f32) / 2**30, acts(b16) / 2**30, r, b16[:60]))
sys.exit(0 if "(cpu_bf16)" in b16 and 0.75 < r < 0.85 else 1)
PY
) && pass plan_bf16_activations || fail plan_bf16_activations "$why"
# the measured peak against the plan on a model whose parts outweigh the
# process itself (untied, 8192-token vocabulary: 17 M parameters, ~1 GiB at
# one rank, of which the libraries are a fifth); two steps (the peak is the
# first step's, with the optimizer's moments allocated)
cat >"$tmp/mid.yaml" <<YAML
model: {vocab_size: 8192, dim: 512, n_layers: 8, n_heads: 8, n_kv_heads: 2, ffn_hidden: 1376,
        max_seq_len: 128, rope_theta: 10000, norm_eps: 1.0e-5, tie_embeddings: false}
data: {path: $tmp/corpus.txt, tokenizer: byte, seq_len: 128, batch_size: 4, grad_accum: 1,
       val_fraction: 0.05, val_every: 0, val_batches: 1, seed: 7}
train: {steps: 2, seed: 3}
optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, weight_decay: 0.1, grad_clip: 1.0}
schedule: {warmup_steps: 1}
comm: {strategy: compressed, param_dtype: bf16, reduce_dtype: fp32}
YAML
for np in 1 2 1b; do # 1b: one rank in model.compute: bf16 (its bf16 activations planned)
  for mode in none full; do
    [ "$np" = 1b ] && [ "$mode" = full ] && continue
    name="measured_within_10pct_of_plan_np${np}_$mode"
    comp=fp32; [ "$np" = 1b ] && comp=bf16
    if runy "${np%b}" "$tmp/mid.yaml" "$tmp/p$np$mode.jsonl" --set data.batch_size=$((4 / ${np%b})) \
         --set train.recompute=$mode --set model.compute=$comp; then
      base=$(sed -n 's/.*+ process \([0-9.]*\) MiB.*/\1/p' "$tmp/p$np$mode.jsonl.log" | head -1)
      why=$(python3 -c "
import json,sys
f=[json.loads(l) for l in open('$tmp/p$np$mode.jsonl') if '\"final\"' in l][-1]
plan,rss,base=f['plan_host_bytes'],f['rss_peak_bytes'],float('${base:-0}')*2**20
d=rss/plan-1
print('measured %.1f MiB, plan %.1f MiB (%+.1f%%), of which the process %.1f MiB'%(rss/2**20,plan/2**20,100*d,base/2**20))
sys.exit(0 if abs(d)<=0.10 and 0<base<0.5*plan else 1)") && pass "$name" || fail "$name" "$why"
    else fail "$name" "run failed"; fi
  done
done
# a checkpoint every step adds nothing to the peak (each rank writes its
# slices in place): still within 10% of the plan at 2 ranks
name="checkpoints_within_10pct_of_plan_np2"
if runy 2 "$tmp/mid.yaml" "$tmp/pck.jsonl" --set data.batch_size=2 --set train.steps=3 --set checkpoint.dir="$tmp/ck" \
     --set checkpoint.every=1 --set checkpoint.keep=1; then
  why=$(python3 -c "
import json,sys
f=[json.loads(l) for l in open('$tmp/pck.jsonl') if '\"final\"' in l][-1]
d=f['rss_peak_bytes']/f['plan_host_bytes']-1
print('measured %.1f MiB, plan %.1f MiB (%+.1f%%)'%(f['rss_peak_bytes']/2**20,f['plan_host_bytes']/2**20,100*d))
sys.exit(0 if abs(d)<=0.10 else 1)") && [ -f "$tmp/ck/step_00000003/rank_00001.safetensors" ] &&
    pass "$name" || fail "$name" "$why"
else fail "$name" "run failed"; fi
# (e) train.recompute: auto
planparts() { # the plan line of a run's log: host total, activations none and full (bytes)
  python3 - "$1" <<'PY'
import re, sys
U = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
b = lambda v, u: float(v) * U[u]
line = next(l for l in open(sys.argv[1]) if l.startswith("# memory plan per rank"))
m = re.search(r"\(recompute ([a-z: ]+); none ([0-9.]+) (\w+), full ([0-9.]+) (\w+)\)", line)
h = re.search(r"= host ([0-9.]+) (\w+)", line)
print(m.group(1).replace(" ", ""), b(h.group(1), h.group(2)), b(m.group(2), m.group(3)), b(m.group(4), m.group(5)))
PY
}
if [ -f "$tmp/p1none.jsonl.log" ] && runy 1 "$tmp/mid.yaml" "$tmp/pauto.jsonl"; then
  read -r mode host none full <<<"$(planparts "$tmp/pauto.jsonl.log")"
  [ "$mode" = "auto:none" ] && pass auto_fits_without_recompute ||
    fail auto_fits_without_recompute "plan says recompute $mode"
  # between the two plans: auto must recompute, and change no bit
  gib=$(python3 -c "print(($host - ($none - $full) / 2) / 2**30)")
  if runy 1 "$tmp/mid.yaml" "$tmp/pauto2.jsonl" --set runtime.memory_gib="$gib"; then
    read -r mode2 host2 _ _ <<<"$(planparts "$tmp/pauto2.jsonl.log")"
    why=$(same "$tmp/p1none.jsonl" "$tmp/pauto2.jsonl") &&
      [ "$mode2" = "auto:full" ] && python3 -c "import sys; sys.exit(0 if $host2 < $gib * 2**30 else 1)" &&
      pass auto_recomputes_when_over_budget_same_bits ||
      fail auto_recomputes_when_over_budget_same_bits "recompute $mode2, host $host2 at $gib GiB; $why"
  else fail auto_recomputes_when_over_budget_same_bits "run failed"; fi
  gib=$(python3 -c "print(round(($host - ($none - $full)) / 2 / 2**30, 3))")
  out=$("$TRAIN" "$tmp/mid.yaml" --set runtime.memory_gib="$gib" 2>&1); rc=$?
  if [ $rc = 2 ] && grep -q "does not fit: .* or than runtime.memory_gib ($gib GiB per rank)" <<<"$out" &&
     grep -q "recompute auto: full" <<<"$out"; then pass auto_over_budget_even_with_recompute_refused
  else fail auto_over_budget_even_with_recompute_refused "exit $rc: $(tail -2 <<<"$out")"; fi
else fail auto_recompute "a run failed"; fi
fitline() { "$TRAIN" "$@" 2>&1 | grep -E '^# (memory plan per rank|fits)'; }
for spec in "llama3-8b 8 40" "qwen3-30b-a3b 16 64"; do
  read -r c n target <<<"$spec"
  out=$(fitline "configs/$c.yaml" --plan "$n")
  why=$(python3 - "$target" "$out" <<'PY'
import re, sys
target, out = float(sys.argv[1]), sys.argv[2]
h = re.search(r"= host ([0-9.]+) GiB", out)
if "recompute auto: full" not in out or "fits 80 GiB per rank (runtime.memory_gib): yes" not in out or not h:
    print(out); sys.exit(1)
print("host %s GiB, target %g" % (h.group(1), target)); sys.exit(0 if float(h.group(1)) <= target else 1)
PY
) && pass "plan_${c}_${n}_ranks_auto_within_target" || fail "plan_${c}_${n}_ranks_auto_within_target" "$why"
done
[ "$fails" = 0 ]
