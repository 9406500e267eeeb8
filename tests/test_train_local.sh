#!/usr/bin/env bash
# test: timeout=300 asan=yes
# test_train_local.sh — a unit whose group is one rank runs no collective
# (runtime/fsdp.h fsdp_unit_local): at one rank every unit, at EP = the
# rank count the expert units. The model reads the fp32 shard itself, or
# its bf16 cast made in place of the gather; the gradient is added into the
# fp32 shard (what an fp32 reduce-scatter over one rank gives, bit for bit:
# the change's hash A/B, scripts/hash_ab.sh, showed all 13 cases the same).
#   (a) one rank: the plan lists every unit as local, and strategy
#       compressed, raw and native give the same bits;
#   (b) one rank: comm.reduce_dtype bf16 gives the bits of fp32 (nothing is
#       rounded to bf16 on its way into the shard);
#   (c) one rank on the warp emulator's CUDA device: no codec time and no
#       host wait of a collective in any step, and the bits of its own
#       raw run (not in the sanitizer build, which has no emulator);
#   (d) MoE at EP 2 on 2 ranks: the expert unit is local in the plan and
#       absent from what ran, the dense units are not, and compressed
#       equals raw;
#   (e) train.rank_invariant on 1 rank (local units) and 2 equal, the
#       validation loss too.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
tiny_yaml 4 2 2 1
M=$TINY_MOE
EMU=${EMU:-$BUILD/gpu/train_emu}
same() { python3 tests/compare_runs.py "$1" "$2" exact --same-steps; }
planrows() { sed -n '/^# plan: unit/,/^#   per step/p' "$1.log" | grep -v '^# plan\|per step'; }

# (a)
if run 1 "$tmp/c.jsonl" && run 1 "$tmp/r.jsonl" --set comm.strategy=raw &&
   run 1 "$tmp/n.jsonl" --set comm.strategy=native; then
  rows=$(planrows "$tmp/c.jsonl")
  if [ -n "$rows" ] && ! grep -v "| local (no collective) [0-9]*x *| local (no collective) [0-9]*x" <<<"$rows" >/dev/null; then
    pass one_rank_every_unit_local
  else fail one_rank_every_unit_local "$rows"; fi
  why=$(same "$tmp/c.jsonl" "$tmp/r.jsonl") && why=$(same "$tmp/c.jsonl" "$tmp/n.jsonl") &&
    pass one_rank_strategies_same_bits || fail one_rank_strategies_same_bits "$why"
else fail one_rank_runs "a run failed"; fi
# (b)
if run 1 "$tmp/b16.jsonl" --set comm.reduce_dtype=bf16 && run 1 "$tmp/f32.jsonl" --set comm.reduce_dtype=fp32; then
  why=$(same "$tmp/b16.jsonl" "$tmp/f32.jsonl") && pass one_rank_bf16_reduce_is_fp32 ||
    fail one_rank_bf16_reduce_is_fp32 "$why"
else fail one_rank_bf16_reduce_is_fp32 "a run failed"; fi
# (c)
if [ -x "$EMU" ]; then
  if TRAIN=$EMU run 1 "$tmp/e.jsonl" --set runtime.device=cuda &&
     TRAIN=$EMU run 1 "$tmp/er.jsonl" --set runtime.device=cuda --set comm.strategy=raw; then
    why=$(python3 - "$tmp/e.jsonl" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l and '"step"' in l]
bad = [(s["step"], s["codec_ms"], s["host_waits_comm"]) for s in steps if s["codec_ms"] != 0 or s["host_waits_comm"] != 0]
print("steps %d, (step, codec_ms, host_waits_comm) not zero: %s" % (len(steps), bad))
sys.exit(1 if bad or not steps else 0)
PY
) && pass "emu_one_rank_no_codec_no_comm_wait ($why)" || fail emu_one_rank_no_codec_no_comm_wait "$why"
    why=$(same "$tmp/e.jsonl" "$tmp/er.jsonl") && pass emu_one_rank_compressed_is_raw ||
      fail emu_one_rank_compressed_is_raw "$why"
  else fail emu_one_rank "a run failed"; fi
elif [[ "$BUILD" == *asan* ]]; then echo "SKIP emu_one_rank: sanitizer builds have no emulator (Makefile GPU_PROGS)"
else fail emu_one_rank "$EMU not built"; fi
# (d)
# shellcheck disable=SC2086
if run 2 "$tmp/x.jsonl" $M --set parallelism.ep=2 && run 2 "$tmp/xr.jsonl" $M --set parallelism.ep=2 --set comm.strategy=raw; then
  rows=$(planrows "$tmp/x.jsonl")
  ran=$(sed -n '/^# what ran/,/^# [a-z]/p' "$tmp/x.jsonl.log")
  if grep -q "^#   layers.0.experts *| local (no collective) 4x *| local (no collective) 2x" <<<"$rows" &&
     [ "$(grep -c "local (no collective)" <<<"$rows")" = 1 ] &&
     ! grep -q "experts" <<<"$ran" && grep -q "head *reducescatter" <<<"$ran"; then
    pass ep_equal_ranks_experts_local
  else fail ep_equal_ranks_experts_local "plan: $rows / ran: $ran"; fi
  why=$(same "$tmp/x.jsonl" "$tmp/xr.jsonl") && pass ep_equal_ranks_compressed_is_raw ||
    fail ep_equal_ranks_compressed_is_raw "$why"
else fail ep_equal_ranks "a run failed"; fi
# (e) train.rank_invariant's tree through a local unit (1 rank) and the
# All-to-All with a bf16 tree (2 ranks), the same bits (the sanitizer
# build's look at that code; tests/test_train_invariant.sh has the matrix)
RI="--set train.rank_invariant=true --set train.grad_groups=2 --set comm.reduce_dtype=bf16"
# shellcheck disable=SC2086
if run 1 "$tmp/i1.jsonl" $RI && run 2 "$tmp/i2.jsonl" $RI; then
  why=$(same "$tmp/i1.jsonl" "$tmp/i2.jsonl") && pass rank_invariant_local_and_2_ranks_same_bits ||
    fail rank_invariant_local_and_2_ranks_same_bits "$why"
else fail rank_invariant_local_and_2_ranks_same_bits "a run failed"; fi
[ "$fails" = 0 ]
