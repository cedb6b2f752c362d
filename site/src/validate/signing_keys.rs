//! `images.signingKeys` and `images.requireSignatures`: every key file is
//! read and parsed now, so a missing or broken file is a site problem (with
//! the others), not a surprise at the next fetch.

use super::*;

/// The `images` section: its root and sets, and its keys.
pub(super) fn with_keys(
    cx: &mut Cx,
    w: Option<&wire::Images>,
    root: PathBuf,
    sets: BTreeMap<String, ImageSet>,
) -> Images {
    let signing = signing(cx, w);
    Images {
        root,
        sets,
        signing,
    }
}

fn signing(cx: &mut Cx, w: Option<&wire::Images>) -> Signing {
    let mut keys = Vec::new();
    for (i, p) in w.map(|w| &w.signing_keys).into_iter().flatten().enumerate() {
        let path = cx.resolve(p);
        match SigningKey::read(&path) {
            Ok(k) => keys.push(k),
            Err(why) => cx.err(
                format!("images.signingKeys[{i}]"),
                format!("{}: {why}", path.display()),
            ),
        }
    }
    let given = w.is_some_and(|w| !w.signing_keys.is_empty());
    let require = match w.and_then(|w| w.require_signatures) {
        Some(true) if !given => {
            cx.err(
                "images.requireSignatures",
                "true needs images.signingKeys: without a key no signature can be checked",
            );
            true
        }
        Some(r) => r,
        None => given,
    };
    Signing { keys, require }
}
