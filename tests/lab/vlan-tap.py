#!/usr/bin/env python3
"""An 802.1Q VLAN sub-interface in user space, for a host kernel without
8021q (the lab's: no VLAN devices, no bridge VLAN filtering, no tc vlan
action), used by tests/lab/bond-vlan.sh.

usage: vlan-tap.py TRUNK ACCESS VID

TRUNK and ACCESS are existing tap devices (ip tuntap add ... mode tap):
TRUNK a port of the lab bridge, which forwards tagged frames like any
others; ACCESS the host's interface on the VLAN, holding its address (the
script names it br0.<VID>). Frames arriving on TRUNK tagged VID lose the
tag and go out of ACCESS; frames the host sends on ACCESS get the tag and
go out of TRUNK. Everything else on TRUNK (untagged, other VLANs) is
dropped. One line per frame of the first 20 each way (ethertype, sizes),
then counts every 10 s, on stdout. Stops on SIGTERM.
"""
import fcntl
import os
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000


def open_tap(name):
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


def describe(frame):
    et = struct.unpack("!H", frame[12:14])[0]
    kind = {0x0800: "IPv4", 0x0806: "ARP", 0x86DD: "IPv6", 0x8100: "802.1Q"}.get(et, hex(et))
    return f"{frame[6:12].hex(':')} > {frame[0:6].hex(':')} {kind} {len(frame)} bytes"


def main(argv):
    if len(argv) != 4 or not argv[3].isdigit() or not 1 <= int(argv[3]) <= 4094:
        print(__doc__, file=sys.stderr)
        return 2
    trunk, access, vid = open_tap(argv[1]), open_tap(argv[2]), int(argv[3])
    tag = struct.pack("!HH", 0x8100, vid)
    stats = {"from-trunk": 0, "to-trunk": 0, "dropped": 0}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    last = time.monotonic()
    print(f"vlan-tap: {argv[1]} (trunk) <-> {argv[2]} (VLAN {vid})", flush=True)
    try:
        while True:
            ready, _, _ = select.select([trunk, access], [], [], 10)
            for fd in ready:
                frame = os.read(fd, 65536)
                if len(frame) < 14:
                    continue
                if fd == trunk:
                    et, tci = struct.unpack("!HH", frame[12:16]) if len(frame) >= 18 else (0, 0)
                    if et != 0x8100 or tci & 0x0FFF != vid:
                        stats["dropped"] += 1
                        continue
                    out = frame[:12] + frame[16:]
                    os.write(access, out)
                    stats["from-trunk"] += 1
                    if stats["from-trunk"] <= 20:
                        print(f"vlan-tap: trunk -> {argv[2]}: VLAN {vid} tag removed: {describe(out)}", flush=True)
                else:
                    out = frame[:12] + tag + frame[12:]
                    os.write(trunk, out)
                    stats["to-trunk"] += 1
                    if stats["to-trunk"] <= 20:
                        print(f"vlan-tap: {argv[2]} -> trunk: VLAN {vid} tag added: {describe(frame)}", flush=True)
            if time.monotonic() - last >= 10:
                last = time.monotonic()
                print(f"vlan-tap: counts {stats}", flush=True)
    finally:
        print(f"vlan-tap: counts {stats}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
