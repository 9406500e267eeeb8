#!/usr/bin/env bash
# hash_ab.sh BUILD_A BUILD_B — the same bits before and after a change: the
# final parameter hash of a fixed set of short runs, with each build's
# trainer (BUILD/train) and warp-emulated CUDA trainer (BUILD/gpu/train_emu),
# side by side. The suite's tiny dense model and its MoE twin, 4 steps of 2
# micro-batches, on one corpus kept for both builds: dense at 1 and 2 ranks
# (bf16 and fp32 gathers), MoE at EP 2 and with recomputation and bf16
# compute, on cpu, cpu_guarded, the host-coded stand-in (ZRT_COMM_HOSTCODED)
# and the emulated CUDA device. Prints "case hashA hashB same|DIFFER" and
# exits 1 when any differs. For refactors that must not change a bit (build
# the old commit in a worktree: git worktree add /tmp/old COMMIT; make -C
# /tmp/old).
set -u
cd "$(dirname "$0")/.."
A=$1 B=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
cat README.md runtime/fsdp.c >"$T/corpus.txt"
cat >"$T/tiny.yaml" <<YAML
model: {vocab_size: 256, dim: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_hidden: 64,
        max_seq_len: 32, rope_theta: 10000, norm_eps: 1.0e-5, tie_embeddings: false}
data: {path: $T/corpus.txt, tokenizer: byte, seq_len: 32, batch_size: 2, grad_accum: 2,
       val_fraction: 0.05, val_every: 2, val_batches: 2, seed: 7}
train: {steps: 4, seed: 3}
optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, weight_decay: 0.1, grad_clip: 1.0}
schedule: {warmup_steps: 1}
comm: {strategy: compressed, param_dtype: bf16, reduce_dtype: fp32}
YAML
M="--set model.n_experts=4 --set model.n_experts_per_tok=2 --set model.moe_ffn_hidden=16
   --set model.mlp_only_layers=1 --set model.norm_topk_prob=true --set model.capacity_factor=1.0
   --set model.router_aux_loss_coef=0.01 --set model.qk_norm=true"
hash_of() { # hash_of BUILD PROG NP NAME [args...]
  local b=$1 prog=$2 np=$3 name=$4; shift 4
  ZRT_COMM_HOSTCODED=${HC:-0} mpirun -x ZRT_COMM_HOSTCODED --oversubscribe --bind-to none -n "$np" \
    "$b/$prog" "$T/tiny.yaml" --log-json "$T/$name.jsonl" "$@" >"$T/$name.log" 2>&1 || { echo "(failed)"; return; }
  grep -o '"param_hash": "[0-9a-f]*"' "$T/$name.jsonl" | cut -d'"' -f4
}
differ=0
one() { # one NAME PROG NP [args...]
  local name=$1 prog=$2 np=$3; shift 3
  local ha hb
  ha=$(hash_of "$A" "$prog" "$np" "a_$name" "$@")
  hb=$(hash_of "$B" "$prog" "$np" "b_$name" "$@")
  if [ "$ha" = "$hb" ] && [ "$ha" != "(failed)" ]; then echo "$name $ha $hb same"
  else echo "$name $ha $hb DIFFER"; differ=1; fi
}
# shellcheck disable=SC2086
{
one cpu_dense_np1 train 1 --set runtime.device=cpu
one cpu_dense_np2 train 2 --set runtime.device=cpu
one cpu_dense_np2_fp32 train 2 --set runtime.device=cpu --set comm.param_dtype=fp32 --set comm.reduce_dtype=fp32
one guarded_dense_np2 train 2 --set runtime.device=cpu_guarded
HC=1 one hostcoded_dense_np2 train 2 --set runtime.device=cpu
HC=1 one hostcoded_moe_ep2_np2 train 2 --set runtime.device=cpu $M --set parallelism.ep=2
one cpu_moe_ep2_np2 train 2 --set runtime.device=cpu $M --set parallelism.ep=2
one cpu_moe_np2_recompute_bf16 train 2 --set runtime.device=cpu $M --set train.recompute=full --set model.compute=bf16
one guarded_moe_ep2_np2 train 2 --set runtime.device=cpu_guarded $M --set parallelism.ep=2
one emu_dense_np1 gpu/train_emu 1 --set runtime.device=cuda
one emu_dense_np2 gpu/train_emu 2 --set runtime.device=cuda
one emu_moe_ep2_np2 gpu/train_emu 2 --set runtime.device=cuda $M --set parallelism.ep=2
one emu_dense_np2_bf16 gpu/train_emu 2 --set runtime.device=cuda --set model.compute=bf16
}
exit $differ
