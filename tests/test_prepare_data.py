#!/usr/bin/env python3
# test: asan=no timeout=200
"""test_prepare_data.py — scripts/prepare_data.py (text -> token files with a Hugging
Face tokenizer.json) and what build/train makes of its output.

  trained/*            --train-tokenizer on a folder (text files and a .jsonl, in a
                       subfolder too): the metadata says the tokens, dtype, vocabulary
                       and tokenizer hash the files hold; every document decodes back
                       to its text exactly, each followed by <|endoftext|>, in sorted
                       path order; the tokenizer is copied beside the tokens
  user_tokenizer/*     a user's tokenizer.json in a model directory with its
                       tokenizer_config.json: BOS and EOS come from there, --eos none
                       drops EOS, the same text gives the tokenizer's own ids
  big_vocab_i32        a vocabulary over 65536 ids writes int32 tokens
  jsonl_missing_field  a record without the field is refused naming file:line
  model_too_small      --model DIR refuses a tokenizer larger than its vocab_size
                       before writing anything
  progress             --progress draws the bar on stderr (one line per 10% off a tty)
  train/*              build/train at 2 ranks reads the tokens (data.tokenizer from the
                       metadata), refuses a model.vocab_size below the tokenizer's
                       (exit 2, the metadata file named), and checkpoint.hf exports the
                       model with that tokenizer.json and its eos_token_id
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from pycheck import check, failed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "build")
BUILD = BUILD if os.path.isabs(BUILD) else os.path.join(ROOT, BUILD)
TRAIN = os.path.join(BUILD, "train")
SCRIPT = os.path.join(ROOT, "scripts", "prepare_data.py")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
           OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", TOKENIZERS_PARALLELISM="false")


def prep(*args):
    return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True,
                          env=ENV, timeout=120)


def meta_of(out):
    return json.load(open(out + ".json"))


def tokens_of(out):
    m = meta_of(out)
    return np.fromfile(out, dtype="<u2" if m["dtype"] == "u16" else "<i4").astype(np.int64)


def main():
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    with tempfile.TemporaryDirectory(prefix="zrt_prep_") as d:
        corpus = os.path.join(d, "corpus")
        os.makedirs(os.path.join(corpus, "sub"))
        docs = {
            os.path.join(corpus, "a.txt"): "The quick brown fox jumps over the lazy dog.\n" * 40,
            os.path.join(corpus, "sub", "b.txt"): "Pack my box with five dozen liquor jugs!\n\n" * 30
            + "Ünïcödé ✓ also counts.\n",
        }
        recs = [f"record {i}: sphinx of black quartz, judge my vow" for i in range(20)]
        with open(os.path.join(corpus, "sub", "c.jsonl"), "w") as f:
            for i, r in enumerate(recs):
                f.write(json.dumps({"text": r, "id": i}) + "\n")
                if i == 3:
                    f.write("\n")  # blank lines are skipped
        for p, t in docs.items():
            open(p, "w").write(t)
        open(os.path.join(corpus, "notes.md"), "w").write("not matched by --glob")
        expect_docs = [docs[os.path.join(corpus, "a.txt")], docs[os.path.join(corpus, "sub", "b.txt")]] + recs
        # sorted paths: a.txt, sub/b.txt, sub/c.jsonl

        out = os.path.join(d, "tok", "train.bin")
        r = prep(corpus, "-o", out, "--train-tokenizer", "300")
        check(r.returncode == 0, "prep/trained/runs", r.stderr[-400:])
        if r.returncode:
            return 1
        m = meta_of(out)
        tj = open(out + ".tokenizer.json", "rb").read()
        tok = Tokenizer.from_file(out + ".tokenizer.json")
        ids = tokens_of(out)
        check(m["format"] == "zipccl-runtime-tokens-1" and m["dtype"] == "u16" and
              m["tokens"] == ids.size == os.path.getsize(out) // 2 and
              m["vocab_size"] == tok.get_vocab_size(with_added_tokens=True) == 300 and
              m["tokenizer_sha256"] == hashlib.sha256(tj).hexdigest() and
              m["tokenizer_file"] == "train.bin.tokenizer.json" and m["documents"] == len(expect_docs) and
              m["bos_id"] is None and m["eos_id"] == tok.token_to_id("<|endoftext|>"),
              "prep/trained/metadata", json.dumps(m)[:400])
        eos = m["eos_id"]
        cuts = np.flatnonzero(ids == eos)
        pieces = np.split(ids, cuts + 1)[:-1]
        decoded = [tok.decode([int(x) for x in p[:-1]], skip_special_tokens=False) for p in pieces]
        check(len(cuts) == len(expect_docs) and cuts[-1] == ids.size - 1 and decoded == expect_docs,
              "prep/trained/documents_decode_back_in_order",
              f"{len(cuts)} EOS for {len(expect_docs)} documents; first differing: "
              f"{next((repr(a)[:60] + ' vs ' + repr(b)[:60] for a, b in zip(decoded, expect_docs) if a != b), '')}")

        # a user's tokenizer in a model directory, with tokenizer_config.json
        user = os.path.join(d, "user_model")
        os.makedirs(user)
        ut = Tokenizer(models.BPE())
        ut.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        ut.decoder = decoders.ByteLevel()
        ut.train_from_iterator(expect_docs, trainers.BpeTrainer(
            vocab_size=320, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
        ut.save(os.path.join(user, "tokenizer.json"))
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|end_of_text|>"}},
                  open(os.path.join(user, "tokenizer_config.json"), "w"))
        json.dump({"vocab_size": 320}, open(os.path.join(user, "config.json"), "w"))
        out2 = os.path.join(d, "tok", "user.bin")
        r = prep(os.path.join(corpus, "a.txt"), os.path.join(corpus, "sub", "c.jsonl"), "-o", out2,
                 "--tokenizer", user, "--model", user)
        check(r.returncode == 0, "prep/user_tokenizer/runs", r.stderr[-400:])
        ids2, m2 = tokens_of(out2), meta_of(out2)
        bos, eos2 = ut.token_to_id("<|begin_of_text|>"), ut.token_to_id("<|end_of_text|>")
        want = []
        for t in [expect_docs[0]] + recs:
            want += [bos] + ut.encode(t, add_special_tokens=False).ids + [eos2]
        check(m2["bos_id"] == bos and m2["eos_id"] == eos2 and ids2.tolist() == want and
              open(out2 + ".tokenizer.json", "rb").read() == open(os.path.join(user, "tokenizer.json"), "rb").read(),
              "prep/user_tokenizer/bos_eos_from_tokenizer_config",
              f"bos {m2['bos_id']} eos {m2['eos_id']}, {ids2.size} ids, want {len(want)}")
        r = prep(os.path.join(corpus, "a.txt"), "-o", out2, "--tokenizer", user, "--eos", "none",
                 "--bos", "none")
        check(r.returncode == 0 and tokens_of(out2).tolist() ==
              ut.encode(expect_docs[0], add_special_tokens=False).ids and meta_of(out2)["eos_id"] is None,
              "prep/user_tokenizer/no_specials", r.stderr[-300:])

        # more than 65536 ids: int32 tokens
        big = Tokenizer(models.WordLevel({"[UNK]": 0, "fox": 1}, unk_token="[UNK]"))
        big.pre_tokenizer = pre_tokenizers.Whitespace()
        big.add_tokens([f"<x{i}>" for i in range(65600)])
        big.save(os.path.join(d, "big.json"))
        open(os.path.join(d, "big.txt"), "w").write("fox <x65599> fox")
        out3 = os.path.join(d, "tok", "big.bin")
        r = prep(os.path.join(d, "big.txt"), "-o", out3, "--tokenizer", os.path.join(d, "big.json"),
                 "--eos", "none")
        ok = r.returncode == 0 and meta_of(out3)["dtype"] == "i32"
        check(ok and tokens_of(out3).tolist() == [1, big.token_to_id("<x65599>"), 1],
              "prep/big_vocab_i32", r.stderr[-300:] if not ok else str(tokens_of(out3).tolist()))

        # bad input
        bad = os.path.join(d, "bad.jsonl")
        open(bad, "w").write('{"text": "fine"}\n{"txt": "oops"}\n')
        r = prep(bad, "-o", os.path.join(d, "tok", "bad.bin"), "--tokenizer", user)
        check(r.returncode != 0 and f"{bad}:2: no string field 'text'" in r.stderr and
              not os.path.exists(os.path.join(d, "tok", "bad.bin")),
              "prep/jsonl_missing_field", r.stderr[-300:])
        small = os.path.join(d, "small_model")
        os.makedirs(small)
        json.dump({"vocab_size": 100}, open(os.path.join(small, "config.json"), "w"))
        r = prep(corpus, "-o", os.path.join(d, "tok", "small.bin"), "--tokenizer", user, "--model", small)
        check(r.returncode != 0 and "the tokenizer has 320 tokens, more than" in r.stderr and
              "vocab_size 100" in r.stderr and not os.path.exists(os.path.join(d, "tok", "small.bin")),
              "prep/model_too_small", r.stderr[-300:])
        r = prep(corpus, "-o", os.path.join(d, "tok", "p.bin"), "--tokenizer", user, "--progress")
        check(r.returncode == 0 and "100.0%" in r.stderr and "prepare_data: [" in r.stderr,
              "prep/progress", r.stderr[-300:])

        # the trainer on it
        if not os.access(TRAIN, os.X_OK):
            check(False, "prep/train/binary", f"{TRAIN} not built")
            return 1
        yaml = os.path.join(d, "t.yaml")
        open(yaml, "w").write(f"""model:
  vocab_size: 320
  dim: 32
  n_layers: 1
  n_heads: 2
  n_kv_heads: 1
  ffn_hidden: 64
  max_seq_len: 32
  qk_norm: true
