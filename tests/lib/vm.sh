# shellcheck shell=bash
# What the controller, HA, secrets and systemd-container checks share about
# the VMs they boot and the lab around them (tests/controller/local-e2e.sh,
# bmc-e2e.sh and its bmc-lab.sh, tests/secrets/audit.sh, tests/ha/e2e.sh,
# tests/systemd/nspawn.sh). Source it after tests/lib/harness.sh.
#
# Waiting:
#   wait_up PID SECS LOG WHAT CMD...   a process just spawned answers CMD
#   [PACE=S] within SECS CMD...        wait_for, its tries S seconds apart
# Consoles and logs:
#   console_clean FILE                 without CRs and terminal escapes
#   show_logs [-n N] FILE...           their last lines, for a FAIL
#   ignition_line FILE [OFFSET]        the lab guest's LAB-IGNITION line
#   wait_ignition_line SECS FILE [OFFSET [PID]]
#   ignition_sha LINE                  the sha256 the guest printed
# The lab:
#   lab_ra                             IPv6 router advertisements only
#   lab_vm NS TAP MAC DIR [BRIDGE]     a SeaBIOS + iPXE VM network-booting
# The controller's checks:
#   bootd_under_test PATH SCRIPT      BOOTD (PATH, or built when "")
#   lab_run_init TITLE DIR DEFAULT     harness_init with a kept run folder
#   api_tokens, api METHOD PATH [BODY], api_up, status_of, body_of, json EXPR
#   nodes_wait NODE SECS OUT           `bootd nodes wait NODE` (the script's cli)
#   time_left TOTAL T0                 what is left of TOTAL seconds since T0

# --- waiting --------------------------------------------------------------------
# wait_up PID SECS LOG WHAT CMD...: after spawning WHAT (PID, its output in
# LOG), wait (wait_for) until CMD succeeds. Fails the script when WHAT exits
# first (with LOG's last lines) or does not answer within SECS, through the
# script's die MESSAGE when it has one (its logs, then fail), else fail.
wait_up() {
    local pid=$1 secs=$2 logf=$3 what=$4 rc=0
    shift 4
    wait_for "$secs" while_alive "$pid" "$@" || rc=$?
    alive "$pid" || vm_fail "$what exited at start: $(tail -n 5 "$logf" 2>/dev/null | tr '\n' ' ')"
    [[ $rc == 0 ]] || vm_fail "$what not answering within $secs s"
}
vm_fail() { if declare -F die >/dev/null; then die "$@"; else fail "$@"; fi; }
# while_alive PID CMD...: CMD, for wait_for; 125 (give up) once PID is gone.
while_alive() {
    local pid=$1
    shift
    alive "$pid" || return 125
    "$@"
}

# [PACE=S] within SECS CMD...: wait_for SECS CMD (0 once it succeeds, 1
# when SECS have passed), with PACE its tries S seconds apart instead of
# wait_for's 0.1 s, for a CMD that is heavy to run often (an API call and a
# JSON parse, a CLI, virsh). CMD's output is dropped (wait_for): a CMD that
# finds something sets a variable.
within() {
    local secs=$1
    shift
    if [[ -n ${PACE:-} ]]; then wait_for "$secs" paced "$@"; else wait_for "$secs" "$@"; fi
}
paced() { # CMD...: CMD; after a failure, PACE less wait_for's own 0.1 s
    local rc=0
    "$@" || rc=$?
    [[ $rc == 0 || $rc == 125 ]] && return "$rc"
    sleep "$(awk -v p="$PACE" 'BEGIN { print (p > 0.1 ? p - 0.1 : 0) }')"
    return "$rc"
}

# --- consoles and logs ------------------------------------------------------------
# console_clean FILE: a console or log without CRs and terminal escapes.
console_clean() {
    tr -d '\r' <"$1" | sed -e 's/\x1b\[[0-9;=?]*[a-zA-Z]//g' -e 's/\x1b[a-zA-Z]//g' -e 's/\x08//g'
}

# show_logs [-n N] FILE...: for a FAIL, the last N (30) lines of each FILE
# that exists, cleaned.
show_logs() {
    local n=30 f
    if [[ ${1:-} == -n ]]; then n=$2; shift 2; fi
    for f in "$@"; do
        [[ -f $f ]] || continue
        echo "--- last $n lines of $f"
        console_clean "$f" | tail -n "$n"
    done
}

# ignition_line FILE [OFFSET]: the lab guest's first "LAB-IGNITION
# sha256=... bytes=... url=..." or "LAB-IGNITION-FAILED reason" line in
# the console FILE after OFFSET bytes (tests/lab/guest.sh), from the
# marker on (the kernel's escapes may precede it on its line); nothing if
# there is none yet.
ignition_line() {
    tail -c +"$((${2:-0} + 1))" "$1" 2>/dev/null | tr -d '\r' | grep -a -o -m1 -E 'LAB-IGNITION(-FAILED)? .*' || true
}
# wait_ignition_line SECS FILE [OFFSET [PID]]: ignition_line once there,
# within SECS, or sooner nothing when PID (the VM's QEMU) exits without it.
wait_ignition_line() {
    wait_for "$1" ignition_seen "$2" "${3:-0}" "${4:-}" || true
    ignition_line "$2" "${3:-0}"
}
ignition_seen() { # FILE OFFSET PID: the line is there (0); 125 once PID is gone
    [[ -n $(ignition_line "$1" "$2") ]] && return 0
    [[ -z $3 ]] || alive "$3" || return 125
    return 1
}
# ignition_sha LINE: the sha256 in a LAB-IGNITION line.
ignition_sha() { sed -n 's/.* sha256=\([0-9a-f]*\).*/\1/p' <<<"$1"; }

