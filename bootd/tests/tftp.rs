//! bootd's TFTP server on loopback: real clients (curl, atftp, tftp-hpa)
//! and a raw UDP client for what they cannot show (escapes, malformed
//! requests, busy, abort and re-request from the same port, duplicate ACKs,
//! windows, retransmission).

use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tftp::packet::{self, Mode, Packet, Request};
use tftp::{Outcome, Resolved, Resolver, TftpConfig, TftpMetrics};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use testkit::logs::logs;

fn log_text() -> String {
    String::from_utf8_lossy(&logs().lock().unwrap()).into_owned()
}

/// Deterministic bytes that differ from block to block, so a block sent
/// twice or out of order changes the checksum.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut x = seed | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn sha(b: &[u8]) -> String {
    format!("{:x}", Sha256::digest(b))
}

const MAC_CFG: &str = "grub.cfg-01-52-54-00-77-00-10";
const SECRET: &str = "token=SECRET-do-not-log";

struct Server {
    addr: SocketAddr,
    dir: tempfile::TempDir,
    metrics: Arc<TftpMetrics>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(config: TftpConfig) -> Server {
        Server::start_on("127.0.0.1:0", config).await
    }

    /// A root with the files the tests fetch, a secret next to it, and
    /// symlinks pointing out. The resolver serves one generated per-node
    /// file and the root for everything else.
    async fn start_on(bind: &str, config: TftpConfig) -> Server {
        logs();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("grub/x86_64-efi")).unwrap();
        std::fs::write(root.join("ipxe.efi"), pattern(1_000_003, 1)).unwrap();
        std::fs::write(root.join("exact.bin"), pattern(4 * 512, 2)).unwrap();
        std::fs::write(root.join("empty"), b"").unwrap();
        std::fs::write(root.join("small.txt"), b"hello from the tftp root\n").unwrap();
        std::fs::write(root.join("grub/x86_64-efi/command.lst"), b"linux: linux\n").unwrap();
        std::fs::write(dir.path().join("secret.txt"), b"outside the root\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("abs-link")).unwrap();
        std::os::unix::fs::symlink("../secret.txt", root.join("rel-link")).unwrap();
        std::os::unix::fs::symlink("ipxe.efi", root.join("inside-link")).unwrap();
        let files = tftp::root_resolver(root, bootd::files::open_beneath);
        let resolver: Resolver = Arc::new(move |name: &str, peer: SocketAddr| {
            if name == MAC_CFG {
                Resolved::Bytes(format!("set default=0\n# for {}\n# {SECRET}\n", peer.ip()).into())
            } else {
                files(name, peer)
            }
        });
        let socket = UdpSocket::bind(bind).await.unwrap();
        let addr = socket.local_addr().unwrap();
        let metrics = Arc::new(TftpMetrics::default());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(tftp::run(
            config,
            socket,
            resolver,
            Arc::clone(&metrics),
            shutdown.clone(),
        ));
        Server {
            addr,
            dir,
            metrics,
            shutdown,
            task,
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn file(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.root().join(name)).unwrap()
    }

    fn port(&self) -> String {
        self.addr.port().to_string()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("run did not stop")
            .unwrap()
            .unwrap();
        assert_eq!(self.metrics.transfers_active.get(), 0);
    }
}

fn quick() -> TftpConfig {
    TftpConfig {
        default_timeout: Duration::from_millis(300),
        retries: 3,
        ..TftpConfig::default()
    }
}

/// A hand-driven client on one UDP socket.
struct Raw {
    sock: UdpSocket,
    server: SocketAddr,
}

impl Raw {
    async fn new(server: SocketAddr) -> Raw {
        let local = if server.is_ipv4() {
            "127.0.0.1:0"
        } else {
            "[::1]:0"
        };
        Raw {
            sock: UdpSocket::bind(local).await.unwrap(),
            server,
        }
    }

    async fn send_raw(&self, bytes: &[u8]) {
        self.sock.send_to(bytes, self.server).await.unwrap();
    }

    async fn rrq(&self, name: &str, options: &[(&str, &str)]) {
        let mut out = Vec::new();
        Packet::Rrq(Request {
            filename: name,
            mode: Mode::Octet,
            options: options.to_vec(),
        })
        .encode(&mut out);
        self.send_raw(&out).await;
    }

    async fn send_to(&self, to: SocketAddr, p: Packet<'_>) {
        let mut out = Vec::new();
        p.encode(&mut out);
        self.sock.send_to(&out, to).await.unwrap();
    }

    async fn recv_within(&self, d: Duration) -> Option<(Vec<u8>, SocketAddr)> {
        let mut buf = vec![0u8; 70_000];
        let (n, from) = tokio::time::timeout(d, self.sock.recv_from(&mut buf))
            .await
            .ok()?
            .unwrap();
        buf.truncate(n);
        Some((buf, from))
    }

    async fn recv(&self) -> (Vec<u8>, SocketAddr) {
        self.recv_within(Duration::from_secs(3))
            .await
            .expect("no answer from the server")
    }

    /// The next packet must be an ERROR; returns its code and text.
    async fn expect_error(&self) -> (u16, String, SocketAddr) {
        let (b, from) = self.recv().await;
        match packet::parse(&b).unwrap() {
            Packet::Error { code, message } => (code, message.into_owned(), from),
            other => panic!("expected ERROR, got {other:?}"),
        }
    }

