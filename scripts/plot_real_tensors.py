#!/usr/bin/env python3
"""plot_real_tensors.py — the real-tensor corpus of scripts/real_tensor_corpus.sh.

  plot_real_tensors.py BENCH.jsonl OUT.png
      summarise the codec benchmark over the corpus per config, tensor kind
      (params = all-gather output, grads = reduce-scatter input) and dtype:
      byte-weighted ratio (all bytes / all compressed bytes) and GB/s (all
      bytes / all codec time) of every codec, per unit (what a collective
      compresses) and per tensor (the same bytes cut at the tensor
      boundaries); the exponent-entropy bound per unit and per tensor (each
      the byte-weighted combination bits / (bits - E + H)). Markdown tables on
      stdout, a bar chart in OUT.png.
  plot_real_tensors.py --split DUMP.safetensors OUT.safetensors
      cut every unit of a dump into its tensors, as the dump's metadata
      ("tensors.<unit>": name:offset:count,...) lays them out.
  plot_real_tensors.py --to-bf16 DUMP.safetensors OUT.safetensors
      the dump's F32 tensors rounded to bf16 (nearest even, NaN kept NaN),
      as the trainer rounds a gradient for reduce_dtype bf16.
  plot_real_tensors.py --steps OUT.png RUN.jsonl ...
      the trainer's own per-step wire ratio (all-gather, reduce-scatter,
      all of a step's collectives) and loss over each corpus run
      (`--log-json` of scripts/real_tensor_corpus.sh's runs): a Markdown
      table at a few steps on stdout, the curves in OUT.png.
  plot_real_tensors.py --sample OUT.safetensors DUMP:TENSOR:OFFSET:COUNT:NAME ...
      copy slices of the dumps' tensors into one small file (the suite's
      sample, tests/real_tensors/sample.safetensors).
"""
import collections
import json
import os
import re
import struct
import sys


