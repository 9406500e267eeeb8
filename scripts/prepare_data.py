#!/usr/bin/env python3
"""prepare_data.py — text into the trainer's token files with a Hugging Face
tokenizer.json (the `tokenizers` package).

    scripts/prepare_data.py INPUT [INPUT ...] -o OUT.bin
        (--tokenizer PATH | --train-tokenizer VOCAB)
        [--jsonl-field text] [--glob '*.txt,*.jsonl'] [--bos TOKEN|none] [--eos TOKEN|none]
        [--model DIR] [--progress | --no-progress]

INPUT is a text file (one document), a .jsonl file (one document per line, the
string field --jsonl-field), or a folder (its files matching --glob, recursively,
in sorted order). The tokenizer is the user's own tokenizer.json (a file, or a
model directory holding one: Llama-3's, Qwen3's, ...) or, with
--train-tokenizer VOCAB, a byte-level BPE of VOCAB tokens trained here on the
inputs (special token <|endoftext|>). Each document is encoded without the
tokenizer's own special tokens and written as [BOS] ids [EOS]: BOS and EOS are
tokenizer_config.json's bos_token / eos_token when it sits beside the
tokenizer.json (else <|endoftext|> as EOS when the vocabulary has it), or what
--bos / --eos name.

Writes, each to a temporary name and renamed when complete:
  OUT                 the tokens, little-endian uint16 when the vocabulary fits
                      (<= 65536 ids), else int32: data.path of the trainer, whose
                      data.tokenizer (u16 / i32) follows from OUT.json
  OUT.tokenizer.json  the tokenizer.json that made them (the export of a model
                      trained on them carries it)
  OUT.json            {"format": "zipccl-runtime-tokens-1", "dtype", "tokens",
                      "vocab_size", "tokenizer_file", "tokenizer_source",
                      "tokenizer_sha256", "bos_id", "eos_id", "documents", "inputs"}
                      written last; build/train checks the token file against it
                      and refuses a model whose vocab_size is smaller than the
                      tokenizer's (docs/RUNTIME.md, "Data")

A progress bar (stderr) shows on inputs over 8 MB when stderr is a terminal, or
with --progress (then one line per 10% when it is not a terminal).

Left out: sequence packing with document masks, shuffling (the trainer's data
order does that), parallel workers beyond the tokenizer's own threads, a large
text file's cut into 1 MiB chunks at line ends (a newline at a cut may be
tokenized apart from its neighbours).
"""
import argparse
import fnmatch
import hashlib
import json
import os
import sys
import time

import numpy as np

CHUNK = 1 << 20  # bytes of a text file encoded at once
BATCH = 256      # documents per encode_batch call


def fail(msg):
    sys.exit(f"prepare_data: error: {msg}")


class Progress:
    """Bytes done / total on stderr: a redrawn bar on a terminal, else a line per 10%."""

    def __init__(self, total, on):
        self.total, self.on, self.tty = max(total, 1), on, sys.stderr.isatty()
        self.done = self.tokens = 0
        self.t0 = self.last = time.time()
        self.next_line = 0.1

    def add(self, nbytes, ntokens):
        self.done += nbytes
        self.tokens += ntokens
        if not self.on:
            return
        now, f = time.time(), min(self.done / self.total, 1.0)
        if self.tty and now - self.last < 0.2 and f < 1.0:
            return
        if not self.tty and f < self.next_line:
            return
        self.last = now
        rate = self.done / max(now - self.t0, 1e-9)
        eta = (self.total - self.done) / rate if rate > 0 else 0
        bar = "#" * int(30 * f) + "." * (30 - int(30 * f))
        msg = (f"prepare_data: [{bar}] {100 * f:5.1f}% {self.done / 1e6:.1f}/{self.total / 1e6:.1f} MB "
               f"{self.tokens} tokens {rate / 1e6:.2f} MB/s eta {eta:.0f}s")
        if self.tty:
            sys.stderr.write("\r" + msg + ("\n" if f >= 1.0 else ""))
        else:
            sys.stderr.write(msg + "\n")
            while self.next_line <= f:
                self.next_line += 0.1
        sys.stderr.flush()


