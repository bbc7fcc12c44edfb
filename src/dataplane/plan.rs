//! The planner: keeps what the table holds per service and turns a batch of changed
//! services into what the kernel must be told. Pure (no I/O, no daemon state): the
//! caller hands it the services that changed, with their backends, and applies the
//! [`Change`] it returns.
//!
//! A change costs O(changed services): only their pieces are rebuilt, and the
//! transaction is the difference between two small rulesets, the skeleton and the
//! changed services' pieces before and after. Elements several services share
//! (`hairpin-*`) and the endpoint counts in use (the skeleton's `service-*-kN` sets and
//! rules) are reference-counted so that one service letting go of them does not remove
//! them from under another.

use std::collections::{BTreeMap, BTreeSet};

use crate::fxhash::FxHashMap as HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use crate::conntrack::UdpFlowFilter;
use crate::model::{Backend, Protocol, Service, ServiceType};
use crate::nft::ir::{Chain, Element, Rule, Ruleset, Set, SetName};
use crate::nft::packed;
use crate::nft::sync::Part;
use crate::registry::Squeezed;

use super::builder::{build_service, build_skeleton, Input, ServiceInput, ServicePieces};
use super::claims::{self, Claims};
use super::names::{self, IpFamily};

/// A service by namespace and name.
pub use crate::model::Key;

/// A service and its backends per port name, owned (sent to the data plane worker).
#[derive(Debug, Clone)]
pub struct OwnedService {
    pub service: ServiceCopy,
    /// Backends per service port, keyed by the port's name (`""` for an unnamed port).
    pub backends: BTreeMap<String, Vec<Backend>>,
}

/// The registry's copy of a Service, as a sync request carries it.
#[derive(Debug, Clone)]
pub enum ServiceCopy {
    /// Shared with the registry (a Service just written or restored).
    Typed(Arc<Service>),
    /// A packed Service's text, decoded by the worker when it plans the service: a
    /// rebuild's request then holds ~250 bytes a service rather than a typed copy of
    /// each (~1.5 KB), and the decoding is not the event loop's. `created`: its
    /// `creationTimestamp`, which orders claimants before any is decoded.
    Text { text: Squeezed, created: Option<Box<str>> },
}

impl From<Arc<Service>> for ServiceCopy {
    fn from(s: Arc<Service>) -> Self {
        ServiceCopy::Typed(s)
    }
}

impl ServiceCopy {
    /// The Service (decoded from its text: a new copy each call).
    pub fn get(&self) -> Arc<Service> {
        match self {
            ServiceCopy::Typed(s) => s.clone(),
            ServiceCopy::Text { text, .. } => Arc::new(text.decode()),
        }
    }

    /// Where the service claims contested keys: oldest first (`creationTimestamp`, RFC
    /// 3339 in UTC compares as text; [`claims::NOT_CREATED`] when it has none), then by
    /// namespace and name.
    fn precedence<'a>(&'a self, key: &'a Key) -> (&'a str, &'a str, &'a str) {
        let created = match self {
            ServiceCopy::Typed(s) => s.metadata.creation_timestamp.as_deref(),
            ServiceCopy::Text { created, .. } => created.as_deref(),
        };
        (created.unwrap_or(claims::NOT_CREATED), &key.0, &key.1)
    }
}

/// What one plan asks of the kernel.
#[derive(Debug)]
pub enum Change {
    /// Everything was rebuilt: make the kernel's table equal to [`Planner::skeleton`] plus
    /// [`Planner::parts`] (by difference when the table exists, else by creating it).
    Full,
    /// Only the changed services and the fixed part, before and after: the diff of these
    /// small rulesets is the transaction.
    Partial { before: Box<Ruleset>, after: Box<Ruleset> },
}

/// A planned change and the UDP conntrack entries it leaves pointing nowhere.
#[derive(Debug)]
pub struct Planned {
    pub change: Change,
    pub stale_udp: Vec<UdpFlowFilter>,
    /// Services that waited for a key this change released: the caller sends them in
    /// the next batch so that they claim it.
    pub waiters: Vec<Key>,
}

/// A UDP service port as the kernel sees it, to find conntrack entries that
/// outlive an endpoint or a service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct UdpPort {
    fronts: Vec<IpAddr>,
    port: u16,
    node_port: Option<u16>,
    endpoints: BTreeSet<(IpAddr, u16)>,
}

/// What the planner keeps of one service: its pieces after the claims, with the
/// elements packed (`nft::packed`: one byte string instead of two heap blocks and ~90
/// bytes per element). 40 bytes and two heap blocks for most services.
#[derive(Debug, Default)]
struct Kept {
    elements: Box<[u8]>,
    shared: Box<[u8]>,
    /// What few services have.
    rare: Option<Box<Rare>>,
}

