//! Registry behaviour, written the way the seeds and CONTRACT.md describe it.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::json;

use super::*;
use crate::model::{Reason, Service};
use slot::Slot;

fn range() -> PortRange {
    PortRange { first: 30000, last: 32767 }
}

fn v4() -> Vec<IpNet> {
    vec!["10.96.0.0/16".parse().unwrap()]
}

fn dual() -> Vec<IpNet> {
    vec!["10.96.0.0/16".parse().unwrap(), "fd00:10:96::/112".parse().unwrap()]
}

fn reg() -> Registry {
    Registry::with_seed(range(), &v4(), 1)
}

fn stamp() -> Stamp {
    Stamp { now: "2026-11-22T10:00:00Z".into(), uid: "uid-1".into() }
}

fn svc(v: serde_json::Value) -> Service {
    serde_json::from_value(v).unwrap()
}

fn np(name: &str, ports: serde_json::Value) -> Service {
    svc(json!({"metadata": {"name": name}, "spec": {"type": "NodePort", "ports": ports}}))
}

/// Addresses allocated in CIDR `i`, without the one reserved for `default/kubernetes`.
fn user_ips(r: &Registry, i: usize) -> Vec<IpAddr> {
    r.cluster_ips[i].allocated().into_iter().filter(|ip| Some(*ip) != r.reserved).collect()
}

fn node_ports(s: &Service) -> Vec<i64> {
    s.spec.ports.iter().filter_map(|p| p.node_port).collect()
}

fn minio() -> Service {
    np("minio", json!([{"name": "api", "nodePort": 30009, "port": 9000, "protocol": "TCP", "targetPort": 9000}]))
}

#[test]
fn seed_minio_static_nodeport_and_collision_wording() {
    let mut r = reg();
    let (a, s) = r.apply_service(minio(), &stamp()).unwrap();
    assert_eq!(a, Action::Created);
    assert_eq!(node_ports(&s), vec![30009]);
    let mut other = minio();
    other.metadata.name = "minio2".into();
    let e = r.apply_service(other, &stamp()).unwrap_err();
    assert_eq!(e.reason, Reason::AlreadyAllocated);
    assert_eq!(
        e.message,
        "Service \"minio2\" is invalid: spec.ports[0].nodePort: Invalid value: 30009: provided port is already allocated"
    );
    let e = r.apply_service(np("far", json!([{"port": 80, "nodePort": 40000}])), &stamp()).unwrap_err();
    assert_eq!(
        e.message,
        "Service \"far\" is invalid: spec.ports[0].nodePort: Invalid value: 40000: provided port is not in the valid range. The range of valid ports is 30000-32767"
    );
    assert_eq!(e.reason, Reason::Invalid);
}

