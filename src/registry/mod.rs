//! The registry: every stored Service, Endpoints and EndpointSlice plus the allocators
//! that back them, changed only through transactional apply/delete calls.
//!
//! Pure: no I/O, no clock. The caller passes a [`Stamp`] (time and a fresh uid) and
//! persists what the calls return. Every call either succeeds completely or leaves the
//! registry exactly as it was, allocations included.

mod backends;
mod meta;
mod prune;
mod service;
mod slot;
mod squeeze;
#[cfg(test)]
mod tests;
mod write;

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use serde::Serialize;

use crate::alloc::{AllocError, IpAllocator, PortAllocator, Rng, Usage};
use crate::config::PortRange;
use crate::model::{ApiError, EndpointSlice, Endpoints, EndpointsObject, Node, Service, ServiceType};
use slot::Slot;

pub use backends::PortBackends;
pub use prune::{ObjectRef, APPLIED_BY};
pub use squeeze::Squeezed;
pub use write::{Object, Prepared};

/// What the caller supplies for a write: the current time (RFC 3339) and a uid to
/// give a newly created object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    pub now: String,
    pub uid: String,
}

/// The outcome of an apply, as kubectl prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Created,
    Configured,
    /// The stored object did not change: the caller can skip the disk write.
    Unchanged,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Created => "created",
            Action::Configured => "configured",
            Action::Unchanged => "unchanged",
        })
    }
}

/// Every kind of stored object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ObjKind {
    Service,
    Endpoints,
    EndpointSlice,
    Node,
}

/// Which endpoint object kind a get/list/delete means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointsKind {
    Endpoints,
    EndpointSlice,
}

/// Allocator figures for `status` (CONTRACT.md): `nodePorts.{range,static,dynamic}` and
/// `serviceCIDRs[]`, each band `{first, last, used, free}` (`static` is null when the
/// range is too small to have one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryUsage {
    pub node_ports: NodePortUsage,
    #[serde(rename = "serviceCIDRs")]
    pub service_cidrs: Vec<CidrUsage>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodePortUsage {
    pub range: String,
    #[serde(flatten)]
    pub bands: Usage<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CidrUsage {
    pub cidr: String,
    #[serde(flatten)]
    pub bands: Usage<IpAddr>,
}

use crate::model::Key;

/// What one Service really holds in the allocators. Usually every value its stored
/// object carries; after a restore with conflicts, less (the values it lost are in
/// `problems`). Releases go by this record, never by the object, so a Service can
/// never free a value another Service owns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Held {
    ports: Few<u16>,
    ips: Few<IpAddr>,
}

/// A small sorted set: a Service holds a few ports and addresses, and a `BTreeSet`
/// allocates a whole 11-entry node for the first.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Few<T>(Vec<T>);

impl<T> Default for Few<T> {
    fn default() -> Self {
        Few(Vec::new())
    }
}

impl<T: Ord + Copy> Few<T> {
    fn insert(&mut self, v: T) -> bool {
        match self.0.binary_search(&v) {
            Ok(_) => false,
            Err(at) => {
                self.0.insert(at, v);
                true
            }
        }
    }
    fn contains(&self, v: &T) -> bool {
        self.0.binary_search(v).is_ok()
    }
    /// The values of `self` not in `other`, in order.
    fn difference<'a>(&'a self, other: &'a Few<T>) -> impl Iterator<Item = &'a T> + 'a {
        self.0.iter().filter(move |v| !other.contains(v))
    }
}

/// A stored Service and the values it holds.
#[derive(Debug, Clone)]
struct StoredService {
    slot: Slot<Service>,
    held: Held,
}

/// The kinds the registry packs ([`slot`]).
#[derive(Debug, Clone, Copy)]
enum Packable {
    Service,
    Slice,
}

/// Values taken during one request, released again if it fails.
#[derive(Debug, Default, PartialEq, Eq)]
struct Taken {
    ports: Vec<u16>,
    ips: Vec<IpAddr>,
}

