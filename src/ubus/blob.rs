//! libubox's `blob` and `blobmsg` wire format, and its mapping to JSON. Pure: no I/O.
//!
//! A blob attribute is a big-endian `u32` header — bit 31 "extended" (a blobmsg with a
//! name), bits 24..30 the type id, bits 0..23 the length including the header — then
//! the payload, padded with zeros to 4 bytes. A blobmsg is an extended attribute whose
//! payload starts with a big-endian `u16` name length, the name and a NUL, padded to 4
//! bytes; then the value. Tables and arrays nest blobmsgs (array members have empty
//! names). Integers are big-endian; a bool is an INT8; strings end with a NUL.

use serde_json::{Map, Number, Value};

const ID_SHIFT: u32 = 24;
const ID_MASK: u32 = 0x7f00_0000;
const LEN_MASK: u32 = 0x00ff_ffff;
const EXTENDED: u32 = 0x8000_0000;
const HDR: usize = 4;

/// blobmsg types (`enum blobmsg_type`).
pub mod ty {
    pub const UNSPEC: u8 = 0;
    pub const ARRAY: u8 = 1;
    pub const TABLE: u8 = 2;
    pub const STRING: u8 = 3;
    pub const INT64: u8 = 4;
    pub const INT32: u8 = 5;
    pub const INT16: u8 = 6;
    pub const INT8: u8 = 7;
    pub const BOOL: u8 = INT8;
    pub const DOUBLE: u8 = 8;
}

/// Nesting deeper than this is refused when decoding (a 1 MiB message could otherwise
/// nest 100 000 levels and exhaust the stack). Kubernetes objects stay far below it.
pub const MAX_DEPTH: usize = 64;

/// Why bytes are not a valid blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobError {
    /// An attribute's length is shorter than its header or runs past its container.
    BadLength { offset: usize, len: usize, room: usize },
    /// A blobmsg without the extended bit, or with a name that does not fit.
    BadName { offset: usize },
    /// A value whose payload does not match its type.
    BadValue { ty: u8, len: usize },
    /// An unknown blobmsg type.
    UnknownType(u8),
    /// Nested deeper than `MAX_DEPTH`.
    TooDeep,
    /// A string or name that is not UTF-8.
    NotUtf8,
    /// An attribute longer than the 24-bit length field can say, or a name longer than 65 535 bytes.
    TooLong(usize),
}

impl std::fmt::Display for BlobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlobError::BadLength { offset, len, room } => {
                write!(f, "attribute at byte {offset}: length {len} does not fit in {room} bytes")
            }
            BlobError::BadName { offset } => write!(f, "attribute at byte {offset}: not a named blobmsg"),
            BlobError::BadValue { ty, len } => write!(f, "a blobmsg of type {ty} cannot be {len} bytes long"),
            BlobError::UnknownType(t) => write!(f, "unknown blobmsg type {t}"),
            BlobError::TooDeep => write!(f, "nested deeper than {MAX_DEPTH} levels"),
            BlobError::NotUtf8 => f.write_str("a string is not UTF-8"),
            BlobError::TooLong(n) => write!(f, "an attribute of {n} bytes is too long for the blob format"),
        }
    }
}

impl std::error::Error for BlobError {}

pub fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

/// One attribute as read: its id, whether it is extended, and its payload (unpadded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    pub id: u8,
    pub extended: bool,
    pub data: &'a [u8],
}

/// Read the header of the attribute at the start of `buf`: (id, extended, raw length).
pub fn header(buf: &[u8]) -> Option<(u8, bool, usize)> {
    let b: [u8; 4] = buf.get(..HDR)?.try_into().ok()?;
    let v = u32::from_be_bytes(b);
    Some((((v & ID_MASK) >> ID_SHIFT) as u8, v & EXTENDED != 0, (v & LEN_MASK) as usize))
}

