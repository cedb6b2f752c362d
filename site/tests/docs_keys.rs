//! Every key docs/site.md documents is a key the parser takes, so the
//! documentation and the parser cannot drift apart.
//!
//! The doc's key tables (a header row starting `| key |`) list keys
//! relative to the section they stand in: `## `cluster`` or
//! `### `host.dhcp``; a table whose keys sit elsewhere is preceded by an
//! HTML comment `<!-- keys under: a.b.c -->`. A cell may name several keys
//! (`` `pool.start`, `pool.end` ``). Each key is set, one at a time, in a
//! copy of the lab site, and the parser must not report it as unknown.

use serde_yaml_ng::{Mapping, Value};
use std::path::Path;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// (key path, e.g. `host.dhcp.bootFiles.uefiX86_64`) for every documented key.
fn documented_keys(doc: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut section = String::new();
    let mut prefix: Option<String> = None;
    let mut in_key_table = false;
    for line in doc.lines() {
        if line.starts_with('#') {
            // `## `host`: this machine` -> host; a header without a key
            // opens a section with no key table of its own.
            section = first_code(line).unwrap_or_default();
            prefix = None;
            in_key_table = false;
        } else if let Some(p) = line.trim().strip_prefix("<!-- keys under:") {
            prefix = Some(p.trim_end_matches("-->").trim().to_string());
        } else if line.starts_with("| key |") {
            in_key_table = true;
        } else if !line.starts_with('|') {
            // A table's end also ends the reach of its `keys under` comment.
            if in_key_table {
                prefix = None;
            }
            in_key_table = false;
        } else if in_key_table && !line.starts_with("|---") {
            let cell = line.split('|').nth(1).unwrap_or_default();
            let base = prefix.clone().unwrap_or_else(|| section.clone());
            for k in codes(cell) {
                keys.push(if base.is_empty() {
                    k
                } else {
                    format!("{base}.{k}")
                });
            }
        }
    }
    keys
}

fn codes(s: &str) -> Vec<String> {
    s.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn first_code(s: &str) -> Option<String> {
    codes(s).into_iter().next()
}

/// Sets `key` in `doc` (creating maps on the way; `[]`, or a list already
/// there, means its first item; `<name>`-style segments take the map's
/// first key, or `sample`) and returns the key path the parser reports it
/// under (`nodes[0].ip`).
fn set(doc: &mut Value, key: &str, sample: &str) -> String {
    let mut reported = Vec::new();
    let mut cur = doc;
    let segs: Vec<&str> = key.split('.').collect();
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        let (name, list) = match seg.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (*seg, false),
        };
        let map = cur.as_mapping_mut().expect("a map on the way");
        let name = if name.starts_with('<') {
            map.keys()
                .next()
                .and_then(Value::as_str)
                .unwrap_or(sample)
                .to_string()
        } else {
            name.to_string()
        };
        reported.push(name.clone());
        if last && !list {
            map.insert(Value::String(name), Value::String("x".into()));
            break;
        }
        let entry = map.entry(Value::String(name)).or_insert_with(|| {
            if list {
                Value::Sequence(vec![])
            } else {
                Value::Mapping(Mapping::new())
            }
        });
        if !entry.is_mapping() && !entry.is_sequence() {
            *entry = Value::Mapping(Mapping::new());
        }
        cur = entry;
        if let Value::Sequence(items) = cur {
            if items.is_empty() {
                items.push(Value::Mapping(Mapping::new()));
            }
            let last_name = reported.pop().unwrap_or_default();
            reported.push(format!("{last_name}[0]"));
            cur = &mut items[0];
            if last {
                break;
            }
        }
    }
    reported.join(".")
}

