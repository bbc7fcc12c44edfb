//! The nfnetlink codec: constants from the kernel UAPI (`nf_tables.h`,
//! `nfnetlink.h`), an attribute tree that emits through netlink-packet-core's
//! `Nla`/`Emitable`, the nfnetlink message (`nfgenmsg` + attributes), and every
//! byte-order decision of this module.
//!
//! Byte order lives here and only here, because routers run big-endian MIPS:
//! - netlink message headers and attribute headers are host-endian (done by
//!   netlink-packet-core);
//! - nf_tables attribute payloads (`NFTA_*` integers, registers, verdict codes,
//!   lengths, flags, timeouts) are big-endian: [`Attr::u32`], [`Attr::u64`];
//! - register *data* follows the field it came from: packet bytes (addresses,
//!   ports) are network order ([`net_u16`]); values the kernel keeps as host
//!   integers (marks, ct state/status, fib address type, numgen results, meta
//!   l4proto/nfproto bytes) are host order ([`host_u32`]).

use netlink_packet_core::{
    DecodeError, Emitable, NetlinkDeserializable, NetlinkHeader, NetlinkMessage, NetlinkPayload, NetlinkSerializable,
    Nla, NlaBuffer, NlasIterator, NLA_F_NESTED, NLA_TYPE_MASK,
};

/// `NFNL_SUBSYS_NFTABLES`
pub const NFNL_SUBSYS_NFTABLES: u16 = 10;
pub const NFNL_MSG_BATCH_BEGIN: u16 = 16;
pub const NFNL_MSG_BATCH_END: u16 = 17;
/// `NFNLGRP_NFTABLES`: the multicast group of nf_tables change events.
pub const NFNLGRP_NFTABLES: u32 = 7;
pub const NFNL_BATCH_GENID: u16 = 1;

pub const NFPROTO_UNSPEC: u8 = 0;
pub const NFPROTO_INET: u8 = 1;
pub const NFPROTO_IPV4: u8 = 2;
pub const NFPROTO_IPV6: u8 = 10;

/// `enum nf_tables_msg_types`
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum MsgType {
    NewTable = 0,
    GetTable = 1,
    DelTable = 2,
    NewChain = 3,
    GetChain = 4,
    DelChain = 5,
    NewRule = 6,
    GetRule = 7,
    DelRule = 8,
    NewSet = 9,
    GetSet = 10,
    DelSet = 11,
    NewSetElem = 12,
    GetSetElem = 13,
    DelSetElem = 14,
    NewGen = 15,
    GetGen = 16,
}

impl MsgType {
    pub fn from_u8(v: u8) -> Option<Self> {
        use MsgType::*;
        Some(match v {
            0 => NewTable,
            1 => GetTable,
            2 => DelTable,
            3 => NewChain,
            4 => GetChain,
            5 => DelChain,
            6 => NewRule,
            7 => GetRule,
            8 => DelRule,
            9 => NewSet,
            10 => GetSet,
            11 => DelSet,
            12 => NewSetElem,
            13 => GetSetElem,
            14 => DelSetElem,
            15 => NewGen,
            16 => GetGen,
            _ => return None,
        })
    }

    /// The full `nlmsg_type`: subsystem in the high byte.
    pub fn nlmsg_type(self) -> u16 {
        (NFNL_SUBSYS_NFTABLES << 8) | self as u16
    }
}

pub mod table {
    pub const NAME: u16 = 1;
    pub const FLAGS: u16 = 2;
    pub const USE: u16 = 3;
    pub const HANDLE: u16 = 4;
    pub const USERDATA: u16 = 6;
}

pub mod chain {
    pub const TABLE: u16 = 1;
    pub const HANDLE: u16 = 2;
    pub const NAME: u16 = 3;
    pub const HOOK: u16 = 4;
    pub const POLICY: u16 = 5;
    pub const USE: u16 = 6;
    pub const TYPE: u16 = 7;
    pub const FLAGS: u16 = 10;
    pub const ID: u16 = 11;
    pub const USERDATA: u16 = 12;
    pub const HOOK_HOOKNUM: u16 = 1;
    pub const HOOK_PRIORITY: u16 = 2;
}

pub mod rule {
    pub const TABLE: u16 = 1;
    pub const CHAIN: u16 = 2;
    pub const HANDLE: u16 = 3;
    pub const EXPRESSIONS: u16 = 4;
    pub const POSITION: u16 = 6;
    pub const USERDATA: u16 = 7;
    pub const ID: u16 = 9;
    pub const CHAIN_ID: u16 = 11;
}

