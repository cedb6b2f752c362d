//! The `images` command: fetch, list, verify, gc, show, ids, tftp-root.
//! See docs/images.md.

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use images::cache::{self, Cache, Depth};
use images::cloud::CloudCatalog;
use images::fetch::{self, Fetcher, Outcome, Source};
use images::stream::Stream;
use site::catalog;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(
    name = "images",
    version,
    about = "OS image catalog and cache: CoreOS stream metadata, verified downloads, cloud image IDs, boot binaries"
)]
struct Cli {
    /// The cache root (default: images.root of the first --site).
    #[arg(long, global = true)]
    root: Option<PathBuf>,
    /// A site description; repeat for gc over several sites.
    #[arg(long, global = true)]
    site: Vec<PathBuf>,
    /// An OpenPGP public key file (armored or binary) that artifacts must be
    /// signed by, besides the site's images.signingKeys; repeatable.
    #[arg(long, global = true)]
    signing_key: Vec<PathBuf>,
    /// Refuse artifacts the stream metadata names no signature for (the
    /// default when keys are given and no site says otherwise).
    #[arg(long, global = true)]
    require_signatures: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Fetch a set into the cache; with --site, every catalog set the site names.
    Fetch(FetchArgs),
    /// The sets in the cache.
    List,
    /// Re-hash every cached file against its manifest, and check its
    /// signature when keys are given; exit 1 on any problem.
    Verify,
    /// Remove every cached set no --site references.
    Gc {
        #[arg(long)]
        dry_run: bool,
    },
    /// What a stream metadata document offers: releases, formats, cloud images.
    Show {
        #[command(flatten)]
        src: SourceArgs,
        #[arg(long)]
        arch: Option<String>,
    },
    /// Cloud image IDs: look one up, or export a provider's as a Gardener CloudProfileConfig.
    Ids(IdsArgs),
    /// Assemble bootd's TFTP root (iPXE, GRUB) for the given arches.
    TftpRoot(TftpArgs),
}

#[derive(clap::Args, Debug)]
struct SourceArgs {
    /// Stream name (Fedora CoreOS: stable, testing, next; RHCOS: e.g. rhcos-4.14).
    #[arg(long)]
    stream: Option<String>,
    /// Stream metadata: a URL or a file (e.g. openshift-install's data/data/coreos/rhcos.json).
    #[arg(long)]
    stream_url: Option<String>,
}

