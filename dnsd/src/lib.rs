//! dnsd: authoritative DNS for the cluster, derived from the site description.
//!
//! Not built yet: this crate is a placeholder until its issue ("[3 of 7] dnsd").
//! It exists now so the workspace layout is final and CI builds every member.