def input_files(inputs, globs):
    pats = [g.strip() for g in globs.split(",") if g.strip()]
    files = []
    for p in inputs:
        if os.path.isdir(p):
            found = []
            for root, dirs, names in os.walk(p):
                dirs.sort()
                found += [os.path.join(root, n) for n in names
                          if not n.startswith(".") and any(fnmatch.fnmatch(n, g) for g in pats)]
            if not found:
                fail(f"{p}: no file matches --glob {globs}")
            files += sorted(found)
        elif os.path.isfile(p):
            files.append(p)
        else:
            fail(f"{p}: no such file or folder")
    return files


def documents(files, field, progress=None):
    """(text, bytes of input it stands for) per document or chunk; a chunk after the
    first of a text file has first=False (no BOS), the last has last=True (EOS)."""
    for path in files:
        if path.endswith(".jsonl") or path.endswith(".json"):
            with open(path, "rb") as f:
                for no, line in enumerate(f, 1):
                    if not line.strip():
                        if progress:
                            progress.add(len(line), 0)
                        continue
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError as e:
                        fail(f"{path}:{no}: not JSON: {e.msg}")
                    if not isinstance(rec, dict) or not isinstance(rec.get(field), str):
                        fail(f"{path}:{no}: no string field '{field}' (--jsonl-field)")
                    yield rec[field], len(line), True, True
        else:
            with open(path, "rb") as f:
                data = f.read()
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                fail(f"{path}: not UTF-8 text (byte {e.start})")
            if not text:
                continue
            pos, first = 0, True
            while pos < len(text):
                end = min(pos + CHUNK, len(text))
                if end < len(text):
                    nl = text.rfind("\n", pos, end)
                    end = nl + 1 if nl > pos else end
                piece = text[pos:end]
                pos = end
                yield piece, len(piece.encode("utf-8")), first, pos >= len(text)
                first = False


