//! Planner benchmark (not a test): the data plane worker's pure part at 10 000 services
//! × 3 endpoints (every tenth a NodePort), in process, no kernel: a full plan, lowering
//! the whole table to messages (counted, not sent), and 400 one-endpoint changes
//! planned and diffed (`Planner::plan` + `partial_sync_ops`). Best of 3 for the full
//! steps; p50 / p95 for the changes.
//!
//!     cargo run --release --example bench_plan
use std::collections::BTreeMap;
use std::time::Instant;

use nodeportd::dataplane::plan::{Change, OwnedService, Planner};
use nodeportd::dataplane::Input;
use nodeportd::model::{Backend, Key, Service};
use nodeportd::nft::sync::{full_sync_each, partial_sync_ops, Part};

fn svc(i: usize) -> Service {
    let nodeport = i.is_multiple_of(10);
    let ip = format!("198.19.{}.{}", i / 250, i % 250 + 1);
    let v = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": format!("bench-{i:05}"), "namespace": "bench"},
        "spec": {
            "type": if nodeport { "NodePort" } else { "ClusterIP" },
            "clusterIP": ip,
            "clusterIPs": [ip],
            "ports": [{
                "name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP",
                "nodePort": if nodeport { 30000 + i / 10 } else { 0 },
            }],
        },
    });
    serde_json::from_value(v).expect("a valid Service")
}

fn eps(i: usize, gen: usize) -> BTreeMap<String, Vec<Backend>> {
    let b = (0..3)
        .map(|j| {
            let n = 3 * i + j + gen;
            Backend {
                ip: format!("198.18.{}.{}", n / 250 + 10, n % 250 + 1).parse().unwrap(),
                port: 8080,
                ready: true,
                serving: true,
                terminating: false,
                node_name: Some("n".into()),
            }
        })
        .collect();
    BTreeMap::from([("http".to_string(), b)])
}
fn main() {
    let n = 10_000;
    let node = Input {
        table: "t".into(),
        node_name: "n".into(),
        masquerade_mark: 0x4000,
        ct_mark: 0x8000,
        nodeport_ips_v4: vec!["198.18.0.1".parse().unwrap()],
        ..Input::default()
    };
    let services: Vec<Service> = (0..n).map(svc).collect();
    let mut best_full = f64::MAX;
    let mut best_lower = f64::MAX;
    let mut p = Planner::new();
    for _ in 0..3 {
        p = Planner::new();
        let all = services
            .iter()
            .enumerate()
            .map(|(i, s)| {
                (
                    Key("bench".to_string(), s.metadata.name.clone()),
                    Some(OwnedService { service: std::sync::Arc::new(s.clone()).into(), backends: eps(i, 0) }),
                )
            })
            .collect();
        let t = Instant::now();
        p.plan(&node, all, true);
        best_full = best_full.min(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let (mut parts, shared) = p.parts();
        parts.push(Part { packed: &shared, ..Part::default() });
        let mut msgs = 0usize;
        full_sync_each(p.skeleton().unwrap(), &parts, &mut |_| msgs += 1).unwrap();
        best_lower = best_lower.min(t.elapsed().as_secs_f64() * 1e3);
    }
    let mut times = Vec::new();
    for k in 0..400 {
        let i = (k * 37) % n;
        let ch = vec![(
            Key("bench".to_string(), services[i].metadata.name.clone()),
            Some(OwnedService {
                service: std::sync::Arc::new(services[i].clone()).into(),
                backends: eps(i, 1 + k % 2),
            }),
        )];
        let t = Instant::now();
        let planned = p.plan(&node, ch, false);
        if let Change::Partial { before, after } = &planned.change {
            partial_sync_ops(before, after).unwrap();
        } else {
            panic!()
        }
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "full plan {best_full:.1} ms, full lowering {best_lower:.1} ms, change plan+diff p50 {:.1} us p95 {:.1} us",
        times[200], times[380]
    );
}
