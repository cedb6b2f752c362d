#!/usr/bin/env python3
"""A small stateful fake of the two machine APIs the controller's equinix and
powervs providers call, for the lab runs that boot a guest as the machine it
made (tests/lab/platform-ignition.sh). The shapes are those of the Rust
tests' fake (appliance/tests/controller/fake.rs). Every create is checked
against the providers' own documents (--specs, default ../shared/specs
beside the checkout): the Equinix device body against the OpenAPI
document's POST /projects/{id}/devices request body, the Power VS instance
body against the Swagger document's PVMInstanceCreate, the query
parameters of a device list against those the document declares. A
request that does not conform is answered 422 and listed at
/_fake/violations (the lab run asserts that list is empty).

    machines-fake.py --listen 127.0.0.1:PORT --equinix-key-file F
        --powervs-key-file F [--first-ip 10.77.0.110] [--record FILE]
        [--specs DIR]

Equinix Metal (X-Auth-Token = the key file's text, else 401):
  GET    /projects/{id}/devices[?tag=T]  the devices (with tag T), one page
  POST   /projects/{id}/devices          201, a device in state "queued"
  GET    /devices/{id}                   queued -> provisioning -> active,
                                         one step per GET; active: a public
                                         and a private address, one MAC
  DELETE /devices/{id}                   204; the next GET is 404
IBM IAM and Power VS (Bearer = the token issued for the key, and a CRN):
  POST   /identity/token                 form grant_type=...:apikey, apikey
  GET    /pcloud/v1/cloud-instances/{ws}/pvm-instances        the instances
  POST   /pcloud/v1/cloud-instances/{ws}/pvm-instances        201 [instance]
                                         in BUILD, with the address asked
                                         for or the next free one, a MAC
  GET    .../pvm-instances/{id}          ACTIVE from the first GET on
  DELETE .../pvm-instances/{id}          200; the next GET is 404
Control (unsigned, for the test):
  GET    /_fake/machines                 every machine made: provider, id,
                                         name, ip, mac, userdata (as sent)
  GET    /_fake/violations               requests that did not conform

Private addresses are --first-ip, then upwards; MACs b4:96:91:77:00:NN
(Equinix) and fa:16:3e:77:00:NN (Power VS). Only 127.0.0.1 is accepted as
the listen address. Standard library only; SIGTERM stops it.
"""
import argparse
import http.server
import ipaddress
import json
import os
import secrets
import signal
import sys
import threading
import urllib.parse
import uuid

LOCK = threading.Lock()


