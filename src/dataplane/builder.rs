//! The desired ruleset as a pure function of the services, their backends and the node.
//!
//! Shape (docs/dataplane.md shows it in nft syntax): a fixed skeleton of base chains,
//! dispatch maps and helper chains, plus per service port and family a few chains that
//! the maps point to. Every packet is matched in O(1) by a map lookup; an endpoint is
//! picked with `numgen random mod N`. The skeleton and each service are built
//! separately so the daemon can rebuild only the services that changed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use crate::config::Config;
use crate::model::{Backend, Protocol, Service, ServiceType};
use crate::nft::ir::*;
use crate::nft::wire::len_u32;

use super::endpoints::{categorize, Target};
use super::names::{self, IpFamily, PortId};

/// The default `sessionAffinityConfig.clientIP.timeoutSeconds` (3 hours), as Kubernetes.
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10_800;

/// Everything the ruleset depends on.
#[derive(Debug, Clone, Default)]
pub struct Input<'a> {
    /// The table's name (`inet <table>`).
    pub table: String,
    /// Endpoints whose `nodeName` equals this are local (`externalTrafficPolicy: Local`).
    pub node_name: String,
    /// The packet mark bit that asks `masquerading` to SNAT.
    pub masquerade_mark: u32,
    /// The conntrack mark bit set on every connection we DNAT (a firewall can accept those).
    pub ct_mark: u32,
    /// Destination addresses NodePorts answer on. When the configured selection cannot be
    /// resolved yet, the caller passes every local address but loopback.
    pub nodeport_ips_v4: Vec<Ipv4Addr>,
    pub nodeport_ips_v6: Vec<Ipv6Addr>,
    pub services: Vec<ServiceInput<'a>>,
}

/// A service and the backends of each of its ports.
#[derive(Debug, Clone)]
pub struct ServiceInput<'a> {
    pub service: &'a Service,
    /// Backends per service port, keyed by the port's name (`""` for an unnamed port).
    pub backends: BTreeMap<String, Vec<Backend>>,
}

impl<'a> Input<'a> {
    /// The node's part of the input from the configuration; services and NodePort
    /// addresses are added by the caller.
    pub fn from_config(config: &Config) -> Input<'a> {
        Input {
            table: config.table.clone(),
            node_name: config.node_name.clone(),
            masquerade_mark: config.masquerade_mark(),
            ct_mark: config.ct_mark(),
            ..Input::default()
        }
    }
}

impl<'a> ServiceInput<'a> {
    /// From (port name, backends) pairs, as the registry resolves them per service port.
    pub fn from_ports(service: &'a Service, ports: impl IntoIterator<Item = (Option<String>, Vec<Backend>)>) -> Self {
        let mut backends: BTreeMap<String, Vec<Backend>> = BTreeMap::new();
        for (name, bs) in ports {
            backends.entry(name.unwrap_or_default()).or_default().extend(bs);
        }
        ServiceInput { service, backends }
    }
}

/// The objects one service adds to the table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServicePieces {
    /// Affinity sets (`sessionAffinity: ClientIP` only).
    pub sets: Vec<Set>,
    /// Chains in creation order: a chain comes before any chain that jumps to it.
    /// Only services that need them have any (affinity, `loadBalancerSourceRanges`).
    pub chains: Vec<(Chain, Vec<Rule>)>,
    /// Elements of the skeleton's sets and maps, as (set name, element); their keys are
    /// this service's alone (see `claims`).
    pub elements: Vec<(SetName, Element)>,
    /// Elements other services may add as well (`hairpin-*`: two services can share an
    /// endpoint): present while any service has them.
    pub shared: Vec<(SetName, Element)>,
}

impl ServicePieces {
    /// Adds these objects to a ruleset that holds the skeleton (shared elements as they
    /// are: a caller merging several services dedups them).
    pub fn merge_into(self, rs: &mut Ruleset) {
        rs.sets.extend(self.sets);
        rs.chains.extend(self.chains);
        for (map, el) in self.elements.into_iter().chain(self.shared) {
            match rs.elements.iter_mut().find(|(name, _)| *name == map) {
                Some((_, els)) => els.push(el),
                None => rs.elements.push((map.into_owned(), vec![el])),
            }
        }
    }

    /// Drops the spare capacity the vectors grew while being built: the planner keeps
    /// the pieces of every service as long as the service exists.
    pub fn shrink_to_fit(&mut self) {
        self.sets.shrink_to_fit();
        self.chains.shrink_to_fit();
        self.elements.shrink_to_fit();
        self.shared.shrink_to_fit();
    }

    /// The endpoint counts this service's destinations use (one `service-*-kN` set pair
    /// and rule pair in the skeleton each).
    pub fn endpoint_counts(&self) -> impl Iterator<Item = (IpFamily, u32)> + '_ {
        self.elements.iter().filter_map(|(set, _)| names::parse_endpoint_count_set(set))
    }
}

