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

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub routes: Vec<PodRoute>,
    pub skipped: Vec<Skipped>,
}
