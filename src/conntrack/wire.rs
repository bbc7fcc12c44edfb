//! ctnetlink messages: the few this daemon needs (dump the table, delete one entry),
//! encoded and parsed here and nowhere else.
//!
//! Byte order is decided in this file only: netlink and attribute headers are in the
//! host's order (`ne`), nfgenmsg's res_id and every ctnetlink value (addresses, ports,
//! zone, id) in network order (`be`). Routers run big-endian MIPS as well as
//! little-endian ARM, so no other code touches raw bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const NLMSG_HDR_LEN: usize = 16;
const NFGENMSG_LEN: usize = 4;
const NLA_HDR_LEN: usize = 4;

pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_MULTI: u16 = 0x2;
pub const NLM_F_ACK: u16 = 0x4;
pub const NLM_F_DUMP: u16 = 0x300;

const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
pub const CT_NEW: u16 = NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_NEW;
pub const CT_GET: u16 = NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_GET;
pub const CT_DELETE: u16 = NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_DELETE;

const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;

const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_ID: u16 = 12;
const CTA_ZONE: u16 = 18;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V4_DST: u16 = 2;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_IP_V6_DST: u16 = 4;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;

pub const AF_UNSPEC: u8 = 0;
pub const AF_INET: u8 = 2;
pub const AF_INET6: u8 = 10;
pub const IPPROTO_UDP: u8 = 17;

// The two byte orders, in one place.
fn ne16(v: u16) -> [u8; 2] {
    v.to_ne_bytes()
}
fn ne32(v: u32) -> [u8; 4] {
    v.to_ne_bytes()
}
fn be16(v: u16) -> [u8; 2] {
    v.to_be_bytes()
}
fn be32(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}
fn read_ne16(b: &[u8]) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(..2)?.try_into().ok()?))
}
fn read_ne32(b: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?))
}
fn read_be16(b: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(..2)?.try_into().ok()?))
}
fn read_be32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// One direction of a connection as conntrack sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
}

/// A conntrack entry: what was sent (original) and what the answer looks like
/// (reply; after DNAT its source is the endpoint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    pub family: u8,
    pub orig: Tuple,
    pub reply: Tuple,
    pub zone: u16,
    pub id: Option<u32>,
}

/// Appends netlink attributes and messages to a buffer; lengths and padding are
/// computed here.
struct Builder {
    buf: Vec<u8>,
}

impl Builder {
    fn message(kind: u16, flags: u16, seq: u32, family: u8) -> Builder {
        let mut buf = Vec::with_capacity(128);
        buf.extend_from_slice(&ne32(0)); // length, patched in finish()
        buf.extend_from_slice(&ne16(kind));
        buf.extend_from_slice(&ne16(flags));
        buf.extend_from_slice(&ne32(seq));
        buf.extend_from_slice(&ne32(0)); // port id: the kernel fills it in
        buf.push(family);
        buf.push(0); // NFNETLINK_V0
        buf.extend_from_slice(&be16(0)); // res_id
        Builder { buf }
    }

    fn attr(&mut self, kind: u16, value: &[u8]) {
        let len = NLA_HDR_LEN + value.len();
        // Attributes are a few bytes; a netlink attribute length is 16 bits.
        self.buf.extend_from_slice(&ne16(u16::try_from(len).unwrap_or(u16::MAX)));
        self.buf.extend_from_slice(&ne16(kind));
        self.buf.extend_from_slice(value);
        self.buf.resize(align4(self.buf.len()), 0);
    }

    fn nest<F: FnOnce(&mut Builder)>(&mut self, kind: u16, f: F) {
        let start = self.buf.len();
        self.buf.extend_from_slice(&ne16(0));
        self.buf.extend_from_slice(&ne16(kind | NLA_F_NESTED));
        f(self);
        let len = u16::try_from(self.buf.len() - start).unwrap_or(u16::MAX);
        self.buf[start..start + 2].copy_from_slice(&ne16(len));
    }

    fn finish(mut self) -> Vec<u8> {
        let len = u32::try_from(self.buf.len()).unwrap_or(u32::MAX);
        self.buf[0..4].copy_from_slice(&ne32(len));
        self.buf
    }
}

/// IPCTNL_MSG_CT_GET with NLM_F_DUMP: the whole table, every family.
pub fn dump_request(seq: u32) -> Vec<u8> {
    Builder::message(CT_GET, NLM_F_REQUEST | NLM_F_DUMP, seq, AF_UNSPEC).finish()
}

