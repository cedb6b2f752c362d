//! What the API answers when bootd itself fails: 507 when the state
//! directory's disk is full, else 500. The detail stays in the log.

use super::*;

/// A failure on bootd's side: 507 when the state directory's disk is full
/// (nothing of the request was stored: the caller retries once there is
/// room), else 500. The detail (file, SQLite's words) goes to the log only.
pub(crate) fn internal(e: impl std::error::Error + 'static) -> Response<Body> {
    if store::disk_full(&e) {
        error!(error = %e, "API request refused: the state directory's disk is full");
        return err(
            StatusCode::INSUFFICIENT_STORAGE,
            "bootd's state disk is full: nothing was stored; retry once space is freed",
        );
    }
    error!(error = %e, "API request failed");
    err(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal error; see bootd's log",
    )
}
