use super::*;
use crate::netwatch::{Addr, Link};
use serde_json::json;

fn node(name: &str, cidrs: &[&str], ips: &[&str]) -> Node {
    let addrs: Vec<_> = ips.iter().map(|ip| json!({"type": "InternalIP", "address": ip})).collect();
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "spec": {"podCIDRs": cidrs}, "status": {"addresses": addrs}}))
    .unwrap()
}

fn snap() -> Snapshot {
    let link = |index, name: &str, up| Link { index, name: name.into(), up, oper_up: up };
    let addr = |ifindex, ip: &str, prefix| Addr {
        ifindex,
        ip: ip.parse().unwrap(),
        prefix,
        tentative: false,
        secondary: false,
    };
    Snapshot {
        links: vec![link(1, "lo", true), link(2, "lan", true), link(3, "down0", false)],
        addrs: vec![
            addr(1, "127.0.0.1", 8),
            addr(2, "198.18.1.1", 24),
            addr(2, "2001:db8:1::1", 64),
            addr(3, "198.18.9.1", 24),
        ],
        default_routes: vec![],
    }
}

fn routes(d: &[Decision]) -> Vec<(String, String, String)> {
    d.iter()
        .filter_map(|d| match d {
            Decision::Route(w) => Some((w.route.node.clone(), w.route.cidr.to_string(), w.route.via.to_string())),
            Decision::Skip(_) => None,
        })
        .collect()
}

fn skipped(d: &[Decision]) -> Vec<String> {
    d.iter()
        .filter_map(|d| match d {
            Decision::Skip(s) => {
                Some(format!("{} {}: {}", s.node, s.cidr.map(|c| c.to_string()).unwrap_or_default(), s.reason))
            }
            Decision::Route(_) => None,
        })
        .collect()
}

#[test]
fn connected_nodes_get_a_route_per_family() {
    let (nets, own) = connected(&snap());
    let nodes = [node("n1", &["10.244.1.0/24", "fd00:244:1::/64"], &["198.18.1.2", "2001:db8:1::2"])];
    let d = plan(&nodes, &nets, &own);
    assert_eq!(
        routes(&d),
        [
            ("n1".into(), "10.244.1.0/24".into(), "198.18.1.2".into()),
            ("n1".into(), "fd00:244:1::/64".into(), "2001:db8:1::2".into())
        ]
    );
    let Decision::Route(w) = &d[0] else { panic!() };
    assert_eq!((w.ifindex, w.dev.as_str()), (2, "lan"));
}

#[test]
fn nodes_that_cannot_be_routed_are_skipped_with_the_reason() {
    let (nets, own) = connected(&snap());
    let nodes = [
        node("far", &["10.244.2.0/24"], &["198.19.0.2"]),
        node("on-a-down-link", &["10.244.3.0/24"], &["198.18.9.2"]),
        node("v4-only", &["10.244.4.0/24", "fd00:244:4::/64"], &["198.18.1.4"]),
        node("no-cidr", &[], &["198.18.1.5"]),
        node("me", &["10.244.6.0/24"], &["198.18.1.1"]),
        node("overlap-lan", &["198.18.0.0/16"], &["198.18.1.7"]),
        node("same-as-v4-only", &["10.244.4.0/25"], &["198.18.1.8"]),
    ];
    let d = plan(&nodes, &nets, &own);
    assert_eq!(routes(&d), [("v4-only".into(), "10.244.4.0/24".into(), "198.18.1.4".into())]);
    assert_eq!(
        skipped(&d),
        [
            "far 10.244.2.0/24: InternalIP 198.19.0.2 is not on a directly connected subnet",
            "on-a-down-link 10.244.3.0/24: InternalIP 198.18.9.2 is not on a directly connected subnet",
            "v4-only fd00:244:4::/64: no IPv6 InternalIP in status.addresses",
            "no-cidr : no spec.podCIDRs",
            "me 10.244.6.0/24: InternalIP 198.18.1.1 is this router's own address",
            "overlap-lan 198.18.0.0/16: overlaps the connected subnet 198.18.1.0/24 on lan",
            "same-as-v4-only 10.244.4.0/25: overlaps the pod CIDR of node v4-only",
        ]
    );
}

fn kr(cidr: &str, via: &str, ifindex: u32, protocol: u8) -> KernelRoute {
    KernelRoute { cidr: cidr.parse().unwrap(), via: via.parse().ok(), ifindex: Some(ifindex), protocol, metric: 0 }
}

fn wanted(cidr: &str, via: &str) -> Wanted {
    let route = PodRoute { cidr: cidr.parse().unwrap(), via: via.parse().unwrap(), node: "n".into() };
    Wanted { route, dev: "lan".into(), ifindex: 2 }
}

#[test]
fn diff_adds_replaces_and_deletes_only_our_routes() {
    let found = [
        kr("10.244.1.0/24", "198.18.1.2", 2, RTPROT_NODEPORTD), // kept
        kr("10.244.2.0/24", "198.18.1.3", 2, RTPROT_NODEPORTD), // node moved: replaced
        kr("10.244.3.0/24", "198.18.1.4", 2, RTPROT_NODEPORTD), // node gone: deleted
        kr("10.244.9.0/24", "198.18.1.9", 2, 4),                // the operator's: untouched
        kr("10.244.5.0/24", "198.18.1.50", 2, 4),               // the operator's, wanted by a node
    ];
    let want = [
        wanted("10.244.1.0/24", "198.18.1.2"),
        wanted("10.244.2.0/24", "198.18.1.33"),
        wanted("10.244.4.0/24", "198.18.1.5"),
        wanted("10.244.5.0/24", "198.18.1.6"),
    ];
    let c = diff(&want, &found);
    assert_eq!(c.add, [want[2].clone()]);
    assert_eq!(c.replace, [want[1].clone()]);
    assert_eq!(c.delete, [found[2].clone()]);
    assert_eq!(c.blocked, [(want[3].clone(), found[4].clone())]);
    // Ours to a CIDR that the operator now also routes: ours goes, theirs stays.
    let found = [kr("10.244.5.0/24", "198.18.1.6", 2, RTPROT_NODEPORTD), found[4].clone()];
    let c = diff(&want[3..], &found);
    assert_eq!(c.delete, [found[0].clone()]);
    assert!(c.add.is_empty() && c.replace.is_empty());
}

#[test]
fn nothing_wanted_removes_every_route_of_ours_and_nothing_else() {
    let found = [kr("10.244.1.0/24", "198.18.1.2", 2, RTPROT_NODEPORTD), kr("10.244.9.0/24", "198.18.1.9", 2, 186)];
    let c = diff(&[], &found);
    assert_eq!(c.delete, [found[0].clone()]);
}
