//! A Redfish BMC fake for tests (one system, `/redfish/v1/Systems/sys-1`,
//! two NICs, Basic auth, ETags, fault injection, replies that can be held
//! or dropped), for the controller's and the appliance's tests. Its state
//! is a [`Bmc`] the test holds too: it sets faults and reads what was sent.

use crate::http_fake::{self, Reply};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const PASSWORD: &str = "s3cret-bmc-Pa55";
pub const SYS: &str = "/redfish/v1/Systems/sys-1";

#[derive(Default)]
pub struct Bmc {
    pub power: String,
    pub target: String,
    pub enabled: String,
    pub mode: String,
    pub etag: u32,
    /// (method, path prefix, status, Retry-After), taken once each.
    pub faults: Vec<(&'static str, &'static str, u16, Option<u32>)>,
    /// Resets as sent.
    pub resets: Vec<String>,
    pub patches: Vec<Value>,
    /// Ignores GracefulShutdown (a hung OS).
    pub hung: bool,
    /// Accepts the next reset and then drops the connection unanswered.
    pub drop_after_reset: bool,
    /// Every GET waits this long first.
    pub slow: Duration,
    /// The system list names a member on another host.
    pub evil_member: bool,
    /// (method, path prefix): the next such request takes effect, then its
    /// reply waits for this notify (a caller killed while waiting for it).
    pub hold: Option<(&'static str, &'static str, Arc<tokio::sync::Notify>)>,
    /// The image in the manager's CD device (`VirtualMedia`, found through
    /// the system's manager as on older BMCs), and the inserts and ejects.
    pub media: Option<String>,
    pub media_ops: Vec<String>,
    /// Virtual media under the system (Redfish 1.11+: Supermicro X12 and
    /// later, HPE iLO 6) instead of the manager (iDRAC, older BMCs).
    pub media_on_system: bool,
    /// The service root links a SessionService (DMTF's `Sessions`):
    /// POST {UserName, Password} gives an `X-Auth-Token`.
    pub sessions: bool,
    /// Basic authentication refused (a BMC configured for sessions only).
    pub no_basic: bool,
    /// Open sessions: token → session id; logins and logouts as counted.
    pub open: BTreeMap<String, u32>,
    pub logins: u32,
    pub logouts: u32,
    /// `BootSourceOverrideTarget@Redfish.AllowableValues`, when the BMC
    /// lists them (UefiHttp missing on BMCs without UEFI HTTP boot); a
    /// PATCH with another target is refused (PropertyValueNotInList).
    pub targets: Option<Vec<&'static str>>,
    /// `BootSourceOverrideEnabled@Redfish.AllowableValues` likewise (some
    /// BMCs offer Continuous and Disabled only).
    pub enabled_values: Option<Vec<&'static str>>,
    pub etag_mode: EtagMode,
}

/// How the fake treats `If-Match` on a PATCH of the system.
#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
pub enum EtagMode {
    /// It must be the current ETag (HPE iLO: 428 without it).
    #[default]
    Required,
    /// Any `If-Match` is refused with 412 though the ETag is current, and
    /// a PATCH without it is taken (a vendor's broken conditional PATCH).
    Broken,
}

pub const MANAGER: &str = "/redfish/v1/Managers/bmc";
pub const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";

/// Where the virtual media collection is.
fn media_home(b: &Bmc) -> &'static str {
    if b.media_on_system {
        SYS
    } else {
        MANAGER
    }
}

pub type Shared = Arc<Mutex<Bmc>>;

fn reply(status: u16, v: Option<Value>, etag: Option<String>) -> Reply {
    let mut b = Response::builder().status(status);
    if let Some(e) = etag {
        b = b.header("ETag", e);
    }
    match v {
        Some(v) => b
            .header("Content-Type", "application/json")
            .body(Full::new(Bytes::from(v.to_string())))
            .unwrap(),
        None => b.body(Full::new(Bytes::new())).unwrap(),
    }
}

