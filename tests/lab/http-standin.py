#!/usr/bin/env python3
"""A small HTTP(S) server that serves fixed files at fixed paths and records
every request: the lab's stand-in for a platform's metadata service and for
OpenShift's machine-config server (tests/lab/platform-ignition.sh).

    http-standin.py --listen ADDR:PORT [--tls CERT KEY]
        --serve /path=FILE [--serve ...] [--post /path ...] --record FILE

- GET (and HEAD) of a --serve path answers 200 with FILE's bytes (read at
  each request), any other path 404.
- POST to a --post path answers 200 {} and keeps the body in the record.
- Every request is appended to --record as one JSON line: time, client
  address, method, path, the Accept and User-Agent headers, status and
  (for a POST) the body.
- --tls: HTTPS with that certificate chain and key (PEM).

Only an address inside a network namespace the caller made is meant for
--listen (the lab's bridge, 100.100.100.200 there); nothing checks it, so
never start it outside one but on 127.0.0.1. Standard library only.
SIGTERM stops it.
"""
import argparse
import http.server
import json
import signal
import ssl
import sys
import threading
import time

LOCK = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass  # the record is the log

    def record(self, status, body=None):
        entry = {
            "time": time.time(),
            "client": self.client_address[0],
            "method": self.command,
            "path": self.path,
            "accept": self.headers.get("Accept"),
            "userAgent": self.headers.get("User-Agent"),
            "status": status,
        }
        if body is not None:
            entry["body"] = body
        with LOCK, open(self.server.opts.record, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def answer(self, status, data, ctype="application/octet-stream"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        src = self.server.files.get(path)
        if src is None:
            self.record(404)
            return self.answer(404, b"not found\n", "text/plain")
        with open(src, "rb") as f:
            data = f.read()
        self.record(200)
        self.answer(200, data)

    do_HEAD = do_GET

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(n, 1 << 20)).decode("utf-8", "replace")
        if self.path.split("?", 1)[0] not in self.server.posts:
            self.record(404, body)
            return self.answer(404, b"not found\n", "text/plain")
        self.record(200, body)
        self.answer(200, b"{}", "application/json")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", required=True, help="ADDR:PORT")
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    ap.add_argument("--serve", action="append", default=[], help="/path=FILE")
    ap.add_argument("--post", action="append", default=[], help="/path")
    ap.add_argument("--record", required=True)
    opts = ap.parse_args()
    host, port = opts.listen.rsplit(":", 1)
    files = {}
    for s in opts.serve:
        path, sep, src = s.partition("=")
        if not sep or not path.startswith("/"):
            ap.error(f"--serve {s}: not /path=FILE")
        files[path] = src
    srv = http.server.ThreadingHTTPServer((host, int(port)), Handler)
    srv.daemon_threads = True
    srv.opts, srv.files, srv.posts = opts, files, set(opts.post)
    if opts.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(opts.tls[0], opts.tls[1])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True, do_handshake_on_connect=False)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown).start())
    print(f"http-standin: serving {sorted(files)} on {opts.listen}{' (TLS)' if opts.tls else ''}", flush=True)
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