#[test]
fn seed_kube_dns_static_cluster_ip_and_wording() {
    let mut r = reg();
    let dns = svc(json!({
        "metadata": {"name": "kube-dns", "namespace": "kube-system"},
        "spec": {"clusterIP": "10.96.0.10", "type": "ClusterIP", "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}]}
    }));
    let (_, s) = r.apply_service(dns.clone(), &stamp()).unwrap();
    assert_eq!(s.spec.cluster_ip.as_deref(), Some("10.96.0.10"));
    assert_eq!(s.spec.cluster_ips, vec!["10.96.0.10"]);
    assert_eq!(s.spec.ip_families, vec!["IPv4"]);
    assert_eq!(s.spec.ip_family_policy.as_deref(), Some("SingleStack"));
    assert!(node_ports(&s).is_empty());
    let mut dup = dns;
    dup.metadata.namespace = Some("other".into());
    let e = r.apply_service(dup.clone(), &stamp()).unwrap_err();
    assert_eq!(e.reason, Reason::AlreadyAllocated);
    assert_eq!(
        e.message,
        "Service \"kube-dns\" is invalid: spec.clusterIPs: Invalid value: [\"10.96.0.10\"]: failed to allocate IP 10.96.0.10: provided IP is already allocated"
    );
    dup.spec.cluster_ip = Some("10.97.0.10".into());
    let e = r.apply_service(dup, &stamp()).unwrap_err();
    assert_eq!(
        e.message,
        "Service \"kube-dns\" is invalid: spec.clusterIPs: Invalid value: [\"10.97.0.10\"]: failed to allocate IP 10.97.0.10: the provided network does not match the current range"
    );
}

#[test]
fn dynamic_allocations_come_from_the_upper_bands() {
    let mut r = reg();
    for i in 0..50 {
        let (_, s) = r.apply_service(np(&format!("s{i}"), json!([{"port": 80}])), &stamp()).unwrap();
        let p = node_ports(&s)[0];
        assert!(p >= 30086, "dynamic nodePort {p} in the static band");
        let ip: IpAddr = s.spec.cluster_ip.unwrap().parse().unwrap();
        assert!(ip > "10.96.1.0".parse::<IpAddr>().unwrap(), "dynamic clusterIP {ip} in the static band");
    }
    let u = r.usage();
    assert_eq!(u.node_ports.bands.dynamic.used, 50);
    assert_eq!(u.node_ports.bands.static_band.as_ref().unwrap().used, 0);
    assert_eq!(u.service_cidrs[0].bands.dynamic.used, 50);
}

#[test]
fn metadata_is_filled_and_kept() {
    let mut r = reg();
    let (_, s) = r.apply_service(np("web", json!([{"port": 80}])), &stamp()).unwrap();
    assert_eq!(s.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(s.metadata.uid.as_deref(), Some("uid-1"));
    assert_eq!(s.metadata.creation_timestamp.as_deref(), Some("2026-11-22T10:00:00Z"));
    assert_eq!(s.kind.as_deref(), Some("Service"));
    assert_eq!(s.api_version.as_deref(), Some("v1"));
    assert_eq!(s.spec.ports[0].protocol.as_deref(), Some("TCP"));
    let rv1 = s.metadata.resource_version.clone().unwrap();
    let later = Stamp { now: "2026-11-22T11:00:00Z".into(), uid: "uid-2".into() };
    // Same object again: unchanged, nothing moves.
    let (a, s2) = r.apply_service(np("web", json!([{"port": 80}])), &later).unwrap();
    assert_eq!(a, Action::Unchanged);
    assert_eq!(s2, s);
    // A change keeps uid, creationTimestamp and node port, bumps resourceVersion.
    let (a, s3) = r.apply_service(np("web", json!([{"port": 81}])), &later).unwrap();
    assert_eq!(a, Action::Configured);
    assert_eq!(a.to_string(), "configured");
    assert_eq!(s3.metadata.uid.as_deref(), Some("uid-1"));
    assert_eq!(s3.metadata.creation_timestamp, s.metadata.creation_timestamp);
    assert_ne!(s3.metadata.resource_version.unwrap(), rv1);
    assert_eq!(s3.spec.cluster_ip, s.spec.cluster_ip);
}

#[test]
fn reapply_without_nodeports_keeps_them_and_naming_one_moves_it() {
    let mut r = reg();
    let ports = json!([{"name": "http", "port": 80}, {"name": "https", "port": 443}]);
    let (_, s) = r.apply_service(np("web", ports.clone()), &stamp()).unwrap();
    let first = node_ports(&s);
    let (a, s2) = r.apply_service(np("web", ports), &stamp()).unwrap();
    assert_eq!(a, Action::Unchanged);
    assert_eq!(node_ports(&s2), first);
    // Reordered ports keep their node ports by name.
    let (_, s3) = r
        .apply_service(np("web", json!([{"name": "https", "port": 443}, {"name": "http", "port": 80}])), &stamp())
        .unwrap();
    assert_eq!(node_ports(&s3), vec![first[1], first[0]]);
    // Naming a new one moves it: the old is released, the new is held.
    let (_, s4) = r
        .apply_service(
            np("web", json!([{"name": "http", "port": 80, "nodePort": 30001}, {"name": "https", "port": 443}])),
            &stamp(),
        )
        .unwrap();
    assert_eq!(node_ports(&s4), vec![30001, first[1]]);
    let held: BTreeSet<u16> = r.node_ports.allocated().into_iter().collect();
    assert_eq!(held, BTreeSet::from([30001, u16::try_from(first[1]).unwrap()]));
    // The old port is free for someone else now.
    r.apply_service(np("other", json!([{"port": 1, "nodePort": first[0]}])), &stamp()).unwrap();
}

#[test]
fn unnamed_single_port_is_matched_by_name() {
    let mut r = reg();
    let (_, s) = r.apply_service(np("web", json!([{"port": 80}])), &stamp()).unwrap();
    let (_, s2) = r.apply_service(np("web", json!([{"port": 80, "targetPort": 8080}])), &stamp()).unwrap();
    assert_eq!(node_ports(&s2), node_ports(&s));
    // The API server matches ports by name (here the empty one): a new port number
    // keeps the nodePort external clients use.
    let (_, s3) = r.apply_service(np("web", json!([{"port": 8080}])), &stamp()).unwrap();
    assert_eq!(node_ports(&s3), node_ports(&s));
    assert_eq!(r.node_ports.allocated().len(), 1);
    // A renamed port is a new port.
    let (_, s4) = r.apply_service(np("web", json!([{"name": "http", "port": 8080}])), &stamp()).unwrap();
    assert_ne!(node_ports(&s4), node_ports(&s));
    assert_eq!(r.node_ports.allocated().len(), 1);
}

#[test]
fn same_port_number_different_protocols_share_one_nodeport() {
    let mut r = reg();
    let (_, s) = r
        .apply_service(
            np("dns", json!([{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}])),
            &stamp(),
        )
        .unwrap();
    let p = node_ports(&s);
    assert_eq!(p.len(), 2);
    assert_eq!(p[0], p[1]);
    assert_eq!(r.node_ports.allocated().len(), 1);
    // Static: the same value for both protocols is fine, twice for one protocol is not.
    r.apply_service(
        np("dns2", json!([{"name": "a", "port": 53, "protocol": "UDP", "nodePort": 30053}, {"name": "b", "port": 53, "protocol": "TCP", "nodePort": 30053}])),
        &stamp(),
    )
    .unwrap();
    let e = r
        .apply_service(
            np(
                "dns3",
                json!([{"name": "a", "port": 53, "nodePort": 30054}, {"name": "b", "port": 54, "nodePort": 30054}]),
            ),
            &stamp(),
        )
        .unwrap_err();
    // kube-apiserver 1.36 (its allocator refuses the second one):
    assert_eq!(
        e.message,
        "Service \"dns3\" is invalid: spec.ports[1].nodePort: Invalid value: 30054: provided port is already allocated"
    );
    assert!(!r.node_ports.is_allocated(30054), "the failed request leaked 30054");
}

#[test]
fn type_change_to_clusterip_releases_nodeports() {
    let mut r = reg();
    let (_, s) = r.apply_service(np("web", json!([{"port": 80}])), &stamp()).unwrap();
    let p = u16::try_from(node_ports(&s)[0]).unwrap();
    let mut c = s.clone();
    c.spec.type_ = Some("ClusterIP".into());
    // Still carrying the old nodePort (as `get -o json` prints it): dropped, not an error.
    let (_, s2) = r.apply_service(c, &stamp()).unwrap();
    assert!(node_ports(&s2).is_empty());
    assert!(!r.node_ports.is_allocated(p));
    assert_eq!(s2.spec.cluster_ip, s.spec.cluster_ip);
    // A new nodePort on a ClusterIP service is refused.
    let bad = svc(json!({"metadata": {"name": "x"}, "spec": {"ports": [{"port": 80, "nodePort": 30500}]}}));
    let e = r.apply_service(bad, &stamp()).unwrap_err();
    assert!(e.message.contains("spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"), "{e}");
    assert!(r.get_service("default", "x").is_err());
}

#[test]
fn external_name_is_stored_without_allocations() {
    let mut r = reg();
    let (_, s) = r.apply_service(np("web", json!([{"port": 80}])), &stamp()).unwrap();
    let mut e = s.clone();
    e.spec.type_ = Some("ExternalName".into());
    e.spec.external_name = Some("example.org".into());
    let (_, s2) = r.apply_service(e, &stamp()).unwrap();
    assert!(s2.spec.cluster_ip.is_none() && s2.spec.cluster_ips.is_empty());
    assert!(node_ports(&s2).is_empty());
    assert!(r.node_ports.allocated().is_empty());
    assert!(user_ips(&r, 0).is_empty());
    let fresh =
        svc(json!({"metadata": {"name": "ext"}, "spec": {"type": "ExternalName", "externalName": "example.org"}}));
    let (a, s3) = r.apply_service(fresh, &stamp()).unwrap();
    assert_eq!(a, Action::Created);
    assert!(s3.spec.cluster_ip.is_none());
    // Back to ClusterIP allocates again.
    let (_, s4) = r
        .apply_service(svc(json!({"metadata": {"name": "ext"}, "spec": {"ports": [{"port": 80}]}})), &stamp())
        .unwrap();
    assert!(s4.spec.cluster_ip.is_some());
}

#[test]
fn health_check_node_port_and_lb_node_port_opt_out() {
    let mut r = reg();
    let lb = svc(json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local",
        "ports": [{"port": 80}]}}));
    let (_, s) = r.apply_service(lb.clone(), &stamp()).unwrap();
    let hc = s.spec.health_check_node_port.unwrap();
    assert_ne!(hc, node_ports(&s)[0]);
    assert_eq!(r.node_ports.allocated().len(), 2);
    let (a, _) = r.apply_service(lb.clone(), &stamp()).unwrap();
    assert_eq!(a, Action::Unchanged);
    // Static health check port.
    let mut lb2 = lb.clone();
    lb2.metadata.name = "lb2".into();
    lb2.spec.health_check_node_port = Some(30010);
    let (_, s2) = r.apply_service(lb2, &stamp()).unwrap();
    assert_eq!(s2.spec.health_check_node_port, Some(30010));
    // Back to Cluster policy releases it.
    let mut c = s.clone();
    c.spec.external_traffic_policy = Some("Cluster".into());
    let (_, s3) = r.apply_service(c, &stamp()).unwrap();
    assert_eq!(s3.spec.health_check_node_port, None);
    assert!(!r.node_ports.is_allocated(u16::try_from(hc).unwrap()));
    // allocateLoadBalancerNodePorts: false: only named node ports.
    let no = svc(
        json!({"metadata": {"name": "nonp"}, "spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false,
        "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81, "nodePort": 30020}]}}),
    );
    let (_, s4) = r.apply_service(no, &stamp()).unwrap();
    assert_eq!(s4.spec.ports[0].node_port, None);
    assert_eq!(s4.spec.ports[1].node_port, Some(30020));
    // Turning allocation off in an update without node ports drops and frees them, as
    // the API server does; one the update names stays.
    let (_, lb3) =
        r.apply_service(np("lb3", json!([{"name": "a", "port": 80}, {"name": "b", "port": 81}])), &stamp()).unwrap();
    let mut off = lb3.clone();
    off.spec.type_ = Some("LoadBalancer".into());
    off.spec.allocate_load_balancer_node_ports = Some(false);
    let kept = off.spec.ports[1].node_port;
    off.spec.ports[0].node_port = None;
    let freed = u16::try_from(lb3.spec.ports[0].node_port.unwrap()).unwrap();
    let (_, s5) = r.apply_service(off, &stamp()).unwrap();
    assert_eq!(s5.spec.ports[0].node_port, None);
    assert_eq!(s5.spec.ports[1].node_port, kept);
    assert!(!r.node_ports.is_allocated(freed));
    assert!(r.node_ports.is_allocated(u16::try_from(kept.unwrap()).unwrap()));
}

#[test]
fn rollback_releases_what_the_failed_request_took() {
    let mut r = reg();
    r.apply_service(minio(), &stamp()).unwrap();
    let before_ports = r.node_ports.allocated();
    let before_ips = r.cluster_ips[0].allocated();
    // First port dynamic, second port's static nodePort is taken.
    let two = np("two", json!([{"name": "a", "port": 80}, {"name": "b", "port": 81, "nodePort": 30009}]));
    let e = r.apply_service(two, &stamp()).unwrap_err();
    assert_eq!(e.reason, Reason::AlreadyAllocated);
    assert_eq!(r.node_ports.allocated(), before_ports);
    assert_eq!(r.cluster_ips[0].allocated(), before_ips, "the clusterIP taken for 'two' leaked");
    assert!(r.get_service("default", "two").is_err());
    assert_eq!(r.service_count(), 1);
}

#[test]
fn failed_update_leaves_the_old_allocation() {
    let mut r = reg();
    let (_, web) =
        r.apply_service(np("web", json!([{"name": "a", "port": 80}, {"name": "b", "port": 81}])), &stamp()).unwrap();
    r.apply_service(minio(), &stamp()).unwrap();
    let ports = r.node_ports.allocated();
    let ips = r.cluster_ips[0].allocated();
    // Move port a, add port c (dynamic), and ask for a taken port on b.
    let upd = np(
        "web",
        json!([{"name": "a", "port": 80, "nodePort": 30100}, {"name": "b", "port": 81, "nodePort": 30009}, {"name": "c", "port": 82}]),
    );
    assert!(r.apply_service(upd, &stamp()).is_err());
    assert_eq!(r.node_ports.allocated(), ports);
    assert_eq!(r.cluster_ips[0].allocated(), ips);
    assert_eq!(r.get_service("default", "web").unwrap(), web);
    // And the old values are still released correctly later.
    r.delete_service("default", "web").unwrap();
    assert_eq!(r.node_ports.allocated(), vec![30009]);
}

#[test]
fn cluster_ip_is_immutable_but_may_be_omitted() {
    let mut r = reg();
    let (_, s) = r
        .apply_service(svc(json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}})), &stamp())
        .unwrap();
    let ip = s.spec.cluster_ip.clone().unwrap();
    let (a, s2) = r
        .apply_service(svc(json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}})), &stamp())
        .unwrap();
    assert_eq!(a, Action::Unchanged);
    assert_eq!(s2.spec.cluster_ip.as_deref(), Some(ip.as_str()));
    let e = r
        .apply_service(
            svc(json!({"metadata": {"name": "web"}, "spec": {"clusterIP": "10.96.0.99", "ports": [{"port": 80}]}})),
            &stamp(),
        )
        .unwrap_err();
    assert_eq!(
        e.message,
        "Service \"web\" is invalid: spec.clusterIPs[0]: Invalid value: [\"10.96.0.99\"]: may not change once set"
    );
    assert!(!r.cluster_ips[0].is_allocated("10.96.0.99".parse().unwrap()));
    // Headless cannot become non-headless either.
    r.apply_service(
        svc(json!({"metadata": {"name": "hl"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}})),
        &stamp(),
    )
    .unwrap();
    let e = r
        .apply_service(
            svc(json!({"metadata": {"name": "hl"}, "spec": {"clusterIP": "10.96.0.5", "ports": [{"port": 80}]}})),
            &stamp(),
        )
        .unwrap_err();
    assert!(e.message.contains("may not change once set"), "{e}");
}

