//! Every site snippet in the docs is a site the real parser and validator
//! accept (what `bootd --check-config` runs), so the documentation cannot
//! show a site that does not load.
//!
//! Every ```` ```yaml ```` (or `yml`) block of `docs/*.md` and `README.md`
//! is marked by an HTML comment on the last non-blank line before its fence:
//!
//! - `<!-- site -->`: a whole site file, validated alone as `site.yaml` in
//!   a scratch directory that holds the files of [`FILES`];
//! - `<!-- site-fragment: merge-into=PATH -->`: part of a site, merged
//!   into the site file at PATH (from the repository root: maps key by key,
//!   anything else replaced) and validated as that file, in a scratch copy
//!   of the repository's top folder holding it (`examples/`: what the site
//!   names relative to itself is there), its directory also holding the
//!   files of [`FILES`];
//! - `<!-- not-a-site: WHAT -->`: YAML that is not a site, WHAT saying what
//!   it is.
//!
//! An unmarked block fails, and so does a block in any other fence whose
//! first line starts with a top-level site key: a new snippet cannot escape
//! the check. A `<placeholder>` (or `…`) is allowed only where
//! [`PLACEHOLDERS`] gives the value it is replaced with, and every entry
//! there must still be used. tests/README.md describes the convention.

use serde_yaml_ng::Value;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .canonicalize()
        .unwrap()
}

/// What a placeholder in a snippet stands for while it is validated: one
/// coherent site (the bastion at 10.0.0.2 on 10.0.0.0/24, the subnet of
/// [`FILES`]' install-config).
const PLACEHOLDERS: &[(&str, &str)] = &[
    ("<bastion public IP>", "198.51.100.10"),
    ("<bastion IP>", "10.0.0.2"),
    ("<API VIP>", "10.0.0.5"),
    ("<ingress VIP>", "10.0.0.6"),
    ("<project id>", "6f4b1a2e-7c9d-4e3f-8a1b-2c3d4e5f6a7b"),
    ("<account>", "2c4e6f8a0b1d3f5a7c9e1b3d5f7a9c1e"),
    ("<workspace GUID>", "0aa1bb2c-3d4e-5f60-7182-93a4b5c6d7e8"),
    ("<bastion interface on the subnet>", "env3"),
    ("<subnet CIDR>", "10.0.0.0/24"),
    ("<subnet gateway>", "10.0.0.1"),
    ("<DNS resolver>", "9.9.9.9"),
    ("<vSwitch CIDR of cn-hangzhou-h>", "10.0.0.0/24"),
    ("<vSwitch CIDR of cn-hangzhou-i>", "10.0.1.0/24"),
];

/// The files beside a site while it is validated, for the paths snippets
/// name relative to the site file: what `openshift-install create
/// install-config` writes for a bastion-served install (`platform: none`),
/// stand-ins for etcd's client certificates (only their existence is
/// checked), and a real OpenPGP key file (parsed).
const FILES: &[(&str, &str)] = &[
    // A key file for images.signingKeys: coreos-installer's (Red Hat's
    // release key 2 and Fedora's keys), which the site parses.
    (
        "keys/RPM-GPG-KEY-redhat-release",
        include_str!("../../images/tests/fixtures/coreos-installer-signing-keys.asc"),
    ),
    (
        "install-config.yaml",
        "apiVersion: v1
baseDomain: example.com
metadata: { name: demo }
networking: { machineNetwork: [ { cidr: 10.0.0.0/24 } ] }
controlPlane: { name: master, replicas: 3 }
compute: [ { name: worker, replicas: 2 } ]
platform: { none: {} }
pullSecret: '{\"auths\":{}}'
sshKey: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDocsSnippet ops@bastion
",
    ),
    ("etcd/ca.pem", "a stand-in\n"),
    ("etcd/bootd.pem", "a stand-in\n"),
    ("etcd/bootd-key.pem", "a stand-in\n"),
];

/// The top-level keys of a site file (`site::wire::SiteFile`): a block
/// starting with one of them is a site snippet, whatever its fence says.
const SITE_KEYS: &[&str] = &[
    "cluster",
    "host",
    "networks",
    "vips",
    "images",
    "nodes",
    "ignition",
    "sshKeys",
    "dns",
    "lb",
    "discovery",
];

#[derive(Debug)]
enum Mark {
    Whole,
    Fragment(PathBuf),
    NotASite,
}

#[derive(Debug)]
struct Block {
    /// `docs/site.md:85` (the fence's line).
    at: String,
    info: String,
    /// The marker comment before the fence, if any.
    marker: Option<String>,
    text: String,
}

