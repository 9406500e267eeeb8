#!/usr/bin/env bash
# test: timeout=300
# test_untrusted_names.sh — nothing a file or the command line says is
# printed raw (issue 52, item 1). Names, keys, values and paths carrying
# terminal escape sequences (ESC ] 0 ; ... BEL sets the title, ESC [ 31 m
# the colour), other C0 controls, DEL, C1 controls, a bidirectional
# override and invalid UTF-8 (a stray 0xff, an overlong 0xc0 0xaf, a lone
# continuation byte, a cut sequence) go through every loader so that a
# message quotes them: safetensors headers through --init-from (the issue's
# overlapping tensor, a tensor with no place, a bad dtype, an unknown field,
# a syntax error at a control byte), the shard index, config.json (an
# unknown field, the architecture, model_type, rope_type, a JSON error), the
# YAML config (a key, a value, data.path, a comm.overrides pattern), --set
# (a key, a value with a newline that would fake a step line, no '='),
# options and paths of build/train, build/export-hf and build/supervise, a
# checkpoint for --resume (a manifest entry, a malformed manifest, `latest`,
# a rank file's range metadata) and the token file's metadata (a JSON error,
# the tokenizer_file a warning names). Each check reads the run's stdout and
# stderr as bytes: the message is there, the escaped form (\x1b ...) is
# there, and no byte a terminal obeys is: no C0 control but newline and tab,
# no DEL, nothing that is not UTF-8, no C1 control or bidirectional control.
# The overlap is also run at 2 ranks. The escaping rules themselves, byte by
# byte: tests/test_config.c (printable_*).
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
EXPORT=${EXPORT:-$BUILD/export-hf}
SUPERVISE=${SUPERVISE:-$BUILD/supervise}
[ -x "$TRAIN" ] && [ -x "$EXPORT" ] && [ -x "$SUPERVISE" ] ||
  { echo "FAIL untrusted: $TRAIN, $EXPORT or $SUPERVISE not built"; exit 1; }

# The bytes: EVIL on the command line and in files that take any byte
# (safetensors names, file names, the manifest); EVIL_U where the format is
# Unicode text (JSON through jansson, YAML), written with its escapes.
EVIL=$'\e]0;pwned\a\e[31mEVIL\x01\b\x7f\xc2\x9b\xe2\x80\xae\xff\xc0\xaf\x80\xe4\xb8'
SHOWN='\x1b]0;pwned\x07\x1b[31mEVIL\x01\x08\x7f\xc2\x9b\xe2\x80\xae\xff\xc0\xaf\x80\xe4\xb8'
SHOWN_U='\x1b]0;pwned\x07\x1b[31mEVIL\x01\x7f\xc2\x9b\xe2\x80\xae'
EVIL_YAML='"\e]0;pwned\a\e[31mEVIL\x01\x7f\u009b\u202e"'
# EVIL as config_print writes it: a YAML scalar that reads back (code points
# as \xNN / \uNNNN; the bytes that are not UTF-8 as \xNN, which YAML reads
# as other characters)
PRINTED_YAML='\x1b]0;pwned\x07\x1b[31mEVIL\x01\x08\x7f\x9b\u202e\xff\xc0\xaf\x80\xe4\xb8'

# A tiny Llama as save_pretrained lays it out (good), the HF directories and
# token files the cases below read, each damaged in one place.
python3 - "$tmp" "$EVIL" <<'PY' || { echo "FAIL untrusted/setup"; exit 1; }
import json, os, shutil, struct, sys
import numpy as np
from safetensors.numpy import save_file
d = sys.argv[1]
evil = os.fsencode(sys.argv[2])                       # the command line's bytes
evil_u = "\x1b]0;pwned\x07\x1b[31mEVIL\x01\x7f\u009b\u202e"  # as JSON can say it
sys.path.insert(0, "tests")
from tiny_hf import V, C, KV, F, HD as hd, CONFIG as cfg, llama_weights
w, rng = llama_weights()

