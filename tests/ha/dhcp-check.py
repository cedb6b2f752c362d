#!/usr/bin/env python3
"""The DHCP storm's verdict (tests/ha/e2e.sh): every ACK the appliances sent,
read from a capture, against the leases etcd holds.

    dhcp-check.py CAPTURE.pcap LEASES.json [--servers A,B] [--net 10.80.]

CAPTURE: tcpdump -w of the servers' replies (Ethernet). LEASES: `etcdctl get
--prefix <prefix>dhcp/leases/ -w json`. Checks, each printed with its count:
  - no address ACKed to two clients, no client ACKed two addresses (the
    clients' view: what went on the wire);
  - every ACKed (client, address) is in etcd, held by that client;
  - no address held by two clients in etcd (one key per address: a lease
    whose MAC appears under two addresses is a duplicate).
Prints a JSON summary line ("summary {...}") and exits 1 on any violation.
Standard library only.
"""
import base64
import collections
import json
import struct
import sys


def packets(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = struct.unpack("<I", data[:4])[0]
    if magic in (0xA1B2C3D4, 0xA1B23C4D):
        endian = "<"
    elif magic in (0xD4C3B2A1, 0x4D3CB2A1):
        endian = ">"
    else:
        sys.exit(f"{path}: not a pcap file")
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    if linktype != 1:
        sys.exit(f"{path}: link type {linktype}, want Ethernet (1)")
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack(endian + "IIII", data[off:off + 16])
        off += 16
        yield sec + frac / 1e6, data[off:off + incl]
        off += incl


def dhcp_replies(path):
    """(time, source IP, message type, chaddr, yiaddr) of each BOOTREPLY."""
    for ts, frame in packets(path):
        if len(frame) < 14:
            continue
        eth = struct.unpack("!H", frame[12:14])[0]
        p = frame[14:]
        if eth == 0x8100:  # VLAN tag
            eth = struct.unpack("!H", p[2:4])[0]
            p = p[4:]
        if eth != 0x0800 or len(p) < 20 or p[9] != 17:
            continue
        ihl = (p[0] & 0x0F) * 4
        src = ".".join(str(b) for b in p[12:16])
        udp = p[ihl:]
        if len(udp) < 8 or struct.unpack("!H", udp[0:2])[0] != 67:
            continue
        b = udp[8:]
        if len(b) < 240 or b[0] != 2 or b[236:240] != b"\x63\x82\x53\x63":
            continue
        yiaddr = ".".join(str(x) for x in b[16:20])
        chaddr = ":".join(f"{x:02x}" for x in b[28:34])
        mtype = None
        i = 240
        while i < len(b):
            code = b[i]
            if code == 0:
                i += 1
                continue
            if code == 255 or i + 1 >= len(b):
                break
            ln = b[i + 1]
            if code == 53 and ln >= 1:
                mtype = b[i + 2]
            i += 2 + ln
        yield ts, src, mtype, chaddr, yiaddr


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    pcap, leases_json = args[0], args[1]
    net = "10.80."
    if "--net" in args:
        net = args[args.index("--net") + 1]
    acks = []  # (time, server, mac, ip)
    offers = 0
    naks = 0
    for ts, src, mtype, mac, ip in dhcp_replies(pcap):
        if mtype == 5 and ip.startswith(net):
            acks.append((ts, src, mac, ip))
        elif mtype == 2:
            offers += 1
        elif mtype == 6:
            naks += 1
    by_ip = collections.defaultdict(set)
    by_mac = collections.defaultdict(set)
    per_server = collections.Counter()
    for _, src, mac, ip in acks:
        by_ip[ip].add(mac)
        by_mac[mac].add(ip)
        per_server[src] += 1
    bad = []
    two_clients = {ip: sorted(m) for ip, m in by_ip.items() if len(m) > 1}
    two_addrs = {mac: sorted(i) for mac, i in by_mac.items() if len(i) > 1}
    if two_clients:
        bad.append(f"{len(two_clients)} addresses ACKed to two clients, e.g. {list(two_clients.items())[:3]}")
    if two_addrs:
        bad.append(f"{len(two_addrs)} clients ACKed two addresses, e.g. {list(two_addrs.items())[:3]}")

    with open(leases_json) as f:
        doc = json.load(f)
    held = {}
    for kv in doc.get("kvs", []):
        key = base64.b64decode(kv["key"]).decode()
        v = json.loads(base64.b64decode(kv["value"]))
        ip = key.rsplit("/", 1)[-1]
        if v.get("ip") != ip:
            bad.append(f"{key}: holds a lease for {v.get('ip')}")
        held[ip] = v
    etcd_macs = collections.defaultdict(list)
    for ip, v in held.items():
        if v.get("state", "active") == "active" and ip.startswith(net):
            etcd_macs[v["mac"].lower()].append(ip)
    dup_in_etcd = {m: ips for m, ips in etcd_macs.items() if len(ips) > 1}
    if dup_in_etcd:
        bad.append(f"{len(dup_in_etcd)} clients hold two addresses in etcd, e.g. {list(dup_in_etcd.items())[:3]}")
    missing = []
    for mac, ips in by_mac.items():
        for ip in ips:
            v = held.get(ip)
            if v is None or v["mac"].lower() != mac or v.get("state", "active") != "active":
                missing.append((mac, ip, v))
    if missing:
        bad.append(f"{len(missing)} ACKed leases not in etcd as the client's, e.g. {missing[:3]}")
    first = {}
    last = {}
    for ts, src, _, _ in acks:
        first.setdefault(src, ts)
        last[src] = ts
    summary = {
        "acks": len(acks),
        "clients_acked": len(by_mac),
        "addresses_acked": len(by_ip),
        "offers": offers,
        "naks": naks,
        "acks_by_server": dict(per_server),
        "first_ack_by_server": first,
        "last_ack_by_server": last,
        "etcd_leases": len(held),
        "violations": bad,
    }
    print("summary " + json.dumps(summary, sort_keys=True))
    for b in bad:
        print("VIOLATION " + b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
