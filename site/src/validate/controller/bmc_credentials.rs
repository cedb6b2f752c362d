//! `host.api.bmcCredentials`: each entry's password reference (or
//! prefix) and the BMC origins it may be sent to.

use super::super::Cx;
use crate::model::{env_name_ok, BmcCredential, BmcOrigin, BmcScheme, PasswordPattern};
use crate::wire;
use std::path::{Component, Path};

/// A BMC credential's name and variable start with these (the
/// controller's `providers::bmc`): an entry for another name binds nothing.
const CREDENTIAL_PREFIX: &str = "bmc-";
const ENV_PREFIX: &str = "BOOTD_BMC_";

pub(in super::super) fn bmc_credentials(
    cx: &mut Cx,
    w: &wire::Api,
    bmc_files: Option<&Path>,
) -> Option<Vec<BmcCredential>> {
    let list = w.bmc_credentials.as_ref()?;
    if !list.is_empty() && w.redfish.is_none() && w.ipmi.is_none() {
        cx.err(
            "host.api.bmcCredentials",
            "binds BMC passwords, but neither host.api.redfish nor host.api.ipmi is set",
        );
    }
    let mut out = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let key = format!("host.api.bmcCredentials[{i}]");
        let password = pattern(
            cx,
            &format!("{key}.password"),
            e.password.as_ref(),
            bmc_files,
        );
        if e.origins.is_empty() {
            cx.err(
                format!("{key}.origins"),
                "required: the BMC origins this password may be sent to (https://10.1.0.0/24, ipmi://bmc-r1.example, …)",
            );
        }
        let mut origins = Vec::new();
        for (j, o) in e.origins.iter().enumerate() {
            match BmcOrigin::parse(o) {
                Ok(o) => origins.push(o),
                Err(why) => cx.err(format!("{key}.origins[{j}]"), format!("{o:?}: {why}")),
            }
        }
        let has = |s: BmcScheme| origins.iter().any(|o| o.scheme == s);
        if has(BmcScheme::Http) && !e.allow_plain_http {
            cx.err(
                format!("{key}.origins"),
                "an http:// origin sends the password in clear: set allowPlainHttp: true in this entry to mean it",
            );
        }
        if e.allow_plain_http && !has(BmcScheme::Http) && !origins.is_empty() {
            cx.err(
                format!("{key}.allowPlainHttp"),
                "allows nothing: the entry has no http:// origin",
            );
        }
        if e.insecure_skip_verify && !has(BmcScheme::Https) && !origins.is_empty() {
            cx.err(
                format!("{key}.insecureSkipVerify"),
                "allows nothing: the entry has no https:// origin",
            );
        }
        if let Some(password) = password {
            out.push(BmcCredential {
                password,
                origins,
                allow_plain_http: e.allow_plain_http,
                insecure_skip_verify: e.insecure_skip_verify,
            });
        }
    }
    Some(out)
}

fn pattern(
    cx: &mut Cx,
    key: &str,
    w: Option<&wire::SecretRef>,
    bmc_files: Option<&Path>,
) -> Option<PasswordPattern> {
    let Some(w) = w else {
        cx.err(key, "required: {file: PATH}, {file: DIR/*}, {credential: bmc-NAME[*]} or {env: BOOTD_BMC_NAME[*]}");
        return None;
    };
    let prefix = |s: &str| s.strip_suffix('*').map(str::to_string);
    match (&w.file, &w.credential, &w.env) {
        (Some(f), None, None) => {
            let s = f.to_string_lossy();
            let (p, under) = match s.strip_suffix("/*") {
                Some(d) => (cx.resolve(Path::new(d)), true),
                None => (cx.resolve(f), false),
            };
            if p.to_string_lossy().contains('*') {
                cx.err(
                    format!("{key}.file"),
                    format!("{s:?}: * only as the last component (DIR/*)"),
                );
                return None;
            }
            if p.components().any(|c| matches!(c, Component::ParentDir)) {
                cx.err(format!("{key}.file"), format!("{s:?}: no .."));
                return None;
            }
            if let Some(d) = bmc_files.filter(|d| !p.starts_with(d)) {
                cx.err(
                    format!("{key}.file"),
                    format!(
                        "{s:?} is not in host.api.bmcFiles ({}): no node can name it",
                        d.display()
                    ),
                );
                return None;
            }
            Some(if under {
                PasswordPattern::FilesUnder(p)
            } else {
                PasswordPattern::File(p)
            })
        }
        (None, Some(c), None) => {
            let name = prefix(c).unwrap_or_else(|| c.clone());
            if !name.starts_with(CREDENTIAL_PREFIX) || name.contains(['/', '*']) || name.len() > 128
            {
                cx.err(
                    format!("{key}.credential"),
                    format!("{c:?}: a BMC credential's name starts with {CREDENTIAL_PREFIX:?} (a trailing * for every one it begins)"),
                );
                return None;
            }
            Some(match prefix(c) {
                Some(p) => PasswordPattern::CredentialPrefix(p),
                None => PasswordPattern::Credential(c.clone()),
            })
        }
        (None, None, Some(v)) => {
            let name = prefix(v).unwrap_or_else(|| v.clone());
            if !name.starts_with(ENV_PREFIX) || !env_name_ok(&name) {
                cx.err(
                    format!("{key}.env"),
                    format!("{v:?}: a BMC password's variable starts with {ENV_PREFIX} (a trailing * for every one it begins)"),
                );
                return None;
            }
            Some(match prefix(v) {
                Some(p) => PasswordPattern::EnvPrefix(p),
                None => PasswordPattern::Env(v.clone()),
            })
        }
        _ => {
            cx.err(key, "give exactly one of file, credential, env");
            None
        }
    }
}
