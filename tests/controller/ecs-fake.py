#!/usr/bin/env python3
"""A stateful fake of the Alibaba Cloud ECS RPC API (2014-05-26), for tests.

Standard library only, so that its signature check is an implementation
independent of the Rust one. It verifies every request's signature, checks
every parameter against Alibaba's OpenAPI metadata, keeps instances in memory
and answers with Alibaba's JSON shapes.

Start (tests/controller/ecs-fake-test.py shows it):

    python3 tests/controller/ecs-fake.py \\
        --spec "$SPECS_DIR/alibaba-ecs/api-docs.json" \\
        --access-key-id LTAI-fake --secret-file secret.txt \\
        [--security-token-file token.txt] \\
        --listen 127.0.0.1:0 --port-file port.txt \\
        [--start-after 1.0] [--stop-after 0.5] [--delete-after 0] \\
        [--max-skew 900] [--max-hold 300] [--allow-v1] \\
        [--userdata-limit encoded|decoded] [--state state.json] \\
        [--first-ip 10.77.0.100]

SPECS_DIR defaults to the repository's ../shared/specs. The port file is
written (atomically) once the socket is bound. Only 127.0.0.1 is accepted as
the listen address, unless --in-netns says the caller started the fake inside
a network namespace of its own (then any IPv4 address of that namespace). SIGTERM and SIGINT stop it cleanly (exit 0). The secret
and the security token are read from files (one trailing newline is dropped)
and never printed; request logs elide UserData, Password and a v1
SecurityToken parameter.

API: `GET|POST /` with `x-acs-action`, signed with ACS3-HMAC-SHA256 (below).
The action's parameters may be in the query string, in an
application/x-www-form-urlencoded body, or split between them (a name in both
is refused). Actions implemented: RunInstances, DescribeInstances,
DeleteInstance, DeleteInstances, StopInstance, StartInstance,
DescribeInstanceStatus. Any other action of the metadata gets
400 NotImplementedInFake; an action not in the metadata gets
404 InvalidAction.NotFound.

Behaviour:
- Instances are Pending for --start-after seconds of wall time, then Running
  (worked out when a request arrives: no background thread). StopInstance:
  Stopping for --stop-after, then Stopped; StartInstance: Starting for
  --start-after, then Running. Deletion is immediate, or via Stopping for
  --delete-after seconds when that is > 0.
- RunInstances: ZoneId defaults to <RegionId>-a; private IPs from --first-ip
  (default 10.77.0.100) upward (a field only; a test that speaks for an
  instance from its address gives a loopback one, e.g. 127.81.0.100), MACs 00:16:3e:xx:xx:xx from a counter; Tag.N kept;
  ClientToken: same token and same parameters -> the same InstanceIdSets and
  nothing created, other parameters -> 400 IdempotentParameterMismatch.
  ImageId (or ImageFamily), InstanceType and SecurityGroupId (or
  SecurityGroupIds.N) are required unless LaunchTemplateId/LaunchTemplateName
  is given. PrivateIpAddress, NetworkInterface.N.*, Ipv6Address.N and
  Ipv6AddressCount get 400 NotImplementedInFake; other parameters are checked
  and recorded.
- UserData must be valid base64 and at most 32768 bytes long as sent (the
  base64 text: --userdata-limit encoded, the default, the stricter reading)
  or once decoded (--userdata-limit decoded: what the metadata's description
  says, "before Base64 encoding ... no more than 32 KB").
- DescribeInstances: RegionId required; filters InstanceIds (a JSON array
  string), InstanceName (* wildcard), Status, VSwitchId, VpcId, ZoneId,
  ImageId, InstanceType, SecurityGroupId, Tag.N.Key/Tag.N.Value (AND; a Key
  without Value matches any value); other filters of the metadata get
  400 NotImplementedInFake rather than being ignored. Paging either with
  MaxResults+NextToken (tokens are opaque, tied to the filters; the last page
  has NextToken "") or with PageNumber/PageSize (mixing them is refused).
  Instances are listed in creation order.
- DeleteInstance/DeleteInstances: Force=true is needed unless the instance is
  Stopped (else 403 IncorrectInstanceStatus); DeletionProtection -> 403
  InvalidOperation.DeletionProtection; unknown ids (or ids of another region)
  -> 404 InvalidInstanceId.NotFound; DeleteInstances checks every id before
  deleting any and honours ClientToken like RunInstances.
- DryRun=true: RunInstances, DescribeInstances, DeleteInstance,
  Stop/StartInstance -> 400 DryRunOperation; DeleteInstances -> 400
  DRYRUN.SUCCESS (both codes are in the metadata).
- Every 200 response is checked against the action's response schema in the
  metadata before it is sent (a mismatch is a fake bug: 500 InternalError).

Parameter checks (from the metadata, for the implemented actions): names
are expanded from each parameter's `style` and schema: a `repeatList` array
of scalars is `Name.N`, of objects `Name.N.Prop` (nested arrays
`Name.N.Prop.M`), a `flat` object is `Name.Prop`, a `flat` array of objects
`Name.N.Prop`, a `json` parameter is one JSON text. N starts at 1 and may not
exceed maxItems. Unknown names -> 400 InvalidParameter (the real ECS may
ignore them: the fake is stricter); integer/number/boolean syntax,
minimum/maximum, enum, maxLength, pattern -> 400 InvalidParameter; required
ones missing or empty -> 400 MissingParameter. Note that DeleteInstance's
metadata has no RegionId parameter, so sending one is refused.

Authentication (ACS3-HMAC-SHA256, Alibaba's "V3 request structure and
signature", https://help.aliyun.com/zh/sdk/product-overview/v3-request-structure-and-signature):
  CanonicalRequest = METHOD \\n "/" \\n CanonicalQueryString \\n
                     CanonicalHeaders \\n SignedHeaders \\n hex(sha256(body))
  StringToSign     = "ACS3-HMAC-SHA256\\n" + hex(sha256(CanonicalRequest))
  Signature        = hex(hmac_sha256(secret, StringToSign))
  Authorization: ACS3-HMAC-SHA256 Credential=<AccessKeyId>,SignedHeaders=<a;b>,Signature=<hex>
CanonicalQueryString: the query parameters percent-encoded (all but
A-Za-z0-9-_.~, space as %20, UTF-8), sorted by name, `name=value` joined by
`&`. The body (form parameters) is covered only through
x-acs-content-sha256. CanonicalHeaders: the signed headers, lower-case,
sorted, `name:trimmed value\\n`. Required headers: host, x-acs-action,
x-acs-version (2014-05-26), x-acs-date (yyyy-MM-ddTHH:mm:ssZ, within
--max-skew seconds, default 900 = 15 min, of the fake's clock),
x-acs-signature-nonce (never seen before), x-acs-content-sha256 (must equal
the body's hash). SignedHeaders must be lower-case, sorted, and include those
and every x-acs-* and content-type header present. With
--security-token-file, x-acs-security-token must be present and equal;
without it, a token is refused. With --allow-v1, the legacy signature
(HMAC-SHA1 `Signature` parameter, SignatureMethod=HMAC-SHA1,
SignatureVersion=1.0, SignatureNonce, Timestamp, key = secret + "&") is also
accepted.

Error body: {"RequestId", "HostId", "Code", "Message", "Recommend"}, the
shape shown in "Troubleshoot API error codes" for ECS,
https://help.aliyun.com/en/ecs/developer-reference/error-code-error-code-troubleshooting-ideas
(also https://alibabacloud.com/help/doc-detail/40644.htm).

Codes and HTTP statuses, and where they were confirmed:
- From the Ecs 2014-05-26 metadata (errorCodes of the action or of other ECS
  actions): 400 MissingParameter, 400 InvalidParameter,
  403 IncorrectInstanceStatus (DeleteInstance/DeleteInstances/StopInstance;
  403, not 400), 404 InvalidInstanceId.NotFound, 403
  InvalidOperation.DeletionProtection, 400 InvalidUserData.SizeExceeded,
  400 InvalidUserData.Base64FormatInvalid, 400 Throttling.User ("Request was
  denied due to user flow control."), 503 ServiceUnavailable, 403
  Forbidden.RAM, 400 DryRunOperation, 400 DRYRUN.SUCCESS, 400
  InvalidClientToken.ValueNotSupported, 400 InvalidTagKey.Malformed, 400
  InvalidTagValue.Malformed, 400 InvalidTag.Mismatch, 400 Duplicate.TagKey,
  400 UnexpectedImageFamily.ImageIdSupplied, 400
  InvalidSecurityGroupId.SingleIdAndMultiIdConflict, 403
  InvalidHostname.SingleAndMultiConflict, 403 InvalidHostname.SizeInvalid,
  400 InvalidRegionId.NotFound, 404 InvalidStatus.NotFound, 400
  InvalidInstanceIds.Malformed, 400 InvalidParameter.NextToken.
- Gateway codes from Alibaba's public-error tables
  (https://developer.aliyun.com/ask/278265 "管控OpenAPI的客户端公用错误码";
  https://help.aliyun.com/zh/polardb/client-error-codes): 404
  InvalidAccessKeyId.NotFound "Specified access key is not found.", 400
  SignatureDoesNotMatch "Specified signature is not matched with our
  calculation.", 400 SignatureNonceUsed "Specified signature nonce was used
  already.", 400 InvalidTimeStamp.Expired, 400 InvalidTimeStamp.Format, 400
  IncompleteSignature, 400 InvalidSignatureMethod, 400 UnsupportedHTTPMethod
  (the polardb page says 403).
- IdempotentParameterMismatch 400 "The request is retried with updated
  parameters." is in ECS's old common-error page
  (https://developer.aliyun.com/ask/209782); some actions' metadata list it
  with 403 (not RunInstances').
- Guesses (code names seen in Alibaba SDK and Terraform code, statuses not
  confirmed): 404 InvalidAction.NotFound with "Specified api is not found,
  please check your url and method" (message from the SMS docs, status from
  third-party code), 400 MissingSecurityToken, 400
  InvalidSecurityToken.MismatchWithAccessKey, 400 InvalidVersion, a missing
  x-acs-* header as 400 MissingParameter naming the header, a body not
  matching x-acs-content-sha256 as 400 SignatureDoesNotMatch (with a message
  saying so). 400 NotImplementedInFake is the fake's own.
- Not confirmed from docs: that the real API refuses unknown parameter names
  (the fake does); the exact UserData limit (see above).

Control API (unsigned, only for tests; the fake binds 127.0.0.1 only):
  GET  /_fake/instances  all instances with every recorded field (ClientToken,
                         Tags, UserData, Parameters, ...), in creation order
  POST /_fake/instances  seed one: JSON {"RegionId": .., "InstanceName": ..,
                         "Tags": [{"Key","Value"}] or {"k": "v"}, "Status":
                         "Running", ...}; returns it (201)
  GET  /_fake/requests   the request log: action, parameters (UserData and
                         Password elided), signatureVersion,
                         signatureVerified, status, code, held outcome
  POST /_fake/inject     {"action": "RunInstances"|"*", "code":
                         "Throttling.User", "status": 400, "count": N,
                         "retryAfter"?: seconds, "message"?: ..}: the next N
                         matching requests, once authenticated, fail so
                         before doing anything (their nonce is used up)
  POST /_fake/hold       {"action": "RunInstances"|"*", "count": 1,
                         "withParameter"?: "InstanceIds"}: the next
                         matching authenticated request (with that
                         parameter, when given) is performed, then
                         its reply waits for POST /_fake/release, the client
                         going away, or --max-hold seconds (default 300)
  GET  /_fake/held       {"held": number of replies waiting now}
  POST /_fake/release    sends every held reply; {"released": n}
  POST /_fake/reset      forgets instances, tokens, nonces, log, injections
"""

