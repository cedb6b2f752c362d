#!/usr/bin/env bash
# A rack powering on at once: bench/storm's generator (N simulated
# network-boot machines: DHCP through a relay address, TFTP of iPXE, DHCP
# as iPXE, boot.ipxe and the node's script, kernel, initramfs, rootfs for a
# share with a reset and a Range resume, Ignition; every byte checked)
# against a boot stack, in two network namespaces of its own.
#
#   S  the server: veth 10.78.0.1/16; the nodes' addresses (10.78.64.0/18)
#      routed to L
#   L  the machines: veth 10.78.0.254/16 (the relay address, giaddr), and
#      every node address local (`ip route add local 10.78.64.0/18 dev lo`),
#      so each machine's TFTP and HTTP come from its own address
#
# The site has N nodes n00000.. (MAC 02:78:00:<index>, address
# 10.78.64.10 + index; n00000 the bootstrap node, n00001-3 masters, the rest
# workers), one image set whose kernel, initramfs and rootfs are files of
# random bytes (KERNEL_MB, INITRAMFS_MB, ROOTFS_MB; default the current RHCOS
# live kernel's and initramfs' sizes, 11 and 95 MiB, and a 16 MiB rootfs),
# iPXE from the lab's TFTP root (tests/lab/tftp-root.sh). Each node's
# Ignition is rendered beforehand (`bootd render ignition`) to check what
# arrives.
#
# The server is pinned to CPU 0 and its CPU time counted in a cgroup
# (bench/lib/cpu.sh); the generator runs on CPU 1.
#
# Stacks (STACKS, interleaved: order reversed every other round):
#   bootd            the appliance: DHCP, TFTP, HTTP, leases durable, timeline on
#                    (host.admission at its defaults: 64 image responses at once)
#   bootd-unlimited  the same without the image-transfer limit
#                    (host.admission.imageTransfers: 0), to measure the limit
#   bootd-reload     bootd while its site changes under the storm: every
#                    RELOAD_EVERY seconds one node is added to the file and
#                    bootd is sent SIGHUP (at most 900 times); each reload
#                    must keep every machine's boot going
#   dnsmasq-nginx    the OpenShift helper node's stack: dnsmasq (DHCP with a
#                    reservation per node, TFTP; dhcp-lease-max raised to
#                    N + 1 000: its default 1 000 NAKs every machine beyond)
#                    + nginx serving pre-rendered per-MAC scripts and
#                    Ignition files
#   dnsmasq-nginx-tuned  dnsmasq-nginx with nginx set as its documentation
#                    (ngx_http_core_module) advises for large static files to
#                    many slow readers: sendfile_max_chunk 512k (the default
#                    since nginx 1.21.4 is 2m; the limit keeps one fast
#                    connection from seizing the worker), tcp_nopush on (as
#                    in the untuned stack: headers and the file's start in
#                    full packets), the listen socket's sndbuf=1m (SO_SNDBUF,
#                    inherited by each accepted connection: room for a
#                    512k chunk per wakeup, without the kernel's autotuning).
#                    Not used: directio (turns sendfile off for files above
#                    its size and reads past the page cache, so 1 000
#                    machines would read the same 95 MiB from disk 1 000
#                    times; for files too big to cache) and aio threads /
#                    output_buffers (for reads that block on disk or for
#                    directio; these files stay in the page cache)
#   kea-tftpd-nginx  Kea (reservations, memfile persist, its multi-threading
#                    on with 2 threads) + tftpd-hpa + nginx
#   bootd-ha         two appliances (bootd) on a 3-member etcd (Debian's
#                    etcd-server), host.store.etcd with host.dhcp.ha:
#                    loadBalancing; bootd-ha3: three appliances. Appliance k
#                    in a namespace of its own (the first in S, 10.78.0.1; the
#                    others 10.78.0.2, .3), each a veth on a bridge in L, as
#                    docs/ha.md deploys them: one site file, the boot address
#                    vips.boot (BOOT_VIP, 10.78.0.100) in http.url, the DHCP
#                    server identifier and next-server, moved by Debian's
#                    keepalived (`bootd render keepalived --only boot`, multicast VRRP,
#                    advert 1 s, checked by `bootd ready`) in each
#                    appliance's namespace, counted with the stack. DHCP
#                    answers come from the appliances' own addresses; TFTP,
#                    scripts, images and Ignition from the boot address's
#                    holder. The relay (the storm) sends every DHCP message
#                    to each appliance, as a relay with several helper
#                    addresses. etcd in a namespace E (10.79.0.11-13 on a
#                    bridge; each appliance's second veth 10.79.0.<k>), data
#                    on the same disk as bootd's own state
#   bootd-ha-api     bootd-ha whose nodes are made through the controller's
#                    API: the site has none; bench/storm/create-nodes.py
#                    POSTs the N nodes (workers, provider alibaba) one after
#                    another to the appliance that does not lead the
#                    controller, while the storm runs; the elected
#                    appliance's controller makes each node's instance at
#                    the ECS fake (tests/controller/ecs-fake.py, checked
#                    against Alibaba's API metadata, signatures verified;
#                    in L at 10.78.0.250, on the generator's CPU, not
#                    counted; instances Pending for 5 s, their addresses
#                    the nodes' range, local in L). The storm (--cloud)
#                    reads the fake's list every second, and each running
#                    instance fetches the Ignition its user data points at,
#                    from its own address. bootd-ha-api-kill: the
#                    controller's leader sent SIGKILL at a random moment as
#                    in bootd-ha-kill (the next leader waits out its lease
#                    and the fence, then resumes each node). After the run:
#                    one instance per node at the fake, every config
#                    received its node's own (rendered from a surviving
#                    appliance's node overlay)
#   bootd-ha-etcd-kill  bootd-ha with etcd's leader member sent SIGKILL by
#                    the storm at the same moment a kill run would be
#                    (machines reboot after 60 s, KILL_DEADLINE); the two
#                    members left keep quorum. Counters from another member
#   bootd-ha-kill    bootd-ha (bootd-ha3-kill: bootd-ha3) with the appliance
#                    holding the boot address sent SIGKILL by the storm (its
#                    keepalived left running: its check fails and the address
#                    moves) at a random
#                    moment between 30 and 70 % of the makespan expected
#                    (bootd-ha's last run at that N, bootd-ha3's for
#                    bootd-ha3-kill; else any stack's; else 10 s: list
#                    bootd-ha before the kill); machines
#                    reboot 60 s after a failure before the OS runs, as
#                    firmware does (storm --reboot-after 60), and the storm's
#                    deadline is KILL_DEADLINE. The storm reports the machines
#                    mid-flight on the dead appliance apart
# All on CPU 0, every process of a stack counted (each appliance and each
# etcd member). After an HA run, bench/storm/ha-check.py reads etcd (the
# leases, the clients' records, the spent tokens) and the appliances' logs:
# no MAC holds two leases, no address two MACs, no token spent twice, no
# node's Ignition served twice.
#
# UNKNOWN (a list, "0": none): machines more, beside the N, whose MACs are
# in no node (bootd stacks only). Their site has a pool (10.78.120.1-
# 10.78.127.254) and `discovery: { enabled: true, retry: 5s }`; each boots
# from the pool and reports itself (the storm's --unknown), and after the
# storm every one must be in <stateDir>/discovered.json once, its MAC
# verified, no entry in conflict (--discovered). Each value is a run of
# its own, interleaved with the others as the stacks are.
#
# Knobs (env): UNKNOWN ("0"), SITE_NODES (N: nodes in the site, at least the machines),
# RELOAD_EVERY (1 s, bootd-reload), MACHINES ("100 1000"), STACKS ("bootd dnsmasq-nginx kea-tftpd-nginx"), ROUNDS (1), RAMP (0 s),
# KERNEL_MB (11), INITRAMFS_MB (95), ROOTFS_MB (16), ROOTFS_SHARE (0.1),
# BOOTD_BIN (target/release/bootd), STORM_BIN (target/release/storm),
# RESULTS (bench/storm/results-<UTC date>.txt), KILL_DEADLINE (300 s),
# KA_ALL (0; 1: keepalived also moves the API and ingress VIPs, each with
# a check that fails, no lbd running).
set -euo pipefail
# shellcheck source=tests/lib/harness.sh
. "$(dirname "$0")/../../tests/lib/harness.sh"
# shellcheck source=bench/lib/bench.sh
. "$REPO/bench/lib/bench.sh"   # say, log, bench_need_root, bench_stop
# shellcheck source=bench/lib/cpu.sh
. "$REPO/bench/lib/cpu.sh"     # cpu_init, cpu_group, cpu_spawn, cpu_read, cpu_used

