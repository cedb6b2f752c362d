#!/usr/bin/env python3
"""Samples the process list of one network namespace for the secrets audit
(tests/secrets/e2e.sh): every 20 ms, each process whose network namespace is
NETNS (bootd, the VMs, the BMC emulators, the ipmitool and grub-mkrescue
bootd runs, the test's curl) has its command line and environment written
once per distinct content:

    OUT/cmdline.txt   <pid> <comm>: <argv joined by spaces>
    OUT/environ.txt   <pid> <comm> <NAME=value>      (one line per variable)

    procs.py --netns NAME --out DIR --until FILE --max-seconds N

Stops when FILE exists or after N seconds. Processes of other namespaces
are never read. Short-lived processes (ipmitool) are caught when they live
at least one period.
"""
import argparse
import os
import time


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--netns", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--until", required=True)
    ap.add_argument("--max-seconds", type=float, default=3600)
    a = ap.parse_args()
    ns = os.stat(f"/run/netns/{a.netns}")
    want = (ns.st_dev, ns.st_ino)
    os.makedirs(a.out, exist_ok=True)
    seen_cmd, seen_env = set(), set()
    end = time.monotonic() + a.max_seconds
    samples = 0
    with open(os.path.join(a.out, "cmdline.txt"), "ab") as cf, \
            open(os.path.join(a.out, "environ.txt"), "ab") as ef:
        while time.monotonic() < end and not os.path.exists(a.until):
            samples += 1
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    st = os.stat(f"/proc/{pid}/ns/net")
                except OSError:
                    continue
                # The namespace file is on nsfs: same device, same inode.
                if st.st_ino != want[1]:
                    continue
                comm = (read(f"/proc/{pid}/comm") or b"?").strip().replace(b" ", b"_")
                cmd = read(f"/proc/{pid}/cmdline")
                if cmd and (pid, cmd) not in seen_cmd:
                    seen_cmd.add((pid, cmd))
                    cf.write(b"%s %s: %s\n" % (pid.encode(), comm, cmd.rstrip(b"\0").replace(b"\0", b" ")))
                env = read(f"/proc/{pid}/environ")
                if env and (pid, env) not in seen_env:
                    seen_env.add((pid, env))
                    for var in env.rstrip(b"\0").split(b"\0"):
                        ef.write(b"%s %s %s\n" % (pid.encode(), comm, var.replace(b"\n", b" ")))
            cf.flush()
            ef.flush()
            time.sleep(0.02)
    with open(os.path.join(a.out, "samples.txt"), "w") as f:
        f.write(f"{samples} samples, {len(seen_cmd)} command lines, {len(seen_env)} environments\n")


if __name__ == "__main__":
    main()
