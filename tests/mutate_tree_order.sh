#!/usr/bin/env bash
# mutate_tree_order.sh [BUILD] — proves tests/test_train_invariant.sh bites:
# plants, one at a time, a change of the rank-invariant gradient tree's
# order in a temporary copy of runtime/fsdp.c (the sum stays the same sum,
# only its association changes), links a trainer with it (the planted
# object ahead of libzrt) and expects the test's matrix to fail.
#   ranks_linear   the owner adds the ranks' blocks one after the other,
#                  ((b0 + b1) + b2) + b3, instead of pairwise;
#   micro_linear   micro-batches accumulate into the shard one after the
#                  other instead of in the binary counter.
# Sources in the tree are never changed. Run by `make test-long`; prints
# PASS/FAIL lines and "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${1:-${BUILD:-build}}
for f in "$BUILD/libzrt.a" "$BUILD/libzipccl.a" "$BUILD/obj/runtime/train.o"; do
  [ -f "$f" ] || { echo "FAIL mutate_tree_order: $f is not built (make BUILD=$BUILD)"; exit 1; }
done
var() { make -s --no-print-directory BUILD="$BUILD" --eval='zto-print-%: ; @echo $($*)' "zto-print-$1"; }
CPPFLAGS=$(var CPPFLAGS); CFLAGS=$(var CFLAGS); LDLIBS=$(var LDLIBS); CC=$(var CC)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
pass=0; fail=0

# mutant NAME PERL: fsdp.c through the perl substitution (which must change
# it), a trainer linked with it, the invariance test run on it
mutant() {
  local name=$1 expr=$2
  perl -0pe "$expr" runtime/fsdp.c >"$work/fsdp.c"
  if cmp -s runtime/fsdp.c "$work/fsdp.c"; then
    echo "FAIL mutant/$name: the plant matched nothing in runtime/fsdp.c"; fail=$((fail + 1)); return
  fi
  # shellcheck disable=SC2086
  if ! { $CC $CPPFLAGS $CFLAGS -c "$work/fsdp.c" -o "$work/fsdp.o" &&
         $CC $CFLAGS "$BUILD/obj/runtime/train.o" "$work/fsdp.o" "$BUILD/libzrt.a" "$BUILD/libzipccl.a" \
           $LDLIBS -o "$work/train_$name"; } 2>"$work/build.log"; then
    echo "FAIL mutant/$name: does not build: $(head -3 "$work/build.log")"; fail=$((fail + 1)); return
  fi
  TRAIN="$work/train_$name" BUILD="$BUILD" bash tests/test_train_invariant.sh >"$work/$name.log" 2>&1
  local nf
  nf=$(grep -c '^FAIL g[48]_' "$work/$name.log")
  if [ "$nf" -gt 0 ]; then
    echo "PASS mutant/$name: $nf cells of the matrix fail, e.g. $(grep -m1 '^FAIL g[48]_' "$work/$name.log" | cut -c6- | cut -c1-120)"
    pass=$((pass + 1))
  else
    echo "FAIL mutant/$name: the matrix still passes"; fail=$((fail + 1))
  fi
}
mutant ranks_linear 's/for \(int d = 1; d < G; d \*= 2\)\n(\s*)for \(int q = 0; q \+ d < G; q \+= 2 \* d\)/for (int d = 1; d < G; d++)\n$1for (int q = 0; q == 0; q = G)/'
mutant micro_linear 's/(const int a = U->tree_micro\+\+;)/$1\n    if (a >= 0) { f->K->add(U->grad, U->grad, v, U->shard); return; }/'
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