/// `NFTA_LIST_ELEM`: one entry of a list (expressions, elements, concat fields).
pub const LIST_ELEM: u16 = 1;

pub mod expr {
    pub const NAME: u16 = 1;
    pub const DATA: u16 = 2;
}

pub mod set {
    pub const TABLE: u16 = 1;
    pub const NAME: u16 = 2;
    pub const FLAGS: u16 = 3;
    pub const KEY_TYPE: u16 = 4;
    pub const KEY_LEN: u16 = 5;
    pub const DATA_TYPE: u16 = 6;
    pub const DATA_LEN: u16 = 7;
    pub const POLICY: u16 = 8;
    pub const DESC: u16 = 9;
    pub const ID: u16 = 10;
    pub const TIMEOUT: u16 = 11;
    pub const USERDATA: u16 = 13;
    pub const HANDLE: u16 = 16;
    pub const DESC_SIZE: u16 = 1;
    pub const DESC_CONCAT: u16 = 2;
    pub const FIELD_LEN: u16 = 1;

    pub const F_ANONYMOUS: u32 = 0x1;
    pub const F_CONSTANT: u32 = 0x2;
    pub const F_INTERVAL: u32 = 0x4;
    pub const F_MAP: u32 = 0x8;
    pub const F_TIMEOUT: u32 = 0x10;
    pub const F_EVAL: u32 = 0x20;
    pub const F_CONCAT: u32 = 0x80;
}

pub mod elem {
    pub const LIST_TABLE: u16 = 1;
    pub const LIST_SET: u16 = 2;
    pub const LIST_ELEMENTS: u16 = 3;
    pub const LIST_SET_ID: u16 = 4;
    pub const KEY: u16 = 1;
    pub const DATA: u16 = 2;
    pub const FLAGS: u16 = 3;
    pub const TIMEOUT: u16 = 4;
    pub const EXPIRATION: u16 = 5;
    pub const KEY_END: u16 = 10;
    pub const F_INTERVAL_END: u32 = 0x1;
}

pub mod data {
    pub const VALUE: u16 = 1;
    pub const VERDICT: u16 = 2;
    pub const VERDICT_CODE: u16 = 1;
    pub const VERDICT_CHAIN: u16 = 2;
    pub const VERDICT_CHAIN_ID: u16 = 3;
    /// `NFT_DATA_VERDICT`: the data type of verdict maps.
    pub const TYPE_VERDICT: u32 = 0xffff_ff00;
}

pub mod gen {
    pub const ID: u16 = 1;
    pub const PROC_PID: u16 = 2;
    pub const PROC_NAME: u16 = 3;
}

/// Kernel verdict codes (`NF_DROP`, `NF_ACCEPT`, `NFT_*`), as signed host values.
pub mod verdict {
    pub const DROP: i32 = 0;
    pub const ACCEPT: i32 = 1;
    pub const CONTINUE: i32 = -1;
    pub const JUMP: i32 = -3;
    pub const GOTO: i32 = -4;
    pub const RETURN: i32 = -5;
}

/// `NFT_REG_VERDICT` and the first 32-bit data register (`NFT_REG32_00`).
pub const REG_VERDICT: u32 = 0;
pub const REG32_00: u32 = 8;

/// An nf_tables attribute: a leaf holding bytes or a list of child attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    kind: u16,
    value: AttrValue,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum AttrValue {
    Bytes(Vec<u8>),
    /// The children and their encoded length, computed once: `emit` asks every level for
    /// its length, so recomputing it would cost O(depth²) per attribute.
    Nested(Vec<Attr>, usize),
}

