//! An OpenAPI 3 document as a request checker for fakes: does a request's
//! path match one of its path templates, is the method one the path has,
//! is every query parameter declared (and of its type), is the body what
//! the operation takes; and a small JSON Schema checker over the
//! document's components (`$ref`, `type`, `required`, `properties`,
//! `additionalProperties`, `items`, `enum`, `format` `byte`, `date-time`
//! and `int32`/`int64`).
//!
//! Stricter than OpenAPI on one point, as the Kubernetes API server is with
//! `fieldValidation=Strict`: an object whose schema lists `properties`
//! and no `additionalProperties` may have no other key. A keyword the
//! checker does not know (`allOf`, `oneOf`, `anyOf`, `not`) is a problem,
//! never a silent pass.

use base64::Engine;
use serde_json::Value;
use std::path::Path;

/// A loaded OpenAPI document.
#[derive(Debug)]
pub struct Spec {
    doc: Value,
}

/// The operation a request matched: its path template and definition.
#[derive(Debug)]
pub struct Matched<'a> {
    pub template: &'a str,
    pub operation: &'a Value,
}

impl Spec {
    pub fn load(path: &Path) -> Spec {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Spec {
            doc: serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        }
    }

    pub fn from_value(doc: Value) -> Spec {
        Spec { doc }
    }

