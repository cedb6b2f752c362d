//! A small stateful fake of the provider APIs (Equinix Metal devices, IBM
//! IAM, Power VS pvm-instances) on 127.0.0.1, with fault injection. Its
//! replies follow the specs in ../shared/specs (the Prism proxy tests check
//! that). Machines advance one state per GET (queued → provisioning →
//! active; BUILD → ACTIVE) and disappear on the GET after a DELETE.

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

pub const EQUINIX_KEY: &str = "CANARY-equinix-key-5d1f0a";
pub const POWERVS_KEY: &str = "CANARY-ibm-apikey-93be77";
pub const PROJECT: &str = "6f4b1a2e-7c9d-4e3f-8a1b-2c3d4e5f6a7b";
pub const CLOUD_INSTANCE: &str = "b1c2d3e4-f5a6-4b7c-8d9e-0f1a2b3c4d5e";

#[derive(Debug, Clone)]
pub enum Fault {
    Status(u16, Option<u64>),
    /// A 200 whose JSON body is cut in the middle.
    Truncated,
    /// No reply for this long.
    Hang(Duration),
}

#[derive(Debug, Default)]
pub struct State {
    pub devices: BTreeMap<String, Value>,
    pub instances: BTreeMap<String, Value>,
    /// Injected into the next requests (IAM excluded), in order.
    pub faults: VecDeque<Fault>,
    /// (when, "METHOD path") of every request.
    pub log: Vec<(Instant, String)>,
    pub iam_calls: u32,
    pub creates: u32,
    /// When set, a create makes the machine, then waits for this before replying.
    pub hold_create: Option<Arc<Notify>>,
    /// With `hold_create`: the device is made when the hold is released
    /// (the provider carries the create out late), not before.
    pub create_lands_on_release: bool,
    /// When set, a device DELETE is carried out, then waits for this before replying.
    pub hold_delete: Option<Arc<Notify>>,
    /// When set, the next create is refused with this status.
    pub refuse_create: Option<u16>,
    pub issued_token: String,
    /// When set (e.g. `127.79.0.`), machines get private addresses from
    /// `<prefix>100` upwards, as a provider assigns them; else Equinix
    /// devices all report 10.70.1.2 and Power VS instances the address asked for.
    pub private_prefix: Option<String>,
    /// Addresses handed to the next machines made without one, first.
    pub assign: VecDeque<String>,
    /// Machines made so far: numbers each one's MACs and addresses.
    pub made: u32,
    /// The user data each Power VS instance was made with (by server name).
    pub user_data: BTreeMap<String, String>,
    /// Each machine's number (by id).
    pub numbers: BTreeMap<String, u32>,
    /// Every DELETE of a machine that reached the fake.
    pub deletes: Vec<String>,
}

#[derive(Clone)]
pub struct Fake {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<State>>,
}