impl Attr {
    pub fn bytes(kind: u16, value: impl Into<Vec<u8>>) -> Self {
        Attr { kind, value: AttrValue::Bytes(value.into()) }
    }
    /// A big-endian u16 (ctnetlink ports and zones).
    pub fn u16(kind: u16, value: u16) -> Self {
        Self::bytes(kind, value.to_be_bytes().to_vec())
    }
    /// A big-endian u32: every integer attribute nf_tables defines.
    pub fn u32(kind: u16, value: u32) -> Self {
        Self::bytes(kind, value.to_be_bytes().to_vec())
    }
    /// A big-endian signed i32 (chain priority, verdict code).
    pub fn i32(kind: u16, value: i32) -> Self {
        Self::bytes(kind, value.to_be_bytes().to_vec())
    }
    /// A big-endian u64 (timeouts in milliseconds, counters).
    pub fn u64(kind: u16, value: u64) -> Self {
        Self::bytes(kind, value.to_be_bytes().to_vec())
    }
    /// A NUL-terminated string.
    pub fn str(kind: u16, value: &str) -> Self {
        let mut v = Vec::with_capacity(value.len() + 1);
        v.extend_from_slice(value.as_bytes());
        v.push(0);
        Self::bytes(kind, v)
    }
    pub fn nested(kind: u16, children: Vec<Attr>) -> Self {
        let len = children.as_slice().buffer_len();
        Attr { kind, value: AttrValue::Nested(children, len) }
    }
    /// A nested attribute whose children an [`Encoder`] already wrote: emitted as they are
    /// (the same bytes as [`Attr::nested`] of those children, with one allocation).
    pub fn nested_encoded(kind: u16, children: Encoder) -> Self {
        Attr { kind: kind | NLA_F_NESTED, value: AttrValue::Bytes(children.0) }
    }

    pub fn kind(&self) -> u16 {
        self.kind & NLA_TYPE_MASK
    }

    /// The raw payload of a leaf (empty for a nested attribute).
    pub fn payload(&self) -> &[u8] {
        match &self.value {
            AttrValue::Bytes(b) => b,
            AttrValue::Nested(..) => &[],
        }
    }

    /// The children, parsed on demand from a received leaf.
    pub fn children(&self) -> Result<Vec<Attr>, DecodeError> {
        match &self.value {
            AttrValue::Nested(c, _) => Ok(c.clone()),
            AttrValue::Bytes(b) => parse_attrs(b),
        }
    }

    pub fn as_u32(&self) -> Result<u32, DecodeError> {
        let b: [u8; 4] = self.payload().try_into().map_err(|_| {
            DecodeError::from(format!("attribute {} : expected 4 bytes, got {}", self.kind(), self.payload().len()))
        })?;
        Ok(u32::from_be_bytes(b))
    }
    pub fn as_u64(&self) -> Result<u64, DecodeError> {
        let b: [u8; 8] = self.payload().try_into().map_err(|_| {
            DecodeError::from(format!("attribute {} : expected 8 bytes, got {}", self.kind(), self.payload().len()))
        })?;
        Ok(u64::from_be_bytes(b))
    }
    pub fn as_str(&self) -> Result<String, DecodeError> {
        let p = self.payload();
        let end = p.iter().position(|&b| b == 0).unwrap_or(p.len());
        String::from_utf8(p[..end].to_vec()).map_err(|e| DecodeError::from(format!("attribute {}: {e}", self.kind())))
    }
}

/// Attributes written straight into one buffer (header, payload, padding to 4 bytes), for
/// the many small nested attributes of set elements: no tree of `Attr`s to build and drop.
#[derive(Debug, Default)]
pub struct Encoder(Vec<u8>);

