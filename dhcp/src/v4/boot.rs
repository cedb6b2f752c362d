//! Which firmware is asking, and what it should boot. Pure: from the
//! request's options (93 client arch, 60 vendor class, 77 user class, 175
//! iPXE) and the node's hints to a decision with a reason for the log.
//!
//! Rules, in order (the order matters: iPXE also sends PXEClient):
//! 1. iPXE (option 175, or user class "iPXE") → the HTTP boot script URL,
//!    plus 175.176 = 1 so it does not wait for proxyDHCP. Never an iPXE
//!    binary: that would chainload forever.
//! 2. Vendor class "HTTPClient" (UEFI HTTP Boot, arch 15/16/19) → an HTTP
//!    URL of the iPXE EFI binary; option 60 echoed ("HTTPClient").
//! 3. Vendor class "PXEClient": arch 0 → undionly.kpxe (BIOS PXE); 6/7/9 →
//!    the x86_64 UEFI iPXE (per site, per node); 11 → the arm64 iPXE. A
//!    PXE client that says no architecture gets what the node's firmware
//!    hint names (`bios`, `uefi`/`uefi-http`, `ieee1275`); with `auto`, none.
//! 4. Open Firmware (SLOF, PowerVM): no vendor class; arch 12 only in the
//!    REQUEST, so a node hinted `ieee1275` (or ppc64le) gets GRUB's core.elf
//!    from DISCOVER on.
//! 5. A client that asks for options 209/210 (petitboot on OpenPOWER, or
//!    pxelinux) and is neither a PXE ROM nor Open Firmware (SLOF asks for
//!    209/210 too, hence after rule 4) → 209 = `pxelinux.cfg/01-<mac>`, 210
//!    = bootd's HTTP base: the node's pxelinux config over HTTP.
//! 6. Anything else (udhcpc, dhclient, an OS): no boot information.

use dhcproto::v4::{DhcpOption, Message, OptionCode};
use site::{Arch, BootFiles, Firmware, Node, Site};

pub const OPT_IPXE: u8 = 175;
/// iPXE's "no proxyDHCP wait" setting inside option 175.
pub const IPXE_NO_PXEDHCP: u8 = 176;
/// pxelinux's config file (RFC 5071), which petitboot asks for.
pub const OPT_PXELINUX_CONFIG: u8 = 209;
/// pxelinux's path prefix (RFC 5071).
pub const OPT_PXELINUX_PREFIX: u8 = 210;

/// The file name petitboot and pxelinux look for first (option 209): `01-`
/// (Ethernet), then the MAC in lower case with dashes. bootd serves it over
/// HTTP (its `render::pxelinux`).
pub fn pxelinux_file_name(mac: &site::Mac) -> String {
    format!("pxelinux.cfg/01-{}", mac.dashed())
}

/// What the client told us about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    pub arch: Option<u16>,
    pub vendor_class: Option<String>,
    pub ipxe: bool,
    /// Asks for options 209/210 (pxelinux config file and path prefix):
    /// petitboot, or pxelinux itself.
    pub pxelinux: bool,
}

impl ClientInfo {
    pub fn from_message(msg: &Message) -> ClientInfo {
        let opts = msg.opts();
        let arch = match opts.get(OptionCode::ClientSystemArchitecture) {
            Some(DhcpOption::ClientSystemArchitecture(a)) => Some(u16::from(*a)),
            _ => None,
        };
        let vendor_class = match opts.get(OptionCode::ClassIdentifier) {
            Some(DhcpOption::ClassIdentifier(v)) => Some(String::from_utf8_lossy(v).into_owned()),
            _ => None,
        };
        let user_class_ipxe = match opts.get(OptionCode::UserClass) {
            // RFC 3004 user class is length-prefixed; iPXE sends "\x04iPXE" or plain "iPXE".
            Some(DhcpOption::UserClass(v)) => v.windows(4).any(|w| w == b"iPXE"),
            _ => false,
        };
        let ipxe = user_class_ipxe || opts.get(OptionCode::Unknown(OPT_IPXE)).is_some();
        // Arch may also be spelled in the vendor class: PXEClient:Arch:00007:UNDI:003016
        let arch = arch.or_else(|| {
            let v = vendor_class.as_deref()?;
            let i = v.find("Arch:")?;
            v.get(i + 5..i + 10)?.parse().ok()
        });
        let pxelinux = match opts.get(OptionCode::ParameterRequestList) {
            Some(DhcpOption::ParameterRequestList(l)) => l
                .iter()
                .any(|c| matches!(u8::from(*c), OPT_PXELINUX_CONFIG | OPT_PXELINUX_PREFIX)),
            _ => false,
        };
        ClientInfo {
            arch,
            vendor_class,
            ipxe,
            pxelinux,
        }
    }
}

