//! The real server on loopback: routes, secrecy, ranges, TLS, reload.

use crate::harness::{curl, logs, request, Bootd};
use http::StatusCode;
use std::io::Write;
use std::time::Duration;

/// The pull-secret canary inside the lab's bootstrap.ign.
const CANARY: &str = "TEFCLVBVTEwtU0VDUkVULUNBTkFSWQ";

#[tokio::test]
async fn scripts_by_mac_and_unknown_mac() {
    let b = Bootd::start().await;
    let (s, _, body) = b.get("/boot.ipxe").await;
    assert_eq!(s, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body)
        .contains("/ipxe/node?mac=${mac:hexhyp}&buildarch=${buildarch}&uuid=${uuid}"));

    let (s, h, body) = b
        .get("/ipxe/node?mac=52-54-00-77-00-11&buildarch=x86_64")
        .await;
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h["cache-control"], "no-store");
    assert!(body.starts_with("#!ipxe\n# bootd: master-0"), "{body}");
    assert!(
        body.contains("ignition.config.url=http://10.77.0.1:8080/ignition/master-0?token="),
        "{body}"
    );
    // Upper-case and colon spellings reach the same node.
    let (_, _, b2) = b.get("/ipxe/node?mac=52%3A54%3A00%3A77%3A00%3A11").await;
    assert!(String::from_utf8_lossy(&b2).contains("# bootd: master-0"));

    let (s, _, body) = b.get("/ipxe/node?mac=52-54-00-de-ad-01").await;
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert_eq!(
        s,
        StatusCode::OK,
        "an unknown MAC gets an explanation, not a bare 404"
    );
    assert!(
        body.contains("52:54:00:de:ad:01") && body.contains("not in the site description"),
        "{body}"
    );

    let (s, _, body) = b.get("/grub/grub.cfg-01-52-54-00-77-00-30").await;
    assert_eq!(s, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body)
        .contains("linux (http,10.77.0.1:8080)/images/lab-ppc64le/vmlinux"));
    let (s, _, _) = b.get("/grub/grub.cfg-01-52-54-00-77-00-99").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    b.stop().await;
}

