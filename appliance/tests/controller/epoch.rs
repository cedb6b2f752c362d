//! A node deleted and made again, or reinstalled through the API, is
//! another incarnation of it (its epoch): tokens issued to the earlier one,
//! even unspent, do not open the new one's Ignition.

use super::{after, curl_from, tuning, until, write_site, Bootd, Fake};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_of_an_earlier_incarnation_are_void() {
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_site(dir.path(), &f.url(), &f.url(), &f.url(), "127.0.0.1:0");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "    dnsServers: [10.77.0.1]\n",
        "    dnsServers: [10.77.0.1]\n  - name: lo\n    subnet: 127.0.0.0/8\n    gateway: 127.0.0.1\n",
    );
    std::fs::write(&path, text).unwrap();
    let b = Bootd::start_site(dir, &path, tuning()).await;
    let base = format!("http://{}", b.http);
    let node = json!({"name": "w-9", "role": "worker", "ip": "127.0.0.69",
        "macs": ["52:54:00:77:09:09"], "live": true, "kernelArgs": ["console=ttyS0"]});
    let served = || b.app.live.load().site.node("w-9").map(|n| n.epoch);
    // A token of the node, as its script (fetched from its address) has it.
    let token = || {
        let (st, script) = curl_from("127.0.0.69", "GET", &format!("{base}/ipxe/w-9.ipxe"), None);
        assert_eq!(st, 200, "{script}");
        after(&script, "/ignition/w-9?token=").to_string()
    };
    // Its Ignition from a neighbour, on `t`.
    let from_neighbour = |t: &str| {
        curl_from(
            "127.0.0.70",
            "GET",
            &format!("{base}/ignition/w-9?token={t}"),
            None,
        )
        .0
    };

    let (st, v) = b.create(node.clone()).await;
    assert_eq!(st, 201, "{v:#}");
    until("w-9 served", 10, async || served().is_some()).await;
    let first = served().unwrap();
    assert!(first > 0, "an API node has an epoch: {first}");
    let old = token();

    // Deleted and made again: the earlier incarnation's token is void.
    let (st, _) = b.call("DELETE", "/v1/nodes/w-9", None).await;
    assert_eq!(st, 202);
    until("w-9 gone", 10, async || served().is_none()).await;
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let (st, v) = b.create(node.clone()).await;
    assert_eq!(st, 201, "{v:#}");
    until("w-9 served again", 10, async || served().is_some()).await;
    assert!(served().unwrap() > first, "a new epoch");
    assert_eq!(
        from_neighbour(&old),
        404,
        "a token of the deleted incarnation"
    );
    // One of this incarnation works (once).
    let now = token();
    assert_eq!(from_neighbour(&now), 200);

    // Reinstalled through the API: the tokens of before are void.
    let before = token();
    let second = served().unwrap();
    let (st, v) = b.call("POST", "/v1/nodes/w-9/reinstall", None).await;
    assert_eq!(st, 200, "{v:#}");
    assert!(
        served().unwrap() > second,
        "the reinstall advanced the epoch"
    );
    assert_eq!(
        from_neighbour(&before),
        404,
        "a token of before the reinstall"
    );
    b.stop().await;
}