/// The attributes packed in `buf`, which they must fill exactly (each padded to 4 bytes;
/// the last one's padding may be missing). `base` is `buf`'s offset, for messages.
pub fn attrs(buf: &[u8], base: usize) -> Result<Vec<Attr<'_>>, BlobError> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let rest = &buf[pos..];
        let Some((id, extended, len)) = header(rest) else {
            return Err(BlobError::BadLength { offset: base + pos, len: rest.len(), room: rest.len() });
        };
        if len < HDR || len > rest.len() {
            return Err(BlobError::BadLength { offset: base + pos, len, room: rest.len() });
        }
        out.push(Attr { id, extended, data: &rest[HDR..len] });
        pos += pad4(len).min(rest.len());
    }
    Ok(out)
}

/// A blobmsg: its type, name and value bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    pub ty: u8,
    pub name: &'a str,
    pub value: &'a [u8],
}

/// The blobmsg in an attribute. Array members may be plain (not extended) attributes.
pub fn field<'a>(a: &Attr<'a>, offset: usize) -> Result<Field<'a>, BlobError> {
    if !a.extended {
        return Ok(Field { ty: a.id, name: "", value: a.data });
    }
    let bad = BlobError::BadName { offset };
    let n: [u8; 2] = a.data.get(..2).ok_or(bad.clone())?.try_into().map_err(|_| bad.clone())?;
    let namelen = usize::from(u16::from_be_bytes(n));
    let hdrlen = pad4(2 + namelen + 1);
    if a.data.len() < hdrlen || a.data[2 + namelen] != 0 {
        return Err(bad);
    }
    let name = std::str::from_utf8(&a.data[2..2 + namelen]).map_err(|_| BlobError::NotUtf8)?;
    Ok(Field { ty: a.id, name, value: &a.data[hdrlen..] })
}

/// A blobmsg table's payload (named members) as a JSON object. Repeated names keep the
/// first value, as `blobmsg_parse` does.
pub fn table_to_json(buf: &[u8]) -> Result<Map<String, Value>, BlobError> {
    members_to_json(buf, 0, true).map(|v| match v {
        Value::Object(m) => m,
        _ => Map::new(),
    })
}

fn members_to_json(buf: &[u8], depth: usize, table: bool) -> Result<Value, BlobError> {
    if depth > MAX_DEPTH {
        return Err(BlobError::TooDeep);
    }
    let mut map = Map::new();
    let mut list = Vec::new();
    let mut offset = 0;
    for a in attrs(buf, 0)? {
        let f = field(&a, offset)?;
        if table && !a.extended {
            return Err(BlobError::BadName { offset });
        }
        offset += pad4(HDR + a.data.len());
        let v = value_to_json(f.ty, f.value, depth + 1)?;
        if table {
            map.entry(f.name.to_string()).or_insert(v);
        } else {
            list.push(v);
        }
    }
    Ok(if table { Value::Object(map) } else { Value::Array(list) })
}

/// One blobmsg value as JSON, the way `blobmsg_format_json` prints it (INT8 is a bool).
pub fn value_to_json(t: u8, v: &[u8], depth: usize) -> Result<Value, BlobError> {
    let bad = || BlobError::BadValue { ty: t, len: v.len() };
    Ok(match t {
        ty::UNSPEC if v.is_empty() => Value::Null,
        ty::UNSPEC => return Err(bad()),
        ty::TABLE => members_to_json(v, depth, true)?,
        ty::ARRAY => members_to_json(v, depth, false)?,
        ty::STRING => {
            let (last, s) = v.split_last().ok_or_else(bad)?;
            if *last != 0 {
                return Err(bad());
            }
            // C readers stop at the first NUL.
            let s = s.split(|&b| b == 0).next().unwrap_or_default();
            Value::String(std::str::from_utf8(s).map_err(|_| BlobError::NotUtf8)?.to_string())
        }
        ty::INT8 => Value::Bool(*<&[u8; 1]>::try_from(v).map_err(|_| bad())? != [0]),
        ty::INT16 => Value::from(i16::from_be_bytes(*<&[u8; 2]>::try_from(v).map_err(|_| bad())?)),
        ty::INT32 => Value::from(i32::from_be_bytes(*<&[u8; 4]>::try_from(v).map_err(|_| bad())?)),
        ty::INT64 => Value::from(i64::from_be_bytes(*<&[u8; 8]>::try_from(v).map_err(|_| bad())?)),
        ty::DOUBLE => {
            let bits = u64::from_be_bytes(*<&[u8; 8]>::try_from(v).map_err(|_| bad())?);
            Number::from_f64(f64::from_bits(bits)).map(Value::Number).unwrap_or(Value::Null)
        }
        other => return Err(BlobError::UnknownType(other)),
    })
}

