#!/usr/bin/env python3
"""Print the fields each Ignition 3.x spec added, from the published schemas.

Usage: tests/tools/ignition-spec-diff.py IGNITION_CHECKOUT

Reads config/v3_N/schema/ignition.json (N = 0, 1, ...) from a checkout of
coreos/ignition, walks each schema's properties into paths (`[]` for an array
item, `$ref`s and allOf/anyOf/oneOf followed) and prints, for each version,
the paths that are new against the one before, topmost only. This is how the
table in bootd/src/render/ignition/spec.rs was made; rerun it when a new spec
is stabilised and compare. Value-level changes (URL schemes, hash types,
mode bits) are not in the schemas: see the repository's
docs/migrating-configs.md.
"""
import json
import pathlib
import sys


def paths(schema):
    def ref(r):
        node = schema
        for part in r.lstrip("#/").split("/"):
            node = node[part]
        return node

    out = set()

    def walk(node, path, depth=0):
        if depth > 40:
            return
        while "$ref" in node:
            node = ref(node["$ref"])
        for k in ("allOf", "anyOf", "oneOf"):
            for sub in node.get(k, []):
                walk(sub, path, depth + 1)
        for key, sub in node.get("properties", {}).items():
            p = f"{path}.{key}"
            out.add(p)
            walk(sub, p, depth + 1)
        if "items" in node:
            walk(node["items"], path + "[]", depth + 1)

    walk(schema, "")
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = pathlib.Path(sys.argv[1]) / "config"
    versions = sorted(
        (d for d in root.glob("v3_*") if d.name[3:].isdigit()), key=lambda d: int(d.name[3:])
    )
    prev = None
    for d in versions:
        cur = paths(json.loads((d / "schema" / "ignition.json").read_text()))
        if prev is not None:
            new = sorted(cur - prev)
            top = [p for p in new if not any(p != q and p.startswith(q) and p[len(q)] in ".[" for q in new)]
            print(f"3.{d.name[3:]}.0:", *(top or ["(nothing new)"]), sep="\n  ")
            gone = sorted(prev - cur)
            if gone:
                print("  removed:", *gone, sep="\n    ")
        prev = cur


if __name__ == "__main__":
    main()
