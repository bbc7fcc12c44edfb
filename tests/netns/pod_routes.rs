//! `pod_routes` against the real kernel: the daemon in the router installs
//! `podCIDR via nodeIP proto 158` for Nodes applied with `nodeportctl`, follows their
//! changes and deletions and the router's addresses, skips nodes it cannot reach, never
//! touches a route of another protocol, removes stale routes of its own at start, and a
//! NodePort whose endpoint is a pod IP carries traffic through the route.
//!
//! The backends b1 and b2 of the topology are the Nodes (InternalIPs 198.18.2.11/.12 and
//! 2001:db8:2::11/::12). b1 holds a pod namespace `pod` (198.18.64.2 in pod CIDR
//! 198.18.64.0/24) behind a veth; the router has no route to it but the pod route.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::topo::{self, Topo};
use crate::wait_for;

const LIMIT: Duration = Duration::from_secs(5);

fn node(name: &str, ips: &[&str], cidrs: &[&str]) -> Value {
    let addrs: Vec<Value> = ips.iter().map(|ip| json!({"type": "InternalIP", "address": ip})).collect();
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "spec": {"podCIDR": cidrs.first(), "podCIDRs": cidrs}, "status": {"addresses": addrs}})
}

/// Removes the pod namespace (the Topo removes only its own roles).
struct PodNs(String);

impl Drop for PodNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

/// Our routes in the router, one `ip route` line each, both families.
fn ours(t: &Topo) -> String {
    t.sh("rt", "ip route show proto 158; ip -6 route show proto 158")
}