impl Encoder {
    pub fn with_capacity(n: usize) -> Self {
        Encoder(Vec::with_capacity(n))
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn clear(&mut self) {
        self.0.clear();
    }
    /// What was written so far.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
    /// Attributes encoded elsewhere (whole, padded), appended as they are.
    pub fn extend(&mut self, encoded: &[u8]) {
        self.0.extend_from_slice(encoded);
    }
    /// `a`, encoded as [`Attr`]'s `Emitable` emits it.
    pub fn put_attr(&mut self, a: &Attr) {
        use netlink_packet_core::Emitable;
        let at = self.0.len();
        self.0.resize(at + a.buffer_len(), 0);
        a.emit(&mut self.0[at..]);
    }
    /// The top-level attributes written, each as one [`Attr`] of its encoded payload.
    pub fn into_attrs(self) -> Vec<Attr> {
        let mut out = Vec::new();
        let mut b = self.0.as_slice();
        while let Some((&[l0, l1, k0, k1], rest)) = b.split_first_chunk::<4>() {
            let len = usize::from(u16::from_ne_bytes([l0, l1]));
            let payload = rest.get(..len.saturating_sub(4)).unwrap_or(rest);
            out.push(Attr { kind: u16::from_ne_bytes([k0, k1]), value: AttrValue::Bytes(payload.to_vec()) });
            b = b.get(len.next_multiple_of(4)..).unwrap_or_default();
        }
        out
    }
    /// One leaf attribute.
    pub fn put(&mut self, kind: u16, payload: &[u8]) {
        // One growth for the header, the payload and the padding, then copies in place:
        // a copy of a known length is a store, where each append would be a call to
        // `memcpy` (an element's attributes are a dozen of them).
        let at = self.0.len();
        let end = at + 4 + payload.len();
        self.0.resize(end.next_multiple_of(4), 0);
        self.write_header(at, kind, 4 + payload.len());
        let dst = &mut self.0[at + 4..end];
        match <&[u8; 4]>::try_from(payload) {
            Ok(p) => dst.copy_from_slice(p),
            Err(_) => dst.copy_from_slice(payload),
        }
    }
    /// Opens a nested attribute; its children follow, then [`Encoder::end`] with the
    /// returned mark.
    pub fn begin(&mut self, kind: u16) -> usize {
        let at = self.0.len();
        self.header(kind | NLA_F_NESTED, 0);
        at
    }
    /// Closes the nested attribute opened at `at`: its length covers its children.
    pub fn end(&mut self, at: usize) {
        let len = u16::try_from(self.0.len() - at).unwrap_or(u16::MAX);
        self.0[at..at + 2].copy_from_slice(&len.to_ne_bytes());
    }
    fn header(&mut self, kind: u16, len: usize) {
        let at = self.0.len();
        self.0.resize(at + 4, 0);
        self.write_header(at, kind, len);
    }
    fn write_header(&mut self, at: usize, kind: u16, len: usize) {
        let [l0, l1] = u16::try_from(len).unwrap_or(u16::MAX).to_ne_bytes();
        let [k0, k1] = kind.to_ne_bytes();
        if let Some(h) = self.0.get_mut(at..at + 4) {
            h.copy_from_slice(&[l0, l1, k0, k1]);
        }
    }
}

impl Nla for Attr {
    fn value_len(&self) -> usize {
        match &self.value {
            AttrValue::Bytes(b) => b.len(),
            AttrValue::Nested(_, len) => *len,
        }
    }
    fn kind(&self) -> u16 {
        match &self.value {
            AttrValue::Bytes(_) => self.kind,
            AttrValue::Nested(..) => self.kind | NLA_F_NESTED,
        }
    }
    fn emit_value(&self, buffer: &mut [u8]) {
        match &self.value {
            AttrValue::Bytes(b) => buffer.copy_from_slice(b),
            AttrValue::Nested(c, _) => c.as_slice().emit(buffer),
        }
    }
}

/// Parses a run of attributes; nested ones stay as bytes until `children()`.
pub fn parse_attrs(buf: &[u8]) -> Result<Vec<Attr>, DecodeError> {
    let mut out = Vec::new();
    for nla in NlasIterator::new(buf) {
        let nla: NlaBuffer<&[u8]> = nla?;
        out.push(Attr::bytes(nla.kind(), nla.value().to_vec()));
    }
    Ok(out)
}

/// The payload of the first attribute of `kind` in a run of attributes, read in
/// place (no copy): for walking big answers, such as a conntrack table, entry by entry.
pub fn find_attr(buf: &[u8], kind: u16) -> Option<&[u8]> {
    let nla = NlasIterator::new(buf).map_while(Result::ok).find(|a| a.kind() & NLA_TYPE_MASK == kind)?;
    let len = usize::from(nla.length());
    // The iterator checked that the attribute's length fits `buf`.
    nla.into_inner().get(4..len)
}

/// Lookup helpers over a parsed attribute list.
pub trait AttrList {
    fn attr(&self, kind: u16) -> Option<&Attr>;
    fn u32_of(&self, kind: u16) -> Result<Option<u32>, DecodeError> {
        self.attr(kind).map(Attr::as_u32).transpose()
    }
    fn str_of(&self, kind: u16) -> Result<Option<String>, DecodeError> {
        self.attr(kind).map(Attr::as_str).transpose()
    }
}

impl AttrList for [Attr] {
    fn attr(&self, kind: u16) -> Option<&Attr> {
        self.iter().find(|a| a.kind() == kind)
    }
}

impl AttrList for Vec<Attr> {
    fn attr(&self, kind: u16) -> Option<&Attr> {
        self.as_slice().attr(kind)
    }
}

/// One nfnetlink message: `struct nfgenmsg` followed by attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NfMsg {
    /// The full `nlmsg_type` (subsystem << 8 | message).
    pub msg_type: u16,
    pub family: u8,
    /// `res_id`: the subsystem for batch delimiters, else 0 (generation id in events).
    pub res_id: u16,
    pub attrs: Vec<Attr>,
}

