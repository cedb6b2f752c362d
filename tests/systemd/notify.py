#!/usr/bin/env python3
"""sd_notify protocol test for one daemon, on its own NOTIFY_SOCKET.

Usage: notify.py --tcp PORT [--tcp PORT...] -- DAEMON ARGS...

Starts DAEMON with NOTIFY_SOCKET (and WATCHDOG_USEC=2 s) and checks:
  1. READY=1 arrives, and at that moment every --tcp PORT is listening
     (READY comes after the sockets are bound);
  2. WATCHDOG=1 arrives (at half the watchdog interval);
  3. on SIGHUP: RELOADING=1 with MONOTONIC_USEC, then READY=1;
  4. on SIGTERM: STOPPING=1, and the process exits 0 within 15 s.
Run it inside a private network namespace (tests/systemd/notify.sh does).
"""
import os, signal, socket, subprocess, sys, tempfile, time


def listening(port):
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for l in lines:
            f = l.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "0A":
                return True
    return False


def main():
    argv = sys.argv[1:]
    sep = argv.index("--")
    opts, cmd = argv[:sep], argv[sep + 1:]
    ports = [int(opts[i + 1]) for i, o in enumerate(opts) if o == "--tcp"]
    d = tempfile.mkdtemp()
    path = os.path.join(d, "notify")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(path)
    # As systemd's /run/systemd/notify: a daemon started as root that drops
    # to an unprivileged user (docs/bootd.md) still reaches it.
    os.chmod(d, 0o755)
    os.chmod(path, 0o777)
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="2000000")
    env.pop("WATCHDOG_PID", None)
    log = open(os.path.join(d, "daemon.log"), "w+")
    # WATCHDOG_PID must be the daemon's own PID (as systemd sets it): the
    # shell exports its PID and execs the daemon, which keeps it.
    wrapped = ["sh", "-c", 'export WATCHDOG_PID=$$; exec "$@"', "sh"] + cmd
    p = subprocess.Popen(wrapped, env=env, stdout=log, stderr=subprocess.STDOUT)
    name = os.path.basename(cmd[0])
    failures = []

    def expect(what, want, timeout=30.0):
        """Reads messages until one has every key=value in `want`."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            s.settimeout(max(0.05, min(0.5, end - time.monotonic())))
            try:
                msg = s.recv(4096).decode()
            except socket.timeout:
                if p.poll() is not None:
                    break
                continue
            kv = dict(l.split("=", 1) for l in msg.splitlines() if "=" in l)
            if all(kv.get(k) == v if v is not None else k in kv for k, v in want.items()):
                print(f"ok   {name}: {what}: {msg.strip()!r}")
                return kv
            if p.poll() is not None:
                break
        failures.append(what)
        print(f"FAIL {name}: {what}: not received (exit status {p.poll()})")
        return None

    try:
        if expect("READY=1 at startup", {"READY": "1"}):
            down = [port for port in ports if not listening(port)]
            if down:
                failures.append("bound before READY")
                print(f"FAIL {name}: READY=1 sent before TCP ports {down} were listening")
            else:
                print(f"ok   {name}: TCP ports {ports} listening when READY=1 arrived")
        expect("WATCHDOG=1", {"WATCHDOG": "1"}, timeout=5)
        p.send_signal(signal.SIGHUP)
        kv = expect("RELOADING=1 on SIGHUP", {"RELOADING": "1"})
        if kv is not None and not kv.get("MONOTONIC_USEC", "").isdigit():
            failures.append("MONOTONIC_USEC")
            print(f"FAIL {name}: RELOADING=1 without MONOTONIC_USEC")
        expect("READY=1 after the reload", {"READY": "1"})
        p.send_signal(signal.SIGTERM)
        expect("STOPPING=1 on SIGTERM", {"STOPPING": "1"})
        try:
            rc = p.wait(timeout=15)
            if rc != 0:
                failures.append("exit status")
                print(f"FAIL {name}: exit status {rc} after SIGTERM")
            else:
                print(f"ok   {name}: exited 0 after SIGTERM")
        except subprocess.TimeoutExpired:
            failures.append("exit")
            print(f"FAIL {name}: still running 15 s after SIGTERM")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    if failures:
        log.seek(0)
        print(f"--- {name} log (last 40 lines):")
        print("".join(log.readlines()[-40:]))
        sys.exit(1)


if __name__ == "__main__":
    main()
