#!/usr/bin/env bash
# test: timeout=300
# test_fuzz_replay.sh — replay the committed libFuzzer corpus of the codec
# (tests/fuzz/corpus/<target>/) through the gcc-built replay binaries: every
# input must decode without crashing, agree across SIMD paths and round-trip
# as raw data (the target aborts otherwise). Needs no clang.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
for src in tests/fuzz/fuzz_*.c; do
  name=$(basename "$src" .c)
  bin="$BUILD/tests/replay_$name"
  corpus="tests/fuzz/corpus/$name"
  if [ ! -x "$bin" ]; then echo "FAIL ${name}_corpus_replay: $bin not built"; continue; fi
  if [ ! -d "$corpus" ] || [ -z "$(ls -A "$corpus" 2>/dev/null)" ]; then
    echo "FAIL ${name}_corpus_replay: empty corpus $corpus"; continue
  fi
  if out=$("$bin" "$corpus" 2>&1); then
    echo "PASS ${name}_corpus_replay ($(printf '%s' "$out" | tail -1))"
  else
    echo "FAIL ${name}_corpus_replay: $(printf '%s' "$out" | tail -3 | tr '\n' ' ')"
  fi
done