class State:
    def __init__(self, opts):
        self.opts = opts
        with open(opts.equinix_key_file) as f:
            self.equinix_key = f.read().strip()
        with open(opts.powervs_key_file) as f:
            self.powervs_key = f.read().strip()
        self.iam_token = secrets.token_hex(16)
        self.next_ip = ipaddress.IPv4Address(opts.first_ip)
        self.made = 0
        self.devices = {}
        self.instances = {}
        self.machines = []  # what /_fake/machines shows, in creation order
        self.violations = []
        with open(os.path.join(opts.specs, "equinix-metal", "openapi3.bundled.json")) as f:
            self.metal = json.load(f)
        with open(os.path.join(opts.specs, "powervs", "power-iaas.derived.swagger.json")) as f:
            self.pvs = json.load(f)
        devices = self.metal["paths"]["/projects/{id}/devices"]
        self.device_body = devices["post"]["requestBody"]["content"]["application/json"]["schema"]
        self.device_query = {resolve(self.metal, p).get("name") for p in devices["get"]["parameters"]}
        self.instance_body = {"$ref": "#/definitions/PVMInstanceCreate"}

    def violation(self, what, problems):
        self.violations.append({"request": what, "problems": problems})

    def take_ip(self):
        used = {m["ip"] for m in self.machines}
        while str(self.next_ip) in used:
            self.next_ip += 1
        ip = str(self.next_ip)
        self.next_ip += 1
        return ip


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_):
        pass

    def reply(self, status, obj=None):
        body = b"" if obj is None else json.dumps(obj).encode()
        self.send_response(status)
        if obj is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def handle_any(self):
        st = self.server.state
        url = urllib.parse.urlsplit(self.path)
        segs = [s for s in url.path.split("/") if s]
        raw = self.body()
        if self.server.state.opts.record:
            with LOCK, open(st.opts.record, "a") as f:
                f.write(json.dumps({"method": self.command, "path": url.path}) + "\n")
        with LOCK:
            if segs == ["_fake", "machines"] and self.command == "GET":
                return self.reply(200, st.machines)
            if segs == ["_fake", "violations"] and self.command == "GET":
                return self.reply(200, st.violations)
            if segs == ["identity", "token"] and self.command == "POST":
                return self.iam(st, raw)
            if segs[:1] == ["pcloud"]:
                return self.powervs(st, segs, raw)
            return self.equinix(st, segs, url.query, raw)

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = handle_any

    # --- Equinix Metal -----------------------------------------------------
    def equinix(self, st, segs, query, raw):
        if self.headers.get("X-Auth-Token") != st.equinix_key:
            return self.reply(401, {"errors": ["invalid auth token"]})
        if len(segs) == 3 and segs[0] == "projects" and segs[2] == "devices":
            if self.command == "GET":
                unknown = sorted(set(dict(urllib.parse.parse_qsl(query))) - st.device_query)
                if unknown:
                    st.violation(f"GET {self.path}", [f"query parameter {k} is not declared" for k in unknown])
                    return self.reply(422, {"errors": [f"unknown query parameters {unknown}"]})
                tag = dict(urllib.parse.parse_qsl(query)).get("tag")
                devs = [d for d in st.devices.values()
                        if d["state"] != "deleted" and (tag is None or tag in d["tags"])]
                return self.reply(200, {"devices": devs, "meta": {"total": len(devs), "current_page": 1, "last_page": 1}})
            if self.command == "POST":
                try:
                    v = json.loads(raw)
                except ValueError:
                    return self.reply(422, {"errors": ["bad JSON"]})
                problems = check(st.metal, st.device_body, v, "body")
                if problems:
                    st.violation(f"POST {self.path}", problems)
                    return self.reply(422, {"errors": problems})
                for k in ("metro", "plan", "hostname", "operating_system"):
                    if not v.get(k):
                        return self.reply(422, {"errors": [f"{k} is required"]})
                st.made += 1
                dev_id = str(uuid.uuid4())
                dev = {"id": dev_id, "href": f"/metal/v1/devices/{dev_id}", "hostname": v["hostname"],
                       "state": "queued", "tags": v.get("tags") or [],
                       "operating_system": {"slug": v["operating_system"]},
                       "userdata": v.get("userdata", ""), "created_at": "2026-01-01T00:00:00Z",
                       "ip_addresses": [], "network_ports": []}
                for k in ("ipxe_script_url", "always_pxe"):
                    if k in v:
                        dev[k] = v[k]
                ip, mac = st.take_ip(), "b4:96:91:77:00:%02x" % st.made
                st.devices[dev_id] = dev
                dev["_private"] = (ip, mac, "147.75.77.%d" % (100 + st.made))
                st.machines.append({"provider": "equinix", "id": dev_id, "name": v["hostname"],
                                    "ip": ip, "mac": mac, "userdata": v.get("userdata", "")})
                return self.reply(201, public(dev))
        if len(segs) == 2 and segs[0] == "devices":
            dev = st.devices.get(segs[1])
            if dev is None or dev["state"] == "deleted":
                return self.reply(404, {"errors": ["Not found"]})
            if self.command == "GET":
                if dev["state"] == "deprovisioning":
                    dev["state"] = "deleted"
                    return self.reply(404, {"errors": ["Not found"]})
                dev["state"] = {"queued": "provisioning", "provisioning": "active"}.get(dev["state"], dev["state"])
                if dev["state"] == "active":
                    ip, mac, public_ip = dev["_private"]
                    # A layer-3 device as Equinix answers it: addresses with
                    # their prefixes and gateways, bond0 over eth0 and eth1.
                    dev["ip_addresses"] = [
                        {"address": public_ip, "address_family": 4, "cidr": 31, "gateway": "147.75.1.1",
                         "public": True, "management": True},
                        {"address": ip, "address_family": 4, "cidr": 24,
                         "gateway": ip.rsplit(".", 1)[0] + ".1", "public": False, "management": True}]
                    other = mac.replace(":77:", ":78:", 1)  # the second NIC
                    port_id = lambda k: str(uuid.uuid5(uuid.NAMESPACE_URL, dev["id"] + k))
                    dev["network_ports"] = [
                        {"id": port_id("bond0"), "name": "bond0", "type": "NetworkBondPort",
                         "network_type": "layer3", "data": {"bonded": True}},
                        {"id": port_id("eth0"), "name": "eth0", "type": "NetworkPort",
                         "bond": {"name": "bond0"}, "data": {"mac": mac, "bonded": True}},
                        {"id": port_id("eth1"), "name": "eth1", "type": "NetworkPort",
                         "bond": {"name": "bond0"}, "data": {"mac": other, "bonded": True}}]
                return self.reply(200, public(dev))
            if self.command == "DELETE":
                dev["state"] = "deprovisioning"
                return self.reply(204)
        return self.reply(404, {"errors": ["no such route in the fake"]})

    # --- IBM IAM and Power VS ---------------------------------------------
    def iam(self, st, raw):
        form = dict(urllib.parse.parse_qsl(raw.decode()))
        if form.get("grant_type") != "urn:ibm:params:oauth:grant-type:apikey" or form.get("apikey") != st.powervs_key:
            return self.reply(400, {"errorCode": "BXNIM0415E", "errorMessage": "Provided API key could not be found"})
        return self.reply(200, {"access_token": st.iam_token, "refresh_token": "not_supported",
                                "token_type": "Bearer", "expires_in": 3600})

    def powervs(self, st, segs, raw):
        not_found = {"code": 404, "description": "not found", "error": "not found", "message": "not found"}
        if self.headers.get("Authorization") != f"Bearer {st.iam_token}" or not (self.headers.get("CRN") or "").startswith("crn:"):
            return self.reply(401, {"code": 401, "description": "unauthorized", "error": "unauthorized", "message": "unauthorized"})
        if len(segs) < 5 or segs[:3] != ["pcloud", "v1", "cloud-instances"] or segs[4] != "pvm-instances":
            return self.reply(404, not_found)
        rest = segs[5:]
        if not rest and self.command == "GET":
            live = [summary(i) for i in st.instances.values() if i["status"] != "DELETED"]
            return self.reply(200, {"pvmInstances": live})
        if not rest and self.command == "POST":
            try:
                v = json.loads(raw)
            except ValueError:
                return self.reply(400, {"description": "bad JSON", "error": "bad request"})
            problems = check(st.pvs, st.instance_body, v, "body")
            if problems:
                st.violation(f"POST {self.path}", problems)
                return self.reply(422, {"description": "; ".join(problems), "error": "bad request"})
            for k in ("serverName", "imageID", "processors", "memory", "procType", "networks"):
                if k not in v:
                    return self.reply(400, {"description": f"{k} is required", "error": "bad request"})
            st.made += 1
            net = v["networks"][0]
            ip = net.get("ipAddress") or st.take_ip()
            mac = "fa:16:3e:77:00:%02x" % st.made
            inst_id = str(uuid.uuid4())
            inst = {"pvmInstanceID": inst_id, "serverName": v["serverName"], "imageID": v["imageID"],
                    "processors": v["processors"], "memory": v["memory"], "procType": v["procType"],
                    "sysType": v.get("sysType", "s922"), "status": "BUILD", "diskSize": 120.0,
                    "osType": "rhcos", "storageType": "tier3", "networkIDs": [net.get("networkID")],
                    "volumeIDs": [], "href": f"/pcloud/v1/cloud-instances/{segs[3]}/pvm-instances/{inst_id}",
                    "networks": [{"ipAddress": ip, "macAddress": mac, "networkID": net.get("networkID")}]}
            st.instances[inst_id] = inst
            st.machines.append({"provider": "powervs", "id": inst_id, "name": v["serverName"],
                                "ip": ip, "mac": mac, "userdata": v.get("userData", "")})
            return self.reply(201, [inst])
        if len(rest) == 1:
            inst = st.instances.get(rest[0])
            if inst is None or inst["status"] == "DELETED":
                return self.reply(404, not_found)
            if self.command == "GET":
                if inst["status"] == "DELETING":
                    inst["status"] = "DELETED"
                    return self.reply(404, not_found)
                inst["status"] = "ACTIVE"
                return self.reply(200, inst)
            if self.command == "DELETE":
                inst["status"] = "DELETING"
                return self.reply(200, {})
        return self.reply(404, not_found)


