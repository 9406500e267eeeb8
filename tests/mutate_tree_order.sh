#!/usr/bin/env bash
# mutate_tree_order.sh [BUILD] — proves tests/test_train_invariant.sh bites:
# plants, one at a time, a change of the rank-invariant gradient tree's
# order in a temporary copy of runtime/fsdp.c or models/moe.c (the sum
# stays the same sum, only its association changes), links a trainer with
# it (the planted object ahead of libzrt) and expects the test's matrix to
# fail.
#   ranks_linear     the owner adds the ranks' blocks one after the other,
#                    ((b0 + b1) + b2) + b3, instead of pairwise;
#   micro_linear     micro-batches accumulate into the shard one after the
#                    other instead of in the binary counter;
#   sources_linear   an expert adds its source ranks' gradients one after
#                    the other instead of pairwise (fails at EP 4);
#   sources_one_gemm an expert runs every source's rows in one GEMM (the
#                    path without rank_invariant; fails at EP > 1).
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

# mutant NAME FILE CELLS PERL: FILE through the perl substitution (which
# must change it), a trainer linked with it, the invariance test run on it;
# some cell whose name matches the regex CELLS must fail
mutant_run() {
  local name=$1 file=$2 cells=$3 expr=$4 base
  base=$(basename "$file" .c)
  perl -0pe "$expr" "$file" >"$work/$base.c"
  if cmp -s "$file" "$work/$base.c"; then
    echo "FAIL mutant/$name: the plant matched nothing in $file"; fail=$((fail + 1)); return
  fi
  # shellcheck disable=SC2086
  if ! { $CC $CPPFLAGS -I"$(dirname "$file")" $CFLAGS -c "$work/$base.c" -o "$work/$base.o" &&
         $CC $CFLAGS "$BUILD/obj/runtime/train.o" "$work/$base.o" "$BUILD/libzrt.a" "$BUILD/libzipccl.a" \
           $LDLIBS -o "$work/train_$name"; } 2>"$work/build.log"; then
    echo "FAIL mutant/$name: does not build: $(head -3 "$work/build.log")"; fail=$((fail + 1)); return
  fi
  TRAIN="$work/train_$name" BUILD="$BUILD" bash tests/test_train_invariant.sh >"$work/$name.log" 2>&1
  local nf
  nf=$(grep -c "^FAIL $cells" "$work/$name.log")
  if [ "$nf" -gt 0 ]; then
    echo "PASS mutant/$name: $nf cells of the matrix fail, e.g. $(grep -m1 "^FAIL $cells" "$work/$name.log" | cut -c6- | cut -c1-120)"
    pass=$((pass + 1))
  else
    echo "FAIL mutant/$name: the matrix still passes"; fail=$((fail + 1))
  fi
}
# MUTANTS='name ...' runs only those
want() { [ -z "${MUTANTS:-}" ] || [[ " $MUTANTS " == *" $1 "* ]]; }
mutant() { want "$1" && mutant_run "$@"; }
mutant ranks_linear runtime/fsdp.c 'g[48]_' 's/for \(int d = 1; d < G; d \*= 2\)\n(\s*)for \(int q = 0; q \+ d < G; q \+= 2 \* d\)/for (int d = 1; d < G; d++)\n$1for (int q = 0; q == 0; q = G)/'
mutant micro_linear runtime/fsdp.c 'g[48]_' 's/(const int a = U->tree_micro\+\+;)/$1\n    if (a >= 0) { f->K->add(U->grad, U->grad, v, U->shard); return; }/'
mutant sources_linear models/moe.c 'moe_' 's/for \(; \(s >> k\) & 1; k\+\+\)/for (; k < (s > 0); k++)/; s/level \+ \(size_t\)k \* en, v, en \* sizeof/level, v, en * sizeof/'
mutant sources_one_gemm models/moe.c 'moe_' 's/\? (hooks->dispatch_sources\(hooks->ctx, layer, chunk, n_src\))/? ($1, (const int*)NULL)/'
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
