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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_iso_goes_to_its_token_only_and_boots_its_own_kernel_line() {
    let b = Bootd::start().await;
    // Stand-ins for the lab's kernel and initramfs (what the ISO holds is
    // checked here; booting one is tests/controller/bmc-e2e.sh's part).
    std::fs::create_dir_all(b.images().join("lab")).unwrap();
    std::fs::write(b.images().join("lab/kernel"), vec![0x4b; 40_000]).unwrap();
    std::fs::write(b.images().join("lab/initramfs"), vec![0x49; 70_000]).unwrap();
    let t = b.token("master-0");
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
    let t1 = b.token("master-1");
    for path in [
        "/media/master-0.iso".to_string(),
        format!("/media/master-0.iso?token={t1}"),
        "/media/master-0.iso?token=9999999999.AAAAAAAAAAAAAAAAAAAAAA".to_string(),
        format!("/media/nobody.iso?token={t}"),
        format!("/media/p9-0.iso?token={}", b.token("p9-0")),
    ] {
        let (s, _, body) = b.get(&path).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(&body[..], b"not found\n", "{path}");
    }
    // A new token: a new ISO, and the node's older one is removed.
    let t2 = b.token("master-0");
    if t2 != t {
        let (s, _, _) = b.get(&format!("/media/master-0.iso?token={t2}")).await;
        assert_eq!(s, StatusCode::OK);
        let names: Vec<String> = std::fs::read_dir(b.state().join("media"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }
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
