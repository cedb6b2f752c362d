#!/usr/bin/env python3
"""A hostile provider for the secrets audit (tests/secrets/e2e.sh): the
Equinix Metal and Power VS endpoints bootd's clients call, where every create
is refused with an error body that echoes the whole request back (its
headers, so the API key and the IAM token, and its body, so the userdata
pointer config with its Ignition token). A client that passes a provider's
error text on to a log, an API answer or the status page shows a secret.

    echo-provider.py --listen 127.0.0.1:PORT --iam-token-file FILE --record FILE

- Equinix: `GET /projects/{id}/devices?...` -> 200, no devices; `POST
  /projects/{id}/devices` -> 422 {"errors": [<echo>]}; `GET|DELETE
  /devices/{id}` -> 404.
- Power VS: `POST /identity/token` -> 200 with the IAM token read from
  --iam-token-file (a secret the audit looks for); `GET
  .../pvm-instances` -> 200, none; `POST .../pvm-instances` -> 400
  {"description": <echo>, "error": "bad request"}; others -> 404.
Every request (method, path, headers, body) is appended to --record as one
JSON line: the audit reads the provider tokens bootd issued from it. Only
127.0.0.1 is accepted as the listen address. Standard library only.
"""
import argparse
import http.server
import json
import threading

LOCK = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass  # the record file is the log

    def answer(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n).decode("utf-8", "replace") if n else ""
        echo = {"method": self.command, "path": self.path,
                "headers": dict(self.headers.items()), "body": body}
        with LOCK, open(self.server.opts.record, "a") as f:
            f.write(json.dumps(echo) + "\n")
        text = "request refused, you sent: " + json.dumps(echo)
        path = self.path.split("?")[0]
        if path == "/identity/token" and self.command == "POST":
            with open(self.server.opts.iam_token_file) as f:
                tok = f.read().strip()
            return self.answer(200, {"access_token": tok, "token_type": "Bearer",
                                     "expires_in": 3600, "refresh_token": "not-used"})
        if path.startswith("/projects/") and path.endswith("/devices"):
            if self.command == "GET":
                return self.answer(200, {"devices": [], "meta": {"total": 0}})
            return self.answer(422, {"errors": [text]})
        if path.endswith("/pvm-instances"):
            if self.command == "GET":
                return self.answer(200, {"pvmInstances": []})
            return self.answer(400, {"description": text, "error": "bad request"})
        return self.answer(404, {"errors": ["not found: " + text]})

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = handle_any


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--iam-token-file", required=True)
    ap.add_argument("--record", required=True)
    opts = ap.parse_args()
    host, port = opts.listen.rsplit(":", 1)
    if host != "127.0.0.1":
        ap.error("only 127.0.0.1")
    srv = http.server.ThreadingHTTPServer((host, int(port)), Handler)
    srv.opts = opts
    srv.serve_forever()


if __name__ == "__main__":
    main()
