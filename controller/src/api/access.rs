//! Who may call which route, and the record of what they did: the scope
//! each route needs ([`needed`]), the gate every request but `/healthz`
//! passes ([`admit`]: the token, then its scope), and the audit line and
//! counter of every write ([`audit`]).
//!
//! Refusals are counted always (`bootd_api_denials_total{reason}`); a 401
//! is logged at most 10 times a second, the next line let through saying
//! how many were left out, so a flood of bad tokens cannot flood the log.

use super::*;
use auth::{Caller, Scope};

/// The scope each route needs (docs/api.md's route table says the same;
/// a test compares them). Any write not listed needs `admin`, so a route
/// added without a line here is refused to every narrower token.
pub(super) fn needed(method: &Method, segs: &[&str]) -> Scope {
    match (method, segs) {
        (&Method::GET | &Method::HEAD, _) => Scope::Read,
        (&Method::POST, ["v1", "nodes"])
        | (&Method::DELETE, ["v1", "nodes", _])
        | (&Method::POST, ["v1", "nodes", _, "reinstall" | "inspect"])
        | (&Method::POST, ["v1", "discovered", _, "adopt"]) => Scope::Nodes,
        (&Method::POST, ["v1", "cluster", "bootstrap-complete" | "destroy"]) => Scope::Cluster,
        _ => Scope::Admin,
    }
}

/// A request that changes something (and is audited).
pub(super) fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// What the gate decided of a request.
pub(super) enum Admit {
    /// Its token is valid and has the scope the route needs.
    Caller(Caller),
    /// The route's name for the metrics, the refusal (401, or 403 naming
    /// the scope) and, for a 403, the caller (its refused write is audited).
    Refused(&'static str, Response<Body>, Option<Caller>),
}

/// The gate every request but `/healthz` passes: the token, then its scope.
pub(super) fn admit(
    ctl: &Controller,
    req: &Request<hyper::body::Incoming>,
    segs: &[&str],
    peer: SocketAddr,
) -> Admit {
    let deny = |reason: &'static str| {
        ctl.metrics
            .denials
            .get_or_create(&bootd::metrics::Reason { reason })
            .inc();
    };
    let caller = match auth::authenticate(req.headers(), &ctl.api.tokens) {
        Ok(c) => c,
        Err(r) => {
            deny(r.as_str());
            static LOGGED: runtime::logging::Throttle = runtime::logging::Throttle::new(10);
            if let Some(suppressed) = LOGGED.allow() {
                let path = req.uri().path();
                warn!(method = %req.method(), path = %path.escape_debug(), %peer, reason = r.as_str(), suppressed, "API request refused");
            }
            return Admit::Refused("unauthorized", unauthorized(), None);
        }
    };
    let need = needed(req.method(), segs);
    if !caller.may(need) {
        deny("scope");
        let r = reply(
            StatusCode::FORBIDDEN,
            &json!({
                "error": format!("forbidden: this request needs a token with scope {}", need.as_str()),
                "scope": need.as_str(),
            }),
        );
        return Admit::Refused("forbidden", r, Some(caller));
    }
    Admit::Caller(caller)
}

/// What a write acted on where its path does not say (the node a create
/// made, the provider a destroy asked): a handler sets it on its response.
#[derive(Debug, Clone)]
pub(super) struct Target(pub String);

/// Sets what the audit line names besides the path.
pub(super) fn with_target(mut r: Response<Body>, target: impl Into<String>) -> Response<Body> {
    r.extensions_mut().insert(Target(target.into()));
    r
}

/// The node a create or adopt names (`"name"` of its body), when it looks
/// like a node's name; nothing else of the body is kept.
pub(super) fn node_name(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named {
        name: String,
    }
    let n = serde_json::from_slice::<Named>(body).ok()?.name;
    plausible(&n).then_some(n)
}

/// `r` naming the node `name` for the audit line, when it looks like one.
pub(super) fn with_node(r: Response<Body>, name: Option<&str>) -> Response<Body> {
    match name.filter(|n| plausible(n)) {
        Some(n) => with_target(r, n),
        None => r,
    }
}

fn plausible(name: &str) -> bool {
    (1..=253).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
}

/// One line per write, for a person to grep, and its counter:
/// `audit: token=ops-1 POST /v1/nodes worker-3 -> 201`. The token's name,
/// never its value; never the body.
pub(super) fn audit(
    ctl: &Controller,
    caller: &Caller,
    method: &Method,
    path: &str,
    peer: SocketAddr,
    resp: &Response<Body>,
) {
    let status = resp.status();
    let outcome = match status.as_u16() {
        403 => "forbidden",
        400..=499 => "refused",
        500..=599 => "failed",
        _ => "ok",
    };
    ctl.metrics
        .writes
        .get_or_create(&crate::metrics::TokenOutcome {
            token: caller.name().to_string(),
            outcome,
        })
        .inc();
    let target = resp
        .extensions()
        .get::<Target>()
        .map(|t| format!(" {}", t.0.escape_debug()))
        .unwrap_or_default();
    info!(target: "audit", %peer, "token={} {method} {}{target} -> {}", caller.name(), path.escape_debug(), status.as_u16());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of docs/api.md's route table names the scope [`needed`] gives.
    #[test]
    fn the_route_table_in_the_docs_says_each_routes_scope() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md"),
        )
        .unwrap();
        let mut rows = 0;
        for line in doc.lines().filter(|l| {
            l.starts_with("| GET |") || l.starts_with("| POST |") || l.starts_with("| DELETE |")
        }) {
            let cells: Vec<&str> = line.split(" | ").collect();
            let method: Method = cells[0].trim_start_matches("| ").parse().unwrap();
            let path = cells[1].split('`').nth(1).unwrap();
            let path = path.split(['?', '[']).next().unwrap();
            let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            let scope = cells[2].trim();
            if path == "/healthz" {
                assert_eq!(scope, "none", "{line}");
                continue;
            }
            assert_eq!(scope, needed(&method, &segs).as_str(), "{line}");
            rows += 1;
        }
        assert_eq!(rows, 16, "every route but /healthz");
    }

    #[test]
    fn writes_no_line_names_need_admin() {
        for (m, p) in [
            (Method::PUT, "v1/nodes"),
            (Method::PATCH, "v1/nodes/x"),
            (Method::POST, "v1/cluster"),
            (Method::DELETE, "v1/cluster/machines"),
            (Method::POST, "v1/nosuch"),
        ] {
            let segs: Vec<&str> = p.split('/').collect();
            assert_eq!(needed(&m, &segs), Scope::Admin, "{m} {p}");
        }
    }
}
