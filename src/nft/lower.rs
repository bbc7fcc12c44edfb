//! Lowering: the ruleset description (`ir`) to nf_tables messages.
//!
//! Pure: no I/O. Each function returns the messages for one object; the sync
//! engine decides which objects go into a transaction and in what order.

use std::borrow::Borrow;
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use netlink_packet_core::{NLM_F_APPEND, NLM_F_CREATE};

use super::expr::{self, CmpOp as KCmp, CtKey, Data, Expr, KVerdict, MetaKey, PayloadBase};
use super::ir::*;
use super::wire::{self, host_u32, len_u32, net_u16, reg_round, Attr, MsgType, NfMsg, REG32_00, REG_VERDICT};

/// A description of what one message does, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Object {
    Table(String),
    Chain(String),
    Rule { chain: String, index: usize },
    FlushChain(String),
    Set(String),
    AnonSet { chain: String, index: usize },
    Elements { set: String, count: usize },
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Object::Table(t) => write!(f, "table {t}"),
            Object::Chain(c) => write!(f, "chain {c}"),
            Object::Rule { chain, index } => write!(f, "rule #{index} of chain {chain}"),
            Object::FlushChain(c) => write!(f, "flush of chain {c}"),
            Object::Set(s) => write!(f, "set {s}"),
            Object::AnonSet { chain, index } => {
                write!(f, "anonymous map of rule #{index} in chain {chain}")
            }
            Object::Elements { set, count } => write!(f, "{count} element(s) of set {set}"),
        }
    }
}

/// One message of a batch with its netlink flags and what it is about.
#[derive(Debug, Clone)]
pub struct Op {
    pub msg: NfMsg,
    pub flags: u16,
    pub object: Object,
}

/// An error in the description itself (caught before anything is sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LowerError {
    pub object: String,
    pub reason: String,
}

impl fmt::Display for LowerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.object, self.reason)
    }
}

impl std::error::Error for LowerError {}

pub fn family_code(f: Option<Family>) -> u8 {
    match f.unwrap_or(Family::Inet) {
        Family::Inet => wire::NFPROTO_INET,
        Family::Ip => wire::NFPROTO_IPV4,
        Family::Ip6 => wire::NFPROTO_IPV6,
    }
}

/// Lowers objects of one table. Anonymous sets get batch-unique ids from here.
pub struct Lowerer {
    pub family: u8,
    pub table: String,
    next_set_id: u32,
}

const MAX_ELEMS_BYTES: usize = 48 * 1024;

impl Lowerer {
    pub fn new(family: Option<Family>, table: &str) -> Self {
        Lowerer { family: family_code(family), table: table.to_string(), next_set_id: 1 }
    }

    fn msg(&self, t: MsgType, attrs: Vec<Attr>) -> NfMsg {
        NfMsg::new(t, self.family, attrs)
    }

    pub fn new_table(&self) -> Op {
        Op {
            msg: self.msg(
                MsgType::NewTable,
                vec![Attr::str(wire::table::NAME, &self.table), Attr::u32(wire::table::FLAGS, 0)],
            ),
            flags: NLM_F_CREATE,
            object: Object::Table(self.table.clone()),
        }
    }

    pub fn del_table(&self) -> Op {
        Op {
            msg: self.msg(MsgType::DelTable, vec![Attr::str(wire::table::NAME, &self.table)]),
            flags: 0,
            object: Object::Table(self.table.clone()),
        }
    }

    pub fn new_chain(&self, c: &Chain) -> Op {
        let mut attrs = vec![Attr::str(wire::chain::TABLE, &self.table), Attr::str(wire::chain::NAME, &c.name)];
        if let Some(b) = &c.base {
            attrs.push(Attr::nested(
                wire::chain::HOOK,
                vec![
                    Attr::u32(wire::chain::HOOK_HOOKNUM, hook_number(b.hook)),
                    Attr::i32(wire::chain::HOOK_PRIORITY, b.priority),
                ],
            ));
            let policy = match &b.policy {
                Some(Verdict::Drop) => wire::verdict::DROP,
                _ => wire::verdict::ACCEPT,
            };
            attrs.push(Attr::i32(wire::chain::POLICY, policy));
            attrs.push(Attr::str(
                wire::chain::TYPE,
                match b.kind {
                    ChainType::Filter => "filter",
                    ChainType::Nat => "nat",
                    ChainType::Route => "route",
                },
            ));
        }
        if let Some(cm) = &c.comment {
            attrs.push(Attr::bytes(wire::chain::USERDATA, udata_comment(UDATA_CHAIN_COMMENT, cm)));
        }
        Op { msg: self.msg(MsgType::NewChain, attrs), flags: NLM_F_CREATE, object: Object::Chain(c.name.clone()) }
    }

    pub fn del_chain(&self, name: &str) -> Op {
        Op {
            msg: self.msg(
                MsgType::DelChain,
                vec![Attr::str(wire::chain::TABLE, &self.table), Attr::str(wire::chain::NAME, name)],
            ),
            flags: 0,
            object: Object::Chain(name.to_string()),
        }
    }

    /// `DELRULE` naming only the chain deletes every rule in it (`nft flush chain`).
    pub fn flush_chain(&self, name: &str) -> Op {
        Op {
            msg: self.msg(
                MsgType::DelRule,
                vec![Attr::str(wire::rule::TABLE, &self.table), Attr::str(wire::rule::CHAIN, name)],
            ),
            flags: 0,
            object: Object::FlushChain(name.to_string()),
        }
    }

