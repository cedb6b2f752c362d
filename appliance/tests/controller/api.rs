//! The one API client every test here talks through, to an in-process bootd
//! ([`super::Bootd`]) or a real process ([`super::Proc`]), and the one
//! polling helper ([`until`]) their waits share.

use super::API_TOKEN;
use serde_json::Value;
use std::fmt::Display;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One bootd's API over HTTPS, trusting the site CA.
#[derive(Clone)]
pub struct Api {
    client: controller::providers::Http,
    addr: SocketAddr,
    /// The log of the bootd process answering, shown when a wait fails.
    log: Option<PathBuf>,
}

impl Api {
    pub fn new(client: controller::providers::Http, addr: SocketAddr, log: Option<&Path>) -> Api {
        Api {
            client,
            addr,
            log: log.map(Path::to_path_buf),
        }
    }

    /// The same API answered by another process (bootd restarted on the
    /// same port), whose log a failed wait shows.
    pub fn logging(&self, log: &Path) -> Api {
        Api::new(self.client.clone(), self.addr, Some(log))
    }

    /// A request with `token` and a JSON body. Status 0: no answer (a bootd
    /// being restarted).
    pub async fn call_as(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let body = body
            .map(|v| serde_json::to_vec(&v).unwrap())
            .unwrap_or_default();
        self.send(token, method, path, body).await
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.call_as(Some(API_TOKEN), method, path, body).await
    }

    /// An authenticated call with the body's bytes as given (malformed ones
    /// included).
    pub async fn call_raw(&self, method: &str, path: &str, body: Vec<u8>) -> (u16, Value) {
        self.send(Some(API_TOKEN), method, path, body).await
    }

    /// POST /v1/nodes.
    pub async fn create(&self, node: Value) -> (u16, Value) {
        self.call("POST", "/v1/nodes", Some(node)).await
    }

    /// GET /v1/nodes/<name>.
    pub async fn node(&self, name: &str) -> (u16, Value) {
        self.call("GET", &format!("/v1/nodes/{name}"), None).await
    }

    /// Polls GET /v1/nodes/<name> until `pred` holds (at most `secs`); fails
    /// with the last answer (and the process's log).
    pub async fn wait_node(
        &self,
        name: &str,
        secs: u64,
        pred: impl Fn(u16, &Value) -> bool,
    ) -> Value {
        self.wait_node_within(name, Duration::from_secs(secs), &pred)
            .await
    }

    /// [`Api::wait_node`] for each of `names` in turn, all within `secs`;
    /// `pred` is also given the node's name.
    pub async fn wait_nodes<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
        secs: u64,
        pred: impl Fn(&str, u16, &Value) -> bool,
    ) -> Vec<Value> {
        let end = Instant::now() + Duration::from_secs(secs);
        let mut got = Vec::new();
        for name in names {
            let left = end.saturating_duration_since(Instant::now());
            let pred = |st: u16, v: &Value| pred(name, st, v);
            got.push(self.wait_node_within(name, left, &pred).await);
        }
        got
    }

    async fn wait_node_within(
        &self,
        name: &str,
        within: Duration,
        pred: &impl Fn(u16, &Value) -> bool,
    ) -> Value {
        let what = format!("node {name} got there");
        let step = async || match self.node(name).await {
            (st, v) if pred(st, &v) => Ok(v),
            (st, v) => Err(format!("{st} {v:#}")),
        };
        match &self.log {
            Some(log) => poll(with_log(what, log), within, step).await,
            None => poll(what, within, step).await,
        }
    }

    async fn send(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> (u16, Value) {
        let mut b = http::Request::builder()
            .method(method)
            .uri(format!("https://localhost:{}{path}", self.addr.port()));
        if let Some(t) = token {
            b = b.header("Authorization", format!("Bearer {t}"));
        }
        match self
            .client
            .send(
                b.body(http_body_util::Full::new(bytes::Bytes::from(body)))
                    .unwrap(),
                "api",
            )
            .await
        {
            Ok(r) => (
                r.status.as_u16(),
                serde_json::from_slice(&r.body).unwrap_or(Value::Null),
            ),
            Err(_) => (0, Value::Null),
        }
    }
}

/// A plain HTTP GET of `url` (what a node does): status and body (UTF-8).
pub async fn plain_get(url: &str) -> (u16, String) {
    let http = controller::providers::Http::new(Duration::from_secs(5));
    let req = http::Request::get(url)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let r = http.send(req, "get").await.unwrap();
    (
        r.status.as_u16(),
        String::from_utf8(r.body.to_vec()).unwrap(),
    )
}

/// Polls `ok` every 50 ms until it holds; fails after `secs` seconds saying
/// `what` (formatted only then, so it may read a log: [`with_log`]).
pub async fn until(what: impl Display, secs: u64, mut ok: impl AsyncFnMut() -> bool) {
    let step = async || {
        if ok().await {
            Ok(())
        } else {
            Err(String::new())
        }
    };
    until_ok(what, secs, step).await
}

/// Polls `step` every 50 ms until it gives `Ok`; fails after `secs` seconds
/// saying `what` and the last `Err` (what the step saw then).
pub async fn until_ok<T>(
    what: impl Display,
    secs: u64,
    step: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    poll(what, Duration::from_secs(secs), step).await
}

/// The one polling loop: `step` at least once, then until `within` is over.
async fn poll<T>(
    what: impl Display,
    within: Duration,
    mut step: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let end = Instant::now() + within;
    loop {
        let last = match step().await {
            Ok(t) => return t,
            Err(last) => last,
        };
        if Instant::now() >= end {
            match last.as_str() {
                "" => panic!("not within {within:?}: {what}"),
                _ => panic!("not within {within:?}: {what}; last: {last}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `what`, then the log at `log` as it is when shown.
pub fn with_log<'a>(what: impl Display + 'a, log: &'a Path) -> impl Display + 'a {
    Lazily(move |f: &mut std::fmt::Formatter<'_>| {
        let log = std::fs::read_to_string(log).unwrap_or_default();
        write!(f, "{what}\n{log}\n")
    })
}

/// A `Display` written by its closure when shown.
struct Lazily<F>(F);

impl<F: Fn(&mut std::fmt::Formatter<'_>) -> std::fmt::Result> Display for Lazily<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (self.0)(f)
    }
}

/// curl (a real client) from `from`, a node's loopback address: the status
/// and the body. `body`: sent as JSON.
pub fn curl_from(from: &str, method: &str, url: &str, body: Option<&str>) -> (u16, String) {
    let mut c = std::process::Command::new("curl");
    c.args([
        "-sS",
        "--interface",
        from,
        "-X",
        method,
        "-w",
        "\n%{http_code}",
    ]);
    if let Some(b) = body {
        c.args(["-H", "content-type: application/json", "--data-binary", b]);
    }
    let out = c.arg(url).output().expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), body.to_string())
}

/// The word after `prefix` in `text` (up to a quote or white space): a
/// URL or token in a script or config.
pub fn after<'a>(text: &'a str, prefix: &str) -> &'a str {
    let i = text
        .find(prefix)
        .unwrap_or_else(|| panic!("{prefix} in {text}"))
        + prefix.len();
    text[i..]
        .split(|c: char| c == '"' || c.is_whitespace())
        .next()
        .unwrap()
}
