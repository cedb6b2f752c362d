//! `bootd nodes list|get|add|delete|events|timeline|wait` and `bootd cluster
//! status|bootstrap-complete|destroy|up`: a client of the controller API.
//!
//! It reads where the API is, the CA to trust and a token from the site
//! (`host.api.url` or `https://<host.api.listen>`, `<stateDir>/ca.pem`, the
//! first token of `host.api.tokens`, whatever its scopes), each overridable
//! by a flag. The token is never taken from the command line or the
//! environment (both are visible to other users of the machine).

mod boot;
mod destroy;
mod discovered;
pub mod import;
mod up;
mod wait;

use crate::providers::Http;
use anyhow::{bail, Context};
use bytes::Bytes;
use destroy::destroy;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::json;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};
pub use up::{up, UpArgs};
pub use wait::{wait, WaitFor};

#[derive(clap::Args, Debug, Clone)]
pub struct Conn {
    /// The API's base URL (default: host.api.url, or https://<host.api.listen>).
    #[arg(long)]
    pub api: Option<String>,
    /// The CA that signed the API's certificate (default: <stateDir>/ca.pem).
    #[arg(long)]
    pub ca: Option<PathBuf>,
    /// A token file (a bare token, or the format of host.api.tokens): its
    /// first token is used (default: the first of host.api.tokens).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
}

