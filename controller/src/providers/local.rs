//! The local provider: one QEMU VM per node on a local bridge (the lab's
//! `br0`), network-booting from this host. It makes the demo's whole loop
//! real: API call → machine → network boot → Ignition → Ready.
//!
//! - create: spawns `qemu` (through `ip netns exec NS` when `netns` is set)
//!   with no disk, `-boot order=n`, a virtio NIC with the node's first MAC on
//!   a tap that QEMU creates itself (the tap goes away with the process) and
//!   that a small `ifup` script puts on the bridge; `-no-shutdown`, so a guest
//!   that powers off is a stopped machine that still exists until deleted,
//!   like a cloud's. The VM's files are in `<stateDir>/<node>/`: `qemu.pid`,
//!   `vm.json` (pid, process start time, MAC, IP), `serial.log`, `qemu.log`.
//! - The machine's id is `<node>.<pid>.<start time>` (the start time from
//!   `/proc/<pid>/stat`), so a PID reused by another process is never taken
//!   for the VM. A process is the VM only if its start time matches and its
//!   command line carries `-name bootd:<node>`.
//! - find (before every create, and after a restart): the pidfile's process
//!   if it is still the VM; else a process whose command line has the
//!   node's `-name` and this state directory's console path (a VM started
//!   just before a crash, whose pidfile was never written) is adopted.
//! - delete: SIGTERM to that PID (never a kill by name), SIGKILL after 5 s.
//!
//! Ready comes, as for every provider, from bootd seeing the node fetch its
//! script and its Ignition; this provider only says the VM runs.

use super::{Machine, MachineState, NodeRequest, ProviderError, Result};
use serde::{Deserialize, Serialize};
use site::{LocalFirmware, LocalVms};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// The provider part of a node made by the local provider (all optional:
/// the site's `host.api.local` gives the defaults).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VmSpec {
    /// `seabios-ipxe` or `ovmf-ipxe`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    /// MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u32>,
}

impl VmSpec {
    pub fn check(&self) -> Vec<String> {
        let mut p = Vec::new();
        if let Some(f) = &self.firmware {
            if LocalFirmware::parse(f).is_none() {
                p.push(format!(
                    "provider.local.firmware: {f:?}: want seabios-ipxe or ovmf-ipxe"
                ));
            }
        }
        if let Some(m) = self.memory {
            if !(128..=65536).contains(&m) {
                p.push(format!("provider.local.memory: {m} MiB: want 128 to 65536"));
            }
        }
        p
    }
}

/// What `vm.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct VmFile {
    pid: i32,
    start_time: u64,
    mac: String,
    ip: String,
    tap: String,
}

/// `host.api.local` and a node's `provider.local`.
pub const REGISTRATION: super::Registration = super::Registration {
    name: "local",
    check_spec: |v| super::check_typed(v, VmSpec::check),
    check_userdata: super::any_userdata,
    boot_kind: super::network_boot,
    defaults: super::no_defaults,
    configure: |api, setup| {
        let l = api.local.as_ref()?;
        Some(Ok(
            std::sync::Arc::new(Local::new(l.clone(), setup.state_dir))
                as std::sync::Arc<dyn super::Provider>,
        ))
    },
};

impl super::Provider for Local {
    forward_provider_calls!(Local, "local", VmSpec);
}

#[derive(Debug)]
pub struct Local {
    pub cfg: LocalVms,
    /// `<stateDir>` of the VMs (resolved).
    pub dir: PathBuf,
    /// How long a VM must stay up after its start to count as started.
    pub settle: Duration,
}

/// What `/proc/<pid>` says about a process.
struct ProcInfo {
    start_time: u64,
    zombie: bool,
    args: Vec<String>,
}

fn proc_info(pid: i32) -> Option<ProcInfo> {
    if pid <= 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces and parentheses).
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let state = f.first()?;
    // starttime is field 22 of stat; `rest` starts at field 3.
    let start_time = f.get(19)?.parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    Some(ProcInfo {
        start_time,
        zombie: *state == "Z" || *state == "X",
        args,
    })
}

