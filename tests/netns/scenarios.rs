//! What a user of the services in `objects.json` sees from the client and from the
//! router, whoever programmed the router.

use std::collections::BTreeSet;

use crate::topo::Topo;

/// Requests per spread check: both endpoints answer unless the split is broken (a
/// healthy 50/50 split misses one of them with probability 2^-19).
const SPREAD: u32 = 20;

struct Answer {
    backend: String,
    seen_client: String,
}

fn answers(t: &Topo, what: &str, lines: &[String]) -> Vec<Answer> {
    lines
        .iter()
        .map(|l| {
            let mut parts = l.split_whitespace();
            match (parts.next(), parts.next()) {
                (Some(b), Some(c)) if b != "ERR" => Answer { backend: b.into(), seen_client: c.into() },
                _ => panic!("{what}: request failed: {l:?}\nall answers: {lines:#?}\n{}", t.debug()),
            }
        })
        .collect()
}

/// Every request answered, by both backends, and each saw `seen_client` as the source.
fn spread(t: &Topo, from: &str, proto: &str, host: &str, port: u16, seen_client: &str) {
    let what = format!("{proto} {host}:{port} from {from}");
    let lines = t.probe(from, proto, host, port, SPREAD, 2.0);
    let got = answers(t, &what, &lines);
    let backends: BTreeSet<&str> = got.iter().map(|a| a.backend.as_str()).collect();
    assert_eq!(backends, BTreeSet::from(["b1", "b2"]), "{what}: not spread over both endpoints: {lines:#?}");
    for a in &got {
        assert_eq!(a.seen_client, seen_client, "{what}: backend saw the wrong source: {lines:#?}");
    }
    eprintln!("ok: {what}: {} answers from b1 and b2, source {seen_client}", got.len());
}

/// Refused at once (TCP reset or ICMP unreachable), not dropped into a timeout.
fn refused(t: &Topo, from: &str, proto: &str, host: &str, port: u16) {
    let what = format!("{proto} {host}:{port} from {from}");
    for l in t.probe(from, proto, host, port, 3, 3.0) {
        let ms: u64 = match l.strip_prefix("ERR refused ") {
            Some(ms) => ms.parse().unwrap_or(u64::MAX),
            None => panic!("{what}: expected connection refused, got {l:?}\n{}", t.debug()),
        };
        assert!(ms < 1000, "{what}: refusal took {ms} ms");
    }
    eprintln!("ok: {what}: refused at once");
}

/// `with_lb_status`: whether the services carry `status.loadBalancer.ingress` (the daemon
/// may, like an API server, not take status from a client).
pub fn run_all(t: &Topo, with_lb_status: bool) {
    // The premise of every masquerade check: a backend cannot reach the client itself.
    let direct = t.try_sh("b1", "ip route get 198.18.1.2");
    assert!(!direct.status.success(), "backend b1 has a route to the client; the test proves nothing");

    // NodePort, both families, both router addresses.
    spread(t, "cl", "tcp", "198.18.1.1", 30080, "198.18.2.1");
    spread(t, "cl", "tcp", "2001:db8:1::1", 30080, "2001:db8:2::1");
    spread(t, "cl", "tcp", "198.18.2.1", 30080, "198.18.2.1");
    // externalIP.
    spread(t, "cl", "tcp", "198.18.3.10", 80, "198.18.2.1");
    // ClusterIP and NodePort from the router itself (output hook).
    spread(t, "rt", "tcp", "198.19.0.10", 80, "198.18.2.1");
    spread(t, "rt", "tcp", "2001:db8:96::10", 80, "2001:db8:2::1");
    spread(t, "rt", "tcp", "198.18.1.1", 30080, "198.18.2.1");
    // UDP.
    spread(t, "cl", "udp", "198.18.1.1", 30007, "198.18.2.1");
    spread(t, "cl", "udp", "2001:db8:1::1", 30007, "2001:db8:2::1");
    spread(t, "rt", "udp", "198.19.0.7", 7, "198.18.2.1");

    // No endpoints: refused, on every path.
    refused(t, "cl", "tcp", "198.18.1.1", 30040);
    refused(t, "cl", "udp", "198.18.1.1", 30053);
    refused(t, "cl", "tcp", "198.19.0.40", 80);
    refused(t, "rt", "tcp", "198.19.0.40", 80);

    // sessionAffinity: ClientIP sticks to one endpoint.
    let what = "sticky 198.18.1.1:30030";
    let lines = t.probe("cl", "tcp", "198.18.1.1", 30030, SPREAD, 2.0);
    let got = answers(t, what, &lines);
    let backends: BTreeSet<&str> = got.iter().map(|a| a.backend.as_str()).collect();
    assert_eq!(backends.len(), 1, "{what}: affinity did not stick: {lines:#?}");
    eprintln!("ok: {what}: all {} requests went to {:?}", got.len(), backends);

    // loadBalancerSourceRanges: the client is outside the first service's ranges.
    if with_lb_status {
        load_balancer_source_ranges(t);
    } else {
        eprintln!("skipped: loadBalancerSourceRanges (the stored services have no LoadBalancer ingress IPs)");
    }

    // externalTrafficPolicy: Local: only the local endpoint (b1), and it sees the client.
    // Without masquerade b1 needs a way back to the client, as a pod has via its node.
    t.sh("b1", "ip route add 198.18.1.0/24 via 198.18.2.1");
    let what = "local 198.18.1.1:30090";
    let lines = t.probe("cl", "tcp", "198.18.1.1", 30090, SPREAD, 2.0);
    t.sh("b1", "ip route del 198.18.1.0/24 via 198.18.2.1");
    for a in answers(t, what, &lines) {
        assert_eq!((a.backend.as_str(), a.seen_client.as_str()), ("b1", "198.18.1.2"), "{what}: {lines:#?}");
    }
    eprintln!("ok: {what}: only the local endpoint answered and it saw the client address");
}

/// The NodePort answers, spread and masqueraded: the one check repeated after changes.
pub fn nodeport_works(t: &Topo) {
    spread(t, "cl", "tcp", "198.18.1.1", 30080, "198.18.2.1");
}

fn load_balancer_source_ranges(t: &Topo) {
    let lines = t.probe("cl", "tcp", "198.18.3.50", 80, 1, 1.0);
    assert!(lines[0].starts_with("ERR timeout"), "lb-deny answered a client outside its source ranges: {lines:?}");
    eprintln!("ok: lb-deny 198.18.3.50:80 dropped a client outside loadBalancerSourceRanges");
    let lines = t.probe("cl", "tcp", "198.18.3.51", 80, 1, 2.0);
    answers(t, "lb-allow 198.18.3.51:80", &lines);
    eprintln!("ok: lb-allow 198.18.3.51:80 answered a client inside loadBalancerSourceRanges");
}
