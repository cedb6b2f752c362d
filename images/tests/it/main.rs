//! The image cache end to end, on 127.0.0.1 only: a generated stream
//! document and small artifacts served by `server::Server`, fetched by the
//! real `Fetcher`; bootd started with a site that names a catalog set.

mod metal;
mod server;
mod signatures;

use images::cache::{self, Cache, Depth, FileProblem};
use images::cloud::CloudCatalog;
use images::fetch::{FetchError, Fetcher, Options, Outcome, Request, Source};
use images::stream::Stream;
use server::Server;
use sha2::Digest;
use site::catalog;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const STREAM: &str = "teststream";

/// Artifacts of one test release: (role, file name, bytes).
fn artifacts(version: &str) -> Vec<(&'static str, String, Vec<u8>)> {
    // Sizes that span several reads and the cut points used below.
    let pat = |seed: u8, n: usize| {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect::<Vec<u8>>()
    };
    vec![
        (
            "kernel",
            format!("test-{version}-live-kernel-x86_64"),
            pat(1, 70_001),
        ),
        (
            "initramfs",
            format!("test-{version}-live-initramfs.x86_64.img"),
            pat(2, 150_003),
        ),
        (
            "rootfs",
            format!("test-{version}-live-rootfs.x86_64.img"),
            pat(3, 400_007),
        ),
    ]
}

fn sha(b: &[u8]) -> String {
    cache::hex(&sha2::Sha256::digest(b))
}

/// Serves a stream document naming `version` as the current release, with
/// its artifacts (`lie_about` role: the document's sha256 for it is wrong).
fn publish(srv: &Server, version: &str, lie_about: Option<&str>) -> String {
    let mut pxe = serde_json::Map::new();
    for (role, name, bytes) in artifacts(version) {
        let path = format!("/builds/{version}/x86_64/{name}");
        srv.put(&path, &bytes);
        let digest = if lie_about == Some(role) {
            sha(b"something else")
        } else {
            sha(&bytes)
        };
        pxe.insert(
            role.into(),
            serde_json::json!({"location": srv.url(&path), "signature": srv.url(&format!("{path}.sig")), "sha256": digest}),
        );
    }
    let doc = serde_json::json!({
        "stream": STREAM,
        "metadata": {"last-modified": "2024-01-01T00:00:00Z"},
        "architectures": {"x86_64": {
            "artifacts": {"metal": {"release": version, "formats": {"pxe": pxe}}},
            "images": {"aliyun": {"regions": {"eu-central-1": {"release": version, "image": format!("m-{version}")}}}}
        }}
    });
    srv.put(
        "/streams/teststream.json",
        serde_json::to_vec_pretty(&doc).unwrap().as_slice(),
    );
    srv.url("/streams/teststream.json")
}

fn fetcher(root: &Path) -> Fetcher {
    Fetcher {
        cache: Cache::new(root),
        client: images::client::Client::new(None).unwrap(),
        options: Options {
            jobs: 3,
            retries: 3,
            backoff: Duration::from_millis(20),
            stall: Duration::from_secs(5),
        },
        progress: Arc::new(images::progress::Quiet),
    }
}

fn request(url: &str, version: &str) -> Request {
    Request {
        stream: Some(STREAM.into()),
        version: version.into(),
        arch: "x86_64".into(),
        platform: "metal".into(),
        formats: vec!["pxe".into()],
        source: Some(Source::Url(url.into())),
        signing: Default::default(),
    }
}

/// Every file below `dir`, relative, sorted.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, d: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    let mut v = Vec::new();
    walk(dir, dir, &mut v);
    v.sort();
    v
}