/// The `-name` value that marks a node's VM.
fn marker(node: &str) -> String {
    format!("bootd:{node}")
}

/// The tap of a node's VM: `bd` + 8 hex digits of a hash of the name (IFNAMSIZ is 16).
pub fn tap_name(node: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in node.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("bd{h:08x}")
}

fn parse_id(id: &str) -> Option<(&str, i32, u64)> {
    let mut it = id.rsplitn(3, '.');
    let start = it.next()?.parse().ok()?;
    let pid = it.next()?.parse().ok()?;
    let node = it.next()?;
    Some((node, pid, start))
}

fn err(what: String) -> ProviderError {
    ProviderError::permanent(what)
}

impl Local {
    pub fn new(cfg: LocalVms, bootd_state_dir: &Path) -> Local {
        let dir = cfg
            .state_dir
            .clone()
            .unwrap_or_else(|| bootd_state_dir.join("vms"));
        Local {
            cfg,
            dir,
            settle: Duration::from_millis(500),
        }
    }

    fn vm_dir(&self, node: &str) -> PathBuf {
        self.dir.join(node)
    }

    fn serial_arg(&self, node: &str) -> String {
        format!("file:{}", self.vm_dir(node).join("serial.log").display())
    }

    /// Is `pid` (started at `start`) still the VM of `node`?
    fn is_vm(&self, node: &str, pid: i32, start: u64) -> bool {
        match proc_info(pid) {
            Some(p) => !p.zombie && p.start_time == start && p.args.contains(&marker(node)),
            None => false,
        }
    }

    fn machine(&self, node: &str, vm: &VmFile) -> Machine {
        Machine {
            network_config: None,
            id: format!("{node}.{}.{}", vm.pid, vm.start_time),
            state: MachineState::Active,
            addresses: vec![vm.ip.clone()],
            macs: vec![vm.mac.clone()],
        }
    }

    fn read_vm(&self, node: &str) -> Option<VmFile> {
        let text = std::fs::read(self.vm_dir(node).join("vm.json")).ok()?;
        serde_json::from_slice(&text).ok()
    }

    fn write_vm(&self, node: &str, vm: &VmFile) -> Result<()> {
        let d = self.vm_dir(node);
        let w = |name: &str, bytes: &[u8]| {
            bootd::state::write_atomic(&d.join(name), bytes, 0o644).map_err(|e| {
                ProviderError::transient(format!(
                    "local: cannot write {}: {e}",
                    d.join(name).display()
                ))
            })
        };
        w(
            "vm.json",
            &serde_json::to_vec_pretty(vm).unwrap_or_default(),
        )?;
        w("qemu.pid", format!("{}\n", vm.pid).as_bytes())
    }

    fn forget(&self, node: &str) {
        for f in ["qemu.pid", "vm.json"] {
            let _ = std::fs::remove_file(self.vm_dir(node).join(f));
        }
    }

