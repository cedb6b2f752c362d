#!/usr/bin/env bash
# The units under a real systemd: a minimal Debian 12 root (debootstrap,
# cached in target/nspawn-root) booted with `systemd-nspawn -b` (systemd as
# PID 1) inside a network namespace this script makes (10.77.0.1/24 on br0,
# the harness's lab_netns). bootd, dnsd and lbd are installed by
# systemd/install.sh (DESTDIR= the root) over a configuration left root-only
# (0600/0700, as an admin with umask 077 would), enabled, and started by the
# boot. The root is the lab site (examples/lab/site.yaml) with the paths the
# units expect (host.stateDir /var/lib/bootd, images and TFTP below it,
# Ignition beside the site) and the controller API (its token a credential).
# Checks, from inside the container (nsenter into its namespaces):
#   - bootd, dnsd, lbd active after boot, each as a dynamic user in the group
#     bare-metal-boot holding exactly its unit's capabilities;
#   - bootd serves /healthz and /boot.ipxe, dnsd answers api.<domain> with the
#     VIP, lbd's admin status lists its four frontends;
#   - a node added to the site file and `systemctl reload bootd dnsd lbd`
#     (Type=notify reload) is in DNS and in lbd's pools;
#   - a node created through bootd's API (written to bootd's node overlay,
#     /var/lib/bootd/nodes.yaml) is in DNS and in lbd's pools: dnsd and lbd
#     read bootd's state; as dnsd's and lbd's users they can read the overlay
#     but not bootd's keys, the API tokens, nor write to bootd's state;
#   - no restart after more than WatchdogSec (the watchdog pings arrive);
#   - a VM (QEMU, SeaBIOS + iPXE, the bootstrap node's MAC) on a tap in the
#     container's network namespace network-boots through the units: DHCP,
#     script, kernel, initramfs, and the Ignition that bootd renders;
#   - `systemctl stop` ends each cleanly (Result=success).
# The container is stopped through its systemd-nspawn PID (SIGTERM: a clean
# poweroff), the namespace deleted, the root's overlay removed; the cached
# root itself is never written (an overlayfs above it per run).
#
# Usage: tests/systemd/nspawn.sh [BINDIR]   (root; BINDIR: bootd, dnsd, lbd,
#   images; default target/release, built with cargo when missing there)
#   NSPAWN_ROOT=DIR: the cached root (default target/nspawn-root); MIRROR=URL
#   the Debian mirror (http://deb.debian.org/debian). Needs debootstrap and
#   systemd-container (apt-installed when missing), overlayfs (else the root
#   is copied per run). On a host whose PID 1 is systemd the container gets a
#   scope of its own; elsewhere (a CI container) it stays in the caller's
#   cgroup (--keep-unit). Nothing registers with machined.
# Output: ok/FAIL lines, then `PASS nspawn ...` or `FAIL nspawn <reason>`.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/harness.sh
. tests/lib/vm.sh
T0=$(date +%s)
BINDIR=$(realpath -m "${1:-target/release}")
BASE=$(realpath -m "${NSPAWN_ROOT:-target/nspawn-root}")
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
PKGS=systemd,systemd-sysv,dbus,curl,dnsutils,iproute2,procps
# Written once debootstrap has finished; holds what the root was made with,
# so a change of packages rebuilds it. Only a root with it is reused or removed.
MARK=.nspawn-root
WANT="$SUITE $MIRROR $PKGS"
NS=nspawn-$$
MACHINE=bmb-nspawn-$$
CONF=/etc/bare-metal-boot
WATCHDOG=30

