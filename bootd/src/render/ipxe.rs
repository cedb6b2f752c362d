//! iPXE scripts: the entry script every iPXE gets, each node's own script,
//! and the explanation an unknown machine gets instead of a bare 404.

use super::{ip_list, kernel_args, NodeUrls};
use site::{Mac, Node, Site};
use std::fmt::Write;

/// How often a node script retries its downloads before giving up.
const DOWNLOAD_TRIES: u32 = 5;

/// `GET /boot.ipxe`: hands over to the node's own script, keyed by MAC.
/// `base`: the HTTP base URL of the client's address family.
pub fn entry(base: &str) -> String {
    format!(
        "#!ipxe\n\
# bootd entry script: fetch this machine's own script by its MAC.\n\
set attempt:int32 0\n\
:chain\n\
chain --autofree --replace {base}/ipxe/node?mac=${{mac:hexhyp}}&buildarch=${{buildarch}}&uuid=${{uuid}} ||\n\
inc attempt\n\
iseq ${{attempt}} {DOWNLOAD_TRIES} && goto giveup ||\n\
echo bootd: fetching the boot script from {base} failed (attempt ${{attempt}} of {DOWNLOAD_TRIES}); retrying in 5 s\n\
sleep 5\n\
goto chain\n\
:giveup\n\
echo bootd: could not fetch this machine's boot script from {base}; is bootd running and reachable? Rebooting in 60 s.\n\
sleep 60\n\
reboot\n"
    )
}

/// The script for one node: CoreOS live PXE with a retry loop.
pub fn node(site: &Site, node: &Node, urls: &NodeUrls) -> String {
    let mut args = vec!["initrd=initrd".to_string()];
    args.extend(kernel_args(site, node, urls));
    let macs: Vec<String> = node.macs.iter().map(Mac::to_string).collect();
    let mut s = String::new();
    let _ = write!(
        s,
        "#!ipxe\n\
# bootd: {name} (role {role}, {arch}), MAC {macs}, IP {ip}\n\
set attempt:int32 0\n\
:retry\n\
echo bootd: {name}: loading kernel and initramfs\n\
kernel --name kernel {kernel} {args} || goto failed\n\
initrd --name initrd {initramfs} || goto failed\n\
boot || goto failed\n\
:failed\n\
imgfree\n\
inc attempt\n\
iseq ${{attempt}} {DOWNLOAD_TRIES} && goto giveup ||\n\
echo bootd: {name}: download failed (attempt ${{attempt}} of {DOWNLOAD_TRIES}); retrying in 5 s\n\
sleep 5\n\
goto retry\n\
:giveup\n\
echo bootd: {name}: could not load {kernel} or its initramfs; check the image files on the bootd host. Rebooting in 60 s.\n\
sleep 60\n\
reboot\n",
        name = node.name,
        role = node.role,
        arch = node.arch,
        macs = macs.join(", "),
        ip = ip_list(node),
        kernel = urls.kernel,
        initramfs = urls.initramfs,
        args = args.join(" "),
    );
    s
}

/// For a MAC no node has: say why, say what to do, and try again later
/// (so adding the node to the site is enough; no power cycle needed).
pub fn unknown(site: &Site, base: &str, mac: Option<&Mac>) -> String {
    let who = match mac {
        Some(m) => m.to_string(),
        None => "(no MAC given)".to_string(),
    };
    format!(
        "#!ipxe\n\
echo bootd: this machine (MAC {who}) is not in the site description {file}.\n\
echo bootd: add a node with this MAC under nodes[].macs; bootd reloads the site by itself.\n\
echo bootd: asking again in 30 s.\n\
sleep 30\n\
chain --autofree --replace {base}/boot.ipxe\n",
        file = site
            .source
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
    )
}