#[tokio::test]
async fn fetch_places_verified_files_and_a_second_fetch_makes_no_request() {
    let srv = Server::start().await;
    let url = publish(&srv, "1.0", None);
    let root = tempfile::tempdir().unwrap();
    let f = fetcher(root.path());

    let out = f.fetch(&request(&url, "latest")).await.unwrap();
    assert_eq!(
        out,
        Outcome::Fetched {
            dir: "teststream/1.0/x86_64/metal".into(),
            version: "1.0".into(),
            files: 3,
            bytes: 620_011
        }
    );
    let dir = root.path().join("teststream/1.0/x86_64/metal");
    for (_, name, bytes) in artifacts("1.0") {
        assert_eq!(std::fs::read(dir.join(&name)).unwrap(), bytes, "{name}");
    }
    let m = catalog::read_manifest(&dir).unwrap();
    assert_eq!(
        m.files.iter().map(|f| f.role.as_str()).collect::<Vec<_>>(),
        ["kernel", "initramfs", "rootfs"]
    );
    assert!(m
        .files
        .iter()
        .all(|f| f.signature.as_deref().is_some_and(|s| s.ends_with(".sig"))));
    assert_eq!(
        catalog::read_latest(root.path(), STREAM).unwrap()["x86_64/metal"],
        "1.0"
    );
    assert!(root.path().join("teststream/1.0/stream.json").is_file());
    assert!(
        !tree(root.path())
            .iter()
            .any(|p| p.contains(".part") || p.contains(".tmp.")),
        "{:?}",
        tree(root.path())
    );
    let first = srv.count();
    assert_eq!(first, 4, "stream document + 3 artifacts: {:?}", srv.seen());

    // Same set by version: nothing at all goes to the network.
    let out = f.fetch(&request(&url, "1.0")).await.unwrap();
    assert_eq!(
        out,
        Outcome::Cached {
            dir: "teststream/1.0/x86_64/metal".into(),
            version: "1.0".into()
        }
    );
    assert_eq!(
        srv.count(),
        first,
        "second fetch made requests: {:?}",
        &srv.seen()[first..]
    );

    // By "latest": only the stream document is asked (is there a newer release?).
    let out = f.fetch(&request(&url, "latest")).await.unwrap();
    assert!(matches!(out, Outcome::Cached { .. }), "{out:?}");
    assert_eq!(
        srv.seen()[first..]
            .iter()
            .map(|s| s.path.as_str())
            .collect::<Vec<_>>(),
        ["/streams/teststream.json"]
    );
}

#[tokio::test]
async fn a_cut_transfer_resumes_with_range_and_if_range() {
    let srv = Server::start().await;
    let url = publish(&srv, "2.0", None);
    let rootfs = format!("/builds/2.0/x86_64/{}", artifacts("2.0")[2].1);
    // Two cuts in a row: the first attempt stops at 100000 bytes, the
    // second (resuming) 50000 bytes further; the third finishes.
    srv.cut(&rootfs, 100_000, 2);
    let root = tempfile::tempdir().unwrap();
    fetcher(root.path())
        .fetch(&request(&url, "latest"))
        .await
        .unwrap();

    let got = std::fs::read(
        root.path()
            .join("teststream/2.0/x86_64/metal")
            .join(&artifacts("2.0")[2].1),
    )
    .unwrap();
    assert_eq!(got, artifacts("2.0")[2].2);
    let asks: Vec<_> = srv
        .seen()
        .into_iter()
        .filter(|s| s.path == rootfs)
        .collect();
    assert_eq!(asks.len(), 3, "{asks:?}");
    assert_eq!(asks[0].range, None);
    assert_eq!(asks[1].range.as_deref(), Some("bytes=100000-"));
    assert_eq!(asks[2].range.as_deref(), Some("bytes=200000-"));
    // If-Range carries the ETag of the first answer, so a changed file restarts.
    assert!(
        asks[1]
            .if_range
            .as_deref()
            .is_some_and(|v| v.starts_with('"')),
        "{asks:?}"
    );
}

#[tokio::test]
async fn sha256_mismatch_is_refused_and_nothing_is_left_visible() {
    let srv = Server::start().await;
    let url = publish(&srv, "3.0", Some("initramfs"));
    let root = tempfile::tempdir().unwrap();
    let err = fetcher(root.path())
        .fetch(&request(&url, "latest"))
        .await
        .unwrap_err();
    assert!(matches!(err, FetchError::Sha256 { .. }), "{err}");
    assert!(err.to_string().contains("nothing was kept"), "{err}");
    let files = tree(root.path());
    let initramfs = &artifacts("3.0")[1].1;
    assert!(
        !files.iter().any(|p| p.contains(initramfs.as_str())),
        "the bad file (or its part) is still there: {files:?}"
    );
    assert!(
        !files.iter().any(|p| p.ends_with(catalog::MANIFEST)),
        "a manifest was written: {files:?}"
    );
    assert!(
        catalog::read_latest(root.path(), STREAM).is_err(),
        "latest must not point at a broken set"
    );
    // A fresh download that mismatches is not retried: one GET of it only.
    assert_eq!(
        srv.seen()
            .iter()
            .filter(|s| s.path.ends_with(initramfs.as_str()))
            .count(),
        1
    );
    // And the site sees no set.
    let r = catalog::CatalogRef {
        stream: STREAM.into(),
        version: "3.0".into(),
        arch: "x86_64".into(),
        platform: "metal".into(),
        stream_url: None,
    };
    assert!(catalog::resolve(root.path(), &r).is_err());
}