    pub fn new_set(&mut self, s: &Set) -> Result<Op, LowerError> {
        let err = |reason: String| LowerError { object: format!("set {}", s.name), reason };
        if s.key.is_empty() {
            return Err(err("the key has no types".into()));
        }
        let mut flags = 0;
        if s.flags.interval {
            flags |= wire::set::F_INTERVAL;
        }
        if s.flags.timeout || s.timeout.is_some() {
            flags |= wire::set::F_TIMEOUT;
        }
        if s.flags.dynamic {
            flags |= wire::set::F_EVAL;
        }
        if s.flags.constant {
            flags |= wire::set::F_CONSTANT;
        }
        // Field lengths matter only to the interval backend for concatenations
        // (pipapo); nft sends them only there, and hash sets refuse the flag.
        let concat_desc = s.key.len() > 1 && s.flags.interval;
        if concat_desc {
            flags |= wire::set::F_CONCAT;
        }
        if !s.data.is_empty() {
            flags |= wire::set::F_MAP;
        }
        let mut attrs = vec![
            Attr::str(wire::set::TABLE, &self.table),
            Attr::str(wire::set::NAME, &s.name),
            Attr::u32(wire::set::FLAGS, flags),
            Attr::u32(wire::set::KEY_TYPE, key_type_id(&s.key)),
            Attr::u32(wire::set::KEY_LEN, key_len(&s.key)),
            // The kernel requires an id on every new set (rules in the same
            // batch may refer to a set by it).
            Attr::u32(wire::set::ID, self.next_set_id),
        ];
        self.next_set_id += 1;
        match s.data.as_slice() {
            [DataType::Verdict] => attrs.push(Attr::u32(wire::set::DATA_TYPE, wire::data::TYPE_VERDICT)),
            [] => {}
            d => {
                attrs.push(Attr::u32(wire::set::DATA_TYPE, key_type_id(d)));
                attrs.push(Attr::u32(wire::set::DATA_LEN, key_len(d)));
            }
        }
        if let Some(t) = s.timeout {
            attrs.push(Attr::u64(wire::set::TIMEOUT, u64::from(t) * 1000));
        }
        if concat_desc {
            let fields = s
                .key
                .iter()
                .map(|t| Attr::nested(wire::LIST_ELEM, vec![Attr::u32(wire::set::FIELD_LEN, type_len(*t))]))
                .collect();
            attrs.push(Attr::nested(wire::set::DESC, vec![Attr::nested(wire::set::DESC_CONCAT, fields)]));
        }
        let mut udata = Vec::new();
        if let Some(k) = &s.typeof_key {
            // As nft writes them: both byte orders unset, then the expressions.
            udata.extend([UDATA_SET_KEYBYTEORDER, 4, 0, 0, 0, 0, UDATA_SET_DATABYTEORDER, 4, 0, 0, 0, 0]);
            udata_tlv(&mut udata, UDATA_SET_KEY_TYPEOF, &typeof_udata(k).map_err(err)?).map_err(err)?;
            if let Some(d) = &s.typeof_data {
                udata_tlv(&mut udata, UDATA_SET_DATA_TYPEOF, &typeof_udata(d).map_err(err)?).map_err(err)?;
            }
        }
        if let Some(cm) = &s.comment {
            udata.extend(udata_comment(UDATA_SET_COMMENT, cm));
        }
        if !udata.is_empty() {
            attrs.push(Attr::bytes(wire::set::USERDATA, udata));
        }
        Ok(Op { msg: self.msg(MsgType::NewSet, attrs), flags: NLM_F_CREATE, object: Object::Set(s.name.clone()) })
    }

    pub fn del_set(&self, name: &str) -> Op {
        Op {
            msg: self
                .msg(MsgType::DelSet, vec![Attr::str(wire::set::TABLE, &self.table), Attr::str(wire::set::NAME, name)]),
            flags: 0,
            object: Object::Set(name.to_string()),
        }
    }

    /// `NEWSETELEM`/`DELSETELEM` messages for elements of `set`, split so each
    /// element list stays below the 64 KiB attribute length limit.
    pub fn elements<E: Borrow<Element>>(
        &self,
        set: &Set,
        elems: impl IntoIterator<Item = E>,
        add: bool,
    ) -> Result<Vec<Op>, LowerError> {
        let mut ops = Vec::new();
        self.elements_each(set, elems, add, &mut |op| ops.push(op))?;
        Ok(ops)
    }

    /// [`Lowerer::elements`] one message at a time: only one chunk's attributes
    /// exist at once, however many elements the set has.
    pub fn elements_each<E: Borrow<Element>>(
        &self,
        set: &Set,
        elems: impl IntoIterator<Item = E>,
        add: bool,
        sink: &mut dyn FnMut(Op),
    ) -> Result<(), LowerError> {
        let mut chunks = Chunker::new(self, &set.name, None, add);
        // Each element is written into one scratch buffer, then copied into its message's:
        // no allocation per element.
        let mut scratch = wire::Encoder::with_capacity(128);
        for e in elems {
            scratch.clear();
            let n = element_into(set, e.borrow(), add, &mut scratch)?;
            chunks.push_encoded(scratch.bytes(), n, sink);
        }
        chunks.flush(sink);
        Ok(())
    }

    /// Element-list messages for elements already encoded as `NFTA_LIST_ELEM`s (what a
    /// comparison with the kernel's listing works with).
    pub fn raw_elements_each(
        &self,
        set: &str,
        elems: impl IntoIterator<Item = Attr>,
        add: bool,
        sink: &mut dyn FnMut(Op),
    ) {
        let mut chunks = Chunker::new(self, set, None, add);
        for a in elems {
            chunks.push(a, sink);
        }
        chunks.flush(sink);
    }

    /// The messages of one rule: anonymous maps it needs, then `NEWRULE`.
    pub fn rule(&mut self, chain: &str, index: usize, r: &Rule) -> Result<Vec<Op>, LowerError> {
        let mut rl =
            RuleLowering { l: self, chain, index, exprs: Vec::new(), pre: Vec::new(), nfproto: None, l4proto: false };
        for s in &r.stmts {
            rl.stmt(s).map_err(|reason| LowerError { object: format!("rule #{index} of chain {chain}"), reason })?;
        }
        let RuleLowering { exprs, mut pre, .. } = rl;
        let mut attrs = vec![
            Attr::str(wire::rule::TABLE, &self.table),
            Attr::str(wire::rule::CHAIN, chain),
            Attr::nested(wire::rule::EXPRESSIONS, exprs.iter().map(Expr::to_attr).collect()),
        ];
        if let Some(c) = &r.comment {
            attrs.push(Attr::bytes(wire::rule::USERDATA, udata_comment(UDATA_RULE_COMMENT, c)));
        }
        pre.push(Op {
            msg: self.msg(MsgType::NewRule, attrs),
            flags: NLM_F_CREATE | NLM_F_APPEND,
            object: Object::Rule { chain: chain.to_string(), index },
        });
        Ok(pre)
    }

    /// The kernel expressions of a rule, as `rule` would send them (for comparing with a dump).
    pub fn rule_exprs(&mut self, r: &Rule) -> Result<Vec<Expr>, LowerError> {
        let mut rl = RuleLowering {
            l: self,
            chain: "",
            index: 0,
            exprs: Vec::new(),
            pre: Vec::new(),
            nfproto: None,
            l4proto: false,
        };
        for s in &r.stmts {
            rl.stmt(s).map_err(|reason| LowerError { object: "rule".into(), reason })?;
        }
        Ok(rl.exprs)
    }
}

/// Packs encoded elements into element-list messages below [`MAX_ELEMS_BYTES`].
struct Chunker<'a> {
    l: &'a Lowerer,
    set: &'a str,
    set_id: Option<u32>,
    add: bool,
    /// The `NFTA_LIST_ELEM`s of the message being filled, encoded, and how many.
    chunk: wire::Encoder,
    count: usize,
}

impl<'a> Chunker<'a> {
    fn new(l: &'a Lowerer, set: &'a str, set_id: Option<u32>, add: bool) -> Self {
        Chunker { l, set, set_id, add, chunk: wire::Encoder::with_capacity(0), count: 0 }
    }

    fn push(&mut self, a: Attr, sink: &mut dyn FnMut(Op)) {
        use netlink_packet_core::Emitable;
        self.make_room(a.buffer_len(), sink);
        self.chunk.put_attr(&a);
        self.count += 1;
    }

    /// `n` `NFTA_LIST_ELEM`s, encoded (one element: they go into one message).
    fn push_encoded(&mut self, encoded: &[u8], n: usize, sink: &mut dyn FnMut(Op)) {
        self.make_room(encoded.len(), sink);
        self.chunk.extend(encoded);
        self.count += n;
    }

