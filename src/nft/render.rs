//! The ruleset description as `nft` text: what `nodeportd --dry-run` prints, what the
//! docs and golden tests show, and what `nft -f` loads.
//!
//! The layout follows `nft list table` (tabs, a blank line between blocks, `elements`
//! continued on aligned lines) so that a listing from the kernel and a rendering can be
//! compared by eye. Only what the kernel adds on its own (`size` of dynamic sets, counter
//! values, element expiry) is missing from ours.

use std::fmt::Write as _;
use std::net::IpAddr;

use super::ir::*;

/// Renders a whole table in `nft -f` syntax.
pub fn render(rs: &Ruleset) -> String {
    let mut out = String::new();
    let family = family_name(rs.family.unwrap_or(Family::Inet));
    let _ = writeln!(out, "table {family} {} {{", rs.table);
    let mut first = true;
    for set in &rs.sets {
        if !first {
            out.push('\n');
        }
        first = false;
        let elements = rs.elements.iter().filter(|(name, _)| *name == set.name).flat_map(|(_, els)| els.iter());
        render_set(&mut out, set, elements);
    }
    for (chain, rules) in &rs.chains {
        if !first {
            out.push('\n');
        }
        first = false;
        render_chain(&mut out, chain, rules);
    }
    out.push_str("}\n");
    // Elements of sets this ruleset does not declare (a partial ruleset, such as one
    // service's objects) go into sets that already exist in the kernel.
    for (name, els) in &rs.elements {
        if els.is_empty() || rs.sets.iter().any(|s| s.name == *name) {
            continue;
        }
        let body = els.iter().map(element).collect::<Vec<_>>().join(", ");
        let _ = writeln!(out, "add element {family} {} {name} {{ {body} }}", rs.table);
    }
    out
}

pub fn family_name(f: Family) -> &'static str {
    match f {
        Family::Inet => "inet",
        Family::Ip => "ip",
        Family::Ip6 => "ip6",
    }
}

fn datatype_name(t: DataType) -> &'static str {
    match t {
        DataType::Ipv4Addr => "ipv4_addr",
        DataType::Ipv6Addr => "ipv6_addr",
        DataType::InetProto => "inet_proto",
        DataType::InetService => "inet_service",
        DataType::Mark => "mark",
        DataType::Integer => "integer",
        DataType::Verdict => "verdict",
    }
}

fn render_set<'a>(out: &mut String, set: &Set, elements: impl Iterator<Item = &'a Element>) {
    let keyword = if set.data.is_empty() { "set" } else { "map" };
    let _ = writeln!(out, "\t{keyword} {} {{", set.name);
    let types = |ts: &[DataType]| ts.iter().map(|t| datatype_name(*t)).collect::<Vec<_>>().join(" . ");
    match (&set.typeof_key, &set.typeof_data) {
        (Some(k), Some(d)) => {
            let _ = writeln!(out, "\t\ttypeof {} : {}", field(k), field(d));
        }
        (Some(k), None) => {
            let _ = writeln!(out, "\t\ttypeof {}", field(k));
        }
        _ if set.data.is_empty() => {
            let _ = writeln!(out, "\t\ttype {}", types(&set.key));
        }
        _ => {
            let _ = writeln!(out, "\t\ttype {} : {}", types(&set.key), types(&set.data));
        }
    }
    // nft prints the flags in this order whatever order they were given in.
    let flags: Vec<&str> = [
        (set.flags.constant, "constant"),
        (set.flags.dynamic, "dynamic"),
        (set.flags.interval, "interval"),
        (set.flags.timeout, "timeout"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| *name)
    .collect();
    if !flags.is_empty() {
        let _ = writeln!(out, "\t\tflags {}", flags.join(","));
    }
    if let Some(t) = set.timeout {
        let _ = writeln!(out, "\t\ttimeout {}", duration(t));
    }
    if let Some(c) = &set.comment {
        let _ = writeln!(out, "\t\tcomment {}", quote(c));
    }
    let rendered: Vec<String> = elements.map(element).collect();
    if !rendered.is_empty() {
        out.push_str("\t\telements = { ");
        for (i, e) in rendered.iter().enumerate() {
            if i > 0 {
                // The continuation indent nft uses: aligned under the first element.
                out.push_str(",\n\t\t\t     ");
            }
            out.push_str(e);
        }
        out.push_str(" }\n");
    }
    out.push_str("\t}\n");
}

fn element(e: &Element) -> String {
    let mut s = e.key.iter().map(value).collect::<Vec<_>>().join(" . ");
    if let Some(t) = e.timeout {
        let _ = write!(s, " timeout {}", duration(t));
    }
    match &e.data {
        Some(ElementData::Verdict(v)) => {
            let _ = write!(s, " : {}", verdict(v));
        }
        Some(ElementData::Values(v)) => {
            let _ = write!(s, " : {}", v.iter().map(value).collect::<Vec<_>>().join(" . "));
        }
        None => {}
    }
    s
}

fn render_chain(out: &mut String, chain: &Chain, rules: &[Rule]) {
    let _ = writeln!(out, "\tchain {} {{", chain.name);
    if let Some(base) = &chain.base {
        let policy = base.policy.as_ref().map(verdict).unwrap_or_else(|| "accept".into());
        let _ = writeln!(
            out,
            "\t\ttype {} hook {} priority {}; policy {policy};",
            chain_type_name(base.kind),
            hook_name(base.hook),
            priority(base.hook, base.priority)
        );
    }
    if let Some(c) = &chain.comment {
        let _ = writeln!(out, "\t\tcomment {}", quote(c));
    }
    for r in rules {
        let _ = writeln!(out, "\t\t{}", rule(r));
    }
    out.push_str("\t}\n");
}

fn chain_type_name(t: ChainType) -> &'static str {
    match t {
        ChainType::Filter => "filter",
        ChainType::Nat => "nat",
        ChainType::Route => "route",
    }
}

