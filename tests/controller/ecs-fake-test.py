#!/usr/bin/env python3
"""Tests of ecs-fake.py, the Alibaba Cloud ECS fake (unittest, standard library).

Run: python3 tests/controller/ecs-fake-test.py [-v]

The fake runs as a child process on 127.0.0.1 and is stopped by its PID. The
requests are signed by a client-side signer written here from Alibaba's
published algorithm (not by the fake's code), checked first against the
documented worked examples. SPECS_DIR (default: the repository's
../shared/specs) locates alibaba-ecs/api-docs.json.

`ecs-fake-test.py --send PORT ACTION JSON_PARAMS` is a one-shot client (used
as the process that is killed while its reply is held).
"""

import base64
import datetime
import hashlib
import hmac
import http.client
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "ecs-fake.py")
SPECS_DIR = os.environ.get("SPECS_DIR") or os.path.join(HERE, "..", "..", "..", "shared", "specs")
SPEC = os.path.join(SPECS_DIR, "alibaba-ecs", "api-docs.json")

AK = "LTAI5tFakeAccessKeyId01"
SECRET = "fake-Secret/0123456789+abcdefXYZ"
TOKEN = "CAIS-fake-security-token-6f1c"
START_AFTER = 1.5  # wide enough that "still Pending" holds on a loaded machine
REGION = "cn-hangzhou"

# Alibaba's worked example for ACS3-HMAC-SHA256 ("V3 request structure and
# signature"; the same numbers in help.aliyun.com's Function Compute
# "签名机制" page): POST, host ecs.cn-shanghai.aliyuncs.com, RunInstances,
# two query parameters, empty body.
V3_EXAMPLE = {
    "secret": "YourAccessKeySecret",
    "access_key_id": "YourAccessKeyId",
    "host": "ecs.cn-shanghai.aliyuncs.com",
    "date": "2023-10-26T10:22:32Z",
    "nonce": "3156853299f313e23d1673dc12e1703d",
    "query": [("ImageId", "win2019_1809_x64_dtc_zh-cn_40G_alibase_20230811.vhd"),
              ("RegionId", "cn-shanghai")],
    "hashed_canonical_request": "7ea06492da5221eba5297e897ce16e55f964061054b7695beedaac1145b1e259",
    "signature": "06563a9e1b43f5dfe96b81484da74bceab24a1d853912eee15083a6f0f3283c0",
}
# Alibaba's worked example for the legacy signature ("Request signatures",
# DescribeRegions with AccessKeyId testid and secret testsecret, GET).
V1_EXAMPLE = {
    "secret": "testsecret",
    "params": {"Timestamp": "2016-02-23T12:46:24Z", "Format": "XML", "AccessKeyId": "testid",
               "Action": "DescribeRegions", "SignatureMethod": "HMAC-SHA1",
               "SignatureNonce": "3ee8c1b8-83d3-44af-a94f-4e0ad82fd6cf", "Version": "2014-05-26",
               "SignatureVersion": "1.0"},
    "signature": "OLeaidS1JvxuMvnyHOwuJ+uX5qY=",
}


# ------------------------------------------------------------ client signer

def rfc3986(text):
    # urllib leaves only A-Za-z0-9 and -_.~ alone when nothing else is safe.
    return urllib.parse.quote(text, safe="")


def query_string(pairs):
    return "&".join(f"{rfc3986(k)}={rfc3986(v)}" for k, v in sorted(pairs))


def sign_v3(method, host, action, query_pairs, body, secret, access_key_id=AK, date=None,
            nonce=None, token=None, content_type=None, version="2014-05-26", canonical_parts=None):
    """Returns the headers of a request signed with ACS3-HMAC-SHA256."""
    payload_hash = hashlib.sha256(body).hexdigest()
    headers = {
        "host": host,
        "x-acs-action": action,
        "x-acs-version": version,
        "x-acs-date": date or utc(),
        "x-acs-signature-nonce": nonce or uuid.uuid4().hex,
        "x-acs-content-sha256": payload_hash,
    }
    if token is not None:
        headers["x-acs-security-token"] = token
    if content_type is not None:
        headers["content-type"] = content_type
    names = sorted(headers)
    canonical = "\n".join([
        method,
        "/",
        query_string(query_pairs),
        "".join(f"{n}:{headers[n].strip()}\n" for n in names),
        ";".join(names),
        payload_hash,
    ])
    hashed = hashlib.sha256(canonical.encode()).hexdigest()
    if canonical_parts is not None:
        canonical_parts["hashed"] = hashed
    signature = hmac.new(secret.encode(), f"ACS3-HMAC-SHA256\n{hashed}".encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"ACS3-HMAC-SHA256 Credential={access_key_id},"
                                f"SignedHeaders={';'.join(names)},Signature={signature}")
    return headers


