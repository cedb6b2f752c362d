//! The built `bootd-agent` against fixture trees (tests/data/<name>/ is a
//! machine's /proc, /sys and /dev as far as the agent reads them) and a
//! loopback HTTP server that captures what it POSTs. The inventory must
//! deserialize into `site::hardware::Inventory` (deny_unknown_fields) with
//! exactly the expected values: that is the contract with bootd.
//!
//! The wipe test builds a real GPT image with sgdisk and mkfs.ext4 and
//! asks blkid and wipefs what is left; the LLDP test sends frames over a
//! veth pair in a private network namespace. Each skips, saying why, when
//! its tools or privileges are missing.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use site::hardware::{Cpu, Disk, Inventory, Lldp, Nic, System};

const BIN: &str = env!("CARGO_BIN_EXE_bootd-agent");
const MIB: u64 = 1 << 20;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

// ---- A loopback server that answers from a script -------------------------

struct Request {
    head: String,
    body: Vec<u8>,
}

struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Request>>,
}

impl Server {
    /// Answers the n-th connection with `answers[n]` (status line, body),
    /// and accepts no more than that.
    fn start(answers: &[(&str, &str)]) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let answers: Vec<(String, String)> = answers
            .iter()
            .map(|(s, b)| (s.to_string(), b.to_string()))
            .collect();
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut got = Vec::new();
            for (status, body) in answers {
                let mut conn = loop {
                    match listener.accept() {
                        Ok((c, _)) => break Some(c),
                        Err(_) if stop2.load(Ordering::Relaxed) || Instant::now() > deadline => {
                            break None
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(10)),
                    }
                };
                let Some(c) = conn.as_mut() else { break };
                c.set_nonblocking(false).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                got.push(read_request(c));
                let answer = format!(
                    "{status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                c.write_all(answer.as_bytes()).unwrap();
            }
            got
        });
        Server { addr, stop, thread }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn requests(self) -> Vec<Request> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

fn read_request(c: &mut std::net::TcpStream) -> Request {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = c.read(&mut chunk).unwrap();
        assert!(n > 0, "the agent closed mid-request");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("a Content-Length")
        .parse()
        .unwrap();
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = c.read(&mut chunk).unwrap();
        assert!(n > 0, "the agent closed mid-body");
        body.extend_from_slice(&chunk[..n]);
    }
    Request { head, body }
}

/// The agent with `args`, killed if it runs past two minutes.
fn agent(args: &[&str]) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("bootd-agent {args:?} ran past its deadline");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    eprintln!(
        "bootd-agent {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn inventory_of(r: &Request) -> Inventory {
    serde_json::from_slice(&r.body).unwrap_or_else(|e| {
        panic!(
            "not a site::hardware::Inventory: {e}\n{}",
            String::from_utf8_lossy(&r.body)
        )
    })
}

// ---- inspect ---------------------------------------------------------------

