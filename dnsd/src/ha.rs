//! Zone serials that agree across appliances sharing one etcd
//! (`host.store.etcd`): every appliance serving the same zone content
//! gives it the same SOA serial, so secondaries and resolvers see one
//! zone whichever appliance they ask.
//!
//! Per zone, etcd holds `dns/serials/<origin>`: the content's digest and
//! its serial. An appliance that loads the zone with that digest takes that
//! serial; with another digest it writes its content's serial, at least
//! one more than the stored one (a compare-and-swap on the key's
//! revision), so the serial only grows. Without etcd, the serial this
//! appliance computed alone is kept, and said.

use crate::{Catalog, Loaded};
use etcd::{Compare, CompareOp, Etcd, Transaction, TxnOp};
use std::hash::Hasher;
use tracing::warn;

#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    digest: String,
    serial: u32,
}

/// A stable digest of a zone's content (its records, serial left out):
/// FNV-1a over the sorted lines, the same on every appliance.
fn digest(content: &[String]) -> String {
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    for line in content {
        h.write(line.as_bytes());
        h.write(b"\n");
    }
    format!("{:016x}-{}", h.finish(), content.len())
}

/// The serial the site's appliances agree on for `origin` with `content`,
/// this appliance proposing `proposed`.
fn agree_one(etcd: &Etcd, origin: &str, content: &[String], proposed: u32) -> Result<u32, String> {
    let rel = format!("dns/serials/{origin}");
    let key = etcd.key(&rel);
    let digest = digest(content);
    for _ in 0..8 {
        let cur = etcd.get(&rel).map_err(|e| e.to_string())?;
        let (rev, old) = match &cur {
            Some(v) => (
                v.mod_revision,
                Some(
                    serde_json::from_slice::<Stored>(&v.value)
                        .map_err(|e| format!("{key}: {e}"))?,
                ),
            ),
            None => (0, None),
        };
        if let Some(o) = &old {
            if o.digest == digest {
                return Ok(o.serial);
            }
        }
        let serial = match &old {
            Some(o) => proposed.max(o.serial.wrapping_add(1)),
            None => proposed,
        };
        let value = serde_json::to_vec(&Stored {
            digest: digest.clone(),
            serial,
        })
        .map_err(|e| e.to_string())?;
        let t = Transaction::new()
            .when([Compare::mod_revision(key.clone(), CompareOp::Equal, rev)])
            .and_then([TxnOp::put(key.clone(), value, None)]);
        if etcd
            .txn("agree on a zone serial", t)
            .map_err(|e| e.to_string())?
            .succeeded()
        {
            return Ok(serial);
        }
    }
    Err(format!(
        "{key}: changed by other appliances 8 times in a row"
    ))
}

/// `loaded` with each zone's serial agreed through `etcd` (the catalog
/// built again when one changed). A zone whose serial cannot be agreed
/// keeps this appliance's, with a warning.
pub fn agree(etcd: &Etcd, loaded: Loaded) -> Loaded {
    let mut zones = loaded.catalog.zones.clone();
    let mut changed = false;
    for z in &mut zones {
        let origin = z.origin.to_ascii();
        match agree_one(etcd, &origin, &z.content(), z.serial()) {
            Ok(s) if s != z.serial() => {
                z.set_serial(s);
                changed = true;
            }
            Ok(_) => {}
            Err(e) => {
                warn!(zone = %origin, error = %e, "zone serial not agreed with the other appliances: this one's kept")
            }
        }
    }
    if !changed {
        return loaded;
    }
    match Catalog::build(zones, loaded.catalog.options.clone()) {
        Ok(catalog) => Loaded { catalog, ..loaded },
        Err(e) => {
            warn!(error = %e, "zones with agreed serials did not build: this appliance's serials kept");
            loaded
        }
    }
}
