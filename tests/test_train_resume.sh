#!/usr/bin/env bash
# test: asan=no timeout=600
# test_train_resume.sh — checkpoints.
#   (c1) run 20 steps; run 10 with checkpoints, resume to 20: the resumed
#        steps' loss, grad norm and lr and the final parameter hash equal the
#        uninterrupted run's, bit for bit (1 and 2 ranks).
#   (c2) a checkpoint saved at 2 ranks loads at 4 ranks (same global batch):
#        the resumed losses match the 2-rank run within 1e-5 relative.
#   (c4) --dump-tensors: every rank's gathered parameters are byte-identical
#        (they are one all-gather's result), gradients differ per rank (each
#        rank's own data), and zipccl-codec-bench round-trips the dump; a
#        step list (--dump-tensors 1,2) dumps at each step in one run, the
#        same bytes as the single-step dump, and one out of order is refused.
#   (c3) the checkpoint files: each rank's rank_R.safetensors read by the
#        independent Python `safetensors` package, its metadata's ranges
#        cover every unit exactly once and cut into the model's tensors;
#        a corrupted file is refused by the manifest check.
#   (c6) a format-1 checkpoint (whole tensors, written by rank 0 before
#        the rank files) made from a format-2 one by Python resumes to the
#        same bits.
#   (c5) the checkpoint's config against the resumed run's: a change of the
#        model, the data or the seeds is refused with every differing key
#        named (exit 2, one clean message, no MPI_Abort noise, at 2 ranks);
#        a changed global batch or learning rate is refused unless named in
#        checkpoint.allow_changes, and then announced by a warning line; a
#        changed corpus is refused even under another path, the same corpus
#        under another path is not.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
cat README.md docs/*.md runtime/*.c models/*.c >"$tmp/corpus.txt"
cat >"$tmp/tiny.yaml" <<YAML
model: {vocab_size: 256, dim: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 64,
        max_seq_len: 32, tie_embeddings: true}
data: {path: $tmp/corpus.txt, seq_len: 32, batch_size: 2, grad_accum: 1, val_fraction: 0.05,
       val_every: 5, val_batches: 2, seed: 11}
train: {steps: 20, seed: 5}
optimizer: {lr: 3.0e-3, min_lr: 3.0e-4}
schedule: {warmup_steps: 5, total_steps: 20}
comm: {strategy: compressed, param_dtype: bf16}
checkpoint: {every: 5, keep: 2}
YAML
run() { # run NP LOG [args...]
  local np=$1 log=$2; shift 2
  if [ "$np" = 1 ]; then "$TRAIN" "$tmp/tiny.yaml" "$@" >"$log" 2>&1
  else mpirun --oversubscribe --bind-to none -n "$np" "$TRAIN" "$tmp/tiny.yaml" "$@" >"$log" 2>&1; fi
  local rc=$?
  [ $rc -eq 0 ] || { echo "--- $log (exit $rc)"; tail -5 "$log"; }
  return $rc
}
# compare FULL RESUMED MODE TOL: the resumed run's steps (11..20) against the
# same steps of the full run (tests/compare_runs.py).
compare() { python3 tests/compare_runs.py "$1" "$2" "$3" "$4" --steps 11 20; }
[ -x "$TRAIN" ] || { echo "FAIL train_resume: $TRAIN not built"; exit 1; }

for np in 1 2; do
  name="resume_is_bitwise_np$np"
  if run "$np" "$tmp/full$np.log" --log-json "$tmp/full$np.jsonl" &&
     run "$np" "$tmp/half$np.log" --set train.steps=10 --set checkpoint.dir="$tmp/ck$np" &&
     run "$np" "$tmp/res$np.log" --resume "$tmp/ck$np" --log-json "$tmp/res$np.jsonl"; then
    why=$(compare "$tmp/full$np.jsonl" "$tmp/res$np.jsonl" exact 0) && pass "$name" || fail "$name" "$why"
  else
    fail "$name" "a run failed"
  fi
done

# keep: 2 -> only the two newest step directories remain, latest names step 10
n=$(ls -d "$tmp/ck2"/step_* 2>/dev/null | wc -l)
[ "$n" = 2 ] && [ "$(cat "$tmp/ck2/latest")" = step_00000010 ] && pass "checkpoint_keep_and_latest" \
  || fail "checkpoint_keep_and_latest" "$n step dirs, latest=$(cat "$tmp/ck2/latest" 2>/dev/null)"

# (c2) 2 ranks x batch 2 saved, 4 ranks x batch 1 resumed: same global batch
name="checkpoint_2_ranks_loads_at_4"
if run 2 "$tmp/g2.log" --set comm.param_dtype=fp32 --log-json "$tmp/g2.jsonl" &&
   run 2 "$tmp/g2h.log" --set comm.param_dtype=fp32 --set train.steps=10 --set checkpoint.dir="$tmp/ckx" &&
   run 4 "$tmp/g4.log" --set comm.param_dtype=fp32 --set data.batch_size=1 --resume "$tmp/ckx" --log-json "$tmp/g4.jsonl"; then
  why=$(compare "$tmp/g2.jsonl" "$tmp/g4.jsonl" close 1e-5) && pass "$name" || fail "$name" "$why"
else
  fail "$name" "a run failed"
fi

# (c6) a format-1 checkpoint (whole tensors in model.safetensors and
# optim.safetensors, what rank 0 wrote before the rank files) still loads:
# ck2's step 10 rewritten in that format by Python resumes to the same bits
name="format1_checkpoint_still_loads"
if python3 - "$tmp/ck2/step_00000010" "$tmp/ckv1/step_00000010" <<'PY' 2>"$tmp/v1.err"
import json, os, shutil, sys
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file
src, dst = sys.argv[1:3]
os.makedirs(dst)
C, V, L, H, KV, F = 32, 256, 2, 4, 2, 64
hd = C // H
units = {"outer": [("tok_emb", (V, C)), ("final_norm", (C,))]}  # tied
for l in range(L):
    p = "layers.%d." % l
    units["layers.%d" % l] = [(p + "attn_norm", (C,)), (p + "wq", (H * hd, C)), (p + "wk", (KV * hd, C)),
        (p + "wv", (KV * hd, C)), (p + "wo", (C, H * hd)), (p + "mlp_norm", (C,)), (p + "w_gate", (F, C)),
        (p + "w_up", (F, C)), (p + "w_down", (C, F))]
full = {(w, u): np.zeros(sum(int(np.prod(s)) for _, s in t), np.float32) for u, t in units.items() for w in ("", "m.", "v.")}
for name in sorted(os.listdir(src)):
    if not name.startswith("rank_"): continue
    with safe_open(os.path.join(src, name), "np") as f:
        for u, rng in f.metadata().items():
            if u not in units: continue
            a, b = map(int, rng.split())
            for w in ("", "m.", "v."): full[(w, u)][a:b] = f.get_tensor(w + u)
model, optim = {}, {}
for u, ts in units.items():
    off = 0
    for t, s in ts:
        n = int(np.prod(s))
        model[t] = full[("", u)][off:off + n].reshape(s).copy()
        for w in ("m.", "v."): optim[w + t] = full[(w, u)][off:off + n].reshape(s).copy()
        off += n
save_file(model, os.path.join(dst, "model.safetensors"))
save_file(optim, os.path.join(dst, "optim.safetensors"))
for n in ("state.json", "config.yaml"): shutil.copy(os.path.join(src, n), os.path.join(dst, n))
def fnv(path):
    h = 0xcbf29ce484222325
    for b in open(path, "rb").read(): h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return "%016x" % h
files = ["model.safetensors", "optim.safetensors", "state.json", "config.yaml"]
man = {"format": "zipccl-runtime-checkpoint-1", "step": 10, "files": [
    {"name": n, "bytes": os.path.getsize(os.path.join(dst, n)), "fnv1a64": fnv(os.path.join(dst, n))} for n in files]}
open(os.path.join(dst, "manifest.json"), "w").write(json.dumps(man) + "\n")
PY
then
  if run 2 "$tmp/resv1.log" --resume "$tmp/ckv1/step_00000010" --log-json "$tmp/resv1.jsonl"; then
    why=$(compare "$tmp/res2.jsonl" "$tmp/resv1.jsonl" exact 0) && pass "$name" || fail "$name" "$why"
  else fail "$name" "the resume from format 1 failed: $(tail -2 "$tmp/resv1.log")"; fi
else fail "$name" "could not write the format-1 copy: $(tail -3 "$tmp/v1.err")"; fi

# (c5) what a resumed run may change. refused NAME WANT_RC PATTERN... -- ARGS:
# a 2-rank resume of ck2 (2 ranks x batch 2, step 10) must exit WANT_RC with
# each PATTERN in its output, the message once, and no MPI_Abort / ORTE noise.
refused() {
  local name=$1 want=$2; shift 2
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done; shift
  mpirun --oversubscribe --bind-to none -n 2 "$TRAIN" "$tmp/tiny.yaml" --resume "$tmp/ck2" "$@" \
    >"$tmp/refused.log" 2>&1
  local rc=$? p
  if [ $rc -ne "$want" ]; then fail "$name" "exit $rc, want $want: $(grep -v '^step\|^#\|^  [a-z_0-9]*:\|^[a-z]*:$' "$tmp/refused.log" | head -5)"; return; fi
  for p in "${pats[@]}"; do
    grep -qE -- "$p" "$tmp/refused.log" || { fail "$name" "output lacks /$p/: $(grep -v '^step' "$tmp/refused.log" | head -8)"; return; }
  done
  if grep -qE "ORTE_ERROR_LOG|MPI_ABORT|FATAL" "$tmp/refused.log"; then fail "$name" "abort noise: $(grep -E 'ORTE|MPI_ABORT|FATAL' "$tmp/refused.log" | head -3)"; return; fi
  [ "$want" = 0 ] || [ "$(grep -c '^train: error:' "$tmp/refused.log")" = 1 ] || { fail "$name" "the error is not said exactly once"; return; }
  pass "$name"
}
refused resume_refuses_model_data_seed_changes 2 "model.n_layers: 2 in the checkpoint, 1 now \(--set model.n_layers=1\)" \
  "model.rope_theta: 10000 in the checkpoint, 500000 now" "data.seed: 11 in the checkpoint, 12 now" \
  "train.seed: 5 in the checkpoint, 6 now" \
  -- --set model.n_layers=1 --set model.rope_theta=500000 --set data.seed=12 --set train.seed=6
refused resume_refuses_tie_embeddings_cleanly 2 "model.tie_embeddings: true in the checkpoint, false now" \
  -- --set model.tie_embeddings=false
refused resume_refuses_global_batch_change 2 "global batch: 4 sequences per step in the checkpoint .*, 8 now" \
  "checkpoint.allow_changes" -- --set data.batch_size=4
refused resume_refuses_lr_change 2 "optimizer.lr: 0.003 in the checkpoint, 0.001 now \(--set optimizer.lr=0.001\)" \
  -- --set optimizer.lr=0.001
refused resume_refuses_schedule_length_change 2 "schedule.total_steps: the learning-rate schedule runs over 20 steps in the checkpoint, 30 now" \
  -- --set schedule.total_steps=30 --set train.steps=30
refused resume_allowed_changes_are_announced 0 "^# warning: resume: global batch 4 -> 8 sequences per step" \
  "^# warning: resume: optimizer.lr 0.003 -> 0.001" "^# resumed from .* at step 10" "^# done: 1 steps" \
  -- --set data.batch_size=4 --set optimizer.lr=0.001 --set train.steps=11 \
     --set checkpoint.allow_changes=data.batch_size,optimizer.lr
refused resume_free_changes_are_noted 0 "^# resume: changed from the checkpoint's config, nothing the numerics depend on: .*comm.strategy compressed -> raw" \
  "^# done: 1 steps" -- --set comm.strategy=raw --set train.steps=11
cp "$tmp/corpus.txt" "$tmp/same.txt"
refused resume_same_corpus_other_path_accepted 0 "data.path \"$tmp/corpus.txt\" -> \"$tmp/same.txt\"" "^# done: 1 steps" \
  -- --set data.path="$tmp/same.txt" --set train.steps=11
{ cat "$tmp/corpus.txt"; echo "one more line"; } >"$tmp/other.txt"
refused resume_refuses_changed_corpus 2 "the training data is not the checkpoint's" \
  -- --set data.path="$tmp/other.txt" --set train.steps=11
refused resume_refuses_allowing_a_model_key 2 "'model.dim' can never change when resuming" \
  -- --set checkpoint.allow_changes=model.dim

# (c3) files read by an independent implementation
name="checkpoint_readable_by_python_safetensors"
why=$(python3 - "$tmp/ck2/step_00000010" <<'PY' 2>&1
import json, sys
import numpy as np
from safetensors import safe_open
d = sys.argv[1]
# every rank file the manifest lists; each names its range of each unit
man = json.load(open(d + "/manifest.json"))
ranks = [f["name"] for f in man["files"] if f["name"].startswith("rank_")]
if man.get("format") != "zipccl-runtime-checkpoint-2" or len(ranks) != man["nranks"] or len(ranks) != 2:
    print("manifest", man); sys.exit(1)
C, V, L, H, KV, F = 32, 256, 2, 4, 2, 64
hd = C // H
metas = []
for name in ranks:
    with safe_open(d + "/" + name, "np") as f: metas.append(f.metadata())
tied = not any("head" in mt for mt in metas)  # this test's model ties the head: no unit "head"
units = ({"outer": [("tok_emb", (V, C)), ("final_norm", (C,))]} if tied else
         {"outer": [("tok_emb", (V, C))], "head": [("final_norm", (C,)), ("lm_head", (V, C))]})
for l in range(L):
    p = "layers.%d." % l
    units["layers.%d" % l] = [(p + "attn_norm", (C,)), (p + "wq", (H * hd, C)), (p + "wk", (KV * hd, C)),
        (p + "wv", (KV * hd, C)), (p + "wo", (C, H * hd)), (p + "mlp_norm", (C,)), (p + "w_gate", (F, C)),
        (p + "w_up", (F, C)), (p + "w_down", (C, F))]
size = {u: sum(int(np.prod(s)) for _, s in t) for u, t in units.items()}
full = {(w, u): np.full(size[u], np.nan, np.float32) for u in units for w in ("", "m.", "v.")}
seen = {u: np.zeros(size[u], np.int32) for u in units}
for name in ranks:
    with safe_open(d + "/" + name, "np") as f:
        meta = f.metadata()
        for u in units:
            if u not in meta: continue
            a, b = map(int, meta[u].split())
            seen[u][a:b] += 1
            for w in ("", "m.", "v."):
                full[(w, u)][a:b] = f.get_tensor(w + u)
bad = [u for u in units if not (seen[u] == 1).all()]
if bad: print("not covered exactly once:", bad); sys.exit(1)
m, o = {}, {}
for u, ts in units.items():
    off = 0
    for t, s in ts:
        n = int(np.prod(s))
        m[t] = full[("", u)][off:off + n].reshape(s)
        o["m." + t] = full[("m.", u)][off:off + n].reshape(s)
        o["v." + t] = full[("v.", u)][off:off + n].reshape(s)
        off += n
want = {t: s for ts in units.values() for t, s in ts}
if any(not np.isfinite(v).all() for v in list(m.values()) + list(o.values())): print("a value not written"); sys.exit(1)
if not all((o["v." + k] >= 0).all() for k in want): print("negative second moment"); sys.exit(1)
if not (m["final_norm"] != 1).any(): print("final_norm never trained?"); sys.exit(1)
st = json.load(open(d + "/state.json"))
if st["step"] != 10: print("state", st); sys.exit(1)
PY
) && pass "$name" || fail "$name" "$why"

name="corrupt_checkpoint_refused"
printf 'X' | dd of="$tmp/ck1/step_00000010/rank_00000.safetensors" bs=1 seek=200 conv=notrunc status=none
run 1 "$tmp/bad.log" --resume "$tmp/ck1/step_00000010" >/dev/null
rc=$?
if [ $rc -ne 0 ] && [ $rc -lt 128 ] && grep -q "does not match the manifest" "$tmp/bad.log"; then pass "$name"
else fail "$name" "exit $rc: $(tail -2 "$tmp/bad.log")"; fi
# (c4) tensor dumps
name="dump_tensors"
if run 2 "$tmp/dump.log" --set train.steps=3 --dump-tensors 2 "$tmp/dump"; then
  p0=$tmp/dump/step2_rank0_params.safetensors; p1=$tmp/dump/step2_rank1_params.safetensors
  g0=$tmp/dump/step2_rank0_grads.safetensors; g1=$tmp/dump/step2_rank1_grads.safetensors
  why=$(python3 - "$p0" "$g0" <<'PY' 2>&1
import json, struct, sys
def header(path):  # the safetensors header, read by hand (numpy has no bf16)
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h
p, g = header(sys.argv[1]), header(sys.argv[2])
# units padded to a multiple of 2 ranks; params bf16 (param_dtype), grads fp32
units = ["layers.0", "layers.1", "outer"]
if sorted(p) != units or sorted(g) != units: print("units", sorted(p), sorted(g)); sys.exit(1)
if p["outer"]["shape"] != [256 * 32 + 32] or g["outer"]["shape"] != [8224]:
    print("outer shapes", p["outer"]["shape"], g["outer"]["shape"]); sys.exit(1)
if {t["dtype"] for t in p.values()} != {"BF16"} or {t["dtype"] for t in g.values()} != {"F32"}:
    print("dtypes", [t["dtype"] for t in p.values()], [t["dtype"] for t in g.values()]); sys.exit(1)
PY
  )
  if [ -n "$why" ]; then fail "$name" "$why"
  elif ! cmp -s "$p0" "$p1"; then fail "$name" "gathered parameters differ between ranks"
  elif cmp -s "$g0" "$g1"; then fail "$name" "both ranks dumped identical gradients"
  else pass "$name"; fi
  if [ -x "$BUILD/zipccl-codec-bench" ]; then
    "$BUILD/zipccl-codec-bench" --input "$g0" --quick -c zipccl-fast,zipccl-dense >"$tmp/cb.log" 2>&1 \
      && grep -q "layers.1" "$tmp/cb.log" && pass "codec_bench_reads_dump" \
      || fail "codec_bench_reads_dump" "$(tail -3 "$tmp/cb.log")"
  fi
else
  fail "$name" "run failed"
fi
# a step list dumps at each of its steps, in one run, the same bytes as a run
# that dumps at one of them; a list out of order is refused before step 1
name="dump_tensors_step_list"
if run 2 "$tmp/dumpl.log" --set train.steps=3 --dump-tensors 1,2 "$tmp/dumpl"; then
  miss=""
  for s in 1 2; do for k in params grads batch; do
    [ -f "$tmp/dumpl/step${s}_rank0_$k.safetensors" ] || miss="$miss step${s}_$k"; done; done
  if [ -n "$miss" ]; then fail "$name" "missing:$miss"
  elif ! cmp -s "$tmp/dumpl/step2_rank0_grads.safetensors" "$tmp/dump/step2_rank0_grads.safetensors"; then
    fail "$name" "step 2's gradients differ from the single-step dump's"
  else pass "$name"; fi
else fail "$name" "run failed"; fi
name="dump_tensors_bad_step_list"
run 2 "$tmp/dumpb.log" --set train.steps=3 --dump-tensors 2,1 "$tmp/dumpb" >/dev/null
rc=$?
if [ $rc -eq 2 ] && grep -q "must be ascending step numbers" "$tmp/dumpb.log" && ! grep -q "^step " "$tmp/dumpb.log"; then
  pass "$name"
else fail "$name" "exit $rc: $(tail -2 "$tmp/dumpb.log")"; fi
# a MoE checkpoint from before moe.aux_loss_scope (its config.yaml without
# the key, the manifest matching) trained with each rank's own aux loss:
# resuming it under today's default (global) is refused naming the key,
# accepted with the old scope or when allowed
name="resume_pre_aux_scope_moe_checkpoint"
# shellcheck disable=SC2086
if run 2 "$tmp/aux.log" $TINY_MOE --set train.steps=4 --set checkpoint.dir="$tmp/ckaux" --set checkpoint.every=2; then
  python3 - "$tmp/ckaux/step_00000002" <<'PY'
import os, re, sys
d = sys.argv[1]
cfg = os.path.join(d, "config.yaml")
text = "".join(l for l in open(cfg) if "aux_loss_scope" not in l).encode()
open(cfg, "wb").write(text)
h = 0xcbf29ce484222325
for b in text: h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
m = os.path.join(d, "manifest.json")
man = re.sub(r'("config.yaml", "bytes": )\d+(, "fnv1a64": ")[0-9a-f]+', r'\g<1>%d\g<2>%016x' % (len(text), h), open(m).read())
open(m, "w").write(man)
PY
  # shellcheck disable=SC2086
  run 2 "$tmp/aux1.log" $TINY_MOE --set train.steps=4 --resume "$tmp/ckaux/step_00000002"; rc1=$?
  # shellcheck disable=SC2086
  run 2 "$tmp/aux2.log" $TINY_MOE --set train.steps=4 --resume "$tmp/ckaux/step_00000002" --set moe.aux_loss_scope=rank; rc2=$?
  # shellcheck disable=SC2086
  run 2 "$tmp/aux3.log" $TINY_MOE --set train.steps=4 --resume "$tmp/ckaux/step_00000002" \
    --set checkpoint.allow_changes=moe.aux_loss_scope; rc3=$?
  if [ $rc1 = 2 ] && grep -q 'moe.aux_loss_scope: "rank" in the checkpoint, "global" now' "$tmp/aux1.log" &&
     [ $rc2 = 0 ] && [ $rc3 = 0 ] && grep -q "warning: resume: moe.aux_loss_scope" "$tmp/aux3.log"; then
    pass "$name"
  else fail "$name" "exits $rc1 $rc2 $rc3: $(grep -h 'aux_loss_scope\|error' "$tmp"/aux[123].log | head -3)"; fi
else fail "$name" "run failed"; fi
exit $((fails > 0))
