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

/// `text` with every secret and every `token=` value replaced.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    let mut t = text.to_string();
    for s in secrets.iter().filter(|s| s.len() >= 4) {
        t = t.replace(s, "<redacted>");
    }
    bootd::token::redact_tokens(&t, "<redacted>")
}
