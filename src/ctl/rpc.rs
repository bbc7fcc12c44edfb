//! A blocking JSON-RPC 2.0 client for the daemon's socket: one request per line, one
//! response per line, several requests on one connection.

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use serde_json::Value;

use crate::api::rpc::object;

/// The default socket (CONTRACT.md, Socket API).
pub const DEFAULT_SOCKET: &str = "/var/run/nodeportd/nodeportd.sock";

/// Long enough for a write that waits on flash, short enough that a hung daemon
/// does not hang a script forever.
const TIMEOUT: Duration = Duration::from_secs(60);

/// What a call can end in, besides a result.
#[derive(Debug)]
pub enum CallError {
    /// The server answered with a JSON-RPC error object.
    Server { code: i64, message: String, reason: Option<String> },
    /// No usable answer: connection, I/O or protocol trouble.
    Transport(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // kubectl's wording, so the reason reads as it does there.
            CallError::Server { message, reason: Some(r), .. } => write!(f, "Error from server ({r}): {message}"),
            CallError::Server { code, message, reason: None } => write!(f, "Error from server ({code}): {message}"),
            CallError::Transport(m) => f.write_str(m),
        }
    }
}

pub struct Client {
    path: String,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
    /// The daemon closes a connection after answering an oversized request: the next
    /// call opens a new one.
    closed: bool,
}

impl Client {
    pub fn connect(path: &str) -> Result<Client, CallError> {
        let stream = UnixStream::connect(path).map_err(|e| {
            CallError::Transport(format!("cannot connect to nodeportd at {path}: {e} (is the daemon running?)"))
        })?;
        let io = |e: std::io::Error| CallError::Transport(format!("{path}: {e}"));
        stream.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
        stream.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
        let writer = stream.try_clone().map_err(io)?;
        Ok(Client { path: path.to_string(), reader: BufReader::new(stream), writer, next_id: 1, closed: false })
    }

    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, CallError> {
        let params = serde_json::to_vec(&params).map_err(|e| CallError::Transport(format!("cannot encode: {e}")))?;
        self.call_raw(method, &params)
    }

    /// Like [`Client::call`], with params already encoded as one JSON value (sent as
    /// they are: a batch of objects is not encoded twice).
    pub fn call_raw(&mut self, method: &str, params: &[u8]) -> Result<Value, CallError> {
        if self.closed {
            let next_id = self.next_id;
            *self = Client::connect(&self.path)?;
            self.next_id = next_id;
        }
        let id = self.next_id;
        self.next_id += 1;
        let head = object(vec![("jsonrpc", "2.0".into()), ("id", id.into()), ("method", method.into())]);
        let mut line = serde_json::to_vec(&head).map_err(|e| CallError::Transport(format!("cannot encode: {e}")))?;
        // `{...}` → `{...,"params":PARAMS}`
        line.pop();
        line.extend_from_slice(b",\"params\":");
        line.extend_from_slice(params);
        line.extend_from_slice(b"}\n");
        let io = |e: std::io::Error| CallError::Transport(format!("talking to nodeportd: {e}"));
        // A request over max_request_bytes is answered (TooLarge) and the connection
        // closed before it is all sent: the write then fails, and the answer is read anyway.
        let sent = self.writer.write_all(&line).and_then(|()| self.writer.flush());
        if let Err(e) = &sent {
            self.closed = true;
            if !matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) {
                return Err(CallError::Transport(format!("talking to nodeportd: {e}")));
            }
        }
        let mut reply = String::new();
        let r = match (self.reader.read_line(&mut reply), sent) {
            (Ok(n), _) if n > 0 => parse_response(&reply, id),
            (_, Err(e)) | (Err(e), Ok(())) => Err(io(e)),
            (Ok(_), Ok(())) => Err(CallError::Transport("nodeportd closed the connection without an answer".into())),
        };
        if matches!(&r, Err(CallError::Server { reason: Some(r), .. }) if r == "TooLarge") {
            self.closed = true;
        }
        r
    }
}

/// Interprets one response line for request `id`.
pub fn parse_response(line: &str, id: u64) -> Result<Value, CallError> {
    let bad = |why: &str| CallError::Transport(format!("bad answer from nodeportd ({why}): {}", line.trim_end()));
    let mut v: Value = serde_json::from_str(line).map_err(|_| bad("not JSON"))?;
    if v.get("id").and_then(Value::as_u64) != Some(id) && !v.get("id").is_some_and(Value::is_null) {
        return Err(bad("wrong id"));
    }
    if let Some(err) = v.get("error") {
        return Err(server_error(err));
    }
    v.get_mut("result").map(Value::take).ok_or_else(|| bad("neither result nor error"))
}

/// A JSON-RPC error object (`{"code", "message", "data": {"reason"}}`) as a `CallError`.
pub fn server_error(err: &Value) -> CallError {
    CallError::Server {
        code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
        message: err.get("message").and_then(Value::as_str).unwrap_or("(no message)").to_string(),
        reason: err.pointer("/data/reason").and_then(Value::as_str).map(str::to_string),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn result_is_returned() {
        let r = parse_response(r#"{"jsonrpc":"2.0","id":3,"result":{"items":[]}}"#, 3).unwrap();
        assert_eq!(r, json!({"items": []}));
    }

    #[test]
    fn server_error_keeps_message_and_reason() {
        let line = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Service \"web\" is invalid: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive","data":{"reason":"Invalid"}}}"#;
        let e = parse_response(line, 1).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Error from server (Invalid): Service \"web\" is invalid: spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive"
        );
    }

    #[test]
    fn parse_error_with_null_id_is_reported() {
        let e = parse_response(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#, 4)
            .unwrap_err();
        assert_eq!(e.to_string(), "Error from server (-32700): Parse error");
    }

    #[test]
    fn garbage_and_wrong_ids_are_transport_errors() {
        assert!(matches!(parse_response("hello", 1), Err(CallError::Transport(_))));
        assert!(matches!(parse_response(r#"{"id":2,"result":1}"#, 1), Err(CallError::Transport(_))));
        assert!(matches!(parse_response(r#"{"id":1}"#, 1), Err(CallError::Transport(_))));
    }
}
