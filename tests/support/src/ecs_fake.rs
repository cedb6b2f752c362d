//! tests/controller/ecs-fake.py (the Alibaba ECS RPC fake) as a child
//! process on 127.0.0.1, stopped by PID when dropped; its unsigned control
//! API over a plain TCP connection. For the controller's and the
//! appliance's tests.

use crate::process::Process;
use crate::{repo, specs};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

pub const AK: &str = "LTAI5tBootdTestKey01";
pub const SECRET: &str = "bootd-Secret/0123456789+abcXYZ";

pub struct EcsFake {
    _child: Process,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl EcsFake {
    /// Instances turn Running `start_after` seconds after they are made.
    pub fn start(start_after: f64) -> EcsFake {
        EcsFake::start_with(start_after, None)
    }

    /// With `token`: every request must carry this STS security token.
    pub fn start_with(start_after: f64, token: Option<&str>) -> EcsFake {
        EcsFake::spawn(start_after, token, None)
    }

    /// Private addresses given out from `first_ip` upward (a loopback one
    /// lets a test speak for an instance from the address ECS gave it).
    pub fn start_at(start_after: f64, first_ip: std::net::Ipv4Addr) -> EcsFake {
        EcsFake::spawn(start_after, None, Some(first_ip))
    }

    fn spawn(
        start_after: f64,
        token: Option<&str>,
        first_ip: Option<std::net::Ipv4Addr>,
    ) -> EcsFake {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), SECRET).unwrap();
        std::fs::write(dir.path().join("akid"), AK).unwrap();
        let port_file = dir.path().join("port");
        let mut cmd = Command::new("python3");
        cmd.arg(repo().join("tests/controller/ecs-fake.py"));
        if let Some(t) = token {
            std::fs::write(dir.path().join("token"), t).unwrap();
            cmd.arg("--security-token-file")
                .arg(dir.path().join("token"));
        }
        if let Some(ip) = first_ip {
            cmd.args(["--first-ip", &ip.to_string()]);
        }
        let child = cmd
            .arg("--spec")
            .arg(specs().join("alibaba-ecs/api-docs.json"))
            .args(["--access-key-id", AK, "--secret-file"])
            .arg(dir.path().join("secret"))
            .args(["--listen", "127.0.0.1:0", "--port-file"])
            .arg(&port_file)
            .args(["--start-after", &start_after.to_string()])
            .stdout(std::fs::File::create(dir.path().join("fake.log")).unwrap())
            .stderr(std::fs::File::create(dir.path().join("fake.err")).unwrap())
            .spawn()
            .expect("python3");
        let mut child = Process::new(child).with_log(dir.path().join("fake.err"));
        let port = child.wait_ready(
            "the ECS fake",
            Duration::from_secs(20),
            Duration::from_millis(50),
            || {
                std::fs::read_to_string(&port_file)
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            },
        );
        EcsFake {
            _child: child,
            port,
            dir,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn secret_file(&self) -> PathBuf {
        self.dir.path().join("secret")
    }

    pub fn akid_file(&self) -> PathBuf {
        self.dir.path().join("akid")
    }

    /// The fake's unsigned control API (`/_fake/...`).
    pub fn control(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        let b = body.map(|b| b.to_string()).unwrap_or_default();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
            b.len()
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let body = out.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
        serde_json::from_str(body).unwrap_or(Value::Null)
    }

    pub fn instances(&self) -> Vec<Value> {
        self.control("GET", "/_fake/instances", None)
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// An instance's tag value (the fake keeps `Tags` as `[{Key, Value}]`).
pub fn tag(i: &Value, k: &str) -> Option<String> {
    let tags = i["Tags"]
        .as_array()
        .or_else(|| i["Tags"]["Tag"].as_array())?;
    tags.iter().find_map(|t| {
        let key = t["TagKey"].as_str().or_else(|| t["Key"].as_str())?;
        (key == k).then(|| {
            t["TagValue"]
                .as_str()
                .or_else(|| t["Value"].as_str())
                .unwrap_or_default()
                .to_string()
        })
    })
}
