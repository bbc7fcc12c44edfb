//! Set elements packed into bytes: what a planner keeps for every service at rest.
//!
//! An [`Element`] is ~64 bytes plus a heap block for its key and one for its data; tens
//! of thousands of them dominated the daemon's memory. Packed, the elements of one
//! service are one byte string (~20 bytes an element, set names included) that is
//! decoded again only when the elements are sent or compared: a full sync or a check
//! decodes one element at a time ([`ElemRef`]), a change only the changed services'.
//!
//! The format is private to this module and lossless (`unpack(pack(x)) == x`):
//!
//! ```text
//! entry   := set element
//! set     := 0 (the previous entry's set) | 1 name
//! name    := len:n bytes
//! element := nkey:n value{nkey} data timeout
//! value   := tag:u8 bytes      (addr v4/v6, prefix v4/v6, proto, port, mark, int)
//! data    := 0 | 1 count:n value{count} | 2 verdict
//! verdict := 0 accept | 1 drop | 2 return | 3 continue | 4 name (jump) | 5 name (goto)
//! timeout := 0 | 1 u32
//! n       := a length, 7 bits a byte, low bits first (one byte below 128)
//! ```

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::ir::{Element, ElementData, SetName, Value, Verdict};

/// Appends `(set, el)` to `out`; `prev` is the set of the entry before it in `out`
/// (`None` at the start of a string that must stand alone).
pub fn pack_into(out: &mut Vec<u8>, prev: Option<&str>, set: &str, el: &Element) {
    if prev == Some(set) {
        out.push(0);
    } else {
        out.push(1);
        name(out, set);
    }
    element(out, el);
}

/// Packs a list of elements into one byte string.
pub fn pack<'a>(els: impl IntoIterator<Item = &'a (SetName, Element)>) -> Box<[u8]> {
    pack_with(&mut Vec::new(), els)
}

/// [`pack`] through a scratch buffer the caller reuses: the string is allocated once, at
/// its size (a string grown and shrunk leaves holes in the heap among long-lived ones).
pub fn pack_with<'a>(buf: &mut Vec<u8>, els: impl IntoIterator<Item = &'a (SetName, Element)>) -> Box<[u8]> {
    buf.clear();
    let mut prev: Option<&str> = None;
    for (set, el) in els {
        pack_into(buf, prev, set, el);
        prev = Some(set);
    }
    Box::from(buf.as_slice())
}

/// One entry standing alone (a key for counting equal elements).
pub fn pack_one(set: &str, el: &Element) -> Box<[u8]> {
    let mut out = Vec::new();
    pack_into(&mut out, None, set, el);
    out.into_boxed_slice()
}

/// The entry `(set, el)` standing alone, into `out` (cleared first): what [`pack_one`]
/// makes of the decoded element, without decoding it.
pub fn standalone_into(out: &mut Vec<u8>, set: &str, el: PackedElement<'_>) {
    out.clear();
    out.push(1);
    name(out, set);
    out.extend_from_slice(el.0);
}

/// The values of a key alone, into `out` (cleared first): a key for a map of destinations.
pub fn pack_values_into(out: &mut Vec<u8>, vals: &[Value]) {
    out.clear();
    for v in vals {
        value(out, v);
    }
}

fn len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n & 0x7f).to_le_bytes()[0] | 0x80);
        n >>= 7;
    }
    out.push(n.to_le_bytes()[0]);
}

fn name(out: &mut Vec<u8>, s: &str) {
    len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

fn element(out: &mut Vec<u8>, el: &Element) {
    len(out, el.key.len());
    for v in &el.key {
        value(out, v);
    }
    match &el.data {
        None => out.push(0),
        Some(ElementData::Values(vs)) => {
            out.push(1);
            len(out, vs.len());
            for v in vs {
                value(out, v);
            }
        }
        Some(ElementData::Verdict(v)) => {
            out.push(2);
            match v {
                Verdict::Accept => out.push(0),
                Verdict::Drop => out.push(1),
                Verdict::Return => out.push(2),
                Verdict::Continue => out.push(3),
                Verdict::Jump(c) => {
                    out.push(4);
                    name(out, c);
                }
                Verdict::Goto(c) => {
                    out.push(5);
                    name(out, c);
                }
            }
        }
    }
    match el.timeout {
        None => out.push(0),
        Some(t) => {
            out.push(1);
            out.extend(t.to_le_bytes());
        }
    }
}

fn value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Addr(IpAddr::V4(a)) => {
            out.push(1);
            out.extend(a.octets());
        }
        Value::Addr(IpAddr::V6(a)) => {
            out.push(2);
            out.extend(a.octets());
        }
        Value::Prefix(IpNet::V4(n)) => {
            out.push(3);
            out.extend(n.addr().octets());
            out.push(n.prefix_len());
        }
        Value::Prefix(IpNet::V6(n)) => {
            out.push(4);
            out.extend(n.addr().octets());
            out.push(n.prefix_len());
        }
        Value::Proto(p) => out.extend([5, *p]),
        Value::Port(p) => {
            out.push(6);
            out.extend(p.to_be_bytes());
        }
        Value::Mark(m) => {
            out.push(7);
            out.extend(m.to_le_bytes());
        }
        Value::Int(i) => {
            out.push(8);
            out.extend(i.to_le_bytes());
        }
    }
}

