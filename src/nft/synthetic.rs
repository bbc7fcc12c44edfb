//! A synthetic ruleset in the shape kube-proxy's nftables mode uses, for the
//! sync benchmark and tests: a `service-ips` verdict map keyed by
//! `daddr . l4proto . dport`, one chain per service choosing an endpoint with
//! `numgen random mod N vmap { ... }`, one DNAT chain per endpoint, masquerade
//! marking. Chain names are derived from content, as the data plane does.

use std::net::{IpAddr, Ipv4Addr};

use super::ir::*;
use super::wire::len_u32;

pub const TABLE: &str = "nodeportd";
pub const MASQ_BIT: u32 = 0x4000;

fn fnv(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

/// ClusterIP of service `i` (inside 198.18.128.0/17).
pub fn service_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 128, 0)) + len_u32(i))
}

/// Address of endpoint `j` of service `i` (inside 198.19.0.0/16); `gen` varies it.
pub fn endpoint_ip(i: usize, j: usize, gen: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 19, 0, 0)) + len_u32(i * 3 + j) + gen * 40_000)
}

fn svc_chain(i: usize) -> String {
    format!("svc-{i}-{:08x}", fnv(&format!("default/svc{i}:http")))
}

fn ep_chain(i: usize, ip: Ipv4Addr) -> String {
    format!("ep-{i}-{:08x}", fnv(&format!("default/svc{i}:http/{ip}:8080")))
}

fn chain(name: &str) -> Chain {
    Chain { name: name.into(), base: None, comment: None }
}

fn base(name: &str, kind: ChainType, hook: Hook, priority: i32) -> Chain {
    Chain { name: name.into(), base: Some(BaseChain { kind, hook, priority, policy: None }), comment: None }
}

fn rule(stmts: Vec<Stmt>) -> Rule {
    Rule { stmts, comment: None }
}

fn endpoint_rules(ip: Ipv4Addr) -> Vec<Rule> {
    vec![
        rule(vec![
            Stmt::Cmp { field: Field::IpSaddr, op: CmpOp::Eq, value: CmpValue::Value(Value::Addr(IpAddr::V4(ip))) },
            Stmt::Verdict(Verdict::Jump("mark-for-masquerade".into())),
        ]),
        rule(vec![
            Stmt::Cmp { field: Field::L4Proto, op: CmpOp::Eq, value: CmpValue::Value(Value::Proto(6)) },
            Stmt::Dnat { addr: IpAddr::V4(ip), port: Some(8080) },
        ]),
    ]
}

fn service_rule(i: usize, eps: &[Ipv4Addr]) -> Rule {
    rule(vec![Stmt::VmapInline {
        key: Field::NumgenRandom(len_u32(eps.len())),
        entries: eps
            .iter()
            .enumerate()
            .map(|(j, ip)| (Value::Mark(len_u32(j)), Verdict::Goto(ep_chain(i, *ip))))
            .collect(),
    }])
}

/// `n` TCP services on port 80 with `eps` endpoints each.
pub fn ruleset(n: usize, eps: usize) -> Ruleset {
    let mut chains = vec![
        (chain("mark-for-masquerade"), vec![rule(vec![Stmt::MarkOr { field: Field::MetaMark, bits: MASQ_BIT }])]),
        (
            chain("masquerading"),
            vec![
                rule(vec![
                    Stmt::Bits { field: Field::MetaMark, mask: MASQ_BIT, value: 0, negate: false },
                    Stmt::Verdict(Verdict::Return),
                ]),
                rule(vec![Stmt::MarkAndNot { field: Field::MetaMark, bits: MASQ_BIT }]),
                rule(vec![Stmt::Masquerade { fully_random: true }]),
            ],
        ),
    ];
    let mut elements = Vec::with_capacity(n);
    for i in 0..n {
        let ips: Vec<Ipv4Addr> = (0..eps).map(|j| endpoint_ip(i, j, 0)).collect();
        for ip in &ips {
            chains.push((chain(&ep_chain(i, *ip)), endpoint_rules(*ip)));
        }
        chains.push((chain(&svc_chain(i)), vec![service_rule(i, &ips)]));
        elements.push(Element {
            key: vec![Value::Addr(IpAddr::V4(service_ip(i))), Value::Proto(6), Value::Port(80)],
            data: Some(ElementData::Verdict(Verdict::Goto(svc_chain(i)))),
            timeout: None,
        });
    }
    chains.push((
        chain("services"),
        vec![rule(vec![Stmt::VmapNamed {
            key: Field::Concat(vec![Field::IpDaddr, Field::L4Proto, Field::ThDport]),
            map: "service-ips".into(),
        }])],
    ));
    for (name, hook, prio) in [("nat-prerouting", Hook::Prerouting, -100), ("nat-output", Hook::Output, -100)] {
        chains.push((
            base(name, ChainType::Nat, hook, prio),
            vec![rule(vec![Stmt::Verdict(Verdict::Jump("services".into()))])],
        ));
    }
    chains.push((
        base("nat-postrouting", ChainType::Nat, Hook::Postrouting, 100),
        vec![rule(vec![Stmt::Verdict(Verdict::Jump("masquerading".into()))])],
    ));
    Ruleset {
        family: Some(Family::Inet),
        table: TABLE.into(),
        sets: vec![Set {
            name: "service-ips".into(),
            key: vec![DataType::Ipv4Addr, DataType::InetProto, DataType::InetService],
            data: vec![DataType::Verdict],
            typeof_key: None,
            typeof_data: None,
            flags: SetFlags::default(),
            timeout: None,
            comment: Some("ClusterIP, external IP and LoadBalancer IP traffic".into()),
        }],
        elements: vec![("service-ips".into(), elements)],
        chains,
    }
}

/// Moves endpoint 0 of service `i` to a new address: a new endpoint chain, the
/// old one gone, the service chain rewritten (what one Endpoints update does).
pub fn change_endpoint(r: &mut Ruleset, i: usize) {
    let svc = svc_chain(i);
    let prefix = format!("ep-{i}-");
    let mut eps: Vec<Ipv4Addr> = Vec::new();
    for (c, rules) in &r.chains {
        if c.name.starts_with(&prefix) {
            if let Some(Stmt::Dnat { addr: IpAddr::V4(a), .. }) = rules.get(1).and_then(|r| r.stmts.get(1)) {
                eps.push(*a);
            }
        }
    }
    if eps.is_empty() {
        return;
    }
    let old = eps[0];
    let new = Ipv4Addr::from(u32::from(old) + 40_000);
    eps[0] = new;
    r.chains.retain(|(c, _)| c.name != ep_chain(i, old));
    let pos = r.chains.iter().position(|(c, _)| c.name == svc).unwrap_or(r.chains.len());
    r.chains.insert(pos, (chain(&ep_chain(i, new)), endpoint_rules(new)));
    if let Some((_, rules)) = r.chains.iter_mut().find(|(c, _)| c.name == svc) {
        *rules = vec![service_rule(i, &eps)];
    }
}
