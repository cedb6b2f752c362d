//! A metal disk image fetched from the stream with its signature, and the
//! catalog set that names it: installs get `coreos.inst.image_url` and no
//! `coreos.inst.insecure`, since coreos-installer finds `<image>.sig`.

use super::*;

fn publish_metal(srv: &Server, version: &str, serve_sig: bool) -> (String, String, Vec<u8>) {
    let mut pxe = serde_json::Map::new();
    for (role, name, bytes) in artifacts(version) {
        let path = format!("/builds/{version}/x86_64/{name}");
        srv.put(&path, &bytes);
        pxe.insert(
            role.into(),
            serde_json::json!({"location": srv.url(&path), "sha256": sha(&bytes)}),
        );
    }
    let name = format!("test-{version}-metal.x86_64.raw.xz");
    let path = format!("/builds/{version}/x86_64/{name}");
    let image = b"\xfd7zXZ\x00 not really xz, bytes to hash".to_vec();
    srv.put(&path, &image);
    let sig = b"-----BEGIN PGP SIGNATURE-----\nnot really\n-----END PGP SIGNATURE-----\n".to_vec();
    if serve_sig {
        srv.put(&format!("{path}.sig"), &sig);
    }
    let doc = serde_json::json!({
        "stream": STREAM,
        "metadata": {"last-modified": "2024-01-01T00:00:00Z"},
        "architectures": {"x86_64": {"artifacts": {"metal": {"release": version, "formats": {
            "pxe": pxe,
            "raw.xz": {"disk": {"location": srv.url(&path), "signature": srv.url(&format!("{path}.sig")), "sha256": sha(&image)}}
        }}}}}
    });
    srv.put(
        "/streams/teststream.json",
        serde_json::to_vec_pretty(&doc).unwrap().as_slice(),
    );
    (srv.url("/streams/teststream.json"), name, sig)
}

#[tokio::test]
async fn a_metal_image_comes_with_its_signature_and_installs_verify_it() {
    let srv = Server::start().await;
    let (url, name, sig) = publish_metal(&srv, "2.0", true);
    let dir = tempfile::tempdir().unwrap();
    let images = dir.path().join("images");
    let f = fetcher(&images);
    let mut req = request(&url, "2.0");
    req.formats = vec!["pxe".into(), "raw.xz".into()];
    f.fetch(&req).await.unwrap();
    let set = images.join("teststream/2.0/x86_64/metal");
    assert_eq!(std::fs::read(set.join(format!("{name}.sig"))).unwrap(), sig);

    write_site(dir.path(), "2.0");
    // worker-0 installs the metal image: a disk instead of the lab's live.
    let w0 =
        "live: true, macs: [\"52:54:00:77:00:20\"], ip: 10.77.0.20, kernelArgs: [console=ttyS0] }";
    let text = std::fs::read_to_string(dir.path().join("site.yaml")).unwrap();
    assert!(
        text.contains(w0),
        "the lab site changed shape; update this test"
    );
    let text = text.replace(
        w0,
        "macs: [\"52:54:00:77:00:20\"], ip: 10.77.0.20, kernelArgs: [console=ttyS0], image: coreos, installDisk: /dev/sda }",
    );
    std::fs::write(dir.path().join("site.yaml"), text).unwrap();
    let site = site::load(&dir.path().join("site.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let rel = format!("teststream/2.0/x86_64/metal/{name}");
    assert_eq!(
        site.images.sets["coreos"].metal,
        Some(site::MetalImage {
            path: rel.clone(),
            signature: Some(format!("{rel}.sig")),
        })
    );
    let node = site.node("worker-0").unwrap();
    let urls = bootd::render::NodeUrls::new(&site, "http://10.77.0.1:8080", node, "T");
    let args = bootd::render::kernel_args(&site, node, &urls).join(" ");
    assert!(
        args.contains(&format!(
            "coreos.inst.image_url=http://10.77.0.1:8080/images/{rel}"
        )),
        "{args}"
    );
    assert!(!args.contains("coreos.inst.insecure"), "{args}");

    // A signature the stream names but its server does not have: the fetch
    // says so, by the signature's name.
    let srv = Server::start().await;
    let (url, name, _) = publish_metal(&srv, "3.0", false);
    let mut req = request(&url, "3.0");
    req.formats = vec!["raw.xz".into()];
    let e = fetcher(&images).fetch(&req).await.unwrap_err().to_string();
    assert!(
        e.starts_with(&format!("{name}.sig: ")) && e.contains("404"),
        "{e}"
    );
}
