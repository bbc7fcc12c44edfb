//! The request path down to allocation: bytes → JSON → objects → validation → the
//! registry's apply, with small ranges so exhaustion and sharing happen often. Checks
//! the allocation invariants the daemon relies on after every step.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use nodeportd::config::PortRange;
use nodeportd::model::{parse_object, AnyObject};
use nodeportd::registry::{Registry, Stamp};

fn check(reg: &Registry, range: PortRange) {
    let mut ports_owner = HashSet::new();
    let mut ips_owner = HashSet::new();
    for s in reg.list_services(None) {
        let mut mine: HashSet<i64> = s.spec.ports.iter().filter_map(|p| p.node_port).filter(|&n| n != 0).collect();
        mine.extend(s.spec.health_check_node_port.filter(|&n| n != 0));
        for p in mine {
            assert!((i64::from(range.first)..=i64::from(range.last)).contains(&p), "nodePort {p} outside the range");
            assert!(ports_owner.insert(p), "nodePort {p} held by two services");
        }
        for ip in s.spec.cluster_ips.iter().filter(|ip| *ip != "None") {
            assert!(ips_owner.insert(ip.clone()), "clusterIP {ip} held by two services");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(objects) = parse_object(value) else {
        return;
    };
    let range = PortRange { first: 30000, last: 30040 };
    let cidrs: Vec<ipnet::IpNet> = ["10.96.0.0/27", "fd00::/123"].iter().filter_map(|c| c.parse().ok()).collect();
    let mut reg = Registry::with_seed(range, &cidrs, 7);
    let empty = reg.usage();
    let stamp = Stamp { now: "2026-01-01T00:00:00Z".into(), uid: "00000000-0000-4000-8000-000000000000".into() };
    for obj in objects {
        if obj.validate().is_err() {
            continue;
        }
        let before = reg.usage();
        match obj {
            AnyObject::Service(s) => {
                if reg.apply_service(s, &stamp).is_err() {
                    assert_eq!(reg.usage(), before, "a refused apply changed the allocators");
                }
            }
            other => {
                if let Some(e) = other.into_endpoints() {
                    let _ = reg.apply_endpoints(e, &stamp);
                }
            }
        }
        check(&reg, range);
    }
    for s in reg.list_services(None) {
        reg.delete_service(s.namespace(), s.name()).expect("a listed service can be deleted");
    }
    assert_eq!(reg.usage(), empty, "deleting every service must free everything");
});
