#!/usr/bin/env bash
# One end-to-end network boot over IPv6 of a QEMU guest against bootd, in a
# private network namespace (fd00:77::/64, and 10.77.0.0/24 on a dual-stack
# site, on bridge br0; nothing leaves the namespace). bootd serves DHCPv6
# (and DHCPv4 on a dual-stack site) itself; radvd sends the router
# advertisements with the M flag (bootd does not send them).
#
# Usage: tests/lab/netboot6.sh --bootd BOOTD --site SITE_YAML --node NAME --mac MAC
#          [--firmware ovmf-pxe6|ovmf-ipxe6|ovmf-http6] [--timeout SECS] [--workdir DIR]
#
# Firmwares (the table is tests/lib/qemu.sh's qemu_firmware, every variant
# with FW_FAMILY=6; `netboot6.sh --help` lists them):
#   ovmf-pxe6   OVMF with the NIC's ROM off and IPv4 PXE off (fw_cfg): EDK2's
#               own PXE over IPv6 -> DHCPv6 (arch 7) -> tftp://[fd00:77::1]/ipxe.efi
#               -> iPXE -> DHCPv6 again (user class iPXE) -> http://[fd00:77::1]:8080/boot.ipxe
#   ovmf-ipxe6  OVMF + the NIC's iPXE EFI ROM: iPXE from the ROM -> DHCPv6 -> HTTP
#   ovmf-http6  OVMF with the NIC's ROM off and PXE off: UEFI HTTP Boot over IPv6
#               (arch 16, vendor class HTTPClient) -> ipxe.efi over HTTP -> iPXE as above
# Then: the node's iPXE script (its URLs in brackets) -> kernel + initramfs over
# HTTP/IPv6 -> the lab guest (tests/lab/guest.sh) takes its address from the
# ip=[...] kernel argument (the tested node is given `network: {interface:
# eth0}` in a copy of SITE), fetches ignition.config.url over IPv6 and prints
# "LAB-IGNITION sha256=..." on ttyS0, compared with `BOOTD render ignition`.
# Also checked: bootd answered the firmware's boot request over DHCPv6 (the
# variant's FW_CLIENT) and logged its FW_FETCH; on an IPv6-only site the
# Ignition URL is the IPv6 one and the request came from the node's own IPv6
# address; on a dual-stack site (where iPXE, answered over both families,
# picks IPv4) from one of the node's addresses.
# Prints "PASS netboot6 <firmware> <node> <secs>s" (exit 0) or the logs' ends and
# "FAIL netboot6 <firmware> <node>: <reason>" (exit 1).
set -euo pipefail
HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
# shellcheck source=tests/lib/harness.sh
. "$HERE/../lib/harness.sh"
# shellcheck source=tests/lib/qemu.sh
. "$HERE/../lib/qemu.sh"

