#!/usr/bin/env python3
# test: timeout=300
"""test_data_order.py — the training data order, checked from outside.

build/train --trace-data FILE writes, per rank and micro-batch, the window
indices that rank read and an FNV-1a 64 hash of the tokens it fed the model.
This test rebuilds the order docs/RUNTIME.md (Data) defines — splitmix64, the
seeded Fisher-Yates shuffle per epoch, sample g of step s, micro-batch a,
rank r — from that text alone, and checks the traces of a few tiny runs
against it:

  - every training window exactly once per epoch over all ranks, the ranks'
    sets disjoint, in exactly the documented global order (with grad_accum);
  - the tokens each rank trained on are those windows of the corpus;
  - 1 rank x batch 8 reads exactly what 2 ranks x batch 4 read together;
  - validation batches are the first windows of the validation split in
    file order, the same at every validation;
  - a run resumed at step 6 (at 2 ranks, and at 1 rank with the same global
    batch) continues exactly the order of the uninterrupted run.
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import check, failed  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "build")
TRAIN = os.path.join(ROOT, BUILD, "train")  # an absolute BUILD wins over ROOT
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl_vader_single_copy_mechanism="none",
           OMPI_MCA_rmaps_base_oversubscribe="1",
           PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe")
ENV.setdefault("ASAN_OPTIONS", "detect_leaks=0")

M64 = (1 << 64) - 1
T, SEED, STEPS, VAL_EVERY, VAL_BATCHES, ACCUM = 16, 77, 13, 5, 2, 2
N_BYTES, VAL_FRACTION = 2000, 0.2


# ---- the documented order, rebuilt -------------------------------------------
def splitmix64(state):
    """One splitmix64 step: returns (new state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def epoch_order(seed, epoch, n_windows):
    """The permutation of epoch `epoch`: Fisher-Yates from the last position
    down, swapping position i with splitmix64() mod (i+1), the state seeded
    with seed * 0x100000001b3 XOR epoch (mod 2^64)."""
    state = ((seed * 0x100000001B3) & M64) ^ epoch
    perm = list(range(n_windows))
    for i in range(n_windows - 1, 0, -1):
        state, x = splitmix64(state)
        j = x % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


class Order:
    def __init__(self, seed, n_windows):
        self.seed, self.W, self.cache = seed, n_windows, {}

    def window(self, g):
        e = g // self.W
        if e not in self.cache:
            self.cache[e] = epoch_order(self.seed, e, self.W)
        return self.cache[e][g % self.W]


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


# ---- runs ---------------------------------------------------------------------
def corpus_bytes():
    rng = np.random.default_rng(5)
    words = [b"fortune", b"cookie", b"data", b"order", b"window", b"epoch", b"rank", b"\n"]
    out = bytearray()
    while len(out) < N_BYTES:
        out += words[rng.integers(len(words))] + b" "
    return bytes(out[:N_BYTES])


def write_config(tmp, corpus):
    path = os.path.join(tmp, "order.yaml")
    with open(path, "w") as f:
        f.write(f"""model: {{vocab_size: 256, dim: 16, n_layers: 1, n_heads: 2, n_kv_heads: 1,
        ffn_hidden: 32, max_seq_len: {T}}}
data: {{path: {corpus}, seq_len: {T}, batch_size: 4, grad_accum: {ACCUM},
       val_fraction: {VAL_FRACTION}, val_every: {VAL_EVERY}, val_batches: {VAL_BATCHES},
       seed: {SEED}}}
train: {{steps: {STEPS}, seed: 1}}
schedule: {{warmup_steps: 2, total_steps: {STEPS}}}
comm: {{strategy: raw}}
""")
    return path


def train(np_, config, *args):
    cmd = [TRAIN, config, *args]
    if np_ > 1:
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-n", str(np_)] + cmd
    p = subprocess.run(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=240)
    if p.returncode != 0:
        print(f"--- {' '.join(cmd)} (exit {p.returncode})\n" + "\n".join(p.stdout.splitlines()[-8:]))
    return p.returncode == 0


def load_trace(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f]
    except (OSError, ValueError) as e:
        print(f"cannot read trace {path}: {e}")
        return []


def samples_of(rec):
    """Global sample index of each row of a record: first + rank + b*N."""
    return [rec["first_sample"] + rec["rank"] + b * rec["nranks"] for b in range(len(rec["windows"]))]


def train_by_sample(trace):
    """{global sample: window} over a trace's training records."""
    out = {}
    for rec in trace:
        if rec["split"] == "train":
            for g, w in zip(samples_of(rec), rec["windows"]):
                out.setdefault(g, []).append(w)
    return out


def main():
    if not os.access(TRAIN, os.X_OK):
        check(False, "data_order", f"{TRAIN} not built")
        return
    tmp = tempfile.mkdtemp(prefix="test_data_order.")
    corpus = os.path.join(tmp, "corpus.txt")
    text = corpus_bytes()
    with open(corpus, "wb") as f:
        f.write(text)
    cfg = write_config(tmp, corpus)
    n_train = N_BYTES - int(N_BYTES * VAL_FRACTION)
    W = (n_train - 1) // T
    W_val = (N_BYTES - n_train - 1) // T
    order = Order(SEED, W)

    t2, t1 = os.path.join(tmp, "np2.jsonl"), os.path.join(tmp, "np1.jsonl")
    th, tr, tr1 = (os.path.join(tmp, n) for n in ("half.jsonl", "res2.jsonl", "res1.jsonl"))
    ck = os.path.join(tmp, "ck")
    ok2 = train(2, cfg, "--trace-data", t2)
    ok1 = train(1, cfg, "--set", "data.batch_size=8", "--trace-data", t1)
    okh = train(2, cfg, "--set", "train.steps=6", "--set", f"checkpoint.dir={ck}", "--trace-data", th)
    okr = okh and train(2, cfg, "--resume", ck, "--trace-data", tr)
    okr1 = okh and train(1, cfg, "--set", "data.batch_size=8", "--resume", ck, "--trace-data", tr1)
    check(ok2 and ok1 and okh and okr and okr1, "runs_complete", "a training run failed (above)")
    a, b = load_trace(t2), load_trace(t1)
    if not a or not b:
        check(False, "traces_written", "no trace")
        return

    # -- every sample once, in the documented global order, accumulation too
    G = 4 * 2
    want_first = {(s, m): ((s - 1) * ACCUM + m) * G for s in range(1, STEPS + 1) for m in range(ACCUM)}
    got_first = {(r["step"], r["micro"]): r["first_sample"] for r in a if r["split"] == "train"}
    check(got_first == want_first, "micro_batch_a_of_step_s_starts_at_sample_(s*A+a)*G",
          f"first samples {sorted(got_first.items())[:6]}..., want {sorted(want_first.items())[:6]}...")
    by_sample = train_by_sample(a)
    n_samples = STEPS * ACCUM * G
    check(sorted(by_sample) == list(range(n_samples)) and all(len(v) == 1 for v in by_sample.values()),
          "each_global_sample_read_once", f"{len(by_sample)} samples read, want 0..{n_samples - 1} once")
    bad = [(g, v[0], order.window(g)) for g, v in sorted(by_sample.items()) if v[0] != order.window(g)]
    check(not bad, "order_equals_documented_order",
          f"{len(bad)} of {len(by_sample)} samples differ, first (sample, got, want): {bad[:3]}")

    full_epochs = n_samples // W
    for e in range(full_epochs + 1):
        lo, hi = e * W, min((e + 1) * W, n_samples)
        per_rank = {}
        for rec in a:
            if rec["split"] != "train":
                continue
            for g, w in zip(samples_of(rec), rec["windows"]):
                if lo <= g < hi:
                    per_rank.setdefault(rec["rank"], []).append(w)
        allw = [w for ws in per_rank.values() for w in ws]
        sets = [set(ws) for ws in per_rank.values()]
        disjoint = sum(len(s) for s in sets) == len(set().union(*sets)) == len(allw)
        if e < full_epochs:
            check(sorted(allw) == list(range(W)), f"epoch{e}_every_window_exactly_once",
                  f"{len(set(allw))} distinct of {W} windows, {len(allw)} reads")
        else:
            check(len(set(allw)) == len(allw) == hi - lo, f"epoch{e}_partial_no_repeats",
                  f"{len(allw)} reads, {len(set(allw))} distinct")
        check(disjoint and len(per_rank) == 2, f"epoch{e}_rank_sets_disjoint",
              f"ranks {sorted(per_rank)}: sizes {[len(s) for s in sets]}, union {len(set(allw))}")

    # -- the tokens trained on are those windows of the file
    def expected_hash(rec):
        base = 0 if rec["split"] == "train" else n_train
        toks = b"".join(text[base + w * T: base + w * T + T] for w in rec["windows"])
        return "%016x" % fnv1a64(np.frombuffer(toks, dtype=np.uint8).astype("<i4").tobytes())
    wrong = [(r["step"], r["micro"], r["rank"], r["split"]) for r in a + b
             if r["tokens_fnv1a64"] != expected_hash(r)]
    check(not wrong, "tokens_are_the_traced_windows", f"{len(wrong)} records differ, first {wrong[:3]}")

    # -- 1 rank x batch 8 == 2 ranks x batch 4 together, sample for sample
    by1 = train_by_sample(b)
    check(by1 == by_sample, "one_rank_batch8_reads_what_two_ranks_batch4_read",
          f"{sum(by1.get(g) != v for g, v in by_sample.items())} samples differ")

    # -- validation: the first windows in file order, the same every time
    val_steps = sorted({r["step"] for r in a if r["split"] == "val"})
    want_steps = sorted({s for s in range(1, STEPS + 1) if s % VAL_EVERY == 0 or s == STEPS})
    check(val_steps == want_steps, "validation_at_documented_steps", f"{val_steps}, want {want_steps}")
    for name, trace, n, B in (("np2", a, 2, 4), ("np1", b, 1, 8)):
        recs = [r for r in trace if r["split"] == "val"]
        want = {(k, r): [(k * B * n + r + j * n) % W_val for j in range(B)]
                for k in range(VAL_BATCHES) for r in range(n)}
        bad = [(x["step"], x["micro"], x["rank"], x["windows"]) for x in recs
               if x["windows"] != want[(x["micro"], x["rank"])]]
        check(recs and not bad, f"validation_first_windows_file_order_{name}",
              f"{len(bad)} of {len(recs)} validation batches differ, first {bad[:2]}")
    # sample k*G + r + b*N is window k*G + r + b*N: windows 0..15, no wrap (W_val is 24)
    firsts = sorted(w for r in a if r["split"] == "val" and r["step"] == val_steps[0] for w in r["windows"])
    check(firsts == list(range(VAL_BATCHES * G)), "validation_reads_windows_0_to_G*val_batches",
          f"{firsts}")

    # -- resume continues the same order (same and other rank count)
    half, res, res1 = load_trace(th), load_trace(tr), load_trace(tr1)
    # (the half run also validates at its last step, 6, which the full run
    # does not: records are compared where both runs read)
    key = lambda r: (r["step"], r["micro"], r["split"], r["rank"])  # noqa: E731
    full = {key(r): r for r in a}
    got = {key(r): r for r in half + res if r["split"] == "train" or key(r) in full}
    check(got == {k: v for k, v in full.items() if k in got} and
          {k for k in full if k[2] == "train"} <= set(got), "resume_at_step6_continues_the_order_np2",
          f"{sum(full.get(k) != v for k, v in got.items())} of {len(got)} records differ, "
          f"steps {sorted({k[0] for k in got})}")
    check(res and min(r["step"] for r in res) == 7, "resumed_run_starts_at_step7",
          f"first step {min((r['step'] for r in res), default=None)}")
    one = {g: v for g, v in by1.items() if g >= 6 * ACCUM * G}
    check(train_by_sample(res1) == one, "resume_np2_checkpoint_at_np1_continues_the_order",
          "the 1-rank resumed run read other windows than the 1-rank uninterrupted run")


if __name__ == "__main__":
    main()
    sys.exit(1 if failed() else 0)
