//! Making a plan live: bind what is new, carry over or create each
//! frontend and its pool (starting the accept loop and the health checks of
//! what is new), drain what went away. The one module that starts lbd's
//! loops; the data it works on (`state`) knows none of them.
//!
//! Invariants (with `state`'s):
//! - `apply` binds every new listener before changing anything, so a plan
//!   that cannot be served leaves the old one in place.
//! - A frontend whose name and listen address survive a reload keeps its
//!   listener: no connection is refused across a reload.

use crate::health;
use crate::plan::FrontendPlan;
use crate::state::{bind, lock, App, ApplyError, Backend, Frontend};
use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tracing::{info, warn};

impl App {
    /// Makes `plan` live. `listeners` are pre-bound sockets by frontend name
    /// (from `main` or tests); other new frontends are bound here. On error
    /// nothing has changed.
    pub async fn apply(
        self: &Arc<Self>,
        plan: &[FrontendPlan],
        listeners: &mut HashMap<String, TcpListener>,
        why: &str,
    ) -> Result<(), ApplyError> {
        let _serial = self.apply_lock.lock().await;
        let old = self.frontends.load_full();
        // 1. Bind what is new, before touching anything.
        let mut bound: HashMap<String, TcpListener> = HashMap::new();
        for f in plan {
            if old
                .iter()
                .any(|o| *o.name == *f.name && o.listen == f.listen)
            {
                continue;
            }
            let l = match listeners.remove(&f.name) {
                Some(l) => l,
                None => bind(f.listen).map_err(|e| ApplyError::Bind {
                    name: f.name.clone(),
                    addr: f.listen,
                    source: e,
                })?,
            };
            // Accepted sockets inherit TCP_NODELAY: one setsockopt per
            // listener instead of one per connection.
            let _ = socket2::SockRef::from(&l).set_tcp_nodelay(true);
            bound.insert(f.name.clone(), l);
        }
        // 2. Carry over or create each frontend; its pool keeps the backends
        //    it still has (state, counters and open connections with them).
        let mut next = Vec::new();
        for f in plan {
            let fe = match old
                .iter()
                .find(|o| *o.name == *f.name && o.listen == f.listen)
            {
                Some(fe) => {
                    *lock(&fe.balance) = f.balance;
                    Arc::clone(fe)
                }
                None => {
                    let listener = bound.remove(&f.name).expect("bound in step 1");
                    let local = listener.local_addr().unwrap_or(f.listen);
                    let fe = Arc::new(Frontend::new(f, local, self.shutdown.child_token()));
                    info!(frontend = %fe.name, addr = %local, backends = f.backends.len(), "listening");
                    self.tracker.spawn(crate::proxy::accept_loop(
                        listener,
                        Arc::clone(&fe),
                        Arc::clone(self),
                    ));
                    fe
                }
            };
            let current = fe.pool.load_full();
            // By address, so that carrying a pool over is linear in its
            // backends (a site of 50 000 workers is one ingress pool).
            let by_addr: std::collections::HashMap<_, _> =
                current.iter().map(|c| (c.addr, c)).collect();
            let mut pool = Vec::new();
            for b in &f.backends {
                match by_addr.get(&b.addr) {
                    Some(c) => {
                        if *c.check() != f.check {
                            c.check.store(Arc::new(f.check.clone()));
                        }
                        pool.push(Arc::clone(c));
                    }
                    None => {
                        let nb = Arc::new(Backend::new(
                            b,
                            f.check.clone(),
                            &self.shutdown,
                            &self.conn_stop,
                        ));
                        info!(frontend = %fe.name, backend = %nb.name, addr = %nb.addr, role = nb.role.as_str(), "backend added ({why})");
                        self.tracker.spawn(health::check_loop(
                            Arc::clone(&fe.name),
                            Arc::clone(&nb),
                            Arc::clone(&self.prober),
                            nb.stop_checks.clone(),
                        ));
                        pool.push(nb);
                    }
                }
            }
            let kept: std::collections::HashSet<*const Backend> =
                pool.iter().map(Arc::as_ptr).collect();
            let gone: Vec<_> = current
                .iter()
                .filter(|c| !kept.contains(&Arc::as_ptr(c)))
                .cloned()
                .collect();
            fe.pool.store(Arc::new(pool));
            for b in gone {
                self.drain(&fe, b, why);
            }
            next.push(fe);
        }
        // 3. Frontends no longer planned (or moved) stop accepting; their
        //    open connections drain.
        for o in old.iter() {
            if !next.iter().any(|n| Arc::ptr_eq(n, o)) {
                info!(frontend = %o.name, addr = %o.local, "frontend removed: no longer accepting ({why})");
                o.stop.cancel();
                for b in o.pool.swap(Arc::new(Vec::new())).iter() {
                    self.drain(o, Arc::clone(b), why);
                }
            }
        }
        self.frontends.store(Arc::new(next));
        Ok(())
    }

    /// Takes `b` out of service: no new connections; open ones go on until
    /// they end or the drain deadline, then the backend is forgotten.
    fn drain(self: &Arc<Self>, fe: &Arc<Frontend>, b: Arc<Backend>, why: &str) {
        b.draining.store(true, Relaxed);
        *lock(&b.reason) = format!("draining: {why}");
        let deadline = **self.drain_timeout.load();
        info!(frontend = %fe.name, backend = %b.name, addr = %b.addr, active = b.active.load(Relaxed), ?deadline, "backend draining ({why})");
        lock(&fe.draining).push(Arc::clone(&b));
        let fe = Arc::clone(fe);
        let why = why.to_string();
        let shutdown = self.shutdown.clone();
        self.tracker.spawn(async move {
            let end = Instant::now() + deadline;
            while b.active.load(Relaxed) > 0 && Instant::now() < end && !shutdown.is_cancelled() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let left = b.active.load(Relaxed);
            if left > 0 && !shutdown.is_cancelled() {
                warn!(frontend = %fe.name, backend = %b.name, open = left, "drain deadline reached; closing the backend's remaining connections");
            }
            if !shutdown.is_cancelled() {
                b.close_now.cancel();
            }
            b.stop_checks.cancel();
            lock(&fe.draining).retain(|x| !Arc::ptr_eq(x, &b));
            info!(frontend = %fe.name, backend = %b.name, addr = %b.addr, "backend removed ({why})");
        });
    }
}
