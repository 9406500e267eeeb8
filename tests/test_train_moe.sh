#!/usr/bin/env bash
# test: asan=no timeout=600
# test_train_moe.sh — a Qwen3-MoE-style model trained end to end with expert
# parallelism (runtime/expert.c) over 1, 2 and 4 ranks.
#   (a) compressed == raw collectives (gathers, reductions, the expert
#       All-to-All) and == a native (MPI_Alltoallv) expert exchange, bit for
#       bit: losses, aux losses, grad norms and the final parameter hash,
#       at EP = 1 and 4 ranks, EP = 2 on 2 ranks and EP = 4 on 4 ranks (EP = 2
#       on 4 ranks too with ZIPCCL_TEST_LONG=1); the compressed run's log
#       shows the dispatch compressing (alltoall wire < raw bytes).
#   (b) EP = 2 and EP = 4 on 4 ranks == EP = 1 on 4 ranks within TOL_EP per
#       step (the experts' GEMMs see their rows grouped differently: fp32
#       rounding only), and 4 ranks == 1 rank with the same global batch
#       within TOL_RANKS (below: routing amplifies rounding).
#   (c) checkpoints: EP = 2 on 4 ranks saved at step 5 and resumed there
#       continues bit for bit; the same checkpoint loads at 2 ranks, EP = 1
#       (experts gathered whole in the file, resharded on load).
#   (b') the expert exchange in chunks (moe.overlap_chunks 2, 4) within
#       TOL_CHUNKS of one chunk (the expert weight gradient sums chunk by
#       chunk), chunked compressed == chunked raw bit for bit;
#   (d) bad parallelism and MoE settings are refused with exit code 2 and the
#       key named; (e) a capacity limit drops pairs and the log counts them,
#       the same pairs with the exchange in chunks.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh

# The fortunes corpus (the same bytes on every machine with the same Debian
# packages), not the tree's own files: MoE runs drift apart faster than dense
# ones, and the bounds below were measured on this text.
scripts/prepare_data.sh "$tmp/corpus.txt" >/dev/null || { echo "FAIL train_moe: no corpus"; exit 1; }
cat >"$tmp/moe.yaml" <<YAML
model: {vocab_size: 256, dim: 32, n_layers: 3, n_heads: 4, n_kv_heads: 2, head_dim: 8,
        qk_norm: true, ffn_hidden: 64, n_experts: 4, n_experts_per_tok: 2, moe_ffn_hidden: 32,
        decoder_sparse_step: 1, mlp_only_layers: [0], norm_topk_prob: true,
        router_aux_loss_coef: 0.01, max_seq_len: 32, rope_theta: 10000, norm_eps: 1.0e-6,
        tie_embeddings: true}
data: {path: $tmp/corpus.txt, tokenizer: byte, seq_len: 32, batch_size: 2, grad_accum: 1,
       val_fraction: 0.05, val_every: 5, val_batches: 1, seed: 7}
train: {steps: 20, seed: 3}
optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, weight_decay: 0.1, grad_clip: 1.0}
schedule: {warmup_steps: 3, total_steps: 20}
parallelism: {ep: 2}
comm: {strategy: compressed, param_dtype: fp32, reduce_dtype: fp32}
YAML

run() { # run NP OUT [--set ...]
  local np=$1 out=$2; shift 2
  mpirun --oversubscribe --bind-to none -n "$np" "$TRAIN" "$tmp/moe.yaml" --log-json "$out" \
    "$@" >"$out.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { echo "--- $out.log (exit $rc)"; tail -5 "$out.log"; }
  return $rc
}
compare() { python3 tests/compare_runs.py "$@"; }
[ -x "$TRAIN" ] || { echo "FAIL train_moe: $TRAIN not built"; exit 1; }

# The bounds (b) checks (docs/RUNTIME.md states them). EP changes which rows
# an expert's GEMM sees together: measured <= 6e-8 over 20 steps, two seeds.
# The rank count changes the order of the gradient sums as for the dense
# model, and discrete routing amplifies it (a token that flips to another
# expert moves the loss at once): measured up to 2.5e-3 by step 20 and
# 2e-8 at step 1 (two seeds, fp32 and bf16 gathers alike).
TOL_EP=1e-4
TOL_RANKS=5e-3

