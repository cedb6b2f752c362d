# shellcheck shell=bash
# Shared by bench/scale/run.sh and lbd-reload.sh (sourced after
# tests/lib/harness.sh and bench/lib/bench.sh; needs $WORK and $REPO): the
# namespace, the image files and the generated site.

# scale_netns NS: a namespace (deleted at exit by the harness) with a veth
# link 10.78.0.1/16 and the VIPs (.5 api, .6 ingress); the daemons' probes
# of the nodes go nowhere else.
scale_netns() {
    ns_new "$1"
    ns_veth "$1" d0 "$1" d1
    ns_addr "$1" d1
    ns_addr "$1" d0 10.78.0.1/16 10.78.0.5/16 10.78.0.6/16
}

# scale_images: the image set the site names, under $WORK/images.
scale_images() {
    mkdir -p "$WORK/images/storm"
    echo kernel >"$WORK/images/storm/kernel"; echo initramfs >"$WORK/images/storm/initramfs"
    chmod -R a+rX "$WORK/images"
}

rss_now() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }  # now, kB

# lines FILE PATTERN: how many lines of FILE match (0 for no file).
lines() { grep -c "$2" "$1" 2>/dev/null || true; }

# write_site FILE N: a site of N nodes (every worker a backend of both
# ingress pools).
write_site() { # file n
    python3 - "$1" "$2" "$WORK" "$REPO" <<'PY'
import sys
path, n, work, repo = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
out = [f"""cluster: {{ name: scale, baseDomain: example.test }}
host:
  stateDir: {work}/state
  http: {{ listen: "10.78.0.1:8080", url: "http://10.78.0.1:8080" }}
  dhcp:
    serverAddress: 10.78.0.1
    listen: 10.78.0.1:67
networks:
  - name: scale
    subnet: 10.78.0.0/16
    gateway: 10.78.0.254
    dnsServers: [10.78.0.1]
vips: {{ api: 10.78.0.5, ingress: 10.78.0.6 }}
images:
  root: {work}/images
  sets:
    storm: {{ arch: x86_64, kernel: storm/kernel, initramfs: storm/initramfs }}
ignition:
  dir: {repo}/examples/lab/ignition
dns:
  listen: [10.78.0.1:53]
  http: 10.78.0.1:9153
lb:
  adminListen: 10.78.0.1:8404
nodes:
"""]
for i in range(n):
    role = "bootstrap" if i == 0 else "master" if i <= 3 else "worker"
    out.append(f'  - {{ name: n{i:05d}, role: {role}, live: true, macs: ["02:78:00:{i>>16&255:02x}:{i>>8&255:02x}:{i&255:02x}"], ip: 10.78.{1 + i // 256}.{i % 256} }}\n')
open(path, "w").write("".join(out))
PY
}
