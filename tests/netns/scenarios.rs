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

/// Requests that should each be answered by `backend`, which sees `seen_client`: a
/// policy that picks the wrong endpoint would show with probability 1 - 2^-ONLY.
const ONLY: u32 = 12;

/// Every one of `ONLY` TCP requests answered by `backend`, which saw `seen_client`.
fn only(t: &Topo, from: &str, host: &str, port: u16, backend: &str, seen_client: &str, why: &str) {
    let what = format!("tcp {host}:{port} from {from}");
    let lines = t.probe(from, "tcp", host, port, ONLY, 2.0);
    for a in answers(t, &what, &lines) {
        assert_eq!(
            (a.backend.as_str(), a.seen_client.as_str()),
            (backend, seen_client),
            "{what}: {why}: expected only {backend}, seeing {seen_client}: {lines:#?}"
        );
    }
    eprintln!("ok: {what}: all {ONLY} answers from {backend} ({why})");
}

/// Dropped: a TCP connection neither answered nor refused within a second (a refusal
/// comes at once, an answer within milliseconds).
fn dropped(t: &Topo, from: &str, host: &str, port: u16, why: &str) {
    let what = format!("tcp {host}:{port} from {from}");
    let lines = t.probe(from, "tcp", host, port, 1, 1.0);
    assert!(
        lines.len() == 1 && lines[0].starts_with("ERR timeout"),
        "{what}: {why}: expected a silent drop (timeout), got {lines:?}\n{}",
        t.debug()
    );
    eprintln!("ok: {what}: dropped ({why})");
}

