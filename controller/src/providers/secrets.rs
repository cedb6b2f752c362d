//! Secrets the providers use: read from where the site says (never stored
//! in it), and removed from any text that leaves the process.

use site::{Secret, SecretRef};

/// Reads a secret named in the site. The error names the file, never its content.
pub fn read_secret(r: &SecretRef) -> std::result::Result<Secret<String>, String> {
    let path = match r {
        SecretRef::File(p) => p.clone(),
        SecretRef::Env(var) => {
            return match std::env::var(var) {
                Ok(s) if !s.trim().is_empty() => Ok(Secret(s.trim().to_string())),
                Ok(_) => Err(format!("environment variable {var} is empty")),
                Err(_) => Err(format!("environment variable {var} is not set")),
            }
        }
        SecretRef::Credential(name) => match std::env::var_os("CREDENTIALS_DIRECTORY") {
            Some(d) => std::path::Path::new(&d).join(name),
            None => return Err(format!("systemd credential {name:?}: $CREDENTIALS_DIRECTORY is not set (LoadCredential= in the unit)")),
        },
    };
    match std::fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => Ok(Secret(s.trim().to_string())),
        Ok(_) => Err(format!("{} is empty", path.display())),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// `text` with every secret and every `token=` value replaced, and every
/// run of base64 whose decoding holds one of them: a provider that echoes
/// the request in its error echoes the user data, base64 (Power VS), with
/// the pointer config's Ignition token inside.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    let mut t = text.to_string();
    for s in secrets.iter().filter(|s| s.len() >= 4) {
        t = t.replace(s, "<redacted>");
    }
    let t = bootd::token::redact_tokens(&t, "<redacted>");
    redact_base64(&t, secrets)
}

fn redact_base64(text: &str, secrets: &[&str]) -> String {
    let in_run = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=' | '-' | '_');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(in_run) {
        out.push_str(&rest[..start]);
        let run = &rest[start..];
        let run = &run[..run.find(|c| !in_run(c)).unwrap_or(run.len())];
        if run.len() >= 16 && decodes_to_secret(run, secrets) {
            out.push_str("<redacted>");
        } else {
            out.push_str(run);
        }
        rest = &rest[start + run.len()..];
    }
    out.push_str(rest);
    out
}

/// Standard or URL-safe, padded or not, cut short by a truncated reply or
/// starting mid-group: each of the four alignments of the whole groups.
fn decodes_to_secret(run: &str, secrets: &[&str]) -> bool {
    use base64::Engine as _;
    let run: String = run
        .trim_end_matches('=')
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    (0..4).any(|skip| {
        let Some(s) = run.get(skip..) else {
            return false;
        };
        let whole = &s[..s.len() / 4 * 4];
        let Ok(bytes) = base64::engine::general_purpose::STANDARD_NO_PAD.decode(whole) else {
            return false;
        };
        let holds = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
        holds(b"token=") || secrets.iter().any(|s| s.len() >= 4 && holds(s.as_bytes()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    #[test]
    fn base64_holding_a_token_or_a_secret_is_redacted_even_cut_short() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let pointer = r#"{"ignition":{"config":{"merge":[{"source":"https://h/ignition/n?token=1.p.abc.def"}]}}}"#;
        let echo = format!(
            r#"{{"description":"you sent: {{\"userData\":\"{}\"}}"}}"#,
            b64(pointer)
        );
        let r = redact(&echo, &[]);
        assert!(!r.contains(&b64(pointer)[..40]), "{r}");
        assert!(r.contains("<redacted>"), "{r}");
        // Cut short (a reply logged up to 2 KiB) and off the group boundary.
        let cut = &b64(pointer)[5..110];
        assert_eq!(redact(&format!("x {cut} y"), &[]), "x <redacted> y");
        // A secret, URL-safe.
        let key = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("the key is sekrit-123!");
        assert_eq!(redact(&format!("[{key}]"), &["sekrit-123"]), "[<redacted>]");
        // Anything else stays: paths, ids, base64 without a secret.
        let plain = format!(
            "/pcloud/v1/cloud-instances/ws-1/pvm-instances {} 0aa1bb2c-workspace",
            b64("harmless bytes here")
        );
        assert_eq!(redact(&plain, &["sekrit-123"]), plain);
    }
}
