//! Allocator throughput: allocate + release pairs per second (a benchmark, not a test).
//!
//! Run: `cargo run --release --example bench_alloc` (the router's release profile:
//! opt-level "z", LTO). Figures go to docs/benchmarks.md, `## Allocators`.

use std::hint::black_box;
use std::time::Instant;

use nodeportd::alloc::{IpAllocator, PortAllocator, Rng};
use nodeportd::config::PortRange;
use nodeportd::registry::{Registry, Stamp};

const PAIRS: u32 = 1_000_000;

fn report(what: &str, n: u32, start: Instant) {
    let secs = start.elapsed().as_secs_f64();
    println!("{what:<58} {:>12.0} pairs/s  {:>8.1} ns/pair", f64::from(n) / secs, secs * 1e9 / f64::from(n));
}

fn ports(fill_percent: u32) {
    let range = PortRange { first: 30000, last: 32767 };
    let mut a = PortAllocator::new(range, Rng::seeded(1));
    let target = range.size() * fill_percent / 100;
    for _ in 0..target {
        let _ = a.allocate_next();
    }
    let start = Instant::now();
    for _ in 0..PAIRS {
        if let Ok(p) = a.allocate_next() {
            a.release(black_box(p));
        }
    }
    report(&format!("nodePort 30000-32767, {fill_percent}% full, dynamic"), PAIRS, start);
}

fn ports_static() {
    let mut a = PortAllocator::new(PortRange { first: 30000, last: 32767 }, Rng::seeded(1));
    let start = Instant::now();
    for i in 0..PAIRS {
        let p = 30000 + (i % 2768) as u16;
        let _ = a.allocate(black_box(p));
        a.release(p);
    }
    report("nodePort 30000-32767, static", PAIRS, start);
}

fn ips(cidr: &str, fill_percent: u64) {
    let net = cidr.parse().unwrap_or_else(|e| panic!("{cidr}: {e}"));
    let mut a = IpAllocator::new(net, Rng::seeded(1));
    let u = a.usage();
    let size = u.dynamic.free + u.static_band.map_or(0, |b| b.free);
    for _ in 0..size * fill_percent / 100 {
        let _ = a.allocate_next();
    }
    let start = Instant::now();
    for _ in 0..PAIRS {
        if let Ok(ip) = a.allocate_next() {
            a.release(black_box(ip));
        }
    }
    report(&format!("clusterIP {cidr}, {fill_percent}% full, dynamic"), PAIRS, start);
}

fn registry() {
    let cidrs = ["10.96.0.0/16".parse().unwrap_or_else(|e| panic!("{e}"))];
    let mut r = Registry::with_seed(PortRange { first: 30000, last: 32767 }, &cidrs, 1);
    let stamp = Stamp { now: "2026-11-22T10:00:00Z".into(), uid: "u".into() };
    let svc: nodeportd::model::Service = serde_json::from_str(
        r#"{"metadata":{"name":"web"},"spec":{"type":"NodePort","ports":[{"name":"http","port":80},{"name":"https","port":443}]}}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let n = 100_000;
    let start = Instant::now();
    for _ in 0..n {
        let _ = black_box(r.apply_service(svc.clone(), &stamp));
        let _ = black_box(r.delete_service("default", "web"));
    }
    report("registry apply+delete, NodePort svc, 2 ports (1 IP, 2 ports)", n, start);
}

fn main() {
    ports(0);
    ports(50);
    ports(99);
    ports_static();
    ips("10.96.0.0/16", 0);
    ips("10.96.0.0/16", 99);
    ips("fd00:10:96::/64", 50);
    registry();
}