#[test]
#[ignore = "run by tests/netns/run.sh"]
fn pod_routes_follow_nodes_and_leave_other_routes_alone() {
    if !topo::available() {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_nodeportd");
    let mut t = Topo::new("p");
    // The pod namespace behind b1.
    let pod = PodNs(t.ns("pod"));
    let host = |line: String| {
        let out = Command::new("sh").args(["-c", &line]).output().unwrap();
        assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
    };
    host(format!("ip netns add {}", pod.0));
    host(format!("ip -n {} link add pod0 type veth peer name eth0 netns {}", t.ns("b1"), pod.0));
    t.sh("b1", "sysctl -qw net.ipv4.ip_forward=1 && ip addr add 198.18.64.1/24 dev pod0 && ip link set pod0 up");
    t.sh("pod", "ip link set lo up && ip link set eth0 up && ip addr add 198.18.64.2/24 dev eth0 && ip route add default via 198.18.64.1");
    let script = topo::here().join("backend.py").display().to_string();
    {
        let child = t.spawn("pod", "python3", &[&script, "pod", "8080"]);
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
        assert_eq!(line.trim(), "ready");
    }

    // The operator's route to a CIDR a Node will claim, and a stale route of ours from a
    // "previous run".
    t.sh("rt", "ip route add 198.18.65.0/24 via 198.18.2.12 proto static");
    t.sh("rt", "ip route add 198.18.68.0/24 via 198.18.2.11 proto 158");
    let operator = "ip route show 198.18.65.0/24 proto static | grep -q 'via 198.18.2.12'";

    let dir = tempfile::tempdir().unwrap();
    let (config, socket, state) = (dir.path().join("c.toml"), dir.path().join("sock"), dir.path().join("state"));
    std::fs::write(
        &config,
        "service_cluster_ip_ranges = [\"198.19.0.0/16\", \"2001:db8:96::/112\"]\npod_routes = true\n",
    )
    .unwrap();
    let (config, socket, state) =
        (config.display().to_string(), socket.display().to_string(), state.display().to_string());
    let args = ["--config", &config, "--socket", &socket, "--state-dir", &state, "--log", "stderr"];
    let daemon = t.spawn("rt", bin, &args).id();
    wait_for(&t, "rt", "the daemon's socket", &format!("test -S {socket}"), Duration::from_secs(10));
    let file = dir.path().join("obj.json");
    let apply = |v: Value| {
        std::fs::write(&file, v.to_string()).unwrap();
        t.sh("rt", &format!("{bin} ctl --socket {socket} apply -f {}", file.display()))
    };
    let ctl = |args: &str| t.sh("rt", &format!("{bin} ctl --socket {socket} {args}"));
    let status = || -> Value { serde_json::from_str(&ctl("status -o json")).unwrap() };

    // Start: the stale route of ours is gone, the operator's stays.
    wait_for(&t, "rt", "the stale route of ours removed", "! ip route show proto 158 | grep -q 198.18.68.0", LIMIT);
    t.sh("rt", operator);
    eprintln!("ok: a stale proto 158 route was removed at start; the operator's route stayed");

    // A NodePort Service whose endpoint is the pod: nothing reaches it without the route.
    let svc = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "podsvc"},
         "spec": {"type": "NodePort", "ports": [{"port": 80, "targetPort": 8080, "nodePort": 30500}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": "podsvc-1", "labels": {"kubernetes.io/service-name": "podsvc"}},
         "addressType": "IPv4", "ports": [{"port": 8080}],
         "endpoints": [{"addresses": ["198.18.64.2"], "conditions": {"ready": true}}]}]});
    apply(svc);
    wait_for(&t, "rt", "the service programmed", "nft list table inet nodeportd | grep -q 30500", LIMIT);
    let before = t.probe("cl", "tcp", "198.18.1.1", 30500, 1, 1.0);
    assert!(before[0].starts_with("ERR"), "the pod answered without a route: {before:?}\n{}", t.debug());

    // Node b1 (dual stack) and a node on no connected subnet.
    apply(node("b1", &["198.18.2.11", "2001:db8:2::11"], &["198.18.64.0/24", "2001:db8:64::/64"]));
    apply(node("far", &["198.18.70.2"], &["198.18.67.0/24"]));
    let b1_v4 = "ip route show proto 158 | grep -q '^198.18.64.0/24 via 198.18.2.11 dev br0'";
    let took = wait_for(&t, "rt", "b1's IPv4 pod route", b1_v4, LIMIT);
    wait_for(
        &t,
        "rt",
        "b1's IPv6 pod route",
        "ip -6 route show proto 158 | grep -q '^2001:db8:64::/64 via 2001:db8:2::11 dev br0'",
        LIMIT,
    );
    eprintln!("ok: b1's pod routes (v4 and v6) installed {took:?} after apply:\n{}", ours(&t));
    assert!(!ours(&t).contains("198.18.67.0"), "a route for the unreachable node: {}", ours(&t));
    let st = status();
    let skipped = st["podRoutes"]["skipped"].to_string();
    assert!(skipped.contains("far") && skipped.contains("not on a directly connected subnet"), "{st:#}");
    assert_eq!(st["podRoutes"]["routes"].as_array().map(Vec::len), Some(2), "{st:#}");
    let text = ctl("status");
    assert!(text.contains("198.18.64.0/24 via 198.18.2.11 dev br0 (node b1)"), "{text}");
    eprintln!("{text}");
    eprintln!("ok: status shows the routes and why node far was skipped");

    // Real traffic: client → router:30500 → DNAT to the pod → pod route via b1 → pod.
    let got = t.probe("cl", "tcp", "198.18.1.1", 30500, 5, 2.0);
    assert!(got.iter().all(|l| l.starts_with("pod ")), "traffic to the pod: {got:?}\n{}", t.debug());
    eprintln!("ok: 5 requests to the NodePort answered by the pod behind node b1: {}", got[0]);

    // Someone deletes our route: it comes back.
    t.sh("rt", "ip route del 198.18.64.0/24 proto 158");
    wait_for(&t, "rt", "b1's route put back", b1_v4, LIMIT);
    eprintln!("ok: a route of ours deleted by hand was put back");

    // The node's subnet appears later: its route follows the address change.
    t.sh("rt", "ip addr add 198.18.70.1/24 dev br0");
    wait_for(
        &t,
        "rt",
        "far's route after its subnet appeared",
        "ip route show proto 158 | grep -q '^198.18.67.0/24 via 198.18.70.2'",
        LIMIT,
    );
    t.sh("rt", "ip addr del 198.18.70.1/24 dev br0");
    wait_for(&t, "rt", "far's route gone with its subnet", "! ip route show proto 158 | grep -q 198.18.67.0", LIMIT);
    eprintln!("ok: node far's route came with its connected subnet and went with it");

    // A Node wanting the operator's CIDR: skipped, the operator's route untouched.
    apply(node("b2", &["198.18.2.12"], &["198.18.65.0/24"]));
    std::thread::sleep(Duration::from_millis(500));
    t.sh("rt", operator);
    assert!(!ours(&t).contains("198.18.65.0"), "{}", ours(&t));
    let skipped = status()["podRoutes"]["skipped"].to_string();
    assert!(skipped.contains("b2") && skipped.contains("not ours"), "{skipped}");
    ctl("delete node b2");
    std::thread::sleep(Duration::from_millis(500));
    t.sh("rt", operator);
    eprintln!("ok: a node claiming the operator's CIDR was skipped; deleting it left the operator's route");

    // b1 moves to another address: the route follows.
    apply(node("b1", &["198.18.2.12", "2001:db8:2::12"], &["198.18.64.0/24", "2001:db8:64::/64"]));
    wait_for(
        &t,
        "rt",
        "b1's moved route",
        "ip route show proto 158 | grep -q '^198.18.64.0/24 via 198.18.2.12 dev br0'",
        LIMIT,
    );
    wait_for(
        &t,
        "rt",
        "b1's moved v6 route",
        "ip -6 route show proto 158 | grep -q '^2001:db8:64::/64 via 2001:db8:2::12 dev br0'",
        LIMIT,
    );
    eprintln!("ok: the routes followed b1's new InternalIPs");

    // Delete b1: both routes go; the operator's stays.
    ctl("delete node b1");
    wait_for(
        &t,
        "rt",
        "b1's routes removed",
        "! ip route show proto 158 | grep -q 198.18.64.0 && ! ip -6 route show proto 158 | grep -q 2001:db8:64::",
        LIMIT,
    );
    t.sh("rt", operator);
    eprintln!("ok: deleting node b1 removed its routes; the operator's route stayed");

    // Re-created, then pod_routes switched off with a reload: ours go, theirs stays.
    apply(node("b1", &["198.18.2.11"], &["198.18.64.0/24"]));
    wait_for(&t, "rt", "b1's route again", b1_v4, LIMIT);
    std::fs::write(
        &config,
        "service_cluster_ip_ranges = [\"198.19.0.0/16\", \"2001:db8:96::/112\"]\npod_routes = false\n",
    )
    .unwrap();
    t.sh("rt", &format!("kill -HUP {daemon}"));
    wait_for(
        &t,
        "rt",
        "our routes removed when pod_routes is off",
        "test -z \"$(ip route show proto 158; ip -6 route show proto 158)\"",
        LIMIT,
    );
    t.sh("rt", operator);
    eprintln!("ok: pod_routes = false (SIGHUP) removed our routes only");
    t.terminate(daemon, Duration::from_secs(5));
}