/// Builds attributes into a byte vector; nested attributes are opened and closed around
/// their members. An attribute too long for the format is remembered and reported by
/// `finish`, so the builders need no error handling of their own.
#[derive(Debug, Default, Clone)]
pub struct BlobBuf {
    buf: Vec<u8>,
    too_long: Option<usize>,
}

/// An open nested attribute (from `nest_start`/`table_start`/`array_start`).
#[must_use]
pub struct Open(usize);

impl BlobBuf {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes, or the length of the attribute that did not fit.
    pub fn finish(self) -> Result<Vec<u8>, BlobError> {
        match self.too_long {
            Some(n) => Err(BlobError::TooLong(n)),
            None => Ok(self.buf),
        }
    }

    fn start(&mut self, id: u8, extended: bool) -> Open {
        let at = self.buf.len();
        let word = (u32::from(id) << ID_SHIFT) & ID_MASK | if extended { EXTENDED } else { 0 };
        self.buf.extend_from_slice(&word.to_be_bytes());
        Open(at)
    }

    fn end(&mut self, open: Open) {
        let len = self.buf.len() - open.0;
        if len > LEN_MASK as usize {
            self.too_long.get_or_insert(len);
        }
        let head: [u8; 4] = self.buf[open.0..open.0 + HDR].try_into().unwrap_or_default();
        let word = u32::from_be_bytes(head) & !LEN_MASK | (u32::try_from(len).unwrap_or(LEN_MASK) & LEN_MASK);
        self.buf[open.0..open.0 + HDR].copy_from_slice(&word.to_be_bytes());
        self.buf.resize(open.0 + pad4(len), 0);
    }

    /// A plain attribute.
    pub fn put(&mut self, id: u8, payload: &[u8]) {
        let o = self.start(id, false);
        self.buf.extend_from_slice(payload);
        self.end(o);
    }

    pub fn put_u32(&mut self, id: u8, v: u32) {
        self.put(id, &v.to_be_bytes());
    }

    pub fn put_u8(&mut self, id: u8, v: u8) {
        self.put(id, &[v]);
    }

    pub fn put_string(&mut self, id: u8, s: &str) {
        let o = self.start(id, false);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        self.end(o);
    }

    /// A plain attribute holding the attributes added until `nest_end`.
    pub fn nest_start(&mut self, id: u8) -> Open {
        self.start(id, false)
    }

    pub fn nest_end(&mut self, o: Open) {
        self.end(o)
    }

    fn field_start(&mut self, t: u8, name: &str) -> Open {
        let o = self.start(t, true);
        let namelen = match u16::try_from(name.len()) {
            Ok(n) => n,
            Err(_) => {
                self.too_long.get_or_insert(name.len());
                0
            }
        };
        self.buf.extend_from_slice(&namelen.to_be_bytes());
        self.buf.extend_from_slice(&name.as_bytes()[..usize::from(namelen)]);
        self.buf.push(0);
        self.buf.resize(o.0 + HDR + pad4(2 + usize::from(namelen) + 1), 0);
        o
    }

    /// A blobmsg with a fixed-size value.
    pub fn field(&mut self, t: u8, name: &str, value: &[u8]) {
        let o = self.field_start(t, name);
        self.buf.extend_from_slice(value);
        self.end(o);
    }

    pub fn field_string(&mut self, name: &str, s: &str) {
        let o = self.field_start(ty::STRING, name);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        self.end(o);
    }

    pub fn field_u32(&mut self, name: &str, v: u32) {
        self.field(ty::INT32, name, &v.to_be_bytes());
    }

    pub fn table_start(&mut self, name: &str) -> Open {
        self.field_start(ty::TABLE, name)
    }

    pub fn array_start(&mut self, name: &str) -> Open {
        self.field_start(ty::ARRAY, name)
    }