/// Runs `f` while both backends route the client's network via the router, as pods do
/// via their node: then a request forwarded without masquerade is answered, so a policy
/// that should drop it cannot pass for want of a way back.
fn with_return_routes(t: &Topo, f: impl FnOnce()) {
    for b in ["b1", "b2"] {
        t.sh(b, "ip route add 198.18.1.0/24 via 198.18.2.1");
    }
    f();
    for b in ["b1", "b2"] {
        t.sh(b, "ip route del 198.18.1.0/24 via 198.18.2.1");
    }
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

    hairpin(t);
    internal_traffic_policy_local(t);
    external_traffic_policy_local_elsewhere(t);
    terminating_endpoints(t);
    assert_eq!(syn_to_router_loopback(t), "timeout", "a SYN from the client to the router's 127.0.0.1 was not dropped");
    eprintln!("ok: a SYN from the client to the router's 127.0.0.1:{LOOPBACK_PORT} (route_localnet=1) was dropped");

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

/// An endpoint reaching a service it belongs to (as a pod reaches its own Service): its
/// own answers are masqueraded to the router's address (else its reply to itself would
/// bypass the un-DNAT and the connection break), and the other endpoint answers too.
fn hairpin(t: &Topo) {
    // As on a stock OpenWrt router: no bridge netfilter, so the router routes (and the
    // ruleset sees) only what b1 sends to the router's MAC.
    t.sh("rt", "sysctl -qw net.bridge.bridge-nf-call-iptables=0 net.bridge.bridge-nf-call-ip6tables=0");
    // The NodePort on the router's address on the backends' side (masqueraded anyway).
    spread(t, "b1", "tcp", "198.18.2.1", 30080, "198.18.2.1");
    // A ClusterIP whose only endpoint is b1 itself, with a route via the router as a pod
    // has via its node.
    t.sh("b1", "ip route add 198.19.0.0/16 via 198.18.2.1 && ip -6 route add 2001:db8:96::/112 via 2001:db8:2::1");
    only(t, "b1", "198.19.0.62", 80, "b1", "198.18.2.1", "hairpin: masqueraded to the router");
    t.sh("rt", "sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1");
    // A ClusterIP of both backends: b2 is not masqueraded (only the hairpin is,
    // docs/dataplane.md) and answers b1 straight over the bridge, so the router must see
    // bridged traffic to un-DNAT it (bridge netfilter, as kube-proxy requires of a node),
    // and then b1's own connections come back through its bridge port (hairpin mode, as
    // a kubelet sets on pod ports). Without bridge netfilter b2's answers are lost.
    t.sh("rt", "ip link set b1 type bridge_slave hairpin on && ip link set b2 type bridge_slave hairpin on");
    let v4 = t.probe("b1", "tcp", "198.19.0.10", 80, SPREAD, 2.0);
    let v6 = t.probe("b1", "tcp", "2001:db8:96::10", 80, SPREAD, 2.0);
    t.sh("rt", "ip link set b1 type bridge_slave hairpin off && ip link set b2 type bridge_slave hairpin off");
    t.sh("b1", "ip route del 198.19.0.0/16 via 198.18.2.1 && ip -6 route del 2001:db8:96::/112 via 2001:db8:2::1");
    for (host, lines, router, own) in
        [("198.19.0.10", v4, "198.18.2.1", "198.18.2.11"), ("2001:db8:96::10", v6, "2001:db8:2::1", "2001:db8:2::11")]
    {
        let what = format!("hairpin tcp {host}:80 from b1");
        let got = answers(t, &what, &lines);
        let backends: BTreeSet<&str> = got.iter().map(|a| a.backend.as_str()).collect();
        assert_eq!(backends, BTreeSet::from(["b1", "b2"]), "{what}: not spread over both endpoints: {lines:#?}");
        for a in &got {
            let want = if a.backend == "b1" { router } else { own };
            assert_eq!(a.seen_client, want, "{what}: {} saw the wrong source: {lines:#?}", a.backend);
        }
        eprintln!("ok: {what}: answered by b1 (seeing {router}, masqueraded) and b2 (seeing {own})");
    }
}

/// internalTrafficPolicy: Local: the ClusterIP uses this node's endpoints only (b1 is
/// on npd-router, b2 on another node), from the router and from the client; with no
/// endpoint on this node the ClusterIP is dropped.
fn internal_traffic_policy_local(t: &Topo) {
    const WHY: &str = "internalTrafficPolicy: Local";
    only(t, "rt", "198.19.0.60", 80, "b1", "198.18.2.1", WHY);
    with_return_routes(t, || {
        only(t, "cl", "198.19.0.60", 80, "b1", "198.18.1.2", WHY);
        dropped(t, "cl", "198.19.0.61", 80, "internalTrafficPolicy: Local, no local endpoint");
    });
    dropped(t, "rt", "198.19.0.61", 80, "internalTrafficPolicy: Local, no local endpoint");
}

/// externalTrafficPolicy: Local with endpoints on other nodes only: the NodePort and the
/// externalIP are dropped (not refused: a load balancer's health check steers clients
/// away), the ClusterIP still uses every endpoint.
fn external_traffic_policy_local_elsewhere(t: &Topo) {
    const WHY: &str = "externalTrafficPolicy: Local, endpoints on other nodes only";
    with_return_routes(t, || {
        dropped(t, "cl", "198.18.1.1", 30091, WHY);
        dropped(t, "cl", "198.18.3.11", 80, WHY);
    });
    spread(t, "rt", "tcp", "198.19.0.91", 80, "198.18.2.1");
}

/// Terminating endpoints: without a ready endpoint the serving terminating one (b1) is
/// used and the not-serving one (b2) never; with a ready endpoint (b2) the terminating
/// one is not used.
fn terminating_endpoints(t: &Topo) {
    only(t, "rt", "198.19.0.92", 80, "b1", "198.18.2.1", "no ready endpoint: the serving terminating one only");
    only(t, "rt", "198.19.0.93", 80, "b2", "198.18.2.1", "a ready endpoint: terminating ones unused");
}

/// The router's port 127.0.0.1:LOOPBACK_PORT the client tries to reach (CVE-2020-8558).
pub const LOOPBACK_PORT: u16 = 9127;

/// With `route_localnet=1` on the router and a listener on its 127.0.0.1:LOOPBACK_PORT,
/// the client sends a TCP SYN to 127.0.0.1 as a raw frame to the router's MAC (a socket
/// cannot route 127/8 out): "synack" if the listener answered, "rst", or "timeout".
pub fn syn_to_router_loopback(t: &Topo) -> String {
    let mac = t.sh("rt", "cat /sys/class/net/c0/address").trim().to_string();
    let listener = format!(
        "import socket, time\n\
         s = socket.socket()\n\
         s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('127.0.0.1', {LOOPBACK_PORT}))\n\
         s.listen(16)\n\
         print('ready', flush=True)\n\
         time.sleep(600)\n"
    );
    let _listener = t.background("rt", "python3", &["-c", &listener]);
    t.sh("rt", "sysctl -qw net.ipv4.conf.all.route_localnet=1 net.ipv4.conf.c0.route_localnet=1");
    let syn = crate::topo::here().join("syn.py").display().to_string();
    let got = t.sh("cl", &format!("python3 {syn} eth0 {mac} 198.18.1.2 127.0.0.1 {LOOPBACK_PORT} 1.0"));
    t.sh("rt", "sysctl -qw net.ipv4.conf.all.route_localnet=0 net.ipv4.conf.c0.route_localnet=0");
    got.trim().to_string()
}