    async fn expect_data(&self) -> (u16, Vec<u8>, SocketAddr) {
        self.expect_data_within(Duration::from_secs(3)).await
    }

    async fn expect_data_within(&self, d: Duration) -> (u16, Vec<u8>, SocketAddr) {
        let (b, from) = self
            .recv_within(d)
            .await
            .expect("no DATA from the server in time");
        match packet::parse(&b).unwrap() {
            Packet::Data { block, data } => (block, data.to_vec(), from),
            other => panic!("expected DATA, got {other:?}"),
        }
    }

    /// The client gives its transfer on `tid` up (ERROR 0), as a PXE ROM
    /// that stops.
    async fn give_up(&self, tid: SocketAddr) {
        self.send_to(
            tid,
            Packet::Error {
                code: 0,
                message: "bye".into(),
            },
        )
        .await;
    }

    async fn expect_oack(&self) -> (Vec<(String, String)>, SocketAddr) {
        let (b, from) = self.recv().await;
        match packet::parse(&b).unwrap() {
            Packet::Oack { options } => (
                options
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                from,
            ),
            other => panic!("expected OACK, got {other:?}"),
        }
    }

    /// Lock-step download of the rest of a file after DATA `first` arrived.
    async fn finish(
        &self,
        mut got: Vec<u8>,
        first: (u16, Vec<u8>, SocketAddr),
        blksize: usize,
    ) -> Vec<u8> {
        let (mut block, data, tid) = first;
        let mut last = data.len() < blksize;
        got.extend_from_slice(&data);
        self.send_to(tid, Packet::Ack { block }).await;
        while !last {
            let (b, data, from) = self.expect_data().await;
            assert_eq!(from, tid);
            if b == block.wrapping_add(1) {
                block = b;
                last = data.len() < blksize;
                got.extend_from_slice(&data);
            }
            self.send_to(tid, Packet::Ack { block }).await;
        }
        got
    }
}

/// Runs `cmd` in `cwd` (at most 300 s) and asserts it succeeded, saying
/// `what` and its output if not.
async fn run_ok(cmd: &str, args: &[&str], cwd: &Path, what: &str) -> Output {
    let out = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::process::Command::new(cmd)
            .args(args)
            .current_dir(cwd)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{cmd} {args:?} timed out"))
    .unwrap_or_else(|e| panic!("{cmd} not runnable ({e}): tests/lab/deps.sh installs it"));
    assert!(
        out.status.success(),
        "{what}: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// tftp-hpa fetches `name` from `s` into `cwd/local`, lock-step.
async fn hpa_get(s: &Server, name: &str, cwd: &Path, local: &str, what: &str) {
    let port = s.port();
    let args = ["-m", "binary", "127.0.0.1", &port, "-c", "get", name, local];
    run_ok("tftp", &args, cwd, what).await;
}

/// The file a client wrote at `got` has the checksum `want` (of the served file).
fn assert_same_file(got: &Path, want: &str, what: &str) {
    assert_eq!(sha(&std::fs::read(got).unwrap()), want, "{what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_downloads_with_and_without_blksize() {
    let s = Server::start(TftpConfig::default()).await;
    let out_dir = tempfile::tempdir().unwrap();
    // Not "empty": curl refuses an OACK with tsize 0 (CURLE_TFTP_ILLEGAL),
    // from any server; tftp-hpa fetches it below.
    for (name, extra) in [
        ("ipxe.efi", vec!["--tftp-blksize", "1468"]),
        ("ipxe.efi", vec![]),
        ("exact.bin", vec![]),
    ] {
        let dest = out_dir.path().join("out");
        let url = format!("tftp://127.0.0.1:{}/{name}", s.port());
        let mut args = vec!["-sS", "--max-time", "60", "-o", dest.to_str().unwrap()];
        args.extend(extra.iter().copied());
        args.push(&url);
        run_ok(
            "curl",
            &args,
            out_dir.path(),
            &format!("curl {name} {extra:?}"),
        )
        .await;
        assert_same_file(&dest, &sha(&s.file(name)), &format!("{name} {extra:?}"));
    }
    // A blksize above the server's limit is granted at the limit.
    let dest = out_dir.path().join("big-blocks");
    let url = format!("tftp://127.0.0.1:{}/ipxe.efi", s.port());
    run_ok(
        "curl",
        &[
            "-sS",
            "--tftp-blksize",
            "8192",
            "-o",
            dest.to_str().unwrap(),
            &url,
        ],
        out_dir.path(),
        "curl blksize 8192",
    )
    .await;
    assert_same_file(&dest, &sha(&s.file("ipxe.efi")), "ipxe.efi");
    assert_eq!(s.metrics.requests_with(Outcome::Ok), 4);
    // One info line per completed transfer, with its numbers.
    let logs = log_text();
    assert!(
        logs.contains("tftp transfer complete bytes=1000003 blksize=1468 windowsize=1"),
        "{logs}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_file_with_and_without_leading_slash() {
    let s = Server::start(TftpConfig::default()).await;
    let out_dir = tempfile::tempdir().unwrap();
    let want = format!("set default=0\n# for 127.0.0.1\n# {SECRET}\n");
    // curl drops the URL's first slash: `//name` asks for `/name`.
    for url in [
        format!("tftp://127.0.0.1:{}/{MAC_CFG}", s.port()),
        format!("tftp://127.0.0.1:{}//{MAC_CFG}", s.port()),
    ] {
        let out = run_ok("curl", &["-sS", "-o", "-", &url], out_dir.path(), &url).await;
        assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    }
    let out = run_ok(
        "curl",
        &[
            "-sS",
            "-o",
            "-",
            &format!("tftp://127.0.0.1:{}//grub/x86_64-efi/command.lst", s.port()),
        ],
        out_dir.path(),
        "leading slash",
    )
    .await;
    assert_eq!(out.stdout, b"linux: linux\n");
    assert!(
        !log_text().contains("SECRET"),
        "generated content reached the log"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atftp_windowsize_16_and_blksize_1468() {
    let s = Server::start(TftpConfig::default()).await;
    let out_dir = tempfile::tempdir().unwrap();
    let dest = out_dir.path().join("ipxe.efi");
    let out = run_ok(
        "atftp",
        &[
            "--trace",
            "--option",
            "windowsize 16",
            "--option",
            "blksize 1468",
            "--option",
            "tsize 0",
            "-g",
            "-r",
            "ipxe.efi",
            "-l",
            dest.to_str().unwrap(),
            "127.0.0.1",
            &s.port(),
        ],
        out_dir.path(),
        "atftp",
    )
    .await;
    assert_same_file(&dest, &sha(&s.file("ipxe.efi")), "ipxe.efi");
    let trace = testkit::process::output_text(&out);
    assert!(
        trace.contains("windowsize: 16") || trace.contains("windowsize 16"),
        "{trace}"
    );
    assert!(log_text().contains("bytes=1000003 blksize=1468 windowsize=16"));
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tftp_hpa_lock_step() {
    let s = Server::start(TftpConfig::default()).await;
    let out_dir = tempfile::tempdir().unwrap();
    for name in ["small.txt", "exact.bin", "empty", "ipxe.efi"] {
        hpa_get(&s, name, out_dir.path(), "out", name).await;
        assert_same_file(&out_dir.path().join("out"), &sha(&s.file(name)), name);
    }
    s.stop().await;
}

/// 40 MB at the default 512-byte blocks is 78 126 blocks: the block number
/// wraps from 65535 to 0, lock-step (tftp-hpa) and in windows (atftp).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_number_rollover() {
    let s = Server::start(TftpConfig::default()).await;
    std::fs::write(s.root().join("big.img"), pattern(40_000_000, 3)).unwrap();
    let want = sha(&s.file("big.img"));
    let out_dir = tempfile::tempdir().unwrap();
    hpa_get(&s, "big.img", out_dir.path(), "hpa", "tftp-hpa big.img").await;
    assert_same_file(&out_dir.path().join("hpa"), &want, "tftp-hpa big.img");
    run_ok(
        "atftp",
        &[
            "--option",
            "windowsize 16",
            "-g",
            "-r",
            "big.img",
            "-l",
            "atftp",
            "127.0.0.1",
            &s.port(),
        ],
        out_dir.path(),
        "atftp big.img",
    )
    .await;
    assert_same_file(&out_dir.path().join("atftp"), &want, "atftp big.img");
    run_ok(
        "curl",
        &[
            "-sS",
            "-o",
            "curl",
            &format!("tftp://127.0.0.1:{}/big.img", s.port()),
        ],
        out_dir.path(),
        "curl big.img",
    )
    .await;
    assert_same_file(&out_dir.path().join("curl"), &want, "curl big.img");
    s.stop().await;
}

#[tokio::test]
async fn oack_reports_tsize_and_clamped_options() {
    let s = Server::start(TftpConfig::default()).await;
    let c = Raw::new(s.addr).await;
    c.rrq(
        "ipxe.efi",
        &[
            ("TSIZE", "0"),
            ("blksize", "65464"),
            ("windowsize", "1000"),
            ("timeout", "3"),
            ("utimeout", "1000"),
        ],
    )
    .await;
    let (opts, tid) = c.expect_oack().await;
    let opts: Vec<(&str, &str)> = opts.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        opts,
        [
            ("blksize", "1468"),
            ("tsize", "1000003"),
            ("timeout", "3"),
            ("windowsize", "64")
        ]
    );
    assert_ne!(
        tid.port(),
        s.addr.port(),
        "a transfer answers from its own port"
    );
    assert_eq!(tid.ip(), s.addr.ip());
    c.send_to(tid, Packet::Ack { block: 0 }).await;
    let mut got = Vec::new();
    for want in 1..=64u16 {
        let (b, data, _) = c.expect_data().await;
        assert_eq!(b, want);
        got.extend_from_slice(&data);
    }
    assert_eq!(got[..], s.file("ipxe.efi")[..64 * 1468]);
    c.send_to(
        tid,
        Packet::Error {
            code: 0,
            message: "enough".into(),
        },
    )
    .await;
    s.stop().await;
}

#[tokio::test]
async fn no_options_no_oack_and_netascii_is_served_as_octet() {
    let s = Server::start(TftpConfig::default()).await;
    let c = Raw::new(s.addr).await;
    let mut out = Vec::new();
    Packet::Rrq(Request {
        filename: "small.txt",
        mode: Mode::Netascii,
        options: vec![],
    })
    .encode(&mut out);
    c.send_raw(&out).await;
    let first = c.expect_data().await;
    assert_eq!(first.0, 1);
    let got = c.finish(Vec::new(), first, 512).await;
    assert_eq!(got, s.file("small.txt"));
    s.stop().await;
}

#[tokio::test]
async fn path_escapes_are_refused() {
    let s = Server::start(quick()).await;
    let c = Raw::new(s.addr).await;
    // (name, expected ERROR code): 2 where the kernel saw an escape, 1 where
    // the name simply does not exist under the root.
    let cases = [
        ("../secret.txt", 2),
        ("/../secret.txt", 2),
        ("grub/../../secret.txt", 2),
        ("abs-link", 2),
        ("rel-link", 2),
        // Leading slashes are stripped: this is <root>/etc/passwd.
        ("/etc/passwd", 1),
        ("//etc/passwd", 1),
        ("grub", 1),
        ("missing.efi", 1),
    ];
    for (name, code) in cases {
        c.rrq(name, &[]).await;
        let (got, message, from) = c.expect_error().await;
        assert_eq!(got, code, "{name}: {message}");
        assert_ne!(from.port(), s.addr.port());
        assert!(
            c.recv_within(Duration::from_millis(50)).await.is_none(),
            "{name}: more than one answer"
        );
    }
    // A symlink that stays inside the root is fine.
    c.rrq("inside-link", &[]).await;
    let (b, data, tid) = c.expect_data().await;
    assert_eq!((b, &data[..]), (1, &s.file("ipxe.efi")[..512]));
    c.send_to(
        tid,
        Packet::Error {
            code: 0,
            message: "done".into(),
        },
    )
    .await;
    assert_eq!(s.metrics.requests_with(Outcome::Denied), 5);
    assert_eq!(s.metrics.requests_with(Outcome::NotFound), 4);
    s.stop().await;
}

#[tokio::test]
async fn wrq_is_refused() {
    let s = Server::start(TftpConfig::default()).await;
    let c = Raw::new(s.addr).await;
    let mut out = Vec::new();
    Packet::Wrq(Request {
        filename: "ipxe.efi",
        mode: Mode::Octet,
        options: vec![("tsize", "100")],
    })
    .encode(&mut out);
    c.send_raw(&out).await;
    let (code, message, _) = c.expect_error().await;
    assert_eq!(code, 2, "{message}");
    assert_eq!(s.metrics.requests_with(Outcome::WriteRefused), 1);
    assert_eq!(s.file("ipxe.efi"), pattern(1_000_003, 1));
    s.stop().await;
}

#[tokio::test]
async fn malformed_requests_are_answered_or_dropped_and_counted() {
    let s = Server::start(TftpConfig::default()).await;
    let c = Raw::new(s.addr).await;
    let mut oversize = b"\x00\x01".to_vec();
    oversize.extend(std::iter::repeat_n(b'a', 600));
    oversize.extend_from_slice(b"\x00octet\x00");
    let answered: [&[u8]; 7] = [
        b"\x00\x01ipxe.efi",                         // truncated: no NUL
        b"\x00\x01ipxe.efi\x00",                     // no mode
        b"\x00\x01\x00octet\x00",                    // empty filename
        b"\x00\x01ipxe\xff.efi\x00octet\x00",        // not UTF-8
        b"\x00\x01ipxe.efi\x00mail\x00",             // unsupported mode
        b"\x00\x01ipxe.efi\x00octet\x00blksize\x00", // option without value
        &oversize,
    ];
    for bytes in answered {
        c.send_raw(bytes).await;
        let (code, _, from) = c.expect_error().await;
        assert_eq!(code, 4, "{bytes:?}");
        assert_eq!(from, s.addr);
    }
    let dropped: [&[u8]; 4] = [
        b"\x01",
        b"\x00\x09ipxe.efi\x00octet\x00",
        b"\x00\x04\x00\x01",
        b"\x00\x05\x00\x00x\x00",
    ];
    for bytes in dropped {
        c.send_raw(bytes).await;
    }
    assert!(
        c.recv_within(Duration::from_millis(300)).await.is_none(),
        "garbage got an answer"
    );
    assert_eq!(s.metrics.malformed.get(), 11);
    assert_eq!(s.metrics.requests_with(Outcome::Malformed), 7);
    // The server still serves.
    c.rrq("small.txt", &[]).await;
    assert_eq!(c.expect_data().await.0, 1);
    s.stop().await;
}

/// A request beyond `max_transfers` waits its turn (its retransmissions
/// dropped) and is served when a slot frees; beyond `max_queued` waiting,
/// a request is dropped unanswered (a PXE ROM gives up on an error), and
/// its retransmission, once the queue has room, waits and is served.
#[tokio::test]
async fn beyond_max_transfers_a_request_waits_and_beyond_the_queue_it_is_dropped() {
    let s = Server::start(TftpConfig {
        max_transfers: 1,
        max_queued: 1,
        ..TftpConfig::default()
    })
    .await;
    let a = Raw::new(s.addr).await;
    a.rrq("ipxe.efi", &[]).await;
    let (b, _, tid) = a.expect_data().await;
    assert_eq!(b, 1);
    // B waits: no answer yet, and its retransmission is dropped.
    let b = Raw::new(s.addr).await;
    b.rrq("small.txt", &[]).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), b.recv())
            .await
            .is_err(),
        "a queued request was answered while the only slot was taken"
    );
    b.rrq("small.txt", &[]).await;
    // C finds the queue full: no answer at all (no "busy" error).
    let c = Raw::new(s.addr).await;
    c.rrq("small.txt", &[]).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(500), c.recv())
            .await
            .is_err(),
        "a request beyond the queue was answered"
    );
    assert_eq!(s.metrics.busy.get(), 1);
    assert_eq!(s.metrics.requests_with(Outcome::Busy), 1);
    assert_eq!(s.metrics.queued.get(), 1);
    assert_eq!(s.metrics.queued_again.get(), 1);
    assert_eq!(s.metrics.transfers_active.get(), 1);
    assert_eq!(s.metrics.waiting.get(), 1);
    // Once A gives up, B's waiting request is served, without asking again.
    a.give_up(tid).await;
    let (p, btid) = tokio::time::timeout(Duration::from_secs(3), b.recv())
        .await
        .expect("the queued request was not served once the slot was free");
    match packet::parse(&p).unwrap() {
        Packet::Data { block: 1, data } => assert_eq!(data, s.file("small.txt")),
        other => panic!("{other:?}"),
    }
    // C asks again (its timeout): the queue has room, so it waits its
    // turn and is served once B is done.
    c.rrq("small.txt", &[]).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), c.recv())
            .await
            .is_err(),
        "answered while B held the only slot"
    );
    assert_eq!(s.metrics.queued.get(), 2);
    b.send_to(btid, Packet::Ack { block: 1 }).await;
    let (p, _) = tokio::time::timeout(Duration::from_secs(3), c.recv())
        .await
        .expect("the retransmitted request was not served once there was room");
    match packet::parse(&p).unwrap() {
        Packet::Data { block: 1, data } => assert_eq!(data, s.file("small.txt")),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.metrics.busy.get(), 1);
    s.stop().await;
}

