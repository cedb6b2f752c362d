//! `fetch`: one stream/version/arch/platform set into the cache.
//!
//! - A set whose manifest exists and whose files check out (size, sha256,
//!   see [`crate::cache::Depth::Stamped`]) is not fetched again; with an
//!   explicit version that takes no network I/O at all.
//! - Each file is downloaded to `.<name>.part` in the set directory. A broken
//!   transfer is retried (at most `retries` times, exponential backoff) and
//!   resumed with `Range: bytes=<have>-` plus `If-Range` (the ETag or
//!   Last-Modified seen first), so a file that changed upstream restarts.
//! - The sha256 is computed while writing (a resumed file's prefix is
//!   re-read first); only a matching file is fsynced and renamed to its
//!   real name, then the directory fsynced. A mismatch deletes the part.
//! - The manifest is written last, after every file is in place: a set
//!   without a manifest does not exist for anyone reading the cache.
//! - Files download in parallel, at most `jobs` at a time.

use crate::cache::{self, Cache, Depth};
use crate::client::Client;
use crate::progress::{FileProgress, Progress};
use crate::stream::{Selected, Stream, StreamError};
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};
use site::catalog::{self, Manifest, ManifestFile};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
mod signature;

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

    /// The set's directory when it is cached, intact and holds every wanted format.
    fn cached(&self, stream: &str, version: &str, req: &Request) -> Option<String> {
        let dir = catalog::set_dir(stream, version, &req.arch, &req.platform);
        let m = catalog::read_manifest(&self.cache.root.join(&dir)).ok()?;
        let has_all = req
            .formats
            .iter()
            .all(|f| m.files.iter().any(|x| &x.format == f));
        (has_all && self.cache.check_set(&dir, &m, Depth::Stamped).is_empty()).then_some(dir)
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
            let (sem, client, opts, progress, dir) = (
                Arc::clone(&sem),
                self.client.clone(),
                self.options.clone(),
                Arc::clone(&self.progress),
                dir.clone(),
            );
            tasks.spawn(async move {
                let _permit = sem.acquire_owned().await;
                let r = download(&client, &opts, progress.as_ref(), &dir, &sel).await;
                let r = signature::with_signature(r, &client, &opts, &dir, &sel).await;
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

/// One attempt's failure: retry (resuming) or give up.
enum Attempt {
    Retry(String),
    Fatal(FetchError),
}

/// Downloads one artifact into `dir`; returns its size and whether it was
/// downloaded now (false: an earlier run had already put it in place).
async fn download(
    client: &Client,
    opts: &Options,
    progress: &dyn Progress,
    dir: &Path,
    sel: &Selected,
) -> Result<(u64, bool), FetchError> {
    let name = sel.artifact.file_name().to_string();
    let want = sel.artifact.sha256.to_ascii_lowercase();
    let path = dir.join(&name);
    // A previous run may have finished this file but not the whole set.
    if path.is_file() {
        let got = cache::sha256_file(&path).map_err(io(&path))?;
        if got == want {
            let size = std::fs::metadata(&path).map_err(io(&path))?.len();
            return Ok((size, false));
        }
        std::fs::remove_file(&path).map_err(io(&path))?;
    }
    let part = dir.join(format!(".{name}.part"));
    let validator = dir.join(format!(".{name}.part.validator"));
    let mut attempt = 0;
    loop {
        match attempt_once(
            client,
            opts,
            progress,
            &sel.artifact.location,
            &part,
            &validator,
            &name,
            &want,
        )
        .await
        {
            Ok(size) => {
                std::fs::rename(&part, &path).map_err(io(&path))?;
                cache::sync_dir(dir).map_err(io(dir))?;
                let _ = std::fs::remove_file(&validator);
                return Ok((size, true));
            }
            Err(Attempt::Retry(msg)) if attempt < opts.retries => {
                let wait = backoff(opts, attempt);
                tracing::warn!(file = %name, %msg, attempt, ?wait, "download broke; retrying");
                tokio::time::sleep(wait).await;
                attempt += 1;
            }
            Err(Attempt::Retry(msg)) => {
                return Err(FetchError::Download {
                    name,
                    msg: format!("{msg} (gave up after {} attempts)", opts.retries + 1),
                })
            }
            Err(Attempt::Fatal(e)) => return Err(e),
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn attempt_once(
    client: &Client,
    opts: &Options,
    progress: &dyn Progress,
    url: &str,
    part: &Path,
    validator: &Path,
    name: &str,
    want: &str,
) -> Result<u64, Attempt> {
    let fatal = |e: FetchError| Attempt::Fatal(e);
    let have = std::fs::metadata(part).map(|m| m.len()).unwrap_or(0);
    let mut headers = HeaderMap::new();
    if have > 0 {
        headers.insert(
            header::RANGE,
            HeaderValue::from_str(&format!("bytes={have}-"))
                .map_err(|e| Attempt::Retry(e.to_string()))?,
        );
        if let Some(v) = std::fs::read_to_string(validator)
            .ok()
            .and_then(|v| HeaderValue::from_str(v.trim()).ok())
        {
            headers.insert(header::IF_RANGE, v);
        }
    }
    let (_, resp) = client
        .get(url, &headers)
        .await
        .map_err(|e| Attempt::Retry(e.to_string()))?;
    let status = resp.status();
    let offset = match status {
        StatusCode::PARTIAL_CONTENT if have > 0 => {
            let start = resp
                .headers()
                .get(header::CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("bytes "))
                .and_then(|v| v.split('-').next())
                .and_then(|v| v.parse::<u64>().ok());
            if start != Some(have) {
                // Not the range asked for: start over.
                let _ = std::fs::remove_file(part);
                return Err(Attempt::Retry(format!(
                    "server answered Range {have}- with Content-Range from {start:?}"
                )));
            }
            have
        }
        StatusCode::OK => 0,
        StatusCode::RANGE_NOT_SATISFIABLE if have > 0 => {
            // The part may already be whole (a cut after the last byte);
            // its hash decides. Otherwise it is discarded below.
            return finish_part(part, name, want, None).map_err(|e| match e {
                FetchError::Sha256 { .. } => Attempt::Retry(format!(
                    "{name}: 416 for a part whose hash does not match; restarting"
                )),
                e => fatal(e),
            });
        }
        s if retryable(s) => return Err(Attempt::Retry(format!("HTTP {s}"))),
        s => {
            return Err(fatal(FetchError::Download {
                name: name.to_string(),
                msg: format!("HTTP {s} from {url}"),
            }))
        }
    };
    if offset == 0 {
        // Remember what we are downloading, so a resume can ask If-Range.
        let v = resp
            .headers()
            .get(header::ETAG)
            .filter(|v| !v.as_bytes().starts_with(b"W/"))
            .or_else(|| resp.headers().get(header::LAST_MODIFIED));
        match v.and_then(|v| v.to_str().ok()) {
            Some(v) => std::fs::write(validator, v).map_err(|e| {
                fatal(FetchError::Io {
                    path: validator.to_path_buf(),
                    error: e,
                })
            })?,
            None => drop(std::fs::remove_file(validator)),
        }
    }
    let total = resp
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .map(|n| n + offset);
    let mut hasher = Sha256::new();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .read(true)
        .truncate(false)
        .open(part)
        .map_err(|e| fatal(io(part)(e)))?;
    if offset > 0 {
        hash_prefix(&mut file, offset, &mut hasher).map_err(|e| fatal(io(part)(e)))?;
    } else {
        file.set_len(0).map_err(|e| fatal(io(part)(e)))?;
    }
    file.seek(std::io::SeekFrom::Start(offset))
        .map_err(|e| fatal(io(part)(e)))?;
    let mut bar = progress.start(name, total, offset);
    let mut body = resp.into_body();
    let mut written = offset;
    loop {
        let frame = match tokio::time::timeout(opts.stall, body.frame()).await {
            Err(_) => {
                return Err(broke(
                    &mut bar,
                    &mut file,
                    format!("no data for {:?}", opts.stall),
                ))
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(broke(
                    &mut bar,
                    &mut file,
                    format!("transfer broke at {written} bytes: {e}"),
                ))
            }
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(data) = frame.into_data() {
            write_chunk(&mut file, &data).map_err(|e| fatal(io(part)(e)))?;
            hasher.update(&data);
            written += data.len() as u64;
            bar.inc(data.len() as u64);
        }
    }
    if let Some(t) = total.filter(|t| *t != written) {
        return Err(broke(
            &mut bar,
            &mut file,
            format!("body ended at {written} of {t} bytes"),
        ));
    }
    file.sync_all().map_err(|e| fatal(io(part)(e)))?;
    drop(file);
    let got = cache::hex(&hasher.finalize());
    match finish_part(part, name, want, Some(got)) {
        Ok(n) => {
            bar.finish("verified");
            Ok(n)
        }
        Err(e @ FetchError::Sha256 { .. }) if offset > 0 => {
            // The resumed prefix may be stale: one more try from scratch.
            bar.finish("sha256 mismatch after a resume; restarting");
            Err(Attempt::Retry(e.to_string()))
        }
        Err(e) => {
            bar.finish("sha256 mismatch");
            Err(fatal(e))
        }
    }
}

/// The part is complete: check its hash (computed now when `got` is None);
/// a mismatch deletes it.
fn finish_part(
    part: &Path,
    name: &str,
    want: &str,
    got: Option<String>,
) -> Result<u64, FetchError> {
    let got = match got {
        Some(g) => g,
        None => cache::sha256_file(part).map_err(io(part))?,
    };
    if got != want {
        let _ = std::fs::remove_file(part);
        let _ = std::fs::remove_file(part.with_extension("part.validator"));
        return Err(FetchError::Sha256 {
            name: name.to_string(),
            want: want.to_string(),
            got,
        });
    }
    std::fs::metadata(part).map(|m| m.len()).map_err(io(part))
}

fn broke(bar: &mut Box<dyn FileProgress>, file: &mut std::fs::File, msg: String) -> Attempt {
    // Keep what arrived for the resume.
    let _ = file.sync_data();
    bar.retry(&msg);
    Attempt::Retry(msg)
}

fn write_chunk(file: &mut std::fs::File, data: &Bytes) -> std::io::Result<()> {
    file.write_all(data)
}

fn hash_prefix(file: &mut std::fs::File, len: u64, h: &mut Sha256) -> std::io::Result<()> {
    file.seek(std::io::SeekFrom::Start(0))?;
    let mut left = len;
    let mut buf = vec![0u8; 1 << 20];
    while left > 0 {
        let n = file.read(&mut buf[..left.min(1 << 20) as usize])?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "part shorter than its length",
            ));
        }
        h.update(&buf[..n]);
        left -= n as u64;
    }
    Ok(())
}