fn family_fields(f: IpFamily) -> (Field, Field, DataType) {
    match f {
        IpFamily::V4 => (Field::IpSaddr, Field::IpDaddr, DataType::Ipv4Addr),
        IpFamily::V6 => (Field::Ip6Saddr, Field::Ip6Daddr, DataType::Ipv6Addr),
    }
}

/// Set and map names of one family.
struct Maps {
    nodeport_ips: &'static str,
    service_backends: &'static str,
    nodeport_backends: &'static str,
    masquerade_ips: &'static str,
    masquerade_nodeports: &'static str,
    reject_ips: &'static str,
    reject_nodeports: &'static str,
    drop_ips: &'static str,
    drop_nodeports: &'static str,
    hairpin: &'static str,
    affinity_ips: &'static str,
    affinity_nodeports: &'static str,
    firewall_ips: &'static str,
}

fn maps(f: IpFamily) -> Maps {
    match f {
        IpFamily::V4 => Maps {
            nodeport_ips: names::NODEPORT_IPS_V4,
            service_backends: names::SERVICE_BACKENDS_V4,
            nodeport_backends: names::NODEPORT_BACKENDS_V4,
            masquerade_ips: names::MASQUERADE_IPS_V4,
            masquerade_nodeports: names::MASQUERADE_NODEPORTS_V4,
            reject_ips: names::REJECT_IPS_V4,
            reject_nodeports: names::REJECT_NODEPORTS_V4,
            drop_ips: names::DROP_IPS_V4,
            drop_nodeports: names::DROP_NODEPORTS_V4,
            hairpin: names::HAIRPIN_V4,
            affinity_ips: names::AFFINITY_IPS_V4,
            affinity_nodeports: names::AFFINITY_NODEPORTS_V4,
            firewall_ips: names::FIREWALL_IPS_V4,
        },
        IpFamily::V6 => Maps {
            nodeport_ips: names::NODEPORT_IPS_V6,
            service_backends: names::SERVICE_BACKENDS_V6,
            nodeport_backends: names::NODEPORT_BACKENDS_V6,
            masquerade_ips: names::MASQUERADE_IPS_V6,
            masquerade_nodeports: names::MASQUERADE_NODEPORTS_V6,
            reject_ips: names::REJECT_IPS_V6,
            reject_nodeports: names::REJECT_NODEPORTS_V6,
            drop_ips: names::DROP_IPS_V6,
            drop_nodeports: names::DROP_NODEPORTS_V6,
            hairpin: names::HAIRPIN_V6,
            affinity_ips: names::AFFINITY_IPS_V6,
            affinity_nodeports: names::AFFINITY_NODEPORTS_V6,
            firewall_ips: names::FIREWALL_IPS_V6,
        },
    }
}

const FAMILIES: [IpFamily; 2] = [IpFamily::V4, IpFamily::V6];

fn rule(stmts: Vec<Stmt>) -> Rule {
    Rule { stmts, comment: None }
}

fn chain(name: &str) -> Chain {
    Chain { name: name.to_string(), base: None, comment: None }
}

fn base_chain(name: &str, kind: ChainType, hook: Hook, priority: i32) -> Chain {
    Chain { name: name.to_string(), base: Some(BaseChain { kind, hook, priority, policy: None }), comment: None }
}

fn jump(c: &str) -> Stmt {
    Stmt::Verdict(Verdict::Jump(c.to_string()))
}

fn goto(c: &str) -> Verdict {
    Verdict::Goto(c.to_string())
}

fn ct_state_new() -> Stmt {
    Stmt::Bits { field: Field::CtState, mask: 8, value: 8, negate: false }
}

/// `<daddr> . meta l4proto . th dport`
fn service_key(daddr: Field) -> Field {
    Field::Concat(vec![daddr, Field::L4Proto, Field::ThDport])
}

fn nodeport_key() -> Field {
    Field::Concat(vec![Field::L4Proto, Field::ThDport])
}

fn in_set(field: Field, set: &str) -> Stmt {
    Stmt::InSet { field, set: set.into(), negate: false }
}

/// The key with a numgen slot appended: what a backends map is looked up with.
fn with_slot(key: Field, count: u32) -> Field {
    match key {
        Field::Concat(mut fs) => {
            fs.push(Field::NumgenRandom(count));
            Field::Concat(fs)
        }
        f => Field::Concat(vec![f, Field::NumgenRandom(count)]),
    }
}

/// Matches on one family's service IPs (`ip daddr . meta l4proto . th dport @SET`) or,
/// on the NodePort addresses only, its NodePorts (`meta l4proto . th dport @SET`).
fn destination(f: IpFamily, nodeport: bool, set: &str) -> Vec<Stmt> {
    let (_, daddr, _) = family_fields(f);
    if nodeport {
        vec![in_set(daddr, maps(f).nodeport_ips), in_set(nodeport_key(), set)]
    } else {
        vec![in_set(service_key(daddr), set)]
    }
}

