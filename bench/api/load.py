#!/usr/bin/env python3
"""Load for bench/api/run.sh: COUNT requests to bootd's controller API over
HTTPS (keep-alive), spread over THREADS connections.

    load.py --port P --cacert CA --token T --count N --threads C --kind create|floor --first K

create: POST /v1/nodes with node bench-<i> (a MAC and an address of its own,
        no provider): one store write each (201 expected).
floor:  POST /v1/nodes with a body the API refuses (422: an unknown role):
        the same TLS, HTTP, authentication and JSON parsing, no store write.
Prints one line: kind, count, seconds, requests/s, p50 and p99 latency (ms),
and the statuses seen. Standard library only.
"""
import argparse
import http.client
import json
import ssl
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cacert", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--kind", choices=("create", "floor"), default="create")
    ap.add_argument("--first", type=int, default=0, help="first node number")
    a = ap.parse_args()
    ctx = ssl.create_default_context(cafile=a.cacert)
    lock = threading.Lock()
    next_i = [a.first]
    end = a.first + a.count
    lat = []
    statuses = {}

    def body(i):
        if a.kind == "floor":
            return {"name": f"floor-{i}", "role": "nope"}
        return {
            "name": f"bench-{i}",
            "role": "worker",
            "macs": [f"02:be:00:{(i >> 16) & 255:02x}:{(i >> 8) & 255:02x}:{i & 255:02x}"],
            "ip": f"10.78.{i // 250}.{i % 250 + 2}",
            "live": True,
        }

    def worker():
        c = http.client.HTTPSConnection("127.0.0.1", a.port, context=ctx, timeout=30)
        headers = {"Authorization": f"Bearer {a.token}", "Content-Type": "application/json"}
        mine = []
        seen = {}
        while True:
            with lock:
                i = next_i[0]
                if i >= end:
                    break
                next_i[0] += 1
            data = json.dumps(body(i))
            t = time.perf_counter()
            c.request("POST", "/v1/nodes", body=data, headers=headers)
            r = c.getresponse()
            r.read()
            mine.append(time.perf_counter() - t)
            seen[r.status] = seen.get(r.status, 0) + 1
        c.close()
        with lock:
            lat.extend(mine)
            for k, v in seen.items():
                statuses[k] = statuses.get(k, 0) + v

    ts = [threading.Thread(target=worker) for _ in range(a.threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.perf_counter() - t0
    lat.sort()
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")
    print(f"kind={a.kind} count={a.count} secs={secs:.2f} rps={a.count / secs:.0f} "
          f"p50_ms={p(0.5):.1f} p99_ms={p(0.99):.1f} statuses={json.dumps(statuses, sort_keys=True)}")


if __name__ == "__main__":
    main()