#[derive(Debug, Clone)]
pub struct Registry {
    node_ports: PortAllocator,
    /// At most one per family, IPv4 first (as the config orders them): the first is
    /// the primary family for services that do not ask for one.
    cluster_ips: Vec<IpAllocator>,
    /// Typed while just written or restored (shared with the data plane worker's
    /// requests), then packed into text ([`slot`]; [`Registry::pack`]).
    /// With what each holds: one map, not two (a map's keys and nodes cost ~150 bytes
    /// per Service).
    services: BTreeMap<Key, StoredService>,
    endpoints: BTreeMap<Key, Endpoints>,
    slices: BTreeMap<Key, Slot<EndpointSlice>>,
    /// Services and slices stored typed since the last [`Registry::pack`] (a key may
    /// be listed twice, or be gone: packing checks).
    unpacked: Vec<(Packable, Key)>,
    /// Every Service and slice was restored typed and none is packed yet: the first
    /// [`Registry::pack`] walks the maps rather than a list of every key.
    all_unpacked: bool,
    /// (namespace, `kubernetes.io/service-name`) → slice names: finding a service's
    /// slices must not scan every slice (a sync would cost O(all) per service). The names
    /// are a sorted vector: most services have one slice, and a one-entry set costs a
    /// whole tree node.
    slices_of: BTreeMap<Key, Vec<String>>,
    /// Nodes by name (cluster-scoped), for pod routes.
    nodes: BTreeMap<String, Node>,
    problems: Vec<(Key, String)>,
    resource_version: u64,
    /// The first address of the primary service CIDR, held for `default/kubernetes`
    /// (docs/extensions.md): never handed to another Service, never released.
    reserved: Option<IpAddr>,
    /// A Service other than `default/kubernetes` that was stored holding the reserved
    /// address before the reservation existed: it keeps it until it lets it go.
    reserved_holder: Option<Key>,
    /// Reservations of prepared changes dropped without a commit, released at the next
    /// call that reads or changes the allocators ([`Registry::settle`]).
    returns: write::Returns,
}

impl Registry {
    pub fn new(node_port_range: PortRange, service_cidrs: &[IpNet]) -> Registry {
        Registry::build(node_port_range, service_cidrs, None)
    }

    /// Like [`Registry::new`] with a fixed random seed (tests, benchmarks).
    pub fn with_seed(node_port_range: PortRange, service_cidrs: &[IpNet], seed: u64) -> Registry {
        Registry::build(node_port_range, service_cidrs, Some(seed))
    }