import argparse
import base64
import binascii
import copy
import datetime
import hashlib
import hmac
import http.server
import ipaddress
import json
import os
import re
import secrets
import select
import signal
import socket
import sys
import threading
import time
import traceback
import urllib.parse
import uuid

API_VERSION = "2014-05-26"
ALGORITHM = "ACS3-HMAC-SHA256"
REQUIRED_V3_HEADERS = (
    "host",
    "x-acs-action",
    "x-acs-content-sha256",
    "x-acs-date",
    "x-acs-signature-nonce",
    "x-acs-version",
)
V1_COMMON = (
    "AccessKeyId", "Action", "Format", "SecurityToken", "Signature",
    "SignatureMethod", "SignatureNonce", "SignatureType", "SignatureVersion",
    "Timestamp", "Version",
)
IMPLEMENTED = (
    "RunInstances", "DescribeInstances", "DeleteInstance", "DeleteInstances",
    "StopInstance", "StartInstance", "DescribeInstanceStatus",
)
STATUSES = ("Pending", "Running", "Starting", "Stopping", "Stopped")
FIRST_IP = ipaddress.IPv4Address("10.77.0.100")
MAX_BODY = 1 << 20
MAX_LOG = 10000
MAX_TOKENS = 10000
USERDATA_LIMIT = 32768
UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")

# code -> (HTTP status, default message); see the module docstring for sources.
ERRORS = {
    "MissingParameter": (400, "The input parameter \"%s\" that is mandatory for processing this request is not supplied."),
    "InvalidParameter": (400, "The specified parameter \"%s\" is not valid."),
    "InvalidAction.NotFound": (404, "Specified api is not found, please check your url and method."),
    "InvalidVersion": (400, "Specified parameter Version is not valid."),
    "UnsupportedHTTPMethod": (400, "This http method is not supported."),
    "IncompleteSignature": (400, "The request signature does not conform to Aliyun standards."),
    "InvalidSignatureMethod": (400, "Specified signature method is not valid."),
    "InvalidAccessKeyId.NotFound": (404, "Specified access key is not found."),
    "InvalidTimeStamp.Format": (400, "Specified time stamp or date value is not well formatted."),
    "InvalidTimeStamp.Expired": (400, "Specified time stamp or date value is expired."),
    "SignatureDoesNotMatch": (400, "Specified signature is not matched with our calculation."),
    "SignatureNonceUsed": (400, "Specified signature nonce was used already."),
    "MissingSecurityToken": (400, "SecurityToken is mandatory for this action."),
    "InvalidSecurityToken.MismatchWithAccessKey": (400, "Specified SecurityToken mismatch with the AccessKey."),
    "Throttling": (400, "Request was denied due to request throttling."),
    "Throttling.User": (400, "Request was denied due to user flow control."),
    "Throttling.Api": (400, "Request was denied due to api flow control."),
    "ServiceUnavailable": (503, "The request has failed due to a temporary failure of the server."),
    "InternalError": (500, "The request processing has failed due to some unknown error, exception or failure."),
    "Forbidden.RAM": (403, "User not authorized to operate on the specified resource, or this API doesn't support RAM."),
    "IdempotentParameterMismatch": (400, "The request is retried with updated parameters."),
    "IncorrectInstanceStatus": (403, "The current status of the resource does not support this operation."),
    "InvalidInstanceId.NotFound": (404, "The specified InstanceId does not exist."),
    "InvalidOperation.DeletionProtection": (403, "The operation is not allowed due to deletion protection."),
    "InvalidUserData.SizeExceeded": (400, "The specified parameter \"UserData\" exceeds the size."),
    "InvalidUserData.Base64FormatInvalid": (400, "The specified UserData is not valid."),
    "InvalidClientToken.ValueNotSupported": (400, "The ClientToken provided is invalid."),
    "InvalidTagKey.Malformed": (400, "The specified Tag.n.Key is not valid."),
    "InvalidTagValue.Malformed": (400, "The specified Tag.n.Value is not valid."),
    "InvalidTag.Mismatch": (400, "The specified Tag.n.Key and Tag.n.Value are not match."),
    "Duplicate.TagKey": (400, "The Tag.N.Key contain duplicate key."),
    "UnexpectedImageFamily.ImageIdSupplied": (400, "The input parameter ImageFamily must be null when image id is set."),
    "InvalidSecurityGroupId.SingleIdAndMultiIdConflict": (400, "SecurityGroupId and SecurityGroupIds.N cannot both be set."),
    "InvalidHostname.SingleAndMultiConflict": (403, "HostName and HostNames.N cannot both be set."),
    "InvalidHostname.SizeInvalid": (403, "The number of HostNames.N must equal Amount."),
    "InvalidRegionId.NotFound": (400, "The specified RegionId does not exist."),
    "InvalidStatus.NotFound": (404, "The specified Status is not found."),
    "InvalidInstanceIds.Malformed": (400, "The specified instanceIds are not valid."),
    "InvalidParameter.NextToken": (400, "The specified parameter NextToken is not valid."),
    "DryRunOperation": (400, "Request validation has been passed with DryRun flag set."),
    "DRYRUN.SUCCESS": (400, "This request is a dryrun request with successful result."),
    "NotImplementedInFake": (400, "%s"),
}


class ApiError(Exception):
    def __init__(self, code, detail=None, status=None, message=None, headers=None):
        default_status, template = ERRORS.get(code, (400, "%s"))
        if message is None:
            message = template % detail if "%s" in template else template
            if detail is not None and "%s" not in template:
                message = f"{message} ({detail})"
        super().__init__(message)
        self.code = code
        self.status = status or default_status
        self.message = message
        self.headers = headers or {}


def percent_encode(text):
    """RFC 3986 with Alibaba's rules: everything but A-Za-z0-9-_.~ as %XX of UTF-8."""
    return "".join(chr(b) if b in UNRESERVED else "%%%02X" % b for b in text.encode("utf-8"))


