//! `fetch`: one stream/version/arch/platform set into the cache.
//!
//! - A set whose manifest exists and whose files check out (size, sha256,
//!   see [`crate::cache::Depth::Stamped`]) is not fetched again; with an
//!   explicit version that takes no network I/O at all.
//! - Each file is downloaded to `.<name>.part` in the set directory
//!   ([`transfer`]). A broken transfer is retried (at most `retries` times,
//!   exponential backoff) and resumed with `Range: bytes=<have>-` plus
//!   `If-Range` (the ETag or Last-Modified seen first), so a file that
//!   changed upstream restarts.
//! - The sha256 is computed while writing (a resumed file's prefix is
//!   re-read first); only a matching file is fsynced and renamed to its
//!   real name, then the directory fsynced. A mismatch deletes the part.
//! - The manifest is written last, after every file is in place: a set
//!   without a manifest does not exist for anyone reading the cache.
//! - Files download in parallel, at most `jobs` at a time.

use crate::cache::{self, Cache, Depth};
use crate::client::Client;
use crate::progress::Progress;
use crate::stream::{Stream, StreamError};
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use site::catalog::{self, Manifest, ManifestFile};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
mod signature;
mod transfer;

/// Where stream metadata comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Url(String),
    File(PathBuf),
}

impl Source {
    /// A URL when it has a scheme, else a file path.
    pub fn parse(s: &str) -> Source {
        if s.contains("://") {
            Source::Url(s.to_string())
        } else {
            Source::File(PathBuf::from(s))
        }
    }

