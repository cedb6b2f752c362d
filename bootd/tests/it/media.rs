//! Virtual media: `GET /media/<node>.iso?token=…` builds the node's ISO with
//! the real grub-mkrescue, serves it (ranges too) to whoever holds the
//! node's token, and nothing to anyone else.

use crate::harness::Bootd;
use http::StatusCode;
use std::process::Command;

/// A file out of an ISO, read with xorriso.
fn extract(iso: &[u8], file: &str) -> String {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("x.iso");
    std::fs::write(&p, iso).unwrap();
    let out = d.path().join("out");
    let st = Command::new("xorriso")
        .args(["-osirrox", "on", "-indev"])
        .arg(&p)
        .args(["-extract", file])
        .arg(&out)
        .output()
        .expect("xorriso (tests/lab/deps.sh installs it)");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    std::fs::read_to_string(&out).unwrap()
}

/// A token of `scope` for `node`.
fn token_of(b: &Bootd, node: &str, scope: bootd::token::Scope) -> String {
    b.app.key.issue(
        node,
        scope,
        std::time::SystemTime::now(),
        std::time::Duration::from_secs(600),
    )
}

/// What the controller puts in a virtual-media node's ISO URL.
fn media_token(b: &Bootd, node: &str) -> String {
    token_of(b, node, bootd::token::Scope::Media)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_iso_goes_to_its_token_only_and_boots_its_own_kernel_line() {
    let b = Bootd::start().await;
    // Stand-ins for the lab's kernel and initramfs (what the ISO holds is
    // checked here; booting one is tests/controller/bmc-e2e.sh's part).
    std::fs::create_dir_all(b.images().join("lab")).unwrap();
    std::fs::write(b.images().join("lab/kernel"), vec![0x4b; 40_000]).unwrap();
    std::fs::write(b.images().join("lab/initramfs"), vec![0x49; 70_000]).unwrap();
    let t = media_token(&b, "master-0");
    let (s, h, iso) = b.get(&format!("/media/master-0.iso?token={t}")).await;
    if s != StatusCode::OK {
        let l = crate::harness::logs();
        let l = String::from_utf8_lossy(&l.lock().unwrap()).into_owned();
        panic!("{s}: {}\n{l}", String::from_utf8_lossy(&iso));
    }
    assert_eq!(&iso[0x8001..0x8006], b"CD001", "an ISO 9660 image");
    assert_eq!(h["content-length"], iso.len().to_string());
    let cfg = extract(&iso, "/boot/grub/grub.cfg");
    assert!(
        cfg.contains(&format!(
            "'ignition.config.url=http://10.77.0.1:8080/ignition/master-0?token={t}'"
        )),
        "{cfg}"
    );
    assert!(
        cfg.contains("linux /vmlinuz ") && cfg.contains("console=ttyS0"),
        "{cfg}"
    );
    assert!(cfg.contains("initrd /initrd.img"), "{cfg}");
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("x.iso");
    std::fs::write(&p, &iso).unwrap();
    let listing = Command::new("xorriso")
        .args(["-indev"])
        .arg(&p)
        .args(["-report_el_torito", "plain", "-ls", "/"])
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(
        listing.contains("BIOS") && listing.contains("UEFI"),
        "{listing}"
    );
    assert!(
        listing.contains("'vmlinuz'") && listing.contains("'initrd.img'"),
        "{listing}"
    );
    assert_eq!(extract(&iso, "/vmlinuz").len(), 40_000);

    // The same token again: the cached file, ranges as for images.
    let files = || std::fs::read_dir(b.state().join("media")).unwrap().count();
    let before = files();
    let (s, h, part) = b
        .get_with(
            &format!("/media/master-0.iso?token={t}"),
            &[("range", "bytes=32769-32773")],
        )
        .await;
    assert_eq!(s, StatusCode::PARTIAL_CONTENT);
    assert_eq!(&part[..], b"CD001");
    assert!(h["content-range"]
        .to_str()
        .unwrap()
        .starts_with("bytes 32769-32773/"));
    assert_eq!(files(), before, "no second build");

    // No token, another node's token, a forged one, an unknown node, a
    // node it cannot be built for (ppc64le): the same 404.
    let t1 = media_token(&b, "master-1");
    for path in [
        "/media/master-0.iso".to_string(),
        format!("/media/master-0.iso?token={t1}"),
        "/media/master-0.iso?token=9999999999.AAAAAAAAAAAAAAAAAAAAAA".to_string(),
        format!("/media/nobody.iso?token={t}"),
        format!("/media/p9-0.iso?token={}", media_token(&b, "p9-0")),
        // A script token or a provider token of the node: no licence to
        // build its ISO.
        format!("/media/master-0.iso?token={}", b.token("master-0")),
        format!(
            "/media/master-0.iso?token={}",
            token_of(&b, "master-0", bootd::token::Scope::Provider)
        ),
    ] {
        let (s, _, body) = b.get(&path).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(&body[..], b"not found\n", "{path}");
    }
    // A new token: a new ISO; the one its BMC may still be reading in
    // ranges (served just now) is kept and still served.
    let t2 = media_token(&b, "master-0");
    let (s, _, _) = b.get(&format!("/media/master-0.iso?token={t2}")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(files(), 2, "both ISOs kept");
    let (s, _, part) = b
        .get_with(
            &format!("/media/master-0.iso?token={t}"),
            &[("range", "bytes=32769-32773")],
        )
        .await;
    assert_eq!((s, &part[..]), (StatusCode::PARTIAL_CONTENT, &b"CD001"[..]));
    // Revoked: nothing more.
    bootd::state::set_revoked(&b.state(), "master-0", true).unwrap();
    b.reload.notify_one();
    let mut refused = false;
    for _ in 0..50 {
        if b.get(&format!("/media/master-0.iso?token={t}")).await.0 == StatusCode::NOT_FOUND {
            refused = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(refused, "a revoked node's ISO is still served");
    let (_, _, m) = b.get("/metrics").await;
    let m = String::from_utf8_lossy(&m);
    assert!(m.contains("route=\"media\""), "{m}");
    assert!(!m.contains(&t), "no token in the metrics");
    b.stop().await;
}

/// Many ISO requests at once, each with a token of its own (every token is
/// a new ISO): one build at a time on the builder's own thread, a node's
/// second build refused while its first runs, the queue's excess refused at
/// once with 503 and Retry-After, and other requests (an image read, which
/// shares the blocking pool) answered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iso_builds_are_bounded_per_node_and_in_all() {
    let b = Bootd::start().await;
    std::fs::create_dir_all(b.images().join("lab")).unwrap();
    // Big enough that each build takes a moment.
    std::fs::write(b.images().join("lab/kernel"), vec![0x4b; 8 << 20]).unwrap();
    std::fs::write(b.images().join("lab/initramfs"), vec![0x49; 24 << 20]).unwrap();
    let nodes = [
        "bootstrap",
        "master-0",
        "master-1",
        "master-2",
        "worker-0",
        "worker-1",
    ];
    let mut asks = Vec::new();
    for n in nodes {
        for _ in 0..3 {
            let path = format!("/media/{n}.iso?token={}", media_token(&b, n));
            let http = b.http;
            asks.push(tokio::spawn(async move {
                let t = std::time::Instant::now();
                let (s, h, _) = crate::harness::request(http, "GET", &path, &[]).await;
                (s, h.get("retry-after").cloned(), t.elapsed())
            }));
        }
    }
    // Meanwhile an image is read at once.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let t = std::time::Instant::now();
    let (s, _, _) = b.get("/images/lab/kernel").await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(2),
        "image read took {:?}",
        t.elapsed()
    );
    let mut built = 0;
    let mut busy = 0;
    for a in asks {
        let (s, retry, took) = a.await.unwrap();
        match s {
            StatusCode::OK => built += 1,
            StatusCode::SERVICE_UNAVAILABLE => {
                busy += 1;
                assert_eq!(retry.unwrap(), "10");
                assert!(
                    took < std::time::Duration::from_secs(1),
                    "refused at once: {took:?}"
                );
            }
            other => panic!("{other}"),
        }
    }
    // At most one build per node and QUEUE + 1 in all were let in.
    assert!(
        built <= nodes.len().min(bootd::media::QUEUE + 1),
        "built {built}"
    );
    assert!(built >= 1, "built {built}");
    assert_eq!(built + busy, nodes.len() * 3);
    let isos = std::fs::read_dir(b.state().join("media"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".iso"))
        .count();
    assert_eq!(isos, built, "one file per build");
    b.stop().await;
}