/// A waiting client that sent its request again and then fell silent
/// (it gave up) loses its turn to the next, which is served at once.
#[tokio::test]
async fn a_waiting_client_that_stopped_asking_loses_its_turn() {
    let s = Server::start(TftpConfig {
        max_transfers: 1,
        ..TftpConfig::default()
    })
    .await;
    let a = Raw::new(s.addr).await;
    a.rrq("ipxe.efi", &[]).await;
    let (_, _, tid) = a.expect_data().await;
    // B asks twice, 200 ms apart, then gives up.
    let b = Raw::new(s.addr).await;
    b.rrq("small.txt", &[]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    b.rrq("small.txt", &[]).await;
    // C waits behind B and keeps asking (every 500 ms) for 2.5 s.
    let c = Raw::new(s.addr).await;
    for _ in 0..5 {
        c.rrq("small.txt", &[]).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(s.metrics.waiting.get(), 2);
    assert_eq!(s.metrics.queued_again.get(), 5);
    // The slot frees: B, silent for 2.5 s, is skipped; C is served.
    a.give_up(tid).await;
    let (blk, data, _) = c.expect_data_within(Duration::from_secs(2)).await;
    assert_eq!((blk, data), (1, s.file("small.txt")));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), b.recv())
            .await
            .is_err(),
        "the client that gave up was served"
    );
    assert_eq!(s.metrics.queue_abandoned.get(), 1);
    assert_eq!(s.metrics.waiting.get(), 0);
    s.stop().await;
}

