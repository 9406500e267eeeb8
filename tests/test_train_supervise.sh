#!/usr/bin/env bash
# test: asan=no timeout=300
# test_train_supervise.sh — supervised runs (issue 38 item 1, and item 2's
# fallback): build/supervise restarts a 4-rank job from the newest good
# checkpoint, and the run that was killed several times ends with the
# uninterrupted run's final parameter hash.
#   (s1) chaos: while a supervised run (checkpoint every 2 steps, keep 3,
#        ZIPCCL_TIMEOUT_S=5) trains, a random rank is SIGKILLed at a random
#        step, later another is SIGSTOPped (the others time out), later the
#        job is frozen (every rank SIGSTOPped), the newest checkpoint
#        corrupted (a flipped byte) and every rank killed (the host died):
#        one restart line each, a fallback line naming the corrupted
#        checkpoint, the uninterrupted run's final hash.
#        ZIPCCL_TEST_LONG=1: 100 steps and ten events, also a truncated file
#        and a missing manifest.
#   (s2) a hang without a communication timeout (ZIPCCL_TIMEOUT_S=0, a rank
#        stopped): the supervisor's --hang-timeout stops and restarts it;
#        then SIGTERM to the supervisor: the ranks agree on a step, write its
#        checkpoint, exit 75, no restart; `latest` names that step; a second
#        supervisor with --auto-resume continues it to the same final hash.
#   (s3) --max-restarts exceeded: non-zero exit (the job's code) and the
#        message; the trainer's bad-input status 2 is not restarted.
# Events and victims come from a seeded RANDOM; the seed is printed, and
# ZIPCCL_CHAOS_SEED=N replays the choices (not the timing).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
SUP=$BUILD/supervise
NP=4
LONG=${ZIPCCL_TEST_LONG:-0}
seed=${ZIPCCL_CHAOS_SEED:-$(( $(date +%s%N) / 1000 % 1000000 ))}
RANDOM=$seed
echo "# chaos seed $seed (replay the choices: ZIPCCL_CHAOS_SEED=$seed)"
for b in "$SUP" "$TRAIN"; do [ -x "$b" ] || { echo "FAIL supervise: $b not built"; exit 1; }; done

steps=40
[ "$LONG" = 1 ] && steps=100
tiny_yaml $steps 1 0 2
# a little more work per step than the suite's tiny model (~10-40 ms at 4
# ranks here), so that an event lands near the step it was aimed at
MODEL=(--set model.dim=64 --set model.ffn_hidden=128 --set data.batch_size=4)
CMD=(mpirun -x ZIPCCL_TIMEOUT_S --oversubscribe --bind-to none -n $NP "$TRAIN" "$tmp/tiny.yaml"
     "${MODEL[@]}" --set checkpoint.every=2 --set checkpoint.keep=3)