    fn make_room(&mut self, len: usize, sink: &mut dyn FnMut(Op)) {
        // The buffer grows as a vector does: most syncs change a few elements of a set.
        if self.chunk.len() + len > MAX_ELEMS_BYTES && self.count > 0 {
            self.flush(sink);
        }
    }

    fn flush(&mut self, sink: &mut dyn FnMut(Op)) {
        if self.count == 0 {
            return;
        }
        let chunk = std::mem::replace(&mut self.chunk, wire::Encoder::with_capacity(0));
        let count = std::mem::take(&mut self.count);
        let mut attrs =
            vec![Attr::str(wire::elem::LIST_TABLE, &self.l.table), Attr::str(wire::elem::LIST_SET, self.set)];
        if let Some(id) = self.set_id {
            attrs.push(Attr::u32(wire::elem::LIST_SET_ID, id));
        }
        attrs.push(Attr::nested_encoded(wire::elem::LIST_ELEMENTS, chunk));
        sink(Op {
            msg: self.l.msg(if self.add { MsgType::NewSetElem } else { MsgType::DelSetElem }, attrs),
            flags: if self.add { NLM_F_CREATE } else { 0 },
            object: Object::Elements { set: self.set.to_string(), count },
        });
    }
}

// libnftnl's userdata TLV types (`nftnl_udata_*_types`), read by `nft list`.
const UDATA_RULE_COMMENT: u8 = 0;
const UDATA_CHAIN_COMMENT: u8 = 0;
const UDATA_SET_COMMENT: u8 = 7;

/// A comment in libnftnl's userdata TLV format: type, length (with NUL), bytes, NUL.
fn udata_comment(kind: u8, text: &str) -> Vec<u8> {
    // nft limits comments to 128 bytes; a longer one would not fit the u8 length.
    let mut t: String = text.chars().take(127).collect();
    while t.len() > 127 {
        t.pop();
    }
    // 1..=128: fits.
    let len = u8::try_from(t.len() + 1).unwrap_or(128);
    let mut v = vec![kind, len];
    v.extend_from_slice(t.as_bytes());
    v.push(0);
    v
}

pub fn parse_udata_comment(b: &[u8], kind: u8) -> Option<String> {
    let mut i = 0;
    while i + 2 <= b.len() {
        let (t, l) = (b[i], b[i + 1] as usize);
        let v = b.get(i + 2..i + 2 + l)?;
        if t == kind {
            let end = v.iter().position(|&c| c == 0).unwrap_or(v.len());
            return String::from_utf8(v[..end].to_vec()).ok();
        }
        i += 2 + l;
    }
    None
}

pub fn rule_comment(udata: &[u8]) -> Option<String> {
    parse_udata_comment(udata, UDATA_RULE_COMMENT)
}

/// libnftnl's `NFTNL_UDATA_SET_KEYBYTEORDER`: how `nft list` should read an
/// anonymous map's integer keys (the kernel does not care).
const UDATA_SET_KEYBYTEORDER: u8 = 0;
const UDATA_SET_DATABYTEORDER: u8 = 1;
const UDATA_SET_KEY_TYPEOF: u8 = 3;
const UDATA_SET_DATA_TYPEOF: u8 = 4;

/// One userdata TLV (type, length, value; the length is one byte).
fn udata_tlv(out: &mut Vec<u8>, kind: u8, value: &[u8]) -> Result<(), String> {
    let len = u8::try_from(value.len()).map_err(|_| format!("typeof description of {} bytes", value.len()))?;
    out.push(kind);
    out.push(len);
    out.extend_from_slice(value);
    Ok(())
}

/// How nft describes a `typeof` expression in a set's userdata, so that `nft list`
/// prints the set as `typeof …` (nftables' `*_build_udata`): the expression kind, then
/// its parameters (payload: protocol and field template; meta: key; numgen: type,
/// modulus, offset; concatenation: each part in turn). Integers are in host order.
fn typeof_udata(f: &Field) -> Result<Vec<u8>, String> {
    const EXPR_PAYLOAD: u32 = 7;
    const EXPR_META: u32 = 9;
    const EXPR_CONCAT: u32 = 13;
    const EXPR_NUMGEN: u32 = 23;
    let ints = |vals: &[u32]| -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        for (i, v) in vals.iter().enumerate() {
            udata_tlv(&mut out, u8::try_from(i).map_err(|e| e.to_string())?, &v.to_ne_bytes())?;
        }
        Ok(out)
    };
    let (kind, data) = match f {
        // (protocol description, template): ip 12, ip6 13, th 11.
        Field::IpSaddr => (EXPR_PAYLOAD, ints(&[12, 11])?),
        Field::IpDaddr => (EXPR_PAYLOAD, ints(&[12, 12])?),
        Field::Ip6Saddr => (EXPR_PAYLOAD, ints(&[13, 8])?),
        Field::Ip6Daddr => (EXPR_PAYLOAD, ints(&[13, 9])?),
        Field::ThDport => (EXPR_PAYLOAD, ints(&[11, 2])?),
        Field::L4Proto => (EXPR_META, ints(&[16])?),
        Field::NumgenRandom(m) => (EXPR_NUMGEN, ints(&[1, *m, 0])?),
        Field::Concat(fs) => {
            let mut out = Vec::new();
            for (i, f) in fs.iter().enumerate() {
                udata_tlv(&mut out, u8::try_from(i).map_err(|e| e.to_string())?, &typeof_udata(f)?)?;
            }
            (EXPR_CONCAT, out)
        }
        other => return Err(format!("{other:?} cannot declare a set with typeof")),
    };
    let mut out = Vec::new();
    udata_tlv(&mut out, 0, &kind.to_ne_bytes())?;
    udata_tlv(&mut out, 1, &data)?;
    Ok(out)
}

fn udata_key_byteorder(key: &Field) -> Vec<u8> {
    const BYTEORDER_HOST_ENDIAN: u32 = 1;
    const BYTEORDER_BIG_ENDIAN: u32 = 2;
    let order = match key {
        Field::NumgenRandom(_)
        | Field::MetaMark
        | Field::CtMark
        | Field::CtState
        | Field::CtStatus
        | Field::FibDaddrType
        | Field::L4Proto
        | Field::NfProto => BYTEORDER_HOST_ENDIAN,
        _ => BYTEORDER_BIG_ENDIAN,
    };
    let mut v = vec![UDATA_SET_KEYBYTEORDER, 4];
    v.extend(wire::host_u32(order));
    v
}

pub fn hook_number(h: Hook) -> u32 {
    match h {
        Hook::Prerouting => 0,
        Hook::Input => 1,
        Hook::Forward => 2,
        Hook::Output => 3,
        Hook::Postrouting => 4,
    }
}

// nft's datatype ids (`enum datatypes` in nftables' datatype.h); a concatenation
// packs them 6 bits each, first type in the highest bits.
const TYPE_INTEGER: u32 = 4;
const TYPE_BITS: u32 = 6;

fn type_id(t: DataType) -> u32 {
    match t {
        DataType::Verdict => 1,
        DataType::Ipv4Addr => 7,
        DataType::Ipv6Addr => 8,
        DataType::InetProto => 12,
        DataType::InetService => 13,
        DataType::Mark => 19,
        DataType::Integer => TYPE_INTEGER,
    }
}

