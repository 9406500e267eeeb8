# test: timeout=120
"""test_safetensors.py — runtime/safetensors.c against the reference implementation.

The reference is the `safetensors` PyPI package (Rust core).  Three directions:
  1. the C writer's file (tests/test_safetensors.c `write`) is loaded by the
     reference; every tensor's dtype, shape and bits, and the metadata, must
     equal what the Python side computes independently from the same recipe;
  2. files written by the reference (numpy and, for bf16, flax) and one
     hand-written header using JSON escapes, whitespace and reordered fields
     are read by the C reader (`dump`), which must report the same names,
     dtypes, shapes and an FNV-1a-64 of the bytes that Python computes;
  3. damaged files (truncations, bad JSON, huge header length, offsets out of
     range, overlap) are refused by the C reader with a message and no crash,
     and the reference refuses them too (so the damage is real).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
from pycheck import check, failed

BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(BUILD, "tests", "test_safetensors")


def mix(i, salt):
    """Same 32-bit pattern as mix() in tests/test_safetensors.c."""
    m = 0xFFFFFFFF
    x = (((i + 1) * 2654435761) & m) ^ ((salt * 0x9E3779B9) & m)
    x ^= x >> 15
    x = (x * 0x85EBCA6B) & m
    x ^= x >> 13
    return x


def expected_bits(dtype, shape, salt):
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    ms = np.array([mix(i, salt) for i in range(n)], dtype=np.uint64)
    if dtype == "F32":
        vals = ((ms % 101).astype(np.int64) - 50).astype(np.float32) * np.float32(0.125)
        return vals.reshape(shape).view(np.uint32)
    if dtype in ("BF16", "F16"):
        return (ms & 0xBFFF).astype(np.uint16).reshape(shape)
    if dtype == "I64":
        return (ms.astype(np.int64) - 2000000000).reshape(shape)
    if dtype == "I32":
        return ms.astype(np.uint32).view(np.int32).reshape(shape)
    return (ms & 0xFF).astype(np.uint8).reshape(shape)


# Mirrors kSpecs / kMeta in tests/test_safetensors.c.
SPECS = [
    ("embed.weight", "F32", (3, 5), 1),
    ('layers.0.attn.wq"quoted\\back', "BF16", (7,), 2),
    ("layers.0.mlp/w1 é", "F16", (2, 3, 4), 3),
    ("step", "I64", (), 4),
    ("mask", "U8", (2, 2), 5),
    ("empty", "F32", (0, 3), 6),
    ("ids", "I32", (4,), 7),
]
META = {"format": "pt", "step": "42",
        "note": 'quote" backslash\\ newline\n tab\t unicode é€'}


def fnv1a64(b):
    h = 0xcbf29ce484222325
    for byte in b:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def c_dump(path):
    """Run the C reader; returns (returncode, tensors dict, metadata, error line, stderr)."""
    r = subprocess.run([BIN, "dump", path], capture_output=True, text=True, timeout=30)
    tensors, meta, error = {}, {}, None
    for line in r.stdout.splitlines():
        parts = line.split(" ")
        if parts[0] == "TENSOR":
            name = bytes.fromhex(parts[1]).decode()
            shape = () if parts[3] == "-" else tuple(int(x) for x in parts[3].split(","))
            tensors[name] = (parts[2], shape, int(parts[4]), int(parts[5], 16))
        elif parts[0] == "META":
            meta[bytes.fromhex(parts[1]).decode()] = bytes.fromhex(parts[2]).decode()
        elif parts[0] == "ERROR":
            error = line[6:]
    return r.returncode, tensors, meta, error, r.stderr


def ref_load_bits(path):
    """Load every tensor with the reference, as raw bits (bf16 through flax)."""
    from safetensors import safe_open
    out = {}
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
        for k in f.keys():
            try:
                out[k] = f.get_tensor(k)
            except TypeError:  # numpy has no bfloat16; flax/jax has
                from safetensors.flax import load_file
                out[k] = np.asarray(load_file(path)[k]).view(np.uint16)
    return out, meta


def c_writes_reference_reads(tmp):
    path = os.path.join(tmp, "c.safetensors")
    r = subprocess.run([BIN, "write", path], capture_output=True, text=True, timeout=30)
    check(r.returncode == 0 and os.path.exists(path), "c_write", r.stdout + r.stderr)
    if r.returncode:
        return
    with open(path, "rb") as fp:
        raw = fp.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    offs = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
    contiguous = offs[0][0] == 0 and all(a[1] == b[0] for a, b in zip(offs, offs[1:])) \
        and offs[-1][1] == len(raw) - 8 - n
    check((8 + n) % 8 == 0 and contiguous, "c_file_layout",
          f"header {n} bytes, offsets {offs}, file {len(raw)} bytes")

    try:
        got, meta = ref_load_bits(path)
    except Exception as e:  # the reference refusing our file is the failure
        check(False, "reference_loads_c_file", repr(e))
        return
    check(set(got) == {s[0] for s in SPECS}, "reference_loads_c_file", f"keys {sorted(got)}")
    for name, dtype, shape, salt in SPECS:
        if name not in got:
            continue
        a = got[name]
        want = expected_bits(dtype, shape, salt)
        bits = a.view(want.dtype) if a.dtype.itemsize == want.dtype.itemsize else a
        check(a.shape == shape and np.array_equal(bits, want),
              f"c_tensor[{dtype}{list(shape)}]",
              f"{name}: shape {a.shape} vs {shape}, first {bits.ravel()[:4]} vs {want.ravel()[:4]}")
    check(meta == META, "c_metadata", f"{meta!r}")


def reference_writes_c_reads(tmp):
    from safetensors.numpy import save_file
    rng = np.random.default_rng(7)
    arrays = {
        "w.f32": rng.standard_normal((17, 33)).astype(np.float32),
        "w.f16": rng.standard_normal((5, 4, 3)).astype(np.float16),
        "w.f64": rng.standard_normal(9),
        "ids.i64": rng.integers(-2**40, 2**40, 11),
        "bytes.u8": rng.integers(0, 256, (3, 3)).astype(np.uint8),
        "flags.bool": rng.integers(0, 2, 6).astype(bool),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
        'name "quoted" é/€': np.arange(6, dtype=np.int32).reshape(2, 3),
    }
    meta = {"framework": "numpy", "note": 'a "quote" and \\ and é'}
    path = os.path.join(tmp, "ref.safetensors")
    save_file(arrays, path, metadata=meta)
    dt = {np.float32: "F32", np.float16: "F16", np.float64: "F64", np.int64: "I64",
          np.uint8: "U8", np.bool_: "BOOL", np.int32: "I32"}
    rc, tensors, cmeta, err, stderr = c_dump(path)
    check(rc == 0 and set(tensors) == set(arrays), "c_reads_reference_file",
          f"rc={rc} err={err} names={sorted(tensors)} {stderr[-300:]}")
    for name, a in arrays.items():
        if name not in tensors:
            continue
        want = (dt[a.dtype.type], a.shape, a.nbytes, fnv1a64(np.ascontiguousarray(a).tobytes()))
        check(tensors[name] == want, f"c_reads[{want[0]}{list(a.shape)}]",
              f"{name}: {tensors[name]} vs {want}")
    check(cmeta == meta, "c_reads_reference_metadata", f"{cmeta!r}")

    # bf16 through the reference's flax writer.
    try:
        import jax.numpy as jnp
        from safetensors.flax import save_file as save_flax
        b = rng.standard_normal((6, 10)).astype(np.float32)
        bpath = os.path.join(tmp, "bf16.safetensors")
        save_flax({"act.bf16": jnp.asarray(b, dtype=jnp.bfloat16)}, bpath)
        bits = np.asarray(jnp.asarray(b, dtype=jnp.bfloat16)).view(np.uint16)
        rc, tensors, _, err, _ = c_dump(bpath)
        want = ("BF16", (6, 10), bits.nbytes, fnv1a64(bits.tobytes()))
        check(rc == 0 and tensors.get("act.bf16") == want, "c_reads_reference_bf16",
              f"rc={rc} err={err} got {tensors.get('act.bf16')} want {want}")
    except ImportError as e:
        check(False, "c_reads_reference_bf16", f"jax not importable: {e}")

    # A hand-written header: escapes, whitespace, field order, no padding.
    hdr = ('{ "__metadata__" : { "k\\u00e9y" : "v\\n\\"x\\"" } ,\n'
           '  "t\\u20ac\\ud83d\\ude00\\/x" : { "shape" : [ 2 , 2 ] , "data_offsets" : [ 0 , 8 ] ,'
           ' "dtype" : "BF16" } }')
    data = struct.pack("<4H", 1, 2, 0x3F80, 0xBF80)
    hpath = os.path.join(tmp, "hand.safetensors")
    with open(hpath, "wb") as fp:
        fp.write(struct.pack("<Q", len(hdr.encode())) + hdr.encode() + data)
    ref_ok = True
    try:
        from safetensors import safe_open
        with safe_open(hpath, framework="numpy") as f:
            ref_ok = list(f.keys()) == ["t€😀/x"] and f.metadata() == {"kéy": 'v\n"x"'}
    except Exception as e:
        ref_ok = repr(e)
    rc, tensors, cmeta, err, _ = c_dump(hpath)
    check(ref_ok is True and rc == 0 and tensors == {"t€😀/x": ("BF16", (2, 2), 8, fnv1a64(data))}
          and cmeta == {"kéy": 'v\n"x"'}, "c_reads_escaped_header",
          f"reference={ref_ok} rc={rc} err={err} {tensors} {cmeta}")


def damaged_files(tmp):
    from safetensors import safe_open
    from safetensors.numpy import save_file
    path = os.path.join(tmp, "base.safetensors")
    save_file({"a": np.arange(8, dtype=np.float32), "b": np.ones((2, 2), np.float16)}, path)
    with open(path, "rb") as fp:
        good = fp.read()
    (n,) = struct.unpack("<Q", good[:8])
    header = good[8:8 + n]
    hj = json.loads(header)

    def with_header(h, data=good[8 + n:]):
        hb = json.dumps(h).encode() if isinstance(h, dict) else h
        return struct.pack("<Q", len(hb)) + hb + data

    def move(name, begin, end):
        h = json.loads(header)
        h[name]["data_offsets"] = [begin, end]
        return with_header(h)

    a0, a1 = hj["a"]["data_offsets"]
    b0, b1 = hj["b"]["data_offsets"]
    cases = {
        "truncated_in_length": (good[:5], "too short"),
        "truncated_in_header": (good[:8 + n // 2], "runs past"),
        "truncated_in_data": (good[:len(good) - 3], "past the end"),
        "huge_header_length": (struct.pack("<Q", 1 << 50) + good[8:], "exceeds"),
        "bad_json": (with_header(header[:-3] + b"]]]"), "header JSON"),
        "offsets_out_of_range": (move("a", a0, a1 + 1024), "past the end"),
        "offsets_overlap": (move("a", b0, b0 + (a1 - a0)), "overlap"),
        "shape_disagrees": (with_header({**hj, "b": {**hj["b"], "shape": [3, 2]}}), "span"),
    }
    for label, (blob, expect) in cases.items():
        p = os.path.join(tmp, f"{label}.safetensors")
        with open(p, "wb") as fp:
            fp.write(blob)
        try:
            with safe_open(p, framework="numpy") as f:
                for k in f.keys():
                    f.get_tensor(k)
            ref_refuses = False
        except Exception:
            ref_refuses = True
        rc, tensors, _, err, stderr = c_dump(p)
        clean = "Sanitizer" not in stderr and "runtime error" not in stderr
        check(ref_refuses and rc == 1 and err is not None and expect in err and clean,
              f"refuses_{label}",
              f"reference refuses={ref_refuses} rc={rc} err={err!r} want '{expect}' {stderr[-300:]}")


def main():
    if not os.access(BIN, os.X_OK) and "asan" not in BUILD:
        subprocess.run(["make", f"BUILD={BUILD}", BIN], capture_output=True)
    if not os.access(BIN, os.X_OK):
        check(False, "binary_built", f"{BIN} is missing (make BUILD={BUILD} {BIN})")
        return 1
    with tempfile.TemporaryDirectory(prefix="test_safetensors_py.") as tmp:
        c_writes_reference_reads(tmp)
        reference_writes_c_reads(tmp)
        damaged_files(tmp)
    return 1 if failed() else 0


if __name__ == "__main__":
    sys.exit(main())