// Parsed once per command line: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(clap::Subcommand, Debug, Clone)]
pub enum NodesCmd {
    /// Every node (site and API) with its phase.
    List,
    /// One node's status, conditions and machine, as JSON.
    Get { name: String },
    /// Create a node from a JSON file (the body of POST /v1/nodes; `-` for stdin).
    Add { file: PathBuf },
    /// Delete an API node (and its machine). A machine behind a BMC that
    /// installed to disk is booted once more to wipe its disks first.
    Delete {
        name: String,
        /// Power the machine off without wiping its disks.
        #[arg(long)]
        keep_disks: bool,
    },
    /// Install a node again: its next network boot gets the installer, not
    /// its local disk (which an installed node gets; see ignition.afterInstall).
    Reinstall { name: String },
    /// What the node's machine reported (CPUs, memory, disks, NICs, LLDP),
    /// the disk its hints choose and what its next boot does, as JSON.
    Inventory { name: String },
    /// Forget the node's inventory: its next network boot inspects again.
    Inspect { name: String },
    /// Create a node for the machine behind a Redfish BMC: its MACs are
    /// read from the BMC (nobody types them); it is powered on to
    /// network-boot once. The password is read by bootd from PASSWORD_FILE.
    ImportBmc {
        /// `https://bmc[:port]/redfish/v1/Systems/<id>`, or the BMC's address with --system.
        url: String,
        #[arg(long)]
        name: String,
        #[arg(long)]
        role: String,
        #[arg(long)]
        ip: String,
        #[arg(long)]
        username: String,
        /// Absolute path, on bootd's host, of the file with the BMC password.
        #[arg(long)]
        password_file: PathBuf,
        /// The system's Id, Name or UUID, with a service-root URL.
        #[arg(long)]
        system: Option<String>,
        #[arg(long)]
        ca_bundle: Option<PathBuf>,
        #[arg(long)]
        insecure_skip_verify: bool,
        /// pxe or uefiHttp.
        #[arg(long)]
        boot: Option<String>,
        /// UEFI or Legacy.
        #[arg(long)]
        mode: Option<String>,
        #[command(flatten)]
        disk: boot::DiskTarget,
    },
    /// Create the nodes of an install-config's platform.baremetal.hosts:
    /// each with its BMC (redfish://, redfish-virtualmedia://,
    /// idrac-virtualmedia://, ipmi:// and their +http/+https forms), boot
    /// MAC, rootDeviceHints and networkConfig. The BMC passwords stay in
    /// the file: bootd reads each from it when it talks to that BMC, so
    /// FILE must be an absolute path on bootd's host, inside
    /// host.api.bmcFiles.
    Import {
        #[arg(long)]
        install_config: PathBuf,
        /// NAME=ADDRESS: the address of a host whose networkConfig has
        /// no static one (repeat for each).
        #[arg(long = "ip", value_name = "NAME=ADDRESS")]
        ips: Vec<String>,
        /// Print the request bodies and create nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// A node's event log (as stored by the controller).
    Events { name: String },
    /// A node's boot timeline: each phase (DHCP, TFTP, script, kernel,
    /// initramfs, rootfs, Ignition, machine-config, API, joined) with its start and
    /// duration, then every event.
    Timeline {
        /// A node name, or an unknown client's key (`mac 52:54:…`, `ip 10.…`).
        name: String,
        /// Print the JSON as the API returns it.
        #[arg(long)]
        json: bool,
    },
    /// Show each node's phase and elapsed time until all are Ready (or,
    /// with `--for joined`, Joined) (exit 0) or one fails (exit 1, with the
    /// reason).
    Wait {
        /// Nodes to wait for (default: every node).
        names: Vec<String>,
        /// `ready`: the node's `Ready` condition (it booted and fetched its
        /// Ignition); `joined`: its `Joined` condition (its kubelet's client
        /// and serving certificates are approved; needs host.api.kubeconfig).
        #[arg(long = "for", value_enum, default_value_t = WaitFor::Ready)]
        until: WaitFor,
        /// Give up after this many seconds (exit 2).
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
        /// Seconds between polls.
        #[arg(long, default_value_t = 2.0)]
        interval: f64,
    },
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum DiscoveredCmd {
    /// Machines with unknown MACs that reported themselves.
    List,
    /// Make a discovered machine (its UUID or one of its MACs) a node; at
    /// its next retry it boots as that node.
    Adopt {
        /// The machine's UUID or one of its MACs.
        key: String,
        #[arg(long)]
        name: String,
        #[arg(long)]
        role: String,
        /// Default: the first free address outside the pool of its network.
        #[arg(long)]
        ip: Option<String>,
        #[command(flatten)]
        disk: boot::DiskTarget,
        /// Install without wiping the machine's disks first.
        #[arg(long)]
        keep_disks: bool,
    },
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum ClusterCmd {
    /// The cluster facts (bootstrap-complete).
    Status,
    /// Record that the cluster's bootstrap is complete.
    BootstrapComplete,
    /// The whole journey from an install-config to a cluster: Ignition
    /// configs, images, nodes through the site's provider, Ready, bootstrap
    /// teardown, Joined. Resumable: run it again after a crash.
    Up(UpArgs),
    /// Delete every machine a cloud provider holds with the cluster's
    /// ownership tag (and the API nodes they belong to). Lists them first;
    /// deletes only with --yes.
    Destroy {
        /// The provider (e.g. alibaba).
        #[arg(long)]
        provider: String,
        /// Delete what is listed (without it, only the list).
        #[arg(long)]
        yes: bool,
    },
}

pub struct Client {
    http: Http,
    base: String,
    token: site::Secret<String>,
}

impl Client {
    pub fn new(
        site: &site::Site,
        state_dir: &std::path::Path,
        conn: &Conn,
    ) -> anyhow::Result<Client> {
        use anyhow::Context;
        let api = site.host.api.as_ref();
        let base = match (&conn.api, api) {
            (Some(u), _) => u.trim_end_matches('/').to_string(),
            (None, Some(a)) => a.url.clone().unwrap_or_else(|| {
                let l = a.listen;
                let host = if l.ip().is_unspecified() {
                    "127.0.0.1".to_string()
                } else {
                    l.ip().to_string()
                };
                format!("https://{host}:{}", l.port())
            }),
            (None, None) => anyhow::bail!("the site has no host.api and no --api was given"),
        };
        let ca_path = conn.ca.clone().unwrap_or_else(|| state_dir.join("ca.pem"));
        let ca = std::fs::read(&ca_path).with_context(|| format!("CA {}", ca_path.display()))?;
        // The file's first token, whatever its scopes (docs/api.md).
        let token = match (&conn.token_file, api) {
            (Some(f), _) => crate::auth::first(&site::SecretRef::File(f.clone())),
            (None, Some(a)) => crate::auth::first(&a.tokens),
            (None, None) => Err("no --token-file".to_string()),
        }
        .map_err(|e| anyhow::anyhow!("API token: {e}"))?;
        let token = site::Secret(token.value().to_string());
        Ok(Client {
            http: Http::with_ca(Duration::from_secs(30), &ca)?,
            base,
            token,
        })
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let mut b = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", self.token.expose()),
            );
        if body.is_some() {
            b = b.header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = b.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        let reply = self
            .http
            .send(req, "bootd API")
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let v = serde_json::from_slice(&reply.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&reply.body).into_owned()));
        Ok((reply.status, v))
    }
}

fn ok_or_bail(status: StatusCode, v: &Value) -> anyhow::Result<()> {
    if status.is_success() {
        return Ok(());
    }
    let mut msg = v
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or("request failed")
        .to_string();
    if let Some(p) = v.get("problems").and_then(Value::as_array) {
        for p in p {
            msg.push_str(&format!("\n  {}", p.as_str().unwrap_or_default()));
        }
    }
    anyhow::bail!("HTTP {}: {msg}", status.as_u16())
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

pub async fn nodes(client: &Client, cmd: NodesCmd) -> anyhow::Result<i32> {
    let mut out = std::io::stdout();
    match cmd {
        NodesCmd::List => {
            let (st, v) = client.call(Method::GET, "/v1/nodes", None).await?;
            ok_or_bail(st, &v)?;
            writeln!(
                out,
                "{:<16} {:<6} {:<10} {:<7} {:<14} MESSAGE",
                "NAME", "ORIGIN", "PROVIDER", "BOOT", "PHASE"
            )?;
            for n in v["nodes"].as_array().into_iter().flatten() {
                let provider = n["provider"]
                    .as_object()
                    .and_then(|o| o.keys().next().cloned())
                    .unwrap_or_else(|| "-".into());
                writeln!(
                    out,
                    "{:<16} {:<6} {:<10} {:<7} {:<14} {}",
                    s(n, "name"),
                    s(n, "origin"),
                    provider,
                    s(n, "bootKind"),
                    s(n, "phase"),
                    s(n, "message")
                )?;
            }
        }
        NodesCmd::Get { name } => {
            let (st, v) = client
                .call(Method::GET, &format!("/v1/nodes/{}", seg(&name)), None)
                .await?;
            ok_or_bail(st, &v)?;
            writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        }
        NodesCmd::Events { name } => {
            let (st, v) = client
                .call(
                    Method::GET,
                    &format!("/v1/nodes/{}/events", seg(&name)),
                    None,
                )
                .await?;
            ok_or_bail(st, &v)?;
            for e in v["events"].as_array().into_iter().flatten() {
                writeln!(
                    out,
                    "{}  {:<9} {}",
                    s(e, "time"),
                    s(e, "kind"),
                    s(e, "message")
                )?;
            }
        }
        NodesCmd::Timeline { name, json } => {
            let path = format!(
                "/v1/nodes/{}/timeline",
                percent_encoding::utf8_percent_encode(&name, percent_encoding::NON_ALPHANUMERIC)
            );
            let (st, v) = client.call(Method::GET, &path, None).await?;
            ok_or_bail(st, &v)?;
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
            } else {
                print_timeline(&v, &mut out)?;
            }
        }
        NodesCmd::Add { file } => {
            let body = if file.as_os_str() == "-" {
                let mut b = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)?;
                b
            } else {
                std::fs::read(&file)?
            };
            let (st, v) = client.call(Method::POST, "/v1/nodes", Some(body)).await?;
            ok_or_bail(st, &v)?;
            writeln!(out, "node {}: {}", s(&v, "name"), s(&v, "phase"))?;
        }
        NodesCmd::Delete { name, keep_disks } => {
            let q = if keep_disks { "?keepDisks=true" } else { "" };
            let (st, v) = client
                .call(
                    Method::DELETE,
                    &format!("/v1/nodes/{}{q}", seg(&name)),
                    None,
                )
                .await?;
            ok_or_bail(st, &v)?;
            writeln!(out, "node {name}: {}", s(&v, "phase"))?;
        }
        NodesCmd::ImportBmc {
            url,
            name,
            role,
            ip,
            username,
            password_file,
            system,
            ca_bundle,
            insecure_skip_verify,
            boot,
            mode,
            disk,
        } => {
            let mut body = import_bmc_body(
                &url,
                &name,
                &role,
                &ip,
                &username,
                &password_file,
                system,
                ca_bundle,
                insecure_skip_verify,
                boot,
                mode,
            );
            disk.apply(&mut body)?;
            let (st, v) = client
                .call(Method::POST, "/v1/nodes", Some(serde_json::to_vec(&body)?))
                .await?;
            ok_or_bail(st, &v)?;
            writeln!(
                out,
                "node {}: {} (its MACs are read from the BMC)",
                s(&v, "name"),
                s(&v, "phase")
            )?;
        }
        NodesCmd::Import {
            install_config,
            ips,
            dry_run,
        } => {
            let mut by_name = BTreeMap::new();
            for a in &ips {
                let (n, ip) = a
                    .split_once('=')
                    .ok_or_else(|| anyhow::anyhow!("--ip {a:?}: NAME=ADDRESS"))?;
                by_name.insert(n.to_string(), ip.to_string());
            }
            let text = std::fs::read_to_string(&install_config)
                .map_err(|e| anyhow::anyhow!("{}: {e}", install_config.display()))?;
            let path = std::path::absolute(&install_config)?;
            let bodies = import::bodies(&text, &path, &by_name).map_err(|ps| {
                anyhow::anyhow!(
                    "{}: {} problem(s):\n  {}",
                    install_config.display(),
                    ps.len(),
                    ps.join("\n  ")
                )
            })?;
            if dry_run {
                for b in &bodies {
                    writeln!(out, "{}", serde_json::to_string(b)?)?;
                }
                return Ok(0);
            }
            let mut failed = 0;
            for b in bodies {
                let (st, v) = client
                    .call(Method::POST, "/v1/nodes", Some(serde_json::to_vec(&b)?))
                    .await?;
                let name = b["name"].as_str().unwrap_or_default();
                if st.is_success() {
                    writeln!(out, "node {name}: {}", s(&v, "phase"))?;
                } else {
                    failed += 1;
                    let problems: Vec<String> = v["problems"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p.as_str().map(str::to_string))
                        .collect();
                    writeln!(
                        out,
                        "node {name}: refused ({st}): {}{}",
                        s(&v, "error"),
                        if problems.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", problems.join("; "))
                        }
                    )?;
                }
            }
            return Ok(i32::from(failed > 0));
        }
        NodesCmd::Inventory { name } => boot::inventory(client, &name, &mut out).await?,
        NodesCmd::Inspect { name } => boot::inspect(client, &name, &mut out).await?,
        NodesCmd::Reinstall { name } => boot::reinstall(client, &name, &mut out).await?,
        NodesCmd::Wait {
            names,
            until,
            timeout,
            interval,
        } => {
            return wait(
                client,
                &names,
                until,
                Duration::from_secs(timeout),
                interval,
                &mut out,
            )
            .await
        }
    }
    Ok(0)
}

