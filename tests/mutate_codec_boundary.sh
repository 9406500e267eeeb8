#!/usr/bin/env bash
# mutate_codec_boundary.sh [BUILD] — proves the boundary cases
# (tests/gpu/codec_boundary.h) bite: plants, one at a time, boundary
# changes in each encoder's "coded chunk fits" test and expects the planted
# program to fail boundary checks. The CUDA codec's encoders (F3, F2, T, R)
# run under the warp emulator (BUILD/gpu/cuda_emu's source with a planted
# copy of comm/codec/codec_cuda.cu); the CPU codec's (R, T, F2, F3) in
# test_codec, linked with a planted copy of comm/codec/codec_cpu.c ahead of
# libzipccl. Sources in the tree are never changed: the planted copies live
# in a temporary directory.
#
# The plants: `< raw` -> `<= raw` (a coding of exactly raw bytes is kept:
# the raw cases must fail) and `< raw` -> `+ 1 < raw` (a coding of raw - 1
# bytes goes raw: the raw - 1 cases must fail).
#
# Run by `make test-long` after the suite (a few minutes: one emulator
# build per CUDA plant); prints PASS/FAIL lines, "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${1:-${BUILD:-build}}
for f in "$BUILD/libzipccl.a" "$BUILD/obj/tests/test_codec.o"; do
  [ -f "$f" ] || { echo "FAIL mutate_codec_boundary: $f is not built (make BUILD=$BUILD)"; exit 1; }
done
var() { make -s --no-print-directory BUILD="$BUILD" --eval='zcb-print-%: ; @echo $($*)' "zcb-print-$1"; }
CPPFLAGS=$(var CPPFLAGS); CFLAGS=$(var CFLAGS); LDLIBS=$(var LDLIBS)
CC=$(var CC); CXX=$(var CXX)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0

# plant FILE OUT [OCCURRENCE OLD NEW]...: OUT = FILE with the OCCURRENCE-th
# line holding OLD changed to hold NEW, for each triple; fails unless
# exactly that many lines changed.
plant() {
  local src=$1 out=$2 k=0; shift 2
  cp "$src" "$tmp/plant.in"
  while [ $# -ge 3 ]; do
    OCC=$1 OLD=$2 NEW=$3 perl -pe 'if (index($_, $ENV{OLD}) >= 0 && ++$n == $ENV{OCC}) { substr($_, index($_, $ENV{OLD}), length($ENV{OLD})) = $ENV{NEW} }' \
      "$tmp/plant.in" > "$tmp/plant.out"
    mv "$tmp/plant.out" "$tmp/plant.in"; k=$((k + 1)); shift 3
  done
  mv "$tmp/plant.in" "$out"
  [ "$(diff "$src" "$out" | grep -c '^>')" = "$k" ]
}

# judge NAME LOG: the planted program must fail boundary checks (others
# may fail too; their count says whether the older cases saw the plant)
judge() {
  local name=$1 log=$2 nf nb
  nf=$(grep -c '^FAIL ' "$log"); nb=$(grep '^FAIL ' "$log" | grep -c 'boundary')
  if [ "$nb" -gt 0 ]; then
    echo "PASS mutant/$name: $nb boundary checks fail ($((nf - nb)) others), e.g. $(grep -m1 '^FAIL .*boundary' "$log" | cut -c6- | cut -d: -f1)"
    pass=$((pass + 1))
  else
    echo "FAIL mutant/$name: no boundary check fails ($nf others)"
    fail=$((fail + 1))
  fi
}

# The CUDA encoders, under the emulator: a copy of tests/gpu beside the
# planted comm/codec/codec_cuda.cu (cuda_emu.cc includes it by a relative
# path); everything else from the tree through the include path.
mkdir -p "$tmp/tests/gpu" "$tmp/comm/codec"
cp tests/testutil.h "$tmp/tests/"
cp tests/gpu/cuda_emu.cc tests/gpu/*.h "$tmp/tests/gpu/"
cuda_mutant() { # NAME [OCCURRENCE OLD NEW]...
  local name=$1; shift
  if ! plant comm/codec/codec_cuda.cu "$tmp/comm/codec/codec_cuda.cu" "$@"; then
    echo "FAIL mutant/$name: a line to plant in is gone from comm/codec/codec_cuda.cu"; fail=$((fail + 1)); return
  fi
  # shellcheck disable=SC2086
  if ! $CXX $CPPFLAGS -O2 -g -std=c++17 -Wall -Wextra -Werror "$tmp/tests/gpu/cuda_emu.cc" "$BUILD/libzipccl.a" \
       $LDLIBS -o "$tmp/cuda_emu" 2>"$tmp/build.log"; then
    echo "FAIL mutant/$name: does not build"; sed 's/^/    /' "$tmp/build.log" | head -5; fail=$((fail + 1)); return
  fi
  "$tmp/cuda_emu" >"$tmp/run.log" 2>&1
  judge "$name" "$tmp/run.log"
}
F3_FITS='if (base + run < raw) {'; F2_FITS='+ nesc1 < raw;'; T_FITS='if (ep + NE < raw) {'; R_FITS='if (total < raw) {'
cuda_mutant cuda_f3_fits_le_raw 1 "$F3_FITS" 'if (base + run <= raw) {'
cuda_mutant cuda_f2_fits_le_raw 1 "$F2_FITS" '+ nesc1 <= raw;'
cuda_mutant cuda_t_fits_le_raw 1 "$T_FITS" 'if (ep + NE <= raw) {'
cuda_mutant cuda_r_fits_le_raw 1 "$R_FITS" 'if (total <= raw) {'
cuda_mutant cuda_f3_one_byte_early 1 "$F3_FITS" 'if (base + run + 1 < raw) {'
cuda_mutant cuda_f2_one_byte_early 1 "$F2_FITS" '+ nesc1 + 1 < raw;'
cuda_mutant cuda_t_one_byte_early 1 "$T_FITS" 'if (ep + NE + 1 < raw) {'
cuda_mutant cuda_r_one_byte_early 1 "$R_FITS" 'if (total + 1 < raw) {'

# The CPU encoders: encode_chunk's four tests, R, T, F2 and F3 in order.
cpu_mutant() { # NAME OCCURRENCE NEW
  if ! plant comm/codec/codec_cpu.c "$tmp/codec_cpu.c" "$2" 'if (size < raw && size <= avail) {' "$3"; then
    echo "FAIL mutant/$1: the line to plant in is gone from comm/codec/codec_cpu.c"; fail=$((fail + 1)); return
  fi
  # shellcheck disable=SC2086
  if ! { $CC $CPPFLAGS $CFLAGS -c "$tmp/codec_cpu.c" -o "$tmp/codec_cpu.o" &&
         $CC $CFLAGS "$BUILD/obj/tests/test_codec.o" "$tmp/codec_cpu.o" "$BUILD/libzipccl.a" $LDLIBS \
             -o "$tmp/test_codec"; } 2>"$tmp/build.log"; then
    echo "FAIL mutant/$1: does not build"; sed 's/^/    /' "$tmp/build.log" | head -5; fail=$((fail + 1)); return
  fi
  "$tmp/test_codec" >"$tmp/run.log" 2>&1
  judge "$1" "$tmp/run.log"
}
k=0
for enc in r t f2 f3; do
  k=$((k + 1))
  cpu_mutant "cpu_${enc}_fits_le_raw" $k 'if (size <= raw && size <= avail) {'
  cpu_mutant "cpu_${enc}_one_byte_early" $k 'if (size + 1 < raw && size <= avail) {'
done

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
