#!/usr/bin/env bash
# test: asan=no timeout=60
# test_tour.sh — docs/TOUR.md names code; every name it gives must still be
# there, so a rename the tour misses fails here. What is checked:
#   - `path: name, name`  each name is defined in that file: a function
#     definition (not a prototype), a typedef, a struct/enum tag, an enum
#     constant, a macro, or a file-scope table; a mere mention is not enough
#   - `name`  (a single word in backticks, outside fenced blocks) is defined,
#     as above, in a file the same section (## heading) cites
#   - every path (runtime/..., comm/..., docs/..., ...) and every bare file
#     name (coll.c, FORMAT.md) anywhere on the page exists in the tree
# Then the check itself: copies of the page with a planted wrong name, a
# name the file only mentions, a prototype, a missing file, a name no cited
# file defines and an unknown path or file name must each fail, naming it,
# and so must the page against a copy of runtime/fsdp.c with one function
# renamed.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
tour=docs/TOUR.md

cat >"$tmp/check.py" <<'PY'
import os, re, sys

page, root = sys.argv[1], sys.argv[2]
# PATH=FILE pairs after them: read FILE as PATH (the self-check's renames)
OVERRIDE = dict(a.split("=", 1) for a in sys.argv[3:])
SRC_EXT = (".c", ".h", ".cu")
DIRS = ("runtime", "comm", "models", "kernels", "docs", "tests", "scripts", "configs")

