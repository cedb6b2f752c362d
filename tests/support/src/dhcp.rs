//! What bootd's DHCP tests share, in process (bootd/tests/it) and against
//! a bootd process (appliance/tests): a copy of the lab site, a loopback
//! network for relayed DHCP, requests, and a relay's receive.

use dhcproto::v4::{DhcpOption, HType, Message, MessageType, Opcode};
use dhcproto::{Encodable, Encoder};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The lab site's directory, `examples/lab`.
pub fn lab_dir() -> PathBuf {
    crate::repo().join("examples/lab")
}

/// Writes the lab site (edited) into `dir` with its own images, state and
/// Ignition; returns the site file's path.
pub fn write_site(dir: &Path, edit: impl FnOnce(String) -> String) -> PathBuf {
    let text = std::fs::read_to_string(lab_dir().join("site.yaml")).unwrap();
    let text = text
        .replace("root: ../../target/lab-images", "root: images")
        .replace("stateDir: ../../target/lab-state", "stateDir: state")
        .replace("root: ../../target/lab-tftp", "root: tftp");
    std::fs::create_dir_all(dir.join("images/lab")).unwrap();
    std::fs::create_dir_all(dir.join("tftp")).unwrap();
    std::fs::create_dir_all(dir.join("ignition")).unwrap();
    for r in ["bootstrap", "master", "worker"] {
        std::fs::copy(
            lab_dir().join(format!("ignition/{r}.ign")),
            dir.join(format!("ignition/{r}.ign")),
        )
        .unwrap();
    }
    std::fs::write(dir.join("site.yaml"), edit(text)).unwrap();
    dir.join("site.yaml")
}

/// worker-1 moves to 127.0.0.21 on a loopback network, so a "relay" on
/// 127.0.0.1 can reach it.
pub fn loopback_site(t: String) -> String {
    t.replace("    dnsServers: [10.77.0.1]\n", "    dnsServers: [10.77.0.1]\n  - name: lo\n    subnet: 127.0.0.0/8\n    gateway: 127.0.0.1\n    pool: { start: 127.0.1.0, end: 127.0.9.255 }\n")
        .replace("ip: 10.77.0.21", "ip: 127.0.0.21")
}

/// A relayed request (giaddr 127.0.0.1, one hop) of type `t` from `mac`;
/// with `ip`, asking the server 10.77.0.1 for that address.
pub fn request(mac: [u8; 6], t: MessageType, xid: u32, ip: Option<Ipv4Addr>) -> Vec<u8> {
    request_with(mac, t, xid, ip, Vec::new())
}

/// [`request`] with `extra` options (a vendor class, a client
/// architecture, ...).
pub fn request_with(
    mac: [u8; 6],
    t: MessageType,
    xid: u32,
    ip: Option<Ipv4Addr>,
    extra: Vec<DhcpOption>,
) -> Vec<u8> {
    let mut m = Message::default();
    m.set_opcode(Opcode::BootRequest)
        .set_htype(HType::Eth)
        .set_xid(xid)
        .set_chaddr(&mac)
        .set_giaddr(Ipv4Addr::LOCALHOST)
        .set_hops(1);
    m.opts_mut().insert(DhcpOption::MessageType(t));
    for o in extra {
        m.opts_mut().insert(o);
    }
    if let Some(ip) = ip {
        m.opts_mut().insert(DhcpOption::RequestedIpAddress(ip));
        m.opts_mut()
            .insert(DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 77, 0, 1)));
    }
    let mut b = Vec::new();
    m.encode(&mut Encoder::new(&mut b)).unwrap();
    b
}

/// The next DHCP reply on `sock` (a relay's socket), or `None` after 2 s.
pub async fn dhcp_recv(sock: &tokio::net::UdpSocket) -> Option<dhcproto::v4::Message> {
    use dhcproto::{Decodable, Decoder};
    let mut buf = [0u8; 1500];
    let n = tokio::time::timeout(std::time::Duration::from_secs(2), sock.recv(&mut buf))
        .await
        .ok()?
        .ok()?;
    dhcproto::v4::Message::decode(&mut Decoder::new(&buf[..n])).ok()
}
