//! The Unix socket server: many connections, several requests each, bounded.
//!
//! Nobody can lock the others out (issue 12):
//! * a new connection must send its first complete request within
//!   `first_request_timeout`, and any connection is closed after `idle_timeout` without
//!   a byte;
//! * when `max_connections` are open, a newcomer evicts the longest-idle connection
//!   (one not in the middle of a request) instead of being refused; the last slot is
//!   kept for root, so a flood from one user can never shut root out;
//! * a request line that passes `max_request_bytes` is answered at once (`TooLarge`),
//!   without waiting for its newline, and the connection is closed: the daemon neither
//!   buffers nor reads the rest of it. Each byte is looked at once (no rescanning from
//!   the start of the line).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use futures::future::LocalBoxFuture;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::peer::{self, PeerCred};
use super::rpc::{self, RpcError};
use crate::model::Reason;

/// The outcome of one call.
pub type Reply = Result<Value, RpcError>;

/// What the server calls for each request; runs on the event loop's thread. The future
/// lets a call wait (for a durable write, say) while other connections are served.
pub type Handler = Rc<dyn Fn(&str, rpc::Params, &PeerCred) -> LocalBoxFuture<'static, Reply>>;

/// A handler whose every answer is ready at once.
pub fn sync_handler(f: impl Fn(&str, Value, &PeerCred) -> Reply + 'static) -> Handler {
    Rc::new(move |m: &str, p: rpc::Params, c: &PeerCred| {
        let r = f(m, p.into_value(), c);
        Box::pin(async move { r }) as LocalBoxFuture<'static, Reply>
    })
}

/// How long a new connection may take to send its first complete request.
pub const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_request_bytes: usize,
    pub max_connections: usize,
    pub idle_timeout: Duration,
    pub first_request_timeout: Duration,
}

/// Bind the socket: mode 0660, group `socket_group` when set. A stale socket file
/// from a crashed daemon is replaced; a live one (another daemon) is an error.
pub fn bind(path: &Path, group: Option<u32>) -> io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("{}: another nodeportd is listening there", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    if let Some(gid) = group {
        std::os::unix::fs::chown(path, None, Some(gid))?;
    }
    Ok(listener)
}

/// One open connection as the accept loop sees it.
struct Slot {
    root: bool,
    /// The last byte received or answer sent.
    last_active: Cell<Instant>,
    /// Between a complete request and the end of its answer: never evicted.
    busy: Cell<bool>,
    evict: Notify,
}

/// The open connections, by accept order.
#[derive(Default)]
struct Slots {
    next: u64,
    open: BTreeMap<u64, Rc<Slot>>,
}

/// What to do with a newcomer when the table is full (pure; `serve` acts on it).
#[derive(Debug, PartialEq, Eq)]
enum Admit {
    Yes,
    /// Yes, after closing this (longest-idle) connection.
    Evict(u64),
    No,
}

/// Root may use every slot; others all but the last one (at least one).
fn admit(open: &[(u64, bool, bool, Instant)], newcomer_root: bool, max: usize) -> Admit {
    let max = max.max(1);
    let others_max = if max > 1 { max - 1 } else { 1 };
    let total = open.len();
    let others = open.iter().filter(|(_, root, _, _)| !root).count();
    let full = total >= max || (!newcomer_root && others >= others_max);
    if !full {
        return Admit::Yes;
    }
    // A non-root newcomer may only displace a non-root connection: root's slot stays.
    open.iter()
        .filter(|(_, root, busy, _)| !busy && (newcomer_root || !root))
        .min_by_key(|(id, _, _, last)| (*last, *id))
        .map_or(Admit::No, |(id, _, _, _)| Admit::Evict(*id))
}

/// Removes a connection from the table when its task ends, however it ends.
struct Leave {
    slots: Rc<RefCell<Slots>>,
    id: u64,
}

impl Drop for Leave {
    fn drop(&mut self) {
        self.slots.borrow_mut().open.remove(&self.id);
    }
}

