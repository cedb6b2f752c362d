//! GRUB configs for Open Firmware (PowerVM, SLOF) and UEFI GRUB netboot:
//! one `grub.cfg-01-<mac>` per node, and a `grub.cfg` that picks by
//! `$net_default_mac`.

use super::{ip_list, kernel_args, NodeUrls};
use site::{Node, Site};

/// The file name GRUB asks for first: `grub.cfg-01-52-54-00-77-00-10`.
pub fn node_file_name(mac: &site::Mac) -> String {
    format!("grub.cfg-01-{}", mac.dashed())
}

/// GRUB's device for bootd's HTTP listener, e.g. `(http,10.77.0.1:8080)`,
/// and the path prefix under it.
fn http_device(url: &str) -> (String, String) {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    (
        format!("(http,{authority})"),
        path.trim_end_matches('/').to_string(),
    )
}

fn grub_url(url: &str) -> String {
    // http://host:port/images/x -> (http,host:port)/images/x
    let (dev, path) = http_device(url);
    format!("{dev}{path}")
}

/// One node's config: load the kernel and initramfs over HTTP.
pub fn node(site: &Site, node: &Node, urls: &NodeUrls) -> String {
    let args = kernel_args(site, node, urls).join(" ");
    format!(
        "# bootd: {name} (role {role}, {arch}), IP {ip}\n\
set timeout=1\n\
set default=0\n\
menuentry 'bootd: {name} ({role})' {{\n\
\x20   echo 'bootd: {name}: loading kernel'\n\
\x20   linux {kernel} {args}\n\
\x20   echo 'bootd: {name}: loading initramfs'\n\
\x20   initrd {initramfs}\n\
}}\n",
        name = node.name,
        role = node.role,
        arch = node.arch,
        ip = ip_list(node),
        kernel = grub_url(&urls.kernel),
        initramfs = grub_url(&urls.initramfs),
    )
}

/// The fallback `grub.cfg`: selects the node's file by `$net_default_mac`.
/// Firmware reports the MAC in either case (PowerVM: upper), and GRUB has no
/// lower-casing, so both spellings are compared.
pub fn selector(site: &Site) -> String {
    let mut s = String::from(
        "# bootd: pick this machine's config by its MAC.\n\
# Open Firmware may report the MAC in upper case; both spellings are listed.\n",
    );
    for n in &site.nodes {
        for mac in &n.macs {
            let file = node_file_name(mac);
            let mut spellings = vec![mac.to_string(), mac.upper()];
            spellings.dedup();
            for spelling in spellings {
                s.push_str(&format!("if [ \"$net_default_mac\" = \"{spelling}\" ]; then configfile \"$prefix/{file}\"; fi\n"));
            }
        }
    }
    s.push_str(&format!(
        "echo \"bootd: no node in {} has MAC $net_default_mac; add it under nodes[].macs.\"\n\
sleep 30\n\
reboot\n",
        site.source
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    s
}

/// For a node that installed (`ignition.afterInstall: disk`): GRUB leaves,
/// and the firmware boots its next option (the disk).
pub fn local_disk(node: &Node) -> String {
    format!(
        "# bootd: {name} installed already: booting its local disk, not the installer\n\
set timeout=1\n\
set default=0\n\
menuentry 'bootd: {name}: local disk (bootd nodes reinstall {name} to install again)' {{\n\
\x20   exit\n\
}}\n",
        name = node.name
    )
}

/// For a node that must not install now: GRUB says why and reboots in
/// five minutes.
pub fn refused(node: &Node, why: &str) -> String {
    format!(
        "# bootd: {name} does not install: {why}
echo \"bootd: {name} does not install: {why}\"
echo \"bootd: asking again in 300 s\"
sleep 300
reboot
",
        name = node.name,
        why = super::echo_safe(why)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn grub_device_syntax() {
        assert_eq!(
            grub_url("http://10.77.0.1:8080/images/k"),
            "(http,10.77.0.1:8080)/images/k"
        );
        assert_eq!(
            grub_url("http://boot.example/images/k"),
            "(http,boot.example)/images/k"
        );
    }
}
