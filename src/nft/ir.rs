//! The ruleset description. Every item maps 1:1 to an `nft` statement so that
//! `render` (text) and `lower` (netlink) stay two views of the same value.

use std::net::IpAddr;

use ipnet::IpNet;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Inet,
    Ip,
    Ip6,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChainType {
    Filter,
    Nat,
    Route,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hook {
    Prerouting,
    Input,
    Forward,
    Output,
    Postrouting,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BaseChain {
    pub kind: ChainType,
    pub hook: Hook,
    /// Numeric priority (`dstnat` is -100, `srcnat` 100, `filter` 0).
    pub priority: i32,
    /// `None` means the default (accept).
    pub policy: Option<Verdict>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Chain {
    pub name: String,
    pub base: Option<BaseChain>,
    pub comment: Option<String>,
}

/// Types of set keys and map data, as nft names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DataType {
    Ipv4Addr,
    Ipv6Addr,
    InetProto,
    InetService,
    Mark,
    /// A plain 32-bit integer in host byte order: what `numgen` yields (only in `typeof` sets).
    Integer,
    Verdict,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SetFlags {
    pub interval: bool,
    pub timeout: bool,
    pub dynamic: bool,
    pub constant: bool,
}

/// A named set (`data` empty) or map (`data` one type, or several for a concatenation).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Set {
    pub name: String,
    /// One type, or several for a concatenation (`ipv4_addr . inet_proto . inet_service`).
    pub key: Vec<DataType>,
    pub data: Vec<DataType>,
    /// `typeof KEY : DATA`: the expressions the key (and data) are declared by, for sets
    /// whose types nft cannot name (a `numgen` slot is a plain integer). `key` and `data`
    /// still give the types.
    pub typeof_key: Option<Field>,
    pub typeof_data: Option<Field>,
    pub flags: SetFlags,
    /// Default element timeout in seconds (`timeout` flag sets).
    pub timeout: Option<u32>,
    pub comment: Option<String>,
}

/// A constant in a key, element or comparison.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    Addr(IpAddr),
    /// Only in interval sets and prefix matches.
    Prefix(IpNet),
    /// An L4 protocol number (`tcp` = 6).
    Proto(u8),
    Port(u16),
    Mark(u32),
    /// A plain integer (a `numgen` slot), printed in decimal.
    Int(u32),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    Accept,
    Drop,
    Return,
    Continue,
    Jump(String),
    Goto(String),
}

/// The name of a set or map an element belongs to: most are fixed names, borrowed
/// rather than copied into every element a planner keeps.
pub type SetName = std::borrow::Cow<'static, str>;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Element {
    pub key: Vec<Value>,
    pub data: Option<ElementData>,
    pub timeout: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ElementData {
    Verdict(Verdict),
    /// One value, or several for concatenated data (`198.18.2.11 . 8080`).
    Values(Vec<Value>),
}

/// Packet and connection fields a rule reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Field {
    IpSaddr,
    IpDaddr,
    Ip6Saddr,
    Ip6Daddr,
    /// `meta l4proto`
    L4Proto,
    /// `th dport` (transport header destination port, any L4 protocol)
    ThDport,
    /// `meta nfproto` (ipv4 = 2, ipv6 = 10)
    NfProto,
    MetaMark,
    CtMark,
    /// `ct state` bits (new = 8, established = 2, related = 4, invalid = 1, untracked = 64)
    CtState,
    /// `ct status` bits (dnat = 0x20)
    CtStatus,
    /// `fib daddr type`: the address type of the destination (local = 2)
    FibDaddrType,
    /// `iifname`
    IifName,
    /// A concatenation of fields: `ip daddr . meta l4proto . th dport`.
    Concat(Vec<Field>),
    /// `numgen random mod N`
    NumgenRandom(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RejectKind {
    /// `reject` in an inet table: ICMP or ICMPv6 port unreachable (`icmpx port-unreachable`),
    /// which a TCP connect also reports at once as "connection refused".
    Default,
    TcpReset,
    /// `reject with icmpx admin-prohibited`
    IcmpxAdminProhibited,
}

/// One statement of a rule; a rule is a sequence of these, matches first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Stmt {
    /// `ip daddr 10.96.0.10`, `meta l4proto != udp`, `iifname "br-lan"`.
    Cmp {
        field: Field,
        op: CmpOp,
        value: CmpValue,
    },
    /// `ip saddr 198.18.0.0/15` / `ip saddr != ...`
    InPrefix {
        field: Field,
        net: IpNet,
        negate: bool,
    },
    /// `meta mark & 0x4000 == 0x4000`, `ct state new` (mask = value = 8),
    /// `ct status dnat`, `fib daddr type local` (mask 0xffffffff, value 2).
    Bits {
        field: Field,
        mask: u32,
        value: u32,
        negate: bool,
    },
    /// `ip daddr @nodeport-ips-v4`, `ip saddr != @allowed`.
    InSet {
        field: Field,
        set: String,
        negate: bool,
    },
    /// `ip daddr . meta l4proto . th dport vmap @service-ips-v4`
    VmapNamed {
        key: Field,
        map: String,
    },
    /// `numgen random mod 2 vmap { 0 : goto a, 1 : goto b }`. The numgen keys are
    /// `Value::Mark(i)`: like a mark, a 32-bit integer in host byte order.
    VmapInline {
        key: Field,
        entries: Vec<(Value, Verdict)>,
    },
    /// `update @affinity-x { ip saddr }` (timeout comes from the set)
    SetUpdate {
        set: String,
        key: Field,
    },
    /// `meta mark set meta mark | 0x4000` / `ct mark set ct mark | 0x8000`
    MarkOr {
        field: Field,
        bits: u32,
    },
    /// `meta mark set meta mark & 0xffffbfff` (clear bits)
    MarkAndNot {
        field: Field,
        bits: u32,
    },
    /// `dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 3 map @backends`:
    /// the address and port come from a named map whose data is `addr . inet_service`.
    DnatMap {
        ipv6: bool,
        key: Field,
        map: String,
    },
    /// `dnat ip to 198.18.1.2:8080` / `dnat ip6 to [2001:db8::2]:8080`
    Dnat {
        addr: IpAddr,
        port: Option<u16>,
    },
    /// `masquerade fully-random`
    Masquerade {
        fully_random: bool,
    },
    Reject(RejectKind),
    Counter,
    Verdict(Verdict),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CmpValue {
    Value(Value),
    /// An interface name (`iifname "br-lan"`), NUL-padded to IFNAMSIZ by the kernel encoding.
    IfName(String),
    /// An interface name prefix (`iifname "wg*"`).
    IfNamePrefix(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Rule {
    pub stmts: Vec<Stmt>,
    pub comment: Option<String>,
}

/// A whole table as we want it: the data plane builds this; sync makes the kernel match it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ruleset {
    pub family: Option<Family>,
    pub table: String,
    /// Sets and maps, in creation order.
    pub sets: Vec<Set>,
    /// Elements per set name.
    pub elements: Vec<(String, Vec<Element>)>,
    /// Chains with their rules, in creation order; a chain is created before any rule jumps to it.
    pub chains: Vec<(Chain, Vec<Rule>)>,
}