fn tuple_attrs(b: &mut Builder, t: &Tuple) {
    b.nest(CTA_TUPLE_IP, |b| match (t.src, t.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            b.attr(CTA_IP_V4_SRC, &s.octets());
            b.attr(CTA_IP_V4_DST, &d.octets());
        }
        (s, d) => {
            b.attr(CTA_IP_V6_SRC, &v6(s).octets());
            b.attr(CTA_IP_V6_DST, &v6(d).octets());
        }
    });
    b.nest(CTA_TUPLE_PROTO, |b| {
        b.attr(CTA_PROTO_NUM, &[t.proto]);
        b.attr(CTA_PROTO_SRC_PORT, &be16(t.sport));
        b.attr(CTA_PROTO_DST_PORT, &be16(t.dport));
    });
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// IPCTNL_MSG_CT_DELETE of exactly this entry (its original tuple, zone and id, so
/// a new connection that reused the tuple meanwhile is left alone).
pub fn delete_request(seq: u32, flow: &Flow) -> Vec<u8> {
    let mut b = Builder::message(CT_DELETE, NLM_F_REQUEST | NLM_F_ACK, seq, flow.family);
    b.nest(CTA_TUPLE_ORIG, |b| tuple_attrs(b, &flow.orig));
    if flow.zone != 0 {
        b.attr(CTA_ZONE, &be16(flow.zone));
    }
    if let Some(id) = flow.id {
        b.attr(CTA_ID, &be32(id));
    }
    b.finish()
}

/// One netlink message out of a datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// A conntrack entry (the payload after nfgenmsg is parsed lazily).
    Entry {
        family: u8,
        attrs: &'a [u8],
        seq: u32,
    },
    /// NLMSG_ERROR: 0 is an acknowledgement, else a negative errno.
    Error {
        errno: i32,
        seq: u32,
    },
    Done {
        seq: u32,
    },
    Other {
        kind: u16,
        seq: u32,
    },
}

/// Split a datagram into netlink messages. Malformed lengths end the walk with an
/// error rather than reading out of bounds.
pub fn messages(mut buf: &[u8]) -> Result<Vec<Message<'_>>, String> {
    let mut out = Vec::new();
    while buf.len() >= NLMSG_HDR_LEN {
        let len = read_ne32(buf).ok_or("short header")? as usize;
        if len < NLMSG_HDR_LEN || len > buf.len() {
            return Err(format!("bad netlink message length {len} (datagram has {})", buf.len()));
        }
        let kind = read_ne16(&buf[4..]).ok_or("short header")?;
        let seq = read_ne32(&buf[8..]).ok_or("short header")?;
        let body = &buf[NLMSG_HDR_LEN..len];
        out.push(match kind {
            NLMSG_ERROR => {
                let code = read_ne32(body).ok_or("short NLMSG_ERROR")? as i32;
                Message::Error { errno: -code, seq }
            }
            NLMSG_DONE => Message::Done { seq },
            CT_NEW if body.len() >= NFGENMSG_LEN => {
                Message::Entry { family: body[0], attrs: &body[NFGENMSG_LEN..], seq }
            }
            _ => Message::Other { kind, seq },
        });
        buf = &buf[align4(len).min(buf.len())..];
    }
    Ok(out)
}

/// Iterate (type without flags, value) over a run of attributes.
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = read_ne16(b)? as usize;
        let kind = read_ne16(b.get(2..)?)? & NLA_TYPE_MASK;
        if len < NLA_HDR_LEN || len > b.len() {
            return None;
        }
        let value = &b[NLA_HDR_LEN..len];
        b = &b[align4(len).min(b.len())..];
        Some((kind, value))
    })
}

