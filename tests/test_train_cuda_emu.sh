#!/usr/bin/env bash
# test: timeout=600 asan=no
# test_train_cuda_emu.sh — runtime.device: cuda without a GPU: the trainer
# linked with the warp emulator's CUDA (BUILD/gpu/train_emu: the model's
# kernel table kernels/cuda.cu, ZipCCL's CUDA device, codec and reduction
# kernels, all compiled as plain C++ over tests/gpu/warp_emu.h and
# tests/gpu/emu/) trains the suite's tiny models as the CPU does:
#   - 1 rank, fp32 gathers: every logged loss within 1e-5 of runtime.device:
#     cpu;
#   - 2 ranks, the config's bf16 gathers (units kept in bf16, read by the
#     _w16 entries): within 1e-5 of two CPU ranks, and compressed (coded by
#     the CUDA codec's kernels on the device) == raw bit for bit;
#   - the MoE model at EP 2 on 2 ranks (the exchange's rows on the device):
#     within 1e-4 of the CPU (compressed == raw with ZIPCCL_TEST_LONG=1);
#   - the MoE model at EP 2 in model.compute: bf16, its experts' GEMMs
#     grouped (run deferred) == one GEMM per expert, bit for bit;
#   - model.compute: bf16 within 1e-4 of the CPU's bf16 twin, also at head
#     dim 64 (attention: the flash kernel on tensor cores); recomputation
#     with a chunked output layer within 1e-5 of the CPU;
#   - --trace: a device comm span for each collective, read from the CUDA
#     device table's timing events;
#   - the 2-rank dense and MoE runs with the emulator's streams deferred
#     (ZK_EMU_ASYNC=1: work runs only when waited for; their compressed
#     calls in 4 KiB pieces) == the same runs with work run at once, bit
#     for bit;
#   - MFU's peak (runtime/peaks.c): the emulator is no card the table knows,
#     so the header says MFU is against the matmul probe, a probe, not the
#     spec, and the JSON's mfu_peak_source is "probe"; named a card
#     (ZRT_EMU_DEVICE_NAME), the card's spec for the compute dtype (an H200
#     at bf16: 989.5 TFLOP/s; an H100 SXM at fp32: 66.9, once for two ranks
#     on its one device), the probe printed beside it as a probe.
# What only a GPU shows (cuBLAS, the GPU's arithmetic, NCCL, real streams,
# speed; and determinism, which the emulator's one-thread-at-a-time order
# cannot put to the test) is scripts/test_train_gpu.sh's, in make test-gpu.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
EMU=$BUILD/gpu/train_emu
[ -x "$EMU" ] || { echo "FAIL train_cuda_emu: $EMU not built"; exit 1; }
[ -x "$TRAIN" ] || { echo "FAIL train_cuda_emu: $TRAIN not built"; exit 1; }

tiny_yaml 3 2 2 1
M=$TINY_MOE
# check NAME A B MODE [TOL]: compare_runs' verdict as one PASS or FAIL line
check() {
  local name=$1 a=$2 b=$3 r
  shift 3
  if r=$(python3 tests/compare_runs.py "$tmp/$a.jsonl" "$tmp/$b.jsonl" "$@" --same-steps 2>&1); then
    pass "$name ($(echo "$r" | tail -1))"
  else
    fail "$name" "$(echo "$r" | tail -1)"
  fi
}
cpu() { local np=$1 n=$2; shift 2; TRAIN=$BUILD/train run "$np" "$tmp/$n.jsonl" --set runtime.device=cpu "$@"; }
emu() { local np=$1 n=$2; shift 2; TRAIN=$EMU run "$np" "$tmp/$n.jsonl" --set runtime.device=cuda "$@"; }