/// A timeline (`GET /v1/nodes/NAME/timeline`) for people: phases with
/// durations (they add up to the total), then the events.
pub fn print_timeline(v: &Value, out: &mut impl Write) -> std::io::Result<()> {
    let phase = v["phase"].as_str().unwrap_or("waiting");
    writeln!(
        out,
        "{}  attempt {}  phase {}  {}  total {:.3} s",
        s(v, "node"),
        v["attempt"].as_u64().unwrap_or(1),
        phase,
        if v["inOrder"].as_bool() == Some(true) {
            "in order"
        } else {
            "OUT OF ORDER"
        },
        v["totalSeconds"].as_f64().unwrap_or(0.0)
    )?;
    writeln!(
        out,
        "{:<3} {:<15} {:<30} {:>10}  ERROR",
        "#", "PHASE", "START", "SECONDS"
    )?;
    for (i, p) in v["phases"].as_array().into_iter().flatten().enumerate() {
        writeln!(
            out,
            "{:<3} {:<15} {:<30} {:>10.3}  {}",
            i + 1,
            s(p, "phase"),
            s(p, "start"),
            p["seconds"].as_f64().unwrap_or(0.0),
            s(p, "lastError")
        )?;
    }
    writeln!(out, "events:")?;
    for e in v["events"].as_array().into_iter().flatten() {
        let at = e["atUs"].as_i64().unwrap_or(0);
        let mark = if e["error"].as_bool() == Some(true) {
            "!"
        } else {
            " "
        };
        writeln!(
            out,
            "{mark} {}  {:<15} {:<17} {}",
            crate::rfc3339(at / 1000),
            s(e, "phase"),
            s(e, "what"),
            s(e, "detail")
        )?;
    }
    Ok(())
}

