//! The Unix socket server: many connections, several requests each, bounded.

use std::cell::Cell;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use super::peer::{self, PeerCred};
use super::rpc::{self, RpcError};
use crate::model::Reason;

/// What the server calls for each request; runs on the event loop's thread.
pub type Handler = Rc<dyn Fn(&str, Value, &PeerCred) -> Result<Value, RpcError>>;

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_request_bytes: usize,
    pub max_connections: usize,
    pub idle_timeout: Duration,
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

/// Accept connections forever. Must run inside a `LocalSet`.
pub async fn serve(listener: UnixListener, handler: Handler, limits: Limits, group: Option<u32>) {
    let active = Rc::new(Cell::new(0usize));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                log::warn!("accept on the API socket failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let handler = handler.clone();
        let limits = limits.clone();
        let active = active.clone();
        tokio::task::spawn_local(async move {
            let cred = match peer::peer_cred(&stream) {
                Ok(c) => c,
                Err(e) => {
                    log::warn!("SO_PEERCRED failed: {e}");
                    return;
                }
            };
            let mut stream = stream;
            if !peer::authorized(&cred, group) {
                log::warn!("refused API connection from uid {} gid {} pid {}", cred.uid, cred.gid, cred.pid);
                let e = RpcError {
                    code: Reason::Unauthorized.code(),
                    message: format!(
                        "uid {} is not allowed to use this socket (root or the socket_group only)",
                        cred.uid
                    ),
                    reason: Some(Reason::Unauthorized.as_str()),
                };
                let _ = write_line(&mut stream, &rpc::response_err(Value::Null, &e)).await;
                return;
            }
            if active.get() >= limits.max_connections {
                let e = RpcError {
                    code: Reason::TooLarge.code(),
                    message: format!("too many connections (max_connections = {})", limits.max_connections),
                    reason: Some(Reason::TooLarge.as_str()),
                };
                let _ = write_line(&mut stream, &rpc::response_err(Value::Null, &e)).await;
                return;
            }
            active.set(active.get() + 1);
            if let Err(e) = connection(stream, &handler, &limits, &cred).await {
                log::debug!("API connection from pid {} ended: {e}", cred.pid);
            }
            active.set(active.get() - 1);
        });
    }
}

async fn write_line(stream: &mut UnixStream, v: &Value) -> io::Result<()> {
    let mut bytes = serde_json::to_vec(v).map_err(io::Error::other)?;
    bytes.push(b'\n');
    stream.write_all(&bytes).await
}

/// Serve one connection: read lines, answer each. A malformed or oversized line gets
/// an error response and the connection stays usable.
async fn connection(mut stream: UnixStream, handler: &Handler, limits: &Limits, cred: &PeerCred) -> io::Result<()> {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 16 * 1024];
    // When a line grew past the limit: skip until its newline, then answer once.
    let mut discarding = false;
    loop {
        while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            if discarding || line.len() > limits.max_request_bytes + 1 {
                discarding = false;
                let e = too_large(limits);
                write_line(&mut stream, &rpc::response_err(Value::Null, &e)).await?;
                continue;
            }
            if let Some(resp) = answer(&line[..line.len() - 1], handler, cred) {
                write_line(&mut stream, &resp).await?;
            }
        }
        if buf.len() > limits.max_request_bytes {
            discarding = true;
            buf.clear();
        }
        let n = match tokio::time::timeout(limits.idle_timeout, stream.read(&mut chunk)).await {
            Ok(r) => r?,
            Err(_) => return Ok(()), // idle: close quietly
        };
        if n == 0 {
            // EOF: a last request without a trailing newline still gets its answer.
            if !discarding && buf.iter().any(|b| !b.is_ascii_whitespace()) {
                let line = std::mem::take(&mut buf);
                if let Some(resp) = answer(&line, handler, cred) {
                    write_line(&mut stream, &resp).await?;
                }
            }
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn too_large(limits: &Limits) -> RpcError {
    RpcError {
        code: Reason::TooLarge.code(),
        message: format!("request larger than max_request_bytes ({})", limits.max_request_bytes),
        reason: Some(Reason::TooLarge.as_str()),
    }
}

/// Answer one request line; `None` for notifications and blank lines.
pub fn answer(line: &[u8], handler: &Handler, cred: &PeerCred) -> Option<Value> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(|b| b.is_ascii_whitespace()) {
        return None;
    }
    match rpc::parse_request(line) {
        Err((id, e)) => Some(rpc::response_err(id, &e)),
        Ok(req) => {
            let result = handler(&req.method, req.params, cred);
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
        Rc::new(|m: &str, p: Value, _c: &PeerCred| match m {
            "echo" => Ok(p),
            _ => Err(method_not_found(m)),
        })
    }

    #[test]
    fn answers_and_notifications() {
        let h = echo();
        let c = PeerCred { pid: 1, uid: 0, gid: 0 };
        let r = answer(br#"{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}"#, &h, &c).unwrap();
        assert_eq!(r["result"], json!({"a": 1}));
        assert!(answer(br#"{"jsonrpc":"2.0","method":"echo"}"#, &h, &c).is_none());
        let r = answer(br#"{"jsonrpc":"2.0","id":2,"method":"nope"}"#, &h, &c).unwrap();
        assert_eq!(r["error"]["code"], rpc::METHOD_NOT_FOUND);
        assert!(answer(b"   ", &h, &c).is_none());
    }

    #[test]
    fn socket_serves_many_requests_and_survives_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async {
            let l = bind(&path, None).unwrap();
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o660);
            let limits = Limits { max_request_bytes: 1024, max_connections: 4, idle_timeout: Duration::from_secs(5) };
            tokio::task::spawn_local(serve(l, echo(), limits, None));
            let mut s = UnixStream::connect(&path).await.unwrap();
            let big = format!("{{\"x\":\"{}\"}}\n", "a".repeat(5000));
            let req = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"echo\",\"params\":{{\"n\":1}}}}\n{{garbage\n{big}{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"echo\"}}\n"
            );
            s.write_all(req.as_bytes()).await.unwrap();
            let mut got = Vec::new();
            let mut lines = Vec::new();
            while lines.len() < 4 {
                let mut b = [0u8; 4096];
                let n = s.read(&mut b).await.unwrap();
                assert!(n > 0, "server closed early: {:?}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&b[..n]);
                lines = got.split(|&c| c == b'\n').filter(|l| !l.is_empty()).map(|l| l.to_vec()).collect();
            }
            let v: Vec<Value> = lines.iter().map(|l| serde_json::from_slice(l).unwrap()).collect();
            assert_eq!(v[0]["result"]["n"], 1);
            assert_eq!(v[1]["error"]["code"], rpc::PARSE_ERROR);
            assert_eq!(v[2]["error"]["data"]["reason"], "TooLarge");
            assert_eq!(v[3]["id"], 2);
            // A second daemon on the same socket is refused while the first lives.
            assert!(bind(&path, None).is_err());
        });
    }
}
