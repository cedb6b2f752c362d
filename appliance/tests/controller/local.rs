//! The local provider (`host.api.local`) through real bootd processes, with
//! a stand-in for QEMU (a script that records its PID and argv, then sleeps):
//! no root, no VM. tests/controller/local-e2e.sh proves the real path (QEMU
//! on the lab bridge, network boot, Ignition) as root.

use super::*;
use std::os::unix::fs::PermissionsExt;

/// Kills, on drop, every stand-in this test started that still runs (by the
/// PIDs it recorded, and only if that PID is still the stand-in).
struct StandIns(PathBuf);

impl StandIns {
    fn calls(&self) -> Vec<(i32, String)> {
        std::fs::read_to_string(self.0.join("calls"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                l.split_once(' ')
                    .and_then(|(p, a)| Some((p.parse().ok()?, a.to_string())))
            })
            .collect()
    }
    fn script(&self) -> PathBuf {
        self.0.join("qemu-stand-in")
    }
}

impl Drop for StandIns {
    fn drop(&mut self) {
        let me = self.script().display().to_string();
        for (pid, _) in self.calls() {
            if std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&me))
            {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// Running, and not a zombie left for an init that does not reap.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().chars().next())
        })
        .is_some_and(|state| state != Some('Z') && state != Some('X'))
}

fn cli(site: &Path, args: &[&str]) -> (i32, String) {
    let mut a = vec!["nodes"];
    a.extend_from_slice(args);
    super::bootd_cli(site, &a)
}