fn hook_name(h: Hook) -> &'static str {
    match h {
        Hook::Prerouting => "prerouting",
        Hook::Input => "input",
        Hook::Forward => "forward",
        Hook::Output => "output",
        Hook::Postrouting => "postrouting",
    }
}

/// A priority as `nft list` prints it for the ip/ip6/inet families: a standard name
/// (valid at that hook) plus an offset of at most 10, else the number.
fn priority(hook: Hook, prio: i32) -> String {
    let standard: &[(&str, i32)] = match hook {
        Hook::Prerouting => &[("raw", -300), ("mangle", -150), ("dstnat", -100), ("filter", 0), ("security", 50)],
        Hook::Postrouting => &[("raw", -300), ("mangle", -150), ("filter", 0), ("security", 50), ("srcnat", 100)],
        _ => &[("raw", -300), ("mangle", -150), ("filter", 0), ("security", 50)],
    };
    for (name, base) in standard {
        let off = prio - base;
        match off {
            0 => return (*name).to_string(),
            1..=10 => return format!("{name} + {off}"),
            -10..=-1 => return format!("{name} - {}", -off),
            _ => {}
        }
    }
    prio.to_string()
}

/// Seconds as nft prints durations: `3h`, `1h30m`, `10s`, `1d`.
pub fn duration(secs: u32) -> String {
    if secs == 0 {
        return "0s".into();
    }
    let mut s = String::new();
    let mut rest = secs;
    for (unit, n) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if rest >= n {
            let _ = write!(s, "{}{unit}", rest / n);
            rest %= n;
        }
    }
    s
}

fn quote(s: &str) -> String {
    // nft strings cannot contain a double quote; a comment is only for people.
    format!("\"{}\"", s.replace('"', "'"))
}

pub fn verdict(v: &Verdict) -> String {
    match v {
        Verdict::Accept => "accept".into(),
        Verdict::Drop => "drop".into(),
        Verdict::Return => "return".into(),
        Verdict::Continue => "continue".into(),
        Verdict::Jump(c) => format!("jump {c}"),
        Verdict::Goto(c) => format!("goto {c}"),
    }
}

pub fn proto_name(p: u8) -> String {
    match p {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "ipv6-icmp".into(),
        132 => "sctp".into(),
        n => n.to_string(),
    }
}

pub fn value(v: &Value) -> String {
    match v {
        Value::Addr(a) => a.to_string(),
        Value::Prefix(n) if n.prefix_len() == n.max_prefix_len() => n.addr().to_string(),
        Value::Prefix(n) => n.to_string(),
        Value::Proto(p) => proto_name(*p),
        Value::Port(p) => p.to_string(),
        Value::Mark(m) => format!("0x{m:08x}"),
        Value::Int(n) => n.to_string(),
    }
}