#[tokio::test]
async fn an_explicit_version_the_stream_no_longer_names_is_a_clear_error() {
    let srv = Server::start().await;
    let url = publish(&srv, "5.0", None);
    let root = tempfile::tempdir().unwrap();
    let err = fetcher(root.path())
        .fetch(&request(&url, "4.0"))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("is at 5.0; 4.0 is not in the cache"),
        "{err}"
    );
}

#[tokio::test]
async fn verify_finds_a_corrupted_file() {
    let srv = Server::start().await;
    let url = publish(&srv, "6.0", None);
    let root = tempfile::tempdir().unwrap();
    let f = fetcher(root.path());
    f.fetch(&request(&url, "latest")).await.unwrap();
    let c = Cache::new(root.path());
    let sets = c.list().unwrap();
    assert_eq!(sets.len(), 1);
    assert!(c
        .check_set(&sets[0].dir, &sets[0].manifest, Depth::Full)
        .is_empty());
    // Flip one byte in place: same size, same inode.
    let kernel = root.path().join(&sets[0].dir).join(&artifacts("6.0")[0].1);
    let mut bytes = std::fs::read(&kernel).unwrap();
    bytes[1000] ^= 0xff;
    std::fs::write(&kernel, &bytes).unwrap();
    let problems = c.check_set(&sets[0].dir, &sets[0].manifest, Depth::Full);
    assert!(
        matches!(problems.as_slice(), [FileProblem::Sha256 { .. }]),
        "{problems:?}"
    );
    // A fetch no longer takes the set as cached: it downloads the kernel again.
    let before = srv.count();
    let out = f.fetch(&request(&url, "6.0")).await.unwrap();
    assert!(matches!(out, Outcome::Fetched { .. }), "{out:?}");
    assert_eq!(std::fs::read(&kernel).unwrap(), artifacts("6.0")[0].2);
    assert!(srv.seen()[before..]
        .iter()
        .any(|s| s.path.ends_with(&artifacts("6.0")[0].1)));
}

/// A copy of the lab site in `dir` whose x86_64 image set is a catalog set.
fn write_site(dir: &Path, version: &str) {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab");
    let text = std::fs::read_to_string(lab.join("site.yaml")).unwrap();
    let text = text
        .replace("stateDir: ../../target/lab-state", "stateDir: state")
        .replace("root: ../../target/lab-images", "root: images")
        .replace("root: ../../target/lab-tftp", "root: tftp")
        .replace(
            "    lab-x86_64:\n      arch: x86_64\n      kernel: lab/kernel\n      initramfs: lab/initramfs\n",
            &format!("    coreos:\n      catalog: {{ stream: {STREAM}, version: \"{version}\", arch: x86_64 }}\n"),
        );
    assert!(
        text.contains("catalog:"),
        "the lab site changed shape; update this test"
    );
    std::fs::write(dir.join("site.yaml"), text).unwrap();
    std::fs::create_dir_all(dir.join("ignition")).unwrap();
    for e in std::fs::read_dir(lab.join("ignition")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join("ignition").join(e.file_name())).unwrap();
    }
}

