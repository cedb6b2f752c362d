//! Stage two for `inspection:` and an image set's `metal`.

use super::*;

/// `images.sets.<name>.metal` and `metalSignature`: `Some(None)` when the
/// set has no metal image, `None` when what it gives is wrong.
pub(super) fn metal_image(
    cx: &mut Cx,
    k: &dyn Fn(&str) -> String,
    s: &wire::ImageSet,
) -> Option<Option<MetalImage>> {
    let path = match &s.metal {
        Some(p) => Some(rel_path(cx, k("metal"), p)?),
        None => None,
    };
    let signature = match &s.metal_signature {
        Some(p) => Some(rel_path(cx, k("metalSignature"), p)?),
        None => None,
    };
    match (path, signature) {
        (Some(path), signature) => {
            if let Some(sig) = &signature {
                if *sig != format!("{path}.sig") {
                    cx.err(
                        k("metalSignature"),
                        format!("{sig:?}: coreos-installer fetches the signature at the image's URL + .sig: put it at {path}.sig"),
                    );
                    return None;
                }
            }
            Some(Some(MetalImage { path, signature }))
        }
        (None, Some(_)) => {
            cx.err(
                k("metalSignature"),
                "a signature without metal: give metal too",
            );
            None
        }
        (None, None) => Some(None),
    }
}

/// `inspection:` (docs/site.md): the agent per architecture, role minimums.
pub(super) fn inspection(cx: &mut Cx, w: Option<&wire::Inspection>) -> Inspection {
    let mut out = Inspection {
        agents: Vec::new(),
        minimums: BTreeMap::new(),
        enforce_minimums: true,
        lldp_seconds: 35,
    };
    let Some(w) = w else { return out };
    for (a, p) in &w.agents {
        let key = format!("inspection.agents.{a}");
        let Some(arch) = Arch::parse(a) else {
            cx.err(key, format!("{a:?} is not one of x86_64, aarch64, ppc64le"));
            continue;
        };
        if let Some(p) = rel_path(cx, key, p) {
            out.agents.push((arch, p));
        }
    }
    for (role, m) in &w.minimums {
        let key = |f: &str| format!("inspection.minimums.{role}.{f}");
        if !is_dns_label(role) {
            cx.err(
                format!("inspection.minimums.{role}"),
                "a role name (a DNS label)",
            );
            continue;
        }
        for (f, v) in [
            ("cpus", m.cpus.map(u64::from)),
            ("memoryGiB", m.memory_gib),
            ("diskGiB", m.disk_gib),
        ] {
            if v == Some(0) {
                cx.err(key(f), "at least 1 (leave it out for no minimum)");
            }
        }
        out.minimums.insert(
            role.clone(),
            crate::hardware::Minimums {
                cpus: m.cpus,
                memory_gib: m.memory_gib,
                disk_gib: m.disk_gib,
            },
        );
    }
    if let Some(e) = w.enforce_minimums {
        out.enforce_minimums = e;
    }
    if let Some(s) = w.lldp_seconds {
        if s > 300 {
            cx.err(
                "inspection.lldpSeconds",
                format!("{s}: at most 300 (LLDP's default interval is 30 s)"),
            );
        } else {
            out.lldp_seconds = s;
        }
    }
    out
}