/// Every fenced block of `doc`, its lines unindented by the fence's indent.
fn blocks(name: &str, doc: &str) -> Vec<Block> {
    let lines: Vec<&str> = doc.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        let indent = lines[i].len() - t.len();
        let fence: String = t.chars().take_while(|c| *c == '`' || *c == '~').collect();
        if fence.len() < 3 || fence.chars().any(|c| c != fence.chars().next().unwrap()) {
            i += 1;
            continue;
        }
        let info = t[fence.len()..].trim().to_string();
        let marker = lines[..i]
            .iter()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim())
            .filter(|l| l.starts_with("<!--"))
            .map(str::to_string);
        let mut body = Vec::new();
        let mut j = i + 1;
        while j < lines.len() && !lines[j].trim_start().starts_with(&fence) {
            let l = lines[j];
            let cut = l.len() - l.trim_start().len();
            body.push(&l[cut.min(indent)..]);
            j += 1;
        }
        out.push(Block {
            at: format!("{name}:{}", i + 1),
            info,
            marker,
            text: body.join("\n") + "\n",
        });
        i = j + 1;
    }
    out
}

fn mark(marker: Option<&str>) -> Result<Mark, String> {
    let Some(m) = marker else {
        return Err("no marker: put <!-- site -->, <!-- site-fragment: merge-into=PATH --> or <!-- not-a-site: WHAT --> on the line before the fence".into());
    };
    let inner = m
        .strip_prefix("<!--")
        .and_then(|m| m.strip_suffix("-->"))
        .map(str::trim)
        .unwrap_or_default();
    if inner == "site" {
        return Ok(Mark::Whole);
    }
    if let Some(path) = inner
        .strip_prefix("site-fragment:")
        .map(str::trim)
        .and_then(|r| r.strip_prefix("merge-into="))
    {
        let p = repo().join(path.trim());
        return if p.is_file() {
            Ok(Mark::Fragment(p))
        } else {
            Err(format!("{m}: no file {}", p.display()))
        };
    }
    if let Some(what) = inner.strip_prefix("not-a-site:") {
        return if what.trim().is_empty() {
            Err(format!("{m}: say what the block is"))
        } else {
            Ok(Mark::NotASite)
        };
    }
    Err(format!("{m} is not a site-snippet marker"))
}

/// `text` with the placeholders replaced; `Err` names one left over.
fn substitute(text: &str, used: &mut [bool]) -> Result<String, String> {
    let mut t = text.to_string();
    for (i, (p, v)) in PLACEHOLDERS.iter().enumerate() {
        if t.contains(p) {
            used[i] = true;
            t = t.replace(p, v);
        }
    }
    for line in t.lines() {
        let open = line.find('<');
        let close = open.and_then(|o| line[o..].find('>').map(|c| o + c));
        if let (Some(o), Some(c)) = (open, close) {
            return Err(format!(
                "placeholder {} is not in PLACEHOLDERS (tests/doc_snippets.rs): give its value there",
                &line[o..=c]
            ));
        }
        if line.contains('…') {
            return Err(format!(
                "{line:?}: `…` stands for nothing the site could hold"
            ));
        }
    }
    Ok(t)
}