ROOT='' NSPAWN='' LEADER='' overlay=0
[[ $(id -u) -eq 0 ]] || { echo "FAIL nspawn: must run as root"; exit 1; }
# This run's folder (the root's overlay, the console, the logs) beside the
# cached root: the harness keeps it (--work), nspawn_cleanup removes it.
mkdir -p "$(dirname "$BASE")"
RUN=$(mktemp -d "$(dirname "$BASE")/nspawn-run.XXXXXX")
harness_init nspawn --work "$RUN"
# At exit, before the harness stops what spawn started: the container
# powered off cleanly (SIGTERM to systemd-nspawn: SIGRTMIN+3 to the
# container's systemd, up to 30 s), its init killed (its PID namespace goes
# with it), QEMU stopped, the overlay unmounted and this run's folder
# removed (never across a mount still there).
nspawn_cleanup() {
  if [[ -n $NSPAWN ]] && alive "$NSPAWN"; then STOP_GRACE=30 stop_pid "$NSPAWN"; fi
  if [[ -n $LEADER ]]; then kill -9 "$LEADER" 2>/dev/null || true; fi
  stop_pids "${PIDS[@]}"
  if [[ $overlay == 1 ]]; then umount "$ROOT" 2>/dev/null || umount -l "$ROOT" || true; fi
  if ! awk -v d="$RUN" 'index($2, d "/") == 1 {f = 1} END {exit !f}' /proc/self/mounts; then
    rm -rf --one-file-system "$RUN"
  fi
  rmdir "/run/systemd/nspawn/propagate/$MACHINE" 2>/dev/null || true
}
on_exit nspawn_cleanup

# --- the binaries ------------------------------------------------------------------
missing=0
for b in bootd dnsd lbd images; do [[ -x $BINDIR/$b ]] || missing=1; done
if [[ $missing == 1 ]]; then
  [[ $BINDIR == "$PWD/target/release" ]] || fail "$BINDIR: bootd, dnsd, lbd or images not built there"
  echo "nspawn: building the release binaries (cargo build --release --bins)" >&2
  nice -n 19 cargo build --release --bins >&2 || fail "cargo build --release --bins failed"
fi

