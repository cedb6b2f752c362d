//! Boot file names (`host.dhcp.bootFiles`, `host.dhcp6.bootFiles`, `nodes[].ipxeBinary`).

use super::*;

/// `<key>.bootFiles`: each file name checked, defaults for those not given.
pub(super) fn boot_files(cx: &mut Cx, key: &str, bf: Option<&wire::BootFiles>) -> BootFiles {
    let mut file = |name: &str, v: Option<&Option<String>>, default: &str| {
        boot_file(
            cx,
            &format!("{key}.{name}"),
            v.and_then(|v| v.as_deref()),
            default,
        )
    };
    BootFiles {
        bios: file("bios", bf.map(|b| &b.bios), "undionly.kpxe"),
        uefi_x86_64: file("uefiX86_64", bf.map(|b| &b.uefi_x86_64), "ipxe.efi"),
        uefi_arm64: file("uefiArm64", bf.map(|b| &b.uefi_arm64), "ipxe-arm64.efi"),
        ieee1275: file("ieee1275", bf.map(|b| &b.ieee1275), "core.elf"),
    }
}

pub(super) fn boot_file(cx: &mut Cx, key: &str, v: Option<&str>, default: &str) -> String {
    match v {
        None => default.to_string(),
        Some(f)
            if !f.is_empty()
                && f.len() < 128
                && f.is_ascii()
                && !f.contains(|c: char| c.is_whitespace() || c.is_control()) =>
        {
            f.to_string()
        }
        Some(f) => {
            cx.err(
                key,
                format!("{f:?} is not a boot file name (ASCII, no spaces, < 128 bytes)"),
            );
            default.to_string()
        }
    }
}