def parse_pairs(raw):
    """Decodes a query string or a form body into (name, value) pairs."""
    try:
        return urllib.parse.parse_qsl(raw, keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError) as e:
        raise ApiError("InvalidParameter", message=f"The request is not well-formed UTF-8 form data ({e}).")


def canonical_query(pairs):
    encoded = sorted((percent_encode(k), percent_encode(v)) for k, v in pairs)
    return "&".join(f"{k}={v}" for k, v in encoded)


def parse_acs_date(value):
    try:
        d = datetime.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        raise ApiError("InvalidTimeStamp.Format")
    return d.replace(tzinfo=datetime.timezone.utc).timestamp()


class Credentials:
    def __init__(self, access_key_id, secret, security_token=None):
        self.access_key_id = access_key_id
        self.secret = secret
        self.security_token = security_token

    def __repr__(self):
        return f"Credentials({self.access_key_id!r}, <secret>)"


def verify_v3(method, path, raw_query, headers, body, creds, now, max_skew=900):
    """Checks an ACS3-HMAC-SHA256 request. `headers` maps lower-case names to
    lists of values. Returns {"accessKeyId", "nonce", "action", "date"} or
    raises ApiError. Pure: the nonce is checked for reuse by the caller."""
    auth = headers.get("authorization")
    if not auth or len(auth) != 1:
        raise ApiError("IncompleteSignature", "no Authorization header")
    algorithm, _, rest = auth[0].strip().partition(" ")
    if algorithm != ALGORITHM:
        raise ApiError("InvalidSignatureMethod", algorithm or "empty")
    fields = {}
    for part in rest.split(","):
        name, eq, value = part.strip().partition("=")
        if not eq or name in fields:
            raise ApiError("IncompleteSignature", "malformed Authorization header")
        fields[name] = value
    if set(fields) != {"Credential", "SignedHeaders", "Signature"}:
        raise ApiError("IncompleteSignature", "Authorization needs Credential, SignedHeaders and Signature")
    for name in REQUIRED_V3_HEADERS:
        if not headers.get(name) or not headers[name][0].strip():
            raise ApiError("MissingParameter", name)
    for name, values in headers.items():
        if len(values) > 1 and (name.startswith("x-acs-") or name in ("host", "content-type")):
            raise ApiError("IncompleteSignature", f"header {name} repeated")
    if fields["Credential"] != creds.access_key_id:
        raise ApiError("InvalidAccessKeyId.NotFound")
    date = parse_acs_date(headers["x-acs-date"][0].strip())
    if abs(now - date) > max_skew:
        raise ApiError("InvalidTimeStamp.Expired")
    if headers["x-acs-version"][0].strip() != API_VERSION:
        raise ApiError("InvalidVersion")
    signed = fields["SignedHeaders"].split(";")
    if signed != sorted(set(signed)) or any(h != h.lower() or not h for h in signed):
        raise ApiError("IncompleteSignature", "SignedHeaders must be lower-case, sorted and unique")
    must_sign = set(REQUIRED_V3_HEADERS) | {
        h for h in headers if h.startswith("x-acs-") or h == "content-type"
    }
    missing = sorted(must_sign - set(signed))
    if missing:
        raise ApiError("IncompleteSignature", "unsigned headers: " + ",".join(missing))
    absent = [h for h in signed if h not in headers]
    if absent:
        raise ApiError("IncompleteSignature", "signed headers not sent: " + ",".join(absent))
    body_hash = hashlib.sha256(body).hexdigest()
    if headers["x-acs-content-sha256"][0].strip() != body_hash:
        raise ApiError("SignatureDoesNotMatch",
                       message="The x-acs-content-sha256 header does not match the hash of the request body.")
    if path != "/":
        raise ApiError("InvalidAction.NotFound")
    canonical_headers = "".join(f"{h}:{headers[h][0].strip()}\n" for h in signed)
    canonical_request = "\n".join([
        method.upper(), "/", canonical_query(parse_pairs(raw_query)),
        canonical_headers, fields["SignedHeaders"], body_hash,
    ])
    string_to_sign = ALGORITHM + "\n" + hashlib.sha256(canonical_request.encode("utf-8")).hexdigest()
    expected = hmac.new(creds.secret.encode("utf-8"), string_to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, fields["Signature"]):
        raise ApiError("SignatureDoesNotMatch")
    token = headers.get("x-acs-security-token", [None])[0]
    if creds.security_token is not None:
        if token is None:
            raise ApiError("MissingSecurityToken")
        if not hmac.compare_digest(token.strip().encode(), creds.security_token.encode()):
            raise ApiError("InvalidSecurityToken.MismatchWithAccessKey")
    elif token is not None:
        raise ApiError("InvalidSecurityToken.MismatchWithAccessKey", "this AccessKey takes no SecurityToken")
    return {
        "accessKeyId": fields["Credential"],
        "nonce": headers["x-acs-signature-nonce"][0].strip(),
        "action": headers["x-acs-action"][0].strip(),
        "date": date,
    }


def verify_v1(method, pairs, creds, now, max_skew=900):
    """Checks a legacy HMAC-SHA1 (SignatureVersion 1.0) request given all its
    parameters (query and form body). Returns like verify_v3."""
    values = {}
    for k, v in pairs:
        if k in V1_COMMON and k in values:
            raise ApiError("InvalidParameter", k)
        values[k] = v
    for name in ("Action", "Version", "AccessKeyId", "Signature", "SignatureMethod",
                 "SignatureVersion", "SignatureNonce", "Timestamp"):
        if not values.get(name):
            raise ApiError("MissingParameter", name)
    if values["SignatureMethod"] != "HMAC-SHA1":
        raise ApiError("InvalidSignatureMethod")
    if values["SignatureVersion"] != "1.0":
        raise ApiError("InvalidParameter", "SignatureVersion")
    if values["AccessKeyId"] != creds.access_key_id:
        raise ApiError("InvalidAccessKeyId.NotFound")
    date = parse_acs_date(values["Timestamp"])
    if abs(now - date) > max_skew:
        raise ApiError("InvalidTimeStamp.Expired")
    if values["Version"] != API_VERSION:
        raise ApiError("InvalidVersion")
    query = canonical_query([(k, v) for k, v in pairs if k != "Signature"])
    string_to_sign = f"{method.upper()}&{percent_encode('/')}&{percent_encode(query)}"
    digest = hmac.new((creds.secret + "&").encode("utf-8"), string_to_sign.encode("utf-8"), hashlib.sha1).digest()
    if not hmac.compare_digest(base64.b64encode(digest).decode(), values["Signature"]):
        raise ApiError("SignatureDoesNotMatch")
    token = values.get("SecurityToken")
    if creds.security_token is not None:
        if token is None:
            raise ApiError("MissingSecurityToken")
        if not hmac.compare_digest(token.encode(), creds.security_token.encode()):
            raise ApiError("InvalidSecurityToken.MismatchWithAccessKey")
    elif token is not None:
        raise ApiError("InvalidSecurityToken.MismatchWithAccessKey", "this AccessKey takes no SecurityToken")
    return {"accessKeyId": values["AccessKeyId"], "nonce": values["SignatureNonce"],
            "action": values["Action"], "date": date}


# ---------------------------------------------------------------- metadata

class Action:
    def __init__(self, name, api):
        self.name = name
        self.methods = [m.upper() for m in api.get("methods") or ["get", "post"]]
        self.params = {}
        for p in api.get("parameters") or []:
            schema = p.get("schema") or {}
            entry = self.params.get(p["name"])
            if entry:  # the metadata repeats some (RegionId): merge
                entry["required"] = entry["required"] or bool(schema.get("required"))
                continue
            self.params[p["name"]] = {
                "style": p.get("style"), "schema": schema, "required": bool(schema.get("required")),
            }
        # names that take a suffix (Name.N..., Name.Prop...), longest first
        self.prefixes = sorted(
            (n for n, p in self.params.items()
             if p["schema"].get("type") in ("array", "object") and p["style"] != "json"),
            key=len, reverse=True)
        responses = api.get("responses") or {}
        self.response_schema = (responses.get("200") or {}).get("schema")


