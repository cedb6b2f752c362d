//! pxelinux-style configs for petitboot (OpenPOWER firmware's bootloader,
//! and anything else that reads `pxelinux.cfg/01-<mac>`): `DEFAULT`,
//! `LABEL`, `KERNEL`, `INITRD`, `APPEND`, one label per node, absolute
//! HTTP URLs (petitboot fetches `http://` kernel and initrd paths itself).
//!
//! Petitboot finds the file from DHCP options 209 (`pxeconffile`) and 210
//! (`pxepathprefix`), which bootd sends a client that asks for them
//! ([`dhcp::v4::boot`]); the file is served over HTTP at
//! `/pxelinux.cfg/01-<mac>`.

use super::{ip_list, kernel_args, NodeUrls};
use site::{Node, Site};

/// The file name petitboot and pxelinux look for first, as DHCP tells it.
pub use dhcp::v4::boot::pxelinux_file_name as node_file_name;

/// One node's config.
pub fn node(site: &Site, node: &Node, urls: &NodeUrls) -> String {
    let args = kernel_args(site, node, urls).join(" ");
    format!(
        "# bootd: {name} (role {role}, {arch}), IP {ip}\n\
DEFAULT bootd\n\
TIMEOUT 10\n\
LABEL bootd\n\
\x20 MENU LABEL bootd: {name} ({role})\n\
\x20 KERNEL {kernel}\n\
\x20 INITRD {initramfs}\n\
\x20 APPEND {args}\n",
        name = node.name,
        role = node.role,
        arch = node.arch,
        ip = ip_list(node),
        kernel = urls.kernel,
        initramfs = urls.initramfs,
    )
}

/// For a node that installed (`ignition.afterInstall: disk`): no label to
/// boot over the network, so petitboot boots the next option (the disk).
pub fn local_disk(node: &Node) -> String {
    format!(
        "# bootd: {name} installed already: boot its local disk, not the installer\n\
# (bootd nodes reinstall {name} to install again)\n",
        name = node.name
    )
}

/// For a node that must not install now: no label to boot, and the reason.
pub fn refused(node: &Node, why: &str) -> String {
    format!(
        "# bootd: {name} does not install: {why}\n",
        name = node.name,
        why = super::echo_safe(why)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The grammar petitboot's pxe-parser and pxelinux document: keyword,
    /// whitespace, value; keywords case-insensitive; `#` comments. Every
    /// line of a rendered config is a known keyword or a comment, the
    /// default names a label, and each label has a kernel.
    #[test]
    fn rendered_configs_follow_the_pxelinux_grammar() {
        let site = site::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/site.yaml"),
        )
        .unwrap();
        let n = site.node("p9-0").unwrap();
        let text = node(
            &site,
            n,
            &NodeUrls::new(&site, &site.host.http.url, n, "TOKEN"),
        );
        let mut default = None;
        let mut labels: Vec<(String, Option<String>)> = Vec::new();
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (k, v) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            match k.to_ascii_uppercase().as_str() {
                "DEFAULT" => default = Some(v.trim().to_string()),
                "TIMEOUT" => assert!(v.trim().parse::<u32>().is_ok(), "{line}"),
                "LABEL" => labels.push((v.trim().to_string(), None)),
                "KERNEL" => labels.last_mut().unwrap().1 = Some(v.trim().to_string()),
                "MENU" | "INITRD" | "APPEND" => {
                    assert!(!labels.is_empty(), "{line} outside a label")
                }
                other => panic!("unknown keyword {other} in {line:?}"),
            }
        }
        assert_eq!(default.as_deref(), Some("bootd"));
        assert_eq!(labels.len(), 1);
        assert_eq!(
            labels[0].1.as_deref(),
            Some("http://10.77.0.1:8080/images/lab-ppc64le/vmlinux")
        );
        assert!(
            text.contains("APPEND ") && text.contains("ignition.config.url="),
            "{text}"
        );
        assert_eq!(
            node_file_name(&n.macs[0]),
            "pxelinux.cfg/01-52-54-00-77-00-30"
        );
    }
}