/// Sets and chains (session affinity, `loadBalancerSourceRanges`) and UDP ports.
#[derive(Debug, Default)]
struct Rare {
    sets: Vec<Set>,
    chains: Vec<(Chain, Vec<Rule>)>,
    udp: BTreeMap<String, UdpPort>,
}

impl Kept {
    /// `buf`: scratch space for packing, reused from one service to the next.
    fn new(mut p: ServicePieces, udp: BTreeMap<String, UdpPort>, buf: &mut Vec<u8>) -> Kept {
        p.sets.shrink_to_fit();
        p.chains.shrink_to_fit();
        let elements = packed::pack_with(buf, &p.elements);
        let shared = packed::pack_with(buf, &p.shared);
        let rare = (!p.sets.is_empty() || !p.chains.is_empty() || !udp.is_empty())
            .then(|| Box::new(Rare { sets: p.sets, chains: p.chains, udp }));
        Kept { elements, shared, rare }
    }

    fn sets(&self) -> &[Set] {
        self.rare.as_ref().map_or(&[], |r| &r.sets)
    }

    fn chains(&self) -> &[(Chain, Vec<Rule>)] {
        self.rare.as_ref().map_or(&[], |r| &r.chains)
    }

    fn udp(&self) -> Option<&BTreeMap<String, UdpPort>> {
        self.rare.as_ref().map(|r| &r.udp)
    }

    /// The pieces again (`shared`: with the shared elements).
    fn unpack(&self, shared: bool) -> ServicePieces {
        ServicePieces {
            sets: self.sets().to_vec(),
            chains: self.chains().to_vec(),
            elements: packed::unpack(&self.elements),
            shared: if shared { packed::unpack(&self.shared) } else { Vec::new() },
        }
    }

    /// As [`ServicePieces::endpoint_counts`].
    fn endpoint_counts(&self) -> impl Iterator<Item = (IpFamily, u32)> + '_ {
        packed::entries(&self.elements).filter_map(|(set, _)| names::parse_endpoint_count_set(set))
    }
}

#[derive(Debug, Default)]
pub struct Planner {
    /// Each service's pieces; the key is shared with `claims`.
    pieces: BTreeMap<Arc<Key>, Kept>,
    /// Who holds each destination (`pieces` are what remains after the claims).
    claims: Claims<Arc<Key>>,
    /// How many services add each shared element, by the element packed alone
    /// (`packed::pack_one`).
    shared: HashMap<Box<[u8]>, u32>,
    /// How many destinations use each (family, endpoint count).
    counts: BTreeMap<(IpFamily, u32), u32>,
    /// The fixed part of the table as last planned (node addresses live here).
    skeleton: Option<Ruleset>,
}

fn udp_ports(s: &Service, backends: &BTreeMap<String, Vec<Backend>>) -> BTreeMap<String, UdpPort> {
    if s.service_type() == ServiceType::ExternalName {
        return BTreeMap::new();
    }
    let mut fronts: Vec<IpAddr> = s.spec.cluster_ips.iter().filter_map(|s| s.parse().ok()).collect();
    fronts.extend(s.spec.external_ips.iter().filter_map(|s| s.parse::<IpAddr>().ok()));
    if let Some(st) = &s.status {
        fronts.extend(st.load_balancer.ingress.iter().filter_map(|i| i.ip.as_deref()?.parse::<IpAddr>().ok()));
    }
    s.spec
        .ports
        .iter()
        .filter(|p| p.proto() == Protocol::Udp)
        .filter_map(|p| {
            let key = p.name.clone().unwrap_or_default();
            let port = u16::try_from(p.port).ok()?;
            let node_port = p.node_port.and_then(|n| u16::try_from(n).ok()).filter(|n| *n != 0);
            let endpoints = backends
                .get(&key)
                .into_iter()
                .flatten()
                .filter(|b| b.ready || b.serving)
                .map(|b| (b.ip, b.port))
                .collect();
            Some((key, UdpPort { fronts: fronts.clone(), port, node_port, endpoints }))
        })
        .collect()
}

