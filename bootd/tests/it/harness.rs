//! Starts the real `bootd::run_app` on 127.0.0.1 port 0 with a copy of the
//! lab site in a temp dir, and a small HTTP client on hyper.

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use testkit::dhcp::{dhcp_recv, write_site};
pub use testkit::logs::logs;

pub struct Bootd {
    pub dhcp: Option<SocketAddr>,
    /// TFTP on 127.0.0.1 (with DHCP only), serving `<dir>/tftp`.
    pub tftp: Option<SocketAddr>,
    pub http: SocketAddr,
    pub https: SocketAddr,
    pub app: Arc<bootd::App>,
    pub dir: tempfile::TempDir,
    pub reload: Arc<tokio::sync::Notify>,
    shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<Result<(), bootd::Error>>>,
}

impl Bootd {
    /// The lab site, copied to a temp dir (so tests may edit it), with an
    /// image root of its own. `edit` may change the site text first.
    pub async fn start_with(edit: impl FnOnce(String) -> String) -> Bootd {
        Bootd::start_full(edit, None).await
    }

    /// With DHCP on 127.0.0.1 (port 0); replies to relays go to `relay_port`.
    pub async fn start_dhcp(edit: impl FnOnce(String) -> String, relay_port: u16) -> Bootd {
        Bootd::start_full(edit, Some(relay_port)).await
    }

    async fn start_full(edit: impl FnOnce(String) -> String, relay_port: Option<u16>) -> Bootd {
        Bootd::start_config(edit, relay_port, |_| {}).await
    }

    /// [`Bootd::start_dhcp`], and `tune` may change the config first.
    pub async fn start_config(
        edit: impl FnOnce(String) -> String,
        relay_port: Option<u16>,
        tune: impl FnOnce(&mut bootd::Config),
    ) -> Bootd {
        logs();
        let dir = tempfile::tempdir().unwrap();
        write_site(dir.path(), |t| edit(any_address(t)));
        let site = site::load(&dir.path().join("site.yaml")).unwrap();
        let mut config = bootd::Config::new(site);
        let mut dhcp_sock = None;
        if let Some(p) = relay_port {
            config.dhcp_ports = dhcp::v4::server::Ports {
                client: 68,
                server: p,
            };
            dhcp_sock = Some(dhcp::v4::server::bind("127.0.0.1:0".parse().unwrap(), None).unwrap());
        }
        let dhcp = dhcp_sock.as_ref().map(|s| s.local_addr().unwrap());
        let tftp_sock = match relay_port {
            Some(_) => Some(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap()),
            None => None,
        };
        let tftp = tftp_sock.as_ref().map(|s| s.local_addr().unwrap());
        config.poll = Some(std::time::Duration::from_millis(200));
        config.grace = std::time::Duration::from_millis(500);
        tune(&mut config);
        let reload = Arc::clone(&config.reload);
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let https = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (ha, hsa) = (http.local_addr().unwrap(), https.local_addr().unwrap());
        let app = bootd::prepare(&config, true).unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(bootd::run_app(
            Arc::clone(&app),
            config,
            bootd::Sockets {
                dhcp: dhcp_sock,
                tftp: tftp_sock,
                ..bootd::Sockets::http_only(http, Some(https))
            },
            shutdown.clone(),
        ));
        Bootd {
            dhcp,
            tftp,
            http: ha,
            https: hsa,
            app,
            dir,
            reload,
            shutdown,
            task: Some(task),
        }
    }

    /// The lab site as written: each node's script only to its own address.
    pub async fn start_strict(edit: impl FnOnce(String) -> String) -> Bootd {
        Bootd::start_with(|t| edit(strict(t))).await
    }

    pub async fn start() -> Bootd {
        Bootd::start_with(|t| t).await
    }

    pub fn images(&self) -> PathBuf {
        self.dir.path().join("images")
    }

    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn token(&self, node: &str) -> String {
        self.app.key.issue(
            node,
            bootd::token::Scope::Script,
            std::time::SystemTime::now(),
            std::time::Duration::from_secs(600),
        )
    }

    pub async fn get(&self, path: &str) -> (StatusCode, HeaderMap, Bytes) {
        self.get_with(path, &[]).await
    }

    pub async fn get_with(
        &self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (StatusCode, HeaderMap, Bytes) {
        request(self.http, "GET", path, headers).await
    }

    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
    }
}

/// The harness's clients are on 127.0.0.1, not at the lab nodes' 10.77.0.x
/// addresses, and its tests fetch a config more than once with one token:
/// its site lets every node's script go to any address (`fetchFrom:
/// anyAddress`) and tokens be used again (`singleUseTokens: false`),
/// except with [`Bootd::start_strict`]. The tests of the address binding
/// and of single use run strict, with nodes on 127.0.0.x.
pub fn any_address(t: String) -> String {
    t.replace(
        "  tokenTtl: 1h\n",
        "  tokenTtl: 1h\n  singleUseTokens: false\n",
    )
    .replace(
        "kernelArgs: [console=ttyS0] }",
        "kernelArgs: [console=ttyS0], fetchFrom: anyAddress }",
    )
    .replace(
        "    kernelArgs: [console=hvc0]\n",
        "    kernelArgs: [console=hvc0]\n    fetchFrom: anyAddress\n",
    )
}

/// Undoes [`any_address`].
pub fn strict(t: String) -> String {
    t.replace(", fetchFrom: anyAddress }", " }")
        .replace("  singleUseTokens: false\n", "")
        .replace("    fetchFrom: anyAddress\n", "")
}

/// One request on a fresh connection.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Bytes) {
    request_from(None, addr, method, path, headers).await
}

/// [`request`] from a given local address (e.g. a node's 127.0.0.x).
pub async fn request_from(
    from: Option<std::net::IpAddr>,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, Bytes) {
    let stream = match from {
        None => tokio::net::TcpStream::connect(addr).await.unwrap(),
        Some(ip) => {
            let s = tokio::net::TcpSocket::new_v4().unwrap();
            s.bind(SocketAddr::new(ip, 0)).unwrap();
            s.connect(addr).await.unwrap()
        }
    };
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = send
        .send_request(req.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (parts.status, parts.headers, body)
}

/// Runs curl (a real client) and returns its stdout.
pub fn curl(args: &[&str]) -> std::process::Output {
    std::process::Command::new("curl")
        .args(["-sS"])
        .args(args)
        .output()
        .expect("curl not found")
}
