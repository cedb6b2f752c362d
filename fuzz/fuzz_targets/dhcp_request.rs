//! Any datagram through bootd's DHCP path: the structural check, the
//! decoder, and the decision against the lab site. No panic; an answer is
//! only ever produced for a packet that passed the check, and it encodes.
#![no_main]

use bootd::dhcp::{core, leases::Table, wire};
use dhcproto::{v4::Message, Decodable, Decoder, Encodable, Encoder};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn site() -> &'static site::Site {
    static SITE: OnceLock<site::Site> = OnceLock::new();
    SITE.get_or_init(|| {
        site::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/site.yaml"),
        )
        .expect("lab site")
    })
}

fuzz_target!(|data: &[u8]| {
    if wire::check(data).is_err() {
        return;
    }
    let Ok(msg) = Message::decode(&mut Decoder::new(data)) else {
        return;
    };
    let rx = core::Rx {
        src: "0.0.0.0:68".parse().unwrap(),
        local_port: 67,
    };
    let out = core::answer(site(), &mut Table::default(), &msg, rx, 1_000_000);
    if let Some((reply, _)) = out.reply {
        let mut buf = Vec::new();
        reply
            .encode(&mut Encoder::new(&mut buf))
            .expect("replies encode");
    }
});
