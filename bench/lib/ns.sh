# shellcheck shell=bash
# Sourced by the benches whose servers and load run in network namespaces of
# their own (dhcp, tftp): two namespaces joined by one veth pair, so nothing
# leaves them. ns_cleanup (from the EXIT trap, after the servers are stopped)
# deletes every namespace ns_pair made, and with them the veth pair.

NS_MADE=()

# ns_pair NS_A NS_B DEV_A DEV_B: the namespaces with lo up, joined by a veth
# pair (DEV_A in NS_A, DEV_B in NS_B; down until ns_addr).
ns_pair() {
    ip netns add "$1"; NS_MADE+=("$1")
    ip netns add "$2"; NS_MADE+=("$2")
    ip link add "$3" netns "$1" type veth peer name "$4" netns "$2"
    ip -n "$1" link set lo up
    ip -n "$2" link set lo up
}

# ns_addr NS DEV CIDR...: the addresses on DEV, then DEV up.
ns_addr() {
    local ns=$1 dev=$2 a
    shift 2
    for a in "$@"; do ip -n "$ns" addr add "$a" dev "$dev"; done
    ip -n "$ns" link set "$dev" up
}

ns_cleanup() {
    local n
    for n in "${NS_MADE[@]}"; do ip netns del "$n" 2>/dev/null || true; done
    NS_MADE=()
}
