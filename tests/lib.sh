# lib.sh — shared set-up of the shell tests (sourced, from the repository root).
# The same environment scripts/run_tests.sh gives its children, so a test also
# runs standalone: one thread per rank, Open MPI allowed as root and
# oversubscribed, a scratch directory removed on exit, PASS/FAIL helpers.
BUILD=${BUILD:-build}
TRAIN=${TRAIN:-$BUILD/train}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }

# The suite's small dense model on a corpus cut from the tree itself: 20
# steps in a second or two. tiny_yaml STEPS GRAD_ACCUM VAL_EVERY WARMUP
# writes $tmp/corpus.txt and $tmp/tiny.yaml (bf16 gathers, fp32 reduce).
tiny_yaml() {
  cat README.md docs/*.md runtime/*.c models/*.c >"$tmp/corpus.txt"
  cat >"$tmp/tiny.yaml" <<YAML
model: {vocab_size: 256, dim: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 64,
        max_seq_len: 32, rope_theta: 10000, norm_eps: 1.0e-5, tie_embeddings: false}
data: {path: $tmp/corpus.txt, tokenizer: byte, seq_len: 32, batch_size: 2, grad_accum: $2,
       val_fraction: 0.05, val_every: $3, val_batches: 2, seed: 7}
train: {steps: $1, seed: 3}
optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, weight_decay: 0.1, grad_clip: 1.0}
schedule: {warmup_steps: $4}
comm: {strategy: compressed, param_dtype: bf16, reduce_dtype: fp32}
YAML
}

# The MoE twin of the tiny model: --set overrides on top of tiny.yaml (4
# experts, top-2, the second block dense, renormalised top-k, capacity 1.0,
# the aux loss, QK-norm).
TINY_MOE="--set model.n_experts=4 --set model.n_experts_per_tok=2 --set model.moe_ffn_hidden=16
   --set model.mlp_only_layers=1 --set model.norm_topk_prob=true --set model.capacity_factor=1.0
   --set model.router_aux_loss_coef=0.01 --set model.qk_norm=true"

# run NP OUT [args...]: $TRAIN on $tmp/tiny.yaml at NP ranks, the JSON log
# in OUT and the output in OUT.log (its tail printed when the run fails).
# ZRT_TEST_TIMES=FILE appends "seconds ranks test run" per run (what the
# suite's time goes to).
run() {
  local np=$1 out=$2 t0=$EPOCHREALTIME; shift 2
  if [ "$np" = 1 ]; then
    "$TRAIN" "$tmp/tiny.yaml" --log-json "$out" "$@" >"$out.log" 2>&1
  else
    mpirun --oversubscribe --bind-to none -n "$np" "$TRAIN" "$tmp/tiny.yaml" --log-json "$out" \
      "$@" >"$out.log" 2>&1
  fi
  local rc=$?
  [ -n "${ZRT_TEST_TIMES:-}" ] &&
    echo "$(python3 -c "print('%.2f' % ($EPOCHREALTIME - $t0))") $np $(basename "$0" .sh) $(basename "$out" .jsonl)" >>"$ZRT_TEST_TIMES"
  [ $rc -eq 0 ] || { echo "--- $out.log (exit $rc)"; tail -5 "$out.log"; }
  return $rc
}
