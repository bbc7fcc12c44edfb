//! ctnetlink messages: the few this daemon needs (dump the table, delete one entry),
//! as values of the nfnetlink codec in [`crate::nft::wire`], which owns every
//! header, length, padding and byte-order decision: ctnetlink values (addresses,
//! ports, zone, id) are big-endian attributes like nf_tables ones.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::nft::wire::{find_attr, from_net_u16, Attr, AttrList, NfMsg};

const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const IPCTNL_MSG_CT_DELETE: u16 = 2;
pub const CT_NEW: u16 = NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_NEW;
pub const CT_GET: u16 = NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_GET;
pub const CT_DELETE: u16 = NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_DELETE;

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

fn ct_msg(msg_type: u16, family: u8, attrs: Vec<Attr>) -> NfMsg {
    NfMsg { msg_type, family, res_id: 0, attrs }
}

/// IPCTNL_MSG_CT_GET, to be sent with NLM_F_DUMP: the whole table, every family.
pub fn dump_request() -> NfMsg {
    ct_msg(CT_GET, AF_UNSPEC, Vec::new())
}

fn tuple_attr(kind: u16, t: &Tuple) -> Attr {
    let ip = match (t.src, t.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            vec![Attr::bytes(CTA_IP_V4_SRC, s.octets()), Attr::bytes(CTA_IP_V4_DST, d.octets())]
        }
        (s, d) => vec![Attr::bytes(CTA_IP_V6_SRC, v6(s).octets()), Attr::bytes(CTA_IP_V6_DST, v6(d).octets())],
    };
    let proto = vec![
        Attr::bytes(CTA_PROTO_NUM, [t.proto]),
        Attr::u16(CTA_PROTO_SRC_PORT, t.sport),
        Attr::u16(CTA_PROTO_DST_PORT, t.dport),
    ];
    Attr::nested(kind, vec![Attr::nested(CTA_TUPLE_IP, ip), Attr::nested(CTA_TUPLE_PROTO, proto)])
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// IPCTNL_MSG_CT_DELETE of exactly this entry (its original tuple, zone and id, so
/// a new connection that reused the tuple meanwhile is left alone).
pub fn delete_request(flow: &Flow) -> NfMsg {
    let mut attrs = vec![tuple_attr(CTA_TUPLE_ORIG, &flow.orig)];
    if flow.zone != 0 {
        attrs.push(Attr::u16(CTA_ZONE, flow.zone));
    }
    if let Some(id) = flow.id {
        attrs.push(Attr::u32(CTA_ID, id));
    }
    ct_msg(CT_DELETE, flow.family, attrs)
}

fn parse_tuple(t: &[u8]) -> Option<Tuple> {
    let ip = find_attr(t, CTA_TUPLE_IP)?;
    let proto = find_attr(t, CTA_TUPLE_PROTO)?;
    let addr = |v4: u16, v6: u16| -> Option<IpAddr> {
        Some(match find_attr(ip, v4) {
            Some(a) => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(a.get(..4)?).ok()?)),
            None => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(find_attr(ip, v6)?.get(..16)?).ok()?)),
        })
    };
    // A missing port reads as 0 (ICMP has none); a malformed one skips the entry.
    let port = |kind: u16| find_attr(proto, kind).map_or(Some(0), from_net_u16);
    Some(Tuple {
        src: addr(CTA_IP_V4_SRC, CTA_IP_V6_SRC)?,
        dst: addr(CTA_IP_V4_DST, CTA_IP_V6_DST)?,
        proto: *find_attr(proto, CTA_PROTO_NUM)?.first()?,
        sport: port(CTA_PROTO_SRC_PORT)?,
        dport: port(CTA_PROTO_DST_PORT)?,
    })
}