/// The `POST /v1/nodes` body of `nodes import-bmc`: a node with the Redfish
/// provider and no `macs`.
#[allow(clippy::too_many_arguments)]
pub fn import_bmc_body(
    url: &str,
    name: &str,
    role: &str,
    ip: &str,
    username: &str,
    password_file: &std::path::Path,
    system: Option<String>,
    ca_bundle: Option<PathBuf>,
    insecure_skip_verify: bool,
    boot: Option<String>,
    mode: Option<String>,
) -> Value {
    let mut r = serde_json::json!({
        "url": url,
        "username": username,
        "password": { "file": password_file },
    });
    if let Some(s) = system {
        r["system"] = Value::String(s);
    }
    if let Some(c) = ca_bundle {
        r["caBundle"] = serde_json::json!(c);
    }
    if insecure_skip_verify {
        r["insecureSkipVerify"] = Value::Bool(true);
    }
    if let Some(b) = boot {
        r["boot"] = Value::String(b);
    }
    if let Some(m) = mode {
        r["mode"] = Value::String(m);
    }
    serde_json::json!({ "name": name, "role": role, "ip": ip, "provider": { "redfish": r } })
}

/// A path segment as typed (a name, a MAC with colons), percent-encoded.
fn seg(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, crate::providers::COMPONENT).to_string()
}