#[test]
fn dual_stack_update_naming_only_the_primary_keeps_the_secondary() {
    let mut r = Registry::with_seed(range(), &dual(), 4);
    let (_, s) = r
        .apply_service(svc(json!({"metadata": {"name": "ds"}, "spec": {"ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]}})), &stamp())
        .unwrap();
    assert_eq!(s.spec.cluster_ips.len(), 2);
    for spec in [
        json!({"ports": [{"port": 81}]}),
        json!({"clusterIP": s.spec.cluster_ips[0], "ports": [{"port": 82}]}),
        json!({"clusterIP": s.spec.cluster_ips[0], "ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 83}]}),
    ] {
        let (a, s2) = r.apply_service(svc(json!({"metadata": {"name": "ds"}, "spec": spec})), &stamp()).unwrap();
        assert_eq!(a, Action::Configured);
        assert_eq!(s2.spec.cluster_ips, s.spec.cluster_ips);
        assert_eq!(s2.spec.ip_family_policy.as_deref(), Some("PreferDualStack"));
    }
    assert_eq!(r.cluster_ips[1].allocated().len(), 1);
}

#[test]
fn headless_gets_no_allocation() {
    let mut r = reg();
    let (_, s) = r
        .apply_service(
            svc(json!({"metadata": {"name": "hl"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}})),
            &stamp(),
        )
        .unwrap();
    assert_eq!(s.spec.cluster_ips, vec!["None"]);
    assert_eq!(s.spec.cluster_ip.as_deref(), Some("None"));
    assert!(user_ips(&r, 0).is_empty());
}

#[test]
fn dual_stack_policies() {
    let mut r = Registry::with_seed(range(), &dual(), 3);
    let base = |name: &str, extra: serde_json::Value| {
        let mut v = json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}});
        for (k, x) in extra.as_object().unwrap() {
            v["spec"][k] = x.clone();
        }
        svc(v)
    };
    let (_, single) = r.apply_service(base("single", json!({})), &stamp()).unwrap();
    assert_eq!(single.spec.ip_families, vec!["IPv4"]);
    assert_eq!(single.spec.cluster_ips.len(), 1);
    let (_, prefer) = r.apply_service(base("prefer", json!({"ipFamilyPolicy": "PreferDualStack"})), &stamp()).unwrap();
    assert_eq!(prefer.spec.ip_families, vec!["IPv4", "IPv6"]);
    let ips: Vec<IpAddr> = prefer.spec.cluster_ips.iter().map(|s| s.parse().unwrap()).collect();
    assert!(ips[0].is_ipv4() && ips[1].is_ipv6());
    let (_, v6) = r
        .apply_service(
            base("v6", json!({"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6", "IPv4"]})),
            &stamp(),
        )
        .unwrap();
    assert!(v6.spec.cluster_ip.unwrap().contains(':'));
    assert_eq!(v6.spec.ip_families, vec!["IPv6", "IPv4"]);
    // Two families without a policy: the API server defaults SingleStack and refuses.
    let e = r.apply_service(base("two", json!({"ipFamilies": ["IPv4", "IPv6"]})), &stamp()).unwrap_err();
    assert_eq!(
        e.message,
        "Service \"two\" is invalid: spec.ipFamilyPolicy: Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"
    );
    let e = r
        .apply_service(
            base("two", json!({"clusterIP": "10.96.0.21", "clusterIPs": ["10.96.0.21", "fd00:10:96::21"], "ipFamilies": ["IPv4", "IPv6"]})),
            &stamp(),
        )
        .unwrap_err();
    assert_eq!(
        e.message,
        "Service \"two\" is invalid: [spec.ipFamilyPolicy: Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified, spec.ipFamilyPolicy: Invalid value: \"SingleStack\": must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified]"
    );
    assert!(!r.cluster_ips[0].is_allocated("10.96.0.21".parse().unwrap()));
    // Upgrade single -> prefer keeps the first IP and adds one; downgrade drops it again.
    let (_, up) = r.apply_service(base("single", json!({"ipFamilyPolicy": "PreferDualStack"})), &stamp()).unwrap();
    assert_eq!(up.spec.cluster_ips[0], single.spec.cluster_ips[0]);
    assert_eq!(up.spec.cluster_ips.len(), 2);
    let second: IpAddr = up.spec.cluster_ips[1].parse().unwrap();
    let (_, down) = r.apply_service(base("single", json!({"ipFamilyPolicy": "SingleStack"})), &stamp()).unwrap();
    assert_eq!(down.spec.cluster_ips, single.spec.cluster_ips);
    assert!(!r.cluster_ips[1].is_allocated(second));
    // Static dual-stack request.
    let (_, st) = r
        .apply_service(
            base(
                "st",
                json!({"clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20", "fd00:10:96::20"],
                    "ipFamilyPolicy": "RequireDualStack"}),
            ),
            &stamp(),
        )
        .unwrap();
    assert_eq!(st.spec.cluster_ip.as_deref(), Some("10.96.0.20"));

    // One range only.
    let mut r4 = reg();
    let e = r4.apply_service(base("req", json!({"ipFamilyPolicy": "RequireDualStack"})), &stamp()).unwrap_err();
    assert_eq!(
        e.message,
        "Service \"req\" is invalid: spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services"
    );
    let (_, p4) = r4.apply_service(base("pref", json!({"ipFamilyPolicy": "PreferDualStack"})), &stamp()).unwrap();
    assert_eq!(p4.spec.ip_families, vec!["IPv4"]);
    let e = r4.apply_service(base("six", json!({"ipFamilies": ["IPv6"]})), &stamp()).unwrap_err();
    assert!(e.message.contains("spec.ipFamilies[0]: Invalid value: \"IPv6\": not configured on this cluster"), "{e}");
    assert!(user_ips(&r4, 0).len() == 1);
}

#[test]
fn delete_and_not_found_wording() {
    let mut r = reg();
    let (_, s) = r.apply_service(np("web", json!([{"port": 80}])), &stamp()).unwrap();
    let e = r.delete_service("default", "nope").unwrap_err();
    assert_eq!((e.reason, e.message.as_str()), (Reason::NotFound, "services \"nope\" not found"));
    assert_eq!(r.delete_service("default", "web").unwrap(), s);
    assert!(r.node_ports.allocated().is_empty());
    assert!(user_ips(&r, 0).is_empty());
    assert_eq!(r.get_service("default", "web").unwrap_err().message, "services \"web\" not found");
}

#[test]
fn list_is_sorted_and_filtered() {
    let mut r = reg();
    for (ns, n) in [("b", "z"), ("a", "y"), ("b", "a"), ("default", "m")] {
        let mut s = np(n, json!([{"port": 80}]));
        s.metadata.namespace = Some(ns.into());
        r.apply_service(s, &stamp()).unwrap();
    }
    let all: Vec<(String, String)> =
        r.list_services(None).iter().map(|s| (s.namespace().to_string(), s.name().to_string())).collect();
    assert_eq!(
        all,
        vec![
            ("a".into(), "y".into()),
            ("b".into(), "a".into()),
            ("b".into(), "z".into()),
            ("default".into(), "m".into())
        ]
    );
    assert_eq!(r.list_services(Some("b")).len(), 2);
}

#[test]
fn range_full_wording_and_rollback() {
    let mut r = Registry::with_seed(PortRange { first: 30000, last: 30001 }, &v4(), 1);
    r.apply_service(np("a", json!([{"port": 80}])), &stamp()).unwrap();
    r.apply_service(np("b", json!([{"port": 80}])), &stamp()).unwrap();
    let e = r.apply_service(np("c", json!([{"port": 80}])), &stamp()).unwrap_err();
    assert_eq!((e.reason, e.message.as_str()), (Reason::RangeFull, "failed to allocate a nodePort: range is full"));
    assert_eq!(user_ips(&r, 0).len(), 2);
}

#[test]
fn restore_reports_duplicates_and_out_of_range_and_keeps_objects() {
    let mut r = reg();
    let (_, a) = r.apply_service(np("a", json!([{"port": 80, "nodePort": 30500}])), &stamp()).unwrap();
    let (_, b) = r.apply_service(np("b", json!([{"port": 80}])), &stamp()).unwrap();
    let mut dup = b.clone();
    dup.metadata.name = "c".into();
    dup.spec.ports[0].node_port = Some(30500);
    let (r2, problems) = Registry::restore(range(), &v4(), vec![a.clone(), b.clone(), dup.clone()], vec![]);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("default/c") && problems[0].contains("30500") && problems[0].contains("default/a"));
    assert!(problems[1].contains("default/c") && problems[1].contains(b.spec.cluster_ip.as_deref().unwrap()));
    assert_eq!(r2.problems(), problems);
    assert_eq!(r2.service_count(), 3);
    // Deleting the loser frees nothing the winner holds.
    let mut r2 = r2;
    r2.delete_service("default", "c").unwrap();
    assert!(r2.node_ports.is_allocated(30500));
    assert!(r2.problems().is_empty());

    // A smaller range after a restart.
    let small = PortRange { first: 30000, last: 30100 };
    let (r3, problems) = Registry::restore(small, &v4(), vec![a.clone()], vec![]);
    assert_eq!(
        problems,
        vec!["service default/a: spec.ports[0].nodePort 30500 is not in the NodePort range 30000-30100"]
    );
    assert_eq!(r3.get_service("default", "a").unwrap(), a);
    // Reconfigure refuses the same change and names the value.
    let err = r.reconfigure(small, &v4()).unwrap_err();
    assert!(err.contains("default/a") && err.contains("30500"), "{err}");
    let ok = r.reconfigure(PortRange { first: 30000, last: 40000 }, &v4()).unwrap();
    assert_eq!(ok.service_count(), 2);
    assert!(ok.node_ports.is_allocated(30500));
}

#[test]
fn restore_gives_a_contested_value_to_the_first_by_name_whatever_the_input_order() {
    let mut r = reg();
    let (_, a) = r.apply_service(np("a", json!([{"port": 80, "nodePort": 30500}])), &stamp()).unwrap();
    let mut dup = a.clone();
    dup.metadata.name = "c".into();
    dup.spec.cluster_ip = None;
    dup.spec.cluster_ips.clear();
    let (_, b) = r.apply_service(np("b", json!([{"port": 80}])), &stamp()).unwrap();
    for input in [vec![a.clone(), b.clone(), dup.clone()], vec![dup.clone(), b.clone(), a.clone()]] {
        let (r2, problems) = Registry::restore(range(), &v4(), input, vec![]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("service default/c:") && problems[0].contains("default/a"), "{problems:?}");
        let names: Vec<String> = r2.list_services(None).iter().map(|s| s.name().to_string()).collect();
        assert_eq!(names, ["a", "b", "c"]);
    }
}

#[test]
fn restore_rebuilds_allocators_exactly() {
    let mut r = Registry::with_seed(range(), &dual(), 5);
    for i in 0..20 {
        let mut s = np(&format!("s{i}"), json!([{"port": 80}, ]));
        if i % 3 == 0 {
            s.spec.ip_family_policy = Some("PreferDualStack".into());
        }
        r.apply_service(s, &stamp()).unwrap();
    }
    let (r2, problems) = Registry::restore(range(), &dual(), r.list_services(None), vec![]);
    assert!(problems.is_empty());
    assert_eq!(r2.usage(), r.usage());
    assert_eq!(r2.node_ports.allocated(), r.node_ports.allocated());
    let held = |r: &Registry| r.services.iter().map(|(k, s)| (k.clone(), s.held.clone())).collect::<Vec<_>>();
    assert_eq!(held(&r2), held(&r));
    // resourceVersion keeps counting upward.
    let mut r2 = r2;
    let (_, s) = r2.apply_service(np("new", json!([{"port": 80}])), &stamp()).unwrap();
    assert_eq!(s.metadata.resource_version.as_deref(), Some("21"));
}

#[test]
fn usage_json_shape() {
    let r = reg();
    let v = serde_json::to_value(r.usage()).unwrap();
    assert_eq!(v["nodePorts"]["range"], "30000-32767");
    assert_eq!(v["nodePorts"]["static"], json!({"first": 30000, "last": 30085, "used": 0, "free": 86}));
    assert_eq!(v["nodePorts"]["dynamic"], json!({"first": 30086, "last": 32767, "used": 0, "free": 2682}));
    assert_eq!(v["serviceCIDRs"][0]["cidr"], "10.96.0.0/16");
    assert_eq!(v["serviceCIDRs"][0]["static"]["last"], "10.96.1.0");
    assert_eq!(v["serviceCIDRs"][0]["dynamic"]["free"], 65278);
}

#[test]
fn reapplying_the_stored_object_is_unchanged() {
    // What `nodeportctl get svc -o json` prints, applied again, must not move anything.
    let mut r = Registry::with_seed(range(), &dual(), 9);
    let objs = [
        np("web", json!([{"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}])),
        svc(
            json!({"metadata": {"name": "ds"}, "spec": {"ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]}}),
        ),
        svc(
            json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [{"port": 80}]}}),
        ),
        svc(json!({"metadata": {"name": "hl"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}})),
        svc(json!({"metadata": {"name": "ext"}, "spec": {"type": "ExternalName", "externalName": "example.org"}})),
    ];
    for o in objs {
        let (_, stored) = r.apply_service(o, &stamp()).unwrap();
        let usage = r.usage();
        let (a, again) = r.apply_service(stored.clone(), &stamp()).unwrap();
        assert_eq!(a, Action::Unchanged, "{}", stored.name());
        assert_eq!(again, stored);
        assert_eq!(r.usage(), usage);
    }
}

#[test]
fn type_change_nodeport_to_loadbalancer_keeps_ports_and_bumps_generation() {
    let mut r = reg();
    let (_, s) = r.apply_service(np("web", json!([{"port": 80}])), &stamp()).unwrap();
    assert_eq!(s.metadata.generation, Some(1));
    let mut lb = np("web", json!([{"port": 80}]));
    lb.spec.type_ = Some("LoadBalancer".into());
    let (a, s2) = r.apply_service(lb, &stamp()).unwrap();
    assert_eq!(a, Action::Configured);
    assert_eq!(node_ports(&s2), node_ports(&s));
    assert_eq!(s2.metadata.generation, Some(2));
    assert_eq!(r.node_ports.allocated().len(), 1);
}

#[test]
fn restore_keeps_endpoints_and_backends() {
    let mut r = reg();
    let (_, s) = r.apply_service(np("web", json!([{"port": 80}])), &stamp()).unwrap();
    let (_, e) = r
        .apply_endpoints(
            slice(
                "web-1",
                "web",
                json!({"addressType": "IPv4", "ports": [{"port": 8080}], "endpoints": [{"addresses": ["198.18.0.1"]}]}),
            ),
            &stamp(),
        )
        .unwrap();
    let (r2, problems) = Registry::restore(range(), &v4(), vec![s.clone()], vec![e]);
    assert!(problems.is_empty());
    assert_eq!(r2.backends(&s), r.backends(&s));
    assert_eq!(r2.backends(&s)[0].backends.len(), 1);
    assert_eq!(r2.endpoint_slice_count(), 1);
}

// ---- endpoints ----

fn slice(name: &str, svc_name: &str, v: serde_json::Value) -> EndpointsObject {
    let mut base = json!({"metadata": {"name": name, "labels": {"kubernetes.io/service-name": svc_name}}});
    for (k, x) in v.as_object().unwrap() {
        base[k] = x.clone();
    }
    EndpointsObject::Slice(serde_json::from_value(base).unwrap())
}

#[test]
fn endpoints_apply_get_list_delete() {
    let mut r = reg();
    let ep: Endpoints = serde_json::from_value(json!({"metadata": {"name": "web"}, "subsets": [
        {"addresses": [{"ip": "198.18.0.10"}], "ports": [{"port": 8080}]}]}))
    .unwrap();
    let (a, stored) = r.apply_endpoints(EndpointsObject::Endpoints(ep.clone()), &stamp()).unwrap();
    assert_eq!(a, Action::Created);
    let EndpointsObject::Endpoints(stored) = stored else { panic!("kind changed") };
    assert_eq!(stored.kind.as_deref(), Some("Endpoints"));
    let (a, _) = r.apply_endpoints(EndpointsObject::Endpoints(ep), &stamp()).unwrap();
    assert_eq!(a, Action::Unchanged);
    r.apply_endpoints(slice("web-abc", "web", json!({"addressType": "IPv4", "endpoints": [], "ports": []})), &stamp())
        .unwrap();
    assert_eq!(r.list_endpoints(None, Some("default")).len(), 2);
    assert_eq!(r.list_endpoints(Some(EndpointsKind::EndpointSlice), None).len(), 1);
    assert!(r.get_endpoints(EndpointsKind::Endpoints, "default", "web").is_ok());
    let e = r.delete_endpoints(EndpointsKind::EndpointSlice, "default", "nope").unwrap_err();
    assert_eq!(e.message, "endpointslices.discovery.k8s.io \"nope\" not found");
    r.delete_endpoints(EndpointsKind::Endpoints, "default", "web").unwrap();
    assert_eq!(
        r.get_endpoints(EndpointsKind::Endpoints, "default", "web").unwrap_err().message,
        "endpoints \"web\" not found"
    );
}

#[test]
fn endpoint_ports_are_stored_with_the_api_servers_defaults() {
    // kube-apiserver 1.36 stores `protocol: TCP` on Endpoints ports, and `protocol: TCP`
    // and `name: ""` on EndpointSlice ports, when the request leaves them out.
    let mut r = reg();
    let ep: Endpoints = serde_json::from_value(json!({"metadata": {"name": "web"}, "subsets": [
        {"addresses": [{"ip": "198.18.0.10"}], "ports": [{"port": 8080}, {"port": 53, "protocol": "UDP"}]}]}))
    .unwrap();
    let (_, stored) = r.apply_endpoints(EndpointsObject::Endpoints(ep.clone()), &stamp()).unwrap();
    let EndpointsObject::Endpoints(stored) = stored else { panic!("kind changed") };
    assert_eq!(
        serde_json::to_value(&stored).unwrap()["subsets"][0]["ports"],
        json!([{"port": 8080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}])
    );
    let (a, _) = r.apply_endpoints(EndpointsObject::Endpoints(ep), &stamp()).unwrap();
    assert_eq!(a, Action::Unchanged);
    let es = slice("web-abc", "web", json!({"addressType": "IPv4", "endpoints": [], "ports": [{"port": 80}]}));
    let (_, stored) = r.apply_endpoints(es, &stamp()).unwrap();
    let EndpointsObject::Slice(stored) = stored else { panic!("kind changed") };
    assert_eq!(serde_json::to_value(&stored).unwrap()["ports"], json!([{"name": "", "port": 80, "protocol": "TCP"}]));
}

#[test]
fn external_name_is_served_without_internal_traffic_policy() {
    // The API server drops it when it reads an ExternalName Service back, also after a
    // ClusterIP -> ExternalName round trip that carried the defaulted value.
    let mut r = reg();
    let (_, s) =
        r.apply_service(svc(json!({"metadata": {"name": "db"}, "spec": {"ports": [{"port": 80}]}})), &stamp()).unwrap();
    assert_eq!(s.spec.internal_traffic_policy.as_deref(), Some("Cluster"));
    let mut ext = s.clone();
    ext.spec.type_ = Some("ExternalName".into());
    ext.spec.external_name = Some("db.example.com".into());
    let (_, ext) = r.apply_service(ext, &stamp()).unwrap();
    assert_eq!(ext.spec.internal_traffic_policy, None);
    let bad = svc(json!({"metadata": {"name": "x"}, "spec": {"type": "ExternalName", "externalName": "db.example.com",
        "internalTrafficPolicy": "Bogus"}}));
    assert_eq!(
        r.apply_service(bad, &stamp()).unwrap_err().message,
        "Service \"x\" is invalid: spec.internalTrafficPolicy: Unsupported value: \"Bogus\": supported values: \"Cluster\", \"Local\""
    );
}

#[test]
fn backends_from_endpoints_by_port_name() {
    let mut r = reg();
    let (_, s) = r
        .apply_service(svc(json!({"metadata": {"name": "web"}, "spec": {"ports": [
            {"name": "http", "port": 80, "targetPort": "web"}, {"name": "metrics", "port": 9100, "targetPort": 9100}]}})), &stamp())
        .unwrap();
    let ep: Endpoints = serde_json::from_value(json!({"metadata": {"name": "web"}, "subsets": [
        {"addresses": [{"ip": "198.18.0.10", "nodeName": "n1"}], "notReadyAddresses": [{"ip": "198.18.0.11"}],
         "ports": [{"name": "http", "port": 8080}, {"name": "metrics"}]}]}))
    .unwrap();
    r.apply_endpoints(EndpointsObject::Endpoints(ep), &stamp()).unwrap();
    let b = r.backends(&s);
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].port, 80);
    let got: Vec<(String, u16, bool)> = b[0].backends.iter().map(|x| (x.ip.to_string(), x.port, x.ready)).collect();
    assert_eq!(got, vec![("198.18.0.10".into(), 8080, true), ("198.18.0.11".into(), 8080, false)]);
    assert_eq!(b[0].backends[0].node_name.as_deref(), Some("n1"));
    // The endpoint port has no number: numeric targetPort is the fallback.
    assert!(b[1].backends.iter().all(|x| x.port == 9100));
    assert_eq!(b[1].backends.len(), 2);
}

#[test]
fn backends_prefer_slices_and_filter_families() {
    let mut r = reg();
    let (_, s) = r
        .apply_service(svc(json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}})), &stamp())
        .unwrap();
    let ep: Endpoints = serde_json::from_value(json!({"metadata": {"name": "web"}, "subsets": [
        {"addresses": [{"ip": "198.18.9.9"}], "ports": [{"port": 1}]}]}))
    .unwrap();
    r.apply_endpoints(EndpointsObject::Endpoints(ep), &stamp()).unwrap();
    assert_eq!(r.backends(&s)[0].backends.len(), 1);
    r.apply_endpoints(
        slice(
            "web-1",
            "web",
            json!({"addressType": "IPv4", "ports": [{"port": 8080, "protocol": "TCP"}], "endpoints": [
            {"addresses": ["198.18.0.1"], "nodeName": "n1"},
            {"addresses": ["198.18.0.2"], "conditions": {"ready": false, "serving": true, "terminating": true}},
            {"addresses": ["2001:db8::1"]}]}),
        ),
        &stamp(),
    )
    .unwrap();
    // A slice of another service and another namespace are ignored.
    r.apply_endpoints(
        slice(
            "other-1",
            "other",
            json!({"addressType": "IPv4", "ports": [{"port": 1}], "endpoints": [{"addresses": ["198.18.1.1"]}]}),
        ),
        &stamp(),
    )
    .unwrap();
    let mut foreign = slice(
        "web-x",
        "web",
        json!({"addressType": "IPv4", "ports": [{"port": 1}], "endpoints": [{"addresses": ["198.18.2.2"]}]}),
    );
    if let EndpointsObject::Slice(s) = &mut foreign {
        s.metadata.namespace = Some("zzz".into());
    }
    r.apply_endpoints(foreign, &stamp()).unwrap();
    let b = &r.backends(&s)[0].backends;
    let got: Vec<(String, u16, bool, bool, bool)> =
        b.iter().map(|x| (x.ip.to_string(), x.port, x.ready, x.serving, x.terminating)).collect();
    assert_eq!(
        got,
        vec![("198.18.0.1".into(), 8080, true, true, false), ("198.18.0.2".into(), 8080, false, true, true)]
    );
    // A named port on the slice does not match the unnamed service port.
    r.apply_endpoints(
        slice(
            "web-1",
            "web",
            json!({"addressType": "IPv4", "ports": [{"name": "x", "port": 8080}],
        "endpoints": [{"addresses": ["198.18.0.1"]}]}),
        ),
        &stamp(),
    )
    .unwrap();
    assert!(r.backends(&s)[0].backends.is_empty());
}