data:
  path: {out}
  seq_len: 32
  batch_size: 2
train:
  steps: 2
comm:
  strategy: raw
""")
        mpi = ["mpirun", "--oversubscribe", "--bind-to", "none", "-n", "2", TRAIN, yaml]
        ck = os.path.join(d, "ck")
        r = subprocess.run(mpi + ["--set", f"checkpoint.dir={ck}", "--set", "checkpoint.hf=true"],
                           capture_output=True, text=True, env=ENV, timeout=120)
        check(r.returncode == 0 and f"# data: {out}, u16 tokenizer, {m['tokens']} tokens" in r.stdout,
              "prep/train/reads_the_tokens", (r.stderr or r.stdout)[-400:])
        hf = os.path.join(ck, "step_00000002", "hf")
        cfg = json.load(open(os.path.join(hf, "config.json"))) if r.returncode == 0 else {}
        check(r.returncode == 0 and open(os.path.join(hf, "tokenizer.json"), "rb").read() == tj and
              cfg.get("eos_token_id") == eos and cfg.get("architectures") == ["Qwen3ForCausalLM"],
              "prep/train/export_carries_the_tokenizer", json.dumps(cfg)[:300])
        r = subprocess.run(mpi + ["--set", "model.vocab_size=256"], capture_output=True, text=True,
                           env=ENV, timeout=120)
        check(r.returncode == 2 and r.stderr.count("error: ") == 1 and
              f"{out}.json: the tokenizer that made {out} has 300 tokens (vocab_size), more than "
              f"the model's 256" in r.stderr and "MPI_ABORT" not in r.stderr and
              "step " not in r.stdout,
              "prep/train/vocab_larger_than_model_refused", r.stderr[-400:])
    return 1 if failed() else 0


if __name__ == "__main__":
    sys.exit(main())
