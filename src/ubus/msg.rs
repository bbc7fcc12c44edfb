//! ubus messages (`ubusmsg.h`): an 8-byte header — version 0, type, big-endian
//! sequence number and peer id — then one blob attribute (id 0) holding the message's
//! attributes. Pure: no I/O.

use serde_json::{Map, Value};

use super::blob::{self, BlobBuf, BlobError};

pub const HDR_LEN: usize = 8;
/// ubusd and libubus drop a connection that sends a message whose blob (padded) is
/// larger than this (`UBUS_MAX_MSGLEN`, the default of ubus' CMakeLists.txt).
pub const MAX_MSGLEN: usize = 1_048_576;

/// `enum ubus_msg_type`.
pub mod kind {
    pub const HELLO: u8 = 0;
    pub const STATUS: u8 = 1;
    pub const DATA: u8 = 2;
    pub const PING: u8 = 3;
    pub const LOOKUP: u8 = 4;
    pub const INVOKE: u8 = 5;
    pub const ADD_OBJECT: u8 = 6;
    pub const REMOVE_OBJECT: u8 = 7;
    pub const SUBSCRIBE: u8 = 8;
    pub const UNSUBSCRIBE: u8 = 9;
    pub const NOTIFY: u8 = 10;
    pub const MONITOR: u8 = 11;
}

/// `enum ubus_msg_attr`.
pub mod attr {
    pub const STATUS: u8 = 1;
    pub const OBJPATH: u8 = 2;
    pub const OBJID: u8 = 3;
    pub const METHOD: u8 = 4;
    pub const OBJTYPE: u8 = 5;
    pub const SIGNATURE: u8 = 6;
    pub const DATA: u8 = 7;
    pub const TARGET: u8 = 8;
    pub const ACTIVE: u8 = 9;
    pub const NO_REPLY: u8 = 10;
    pub const SUBSCRIBERS: u8 = 11;
    pub const USER: u8 = 12;
    pub const GROUP: u8 = 13;
    pub const MAX: usize = 14;
}

/// `enum ubus_msg_status`.
pub mod status {
    pub const OK: u32 = 0;
    pub const INVALID_COMMAND: u32 = 1;
    pub const INVALID_ARGUMENT: u32 = 2;
    pub const METHOD_NOT_FOUND: u32 = 3;
    pub const NOT_FOUND: u32 = 4;
    pub const NO_DATA: u32 = 5;
    pub const PERMISSION_DENIED: u32 = 6;
    pub const TIMEOUT: u32 = 7;
    pub const NOT_SUPPORTED: u32 = 8;
    pub const UNKNOWN_ERROR: u32 = 9;
}

/// ubusd's built-in object that takes `send` (events) and `register` (listeners).
pub const EVENT_OBJECT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtoError {
    /// A header with a version other than 0.
    Version(u8),
    /// A message whose blob is shorter than its own header.
    Short(usize),
    /// A message over `MAX_MSGLEN` (either way: ubusd would drop the connection).
    TooLarge(usize),
    Blob(BlobError),
}

impl std::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtoError::Version(v) => write!(f, "ubus message version {v} (only 0 exists)"),
            ProtoError::Short(n) => write!(f, "ubus message blob of {n} bytes is shorter than its header"),
            ProtoError::TooLarge(n) => {
                write!(f, "ubus message of {n} bytes is over the {MAX_MSGLEN}-byte limit of ubusd")
            }
            ProtoError::Blob(e) => write!(f, "malformed ubus message: {e}"),
        }
    }
}

impl std::error::Error for ProtoError {}

impl From<BlobError> for ProtoError {
    fn from(e: BlobError) -> Self {
        ProtoError::Blob(e)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: u8,
    pub seq: u16,
    pub peer: u32,
}

/// How many bytes the message at the start of `buf` takes, once its first 12 bytes are
/// there (`None`: not yet). A header ubusd would refuse is an error: the stream cannot
/// be resynchronised after it.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, ProtoError> {
    if buf.len() < HDR_LEN + 4 {
        return Ok(None);
    }
    if buf[0] != 0 {
        return Err(ProtoError::Version(buf[0]));
    }
    let (_, _, len) = blob::header(&buf[HDR_LEN..]).ok_or(ProtoError::Short(0))?;
    if len < 4 {
        return Err(ProtoError::Short(len));
    }
    if blob::pad4(len) > MAX_MSGLEN {
        return Err(ProtoError::TooLarge(len));
    }
    Ok(Some(HDR_LEN + len))
}

