#!/usr/bin/env bash
# test: timeout=300 asan=no
# test_damage_trial.sh — issue 52's trial in small: scripts/damage_trial.py
# loads 24 randomly damaged copies of a tiny Hugging Face export (header
# bytes, header length, truncation, config.json fields, weight bits, tensor
# names with escape sequences; every kind at least once per seed) with build/train
# --init-from, and no copy may crash, hang, or put a raw control byte or
# invalid UTF-8 on the terminal. Two seeds, so a fix for one draw is not
# the whole check; the 400-copy run is in docs/BENCHMARKS.md.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
[ -x "$TRAIN" ] || { echo "FAIL damage_trial: $TRAIN not built"; exit 1; }
for seed in 5 6; do
  if out=$(TRAIN="$TRAIN" python3 scripts/damage_trial.py --copies 12 --seed "$seed" --timeout 60 2>&1); then
    pass "damage_trial_seed$seed ($(tail -2 <<<"$out" | head -1 | tr -s ' '))"
  else
    fail "damage_trial_seed$seed" "$(grep -E '^copy |^all' <<<"$out" | head -5)"
  fi
done
[ "$fails" = 0 ]
