//! Bearer tokens for the controller API: who a caller is (the token's
//! name) and what it may do (its scopes).
//!
//! The token file (`host.api.tokens`: a file, a systemd credential or an
//! environment variable) has one token per line; blank lines and `#`
//! comments are ignored. A line is either
//! - `name:scope[,scope]:token`: a named token with those scopes, or
//! - a bare token (a line without `:`): scope `admin`, named `token-N`
//!   for the Nth bare token of the file.
//!
//! Scopes nest: `read` (every GET) < `nodes` (node writes) < `cluster`
//! (bootstrap-complete, destroy) < `admin` (every route); a token may do
//! what any scope it lists includes.
//!
//! The file is re-read on every request, so a rewritten file takes effect
//! at once. A file with any problem is refused as a whole (every request
//! gets 401 until it is fixed), never half applied: a typo must not leave a
//! revoked token working. Problems name the file, the line and the reason,
//! never a token. Comparison is in constant time: both sides are hashed
//! (equal lengths) and every configured token is compared, with no early
//! exit. A refusal never tells the caller why.

use sha2::{Digest, Sha256};
use site::{Secret, SecretRef};
use std::sync::Arc;
use subtle::{ConditionallySelectable, ConstantTimeEq};

/// What a route needs and a token may have; each includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Every GET: nodes, events, timelines, inventories, discovered
    /// machines, the cluster, its machines, the status pages.
    Read,
    /// Create, delete, reinstall and inspect nodes; adopt discovered machines.
    Nodes,
    /// Bootstrap-complete and destroy: the cluster as a whole.
    Cluster,
    /// Every route, including writes no narrower scope names.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Read, Scope::Nodes, Scope::Cluster, Scope::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Nodes => "nodes",
            Scope::Cluster => "cluster",
            Scope::Admin => "admin",
        }
    }

    fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// The scopes a token's line lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scopes(u8);

impl Scopes {
    fn of(list: &[Scope]) -> Scopes {
        Scopes(list.iter().fold(0, |m, s| m | 1 << *s as u8))
    }

    /// Whether one of them includes `need`.
    pub fn allow(self, need: Scope) -> bool {
        Scope::ALL
            .into_iter()
            .any(|s| self.0 & (1 << s as u8) != 0 && s >= need)
    }
}

/// One line of the token file. Its `Debug` does not show the value.
#[derive(Debug, Clone)]
pub struct Token {
    pub name: Arc<str>,
    pub scopes: Scopes,
    /// Its line in the file (from 1).
    pub line: usize,
    /// A line with the token only (scope `admin`, named `token-N`).
    pub bare: bool,
    value: Secret<String>,
}

impl Token {
    pub fn value(&self) -> &str {
        self.value.expose()
    }
}

/// The caller a request's token names; handlers take it as a parameter.
#[derive(Debug, Clone)]
pub struct Caller {
    name: Arc<str>,
    scopes: Scopes,
}

impl Caller {
    /// The token's name: what the audit log says (never its value).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn may(&self, need: Scope) -> bool {
        self.scopes.allow(need)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No `Authorization: Bearer` header.
    Missing,
    /// A token that matches none.
    Wrong,
    /// The token file cannot be read (nobody gets in; logged).
    Unavailable,
    /// The token file has problems (nobody gets in; logged).
    Invalid,
}

impl Refused {
    pub fn as_str(&self) -> &'static str {
        match self {
            Refused::Missing => "missing",
            Refused::Wrong => "wrong",
            Refused::Unavailable => "tokens_unavailable",
            Refused::Invalid => "tokens_invalid",
        }
    }
}

/// Why the token file gives no tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileError {
    /// It cannot be read: the reason, with its path.
    Unreadable(String),
    /// Every problem, each `<file>:<line>: <reason>`.
    Invalid(Vec<String>),
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileError::Unreadable(why) => f.write_str(why),
            FileError::Invalid(problems) => f.write_str(&problems.join("; ")),
        }
    }
}