const NFGENMSG_LEN: usize = 4;
const NFNETLINK_V0: u8 = 0;

impl NfMsg {
    pub fn new(msg: MsgType, family: u8, attrs: Vec<Attr>) -> Self {
        NfMsg { msg_type: msg.nlmsg_type(), family, res_id: 0, attrs }
    }

    /// `NFNL_MSG_BATCH_BEGIN` / `END` for the nf_tables subsystem.
    pub fn batch(begin: bool, genid: Option<u32>) -> Self {
        NfMsg {
            msg_type: if begin { NFNL_MSG_BATCH_BEGIN } else { NFNL_MSG_BATCH_END },
            family: NFPROTO_UNSPEC,
            res_id: NFNL_SUBSYS_NFTABLES,
            attrs: genid.map(|g| vec![Attr::u32(NFNL_BATCH_GENID, g)]).unwrap_or_default(),
        }
    }

    /// The nf_tables message kind, if this is one.
    pub fn kind(&self) -> Option<MsgType> {
        if self.msg_type >> 8 == NFNL_SUBSYS_NFTABLES {
            MsgType::from_u8((self.msg_type & 0xff) as u8)
        } else {
            None
        }
    }
}

impl NetlinkSerializable for NfMsg {
    fn message_type(&self) -> u16 {
        self.msg_type
    }
    fn buffer_len(&self) -> usize {
        NFGENMSG_LEN + self.attrs.as_slice().buffer_len()
    }
    fn serialize(&self, buffer: &mut [u8]) {
        buffer[0] = self.family;
        buffer[1] = NFNETLINK_V0;
        // res_id is __be16 in struct nfgenmsg.
        buffer[2..4].copy_from_slice(&self.res_id.to_be_bytes());
        self.attrs.as_slice().emit(&mut buffer[NFGENMSG_LEN..]);
    }
}

impl NetlinkDeserializable for NfMsg {
    type Error = DecodeError;
    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, DecodeError> {
        if payload.len() < NFGENMSG_LEN {
            return Err(DecodeError::from(format!(
                "nfnetlink message type {:#x}: {} bytes, shorter than nfgenmsg",
                header.message_type,
                payload.len()
            )));
        }
        Ok(NfMsg {
            msg_type: header.message_type,
            family: payload[0],
            res_id: u16::from_be_bytes([payload[2], payload[3]]),
            attrs: parse_attrs(&payload[NFGENMSG_LEN..])?,
        })
    }
}

/// Appends `msg` to `buf` as one netlink message (header, nfgenmsg, attributes).
pub fn emit(buf: &mut Vec<u8>, msg: NfMsg, flags: u16, seq: u32) {
    let mut h = NetlinkHeader::default();
    h.flags = flags;
    h.sequence_number = seq;
    let mut m = NetlinkMessage::new(h, NetlinkPayload::InnerMessage(msg));
    m.finalize();
    let start = buf.len();
    buf.resize(start + m.buffer_len(), 0);
    m.serialize(&mut buf[start..]);
}

// ---- register data: the byte order of values as the kernel keeps them ----

/// A value the kernel stores as a host integer (mark, ct state, numgen result).
pub fn host_u32(v: u32) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

pub fn from_host_u32(b: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(b.try_into().ok()?))
}

/// A port as it sits in the packet (network order).
pub fn net_u16(v: u16) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

pub fn from_net_u16(b: &[u8]) -> Option<u16> {
    Some(u16::from_be_bytes(b.try_into().ok()?))
}

/// Rounds a key length up to whole 32-bit registers, as concatenations require.
pub fn reg_round(len: usize) -> usize {
    len.div_ceil(4) * 4
}