#[tokio::test]
async fn ignition_only_to_its_node() {
    let b = Bootd::start().await;
    // No token, not from the node's address.
    let (s, _, deny_body) = b.get("/ignition/master-0").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // Another node's token.
    let t0 = b.token("master-0");
    let (s, _, body) = b.get(&format!("/ignition/master-1?token={t0}")).await;
    assert_eq!(
        (s, &body),
        (StatusCode::NOT_FOUND, &deny_body),
        "every denial looks the same"
    );
    // A forged or expired token.
    let (s, _, _) = b
        .get("/ignition/master-0?token=9999999999.AAAAAAAAAAAAAAAAAAAAAA")
        .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let expired = b.app.key.issue(
        "master-0",
        bootd::token::Scope::Script,
        std::time::SystemTime::now() - std::time::Duration::from_secs(7200),
        std::time::Duration::from_secs(60),
    );
    let (s, _, _) = b.get(&format!("/ignition/master-0?token={expired}")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // An unknown node looks the same too.
    let (s, _, body) = b.get(&format!("/ignition/nobody?token={t0}")).await;
    assert_eq!((s, &body), (StatusCode::NOT_FOUND, &deny_body));
    // The right token.
    let (s, h, body) = b.get(&format!("/ignition/master-0?token={t0}")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(h["content-type"], "application/json");
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["ignition"]["version"], "3.3.0");
    crate::golden::ignition_validate(&body);
    // The bytes equal the offline render (what the netboot test compares).
    let site = &b.app.live.load().site;
    let want = serde_json::to_vec(
        &bootd::render::ignition::node_config(site, site.node("master-0").unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(body.to_vec(), want);

    // Denials are counted by reason.
    let (_, _, m) = b.get("/metrics").await;
    let m = String::from_utf8(m.to_vec()).unwrap();
    for reason in [
        "not_from_node",
        "token_invalid",
        "token_expired",
        "unknown_node",
    ] {
        assert!(
            m.contains(&format!(
                "bootd_ignition_denials_total{{reason=\"{reason}\"}}"
            )),
            "{reason} not counted:\n{m}"
        );
    }
    b.stop().await;
}

#[tokio::test]
async fn ignition_from_the_nodes_own_address() {
    // Put worker-1 on loopback: requests from 127.0.0.1 are then its own.
    let b = Bootd::start_with(|t| {
        t.replace(
            "    dnsServers: [10.77.0.1]\n",
            "    dnsServers: [10.77.0.1]\n  - name: lo\n    subnet: 127.0.0.0/8\n",
        )
        .replace("ip: 10.77.0.21", "ip: 127.0.0.1")
    })
    .await;
    let (s, _, body) = b.get("/ignition/worker-1").await;
    assert_eq!(s, StatusCode::OK);
    assert!(String::from_utf8_lossy(&body).contains("worker-1.lab.example.test"));
    // Metadata finds the node by source address alone.
    let (s, _, body) = b.get("/metadata").await;
    assert_eq!(s, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["hostname"], "worker-1.lab.example.test");
    assert_eq!(v["network"]["addresses"][0]["address"], "127.0.0.1");
    // ...but not another node's Ignition.
    let (s, _, _) = b.get("/ignition/worker-0").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    b.stop().await;
}

#[tokio::test]
async fn accept_header_negotiates_the_spec_version() {
    let b = Bootd::start().await;
    let t = b.token("worker-0");
    let path = format!("/ignition/worker-0?token={t}");
    let (s, _, body) = b
        .get_with(
            &path,
            &[(
                "accept",
                "application/vnd.coreos.ignition+json;version=3.1.0, */*;q=0.1",
            )],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["ignition"]["version"], "3.1.0");
    crate::golden::ignition_validate(&body);
    // What the real client (Ignition 2.14) sends: the bootstrap's 3.2.0
    // config as it is, the worker's 3.4.0 one (nothing newer than 3.0 in
    // it) relabelled 3.3.0.
    let ign_2_14 = "application/vnd.coreos.ignition+json;version=3.3.0, */*;q=0.1";
    let tb = b.token("bootstrap");
    let (s, _, body) = b
        .get_with(
            &format!("/ignition/bootstrap?token={tb}"),
            &[("accept", ign_2_14)],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["ignition"]["version"], "3.2.0");
    let (s, _, body) = b.get_with(&path, &[("accept", ign_2_14)]).await;
    assert_eq!(s, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["ignition"]["version"], "3.3.0");
    crate::golden::ignition_validate(&body);
    // The pointer config is negotiated the same way.
    let (s, _, body) = b
        .get_with(
            &format!("/ignition/worker-0/pointer?token={t}"),
            &[("accept", ign_2_14)],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["ignition"]["version"], "3.2.0");
    let (s, _, body) = b
        .get_with(
            &format!("/ignition/worker-0/pointer?token={t}"),
            &[(
                "accept",
                "application/vnd.coreos.ignition+json;version=3.0.0",
            )],
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["ignition"]["version"], "3.0.0");
    let (s, _, body) = b
        .get_with(
            &path,
            &[(
                "accept",
                "application/vnd.coreos.ignition+json; version=2.2.0",
            )],
        )
        .await;
    assert_eq!(s, StatusCode::NOT_ACCEPTABLE);
    assert!(String::from_utf8_lossy(&body)
        .starts_with("client accepts Ignition spec 2.2.0; node's config is Ignition 3.4.0"));
    b.stop().await;
}

#[tokio::test]
async fn revoking_the_bootstrap_node_stops_its_ignition() {
    let b = Bootd::start().await;
    let t = b.token("bootstrap");
    let path = format!("/ignition/bootstrap?token={t}");
    assert_eq!(b.get(&path).await.0, StatusCode::OK);
    bootd::state::set_revoked(&b.state(), "bootstrap", true).unwrap();
    b.reload.notify_one();
    let mut ok = false;
    for _ in 0..50 {
        if b.get(&path).await.0 == StatusCode::NOT_FOUND {
            ok = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(ok, "bootstrap Ignition still served after revocation");
    let (_, _, m) = b.get("/metrics").await;
    assert!(
        String::from_utf8_lossy(&m).contains("bootd_ignition_denials_total{reason=\"revoked\"}")
    );
    // Other nodes are unaffected.
    assert_eq!(
        b.get(&format!("/ignition/master-0?token={}", b.token("master-0")))
            .await
            .0,
        StatusCode::OK
    );
    b.stop().await;
}

#[tokio::test]
async fn metadata_and_userdata_from_the_node() {
    // master-2 on 127.0.0.13: the node's own address asks.
    let b = Bootd::start_strict(|t| {
        t.replace(
            "    dnsServers: [10.77.0.1]\n",
            "    dnsServers: [10.77.0.1]\n  - name: lo\n    subnet: 127.0.0.0/8\n",
        )
        .replace("ip: 10.77.0.13", "ip: 127.0.0.13")
    })
    .await;
    let node = Some("127.0.0.13".parse().unwrap());
    let from_node =
        |path: &'static str| crate::harness::request_from(node, b.http, "GET", path, &[]);
    let (s, _, body) = from_node("/metadata").await;
    assert_eq!(s, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["hostname"], "master-2.lab.example.test");
    assert_eq!(v["network"]["interfaces"][0]["mac"], "52:54:00:77:00:13");
    // Elsewhere, even with a token from one of its scripts: not served.
    let t = b.token("master-2");
    let (s, _, _) = b.get(&format!("/metadata?node=master-2&token={t}")).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _, _) = b.get("/metadata?node=master-2").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _, body) = from_node("/userdata").await;
    assert_eq!(s, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let src = v["ignition"]["config"]["merge"][0]["source"]
        .as_str()
        .unwrap();
    assert!(
        src.starts_with("https://10.77.0.1:8443/ignition/master-2?token="),
        "{src}"
    );
    let ca = v["ignition"]["security"]["tls"]["certificateAuthorities"][0]["source"]
        .as_str()
        .unwrap();
    assert!(ca.starts_with("data:text/plain;charset=utf-8;base64,"));
    crate::golden::ignition_validate(&body);
    b.stop().await;
}

fn write(path: &std::path::Path, data: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
}

#[tokio::test]
async fn image_ranges_and_validators() {
    let b = Bootd::start().await;
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    write(&b.images().join("lab/kernel"), &data);
    let (s, h, body) = b.get("/images/lab/kernel").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(body.len(), data.len());
    assert_eq!(h["accept-ranges"], "bytes");
    let etag = h["etag"].to_str().unwrap().to_string();
    let lm = h["last-modified"].to_str().unwrap().to_string();

    let (s, h, body) = b
        .get_with("/images/lab/kernel", &[("range", "bytes=10-19")])
        .await;
    assert_eq!(s, StatusCode::PARTIAL_CONTENT);
    assert_eq!(h["content-range"], "bytes 10-19/100000");
    assert_eq!(&body[..], &data[10..20]);
    let (s, _, body) = b
        .get_with("/images/lab/kernel", &[("range", "bytes=-5")])
        .await;
    assert_eq!(
        (s, &body[..]),
        (StatusCode::PARTIAL_CONTENT, &data[99_995..])
    );
    let (s, h, _) = b
        .get_with("/images/lab/kernel", &[("range", "bytes=100000-")])
        .await;
    assert_eq!(s, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(h["content-range"], "bytes */100000");
    // Multi-range: a multipart/byteranges body with both parts.
    let (s, h, body) = b
        .get_with("/images/lab/kernel", &[("range", "bytes=0-1,99998-")])
        .await;
    assert_eq!(s, StatusCode::PARTIAL_CONTENT);
    let ct = h["content-type"].to_str().unwrap();
    assert!(ct.starts_with("multipart/byteranges; boundary="), "{ct}");
    assert_eq!(
        h["content-length"]
            .to_str()
            .unwrap()
            .parse::<usize>()
            .unwrap(),
        body.len()
    );
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains("Content-Range: bytes 0-1/100000")
            && text.contains("Content-Range: bytes 99998-99999/100000"),
        "{text}"
    );
    // If-Range with the current validator honours the range; a stale one gets the whole file.
    let (s, _, _) = b
        .get_with(
            "/images/lab/kernel",
            &[("range", "bytes=0-0"), ("if-range", &etag)],
        )
        .await;
    assert_eq!(s, StatusCode::PARTIAL_CONTENT);
    let (s, _, body) = b
        .get_with(
            "/images/lab/kernel",
            &[("range", "bytes=0-0"), ("if-range", "\"stale\"")],
        )
        .await;
    assert_eq!((s, body.len()), (StatusCode::OK, data.len()));
    let (s, _, _) = b
        .get_with(
            "/images/lab/kernel",
            &[("range", "bytes=0-0"), ("if-range", &lm)],
        )
        .await;
    assert_eq!(s, StatusCode::PARTIAL_CONTENT);
    // Conditional GET.
    let (s, _, body) = b
        .get_with("/images/lab/kernel", &[("if-none-match", &etag)])
        .await;
    assert_eq!((s, body.len()), (StatusCode::NOT_MODIFIED, 0));
    // HEAD: the length, no body.
    let (s, h, body) = request(b.http, "HEAD", "/images/lab/kernel", &[]).await;
    assert_eq!((s, body.len()), (StatusCode::OK, 0));
    assert_eq!(h["content-length"], "100000");
    b.stop().await;
}

// curl blocks its thread: the server needs another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_escapes_are_refused() {
    let b = Bootd::start().await;
    write(&b.images().join("lab/kernel"), b"kernel");
    write(&b.dir.path().join("secret.txt"), b"SECRET-OUTSIDE-ROOT");
    std::os::unix::fs::symlink(b.dir.path().join("secret.txt"), b.images().join("escape")).unwrap();
    std::os::unix::fs::symlink("../secret.txt", b.images().join("escape-rel")).unwrap();
    std::os::unix::fs::symlink("lab/kernel", b.images().join("inside")).unwrap();
    let base = format!("http://{}", b.http);
    for p in [
        "/images/../secret.txt",
        "/images/lab/../../secret.txt",
        "/images/%2e%2e/secret.txt",
        "/images/..%2fsecret.txt",
        "/images/%2E%2E%2Fsecret.txt",
        "/images/lab%2f..%2f..%2fsecret.txt",
        "/images/%2fetc%2fpasswd",
        "/images//etc/passwd",
        "/images/escape",
        "/images/escape-rel",
        "/images/lab",
        "/images/lab%00/kernel",
    ] {
        // curl --path-as-is sends the path exactly as written.
        let out = curl(&[
            "--path-as-is",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            &format!("{base}{p}"),
        ]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(text.ends_with("\n404"), "{p}: {text}");
        assert!(
            !text.contains("SECRET") && !text.contains("root:"),
            "{p} leaked: {text}"
        );
    }
    let (s, _, body) = b.get("/images/inside").await;
    assert_eq!(
        (s, &body[..]),
        (StatusCode::OK, &b"kernel"[..]),
        "a symlink inside the root is served"
    );
    b.stop().await;
}

/// A sparse file over 4 GiB: a range past 4 GiB, then an interrupted
/// download resumed with `curl -C -`; the sha256 of the result equals the file's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_of_a_file_over_4gib() {
    let b = Bootd::start().await;
    let path = b.images().join("big.img");
    std::fs::create_dir_all(b.images()).unwrap();
    let len: u64 = (4 << 30) + 3 * 1024 * 1024 + 17;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(len).unwrap();
        // Data at the start, across the 4 GiB boundary, and at the very end.
        f.write_at(b"start-of-image", 0).unwrap();
        f.write_at(&[0xAB; 4096], (1 << 32) - 2048).unwrap();
        f.write_at(b"end-of-image", len - 12).unwrap();
    }
    let (s, h, body) = b
        .get_with(
            "/images/big.img",
            &[("range", "bytes=4294965248-4294967295")],
        )
        .await;
    assert_eq!(s, StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        h["content-range"],
        format!("bytes 4294965248-4294967295/{len}").as_str()
    );
    assert!(body.iter().all(|&x| x == 0xAB) && body.len() == 2048);
    let (_, h, _) = request(b.http, "HEAD", "/images/big.img", &[]).await;
    assert_eq!(
        h["content-length"],
        len.to_string().as_str(),
        "64-bit length"
    );

    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("big.img");
    let url = format!("http://{}/images/big.img", b.http);
    let sh = |script: &str| {
        let o = std::process::Command::new("bash")
            .args(["-c", script])
            .output()
            .unwrap();
        assert!(o.status.success(), "{script}: {o:?}");
        String::from_utf8(o.stdout).unwrap()
    };
    // First attempt "cut" a little past 4 GiB, hashed as it streams (a
    // 4 GiB download written out would need 4 GiB of free disk): its
    // bytes are the file's first 4 294 971 392.
    let cut = 4294971392u64;
    let first = sh(&format!(
        "set -o pipefail; curl -sS -r 0-{} '{url}' | sha256sum",
        cut - 1
    ));
    let want = sh(&format!("head -c {cut} '{}' | sha256sum", path.display()));
    assert_eq!(first, want, "the first 4 GiB + 4 KiB as served");
    // What the cut attempt left on disk, kept sparse.
    sh(&format!(
        "cp --sparse=always '{}' '{}' && truncate -s {cut} '{}'",
        path.display(),
        out.display(),
        out.display()
    ));
    assert_eq!(std::fs::metadata(&out).unwrap().len(), cut);
    // Resume: curl asks for bytes=4294971392- and appends.
    let second = curl(&[
        "-C",
        "-",
        "-o",
        out.to_str().unwrap(),
        "-w",
        "%{http_code}",
        &url,
    ]);
    assert_eq!(String::from_utf8_lossy(&second.stdout), "206", "{second:?}");
    assert_eq!(std::fs::metadata(&out).unwrap().len(), len);
    let sum = |p: &std::path::Path| {
        let o = std::process::Command::new("sha256sum")
            .arg(p)
            .output()
            .unwrap();
        String::from_utf8(o.stdout)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(sum(&out), sum(&path));
    b.stop().await;
}

/// A big file goes out by sendfile from a blocking thread that holds its
/// own copy of the socket: a client that stops reading must not keep that
/// thread (or the connection) going past shutdown's grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_big_download_ends_at_shutdown() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let b = Bootd::start().await;
    std::fs::create_dir_all(b.images()).unwrap();
    let f = std::fs::File::create(b.images().join("stall.img")).unwrap();
    f.set_len(256 << 20).unwrap();
    let mut c = tokio::net::TcpStream::connect(b.http).await.unwrap();
    socket2::SockRef::from(&c)
        .set_recv_buffer_size(64 << 10)
        .unwrap();
    c.write_all(b"GET /images/stall.img HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 64 << 10];
    let n = c.read(&mut buf).await.unwrap();
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200 OK"),
        "{:?}",
        String::from_utf8_lossy(&buf[..n.min(100)])
    );
    // Stop reading; the server's sends stall. Then shut bootd down.
    tokio::time::sleep(Duration::from_millis(300)).await;
    b.stop().await;
    // Give a thread that did not stop time to go on, then read what is
    // left: only what sat in the socket buffers, then the end (EOF or
    // reset), not the rest of the 256 MiB.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let mut more = 0usize;
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match c.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(k) => more += k,
            }
        }
    })
    .await;
    assert!(end.is_ok(), "the connection outlived shutdown");
    assert!(
        more < 32 << 20,
        "{more} bytes after shutdown: the sending thread went on"
    );
}

