#!/usr/bin/env bash
# test: timeout=600
# test_train_device.sh — runtime.device: the model on a backend whose memory
# the host cannot touch, proven without a GPU.
#   (a) runtime.device=cpu_guarded (kernels/cpu_guarded.c: every backend
#       allocation PROT_NONE outside a kernel-table call) trains exactly as
#       runtime.device=cpu: every step's loss, norm and lr and the final
#       parameter hash, at 1 and 2 ranks, with gradient accumulation,
#       validation passes, units kept gathered between forward and backward,
#       bf16 and fp32 gathers, and the tensor dump (which reads the logits
#       back from the device). A host read of device memory anywhere in
#       models/ or runtime/ would kill these runs with SIGSEGV.
#   (b) a checkpoint written by a guarded run resumes on the CPU table and
#       ends with the uninterrupted run's hash.
#   (c) bad requests are refused by name: runtime.device=cuda on a machine
#       without a usable GPU (or a build without CUDA), an unknown device,
#       comm.net=nccl off a GPU, an unknown network.
# The gathers and reduce-scatters take the device's buffers (ZipCCL stages
# them), and the runs say how many bytes that moved (bus_bytes); with host
# memory standing in for a device (ZRT_COMM_HOSTCODED=1) they take the path
# a GPU run's take, coded "on the device", with the host path's bits, and
# with a host stand-in for a device network (ZRT_COMM_HOSTNET=1) the path of
# comm.net: nccl, with the same bits.
# The MoE model runs on the guarded device too (EP 1, and EP 2 with the
# exchange's rows on the device; at 4 ranks and traced, not in the
# sanitizer build, for the suite's time), with the same bits,
# and so does model.compute: bf16 (within 2% of fp32, not equal to it), and
# train.recompute: full with a chunked output layer (dense and MoE).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh

tiny_yaml 8 2 4 2
same() { python3 tests/compare_runs.py "$1" "$2" exact --same-steps >/dev/null; }

[ -x "$TRAIN" ] || { echo "FAIL train_device: $TRAIN not built"; exit 1; }