def load_safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    meta = head.pop("__metadata__", {})
    out = {}
    for k, v in sorted(head.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        s, e = v["data_offsets"]
        out[k] = (v["dtype"], b[8 + n + s:8 + n + e])
    return out, meta


def write_safetensors(path, tensors, meta):
    head, off, blobs = {}, 0, []
    for name, (dt, raw) in tensors:
        es = 2 if dt == "BF16" else 4
        head[name] = {"dtype": dt, "shape": [len(raw) // es], "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    if meta:
        head["__metadata__"] = meta
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def split(src, dst):
    tensors, meta = load_safetensors(src)
    out = []
    for unit, (dt, raw) in tensors.items():
        es = 2 if dt == "BF16" else 4
        layout = meta.get("tensors." + unit)
        if not layout:
            sys.exit("%s: no tensor layout for unit %s (a dump from before the layout metadata)" % (src, unit))
        for item in layout.split(","):
            name, off, cnt = item.rsplit(":", 2)
            out.append((name, (dt, raw[int(off) * es:(int(off) + int(cnt)) * es])))
    write_safetensors(dst, out, {"kind": meta.get("kind", "")})


def to_bf16(src, dst):
    import numpy as np
    tensors, meta = load_safetensors(src)
    out = []
    for name, (dt, raw) in tensors.items():
        if dt == "F32":
            u = np.frombuffer(raw, dtype="<u4")
            r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
            nan = (u & 0x7FFFFFFF) > 0x7F800000
            r[nan] = ((u[nan] >> 16) | 0x40).astype("<u2")
            raw, dt = r.tobytes(), "BF16"
        out.append((name, (dt, raw)))
    write_safetensors(dst, out, meta)


def sample(dst, specs):
    """specs: DUMP:TENSOR:OFFSET:COUNT:NAME, TENSOR as the dump's layout names it."""
    out = []
    for spec in specs:
        path, tensor, off, cnt, name = spec.rsplit(":", 4)
        tensors, meta = load_safetensors(path)
        for unit, (dt, raw) in tensors.items():
            for item in meta.get("tensors." + unit, "").split(","):
                tname, toff, tcnt = item.rsplit(":", 2) if item else ("", 0, 0)
                if tname != tensor:
                    continue
                es = 2 if dt == "BF16" else 4
                a = int(toff) + int(off)
                b = min(a + int(cnt), int(toff) + int(tcnt))
                out.append((name, (dt, raw[a * es:b * es])))
    write_safetensors(dst, out, {"source": "scripts/real_tensor_corpus.sh (PHASE=sample), docs/BENCHMARKS.md"})


def where(path):
    """(config, kind, step) of a corpus file runs/corpus/<config>/param_x-reduce_x/stepN_rank0_<kind>."""
    parts = path.split("/")
    m = re.match(r"step(\d+)_rank\d+_(\w+)\.safetensors", parts[-1])
    return parts[-3], m.group(2), int(m.group(1))


CODECS = ["zipccl-fast", "zipccl-dense", "zstd-1-bg"]


def summarise(bench, png):
    rows = [json.loads(l) for l in open(bench) if l.startswith("{")]
    # (config, kind, dtype, split, codec) -> bytes, compressed, t_comp, t_dec, bytes/bound
    agg = collections.defaultdict(lambda: [0, 0, 0.0, 0.0, 0.0])
    per_step = collections.defaultdict(lambda: [0, 0, 0.0])
    for r in rows:
        cfg, kind, step = where(r["file"])
        if ".experts" in r.get("name", ""):
            kind += " (experts)"  # MoE expert units, on their own communicators
        k = (cfg, kind, r["dtype"], r.get("split", False), r["codec"])
        a = agg[k]
        a[0] += r["bytes"]
        a[1] += r["compressed_bytes"]
        a[2] += r["bytes"] / (r["compress_gbps"] * 1e9)
        a[3] += r["bytes"] / (r["decompress_gbps"] * 1e9)
        a[4] += r["bytes"] / r["bound"]
        s = per_step[(cfg, kind, r["dtype"], step, r.get("split", False), r["codec"])]
        s[0] += r["bytes"]
        s[1] += r["compressed_bytes"]
        s[2] += r["bytes"] / r["bound"]
    kinds = sorted({k[:3] for k in agg}, key=lambda x: (x[0], "experts" in x[1], not x[1].startswith("grads"), x[2]))
    ratio = lambda a: a[0] / a[1]
    print("Per collective (a unit as one buffer); ratio (compress / decompress GB/s):\n")
    print("| config | kind | dtype | MB | " + " | ".join(CODECS) + " | bound per unit | bound per tensor | fast / bound per tensor |")
    print("|---|---|---|---:|" + "---|" * (len(CODECS) + 3))
    for kd in kinds:
        cells = []
        for c in CODECS:
            a = agg.get(kd + (False, c))
            cells.append("%.3f (%.1f / %.1f)" % (ratio(a), a[0] / a[2] / 1e9, a[0] / a[3] / 1e9) if a else "-")
        u, t, f = agg.get(kd + (False, CODECS[0])), agg.get(kd + (True, CODECS[0])), agg.get(kd + (False, "zipccl-fast"))
        print("| %s | %s | %s | %.1f | %s | %.3f | %s | %s |" % (
            kd[0], kd[1], kd[2], u[0] / 1e6, " | ".join(cells), u[0] / u[4],
            "%.3f" % (t[0] / t[4]) if t else "-", "%.1f%%" % (100 * ratio(f) / (t[0] / t[4])) if t and f else "-"))
    print("\nPer tensor (the same bytes, one frame per tensor) against per unit:\n")
    print("| config | kind | dtype | " + " | ".join("%s unit -> tensor" % c for c in CODECS) + " |")
    print("|---|---|---|" + "---|" * len(CODECS))
    for kd in kinds:
        cells = []
        for c in CODECS:
            u, t = agg.get(kd + (False, c)), agg.get(kd + (True, c))
            cells.append("%.3f -> %.3f" % (ratio(u), ratio(t)) if u and t else "-")
        print("| %s | %s | %s | %s |" % (kd[0], kd[1], kd[2], " | ".join(cells)))
    print("\nGradients per step (per unit):\n")
    print("| config | dtype | step | " + " | ".join(CODECS) + " | bound per unit |")
    print("|---|---|---:|" + "---:|" * (len(CODECS) + 1))
    for key in sorted({k[:4] for k in per_step if k[1] == "grads" and not k[4]}):
        cells = ["%.3f" % ratio(per_step[key + (False, c)]) if key + (False, c) in per_step else "-" for c in CODECS]
        s = per_step[key + (False, CODECS[0])]
        print("| %s | %s | %d | %s | %.3f |" % (key[0], key[2], key[3], " | ".join(cells), s[0] / s[2]))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(14, 5))
    w = 0.8 / (len(CODECS) + 2)
    for i, c in enumerate(CODECS):
        ax.bar([j + i * w for j in range(len(kinds))], [ratio(agg[kd + (False, c)]) if kd + (False, c) in agg else 0 for kd in kinds], w, label=c + " (per unit)")
    for i, (lbl, sp) in enumerate((("bound per unit", False), ("bound per tensor", True))):
        vals = [agg[kd + (sp, CODECS[0])][0] / agg[kd + (sp, CODECS[0])][4] if kd + (sp, CODECS[0]) in agg else 0 for kd in kinds]
        ax.bar([j + (len(CODECS) + i) * w for j in range(len(kinds))], vals, w, label=lbl, color="k", alpha=0.2 + 0.2 * i)
    ax.set_xticks([j + 0.4 - w / 2 for j in range(len(kinds))])
    ax.set_xticklabels(["%s\n%s\n%s" % (kd[0].replace("qwen3-", ""), kd[1].replace(" (experts)", " (exp.)"), kd[2]) for kd in kinds], fontsize=7)
    ax.set_ylim(1.0, 1.9)
    ax.set_ylabel("ratio (byte-weighted)")
    ax.legend(fontsize=7, ncol=3)
    ax.set_title("ZipCCL codecs on the trainer's own collective payloads (scripts/real_tensor_corpus.sh)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def run_label(path):
    """config param/reduce of runs/corpus/<config>/param_p-reduce_r/run.jsonl"""
    parts = path.split("/")
    m = re.match(r"param_(\w+)-reduce_(\w+)", parts[-2])
    return parts[-3], m.group(1), m.group(2)


def steps(png, runs):
    series = []
    for path in runs:
        rows = [json.loads(l) for l in open(path) if l.startswith("{")]
        rows = [r for r in rows if "step" in r and "comm_ratio" in r]
        series.append((run_label(path), rows))
    print("| config | param / reduce | step | loss | all-gather | reduce-scatter | step total |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (cfg, p, r), rows in series:
        n = len(rows)
        for i in sorted({0, 1, n // 10, n // 4, n // 2, n - 1}):
            if 0 <= i < n:
                x = rows[i]
                print("| %s | %s / %s | %d | %.3f | %.4f | %.4f | %.4f |" % (
                    cfg, p, r, x["step"], x["loss"], x["allgather_ratio"], x["reducescatter_ratio"], x["comm_ratio"]))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for (cfg, p, r), rows in series:
        st = [x["step"] for x in rows]
        lbl = "%s %s/%s" % (cfg, p, r)
        axes[0].plot(st, [x["reducescatter_ratio"] for x in rows], label=lbl + " reduce-scatter")
        axes[0].plot(st, [x["allgather_ratio"] for x in rows], "--", label=lbl + " all-gather")
        axes[1].plot(st, [x["loss"] for x in rows], label=lbl)
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("wire ratio (raw / wire bytes)")
    axes[0].set_title("The trainer's per-step wire ratio (codec fast)")
    axes[0].legend(fontsize=7)
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("training loss")
    axes[1].set_yscale("log")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    a = sys.argv[1:]
    if a[:1] == ["--split"] and len(a) == 3:
        split(a[1], a[2])
    elif a[:1] == ["--steps"] and len(a) >= 3:
        steps(a[1], a[2:])
    elif a[:1] == ["--to-bf16"] and len(a) == 3:
        to_bf16(a[1], a[2])
    elif a[:1] == ["--sample"] and len(a) >= 3:
        sample(a[1], a[2:])
    elif len(a) == 2:
        summarise(a[0], a[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
