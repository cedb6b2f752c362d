//! `images.sets.<name>.catalog`: an image set taken from the image cache.
//!
//! A set that is not fetched yet is not a site error (`images fetch --site`
//! and `images gc` must read the site before anything is cached); it is
//! recorded in [`CatalogImage::resolved`] and bootd refuses to serve it.

use super::Cx;
use crate::catalog::{self, CatalogRef};
use crate::model::{Arch, CatalogImage, ImageSet};
use crate::wire;
use std::path::Path;

const DEFAULT_PLATFORM: &str = "metal";

pub(super) fn image_set(
    cx: &mut Cx,
    root: &Path,
    name: &str,
    s: &wire::ImageSet,
    c: &wire::Catalog,
) -> Option<ImageSet> {
    let k = |f: &str| format!("images.sets.{name}.{f}");
    let before = cx.problems.len();
    for (key, given) in [
        ("kernel", s.kernel.is_some()),
        ("initramfs", s.initramfs.is_some()),
        ("rootfs", s.rootfs.is_some()),
    ] {
        if given {
            cx.err(
                k(key),
                "not with catalog: the catalog set names its own files",
            );
        }
    }
    let parse_arch = |cx: &mut Cx, key: String, a: &str| {
        Arch::parse(a).or_else(|| {
            cx.err(key, format!("{a:?} is not one of x86_64, aarch64, ppc64le"));
            None
        })
    };
    let set_arch = s.arch.as_deref().map(|a| parse_arch(cx, k("arch"), a));
    let cat_arch = c
        .arch
        .as_deref()
        .map(|a| parse_arch(cx, k("catalog.arch"), a));
    let arch = match (set_arch, cat_arch) {
        (Some(Some(a)), Some(Some(b))) if a != b => {
            cx.err(
                k("catalog.arch"),
                format!("{b} differs from the set's arch {a}"),
            );
            None
        }
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => {
            cx.err(k("arch"), "required (here or as catalog.arch)");
            None
        }
    };
    let part = |cx: &mut Cx, key: &str, v: Option<&str>, default: Option<&str>| match v.or(default)
    {
        Some(v) if catalog::is_component(v) => Some(v.to_string()),
        Some(v) => {
            cx.err(
                k(key),
                format!("{v:?} is not a plain name (letters, digits, '.', '_', '-', '+')"),
            );
            None
        }
        None => {
            cx.err(k(key), "required");
            None
        }
    };
    let stream = part(cx, "catalog.stream", c.stream.as_deref(), None);
    let version = part(
        cx,
        "catalog.version",
        c.version.as_deref(),
        Some(catalog::VERSION_LATEST),
    );
    let platform = part(
        cx,
        "catalog.platform",
        c.platform.as_deref(),
        Some(DEFAULT_PLATFORM),
    );
    if let Some(u) = &c.stream_url {
        if u.is_empty() || u.contains(char::is_whitespace) {
            cx.err(
                k("catalog.streamUrl"),
                format!("{u:?} is not a URL or path"),
            );
        }
    }
    if cx.problems.len() != before {
        return None;
    }
    let (arch, stream, version, platform) = (arch?, stream?, version?, platform?);
    let reference = CatalogRef {
        stream,
        version,
        arch: arch.as_str().to_string(),
        platform,
        stream_url: c.stream_url.clone(),
    };
    let resolved = catalog::resolve(root, &reference);
    let (kernel, initramfs, rootfs) = match &resolved {
        Ok(r) => (
            r.rel("kernel").unwrap_or_default(),
            r.rel("initramfs").unwrap_or_default(),
            r.rel("rootfs"),
        ),
        Err(_) => (String::new(), String::new(), None),
    };
    // The metal disk image, when it was fetched (`images fetch --format
    // raw.xz`): what installs write, with its signature when it came.
    let metal = resolved.as_ref().ok().and_then(|r| {
        let f = r
            .manifest
            .files
            .iter()
            .find(|f| f.role == "disk" && f.format.starts_with("raw."))?;
        let path = format!("{}/{}", r.dir, f.name);
        let sig = format!("{path}.sig");
        let signature = root.join(&sig).is_file().then_some(sig);
        Some(crate::MetalImage { path, signature })
    });
    Some(ImageSet {
        arch,
        kernel,
        initramfs,
        rootfs,
        metal,
        catalog: Some(CatalogImage {
            reference,
            resolved,
        }),
    })
}
