#!/usr/bin/env bash
# test: timeout=600 asan=no
# test_train_invariant.sh — train.rank_invariant (issue 51; runtime/fsdp.h,
# docs/RUNTIME.md "Rank-invariant training"): the same global batch of G
# micro-batches (train.grad_groups) trained on 1, 2 or 4 ranks gives the
# same parameters bit for bit.
#   (a) the matrix: G = 4 at 1, 2 and 4 ranks (grad_accum 4, 2, 1),
#       compressed and raw, fp32 and bf16 reduction (bf16 gathers): every
#       step's loss and norm and the final parameter hash the same in every
#       cell of one reduction dtype; G = 8 (grad_accum 8, 2) likewise
#       (raw at 2 ranks and G = 8 at 2 ranks with ZIPCCL_TEST_LONG=1);
#       qwen3-moe-tiny (capacity drops, the aux loss per micro-batch:
#       moe.aux_loss_scope rank) at EP 1 on 1, 2 and 4 ranks, EP 2 on 2
#       and 4, EP 4 on 4 (the experts per source rank, models/moe.c),
#       fp32 and bf16 reduction, likewise (compressed; bf16 at 1 and 4
#       ranks; raw at EP 4; every cell compressed and raw with
#       ZIPCCL_TEST_LONG=1);
#   (b) the test can fail: without rank_invariant 1 and 4 ranks differ (the
#       reduce-scatter sums ranks in another order than accumulation);
#   (c) a checkpoint of 4 ranks resumed on 1 rank gives the bits of the
#       uninterrupted 4-rank run (the replay recipe of docs/RUNTIME.md),
#       dense, and MoE from EP 4 to EP 1;
#   (d) the warp-emulated CUDA device: 1 and 2 ranks the same bits, dense,
#       and MoE at EP 1 and EP 2 (not in the sanitizer build, which has no
#       emulator);
#   (e) refused with a clear error: 3 ranks (not a power of two); MoE at
#       EP > 1 with the exchange in chunks, with bf16 rows, or with experts
#       not a multiple of the norm's block; MoE with the aux loss over the
#       ranks' micro-batch; a data.grad_accum beside grad_groups is
#       replaced, with a note.
# A planted change of the tree's order fails (a): tests/mutate_tree_order.sh
# (make test-long).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
tiny_yaml 20 1 0 2
sed -i "s/grad_accum: 1,//" "$tmp/tiny.yaml" # train.grad_groups sets it
EMU=${EMU:-$BUILD/gpu/train_emu}
INV="--set train.rank_invariant=true"
same() { python3 tests/compare_runs.py "$1" "$2" exact --same-steps; }
hash_of() { grep -o '"param_hash": "[0-9a-f]*"' "$1" | cut -d'"' -f4; }

# (a) one reference per (G, reduce dtype); every other cell against it
cell() { # cell NAME REF NP [args...]
  local name=$1 ref=$2 np=$3; shift 3
  # shellcheck disable=SC2086
  if run "$np" "$tmp/$name.jsonl" $INV "$@"; then
    [ -f "$ref" ] || { cp "$tmp/$name.jsonl" "$ref"; return; }
    why=$(same "$ref" "$tmp/$name.jsonl") && pass "$name ($(hash_of "$tmp/$name.jsonl"))" ||
      fail "$name" "$why"
  else fail "$name" "the run failed"; fi
}
for red in fp32 bf16; do
  for strat in compressed raw; do
    for np in 1 2 4; do
      # one rank has no collective: its raw run is its compressed one
      [ "$np" = 1 ] && [ "$strat" = raw ] && continue
      # raw at 2 ranks with ZIPCCL_TEST_LONG=1 (make test-long): 4 ranks
      # cover the tree across ranks, compressed at 2 the middle count
      [ "$np$strat" = 2raw ] && [ -z "${ZIPCCL_TEST_LONG:-}" ] && continue
      cell "g4_${red}_${strat}_np$np" "$tmp/ref_g4_$red.jsonl" "$np" --set train.grad_groups=4 \
        --set comm.reduce_dtype=$red --set comm.strategy=$strat
    done
  done
done
for np in 1 ${ZIPCCL_TEST_LONG:+2} 4; do
  cell "g8_fp32_compressed_np$np" "$tmp/ref_g8.jsonl" "$np" --set train.grad_groups=8 --set train.steps=10