/// EDK2: RRQ with tsize only, OACK, ERROR, then RRQ again from the same
/// port. SLOF: always port 2001, a new RRQ after a failed transfer.
#[tokio::test]
async fn abort_and_rerequest_from_the_same_port() {
    let s = Server::start(quick()).await;
    let c = Raw::new(s.addr).await;
    c.rrq("ipxe.efi", &[("tsize", "0")]).await;
    let (opts, tid1) = c.expect_oack().await;
    assert_eq!(opts, [("tsize".to_string(), "1000003".to_string())]);
    c.send_to(
        tid1,
        Packet::Error {
            code: 8,
            message: "User aborted the transfer".into(),
        },
    )
    .await;
    c.rrq("ipxe.efi", &[("blksize", "1468")]).await;
    let (opts, tid2) = c.expect_oack().await;
    assert_eq!(opts, [("blksize".to_string(), "1468".to_string())]);
    c.send_to(tid2, Packet::Ack { block: 0 }).await;
    let first = c.expect_data().await;
    assert_eq!((first.0, first.2), (1, tid2));
    let got = c.finish(Vec::new(), first, 1468).await;
    assert_eq!(sha(&got), sha(&s.file("ipxe.efi")));

    // Same again without the ERROR (lost, or never sent): the new RRQ
    // replaces the old transfer, whose port falls silent.
    c.rrq("small.txt", &[("tsize", "0")]).await;
    let (_, old) = c.expect_oack().await;
    c.rrq("small.txt", &[]).await;
    let (b, data, new) = c.expect_data().await;
    assert_eq!((b, &data[..]), (1, &s.file("small.txt")[..]));
    assert_ne!(old, new);
    c.send_to(new, Packet::Ack { block: 1 }).await;
    // The old transfer would have resent its OACK after 300 ms.
    assert!(c.recv_within(Duration::from_millis(800)).await.is_none());
    // The first re-request may overtake the ERROR in the server: then it
    // replaces the transfer rather than finding it ended.
    let (aborted, replaced) = (
        s.metrics.requests_with(Outcome::ClientAbort),
        s.metrics.requests_with(Outcome::Replaced),
    );
    assert!(
        replaced >= 1 && aborted + replaced == 2,
        "aborted {aborted} replaced {replaced}"
    );
    assert_eq!(s.metrics.requests_with(Outcome::Ok), 2);
    s.stop().await;
}

