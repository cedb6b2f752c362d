//! What the API answers when bootd itself fails: 507 when the state
//! directory's disk is full, 503 when the shared store (etcd) cannot be
//! reached or has no quorum, else 500. The detail stays in the log.

use super::*;

/// A failure on bootd's side; in every case nothing of the request was
/// stored:
/// - 507 when the state directory's disk is full (the caller retries once
///   there is room);
/// - 503 with `Retry-After` when the shared store cannot be reached or has
///   lost quorum (the caller retries; another appliance may answer);
/// - else 500.
///
/// The detail (file, endpoints, SQLite's or etcd's words) goes to the log only.
pub(crate) fn internal(e: impl std::error::Error + 'static) -> Response<Body> {
    if store::disk_full(&e) {
        error!(error = %e, "API request refused: the state directory's disk is full");
        return err(
            StatusCode::INSUFFICIENT_STORAGE,
            "bootd's state disk is full: nothing was stored; retry once space is freed",
        );
    }
    if store::unavailable(&e) {
        error!(error = %e, "API request refused: the shared store is unavailable");
        let mut r = err(
            StatusCode::SERVICE_UNAVAILABLE,
            "the shared store (etcd) cannot be reached or has no quorum: nothing was stored; retry",
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        return r;
    }
    error!(error = %e, "API request failed");
    err(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal error; see bootd's log",
    )
}
