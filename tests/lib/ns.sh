# shellcheck shell=bash
# Network namespaces, bridges, veth pairs and taps for the harness
# (sourced by tests/lib/harness.sh). Every namespace made here is deleted by
# the harness's exit (ns_cleanup), after the processes in PIDS are stopped;
# anything still running inside one of them then (only this run started
# processes there) is killed first.

NS_MADE=()

# ns_new NAME: a namespace with lo up, deleted at exit. A namespace of that
# name left by a run that was killed with SIGKILL is removed first, if no
# process is left in it.
ns_new() {
    if ip netns list 2>/dev/null | awk '{print $1}' | grep -qx -- "$1"; then
        if [[ -n $(ip netns pids "$1" 2>/dev/null) ]]; then
            echo "ns_new: namespace $1 exists and has processes" >&2
            return 1
        fi
        ip netns del "$1"
    fi
    ip netns add "$1"
    NS_MADE+=("$1")
    ip -n "$1" link set lo up
}

# lab_netns [NAME [CIDR...]]: the lab host: a namespace (NAME, default
# lab-<pid>) with a bridge br0 holding CIDR... (default 10.77.0.1/24; an
# IPv6 one is added without duplicate address detection), br0 up. Sets NS
# to NAME when NS is empty, so that nsx and the start_* helpers use it.
lab_netns() {
    local name=${1:-lab-$$} a
    shift || true
    [[ $# -gt 0 ]] || set -- 10.77.0.1/24
    ns_new "$name"
    ip -n "$name" link add br0 type bridge forward_delay 0 stp_state 0
    for a in "$@"; do
        if [[ $a == *:* ]]; then ip -n "$name" -6 addr add "$a" dev br0 nodad
        else ip -n "$name" addr add "$a" dev br0; fi
    done
    ip -n "$name" link set br0 up
    NS=${NS:-$name}
}

# lab_tap TAP [BRIDGE [NS]]: a tap device on BRIDGE (br0) in NS ($NS), up,
# for a QEMU guest's NIC.
lab_tap() {
    local tap=$1 br=${2:-br0} ns=${3:-$NS}
    ip -n "$ns" tuntap add dev "$tap" mode tap
    ip -n "$ns" link set "$tap" master "$br"
    ip -n "$ns" link set "$tap" up
}

# nsx COMMAND...: COMMAND in $NS, in the foreground. (For a background
# process use spawn --ns, which keeps the process's own PID.)
nsx() { ip netns exec "$NS" "$@"; }

# ns_pair NS_A NS_B DEV_A DEV_B: two new namespaces joined by a veth pair
# (DEV_A in NS_A, DEV_B in NS_B; down until ns_addr).
ns_pair() {
    ns_new "$1"
    ns_new "$2"
    ip link add "$3" netns "$1" type veth peer name "$4" netns "$2"
}

# ns_veth NS_A DEV_A NS_B DEV_B: a veth pair between two existing
# namespaces (down until ns_addr).
ns_veth() { ip link add "$2" netns "$1" type veth peer name "$4" netns "$3"; }

# ns_addr NS DEV CIDR...: the addresses on DEV (IPv6 without duplicate
# address detection), then DEV up.
ns_addr() {
    local ns=$1 dev=$2 a
    shift 2
    for a in "$@"; do
        if [[ $a == *:* ]]; then ip -n "$ns" -6 addr add "$a" dev "$dev" nodad
        else ip -n "$ns" addr add "$a" dev "$dev"; fi
    done
    ip -n "$ns" link set "$dev" up
}

# ns_cleanup: every namespace ns_new made, last first: what still runs in
# it is killed, then it is deleted (and its veths and taps with it).
ns_cleanup() {
    local i n p
    for ((i = ${#NS_MADE[@]} - 1; i >= 0; i--)); do
        n=${NS_MADE[i]}
        for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
        ip netns del "$n" 2>/dev/null || true
    done
    NS_MADE=()
}