impl Fake {
    pub async fn start() -> Fake {
        let state = Arc::new(Mutex::new(State {
            issued_token: "iam-access-token-1".into(),
            ..Default::default()
        }));
        let st = Arc::clone(&state);
        let addr = testkit::http_fake::serve(None, move |req| {
            let st = Arc::clone(&st);
            async move { handle(st, req).await.ok() }
        })
        .await;
        Fake { addr, state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Machines not deleted.
    pub fn live_devices(&self) -> usize {
        self.st()
            .devices
            .values()
            .filter(|d| d["state"] != "deprovisioning")
            .count()
    }
    pub fn live_instances(&self) -> usize {
        self.st()
            .instances
            .values()
            .filter(|d| d["status"] != "DELETING")
            .count()
    }
}

fn reply(status: u16, v: &Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(serde_json::to_vec(v).unwrap())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        "application/json".parse().unwrap(),
    );
    r
}

fn uuid() -> String {
    let b: [u8; 16] = rand::random();
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

async fn handle(
    st: Arc<Mutex<State>>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let headers = req.headers().clone();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let is_iam = path == "/identity/token";
    let fault = {
        let mut s = st.lock().unwrap();
        s.log.push((Instant::now(), format!("{method} {path}")));
        if is_iam {
            None
        } else {
            s.faults.pop_front()
        }
    };
    match fault {
        Some(Fault::Status(code, ra)) => {
            let mut r = reply(
                code,
                &json!({ "error": "injected", "errors": ["injected fault"] }),
            );
            if let Some(s) = ra {
                r.headers_mut()
                    .insert(http::header::RETRY_AFTER, s.to_string().parse().unwrap());
            }
            return Ok(r);
        }
        Some(Fault::Truncated) => {
            let mut r = Response::new(Full::new(Bytes::from_static(
                b"{\"devices\": [{\"id\": \"0a1b",
            )));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                "application/json".parse().unwrap(),
            );
            return Ok(r);
        }
        Some(Fault::Hang(d)) => tokio::time::sleep(d).await,
        None => {}
    }
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if is_iam {
        let form = String::from_utf8_lossy(&body).to_string();
        let mut s = st.lock().unwrap();
        s.iam_calls += 1;
        let field = |k: &str| {
            form.split('&')
                .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                .map(|v| {
                    percent_encoding::percent_decode_str(v)
                        .decode_utf8_lossy()
                        .to_string()
                })
        };
        if field("grant_type").as_deref() != Some("urn:ibm:params:oauth:grant-type:apikey")
            || field("apikey").as_deref() != Some(POWERVS_KEY)
        {
            return Ok(reply(
                400,
                &json!({ "errorCode": "BXNIM0415E", "errorMessage": "Provided API key could not be found" }),
            ));
        }
        let exp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 3600;
        return Ok(reply(
            200,
            &json!({ "access_token": s.issued_token, "refresh_token": "not_supported", "token_type": "Bearer", "expires_in": 3600, "expiration": exp }),
        ));
    }
    if segs.first() == Some(&"pcloud") {
        return Ok(powervs(&st, &method, &segs, &headers, &body).await);
    }
    if headers.get("X-Auth-Token").and_then(|v| v.to_str().ok()) != Some(EQUINIX_KEY) {
        return Ok(reply(401, &json!({ "error": "invalid auth token" })));
    }
    Ok(equinix(&st, &method, &segs, &query, &body).await)
}

async fn equinix(
    st: &Arc<Mutex<State>>,
    method: &Method,
    segs: &[&str],
    query: &str,
    body: &[u8],
) -> Response<Full<Bytes>> {
    match (method, segs) {
        (&Method::GET, ["projects", p, "devices"]) if *p == PROJECT => {
            let tag = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("tag="))
                .map(|t| {
                    percent_encoding::percent_decode_str(t)
                        .decode_utf8_lossy()
                        .to_string()
                });
            let s = st.lock().unwrap();
            let list: Vec<Value> = s
                .devices
                .values()
                .filter(|d| {
                    tag.as_ref().is_none_or(|t| {
                        d["tags"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .any(|x| x == t.as_str())
                    })
                })
                .cloned()
                .collect();
            reply(
                200,
                &json!({ "devices": list, "meta": { "total": list.len(), "current_page": 1, "last_page": 1 } }),
            )
        }
        (&Method::POST, ["projects", p, "devices"]) if *p == PROJECT => {
            let v: Value = match serde_json::from_slice(body) {
                Ok(v) => v,
                Err(_) => return reply(422, &json!({ "errors": ["bad JSON"] })),
            };
            let (hold, refuse) = {
                let mut s = st.lock().unwrap();
                (s.hold_create.clone(), s.refuse_create.take())
            };
            if let Some(code) = refuse {
                return reply(
                    code,
                    &json!({ "errors": ["plan c3.small.x86 is not available in metro sv"] }),
                );
            }
            let id = uuid();
            {
                let mut s = st.lock().unwrap();
                s.made += 1;
                let n = s.made;
                s.numbers.insert(id.clone(), n);
            }
            let mut dev = json!({
                "id": id,
                "href": format!("/metal/v1/devices/{id}"),
                "hostname": v["hostname"],
                "state": "queued",
                "tags": v["tags"],
                "always_pxe": v["always_pxe"],
                "ipxe_script_url": v["ipxe_script_url"],
                "userdata": v["userdata"],
                "created_at": "2026-01-01T00:00:00Z",
                "ip_addresses": [],
                "network_ports": [],
            });
            // Keys the request left out (an image-booted device has no iPXE) are absent, not null.
            if let Some(o) = dev.as_object_mut() {
                o.retain(|_, v| !v.is_null());
            }
            let late = hold.is_some() && st.lock().unwrap().create_lands_on_release;
            st.lock().unwrap().creates += 1;
            match &hold {
                // Made on release, whether or not the client still waits.
                Some(h) if late => {
                    let released = Arc::clone(h).notified_owned();
                    let (st, id, dev) = (Arc::clone(st), id.clone(), dev.clone());
                    tokio::spawn(async move {
                        released.await;
                        st.lock().unwrap().devices.insert(id, dev);
                    });
                }
                _ => {
                    st.lock().unwrap().devices.insert(id.clone(), dev.clone());
                }
            }
            if let Some(h) = hold {
                h.notified().await;
            }
            reply(201, &dev)
        }
        (&Method::GET, ["devices", id]) => {
            let mut s = st.lock().unwrap();
            let s_prefix = s.private_prefix.clone();
            let numbers = s.numbers.clone();
            let Some(d) = s.devices.get_mut(*id) else {
                return reply(404, &json!({ "error": "Not found" }));
            };
            let next = match d["state"].as_str() {
                Some("queued") => "provisioning",
                Some("provisioning") => "active",
                Some("deprovisioning") => {
                    s.devices.remove(*id);
                    return reply(404, &json!({ "error": "Not found" }));
                }
                Some(x) => x,
                None => "active",
            }
            .to_string();
            d["state"] = json!(next);
            if next == "active" {
                let n = numbers.get(*id).copied().unwrap_or(0);
                let private = match &s_prefix {
                    Some(p) => format!("{p}{}", 100 + n),
                    None => "10.70.1.2".to_string(),
                };
                let public = if s_prefix.is_some() {
                    format!("147.75.1.{}", 100 + n)
                } else {
                    "147.75.1.2".into()
                };
                // A layer-3 device as Equinix answers it: the public and
                // private addresses with their prefixes and gateways, and
                // bond0 over eth0 and eth1.
                let private_gw = match &s_prefix {
                    Some(p) => format!("{p}1"),
                    None => "10.70.1.1".to_string(),
                };
                d["ip_addresses"] = json!([
                    { "address": public, "address_family": 4, "cidr": 31, "gateway": "147.75.1.1", "public": true, "management": true },
                    { "address": private, "address_family": 4, "cidr": 24, "gateway": private_gw, "public": false, "management": true }
                ]);
                let mac = |k: u32| format!("b4:96:91:a{k}:{:02x}:{:02x}", n >> 8, n & 0xff);
                d["network_ports"] = json!([
                    { "id": uuid(), "name": "bond0", "type": "NetworkBondPort", "network_type": "layer3", "data": { "bonded": true } },
                    { "id": uuid(), "name": "eth0", "type": "NetworkPort", "bond": { "name": "bond0" }, "data": { "mac": mac(0), "bonded": true } },
                    { "id": uuid(), "name": "eth1", "type": "NetworkPort", "bond": { "name": "bond0" }, "data": { "mac": mac(1), "bonded": true } }
                ]);
            }
            reply(200, d)
        }
        (&Method::DELETE, ["devices", id]) => {
            let hold = {
                let mut s = st.lock().unwrap();
                s.deletes.push(id.to_string());
                match s.devices.get_mut(*id) {
                    Some(d) => d["state"] = json!("deprovisioning"),
                    None => return reply(404, &json!({ "error": "Not found" })),
                }
                s.hold_delete.clone()
            };
            if let Some(h) = hold {
                h.notified().await;
            }
            let mut r = Response::new(Full::new(Bytes::new()));
            *r.status_mut() = StatusCode::NO_CONTENT;
            r
        }
        _ => reply(404, &json!({ "error": "no such route in the fake" })),
    }
}

fn instance_ref(i: &Value) -> Value {
    let mut r = i.clone();
    let o = r.as_object_mut().unwrap();
    o.remove("networkIDs");
    o.remove("volumeIDs");
    o.remove("storageType");
    // A PVMInstanceReference has no tags; a PVMInstance has.
    o.remove("userTags");
    r
}

async fn powervs(
    st: &Arc<Mutex<State>>,
    method: &Method,
    segs: &[&str],
    headers: &http::HeaderMap,
    body: &[u8],
) -> Response<Full<Bytes>> {
    let tok = st.lock().unwrap().issued_token.clone();
    let auth_ok = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        == Some(&format!("Bearer {tok}"));
    let crn_ok = headers
        .get("CRN")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("crn:"));
    if !auth_ok || !crn_ok {
        return reply(
            401,
            &json!({ "code": 401, "description": "unauthorized", "error": "unauthorized", "message": "unauthorized" }),
        );
    }
    let base = ["pcloud", "v1", "cloud-instances"];
    if segs.len() < 5
        || segs[..3] != base
        || segs[3] != CLOUD_INSTANCE
        || segs[4] != "pvm-instances"
    {
        return reply(
            404,
            &json!({ "code": 404, "description": "not found", "error": "not found", "message": "not found" }),
        );
    }
    match (method, &segs[5..]) {
        (&Method::GET, []) => {
            let s = st.lock().unwrap();
            let list: Vec<Value> = s.instances.values().map(instance_ref).collect();
            reply(200, &json!({ "pvmInstances": list }))
        }
        (&Method::POST, []) => {
            let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            let id = uuid();
            let (n, prefix) = {
                let mut s = st.lock().unwrap();
                s.made += 1;
                if let (Some(name), Some(ud)) = (v["serverName"].as_str(), v["userData"].as_str()) {
                    s.user_data.insert(name.to_string(), ud.to_string());
                }
                (s.made, s.private_prefix.clone())
            };
            let forced = st.lock().unwrap().assign.pop_front();
            let ip = match (&v["networks"][0]["ipAddress"], prefix) {
                (Value::String(a), _) => a.clone(),
                _ if forced.is_some() => forced.unwrap_or_default(),
                (_, Some(p)) => format!("{p}{}", 100 + n),
                (_, None) => "192.168.0.10".into(),
            };
            let mac = format!("fa:16:3e:00:{:02x}:{:02x}", n >> 8, n & 0xff);
            let inst = json!({
                "pvmInstanceID": id,
                "serverName": v["serverName"],
                "imageID": v["imageID"],
                "processors": v["processors"],
                "memory": v["memory"],
                "procType": v["procType"],
                "sysType": v["sysType"],
                "status": "BUILD",
                "diskSize": 120.0,
                "osType": "rhcos",
                "storageType": "tier3",
                "networkIDs": [v["networks"][0]["networkID"]],
                "volumeIDs": [],
                "href": format!("/pcloud/v1/cloud-instances/{CLOUD_INSTANCE}/pvm-instances/{id}"),
                "networks": [{ "ipAddress": ip, "macAddress": mac, "networkID": v["networks"][0]["networkID"] }],
                "userTags": v["userTags"],
            });
            let hold = {
                let mut s = st.lock().unwrap();
                s.creates += 1;
                s.instances.insert(id, inst.clone());
                s.hold_create.clone()
            };
            if let Some(h) = hold {
                h.notified().await;
            }
            reply(201, &json!([inst]))
        }
        (&Method::GET, [id]) => {
            let mut s = st.lock().unwrap();
            let Some(i) = s.instances.get_mut(*id) else {
                return reply(
                    404,
                    &json!({ "code": 404, "description": "not found", "error": "not found", "message": "not found" }),
                );
            };
            if i["status"] == "DELETING" {
                s.instances.remove(*id);
                return reply(
                    404,
                    &json!({ "code": 404, "description": "not found", "error": "not found", "message": "not found" }),
                );
            }
            i["status"] = json!("ACTIVE");
            reply(200, i)
        }
        (&Method::DELETE, [id]) => {
            let mut s = st.lock().unwrap();
            s.deletes.push(id.to_string());
            match s.instances.get_mut(*id) {
                Some(i) => {
                    i["status"] = json!("DELETING");
                    reply(200, &json!({}))
                }
                None => reply(
                    404,
                    &json!({ "code": 404, "description": "not found", "error": "not found", "message": "not found" }),
                ),
            }
        }
        _ => reply(
            404,
            &json!({ "code": 404, "description": "not found", "error": "not found", "message": "not found" }),
        ),
    }
}

/// A Power VS client of the fake's account, against `base` (and IAM at `iam`).
pub fn powervs_client(
    http: controller::providers::Http,
    base: String,
    iam: String,
) -> controller::providers::powervs::PowerVs {
    controller::providers::powervs::PowerVs::new(
        http,
        base,
        iam,
        CLOUD_INSTANCE.into(),
        "crn:v1:bluemix:public:power-iaas:us-south:a/acc:x::".into(),
        site::Secret(POWERVS_KEY.into()),
    )
}

/// The instance spec the Power VS tests create with.
pub fn powervs_spec(metadata_service: bool) -> Value {
    serde_json::to_value(controller::providers::powervs::InstanceSpec {
        image_id: "rhcos-417".into(),
        processors: 0.5,
        memory: 16.0,
        proc_type: "shared".into(),
        sys_type: "s922".into(),
        network_id: "net-7".into(),
        metadata_service,
    })
    .unwrap()
}
