#!/usr/bin/env bash
# fuzz.sh SECONDS — run every fuzz target (tests/fuzz/fuzz_*.c) under
# libFuzzer for SECONDS each, with ASan and UBSan, growing the committed
# corpus in tests/fuzz/corpus/<target>/ (new inputs are written there; review
# and trim them before committing). Builds into build-fuzz/ with clang, which
# it installs if missing. A crash leaves its input in build-fuzz/ and fails.
#
# Each target names the sources it is built with on a line of its header,
# "fuzz-sources: FILE ..." (the codec's: comm/codec/codec_cpu.c
# comm/base/common.c; the safetensors reader's: runtime/safetensors.c
# runtime/printable.c): a target exercises its parser, not MPI or the
# transports.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-60}
OUT=build-fuzz
if ! command -v clang >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz: installing clang and libclang-rt-14-dev"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang libclang-rt-14-dev >/dev/null
fi
mkdir -p "$OUT"
CFLAGS="-O1 -g -std=c11 -D_GNU_SOURCE -Icomm -Icomm/base -Icomm/codec -Iruntime -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
status=0
for src in tests/fuzz/fuzz_*.c; do
  name=$(basename "$src" .c)
  echo "== $name: building"
  srcs=$(sed -n 's/^ \* fuzz-sources: //p' "$src")
  [ -n "$srcs" ] || { echo "== $name: no 'fuzz-sources:' line in its header"; status=1; continue; }
  # shellcheck disable=SC2086
  clang $CFLAGS "$src" $srcs -lxxhash -lpthread -o "$OUT/$name"
  corpus=tests/fuzz/corpus/$name
  mkdir -p "$corpus" "$OUT/$name.crashes"
  before=$(ls "$corpus" | wc -l)
  echo "== $name: fuzzing for ${SECONDS_EACH}s (corpus $corpus, $before inputs)"
  if ! "$OUT/$name" "$corpus" -max_total_time="$SECONDS_EACH" -max_len=32768 -timeout=20 \
       -rss_limit_mb=4096 -artifact_prefix="$OUT/$name.crashes/" -print_final_stats=1 \
       >"$OUT/$name.log" 2>&1; then
    echo "== $name: FAILED, see $OUT/$name.log and $OUT/$name.crashes/"
    tail -30 "$OUT/$name.log"
    status=1
  fi
  grep -E '^(stat::number_of_executed_units|stat::new_units_added)' "$OUT/$name.log" || true
  echo "== $name: corpus $before -> $(ls "$corpus" | wc -l) inputs"
done
exit $status