MACHINES=${MACHINES:-"100 1000"}
STACKS=${STACKS:-"bootd dnsmasq-nginx kea-tftpd-nginx"}
ROUNDS=${ROUNDS:-1}
UNKNOWN=${UNKNOWN:-0}
RAMP=${RAMP:-0}
KERNEL_MB=${KERNEL_MB:-11}
INITRAMFS_MB=${INITRAMFS_MB:-95}
ROOTFS_MB=${ROOTFS_MB:-16}
ROOTFS_SHARE=${ROOTFS_SHARE:-0.1}
SITE_NODES=${SITE_NODES:-0}
RELOAD_EVERY=${RELOAD_EVERY:-1}
KILL_DEADLINE=${KILL_DEADLINE:-300}
SERVER_CPU=0
LOAD_CPU=1
BOOTD_BIN=${BOOTD_BIN:-$REPO/target/release/bootd}
STORM_BIN=${STORM_BIN:-$REPO/target/release/storm}
TFTP_SRC=${TFTP_SRC:-$REPO/target/lab-tftp}
RESULTS=${RESULTS:-$REPO/bench/storm/results-$(date -u +%F).txt}

bench_need_root "network namespaces"
[[ -x $BOOTD_BIN && -x $STORM_BIN ]] || { echo "build first: cargo build --release -p appliance -p storm" >&2; exit 2; }
[[ -f $TFTP_SRC/undionly.kpxe ]] || { echo "no iPXE in $TFTP_SRC: bash tests/lab/tftp-root.sh $TFTP_SRC" >&2; exit 2; }