# --- the tools ------------------------------------------------------------------------
need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v systemd-nspawn >/dev/null || need+=(systemd-container)
if [[ ${#need[@]} -gt 0 ]]; then
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q --no-install-recommends "${need[@]}" >&2 ||
    fail "apt-get install ${need[*]} failed"
fi

# --- the cached root --------------------------------------------------------------------
if [[ -e $BASE/$MARK && $(cat "$BASE/$MARK") == "$WANT" ]]; then
  ok "root: cached $BASE ($SUITE)"
else
  if [[ -e $BASE && ! -e $BASE/$MARK && -n $(ls -A "$BASE" 2>/dev/null) ]]; then
    fail "$BASE exists and is not a root this script made; not touching it"
  fi
  for d in "$BASE" "$BASE.new"; do
    if awk -v d="$d" '$2 == d || index($2, d "/") == 1 {f = 1} END {exit !f}' /proc/self/mounts; then
      fail "something is still mounted below $d (umount -R $d)"
    fi
  done
  rm -rf --one-file-system "$BASE" "$BASE.new"
  mkdir -p "$(dirname "$BASE")"
  t=$(date +%s)
  echo "nspawn: debootstrap $SUITE into $BASE ($MIRROR)" >&2
  if ! timeout 1200 nice -n 10 debootstrap --variant=minbase --include="$PKGS" "$SUITE" "$BASE.new" "$MIRROR" \
    >"$BASE.log" 2>&1; then
    tail -n 20 "$BASE.log" >&2
    fail "debootstrap failed (log: $BASE.log)"
  fi
  echo "$WANT" >"$BASE.new/$MARK"
  mv "$BASE.new" "$BASE"
  ok "root: debootstrap $SUITE with $PKGS in $(($(date +%s) - t))s"
fi

# --- this run's root: an overlay above the cached one -----------------------------
ROOT=$RUN/root
mkdir -p "$RUN/upper" "$RUN/work" "$ROOT"
if mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$RUN/upper,workdir=$RUN/work" "$ROOT" 2>/dev/null; then
  overlay=1
else
  echo "nspawn: no overlayfs; copying the root" >&2
  cp -a "$BASE/." "$ROOT/"
fi

# The configuration as an admin with umask 077 leaves it: root's alone.
# install.sh must give it to the daemons' group (and keep the site).
install -d -m 0700 "$ROOT$CONF" "$ROOT$CONF/ignition"
# The paths the units expect; the Ignition folder beside the site (relative).
lab_site "$RUN/site.yaml" host.stateDir=/var/lib/bootd images.root=/srv/bare-metal-boot/images \
  host.tftp.root=/srv/bare-metal-boot/tftp ignition.dir=ignition \
  host.api="{listen: '10.77.0.1:9443', tokens: {credential: bootd-api-tokens}}" \
  || fail "the lab site was not rewritten"
install -m 0600 "$RUN/site.yaml" "$ROOT$CONF/site.yaml"
# The lab's boot images and TFTP root (tests/lab/guest.sh, tftp-root.sh), as
# a package would install them: root's, readable by all, outside the state.
[[ -s target/lab-images/lab/kernel && -s target/lab-tftp/undionly.kpxe ]] \
  || fail "no lab images or TFTP root (tests/lab/guest.sh target/lab-images; tests/lab/tftp-root.sh target/lab-tftp)"
install -d -m 0755 "$ROOT/srv/bare-metal-boot/images" "$ROOT/srv/bare-metal-boot/tftp"
cp -r target/lab-images/lab "$ROOT/srv/bare-metal-boot/images/"
cp -r target/lab-tftp/. "$ROOT/srv/bare-metal-boot/tftp/"
chmod -R a+rX "$ROOT/srv/bare-metal-boot"
for f in examples/lab/ignition/*.ign; do install -m 0600 "$f" "$ROOT$CONF/ignition/"; done

if ! DESTDIR=$ROOT SRC=$BINDIR bash systemd/install.sh >"$RUN/install.log" 2>&1; then
  cat "$RUN/install.log"
  fail "systemd/install.sh failed"
fi
gid=$(awk -F: '$1 == "bare-metal-boot" { print $3 }' "$ROOT/etc/group")
[[ -n $gid ]] || fail "install.sh made no group bare-metal-boot in the root"
modes=$(stat -c '%n %a %u:%g' "$ROOT$CONF" "$ROOT$CONF/site.yaml" "$ROOT$CONF/ignition" \
  "$ROOT$CONF/ignition/master.ign" "$ROOT$CONF/api-tokens" | sed "s|$ROOT||")
expect="$CONF 750 0:$gid
$CONF/site.yaml 640 0:$gid
$CONF/ignition 750 0:$gid
$CONF/ignition/master.ign 640 0:$gid
$CONF/api-tokens 600 0:0"
[[ $modes == "$expect" ]] || fail "install.sh left the configuration as: $(echo "$modes" | tr '\n' ';')"
cmp -s "$RUN/site.yaml" "$ROOT$CONF/site.yaml" || fail "install.sh replaced the existing site"
ok "install.sh: group bare-metal-boot ($gid); $CONF 0750, site and Ignition 0640 root:bare-metal-boot, api-tokens 0600 root; the site kept"
if command -v systemctl >/dev/null; then
  systemctl --root="$ROOT" enable bootd.service dnsd.service lbd.service >>"$RUN/install.log" 2>&1 ||
    fail "systemctl --root enable failed: $(tail -n 3 "$RUN/install.log")"
else
  for u in bootd dnsd lbd; do
    mkdir -p "$ROOT/etc/systemd/system/multi-user.target.wants"
    ln -sf "/etc/systemd/system/$u.service" "$ROOT/etc/systemd/system/multi-user.target.wants/$u.service"
  done
fi

# --- boot --------------------------------------------------------------------------
lab_netns "$NS"
args=(-D "$ROOT" -b -M "$MACHINE" --register=no --network-namespace-path="/run/netns/$NS"
  --console=pipe --link-journal=no --resolv-conf=off --timezone=off)
# Without systemd as the host's PID 1 there is no one to make a scope.
[[ -d /run/systemd/system && -S /run/dbus/system_bus_socket ]] || args+=(--keep-unit)
tboot=$(date +%s)
spawn --log "$RUN/console.log" systemd-nspawn "${args[@]}"
NSPAWN=$SPAWNED
# LEADER: systemd-nspawn's child once it is systemd (the container's init).
leader() {
  LEADER=$(cut -d' ' -f1 "/proc/$NSPAWN/task/$NSPAWN/children" 2>/dev/null || true)
  [[ -n $LEADER && $(readlink "/proc/$LEADER/exe" 2>/dev/null) == */systemd ]] || { LEADER=''; return 1; }
}
wait_for 30 while_alive "$NSPAWN" leader || true
alive "$NSPAWN" || fail "systemd-nspawn exited: $(tail -n 5 "$RUN/console.log" | tr '\n' ' ')"
[[ -n $LEADER ]] || fail "no systemd in the container after 30 s"

