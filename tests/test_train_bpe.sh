#!/usr/bin/env bash
# test: timeout=300
# test_train_bpe.sh — the BPE tokenizer (runtime/data.c).
#   - the cached token stream decodes, through the cached merges, back to the
#     exact bytes of the text (train split and validation split), checked by
#     an independent decoder written here in Python;
#   - merges are deterministic and greedy: each merge is the most frequent
#     adjacent pair of the sequence at that point (recounted here from scratch
#     for the first merges), ties to the smaller pair id;
#   - a second run reads the cache and trains bit-identically to the first;
#   - at 2 ranks (rank 0 trains, the others wait and read its cache) a fresh
#     run equals a run over the existing cache, bit for bit;
#   - a vocabulary smaller than 256 + merges is refused.
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
[ -x "$TRAIN" ] || { echo "FAIL train_bpe: $TRAIN not built"; exit 1; }
cat README.md docs/RUNTIME.md >"$tmp/corpus.txt"
cat >"$tmp/bpe.yaml" <<YAML
model: {vocab_size: 320, dim: 32, n_layers: 1, n_heads: 2, n_kv_heads: 1, ffn_hidden: 64, max_seq_len: 32}
data: {path: $tmp/corpus.txt, tokenizer: bpe, bpe_merges: 64, seq_len: 32, batch_size: 2, val_fraction: 0.1}
train: {steps: 3}
YAML
hash_of() { sed -n 's/.*"param_hash": "\([0-9a-f]*\)".*/\1/p' "$1"; }

if "$TRAIN" "$tmp/bpe.yaml" --log-json "$tmp/a.jsonl" >"$tmp/a.log" 2>&1 && grep -q "bpe tokenizer (trained)" "$tmp/a.log"; then
  pass "bpe_trains"
else
  fail "bpe_trains" "$(tail -3 "$tmp/a.log")"
fi
[ -s "$tmp/corpus.txt.bpe64.cache" ] && [ -s "$tmp/corpus.txt.bpe64.vocab" ] && pass "bpe_cache_and_vocab_written" \
  || fail "bpe_cache_and_vocab_written" "$(ls "$tmp")"

why=$(python3 - "$tmp/corpus.txt" <<'PY' 2>&1
import struct, sys
text = open(sys.argv[1], "rb").read()
b = open(sys.argv[1] + ".bpe64.cache", "rb").read()
assert b[:8] == b"ZRTBPE1\0", "magic"
nbytes, h, split, M, nm = struct.unpack_from("<QQQII", b, 8)
off = 40
merges = [struct.unpack_from("<II", b, off + 8 * i) for i in range(nm)]
off += 8 * nm
nt, nv = struct.unpack_from("<QQ", b, off); off += 16
tok = struct.unpack_from("<%di" % (nt + nv), b, off)
assert nbytes == len(text) and M == 64 and nm == 64, (nbytes, M, nm)
assert split == len(text) - int(len(text) * 0.1), ("split", split)
vocab = [bytes([i]) for i in range(256)]
for a, c in merges: vocab.append(vocab[a] + vocab[c])
assert b"".join(vocab[t] for t in tok[:nt]) == text[:split], "train split does not decode to the text"
assert b"".join(vocab[t] for t in tok[nt:]) == text[split:], "validation split does not decode to the text"
# Recount the first merges from scratch: greedy most frequent pair, ties to smaller id.
seq = list(text[:split]); V = 256 + 64
for m in range(8):
    counts = {}
    for x, y in zip(seq, seq[1:]): counts[x * V + y] = counts.get(x * V + y, 0) + 1
    best = min(counts, key=lambda k: (-counts[k], k))
    assert (best // V, best % V) == tuple(merges[m]), "merge %d: want %s got %s" % (m, (best // V, best % V), merges[m])
    out, i = [], 0
    while i < len(seq):
        if i + 1 < len(seq) and seq[i] == best // V and seq[i + 1] == best % V: out.append(256 + m); i += 2
        else: out.append(seq[i]); i += 1
    seq = out
PY
) && pass "bpe_decodes_to_text_and_merges_are_greedy" || fail "bpe_decodes_to_text_and_merges_are_greedy" "$why"

if "$TRAIN" "$tmp/bpe.yaml" --log-json "$tmp/b.jsonl" >"$tmp/b.log" 2>&1 && grep -q "bpe tokenizer (cached)" "$tmp/b.log" &&
   [ -n "$(hash_of "$tmp/a.jsonl")" ] && [ "$(hash_of "$tmp/a.jsonl")" = "$(hash_of "$tmp/b.jsonl")" ]; then
  pass "bpe_cached_run_identical"
else
  fail "bpe_cached_run_identical" "$(grep '# data' "$tmp/b.log") $(hash_of "$tmp/a.jsonl") vs $(hash_of "$tmp/b.jsonl")"
fi

# 2 ranks: rank 0 trains a fresh cache, the others read it; then again from the cache.
rm -f "$tmp"/corpus.txt.bpe64.*
if mpirun --oversubscribe --bind-to none -n 2 "$TRAIN" "$tmp/bpe.yaml" --log-json "$tmp/c.jsonl" >"$tmp/c.log" 2>&1 &&
   mpirun --oversubscribe --bind-to none -n 2 "$TRAIN" "$tmp/bpe.yaml" --log-json "$tmp/d.jsonl" >"$tmp/d.log" 2>&1 &&
   [ -n "$(hash_of "$tmp/c.jsonl")" ] && [ "$(hash_of "$tmp/c.jsonl")" = "$(hash_of "$tmp/d.jsonl")" ]; then
  pass "bpe_two_ranks_fresh_equals_cached"
else
  fail "bpe_two_ranks_fresh_equals_cached" "$(tail -3 "$tmp/c.log") $(tail -3 "$tmp/d.log")"
fi

sed 's/vocab_size: 320/vocab_size: 300/' "$tmp/bpe.yaml" >"$tmp/small.yaml"
"$TRAIN" "$tmp/small.yaml" >"$tmp/e.log" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "too small for the bpe tokenizer with 64 merges (needs >= 320)" "$tmp/e.log" \
  && pass "bpe_vocab_too_small_refused" || fail "bpe_vocab_too_small_refused" "exit $rc: $(tail -2 "$tmp/e.log")"
exit $((fails > 0))