#[derive(clap::Args, Debug)]
struct FetchArgs {
    /// With --site: only these image sets.
    #[arg(long)]
    set: Vec<String>,
    #[command(flatten)]
    src: SourceArgs,
    /// A version, or "latest" (what the stream metadata names now).
    #[arg(long, default_value = "latest")]
    version: String,
    #[arg(long, default_value = "x86_64")]
    arch: Vec<String>,
    #[arg(long, default_value = "metal")]
    platform: String,
    /// Formats to fetch (pxe: kernel, initramfs, rootfs; also e.g. iso, raw.xz, ova.gz).
    #[arg(long, default_value = "pxe")]
    format: Vec<String>,
    /// Parallel downloads.
    #[arg(long, default_value_t = 3)]
    jobs: usize,
    /// Retries per file after the first attempt.
    #[arg(long, default_value_t = 5)]
    retries: u32,
    /// Extra trusted CA (PEM), e.g. a local mirror's.
    #[arg(long)]
    ca_file: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct IdsArgs {
    #[arg(long)]
    provider: String,
    #[arg(long)]
    region: Option<String>,
    #[arg(long)]
    version: Option<String>,
    #[arg(long, default_value = "x86_64")]
    arch: String,
    /// Gardener-style CloudProfileConfig files for --provider (override the streams' IDs).
    #[arg(long)]
    cloud_profile: Vec<PathBuf>,
    /// Print the provider's mapping as a CloudProfileConfig (YAML) instead.
    #[arg(long)]
    export: bool,
}

#[derive(clap::Args, Debug)]
struct TftpArgs {
    dir: PathBuf,
    /// Default: the arches of the --site nodes, else of the cached sets.
    #[arg(long)]
    arch: Vec<String>,
    #[arg(long, default_value = "/usr/lib/ipxe")]
    ipxe_dir: PathBuf,
    #[arg(long)]
    ipxe_arm64: Option<PathBuf>,
    #[arg(long)]
    grub_ieee1275_dir: Option<PathBuf>,
    #[arg(long, default_value = "grub-mkimage")]
    grub_mkimage: PathBuf,
    #[arg(long, default_value_t = 8)]
    grub_net_tries: u32,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let sites = cli
        .site
        .iter()
        .map(|p| site::load(p).map_err(|e| anyhow::anyhow!("{e}")))
        .collect::<Result<Vec<_>>>()?;
    let root = || -> Result<PathBuf> {
        match (&cli.root, sites.first()) {
            (Some(r), _) => Ok(r.clone()),
            (None, Some(s)) => Ok(s.images.root.clone()),
            (None, None) => bail!("give --root DIR or --site FILE (its images.root is the cache)"),
        }
    };
    let cli_keys = cli
        .signing_key
        .iter()
        .map(|p| {
            site::SigningKey::read(p)
                .map_err(|e| anyhow::anyhow!("--signing-key {}: {e}", p.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    let signing = |s: Option<&site::Site>| -> Result<Arc<site::Signing>> {
        let mut g = s.map(|s| s.images.signing.clone()).unwrap_or_default();
        let defaulted = !cli_keys.is_empty() && !g.enabled();
        g.keys.extend(cli_keys.iter().cloned());
        g.require |= cli.require_signatures || defaulted;
        if g.require && !g.enabled() {
            bail!("--require-signatures needs keys: --signing-key FILE, or a --site with images.signingKeys");
        }
        Ok(Arc::new(g))
    };
    let checks = matches!(cli.cmd, Cmd::Fetch(_) | Cmd::Verify) && cli_keys.is_empty();
    for s in sites.iter().filter(|_| checks) {
        if let Some(w) = site::exposure::unsigned_images(s) {
            eprintln!("warning: {}: {w}", s.source.display());
        }
    }
    match cli.cmd {
        Cmd::Fetch(a) => fetch_cmd(Cache::new(root()?), &sites, &signing, a),
        Cmd::List => list(&Cache::new(root()?)),
        Cmd::Verify => verify(&Cache::new(root()?), &*signing(sites.first())?),
        Cmd::Gc { dry_run } => gc(&Cache::new(root()?), &sites, dry_run),
        Cmd::Show { src, arch } => show(src, arch),
        Cmd::Ids(a) => ids(
            cli.root
                .as_deref()
                .map(Cache::new)
                .or_else(|| root().ok().map(Cache::new)),
            a,
        ),
        Cmd::TftpRoot(a) => tftp_root(&sites, cli.root.as_deref(), a),
    }
}

/// The signing policy of a site (or of none), with the command line's keys.
type Policy<'a> = dyn Fn(Option<&site::Site>) -> Result<Arc<site::Signing>> + 'a;

fn fetch_cmd(cache: Cache, sites: &[site::Site], signing: &Policy, a: FetchArgs) -> Result<()> {
    let mut requests = Vec::new();
    if !sites.is_empty() {
        for s in sites {
            let policy = signing(Some(s))?;
            let dir = s.source.parent().map(Path::to_path_buf).unwrap_or_default();
            for (name, set) in &s.images.sets {
                let Some(c) = &set.catalog else { continue };
                if !a.set.is_empty() && !a.set.contains(name) {
                    continue;
                }
                let r = &c.reference;
                let source = r
                    .stream_url
                    .as_deref()
                    .map(Source::parse)
                    .map(|src| match src {
                        Source::File(p) if p.is_relative() => Source::File(dir.join(p)),
                        other => other,
                    });
                requests.push(fetch::Request {
                    stream: Some(r.stream.clone()),
                    version: r.version.clone(),
                    arch: r.arch.clone(),
                    platform: r.platform.clone(),
                    formats: a.format.clone(),
                    source: a.src.stream_url.as_deref().map(Source::parse).or(source),
                    signing: Arc::clone(&policy),
                });
            }
        }
        if requests.is_empty() {
            bail!(
                "no catalog image sets{} in the site",
                if a.set.is_empty() {
                    String::new()
                } else {
                    format!(" named {}", a.set.join(", "))
                }
            );
        }
    } else {
        if a.src.stream.is_none() && a.src.stream_url.is_none() {
            bail!("give --site, or --stream and/or --stream-url");
        }
        let policy = signing(None)?;
        if !policy.enabled() {
            eprintln!("warning: signatures are not checked: no --signing-key (or --site with images.signingKeys); artifacts are trusted by the stream metadata's sha256");
        }
        for arch in &a.arch {
            requests.push(fetch::Request {
                stream: a.src.stream.clone(),
                version: a.version.clone(),
                arch: images::cloud::normalize_arch(arch),
                platform: a.platform.clone(),
                formats: a.format.clone(),
                source: a.src.stream_url.as_deref().map(Source::parse),
                signing: Arc::clone(&policy),
            });
        }
    }
    let fetcher = Fetcher {
        cache,
        client: images::client::Client::new(a.ca_file.as_deref())?,
        options: fetch::Options {
            jobs: a.jobs,
            retries: a.retries,
            ..Default::default()
        },
        progress: Arc::from(images::progress::auto()),
    };
    let rt = tokio::runtime::Runtime::new()?;
    let mut failed = 0;
    for r in &requests {
        let what = format!(
            "{} {} {}/{}",
            r.stream.as_deref().unwrap_or("(stream)"),
            r.version,
            r.arch,
            r.platform
        );
        match rt.block_on(fetcher.fetch(r)) {
            Ok(Outcome::Cached { dir, .. }) => println!(
                "{what}: in the cache: {}",
                fetcher.cache.root.join(dir).display()
            ),
            Ok(Outcome::Fetched {
                dir, files, bytes, ..
            }) => {
                println!(
                    "{what}: fetched {files} files ({}): {}",
                    indicatif::HumanBytes(bytes),
                    fetcher.cache.root.join(dir).display()
                )
            }
            Err(e) => {
                eprintln!("{what}: {e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} sets not fetched", requests.len());
    }
    Ok(())
}

fn list(cache: &Cache) -> Result<()> {
    let sets = cache
        .list()
        .with_context(|| format!("reading {}", cache.root.display()))?;
    if sets.is_empty() {
        println!("no sets in {}", cache.root.display());
    }
    for s in sets {
        let m = &s.manifest;
        let latest = catalog::read_latest(&cache.root, &m.stream).unwrap_or_default();
        let is_latest = latest.get(&format!("{}/{}", m.arch, m.platform)) == Some(&m.version);
        let size: u64 = m.files.iter().map(|f| f.size).sum();
        println!(
            "{}{}  ({} files, {})",
            s.dir,
            if is_latest { "  [latest]" } else { "" },
            m.files.len(),
            indicatif::HumanBytes(size)
        );
        for f in &m.files {
            println!(
                "    {:<9} {:<7} {}  {}",
                f.role,
                f.format,
                f.name,
                indicatif::HumanBytes(f.size)
            );
        }
    }
    Ok(())
}

fn verify(cache: &Cache, signing: &site::Signing) -> Result<()> {
    let mut bad = 0;
    let sets = cache.list()?;
    for s in &sets {
        let mut problems: Vec<String> = cache
            .check_set(&s.dir, &s.manifest, Depth::Full)
            .iter()
            .map(ToString::to_string)
            .collect();
        let mut note = String::new();
        if signing.enabled() {
            let sigs = images::openpgp::check_set(signing, &cache.root.join(&s.dir), &s.manifest);
            problems.extend(sigs.problems);
            let mut keys: Vec<&str> = sigs.signers.iter().map(|s| s.key_id.as_str()).collect();
            keys.sort();
            keys.dedup();
            if !keys.is_empty() {
                note = format!(
                    "  ({} signatures by {})",
                    sigs.signers.len(),
                    keys.join(", ")
                );
            }
            if sigs.unsigned > 0 {
                note.push_str(&format!("  ({} unsigned)", sigs.unsigned));
            }
        }
        if problems.is_empty() {
            println!("ok   {}{note}", s.dir);
        } else {
            bad += 1;
            println!("BAD  {}", s.dir);
            for p in problems {
                println!("       {p}");
            }
        }
    }
    if !signing.enabled() && !sets.is_empty() {
        println!("signatures not checked: no --signing-key, and no --site with images.signingKeys");
    }
    if bad > 0 {
        bail!(
            "{bad} of {} sets have problems: fetch them again (images fetch ...)",
            sets.len()
        );
    }
    println!("{} sets verified", sets.len());
    Ok(())
}

fn gc(cache: &Cache, sites: &[site::Site], dry_run: bool) -> Result<()> {
    if sites.is_empty() {
        bail!("gc needs every site that uses the cache (--site FILE, repeated): it removes what none of them references");
    }
    let mut keep = BTreeSet::new();
    for s in sites {
        if s.images.root != cache.root {
            eprintln!(
                "note: {} serves images from {}, not {}",
                s.source.display(),
                s.images.root.display(),
                cache.root.display()
            );
        }
        keep.extend(cache::referenced_sets(s));
    }
    let removed = cache.gc(&keep, dry_run)?;
    for r in &removed {
        println!("{} {r}", if dry_run { "would remove" } else { "removed" });
    }
    println!(
        "{} sets kept, {} {}",
        keep.len(),
        removed.len(),
        if dry_run { "to remove" } else { "removed" }
    );
    Ok(())
}

fn load_doc(src: &SourceArgs) -> Result<Stream> {
    let source = match (&src.stream_url, &src.stream) {
        (Some(u), _) => Source::parse(u),
        (None, Some(s)) => Source::default_for(s)
            .with_context(|| format!("no default URL for stream {s:?}: give --stream-url"))?,
        (None, None) => bail!("give --stream or --stream-url"),
    };
    let bytes = match &source {
        Source::File(p) => std::fs::read(p).with_context(|| p.display().to_string())?,
        Source::Url(u) => {
            let client = images::client::Client::new(None)?;
            tokio::runtime::Runtime::new()?.block_on(async {
                use http_body_util::BodyExt;
                let (_, resp) = client.get(u, &http::HeaderMap::new()).await?;
                if !resp.status().is_success() {
                    bail!("{u}: HTTP {}", resp.status());
                }
                Ok(resp.into_body().collect().await?.to_bytes().to_vec())
            })?
        }
    };
    Stream::parse(&bytes).with_context(|| source.to_string())
}

fn show(src: SourceArgs, arch: Option<String>) -> Result<()> {
    let doc = load_doc(&src)?;
    println!(
        "stream {} (last modified {})",
        doc.stream, doc.metadata.last_modified
    );
    for (a, entry) in &doc.architectures {
        if arch
            .as_deref()
            .is_some_and(|x| images::cloud::normalize_arch(x) != images::cloud::normalize_arch(a))
        {
            continue;
        }
        println!("{a}:");
        for (p, pa) in &entry.artifacts {
            println!(
                "  {p:<12} {}  formats: {}",
                pa.release,
                pa.formats.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }
    let cloud = CloudCatalog::from_stream(&doc);
    for i in cloud.images.iter().filter(|i| {
        arch.as_deref()
            .is_none_or(|x| images::cloud::normalize_arch(x) == i.arch)
    }) {
        println!(
            "  image {:<9} {:<8} {:<16} {}",
            i.provider, i.arch, i.region, i.id
        );
    }
    Ok(())
}

fn ids(cache: Option<Cache>, a: IdsArgs) -> Result<()> {
    let mut cat = match &cache {
        Some(c) => CloudCatalog::from_cache(c)?,
        None => CloudCatalog::default(),
    };
    for f in &a.cloud_profile {
        cat.merge_cloud_profile_config(&a.provider, f)?;
    }
    if a.export {
        let cfg = cat.to_cloud_profile_config(
            &a.provider,
            &format!("{}.provider.extensions.gardener.cloud/v1alpha1", a.provider),
        );
        print!("{}", serde_yaml_ng::to_string(&cfg)?);
        return Ok(());
    }
    let (Some(region), Some(version)) = (&a.region, &a.version) else {
        bail!("give --region and --version (or --export)")
    };
    let img = cat.image_id(&a.provider, region, version, &a.arch)?;
    println!("{}", img.id);
    if let Some(b) = &img.bucket {
        eprintln!(
            "bucket {b}{}",
            img.url
                .as_deref()
                .map(|u| format!(", {u}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}

fn tftp_root(sites: &[site::Site], root: Option<&Path>, a: TftpArgs) -> Result<()> {
    let mut arches: Vec<site::Arch> = Vec::new();
    for x in &a.arch {
        arches.push(
            site::Arch::parse(x)
                .with_context(|| format!("--arch {x:?}: want x86_64, aarch64 or ppc64le"))?,
        );
    }
    if arches.is_empty() {
        arches.extend(sites.iter().flat_map(|s| s.nodes.iter().map(|n| n.arch)));
    }
    if arches.is_empty() {
        if let Some(r) = root
            .map(Path::to_path_buf)
            .or_else(|| sites.first().map(|s| s.images.root.clone()))
        {
            arches.extend(
                Cache::new(r)
                    .list()?
                    .iter()
                    .filter_map(|s| site::Arch::parse(&s.manifest.arch)),
            );
        }
    }
    if arches.is_empty() {
        bail!("no arch: give --arch, or --site with nodes");
    }
    arches.sort_by_key(|a| a.as_str());
    arches.dedup();
    let src = images::tftp_root::Sources {
        ipxe_dir: a.ipxe_dir,
        ipxe_arm64: a.ipxe_arm64,
        grub_ieee1275_dir: a.grub_ieee1275_dir,
        grub_mkimage: a.grub_mkimage,
        grub_net_tries: a.grub_net_tries,
    };
    let report = images::tftp_root::assemble(&a.dir, &arches, &src)?;
    for f in &report.updated {
        println!("updated {}", a.dir.join(f).display());
    }
    let names: Vec<&str> = arches.iter().map(|x| x.as_str()).collect();
    println!(
        "TFTP root ready: {} ({}; {} files updated, {} unchanged)",
        a.dir.display(),
        names.join(", "),
        report.updated.len(),
        report.unchanged
    );
    Ok(())
}