    fn build(range: PortRange, cidrs: &[IpNet], seed: Option<u64>) -> Registry {
        let rng = |i: u64| match seed {
            Some(s) => Rng::seeded(s.wrapping_mul(0x2545_F491_4F6C_DD1D).wrapping_add(i)),
            None => Rng::from_entropy(),
        };
        let mut cidrs = cidrs.to_vec();
        cidrs.sort_by_key(|n| n.max_prefix_len());
        let mut cluster_ips: Vec<IpAllocator> =
            cidrs.iter().enumerate().map(|(i, n)| IpAllocator::new(*n, rng(i as u64 + 1))).collect();
        let reserved = cluster_ips.first_mut().and_then(|a| {
            let first = match a.net() {
                IpNet::V4(n) => IpAddr::V4(std::net::Ipv4Addr::from(u32::from(n.network()).wrapping_add(1))),
                IpNet::V6(n) => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(n.network()).wrapping_add(1))),
            };
            a.allocate(first).ok().map(|()| first)
        });
        Registry {
            node_ports: PortAllocator::new(range, rng(0)),
            cluster_ips,
            services: BTreeMap::new(),
            endpoints: BTreeMap::new(),
            slices: BTreeMap::new(),
            unpacked: Vec::new(),
            all_unpacked: false,
            slices_of: BTreeMap::new(),
            nodes: BTreeMap::new(),
            problems: Vec::new(),
            resource_version: 0,
            reserved,
            reserved_holder: None,
            returns: write::Returns::default(),
        }
    }

    /// What a Service holds, with the reserved address for `default/kubernetes`.
    fn held_by(&self, key: &Key) -> Held {
        let mut h = self.services.get(key).map(|s| s.held.clone()).unwrap_or_default();
        if let Some(ip) = self.reserved.filter(|_| is_kubernetes(key) && self.reserved_holder.is_none()) {
            h.ips.insert(ip);
        }
        h
    }

    /// Rebuilds the registry from stored objects (daemon start, config reload).
    ///
    /// Every Service is kept. Its values are claimed in namespace/name order; a value
    /// that is outside the configured ranges, or already claimed by an earlier
    /// Service, is reported (the returned list, and [`Registry::problems`]) and not
    /// held by this Service, so deleting it cannot free the other owner's value.
    pub fn restore(
        range: PortRange,
        cidrs: &[IpNet],
        services: Vec<Service>,
        endpoints: Vec<EndpointsObject>,
    ) -> (Registry, Vec<String>) {
        let services = services.into_iter().map(|s| (s, None)).collect();
        let endpoints = endpoints.into_iter().map(|e| (e, None)).collect();
        Registry::restore_inner(Registry::new(range, cidrs), services, endpoints)
    }

    /// [`Registry::restore`] of objects read from their state files, each with its text
    /// (the file's `object`) where known: the registry keeps that text once the objects
    /// are packed, with nothing to print ([`slot`]).
    pub fn restore_stored(
        range: PortRange,
        cidrs: &[IpNet],
        services: Vec<(Service, Option<Squeezed>)>,
        endpoints: Vec<(EndpointsObject, Option<Squeezed>)>,
    ) -> (Registry, Vec<String>) {
        Registry::restore_inner(Registry::new(range, cidrs), services, endpoints)
    }

    fn restore_inner(
        mut reg: Registry,
        services: Vec<(Service, Option<Squeezed>)>,
        endpoints: Vec<(EndpointsObject, Option<Squeezed>)>,
    ) -> (Registry, Vec<String>) {
        // Every object restored is typed: no list of their keys.
        reg.all_unpacked = true;
        let mut services = services;
        for (s, text) in &mut services {
            if s.metadata.namespace.is_none() {
                // The text would not read back as the object with its namespace filled in.
                *text = None;
            }
            meta::default_namespace(&mut s.metadata);
        }
        // The store reads them in file-name order, which is nearly always this order: a
        // sort would still move every Service around (std's small sort merges anyway).
        let by_key = |a: &Service, b: &Service| (a.namespace(), a.name()).cmp(&(b.namespace(), b.name()));
        if !services.is_sorted_by(|a, b| by_key(&a.0, &b.0) != std::cmp::Ordering::Greater) {
            services.sort_by(|a, b| by_key(&a.0, &b.0));
        }
        let mut port_owner: BTreeMap<u16, String> = BTreeMap::new();
        let mut ip_owner: BTreeMap<IpAddr, String> = BTreeMap::new();
        // The maps are filled from the last object to the first: the objects come (nearly)
        // in key order, and an insert of a key below every other compares with one key per
        // level of the tree, where one above every other compares with a whole node per
        // level. The last of equal keys stays, as with inserts in order.
        let mut stored = Vec::with_capacity(services.len());
        for (svc, text) in services {
            let key = key_of(&svc);
            let who = format!("{}/{}", key.0, key.1);
            let mut held = Held::default();
            for (field, v) in service::node_port_values(&svc) {
                if u16::try_from(v).is_ok_and(|p| held.ports.contains(&p)) {
                    continue;
                }
                let problem = match u16::try_from(v).map_err(|_| AllocError::OutOfRange) {
                    Ok(p) => match reg.node_ports.allocate(p) {
                        Ok(()) => {
                            held.ports.insert(p);
                            port_owner.insert(p, who.clone());
                            None
                        }
                        Err(AllocError::AlreadyAllocated) => Some(format!(
                            "service {who}: {field} {v} is already allocated to service {}",
                            port_owner.get(&p).map_or("?", String::as_str)
                        )),
                        Err(_) => Some(format!(
                            "service {who}: {field} {v} is not in the NodePort range {}",
                            reg.node_ports.range()
                        )),
                    },
                    Err(_) => Some(format!("service {who}: {field} {v} is not a port number")),
                };
                if let Some(p) = problem {
                    reg.problems.push((key.clone(), p));
                }
            }
            for (i, s) in svc.spec.cluster_ips.iter().enumerate() {
                if s == "None" {
                    continue;
                }
                let field = format!("spec.clusterIPs[{i}]");
                let problem = match s.parse::<IpAddr>() {
                    // The reserved address: `default/kubernetes`'s, or kept by the
                    // first other Service stored with it (it predates the reservation).
                    Ok(ip) if Some(ip) == reg.reserved && !ip_owner.contains_key(&ip) => {
                        if !is_kubernetes(&key) {
                            reg.reserved_holder = Some(key.clone());
                        }
                        held.ips.insert(ip);
                        ip_owner.insert(ip, who.clone());
                        None
                    }
                    Err(_) => Some(format!("service {who}: {field} {s} is not an IP address")),
                    Ok(ip) => match reg.cluster_ips.iter_mut().find(|a| a.is_ipv4() == ip.is_ipv4()) {
                        None => {
                            Some(format!("service {who}: {field} {ip}: no service CIDR of its family is configured"))
                        }
                        Some(a) => match a.allocate(ip) {
                            Ok(()) => {
                                held.ips.insert(ip);
                                ip_owner.insert(ip, who.clone());
                                None
                            }
                            Err(AllocError::AlreadyAllocated) => Some(format!(
                                "service {who}: {field} {ip} is already allocated to service {}",
                                ip_owner.get(&ip).map_or("?", String::as_str)
                            )),
                            Err(_) => {
                                Some(format!("service {who}: {field} {ip} is not in the service CIDR {}", a.net()))
                            }
                        },
                    },
                };
                if let Some(p) = problem {
                    reg.problems.push((key.clone(), p));
                }
            }
            let rv = svc.metadata.resource_version.as_deref().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            reg.resource_version = reg.resource_version.max(rv);
            stored.push((key, StoredService { slot: Slot::new(svc, text), held }));
        }
        for (key, s) in stored.into_iter().rev() {
            reg.services.entry(key).or_insert(s);
        }
        let mut slices = Vec::new();
        for (obj, text) in endpoints {
            match obj {
                EndpointsObject::Endpoints(mut e) => {
                    meta::default_namespace(&mut e.metadata);
                    reg.note_rv(&e.metadata);
                    reg.endpoints.insert(Key(e.metadata.ns().to_string(), e.metadata.name.clone()), e);
                }
                EndpointsObject::Slice(mut e) => {
                    let text = text.filter(|_| e.metadata.namespace.is_some());
                    meta::default_namespace(&mut e.metadata);
                    reg.note_rv(&e.metadata);
                    slices.push((Key(e.metadata.ns().to_string(), e.metadata.name.clone()), Slot::new(e, text)));
                }
            }
        }
        for (key, s) in slices.into_iter().rev() {
            if let Entry::Vacant(v) = reg.slices.entry(key) {
                let key = v.key().clone();
                let s = v.insert(s);
                if let Some(owner) = Self::slice_owner(&s.get()) {
                    add_name(&mut reg.slices_of, owner, key.1);
                }
            }
        }
        let list = reg.problems();
        (reg, list)
    }

    /// Adds the stored Nodes to a restored registry (they hold no allocations).
    pub fn restore_nodes(&mut self, nodes: Vec<Node>) {
        for mut n in nodes {
            n.normalize();
            self.note_rv(&n.metadata);
            self.nodes.insert(n.name().to_string(), n);
        }
    }

    fn slice_owner(s: &EndpointSlice) -> Option<Key> {
        let svc = s.metadata.labels.get(crate::model::SERVICE_NAME_LABEL)?;
        Some(Key::new(s.metadata.ns(), svc))
    }

    /// Stores a Service typed, to be packed later (`text`: its text, when known), with
    /// what it holds.
    fn put_service(&mut self, key: Key, svc: Service, text: Option<Squeezed>, held: Held) {
        if !self.all_unpacked {
            self.unpacked.push((Packable::Service, key.clone()));
        }
        self.services.insert(key, StoredService { slot: Slot::new(svc, text), held });
    }

    /// Packs up to `budget` of the objects stored typed since the last call into text,
    /// except those a sync request still shares. `true` when some are left to pack
    /// (call again, after letting others run: the event loop packs in steps).
    pub fn pack(&mut self, budget: usize) -> bool {
        if std::mem::take(&mut self.all_unpacked) {
            // One walk (after a start) packs those with their texts (O(1) each); the
            // others are listed, to be printed in steps.
            let services = self.services.iter_mut().map(|(k, s)| (Packable::Service, k, s.slot.pack_known()));
            let slices = self.slices.iter_mut().map(|(k, s)| (Packable::Slice, k, s.pack_known()));
            let left: Vec<(Packable, Key)> =
                services.chain(slices).filter(|(_, _, packed)| !packed).map(|(p, k, _)| (p, k.clone())).collect();
            self.unpacked.extend(left);
            return !self.unpacked.is_empty();
        }
        let mut shared = Vec::new();
        let mut done = 0;
        while done < budget {
            let Some((kind, key)) = self.unpacked.pop() else { break };
            let packed = match kind {
                Packable::Service => self.services.get_mut(&key).is_none_or(|s| s.slot.pack()),
                Packable::Slice => self.slices.get_mut(&key).is_none_or(Slot::pack),
            };
            if !packed {
                shared.push((kind, key));
            }
            done += 1;
        }
        let more = !self.unpacked.is_empty();
        if !more && shared.is_empty() {
            // After a start it listed every object: give that back.
            self.unpacked = Vec::new();
        }
        self.unpacked.extend(shared);
        more
    }

    /// Packs a Service and its EndpointSlices where their texts are known (O(them)): a
    /// rebuild that has read them calls this, so that a start never holds every object
    /// typed and every copy the rebuild makes at once. The rest waits for [`Registry::pack`].
    pub fn pack_read(&mut self, key: &Key) {
        if let Some(s) = self.services.get_mut(key) {
            s.slot.pack_known();
        }
        for slice in self.slices_of.get(key).into_iter().flatten() {
            if let Some(s) = self.slices.get_mut(&Key(key.0.clone(), slice.clone())) {
                s.pack_known();
            }
        }
    }

    /// How many objects wait to be packed (some may be gone or packed already).
    pub fn unpacked(&self) -> usize {
        match self.all_unpacked {
            true => self.services.len() + self.slices.len(),
            false => self.unpacked.len(),
        }
    }

    /// Store a slice, keeping `slices_of` in step.
    fn put_slice(&mut self, s: EndpointSlice, text: Option<Squeezed>) {
        let key = Key(s.metadata.ns().to_string(), s.metadata.name.clone());
        self.take_slice(&key);
        if let Some(owner) = Self::slice_owner(&s) {
            add_name(&mut self.slices_of, owner, key.1.clone());
        }
        if !self.all_unpacked {
            self.unpacked.push((Packable::Slice, key.clone()));
        }
        self.slices.insert(key, Slot::new(s, text));
    }

    fn take_slice(&mut self, key: &Key) -> Option<Arc<EndpointSlice>> {
        let s = self.slices.remove(key)?.get();
        if let Some(owner) = Self::slice_owner(&s) {
            if let Some(names) = self.slices_of.get_mut(&owner) {
                if let Ok(at) = names.binary_search(&key.1) {
                    names.remove(at);
                }
                if names.is_empty() {
                    self.slices_of.remove(&owner);
                }
            }
        }
        Some(s)
    }

    /// The EndpointSlices labelled for a service, by name.
    pub(crate) fn slices_for(&self, ns: &str, service: &str) -> Vec<Arc<EndpointSlice>> {
        let owner = Key::new(ns, service);
        self.slices_of
            .get(&owner)
            .into_iter()
            .flatten()
            .filter_map(|name| self.slices.get(&Key(ns.to_string(), name.clone())).map(Slot::get))
            .collect()
    }

    fn note_rv(&mut self, m: &crate::model::ObjectMeta) {
        let rv = m.resource_version.as_deref().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        self.resource_version = self.resource_version.max(rv);
    }

    fn next_rv(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    /// A registry with new ranges holding the same objects, or — when a stored value
    /// no longer fits (or would newly collide) — the reasons, naming service and value.
    /// The caller keeps the old registry (and config) on error.
    pub fn reconfigure(&self, range: PortRange, cidrs: &[IpNet]) -> Result<Registry, String> {
        let objs = self.endpoints_objects();
        let (mut reg, problems) = Registry::restore_inner(
            Registry::new(range, cidrs),
            self.services.values().map(|s| (Arc::unwrap_or_clone(s.slot.get()), None)).collect(),
            objs,
        );
        let known = self.problems();
        let new: Vec<&String> = problems.iter().filter(|p| !known.contains(p)).collect();
        if !new.is_empty() {
            return Err(new.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("; "));
        }
        reg.resource_version = reg.resource_version.max(self.resource_version);
        reg.nodes = self.nodes.clone();
        Ok(reg)
    }

    fn endpoints_objects(&self) -> Vec<(EndpointsObject, Option<Squeezed>)> {
        self.endpoints
            .values()
            .cloned()
            .map(EndpointsObject::Endpoints)
            .chain(self.slices.values().map(|e| EndpointsObject::Slice(Arc::unwrap_or_clone(e.get()))))
            .map(|o| (o, None))
            .collect()
    }

    /// Restore-time conflicts still standing (a Service's problem goes away once it
    /// is successfully re-applied or deleted).
    pub fn problems(&self) -> Vec<String> {
        self.problems.iter().map(|(_, p)| p.clone()).collect()
    }

    pub fn node_port_range(&self) -> PortRange {
        self.node_ports.range()
    }

    pub fn service_cidrs(&self) -> Vec<IpNet> {
        self.cluster_ips.iter().map(IpAllocator::net).collect()
    }

    pub fn usage(&self) -> RegistryUsage {
        RegistryUsage {
            node_ports: NodePortUsage { range: self.node_ports.range().to_string(), bands: self.node_ports.usage() },
            service_cidrs: self
                .cluster_ips
                .iter()
                .map(|a| CidrUsage { cidr: a.net().to_string(), bands: a.usage() })
                .collect(),
        }
    }

    /// The annotations of a stored object (a Node's namespace is ignored).
    pub fn stored_annotations(&self, kind: ObjKind, ns: &str, name: &str) -> Option<&crate::model::SmallMap> {
        let key = Key::new(ns, name);
        match kind {
            ObjKind::Service => self.services.get(&key).map(|s| s.slot.annotations()),
            ObjKind::Endpoints => self.endpoints.get(&key).map(|e| &e.metadata.annotations),
            ObjKind::EndpointSlice => self.slices.get(&key).map(Slot::annotations),
            ObjKind::Node => self.nodes.get(name).map(|n| &n.metadata.annotations),
        }
    }

    /// (namespace, name) of the stored objects of a kind whose annotations satisfy
    /// `pred` (Nodes: namespace "").
    pub fn keys_where(&self, kind: ObjKind, pred: impl Fn(&crate::model::SmallMap) -> bool) -> BTreeSet<Key> {
        match kind {
            ObjKind::Service => {
                self.services.iter().filter(|(_, s)| pred(s.slot.annotations())).map(|(k, _)| k.clone()).collect()
            }
            ObjKind::Endpoints => {
                self.endpoints.iter().filter(|(_, e)| pred(&e.metadata.annotations)).map(|(k, _)| k.clone()).collect()
            }
            ObjKind::EndpointSlice => {
                self.slices.iter().filter(|(_, e)| pred(e.annotations())).map(|(k, _)| k.clone()).collect()
            }
            ObjKind::Node => self
                .nodes
                .iter()
                .filter(|(_, n)| pred(&n.metadata.annotations))
                .map(|(k, _)| Key(String::new(), k.clone()))
                .collect(),
        }
    }

    pub fn service_count(&self) -> usize {
        self.services.len()
    }

    pub fn endpoints_count(&self) -> usize {
        self.endpoints.len()
    }

    pub fn endpoint_slice_count(&self) -> usize {
        self.slices.len()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    // ---- Nodes ----

    pub fn get_node(&self, name: &str) -> Result<Node, ApiError> {
        self.nodes.get(name).cloned().ok_or_else(|| ApiError::not_found("nodes", name))
    }

    /// Every Node, by name.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    /// Prepares a create or update of a Node (validated by the caller): nothing
    /// changes until [`Registry::commit`].
    pub fn prepare_node(&mut self, mut node: Node, stamp: &Stamp) -> Result<Prepared, ApiError> {
        self.settle();
        if node.metadata.name.is_empty() {
            return Err(ApiError::required("Node", "", "metadata.name"));
        }
        node.normalize();
        node.kind = Some("Node".into());
        node.api_version = Some("v1".into());
        let old = self.nodes.get(node.name());
        let action = meta::stamp(&mut node.metadata, old.map(|o| &o.metadata), stamp);
        if old == Some(&node) {
            return Ok(self.prepared(Action::Unchanged, None, Object::Node(node), Taken::default()));
        }
        node.metadata.resource_version = Some(self.next_rv());
        Ok(self.prepared(action, Some(write::Change::PutNode), Object::Node(node), Taken::default()))
    }

    /// Creates or updates a Node now (prepare and commit in one step; tests).
    pub fn apply_node(&mut self, node: Node, stamp: &Stamp) -> Result<(Action, Node), ApiError> {
        let p = self.prepare_node(node, stamp)?;
        let action = p.action();
        match self.commit(p) {
            Object::Node(n) => Ok((action, n)),
            _ => Err(ApiError::internal("a Node apply committed another kind")),
        }
    }

    // ---- Services ----

    pub fn get_service(&self, ns: &str, name: &str) -> Result<Service, ApiError> {
        self.service(ns, name).map(Arc::unwrap_or_clone).ok_or_else(|| ApiError::not_found("services", name))
    }

    /// A stored Service: shared when it is still typed (just written or restored; as
    /// the data plane worker's requests share it), else decoded.
    pub fn service(&self, ns: &str, name: &str) -> Option<Arc<Service>> {
        self.services.get(&Key::new(ns, name)).map(|s| s.slot.get())
    }

    /// Up to `n` Services after `after` (from the first when `None`), sorted by
    /// namespace and name, as [`Registry::service`] gives them, with the text of those
    /// that are packed (a copy costs less than the typed Service, for a reader that can
    /// decode it later): reading every Service in steps costs one search per step, not
    /// one per Service.
    pub fn services_after(&self, after: Option<&Key>, n: usize) -> Vec<(Key, Arc<Service>, Option<Squeezed>)> {
        use std::ops::Bound;
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.services
            .range((from, Bound::Unbounded))
            .take(n)
            .map(|(k, s)| (k.clone(), s.slot.get(), s.slot.text().cloned()))
            .collect()
    }

    /// The Services that carry a `healthCheckNodePort` (and, rarely, a few that do not),
    /// sorted by namespace and name; only these are decoded.
    pub fn services_with_health_port(&self) -> impl Iterator<Item = Arc<Service>> + '_ {
        self.services.values().filter(|s| s.slot.may_have_health_check_node_port()).map(|s| s.slot.get())
    }

    /// Sorted by namespace, then name; every namespace when `ns` is `None`.
    pub fn list_services(&self, ns: Option<&str>) -> Vec<Service> {
        self.services
            .iter()
            .filter(|(Key(n, _), _)| ns.is_none_or(|want| want == n))
            .map(|(_, s)| Arc::unwrap_or_clone(s.slot.get()))
            .collect()
    }

    /// Deletes a Service now (prepare and commit in one step, for callers that persist
    /// nothing: tests, benchmarks, fuzzers).
    pub fn delete_service(&mut self, ns: &str, name: &str) -> Result<Service, ApiError> {
        let p = self.prepare_delete_service(ns, name)?;
        match self.commit(p) {
            Object::Service(s) => Ok(s),
            _ => Err(ApiError::internal("a Service delete committed another kind")),
        }
    }

    /// Creates or updates a Service now (prepare and commit in one step, for callers
    /// that persist nothing: tests, benchmarks, fuzzers).
    pub fn apply_service(&mut self, svc: Service, stamp: &Stamp) -> Result<(Action, Service), ApiError> {
        let p = self.prepare_service(svc, stamp)?;
        let action = p.action();
        match self.commit(p) {
            Object::Service(s) => Ok((action, s)),
            _ => Err(ApiError::internal("a Service apply committed another kind")),
        }
    }

    /// Prepares a create or update of a Service with Kubernetes' allocation semantics
    /// (see the `service` module): the values it needs are reserved in the allocators,
    /// nothing else changes until [`Registry::commit`]. Dropping the prepared change
    /// releases the reservations. On error nothing changed.
    pub fn prepare_service(&mut self, mut svc: Service, stamp: &Stamp) -> Result<Prepared, ApiError> {
        self.settle();
        meta::default_namespace(&mut svc.metadata);
        if svc.metadata.name.is_empty() {
            return Err(ApiError::new(
                crate::model::Reason::Invalid,
                "Service \"\" is invalid: metadata.name: Required value: name or generateName is required",
            ));
        }
        svc.kind = Some("Service".into());
        svc.api_version = Some("v1".into());
        let key = key_of(&svc);
        // The one part of `status` a request may carry: the LoadBalancer ingress the
        // cluster's load-balancer controller assigned (this node answers on those IPs).
        let ingress = svc
            .status
            .as_ref()
            .map(|s| s.load_balancer.ingress.clone())
            .filter(|i| !i.is_empty() && svc.service_type() == ServiceType::LoadBalancer);
        let old = self.services.get(&key).map(|s| Arc::unwrap_or_clone(s.slot.get()));
        let prev = self.held_by(&key);
        let mut taken = Taken::default();
        let held = match self.plan_service(&mut svc, old.as_ref(), &prev, &mut taken) {
            Ok(h) => h,
            Err(e) => {
                self.rollback(taken);
                return Err(e);
            }
        };
        match &old {
            Some(o) => {
                svc.status = o.status.clone();
                svc.metadata.generation = match (o.spec == svc.spec, o.metadata.generation) {
                    (true, g) => g,
                    (false, g) => Some(g.unwrap_or(1) + 1),
                };
            }
            None => {
                svc.status = Some(Default::default());
                svc.metadata.generation = Some(1);
            }
        }
        if let Some(ingress) = ingress {
            svc.status.get_or_insert_with(Default::default).load_balancer.ingress = ingress;
        } else if svc.service_type() != ServiceType::LoadBalancer {
            if let Some(st) = &mut svc.status {
                st.load_balancer.ingress.clear();
            }
        }
        let action = meta::stamp(&mut svc.metadata, old.as_ref().map(|o| &o.metadata), stamp);
        if old.as_ref() == Some(&svc) {
            // Nothing new was needed, so nothing was taken; keep it that way.
            self.rollback(taken);
            return Ok(self.prepared(Action::Unchanged, None, Object::Service(svc), Taken::default()));
        }
        svc.metadata.resource_version = Some(self.next_rv());
        let change = write::Change::PutService { key, held };
        Ok(self.prepared(action, Some(change), Object::Service(svc), taken))
    }

    fn rollback(&mut self, taken: Taken) {
        for p in taken.ports {
            self.node_ports.release(p);
        }
        for ip in taken.ips {
            for a in &mut self.cluster_ips {
                a.release(ip);
            }
        }
    }

    /// Frees what `old` holds and `new` does not.
    fn release(&mut self, old: &Held, new: &Held) {
        for p in old.ports.difference(&new.ports) {
            self.node_ports.release(*p);
        }
        for ip in old.ips.difference(&new.ips) {
            if Some(*ip) == self.reserved {
                // Only its holder can let it go; it stays reserved.
                self.reserved_holder = None;
                continue;
            }
            for a in &mut self.cluster_ips {
                a.release(*ip);
            }
        }
    }

    // ---- Endpoints and EndpointSlices ----

    /// Creates or updates an Endpoints or EndpointSlice now (prepare and commit in one
    /// step, for callers that persist nothing: tests, benchmarks, fuzzers).
    pub fn apply_endpoints(
        &mut self,
        obj: EndpointsObject,
        stamp: &Stamp,
    ) -> Result<(Action, EndpointsObject), ApiError> {
        let p = self.prepare_endpoints(obj, stamp)?;
        let action = p.action();
        match self.commit(p) {
            Object::Endpoints(e) => Ok((action, e)),
            _ => Err(ApiError::internal("an endpoints apply committed another kind")),
        }
    }

    /// Prepares a create or update of an Endpoints or EndpointSlice: nothing changes
    /// until [`Registry::commit`].
    pub fn prepare_endpoints(&mut self, obj: EndpointsObject, stamp: &Stamp) -> Result<Prepared, ApiError> {
        self.settle();
        match obj {
            EndpointsObject::Endpoints(mut e) => {
                meta::default_namespace(&mut e.metadata);
                if e.metadata.name.is_empty() {
                    return Err(ApiError::required("Endpoints", "", "metadata.name"));
                }
                e.kind = Some("Endpoints".into());
                e.api_version = Some("v1".into());
                crate::model::strategy::default_endpoints(&mut e);
                let key = Key(e.metadata.ns().to_string(), e.metadata.name.clone());
                let old = self.endpoints.get(&key);
                let action = meta::stamp(&mut e.metadata, old.map(|o| &o.metadata), stamp);
                if old == Some(&e) {
                    let obj = Object::Endpoints(EndpointsObject::Endpoints(e));
                    return Ok(self.prepared(Action::Unchanged, None, obj, Taken::default()));
                }
                e.metadata.resource_version = Some(self.next_rv());
                let obj = Object::Endpoints(EndpointsObject::Endpoints(e));
                Ok(self.prepared(action, Some(write::Change::PutEndpoints), obj, Taken::default()))
            }
            EndpointsObject::Slice(mut e) => {
                meta::default_namespace(&mut e.metadata);
                if e.metadata.name.is_empty() {
                    return Err(ApiError::required("EndpointSlice", "", "metadata.name"));
                }
                e.kind = Some("EndpointSlice".into());
                e.api_version = Some("discovery.k8s.io/v1".into());
                crate::model::strategy::default_endpoint_slice(&mut e);
                let key = Key(e.metadata.ns().to_string(), e.metadata.name.clone());
                let old = self.slices.get(&key).map(Slot::get);
                let action = meta::stamp(&mut e.metadata, old.as_ref().map(|o| &o.metadata), stamp);
                if old.as_deref() == Some(&e) {
                    let obj = Object::Endpoints(EndpointsObject::Slice(e));
                    return Ok(self.prepared(Action::Unchanged, None, obj, Taken::default()));
                }
                e.metadata.resource_version = Some(self.next_rv());
                let obj = Object::Endpoints(EndpointsObject::Slice(e));
                Ok(self.prepared(action, Some(write::Change::PutEndpoints), obj, Taken::default()))
            }
        }
    }

    pub fn get_endpoints(&self, kind: EndpointsKind, ns: &str, name: &str) -> Result<EndpointsObject, ApiError> {
        let key = Key::new(ns, name);
        match kind {
            EndpointsKind::Endpoints => self
                .endpoints
                .get(&key)
                .cloned()
                .map(EndpointsObject::Endpoints)
                .ok_or_else(|| ApiError::not_found("endpoints", name)),
            EndpointsKind::EndpointSlice => self
                .slices
                .get(&key)
                .map(|e| EndpointsObject::Slice(Arc::unwrap_or_clone(e.get())))
                .ok_or_else(|| ApiError::not_found("endpointslices.discovery.k8s.io", name)),
        }
    }

    /// Both kinds when `kind` is `None` (Endpoints first), each sorted by namespace/name.
    pub fn list_endpoints(&self, kind: Option<EndpointsKind>, ns: Option<&str>) -> Vec<EndpointsObject> {
        let in_ns = |k: &Key| ns.is_none_or(|want| want == k.0);
        let mut out = Vec::new();
        if kind != Some(EndpointsKind::EndpointSlice) {
            out.extend(
                self.endpoints.iter().filter(|(k, _)| in_ns(k)).map(|(_, e)| EndpointsObject::Endpoints(e.clone())),
            );
        }
        if kind != Some(EndpointsKind::Endpoints) {
            out.extend(
                self.slices
                    .iter()
                    .filter(|(k, _)| in_ns(k))
                    .map(|(_, e)| EndpointsObject::Slice(Arc::unwrap_or_clone(e.get()))),
            );
        }
        out
    }

    /// Deletes an Endpoints or EndpointSlice now (prepare and commit in one step).
    pub fn delete_endpoints(&mut self, kind: EndpointsKind, ns: &str, name: &str) -> Result<EndpointsObject, ApiError> {
        let p = self.prepare_delete_endpoints(kind, ns, name)?;
        match self.commit(p) {
            Object::Endpoints(e) => Ok(e),
            _ => Err(ApiError::internal("an endpoints delete committed another kind")),
        }
    }
}

/// Adds `name` to `owner`'s sorted names in `slices_of`, once.
fn add_name(slices_of: &mut BTreeMap<Key, Vec<String>>, owner: Key, name: String) {
    let names = slices_of.entry(owner).or_default();
    if let Err(at) = names.binary_search(&name) {
        names.insert(at, name);
    }
}

fn is_kubernetes(key: &Key) -> bool {
    key.0 == "default" && key.1 == "kubernetes"
}

fn key_of(svc: &Service) -> Key {
    Key::new(svc.namespace(), svc.name())
}