    /// Closes a table or an array.
    pub fn close(&mut self, o: Open) {
        self.end(o)
    }

    /// A JSON value as a blobmsg, as `blobmsg_add_json_element` writes it: an integer
    /// that fits is an INT32, a larger one an INT64, other numbers DOUBLE, null UNSPEC.
    pub fn field_json(&mut self, name: &str, v: &Value) {
        match v {
            Value::Null => self.field(ty::UNSPEC, name, &[]),
            Value::Bool(b) => self.field(ty::BOOL, name, &[u8::from(*b)]),
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => match i32::try_from(i) {
                    Ok(small) => self.field(ty::INT32, name, &small.to_be_bytes()),
                    Err(_) => self.field(ty::INT64, name, &i.to_be_bytes()),
                },
                // Above i64::MAX: libubox has no unsigned 64-bit type; the bits as INT64.
                (None, Some(u)) => self.field(ty::INT64, name, &u.to_be_bytes()),
                (None, None) => self.field(ty::DOUBLE, name, &n.as_f64().unwrap_or(0.0).to_bits().to_be_bytes()),
            },
            Value::String(s) => self.field_string(name, s),
            Value::Array(items) => {
                let o = self.array_start(name);
                for i in items {
                    self.field_json("", i);
                }
                self.close(o);
            }
            Value::Object(map) => {
                let o = self.table_start(name);
                self.table_members(map);
                self.close(o);
            }
        }
    }

    /// The members of a JSON object as blobmsgs (the payload of a table).
    pub fn table_members(&mut self, map: &Map<String, Value>) {
        for (k, v) in map {
            self.field_json(k, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn members(v: &Value) -> Vec<u8> {
        let mut b = BlobBuf::new();
        b.table_members(v.as_object().unwrap());
        b.finish().unwrap()
    }

    /// Bytes worked out by hand from blob.h/blobmsg.h (as `blobmsg_add_string(b, "id", "x")`
    /// and `blobmsg_add_u32(b, "n", 7)` lay them out).
    #[test]
    fn known_bytes_of_a_string_and_an_int() {
        let mut b = BlobBuf::new();
        b.field_string("id", "x");
        b.field_u32("n", 7);
        let got = b.finish().unwrap();
        #[rustfmt::skip]
        let want = [
            // extended | STRING(3)<<24 | len 4 + hdr(2 + "id" + NUL -> 8) + "x\0" = 14
            0x83, 0x00, 0x00, 0x0e, 0x00, 0x02, b'i', b'd', 0x00, 0x00, 0x00, 0x00, b'x', 0x00, 0x00, 0x00,
            // extended | INT32(5)<<24 | len 4 + hdr(2 + "n" + NUL -> 4) + 4 = 12
            0x85, 0x00, 0x00, 0x0c, 0x00, 0x01, b'n', 0x00, 0x00, 0x00, 0x00, 0x07,
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn known_bytes_of_a_nested_table_and_plain_attrs() {
        let mut b = BlobBuf::new();
        b.put_u32(3, 0x1234_5678);
        let n = b.nest_start(7);
        let t = b.table_start("t");
        b.field(ty::BOOL, "b", &[1]);
        b.close(t);
        b.nest_end(n);
        #[rustfmt::skip]
        let want = [
            0x03, 0x00, 0x00, 0x08, 0x12, 0x34, 0x56, 0x78,
            // nest id 7: 4 + table(4 + 4 + bool field 4+4+1 -> padded 12) = 24
            0x07, 0x00, 0x00, 0x18,
            0x82, 0x00, 0x00, 0x14, 0x00, 0x01, b't', 0x00,
            0x87, 0x00, 0x00, 0x09, 0x00, 0x01, b'b', 0x00, 0x01, 0x00, 0x00, 0x00,
        ];
        assert_eq!(b.finish().unwrap(), want);
    }

    #[test]
    fn json_round_trips() {
        let v = json!({
            "s": "hé", "empty": "", "t": true, "f": false, "small": -5, "big": 1_i64 << 40,
            "neg_big": -(1_i64 << 40), "d": 1.5, "null": null, "arr": [1, "two", [3], {"k": "v"}],
            "obj": {"nested": {"deeper": []}, "e": {}},
        });
        let bytes = members(&v);
        assert_eq!(bytes.len() % 4, 0);
        assert_eq!(Value::Object(table_to_json(&bytes).unwrap()), v);
    }

    #[test]
    fn numbers_take_the_types_blobmsg_json_gives_them() {
        let bytes = members(&json!({"a": 2147483647, "b": 2147483648_i64, "c": 0.25}));
        let types: Vec<u8> = attrs(&bytes, 0).unwrap().iter().map(|a| a.id).collect();
        assert_eq!(types, [ty::INT32, ty::INT64, ty::DOUBLE]);
    }

    #[test]
    fn int16_and_plain_array_members_decode() {
        let mut b = BlobBuf::new();
        let a = b.array_start("a");
        b.field(ty::INT16, "", &(-2i16).to_be_bytes());
        b.put(ty::INT32, &9u32.to_be_bytes());
        b.close(a);
        let bytes = b.finish().unwrap();
        assert_eq!(Value::Object(table_to_json(&bytes).unwrap()), json!({"a": [-2, 9]}));
    }

    #[test]
    fn malformed_input_is_refused_without_panic() {
        let good = members(&json!({"name": "web", "list": [1, 2], "o": {"x": true}}));
        // Every truncation and every single-byte corruption: an error or a value, never a panic.
        for cut in 0..good.len() {
            let _ = table_to_json(&good[..cut]);
        }
        for i in 0..good.len() {
            for x in [0x00, 0x01, 0x7f, 0x80, 0xff] {
                let mut bad = good.clone();
                bad[i] ^= x;
                let _ = table_to_json(&bad);
            }
        }
        // Specific refusals.
        assert!(matches!(table_to_json(&[0x83, 0, 0, 2]), Err(BlobError::BadLength { .. })));
        assert!(matches!(table_to_json(&[0x83, 0, 0, 0x40, 0, 0, 0, 0]), Err(BlobError::BadLength { .. })));
        assert!(matches!(table_to_json(&[0x83, 0, 0, 8, 0, 9, b'a', 0]), Err(BlobError::BadName { .. })));
        // A string without its NUL, an INT32 of 3 bytes, an unknown type, a plain member in a table.
        assert!(matches!(
            table_to_json(&[0x83, 0, 0, 9, 0, 1, b'a', 0, b'x', 0, 0, 0]),
            Err(BlobError::BadValue { .. })
        ));
        assert!(matches!(table_to_json(&[0x85, 0, 0, 11, 0, 1, b'a', 0, 1, 2, 3, 0]), Err(BlobError::BadValue { .. })));
        assert!(matches!(table_to_json(&[0x8c, 0, 0, 8, 0, 1, b'a', 0]), Err(BlobError::UnknownType(12))));
        assert!(matches!(table_to_json(&[0x05, 0, 0, 8, 0, 0, 0, 1]), Err(BlobError::BadName { .. })));
        assert!(matches!(table_to_json(&[0x83, 0, 0, 10, 0, 1, b'a', 0, 0xff, 0, 0, 0]), Err(BlobError::NotUtf8)));
    }

    #[test]
    fn deep_nesting_is_refused() {
        let mut v = json!(1);
        for _ in 0..(MAX_DEPTH + 2) {
            v = json!([v]);
        }
        let bytes = members(&json!({ "deep": v }));
        assert_eq!(table_to_json(&bytes), Err(BlobError::TooDeep));
        let mut ok = json!(1);
        for _ in 0..(MAX_DEPTH - 2) {
            ok = json!([ok]);
        }
        assert!(table_to_json(&members(&json!({ "deep": ok }))).is_ok());
    }

    #[test]
    fn oversized_attributes_are_reported_not_wrapped() {
        let mut b = BlobBuf::new();
        b.field_string("big", &"x".repeat(LEN_MASK as usize));
        assert!(matches!(b.finish(), Err(BlobError::TooLong(_))));
        let mut b = BlobBuf::new();
        b.field_string(&"n".repeat(70_000), "v");
        assert!(matches!(b.finish(), Err(BlobError::TooLong(70_000))));
    }
}
