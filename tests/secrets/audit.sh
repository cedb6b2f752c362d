# shellcheck shell=bash
# The secrets audit's hooks in tests/controller/bmc-e2e.sh, sourced by it
# when SECRETS_AUDIT_DIR is set (tests/secrets/e2e.sh sets it). bmc-e2e.sh
# calls them as `audit NAME ARGS`:
#   init      unique secrets in WORK/secrets (mode 700): a pull secret
#             (in an install-config the site reads and in every role
#             Ignition), one content marker per role Ignition (copies of the
#             lab's in WORK/ignition), Equinix and Power VS API keys, the
#             IAM token the fake issues, an Alibaba AccessKey secret, a wrong
#             bearer token, a wrong BMC password
#   site      the site: those Ignition files, the install-config, and
#             host.api.equinix/powervs (tests/secrets/echo-provider.py, which
#             refuses every create echoing the whole request) and
#             host.api.alibaba (tests/controller/ecs-fake.py, signatures checked)
#   start     the two fakes in the namespace; the process sampler
#             (tests/secrets/procs.py) from here to the end
#   requests  a role Ignition cut short (a refused reload), bad requests,
#             the cloud providers' nodes (below)
#   snapshot LABEL   every answer a reader can get, kept in AUDIT/snap/N-LABEL
#   replay NODE      the node's spent Ignition token from another address
#   finish    stops the sampler, a last snapshot
# bootd runs with RUST_LOG=trace (start_bootd) and so does the CLI (cli).
# Nothing here decides pass or fail about leaks: tests/secrets/check.py
# greps WORK and AUDIT afterwards. A step that does not do what it
# should (a fake that does not start, a node that never fails) fails the run
# (bmc-e2e.sh's die). Processes are started with spawn (the harness stops
# them); the waits are wait_for and within (tests/lib/vm.sh).

AUDIT=$SECRETS_AUDIT_DIR
AUDIT_N=0
rand_hex() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

audit_init() {
  mkdir -p "$AUDIT/snap" "$AUDIT/proc"
  AUDIT=$(readlink -f "$AUDIT")
  local s=$WORK/secrets
  (umask 077; mkdir -p "$s"
   echo "PullSecret$(rand_hex 12)" >"$s/pull-secret"
   for r in bootstrap master worker; do echo "IgnContent${r}$(rand_hex 10)" >"$s/ign-$r"; done
   echo "EquinixKey$(rand_hex 12)" >"$s/equinix-key"
   echo "PowerVsKey$(rand_hex 12)" >"$s/powervs-key"
   echo "IamToken$(rand_hex 16)" >"$s/iam-token"
   echo "AliSecret$(rand_hex 12)" >"$s/alibaba-key-secret"
   echo "LTAIaudit$(rand_hex 6)" >"$s/alibaba-key-id"
   echo "WrongToken$(rand_hex 12)" >"$s/wrong-token"
   echo "WrongBmc$(rand_hex 4)" >"$s/wrong-bmc-password"
   printf 'Authorization: Bearer %s\n' "$(cat "$s/wrong-token")" >"$s/wrong-auth.hdr")
  # bootd serves as nobody: it reads the keys, and the wrong BMC password
  # (a file below host.api.bmcFiles, which is WORK).
  chown -R nobody "$s"
  mkdir -p "$WORK/ignition"
  python3 - "$REPO/examples/lab/ignition" "$WORK/ignition" "$s" <<'EOF'
import json, sys, urllib.parse
src, dst, s = sys.argv[1:]
pull = open(f"{s}/pull-secret").read().strip()
for role in ("bootstrap", "master", "worker"):
    c = json.load(open(f"{src}/{role}.ign"))
    mark = open(f"{s}/ign-{role}").read().strip()
    files = c.setdefault("storage", {}).setdefault("files", [])
    auths = json.dumps({"auths": {"quay.io": {"auth": pull, "email": "ops@example.test"}}})
    files.append({"path": "/var/lib/kubelet/config.json", "mode": 384, "overwrite": True,
                  "contents": {"source": "data:," + urllib.parse.quote(auths)}})
    files.append({"path": "/etc/lab/secret", "mode": 384, "overwrite": True,
                  "contents": {"source": "data:," + mark}})
    json.dump(c, open(f"{dst}/{role}.ign", "w"), indent=2)
EOF
  cat >"$WORK/install-config.yaml" <<EOF
apiVersion: v1
baseDomain: example.test
metadata: { name: lab }
networking: { machineNetwork: [ { cidr: 10.77.0.0/24 } ] }
controlPlane: { name: master, replicas: 3 }
compute: [ { name: worker, replicas: 40 } ]
platform: { none: {} }
pullSecret: '{"auths":{"quay.io":{"auth":"$(cat "$s/pull-secret")","email":"ops@example.test"}}}'
sshKey: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAuditKeyOnly ops@bastion
EOF
  chmod 644 "$WORK/install-config.yaml"
}

