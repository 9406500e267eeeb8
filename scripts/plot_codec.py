#!/usr/bin/env python3
"""plot_codec.py — render zipccl-codec-bench JSON lines into a figure, tables and a verdict.

    python3 scripts/plot_codec.py docs/bench/codec_cpu.jsonl [-o docs/bench/codec_cpu.png]
                                  [--markdown]

Writes a PNG of ratio against compress and decompress GB/s per codec for
bf16 Gaussian data at sigma = 1 (the largest size in the file; the dashed
line is the exponent-entropy bound of that data), prints the verdict against
the codec targets, and with --markdown prints the tables that go into the
"Codec (CPU, one core)" section of docs/BENCHMARKS.md.

Targets (bf16 Gaussian, 32 MiB, every sigma measured):
  - some mode reaches ratio >= 1.50;
  - the fastest mode reaches ratio >= 1.40 with compress >= 3x and decompress
    >= 2x zstd -1 on byte-grouped data, measured in the same run;
  - fp32 Gaussian: best ratio >= 1.19; fp16 Gaussian: best ratio >= 1.16.

Leaves out: comparisons across runs or machines (one file is one run).
"""
import argparse
import json
import sys

PATH_RANK = {"scalar": 0, "avx2": 1, "avx512": 2, "-": 0}
OURS = ["zipccl-fast", "zipccl-f3", "zipccl-dense", "zipccl-fast-ck", "zipccl-f3-ck", "zipccl-dense-ck"]
BASELINES = ["memcpy", "lz4", "zstd-1", "zstd-1-bg", "zstd-19", "zstd-19-bg"]


