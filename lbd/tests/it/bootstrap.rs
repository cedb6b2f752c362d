//! Site-derived frontends: the api pool (bootstrap + masters) checked over
//! HTTPS `/readyz` against servers with rcgen certificates, and the bootstrap
//! lifecycle: drain, deadline, removal, persistence, automatic completion.

use crate::harness::*;
use lbd::state::BootstrapPhase;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;

/// A site with a bootstrap and two masters on 127.77.`net`.0/24; only the
/// api frontend is enabled.
fn site(dir: &Path, net: u8, lb_extra: &str) -> std::path::PathBuf {
    write(dir, "b.ign", r#"{"ignition":{"version":"3.2.0"}}"#);
    write(dir, "m.ign", r#"{"ignition":{"version":"3.2.0"}}"#);
    let text = format!(
        r#"cluster: {{ name: t, baseDomain: example.test }}
host:
  http: {{ listen: "127.0.0.1:1", url: "http://127.0.0.1:1" }}
networks: [ {{ subnet: 127.77.{net}.0/24 }} ]
vips: {{ api: 127.77.{net}.5, ingress: 127.77.{net}.6 }}
images: {{ root: images, sets: {{ s: {{ arch: x86_64, kernel: k, initramfs: i }} }} }}
nodes:
  - {{ name: bootstrap, role: bootstrap, live: true, macs: ["52:54:00:00:{net:02x}:10"], ip: 127.77.{net}.10 }}
  - {{ name: master-0, role: master, live: true, macs: ["52:54:00:00:{net:02x}:11"], ip: 127.77.{net}.11 }}
  - {{ name: master-1, role: master, live: true, macs: ["52:54:00:00:{net:02x}:12"], ip: 127.77.{net}.12 }}
ignition: {{ roles: {{ bootstrap: b.ign, master: m.ign }} }}
lb:
  check: {{ interval: 200ms, fastInterval: 100ms, timeout: 150ms }}
  frontends:
    machineConfig: {{ enabled: false }}
    ingressHttp: {{ enabled: false }}
    ingressHttps: {{ enabled: false }}
{lb_extra}"#
    );
    write(dir, "site.yaml", &text)
}

struct Cluster {
    bootstrap: Backend,
    masters: Vec<Backend>,
    tls: Arc<rustls::ClientConfig>,
}

async fn cluster(net: u8) -> Cluster {
    let ip = |h: u8| format!("127.77.{net}.{h}");
    let (acc, _) = tls_acceptor(&[&ip(10), &ip(11), &ip(12)]);
    let at = |h: u8| -> SocketAddr { format!("{}:6443", ip(h)).parse().unwrap() };
    let bootstrap = Backend::start_tls("bootstrap", at(10), acc.clone()).await;
    let masters = vec![
        Backend::start_tls("master-0", at(11), acc.clone()).await,
        Backend::start_tls("master-1", at(12), acc).await,
    ];
    Cluster {
        bootstrap,
        masters,
        tls: client_config(),
    }
}

fn client_config() -> Arc<rustls::ClientConfig> {
    // The client side of the test trusts anything: it checks which backend answers.
    lbd::probe::insecure_client_config()
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

async fn connect_tls(addr: SocketAddr, tls: &Arc<rustls::ClientConfig>) -> Tls {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("api.t.example.test").unwrap();
    tokio_rustls::TlsConnector::from(Arc::clone(tls))
        .connect(name, tcp)
        .await
        .unwrap()
}

async fn api_get(lb: &Lb, c: &Cluster) -> String {
    let mut s = connect_tls(lb.addr("api"), &c.tls).await;
    get_on(&mut s, true).await.unwrap()
}

async fn all_up(lb: &Lb, c: &Cluster) {
    for b in std::iter::once(&c.bootstrap).chain(&c.masters) {
        wait_for(Duration::from_secs(3), || {
            lb.backend("api", b.addr)
                .is_some_and(|x| x.healthy() && x.check_latency() > Duration::ZERO)
        })
        .await;
    }
}

#[tokio::test]
async fn https_readyz_checks_take_a_failing_api_server_out() {
    let c = cluster(1).await;
    let dir = tempfile::tempdir().unwrap();
    let lb = Lb::start(lbd::Source::Site(site(dir.path(), 1, "")), None).await;
    all_up(&lb, &c).await;
    assert!(
        c.masters[0]
            .probes
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1,
        "no /readyz probe over TLS"
    );
    c.masters[0]
        .healthy
        .store(false, std::sync::atomic::Ordering::Relaxed);
    let m0 = lb.backend("api", c.masters[0].addr).unwrap();
    let took = wait_for(Duration::from_secs(3), || !m0.healthy()).await;
    assert!(
        took <= Duration::from_millis(600 + 150),
        "detection took {took:?}"
    );
    assert!(m0.reason().contains("HTTP 503"), "{}", m0.reason());
    for _ in 0..12 {
        assert_ne!(api_get(&lb, &c).await, "master-0");
    }
}

#[tokio::test]
async fn bootstrap_completion_drains_then_removes_it() {
    let c = cluster(2).await;
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let lb = Lb::start(
        lbd::Source::Site(site(dir.path(), 2, "")),
        Some(state.path()),
    )
    .await;
    all_up(&lb, &c).await;
    assert_eq!(lb.lbd.app.bootstrap_phase(), BootstrapPhase::Serving);
    // A long-lived connection on the bootstrap node (round robin: one of three).
    let mut held = None;
    for _ in 0..3 {
        let mut s = connect_tls(lb.addr("api"), &c.tls).await;
        if get_on(&mut s, false).await.unwrap() == "bootstrap" {
            held = Some(s);
            break;
        }
    }
    let mut held = held.expect("no connection reached the bootstrap node");
    // A browser on the host sent there by another site (its form or fetch
    // carries Origin / Sec-Fetch-Site): refused, nothing changes.
    for h in [
        "Origin: http://evil.example\r\n",
        "Sec-Fetch-Site: cross-site\r\n",
    ] {
        let (st, body) = lb.admin_with("POST", "/bootstrap/complete", h).await;
        assert_eq!(st, 403, "{h}: {body}");
        assert_eq!(lb.lbd.app.bootstrap_phase(), BootstrapPhase::Serving);
    }
    let (st, body) = lb.admin("POST", "/bootstrap/complete").await;
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("\"draining\""), "{body}");
    let boot = lb.backend("api", c.bootstrap.addr).unwrap();
    assert!(boot.draining());
    // No new connection reaches it; the open one goes on.
    for _ in 0..12 {
        assert_ne!(api_get(&lb, &c).await, "bootstrap");
    }
    assert_eq!(get_on(&mut held, false).await.unwrap(), "bootstrap");
    assert!(state.path().join(lbd::BOOTSTRAP_MARKER).exists());
    // Completing again changes nothing.
    assert_eq!(lb.admin("POST", "/bootstrap/complete").await.0, 200);
    drop(held);
    wait_for(Duration::from_secs(3), || {
        lb.lbd.app.bootstrap_phase() == BootstrapPhase::Removed
    })
    .await;
    assert!(lb.backend("api", c.bootstrap.addr).is_none());
    // Reloads keep it out, and so does a restart with the same state directory.
    lb.rewrite(&std::fs::read_to_string(&lb.path).unwrap())
        .await;
    assert!(lb.backend("api", c.bootstrap.addr).is_none());
    drop(lb);
    let lb = Lb::start(
        lbd::Source::Site(dir.path().join("site.yaml")),
        Some(state.path()),
    )
    .await;
    assert!(lb.backend("api", c.bootstrap.addr).is_none());
    assert_eq!(lb.lbd.app.bootstrap_phase(), BootstrapPhase::Removed);
}

#[tokio::test]
async fn drain_deadline_closes_what_is_left() {
    let c = cluster(3).await;
    let dir = tempfile::tempdir().unwrap();
    let lb = Lb::start(
        lbd::Source::Site(site(
            dir.path(),
            3,
            "  bootstrap: { drainTimeout: 500ms }\n",
        )),
        None,
    )
    .await;
    all_up(&lb, &c).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = connect_tls(lb.addr("api"), &c.tls).await;
        let who = get_on(&mut s, false).await.unwrap();
        held.push((s, who));
    }
    assert!(held.iter().any(|(_, w)| w == "bootstrap"));
    let t0 = std::time::Instant::now();
    assert_eq!(
        lb.lbd.complete_bootstrap("test").await.unwrap(),
        BootstrapPhase::Draining
    );
    wait_for(Duration::from_secs(3), || {
        lb.lbd.app.bootstrap_phase() == BootstrapPhase::Removed
    })
    .await;
    let t = t0.elapsed();
    assert!(
        t >= Duration::from_millis(450),
        "removed after {t:?}, before the deadline"
    );
    for (s, who) in held.iter_mut() {
        let r = get_on(s, false).await;
        if who == "bootstrap" {
            assert!(
                r.is_err(),
                "the bootstrap connection outlived the drain deadline"
            );
        } else {
            assert_eq!(&r.unwrap(), who, "a master connection was cut");
        }
    }
}

#[tokio::test]
async fn bootstrap_completes_by_itself_once_masters_are_ready_long_enough() {
    let c = cluster(4).await;
    let dir = tempfile::tempdir().unwrap();
    c.masters[1]
        .healthy
        .store(false, std::sync::atomic::Ordering::Relaxed);
    let lb = Lb::start(
        lbd::Source::Site(site(
            dir.path(),
            4,
            "  bootstrap: { autoCompleteAfter: 1s, drainTimeout: 1s }\n",
        )),
        None,
    )
    .await;
    let m1 = lb.backend("api", c.masters[1].addr).unwrap();
    wait_for(Duration::from_secs(3), || !m1.healthy()).await;
    // One master not ready: the bootstrap stays however long we wait.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(lb.lbd.app.bootstrap_phase(), BootstrapPhase::Serving);
    c.masters[1]
        .healthy
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let t0 = std::time::Instant::now();
    wait_for(Duration::from_secs(6), || {
        lb.lbd.app.bootstrap_phase() != BootstrapPhase::Serving
    })
    .await;
    // rise 2 x 100 ms, then held 1 s.
    assert!(
        t0.elapsed() >= Duration::from_millis(1000),
        "completed after {:?}",
        t0.elapsed()
    );
    wait_for(Duration::from_secs(3), || {
        lb.lbd.app.bootstrap_phase() == BootstrapPhase::Removed
    })
    .await;
}

/// lbd on a site (`--site`): a reload of a site with a problem is refused
/// as a whole, counted (`lbd_reloads_total{result="error"}`), and the
/// previous pools keep serving; the next good site applies.
#[tokio::test]
async fn a_bad_site_on_reload_is_counted_and_the_old_pools_serve() {
    let c = cluster(5).await;
    let dir = tempfile::tempdir().unwrap();
    let lb = Lb::start(lbd::Source::Site(site(dir.path(), 5, "")), None).await;
    all_up(&lb, &c).await;
    let good = std::fs::read_to_string(&lb.path).unwrap();
    let m1 =
        "  - { name: master-1, role: master, live: true, macs: [\"52:54:00:00:05:12\"], ip: 127.77.5.12 }\n";
    assert!(good.contains(m1));
    let without_m1 = good.replace(m1, "");
    let pool = |lb: &Lb| lb.lbd.app.frontend("api").unwrap().pool.load().len();
    assert_eq!(pool(&lb), 3);
    // master-1 removed, with an unknown key; then with a role Ignition
    // that does not exist: neither applies.
    for (bad, problem) in [
        (
            without_m1.replace("lb:\n", "lb:\n  colour: blue\n"),
            "colour",
        ),
        (
            without_m1.replace("master: m.ign", "master: gone.ign"),
            "gone.ign",
        ),
    ] {
        lb.rewrite(&bad).await;
        assert_eq!(pool(&lb), 3, "refused after {problem}: the pool changed");
        for _ in 0..6 {
            let who = api_get(&lb, &c).await;
            assert!(["bootstrap", "master-0", "master-1"].contains(&who.as_str()));
        }
    }
    let m = &lb.lbd.app.metrics;
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(
        (m.reloads_ok.load(Relaxed), m.reloads_failed.load(Relaxed)),
        (0, 2)
    );
    let (st, text) = lb.admin("GET", "/metrics").await;
    assert_eq!(st, 200);
    for want in [
        "lbd_reloads_total{result=\"error\"} 2",
        "lbd_reloads_total{result=\"ok\"} 0",
    ] {
        assert!(text.contains(want), "{want} missing in\n{text}");
    }
    // The same change without the problem applies.
    lb.rewrite(&without_m1).await;
    assert_eq!(m.reloads_ok.load(Relaxed), 1);
    assert_eq!(pool(&lb), 2);
}