def sign_v1(method, params, secret):
    canonical = query_string(params.items())
    to_sign = f"{method}&{rfc3986('/')}&{rfc3986(canonical)}"
    digest = hmac.new((secret + "&").encode(), to_sign.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def utc(offset=0.0):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def one_byte_changed(secret):
    return secret[:-1] + chr(ord(secret[-1]) ^ 1)


class Response:
    def __init__(self, status, body, headers):
        self.status, self.body, self.headers = status, body, headers

    @property
    def code(self):
        return self.body.get("Code") if isinstance(self.body, dict) else None

    def __repr__(self):
        return f"Response({self.status}, {self.body})"


def http_call(port, method, target, headers, body=b"", timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, target, body=body or None, headers=headers)
        r = conn.getresponse()
        data = r.read()
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = data
        return Response(r.status, parsed, {k.lower(): v for k, v in r.getheaders()})
    finally:
        conn.close()


def call(port, action, params=(), placement="query", method="POST", secret=SECRET,
         access_key_id=AK, date=None, nonce=None, token=None, tamper=None):
    """Signs and sends one ECS request. placement: query, form or split."""
    pairs = list(params.items()) if isinstance(params, dict) else list(params)
    if placement == "query":
        query, form = pairs, []
    elif placement == "form":
        query, form = [], pairs
    else:
        query, form = pairs[::2], pairs[1::2]
    body = query_string(form).encode() if form else b""
    host = f"127.0.0.1:{port}"
    headers = sign_v3(method, host, action, query, body, secret, access_key_id=access_key_id,
                      date=date, nonce=nonce, token=token,
                      content_type="application/x-www-form-urlencoded" if form else None)
    target = "/" + ("?" + query_string(query) if query else "")
    if tamper:
        target, headers, body = tamper(target, headers, body)
    headers = {("Host" if k == "host" else k): v for k, v in headers.items()}
    return http_call(port, method, target, headers, body)


# --------------------------------------------------------------- the fake

class FakeProcess:
    def __init__(self, *extra):
        self.dir = tempfile.mkdtemp(prefix="ecs-fake-test-")
        self.secret_file = os.path.join(self.dir, "secret")
        with open(self.secret_file, "w") as f:
            f.write(SECRET + "\n")
        self.port_file = os.path.join(self.dir, "port")
        self.stderr_path = os.path.join(self.dir, "stderr")
        self.extra = list(extra)
        self.proc = None
        self.port = None

    def start(self):
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, FAKE, "--spec", SPEC, "--access-key-id", AK,
                 "--secret-file", self.secret_file, "--listen", "127.0.0.1:0",
                 "--port-file", self.port_file, "--start-after", str(START_AFTER), *self.extra],
                stdout=subprocess.DEVNULL, stderr=err)
        for _ in range(200):  # up to 10 s
            if os.path.exists(self.port_file):
                with open(self.port_file) as f:
                    self.port = int(f.read())
                return self
            if self.proc.poll() is not None:
                raise RuntimeError("the fake exited: " + self.stderr())
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("the fake did not write its port file")

    def stop(self):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        return self.proc.returncode

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def stderr(self):
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def control(self, method, path, data=None):
        body = json.dumps(data).encode() if data is not None else b""
        headers = {"Content-Type": "application/json"} if body else {}
        return http_call(self.port, method, "/_fake/" + path, headers, body)


