//! nf_tables expressions as typed values: how each is spelled on the wire
//! (`NFTA_EXPR_NAME` + `NFTA_EXPR_DATA`) and parsed back from a rule dump.

use netlink_packet_core::DecodeError;

use super::wire::{self, len_u32, Attr, AttrList};

/// Register data: raw bytes (already in the byte order of the field) or a verdict.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Data {
    Value(Vec<u8>),
    Verdict(KVerdict),
}

/// A verdict as the kernel spells it: a code and, for jump/goto, a chain.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KVerdict {
    pub code: i32,
    pub chain: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadBase {
    Link = 0,
    Network = 1,
    Transport = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaKey {
    Mark = 3,
    IifName = 6,
    NfProto = 15,
    L4Proto = 16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CtKey {
    State = 0,
    Status = 2,
    Mark = 3,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq = 0,
    Neq = 1,
}

pub const NAT_DNAT: u32 = 1;
pub const NF_NAT_RANGE_PROTO_RANDOM_FULLY: u32 = 0x10;
pub const NFT_NG_RANDOM: u32 = 1;
pub const NFT_FIB_RESULT_ADDRTYPE: u32 = 3;
pub const NFTA_FIB_F_DADDR: u32 = 2;
pub const NFT_REJECT_TCP_RST: u32 = 1;
pub const NFT_REJECT_ICMPX_UNREACH: u32 = 2;
pub const NFT_REJECT_ICMPX_PORT_UNREACH: u8 = 1;
pub const NFT_REJECT_ICMPX_ADMIN_PROHIBITED: u8 = 3;
pub const NFT_DYNSET_OP_UPDATE: u32 = 1;
pub const NFT_LOOKUP_F_INV: u32 = 1;

/// One kernel expression. Registers use the 32-bit numbering (`NFT_REG32_00` = 8).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Expr {
    Payload {
        dreg: u32,
        base: PayloadBase,
        offset: u32,
        len: u32,
    },
    MetaLoad {
        key: MetaKey,
        dreg: u32,
    },
    MetaSet {
        key: MetaKey,
        sreg: u32,
    },
    CtLoad {
        key: CtKey,
        dreg: u32,
    },
    CtSet {
        key: CtKey,
        sreg: u32,
    },
    Cmp {
        sreg: u32,
        op: CmpOp,
        data: Vec<u8>,
    },
    /// `dreg = (sreg & mask) ^ xor`
    Bitwise {
        sreg: u32,
        dreg: u32,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    Lookup {
        set: String,
        set_id: Option<u32>,
        sreg: u32,
        dreg: Option<u32>,
        invert: bool,
    },
    Immediate {
        dreg: u32,
        data: Data,
    },
    /// Destination NAT to the address (and port) in registers.
    Dnat {
        family: u8,
        addr_reg: Option<u32>,
        proto_reg: Option<u32>,
    },
    Masq {
        flags: u32,
    },
    Numgen {
        dreg: u32,
        modulus: u32,
    },
    Fib {
        dreg: u32,
        result: u32,
        flags: u32,
    },
    Counter,
    Reject {
        kind: u32,
        code: u8,
    },
    Dynset {
        set: String,
        set_id: Option<u32>,
        sreg_key: u32,
        timeout_ms: Option<u64>,
    },
    /// An expression we do not model, kept so a dump never fails.
    Other {
        name: String,
    },
}

// NFTA_* numbers, per expression, from nf_tables.h.
const PAYLOAD_DREG: u16 = 1;
const PAYLOAD_BASE: u16 = 2;
const PAYLOAD_OFFSET: u16 = 3;
const PAYLOAD_LEN: u16 = 4;
const META_DREG: u16 = 1;
const META_KEY: u16 = 2;
const META_SREG: u16 = 3;
const CT_DREG: u16 = 1;
const CT_KEY: u16 = 2;
const CT_SREG: u16 = 4;
const CMP_SREG: u16 = 1;
const CMP_OP: u16 = 2;
const CMP_DATA: u16 = 3;
const BITWISE_SREG: u16 = 1;
const BITWISE_DREG: u16 = 2;
const BITWISE_LEN: u16 = 3;
const BITWISE_MASK: u16 = 4;
const BITWISE_XOR: u16 = 5;
const LOOKUP_SET: u16 = 1;
const LOOKUP_SREG: u16 = 2;
const LOOKUP_DREG: u16 = 3;
const LOOKUP_SET_ID: u16 = 4;
const LOOKUP_FLAGS: u16 = 5;
const IMM_DREG: u16 = 1;
const IMM_DATA: u16 = 2;
const NAT_TYPE: u16 = 1;
const NAT_FAMILY: u16 = 2;
const NAT_REG_ADDR_MIN: u16 = 3;
const NAT_REG_PROTO_MIN: u16 = 5;
const MASQ_FLAGS: u16 = 1;
const NG_DREG: u16 = 1;
const NG_MODULUS: u16 = 2;
const NG_TYPE: u16 = 3;
const NG_OFFSET: u16 = 4;
const FIB_DREG: u16 = 1;
const FIB_RESULT: u16 = 2;
const FIB_FLAGS: u16 = 3;
const COUNTER_BYTES: u16 = 1;
const COUNTER_PACKETS: u16 = 2;
const REJECT_TYPE: u16 = 1;
const REJECT_ICMP_CODE: u16 = 2;
const DYNSET_SET_NAME: u16 = 1;
const DYNSET_SET_ID: u16 = 2;
const DYNSET_OP: u16 = 3;
const DYNSET_SREG_KEY: u16 = 4;
const DYNSET_TIMEOUT: u16 = 6;

/// Encodes register data (`NFTA_DATA_VALUE` / `NFTA_DATA_VERDICT`).
pub fn data_attr(kind: u16, d: &Data) -> Attr {
    let inner = match d {
        Data::Value(v) => Attr::bytes(wire::data::VALUE, v.clone()),
        Data::Verdict(v) => {
            let mut kids = vec![Attr::i32(wire::data::VERDICT_CODE, v.code)];
            if let Some(c) = &v.chain {
                kids.push(Attr::str(wire::data::VERDICT_CHAIN, c));
            }
            Attr::nested(wire::data::VERDICT, kids)
        }
    };
    Attr::nested(kind, vec![inner])
}

pub fn parse_data(a: &Attr) -> Result<Data, DecodeError> {
    let kids = a.children()?;
    if let Some(v) = kids.attr(wire::data::VALUE) {
        return Ok(Data::Value(v.payload().to_vec()));
    }
    if let Some(v) = kids.attr(wire::data::VERDICT) {
        let vk = v.children()?;
        let code =
            vk.u32_of(wire::data::VERDICT_CODE)?.ok_or_else(|| DecodeError::from("verdict without a code"))? as i32;
        return Ok(Data::Verdict(KVerdict { code, chain: vk.str_of(wire::data::VERDICT_CHAIN)? }));
    }
    Err(DecodeError::from("data attribute with neither value nor verdict"))
}

impl Expr {
    /// The kernel module name, also what `ENOENT` on a rule usually means is missing.
    pub fn name(&self) -> &str {
        match self {
            Expr::Payload { .. } => "payload",
            Expr::MetaLoad { .. } | Expr::MetaSet { .. } => "meta",
            Expr::CtLoad { .. } | Expr::CtSet { .. } => "ct",
            Expr::Cmp { .. } => "cmp",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Lookup { .. } => "lookup",
            Expr::Immediate { .. } => "immediate",
            Expr::Dnat { .. } => "nat",
            Expr::Masq { .. } => "masq",
            Expr::Numgen { .. } => "numgen",
            Expr::Fib { .. } => "fib",
            Expr::Counter => "counter",
            Expr::Reject { .. } => "reject",
            Expr::Dynset { .. } => "dynset",
            Expr::Other { name } => name,
        }
    }

    fn data_attrs(&self) -> Vec<Attr> {
        match self {
            Expr::Payload { dreg, base, offset, len } => vec![
                Attr::u32(PAYLOAD_DREG, *dreg),
                Attr::u32(PAYLOAD_BASE, *base as u32),
                Attr::u32(PAYLOAD_OFFSET, *offset),
                Attr::u32(PAYLOAD_LEN, *len),
            ],
            Expr::MetaLoad { key, dreg } => vec![Attr::u32(META_KEY, *key as u32), Attr::u32(META_DREG, *dreg)],
            Expr::MetaSet { key, sreg } => vec![Attr::u32(META_KEY, *key as u32), Attr::u32(META_SREG, *sreg)],
            Expr::CtLoad { key, dreg } => {
                vec![Attr::u32(CT_KEY, *key as u32), Attr::u32(CT_DREG, *dreg)]
            }
            Expr::CtSet { key, sreg } => {
                vec![Attr::u32(CT_KEY, *key as u32), Attr::u32(CT_SREG, *sreg)]
            }
            Expr::Cmp { sreg, op, data } => vec![
                Attr::u32(CMP_SREG, *sreg),
                Attr::u32(CMP_OP, *op as u32),
                data_attr(CMP_DATA, &Data::Value(data.clone())),
            ],
            Expr::Bitwise { sreg, dreg, mask, xor } => vec![
                Attr::u32(BITWISE_SREG, *sreg),
                Attr::u32(BITWISE_DREG, *dreg),
                Attr::u32(BITWISE_LEN, len_u32(mask.len())),
                data_attr(BITWISE_MASK, &Data::Value(mask.clone())),
                data_attr(BITWISE_XOR, &Data::Value(xor.clone())),
            ],
            Expr::Lookup { set, set_id, sreg, dreg, invert } => {
                let mut v = vec![Attr::str(LOOKUP_SET, set), Attr::u32(LOOKUP_SREG, *sreg)];
                if let Some(id) = set_id {
                    v.push(Attr::u32(LOOKUP_SET_ID, *id));
                }
                if let Some(d) = dreg {
                    v.push(Attr::u32(LOOKUP_DREG, *d));
                }
                if *invert {
                    v.push(Attr::u32(LOOKUP_FLAGS, NFT_LOOKUP_F_INV));
                }
                v
            }
            Expr::Immediate { dreg, data } => {
                vec![Attr::u32(IMM_DREG, *dreg), data_attr(IMM_DATA, data)]
            }
            Expr::Dnat { family, addr_reg, proto_reg } => {
                let mut v = vec![Attr::u32(NAT_TYPE, NAT_DNAT), Attr::u32(NAT_FAMILY, u32::from(*family))];
                if let Some(r) = addr_reg {
                    v.push(Attr::u32(NAT_REG_ADDR_MIN, *r));
                }
                if let Some(r) = proto_reg {
                    v.push(Attr::u32(NAT_REG_PROTO_MIN, *r));
                }
                v
            }
            Expr::Masq { flags } => {
                if *flags == 0 {
                    vec![]
                } else {
                    vec![Attr::u32(MASQ_FLAGS, *flags)]
                }
            }
            Expr::Numgen { dreg, modulus } => vec![
                Attr::u32(NG_DREG, *dreg),
                Attr::u32(NG_MODULUS, *modulus),
                Attr::u32(NG_TYPE, NFT_NG_RANDOM),
                Attr::u32(NG_OFFSET, 0),
            ],
            Expr::Fib { dreg, result, flags } => {
                vec![Attr::u32(FIB_DREG, *dreg), Attr::u32(FIB_RESULT, *result), Attr::u32(FIB_FLAGS, *flags)]
            }
            Expr::Counter => vec![Attr::u64(COUNTER_BYTES, 0), Attr::u64(COUNTER_PACKETS, 0)],
            Expr::Reject { kind, code } => {
                vec![Attr::u32(REJECT_TYPE, *kind), Attr::bytes(REJECT_ICMP_CODE, vec![*code])]
            }
            Expr::Dynset { set, set_id, sreg_key, timeout_ms } => {
                let mut v = vec![
                    Attr::str(DYNSET_SET_NAME, set),
                    Attr::u32(DYNSET_OP, NFT_DYNSET_OP_UPDATE),
                    Attr::u32(DYNSET_SREG_KEY, *sreg_key),
                ];
                if let Some(id) = set_id {
                    v.push(Attr::u32(DYNSET_SET_ID, *id));
                }
                if let Some(t) = timeout_ms {
                    v.push(Attr::u64(DYNSET_TIMEOUT, *t));
                }
                v
            }
            Expr::Other { .. } => vec![],
        }
    }

    /// The `NFTA_LIST_ELEM` carrying this expression in `NFTA_RULE_EXPRESSIONS`.
    pub fn to_attr(&self) -> Attr {
        let mut kids = vec![Attr::str(wire::expr::NAME, self.name())];
        let data = self.data_attrs();
        if !data.is_empty() || !matches!(self, Expr::Other { .. }) {
            kids.push(Attr::nested(wire::expr::DATA, data));
        }
        Attr::nested(wire::LIST_ELEM, kids)
    }

    /// Parses one `NFTA_LIST_ELEM` of a dumped rule, registers in 32-bit numbering.
    pub fn parse(elem: &Attr) -> Result<Expr, DecodeError> {
        Self::parse_raw(elem).map(Expr::canonical_regs)
    }

    /// The kernel dumps a register that starts a 16-byte register as
    /// `NFT_REG_1..4`; we always speak `NFT_REG32_*`.
    fn canonical_regs(self) -> Expr {
        let c = |r: u32| match r {
            1..=4 => wire::REG32_00 + (r - 1) * 4,
            r => r,
        };
        match self {
            Expr::Payload { dreg, base, offset, len } => Expr::Payload { dreg: c(dreg), base, offset, len },
            Expr::MetaLoad { key, dreg } => Expr::MetaLoad { key, dreg: c(dreg) },
            Expr::MetaSet { key, sreg } => Expr::MetaSet { key, sreg: c(sreg) },
            Expr::CtLoad { key, dreg } => Expr::CtLoad { key, dreg: c(dreg) },
            Expr::CtSet { key, sreg } => Expr::CtSet { key, sreg: c(sreg) },
            Expr::Cmp { sreg, op, data } => Expr::Cmp { sreg: c(sreg), op, data },
            Expr::Bitwise { sreg, dreg, mask, xor } => Expr::Bitwise { sreg: c(sreg), dreg: c(dreg), mask, xor },
            Expr::Lookup { set, set_id, sreg, dreg, invert } => {
                Expr::Lookup { set, set_id, sreg: c(sreg), dreg: dreg.map(c), invert }
            }
            Expr::Immediate { dreg, data } => Expr::Immediate { dreg: c(dreg), data },
            Expr::Dnat { family, addr_reg, proto_reg } => {
                Expr::Dnat { family, addr_reg: addr_reg.map(c), proto_reg: proto_reg.map(c) }
            }
            Expr::Numgen { dreg, modulus } => Expr::Numgen { dreg: c(dreg), modulus },
            Expr::Fib { dreg, result, flags } => Expr::Fib { dreg: c(dreg), result, flags },
            Expr::Dynset { set, set_id, sreg_key, timeout_ms } => {
                Expr::Dynset { set, set_id, sreg_key: c(sreg_key), timeout_ms }
            }
            other => other,
        }
    }

    fn parse_raw(elem: &Attr) -> Result<Expr, DecodeError> {
        let kids = elem.children()?;
        let name = kids.str_of(wire::expr::NAME)?.ok_or_else(|| DecodeError::from("expression without a name"))?;
        let d = match kids.attr(wire::expr::DATA) {
            Some(d) => d.children()?,
            None => vec![],
        };
        let req = |k: u16| -> Result<u32, DecodeError> {
            d.u32_of(k)?.ok_or_else(|| DecodeError::from(format!("{name} expression lacks attribute {k}")))
        };
        let value = |k: u16| -> Result<Vec<u8>, DecodeError> {
            match d.attr(k) {
                Some(a) => match parse_data(a)? {
                    Data::Value(v) => Ok(v),
                    Data::Verdict(_) => {
                        Err(DecodeError::from(format!("{name} expression: verdict where a value belongs")))
                    }
                },
                None => Err(DecodeError::from(format!("{name} expression lacks attribute {k}"))),
            }
        };
        let meta_key = |k: u32| match k {
            3 => Some(MetaKey::Mark),
            6 => Some(MetaKey::IifName),
            15 => Some(MetaKey::NfProto),
            16 => Some(MetaKey::L4Proto),
            _ => None,
        };
        let ct_key = |k: u32| match k {
            0 => Some(CtKey::State),
            2 => Some(CtKey::Status),
            3 => Some(CtKey::Mark),
            _ => None,
        };
        let other = Expr::Other { name: name.clone() };
        Ok(match name.as_str() {
            "payload" => {
                let base = match req(PAYLOAD_BASE)? {
                    0 => PayloadBase::Link,
                    1 => PayloadBase::Network,
                    2 => PayloadBase::Transport,
                    _ => return Ok(other),
                };
                match d.u32_of(PAYLOAD_DREG)? {
                    Some(dreg) => Expr::Payload { dreg, base, offset: req(PAYLOAD_OFFSET)?, len: req(PAYLOAD_LEN)? },
                    None => other,
                }
            }
            "meta" => match (meta_key(req(META_KEY)?), d.u32_of(META_DREG)?, d.u32_of(META_SREG)?) {
                (Some(key), Some(dreg), _) => Expr::MetaLoad { key, dreg },
                (Some(key), None, Some(sreg)) => Expr::MetaSet { key, sreg },
                _ => other,
            },
            "ct" => match (ct_key(req(CT_KEY)?), d.u32_of(CT_DREG)?, d.u32_of(CT_SREG)?) {
                (Some(key), Some(dreg), _) => Expr::CtLoad { key, dreg },
                (Some(key), None, Some(sreg)) => Expr::CtSet { key, sreg },
                _ => other,
            },
            "cmp" => Expr::Cmp {
                sreg: req(CMP_SREG)?,
                op: match req(CMP_OP)? {
                    0 => CmpOp::Eq,
                    1 => CmpOp::Neq,
                    _ => return Ok(other),
                },
                data: value(CMP_DATA)?,
            },
            "bitwise" => {
                if d.attr(BITWISE_MASK).is_none() {
                    return Ok(other);
                }
                Expr::Bitwise {
                    sreg: req(BITWISE_SREG)?,
                    dreg: req(BITWISE_DREG)?,
                    mask: value(BITWISE_MASK)?,
                    xor: value(BITWISE_XOR)?,
                }
            }
            "lookup" => Expr::Lookup {
                set: d.str_of(LOOKUP_SET)?.unwrap_or_default(),
                set_id: d.u32_of(LOOKUP_SET_ID)?,
                sreg: req(LOOKUP_SREG)?,
                dreg: d.u32_of(LOOKUP_DREG)?,
                invert: d.u32_of(LOOKUP_FLAGS)?.unwrap_or(0) & NFT_LOOKUP_F_INV != 0,
            },
            "immediate" => Expr::Immediate {
                dreg: req(IMM_DREG)?,
                data: match d.attr(IMM_DATA) {
                    Some(a) => parse_data(a)?,
                    None => return Ok(other),
                },
            },
            "nat" if d.u32_of(NAT_TYPE)? == Some(NAT_DNAT) => Expr::Dnat {
                family: u8::try_from(req(NAT_FAMILY)?)
                    .map_err(|_| DecodeError::from(format!("{name} expression: family out of range")))?,
                addr_reg: d.u32_of(NAT_REG_ADDR_MIN)?,
                proto_reg: d.u32_of(NAT_REG_PROTO_MIN)?,
            },
            "masq" => Expr::Masq { flags: d.u32_of(MASQ_FLAGS)?.unwrap_or(0) },
            "numgen" if d.u32_of(NG_TYPE)? == Some(NFT_NG_RANDOM) => {
                Expr::Numgen { dreg: req(NG_DREG)?, modulus: req(NG_MODULUS)? }
            }
            "fib" => Expr::Fib { dreg: req(FIB_DREG)?, result: req(FIB_RESULT)?, flags: req(FIB_FLAGS)? },
            "counter" => Expr::Counter,
            "reject" => Expr::Reject {
                kind: req(REJECT_TYPE)?,
                code: d.attr(REJECT_ICMP_CODE).and_then(|a| a.payload().first().copied()).unwrap_or(0),
            },
            "dynset" => Expr::Dynset {
                set: d.str_of(DYNSET_SET_NAME)?.unwrap_or_default(),
                set_id: d.u32_of(DYNSET_SET_ID)?,
                sreg_key: req(DYNSET_SREG_KEY)?,
                timeout_ms: d.attr(DYNSET_TIMEOUT).map(Attr::as_u64).transpose()?,
            },
            _ => other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_core::Emitable;

    fn round_trip(e: Expr) -> Expr {
        let a = e.to_attr();
        let mut buf = vec![0u8; a.buffer_len()];
        a.emit(&mut buf);
        let parsed = wire::parse_attrs(&buf).unwrap();
        Expr::parse(&parsed[0]).unwrap()
    }

    #[test]
    fn expressions_round_trip() {
        let exprs = vec![
            Expr::Payload { dreg: 8, base: PayloadBase::Network, offset: 16, len: 4 },
            Expr::MetaLoad { key: MetaKey::L4Proto, dreg: 9 },
            Expr::Cmp { sreg: 8, op: CmpOp::Neq, data: vec![6] },
            Expr::Lookup { set: "service-ips".into(), set_id: None, sreg: 8, dreg: Some(0), invert: false },
            Expr::Immediate {
                dreg: 0,
                data: Data::Verdict(KVerdict { code: wire::verdict::GOTO, chain: Some("svc-x".into()) }),
            },
            Expr::Dnat { family: wire::NFPROTO_IPV6, addr_reg: Some(8), proto_reg: Some(12) },
            Expr::Masq { flags: NF_NAT_RANGE_PROTO_RANDOM_FULLY },
            Expr::Numgen { dreg: 8, modulus: 3 },
            Expr::Counter,
            Expr::Reject { kind: NFT_REJECT_ICMPX_UNREACH, code: NFT_REJECT_ICMPX_ADMIN_PROHIBITED },
            Expr::Dynset { set: "aff".into(), set_id: None, sreg_key: 8, timeout_ms: Some(10_800_000) },
        ];
        for e in exprs {
            assert_eq!(round_trip(e.clone()), e);
        }
    }

    #[test]
    fn verdict_code_is_big_endian_signed() {
        let a = data_attr(IMM_DATA, &Data::Verdict(KVerdict { code: wire::verdict::JUMP, chain: None }));
        let mut buf = vec![0u8; a.buffer_len()];
        a.emit(&mut buf);
        // outer(4) + verdict nest(4) + code attr header(4) + -3 as be32
        assert_eq!(&buf[12..16], &[0xff, 0xff, 0xff, 0xfd]);
    }
}