# (a) the strategies, bit for bit
for cfg in "4 1" "2 2" "4 2" "4 4"; do
  set -- $cfg
  np=$1 ep=$2 b=$((8 / np))
  c="$tmp/c${np}_$ep.jsonl"
  if run "$np" "$c" --set parallelism.ep=$ep --set data.batch_size=$b; then
    # raw: every collective uncompressed; native: the expert exchange over
    # MPI_Alltoallv (native reductions sum in MPI's order, not the canonical one)
    for s in raw native; do
      [ "$ep" = 1 ] && [ $s = native ] && continue # no exchange to run natively at EP = 1
      # the suite's time: EP = 2 on 4 ranks (between the two above) in the long run only
      [ "$np$ep" = 42 ] && [ -z "${ZIPCCL_TEST_LONG:-}" ] && continue
      name="moe/${s}_equals_compressed_np${np}_ep$ep"
      o="$tmp/$s${np}_$ep.jsonl"
      key=comm.strategy; [ $s = native ] && key=comm.alltoall
      if run "$np" "$o" --set parallelism.ep=$ep --set data.batch_size=$b --set $key=$s; then
        why=$(compare "$c" "$o" exact --same-steps) && pass "$name" || fail "$name" "$why"
      else
        fail "$name" "the $s run failed"
      fi
    done
    [ "$ep" = 1 ] && continue # no exchange at EP = 1: every expert is local
    name="moe/dispatch_compresses_np${np}_ep$ep"
    python3 - "$c" <<'PY' && pass "$name" || fail "$name" "alltoall_wire_bytes >= alltoall_raw_bytes, or aux/maxvio missing"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"final"' not in l]
ok = rows and all(r["alltoall_raw_bytes"] > 0 and r["alltoall_wire_bytes"] < r["alltoall_raw_bytes"]
                  and r["aux_loss"] > 0 and r["expert_maxvio"] >= 0 for r in rows)
sys.exit(0 if ok else 1)
PY
    # the EP ranks' imbalance (expert_rank_vio): between 0 and the busiest
    # expert's MaxVio (a slice's rows are at most its experts' count times
    # the busiest's); with one expert per EP rank (EP 4 of 4 experts) it is
    # the blocks' busiest experts over their mean loads, recomputed here from
    # each block's max and MaxVio (mean = max / (1 + MaxVio))
    name="moe/rank_vio_np${np}_ep$ep"
    why=$(python3 - "$c" "$ep" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"final"' not in l]
ep = int(sys.argv[2])
def per_expert(r):
    top = sum(b["max"] for b in r["experts"])
    return top / sum(b["max"] / (1 + b["maxvio"]) for b in r["experts"]) - 1
bad = [(r["step"], r["expert_rank_vio"], r["expert_maxvio"]) for r in rows
       if not (0 <= r["expert_rank_vio"] <= r["expert_maxvio"] + 1e-9)
       or (ep == 4 and abs(r["expert_rank_vio"] - per_expert(r)) > 1e-6)]
print("steps %d, (step, rank_vio, maxvio) off: %s; step 1: %.4f / %.4f" % (
    len(rows), bad[:3], rows[0]["expert_rank_vio"], rows[0]["expert_maxvio"]))
sys.exit(1 if bad or not rows or not any(r["expert_rank_vio"] > 0 for r in rows) else 0)
PY
) && { pass "$name"; echo "  $why"; } || fail "$name" "$why"
  else
    fail "moe/compressed_run_np${np}_ep$ep" "the compressed run failed"
  fi
done

# (a') the rows as bf16 (comm.alltoall_dtype): still compressed == raw bit for
# bit, and bf16 activations compress further than fp32 ones
name="moe/bf16_dispatch_raw_equals_compressed_np4_ep2"
if run 4 "$tmp/h.jsonl" --set comm.alltoall_dtype=bf16 --set train.steps=8 &&
   run 4 "$tmp/hr.jsonl" --set comm.alltoall_dtype=bf16 --set train.steps=8 --set comm.strategy=raw; then
  why=$(compare "$tmp/h.jsonl" "$tmp/hr.jsonl" exact --same-steps) && pass "$name" || fail "$name" "$why"
  name="moe/bf16_dispatch_compresses_more"
  python3 - "$tmp/h.jsonl" "$tmp/c4_2.jsonl" <<'PY' && pass "$name" || fail "$name" "bf16 rows did not compress better than fp32 ones"
import json, sys
def ratio(p):
    rows = [json.loads(l) for l in open(p) if '"final"' not in l][:8]
    return sum(r["alltoall_raw_bytes"] for r in rows) / sum(r["alltoall_wire_bytes"] for r in rows)
b, f = ratio(sys.argv[1]), ratio(sys.argv[2])
print(f"  alltoall ratio bf16 {b:.3f}, fp32 {f:.3f}")
sys.exit(0 if b > f + 0.1 else 1)
PY
else
  fail "$name" "a bf16-dispatch run failed"
fi

