//! The connection to ubusd, on the event loop: connect, take HELLO, register the object,
//! answer INVOKEs, send events; when ubusd goes away, reconnect with backoff.
//!
//! Every wait is an await with a timeout, so a slow or stuck ubusd holds up this task
//! only, never the loop; method calls run the same synchronous handler the socket API
//! runs.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::msg::{self, attr, kind, status, ProtoError};
use super::object::{self, OBJECT};
use super::{Call, Queue, Setting, DEFAULT_SOCKETS};

const MIN_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Keep the object registered for as long as the daemon runs (returns at once for `off`).
pub async fn run(setting: Setting, call: Call, events: Rc<Queue>) {
    let mut backoff = MIN_BACKOFF;
    // Repeated failures are logged once, until something changes.
    let mut last_problem = String::new();
    loop {
        let path = match &setting {
            Setting::Off => return,
            Setting::Auto => DEFAULT_SOCKETS.iter().map(Path::new).find(|p| p.exists()).map(Path::to_path_buf),
            Setting::Path(p) => Some(p.clone()),
        };
        let problem = match path {
            None => format!("no ubusd socket at {}; waiting for one", DEFAULT_SOCKETS.join(" or ")),
            Some(path) => {
                let mut registered = None;
                let r = session(&path, &call, &events, &mut registered).await;
                if let Some(at) = registered {
                    // It worked for a while: ubusd restarted, come back quickly.
                    backoff = MIN_BACKOFF;
                    last_problem.clear();
                    let why = match r {
                        Ok(()) => "ubusd closed the connection".to_string(),
                        Err(e) => e,
                    };
                    log::warn!(
                        "ubus: {why} after {} s; registering {OBJECT} again when ubusd is back",
                        at.elapsed().as_secs()
                    );
                    String::new()
                } else {
                    format!("{}: {}", path.display(), r.err().unwrap_or_else(|| "closed".into()))
                }
            }
        };
        if !problem.is_empty() && problem != last_problem {
            // Without ubusd at its usual place, `auto` means there is none to use: say it once, quietly.
            if setting == Setting::Auto {
                log::info!("ubus: {problem}");
            } else {
                log::warn!("ubus: {problem} (retrying)");
            }
            last_problem = problem;
        }
        idle(backoff, &events).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Wait, dropping the events that come meanwhile: ubus has nobody to give them to.
async fn idle(d: Duration, events: &Queue) {
    events.clear();
    let sleep = tokio::time::sleep(d);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            _ = &mut sleep => return,
            _ = events.ready() => events.clear(),
        }
    }
}

/// Reads whole messages from the stream; cancel-safe (bytes stay in `buf`).
#[derive(Default)]
struct Reader {
    buf: Vec<u8>,
}

