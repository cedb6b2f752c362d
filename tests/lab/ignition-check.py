#!/usr/bin/env python3
"""Checks what the real Ignition client wrote in the lab guest against the
node's config as bootd renders it.

Usage: ignition-check.py SERIAL_LOG EXPECTED_IGN [MERGED_IGN...]

SERIAL_LOG holds the guest's markers (tests/lab/guest.sh):
  LAB-IGNITION-CLIENT fetch=<rc> files=<rc>
  LAB-FILE <path> sha256=<hex>
EXPECTED_IGN is `bootd render ignition NODE`. Every storage.files entry with
contents (data: URLs) and every systemd unit with contents must have been
written with exactly those bytes; both stages must have exited 0. Each
MERGED_IGN is a config the node's merges in (a machine-config server's role
config): its files must have been written too, a later config's file
winning over an earlier one's at the same path, as Ignition merges. Prints
one line per checked file; exits 1 naming every difference.
"""
import base64
import hashlib
import json
import re
import sys
import urllib.parse


def data_url(src):
    head, _, body = src.partition(",")
    if not head.startswith("data:"):
        return None
    if head.endswith(";base64"):
        return base64.b64decode(body)
    return urllib.parse.unquote_to_bytes(body)


def main():
    serial, configs = sys.argv[1], sys.argv[2:]
    text = open(serial, "rb").read().decode("utf-8", "replace").replace("\r", "")
    status = re.search(r"^LAB-IGNITION-CLIENT fetch=(\S+) files=(\S+)", text, re.M)
    if not status:
        sys.exit("no LAB-IGNITION-CLIENT line: the real client did not run")
    problems = []
    if status.group(1) != "0" or status.group(2) != "0":
        logs = re.findall(r"^LAB-IGNITION-CLIENT-LOG (.*)$", text, re.M)
        sys.exit(f"the real client failed: fetch={status.group(1)} files={status.group(2)}; last log lines: {' | '.join(logs)}")
    wrote = dict(re.findall(r"^LAB-FILE (\S+) sha256=([0-9a-f]{64})$", text, re.M))
    want = {}
    for expected in configs:
        cfg = json.load(open(expected))
        for f in cfg.get("storage", {}).get("files", []):
            src = (f.get("contents") or {}).get("source")
            if src is not None:
                want[f["path"]] = data_url(src)
        for u in cfg.get("systemd", {}).get("units", []):
            if "contents" in u:
                want["/etc/systemd/system/" + u["name"]] = u["contents"].encode()
    if "/etc/hostname" not in want:
        problems.append("the rendered config has no /etc/hostname")
    for path, body in sorted(want.items()):
        sha = hashlib.sha256(body).hexdigest()
        got = wrote.get(path)
        if got is None:
            problems.append(f"{path}: not written")
        elif got != sha:
            problems.append(f"{path}: sha256 {got}, want {sha}")
        else:
            print(f"ok {path} ({len(body)} bytes)")
    if problems:
        sys.exit("; ".join(problems))
    print(f"real Ignition client: fetch and files stages passed; {len(want)} files as rendered ({len(wrote)} written in all)")


if __name__ == "__main__":
    main()
