# shellcheck shell=bash
# BMC emulators driving real libvirt/QEMU VMs inside a lab network namespace.
# Sourced by tests/controller/bmc-e2e.sh, after tests/lib/harness.sh and
# tests/lib/vm.sh: every process is started with spawn (the harness stops
# it by PID at exit, and whatever is left in the namespace with it);
# a failure ends the run through the caller's die MESSAGE (its logs, then
# the harness's fail). The caller sets:
#   NS        the lab namespace (lab_netns: 10.77.0.1/24 on br0)
#   WORK      an absolute, empty-ish directory for everything of this run
#             (harness_init --work)
#   BMC_VENV  the venv with sushy-emulator, vbmc, vbmcd (tests/controller/bmc-deps.sh)
#
# What it gives:
#   bmc_libvirt_start   virtlogd + libvirtd in NS with a private /etc/libvirt,
#                       /run, /var/{lib,log,cache}/libvirt (all under WORK/lv);
#                       sets LV_URI, VIRTLOGD_PID, LIBVIRTD_PID
#   lv ARGS...          virsh against that libvirtd
#   bmc_define NAME MAC a stopped TCG domain (SeaBIOS, 512 MiB, empty 64M qcow2
#                       as first boot device, virtio NIC on br0 with MAC, serial
#                       console appended to WORK/NAME-serial.log)
#   bmc_credentials     WORK/bmc-password (random, mode 600) + the files the
#                       tools read it from: bmc-htpasswd (sushy), bmc-netrc (curl)
#   bmc_ca              a throwaway CA and a 127.0.0.1 server cert (WORK/bmc-ca.pem,
#                       bmc-tls.pem, bmc-tls.key)
#   bmc_sushy NAME PORT UUID [tls]   sushy-emulator on 127.0.0.1:PORT, libvirt driver,
#                       Basic auth, only the system UUID visible
#   bmc_vbmc DOMAIN PORT  vbmcd in NS (VBMCD_PID) + an IPMI BMC for DOMAIN on 127.0.0.1:PORT (UDP)
#   rf METHOD URL [BODY]  curl (netrc auth) -> body, then the HTTP status on the last line
#   ipmi PORT ARGS...   ipmitool lanplus, password through IPMI_PASSWORD (-E), never argv
#   bmc_teardown        destroy + undefine the domains (an on_exit hook that
#                       bmc_libvirt_start registers: it runs before the
#                       processes are stopped)
#
# Nothing here listens outside NS: sushy and vbmc bind 127.0.0.1 inside NS,
# libvirtd's sockets are files under WORK/lv/run.

LV_URI="" VIRTLOGD_PID="" LIBVIRTD_PID="" BMC_DOMAINS=()
SEABIOS=/usr/share/seabios/bios-256k.bin

lv() { virsh -q -c "$LV_URI" "$@"; }

