//! A stand-in Kubernetes API server (test code): Services and EndpointSlices served as
//! list and watch over HTTPS with the test CA in tests/fixtures/cluster, as chunked JSON
//! streams, with the faults a real one shows: 410 Gone (as an HTTP status or as an
//! ERROR event), bookmarks, dropped connections and a slow server.
//!
//! Protocol as kube-apiserver speaks it: `GET /api/v1[/namespaces/NS]/services` and
//! `/apis/discovery.k8s.io/v1[/namespaces/NS]/endpointslices`, `limit`/`continue`,
//! `labelSelector` (`key`, `!key`, `key=value`), `watch=1&resourceVersion=RV`.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection, StreamOwned};
use serde_json::{json, Value};

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cluster").join(name)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Res {
    Services,
    Slices,
    Nodes,
}

/// What the stand-in holds and how it misbehaves; change it with [`ApiServer::with`].
#[derive(Default)]
pub struct World {
    pub rv: u64,
    pub objects: BTreeMap<(Res, String, String), Value>,
    /// (rv, resource, type, object)
    pub history: Vec<(u64, Res, &'static str, Value)>,
    /// Watches from a resourceVersion below this get 410 Gone (a list gives the current one).
    pub compacted: u64,
    /// 410 as an ERROR event in a 200 stream instead of an HTTP 410.
    pub gone_as_event: bool,
    /// The bearer token required (None: a client certificate or any token will do).
    pub token: Option<String>,
    /// Pause before every chunk written.
    pub slow: Duration,
    /// Bumped to drop every open watch.
    pub generation: u64,
    pub bookmark_every: Option<Duration>,
    /// Refuse every connection (the server is "down").
    pub down: bool,
    /// Every request: "METHOD PATH auth=TOKEN|cert|none -> STATUS".
    pub log: Vec<String>,
}

struct Shared {
    world: Mutex<World>,
    changed: Condvar,
}

pub struct ApiServer {
    pub port: u16,
    shared: Arc<Shared>,
}

fn tls_config() -> Arc<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(fixture("ca.crt")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .unwrap();
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(fixture("server.crt")).unwrap().map(Result::unwrap).collect();
    let key = PrivateKeyDer::from_pem_file(fixture("server.key")).unwrap();
    Arc::new(
        ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .unwrap(),
    )
}

pub fn service(ns: &str, name: &str, cluster_ip: &str, port: u16, node_port: Option<u16>) -> Value {
    let mut p = json!({"name": "http", "protocol": "TCP", "port": port, "targetPort": 8080});
    let mut spec = json!({"type": "ClusterIP", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip], "ports": []});
    if let Some(np) = node_port {
        p["nodePort"] = json!(np);
        spec["type"] = json!("NodePort");
    }
    spec["ports"] = json!([p]);
    json!({
        "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{ns}-{name}"),
                     "creationTimestamp": "2026-11-23T00:00:00Z",
                     "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
        "spec": spec,
        "status": {"loadBalancer": {}}
    })
}

pub fn node(name: &str, internal_ip: &str, pod_cidr: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
        "status": {"addresses": [{"type": "InternalIP", "address": internal_ip}, {"type": "Hostname", "address": name}],
                   "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320000}]}
    })
}

pub fn slice(ns: &str, service: &str, ips: &[&str], ready: bool) -> Value {
    let eps: Vec<Value> = ips
        .iter()
        .map(|ip| json!({"addresses": [ip], "conditions": {"ready": ready, "serving": ready, "terminating": false}}))
        .collect();
    json!({
        "metadata": {"namespace": ns, "name": format!("{service}-abcde"),
                     "labels": {"kubernetes.io/service-name": service, "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
        "addressType": "IPv4",
        "endpoints": eps,
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}]
    })
}

/// Moves the calling thread into a network namespace (`/var/run/netns/NAME`); sockets it
/// makes afterwards live there.
fn enter_netns(path: &std::path::Path) {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // SAFETY: setns(2) on a valid namespace file descriptor; it changes only this thread.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(rc, 0, "setns {}: {}", path.display(), std::io::Error::last_os_error());
}

impl ApiServer {
    pub fn start(token: Option<&str>) -> ApiServer {
        ApiServer::start_in(None, token)
    }