#[test]
fn inspect_reports_the_server_fixture_as_site_reads_it() {
    let srv = Server::start(&[("HTTP/1.1 204 No Content", "")]);
    let root = data("server1");
    let out = agent(&[
        "inspect",
        "--post",
        &srv.url("/inspect/node-3?token=s3cret"),
        "--lldp-seconds",
        "0",
        "--root",
        root.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("s3cret"),
        "the token was printed: {stderr}"
    );
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 1);
    let head = &reqs[0].head;
    assert!(
        head.starts_with("POST /inspect/node-3?token=s3cret HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(
        head.contains("\r\nContent-Type: application/json\r\n"),
        "{head}"
    );
    assert!(head.contains(&format!("\r\nHost: {}\r\n", reqs_host(head))));

    let nvme_model = "Dell Ent NVMe v2 AGN RI U.2 1.92TB";
    let want = Inventory {
        cpu: Cpu {
            model: "Intel(R) Xeon(R) Silver 4214 CPU @ 2.20GHz".into(),
            count: 4,
            arch: std::env::consts::ARCH.into(),
        },
        // 16 online blocks of 1 GiB (one offline), not MemTotal's 15920.
        memory_mib: 16384,
        disks: vec![
            Disk {
                name: "/dev/sda".into(),
                by_path: "/dev/disk/by-path/pci-0000:00:17.0-scsi-0:0:0:0".into(),
                by_id: "/dev/disk/by-id/wwn-0x600508b1001c7e1f2a3b4c5d6e7f8091".into(),
                size_bytes: 7_814_037_168 * 512,
                model: "ST4000NM0025".into(),
                vendor: "SEAGATE".into(),
                serial: "ZC1A2B3C".into(),
                wwn: "0x600508b1001c7e1f".into(),
                wwn_with_extension: "0x600508b1001c7e1f2a3b4c5d6e7f8091".into(),
                wwn_vendor_extension: "0x2a3b4c5d6e7f8091".into(),
                rotational: true,
                hctl: "0:0:0:0".into(),
            },
            Disk {
                name: "/dev/nvme0n1".into(),
                by_path: "/dev/disk/by-path/pci-0000:3b:00.0-nvme-1".into(),
                // No wwn- link: the first in sorted order.
                by_id: format!(
                    "/dev/disk/by-id/nvme-{}_S6CANA0T123456",
                    nvme_model.replace(' ', "_")
                ),
                size_bytes: 3_750_748_848 * 512,
                model: nvme_model.into(),
                vendor: "".into(),
                serial: "S6CANA0T123456".into(),
                wwn: "0x36344630528061510025384500000001".into(),
                wwn_with_extension: "0x36344630528061510025384500000001".into(),
                wwn_vendor_extension: "".into(),
                rotational: false,
                hctl: "".into(),
            },
        ],
        nics: vec![
            Nic {
                name: "eno1".into(),
                mac: "b4:96:91:aa:00:01".into(),
                speed_mbps: Some(25000),
                link: true,
                lldp: None,
            },
            Nic {
                name: "eno2".into(),
                mac: "b4:96:91:aa:00:02".into(),
                speed_mbps: None,
                link: false,
                lldp: None,
            },
        ],
        firmware: "uefi".into(),
        system: System {
            vendor: "Dell Inc.".into(),
            product: "PowerEdge R640".into(),
            serial: "8XJ2K93".into(),
            uuid: "4c4c4544-0058-4a10-8032-b8c04f4b3933".into(),
        },
    };
    assert_eq!(inventory_of(&reqs[0]), want);
}

fn reqs_host(head: &str) -> String {
    head.lines()
        .find_map(|l| l.strip_prefix("Host: "))
        .unwrap()
        .to_string()
}

#[test]
fn inspect_reports_a_bios_vm_without_udev_or_memory_blocks() {
    let srv = Server::start(&[("HTTP/1.1 200 OK", "stored")]);
    let root = data("vm-bios");
    let out = agent(&[
        "inspect",
        "--root",
        root.to_str().unwrap(),
        "--lldp-seconds=0",
        "--post",
        &srv.url("/i"),
    ]);
    assert!(out.status.success());
    let reqs = srv.requests();
    let want = Inventory {
        cpu: Cpu {
            model: "QEMU Virtual CPU version 2.5+".into(),
            count: 2,
            arch: std::env::consts::ARCH.into(),
        },
        memory_mib: 4_026_532 / 1024,
        disks: vec![Disk {
            name: "/dev/vda".into(),
            size_bytes: 20 << 30,
            serial: "lab-disk-1".into(),
            // virtio's PCI vendor id, as lsblk and Ironic report it.
            vendor: "0x1af4".into(),
            rotational: true,
            ..Disk::default()
        }],
        nics: vec![Nic {
            name: "ens3".into(),
            mac: "52:54:00:12:34:56".into(),
            speed_mbps: None,
            link: true,
            lldp: None,
        }],
        firmware: "bios".into(),
        system: System {
            vendor: "QEMU".into(),
            product: "Standard PC (Q35 + ICH9, 2009)".into(),
            ..System::default()
        },
    };
    assert_eq!(inventory_of(&reqs[0]), want);
    // Absent values are present and empty (or null), not left out: the
    // shape does not depend on the machine.
    let v: serde_json::Value = serde_json::from_slice(&reqs[0].body).unwrap();
    assert_eq!(v["disks"][0]["byPath"], "");
    assert_eq!(v["nics"][0]["speedMbps"], serde_json::Value::Null);
    assert_eq!(v["system"]["serial"], "");
}

#[test]
fn inspect_tries_again_after_a_5xx() {
    let srv = Server::start(&[
        ("HTTP/1.1 503 Service Unavailable", "starting"),
        ("HTTP/1.1 200 OK", ""),
    ]);
    let root = data("vm-bios");
    let out = agent(&[
        "inspect",
        "--post",
        &srv.url("/i?token=t0k"),
        "--lldp-seconds",
        "0",
        "--root",
        root.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("HTTP/1.1 503 Service Unavailable; trying again in 2 s (1/5)"),
        "{stderr}"
    );
    assert!(!stderr.contains("t0k"), "{stderr}");
    let reqs = srv.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body, reqs[1].body);
}

#[test]
fn inspect_stops_at_a_4xx_and_prints_its_status_and_body() {
    let srv = Server::start(&[
        ("HTTP/1.1 403 Forbidden", "token already used\n"),
        ("HTTP/1.1 200 OK", ""),
    ]);
    let root = data("vm-bios");
    let out = agent(&[
        "inspect",
        "--post",
        &srv.url("/i?token=t0k"),
        "--lldp-seconds",
        "0",
        "--root",
        root.to_str().unwrap(),
        "--reboot",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "bootd-agent: POST http://{}/i?… refused: HTTP/1.1 403 Forbidden\ntoken already used",
            srv.addr
        )),
        "{stderr}"
    );
    assert_eq!(srv.requests().len(), 1, "a 4xx is not tried again");
}

