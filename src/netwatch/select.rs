//! Which local addresses NodePorts answer on: a pure function of the node's links,
//! addresses and default routes, the `nodeport_addresses` selectors and `node_ip`.
//!
//! Semantics follow the nodeport-addresses proposal (seed 004) plus interfaces:
//! a selector list is a union; a CIDR picks the local addresses inside it; the
//! all-addresses CIDRs never pick loopback unless `localhost` is also selected;
//! `default-route` picks the addresses of the interface(s) holding the default route.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use serde::Serialize;

use crate::config::AddrSelector;

/// One network interface as the kernel reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// Administratively up (IFF_UP). The kernel drops the local routes of a down
    /// interface's IPv4 addresses, so those addresses no longer answer.
    pub up: bool,
    /// Carrier/operational state; informative only: an address on a link without
    /// carrier is still local and still reachable through other interfaces.
    pub oper_up: bool,
}

/// One address of an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Addr {
    pub ifindex: u32,
    pub ip: IpAddr,
    pub prefix: u8,
    /// IPv6 duplicate address detection still running or failed: the kernel does not
    /// accept packets for it yet. A later RTM_NEWADDR clears it.
    pub tentative: bool,
    /// IFA_F_SECONDARY: not the interface's first address of its subnet.
    pub secondary: bool,
}

/// A default route (prefix length 0) of the main table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultRoute {
    pub v6: bool,
    pub metric: u32,
    /// Output interfaces: one, or several for a multipath route.
    pub ifindexes: Vec<u32>,
}

/// What the kernel told us, in the kernel's order (the order decides "first address").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub links: Vec<Link>,
    pub addrs: Vec<Addr>,
    pub default_routes: Vec<DefaultRoute>,
}

/// One address in the NodePort set and why it is there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Picked {
    pub ip: IpAddr,
    /// Interface name(s) holding the address.
    pub ifaces: Vec<String>,
    /// The selectors (as written in the config) that picked it.
    pub selectors: Vec<String>,
}

/// The NodePort address set and how it was derived. Serializes (camelCase) to what
/// `status` shows under `node`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeAddresses {
    /// Sorted, without duplicates: the elements of `nodeport-ips-v4`.
    pub v4: Vec<Ipv4Addr>,
    /// Sorted, without duplicates: the elements of `nodeport-ips-v6`.
    pub v6: Vec<Ipv6Addr>,
    /// Every address above with its interfaces and selectors, sorted by address.
    pub picked_by: Vec<Picked>,
    /// Selectors that currently match nothing (e.g. the WAN is down): not an error.
    pub unmatched: Vec<String>,
    /// The node's primary address per family: `node_ip` when configured, else the
    /// first address of the default-route interface.
    pub primary_v4: Option<Ipv4Addr>,
    pub primary_v6: Option<Ipv6Addr>,
}

impl NodeAddresses {
    /// IPv4 loopback NodePorts only work with `route_localnet` (the kernel otherwise
    /// refuses to route a 127/8 source or destination off the loopback interface).
    pub fn needs_route_localnet(&self) -> bool {
        self.v4.iter().any(|a| a.is_loopback())
    }

    pub fn all(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.v4.iter().map(|a| IpAddr::V4(*a)).chain(self.v6.iter().map(|a| IpAddr::V6(*a)))
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_loopback(),
        IpAddr::V6(a) => a.is_loopback(),
    }
}

fn is_v6_link_local(ip: IpAddr) -> bool {
    matches!(ip, IpAddr::V6(a) if (a.segments()[0] & 0xffc0) == 0xfe80)
}

/// A CIDR picks loopback addresses only when it lies inside the loopback range
/// itself (`127.0.0.0/8`, `127.0.0.1/32`, `::1/128`): `0.0.0.0/0` means "the node's
/// addresses", and exposing NodePorts on 127/8 needs `route_localnet`, a decision the
/// operator makes by writing `localhost` or a loopback CIDR.
fn cidr_within_loopback(net: &IpNet) -> bool {
    match net {
        IpNet::V4(n) => n.prefix_len() >= 8 && n.network().is_loopback(),
        IpNet::V6(n) => n.prefix_len() == 128 && n.network().is_loopback(),
    }
}