/// A cursor over packed bytes; every read fails (`None`) past the end.
struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.b.len() < n {
            return None;
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Some(h)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
    fn len(&mut self) -> Option<usize> {
        let mut n = 0usize;
        for shift in (0..usize::BITS).step_by(7) {
            let b = self.u8()?;
            n |= usize::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    }
    fn str(&mut self) -> Option<&'a str> {
        let n = self.len()?;
        std::str::from_utf8(self.take(n)?).ok()
    }
    fn value(&mut self) -> Option<Value> {
        Some(match self.u8()? {
            1 => Value::Addr(IpAddr::V4(Ipv4Addr::from(self.array::<4>()?))),
            2 => Value::Addr(IpAddr::V6(Ipv6Addr::from(self.array::<16>()?))),
            3 => {
                let a = Ipv4Addr::from(self.array::<4>()?);
                Value::Prefix(IpNet::V4(Ipv4Net::new(a, self.u8()?).ok()?))
            }
            4 => {
                let a = Ipv6Addr::from(self.array::<16>()?);
                Value::Prefix(IpNet::V6(Ipv6Net::new(a, self.u8()?).ok()?))
            }
            5 => Value::Proto(self.u8()?),
            6 => Value::Port(u16::from_be_bytes(self.array()?)),
            7 => Value::Mark(u32::from_le_bytes(self.array()?)),
            8 => Value::Int(u32::from_le_bytes(self.array()?)),
            _ => return None,
        })
    }
    /// Past one value without decoding it.
    fn skip_value(&mut self) -> Option<()> {
        let n = match self.u8()? {
            1 | 7 | 8 => 4,
            2 => 16,
            3 => 5,
            4 => 17,
            5 => 1,
            6 => 2,
            _ => return None,
        };
        self.take(n).map(drop)
    }
    fn skip_values(&mut self) -> Option<()> {
        for _ in 0..self.len()? {
            self.skip_value()?;
        }
        Some(())
    }
    /// Past one element without decoding it (no allocation).
    fn skip_element(&mut self) -> Option<()> {
        self.skip_values()?;
        match self.u8()? {
            0 => {}
            1 => self.skip_values()?,
            2 => match self.u8()? {
                0..=3 => {}
                4 | 5 => self.str().map(drop)?,
                _ => return None,
            },
            _ => return None,
        }
        match self.u8()? {
            0 => Some(()),
            1 => self.take(4).map(drop),
            _ => None,
        }
    }
    fn values(&mut self) -> Option<Vec<Value>> {
        let n = self.len()?;
        // Every value takes at least two bytes: a bad count cannot reserve much.
        let mut out = Vec::with_capacity(n.min(self.b.len() / 2));
        for _ in 0..n {
            out.push(self.value()?);
        }
        Some(out)
    }
    fn element(&mut self) -> Option<Element> {
        let key = self.values()?;
        let data = match self.u8()? {
            0 => None,
            1 => Some(ElementData::Values(self.values()?)),
            2 => Some(ElementData::Verdict(match self.u8()? {
                0 => Verdict::Accept,
                1 => Verdict::Drop,
                2 => Verdict::Return,
                3 => Verdict::Continue,
                4 => Verdict::Jump(self.str()?.to_string()),
                5 => Verdict::Goto(self.str()?.to_string()),
                _ => return None,
            })),
            _ => return None,
        };
        let timeout = match self.u8()? {
            0 => None,
            1 => Some(u32::from_le_bytes(self.array()?)),
            _ => return None,
        };
        Some(Element { key, data, timeout })
    }
}

/// One packed element, borrowed; decoded by [`PackedElement::get`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedElement<'a>(&'a [u8]);

impl PackedElement<'_> {
    pub fn get(&self) -> Option<Element> {
        Reader { b: self.0 }.element()
    }
}

/// The entries of a packed string as (set, element), in order. Stops at the first
/// malformed entry (never, for a string [`pack`] made).
pub fn entries(b: &[u8]) -> Entries<'_> {
    Entries { r: Reader { b }, set: "" }
}

pub struct Entries<'a> {
    r: Reader<'a>,
    set: &'a str,
}

impl<'a> Iterator for Entries<'a> {
    type Item = (&'a str, PackedElement<'a>);
    fn next(&mut self) -> Option<Self::Item> {
        if self.r.b.is_empty() {
            return None;
        }
        let whole = self.r.b;
        let entry = (|| {
            match self.r.u8()? {
                0 => {}
                1 => self.set = self.r.str()?,
                _ => return None,
            }
            let start = whole.len() - self.r.b.len();
            self.r.skip_element()?;
            let end = whole.len() - self.r.b.len();
            Some((self.set, PackedElement(&whole[start..end])))
        })();
        if entry.is_none() {
            self.r.b = &[];
        }
        entry
    }
}