/// The entry an IPCTNL_MSG_CT_NEW message describes; anything else, or an entry
/// without both tuples, is `None`. The tuples are read in place, not copied.
pub fn parse_flow(m: &NfMsg) -> Option<Flow> {
    if m.msg_type != CT_NEW {
        return None;
    }
    let value = |kind| m.attrs.attr(kind).map(Attr::payload);
    Some(Flow {
        family: m.family,
        orig: parse_tuple(value(CTA_TUPLE_ORIG)?)?,
        reply: parse_tuple(value(CTA_TUPLE_REPLY)?)?,
        zone: value(CTA_ZONE).and_then(from_net_u16).unwrap_or(0),
        id: value(CTA_ID).and_then(|v| Some(u32::from_be_bytes(v.try_into().ok()?))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nft::recv::{walk, Incoming};
    use crate::nft::wire::emit;
    use netlink_packet_core::{NLM_F_ACK, NLM_F_DUMP, NLM_F_MULTIPART, NLM_F_REQUEST};
    use std::ops::ControlFlow;

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

    /// A kernel-style CT_NEW message holding `f`, with an attribute we ignore.
    fn entry(f: &Flow) -> NfMsg {
        let mut attrs = vec![tuple_attr(CTA_TUPLE_ORIG, &f.orig), tuple_attr(CTA_TUPLE_REPLY, &f.reply)];
        attrs.push(Attr::u32(3, 0x188)); // CTA_STATUS, ignored
        if f.zone != 0 {
            attrs.push(Attr::u16(CTA_ZONE, f.zone));
        }
        if let Some(id) = f.id {
            attrs.push(Attr::u32(CTA_ID, id));
        }
        ct_msg(CT_NEW, f.family, attrs)
    }

    fn bytes(m: NfMsg, flags: u16, seq: u32) -> Vec<u8> {
        let mut b = Vec::new();
        emit(&mut b, m, flags, seq);
        b
    }

    /// Every message of `buf` as the receive loop hands it over.
    fn received(buf: &[u8]) -> Vec<Incoming> {
        let mut out = Vec::new();
        let end = walk(buf, &mut |m| {
            out.push(m);
            Ok(ControlFlow::Continue(()))
        });
        assert!(end.unwrap().is_continue());
        out
    }

    #[test]
    fn dump_request_layout() {
        let m = bytes(dump_request(), NLM_F_REQUEST | NLM_F_DUMP, 42);
        assert_eq!(m.len(), 20);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 20);
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), 0x0101);
        assert_eq!(u16::from_ne_bytes(m[6..8].try_into().unwrap()), NLM_F_REQUEST | NLM_F_DUMP);
        assert_eq!(u32::from_ne_bytes(m[8..12].try_into().unwrap()), 42);
        assert_eq!(&m[16..20], &[AF_UNSPEC, 0, 0, 0]);
    }

    #[test]
    fn delete_request_values_are_big_endian_on_every_host() {
        let m = bytes(delete_request(&flow()), NLM_F_REQUEST | NLM_F_ACK, 1);
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), 0x0102);
        assert_eq!(m[16], AF_INET);
        // Port 30053 = 0x7565 and the id travel in network order whatever the host.
        let find = |needle: &[u8]| m.windows(needle.len()).any(|w| w == needle);
        assert!(find(&[0x75, 0x65]));
        assert!(find(&[1, 2, 3, 4]));
        assert!(find(&[198, 18, 0, 1]));
        assert_eq!(m.len() % 4, 0);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize, m.len());
        // Only the original tuple, the id (zone 0 is left out): the kernel finds the entry by them.
        let Incoming::Msg(_, back) = &received(&m)[0] else { panic!() };
        assert_eq!(back.attrs.iter().map(Attr::kind).collect::<Vec<_>>(), vec![CTA_TUPLE_ORIG, CTA_ID]);
    }

    #[test]
    fn entry_round_trips_v4_and_v6() {
        let f = flow();
        let got = received(&bytes(entry(&f), NLM_F_MULTIPART, 7));
        let [Incoming::Msg(h, m), Incoming::Drained] = got.as_slice() else { panic!("{got:?}") };
        assert_eq!(h.sequence_number, 7);
        assert_eq!(parse_flow(m).unwrap(), f);

        let mut g = flow();
        g.family = AF_INET6;
        g.orig.src = "2001:db8::2".parse().unwrap();
        g.orig.dst = "2001:db8::1".parse().unwrap();
        g.reply.src = "fd00:1::2".parse().unwrap();
        g.reply.dst = "2001:db8::2".parse().unwrap();
        g.zone = 3;
        let got = received(&bytes(entry(&g), NLM_F_MULTIPART, 8));
        let Incoming::Msg(_, m) = &got[0] else { panic!("{got:?}") };
        assert_eq!(parse_flow(m).unwrap(), g);
    }

    #[test]
    fn only_entries_with_both_tuples_are_flows() {
        let f = flow();
        let mut m = entry(&f);
        m.msg_type = CT_DELETE;
        assert_eq!(parse_flow(&m), None);
        let mut m = entry(&f);
        m.attrs.retain(|a| a.kind() != CTA_TUPLE_REPLY);
        assert_eq!(parse_flow(&m), None);
        // A port of the wrong size skips the entry rather than inventing a port.
        let mut m = entry(&f);
        m.attrs[0] = Attr::nested(
            CTA_TUPLE_ORIG,
            vec![
                Attr::nested(
                    CTA_TUPLE_IP,
                    vec![Attr::bytes(CTA_IP_V4_SRC, [1, 2, 3, 4]), Attr::bytes(CTA_IP_V4_DST, [5, 6, 7, 8])],
                ),
                Attr::nested(
                    CTA_TUPLE_PROTO,
                    vec![Attr::bytes(CTA_PROTO_NUM, [17]), Attr::bytes(CTA_PROTO_DST_PORT, [1])],
                ),
            ],
        );
        assert_eq!(parse_flow(&m), None);
    }

    #[test]
    fn truncated_attributes_are_no_flow_and_no_panic() {
        let m = bytes(entry(&flow()), NLM_F_MULTIPART, 7);
        // Cut inside the attributes but fix up the message length: the attribute run is short.
        for cut in 20..m.len() {
            let mut b = m[..cut].to_vec();
            let len = u32::try_from(b.len()).unwrap();
            b[0..4].copy_from_slice(&len.to_ne_bytes());
            let mut flows = Vec::new();
            let r: Result<_, _> = walk(&b, &mut |i| {
                if let Incoming::Msg(_, m) = i {
                    flows.push(parse_flow(&m));
                }
                Ok(ControlFlow::Continue(()))
            });
            // The codec names the bad attribute, or the entry is incomplete (no flow),
            // or the cut fell after both tuples: never a flow with invented values.
            let whole = flow();
            if r.is_ok() {
                for f in flows.into_iter().flatten() {
                    assert_eq!((f.orig, f.reply), (whole.orig, whole.reply), "cut {cut}");
                }
            }
        }
    }
}
