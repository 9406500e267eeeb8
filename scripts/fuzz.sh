#!/usr/bin/env bash
# fuzz.sh SECONDS [TARGET...] — run the fuzz targets (tests/fuzz/fuzz_*.c;
# TARGET names some of them: fuzz_config_yaml or config_yaml) under
# libFuzzer for SECONDS each, with ASan and UBSan, growing the committed
# corpus in tests/fuzz/corpus/<target>/ (new inputs are written there; review
# and trim them before committing: FUZZ_MERGE=1 merges the grown corpus into
# a fresh directory and puts that in its place). Builds into build-fuzz/
# with clang, which it installs if missing. A crash leaves its input in
# build-fuzz/<target>.crashes/ and fails. FUZZ_LOG_DIR, when set, keeps each
# target's libFuzzer log there as <target>.log. FUZZ_KEEP_CORPUS=1 leaves
# the committed corpus as it is: it is read, and new inputs go to
# build-fuzz/corpus/<target>/ (make test-long runs it so). FUZZ_RUNS=N
# stops each target after N executions (or SECONDS, whichever comes first).
#
# Each target names the sources it is built with on a line of its header,
# "fuzz-sources: FILE ..." (the codec's: comm/codec/codec_cpu.c
# comm/base/common.c; the safetensors reader's: runtime/safetensors.c
# runtime/printable.c): those are compiled with clang and instrumented, so
# coverage guides the fuzzer through them. A second, optional header line,
# "fuzz-libs: ...", adds link flags (-lyaml, -ljansson); its word "libzrt"
# stands for the rest of the runtime and of ZipCCL (what a loader calls but
# is not fuzzed: llama_config_check, the codec names, zrt_errf), linked
# uninstrumented from gcc-built libzrt.a and libzipccl.a (no CUDA) in
# build-fuzz/gcc/, with the Makefile's LDLIBS. A target exercises its
# parser: it calls neither MPI nor the transports.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
shift || true
OUT=build-fuzz
if ! command -v clang >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz: installing clang and libclang-rt-14-dev"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang libclang-rt-14-dev >/dev/null; then
    echo "fuzz: FAILED: cannot install clang and libclang-rt-14-dev (libFuzzer); nothing fuzzed"
    exit 1
  fi
fi
mkdir -p "$OUT"
# The library's include paths (MPI's too: checkpoint.c includes mpi.h, and
# calls it only where it saves).
CPPFLAGS=$(make -s --no-print-directory NO_CUDA=1 BUILD=$OUT/gcc print-CPPFLAGS)
CFLAGS="-O1 -g -std=c11 $CPPFLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
targets=()
if [ $# -eq 0 ]; then
  targets=(tests/fuzz/fuzz_*.c)
else
  for t in "$@"; do t=${t%.c}; t=${t#fuzz_}; targets+=("tests/fuzz/fuzz_$t.c"); done
fi
GCC_LIBS=""
status=0
for src in "${targets[@]}"; do
  name=$(basename "$src" .c)
  [ -f "$src" ] || { echo "== $name: no such target $src"; status=1; continue; }
  echo "== $name: building"
  srcs=$(sed -n 's/^ \* fuzz-sources: //p' "$src")
  libs=$(sed -n 's/^ \* fuzz-libs: //p' "$src")
  [ -n "$srcs" ] || { echo "== $name: no 'fuzz-sources:' line in its header"; status=1; continue; }
  case " $libs " in
    *" libzrt "*)
      if [ -z "$GCC_LIBS" ]; then
        echo "== building build-fuzz/gcc/libzrt.a and libzipccl.a (gcc, no CUDA) for 'fuzz-libs: libzrt'"
        make -s -j2 NO_CUDA=1 BUILD=$OUT/gcc $OUT/gcc/libzrt.a $OUT/gcc/libzipccl.a >"$OUT/gcc.log" 2>&1 ||
          { tail -20 "$OUT/gcc.log"; exit 1; }
        ldlibs=$(make -s --no-print-directory NO_CUDA=1 BUILD=$OUT/gcc print-LDLIBS)
        # gcc's OpenMP runtime for the gcc-built objects (clang's -fopenmp means libomp)
        GCC_LIBS="-Wl,--start-group $OUT/gcc/libzrt.a $OUT/gcc/libzipccl.a -Wl,--end-group ${ldlibs//-fopenmp/-lgomp}"
      fi
      libs=${libs//libzrt/$GCC_LIBS};;
  esac
  # shellcheck disable=SC2086
  clang $CFLAGS "$src" $srcs $libs -lxxhash -lpthread -o "$OUT/$name"
  corpus=tests/fuzz/corpus/$name
  dirs=("$corpus")
  if [ "${FUZZ_KEEP_CORPUS:-0}" = 1 ]; then
    corpus=$OUT/corpus/$name
    rm -rf "$corpus"
    dirs=("$corpus" "tests/fuzz/corpus/$name")
  fi
  mkdir -p "${dirs[@]}" "$OUT/$name.crashes"
  before=$(ls "$corpus" | wc -l)
  echo "== $name: fuzzing for ${SECONDS_EACH}s (corpus $corpus, $before inputs)"
  log="${FUZZ_LOG_DIR:-$OUT}/$name.log"
  runs=(); [ -n "${FUZZ_RUNS:-}" ] && runs=(-runs="$FUZZ_RUNS")
  if ! "$OUT/$name" "${dirs[@]}" -max_total_time="$SECONDS_EACH" "${runs[@]}" -max_len=32768 -timeout=20 \
       -rss_limit_mb=4096 -artifact_prefix="$OUT/$name.crashes/" -print_final_stats=1 \
       >"$log" 2>&1; then
    echo "== $name: FAILED, see $log and $OUT/$name.crashes/"
    tail -30 "$log"
    status=1
  fi
  grep -E '^(stat::number_of_executed_units|stat::new_units_added)' "$log" || true
  if [ "${FUZZ_MERGE:-0}" = 1 ]; then
    rm -rf "$corpus.merged" && mkdir "$corpus.merged"
    "$OUT/$name" -merge=1 "$corpus.merged" "$corpus" >"$OUT/$name.merge.log" 2>&1 &&
      rm -rf "$corpus" && mv "$corpus.merged" "$corpus"
  fi
  echo "== $name: corpus $before -> $(ls "$corpus" | wc -l) inputs"
done
echo "fuzz: ${#targets[@]} target(s) for ${SECONDS_EACH}s each: $([ $status = 0 ] && echo "no finding" || echo FAILED)"
exit $status
