//! One artifact's transfer into its set directory: `.<name>.part`, resumed
//! with `Range` + `If-Range`, hashed while written, renamed to its name only
//! when its sha256 matches the stream metadata's (and its signature, when
//! one is checked, see [`super::signature`]).

use super::{backoff, io, retryable, FetchError, Options};
use crate::cache;
use crate::client::Client;
use crate::progress::{FileProgress, Progress};
use crate::stream::Selected;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};
use std::io::{Read, Seek, Write};
use std::path::Path;

/// One attempt's failure: retry (resuming) or give up.
enum Attempt {
    Retry(String),
    Fatal(FetchError),
}

/// What a file with the right sha256 must also pass before it has its
/// name (the signature check, [`super::signature::accept`]).
pub(super) type Accept<'a> = &'a (dyn Fn(&Path) -> Result<(), FetchError> + Sync);

/// Downloads one artifact into `dir`; returns its size and whether it was
/// downloaded now (false: an earlier run had already put it in place).
/// A file `accept` refuses is removed, with its part and signature.
pub(super) async fn download(
    client: &Client,
    opts: &Options,
    progress: &dyn Progress,
    dir: &Path,
    sel: &Selected,
    accept: Accept<'_>,
) -> Result<(u64, bool), FetchError> {
    let name = sel.artifact.file_name().to_string();
    let want = sel.artifact.sha256.to_ascii_lowercase();
    let path = dir.join(&name);
    let refused = |file: &Path, e: FetchError| {
        let _ = std::fs::remove_file(file);
        let _ = std::fs::remove_file(dir.join(format!(".{name}.part.validator")));
        let _ = std::fs::remove_file(dir.join(format!("{name}.sig")));
        let _ = cache::sync_dir(dir);
        e
    };
    // A previous run may have finished this file but not the whole set.
    if path.is_file() {
        let got = cache::sha256_file(&path).map_err(io(&path))?;
        if got == want {
            let size = std::fs::metadata(&path).map_err(io(&path))?.len();
            accept(&path).map_err(|e| refused(&path, e))?;
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
                accept(&part).map_err(|e| refused(&part, e))?;
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
