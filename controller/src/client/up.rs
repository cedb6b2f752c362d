//! `bootd cluster up --install-config FILE`: the whole journey from an
//! install-config to a cluster, where this host can run it, one phase after
//! the other, each printed as it goes:
//!
//! 1. `install-config`: its cluster name and base domain must be the site's;
//!    the replicas per role are read from it (nothing else: the pull secret
//!    is skipped by the parser);
//! 2. `ignition`: the three configs from `--dir` when they are there, else
//!    `openshift-install create ignition-configs --dir DIR` (when that
//!    program is on `PATH`), installed as the site's role configs (bootd
//!    picks them up as it does any change of its files);
//! 3. `images`: `images fetch --site SITE` while a `catalog:` image set is
//!    not cached;
//! 4. `nodes`: first the install-config's `platform.baremetal.hosts` not
//!    yet there, each with its BMC (as `nodes import` makes them); then a
//!    bootstrap node and as many masters and workers as the replicas want,
//!    beyond those the site and the API already have, made through the
//!    API: each from its role's `--node ROLE=JSON` (the body of `POST
//!    /v1/nodes` without `name` and `role`), or with `--provider`'s
//!    defaults from the site;
//! 5. `ready`: every node Ready (as `bootd nodes wait`);
//! 6. `bootstrap`: bootstrap complete (from the cluster, lbd or
//!    `openshift-install wait-for bootstrap-complete` when it is on `PATH`),
//!    then the teardown's last step done;
//! 7. `joined`: every node's `Joined` condition True, when the controller
//!    follows the cluster (a kubeconfig in the site); else the CSRs are the
//!    operator's (`oc adm certificate approve`).
//!
//! Resumable: the phases done are kept in `DIR/cluster-up.json`, and each
//! phase looks before it acts (a node that exists is not made again; the
//! controller keeps its intent to make a machine before it asks the
//! provider), so a run killed anywhere is run again as it was.

use super::*;
use std::path::Path;

/// The three role configs openshift-install writes.
pub const ROLES: [&str; 3] = ["bootstrap", "master", "worker"];

#[derive(clap::Args, Debug, Clone)]
pub struct UpArgs {
    /// OpenShift's install-config.yaml.
    #[arg(long)]
    pub install_config: PathBuf,
    /// Where the Ignition configs are (or are made) and the progress is
    /// kept (default: <stateDir>/cluster-up).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The provider new nodes are made with, from the site's defaults
    /// (e.g. alibaba), for roles without --node.
    #[arg(long)]
    pub provider: Option<String>,
    /// How a role's new nodes are made: `ROLE=JSON`, the body of
    /// `POST /v1/nodes` without name and role (e.g.
    /// `worker={"arch":"ppc64le","provider":{"powervs":{"imageID":"rhcos-417"}}}`).
    #[arg(long = "node")]
    pub node: Vec<String>,
    /// Give up after this many seconds (exit 2).
    #[arg(long, default_value_t = 7200)]
    pub timeout: u64,
    /// Seconds between polls.
    #[arg(long, default_value_t = 2.0)]
    pub interval: f64,
}

/// What the journey reads of install-config.yaml.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct InstallConfig {
    metadata: Option<Metadata>,
    base_domain: Option<String>,
    control_plane: Option<Pool>,
    #[serde(default)]
    compute: Vec<Pool>,
}

#[derive(serde::Deserialize, Default)]
struct Metadata {
    name: Option<String>,
}

#[derive(serde::Deserialize, Default)]
struct Pool {
    name: Option<String>,
    replicas: Option<u32>,
}

/// The replicas per role install-config.yaml asks for (openshift-install's
/// defaults: 3 masters, 3 workers), after checking its name and base domain
/// against the site's.
pub fn replicas(text: &str, site: &site::Site) -> anyhow::Result<BTreeMap<String, u32>> {
    let ic: InstallConfig = serde_yaml_ng::from_str(text)
        .map_err(|e| anyhow::anyhow!("install-config: not an install-config: {e}"))?;
    let name = ic.metadata.and_then(|m| m.name).unwrap_or_default();
    let base = ic.base_domain.unwrap_or_default();
    if name != site.cluster.name || base != site.cluster.base_domain {
        bail!(
            "install-config: the cluster is {name}.{base}, the site's is {}: they must be one cluster",
            site.cluster.domain()
        );
    }
    let mut out = BTreeMap::new();
    out.insert(
        site::ROLE_MASTER.to_string(),
        ic.control_plane.and_then(|p| p.replicas).unwrap_or(3),
    );
    for p in ic.compute {
        let role = p.name.unwrap_or_else(|| site::ROLE_WORKER.to_string());
        out.insert(role, p.replicas.unwrap_or(3));
    }
    out.entry(site::ROLE_WORKER.to_string()).or_insert(3);
    Ok(out)
}

