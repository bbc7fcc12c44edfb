//! The connection to the API server: TLS (rustls + ring, the CA from `ca_file`), one
//! blocking thread per list/watch stream, updates to the event loop over a channel.
//! The event loop never waits on the network.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use pki_types::pem::PemObject;
use pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use serde_json::Value;
use tokio::sync::mpsc::UnboundedSender;

use super::http::{self, Chunked, Framing, Lines, ServerUrl};
use super::watch::{self, Event, Stream};
use crate::config::{ClusterAuth, ClusterConfig};

/// A TLS connection to the API server.
type Tls = StreamOwned<ClientConnection, TcpStream>;

/// The largest list page or error body read into memory.
const MAX_BODY: u64 = 256 << 20;
/// The largest single watch event.
const MAX_EVENT: usize = 16 << 20;

/// What a stream thread tells the event loop.
#[derive(Debug)]
pub enum Update {
    /// A full list: the mirrored set of the stream becomes exactly these objects.
    Listed { stream: usize, items: Vec<Value>, resource_version: String },
    /// The watch is open: the stream is connected.
    Watching { stream: usize },
    /// A watch event (its resourceVersion, when it has one).
    Event { stream: usize, event: Event, resource_version: Option<String> },
    /// The stream lost its connection or was refused; it retries after a backoff.
    Lost { stream: usize, error: String },
}

/// A request's failure.
#[derive(Debug)]
enum Failure {
    /// The server answered with an HTTP error status (and its Status message).
    Status(u16, String),
    Other(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Status(401, m) => write!(f, "HTTP 401 Unauthorized (token or certificate rejected): {m}"),
            Failure::Status(403, m) => write!(f, "HTTP 403 Forbidden (RBAC: get/list/watch needed): {m}"),
            Failure::Status(c, m) => write!(f, "HTTP {c}: {m}"),
            Failure::Other(m) => f.write_str(m),
        }
    }
}

impl From<String> for Failure {
    fn from(s: String) -> Failure {
        Failure::Other(s)
    }
}

/// Refuses a secret (token, key) that the group or others can read, like ssh does.
pub fn check_secret_mode(key: &str, path: &Path, mode: u32) -> Result<(), String> {
    if mode & 0o077 != 0 {
        return Err(format!(
            "cluster.{key}: {} has mode {:04o}: a secret must not be accessible by group or others (chmod 600 it)",
            path.display(),
            mode & 0o7777
        ));
    }
    Ok(())
}

/// Reads a secret file after checking its mode.
pub fn read_secret(key: &str, path: &Path) -> Result<Vec<u8>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("cluster.{key}: {}: {e}", path.display()))?;
    let md = f.metadata().map_err(|e| format!("cluster.{key}: {}: {e}", path.display()))?;
    check_secret_mode(key, path, md.permissions().mode())?;
    let mut buf = Vec::new();
    (&f).take(1 << 20).read_to_end(&mut buf).map_err(|e| format!("cluster.{key}: {}: {e}", path.display()))?;
    Ok(buf)
}

/// Where a stream is: the resourceVersion to resume from (None: list first), failed
/// attempts since the last watch opened, and 410s in a row with nothing received in
/// between (a relist that does not help is retried after a backoff, never in a loop).
#[derive(Debug, Default)]
struct Progress {
    rv: Option<String>,
    attempt: u32,
    gones: u32,
}

/// What every stream shares.
pub struct Client {
    url: ServerUrl,
    tls: Arc<ClientConfig>,
    cfg: ClusterConfig,
}

