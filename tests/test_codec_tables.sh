#!/usr/bin/env bash
# test: timeout=60
# test_codec_tables.sh — the rANS tables exist three times: the generator
# (scripts/gen_rans_tables.py), the C header the codecs compile
# (comm/codec/codec_tables.h) and the normative Markdown table (docs/FORMAT.md §5).
# Regenerate both outputs and require them to match byte for byte.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if python3 scripts/gen_rans_tables.py >"$tmp/h" 2>"$tmp/err"; then
  if cmp -s "$tmp/h" comm/codec/codec_tables.h; then echo "PASS rans_tables_header_matches_generator"
  else echo "FAIL rans_tables_header_matches_generator: $(diff "$tmp/h" comm/codec/codec_tables.h | head -3 | tr '\n' ' ')"; fi
else
  echo "FAIL rans_tables_header_matches_generator: generator failed: $(head -3 "$tmp/err")"
fi
if python3 scripts/gen_rans_tables.py --md >"$tmp/md" 2>"$tmp/err"; then
  # the table in FORMAT.md: the lines from its header row to the next blank line
  awk '/^\| t \| tau \|/{on=1} on&&/^$/{exit} on{print}' docs/FORMAT.md >"$tmp/doc"
  if [ -s "$tmp/doc" ] && cmp -s "$tmp/md" "$tmp/doc"; then echo "PASS rans_tables_format_md_matches_generator"
  else echo "FAIL rans_tables_format_md_matches_generator: $(diff "$tmp/md" "$tmp/doc" | head -3 | tr '\n' ' ')"; fi
else
  echo "FAIL rans_tables_format_md_matches_generator: generator failed: $(head -3 "$tmp/err")"
fi
# the header's tables must be probability distributions over 4096 slots
python3 - <<'PY'
import re
txt = open("comm/codec/codec_tables.h").read()
freq = txt[txt.index("zipccl_rans_freq"):txt.index("};", txt.index("zipccl_rans_freq"))]
rows = re.findall(r"\{([\d,\s]+)\}", freq)
ok = len(rows) == 40 and all(len(r.split(",")) == 16 and sum(map(int, r.split(","))) == 4096
                            and min(map(int, r.split(","))) >= 1 for r in rows)
print("PASS rans_tables_sum_to_4096" if ok else "FAIL rans_tables_sum_to_4096: a row does not sum to 4096")
PY