/// RFC 1123 4.2.3.1: a duplicate ACK must not make the server send the
/// next block twice.
#[tokio::test]
async fn duplicate_acks_do_not_duplicate_data() {
    let s = Server::start(TftpConfig {
        default_timeout: Duration::from_secs(2),
        ..TftpConfig::default()
    })
    .await;
    let c = Raw::new(s.addr).await;
    c.rrq("exact.bin", &[]).await;
    let (b, _, tid) = c.expect_data().await;
    assert_eq!(b, 1);
    c.send_to(tid, Packet::Ack { block: 1 }).await;
    c.send_to(tid, Packet::Ack { block: 1 }).await;
    c.send_to(tid, Packet::Ack { block: 0 }).await;
    assert_eq!(c.expect_data().await.0, 2);
    assert!(
        c.recv_within(Duration::from_millis(500)).await.is_none(),
        "a duplicate ACK was answered"
    );
    s.stop().await;
}

#[tokio::test]
async fn unacknowledged_blocks_are_resent_then_the_transfer_gives_up() {
    let s = Server::start(TftpConfig {
        default_timeout: Duration::from_millis(150),
        retries: 2,
        ..TftpConfig::default()
    })
    .await;
    let c = Raw::new(s.addr).await;
    c.rrq("exact.bin", &[]).await;
    let sent = Instant::now();
    let (b1, d1, tid) = c.expect_data().await;
    let (b2, d2, _) = c.expect_data().await;
    assert_eq!((b1, b2), (1, 1));
    assert_eq!(d1, d2);
    assert!(sent.elapsed() >= Duration::from_millis(100));
    assert_eq!(c.expect_data().await.0, 1);
    // Retries spent: silence, then the transfer is gone.
    assert!(c.recv_within(Duration::from_millis(500)).await.is_none());
    assert_eq!(s.metrics.requests_with(Outcome::Timeout), 1);
    assert_eq!(s.metrics.retransmits.get(), 2);
    assert_eq!(s.metrics.transfers_active.get(), 0);
    c.send_to(tid, Packet::Ack { block: 1 }).await;
    s.stop().await;
}