fn type_len(t: DataType) -> u32 {
    match t {
        DataType::Ipv4Addr | DataType::Mark | DataType::Integer => 4,
        DataType::Ipv6Addr | DataType::Verdict => 16,
        DataType::InetProto => 1,
        DataType::InetService => 2,
    }
}

fn key_type_id(key: &[DataType]) -> u32 {
    key.iter().fold(0, |acc, t| (acc << TYPE_BITS) | type_id(*t))
}

fn key_len(key: &[DataType]) -> u32 {
    if key.len() == 1 {
        type_len(key[0])
    } else {
        key.iter().map(|t| type_len(*t).div_ceil(4) * 4).sum()
    }
}

fn as_int(v: &Value) -> Option<u32> {
    match v {
        Value::Proto(p) => Some(u32::from(*p)),
        Value::Port(p) => Some(u32::from(*p)),
        Value::Mark(m) | Value::Int(m) => Some(*m),
        _ => None,
    }
}

/// A value as the kernel keeps it for a set key or map data of type `t`.
/// Appends the bytes of one value of type `t`.
fn put_typed(t: DataType, v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    match (t, v) {
        (DataType::Ipv4Addr, Value::Addr(IpAddr::V4(a))) => out.extend_from_slice(&a.octets()),
        (DataType::Ipv6Addr, Value::Addr(IpAddr::V6(a))) => out.extend_from_slice(&a.octets()),
        (DataType::InetProto, Value::Proto(p)) => out.push(*p),
        (DataType::InetService, Value::Port(p)) => out.extend_from_slice(&p.to_be_bytes()),
        (DataType::Mark | DataType::Integer, v) if as_int(v).is_some() => {
            out.extend_from_slice(&as_int(v).unwrap_or(0).to_ne_bytes())
        }
        _ => return Err(format!("value {v:?} does not fit type {t:?}")),
    }
    Ok(())
}

fn encode_key(types: &[DataType], values: &[Value]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(if types.len() == 1 { 16 } else { 40 });
    put_key(types, values, &mut out)?;
    Ok(out)
}

/// Appends a key (or concatenated data): one value, or each part padded to a register.
fn put_key(types: &[DataType], values: &[Value], out: &mut Vec<u8>) -> Result<(), String> {
    if types.len() != values.len() {
        return Err(format!("key {values:?} has {} part(s), the set's key has {}", values.len(), types.len()));
    }
    if types.len() == 1 {
        return put_typed(types[0], &values[0], out);
    }
    for (t, v) in types.iter().zip(values) {
        let at = out.len();
        put_typed(*t, v, out)?;
        out.resize(at + reg_round(out.len() - at), 0);
    }
    Ok(())
}

fn kverdict(v: &Verdict) -> KVerdict {
    let (code, chain) = match v {
        Verdict::Accept => (wire::verdict::ACCEPT, None),
        Verdict::Drop => (wire::verdict::DROP, None),
        Verdict::Return => (wire::verdict::RETURN, None),
        Verdict::Continue => (wire::verdict::CONTINUE, None),
        Verdict::Jump(c) => (wire::verdict::JUMP, Some(c.clone())),
        Verdict::Goto(c) => (wire::verdict::GOTO, Some(c.clone())),
    };
    KVerdict { code, chain }
}

/// The `NFTA_LIST_ELEM`s of one element (two for a prefix in an interval set), each
/// as one [`Attr`] of its encoded payload.
pub fn element_attrs(set: &Set, e: &Element, add: bool) -> Result<Vec<Attr>, LowerError> {
    let mut enc = wire::Encoder::with_capacity(64);
    element_into(set, e, add, &mut enc)?;
    Ok(enc.into_attrs())
}

/// Writes the `NFTA_LIST_ELEM`s of one element into `out` (a full sync lowers one per
/// service endpoint and port); how many (two for a prefix in an interval set).
fn element_into(set: &Set, e: &Element, add: bool, out: &mut wire::Encoder) -> Result<usize, LowerError> {
    let err = |reason: String| LowerError { object: format!("element {:?} of set {}", e.key, set.name), reason };
    let mut end: Option<Vec<u8>> = None;
    let key = match (set.key.as_slice(), e.key.as_slice()) {
        ([t], [Value::Prefix(net)]) => {
            if !set.flags.interval {
                return Err(err("a prefix needs an interval set".into()));
            }
            let (start, after) = prefix_bounds(*t, net).map_err(err)?;
            end = after;
            start
        }
        _ => encode_key(&set.key, &e.key).map_err(err)?,
    };
    let enc = out;
    let elem = enc.begin(wire::LIST_ELEM);
    put_value(enc, wire::elem::KEY, &key);
    if add {
        match (set.data.as_slice(), &e.data) {
            ([DataType::Verdict], Some(ElementData::Verdict(v))) => {
                let KVerdict { code, chain } = kverdict(v);
                let d = enc.begin(wire::elem::DATA);
                let vd = enc.begin(wire::data::VERDICT);
                enc.put(wire::data::VERDICT_CODE, &code.to_be_bytes());
                if let Some(c) = chain {
                    let mut name = c.into_bytes();
                    name.push(0);
                    enc.put(wire::data::VERDICT_CHAIN, &name);
                }
                enc.end(vd);
                enc.end(d);
            }
            (t, Some(ElementData::Values(v))) if !t.is_empty() => {
                let mut data = key;
                data.clear();
                put_key(t, v, &mut data).map_err(err)?;
                put_value(enc, wire::elem::DATA, &data);
            }
            ([], None) => {}
            (want, got) => return Err(err(format!("element data {got:?} does not fit the set's data {want:?}"))),
        }
        if let Some(t) = e.timeout {
            enc.put(wire::elem::TIMEOUT, &(u64::from(t) * 1000).to_be_bytes());
        }
    }
    enc.end(elem);
    let Some(after) = end else { return Ok(1) };
    let elem = enc.begin(wire::LIST_ELEM);
    enc.put(wire::elem::FLAGS, &wire::elem::F_INTERVAL_END.to_be_bytes());
    put_value(enc, wire::elem::KEY, &after);
    enc.end(elem);
    Ok(2)
}

/// `kind { NFTA_DATA_VALUE value }`, as `expr::data_attr` of a value encodes it.
fn put_value(enc: &mut wire::Encoder, kind: u16, value: &[u8]) {
    let at = enc.begin(kind);
    enc.put(wire::data::VALUE, value);
    enc.end(at);
}

/// Start of a prefix, and the first address after it (None when it reaches the top).
fn prefix_bounds(t: DataType, net: &IpNet) -> Result<(Vec<u8>, Option<Vec<u8>>), String> {
    match (t, net) {
        (DataType::Ipv4Addr, IpNet::V4(n)) => {
            let after = u32::from(n.broadcast()).checked_add(1);
            Ok((n.network().octets().to_vec(), after.map(|a| a.to_be_bytes().to_vec())))
        }
        (DataType::Ipv6Addr, IpNet::V6(n)) => {
            let after = u128::from(n.broadcast()).checked_add(1);
            Ok((n.network().octets().to_vec(), after.map(|a| a.to_be_bytes().to_vec())))
        }
        _ => Err(format!("prefix {net} does not fit type {t:?}")),
    }
}

