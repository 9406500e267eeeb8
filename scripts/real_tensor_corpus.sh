#!/usr/bin/env bash
# real_tensor_corpus.sh — the real-tensor corpus of docs/BENCHMARKS.md
# ("Real tensors"): train a config on 4 ranks and dump what its FSDP
# collectives send (build/train --dump-tensors: each unit as all-gathered,
# and its full gradient as reduce-scatter input, with the unit's tensor
# layout in the file's metadata) at early, middle and late steps, once with
# bf16 and once with fp32 gathers and reduce-scatters; then run the codec
# benchmark over every dump, per unit (what a collective compresses) and per
# tensor (the same bytes cut at tensor boundaries), and summarise per tensor
# kind and dtype (scripts/plot_real_tensors.py: Markdown table and PNG).
#   CONFIGS="a.yaml b.yaml"  configs (default: llama-tiny, llama-100m,
#              qwen3-moe-tiny)
#   STEPS="a b c"  dump steps for every config (default: 10 150 300; the
#              100M config: 2 20 50 100, ~20 s a step on 2 cores); one run
#              per config and dtype pair trains to the last of them and dumps
#              at each (one trajectory, one learning-rate schedule)
#   DTYPES="p/r ..."  param/reduce dtype pairs, a run each (default: bf16/bf16
#              fp32/fp32; the 100M config: bf16/fp32, its own setting, and
#              its bf16 gradients are the fp32 ones rounded to nearest even,
#              which is what reduce_dtype bf16 sends on that trajectory:
#              directory reduce_bf16_rounded, made in the bench phase)
#   OUT=dir    corpus root (default runs/corpus; one directory per config)
#   BUILD=dir  build directory (default build)
#   REPS=n     benchmark repetitions (default 3)
#   PHASE=dump|bench|all|sample  (default all: dump and bench; sample:
#              cut the suite's sample tests/real_tensors/sample.safetensors
#              from the default corpus, see tests/test_real_tensors.c)
# Only rank 0's dumps are kept (the others are alike). Left out: the MoE
# expert exchange rows (--dump-tensors dumps the FSDP collectives only).
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIGS=${CONFIGS:-"configs/llama-tiny.yaml configs/llama-100m.yaml configs/qwen3-moe-tiny.yaml"}
BUILD=${BUILD:-build}
REPS=${REPS:-3}
ROOT=${OUT:-runs/corpus}
PHASE=${PHASE:-all}
CODECS=zstd-1-bg,zipccl-fast,zipccl-dense
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
[ -f data/fortunes.txt ] || scripts/prepare_data.sh

steps_of() {
  if [ -n "${STEPS:-}" ]; then echo "$STEPS"
  elif [ "$(basename "$1" .yaml)" = llama-100m ]; then echo 2 20 50 100
  else echo 10 150 300; fi
}
dtypes_of() {
  if [ -n "${DTYPES:-}" ]; then echo "$DTYPES"
  elif [ "$(basename "$1" .yaml)" = llama-100m ]; then echo bf16/fp32
  else echo bf16/bf16 fp32/fp32; fi
}