class Spec:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        info = doc.get("info") or {}
        if info.get("product") != "Ecs" or info.get("version") != API_VERSION or info.get("style") != "RPC":
            raise SystemExit(f"ecs-fake: {path} is not the Ecs {API_VERSION} RPC metadata")
        self.actions = {name: Action(name, api) for name, api in doc["apis"].items()}
        self.regions = {e["regionId"] for e in doc.get("endpoints") or []}

    def resolve(self, action, key):
        """The (parameter, leaf schema) a flattened name stands for, or None."""
        p = action.params.get(key)
        if p and (p["style"] == "json" or p["schema"].get("type") not in ("array", "object")):
            return key, p["schema"]
        for name in action.prefixes:
            if key.startswith(name + "."):
                leaf = self._walk(action.params[name]["schema"], key[len(name) + 1:].split("."), key)
                if leaf is not None:
                    return name, leaf
        return None

    def _walk(self, schema, tokens, key):
        kind = schema.get("type")
        if kind == "array":
            if not tokens or not re.fullmatch(r"[1-9][0-9]{0,5}", tokens[0]):
                return None
            limit = schema.get("maxItems")
            if limit is not None and int(tokens[0]) > int(limit):
                raise ApiError("InvalidParameter", key, message=f"The parameter \"{key}\" exceeds the {limit} items allowed.")
            return self._walk(schema.get("items") or {}, tokens[1:], key)
        if kind == "object":
            props = schema.get("properties") or {}
            if not tokens or tokens[0] not in props:
                return None
            return self._walk(props[tokens[0]], tokens[1:], key)
        return schema if not tokens else None

    @staticmethod
    def check_value(key, schema, value):
        kind = schema.get("type", "string")
        bad = lambda why: ApiError("InvalidParameter", key, message=f"The specified parameter \"{key}\" is not valid ({why}).")
        number = None
        if kind == "integer":
            if not re.fullmatch(r"-?[0-9]+", value):
                raise bad("expected an integer")
            number = int(value)
            bits = {"int32": 31, "int64": 63}.get(schema.get("format"), 63)
            if not -(1 << bits) <= number < (1 << bits):
                raise bad(f"out of {schema.get('format', 'int64')} range")
        elif kind == "number":
            try:
                number = float(value)
            except ValueError:
                raise bad("expected a number")
            if number != number or number in (float("inf"), float("-inf")):
                raise bad("expected a finite number")
        elif kind == "boolean":
            if value.lower() not in ("true", "false"):
                raise bad("expected true or false")
        elif kind in ("object", "array"):  # style json
            try:
                parsed = json.loads(value)
            except ValueError:
                raise bad("expected JSON text")
            if not isinstance(parsed, dict if kind == "object" else list):
                raise bad(f"expected a JSON {kind}")
        if number is not None:
            if schema.get("minimum") is not None and number < float(schema["minimum"]):
                raise bad(f"below the minimum {schema['minimum']}")
            if schema.get("maximum") is not None and number > float(schema["maximum"]):
                raise bad(f"above the maximum {schema['maximum']}")
        if schema.get("enum") is not None and value not in [str(e) for e in schema["enum"]]:
            raise bad("expected one of " + ", ".join(str(e) for e in schema["enum"]))
        if schema.get("maxLength") is not None and len(value) > int(schema["maxLength"]):
            raise bad(f"longer than {schema['maxLength']}")
        if schema.get("pattern"):
            try:
                pattern = re.compile(schema["pattern"])
            except re.error:
                pattern = None
            if pattern is not None and not pattern.fullmatch(value):
                raise bad("does not match " + schema["pattern"])

    def check_params(self, action, params):
        """Unknown names, then types and ranges, then required ones."""
        resolved = {}
        for key in params:
            r = self.resolve(action, key)
            if r is None:
                raise ApiError("InvalidParameter", key,
                               message=f"The parameter \"{key}\" is not a parameter of {action.name}.")
            resolved[key] = r
        for key, value in params.items():
            self.check_value(key, resolved[key][1], value)
        for name, p in action.params.items():
            if p["schema"].get("type") in ("array", "object") and p["style"] != "json":
                keys = [k for k in params if resolved[k][0] == name]
                if p["required"] and not keys:
                    raise ApiError("MissingParameter", name + (".N" if p["schema"]["type"] == "array" else ""))
                self._check_required_props(name, p["schema"], keys, params)
            elif p["required"] and not params.get(name, "").strip():
                raise ApiError("MissingParameter", name)

    @staticmethod
    def _check_required_props(name, schema, keys, params):
        if schema.get("type") != "array":
            return
        props = (schema.get("items") or {}).get("properties") or {}
        required = [k for k, v in props.items() if v.get("required")]
        if not required:
            return
        indexes = {k[len(name) + 1:].split(".")[0] for k in keys}
        for n in sorted(indexes, key=int):
            for prop in required:
                if f"{name}.{n}.{prop}" not in params:
                    raise ApiError("MissingParameter", f"{name}.{n}.{prop}")

    def check_response(self, action, body):
        if action.response_schema:
            check_shape(body, action.response_schema, action.name)


def check_shape(value, schema, path):
    """Raises AssertionError where `value` does not fit the metadata schema."""
    kind = schema.get("type")
    expect = {
        "string": str, "integer": int, "number": (int, float), "boolean": bool,
        "array": list, "object": dict,
    }.get(kind)
    if expect is None:
        return
    if isinstance(value, bool) and kind != "boolean" or not isinstance(value, expect):
        raise AssertionError(f"{path}: expected {kind}, got {type(value).__name__}")
    if kind == "object":
        props = schema.get("properties")
        if props is None:
            return
        for k, v in value.items():
            if k not in props:
                raise AssertionError(f"{path}.{k}: not in the metadata's response schema")
            check_shape(v, props[k], f"{path}.{k}")
    elif kind == "array":
        for i, v in enumerate(value):
            check_shape(v, schema.get("items") or {}, f"{path}[{i}]")


# ------------------------------------------------------------------- state

class Params:
    """Checked parameters of one request, with typed accessors."""

    def __init__(self, values):
        self.values = values

    def has(self, name):
        return self.values.get(name, "") != ""

    def str(self, name, default=None):
        v = self.values.get(name)
        return default if v is None or v == "" else v

    def int(self, name, default=None):
        v = self.str(name)
        return default if v is None else int(v)

    def bool(self, name, default=False):
        v = self.str(name)
        return default if v is None else v.lower() == "true"

    def indexed(self, name):
        """Name.N values, by N."""
        out = {}
        for k, v in self.values.items():
            m = re.fullmatch(re.escape(name) + r"\.([0-9]+)", k)
            if m:
                out[int(m.group(1))] = v
        return [out[n] for n in sorted(out)]

    def objects(self, name):
        """Name.N.Prop values as {N: {Prop: value}}."""
        out = {}
        for k, v in self.values.items():
            m = re.fullmatch(re.escape(name) + r"\.([0-9]+)\.([A-Za-z0-9]+)", k)
            if m:
                out.setdefault(int(m.group(1)), {})[m.group(2)] = v
        return dict(sorted(out.items()))

    def prefixed(self, prefix):
        return {k: v for k, v in self.values.items() if k.startswith(prefix)}


def fingerprint(params, exclude=("ClientToken",)):
    return json.dumps(sorted((k, v) for k, v in params.items() if k not in exclude))


def elide(params):
    out = {}
    for k, v in params.items():
        if k in ("UserData", "Password", "SecurityToken"):
            out[k] = f"<elided, {len(v)} characters>"
        else:
            out[k] = v
    return out


