//! `bootd store migrate --from sqlite --to etcd` (and back): an existing
//! single appliance's state moved into the site's etcd, or out of it.
//!
//! What moves: the controller's store ([`controller::store::copy`]), the
//! token key and the site CA (settled as at a start: the files and etcd
//! must agree, or the one side without them takes the other's), the DHCP
//! leases and declined addresses, and the spent tokens still valid.
//! The site must name the etcd cluster (`host.store.etcd`) either way: it
//! is where the migration reads its settings. bootd must be stopped: the
//! migration refuses a target that already holds nodes or leases.

use crate::ha::EtcdShared;
use anyhow::{bail, Context, Result};
use bootd::ha::Shared;
use controller::store::Store;
use dhcp::v4::ha::SharedLeases;
use std::path::Path;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// SQLite and files in the state directory.
    Sqlite,
    /// The site's etcd (`host.store.etcd`).
    Etcd,
}

/// Moves the state from `from` to `to`; what was moved, for the operator.
pub fn migrate(site: &site::Site, state_dir: &Path, from: Side, to: Side) -> Result<String> {
    if from == to {
        bail!("--from and --to are the same store");
    }
    let site::Store::Etcd(e) = &site.host.store else {
        bail!(
            "host.store.etcd is not set in the site: the migration reads the etcd cluster's \
             settings from it (write host.store.etcd, migrate, then start bootd)"
        );
    };
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("state directory {}", state_dir.display()))?;
    let ha = site.host.dhcp.as_ref().map(|d| d.ha).unwrap_or_default();
    let shared = EtcdShared::new(etcd::Config::from_site(e), e.lease_ttl, ha);
    // The secrets first: a conflict stops the migration before it copies.
    bootd::token::TokenKey::agree(&shared, state_dir).context("token key")?;
    bootd::tls::agree_ca(&shared, state_dir).context("site CA")?;
    let sqlite = Store::sqlite(state_dir)?;
    let etcd = Store::open(state_dir, &site.host.store)?;
    let (src, dst) = match from {
        Side::Sqlite => (&sqlite, &etcd),
        Side::Etcd => (&etcd, &sqlite),
    };
    let copied = controller::store::copy(&**src, &**dst).map_err(anyhow::Error::msg)?;
    let leases_path = state_dir.join("leases.jsonl");
    let spent_path = state_dir.join(bootd::spent::FILE);
    let now = runtime::clock::unix_secs();
    let (leases, spent) = match from {
        Side::Sqlite => {
            if !shared.leases()?.is_empty() {
                bail!("etcd already holds DHCP leases: leases not copied (the controller's state was)");
            }
            let (table, _) = dhcp::v4::leases::load(&leases_path)
                .with_context(|| leases_path.display().to_string())?;
            let mut n = 0;
            for l in table.declined().chain(table.leases()) {
                if let Some(other) = shared.commit_lease(l)? {
                    bail!("{}: {}'s in etcd, also {}'s here", l.ip, other.mac, l.mac);
                }
                n += 1;
            }
            let mut s = 0;
            for (expiry, nonce) in read_spent(&spent_path)? {
                if expiry > now {
                    shared.spend(&nonce, expiry)?;
                    s += 1;
                }
            }
            (n, s)
        }
        Side::Etcd => {
            let (here, _) = dhcp::v4::leases::load(&leases_path)?;
            if here.len() + here.declined().count() > 0 {
                bail!(
                    "{} already holds leases: leases not copied (the controller's state was)",
                    leases_path.display()
                );
            }
            let mut table = dhcp::v4::leases::Table::default();
            let leases = shared.leases()?;
            let n = leases.len();
            for l in leases {
                table.apply(l);
            }
            bootd::state::write_atomic(&leases_path, &dhcp::v4::leases::render(&table)?, 0o640)?;
            let spent: Vec<(u64, String)> = shared
                .spent()?
                .into_iter()
                .filter(|(e, _)| *e > now)
                .collect();
            let mut text: String = read_spent(&spent_path)?
                .into_iter()
                .map(|(e, n)| format!("{e} {n}\n"))
                .collect();
            for (e, n) in &spent {
                text.push_str(&format!("{e} {n}\n"));
            }
            bootd::state::write_private(&spent_path, text.as_bytes())?;
            (n, spent.len())
        }
    };
    Ok(format!(
        "migrated {from:?} -> {to:?}: {} nodes ({} machines, {} events, {} open intents), {} cluster facts, \
         {leases} DHCP records, {spent} spent tokens; token key and site CA agreed",
        copied.nodes, copied.machines, copied.events, copied.open_intents, copied.cluster_facts
    ))
}

/// The spent-token file's records (`<expiry> <nonce>`); none when absent.
fn read_spent(path: &Path) -> Result<Vec<(u64, String)>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| path.display().to_string()),
    };
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            let (e, n) = l
                .split_once(' ')
                .with_context(|| format!("{}: line {}", path.display(), i + 1))?;
            Ok((
                e.parse()
                    .with_context(|| format!("{}: line {}", path.display(), i + 1))?,
                n.to_string(),
            ))
        })
        .collect()
}
