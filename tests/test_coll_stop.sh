#!/usr/bin/env bash
# test: timeout=180
# test_coll_stop.sh — a job whose rank stops or dies mid-call ends in time.
# Three ranks run AllGathers and AllReduces in a loop (tests/test_coll_stop
# --loop STRATEGY) with ZIPCCL_TIMEOUT_S=4; from outside, one rank is
#   - stopped (SIGSTOP), once under raw and once under native: the others
#     must print warnings that name it (at half the timeout here; 10, 20,
#     40, 80 s by default), give up after the timeout with an error that
#     names it (directly, or through the peer that waits for it), and the
#     job must end within a few seconds of the timeout (the loop aborts on
#     the error); before, it waited the 300 s default, its warnings named
#     no rank, and a receive that the stopped rank had begun held the call
#     until that rank was continued;
#   - killed (SIGKILL): Open MPI ends the job in about a second (6 s allowed).
# The stopped rank is continued and the job killed if it outlives 40 s.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
BIN=$BUILD/tests/test_coll_stop
if [ ! -x "$BIN" ]; then
  fail stop_built "$BIN missing (make $BIN)"
  exit 1
fi
timeout_s=4

# run STRATEGY SIGNAL: start the loop, send SIGNAL to rank 2 once it runs,
# and leave the milliseconds until the job ended in $took (-1: it did not
# start).
run() {
  local strategy=$1 sig=$2 victim= i k r
  : >"$tmp/out"
  ZIPCCL_TIMEOUT_S=$timeout_s mpirun -x ZIPCCL_TIMEOUT_S --oversubscribe --bind-to none -n 3 \
    "$BIN" --loop "$strategy" >"$tmp/out" 2>"$tmp/err" &
  local job=$!
  for i in $(seq 200); do grep -q looping "$tmp/out" && break; sleep 0.1; done
  for k in $(pgrep -P "$job"); do
    r=$(tr '\0' '\n' <"/proc/$k/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ "$r" = 2 ] && victim=$k
  done
  took=-1
  if [ -z "$victim" ] || ! grep -q looping "$tmp/out"; then
    kill "$job" 2>/dev/null; wait "$job" 2>/dev/null
    return
  fi
  local t0; t0=$(date +%s%N)
  kill "-$sig" "$victim"
  ( sleep 40; kill -CONT "$victim" 2>/dev/null; kill "$job" 2>/dev/null ) &
  local guard=$!
  wait "$job" 2>/dev/null
  took=$(( ($(date +%s%N) - t0) / 1000000 ))
  kill "$guard" 2>/dev/null; wait "$guard" 2>/dev/null
  kill -CONT "$victim" 2>/dev/null
}

for strategy in raw native; do
  name=stopped_rank_ends_job_$strategy
  run "$strategy" STOP
  if [ "$took" = -1 ]; then
    fail "$name" "the loop did not start: $(tail -3 "$tmp/err" | tr '\n' ' ')"
    continue
  fi
  warn=$(grep -m1 'still waiting' "$tmp/err")
  err=$(grep -m1 '^loop: .*timed out' "$tmp/err")
  why=
  # A little over the timeout: a warning's liveness query (0.5 s), the
  # withdrawal of receives (at most 1 s), MPI_Abort and the job's end on a
  # shared machine.
  [ "$took" -gt $(( (timeout_s + 8) * 1000 )) ] && why="the job ended ${took} ms after the stop (timeout ${timeout_s} s)"
  [ -z "$why" ] && ! echo "$warn" | grep -q 'rank 2' && why="no warning named rank 2: '$warn'"
  [ -z "$why" ] && ! echo "$err" | grep -qE 'rank [0-9]' && why="no timeout error naming a rank: '$err'"
  [ -z "$why" ] && ! grep -E '^loop: rank [01]: .*timed out' "$tmp/err" | grep -q 'rank 2\|ranks 2' \
    && ! grep -q 'rank 2 does not answer' "$tmp/err" && why="nothing names rank 2: $(head -c 600 "$tmp/err")"
  if [ -n "$why" ]; then fail "$name" "$why"; else pass "$name"; fi
  [ -n "${ZIPCCL_TEST_VERBOSE:-}" ] && { echo "# $name: ${took} ms"; grep -E 'still waiting|^loop' "$tmp/err" | sed 's/^/# /'; }
done

run raw KILL
if [ "$took" = -1 ]; then
  fail killed_rank_ends_job "the loop did not start: $(tail -3 "$tmp/err" | tr '\n' ' ')"
elif [ "$took" -gt 6000 ]; then
  fail killed_rank_ends_job "the job ended ${took} ms after the kill"
else
  pass killed_rank_ends_job
fi
exit $((fails > 0))