F="--set comm.param_dtype=fp32"
# mfu_check NAME RUN SOURCE PEAK HEADER: the run's header line on MFU
# matches HEADER (a glob), and every step's JSON line says mfu_peak_source
# SOURCE, mfu_peak_flops_per_s PEAK ("probe": the matmul probe's figure)
# and mfu = flops_per_s / that peak
mfu_check() {
  local name=$1 run=$2 src=$3 peak=$4 head=$5 line r
  line=$(grep -m1 '^# MFU against' "$tmp/$run.jsonl.log")
  # shellcheck disable=SC2053
  if [[ "$line" != $head ]]; then
    fail "$name" "the header says '$line', not '$head'"
    return
  fi
  if r=$(python3 - "$tmp/$run.jsonl" "$src" "$peak" <<'PY' 2>&1
import json, sys
path, src, peak = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [json.loads(l) for l in open(path) if '"final"' not in l]
assert rows, "no step lines"
for o in rows:
    p = o["mfu_peak_flops_per_s"]
    want = o["matmul_probe_flops_per_s"] if peak == "probe" else float(peak)
    assert o["mfu_peak_source"] == src, "step %d: source %s" % (o["step"], o["mfu_peak_source"])
    assert abs(p - want) <= 1e-9 * want, "step %d: peak %g, expected %g" % (o["step"], p, want)
    assert o["matmul_probe_flops_per_s"] > 0, "step %d: no probe" % o["step"]
    assert abs(o["mfu"] * p - o["flops_per_s"]) <= 1e-6 * o["flops_per_s"], "step %d: mfu %g" % (o["step"], o["mfu"])
print("%d steps, peak %.6g TFLOP/s (%s)" % (len(rows), rows[0]["mfu_peak_flops_per_s"] / 1e12, src))
PY
  ); then
    pass "$name ($r)"
  else
    fail "$name" "$(echo "$r" | tail -1)"
  fi
}

# shellcheck disable=SC2086
if cpu 1 c1 $F && emu 1 e1 $F; then
  if grep -q "^# device: cuda" "$tmp/e1.jsonl.log"; then
    check emu_fp32_matches_cpu_1rank c1 e1 close 1e-5
    mfu_check emu_mfu_unknown_card_against_probe e1 probe probe "# MFU against the fp32 matmul \
probe through the kernel table: * (all ranks), a probe, not the spec: runtime/peaks.c has no fp32 \
peak for \"warp emulator (tests/gpu/warp_emu.h) (device 0 of 1)\""
  else
    fail emu_1rank "the run did not say it computes on cuda: $(grep -m1 '^# device' "$tmp/e1.jsonl.log")"
  fi
else
  fail emu_1rank "a run failed"
fi
if cpu 2 c2 && emu 2 e2 --trace "$tmp/trace.json" &&
   ZRT_EMU_DEVICE_NAME="NVIDIA H100 80GB HBM3" emu 2 e2raw --set comm.strategy=raw; then
  check emu_matches_cpu_2ranks c2 e2 close 1e-5
  check emu_compressed_equals_raw_2ranks e2 e2raw exact
  mfu_check emu_mfu_h100_fp32_spec_once_per_device e2raw spec 66.9e12 \
    "# MFU against NVIDIA H100 SXM's fp32 dense peak 66.9 TFLOP/s (spec: NVIDIA H100 whitepaper \
and datasheet, runtime/peaks.c); fp32 matmul probe through the kernel table: * (all ranks), a \
probe, not the spec"
else
  fail emu_2ranks "a run failed"
fi

# shellcheck disable=SC2086
if cpu 2 cm $M --set parallelism.ep=2 && emu 2 em $M --set parallelism.ep=2; then
  check emu_moe_ep2_matches_cpu cm em close 1e-4
  # compressed == raw at EP 2 with ZIPCCL_TEST_LONG=1 (make test-long; the
  # dense 2-rank pair above holds it in make test)
  if [ -n "${ZIPCCL_TEST_LONG:-}" ]; then
    # shellcheck disable=SC2086
    if emu 2 emraw $M --set parallelism.ep=2 --set comm.strategy=raw; then
      check emu_moe_ep2_compressed_equals_raw em emraw exact
    else fail emu_moe_ep2_raw "the run failed"; fi
  fi
else
  fail emu_moe_ep2 "a run failed"
fi

