#!/usr/bin/env bash
# test: asan=no timeout=60
# test_comm_layers.sh — comm/'s calls go one way, down (docs/COLLECTIVES.md
# §0): scripts/check_layers.sh reads the library's objects in $BUILD with nm
# and fails on any call from a lower layer into a higher one.  Then the check
# itself: a copy of the objects with one planted upward call (a transport
# calling a design) must fail, naming it.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
bash scripts/check_layers.sh "$BUILD"; layers=$? # its PASS/FAIL lines are this test's

if [ -d "$BUILD/obj/comm" ]; then
  mkdir -p "$tmp/b/obj"
  cp -r "$BUILD/obj/comm" "$tmp/b/obj/"
  printf 'int zipcclRunAlgo(void);\nint upcall(void) { return zipcclRunAlgo(); }\n' >"$tmp/upcall.c"
  if ${CC:-cc} -c "$tmp/upcall.c" -o "$tmp/b/obj/comm/transport/upcall.o" 2>"$tmp/cc.err"; then
    out=$(bash scripts/check_layers.sh "$tmp/b" 2>&1); rc=$?
    want='FAIL comm_layers_transport/upcall.c: calls up: transport/upcall.c -> zipcclRunAlgo in algo/coll_algos.c'
    if [ $rc -ne 0 ] && grep -qF "$want" <<<"$out"; then pass check_layers_catches_upward_call
    else fail check_layers_catches_upward_call "exit $rc; $(grep -c '^FAIL' <<<"$out") FAIL lines, none naming the planted call"; fi
  else
    fail check_layers_catches_upward_call "cannot compile the planted object: $(head -2 "$tmp/cc.err")"
  fi
fi
exit $((fails > 0 || layers != 0))
