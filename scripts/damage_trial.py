#!/usr/bin/env python3
"""damage_trial.py — the untrusted-files trial of issue 52: N randomly damaged
copies of a tiny Hugging Face export (tests/tiny_hf.py), each loaded by
build/train --init-from for one step, every outcome classified:

  refused   exit status 1 or 2 with one "error:" line (a clear error)
  accepted  exit status 0 (a harmless change: a weight's low bits, a field
            the loader does not read)
  stopped   the file loaded and the run stopped on the trainer's fatal-error
            path: one "FATAL (rank N) ..." line naming the cause (weights
            whose flipped bits made the first loss NaN), with MPI's abort
            notice
  crash     a signal, a sanitizer report, or anything else
  hang      still running after --timeout seconds (killed)

and, for every copy whatever its outcome, whether the terminal would have
received raw bytes: a C0 control other than newline and tab, DEL, a C1
control, or bytes that are not UTF-8, in stdout or stderr.

The damage, one kind per copy, drawn with --seed: bytes of the safetensors
header overwritten; its 8-byte length changed; the file cut short; a
config.json field set to a hostile value (negative, huge, fractional, a
string with escape sequences, null, a list); bits of the weights flipped;
a tensor renamed to a name holding terminal escape sequences, control bytes
or invalid UTF-8.

  scripts/damage_trial.py [--copies 400] [--seed 1] [--timeout 60]
                          [--train build/train] [--json FILE] [--keep DIR]

Prints one line per copy that crashed, hung or wrote raw bytes, a table per
kind, and a JSON summary line; exits 1 when any copy crashed, hung or wrote
raw bytes. tests/test_damage_trial.sh runs a few dozen copies in make test;
docs/BENCHMARKS.md "Fuzzing the loaders" records the 400-copy trial.
"""
import argparse
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import numpy as np  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402
from tiny_hf import CONFIG, V, llama_weights  # noqa: E402

KINDS = ["header_bytes", "header_length", "truncated", "config_field", "weight_bits", "tensor_name"]
HOSTILE_NAMES = ["\x1b]0;pwned\x07\x1b[31mEVIL", "a\x00b", "\x7f\x9b2J", "bad\xff\xfename",
                 "\u202etxt.exe", "x" * 70000, "\r\x1b[2K"]


def raw_bytes(b):
    """Why b would put raw bytes on a terminal, or None."""
    for i, c in enumerate(b):
        if (c < 0x20 and c not in (0x0A, 0x09)) or c == 0x7F:
            return "byte 0x%02x at %d" % (c, i)
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError as e:
        return "not UTF-8 at %d" % e.start
    for i, ch in enumerate(s):
        if 0x80 <= ord(ch) <= 0x9F:
            return "C1 control U+%04X at %d" % (ord(ch), i)
    return None


def write_good(d):
    w, _ = llama_weights()
    os.makedirs(d)
    json.dump(CONFIG, open(os.path.join(d, "config.json"), "w"))
    save_file(w, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})