S=bst-s-$$ L=bst-l-$$
VS=vss$$ VL=vsl$$
SRV_IP=10.78.0.1 RELAY_IP=10.78.0.254 NODES_NET=10.78.64.0/18
harness_init bench-storm       # $WORK (755: bootd serves as nobody once it has bound its sockets); at exit the stack stopped, the namespaces deleted
bench_results "$RESULTS"
SRV_PIDS=()
stop_server() {
    [[ ${#SRV_PIDS[@]} -eq 0 ]] || bench_stop "${SRV_PIDS[@]}"
    SRV_PIDS=()
}
# Peak RSS of the server's processes (every process in its group), summed, kB.
server_rss() {
    local p t=0 k
    while read -r p; do
        k=$(awk '/VmHWM/ {print $2}' "/proc/$p/status" 2>/dev/null || true)
        t=$((t + ${k:-0}))
    done < <(cat "$CG_SRV/$CPU_PROCS" 2>/dev/null)
    echo "$t"
}

cpu_init storm
cpu_group CG_LOAD load $LOAD_CPU
cpu_join "$CG_LOAD"
cpu_group CG_SRV server $SERVER_CPU

ns_pair "$S" "$L" "$VS" "$VL"
ns_addr "$S" "$VS" "$SRV_IP/16"
ns_addr "$L" "$VL" "$RELAY_IP/16"
ip -n "$S" route add "$NODES_NET" via "$RELAY_IP"
ip -n "$L" route add local "$NODES_NET" dev lo

# The HA stacks: L's side of S's veth and a veth to each appliance beyond
# S on a bridge in L (the relay address on it), one segment where
# keepalived moves the boot address; and etcd's namespace E, where each
# appliance has a second veth on a bridge.
HA_K=0
for s in $STACKS; do
    case $s in
    bootd-ha3*) HA_K=3 ;;
    bootd-ha*) ((HA_K >= 2)) || HA_K=2 ;;
    esac
done
APP_NS=("$S") APP_IP=("$SRV_IP")
E=bst-e-$$
ETCD_ENDPOINTS=http://10.79.0.11:2379,http://10.79.0.12:2379,http://10.79.0.13:2379
BOOT_VIP=10.78.0.100
ECS_IP=10.78.0.250
KA_DIR=/run/bench-storm-$$
if ((HA_K > 0)); then
    ip -n "$L" addr del "$RELAY_IP/16" dev "$VL"
    ip -n "$L" link add br0 type bridge forward_delay 0 stp_state 0
    ip -n "$L" link set "$VL" master br0
    ns_addr "$L" br0 "$RELAY_IP/16"
    ip -n "$L" link set br0 up
    # What keepalived runs (its check, bootd ready), in a directory only
    # root can write: keepalived's script security. keepalived moves the
    # boot address alone (`--only boot`): the API and ingress VIPs are
    # lbd's, which neither the single appliance nor this stack runs, so
    # their instances and checks (a process each a second) would be cost
    # the boot path does not have. KA_ALL=1 renders every VIP, as before,
    # with a check that fails for the API and ingress ones.
    mkdir -p "$KA_DIR"; chmod 755 "$KA_DIR"
    on_exit "rm -rf $KA_DIR"
    install -m 755 "$BOOTD_BIN" "$KA_DIR/bootd"
    printf '#!/bin/sh\nexit 1\n' >"$KA_DIR/no-lbd"; chmod 755 "$KA_DIR/no-lbd"
    ns_new "$E"
    ip -n "$E" link add br1 type bridge forward_delay 0 stp_state 0
    ns_addr "$E" br1 10.79.0.11/24 10.79.0.12/24 10.79.0.13/24
    for ((k = 1; k < HA_K; k++)); do
        a_ns=bst-$k-$$ a_ip=10.78.0.$((k + 1))
        ns_new "$a_ns"
        ns_veth "$a_ns" "$VS" "$L" "vl$k-$$"
        ns_addr "$a_ns" "$VS" "$a_ip/16"
        ip -n "$L" link set "vl$k-$$" master br0 up
        ip -n "$a_ns" route add "$NODES_NET" via "$RELAY_IP"
        APP_NS+=("$a_ns") APP_IP+=("$a_ip")
    done
    if [[ $STACKS == *bootd-ha-api* ]]; then
        # The ECS fake on the machines' segment; the controller's secrets
        # readable by bootd (nobody) alone.
        ns_addr "$L" br0 "$ECS_IP/16"
        mkdir -p "$WORK/api"; chmod 755 "$WORK/api"
        printf 'LTAI-storm' >"$WORK/api/ecs-akid"
        head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$WORK/api/ecs-secret"
        head -c 24 /dev/urandom | base64 | tr -d '/+=' >"$WORK/api/tokens"
        chown nobody "$WORK"/api/*; chmod 600 "$WORK"/api/*
    fi
    for ((k = 0; k < HA_K; k++)); do
        ns_veth "${APP_NS[k]}" mg0 "$E" "me$k-$$"
        ns_addr "${APP_NS[k]}" mg0 "10.79.0.$((k + 1))/24"
        ip -n "$E" link set "me$k-$$" master br1 up
    done
fi

# --- the files, once --------------------------------------------------------
FILES=$WORK/files
mkdir -p "$FILES/images/storm" "$FILES/tftp" "$FILES/ignition"
chmod -R 755 "$FILES"
head -c $((KERNEL_MB << 20)) /dev/urandom >"$FILES/images/storm/kernel"
head -c $((INITRAMFS_MB << 20)) /dev/urandom >"$FILES/images/storm/initramfs"
head -c $((ROOTFS_MB << 20)) /dev/urandom >"$FILES/images/storm/rootfs"
cp "$TFTP_SRC"/undionly.kpxe "$TFTP_SRC"/ipxe.efi "$FILES/tftp/" 2>/dev/null || cp "$TFTP_SRC"/undionly.kpxe "$FILES/tftp/"
cp "$REPO"/examples/lab/ignition/*.ign "$FILES/ignition/"
chmod 644 "$FILES"/images/storm/* "$FILES"/tftp/* "$FILES"/ignition/*

node_ip() { local n=$(( 10 + $1 )); echo "10.78.$(( 64 + n / 256 )).$(( n % 256 ))"; }
node_mac() { printf '02:78:00:%02x:%02x:%02x' $(( $1 >> 16 & 255 )) $(( $1 >> 8 & 255 )) $(( $1 & 255 )); }

# write_site DIR N [host.admission as YAML] [unknown machines]: DIR/site.yaml.
# With SITE_STORE (host.store as YAML), DHCP is shared through it
# (host.dhcp.ha: loadBalancing) and nodes are sent to the boot address
# BOOT_VIP (vips.boot, keepalived's); else to SRV_IP.
write_site() {
    local d=$1 n=$2 admission=${3:-} unknown=${4:-0} i role listen=$SRV_IP url=$SRV_IP vips
    ((SITE_NODES > n)) && n=$SITE_NODES
    vips="{ api: $SRV_IP, ingress: $SRV_IP }"
    if [[ -n ${SITE_STORE:-} ]]; then
        listen=0.0.0.0 url=$BOOT_VIP
        vips="{ api: 10.78.0.101, ingress: 10.78.0.102, boot: $BOOT_VIP, vrrp: { interface: $VS, advertInterval: 1s } }"
    fi
    mkdir -p "$d/state"
    {
        cat <<EOF
cluster: { name: storm, baseDomain: example.test }
host:
${admission:+  admission: $admission
}${SITE_STORE:+  store: $SITE_STORE
}${SITE_API:+  api: $SITE_API
}  stateDir: $d/state
  http: { listen: "$listen:8080", url: "http://$url:8080" }
  dhcp:
    interface: $VS
    serverAddress: $url
    leaseTime: 1h
${SITE_STORE:+    ha: loadBalancing
}  tftp: { listen: "$listen:69", root: $FILES/tftp }
networks:
  - name: storm
    subnet: 10.78.0.0/16
    gateway: $RELAY_IP
    dnsServers: [$SRV_IP]
EOF
        # Machines in no node: a pool to boot from (inside the nodes'
        # range, local in L), and discovery to report to.
        ((unknown > 0)) && cat <<EOF
    pool: { start: 10.78.120.1, end: 10.78.127.254 }
discovery: { enabled: true, retry: 5s }
EOF
        cat <<EOF
vips: $vips
images:
  root: $FILES/images
  sets:
    storm: { arch: x86_64, kernel: storm/kernel, initramfs: storm/initramfs, rootfs: storm/rootfs }
ignition:
  dir: $FILES/ignition
  tokenTtl: 2h
EOF
        if ((n > 0)); then echo "nodes:"; else echo "nodes: []"; fi
        for ((i = 0; i < n; i++)); do
            role=worker; ((i == 0)) && role=bootstrap; ((i >= 1 && i <= 3)) && role=master
            printf '  - { name: n%05d, role: %s, live: true, macs: ["%s"], ip: %s }\n' "$i" "$role" "$(node_mac "$i")" "$(node_ip "$i")"
        done
    } >"$d/site.yaml"
}

# Each node's Ignition as bootd renders it (what the machine must get).
render_ignition() { # dir
    "$BOOTD_BIN" --site "$1/site.yaml" render ignition --each-to "$1/want" 2>"$1/render.log" \
        || { log "bootd render failed"; cat "$1/render.log" >&2; return 1; }
}

# on_server LOG COMMAND...: COMMAND in S (or ON_NS) on the server's CPU,
# counted in its group, a process of the stack.
on_server() {
    local out=$1
    shift
    cpu_spawn "$CG_SRV" --ns "${ON_NS:-$S}" --log "$out" taskset -c $SERVER_CPU "$@"
    SRV_PIDS+=("$SPAWNED")
}

run_bootd() { # dir
    on_server "$1/bootd.log" env RUST_LOG=info "$BOOTD_BIN" --site "$1/site.yaml"
    wait_http "$1"
}

# --- the HA stacks ------------------------------------------------------------
ectl() { ip netns exec "$E" etcdctl --endpoints "$ETCD_ENDPOINTS" --command-timeout 10s "$@"; }
HA_PREFIX=/bare-metal-boot/storm/
dhcp_members() { ectl get --prefix "${HA_PREFIX}members/dhcp/" --keys-only | grep -c . || true; }
http_at() { ip netns exec "$L" curl -sf -o /dev/null --max-time 1 "http://$1:8080/healthz"; }
# boot_holder: the index of the appliance holding the boot address (none: fails).
boot_holder() {
    local i
    for ((i = 0; i < ${#HA_PIDS[@]}; i++)); do
        [[ $(ip -n "${APP_NS[i]}" -4 -o addr show dev "$VS") == *" $BOOT_VIP/"* ]] && { echo "$i"; return 0; }
    done
    return 1
}
boot_held() { boot_holder >/dev/null && http_at "$BOOT_VIP"; }
# drop_vips: keepalived's addresses off every appliance (a keepalived
# stopped without its goodbye leaves them), before the next run.
drop_vips() {
    local ns a
    for ns in "${APP_NS[@]}"; do
        for a in $BOOT_VIP 10.78.0.101 10.78.0.102; do ip -n "$ns" addr del "$a/16" dev "$VS" 2>/dev/null || true; done
    done
}
HA_PIDS=() HA_IPS=() ETCD_PIDS=() HA_HOLDER=0
# ticks PID: its CPU time (every thread, user + system), clock ticks; "-" once it is gone.
ticks() { awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat" 2>/dev/null || echo -; }
# run_ha DIR N K: a 3-member etcd (fresh data in DIR) and K appliances,
# each with its site DIR/<k>/site.yaml (written here), serving; DIR/0/want
# each node's Ignition.
run_ha() {
    local d=$1 n=$2 k=$3 i cluster="" token=storm-$$-$RANDOM
    for i in 1 2 3; do cluster+="${cluster:+,}m$i=http://10.79.0.1$i:2380"; done
    ETCD_PIDS=()
    for i in 1 2 3; do
        ON_NS=$E on_server "$d/etcd-m$i.log" etcd --name "m$i" --data-dir "$d/etcd-m$i" \
            --listen-client-urls "http://10.79.0.1$i:2379" --advertise-client-urls "http://10.79.0.1$i:2379" \
            --listen-peer-urls "http://10.79.0.1$i:2380" --initial-advertise-peer-urls "http://10.79.0.1$i:2380" \
            --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token "$token"
        ETCD_PIDS+=("$SPAWNED")
    done
    wait_for 30 ectl endpoint health || { log "etcd: no healthy cluster"; tail -n 5 "$d"/etcd-m1.log >&2; return 1; }
    local api=
    if ((${HA_API:-0})); then
        # The provider: a fresh ECS fake on the generator's CPU (the cloud,
        # not the stack: not counted).
        cpu_spawn "$CG_LOAD" --ns "$L" --log "$d/ecs.log" taskset -c $LOAD_CPU python3 "$REPO/tests/controller/ecs-fake.py" \
            --in-netns --listen "$ECS_IP:8001" --access-key-id LTAI-storm --secret-file "$WORK/api/ecs-secret" \
            --port-file "$d/ecs-port" --start-after 5 --first-ip 10.78.64.10
        SRV_PIDS+=("$SPAWNED")
        wait_for 10 test -s "$d/ecs-port" || { log "the ECS fake did not start: $(tail -n 5 "$d/ecs.log")"; return 1; }
        api="{ listen: \"0.0.0.0:9443\", url: \"https://%s:9443\", tokens: { file: $WORK/api/tokens }, alibaba: { regionId: cn-hangzhou, endpoint: \"http://$ECS_IP:8001\", accessKeyId: { file: $WORK/api/ecs-akid }, accessKeySecret: { file: $WORK/api/ecs-secret }, zones: [cn-hangzhou-h], vSwitches: { cn-hangzhou-h: vsw-h1 }, securityGroupId: sg-storm, instanceTypes: { master: ecs.g6.xlarge, worker: ecs.g6.large }, imageId: m-rhcos418 } }"
    fi
    HA_PIDS=() HA_IPS=()
    for ((i = 0; i < k; i++)); do
        mkdir -p "$d/$i"; chmod 755 "$d/$i"
        # shellcheck disable=SC2059 # the appliance's own API URL
        SITE_API=${api:+$(printf "$api" "${APP_IP[i]}")} SITE_STORE="{ etcd: { endpoints: [${ETCD_ENDPOINTS//,/, }] } }" write_site "$d/$i" "$n"
    done
    render_ignition "$d/0"
    for ((i = 0; i < k; i++)); do
        ON_NS=${APP_NS[i]} on_server "$d/$i/bootd.log" env RUST_LOG=info "$BOOTD_BIN" --site "$d/$i/site.yaml" --name "a$i"
        HA_PIDS+=("$SPAWNED") HA_IPS+=("${APP_IP[i]}")
        # One at a time: the first settles the site's token key and CA.
        wait_for 30 http_at "${APP_IP[i]}" || { log "appliance a$i did not come up"; tail -n 30 "$d/$i/bootd.log" >&2; return 1; }
    done
    has_members() { [[ $(dhcp_members) == "$1" ]]; }
    wait_for 30 has_members "$k" || { log "DHCP group: $(dhcp_members) members, want $k"; return 1; }
    "$BOOTD_BIN" --site "$d/0/site.yaml" render keepalived --bootd "$KA_DIR/bootd" --lbd "$KA_DIR/no-lbd" \
        $( ((${KA_ALL:-0})) || echo --only boot) >"$d/keepalived.conf" 2>"$d/keepalived.err" || { log "render keepalived: $(cat "$d/keepalived.err")"; return 1; }
    for ((i = 0; i < k; i++)); do
        ON_NS=${APP_NS[i]} on_server "$d/$i/keepalived.log" keepalived -n -l -D -f "$d/keepalived.conf" \
            -p "$d/$i/ka.pid" -r "$d/$i/vrrp.pid" -c "$d/$i/chk.pid"
    done
    wait_for 20 boot_held || { log "no appliance holds the boot address $BOOT_VIP"; tail -n 20 "$d"/*/keepalived.log >&2; return 1; }
    HA_HOLDER=$(boot_holder)
    ETCD0=$(etcd_stats)
    local p
    TICKS0=()
    for p in "${HA_PIDS[@]}" "${ETCD_PIDS[@]}"; do TICKS0+=("$(ticks "$p")"); done
}
# etcd_stats: a member's counters (/metrics; ETCD_STATS_IP, m1 unless an
# etcd kill takes it): proposals committed, WAL fsyncs and their seconds,
# backend commits and their seconds, txns, ranges.
etcd_stats() {
    { ip netns exec "$E" curl -s --max-time 5 "http://${ETCD_STATS_IP:-10.79.0.11}:2379/metrics" || true; } | awk '
        $1 == "etcd_server_proposals_committed_total" { p = $2 }
        $1 == "etcd_disk_wal_fsync_duration_seconds_count" { fc = $2 }
        $1 == "etcd_disk_wal_fsync_duration_seconds_sum" { fs = $2 }
        $1 == "etcd_disk_backend_commit_duration_seconds_count" { bc = $2 }
        $1 == "etcd_disk_backend_commit_duration_seconds_sum" { bs = $2 }
        $1 == "etcd_mvcc_txn_total" { t = $2 }
        $1 == "etcd_mvcc_range_total" { r = $2 }
        END { print p + 0, fc + 0, fs + 0, bc + 0, bs + 0, t + 0, r + 0 }'
}
# controller_leader: the index of the appliance leading the controller
# (`GET /v1/cluster`: controller.leading); fails while none does.
controller_leader() {
    local i
    for ((i = 0; i < ${#HA_IPS[@]}; i++)); do
        ip netns exec "$L" curl -s --max-time 5 --cacert "$d/0/state/ca.pem" -H "authorization: Bearer $(cat "$WORK/api/tokens")" \
            "https://${HA_IPS[i]}:9443/v1/cluster" | python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["controller"]["leading"] else 1)' 2>/dev/null \
            && { echo "$i"; return 0; }
    done
    return 1
}
# etcd_leader: the index (0-2) of the member etcd says leads.
etcd_leader() {
    ectl endpoint status -w json | python3 -c '
import json, sys
st = json.load(sys.stdin)
lead = {s["Status"]["leader"] for s in st}
for s in st:
    if s["Status"]["header"]["member_id"] in lead:
        print(int(s["Endpoint"].split(":")[1].rsplit(".", 1)[1]) - 11)
        break
else:
    sys.exit(1)'
}
# dhcp_kinds IP: an appliance's bootd_dhcp_packets_total by kind, "kind=n ...".
dhcp_kinds() {
    { ip netns exec "$L" curl -s --max-time 5 "http://$1:8080/metrics" || true; } \
        | sed -n 's/^bootd_dhcp_packets_total{kind="\([a-z_]*\)"} \([0-9.e+]*\)$/\1=\2/p' | tr '\n' ' '
}
# ha_check DIR: what etcd and the appliances' logs say after the storm (the
# run's report prints it, from DIR/ha.out).
ha_check() {
    local d=$1 i e1 p t names=() split=""
    for ((i = 0; i < ${#HA_PIDS[@]}; i++)); do names+=("a$i"); done
    names+=(etcd-m1 etcd-m2 etcd-m3)
    i=0
    for p in "${HA_PIDS[@]}" "${ETCD_PIDS[@]}"; do
        t=$(ticks "$p")
        if [[ $t == - ]]; then split+="${names[i]} (killed) ?, "
        else split+="${names[i]} $(awk -v a="${TICKS0[i]}" -v b="$t" -v hz="$CPU_HZ" 'BEGIN { printf "%.2f", (b - a) / hz }') s $(awk '/VmHWM/ { printf "%d", $2 / 1024 }' "/proc/$p/status") MiB, "; fi
        i=$((i + 1))
    done
    echo "server CPU during the storm and peak RSS, by process (/proc: user + system, VmHWM): ${split%, }"
    e1=$(etcd_stats)
    # shellcheck disable=SC2086 # the numbers
    echo "etcd ${ETCD_STATS_IP:-10.79.0.11} during the storm: $(awk -v a="$ETCD0" -v b="$e1" 'BEGIN { split(a, x, " "); split(b, y, " ")
        fc = y[2] - x[2]; bc = y[4] - x[4]
        printf "proposals committed %d, WAL fsyncs %d (mean %.2f ms), backend commits %d (mean %.2f ms), txns %d, ranges %d",
            y[1] - x[1], fc, (fc > 0 ? (y[3] - x[3]) * 1e3 / fc : 0), bc, (bc > 0 ? (y[5] - x[5]) * 1e3 / bc : 0), y[6] - x[6], y[7] - x[7] }')"
    for ((i = 0; i < ${#HA_IPS[@]}; i++)); do
        echo "DHCP packets by kind, a$i (${HA_IPS[i]}): $(dhcp_kinds "${HA_IPS[i]}" || true)"
        echo "UDP sockets that dropped datagrams, a$i (local port: drops): $(socket_drops "${APP_NS[i]}")"
    done
    ectl get --prefix "${HA_PREFIX}dhcp/" -w json >"$d/dhcp.json"
    ectl get --prefix "${HA_PREFIX}bootd/spent/" --keys-only >"$d/spent.keys"
    local api_args=()
    if [[ -s $d/ecs-port ]]; then
        # Each node's Ignition as an appliance that lived renders it (its
        # node overlay holds the nodes made through the API).
        i=0; [[ $(ticks "${HA_PIDS[0]}") != - ]] || i=1
        rm -rf "$d/api-want"
        "$BOOTD_BIN" --site "$d/$i/site.yaml" render ignition --each-to "$d/api-want" 2>"$d/api-render.log" || echo "render: $(tail -n 3 "$d/api-render.log")"
        ip netns exec "$L" curl -s --max-time 30 "http://$ECS_IP:8001/_fake/instances" >"$d/instances.json"
        api_args=(--instances "$d/instances.json" --nodes "$(wc -l <"$d/created.txt")" --sums "$d/sums.txt" --want "$d/api-want")
        echo "nodes by phase, a$i's API: $(ip netns exec "$L" curl -s --max-time 30 --cacert "$d/0/state/ca.pem" -H "authorization: Bearer $(cat "$WORK/api/tokens")" \
            "https://${HA_IPS[i]}:9443/v1/nodes" | python3 -c 'import collections, json, sys
items = json.load(sys.stdin)["nodes"]
print(dict(collections.Counter(n.get("phase", "?") for n in items)))' 2>&1)"
    fi
    echo "HA: $(python3 "$REPO/bench/storm/ha-check.py" --dhcp "$d/dhcp.json" --spent "$d/spent.keys" --prefix "$HA_PREFIX" "${api_args[@]}" "$d"/[0-9]/bootd.log 2>&1 | tr '\n' ' ')"
}
# The makespan of the last run of each stack and N ("STACK N"), and of
# any stack per N: a kill's timing takes its stack's without the kill
# (bootd-ha for bootd-ha-kill), else any.
declare -A LAST_MAKESPAN=()

# UDP datagrams the kernel dropped for a full receive buffer, in namespace $1
# (/proc/net/snmp Udp: RcvbufErrors), and the softnet backlog's drops (all CPUs).
udp_drops() { proc_counter "$1" /proc/net/snmp Udp RcvbufErrors; }
# proc_counter NS FILE SECTION FIELD: a counter of /proc/net/snmp or
# /proc/net/netstat in namespace NS (a header line of names, then values).
proc_counter() {
    # shellcheck disable=SC2016 # awk's fields
    ip netns exec "$1" awk -v s="$3:" -v f="$4" '$1 == s { if (!h) { for (i = 1; i <= NF; i++) c[$i] = i; h = 1 } else print $c[f] + 0 }' "$2"
}
# socket_drops NS: the UDP sockets in NS with drops (/proc/net/udp's last
# column), "port:drops ..." (bound ports; "-" when none dropped).
socket_drops() {
    # shellcheck disable=SC2016 # awk's fields
    ip netns exec "$1" awk 'function hex(s, i, n) { n = 0; for (i = 1; i <= length(s); i++) n = n * 16 + index("0123456789ABCDEF", substr(s, i, 1)) - 1; return n }
        NR > 1 && $NF + 0 > 0 { split($2, a, ":"); printf "%d:%d ", hex(a[2]), $NF; n++ }
        END { if (!n) printf "-" }' /proc/net/udp
}
srv_drops() { local ns t=0; for ns in "${APP_NS[@]}"; do t=$((t + $(udp_drops "$ns"))); done; echo "$t"; }
# tcp_ext NS FIELD: a TcpExt counter of /proc/net/netstat in namespace NS
# (ListenOverflows: connections refused on a full accept queue, their SYN
# dropped; TCPSynRetrans: SYNs sent again, 1 s after the first).
tcp_ext() { proc_counter "$1" /proc/net/netstat TcpExt "$2"; }
srv_overflows() { local ns t=0; for ns in "${APP_NS[@]}"; do t=$((t + $(tcp_ext "$ns" ListenOverflows))); done; echo "$t"; }
backlog_drops() { local s=0 _a d _r; while read -r _a d _r; do s=$((s + 16#$d)); done </proc/net/softnet_stat; echo "$s"; }

# bootd-reload: a node more in the site file and SIGHUP, every RELOAD_EVERY
# seconds until the storm ends (at most 900 times).
RELOADER=
start_reloads() { # dir pid
    local d=$1 pid=$2
    (
        trap - EXIT ERR
        for ((k = 0; k < 900; k++)); do
            sleep "$RELOAD_EVERY"
            printf '  - { name: r%05d, role: worker, live: true, macs: ["02:79:00:00:%02x:%02x"], ip: 10.78.%d.%d }\n' \
                "$k" $((k >> 8)) $((k & 255)) $((200 + k / 250)) $((1 + k % 250)) >>"$d/site.yaml"
            kill -HUP "$pid" 2>/dev/null || break
        done
    ) &
    RELOADER=$!
    PIDS+=("$RELOADER")   # stopped at exit, whatever way the run ends
}
stop_reloads() { # dir: how many reloads bootd took and refused
    [[ -n $RELOADER ]] || return 0
    bench_stop "$RELOADER"
    RELOADER=
    say "   reloads under the storm: $(grep -c 'site reloaded' "$1/bootd.log" || true) taken, $(grep -c 'reload refused' "$1/bootd.log" || true) refused (a node added to the file each time)"
}

http_up() { ip netns exec "$L" curl -sf -o /dev/null --max-time 1 "http://$SRV_IP:8080/healthz"; }
dhcp_up() { ip netns exec "$S" ss -Hlun 'sport = :67' | grep -q .; }
wait_http() { # dir: the server's HTTP answers /healthz, from the machines' side
    wait_for 20 http_up && return 0
    log "the HTTP server did not come up"; tail -n 30 "$1"/*.log >&2 || true
    return 1
}

# --- the peer stacks: what people run today, with pre-rendered files ------
# The OpenShift helper node's way: static per-MAC iPXE scripts, each node's
# Ignition as a file (the same bytes bootd serves), the images beside them,
# served by nginx (one worker per CPU, sendfile, access log to a file).
# TUNED=1: the directives of the dnsmasq-nginx-tuned stack (the header).
write_www() { # dir n
    local d=$1 n=$2 i mac chunk="" listen_opts=""
    if [[ ${TUNED:-0} == 1 ]]; then chunk=" sendfile_max_chunk 512k;" listen_opts=" sndbuf=1m"; fi
    mkdir -p "$d/www/ipxe"
    ln -s "$FILES/images" "$d/www/images"
    ln -s "$d/want" "$d/www/ignition"
    # shellcheck disable=SC2016 # iPXE's variable
    printf '#!ipxe\nchain http://%s:8080/ipxe/${mac:hexhyp}.ipxe\n' "$SRV_IP" >"$d/www/boot.ipxe"
    for ((i = 0; i < n; i++)); do
        mac=$(node_mac "$i")
        printf '#!ipxe\nkernel http://%s:8080/images/storm/kernel initrd=initramfs coreos.live.rootfs_url=http://%s:8080/images/storm/rootfs ignition.firstboot ignition.platform.id=metal ignition.config.url=http://%s:8080/ignition/n%05d.ign\ninitrd http://%s:8080/images/storm/initramfs\nboot\n' \
            "$SRV_IP" "$SRV_IP" "$SRV_IP" "$i" "$SRV_IP" >"$d/www/ipxe/${mac//:/-}.ipxe"
    done
    chmod -R a+rX "$d/www" "$d/want"
    cat >"$d/nginx.conf" <<NGINX
worker_processes 2;
pid $d/nginx.pid;
error_log $d/nginx-error.log;
events { worker_connections 16384; }
http {
    access_log $d/nginx-access.log;
    sendfile on;$chunk tcp_nopush on; keepalive_timeout 30;
    default_type application/octet-stream;
    client_body_temp_path $d/tmp; proxy_temp_path $d/tmp; fastcgi_temp_path $d/tmp; uwsgi_temp_path $d/tmp; scgi_temp_path $d/tmp;
    server { listen $SRV_IP:8080 reuseport$listen_opts; root $d/www; location /healthz { return 200; } }
}
NGINX
    mkdir -p "$d/tmp"
}

start_nginx() { # dir
    on_server "$1/nginx.log" nginx -c "$1/nginx.conf" -g 'daemon off; user root;'
    wait_http "$1"
}

start_dnsmasq() { # dir n: DHCP (a reservation per node) and TFTP
    local d=$1 n=$2 i
    for ((i = 0; i < n; i++)); do echo "$(node_mac "$i"),$(node_ip "$i")"; done >"$d/dhcp-hosts"
    on_server "$d/dnsmasq.out" dnsmasq --keep-in-foreground --port=0 \
        --interface="$VS" --bind-interfaces --dhcp-range=10.78.0.0,static,255.255.0.0,1h \
        --dhcp-hostsfile="$d/dhcp-hosts" --dhcp-leasefile="$d/dnsmasq.leases" --no-ping --dhcp-lease-max=$((n + 1000)) \
        --dhcp-userclass=set:ipxe,iPXE --dhcp-boot=tag:!ipxe,undionly.kpxe,,$SRV_IP \
        --dhcp-boot=tag:ipxe,http://$SRV_IP:8080/boot.ipxe \
        --enable-tftp --tftp-root="$FILES/tftp" --tftp-no-fail --user=root --log-facility="$d/dnsmasq.log"
    wait_for 10 dhcp_up && return 0
    log "dnsmasq did not come up"; return 1
}

start_kea_tftpd() { # dir n: Kea (a reservation per node) and tftpd-hpa
    local d=$1 n=$2 i sep=""
    {
        cat <<KEA
{ "Dhcp4": {
    "interfaces-config": { "interfaces": [ "$VS/$SRV_IP" ], "dhcp-socket-type": "udp" },
    "lease-database": { "type": "memfile", "persist": true, "name": "$d/kea-leases4.csv", "lfc-interval": 0 },
    "multi-threading": { "enable-multi-threading": true, "thread-pool-size": 2, "packet-queue-size": 64 },
    "valid-lifetime": 3600,
    "client-classes": [
        { "name": "ipxe", "test": "option[77].hex == 'iPXE'", "boot-file-name": "http://$SRV_IP:8080/boot.ipxe" },
        { "name": "pxe", "test": "not member('ipxe')", "next-server": "$SRV_IP", "boot-file-name": "undionly.kpxe" }
    ],
    "subnet4": [ { "id": 1, "subnet": "10.78.0.0/16",
        "option-data": [ { "name": "routers", "data": "$RELAY_IP" } ],
        "reservations": [
KEA
        for ((i = 0; i < n; i++)); do
            printf '%s{ "hw-address": "%s", "ip-address": "%s" }\n' "$sep" "$(node_mac "$i")" "$(node_ip "$i")"
            sep=","
        done
        cat <<KEA
        ] } ],
    "loggers": [ { "name": "kea-dhcp4", "severity": "INFO", "output_options": [ { "output": "$d/kea.log" } ] } ]
} }
KEA
    } >"$d/kea.json"
    on_server "$d/kea.out" env KEA_PIDFILE_DIR="$d" KEA_LOCKFILE_DIR="$d" kea-dhcp4 -c "$d/kea.json"
    on_server "$d/tftpd.log" in.tftpd -L -u root -s "$FILES/tftp" -a "$SRV_IP:69"
    wait_for 10 dhcp_up && return 0
    log "kea did not come up"; tail -n 20 "$d/kea.out" >&2; return 1
}

say "== storm: N machines network-booting at once, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "machine: $(uname -srm), $(nproc --all) vCPU, $(. /etc/os-release && echo "$PRETTY_NAME")"
say "bootd: $BOOTD_BIN ($(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null || echo '?'))"
[[ $UNKNOWN == 0 ]] || say "machines in no node (discovery): UNKNOWN=\"$UNKNOWN\", each value a run of its own"
say "files: kernel $KERNEL_MB MiB, initramfs $INITRAMFS_MB MiB, rootfs $ROOTFS_MB MiB for $ROOTFS_SHARE of the machines (reset halfway, resumed with Range); iPXE undionly.kpxe over TFTP (blksize 1468)"
say "pinning: server CPU $SERVER_CPU, generator CPU $LOAD_CPU; cpu accounting: $CPU_HOW; ramp ${RAMP}s"
[[ $STACKS == *bootd-ha* ]] && say "keepalived (HA stacks): $( ((${KA_ALL:-0})) && echo "every VIP (KA_ALL=1; the API and ingress checks fail: no lbd)" || echo "the boot address only (--only boot)")"
say ""

for n in $MACHINES; do
    for ((round = 1; round <= ROUNDS; round++)); do
        # shellcheck disable=SC2086
        for stack in $(order "$round" $STACKS); do
          # shellcheck disable=SC2086
          for u in $(order "$round" $UNKNOWN); do
            if ((u > 0)) && [[ $stack != bootd* || $stack == bootd-ha* ]]; then
                say "-- $stack N=$n +$u unknown round $round: skipped (no discovery in this stack)"
                continue
            fi
            d=$WORK/$stack-$n-$round
            label="$stack N=$n"
            if ((u > 0)); then d=$d-u$u; label="$label +$u unknown"; fi
            mkdir -p "$d"; chmod 755 "$d"
            admission=
            [[ $stack == bootd-unlimited ]] && admission="{imageTransfers: 0}"
            want=$d/want
            if [[ $stack == bootd-ha* ]]; then want=$d/0/want; else
                write_site "$d" "$n" "$admission" "$u"
                render_ignition "$d"
            fi
            servers=$SRV_IP storm_args=() kill_note= ETCD_STATS_IP=
            case $stack in
            bootd | bootd-unlimited) run_bootd "$d" ;;
            bootd-reload) run_bootd "$d"; start_reloads "$d" "${SRV_PIDS[0]}" ;;
            dnsmasq-nginx) write_www "$d" "$n"; start_dnsmasq "$d" "$n"; start_nginx "$d" ;;
            dnsmasq-nginx-tuned) TUNED=1 write_www "$d" "$n"; start_dnsmasq "$d" "$n"; start_nginx "$d" ;;
            kea-tftpd-nginx) write_www "$d" "$n"; start_kea_tftpd "$d" "$n"; start_nginx "$d" ;;
            bootd-ha | bootd-ha3 | bootd-ha-kill | bootd-ha3-kill | bootd-ha-etcd-kill)
                k=2; [[ $stack == bootd-ha3* ]] && k=3
                run_ha "$d" "$n" "$k"
                servers=$(IFS=,; echo "${HA_IPS[*]}")
                say "   boot address $BOOT_VIP held by a$HA_HOLDER (${HA_IPS[HA_HOLDER]})"
                if [[ $stack == *-kill ]]; then
                    base=${stack%-kill}; base=${base%-etcd}
                    expect=${LAST_MAKESPAN["$base $n"]:-${LAST_MAKESPAN["any $n"]:-10}}
                    at=$(awk -v m="$expect" -v r="$RANDOM" 'BEGIN { printf "%.2f", m * (0.3 + 0.4 * r / 32767) }')
                fi
                if [[ $stack == *-etcd-kill ]]; then
                    # etcd's leader: the member whose loss costs an election.
                    v=$(etcd_leader) || { log "etcd: no leader found"; exit 1; }
                    ETCD_STATS_IP=10.79.0.1$(( (v + 1) % 3 + 1 )); ETCD0=$(etcd_stats)
                    kill_note="kill: etcd member m$((v + 1)), the leader (PID ${ETCD_PIDS[v]}, 10.79.0.1$((v + 1))), at $at s, of a makespan expected $expect s; counters from m$(( (v + 1) % 3 + 1 ))"
                    storm_args=(--kill-pid "${ETCD_PIDS[v]}" --kill-server "10.79.0.1$((v + 1))" --kill-at "$at" --reboot-after 60)
                elif [[ $stack == *-kill ]]; then
                    v=$HA_HOLDER
                    kill_note="kill: appliance a$v, the boot address's holder (PID ${HA_PIDS[v]}, ${HA_IPS[v]} and $BOOT_VIP), at $at s, of a makespan expected $expect s"
                    storm_args=(--kill-pid "${HA_PIDS[v]}" --kill-server "${HA_IPS[v]},$BOOT_VIP" --kill-at "$at" --reboot-after 60)
                fi
                ;;
            bootd-ha-api | bootd-ha-api-kill)
                HA_API=1 run_ha "$d" 0 2
                servers=$(IFS=,; echo "${HA_IPS[*]}")
                wait_for 30 controller_leader >/dev/null || { log "no appliance leads the controller"; exit 1; }
                v=$(controller_leader)
                API_AT=${HA_IPS[(v + 1) % ${#HA_IPS[@]}]}
                storm_args=(--cloud "http://$ECS_IP:8001/_fake/instances" --created "$d/created.txt" --sums "$d/sums.txt")
                say "   boot address $BOOT_VIP held by a$HA_HOLDER (${HA_IPS[HA_HOLDER]}); the controller led by a$v; the nodes POSTed to $API_AT"
                if [[ $stack == *-kill ]]; then
                    expect=${LAST_MAKESPAN["bootd-ha-api $n"]:-${LAST_MAKESPAN["any $n"]:-10}}
                    at=$(awk -v m="$expect" -v r="$RANDOM" 'BEGIN { printf "%.2f", m * (0.3 + 0.4 * r / 32767) }')
                    ks=${HA_IPS[v]}; ((v != HA_HOLDER)) || ks+=",$BOOT_VIP"
                    kill_note="kill: appliance a$v, the controller's leader (PID ${HA_PIDS[v]}, $ks), at $at s, of a makespan expected $expect s"
                    storm_args+=(--kill-pid "${HA_PIDS[v]}" --kill-server "$ks" --kill-at "$at")
                fi
                ;;
            *) echo "unknown stack $stack" >&2; exit 2 ;;
            esac
            unknown_args=()
            ((u > 0)) && unknown_args=(--unknown "$u" --discovered "$d/state/discovered.json")
            deadline=900
            [[ $stack == *-kill ]] && deadline=$KILL_DEADLINE
            c0=$(cpu_read "$CG_SRV")
            us0=$(srv_drops); ul0=$(udp_drops "$L"); bd0=$(backlog_drops)
            lo0=$(srv_overflows); sr0=$(tcp_ext "$L" TCPSynRetrans)
            rc=0
            if [[ $stack == bootd-ha-api* ]]; then
                # The operator's script, beside the storm (which times each
                # node from its POST).
                cpu_spawn "$CG_LOAD" --ns "$L" --log "$d/create.out" taskset -c $LOAD_CPU python3 "$REPO/bench/storm/create-nodes.py" \
                    --url "https://$API_AT:9443" --ca "$d/0/state/ca.pem" --token-file "$WORK/api/tokens" --count "$n" --created "$d/created.txt"
                SRV_PIDS+=("$SPAWNED")
            fi
            ip netns exec "$L" taskset -c $LOAD_CPU "$STORM_BIN" --machines "$n" --server "$servers" --relay $RELAY_IP \
                --tftp-root "$FILES/tftp" --images-root "$FILES/images" --ignition-dir "$want" \
                --rootfs-share "$ROOTFS_SHARE" --ramp "$RAMP" --deadline "$deadline" --json "$d/storm.json" \
                "${unknown_args[@]}" "${storm_args[@]}" >"$d/storm.out" 2>&1 || rc=$?
            c1=$(cpu_read "$CG_SRV")
            rss=$(server_rss)
            if [[ $stack == bootd-ha* ]]; then
                ha_check "$d" >"$d/ha.out"
                echo "boot address after the storm: held by a$(boot_holder || echo '-none-')" >>"$d/ha.out"
            fi
            stop_reloads "$d"
            stop_server
            [[ $stack != bootd-ha* ]] || drop_vips
            cpu=$(cpu_used "$c0" "$c1" %.3f); user=${cpu#* }; cpu=${cpu%% *}
            booted=$(python3 -c "import json; print(json.load(open('$d/storm.json'))['booted'])" 2>/dev/null || echo 0)
            per=$(awk -v c="$cpu" -v b="$booted" 'BEGIN { if (b > 0) printf "%.4f", c / b; else print "nan" }')
            say "-- $label round $round: exit $rc, server CPU ${cpu} s (user ${user} s; ${per} s per booted machine), peak RSS ${rss} kB"
            [[ -z $kill_note ]] || say "   $kill_note"
            [[ ! -s $d/create.out ]] || sed 's/^/   /' "$d/create.out" | tee -a "$RESULTS"
            sed 's/^/   /' "$d/storm.out" | tee -a "$RESULTS"
            say "   UDP datagrams dropped on a full receive buffer: server side $(( $(srv_drops) - us0 )), machines' side $(( $(udp_drops "$L") - ul0 )); softnet backlog drops $(( $(backlog_drops) - bd0 ))"
            say "   TCP: accept queue overflows server side $(( $(srv_overflows) - lo0 )); SYNs the machines sent again $(( $(tcp_ext "$L" TCPSynRetrans) - sr0 ))"
            [[ ! -s $d/ha.out ]] || sed 's/^/   /' "$d/ha.out" | tee -a "$RESULTS"
            echo "$stack $n $round $cpu $rss $(tr -d '\n ' <"$d/storm.json" 2>/dev/null || echo '{}')" >>"$RESULTS.jsonl"
            if [[ $stack != *-kill ]]; then
                LAST_MAKESPAN["$stack $n"]=$(python3 -c "import json; print(json.load(open('$d/storm.json'))['makespan'])" 2>/dev/null || echo 10)
                LAST_MAKESPAN["any $n"]=${LAST_MAKESPAN["$stack $n"]}
            fi
            rm -rf "$d/state" "$d/want" "$d/www" "$d"/[0-9]/state "$d"/[0-9]/want "$d"/etcd-m?
          done
        done
    done
done
say ""
say "raw: $RESULTS, per run: $RESULTS.jsonl"