/// For a node that installed (`ignition.afterInstall: disk`): boot the
/// first local disk (BIOS: `sanboot` of drive 0x80; UEFI: `exit`, back to
/// the firmware's next boot option) instead of the installer.
pub fn local_disk(node: &Node) -> String {
    format!(
        "#!ipxe\n\
echo bootd: {name} installed already: booting its local disk, not the installer.\n\
echo bootd: it network-booted again: put its disk before the network in the boot order.\n\
echo bootd: to install it again: bootd nodes reinstall {name}\n\
iseq ${{platform}} efi && goto efi ||\n\
sanboot --no-describe --drive 0x80 || echo bootd: no bootable local disk\n\
exit\n\
:efi\n\
exit\n",
        name = node.name
    )
}
/// For a node that must not install now (below its role's minimums, no
/// disk matching its hints): says why on the console and asks again in
/// five minutes (the site or the machine fixed, it then installs).
pub fn refused(node: &Node, why: &str) -> String {
    format!(
        "#!ipxe
echo bootd: {name} does not install: {why}
echo bootd: its conditions say the same (bootd nodes get {name}); asking again in 300 s.
sleep 300
reboot
",
        name = node.name,
        why = super::echo_safe(why)
    )
}

/// For a machine whose MAC is in no node, with `discovery.enabled`: report
/// what iPXE knows of it (every NIC, SMBIOS identity, architecture) to
/// bootd, which answers with [`discovered`]. A report not taken (too many
/// at once, or before the machine's lease is known: 429, 403) is sent again
/// after `retry_secs`, after asking DHCP again.
pub fn discover(base: &str, retry_secs: u64) -> String {
    let nics: String = (0..4)
        .map(|i| format!("&nic{i}=${{net{i}/mac:hexhyp}}"))
        .collect();
    format!(
        "#!ipxe\n\
echo bootd: machine ${{mac}} is in no node: reporting it (discovery)\n\
:report\n\
chain --autofree --replace {base}/discover?mac=${{mac:hexhyp}}&uuid=${{uuid}}&serial=${{serial:uristring}}&manufacturer=${{manufacturer:uristring}}&product=${{product:uristring}}&asset=${{asset:uristring}}&buildarch=${{buildarch}}&platform=${{platform}}{nics} || goto again\n\
:again\n\
echo bootd: the report was not taken; reporting again in {retry_secs} s\n\
sleep {retry_secs}\n\
dhcp ||\n\
goto report\n"
    )
}

/// The answer to a machine's first discovery report with
/// `discovery.inspect`: the live system of `set` (its architecture's),
/// whose Ignition (`ignition_url`) runs the inspection agent, which reports
/// and reboots; its next report gets [`discovered`].
pub fn discover_inspect(
    site: &Site,
    set: &site::ImageSet,
    base: &str,
    key: &str,
    ignition_url: &str,
) -> String {
    let image = |p: &str| format!("{base}/images/{p}");
    let mut args = vec!["initrd=initrd".to_string()];
    if let Some(r) = &set.rootfs {
        args.push(format!("coreos.live.rootfs_url={}", image(r)));
    }
    args.push("ignition.firstboot".into());
    args.push("ignition.platform.id=metal".into());
    args.push(format!("ignition.config.url={ignition_url}"));
    args.extend(site.discovery.kernel_args.iter().cloned());
    format!(
        "#!ipxe
echo bootd: discovered as {key}: inspecting it (discovery.inspect), then it waits to be adopted
kernel --name kernel {kernel} {args} || goto failed
initrd --name initrd {initramfs} || goto failed
boot || goto failed
:failed
echo bootd: the live system could not be loaded; asking again in 30 s.
sleep 30
chain --autofree --replace {base}/boot.ipxe
",
        kernel = image(&set.kernel),
        initramfs = image(&set.initramfs),
        args = args.join(" "),
    )
}

/// The answer to a discovery report: wait and ask again (`wait`: adopted,
/// it boots as its node without a power cycle), or power off.
pub fn discovered(site: &Site, base: &str, key: &str) -> String {
    let adopt = format!(
        "echo bootd: discovered as {key}: adopt it with\n\
echo bootd:   bootd discovered adopt {key} --name NAME --role ROLE\n"
    );
    match site.discovery.action {
        // DHCP again before asking: adopted meanwhile, the machine gets its
        // node's reservation, the address its node's script goes to (the
        // pool address it was discovered at is not the node's).
        site::DiscoveryAction::Wait => format!(
            "#!ipxe\n{adopt}\
echo bootd: asking again in {secs} s.\n\
sleep {secs}\n\
dhcp ||\n\
chain --autofree --replace {base}/boot.ipxe\n",
            secs = site.discovery.retry.as_secs()
        ),
        site::DiscoveryAction::PowerOff => format!(
            "#!ipxe\n{adopt}\
echo bootd: powering off (discovery.action: poweroff).\n\
poweroff || exit\n"
        ),
    }
}