def damage(src, dst, kind, rng):
    shutil.copytree(src, dst)
    st = os.path.join(dst, "model.safetensors")
    blob = bytearray(open(st, "rb").read())
    hlen = struct.unpack("<Q", blob[:8])[0]
    what = kind
    if kind == "header_bytes":
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(8, 8 + hlen)
            blob[i] = rng.randrange(256)
        what += " (%d..)" % i
    elif kind == "header_length":
        v = rng.choice([0, 1, hlen - 1, hlen + 1, hlen * 2, len(blob), 2**31, 2**63 - 1, 2**64 - 1,
                        rng.randrange(2**64)])
        blob[:8] = struct.pack("<Q", v)
        what += " (%d)" % v
    elif kind == "truncated":
        n = rng.randrange(0, len(blob))
        del blob[n:]
        what += " (at %d of %d)" % (n, len(blob))
    elif kind == "config_field":
        cfg = dict(CONFIG)
        key = rng.choice(sorted(cfg))
        cfg[key] = rng.choice([-1, 0, 2**31, 2**63, 1e308, 0.5, "\x1b[31mred\x1b[0m", None, [1, 2],
                               {"a": 1}, "", "\u0085x", True])
        json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), ensure_ascii=False)
        what += " (%s=%r)" % (key, cfg[key])
    elif kind == "weight_bits":
        for _ in range(rng.randint(1, 64)):
            i = rng.randrange(8 + hlen, len(blob))
            blob[i] ^= 1 << rng.randrange(8)
        what += " (%d bytes of weights)" % (len(blob) - 8 - hlen)
    elif kind == "tensor_name":
        header = json.loads(blob[8:8 + hlen])
        old = rng.choice(sorted(k for k in header if k != "__metadata__"))
        new = rng.choice(HOSTILE_NAMES)
        header[new] = header.pop(old)
        raw = json.dumps(header, ensure_ascii=False).encode("utf-8", "surrogateescape")
        if "\xff" in new:  # invalid UTF-8 in the file itself
            raw = raw.replace("bad\xff\xfename".encode("utf-8"), b"bad\xff\xfename")
        raw += b" " * ((8 - len(raw) % 8) % 8)
        blob = bytearray(struct.pack("<Q", len(raw)) + raw + blob[8 + hlen:])
        what += " (%r -> %r)" % (old, new[:20])
    open(st, "wb").write(bytes(blob))
    return what


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--train", default=os.environ.get("TRAIN", "build/train"))
    ap.add_argument("--json", default="")
    ap.add_argument("--keep", default="", help="keep the copies that failed here")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="damage_trial.")
    try:
        good = os.path.join(tmp, "good")
        write_good(good)
        tokens = os.path.join(tmp, "tokens.bin")
        np.random.default_rng(1).integers(0, V, 3000).astype("<u2").tofile(tokens)
        yaml = os.path.join(tmp, "run.yaml")
        open(yaml, "w").write("data: {path: %s, tokenizer: u16, seq_len: 16, batch_size: 2, "
                              "val_fraction: 0}\ntrain: {steps: 1}\ncomm: {strategy: raw}\n" % tokens)
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        counts = {k: {o: 0 for o in ("refused", "accepted", "stopped", "crash", "hang", "raw")} for k in KINDS}
        bad = 0
        for i in range(a.copies):
            kind = KINDS[i % len(KINDS)] if i < len(KINDS) else rng.choice(KINDS)
            d = os.path.join(tmp, "copy%04d" % i)
            what = damage(good, d, kind, rng)
            try:
                p = subprocess.run([a.train, yaml, "--init-from", d], capture_output=True,
                                   timeout=a.timeout, env=env)
                out, err, rc = p.stdout, p.stderr, p.returncode
                crash = re.search(rb"AddressSanitizer|runtime error:|Segmentation|core dumped|signal", err)
                abort = b"MPI_ABORT" in err
                if rc == 0 and not crash and not abort:
                    outcome = "accepted"
                elif rc in (1, 2) and not crash and not abort and err.count(b"error: ") == 1:
                    outcome = "refused"
                elif rc == 1 and not crash and len(re.findall(rb"^FATAL \(rank \d+\) ", err, re.M)) == 1:
                    outcome = "stopped"
                else:
                    outcome = "crash"
            except subprocess.TimeoutExpired as e:
                out, err, rc, outcome = e.stdout or b"", e.stderr or b"", None, "hang"
            counts[kind][outcome] += 1
            why = raw_bytes(out) or raw_bytes(err)
            if why:
                counts[kind]["raw"] += 1
            if outcome in ("crash", "hang") or why:
                bad += 1
                print("copy %d %s: %s%s, exit %s: %s" % (i, what, outcome, ", raw bytes: " + why if why else "",
                                                         rc, err[-300:].decode("utf-8", "replace")
                                                         .encode("unicode_escape").decode()))
                if a.keep:
                    shutil.copytree(d, os.path.join(a.keep, "copy%04d" % i), dirs_exist_ok=True)
            shutil.rmtree(d)
        cols = ("refused", "accepted", "stopped", "crash", "hang", "raw")
        tot = {o: sum(c[o] for c in counts.values()) for o in cols}
        print("%-14s %8s %8s %8s %6s %5s %9s" % ("damage", *cols[:-1], "raw bytes"))
        for k, c in list(counts.items()) + [("all", tot)]:
            print("%-14s %8d %8d %8d %6d %5d %9d" % (k, *(c[o] for o in cols)))
        summary = {"copies": a.copies, "seed": a.seed, **tot, "by_kind": counts}
        print(json.dumps(summary))
        if a.json:
            with open(a.json, "a") as f:
                f.write(json.dumps(summary) + "\n")
        return 1 if bad else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