/// `doc` (a changed lab site) written to a temporary directory, with the
/// lab site's relative paths made absolute so that it still validates.
fn write_lab_copy(doc: &Value) -> std::path::PathBuf {
    let lab = repo().join("examples/lab").canonicalize().unwrap();
    let mut d = doc.clone();
    for (a, b) in [
        ("host", "stateDir"),
        ("images", "root"),
        ("ignition", "dir"),
    ] {
        if let Some(p) = d[a][b].as_str() {
            d[a][b] = Value::String(lab.join(p).display().to_string());
        }
    }
    if let Some(p) = d["host"]["tftp"]["root"].as_str() {
        d["host"]["tftp"]["root"] = Value::String(lab.join(p).display().to_string());
    }
    let dir = tempfile::tempdir().unwrap().keep();
    let file = dir.join("site.yaml");
    std::fs::write(&file, serde_yaml_ng::to_string(&d).unwrap()).unwrap();
    file
}

/// The keys the parser calls unknown in `doc` (with the lab site's paths).
fn unknown_keys(doc: &Value) -> Vec<String> {
    let file = write_lab_copy(doc);
    let got = site::load(&file);
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
    match got {
        Ok(_) => vec![],
        Err(e) => e
            .problems
            .into_iter()
            .filter(|p| p.reason.starts_with("unknown key"))
            .map(|p| p.key)
            .collect(),
    }
}

#[test]
fn every_documented_key_is_accepted() {
    let doc = std::fs::read_to_string(repo().join("docs/site.md")).unwrap();
    let keys = documented_keys(&doc);
    // The doc's tables, not an empty match: roughly a hundred keys today.
    assert!(
        keys.len() >= 90,
        "found only {} keys in docs/site.md: {keys:?}",
        keys.len()
    );
    for k in [
        "host.dhcp.bootFiles.uefiX86_64",
        "lb.frontends.<name>.check.serverName",
        "nodes.network.mtu",
        "dns.rateLimit.slip",
    ] {
        assert!(
            keys.iter().any(|x| x == k),
            "{k} not among the documented keys: {keys:?}"
        );
    }
    let lab: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo().join("examples/lab/site.yaml")).unwrap(),
    )
    .unwrap();
    assert!(unknown_keys(&lab).is_empty());
    let mut refused = Vec::new();
    for k in &keys {
        let mut d = lab.clone();
        let sample = if k.starts_with("lb.frontends") {
            "api"
        } else {
            "sample"
        };
        let path = set(&mut d, k, sample);
        if unknown_keys(&d).contains(&path) {
            refused.push(format!("{k} (as {path})"));
        }
    }
    assert!(
        refused.is_empty(),
        "documented in docs/site.md but refused as unknown: {refused:#?}"
    );
}

/// The check above can fail: a key the parser does not know is caught.
#[test]
fn an_undocumented_spelling_is_caught() {
    let lab: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo().join("examples/lab/site.yaml")).unwrap(),
    )
    .unwrap();
    let mut d = lab.clone();
    let path = set(&mut d, "host.dhcp.bootFiles.uefiX86-64", "");
    assert_eq!(path, "host.dhcp.bootFiles.uefiX86-64");
    assert_eq!(unknown_keys(&d), vec![path]);
    let mut d = lab.clone();
    let path = set(&mut d, "nodes.colour", "");
    assert_eq!(path, "nodes[0].colour");
    assert_eq!(unknown_keys(&d), vec![path]);
}

/// Both spellings of the UEFI x86-64 boot file are taken, and mean the same.
#[test]
fn uefi_x86_64_boot_file_spellings() {
    for spelling in ["uefiX86_64", "uefiX8664"] {
        let mut d: Value = serde_yaml_ng::from_str(
            &std::fs::read_to_string(repo().join("examples/lab/site.yaml")).unwrap(),
        )
        .unwrap();
        set(&mut d, &format!("host.dhcp.bootFiles.{spelling}"), "");
        d["host"]["dhcp"]["bootFiles"][spelling] = Value::String("snponly.efi".into());
        let file = write_lab_copy(&d);
        let got = site::load(&file);
        let s = got.unwrap_or_else(|e| panic!("{spelling}: {e}"));
        assert_eq!(
            s.host.dhcp.as_ref().unwrap().boot_files.uefi_x86_64,
            "snponly.efi",
            "{spelling}"
        );
    }
}