# (a) guarded == cpu, bit for bit
for np in 1 2; do
  for variant in "bf16" "fp32 --set comm.param_dtype=fp32 --set parallelism.reshard_after_forward=false"; do
    name=${variant%% *}
    extra=${variant#"$name"}
    # shellcheck disable=SC2086
    if run "$np" "$tmp/cpu_$np$name.jsonl" --set runtime.device=cpu $extra \
         --dump-tensors 3 "$tmp/dump_cpu_$np$name" &&
       run "$np" "$tmp/grd_$np$name.jsonl" --set runtime.device=cpu_guarded $extra \
         --dump-tensors 3 "$tmp/dump_grd_$np$name"; then
      if ! grep -q "^# device: cpu_guarded" "$tmp/grd_$np$name.jsonl.log"; then
        fail "guarded_${np}ranks_$name" "the run did not say it computes on cpu_guarded"
      elif same "$tmp/cpu_$np$name.jsonl" "$tmp/grd_$np$name.jsonl"; then
        d=0
        for f in "$tmp/dump_cpu_$np$name"/*; do
          cmp -s "$f" "$tmp/dump_grd_$np$name/$(basename "$f")" || d=1
        done
        if [ $d = 0 ] && [ -n "$(ls "$tmp/dump_cpu_$np$name")" ]; then
          pass "guarded_equals_cpu_${np}ranks_$name"
        else
          fail "guarded_${np}ranks_$name" "the tensor dumps differ"
        fi
      else
        fail "guarded_${np}ranks_$name" "$(python3 tests/compare_runs.py "$tmp/cpu_$np$name.jsonl" \
              "$tmp/grd_$np$name.jsonl" exact --same-steps 2>&1 | tail -2)"
      fi
    else
      fail "guarded_${np}ranks_$name" "a run failed"
    fi
  done
done
# ... with ZipCCL taking the device's buffers (fsdp.c gives the gather and
# reduce-scatter communicators the device's memory table): every step of the
# guarded 2-rank run logs bytes copied between the device and the host by
# ZipCCL, and the CPU run, whose buffers are host memory, logs none.
python3 - "$tmp/grd_2bf16.jsonl" "$tmp/cpu_2bf16.jsonl" <<'EOF'
import json, sys
g = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')]
c = [json.loads(l) for l in open(sys.argv[2]) if l.startswith('{"step"')]
ok = g and all(r.get("bus_bytes", 0) > 0 for r in g) and c and all("bus_bytes" not in r for r in c)
sys.exit(0 if ok else 1)
EOF
if [ $? = 0 ]; then pass guarded_collectives_take_device_buffers
else fail guarded_collectives_take_device_buffers "bus_bytes: guarded $(grep -o '"bus_bytes": [0-9]*' "$tmp/grd_2bf16.jsonl" | head -2 | tr '\n' ' ') cpu $(grep -c bus_bytes "$tmp/cpu_2bf16.jsonl")"
fi

# same_or_fail NAME A B: PASS NAME if run logs A and B agree bit for bit
# (every step and the final hash), else FAIL with where they part
same_or_fail() {
  if same "$2" "$3"; then pass "$1"
  else fail "$1" "$(python3 tests/compare_runs.py "$2" "$3" exact --same-steps 2>&1 | tail -2)"; fi
}

# guarded_same NAME NP [args...]: the run on cpu_guarded equals the run on
# cpu bit for bit
guarded_same() {
  local name=$1 np=$2
  shift 2
  if run "$np" "$tmp/${name}_cpu.jsonl" --set runtime.device=cpu "$@" &&
     run "$np" "$tmp/${name}_grd.jsonl" --set runtime.device=cpu_guarded "$@"; then
    same_or_fail "$name" "$tmp/${name}_cpu.jsonl" "$tmp/${name}_grd.jsonl"
  else
    fail "$name" "a run failed"
  fi
}

# (a') the MoE model (top-2 of 4 experts, one dense block, a capacity that
# drops pairs, the aux loss) at EP 1: guarded == cpu at 1 and 2 ranks
M=$TINY_MOE
# shellcheck disable=SC2086
for np in 1 2; do guarded_same "guarded_equals_cpu_moe_${np}ranks" "$np" $M; done

# (a''') expert parallelism on the device: the exchange's rows stay in the
# device's memory (expert.c: row buffers, regrouping and casts through the
# kernel table) and its AlltoAllv takes them as they are (ZipCCL stages).
# guarded == cpu at EP 2 on 2 ranks (fp32 exchange, one chunk) and on 4
# ranks (EP 2 x 2 expert-data-parallel, a bf16 exchange in 2 chunks with
# overlap, dropless)
# shellcheck disable=SC2086
guarded_same guarded_equals_cpu_moe_ep2_2ranks 2 $M --set parallelism.ep=2
# (4 ranks: not in the sanitizer build, for the suite's time; the 2-rank
# exchange above runs there)
if [[ "$BUILD" != *asan* ]]; then
  # shellcheck disable=SC2086
  guarded_same guarded_equals_cpu_moe_ep2_4ranks 4 $M --set parallelism.ep=2 \
    --set comm.alltoall_dtype=bf16 --set moe.overlap_chunks=2 --set model.capacity_factor=0
fi

# (a''') the path a GPU run's collectives take, with host memory standing in
# for the device (ZRT_COMM_HOSTCODED=1: the collectives take zdev_cpu(),
# coded, so compressed gathers and reduce-scatters are coded "on the device"
# by the CPU codec: one frame per peer, the sizes summed, the frames
# exchanged, the reduce-scatter's sum in the canonical order): compressed
# runs equal the host path's bit for bit, dense at 2 ranks and MoE at EP 2 on
# 4 ranks (whose expert-data-parallel communicators take the path too).
hostcoded_same() {
  local name=$1 np=$2
  shift 2
  if run "$np" "$tmp/${name}_h.jsonl" --set comm.strategy=compressed "$@" &&
     ZRT_COMM_HOSTCODED=1 run "$np" "$tmp/${name}_c.jsonl" --set comm.strategy=compressed "$@"; then
    if ! grep -q "^# collectives: .*ZRT_COMM_HOSTCODED" "$tmp/${name}_c.jsonl.log"; then
      fail "$name" "the run did not say its collectives took the device path"
    else
      same_or_fail "$name" "$tmp/${name}_h.jsonl" "$tmp/${name}_c.jsonl"
    fi
  else
    fail "$name" "a run failed"
  fi
}
hostcoded_same device_path_coded_equals_host_2ranks 2
# shellcheck disable=SC2086
hostcoded_same device_path_coded_equals_host_moe_ep2_4ranks 4 $M --set parallelism.ep=2 \
  --set comm.reduce_dtype=fp32

# (a5) the path comm.net: nccl takes, with ZipCCL's host stand-in for a
# device network (ZRT_COMM_HOSTNET=1 with ZRT_COMM_HOSTCODED=1): every call
# device to device in rounds of exact sizes, compressed ones coded on the
# "device" (the All-to-Alls too), raw ones summed there in the canonical
# order: compressed and raw runs equal the host path's bit for bit, dense at
# 2 ranks and MoE at EP 2 on 4 ranks (FSDP, expert-parallel and
# expert-data-parallel communicators, each with its network).
hostnet_same() {
  local name=$1 np=$2 strategy=$3
  shift 3
  if run "$np" "$tmp/${name}_h.jsonl" --set comm.strategy="$strategy" "$@" &&
     ZRT_COMM_HOSTCODED=1 ZRT_COMM_HOSTNET=1 run "$np" "$tmp/${name}_n.jsonl" \
       --set comm.strategy="$strategy" "$@"; then
    if ! grep -q "^# collectives: .*device to device over host" "$tmp/${name}_n.jsonl.log"; then
      fail "$name" "the run did not say its collectives took the network's path"
    else
      same_or_fail "$name" "$tmp/${name}_h.jsonl" "$tmp/${name}_n.jsonl"
    fi
  else
    fail "$name" "a run failed"
  fi
}
hostnet_same device_net_compressed_equals_host_2ranks 2 compressed
hostnet_same device_net_raw_equals_host_2ranks 2 raw
# shellcheck disable=SC2086
hostnet_same device_net_compressed_equals_host_moe_ep2_4ranks 4 compressed $M --set parallelism.ep=2 \
  --set comm.reduce_dtype=fp32

# (a'''') --trace on a device: every compute span of the host has its twin
# on the "device" track, timed by the table's events (the guarded table runs
# each call to its end, so the twin lies within 2 ms of it), and
# every gather, reduce-scatter and All-to-All its device span on the
# "device comm" track (dense; MoE at EP 2 in 2 chunks)
cat >"$tmp/trace_check.py" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
bad = []
for pid in sorted({e["pid"] for e in ev if "pid" in e}):
    host = [e for e in ev if e.get("cat") == "compute" and e["pid"] == pid]
    dev = [e for e in ev if e.get("cat") == "device" and e["pid"] == pid]
    names = [e for e in ev if e.get("ph") == "M" and e["pid"] == pid and
             e["args"]["name"].startswith("device (cpu_guarded)")]
    if not host or len(host) != len(dev) or not names:
        bad.append("rank %d: %d compute spans, %d device spans, track named %s"
                   % (pid, len(host), len(dev), bool(names)))
        continue
    # the collectives' device spans (ZipCCL's timing events on their
    # communicators' streams, zipcclWaitSpan): one per gather and
    # reduce-scatter of the host's comm tracks, the same names, on a track
    # of their own
    hc = sorted(e["name"] for e in ev if e.get("cat") in ("allgather", "reducescatter", "alltoall") and e["pid"] == pid)
    dc = [e for e in ev if e.get("cat") == "device_comm" and e["pid"] == pid]
    cnames = [e for e in ev if e.get("ph") == "M" and e["pid"] == pid and
              e["args"]["name"].startswith("device comm (cpu_guarded)")]
    if not hc or hc != sorted(e["name"] for e in dc) or not cnames or any(e["dur"] < 0 for e in dc):
        bad.append("rank %d: %d collectives, %d device comm spans, track named %s"
                   % (pid, len(hc), len(dc), bool(cnames)))
        continue
    key = lambda e: (e["ts"], e["name"])
    for h, d in zip(sorted(host, key=key), sorted(dev, key=key)):
        # within 2 ms: on 2 cores a progress thread can hold the guard
        # between the host's clock and the event's (1.3 ms seen once in 7)
        if h["name"] != d["name"] or abs(h["ts"] - d["ts"]) > 2000 or abs(h["dur"] - d["dur"]) > 2000:
            bad.append("rank %d: %s at %.0f us (%.0f) vs device %s at %.0f (%.0f)"
                       % (pid, h["name"], h["ts"], h["dur"], d["name"], d["ts"], d["dur"]))
            break
print("ok %d compute and %d comm spans" % (len([e for e in ev if e.get("cat") == "device"]),
                                          len([e for e in ev if e.get("cat") == "device_comm"]))
      if not bad else "; ".join(bad[:3]))
PY
trace_check() { # trace_check NAME [train args...]: a 2-rank guarded run's trace
  local name=$1 r
  shift
  if run 2 "$tmp/$name.jsonl" --set runtime.device=cpu_guarded --trace "$tmp/$name.json" "$@"; then
    r=$(python3 "$tmp/trace_check.py" "$tmp/$name.json")
    case "$r" in
      ok*) pass "$name (${r#ok })" ;;
      *) fail "$name" "$r" ;;
    esac
  else
    fail "$name" "the run failed"
  fi
}
trace_check trace_has_device_spans
# the MoE model at EP 2 with the exchange in 2 chunks: its All-to-Alls too
# (the normal build's: the trace is no memory path of its own)
if [[ "$BUILD" != *asan* ]]; then
  # shellcheck disable=SC2086
  trace_check trace_has_device_spans_moe_ep2 $M --set parallelism.ep=2 --set moe.overlap_chunks=2
fi

# (a'') model.compute: bf16 (the linear layers' operands rounded to bf16,
# fp32 sums): the guarded device equals the CPU bit for bit, and the loss
# stays within 2% of the fp32 run (at 2 ranks, the (a) fp32 run's steps)
for np in 1 2; do
  if run "$np" "$tmp/b16_cpu_$np.jsonl" --set runtime.device=cpu --set model.compute=bf16 &&
     run "$np" "$tmp/b16_grd_$np.jsonl" --set runtime.device=cpu_guarded --set model.compute=bf16; then
    if same "$tmp/b16_cpu_$np.jsonl" "$tmp/b16_grd_$np.jsonl"; then pass "guarded_equals_cpu_bf16_compute_${np}ranks"
    else fail "guarded_equals_cpu_bf16_compute_${np}ranks" "the runs differ"; fi
  else
    fail "guarded_equals_cpu_bf16_compute_${np}ranks" "a run failed"
  fi
done
r=$(python3 tests/compare_runs.py "$tmp/cpu_2bf16.jsonl" "$tmp/b16_cpu_2.jsonl" close 0.02 --same-steps 2>&1 | tail -1)
if python3 tests/compare_runs.py "$tmp/cpu_2bf16.jsonl" "$tmp/b16_cpu_2.jsonl" close 0.02 --same-steps >/dev/null &&
   ! python3 tests/compare_runs.py "$tmp/cpu_2bf16.jsonl" "$tmp/b16_cpu_2.jsonl" exact --same-steps >/dev/null; then
  pass "bf16_compute_within_2pct_of_fp32 ($r)"
else
  fail bf16_compute_within_2pct_of_fp32 "$r (or the runs are identical: bf16 compute did nothing)"
fi

# (a'') recomputation and the output layer in chunks on the device: the
# recomputing backward, the tiles of attention and the chunked head touch
# device memory only through the table (dense at 2 ranks; the MoE model,
# whose experts recompute gate, up and hid, at 1)
for v in "dense 2" "moe 1"; do
  kind=${v% *} np=${v#* }
  extra="--set train.recompute=full --set train.logits_rows=13"
  [ "$kind" = moe ] && extra="$extra $M"
  # shellcheck disable=SC2086
  if run "$np" "$tmp/rc_cpu_$kind.jsonl" --set runtime.device=cpu $extra &&
     run "$np" "$tmp/rc_grd_$kind.jsonl" --set runtime.device=cpu_guarded $extra; then
    if same "$tmp/rc_cpu_$kind.jsonl" "$tmp/rc_grd_$kind.jsonl"; then
      pass "guarded_equals_cpu_recompute_${kind}_${np}ranks"
    else
      fail "guarded_equals_cpu_recompute_${kind}_${np}ranks" "$(python3 tests/compare_runs.py \
            "$tmp/rc_cpu_$kind.jsonl" "$tmp/rc_grd_$kind.jsonl" exact --same-steps 2>&1 | tail -2)"
    fi
  else
    fail "guarded_equals_cpu_recompute_${kind}_${np}ranks" "a run failed"
  fi
done

# (b) a guarded run's checkpoint resumes on the CPU table, same final hash
if run 2 "$tmp/ck_a.jsonl" --set runtime.device=cpu_guarded --set train.steps=4 --set schedule.total_steps=8 \
     --set checkpoint.dir="$tmp/ck" --set checkpoint.every=4 &&
   run 2 "$tmp/ck_b.jsonl" --set runtime.device=cpu --set schedule.total_steps=8 --resume "$tmp/ck"; then
  h1=$(tail -1 "$tmp/cpu_2bf16.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["param_hash"])')
  h2=$(tail -1 "$tmp/ck_b.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["param_hash"])')
  if [ "$h1" = "$h2" ]; then pass "guarded_checkpoint_resumes_on_cpu"
  else fail "guarded_checkpoint_resumes_on_cpu" "hash $h2, uninterrupted $h1"; fi
else
  fail "guarded_checkpoint_resumes_on_cpu" "a run failed"
fi

# (c) refusals, named
expect_error() { # expect_error NAME PATTERN [args...]
  local name=$1 pat=$2; shift 2
  "$TRAIN" "$tmp/tiny.yaml" "$@" >"$tmp/err.log" 2>&1
  local rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$pat" "$tmp/err.log"; then pass "$name"
  else fail "$name" "exit $rc, wanted 2 and '$pat': $(tail -2 "$tmp/err.log" | tr '\n' ' ')"; fi
}
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP cuda_without_a_device_is_refused: a GPU is visible here (make test-gpu checks runtime.device=cuda)"
else
  expect_error cuda_without_a_device_is_refused "key 'runtime.device': cuda: " \
    --set runtime.device=cuda
fi
expect_error nccl_net_off_cuda_is_refused "key 'comm.net': nccl moves GPU memory, but runtime.device is 'cpu'" \
  --set comm.net=nccl
expect_error unknown_net_is_refused "key 'comm.net': unknown network 'tcp'" --set comm.net=tcp
expect_error unknown_device_is_refused "key 'runtime.device': unknown device 'tpu'" \
  --set runtime.device=tpu
expect_error unknown_compute_is_refused "key 'model.compute': unknown mode 'fp8'" \
  --set model.compute=fp8

echo "train_device: $fails failure(s)"
[ "$fails" -eq 0 ]
