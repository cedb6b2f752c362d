//! Alibaba Cloud's request signature, ACS3-HMAC-SHA256 ("V3 request
//! structure and signature"), as a pure function:
//!
//! ```text
//! CanonicalRequest = METHOD "\n" "/" "\n" CanonicalQueryString "\n"
//!                    CanonicalHeaders "\n" SignedHeaders "\n" hex(sha256(body))
//! StringToSign     = "ACS3-HMAC-SHA256\n" hex(sha256(CanonicalRequest))
//! Authorization    = "ACS3-HMAC-SHA256 Credential=<AccessKeyId>,
//!                     SignedHeaders=<a;b;…>,Signature=<hex(hmac_sha256(secret, StringToSign))>"
//! ```
//!
//! The query string is RFC 3986-encoded (everything but `A-Za-z0-9-_.~`,
//! space as `%20`) and sorted by name; the canonical headers are the signed
//! ones, lower-case, sorted, `name:trimmed value\n` each: `host`, every
//! `x-acs-*` header and `content-type`. The body is covered through
//! `x-acs-content-sha256`.

use hmac::{Hmac, Mac};
use percent_encoding::utf8_percent_encode;
use sha2::{Digest, Sha256};

/// One request to sign.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub method: &'a str,
    pub host: &'a str,
    pub action: &'a str,
    pub version: &'a str,
    /// `yyyy-MM-ddTHH:mm:ssZ`, UTC.
    pub date: &'a str,
    /// Unique per request: the server refuses a nonce it has seen.
    pub nonce: &'a str,
    pub query: &'a [(String, String)],
    pub body: &'a [u8],
    pub content_type: Option<&'a str>,
    /// An STS token (`x-acs-security-token`), signed with the rest.
    pub security_token: Option<&'a str>,
}

/// RFC 3986 percent-encoding, as the signature wants it.
pub fn encode(s: &str) -> String {
    utf8_percent_encode(s, super::super::COMPONENT).to_string()
}

/// `a=1&b=2`, names sorted (then values), both encoded.
pub fn canonical_query(pairs: &[(String, String)]) -> String {
    let mut v: Vec<(String, String)> = pairs.iter().map(|(k, v)| (encode(k), encode(v))).collect();
    v.sort();
    v.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The headers to send, `authorization` last. Also returns the hashed
/// canonical request (for known-answer tests).
pub fn sign(r: &Request<'_>, access_key_id: &str, secret: &str) -> (Vec<(String, String)>, String) {
    let payload = hex(&Sha256::digest(r.body));
    let mut headers: Vec<(String, String)> = vec![
        ("host".into(), r.host.into()),
        ("x-acs-action".into(), r.action.into()),
        ("x-acs-content-sha256".into(), payload.clone()),
        ("x-acs-date".into(), r.date.into()),
        ("x-acs-signature-nonce".into(), r.nonce.into()),
        ("x-acs-version".into(), r.version.into()),
    ];
    if let Some(t) = r.security_token {
        headers.push(("x-acs-security-token".into(), t.into()));
    }
    if let Some(c) = r.content_type {
        headers.push(("content-type".into(), c.into()));
    }
    headers.sort();
    let canonical_headers: String = headers
        .iter()
        .map(|(k, v)| format!("{k}:{}\n", v.trim()))
        .collect();
    let signed = headers
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let canonical = format!(
        "{}\n/\n{}\n{canonical_headers}\n{signed}\n{payload}",
        r.method,
        canonical_query(r.query)
    );
    let hashed = hex(&Sha256::digest(canonical.as_bytes()));
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key length");
    mac.update(format!("ACS3-HMAC-SHA256\n{hashed}").as_bytes());
    let signature = hex(&mac.finalize().into_bytes());
    headers.push((
        "authorization".into(),
        format!("ACS3-HMAC-SHA256 Credential={access_key_id},SignedHeaders={signed},Signature={signature}"),
    ));
    (headers, hashed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Alibaba's worked example ("V3 request structure and signature",
    /// help.aliyun.com/zh/sdk/product-overview/v3-request-structure-and-signature):
    /// RunInstances on ecs.cn-shanghai, two query parameters, no body.
    #[test]
    fn alibabas_published_example() {
        let q = vec![
            (
                "ImageId".to_string(),
                "win2019_1809_x64_dtc_zh-cn_40G_alibase_20230811.vhd".to_string(),
            ),
            ("RegionId".to_string(), "cn-shanghai".to_string()),
        ];
        let r = Request {
            method: "POST",
            host: "ecs.cn-shanghai.aliyuncs.com",
            action: "RunInstances",
            version: "2014-05-26",
            date: "2023-10-26T10:22:32Z",
            nonce: "3156853299f313e23d1673dc12e1703d",
            query: &q,
            body: b"",
            content_type: None,
            security_token: None,
        };
        let (h, hashed) = sign(&r, "YourAccessKeyId", "YourAccessKeySecret");
        assert_eq!(
            hashed,
            "7ea06492da5221eba5297e897ce16e55f964061054b7695beedaac1145b1e259"
        );
        let auth = &h.last().unwrap().1;
        assert_eq!(
            auth,
            "ACS3-HMAC-SHA256 Credential=YourAccessKeyId,SignedHeaders=host;x-acs-action;x-acs-content-sha256;x-acs-date;x-acs-signature-nonce;x-acs-version,Signature=06563a9e1b43f5dfe96b81484da74bceab24a1d853912eee15083a6f0f3283c0"
        );
        // One byte of the secret changed: another signature.
        let (h2, _) = sign(&r, "YourAccessKeyId", "YourAccessKeySecreT");
        assert_ne!(h2.last().unwrap().1, *auth);
    }

    #[test]
    fn encoding_is_rfc3986() {
        assert_eq!(encode("a b*~/+="), "a%20b%2A~%2F%2B%3D");
        assert_eq!(
            canonical_query(&[("b".into(), "2".into()), ("a".into(), "x y".into())]),
            "a=x%20y&b=2"
        );
    }
}
