//! `host.admission`: the admission limits, defaulted, set, and every bad
//! value reported at once with its key.

mod common;
use common::lab;
use site::Admission;
use std::time::Duration;

fn with(yaml: &str) -> Result<site::Site, String> {
    let (_d, path) = lab(|t| t.replace("host:\n", &format!("host:\n  admission: {yaml}\n")));
    site::load(&path).map_err(|e| e.to_string())
}

#[test]
fn defaults_when_absent() {
    let (_d, path) = lab(|t| t);
    let a = site::load(&path).unwrap().host.admission;
    assert_eq!(a, Admission::default());
    assert_eq!(a.tftp_transfers, 256);
    assert_eq!(a.tftp_queue, 16_384);
    assert_eq!(a.tftp_per_source, 8);
    assert_eq!(a.image_transfers, Some(64));
    assert_eq!(a.image_per_source, Some(8));
    assert_eq!(a.image_queue, 65_536);
    assert_eq!(a.http_connections, 16_384);
    assert_eq!(a.queue_wait, Duration::from_secs(30));
    assert_eq!(a.provisions, 20);
}

#[test]
fn every_key_set_and_zero_image_transfers_is_no_limit() {
    let a = with(
        "{tftpTransfers: 32, tftpQueue: 0, tftpPerSource: 2, imageTransfers: 0, imagePerSource: 0, imageQueue: 10, httpConnections: 100, queueWait: 2m, provisions: 3}",
    )
    .unwrap()
    .host
    .admission;
    assert_eq!(
        a,
        Admission {
            tftp_transfers: 32,
            tftp_queue: 0,
            tftp_per_source: 2,
            image_transfers: None,
            image_per_source: None,
            image_queue: 10,
            http_connections: 100,
            queue_wait: Duration::from_secs(120),
            provisions: 3,
        }
    );
    // A small TFTP limit lowers the per-source default with it.
    let a = with("{tftpTransfers: 4}").unwrap().host.admission;
    assert_eq!((a.tftp_transfers, a.tftp_per_source), (4, 4));
}

#[test]
fn bad_values_are_all_reported_with_their_keys() {
    let e = with(
        "{tftpTransfers: 5000, tftpPerSource: 0, imageTransfers: 200000, queueWait: 0s, provisions: 0, imageQueue: -1, tftpQueue: 70000}",
    )
    .unwrap_err();
    // imageQueue: -1 is a type error (serde): reported alone, before the rest.
    assert!(
        e.contains("host.admission.imageQueue") || e.contains("imageQueue"),
        "{e}"
    );
    let e = with(
        "{tftpTransfers: 5000, tftpPerSource: 0, imageTransfers: 200000, queueWait: 0s, provisions: 0, tftpQueue: 70000, httpConnections: 10}",
    )
    .unwrap_err();
    for (key, why) in [
        (
            "host.admission.tftpTransfers",
            "5000: from 1 to 400 (each transfer is a thread)",
        ),
        (
            "host.admission.tftpPerSource",
            "0: from 1 to 256 (at most tftpTransfers)",
        ),
        (
            "host.admission.imageTransfers",
            "200000: from 1 to 100000 (0: no limit)",
        ),
        (
            "host.admission.queueWait",
            "\"0s\": a duration from 1s to 10m",
        ),
        ("host.admission.provisions", "0: from 1 to 1000"),
        ("host.admission.tftpQueue", "70000: from 0 to 65536"),
        (
            "host.admission.httpConnections",
            "10: from 64 to 60000 (each is a descriptor: bootd's limit is 65 536)",
        ),
    ] {
        assert!(
            e.lines().any(|l| l.contains(key) && l.contains(why)),
            "{key}: {why} not in:\n{e}"
        );
    }
}

#[test]
fn an_unknown_admission_key_is_refused() {
    let e = with("{tftpTransfer: 10}").unwrap_err();
    assert!(e.contains("host.admission.tftpTransfer"), "{e}");
    assert!(e.contains("unknown key"), "{e}");
}
