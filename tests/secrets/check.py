#!/usr/bin/env python3
"""Greps every file below the given roots for secrets (tests/secrets/e2e.sh).

    check.py --targets TARGETS.json [--exclusions EXCL.json] ROOT...
    check.py --targets TARGETS.json --self-test SCRATCH_DIR

TARGETS.json: {"literal": {NAME: VALUE, ...}, "regex": {NAME: [PATTERN, EXAMPLE], ...}}
- a literal is looked for as it is and, when it is 12 characters or more, as
  standard and URL-safe base64 at each of the three byte alignments (what a
  secret looks like inside a data: URL, a userdata or an ISO);
- a regex (bytes, Python syntax) catches a secret of a known shape that was
  not collected (an Ignition token); EXAMPLE is a value it must match.
EXCL.json: [{"path": GLOB, "targets": [NAME or GLOB], "line": REGEX or null,
"why": TEXT}, ...]: a hit in a file whose path relative to its root matches
GLOB (fnmatch, "*" crosses "/"), of a target whose name matches one of those,
on a line that matches REGEX when given (searched in the line with every
secret replaced by <NAME>), is allowed. Every rule is printed with its reason and the
number of hits it allowed.

Every other hit is printed as "LEAK <name> <root>/<path>:<line>: <excerpt>"
with every secret in the excerpt replaced by <NAME>; exit 1 when there is
one, 0 when there is none, 2 on a usage error. Files are read as bytes in
full (binary ones too: SQLite, qcow2, ISO images).

--self-test plants, in SCRATCH_DIR, one file per target (its value, and a
base64 form of each literal long enough), plus one file that an exclusion
rule covers, scans it, and exits 0 only if every target was reported and the
excluded hit was not: the check proves it would catch each leak.
"""
import argparse
import base64
import fnmatch
import json
import os
import re
import sys

CHUNK = 32 << 20
OVERLAP = 4096


def b64_forms(value):
    """The parts of base64(value) that do not depend on the bytes around it."""
    out = set()
    raw = value.encode()
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + raw).decode()
        start = {0: 0, 1: 2, 2: 3}[k]
        n = k + len(raw)
        end = len(enc) - (4 if n % 3 else 0)
        part = enc[start:end]
        if len(part) >= 12:
            out.add(part)
            out.add(part.replace("+", "-").replace("/", "_"))
    return out


def compile_targets(t):
    """([(name, literal bytes)], [(name, regex)], one regex of all, for excerpts)."""
    lits, rxs, pats = [], [], []
    for name, value in sorted(t.get("literal", {}).items()):
        if len(value) < 8:
            raise SystemExit(f"check.py: target {name} is shorter than 8 characters")
        forms = [value] + (sorted(b64_forms(value)) if len(value) >= 12 else [])
        for form in forms:
            lits.append((name, form.encode()))
            pats.append((name, re.escape(form.encode())))
    for name, (pattern, _example) in sorted(t.get("regex", {}).items()):
        rxs.append((name, re.compile(pattern.encode())))
        pats.append((name, pattern.encode()))
    names = [n for n, _ in pats]
    every = re.compile(b"|".join(b"(?P<g%d>%s)" % (i, p) for i, (_, p) in enumerate(pats)))
    return (lits, rxs, names, every)


def redact(line, targets):
    _, _, names, every = targets

    def sub(m):
        return b"<" + names[int(m.lastgroup[1:])].encode() + b">"
    return every.sub(sub, line)


def hits_in(buf, targets):
    """(start, end, name) of every hit in buf: bytes.find for the literals
    (one regex alternation of them all is a hundred times slower)."""
    lits, rxs, _, _ = targets
    out = []
    for name, lit in lits:
        i = buf.find(lit)
        while i >= 0:
            out.append((i, i + len(lit), name))
            i = buf.find(lit, i + 1)
    for name, rx in rxs:
        out.extend((m.start(), m.end(), name) for m in rx.finditer(buf))
    return sorted(out)


def printable(b):
    return "".join(c if c.isprintable() else "." for c in b.decode("utf-8", "replace"))


def scan_file(path, targets):
    """Yields (name, line number, redacted excerpt, redacted line) for every hit."""
    try:
        f = open(path, "rb")
    except OSError:
        return
    with f:
        offset_lines = 1  # the line number at the start of buf
        buf = b""
        while True:
            data = f.read(CHUNK)
            buf += data
            # A hit that starts in the last OVERLAP bytes waits for the next
            # round, where it is whole.
            limit = len(buf) - OVERLAP if data else len(buf)
            for start, end, name in hits_in(buf, targets):
                if start >= limit:
                    continue
                line_no = offset_lines + buf.count(b"\n", 0, start)
                ls = buf.rfind(b"\n", 0, start) + 1
                le = buf.find(b"\n", end)
                le = len(buf) if le < 0 else le
                yield name, line_no, printable(redact(buf[max(ls, start - 100):min(le, end + 100)], targets)), \
                    printable(redact(buf[ls:min(le, ls + 4096)], targets))
            if not data:
                break
            offset_lines += buf.count(b"\n", 0, max(limit, 0))
            buf = buf[max(limit, 0):]