    /// The operation for `method` on `path` (no query), or why there is none.
    pub fn operation(&self, method: &str, path: &str) -> Result<Matched<'_>, String> {
        let segs: Vec<&str> = path.split('/').collect();
        let paths = self.doc["paths"]
            .as_object()
            .ok_or("the document has no paths")?;
        // A literal segment wins over a template (`watch` over `{name}`).
        let mut best: Option<(&str, &Value, usize)> = None;
        for (template, item) in paths {
            let t: Vec<&str> = template.split('/').collect();
            if t.len() != segs.len() {
                continue;
            }
            let mut literal = 0;
            let fits = t.iter().zip(&segs).all(|(a, b)| {
                if a.starts_with('{') && a.ends_with('}') {
                    !b.is_empty()
                } else {
                    literal += 1;
                    a == b
                }
            });
            if fits && best.is_none_or(|(_, _, l)| literal > l) {
                best = Some((template, item, literal));
            }
        }
        let (template, item, _) = best.ok_or_else(|| format!("no path template matches {path}"))?;
        let operation = item
            .get(method.to_ascii_lowercase())
            .ok_or_else(|| format!("{method} is not an operation of {template}"))?;
        Ok(Matched {
            template,
            operation,
        })
    }

    /// Checks one request; every problem found.
    pub fn check_request(
        &self,
        method: &str,
        path: &str,
        query: Option<&str>,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Vec<String> {
        let m = match self.operation(method, path) {
            Ok(m) => m,
            Err(e) => return vec![e],
        };
        let mut out = Vec::new();
        let item = &self.doc["paths"][m.template];
        let params: Vec<&Value> = item["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(m.operation["parameters"].as_array().into_iter().flatten())
            .collect();
        let given: Vec<(String, String)> = query
            .unwrap_or_default()
            .split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                let dec = |s: &str| {
                    percent_encoding::percent_decode_str(s)
                        .decode_utf8_lossy()
                        .into_owned()
                };
                (dec(k), dec(v))
            })
            .collect();
        for (k, v) in &given {
            let Some(p) = params
                .iter()
                .find(|p| p["in"] == "query" && p["name"] == k.as_str())
            else {
                out.push(format!(
                    "{method} {}: query parameter {k:?} is not declared",
                    m.template
                ));
                continue;
            };
            let ok = match p["schema"]["type"].as_str() {
                Some("boolean") => v == "true" || v == "false",
                Some("integer") => v.parse::<i64>().is_ok(),
                _ => true,
            };
            if !ok {
                out.push(format!(
                    "{method} {}: query parameter {k}={v:?} is not a {}",
                    m.template, p["schema"]["type"]
                ));
            }
        }
        for p in params
            .iter()
            .filter(|p| p["in"] == "query" && p["required"] == true)
        {
            let name = p["name"].as_str().unwrap_or_default();
            if !given.iter().any(|(k, _)| k == name) {
                out.push(format!(
                    "{method} {}: required query parameter {name} missing",
                    m.template
                ));
            }
        }
        let schema = &m.operation["requestBody"]["content"]["application/json"]["schema"];
        match (schema.is_null(), body.is_empty()) {
            (true, true) => {}
            (true, false) => out.push(format!("{method} {}: takes no body", m.template)),
            (false, true) => out.push(format!("{method} {}: a body is required", m.template)),
            (false, false) => {
                if content_type.is_none_or(|c| !c.starts_with("application/json")) {
                    out.push(format!(
                        "{method} {}: Content-Type {content_type:?}, not application/json",
                        m.template
                    ));
                }
                match serde_json::from_slice::<Value>(body) {
                    Ok(v) => self.validate(schema, &v, "body", &mut out),
                    Err(e) => out.push(format!("{method} {}: body is not JSON: {e}", m.template)),
                }
            }
        }
        out
    }

    /// Checks a reply body against the operation's schema for `status`.
    pub fn check_reply(&self, method: &str, path: &str, status: u16, body: &Value) -> Vec<String> {
        let m = match self.operation(method, path) {
            Ok(m) => m,
            Err(e) => return vec![e],
        };
        let schema =
            &m.operation["responses"][status.to_string()]["content"]["application/json"]["schema"];
        if schema.is_null() {
            return vec![format!(
                "{method} {}: no {status} reply in the document",
                m.template
            )];
        }
        let mut out = Vec::new();
        self.validate(schema, body, "reply", &mut out);
        out
    }

    /// The component schema `#/components/schemas/<name>`.
    pub fn schema(&self, name: &str) -> &Value {
        &self.doc["components"]["schemas"][name]
    }

    /// Every way `v` differs from `schema`, each with its place (`at`).
    pub fn validate(&self, schema: &Value, v: &Value, at: &str, out: &mut Vec<String>) {
        if let Some(r) = schema["$ref"].as_str() {
            match r.strip_prefix("#/components/schemas/") {
                Some(name) if self.schema(name).is_object() => {
                    return self.validate(self.schema(name), v, at, out)
                }
                _ => return out.push(format!("{at}: $ref {r} does not resolve")),
            }
        }
        for k in ["allOf", "oneOf", "anyOf", "not"] {
            if schema.get(k).is_some() {
                return out.push(format!("{at}: the checker does not know {k}"));
            }
        }
        if let Some(e) = schema["enum"].as_array() {
            if !e.contains(v) {
                out.push(format!(
                    "{at}: {v} is not one of {}",
                    Value::Array(e.clone())
                ));
            }
        }
        let Some(t) = schema["type"].as_str() else {
            return;
        };
        match t {
            "object" => {
                let Some(o) = v.as_object() else {
                    return out.push(format!("{at}: not an object"));
                };
                for r in schema["required"].as_array().into_iter().flatten() {
                    let r = r.as_str().unwrap_or_default();
                    if !o.contains_key(r) {
                        out.push(format!("{at}.{r}: required"));
                    }
                }
                let props = schema["properties"].as_object();
                for (k, val) in o {
                    let at = format!("{at}.{k}");
                    match (
                        props.and_then(|p| p.get(k)),
                        schema.get("additionalProperties"),
                    ) {
                        (Some(s), _) => self.validate(s, val, &at, out),
                        (None, Some(s)) if s.is_object() => self.validate(s, val, &at, out),
                        (None, Some(Value::Bool(true))) => {}
                        (None, _) if props.is_some() => out.push(format!("{at}: unknown field")),
                        (None, _) => {}
                    }
                }
            }
            "array" => match v.as_array() {
                Some(a) => {
                    for (i, x) in a.iter().enumerate() {
                        self.validate(&schema["items"], x, &format!("{at}[{i}]"), out);
                    }
                }
                None => out.push(format!("{at}: not an array")),
            },
            "string" => match v.as_str() {
                None => out.push(format!("{at}: not a string")),
                Some(s) => match schema["format"].as_str() {
                    Some("byte")
                        if base64::engine::general_purpose::STANDARD.decode(s).is_err() =>
                    {
                        out.push(format!("{at}: not base64 (format byte)"))
                    }
                    Some("date-time") if !date_time(s) => {
                        out.push(format!("{at}: {s:?} is not an RFC 3339 date-time"))
                    }
                    _ => {}
                },
            },
            "integer" => {
                let ok = match (v.as_i64(), schema["format"].as_str()) {
                    (Some(i), Some("int32")) => i32::try_from(i).is_ok(),
                    (Some(_), _) => true,
                    (None, _) => v.as_u64().is_some() && schema["format"] != "int32",
                };
                if !ok {
                    out.push(format!(
                        "{at}: {v} is not an integer of format {}",
                        schema["format"]
                    ));
                }
            }
            "number" if !v.is_number() => out.push(format!("{at}: not a number")),
            "boolean" if !v.is_boolean() => out.push(format!("{at}: not a boolean")),
            "number" | "boolean" => {}
            other => out.push(format!("{at}: the checker does not know type {other}")),
        }
    }
}

