//! The sockets behind `spec.healthCheckNodePort`: one TCP listener per health-check
//! port, kept in step with the registry. What a port answers is `healthcheck` (pure);
//! this is the I/O around it.
//!
//! A listener is bound on the wildcard address (the node's addresses come and go), so
//! every accepted connection is checked against the addresses NodePorts answer on and
//! closed at once when it came in elsewhere. The data plane marks new connections to
//! these ports so that the router's firewall lets them in (docs/dataplane.md).

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::State;
use crate::healthcheck::{self, HealthCheck, Parsed};
use crate::model::Backend;

use crate::model::Key;

/// Connections served at once over all health-check ports; more are closed on accept.
pub const MAX_CONNECTIONS: usize = 32;
/// A probe must send its request and take the answer within this time.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a port that could not be bound is tried again.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(10);

/// One health-check port a service asks for.
pub struct Port {
    pub port: u16,
    /// What it answers.
    pub check: HealthCheck,
    /// The accept task; `None` until the port could be bound.
    listener: Option<JoinHandle<()>>,
    /// Why it could not be bound; retried every `RETRY_INTERVAL`.
    pub error: Option<String>,
}

/// The health-check ports, sorted by port. A plain vector: there is one per
/// LoadBalancer + Local service, and it keeps the flash cost down.
pub struct HealthChecks {
    ports: Vec<Port>,
    /// Services to look at again.
    dirty: BTreeSet<Key>,
    all_dirty: bool,
    connections: Rc<Cell<usize>>,
    wake: Rc<Notify>,
}

impl HealthChecks {
    pub fn new() -> HealthChecks {
        HealthChecks {
            ports: Vec::new(),
            dirty: BTreeSet::new(),
            // The first pass looks at every restored service.
            all_dirty: true,
            connections: Rc::new(Cell::new(0)),
            wake: Rc::new(Notify::new()),
        }
    }

    pub fn service_changed(&mut self, key: Key) {
        self.dirty.insert(key);
        self.wake.notify_one();
    }

    /// Every service again (node name or registry replaced, the slow resync).
    pub fn recheck_all(&mut self) {
        self.all_dirty = true;
        self.wake.notify_one();
    }

    /// What a port answers.
    pub fn check(&self, port: u16) -> Option<&HealthCheck> {
        self.ports.binary_search_by_key(&port, |p| p.port).ok().map(|i| &self.ports[i].check)
    }

    fn of_service(&self, key: &Key) -> Option<usize> {
        self.ports.iter().position(|p| p.check.namespace == key.0 && p.check.name == key.1)
    }

    /// Gives a port to a service, or updates what it answers (the listener stays).
    fn set(&mut self, port: u16, check: HealthCheck) {
        match self.ports.binary_search_by_key(&port, |p| p.port) {
            Ok(i) => self.ports[i].check = check,
            Err(i) => self.ports.insert(i, Port { port, check, listener: None, error: None }),
        }
    }

    /// Dropping the accept task drops the listener: the port refuses from now on;
    /// connections already accepted finish within their timeout.
    fn remove(&mut self, i: usize) {
        let p = self.ports.remove(i);
        if let Some(task) = p.listener {
            task.abort();
            log::debug!("closed health check port {}", p.port);
        }
    }

    /// `status.healthChecks`.
    pub fn status_json(&self) -> Value {
        Value::Array(
            self.ports
                .iter()
                .map(|p| {
                    json!({
                        "port": p.port,
                        "namespace": p.check.namespace,
                        "name": p.check.name,
                        "localEndpoints": p.check.local_endpoints,
                        "listening": p.listener.is_some(),
                        "error": p.error,
                    })
                })
                .collect(),
        )
    }
}

impl Default for HealthChecks {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for HealthChecks {
    fn drop(&mut self) {
        for p in &self.ports {
            if let Some(task) = &p.listener {
                task.abort();
            }
        }
    }
}

/// The reconciling task: on every registry change (and every `RETRY_INTERVAL` while a
/// port could not be bound) it recomputes the changed services and opens or closes
/// only their ports.
pub async fn run(st: Rc<RefCell<State>>) {
    let wake = st.borrow().health.wake.clone();
    loop {
        reconcile(&st);
        let retry = st.borrow().health.ports.iter().any(|p| p.error.is_some());
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(RETRY_INTERVAL), if retry => {}
        }
    }
}