cx() { # command...: in the container, as its root, with a timeout (T, 30 s)
  # -r: the container's root. Entering its mount namespace alone gives the
  # namespace's root, which is not the container's where systemd-nspawn
  # could not pivot_root (run from a chroot: tests/fresh-debian.sh).
  timeout "${T:-30}" nsenter -t "$LEADER" -m -u -i -n -p -r -- \
    /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 SYSTEMD_PAGER='' "$@"
}
state=''
booted() { # the container's systemd is up (running or degraded; in $state)
  state=$(T=10 cx systemctl is-system-running 2>/dev/null || true)
  [[ $state == running || $state == degraded ]]
}
PACE=1 within 120 while_alive "$NSPAWN" booted || true
alive "$NSPAWN" || fail "the container stopped while booting: $(tail -n 5 "$RUN/console.log" | tr '\n' ' ')"
[[ $(cx cat /proc/1/comm) == systemd ]] || fail "PID 1 of the container is not systemd"
case $state in
  running) ok "boot: systemd is PID 1 of the container, running after $(($(date +%s) - tboot))s" ;;
  degraded) ok "boot: running after $(($(date +%s) - tboot))s, degraded by: $(cx systemctl --failed --plain --no-legend | awk '{print $1}' | tr '\n' ' ')" ;;
  *) fail "the container's systemd is not up after 120 s (state: ${state:-none})" ;;
esac

