//! The alibaba provider against tests/controller/ecs-fake.py: a stateful
//! ECS fake that checks every request against Alibaba's API metadata
//! (../shared/specs/alibaba-ecs) and verifies every signature with its own
//! implementation (Python's hmac/hashlib).

use controller::providers::alibaba::{self, Alibaba, InstanceSpec};
use controller::providers::{Http, MachineState, NodeRequest, Provider};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use testkit::ecs_fake::{tag, EcsFake as Fake, SECRET};

fn account(f: &Fake, secret_file: &std::path::Path) -> site::AlibabaAccount {
    site::AlibabaAccount {
        region_id: "cn-hangzhou".into(),
        endpoint: f.endpoint(),
        access_key_id: site::SecretRef::File(f.akid_file()),
        access_key_secret: site::SecretRef::File(secret_file.to_path_buf()),
        security_token: None,
        infra_id: Some("lab-x7k2p".into()),
        zones: vec!["cn-hangzhou-h".into(), "cn-hangzhou-i".into()],
        v_switches: [
            ("cn-hangzhou-h".to_string(), "vsw-h1".to_string()),
            ("cn-hangzhou-i".to_string(), "vsw-i1".to_string()),
        ]
        .into(),
        security_group_id: "sg-lab".into(),
        instance_types: [("master".to_string(), "ecs.g6.xlarge".to_string())].into(),
        system_disk: site::AlibabaDisk {
            category: "cloud_essd".into(),
            size_gib: 120,
            performance_level: Some("PL1".into()),
        },
        image_id: "m-rhcos418".into(),
        image_set: None,
        tags: [("team".to_string(), "platform".to_string())].into(),
    }
}

fn provider(f: &Fake) -> Alibaba {
    Alibaba::new(
        Http::new(Duration::from_secs(10)),
        &account(f, &f.secret_file()),
    )
    .unwrap()
}

fn node(name: &str, intent: &str) -> NodeRequest {
    NodeRequest {
        userdata: site::Secret(
            json!({"ignition": {"version": "3.2.0", "config": {"merge": [{"source": "https://10.77.0.1:8443/ignition/m?token=1.x"}]}}})
                .to_string(),
        ),
        intent: intent.into(),
        ..NodeRequest::bare(name, "lab")
    }
}

fn spec() -> Value {
    json!({"instanceType": "ecs.g6.xlarge", "imageId": "m-rhcos418",
           "systemDisk": {"category": "cloud_essd", "size": 120, "performanceLevel": "PL1"}})
}

fn instances(f: &Fake) -> Vec<Value> {
    f.instances()
}

