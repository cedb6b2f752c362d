#!/usr/bin/env python3
"""Prints a node's boot timeline from bootd (GET /status/node/NODE/timeline.json)
and checks it against what a network boot must show.

Usage: timeline-check.py TIMELINE_JSON --phases dhcp,script,... [--pcap PCAP --mac MAC]

Checks: the timeline says its phases are in order; the expected phases appear,
in that order (others may appear between them); the phase durations add up to
the timeline's total; no error in the current attempt. With --pcap (a capture
of br0 with DHCP and bootd's HTTP port): the wire-level time from the MAC's
first DHCP packet to the last "GET /ignition/" request is compared with the
timeline's first DHCP event and its last Ignition event: within 50 ms at each
end and in total.
Exit 0 when every check holds, 1 otherwise (reasons on stdout).
"""
import argparse
import json
import re
import subprocess
import sys

TOLERANCE = 0.050

ap = argparse.ArgumentParser()
ap.add_argument("timeline")
ap.add_argument("--phases", required=True)
ap.add_argument("--pcap")
ap.add_argument("--mac")
a = ap.parse_args()
t = json.load(open(a.timeline))
fails = []

print(f"timeline of {t['node']}: attempt {t['attempt']}, phase {t['phase']}, "
      f"{'in order' if t['inOrder'] else 'OUT OF ORDER'}, total {t['totalSeconds']:.3f} s")
for i, p in enumerate(t["phases"], 1):
    err = f"  error: {p['lastError']}" if p.get("lastError") else ""
    print(f"  {i}. {p['phase']:<15} +{(p['startUs'] - t['phases'][0]['startUs']) / 1e6:8.3f} s  {p['seconds']:8.3f} s{err}")

if not t["inOrder"]:
    fails.append("phases out of order")
got = [p["phase"] for p in t["phases"]]
want = a.phases.split(",")
it = iter(got)
if not all(w in it for w in want):
    fails.append(f"expected phases {want} in this order, got {got}")
total = sum(p["seconds"] for p in t["phases"])
if abs(total - t["totalSeconds"]) > 0.001:
    fails.append(f"durations add up to {total:.6f} s, total is {t['totalSeconds']:.6f} s")
cur = [e for e in t["events"] if e["attempt"] == t["attempt"]]
errors = [e for e in cur if e["error"]]
if errors:
    fails.append("errors in this attempt: " + "; ".join(f"{e['phase']} {e['detail']}" for e in errors))

if a.pcap:
    def stamps(expr, grep=None):
        out = subprocess.run(["tcpdump", "-r", a.pcap, "-tt", "-n", "-A", expr],
                             capture_output=True, text=True).stdout.splitlines()
        times, last = [], None
        for line in out:
            m = re.match(r"^(\d+\.\d+) ", line)
            if m:
                last = float(m.group(1))
                if grep is None:
                    times.append(last)
            elif grep and grep in line and last is not None:
                times.append(last)
        return times
    dhcp = stamps(f"udp dst port 67 and ether src {a.mac}")
    ign = stamps("tcp dst port 8080", "GET /ignition/")
    first_dhcp = min(e["atUs"] - e["tookUs"] for e in cur if e["phase"] == "dhcp") / 1e6 if cur else None
    last_ign = max((e["atUs"] for e in cur if e["phase"] == "ignition"), default=None)
    if not dhcp or not ign or first_dhcp is None or last_ign is None:
        fails.append(f"wire check impossible: {len(dhcp)} DHCP packets, {len(ign)} Ignition GETs on the wire")
    else:
        # The packet the timeline's first DHCP event is about: the nearest one
        # (earlier attempts' packets may be in the capture too).
        wire_start = min(dhcp, key=lambda d: abs(d - first_dhcp))
        wire_end = ign[-1]
        tl_total = last_ign / 1e6 - first_dhcp
        wire_total = wire_end - wire_start
        print(f"wire: first DHCP packet {wire_start:.6f}, last GET /ignition {wire_end:.6f}: {wire_total:.3f} s; "
              f"timeline: {tl_total:.3f} s (start {first_dhcp - wire_start:+.4f} s, end {last_ign / 1e6 - wire_end:+.4f} s)")
        if abs(first_dhcp - wire_start) > TOLERANCE:
            fails.append(f"first DHCP event {first_dhcp - wire_start:+.4f} s from the wire")
        if abs(last_ign / 1e6 - wire_end) > TOLERANCE:
            fails.append(f"last Ignition event {last_ign / 1e6 - wire_end:+.4f} s from the wire")
        if abs(tl_total - wire_total) > TOLERANCE:
            fails.append(f"timeline {tl_total:.4f} s vs wire {wire_total:.4f} s")

for f in fails:
    print(f"timeline check failed: {f}")
sys.exit(1 if fails else 0)
