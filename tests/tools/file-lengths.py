#!/usr/bin/env python3
"""Every Rust source file of the workspace's crates (src/, not tests/) has at
most 700 lines before its `#[cfg(test)]` module: a file that grows past it
holds more than one idea and is split. Prints the offenders; exits 1 if any."""
import pathlib
import subprocess
import sys

LIMIT = 700
root = pathlib.Path(__file__).resolve().parents[2]
files = subprocess.run(["git", "ls-files", "*.rs"], cwd=root, capture_output=True,
                       text=True, check=True).stdout.split()
bad = []
for f in files:
    parts = pathlib.PurePath(f).parts
    if "src" not in parts or "tests" in parts or parts[0] in ("fuzz", "target"):
        continue
    n = 0
    for line in (root / f).read_text().splitlines():
        if line.startswith("#[cfg(test)]"):
            break
        n += 1
    if n > LIMIT:
        bad.append((n, f))
for n, f in sorted(bad, reverse=True):
    print(f"{f}: {n} lines before its tests (at most {LIMIT})")
if bad:
    sys.exit(1)
print(f"every source file at most {LIMIT} lines before its tests ({len(files)} files)")