// ---- property: no duplicates, no leaks, failed requests change nothing ----

mod prop {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Apply {
            name: u8,
            ty: u8,
            ports: Vec<(u8, u8, Option<u8>)>,
            ip: Option<u8>,
            policy: u8,
        },
        Delete {
            name: u8,
        },
        /// Apply the stored object as read back: must be `unchanged`.
        Reapply {
            name: u8,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        let port = (0u8..3, 0u8..2, proptest::option::weighted(0.3, 0u8..45));
        prop_oneof![
            4 => (0u8..8, 0u8..6, proptest::collection::vec(port, 1..4), proptest::option::weighted(0.3, 0u8..34), 0u8..4)
                .prop_map(|(name, ty, ports, ip, policy)| Op::Apply { name, ty, ports, ip, policy }),
            1 => (0u8..8).prop_map(|name| Op::Delete { name }),
            1 => (0u8..8).prop_map(|name| Op::Reapply { name }),
        ]
    }

    fn build(name: u8, ty: u8, ports: &[(u8, u8, Option<u8>)], ip: Option<u8>, policy: u8) -> Service {
        let ty_s = ["ClusterIP", "NodePort", "LoadBalancer", "LoadBalancer", "ExternalName", "ClusterIP"][ty as usize];
        let ports: Vec<serde_json::Value> = ports
            .iter()
            .enumerate()
            .map(|(i, (num, proto, np))| {
                let mut p = json!({"name": format!("p{i}"), "port": 80 + u16::from(*num),
                    "protocol": if *proto == 0 { "TCP" } else { "UDP" }});
                if let Some(n) = np {
                    // Some requests fall outside the range on purpose.
                    p["nodePort"] = json!(29998 + u32::from(*n));
                }
                p
            })
            .collect();
        let mut v = json!({"metadata": {"name": format!("s{name}")}, "spec": {"type": ty_s, "ports": ports}});
        if ty == 3 {
            v["spec"]["externalTrafficPolicy"] = json!("Local");
        }
        if ty == 4 {
            v["spec"]["externalName"] = json!("example.org");
        }
        if ty == 5 {
            v["spec"]["clusterIP"] = json!("None");
        } else if let Some(i) = ip {
            v["spec"]["clusterIP"] = json!(format!("10.96.0.{i}"));
        }
        let pol = [None, Some("SingleStack"), Some("PreferDualStack"), Some("RequireDualStack")][policy as usize];
        if let Some(p) = pol {
            v["spec"]["ipFamilyPolicy"] = json!(p);
        }
        svc(v)
    }