    /// Listens on 127.0.0.1 inside a network namespace (`/var/run/netns/NAME`), or here.
    pub fn start_in(netns: Option<&std::path::Path>, token: Option<&str>) -> ApiServer {
        let listener = match netns {
            None => TcpListener::bind("127.0.0.1:0").unwrap(),
            Some(p) => {
                let p = p.to_path_buf();
                std::thread::spawn(move || {
                    enter_netns(&p);
                    TcpListener::bind("127.0.0.1:0").unwrap()
                })
                .join()
                .unwrap()
            }
        };
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            world: Mutex::new(World { rv: 100, token: token.map(String::from), ..World::default() }),
            changed: Condvar::new(),
        });
        let tls = tls_config();
        let sh = shared.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(tcp) = conn else { continue };
                if sh.world.lock().unwrap().down {
                    drop(tcp);
                    continue;
                }
                let (sh, tls) = (sh.clone(), tls.clone());
                std::thread::spawn(move || serve(&sh, tls, tcp));
            }
        });
        ApiServer { port, shared }
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    pub fn with<T>(&self, f: impl FnOnce(&mut World) -> T) -> T {
        let out = f(&mut self.shared.world.lock().unwrap());
        self.shared.changed.notify_all();
        out
    }

    /// Creates or updates an object; returns its resourceVersion.
    pub fn put(&self, res: Res, mut obj: Value) -> u64 {
        self.with(|w| {
            w.rv += 1;
            obj["metadata"]["resourceVersion"] = json!(w.rv.to_string());
            let ns = obj["metadata"]["namespace"].as_str().unwrap_or("default").to_string();
            let name = obj["metadata"]["name"].as_str().unwrap().to_string();
            let kind = if w.objects.insert((res, ns, name), obj.clone()).is_some() { "MODIFIED" } else { "ADDED" };
            w.history.push((w.rv, res, kind, obj));
            w.rv
        })
    }

    pub fn delete(&self, res: Res, ns: &str, name: &str) -> u64 {
        self.with(|w| {
            let mut obj = w.objects.remove(&(res, ns.to_string(), name.to_string())).expect("delete: no such object");
            w.rv += 1;
            obj["metadata"]["resourceVersion"] = json!(w.rv.to_string());
            w.history.push((w.rv, res, "DELETED", obj));
            w.rv
        })
    }

    /// Drops every open watch connection (no TLS close_notify, no last chunk).
    pub fn drop_watches(&self) {
        self.with(|w| w.generation += 1);
    }

    /// Forgets the history: every watch from before now gets 410 Gone.
    pub fn compact(&self) {
        self.with(|w| w.compacted = w.rv);
    }

    pub fn requests(&self) -> Vec<String> {
        self.with(|w| w.log.clone())
    }
}

fn query(q: &str, key: &str) -> Option<String> {
    q.split('&').find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('='))).map(decode)
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let h = u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap(), 16).unwrap();
            out.push(h);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

fn selected(obj: &Value, selector: &str) -> bool {
    let labels = &obj["metadata"]["labels"];
    selector.split(',').filter(|t| !t.is_empty()).all(|t| {
        if let Some(k) = t.strip_prefix('!') {
            labels.get(k).is_none()
        } else if let Some((k, v)) = t.split_once('=') {
            labels.get(k).and_then(Value::as_str) == Some(v)
        } else {
            labels.get(t).is_some()
        }
    })
}

/// (resource, namespace) of a path.
fn route(path: &str) -> Option<(Res, Option<String>)> {
    let (base, rest) = if let Some(r) = path.strip_prefix("/api/v1") {
        (Res::Services, r)
    } else {
        (Res::Slices, path.strip_prefix("/apis/discovery.k8s.io/v1")?)
    };
    let (ns, plural) = match rest.strip_prefix("/namespaces/") {
        Some(r) => {
            let (ns, p) = r.split_once('/')?;
            (Some(ns.to_string()), format!("/{p}"))
        }
        None => (None, rest.to_string()),
    };
    match (base, plural.as_str()) {
        (Res::Services, "/services") | (Res::Slices, "/endpointslices") => Some((base, ns)),
        (Res::Services, "/nodes") if ns.is_none() => Some((Res::Nodes, None)),
        _ => None,
    }
}

type Tls = StreamOwned<ServerConnection, TcpStream>;

fn write_chunk(sh: &Shared, s: &mut Tls, data: &[u8]) -> std::io::Result<()> {
    let slow = sh.world.lock().unwrap().slow;
    for piece in data.chunks(700) {
        if !slow.is_zero() {
            std::thread::sleep(slow);
        }
        s.write_all(format!("{:x}\r\n", piece.len()).as_bytes())?;
        s.write_all(piece)?;
        s.write_all(b"\r\n")?;
        s.flush()?;
    }
    Ok(())
}

fn status_response(s: &mut Tls, code: u16, reason: &str, message: &str) {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason, "code": code}).to_string();
    let _ = write!(
        s,
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = s.flush();
}

