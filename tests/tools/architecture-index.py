#!/usr/bin/env python3
"""docs/ARCHITECTURE.md names files, and what in them, that exist.

Usage: tests/tools/architecture-index.py [PAGE]   (default: docs/ARCHITECTURE.md)

The whole page is read except its fenced code blocks: every table row of the
"Index: idea -> file" and every prose paragraph. In it:

- A path is a backticked span with a `/`, no space, whose first segment is a
  top-level entry of the repository (`site/src/wire.rs`, `etcd/src/`,
  `tests/lab/`). It must name a file, or a directory holding files, in the
  working tree (tracked, or new and not ignored). A `*`, `?` or `[`, or a
  `<placeholder>` segment (`fuzz/corpus/<target>/`), makes it a glob that
  must match at least one file. URLs (`https://...`), commands (`cargo tree
  -p bootd`), keys (`host.api.acme`), absolute paths (`/boot/`) and paths
  from a placeholder (`<stateDir>/nodes.yaml`) are not paths: not checked.
- The items of a path are the backticked spans inside the parentheses that
  follow it directly: `dhcp/src/journal.rs` (`writer`, `append`).
  A row may name several paths, each with its own parentheses; a path inside
  another path's parentheses is a path of its own, not an item.
  In a Rust file an item is a definition: `name` or `name()` is a `fn`,
  `struct`, `enum`, `union`, `trait`, `type`, `const`, `static` or `mod` of
  that name, `name!` a `macro_rules!`; `Type::b` is a `fn b` (or `const b`)
  in a file that names `Type`, or a field or variant `b` declared in
  `struct`/`enum Type`; `module::path::name` is a definition of `name`.
  Definitions in `//` comments do not count.
  After a directory an item with a `.` or a trailing `/` is an entry of the
  directory (`controller/src/store/` (`sqlite.rs`)), any other a definition in
  a Rust file under it. In any other file an item is a plain occurrence of
  the word. Spans with a space (a command, a phrase) are not items.

Prints one line per problem (the page's line, the row or section, what is
missing) and exits 1 if any; otherwise a one-line summary.
"""
import fnmatch
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = "docs/ARCHITECTURE.md"

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
ITEM = re.compile(rf"^(?:{IDENT}::)*{IDENT}(?:!|\(\))?$")
ENTRY = re.compile(r"^[\w.+-]+/?$")
DEF_KINDS = r"(?:fn|struct|enum|union|trait|type|const|static(?:\s+mut)?|mod)"