#[tokio::test]
async fn create_is_idempotent_tagged_found_and_deleted() {
    let f = Fake::start(0.3);
    let p = provider(&f);
    let n = node("master-0", "7-1795000000000");
    let m = Provider::create(&p, &n, &spec()).await.unwrap();
    assert!(matches!(m.state, MachineState::Pending(_)));
    // The same intent again (a create whose reply was lost): the same instance.
    let again = Provider::create(&p, &n, &spec()).await.unwrap();
    assert_eq!(again.id, m.id);
    let all = instances(&f);
    assert_eq!(all.len(), 1, "{all:#?}");
    let i = &all[0];
    assert_eq!(
        tag(i, "kubernetes.io/cluster/lab-x7k2p").as_deref(),
        Some("owned")
    );
    assert_eq!(tag(i, "openshift").as_deref(), Some("ISV Integration"));
    assert_eq!(tag(i, "bootd-node").as_deref(), Some("master-0"));
    assert_eq!(tag(i, "team").as_deref(), Some("platform"));
    assert_eq!(i["InstanceName"], "master-0");
    assert_eq!(i["HostName"], "master-0");
    assert_eq!(i["InstanceType"], "ecs.g6.xlarge");
    assert_eq!(i["ImageId"], "m-rhcos418");
    let zone = i["ZoneId"].as_str().unwrap();
    assert_eq!(
        Some(zone.to_string()),
        alibaba::zone_for(
            "master-0",
            &["cn-hangzhou-h".into(), "cn-hangzhou-i".into()]
        )
    );
    let ud = i["UserData"].as_str().unwrap();
    use base64::Engine as _;
    let ud = base64::engine::general_purpose::STANDARD
        .decode(ud)
        .unwrap();
    assert_eq!(String::from_utf8(ud).unwrap(), *n.userdata.expose());
    // find before create: after a crash, the instance is found by its tags.
    let found = p.find(&n).await.unwrap().expect("found by tags");
    assert_eq!(found.id, m.id);
    assert!(p.find(&node("master-1", "8-1")).await.unwrap().is_none());
    // Running after --start-after: Active, with its address and MAC.
    let t = Instant::now();
    let active = loop {
        let g = p.get(&m.id).await.unwrap().unwrap();
        if g.state == MachineState::Active {
            break g;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "never Running: {g:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        !active.addresses.is_empty() && !active.macs.is_empty(),
        "{active:?}"
    );
    // A new node of the same name (a new intent): a new instance.
    let fresh = Provider::create(&p, &node("master-0", "9-1795000000999"), &spec())
        .await
        .unwrap();
    assert_ne!(fresh.id, m.id);
    // Delete (Force): gone; deleting again succeeds.
    p.delete(&m.id).await.unwrap();
    assert!(p.get(&m.id).await.unwrap().is_none());
    p.delete(&m.id).await.unwrap();
    p.delete(&fresh.id).await.unwrap();
    assert!(instances(&f).is_empty());
    // Every request verified.
    let log = f.control("GET", "/_fake/requests", None);
    for r in log.as_array().unwrap() {
        assert_eq!(r["signatureVerified"], json!(true), "{r}");
    }
}

#[tokio::test]
async fn errors_are_transient_or_permanent_and_never_hold_the_secret() {
    let f = Fake::start(0.3);
    let p = provider(&f);
    let n = node("worker-0", "1-1");
    // Throttling, then 503: transient (the reconciler retries); nothing made.
    f.control(
        "POST",
        "/_fake/inject",
        Some(
            json!({"action": "RunInstances", "code": "Throttling.User", "status": 400, "count": 1}),
        ),
    );
    let e = Provider::create(&p, &n, &spec()).await.unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert!(
        e.to_string().contains("Throttling.User") && e.to_string().contains("RequestId"),
        "{e}"
    );
    f.control(
        "POST",
        "/_fake/inject",
        Some(json!({"action": "*", "code": "ServiceUnavailable", "status": 503, "count": 1, "retryAfter": 3})),
    );
    match p.find(&n).await.unwrap_err() {
        controller::providers::ProviderError::Transient { retry_after, .. } => {
            assert_eq!(retry_after, Some(Duration::from_secs(3)))
        }
        e => panic!("{e}"),
    }
    assert!(instances(&f).is_empty());
    // A parameter the API refuses: permanent, the API's code and RequestId.
    f.control(
        "POST",
        "/_fake/inject",
        Some(
            json!({"action": "RunInstances", "code": "InvalidParameter", "status": 400, "count": 1,
                    "message": "The specified parameter InstanceType is not valid."}),
        ),
    );
    let e = Provider::create(&p, &n, &spec()).await.unwrap_err();
    assert!(!e.is_transient(), "{e}");
    assert!(
        e.to_string().contains("InvalidParameter")
            && e.to_string().contains("InstanceType is not valid"),
        "{e}"
    );
    assert!(instances(&f).is_empty());
    // The secret one byte off: SignatureDoesNotMatch, permanent, no secret in it.
    let wrong = f.dir.path().join("wrong");
    let mut s = SECRET.to_string();
    s.replace_range(0..1, "c");
    std::fs::write(&wrong, &s).unwrap();
    let p2 = Alibaba::new(Http::new(Duration::from_secs(10)), &account(&f, &wrong)).unwrap();
    let e = p2.find(&n).await.unwrap_err();
    assert!(!e.is_transient(), "{e}");
    assert!(e.to_string().contains("SignatureDoesNotMatch"), "{e}");
    for text in [format!("{e}"), format!("{e:?}")] {
        assert!(!text.contains(SECRET) && !text.contains(&s), "{text}");
    }
    // User data over the limit: refused before anything is sent.
    let before = f
        .control("GET", "/_fake/requests", None)
        .as_array()
        .unwrap()
        .len();
    let mut big = node("worker-1", "2-1");
    big.userdata = site::Secret("x".repeat(30_000));
    let e = Provider::create(&p, &big, &spec()).await.unwrap_err();
    assert!(e.to_string().contains("ECS user data holds 32768"), "{e}");
    let after = f
        .control("GET", "/_fake/requests", None)
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after, "nothing sent");
    let reg = controller::providers::registration("alibaba").unwrap();
    assert!((reg.check_userdata)(&"x".repeat(30_000)).is_err());
    assert!((reg.check_userdata)("{}").is_ok());
}