fn pid_of(machine_id: &str) -> i32 {
    machine_id.rsplit('.').nth(1).unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_vm_is_created_adopted_after_kill_9_booted_ready_and_deleted_by_pid() {
    let dir = tempfile::tempdir().unwrap();
    let stand = StandIns(dir.path().to_path_buf());
    std::fs::write(
        stand.script(),
        format!("#!/bin/sh\necho \"$$ $*\" >>{}/calls\ntrap 'exit 0' TERM\nwhile :; do sleep 0.1; done\n", dir.path().display()),
    )
    .unwrap();
    std::fs::set_permissions(stand.script(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Providers that are configured but unused by this test.
    let api_port = free_port();
    let http_port = free_port();
    let site = write_site(
        dir.path(),
        "http://127.0.0.1:9",
        "http://127.0.0.1:9",
        "http://127.0.0.1:9",
        &format!("127.0.0.1:{api_port}"),
    );
    let text = std::fs::read_to_string(&site)
        .unwrap()
        .replace(
            "    deadline: 10m\n",
            &format!(
                "    deadline: 10m\n    local: {{ qemu: \"{}\", bridge: br0, memory: 256, stateDir: vms, ovmfVars: no-such-vars.fd }}\n",
                stand.script().display()
            ),
        )
        .replace("powervs: anyAddress }", "powervs: anyAddress, local: anyAddress }")
        .replace("listen: 0.0.0.0:8080", &format!("listen: 127.0.0.1:{http_port}"))
        .replace("listen: 0.0.0.0:8443", &format!("listen: 127.0.0.1:{}", free_port()))
        .replace("  dhcp:\n    interface: br0                # the lab bridge; broadcasts elsewhere are never seen\n    serverAddress: 10.77.0.1\n    leaseTime: 1h\n", "")
        .replace("  tftp:\n    listen: 0.0.0.0:69\n    root: tftp   # tests/lab fills it with iPXE and GRUB binaries\n", "");
    assert!(
        text.contains("local: {") && !text.contains("dhcp:") && !text.contains("0.0.0.0"),
        "{text}"
    );
    std::fs::write(&site, text).unwrap();

    let mut p1 = Proc::start(&site, 1);
    let api = api_client(&dir.path().join("state/ca.pem"), api_port, &p1).await;
    let provisioned = |st: u16, v: &Value| st == 200 && cond(v, "Provisioned")["status"] == "True";

    let node = json!({ "name": "worker-8", "role": "worker", "macs": ["52:54:00:77:00:28"], "ip": "10.77.0.28",
                       "kernelArgs": ["console=ttyS0"], "provider": { "local": {} } });
    let (st, v) = api.create(node).await;
    assert_eq!(st, 201, "{v:#}");
    let v = api.wait_node("worker-8", 30, provisioned).await;
    assert_eq!(v["machine"]["provider"], "local", "{v:#}");
    assert_eq!(v["machine"]["addresses"], json!(["10.77.0.28"]));
    let id = v["machine"]["id"].as_str().unwrap().to_string();
    let pid = pid_of(&id);
    assert!(alive(pid));
    let calls = stand.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].0, pid, "the machine id names the VM's PID");
    for want in [
        "-name bootd:worker-8",
        "-m 256",
        "-boot order=n",
        "mac=52:54:00:77:00:28",
        "ifname=bd",
    ] {
        assert!(calls[0].1.contains(want), "{want} not in {}", calls[0].1);
    }
    let pidfile = std::fs::read_to_string(dir.path().join("vms/worker-8/qemu.pid")).unwrap();
    assert_eq!(pidfile.trim(), pid.to_string());

    // kill -9 bootd; the VM outlives it. Then put the store back to the
    // crash window between starting the VM and recording it: no resource
    // row, the create intent open.
    p1.kill9();
    assert!(alive(pid), "the VM outlives bootd");
    {
        let db = rusqlite::Connection::open(dir.path().join("state/controller.db")).unwrap();
        db.execute("DELETE FROM resources WHERE node='worker-8'", [])
            .unwrap();
        db.execute("DELETE FROM conditions WHERE node='worker-8'", [])
            .unwrap();
        let n = db.execute("UPDATE intents SET done_at=NULL, outcome=NULL WHERE node='worker-8' AND op='create'", []).unwrap();
        assert_eq!(n, 1);
        db.execute(
            "UPDATE nodes SET phase='Provisioning' WHERE name='worker-8'",
            [],
        )
        .unwrap();
    }
    let p2 = Proc::start(&site, 2);
    let api = api.logging(&p2.log);
    let v = api.wait_node("worker-8", 30, provisioned).await;
    assert_eq!(v["machine"]["id"], id.as_str(), "the same VM");
    assert_eq!(stand.calls().len(), 1, "no second VM was started");
    let log2 = std::fs::read_to_string(&p2.log).unwrap();
    assert!(
        log2.contains("how=\"adopted\"") || log2.contains("how=adopted"),
        "{log2}"
    );

    // The VM "boots": its iPXE script, then the Ignition URL the script names.
    let get = |path: String| async move {
        plain_get(&format!("http://127.0.0.1:{http_port}{path}")).await
    };
    let (st, script) = get("/ipxe/worker-8.ipxe".into()).await;
    assert_eq!(st, 200, "{script}");
    let url = script
        .split_whitespace()
        .find_map(|w| w.strip_prefix("ignition.config.url="))
        .expect("ignition URL in the script");
    let path = url
        .strip_prefix("http://10.77.0.1:8080")
        .unwrap_or(url)
        .to_string();
    let (st, ign) = get(path).await;
    assert_eq!(st, 200, "{ign}");

    // `bootd nodes wait`: 0 when Ready; 1 with the reason for a node that is unknown or fails.
    let (code, out) = tokio::task::spawn_blocking({
        let site = site.clone();
        move || {
            cli(
                &site,
                &["wait", "worker-8", "--timeout", "30", "--interval", "0.2"],
            )
        }
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("all 1 node(s) Ready"), "{out}");
    let (code, out) = cli(&site, &["wait", "no-such-node", "--timeout", "10"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAILED no-such-node: no such node"), "{out}");
    // ovmf-ipxe with a variable store that does not exist: the VM cannot be made.
    let bad = json!({ "name": "worker-9", "role": "worker", "macs": ["52:54:00:77:00:29"], "ip": "10.77.0.29",
                      "provider": { "local": { "firmware": "ovmf-ipxe" } } });
    let (st, v) = api.create(bad).await;
    assert_eq!(st, 201, "{v:#}");
    let (code, out) = tokio::task::spawn_blocking({
        let site = site.clone();
        move || {
            cli(
                &site,
                &["wait", "worker-9", "--timeout", "30", "--interval", "0.2"],
            )
        }
    })
    .await
    .unwrap();
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAILED worker-9: local: cannot copy") && out.contains("no-such-vars.fd"),
        "{out}"
    );
    assert_eq!(stand.calls().len(), 1, "nothing started for worker-9");
    // A bad provider spec is refused before anything is stored.
    let (st, v) = api
        .create(json!({ "name": "worker-5", "role": "worker", "macs": ["52:54:00:77:00:25"], "ip": "10.77.0.25",
                        "provider": { "local": { "firmware": "slof", "memory": 1 } } }))
        .await;
    assert_eq!(st, 422, "{v:#}");
    assert_eq!(v["problems"].as_array().unwrap().len(), 2, "{v:#}");

    // Delete: the VM's PID is killed, the node goes away.
    for n in ["worker-8", "worker-9"] {
        let (st, _) = api.call("DELETE", &format!("/v1/nodes/{n}"), None).await;
        assert_eq!(st, 202);
    }
    api.wait_node("worker-8", 30, |st, _| st == 404).await;
    api.wait_node("worker-9", 30, |st, _| st == 404).await;
    assert!(!alive(pid), "the VM is gone");
    assert!(!dir.path().join("vms/worker-8/qemu.pid").exists());
    assert_eq!(stand.calls().len(), 1);
    drop(p2);
}
