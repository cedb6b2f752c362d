#!/usr/bin/env python3
"""A copy of a site description with keys set, for a test (tests/lib/site.sh).

usage: site.py SRC OUT EDIT...

SRC's relative paths (host.stateDir, host.tftp.root, images.root,
ignition.dir, ignition.roles.*, cluster.installConfig, host.api.bmcFiles,
host.api.local.stateDir/ovmfCode/ovmfVars, host.store.etcd.tls.ca/cert/key,
and every `{file: PATH}` reference under host: API tokens, provider keys) are made
absolute against SRC's folder, as the daemons resolve them, so that OUT
works from any folder. (images.root left out is the site folder's `images`:
set it when the copy needs one.) Then each EDIT, in order:

  a.b.c=VALUE    set the key (maps on the way are made); VALUE is YAML:
                 2m, true, 10.77.0.5, {start: 10.77.0.100, end: 10.77.0.220}
  a.b.c+=VALUE   append VALUE to the list at a.b.c (made if missing)
  -a.b.c         delete the key (it must exist)

A path segment that is a number indexes a list; any other segment applied
to a list picks the item whose `name` is that segment (nodes.worker-0.ip).
An edit whose path does not lead anywhere is an error: nothing is written.
VALUE is read as YAML 1.1 (PyYAML): quote what must stay a string, as the
site files do: macs: ["52:54:00:12:34:56"] (unquoted it is a base-60
number), "[::]:8080", "on", "off", "yes", "no".
"""
import os
import sys

import yaml

PATHS = [
    ("host", "stateDir"), ("host", "tftp", "root"), ("images", "root"),
    ("ignition", "dir"), ("cluster", "installConfig"),
    ("host", "api", "bmcFiles"),
    ("host", "api", "local", "stateDir"), ("host", "api", "local", "ovmfCode"),
    ("host", "api", "local", "ovmfVars"),
    ("host", "store", "etcd", "tls", "ca"), ("host", "store", "etcd", "tls", "cert"),
    ("host", "store", "etcd", "tls", "key"),
]


class EditError(Exception):
    pass


def step(node, seg, path, make):
    if isinstance(node, list):
        if seg.isdigit():
            i = int(seg)
            if i >= len(node):
                raise EditError(f"{path}: index {i} past the list's {len(node)} items")
            return node, i
        for i, item in enumerate(node):
            if isinstance(item, dict) and item.get("name") == seg:
                return node, i
        raise EditError(f"{path}: no item named {seg!r} in the list")
    if isinstance(node, dict):
        if seg not in node:
            if not make:
                raise EditError(f"{path}: no key {seg!r}")
            node[seg] = {}
        return node, seg
    raise EditError(f"{path}: {seg!r} is below a scalar")


def walk(root, segs, make):
    """The container holding the last segment, and the last segment's key."""
    node = root
    path = ""
    for seg in segs[:-1]:
        path = f"{path}.{seg}" if path else seg
        parent, k = step(node, seg, path, make)
        node = parent[k]
    last = segs[-1]
    if isinstance(node, list):
        return step(node, last, ".".join(segs), make)
    if not isinstance(node, dict):
        raise EditError(f"{'.'.join(segs)}: below a scalar")
    return node, last


def absolute(site, base):
    def fix(container, key):
        v = container.get(key)
        if isinstance(v, str) and v and not os.path.isabs(v):
            container[key] = os.path.normpath(os.path.join(base, v))

    for p in PATHS:
        node = site
        for seg in p[:-1]:
            node = node.get(seg) if isinstance(node, dict) else None
        if isinstance(node, dict):
            fix(node, p[-1])
    roles = (site.get("ignition") or {}).get("roles")
    if isinstance(roles, dict):
        for r in list(roles):
            fix(roles, r)

    def file_refs(node):  # every {file: PATH} secret reference
        if isinstance(node, dict):
            if "file" in node and len(node) == 1:
                fix(node, "file")
            for v in node.values():
                file_refs(v)
        elif isinstance(node, list):
            for v in node:
                file_refs(v)

    # Under host only: a node's BMC password {file:} is a name inside
    # host.api.bmcFiles, not a path beside the site.
    file_refs(site.get("host"))


def apply(site, edit):
    if edit.startswith("-"):
        segs = edit[1:].split(".")
        parent, k = walk(site, segs, make=False)
        if isinstance(parent, dict) and k not in parent:
            raise EditError(f"{edit[1:]}: no such key to delete")
        del parent[k]
        return
    if "=" not in edit:
        raise EditError(f"{edit}: not KEY=VALUE, KEY+=VALUE or -KEY")
    key, value = edit.split("=", 1)
    append = key.endswith("+")
    key = key.rstrip("+")
    try:
        value = yaml.safe_load(value) if value != "" else ""
    except yaml.YAMLError as e:
        raise EditError(f"{key}: the value is not YAML ({str(e).splitlines()[0]}); quote it") from None
    parent, k = walk(site, key.split("."), make=True)
    if append:
        if isinstance(parent, dict) and not isinstance(parent.get(k), list):
            if parent.get(k) not in (None, {}):
                raise EditError(f"{key}: not a list")
            parent[k] = []
        parent[k].append(value)
    else:
        parent[k] = value


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, out, edits = argv[1], argv[2], argv[3:]
    with open(src) as f:
        site = yaml.safe_load(f)
    absolute(site, os.path.dirname(os.path.abspath(src)))
    try:
        for e in edits:
            apply(site, e)
    except EditError as e:
        print(f"lab_site: {src}: {e}", file=sys.stderr)
        return 1
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        yaml.safe_dump(site, f, sort_keys=False, default_flow_style=None, width=1000)
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