def model_dir(name, config=cfg):
    o = os.path.join(d, name)
    os.makedirs(o)
    json.dump(config, open(os.path.join(o, "config.json"), "w"))
    return o

good = model_dir("good")
save_file(w, os.path.join(good, "model.safetensors"), metadata={"format": "pt"})
open(os.path.join(good, "tokenizer.json"), "w").write('{"model": "the model\'s"}')

# safetensors with a header of our own bytes: entries are (name bytes,
# fields as JSON text bytes); names escaped as JSON needs (", \, C0), the
# other bytes raw, which the format's reader takes as they are.
blob = open(os.path.join(good, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
header, data = json.loads(blob[8:8 + n]), blob[8 + n:]
def jname(b):
    out = b""
    for c in b:
        out += b"\\u%04x" % c if c < 0x20 or c in b'"\\' else bytes([c])
    return b'"' + out + b'"'
def write_st(name, extra=(), data_extra=b"", sep=b",", tail=b""):
    items = [jname(k.encode()) + b":" + json.dumps(v).encode() for k, v in header.items()]
    items += [jname(k) + b":" + v for k, v in extra]
    h = b"{" + sep.join(items) + tail + b"}"
    o = model_dir(name)
    open(os.path.join(o, "model.safetensors"), "wb").write(struct.pack("<Q", len(h)) + h + data + data_extra)
up = header["model.layers.0.mlp.up_proj.weight"]["data_offsets"]
write_st("st_overlap", [(evil, b'{"dtype":"F32","shape":[%d,%d],"data_offsets":[%d,%d]}' % (F, C, *up))])
end = len(data)
write_st("st_no_place", [(evil, b'{"dtype":"F32","shape":[1],"data_offsets":[%d,%d]}' % (end, end + 4))],
         data_extra=b"\0" * 4)
write_st("st_dtype", [(b"x", b'{"dtype":' + jname(evil) + b',"shape":[1],"data_offsets":[0,4]}')])
write_st("st_field", [(b"x", b'{' + jname(evil) + b':1}')])
write_st("st_syntax", tail=b"\x1b[31m")

# the shard index: a tensor the named shard lacks, a shard that is missing
shard = "model-00001-of-00001.safetensors"
for name, wm in (("index_tensor", {evil_u: shard}), ("index_shard", {"model.norm.weight": evil_u})):
    o = model_dir(name)
    shutil.copy(os.path.join(good, "model.safetensors"), os.path.join(o, shard))
    json.dump({"metadata": {"total_size": 0}, "weight_map": wm},
              open(os.path.join(o, "model.safetensors.index.json"), "w"))

# config.json
model_dir("cfg_field", dict(cfg, **{evil_u: 1}))
model_dir("cfg_arch", dict(cfg, architectures=[evil_u]))
model_dir("cfg_type", dict(cfg, model_type=evil_u))
model_dir("cfg_rope", dict(cfg, rope_scaling={"rope_type": evil_u}))
o = model_dir("cfg_json")
open(os.path.join(o, "config.json"), "wb").write(b'{"vocab_size": 61}\x1b]0;pwned\x07')

# token files: u16 tokens below V; metadata that is not JSON after its
# object; metadata whose tokenizer_file is named with the bytes
rng.integers(0, V, 3000).astype("<u2").tofile(os.path.join(d, "tokens.bin"))
for name in ("tok_json", "tok_name"):
    rng.integers(0, V, 3000).astype("<u2").tofile(os.path.join(d, name + ".bin"))
meta = {"format": "zipccl-runtime-tokens-1", "dtype": "u16", "tokens": 3000, "vocab_size": V}
open(os.path.join(d, "tok_json.bin.json"), "wb").write(json.dumps(meta).encode() + b"\x1b[31mEVIL")
json.dump(dict(meta, tokenizer_file=evil_u), open(os.path.join(d, "tok_name.bin.json"), "w"))
open(os.path.join(d, evil_u), "w").write('{"model": "the data\'s"}')
PY

# yaml NAME TEXT: the run's data and steps, then TEXT, as $tmp/NAME.yaml
yaml() {
  printf 'data: {path: %s/tokens.bin, tokenizer: u16, seq_len: 16, batch_size: 2, val_fraction: 0}\ntrain: {steps: 2}\n%s\n' \
    "$tmp" "$2" >"$tmp/$1.yaml"
}
yaml run "comm: {strategy: raw}"

# check NAME RC FRAGMENT SHOWN -- CMD...: CMD exits with RC, its stdout and
# stderr hold FRAGMENT and SHOWN (the escaped text), and none of the bytes
# a terminal obeys.
check() {
  local name=$1 want=$2 frag=$3 shown=$4; shift 5
  "$@" >"$tmp/out" 2>&1
  local rc=$? why
  why=$(python3 - "$tmp/out" "$frag" "$shown" 2>&1 <<'PY'
import sys
data = open(sys.argv[1], "rb").read()
frag, shown = (a.encode() for a in sys.argv[2:4])
def at(i):
    return repr(data[max(0, i - 40):i + 20])
for i, b in enumerate(data):
    if (b < 0x20 and b not in (9, 10)) or b == 0x7f:
        sys.exit(f"raw byte 0x{b:02x} at offset {i}: {at(i)}")
try:
    text = data.decode("utf-8")
except UnicodeDecodeError as e:
    sys.exit(f"invalid UTF-8 at offset {e.start}: {at(e.start)}")
for i, c in enumerate(text):
    if 0x80 <= ord(c) <= 0x9f or ord(c) in (0x61c, 0x200e, 0x200f, 0x2028, 0x2029) or \
       0x202a <= ord(c) <= 0x202e or 0x2066 <= ord(c) <= 0x2069:
        sys.exit(f"control character U+{ord(c):04X}: {text[max(0, i - 40):i + 20]!r}")
if frag not in data:
    sys.exit(f"no '{sys.argv[2]}' in: {data[:400]!r}")
if shown not in data:
    sys.exit(f"no '{sys.argv[3]}' in: {data[:400]!r}")
PY
) || why=${why:-"the check failed"}
  if [ "$rc" -ne "$want" ]; then fail "$name" "exit $rc, want $want: $(head -c 300 "$tmp/out" | cat -v)"
  elif [ -n "$why" ]; then fail "$name" "$why"
  else pass "$name"; fi
}
mpi() { mpirun --oversubscribe --bind-to none -n 2 "$@"; }
T=$tmp/run.yaml

# safetensors through --init-from (the issue's file first, at 1 and 2 ranks)
check untrusted/safetensors_overlap 2 "' overlap in the file" "'$SHOWN'" -- \
  "$TRAIN" "$T" --init-from "$tmp/st_overlap"
check untrusted/safetensors_overlap_np2 2 "' overlap in the file" "'$SHOWN'" -- \
  mpi "$TRAIN" "$T" --init-from "$tmp/st_overlap"
check untrusted/safetensors_no_place 2 "tensor '$SHOWN' has no place in the model" "$SHOWN" -- \
  "$TRAIN" "$T" --init-from "$tmp/st_no_place"
check untrusted/safetensors_dtype 2 "unknown dtype '" '\x1b]0;pwned\x07' -- \
  "$TRAIN" "$T" --init-from "$tmp/st_dtype"
check untrusted/safetensors_field 2 "unknown field '" '\x1b]0;pwned\x07' -- \
  "$TRAIN" "$T" --init-from "$tmp/st_field"
check untrusted/safetensors_syntax 2 "expected '}', found '" "found '\\x1b'" -- \
  "$TRAIN" "$T" --init-from "$tmp/st_syntax"
check untrusted/index_tensor 2 "which the index places there" "no tensor '$SHOWN_U'" -- \
  "$TRAIN" "$T" --init-from "$tmp/index_tensor"
check untrusted/index_shard 2 "the shard is missing" "/$SHOWN_U: the shard" -- \
  "$TRAIN" "$T" --init-from "$tmp/index_shard"
# config.json
check untrusted/config_json_field 2 "not a field this import knows" "field '$SHOWN_U'" -- \
  "$TRAIN" "$T" --init-from "$tmp/cfg_field"
check untrusted/config_json_architecture 2 "is not supported" "'$SHOWN_U' is not supported" -- \
  "$TRAIN" "$T" --init-from "$tmp/cfg_arch"
check untrusted/config_json_model_type 2 "field 'model_type'" "'$SHOWN_U' is not supported" -- \
  "$TRAIN" "$T" --init-from "$tmp/cfg_type"
check untrusted/config_json_rope_type 2 "is not implemented" "rope_type '$SHOWN_U'" -- \
  "$TRAIN" "$T" --init-from "$tmp/cfg_rope"
check untrusted/config_json_syntax 2 "not valid JSON" "near '\\x1b" -- \
  "$TRAIN" "$T" --init-from "$tmp/cfg_json"
check untrusted/init_from_path 2 ": not a directory" "/$SHOWN: not a directory" -- \
  "$TRAIN" "$T" --init-from "$tmp/$EVIL"

# the YAML config: a key, a value, a path, a pattern
yaml key "model: {$EVIL_YAML: 1}"
check untrusted/yaml_key 2 "unknown key 'model.$SHOWN_U'" "$SHOWN_U" -- "$TRAIN" "$tmp/key.yaml"
yaml value "comm: {strategy: $EVIL_YAML}"
check untrusted/yaml_value 2 "unknown strategy '$SHOWN_U'" "$SHOWN_U" -- "$TRAIN" "$tmp/value.yaml"
cat >"$tmp/path.yaml" <<YAML
data: {path: "$tmp/data-\e]0;pwned\a\e[31mEVIL\x01\x7f\u009b\u202e", tokenizer: u16, seq_len: 16}
YAML
check untrusted/yaml_data_path 2 "cannot open data file" "$tmp/data-$SHOWN_U: cannot open" -- \
  "$TRAIN" "$tmp/path.yaml"
yaml pattern "comm: {overrides: [{pattern: $EVIL_YAML, strategy: compressed}]}"
check untrusted/yaml_overrides_pattern 2 "matches no unit" "(pattern \"$SHOWN_U\"" -- \
  "$TRAIN" "$tmp/pattern.yaml"
# what the effective config prints of a string value
check untrusted/effective_config_prints_escaped 0 "# effective config" \
  "  json: \"$tmp/$PRINTED_YAML\"" -- "$TRAIN" "$T" --set "logging.json=$tmp/$EVIL"

# --set and the command line
check untrusted/set_key 2 "unknown key 'model.$SHOWN'" "$SHOWN" -- \
  "$TRAIN" "$T" --set "model.$EVIL=1"
check untrusted/set_value_fakes_no_line 2 "expected an integer, got '" \
  "got '32\\x0astep 2/2 | loss 0.0 $SHOWN'" -- "$TRAIN" "$T" --set $'model.dim=32\nstep 2/2 | loss 0.0 '"$EVIL"
if grep -q '^step 2/2' "$tmp/out"; then fail untrusted/set_value_newline "a faked step line: $(cat -v "$tmp/out")"
else pass untrusted/set_value_newline; fi
check untrusted/set_no_equals 2 "expected dotted.key=value" "--set '$SHOWN'" -- \
  "$TRAIN" "$T" --set "$EVIL"
check untrusted/train_option 2 "unknown or incomplete option" "'--$SHOWN'" -- \
  "$TRAIN" "$T" "--$EVIL"
check untrusted/export_option 2 "unknown or incomplete option" "'--$SHOWN'" -- \
  "$EXPORT" "$tmp/good" "$tmp/x" "--$EVIL"
check untrusted/supervise_option 2 "unknown or incomplete option" "'--$SHOWN'" -- \
  "$SUPERVISE" "--$EVIL" -- true
check untrusted/supervise_value 2 "expects 0..1000000" "got '$SHOWN'" -- \
  "$SUPERVISE" --max-restarts "$EVIL" -- true

# the token file's metadata: a JSON error near the bytes, and the tokenizer
# file it names in the warning about another tokenizer than the model's
check untrusted/token_metadata_syntax 2 "not valid JSON" "near '\\x1b" -- \
  "$TRAIN" "$T" --set data.path="$tmp/tok_json.bin"
check untrusted/token_metadata_tokenizer_file 0 "was made with another tokenizer.json" \
  "another tokenizer.json ($tmp/$SHOWN_U)" -- \
  "$TRAIN" "$T" --init-from "$tmp/good" --set data.path="$tmp/tok_name.bin"

# a checkpoint for --resume, damaged in four places: a manifest entry's
# name, the manifest's text, `latest`, a rank file's range metadata (the
# manifest's size and hash made to match, so the range is what fails)
if "$TRAIN" "$T" --set checkpoint.dir="$tmp/ck" >"$tmp/ck.log" 2>&1; then
  step=$tmp/ck/step_00000002
  for c in entry malformed latest range; do mkdir "$tmp/ck_$c"; cp -r "$step" "$tmp/ck_$c/"; done
  python3 - "$tmp" "$EVIL" <<'PY' || fail untrusted/checkpoint_setup "python"
import json, os, struct, sys
d, evil = sys.argv[1], os.fsencode(sys.argv[2])
def step(c): return os.path.join(d, "ck_" + c, "step_00000002")
def manifest(c): return os.path.join(step(c), "manifest.json")
m = open(manifest("entry"), "rb").read()
open(manifest("entry"), "wb").write(m.replace(b'"state.json"', b'"' + evil + b'"'))
m = open(manifest("malformed"), "rb").read()
open(manifest("malformed"), "wb").write(m.replace(b'"state.json", "bytes": ', b'"\x1b]0;pwned\x07", "bytes": \x1b[31m'))
open(os.path.join(d, "ck_latest", "latest"), "wb").write(b"step_" + evil + b"\n")
# the range of unit 0 in rank 0's file
f = os.path.join(step("range"), "rank_00000.safetensors")
b = open(f, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
unit = next(k for k in h["__metadata__"] if k not in ("step", "rank"))
h["__metadata__"][unit] = "\x1b]0;pwned\x07\x1b[31mEVIL\u009b 0 1"
hb = json.dumps(h).encode()
nb = struct.pack("<Q", len(hb)) + hb + b[8 + n:]
open(f, "wb").write(nb)
fnv = 0xcbf29ce484222325
for c in nb:
    fnv = ((fnv ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
m = json.load(open(manifest("range")))
for e in m["files"]:
    if e["name"] == "rank_00000.safetensors":
        e["bytes"], e["fnv1a64"] = len(nb), "%016x" % fnv
text = json.dumps(m)
open(manifest("range"), "w").write(text.replace("}, {", "},\n  {"))
PY
  check untrusted/checkpoint_manifest_entry 2 "--resume: cannot read" "/$SHOWN: " -- \
    "$TRAIN" "$T" --resume "$tmp/ck_entry/step_00000002"
  check untrusted/checkpoint_manifest_malformed 2 "manifest.json is malformed near" \
    '\x1b]0;pwned\x07", "bytes": \x1b[31m' -- "$TRAIN" "$T" --resume "$tmp/ck_malformed/step_00000002"
  check untrusted/checkpoint_latest 2 "is not a checkpoint" "step_$SHOWN is not a checkpoint" -- \
    "$TRAIN" "$T" --resume "$tmp/ck_latest"
  check untrusted/checkpoint_rank_range 2 "the range of" \
    "is '\\x1b]0;pwned\\x07\\x1b[31mEVIL\\xc2\\x9b 0 1'" -- \
    "$TRAIN" "$T" --resume "$tmp/ck_range/step_00000002"
else
  fail untrusted/checkpoint_setup "$(tail -3 "$tmp/ck.log")"
fi
exit $((fails > 0))