/// The names to make so that each role has its replicas: `<role>-<i>`, the
/// lowest `i` free, skipping names that exist; and `bootstrap` unless a
/// bootstrap node exists or bootstrap is complete.
pub fn missing_nodes(
    want: &BTreeMap<String, u32>,
    existing: &[(String, String)],
    bootstrap_done: bool,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let has_role = |r: &str| existing.iter().filter(|(_, role)| role == r).count() as u32;
    if !bootstrap_done && has_role(site::ROLE_BOOTSTRAP) == 0 {
        out.push(("bootstrap".to_string(), site::ROLE_BOOTSTRAP.to_string()));
    }
    for (role, n) in want {
        let mut short = n.saturating_sub(has_role(role));
        let mut i = 0;
        while short > 0 {
            let name = format!("{role}-{i}");
            if !existing.iter().any(|(n, _)| *n == name) {
                out.push((name, role.clone()));
                short -= 1;
            }
            i += 1;
        }
    }
    out
}

/// Progress kept in `DIR/cluster-up.json`.
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct Progress {
    done: Vec<String>,
}

struct Run<'a> {
    client: &'a Client,
    site: &'a site::Site,
    dir: PathBuf,
    start: Instant,
    args: &'a UpArgs,
}

impl Run<'_> {
    fn say(&self, phase: &str, msg: impl std::fmt::Display) {
        println!("[{:>5}s] {phase:<14} {msg}", self.start.elapsed().as_secs());
    }

    fn progress(&self) -> Progress {
        std::fs::read(self.dir.join("cluster-up.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    fn mark(&self, phase: &str) -> anyhow::Result<()> {
        let mut p = self.progress();
        if !p.done.iter().any(|d| d == phase) {
            p.done.push(phase.to_string());
        }
        write_atomic(
            &self.dir.join("cluster-up.json"),
            &serde_json::to_vec_pretty(&p)?,
            0o644,
        )
    }

    fn timed_out(&self) -> bool {
        self.start.elapsed() >= Duration::from_secs(self.args.timeout)
    }

    async fn sleep(&self) {
        tokio::time::sleep(Duration::from_secs_f64(
            self.args.interval.clamp(0.05, 60.0),
        ))
        .await;
    }
}

/// Writes `bytes` to `path` through a temporary file and a rename.
fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("{}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("{}", path.display()))?;
    Ok(())
}

/// A program on `PATH`, or beside this executable.
fn program(name: &str) -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(name)));
    beside
        .into_iter()
        .chain(
            std::env::var_os("PATH")
                .map(|p| {
                    std::env::split_paths(&p)
                        .map(|d| d.join(name))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        )
        .find(|p| p.is_file())
}

/// `bootd cluster up`: 0 when the cluster is up, 1 when a node failed, 2 on timeout.
pub async fn up(
    client: &Client,
    site: &site::Site,
    state_dir: &Path,
    args: &UpArgs,
) -> anyhow::Result<i32> {
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| state_dir.join("cluster-up"));
    std::fs::create_dir_all(&dir).with_context(|| format!("{}", dir.display()))?;
    let run = Run {
        client,
        site,
        dir,
        start: Instant::now(),
        args,
    };
    let text = std::fs::read_to_string(&args.install_config)
        .with_context(|| format!("{}", args.install_config.display()))?;
    let want = replicas(&text, site)?;
    let done = run.progress().done;
    if !done.is_empty() {
        run.say("resume", format!("done before: {}", done.join(", ")));
    }
    run.say(
        "install-config",
        format!(
            "cluster {}: {}",
            site.cluster.domain(),
            want.iter()
                .map(|(r, n)| format!("{n} {r}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    let specs = node_templates(&args.node)?;
    type Phase<'a> = (
        &'static str,
        std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<i32>> + 'a>>,
    );
    let phases: Vec<Phase> = vec![
        ("ignition", Box::pin(ignition(&run, &text))),
        ("images", Box::pin(images(&run))),
        ("nodes", Box::pin(nodes(&run, &want, &specs, &text))),
        ("ready", Box::pin(ready(&run))),
        ("bootstrap", Box::pin(bootstrap(&run))),
        ("joined", Box::pin(joined(&run))),
    ];
    for (name, fut) in phases {
        if done.iter().any(|d| d == name) {
            run.say(name, "done before");
            continue;
        }
        let code = fut.await?;
        if code != 0 {
            return Ok(code);
        }
        run.mark(name)?;
    }
    run.say("up", format!("cluster {} is up", site.cluster.domain()));
    Ok(0)
}

fn node_templates(given: &[String]) -> anyhow::Result<BTreeMap<String, Value>> {
    let mut out = BTreeMap::new();
    for g in given {
        let (role, json) = g
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--node {g:?}: want ROLE=JSON"))?;
        let v: Value = serde_json::from_str(json)
            .map_err(|e| anyhow::anyhow!("--node {role}: not JSON: {e}"))?;
        let Some(o) = v.as_object() else {
            bail!("--node {role}: want a JSON object");
        };
        if o.contains_key("name") || o.contains_key("role") {
            bail!("--node {role}: name and role are given by cluster up");
        }
        out.insert(role.to_string(), v);
    }
    Ok(out)
}

/// The `POST /v1/nodes` body of a new node: its role's template, or the
/// provider's defaults; `None` when neither is given.
pub fn node_body(
    name: &str,
    role: &str,
    templates: &BTreeMap<String, Value>,
    provider: Option<&str>,
) -> Option<Value> {
    let mut body = match (templates.get(role), provider) {
        (Some(t), _) => t.clone(),
        (None, Some(p)) => json!({"provider": {p: {}}}),
        (None, None) => return None,
    };
    body["name"] = json!(name);
    body["role"] = json!(role);
    Some(body)
}

/// The three role configs: from the directory, or made by openshift-install;
/// then installed where the site reads them.
async fn ignition(run: &Run<'_>, install_config: &str) -> anyhow::Result<i32> {
    let have = |d: &Path| ROLES.iter().all(|r| d.join(format!("{r}.ign")).is_file());
    if have(&run.dir) {
        run.say("ignition", format!("the configs in {}", run.dir.display()));
    } else if let Some(oi) = program("openshift-install") {
        // openshift-install consumes install-config.yaml from its directory.
        write_atomic(
            &run.dir.join("install-config.yaml"),
            install_config.as_bytes(),
            0o600,
        )?;
        run.say(
            "ignition",
            format!(
                "{} create ignition-configs --dir {}",
                oi.display(),
                run.dir.display()
            ),
        );
        let st = tokio::process::Command::new(&oi)
            .args(["create", "ignition-configs", "--dir"])
            .arg(&run.dir)
            .status()
            .await
            .with_context(|| format!("{}", oi.display()))?;
        if !st.success() || !have(&run.dir) {
            bail!("openshift-install create ignition-configs failed ({st})");
        }
    } else {
        bail!(
            "no bootstrap.ign, master.ign and worker.ign in {}, and no openshift-install on PATH to make them",
            run.dir.display()
        );
    }
    for role in ROLES {
        let Some(path) = run.site.ignition.path_of(role) else {
            bail!("the site says nowhere to read role {role}'s Ignition from: set ignition.dir");
        };
        let new = std::fs::read(run.dir.join(format!("{role}.ign")))?;
        serde_json::from_slice::<Value>(&new)
            .map_err(|e| anyhow::anyhow!("{role}.ign is not JSON: {e}"))?;
        if std::fs::read(&path).ok().as_deref() == Some(&new[..]) {
            continue;
        }
        write_atomic(&path, &new, 0o600)?;
        run.say("ignition", format!("installed {}", path.display()));
    }
    Ok(0)
}

async fn images(run: &Run<'_>) -> anyhow::Result<i32> {
    let missing: Vec<&String> = run
        .site
        .images
        .sets
        .iter()
        .filter(|(_, s)| s.catalog.as_ref().is_some_and(|c| c.resolved.is_err()))
        .map(|(n, _)| n)
        .collect();
    if missing.is_empty() {
        run.say("images", "every image set is at hand");
        return Ok(0);
    }
    let Some(images) = program("images") else {
        bail!(
            "image sets {} are not cached, and no `images` program is on PATH to fetch them",
            missing
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    run.say(
        "images",
        format!("images fetch --site {}", run.site.source.display()),
    );
    let st = tokio::process::Command::new(&images)
        .arg("fetch")
        .arg("--site")
        .arg(&run.site.source)
        .status()
        .await?;
    if !st.success() {
        bail!("images fetch failed ({st})");
    }
    Ok(0)
}

/// `(name, role)` of every node the API lists.
async fn existing(run: &Run<'_>) -> anyhow::Result<Vec<(String, String)>> {
    let (st, v) = run.client.call(Method::GET, "/v1/nodes", None).await?;
    ok_or_bail(st, &v)?;
    Ok(v["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            let role = n["spec"]["role"].as_str().or(n["role"].as_str());
            (
                s(n, "name").to_string(),
                role.unwrap_or_default().to_string(),
            )
        })
        .collect())
}

async fn bootstrap_complete(run: &Run<'_>) -> anyhow::Result<(bool, Value)> {
    let (st, c) = run.client.call(Method::GET, "/v1/cluster", None).await?;
    ok_or_bail(st, &c)?;
    Ok((c["bootstrapComplete"]["complete"] == true, c))
}

async fn nodes(
    run: &Run<'_>,
    want: &BTreeMap<String, u32>,
    specs: &BTreeMap<String, Value>,
    install_config: &str,
) -> anyhow::Result<i32> {
    // The hosts the install-config describes (platform.baremetal.hosts),
    // made as `nodes import` makes them, before the replicas are counted.
    let have = existing(run).await?;
    let names: Vec<String> = have.iter().map(|(n, _)| n.clone()).collect();
    let file = std::path::absolute(&run.args.install_config)?;
    let hosts = super::import::hosts_to_make(install_config, &file, &names).map_err(|ps| {
        anyhow::anyhow!(
            "{}: platform.baremetal.hosts: {}",
            run.args.install_config.display(),
            ps.join("; ")
        )
    })?;
    for body in hosts {
        let name = body["name"].as_str().unwrap_or_default().to_string();
        let (st, v) = run
            .client
            .call(Method::POST, "/v1/nodes", Some(serde_json::to_vec(&body)?))
            .await?;
        match st.as_u16() {
            200 | 201 => run.say(
                "nodes",
                format!("{name} (a host of the install-config) made through its BMC"),
            ),
            409 => run.say(
                "nodes",
                format!("{name} (a host of the install-config) is there"),
            ),
            _ => {
                ok_or_bail(st, &v)?;
            }
        }
    }
    let have = existing(run).await?;
    let (done, _) = bootstrap_complete(run).await?;
    let make = missing_nodes(want, &have, done);
    if make.is_empty() {
        run.say("nodes", format!("all {} node(s) are there", have.len()));
        return Ok(0);
    }
    let bodies: Vec<(String, String, Option<Value>)> = make
        .into_iter()
        .map(|(n, r)| {
            let b = node_body(&n, &r, specs, run.args.provider.as_deref());
            (n, r, b)
        })
        .collect();
    let unmade: Vec<&str> = bodies
        .iter()
        .filter(|(_, _, b)| b.is_none())
        .map(|(n, _, _)| n.as_str())
        .collect();
    if !unmade.is_empty() {
        bail!(
            "{} more node(s) are wanted ({}) and neither --node for their role nor --provider says how to make them: add them to the site, or give one",
            unmade.len(),
            unmade.join(", ")
        );
    }
    for (name, role, body) in bodies {
        let body = body.expect("checked above");
        let by = body["provider"]
            .as_object()
            .and_then(|o| o.keys().next().cloned())
            .unwrap_or_else(|| "the API".into());
        let (st, v) = run
            .client
            .call(Method::POST, "/v1/nodes", Some(serde_json::to_vec(&body)?))
            .await?;
        match st.as_u16() {
            201 => run.say("nodes", format!("{name} ({role}) made through {by}")),
            // Made by a run that stopped before it could say so.
            409 => run.say("nodes", format!("{name} ({role}) is there")),
            _ => {
                ok_or_bail(st, &v)?;
            }
        }
    }
    Ok(0)
}

async fn ready(run: &Run<'_>) -> anyhow::Result<i32> {
    let left = Duration::from_secs(run.args.timeout).saturating_sub(run.start.elapsed());
    run.say("ready", "waiting for every node to be Ready");
    let mut out = std::io::stdout();
    wait(
        run.client,
        &[],
        WaitFor::Ready,
        left,
        run.args.interval,
        &mut out,
    )
    .await
}

async fn bootstrap(run: &Run<'_>) -> anyhow::Result<i32> {
    let (done, _) = bootstrap_complete(run).await?;
    if !done {
        let oi = program("openshift-install").filter(|_| run.dir.join("auth").is_dir());
        if let Some(oi) = oi {
            run.say("bootstrap", "openshift-install wait-for bootstrap-complete");
            let st = tokio::process::Command::new(&oi)
                .args(["wait-for", "bootstrap-complete", "--dir"])
                .arg(&run.dir)
                .status()
                .await?;
            if !st.success() {
                bail!("openshift-install wait-for bootstrap-complete failed ({st})");
            }
            let (st, v) = run
                .client
                .call(
                    Method::POST,
                    "/v1/cluster/bootstrap-complete",
                    Some(b"{}".to_vec()),
                )
                .await?;
            ok_or_bail(st, &v)?;
        } else {
            run.say(
                "bootstrap",
                "waiting for bootstrap complete (from the cluster, lbd, or `bootd cluster bootstrap-complete`)",
            );
        }
    }
    loop {
        let (done, c) = bootstrap_complete(run).await?;
        let deleted = c["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|x| x["type"] == "BootstrapMachineDeleted" && x["status"] == "True");
        if done && deleted {
            run.say(
                "bootstrap",
                format!(
                    "complete (said by {}); the bootstrap node is gone",
                    s(&c["bootstrapComplete"], "by")
                ),
            );
            return Ok(0);
        }
        if run.timed_out() {
            println!("TIMEOUT waiting for bootstrap complete and its teardown");
            return Ok(2);
        }
        run.sleep().await;
    }
}

async fn joined(run: &Run<'_>) -> anyhow::Result<i32> {
    let (_, c) = bootstrap_complete(run).await?;
    // The controller says Joined only when it follows the cluster.
    if c["csrs"]["followed"] != true {
        run.say(
            "joined",
            "the controller does not follow the cluster (no host.api.kubeconfig in the site): \
             approve the kubelets' CSRs with `oc adm certificate approve`",
        );
        return Ok(0);
    }
    let left = Duration::from_secs(run.args.timeout).saturating_sub(run.start.elapsed());
    run.say("joined", "waiting for every node to join");
    let mut out = std::io::stdout();
    wait(
        run.client,
        &[],
        WaitFor::Joined,
        left,
        run.args.interval,
        &mut out,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> site::Site {
        site::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/site.yaml"))
            .unwrap()
    }

    #[test]
    fn replicas_come_from_the_install_config_of_the_site_s_cluster() {
        let site = lab();
        let ic = format!(
            "apiVersion: v1\nmetadata: {{ name: {} }}\nbaseDomain: {}\npullSecret: '{{\"auths\":{{}}}}'\n\
             controlPlane: {{ name: master, replicas: 3 }}\ncompute: [{{ name: worker, replicas: 2 }}]\n",
            site.cluster.name, site.cluster.base_domain
        );
        let r = replicas(&ic, &site).unwrap();
        assert_eq!(r["master"], 3);
        assert_eq!(r["worker"], 2);
        let other = ic.replace(&format!("name: {} ", site.cluster.name), "name: other ");
        let e = replicas(&other, &site).unwrap_err().to_string();
        assert!(
            e.contains("other.") && e.contains("must be one cluster"),
            "{e}"
        );
    }

    #[test]
    fn a_node_is_made_from_its_role_s_template_or_the_provider_s_defaults() {
        let t = node_templates(&[
            r#"worker={"arch":"ppc64le","provider":{"powervs":{"imageID":"r"}}}"#.into(),
        ])
        .unwrap();
        let w = node_body("worker-0", "worker", &t, Some("alibaba")).unwrap();
        assert_eq!(w["provider"]["powervs"]["imageID"], "r");
        assert_eq!(
            (w["name"].as_str(), w["role"].as_str()),
            (Some("worker-0"), Some("worker"))
        );
        let m = node_body("master-0", "master", &t, Some("alibaba")).unwrap();
        assert_eq!(
            m,
            json!({"name": "master-0", "role": "master", "provider": {"alibaba": {}}})
        );
        assert!(node_body("master-0", "master", &t, None).is_none());
        assert!(node_templates(&[r#"worker={"name":"x"}"#.into()]).is_err());
        assert!(node_templates(&["worker".into()]).is_err());
    }

    #[test]
    fn missing_nodes_fill_each_role_with_free_names() {
        let want = BTreeMap::from([("master".to_string(), 3), ("worker".to_string(), 2)]);
        let have = vec![
            ("master-1".to_string(), "master".to_string()),
            ("rack-w".to_string(), "worker".to_string()),
        ];
        let m = missing_nodes(&want, &have, false);
        let names: Vec<&str> = m.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["bootstrap", "master-0", "master-2", "worker-0"]);
        // After bootstrap is complete no bootstrap node is made again.
        let m = missing_nodes(&want, &have, true);
        assert!(!m.iter().any(|(n, _)| n == "bootstrap"));
        // All there: nothing.
        let full = vec![
            ("bootstrap".to_string(), "bootstrap".to_string()),
            ("m0".to_string(), "master".to_string()),
            ("m1".to_string(), "master".to_string()),
            ("m2".to_string(), "master".to_string()),
            ("w0".to_string(), "worker".to_string()),
            ("w1".to_string(), "worker".to_string()),
        ];
        assert!(missing_nodes(&want, &full, false).is_empty());
    }
}