    /// The node's VM made earlier (by this or a previous bootd), if it runs.
    pub async fn find(&self, node: &NodeRequest) -> Result<Option<Machine>> {
        if let Some(vm) = self.read_vm(&node.name) {
            if self.is_vm(&node.name, vm.pid, vm.start_time) {
                return Ok(Some(self.machine(&node.name, &vm)));
            }
            info!(node = %node.name, pid = vm.pid, "local VM of the pidfile is gone");
            self.forget(&node.name);
        }
        // A VM started just before a crash, before its pidfile was written.
        let (mark, serial) = (marker(&node.name), self.serial_arg(&node.name));
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return Ok(None);
        };
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let Some(p) = proc_info(pid) else { continue };
            if p.zombie || !p.args.contains(&mark) || !p.args.contains(&serial) {
                continue;
            }
            let mac = p
                .args
                .iter()
                .find_map(|a| a.split(',').find_map(|kv| kv.strip_prefix("mac=")))
                .unwrap_or_default()
                .to_string();
            let vm = VmFile {
                pid,
                start_time: p.start_time,
                mac,
                ip: node.ip.to_string(),
                tap: tap_name(&node.name),
            };
            info!(node = %node.name, pid, "adopting a running local VM found by its command line (no pidfile)");
            self.write_vm(&node.name, &vm)?;
            return Ok(Some(self.machine(&node.name, &vm)));
        }
        Ok(None)
    }

    /// QEMU's arguments for `node`.
    pub fn args(&self, node: &NodeRequest, spec: &VmSpec) -> Result<Vec<String>> {
        let mac = node
            .macs
            .first()
            .ok_or_else(|| err("local: the node has no MAC address".into()))?;
        let firmware = spec
            .firmware
            .as_deref()
            .and_then(LocalFirmware::parse)
            .unwrap_or(self.cfg.firmware);
        let memory = spec.memory.unwrap_or(self.cfg.memory_mib);
        let d = self.vm_dir(&node.name);
        let mut a: Vec<String> = vec![
            "-name".into(),
            marker(&node.name),
            // TCG: KVM is not always usable (nested virtualisation).
            "-accel".into(),
            "tcg".into(),
            "-machine".into(),
            "graphics=off".into(),
            "-m".into(),
            memory.to_string(),
            "-smp".into(),
            "1".into(),
            "-display".into(),
            "none".into(),
            "-monitor".into(),
            "none".into(),
            // A guest that powers off leaves a stopped VM, not a vanished machine.
            "-no-shutdown".into(),
            // No disk: network boot only.
            "-boot".into(),
            "order=n".into(),
            "-serial".into(),
            self.serial_arg(&node.name),
            "-netdev".into(),
            format!(
                "tap,id=n0,ifname={},script={},downscript=no",
                tap_name(&node.name),
                d.join("ifup").display()
            ),
            "-device".into(),
            format!("virtio-net-pci,netdev=n0,mac={mac}"),
        ];
        if firmware == LocalFirmware::OvmfIpxe {
            a.extend([
                "-drive".into(),
                format!(
                    "if=pflash,format=raw,unit=0,readonly=on,file={}",
                    self.cfg.ovmf_code.display()
                ),
                "-drive".into(),
                format!(
                    "if=pflash,format=raw,unit=1,file={}",
                    d.join("OVMF_VARS.fd").display()
                ),
            ]);
        }
        Ok(a)
    }

    pub async fn create(&self, node: &NodeRequest, spec: &VmSpec) -> Result<Machine> {
        let args = self.args(node, spec)?;
        let d = self.vm_dir(&node.name);
        std::fs::create_dir_all(&d)
            .map_err(|e| err(format!("local: cannot create {}: {e}", d.display())))?;
        // QEMU runs this with the tap's name once it has made the tap.
        let ifup = format!(
            "#!/bin/sh\n# Written by bootd: puts the VM's tap on the bridge.\nPATH=$PATH:/usr/sbin:/sbin\nip link set \"$1\" master {} && ip link set \"$1\" up\n",
            self.cfg.bridge
        );
        bootd::state::write_atomic(&d.join("ifup"), ifup.as_bytes(), 0o755)
            .map_err(|e| err(format!("local: cannot write ifup: {e}")))?;
        if args.iter().any(|a| a.contains("OVMF_VARS.fd")) {
            std::fs::copy(&self.cfg.ovmf_vars, d.join("OVMF_VARS.fd")).map_err(|e| {
                err(format!(
                    "local: cannot copy {}: {e}",
                    self.cfg.ovmf_vars.display()
                ))
            })?;
        }
        let log_path = d.join("qemu.log");
        let log = std::fs::File::create(&log_path)
            .map_err(|e| err(format!("local: cannot create {}: {e}", log_path.display())))?;
        let log2 = log.try_clone().map_err(|e| err(format!("local: {e}")))?;
        let mut cmd = match &self.cfg.netns {
            Some(ns) => {
                let mut c = tokio::process::Command::new("ip");
                c.args(["netns", "exec", ns, &self.cfg.qemu]);
                c
            }
            None => tokio::process::Command::new(&self.cfg.qemu),
        };
        cmd.args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .kill_on_drop(false);
        let mut child = cmd
            .spawn()
            .map_err(|e| err(format!("local: cannot start {}: {e}", self.cfg.qemu)))?;
        let pid = child
            .id()
            .map(|p| p as i32)
            .ok_or_else(|| err("local: the VM exited at once".into()))?;
        let start_time = proc_info(pid).map(|p| p.start_time).unwrap_or(0);
        let vm = VmFile {
            pid,
            start_time,
            mac: node.macs[0].clone(),
            ip: node.ip.to_string(),
            tap: tap_name(&node.name),
        };
        // Recorded before anything else can fail, so find() sees it after a crash.
        if let Err(e) = self.write_vm(&node.name, &vm) {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(e);
        }
        // A VM that cannot start (no tap permission, bad firmware path) exits at once.
        let until = Instant::now() + self.settle;
        while Instant::now() < until {
            if let Ok(Some(status)) = child.try_wait() {
                self.forget(&node.name);
                let last = std::fs::read_to_string(&log_path)
                    .unwrap_or_default()
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .to_string();
                return Err(err(format!(
                    "local: the VM exited at once ({status}): {last}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let node_name = node.name.clone();
        // Reap it when it ends (a VM outliving this bootd is reparented and adopted later).
        tokio::spawn(async move {
            match child.wait().await {
                Ok(s) => info!(node = %node_name, pid, status = %s, "local VM exited"),
                Err(e) => warn!(node = %node_name, pid, error = %e, "local VM: wait failed"),
            }
        });
        info!(node = %node.name, pid, tap = %vm.tap, bridge = %self.cfg.bridge, mac = %vm.mac, "local VM started");
        Ok(self.machine(&node.name, &vm))
    }

    /// `None`: the VM is gone.
    pub async fn get(&self, id: &str) -> Result<Option<Machine>> {
        let Some((node, pid, start)) = parse_id(id) else {
            return Ok(None);
        };
        if !self.is_vm(node, pid, start) {
            return Ok(None);
        }
        let vm = self
            .read_vm(node)
            .filter(|v| v.pid == pid)
            .unwrap_or(VmFile {
                pid,
                start_time: start,
                mac: String::new(),
                ip: String::new(),
                tap: tap_name(node),
            });
        Ok(Some(self.machine(node, &vm)))
    }

    /// Kills the VM's PID (checked to still be the VM); a VM already gone is fine.
    pub async fn delete(&self, id: &str) -> Result<()> {
        let Some((node, pid, start)) = parse_id(id) else {
            return Err(err(format!("local: {id:?} is not a local VM id")));
        };
        use nix::sys::signal::{kill, Signal};
        let target = nix::unistd::Pid::from_raw(pid);
        for (sig, wait) in [
            (Signal::SIGTERM, Duration::from_secs(5)),
            (Signal::SIGKILL, Duration::from_secs(5)),
        ] {
            if !self.is_vm(node, pid, start) {
                break;
            }
            let _ = kill(target, sig);
            let until = Instant::now() + wait;
            while Instant::now() < until && self.is_vm(node, pid, start) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        if self.is_vm(node, pid, start) {
            return Err(ProviderError::transient(format!(
                "local: VM {pid} still runs after SIGKILL"
            )));
        }
        if self.read_vm(node).is_some_and(|v| v.pid == pid) {
            self.forget(node);
        }
        info!(node, pid, "local VM stopped");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in for QEMU: appends "PID ARGS" to `calls`, then sleeps until killed.
    fn stand_in(dir: &Path, body: &str) -> PathBuf {
        let p = dir.join("qemu-stand-in");
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho \"$$ $*\" >>{}/calls\n{body}\n",
                dir.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    const SLEEPS: &str = "trap 'exit 0' TERM\nwhile :; do sleep 0.1; done";

    fn local(dir: &Path, qemu: &Path) -> Local {
        let cfg = LocalVms {
            qemu: qemu.display().to_string(),
            bridge: "br0".into(),
            netns: None,
            firmware: LocalFirmware::SeabiosIpxe,
            memory_mib: 512,
            state_dir: Some(dir.join("vms")),
            ovmf_code: "/usr/share/OVMF/OVMF_CODE_4M.fd".into(),
            ovmf_vars: dir.join("vars.fd"),
        };
        Local::new(cfg, dir)
    }

    fn node(name: &str) -> NodeRequest {
        NodeRequest {
            ip: "10.77.0.40".parse().unwrap(),
            macs: vec!["52:54:00:77:00:40".into()],
            ..NodeRequest::bare(name, "lab")
        }
    }

    fn alive(pid: i32) -> bool {
        proc_info(pid).is_some_and(|p| !p.zombie)
    }

    fn calls(dir: &Path) -> Vec<String> {
        std::fs::read_to_string(dir.join("calls"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    #[tokio::test]
    async fn create_find_adopt_delete_by_pid() {
        let t = tempfile::tempdir().unwrap();
        let l = local(t.path(), &stand_in(t.path(), SLEEPS));
        let n = node("vm-a");
        assert_eq!(l.find(&n).await.unwrap(), None);
        let m = l.create(&n, &VmSpec::default()).await.unwrap();
        assert_eq!(m.state, MachineState::Active);
        assert_eq!(
            (m.addresses.clone(), m.macs.clone()),
            (
                vec!["10.77.0.40".to_string()],
                vec!["52:54:00:77:00:40".to_string()]
            )
        );
        let (name, pid, _) = parse_id(&m.id).unwrap();
        assert_eq!(name, "vm-a");
        assert!(alive(pid));
        let pidfile = std::fs::read_to_string(t.path().join("vms/vm-a/qemu.pid")).unwrap();
        assert_eq!(pidfile.trim(), pid.to_string());
        // The arguments QEMU got: network boot only, the node's MAC, a tap on br0 via ifup.
        let c = calls(t.path());
        assert_eq!(c.len(), 1);
        let argv = &c[0];
        assert!(argv.starts_with(&format!("{pid} ")), "{argv}");
        for want in [
            "-name bootd:vm-a",
            "-boot order=n",
            "-no-shutdown",
            "-device virtio-net-pci,netdev=n0,mac=52:54:00:77:00:40",
            &format!(
                "-netdev tap,id=n0,ifname={},script={}/vms/vm-a/ifup,downscript=no",
                tap_name("vm-a"),
                t.path().display()
            ),
            &format!("-serial file:{}/vms/vm-a/serial.log", t.path().display()),
        ] {
            assert!(argv.contains(want), "{want} not in {argv}");
        }
        assert!(
            !argv.contains("-drive") && !argv.contains("-hda") && !argv.contains("-cdrom"),
            "no disk: {argv}"
        );
        let ifup = std::fs::read_to_string(t.path().join("vms/vm-a/ifup")).unwrap();
        assert!(ifup.contains("ip link set \"$1\" master br0"), "{ifup}");

        // A new provider instance (bootd restarted) finds the same VM by its pidfile.
        let l2 = local(t.path(), &stand_in(t.path(), SLEEPS));
        assert_eq!(l2.find(&n).await.unwrap().map(|m| m.id), Some(m.id.clone()));
        assert_eq!(
            l2.get(&m.id).await.unwrap().map(|m| m.id),
            Some(m.id.clone())
        );
        assert_eq!(calls(t.path()).len(), 1, "find started nothing");

        l2.delete(&m.id).await.unwrap();
        assert!(!alive(pid), "the VM's PID is gone");
        assert_eq!(l2.get(&m.id).await.unwrap(), None);
        assert_eq!(l2.find(&n).await.unwrap(), None);
        assert!(!t.path().join("vms/vm-a/qemu.pid").exists());
        l2.delete(&m.id).await.unwrap();
    }

    #[tokio::test]
    async fn a_vm_without_pidfile_is_adopted_by_its_command_line() {
        let t = tempfile::tempdir().unwrap();
        let l = local(t.path(), &stand_in(t.path(), SLEEPS));
        let n = node("vm-b");
        let m = l
            .create(
                &n,
                &VmSpec {
                    firmware: None,
                    memory: Some(256),
                },
            )
            .await
            .unwrap();
        assert!(calls(t.path())[0].contains("-m 256"));
        // A crash between spawn and the pidfile: no vm.json, no qemu.pid.
        l.forget("vm-b");
        let l2 = local(t.path(), &stand_in(t.path(), SLEEPS));
        let found = l2.find(&n).await.unwrap().expect("adopted");
        assert_eq!(found.id, m.id);
        assert_eq!(found.macs, vec!["52:54:00:77:00:40".to_string()]);
        assert!(
            t.path().join("vms/vm-b/qemu.pid").exists(),
            "pidfile rewritten"
        );
        // Another node's name is not adopted.
        assert_eq!(l2.find(&node("vm-b2")).await.unwrap(), None);
        l2.delete(&found.id).await.unwrap();
        assert!(!alive(parse_id(&m.id).unwrap().1));
    }

    #[tokio::test]
    async fn a_stale_pidfile_never_kills_another_process() {
        let t = tempfile::tempdir().unwrap();
        let l = local(t.path(), &stand_in(t.path(), SLEEPS));
        let n = node("vm-c");
        // An unrelated process under the recorded PID (as after a reboot and PID reuse).
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = other.id() as i32;
        let start = proc_info(pid).unwrap().start_time;
        std::fs::create_dir_all(t.path().join("vms/vm-c")).unwrap();
        let vm = VmFile {
            pid,
            start_time: start,
            mac: "52:54:00:77:00:40".into(),
            ip: "10.77.0.40".into(),
            tap: tap_name("vm-c"),
        };
        l.write_vm("vm-c", &vm).unwrap();
        assert_eq!(
            l.find(&n).await.unwrap(),
            None,
            "not the VM: its command line has no -name bootd:vm-c"
        );
        let id = format!("vm-c.{pid}.{start}");
        assert_eq!(l.get(&id).await.unwrap(), None);
        l.delete(&id).await.unwrap();
        l.delete(&format!("vm-x.{pid}.{start}")).await.unwrap();
        assert!(alive(pid), "never killed");
        other.kill().unwrap();
        other.wait().unwrap();
    }

    #[tokio::test]
    async fn a_vm_that_cannot_start_is_a_clear_error() {
        let t = tempfile::tempdir().unwrap();
        let l = local(
            t.path(),
            &stand_in(
                t.path(),
                "echo 'qemu: could not open /dev/net/tun: Operation not permitted' >&2\nexit 1",
            ),
        );
        let e = l
            .create(&node("vm-d"), &VmSpec::default())
            .await
            .unwrap_err();
        assert!(!e.is_transient());
        assert!(e.to_string().contains("could not open /dev/net/tun"), "{e}");
        assert!(!t.path().join("vms/vm-d/qemu.pid").exists());
        let missing = local(t.path(), &t.path().join("no-such-qemu"));
        let e = missing
            .create(&node("vm-e"), &VmSpec::default())
            .await
            .unwrap_err();
        assert!(e.to_string().contains("cannot start"), "{e}");
    }

    #[tokio::test]
    async fn ovmf_gets_its_pflash_and_spec_checks() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("vars.fd"), b"vars").unwrap();
        let l = local(t.path(), &stand_in(t.path(), SLEEPS));
        let spec = VmSpec {
            firmware: Some("ovmf-ipxe".into()),
            memory: None,
        };
        let m = l.create(&node("vm-f"), &spec).await.unwrap();
        let argv = &calls(t.path())[0];
        assert!(argv.contains("-drive if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd"), "{argv}");
        assert_eq!(
            std::fs::read(t.path().join("vms/vm-f/OVMF_VARS.fd")).unwrap(),
            b"vars"
        );
        l.delete(&m.id).await.unwrap();
        assert!(VmSpec::default().check().is_empty());
        let bad = VmSpec {
            firmware: Some("slof".into()),
            memory: Some(64),
        }
        .check();
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert_eq!(parse_id("a-b.12.34"), Some(("a-b", 12, 34)));
        assert_eq!(parse_id("12.34"), None);
        assert!(tap_name("worker-with-a-long-name-0").len() <= 15);
    }
}