fn field(f: &Field) -> String {
    match f {
        Field::IpSaddr => "ip saddr".into(),
        Field::IpDaddr => "ip daddr".into(),
        Field::Ip6Saddr => "ip6 saddr".into(),
        Field::Ip6Daddr => "ip6 daddr".into(),
        Field::L4Proto => "meta l4proto".into(),
        Field::ThDport => "th dport".into(),
        Field::NfProto => "meta nfproto".into(),
        Field::MetaMark => "meta mark".into(),
        Field::CtMark => "ct mark".into(),
        Field::CtState => "ct state".into(),
        Field::CtStatus => "ct status".into(),
        Field::FibDaddrType => "fib daddr type".into(),
        Field::IifName => "iifname".into(),
        Field::Concat(fs) => fs.iter().map(field).collect::<Vec<_>>().join(" . "),
        Field::NumgenRandom(n) => format!("numgen random mod {n}"),
    }
}

fn cmp_value(f: &Field, v: &CmpValue) -> String {
    match (f, v) {
        (Field::NfProto, CmpValue::Value(Value::Proto(2))) => "ipv4".into(),
        (Field::NfProto, CmpValue::Value(Value::Proto(10))) => "ipv6".into(),
        (Field::MetaMark | Field::CtMark, CmpValue::Value(Value::Port(n))) => format!("0x{n:08x}"),
        (_, CmpValue::Value(v)) => value(v),
        (_, CmpValue::IfName(n)) => quote(n),
        (_, CmpValue::IfNamePrefix(n)) => quote(&format!("{n}*")),
    }
}

/// Names of bits as nft prints them, lowest bit first; `None` if a bit has no name.
fn bit_names(f: &Field, mask: u32) -> Option<String> {
    let names: &[(u32, &str)] = match f {
        Field::CtState => &[(1, "invalid"), (2, "established"), (4, "related"), (8, "new"), (64, "untracked")],
        Field::CtStatus => &[
            (0x1, "expected"),
            (0x2, "seen-reply"),
            (0x4, "assured"),
            (0x8, "confirmed"),
            (0x10, "snat"),
            (0x20, "dnat"),
            (0x200, "dying"),
        ],
        _ => return None,
    };
    let mut out = Vec::new();
    let mut covered = 0;
    for (bit, name) in names {
        if mask & bit != 0 {
            out.push(*name);
            covered |= bit;
        }
    }
    (covered == mask && !out.is_empty()).then(|| out.join(","))
}

fn fib_type_name(t: u32) -> Option<&'static str> {
    Some(match t {
        0 => "unspec",
        1 => "unicast",
        2 => "local",
        3 => "broadcast",
        4 => "anycast",
        5 => "multicast",
        6 => "blackhole",
        7 => "unreachable",
        8 => "prohibit",
        _ => return None,
    })
}

fn bits(f: &Field, mask: u32, val: u32, negate: bool) -> String {
    let name = field(f);
    let op = if negate { "!= " } else { "" };
    // `ct state new` tests "any of these bits set"; for one bit that is `& bit == bit`.
    if let Some(names) = bit_names(f, mask) {
        let single = mask.count_ones() == 1;
        if (single && val == mask) || (val == 0 && negate) {
            let op = if single && negate { "!= " } else { "" };
            return format!("{name} {op}{names}");
        }
        // "none of these bits": nft prints `ct status ! dnat`.
        if val == 0 && !negate {
            return format!("{name} ! {names}");
        }
    }
    if mask == u32::MAX {
        if let (Field::FibDaddrType, Some(t)) = (f, fib_type_name(val)) {
            return format!("{name} {op}{t}");
        }
        return format!("{name} {op}0x{val:08x}");
    }
    let op = if negate { "!=" } else { "==" };
    format!("{name} & 0x{mask:08x} {op} 0x{val:08x}")
}