/// `typeof` of a backends map's key (the slot's modulus is only a declaration).
fn backends_key(f: IpFamily, nodeport: bool) -> Field {
    let (_, daddr, _) = family_fields(f);
    let key = if nodeport { nodeport_key() } else { service_key(daddr) };
    with_slot(key, 2)
}

/// The fixed part of the table, with the NodePort addresses filled in and one pair of
/// dispatch sets and rules per (family, endpoint count) in `counts`.
pub fn build_skeleton(input: &Input, counts: &BTreeSet<(IpFamily, u32)>) -> Ruleset {
    let mut sets = Vec::new();
    for f in FAMILIES {
        let (_, daddr, addr_type) = family_fields(f);
        let m = maps(f);
        let v = if f == IpFamily::V4 { "IPv4" } else { "IPv6" };
        let plain = |name: &str, key: Vec<DataType>, comment: String| Set {
            name: name.into(),
            key,
            data: Vec::new(),
            typeof_key: None,
            typeof_data: None,
            flags: SetFlags::default(),
            timeout: None,
            comment: Some(comment),
        };
        let vmap = |name: &str, key: Vec<DataType>, comment: String| Set {
            data: vec![DataType::Verdict],
            ..plain(name, key, comment)
        };
        let backends = |name: &str, nodeport: bool, comment: String| {
            let mut key = if nodeport { vec![] } else { vec![addr_type] };
            key.extend([DataType::InetProto, DataType::InetService, DataType::Integer]);
            Set {
                data: vec![addr_type, DataType::InetService],
                typeof_key: Some(backends_key(f, nodeport)),
                typeof_data: Some(Field::Concat(vec![daddr.clone(), Field::ThDport])),
                ..plain(name, key, comment)
            }
        };
        let svc_key = vec![addr_type, DataType::InetProto, DataType::InetService];
        let np_key = vec![DataType::InetProto, DataType::InetService];
        sets.push(plain(m.nodeport_ips, vec![addr_type], format!("{v} addresses that accept NodePort traffic")));
        for &(fam, count) in counts.iter().filter(|(fam, _)| *fam == f) {
            sets.push(plain(
                &names::endpoint_count_set(fam, false, count),
                svc_key.clone(),
                format!("{v} service IPs with {count} endpoint(s)"),
            ));
            sets.push(plain(
                &names::endpoint_count_set(fam, true, count),
                np_key.clone(),
                format!("{v} NodePorts with {count} endpoint(s)"),
            ));
        }
        sets.push(backends(m.service_backends, false, format!("{v} service IP endpoints by slot")));
        sets.push(backends(m.nodeport_backends, true, format!("{v} NodePort endpoints by slot")));
        sets.push(plain(m.masquerade_ips, svc_key.clone(), format!("{v} external IPs under the Cluster policy")));
        sets.push(plain(m.masquerade_nodeports, np_key.clone(), format!("{v} NodePorts under the Cluster policy")));
        sets.push(plain(m.reject_ips, svc_key.clone(), format!("{v} service IPs without endpoints")));
        sets.push(plain(m.reject_nodeports, np_key.clone(), format!("{v} NodePorts without endpoints")));
        sets.push(plain(m.drop_ips, svc_key.clone(), format!("{v} service IPs without local endpoints")));
        sets.push(plain(m.drop_nodeports, np_key.clone(), format!("{v} NodePorts without local endpoints")));
        sets.push(plain(m.hairpin, vec![addr_type, addr_type], format!("{v} endpoints reaching themselves")));
        sets.push(vmap(m.affinity_ips, svc_key.clone(), format!("{v} service IPs with session affinity")));
        sets.push(vmap(m.affinity_nodeports, np_key, format!("{v} NodePorts with session affinity")));
        sets.push(vmap(m.firewall_ips, svc_key, format!("{v} LoadBalancer IPs with loadBalancerSourceRanges")));
    }
    sets.push(Set {
        name: names::HEALTH_CHECK_PORTS.into(),
        key: vec![DataType::InetProto, DataType::InetService],
        data: Vec::new(),
        typeof_key: None,
        typeof_data: None,
        flags: SetFlags::default(),
        timeout: None,
        comment: Some("healthCheckNodePorts the daemon serves (tcp)".into()),
    });

    let mut v4: Vec<Element> = input.nodeport_ips_v4.iter().map(|a| addr_element(IpAddr::V4(*a))).collect();
    let mut v6: Vec<Element> = input.nodeport_ips_v6.iter().map(|a| addr_element(IpAddr::V6(*a))).collect();
    for els in [&mut v4, &mut v6] {
        els.sort_by(|a, b| a.key.cmp(&b.key));
        els.dedup();
    }
    let mut elements = Vec::new();
    if !v4.is_empty() {
        elements.push((names::NODEPORT_IPS_V4.to_string(), v4));
    }
    if !v6.is_empty() {
        elements.push((names::NODEPORT_IPS_V6.to_string(), v6));
    }

    let mark = input.masquerade_mark;
    let mut endpoints_check = Vec::new();
    let mut firewall_check = Vec::new();
    let mut services = Vec::new();
    let mut masquerading = Vec::new();
    for f in FAMILIES {
        let m = maps(f);
        let (saddr, daddr, _) = family_fields(f);
        for nodeport in [false, true] {
            let (reject, drop) =
                if nodeport { (m.reject_nodeports, m.drop_nodeports) } else { (m.reject_ips, m.drop_ips) };
            endpoints_check.push(rule(
                [destination(f, nodeport, reject), vec![Stmt::Verdict(goto(names::REJECT_CHAIN))]].concat(),
            ));
            endpoints_check.push(rule([destination(f, nodeport, drop), vec![Stmt::Verdict(Verdict::Drop)]].concat()));
        }
        firewall_check
            .push(rule(vec![Stmt::VmapNamed { key: service_key(daddr.clone()), map: m.firewall_ips.into() }]));
        // Session affinity needs per-service chains; only those services are in these maps.
        services.push(rule(vec![Stmt::VmapNamed { key: service_key(daddr.clone()), map: m.affinity_ips.into() }]));
        services.push(rule(vec![
            in_set(daddr.clone(), m.nodeport_ips),
            Stmt::VmapNamed { key: nodeport_key(), map: m.affinity_nodeports.into() },
        ]));
        // External traffic under the Cluster policy: the endpoint may answer by another
        // route, SNAT makes the reply come back here.
        for (nodeport, set) in [(false, m.masquerade_ips), (true, m.masquerade_nodeports)] {
            services.push(rule(
                [destination(f, nodeport, set), vec![Stmt::MarkOr { field: Field::MetaMark, bits: mark }]].concat(),
            ));
        }
        // One rule per endpoint count: pick a slot, DNAT to the endpoint in it.
        for &(_, count) in counts.iter().filter(|(fam, _)| *fam == f) {
            for nodeport in [false, true] {
                let (key, map) = if nodeport {
                    (nodeport_key(), m.nodeport_backends)
                } else {
                    (service_key(daddr.clone()), m.service_backends)
                };
                services.push(rule(
                    [
                        destination(f, nodeport, &names::endpoint_count_set(f, nodeport, count)),
                        vec![
                            Stmt::MarkOr { field: Field::CtMark, bits: input.ct_mark },
                            Stmt::DnatMap { ipv6: f == IpFamily::V6, key: with_slot(key, count), map: map.into() },
                        ],
                    ]
                    .concat(),
                ));
            }
        }
        // Hairpin: an endpoint reaching itself through a service must see the router as
        // the source, or its reply would bypass the DNAT.
        masquerading.push(rule(vec![
            Stmt::Bits { field: Field::CtStatus, mask: CT_STATUS_DNAT, value: CT_STATUS_DNAT, negate: false },
            in_set(Field::Concat(vec![saddr, daddr]), m.hairpin),
            Stmt::MarkOr { field: Field::MetaMark, bits: mark },
        ]));
    }
    masquerading.extend([
        rule(vec![
            Stmt::Bits { field: Field::MetaMark, mask: mark, value: 0, negate: false },
            Stmt::Verdict(Verdict::Return),
        ]),
        // Cleared so that a packet forwarded again (hairpin, tunnels) is not
        // masqueraded twice by a mark that no longer applies.
        rule(vec![Stmt::MarkAndNot { field: Field::MetaMark, bits: mark }]),
        rule(vec![Stmt::Masquerade { fully_random: true }]),
    ]);

    // Jump targets come before the chains that jump to them (creation order).
    let chains = vec![
        (chain(names::MARK_FOR_MASQUERADE), vec![rule(vec![Stmt::MarkOr { field: Field::MetaMark, bits: mark }])]),
        (chain(names::MASQUERADING), masquerading),
        (
            chain(names::REJECT_CHAIN),
            vec![
                rule(vec![
                    Stmt::Cmp {
                        field: Field::L4Proto,
                        op: CmpOp::Eq,
                        value: CmpValue::Value(Value::Proto(Protocol::Tcp.number())),
                    },
                    Stmt::Reject(RejectKind::TcpReset),
                ]),
                rule(vec![Stmt::Reject(RejectKind::Default)]),
            ],
        ),
        (chain(names::SERVICES), services),
        (chain(names::ENDPOINTS_CHECK), endpoints_check),
        (chain(names::FIREWALL_CHECK), firewall_check),
        // Filter chains run before DNAT (dstnat - 10) so they see the service address.
        // Rejects are only allowed at input, forward and output, as kube-proxy found.
        (
            base_chain(names::FILTER_PREROUTING, ChainType::Filter, Hook::Prerouting, -110),
            vec![rule(vec![ct_state_new(), jump(names::FIREWALL_CHECK)])],
        ),
        (
            base_chain(names::FILTER_INPUT, ChainType::Filter, Hook::Input, -110),
            vec![
                // `localhost` NodePorts need route_localnet, which would also let the
                // network reach services bound to 127.0.0.1 (CVE-2020-8558): only
                // loopback itself, or traffic we DNAT'd, may address 127.0.0.0/8.
                rule(vec![
                    Stmt::Cmp { field: Field::IifName, op: CmpOp::Ne, value: CmpValue::IfName("lo".into()) },
                    Stmt::InPrefix {
                        field: Field::IpDaddr,
                        net: "127.0.0.0/8".parse().expect("literal"),
                        negate: false,
                    },
                    Stmt::Bits { field: Field::CtStatus, mask: CT_STATUS_DNAT, value: 0, negate: false },
                    Stmt::Verdict(Verdict::Drop),
                ]),
                health_check_mark(IpFamily::V4, input.ct_mark),
                health_check_mark(IpFamily::V6, input.ct_mark),
                rule(vec![ct_state_new(), jump(names::ENDPOINTS_CHECK)]),
            ],
        ),
        (
            base_chain(names::FILTER_FORWARD, ChainType::Filter, Hook::Forward, -110),
            vec![rule(vec![ct_state_new(), jump(names::ENDPOINTS_CHECK)])],
        ),
        (
            base_chain(names::FILTER_OUTPUT, ChainType::Filter, Hook::Output, -110),
            vec![
                rule(vec![ct_state_new(), jump(names::ENDPOINTS_CHECK)]),
                rule(vec![ct_state_new(), jump(names::FIREWALL_CHECK)]),
            ],
        ),
        (
            base_chain(names::NAT_PREROUTING, ChainType::Nat, Hook::Prerouting, -100),
            vec![rule(vec![jump(names::SERVICES)])],
        ),
        (base_chain(names::NAT_OUTPUT, ChainType::Nat, Hook::Output, -100), vec![rule(vec![jump(names::SERVICES)])]),
        (
            base_chain(names::NAT_POSTROUTING, ChainType::Nat, Hook::Postrouting, 100),
            vec![rule(vec![jump(names::MASQUERADING)])],
        ),
    ];

    Ruleset { family: Some(Family::Inet), table: input.table.clone(), sets, elements, chains }
}

