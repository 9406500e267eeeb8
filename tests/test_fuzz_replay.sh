#!/usr/bin/env bash
# test: timeout=300
# test_fuzz_replay.sh — replay the committed libFuzzer corpus of every fuzz
# target (tests/fuzz/corpus/<target>/: the codec's and the loaders') through
# the gcc-built replay binaries: every input must pass its target's checks
# (the codec's frames decode alike on every SIMD path and round-trip; a
# loader's refusal is a printable message naming the file, what it accepts
# is consistent), or the target aborts. Needs no clang.
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
# The corpus must keep its format-version-3 seeds (C chunks, FORMAT.md 4.7):
# valid frames, version-2 frames claiming mode 5, damaged C chunks, and
# constant data that the encoders turn into C chunks; and its version-4
# seeds (R tail tables, FORMAT.md §5): valid frames whose first chunk has a
# table above 7, an older frame claiming one, a table out of range.
python3 - tests/fuzz/corpus/fuzz_decode <<'PY'
import os, sys
d = sys.argv[1]
v3 = v2c = const = v4 = v3t = t40 = 0
for name in os.listdir(d):
    b = open(os.path.join(d, name), 'rb').read()
    if b[:4] == b'ZCC1' and len(b) > 24 and b[6] & 2 == 0:
        count = int.from_bytes(b[8:16], 'little'); C = 1 << b[7] if 10 <= b[7] <= 20 else 0
        nc = (count + C - 1) // C if C else 0
        first = 16 + 4 * nc
        if b[6] & 1: first += 4 + 4 * nc
        if b[4] == 3: v3 += 1
        if b[4] in (1, 2) and first < len(b) and b[first] == 5: v2c += 1
        if first + 2 < len(b) and b[first] == 2 and b[first + 2] >= 8:
            if b[4] == 4 and b[first + 2] < 40: v4 += 1
            elif b[4] < 4: v3t += 1
            else: t40 += 1
    elif len(b) >= 64 and len(set(b[i:i + 2] for i in range(0, len(b) - 2, 2))) == 1:
        const += 1
ok = v3 >= 4 and v2c >= 1 and const >= 2
print(("PASS" if ok else "FAIL") + f" fuzz_decode_corpus_has_c_chunk_seeds ({v3} version-3 frames, {v2c} older frames claiming mode 5, {const} constant inputs)")
ok = v4 >= 3 and v3t >= 1 and t40 >= 1
print(("PASS" if ok else "FAIL") + f" fuzz_decode_corpus_has_tail_table_seeds ({v4} version-4 frames with a tail table, {v3t} older frames claiming one, {t40} with a table out of range)")
PY
