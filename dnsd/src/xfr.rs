//! Zone transfers (RFC 5936 AXFR; RFC 1995 IXFR answered with the whole
//! zone, or the SOA alone when the client is current) and NOTIFY (RFC
//! 1996). Not on the hot path: messages are built with hickory-proto.

use crate::core::serial_ge;
use crate::metrics::{Metrics, Outcome};
use crate::zone::Zone;
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{DNSClass, Record, RecordType};
use hickory_proto::serialize::binary::BinEncodable;
use std::net::SocketAddr;
use std::time::Duration;
use tracing::{info, warn};

/// Records per message are cut so a message stays near this size.
const MESSAGE_BYTES: usize = 16 * 1024;

/// The response messages to a transfer request (already checked by the
/// core: TCP, an apex, an allowed peer). `ixfr_serial`: the client's serial
/// of an IXFR request.
pub fn transfer(zone: &Zone, request: &[u8], ixfr_serial: Option<u32>) -> Vec<Vec<u8>> {
    let Ok(req) = Message::from_vec(request) else {
        return Vec::new();
    };
    let soa = zone.records[0].clone();
    let records: Vec<&Record> = match ixfr_serial {
        Some(s) if serial_ge(s, zone.serial()) => vec![&zone.records[0]],
        _ => std::iter::once(&zone.records[0])
            .chain(zone.records[1..].iter())
            .chain(std::iter::once(&soa))
            .collect(),
    };
    let mut out = Vec::new();
    let mut msg = response(&req, true);
    let mut size = 0;
    for r in records {
        let len = r.to_bytes().map(|b| b.len()).unwrap_or(0);
        if size + len > MESSAGE_BYTES && !msg.answers().is_empty() {
            out.extend(msg.to_vec().ok());
            msg = response(&req, false);
            size = 0;
        }
        msg.add_answer(r.clone());
        size += len;
    }
    out.extend(msg.to_vec().ok());
    out
}

fn response(req: &Message, first: bool) -> Message {
    let mut m = Message::new();
    m.set_id(req.id())
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_authoritative(true);
    if first {
        m.add_queries(req.queries().iter().cloned());
    }
    m
}

/// Sends NOTIFY for `zone` to each target over UDP, retrying (RFC 1996
/// §3.6) until it answers, at most 5 times, 2 s apart.
pub async fn notify(zone: &Zone, targets: &[SocketAddr], metrics: &Metrics) {
    let mut tasks = Vec::new();
    for &t in targets {
        let zone = zone.clone();
        tasks.push(async move {
            let ok = notify_one(&zone, t).await;
            (t, ok)
        });
    }
    for (t, ok) in futures_join(tasks).await {
        metrics
            .notifies
            .get_or_create(&Outcome {
                result: if ok { "acked" } else { "unanswered" },
            })
            .inc();
        if ok {
            info!(zone = %zone.origin, serial = zone.serial(), secondary = %t, "NOTIFY acknowledged");
        } else {
            warn!(zone = %zone.origin, serial = zone.serial(), secondary = %t, "NOTIFY not answered after 5 tries");
        }
    }
}

async fn futures_join<F: std::future::Future<Output = T> + Send + 'static, T: Send + 'static>(
    fs: Vec<F>,
) -> Vec<T> {
    let handles: Vec<_> = fs.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        if let Ok(v) = h.await {
            out.push(v);
        }
    }
    out
}

/// The NOTIFY message for `zone` (SOA in the answer section, RFC 1996 §3.7).
pub fn notify_message(zone: &Zone, id: u16) -> Option<Vec<u8>> {
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Notify)
        .set_authoritative(true);
    let mut q = Query::query(zone.origin.clone(), RecordType::SOA);
    q.set_query_class(DNSClass::IN);
    m.add_query(q);
    m.add_answer(zone.records[0].clone());
    m.to_vec().ok()
}

async fn notify_one(zone: &Zone, target: SocketAddr) -> bool {
    let bind: SocketAddr = if target.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    };
    let Ok(sock) = tokio::net::UdpSocket::bind(bind).await else {
        return false;
    };
    if sock.connect(target).await.is_err() {
        return false;
    }
    let id: u16 = rand::random();
    let Some(msg) = notify_message(zone, id) else {
        return false;
    };
    let mut buf = vec![0u8; 4096];
    for _ in 0..5 {
        if sock.send(&msg).await.is_err() {
            tokio::time::sleep(Duration::from_secs(2)).await;
            continue;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while let Ok(Ok(n)) = tokio::time::timeout_at(deadline, sock.recv(&mut buf)).await {
            if n >= 4 && buf[..2] == id.to_be_bytes() && buf[2] & 0x80 != 0 {
                return true;
            }
        }
    }
    false
}