sups=() stopped=()
cleanup() { # nothing of ours outlives the test, a failed one included
  local p
  for p in "${stopped[@]}"; do kill -CONT "$p" 2>/dev/null; done
  for p in "${sups[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT

# wait_until SECONDS CMD...: poll CMD every 50 ms; 1 when it never held
wait_until() {
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.05; done
}
restarts() { grep -c '^# supervise: restart' "$1"; }
# the newest step line of the current attempt (after the last restart line), and its first
attempt_steps() {
  awk '/^# supervise: restart/ {f = 0; l = 0}
       /^step +[0-9]+\// {split($2, a, "/"); if (!f) f = a[1] + 0; l = a[1] + 0}
       END {print f + 0, l + 0}' "$1"
}
attempt_at() { local f l; read -r f l < <(attempt_steps "$1"); [ "$l" -ge "$2" ]; }
attempt_began() { local f l; read -r f l < <(attempt_steps "$1"); [ "$l" -gt 0 ]; }
more_restarts() { [ "$(restarts "$1")" -gt "$2" ]; }
alive() { kill -0 "$1" 2>/dev/null; }
ranks_of() { # ranks_of SUPPID: "pid rank" of each training rank of the job
  local mp k r
  for mp in $(pgrep -P "$1"); do
    for k in $(pgrep -P "$mp"); do
      r=$(tr '\0' '\n' <"/proc/$k/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
      [ -n "$r" ] && echo "$k $r"
    done
  done
}
newest_complete() { # the newest step directory with a manifest
  local d
  for d in $(ls -d "$1"/step_* 2>/dev/null | sort -r); do
    [ -f "$d/manifest.json" ] && { echo "$d"; return; }
  done
}

# chaos OUT SUPPID CKPT EVENT...: each event at a random step 2..6 after the
# start of an attempt: kill / stop a random rank; corrupt / truncate /
# nomanifest: freeze the ranks, damage the newest complete checkpoint, kill
# them all (continued, rank 0 could complete a newer checkpoint, and the
# damaged one would rightly not be needed); term: SIGTERM to the supervisor. Every
# event but term must be followed by a restart. Returns 1 (said) when not.
chaos() {
  local out=$1 sup=$2 ck=$3; shift 3
  local ev f l target n0 victim r pid rank d who
  for ev in "$@"; do
    if ! wait_until 60 attempt_began "$out"; then
      fail chaos "no step of a new attempt within 60 s before '$ev'"; return 1
    fi
    read -r f l < <(attempt_steps "$out")
    target=$((f - 1 + 2 + RANDOM % 5))
    r=$((RANDOM % NP))
    if [ "$target" -ge $((steps - 1)) ]; then fail chaos "no steps left for '$ev' (at step $l of $steps)"; return 1; fi
    victim= # found before the step is awaited: the event lands closer to it
    while read -r pid rank; do [ "$rank" = "$r" ] && victim=$pid; done < <(ranks_of "$sup")
    [ -n "$victim" ] || { fail chaos "rank $r of the job not found for '$ev'"; return 1; }
    if ! wait_until 60 attempt_at "$out" "$target"; then
      fail chaos "step $target not reached within 60 s for '$ev'"; return 1
    fi
    alive "$sup" || { fail chaos "the supervisor ended before '$ev'"; return 1; }
    n0=$(restarts "$out")
    read -r f l < <(attempt_steps "$out")
    case $ev in kill|stop) who="rank $r" ;; term) who="the supervisor" ;; *) who="the job" ;; esac
    echo "# chaos: $ev, $who, at step $l (aimed at $target)"
    case $ev in
      kill) kill -KILL "$victim" ;;
      stop) kill -STOP "$victim"; stopped+=("$victim") ;;
      term) kill -TERM "$sup"; return 0 ;;
      corrupt|truncate|nomanifest)
        local all=() p
        while read -r p rank; do all+=("$p"); kill -STOP "$p"; done < <(ranks_of "$sup")
        d=$(newest_complete "$ck")
        [ -n "$d" ] || { kill -CONT "${all[@]}"; fail chaos "no checkpoint to damage"; return 1; }
        case $ev in
          corrupt) python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 0x5a; open(p, "wb").write(b)' "$d/rank_00001.safetensors" ;;
          truncate) truncate -s 1000 "$d/rank_00002.safetensors" ;;
          nomanifest) rm -f "$d/manifest.json" ;;
        esac
        echo "$d" >>"$tmp/damaged"
        echo "# chaos: $ev $(basename "$d")"
        kill -KILL "${all[@]}" ;;
    esac
    if ! wait_until 60 more_restarts "$out" "$n0"; then
      fail chaos "no restart within 60 s after '$ev'"; return 1
    fi
  done
}

# finish SUPPID SECONDS: wait for the supervisor (killed after SECONDS);
# its exit status in $rc (124: it had to be killed)
finish() {
  if wait_until "$2" eval '! alive '"$1"; then wait "$1"; rc=$?
  else kill -KILL "$1"; wait "$1" 2>/dev/null; rc=124; fi
}
final_hash() { sed -n 's/^# done: .*final param hash \([0-9a-f]*\)$/\1/p' "$1" | tail -1; }

# ---- the uninterrupted run
t0=$SECONDS
run $NP "$tmp/ref.jsonl" "${MODEL[@]}" || { fail uninterrupted "see above"; exit 1; }
ref=$(final_hash "$tmp/ref.jsonl.log")
echo "# uninterrupted: $steps steps at $NP ranks, hash $ref, $((SECONDS - t0)) s"