/// New connections to a health-check port on a NodePort address get the conntrack mark
/// bit, so that a firewall whose input policy rejects them (fw4's WAN zone) accepts them
/// with the same mark test as DNAT'd ones. The hook is input, so the destination is
/// already one of the node's own; the set lookups keep the cost per packet independent
/// of the number of services.
fn health_check_mark(f: IpFamily, ct_mark: u32) -> Rule {
    let (_, daddr, _) = family_fields(f);
    rule(vec![
        ct_state_new(),
        Stmt::InSet { field: nodeport_key(), set: names::HEALTH_CHECK_PORTS.into(), negate: false },
        Stmt::InSet { field: daddr, set: maps(f).nodeport_ips.into(), negate: false },
        Stmt::MarkOr { field: Field::CtMark, bits: ct_mark },
    ])
}

/// `ct status dnat`
const CT_STATUS_DNAT: u32 = 0x20;

fn addr_element(ip: IpAddr) -> Element {
    Element { key: vec![Value::Addr(ip)], data: None, timeout: None }
}

fn verdict_element(key: Vec<Value>, v: Verdict) -> Element {
    Element { key, data: Some(ElementData::Verdict(v)), timeout: None }
}

fn parse_ips(strs: impl IntoIterator<Item = impl AsRef<str>>) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = strs.into_iter().filter_map(|s| s.as_ref().trim().parse().ok()).collect();
    out.sort();
    out.dedup();
    out
}