    /// Allocator contents must equal exactly what the stored Services carry, with
    /// every value owned by one Service only.
    fn check(r: &Registry) -> Result<(), TestCaseError> {
        let mut ports = BTreeSet::new();
        let mut ips = BTreeSet::new();
        for s in r.list_services(None) {
            let own_ports: BTreeSet<u16> =
                super::service::node_port_values(&s).into_iter().map(|(_, v)| u16::try_from(v).unwrap()).collect();
            for p in own_ports {
                prop_assert!(ports.insert(p), "nodePort {} held by two services", p);
            }
            for ip in s.spec.cluster_ips.iter().filter(|s| *s != "None") {
                let ip: IpAddr = ip.parse().unwrap();
                prop_assert!(ips.insert(ip), "clusterIP {} held by two services", ip);
            }
        }
        let alloc_ports: BTreeSet<u16> = r.node_ports.allocated().into_iter().collect();
        prop_assert_eq!(&alloc_ports, &ports, "node port allocator vs stored services");
        let alloc_ips: BTreeSet<IpAddr> =
            r.cluster_ips.iter().flat_map(|a| a.allocated()).filter(|ip| Some(*ip) != r.reserved).collect();
        prop_assert!(r.reserved.is_some_and(|ip| r.cluster_ips[0].is_allocated(ip)), "reserved address freed");
        prop_assert_eq!(&alloc_ips, &ips, "IP allocators vs stored services");
        let u = r.usage();
        let used = u.node_ports.bands.dynamic.used + u.node_ports.bands.static_band.map_or(0, |b| b.used);
        prop_assert_eq!(used, ports.len() as u64);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        #[test]
        fn apply_update_delete_never_duplicate_or_leak(seed in any::<u64>(), ops in proptest::collection::vec(op(), 1..60)) {
            let cidrs: Vec<IpNet> = vec!["10.96.0.0/27".parse().unwrap(), "fd00::/123".parse().unwrap()];
            let mut r = Registry::with_seed(PortRange { first: 30000, last: 30040 }, &cidrs, seed);
            for (i, op) in ops.into_iter().enumerate() {
                if i % 2 == 1 {
                    // Half the steps start on packed objects (as at rest).
                    let listed = r.list_services(None);
                    r.pack(usize::MAX);
                    prop_assert_eq!(r.list_services(None), listed);
                }
                let before_svcs = r.list_services(None);
                let before_ports = r.node_ports.allocated();
                let before_ips: Vec<Vec<IpAddr>> = r.cluster_ips.iter().map(|a| a.allocated()).collect();
                let failed = match op {
                    Op::Apply { name, ty, ports, ip, policy } => {
                        r.apply_service(build(name, ty, &ports, ip, policy), &stamp()).is_err()
                    }
                    Op::Delete { name } => r.delete_service("default", &format!("s{name}")).is_err(),
                    Op::Reapply { name } => match r.get_service("default", &format!("s{name}")) {
                        Ok(stored) => {
                            let (a, again) = r.apply_service(stored.clone(), &stamp()).map_err(|e| TestCaseError::fail(e.message))?;
                            prop_assert_eq!(a, Action::Unchanged);
                            prop_assert_eq!(again, stored);
                            false
                        }
                        Err(_) => true,
                    },
                };
                if failed {
                    prop_assert_eq!(r.list_services(None), before_svcs);
                    prop_assert_eq!(r.node_ports.allocated(), before_ports);
                    let after_ips: Vec<Vec<IpAddr>> = r.cluster_ips.iter().map(|a| a.allocated()).collect();
                    prop_assert_eq!(after_ips, before_ips);
                }
                check(&r)?;
            }
            // And a restore of what is stored rebuilds the same allocator state.
            let (r2, problems) = Registry::restore(r.node_port_range(), &cidrs, r.list_services(None), vec![]);
            prop_assert!(problems.is_empty(), "{:?}", problems);
            prop_assert_eq!(r2.usage(), r.usage());
        }
    }
}

