#!/usr/bin/env bash
# The test command (README): installs what the tests need on a fresh Debian 12
# machine (apt packages, and the Rust toolchain rust-toolchain.toml pins, by
# rustup, when there is none), then runs every test:
#   0. the release build, then a 30-minute soak of the all-in-one binary
#      under mixed DHCP, DNS, HTTP, TFTP, LB and reload load, in the
#      background (niced) while the rest runs: RSS, descriptors, threads
#      and state files sampled, growth bounded (tests/soak/soak.sh);
#   1. formatting, clippy (-D warnings), no module import cycles, source
#      file lengths, the architecture index, the ECS fake's own tests;
#   2. cargo test --workspace: unit, golden and integration tests of every crate
#      (real servers on loopback, talked to by real clients: hyper, curl, dig,
#      HTTPS health checks, SQLite store with kill -9, 50 kill -9 at random moments under DHCP,
#      API and reload load, full disks on real tmpfs, provider fakes);
#   3. systemd units (verify, security <= 2.0), the sd_notify protocol of each
#      daemon and of the all-in-one binary, which must serve DNS, HTTP and LB;
#      the units installed by systemd/install.sh into a Debian 12 container
#      booted by systemd-nspawn (systemd as PID 1): started, serving,
#      reloaded, dnsd and lbd reading bootd's node overlay, stopped;
#      the container image built by podman from a debootstrap base (no
#      registry), run non-root with two capabilities, a VM netbooting
#      through it, its state volume kept across a restart; a step of the
#      system clock under bootd (libfaketime) moving no lease and no token;
#      lbd serving a VIP that arrives after it started, and `lbd ready`
#      (keepalived's check) in a namespace of its own; keepalived over
#      unicast peers on a bridge that drops multicast (tests/ha/vrrp-unicast.sh);
#      two appliances on a 3-member etcd with keepalived (tests/ha/e2e.sh,
#      hotStandby and loadBalancing): one powered off mid-boot, a relayed
#      DHCP storm with one killed halfway, etcd quorum lost and back;
#   4. dnsd against NSD and Knot (secondaries via AXFR/NOTIFY, differential);
#      the controller's provider clients against Prism mocks of the specs;
#   5. the status page rendered by headless Chromium (the lab, and a rack of
#      1 000 nodes: counts, filters, phase bars, size, render time); the controller's whole
#      loop with the local provider: API call -> QEMU VM -> netboot -> Ready;
#      and with the redfish and ipmi providers driving sushy-tools and
#      virtualbmc (PyPI), which drive libvirt VMs: Ready, a second boot that
#      boots the disk (no install loop), delete -> powered off, a BMC
#      certificate refused without its CA, the BMC password nowhere;
#      through Redfish too, the inspection agent's report (CPUs, memory,
#      disks, NIC, LLDP from lldpd), the install to the disk root-device
#      hints choose with the real coreos-installer, that disk booting, and
#      a machine below its role's minimums refused;
#      last, cargo-audit against an advisory snapshot (cargo-audit built
#      in the background, niced, from the end of cargo test);
#   6. (6 and 7 run in a second lane, in the background, beside 3-5; the
#      lane ends with the fuzz targets built in release and 10 s of random
#      mutation per target)
#      DHCP interop: udhcpc, dhclient, perfdhcp (relay) and ISC dhcrelay with
#      option 82 (a port names a node; the option echoed) against bootd;
#   7. end to end: real firmware network-boots the lab site's nodes from bootd
#      inside a private network namespace: SeaBIOS + iPXE ROM, OVMF + iPXE ROM and
#      OVMF's own PXE (-> ipxe.efi over TFTP) boot a Linux guest that proves the
#      Ignition bytes it fetched equal what bootd rendered, then runs the real
#      Ignition client (fetch and files stages) against role configs of spec
#      3.2.0, 3.3.0 and 3.4.0, over HTTP and through the HTTPS pointer config,
#      and proves the files it wrote are the node's; SLOF (ppc64) loads
#      GRUB (core.elf) over TFTP, which loads the node's grub.cfg from bootd;
#      and a node boots from a `catalog:` image set that `images fetch` took
#      from a generated stream document (bootd serves the cached bytes);
#      the real Ignition client as each platform runs it (aliyun, powervs,
#      packet, metal): a node created through the API against the provider's
#      fake, its user data served where the platform serves it (the metadata
#      address, a config drive, the metadata service), the pointer merged
#      from a machine-config server stand-in behind lbd's 22623 VIP, the
#      node's MachineConfigServed condition; and without the resolver step,
#      the condition that says so.
# Needs root (apt, network namespaces). Prints "N passed, N failed" at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