def excluded(rules, rel, name, line):
    for i, r in enumerate(rules):
        if not fnmatch.fnmatch(rel, r["path"]):
            continue
        if not any(fnmatch.fnmatchcase(name, t) for t in r["targets"]):
            continue
        if r.get("line") and not re.search(r["line"], line):
            continue
        return i
    return None


def scan(roots, targets, rules):
    compiled = compile_targets(targets)
    leaks = []
    allowed = [0] * len(rules)
    files = 0
    size = 0
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for fn in sorted(filenames):
                p = os.path.join(dirpath, fn)
                if os.path.islink(p) or not os.path.isfile(p):
                    continue
                files += 1
                size += os.path.getsize(p)
                rel = os.path.relpath(p, root)
                for name, line_no, excerpt, line in scan_file(p, compiled):
                    i = excluded(rules, rel, name, line)
                    if i is None:
                        leaks.append((name, f"{p}:{line_no}", excerpt))
                    else:
                        allowed[i] += 1
    return leaks, allowed, files, size


def self_test(targets, scratch):
    os.makedirs(scratch, exist_ok=True)
    literal = targets.get("literal", {})
    regex = targets.get("regex", {})
    for name, value in literal.items():
        with open(os.path.join(scratch, f"planted-{name}.log"), "w") as f:
            f.write(f"INFO something happened value={value} and more\n")
        if len(value) >= 12:
            enc = base64.b64encode(b"x" + value.encode() + b"y").decode()
            with open(os.path.join(scratch, f"planted-{name}.b64"), "w") as f:
                f.write(f"data:;base64,{enc}\n")
    for name, (_p, example) in regex.items():
        with open(os.path.join(scratch, f"planted-{name}.json"), "w") as f:
            f.write(json.dumps({"url": f"http://h/ignition/n?token={example}"}) + "\n")
    some = sorted(literal)[0]
    os.makedirs(os.path.join(scratch, "allowed"), exist_ok=True)
    with open(os.path.join(scratch, "allowed", "store"), "w") as f:
        f.write(literal[some] + "\n")
    rules = [{"path": "allowed/*", "targets": [some], "line": None, "why": "self-test"}]
    leaks, allowed, _, _ = scan([scratch], targets, rules)
    found = {}
    for name, where, _ in leaks:
        found.setdefault(name, set()).add(os.path.basename(where.rsplit(":", 1)[0]))
    ok = True
    for name, value in literal.items():
        want = {f"planted-{name}.log"} | ({f"planted-{name}.b64"} if len(value) >= 12 else set())
        if not want <= found.get(name, set()):
            print(f"self-test: {name} not caught in {sorted(want - found.get(name, set()))}")
            ok = False
    for name in regex:
        if f"planted-{name}.json" not in found.get(name, set()):
            print(f"self-test: {name} (regex) not caught")
            ok = False
    if any("allowed" in w for _, w, _ in leaks) or allowed[0] != 1:
        print("self-test: the exclusion rule did not apply exactly once")
        ok = False
    for name, where, excerpt in leaks:
        for value in literal.values():
            if value in excerpt:
                print(f"self-test: an excerpt shows a secret ({where})")
                ok = False
    n = len(literal) + len(regex)
    print(f"self-test: {len(leaks)} planted hits of {n} targets reported"
          f"{', every one caught, the excluded one allowed, excerpts redacted' if ok else ''}")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", required=True)
    ap.add_argument("--exclusions")
    ap.add_argument("--self-test", metavar="SCRATCH_DIR")
    ap.add_argument("roots", nargs="*")
    a = ap.parse_args()
    with open(a.targets) as f:
        targets = json.load(f)
    for name, (pattern, example) in targets.get("regex", {}).items():
        if not re.search(pattern.encode(), example.encode()):
            print(f"check.py: regex {name} does not match its example", file=sys.stderr)
            return 2
    if a.self_test:
        return self_test(targets, a.self_test)
    if not a.roots:
        ap.error("no ROOT")
    rules = []
    if a.exclusions:
        with open(a.exclusions) as f:
            rules = json.load(f)
    leaks, allowed, files, size = scan(a.roots, targets, rules)
    print(f"check.py: {len(targets.get('literal', {}))} secrets and "
          f"{len(targets.get('regex', {}))} shapes in {files} files ({size >> 20} MiB)")
    for r, n in zip(rules, allowed):
        print(f"  allowed {n:5d}  {r['path']} [{', '.join(r['targets'])}]"
              f"{' line ~ ' + r['line'] if r.get('line') else ''}: {r['why']}")
    for name, where, excerpt in leaks:
        print(f"LEAK {name} {where}: {excerpt}")
    print(f"check.py: {len(leaks)} leak(s)")
    return 1 if leaks else 0


if __name__ == "__main__":
    sys.exit(main())