# The 2-rank runs again with each stream's work deferred until something
# waits for it (ZK_EMU_ASYNC=1, tests/gpu/emu/cuda_emu_runtime.h): the
# trainer's and ZipCCL's events and waits must order everything, or a kernel
# reads a buffer before it is written (dropping zdev_stream_wait_event makes
# these runs fail); both with their compressed calls in pieces of 4 KiB
# (ZIPCCL_DEVICE_PIECE_BYTES: each piece's codec beside the last one's
# messages; the MoE run's expert exchange too), which must not change a bit
# either
if [ -s "$tmp/e2.jsonl" ] && [ -s "$tmp/em.jsonl" ] && ZK_EMU_ASYNC=1 ZIPCCL_DEVICE_PIECE_BYTES=4096 emu 2 e2async &&
   ZK_EMU_ASYNC=1 ZIPCCL_DEVICE_PIECE_BYTES=4096 emu 2 emasync $M --set parallelism.ep=2; then
  check emu_deferred_streams_2ranks_same_bits e2 e2async exact
  check emu_deferred_streams_moe_ep2_same_bits em emasync exact
else
  fail emu_deferred_streams "a run failed"
fi

# The MoE model at EP 2 in model.compute: bf16: the experts' GEMMs are the
# bf16 table's grouped GEMMs (one cublasGemmGroupedBatchedEx per projection,
# operand pointers made on the device; run deferred, so cuBLAS reads them
# when the stream gets there), the same bits as one GEMM per expert
# (ZRT_GROUPED_GEMM=0), the exchange in two chunks (the second's rows start
# past the first's)
# (two steps: the second runs on the first's update)
G2="--set train.steps=2 --set data.val_every=0"
# shellcheck disable=SC2086
if ZK_EMU_ASYNC=1 emu 2 emg $M --set parallelism.ep=2 --set model.compute=bf16 --set moe.overlap_chunks=2 $G2 &&
   ZRT_GROUPED_GEMM=0 emu 2 emg0 $M --set parallelism.ep=2 --set model.compute=bf16 --set moe.overlap_chunks=2 $G2; then
  check emu_moe_ep2_bf16_grouped_gemm_same_bits emg emg0 exact
else
  fail emu_moe_ep2_bf16_grouped_gemm "a run failed"
fi

if cpu 1 cb --set model.compute=bf16 && ZRT_EMU_DEVICE_NAME="NVIDIA H200" emu 1 eb --set model.compute=bf16; then
  check emu_bf16_compute_matches_cpu_twin cb eb close 1e-4
  mfu_check emu_mfu_h200_bf16_spec eb spec 989.5e12 \
    "# MFU against NVIDIA H200 SXM's bf16 dense peak 989.5 TFLOP/s (spec: NVIDIA H200 datasheet, \
runtime/peaks.c); bf16 matmul probe through the kernel table: * (all ranks), a probe, not the spec"
else
  fail emu_bf16_compute "a run failed"
fi
# head dim 64: attention is the bf16 table's flash kernel (WMMA) on the
# device and its mirror in the twin
F64="--set model.compute=bf16 --set model.dim=128 --set model.n_heads=2 --set model.n_kv_heads=1"
# shellcheck disable=SC2086
if cpu 1 cf $F64 && emu 1 ef $F64; then
  # 3e-4: the corpus is the tree's own text (tests/lib.sh), so every commit
  # trains on other bytes; this pair measured 1.01e-4 at step 3 on one of
  # them (the same with and without the change then under test)
  check emu_bf16_flash_attention_hd64_matches_cpu_twin cf ef close 3e-4
else
  fail emu_bf16_flash_attention_hd64 "a run failed"
fi
R="--set train.recompute=full --set train.logits_rows=7"
# shellcheck disable=SC2086
if cpu 1 cr $R && emu 1 er $R; then check emu_recompute_matches_cpu cr er close 1e-5
else fail emu_recompute "a run failed"; fi

# the trace of the 2-rank run above (e2)
if [ -s "$tmp/trace.json" ]; then
  n=$(python3 -c "
import json, sys
ev = json.load(open(sys.argv[1]))
ev = ev['traceEvents'] if isinstance(ev, dict) else ev
print(sum(1 for e in ev if e.get('cat') == 'device_comm'))" "$tmp/trace.json" 2>&1)
  if [ "${n:-0}" -gt 0 ] 2>/dev/null; then pass "emu_trace_has_device_comm_spans ($n spans)"
  else fail emu_trace "no device comm span in the trace ($n)"; fi
else
  fail emu_trace "the 2-rank run wrote no trace"
fi
exit $((fails > 0))
