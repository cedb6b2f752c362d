#!/usr/bin/env python3
"""Lists import cycles between the modules of each crate in the workspace.

Usage: tests/tools/module-cycles.py [CRATE_DIR ...]   (default: every workspace member)

A module is a source file (`src/http.rs` is `http`, `src/v4/core.rs` is
`v4::core`, `src/lib.rs` the crate root). Module A imports module B when
A's code names B: `use crate::b::...`, `crate::b::x` in code, `super::...`
resolved from A, or `b::...` for a child module declared in A. Test code
(from a line `#[cfg(test)]` on) and comments are left out. A cycle is a
strongly connected component of two or more modules. Exits 1 when there is
any, listing them.

A module's use of its ancestors (`super::X` in `providers/equinix.rs` naming
what `providers/mod.rs` defines for its providers; `crate::App` from any
module) is containment, not an import: the ancestor declares the module, and
Rust's own layout puts shared items there. Those edges are left out; every
other edge counts, so two sibling modules that name each other, or a parent
and a child each through a third module, are a cycle.
"""
import os
import re
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def modules(src):
    """file path -> module path (tuple)"""
    out = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, src)[:-3].split(os.sep)
            if rel[0] == "bin":
                continue
            if rel[-1] in ("lib", "main", "mod"):
                rel = rel[:-1]
            out[p] = tuple(rel)
    return out


def code_of(path):
    text = open(path, encoding="utf-8").read()
    lines = []
    for line in text.splitlines():
        if line.strip().startswith("#[cfg(test)]"):
            break
        line = re.sub(r"//.*", "", line)
        lines.append(line)
    return "\n".join(lines)


def resolve(mods, start, parts):
    """The longest module path that `parts` names, from `start`."""
    best = None
    for n in range(1, len(parts) + 1):
        cand = tuple(parts[:n])
        if cand in mods:
            best = cand
    return best


def edges_of(path, me, known):
    code = code_of(path)
    out = set()
    # use-trees are flattened crudely: every `crate::a::b` or `super::x` prefix.
    for m in re.finditer(r"\b(crate|super)((?:::\w+)+)", code):
        head, rest = m.group(1), [p for p in m.group(2).split("::") if p]
        if head == "crate":
            base = []
        else:
            base = list(me[:-1])
            while rest and rest[0] == "super":
                base = base[:-1]
                rest = rest[1:]
        target = resolve(known, base, base + rest)
        if target is None:
            target = tuple(base)
        if target != me:
            out.add(target)
    # `use super::{a, b}` and `use crate::{a, b}` groups
    for m in re.finditer(r"\b(crate|super)::\{([^}]*)\}", code):
        base = [] if m.group(1) == "crate" else list(me[:-1])
        for item in m.group(2).split(","):
            item = item.strip().split(" as ")[0]
            if not item or item == "self":
                continue
            target = resolve(known, base, base + item.split("::")) or tuple(base)
            if target != me:
                out.add(target)
    # children named by their own name from this module: `child::x`
    for child in [k for k in known if len(k) == len(me) + 1 and k[: len(me)] == me]:
        if re.search(r"(?<![:\w])" + re.escape(child[-1]) + r"::", code):
            out.add(child)
    return out


def sccs(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            strong(v)
    return out


def crate_dirs():
    cargo = tomllib.load(open(os.path.join(ROOT, "Cargo.toml"), "rb"))
    return [os.path.join(ROOT, m) for m in cargo["workspace"]["members"]]


def name(m):
    return "::".join(m) if m else "(crate root)"


def main():
    dirs = sys.argv[1:] or crate_dirs()
    bad = 0
    for d in dirs:
        src = os.path.join(d, "src")
        mods = modules(src)
        known = set(mods.values())
        graph = {m: {t for t in edges_of(p, m, known) & known if m[: len(t)] != t} for p, m in mods.items()}
        for comp in sccs(graph):
            if len(comp) > 1:
                bad += 1
                print(f"{os.path.basename(d)}: cycle: {', '.join(sorted(name(c) for c in comp))}")
                for a in sorted(comp):
                    for b in sorted(graph[a] & set(comp)):
                        print(f"    {name(a)} -> {name(b)}")
    if bad:
        sys.exit(1)
    print(f"no module import cycles in {len(dirs)} crates")


if __name__ == "__main__":
    main()
