//! API tokens with names and scopes (docs/api.md, "Tokens and scopes"): a
//! token may do what its scopes allow and gets 403 naming the scope it
//! lacks otherwise, with nothing done; every write is one `audit:` line
//! with the token's name (never its value); a flood of bad tokens is a few
//! log lines a second with the count of the others.

use super::{
    api_client, bootd_cli, cond, equinix_node, free_port, logs, phase, plain_get, process_site,
    tuning, until, write_site, Bootd, Fake, Proc, API_TOKEN,
};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use testkit::ecs_fake::EcsFake;

const READ: &str = "read-token-for-tests-7d41a9";
const NODES: &str = "nodes-token-for-tests-52c0be";
const CLUSTER: &str = "cluster-token-for-tests-e813f4";

/// The token file: the bare test token first (the CLI's, admin), then one
/// named token per scope.
fn scoped_tokens(dir: &Path) {
    std::fs::write(
        dir.join("api-tokens"),
        format!(
            "# test tokens\n{API_TOKEN}\nviewer:read:{READ}\nops-1:nodes:{NODES}\nrelease:cluster:{CLUSTER}\n"
        ),
    )
    .unwrap();
}

/// bootd in process with the site's Alibaba account on `ecs` (the one
/// provider that lists the cluster's machines for `cluster destroy`).
async fn with_alibaba(ecs: &EcsFake, f: &Fake) -> Bootd {
    let dir = tempfile::tempdir().unwrap();
    let path = write_site(dir.path(), &f.url(), &f.url(), &f.url(), "127.0.0.1:0");
    let account = format!(
        "    deadline: 10m\n    alibaba:\n      regionId: cn-hangzhou\n      endpoint: \"{}\"\n      accessKeyId: {{ file: {} }}\n      accessKeySecret: {{ file: {} }}\n      infraId: lab-x7k2p\n      zones: [cn-hangzhou-h]\n      vSwitches: {{ cn-hangzhou-h: vsw-h1 }}\n      securityGroupId: sg-lab\n      instanceTypes: {{ master: ecs.g6.xlarge, worker: ecs.g6.large }}\n      imageId: m-rhcos418\n",
        ecs.endpoint(),
        ecs.akid_file().display(),
        ecs.secret_file().display()
    );
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replacen("    deadline: 10m\n", &account, 1);
    std::fs::write(&path, text).unwrap();
    scoped_tokens(dir.path());
    Bootd::start_site(dir, &path, tuning()).await
}