async fn handle(bmc: Shared, req: Request<hyper::body::Incoming>) -> Option<Reply> {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let resp = respond(bmc.clone(), req).await;
    let held = {
        let mut b = bmc.lock().unwrap();
        match &b.hold {
            Some((m, p, _)) if *m == method && path.starts_with(p) => b.hold.take().map(|h| h.2),
            _ => None,
        }
    };
    if let Some(n) = held {
        n.notified().await;
    }
    resp
}

async fn respond(bmc: Shared, req: Request<hyper::body::Incoming>) -> Option<Reply> {
    use base64::Engine as _;
    let want = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("admin:{PASSWORD}"))
    );
    let (parts, body) = req.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let method = parts.method.as_str().to_string();
    let path = parts.uri.path().to_string();
    let slow = bmc.lock().unwrap().slow;
    if method == "GET" && !slow.is_zero() {
        tokio::time::sleep(slow).await;
    }
    let mut b = bmc.lock().unwrap();
    if let Some(i) = b
        .faults
        .iter()
        .position(|(m, p, _, _)| *m == method && path.starts_with(p))
    {
        let (_, _, status, ra) = b.faults.remove(i);
        let mut r = reply(status, Some(json!({"error": {"message": "busy"}})), None);
        if let Some(s) = ra {
            r.headers_mut()
                .insert("Retry-After", s.to_string().parse().unwrap());
        }
        return Some(r);
    }
    // The service root answers anyone (DMTF: it is how a client finds the
    // session service); so does the login.
    if method == "GET" && (path == "/redfish/v1" || path == "/redfish/v1/") {
        let mut root = json!({"Systems": {"@odata.id": "/redfish/v1/Systems"}});
        if b.sessions {
            root["SessionService"] = json!({"@odata.id": "/redfish/v1/SessionService"});
            root["Links"] = json!({"Sessions": {"@odata.id": SESSIONS}});
        }
        return Some(reply(200, Some(root), None));
    }
    if b.sessions && method == "POST" && path == SESSIONS {
        let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        if v["UserName"] != "admin" || v["Password"] != PASSWORD {
            return Some(reply(401, Some(json!({"error": "no"})), None));
        }
        b.logins += 1;
        let id = b.logins;
        let token = format!("tok-{id}-{:08x}", id.wrapping_mul(2654435761));
        b.open.insert(token.clone(), id);
        let mut r = reply(
            201,
            Some(
                json!({"@odata.id": format!("{SESSIONS}/{id}"), "Id": id.to_string(), "UserName": "admin"}),
            ),
            None,
        );
        r.headers_mut()
            .insert("X-Auth-Token", token.parse().unwrap());
        r.headers_mut()
            .insert("Location", format!("{SESSIONS}/{id}").parse().unwrap());
        return Some(r);
    }
    let token = parts
        .headers
        .get("x-auth-token")
        .and_then(|v| v.to_str().ok());
    let by_token = b.sessions && token.is_some_and(|t| b.open.contains_key(t));
    let by_basic = !b.no_basic
        && parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            == Some(want.as_str());
    if !by_token && !by_basic {
        return Some(reply(401, Some(json!({"error": "no"})), None));
    }
    if b.sessions && method == "DELETE" && path.starts_with(&format!("{SESSIONS}/")) {
        let id: u32 = path
            .rsplit('/')
            .next()
            .and_then(|i| i.parse().ok())
            .unwrap_or(0);
        let before = b.open.len();
        b.open.retain(|_, v| *v != id);
        if b.open.len() == before {
            return Some(reply(404, Some(json!({"error": "no such session"})), None));
        }
        b.logouts += 1;
        return Some(reply(204, None, None));
    }
    let etag = format!("W/\"{}\"", b.etag);
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match (method.as_str(), path.as_str()) {
        ("GET", "/redfish/v1/Systems") => {
            let m = if b.evil_member {
                "@127.0.0.1:9/redfish/v1/Systems/sys-1".to_string()
            } else {
                SYS.to_string()
            };
            Some(reply(
                200,
                Some(json!({"Members": [{"@odata.id": m}]})),
                None,
            ))
        }
        ("GET", SYS) => {
            let mut v = json!({
                "Id": "sys-1", "Name": "rack1-u7", "UUID": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
                "PowerState": b.power,
                "Boot": {"BootSourceOverrideTarget": b.target, "BootSourceOverrideEnabled": b.enabled, "BootSourceOverrideMode": b.mode},
                "EthernetInterfaces": {"@odata.id": format!("{SYS}/EthernetInterfaces")},
                "Links": {"ManagedBy": [{"@odata.id": MANAGER}]},
                "Actions": {"#ComputerSystem.Reset": {
                    "target": format!("{SYS}/Actions/ComputerSystem.Reset"),
                    "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown", "ForceRestart"]}}
            });
            if let Some(t) = &b.targets {
                v["Boot"]["BootSourceOverrideTarget@Redfish.AllowableValues"] = json!(t);
            }
            if let Some(e) = &b.enabled_values {
                v["Boot"]["BootSourceOverrideEnabled@Redfish.AllowableValues"] = json!(e);
            }
            if b.media_on_system {
                v["VirtualMedia"] = json!({"@odata.id": format!("{SYS}/VirtualMedia")});
            }
            Some(reply(200, Some(v), Some(etag)))
        }
        ("GET", p) if p == format!("{SYS}/EthernetInterfaces") => Some(reply(
            200,
            Some(
                json!({"Members": [{"@odata.id": format!("{SYS}/EthernetInterfaces/nic1")}, {"@odata.id": format!("{SYS}/EthernetInterfaces/nic2")}]}),
            ),
            None,
        )),
        ("GET", p) if p.starts_with(&format!("{SYS}/EthernetInterfaces/")) => {
            let mac = if p.ends_with("nic1") {
                "52:54:00:AA:BB:01"
            } else {
                "52:54:00:AA:BB:02"
            };
            Some(reply(200, Some(json!({"MACAddress": mac})), None))
        }
        ("GET", MANAGER) if b.media_on_system => Some(reply(200, Some(json!({"Id": "bmc"})), None)),
        ("GET", MANAGER) => Some(reply(
            200,
            Some(
                json!({"Id": "bmc", "VirtualMedia": {"@odata.id": format!("{MANAGER}/VirtualMedia")}}),
            ),
            None,
        )),
        ("GET", p) if p == format!("{}/VirtualMedia", media_home(&b)) => {
            let home = media_home(&b);
            Some(reply(
                200,
                Some(
                    json!({"Members": [{"@odata.id": format!("{home}/VirtualMedia/Floppy1")},
                                        {"@odata.id": format!("{home}/VirtualMedia/Cd1")}]}),
                ),
                None,
            ))
        }
        ("GET", p) if p.starts_with(&format!("{}/VirtualMedia/", media_home(&b))) => {
            let cd = p.ends_with("Cd1");
            Some(reply(
                200,
                Some(json!({
                    "Id": if cd { "Cd1" } else { "Floppy1" },
                    "MediaTypes": if cd { json!(["CD", "DVD"]) } else { json!(["Floppy", "USBStick"]) },
                    "Inserted": cd && b.media.is_some(),
                    "Image": if cd { b.media.clone().unwrap_or_default() } else { String::new() },
                    "Actions": {
                        "#VirtualMedia.InsertMedia": {"target": format!("{p}/Actions/VirtualMedia.InsertMedia")},
                        "#VirtualMedia.EjectMedia": {"target": format!("{p}/Actions/VirtualMedia.EjectMedia")}
                    }
                })),
                None,
            ))
        }
        ("POST", p)
            if p == format!(
                "{}/VirtualMedia/Cd1/Actions/VirtualMedia.InsertMedia",
                media_home(&b)
            ) =>
        {
            if b.media.is_some() {
                return Some(reply(
                    400,
                    Some(json!({"error": {"message": "media already inserted"}})),
                    None,
                ));
            }
            let img = v["Image"].as_str().unwrap_or_default().to_string();
            b.media_ops.push(format!("insert {img}"));
            b.media = Some(img);
            Some(reply(204, None, None))
        }
        ("POST", p)
            if p == format!(
                "{}/VirtualMedia/Cd1/Actions/VirtualMedia.EjectMedia",
                media_home(&b)
            ) =>
        {
            b.media_ops.push("eject".into());
            b.media = None;
            Some(reply(204, None, None))
        }
        ("PATCH", SYS) => {
            let if_match = parts.headers.get("if-match").and_then(|v| v.to_str().ok());
            match (b.etag_mode, if_match) {
                (EtagMode::Required, None) => {
                    return Some(reply(
                        428,
                        Some(json!({"error": "If-Match required"})),
                        None,
                    ))
                }
                (EtagMode::Required, Some(m)) if m != etag => {
                    return Some(reply(412, Some(json!({"error": "etag"})), None))
                }
                (EtagMode::Broken, Some(_)) => {
                    return Some(reply(
                        412,
                        Some(json!({"error": "precondition failed"})),
                        None,
                    ))
                }
                _ => {}
            }
            let boot = &v["Boot"];
            let refused = |prop: &str, val: &str| {
                reply(
                    400,
                    Some(
                        json!({"error": {"code": "Base.1.8.GeneralError", "message": "not allowed",
                        "@Message.ExtendedInfo": [{"MessageId": "Base.1.8.PropertyValueNotInList",
                            "Message": format!("The value {val} for the property {prop} is not in the list of acceptable values."),
                            "RelatedProperties": [format!("#/Boot/{prop}")]}]}}),
                    ),
                    None,
                )
            };
            if let (Some(t), Some(allowed)) =
                (boot["BootSourceOverrideTarget"].as_str(), &b.targets)
            {
                if !allowed.contains(&t) {
                    return Some(refused("BootSourceOverrideTarget", t));
                }
            }
            if let (Some(e), Some(allowed)) = (
                boot["BootSourceOverrideEnabled"].as_str(),
                &b.enabled_values,
            ) {
                if !allowed.contains(&e) {
                    return Some(refused("BootSourceOverrideEnabled", e));
                }
            }
            if let Some(t) = boot["BootSourceOverrideTarget"].as_str() {
                b.target = t.into();
            }
            if let Some(e) = boot["BootSourceOverrideEnabled"].as_str() {
                b.enabled = e.into();
            }
            if let Some(m) = boot["BootSourceOverrideMode"].as_str() {
                b.mode = m.into();
            }
            b.etag += 1;
            b.patches.push(v);
            Some(reply(204, None, None))
        }
        ("POST", p) if p == format!("{SYS}/Actions/ComputerSystem.Reset") => {
            let t = v["ResetType"].as_str().unwrap_or_default().to_string();
            b.resets.push(t.clone());
            match t.as_str() {
                "On" | "ForceRestart" => b.power = "On".into(),
                "ForceOff" => b.power = "Off".into(),
                "GracefulShutdown" if !b.hung => b.power = "Off".into(),
                _ => {}
            }
            if b.drop_after_reset {
                b.drop_after_reset = false;
                return None;
            }
            Some(reply(204, None, None))
        }
        _ => Some(reply(404, Some(json!({"error": "not found"})), None)),
    }
}

/// A fake BMC on 127.0.0.1, over TLS when `tls` is given.
pub async fn serve(bmc: Shared, tls: Option<Arc<rustls::ServerConfig>>) -> SocketAddr {
    http_fake::serve(tls, move |req| handle(bmc.clone(), req)).await
}

/// A BMC of a machine that is off, with no boot override, in UEFI mode.
pub fn fresh() -> Shared {
    Arc::new(Mutex::new(Bmc {
        power: "Off".into(),
        target: "None".into(),
        enabled: "Disabled".into(),
        mode: "UEFI".into(),
        ..Default::default()
    }))
}
