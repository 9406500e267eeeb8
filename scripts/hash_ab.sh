#!/usr/bin/env bash
# hash_ab.sh BUILD_A BUILD_B — the same bits before and after a change: the
# final parameter hash of a fixed set of short runs, with each build's
# trainer (BUILD/train) and warp-emulated CUDA trainer (BUILD/gpu/train_emu),
# side by side. The suite's tiny dense model and its MoE twin
# (tests/lib.sh: tiny_yaml, TINY_MOE), 4 steps of 2 micro-batches, on one
# corpus for both builds: dense at 1 and 2 ranks (bf16 and fp32 gathers), MoE at EP 2 and with recomputation and bf16
# compute, on cpu, cpu_guarded, the host-coded stand-in (ZRT_COMM_HOSTCODED)
# and the emulated CUDA device, and train.rank_invariant's tree (dense and
# MoE on cpu, dense on the emulated device). Prints "case hashA hashB same|DIFFER" and
# exits 1 when any differs. For refactors that must not change a bit (build
# the old commit in a worktree: git worktree add /tmp/old COMMIT; make -C
# /tmp/old).
set -u
cd "$(dirname "$0")/.."
A=$1 B=$2
. tests/lib.sh # the tiny models (tiny_yaml, TINY_MOE), the MPI environment, $tmp
tiny_yaml 4 2 2 1
M=$TINY_MOE
hash_of() { # hash_of BUILD PROG NP NAME [args...]
  local b=$1 prog=$2 np=$3 name=$4; shift 4
  ZRT_COMM_HOSTCODED=${HC:-0} mpirun -x ZRT_COMM_HOSTCODED --oversubscribe --bind-to none -n "$np" \
    "$b/$prog" "$tmp/tiny.yaml" --log-json "$tmp/$name.jsonl" "$@" >"$tmp/$name.log" 2>&1 || { echo "(failed)"; return; }
  grep -o '"param_hash": "[0-9a-f]*"' "$tmp/$name.jsonl" | cut -d'"' -f4
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
one emu_dense_np1_bf16 gpu/train_emu 1 --set runtime.device=cuda --set model.compute=bf16
one cpu_dense_np2_bf16 train 2 --set runtime.device=cpu --set model.compute=bf16
one guarded_dense_np1_recompute_bf16 train 1 --set runtime.device=cpu_guarded --set train.recompute=full --set model.compute=bf16
one cpu_dense_np2_fp32_bf16 train 2 --set runtime.device=cpu --set comm.param_dtype=fp32 --set comm.reduce_dtype=fp32 --set model.compute=bf16
H64="--set model.dim=128 --set model.n_heads=2 --set model.n_kv_heads=1" # head dim 64: flash attention in bf16
one cpu_dense_hd64_np2_bf16 train 2 --set runtime.device=cpu $H64 --set model.compute=bf16
one emu_dense_hd64_np1_bf16 gpu/train_emu 1 --set runtime.device=cuda $H64 --set model.compute=bf16
I="--set train.rank_invariant=true"
one cpu_inv_dense_np2 train 2 --set runtime.device=cpu $I
one cpu_inv_dense_np2_fp32 train 2 --set runtime.device=cpu $I --set comm.reduce_dtype=fp32
one cpu_inv_moe_np2 train 2 --set runtime.device=cpu $M $I --set moe.aux_loss_scope=rank
one emu_inv_dense_np2 gpu/train_emu 2 --set runtime.device=cuda $I
}
exit $differ