# (b) expert parallelism changes rounding only
cp "$tmp/c4_1.jsonl" "$tmp/e1.jsonl" 2>/dev/null # (a)'s EP = 1 run on 4 ranks
if [ -s "$tmp/e1.jsonl" ] && run 1 "$tmp/one.jsonl" --set parallelism.ep=1 --set data.batch_size=8; then
  for ep in 2 4; do
    name="moe/ep${ep}_close_to_ep1_np4"
    why=$(compare "$tmp/e1.jsonl" "$tmp/c4_$ep.jsonl" close $TOL_EP --same-steps) &&
      { pass "$name"; echo "  $why"; } || fail "$name" "$why"
  done
  name="moe/np4_close_to_np1_same_global_batch"
  why=$(compare "$tmp/one.jsonl" "$tmp/e1.jsonl" close $TOL_RANKS --same-steps --first-tol 1e-6) &&
    { pass "$name"; echo "  $why"; } || fail "$name" "$why"
else
  fail "moe/ep1_runs" "an EP = 1 run failed"
fi

# (b') the expert exchange in chunks (moe.overlap_chunks) against one chunk.
# Not bitwise: each chunk's expert GEMMs run on that chunk's rows, and the
# expert weight gradient is summed chunk by chunk (dW += dY_c^T X_c), so its
# fp32 rounding differs; the forward of step 1 came out bitwise here (the
# per-row GEMM bits did not depend on the chunk's rows on this CPU's
# SkylakeX and Haswell kernels), which the kernels do not promise
# (kernels/cpu.c), so step 1 is held to TOL_CHUNKS_FIRST, not to 0.
# Measured over 20 steps at 4 ranks: <= 4.2e-7 (EP 2 and 4, 2 and 4
# chunks, default, SkylakeX and Haswell cores), 0 at step 1.
TOL_CHUNKS=1e-5
TOL_CHUNKS_FIRST=1e-7
for cfg in "4 2 2" "4 4 4"; do
  set -- $cfg
  np=$1 ep=$2 nc=$3
  name="moe/chunks${nc}_close_to_one_chunk_np${np}_ep$ep"
  o="$tmp/ch${nc}_$ep.jsonl"
  if [ -s "$tmp/c${np}_$ep.jsonl" ] &&
     run "$np" "$o" --set parallelism.ep=$ep --set data.batch_size=2 --set moe.overlap_chunks=$nc; then
    why=$(compare "$tmp/c${np}_$ep.jsonl" "$o" close $TOL_CHUNKS --same-steps --first-tol $TOL_CHUNKS_FIRST) &&
      { pass "$name"; echo "  $why"; } || fail "$name" "$why"
  else fail "$name" "a run failed"; fi
done
# chunked and compressed == chunked and raw, bit for bit (lossless per chunk)
name="moe/chunks4_raw_equals_compressed_np4_ep4"
if run 4 "$tmp/ch4_4r.jsonl" --set parallelism.ep=4 --set data.batch_size=2 --set moe.overlap_chunks=4 \
     --set comm.strategy=raw; then
  why=$(compare "$tmp/ch4_4.jsonl" "$tmp/ch4_4r.jsonl" exact --same-steps) && pass "$name" || fail "$name" "$why"
else fail "$name" "the raw run failed"; fi

# (c) checkpoints with experts spread over the EP group
ck="$tmp/ckpt"
if run 4 "$tmp/part.jsonl" --set data.batch_size=2 --set train.steps=5 --set checkpoint.dir="$ck" &&
   run 4 "$tmp/res.jsonl" --set data.batch_size=2 --resume "$ck"; then
  name="moe/resume_ep2_np4_bitwise"
  why=$(compare "$tmp/c4_2.jsonl" "$tmp/res.jsonl" exact --steps 6 20) && pass "$name" || fail "$name" "$why"
  name="moe/checkpoint_holds_every_expert"
  python3 - "$ck" <<'PY' && pass "$name" || fail "$name" "expert tensors missing from the checkpoint"
import glob, json, os, struct, sys
d = os.path.join(sys.argv[1], open(os.path.join(sys.argv[1], "latest")).read().strip())
# each rank's file names its range of each unit; the expert units (E = 4
# experts of 3 Fe C floats) must be covered exactly once by the four ranks
cover = {}
for path in sorted(glob.glob(os.path.join(d, "rank_*.safetensors"))):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
    for unit, rng in head.get("__metadata__", {}).items():
        if unit.startswith("layers."):
            a, b = map(int, rng.split())
            cover.setdefault(unit, []).append((a, b))
            if head[unit]["shape"] != [b - a]: sys.exit(1)
def once(rs, total):
    rs = sorted(rs)
    return rs[0][0] == 0 and rs[-1][1] == total and all(x[1] == y[0] for x, y in zip(rs, rs[1:]))
