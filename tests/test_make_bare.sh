#!/usr/bin/env bash
# test: timeout=60 asan=no
# test_make_bare.sh — the README's two commands work as the very first command
# on a bare machine: `make run` and `make test` install the dependencies, and
# what they compile must see what that install brought (Open MPI's include
# and link flags come from `mpicc --showme`, which exists only after it).
#
# Simulated without uninstalling anything: a PATH where `mpicc` fails (as if
# absent) until a stand-in `make deps` (DEPS=...) puts one there that prints a
# marker flag; a stand-in compiler records its arguments and stops the build.
# The first compile of each command must carry the marker.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
mkdir -p "$tmp/bin"
cat >"$tmp/bin/mpicc" <<'SH'
#!/bin/sh
exit 1
SH
cat >"$tmp/deps.sh" <<SH
#!/bin/sh
cat >"$tmp/bin/mpicc" <<'X'
#!/bin/sh
case "\$1" in --showme:compile) echo -DZRT_MPI_FROM_DEPS ;; --showme:link) echo -lmpi ;; esac
X
chmod +x "$tmp/bin/mpicc"
SH
cat >"$tmp/cc" <<SH
#!/bin/sh
echo "\$@" >>"$tmp/cc.log"
exit 1
SH
chmod +x "$tmp/bin/mpicc" "$tmp/deps.sh" "$tmp/cc"
for goal in run test; do
  cat >"$tmp/bin/mpicc" <<'SH'
#!/bin/sh
exit 1
SH
  : >"$tmp/cc.log"
  PATH="$tmp/bin:$PATH" make --no-print-directory -k "$goal" DEPS="$tmp/deps.sh" CC="$tmp/cc" \
    NO_CUDA=1 BUILD="$tmp/build" >"$tmp/make.log" 2>&1
  first=$(head -1 "$tmp/cc.log")
  if [ -z "$first" ]; then
    fail "make_$goal/first_compile_sees_deps" "no compile ran: $(tail -3 "$tmp/make.log")"
  elif [[ "$first" == *-DZRT_MPI_FROM_DEPS* ]]; then
    pass "make_$goal/first_compile_sees_deps"
  else
    fail "make_$goal/first_compile_sees_deps" "the first compile lacks the flags mpicc gives after deps: $first"
  fi
done
exit $((fails > 0))