fn parse_tuple(b: &[u8]) -> Option<Tuple> {
    let (mut src, mut dst, mut proto, mut sport, mut dport) = (None, None, None, 0, 0);
    for (k, v) in attrs(b) {
        match k {
            CTA_TUPLE_IP => {
                for (k, v) in attrs(v) {
                    let ip = match k {
                        CTA_IP_V4_SRC | CTA_IP_V4_DST => {
                            IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(v.get(..4)?).ok()?))
                        }
                        CTA_IP_V6_SRC | CTA_IP_V6_DST => {
                            IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(v.get(..16)?).ok()?))
                        }
                        _ => continue,
                    };
                    if k == CTA_IP_V4_SRC || k == CTA_IP_V6_SRC {
                        src = Some(ip);
                    } else {
                        dst = Some(ip);
                    }
                }
            }
            CTA_TUPLE_PROTO => {
                for (k, v) in attrs(v) {
                    match k {
                        CTA_PROTO_NUM => proto = v.first().copied(),
                        CTA_PROTO_SRC_PORT => sport = read_be16(v)?,
                        CTA_PROTO_DST_PORT => dport = read_be16(v)?,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some(Tuple { src: src?, dst: dst?, proto: proto?, sport, dport })
}

/// Parse an entry's attributes; entries without both tuples are skipped (None).
pub fn parse_flow(family: u8, b: &[u8]) -> Option<Flow> {
    let (mut orig, mut reply, mut zone, mut id) = (None, None, 0, None);
    for (k, v) in attrs(b) {
        match k {
            CTA_TUPLE_ORIG => orig = parse_tuple(v),
            CTA_TUPLE_REPLY => reply = parse_tuple(v),
            CTA_ZONE => zone = read_be16(v).unwrap_or(0),
            CTA_ID => id = read_be32(v),
            _ => {}
        }
    }
    Some(Flow { family, orig: orig?, reply: reply?, zone, id })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow() -> Flow {
        Flow {
            family: AF_INET,
            orig: Tuple {
                src: "198.18.0.2".parse().unwrap(),
                dst: "198.18.0.1".parse().unwrap(),
                proto: IPPROTO_UDP,
                sport: 40000,
                dport: 30053,
            },
            reply: Tuple {
                src: "198.18.1.2".parse().unwrap(),
                dst: "198.18.0.2".parse().unwrap(),
                proto: IPPROTO_UDP,
                sport: 5353,
                dport: 40000,
            },
            zone: 0,
            id: Some(0x01020304),
        }
    }

    /// A kernel-style CT_NEW message holding `f`, built with the same helpers the
    /// kernel's layout implies (independent of `delete_request`).
    fn entry_msg(f: &Flow) -> Vec<u8> {
        let mut b = Builder::message(CT_NEW, NLM_F_MULTI, 7, f.family);
        b.nest(CTA_TUPLE_ORIG, |b| tuple_attrs(b, &f.orig));
        b.nest(CTA_TUPLE_REPLY, |b| tuple_attrs(b, &f.reply));
        b.attr(3, &be32(0x188)); // CTA_STATUS, ignored
        if let Some(id) = f.id {
            b.attr(CTA_ID, &be32(id));
        }
        b.finish()
    }

    #[test]
    fn dump_request_layout() {
        let m = dump_request(42);
        assert_eq!(m.len(), 20);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 20);
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), 0x0101);
        assert_eq!(u16::from_ne_bytes(m[6..8].try_into().unwrap()), NLM_F_REQUEST | NLM_F_DUMP);
        assert_eq!(u32::from_ne_bytes(m[8..12].try_into().unwrap()), 42);
        assert_eq!(&m[16..20], &[AF_UNSPEC, 0, 0, 0]);
    }

    #[test]
    fn delete_request_values_are_big_endian_on_every_host() {
        let m = delete_request(1, &flow());
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), 0x0102);
        assert_eq!(m[16], AF_INET);
        // Port 30053 = 0x7565 and the id travel in network order whatever the host.
        let find = |needle: &[u8]| m.windows(needle.len()).any(|w| w == needle);
        assert!(find(&[0x75, 0x65]));
        assert!(find(&[1, 2, 3, 4]));
        assert!(find(&[198, 18, 0, 1]));
        assert_eq!(m.len() % 4, 0);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize, m.len());
    }

    #[test]
    fn entry_round_trips_v4_and_v6() {
        let f = flow();
        let m = entry_msg(&f);
        let msgs = messages(&m).unwrap();
        let [Message::Entry { family, attrs, seq: 7 }] = msgs.as_slice() else { panic!("{msgs:?}") };
        assert_eq!(parse_flow(*family, attrs).unwrap(), f);

        let mut g = flow();
        g.family = AF_INET6;
        g.orig.src = "2001:db8::2".parse().unwrap();
        g.orig.dst = "2001:db8::1".parse().unwrap();
        g.reply.src = "fd00:1::2".parse().unwrap();
        g.reply.dst = "2001:db8::2".parse().unwrap();
        g.zone = 3;
        let mut b = Builder::message(CT_NEW, NLM_F_MULTI, 8, g.family);
        b.nest(CTA_TUPLE_ORIG, |b| tuple_attrs(b, &g.orig));
        b.nest(CTA_TUPLE_REPLY, |b| tuple_attrs(b, &g.reply));
        b.attr(CTA_ZONE, &be16(3));
        b.attr(CTA_ID, &be32(0x01020304));
        let m = b.finish();
        let msgs = messages(&m).unwrap();
        let [Message::Entry { family, attrs, .. }] = msgs.as_slice() else { panic!("{msgs:?}") };
        assert_eq!(parse_flow(*family, attrs).unwrap(), g);
    }

    #[test]
    fn several_messages_error_and_done() {
        let mut d = entry_msg(&flow());
        let mut err = Vec::new();
        err.extend_from_slice(&ne32(36));
        err.extend_from_slice(&ne16(NLMSG_ERROR));
        err.extend_from_slice(&ne16(0));
        err.extend_from_slice(&ne32(9));
        err.extend_from_slice(&ne32(0));
        err.extend_from_slice(&ne32((-2i32).cast_unsigned()));
        err.extend_from_slice(&[0; 16]);
        d.extend_from_slice(&err);
        let mut done = Builder::message(NLMSG_DONE, NLM_F_MULTI, 7, 0).finish();
        d.append(&mut done);
        let msgs = messages(&d).unwrap();
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[1], Message::Error { errno: 2, seq: 9 });
        assert_eq!(msgs[2], Message::Done { seq: 7 });
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic() {
        let m = entry_msg(&flow());
        assert!(messages(&m[..m.len() - 8]).is_err());
        // A truncated attribute run parses to nothing rather than reading past the end.
        let msgs = messages(&m).unwrap();
        let Message::Entry { family, attrs, .. } = msgs[0] else { panic!() };
        for cut in 0..attrs.len() {
            let _ = parse_flow(family, &attrs[..cut]);
        }
    }
}