done
# MoE: EP 1 (every rank its own experts), EP = ranks, and EP 2 of 4 ranks
# (two EP groups whose expert units are also sharded, FSDP-style); experts
# of 3 x 128 x 32 parameters, a multiple of the norm's block
MOE="--set train.grad_groups=4 $TINY_MOE --set model.moe_ffn_hidden=128 --set moe.aux_loss_scope=rank"
for red in fp32 bf16; do
  for npep in 1:1 2:1 2:2 4:4 4:2; do
    np=${npep%:*} ep=${npep#*:}
    for strat in compressed raw; do
      # make test: compressed, bf16 at 1 rank and 4; raw at 4 ranks EP 4
      # (the whole matrix with ZIPCCL_TEST_LONG=1)
      if [ -z "${ZIPCCL_TEST_LONG:-}" ]; then
        [ "$red$strat" = bf16compressed ] && [ "$np" = 2 ] && continue
        [ "$strat" = raw ] && [ "$red$npep" != fp324:4 ] && continue
      fi
      [ "$np$strat" = 1raw ] && continue # one rank has no collective
      # shellcheck disable=SC2086
      cell "moe_${red}_${strat}_np${np}_ep$ep" "$tmp/ref_moe_$red.jsonl" "$np" $MOE \
        --set parallelism.ep="$ep" --set comm.reduce_dtype=$red --set comm.strategy=$strat
    done
  done
done
grep -q "rank-invariant: the global batch's 4 micro-batches of 2 sequences" "$tmp/g4_fp32_raw_np4.jsonl.log" &&
  pass run_header_says_rank_invariant || fail run_header_says_rank_invariant "no header line"

# (b)
if run 1 "$tmp/off1.jsonl" --set train.grad_groups=4 && run 4 "$tmp/off4.jsonl" --set train.grad_groups=4; then
  [ "$(hash_of "$tmp/off1.jsonl")" != "$(hash_of "$tmp/off4.jsonl")" ] &&
    pass "without_rank_invariant_ranks_differ ($(hash_of "$tmp/off1.jsonl") vs $(hash_of "$tmp/off4.jsonl"))" ||
    fail without_rank_invariant_ranks_differ "the same hash: the matrix above proves nothing"
else fail without_rank_invariant_ranks_differ "a run failed"; fi

# (c) 4 ranks to step 10 with a checkpoint, then 1 rank to step 20
if run 4 "$tmp/half.jsonl" $INV --set train.grad_groups=4 --set train.steps=10 --set schedule.total_steps=20 \
       --set checkpoint.dir="$tmp/ck" &&
   run 1 "$tmp/res.jsonl" $INV --set train.grad_groups=4 --resume "$tmp/ck"; then
  why=$(python3 tests/compare_runs.py "$tmp/ref_g4_fp32.jsonl" "$tmp/res.jsonl" exact --steps 11 20) &&
    grep -q "same bits as an uninterrupted run" "$tmp/res.jsonl.log" &&
    pass "resume_4_ranks_on_1_same_bits ($(hash_of "$tmp/res.jsonl"))" ||
    fail resume_4_ranks_on_1_same_bits "$why; $(grep "^# resume" "$tmp/res.jsonl.log")"
else fail resume_4_ranks_on_1_same_bits "a run failed"; fi

# MoE: 4 ranks at EP 4 to step 10, resumed on 1 rank at EP 1
# shellcheck disable=SC2086
if run 4 "$tmp/mhalf.jsonl" $INV $MOE --set parallelism.ep=4 --set train.steps=10 --set schedule.total_steps=20 \
       --set checkpoint.dir="$tmp/mck" &&
   run 1 "$tmp/mres.jsonl" $INV $MOE --set parallelism.ep=1 --resume "$tmp/mck"; then
  why=$(python3 tests/compare_runs.py "$tmp/ref_moe_fp32.jsonl" "$tmp/mres.jsonl" exact --steps 11 20) &&
    [ "$(hash_of "$tmp/mres.jsonl")" = "$(hash_of "$tmp/ref_moe_fp32.jsonl")" ] &&
    pass "moe_resume_ep4_on_1_rank_same_bits ($(hash_of "$tmp/mres.jsonl"))" ||
    fail moe_resume_ep4_on_1_rank_same_bits "$why; $(hash_of "$tmp/mres.jsonl") vs $(hash_of "$tmp/ref_moe_fp32.jsonl")"
else fail moe_resume_ep4_on_1_rank_same_bits "a run failed"; fi

# (d)
if [ -x "$EMU" ]; then
  # bf16 reduction: the tiny model's padded fp32 gradient blocks can be
  # incompressible at a step, which the compression check refuses
  # (docs/RUNTIME.md "Rank-invariant training", the limitation); this check
  # is about the device's bits, not the codec's ratio
  E="--set runtime.device=cuda --set train.grad_groups=2 --set train.steps=4 --set comm.reduce_dtype=bf16"
  # shellcheck disable=SC2086
  if TRAIN=$EMU run 1 "$tmp/e1.jsonl" $INV $E && TRAIN=$EMU run 2 "$tmp/e2.jsonl" $INV $E; then
    why=$(same "$tmp/e1.jsonl" "$tmp/e2.jsonl") && pass "emu_cuda_1_and_2_ranks_same_bits ($(hash_of "$tmp/e1.jsonl"))" ||
      fail emu_cuda_1_and_2_ranks_same_bits "$why"
  else fail emu_cuda_1_and_2_ranks_same_bits "a run failed"; fi
  # MoE: EP 1 on 1 rank and EP 2 on 2 (the experts per source rank on the
  # device, the exchange's rows in device memory)
  EM="--set runtime.device=cuda --set train.steps=2 --set comm.reduce_dtype=bf16 ${MOE/train.grad_groups=4/train.grad_groups=2}"
  # shellcheck disable=SC2086
  if TRAIN=$EMU run 1 "$tmp/em1.jsonl" $INV $EM --set parallelism.ep=1 &&
     TRAIN=$EMU run 2 "$tmp/em2.jsonl" $INV $EM --set parallelism.ep=2; then
    why=$(same "$tmp/em1.jsonl" "$tmp/em2.jsonl") && pass "emu_cuda_moe_ep1_and_ep2_same_bits ($(hash_of "$tmp/em1.jsonl"))" ||
      fail emu_cuda_moe_ep1_and_ep2_same_bits "$why"
  else fail emu_cuda_moe_ep1_and_ep2_same_bits "a run failed"; fi
elif [[ "$BUILD" == *asan* ]]; then echo "SKIP emu_cuda: sanitizer builds have no emulator (Makefile GPU_PROGS)"
else fail emu_cuda "$EMU not built"; fi

# (e)
refused() { # refused NAME PATTERN NP [args...]
  local name=$1 pat=$2 np=$3; shift 3
  # shellcheck disable=SC2086
  if run "$np" "$tmp/$name.jsonl" "$@" >/dev/null; then fail "$name" "accepted"
  elif grep -q "$pat" "$tmp/$name.jsonl.log"; then pass "$name"
  else fail "$name" "$(tail -2 "$tmp/$name.jsonl.log")"; fi
}
refused refuses_3_ranks "ranks (3) and data.grad_accum (2) must be powers of two" 3 $INV --set train.grad_groups=6
if run 1 "$tmp/ga.jsonl" --set train.grad_groups=4 --set data.grad_accum=3 --set train.steps=1 &&
   grep -q "^# note: data.grad_accum 3 (--set data.grad_accum=3) replaced by 4: train.grad_groups 4" "$tmp/ga.jsonl.log" &&
   grep -q "1 ranks x 4 accum" "$tmp/ga.jsonl.log"; then pass grad_groups_replaces_grad_accum_with_a_note
else fail grad_groups_replaces_grad_accum_with_a_note "$(grep "note\|error" "$tmp/ga.jsonl.log")"; fi
# (the config's checks, before any rank count matters: one process)
# shellcheck disable=SC2086
refused refuses_moe_ep_chunks "the exchange runs in one chunk" 1 $INV $MOE --set parallelism.ep=2 \
  --set moe.overlap_chunks=2
# shellcheck disable=SC2086
refused refuses_moe_ep_bf16_rows "set comm.alltoall_dtype: fp32" 1 $INV $MOE --set parallelism.ep=2 \
  --set comm.alltoall_dtype=bf16
# shellcheck disable=SC2086
refused refuses_moe_ep_unaligned_experts "3 x moe_ffn_hidden x dim = 1536 parameters must be a multiple of 4096" 1 \
  $INV $MOE --set parallelism.ep=2 --set model.moe_ffn_hidden=16
# shellcheck disable=SC2086
refused refuses_moe_aux_global "set moe.aux_loss_scope: rank" 1 $INV --set train.grad_groups=2 $TINY_MOE
[ "$fails" = 0 ]