def special(tok, cfg, key, given, fallback):
    """The id of --bos / --eos, or tokenizer_config.json's, or the fallback token."""
    if given == "none":
        return None
    name = given
    if name is None and cfg:
        v = cfg.get(key)
        name = v.get("content") if isinstance(v, dict) else v
    if name is None and fallback and tok.token_to_id(fallback) is not None:
        name = fallback
    if name is None:
        return None
    i = tok.token_to_id(name)
    if i is None:
        fail(f"{key} '{name}' is not in the tokenizer's vocabulary")
    return i


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="+", help="text files, .jsonl files, folders")
    ap.add_argument("-o", "--output", required=True, help="the token file to write (OUT.bin)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--tokenizer", help="tokenizer.json, or a directory holding one")
    g.add_argument("--train-tokenizer", type=int, metavar="VOCAB",
                   help="train a byte-level BPE of VOCAB tokens on the inputs")
    ap.add_argument("--jsonl-field", default="text", help="the field of a .jsonl record (text)")
    ap.add_argument("--glob", default="*.txt,*.jsonl", help="files of a folder (*.txt,*.jsonl)")
    ap.add_argument("--bos", help="token before each document, or none")
    ap.add_argument("--eos", help="token after each document, or none")
    ap.add_argument("--model", help="a Hugging Face model directory: refuse a tokenizer "
                    "larger than its config.json's vocab_size before tokenizing")
    pg = ap.add_mutually_exclusive_group()
    pg.add_argument("--progress", action="store_true", default=None)
    pg.add_argument("--no-progress", dest="progress", action="store_false")
    a = ap.parse_args()

    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        fail("the 'tokenizers' package is missing (make deps, or pip install tokenizers)")

    files = input_files(a.inputs, a.glob)
    total = sum(os.path.getsize(f) for f in files)
    show = a.progress if a.progress is not None else (total > (8 << 20) and sys.stderr.isatty())
    out = a.output
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    tcfg = None
    if a.tokenizer:
        tpath = a.tokenizer
        if os.path.isdir(tpath):
            tpath = os.path.join(tpath, "tokenizer.json")
        if not os.path.isfile(tpath):
            fail(f"{tpath}: no such tokenizer.json")
        try:
            tok = Tokenizer.from_file(tpath)
        except Exception as e:  # noqa: BLE001 (the tokenizers package raises plain Exceptions)
            fail(f"{tpath}: not a tokenizer.json the tokenizers package reads: {e}")
        cpath = os.path.join(os.path.dirname(tpath), "tokenizer_config.json")
        if os.path.isfile(cpath):
            tcfg = json.load(open(cpath))
        tjson = open(tpath, "rb").read()
        source = os.path.abspath(tpath)
    else:
        if a.train_tokenizer < 257:
            fail("--train-tokenizer: a byte-level BPE needs at least 257 tokens (256 bytes + "
                 "<|endoftext|>)")
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=a.train_tokenizer, special_tokens=["<|endoftext|>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=bool(show) and sys.stderr.isatty())
        tok.train_from_iterator((d for d, _, _, _ in documents(files, a.jsonl_field)), trainer=trainer)
        tjson = tok.to_str(pretty=True).encode("utf-8")
        source = f"trained here: byte-level BPE, {a.train_tokenizer} tokens"
    vocab = tok.get_vocab_size(with_added_tokens=True)
    if a.model:
        mc = os.path.join(a.model, "config.json")
        try:
            mv = json.load(open(mc))["vocab_size"]
        except (OSError, KeyError, ValueError) as e:
            fail(f"{mc}: cannot read its vocab_size ({e})")
        if vocab > mv:
            fail(f"the tokenizer has {vocab} tokens, more than {mc}'s vocab_size {mv}")
    bos = special(tok, tcfg, "bos_token", a.bos, None)
    eos = special(tok, tcfg, "eos_token", a.eos, "<|endoftext|>")
    dtype = np.dtype("<u2") if vocab <= 65536 else np.dtype("<i4")

    tmp = out + ".tmp"
    n_tokens = n_docs = 0
    bar = Progress(total, show)
    with open(tmp, "wb") as f:
        pending = []

        def flush():
            nonlocal n_tokens
            encs = tok.encode_batch([p[0] for p in pending], add_special_tokens=False)
            for (text, nbytes, first, last), e in zip(pending, encs):
                ids = ([bos] if first and bos is not None else []) + e.ids + \
                      ([eos] if last and eos is not None else [])
                arr = np.asarray(ids, dtype=np.int64)
                if arr.size and (arr.min() < 0 or arr.max() >= vocab):
                    fail(f"token id {int(arr.max())} outside the vocabulary of {vocab}")
                arr.astype(dtype).tofile(f)
                n_tokens += arr.size
                bar.add(nbytes, arr.size)
            pending.clear()

        for doc in documents(files, a.jsonl_field, bar):
            pending.append(doc)
            n_docs += doc[3]
            if len(pending) == BATCH:
                flush()
        if pending:
            flush()
    if n_tokens == 0:
        os.unlink(tmp)
        fail("the inputs hold no text")
    tfile = out + ".tokenizer.json"
    with open(tfile + ".tmp", "wb") as f:
        f.write(tjson)
    os.replace(tfile + ".tmp", tfile)
    os.replace(tmp, out)
    meta = {"format": "zipccl-runtime-tokens-1", "dtype": "u16" if dtype.itemsize == 2 else "i32",
            "tokens": n_tokens, "vocab_size": vocab, "tokenizer_file": os.path.basename(tfile),
            "tokenizer_source": source, "tokenizer_sha256": hashlib.sha256(tjson).hexdigest(),
            "bos_id": bos, "eos_id": eos,
            "documents": n_docs, "inputs": [os.path.abspath(p) for p in files]}
    with open(out + ".json.tmp", "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    os.replace(out + ".json.tmp", out + ".json")
    print(f"prepare_data: wrote {out} ({n_tokens} tokens, {meta['dtype']}, {n_docs} documents, "
          f"vocabulary {vocab}) and {out}.json")


if __name__ == "__main__":
    main()