def repo_files():
    """Files in the working tree: tracked ones still present, and new ones
    not ignored (so a page edited beside a new file is checked as it is)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()
    return sorted({f for f in out if os.path.isfile(os.path.join(ROOT, f))})


class Repo:
    def __init__(self, files):
        self.files = files
        self.fileset = set(files)
        self.dirs = set()
        for f in files:
            parts = f.split("/")
            for n in range(1, len(parts)):
                self.dirs.add("/".join(parts[:n]))
        self.top = {f.split("/")[0] for f in files}
        self.texts = {}

    def is_path(self, span):
        if "/" not in span or re.search(r"\s", span):
            return False
        return span.split("/")[0] in self.top

    def resolve(self, path):
        """(kind, files): kind is "file", "dir", "glob" or None (missing)."""
        path = re.sub(r"<[^<>/]*>", "*", path.split("#")[0])
        if any(c in path for c in "*?["):
            pat = path.rstrip("/")
            hits = [f for f in self.files
                    if fnmatch.fnmatchcase(f, pat) or fnmatch.fnmatchcase(f, pat + "/*")]
            return ("glob", hits) if hits else (None, [])
        p = path.rstrip("/")
        if not path.endswith("/") and p in self.fileset:
            return "file", [p]
        if p in self.dirs:
            return "dir", [f for f in self.files if f.startswith(p + "/")]
        return None, []

    def text(self, f):
        if f not in self.texts:
            try:
                self.texts[f] = open(os.path.join(ROOT, f), encoding="utf-8").read()
            except UnicodeDecodeError:
                self.texts[f] = ""
        return self.texts[f]

    def rust_code(self, f):
        # Line comments out, so a `fn x` in a comment is no definition.
        return "\n".join(re.sub(r"//.*", "", line) for line in self.text(f).splitlines())


def defines(code, name, kinds=DEF_KINDS):
    if re.search(rf"\b{kinds}\s+{re.escape(name)}\b", code):
        return True
    return kinds == DEF_KINDS and re.search(rf"\bmacro_rules!\s*{re.escape(name)}\b", code) is not None


def member(code, owner, name):
    """`name` is a field or variant declared in the body of `struct owner`
    or `enum owner` (a struct's `boot_kind: fn(..)`, an enum's `Prepared`)."""
    m = re.search(rf"\b(?:struct|enum|union)\s+{re.escape(owner)}\b[^{{;]*\{{", code)
    if not m:
        return False
    depth, i = 1, m.end()
    while i < len(code) and depth:
        depth += {"{": 1, "}": -1}.get(code[i], 0)
        i += 1
    body = code[m.end():i - 1]
    # Only the body's own level: nested braces (a variant's fields) are left out.
    top, depth = [], 0
    for c in body:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif depth == 0:
            top.append(c)
    top = "".join(top)
    # One per line, as rustfmt lays them out: `pub name: T,`, `Name,`, `Name(T)`.
    return re.search(rf"^\s*(?:pub(?:\([^)]*\))?\s+)?{re.escape(name)}\s*(?::(?!:)|[,({{=]|$)",
                     top, re.M) is not None


def item_problem(repo, path, kind, files, item):
    """None when `item` is present in what `path` names, else what is missing."""
    if kind == "dir" and ("." in item or item.endswith("/")) and ENTRY.match(item):
        entry = path.rstrip("/") + "/" + item.rstrip("/")
        if entry in repo.fileset or entry in repo.dirs:
            return None
        return f"{path} has no entry `{item}`"
    rust = [f for f in files if f.endswith(".rs")]
    if kind == "file" and not path.endswith(".rs"):
        word = item.removesuffix("()")
        if re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", repo.text(files[0])):
            return None
        return f"{path} never mentions `{item}`"
    if not ITEM.match(item):
        return f"`{item}` after {path} is not a name this check understands (a fn, type, `Type::method`, `mod::name`, `macro!`)"
    name = item.rstrip("!").removesuffix("()")
    parts = name.split("::")
    for f in rust:
        code = repo.rust_code(f)
        if len(parts) >= 2 and parts[-2][0].isupper():
            if defines(code, parts[-1], "(?:fn|const)") and re.search(rf"\b{parts[-2]}\b", code):
                return None
            if member(code, parts[-2], parts[-1]):
                return None
        elif item.endswith("!"):
            if re.search(rf"\bmacro_rules!\s*{re.escape(parts[-1])}\b", code):
                return None
        elif defines(code, parts[-1]):
            return None
    where = {"file": path, "dir": f"any Rust file under {path}"}.get(kind, f"any Rust file matching {path}")
    if len(parts) >= 2 and parts[-2][0].isupper():
        return (f"{where} has no `fn {parts[-1]}` beside `{parts[-2]}`, nor a field, "
                f"variant or const `{parts[-1]}` of it (for `{item}`)")
    return f"{where} defines no `{item}`"


def blocks(lines):
    """(first line number, label, text) for each table row and prose paragraph
    outside fenced code blocks."""
    out, fenced, heading = [], False, "(top)"
    para, start = [], 0

    def flush():
        nonlocal para
        if para:
            out.append((start, heading, " ".join(para)))
        para = []

    for n, line in enumerate(lines, 1):
        s = line.strip()
        if s.startswith("```"):
            flush()
            fenced = not fenced
            continue
        if fenced:
            continue
        if s.startswith("#"):
            flush()
            heading = s.lstrip("#").strip()
            continue
        if s.startswith("|"):
            flush()
            cells = [c.strip() for c in s.strip("|").split("|")]
            if all(re.fullmatch(r":?-+:?", c) for c in cells if c):
                continue
            idea = cells[0] if len(cells[0]) <= 60 else cells[0][:59].rstrip() + "…"
            out.append((n, f'{heading}: "{idea}"', s))
            continue
        if not s:
            flush()
            continue
        if not para:
            start = n
        para.append(s)
    flush()
    return out


def scan_paths(text, repo):
    """("path", span, None) for a path; ("item", span, owner) for a span in
    the parentheses right after the path `owner` (or nested inside them)."""
    groups = []
    last, last_end = None, -1
    i = 0
    while i < len(text):
        c = text[i]
        if c == "`":
            j = text.find("`", i + 1)
            if j < 0:
                break
            span = text[i + 1:j]
            if repo.is_path(span):
                yield ("path", span, None)
                last, last_end = span, j + 1
            else:
                owner = groups[-1] if groups else None
                if owner is not None and not re.search(r"\s", span):
                    yield ("item", span, owner)
                last = None
            i = j + 1
            continue
        if c == "(":
            if last is not None and text[last_end:i].strip() == "":
                groups.append(last)
            else:
                groups.append(groups[-1] if groups else None)
        elif c == ")" and groups:
            groups.pop()
        i += 1


def main():
    page = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, PAGE)
    repo = Repo(repo_files())
    lines = open(page, encoding="utf-8").read().splitlines()
    problems, paths, items = [], set(), 0
    shown = os.path.relpath(page, ROOT) if os.path.abspath(page).startswith(ROOT) else page
    for n, label, text in blocks(lines):
        resolved = {}
        for kind, span, owner in scan_paths(text, repo):
            if kind == "path":
                paths.add(span)
                k, files = repo.resolve(span)
                resolved[span] = (k, files)
                if k is None:
                    what = "matches no file" if any(ch in span for ch in "*?[") else "does not exist"
                    problems.append(f"{shown}:{n}: {label}: `{span}` {what}")
            elif kind == "item":
                k, files = resolved.get(owner) or repo.resolve(owner)
                if k is None:
                    continue  # the missing path is reported once, above
                items += 1
                why = item_problem(repo, owner, k, files, span)
                if why:
                    problems.append(f"{shown}:{n}: {label}: {why}")
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print(f"architecture index: {len(paths)} paths, {items} items, all present")


if __name__ == "__main__":
    main()
