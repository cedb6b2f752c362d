//! Human-readable dumps of DNS messages (dig-like), for golden files,
//! test failure messages and `dnsd query`. Decoding is hickory-proto's.

use hickory_proto::op::Message;
use hickory_proto::rr::Record;

/// One line per header, question and record; sections in wire order.
pub fn message(bytes: &[u8]) -> String {
    let m = match Message::from_vec(bytes) {
        Ok(m) => m,
        Err(e) => return format!(";; undecodable ({} bytes): {e}\n", bytes.len()),
    };
    let mut flags = Vec::new();
    for (on, f) in [
        (m.authoritative(), "aa"),
        (m.truncated(), "tc"),
        (m.recursion_desired(), "rd"),
        (m.recursion_available(), "ra"),
        (m.authentic_data(), "ad"),
        (m.checking_disabled(), "cd"),
    ] {
        if on {
            flags.push(f);
        }
    }
    let mut s = format!(
        ";; opcode {:?}, rcode {}, flags [{}], {} bytes\n",
        m.op_code(),
        m.response_code(),
        flags.join(" "),
        bytes.len()
    );
    if let Some(e) = m.extensions() {
        s.push_str(&format!(
            ";; EDNS version {}, udp {}, do {}\n",
            e.version(),
            e.max_payload(),
            e.flags().dnssec_ok
        ));
    }
    for q in m.queries() {
        s.push_str(&format!(
            ";QUESTION {} {} {}\n",
            q.name(),
            q.query_class(),
            q.query_type()
        ));
    }
    let section = |s: &mut String, title: &str, rs: &[Record]| {
        for r in rs {
            s.push_str(&format!("{title} {r}\n"));
        }
    };
    section(&mut s, "AN", m.answers());
    section(&mut s, "NS", m.name_servers());
    section(&mut s, "AR", m.additionals());
    s
}