#[tokio::test]
async fn owned_lists_every_page_of_this_cluster_only() {
    let f = Fake::start(0.3);
    let p = provider(&f);
    for i in 0..130 {
        f.control(
            "POST",
            "/_fake/instances",
            Some(
                json!({"RegionId": "cn-hangzhou", "InstanceName": format!("w-{i}"),
                        "Tags": [{"Key": "kubernetes.io/cluster/lab-x7k2p", "Value": "owned"}]}),
            ),
        );
    }
    for i in 0..3 {
        f.control(
            "POST",
            "/_fake/instances",
            Some(
                json!({"RegionId": "cn-hangzhou", "InstanceName": format!("other-{i}"),
                        "Tags": [{"Key": "kubernetes.io/cluster/other-9", "Value": "owned"}]}),
            ),
        );
    }
    let mine = p.owned_by("lab-x7k2p").await.unwrap();
    assert_eq!(mine.len(), 130);
    let mut names: Vec<&str> = mine.iter().map(|(_, n)| n.as_str()).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), 130, "each once across the pages");
    assert!(names.iter().all(|n| n.starts_with("w-")));
}

#[test]
fn node_specs_are_checked_with_every_problem() {
    let reg = controller::providers::registration("alibaba").unwrap();
    assert_eq!((reg.check_spec)(&spec()), Ok(vec![]));
    assert_eq!(
        (reg.boot_kind)(&spec()),
        controller::providers::BootKind::Image
    );
    let bad = json!({"instanceType": "g6", "imageId": "rhcos", "zoneId": "Zone A",
                     "systemDisk": {"category": "cloud_ssd", "size": 8, "performanceLevel": "PL1"}});
    let p = (reg.check_spec)(&bad).unwrap();
    assert_eq!(p.len(), 5, "{p:#?}");
    assert!(
        p.iter().any(|x| x.contains("below the image's 16 GiB")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|x| x.contains("PL1 is for category cloud_essd")),
        "{p:?}"
    );
    assert!(
        (reg.check_spec)(&json!({"flavor": "x"})).is_err(),
        "unknown keys refused"
    );
    let _: InstanceSpec = serde_json::from_value(spec()).unwrap();
}

/// An STS token travels signed in `x-acs-security-token`; without it, or
/// with another, the fake refuses; the token is in no error.
#[tokio::test]
async fn a_security_token_is_sent_and_signed() {
    const TOKEN: &str = "CAIS-sts-token-for-tests-7f3e";
    let f = Fake::start_with(0.3, Some(TOKEN));
    let token_file = f.dir.path().join("token");
    let mut a = account(&f, &f.secret_file());
    a.security_token = Some(site::SecretRef::File(token_file.clone()));
    let p = Alibaba::new(Http::new(Duration::from_secs(10)), &a).unwrap();
    let n = node("master-0", "1-1");
    assert!(p.find(&n).await.unwrap().is_none());
    let m = Provider::create(&p, &n, &spec()).await.unwrap();
    assert_eq!(p.find(&n).await.unwrap().unwrap().id, m.id);
    // No token: refused, permanently.
    let e = provider(&f).find(&n).await.unwrap_err();
    assert!(!e.is_transient(), "{e}");
    // Another token: refused; neither token in the error.
    let other = f.dir.path().join("other-token");
    std::fs::write(&other, "CAIS-someone-else").unwrap();
    a.security_token = Some(site::SecretRef::File(other));
    let e = Alibaba::new(Http::new(Duration::from_secs(10)), &a)
        .unwrap()
        .find(&n)
        .await
        .unwrap_err();
    assert!(!e.is_transient(), "{e}");
    let text = format!("{e} {e:?}");
    assert!(
        !text.contains(TOKEN) && !text.contains("CAIS-someone-else"),
        "{text}"
    );
}