/// RFC 7440: a window of blocks per ACK; an ACK inside the window resumes
/// right after the acknowledged block.
#[tokio::test]
async fn windows_resume_after_a_partial_ack() {
    let s = Server::start(TftpConfig {
        default_timeout: Duration::from_secs(2),
        ..TftpConfig::default()
    })
    .await;
    let c = Raw::new(s.addr).await;
    c.rrq("ipxe.efi", &[("windowsize", "4"), ("blksize", "512")])
        .await;
    let (opts, tid) = c.expect_oack().await;
    assert_eq!(
        opts,
        [
            ("blksize".to_string(), "512".to_string()),
            ("windowsize".to_string(), "4".to_string())
        ]
    );
    c.send_to(tid, Packet::Ack { block: 0 }).await;
    let mut blocks = Vec::new();
    for _ in 0..4 {
        blocks.push(c.expect_data().await.0);
    }
    assert_eq!(blocks, [1, 2, 3, 4]);
    // "Lost" 3 and 4: acknowledge 2.
    c.send_to(tid, Packet::Ack { block: 2 }).await;
    blocks.clear();
    for _ in 0..4 {
        blocks.push(c.expect_data().await.0);
    }
    assert_eq!(blocks, [3, 4, 5, 6]);
    c.send_to(tid, Packet::Ack { block: 6 }).await;
    let (b, data, _) = c.expect_data().await;
    assert_eq!((b, &data[..]), (7, &s.file("ipxe.efi")[6 * 512..7 * 512]));
    c.send_to(
        tid,
        Packet::Error {
            code: 0,
            message: "enough".into(),
        },
    )
    .await;
    s.stop().await;
}

/// Bound to the wildcard address, the server answers from the address each
/// request was sent to (127.0.0.2 here), refusals included.
#[tokio::test]
async fn wildcard_socket_answers_from_the_request_address() {
    let s = Server::start_on("0.0.0.0:0", TftpConfig::default()).await;
    let to: SocketAddr = format!("127.0.0.2:{}", s.port()).parse().unwrap();
    let c = Raw::new(to).await;
    c.rrq("small.txt", &[]).await;
    let (b, data, tid) = c.expect_data().await;
    assert_eq!((b, &data[..]), (1, &s.file("small.txt")[..]));
    assert_eq!(tid.ip(), to.ip());
    c.send_to(tid, Packet::Ack { block: 1 }).await;
    let mut wrq = Vec::new();
    Packet::Wrq(Request {
        filename: "x",
        mode: Mode::Octet,
        options: vec![],
    })
    .encode(&mut wrq);
    c.send_raw(&wrq).await;
    let (code, _, from) = c.expect_error().await;
    assert_eq!((code, from), (2, to));
    s.stop().await;
}

