#!/usr/bin/env bash
# test: timeout=240
# test_hf_errors.sh — bad input to the Hugging Face import and export, through
# build/train and build/export-hf: each refused before training
# starts (no step line), with exit status 2 on every rank, one message naming
# the file and the tensor or field, and no MPI_Abort noise; at 2 ranks those
# each rank finds on its own (files it reads), at 1 rank the rest (the same
# agreement, without an mpirun start each). The cases: a
# missing shard, a truncated shard, a tensor of the wrong shape, one of the
# wrong dtype, an architecture we do not implement, rope scaling, a YAML key and
# a --set that contradict config.json, token metadata whose tokenizer is larger
# than the model's vocabulary, a truncated token file, a data.tokenizer the token
# metadata contradicts, bad export arguments; data made with another tokenizer
# than the model's is warned about.
# Beside them the paths that work, so the suite runs them under ASan too: a
# sharded import at 2 ranks, checkpoint.hf in bf16 shards == build/export-hf,
# configs/hf-finetune.yaml. runtime/hf.c's own refusals, one by one, are
# tests/test_hf.c's; the parity checks tests/test_hf_train.py's.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
EXPORT=${EXPORT:-$BUILD/export-hf}
[ -x "$TRAIN" ] && [ -x "$EXPORT" ] || { echo "FAIL hf_errors: $TRAIN or $EXPORT not built"; exit 1; }

# A tiny Llama as save_pretrained lays it out, one file (good) and in shards
# (sharded), written with numpy + safetensors (no torch needed here).
python3 - "$tmp" <<'PY' || { echo "FAIL hf_errors/setup"; exit 1; }
import json, os, sys
import numpy as np
from safetensors.numpy import save_file
d = sys.argv[1]
sys.path.insert(0, "tests")
from tiny_hf import V, C, KV, F, HD as hd, CONFIG as cfg, llama_weights
w, rng = llama_weights()
def write(name, tensors, config=cfg, shards=None):
    o = os.path.join(d, name)
    os.makedirs(o)
    json.dump(config, open(os.path.join(o, "config.json"), "w"))
    if not shards:
        save_file(tensors, os.path.join(o, "model.safetensors"), metadata={"format": "pt"})
        return
    names = sorted(tensors)
    parts = [names[i::shards] for i in range(shards)]
    wm = {}
    for i, part in enumerate(parts):
        f = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({k: tensors[k] for k in part}, os.path.join(o, f), metadata={"format": "pt"})
        wm.update({k: f for k in part})
    json.dump({"metadata": {"total_size": 0}, "weight_map": wm},
              open(os.path.join(o, "model.safetensors.index.json"), "w"))