/// A decoded message: the header and its attributes by id. An attribute whose payload
/// does not have its type's size reads as absent, as `blob_parse_untrusted` treats it.
#[derive(Debug, Clone)]
pub struct Message<'a> {
    pub hdr: Header,
    attrs: [Option<&'a [u8]>; attr::MAX],
}

/// Decode one whole message (as `frame_len` delimited it).
pub fn decode(frame: &[u8]) -> Result<Message<'_>, ProtoError> {
    let len = frame_len(frame)?.ok_or(ProtoError::Short(frame.len()))?;
    if frame.len() < len {
        return Err(ProtoError::Short(frame.len()));
    }
    let hdr = Header {
        kind: frame[1],
        seq: u16::from_be_bytes([frame[2], frame[3]]),
        peer: u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]),
    };
    let mut attrs = [None; attr::MAX];
    for a in blob::attrs(&frame[HDR_LEN + 4..len], HDR_LEN + 4)? {
        let id = usize::from(a.id);
        let well_typed = match a.id {
            attr::STATUS | attr::OBJID | attr::OBJTYPE | attr::TARGET => a.data.len() == 4,
            attr::ACTIVE | attr::NO_REPLY => a.data.len() == 1,
            attr::OBJPATH | attr::METHOD | attr::USER | attr::GROUP => a.data.last() == Some(&0),
            _ => true,
        };
        if id < attr::MAX && well_typed && attrs[id].is_none() {
            attrs[id] = Some(a.data);
        }
    }
    Ok(Message { hdr, attrs })
}

impl<'a> Message<'a> {
    pub fn raw(&self, id: u8) -> Option<&'a [u8]> {
        self.attrs.get(usize::from(id)).copied().flatten()
    }

    pub fn u32(&self, id: u8) -> Option<u32> {
        Some(u32::from_be_bytes(self.raw(id)?.try_into().ok()?))
    }

    pub fn u8(&self, id: u8) -> Option<u8> {
        self.raw(id)?.first().copied()
    }

    /// A string attribute (up to its first NUL); `None` if absent or not UTF-8.
    pub fn string(&self, id: u8) -> Option<&'a str> {
        let b = self.raw(id)?;
        std::str::from_utf8(b.split(|&c| c == 0).next()?).ok()
    }

    /// The DATA attribute (a blobmsg table's members) as a JSON object.
    pub fn data_json(&self) -> Option<Result<Map<String, Value>, BlobError>> {
        self.raw(attr::DATA).map(blob::table_to_json)
    }
}

/// Encode a message whose attributes `body` adds. Refuses (instead of sending something
/// ubusd would cut the connection over) a message over `MAX_MSGLEN`.
pub fn encode(kind: u8, seq: u16, peer: u32, body: impl FnOnce(&mut BlobBuf)) -> Result<Vec<u8>, ProtoError> {
    let mut b = BlobBuf::new();
    let head = b.nest_start(0);
    body(&mut b);
    b.nest_end(head);
    let blob = b.finish()?;
    if blob.len() > MAX_MSGLEN {
        return Err(ProtoError::TooLarge(blob.len()));
    }
    let mut out = Vec::with_capacity(HDR_LEN + blob.len());
    out.push(0);
    out.push(kind);
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&peer.to_be_bytes());
    out.extend_from_slice(&blob);
    Ok(out)
}

/// A method of an object and its arguments with their blobmsg types (its policy).
pub struct Method<'a> {
    pub name: &'a str,
    pub args: &'a [(&'a str, u8)],
}