impl Client {
    /// Loads the CA and the client credentials; every error names the key and the file.
    pub fn new(cfg: &ClusterConfig) -> Result<Client, String> {
        let url = ServerUrl::parse(&cfg.server).map_err(|e| format!("cluster.server: {e}"))?;
        let ca = std::fs::read(&cfg.ca_file).map_err(|e| format!("cluster.ca_file: {}: {e}", cfg.ca_file.display()))?;
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&ca) {
            let c = c.map_err(|e| format!("cluster.ca_file: {}: {e}", cfg.ca_file.display()))?;
            roots.add(c).map_err(|e| format!("cluster.ca_file: {}: {e}", cfg.ca_file.display()))?;
        }
        if roots.is_empty() {
            return Err(format!("cluster.ca_file: {}: no PEM certificate in it", cfg.ca_file.display()));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots);
        let tls = match &cfg.auth {
            ClusterAuth::Token(path) => {
                // Checked now so a bad file stops the start; read again for every request.
                read_token(path)?;
                builder.with_no_client_auth()
            }
            ClusterAuth::Cert { cert, key } => {
                let pem = std::fs::read(cert).map_err(|e| format!("cluster.cert_file: {}: {e}", cert.display()))?;
                let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("cluster.cert_file: {}: {e}", cert.display()))?;
                if chain.is_empty() {
                    return Err(format!("cluster.cert_file: {}: no PEM certificate in it", cert.display()));
                }
                let key_pem = read_secret("key_file", key)?;
                let k = PrivateKeyDer::from_pem_slice(&key_pem)
                    .map_err(|e| format!("cluster.key_file: {}: {e}", key.display()))?;
                builder
                    .with_client_auth_cert(chain, k)
                    .map_err(|e| format!("cluster.cert_file/key_file: {}: {e}", cert.display()))?
            }
        };
        Ok(Client { url, tls: Arc::new(tls), cfg: cfg.clone() })
    }

    /// Starts one thread per stream; they run for the life of the process.
    pub fn spawn(self, streams: Vec<Stream>, tx: UnboundedSender<Update>) -> Result<(), String> {
        let me = Arc::new(self);
        for (i, s) in streams.into_iter().enumerate() {
            let (me, tx) = (me.clone(), tx.clone());
            std::thread::Builder::new()
                .name(format!("cluster-{i}"))
                .spawn(move || me.run(i, &s, &tx))
                .map_err(|e| format!("cannot start a cluster thread: {e}"))?;
        }
        Ok(())
    }

    /// List, then watch from the list's resourceVersion; relist on 410; back off on errors.
    fn run(&self, id: usize, stream: &Stream, tx: &UnboundedSender<Update>) {
        let mut p = Progress::default();
        let mut rng = crate::alloc::Rng::from_entropy();
        loop {
            let result = match p.rv.clone() {
                None => self.list(stream).map(|(items, v)| {
                    p.rv = Some(v.clone());
                    let _ = tx.send(Update::Listed { stream: id, items, resource_version: v });
                }),
                Some(from) => match self.watch(id, stream, &from, tx, &mut p) {
                    Ok(()) => Ok(()),
                    Err(Failure::Status(410, m)) => {
                        log::info!("cluster: {}: resourceVersion {from} expired ({m}); relisting", stream.describe());
                        p.rv = None;
                        if p.gones > 0 {
                            std::thread::sleep(watch::backoff(p.gones - 1, rng.next_u64()));
                        }
                        p.gones = p.gones.saturating_add(1);
                        Ok(())
                    }
                    Err(e) => Err(e),
                },
            };
            if tx.is_closed() {
                return;
            }
            if let Err(e) = result {
                let error = format!("{}: {e}", stream.describe());
                let _ = tx.send(Update::Lost { stream: id, error });
                std::thread::sleep(watch::backoff(p.attempt, rng.next_u64()));
                p.attempt = p.attempt.saturating_add(1);
            }
        }
    }

    fn connect(&self) -> Result<Tls, String> {
        let timeout = Duration::from_secs(self.cfg.request_timeout_seconds.into());
        let addrs: Vec<_> = (self.url.host.as_str(), self.url.port)
            .to_socket_addrs()
            .map_err(|e| format!("{}: {e}", self.url.authority()))?
            .collect();
        let mut last = format!("{}: no address", self.url.authority());
        let tcp = addrs
            .iter()
            .find_map(|a| match TcpStream::connect_timeout(a, timeout) {
                Ok(t) => Some(t),
                Err(e) => {
                    last = format!("connect to {a}: {e}");
                    None
                }
            })
            .ok_or(last)?;
        let _ = tcp.set_nodelay(true);
        tcp.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
        tcp.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
        let name = ServerName::try_from(self.url.host.clone())
            .map_err(|e| format!("cluster.server: {}: {e}", self.url.host))?;
        let conn = ClientConnection::new(self.tls.clone(), name).map_err(|e| format!("TLS: {e}"))?;
        Ok(StreamOwned::new(conn, tcp))
    }

    /// Sends a GET and reads the response head; the body is left in the returned buffer
    /// and the connection.
    fn get(&self, path: &str, read_timeout: Duration) -> Result<(Tls, Framing, Vec<u8>), Failure> {
        let token = match &self.cfg.auth {
            ClusterAuth::Token(p) => Some(read_token(p)?),
            ClusterAuth::Cert { .. } => None,
        };
        let mut conn = self.connect()?;
        let req = http::get_request(&self.url, path, token.as_deref());
        conn.write_all(req.as_bytes()).map_err(|e| format!("{}: {}", self.url.authority(), tls_error(&e)))?;
        conn.flush().map_err(|e| format!("{}: {}", self.url.authority(), tls_error(&e)))?;
        let mut buf = Vec::new();
        let end = loop {
            if let Some(end) = http::head_end(&buf)? {
                break end;
            }
            read_some(&mut conn, &mut buf)?;
        };
        let head = http::parse_head(&buf[..end])?;
        let rest = buf.split_off(end);
        conn.sock.set_read_timeout(Some(read_timeout)).map_err(|e| e.to_string())?;
        if head.status != 200 {
            let body = read_body(&mut conn, head.framing, rest, 64 << 10).unwrap_or_default();
            let msg = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(200).collect());
            return Err(Failure::Status(head.status, msg));
        }
        Ok((conn, head.framing, rest))
    }

    /// A full list, page by page: the items and the list's resourceVersion.
    fn list(&self, stream: &Stream) -> Result<(Vec<Value>, String), Failure> {
        let mut items = Vec::new();
        let mut cont: Option<String> = None;
        loop {
            let path = stream.list_path(self.cfg.label_selector.as_deref(), cont.as_deref());
            let timeout = Duration::from_secs(self.cfg.request_timeout_seconds.into());
            let (mut conn, framing, rest) = self.get(&path, timeout)?;
            let body = read_body(&mut conn, framing, rest, MAX_BODY)?;
            let mut v: Value = serde_json::from_slice(&body).map_err(|e| format!("list is not JSON: {e}"))?;
            match v.get_mut("items").map(Value::take) {
                Some(Value::Array(a)) => items.extend(a),
                Some(Value::Null) | None => {}
                Some(_) => return Err(Failure::Other("list: items is not an array".into())),
            }
            let rv = v.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("").to_string();
            cont = v.pointer("/metadata/continue").and_then(Value::as_str).filter(|c| !c.is_empty()).map(String::from);
            if cont.is_none() {
                if rv.is_empty() {
                    return Err(Failure::Other("list without metadata.resourceVersion".into()));
                }
                return Ok((items, rv));
            }
        }
    }

    /// One watch request, until the server ends it. Ok: watch again from `rv`.
    fn watch(
        &self,
        id: usize,
        stream: &Stream,
        from: &str,
        tx: &UnboundedSender<Update>,
        p: &mut Progress,
    ) -> Result<(), Failure> {
        let secs = self.cfg.watch_timeout_seconds;
        let path = stream.watch_path(self.cfg.label_selector.as_deref(), from, secs);
        // A silent server is a dead one: bookmarks come at least once a minute.
        let silence = Duration::from_secs(u64::from(secs) + u64::from(self.cfg.request_timeout_seconds));
        let (mut conn, framing, rest) = self.get(&path, silence)?;
        if framing != Framing::Chunked {
            return Err(Failure::Other("watch response is not chunked".into()));
        }
        let _ = tx.send(Update::Watching { stream: id });
        p.attempt = 0;
        let mut chunked = Chunked::default();
        let mut lines = Lines::new(MAX_EVENT);
        let mut payload = Vec::new();
        let mut pending = rest;
        loop {
            payload.clear();
            chunked.push(&pending, &mut payload)?;
            for line in lines.push(&payload)? {
                let event = watch::decode_event(&line)?;
                let resource_version = match &event {
                    Event::Put(o) | Event::Deleted(o) => watch::resource_version(o),
                    Event::Bookmark(v) => Some(v.clone()),
                    Event::Error { code: 410, message } => return Err(Failure::Status(410, message.clone())),
                    Event::Error { code, message } => {
                        return Err(Failure::Other(format!("watch ERROR {code}: {message}")))
                    }
                };
                if let Some(v) = &resource_version {
                    p.rv = Some(v.clone());
                }
                p.gones = 0;
                if tx.send(Update::Event { stream: id, event, resource_version }).is_err() {
                    return Ok(());
                }
            }
            if chunked.done() {
                if lines.pending() {
                    return Err(Failure::Other("watch ended inside an event".into()));
                }
                return Ok(());
            }
            pending.clear();
            if read_some(&mut conn, &mut pending)? == 0 {
                return Err(Failure::Other("connection closed by the server mid-watch".into()));
            }
        }
    }
}