fn reconcile(st: &Rc<RefCell<State>>) {
    let mut guard = st.borrow_mut();
    let s = &mut *guard;
    if std::mem::take(&mut s.health.all_dirty) {
        s.health.dirty.clear();
        // Only services with a health-check port need their backends resolved.
        let services: Vec<std::sync::Arc<crate::model::Service>> =
            s.registry.services_with_health_port().filter(|svc| healthcheck::port_of(svc).is_some()).collect();
        let backends: Vec<Vec<Vec<Backend>>> =
            services.iter().map(|svc| s.registry.backends(svc).into_iter().map(|p| p.backends).collect()).collect();
        let desired = healthcheck::desired(
            services.iter().map(|svc| &**svc).zip(backends.iter().map(Vec::as_slice)),
            &s.cfg.node_name,
        );
        let h = &mut s.health;
        let mut i = 0;
        while i < h.ports.len() {
            if desired.binary_search_by_key(&h.ports[i].port, |(p, _)| *p).is_ok() {
                i += 1;
            } else {
                h.remove(i);
            }
        }
        for (port, check) in desired {
            h.set(port, check);
        }
    }
    for key in std::mem::take(&mut s.health.dirty) {
        // Most services have no health-check port: their backends are not looked up.
        let new =
            s.registry.service(&key.0, &key.1).filter(|svc| healthcheck::port_of(svc).is_some()).and_then(|svc| {
                let ports: Vec<Vec<Backend>> = s.registry.backends(&svc).into_iter().map(|p| p.backends).collect();
                healthcheck::for_service(&svc, ports.iter().map(Vec::as_slice), &s.cfg.node_name)
            });
        let h = &mut s.health;
        if let Some(i) = h.of_service(&key) {
            if new.as_ref().map(|(p, _)| *p) != Some(h.ports[i].port) {
                h.remove(i);
            }
        }
        let Some((port, check)) = new else { continue };
        // The allocator never gives one port to two services, but restored state is not
        // checked twice: as in `healthcheck::desired`, the first by name keeps it.
        if h.check(port).is_some_and(|c| (c.namespace.as_str(), c.name.as_str()) < (&key.0, &key.1)) {
            continue;
        }
        h.set(port, check);
    }
    if s.dry_run {
        // A dry run touches neither the kernel's rules nor its sockets.
        return;
    }
    for p in s.health.ports.iter_mut().filter(|p| p.listener.is_none()) {
        let (port, svc) = (p.port, format!("{}/{}", p.check.namespace, p.check.name));
        match bind(port) {
            Ok(listener) => {
                if p.error.take().is_some() {
                    log::info!("health check port {port} of service {svc} is now bound");
                } else {
                    log::debug!("serving the health check of service {svc} on port {port}");
                }
                p.listener = Some(tokio::task::spawn_local(accept_loop(st.clone(), listener, port)));
            }
            Err(e) => {
                let msg = e.to_string();
                if p.error.as_ref() != Some(&msg) {
                    log::warn!(
                        "cannot listen on health check port {port} of service {svc}: {msg} (retrying every {}s)",
                        RETRY_INTERVAL.as_secs()
                    );
                }
                p.error = Some(msg);
            }
        }
    }
}

/// A listener on the wildcard address of both families (`[::]` with IPV6_V6ONLY off),
/// or of IPv4 alone when the kernel has no IPv6.
fn bind(port: u16) -> io::Result<TcpListener> {
    let v6 = listen(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port));
    let std_listener = match v6 {
        Ok(l) => l,
        // Somebody has the port: IPv4 alone would fail the same way, or half succeed.
        Err(e) if matches!(e.kind(), io::ErrorKind::AddrInUse | io::ErrorKind::PermissionDenied) => return Err(e),
        Err(_) => listen(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port))?,
    };
    TcpListener::from_std(std_listener)
}

fn listen(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(false)?;
    }
    // A port closed and opened again must not wait for the old connections' TIME_WAIT.
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(64)?;
    Ok(socket.into())
}

/// Counts a connection for as long as it lives.
struct Slot(Rc<Cell<usize>>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

async fn accept_loop(st: Rc<RefCell<State>>, listener: TcpListener, port: u16) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                log::debug!("health check port {port}: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let slot = {
            let s = st.borrow();
            // Only where NodePorts answer: the listener is on every address, the
            // port is not. An IPv4 connection on the dual-stack socket shows as
            // ::ffff:a.b.c.d.
            let local = stream.local_addr().map(|a| a.ip().to_canonical());
            let allowed = local.is_ok_and(|ip| s.node.current.all().any(|a| a == ip));
            let counter = s.health.connections.clone();
            if !allowed || counter.get() >= MAX_CONNECTIONS {
                None
            } else {
                counter.set(counter.get() + 1);
                Some(Slot(counter))
            }
        };
        let Some(slot) = slot else {
            drop(stream);
            continue;
        };
        tokio::task::spawn_local(serve(st.clone(), stream, port, slot));
    }
}

async fn serve(st: Rc<RefCell<State>>, mut stream: TcpStream, port: u16, _slot: Slot) {
    let _ = tokio::time::timeout(CONNECTION_TIMEOUT, async {
        let mut buf: Vec<u8> = Vec::with_capacity(512);
        let mut chunk = [0u8; 512];
        let answer = loop {
            match healthcheck::parse_request(&buf) {
                Parsed::Incomplete => {}
                Parsed::Error(status) => break healthcheck::error_response(status),
                Parsed::Request(method) => {
                    let s = st.borrow();
                    let Some(hc) = s.health.check(port) else {
                        // The service went away while the request arrived.
                        return;
                    };
                    // kube-proxy reports itself unhealthy when it cannot program the
                    // kernel; so does this, with the data plane's last sync error.
                    let healthy = s.dataplane.last_error.is_none();
                    break healthcheck::response(method, hc, healthy);
                }
            }
            let want = (healthcheck::MAX_REQUEST_BYTES - buf.len()).min(chunk.len());
            match stream.read(&mut chunk[..want]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        if stream.write_all(&answer).await.is_ok() && stream.shutdown().await.is_ok() {
            // Closing with unread bytes (a request body) would send a reset that can
            // destroy the answer at the client: read until it closes, within the timeout.
            while matches!(stream.read(&mut chunk).await, Ok(n) if n > 0) {}
        }
    })
    .await;
}