# ---- (s1) chaos
events=(kill stop corrupt)
[ "$LONG" = 1 ] && events=(kill stop corrupt kill truncate stop kill nomanifest stop kill)
t0=$SECONDS
out=$tmp/chaos.out ck=$tmp/ck1
: >"$tmp/damaged"; : >"$out"
ZIPCCL_TIMEOUT_S=5 "$SUP" --max-restarts $(( ${#events[@]} + 2 )) --hang-timeout 10 --kill-grace 2 \
  -- "${CMD[@]}" --set checkpoint.dir="$ck" >"$out" 2>&1 &
sup=$!; sups+=("$sup")
chaos "$out" "$sup" "$ck" "${events[@]}"
finish "$sup" 120
n=$(restarts "$out")
h=$(final_hash "$out")
echo "# chaos: ${#events[@]} events, $n restarts, $((SECONDS - t0)) s"
grep '^# supervise: \(restart\|checkpoint\)' "$out" | sed 's/^/#   /'
if [ "$rc" = 0 ] && [ "$h" = "$ref" ] && [ "$n" -ge "${#events[@]}" ]; then
  pass chaos_run_ends_with_the_uninterrupted_hash
else
  fail chaos_run_ends_with_the_uninterrupted_hash "exit $rc, $n restarts for ${#events[@]} events, hash '$h' vs '$ref': $(grep -v '^step' "$out" | tail -5 | tr '\n' ' ')"
fi
bad=$(grep '^# supervise: restart' "$out" | grep -v -E ': (exit code [0-9]+|killed by signal [0-9]+|hang: no output for [0-9.]+ s)( \(.*\))?; (resuming step [0-9]+ from .*/step_[0-9]{8}|no usable checkpoint under .*: restarting from step 0), lost [0-9]+ steps?' | head -2)
if [ -z "$bad" ] && grep -q '^# supervise: restart [0-9]*/.*rank [0-9] exited on signal 9 (Killed)); ' "$out"; then
  pass restart_lines_say_what_failed_and_what_was_lost
else
  fail restart_lines_say_what_failed_and_what_was_lost "${bad:-no restart line names the killed rank}"
fi
miss=
while read -r d; do
  grep -q "^# supervise: checkpoint $d is not usable (.*): falling back to the previous one" "$out" || miss="$miss $d"
done <"$tmp/damaged"
if [ -z "$miss" ] && [ -s "$tmp/damaged" ]; then pass damaged_newest_checkpoint_falls_back
else fail damaged_newest_checkpoint_falls_back "no fallback line for:${miss:- (nothing damaged)}"; fi

# ---- (s2) a hang the communication does not catch, then a preemption
t0=$SECONDS
out=$tmp/term.out ck=$tmp/ck2
: >"$out"
ZIPCCL_TIMEOUT_S=0 "$SUP" --hang-timeout 4 --kill-grace 2 -- "${CMD[@]}" --set checkpoint.dir="$ck" \
  >"$out" 2>&1 &
sup=$!; sups+=("$sup")
chaos "$out" "$sup" "$ck" stop term
finish "$sup" 60
if grep -q '^# supervise: restart [0-9]/3: hang: no output for 4 s; ' "$out"; then
  pass hang_detected_by_the_supervisor
else
  fail hang_detected_by_the_supervisor "$(grep '^# supervise' "$out" | tail -3 | tr '\n' ' ')"
fi
# the last such line: the hang's SIGTERM (with SIGCONT) may have let the
# first attempt agree on a preemption too
p=$(sed -n 's/^# preempted: .*stopped after step \([0-9]*\) of .*checkpoint .*written.*exit 75$/\1/p' "$out" | tail -1)
latest=$(cat "$ck/latest" 2>/dev/null)
if [ "$rc" = 75 ] && [ -n "$p" ] && [ "$latest" = "$(printf 'step_%08d' "$p")" ] &&
   grep -q '^# supervise: stopped by Terminated: the job wrote its checkpoint' "$out" &&
   awk '/^# supervise: Terminated: asking/ {t = 1} t && /^# supervise: restart/ {r = 1}
        END {exit !(t && !r)}' "$out"; then
  pass sigterm_writes_a_checkpoint_and_exits_75
else
  fail sigterm_writes_a_checkpoint_and_exits_75 "exit $rc, preempted at '$p', latest '$latest': $(grep -v '^step' "$out" | tail -4 | tr '\n' ' ')"
fi
out3=$tmp/resume.out
ZIPCCL_TIMEOUT_S=0 "$SUP" --auto-resume --hang-timeout 30 -- "${CMD[@]}" --set checkpoint.dir="$ck" \
  >"$out3" 2>&1 &
sup=$!; sups+=("$sup")
finish "$sup" 60
h=$(final_hash "$out3")
if [ "$rc" = 0 ] && [ -n "$p" ] && [ "$h" = "$ref" ] &&
   grep -q "^# supervise: --auto-resume: resuming step $p from $ck/step_" "$out3"; then
  pass preempted_run_resumes_to_the_uninterrupted_hash
else
  fail preempted_run_resumes_to_the_uninterrupted_hash "exit $rc, hash '$h' vs '$ref': $(grep -v '^step' "$out3" | tail -4 | tr '\n' ' ')"
fi
echo "# hang + preemption + resume: $((SECONDS - t0)) s"

# ---- (s3) bounded restarts; bad input is not restarted
timeout 30 "$SUP" --max-restarts 2 -- sh -c 'echo "step 3/9"; exit 3' >"$tmp/max.out" 2>&1
rc=$?
if [ $rc = 3 ] && [ "$(restarts "$tmp/max.out")" = 2 ] &&
   grep -q '^supervise: error: giving up after 2 restarts (--max-restarts 2): the job failed again, exit code 3' "$tmp/max.out"; then
  pass max_restarts_exceeded_is_an_error
else
  fail max_restarts_exceeded_is_an_error "exit $rc: $(tail -3 "$tmp/max.out" | tr '\n' ' ')"
fi
timeout 60 "$SUP" -- "$TRAIN" "$tmp/tiny.yaml" --set train.stepz=3 >"$tmp/bad.out" 2>&1
rc=$?
if [ $rc = 2 ] && [ "$(restarts "$tmp/bad.out")" = 0 ] && grep -q "unknown key 'train.stepz'" "$tmp/bad.out" &&
   grep -q '^# supervise: the job exited with code 2, .*not restarting' "$tmp/bad.out"; then
  pass bad_input_is_not_restarted
else
  fail bad_input_is_not_restarted "exit $rc: $(tail -3 "$tmp/bad.out" | tr '\n' ' ')"
fi

echo "supervise: $fails failure(s)"
[ "$fails" -eq 0 ]