fn serve(sh: &Shared, tls: Arc<ServerConfig>, tcp: TcpStream) {
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(conn) = ServerConnection::new(tls) else { return };
    let mut s = StreamOwned::new(conn, tcp);
    let mut head = Vec::new();
    let mut b = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let first = text.lines().next().unwrap_or("").to_string();
    let target = first.split(' ').nth(1).unwrap_or("").to_string();
    let token = text.lines().find_map(|l| l.strip_prefix("Authorization: Bearer ")).map(str::to_string);
    let cert = s.conn.peer_certificates().is_some_and(|c| !c.is_empty());
    let (path, q) = target.split_once('?').unwrap_or((&target, ""));
    let auth = match (&token, cert) {
        (Some(t), _) => t.clone(),
        (None, true) => "cert".into(),
        (None, false) => "none".into(),
    };
    let required = sh.world.lock().unwrap().token.clone();
    let authorised = match &required {
        Some(t) => token.as_deref() == Some(t.as_str()),
        None => token.is_some() || cert,
    };
    let log =
        |sh: &Shared, status: u16| sh.world.lock().unwrap().log.push(format!("GET {target} auth={auth} -> {status}"));
    if !authorised {
        log(sh, 401);
        return status_response(&mut s, 401, "Unauthorized", "Unauthorized");
    }
    let Some((res, ns)) = route(path) else {
        log(sh, 404);
        return status_response(&mut s, 404, "NotFound", "the server could not find the requested resource");
    };
    let selector = query(q, "labelSelector").unwrap_or_default();
    let wanted = |r: Res, obj: &Value| {
        r == res
            && ns.as_deref().is_none_or(|n| obj["metadata"]["namespace"].as_str() == Some(n))
            && selected(obj, &selector)
    };
    if query(q, "watch").as_deref() == Some("1") {
        let from: u64 = query(q, "resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
        let timeout = Duration::from_secs(query(q, "timeoutSeconds").and_then(|v| v.parse().ok()).unwrap_or(300));
        let (compacted, as_event, generation, bookmark_every) = {
            let w = sh.world.lock().unwrap();
            (w.compacted, w.gone_as_event, w.generation, w.bookmark_every)
        };
        let gone = from < compacted;
        log(sh, if gone && !as_event { 410 } else { 200 });
        if gone && !as_event {
            return status_response(&mut s, 410, "Expired", &format!("too old resource version: {from} ({compacted})"));
        }
        if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            .is_err()
        {
            return;
        }
        if gone {
            let ev = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": format!("too old resource version: {from} ({compacted})"), "reason": "Expired", "code": 410}});
            let _ = write_chunk(sh, &mut s, format!("{ev}\n").as_bytes());
            let _ = s.write_all(b"0\r\n\r\n");
            let _ = s.flush();
            return;
        }
        let start = Instant::now();
        let mut sent = from;
        let mut last_bookmark = Instant::now();
        loop {
            let (events, now_rv, dropped) = {
                let w = sh.world.lock().unwrap();
                let w = if w.rv <= sent && w.generation == generation && !w.down {
                    sh.changed.wait_timeout(w, Duration::from_millis(50)).unwrap().0
                } else {
                    w
                };
                let evs: Vec<(u64, String)> = w
                    .history
                    .iter()
                    .filter(|(rv, r, _, o)| *rv > sent && wanted(*r, o))
                    .map(|(rv, _, t, o)| (*rv, format!("{}\n", json!({"type": t, "object": o}))))
                    .collect();
                (evs, w.rv, w.generation != generation || w.down)
            };
            if dropped {
                // Gone without a goodbye: no last chunk, no close_notify.
                let _ = s.sock.shutdown(Shutdown::Both);
                return;
            }
            for (_, line) in events {
                if write_chunk(sh, &mut s, line.as_bytes()).is_err() {
                    return;
                }
            }
            sent = sent.max(now_rv);
            if bookmark_every.is_some_and(|e| last_bookmark.elapsed() >= e) {
                last_bookmark = Instant::now();
                let kind = match res {
                    Res::Services => "Service",
                    Res::Slices => "EndpointSlice",
                    Res::Nodes => "Node",
                };
                let ev = json!({"type": "BOOKMARK", "object": {"kind": kind, "metadata": {"resourceVersion": now_rv.to_string()}}});
                if write_chunk(sh, &mut s, format!("{ev}\n").as_bytes()).is_err() {
                    return;
                }
                sent = sent.max(now_rv);
            }
            if start.elapsed() >= timeout {
                let _ = s.write_all(b"0\r\n\r\n");
                let _ = s.flush();
                return;
            }
        }
    }
    // A list, paged.
    let limit: usize = query(q, "limit").and_then(|v| v.parse().ok()).unwrap_or(usize::MAX);
    let offset: usize = query(q, "continue").and_then(|v| v.parse().ok()).unwrap_or(0);
    let (items, rv) = {
        let w = sh.world.lock().unwrap();
        let all: Vec<Value> = w.objects.iter().filter(|((r, _, _), o)| wanted(*r, o)).map(|(_, o)| o.clone()).collect();
        (all, w.rv)
    };
    let page: Vec<Value> = items.iter().skip(offset).take(limit).cloned().collect();
    let cont = if offset + page.len() < items.len() { (offset + page.len()).to_string() } else { String::new() };
    let kind = match res {
        Res::Services => "ServiceList",
        Res::Slices => "EndpointSliceList",
        Res::Nodes => "NodeList",
    };
    let body = json!({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": rv.to_string(), "continue": cont}, "items": page}).to_string();
    log(sh, 200);
    if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").is_err()
    {
        return;
    }
    if write_chunk(sh, &mut s, body.as_bytes()).is_err() {
        return;
    }
    let _ = s.write_all(b"0\r\n\r\n");
    let _ = s.flush();
    s.conn.send_close_notify();
    let _ = s.flush();
}