/// The attack: a `read` token tries to destroy the cluster's machines,
/// create a node and delete one. Each is 403 naming the scope it needs,
/// and nothing happens; the tokens that have the scope succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_cannot_destroy_create_or_delete() {
    let ecs = EcsFake::start(0.1);
    let f = Fake::start().await;
    let b = with_alibaba(&ecs, &f).await;
    let made = json!({"name": "worker-3", "role": "worker", "provider": {"alibaba": {}}});
    let (st, v) = b.create(made).await;
    assert_eq!(st, 201, "{v:#}");
    b.wait_node("worker-3", 30, |_, v| {
        cond(v, "Provisioned")["status"] == "True"
    })
    .await;
    let (st, v) = b
        .call_as(
            Some(READ),
            "GET",
            "/v1/cluster/machines?provider=alibaba",
            None,
        )
        .await;
    assert_eq!(st, 200, "a read token lists them: {v:#}");
    let id = v["machines"][0]["id"].as_str().unwrap().to_string();
    let destroy = json!({ "provider": "alibaba", "machines": [id] });

    let (st, v) = b
        .call_as(
            Some(READ),
            "POST",
            "/v1/cluster/destroy",
            Some(destroy.clone()),
        )
        .await;
    assert_eq!(st, 403, "{v:#}");
    assert_eq!(v["scope"], "cluster", "{v:#}");
    assert!(v["error"].as_str().unwrap().contains("cluster"), "{v:#}");
    assert!(!v.to_string().contains(READ), "the token is never echoed");
    let (st, v) = b
        .call_as(
            Some(READ),
            "POST",
            "/v1/nodes",
            Some(equinix_node("worker-4", "10.77.0.24", "52:54:00:77:00:24")),
        )
        .await;
    assert_eq!((st, &v["scope"]), (403, &json!("nodes")), "{v:#}");
    let (st, v) = b
        .call_as(Some(READ), "DELETE", "/v1/nodes/worker-3", None)
        .await;
    assert_eq!((st, &v["scope"]), (403, &json!("nodes")), "{v:#}");
    for (method, path, scope) in [
        ("POST", "/v1/nodes/worker-0/reinstall", "nodes"),
        ("POST", "/v1/nodes/worker-0/inspect", "nodes"),
        ("POST", "/v1/discovered/52:54:00:77:00:a9/adopt", "nodes"),
        ("POST", "/v1/cluster/bootstrap-complete", "cluster"),
        ("PUT", "/v1/nodes", "admin"),
    ] {
        let (st, v) = b.call_as(Some(READ), method, path, None).await;
        assert_eq!(
            (st, &v["scope"]),
            (403, &json!(scope)),
            "{method} {path}: {v:#}"
        );
    }
    // Nothing happened: the instance, the node, no equinix machine.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(ecs.instances().len(), 1, "the instance is still there");
    assert_eq!(f.st().creates, 0, "no machine was made");
    let (st, v) = b.node("worker-3").await;
    assert_eq!(st, 200);
    assert_ne!(phase(&v), "Deleting", "{v:#}");
    assert_eq!(b.node("worker-4").await.0, 404);
    assert!(b.app.live.load().site.node("worker-4").is_none());
    let (st, v) = b.call("GET", "/v1/cluster", None).await;
    assert_eq!(
        (st, &v["bootstrapComplete"]["complete"]),
        (200, &json!(false)),
        "{v:#}"
    );

    // What each scope may do: read reads; nodes makes and deletes nodes but
    // destroys nothing; cluster destroys.
    for path in ["/v1/nodes", "/v1/nodes/worker-3/events", "/v1/cluster"] {
        let (st, v) = b.call_as(Some(READ), "GET", path, None).await;
        assert_eq!(st, 200, "{path}: {v:#}");
    }
    let (st, v) = b
        .call_as(
            Some(NODES),
            "POST",
            "/v1/cluster/destroy",
            Some(destroy.clone()),
        )
        .await;
    assert_eq!((st, &v["scope"]), (403, &json!("cluster")), "{v:#}");
    let (st, v) = b
        .call_as(
            Some(NODES),
            "POST",
            "/v1/nodes",
            Some(
                json!({"name": "worker-4", "role": "worker", "macs": ["52:54:00:77:00:24"],
                        "ip": "10.77.0.24", "live": true}),
            ),
        )
        .await;
    assert_eq!(st, 201, "{v:#}");
    let (st, v) = b
        .call_as(Some(NODES), "DELETE", "/v1/nodes/worker-4", None)
        .await;
    assert_eq!(st, 202, "{v:#}");
    assert_eq!(ecs.instances().len(), 1);
    let (st, v) = b
        .call_as(Some(CLUSTER), "POST", "/v1/cluster/destroy", Some(destroy))
        .await;
    assert_eq!(st, 202, "{v:#}");
    b.wait_node("worker-3", 30, |st, _| st == 404).await;
    until("the cluster token destroyed the instance", 30, async || {
        ecs.instances().is_empty()
    })
    .await;
    let m = b.metrics().await;
    assert!(
        m.contains("bootd_api_denials_total{reason=\"scope\"} 9"),
        "{m}"
    );
    b.stop().await;
}