if [ "$PHASE" != bench ]; then
  for cfg in $CONFIGS; do
    name=$(basename "$cfg" .yaml)
    steps=$(steps_of "$cfg")
    last=${steps##* }
    for pr in $(dtypes_of "$cfg"); do
      p=${pr%/*} r=${pr#*/}
      dir="$ROOT/$name/param_$p-reduce_$r"
      todo=0
      for step in $steps; do [ -f "$dir/step${step}_rank0_grads.safetensors" ] || todo=1; done
      [ $todo = 1 ] || continue
      mkdir -p "$dir"
      echo "corpus: $name steps $steps param $p reduce $r"
      mpirun --oversubscribe --bind-to none -n 4 "$BUILD/train" "$cfg" \
        --set comm.strategy=compressed --set train.steps="$last" \
        --set comm.param_dtype="$p" --set comm.reduce_dtype="$r" --log-json "$dir/run.jsonl" \
        --dump-tensors "$(echo $steps | tr ' ' ,)" "$dir" > "$dir/run.log" 2>&1
      rm -f "$dir"/step*_rank[1-9]_*.safetensors "$dir"/*_batch.safetensors
    done
  done
fi

[ "$PHASE" = dump ] && exit 0
if [ "$PHASE" = sample ]; then
  # One chunk (16384 elements) or half of one per case: the tied embedding's
  # gradient early (near rank 1: zstd's best case) and late (rows of tokens
  # in and out of the batch at different scales), a gradient with
  # per-column scales (wo), block gradients of both models, an MoE expert's
  # gradient, parameters; bf16 and fp32.
  t=$ROOT/llama-tiny; h=$ROOT/llama-100m; m=$ROOT/qwen3-moe-tiny
  b=param_bf16-reduce_bf16; f=param_fp32-reduce_fp32
  python3 scripts/plot_real_tensors.py --sample tests/real_tensors/sample.safetensors \
    "$t/$b/step10_rank0_grads.safetensors:tok_emb:0:16384:grads.bf16.llama-tiny.step10.tok_emb" \
    "$t/$b/step300_rank0_grads.safetensors:tok_emb:0:16384:grads.bf16.llama-tiny.step300.tok_emb" \
    "$t/$b/step300_rank0_grads.safetensors:layers.1.wo:0:16384:grads.bf16.llama-tiny.step300.layers.1.wo" \
    "$t/$b/step150_rank0_grads.safetensors:layers.2.w_down:0:16384:grads.bf16.llama-tiny.step150.layers.2.w_down" \
    "$h/$b/step2_rank0_grads.safetensors:layers.5.wq:0:16384:grads.bf16.llama-100m.step2.layers.5.wq" \
    "$h/$b/step2_rank0_grads.safetensors:layers.9.w_gate:0:16384:grads.bf16.llama-100m.step2.layers.9.w_gate" \
    "$m/$b/step150_rank0_grads.safetensors:layers.1.experts.0.w_up:0:16384:grads.bf16.qwen3-moe-tiny.step150.layers.1.experts.0.w_up" \
    "$t/$f/step300_rank0_grads.safetensors:layers.1.w_gate:0:8192:grads.fp32.llama-tiny.step300.layers.1.w_gate" \
    "$t/$f/step150_rank0_grads.safetensors:layers.3.wo:0:8192:grads.fp32.llama-tiny.step150.layers.3.wo" \
    "$t/$b/step300_rank0_params.safetensors:layers.1.wq:0:16384:params.bf16.llama-tiny.step300.layers.1.wq" \
    "$t/$f/step300_rank0_params.safetensors:layers.2.w_up:0:8192:params.fp32.llama-tiny.step300.layers.2.w_up"
  exit 0
fi
json="$ROOT/bench.jsonl"
: > "$json"
: > "$ROOT/bench.log"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# bf16 gradients of a run that reduced in fp32 (the 100M config): rounded here
for f in "$ROOT"/*/param_bf16-reduce_fp32/step*_rank0_grads.safetensors; do
  [ -f "$f" ] || continue
  d=$(dirname "$(dirname "$f")")/reduce_bf16_rounded
  mkdir -p "$d"
  [ -f "$d/$(basename "$f")" ] || python3 scripts/plot_real_tensors.py --to-bf16 "$f" "$d/$(basename "$f")"
done
for f in "$ROOT"/*/param_*/step*_rank0_*.safetensors "$ROOT"/*/reduce_bf16_rounded/step*_rank0_grads.safetensors; do
  [ -f "$f" ] || continue
  split="$tmp/split.safetensors"
  python3 scripts/plot_real_tensors.py --split "$f" "$split"
  for g in "$f" "$split"; do
    "$BUILD/zipccl-codec-bench" --input "$g" -c "$CODECS" -n "$REPS" --json 2>>"$ROOT/bench.log" | grep "^{" |
      sed "s|^{|{\"file\":\"$f\",\"split\":$([ "$g" = "$f" ] && echo false || echo true),|" >> "$json"
  done
  rm -f "$split"
done
python3 scripts/plot_real_tensors.py "$json" "$ROOT/real_tensors.png"
ls "$ROOT"/*/param_*/run.jsonl >/dev/null 2>&1 &&
  python3 scripts/plot_real_tensors.py --steps "$ROOT/wire_ratio_per_step.png" "$ROOT"/*/param_*/run.jsonl