/// How a field is loaded into registers: its kernel expressions and width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    Payload(PayloadBase, u32, u32),
    Meta(MetaKey, u32),
    Ct(CtKey),
    FibDaddrType,
    Numgen(u32),
}

fn load_of(f: &Field) -> Result<Load, String> {
    Ok(match f {
        Field::IpSaddr => Load::Payload(PayloadBase::Network, 12, 4),
        Field::IpDaddr => Load::Payload(PayloadBase::Network, 16, 4),
        Field::Ip6Saddr => Load::Payload(PayloadBase::Network, 8, 16),
        Field::Ip6Daddr => Load::Payload(PayloadBase::Network, 24, 16),
        Field::ThDport => Load::Payload(PayloadBase::Transport, 2, 2),
        Field::L4Proto => Load::Meta(MetaKey::L4Proto, 1),
        Field::NfProto => Load::Meta(MetaKey::NfProto, 1),
        Field::MetaMark => Load::Meta(MetaKey::Mark, 4),
        Field::IifName => Load::Meta(MetaKey::IifName, 16),
        Field::CtMark => Load::Ct(CtKey::Mark),
        Field::CtState => Load::Ct(CtKey::State),
        Field::CtStatus => Load::Ct(CtKey::Status),
        Field::FibDaddrType => Load::FibDaddrType,
        Field::NumgenRandom(n) => {
            if *n == 0 {
                return Err("numgen modulus 0".into());
            }
            Load::Numgen(*n)
        }
        Field::Concat(_) => return Err("a concatenation cannot be nested".into()),
    })
}

fn load_len(l: Load) -> u32 {
    match l {
        Load::Payload(_, _, len) | Load::Meta(_, len) => len,
        Load::Ct(_) | Load::FibDaddrType | Load::Numgen(_) => 4,
    }
}

/// The nft datatype id and length of a field, for anonymous sets keyed by it.
fn field_type(f: &Field) -> Result<(u32, usize), String> {
    Ok(match f {
        Field::IpSaddr | Field::IpDaddr => (type_id(DataType::Ipv4Addr), 4),
        Field::Ip6Saddr | Field::Ip6Daddr => (type_id(DataType::Ipv6Addr), 16),
        Field::L4Proto => (type_id(DataType::InetProto), 1),
        Field::ThDport => (type_id(DataType::InetService), 2),
        Field::MetaMark | Field::CtMark => (type_id(DataType::Mark), 4),
        Field::NumgenRandom(_) => (TYPE_INTEGER, 4),
        Field::Concat(fs) => {
            let mut id = 0;
            let mut len = 0;
            for f in fs {
                let (i, l) = field_type(f)?;
                id = (id << TYPE_BITS) | i;
                len += reg_round(l);
            }
            (id, len)
        }
        other => return Err(format!("{other:?} cannot key an anonymous map")),
    })
}

/// A constant for comparing with a field, in the field's register byte order.
fn encode_for_field(f: &Field, v: &Value) -> Result<Vec<u8>, String> {
    let bad = || format!("value {v:?} does not fit field {f:?}");
    match f {
        Field::IpSaddr | Field::IpDaddr => match v {
            Value::Addr(IpAddr::V4(a)) => Ok(a.octets().to_vec()),
            _ => Err(bad()),
        },
        Field::Ip6Saddr | Field::Ip6Daddr => match v {
            Value::Addr(IpAddr::V6(a)) => Ok(a.octets().to_vec()),
            _ => Err(bad()),
        },
        Field::ThDport => match v {
            Value::Port(p) => Ok(net_u16(*p)),
            _ => Err(bad()),
        },
        Field::L4Proto | Field::NfProto => match as_int(v) {
            Some(p) => u8::try_from(p).map(|p| vec![p]).map_err(|_| bad()),
            None => Err(bad()),
        },
        Field::MetaMark
        | Field::CtMark
        | Field::CtState
        | Field::CtStatus
        | Field::FibDaddrType
        | Field::NumgenRandom(_) => as_int(v).map(host_u32).ok_or_else(bad),
        Field::IifName => Err("compare iifname with an interface name".into()),
        Field::Concat(_) => Err(bad()),
    }
}

fn field_nfproto(f: &Field) -> Option<u8> {
    match f {
        Field::IpSaddr | Field::IpDaddr => Some(wire::NFPROTO_IPV4),
        Field::Ip6Saddr | Field::Ip6Daddr => Some(wire::NFPROTO_IPV6),
        Field::Concat(fs) => fs.iter().find_map(field_nfproto),
        _ => None,
    }
}

struct RuleLowering<'a, 'b> {
    l: &'a mut Lowerer,
    chain: &'b str,
    index: usize,
    exprs: Vec<Expr>,
    pre: Vec<Op>,
    /// The `meta nfproto` this rule already matched, so IPv4/IPv6 header
    /// loads in an inet table get their dependency exactly once (as nft does).
    nfproto: Option<u8>,
    l4proto: bool,
}

impl RuleLowering<'_, '_> {
    fn dependency(&mut self, f: &Field) {
        if self.l.family != wire::NFPROTO_INET {
            return;
        }
        if let Some(p) = field_nfproto(f) {
            if self.nfproto != Some(p) {
                self.exprs.push(Expr::MetaLoad { key: MetaKey::NfProto, dreg: REG32_00 });
                self.exprs.push(Expr::Cmp { sreg: REG32_00, op: KCmp::Eq, data: vec![p] });
                self.nfproto = Some(p);
            }
        }
    }

    fn load_one(&mut self, l: Load, reg: u32) {
        self.exprs.push(match l {
            Load::Payload(base, offset, len) => Expr::Payload { dreg: reg, base, offset, len },
            Load::Meta(key, _) => Expr::MetaLoad { key, dreg: reg },
            Load::Ct(key) => Expr::CtLoad { key, dreg: reg },
            Load::FibDaddrType => {
                Expr::Fib { dreg: reg, result: expr::NFT_FIB_RESULT_ADDRTYPE, flags: expr::NFTA_FIB_F_DADDR }
            }
            Load::Numgen(m) => Expr::Numgen { dreg: reg, modulus: m },
        });
    }

    /// Loads a field (or concatenation) into registers from `REG32_00`; returns its length.
    fn load(&mut self, f: &Field) -> Result<u32, String> {
        self.dependency(f);
        match f {
            Field::Concat(fs) => {
                let mut reg = REG32_00;
                let mut total = 0;
                for f in fs {
                    let l = load_of(f)?;
                    self.load_one(l, reg);
                    let w = load_len(l).div_ceil(4) * 4;
                    reg += w / 4;
                    total += w;
                }
                Ok(total)
            }
            f => {
                let l = load_of(f)?;
                self.load_one(l, REG32_00);
                Ok(load_len(l))
            }
        }
    }