/// The log lines that contain `needle`.
fn lines_with(log: &str, needle: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// Every write is one `audit:` line with the token's name, the method, the
/// path (and the node made), the status; never the token, never the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_is_an_audit_line_with_the_tokens_name() {
    let f = Fake::start().await;
    let b = Bootd::start(&f.url(), &f.url(), &f.url()).await;
    scoped_tokens(b.dir.path());
    let body = json!({"name": "audit-7", "role": "worker", "macs": ["52:54:00:77:00:37"],
                      "ip": "10.77.0.37", "live": true, "kernelArgs": ["audit-body-canary"]});
    let (st, v) = b
        .call_as(Some(NODES), "POST", "/v1/nodes", Some(body))
        .await;
    assert_eq!(st, 201, "{v:#}");
    let (st, _) = b
        .call_as(Some(READ), "DELETE", "/v1/nodes/audit-7", None)
        .await;
    assert_eq!(st, 403);
    let (st, _) = b
        .call_as(Some(NODES), "GET", "/v1/nodes/audit-7", None)
        .await;
    assert_eq!(st, 200);
    let (st, _) = b.call("DELETE", "/v1/nodes/audit-7", None).await;
    assert_eq!(st, 202);
    let log = String::from_utf8_lossy(&logs().lock().unwrap()).to_string();
    let audit = lines_with(&log, "audit-7");
    let audit: Vec<&String> = audit.iter().filter(|l| l.contains("audit: ")).collect();
    let has = |want: &str| audit.iter().any(|l| l.contains(want));
    assert!(
        has("audit: token=ops-1 POST /v1/nodes audit-7 -> 201"),
        "{audit:#?}"
    );
    assert!(
        has("audit: token=viewer DELETE /v1/nodes/audit-7 -> 403"),
        "{audit:#?}"
    );
    assert!(
        has("audit: token=token-1 DELETE /v1/nodes/audit-7 -> 202"),
        "the bare token is token-1: {audit:#?}"
    );
    assert_eq!(audit.len(), 3, "a GET is not audited: {audit:#?}");
    for secret in [API_TOKEN, READ, NODES, CLUSTER, "audit-body-canary"] {
        assert!(!log.contains(secret), "{secret} reached the log");
    }
    let m = b.metrics().await;
    for line in [
        "bootd_api_writes_total{token=\"ops-1\",outcome=\"ok\"} 1",
        "bootd_api_writes_total{token=\"viewer\",outcome=\"forbidden\"} 1",
        "bootd_api_writes_total{token=\"token-1\",outcome=\"ok\"} 1",
    ] {
        assert!(m.contains(line), "{line} not in\n{m}");
    }
    b.stop().await;
}

/// `suppressed=N` of a log line (0 without it).
fn suppressed(line: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("suppressed="))
        .map(|n| n.parse().unwrap())
        .unwrap_or(0)
}

/// 1 000 requests with bad tokens to a real bootd: its log grows by a few
/// lines a second, the last of them saying how many were left out; the
/// metric counts every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bad_tokens_is_a_few_log_lines_with_the_count() {
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let api_port = free_port();
    let site = process_site(dir.path(), &f, api_port, |t| t);
    let p = Proc::start(&site, 1);
    let api = api_client(&dir.path().join("state/ca.pem"), api_port, &p).await;
    let before = std::fs::read_to_string(&p.log).unwrap().lines().count();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..125 {
                let tok = format!("flood-token-{t}-{i}");
                let (st, _) = api.call_as(Some(&tok), "GET", "/v1/nodes", None).await;
                assert_eq!(st, 401);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let secs = start.elapsed().as_secs();
    // The next second: one more, whose line carries the count of the rest.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (st, _) = api
        .call_as(Some("flood-token-last"), "GET", "/v1/nodes", None)
        .await;
    assert_eq!(st, 401);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = std::fs::read_to_string(&p.log).unwrap();
    let new: Vec<&str> = log.lines().skip(before).collect();
    let refused: Vec<&&str> = new
        .iter()
        .filter(|l| l.contains("API request refused"))
        .collect();
    let bound = 10 * (secs as usize + 3);
    assert!(
        new.len() <= bound + 10,
        "{} lines for 1001 bad tokens in {secs} s:\n{}",
        new.len(),
        new.join("\n")
    );
    let shown = refused.len() as u64;
    let left_out: u64 = refused.iter().map(|l| suppressed(l)).sum();
    assert_eq!(shown + left_out, 1001, "{}", new.join("\n"));
    assert!(left_out > 0, "some were left out: {}", new.join("\n"));
    assert!(!log.contains("flood-token-"), "no token in the log");
    let m = plain_get(&format!(
        "http://{}/metrics",
        site::load(&site).unwrap().host.http.listen
    ))
    .await
    .1;
    assert!(
        m.contains("bootd_api_denials_total{reason=\"wrong\"} 1001"),
        "{m}"
    );
}

