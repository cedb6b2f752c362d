//! The detached signature of a disk image (a `metal` set's `raw.xz`,
//! `raw.gz`): fetched beside the image as `<name>.sig`, where bootd serves
//! it and coreos-installer looks for it (`coreos.inst.image_url` + `.sig`),
//! so that installs verify the image with the OS vendor's key instead of
//! being told `coreos.inst.insecure`. The live system's kernel, initramfs
//! and rootfs are checked by their sha256 and need none.

use super::{backoff, retryable, FetchError, Options};
use crate::client::Client;
use crate::stream::Selected;
use http::HeaderMap;
use http_body_util::BodyExt;
use std::path::Path;

/// A signature is small: a larger answer is not one.
const MAX: usize = 64 * 1024;

/// After `sel`'s download (`done`: its size, and whether it was fetched
/// now): for a disk image whose stream entry names a signature, the
/// signature too, unless it is there already for an unchanged image.
pub(crate) async fn with_signature(
    done: Result<(u64, bool), FetchError>,
    client: &Client,
    opts: &Options,
    dir: &Path,
    sel: &Selected,
) -> Result<(u64, bool), FetchError> {
    let (size, fresh) = done?;
    let (true, Some(url)) = (sel.role == "disk", &sel.artifact.signature) else {
        return Ok((size, fresh));
    };
    let name = format!("{}.sig", sel.artifact.file_name());
    let path = dir.join(&name);
    if !fresh && path.is_file() {
        return Ok((size, fresh));
    }
    let err = |msg: String| FetchError::Download {
        name: name.clone(),
        msg,
    };
    let body = get(client, opts, url).await.map_err(err)?;
    let part = dir.join(format!(".{name}.part"));
    std::fs::write(&part, &body)
        .and_then(|()| std::fs::rename(&part, &path))
        .and_then(|()| crate::cache::sync_dir(dir))
        .map_err(|e| err(e.to_string()))?;
    Ok((size, fresh))
}

async fn get(client: &Client, opts: &Options, url: &str) -> Result<Vec<u8>, String> {
    let mut attempt = 0;
    loop {
        let r: Result<Vec<u8>, (bool, String)> = async {
            let (_, resp) = client
                .get(url, &HeaderMap::new())
                .await
                .map_err(|e| (true, e.to_string()))?;
            let status = resp.status();
            if !status.is_success() {
                return Err((retryable(status), format!("{url}: HTTP {status}")));
            }
            let body = http_body_util::Limited::new(resp.into_body(), MAX);
            let body = tokio::time::timeout(opts.stall, body.collect())
                .await
                .map_err(|_| (true, format!("{url}: body timed out")))?
                .map_err(|e| {
                    (
                        false,
                        format!("{url}: {e} (a signature is under {MAX} bytes)"),
                    )
                })?;
            Ok(body.to_bytes().to_vec())
        }
        .await;
        match r {
            Ok(b) => return Ok(b),
            Err((true, msg)) if attempt < opts.retries => {
                tracing::warn!(%url, %msg, attempt, "signature fetch failed; retrying");
                tokio::time::sleep(backoff(opts, attempt)).await;
                attempt += 1;
            }
            Err((_, msg)) => return Err(msg),
        }
    }
}
