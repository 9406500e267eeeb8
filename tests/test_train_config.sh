#!/usr/bin/env bash
# test: timeout=120
# test_train_config.sh — bad input to build/train gets a clear error that
# names where the bad value came from (the file and line, or the --set
# assignment itself), the key, and for an unknown key the nearest known one,
# with exit status 2 and no crash; the 8B and the Qwen3-30B-A3B configs fail at start with the
# memory estimate.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
TRAIN=${TRAIN:-$BUILD/train}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
[ -x "$TRAIN" ] || { echo "FAIL train_config: $TRAIN not built"; exit 1; }
printf 'hello world, this is a tiny corpus. %.0s' $(seq 200) >"$tmp/c.txt"

good() { cat <<YAML
model:
  vocab_size: 256
  dim: 32
  n_layers: 1
  n_heads: 2
  n_kv_heads: 1
  ffn_hidden: 64
  max_seq_len: 16
data:
  path: $tmp/c.txt
  seq_len: 16
  batch_size: 2
train:
  steps: 2
YAML
}

# expect NAME RC_WANTED PATTERN -- ARGS: runs train, checks status and stderr
expect() {
  local name=$1 want=$2 pat=$3; shift 4
  "$TRAIN" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL $name: exit $rc, want $want; stderr: $(head -c 300 "$tmp/err")"; fails=$((fails + 1))
  elif ! grep -qE -- "$pat" "$tmp/err"; then
    echo "FAIL $name: stderr lacks /$pat/: $(head -c 300 "$tmp/err")"; fails=$((fails + 1))
  else
    echo "PASS $name"
  fi
}

good >"$tmp/good.yaml"
if "$TRAIN" "$tmp/good.yaml" >"$tmp/out" 2>"$tmp/err" && grep -q '^# done: 2 steps' "$tmp/out" &&
   ! [ -s "$tmp/err" ]; then echo "PASS good_config_runs"
else echo "FAIL good_config_runs: $(tail -3 "$tmp/err")"; fails=$((fails + 1)); fi

good | sed 's/^  dim: 32/  dim: 32\n  dimm: 4/' >"$tmp/unknown.yaml"
expect unknown_key 2 "unknown.yaml:4: unknown key 'model.dimm' \(did you mean 'model.dim'\?\)" -- "$tmp/unknown.yaml"

good | sed 's/^  n_layers: 1/  n_layers: two/' >"$tmp/type.yaml"
expect wrong_type 2 "type.yaml:4: key 'model.n_layers': expected an integer, got 'two'" -- "$tmp/type.yaml"

good | sed 's/^  batch_size: 2/  batch_size: -3/' >"$tmp/range.yaml"
expect out_of_range 2 "range.yaml:12: key 'data.batch_size': -3 is out of range" -- "$tmp/range.yaml"

{ good; printf 'optimizer:\n  lr: fast\n'; } >"$tmp/float.yaml"
expect wrong_type_float 2 "float.yaml:16: key 'optimizer.lr': expected a number" -- "$tmp/float.yaml"

{ good; printf 'comm:\n  strategy: zip\n'; } >"$tmp/strat.yaml"
expect bad_strategy 2 "strat.yaml:16: key 'comm.strategy': unknown strategy 'zip'" -- "$tmp/strat.yaml"

{ good; printf 'comm:\n  overrides:\n    - {pattern: "layers.*", strat: raw}\n'; } >"$tmp/ovr.yaml"
expect bad_override_key 2 "ovr.yaml:17: unknown key 'comm.overrides.strat'" -- "$tmp/ovr.yaml"

{ good; printf 'bogus:\n  x: 1\n'; } >"$tmp/section.yaml"
expect unknown_section 2 "section.yaml:15: unknown key 'bogus'" -- "$tmp/section.yaml"

{ good; printf 'model:\n  dim: [1, 2\n'; } >"$tmp/syntax.yaml"
expect yaml_syntax_error 2 "syntax.yaml:[0-9]+:[0-9]+: YAML syntax error" -- "$tmp/syntax.yaml"

good | sed 's/^  n_heads: 2/  n_heads: 3/' >"$tmp/heads.yaml"
expect model_shape_check 2 "heads.yaml: model: .*n_heads" -- "$tmp/heads.yaml"

expect missing_config 2 "nope.yaml: cannot open config" -- "$tmp/nope.yaml"

good | sed "s#path: .*#path: $tmp/missing.txt#" >"$tmp/nodata.yaml"
expect missing_data_file 2 "missing.txt: cannot open data file" -- "$tmp/nodata.yaml"

expect set_unknown_key 2 "--set train.stepz=3: unknown key 'train.stepz' \(did you mean 'train.steps'\?\)" -- "$tmp/good.yaml" --set train.stepz=3
expect set_key_in_wrong_section 2 "unknown key 'model.seq_len' \(did you mean 'data.seq_len'\?\)" -- "$tmp/good.yaml" --set model.seq_len=8
expect set_unknown_key_no_wild_guess 2 "unknown key 'model.depth'\$" -- "$tmp/good.yaml" --set model.depth=3
expect set_out_of_range 2 "--set train.steps=0: key 'train.steps': 0 is out of range" -- "$tmp/good.yaml" --set train.steps=0
# A cross-field check blames the --set that broke it, not the file...
expect set_seq_len_beyond_max 2 "error: --set data.seq_len=256: key 'data.seq_len': 256 exceeds model.max_seq_len 16 \(.*good.yaml:8\)" -- "$tmp/good.yaml" --set data.seq_len=256
expect set_model_shape_named 2 "good.yaml with --set model.n_heads=3: model: .*n_heads" -- "$tmp/good.yaml" --set model.n_heads=3
# ...and the file's line when the file holds the value.
good | sed 's/^  seq_len: 16/  seq_len: 32/' >"$tmp/seq.yaml"
expect file_seq_len_beyond_max 2 "error: [^ ]*seq.yaml:11: key 'data.seq_len': 32 exceeds model.max_seq_len 16 \([^ ]*seq.yaml:8\)" -- "$tmp/seq.yaml"
expect set_malformed 2 "expected dotted.key=value" -- "$tmp/good.yaml" --set train.steps
expect unknown_option 2 "unknown or incomplete option '--frobnicate'" -- "$tmp/good.yaml" --frobnicate
expect resume_not_a_checkpoint 2 "is not a checkpoint" -- "$tmp/good.yaml" --resume "$tmp"
expect llama3_8b_does_not_fit 2 "does not fit: 8.03 B parameters need .* available" -- configs/llama3-8b.yaml
expect qwen3_30b_a3b_does_not_fit 2 "does not fit: 30.5 B parameters need .* available" -- configs/qwen3-30b-a3b.yaml --set parallelism.ep=1
expect qwen3_30b_a3b_ep_vs_ranks 2 "qwen3-30b-a3b.yaml:[0-9]*: key 'parallelism.ep': 8 does not divide the 1 ranks" -- configs/qwen3-30b-a3b.yaml
exit $((fails > 0))