/// What one service asks of every one of its ports.
struct ServiceFacts {
    /// The ClusterIP of each family the service has (first of each family).
    cluster_ips: Vec<IpAddr>,
    external_ips: Vec<IpAddr>,
    lb_ips: Vec<IpAddr>,
    source_ranges: Vec<IpNet>,
    external_local: bool,
    internal_local: bool,
    /// `Some(timeout)` for `sessionAffinity: ClientIP`.
    affinity: Option<u32>,
    publish_not_ready: bool,
    has_node_ports: bool,
}

fn facts(svc: &Service) -> Option<ServiceFacts> {
    let ty = svc.service_type();
    if ty == ServiceType::ExternalName || svc.is_headless() {
        return None;
    }
    let spec = &svc.spec;
    let mut candidates: Vec<&str> = spec.cluster_ips.iter().map(String::as_str).collect();
    if candidates.is_empty() {
        candidates.extend(spec.cluster_ip.as_deref());
    }
    let mut cluster_ips: Vec<IpAddr> = Vec::new();
    for ip in candidates.iter().filter_map(|s| s.trim().parse::<IpAddr>().ok()) {
        if !cluster_ips.iter().any(|o| o.is_ipv4() == ip.is_ipv4()) {
            cluster_ips.push(ip);
        }
    }
    if cluster_ips.is_empty() {
        return None;
    }
    let lb_ips = if ty == ServiceType::LoadBalancer {
        let ingress = svc.status.iter().flat_map(|s| s.load_balancer.ingress.iter());
        parse_ips(ingress.filter_map(|i| i.ip.as_deref()))
    } else {
        Vec::new()
    };
    let mut source_ranges: Vec<IpNet> = spec
        .load_balancer_source_ranges
        .iter()
        .filter_map(|s| s.trim().parse::<IpNet>().ok())
        .map(|n| n.trunc())
        .collect();
    source_ranges.sort();
    source_ranges.dedup();
    let affinity = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        let t =
            spec.session_affinity_config.as_ref().and_then(|c| c.client_ip.as_ref()).and_then(|c| c.timeout_seconds);
        // Kubernetes allows 1..=86400; anything else was refused by validation.
        t.and_then(|t| u32::try_from(t).ok()).filter(|t| (1..=86_400).contains(t)).unwrap_or(DEFAULT_AFFINITY_TIMEOUT)
    });
    Some(ServiceFacts {
        cluster_ips,
        external_ips: parse_ips(&spec.external_ips),
        lb_ips,
        source_ranges,
        external_local: spec.external_traffic_policy.as_deref() == Some("Local"),
        internal_local: spec.internal_traffic_policy.as_deref() == Some("Local"),
        affinity,
        publish_not_ready: spec.publish_not_ready_addresses == Some(true),
        has_node_ports: matches!(ty, ServiceType::NodePort | ServiceType::LoadBalancer),
    })
}