/// Every entry of a packed string decoded.
pub fn unpack(b: &[u8]) -> Vec<(SetName, Element)> {
    entries(b).filter_map(|(set, e)| Some((Cow::Owned(set.to_string()), e.get()?))).collect()
}

/// An element to send: borrowed as it is, or packed and decoded when it is lowered.
#[derive(Debug, Clone, Copy)]
pub enum ElemRef<'a> {
    Plain(&'a Element),
    Packed(PackedElement<'a>),
}

impl<'a> ElemRef<'a> {
    pub fn get(&self) -> Cow<'a, Element> {
        match self {
            ElemRef::Plain(e) => Cow::Borrowed(*e),
            // A malformed element (never made by `pack`) is sent as an empty key, which
            // the lowering refuses with the set's name.
            ElemRef::Packed(p) => Cow::Owned(p.get().unwrap_or(Element { key: Vec::new(), data: None, timeout: None })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn el(key: Vec<Value>, data: Option<ElementData>, timeout: Option<u32>) -> Element {
        Element { key, data, timeout }
    }

    #[test]
    fn every_kind_of_value_and_data_comes_back_as_it_was() {
        let v4: IpAddr = "198.18.0.1".parse().unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let all = vec![
            Value::Addr(v4),
            Value::Addr(v6),
            Value::Prefix("198.18.0.0/15".parse().unwrap()),
            Value::Prefix("2001:db8::/32".parse().unwrap()),
            Value::Proto(17),
            Value::Port(65535),
            Value::Mark(0x4000),
            Value::Int(7),
        ];
        let els: Vec<(SetName, Element)> = vec![
            ("a".into(), el(all.clone(), None, None)),
            ("a".into(), el(vec![Value::Port(1)], Some(ElementData::Values(all)), Some(30))),
            ("b-longer-name".into(), el(vec![], Some(ElementData::Verdict(Verdict::Goto("c".into()))), None)),
            (
                "b-longer-name".into(),
                el(vec![Value::Int(0)], Some(ElementData::Verdict(Verdict::Jump("d".into()))), None),
            ),
            ("a".into(), el(vec![Value::Int(0)], Some(ElementData::Verdict(Verdict::Accept)), None)),
            ("a".into(), el(vec![Value::Int(1)], Some(ElementData::Verdict(Verdict::Drop)), None)),
            ("a".into(), el(vec![Value::Int(2)], Some(ElementData::Verdict(Verdict::Return)), None)),
            ("a".into(), el(vec![Value::Int(3)], Some(ElementData::Verdict(Verdict::Continue)), None)),
        ];
        let b = pack(&els);
        assert_eq!(unpack(&b), els);
        assert_eq!(entries(&b).count(), els.len());
        // Each entry's bytes are exactly its element (the skip agrees with the decoder).
        for ((set, e), (want_set, want)) in entries(&b).zip(&els) {
            assert_eq!((set, e.get().as_ref()), (&**want_set, Some(want)));
            let mut r = Reader { b: e.0 };
            assert!(r.element().is_some() && r.b.is_empty());
        }
        // Standalone entries repeat their set's name; equal elements pack equal.
        let one = pack_one("a", &els[0].1);
        assert_eq!(unpack(&one), els[..1]);
        assert_eq!(one, pack_one("a", &els[0].1.clone()));
        assert_ne!(pack_one("a", &els[0].1), pack_one("b", &els[0].1));
        let mut buf = Vec::new();
        for (set, e) in entries(&b) {
            standalone_into(&mut buf, set, e);
            assert_eq!(*buf, *pack_one(set, &e.get().unwrap()));
        }
        let mut k1 = Vec::new();
        pack_values_into(&mut k1, &els[0].1.key);
        pack_values_into(&mut buf, &els[0].1.key[..7]);
        assert!(k1.starts_with(&buf) && k1 != buf);
    }

    #[test]
    fn long_names_and_keys_are_packed_too() {
        let long = "x".repeat(300);
        let key: Vec<Value> = (0..200).map(Value::Int).collect();
        let els: Vec<(SetName, Element)> = vec![
            (long.clone().into(), el(key, None, None)),
            ("a".into(), el(vec![Value::Port(3)], Some(ElementData::Verdict(Verdict::Goto(long))), None)),
        ];
        assert_eq!(unpack(&pack(&els)), els);
    }

    #[test]
    fn a_truncated_string_yields_its_whole_entries_only() {
        let els: Vec<(SetName, Element)> = vec![
            ("a".into(), el(vec![Value::Port(1)], None, None)),
            ("a".into(), el(vec![Value::Port(2)], None, None)),
        ];
        let b = pack(&els);
        assert_eq!(entries(&b[..b.len() - 1]).count(), 1);
        assert_eq!(unpack(&b[..b.len() - 1]), els[..1]);
        let mut bad = b.to_vec();
        bad[4] = 99; // not a value's tag
        assert!(unpack(&bad).is_empty());
        assert_eq!(ElemRef::Packed(PackedElement(&bad[3..])).get().key, Vec::new());
    }
}