/// `frag` merged into `base`: maps key by key, anything else replaced.
fn merge(base: &mut Value, frag: Value) {
    match (base, frag) {
        (Value::Mapping(b), Value::Mapping(f)) => {
            for (k, v) in f {
                match b.get_mut(&k) {
                    Some(old) if old.is_mapping() && v.is_mapping() => merge(old, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, f) => *b = f,
    }
}

/// The block's marker once the block passed; `Err`: what is wrong with it
/// (the validator's problems for a site).
fn check(block: &Block, used: &mut [bool]) -> Result<Mark, String> {
    let m = mark(block.marker.as_deref())?;
    if matches!(m, Mark::NotASite) {
        if looks_like_a_site(&block.text) {
            return Err(
                "marked not-a-site, but it starts with a site key: mark it site or site-fragment"
                    .into(),
            );
        }
        return Ok(m);
    }
    let text = substitute(&block.text, used)?;
    let scratch = tempfile::tempdir().unwrap();
    // Where the site is validated: in the scratch directory, alone or
    // where the base site is in the copy of its top folder.
    let path = match &m {
        Mark::Fragment(base) => {
            let rel = base.strip_prefix(repo()).unwrap();
            let top = rel.components().next().unwrap();
            let dest = scratch.path().join(top);
            std::fs::create_dir_all(&dest).unwrap();
            copy_dir(&repo().join(top), &dest);
            scratch.path().join(rel)
        }
        _ => scratch.path().join("site.yaml"),
    };
    for (name, content) in FILES {
        let p = path.parent().unwrap().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    let text = match &m {
        Mark::Whole => text,
        Mark::Fragment(base) => {
            let mut site: Value =
                serde_yaml_ng::from_str(&std::fs::read_to_string(base).unwrap()).unwrap();
            let frag: Value =
                serde_yaml_ng::from_str(&text).map_err(|e| format!("not YAML: {e}\n{text}"))?;
            if !frag.is_mapping() {
                return Err(format!("a fragment is a map of site keys:\n{text}"));
            }
            merge(&mut site, frag);
            serde_yaml_ng::to_string(&site).unwrap()
        }
        Mark::NotASite => unreachable!(),
    };
    site::load_text(&path, &text).map_err(|e| format!("{e}\n--- as validated:\n{text}"))?;
    Ok(m)
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

fn docs() -> Vec<(String, String)> {
    let root = repo();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.sort();
    files.push(root.join("README.md"));
    files
        .into_iter()
        .map(|p| {
            let name = p.strip_prefix(&root).unwrap().display().to_string();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

fn looks_like_a_site(text: &str) -> bool {
    let first = text
        .lines()
        .map(str::trim_end)
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    first.is_some_and(|l| {
        SITE_KEYS
            .iter()
            .any(|k| l.strip_prefix(k).is_some_and(|r| r.starts_with(':')))
    })
}

#[test]
fn every_site_snippet_in_the_docs_validates() {
    let mut used = vec![false; PLACEHOLDERS.len()];
    let mut failures = Vec::new();
    let (mut whole, mut fragments, mut not_sites) = (Vec::new(), Vec::new(), Vec::new());
    for (name, doc) in docs() {
        for b in blocks(&name, &doc) {
            let yaml = matches!(b.info.as_str(), "yaml" | "yml");
            if !yaml {
                if looks_like_a_site(&b.text) {
                    failures.push(format!(
                        "{}: a site snippet in a ```{} fence: make it ```yaml so that it is checked",
                        b.at, b.info
                    ));
                }
                continue;
            }
            match check(&b, &mut used) {
                Ok(Mark::Whole) => whole.push(b.at),
                Ok(Mark::Fragment(_)) => fragments.push(b.at),
                Ok(Mark::NotASite) => not_sites.push(b.at),
                Err(e) => failures.push(format!("{}: {e}", b.at)),
            }
        }
    }
    let unused: Vec<&str> = PLACEHOLDERS
        .iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|((p, _), _)| *p)
        .collect();
    if !unused.is_empty() && failures.is_empty() {
        failures.push(format!(
            "PLACEHOLDERS no snippet uses any more (remove them): {unused:?}"
        ));
    }
    assert!(
        failures.is_empty(),
        "{} snippet problem(s):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    println!(
        "{} whole sites {whole:?}, {} fragments {fragments:?}, {} not sites {not_sites:?}",
        whole.len(),
        fragments.len(),
        not_sites.len()
    );
    // The scan found the docs' snippets, not an empty match.
    assert!(
        whole.len() >= 3 && fragments.len() >= 8 && !not_sites.is_empty(),
        "{whole:?} {fragments:?} {not_sites:?}"
    );
}

#[test]
fn markers_placeholders_and_fences_are_enforced() {
    let doc = "text\n\n```yaml\nvips: { api: 10.77.0.1, ingress: 10.77.0.1 }\n```\n\n<!-- not-a-site: a Kubernetes object -->\n```yaml\nkind: Pod\n```\n\n  ```\n  cluster: { name: x }\n  ```\n";
    let b = blocks("t.md", doc);
    assert_eq!(b.len(), 3);
    assert!(mark(b[0].marker.as_deref()).is_err(), "unmarked");
    assert!(matches!(mark(b[1].marker.as_deref()), Ok(Mark::NotASite)));
    let mut used = vec![false; PLACEHOLDERS.len()];
    assert!(check(&b[1], &mut used).is_ok());
    let hidden = Block {
        at: "t.md:8".into(),
        info: "yaml".into(),
        marker: b[1].marker.clone(),
        text: "vips: { api: 10.77.0.1 }\n".into(),
    };
    assert!(
        check(&hidden, &mut used).is_err(),
        "a site marked not-a-site"
    );
    assert_eq!(b[2].info, "");
    assert!(looks_like_a_site(&b[2].text), "{:?}", b[2].text);
    assert!(mark(Some("<!-- not-a-site: -->")).is_err(), "says what");
    assert!(mark(Some("<!-- site-fragment: merge-into=no/such.yaml -->")).is_err());
    assert!(substitute("a: <no such thing>\n", &mut used).is_err());
    assert!(substitute("a: …\n", &mut used).is_err());
    assert_eq!(
        substitute("a: <bastion IP>\n", &mut used).unwrap(),
        "a: 10.0.0.2\n"
    );
    // A broken fragment fails with the validator's reason.
    let bad = Block {
        at: "t.md:1".into(),
        info: "yaml".into(),
        marker: Some("<!-- site-fragment: merge-into=examples/lab/site.yaml -->".into()),
        text: "vips: { api: 10.77.0.1, ingress: not-an-address }\n".into(),
    };
    let e = check(&bad, &mut used).unwrap_err();
    assert!(e.contains("vips.ingress"), "{e}");
    let mut base: Value = serde_yaml_ng::from_str("a: { b: 1, c: [1] }\nd: 2\n").unwrap();
    merge(
        &mut base,
        serde_yaml_ng::from_str("a: { c: [2], e: 3 }\n").unwrap(),
    );
    assert_eq!(
        base,
        serde_yaml_ng::from_str::<Value>("a: { b: 1, c: [2], e: 3 }\nd: 2\n").unwrap()
    );
}