# --- checks ------------------------------------------------------------------------
failures=()
check() { # what command...: ok or bad (the failed ones named in failures)
  local what=$1 out; shift
  if out=$("$@" 2>&1); then
    ok "$what${out:+: $(echo "$out" | tr '\n' ' ' | cut -c1-150)}"
  else
    bad "$what${out:+: $(echo "$out" | tr '\n' ' ' | cut -c1-300)}"
    failures+=("$what")
  fi
}
retry() { # seconds command...: until it succeeds, at most that long; its last output
  local secs=$1 out; shift
  PACE=0.5 within "$secs" "$@" || true
  out=$("$@" 2>&1) && { echo "$out"; return 0; }
  echo "$out (for ${secs}s)"
  return 1
}
eq() { # expected command...: its output, one line, is that
  local out; out=$("${@:2}") || return 1
  if [[ $out == "$1" ]]; then echo "$out"; else echo "got '$out', want '$1'"; return 1; fi
}
dig1() { cx dig +short +time=2 +tries=2 @10.77.0.1 "$@"; }
lb_status() { cx curl -fsS --max-time 5 http://127.0.0.1:8404/status; }
lb_has() { # name...: lbd's status names them all
  local s n; s=$(lb_status) || return 1
  for n in "$@"; do grep -q "\"name\": \"$n\"" <<<"$s" || { echo "no $n in lbd's status"; return 1; }; done
  echo "$*"
}

is_active() { cx systemctl is-active bootd dnsd lbd | xargs; }
journal() { echo "--- journal of the units"; cx journalctl --no-pager -n "${1:-80}" -u bootd -u dnsd -u lbd || true; }
check "bootd dnsd lbd active after boot" retry 30 eq "active active active" is_active
if [[ ${#failures[@]} -gt 0 ]]; then
  journal 40
  fail "bootd, dnsd, lbd not all active after boot: $(is_active 2>&1 | xargs)"
fi
tactive=$(date +%s)

declare -A CAPS=([bootd]=0000000000002400 [dnsd]=0000000000000400 [lbd]=0000000000000400)
main_pid() { # unit: its main PID (in the container)
  local pid
  if ! pid=$(cx systemctl show -p MainPID --value "$1") || ! [[ $pid =~ ^[1-9][0-9]*$ ]]; then echo "$1: no main PID"; return 1; fi
  echo "$pid"
}
identity() { # unit: a dynamic user in bare-metal-boot, the unit's capabilities
  local u=$1 pid st uid gid groups cap
  pid=$(main_pid "$u") || { echo "$pid"; return 1; }
  st=$(cx cat "/proc/$pid/status") || return 1
  uid=$(awk '/^Uid:/ {print $2}' <<<"$st"); gid=$(awk '/^Gid:/ {print $2}' <<<"$st")
  groups=$(awk '/^Groups:/ {$1 = ""; print}' <<<"$st"); cap=$(awk '/^CapEff:/ {print $2}' <<<"$st")
  # systemd's dynamic users: 61184-65519.
  ((uid >= 61184 && uid <= 65519)) || { echo "uid $uid is not a dynamic user"; return 1; }
  if [[ $u == bootd ]]; then [[ $gid == "$GID" ]] || { echo "gid $gid, not bare-metal-boot"; return 1; }
  else [[ " $groups " == *" $GID "* ]] || { echo "groups$groups without bare-metal-boot ($GID)"; return 1; }; fi
  [[ $cap == "${CAPS[$u]}" ]] || { echo "CapEff $cap, want ${CAPS[$u]}"; return 1; }
  echo "pid $pid uid $uid gid $gid groups$groups CapEff $cap"
}
GID=$gid
for u in bootd dnsd lbd; do check "$u: dynamic user, group bare-metal-boot, its unit's capabilities" identity "$u"; done

check "bootd /healthz" eq ok cx curl -fsS --max-time 5 http://10.77.0.1:8080/healthz
ipxe_head() { cx curl -fsS --max-time 5 http://10.77.0.1:8080/boot.ipxe | head -n 1; }
check "bootd /boot.ipxe" eq '#!ipxe' ipxe_head
check "dnsd: api.lab.example.test" eq 10.77.0.1 dig1 api.lab.example.test A
check "dnsd: master-0 PTR" eq master-0.lab.example.test. dig1 -x 10.77.0.11
check "lbd status lists its frontends" lb_has api machine-config ingress-http ingress-https

# A node added to the site file, then `systemctl reload` (RELOADING=1 ... READY=1).
site=$ROOT$CONF/site.yaml
lab_site "$RUN/site2.yaml" --from "$site" ignition.dir=ignition \
  nodes+="{name: worker-3, role: worker, live: true, macs: ['52:54:00:77:00:23'], ip: 10.77.0.23, kernelArgs: [console=ttyS0]}"
cat "$RUN/site2.yaml" >"$site" # the same file: its owner and mode stay
reload_all() { T=60 cx systemctl reload bootd dnsd lbd; }
check "systemctl reload bootd dnsd lbd (site + worker-3)" reload_all
check "dnsd: worker-3 from the site after the reload" retry 10 eq 10.77.0.23 dig1 worker-3.lab.example.test A
check "lbd: worker-3 in its pools after the reload" retry 10 lb_has worker-3

# A node created through bootd's API: bootd writes it to its node overlay
# (/var/lib/bootd/nodes.yaml); dnsd and lbd read it from there.
api_create() { # name mac ip
  local tok code
  tok=$(cx cat "$CONF/api-tokens") || return 1
  code=$(cx curl -sS --max-time 10 -o /dev/null -w '%{http_code}' --cacert /var/lib/bootd/ca.pem \
    -H "Authorization: Bearer $tok" -X POST https://10.77.0.1:9443/v1/nodes \
    -d "{\"name\":\"$1\",\"role\":\"worker\",\"macs\":[\"$2\"],\"ip\":\"$3\",\"kernelArgs\":[\"console=ttyS0\"],\"live\":true}") || return 1
  [[ $code == 201 || $code == 200 ]] || { echo "HTTP $code"; return 1; }
  cx grep -q "$1" /var/lib/bootd/nodes.yaml || { echo "$1 not in /var/lib/bootd/nodes.yaml"; return 1; }
  echo "HTTP $code, in /var/lib/bootd/nodes.yaml (mode, uid:gid $(cx stat -c '%a %u:%g' /var/lib/bootd/nodes.yaml))"
}
check "bootd API (token from LoadCredential): create worker-2" api_create worker-2 52:54:00:77:00:22 10.77.0.22
check "dnsd: worker-2 from bootd's overlay" retry 15 eq 10.77.0.22 dig1 worker-2.lab.example.test A
check "dnsd: worker-2 PTR" eq worker-2.lab.example.test. dig1 -x 10.77.0.22
check "lbd: worker-2 from bootd's overlay in its pools" retry 15 lb_has worker-2
# bootd restarted under them: dnsd and lbd keep following the same directory.
api_health() { cx curl -fsS --max-time 5 --cacert /var/lib/bootd/ca.pem https://10.77.0.1:9443/healthz; }
restart_bootd() { T=60 cx systemctl restart bootd && retry 20 api_health >/dev/null && echo "API healthy again"; }
check "systemctl restart bootd" restart_bootd
tactive=$(date +%s) # the watchdog check below counts from here
check "bootd API after its restart: create worker-4" api_create worker-4 52:54:00:77:00:24 10.77.0.24
check "dnsd: worker-4 from bootd's overlay" retry 15 eq 10.77.0.24 dig1 worker-4.lab.example.test A
check "lbd: worker-4 from bootd's overlay in its pools" retry 15 lb_has worker-4

# What dnsd's and lbd's users can reach of bootd's state and the secrets,
# in their own mount namespaces.
reach() { # unit
  local pid st uid gid groups
  pid=$(main_pid "$1") || { echo "$pid"; return 1; }
  st=$(cx cat "/proc/$pid/status") || return 1
  uid=$(awk '/^Uid:/ {print $2}' <<<"$st"); gid=$(awk '/^Gid:/ {print $2}' <<<"$st")
  groups=$(awk '/^Groups:/ {$1 = ""; print}' <<<"$st" | xargs | tr ' ' ',')
  # shellcheck disable=SC2016  # the script is the container's sh's
  cx nsenter -t "$pid" -m -r --wd=/ -- setpriv --reuid="$uid" --regid="$gid" --groups="$groups" --inh-caps=-all --bounding-set=-all \
    sh -c 'r=""
      head -c 1 /var/lib/bootd/nodes.yaml >/dev/null 2>&1 || r="$r cannot-read-nodes.yaml"
      cat /var/lib/bootd/token.key >/dev/null 2>&1 && r="$r reads-token.key"
      cat /var/lib/bootd/ca.key >/dev/null 2>&1 && r="$r reads-ca.key"
      cat /etc/bare-metal-boot/api-tokens >/dev/null 2>&1 && r="$r reads-api-tokens"
      touch /var/lib/bootd/nodes.yaml 2>/dev/null && r="$r writes-nodes.yaml"
      [ -z "$r" ] && echo "reads nodes.yaml; not token.key, ca.key, api-tokens; cannot write bootd state" || { echo "$r"; exit 1; }'
}
check "dnsd's user: bootd's overlay yes, its secrets no" reach dnsd
check "lbd's user: bootd's overlay yes, its secrets no" reach lbd

# The watchdog: alive past WatchdogSec without a restart, its last
# keep-alive (WATCHDOG=1, every 15 s) well after it became active.
left=$((tactive + WATCHDOG + 5 - $(date +%s)))
((left > 0)) && sleep "$left"
watchdog() {
  local u r a w n out=''
  for u in bootd dnsd lbd; do
    r=$(cx systemctl show -p ActiveState -p NRestarts -p ActiveEnterTimestampMonotonic \
      -p WatchdogTimestampMonotonic "$u") || return 1
    a=$(sed -n 's/^ActiveEnterTimestampMonotonic=//p' <<<"$r"); w=$(sed -n 's/^WatchdogTimestampMonotonic=//p' <<<"$r")
    n=$(sed -n 's/^NRestarts=//p' <<<"$r")
    if ! grep -qx ActiveState=active <<<"$r" || [[ $n != 0 ]] || ((w < a + 10000000)); then
      echo "$u: $(echo "$r" | tr '\n' ' ')"; return 1
    fi
    out+="$u last keep-alive $(((w - a) / 1000000))s after start; "
  done
  echo "${out}no restart in $((WATCHDOG + 5))s"
}
check "watchdog (WatchdogSec=${WATCHDOG}s)" watchdog

stop_clean() {
  local u r t
  t=$(date +%s)
  T=90 cx systemctl stop lbd dnsd bootd || return 1
  for u in bootd dnsd lbd; do
    r=$(cx systemctl show -p ActiveState -p Result "$u" | sort | tr '\n' ' ')
    [[ $r == "ActiveState=inactive Result=success " ]] || { echo "$u: $r"; return 1; }
  done
  echo "inactive, Result=success, in $(($(date +%s) - t))s"
}
# A VM network-boots through the units: SeaBIOS + iPXE (QEMU's ROM) on a
# tap in the container's network namespace, the bootstrap node's MAC. DHCP,
# TFTP-less iPXE script, kernel and initramfs over HTTP from bootd as its
# dynamic user; the guest prints the sha256 of the Ignition it fetched,
# which must equal what `bootd render ignition` makes inside the container.
vm_boot() {
  local t line got want
  t=$(date +%s)
  lab_vm "$NS" tap0 52:54:00:77:00:10 "$RUN"
  line=$(wait_ignition_line 180 "$RUN/serial.log" 0 "$VM_PID")
  stop_pid "$VM_PID"
  [[ $line == "LAB-IGNITION "* ]] || { echo "no Ignition line from the guest: ${line:-$(tail -c 300 "$RUN/serial.log" 2>/dev/null | tr -d '\r' | tr '\n' ' ')}"; return 1; }
  got=$(ignition_sha "$line")
  want=$(cx /usr/local/bin/bootd render ignition bootstrap --site "$CONF/site.yaml" --state-dir /var/lib/bootd | sha256sum | cut -d' ' -f1)
  [[ $got == "$want" ]] || { echo "guest fetched sha256=$got, bootd renders $want"; return 1; }
  echo "bootstrap booted (SeaBIOS + iPXE, DHCP from bootd's unit) and fetched its Ignition, sha256 ${got:0:16}, in $(($(date +%s) - t))s"
}
check "a VM network-boots through the units" vm_boot

check "systemctl stop bootd dnsd lbd" stop_clean

[[ ${#failures[@]} -eq 0 ]] || journal 80

# Power off (SIGTERM to systemd-nspawn), and see that it was clean.
kill "$NSPAWN"
exited() { ! alive "$1"; }
if ! wait_for 30 exited "$NSPAWN"; then
  failures+=("poweroff within 30 s")
  bad "container poweroff: still running after 30 s"
else
  rc=0; wait "$NSPAWN" || rc=$?
  if [[ $rc == 0 ]]; then ok "container powered off (systemd-nspawn exited 0)"; else
    failures+=("poweroff"); bad "container poweroff: systemd-nspawn exited $rc"; fi
  stop_pid "$NSPAWN"   # out of the list
  NSPAWN='' LEADER=''
fi

total=$(($(date +%s) - T0))
if [[ ${#failures[@]} -eq 0 ]]; then
  echo "PASS nspawn (bootd, dnsd, lbd under systemd as PID 1: started at boot, serving, reloaded, overlay shared, a VM booted through them, stopped; ${total}s)"
else
  echo "FAIL nspawn ${#failures[@]} check(s) failed: $(printf '%s; ' "${failures[@]}" | sed 's/; $//')"
  exit 1
fi