/// `iface:NAME`, or `iface:PREFIX*`.
pub fn iface_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(stem) => name.starts_with(stem),
        None => name == pattern,
    }
}

impl Snapshot {
    fn link(&self, index: u32) -> Option<&Link> {
        self.links.iter().find(|l| l.index == index)
    }

    /// Addresses that can carry NodePort traffic at all: on an up interface, DAD
    /// done, and not IPv6 link-local (those need a zone, which a set element lacks).
    fn usable_addrs(&self) -> impl Iterator<Item = (&Addr, &Link)> {
        self.addrs.iter().filter_map(move |a| {
            let l = self.link(a.ifindex)?;
            (l.up && !a.tentative && !is_v6_link_local(a.ip)).then_some((a, l))
        })
    }

    /// The interface(s) holding the default route of one family: the lowest-metric
    /// default route(s) whose output interfaces are up (higher metrics are backups
    /// that carry no traffic while the better route exists).
    pub fn default_route_ifaces(&self, v6: bool) -> Vec<u32> {
        let live = |r: &&DefaultRoute| {
            r.v6 == v6 && !r.ifindexes.is_empty() && r.ifindexes.iter().all(|i| self.link(*i).is_some_and(|l| l.up))
        };
        let Some(best) = self.default_routes.iter().filter(live).map(|r| r.metric).min() else {
            return Vec::new();
        };
        let mut out: Vec<u32> = Vec::new();
        for r in self.default_routes.iter().filter(live).filter(|r| r.metric == best) {
            for i in &r.ifindexes {
                if !out.contains(i) {
                    out.push(*i);
                }
            }
        }
        out
    }

    /// The first usable address of the family on the default-route interface(s),
    /// primary (non-secondary) addresses first, in the kernel's order.
    fn derived_primary(&self, v6: bool) -> Option<IpAddr> {
        let ifaces = self.default_route_ifaces(v6);
        let candidates = || {
            ifaces.iter().flat_map(|i| {
                self.usable_addrs().filter(move |(a, _)| a.ifindex == *i && a.ip.is_ipv6() == v6 && !is_loopback(a.ip))
            })
        };
        candidates().find(|(a, _)| !a.secondary).or_else(|| candidates().next()).map(|(a, _)| a.ip)
    }
}

/// Compute the NodePort address set.
pub fn select(snap: &Snapshot, selectors: &[AddrSelector], node_ips: &[IpAddr]) -> NodeAddresses {
    let node_ip = |v6: bool| node_ips.iter().copied().find(|i| i.is_ipv6() == v6);
    let primary = |v6: bool| node_ip(v6).or_else(|| snap.derived_primary(v6));
    let primary_ips = [primary(false), primary(true)];
    let dr = [snap.default_route_ifaces(false), snap.default_route_ifaces(true)];

    let mut picked: BTreeMap<IpAddr, (Vec<String>, Vec<String>)> = BTreeMap::new();
    let mut matched = vec![false; selectors.len()];
    for (a, l) in snap.usable_addrs() {
        for (si, sel) in selectors.iter().enumerate() {
            let hit = match sel {
                AddrSelector::Cidr(net) => net.contains(&a.ip) && (!is_loopback(a.ip) || cidr_within_loopback(net)),
                AddrSelector::DefaultRoute => dr[usize::from(a.ip.is_ipv6())].contains(&a.ifindex),
                AddrSelector::Primary => primary_ips[usize::from(a.ip.is_ipv6())] == Some(a.ip),
                AddrSelector::Localhost => is_loopback(a.ip),
                AddrSelector::Iface(pat) => iface_matches(pat, &l.name),
            };
            if hit {
                matched[si] = true;
                let (ifaces, sels) = picked.entry(a.ip).or_default();
                if !ifaces.contains(&l.name) {
                    ifaces.push(l.name.clone());
                }
                let s = sel.to_string();
                if !sels.contains(&s) {
                    sels.push(s);
                }
            }
        }
    }

    let mut out = NodeAddresses {
        primary_v4: match primary_ips[0] {
            Some(IpAddr::V4(a)) => Some(a),
            _ => None,
        },
        primary_v6: match primary_ips[1] {
            Some(IpAddr::V6(a)) => Some(a),
            _ => None,
        },
        unmatched: selectors.iter().zip(&matched).filter(|(_, m)| !**m).map(|(s, _)| s.to_string()).collect(),
        ..NodeAddresses::default()
    };
    for (ip, (ifaces, selectors)) in picked {
        match ip {
            IpAddr::V4(a) => out.v4.push(a),
            IpAddr::V6(a) => out.v6.push(a),
        }
        out.picked_by.push(Picked { ip, ifaces, selectors });
    }
    out
}