def minute_time(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


class Held:
    def __init__(self, entry):
        self.entry = entry
        self.read_fd, self.write_fd = os.pipe()

    def release(self):
        try:
            os.write(self.write_fd, b"x")
        except OSError:
            pass

    def close(self):
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


class Fake:
    """The whole state; every method is called with self.lock held."""

    def __init__(self, spec, creds, opts):
        self.spec = spec
        self.creds = creds
        self.opts = opts
        self.lock = threading.Lock()
        self.held = []
        self.reset()
        if opts.state and os.path.exists(opts.state):
            self.load(opts.state)

    def reset(self):
        for h in getattr(self, "held", []):
            h.release()
        self.instances = {}
        self.seq = 0
        self.ip_next = int(self.opts.first_ip)
        self.idempotency = {}
        self.nonces = {}
        self.tokens = {}
        self.log = []
        self.log_seq = 0
        self.injections = []
        self.holds = []

    # -- persistence (optional)
    def save(self):
        if not self.opts.state:
            return
        data = {"instances": list(self.instances.values()), "seq": self.seq,
                "ipNext": self.ip_next, "idempotency": [
                    {"key": list(k), **v} for k, v in self.idempotency.items()]}
        tmp = self.opts.state + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, self.opts.state)

    def load(self, path):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        self.instances = {i["InstanceId"]: i for i in data.get("instances", [])}
        self.seq = data.get("seq", 0)
        self.ip_next = data.get("ipNext", int(self.opts.first_ip))
        for item in data.get("idempotency", []):
            key = tuple(item.pop("key"))
            self.idempotency[key] = item

    # -- time
    def tick(self, now):
        """Applies the status changes that are due."""
        for iid in list(self.instances):
            inst = self.instances[iid]
            nxt = inst.get("_next")
            if nxt and now >= nxt[0]:
                if nxt[1] == "<deleted>":
                    del self.instances[iid]
                    continue
                inst["Status"] = nxt[1]
                inst["_next"] = None
                if nxt[1] == "Running":
                    inst["StartTime"] = minute_time(nxt[0])

    def remember_nonce(self, nonce, now):
        for n in [n for n, t in self.nonces.items() if t < now]:
            del self.nonces[n]
        if nonce in self.nonces:
            raise ApiError("SignatureNonceUsed")
        # a nonce can be replayed only while its date is acceptable
        self.nonces[nonce] = now + 2 * self.opts.max_skew + 60

    # -- request log
    def record(self, entry):
        self.log_seq += 1
        entry["seq"] = self.log_seq
        self.log.append(entry)
        del self.log[:-MAX_LOG]

    # -- the API
    def handle(self, method, path, raw_query, headers, body, now):
        """Returns (status, body, extra headers, log entry, hold?)."""
        entry = {"time": now, "method": method, "path": path, "action": None, "parameters": {},
                 "signatureVersion": None, "signatureVerified": False, "status": None, "code": None}
        request_id = str(uuid.uuid4()).upper()
        region = None
        hold = False
        try:
            self.tick(now)
            query_pairs = parse_pairs(raw_query)
            entry["parameters"] = elide(dict(query_pairs))

            def body_pairs():
                if not body:
                    return []
                content_type = (headers.get("content-type") or [""])[0].split(";")[0].strip().lower()
                if content_type != "application/x-www-form-urlencoded":
                    raise ApiError("InvalidParameter", message="The body must be application/x-www-form-urlencoded.")
                try:
                    text = body.decode("utf-8")
                except UnicodeDecodeError:
                    raise ApiError("InvalidParameter", message="The body is not UTF-8.")
                return parse_pairs(text)

            common = {}
            if self.opts.allow_v1 and "authorization" not in headers and any(
                    k == "Signature" for k, _ in query_pairs + body_pairs()):
                entry["signatureVersion"] = "v1"
                if path != "/":
                    raise ApiError("InvalidAction.NotFound")
                pairs = query_pairs + body_pairs()
                entry["parameters"] = elide(dict(pairs))
                auth = verify_v1(method, pairs, self.creds, now, self.opts.max_skew)
                if dict(pairs).get("Format", "JSON").upper() != "JSON":
                    raise ApiError("InvalidParameter", "Format", message="The fake answers JSON only (Format).")
                pairs = [(k, v) for k, v in pairs if k not in V1_COMMON]
            else:
                entry["signatureVersion"] = "v3"
                auth = verify_v3(method, path, raw_query, headers, body, self.creds, now, self.opts.max_skew)
                pairs = query_pairs + body_pairs()
                common = {"Action": auth["action"], "Version": API_VERSION}
            self.remember_nonce(auth["nonce"], now)
            entry["signatureVerified"] = True
            action_name = auth["action"]
            entry["action"] = action_name
            params = {}
            for k, v in pairs:
                if k in common:  # Action/Version repeated as parameters (v3): must agree
                    if v != common[k]:
                        raise ApiError("InvalidParameter", k)
                    continue
                if k in params:
                    raise ApiError("InvalidParameter", k, message=f"The parameter \"{k}\" is given more than once.")
                params[k] = v
            entry["parameters"] = elide(params)
            region = params.get("RegionId")
            self.take_injection(action_name)
            hold = self.take_hold(action_name, params)
            action = self.spec.actions.get(action_name)
            if action is None:
                raise ApiError("InvalidAction.NotFound")
            if method not in action.methods:
                raise ApiError("UnsupportedHTTPMethod")
            if action_name not in IMPLEMENTED:
                raise ApiError("NotImplementedInFake", f"The fake does not implement {action_name}.")
            self.spec.check_params(action, params)
            result = getattr(self, "do_" + action_name)(Params(params), now)
            result = {"RequestId": request_id, **result}
            try:
                self.spec.check_response(action, result)
            except AssertionError as e:
                print(f"ecs-fake: BUG: response of {action_name} does not fit the metadata: {e}",
                      file=sys.stderr, flush=True)
                raise ApiError("InternalError", message=f"Fake bug: the response does not fit the metadata: {e}")
            entry["status"] = 200
            return 200, result, {}, entry, hold
        except ApiError as e:
            err = e
        except Exception as e:  # a fake bug: answer it rather than drop the connection
            traceback.print_exc(file=sys.stderr)
            err = ApiError("InternalError", message=f"Fake bug: {type(e).__name__}: {e}")
        entry["status"] = err.status
        entry["code"] = err.code
        host = f"ecs.{region}.aliyuncs.com" if region and region in self.spec.regions else "ecs.aliyuncs.com"
        return err.status, {
            "RequestId": request_id,
            "HostId": host,
            "Code": err.code,
            "Message": err.message,
            "Recommend": f"https://api.aliyun.com/troubleshoot?q={err.code}&product=Ecs&requestId={request_id}",
        }, err.headers, entry, hold

    def take_injection(self, action):
        for rule in self.injections:
            if rule["count"] > 0 and rule["action"] in ("*", action):
                rule["count"] -= 1
                self.injections = [r for r in self.injections if r["count"] > 0]
                headers = {}
                if rule.get("retryAfter") is not None:
                    headers["Retry-After"] = str(rule["retryAfter"])
                raise ApiError(rule["code"], status=rule["status"], message=rule.get("message"), headers=headers)

    def take_hold(self, action, params):
        for rule in self.holds:
            if rule["count"] > 0 and rule["action"] in ("*", action) \
                    and (rule.get("withParameter") is None or rule["withParameter"] in params):
                rule["count"] -= 1
                self.holds = [r for r in self.holds if r["count"] > 0]
                return True
        return False

    def check_region(self, region):
        if region not in self.spec.regions:
            raise ApiError("InvalidRegionId.NotFound")

    def find(self, iid, region=None):
        inst = self.instances.get(iid)
        if inst is None or (region is not None and inst["RegionId"] != region):
            raise ApiError("InvalidInstanceId.NotFound", message=f"The specified InstanceId does not exist: {iid}.")
        return inst

    def idempotent(self, action, token, params, now):
        if not token:
            return None
        if len(token) > 64 or not token.isascii():
            raise ApiError("InvalidClientToken.ValueNotSupported")
        known = self.idempotency.get((action, token))
        if known is None:
            return None
        if known["fingerprint"] != fingerprint(params.values, ("ClientToken", "DryRun")):
            raise ApiError("IdempotentParameterMismatch")
        return copy.deepcopy(known["response"])

    def remember(self, action, token, params, response):
        if token:
            self.idempotency[(action, token)] = {
                "fingerprint": fingerprint(params.values, ("ClientToken", "DryRun")),
                "response": copy.deepcopy(response)}

    def allocate_ip(self):
        used = {i.get("PrivateIpAddress") for i in self.instances.values()}
        while True:
            ip = str(ipaddress.IPv4Address(self.ip_next))
            self.ip_next += 1
            if ip not in used:
                return ip

    def new_instance(self, fields, now):
        if fields.get("InstanceId") in self.instances:
            raise ApiError("InvalidParameter", "InstanceId", message="InstanceId already exists.")
        self.seq += 1
        seq = self.seq
        inst = {
            "InstanceId": fields.get("InstanceId") or "i-" + secrets.token_hex(10),
            "RegionId": fields["RegionId"],
            "ZoneId": fields.get("ZoneId") or fields["RegionId"] + "-a",
            "InstanceName": fields.get("InstanceName"),
            "HostName": fields.get("HostName"),
            "Description": fields.get("Description", ""),
            "ImageId": fields.get("ImageId"),
            "ImageFamily": fields.get("ImageFamily"),
            "InstanceType": fields.get("InstanceType"),
            "SecurityGroupIds": list(fields.get("SecurityGroupIds") or []),
            "VSwitchId": fields.get("VSwitchId"),
            "VpcId": fields.get("VpcId") or (
                "vpc-" + hashlib.sha256(fields["VSwitchId"].encode()).hexdigest()[:20]
                if fields.get("VSwitchId") else None),
            "PrivateIpAddress": fields.get("PrivateIpAddress") or self.allocate_ip(),
            "MacAddress": fields.get("MacAddress") or "00:16:3e:%02x:%02x:%02x" % (
                (seq >> 16) & 255, (seq >> 8) & 255, seq & 255),
            "NetworkInterfaceId": fields.get("NetworkInterfaceId") or "eni-" + secrets.token_hex(10),
            "SystemDisk": dict(fields.get("SystemDisk") or {}),
            "UserData": fields.get("UserData"),
            "Tags": [dict(t) for t in fields.get("Tags") or []],
            "ClientToken": fields.get("ClientToken"),
            "Status": fields.get("Status") or "Pending",
            "CreationTime": fields.get("CreationTime") or minute_time(now),
            "StartTime": fields.get("StartTime", ""),
            "DeletionProtection": bool(fields.get("DeletionProtection", False)),
            "InstanceChargeType": fields.get("InstanceChargeType") or "PostPaid",
            "InternetChargeType": fields.get("InternetChargeType") or "PayByTraffic",
            "KeyPairName": fields.get("KeyPairName", ""),
            "LaunchTemplateId": fields.get("LaunchTemplateId"),
            "LaunchTemplateName": fields.get("LaunchTemplateName"),
            "Parameters": dict(fields.get("Parameters") or {}),
            "Seeded": bool(fields.get("Seeded", False)),
            "_seq": seq,
            "_next": None,
        }
        if inst["InstanceName"] is None:
            inst["InstanceName"] = inst["InstanceId"]
        if inst["HostName"] is None:
            inst["HostName"] = "iZ" + inst["InstanceId"][2:] + "Z"
        if inst["Status"] == "Pending":
            inst["_next"] = [now + self.opts.start_after, "Running"]
        elif inst["Status"] == "Running" and not inst["StartTime"]:
            inst["StartTime"] = inst["CreationTime"]
        self.instances[inst["InstanceId"]] = inst
        return inst

    @staticmethod
    def public(inst):
        return {k: v for k, v in inst.items() if not k.startswith("_")}

    # -- actions
    def do_RunInstances(self, p, now):
        region = p.str("RegionId")
        self.check_region(region)
        for name in ("PrivateIpAddress", "Ipv6AddressCount"):
            if p.has(name):
                raise ApiError("NotImplementedInFake", f"The fake does not model {name}.")
        for prefix in ("NetworkInterface.", "Ipv6Address."):
            if p.prefixed(prefix):
                raise ApiError("NotImplementedInFake", f"The fake does not model {prefix}N.")
        template = p.has("LaunchTemplateId") or p.has("LaunchTemplateName")
        if p.has("ImageId") and p.has("ImageFamily"):
            raise ApiError("UnexpectedImageFamily.ImageIdSupplied")
        groups = p.indexed("SecurityGroupIds")
        if p.has("SecurityGroupId") and groups:
            raise ApiError("InvalidSecurityGroupId.SingleIdAndMultiIdConflict")
        hostnames = p.indexed("HostNames")
        if p.has("HostName") and hostnames:
            raise ApiError("InvalidHostname.SingleAndMultiConflict")
        if not template:
            if not p.has("ImageId") and not p.has("ImageFamily"):
                raise ApiError("MissingParameter", "ImageId")
            if not p.has("InstanceType"):
                raise ApiError("MissingParameter", "InstanceType")
            if not p.has("SecurityGroupId") and not groups:
                raise ApiError("MissingParameter", "SecurityGroupId")
        amount = p.int("Amount", 1)
        if hostnames and len(hostnames) != amount:
            raise ApiError("InvalidHostname.SizeInvalid")
        userdata = p.values.get("UserData")
        if userdata is not None:
            try:
                decoded = base64.b64decode(userdata.encode("ascii"), validate=True)
            except (binascii.Error, UnicodeEncodeError):
                raise ApiError("InvalidUserData.Base64FormatInvalid")
            size = len(userdata) if self.opts.userdata_limit == "encoded" else len(decoded)
            if size > USERDATA_LIMIT:
                raise ApiError("InvalidUserData.SizeExceeded")
        tags = self.check_tags(p.objects("Tag"))
        token = p.str("ClientToken")
        if p.bool("DryRun"):
            if token and (len(token) > 64 or not token.isascii()):
                raise ApiError("InvalidClientToken.ValueNotSupported")
            raise ApiError("DryRunOperation")
        again = self.idempotent("RunInstances", token, p, now)
        if again is not None:
            return again
        unique = p.bool("UniqueSuffix") and amount > 1
        recorded = {k: v for k, v in p.values.items() if k not in ("UserData", "Password")}
        ids = []
        for n in range(amount):
            suffix = "%03d" % (n + 1) if unique else ""
            name = p.str("InstanceName")
            host = hostnames[n] if hostnames else p.str("HostName")
            inst = self.new_instance({
                "RegionId": region,
                "ZoneId": p.str("ZoneId"),
                "InstanceName": name + suffix if name else None,
                "HostName": host + suffix if host and not hostnames else host,
                "Description": p.str("Description", ""),
                "ImageId": p.str("ImageId"),
                "ImageFamily": p.str("ImageFamily"),
                "InstanceType": p.str("InstanceType"),
                "SecurityGroupIds": [p.str("SecurityGroupId")] if p.has("SecurityGroupId") else groups,
                "VSwitchId": p.str("VSwitchId"),
                "SystemDisk": {k[len("SystemDisk."):]: v for k, v in p.prefixed("SystemDisk.").items()},
                "UserData": userdata,
                "Tags": tags,
                "ClientToken": token,
                "DeletionProtection": p.bool("DeletionProtection"),
                "InstanceChargeType": p.str("InstanceChargeType"),
                "InternetChargeType": p.str("InternetChargeType"),
                "KeyPairName": p.str("KeyPairName", ""),
                "LaunchTemplateId": p.str("LaunchTemplateId"),
                "LaunchTemplateName": p.str("LaunchTemplateName"),
                "Parameters": recorded,
            }, now)
            ids.append(inst["InstanceId"])
        response = {
            "OrderId": str(200000000000 + self.seq),
            "TradePrice": 0.0,
            "InstanceIdSets": {"InstanceIdSet": ids},
        }
        self.remember("RunInstances", token, p, response)
        self.save()
        return response

    @staticmethod
    def check_tags(objects):
        tags, seen = [], set()
        for _, tag in objects.items():
            key, value = tag.get("Key"), tag.get("Value")
            if key is None:
                if value is not None:
                    raise ApiError("InvalidTag.Mismatch")
                continue
            if (not key or len(key) > 128 or key.startswith("aliyun") or key.startswith("acs:")
                    or "http://" in key or "https://" in key):
                raise ApiError("InvalidTagKey.Malformed")
            value = value or ""
            if len(value) > 128 or "http://" in value or "https://" in value:
                raise ApiError("InvalidTagValue.Malformed")
            if key in seen:
                raise ApiError("Duplicate.TagKey")
            seen.add(key)
            tags.append({"Key": key, "Value": value})
        return tags

    DESCRIBE_HONOURED = {
        "RegionId", "InstanceIds", "InstanceName", "Status", "VSwitchId", "VpcId", "ZoneId",
        "ImageId", "InstanceType", "SecurityGroupId", "PageNumber", "PageSize", "NextToken",
        "MaxResults", "DryRun",
    }

    def do_DescribeInstances(self, p, now):
        for k in p.values:
            if k not in self.DESCRIBE_HONOURED and not k.startswith("Tag."):
                raise ApiError("NotImplementedInFake", f"The fake does not implement the filter {k}.")
        region = p.str("RegionId")
        self.check_region(region)
        ids = None
        if p.has("InstanceIds"):
            try:
                ids = json.loads(p.str("InstanceIds"))
            except ValueError:
                raise ApiError("InvalidInstanceIds.Malformed")
            if (not isinstance(ids, list) or len(ids) > 100
                    or not all(isinstance(i, str) for i in ids)):
                raise ApiError("InvalidInstanceIds.Malformed")
        status = p.str("Status")
        if status is not None and status not in STATUSES:
            raise ApiError("InvalidStatus.NotFound")
        tag_filters = []
        for _, t in p.objects("Tag").items():
            key = t.get("Key", t.get("key"))
            value = t.get("Value", t.get("value"))
            if key is None:
                raise ApiError("InvalidTag.Mismatch")
            tag_filters.append((key, value))
        if p.bool("DryRun"):
            raise ApiError("DryRunOperation")
        name_re = None
        if p.has("InstanceName"):
            name_re = re.compile(".*".join(re.escape(s) for s in p.str("InstanceName").split("*")), re.S)

        def matches(inst):
            if inst["RegionId"] != region:
                return False
            if ids is not None and inst["InstanceId"] not in ids:
                return False
            if name_re and not name_re.fullmatch(inst["InstanceName"] or ""):
                return False
            if status and inst["Status"] != status:
                return False
            for field in ("VSwitchId", "VpcId", "ZoneId", "ImageId", "InstanceType"):
                if p.has(field) and inst.get(field) != p.str(field):
                    return False
            if p.has("SecurityGroupId") and p.str("SecurityGroupId") not in inst["SecurityGroupIds"]:
                return False
            have = {t["Key"]: t["Value"] for t in inst["Tags"]}
            for key, value in tag_filters:
                if key not in have or (value is not None and have[key] != value):
                    return False
            return True

        found = sorted((i for i in self.instances.values() if matches(i)), key=lambda i: i["_seq"])
        token_mode = p.has("NextToken") or p.has("MaxResults")
        if token_mode and (p.has("PageNumber") or p.has("PageSize")):
            raise ApiError("InvalidParameter", message="The fake refuses NextToken/MaxResults mixed with PageNumber/PageSize.")
        if token_mode:
            filters = fingerprint(p.values, ("NextToken", "MaxResults", "DryRun"))
            after = 0
            if p.has("NextToken"):
                known = self.tokens.get(p.str("NextToken"))
                if known is None or known[0] != filters:
                    raise ApiError("InvalidParameter.NextToken")
                after = known[1]
            size = min(max(p.int("MaxResults", 10), 10), 100)
            rest = [i for i in found if i["_seq"] > after]
            page = rest[:size]
            next_token = ""
            if len(rest) > size:
                next_token = secrets.token_hex(16)
                self.tokens[next_token] = (filters, page[-1]["_seq"])
                while len(self.tokens) > MAX_TOKENS:
                    del self.tokens[next(iter(self.tokens))]
            return {"NextToken": next_token, "TotalCount": len(found),
                    "Instances": {"Instance": [self.render(i) for i in page]}}
        number = p.int("PageNumber", 1)
        size = p.int("PageSize", 10)
        page = found[(number - 1) * size:number * size]
        return {"PageNumber": number, "PageSize": size, "TotalCount": len(found),
                "Instances": {"Instance": [self.render(i) for i in page]}}

    @staticmethod
    def render(inst):
        ip = inst["PrivateIpAddress"]
        return {
            "InstanceId": inst["InstanceId"],
            "InstanceName": inst["InstanceName"] or "",
            "HostName": inst["HostName"] or "",
            "Description": inst["Description"] or "",
            "Status": inst["Status"],
            "RegionId": inst["RegionId"],
            "ZoneId": inst["ZoneId"],
            "InstanceType": inst["InstanceType"] or "",
            "ImageId": inst["ImageId"] or "",
            "CreationTime": inst["CreationTime"],
            "StartTime": inst["StartTime"] or "",
            "InstanceNetworkType": "vpc",
            "InstanceChargeType": inst["InstanceChargeType"],
            "InternetChargeType": inst["InternetChargeType"],
            "KeyPairName": inst["KeyPairName"] or "",
            "DeletionProtection": inst["DeletionProtection"],
            "IoOptimized": True,
            "OSType": "linux",
            "VpcAttributes": {
                "VpcId": inst["VpcId"] or "",
                "VSwitchId": inst["VSwitchId"] or "",
                "NatIpAddress": "",
                "PrivateIpAddress": {"IpAddress": [ip]},
            },
            "NetworkInterfaces": {"NetworkInterface": [{
                "Type": "Primary",
                "MacAddress": inst["MacAddress"],
                "PrimaryIpAddress": ip,
                "NetworkInterfaceId": inst["NetworkInterfaceId"],
                "PrivateIpSets": {"PrivateIpSet": [{"PrivateIpAddress": ip, "Primary": True}]},
            }]},
            "SecurityGroupIds": {"SecurityGroupId": list(inst["SecurityGroupIds"])},
            "InnerIpAddress": {"IpAddress": []},
            "PublicIpAddress": {"IpAddress": []},
            "OperationLocks": {"LockReason": []},
            "Tags": {"Tag": [{"TagKey": t["Key"], "TagValue": t["Value"]} for t in inst["Tags"]]},
        }

    def check_deletable(self, inst, force):
        if inst.get("_next") and inst["_next"][1] == "<deleted>":
            return
        if inst["DeletionProtection"]:
            raise ApiError("InvalidOperation.DeletionProtection")
        if inst["Status"] != "Stopped" and not force:
            raise ApiError("IncorrectInstanceStatus",
                           message=f"The current status of the resource does not support this operation "
                                   f"(instance {inst['InstanceId']} is {inst['Status']}; Force=true releases it).")

    def remove(self, inst, now):
        if self.opts.delete_after > 0:
            if inst["Status"] != "Stopped":
                inst["Status"] = "Stopping"
            inst["_next"] = [now + self.opts.delete_after, "<deleted>"]
        else:
            del self.instances[inst["InstanceId"]]

    def do_DeleteInstance(self, p, now):
        inst = self.find(p.str("InstanceId"))
        self.check_deletable(inst, p.bool("Force"))
        if p.bool("DryRun"):
            raise ApiError("DryRunOperation")
        if not inst.get("_next") or inst["_next"][1] != "<deleted>":
            self.remove(inst, now)
        self.save()
        return {}

    def do_DeleteInstances(self, p, now):
        region = p.str("RegionId")
        self.check_region(region)
        token = p.str("ClientToken")
        if p.bool("DryRun"):
            for iid in p.indexed("InstanceId"):
                self.check_deletable(self.find(iid, region), p.bool("Force"))
            raise ApiError("DRYRUN.SUCCESS")
        again = self.idempotent("DeleteInstances", token, p, now)
        if again is not None:
            return again
        targets = [self.find(iid, region) for iid in dict.fromkeys(p.indexed("InstanceId"))]
        for inst in targets:
            self.check_deletable(inst, p.bool("Force"))
        for inst in targets:
            if not inst.get("_next") or inst["_next"][1] != "<deleted>":
                self.remove(inst, now)
        self.remember("DeleteInstances", token, p, {})
        self.save()
        return {}

    def do_StopInstance(self, p, now):
        if p.bool("Hibernate"):
            raise ApiError("NotImplementedInFake", "The fake does not model Hibernate.")
        inst = self.find(p.str("InstanceId"))
        if inst["Status"] != "Running":
            raise ApiError("IncorrectInstanceStatus")
        if p.bool("DryRun"):
            raise ApiError("DryRunOperation")
        inst["Status"] = "Stopping"
        inst["_next"] = [now + self.opts.stop_after, "Stopped"]
        self.save()
        return {}

    def do_StartInstance(self, p, now):
        inst = self.find(p.str("InstanceId"))
        if inst["Status"] != "Stopped":
            raise ApiError("IncorrectInstanceStatus")
        if p.bool("DryRun"):
            raise ApiError("DryRunOperation")
        inst["Status"] = "Starting"
        inst["_next"] = [now + self.opts.start_after, "Running"]
        self.save()
        return {}

    def do_DescribeInstanceStatus(self, p, now):
        if p.has("ClusterId"):
            raise ApiError("NotImplementedInFake", "The fake does not implement ClusterId.")
        region = p.str("RegionId")
        self.check_region(region)
        ids = p.indexed("InstanceId")
        found = sorted((i for i in self.instances.values()
                        if i["RegionId"] == region
                        and (not p.has("ZoneId") or i["ZoneId"] == p.str("ZoneId"))
                        and (not ids or i["InstanceId"] in ids)), key=lambda i: i["_seq"])
        number = p.int("PageNumber", 1)
        size = p.int("PageSize", 10)
        page = found[(number - 1) * size:number * size]
        return {"PageNumber": number, "PageSize": size, "TotalCount": len(found),
                "InstanceStatuses": {"InstanceStatus": [
                    {"InstanceId": i["InstanceId"], "Status": i["Status"]} for i in page]}}

    # -- control API
    SEED_FIELDS = {
        "InstanceId", "RegionId", "ZoneId", "InstanceName", "HostName", "Description", "ImageId",
        "InstanceType", "SecurityGroupId", "SecurityGroupIds", "VSwitchId", "VpcId",
        "PrivateIpAddress", "MacAddress", "Status", "Tags", "UserData", "ClientToken",
        "DeletionProtection", "CreationTime", "KeyPairName",
    }

    def seed(self, data, now):
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        unknown = sorted(set(data) - self.SEED_FIELDS)
        if unknown:
            raise ValueError("unknown fields: " + ", ".join(unknown))
        if not isinstance(data.get("RegionId"), str):
            raise ValueError("RegionId (a string) is required")
        status = data.get("Status", "Running")
        if status not in STATUSES:
            raise ValueError("Status must be one of " + ", ".join(STATUSES))
        tags = data.get("Tags") or []
        if isinstance(tags, dict):
            tags = [{"Key": k, "Value": v} for k, v in tags.items()]
        if not all(isinstance(t, dict) and isinstance(t.get("Key"), str)
                   and isinstance(t.get("Value", ""), str) for t in tags):
            raise ValueError("Tags: a list of {\"Key\", \"Value\"} or an object")
        fields = dict(data)
        fields["Tags"] = [{"Key": t["Key"], "Value": t.get("Value", "")} for t in tags]
        fields["Status"] = status
        if "SecurityGroupId" in fields:
            fields["SecurityGroupIds"] = [fields.pop("SecurityGroupId")]
        fields["Seeded"] = True
        try:
            inst = self.new_instance(fields, now)
        except ApiError as e:
            raise ValueError(e.message)
        self.save()
        return self.public(inst)