# Every step is timed: tests/lib/steps.sh records lane, start, duration
# and verdict, and the table at the end shows them with each lane's
# critical path (tests/README.md, "The test command").
. tests/lib/steps.sh
steps_init target/steps

setup "dependencies: Debian packages" bash tests/lab/deps.sh
# libvirt, ipmitool and the BMC emulators (sushy-tools, virtualbmc from PyPI)
setup "dependencies: BMC emulators" bash tests/controller/bmc-deps.sh
# The same home as tests/lab/rust.sh installs into, when HOME is unset.
HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
export HOME
setup "dependencies: Rust toolchain" bash tests/lab/rust.sh
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
# A run from a clean checkout gains nothing from incremental artifacts, and
# they are a third of target/debug: off, so the run fits a small disk.
export CARGO_INCREMENTAL=0

# coreos-installer (the lab guest's installer, crates.io) builds beside the
# release build, niced: the lab guest image waits for it (a lock).
mkdir -p target/steps
nice -n 19 bash tests/lab/coreos-installer.sh >target/steps/coreos-installer.log 2>&1 &

# The release binaries first: the soak test runs them for 30 minutes in the
# background while everything else runs (niced), and reports at the end.
setup "release build" cargo build --release --locked --workspace
BIN=target/release
setup "lab guest image" bash tests/lab/guest.sh target/lab-images
setup "lab TFTP root" bash tests/lab/tftp-root.sh target/lab-tftp
log "soak (30 min, in the background: tests/soak/soak.sh)"
mkdir -p target/soak
soak_t0=$(date +%s)
nice -n 10 bash tests/soak/soak.sh $BIN 1800 >target/soak/run.log 2>&1 &
soak=$!
trap 'kill -TERM "$soak" ${laneb:-} 2>/dev/null || true' EXIT

setup "format" cargo fmt --all -- --check
setup "clippy" cargo clippy --workspace --all-targets --locked -- -D warnings

# Each crate's modules form no import cycle (a child's use of what its
# ancestors define is containment, not an import: see the tool's header).
setup "module import cycles" python3 tests/tools/module-cycles.py
setup "source file lengths" python3 tests/tools/file-lengths.py
setup "architecture index" python3 tests/tools/architecture-index.py

# The Alibaba ECS fake's own tests (its signature check against Alibaba's
# published example, parameter checks from the API metadata, paging, holds).
setup "ECS fake" python3 tests/controller/ecs-fake-test.py

# The lab's guest image and TFTP root were made above: some cargo tests
# compare against them (images' core.elf must equal tftp-root.sh's).
setup "cargo test --workspace" cargo test --workspace --locked

# cargo-audit (crates.io, pinned) builds now, niced, in the background: the
# end-to-end checks leave CPU idle, where its 4 minutes of compiling on the
# main lane used to be. The audit itself (below, at the end) waits for it.
mkdir -p target/steps
nice -n 19 bash tests/audit.sh --install >target/steps/cargo-audit.log 2>&1 &