/// What changed between two sets, for the log:
/// `+198.18.5.2 (iface:br-lan) -198.18.5.1`. `None` when the sets are equal.
pub fn describe_change(old: &NodeAddresses, new: &NodeAddresses) -> Option<String> {
    let mut parts = Vec::new();
    for p in &new.picked_by {
        if !old.picked_by.iter().any(|o| o.ip == p.ip) {
            parts.push(format!("+{} ({})", p.ip, p.selectors.join(",")));
        }
    }
    for o in &old.picked_by {
        if !new.picked_by.iter().any(|p| p.ip == o.ip) {
            parts.push(format!("-{}", o.ip));
        }
    }
    (!parts.is_empty()).then(|| parts.join(" "))
}

impl fmt::Display for NodeAddresses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for p in &self.picked_by {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            write!(f, "{} ({} on {})", p.ip, p.selectors.join(","), p.ifaces.join(","))?;
        }
        if first {
            f.write_str("none")?;
        }
        if !self.unmatched.is_empty() {
            write!(f, "; matching nothing: {}", self.unmatched.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sels(list: &[&str]) -> Vec<AddrSelector> {
        list.iter().map(|s| AddrSelector::parse(s).unwrap()).collect()
    }

    fn link(index: u32, name: &str) -> Link {
        Link { index, name: name.into(), up: true, oper_up: true }
    }

    fn addr(ifindex: u32, cidr: &str) -> Addr {
        let net: IpNet = cidr.parse().unwrap();
        Addr { ifindex, ip: net.addr(), prefix: net.prefix_len(), tentative: false, secondary: false }
    }

    fn dr(v6: bool, metric: u32, ifs: &[u32]) -> DefaultRoute {
        DefaultRoute { v6, metric, ifindexes: ifs.to_vec() }
    }

    /// A typical OpenWrt router: loopback, LAN bridge, WAN with the default routes,
    /// a WireGuard tunnel and a guest network.
    fn router() -> Snapshot {
        Snapshot {
            links: vec![link(1, "lo"), link(2, "br-lan"), link(3, "wan"), link(4, "wg0"), link(5, "br-guest")],
            addrs: vec![
                addr(1, "127.0.0.1/8"),
                addr(1, "::1/128"),
                addr(2, "198.18.1.1/24"),
                addr(2, "fd00:1::1/64"),
                addr(2, "fe80::1/64"),
                addr(3, "198.19.7.20/24"),
                addr(3, "2001:db8:7::20/64"),
                addr(3, "fe80::20/64"),
                addr(4, "198.18.200.1/24"),
                addr(5, "198.18.2.1/24"),
            ],
            default_routes: vec![dr(false, 0, &[3]), dr(true, 1024, &[3])],
        }
    }

    fn ips(n: &NodeAddresses) -> Vec<String> {
        n.all().map(|i| i.to_string()).collect()
    }

    fn run(list: &[&str]) -> NodeAddresses {
        select(&router(), &sels(list), &[])
    }

    #[test]
    fn seed_all_v4_is_every_address_but_loopback() {
        let n = run(&["0.0.0.0/0"]);
        assert_eq!(ips(&n), ["198.18.1.1", "198.18.2.1", "198.18.200.1", "198.19.7.20"]);
        assert!(n.unmatched.is_empty());
        assert!(!n.needs_route_localnet());
    }

    #[test]
    fn default_config_is_every_address_but_loopback_and_link_local() {
        let n = run(&["0.0.0.0/0", "::/0"]);
        assert_eq!(ips(&n), ["198.18.1.1", "198.18.2.1", "198.18.200.1", "198.19.7.20", "2001:db8:7::20", "fd00:1::1"]);
    }

    #[test]
    fn seed_loopback_cidr_picks_only_loopback() {
        let n = run(&["127.0.0.0/8"]);
        assert_eq!(ips(&n), ["127.0.0.1"]);
        assert!(n.needs_route_localnet());
        let n = run(&["127.0.0.1/32"]);
        assert_eq!(ips(&n), ["127.0.0.1"]);
        let n = run(&["::1/128"]);
        assert_eq!(ips(&n), ["::1"]);
    }

    #[test]
    fn seed_default_route_picks_the_wan_addresses() {
        let n = run(&["default-route"]);
        assert_eq!(ips(&n), ["198.19.7.20", "2001:db8:7::20"]);
        assert_eq!(n.picked_by[0].ifaces, ["wan"]);
        assert_eq!(n.picked_by[0].selectors, ["default-route"]);
    }

    #[test]
    fn seed_loopback_host_and_default_route() {
        let n = run(&["127.0.0.1/32", "default-route"]);
        assert_eq!(ips(&n), ["127.0.0.1", "198.19.7.20", "2001:db8:7::20"]);
    }

    #[test]
    fn seed_loopback_and_private_range() {
        // 198.18.0.0/15 stands in for the seed's 192.168.0.0/16.
        let n = run(&["127.0.0.0/8", "198.18.0.0/15"]);
        assert_eq!(ips(&n), ["127.0.0.1", "198.18.1.1", "198.18.2.1", "198.18.200.1", "198.19.7.20"]);
        let n = run(&["127.0.0.0/8", "198.18.0.0/16"]);
        assert_eq!(ips(&n), ["127.0.0.1", "198.18.1.1", "198.18.2.1", "198.18.200.1"]);
    }

    #[test]
    fn all_addresses_with_localhost_includes_loopback() {
        let n = run(&["0.0.0.0/0", "::/0", "localhost"]);
        assert!(ips(&n).contains(&"127.0.0.1".to_string()));
        assert!(ips(&n).contains(&"::1".to_string()));
        let lo = n.picked_by.iter().find(|p| p.ip.to_string() == "127.0.0.1").unwrap();
        assert_eq!(lo.selectors, ["localhost"]);
        assert_eq!(lo.ifaces, ["lo"]);
    }

    #[test]
    fn localhost_alone() {
        let n = run(&["localhost"]);
        assert_eq!(ips(&n), ["127.0.0.1", "::1"]);
        assert!(n.needs_route_localnet());
    }

    #[test]
    fn a_node_address_on_lo_is_not_loopback() {
        let mut s = router();
        s.addrs.push(addr(1, "198.18.9.9/32"));
        let n = select(&s, &sels(&["0.0.0.0/0"]), &[]);
        assert!(ips(&n).contains(&"198.18.9.9".to_string()));
        assert!(!n.needs_route_localnet());
    }

    #[test]
    fn iface_exact_and_prefix() {
        assert_eq!(ips(&run(&["iface:br-lan"])), ["198.18.1.1", "fd00:1::1"]);
        assert_eq!(ips(&run(&["iface:br-*"])), ["198.18.1.1", "198.18.2.1", "fd00:1::1"]);
        assert_eq!(ips(&run(&["iface:wg*"])), ["198.18.200.1"]);
        let n = run(&["iface:pppoe-wan"]);
        assert!(n.v4.is_empty() && n.v6.is_empty());
        assert_eq!(n.unmatched, ["iface:pppoe-wan"]);
        assert!(iface_matches("br-lan", "br-lan"));
        assert!(!iface_matches("br-lan", "br-lan2"));
        assert!(iface_matches("*", "anything"));
    }

    #[test]
    fn v6_cidr_and_link_local_excluded() {
        assert_eq!(ips(&run(&["2001:db8::/32"])), ["2001:db8:7::20"]);
        let n = run(&["fe80::/10"]);
        assert!(n.v6.is_empty());
        assert_eq!(n.unmatched, ["fe80::/10"]);
    }

    #[test]
    fn primary_derived_from_default_route() {
        let n = run(&["primary"]);
        assert_eq!(ips(&n), ["198.19.7.20", "2001:db8:7::20"]);
        assert_eq!(n.primary_v4, Some("198.19.7.20".parse().unwrap()));
        assert_eq!(n.primary_v6, Some("2001:db8:7::20".parse().unwrap()));
    }

    #[test]
    fn primary_prefers_non_secondary_and_kernel_order() {
        let mut s = router();
        let mut sec = addr(3, "198.19.7.5/24");
        sec.secondary = true;
        s.addrs.insert(0, sec);
        s.addrs.push(addr(3, "198.19.8.1/24"));
        let n = select(&s, &sels(&["primary"]), &[]);
        assert_eq!(n.primary_v4, Some("198.19.7.20".parse().unwrap()));
    }

    #[test]
    fn primary_from_node_ip_per_family() {
        let node_ips = ["198.18.1.1".parse().unwrap()];
        let n = select(&router(), &sels(&["primary"]), &node_ips);
        // IPv4 from node_ip, IPv6 still derived from the default route.
        assert_eq!(ips(&n), ["198.18.1.1", "2001:db8:7::20"]);
        // A node_ip that is not (yet) local is reported but not put in the set.
        let node_ips = ["198.18.77.7".parse().unwrap()];
        let n = select(&router(), &sels(&["primary"]), &node_ips);
        assert_eq!(ips(&n), ["2001:db8:7::20"]);
        assert_eq!(n.primary_v4, Some("198.18.77.7".parse().unwrap()));
    }

    #[test]
    fn union_remembers_every_selector() {
        let n = run(&["198.19.0.0/16", "default-route", "primary", "iface:wan"]);
        let wan = n.picked_by.iter().find(|p| p.ip.to_string() == "198.19.7.20").unwrap();
        assert_eq!(wan.selectors, ["198.19.0.0/16", "default-route", "primary", "iface:wan"]);
        assert!(n.unmatched.is_empty());
    }

    #[test]
    fn wan_down_leaves_selectors_unmatched_not_an_error() {
        let mut s = router();
        s.links[2].up = false;
        let n = select(&s, &sels(&["default-route", "primary", "iface:br-lan"]), &[]);
        assert_eq!(ips(&n), ["198.18.1.1", "fd00:1::1"]);
        assert_eq!(n.unmatched, ["default-route", "primary"]);
        assert_eq!(n.primary_v4, None);
    }

    #[test]
    fn pppoe_gone_entirely() {
        let mut s = router();
        s.links.retain(|l| l.name != "wan");
        s.addrs.retain(|a| a.ifindex != 3);
        s.default_routes.clear();
        let n = select(&s, &sels(&["default-route"]), &[]);
        assert!(n.v4.is_empty() && n.v6.is_empty());
        assert_eq!(n.unmatched, ["default-route"]);
    }

    #[test]
    fn tentative_addresses_wait_for_dad() {
        let mut s = router();
        let mut t = addr(2, "fd00:1::2/64");
        t.tentative = true;
        s.addrs.push(t);
        assert!(!ips(&select(&s, &sels(&["::/0"]), &[])).contains(&"fd00:1::2".to_string()));
        s.addrs.last_mut().unwrap().tentative = false;
        assert!(ips(&select(&s, &sels(&["::/0"]), &[])).contains(&"fd00:1::2".to_string()));
    }

    #[test]
    fn default_route_lowest_metric_wins_and_multipath() {
        let mut s = router();
        // A backup LTE uplink with a worse metric carries no traffic.
        s.links.push(link(6, "wwan"));
        s.addrs.push(addr(6, "198.19.50.2/24"));
        s.default_routes.push(dr(false, 20, &[6]));
        assert_eq!(ips(&select(&s, &sels(&["default-route"]), &[]))[0], "198.19.7.20");
        // WAN goes down: the backup takes over.
        s.links[2].up = false;
        assert_eq!(ips(&select(&s, &sels(&["default-route"]), &[])), ["198.19.50.2"]);
        // Both up with an ECMP route: both interfaces hold the default route.
        s.links[2].up = true;
        s.default_routes = vec![dr(false, 0, &[3, 6])];
        assert_eq!(ips(&select(&s, &sels(&["default-route"]), &[])), ["198.19.7.20", "198.19.50.2"]);
        // Equal metrics on two routes (IPv6 siblings) count both as well.
        s.default_routes = vec![dr(false, 5, &[3]), dr(false, 5, &[6])];
        assert_eq!(ips(&select(&s, &sels(&["default-route"]), &[])).len(), 2);
    }

    /// The seed's DHCP story, with 198.18.0.0/16 as the configured CIDR (the seed's
    /// 172.10.0.0/16) and 198.19.3.4 as the address outside it (the seed's 192.168.3.4).
    #[test]
    fn seed_dhcp_story() {
        let cfg = sels(&["198.18.0.0/16"]);
        let mut s = Snapshot {
            links: vec![link(1, "lo"), link(2, "eth0"), link(3, "eth1")],
            addrs: vec![addr(1, "127.0.0.1/8"), addr(2, "198.18.1.2/24"), addr(3, "198.19.9.9/24")],
            default_routes: vec![dr(false, 0, &[3])],
        };
        let before = select(&s, &cfg, &[]);
        assert_eq!(ips(&before), ["198.18.1.2"]);

        // Renewal inside the range: the new address is in, the old one out.
        s.addrs[1] = addr(2, "198.18.2.100/24");
        let after = select(&s, &cfg, &[]);
        assert_eq!(ips(&after), ["198.18.2.100"]);
        assert_eq!(describe_change(&before, &after).unwrap(), "+198.18.2.100 (198.18.0.0/16) -198.18.1.2");

        // An address outside the range gets no NodePort ...
        s.addrs[1] = addr(2, "198.19.3.4/24");
        let outside = select(&s, &cfg, &[]);
        assert!(outside.v4.is_empty());
        assert_eq!(outside.unmatched, ["198.18.0.0/16"]);

        // ... unless default-route selects its interface, and only while it does.
        let cfg2 = sels(&["198.18.0.0/16", "default-route"]);
        assert_eq!(ips(&select(&s, &cfg2, &[])), ["198.19.9.9"]);
        s.default_routes = vec![dr(false, 0, &[2])];
        let moved = select(&s, &cfg2, &[]);
        assert_eq!(ips(&moved), ["198.19.3.4"]);
        assert_eq!(moved.picked_by[0].selectors, ["default-route"]);
    }

    #[test]
    fn describe_change_equal_is_none() {
        let a = run(&["0.0.0.0/0"]);
        assert_eq!(describe_change(&a, &a.clone()), None);
        let b = run(&["iface:wan"]);
        let d = describe_change(&a, &b).unwrap();
        assert!(d.contains("-198.18.1.1") && d.contains("+2001:db8:7::20 (iface:wan)"), "{d}");
    }

    #[test]
    fn display_names_selectors_interfaces_and_unmatched() {
        let n = run(&["iface:wan", "iface:nope"]);
        let s = n.to_string();
        assert!(s.contains("198.19.7.20 (iface:wan on wan)") && s.contains("matching nothing: iface:nope"), "{s}");
        assert_eq!(NodeAddresses::default().to_string(), "none");
    }

    #[test]
    fn serializes_for_status() {
        let v = serde_json::to_value(run(&["iface:wan", "iface:nope"])).unwrap();
        assert_eq!(v["v4"], serde_json::json!(["198.19.7.20"]));
        assert_eq!(v["pickedBy"][0]["selectors"], serde_json::json!(["iface:wan"]));
        assert_eq!(v["unmatched"], serde_json::json!(["iface:nope"]));
        assert_eq!(v["primaryV6"], serde_json::json!("2001:db8:7::20"));
    }

    #[test]
    fn same_address_on_two_interfaces_is_one_element() {
        let mut s = router();
        s.addrs.push(addr(1, "198.18.1.1/32"));
        let n = select(&s, &sels(&["0.0.0.0/0"]), &[]);
        assert_eq!(n.v4.iter().filter(|a| a.to_string() == "198.18.1.1").count(), 1);
        let p = n.picked_by.iter().find(|p| p.ip.to_string() == "198.18.1.1").unwrap();
        assert_eq!(p.ifaces, ["br-lan", "lo"]);
    }
}
