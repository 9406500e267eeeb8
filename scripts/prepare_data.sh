#!/usr/bin/env bash
# prepare_data.sh [OUT] — build the default training corpus: the English text
# of Debian's fortunes packages (/usr/share/games/fortunes, installed by
# `make deps`) as one plain-text file, data/fortunes.txt by default.
#
# Fortune files are plain text with a line holding only '%' between entries;
# the '%' lines become blank lines so entries read as paragraphs. The .dat
# (strfile index) and .u8 (UTF-8 copy) files are skipped, and so is the
# off/ directory of offensive fortunes. Files are taken in sorted order, so
# the corpus is byte-identical on every machine with the same packages.
# Tokenizing (byte-level, or a BPE trained and cached at first use) is done
# by build/train: see docs/RUNTIME.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-data/fortunes.txt}
src=${FORTUNES_DIR:-/usr/share/games/fortunes}
if [ ! -d "$src" ]; then
  echo "prepare_data: $src not found; run 'make deps' (Debian packages fortunes fortunes-min)" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
find "$src" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' ! -name '*.sh' -print0 \
  | LC_ALL=C sort -z \
  | xargs -0 cat \
  | LC_ALL=C sed -e 's/^%$//' >"$tmp"
bytes=$(wc -c <"$tmp")
if [ "$bytes" -lt 100000 ]; then
  echo "prepare_data: only $bytes bytes of text in $src; is the fortunes package complete?" >&2
  exit 1
fi
mv "$tmp" "$out"
trap - EXIT
echo "prepare_data: wrote $out ($bytes bytes from $(find "$src" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | wc -l) files)"