write("good", w)
write("sharded", w, shards=3)
write("missing_shard", w, shards=3)
os.unlink(os.path.join(d, "missing_shard", "model-00002-of-00003.safetensors"))
write("cut_shard", w, shards=3)
p = os.path.join(d, "cut_shard", "model-00003-of-00003.safetensors")
os.truncate(p, os.path.getsize(p) - 100)
bad = dict(w); bad["model.layers.1.mlp.up_proj.weight"] = w["model.layers.1.mlp.up_proj.weight"][:40]
write("wrong_shape", bad)
bad = dict(w); bad["model.layers.0.self_attn.k_proj.weight"] = np.zeros((KV * hd, C), np.int64)
write("wrong_dtype", bad)
write("mistral", w, dict(cfg, architectures=["MistralForCausalLM"], model_type="mistral"))
write("llama31", w, dict(cfg, rope_scaling={"factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}))
rng = np.random.default_rng(1)
rng.integers(0, V, 3000).astype("<u2").tofile(os.path.join(d, "tokens.bin"))
rng.integers(0, V, 3000).astype("<u2").tofile(os.path.join(d, "tok2.bin"))
json.dump({"format": "zipccl-runtime-tokens-1", "dtype": "u16", "tokens": 3000, "vocab_size": 100},
          open(os.path.join(d, "tok2.bin.json"), "w"))
rng.integers(0, V, 3000).astype("<u2").tofile(os.path.join(d, "tok4.bin"))
json.dump({"format": "zipccl-runtime-tokens-1", "dtype": "u16", "tokens": 3000, "vocab_size": 61,
           "tokenizer_file": "tok4.bin.tokenizer.json"}, open(os.path.join(d, "tok4.bin.json"), "w"))
open(os.path.join(d, "tok4.bin.tokenizer.json"), "w").write('{"model": "the data\'s"}')
os.makedirs(os.path.join(d, "good_tok"))
for n in ("config.json", "model.safetensors"):
    os.link(os.path.join(d, "good", n), os.path.join(d, "good_tok", n))
open(os.path.join(d, "good_tok", "tokenizer.json"), "w").write('{"model": "the model\'s"}')
rng.integers(0, V, 2999).astype("<u2").tofile(os.path.join(d, "tok3.bin"))
json.dump({"format": "zipccl-runtime-tokens-1", "dtype": "u16", "tokens": 3000, "vocab_size": 61},
          open(os.path.join(d, "tok3.bin.json"), "w"))
PY

cat >"$tmp/run.yaml" <<YAML
data:
  path: $tmp/tokens.bin
  tokenizer: u16
  seq_len: 16
  batch_size: 2
  val_fraction: 0
train:
  steps: 2
comm:
  strategy: raw
YAML
sed 's/^data:/model:\n  dim: 48\ndata:/' "$tmp/run.yaml" >"$tmp/contra.yaml"

mpi() { mpirun --oversubscribe --bind-to none -n 2 "$@"; }

# expect NAME PATTERN -- CMD...: exit status 2, the pattern in stderr, one
# error line, no step run, no abort noise
expect() {
  local name=$1 pat=$2; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? n; n=$(grep -c 'error: ' "$tmp/err")
  if [ "$rc" -ne 2 ]; then fail "$name" "exit $rc, want 2: $(head -c 400 "$tmp/err")"
  elif ! grep -qE -- "$pat" "$tmp/err"; then fail "$name" "stderr lacks /$pat/: $(head -c 400 "$tmp/err")"
  elif [ "$n" -ne 1 ]; then fail "$name" "$n error lines, want 1: $(head -c 400 "$tmp/err")"
  elif grep -qiE 'MPI_ABORT|ORTE_ERROR|PRTE_ERROR|FATAL' "$tmp/err"; then fail "$name" "abort noise: $(head -c 300 "$tmp/err")"
  elif grep -q '^step ' "$tmp/out"; then fail "$name" "a step ran before the error"
  else pass "$name"; fi
}

if mpi "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/sharded" >"$tmp/out" 2>"$tmp/err" &&
   grep -q "^# weights: $tmp/sharded (3 shards, fp32)" "$tmp/out" && grep -q '^# done: 2 steps' "$tmp/out"; then
  pass hf_errors/good_sharded_import_runs
else fail hf_errors/good_sharded_import_runs "$(tail -3 "$tmp/err")"; fi

# the export paths of the trainer and of the tool (what the suite runs under
# ASan here; the parity of what they write is test_hf_train.py's)
if mpi "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/good" --set checkpoint.dir="$tmp/ck" \
     --set checkpoint.hf=true --set checkpoint.hf_dtype=bf16 --set checkpoint.hf_shard_bytes=10000 \
     >"$tmp/out" 2>"$tmp/err" &&
   "$EXPORT" "$tmp/ck" "$tmp/tool" >>"$tmp/out" 2>>"$tmp/err" &&
   [ -f "$tmp/ck/step_00000002/hf/model.safetensors.index.json" ] &&
   diff -r "$tmp/ck/step_00000002/hf" "$tmp/tool" >/dev/null; then
  pass hf_errors/checkpoint_hf_equals_export_tool
else fail hf_errors/checkpoint_hf_equals_export_tool "$(tail -3 "$tmp/err")"; fi

# pruning old checkpoints takes their hf/ directory along
if "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/good" --set checkpoint.dir="$tmp/ckp" \
     --set checkpoint.hf=true --set checkpoint.every=1 --set checkpoint.keep=1 \
     >"$tmp/out" 2>"$tmp/err" && [ "$(ls "$tmp/ckp")" = "$(printf 'latest\nstep_00000002')" ] &&
   [ -f "$tmp/ckp/step_00000002/hf/config.json" ]; then
  pass hf_errors/pruned_checkpoint_takes_its_hf_dir
else fail hf_errors/pruned_checkpoint_takes_its_hf_dir "$(ls -R "$tmp/ckp" | head -c 300) $(tail -2 "$tmp/err")"; fi

# the shipped fine-tuning config, which has no model keys of its own
if "$TRAIN" configs/hf-finetune.yaml --init-from "$tmp/good" --set data.path="$tmp/tokens.bin" \
     --set data.tokenizer=u16 --set data.seq_len=16 --set train.steps=2 --set data.val_every=0 \
     --set checkpoint.dir="$tmp/ft" --set comm.strategy=raw >"$tmp/out" 2>"$tmp/err" &&
   [ -f "$tmp/ft/step_00000002/hf/model.safetensors" ]; then
  pass hf_errors/configs_hf_finetune_runs
else fail hf_errors/configs_hf_finetune_runs "$(tail -3 "$tmp/err")"; fi

expect hf_errors/missing_shard "error: $tmp/missing_shard/model-00002-of-00003.safetensors: the shard is missing \($tmp/missing_shard/model.safetensors.index.json lists it\)" -- \
  mpi "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/missing_shard"
expect hf_errors/truncated_shard "error: '$tmp/cut_shard/model-00003-of-00003.safetensors': tensor '[^']+': data_offsets .* run past the end of the data .*file truncated\?" -- \
  "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/cut_shard"
expect hf_errors/wrong_shape "error: $tmp/wrong_shape/model.safetensors: tensor 'model.layers.1.mlp.up_proj.weight' has shape \(40, 32\), the model of config.json needs \(48, 32\)" -- \
  mpi "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/wrong_shape"
expect hf_errors/wrong_dtype "error: $tmp/wrong_dtype/model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' is I64; the import reads F32, BF16 and F16" -- \
  "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/wrong_dtype"
expect hf_errors/unsupported_architecture "error: $tmp/mistral/config.json: field 'architectures': 'MistralForCausalLM' is not supported" -- \
  "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/mistral"
expect hf_errors/rope_scaling_llama3 "error: $tmp/llama31/config.json: field 'rope_scaling': rope_type 'llama3' is not implemented" -- \
  "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/llama31"
expect hf_errors/yaml_contradicts_config_json "error: $tmp/contra.yaml:2: key 'model.dim': 48 contradicts $tmp/good/config.json: 'hidden_size', which says 32" -- \
  mpi "$TRAIN" "$tmp/contra.yaml" --init-from "$tmp/good"
expect hf_errors/set_contradicts_config_json "error: --set model.n_layers=3: key 'model.n_layers': 3 contradicts $tmp/good/config.json: 'num_hidden_layers', which says 2" -- \
  "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/good" --set model.n_layers=3
expect hf_errors/not_a_directory "error: $tmp/nope: not a directory" -- \
  "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/nope"
expect hf_errors/tokenizer_larger_than_model "error: $tmp/tok2.bin.json: the tokenizer that made $tmp/tok2.bin has 100 tokens \(vocab_size\), more than the model's 61 \(model.vocab_size, $tmp/good/config.json: 'vocab_size'\)" -- \
  mpi "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/good" --set data.path="$tmp/tok2.bin"
expect hf_errors/truncated_token_file "error: $tmp/tok3.bin: 5998 bytes, but $tmp/tok3.bin.json says 3000 u16 tokens \(6000 bytes\)" -- \
  "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/good" --set data.path="$tmp/tok3.bin"
expect hf_errors/data_tokenizer_contradicts_metadata "error: --set data.tokenizer=i32: key 'data.tokenizer': \"i32\" contradicts $tmp/tok4.bin.json: 'dtype', which says u16" -- \
  "$TRAIN" "$tmp/run.yaml" --set data.path="$tmp/tok4.bin" --set data.tokenizer=i32
# data made with another tokenizer than the model's: said, not refused
if "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/good_tok" --set data.path="$tmp/tok4.bin" \
     >"$tmp/out" 2>"$tmp/err" &&
   grep -q "^# warning: $tmp/tok4.bin was made with another tokenizer.json ($tmp/tok4.bin.tokenizer.json) than the model's ($tmp/good_tok/tokenizer.json)" "$tmp/out" &&
   ! "$TRAIN" "$tmp/run.yaml" --init-from "$tmp/good" --set data.path="$tmp/tok4.bin" 2>&1 | grep -q warning; then
  pass hf_errors/other_tokenizer_warned
else fail hf_errors/other_tokenizer_warned "$(grep -i warn "$tmp/out") $(tail -2 "$tmp/err")"; fi
expect hf_errors/bad_hf_dtype "key 'checkpoint.hf_dtype': unknown dtype 'fp8' \(expected fp32\|bf16\|fp16\)" -- \
  "$TRAIN" "$tmp/run.yaml" --set checkpoint.hf_dtype=fp8
expect hf_errors/export_not_a_checkpoint "export-hf: error: $tmp/good is not a checkpoint" -- \
  "$EXPORT" "$tmp/good" "$tmp/out_hf"
expect hf_errors/export_bad_dtype "export-hf: error: --dtype: expected fp32, bf16 or fp16" -- \
  "$EXPORT" "$tmp/good" "$tmp/out_hf" --dtype fp8
exit $((fails > 0))