/// Filters for the UDP flows that a change leaves pointing nowhere (as kube-proxy
/// clears them): a removed service port loses every flow to it; a removed endpoint
/// loses the flows DNAT'd to it.
fn stale_udp(old: &BTreeMap<String, UdpPort>, new: &BTreeMap<String, UdpPort>) -> Vec<UdpFlowFilter> {
    let mut out = Vec::new();
    for (name, o) in old {
        match new.get(name) {
            Some(n) if n.port == o.port && n.fronts == o.fronts && n.node_port == o.node_port => {
                for (ip, port) in o.endpoints.difference(&n.endpoints) {
                    for f in &o.fronts {
                        out.push(UdpFlowFilter::endpoint_of_service(*f, o.port, *ip, Some(*port)));
                    }
                    if let Some(np) = o.node_port {
                        out.push(UdpFlowFilter::endpoint_of_node_port(np, *ip, Some(*port)));
                    }
                }
            }
            _ => {
                for f in &o.fronts {
                    out.push(UdpFlowFilter::service(*f, o.port));
                }
                if let Some(np) = o.node_port {
                    out.push(UdpFlowFilter::node_port(np));
                }
            }
        }
    }
    out
}

impl Planner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Plans a batch: `changed` are the services to rebuild (`None`: gone). With `full`,
    /// `changed` must hold every service, and everything is rebuilt.
    pub fn plan(&mut self, node: &Input, changed: Vec<(Key, Option<OwnedService>)>, full: bool) -> Planned {
        let full = full || self.skeleton.is_none();
        let mut waiters_out = Vec::new();
        let mut changed: BTreeMap<Key, Option<OwnedService>> = changed.into_iter().collect();
        if full {
            for k in self.pieces.keys() {
                changed.entry((**k).clone()).or_insert(None);
            }
            self.claims.clear();
            self.shared.clear();
            self.counts.clear();
        } else {
            // What the changed services held is free again; services that waited for it
            // (rare: contested externalIPs / LoadBalancer IPs) claim it in the next batch.
            let mut waiters = BTreeSet::new();
            for key in changed.keys() {
                if let Some((name, old)) = self.pieces.get_key_value(key) {
                    let old = packed::unpack(&old.elements);
                    let freed = self.claims.release(name, &old);
                    waiters.extend(freed.into_iter().filter(|w| !changed.contains_key(&**w)));
                }
            }
            // The caller sends the waiters in the next batch (it holds their objects).
            waiters_out = waiters.into_iter().map(|w| (*w).clone()).collect();
        }
        // Gone services first, then the oldest: a contested key goes to the oldest claimant.
        let mut order: Vec<(Key, Option<OwnedService>)> = changed.into_iter().collect();
        order.sort_by(|(ka, a), (kb, b)| {
            let pa = a.as_ref().map(|s| s.service.precedence(ka));
            let pb = b.as_ref().map(|s| s.service.precedence(kb));
            pa.cmp(&pb).then_with(|| ka.cmp(kb))
        });

        let mut before_parts = Vec::new();
        let mut after_parts = Vec::new();
        let mut shared_gone = Vec::new();
        let mut shared_new = Vec::new();
        let mut stale = Vec::new();
        let mut scratch = Vec::with_capacity(512);
        for (key, svc) in order {
            // Decoded here when it came as text, and dropped once planned.
            let svc = svc.map(|o| (o.service.get(), o.backends));
            let new_udp = svc.as_ref().map(|(s, b)| udp_ports(s, b)).unwrap_or_default();
            let old = self.pieces.remove_entry(&key);
            if let Some((_, old)) = &old {
                if let Some(old_udp) = old.udp() {
                    stale.extend(stale_udp(old_udp, &new_udp));
                }
                if !full {
                    self.forget(old, &mut shared_gone);
                    before_parts.push(old.unpack(false));
                }
            }
            if let Some((service, backends)) = svc {
                let name = old.map_or_else(|| Arc::new(key), |(name, _)| name);
                let mut pieces = build_service(node, &ServiceInput { service: &service, backends });
                self.claims.claim(&name, &mut pieces);
                if !full {
                    after_parts.push(ServicePieces { shared: Vec::new(), ..pieces.clone() });
                }
                let kept = Kept::new(pieces, new_udp, &mut scratch);
                self.remember(&kept, &mut shared_new);
                self.pieces.insert(name, kept);
            }
        }
        let counts: BTreeSet<(IpFamily, u32)> = self.counts.keys().copied().collect();
        let skeleton = build_skeleton(node, &counts);
        let change = if full {
            Change::Full
        } else {
            let mut before = self.skeleton.take().unwrap_or_default();
            let mut after = skeleton.clone();
            // Shared elements go by their counts below, not with each service (the parts
            // hold none).
            for p in before_parts {
                p.merge_into(&mut before);
            }
            for p in after_parts {
                p.merge_into(&mut after);
            }
            // Shared elements: only their first addition and their last removal count.
            push_elements(&mut before, shared_gone.iter().flat_map(|e| packed::unpack(e)));
            push_elements(&mut after, shared_new.iter().flat_map(|e| packed::unpack(e)));
            Change::Partial { before: Box::new(before), after: Box::new(after) }
        };
        self.skeleton = Some(skeleton);
        Planned { change, stale_udp: stale, waiters: waiters_out }
    }

    /// Counts what `kept` uses; shared elements that became present go to `added`
    /// (packed alone).
    fn remember(&mut self, kept: &Kept, added: &mut Vec<Box<[u8]>>) {
        for c in kept.endpoint_counts() {
            *self.counts.entry(c).or_insert(0) += 1;
        }
        let mut buf = Vec::new();
        for (set, el) in packed::entries(&kept.shared) {
            packed::standalone_into(&mut buf, set, el);
            if let Some(n) = self.shared.get_mut(buf.as_slice()) {
                *n += 1;
            } else {
                let k: Box<[u8]> = buf.as_slice().into();
                added.push(k.clone());
                self.shared.insert(k, 1);
            }
        }
    }

    /// Uncounts what `kept` used; shared elements nobody uses any more go to `gone`.
    fn forget(&mut self, kept: &Kept, gone: &mut Vec<Box<[u8]>>) {
        for c in kept.endpoint_counts() {
            if let Some(n) = self.counts.get_mut(&c) {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(&c);
                }
            }
        }
        let mut buf = Vec::new();
        for (set, el) in packed::entries(&kept.shared) {
            packed::standalone_into(&mut buf, set, el);
            if let Some(n) = self.shared.get_mut(buf.as_slice()) {
                *n -= 1;
                if *n == 0 {
                    if let Some((k, _)) = self.shared.remove_entry(buf.as_slice()) {
                        gone.push(k);
                    }
                }
            }
        }
    }

    /// The fixed part of the table as last planned.
    pub fn skeleton(&self) -> Option<&Ruleset> {
        self.skeleton.as_ref()
    }

    /// Every service's objects, borrowed, for a full sync or a comparison with the kernel.
    /// The shared elements come last, once each, packed (sorted: the same order each time).
    pub fn parts(&self) -> (Vec<Part<'_>>, Vec<u8>) {
        let parts = self
            .pieces
            .values()
            .map(|p| Part { sets: p.sets(), chains: p.chains(), elements: &[], packed: &p.elements })
            .collect();
        let mut keys: Vec<&[u8]> = self.shared.keys().map(|k| &**k).collect();
        keys.sort_unstable_by(|a, b| crate::bytes::cmp(a, b));
        (parts, keys.concat())
    }

    /// The whole desired table as one value (`--dry-run`, tests).
    pub fn assemble(&self) -> Ruleset {
        let mut rs = self.skeleton.clone().unwrap_or_default();
        for p in self.pieces.values() {
            p.unpack(true).merge_into(&mut rs);
        }
        push_elements(&mut rs, packed::unpack(&self.parts().1));
        for (_, els) in &mut rs.elements {
            els.sort_by(|a, b| a.key.cmp(&b.key));
            els.dedup();
        }
        rs
    }

    /// `SERVICE: KEY in MAP is held by OTHER`, for every withheld element.
    pub fn conflicts(&self) -> Vec<String> {
        self.claims
            .conflicts()
            .flat_map(|(k, cs)| {
                cs.iter()
                    .map(move |c| format!("{}/{}: {}", k.0, k.1, c.describe(&format!("{}/{}", c.holder.0, c.holder.1))))
            })
            .collect()
    }
}

/// The whole desired table for `input`'s services, as the daemon would program it
/// (the same planner; `--dry-run`, the golden files and tests use it).
pub fn build(input: &Input) -> Ruleset {
    let node = Input { services: Vec::new(), ..input.clone() };
    let all = input
        .services
        .iter()
        .map(|s| {
            let key = Key::new(s.service.namespace(), s.service.name());
            let service = ServiceCopy::Typed(Arc::new(s.service.clone()));
            (key, Some(OwnedService { service, backends: s.backends.clone() }))
        })
        .collect();
    let mut p = Planner::new();
    p.plan(&node, all, true);
    p.assemble()
}

fn push_elements(rs: &mut Ruleset, els: impl IntoIterator<Item = (SetName, Element)>) {
    for (set, el) in els {
        match rs.elements.iter_mut().find(|(n, _)| *n == set) {
            Some((_, v)) => v.push(el),
            None => rs.elements.push((set.into_owned(), vec![el])),
        }
    }
}