# -------------------------------------------------------------------- HTTP

class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # idle keep-alive connections must not hold up the exit
    allow_reuse_address = True


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ecs-fake"
    sys_version = ""
    timeout = 300  # an idle keep-alive connection's thread ends after this

    def log_message(self, fmt, *args):  # the fake logs its own line per request
        pass

    def do_GET(self):
        self.dispatch()

    def do_POST(self):
        self.dispatch()

    def do_PUT(self):
        self.dispatch()

    def do_DELETE(self):
        self.dispatch()

    def read_body(self):
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks, total = [], 0
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                total += size
                if total > MAX_BODY:
                    raise ValueError("body too large")
                chunks.append(self.rfile.read(size))
                self.rfile.readline(1024)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ValueError("body too large")
        return self.rfile.read(length) if length else b""

    def send(self, status, obj, headers=None):
        data = json.dumps(obj, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json;charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        if isinstance(obj, dict) and "RequestId" in obj:
            self.send_header("x-acs-request-id", obj["RequestId"])
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def dispatch(self):
        fake = self.server.fake
        try:
            body = self.read_body()
        except ValueError as e:
            self.close_connection = True
            self.send(413 if "large" in str(e) else 400, {"Code": "InvalidParameter", "Message": str(e)})
            return
        url = urllib.parse.urlsplit(self.path)
        if url.path.startswith("/_fake/"):
            self.control(fake, url.path, body)
            return
        headers = {}
        for name, value in self.headers.items():
            headers.setdefault(name.lower(), []).append(value)
        held = None
        with fake.lock:
            status, obj, extra, entry, hold = fake.handle(
                self.command, url.path, url.query, headers, body, time.time())
            fake.record(entry)
            if hold:
                held = Held(entry)
                entry["held"] = True
                entry["heldOutcome"] = "waiting"
                fake.held.append(held)
        print(f"ecs-fake: {self.command} {entry['action'] or url.path} -> {status}"
              f"{' ' + entry['code'] if entry['code'] else ''}{' (held)' if held else ''}",
              file=sys.stderr, flush=True)
        if held:
            outcome = self.wait_held(held)
            with fake.lock:
                entry["heldOutcome"] = outcome
                fake.held.remove(held)
            held.close()
            if outcome == "client-disconnected":
                self.close_connection = True
                return
        try:
            self.send(status, obj, extra)
        except OSError:
            self.close_connection = True

    def wait_held(self, held):
        watch = [held.read_fd, self.connection]
        deadline = time.monotonic() + self.server.fake.opts.max_hold
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timed-out"
            ready, _, _ = select.select(watch, [], [], remaining)
            if held.read_fd in ready:
                return "released"
            if self.connection in ready:
                try:
                    data = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    return "client-disconnected"
                if not data:
                    return "client-disconnected"
                watch = [held.read_fd]  # more bytes from the client: stop watching it

    def control(self, fake, path, body):
        """Every route of the control API."""
        route = (self.command, path.rstrip("/"))
        try:
            data = json.loads(body) if body.strip() else {}
        except ValueError:
            self.send(400, {"error": "the body is not JSON"})
            return
        now = time.time()
        with fake.lock:
            fake.tick(now)
            if route == ("GET", "/_fake/instances"):
                out = [fake.public(i) for i in sorted(fake.instances.values(), key=lambda i: i["_seq"])]
                result = (200, out)
            elif route == ("POST", "/_fake/instances"):
                try:
                    result = (201, fake.seed(data, now))
                except ValueError as e:
                    result = (400, {"error": str(e)})
            elif route == ("GET", "/_fake/requests"):
                result = (200, copy.deepcopy(fake.log))
            elif route == ("POST", "/_fake/inject"):
                result = self.add_rule(fake.injections, data, inject=True)
            elif route == ("POST", "/_fake/hold"):
                result = self.add_rule(fake.holds, data, inject=False)
            elif route == ("GET", "/_fake/held"):
                result = (200, {"held": len(fake.held)})
            elif route == ("POST", "/_fake/release"):
                for h in fake.held:
                    h.release()
                result = (200, {"released": len(fake.held)})
            elif route == ("POST", "/_fake/reset"):
                fake.reset()
                fake.save()
                result = (200, {"reset": True})
            else:
                result = (404, {"error": f"no control route {self.command} {path}"})
        self.send(*result)

    @staticmethod
    def add_rule(rules, data, inject):
        if not isinstance(data, dict) or not isinstance(data.get("action"), str):
            return 400, {"error": "action (an action name or \"*\") is required"}
        count = data.get("count", 1)
        if not isinstance(count, int) or count < 1:
            return 400, {"error": "count must be a positive integer"}
        rule = {"action": data["action"], "count": count}
        if not inject and data.get("withParameter") is not None:
            if not isinstance(data["withParameter"], str):
                return 400, {"error": "withParameter must be a parameter name"}
            rule["withParameter"] = data["withParameter"]
        if inject:
            code = data.get("code")
            if not isinstance(code, str) or not code:
                return 400, {"error": "code is required"}
            status = data.get("status", ERRORS.get(code, (400,))[0])
            if not isinstance(status, int) or not 400 <= status <= 599:
                return 400, {"error": "status must be an HTTP error status"}
            rule.update(code=code, status=status, message=data.get("message"),
                        retryAfter=data.get("retryAfter"))
        rules.append(rule)
        return 200, rule


def read_secret(path):
    with open(path, encoding="utf-8") as f:
        value = f.read()
    if value.endswith("\n"):
        value = value[:-1]
        if value.endswith("\r"):
            value = value[:-1]
    if not value:
        raise SystemExit(f"ecs-fake: {path} is empty")
    return value


def default_spec():
    specs = os.environ.get("SPECS_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "specs")
    return os.path.join(specs, "alibaba-ecs", "api-docs.json")


def main(argv=None):
    ap = argparse.ArgumentParser(description="A stateful fake of the Alibaba Cloud ECS RPC API, for tests.")
    ap.add_argument("--spec", default=default_spec(), help="the Ecs 2014-05-26 api-docs.json")
    ap.add_argument("--access-key-id", required=True)
    ap.add_argument("--secret-file", required=True)
    ap.add_argument("--security-token-file")
    ap.add_argument("--listen", default="127.0.0.1:0", help="127.0.0.1:PORT (0: any free port)")
    ap.add_argument("--in-netns", action="store_true",
                    help="started inside a network namespace of the caller's own: --listen may name its addresses")
    ap.add_argument("--port-file", help="written with the bound port once listening")
    ap.add_argument("--start-after", type=float, default=1.0, help="seconds Pending/Starting lasts")
    ap.add_argument("--stop-after", type=float, default=0.5, help="seconds Stopping lasts")
    ap.add_argument("--delete-after", type=float, default=0.0, help="seconds a deleted instance stays Stopping")
    ap.add_argument("--max-skew", type=float, default=900.0, help="accepted x-acs-date skew, seconds")
    ap.add_argument("--max-hold", type=float, default=300.0, help="longest a held reply waits, seconds")
    ap.add_argument("--userdata-limit", choices=("encoded", "decoded"), default="encoded")
    ap.add_argument("--allow-v1", action="store_true", help="also accept the legacy HMAC-SHA1 signature")
    ap.add_argument("--state", help="JSON file the instances are kept in across restarts")
    ap.add_argument("--first-ip", type=ipaddress.IPv4Address, default=FIRST_IP,
                    help="the first private address RunInstances gives out")
    opts = ap.parse_args(argv)

    host, sep, port = opts.listen.rpartition(":")
    local = host == "127.0.0.1" or (opts.in_netns and re.fullmatch(r"\d+\.\d+\.\d+\.\d+", host))
    if not sep or not local or not port.isdigit():
        print(f"ecs-fake: --listen must be 127.0.0.1:PORT (or, with --in-netns, an address of the namespace), "
              f"not {opts.listen!r}", file=sys.stderr)
        return 2
    creds = Credentials(opts.access_key_id, read_secret(opts.secret_file),
                        read_secret(opts.security_token_file) if opts.security_token_file else None)
    spec = Spec(opts.spec)
    fake = Fake(spec, creds, opts)
    server = Server((host, int(port)), Handler)
    server.fake = fake
    bound = server.server_address[1]

    def stop(signum, _frame):
        print(f"ecs-fake: {signal.Signals(signum).name}, stopping", file=sys.stderr, flush=True)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if opts.port_file:
        tmp = opts.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{bound}\n")
        os.replace(tmp, opts.port_file)
    print(f"ecs-fake: listening on {host}:{bound} ({len(spec.actions)} actions in the metadata, "
          f"signature v3{' and v1' if opts.allow_v1 else ''})", file=sys.stderr, flush=True)
    server.serve_forever(poll_interval=0.5)
    with fake.lock:
        for h in fake.held:
            h.release()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