    fn cmp(&mut self, op: CmpOp, data: Vec<u8>) {
        self.exprs.push(Expr::Cmp {
            sreg: REG32_00,
            op: match op {
                CmpOp::Eq => KCmp::Eq,
                CmpOp::Ne => KCmp::Neq,
            },
            data,
        });
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), String> {
        match s {
            Stmt::Cmp { field, op, value } => {
                let data = match value {
                    CmpValue::Value(v) => encode_for_field(field, v)?,
                    CmpValue::IfName(n) | CmpValue::IfNamePrefix(n) => {
                        if *field != Field::IifName {
                            return Err(format!("interface name {n:?} compared with {field:?}"));
                        }
                        if n.is_empty() || n.len() > 15 {
                            return Err(format!("interface name {n:?}: 1 to 15 bytes"));
                        }
                        let mut b = n.as_bytes().to_vec();
                        if matches!(value, CmpValue::IfName(_)) {
                            b.resize(16, 0);
                        }
                        b
                    }
                };
                self.load(field)?;
                self.cmp(*op, data);
                match (field, value) {
                    (Field::NfProto, CmpValue::Value(v)) if *op == CmpOp::Eq => {
                        self.nfproto = as_int(v).and_then(|p| u8::try_from(p).ok())
                    }
                    (Field::L4Proto, _) if *op == CmpOp::Eq => self.l4proto = true,
                    _ => {}
                }
            }
            Stmt::InPrefix { field, net, negate } => {
                let (addr, mask) = match (field, net) {
                    (Field::IpSaddr | Field::IpDaddr, IpNet::V4(n)) => {
                        (n.network().octets().to_vec(), n.netmask().octets().to_vec())
                    }
                    (Field::Ip6Saddr | Field::Ip6Daddr, IpNet::V6(n)) => {
                        (n.network().octets().to_vec(), n.netmask().octets().to_vec())
                    }
                    _ => return Err(format!("prefix {net} does not fit field {field:?}")),
                };
                self.load(field)?;
                if mask.iter().any(|&b| b != 0xff) {
                    self.exprs.push(Expr::Bitwise { sreg: REG32_00, dreg: REG32_00, xor: vec![0; mask.len()], mask });
                }
                self.cmp(if *negate { CmpOp::Ne } else { CmpOp::Eq }, addr);
            }
            Stmt::Bits { field, mask, value, negate } => {
                if self.load(field)? != 4 {
                    return Err(format!("bit test on {field:?}, which is not 32 bits"));
                }
                if *mask != u32::MAX {
                    self.exprs.push(Expr::Bitwise {
                        sreg: REG32_00,
                        dreg: REG32_00,
                        mask: host_u32(*mask),
                        xor: host_u32(0),
                    });
                }
                // A single-bit test is spelled `!= 0` (how nft writes `ct state new`).
                if *mask == *value && value.count_ones() == 1 {
                    self.cmp(if *negate { CmpOp::Eq } else { CmpOp::Ne }, host_u32(0));
                } else {
                    self.cmp(if *negate { CmpOp::Ne } else { CmpOp::Eq }, host_u32(*value));
                }
            }
            Stmt::InSet { field, set, negate } => {
                self.load(field)?;
                self.exprs.push(Expr::Lookup {
                    set: set.clone(),
                    set_id: None,
                    sreg: REG32_00,
                    dreg: None,
                    invert: *negate,
                });
            }
            Stmt::VmapNamed { key, map } => {
                self.load(key)?;
                self.exprs.push(Expr::Lookup {
                    set: map.clone(),
                    set_id: None,
                    sreg: REG32_00,
                    dreg: Some(REG_VERDICT),
                    invert: false,
                });
            }
            Stmt::VmapInline { key, entries } => self.vmap_inline(key, entries)?,
            Stmt::SetUpdate { set, key } => {
                self.load(key)?;
                self.exprs.push(Expr::Dynset { set: set.clone(), set_id: None, sreg_key: REG32_00, timeout_ms: None });
            }
            Stmt::MarkOr { field, bits } | Stmt::MarkAndNot { field, bits } => {
                let xor = if matches!(s, Stmt::MarkOr { .. }) { *bits } else { 0 };
                self.load(field)?;
                self.exprs.push(Expr::Bitwise {
                    sreg: REG32_00,
                    dreg: REG32_00,
                    mask: host_u32(!*bits),
                    xor: host_u32(xor),
                });
                self.exprs.push(match field {
                    Field::MetaMark => Expr::MetaSet { key: MetaKey::Mark, sreg: REG32_00 },
                    Field::CtMark => Expr::CtSet { key: CtKey::Mark, sreg: REG32_00 },
                    other => return Err(format!("cannot set {other:?}")),
                });
            }
            Stmt::DnatMap { ipv6, key, map } => {
                let (family, addr_len) = if *ipv6 { (wire::NFPROTO_IPV6, 16) } else { (wire::NFPROTO_IPV4, 4) };
                if self.l.family != wire::NFPROTO_INET && self.l.family != family {
                    return Err(format!("dnat from map {map} in a table of another family"));
                }
                // The map's data (`addr . inet_service`) lands where the key was loaded:
                // the address in the first registers, the port in the next one.
                self.load(key)?;
                self.exprs.push(Expr::Lookup {
                    set: map.clone(),
                    set_id: None,
                    sreg: REG32_00,
                    dreg: Some(REG32_00),
                    invert: false,
                });
                self.exprs.push(Expr::Dnat {
                    family,
                    addr_reg: Some(REG32_00),
                    proto_reg: Some(REG32_00 + addr_len / 4),
                });
            }
            Stmt::Dnat { addr, port } => {
                let (family, bytes) = match addr {
                    IpAddr::V4(a) => (wire::NFPROTO_IPV4, a.octets().to_vec()),
                    IpAddr::V6(a) => (wire::NFPROTO_IPV6, a.octets().to_vec()),
                };
                if self.l.family != wire::NFPROTO_INET && self.l.family != family {
                    return Err(format!("dnat to {addr} in a table of another family"));
                }
                let port_reg = REG32_00 + len_u32(bytes.len()) / 4;
                self.exprs.push(Expr::Immediate { dreg: REG32_00, data: Data::Value(bytes) });
                if let Some(p) = port {
                    self.exprs.push(Expr::Immediate { dreg: port_reg, data: Data::Value(net_u16(*p)) });
                }
                self.exprs.push(Expr::Dnat { family, addr_reg: Some(REG32_00), proto_reg: port.map(|_| port_reg) });
            }
            Stmt::Masquerade { fully_random } => self
                .exprs
                .push(Expr::Masq { flags: if *fully_random { expr::NF_NAT_RANGE_PROTO_RANDOM_FULLY } else { 0 } }),
            Stmt::Reject(kind) => {
                let e = match (kind, self.l.family) {
                    (RejectKind::TcpReset, _) => {
                        if !self.l4proto {
                            self.load(&Field::L4Proto)?;
                            self.cmp(CmpOp::Eq, vec![6]);
                            self.l4proto = true;
                        }
                        Expr::Reject { kind: expr::NFT_REJECT_TCP_RST, code: 0 }
                    }
                    (RejectKind::Default, wire::NFPROTO_INET) => {
                        Expr::Reject { kind: expr::NFT_REJECT_ICMPX_UNREACH, code: expr::NFT_REJECT_ICMPX_PORT_UNREACH }
                    }
                    (RejectKind::IcmpxAdminProhibited, wire::NFPROTO_INET) => Expr::Reject {
                        kind: expr::NFT_REJECT_ICMPX_UNREACH,
                        code: expr::NFT_REJECT_ICMPX_ADMIN_PROHIBITED,
                    },
                    // ICMP(v6) "port unreachable" / "admin prohibited" codes per family.
                    (RejectKind::Default, wire::NFPROTO_IPV4) => Expr::Reject { kind: 0, code: 3 },
                    (RejectKind::Default, _) => Expr::Reject { kind: 0, code: 4 },
                    (RejectKind::IcmpxAdminProhibited, wire::NFPROTO_IPV4) => Expr::Reject { kind: 0, code: 13 },
                    (RejectKind::IcmpxAdminProhibited, _) => Expr::Reject { kind: 0, code: 1 },
                };
                self.exprs.push(e);
            }
            Stmt::Counter => self.exprs.push(Expr::Counter),
            Stmt::Verdict(v) => {
                self.exprs.push(Expr::Immediate { dreg: REG_VERDICT, data: Data::Verdict(kverdict(v)) })
            }
        }
        Ok(())
    }