/// The objects of one service. ExternalName and headless services, and services without
/// a ClusterIP yet, have none.
pub fn build_service(input: &Input, svc: &ServiceInput) -> ServicePieces {
    let mut pieces = ServicePieces::default();
    if let Some(port) = crate::healthcheck::port_of(svc.service) {
        pieces.elements.push((
            names::HEALTH_CHECK_PORTS.into(),
            Element { key: vec![Value::Proto(Protocol::Tcp.number()), Value::Port(port)], data: None, timeout: None },
        ));
    }
    let Some(facts) = facts(svc.service) else {
        return pieces;
    };
    let empty = Vec::new();
    for port in &svc.service.spec.ports {
        let (Ok(port_no), proto) = (u16::try_from(port.port), port.proto()) else {
            continue;
        };
        if port_no == 0 {
            continue;
        }
        let port_name = port.name.clone().unwrap_or_default();
        let label = if port_name.is_empty() { port_no.to_string() } else { port_name.clone() };
        let backends = svc.backends.get(&port_name).unwrap_or(&empty);
        let node_port =
            port.node_port.filter(|_| facts.has_node_ports).and_then(|n| u16::try_from(n).ok()).filter(|n| *n != 0);
        for cluster_ip in &facts.cluster_ips {
            let family = IpFamily::of(cluster_ip);
            let id = PortId::new(family, svc.service.namespace(), svc.service.name(), proto, &label);
            let sp = PortSpec { id, family, proto, port: port_no, node_port, cluster_ip: *cluster_ip };
            build_port(input, &facts, &sp, backends, &mut pieces);
        }
    }
    pieces
}

struct PortSpec {
    id: PortId,
    family: IpFamily,
    proto: Protocol,
    port: u16,
    node_port: Option<u16>,
    cluster_ip: IpAddr,
}