#[tokio::test]
async fn gc_keeps_what_a_site_references() {
    let srv = Server::start().await;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("images");
    let f = fetcher(&root);
    let url = publish(&srv, "7.0", None);
    f.fetch(&request(&url, "latest")).await.unwrap();
    let url = publish(&srv, "8.0", None);
    f.fetch(&request(&url, "latest")).await.unwrap();
    // A local-path image set's files below the root are not the cache's to remove.
    std::fs::create_dir_all(root.join("lab-ppc64le")).unwrap();
    std::fs::write(root.join("lab-ppc64le/vmlinux"), b"local").unwrap();

    write_site(dir.path(), "7.0");
    let site = site::load(&dir.path().join("site.yaml")).unwrap();
    let keep = cache::referenced_sets(&site);
    assert_eq!(
        keep.iter().collect::<Vec<_>>(),
        ["teststream/7.0/x86_64/metal"]
    );

    let c = Cache::new(&root);
    assert_eq!(c.gc(&keep, true).unwrap(), ["teststream/8.0/x86_64/metal"]);
    assert_eq!(c.list().unwrap().len(), 2, "dry run removed something");
    assert_eq!(c.gc(&keep, false).unwrap(), ["teststream/8.0/x86_64/metal"]);
    let left: Vec<String> = c.list().unwrap().into_iter().map(|s| s.dir).collect();
    assert_eq!(left, ["teststream/7.0/x86_64/metal"]);
    assert!(
        !root.join("teststream/8.0").exists(),
        "empty version directory left behind"
    );
    // latest pointed at the removed 8.0: the entry is gone with it.
    assert!(catalog::read_latest(&root, STREAM).is_err());
    assert!(root.join("lab-ppc64le/vmlinux").is_file());
    // The kept set is intact.
    assert!(c
        .check_set(&left[0], &c.list().unwrap()[0].manifest, Depth::Full)
        .is_empty());
}

#[test]
fn a_real_rhcos_stream_document_parses() {
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rhcos-4.14-stream.json"),
    )
    .unwrap();
    let doc = Stream::parse(&bytes).unwrap();
    assert_eq!(doc.stream, "rhcos-4.14");
    assert_eq!(doc.metadata.last_modified, "2023-10-23T12:27:38Z");
    assert_eq!(
        doc.architectures.keys().collect::<Vec<_>>(),
        ["ppc64le", "x86_64"]
    );
    let metal = doc.platform("x86_64", "metal").unwrap();
    assert_eq!(metal.release, "414.92.202310210434-0");
    assert_eq!(
        metal.formats.keys().collect::<Vec<_>>(),
        ["4k.raw.gz", "iso", "pxe", "raw.gz"]
    );
    let pxe = doc.select("x86_64", "metal", &["pxe".into()]).unwrap();
    let names: Vec<_> = pxe
        .iter()
        .map(|s| (s.role, s.artifact.file_name()))
        .collect();
    assert_eq!(
        names,
        [
            ("kernel", "rhcos-414.92.202310210434-0-live-kernel-x86_64"),
            (
                "initramfs",
                "rhcos-414.92.202310210434-0-live-initramfs.x86_64.img"
            ),
            (
                "rootfs",
                "rhcos-414.92.202310210434-0-live-rootfs.x86_64.img"
            ),
        ]
    );
    let raw = doc.select("ppc64le", "metal", &["raw.gz".into()]).unwrap();
    assert!(raw[0].artifact.uncompressed_sha256.is_some());
    assert!(raw[0]
        .artifact
        .signature
        .as_deref()
        .unwrap()
        .ends_with(".raw.gz.sig"));
    let ova = doc
        .select("ppc64le", "powervs", &["ova.gz".into()])
        .unwrap();
    assert_eq!(ova[0].role, "disk");

    let cloud = CloudCatalog::from_stream(&doc);
    let v = "414.92.202310210434-0";
    let pv = cloud.image_id("powervs", "us-south", v, "ppc64le").unwrap();
    assert_eq!(pv.id, "rhcos-414-92-202310210434-0-ppc64le-powervs.ova.gz");
    assert_eq!(pv.bucket.as_deref(), Some("rhcos-powervs-images-us-south"));
    assert_eq!(
        cloud
            .image_id("aliyun", "eu-central-1", v, "amd64")
            .unwrap()
            .id,
        "m-gw8a2pfr6sa9ei9ifcw3"
    );
    assert_eq!(
        cloud.image_id("aws", "us-east-1", v, "x86_64").unwrap().id,
        "ami-0d0a4a6e3f4e5b2c1"
    );
    assert_eq!(
        cloud.image_id("gcp", "global", v, "x86_64").unwrap().id,
        "projects/rhcos-cloud/global/images/rhcos-414-92-202310210434-0-gcp-x86-64"
    );
    let e = cloud
        .image_id("powervs", "mars-1", v, "ppc64le")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("that version is in: eu-de, us-east, us-south"),
        "{e}"
    );
    let e = cloud
        .image_id("powervs", "us-east", "1.0", "ppc64le")
        .unwrap_err()
        .to_string();
    assert!(e.contains("known versions: 414.92.202310210434-0"), "{e}");
}