fn stmt(s: &Stmt) -> String {
    match s {
        Stmt::Cmp { field: f, op, value: v } => {
            let op = match op {
                CmpOp::Eq => "",
                CmpOp::Ne => "!= ",
            };
            format!("{} {op}{}", field(f), cmp_value(f, v))
        }
        Stmt::InPrefix { field: f, net, negate } => {
            let op = if *negate { "!= " } else { "" };
            format!("{} {op}{}", field(f), value(&Value::Prefix(*net)))
        }
        Stmt::Bits { field: f, mask, value: v, negate } => bits(f, *mask, *v, *negate),
        Stmt::InSet { field: f, set, negate } => {
            let op = if *negate { "!= " } else { "" };
            format!("{} {op}@{set}", field(f))
        }
        Stmt::VmapNamed { key, map } => format!("{} vmap @{map}", field(key)),
        Stmt::VmapInline { key, entries } => {
            let body = entries
                .iter()
                .map(|(k, v)| match (key, k) {
                    // numgen yields a plain 32-bit integer; nft prints it in decimal.
                    (Field::NumgenRandom(_), Value::Mark(n)) => format!("{n} : {}", verdict(v)),
                    _ => format!("{} : {}", value(k), verdict(v)),
                })
                .collect::<Vec<_>>();
            format!("{} vmap {{ {} }}", field(key), body.join(", "))
        }
        Stmt::SetUpdate { set, key } => format!("update @{set} {{ {} }}", field(key)),
        Stmt::MarkOr { field: f, bits } => {
            let n = field(f);
            format!("{n} set {n} | 0x{bits:08x}")
        }
        Stmt::MarkAndNot { field: f, bits } => {
            let n = field(f);
            format!("{n} set {n} & 0x{:08x}", !bits)
        }
        Stmt::DnatMap { ipv6, key, map } => {
            format!("dnat {} to {} map @{map}", if *ipv6 { "ip6" } else { "ip" }, field(key))
        }
        Stmt::Dnat { addr, port } => match (addr, port) {
            (IpAddr::V4(a), Some(p)) => format!("dnat ip to {a}:{p}"),
            (IpAddr::V4(a), None) => format!("dnat ip to {a}"),
            (IpAddr::V6(a), Some(p)) => format!("dnat ip6 to [{a}]:{p}"),
            (IpAddr::V6(a), None) => format!("dnat ip6 to {a}"),
        },
        Stmt::Masquerade { fully_random } => {
            if *fully_random {
                "masquerade fully-random".into()
            } else {
                "masquerade".into()
            }
        }
        Stmt::Reject(k) => match k {
            RejectKind::Default => "reject".into(),
            RejectKind::TcpReset => "reject with tcp reset".into(),
            RejectKind::IcmpxAdminProhibited => "reject with icmpx admin-prohibited".into(),
        },
        Stmt::Counter => "counter".into(),
        Stmt::Verdict(v) => verdict(v),
    }
}

pub fn rule(r: &Rule) -> String {
    let mut s = r.stmts.iter().map(stmt).collect::<Vec<_>>().join(" ");
    if let Some(c) = &r.comment {
        let _ = write!(s, " comment {}", quote(c));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_print_like_nft() {
        assert_eq!(priority(Hook::Prerouting, -100), "dstnat");
        assert_eq!(priority(Hook::Prerouting, -110), "dstnat - 10");
        assert_eq!(priority(Hook::Input, -110), "-110");
        assert_eq!(priority(Hook::Output, -100), "-100");
        assert_eq!(priority(Hook::Postrouting, 100), "srcnat");
        assert_eq!(priority(Hook::Forward, 0), "filter");
        assert_eq!(priority(Hook::Forward, -140), "mangle + 10");
        assert_eq!(priority(Hook::Input, 49), "security - 1");
    }

    #[test]
    fn durations_print_like_nft() {
        assert_eq!(duration(10_800), "3h");
        assert_eq!(duration(5_400), "1h30m");
        assert_eq!(duration(90), "1m30s");
        assert_eq!(duration(86_400), "1d");
        assert_eq!(duration(10), "10s");
    }

    #[test]
    fn bit_tests_print_like_nft() {
        assert_eq!(bits(&Field::CtState, 8, 8, false), "ct state new");
        assert_eq!(bits(&Field::CtState, 6, 0, true), "ct state established,related");
        assert_eq!(bits(&Field::CtStatus, 0x20, 0x20, false), "ct status dnat");
        assert_eq!(bits(&Field::FibDaddrType, u32::MAX, 2, false), "fib daddr type local");
        assert_eq!(bits(&Field::MetaMark, 0x4000, 0, false), "meta mark & 0x00004000 == 0x00000000");
    }

    #[test]
    fn statements_print_like_nft() {
        let dnat6 = Stmt::Dnat { addr: "2001:db8::2".parse().unwrap(), port: Some(8080) };
        assert_eq!(stmt(&dnat6), "dnat ip6 to [2001:db8::2]:8080");
        let clear = Stmt::MarkAndNot { field: Field::MetaMark, bits: 0x4000 };
        assert_eq!(stmt(&clear), "meta mark set meta mark & 0xffffbfff");
        let ng = Stmt::VmapInline {
            key: Field::NumgenRandom(2),
            entries: vec![(Value::Mark(0), Verdict::Goto("a".into())), (Value::Mark(1), Verdict::Goto("b".into()))],
        };
        assert_eq!(stmt(&ng), "numgen random mod 2 vmap { 0 : goto a, 1 : goto b }");
        let host = Stmt::InPrefix { field: Field::IpSaddr, net: "198.18.0.7/32".parse().unwrap(), negate: true };
        assert_eq!(stmt(&host), "ip saddr != 198.18.0.7");
    }
}