#[tokio::test]
async fn ipv6_dual_stack_wildcard() {
    let s = Server::start_on("[::]:0", TftpConfig::default()).await;
    for to in [
        format!("[::1]:{}", s.port()),
        format!("127.0.0.1:{}", s.port()),
    ] {
        let to: SocketAddr = to.parse().unwrap();
        let c = Raw::new(to).await;
        c.rrq("small.txt", &[("blksize", "1024")]).await;
        let (_, tid) = c.expect_oack().await;
        assert_eq!(tid.ip(), to.ip(), "{to}");
        c.send_to(tid, Packet::Ack { block: 0 }).await;
        let first = c.expect_data().await;
        let got = c.finish(Vec::new(), first, 1024).await;
        assert_eq!(got, s.file("small.txt"));
        c.send_raw(b"\x00\x01\x00octet\x00").await;
        let (code, _, from) = c.expect_error().await;
        assert_eq!((code, from), (4, to));
    }
    s.stop().await;
}

#[tokio::test]
async fn shutdown_stops_running_transfers() {
    let s = Server::start(TftpConfig::default()).await;
    let c = Raw::new(s.addr).await;
    c.rrq("ipxe.efi", &[]).await;
    c.expect_data().await;
    assert_eq!(s.metrics.transfers_active.get(), 1);
    let metrics = Arc::clone(&s.metrics);
    s.stop().await;
    assert_eq!(metrics.requests_with(Outcome::Shutdown), 1);
}