def resolve(doc, node):
    """Follows local $refs ("#/components/schemas/X", "#/definitions/X")."""
    seen = 0
    while isinstance(node, dict) and "$ref" in node and seen < 32:
        target = doc
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        node, seen = target, seen + 1
    return node


TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def check(doc, schema, value, where):
    """The problems of `value` against an OpenAPI 3 / Swagger 2 schema:
    types (integer and number as JSON has them), required properties,
    enums, allOf, oneOf/anyOf (some alternative fits), items, and
    additionalProperties: false. Empty: it conforms."""
    schema = resolve(doc, schema)
    if not isinstance(schema, dict):
        return []
    if "allOf" in schema:
        return [p for s in schema["allOf"] for p in check(doc, s, value, where)]
    for key in ("oneOf", "anyOf"):
        if key in schema:
            alts = [check(doc, s, value, where) for s in schema[key]]
            if any(not a for a in alts):
                return []
            return [f"{where}: fits none of the {key} alternatives ({min(alts, key=len)[0]})"]
    if value is None and schema.get("nullable"):
        return []
    t = schema.get("type")
    if t in ("integer", "number"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if t == "integer":
            ok = ok and float(value).is_integer()
        if not ok:
            return [f"{where}: {json.dumps(value)[:40]} is not of type {t}"]
    elif t in TYPES and not isinstance(value, TYPES[t]):
        return [f"{where}: {json.dumps(value)[:40]} is not of type {t}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: {json.dumps(value)[:40]} is not one of {schema['enum']}"]
    problems = []
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for r in schema.get("required", []):
            if r not in value:
                problems.append(f"{where}.{r}: required")
        for k, v in value.items():
            if k in props:
                problems += check(doc, props[k], v, f"{where}.{k}")
            elif schema.get("additionalProperties") is False:
                problems.append(f"{where}.{k}: not a property of the schema")
            elif isinstance(schema.get("additionalProperties"), dict):
                problems += check(doc, schema["additionalProperties"], v, f"{where}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            problems += check(doc, schema["items"], v, f"{where}[{i}]")
    return problems


def public(dev):
    return {k: v for k, v in dev.items() if not k.startswith("_")}


def summary(inst):
    return {k: v for k, v in inst.items() if k not in ("networkIDs", "volumeIDs", "storageType")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--listen", required=True)
    ap.add_argument("--equinix-key-file", required=True)
    ap.add_argument("--powervs-key-file", required=True)
    ap.add_argument("--first-ip", default="10.77.0.110")
    ap.add_argument("--record")
    ap.add_argument("--specs", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "..", "..", "..", "shared", "specs"))
    opts = ap.parse_args()
    host, port = opts.listen.rsplit(":", 1)
    if host != "127.0.0.1":
        ap.error("--listen: only 127.0.0.1")
    srv = http.server.ThreadingHTTPServer((host, int(port)), Handler)
    srv.daemon_threads = True
    srv.state = State(opts)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=srv.shutdown).start())
    print(f"machines-fake: on {opts.listen}", flush=True)
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