#[test]
fn load_balancer_ingress_from_the_request_is_kept_and_other_status_is_not() {
    let mut r = reg();
    let mut lb: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "lb"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "198.18.9.9"}]}}
    }))
    .unwrap();
    let (_, stored) = r.apply_service(lb.clone(), &stamp()).unwrap();
    assert_eq!(stored.status.as_ref().unwrap().load_balancer.ingress[0].ip.as_deref(), Some("198.18.9.9"));
    // Re-applying without status keeps what the controller reported.
    lb.status = None;
    let (_, stored) = r.apply_service(lb.clone(), &stamp()).unwrap();
    assert_eq!(stored.status.as_ref().unwrap().load_balancer.ingress.len(), 1);
    // A ClusterIP service never carries ingress.
    lb.spec.type_ = Some("ClusterIP".into());
    lb.status = Some(Default::default());
    lb.status.as_mut().unwrap().load_balancer.ingress = stored.status.unwrap().load_balancer.ingress;
    let (_, stored) = r.apply_service(lb, &stamp()).unwrap();
    assert!(stored.status.unwrap().load_balancer.ingress.is_empty());
}

#[test]
fn a_relabelled_or_deleted_slice_leaves_its_old_service() {
    let mut r = reg();
    let spec = |n: &str| svc(json!({"metadata": {"name": n}, "spec": {"ports": [{"port": 80}]}}));
    let (_, a) = r.apply_service(spec("a"), &stamp()).unwrap();
    let (_, b) = r.apply_service(spec("b"), &stamp()).unwrap();
    let body = json!({"addressType": "IPv4", "ports": [{"port": 8080}], "endpoints": [{"addresses": ["198.18.0.1"]}]});
    r.apply_endpoints(slice("s1", "a", body.clone()), &stamp()).unwrap();
    assert_eq!(r.backends(&a)[0].backends.len(), 1);
    r.apply_endpoints(slice("s1", "b", body), &stamp()).unwrap();
    assert!(r.backends(&a)[0].backends.is_empty());
    assert_eq!(r.backends(&b)[0].backends.len(), 1);
    r.delete_endpoints(EndpointsKind::EndpointSlice, "default", "s1").unwrap();
    assert!(r.backends(&b)[0].backends.is_empty());
}

// ---- kube-apiserver 1.36 scenarios (issue 13), texts verbatim ----

fn lb_local(name: &str) -> Service {
    svc(json!({"metadata": {"name": name}, "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local",
        "ports": [{"port": 80}]}}))
}

#[test]
fn type_change_round_trip_drops_and_frees_obsolete_values() {
    let mut r = reg();
    // NodePort -> ClusterIP still carrying the nodePort: accepted, port freed.
    let (_, s) = r.apply_service(np("web", json!([{"port": 80}])), &stamp()).unwrap();
    let port = u16::try_from(node_ports(&s)[0]).unwrap();
    let mut c = s.clone();
    c.spec.type_ = Some("ClusterIP".into());
    let (_, c) = r.apply_service(c, &stamp()).unwrap();
    assert_eq!(node_ports(&c), Vec::<i64>::new());
    assert_eq!(c.spec.external_traffic_policy, None);
    assert!(!r.node_ports.is_allocated(port));
    // A nodePort the stored object did not hold is still refused.
    let mut bad = c.clone();
    bad.spec.ports[0].node_port = Some(30999);
    assert_eq!(
        r.apply_service(bad, &stamp()).unwrap_err().message,
        "Service \"web\" is invalid: spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"
    );

    // externalTrafficPolicy Local -> Cluster carrying healthCheckNodePort: dropped, freed.
    let (_, lb) = r.apply_service(lb_local("lb"), &stamp()).unwrap();
    let hc = u16::try_from(lb.spec.health_check_node_port.unwrap()).unwrap();
    let mut cl = lb.clone();
    cl.spec.external_traffic_policy = Some("Cluster".into());
    let (_, cl) = r.apply_service(cl, &stamp()).unwrap();
    assert_eq!(cl.spec.health_check_node_port, None);
    assert!(!r.node_ports.is_allocated(hc));
    // LoadBalancer -> NodePort carrying it and allocateLoadBalancerNodePorts: both dropped.
    let (_, lb2) = r.apply_service(lb_local("lb2"), &stamp()).unwrap();
    let hc2 = u16::try_from(lb2.spec.health_check_node_port.unwrap()).unwrap();
    let mut n = lb2.clone();
    n.spec.type_ = Some("NodePort".into());
    let (_, n) = r.apply_service(n, &stamp()).unwrap();
    assert_eq!((n.spec.health_check_node_port, n.spec.allocate_load_balancer_node_ports), (None, None));
    assert_eq!(node_ports(&n), node_ports(&lb2));
    assert!(!r.node_ports.is_allocated(hc2));
}

#[test]
fn cluster_ip_to_external_name_frees_the_address_for_the_next_service() {
    // A /29 has 6 usable addresses; the first is reserved for default/kubernetes.
    let mut r = Registry::with_seed(range(), &["10.96.0.0/29".parse().unwrap()], 1);
    let mut held = Vec::new();
    for i in 0..5 {
        let (_, s) = r
            .apply_service(
                svc(json!({"metadata": {"name": format!("c{i}")}, "spec": {"ports": [{"port": 80}]}})),
                &stamp(),
            )
            .unwrap();
        held.push(s);
    }
    let over = svc(json!({"metadata": {"name": "c28-over"}, "spec": {"ports": [{"port": 80}]}}));
    let e = r.apply_service(over.clone(), &stamp()).unwrap_err();
    assert_eq!(
        (e.reason, e.message.as_str()),
        (Reason::RangeFull, "failed to allocate a serviceIP for Service \"c28-over\": range is full")
    );
    let mut ext = held[0].clone();
    ext.spec.type_ = Some("ExternalName".into());
    ext.spec.external_name = Some("db.example.com".into());
    let (_, ext) = r.apply_service(ext, &stamp()).unwrap();
    assert_eq!((ext.spec.cluster_ip.as_deref(), ext.spec.cluster_ips.len()), (None, 0));
    let (_, next) = r.apply_service(over, &stamp()).unwrap();
    assert_eq!(next.spec.cluster_ip, held[0].spec.cluster_ip);
}