/// A length or count for a 32-bit netlink field (an attribute's bytes, a set's
/// elements, a map's entries). What is counted lives in memory, so it is far below 2^32
/// (and `usize` is 32 bits on the routers); the conversion saturates rather than wraps,
/// so an impossible overflow could never become a small wrong number, and adds no panic.
pub fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_attributes_are_big_endian_on_every_host() {
        let a = Attr::u32(7, 0x0102_0304);
        let mut buf = vec![0u8; a.buffer_len()];
        a.emit(&mut buf);
        // Header (len 8, type 7) is host-endian; the payload is big-endian.
        assert_eq!(&buf[..2], &8u16.to_ne_bytes());
        assert_eq!(&buf[2..4], &7u16.to_ne_bytes());
        assert_eq!(&buf[4..], &[1, 2, 3, 4]);
        let p = Attr::i32(2, -100);
        assert_eq!(p.payload(), &[0xff, 0xff, 0xff, 0x9c]);
        assert_eq!(Attr::u64(1, 1000).payload(), &[0, 0, 0, 0, 0, 0, 0x03, 0xe8]);
        assert_eq!(net_u16(8080), vec![0x1f, 0x90]);
        assert_eq!(host_u32(0x4000), 0x4000u32.to_ne_bytes().to_vec());
    }

    #[test]
    fn strings_are_nul_terminated_and_padded() {
        let a = Attr::str(1, "nat");
        let mut buf = vec![0u8; a.buffer_len()];
        a.emit(&mut buf);
        assert_eq!(buf.len(), 8);
        assert_eq!(&buf[..2], &8u16.to_ne_bytes());
        assert_eq!(&buf[4..], b"nat\0");
        let b = Attr::str(1, "nodeportd");
        let mut buf = vec![0u8; b.buffer_len()];
        b.emit(&mut buf);
        // 4 header + 10 value = 14, padded to 16; the length field says 14.
        assert_eq!(buf.len(), 16);
        assert_eq!(&buf[..2], &14u16.to_ne_bytes());
        assert_eq!(&buf[14..], &[0, 0]);
    }

    #[test]
    fn nested_attributes_set_the_nested_flag_and_round_trip() {
        let a = Attr::nested(4, vec![Attr::u32(1, 0), Attr::i32(2, -100)]);
        let mut buf = vec![0u8; a.buffer_len()];
        a.emit(&mut buf);
        assert_eq!(buf.len(), 20);
        assert_eq!(&buf[2..4], &(4u16 | NLA_F_NESTED).to_ne_bytes());
        let parsed = parse_attrs(&buf).unwrap();
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].kind(), 4);
        let kids = parsed[0].children().unwrap();
        assert_eq!(kids[1].as_u32().unwrap() as i32, -100);
    }

    /// Golden bytes of a NEWTABLE message for `inet nodeportd` (little-endian
    /// host view of the netlink header; the attribute payload is fixed).
    #[test]
    fn newtable_golden_bytes() {
        let msg = NfMsg::new(
            MsgType::NewTable,
            NFPROTO_INET,
            vec![Attr::str(table::NAME, "nodeportd"), Attr::u32(table::FLAGS, 0)],
        );
        let mut header = NetlinkHeader::default();
        header.flags = 0x0405; // REQUEST | ACK | CREATE
        header.sequence_number = 3;
        let mut nl = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
        nl.finalize();
        let mut buf = vec![0u8; nl.buffer_len()];
        nl.serialize(&mut buf);
        let mut want = Vec::new();
        want.extend_from_slice(&44u32.to_ne_bytes());
        want.extend_from_slice(&0x0a00u16.to_ne_bytes());
        want.extend_from_slice(&0x0405u16.to_ne_bytes());
        want.extend_from_slice(&3u32.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes());
        want.extend_from_slice(&[1, 0, 0, 0]); // nfgenmsg: inet, v0, res_id 0
        want.extend_from_slice(&14u16.to_ne_bytes());
        want.extend_from_slice(&1u16.to_ne_bytes());
        want.extend_from_slice(b"nodeportd\0\0\0");
        want.extend_from_slice(&8u16.to_ne_bytes());
        want.extend_from_slice(&2u16.to_ne_bytes());
        want.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(buf, want);
        let back = NetlinkMessage::<NfMsg>::deserialize(&buf).unwrap();
        match back.payload {
            NetlinkPayload::InnerMessage(m) => {
                assert_eq!(m.kind(), Some(MsgType::NewTable));
                assert_eq!(m.attrs.str_of(table::NAME).unwrap().as_deref(), Some("nodeportd"));
            }
            other => panic!("unexpected payload {other:?}"),
        }
    }

    #[test]
    fn batch_delimiter_res_id_is_big_endian() {
        let b = NfMsg::batch(true, Some(5));
        let mut buf = vec![0u8; b.buffer_len()];
        b.serialize(&mut buf);
        assert_eq!(&buf[..4], &[0, 0, 0, 10]);
        assert_eq!(&buf[8..12], &[0, 0, 0, 5]);
    }
}