#[test]
fn gardener_cloud_profile_config_overrides_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    // Seed document's example (Gardener's Alicloud extension docs).
    let file = dir.path().join("cloudprofile.yaml");
    std::fs::write(
        &file,
        "apiVersion: alicloud.provider.extensions.gardener.cloud/v1alpha1\nkind: CloudProfileConfig\nmachineImages:\n- name: coreos\n  versions:\n  \
         - version: 2023.4.0\n    regions:\n    - name: eu-central-1\n      id: coreos_2023_4_0_64_30G_alibase_20190319.vhd\n",
    )
    .unwrap();
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rhcos-4.14-stream.json"),
    )
    .unwrap();
    let mut cloud = CloudCatalog::from_stream(&Stream::parse(&bytes).unwrap());
    cloud.merge_cloud_profile_config("aliyun", &file).unwrap();
    assert_eq!(
        cloud
            .image_id("aliyun", "eu-central-1", "2023.4.0", "x86_64")
            .unwrap()
            .id,
        "coreos_2023_4_0_64_30G_alibase_20190319.vhd"
    );
    assert_eq!(
        cloud
            .image_id("aliyun", "eu-central-1", "414.92.202310210434-0", "x86_64")
            .unwrap()
            .id,
        "m-gw8a2pfr6sa9ei9ifcw3"
    );

    let exported = cloud.to_cloud_profile_config(
        "aliyun",
        "alicloud.provider.extensions.gardener.cloud/v1alpha1",
    );
    let out = dir.path().join("exported.yaml");
    std::fs::write(&out, serde_yaml_ng::to_string(&exported).unwrap()).unwrap();
    let mut back = CloudCatalog::default();
    back.merge_cloud_profile_config("aliyun", &out).unwrap();
    let mut a: Vec<_> = cloud
        .images
        .iter()
        .filter(|i| i.provider == "aliyun")
        .map(|i| (&i.region, &i.version, &i.arch, &i.id))
        .collect();
    let mut b: Vec<_> = back
        .images
        .iter()
        .map(|i| (&i.region, &i.version, &i.arch, &i.id))
        .collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);

    // Unknown keys in an operator's file are errors, not silently dropped.
    std::fs::write(&file, "machineImages:\n- name: coreos\n  versionz: []\n").unwrap();
    let e = CloudCatalog::default()
        .merge_cloud_profile_config("aliyun", &file)
        .unwrap_err()
        .to_string();
    assert!(e.contains("versionz"), "{e}");
}

#[tokio::test]
async fn the_cache_maps_cloud_ids_of_every_fetched_version() {
    let srv = Server::start().await;
    let root = tempfile::tempdir().unwrap();
    let f = fetcher(root.path());
    for v in ["9.0", "9.1"] {
        let url = publish(&srv, v, None);
        f.fetch(&request(&url, "latest")).await.unwrap();
    }
    let cloud = CloudCatalog::from_cache(&Cache::new(root.path())).unwrap();
    assert_eq!(
        cloud
            .image_id("aliyun", "eu-central-1", "9.0", "x86_64")
            .unwrap()
            .id,
        "m-9.0"
    );
    assert_eq!(
        cloud
            .image_id("aliyun", "eu-central-1", "9.1", "x86_64")
            .unwrap()
            .id,
        "m-9.1"
    );
}

mod bootd_e2e {
    use super::*;
    use http_body_util::{BodyExt, Empty};
    use hyper_util::client::legacy::Client as Hyper;
    use hyper_util::rt::TokioExecutor;

    async fn get(addr: std::net::SocketAddr, path: &str, range: Option<&str>) -> (u16, Vec<u8>) {
        let client: Hyper<_, Empty<bytes::Bytes>> =
            Hyper::builder(TokioExecutor::new()).build_http();
        let mut req = http::Request::get(format!("http://{addr}{path}"))
            .body(Empty::new())
            .unwrap();
        if let Some(r) = range {
            req.headers_mut()
                .insert(http::header::RANGE, r.parse().unwrap());
        }
        let resp = client.request(req).await.unwrap();
        let status = resp.status().as_u16();
        (
            status,
            resp.into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .to_vec(),
        )
    }