#[tokio::test]
async fn metrics_register_and_filenames_are_logged_escaped() {
    let s = Server::start(TftpConfig::default()).await;
    let c = Raw::new(s.addr).await;
    c.rrq("no\nsuch\u{1b}[31mfile", &[]).await;
    assert_eq!(c.expect_error().await.0, 1);
    // The ERROR is sent before the transfer's thread returns and its outcome
    // is counted: wait (bounded) for the count.
    for _ in 0..200 {
        if s.metrics.requests_with(Outcome::NotFound) == 1 && s.metrics.transfers_active.get() == 0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut registry = prometheus_client::registry::Registry::with_prefix("bootd");
    s.metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for want in [
        "bootd_tftp_requests_total{result=\"not_found\"} 1",
        "bootd_tftp_malformed_total 0",
        "bootd_tftp_busy_total 0",
        "bootd_tftp_bytes_sent_total 0",
        "bootd_tftp_transfers_active 0",
    ] {
        assert!(text.contains(want), "{want} missing in\n{text}");
    }
    let logs = log_text();
    assert!(logs.contains(r#"file="no\nsuch\u{1b}[31mfile""#), "{logs}");
    assert!(!logs.contains("no\nsuch"));
    s.stop().await;
}

/// The probe's TFTP findings: `timeout=255` held a slot for ~25 minutes,
/// one source could take every slot, and a request from a forged address
/// was answered with six 516-byte blocks. Now: a timeout over the cap is
/// not acknowledged, one source runs at most `max_per_source` transfers,
/// and an unacknowledged first block is sent three times at most.
#[tokio::test]
async fn one_source_cannot_hold_the_server_or_be_reflected_at() {
    let s = Server::start(TftpConfig {
        max_per_source: 2,
        max_transfers: 16,
        default_timeout: Duration::from_millis(200),
        retries: 5,
        ..TftpConfig::default()
    })
    .await;
    // timeout=255: not acknowledged (tsize is), so the 200 ms default holds.
    let c = Raw::new(s.addr).await;
    c.rrq("small.txt", &[("tsize", "0"), ("timeout", "255")])
        .await;
    let (opts, _) = c.expect_oack().await;
    assert!(opts.iter().all(|(k, _)| k != "timeout"), "{opts:?}");
    assert!(opts.iter().any(|(k, _)| k == "tsize"), "{opts:?}");
    // Never acknowledged: the OACK goes out three times at most.
    let mut oacks = 1;
    while c.recv_within(Duration::from_millis(800)).await.is_some() {
        oacks += 1;
    }
    assert!(
        oacks <= 3,
        "{oacks} OACKs to an address that never answered"
    );
    // A request without options, never acknowledged: its first block three
    // times at most (before: six).
    let r = Raw::new(s.addr).await;
    r.rrq("ipxe.efi", &[]).await;
    let mut blocks = 0;
    while let Some((p, _)) = r.recv_within(Duration::from_millis(800)).await {
        assert!(matches!(
            packet::parse(&p).unwrap(),
            Packet::Data { block: 1, .. }
        ));
        blocks += 1;
    }
    assert!((1..=3).contains(&blocks), "{blocks} blocks reflected");
    // Two transfers from 127.0.0.1 held open; a third from there is busy,
    // one from 127.0.0.2 is served.
    let a = Raw::new(s.addr).await;
    a.rrq("ipxe.efi", &[]).await;
    let (_, _, tid_a) = a.expect_data().await;
    let b = Raw::new(s.addr).await;
    b.rrq("ipxe.efi", &[]).await;
    let (_, _, tid_b) = b.expect_data().await;
    let third = Raw::new(s.addr).await;
    third.rrq("small.txt", &[]).await;
    let (code, message, _) = third.expect_error().await;
    assert_eq!((code, message.as_str()), (0, "server busy, try again"));
    let other = Raw {
        sock: UdpSocket::bind("127.0.0.2:0").await.unwrap(),
        server: s.addr,
    };
    other.rrq("small.txt", &[]).await;
    let (blk, data, _) = other.expect_data().await;
    assert_eq!((blk, data), (1, s.file("small.txt")));
    for (c, tid) in [(&a, tid_a), (&b, tid_b)] {
        c.give_up(tid).await;
    }
    s.stop().await;
}

/// Polls `cond` every 10 ms for at most 3 s (outcomes are counted when the
/// transfer's thread returns, just after its last packet).
async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(3);
    while !cond() {
        assert!(Instant::now() < end, "not within 3 s: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An ERROR from the client in the middle of a lock-step transfer ends it
/// at once: counted as exactly one `client_abort` (nothing else), its port
/// falls silent, its slot is free, and the same client's next request is
/// served whole.
#[tokio::test]
async fn an_error_from_the_client_mid_transfer_is_one_client_abort() {
    let s = Server::start(quick()).await;
    let c = Raw::new(s.addr).await;
    c.rrq("exact.bin", &[]).await;
    let (b, _, tid) = c.expect_data().await;
    assert_eq!(b, 1);
    c.send_to(tid, Packet::Ack { block: 1 }).await;
    assert_eq!(c.expect_data().await.0, 2);
    c.send_to(
        tid,
        Packet::Error {
            code: 0,
            message: "enough".into(),
        },
    )
    .await;
    let m = Arc::clone(&s.metrics);
    eventually("one client_abort, no transfer running", || {
        m.requests_with(Outcome::ClientAbort) == 1 && m.transfers_active.get() == 0
    })
    .await;
    // Nothing more from the aborted transfer: no retransmission of block 2
    // after the 300 ms timeout.
    assert!(c.recv_within(Duration::from_millis(800)).await.is_none());
    c.rrq("exact.bin", &[]).await;
    let first = c.expect_data().await;
    assert_ne!(first.2, tid);
    let got = c.finish(Vec::new(), first, 512).await;
    assert_eq!(sha(&got), sha(&s.file("exact.bin")));
    eventually("the second transfer counted ok", || {
        m.requests_with(Outcome::Ok) == 1
    })
    .await;
    assert_eq!(m.requests_with(Outcome::ClientAbort), 1);
    for other in [Outcome::Replaced, Outcome::Timeout, Outcome::Error] {
        assert_eq!(m.requests_with(other), 0, "{other:?}");
    }
    s.stop().await;
}

/// ACKs for blocks the server never sent (after the OACK, and mid-transfer)
/// make it send nothing and are counted `not_sent`; duplicates are counted
/// apart; the transfer goes on and completes.
#[tokio::test]
async fn acks_for_blocks_never_sent_are_ignored_and_counted() {
    let s = Server::start(TftpConfig {
        default_timeout: Duration::from_secs(2),
        ..TftpConfig::default()
    })
    .await;
    let c = Raw::new(s.addr).await;
    c.rrq("exact.bin", &[("blksize", "512")]).await;
    let (_, tid) = c.expect_oack().await;
    // Before any DATA: block 3 was never sent.
    c.send_to(tid, Packet::Ack { block: 3 }).await;
    assert!(
        c.recv_within(Duration::from_millis(400)).await.is_none(),
        "an ACK for a block never sent was answered"
    );
    c.send_to(tid, Packet::Ack { block: 0 }).await;
    let (b, data, _) = c.expect_data().await;
    assert_eq!(b, 1);
    // Block 1 is out; 4 and 60000 were never sent; 1 twice is a duplicate.
    c.send_to(tid, Packet::Ack { block: 4 }).await;
    c.send_to(tid, Packet::Ack { block: 60000 }).await;
    assert!(
        c.recv_within(Duration::from_millis(400)).await.is_none(),
        "an ACK for a block never sent was answered"
    );
    let m = Arc::clone(&s.metrics);
    eventually("three ACKs counted not_sent", || {
        m.ignored_acks_with("not_sent") == 3
    })
    .await;
    c.send_to(tid, Packet::Ack { block: 1 }).await;
    let second = c.expect_data().await;
    assert_eq!(second.0, 2);
    c.send_to(tid, Packet::Ack { block: 1 }).await;
    let got = c.finish(data, second, 512).await;
    assert_eq!(sha(&got), sha(&s.file("exact.bin")));
    eventually("the transfer counted ok", || {
        m.requests_with(Outcome::Ok) == 1
    })
    .await;
    assert_eq!(m.ignored_acks_with("not_sent"), 3);
    assert_eq!(m.ignored_acks_with("duplicate"), 1);
    let mut registry = prometheus_client::registry::Registry::with_prefix("bootd");
    s.metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains("bootd_tftp_ignored_acks_total{reason=\"not_sent\"} 3"),
        "{text}"
    );
    s.stop().await;
}