/// The file's text, untrimmed (lines counted as an editor does), and the
/// name problems give it.
fn read(r: &SecretRef) -> Result<(String, Secret<String>), String> {
    let path = match r {
        SecretRef::File(p) => p.clone(),
        SecretRef::Env(var) => {
            return std::env::var(var)
                .map(|v| (format!("${var}"), Secret(v)))
                .map_err(|_| format!("environment variable {var} is not set"));
        }
        SecretRef::Credential(name) => match std::env::var_os("CREDENTIALS_DIRECTORY") {
            Some(d) => std::path::Path::new(&d).join(name),
            None => return Err(format!("systemd credential {name:?}: $CREDENTIALS_DIRECTORY is not set (LoadCredential= in the unit)")),
        },
    };
    std::fs::read_to_string(&path)
        .map(|t| (path.display().to_string(), Secret(t)))
        .map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Reads and parses the token file.
pub fn load(r: &SecretRef) -> Result<Vec<Token>, FileError> {
    let (origin, text) = read(r).map_err(FileError::Unreadable)?;
    parse(&origin, text.expose()).map_err(FileError::Invalid)
}

/// The first token of the file (the command-line client's).
pub fn first(r: &SecretRef) -> Result<Token, String> {
    load(r)
        .map_err(|e| e.to_string())?
        .into_iter()
        .next()
        .ok_or_else(|| "the token file has no token".to_string())
}

fn name_ok(n: &str) -> bool {
    (1..=64).contains(&n.len())
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The tokens of `text`, or every problem (`<origin>:<line>: <reason>`).
/// No message quotes the text of a line: a line that does not parse may be
/// a token with `:` in it.
pub fn parse(origin: &str, text: &str) -> Result<Vec<Token>, Vec<String>> {
    let mut tokens: Vec<Token> = Vec::new();
    let mut problems = Vec::new();
    let mut bare = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let mut bad = |why: &str| problems.push(format!("{origin}:{line}: {why}"));
        let token = if !l.contains(':') {
            bare += 1;
            Token {
                name: format!("token-{bare}").into(),
                scopes: Scopes::of(&[Scope::Admin]),
                line,
                bare: true,
                value: Secret(l.to_string()),
            }
        } else {
            let parts: Vec<&str> = l.splitn(3, ':').map(str::trim).collect();
            let [name, scopes, value] = parts[..] else {
                bad("neither a bare token (a line without ':') nor name:scope[,scope]:token");
                continue;
            };
            let mut ok = true;
            if !name_ok(name) {
                bad("the name must be 1 to 64 letters, digits, '.', '_' or '-'");
                ok = false;
            }
            let list: Vec<Option<Scope>> =
                scopes.split(',').map(str::trim).map(Scope::parse).collect();
            if list.iter().any(Option::is_none) {
                bad("unknown or empty scope: each is read, nodes, cluster or admin, separated by ','");
                ok = false;
            }
            if value.is_empty() {
                bad("no token after the second ':'");
                ok = false;
            }
            if !ok {
                continue;
            }
            Token {
                name: name.into(),
                scopes: Scopes::of(&list.into_iter().flatten().collect::<Vec<_>>()),
                line,
                bare: false,
                value: Secret(value.to_string()),
            }
        };
        if let Some(t) = tokens.iter().find(|t| t.name == token.name) {
            bad(&format!(
                "the name {:?} is also the name of line {}{}",
                &*token.name,
                t.line,
                if t.bare || token.bare {
                    " (a bare token is named token-N, N counting the bare tokens)"
                } else {
                    ""
                }
            ));
        }
        if let Some(t) = tokens.iter().find(|t| t.value() == token.value()) {
            bad(&format!("the same token as line {}", t.line));
        }
        tokens.push(token);
    }
    if tokens.is_empty() && problems.is_empty() {
        problems.push(format!(
            "{origin}: no token (every request would be refused)"
        ));
    }
    if problems.is_empty() {
        Ok(tokens)
    } else {
        Err(problems)
    }
}

/// What `bootd --check-config` says of the token file: its problems (the
/// site fails the check), and warnings.
pub fn check(r: &SecretRef) -> (Vec<String>, Vec<String>) {
    let (origin, text) = match read(r) {
        Ok(x) => x,
        Err(why) => {
            return (
                Vec::new(),
                vec![format!("host.api.tokens: not checked: {why}")],
            )
        }
    };
    match parse(&origin, text.expose()) {
        Ok(tokens) => {
            let warnings = tokens
                .iter()
                .filter(|t| t.bare)
                .map(|t| {
                    format!(
                        "host.api.tokens: {origin}:{}: a bare token ({}) has every scope (admin): give it a name and only the scopes it needs (name:scope[,scope]:token)",
                        t.line, t.name
                    )
                })
                .collect();
            (Vec::new(), warnings)
        }
        Err(problems) => (problems, Vec::new()),
    }
}

/// Checks `Authorization: Bearer <token>` against the configured tokens.
/// An unreadable or invalid file is logged (at most once a second, with
/// the count of the lines left out), never with a token.
pub fn authenticate(headers: &http::HeaderMap, configured: &SecretRef) -> Result<Caller, Refused> {
    let presented = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or(Refused::Missing)?;
    let list = load(configured).map_err(|e| {
        static LOGGED: runtime::logging::Throttle = runtime::logging::Throttle::new(1);
        if let Some(suppressed) = LOGGED.allow() {
            tracing::error!(error = %e, suppressed, "API tokens unusable: every request is refused");
        }
        match e {
            FileError::Unreadable(_) => Refused::Unavailable,
            FileError::Invalid(_) => Refused::Invalid,
        }
    })?;
    match find(presented.as_bytes(), &list) {
        Some(t) => Ok(Caller {
            name: Arc::clone(&t.name),
            scopes: t.scopes,
        }),
        None => Err(Refused::Wrong),
    }
}

/// The token `presented` is, comparing with every one (no early exit).
fn find<'a>(presented: &[u8], list: &'a [Token]) -> Option<&'a Token> {
    let p = Sha256::digest(presented);
    let mut found = subtle::Choice::from(0u8);
    let mut at = 0u64;
    for (i, t) in list.iter().enumerate() {
        let eq = Sha256::digest(t.value().as_bytes()).ct_eq(&p);
        at.conditional_assign(&(i as u64), eq);
        found |= eq;
    }
    bool::from(found).then(|| &list[at as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: Option<&str>) -> http::HeaderMap {
        let mut m = http::HeaderMap::new();
        if let Some(v) = v {
            m.insert(http::header::AUTHORIZATION, v.parse().unwrap());
        }
        m
    }

    #[test]
    fn bare_tokens_are_admin_and_named_by_their_rank() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "# operators\nalpha-token\n\n  beta-token  \n").unwrap();
        let r = SecretRef::File(f.clone());
        let a = authenticate(&h(Some("Bearer alpha-token")), &r).unwrap();
        assert_eq!(a.name(), "token-1");
        assert!(Scope::ALL.into_iter().all(|s| a.may(s)));
        let b = authenticate(&h(Some("Bearer beta-token")), &r).unwrap();
        assert_eq!(b.name(), "token-2");
        assert_eq!(authenticate(&h(None), &r).unwrap_err(), Refused::Missing);
        assert_eq!(
            authenticate(&h(Some("Basic YWxwaGE=")), &r).unwrap_err(),
            Refused::Missing
        );
        assert_eq!(
            authenticate(&h(Some("Bearer alpha")), &r).unwrap_err(),
            Refused::Wrong
        );
        assert_eq!(
            authenticate(&h(Some("Bearer # operators")), &r).unwrap_err(),
            Refused::Wrong
        );
        std::fs::remove_file(&f).unwrap();
        assert_eq!(
            authenticate(&h(Some("Bearer alpha-token")), &r).unwrap_err(),
            Refused::Unavailable
        );
    }

    #[test]
    fn named_tokens_have_their_scopes_and_what_those_include() {
        let t = parse(
            "f",
            "admin-token\nviewer:read:r-1\nops-1:nodes:n-1\nrel: cluster :c-1:with:colons\nboth:read,nodes:rn-1\n",
        )
        .unwrap();
        let by = |v: &str| t.iter().find(|t| t.value() == v).unwrap();
        let may = |v: &str| -> Vec<&str> {
            Scope::ALL
                .into_iter()
                .filter(|s| by(v).scopes.allow(*s))
                .map(Scope::as_str)
                .collect()
        };
        assert_eq!(may("admin-token"), ["read", "nodes", "cluster", "admin"]);
        assert_eq!(may("r-1"), ["read"]);
        assert_eq!(may("n-1"), ["read", "nodes"]);
        assert_eq!(may("c-1:with:colons"), ["read", "nodes", "cluster"]);
        assert_eq!(&*by("c-1:with:colons").name, "rel");
        assert_eq!(may("rn-1"), ["read", "nodes"]);
        assert_eq!(by("rn-1").line, 5);
        assert!(by("admin-token").bare && !by("r-1").bare);
    }

    #[test]
    fn every_problem_at_once_with_its_line_and_never_the_token() {
        let text = "# tokens\n\nok:read:secret-ok\nbad name:read:secret-1\nx:reed:secret-2\ny::secret-3\nz:read:\nonly:secret-4\nok:nodes:secret-5\nw:read:secret-ok\ntoken-1:read:secret-6\nsecret-7\n";
        let p = parse("/etc/bootd/api-tokens", text).unwrap_err();
        assert_eq!(
            p,
            [
                "/etc/bootd/api-tokens:4: the name must be 1 to 64 letters, digits, '.', '_' or '-'",
                "/etc/bootd/api-tokens:5: unknown or empty scope: each is read, nodes, cluster or admin, separated by ','",
                "/etc/bootd/api-tokens:6: unknown or empty scope: each is read, nodes, cluster or admin, separated by ','",
                "/etc/bootd/api-tokens:7: no token after the second ':'",
                "/etc/bootd/api-tokens:8: neither a bare token (a line without ':') nor name:scope[,scope]:token",
                "/etc/bootd/api-tokens:9: the name \"ok\" is also the name of line 3",
                "/etc/bootd/api-tokens:10: the same token as line 3",
                "/etc/bootd/api-tokens:12: the name \"token-1\" is also the name of line 11 (a bare token is named token-N, N counting the bare tokens)",
            ]
        );
        for p in &p {
            assert!(!p.contains("secret"), "{p}");
        }
        assert_eq!(
            parse("f", "# none\n\n").unwrap_err(),
            ["f: no token (every request would be refused)"]
        );
    }

    #[test]
    fn a_file_with_a_problem_lets_nobody_in() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "good-token\nx:reed:other\n").unwrap();
        let r = SecretRef::File(f);
        assert_eq!(
            authenticate(&h(Some("Bearer good-token")), &r).unwrap_err(),
            Refused::Invalid
        );
    }

    #[test]
    fn check_config_warns_of_bare_tokens_and_lists_problems() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "ops:nodes:n-1\nbare-one\n").unwrap();
        let (problems, warnings) = check(&SecretRef::File(f.clone()));
        assert!(problems.is_empty());
        assert_eq!(warnings, [format!("host.api.tokens: {}:2: a bare token (token-1) has every scope (admin): give it a name and only the scopes it needs (name:scope[,scope]:token)", f.display())]);
        std::fs::write(&f, "ops:nodes:n-1\nops:read:n-2\n").unwrap();
        let (problems, _) = check(&SecretRef::File(f.clone()));
        assert_eq!(problems.len(), 1, "{problems:?}");
        let (problems, warnings) = check(&SecretRef::Credential("nosuch".into()));
        assert!(problems.is_empty());
        assert!(
            warnings[0].starts_with("host.api.tokens: not checked: "),
            "{warnings:?}"
        );
    }
}