fn build_port(input: &Input, facts: &ServiceFacts, sp: &PortSpec, backends: &[Backend], out: &mut ServicePieces) {
    let fam = sp.family;
    let m = maps(fam);
    let (saddr, _, _) = family_fields(fam);
    let in_family = |ip: &&IpAddr| IpFamily::of(ip) == fam;
    let external_ips: Vec<IpAddr> = facts.external_ips.iter().filter(in_family).copied().collect();
    let lb_ips: Vec<IpAddr> = facts.lb_ips.iter().filter(in_family).copied().collect();
    let source_ranges: Vec<IpNet> = facts
        .source_ranges
        .iter()
        .filter(|n| matches!((n, fam), (IpNet::V4(_), IpFamily::V4) | (IpNet::V6(_), IpFamily::V6)))
        .copied()
        .collect();

    let eps = categorize(backends, fam, &input.node_name, facts.publish_not_ready);
    let internal = if facts.internal_local { &eps.local } else { &eps.cluster };
    let external = if facts.external_local { &eps.local } else { &eps.cluster };
    let proto = Value::Proto(sp.proto.number());
    let dests = Destinations {
        cluster_ip: vec![Value::Addr(sp.cluster_ip), proto.clone(), Value::Port(sp.port)],
        external: external_ips
            .iter()
            .chain(&lb_ips)
            .map(|ip| vec![Value::Addr(*ip), proto.clone(), Value::Port(sp.port)])
            .collect(),
        node_port: sp.node_port.map(|np| vec![proto.clone(), Value::Port(np)]),
    };
    // Without any endpoint, every destination is refused at once; with endpoints only
    // elsewhere (a Local policy), that destination is dropped, as kube-proxy does.
    let miss = |nodeport: bool| match (eps.cluster.is_empty(), nodeport) {
        (true, false) => m.reject_ips,
        (true, true) => m.reject_nodeports,
        (false, false) => m.drop_ips,
        (false, true) => m.drop_nodeports,
    };
    let masquerade = !facts.external_local;
    if let Some(timeout) = facts.affinity {
        affinity_port(input, sp, &eps, facts, timeout, &dests, out);
        // Destinations without targets go where the other services' go.
        let mut misses = Vec::new();
        if internal.is_empty() {
            misses.push((miss(false), &dests.cluster_ip));
        }
        if external.is_empty() {
            misses.extend(dests.external.iter().map(|k| (miss(false), k)));
            misses.extend(dests.node_port.iter().map(|k| (miss(true), k)));
        }
        for (set, key) in misses {
            out.elements.push((set.into(), plain_element(key.clone())));
        }
    } else {
        let mut dest = |key: &Vec<Value>, nodeport: bool, targets: &[Target], masq: bool| {
            if targets.is_empty() {
                out.elements.push((miss(nodeport).into(), plain_element(key.clone())));
                return;
            }
            let count = len_u32(targets.len());
            out.elements.push((names::endpoint_count_set(fam, nodeport, count).into(), plain_element(key.clone())));
            let backends = if nodeport { m.nodeport_backends } else { m.service_backends };
            for (slot, t) in targets.iter().enumerate() {
                let mut k = key.clone();
                k.push(Value::Int(len_u32(slot)));
                let data = ElementData::Values(vec![Value::Addr(t.ip), Value::Port(t.port)]);
                out.elements.push((backends.into(), Element { key: k, data: Some(data), timeout: None }));
                out.shared.push((m.hairpin.into(), plain_element(vec![Value::Addr(t.ip), Value::Addr(t.ip)])));
            }
            if masq {
                let set = if nodeport { m.masquerade_nodeports } else { m.masquerade_ips };
                out.elements.push((set.into(), plain_element(key.clone())));
            }
        };
        dest(&dests.cluster_ip, false, internal, false);
        for key in &dests.external {
            dest(key, false, external, masquerade);
        }
        if let Some(key) = &dests.node_port {
            dest(key, true, external, masquerade);
        }
    }
    out.shared.sort_by(|a, b| a.1.key.cmp(&b.1.key));
    out.shared.dedup();

    // loadBalancerSourceRanges: only LoadBalancer IPs, not NodePorts (as Kubernetes). Rare,
    // and a chain of prefixes per service is what nft can express for them.
    if !lb_ips.is_empty() && !source_ranges.is_empty() {
        let fw = sp.id.firewall_chain();
        let mut rules: Vec<Rule> = source_ranges
            .iter()
            .map(|n| {
                rule(vec![
                    Stmt::InPrefix { field: saddr.clone(), net: *n, negate: false },
                    Stmt::Verdict(Verdict::Return),
                ])
            })
            .collect();
        rules.push(rule(vec![Stmt::Verdict(Verdict::Drop)]));
        out.chains.push((chain(&fw), rules));
        for ip in &lb_ips {
            let key = vec![Value::Addr(*ip), proto.clone(), Value::Port(sp.port)];
            out.elements.push((m.firewall_ips.into(), verdict_element(key, goto(&fw))));
        }
    }
}

/// The destinations of one service port in one family, as set keys.
struct Destinations {
    cluster_ip: Vec<Value>,
    /// externalIPs and LoadBalancer ingress IPs.
    external: Vec<Vec<Value>>,
    node_port: Option<Vec<Value>>,
}

fn plain_element(key: Vec<Value>) -> Element {
    Element { key, data: None, timeout: None }
}