#[test]
fn post_gives_up_after_its_retries_when_nothing_listens() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = agent::http::Url::parse(&format!("http://127.0.0.1:{port}/x?token=t")).unwrap();
    let retry = agent::http::Retry {
        retries: 2,
        delay: Duration::from_millis(10),
    };
    match agent::http::post_json(&url, b"{}", retry) {
        Err(e @ agent::Error::GaveUp { attempts: 3, .. }) => {
            let m = e.to_string();
            assert!(m.contains("gave up after 3 attempts"), "{m}");
            assert!(!m.contains("token=t"), "{m}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn usage_errors_exit_2() {
    let out = agent(&["inspect", "--post", "https://bootd/i"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only plain http"));
    let out = agent(&["--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("usage: bootd-agent inspect"));
}

/// A fixture copied to a scratch directory (symlinks kept), with a
/// /proc/sysrq-trigger file to catch the reboot or power-off.
fn scratch_copy(name: &str) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(data(name))
        .arg(t.path().join("root"))
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(t.path().join("root/proc/sysrq-trigger"), "").unwrap();
    t
}

#[test]
fn inspect_reboots_through_sysrq_after_reporting() {
    let t = scratch_copy("vm-bios");
    let root = t.path().join("root");
    let srv = Server::start(&[("HTTP/1.1 200 OK", "")]);
    let out = agent(&[
        "inspect",
        "--post",
        &srv.url("/i"),
        "--reboot",
        "--lldp-seconds",
        "0",
        "--root",
        root.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    assert_eq!(srv.requests().len(), 1);
    assert_eq!(
        std::fs::read(root.join("proc/sysrq-trigger")).unwrap(),
        b"b"
    );
}

// ---- wipe ------------------------------------------------------------------

/// A test disk: kernel name, bytes, partitions as (start, sectors).
type TestDisk<'a> = (&'a str, u64, &'a [(u64, u64)]);

/// A root with these disks: the sysfs entries and a regular file as
/// /dev/<name>, filled with 0xa5.
fn disk_root(disks: &[TestDisk]) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let r = t.path();
    std::fs::create_dir_all(r.join("dev")).unwrap();
    for (name, size, parts) in disks {
        let b = r.join("sys/block").join(name);
        std::fs::create_dir_all(b.join("queue")).unwrap();
        std::fs::write(b.join("size"), format!("{}\n", size / 512)).unwrap();
        std::fs::write(b.join("removable"), "0\n").unwrap();
        std::fs::write(b.join("ro"), "0\n").unwrap();
        std::fs::write(b.join("serial"), format!("serial-{name}\n")).unwrap();
        for (i, (start, sectors)) in parts.iter().enumerate() {
            let p = b.join(format!("{name}{}", i + 1));
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("start"), format!("{start}\n")).unwrap();
            std::fs::write(p.join("size"), format!("{sectors}\n")).unwrap();
        }
        std::fs::write(r.join("dev").join(name), vec![0xa5u8; *size as usize]).unwrap();
    }
    std::fs::create_dir_all(r.join("proc")).unwrap();
    std::fs::write(r.join("proc/sysrq-trigger"), "").unwrap();
    t
}

fn tool(name: &str, version_arg: &str) -> bool {
    let ok = Command::new(name)
        .arg(version_arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !ok {
        eprintln!("SKIPPED: {name} is not installed");
    }
    ok
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every signature blkid and wipefs find on the image: the whole image
/// (partition tables, including GPT's backup at the end) and each of
/// `offsets` (a partition's file system).
fn signatures(img: &Path, offsets: &[u64]) -> Vec<String> {
    let mut found = Vec::new();
    let out = Command::new("wipefs")
        .args(["--no-act", "--noheadings", "--output", "OFFSET,TYPE"])
        .arg(img)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        if !l.trim().is_empty() {
            let words: Vec<&str> = l.split_whitespace().collect();
            found.push(format!("wipefs: {}", words.join(" ")));
        }
    }
    for off in std::iter::once(0).chain(offsets.iter().copied()) {
        let out = Command::new("blkid")
            .args(["-p", "-o", "export", "-O", &off.to_string()])
            .arg(img)
            .output()
            .unwrap();
        match out.status.code() {
            Some(0) => {
                for l in String::from_utf8_lossy(&out.stdout).lines() {
                    if l.starts_with("TYPE=") || l.starts_with("PTTYPE=") {
                        found.push(format!("blkid at {off}: {l}"));
                    }
                }
            }
            // Nothing found.
            Some(2) => {}
            _ => panic!("blkid: {}", String::from_utf8_lossy(&out.stderr)),
        }
    }
    found
}

#[test]
fn wipe_leaves_no_signature_on_a_gpt_image() {
    if !(tool("sgdisk", "--version")
        && tool("mkfs.ext4", "-V")
        && tool("blkid", "--version")
        && tool("wipefs", "--version"))
    {
        return;
    }
    // 64 MiB: partition 1 at 1 MiB and 2 at 17 MiB, 16 MiB each, ext4 on both.
    let (p1, p2) = ((2048u64, 32768u64), (34816u64, 32768u64));
    let t = disk_root(&[("vda", 64 * MIB, &[p1, p2])]);
    let img = t.path().join("dev/vda");
    let img_s = img.to_str().unwrap();
    run(
        "sgdisk",
        &[
            "-n",
            &format!("1:{}:{}", p1.0, p1.0 + p1.1 - 1),
            "-n",
            &format!("2:{}:{}", p2.0, p2.0 + p2.1 - 1),
            img_s,
        ],
    );
    let offsets = [p1.0 * 512, p2.0 * 512];
    for off in offsets {
        run(
            "mkfs.ext4",
            &["-q", "-F", "-E", &format!("offset={off}"), img_s, "16M"],
        );
    }
    let before = signatures(&img, &offsets);
    // What the check sees on a disk nobody wiped: without these the test
    // would pass with the wipe skipped.
    for want in [
        "wipefs: 0x200 gpt",
        "wipefs: 0x3fffe00 gpt",
        "wipefs: 0x1fe PMBR",
        "blkid at 0: PTTYPE=gpt",
        "blkid at 1048576: TYPE=ext4",
        "blkid at 17825792: TYPE=ext4",
    ] {
        assert!(before.iter().any(|s| s == want), "{want} not in {before:?}");
    }

    // Control: every range but the disk's last MiB leaves GPT's backup
    // header, which wipefs still finds.
    let control = t.path().join("control.img");
    std::fs::copy(&img, &control).unwrap();
    let parts = [
        agent::probe::Partition {
            start: p1.0,
            sectors: p1.1,
        },
        agent::probe::Partition {
            start: p2.0,
            sectors: p2.1,
        },
    ];
    let plan = agent::wipe::plan(64 * MIB, &parts);
    agent::wipe::wipe(&control, &plan[..plan.len() - 1]).unwrap();
    assert_eq!(signatures(&control, &offsets), ["wipefs: 0x3fffe00 gpt"]);

    let srv = Server::start(&[("HTTP/1.1 200 OK", "")]);
    let out = agent(&[
        "wipe",
        "--post",
        &srv.url("/wiped?token=x"),
        "--root",
        t.path().to_str().unwrap(),
        "--poweroff",
    ]);
    assert!(out.status.success());
    assert_eq!(signatures(&img, &offsets), Vec::<String>::new());
    let reqs = srv.requests();
    let report: serde_json::Value = serde_json::from_slice(&reqs[0].body).unwrap();
    assert_eq!(
        report,
        serde_json::json!({"disks": [{
            "name": "/dev/vda", "byPath": "", "byId": "",
            "serial": "serial-vda", "partitions": 2
        }]})
    );
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 64 * MIB);
    assert_eq!(
        std::fs::read(t.path().join("proc/sysrq-trigger")).unwrap(),
        b"o"
    );
}

fn zeroed(b: &[u8], from: u64, len: u64) -> bool {
    b[from as usize..(from + len) as usize]
        .iter()
        .all(|&x| x == 0)
}

#[test]
fn wipe_only_the_disks_named() {
    let t = disk_root(&[
        ("vda", 8 * MIB, &[(2048, 4096)]),
        ("vdb", 8 * MIB, &[(2048, 4096), (6144, 8192)]),
    ]);
    let srv = Server::start(&[("HTTP/1.1 200 OK", "")]);
    let out = agent(&[
        "wipe",
        "--disk",
        "/dev/vdb",
        "--post",
        &srv.url("/w"),
        "--root",
        t.path().to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let vda = std::fs::read(t.path().join("dev/vda")).unwrap();
    assert!(vda.iter().all(|&x| x == 0xa5), "vda was not named");
    let vdb = std::fs::read(t.path().join("dev/vdb")).unwrap();
    // Disk head and tail; partition 1 (1..3 MiB) whole; partition 2's
    // (3..7 MiB) head and tail; between them, untouched.
    assert!(zeroed(&vdb, 0, 4 * MIB));
    assert!(vdb[(4 * MIB) as usize..(6 * MIB) as usize]
        .iter()
        .all(|&x| x == 0xa5));
    assert!(zeroed(&vdb, 6 * MIB, 2 * MIB));
    let report: serde_json::Value = serde_json::from_slice(&srv.requests()[0].body).unwrap();
    assert_eq!(report["disks"].as_array().unwrap().len(), 1);
    assert_eq!(report["disks"][0]["name"], "/dev/vdb");
    assert_eq!(report["disks"][0]["partitions"], 2);
    assert_eq!(
        std::fs::read(t.path().join("proc/sysrq-trigger")).unwrap(),
        b""
    );
}

#[test]
fn wipe_refuses_a_disk_it_does_not_list_and_reports_nothing() {
    let t = disk_root(&[("vda", 4 * MIB, &[])]);
    let srv = Server::start(&[("HTTP/1.1 200 OK", "")]);
    let out = agent(&[
        "wipe",
        "--disk",
        "sdz",
        "--post",
        &srv.url("/w"),
        "--root",
        t.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--disk sdz: not a disk the inspection lists (it lists: vda)"));
    assert!(std::fs::read(t.path().join("dev/vda"))
        .unwrap()
        .iter()
        .all(|&x| x == 0xa5));
    assert_eq!(srv.requests().len(), 0);
}

#[test]
fn a_disk_that_cannot_be_wiped_is_an_error_and_no_report() {
    let t = disk_root(&[("vda", 4 * MIB, &[]), ("vdb", 4 * MIB, &[])]);
    std::fs::remove_file(t.path().join("dev/vda")).unwrap();
    let srv = Server::start(&[("HTTP/1.1 200 OK", "")]);
    let out = agent(&[
        "wipe",
        "--post",
        &srv.url("/w"),
        "--root",
        t.path().to_str().unwrap(),
        "--poweroff",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("wiping failed, nothing reported"),
        "{stderr}"
    );
    assert!(stderr.contains("dev/vda"), "{stderr}");
    // The other disk was still wiped, and the machine stays on.
    let vdb = std::fs::read(t.path().join("dev/vdb")).unwrap();
    assert!(zeroed(&vdb, 0, MIB) && zeroed(&vdb, 3 * MIB, MIB));
    assert!(vdb[MIB as usize..(3 * MIB) as usize]
        .iter()
        .all(|&x| x == 0xa5));
    assert_eq!(srv.requests().len(), 0);
    assert_eq!(
        std::fs::read(t.path().join("proc/sysrq-trigger")).unwrap(),
        b""
    );
}

// ---- LLDP over a veth pair -------------------------------------------------

fn tlv(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut v = ((kind << 9) | value.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(value);
    v
}

fn lldp_frame(src: [u8; 6], chassis: &[u8], port: &[u8], name: &[u8], descr: &[u8]) -> Vec<u8> {
    let mut f = vec![0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e];
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x88, 0xcc]);
    for t in [
        tlv(1, chassis),
        tlv(2, port),
        tlv(3, &[0, 120]),
        tlv(4, descr),
        tlv(5, name),
        tlv(0, &[]),
    ] {
        f.extend(t);
    }
    f
}

const SENDER: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
frames = [bytes.fromhex(l) for l in open(sys.argv[2]) if l.strip()]
end = time.time() + 30
while time.time() < end:
    for f in frames:
        s.send(f)
    time.sleep(0.2)
"#;

const RECEIVER: &str = r#"
import http.server, os, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        open(sys.argv[2], "wb").write(body)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
srv.timeout = 60
open(sys.argv[1] + ".tmp", "w").write(str(srv.server_port))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
srv.handle_request()
"#;

const SCRIPT: &str = r#"
set -e
ip link set lo up
ip link add lldp0 type veth peer name sw0
ip link set lldp0 address 02:00:00:00:00:01
ip link set lldp0 up
ip link set sw0 up
python3 "$DIR/receiver.py" "$DIR/port" "$DIR/body.json" & R=$!
python3 "$DIR/sender.py" sw0 "$DIR/frames.hex" & S=$!
i=0
while [ ! -s "$DIR/port" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
rc=0
"$AGENT" inspect --root "$DIR/root" --lldp-seconds 20 \
    --post "http://127.0.0.1:$(cat "$DIR/port")/inspect?token=t" || rc=$?
kill $S || true
wait $R || true
exit $rc
"#;

#[test]
fn lldp_from_a_veth_in_a_private_network_namespace() {
    let can = Command::new("unshare")
        .args([
            "--net", "ip", "link", "add", "chk0", "type", "veth", "peer", "name", "chk1",
        ])
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !can || !tool("python3", "--version") {
        eprintln!("SKIPPED: needs root, unshare --net, ip and python3");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("proc")).unwrap();
    std::fs::write(
        root.join("proc/cpuinfo"),
        "processor\t: 0\nmodel name\t: test\n",
    )
    .unwrap();
    std::fs::write(root.join("proc/meminfo"), "MemTotal: 1048576 kB\n").unwrap();
    // lldp0: the veth in the namespace, cabled to "the switch" (sw0);
    // lldp1: no link, so nothing to wait for.
    for (nic, mac, carrier) in [
        ("lldp0", "02:00:00:00:00:01", "1"),
        ("lldp1", "02:00:00:00:00:02", "0"),
    ] {
        let n = root.join("sys/class/net").join(nic);
        std::fs::create_dir_all(n.join("device")).unwrap();
        std::fs::write(n.join("address"), format!("{mac}\n")).unwrap();
        std::fs::write(n.join("carrier"), format!("{carrier}\n")).unwrap();
    }
    // The machine's own frame (its MAC as source) first, then the switch's.
    let own = lldp_frame([2, 0, 0, 0, 0, 1], b"\x07me", b"\x05lldp0", b"me", b"");
    let switch = lldp_frame(
        [0x00, 0x1c, 0x73, 0xaa, 0xbb, 0xcd],
        &[4, 0x00, 0x1c, 0x73, 0xaa, 0xbb, 0xcc],
        b"\x05xe-0/0/12",
        b"tor-12a",
        b"node3 eno1",
    );
    let hex = |f: &[u8]| f.iter().map(|b| format!("{b:02x}")).collect::<String>();
    std::fs::write(
        dir.join("frames.hex"),
        format!("{}\n{}\n", hex(&own), hex(&switch)),
    )
    .unwrap();
    std::fs::write(dir.join("sender.py"), SENDER).unwrap();
    std::fs::write(dir.join("receiver.py"), RECEIVER).unwrap();
    std::fs::write(dir.join("run.sh"), SCRIPT).unwrap();

    let started = Instant::now();
    let out = Command::new("timeout")
        .args(["90", "unshare", "--net", "sh"])
        .arg(dir.join("run.sh"))
        .env("DIR", dir)
        .env("AGENT", BIN)
        .output()
        .unwrap();
    let took = started.elapsed();
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{:?}", out.status);
    // Every NIC with link had its frame: no waiting out the 20 s.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let inv: Inventory =
        serde_json::from_slice(&std::fs::read(dir.join("body.json")).unwrap()).unwrap();
    assert_eq!(
        inv.nics[0].lldp,
        Some(Lldp {
            chassis_id: "00:1c:73:aa:bb:cc".into(),
            port_id: "xe-0/0/12".into(),
            system_name: "tor-12a".into(),
            port_description: "node3 eno1".into(),
        })
    );
    assert_eq!(
        (inv.nics[1].name.as_str(), &inv.nics[1].lldp),
        ("lldp1", &None)
    );
}