def strip_c(src):
    """Comments and string/char literals blanked, newlines kept."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j])); i = j
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else "")); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)

_defs = {}
def definitions(path):
    """Names a C/CUDA source or header defines."""
    if path in _defs: return _defs[path]
    real = OVERRIDE.get(path, os.path.join(root, path))
    with open(real, encoding="utf-8", errors="replace") as f:
        t = strip_c(f.read())
    names = set()
    names.update(re.findall(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)", t, re.M))
    # functions: NAME( at file scope (the line starts in column 0) whose
    # parameter list is followed by a body, not a ';'
    for m in re.finditer(r"^(?!return\b|else\b)[A-Za-z_][^;{}()\n#=]*?(?<![\w])([A-Za-z_]\w*)\s*\(", t, re.M):
        i, depth = m.end() - 1, 0
        while i < len(t):
            depth += t[i] == "("
            depth -= t[i] == ")"
            i += 1
            if depth == 0: break
        rest = t[i:i + 400].lstrip()
        while rest.startswith("__attribute__"):
            k, d = rest.index("("), 0
            while k < len(rest):
                d += rest[k] == "("; d -= rest[k] == ")"; k += 1
                if d == 0: break
            rest = rest[k:].lstrip()
        if rest.startswith("{"): names.add(m.group(1))
    # typedefs: the statement up to its ';' at brace depth 0
    for m in re.finditer(r"\btypedef\b", t):
        i, depth = m.end(), 0
        while i < len(t) and not (t[i] == ";" and depth == 0):
            depth += t[i] == "{"; depth -= t[i] == "}"; i += 1
        stmt = t[m.end():i]
        tail = stmt[stmt.rfind("}") + 1:] if "}" in stmt else stmt
        fp = re.search(r"\(\s*\*\s*([A-Za-z_]\w*)\s*\)", tail)
        if fp: names.add(fp.group(1))
        else:
            ids = re.findall(r"[A-Za-z_]\w*", re.sub(r"\[[^\]]*\]", "", tail))
            if ids: names.add(ids[-1])
    names.update(re.findall(r"\b(?:struct|union|enum)\s+([A-Za-z_]\w*)\s*\{", t))
    for body in re.findall(r"\benum\b[^{;]*\{([^}]*)\}", t):
        names.update(re.findall(r"(?:^|,)\s*([A-Za-z_]\w*)", body))
    # file-scope tables and constants: NAME [= | [..] =] in column 0
    names.update(re.findall(r"^(?!typedef\b|return\b)[A-Za-z_][\w \t\*]*?(?<![\w])([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*=[^=]", t, re.M))
    _defs[path] = names
    return names

# the tree's files: git's (tracked, and new ones not ignored), else a walk
import subprocess
try:
    tree = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard"],
                          capture_output=True, text=True, check=True).stdout.split("\n")
    tree = [f for f in tree if f]
except (OSError, subprocess.CalledProcessError):
    tree = []
if not tree:
    for d, subs, files in os.walk(root):
        subs[:] = [s for s in subs if not (s.startswith(".") or s.startswith("build"))]
        tree += [os.path.relpath(os.path.join(d, f), root) for f in files]
files_in_tree = set(tree)
basenames = {os.path.basename(p) for p in tree}

text = open(page, encoding="utf-8").read()
prose = re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.M | re.S)  # no fenced blocks
fails, passes = {}, {}  # check name -> why; each check once
def ok(name): passes.setdefault(name, None)
def bad(name, why): fails.setdefault(name, why)

# every path and bare file name on the page, fenced blocks included
paths = set(re.findall(r"(?<![\w/.-])((?:%s)/[\w./-]*\w)" % "|".join(DIRS), text))
for p in sorted(paths):
    if p in files_in_tree or any(f.startswith(p + "/") for f in tree): ok("tour_path:" + p)
    else: bad("tour_path:" + p, "no such file or directory")
bare = set(re.findall(r"(?<![\w/.-])([\w-]+\.(?:c|h|cu|md|sh|py|yaml))(?![\w/])", text))
for b in sorted(bare):
    if b in basenames: ok("tour_file:" + b)
    else: bad("tour_file:" + b, "no file of that name in the tree")

sections = re.split(r"^(?=## )", prose, flags=re.M)
for sec in sections:
    title = sec.splitlines()[0] if sec.strip() else ""
    spans = [re.sub(r"\s+", " ", s).strip() for s in re.findall(r"`([^`]+)`", sec)]
    files, words = [], []
    for s in spans:
        m = re.match(r"^([\w./-]+\.(?:c|h|cu)):\s*(.+)$", s)
        if m:
            path = m.group(1)
            if path not in files: files.append(path)
            if not os.path.isfile(os.path.join(root, path)):
                bad("tour_cite:%s" % path, "no such file (cited as `%s`)" % s)
                continue
            for name in [x.strip() for x in m.group(2).split(",")]:
                name = name[:-2] if name.endswith("()") else name
                if not re.fullmatch(r"[A-Za-z_]\w*", name):
                    bad("tour_cite:%s:%s" % (path, name), "not a C name")
                elif name in definitions(path): ok("tour_cite:%s:%s" % (path, name))
                else: bad("tour_cite:%s:%s" % (path, name), "not defined in %s" % path)
        elif re.fullmatch(r"[\w./-]+\.(?:c|h|cu)", s):
            if s not in files: files.append(s)
        elif re.fullmatch(r"[A-Za-z_]\w*(?:\(\))?", s):
            words.append(s[:-2] if s.endswith("()") else s)
    files = [f for f in files if f.endswith(SRC_EXT) and os.path.isfile(os.path.join(root, f))]
    for w in dict.fromkeys(words):
        home = [f for f in files if w in definitions(f)]
        if home: ok("tour_cite:%s:%s" % (home[0], w))  # one check per (file, name)
        else: bad("tour_name:" + w, "defined in none of the files its section cites (%s): %s"
                  % (title.strip("# ") or "the top", ", ".join(files) or "none"))

for n in passes:
    if n not in fails: print("PASS " + n)
for n, why in fails.items(): print("FAIL %s: %s" % (n, why))
names = {n for n in list(passes) + list(fails) if n.startswith(("tour_cite:", "tour_name:"))}
cited = len(names)
print("# %d code names checked (file, name), %d paths and file names" % (cited, len(paths) + len(bare)))
if cited < 50: print("FAIL tour_names_found: only %d code names found in %s" % (cited, page))
sys.exit(1 if fails or cited < 50 else 0)
PY

if [ ! -f "$tour" ]; then
  fail tour_exists "$tour is missing"
else
  python3 "$tmp/check.py" "$tour" . || fails=$((fails + 1))

  # the check itself: each planted mistake must fail, naming it
  plant() { # plant NAME LINE EXPECTED-FAIL-PREFIX
    { cat "$tour"; printf '\n## Planted\n\n%s\n' "$2"; } >"$tmp/planted.md"
    out=$(python3 "$tmp/check.py" "$tmp/planted.md" . 2>&1); rc=$?
    if [ $rc -ne 0 ] && grep -qF "FAIL $3" <<<"$out"; then pass "tour_check_catches_$1"
    else fail "tour_check_catches_$1" "exit $rc; no 'FAIL $3' line"; fi
  }
  plant renamed_function 'Read `runtime/fsdp.c: fsdp_gather_begin`.' 'tour_cite:runtime/fsdp.c:fsdp_gather_begin: not defined'
  plant mention_only 'Read `runtime/config.c: zipcclCodecParse`.' 'tour_cite:runtime/config.c:zipcclCodecParse: not defined'
  plant prototype_only 'Read `runtime/fsdp.h: fsdp_init`.' 'tour_cite:runtime/fsdp.h:fsdp_init: not defined'
  plant missing_file 'Read `runtime/fsdp_old.c: fsdp_init`.' 'tour_cite:runtime/fsdp_old.c: no such file'
  plant unattached_name 'Read `runtime/plan.c` and `sched_hooks`.' 'tour_name:sched_hooks: defined in none'
  plant missing_path 'See docs/TOURS.md.' 'tour_path:docs/TOURS.md: no such file'
  plant missing_bare_file 'See sched.c.' 'tour_file:sched.c: no file of that name'

  # and a rename on the code's side: fsdp.c's gather start under a new name
  sed 's/^void fsdp_gather_start(/void fsdp_gather_begin(/' runtime/fsdp.c >"$tmp/fsdp.c"
  out=$(python3 "$tmp/check.py" "$tour" . "runtime/fsdp.c=$tmp/fsdp.c" 2>&1); rc=$?
  want='FAIL tour_cite:runtime/fsdp.c:fsdp_gather_start: not defined'
  if ! grep -q 'fsdp_gather_start' "$tour"; then fail tour_check_catches_code_rename "the tour no longer cites fsdp_gather_start; plant another"
  elif [ $rc -ne 0 ] && grep -qF "$want" <<<"$out"; then pass tour_check_catches_code_rename
  else fail tour_check_catches_code_rename "exit $rc; no '$want' line"; fi
fi
exit $((fails > 0))