/// The boot part of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootAnswer {
    /// `file` / option 67: a TFTP file name or an HTTP URL.
    pub filename: String,
    /// Served over TFTP from this host (siaddr and option 66 set).
    pub tftp: bool,
    /// Echo option 60 with this value (UEFI HTTP Boot requires it).
    pub vendor_class: Option<String>,
    /// Send option 175 with 176 = 1 (iPXE: skip the proxyDHCP wait).
    pub ipxe_options: bool,
    /// Send options 209 (this config file) and 210 (the HTTP base as the
    /// path prefix): petitboot fetches the node's pxelinux config.
    pub pxelinux: Option<String>,
    pub reason: String,
}

/// The decision: boot information, or why none is given.
pub fn decide(site: &Site, node: Option<&Node>, client: &ClientInfo) -> Result<BootAnswer, String> {
    let Some(dhcp) = &site.host.dhcp else {
        return Err("DHCP is not configured".into());
    };
    decide_with(
        node,
        client,
        &dhcp.boot_files,
        site.host.http.url_for(false),
    )
}

/// [`decide`] with the boot files and the HTTP base URL given: DHCPv6
/// decides the same way, with its own files and the IPv6 URL.
pub fn decide_with(
    node: Option<&Node>,
    client: &ClientInfo,
    bf: &BootFiles,
    http: &str,
) -> Result<BootAnswer, String> {
    let vc = client.vendor_class.as_deref().unwrap_or("");
    let hint = node.map(|n| n.firmware).unwrap_or(Firmware::Auto);
    let node_arch = node.map(|n| n.arch);
    if client.ipxe {
        return Ok(BootAnswer {
            filename: format!("{http}/boot.ipxe"),
            tftp: false,
            vendor_class: None,
            ipxe_options: true,
            pxelinux: None,
            reason: "iPXE (option 175 / user class iPXE): HTTP boot script".into(),
        });
    }
    if vc.starts_with("HTTPClient") {
        let file = match client.arch {
            Some(19) => &bf.uefi_arm64,
            _ => node
                .and_then(|n| n.ipxe_binary.as_ref())
                .unwrap_or(&bf.uefi_x86_64),
        };
        return Ok(BootAnswer {
            filename: format!("{http}/boot/{file}"),
            tftp: false,
            vendor_class: Some("HTTPClient".into()),
            ipxe_options: false,
            pxelinux: None,
            reason: format!(
                "UEFI HTTP Boot (arch {:?}): iPXE EFI over HTTP",
                client.arch
            ),
        });
    }
    if vc.starts_with("PXEClient") {
        let (file, what) = match client.arch {
            Some(0) => (bf.bios.clone(), "BIOS PXE (arch 0)"),
            Some(6 | 7 | 9) => (
                node.and_then(|n| n.ipxe_binary.clone())
                    .unwrap_or_else(|| bf.uefi_x86_64.clone()),
                "UEFI x86 PXE (arch 6/7/9)",
            ),
            Some(11) => (bf.uefi_arm64.clone(), "UEFI arm64 PXE (arch 11)"),
            Some(12) => (bf.ieee1275.clone(), "Open Firmware PXE (arch 12)"),
            // No architecture (option 93) and none in the vendor class: the
            // node's firmware hint decides.
            None => match (hint, node_arch) {
                (Firmware::Bios, _) => (bf.bios.clone(), "PXE without an arch, firmware hint bios"),
                (Firmware::Uefi | Firmware::UefiHttp, Some(Arch::Aarch64)) => (
                    bf.uefi_arm64.clone(),
                    "PXE without an arch, firmware hint uefi (aarch64 node)",
                ),
                (Firmware::Uefi | Firmware::UefiHttp, _) => (
                    node.and_then(|n| n.ipxe_binary.clone())
                        .unwrap_or_else(|| bf.uefi_x86_64.clone()),
                    "PXE without an arch, firmware hint uefi",
                ),
                (Firmware::Ieee1275, _) => (
                    bf.ieee1275.clone(),
                    "PXE without an arch, firmware hint ieee1275",
                ),
                (Firmware::Auto, _) => {
                    return Err(
                        "PXE client sent no architecture (option 93): set the node's \
                                firmware hint (bios, uefi, ieee1275) to decide"
                            .into(),
                    )
                }
            },
            Some(other) => return Err(format!("PXE client with unsupported arch {other}")),
        };
        return Ok(BootAnswer {
            filename: file,
            tftp: true,
            vendor_class: None,
            ipxe_options: false,
            pxelinux: None,
            reason: format!("{what}: iPXE over TFTP"),
        });
    }
    let open_firmware = client.arch == Some(12)
        || hint == Firmware::Ieee1275
        || (hint == Firmware::Auto && node_arch == Some(Arch::Ppc64le));
    if client.vendor_class.is_none() && open_firmware {
        return Ok(BootAnswer {
            filename: bf.ieee1275.clone(),
            tftp: true,
            vendor_class: None,
            ipxe_options: false,
            pxelinux: None,
            reason: format!(
                "Open Firmware (arch {:?}, firmware hint {hint:?}): GRUB over TFTP",
                client.arch
            ),
        });
    }
    if client.pxelinux
        && client
            .vendor_class
            .as_deref()
            .is_none_or(|v| !v.starts_with("PXEClient"))
    {
        let Some(n) = node else {
            return Err(
                "petitboot/pxelinux client (asks for options 209/210) with a MAC no node has"
                    .into(),
            );
        };
        let Some(mac) = n.macs.first() else {
            return Err("node without a MAC".into());
        };
        return Ok(BootAnswer {
            filename: String::new(),
            tftp: false,
            vendor_class: None,
            ipxe_options: false,
            pxelinux: Some(pxelinux_file_name(mac)),
            reason: "petitboot/pxelinux (asks for options 209/210): pxelinux config over HTTP"
                .into(),
        });
    }
    Err(match &client.vendor_class {
        Some(v) => format!(
            "not a network-boot client (vendor class {:?})",
            v.escape_debug().to_string()
        ),
        None => "not a network-boot client (no vendor class, no PXE arch)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> Site {
        site::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/site.yaml"),
        )
        .unwrap()
    }

    fn pxe(arch: Option<u16>) -> ClientInfo {
        ClientInfo {
            arch,
            vendor_class: Some("PXEClient".into()),
            ipxe: false,
            pxelinux: false,
        }
    }

    /// The firmware hint decides only what the client leaves open; what
    /// the client says about itself wins.
    #[test]
    fn the_firmware_hint_decides_for_a_pxe_client_without_an_arch() {
        let site = lab();
        let mut node = site.node("worker-0").unwrap().clone();
        let file = |node: &Node, c: &ClientInfo| decide(&site, Some(node), c).map(|a| a.filename);
        let cases = [
            (Firmware::Bios, "undionly.kpxe"),
            (Firmware::Uefi, "ipxe.efi"),
            (Firmware::UefiHttp, "ipxe.efi"),
            (Firmware::Ieee1275, "core.elf"),
        ];
        for (hint, want) in cases {
            node.firmware = hint;
            assert_eq!(file(&node, &pxe(None)).as_deref(), Ok(want), "{hint:?}");
            // The client's own arch wins over the hint.
            assert_eq!(
                file(&node, &pxe(Some(7))).as_deref(),
                Ok("ipxe.efi"),
                "{hint:?}"
            );
            assert_eq!(
                file(&node, &pxe(Some(0))).as_deref(),
                Ok("undionly.kpxe"),
                "{hint:?}"
            );
        }
        node.firmware = Firmware::Auto;
        let e = file(&node, &pxe(None)).unwrap_err();
        assert!(
            e.contains("no architecture") && e.contains("firmware hint"),
            "{e}"
        );
        // An unknown client gets nothing (no hint for it).
        assert!(decide(&site, None, &pxe(None)).is_err());
        node.firmware = Firmware::Uefi;
        node.arch = Arch::Aarch64;
        assert_eq!(file(&node, &pxe(None)).as_deref(), Ok("ipxe-arm64.efi"));
    }
}
