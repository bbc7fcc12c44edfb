//! Routes to the Nodes' pod networks (`pod_routes`, host-gw style): `podCIDR via
//! nodeIP` for every Node whose InternalIP of that family is on a subnet the router is
//! directly connected to.
//!
//! [`plan`] is pure: Nodes and the router's addresses in, the wanted routes and the
//! skipped nodes (with the reason) out. `kernel` reads and changes routes over
//! rtnetlink, only ever routes carrying our protocol number [`RTPROT_NODEPORTD`].

use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

/// The route protocol (`rtm_protocol`, `ip route ... proto 158`) of every route we
/// install. Not used by the kernel (0–4), iproute2's `rt_protos` (up to 192: bird,
/// zebra, babel, bgp, ospf, ...), Calico (80) or others we know of; routes of any other
/// protocol are never touched.
pub const RTPROT_NODEPORTD: u8 = 158;

/// One wanted route.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct PodRoute {
    pub cidr: IpNet,
    pub via: IpAddr,
    pub node: String,
}

/// A Node (or one of its pod CIDRs) that gets no route, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    pub node: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cidr: Option<IpNet>,
    pub reason: String,
}

/// What `status.podRoutes` shows: the routes in place and what was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub routes: Vec<Wanted>,
    pub skipped: Vec<Skipped>,
}

#[cfg(feature = "pod-routes")]
pub mod kernel;

use crate::model::Node;
use crate::netwatch::Snapshot;

/// A subnet the router is directly connected to: an address's prefix on a link that
/// is up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connected {
    pub net: IpNet,
    pub ifindex: u32,
    pub dev: String,
}

/// The connected subnets and the router's own addresses, from an rtnetlink snapshot.
pub fn connected(snap: &Snapshot) -> (Vec<Connected>, Vec<IpAddr>) {
    let mut nets = Vec::new();
    let mut own = Vec::new();
    for a in &snap.addrs {
        own.push(a.ip);
        let Some(link) = snap.links.iter().find(|l| l.index == a.ifindex) else { continue };
        if !link.up || !link.oper_up || a.tentative {
            continue;
        }
        if let Ok(net) = IpNet::new(a.ip, a.prefix) {
            nets.push(Connected { net: net.trunc(), ifindex: a.ifindex, dev: link.name.clone() });
        }
    }
    (nets, own)
}

/// One wanted route, with the interface its gateway is on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Wanted {
    #[serde(flatten)]
    pub route: PodRoute,
    pub dev: String,
    #[serde(skip)]
    pub ifindex: u32,
}

/// The routes the Nodes want: for each pod CIDR, via the Node's first InternalIP of
/// that family, when that address is on a connected subnet (the most specific one
/// decides the interface) and is not the router's own. A CIDR already claimed by an
/// earlier Node (by name) is skipped, as is one overlapping a connected subnet.
pub fn plan<'a>(nodes: impl IntoIterator<Item = &'a Node>, connected: &[Connected], own: &[IpAddr]) -> Vec<Decision> {
    let mut out: Vec<Decision> = Vec::new();
    for node in nodes {
        let name = node.name().to_string();
        let skip = |cidr: Option<IpNet>, reason: String| Decision::Skip(Skipped { node: name.clone(), cidr, reason });
        let nets = node.pod_nets();
        if nets.is_empty() {
            out.push(skip(None, "no spec.podCIDRs".into()));
            continue;
        }
        let ips = node.internal_ips();
        for cidr in nets {
            let family = if matches!(cidr, IpNet::V4(_)) { "IPv4" } else { "IPv6" };
            let Some(via) = ips.iter().copied().find(|ip| ip.is_ipv4() == matches!(cidr, IpNet::V4(_))) else {
                out.push(skip(Some(cidr), format!("no {family} InternalIP in status.addresses")));
                continue;
            };
            if own.contains(&via) {
                out.push(skip(Some(cidr), format!("InternalIP {via} is this router's own address")));
                continue;
            }
            let Some(link) = connected.iter().filter(|c| c.net.contains(&via)).max_by_key(|c| c.net.prefix_len())
            else {
                out.push(skip(Some(cidr), format!("InternalIP {via} is not on a directly connected subnet")));
                continue;
            };
            if let Some(c) =
                connected.iter().find(|c| c.net.contains(&cidr.network()) || cidr.contains(&c.net.network()))
            {
                out.push(skip(Some(cidr), format!("overlaps the connected subnet {} on {}", c.net, c.dev)));
                continue;
            }
            let taken = out.iter().find_map(|d| match d {
                Decision::Route(w)
                    if w.route.cidr.contains(&cidr.network()) || cidr.contains(&w.route.cidr.network()) =>
                {
                    Some(w.route.node.clone())
                }
                _ => None,
            });
            if let Some(other) = taken {
                out.push(skip(Some(cidr), format!("overlaps the pod CIDR of node {other}")));
                continue;
            }
            let route = PodRoute { cidr, via, node: name.clone() };
            out.push(Decision::Route(Wanted { route, dev: link.dev.clone(), ifindex: link.ifindex }));
        }
    }
    out
}

/// What [`plan`] decided for one pod CIDR (or a Node without any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Route(Wanted),
    Skip(Skipped),
}

/// A route of ours found in the kernel (main table, protocol [`RTPROT_NODEPORTD`]), or
/// another one to a pod CIDR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRoute {
    pub cidr: IpNet,
    pub via: Option<IpAddr>,
    pub ifindex: Option<u32>,
    pub protocol: u8,
    pub metric: u32,
}

/// What to do in the kernel to get from `found` (the main table's routes to the
/// destinations concerned) to `wanted`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// New routes, added exclusively (never replacing anything).
    pub add: Vec<Wanted>,
    /// Our route to the same CIDR exists with another gateway: replaced.
    pub replace: Vec<Wanted>,
    /// Our routes nobody wants any more.
    pub delete: Vec<KernelRoute>,
    /// Wanted routes left out because a route of another protocol goes to that CIDR.
    pub blocked: Vec<(Wanted, KernelRoute)>,
}

/// The difference, touching only routes of our protocol. A wanted CIDR that another
/// protocol's route already serves is never competed for.
pub fn diff(wanted: &[Wanted], found: &[KernelRoute]) -> Changes {
    let mut c = Changes::default();
    let ours = |r: &&KernelRoute| r.protocol == RTPROT_NODEPORTD;
    for w in wanted {
        if let Some(other) = found.iter().find(|r| !ours(r) && r.cidr == w.route.cidr) {
            c.blocked.push((w.clone(), other.clone()));
            continue;
        }
        match found.iter().filter(ours).find(|r| r.cidr == w.route.cidr) {
            Some(r) if r.via == Some(w.route.via) && r.ifindex == Some(w.ifindex) => {}
            Some(_) => c.replace.push(w.clone()),
            None => c.add.push(w.clone()),
        }
    }
    let keep = |r: &KernelRoute| {
        wanted.iter().any(|w| w.route.cidr == r.cidr) && !c.blocked.iter().any(|(w, _)| w.route.cidr == r.cidr)
    };
    c.delete = found.iter().filter(ours).filter(|r| !keep(r)).cloned().collect();
    c
}

#[cfg(test)]
mod tests;