/// ADD_OBJECT: register `path` with a signature, as `ubus_add_object` does.
pub fn add_object(seq: u16, path: &str, methods: &[Method<'_>]) -> Result<Vec<u8>, ProtoError> {
    encode(kind::ADD_OBJECT, seq, 0, |b| {
        b.put_string(attr::OBJPATH, path);
        let sig = b.nest_start(attr::SIGNATURE);
        for m in methods {
            let t = b.table_start(m.name);
            for (arg, t) in m.args {
                b.field_u32(arg, u32::from(*t));
            }
            b.close(t);
        }
        b.nest_end(sig);
    })
}

/// DATA: one reply of a method call (`ubus_send_reply`), to the caller `peer`.
pub fn reply_data(seq: u16, peer: u32, objid: u32, data: &Map<String, Value>) -> Result<Vec<u8>, ProtoError> {
    encode(kind::DATA, seq, peer, |b| {
        b.put_u32(attr::OBJID, objid);
        let d = b.nest_start(attr::DATA);
        b.table_members(data);
        b.nest_end(d);
    })
}

/// STATUS: the end of a method call (`ubus_complete_deferred_request`).
pub fn reply_status(seq: u16, peer: u32, objid: u32, code: u32) -> Result<Vec<u8>, ProtoError> {
    encode(kind::STATUS, seq, peer, |b| {
        b.put_u32(attr::STATUS, code);
        b.put_u32(attr::OBJID, objid);
    })
}

/// INVOKE `send` on ubusd's event object: what `ubus send ID DATA` does; every client
/// that registered a matching pattern (`ubus listen ID`) gets it.
pub fn send_event(seq: u16, id: &str, data: &Map<String, Value>) -> Result<Vec<u8>, ProtoError> {
    encode(kind::INVOKE, seq, EVENT_OBJECT, |b| {
        b.put_u32(attr::OBJID, EVENT_OBJECT);
        b.put_string(attr::METHOD, "send");
        let d = b.nest_start(attr::DATA);
        b.field_string("id", id);
        let t = b.table_start("data");
        b.table_members(data);
        b.close(t);
        b.nest_end(d);
    })
}

/// NOTIFY without a reply: `ubus_notify(ctx, obj, kind, data, -1)`, to the object's
/// subscribers (`ubus subscribe nodeportd`).
pub fn notify(seq: u16, objid: u32, method: &str, data: &Map<String, Value>) -> Result<Vec<u8>, ProtoError> {
    encode(kind::NOTIFY, seq, objid, |b| {
        b.put_u32(attr::OBJID, objid);
        b.put_string(attr::METHOD, method);
        let d = b.nest_start(attr::DATA);
        b.table_members(data);
        b.nest_end(d);
        b.put_u8(attr::NO_REPLY, 1);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ubus::blob::ty;
    use serde_json::json;

    /// HELLO as ubusd sends it to client id 0x2a: an empty blob.
    #[test]
    fn known_bytes_of_hello_and_status() {
        let hello = encode(kind::HELLO, 0, 0x2a, |_| {}).unwrap();
        assert_eq!(hello, [0, 0, 0, 0, 0, 0, 0, 0x2a, 0, 0, 0, 4]);
        let m = decode(&hello).unwrap();
        assert_eq!(m.hdr, Header { kind: kind::HELLO, seq: 0, peer: 0x2a });

        let st = reply_status(0x0102, 0x0a0b0c0d, 0x11223344, status::METHOD_NOT_FOUND).unwrap();
        #[rustfmt::skip]
        let want = [
            0, 1, 0x01, 0x02, 0x0a, 0x0b, 0x0c, 0x0d,
            0, 0, 0, 20,
            0x01, 0, 0, 8, 0, 0, 0, 3,
            0x03, 0, 0, 8, 0x11, 0x22, 0x33, 0x44,
        ];
        assert_eq!(st, want);
    }

    /// ADD_OBJECT of "np" with one method `get {name: STRING}`, laid out by hand.
    #[test]
    fn known_bytes_of_add_object() {
        let got = add_object(7, "np", &[Method { name: "get", args: &[("name", ty::STRING)] }]).unwrap();
        #[rustfmt::skip]
        let want = [
            0, 6, 0, 7, 0, 0, 0, 0,
            0, 0, 0, 0x2c,
            // OBJPATH "np\0" (len 7, padded to 8)
            0x02, 0, 0, 7, b'n', b'p', 0, 0,
            // SIGNATURE nest (4 + 28)
            0x06, 0, 0, 0x20,
            // table "get": hdr 4 + name hdr (2+3+1 -> 8) = 12, + member 16
            0x82, 0, 0, 0x1c, 0, 3, b'g', b'e', b't', 0, 0, 0,
            // INT32 "name" = 3: 4 + (2+4+1 -> 8) + 4 = 16
            0x85, 0, 0, 0x10, 0, 4, b'n', b'a', b'm', b'e', 0, 0, 0, 0, 0, 3,
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn event_round_trip() {
        let data = json!({"namespace": "default", "name": "web", "action": "created"});
        let bytes = send_event(9, "nodeportd.service", data.as_object().unwrap()).unwrap();
        let m = decode(&bytes).unwrap();
        assert_eq!(m.hdr, Header { kind: kind::INVOKE, seq: 9, peer: EVENT_OBJECT });
        assert_eq!(m.u32(attr::OBJID), Some(EVENT_OBJECT));
        assert_eq!(m.string(attr::METHOD), Some("send"));
        let d = m.data_json().unwrap().unwrap();
        assert_eq!(Value::Object(d), json!({"id": "nodeportd.service", "data": data}));
    }

    #[test]
    fn reply_and_notify_round_trip() {
        let data = json!({"items": [{"a": 1}], "ok": true});
        let m = reply_data(3, 77, 0x0100_0001, data.as_object().unwrap()).unwrap();
        let d = decode(&m).unwrap();
        assert_eq!(d.hdr, Header { kind: kind::DATA, seq: 3, peer: 77 });
        assert_eq!(d.u32(attr::OBJID), Some(0x0100_0001));
        assert_eq!(Value::Object(d.data_json().unwrap().unwrap()), data);

        let n = notify(4, 0x55, "service", data.as_object().unwrap()).unwrap();
        let d = decode(&n).unwrap();
        assert_eq!(
            (d.hdr.kind, d.string(attr::METHOD), d.u8(attr::NO_REPLY)),
            (kind::NOTIFY, Some("service"), Some(1))
        );
    }

    #[test]
    fn frames_are_delimited_across_partial_reads() {
        let a = reply_status(1, 2, 3, 0).unwrap();
        let b = send_event(2, "x", &Map::new()).unwrap();
        let mut stream = a.clone();
        stream.extend_from_slice(&b);
        for cut in 0..12 {
            assert_eq!(frame_len(&stream[..cut]), Ok(None));
        }
        assert_eq!(frame_len(&stream), Ok(Some(a.len())));
        assert_eq!(frame_len(&stream[a.len()..]), Ok(Some(b.len())));
    }

    #[test]
    fn bad_headers_and_bodies_are_refused_without_panic() {
        let mut v1 = reply_status(1, 2, 3, 0).unwrap();
        v1[0] = 1;
        assert_eq!(frame_len(&v1), Err(ProtoError::Version(1)));
        assert_eq!(frame_len(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3]), Err(ProtoError::Short(3)));
        assert!(matches!(frame_len(&[0, 1, 0, 0, 0, 0, 0, 0, 0, 0x11, 0, 0]), Err(ProtoError::TooLarge(_))));
        // An attribute running past the message.
        let bad = [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 0x01, 0, 0, 0x20, 0, 0, 0, 0];
        assert!(matches!(decode(&bad), Err(ProtoError::Blob(_))));
        // A mistyped attribute reads as absent.
        let odd = encode(kind::STATUS, 0, 0, |b| b.put(attr::STATUS, &[1, 2])).unwrap();
        assert_eq!(decode(&odd).unwrap().u32(attr::STATUS), None);
        // Every corruption of a real message: an error or a message, never a panic.
        let good = send_event(5, "nodeportd.sync", json!({"inSync": true}).as_object().unwrap()).unwrap();
        for i in 0..good.len() {
            for x in [0x01, 0x80, 0xff] {
                let mut m = good.clone();
                m[i] ^= x;
                if let Ok(Some(n)) = frame_len(&m) {
                    if n <= m.len() {
                        if let Ok(d) = decode(&m[..n]) {
                            let _ = (d.data_json(), d.string(attr::METHOD));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_reply_over_the_limit_is_refused() {
        let big = json!({"items": ["x".repeat(MAX_MSGLEN)]});
        assert!(
            matches!(reply_data(1, 2, 3, big.as_object().unwrap()), Err(ProtoError::TooLarge(n)) if n > MAX_MSGLEN)
        );
        let fits = json!({"items": ["x".repeat(MAX_MSGLEN - 64)]});
        let m = reply_data(1, 2, 3, fits.as_object().unwrap()).unwrap();
        assert_eq!(frame_len(&m), Ok(Some(m.len())));
    }
}
