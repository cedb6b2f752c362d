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
#   kea-tftpd-nginx  Kea (reservations, memfile persist, its multi-threading
#                    on with 2 threads) + tftpd-hpa + nginx
# All on CPU 0, every process of a stack counted.
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
# RESULTS (bench/storm/results-<UTC date>.txt).
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

write_site() { # dir n [host.admission as YAML] [unknown machines]
    local d=$1 n=$2 admission=${3:-} unknown=${4:-0} i role
    ((SITE_NODES > n)) && n=$SITE_NODES
    mkdir -p "$d/state"
    {
        cat <<EOF
cluster: { name: storm, baseDomain: example.test }
host:
${admission:+  admission: $admission
}  stateDir: $d/state
  http: { listen: "$SRV_IP:8080", url: "http://$SRV_IP:8080" }
  dhcp:
    interface: $VS
    serverAddress: $SRV_IP
    leaseTime: 1h
  tftp: { listen: "$SRV_IP:69", root: $FILES/tftp }
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
vips: { api: $SRV_IP, ingress: $SRV_IP }
images:
  root: $FILES/images
  sets:
    storm: { arch: x86_64, kernel: storm/kernel, initramfs: storm/initramfs, rootfs: storm/rootfs }
ignition:
  dir: $FILES/ignition
  tokenTtl: 2h
nodes:
EOF
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

# on_server LOG COMMAND...: COMMAND in S on the server's CPU, counted in
# its group, a process of the stack.
on_server() {
    local out=$1
    shift
    cpu_spawn "$CG_SRV" --ns "$S" --log "$out" taskset -c $SERVER_CPU "$@"
    SRV_PIDS+=("$SPAWNED")
}

run_bootd() { # dir
    on_server "$1/bootd.log" env RUST_LOG=info "$BOOTD_BIN" --site "$1/site.yaml"
    wait_http "$1"
}

# UDP datagrams the kernel dropped for a full receive buffer, in namespace $1
# (/proc/net/snmp Udp: RcvbufErrors), and the softnet backlog's drops (all CPUs).
udp_drops() {
    # shellcheck disable=SC2016 # awk's fields
    ip netns exec "$1" awk '/^Udp:/ { if (!h) { for (i = 1; i <= NF; i++) c[$i] = i; h = 1 } else print $c["RcvbufErrors"] }' /proc/net/snmp
}
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
write_www() { # dir n
    local d=$1 n=$2 i mac
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
    sendfile on; tcp_nopush on; keepalive_timeout 30;
    default_type application/octet-stream;
    client_body_temp_path $d/tmp; proxy_temp_path $d/tmp; fastcgi_temp_path $d/tmp; uwsgi_temp_path $d/tmp; scgi_temp_path $d/tmp;
    server { listen $SRV_IP:8080 reuseport; root $d/www; location /healthz { return 200; } }
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
say ""

for n in $MACHINES; do
    for ((round = 1; round <= ROUNDS; round++)); do
        # shellcheck disable=SC2086
        for stack in $(order "$round" $STACKS); do
          # shellcheck disable=SC2086
          for u in $(order "$round" $UNKNOWN); do
            if ((u > 0)) && [[ $stack != bootd* ]]; then
                say "-- $stack N=$n +$u unknown round $round: skipped (no discovery in this stack)"
                continue
            fi
            d=$WORK/$stack-$n-$round
            label="$stack N=$n"
            if ((u > 0)); then d=$d-u$u; label="$label +$u unknown"; fi
            mkdir -p "$d"; chmod 755 "$d"
            admission=
            [[ $stack == bootd-unlimited ]] && admission="{imageTransfers: 0}"
            write_site "$d" "$n" "$admission" "$u"
            render_ignition "$d"
            case $stack in
            bootd | bootd-unlimited) run_bootd "$d" ;;
            bootd-reload) run_bootd "$d"; start_reloads "$d" "${SRV_PIDS[0]}" ;;
            dnsmasq-nginx) write_www "$d" "$n"; start_dnsmasq "$d" "$n"; start_nginx "$d" ;;
            kea-tftpd-nginx) write_www "$d" "$n"; start_kea_tftpd "$d" "$n"; start_nginx "$d" ;;
            *) echo "unknown stack $stack" >&2; exit 2 ;;
            esac
            unknown_args=()
            ((u > 0)) && unknown_args=(--unknown "$u" --discovered "$d/state/discovered.json")
            c0=$(cpu_read "$CG_SRV")
            us0=$(udp_drops "$S"); ul0=$(udp_drops "$L"); bd0=$(backlog_drops)
            rc=0
            ip netns exec "$L" taskset -c $LOAD_CPU "$STORM_BIN" --machines "$n" --server $SRV_IP --relay $RELAY_IP \
                --tftp-root "$FILES/tftp" --images-root "$FILES/images" --ignition-dir "$d/want" \
                --rootfs-share "$ROOTFS_SHARE" --ramp "$RAMP" --deadline 900 --json "$d/storm.json" "${unknown_args[@]}" >"$d/storm.out" 2>&1 || rc=$?
            c1=$(cpu_read "$CG_SRV")
            rss=$(server_rss)
            stop_reloads "$d"
            stop_server
            cpu=$(cpu_used "$c0" "$c1" %.3f); user=${cpu#* }; cpu=${cpu%% *}
            booted=$(python3 -c "import json; print(json.load(open('$d/storm.json'))['booted'])" 2>/dev/null || echo 0)
            per=$(awk -v c="$cpu" -v b="$booted" 'BEGIN { if (b > 0) printf "%.4f", c / b; else print "nan" }')
            say "-- $label round $round: exit $rc, server CPU ${cpu} s (user ${user} s; ${per} s per booted machine), peak RSS ${rss} kB"
            sed 's/^/   /' "$d/storm.out" | tee -a "$RESULTS"
            say "   UDP datagrams dropped on a full receive buffer: server side $(( $(udp_drops "$S") - us0 )), machines' side $(( $(udp_drops "$L") - ul0 )); softnet backlog drops $(( $(backlog_drops) - bd0 ))"
            echo "$stack $n $round $cpu $rss $(tr -d '\n ' <"$d/storm.json" 2>/dev/null || echo '{}')" >>"$RESULTS.jsonl"
            rm -rf "$d/state" "$d/want" "$d/www"
          done
        done
    done
done
say ""
say "raw: $RESULTS, per run: $RESULTS.jsonl"