E, FE, C = 4, 32, 32
ok = len(glob.glob(os.path.join(d, "rank_*.safetensors"))) == 4 and "layers.1" in cover
ok = ok and all(once(cover.get(f"layers.{l}.experts", [(0, 0)]), E * 3 * FE * C) for l in (1, 2))
sys.exit(0 if ok else 1)
PY
  name="moe/checkpoint_loads_at_np2_ep1"
  if run 2 "$tmp/res2.jsonl" --set data.batch_size=4 --set parallelism.ep=1 --resume "$ck"; then
    # another rank count: the bound of a rank-count change
    why=$(compare "$tmp/c4_2.jsonl" "$tmp/res2.jsonl" close $TOL_RANKS --steps 6 20) &&
      pass "$name" || fail "$name" "$why"
  else
    fail "$name" "the resumed run failed"
  fi
else
  fail "moe/resume_ep2_np4_bitwise" "the checkpointing runs failed"
fi

# (d) parallelism the model cannot take
bad() { # bad NAME NP WANT [--set ...]
  local name=$1 np=$2 want=$3; shift 3
  mpirun --oversubscribe --bind-to none -n "$np" "$TRAIN" "$tmp/moe.yaml" "$@" >"$tmp/bad.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$want" "$tmp/bad.log"; then pass "$name"
  else fail "$name" "exit $rc, wanted 2 and '$want': $(grep -m1 error "$tmp/bad.log")"; fi
}
bad moe/rejects_ep_not_dividing_ranks 4 "'parallelism.ep': 3 does not divide the 4 ranks" \
  --set parallelism.ep=3 --set model.n_experts=6
bad moe/rejects_ep_not_dividing_experts 2 "'parallelism.ep': 2 does not divide model.n_experts 3" \
  --set model.n_experts=3
bad moe/rejects_alltoall_without_exchange 2 "no expert all-to-all" --set parallelism.ep=1 \
  --set comm.alltoall=compressed
bad moe/rejects_topk_over_experts 2 "n_experts_per_tok must be in \[1, n_experts = 4\]" \
  --set model.n_experts_per_tok=5
bad moe/rejects_negative_capacity 2 "'model.capacity_factor': -1 is out of range" \
  --set model.capacity_factor=-1
bad moe/rejects_bad_mlp_only_layers 2 "'model.mlp_only_layers': expected block indices" \
  --set model.mlp_only_layers=0,x
bad moe/rejects_moe_key_on_dense_model 2 "'model.n_experts_per_tok' is for mixture-of-experts" \
  --set model.n_experts=0
# a dense model with ep: the MoE keys gone, ep alone is the mistake
sed -e '/n_experts/d' -e '/moe_ffn_hidden/d' -e '/router_aux/d' \
  -e 's/qk_norm: true, ffn_hidden: 64,.*/qk_norm: true, ffn_hidden: 64,/' "$tmp/moe.yaml" >"$tmp/dense.yaml"
sed -i 's/^        decoder_sparse_step.*$//' "$tmp/dense.yaml"
mpirun --oversubscribe --bind-to none -n 2 "$TRAIN" "$tmp/dense.yaml" >"$tmp/bad.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "needs experts to spread" "$tmp/bad.log"; then pass moe/rejects_ep_on_dense_model
else fail moe/rejects_ep_on_dense_model "exit $rc: $(grep -m1 error "$tmp/bad.log")"; fi

# (e) a capacity limit drops pairs, says how many, and still trains
name="moe/capacity_factor_drops_and_logs"
if run 4 "$tmp/cap.jsonl" --set model.capacity_factor=0.5 --set train.steps=5; then
  python3 - "$tmp/cap.jsonl" <<'PY' && pass "$name" || fail "$name" "no dropped pairs logged, or loss not finite"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"final"' not in l]
sys.exit(0 if rows and all(r["dropped_pairs"] > 0 and math.isfinite(r["loss"]) and
                           len(r["experts"]) == 2 for r in rows) else 1)
PY
else
  fail "$name" "the run failed"
fi
# the capacity drops are decided before the chunks are cut: with 3 chunks the
# first step drops the same pairs and has the same loss as with one
name="moe/capacity_drops_identical_with_chunks"
if run 4 "$tmp/capc.jsonl" --set model.capacity_factor=0.5 --set train.steps=5 --set moe.overlap_chunks=3; then
  python3 - "$tmp/cap.jsonl" "$tmp/capc.jsonl" <<'PY' && pass "$name" || fail "$name" "step 1 differs"
import json, sys
a, b = ([json.loads(l) for l in open(p) if '"final"' not in l][0] for p in sys.argv[1:3])
print(f"  step 1: dropped {a['dropped_pairs']} / {b['dropped_pairs']}, loss {a['loss']} / {b['loss']}")
sys.exit(0 if a["dropped_pairs"] == b["dropped_pairs"] > 0 and abs(a["loss"] - b["loss"]) <= 1e-7 * abs(a["loss"]) else 1)
PY
else
  fail "$name" "the run failed"
fi
exit $((fails > 0))
