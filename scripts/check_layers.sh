#!/usr/bin/env bash
# check_layers.sh [BUILD] — comm/'s calls go one way: down.
#
# The layers of libzipccl (docs/COLLECTIVES.md §0), top to bottom; a file may
# call files of its own layer and of the layers below it, never above:
#
#   9 front door     core/coll.c: the public calls, argument checks, requests
#   8 tune/switcher  tune/switcher.c: auto's decision, calibration, pooling
#   7 tune/explore   tune/tune_explore.c: the measured selection
#   6 tune/model     tune/tune_model.c: the cost model (pure functions)
#   5 run            run/coll_run.c: a decided call on its buffers (host, or
#                    a device's: staged, or handed to algo/coll_device.c)
#   4 designs        algo/: the collective algorithms over the transport table
#                    (coll_algos.c, host buffers) and on device buffers
#                    (coll_device.c: coded on the device, over a network)
#   3 agreement      agree/coll_agree.c: the call agreement, liveness queries,
#                    the waits of the transport's own collectives.  Below the
#                    designs: a design finishes the agreement itself (its first
#                    sends go out while the descriptors travel, its receives
#                    are posted once the agreement is in) and answers liveness
#                    queries in its waits (zipcclIdle); it calls only common.c
#                    and the transport table
#   2 transport      transport/: the MPI and NCCL tables (and the CUDA
#                    reduction kernels of the device designs)
#   1 codec          codec/: usable alone (zipcclCompress is public), so it
#                    never reaches the wire
#   0 common         base/common.c: errors, names, dtype helpers, the clock,
#                    host allocation, the float conversions, the host's
#                    reduction arithmetic
#  -1 device         device/ (outside comm/, built into libzipccl): the one
#                    device model the kernel tables use too; it calls
#                    nothing of comm/
#
# How: every object of the library under BUILD/obj/comm (comm/bench/ holds
# programs over the public API, not the library) is read with nm; each
# undefined symbol that another comm/ object defines is a call (or a data
# reference) from the first file into the second.  One that goes up is
# printed as a FAIL: caller file -> callee function in file (layers).  Calls
# through the transport and codec tables are pointers, which nm does not see;
# the table's owner is the layer below by construction.  Static inline
# helpers of the shared header (comm_state.h) compile into each object and
# are not seen either: keep them to what every layer may use.
#
# Prints PASS/FAIL lines (tests/test_comm_layers.sh runs it in the suite) and
# exits non-zero on a failure.  A comm/ object with no layer in the table
# below fails too: a new file must be placed.
set -u
if [ $# -ge 1 ]; then build=$(cd "$1" 2>/dev/null && pwd) || { echo "FAIL comm_layers: no build directory $1"; exit 1; }
else build=$(cd "$(dirname "$0")/.." && pwd)/build; fi
objdir=$build/obj/comm

# layer FILE -> "RANK NAME" (FILE relative to comm/, as the source is named)
layer() {
  case "$1" in
    core/coll.c)         echo "9 front-door" ;;
    tune/switcher.c)     echo "8 tune/switcher" ;;
    tune/tune_explore.c) echo "7 tune/explore" ;;
    tune/tune_model.c)   echo "6 tune/model" ;;
    run/coll_run.c)      echo "5 run" ;;
    algo/*)              echo "4 designs" ;;
    agree/coll_agree.c)  echo "3 agreement" ;;
    transport/*)         echo "2 transport" ;;
    codec/*)             echo "1 codec" ;;
    base/common.c)       echo "0 common" ;;
    device/*)            echo "-1 device" ;;
    *)                   echo "" ;;
  esac
}

fails=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: $2"; fails=$((fails + 1)); }

objs=() # relative to $objdir; the device layer's as ../device/NAME.o
[ -d "$objdir" ] && while IFS= read -r o; do objs+=("$o"); done \
  < <(cd "$objdir" && find . -name '*.o' ! -path './bench/*' | sed 's#^\./##' | LC_ALL=C sort)
[ -d "$objdir/../device" ] && while IFS= read -r o; do objs+=("../device/$o"); done \
  < <(cd "$objdir/../device" && find . -name '*.o' | sed 's#^\./##' | LC_ALL=C sort)
if [ ${#objs[@]} -eq 0 ]; then
  fail comm_layers "no comm/ objects under $objdir (build first: make all)"
  exit 1
fi

# The source a object was built from: core/coll.o -> core/coll.c,
# codec/codec_cuda.cu.o -> codec/codec_cuda.cu.
src_of() { local o=${1#../}; case "$o" in *.cu.o) echo "${o%.o}" ;; *) echo "${o%.o}.c" ;; esac; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
: >"$tmp/defs"; : >"$tmp/refs"; : >"$tmp/layers"
for o in "${objs[@]}"; do
  s=$(src_of "$o"); l=$(layer "$s")
  if [ -z "$l" ]; then
    fail "comm_layers_$s" "no layer for comm/$s: place it in scripts/check_layers.sh's table"
    continue
  fi
  echo "$s $l" >>"$tmp/layers"
  nm -g --defined-only "$objdir/$o" | awk -v s="$s" 'NF == 3 { print $3, s }' >>"$tmp/defs"
  nm -u "$objdir/$o" | awk -v s="$s" '{ print s, $NF }' >>"$tmp/refs"
done

# refs: "caller symbol"; defs: "symbol definer"; layers: "file rank name".
# One line per cross-file reference: caller rank name symbol callee rank name.
awk 'FILENAME == ARGV[1] { rank[$1] = $2; name[$1] = $3; next }
     FILENAME == ARGV[2] { if (!($1 in def)) def[$1] = $2; next }
     ($2 in def) && def[$2] != $1 {
       d = def[$2]; print $1, rank[$1], name[$1], $2, d, rank[d], name[d]
     }' "$tmp/layers" "$tmp/defs" "$tmp/refs" | LC_ALL=C sort -u >"$tmp/calls"

if [ ! -s "$tmp/calls" ]; then
  fail comm_layers "no calls between comm/ objects found in $objdir (nm failed?)"
  exit 1
fi

while read -r s rank name; do
  up=$(awk -v s="$s" '$1 == s && $6 > $2' "$tmp/calls")
  total=$(awk -v s="$s" '$1 == s' "$tmp/calls" | wc -l)
  if [ -z "$up" ]; then
    pass "comm_layers_$s ($name, layer $rank): $total call(s) into other files, none up"
  else
    while read -r _ r n sym d dr dn; do
      fail "comm_layers_$s" "calls up: $s -> $sym in $d ($n, layer $r, calls $dn, layer $dr above it)"
    done <<<"$up"
  fi
done <"$tmp/layers"

up=$(awk '$6 > $2' "$tmp/calls" | wc -l)
echo "check_layers: ${#objs[@]} objects in $objdir, $(wc -l <"$tmp/calls") calls between files, $up going up"
exit $((fails > 0))