audit_site() {
  local s=$WORK/secrets
  lab_site "$SITE" --from "$SITE" ignition.dir="$WORK/ignition" cluster.installConfig="$WORK/install-config.yaml" \
    host.api.equinix="{baseUrl: 'http://127.0.0.1:8091', projectId: audit-project, apiKey: {file: $s/equinix-key}}" \
    host.api.powervs="{baseUrl: 'http://127.0.0.1:8091', iamUrl: 'http://127.0.0.1:8091', crn: 'crn:v1:bluemix:public:power-iaas:lon04:a/audit:audit-ws::', apiKey: {file: $s/powervs-key}}" \
    host.api.alibaba="{regionId: cn-hangzhou, endpoint: 'http://127.0.0.1:8092', accessKeyId: {file: $s/alibaba-key-id}, accessKeySecret: {file: $s/alibaba-key-secret}, zones: [cn-hangzhou-h], vSwitches: {cn-hangzhou-h: vsw-h1}, securityGroupId: sg-lab, instanceTypes: {master: ecs.g6.xlarge, worker: ecs.g6.large}, imageId: m-rhcos418}" \
    || die "audit: site not written"
}

audit_start() {
  local s=$WORK/secrets specs=${SPECS_DIR:-$REPO/../shared/specs}
  spawn --ns "$NS" --log "$WORK/echo-provider.log" python3 "$REPO/tests/secrets/echo-provider.py" \
    --listen 127.0.0.1:8091 --iam-token-file "$s/iam-token" --record "$WORK/echo-provider.jsonl"
  spawn --ns "$NS" --log "$WORK/ecs-fake.log" python3 "$REPO/tests/controller/ecs-fake.py" \
    --spec "$specs/alibaba-ecs/api-docs.json" \
    --access-key-id "$(cat "$s/alibaba-key-id")" --secret-file "$s/alibaba-key-secret" \
    --listen 127.0.0.1:8092 --port-file "$WORK/ecs-fake.port" --start-after 1
  wait_for 20 fakes_up \
    || die "audit: the provider fakes did not start: $(tail -n 3 "$WORK"/echo-provider.log "$WORK"/ecs-fake.log)"
  spawn --log "$WORK/procs.log" python3 "$REPO/tests/secrets/procs.py" --netns "$NS" --out "$AUDIT/proc" \
    --until "$AUDIT/proc/stop" --max-seconds 3600
  AUDIT_PROCS=$SPAWNED
  log "audit: fakes up, process sampler PID $AUDIT_PROCS"
}
fakes_up() { [[ -s $WORK/ecs-fake.port ]] && nsx curl -s -o /dev/null --max-time 1 http://127.0.0.1:8091/x; }

# Every answer a reader can get now: bootd's /metrics, its status page and
# timeline JSON (from this host: allowed), the API's lists, nodes, events,
# timelines, discovered machines, cluster facts and its /status paths.
audit_snapshot() {
  AUDIT_N=$((AUDIT_N + 1))
  local d h=http://$HOST_IP:8080 n names p
  d=$AUDIT/snap/$(printf %02d "$AUDIT_N")-$1
  mkdir -p "$d"
  get() { nsx curl -sS --max-time 10 -D "$d/$1.head" -o "$d/$1" "${@:2}" 2>>"$d/curl.err" || true; }
  aget() { get "$1" --cacert "$WORK/state/ca.pem" -H @"$WORK/auth.hdr" "$API$2"; }
  get metrics "$h/metrics"
  get status.html "$h/status"
  get timeline.json "$h/status/timeline.json"
  nsx curl -sS --max-time 5 -o "$d/dnsd-metrics" "http://$HOST_IP:9153/metrics" 2>/dev/null || rm -f "$d/dnsd-metrics"
  aget api-nodes.json /v1/nodes
  aget api-discovered.json /v1/discovered
  aget api-cluster.json /v1/cluster
  aget api-status.html /status
  aget api-timeline.json /status/timeline.json
  names=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d=d.get("nodes",d) if isinstance(d,dict) else d; print(" ".join(n["name"] for n in d))' "$d/api-nodes.json" 2>/dev/null) \
    || die "audit: GET /v1/nodes is not a node list: $(head -c 300 "$d/api-nodes.json")"
  for n in $names; do
    get "status-$n.html" "$h/status/node/$n"
    get "timeline-$n.json" "$h/status/node/$n/timeline.json"
    for p in "" /events /timeline; do aget "api-$n${p//\//-}.json" "/v1/nodes/$n$p"; done
    aget "api-status-$n.html" "/status/node/$n"
  done
  [[ -s $d/metrics && -s $d/status.html ]] || die "audit: snapshot $1 got no metrics or status page"
}

# api_as HEADERFILE METHOD PATH [BODY]: as api(), with another Authorization.
api_as() {
  local args=(-sS --max-time 10 --cacert "$WORK/state/ca.pem" -X "$2" -w '\n%{http_code}')
  [[ -n $1 ]] && args+=(-H @"$1")
  [[ $# -ge 4 ]] && args+=(-H 'Content-Type: application/json' --data-binary "$4")
  nsx curl "${args[@]}" "$API$3"
}
# curl_k URL: a GET whose URL (with a token) curl reads from a config file,
# not from its argv.
curl_k() {
  local c=$WORK/secrets/curl.conf
  (umask 077; printf 'url = "%s"\n' "$1" >"$c")
  nsx curl -sS --max-time 10 -w '\n%{http_code}' -K "$c"
}
# keep NAME RESPONSE: an answer kept for the grep (body, then the status)
keep() { mkdir -p "$AUDIT/requests"; printf '%s\n' "$2" >"$AUDIT/requests/$1"; }

# wait_phase NODE PHASES SECS (PHASES: a|b)
wait_phase() {
  PACE=1 within "$3" phase_is "$1" "$2" && return 0
  die "audit: $1 not $2 within $3 s (phase $PHASE): $(body_of "$PHASE_R" | head -c 400)"
}
phase_is() { # NODE PHASES: the node's phase (in PHASE, the answer in PHASE_R) is one of them
  PHASE_R=$(api GET "/v1/nodes/$1")
  PHASE=$(body_of "$PHASE_R" | json 'd.get("phase", "")' 2>/dev/null || true)
  [[ $PHASE =~ ^($2)$ ]]
}
gone() {   # gone NODE...: DELETE each, then each 404 within 90 s
  local n
  for n in "$@"; do api DELETE "/v1/nodes/$n" >/dev/null; done
  for n in "$@"; do
    PACE=1 within 90 node_gone "$n" || die "audit: $n still there 90 s after DELETE"
  done
}

# reloads RESULT N: bootd_site_reloads_total{result=RESULT} reaches N within 30 s.
reloads() {
  PACE=0.5 within 30 reloads_reach "$1" "$2" && return 0
  die "audit: bootd_site_reloads_total{result=\"$1\"} is ${RELOADS:-0}, not $2, 30 s after the change"
}
reloads_reach() { # RESULT N (the count in RELOADS)
  RELOADS=$(nsx curl -sS --max-time 5 "http://$HOST_IP:8080/metrics" | sed -n "s/^bootd_site_reloads_total{result=\"$1\"} //p")
  (( ${RELOADS:-0} >= $2 ))
}

audit_requests() {
  local s=$WORK/secrets r pw wrong at ign=$WORK/ignition/worker.ign
  pw=$(cat "$WORK/bmc-password")
  # A role Ignition cut short just after the pull secret: the reload
  # is refused (the log says where, never quoting it); then the good one.
  cp "$ign" "$s/worker.ign.good"
  at=$(grep -b -o -F -f "$s/pull-secret" "$ign" | head -n 1 | cut -d: -f1)
  head -c $((at + $(wc -c <"$s/pull-secret") + 2)) "$ign" >"$ign.tmp" && mv "$ign.tmp" "$ign"
  reloads error 1
  cp "$s/worker.ign.good" "$ign.tmp" && mv "$ign.tmp" "$ign"
  reloads ok 1
  # The API: a wrong token, none, a body that is not JSON (holding the pull
  # secret), a BMC password given as a value (refused: a reference only),
  # a password file outside bmcFiles, an unknown field holding a key.
  r=$(api_as "$s/wrong-auth.hdr" GET /v1/nodes); keep wrong-token "$r"
  [[ $(status_of "$r") == 401 ]] || die "audit: a wrong token got $(status_of "$r")"
  r=$(api_as "" GET /v1/nodes); keep no-token "$r"
  [[ $(status_of "$r") == 401 ]] || die "audit: no token got $(status_of "$r")"
  # (curl reads the body from a file: the test's own argv holds no secret)
  printf '{"name":"bad-0","role":"worker","pullSecret":"%s"' "$(cat "$s/pull-secret")" >"$s/bad-body.json"
  r=$(api POST /v1/nodes "@$s/bad-body.json")
  keep bad-json "$r"
  [[ $(status_of "$r") =~ ^4 ]] || die "audit: a truncated body got $(status_of "$r")"
  rf_body() { echo "{\"name\":\"bad-$1\",\"role\":\"worker\",\"ip\":\"10.77.0.7$1\",\"macs\":[\"52:54:00:77:00:7$1\"],\"kernelArgs\":[\"console=ttyS0\"],\"live\":true,\"provider\":{\"redfish\":{\"url\":\"$RF_URL\",\"username\":\"admin\",\"password\":$2,\"boot\":\"pxe\",\"mode\":\"Legacy\",\"allowPlainHttp\":true}}}"; }
  rf_body 1 "\"$pw\"" >"$s/inline-password.json"
  r=$(api POST /v1/nodes "@$s/inline-password.json"); keep inline-bmc-password "$r"
  rm -f "$s/inline-password.json"   # bmc-e2e.sh's own check: the password in no file but its own
  [[ $(status_of "$r") =~ ^4 ]] || die "audit: an inline BMC password got $(status_of "$r")"
  # A password file outside bmcFiles: refused when bootd reads it (the node fails).
  r=$(api POST /v1/nodes "{\"name\":\"bad-2\",\"role\":\"worker\",\"ip\":\"10.77.0.72\",\"macs\":[\"52:54:00:77:00:72\"],\"live\":true,\"provider\":{\"ipmi\":{\"address\":\"127.0.0.1\",\"port\":$IPMI_PORT,\"username\":\"admin\",\"password\":{\"file\":\"/etc/shadow\"},\"mode\":\"Legacy\"}}}")
  keep bmc-file-outside "$r"
  [[ $(status_of "$r") == 201 ]] || die "audit: POST bad-2 (a password file outside bmcFiles): $r"
  printf '{"name":"bad-4","role":"worker","ip":"10.77.0.74","macs":["52:54:00:77:00:74"],"apiKey":"%s"}' \
    "$(cat "$s/powervs-key")" >"$s/unknown-field.json"
  r=$(api POST /v1/nodes "@$s/unknown-field.json")
  keep unknown-field "$r"
  [[ $(status_of "$r") =~ ^4 ]] || die "audit: an unknown field got $(status_of "$r")"
  # A wrong BMC password (a file below bmcFiles): the BMC refuses it, the
  # node fails and says so.
  r=$(api POST /v1/nodes "$(rf_body 5 "{\"file\":\"$s/wrong-bmc-password\"}")"); keep wrong-bmc-password "$r"
  [[ $(status_of "$r") == 201 ]] || die "audit: POST with a wrong BMC password: $r"
  wait_phase bad-5 Failed 90
  wait_phase bad-2 Failed 90
  # bootd's HTTP: a forged token, another node's name, no such node.
  wrong="$(date +%s).s.$(head -c 12 /dev/urandom | base64 | tr '+/' '-_').$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
  echo "$wrong" >"$s/forged-token"
  for p in "/ignition/bootstrap?token=$wrong" "/ignition/no-such?token=$wrong" "/ignition/bootstrap/pointer?token=$wrong" \
           "/metadata?node=bootstrap&token=$wrong" "/userdata?node=bootstrap&token=$wrong" "/media/bmc-rf.iso?token=$wrong"; do
    r=$(curl_k "http://$HOST_IP:8080$p"); keep "http-$(tr -c 'a-z0-9' _ <<<"${p%%\?*}")" "$r"
    [[ $(status_of "$r") == 404 ]] || die "audit: GET ${p%%\?*} with a forged token: $(status_of "$r")"
  done
  # The cloud providers: Equinix and Power VS refuse the create echoing the
  # whole request (keys, IAM token, userdata with its token): the nodes
  # fail; Alibaba makes the instance (the fake checks each signature).
  r=$(api POST /v1/nodes '{"name":"eqx-0","role":"worker","provider":{"equinix":{"metro":"sv","plan":"c3.small.x86"}}}'); keep eqx-0 "$r"
  [[ $(status_of "$r") == 201 ]] || die "audit: POST eqx-0: $r"
  r=$(api POST /v1/nodes '{"name":"pvs-0","role":"worker","provider":{"powervs":{"imageID":"rhcos-417","networkID":"net-1","processors":0.5,"memory":4,"procType":"shared","sysType":"s922"}}}'); keep pvs-0 "$r"
  [[ $(status_of "$r") == 201 ]] || die "audit: POST pvs-0: $r"
  r=$(api POST /v1/nodes '{"name":"ali-0","role":"worker","provider":{"alibaba":{}}}'); keep ali-0 "$r"
  [[ $(status_of "$r") == 201 ]] || die "audit: POST ali-0: $r"
  wait_phase eqx-0 Failed 90
  wait_phase pvs-0 Failed 90
  wait_phase ali-0 'Provisioned|Booting' 90
  # What the fake holds (UserData: the pointer config with a provider
  # token), for e2e.sh's list of tokens; kept with the secrets.
  nsx curl -sS --max-time 10 -o "$WORK/secrets/ecs-instances.json" http://127.0.0.1:8092/_fake/instances \
    || die "audit: GET /_fake/instances"
  if ! grep -qi '"x-auth-token"' "$WORK/echo-provider.jsonl" || ! grep -qi '"authorization": "bearer' "$WORK/echo-provider.jsonl"; then
    die "audit: the echoing provider never saw the Equinix key or the IAM token"
  fi
  audit_snapshot providers-failed
  gone bad-2 bad-5 eqx-0 pvs-0 ali-0
  audit_snapshot providers-deleted
  log "audit: bad requests and the cloud providers done"
}

# The node's own Ignition token, spent by the node, from this host's address:
# refused (token_reused), recorded on its timeline.
audit_replay() {
  local url r
  url=$(serial_from "$2" 0 | grep -a -o -m1 "url=http[^ ]*token=[^ ]*" | sed 's/^url=//' || true)
  [[ -n $url ]] || die "audit: no Ignition URL on $1's console"
  r=$(curl_k "$url"); keep "replay-$1" "$r"
  [[ $(status_of "$r") == 404 ]] || die "audit: $1's spent token from another address: $(status_of "$r")"
}

audit_finish() {
  audit_snapshot final
  touch "$AUDIT/proc/stop"
  wait "$AUDIT_PROCS" 2>/dev/null || true
  log "audit: $(cat "$AUDIT/proc/samples.txt" 2>/dev/null), $AUDIT_N snapshots"
}