/// `bootd discovered list`'s table, written to `out`.
pub async fn discovered_list_to(client: &Client, out: &mut impl Write) -> anyhow::Result<()> {
    discovered::list(client, out).await
}

pub async fn discovered(client: &Client, cmd: DiscoveredCmd) -> anyhow::Result<i32> {
    let mut out = std::io::stdout();
    match cmd {
        DiscoveredCmd::List => discovered::list(client, &mut out).await?,
        DiscoveredCmd::Adopt {
            key,
            name,
            role,
            ip,
            disk,
            keep_disks,
        } => {
            let mut body = serde_json::json!({ "name": name, "role": role });
            disk.apply(&mut body)?;
            if keep_disks {
                body["keepDisks"] = Value::Bool(true);
            }
            if let Some(ip) = ip {
                body["ip"] = Value::String(ip);
            }
            let (st, v) = client
                .call(
                    Method::POST,
                    &format!("/v1/discovered/{}/adopt", seg(&key)),
                    Some(serde_json::to_vec(&body)?),
                )
                .await?;
            ok_or_bail(st, &v)?;
            writeln!(
                out,
                "node {}: {} (adopted {key}); it boots as the node at its next retry",
                s(&v, "name"),
                s(&v, "phase")
            )?;
        }
    }
    Ok(0)
}

pub async fn cluster(client: &Client, cmd: ClusterCmd) -> anyhow::Result<i32> {
    if let ClusterCmd::Destroy { provider, yes } = &cmd {
        return destroy(client, provider, *yes).await;
    }
    let (st, v) = match cmd {
        ClusterCmd::Destroy { .. } => unreachable!("handled above"),
        ClusterCmd::Up(_) => bail!("`cluster up` needs the site: run it through bootd"),
        ClusterCmd::Status => client.call(Method::GET, "/v1/cluster", None).await?,
        ClusterCmd::BootstrapComplete => {
            client
                .call(
                    Method::POST,
                    "/v1/cluster/bootstrap-complete",
                    Some(b"{}".to_vec()),
                )
                .await?
        }
    };
    ok_or_bail(st, &v)?;
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(0)
}
