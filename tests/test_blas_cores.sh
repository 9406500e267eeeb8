#!/usr/bin/env bash
# test: timeout=120
# test_blas_cores.sh — the CPU backend's thread-count invariance under every
# OpenBLAS core this CPU can run, not only the one OpenBLAS picks for it.
#
# Which SGEMM kernels run depends on the machine (AVX-512 Xeons get SkylakeX
# or Cooperlake, AMD EPYC and older Intel get Haswell or Zen), and the
# kernels differ in how a product's bits depend on the call's shape. So
# test_model's thread checks (matmul, attention and a whole step at 1, 2 and
# 3 threads, bit for bit) run once per core with OPENBLAS_CORETYPE set, and a
# core the CPU lacks the instructions for is named as skipped, so a log says
# which kernels a machine covered. The run also checks OpenBLAS really used
# the requested core (it ignores names it does not know).
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
bin=$BUILD/tests/test_model
[ -x "$bin" ] || { echo "FAIL blas_cores: $bin not built"; exit 1; }
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done; }
ran=0
for core in Prescott Haswell Zen SkylakeX Cooperlake; do
  case $core in
    Prescott) need="sse3" ;;
    Haswell | Zen) need="avx2 fma" ;;
    SkylakeX) need="avx512f avx512dq avx512bw avx512vl" ;;
    Cooperlake) need="avx512f avx512dq avx512bw avx512vl avx512_bf16" ;;
  esac
  # /proc/cpuinfo calls SSE3 "pni"
  need=${need//sse3/pni}
  if ! has $need; then
    echo "note: $core skipped: this CPU lacks ${need// /, } (another machine covers it)"
    continue
  fi
  out=$(OPENBLAS_CORETYPE=$core OMP_NUM_THREADS=1 "$bin" --threads 2>&1)
  rc=$?
  got=$(sed -n 's/^openblas core //p' <<<"$out")
  if [ "${got,,}" != "${core,,}" ]; then
    fail "blas_cores/$core" "OPENBLAS_CORETYPE=$core ran core '${got:-?}' instead"
    continue
  fi
  ran=$((ran + 1))
  grep -E '^(PASS|FAIL) ' <<<"$out" | sed "s#^\(PASS\|FAIL\) #\1 blas_cores/$core/#"
  grep -q '^FAIL ' <<<"$out" && fails=$((fails + 1))
  # a child that crashed or exited non-zero after some PASS lines fails here
  # (its PASS lines above stay, this line says the run did not finish)
  [ "$rc" -eq 0 ] || fail "blas_cores/$core/exit" "test_model --threads exited $rc: $(tail -2 <<<"$out" | tr '\n' ' ')"
done
out=$(OMP_NUM_THREADS=1 "$bin" --threads 2>&1)
echo "note: OpenBLAS's own choice on this CPU: $(sed -n 's/^openblas core //p' <<<"$out")"
[ "$ran" -ge 2 ] && pass "blas_cores/ran_$ran" || fail "blas_cores/ran" "only $ran cores could run here"
exit $((fails > 0))