    /// Fedora CoreOS publishes its streams by name; other streams (RHCOS)
    /// need a URL or file (openshift-install's `coreos/rhcos.json`).
    pub fn default_for(stream: &str) -> Option<Source> {
        matches!(stream, "stable" | "testing" | "next").then(|| {
            Source::Url(format!(
                "https://builds.coreos.fedoraproject.org/streams/{stream}.json"
            ))
        })
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Url(u) => f.write_str(u),
            Source::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// What to fetch.
#[derive(Debug, Clone)]
pub struct Request {
    /// The stream's name; `None`: whatever the metadata says (needs the metadata).
    pub stream: Option<String>,
    /// A version or [`catalog::VERSION_LATEST`].
    pub version: String,
    pub arch: String,
    pub platform: String,
    /// Format keys, e.g. `pxe` (kernel, initramfs, rootfs), `raw.xz`, `ova.gz`.
    pub formats: Vec<String>,
    pub source: Option<Source>,
    /// The keys artifacts must be signed by (the site's `images.signingKeys`).
    pub signing: Arc<site::Signing>,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub jobs: usize,
    /// Retries per file after the first attempt.
    pub retries: u32,
    /// First wait between attempts; doubles each time, capped at 30 s.
    pub backoff: Duration,
    /// A transfer with no bytes for this long is broken (and retried).
    pub stall: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            jobs: 3,
            retries: 5,
            backoff: Duration::from_millis(500),
            stall: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Already in the cache and intact; nothing downloaded.
    Cached { dir: String, version: String },
    Fetched {
        dir: String,
        version: String,
        files: usize,
        bytes: u64,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(transparent)]
    Stream(Box<StreamError>),
    #[error("stream metadata {from}: {msg}")]
    Source { from: String, msg: String },
    #[error("no stream metadata source for stream {0:?}: give --stream-url (a URL or a file, e.g. openshift-install's coreos/rhcos.json)")]
    NoSource(String),
    #[error("the metadata at {from} is stream {got:?}, not {want:?}")]
    StreamMismatch {
        from: String,
        want: String,
        got: String,
    },
    #[error("stream {stream} {arch}/{platform} is at {have}; {want} is not in the cache and the metadata no longer describes it (use \"latest\", or the stream metadata of that release)")]
    VersionNotInStream {
        stream: String,
        arch: String,
        platform: String,
        want: String,
        have: String,
    },
    #[error("{name}: {msg}")]
    Download { name: String, msg: String },
    #[error("{name}: {why}; nothing of it was kept")]
    Signature {
        name: String,
        why: crate::openpgp::SignatureError,
    },
    #[error("{name}: sha256 {got} does not match the stream metadata's {want}; nothing was kept")]
    Sha256 {
        name: String,
        want: String,
        got: String,
    },
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl From<StreamError> for FetchError {
    fn from(e: StreamError) -> FetchError {
        FetchError::Stream(Box::new(e))
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> FetchError + '_ {
    move |error| FetchError::Io {
        path: path.to_path_buf(),
        error,
    }
}

pub struct Fetcher {
    pub cache: Cache,
    pub client: Client,
    pub options: Options,
    pub progress: Arc<dyn Progress>,
}

impl Fetcher {
    pub async fn fetch(&self, req: &Request) -> Result<Outcome, FetchError> {
        // An explicit, cached version needs nothing from the network.
        if let Some(stream) = &req.stream {
            if req.version != catalog::VERSION_LATEST {
                if let Some(dir) = self.cached(stream, &req.version, req) {
                    return Ok(Outcome::Cached {
                        dir,
                        version: req.version.clone(),
                    });
                }
            }
        }
        let source = match (&req.source, &req.stream) {
            (Some(s), _) => s.clone(),
            (None, Some(name)) => {
                Source::default_for(name).ok_or_else(|| FetchError::NoSource(name.clone()))?
            }
            (None, None) => return Err(FetchError::NoSource(String::new())),
        };
        let raw = self.load_source(&source).await?;
        let doc = Stream::parse(&raw)?;
        let stream = req.stream.clone().unwrap_or_else(|| doc.stream.clone());
        if doc.stream != stream {
            return Err(FetchError::StreamMismatch {
                from: source.to_string(),
                want: stream,
                got: doc.stream.clone(),
            });
        }
        if !catalog::is_component(&stream) {
            return Err(FetchError::Source {
                from: source.to_string(),
                msg: format!("stream name {stream:?} is not a plain name"),
            });
        }
        let release = doc.platform(&req.arch, &req.platform)?.release.clone();
        let latest = req.version == catalog::VERSION_LATEST;
        let version = if latest {
            release.clone()
        } else {
            req.version.clone()
        };
        if !catalog::is_component(&version) {
            return Err(FetchError::Source {
                from: source.to_string(),
                msg: format!("release {version:?} is not a plain name"),
            });
        }
        let outcome = match self.cached(&stream, &version, req) {
            Some(dir) => Outcome::Cached {
                dir,
                version: version.clone(),
            },
            None if version != release => {
                return Err(FetchError::VersionNotInStream {
                    stream,
                    arch: req.arch.clone(),
                    platform: req.platform.clone(),
                    want: version,
                    have: release,
                })
            }
            None => {
                self.download_set(&doc, &raw, &stream, &version, req)
                    .await?
            }
        };
        if latest {
            self.cache
                .set_latest(&stream, &req.arch, &req.platform, &version)
                .map_err(io(&self.cache.root))?;
        }
        Ok(outcome)
    }

    /// The set's directory when it is cached, intact and holds every wanted
    /// format, with the signatures the keys ask for (else the set is fetched
    /// again: what is in place is kept, and checked).
    fn cached(&self, stream: &str, version: &str, req: &Request) -> Option<String> {
        let dir = catalog::set_dir(stream, version, &req.arch, &req.platform);
        let abs = self.cache.root.join(&dir);
        let m = catalog::read_manifest(&abs).ok()?;
        let has_all = req
            .formats
            .iter()
            .all(|f| m.files.iter().any(|x| &x.format == f));
        let s = &req.signing;
        let signed = !s.enabled()
            || m.files
                .iter()
                .filter(|f| req.formats.contains(&f.format))
                .all(|f| match f.signature {
                    Some(_) => abs.join(format!("{}.sig", f.name)).is_file(),
                    None => !s.require,
                });
        (has_all && signed && self.cache.check_set(&dir, &m, Depth::Stamped).is_empty())
            .then_some(dir)
    }

    async fn load_source(&self, source: &Source) -> Result<Vec<u8>, FetchError> {
        let err = |msg: String| FetchError::Source {
            from: source.to_string(),
            msg,
        };
        match source {
            Source::File(p) => std::fs::read(p).map_err(|e| err(e.to_string())),
            Source::Url(url) => {
                let mut attempt = 0;
                loop {
                    let r: Result<Vec<u8>, (bool, String)> = async {
                        let (_, resp) = self
                            .client
                            .get(url, &HeaderMap::new())
                            .await
                            .map_err(|e| (true, e.to_string()))?;
                        let status = resp.status();
                        if !status.is_success() {
                            return Err((retryable(status), format!("HTTP {status}")));
                        }
                        let body =
                            tokio::time::timeout(self.options.stall, resp.into_body().collect())
                                .await
                                .map_err(|_| (true, "body timed out".to_string()))?
                                .map_err(|e| (true, e.to_string()))?;
                        Ok(body.to_bytes().to_vec())
                    }
                    .await;
                    match r {
                        Ok(b) => return Ok(b),
                        Err((true, msg)) if attempt < self.options.retries => {
                            tracing::warn!(%url, %msg, attempt, "stream metadata fetch failed; retrying");
                            tokio::time::sleep(backoff(&self.options, attempt)).await;
                            attempt += 1;
                        }
                        Err((_, msg)) => return Err(err(msg)),
                    }
                }
            }
        }
    }

    async fn download_set(
        &self,
        doc: &Stream,
        raw: &[u8],
        stream: &str,
        version: &str,
        req: &Request,
    ) -> Result<Outcome, FetchError> {
        let picked = doc.select(&req.arch, &req.platform, &req.formats)?;
        let rel = catalog::set_dir(stream, version, &req.arch, &req.platform);
        let dir = self.cache.root.join(&rel);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let sem = Arc::new(tokio::sync::Semaphore::new(self.options.jobs.max(1)));
        let mut tasks = tokio::task::JoinSet::new();
        for sel in picked.iter().cloned() {
            let (sem, client, opts, progress, dir, signing) = (
                Arc::clone(&sem),
                self.client.clone(),
                self.options.clone(),
                Arc::clone(&self.progress),
                dir.clone(),
                Arc::clone(&req.signing),
            );
            tasks.spawn(async move {
                let _permit = sem.acquire_owned().await;
                let r = async {
                    let sig = signature::before(&client, &opts, &signing, &sel).await?;
                    let name = sel.artifact.file_name();
                    let accept =
                        |file: &Path| signature::accept(&signing, sig.as_deref(), &dir, name, file);
                    transfer::download(&client, &opts, progress.as_ref(), &dir, &sel, &accept).await
                }
                .await;
                (sel, r)
            });
        }
        let mut files = Vec::new();
        let mut total = 0;
        let mut first_err = None;
        while let Some(joined) = tasks.join_next().await {
            let (sel, r) = joined.map_err(|e| FetchError::Download {
                name: rel.clone(),
                msg: format!("download task failed: {e}"),
            })?;
            match r {
                Ok((size, fresh)) => {
                    total += if fresh { size } else { 0 };
                    files.push(ManifestFile {
                        role: sel.role.to_string(),
                        format: sel.format.clone(),
                        name: sel.artifact.file_name().to_string(),
                        sha256: sel.artifact.sha256.to_ascii_lowercase(),
                        size,
                        location: sel.artifact.location.clone(),
                        signature: sel.artifact.signature.clone(),
                    });
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        // Files of other formats fetched earlier stay listed.
        let mut all = catalog::read_manifest(&dir)
            .map(|m| m.files)
            .unwrap_or_default();
        all.retain(|f| !files.iter().any(|n| n.name == f.name));
        all.extend(files);
        let order = |r: &str| {
            ["kernel", "initramfs", "rootfs", "disk"]
                .iter()
                .position(|x| *x == r)
                .unwrap_or(9)
        };
        all.sort_by(|a, b| {
            (order(&a.role), &a.format, &a.name).cmp(&(order(&b.role), &b.format, &b.name))
        });
        let manifest = Manifest {
            stream: stream.to_string(),
            version: version.to_string(),
            arch: req.arch.clone(),
            platform: req.platform.clone(),
            files: all,
        };
        let stream_doc = self
            .cache
            .root
            .join(stream)
            .join(version)
            .join(cache::STREAM_DOC);
        cache::write_atomic(&stream_doc, raw).map_err(io(&stream_doc))?;
        let mpath = dir.join(catalog::MANIFEST);
        let json = serde_json::to_vec_pretty(&manifest).map_err(|e| FetchError::Io {
            path: mpath.clone(),
            error: e.into(),
        })?;
        cache::write_atomic(&mpath, &json).map_err(io(&mpath))?;
        for f in &manifest.files {
            self.cache
                .record_hash(&dir, &f.name, &f.sha256)
                .map_err(io(&dir))?;
        }
        Ok(Outcome::Fetched {
            dir: rel,
            version: version.to_string(),
            files: picked.len(),
            bytes: total,
        })
    }
}

pub(crate) fn backoff(o: &Options, attempt: u32) -> Duration {
    o.backoff
        .saturating_mul(1 << attempt.min(16))
        .min(Duration::from_secs(30))
}

pub(crate) fn retryable(s: StatusCode) -> bool {
    s.is_server_error() || s == StatusCode::REQUEST_TIMEOUT || s == StatusCode::TOO_MANY_REQUESTS
}