#[test]
fn require_dual_stack_to_single_stack_releases_the_secondary() {
    let mut r = Registry::with_seed(range(), &dual(), 2);
    let (_, d) = r
        .apply_service(
            svc(json!({"metadata": {"name": "d"}, "spec": {"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}})),
            &stamp(),
        )
        .unwrap();
    let second: IpAddr = d.spec.cluster_ips[1].parse().unwrap();
    let mut s = d.clone();
    s.spec.ip_family_policy = Some("SingleStack".into());
    let (_, s) = r.apply_service(s, &stamp()).unwrap();
    assert_eq!(s.spec.cluster_ips, d.spec.cluster_ips[..1]);
    assert_eq!(s.spec.ip_families, ["IPv4"]);
    assert!(!r.cluster_ips[1].is_allocated(second));
}

#[test]
fn zero_means_allocate() {
    let mut r = reg();
    let (_, s) = r.apply_service(np("web", json!([{"port": 80, "nodePort": 0}])), &stamp()).unwrap();
    assert!(node_ports(&s)[0] >= 30000);
    let mut lb = lb_local("lb");
    lb.spec.health_check_node_port = Some(0);
    lb.spec.ports[0].node_port = Some(0);
    let (_, lb) = r.apply_service(lb, &stamp()).unwrap();
    assert!(lb.spec.health_check_node_port.unwrap() >= 30000);
    // 0 in an update keeps what the Service holds.
    let mut again = lb.clone();
    again.spec.health_check_node_port = Some(0);
    again.spec.ports[0].node_port = Some(0);
    assert_eq!(r.apply_service(again, &stamp()).unwrap().0, Action::Unchanged);
}

#[test]
fn static_ip_outside_the_range_network_and_broadcast() {
    let mut r = Registry::with_seed(range(), &["10.96.0.0/24".parse().unwrap()], 1);
    for ip in ["10.96.1.99", "10.96.0.0", "10.96.0.255"] {
        let s = svc(json!({"metadata": {"name": "s"}, "spec": {"clusterIP": ip, "ports": [{"port": 80}]}}));
        assert_eq!(
            r.apply_service(s, &stamp()).unwrap_err().message,
            format!("Service \"s\" is invalid: spec.clusterIPs: Invalid value: [\"{ip}\"]: failed to allocate IP {ip}: the provided network does not match the current range")
        );
    }
    let s = svc(json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "fd00::5", "ports": [{"port": 80}]}}));
    assert_eq!(
        r.apply_service(s, &stamp()).unwrap_err().message,
        "Service \"s\" is invalid: spec.clusterIPs[0]: Invalid value: [\"fd00::5\"]: IPv6 is not configured on this cluster"
    );
}

#[test]
fn health_check_node_port_texts() {
    let mut r = reg();
    r.apply_service(np("taken", json!([{"port": 80, "nodePort": 30009}])), &stamp()).unwrap();
    let mut lb = lb_local("lb");
    lb.spec.health_check_node_port = Some(30009);
    let e = r.apply_service(lb.clone(), &stamp()).unwrap_err();
    assert_eq!(
        (e.reason, e.message.as_str()),
        (
            Reason::AlreadyAllocated,
            "failed to allocate requested HealthCheck NodePort 30009: provided port is already allocated"
        )
    );
    lb.spec.health_check_node_port = Some(40000);
    assert_eq!(
        r.apply_service(lb, &stamp()).unwrap_err().message,
        "failed to allocate requested HealthCheck NodePort 40000: provided port is not in the valid range. The range of valid ports is 30000-32767"
    );
    let mut full = Registry::with_seed(PortRange { first: 30000, last: 30000 }, &v4(), 1);
    let e = full.apply_service(lb_local("lb"), &stamp()).unwrap_err();
    assert_eq!(e.message, "failed to allocate a HealthCheck NodePort 0: range is full");
    assert!(full.node_ports.allocated().is_empty());
}

#[test]
fn first_address_is_reserved_for_default_kubernetes() {
    let mut r = reg();
    let first: IpAddr = "10.96.0.1".parse().unwrap();
    let other = svc(json!({"metadata": {"name": "web"}, "spec": {"clusterIP": "10.96.0.1", "ports": [{"port": 80}]}}));
    let e = r.apply_service(other, &stamp()).unwrap_err();
    assert_eq!(
        (e.reason, e.message.as_str()),
        (Reason::AlreadyAllocated, "Service \"web\" is invalid: spec.clusterIPs: Invalid value: [\"10.96.0.1\"]: failed to allocate IP 10.96.0.1: provided IP is already allocated")
    );
    let k = svc(json!({"metadata": {"name": "kubernetes", "namespace": "default"},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 6443}]}}));
    let (_, k) = r.apply_service(k, &stamp()).unwrap();
    assert_eq!(k.spec.cluster_ip.as_deref(), Some("10.96.0.1"));
    // Deleting it keeps the address reserved; a restore gives it back without a conflict.
    let (r2, problems) = Registry::restore(range(), &v4(), vec![k.clone()], vec![]);
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(r2.held_by(&Key::new("default", "kubernetes")).ips, super::Few(vec![first]));
    r.delete_service("default", "kubernetes").unwrap();
    assert!(r.cluster_ips[0].is_allocated(first));

    // A Service stored with the address before the reservation existed keeps it, and
    // it is reserved again once that Service lets it go.
    let mut old = svc(json!({"metadata": {"name": "old", "namespace": "apps"},
        "spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"], "ports": [{"port": 80}]}}));
    old.spec.type_ = Some("ClusterIP".into());
    let (mut r3, problems) = Registry::restore(range(), &v4(), vec![old], vec![]);
    assert!(problems.is_empty(), "{problems:?}");
    let k = svc(json!({"metadata": {"name": "kubernetes"}, "spec": {"ports": [{"port": 443}]}}));
    let (_, k3) = r3.apply_service(k, &stamp()).unwrap();
    assert_ne!(k3.spec.cluster_ip.as_deref(), Some("10.96.0.1"));
    r3.delete_service("apps", "old").unwrap();
    assert!(r3.cluster_ips[0].is_allocated(first));
    let taken = svc(json!({"metadata": {"name": "new"}, "spec": {"clusterIP": "10.96.0.1", "ports": [{"port": 80}]}}));
    assert_eq!(r3.apply_service(taken, &stamp()).unwrap_err().reason, Reason::AlreadyAllocated);
}

#[test]
fn stored_defaults_are_the_api_servers() {
    let mut r = reg();
    let (_, c) = r
        .apply_service(
            svc(json!({"metadata": {"name": "c"}, "spec": {"ports": [{"port": 80}],
        "sessionAffinity": "ClientIP"}})),
            &stamp(),
        )
        .unwrap();
    assert_eq!(c.spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(c.spec.session_affinity_config.unwrap().client_ip.unwrap().timeout_seconds, Some(10800));
    let (_, lb) = r.apply_service(lb_local("lb"), &stamp()).unwrap();
    assert_eq!(lb.spec.allocate_load_balancer_node_ports, Some(true));
    // sessionAffinityConfig with None: dropped.
    let (_, n) = r
        .apply_service(
            svc(json!({"metadata": {"name": "n"}, "spec": {"ports": [{"port": 80}],
        "sessionAffinity": "None", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}}}})),
            &stamp(),
        )
        .unwrap();
    assert_eq!(n.spec.session_affinity_config, None);
    // Accepted and stored as given.
    let (_, o) = r
        .apply_service(
            svc(json!({"metadata": {"name": "o"}, "spec": {"type": "LoadBalancer",
        "loadBalancerIP": "not-an-ip", "ports": [{"port": 80}]}})),
            &stamp(),
        )
        .unwrap();
    assert_eq!(o.spec.load_balancer_ip.as_deref(), Some("not-an-ip"));
    let (_, x) = r
        .apply_service(
            svc(json!({"metadata": {"name": "x"}, "spec": {"externalName": "db.example.com",
        "ports": [{"port": 80}]}})),
            &stamp(),
        )
        .unwrap();
    assert_eq!(x.spec.external_name.as_deref(), Some("db.example.com"));
    let (_, h) = r
        .apply_service(
            svc(json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None",
        "externalIPs": ["198.18.0.7"], "selector": {"app": "h"}, "ports": [{"port": 80}]}})),
            &stamp(),
        )
        .unwrap();
    assert_eq!(h.spec.external_ips, ["198.18.0.7"]);
    let (_, one) = r
        .apply_service(svc(json!({"metadata": {"name": "1web"}, "spec": {"ports": [{"port": 80}]}})), &stamp())
        .unwrap();
    assert_eq!(one.metadata.name, "1web");
}

