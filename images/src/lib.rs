//! images: the OS image catalog and cache.
//!
//! Reads CoreOS stream metadata (Fedora CoreOS streams, RHCOS's
//! `rhcos.json`), fetches a stream/version/arch/platform set into a cache
//! that bootd serves as it is, checks it, collects what no site references,
//! maps cloud image IDs per provider/region/version/arch, and assembles
//! bootd's TFTP root from the iPXE and GRUB builds per arch.
//!
//! Modules:
//! - [`stream`]: the stream metadata document (serde) and artifact selection.
//! - [`fetch`]: resumable, verified, parallel downloads of one set.
//! - [`openpgp`]: detached signatures checked against the site's keys.
//! - [`client`]: the HTTP(S) client (hyper + rustls), redirects.
//! - [`cache`]: the layout's files (manifest, stamps, latest), `list`,
//!   `verify`, `gc`, and [`check_site`], which bootd runs before serving.
//! - [`cloud`]: cloud image IDs ([`cloud::CloudCatalog::image_id`]).
//! - [`tftp_root`]: iPXE and GRUB network-boot binaries per arch.
//! - [`progress`]: bars on a terminal, lines otherwise.
//!
//! The layout itself (paths, manifest format, "latest") is defined once in
//! [`site::catalog`], because the site crate resolves `catalog:` image sets.
//!
//! Invariants: a file appears under its real name only after its sha256
//! matched, and its signature when the site names keys (temporary name,
//! fsync, rename, fsync of the directory); a set's
//! manifest is written after all its files, so a set with a manifest is
//! complete; nothing but directories holding a manifest is ever removed.

pub mod cache;
pub mod client;
pub mod cloud;
pub mod fetch;
pub mod openpgp;
pub mod progress;
pub mod stream;
pub mod tftp_root;

pub use cache::{check_site, Cache, SiteImagesError};
