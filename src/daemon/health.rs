//! The sockets behind `spec.healthCheckNodePort`: one TCP listener per health-check
//! port, kept in step with the registry. What a port answers is `healthcheck` (pure);
//! this is the I/O around it.
//!
//! A listener is bound on the wildcard address (the node's addresses come and go), so
//! every accepted connection is checked against the addresses NodePorts answer on and
//! closed at once when it came in elsewhere. The data plane marks new connections to
//! these ports so that the router's firewall lets them in (docs/dataplane.md).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
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

type Key = (String, String);

/// Connections served at once over all health-check ports; more are closed on accept.
pub const MAX_CONNECTIONS: usize = 32;
/// A probe must send its request and take the answer within this time.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a port that could not be bound is tried again.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(10);

/// The health-check ports: what they answer, their listeners and bind errors.
pub struct HealthChecks {
    /// What each port answers, from the registry.
    pub desired: BTreeMap<u16, HealthCheck>,
    /// The port each service holds, to find it again when the service changes.
    by_service: BTreeMap<Key, u16>,
    listeners: BTreeMap<u16, JoinHandle<()>>,
    /// Ports that could not be bound, with the error; retried every `RETRY_INTERVAL`.
    pub errors: BTreeMap<u16, String>,
    /// Services to look at again.
    dirty: BTreeSet<Key>,
    all_dirty: bool,
    connections: Rc<Cell<usize>>,
    wake: Rc<Notify>,
}

impl HealthChecks {
    pub fn new() -> HealthChecks {
        HealthChecks {
            desired: BTreeMap::new(),
            by_service: BTreeMap::new(),
            listeners: BTreeMap::new(),
            errors: BTreeMap::new(),
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

    /// `status.healthChecks`.
    pub fn status_json(&self, dry_run: bool) -> Value {
        let ports: BTreeSet<u16> = self.desired.keys().chain(self.errors.keys()).copied().collect();
        Value::Array(
            ports
                .into_iter()
                .map(|port| {
                    let hc = self.desired.get(&port);
                    json!({
                        "port": port,
                        "namespace": hc.map(|h| h.namespace.as_str()),
                        "name": hc.map(|h| h.name.as_str()),
                        "localEndpoints": hc.map(|h| h.local_endpoints),
                        "listening": self.listeners.contains_key(&port) && !dry_run,
                        "error": self.errors.get(&port),
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
        for h in self.listeners.values() {
            h.abort();
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
        let retry = !st.borrow().health.errors.is_empty();
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(RETRY_INTERVAL), if retry => {}
        }
    }
}

fn reconcile(st: &Rc<RefCell<State>>) {
    let mut guard = st.borrow_mut();
    let s = &mut *guard;
    let mut touched: BTreeSet<u16> = s.health.errors.keys().copied().collect();
    if std::mem::take(&mut s.health.all_dirty) {
        s.health.dirty.clear();
        let services = s.registry.list_services(None);
        let backends: Vec<Vec<Vec<Backend>>> =
            services.iter().map(|svc| s.registry.backends(svc).into_iter().map(|p| p.backends).collect()).collect();
        let desired = healthcheck::desired(services.iter().zip(backends.iter().map(Vec::as_slice)), &s.cfg.node_name);
        touched.extend(s.health.desired.keys().chain(desired.keys()));
        s.health.by_service = desired.iter().map(|(p, h)| ((h.namespace.clone(), h.name.clone()), *p)).collect();
        s.health.desired = desired;
    }
    for key in std::mem::take(&mut s.health.dirty) {
        if let Some(old) = s.health.by_service.remove(&key) {
            s.health.desired.remove(&old);
            touched.insert(old);
        }
        let Ok(svc) = s.registry.get_service(&key.0, &key.1) else { continue };
        let ports: Vec<Vec<Backend>> = s.registry.backends(&svc).into_iter().map(|p| p.backends).collect();
        let Some((port, hc)) = healthcheck::for_service(&svc, ports.iter().map(Vec::as_slice), &s.cfg.node_name) else {
            continue;
        };
        // The allocator never gives one port to two services, but restored state is not
        // checked twice: as in `healthcheck::desired`, the first by name keeps it.
        if s.health.desired.get(&port).is_some_and(|h| (h.namespace.as_str(), h.name.as_str()) < (&key.0, &key.1)) {
            continue;
        }
        if let Some(other) = s.health.desired.insert(port, hc) {
            s.health.by_service.remove(&(other.namespace, other.name));
        }
        s.health.by_service.insert(key, port);
        touched.insert(port);
    }
    if s.dry_run {
        // A dry run touches neither the kernel's rules nor its sockets.
        return;
    }
    for port in touched {
        let wanted = s.health.desired.get(&port).map(|h| format!("{}/{}", h.namespace, h.name));
        match (wanted, s.health.listeners.contains_key(&port)) {
            (Some(svc), false) => match bind(port) {
                Ok(listener) => {
                    if s.health.errors.remove(&port).is_some() {
                        log::info!("health check port {port} of service {svc} is now bound");
                    } else {
                        log::debug!("serving the health check of service {svc} on port {port}");
                    }
                    let task = tokio::task::spawn_local(accept_loop(st.clone(), listener, port));
                    s.health.listeners.insert(port, task);
                }
                Err(e) => {
                    let msg = e.to_string();
                    if s.health.errors.get(&port) != Some(&msg) {
                        log::warn!(
                            "cannot listen on health check port {port} of service {svc}: {msg} (retrying every {}s)",
                            RETRY_INTERVAL.as_secs()
                        );
                    }
                    s.health.errors.insert(port, msg);
                }
            },
            (None, true) => {
                if let Some(task) = s.health.listeners.remove(&port) {
                    // Dropping the task drops the listener: the port refuses from now on;
                    // connections already accepted finish within their timeout.
                    task.abort();
                    log::debug!("closed health check port {port}");
                }
            }
            (None, false) => {
                s.health.errors.remove(&port);
            }
            (Some(_), true) => {}
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
                    let Some(hc) = s.health.desired.get(&port) else {
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
        if stream.write_all(&answer).await.is_ok() {
            let _ = stream.shutdown().await;
        }
    })
    .await;
}
