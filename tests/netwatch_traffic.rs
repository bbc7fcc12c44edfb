//! The seed's DHCP story with real traffic: the daemon in a router namespace, NodePort
//! 30080 (two backends), and the router's addresses changing under it. NodePorts must
//! answer on the new address, not on one outside `nodeport_addresses`, and follow the
//! default route when `default-route` is selected (via SIGHUP). Reuses the end-to-end
//! topology of `tests/netns` (client → router → two backends; 198.18.0.0/15 only).
//! Skips without root, ip, nft and python3 (as `tests/netns` does).

// Shared with tests/netns, which uses more of it than this test does.
#[allow(dead_code)]
#[path = "netns/topo.rs"]
mod topo;

use std::time::{Duration, Instant};

use topo::Topo;

const OBJECTS: &str = include_str!("netns/objects.json");
/// Generous: the requirement is 100 ms from the netlink event to the rules; this also
/// counts starting a python probe per attempt on a shared CI machine.
const LIMIT: Duration = Duration::from_secs(5);

fn one(t: &Topo, host: &str) -> String {
    t.probe("cl", "tcp", host, 30080, 1, 1.0).into_iter().next().unwrap_or_default()
}

fn answered(line: &str) -> bool {
    line.starts_with("b1 ") || line.starts_with("b2 ")
}

/// Probe until `ok` holds for the answer; how long that took from `since`.
fn until(t: &Topo, host: &str, what: &str, since: Instant, ok: impl Fn(&str) -> bool) -> Duration {
    loop {
        let line = one(t, host);
        if ok(&line) {
            return since.elapsed();
        }
        assert!(since.elapsed() < LIMIT, "{what}: last answer {line:?} after {LIMIT:?}\n{}", t.debug());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The elements of the router's `nodeport-ips-v4` set.
fn set_v4(t: &Topo) -> Vec<String> {
    let text = t.sh("rt", "nft list set inet nodeportd nodeport-ips-v4");
    let Some(start) = text.find("elements = {") else {
        return Vec::new();
    };
    let rest = &text[start + "elements = {".len()..];
    let body = &rest[..rest.find('}').unwrap_or(rest.len())];
    body.split(',').map(|e| e.trim().to_string()).filter(|e| !e.is_empty()).collect()
}

fn config(selectors: &str) -> String {
    format!(
        "node_name = \"npd-router\"\n\
         service_cluster_ip_ranges = [\"198.19.0.0/16\", \"2001:db8:96::/112\"]\n\
         nodeport_addresses = [{selectors}]\n"
    )
}

#[test]
fn nodeports_follow_address_changes() {
    if !topo::available() {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_nodeportd");
    let mut t = Topo::new("w");
    t.start_backends(&["8080", "7"]);
    // As OpenWrt sets it: a renew that removes the interface's first address keeps the
    // new one.
    t.sh("rt", "sysctl -qw net.ipv4.conf.c0.promote_secondaries=1");

    let dir = tempfile::tempdir().unwrap();
    let (cfg, socket, state, objects) = (
        dir.path().join("nodeportd.toml"),
        dir.path().join("sock"),
        dir.path().join("state"),
        dir.path().join("o.json"),
    );
    std::fs::write(&cfg, config("\"198.18.1.0/24\"")).unwrap();
    std::fs::write(&objects, OBJECTS).unwrap();
    let (cfg_s, socket_s, state_s) =
        (cfg.display().to_string(), socket.display().to_string(), state.display().to_string());
    let daemon = t
        .spawn("rt", bin, &["--config", &cfg_s, "--socket", &socket_s, "--state-dir", &state_s, "--log", "stderr"])
        .id();
    let start = Instant::now();
    while !t.try_sh("rt", &format!("test -S {socket_s}")).status.success() {
        assert!(start.elapsed() < Duration::from_secs(10), "the daemon's socket did not appear");
        std::thread::sleep(Duration::from_millis(20));
    }
    t.sh("rt", &format!("{bin} ctl --socket {socket_s} apply -f {}", objects.display()));
    until(&t, "198.18.1.1", "NodePort on the configured address", Instant::now(), answered);
    eprintln!("ok: 198.18.1.1:30080 answers (inside 198.18.1.0/24)");

    // br0's 198.18.2.1 is a router address outside the CIDR: no NodePort there.
    let line = one(&t, "198.18.2.1");
    assert!(line.starts_with("ERR refused"), "198.18.2.1 is outside nodeport_addresses but answered: {line:?}");
    let status = t.sh("rt", &format!("{bin} ctl --socket {socket_s} status -o json"));
    let status: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    assert_eq!(status["node"]["addresses"], serde_json::json!(["198.18.1.1"]), "{status}");
    assert_eq!(status["node"]["selectors"][0]["selectors"], serde_json::json!(["198.18.1.0/24"]), "{status}");
    assert_eq!(set_v4(&t), ["198.18.1.1"]);
    eprintln!("ok: 198.18.2.1:30080 refused (outside the CIDR); status names the selector");

    // DHCP renew inside the CIDR: the new address answers, the old one is out of the set.
    let t0 = Instant::now();
    t.sh("rt", "ip addr add 198.18.1.100/24 dev c0 && ip addr del 198.18.1.1/24 dev c0");
    let took = until(&t, "198.18.1.100", "NodePort on the renewed address", t0, answered);
    let set = set_v4(&t);
    assert_eq!(set, ["198.18.1.100"]);
    eprintln!("ok: renew 198.18.1.1 -> 198.18.1.100: NodePort answers on the new address {took:?} after the change");

    // The lease moves outside the CIDR: no NodePort on it.
    t.sh("rt", "ip addr add 198.18.77.1/24 dev c0 && ip addr del 198.18.1.100/24 dev c0");
    t.sh("cl", "ip addr add 198.18.77.2/24 dev eth0");
    let t0 = Instant::now();
    until(&t, "198.18.77.1", "no NodePort outside the CIDR", t0, |l| l.starts_with("ERR refused"));
    assert_eq!(set_v4(&t), Vec::<String>::new());
    eprintln!("ok: 198.18.77.1 (outside 198.18.1.0/24) gets no NodePort");

    // ... unless default-route selects its interface: SIGHUP with the new list, and the
    // router's default route through c0.
    std::fs::write(&cfg, config("\"198.18.1.0/24\", \"default-route\"")).unwrap();
    t.sh("rt", "ip route add default via 198.18.77.2 dev c0");
    t.sh("rt", &format!("kill -HUP {daemon}"));
    let took = until(&t, "198.18.77.1", "default-route picks c0", Instant::now(), answered);
    eprintln!("ok: default-route via c0: 198.18.77.1:30080 answers ({took:?} after SIGHUP)");

    // The default route moves to br0: NodePorts follow it.
    t.sh("cl", "ip route add 198.18.2.0/24 via 198.18.77.1");
    let t0 = Instant::now();
    t.sh("rt", "ip route replace default via 198.18.2.11 dev br0");
    let took = until(&t, "198.18.2.1", "default-route follows to br0", t0, answered);
    until(&t, "198.18.77.1", "the old default-route interface loses its NodePort", t0, |l| {
        l.starts_with("ERR refused")
    });
    eprintln!(
        "ok: default route moved to br0: 198.18.2.1:30080 answers {took:?} after the change, 198.18.77.1 no more"
    );
    // SIGTERM stops the daemon cleanly (the rules stay, as CONTRACT.md says).
    t.terminate(daemon, Duration::from_secs(5));
}