/// The command line takes the file's first token, whatever its scopes: a
/// `read` token first lists the nodes and is refused `bootstrap-complete`
/// with the scope named; the admin token first may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_uses_the_first_token_of_the_file() {
    let f = Fake::start().await;
    let b = Bootd::start(&f.url(), &f.url(), &f.url()).await;
    let site = b.dir.path().join("site.yaml");
    let api = format!("https://localhost:{}", b.api.port());
    let cli = |cmd: &'static str, sub: &'static str| {
        let (site, api) = (site.clone(), api.clone());
        tokio::task::spawn_blocking(move || bootd_cli(&site, &[cmd, "--api", &api, sub]))
    };
    let tokens = b.dir.path().join("api-tokens");
    std::fs::write(&tokens, format!("viewer:read:{READ}\n{API_TOKEN}\n")).unwrap();
    let (code, out) = cli("nodes", "list").await.unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("worker-0"), "{out}");
    let (code, out) = cli("cluster", "bootstrap-complete").await.unwrap();
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("scope cluster"), "{out}");
    assert!(!out.contains(READ), "{out}");
    std::fs::write(&tokens, format!("{API_TOKEN}\nviewer:read:{READ}\n")).unwrap();
    let (code, out) = cli("cluster", "bootstrap-complete").await.unwrap();
    assert_eq!(code, 0, "{out}");
    b.stop().await;
}

/// `bootd --check-config` fails on a token file's problems, each with its
/// line and never the token, and warns of each bare token (every scope).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_config_lists_the_token_files_problems_and_warns_of_bare_tokens() {
    let f = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let site = process_site(dir.path(), &f, free_port(), |t| t);
    let tokens = dir.path().join("api-tokens");
    let check = || bootd_cli(&site, &["--check-config", site.to_str().unwrap()]);
    // The tests' file: a comment, then the bare token.
    let (code, out) = check();
    assert_eq!(code, 0, "{out}");
    let bare = format!(
        "warning: host.api.tokens: {}:2: a bare token (token-1) has every scope (admin)",
        tokens.display()
    );
    assert!(out.contains(&bare), "{out}");
    std::fs::write(
        &tokens,
        format!("viewer:read:{READ}\nops 1:nodes:{NODES}\nx:reed:{CLUSTER}\n{READ}\n"),
    )
    .unwrap();
    let (code, out) = check();
    assert_eq!(code, 1, "{out}");
    let at = |line: u32, why: &str| format!("host.api.tokens: {}:{line}: {why}", tokens.display());
    for want in [
        at(2, "the name must be 1 to 64 letters"),
        at(3, "unknown or empty scope"),
        at(4, "the same token as line 1"),
    ] {
        assert!(out.contains(&want), "{want} not in {out}");
    }
    for secret in [READ, NODES, CLUSTER] {
        assert!(!out.contains(secret), "{out}");
    }
    std::fs::write(
        &tokens,
        format!("viewer:read:{READ}\nops-1:nodes:{NODES}\n"),
    )
    .unwrap();
    let (code, out) = check();
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("bare token"), "{out}");
}
