#!/usr/bin/env python3
"""After an HA storm (bench/storm/run.sh, stacks bootd-ha*): what etcd and
the appliances' logs say, in one line, and exit 1 on a violation.

    ha-check.py --dhcp DHCP.json --spent SPENT.keys --prefix PREFIX LOG...

DHCP.json: `etcdctl get --prefix <prefix>dhcp/ -w json` (the leases,
`dhcp/leases/<address>`, and the clients' records, `dhcp/clients/<mac>`).
SPENT.keys: `etcdctl get --prefix <prefix>bootd/spent/ --keys-only`
(`bootd/spent/<expiry>/<nonce>`). LOG: each appliance's bootd log.
Checks:
  - no MAC holds two leases (a MAC under two addresses), no address is two
    MACs' (one key per address: by construction), every client record
    names a lease held by that MAC;
  - no token spent twice (each nonce once under bootd/spent/), no spent
    token presented again (`reason=token_reused` refused), and no node's
    Ignition served twice, whichever appliance served it;
  - how many Ignition configs each appliance served (both serve).
With --instances (the ECS fake's /_fake/instances, for the stacks whose
nodes are made through the API) and --nodes N: every node n00000..
has exactly one instance, and no instance is of another name. With --sums
(the storm's `name sha256` of each config received) and --want (each
node's Ignition as `bootd render ignition --each-to` writes it): every
config received is its node's, byte for byte.
Standard library only.
"""
import argparse
import base64
import collections
import json
import re
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dhcp", required=True)
    ap.add_argument("--spent", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--instances")
    ap.add_argument("--nodes", type=int, default=0)
    ap.add_argument("--sums")
    ap.add_argument("--want")
    ap.add_argument("logs", nargs="*")
    a = ap.parse_args()
    bad = []

    kvs = json.load(open(a.dhcp)).get("kvs", [])
    leases = {}   # address -> record
    clients = {}  # mac -> address (the client's record)
    for kv in kvs:
        key = base64.b64decode(kv["key"]).decode()
        rel = key[len(a.prefix):] if key.startswith(a.prefix) else key
        value = base64.b64decode(kv.get("value", "")).decode(errors="replace")
        if rel.startswith("dhcp/leases/"):
            try:
                leases[rel[len("dhcp/leases/"):]] = json.loads(value)
            except ValueError:
                bad.append(f"{key}: not JSON")
        elif rel.startswith("dhcp/clients/"):
            try:
                v = json.loads(value)
            except ValueError:
                v = value
            clients[rel[len("dhcp/clients/"):]] = v
    by_mac = collections.defaultdict(list)
    for addr, rec in leases.items():
        mac = rec.get("mac") or rec.get("client") or rec.get("hwaddr")
        if rec.get("state", "active") in ("active", "Active", "offered", "Offered", "bound"):
            by_mac[str(mac).lower()].append(addr)
    two = {m: v for m, v in by_mac.items() if len(v) > 1}
    if two:
        bad.append(f"MACs holding two leases: {len(two)} (e.g. {next(iter(two.items()))})")
    mismatch = 0
    for mac, v in clients.items():
        addr = v.get("ip") or v.get("address") if isinstance(v, dict) else v
        rec = leases.get(str(addr))
        if rec is None or str(rec.get("mac", "")).lower() != mac.lower():
            mismatch += 1
    if mismatch:
        bad.append(f"client records naming no lease of theirs: {mismatch}")

    nonces = collections.Counter()
    for line in open(a.spent):
        line = line.strip()
        if "/bootd/spent/" in line:
            nonces[line.rsplit("/", 1)[1]] += 1
    twice = sum(1 for c in nonces.values() if c > 1)
    if twice:
        bad.append(f"tokens spent twice: {twice}")

    served = collections.Counter()
    per_log = []
    reused = 0
    refused = collections.Counter()
    for path in a.logs:
        n = 0
        for line in open(path, errors="replace"):
            if "Ignition served" in line:
                m = re.search(r"node=(\S+)", line)
                served[m.group(1) if m else "?"] += 1
                n += 1
            elif "refused" in line and "reason=" in line:
                r = re.search(r"reason=(\S+)", line).group(1)
                refused[r] += 1
                reused += r == "token_reused"
        per_log.append(n)
    served_twice = sum(1 for c in served.values() if c > 1)
    if served_twice:
        bad.append(f"nodes whose Ignition was served twice: {served_twice}")
    if reused:
        bad.append(f"spent tokens presented again: {reused}")

    extra = ""
    if a.instances:
        per = collections.Counter(i.get("InstanceName") for i in json.load(open(a.instances)))
        want = {f"n{i:05d}" for i in range(a.nodes)}
        none = len(want - set(per))
        twice_made = sum(1 for n in want if per.get(n, 0) > 1)
        other = sum(c for n, c in per.items() if n not in want)
        if none or twice_made or other:
            bad.append(f"provider: nodes without an instance {none}, with two or more {twice_made}, instances of no node {other}")
        extra += (f"provider instances {sum(per.values())} for {a.nodes} nodes: none {none}, "
                  f"two or more {twice_made}, of no node {other}; ")
    if a.sums:
        import hashlib
        import os
        got = dict(line.split() for line in open(a.sums) if line.strip())
        wrong = missing = 0
        for name, sum_ in got.items():
            path = os.path.join(a.want, name + ".ign")
            if not os.path.exists(path):
                missing += 1
            elif hashlib.sha256(open(path, "rb").read()).hexdigest() != sum_:
                wrong += 1
        if wrong or missing:
            bad.append(f"Ignition received not the node's own: {wrong} (not rendered: {missing})")
        extra += f"Ignition received {len(got)}, checked against each node's own: {len(got) - wrong - missing} equal; "
    print(
        extra +
        f"leases in etcd {len(leases)}, client records {len(clients)}; MACs holding two leases {len(two)}, "
        f"client records not matching their lease {mismatch}; tokens spent {sum(nonces.values())} "
        f"({len(nonces)} nonces, {twice} spent twice); Ignition served {sum(served.values())} "
        f"(by appliance: {' + '.join(map(str, per_log))}; nodes served twice {served_twice}); "
        f"refusals {dict(refused) or 0}; " + ("VIOLATION: " + "; ".join(bad) if bad else "ok")
    )
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