    #[tokio::test]
    async fn bootd_serves_the_bytes_the_catalog_holds_and_refuses_a_broken_cache() {
        let srv = Server::start().await;
        let dir = tempfile::tempdir().unwrap();
        write_site(dir.path(), "latest");
        let site_path = dir.path().join("site.yaml");

        // Not fetched yet: the site loads (fetch and gc need it), bootd refuses.
        let site = site::load(&site_path).unwrap();
        let err = bootd::prepare(&boot_config(site), false)
            .unwrap_err()
            .to_string();
        let cmd = format!(
            "images fetch --site {} --set coreos",
            std::fs::canonicalize(&site_path).unwrap().display()
        );
        assert!(
            err.contains("images.sets.coreos") && err.contains(&cmd),
            "{err}"
        );

        // A pinned version not fetched yet is watched at its manifest-to-be,
        // so a running bootd reloads once the fetch completes.
        write_site(dir.path(), "10.0");
        let pinned = site::load(&site_path).unwrap();
        assert!(pinned
            .watched_files()
            .iter()
            .any(|p| p.ends_with("teststream/10.0/x86_64/metal/manifest.json")));
        write_site(dir.path(), "latest");

        let url = publish(&srv, "10.0", None);
        fetcher(&dir.path().join("images"))
            .fetch(&request(&url, "latest"))
            .await
            .unwrap();
        let site = site::load(&site_path).unwrap();
        let set = &site.images.sets["coreos"];
        assert_eq!(
            set.kernel,
            format!("teststream/10.0/x86_64/metal/{}", artifacts("10.0")[0].1)
        );
        assert!(site
            .watched_files()
            .iter()
            .any(|p| p.ends_with("teststream/latest.json")));

        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = http.local_addr().unwrap();
        let mut config = boot_config(site.clone());
        config.poll = None;
        config.grace = Duration::from_millis(200);
        let app = bootd::prepare(&config, false).unwrap();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let sockets = bootd::Sockets::http_only(http, None);
        let task = tokio::spawn(bootd::run_app(app, config, sockets, shutdown.clone()));

        for (role, path) in [
            ("kernel", Some(&set.kernel)),
            ("initramfs", Some(&set.initramfs)),
            ("rootfs", set.rootfs.as_ref()),
        ] {
            let path = path.unwrap_or_else(|| panic!("no {role} in the resolved set"));
            let want = std::fs::read(site.images.root.join(path)).unwrap();
            let (status, body) = get(addr, &format!("/images/{path}"), None).await;
            assert_eq!(status, 200, "{role}");
            assert_eq!(
                sha(&body),
                sha(&want),
                "{role}: bootd served other bytes than the cache holds"
            );
            assert_eq!(
                body,
                artifacts("10.0").iter().find(|a| a.0 == role).unwrap().2,
                "{role}"
            );
        }
        let (status, body) = get(
            addr,
            &format!("/images/{}", set.rootfs.as_ref().unwrap()),
            Some("bytes=399000-"),
        )
        .await;
        assert_eq!(status, 206);
        assert_eq!(body, artifacts("10.0")[2].2[399_000..]);
        // The node's boot script points at the cached files.
        let node = site.node("bootstrap").unwrap();
        let urls = bootd::render::NodeUrls::new(&site, &site.host.http.url, node, "tok");
        let script = bootd::render::ipxe::node(&site, node, &urls);
        assert!(
            script.contains(&format!("/images/{}", set.kernel)),
            "{script}"
        );
        assert!(
            script.contains(&format!(
                "coreos.live.rootfs_url={}/images/{}",
                site.host.http.url,
                set.rootfs.as_ref().unwrap()
            )),
            "{script}"
        );
        shutdown.cancel();
        task.await.unwrap().unwrap();

        // A corrupted cached file: bootd refuses to start, naming the file and the fix.
        let kernel = site.images.root.join(&set.kernel);
        let mut bytes = std::fs::read(&kernel).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&kernel, &bytes).unwrap();
        let err = bootd::prepare(&boot_config(site::load(&site_path).unwrap()), false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("sha256")
                && err.contains(&artifacts("10.0")[0].1)
                && err.contains("fetch it again with: images fetch"),
            "{err}"
        );
    }
}

mod tftp_root {
    use images::tftp_root::{assemble, Sources};
    use site::Arch;
    use std::path::{Path, PathBuf};