fn read_token(path: &Path) -> Result<String, String> {
    let raw = read_secret("token_file", path)?;
    let t = String::from_utf8(raw).map_err(|_| format!("cluster.token_file: {}: not UTF-8", path.display()))?;
    let t = t.trim();
    if t.is_empty() || t.contains(|c: char| c.is_whitespace() || c.is_control()) {
        return Err(format!("cluster.token_file: {}: not a bearer token (empty or with spaces)", path.display()));
    }
    Ok(t.to_string())
}

fn tls_error(e: &std::io::Error) -> String {
    e.to_string()
}

/// Reads what is available (at least one byte unless the peer closed: then 0).
fn read_some(conn: &mut Tls, buf: &mut Vec<u8>) -> Result<usize, String> {
    let mut tmp = [0u8; 16 * 1024];
    loop {
        match conn.read(&mut tmp) {
            Ok(n) => {
                buf.extend_from_slice(&tmp[..n]);
                return Ok(n);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(0),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return Err("the server went silent (read timeout)".into())
            }
            Err(e) => return Err(tls_error(&e)),
        }
    }
}

/// A whole body, framed by `framing`, at most `max` bytes.
fn read_body(conn: &mut Tls, framing: Framing, mut rest: Vec<u8>, max: u64) -> Result<Vec<u8>, String> {
    match framing {
        Framing::Length(n) => {
            if n > max {
                return Err(format!("response body of {n} bytes is over the limit of {max}"));
            }
            let n = usize::try_from(n).map_err(|_| "response body too large".to_string())?;
            while rest.len() < n {
                if read_some(conn, &mut rest)? == 0 {
                    return Err("connection closed inside the response body".into());
                }
            }
            if rest.len() > n {
                return Err("more bytes than Content-Length".into());
            }
            Ok(rest)
        }
        Framing::Chunked => {
            let mut d = Chunked::default();
            let mut out = Vec::new();
            let mut pending = rest;
            loop {
                d.push(&pending, &mut out)?;
                if out.len() as u64 > max {
                    return Err(format!("response body over the limit of {max} bytes"));
                }
                if d.done() {
                    return Ok(out);
                }
                pending.clear();
                if read_some(conn, &mut pending)? == 0 {
                    return Err("connection closed inside the response body".into());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_readable_by_others_are_refused_naming_file_and_mode() {
        let p = Path::new("/etc/nodeportd/token");
        assert!(check_secret_mode("token_file", p, 0o100600).is_ok());
        assert!(check_secret_mode("token_file", p, 0o100400).is_ok());
        for mode in [0o100640, 0o100604, 0o100644, 0o100660] {
            let e = check_secret_mode("token_file", p, mode).unwrap_err();
            assert!(e.contains("cluster.token_file") && e.contains("/etc/nodeportd/token"), "{e}");
            assert!(e.contains(&format!("{:04o}", mode & 0o7777)), "{e}");
        }
    }

    #[test]
    fn tokens_are_re_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, "abc\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_token(&p).unwrap(), "abc");
        std::fs::write(&p, "rotated").unwrap();
        assert_eq!(read_token(&p).unwrap(), "rotated");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_token(&p).unwrap_err().contains("0644"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&p, "two words").unwrap();
        assert!(read_token(&p).is_err());
    }
}