BOOTD="" SITE="" NODE="" MAC="" FIRMWARE=ovmf-pxe6 TIMEOUT=240 WORKDIR=""
usage() {
  { sed -n '8,9p' "$0" | sed 's/^# \{0,1\}//'; echo "firmwares:"; qemu_firmwares 6; } >&2
  exit 2
}
while [[ $# -gt 0 ]]; do
  netboot_option "$@" || usage
  shift 2
done
[[ -n $BOOTD && -n $SITE && -n $NODE && -n $MAC ]] || usage
[[ $(id -u) -eq 0 ]] || { echo "netboot6.sh: run as root" >&2; exit 2; }
if ! qemu_firmware "$FIRMWARE" || [[ $FW_FAMILY != 6 ]]; then usage; fi
BOOTD=$(readlink -f "$BOOTD"); SITE=$(readlink -f "$SITE")
# $WORK is WORKDIR from here on (kept after the run).
netboot_workdir netboot6 serial.log bootd.log radvd.log qemu.log state OVMF_VARS.fd expected.ign site.yaml
die() { qemu_fail_logs 30; fail "$@"; }

netboot_artifacts "$REPO/target/lab-images" "$REPO/target/lab-tftp"

# The site, its relative paths made absolute, the tested node with a static
# network (the lab guest has no DHCPv6 client: its address is ip=).
lab_site "$WORK/site.yaml" --from "$SITE" host.tftp.root="$REPO/target/lab-tftp" \
  images.root="$REPO/target/lab-images" "nodes.$NODE.network={interface: eth0}" \
  || die "cannot write the site copy"
SITE=$WORK/site.yaml
IP6=$(python3 -c "import yaml,sys; n=[n for n in yaml.safe_load(open('$SITE'))['nodes'] if n['name']=='$NODE'][0]; ips=n['ip'] if isinstance(n['ip'], list) else [n['ip']]; print([i for i in ips if ':' in i][0])")
DUAL=$(python3 -c "import yaml; s=yaml.safe_load(open('$SITE')); print(1 if s['host'].get('dhcp') else 0)")

# --- network ---------------------------------------------------------------------
T0=$(now)
addrs=(fd00:77::1/64)
[[ $DUAL == 1 ]] && addrs+=(10.77.0.1/24)
lab_netns "lab6-$$" "${addrs[@]}"
# No duplicate address detection on br0 and what comes after it (the tap):
# the link-local addresses radvd and bootd's DHCPv6 send from are usable at once.
nsx sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 net.ipv6.conf.br0.accept_dad=0
lab_tap tap0

# Router advertisements: M flag (addresses from DHCPv6), the prefix on-link,
# no SLAAC (the guest's and the firmware's addresses come from bootd).
cat >"$WORK/radvd.conf" <<EOF
interface br0 {
  AdvSendAdvert on;
  AdvManagedFlag on;
  AdvOtherConfigFlag on;
  MinRtrAdvInterval 3;
  MaxRtrAdvInterval 10;
  prefix fd00:77::/64 { AdvOnLink on; AdvAutonomous off; };
};
EOF
spawn --ns "$NS" radvd -n -C "$WORK/radvd.conf" -p "$WORK/radvd.pid" -m logfile -l "$WORK/radvd.log"
start_bootd --bin "$BOOTD" --log "$WORK/bootd.log" --ready "http://[fd00:77::1]:8080/healthz" --timeout 30 \
  -- --site "$SITE" --state-dir "$WORK/state" || die "bootd did not become ready"
log "network + radvd + bootd ready in $(since "$T0")s (workdir $WORK)"

# --- QEMU (tests/lib/qemu.sh: the variant's firmware, NIC ROM, fw_cfg) -------------
qemu_start tap0 "$MAC"
wait_for "$TIMEOUT" qemu_marker_step || true
sleep 0.5
line=$GUEST_LINE
[[ $line == "LAB-IGNITION sha256="* ]] \
  || die "no LAB-IGNITION marker after $(since "$T_QEMU")s: $([[ $line == LAB-IGNITION-FAILED* ]] && echo "$line")"
got=$(marker_field "$line" sha256)
ignition_expected "$BOOTD" "$NODE" "$SITE" "$WORK/state" || die "bootd render ignition failed: $RENDER_ERROR"
[[ $got == "$WANT_SHA" ]] || die "Ignition sha256 $got, bootd renders $WANT_SHA"
url=$(marker_field "$line" url)
# bootd's log: the firmware booted over DHCPv6 (its boot URL from bootd).
# (The firmware's Solicit and its Request both carry its architecture and
# are both answered with the boot URL; either proves the exchange.)
fw_re="kind=\"(solicit|request)\".*$NODE: (solicit|request) .*$FW_CLIENT"
# Into a file first: `grep -q` on a pipe ends at the first match and, under
# pipefail, a writer still writing a long log fails the pipeline (SIGPIPE).
clean "$WORK/bootd.log" >"$WORK/bootd.plain.log"
# On failure, what bootd did log of its DHCPv6 exchanges, in the FAIL line.
exchanges() { grep -aoE 'kind="[a-z-]+" reason=[^;]*;[^(:]*' "$WORK/bootd.plain.log" | sed 's/ reason=/ /' | tr '\n' '|' | cut -c1-900; }
grep -aqE "DHCPv6.*$fw_re" "$WORK/bootd.plain.log" || die "bootd logged no DHCPv6 boot exchange of $NODE ($fw_re); it logged: $(exchanges)"
if [[ -n $FW_FETCH ]]; then
  grep -aqE "$FW_FETCH" "$WORK/bootd.plain.log" || die "the firmware did not fetch its loader ($FW_FETCH); DHCPv6: $(exchanges)"
fi
served=$(grep -aE -m 1 "Ignition (pointer config )?served node=$NODE " "$WORK/bootd.plain.log" || true)
if [[ $DUAL == 0 ]]; then
  # IPv6 only: every URL is the IPv6 one, the Ignition came from the node's own IPv6 address.
  [[ $url == "http://[fd00:77::1]:8080/"* ]] || die "the Ignition URL is not the IPv6 one: $url"
  grep -q "source=$IP6 " <<<"$served" || die "the Ignition was not served to $IP6: $served"
  how="over IPv6 from $IP6"
else
  # Dual stack: iPXE, answered over both, fetches its script over the family
  # it chooses (Debian's iPXE: IPv4); the Ignition came from a node address.
  grep -qE "source=($IP6|::ffff:10\.77\.0\.[0-9]+) via=\"node address\"" <<<"$served" || die "the Ignition was not served to a node address: $served"
  how="firmware over DHCPv6, Ignition via $(sed -n 's/.*source=\([^ ]*\).*/\1/p' <<<"$served")"
fi
echo "PASS netboot6 $FIRMWARE $NODE $(since "$T_QEMU")s ($how, sha256 $got)"