/// Accept connections forever. Must run inside a `LocalSet`.
pub async fn serve(listener: UnixListener, handler: Handler, limits: Limits, group: Option<u32>) {
    let slots: Rc<RefCell<Slots>> = Rc::default();
    let own_uid = peer::own_uid();
    loop {
        let (mut stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                log::warn!("accept on the API socket failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let cred = match peer::peer_cred(&stream) {
            Ok(c) => c,
            Err(e) => {
                log::warn!("SO_PEERCRED failed: {e}");
                continue;
            }
        };
        if !peer::authorized(&cred, group, own_uid) {
            log::warn!("refused API connection from uid {} gid {} pid {}", cred.uid, cred.gid, cred.pid);
            let e = RpcError {
                code: Reason::Unauthorized.code(),
                message: format!(
                    "uid {} is not allowed to use this socket (root, uid {own_uid} or the socket_group only)",
                    cred.uid
                ),
                reason: Some(Reason::Unauthorized.as_str()),
            };
            tokio::task::spawn_local(async move {
                let _ = write_line(&mut stream, &rpc::response_err(Value::Null, &e)).await;
            });
            continue;
        }
        let root = cred.uid == 0;
        let decision = {
            let s = slots.borrow();
            let open: Vec<(u64, bool, bool, Instant)> =
                s.open.iter().map(|(id, sl)| (*id, sl.root, sl.busy.get(), sl.last_active.get())).collect();
            admit(&open, root, limits.max_connections)
        };
        match decision {
            Admit::Yes => {}
            Admit::Evict(id) => {
                if let Some(victim) = slots.borrow_mut().open.remove(&id) {
                    log::debug!("closing the longest-idle API connection to make room");
                    victim.evict.notify_one();
                }
            }
            Admit::No => {
                let e = RpcError {
                    code: Reason::TooLarge.code(),
                    message: format!(
                        "too many connections (max_connections = {}), all of them busy",
                        limits.max_connections
                    ),
                    reason: Some(Reason::TooLarge.as_str()),
                };
                tokio::task::spawn_local(async move {
                    let _ = write_line(&mut stream, &rpc::response_err(Value::Null, &e)).await;
                });
                continue;
            }
        }
        let slot = Rc::new(Slot {
            root,
            last_active: Cell::new(Instant::now()),
            busy: Cell::new(false),
            evict: Notify::new(),
        });
        let id = {
            let mut s = slots.borrow_mut();
            let id = s.next;
            s.next += 1;
            s.open.insert(id, slot.clone());
            id
        };
        let leave = Leave { slots: slots.clone(), id };
        let handler = handler.clone();
        let limits = limits.clone();
        tokio::task::spawn_local(async move {
            let _leave = leave;
            if let Err(e) = connection(stream, &handler, &limits, &cred, &slot).await {
                log::debug!("API connection from pid {} ended: {e}", cred.pid);
            }
        });
    }
}

async fn write_line(stream: &mut UnixStream, v: &Value) -> io::Result<()> {
    let mut bytes = serde_json::to_vec(v).map_err(io::Error::other)?;
    bytes.push(b'\n');
    stream.write_all(&bytes).await
}

/// Serve one connection: read lines, answer each in order. A malformed line gets an
/// error response and the connection stays usable. An oversized one is answered as soon
/// as it passes the limit, and the connection is then closed.
async fn connection(
    mut stream: UnixStream,
    handler: &Handler,
    limits: &Limits,
    cred: &PeerCred,
    slot: &Slot,
) -> io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 16 * 1024];
    // `buf[..scanned]` holds no newline: each byte is searched once.
    let mut scanned = 0usize;
    let first_deadline = Instant::now() + limits.first_request_timeout;
    let mut had_request = false;
    loop {
        let mut start = 0usize;
        while let Some(off) = buf[scanned..].iter().position(|&b| b == b'\n') {
            let end = scanned + off;
            scanned = end + 1;
            let line_start = std::mem::replace(&mut start, scanned);
            if end - line_start > limits.max_request_bytes {
                return refuse_too_large(stream, &mut chunk, limits).await;
            }
            had_request = true;
            slot.busy.set(true);
            if let Some(resp) = answer(&buf[line_start..end], handler, cred).await {
                write_line(&mut stream, &resp).await?;
            }
            slot.busy.set(false);
            slot.last_active.set(Instant::now());
        }
        buf.drain(..start);
        scanned -= start;
        if buf.len() > limits.max_request_bytes {
            // Answer now, without waiting for the newline, and close.
            return refuse_too_large(stream, &mut chunk, limits).await;
        }
        let deadline = if had_request {
            Instant::now() + limits.idle_timeout
        } else {
            first_deadline.min(Instant::now() + limits.idle_timeout)
        };
        let n = tokio::select! {
            r = tokio::time::timeout_at(deadline, stream.read(&mut chunk)) => match r {
                Ok(r) => r?,
                Err(_) => return Ok(()), // idle, or no first request in time: close quietly
            },
            _ = slot.evict.notified() => return Ok(()),
        };
        if n == 0 {
            // EOF: a last request without a trailing newline still gets its answer.
            if buf.iter().any(|b| !b.is_ascii_whitespace()) {
                slot.busy.set(true);
                if let Some(resp) = answer(&buf, handler, cred).await {
                    write_line(&mut stream, &resp).await?;
                }
            }
            return Ok(());
        }
        slot.last_active.set(Instant::now());
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Reads at most this many more chunks of an oversized request before closing.
const DRAIN_CHUNKS: usize = 8;

/// Answer a request over `max_request_bytes` and close the connection. The write side is
/// shut down first, so the client reads the answer and then EOF; what the client already
/// sent is drained (without waiting, and at most `DRAIN_CHUNKS` reads) so that closing
/// does not turn that EOF into a reset.
async fn refuse_too_large(mut stream: UnixStream, chunk: &mut [u8], limits: &Limits) -> io::Result<()> {
    write_line(&mut stream, &rpc::response_err(Value::Null, &too_large(limits))).await?;
    stream.shutdown().await?;
    for _ in 0..DRAIN_CHUNKS {
        match stream.try_read(chunk) {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    Ok(())
}

fn too_large(limits: &Limits) -> RpcError {
    RpcError {
        code: Reason::TooLarge.code(),
        message: format!("request larger than max_request_bytes ({})", limits.max_request_bytes),
        reason: Some(Reason::TooLarge.as_str()),
    }
}

/// Answer one request line; `None` for notifications and blank lines.
pub async fn answer(line: &[u8], handler: &Handler, cred: &PeerCred) -> Option<Value> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(|b| b.is_ascii_whitespace()) {
        return None;
    }
    match rpc::parse_request(line) {
        Err((id, e)) => Some(rpc::response_err(id, &e)),
        Ok(req) => {
            let result = handler(&req.method, req.params, cred).await;
            let id = req.id?;
            Some(match result {
                Ok(v) => rpc::response_ok(id, v),
                Err(e) => rpc::response_err(id, &e),
            })
        }
    }
}

/// The result for an unknown method.
pub fn method_not_found(method: &str) -> RpcError {
    RpcError::new(rpc::METHOD_NOT_FOUND, format!("method not found: {method:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn echo() -> Handler {
        sync_handler(|m: &str, p: Value, _c: &PeerCred| match m {
            "echo" => Ok(p),
            _ => Err(method_not_found(m)),
        })
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        tokio::task::LocalSet::new().block_on(&rt, f)
    }

    fn limits(max_connections: usize) -> Limits {
        Limits {
            max_request_bytes: 1024,
            max_connections,
            idle_timeout: Duration::from_secs(30),
            first_request_timeout: Duration::from_secs(30),
        }
    }

    async fn read_lines(s: &mut UnixStream, want: usize) -> Vec<Value> {
        let mut got = Vec::new();
        let mut lines: Vec<Vec<u8>> = Vec::new();
        while lines.len() < want {
            let mut b = [0u8; 4096];
            let n = s.read(&mut b).await.unwrap();
            assert!(n > 0, "server closed early: {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&b[..n]);
            lines = got.split(|&c| c == b'\n').filter(|l| !l.is_empty()).map(|l| l.to_vec()).collect();
        }
        lines.iter().map(|l| serde_json::from_slice(l).unwrap()).collect()
    }

    /// Whether the server closed the connection (EOF) within `within`.
    async fn closed(s: &mut UnixStream, within: Duration) -> bool {
        let mut b = [0u8; 4096];
        loop {
            match tokio::time::timeout(within, s.read(&mut b)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    }

    fn status_req(id: u32) -> String {
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"echo\",\"params\":{{\"n\":{id}}}}}\n")
    }

    #[test]
    fn answers_and_notifications() {
        block_on(async {
            let h = echo();
            let c = PeerCred { pid: 1, uid: 0, gid: 0 };
            let r = answer(br#"{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}"#, &h, &c).await.unwrap();
            assert_eq!(r["result"], json!({"a": 1}));
            assert!(answer(br#"{"jsonrpc":"2.0","method":"echo"}"#, &h, &c).await.is_none());
            let r = answer(br#"{"jsonrpc":"2.0","id":2,"method":"nope"}"#, &h, &c).await.unwrap();
            assert_eq!(r["error"]["code"], rpc::METHOD_NOT_FOUND);
            assert!(answer(b"   ", &h, &c).await.is_none());
        });
    }

    #[test]
    fn admission_evicts_the_longest_idle_and_keeps_roots_slot() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // (id, root, busy, last_active)
        let open = [(1, false, false, at(5)), (2, false, false, at(1)), (3, false, true, at(0))];
        assert_eq!(admit(&open, false, 8), Admit::Yes);
        // Full for others at max - 1: the longest idle that is not busy goes.
        assert_eq!(admit(&open, false, 4), Admit::Evict(2));
        // Root still has its slot.
        assert_eq!(admit(&open, true, 4), Admit::Yes);
        // All busy: refused.
        let busy = [(1, false, true, at(5)), (2, false, true, at(1))];
        assert_eq!(admit(&busy, false, 3), Admit::No);
        // A non-root newcomer never displaces root; root displaces anyone idle.
        let rooted = [(1, true, false, at(0)), (2, false, false, at(3)), (3, false, false, at(2))];
        assert_eq!(admit(&rooted, false, 3), Admit::Evict(3));
        assert_eq!(admit(&rooted, true, 3), Admit::Evict(1));
        let only_root = [(1, true, false, at(0))];
        assert_eq!(admit(&only_root, false, 1), Admit::No);
        assert_eq!(admit(&[], false, 1), Admit::Yes);
    }

    #[test]
    fn a_full_table_evicts_idle_connections_instead_of_refusing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        block_on(async {
            let l = bind(&path, None).unwrap();
            tokio::task::spawn_local(serve(l, echo(), limits(4), None));
            // Far more idle connections than slots.
            let mut idle = Vec::new();
            for _ in 0..20 {
                idle.push(UnixStream::connect(&path).await.unwrap());
                tokio::task::yield_now().await;
            }
            let mut s = UnixStream::connect(&path).await.unwrap();
            s.write_all(status_req(1).as_bytes()).await.unwrap();
            let r = tokio::time::timeout(Duration::from_secs(2), read_lines(&mut s, 1)).await.unwrap();
            assert_eq!(r[0]["result"]["n"], 1, "{r:?}");
            // The first idle ones were closed to make room.
            assert!(closed(&mut idle[0], Duration::from_secs(2)).await);
        });
    }

    #[test]
    fn a_silent_newcomer_is_closed_after_the_first_request_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        block_on(async {
            let l = bind(&path, None).unwrap();
            let lim = Limits { first_request_timeout: Duration::from_millis(200), ..limits(4) };
            tokio::task::spawn_local(serve(l, echo(), lim, None));
            let mut silent = UnixStream::connect(&path).await.unwrap();
            let mut talker = UnixStream::connect(&path).await.unwrap();
            talker.write_all(status_req(1).as_bytes()).await.unwrap();
            read_lines(&mut talker, 1).await;
            let t = std::time::Instant::now();
            assert!(closed(&mut silent, Duration::from_secs(3)).await);
            assert!(t.elapsed() < Duration::from_secs(2));
            // One that already asked something keeps its connection past the deadline.
            tokio::time::sleep(Duration::from_millis(300)).await;
            talker.write_all(status_req(2).as_bytes()).await.unwrap();
            assert_eq!(read_lines(&mut talker, 1).await[0]["result"]["n"], 2);
        });
    }

    /// Reads until EOF or an error, within `within`: the bytes, and whether it was a
    /// clean EOF (not a reset).
    async fn read_to_eof(s: &mut UnixStream, within: Duration) -> (Vec<u8>, bool) {
        let mut got = Vec::new();
        let mut b = [0u8; 4096];
        loop {
            match tokio::time::timeout(within, s.read(&mut b)).await {
                Ok(Ok(0)) => return (got, true),
                Ok(Ok(n)) => got.extend_from_slice(&b[..n]),
                Ok(Err(_)) => return (got, false),
                Err(_) => panic!("no EOF within {within:?}; got {:?}", String::from_utf8_lossy(&got)),
            }
        }
    }

    #[test]
    fn an_oversized_line_is_answered_and_closed_before_its_newline_arrives() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        block_on(async {
            let l = bind(&path, None).unwrap();
            tokio::task::spawn_local(serve(l, echo(), limits(4), None));
            // A request first: it is answered, in order, before the oversized line.
            let mut s = UnixStream::connect(&path).await.unwrap();
            s.write_all(status_req(1).as_bytes()).await.unwrap();
            // 64 KiB without a newline, and the client then waits: the answer comes while
            // the line is still open, followed at once by a clean EOF (no reset).
            s.write_all(&vec![b'a'; 64 * 1024]).await.unwrap();
            let (got, clean) = read_to_eof(&mut s, Duration::from_secs(2)).await;
            let lines: Vec<Value> = got
                .split(|&c| c == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| serde_json::from_slice(l).unwrap())
                .collect();
            assert_eq!(lines.len(), 2, "{lines:?}");
            assert_eq!(lines[0]["result"]["n"], 1);
            assert_eq!(lines[1]["error"]["data"]["reason"], "TooLarge");
            let m = lines[1]["error"]["message"].as_str().unwrap();
            assert!(m.contains("max_request_bytes (1024)"), "{m}");
            assert!(clean, "the connection was reset instead of closed");
            // Writing on is refused by the closed connection; the server serves others.
            let mut more = Ok(());
            for _ in 0..64 {
                more = s.write_all(&[b'b'; 16 * 1024]).await;
                if more.is_err() {
                    break;
                }
            }
            assert!(more.is_err(), "the server still reads the oversized line");
            let mut t = UnixStream::connect(&path).await.unwrap();
            t.write_all(status_req(3).as_bytes()).await.unwrap();
            assert_eq!(read_lines(&mut t, 1).await[0]["result"]["n"], 3);
            // Just over the limit, newline included in the same read: the same.
            let mut u = UnixStream::connect(&path).await.unwrap();
            let mut line = vec![b'c'; 1025];
            line.push(b'\n');
            line.extend_from_slice(status_req(4).as_bytes());
            u.write_all(&line).await.unwrap();
            let (got, clean) = read_to_eof(&mut u, Duration::from_secs(2)).await;
            let v: Value = serde_json::from_slice(got.strip_suffix(b"\n").unwrap()).unwrap();
            assert_eq!(v["error"]["data"]["reason"], "TooLarge");
            assert!(clean);
            // Exactly at the limit is a request like any other.
            let mut w = UnixStream::connect(&path).await.unwrap();
            let pad = 1024 - status_req(5).len() + 1;
            let at_limit = format!("{}{}", " ".repeat(pad), status_req(5));
            assert_eq!(at_limit.len(), 1025);
            w.write_all(at_limit.as_bytes()).await.unwrap();
            assert_eq!(read_lines(&mut w, 1).await[0]["result"]["n"], 5);
        });
    }

    #[test]
    fn socket_serves_many_requests_and_survives_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        block_on(async {
            let l = bind(&path, None).unwrap();
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o660);
            tokio::task::spawn_local(serve(l, echo(), limits(4), None));
            let mut s = UnixStream::connect(&path).await.unwrap();
            let big = format!("{{\"x\":\"{}\"}}\n", "a".repeat(5000));
            let req = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":{{\"n\":1}}}}\n{{garbage\n{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"echo\"}}\n{big}"
            );
            s.write_all(req.as_bytes()).await.unwrap();
            let v = read_lines(&mut s, 4).await;
            assert_eq!(v[0]["result"]["n"], 1);
            assert_eq!(v[1]["error"]["code"], rpc::PARSE_ERROR);
            assert_eq!(v[2]["id"], 2);
            assert_eq!(v[3]["error"]["data"]["reason"], "TooLarge");
            assert!(closed(&mut s, Duration::from_secs(2)).await);
            // A second daemon on the same socket is refused while the first lives.
            assert!(bind(&path, None).is_err());
        });
    }
}