/// `2006-01-02T15:04:05Z`, with optional fraction and a `Z` or `±hh:mm` offset.
fn date_time(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    if b.len() < 20
        || !digits(0..4)
        || b[4] != b'-'
        || !digits(5..7)
        || b[7] != b'-'
        || !digits(8..10)
        || (b[10] != b'T' && b[10] != b't')
        || !digits(11..13)
        || b[13] != b':'
        || !digits(14..16)
        || b[16] != b':'
        || !digits(17..19)
    {
        return false;
    }
    let mut rest = &s[19..];
    if let Some(f) = rest.strip_prefix('.') {
        let n = f.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &f[n..];
    }
    rest == "Z"
        || rest == "z"
        || (rest.len() == 6
            && (rest.starts_with('+') || rest.starts_with('-'))
            && rest.as_bytes()[3] == b':'
            && rest[1..3]
                .bytes()
                .chain(rest[4..].bytes())
                .all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec() -> Spec {
        Spec::from_value(json!({
            "paths": {
                "/things": { "get": { "parameters": [
                    { "in": "query", "name": "limit", "schema": { "type": "integer" } },
                    { "in": "query", "name": "watch", "schema": { "type": "boolean" } } ] } },
                "/things/{name}": { "parameters": [{ "in": "query", "name": "pretty", "schema": { "type": "string" } }],
                    "put": { "requestBody": { "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Thing" } } } } },
                    "get": {} },
                "/things/watch": { "get": {} }
            },
            "components": { "schemas": {
                "Thing": { "type": "object", "required": ["spec"], "properties": {
                    "spec": { "$ref": "#/components/schemas/Spec" },
                    "labels": { "type": "object", "additionalProperties": { "type": "string" } } } },
                "Spec": { "type": "object", "required": ["request"], "properties": {
                    "request": { "type": "string", "format": "byte" },
                    "n": { "type": "integer", "format": "int32" },
                    "when": { "type": "string", "format": "date-time" },
                    "kind": { "type": "string", "enum": ["A", "B"] },
                    "tags": { "type": "array", "items": { "type": "string" } } } }
            } }
        }))
    }

    #[test]
    fn paths_methods_and_query_parameters() {
        let s = spec();
        assert!(s
            .check_request("GET", "/things", Some("limit=5&watch=true"), None, b"")
            .is_empty());
        assert_eq!(
            s.operation("GET", "/things/watch").unwrap().template,
            "/things/watch"
        );
        assert_eq!(
            s.operation("GET", "/things/x").unwrap().template,
            "/things/{name}"
        );
        let e = s.check_request("GET", "/things", Some("limit=x&color=red"), None, b"");
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            s.check_request("DELETE", "/things/x", None, None, b"")[0].contains("not an operation")
        );
        assert!(s.check_request("GET", "/other", None, None, b"")[0].contains("no path template"));
        assert!(
            s.check_request("GET", "/things/x", Some("pretty=1"), None, b"")
                .is_empty(),
            "a path-level parameter"
        );
        assert!(s.check_request("GET", "/things/x", None, None, b"{}")[0].contains("takes no body"));
    }

    #[test]
    fn bodies_against_the_schema_with_refs() {
        let s = spec();
        let put = |v: Value| {
            s.check_request(
                "PUT",
                "/things/x",
                None,
                Some("application/json"),
                v.to_string().as_bytes(),
            )
        };
        assert!(put(json!({ "spec": { "request": "YWJj", "n": 3, "when": "2026-01-02T03:04:05Z", "kind": "A", "tags": ["x"] }, "labels": { "a": "b" } })).is_empty());
        let e = put(
            json!({ "spec": { "n": 1.5, "request": "%%", "when": "yesterday", "kind": "C", "tags": [1], "x": 1 }, "labels": { "a": 1 } }),
        );
        for want in [
            "body.spec.n: 1.5 is not an integer",
            "body.spec.request: not base64",
            "body.spec.when: \"yesterday\" is not an RFC 3339",
            "body.spec.kind: \"C\" is not one of",
            "body.spec.tags[0]: not a string",
            "body.spec.x: unknown field",
            "body.labels.a: not a string",
        ] {
            assert!(e.iter().any(|p| p.starts_with(want)), "{want}: {e:#?}");
        }
        assert_eq!(put(json!({})), vec!["body.spec: required".to_string()]);
        assert_eq!(
            put(json!({ "spec": { "request": "YWJj", "n": 3000000000u64 } })).len(),
            1,
            "past int32"
        );
        assert!(
            s.check_request("PUT", "/things/x", None, Some("application/json"), b"")[0]
                .contains("body is required")
        );
        assert!(s.check_request(
            "PUT",
            "/things/x",
            None,
            Some("text/plain"),
            b"{\"spec\":{\"request\":\"\"}}"
        )[0]
        .contains("Content-Type"));
    }

    #[test]
    fn date_times() {
        for ok in [
            "2026-01-02T03:04:05Z",
            "2026-01-02T03:04:05.123Z",
            "2026-01-02T03:04:05+02:00",
        ] {
            assert!(date_time(ok), "{ok}");
        }
        for bad in [
            "2026-01-02",
            "2026-01-02 03:04:05Z",
            "2026-01-02T03:04:05",
            "2026-01-02T03:04:05.Z",
        ] {
            assert!(!date_time(bad), "{bad}");
        }
    }
}