# --- the lab ----------------------------------------------------------------------
# lab_ra: dnsmasq in $NS sending IPv6 router advertisements only, on br0
# (bootd serves DHCP; iPXE waits for an RA otherwise). br0 needs an IPv6
# address: lab_netns NAME 10.77.0.1/24 fd77::1/64. Files in $WORK/dnsmasq.*.
lab_ra() {
    spawn --ns "$NS" --log "$WORK/dnsmasq.log" dnsmasq --conf-file=/dev/null --keep-in-foreground \
        --log-facility=- --port=0 --interface=br0 --bind-interfaces --user=root --group=root \
        --pid-file="$WORK/dnsmasq.pid" --dhcp-leasefile="$WORK/dnsmasq.leases" \
        --enable-ra --dhcp-range=::,constructor:br0,ra-only,64,1h
}

# lab_vm NS TAP MAC DIR [BRIDGE]: a VM that network-boots (SeaBIOS + the
# NIC's iPXE ROM, TCG, 512 MiB, virtio-net with MAC) from a new tap TAP on
# BRIDGE (br0) in NS; its console in DIR/serial.log (emptied), QEMU's output
# in DIR/qemu.log; its PID in VM_PID (and PIDS).
lab_vm() {
    local ns=$1 tap=$2 mac=$3 dir=$4 br=${5:-br0}
    mkdir -p "$dir"
    : >"$dir/serial.log"
    lab_tap "$tap" "$br" "$ns"
    spawn --ns "$ns" --log "$dir/qemu.log" qemu-system-x86_64 -accel tcg -machine graphics=off -m 512 -smp 1 \
        -display none -monitor none -no-reboot -boot order=n -serial "file:$dir/serial.log" \
        -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" -device "virtio-net-pci,netdev=n0,mac=$mac"
    # shellcheck disable=SC2034  # the caller's
    VM_PID=$SPAWNED
}

# --- the controller's checks -------------------------------------------------------
# bootd_under_test PATH SCRIPT: BOOTD, PATH made absolute, or without one
# (PATH "") the debug build (cargo build -p appliance --bin bootd, niced);
# exit 2 (a usage error, SCRIPT names itself) when it is not executable.
bootd_under_test() {
    BOOTD=$1
    if [[ -z $BOOTD ]]; then
        (cd "$REPO" && nice -n 10 cargo build -q -p appliance --bin bootd) >&2
        BOOTD=${CARGO_TARGET_DIR:-$REPO/target}/debug/bootd
    fi
    BOOTD=$(readlink -f "$BOOTD")
    [[ -x $BOOTD ]] || { echo "$2: bootd not executable: $BOOTD" >&2; exit 2; }
}

# lab_run_init TITLE DIR DEFAULT: harness_init TITLE with the run's folder
# DIR (DEFAULT when DIR is empty), emptied first, holding state/; the
# harness keeps it after the run (logs, consoles, bootd's state).
lab_run_init() {
    local d=${2:-$3}
    rm -rf "$d"
    mkdir -p "$d/state"
    harness_init "$1" --work "$(readlink -f "$d")"
}

# api_tokens: a random bearer token in $WORK/api-tokens (host.api.tokens)
# and its header in $WORK/auth.hdr (curl -H @file: never in argv), mode 600.
api_tokens() {
    head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/api-tokens"
    chmod 600 "$WORK/api-tokens"
    printf 'Authorization: Bearer %s\n' "$(cat "$WORK/api-tokens")" >"$WORK/auth.hdr"
    chmod 600 "$WORK/auth.hdr"
}
# api METHOD PATH [BODY]: the API at $API from $NS, trusting bootd's CA
# ($WORK/state/ca.pem), with the token; prints the body, then the HTTP
# status on the last line. BODY may be @FILE.
api() {
    local args=(-sS --max-time 10 --cacert "$WORK/state/ca.pem" -H @"$WORK/auth.hdr" -X "$1" -w '\n%{http_code}')
    [[ $# -ge 3 ]] && args+=(-H 'Content-Type: application/json' --data-binary "$3")
    nsx curl "${args[@]}" "$API$2"
}
# nodes_wait NODE SECS OUT: `cli wait NODE` (the script's `bootd nodes`
# CLI) until the node is Ready, at most SECS; shown as it goes and kept in
# OUT (for a FAIL line); its exit status.
nodes_wait() {
    local rc=0
    cli wait "$1" --timeout "$2" --interval 1 > >(tee "$3" >&2) 2>&1 || rc=$?
    sleep 0.2   # tee's last lines
    return "$rc"
}
# time_left TOTAL T0: the whole seconds left of TOTAL since T0 (now), at
# least 10.
time_left() { awk -v t="$1" -v e="$(since "$2")" 'BEGIN { l = int(t - e); print (l < 10 ? 10 : l) }'; }

# api_up: the API's /healthz answers (for wait_for, wait_up).
api_up() { nsx curl -fsS --max-time 1 --cacert "$WORK/state/ca.pem" "$API/healthz"; }
status_of() { tail -n 1 <<<"$1"; }
body_of() { sed '$d' <<<"$1"; }
# json EXPR <<<BODY: a Python expression over d (the parsed body), printed.
json() {
    python3 -c 'import json, sys; d = json.load(sys.stdin); r = eval(sys.argv[1]); print(r if isinstance(r, str) else json.dumps(r))' "$1"
}