// curl blocks its thread: the server needs another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_the_site_ca_and_tls12_ecdhe_aes_gcm() {
    let b = Bootd::start().await;
    let ca = b.state().join("ca.pem");
    assert!(ca.exists() && b.state().join("ca.key").exists());
    let url = format!("https://127.0.0.1:{}/healthz", b.https.port());
    let out = curl(&["--cacert", ca.to_str().unwrap(), &url]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n", "{out:?}");
    // iPXE speaks TLS 1.2 only: an ECDHE + AES-GCM suite must be offered.
    let out = curl(&[
        "--cacert",
        ca.to_str().unwrap(),
        "--tlsv1.2",
        "--tls-max",
        "1.2",
        "--ciphers",
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "-w",
        "%{http_code}",
        "-o",
        "/dev/null",
        &url,
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200", "{out:?}");
    // The CA survives a restart: same ca.pem, so nodes keep trusting it.
    let before = std::fs::read(&ca).unwrap();
    let cfg = bootd::Config {
        state_dir: Some(b.state()),
        ..bootd::Config::new((*b.app.live.load().site).clone())
    };
    let app2 = bootd::prepare(&cfg, true).unwrap();
    assert_eq!(app2.tls.as_ref().unwrap().ca_pem.as_bytes(), &before[..]);
    b.stop().await;
}

#[tokio::test]
async fn reload_applies_good_sites_and_keeps_the_old_on_bad() {
    let b = Bootd::start().await;
    let site_path = b.dir.path().join("site.yaml");
    let good = std::fs::read_to_string(&site_path).unwrap();
    // A new node appears without a restart (file change, polled).
    let added = good.replace(
        "  - name: p9-0",
        "  - { name: worker-2, role: worker, live: true, macs: [\"52:54:00:77:00:22\"], ip: 10.77.0.22, kernelArgs: [console=ttyS0], fetchFrom: anyAddress }\n  - name: p9-0",
    );
    std::fs::write(&site_path, &added).unwrap();
    let mut seen = false;
    for _ in 0..50 {
        let (_, _, body) = b.get("/ipxe/node?mac=52-54-00-77-00-22").await;
        if String::from_utf8_lossy(&body).contains("# bootd: worker-2") {
            seen = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        seen,
        "the added node was not picked up:\n{}",
        String::from_utf8_lossy(&logs().lock().unwrap())
    );
    // A broken site is refused; the previous one keeps serving.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&site_path)
        .unwrap();
    writeln!(f, "bogus: key").unwrap();
    drop(f);
    b.reload.notify_one();
    let mut refused = false;
    for _ in 0..50 {
        let (_, _, m) = b.get("/metrics").await;
        if String::from_utf8_lossy(&m).contains("bootd_site_reloads_total{result=\"error\"}") {
            refused = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(refused, "the bad site was not refused");
    let (_, _, body) = b.get("/ipxe/node?mac=52-54-00-77-00-22").await;
    assert!(
        String::from_utf8_lossy(&body).contains("# bootd: worker-2"),
        "old site no longer serving"
    );
    let logs = String::from_utf8_lossy(&logs().lock().unwrap()).to_string();
    assert!(logs.contains("bogus: unknown key"), "the log says why");
    b.stop().await;
}

#[tokio::test]
async fn secrets_never_reach_logs_or_metrics() {
    let b = Bootd::start().await;
    let t = b.token("bootstrap");
    let (s, _, body) = b.get(&format!("/ignition/bootstrap?token={t}")).await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        String::from_utf8_lossy(&body).contains(CANARY),
        "the canary is in the served config"
    );
    let (_, _, m) = b.get("/metrics").await;
    let m = String::from_utf8_lossy(&m).to_string();
    let logs = String::from_utf8_lossy(&logs().lock().unwrap()).to_string();
    for (what, text) in [("metrics", &m), ("logs", &logs)] {
        assert!(!text.contains(CANARY), "pull secret in {what}");
        assert!(!text.contains(&t), "token in {what}");
        assert!(!text.contains("token="), "a token query in {what}");
    }
    assert!(
        logs.contains("Ignition served"),
        "the serving itself is logged"
    );
    b.stop().await;
}

/// Reads from `s` until `n` whole responses are in; returns (status, headers, body) of each.
async fn read_responses(
    s: &mut tokio::net::TcpStream,
    n: usize,
    head_only: &[bool],
) -> Vec<(u16, Vec<(String, String)>, Vec<u8>)> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while out.len() < n {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut r = httparse::Response::new(&mut headers);
        if let Ok(httparse::Status::Complete(len)) = r.parse(&buf) {
            let hs: Vec<(String, String)> = r
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_ascii_lowercase(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect();
            let cl: usize = hs
                .iter()
                .find(|(k, _)| k == "content-length")
                .map(|(_, v)| v.parse().unwrap())
                .unwrap_or(0);
            let body_len = if head_only[out.len()] { 0 } else { cl };
            if buf.len() >= len + body_len {
                let body = buf[len..len + body_len].to_vec();
                out.push((r.code.unwrap(), hs, body));
                buf.drain(..len + body_len);
                continue;
            }
        }
        let mut chunk = vec![0u8; 65536];
        let k = tokio::time::timeout_at(deadline, s.read(&mut chunk))
            .await
            .expect("responses within 10 s")
            .unwrap();
        assert!(k > 0, "connection closed after {} responses", out.len());
        buf.extend_from_slice(&chunk[..k]);
    }
    assert!(
        buf.is_empty(),
        "extra bytes after {n} responses: {:?}",
        String::from_utf8_lossy(&buf)
    );
    out
}

/// bootd's own plain-HTTP loop (bootd/src/fast_get.rs): pipelined GET and HEAD
/// on one connection, a small file sent by sendfile byte for byte, metrics
/// counted; then a request it leaves to hyper (POST with a body) on the
/// same connection, after which hyper serves the rest.
#[tokio::test]
async fn plain_http_pipelines_sends_files_and_hands_over_to_hyper() {
    use tokio::io::AsyncWriteExt;
    let b = Bootd::start().await;
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 253) as u8).collect();
    write(&b.images().join("lab/kernel"), &data);
    let mut s = tokio::net::TcpStream::connect(b.http).await.unwrap();
    s.write_all(
        b"GET /images/lab/kernel HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\nHEAD /images/lab/kernel HTTP/1.1\r\nHost: x\r\n\r\nGET /boot.ipxe HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await
    .unwrap();
    let r = read_responses(&mut s, 4, &[false, false, true, false]).await;
    let header = |i: usize, k: &str| r[i].1.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(r[0].0, 200);
    assert!(r[0].2 == data, "file body differs ({} bytes)", r[0].2.len());
    assert_eq!(header(0, "content-length").as_deref(), Some("300000"));
    assert_eq!(header(0, "accept-ranges").as_deref(), Some("bytes"));
    assert!(header(0, "etag").is_some() && header(0, "date").is_some());
    assert_eq!((r[1].0, &r[1].2[..]), (200, &b"ok\n"[..]));
    assert_eq!(
        (r[2].0, header(2, "content-length").as_deref()),
        (200, Some("300000"))
    );
    assert_eq!(r[3].0, 200);
    assert!(
        r[3].2.starts_with(b"#!ipxe"),
        "{}",
        String::from_utf8_lossy(&r[3].2)
    );

    // A request with a body: hyper takes the connection (405, as before).
    s.write_all(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhiGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let r = read_responses(&mut s, 2, &[false, false]).await;
    assert_eq!(r[0].0, 405);
    assert!(
        r[0].1.iter().any(|(k, v)| k == "allow" && v == "GET, HEAD"),
        "{:?}",
        r[0].1
    );
    assert_eq!((r[1].0, &r[1].2[..]), (200, &b"ok\n"[..]));

    // Connection: close is honoured.
    let mut s = tokio::net::TcpStream::connect(b.http).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let r = read_responses(&mut s, 1, &[false]).await;
    assert!(r[0]
        .1
        .iter()
        .any(|(k, v)| k == "connection" && v == "close"));
    let mut rest = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut s, &mut rest)
        .await
        .unwrap();
    assert!(rest.is_empty());

    // The file's bytes were counted (sendfile reports them as the body would).
    let (_, _, m) = b.get("/metrics").await;
    let m = String::from_utf8_lossy(&m);
    let line = m
        .lines()
        .find(|l| l.starts_with("bootd_http_response_bytes_total{route=\"images\"}"))
        .unwrap_or_else(|| panic!("{m}"));
    let n: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(n, 300_000, "{line}");
    b.stop().await;
}

/// The plain-HTTP shortcut for whole-image GETs (`http::image_whole`)
/// answers with the very status, headers (in order) and body as the
/// general path (`http::image`), which gets the requests that carry a
/// query, a condition that does not hold, or a percent-encoded path; a
/// missing file falls through to the general 404; every request is counted.
#[tokio::test]
async fn the_whole_image_shortcut_answers_as_the_general_path() {
    use tokio::io::AsyncWriteExt;
    let b = Bootd::start().await;
    let data: Vec<u8> = (0..150_000u32).map(|i| (i * 7 % 251) as u8).collect();
    // A name no other test uses: the log lines below are this test's.
    write(&b.images().join("lab/shortcut-k"), &data);
    let mut s = tokio::net::TcpStream::connect(b.http).await.unwrap();
    s.write_all(
        concat!(
            "GET /images/lab/shortcut-k HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /images/lab/shortcut-k HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"not-it\"\r\n\r\n",
            "GET /images/lab/shortcut-k?x=1 HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /images/lab%2Fshortcut-k HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /images/lab/shortcut-missing HTTP/1.1\r\nHost: x\r\n\r\n",
            "GET /images/lab/shortcut-k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let r = read_responses(&mut s, 6, &[false; 6]).await;
    let without_date = |i: usize| {
        r[i].1
            .iter()
            .filter(|(k, _)| k != "date")
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(r[0].0, 200);
    assert!(r[0].2 == data, "file body differs ({} bytes)", r[0].2.len());
    let names: Vec<&str> = r[0].1.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "etag",
            "last-modified",
            "accept-ranges",
            "content-type",
            "content-length",
            "date"
        ]
    );
    for (i, resp) in r.iter().enumerate().take(4).skip(1) {
        assert_eq!(
            (resp.0, without_date(i)),
            (200, without_date(0)),
            "response {i}"
        );
        assert!(resp.2 == data, "response {i}: body differs");
    }
    assert_eq!((r[4].0, &r[4].2[..]), (404, &b"not found\n"[..]));
    let mut closing = without_date(0);
    closing.push(("connection".into(), "close".into()));
    assert_eq!((r[5].0, without_date(5)), (200, closing));
    let mut rest = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut s, &mut rest)
        .await
        .unwrap();
    assert!(
        rest.is_empty(),
        "the connection closes after `Connection: close`"
    );

    let (_, _, m) = b.get("/metrics").await;
    let m = String::from_utf8_lossy(&m);
    let count = |prefix: &str| -> u64 {
        let line = m
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in {m}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(
        count("bootd_http_requests_total{route=\"images\",status=\"200\"}"),
        5
    );
    assert_eq!(
        count("bootd_http_requests_total{route=\"images\",status=\"404\"}"),
        1
    );
    assert_eq!(
        count("bootd_http_response_bytes_total{route=\"images\"}"),
        5 * 150_000
    );
    // The first and the last went the shortcut, the others the general way.
    let logs = String::from_utf8_lossy(&logs().lock().unwrap()).to_string();
    let requests: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("shortcut-") && l.contains(" request"))
        .collect();
    let short = requests
        .iter()
        .filter(|l| l.contains("shortcut=true"))
        .count();
    assert_eq!((requests.len(), short), (6, 2), "{requests:#?}");
    b.stop().await;
}

/// A node that fetched its Ignition installed: when it network-boots again
/// it is told to boot its disk (iPXE and GRUB), flagged on its timeline,
/// until the install is asked for again; `afterInstall: network` keeps
/// serving the installer (diskless nodes).
#[tokio::test]
async fn an_installed_node_boots_its_disk_until_reinstalled() {
    // master-0 on 127.0.0.1 and p9-0 on 127.0.0.2: their own addresses.
    let on_lo = |t: String| {
        t.replace(
            "    dnsServers: [10.77.0.1]\n",
            "    dnsServers: [10.77.0.1]\n  - name: lo\n    subnet: 127.0.0.0/8\n",
        )
        .replace("ip: 10.77.0.11", "ip: 127.0.0.1")
        .replace("ip: 10.77.0.30", "ip: 127.0.0.2")
    };
    let b = Bootd::start_with(on_lo).await;
    let script = "/ipxe/node?mac=52-54-00-77-00-11&buildarch=x86_64";
    let installer = String::from_utf8(b.get(script).await.2.to_vec()).unwrap();
    assert!(installer.contains("# bootd: master-0"), "{installer}");
    // Someone else with worker-0's token fetching its config: not its install.
    let t = b.token("worker-0");
    let path = format!("/ignition/worker-0?token={t}");
    assert_eq!(b.get(&path).await.0, StatusCode::OK);
    assert!(b.app.installed.at("worker-0").is_none());
    let t = b.token("master-0");
    assert_eq!(
        b.get(&format!("/ignition/master-0?token={t}")).await.0,
        StatusCode::OK
    );
    assert!(b.app.installed.at("master-0").is_some());
    let again = String::from_utf8(b.get(script).await.2.to_vec()).unwrap();
    assert!(
        again.starts_with("#!ipxe\necho bootd: master-0 installed already"),
        "{again}"
    );
    assert!(
        again.contains("sanboot --no-describe --drive 0x80"),
        "{again}"
    );
    assert!(!again.contains("ignition.config.url"), "{again}");
    let by_name = String::from_utf8(b.get("/ipxe/master-0.ipxe").await.2.to_vec()).unwrap();
    assert_eq!(by_name, again);
    let mut flagged = false;
    for _ in 0..50 {
        flagged = b.app.timeline.track("master-0").is_some_and(|t| {
            t.events.iter().any(|e| {
                e.what == "local_boot" && e.error && e.detail.contains("check the boot order")
            })
        });
        if flagged {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(flagged, "{:?}", b.app.timeline.track("master-0"));
    // GRUB (p9-0) the same way.
    let t = b.token("p9-0");
    let from = Some("127.0.0.2".parse().unwrap());
    let path = format!("/ignition/p9-0?token={t}");
    assert_eq!(
        crate::harness::request_from(from, b.http, "GET", &path, &[])
            .await
            .0,
        StatusCode::OK
    );
    let grub = String::from_utf8(
        b.get("/grub/grub.cfg-01-52-54-00-77-00-30")
            .await
            .2
            .to_vec(),
    )
    .unwrap();
    assert!(
        grub.contains("installed already") && grub.contains("exit"),
        "{grub}"
    );
    assert!(!grub.contains("linux "), "{grub}");
    // A restart remembers; a reinstall forgets.
    assert!(bootd::installed::Installed::open(&b.state())
        .unwrap()
        .at("master-0")
        .is_some());
    assert!(b.app.installed.clear("master-0").unwrap());
    let back = String::from_utf8(b.get(script).await.2.to_vec()).unwrap();
    assert_eq!(back.lines().next(), installer.lines().next());
    assert!(back.contains("ignition.config.url"), "{back}");
    b.stop().await;

    let b = Bootd::start_with(|t| {
        on_lo(t).replace("  tokenTtl: 1h", "  tokenTtl: 1h\n  afterInstall: network")
    })
    .await;
    let t = b.token("master-0");
    assert_eq!(
        b.get(&format!("/ignition/master-0?token={t}")).await.0,
        StatusCode::OK
    );
    let still = String::from_utf8(b.get(script).await.2.to_vec()).unwrap();
    assert!(still.contains("ignition.config.url"), "{still}");
    b.stop().await;
}

/// Discovery: an unknown MAC gets the reporting script; its report is kept
/// (and shown, escaped, on the status page), answered with a
/// wait-and-retry script; once its MAC is a node's, the same report gets
/// the node's script. Off by default: no route, the explanation script.
#[tokio::test]
async fn unknown_machines_report_themselves_when_discovery_is_on() {
    let b = Bootd::start().await;
    assert_eq!(
        b.get("/discover?mac=52-54-00-de-ad-01").await.0,
        StatusCode::NOT_FOUND
    );
    let s = String::from_utf8(b.get("/ipxe/node?mac=52-54-00-de-ad-01").await.2.to_vec()).unwrap();
    assert!(s.contains("not in the site description"), "{s}");
    b.stop().await;

    let b = Bootd::start_with(|t| {
        t.replace(
            "    dnsServers: [10.77.0.1]\n",
            "    dnsServers: [10.77.0.1]\n    pool: { start: 10.77.0.200, end: 10.77.0.250 }\n",
        ) + "\ndiscovery: { enabled: true, retry: 15s }\n"
    })
    .await;
    let s = String::from_utf8(b.get("/ipxe/node?mac=52-54-00-de-ad-01").await.2.to_vec()).unwrap();
    assert!(
        s.starts_with("#!ipxe\necho bootd: machine ${mac} is in no node"),
        "{s}"
    );
    assert!(
        s.contains("/discover?mac=${mac:hexhyp}&uuid=${uuid}&serial=${serial:uristring}"),
        "{s}"
    );
    assert!(
        s.contains("&nic3=${net3/mac:hexhyp} || goto again\n"),
        "{s}"
    );
    // A report not taken (429, 403) is sent again after the retry.
    assert!(s.contains("sleep 15\ndhcp ||\ngoto report\n"), "{s}");
    // bootd hands out the addresses: a report counts only from the address
    // leased to its MAC. Not yet: refused; then the machine's lease.
    assert_eq!(
        b.get("/discover?mac=52-54-00-de-ad-01").await.0,
        StatusCode::FORBIDDEN
    );
    lease(&b, "52:54:00:de:ad:01", true);
    // What iPXE sends when it expands that line (an undefined NIC is empty).
    let report = "/discover?mac=52-54-00-de-ad-01&uuid=0f6a4c2e-0298-4cf2-b280-b4ec459afdf0&serial=SN%3C1%3E&manufacturer=QEMU&product=Standard%20PC%20%3Cscript%3E&asset=&buildarch=x86_64&platform=pcbios&nic0=52-54-00-de-ad-01&nic1=52-54-00-de-ad-02&nic2=&nic3=";
    let (st, _, body) = b.get(report).await;
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert_eq!(st, StatusCode::OK, "{body}");
    assert!(
        body.contains("discovered as 0f6a4c2e-0298-4cf2-b280-b4ec459afdf0"),
        "{body}"
    );
    assert!(
        body.contains(
            "sleep 15\ndhcp ||\nchain --autofree --replace http://10.77.0.1:8080/boot.ipxe"
        ),
        "{body}"
    );
    let list = b.app.discovered.list();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].macs, vec!["52:54:00:de:ad:01", "52:54:00:de:ad:02"]);
    assert_eq!(list[0].serial.as_deref(), Some("SN<1>"));
    assert_eq!(list[0].ip, Some("127.0.0.1".parse().unwrap()));
    let page = String::from_utf8(b.get("/status").await.2.to_vec()).unwrap();
    assert!(
        page.contains("Standard PC &lt;script&gt;") && !page.contains("<script>"),
        "{page}"
    );
    assert!(page.contains("<table id=\"discovered\">"), "{page}");
    let (_, _, m) = b.get("/metrics").await;
    assert!(String::from_utf8_lossy(&m).contains("bootd_discovered_machines 1"));
    // Only the MAC it booted from (from its own lease) is verified.
    assert_eq!(list[0].verified, vec!["52:54:00:de:ad:01"]);
    assert!(
        page.contains("52:54:00:de:ad:01, 52:54:00:de:ad:02?"),
        "{page}"
    );
    // The same key from another MAC's lease, with other MACs (someone
    // claiming the machine's UUID): kept beside it as a conflict, shown.
    lease(&b, "02:66:66:66:66:66", true);
    let claim = "/discover?mac=02-66-66-66-66-66&uuid=0f6a4c2e-0298-4cf2-b280-b4ec459afdf0&nic1=52-54-00-de-ad-01";
    assert_eq!(b.get(claim).await.0, StatusCode::OK);
    let list = b.app.discovered.list();
    assert_eq!(list[0].macs.len(), 2);
    assert_eq!(list[0].conflicts[0].macs[0], "02:66:66:66:66:66");
    let page = String::from_utf8(b.get("/status").await.2.to_vec()).unwrap();
    assert!(page.contains("conflict: also claimed by"), "{page}");
    let (_, _, m) = b.get("/metrics").await;
    assert!(String::from_utf8_lossy(&m).contains("bootd_discovered_conflicts 1"));
    // Beyond five reports at once from one address: 429, counted.
    let mut st = StatusCode::OK;
    for _ in 0..6 {
        st = b.get(claim).await.0;
    }
    assert_eq!(st, StatusCode::TOO_MANY_REQUESTS);
    let (_, _, m) = b.get("/metrics").await;
    assert!(
        String::from_utf8_lossy(&m).contains("bootd_discovery_refused_total{reason=\"rate\"}"),
        "{}",
        String::from_utf8_lossy(&m)
    );
    // A report without a MAC is refused, and nothing is kept.
    assert_eq!(b.get("/discover?uuid=x").await.0, StatusCode::BAD_REQUEST);
    assert_eq!(b.app.discovered.list().len(), 1);
    b.stop().await;
}

/// Petitboot's pxelinux config by MAC; an unknown MAC is a 404.
#[tokio::test]
async fn pxelinux_configs_by_mac() {
    let b = Bootd::start().await;
    let (st, _, body) = b.get("/pxelinux.cfg/01-52-54-00-77-00-30").await;
    let body = String::from_utf8(body.to_vec()).unwrap();
    assert_eq!(st, StatusCode::OK);
    assert!(body.contains("DEFAULT bootd\n"), "{body}");
    assert!(
        body.contains("  KERNEL http://10.77.0.1:8080/images/lab-ppc64le/vmlinux\n"),
        "{body}"
    );
    assert!(
        body.contains("ignition.config.url=http://10.77.0.1:8080/ignition/p9-0?token="),
        "{body}"
    );
    assert_eq!(
        b.get("/pxelinux.cfg/01-52-54-00-77-00-99").await.0,
        StatusCode::NOT_FOUND
    );
    b.stop().await;
}

/// Gives `mac` an active lease of 127.0.0.1 (where the tests' requests come
/// from), or releases it.
fn lease(b: &Bootd, mac: &str, active: bool) {
    use dhcp::v4::leases::{Lease, LeaseState};
    b.app.leases.lock().unwrap().apply(Lease {
        mac: mac.into(),
        ip: "127.0.0.1".parse().unwrap(),
        expires: u64::MAX / 2,
        hostname: None,
        state: if active {
            LeaseState::Active
        } else {
            LeaseState::Released
        },
    });
}

/// The probe: 1 095 idle connections took every descriptor and /healthz
/// timed out. Now one source holds at most `per_source` connections (the
/// next is reset at once and counted), and others are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_from_one_source_cannot_starve_the_others() {
    let b = Bootd::start_config(
        |t| t,
        None,
        |c| {
            c.conn_limits = Some(bootd::conns::ConnLimits {
                max: 100,
                per_source: 4,
            })
        },
    )
    .await;
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(tokio::net::TcpStream::connect(b.http).await.unwrap());
    }
    // Give the accept loop time to take them.
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The fifth is reset at once (on loopback the reset can even beat
    // connect's own completion).
    if let Ok(mut over) = tokio::net::TcpStream::connect(b.http).await {
        let mut buf = [0u8; 16];
        use tokio::io::AsyncReadExt;
        let r = tokio::time::timeout(Duration::from_secs(3), over.read(&mut buf))
            .await
            .expect("the fifth connection was not closed at once");
        assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    }
    // Another source is served meanwhile.
    let (s, _, body) = crate::harness::request_from(
        Some("127.0.0.2".parse().unwrap()),
        b.http,
        "GET",
        "/healthz",
        &[],
    )
    .await;
    assert_eq!((s, &body[..]), (StatusCode::OK, &b"ok\n"[..]));
    // One idle connection goes: this source gets a slot again.
    drop(idle.pop());
    let t = std::time::Instant::now();
    let m = loop {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the slot never came back"
        );
        let Ok(s) = tokio::net::TcpStream::connect(b.http).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Ok((mut send, conn)) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(s)).await
        else {
            continue;
        };
        tokio::spawn(conn);
        let req = http::Request::get("/metrics")
            .header("host", "x")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        match send.send_request(req).await {
            Ok(r) => {
                use http_body_util::BodyExt;
                break r.into_body().collect().await.unwrap().to_bytes();
            }
            Err(_) => {
                assert!(
                    t.elapsed() < Duration::from_secs(5),
                    "the slot never came back"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(
        String::from_utf8_lossy(&m)
            .contains("bootd_http_connections_refused_total{reason=\"per_source\"} "),
        "{}",
        String::from_utf8_lossy(&m)
    );
    drop(idle);
    b.stop().await;
}

/// A probe of many refused requests is counted in full but logged at most
/// 10 times a second (30 000 probes had made 30 000 WARN lines).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refusals_is_counted_not_logged_line_by_line() {
    let b = Bootd::start().await;
    let t = std::time::Instant::now();
    for i in 0..300 {
        let (s, _, _) = b.get(&format!("/ignition/flood-probe-{i}")).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
    }
    let secs = t.elapsed().as_secs() + 1;
    let log = crate::harness::logs();
    let log = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    let lines = log
        .lines()
        .filter(|l| l.contains("Ignition refused") && l.contains("flood-probe-"))
        .count();
    assert!(
        lines as u64 <= 10 * (secs + 1),
        "{lines} log lines for 300 refusals in {secs} s"
    );
    assert!(
        log.contains("suppressed="),
        "the next line says how many were left out"
    );
    let (_, _, m) = b.get("/metrics").await;
    let m = String::from_utf8_lossy(&m);
    let n: u64 = m
        .lines()
        .find(|l| l.starts_with("bootd_ignition_denials_total{reason=\"unknown_node\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(n >= 300, "{n} counted");
    b.stop().await;
}

/// The probe: 520 clients that asked for a big file and never read took
/// bootd from 46 to 517 threads and TFTP stopped answering. Now big sends
/// run on at most 128 blocking threads (the rest wait without one; 200
/// stalled readers here), and a
/// client that takes nothing for `write_stall` is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_hold_neither_threads_nor_connections() {
    let b = Bootd::start_config(
        |t| t,
        None,
        |c| {
            c.write_stall = Duration::from_secs(2);
        },
    )
    .await;
    // A sparse 256 MiB file: far more than the socket buffers hold.
    std::fs::create_dir_all(b.images().join("big")).unwrap();
    let f = std::fs::File::create(b.images().join("big/disk.img")).unwrap();
    f.set_len(256 << 20).unwrap();
    let threads = || std::fs::read_dir("/proc/self/task").unwrap().count();
    let before = threads();
    let mut stalled = Vec::new();
    for _ in 0..200 {
        let mut s = tokio::net::TcpStream::connect(b.http).await.unwrap();
        use tokio::io::AsyncWriteExt;
        s.write_all(b"GET /images/big/disk.img HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        stalled.push(s);
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let during = threads();
    assert!(
        during <= before + bootd::fast_get::MAX_BLOCKING_SENDS + 16,
        "{before} threads before, {during} with 200 stalled readers"
    );
    // Others are served meanwhile.
    let (s, _, body) = b.get("/healthz").await;
    assert_eq!((s, &body[..]), (StatusCode::OK, &b"ok\n"[..]));
    // After the stall limit every stalled connection is closed by bootd (128
    // at once, then the 72 that waited): reading now drains what was
    // buffered, then ends.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let t = std::time::Instant::now();
    for mut s in stalled {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(_)) => {}
                Err(_) => panic!("a stalled connection was still open after 30 s"),
            }
        }
    }
    assert!(t.elapsed() < Duration::from_secs(60));
    // The threads went back to the pool's idle set; new requests are served.
    let (s, _, _) = b.get("/healthz").await;
    assert_eq!(s, StatusCode::OK);
    b.stop().await;
}
