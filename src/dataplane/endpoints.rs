//! Which backends of a service port receive traffic, as kube-proxy decides it.

use std::net::IpAddr;

use crate::model::Backend;

use super::names::IpFamily;

/// An endpoint the data plane DNATs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    pub ip: IpAddr,
    pub port: u16,
}

/// The endpoints of one service port in one family, split by traffic policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Categorized {
    /// For `Cluster` traffic policy: every usable endpoint.
    pub cluster: Vec<Target>,
    /// For `Local` traffic policy: the usable endpoints on this node.
    pub local: Vec<Target>,
}

/// Ready endpoints; only when none is ready, the ones that are terminating but still
/// serving (so that connections drain instead of being refused during a rollout).
fn usable<'a>(backends: impl Iterator<Item = &'a Backend> + Clone, all_ready: bool) -> Vec<Target> {
    let ready: Vec<Target> =
        backends.clone().filter(|b| all_ready || b.ready).map(|b| Target { ip: b.ip, port: b.port }).collect();
    let mut out = if ready.is_empty() {
        backends.filter(|b| b.serving && b.terminating).map(|b| Target { ip: b.ip, port: b.port }).collect()
    } else {
        ready
    };
    // Order by address so the numgen slots (and the golden files) do not depend on the
    // order endpoints arrived in.
    out.sort();
    out.dedup();
    out
}

/// `publish_not_ready` is the service's `publishNotReadyAddresses`: every endpoint
/// counts as ready.
pub fn categorize(backends: &[Backend], family: IpFamily, node_name: &str, publish_not_ready: bool) -> Categorized {
    let fam = backends.iter().filter(|b| IpFamily::of(&b.ip) == family && b.port != 0);
    let cluster = usable(fam.clone(), publish_not_ready);
    let local = usable(fam.filter(|b| b.node_name.as_deref() == Some(node_name)), publish_not_ready);
    Categorized { cluster, local }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn be(ip: &str, ready: bool, serving: bool, terminating: bool, node: Option<&str>) -> Backend {
        Backend { ip: ip.parse().unwrap(), port: 80, ready, serving, terminating, node_name: node.map(String::from) }
    }

    #[test]
    fn ready_endpoints_win_over_terminating_ones() {
        let bs = [be("198.18.2.12", false, true, true, None), be("198.18.2.11", true, true, false, None)];
        let c = categorize(&bs, IpFamily::V4, "r1", false);
        assert_eq!(c.cluster, vec![Target { ip: "198.18.2.11".parse().unwrap(), port: 80 }]);
    }

    #[test]
    fn terminating_serving_endpoints_are_used_when_none_is_ready() {
        let bs = [
            be("198.18.2.12", false, true, true, None),
            be("198.18.2.13", false, false, true, None),
            be("198.18.2.14", false, false, false, None),
        ];
        let c = categorize(&bs, IpFamily::V4, "r1", false);
        assert_eq!(c.cluster, vec![Target { ip: "198.18.2.12".parse().unwrap(), port: 80 }]);
    }

    #[test]
    fn local_means_this_node_and_family_is_respected() {
        let bs = [
            be("198.18.2.11", true, true, false, Some("r1")),
            be("198.18.2.12", true, true, false, Some("r2")),
            be("2001:db8:2::11", true, true, false, Some("r1")),
        ];
        let c = categorize(&bs, IpFamily::V4, "r1", false);
        assert_eq!(c.cluster.len(), 2);
        assert_eq!(c.local, vec![Target { ip: "198.18.2.11".parse().unwrap(), port: 80 }]);
        let c6 = categorize(&bs, IpFamily::V6, "r1", false);
        assert_eq!(c6.cluster.len(), 1);
        assert_eq!(c6.local.len(), 1);
    }

    #[test]
    fn publish_not_ready_uses_everything() {
        let bs = [be("198.18.2.11", false, false, false, None)];
        assert_eq!(categorize(&bs, IpFamily::V4, "r1", true).cluster.len(), 1);
        assert!(categorize(&bs, IpFamily::V4, "r1", false).cluster.is_empty());
    }
}
