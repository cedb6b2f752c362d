#!/usr/bin/env python3
"""The storm's nodes made through the controller's API, as an operator's
script would: one `POST /v1/nodes` after another on one HTTPS connection
(site CA, bearer token), each node `n<i, 5 digits>` a worker with the
provider given. A 429 or 503 is sent again after its Retry-After (at most
5 s), a lost connection after a new one, for up to --give-up seconds per node.

    create-nodes.py --url https://10.78.0.2:9443 --ca ca.pem --token-file F
        --count N --provider alibaba --created FILE

FILE: a line `name epoch-seconds` per node created, the time its first
POST was sent (bench/storm's --created). Prints one line of totals; exit 1
when a node could not be created. Standard library only.
"""
import argparse
import http.client
import json
import ssl
import sys
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--ca", required=True)
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--provider", default="alibaba")
    ap.add_argument("--created", required=True)
    ap.add_argument("--give-up", type=float, default=120.0)
    a = ap.parse_args()
    token = open(a.token_file).read().split("\n", 1)[0].strip()
    u = urllib.parse.urlsplit(a.url)
    ctx = ssl.create_default_context(cafile=a.ca)
    conn = None
    t_start = time.time()
    again = failed = 0
    statuses = {}
    with open(a.created, "w") as out:
        for i in range(a.count):
            name = f"n{i:05d}"
            body = json.dumps({"name": name, "role": "worker", "provider": {a.provider: {}}})
            first = time.time()
            while True:
                if conn is None:
                    conn = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=30)
                try:
                    conn.request("POST", "/v1/nodes", body, {
                        "authorization": f"Bearer {token}", "content-type": "application/json"})
                    r = conn.getresponse()
                    text = r.read()
                    status, retry = r.status, r.getheader("retry-after")
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = None
                    status, retry, text = None, "1", b""
                if status in (200, 201):
                    out.write(f"{name} {first:.6f}\n")
                    out.flush()
                    break
                statuses[status] = statuses.get(status, 0) + 1
                if status not in (None, 429, 502, 503, 504) or time.time() - first > a.give_up:
                    failed += 1
                    print(f"{name}: HTTP {status}: {text[:200]!r}", file=sys.stderr)
                    break
                again += 1
                time.sleep(min(5.0, float(retry or 1)))
    took = time.time() - t_start
    print(f"nodes created through the API {a.count - failed} of {a.count} in {took:.2f} s "
          f"({(a.count - failed) / took:.1f}/s), sent again {again} ({statuses or 'none'}), failed {failed}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
