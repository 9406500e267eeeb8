#!/usr/bin/env bash
# run_tests.sh BUILD_DIR [BUILD_DIR...] — run the whole suite once per build
# directory and print one closing line "N passed, N failed".
#
# A test is one of
#   tests/test_*.c   -> BUILD/tests/test_*  (run directly, or under mpirun)
#   tests/test_*.sh  -> bash, with BUILD=<dir> in the environment
#   tests/test_*.py  -> python3, with BUILD=<dir> in the environment
# and reports one line per check: "PASS name" or "FAIL name: why", or "SKIP
# name: why" for a check this machine cannot run (listed before the closing
# line, never silent). A test that exits non-zero, times out or reports
# nothing counts as one more failure.
#
# A header line in the test source tunes how it runs:
#   // test: ranks=1,2,4,8 timeout=300 asan=no
# ranks: run under mpirun with each rank count (default: once, no mpirun);
# asan_ranks: the rank counts in sanitizer builds (default: ranks); timeout
# in seconds (default 300); asan=no skips it in sanitizer builds.
# TESTS=regex limits the run to matching test names.
set -u
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
pass=0; fail=0; skip=0; failed_names=(); skipped_lines=()
log_dir=$(mktemp -d)

opt() { # opt FILE KEY DEFAULT
  local line; line=$(grep -m1 -E '^(//|#) test:' "$1" 2>/dev/null || true)
  local v; v=$(printf '%s' "$line" | tr ' ' '\n' | sed -n "s/^$2=//p")
  printf '%s' "${v:-$3}"
}

run_one() { # run_one LABEL TIMEOUT CMD...
  local label=$1 to=$2; shift 2
  local out="$log_dir/out" t0=$SECONDS rc
  timeout --kill-after=10 "$to" "$@" >"$out" 2>&1; rc=$?
  local p f k; p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out"); k=$(grep -c '^SKIP ' "$out")
  if [ "$k" -gt 0 ]; then
    skip=$((skip + k))
    skipped_lines+=("$(grep '^SKIP ' "$out" | sed "s#^SKIP #$label: #")")
  fi
  if [ "$rc" -ne 0 ]; then
    f=$((f + 1)); [ "$rc" -eq 124 ] && echo "FAIL $label: timed out after ${to}s" >>"$out" \
                                    || echo "FAIL $label: exit code $rc" >>"$out"
  elif [ "$p" -eq 0 ] && [ "$f" -eq 0 ] && [ "$k" -eq 0 ]; then
    f=1; echo "FAIL $label: reported no checks" >>"$out"
  fi
  pass=$((pass + p)); fail=$((fail + f))
  printf '%-48s %4d passed %3d failed  %4ds%s\n' "$label" "$p" "$f" $((SECONDS - t0)) \
    "$([ "$k" -gt 0 ] && echo "  ($k skipped)")"
  if [ "$f" -gt 0 ]; then
    failed_names+=("$label")
    grep -E '^FAIL ' "$out" | head -20 | sed 's/^/    /'
    tail -15 "$out" | grep -v -E '^(PASS|FAIL) ' | sed 's/^/    | /'
  fi
}

for build in "$@"; do
  asan=0; case "$build" in *asan*) asan=1;; esac
  echo "== test suite: $build"
  for src in tests/test_*.c tests/test_*.sh tests/test_*.py; do
    [ -f "$src" ] || continue
    name=$(basename "$src"); name=${name%.*}
    [ -n "${TESTS:-}" ] && ! [[ "$name" =~ $TESTS ]] && continue
    [ "$asan" = 1 ] && [ "$(opt "$src" asan yes)" = no ] && continue
    to=$(opt "$src" timeout 300)
    [ "$asan" = 1 ] && to=$((to * 3))
    case "$src" in
      *.sh) run_one "$build/$name" "$to" env BUILD="$build" bash "$src" ;;
      *.py) run_one "$build/$name" "$to" env BUILD="$build" python3 "$src" ;;
      *.c)
        bin="$build/tests/$name"
        if [ ! -x "$bin" ]; then
          fail=$((fail + 1)); failed_names+=("$build/$name"); echo "$build/$name: not built"; continue
        fi
        ranks=$(opt "$src" ranks "")
        [ "$asan" = 1 ] && ranks=$(opt "$src" asan_ranks "$ranks")
        if [ -z "$ranks" ]; then
          run_one "$build/$name" "$to" env ASAN_OPTIONS=detect_leaks=1 "$bin"
        else
          for r in ${ranks//,/ }; do
            run_one "$build/$name@np$r" "$to" env ASAN_OPTIONS=detect_leaks=0 \
              mpirun --oversubscribe --bind-to none -n "$r" "$bin"
          done
        fi ;;
    esac
  done
done
rm -rf "$log_dir"
if [ "$skip" -gt 0 ]; then # visible, never silent: what did not run here, and why
  echo "skipped: $skip check(s) that cannot run on this machine:"
  printf '  %s\n' "${skipped_lines[@]}"
fi
if [ ${#failed_names[@]} -gt 0 ]; then echo "failed: ${failed_names[*]}"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
