//! Each artifact's detached signature (`<name>.sig`, the URL the stream
//! metadata names).
//!
//! - With signing keys (`images.signingKeys`): every artifact's signature
//!   is fetched before the artifact, refused at once when no key of the site
//!   could have made it, and checked over the downloaded part before the
//!   part is renamed to its name ([`accept`]); the artifact is refused when
//!   it fails, or when the stream names no signature and signatures are
//!   required. Nothing of a refused artifact stays in the set directory.
//! - Without keys: only a disk image's (a `metal` set's `raw.xz`,
//!   `raw.gz`) is fetched, unchecked, for coreos-installer, which checks
//!   the image with the vendor's key it carries (`coreos.inst.image_url` +
//!   `.sig`, where bootd serves it).
//!
//! A fetched signature is kept as `<name>.sig` beside its artifact, written
//! before the artifact gets its name, so `images verify` can check it again.

use super::{backoff, retryable, FetchError, Options};
use crate::client::Client;
use crate::openpgp::{self, SignatureError};
use crate::stream::Selected;
use http::HeaderMap;
use http_body_util::BodyExt;
use site::Signing;
use std::path::Path;

/// A signature is small: a larger answer is not one.
const MAX: usize = 64 * 1024;

/// The signature to check `sel` with (and keep beside it), fetched before
/// `sel` itself; `None`: the artifact goes without one.
pub(crate) async fn before(
    client: &Client,
    opts: &Options,
    signing: &Signing,
    sel: &Selected,
) -> Result<Option<Vec<u8>>, FetchError> {
    let name = sel.artifact.file_name();
    let refuse = |why: SignatureError| FetchError::Signature {
        name: name.to_string(),
        why,
    };
    let url = match (&sel.artifact.signature, signing.enabled()) {
        (Some(url), true) => url,
        (Some(url), false) if sel.role == "disk" => url,
        (None, true) if signing.require => return Err(refuse(SignatureError::Missing)),
        (None, true) => {
            tracing::warn!(file = %name, "the stream metadata names no signature; taken on its sha256 (images.requireSignatures: false)");
            return Ok(None);
        }
        _ => return Ok(None),
    };
    let sig = get(client, opts, url)
        .await
        .map_err(|msg| FetchError::Download {
            name: format!("{name}.sig"),
            msg,
        })?;
    if signing.enabled() {
        openpgp::precheck(signing, &sig).map_err(refuse)?;
    }
    Ok(Some(sig))
}

/// Before `file` (the downloaded part, or an earlier run's file) takes the
/// place of `name` in `dir`: checks `sig` over it when keys are given, then
/// keeps `sig` as `<name>.sig`. An `Err` leaves the caller to remove `file`.
pub(crate) fn accept(
    signing: &Signing,
    sig: Option<&[u8]>,
    dir: &Path,
    name: &str,
    file: &Path,
) -> Result<(), FetchError> {
    let Some(sig) = sig else { return Ok(()) };
    if signing.enabled() {
        let who = openpgp::check_file(signing, sig, file).map_err(|why| FetchError::Signature {
            name: name.to_string(),
            why,
        })?;
        tracing::info!(file = %name, key = %who.key_id, user = %who.user, "signature verified");
    }
    let path = dir.join(format!("{name}.sig"));
    crate::cache::write_atomic(&path, sig).map_err(|error| FetchError::Io { path, error })
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