#[test]
fn headless_without_selector_is_dual_stack() {
    for cidrs in [dual(), v4()] {
        let mut r = Registry::with_seed(range(), &cidrs, 1);
        let (_, h) =
            r.apply_service(svc(json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None"}})), &stamp()).unwrap();
        assert_eq!(h.spec.ip_family_policy.as_deref(), Some("RequireDualStack"));
        assert_eq!(h.spec.ip_families, ["IPv4", "IPv6"]);
        assert_eq!(h.spec.cluster_ips, ["None"]);
        let (_, hs) = r
            .apply_service(
                svc(json!({"metadata": {"name": "hs"}, "spec": {"clusterIP": "None", "selector": {"app": "a"}}})),
                &stamp(),
            )
            .unwrap();
        assert_eq!((hs.spec.ip_family_policy.as_deref(), hs.spec.ip_families.len()), (Some("SingleStack"), 1));
    }
}

#[test]
fn slice_ports_a_node_cannot_use_are_stored_and_skipped() {
    let mut r = reg();
    let (_, s) = r
        .apply_service(
            svc(json!({"metadata": {"name": "web"}, "spec": {"ports": [{"name": "a", "port": 80},
            {"name": "b", "port": 81}]}})),
            &stamp(),
        )
        .unwrap();
    let obj = slice(
        "web-1",
        "web",
        json!({"addressType": "IPv4",
        "endpoints": [{"addresses": ["198.18.1.2"]}],
        "ports": [{"name": "a", "port": 70000}, {"name": "b", "port": 8081}]}),
    );
    let crate::model::EndpointsObject::Slice(es) = &obj else { unreachable!() };
    crate::model::validate::validate_endpoint_slice(es).unwrap();
    r.apply_endpoints(obj, &stamp()).unwrap();
    let b = r.backends(&s);
    assert!(b[0].backends.is_empty(), "{b:?}");
    assert_eq!(b[1].backends.len(), 1);
}

#[test]
fn update_rules_health_check_immutable_and_secondary_release() {
    let mut r = Registry::with_seed(range(), &dual(), 4);
    let (_, lb) = r.apply_service(lb_local("lb"), &stamp()).unwrap();
    let mut moved = lb.clone();
    moved.spec.health_check_node_port = Some(31999);
    assert_eq!(
        r.apply_service(moved, &stamp()).unwrap_err().message,
        "Service \"lb\" is invalid: spec.healthCheckNodePort: Forbidden: field is immutable"
    );
    assert!(!r.node_ports.is_allocated(31999));
    let (_, d) = r
        .apply_service(
            svc(json!({"metadata": {"name": "d"}, "spec": {"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}})),
            &stamp(),
        )
        .unwrap();
    let mut one = d.clone();
    one.spec.cluster_ips.truncate(1);
    one.spec.ip_families.truncate(1);
    assert_eq!(
        r.apply_service(one, &stamp()).unwrap_err().message,
        "Service \"d\" is invalid: spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": must be set to 'SingleStack' when releasing the secondary clusterIP"
    );
}

#[test]
fn a_service_without_a_name_reads_like_the_api_server() {
    let mut r = reg();
    let e = r.apply_service(svc(json!({"spec": {"ports": [{"port": 80}]}})), &stamp()).unwrap_err();
    assert_eq!(e.message, "Service \"\" is invalid: metadata.name: Required value: name or generateName is required");
}

fn node(v: serde_json::Value) -> crate::model::Node {
    serde_json::from_value(v).unwrap()
}

#[test]
fn nodes_apply_get_list_delete_and_survive_a_reconfigure() {
    let mut r = reg();
    let n = node(json!({"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n1"},
        "spec": {"podCIDR": "10.244.1.0/24"}, "status": {"addresses": [{"type": "InternalIP", "address": "198.18.0.2"}]}}));
    let (a, stored) = r.apply_node(n.clone(), &stamp()).unwrap();
    assert_eq!(a, Action::Created);
    assert_eq!(stored.spec.pod_cidrs, ["10.244.1.0/24"], "podCIDRs is filled from the legacy field");
    assert_eq!(stored.metadata.namespace, None, "cluster-scoped");
    assert_eq!(stored.metadata.resource_version.as_deref(), Some("1"));
    assert_eq!(r.apply_node(n.clone(), &stamp()).unwrap().0, Action::Unchanged);
    let mut moved = n.clone();
    moved.status.addresses[0].address = "198.18.0.3".into();
    assert_eq!(r.apply_node(moved, &stamp()).unwrap().0, Action::Configured);
    assert_eq!(r.get_node("n1").unwrap().internal_ips(), ["198.18.0.3".parse::<IpAddr>().unwrap()]);
    let r2 = r.reconfigure(range(), &dual()).unwrap();
    assert_eq!(r2.nodes().count(), 1);
    let p = r.prepare_delete_node("n1").unwrap();
    assert!(p.is_delete());
    r.commit(p);
    assert_eq!(r.node_count(), 0);
    assert_eq!(r.get_node("n1").unwrap_err().reason, Reason::NotFound);
    assert_eq!(r.prepare_delete_node("n1").unwrap_err().reason, Reason::NotFound);
    // Nodes hold no allocations.
    assert_eq!(r.usage(), reg().usage());
}

// ---- packing (objects at rest kept as text) ----

#[test]
fn packed_objects_read_the_same_and_a_shared_one_waits() {
    let mut r = reg();
    let (_, web) = r.apply_service(lb_local("web"), &stamp()).unwrap();
    let annotated = svc(json!({"metadata": {"name": "db", "annotations": {APPLIED_BY: "nodeportctl"},
        "labels": {"app": "db"}}, "spec": {"ports": [{"port": 5432}]}}));
    r.apply_service(annotated, &stamp()).unwrap();
    let body = json!({"addressType": "IPv4", "ports": [{"port": 8080}],
        "endpoints": [{"addresses": ["198.18.0.1"], "conditions": {"ready": false, "serving": true}}]});
    r.apply_endpoints(slice("web-1", "web", body), &stamp()).unwrap();
    let read = |r: &Registry| {
        (
            r.list_services(None),
            r.list_endpoints(None, None),
            r.backends(&web),
            r.keys_where(ObjKind::Service, |a| a.get(APPLIED_BY).is_some()),
            r.stored_annotations(ObjKind::Service, "default", "db").cloned(),
            r.services_with_health_port().map(|s| s.name().to_string()).collect::<Vec<_>>(),
        )
    };
    let before = read(&r);
    assert_eq!(before.5, ["web"]);
    assert!(before.3.contains(&Key::new("default", "db")));

    // A copy held elsewhere (a sync request in flight) keeps its object typed.
    let held = r.service("default", "web").unwrap();
    assert_eq!(r.unpacked(), 3);
    assert!(r.pack(1), "one step packs one object, two are left");
    assert!(!r.pack(10));
    assert_eq!(r.unpacked(), 1, "the shared Service waits");
    assert!(matches!(r.services[&Key::new("default", "web")].slot, Slot::Typed(..)));
    drop(held);
    assert!(!r.pack(10));
    assert_eq!(r.unpacked(), 0);
    assert!(r.services.values().all(|s| matches!(s.slot, Slot::Text(..))));
    assert!(r.slices.values().all(|s| matches!(s, Slot::Text(..))));
    assert_eq!(read(&r), before, "packed objects read back the same");

    // Updates and deletes of packed objects work as on typed ones.
    let stored = r.get_service("default", "db").unwrap();
    assert_eq!(r.apply_service(stored, &stamp()).unwrap().0, Action::Unchanged);
    let mut moved = r.get_service("default", "web").unwrap();
    moved.spec.external_traffic_policy = Some("Cluster".into());
    r.apply_service(moved, &stamp()).unwrap();
    assert!(r.services_with_health_port().next().is_none(), "Cluster gives the health port up");
    r.delete_endpoints(EndpointsKind::EndpointSlice, "default", "web-1").unwrap();
    assert!(r.backends(&web)[0].backends.is_empty());
    r.delete_service("default", "db").unwrap();
    assert!(!r.pack(10));
    assert_eq!(r.service_count(), 1);
}

#[test]
fn restored_objects_keep_their_file_text_and_pack_while_shared() {
    let with_ns = svc(json!({"metadata": {"name": "a", "namespace": "default"}, "spec": {"ports": [{"port": 80}]}}));
    let no_ns = svc(json!({"metadata": {"name": "b"}, "spec": {"ports": [{"port": 81}]}}));
    let text = |s: &Service| Some(Squeezed::new(&serde_json::to_string(&serde_json::to_value(s).unwrap()).unwrap()));
    let (ta, tb) = (text(&with_ns), text(&no_ns));
    let EndpointsObject::Slice(mut es) =
        slice("a-1", "a", json!({"addressType": "IPv4", "endpoints": [], "ports": []}))
    else {
        unreachable!()
    };
    es.metadata.namespace = Some("default".into());
    let ts = Some(Squeezed::new(&serde_json::to_string(&es).unwrap()));
    let (mut r, problems) = Registry::restore_stored(
        range(),
        &v4(),
        vec![(with_ns, ta.clone()), (no_ns, tb)],
        vec![(EndpointsObject::Slice(es.clone()), ts.clone())],
    );
    assert!(problems.is_empty(), "{problems:?}");
    let listed = r.list_services(None);
    // A sync request holds both Services: the one with its text is packed all the same.
    let held: Vec<_> = ["a", "b"].iter().map(|n| r.service("default", n).unwrap()).collect();
    assert_eq!(r.unpacked(), 3, "everything restored waits");
    assert!(r.pack(usize::MAX), "the first step packs what has its text and lists the rest");
    assert!(!r.pack(usize::MAX), "the rest is shared");
    let key = |n: &str| Key::new("default", n);
    assert!(matches!(&r.services[&key("a")].slot, Slot::Text(t, None) if Some(t) == ta.as_ref()), "the file's text");
    assert!(matches!(&r.slices[&key("a-1")], Slot::Text(t, None) if Some(t) == ts.as_ref()));
    // Without a namespace in its file, the object read back differs from the text: it
    // waits to be printed once nobody shares it.
    assert!(matches!(r.services[&key("b")].slot, Slot::Typed(_, None)));
    assert_eq!(r.unpacked(), 1);
    drop(held);
    assert!(!r.pack(usize::MAX));
    assert!(matches!(r.services[&key("b")].slot, Slot::Text(..)));
    assert_eq!(r.list_services(None), listed);
    assert_eq!(r.get_endpoints(EndpointsKind::EndpointSlice, "default", "a-1").unwrap(), EndpointsObject::Slice(es));
}

/// A restore builds its maps at once: the same slices, and slices per service, as
/// storing the objects one by one; the last of two slices with one key stays, as a store
/// would keep it.
#[test]
fn a_restore_indexes_slices_as_stores_one_by_one_do() {
    let ep = |ip: &str| json!({"addressType": "IPv4", "endpoints": [{"addresses": [ip]}], "ports": [{"port": 80}]});
    let mut unlabelled = slice("stray", "x", ep("198.18.0.9"));
    if let EndpointsObject::Slice(s) = &mut unlabelled {
        s.metadata.labels = Default::default();
    }
    let objects = vec![
        slice("web-b", "web", ep("198.18.0.2")),
        slice("web-a", "web", ep("198.18.0.1")),
        slice("db-a", "db", ep("198.18.0.3")),
        slice("web-a", "web", ep("198.18.0.4")),
        slice("web.x", "web", ep("198.18.0.5")),
        unlabelled,
    ];
    let (restored, problems) = Registry::restore(range(), &v4(), vec![], objects.clone());
    assert!(problems.is_empty(), "{problems:?}");
    let mut one_by_one = reg();
    for o in objects {
        let EndpointsObject::Slice(s) = o else { unreachable!() };
        one_by_one.put_slice(s, None);
    }
    assert_eq!(restored.slices_of, one_by_one.slices_of);
    assert_eq!(restored.slices_of[&Key::new("default", "web")], ["web-a", "web-b", "web.x"]);
    let ips = |r: &Registry| -> Vec<String> {
        r.slices_for("default", "web")
            .iter()
            .flat_map(|s| s.endpoints.iter().flat_map(|e| e.addresses.clone()))
            .collect()
    };
    assert_eq!(ips(&restored), ["198.18.0.4", "198.18.0.2", "198.18.0.5"]);
    assert_eq!(ips(&restored), ips(&one_by_one));
    assert_eq!(restored.slices.keys().collect::<Vec<_>>(), one_by_one.slices.keys().collect::<Vec<_>>());
}