t() { step_in main "$@"; }  # name command...: one end-to-end check, counted
e2e() {
  # bootd serves DHCP itself (--no-dhcp: no stand-in; dnsmasq only sends IPv6 RAs).
  bash tests/lab/netboot.sh --bootd $BIN/bootd --site examples/lab/site.yaml --no-dhcp "$@"
}
# Two lanes: the firmware network boots (each in its own namespace, under
# KVM except SLOF) run in the background beside the rest, which keeps the
# whole run well under an hour on 2 cores. Their output is printed after
# the rest's, in order; each check is counted the same way.
mkdir -p target/lane-b
tb() { step_in B "$@"; }  # name command...: t, for the background lane
lane_b() {
  tb "DHCP interop (udhcpc, dhclient, perfdhcp, dhcrelay with option 82)" bash tests/lab/dhcp-interop.sh $BIN/bootd
  tb "DHCPv6 interop (dhclient -6, dhcpcd, udhcpc6, perfdhcp -6)" bash tests/lab/dhcp6-interop.sh $BIN/bootd
  # The guest runs the real Ignition client (Debian's 2.14, which asks for spec
  # 3.3.0) against the lab's role configs: bootstrap 3.2.0 (what
  # openshift-install writes), master 3.3.0, worker 3.4.0 (served as 3.3.0).
  boot() { # node mac ip: the lab node's identity for netboot.sh
    case $1 in
      bootstrap) echo --node bootstrap --mac 52:54:00:77:00:10 --ip 10.77.0.10 ;;
      master-0) echo --node master-0 --mac 52:54:00:77:00:11 --ip 10.77.0.11 ;;
      worker-0) echo --node worker-0 --mac 52:54:00:77:00:20 --ip 10.77.0.20 ;;
    esac
  }
  # shellcheck disable=SC2046  # boot's words are separate arguments
  {
  tb "netboot SeaBIOS + iPXE, Ignition 3.2.0, HTTP"   e2e $(boot bootstrap) --firmware seabios-ipxe --ignition-spec 3.2.0
  tb "netboot SeaBIOS + iPXE, Ignition 3.2.0, HTTPS"  e2e $(boot bootstrap) --firmware seabios-ipxe --ignition-spec 3.2.0 --https
  tb "netboot OVMF PXE -> ipxe.efi, Ignition 3.2.0, HTTP"  e2e $(boot bootstrap) --firmware ovmf-pxe --ignition-spec 3.2.0
  tb "netboot OVMF PXE -> ipxe.efi, Ignition 3.2.0, HTTPS" e2e $(boot bootstrap) --firmware ovmf-pxe --ignition-spec 3.2.0 --https
  tb "netboot OVMF + iPXE, Ignition 3.3.0, HTTP"      e2e $(boot master-0) --firmware ovmf-ipxe --ignition-spec 3.3.0
  tb "netboot OVMF + iPXE, Ignition 3.4.0 as 3.3.0, HTTPS" e2e $(boot worker-0) --firmware ovmf-ipxe --ignition-spec 3.3.0 --https
  }
  tb "netboot SLOF -> GRUB"              e2e --node p9-0 --mac 52:54:00:77:00:30 --ip 10.77.0.30 --firmware slof-grub
  # IPv6: bootd's DHCPv6, radvd's RAs with the M flag; the IPv6-only lab site
  # and the dual-stack one (tests/lab/netboot6.sh).
  v6() { bash tests/lab/netboot6.sh --bootd $BIN/bootd "$@"; }
  tb "netboot IPv6 only: OVMF PXE over DHCPv6 -> ipxe.efi (TFTP) -> iPXE (DHCPv6) -> HTTP" v6 --site examples/lab-v6/site.yaml --node master-0 --mac 52:54:00:77:00:11 --firmware ovmf-pxe6
  tb "netboot IPv6 only: OVMF UEFI HTTP Boot over IPv6 -> ipxe.efi (HTTP) -> iPXE" v6 --site examples/lab-v6/site.yaml --node master-1 --mac 52:54:00:77:00:12 --firmware ovmf-http6
  tb "netboot IPv6 only: iPXE from the NIC's ROM (DHCPv6) -> HTTP" v6 --site examples/lab-v6/site.yaml --node master-2 --mac 52:54:00:77:00:13 --firmware ovmf-ipxe6
  tb "netboot dual stack: OVMF PXE over DHCPv6 beside DHCPv4 -> iPXE -> HTTP" v6 --site examples/lab-dual/site.yaml --node worker-0 --mac 52:54:00:77:00:20 --firmware ovmf-pxe6
  tb "netboot from a catalog image set"  bash tests/lab/catalog-netboot.sh --bin $BIN
  tb "netboot a bond of two NICs with a VLAN (networkConfig): NetworkManager in the guest from bootd's dracut args, then from its keyfiles; ping over VLAN 78" bash tests/lab/bond-vlan.sh --bin $BIN
  # The real Ignition client each platform's way (tests/lab/platform-ignition.sh):
  # the node made through the API against the provider's fake, the guest
  # fetching that user data where the platform serves it, then merging
  # api-int:22623/config/worker through lbd; and the same without the
  # resolver step, which must end in a node condition, not a timeout.
  pi() { bash tests/lab/platform-ignition.sh --bin $BIN "$@"; }
  tb "Ignition as aliyun: ECS UserData from 100.100.100.200, api-int:22623 merged through lbd, MachineConfigServed" pi --platform aliyun
  tb "Ignition as metal: bootd's iPXE script, api-int:22623 merged through lbd, MachineConfigServed" pi --platform metal
  tb "Ignition as powervs: the create call's userData on a config-2 drive, api-int:22623 merged through lbd" pi --platform powervs
  tb "Ignition as packet: Equinix userdata from https://metadata.packet.net, api-int:22623 merged through lbd" pi --platform packet
  tb "Ignition as aliyun without the resolver step: MachineConfigServed False, NotReached, naming api-int" pi --platform aliyun --no-resolver
  # An instance that boots before the controller has read its address: the
  # real client's fetch is answered 503 (awaited) and retried until served.
  tb "Ignition as aliyun, booted before the controller read its instance: bootd answers 503, the client retries, then gets its config" pi --platform aliyun --boot-before-read
  # Random mutation of every fuzz target's seed corpus, 10 s each (not
  # coverage-guided; README, "Fuzzing"): a crash fails the run. In this
  # lane, after the boots: its release build of the fuzz workspace (its own
  # target folder) took 7 of the main lane's minutes, and this lane ends
  # about 19 minutes before the main one.
  # The fuzz targets are their own workspace (cargo fuzz builds them with
  # nightly); building them keeps them in step with the code they call (one
  # had stopped compiling after a signature change, unnoticed). Built in
  # release, every target with quick (5 minutes on an idle machine, as for
  # quick alone), so the run below compiles nothing more.
  tb "fuzz targets build (release, every target)" nice -n 19 cargo build --manifest-path fuzz/Cargo.toml --release --locked --bins
  tb "fuzz: 10 s of random mutation per target (fuzz/src/bin/quick.rs)" nice -n 19 cargo run --manifest-path fuzz/Cargo.toml --release --locked --bin quick -- --seconds 10 --keep-going
}
lane_b >target/lane-b/log 2>&1 &
laneb=$!
t "systemd units: verify + security"   bash tests/systemd/check.sh $BIN
t "sd_notify: bootd, appliance, dnsd, lbd" bash tests/systemd/notify.sh $BIN
t "all-in-one appliance"              bash tests/systemd/appliance.sh $BIN
t "started as root: each daemon drops to nobody with its unit's capabilities" bash tests/systemd/privileges.sh $BIN
t "SIGHUP with a bad site, a missing or unreadable role Ignition: bootd, dnsd, lbd, appliance keep serving" bash tests/systemd/reload.sh $BIN
t "units under systemd as PID 1 (nspawn): started at boot, serve, reload, dnsd and lbd read bootd's overlay, stop" bash tests/systemd/nspawn.sh $BIN
t "container: image built without a registry (debootstrap base, podman), non-root with NET_BIND_SERVICE and NET_RAW only, a VM netboots through it, the state volume survives a restart" bash tests/container/e2e.sh $BIN
t "a step of the system clock (+2 d, -2 d, libfaketime) moves no lease and no token" bash tests/time/clock-step.sh $BIN
t "lbd serves a VIP that arrives after it started (IP_FREEBIND); lbd ready, keepalived's check" bash tests/ha/lbd-vip.sh $BIN
t "VIPs without multicast: keepalived over unicast peers from bootd render keepalived, multicast dropped and counted on the bridge; the master killed by PID, the VIP on the other within 3 adverts + 1.5 s, the notify program run with each state" bash tests/ha/vrrp-unicast.sh $BIN
t "lbd over IPv6: the IPv6-only site's VIP to every master and worker by IPv6, a master taken out by its checks" bash tests/lab/lbd6.sh $BIN
t "HA, hotStandby: 3-member etcd, two appliances with keepalived; the VIP+leader appliance powered off mid-boot (VIPs move, the VM gets its Ignition, a held create done once); a relayed 16 000-client perfdhcp storm with the elected appliance killed halfway (no duplicate, no ACK lost); quorum loss" env HA_MODE=hotStandby bash tests/ha/e2e.sh $BIN
t "HA, loadBalancing: the same, both appliances answering their share of the storm" env HA_MODE=loadBalancing STORM_CLIENTS=12000 bash tests/ha/e2e.sh $BIN
t "dnsd vs NSD and Knot"              bash tests/dns/e2e.sh $BIN/dnsd
t "controller vs Prism mocks"         bash tests/controller/e2e.sh
t "status page in headless Chromium"  bash tests/status/e2e.sh --bootd $BIN/bootd
t "status page of a 1 000-node rack driven by real clients: counts, filters, a phase bar per node, under 1 MB, rendered within a second" bash tests/status/rack.sh --bootd $BIN/bootd
t "API -> local QEMU VM -> netboot -> Ready" bash tests/controller/local-e2e.sh --bootd $BIN/bootd
t "Redfish (sushy-tools) and IPMI (virtualbmc) BMCs -> libvirt VMs -> netboot -> Ready, no install loop" bash tests/controller/bmc-e2e.sh --bootd $BIN/bootd
t "inspection and install through Redfish: the agent reports the VM's CPUs, memory, disks, NIC and LLDP port; the next boot installs (real coreos-installer) to the disk the hints choose, which boots; a machine below its role's minimums is refused" bash tests/controller/install-e2e.sh --bootd $BIN/bootd
t "a host imported from an install-config (bootd nodes import): two NICs in an NMState bond with VLAN 78, inspected, installed to the hinted disk, NetworkManager's bond and VLAN in the guest, the password only in the file" bash tests/controller/install-e2e.sh --bootd $BIN/bootd --install-config
t "secrets: one grep over every output of a BMC + cloud providers run at trace (logs, API, metrics, status page, argv, environment)" bash tests/secrets/e2e.sh --bootd $BIN/bootd
# Every dependency against the RustSec advisory database (a snapshot in
# tests/advisory-db; the live one is not reachable): vulnerabilities and
# unmaintained crates fail, except those .cargo/audit.toml explains.
t "dependency audit (RustSec, a snapshot)" bash tests/audit.sh
log "firmware network boots (the background lane)"
wait "$laneb" || true
cat target/lane-b/log

log "soak (waiting for it)"
soak_rc=0
wait "$soak" || soak_rc=$?
steps_record soak check "$soak_t0" "$(date +%s)" "$([[ $soak_rc == 0 ]] && echo PASS || echo FAIL)" "soak (30 min, niced)"
cat target/soak/run.log

steps_summary