    #[test]
    fn ipxe_files_are_put_in_place_once_and_missing_sources_are_named() {
        let src = tempfile::tempdir().unwrap();
        for f in ["ipxe.efi", "snponly.efi", "undionly.kpxe"] {
            std::fs::write(src.path().join(f), format!("stand-in {f}")).unwrap();
        }
        let dst = tempfile::tempdir().unwrap();
        let sources = Sources {
            ipxe_dir: src.path().to_path_buf(),
            ..Default::default()
        };
        let r = assemble(dst.path(), &[Arch::X86_64], &sources).unwrap();
        assert_eq!(r.updated, ["ipxe.efi", "snponly.efi", "undionly.kpxe"]);
        assert_eq!(
            std::fs::read(dst.path().join("snponly.efi")).unwrap(),
            b"stand-in snponly.efi"
        );
        let mtime = std::fs::metadata(dst.path().join("ipxe.efi"))
            .unwrap()
            .modified()
            .unwrap();
        let r = assemble(dst.path(), &[Arch::X86_64], &sources).unwrap();
        assert_eq!((r.updated.len(), r.unchanged), (0, 3));
        assert_eq!(
            std::fs::metadata(dst.path().join("ipxe.efi"))
                .unwrap()
                .modified()
                .unwrap(),
            mtime
        );

        let e = assemble(dst.path(), &[Arch::Aarch64], &sources)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--ipxe-arm64"), "{e}");
        let e = assemble(dst.path(), &[Arch::Ppc64le], &sources)
            .unwrap_err()
            .to_string();
        assert!(e.contains("grub-ieee1275-bin"), "{e}");
        let e = assemble(
            dst.path(),
            &[Arch::X86_64],
            &Sources {
                ipxe_dir: "/nonexistent".into(),
                ..Default::default()
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("ipxe package"), "{e}");
    }

    /// The powerpc-ieee1275 module directory tests/lab/tftp-root.sh unpacks
    /// from the ppc64el grub-ieee1275-bin, when a lab run left it here.
    fn lab_grub_modules() -> Option<PathBuf> {
        let cache = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../target/lab-cache/grub-ieee1275-bin-ppc64el");
        std::fs::read_dir(cache)
            .ok()?
            .flatten()
            .map(|e| e.path().join("usr/lib/grub/powerpc-ieee1275"))
            .find(|p| p.join("kernel.img").is_file())
    }

    #[test]
    fn core_elf_is_reproducible_and_matches_the_lab_script() {
        let Some(moddir) = lab_grub_modules().filter(|_| {
            std::process::Command::new("grub-mkimage")
                .arg("--version")
                .output()
                .is_ok()
        }) else {
            // Needs grub-mkimage and the ppc64el modules (tests/lab/deps.sh, tftp-root.sh).
            eprintln!("SKIPPED: no grub-mkimage or no ppc64el GRUB modules under target/lab-cache");
            return;
        };
        let sources = Sources {
            grub_ieee1275_dir: Some(moddir.clone()),
            ..Default::default()
        };
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        assemble(a.path(), &[Arch::Ppc64le], &sources).unwrap();
        let r = assemble(b.path(), &[Arch::Ppc64le], &sources).unwrap();
        let core = std::fs::read(a.path().join("core.elf")).unwrap();
        assert!(core.starts_with(b"\x7fELF"));
        assert_eq!(
            core,
            std::fs::read(b.path().join("core.elf")).unwrap(),
            "core.elf is not reproducible"
        );
        assert!(r
            .updated
            .iter()
            .any(|f| f == "grub/powerpc-ieee1275/normal.mod"));
        assert!(b.path().join("grub/powerpc-ieee1275/command.lst").is_file());
        // Same inputs as the lab script (GRUB_NET_TRIES 8): same bytes as the core.elf it built.
        let lab = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/lab-tftp/core.elf");
        if let Ok(theirs) = std::fs::read(&lab) {
            assert_eq!(core, theirs, "differs from {}", lab.display());
        }
    }
}

/// bootd's configuration with this crate's cache check, as the executables
/// (appliance/src/lib.rs) give it.
fn boot_config(site: site::Site) -> bootd::Config {
    let mut c = bootd::Config::new(site);
    c.check_images = Some(std::sync::Arc::new(|s: &site::Site| {
        images::check_site(s).map_err(|e| e.to_string())
    }));
    c
}