    /// `key vmap { v : verdict, ... }`: an anonymous constant map created in the
    /// same batch, referenced by its batch-local id.
    fn vmap_inline(&mut self, key: &Field, entries: &[(Value, Verdict)]) -> Result<(), String> {
        let (type_id, klen) = field_type(key)?;
        let id = self.l.next_set_id;
        self.l.next_set_id += 1;
        let name = "__map%d";
        let mut keys = Vec::with_capacity(entries.len());
        for (v, verdict) in entries {
            let k = match key {
                Field::Concat(_) => return Err("inline maps with concatenated keys".into()),
                f => encode_for_field(f, v)?,
            };
            keys.push(Attr::nested(
                wire::LIST_ELEM,
                vec![
                    expr::data_attr(wire::elem::KEY, &Data::Value(k)),
                    expr::data_attr(wire::elem::DATA, &Data::Verdict(kverdict(verdict))),
                ],
            ));
        }
        let object = Object::AnonSet { chain: self.chain.to_string(), index: self.index };
        let set = self.l.msg(
            MsgType::NewSet,
            vec![
                Attr::str(wire::set::TABLE, &self.l.table),
                Attr::str(wire::set::NAME, name),
                Attr::u32(wire::set::FLAGS, wire::set::F_ANONYMOUS | wire::set::F_CONSTANT | wire::set::F_MAP),
                Attr::u32(wire::set::KEY_TYPE, type_id),
                Attr::u32(wire::set::KEY_LEN, len_u32(klen)),
                Attr::u32(wire::set::DATA_TYPE, wire::data::TYPE_VERDICT),
                Attr::u32(wire::set::ID, id),
                Attr::nested(wire::set::DESC, vec![Attr::u32(wire::set::DESC_SIZE, len_u32(entries.len()))]),
                Attr::bytes(wire::set::USERDATA, udata_key_byteorder(key)),
            ],
        );
        self.pre.push(Op { msg: set, flags: NLM_F_CREATE, object: object.clone() });
        let pre = &mut self.pre;
        let mut chunks = Chunker::new(self.l, name, Some(id), true);
        let mut sink = |mut op: Op| {
            op.object = object.clone();
            pre.push(op);
        };
        for k in keys {
            chunks.push(k, &mut sink);
        }
        chunks.flush(&mut sink);
        self.load(key)?;
        self.exprs.push(Expr::Lookup {
            set: name.to_string(),
            set_id: Some(id),
            sreg: REG32_00,
            dreg: Some(REG_VERDICT),
            invert: false,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// The encoding as a tree of `Attr`s (what `element_attrs` did before writing into one
    /// buffer): the oracle its bytes are compared with.
    fn element_attrs_tree(set: &Set, e: &Element, add: bool) -> Result<Vec<Attr>, LowerError> {
        let err = |reason: String| LowerError { object: format!("element {:?} of set {}", e.key, set.name), reason };
        let mut attrs = Vec::new();
        let mut end: Option<Vec<u8>> = None;
        let key = match (set.key.as_slice(), e.key.as_slice()) {
            ([t], [Value::Prefix(net)]) => {
                if !set.flags.interval {
                    return Err(err("a prefix needs an interval set".into()));
                }
                let (start, after) = prefix_bounds(*t, net).map_err(err)?;
                end = after;
                start
            }
            _ => encode_key(&set.key, &e.key).map_err(err)?,
        };
        attrs.push(expr::data_attr(wire::elem::KEY, &Data::Value(key)));
        if add {
            match (set.data.as_slice(), &e.data) {
                ([DataType::Verdict], Some(ElementData::Verdict(v))) => {
                    attrs.push(expr::data_attr(wire::elem::DATA, &Data::Verdict(kverdict(v))))
                }
                (t, Some(ElementData::Values(v))) if !t.is_empty() => {
                    attrs.push(expr::data_attr(wire::elem::DATA, &Data::Value(encode_key(t, v).map_err(err)?)))
                }
                ([], None) => {}
                (want, got) => return Err(err(format!("element data {got:?} does not fit the set's data {want:?}"))),
            }
            if let Some(t) = e.timeout {
                attrs.push(Attr::u64(wire::elem::TIMEOUT, u64::from(t) * 1000));
            }
        }
        let mut out = vec![Attr::nested(wire::LIST_ELEM, attrs)];
        if let Some(after) = end {
            out.push(Attr::nested(
                wire::LIST_ELEM,
                vec![
                    Attr::u32(wire::elem::FLAGS, wire::elem::F_INTERVAL_END),
                    expr::data_attr(wire::elem::KEY, &Data::Value(after)),
                ],
            ));
        }
        Ok(out)
    }

    /// The golden cases of the data plane's builder (src/dataplane/cases.rs), built.
    #[allow(dead_code)] // `Case::name` names golden files, which this test has none of.
    mod golden {
        use crate::dataplane::{build, Input, ServiceInput};
        use crate::model::{Backend, Service};
        use crate::nft::ir::Ruleset;
        use std::collections::BTreeMap;
        include!("../dataplane/cases.rs");

        pub(super) fn full() -> Ruleset {
            let svcs: Vec<Service> = CASES.iter().map(|c| svc(c.service)).collect();
            build(&input(
                svcs.iter().zip(CASES).map(|(s, c)| ServiceInput { service: s, backends: ports(c.backends) }).collect(),
            ))
        }
    }

    #[test]
    fn element_encoding_is_byte_identical_to_the_attribute_tree() {
        use netlink_packet_core::Emitable;
        let rs = golden::full();
        let emit = |attrs: &[Attr]| {
            let mut buf = vec![0u8; attrs.buffer_len()];
            attrs.emit(&mut buf);
            buf
        };
        let mut seen = (0, 0, 0);
        for (name, elems) in &rs.elements {
            let set = rs.sets.iter().find(|s| s.name == *name).expect("a declared set");
            for e in elems {
                for add in [true, false] {
                    let (new, old) = (element_attrs(set, e, add).unwrap(), element_attrs_tree(set, e, add).unwrap());
                    assert_eq!(emit(&new), emit(&old), "{name} {e:?} add={add}");
                    assert_eq!(new.len(), old.len());
                    for (n, o) in new.iter().zip(&old) {
                        assert_eq!(
                            crate::nft::list::parse_element(n).unwrap(),
                            crate::nft::list::parse_element(o).unwrap()
                        );
                    }
                }
                seen.0 += 1;
                seen.1 += usize::from(matches!(e.data, Some(ElementData::Verdict(_))));
                seen.2 += usize::from(e.timeout.is_some());
            }
        }
        // Plain, verdict and timed elements were all compared.
        assert!(seen.0 > 20 && seen.1 > 0, "{seen:?}");
        // Interval sets (prefixes: loadBalancerSourceRanges), both families, and the top
        // of the address space (no end element); and a jump with its chain name.
        let set = |name: &str, key: DataType, data: Vec<DataType>, interval: bool| Set {
            name: name.into(),
            key: vec![key],
            data,
            typeof_key: None,
            typeof_data: None,
            flags: SetFlags { interval, ..SetFlags::default() },
            timeout: None,
            comment: None,
        };
        let ranges = set("ranges", DataType::Ipv4Addr, vec![], true);
        let v6 = set("ranges6", DataType::Ipv6Addr, vec![], true);
        let vmap = set("vmap", DataType::InetService, vec![DataType::Verdict], false);
        let cases = [
            (
                &ranges,
                Element { key: vec![Value::Prefix("198.18.0.0/15".parse().unwrap())], data: None, timeout: None },
            ),
            (
                &ranges,
                Element { key: vec![Value::Prefix("255.255.255.0/24".parse().unwrap())], data: None, timeout: None },
            ),
            (&v6, Element { key: vec![Value::Prefix("2001:db8::/32".parse().unwrap())], data: None, timeout: None }),
            (
                &vmap,
                Element {
                    key: vec![Value::Port(80)],
                    data: Some(ElementData::Verdict(Verdict::Jump("svc-web".into()))),
                    timeout: Some(10800),
                },
            ),
            (
                &vmap,
                Element { key: vec![Value::Port(81)], data: Some(ElementData::Verdict(Verdict::Drop)), timeout: None },
            ),
        ];
        for (set, e) in cases {
            for add in [true, false] {
                assert_eq!(
                    emit(&element_attrs(set, &e, add).unwrap()),
                    emit(&element_attrs_tree(set, &e, add).unwrap()),
                    "{e:?}"
                );
            }
        }
    }

    /// Elements are written straight into their messages: the messages' element lists,
    /// put together, are the elements' attribute trees in order, each list below the
    /// limit, and the counts add up.
    #[test]
    fn element_lists_split_below_the_limit_and_hold_every_element_in_order() {
        use netlink_packet_core::Emitable;
        let set = Set {
            name: "m".into(),
            key: vec![DataType::Ipv4Addr, DataType::InetService],
            data: vec![DataType::Ipv4Addr, DataType::InetService],
            typeof_key: None,
            typeof_data: None,
            flags: SetFlags::default(),
            timeout: None,
            comment: None,
        };
        let elems: Vec<Element> = (0..5000u32)
            .map(|i| Element {
                key: vec![Value::Addr(Ipv4Addr::from(0xC612_0000 + i).into()), Value::Port(80)],
                data: Some(ElementData::Values(vec![
                    Value::Addr(Ipv4Addr::from(0xC613_0000 + i).into()),
                    Value::Port(8080),
                ])),
                timeout: None,
            })
            .collect();
        let l = Lowerer::new(Some(Family::Inet), "t");
        for add in [true, false] {
            let ops = l.elements(&set, &elems, add).unwrap();
            assert!(ops.len() > 2, "{} messages", ops.len());
            let (mut lists, mut count) = (Vec::new(), 0);
            for op in &ops {
                let Object::Elements { count: n, .. } = op.object else { panic!("{:?}", op.object) };
                count += n;
                let list = op.msg.attrs.iter().find(|a| a.kind() == wire::elem::LIST_ELEMENTS).unwrap();
                assert!(list.buffer_len() <= MAX_ELEMS_BYTES + 4 && n > 0);
                lists.extend_from_slice(list.payload());
            }
            assert_eq!(count, elems.len());
            let want: Vec<Attr> = elems.iter().flat_map(|e| element_attrs_tree(&set, e, add).unwrap()).collect();
            let mut buf = vec![0u8; want.as_slice().buffer_len()];
            want.as_slice().emit(&mut buf);
            assert!(lists == buf, "add={add}");
        }
    }

    #[test]
    fn concat_key_is_padded_to_registers() {
        let key = encode_key(
            &[DataType::Ipv4Addr, DataType::InetProto, DataType::InetService],
            &[Value::Addr(IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10))), Value::Proto(6), Value::Port(80)],
        )
        .unwrap();
        assert_eq!(key, vec![10, 96, 0, 10, 6, 0, 0, 0, 0, 80, 0, 0]);
        assert_eq!(
            key_type_id(&[DataType::Ipv4Addr, DataType::InetProto, DataType::InetService]),
            (7 << 12) | (12 << 6) | 13
        );
        assert_eq!(key_len(&[DataType::Ipv4Addr, DataType::InetProto, DataType::InetService]), 12);
    }

    #[test]
    fn marks_are_host_order_ports_network_order() {
        assert_eq!(encode_for_field(&Field::MetaMark, &Value::Mark(0x4000)).unwrap(), 0x4000u32.to_ne_bytes().to_vec());
        assert_eq!(encode_for_field(&Field::ThDport, &Value::Port(443)).unwrap(), vec![1, 0xbb]);
    }

    #[test]
    fn ip_match_in_inet_gets_nfproto_dependency_once() {
        let mut l = Lowerer::new(Some(Family::Inet), "t");
        let r = Rule {
            stmts: vec![
                Stmt::Cmp {
                    field: Field::IpDaddr,
                    op: CmpOp::Eq,
                    value: CmpValue::Value(Value::Addr(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)))),
                },
                Stmt::InPrefix { field: Field::IpSaddr, net: "198.18.0.0/15".parse().unwrap(), negate: true },
            ],
            comment: None,
        };
        let e = l.rule_exprs(&r).unwrap();
        let deps = e.iter().filter(|x| matches!(x, Expr::MetaLoad { key: MetaKey::NfProto, .. })).count();
        assert_eq!(deps, 1);
        assert_eq!(e.last(), Some(&Expr::Cmp { sreg: REG32_00, op: KCmp::Neq, data: vec![198, 18, 0, 0] }));
    }

    #[test]
    fn comment_userdata_format() {
        assert_eq!(udata_comment(0, "hi"), vec![0, 3, b'h', b'i', 0]);
        assert_eq!(rule_comment(&[0, 3, b'h', b'i', 0]).as_deref(), Some("hi"));
    }

    #[test]
    fn prefix_interval_end_is_next_address() {
        let (s, e) = prefix_bounds(DataType::Ipv4Addr, &"198.18.0.0/15".parse().unwrap()).unwrap();
        assert_eq!(s, vec![198, 18, 0, 0]);
        assert_eq!(e, Some(vec![198, 20, 0, 0]));
        let (_, e) = prefix_bounds(DataType::Ipv4Addr, &"0.0.0.0/0".parse().unwrap()).unwrap();
        assert_eq!(e, None);
    }
}