def load_fake_module():
    sys.dont_write_bytecode = True  # no __pycache__ beside the sources
    spec = importlib.util.spec_from_file_location("ecs_fake", FAKE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_params(**over):
    p = {"RegionId": REGION, "ImageId": "m-fakeimage0001", "InstanceType": "ecs.g7.large",
         "SecurityGroupId": "sg-fake0001", "VSwitchId": "vsw-fake0001"}
    p.update(over)
    return p


# ------------------------------------------------------------------ tests

class KnownAnswers(unittest.TestCase):
    """Both signers against Alibaba's published examples, without sockets."""

    @classmethod
    def setUpClass(cls):
        cls.fake = load_fake_module()

    def example_headers(self, secret):
        e = V3_EXAMPLE
        parts = {}
        headers = sign_v3("POST", e["host"], "RunInstances", e["query"], b"", secret,
                          access_key_id=e["access_key_id"], date=e["date"], nonce=e["nonce"],
                          canonical_parts=parts)
        return headers, parts

    def test_client_signer_reproduces_the_v3_example(self):
        headers, parts = self.example_headers(V3_EXAMPLE["secret"])
        self.assertEqual(parts["hashed"], V3_EXAMPLE["hashed_canonical_request"])
        self.assertEqual(
            headers["authorization"],
            "ACS3-HMAC-SHA256 Credential=YourAccessKeyId,SignedHeaders=host;x-acs-action;"
            "x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version,"
            "Signature=" + V3_EXAMPLE["signature"])

    def fake_verify(self, headers, secret):
        e = V3_EXAMPLE
        creds = self.fake.Credentials(e["access_key_id"], secret)
        now = datetime.datetime(2023, 10, 26, 10, 22, 32, tzinfo=datetime.timezone.utc).timestamp()
        return self.fake.verify_v3("POST", "/", query_string(e["query"]),
                                   {k: [v] for k, v in headers.items()}, b"", creds, now)

    def test_fake_verifier_accepts_the_v3_example(self):
        headers, _ = self.example_headers(V3_EXAMPLE["secret"])
        self.assertTrue(headers["authorization"].endswith(V3_EXAMPLE["signature"]))
        auth = self.fake_verify(headers, V3_EXAMPLE["secret"])
        self.assertEqual(auth["accessKeyId"], "YourAccessKeyId")
        self.assertEqual(auth["action"], "RunInstances")

    def test_fake_verifier_refuses_the_v3_example_with_a_secret_one_byte_off(self):
        headers, _ = self.example_headers(V3_EXAMPLE["secret"])
        with self.assertRaises(self.fake.ApiError) as cm:
            self.fake_verify(headers, one_byte_changed(V3_EXAMPLE["secret"]))
        self.assertEqual(cm.exception.code, "SignatureDoesNotMatch")

    def test_v1_example_both_signers(self):
        e = V1_EXAMPLE
        self.assertEqual(sign_v1("GET", e["params"], e["secret"]), e["signature"])
        creds = self.fake.Credentials("testid", e["secret"])
        now = datetime.datetime(2016, 2, 23, 12, 46, 24, tzinfo=datetime.timezone.utc).timestamp()
        pairs = list(e["params"].items()) + [("Signature", e["signature"])]
        self.assertEqual(self.fake.verify_v1("GET", pairs, creds, now)["nonce"],
                         e["params"]["SignatureNonce"])
        with self.assertRaises(self.fake.ApiError) as cm:
            self.fake.verify_v1("GET", pairs, self.fake.Credentials("testid", "testsecreu"), now)
        self.assertEqual(cm.exception.code, "SignatureDoesNotMatch")

    def test_percent_encoding_rules(self):
        for text, want in [("a b", "a%20b"), ("a*b", "a%2Ab"), ("a~b", "a~b"), ("a+b/c", "a%2Bb%2Fc"),
                           ("é", "%C3%A9"), ("AZaz09-_.~", "AZaz09-_.~")]:
            self.assertEqual(self.fake.percent_encode(text), want)
            self.assertEqual(rfc3986(text), want)


class MetadataChecks(unittest.TestCase):
    """The parameter checker, driven by the metadata, without sockets."""

    @classmethod
    def setUpClass(cls):
        cls.fake = load_fake_module()
        cls.spec = cls.fake.Spec(SPEC)

    def resolves(self, action, key):
        return self.spec.resolve(self.spec.actions[action], key) is not None

    def test_names_expand_by_style(self):
        yes = [("RunInstances", "Tag.1.Key"), ("RunInstances", "Tag.20.Value"),
               ("RunInstances", "SystemDisk.Category"), ("RunInstances", "SystemDisk.StorageClusterId"),
               ("RunInstances", "DataDisk.3.Size"), ("RunInstances", "HostNames.2"),
               ("RunInstances", "SecurityGroupIds.1"), ("RunInstances", "NetworkInterface.1.Ipv6Address.2"),
               ("DeleteInstances", "InstanceId.1"), ("DescribeInstances", "Tag.1.key"),
               ("AuthorizeSecurityGroup", "Permissions.1.IpProtocol"), ("RunCommand", "Parameters")]
        no = [("RunInstances", "Tag.0.Key"), ("RunInstances", "Tag.1"), ("RunInstances", "Tag.1.Colour"),
              ("RunInstances", "Tag"), ("RunInstances", "SystemDisk.Colour"), ("RunInstances", "Bogus"),
              ("DeleteInstances", "InstanceId"), ("DeleteInstances", "InstanceId.x"),
              ("DeleteInstance", "RegionId")]
        for action, key in yes:
            self.assertTrue(self.resolves(action, key), f"{action} {key}")
        for action, key in no:
            self.assertFalse(self.resolves(action, key), f"{action} {key}")
        with self.assertRaises(self.fake.ApiError):  # maxItems of InstanceId is 100
            self.resolves("DeleteInstances", "InstanceId.101")

    def check(self, action, params):
        self.spec.check_params(self.spec.actions[action], params)

    def assert_code(self, code, action, params):
        with self.assertRaises(self.fake.ApiError) as cm:
            self.check(action, params)
        self.assertEqual(cm.exception.code, code, cm.exception.message)

    def test_types_ranges_enums_and_required(self):
        self.check("ModifyDiskSpec", {"DiskId": "d-1", "PerformanceControlOptions.Recover": "All"})
        self.assert_code("InvalidParameter", "ModifyDiskSpec",
                         {"DiskId": "d-1", "PerformanceControlOptions.Recover": "Some"})
        self.assert_code("InvalidParameter", "RunInstances", {"RegionId": REGION, "Amount": "two"})
        self.assert_code("InvalidParameter", "RunInstances", {"RegionId": REGION, "Amount": "0"})
        self.assert_code("InvalidParameter", "RunInstances", {"RegionId": REGION, "DryRun": "yes"})
        self.assert_code("InvalidParameter", "RunInstances", {"RegionId": REGION, "SpotPriceLimit": "cheap"})
        self.assert_code("InvalidParameter", "DescribeInstances", {"RegionId": REGION, "PageSize": "101"})
        self.assert_code("MissingParameter", "DescribeInstances", {"PageSize": "10"})
        self.assert_code("MissingParameter", "DescribeInstances", {"RegionId": ""})
        self.assert_code("MissingParameter", "DeleteInstances", {"RegionId": REGION})
        self.check("DeleteInstances", {"RegionId": REGION, "InstanceId.1": "i-1", "Force": "true"})
        self.check("RunCommand", {"RegionId": REGION, "CommandContent": "echo", "Type": "RunShellScript",
                                  "InstanceId.1": "i-1", "Parameters": "{\"a\": 1}"})
        self.assert_code("InvalidParameter", "RunCommand",
                         {"RegionId": REGION, "CommandContent": "echo", "Type": "RunShellScript",
                          "InstanceId.1": "i-1", "Parameters": "[1]"})


class FakeTestCase(unittest.TestCase):
    fake_args = ("--allow-v1",)

    @classmethod
    def setUpClass(cls):
        cls.proc = FakeProcess(*cls.fake_args).start()
        cls.port = cls.proc.port

    @classmethod
    def tearDownClass(cls):
        rc = cls.proc.stop()
        stderr = cls.proc.stderr()
        cls.proc.cleanup()
        if rc != 0:
            raise AssertionError(f"the fake exited with {rc} on SIGTERM: {stderr}")

    def setUp(self):
        self.assertEqual(self.proc.control("POST", "reset").status, 200)

    def call(self, action, params=(), **kw):
        return call(self.port, action, params, **kw)

    def ok(self, action, params=(), **kw):
        r = self.call(action, params, **kw)
        self.assertEqual(r.status, 200, r)
        self.assertIn("RequestId", r.body)
        return r.body

    def assert_error(self, r, status, code):
        self.assertEqual((r.status, r.code), (status, code), r)
        self.assertEqual(set(r.body), {"RequestId", "HostId", "Code", "Message", "Recommend"})
        self.assertIn(r.body["RequestId"], r.body["Recommend"])
        self.assertEqual(r.headers.get("x-acs-request-id"), r.body["RequestId"])

    def instances(self):
        r = self.proc.control("GET", "instances")
        self.assertEqual(r.status, 200)
        return r.body

    def run_one(self, **over):
        return self.ok("RunInstances", run_params(**over))["InstanceIdSets"]["InstanceIdSet"]

    def describe(self, **params):
        return self.ok("DescribeInstances", {"RegionId": REGION, **params})

    def log(self):
        return self.proc.control("GET", "requests").body

    def wait_until(self, predicate, what, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.05)
        self.fail("timed out waiting for " + what)


class Authentication(FakeTestCase):
    def test_right_secret_verifies_and_a_one_byte_change_does_not(self):
        self.describe()
        r = self.call("DescribeInstances", {"RegionId": REGION}, secret=one_byte_changed(SECRET))
        self.assert_error(r, 400, "SignatureDoesNotMatch")
        log = self.log()
        self.assertEqual([e["signatureVerified"] for e in log], [True, False])
        self.assertEqual(log[1]["code"], "SignatureDoesNotMatch")

    def test_each_placement_verifies(self):
        for placement in ("query", "form", "split"):
            ids = self.ok("RunInstances", run_params(InstanceName=f"via-{placement}"),
                          placement=placement)["InstanceIdSets"]["InstanceIdSet"]
            self.assertEqual(len(ids), 1)
        self.assertEqual([i["InstanceName"] for i in self.instances()], ["via-query", "via-form", "via-split"])

    def test_get_verifies(self):
        self.ok("DescribeInstances", {"RegionId": REGION}, method="GET")

    def test_nonce_replay_is_refused(self):
        nonce = uuid.uuid4().hex
        self.ok("DescribeInstances", {"RegionId": REGION}, nonce=nonce)
        self.assert_error(self.call("DescribeInstances", {"RegionId": REGION}, nonce=nonce),
                          400, "SignatureNonceUsed")

    def test_date_skew_is_refused(self):
        for offset in (-16 * 60, 16 * 60):
            self.assert_error(self.call("DescribeInstances", {"RegionId": REGION}, date=utc(offset)),
                              400, "InvalidTimeStamp.Expired")
        self.ok("DescribeInstances", {"RegionId": REGION}, date=utc(-14 * 60))
        self.assert_error(self.call("DescribeInstances", {"RegionId": REGION},
                                    date=utc().replace("Z", "+00:00")), 400, "InvalidTimeStamp.Format")

    def test_body_hash_mismatch_is_refused(self):
        def swap_body(target, headers, body):
            return target, headers, body.replace(b"ecs.g7.large", b"ecs.g7.xlarge")
        r = self.call("RunInstances", run_params(), placement="form", tamper=swap_body)
        self.assert_error(r, 400, "SignatureDoesNotMatch")
        self.assertIn("x-acs-content-sha256", r.body["Message"])
        self.assertEqual(self.instances(), [])

    def test_query_changed_after_signing_is_refused(self):
        def change(target, headers, body):
            return target.replace("ecs.g7.large", "ecs.g7.xlarge"), headers, body
        self.assert_error(self.call("RunInstances", run_params(), tamper=change), 400, "SignatureDoesNotMatch")

    def test_missing_headers_are_refused(self):
        for name in ("x-acs-action", "x-acs-version", "x-acs-date", "x-acs-signature-nonce",
                     "x-acs-content-sha256"):
            def drop(target, headers, body, name=name):
                return target, {k: v for k, v in headers.items() if k != name}, body
            self.assert_error(self.call("DescribeInstances", {"RegionId": REGION}, tamper=drop),
                              400, "MissingParameter")

        def no_auth(target, headers, body):
            return target, {k: v for k, v in headers.items() if k != "authorization"}, body
        self.assert_error(self.call("DescribeInstances", {"RegionId": REGION}, tamper=no_auth),
                          400, "IncompleteSignature")

        def unsigned_extra(target, headers, body):
            return target, {**headers, "x-acs-extra": "1"}, body
        self.assert_error(self.call("DescribeInstances", {"RegionId": REGION}, tamper=unsigned_extra),
                          400, "IncompleteSignature")

    def test_unknown_access_key_is_refused(self):
        self.assert_error(self.call("DescribeInstances", {"RegionId": REGION}, access_key_id="LTAI-other"),
                          404, "InvalidAccessKeyId.NotFound")

    def test_a_security_token_this_key_does_not_take_is_refused(self):
        self.assert_error(self.call("DescribeInstances", {"RegionId": REGION}, token=TOKEN),
                          400, "InvalidSecurityToken.MismatchWithAccessKey")

    def test_legacy_v1_signature(self):
        params = {"Action": "DescribeInstances", "Version": "2014-05-26", "AccessKeyId": AK,
                  "SignatureMethod": "HMAC-SHA1", "SignatureVersion": "1.0", "Format": "JSON",
                  "SignatureNonce": uuid.uuid4().hex, "Timestamp": utc(), "RegionId": REGION}
        for secret, status in ((SECRET, 200), (one_byte_changed(SECRET), 400)):
            params["SignatureNonce"] = uuid.uuid4().hex
            q = query_string(list(params.items()) + [("Signature", sign_v1("GET", params, secret))])
            r = http_call(self.port, "GET", "/?" + q, {})
            self.assertEqual(r.status, status, r)
        self.assertEqual([e["signatureVersion"] for e in self.log()], ["v1", "v1"])

    def test_unknown_and_unimplemented_actions(self):
        self.assert_error(self.call("RunInstancez", {"RegionId": REGION}), 404, "InvalidAction.NotFound")
        self.assert_error(self.call("DescribeDisks", {"RegionId": REGION}), 400, "NotImplementedInFake")


class SecurityToken(unittest.TestCase):
    def test_token_is_required_and_compared(self):
        proc = FakeProcess()
        token_file = os.path.join(proc.dir, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        proc.extra = ["--security-token-file", token_file]
        self.addCleanup(proc.cleanup)
        proc.start()
        try:
            r = call(proc.port, "DescribeInstances", {"RegionId": REGION})
            self.assertEqual((r.status, r.code), (400, "MissingSecurityToken"), r)
            r = call(proc.port, "DescribeInstances", {"RegionId": REGION}, token=one_byte_changed(TOKEN))
            self.assertEqual((r.status, r.code), (400, "InvalidSecurityToken.MismatchWithAccessKey"), r)
            r = call(proc.port, "DescribeInstances", {"RegionId": REGION}, token=TOKEN)
            self.assertEqual(r.status, 200, r)
        finally:
            self.assertEqual(proc.stop(), 0)  # SIGTERM: a clean exit
        self.assertNotIn(TOKEN, proc.stderr())
        self.assertNotIn(SECRET, proc.stderr())

    def test_listen_refuses_other_addresses(self):
        proc = FakeProcess("--listen", "0.0.0.0:0")  # the later --listen wins in argparse
        self.addCleanup(proc.cleanup)
        with self.assertRaises(RuntimeError):
            proc.start()
        self.assertEqual(proc.proc.returncode, 2)
        self.assertFalse(os.path.exists(proc.port_file))


class Parameters(FakeTestCase):
    def test_unknown_parameter_is_refused(self):
        for extra in ({"Bogus": "1"}, {"Tag.1.Colour": "red"}, {"Tag.0.Key": "k"}, {"SystemDisk.Colour": "x"}):
            self.assert_error(self.call("RunInstances", run_params(**extra)), 400, "InvalidParameter")
        self.assert_error(self.call("DeleteInstance", {"InstanceId": "i-x", "RegionId": REGION}),
                          400, "InvalidParameter")
        self.assertEqual(self.instances(), [])
        self.run_one(**{"Tag.1.Key": "k", "Tag.1.Value": "v", "SystemDisk.Category": "cloud_essd",
                        "SystemDisk.Size": "40", "Amount": "1"})
        self.assertEqual(self.instances()[0]["SystemDisk"], {"Category": "cloud_essd", "Size": "40"})

    def test_repeated_parameter_is_refused(self):
        r = self.call("DescribeInstances", [("RegionId", REGION), ("RegionId", REGION)])
        self.assert_error(r, 400, "InvalidParameter")

    def test_wrong_types_are_refused(self):
        for bad in ({"Amount": "1.5"}, {"Amount": "0"}, {"DeletionProtection": "yes"},
                    {"InternetMaxBandwidthOut": "many"}):
            self.assert_error(self.call("RunInstances", run_params(**bad)), 400, "InvalidParameter")
        self.assert_error(self.call("DescribeInstances", {"RegionId": REGION, "MaxResults": "0"}),
                          400, "InvalidParameter")
        self.assert_error(self.call("DescribeInstances", {"RegionId": REGION, "Status": "Sleeping"}),
                          404, "InvalidStatus.NotFound")
        self.assert_error(self.call("DescribeInstances", {"RegionId": REGION, "InstanceIds": "i-1,i-2"}),
                          400, "InvalidInstanceIds.Malformed")
        self.assert_error(self.call("DescribeInstances", {"RegionId": "xx-nowhere-1"}),
                          400, "InvalidRegionId.NotFound")
        self.assertEqual(self.instances(), [])

    def test_required_and_conditionally_required(self):
        self.assert_error(self.call("DescribeInstances", {}), 400, "MissingParameter")
        for missing in ("ImageId", "InstanceType", "SecurityGroupId"):
            params = run_params()
            del params[missing]
            r = self.call("RunInstances", params)
            self.assert_error(r, 400, "MissingParameter")
            self.assertIn(missing, r.body["Message"])
        params = run_params(ImageFamily="acs:ubuntu_22_04_x64")
        del params["ImageId"]
        self.ok("RunInstances", params)
        self.assert_error(self.call("RunInstances", run_params(ImageFamily="acs:ubuntu_22_04_x64")),
                          400, "UnexpectedImageFamily.ImageIdSupplied")
        self.ok("RunInstances", {"RegionId": REGION, "LaunchTemplateId": "lt-fake0001"})
        self.assert_error(self.call("RunInstances", run_params(**{"SecurityGroupIds.1": "sg-2"})),
                          400, "InvalidSecurityGroupId.SingleIdAndMultiIdConflict")
        self.assertEqual(len(self.instances()), 2)

    def test_user_data(self):
        marker = "MARKER-" + uuid.uuid4().hex
        good = base64.b64encode(f"#cloud-config\n# {marker}\n".encode()).decode()
        self.assert_error(self.call("RunInstances", run_params(UserData="not base64!")),
                          400, "InvalidUserData.Base64FormatInvalid")
        big = base64.b64encode(b"x" * 24600).decode()  # 32800 characters once encoded
        self.assertGreater(len(big), 32768)
        self.assert_error(self.call("RunInstances", run_params(UserData=big)),
                          400, "InvalidUserData.SizeExceeded")
        self.run_one(UserData=good, Password="Secret-Pa55!")
        [inst] = self.instances()
        self.assertEqual(inst["UserData"], good)
        self.assertNotIn("Password", inst["Parameters"])
        log_text = json.dumps(self.log())
        for hidden in (good, marker, "Secret-Pa55!", SECRET):
            self.assertNotIn(hidden, log_text)
            self.assertNotIn(hidden, self.proc.stderr())

    def test_dry_run(self):
        self.assert_error(self.call("RunInstances", run_params(DryRun="true")), 400, "DryRunOperation")
        self.assertEqual(self.instances(), [])


class Instances(FakeTestCase):
    def test_pending_then_running_with_fields(self):
        [iid] = self.run_one(InstanceName="node-1", HostName="node-1.example",
                             **{"Tag.1.Key": "cluster", "Tag.1.Value": "c1"})
        [inst] = self.describe()["Instances"]["Instance"]
        self.assertEqual((inst["InstanceId"], inst["Status"]), (iid, "Pending"))
        time.sleep(START_AFTER + 0.1)
        [inst] = self.describe()["Instances"]["Instance"]
        self.assertEqual(inst["Status"], "Running")
        self.assertEqual(inst["ZoneId"], REGION + "-a")
        self.assertEqual(inst["HostName"], "node-1.example")
        self.assertEqual(inst["VpcAttributes"]["VSwitchId"], "vsw-fake0001")
        self.assertEqual(inst["VpcAttributes"]["PrivateIpAddress"]["IpAddress"], ["10.77.0.100"])
        [nic] = inst["NetworkInterfaces"]["NetworkInterface"]
        self.assertRegex(nic["MacAddress"], r"^00:16:3e:[0-9a-f]{2}:[0-9a-f]{2}:[0-9a-f]{2}$")
        self.assertEqual(nic["PrimaryIpAddress"], "10.77.0.100")
        self.assertEqual(nic["Type"], "Primary")
        self.assertEqual(inst["Tags"]["Tag"], [{"TagKey": "cluster", "TagValue": "c1"}])
        [iid2] = self.run_one()
        self.assertEqual(self.instances()[1]["PrivateIpAddress"], "10.77.0.101")

    def test_responses_fit_the_metadata(self):
        with open(SPEC, encoding="utf-8") as f:
            apis = json.load(f)["apis"]

        def walk(value, schema, path):
            kinds = {"string": str, "integer": int, "number": (int, float), "boolean": bool,
                     "array": list, "object": dict}
            self.assertIsInstance(value, kinds[schema["type"]], path)
            if schema["type"] == "object":
                for k, v in value.items():
                    self.assertIn(k, schema["properties"], f"{path}.{k}")
                    walk(v, schema["properties"][k], f"{path}.{k}")
            elif schema["type"] == "array":
                for i, v in enumerate(value):
                    walk(v, schema["items"], f"{path}[{i}]")

        ran = self.ok("RunInstances", run_params(**{"Tag.1.Key": "a", "Tag.1.Value": "b"}))
        walk(ran, apis["RunInstances"]["responses"]["200"]["schema"], "RunInstances")
        self.assertEqual(set(ran), {"RequestId", "InstanceIdSets", "OrderId", "TradePrice"})
        for params in ({}, {"MaxResults": "10"}):
            described = self.describe(**params)
            walk(described, apis["DescribeInstances"]["responses"]["200"]["schema"], "DescribeInstances")
        [inst] = described["Instances"]["Instance"]
        for field in ("InstanceId", "InstanceName", "HostName", "Status", "RegionId", "ZoneId",
                      "InstanceType", "ImageId", "CreationTime", "VpcAttributes", "NetworkInterfaces", "Tags"):
            self.assertIn(field, inst)
        self.assertEqual(set(inst["VpcAttributes"]) >= {"VpcId", "VSwitchId", "PrivateIpAddress"}, True)
        status = self.ok("DescribeInstanceStatus", {"RegionId": REGION})
        walk(status, apis["DescribeInstanceStatus"]["responses"]["200"]["schema"], "DescribeInstanceStatus")

    def test_client_token_idempotency(self):
        first = self.run_one(ClientToken="tok-1", Amount="2")
        again = self.run_one(ClientToken="tok-1", Amount="2")
        self.assertEqual(first, again)
        self.assertEqual(len(self.instances()), 2)
        self.assert_error(self.call("RunInstances", run_params(ClientToken="tok-1", Amount="3")),
                          400, "IdempotentParameterMismatch")
        self.assertEqual(len(self.instances()), 2)
        self.assertEqual({i["ClientToken"] for i in self.instances()}, {"tok-1"})
        self.assert_error(self.call("RunInstances", run_params(ClientToken="x" * 65)),
                          400, "InvalidClientToken.ValueNotSupported")

    def test_tags_kept_and_filtered(self):
        [a] = self.run_one(InstanceName="a", **{"Tag.1.Key": "cluster", "Tag.1.Value": "c1",
                                                "Tag.2.Key": "role", "Tag.2.Value": "worker"})
        [b] = self.run_one(InstanceName="b", **{"Tag.1.Key": "cluster", "Tag.1.Value": "c2"})
        seeded = self.proc.control("POST", "instances", {
            "RegionId": REGION, "InstanceName": "other-cluster-node", "Tags": {"cluster": "c1"}})
        self.assertEqual(seeded.status, 201, seeded)
        c = seeded.body["InstanceId"]
        self.assertEqual(seeded.body["Status"], "Running")

        def ids(**tags):
            found = self.describe(**tags)["Instances"]["Instance"]
            return [i["InstanceId"] for i in found]
        self.assertEqual(ids(**{"Tag.1.Key": "cluster", "Tag.1.Value": "c1"}), [a, c])
        self.assertEqual(ids(**{"Tag.1.Key": "cluster", "Tag.1.Value": "c1",
                                "Tag.2.Key": "role", "Tag.2.Value": "worker"}), [a])
        self.assertEqual(ids(**{"Tag.1.Key": "cluster"}), [a, b, c])
        self.assertEqual(ids(**{"Tag.1.Key": "cluster", "Tag.1.Value": "c3"}), [])
        self.assertEqual(self.instances()[0]["Tags"], [{"Key": "cluster", "Value": "c1"},
                                                       {"Key": "role", "Value": "worker"}])
        self.assert_error(self.call("RunInstances", run_params(**{"Tag.1.Key": "k", "Tag.2.Key": "k"})),
                          400, "Duplicate.TagKey")
        self.assert_error(self.call("RunInstances", run_params(**{"Tag.1.Key": "aliyun-x"})),
                          400, "InvalidTagKey.Malformed")

    def test_other_filters(self):
        [a] = self.run_one(InstanceName="web-1", VSwitchId="vsw-a")
        [b] = self.run_one(InstanceName="web-2", VSwitchId="vsw-b")
        [c] = self.run_one(InstanceName="db-1", VSwitchId="vsw-a")

        def ids(**params):
            return [i["InstanceId"] for i in self.describe(**params)["Instances"]["Instance"]]
        self.assertEqual(ids(InstanceName="web-*"), [a, b])
        self.assertEqual(ids(InstanceName="*-1"), [a, c])
        self.assertEqual(ids(VSwitchId="vsw-a"), [a, c])
        self.assertEqual(ids(InstanceIds=json.dumps([c, a, "i-unknown"])), [a, c])
        self.assertEqual(ids(Status="Pending"), [a, b, c])
        self.assertEqual(ids(Status="Running"), [])
        self.assertEqual(self.describe(RegionId="cn-beijing")["Instances"]["Instance"], [])
        self.assert_error(self.call("DescribeInstances", {"RegionId": REGION, "PrivateIpAddresses": "[]"}),
                          400, "NotImplementedInFake")

    def test_paging_returns_each_instance_once(self):
        created = self.run_one(Amount="25")
        self.assertEqual(len(created), 25)
        seen, token, pages = [], None, 0
        while True:
            pages += 1
            self.assertLess(pages, 10)
            params = {"MaxResults": "10"}
            if token:
                params["NextToken"] = token
            page = self.describe(**params)
            seen += [i["InstanceId"] for i in page["Instances"]["Instance"]]
            token = page["NextToken"]
            if not token:
                break
        self.assertEqual(pages, 3)
        self.assertEqual(seen, created)
        self.assertEqual(len(set(seen)), 25)
        self.assert_error(self.call("DescribeInstances", {"RegionId": REGION, "NextToken": "bogus"}),
                          400, "InvalidParameter.NextToken")
        numbered = []
        for number in (1, 2, 3, 4):
            page = self.describe(PageNumber=str(number), PageSize="10")
            self.assertEqual(page["TotalCount"], 25)
            numbered += [i["InstanceId"] for i in page["Instances"]["Instance"]]
        self.assertEqual(numbered, created)
        self.assert_error(self.call("DescribeInstances", {"RegionId": REGION, "MaxResults": "10",
                                                          "PageNumber": "1"}), 400, "InvalidParameter")

    def test_next_token_survives_changes_between_pages(self):
        created = self.run_one(Amount="12")
        first = self.describe(MaxResults="10")
        self.ok("DeleteInstances", {"RegionId": REGION, "InstanceId.1": created[0], "Force": "true"})
        [late] = self.run_one()
        second = self.describe(MaxResults="10", NextToken=first["NextToken"])
        self.assertEqual([i["InstanceId"] for i in second["Instances"]["Instance"]], created[10:] + [late])
        self.assertEqual(second["NextToken"], "")

    def test_force_semantics(self):
        running = self.proc.control("POST", "instances", {"RegionId": REGION, "Status": "Running"}).body
        r = self.call("DeleteInstance", {"InstanceId": running["InstanceId"]})
        self.assert_error(r, 403, "IncorrectInstanceStatus")
        r = self.call("DeleteInstances", {"RegionId": REGION, "InstanceId.1": running["InstanceId"]})
        self.assert_error(r, 403, "IncorrectInstanceStatus")
        self.assertEqual(len(self.instances()), 1)
        self.ok("DeleteInstance", {"InstanceId": running["InstanceId"], "Force": "true"})
        self.assertEqual(self.instances(), [])
        self.assert_error(self.call("DeleteInstance", {"InstanceId": running["InstanceId"], "Force": "true"}),
                          404, "InvalidInstanceId.NotFound")

        [a, b] = self.run_one(Amount="2")
        r = self.call("DeleteInstances", {"RegionId": REGION, "InstanceId.1": a, "InstanceId.2": "i-nope",
                                          "Force": "true"})
        self.assert_error(r, 404, "InvalidInstanceId.NotFound")
        self.assertEqual(len(self.instances()), 2)  # nothing deleted
        self.assert_error(self.call("DeleteInstances", {"RegionId": "cn-beijing", "InstanceId.1": a,
                                                        "Force": "true"}), 404, "InvalidInstanceId.NotFound")
        self.assert_error(self.call("DeleteInstances", {"RegionId": REGION, "InstanceId.1": a,
                                                        "Force": "true", "DryRun": "true"}), 400, "DRYRUN.SUCCESS")
        self.ok("DeleteInstances", {"RegionId": REGION, "InstanceId.1": a, "InstanceId.2": b,
                                    "Force": "true", "ClientToken": "del-1"})
        self.assertEqual(self.instances(), [])
        self.ok("DeleteInstances", {"RegionId": REGION, "InstanceId.1": a, "InstanceId.2": b,
                                    "Force": "true", "ClientToken": "del-1"})  # a retry

    def test_stop_start_and_delete_stopped(self):
        iid = self.proc.control("POST", "instances", {"RegionId": REGION}).body["InstanceId"]
        self.ok("StopInstance", {"InstanceId": iid})
        self.assertEqual(self.instances()[0]["Status"], "Stopping")
        self.assert_error(self.call("StartInstance", {"InstanceId": iid}), 403, "IncorrectInstanceStatus")
        self.wait_until(lambda: self.instances()[0]["Status"] == "Stopped", "Stopped")
        self.ok("StartInstance", {"InstanceId": iid})
        self.wait_until(lambda: self.instances()[0]["Status"] == "Running", "Running")
        self.ok("StopInstance", {"InstanceId": iid})
        self.wait_until(lambda: self.instances()[0]["Status"] == "Stopped", "Stopped")
        self.ok("DeleteInstance", {"InstanceId": iid})  # no Force needed when Stopped
        self.assertEqual(self.instances(), [])

    def test_deletion_protection(self):
        [iid] = self.run_one(DeletionProtection="true")
        self.assert_error(self.call("DeleteInstance", {"InstanceId": iid, "Force": "true"}),
                          403, "InvalidOperation.DeletionProtection")


class FirstIp(FakeTestCase):
    fake_args = ("--first-ip", "127.81.0.100")

    def test_addresses_start_at_first_ip_and_again_after_reset(self):
        self.run_one()
        self.run_one()
        self.assertEqual([i["PrivateIpAddress"] for i in self.instances()], ["127.81.0.100", "127.81.0.101"])
        self.assertEqual(self.proc.control("POST", "reset").status, 200)
        self.run_one()
        self.assertEqual([i["PrivateIpAddress"] for i in self.instances()], ["127.81.0.100"])


class Faults(FakeTestCase):
    def test_inject_throttling_then_success(self):
        r = self.proc.control("POST", "inject", {"action": "RunInstances", "code": "Throttling.User",
                                                 "status": 400, "count": 2, "retryAfter": 1})
        self.assertEqual(r.status, 200, r)
        for _ in range(2):
            r = self.call("RunInstances", run_params(ClientToken="t-1"))
            self.assert_error(r, 400, "Throttling.User")
            self.assertEqual(r.headers.get("retry-after"), "1")
        self.describe()  # another action is not affected
        self.assertEqual(self.instances(), [])
        self.run_one(ClientToken="t-1")
        self.assertEqual(len(self.instances()), 1)
        self.assertEqual([e["code"] for e in self.log()], ["Throttling.User", "Throttling.User", None, None])

    def test_inject_any_action(self):
        self.proc.control("POST", "inject", {"action": "*", "code": "ServiceUnavailable", "count": 1})
        self.assert_error(self.call("DescribeInstances", {"RegionId": REGION}), 503, "ServiceUnavailable")
        self.describe()

    def test_hold_then_release(self):
        self.proc.control("POST", "hold", {"action": "RunInstances", "count": 1})
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("r", self.call("RunInstances", run_params())))
        t.start()
        self.wait_until(lambda: self.proc.control("GET", "held").body["held"] == 1, "a held reply")
        self.assertEqual(len(self.instances()), 1)  # performed before the reply
        self.assertNotIn("r", result)
        self.describe()  # other requests are served meanwhile
        self.assertEqual(self.proc.control("POST", "release").body, {"released": 1})
        t.join(5)
        self.assertEqual(result["r"].status, 200)
        self.assertEqual(result["r"].body["InstanceIdSets"]["InstanceIdSet"], [self.instances()[0]["InstanceId"]])
        self.assertEqual(self.log()[0]["heldOutcome"], "released")

    def test_hold_only_a_request_with_the_parameter(self):
        [iid] = self.run_one()
        self.proc.control("POST", "hold", {"action": "DescribeInstances", "withParameter": "InstanceIds"})
        self.describe()  # without InstanceIds: not held
        result = {}
        by_id = {"RegionId": REGION, "InstanceIds": json.dumps([iid])}
        t = threading.Thread(target=lambda: result.setdefault("r", self.call("DescribeInstances", by_id)))
        t.start()
        self.wait_until(lambda: self.proc.control("GET", "held").body["held"] == 1, "a held reply")
        self.assertNotIn("r", result)
        self.assertEqual(self.proc.control("POST", "release").body, {"released": 1})
        t.join(5)
        self.assertEqual(result["r"].status, 200)
        self.assertEqual(result["r"].body["Instances"]["Instance"][0]["InstanceId"], iid)
        r = self.proc.control("POST", "hold", {"action": "DescribeInstances", "withParameter": 7})
        self.assertEqual(r.status, 400)

    def test_hold_and_client_killed_leaves_the_instance(self):
        self.proc.control("POST", "hold", {"action": "RunInstances", "count": 1})
        client = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--send", str(self.port), "RunInstances",
             json.dumps(run_params(ClientToken="crash-1", InstanceName="survivor"))],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            self.wait_until(lambda: self.proc.control("GET", "held").body["held"] == 1, "a held reply")
        finally:
            os.kill(client.pid, signal.SIGKILL)
            out, _ = client.communicate(timeout=5)
        self.assertEqual(out, b"")  # it never saw a reply
        self.wait_until(lambda: self.log()[0].get("heldOutcome") == "client-disconnected", "the disconnect")
        self.assertEqual(self.proc.control("GET", "held").body["held"], 0)
        [inst] = self.instances()
        self.assertEqual((inst["InstanceName"], inst["ClientToken"]), ("survivor", "crash-1"))
        # the retry with the same token finds it instead of creating another
        self.assertEqual(self.run_one(ClientToken="crash-1", InstanceName="survivor"), [inst["InstanceId"]])
        self.assertEqual(len(self.instances()), 1)


def send_once(port, action, params_json):
    r = call(int(port), action, json.loads(params_json))
    print(r.status, json.dumps(r.body), flush=True)
    return 0 if r.status == 200 else 1


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--send":
        sys.exit(send_once(*sys.argv[2:]))
    unittest.main()