impl Reader {
    async fn next(&mut self, s: &mut UnixStream) -> Result<Vec<u8>, String> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some(n) = msg::frame_len(&self.buf).map_err(|e| e.to_string())? {
                if self.buf.len() >= n {
                    return Ok(self.buf.drain(..n).collect());
                }
            }
            let n = s.read(&mut chunk).await.map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("ubusd closed the connection".into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

async fn write(s: &mut UnixStream, bytes: &[u8]) -> Result<(), String> {
    match tokio::time::timeout(WRITE_TIMEOUT, s.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("write: {e}")),
        Err(_) => Err(format!("write: ubusd did not take a message in {} s", WRITE_TIMEOUT.as_secs())),
    }
}

fn proto(e: ProtoError) -> String {
    e.to_string()
}

enum Step {
    Frame(Vec<u8>),
    Events,
}

/// One connection. `registered` is set once ubusd has the object.
async fn session(path: &PathBuf, call: &Call, events: &Queue, registered: &mut Option<Instant>) -> Result<(), String> {
    let mut s = UnixStream::connect(path).await.map_err(|e| format!("connect: {e}"))?;
    let mut rd = Reader::default();
    let hello = tokio::time::timeout(HELLO_TIMEOUT, rd.next(&mut s))
        .await
        .map_err(|_| format!("no HELLO from ubusd in {} s", HELLO_TIMEOUT.as_secs()))??;
    let hello = msg::decode(&hello).map_err(proto)?;
    if hello.hdr.kind != kind::HELLO {
        return Err(format!("expected HELLO from ubusd, got a message of type {}", hello.hdr.kind));
    }
    let mut seq: u16 = 1;
    let add_seq = seq;
    write(&mut s, &msg::add_object(add_seq, OBJECT, &object::signature()).map_err(proto)?).await?;
    let mut obj: Option<u32> = None;
    let mut subscribers = false;
    loop {
        let step = tokio::select! {
            f = rd.next(&mut s) => Step::Frame(f?),
            _ = events.ready(), if registered.is_some() => Step::Events,
        };
        match step {
            Step::Events => {
                let Some(id) = obj else { continue };
                while let Some(ev) = events.pop() {
                    seq = seq.wrapping_add(1);
                    match msg::send_event(seq, ev.id, &ev.data) {
                        Ok(m) => write(&mut s, &m).await?,
                        Err(e) => log::warn!("ubus: event {} not sent: {e}", ev.id),
                    }
                    if subscribers {
                        seq = seq.wrapping_add(1);
                        let kind = ev.id.strip_prefix("nodeportd.").unwrap_or(ev.id);
                        if let Ok(m) = msg::notify(seq, id, kind, &ev.data) {
                            write(&mut s, &m).await?;
                        }
                    }
                }
            }
            Step::Frame(frame) => {
                let m = msg::decode(&frame).map_err(proto)?;
                match m.hdr.kind {
                    kind::DATA if m.hdr.seq == add_seq && obj.is_none() => {
                        obj = m.u32(attr::OBJID);
                    }
                    kind::STATUS if m.hdr.seq == add_seq && registered.is_none() => {
                        let code = m.u32(attr::STATUS).unwrap_or(status::UNKNOWN_ERROR);
                        match (code, obj) {
                            (status::OK, Some(id)) => {
                                *registered = Some(Instant::now());
                                log::info!("ubus: object {OBJECT} registered on {} (id {id:#x})", path.display());
                            }
                            (status::OK, None) => return Err("ubusd registered the object without an id".into()),
                            (code, _) => {
                                return Err(format!(
                                    "ubusd refused to register the object {OBJECT} (ubus status {code}; \
                                     does another client hold the name, e.g. an old rpcd plugin?)"
                                ))
                            }
                        }
                    }
                    kind::STATUS => {
                        if let Some(code) = m.u32(attr::STATUS).filter(|c| *c != status::OK) {
                            log::debug!("ubus: request {} answered with status {code}", m.hdr.seq);
                        }
                    }
                    kind::INVOKE => {
                        for reply in answer(&m, obj, call).await {
                            write(&mut s, &reply).await?;
                        }
                    }
                    kind::NOTIFY if obj.is_some() && m.u32(attr::OBJID) == obj => {
                        if let Some(active) = m.u8(attr::ACTIVE) {
                            subscribers = active != 0;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

/// The messages that answer one INVOKE (none when the caller asked for no reply).
async fn answer(m: &msg::Message<'_>, obj: Option<u32>, call: &Call) -> Vec<Vec<u8>> {
    let (seq, peer) = (m.hdr.seq, m.hdr.peer);
    let target = m.u32(attr::OBJID);
    let method = m.string(attr::METHOD);
    let a = match (obj, target) {
        (Some(ours), Some(t)) if ours == t => match object::request(method, m.data_json()) {
            Ok((rpc, params)) => object::answer(call(rpc, params).await),
            Err(a) => a,
        },
        _ => object::Answer { data: None, status: status::NOT_FOUND },
    };
    if m.u8(attr::NO_REPLY) == Some(1) {
        return Vec::new();
    }
    let objid = target.unwrap_or(0);
    let mut out = Vec::new();
    if let Some(data) = &a.data {
        match msg::reply_data(seq, peer, objid, data) {
            Ok(bytes) => out.push(bytes),
            Err(ProtoError::TooLarge(n)) => {
                let name = method.unwrap_or("?");
                log::warn!("ubus: the reply of {name} is {n} bytes, over ubus' message limit; answered with an error");
                if let Ok(bytes) = msg::reply_data(seq, peer, objid, &object::too_large_reply(name, n)) {
                    out.push(bytes);
                }
            }
            Err(e) => log::warn!("ubus: cannot encode the reply of {}: {e}", method.unwrap_or("?")),
        }
    }
    if let Ok(bytes) = msg::reply_status(seq, peer, objid, a.status) {
        out.push(bytes);
    }
    out
}