/// `sessionAffinity: ClientIP`: each endpoint remembers its clients in a set of its own,
/// which data maps cannot do, so these ports keep kube-proxy's chains: an external chain,
/// a chain that picks (affinity first, then `numgen`) and a chain per endpoint, reached
/// through the `affinity-*` verdict maps. Destinations without targets are left to the
/// caller.
fn affinity_port(
    input: &Input,
    sp: &PortSpec,
    eps: &super::endpoints::Categorized,
    facts: &ServiceFacts,
    timeout: u32,
    dests: &Destinations,
    out: &mut ServicePieces,
) {
    let fam = sp.family;
    let m = maps(fam);
    let (saddr, _, addr_type) = family_fields(fam);
    let internal_chain = if facts.internal_local { sp.id.local_chain() } else { sp.id.cluster_chain() };
    let external_chain = if facts.external_local { sp.id.local_chain() } else { sp.id.cluster_chain() };
    let has_internal = !(if facts.internal_local { &eps.local } else { &eps.cluster }).is_empty();
    let has_external = !(if facts.external_local { &eps.local } else { &eps.cluster }).is_empty();
    let externally_accessible = dests.node_port.is_some() || !dests.external.is_empty();
    let uses_external_chain = has_external && externally_accessible;
    let uses_cluster_chain = !eps.cluster.is_empty()
        && ((has_internal && !facts.internal_local) || (uses_external_chain && !facts.external_local));
    let uses_local_chain = !eps.local.is_empty()
        && ((has_internal && facts.internal_local) || (uses_external_chain && facts.external_local));
    let proto = Value::Proto(sp.proto.number());

    let mut targets: Vec<Target> = Vec::new();
    if uses_cluster_chain {
        targets.extend(&eps.cluster);
    }
    if uses_local_chain {
        targets.extend(&eps.local);
    }
    targets.sort();
    targets.dedup();
    for t in &targets {
        let set = sp.id.affinity_set(&t.ip, t.port);
        out.sets.push(Set {
            name: set.clone(),
            key: vec![addr_type],
            data: Vec::new(),
            typeof_key: None,
            typeof_data: None,
            // `dynamic` because the packet path adds to it (nft would add it anyway).
            flags: SetFlags { timeout: true, dynamic: true, ..SetFlags::default() },
            timeout: Some(timeout),
            comment: None,
        });
        let rules = vec![
            // Hairpin, as the `masquerading` chain does for the other services.
            rule(vec![
                Stmt::Cmp { field: saddr.clone(), op: CmpOp::Eq, value: CmpValue::Value(Value::Addr(t.ip)) },
                jump(names::MARK_FOR_MASQUERADE),
            ]),
            rule(vec![Stmt::SetUpdate { set, key: saddr.clone() }]),
            rule(vec![Stmt::MarkOr { field: Field::CtMark, bits: input.ct_mark }]),
            rule(vec![
                Stmt::Cmp { field: Field::L4Proto, op: CmpOp::Eq, value: CmpValue::Value(proto.clone()) },
                Stmt::Dnat { addr: t.ip, port: Some(t.port) },
            ]),
        ];
        out.chains.push((chain(&sp.id.endpoint_chain(&t.ip, t.port)), rules));
    }

    let policy_chain = |name: String, members: &[Target]| -> (Chain, Vec<Rule>) {
        let mut rules: Vec<Rule> = members
            .iter()
            .map(|t| {
                rule(vec![
                    Stmt::InSet { field: saddr.clone(), set: sp.id.affinity_set(&t.ip, t.port), negate: false },
                    Stmt::Verdict(goto(&sp.id.endpoint_chain(&t.ip, t.port))),
                ])
            })
            .collect();
        let entries = members
            .iter()
            .enumerate()
            .map(|(i, t)| (Value::Mark(len_u32(i)), goto(&sp.id.endpoint_chain(&t.ip, t.port))))
            .collect();
        rules.push(rule(vec![Stmt::VmapInline { key: Field::NumgenRandom(len_u32(members.len())), entries }]));
        (chain(&name), rules)
    };
    if uses_cluster_chain {
        out.chains.push(policy_chain(sp.id.cluster_chain(), &eps.cluster));
    }
    if uses_local_chain {
        out.chains.push(policy_chain(sp.id.local_chain(), &eps.local));
    }
    if uses_external_chain {
        let mut rules = Vec::new();
        if !facts.external_local {
            rules.push(rule(vec![jump(names::MARK_FOR_MASQUERADE)]));
        }
        rules.push(rule(vec![Stmt::Verdict(goto(&external_chain))]));
        out.chains.push((chain(&sp.id.external_chain()), rules));
        let ext = goto(&sp.id.external_chain());
        for key in &dests.external {
            out.elements.push((m.affinity_ips.into(), verdict_element(key.clone(), ext.clone())));
        }
        if let Some(key) = &dests.node_port {
            out.elements.push((m.affinity_nodeports.into(), verdict_element(key.clone(), ext)));
        }
    }
    if has_internal {
        out.elements.push((m.affinity_ips.into(), verdict_element(dests.cluster_ip.clone(), goto(&internal_chain))));
    }
}
