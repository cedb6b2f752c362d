//! What lbd should serve, derived purely from the site (or a standalone lbd
//! file): frontends with their backends. The runtime ([`crate::state`])
//! applies a plan; a reload computes a new plan and applies the difference.

use site::{Balance, Check, CheckKind, Lb, Site};
use std::fmt::Write as _;
use std::net::SocketAddr;

#[derive(Debug, Clone, PartialEq)]
pub struct FrontendPlan {
    pub name: String,
    pub listen: SocketAddr,
    pub balance: Balance,
    pub check: Check,
    pub backends: Vec<BackendPlan>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendPlan {
    /// The node's name, or `addr` for a service backend.
    pub name: String,
    pub addr: SocketAddr,
    pub role: Role,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Bootstrap,
    Master,
    Worker,
    /// A standalone service's backend.
    Service,
}

impl Role {
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Bootstrap => "bootstrap",
            Role::Master => "master",
            Role::Worker => "worker",
            Role::Service => "service",
        }
    }
}

/// The frontends of a site. `bootstrap_done`: the bootstrap node is left
/// out of api and machine-config (it has been drained and removed).
pub fn from_site(site: &Site, bootstrap_done: bool) -> Vec<FrontendPlan> {
    let nodes = |role: &'static str| site.nodes.iter().filter(move |n| n.role == role);
    let has_workers = nodes(site::ROLE_WORKER).next().is_some();
    site.lb
        .frontends
        .iter()
        .map(|f| {
            let backends = match (&f.backends, site::site_frontend(&f.name)) {
                (Some(fixed), _) => service_backends(fixed),
                (None, "api" | "machine-config") => {
                    let boot = nodes(site::ROLE_BOOTSTRAP)
                        .filter(|_| !bootstrap_done)
                        .map(|n| (n, Role::Bootstrap));
                    boot.chain(nodes(site::ROLE_MASTER).map(|n| (n, Role::Master)))
                        .map(|(n, role)| BackendPlan {
                            name: n.name.clone(),
                            addr: SocketAddr::new(n.ip_like(f.listen.ip()), f.backend_port),
                            role,
                        })
                        .collect()
                }
                (None, _) => {
                    let (role_name, role) = if has_workers {
                        (site::ROLE_WORKER, Role::Worker)
                    } else {
                        (site::ROLE_MASTER, Role::Master)
                    };
                    nodes(role_name)
                        .map(|n| BackendPlan {
                            name: n.name.clone(),
                            addr: SocketAddr::new(n.ip_like(f.listen.ip()), f.backend_port),
                            role,
                        })
                        .collect()
                }
            };
            let mut check = f.check.clone();
            // A verified API or MCS check needs a name in the serving
            // certificate; the node IP usually is not one, api-int is.
            if let CheckKind::Https {
                ca: Some(_),
                server_name: sn @ None,
                ..
            } = &mut check.kind
            {
                if f.backends.is_none() {
                    *sn = Some(format!("api-int.{}", site.cluster.domain()));
                }
            }
            FrontendPlan {
                name: f.name.clone(),
                listen: f.listen,
                balance: f.balance,
                check,
                backends,
            }
        })
        .collect()
}

/// The frontends of a standalone lbd file (its services).
pub fn from_lb(lb: &Lb) -> Vec<FrontendPlan> {
    lb.frontends
        .iter()
        .map(|f| FrontendPlan {
            name: f.name.clone(),
            listen: f.listen,
            balance: f.balance,
            check: f.check.clone(),
            backends: service_backends(f.backends.as_deref().unwrap_or_default()),
        })
        .collect()
}

fn service_backends(addrs: &[SocketAddr]) -> Vec<BackendPlan> {
    addrs
        .iter()
        .map(|a| BackendPlan {
            name: a.to_string(),
            addr: *a,
            role: Role::Service,
        })
        .collect()
}

/// A plan as text: `--check-config` prints it, the golden tests pin it.
pub fn render(plan: &[FrontendPlan]) -> String {
    let mut s = String::new();
    for f in plan {
        let c = &f.check;
        let kind = match &c.kind {
            CheckKind::Tcp => "tcp connect".to_string(),
            CheckKind::Http { path } => format!("http GET {path}"),
            CheckKind::Https {
                path,
                ca,
                server_name,
            } => format!(
                "https GET {path} ({}{})",
                ca.as_ref()
                    .map(|p| format!("CA {}", p.display()))
                    .unwrap_or_else(|| "certificate not verified".into()),
                server_name
                    .as_ref()
                    .map(|n| format!(", name {n}"))
                    .unwrap_or_default()
            ),
        };
        let balance = match f.balance {
            Balance::RoundRobin => "round robin",
            Balance::LeastConn => "least connections",
        };
        let _ = writeln!(s, "frontend {} listen {} ({balance})", f.name, f.listen);
        let _ = writeln!(
            s,
            "  check {kind}{} every {:?} ({:?} while changing), timeout {:?}, rise {}, fall {}",
            c.port.map(|p| format!(" on port {p}")).unwrap_or_default(),
            c.interval,
            c.fast_interval,
            c.timeout,
            c.rise,
            c.fall
        );
        if f.backends.is_empty() {
            let _ = writeln!(s, "  (no backends: every connection is refused)");
        }
        for b in &f.backends {
            let _ = writeln!(
                s,
                "  backend {:<12} {:<21} {}",
                b.name,
                b.addr.to_string(),
                b.role.as_str()
            );
        }
    }
    s
}