def fmt_bytes(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def gbps(x):
    return f"{x:.3f}" if x >= 0.1 else f"{x:.4f}"


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                if "codec" in r:
                    rows.append(r)
    if not rows:
        sys.exit(f"plot_codec: no benchmark rows in {path}")
    return rows


def best_path(rows):
    """One row per codec: for ours the widest SIMD path measured (what the
    library's auto dispatch picks on the machine that ran the bench)."""
    out = {}
    for r in rows:
        cur = out.get(r["codec"])
        if cur is None or PATH_RANK.get(r["path"], 0) > PATH_RANK.get(cur["path"], 0):
            out[r["codec"]] = r
    return out


def select(rows, dtype, dist="gauss", sigma=1.0, nbytes=None):
    sel = [r for r in rows if r["dtype"] == dtype and r["dist"] == dist
           and (dist != "gauss" or r["sigma"] == sigma)]
    if not sel:
        return []
    nbytes = nbytes or max(r["bytes"] for r in sel)
    return [r for r in sel if r["bytes"] == nbytes]


def plot(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    sel = select(rows, "bf16")
    if not sel:
        sys.exit("plot_codec: no bf16 Gaussian sigma=1 rows to plot")
    best = best_path(sel)
    order = [c for c in OURS + BASELINES if c in best]
    colors = plt.get_cmap("tab10").colors
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    for ax, key, title in ((axes[0], "compress_gbps", "compress"),
                           (axes[1], "decompress_gbps", "decompress")):
        for i, c in enumerate(order):
            r = best[c]
            ours = c.startswith("zipccl")
            ax.scatter(r[key], r["ratio"], marker="o" if ours else "s", s=60 if ours else 45,
                       color=colors[i % len(colors)], edgecolor="black", linewidth=0.5,
                       label=c + (f" ({r['path']})" if ours else ""), zorder=3)
        ax.axhline(sel[0]["bound"], ls="--", color="gray", lw=1)
        ax.text(0.01, sel[0]["bound"], f" exponent-entropy bound {sel[0]['bound']:.3f}",
                transform=ax.get_yaxis_transform(), va="bottom", fontsize=8, color="gray")
        ax.set_xscale("log")
        lo, hi = min(r[key] for r in sel), max(r[key] for r in sel)
        subs = (1.0,) if hi > 100 * lo else (1.0, 2.0, 5.0)  # few labels on a wide axis
        ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=subs))
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel(f"{title} GB/s (uncompressed bytes, one core)")
        ax.set_title(f"bf16 Gaussian sigma=1, {fmt_bytes(sel[0]['bytes'])}: {title}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("ratio (raw / compressed)")
    axes[1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def verdict(rows):
    lines, ok_all = [], True

    def say(ok, text):
        nonlocal ok_all
        ok_all &= ok
        lines.append(f"- {'PASS' if ok else 'MISS'}: {text}")

    sigmas = sorted({r["sigma"] for r in rows if r["dist"] == "gauss" and r["dtype"] == "bf16"})
    for s in sigmas:
        b = best_path(select(rows, "bf16", sigma=s))
        ours = {k: v for k, v in b.items() if k in ("zipccl-fast", "zipccl-dense")}
        if not ours or "zstd-1-bg" not in b:
            continue
        best = max(ours.values(), key=lambda r: r["ratio"])
        say(best["ratio"] >= 1.50, f"bf16 sigma={s:g}: best mode {best['codec']} ratio "
            f"{best['ratio']:.3f} (>= 1.50; bound {best['bound']:.3f})")
        fast, z = ours.get("zipccl-fast"), b["zstd-1-bg"]
        if fast:
            cx, dx = fast["compress_gbps"] / z["compress_gbps"], fast["decompress_gbps"] / z["decompress_gbps"]
            say(fast["ratio"] >= 1.40 and cx >= 3 and dx >= 2,
                f"bf16 sigma={s:g}: zipccl-fast ({fast['path']}) ratio {fast['ratio']:.3f} (>= 1.40), "
                f"compress {fast['compress_gbps']:.2f} GB/s = {cx:.1f}x zstd-1-bg (>= 3x), "
                f"decompress {fast['decompress_gbps']:.2f} GB/s = {dx:.1f}x (>= 2x)")
    for dt, target in (("fp32", 1.19), ("fp16", 1.16)):
        for s in sorted({r["sigma"] for r in rows if r["dist"] == "gauss" and r["dtype"] == dt}):
            b = best_path(select(rows, dt, sigma=s))
            ours = [v for k, v in b.items() if k in ("zipccl-fast", "zipccl-dense")]
            if ours:
                best = max(ours, key=lambda r: r["ratio"])
                say(best["ratio"] >= target, f"{dt} sigma={s:g}: best mode {best['codec']} ratio "
                    f"{best['ratio']:.3f} (>= {target}; bound {best['bound']:.3f})")
    return ok_all, lines


def markdown(rows):
    out = []
    nbytes = max(r["bytes"] for r in rows)
    for dt in ("bf16", "fp16", "fp32"):
        sel = [r for r in rows if r["dtype"] == dt and r["bytes"] == nbytes]
        if not sel:
            continue
        out.append(f"\n**{dt}, Gaussian sigma = 1, {fmt_bytes(nbytes)}"
                   f"{'' if dt == 'bf16' else ', widest SIMD path'}** "
                   f"(bound {select(rows, dt)[0]['bound']:.3f})\n")
        out.append("| codec | path | ratio | compress GB/s | decompress GB/s |")
        out.append("|---|---|---:|---:|---:|")
        g = select(rows, dt, nbytes=nbytes)
        if dt != "bf16":  # every SIMD path for bf16 only; the others show what auto picks
            g = list(best_path(g).values())
        order = {c: i for i, c in enumerate(OURS + BASELINES)}
        for r in sorted(g, key=lambda r: (order.get(r["codec"], 99), PATH_RANK.get(r["path"], 0))):
            out.append(f"| {r['codec']} | {r['path']} | {r['ratio']:.3f} | "
                       f"{gbps(r['compress_gbps'])} | {gbps(r['decompress_gbps'])} |")
        # Ratio across scales (and uniform random bits), best path per codec.
        sigmas = sorted({r["sigma"] for r in sel if r["dist"] == "gauss"})
        cols = [("gauss", s) for s in sigmas] + [("random", None)]
        out.append(f"\n**{dt}, ratio by input** (best SIMD path; last row: exponent-entropy bound)\n")
        out.append("| codec | " + " | ".join(f"sigma {s:g}" if d == "gauss" else "random"
                                            for d, s in cols) + " |")
        out.append("|---|" + "---:|" * len(cols))
        tables = [best_path(select(rows, dt, d, s if s is not None else 1.0, nbytes)) for d, s in cols]
        codecs = [c for c in OURS + BASELINES if any(c in t for t in tables)]
        for c in codecs:
            cells = [f"{t[c]['ratio']:.3f}" if c in t else "" for t in tables]
            out.append(f"| {c} | " + " | ".join(cells) + " |")
        bounds = [f"{next(iter(t.values()))['bound']:.3f}" if t else "" for t in tables]
        out.append("| *bound* | " + " | ".join(bounds) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("jsonl")
    ap.add_argument("-o", "--output", default=None, help="PNG path (default: JSONL path with .png)")
    ap.add_argument("--markdown", action="store_true", help="print the BENCHMARKS.md tables")
    a = ap.parse_args()
    rows = load(a.jsonl)
    plot(rows, a.output or a.jsonl.rsplit(".", 1)[0] + ".png")
    ok, lines = verdict(rows)
    print("\n".join(lines))
    print("all targets met" if ok else "some targets missed")
    if a.markdown:
        print(markdown(rows))


if __name__ == "__main__":
    main()