# libvirt inside the namespace, stopped by PID.
#
# What works (Debian 12, libvirt 9.0): both daemons run in the foreground
# (no -d: a daemonizing fork would lose the PID) inside NS *and* inside a
# private mount namespace in which WORK/lv/{etc,run,lib,log,cache} are
# bind-mounted over /etc/libvirt, /run/libvirt, /var/lib/libvirt,
# /var/log/libvirt and /var/cache/libvirt (/run itself gets a fresh tmpfs
# there, so nothing is created on the host's /run). So a system libvirtd, if
# any, is neither seen nor touched: its sockets, pidfiles, domain XML and
# default network stay out of sight, and everything of ours is in WORK.
#   spawn --ns NS unshare --mount --propagation private sh -c 'mount ...;
#       exec nice -n 10 /usr/sbin/virtlogd -f /etc/libvirt/virtlogd.conf -p PIDFILE'
#   spawn nsenter -t VIRTLOGD_PID --mount --net --root nice -n 10 /usr/sbin/libvirtd -f ... -p PIDFILE
# (ip netns exec, unshare, nsenter for mount+net, sh's exec and nice all exec:
# $SPAWNED is the daemon's own PID.) QEMU inherits libvirtd's nice. Without virtlogd
# a domain start fails ("Failed to connect socket to .../virtlogd-sock").
# Clients (virsh, sushy, vbmc) stay in the normal mount namespace and reach
# libvirtd through its socket's host path: qemu:///system?socket=WORK/lv/run/libvirt-sock.
# qemu.conf: QEMU runs as root (no chown of WORK files), no security driver,
# no cgroup controllers (there is no systemd/machined here).
bmc_libvirt_start() {
  local lvd=$WORK/lv
  mkdir -p "$lvd"/{etc,run,lib,log,cache}
  LV_URI="qemu:///system?socket=$lvd/run/libvirt-sock"
  (( ${#lvd} + 17 < 108 )) || die "WORK too long for a unix socket path: $lvd/run/libvirt-sock"
  cat >"$lvd/etc/libvirtd.conf" <<'EOF'
unix_sock_dir = "/run/libvirt"
unix_sock_group = "root"
unix_sock_ro_perms = "0700"
unix_sock_rw_perms = "0700"
auth_unix_ro = "none"
auth_unix_rw = "none"
log_outputs = "3:stderr"
EOF
  cat >"$lvd/etc/virtlogd.conf" <<'EOF'
log_outputs = "3:stderr"
EOF
  cat >"$lvd/etc/qemu.conf" <<'EOF'
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
cgroup_controllers = [ ]
EOF
  local m="mount -t tmpfs -o mode=755 lvrun /run && mkdir -p /run/libvirt"
  m+=" && mount --bind '$lvd/etc' /etc/libvirt && mount --bind '$lvd/run' /run/libvirt"
  m+=" && mount --bind '$lvd/lib' /var/lib/libvirt && mount --bind '$lvd/log' /var/log/libvirt"
  m+=" && mount --bind '$lvd/cache' /var/cache/libvirt"
  spawn --ns "$NS" --log "$WORK/virtlogd.log" unshare --mount --propagation private sh -c \
    "$m && exec nice -n 10 /usr/sbin/virtlogd -f /etc/libvirt/virtlogd.conf -p '$WORK/virtlogd.pid'"
  VIRTLOGD_PID=$SPAWNED
  # The mounts are done once virtlogd's socket is there.
  wait_up "$VIRTLOGD_PID" 10 "$WORK/virtlogd.log" virtlogd test -S "$lvd/run/virtlogd-sock"
  # --root: entering a mount namespace makes its root ours; in a chroot
  # (tests/fresh-debian.sh) that is the host's /, not virtlogd's root.
  spawn --log "$WORK/libvirtd.log" nsenter -t "$VIRTLOGD_PID" --mount --net --root nice -n 10 /usr/sbin/libvirtd \
    -f /etc/libvirt/libvirtd.conf -p "$WORK/libvirtd.pid"
  LIBVIRTD_PID=$SPAWNED
  wait_up "$LIBVIRTD_PID" 30 "$WORK/libvirtd.log" "libvirtd (virsh -c $LV_URI list)" lv list
  on_exit bmc_teardown
}

# bmc_define NAME MAC: define (not start) a SeaBIOS TCG domain whose only
# bootable thing is an empty disk, so that without a boot override it stops
# at "No bootable device.". <bios useserial='yes'/> puts SeaBIOS's and iPXE's
# output on the serial console too; append='on' keeps every boot in the log.
# The loader is SeaBIOS, QEMU's default for pc, named explicitly: with no
# <loader> sushy reports no BootSourceOverrideMode and a PATCH with
# "BootSourceOverrideMode":"Legacy" fails (500, "no loader path specified and
# firmware auto selection disabled": it writes <loader type='rom'/> without a
# path); <os firmware='bios'> fails at start instead (Debian ships no firmware
# descriptor for SeaBIOS). With this loader and SUSHY_EMULATOR_BOOT_LOADER_MAP
# naming the same file (bmc_sushy), sushy reports Mode "Legacy" and accepts it.
# <acpi/>: without it libvirt passes -no-acpi and the guest's `poweroff -f`
# only halts ("reboot: System halted"), the domain stays "running".
bmc_define() {
  local name=$1 mac=$2 disk=$WORK/$1.qcow2
  qemu-img create -q -f qcow2 "$disk" 64M
  cat >"$WORK/$name.xml" <<EOF
<domain type='qemu'>
  <name>$name</name>
  <memory unit='MiB'>512</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <loader readonly='yes' type='rom'>$SEABIOS</loader>
    <boot dev='hd'/>
    <bios useserial='yes'/>
  </os>
  <features><acpi/><apic/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='$disk'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <interface type='bridge'>
      <mac address='$mac'/>
      <source bridge='br0'/>
      <model type='virtio'/>
    </interface>
    <serial type='file'>
      <source path='$WORK/$name-serial.log' append='on'/>
      <target port='0'/>
    </serial>
    <console type='file'>
      <source path='$WORK/$name-serial.log' append='on'/>
      <target type='serial' port='0'/>
    </console>
    <controller type='usb' model='none'/>
    <memballoon model='none'/>
  </devices>
</domain>
EOF
  lv define "$WORK/$name.xml" >/dev/null || die "virsh define $name failed"
  BMC_DOMAINS+=("$name")
}

# The BMC password: random per run, in a mode-600 file only. Its derived forms:
# bmc-htpasswd for sushy (sushy-tools 2.x accepts bcrypt entries only, $2b$/$2y$/$2a$;
# apr1/MD5 and SHA are refused at start. Cost 4: a throwaway password, and sushy checks
# the hash on every request), bmc-netrc for curl (not -u: argv is public).
# 16 characters: IPMI 2.0 passwords are at most 20 bytes.
bmc_credentials() {
  (umask 077
   head -c 12 /dev/urandom | base64 | tr '+/' 'Ab' | tr -d '\n' >"$WORK/bmc-password"
   "$BMC_VENV/bin/python3" - "$WORK/bmc-password" >"$WORK/bmc-htpasswd" <<'EOF'
import bcrypt, sys
pw = open(sys.argv[1], 'rb').read()
print('admin:' + bcrypt.hashpw(pw, bcrypt.gensalt(rounds=4)).decode())
EOF
   printf 'machine 127.0.0.1 login admin password %s\n' "$(cat "$WORK/bmc-password")" >"$WORK/bmc-netrc")
  [[ $(stat -c %a "$WORK/bmc-password") == 600 ]] || die "bmc-password not mode 600"
}

# A throwaway CA and a server certificate for 127.0.0.1 signed by it (v3, SAN,
# serverAuth: what rustls/webpki want).
bmc_ca() {
  local d=$WORK
  ( set -e; umask 077
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
      -subj "/CN=bmc-e2e throwaway CA" -keyout "$d/bmc-ca.key" -out "$d/bmc-ca.pem" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
      -subj "/CN=127.0.0.1" -keyout "$d/bmc-tls.key" -out "$d/bmc-tls.csr"
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature" \
      "extendedKeyUsage=serverAuth" "subjectAltName=IP:127.0.0.1,DNS:localhost" \
      "subjectKeyIdentifier=hash" "authorityKeyIdentifier=keyid" >"$d/bmc-tls.ext"
    openssl x509 -req -in "$d/bmc-tls.csr" -CA "$d/bmc-ca.pem" -CAkey "$d/bmc-ca.key" \
      -CAcreateserial -days 2 -extfile "$d/bmc-tls.ext" -out "$d/bmc-tls.pem"
    chmod 644 "$d/bmc-ca.pem" "$d/bmc-tls.pem"
  ) >"$d/bmc-ca.log" 2>&1 || die "openssl (throwaway CA) failed: $(tail -n 3 "$d/bmc-ca.log")"
}

# bmc_sushy NAME PORT UUID [tls]: the Redfish emulator with the libvirt driver.
bmc_sushy() {
  local name=$1 port=$2 uuid=$3 tls=${4:-} conf=$WORK/sushy-$1.conf scheme=http
  mkdir -p "$WORK/sushy-$name-state"
  cat >"$conf" <<EOF
SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'
SUSHY_EMULATOR_LISTEN_PORT = $port
SUSHY_EMULATOR_LIBVIRT_URI = '$LV_URI'
SUSHY_EMULATOR_AUTH_FILE = '$WORK/bmc-htpasswd'
SUSHY_EMULATOR_STATE_DIR = '$WORK/sushy-$name-state'
SUSHY_EMULATOR_ALLOWED_INSTANCES = ['$uuid']
SUSHY_EMULATOR_BOOT_LOADER_MAP = {
    'UEFI': {'x86_64': '/usr/share/OVMF/OVMF_CODE.secboot.fd'},
    'Legacy': {'x86_64': '$SEABIOS'},
}
EOF
  if [[ $tls == tls ]]; then
    scheme=https
    printf "SUSHY_EMULATOR_SSL_CERT = '%s'\nSUSHY_EMULATOR_SSL_KEY = '%s'\n" \
      "$WORK/bmc-tls.pem" "$WORK/bmc-tls.key" >>"$conf"
  fi
  # TMPDIR: sushy's memoize cache is a sqlite file under it.
  spawn --ns "$NS" --log "$WORK/sushy-$name.log" env TMPDIR="$WORK/sushy-$name-state" nice -n 10 \
    "$BMC_VENV/bin/sushy-emulator" --config "$conf"
  wait_up "$SPAWNED" 30 "$WORK/sushy-$name.log" "sushy-emulator $name on $scheme://127.0.0.1:$port" \
    sushy_answers "$scheme://127.0.0.1:$port/redfish/v1/"
}
sushy_answers() { # URL: any 2xx or 4xx (no credentials sent)
  local code
  code=$(nsx curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$WORK/bmc-ca.pem" "$1" 2>/dev/null || true)
  [[ $code =~ ^[24] ]]
}

# bmc_vbmc DOMAIN PORT: vbmcd (foreground, by PID) and one IPMI BMC.
bmc_vbmc() {
  local dom=$1 port=$2 conf=$WORK/vbmc.conf
  mkdir -p "$WORK/vbmc"
  cat >"$conf" <<EOF
[default]
config_dir = $WORK/vbmc
pid_file = $WORK/vbmcd.pid
server_port = 50891
[log]
logfile = $WORK/vbmcd.log
debug = true
EOF
  spawn --ns "$NS" --log "$WORK/vbmcd.out" env VIRTUALBMC_CONFIG="$conf" nice -n 10 "$BMC_VENV/bin/vbmcd" --foreground
  VBMCD_PID=$SPAWNED
  wait_up "$VBMCD_PID" 20 "$WORK/vbmcd.out" vbmcd vbmc_cli list
  # The emulator's own setup, not our product: `vbmc add` only takes the BMC
  # password on its command line (visible in ps for that moment). Nothing of
  # bootd's ever passes it in argv; the final leak check runs after this exited.
  vbmc_cli add "$dom" --port "$port" --address 127.0.0.1 --username admin \
    --password "$(cat "$WORK/bmc-password")" --libvirt-uri "$LV_URI" >"$WORK/vbmc-add.log" 2>&1 \
    || die "vbmc add $dom: $(cat "$WORK/vbmc-add.log")"
  vbmc_cli start "$dom" >>"$WORK/vbmc-add.log" 2>&1 || die "vbmc start $dom: $(cat "$WORK/vbmc-add.log")"
  wait_for 10 ipmi "$port" chassis power status || die "IPMI BMC for $dom not answering on 127.0.0.1:$port"
}
vbmc_cli() { ip netns exec "$NS" env VIRTUALBMC_CONFIG="$WORK/vbmc.conf" "$BMC_VENV/bin/vbmc" "$@"; }

rf() {   # rf METHOD URL [BODY]
  local args=(-sS --max-time 30 --netrc-file "$WORK/bmc-netrc" --cacert "$WORK/bmc-ca.pem"
              -X "$1" -w '\n%{http_code}')
  [[ $# -ge 3 ]] && args+=(-H 'Content-Type: application/json' --data-binary "$3")
  nsx curl "${args[@]}" "$2"
}
ipmi() {   # ipmi PORT ARGS...
  local port=$1; shift
  IPMI_PASSWORD=$(cat "$WORK/bmc-password") \
    ip netns exec "$NS" ipmitool -I lanplus -H 127.0.0.1 -p "$port" -U admin -E -N 2 -R 3 "$@"
}

# bmc_pool: the storage pool sushy's libvirt driver copies an inserted virtual
# media image into before it attaches it to the domain as a CD
# (SUSHY_EMULATOR_STORAGE_POOL, default "default").
bmc_pool() {
  mkdir -p "$WORK/pool"
  lv pool-define-as default dir --target "$WORK/pool" >/dev/null || die "virsh pool-define-as default"
  lv pool-start default >/dev/null || die "virsh pool-start default"
}

bmc_teardown() {
  [[ -n $LV_URI && -n $LIBVIRTD_PID ]] || return 0
  alive "$LIBVIRTD_PID" || return 0
  local d
  for d in "${BMC_DOMAINS[@]}"; do
    lv destroy "$d" >/dev/null 2>&1 || true
    lv undefine "$d" >/dev/null 2>&1 || lv undefine --nvram "$d" >/dev/null 2>&1 || true
  done
}
