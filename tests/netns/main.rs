//! End-to-end traffic through the real kernel, in network namespaces these tests make
//! and remove (198.18.0.0/15 and 2001:db8::/32 only). Run them with
//! `tests/netns/run.sh` (as root); plain `cargo test` skips them when it is not root.
//!
//! The same scenarios run three times: against the rendered ruleset loaded with `nft -f`
//! into the router (that proves the ruleset on its own), against the same ruleset
//! programmed over netlink by the sync engine, and against the daemon programming the
//! router from objects applied with `nodeportctl apply -f`.

#[cfg(feature = "cluster")]
#[path = "../standin/apiserver.rs"]
mod apiserver;
#[path = "../nft_common/listing.rs"]
mod listing;
mod objects;
mod pod_routes;
mod scenarios;
mod topo;

use nodeportd::dataplane::{build, Input, ServiceInput};
use nodeportd::nft::render::render;

use std::time::{Duration, Instant};

use topo::Topo;

pub const NODE_NAME: &str = "npd-router";
pub const OBJECTS: &str = include_str!("objects.json");

#[test]
fn rendered_ruleset_carries_traffic() {
    if !topo::available() {
        return;
    }
    let objs = objects::load(OBJECTS);
    let mut t = Topo::new("n");
    t.start_backends(&["8080", "7"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ruleset.nft");
    std::fs::write(&file, render(&build(&test_input(&objs)))).unwrap();
    t.sh("rt", &format!("nft -f {}", file.display()));
    scenarios::run_all(&t, true);

    // The loopback guard's check can fail: without filter-input's drop rule for
    // 127.0.0.0/8 the same SYN reaches the router's listener (CVE-2020-8558).
    let handle = t.sh("rt", "nft -a list chain inet nodeportd filter-input | sed -n 's|.*127.0.0.0/8.*# handle ||p'");
    t.sh("rt", &format!("nft delete rule inet nodeportd filter-input handle {}", handle.trim()));
    assert_eq!(
        scenarios::syn_to_router_loopback(&t),
        "synack",
        "without the guard the SYN went unanswered: the check proves nothing"
    );
    eprintln!("ok: without the 127.0.0.0/8 drop rule the same SYN gets a SYN-ACK from the router's listener");
}

/// The builder's input for the test objects on the test router.
fn test_input(objs: &objects::Objects) -> Input<'_> {
    Input {
        table: "nodeportd".into(),
        node_name: NODE_NAME.into(),
        masquerade_mark: 0x4000,
        ct_mark: 0x8000,
        nodeport_ips_v4: vec!["198.18.1.1".parse().unwrap(), "198.18.2.1".parse().unwrap()],
        nodeport_ips_v6: vec!["2001:db8:1::1".parse().unwrap(), "2001:db8:2::1".parse().unwrap()],
        services: objs.services.iter().map(|s| ServiceInput { service: s, backends: objs.backends(s) }).collect(),
    }
}

/// The same ruleset programmed over netlink (`nft::full_sync`, the daemon's code path)
/// from a thread inside the router's namespace: the kernel must hold exactly what the
/// text form describes, and carry the same traffic.
#[test]
fn netlink_programmed_ruleset_carries_traffic() {
    if !topo::available() {
        return;
    }
    let objs = objects::load(OBJECTS);
    let mut t = Topo::new("l");
    t.start_backends(&["8080", "7"]);
    let rs = build(&test_input(&objs));
    let ns = std::fs::File::open(format!("/run/netns/{}", t.ns("rt"))).expect("the router's namespace");
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: `ns` is an open namespace file; setns changes only this thread's
            // network namespace, and the thread ends right after the sync.
            let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&ns), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let mut sock = nodeportd::nft::NftSocket::new().expect("an nf_tables socket");
                nodeportd::nft::full_sync(&mut sock, &rs).await.expect("full sync");
            });
        })
        .join()
        .expect("the sync thread");
    });
    let listed = t.sh("rt", "nft list table inet nodeportd");
    let (want, got) = (listing::normalize(&render(&rs)), listing::normalize(&listed));
    let only_ours: Vec<&String> = want.iter().filter(|l| !got.contains(l)).collect();
    let only_kernel: Vec<&String> = got.iter().filter(|l| !want.contains(l)).collect();
    assert!(
        only_ours.is_empty() && only_kernel.is_empty(),
        "netlink result differs from the rendering:\nonly ours: {only_ours:#?}\nonly the kernel's: {only_kernel:#?}"
    );
    eprintln!("ok: nft list table after the netlink sync matches the rendering");
    scenarios::run_all(&t, true);
}

/// Polls a shell condition in a namespace until it holds; the elapsed time, or a panic.
fn wait_for(t: &Topo, role: &str, what: &str, line: &str, limit: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if t.try_sh(role, line).status.success() {
            return start.elapsed();
        }
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}\n{}", t.debug());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The EndpointSlice `name` of `objects.json` without the endpoint at `ip`.
fn slice_without(name: &str, ip: &str) -> String {
    let list: serde_json::Value = serde_json::from_str(OBJECTS).unwrap();
    let mut slice = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{name} in objects.json"))
        .clone();
    let endpoints = slice["endpoints"].as_array_mut().unwrap();
    endpoints.retain(|e| e["addresses"][0] != ip);
    slice.to_string()
}

/// A ClusterIP service `name` with externalIP 198.18.3.20 port 80 and one endpoint.
fn contested_service(name: &str, endpoint: &str) -> String {
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"},
         "spec": {"externalIPs": ["198.18.3.20"], "selector": {"app": name},
                  "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}},
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": format!("{name}-1"), "namespace": "default",
                      "labels": {"kubernetes.io/service-name": name}},
         "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
         "endpoints": [{"addresses": [endpoint], "conditions": {"ready": true}}]}
    ]})
    .to_string()
}

/// Which backends answered `count` requests to 198.18.3.20:80 from the client.
fn contested_answers(t: &Topo, count: u32) -> std::collections::BTreeSet<String> {
    t.probe("cl", "tcp", "198.18.3.20", 80, count, 2.0)
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

/// The backend every one of `count` requests to NodePort `port` went to (panics if they
/// failed or went to more than one).
fn stuck_to(t: &Topo, port: u16, count: u32) -> String {
    let lines = t.probe("cl", "tcp", "198.18.1.1", port, count, 2.0);
    let backends: std::collections::BTreeSet<String> =
        lines.iter().map(|l| l.split_whitespace().next().unwrap_or("").to_string()).collect();
    assert!(
        backends.len() == 1 && lines.iter().all(|l| l.starts_with('b')),
        "198.18.1.1:{port} did not stick to one backend: {lines:#?}\n{}",
        t.debug()
    );
    backends.into_iter().next().unwrap()
}

/// The address of backend `b1`/`b2`.
fn backend_ip(name: &str) -> &'static str {
    match name {
        "b1" => "198.18.2.11",
        "b2" => "198.18.2.12",
        other => panic!("not a backend: {other}"),
    }
}

/// Whether the affinity set of service `svc` (port 80) for endpoint `ip`:8080 holds `client`.
fn affinity_holds(t: &Topo, svc: &str, ip: &str, client: &str) -> bool {
    let table = t.sh("rt", "nft list table inet nodeportd");
    let head = format!("default/{svc}/tcp/80__{ip}/8080 {{");
    let mut lines = table.lines().skip_while(|l| !(l.trim_start().starts_with("set aff4-") && l.ends_with(&head)));
    assert!(lines.next().is_some(), "no affinity set for {svc} endpoint {ip} in the kernel:\n{table}");
    lines.take_while(|l| l.trim() != "}").any(|l| l.contains(client))
}

/// sessionAffinity with `timeoutSeconds: 2` (service `brief`): requests within the window
/// stick; after a pause longer than the timeout the choice is made afresh, so over
/// spaced rounds both endpoints answer (each fresh round repeats the previous endpoint
/// with probability 1/2: all of 11 do with 2^-11, below 0.05 %).
fn affinity_expires(t: &Topo) {
    let mut seen = std::collections::BTreeSet::new();
    let start = Instant::now();
    for round in 0..12 {
        if round > 0 {
            std::thread::sleep(Duration::from_millis(2600));
        }
        seen.insert(stuck_to(t, 30031, 3));
        if seen.len() == 2 {
            eprintln!("ok: ClientIP affinity with a 2 s timeout stuck within the window and chose afresh after it: both endpoints after {} rounds ({:?})", round + 1, start.elapsed());
            return;
        }
    }
    panic!(
        "the affinity of 198.18.1.1:30031 did not expire: 12 rounds 2.6 s apart all went to {seen:?}\n{}",
        t.debug()
    );
}

/// Ignored by a plain `cargo test` (it needs the release-grade daemon and takes a while);
/// `tests/netns/run.sh` runs it.
#[test]
#[ignore = "run by tests/netns/run.sh"]
fn daemon_carries_traffic() {
    if !topo::available() {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_nodeportd");
    let mut t = Topo::new("d");
    t.start_backends(&["8080", "7"]);

    // Someone else's table in the same kernel: the daemon must leave it alone.
    t.sh(
        "rt",
        "nft add table inet npd-foreign && \
         nft add chain inet npd-foreign input '{ type filter hook input priority 10; policy accept; }' && \
         nft add rule inet npd-foreign input tcp dport 9 counter accept",
    );
    let foreign_before = t.sh("rt", "nft list table inet npd-foreign");

    let dir = tempfile::tempdir().unwrap();
    let (config, socket, state, objects) = (
        dir.path().join("nodeportd.toml"),
        dir.path().join("sock"),
        dir.path().join("state"),
        dir.path().join("o.json"),
    );
    std::fs::write(
        &config,
        format!(
            "node_name = \"{NODE_NAME}\"\n\
             service_cluster_ip_ranges = [\"198.19.0.0/16\", \"2001:db8:96::/112\"]\n"
        ),
    )
    .unwrap();
    std::fs::write(&objects, OBJECTS).unwrap();
    let (config, socket, state, objects) =
        (config.display().to_string(), socket.display().to_string(), state.display().to_string(), objects.display());
    let daemon =
        t.spawn("rt", bin, &["--config", &config, "--socket", &socket, "--state-dir", &state, "--log", "stderr"]).id();
    wait_for(&t, "rt", "the daemon's socket", &format!("test -S {socket}"), Duration::from_secs(10));

    let ctl = |args: &str| t.sh("rt", &format!("{bin} ctl --socket {socket} {args}"));
    eprintln!("{}", ctl(&format!("apply -f {objects}")));
    let programmed = "nft list table inet nodeportd | grep -q 'tcp . 30080 . 0 : ' && \
                      nft list table inet nodeportd | grep -q 'tcp . 30090 . 0 : '";
    let took = wait_for(&t, "rt", "the applied services in the kernel", programmed, Duration::from_secs(5));
    eprintln!("ok: applied objects programmed {took:?} after nodeportctl returned");

    // The daemon keeps the LoadBalancer ingress a cluster's controller reported.
    let lb = ctl("get svc lb-deny -n default -o json");
    assert!(lb.contains("198.18.3.50"), "the stored LoadBalancer service lost its ingress IP: {lb}");
    scenarios::run_all(&t, true);

    affinity_expires(&t);

    // Stale affinity: the client sticks to one endpoint of `sticky`; when that endpoint
    // leaves the EndpointSlice its affinity goes with it, and every request goes to the
    // other one, none failing.
    let stuck = stuck_to(&t, 30030, 3);
    let (gone, stays) = (backend_ip(&stuck), if stuck == "b1" { "b2" } else { "b1" });
    let slice = dir.path().join("sticky-v4.json");
    std::fs::write(&slice, slice_without("sticky-v4", gone)).unwrap();
    eprintln!("{}", ctl(&format!("apply -f {}", slice.display())));
    let aff_gone = format!("! nft list table inet nodeportd | grep -q 'set aff4-.*default/sticky/tcp/80__{gone}/8080'");
    wait_for(&t, "rt", "the removed endpoint's affinity set gone", &aff_gone, Duration::from_secs(5));
    let lines = t.probe("cl", "tcp", "198.18.1.1", 30030, 20, 2.0);
    assert!(
        lines.iter().all(|l| l.starts_with(stays)),
        "after {gone} left sticky, the client stuck to it did not move to {stays} only: {lines:#?}\n{}",
        t.debug()
    );
    eprintln!("ok: sticky: the client stuck to {stuck}; with {gone} removed all 20 requests went to {stays}");
    std::fs::write(&slice, slice_without("sticky-v4", "none")).unwrap();
    eprintln!("{}", ctl(&format!("apply -f {}", slice.display())));
    wait_for(&t, "rt", "the endpoint back in sticky", &aff_gone.replacen("! ", "", 1), Duration::from_secs(5));

    // Stale UDP conntrack: a client keeps one socket (one conntrack entry) to the echo
    // service; when its endpoint goes away, the next datagram must reach the other one
    // instead of the old entry pinning it to the removed endpoint (which still answers).
    let mut held = t.udp_hold("cl", "198.18.1.1", 30007);
    let first = held.ask();
    let (gone, stays) = match first.split_whitespace().next() {
        Some("b1") => ("198.18.2.11", "b2"),
        Some("b2") => ("198.18.2.12", "b1"),
        _ => panic!("udp echo via the NodePort did not answer: {first:?}"),
    };
    let slice = dir.path().join("echo-v4.json");
    std::fs::write(&slice, slice_without("echo-v4", gone)).unwrap();
    eprintln!("{}", ctl(&format!("apply -f {}", slice.display())));
    let removed = format!("! nft list map inet nodeportd nodeport-backends-v4 | grep -q ': {gone} . 7'");
    wait_for(&t, "rt", "the endpoint's removal in the kernel", &removed, Duration::from_secs(5));
    // The daemon deletes the entries right after the rules changed; a datagram sent in
    // between may still follow the old entry, so allow it a moment (kube-proxy's order).
    let start = Instant::now();
    let second = loop {
        let answer = held.ask();
        if answer.starts_with(stays) || start.elapsed() > Duration::from_secs(3) {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(second.starts_with(stays), "3 s after {gone} left the echo service the same socket still got {second:?}");
    eprintln!("ok: stale UDP conntrack to {gone} removed: the same client socket now reaches {stays}");
    std::fs::write(&slice, slice_without("echo-v4", "none")).unwrap();
    eprintln!("{}", ctl(&format!("apply -f {}", slice.display())));
    wait_for(&t, "rt", "the endpoint back in echo", &removed.replacen("! ", "", 1), Duration::from_secs(5));

    // Two services claim the same externalIP and port: the kernel would refuse a second
    // map element with that key (and the whole transaction with it). The first service
    // keeps it, the second is reported, the data plane stays in sync for everyone else,
    // and the second takes over when the first goes.
    for (name, endpoint) in [("contest-a", "198.18.2.11"), ("contest-b", "198.18.2.12")] {
        let f = dir.path().join(format!("{name}.json"));
        std::fs::write(&f, contested_service(name, endpoint)).unwrap();
        eprintln!("{}", ctl(&format!("apply -f {}", f.display())));
    }
    wait_for(
        &t,
        "rt",
        "the contested externalIP in the kernel",
        "nft list table inet nodeportd | grep -q '198.18.3.20 . tcp . 80'",
        Duration::from_secs(5),
    );
    let in_sync = format!("{bin} ctl --socket {socket} status -o json | tr -d ' \\n' | grep -q '\"inSync\":true'");
    wait_for(&t, "rt", "the data plane in sync with a contested key", &in_sync, Duration::from_secs(5));
    let status = ctl("status -o json");
    assert!(
        status.contains("default/contest-b: 198.18.3.20 . tcp . 80 in service-ips-v4 is held by default/contest-a"),
        "the conflict is not reported: {status}"
    );
    assert!(status.contains("\"lastError\": null"), "a contested key broke the sync: {status}");
    assert_eq!(
        contested_answers(&t, 6),
        std::collections::BTreeSet::from(["b1".to_string()]),
        "the first claimant lost the externalIP"
    );
    scenarios::nodeport_works(&t);
    eprintln!("ok: a contested externalIP stays with the first service; the rest of the table is in sync");
    eprintln!("{}", ctl("delete svc contest-a -n default"));
    // contest-b's endpoint is 198.18.2.12.
    let moved =
        "nft list map inet nodeportd service-backends-v4 | grep -q '198.18.3.20 . tcp . 80 . 0 : 198.18.2.12 . 8080'";
    wait_for(&t, "rt", "the externalIP handed to the second service", moved, Duration::from_secs(5));
    assert_eq!(
        contested_answers(&t, 6),
        std::collections::BTreeSet::from(["b2".to_string()]),
        "the waiting service did not take over"
    );
    let status = ctl("status -o json");
    assert!(!status.contains("is held by"), "a conflict is still reported: {status}");
    eprintln!("{}", ctl("delete svc contest-b -n default"));
    eprintln!("ok: the externalIP goes to the waiting service when its holder is deleted");

    // Self-heal: the table deleted under the daemon's feet comes back by itself.
    t.sh("rt", "nft delete table inet nodeportd");
    let took = wait_for(&t, "rt", "the table back after nft delete table", programmed, Duration::from_secs(5));
    eprintln!("ok: table restored {took:?} after nft delete table inet nodeportd");
    scenarios::nodeport_works(&t);

    // The foreign table is exactly as it was.
    assert_eq!(t.sh("rt", "nft list table inet npd-foreign"), foreign_before, "the daemon changed a foreign table");
    eprintln!("ok: the foreign table is untouched");

    // A restart on the persisted state: new connections keep being served while the
    // daemon stops and starts (no gap), and the new daemon compares the table with the
    // kernel's instead of replacing it.
    let args = ["--config", &config, "--socket", &socket, "--state-dir", &state, "--log", "stderr"];
    // The client sticks to one endpoint of `sticky` before the restart (affinity lives in
    // the kernel's dynamic sets, which the restarted daemon must not clear).
    let stuck = stuck_to(&t, 30030, 3);
    assert!(
        affinity_holds(&t, "sticky", backend_ip(&stuck), "198.18.1.2"),
        "the client stuck to {stuck} is not in its affinity set: the check after the restart proves nothing"
    );
    // Established flows: UDP sockets opened before the restart (a conntrack entry each)
    // keep their endpoint while the daemon is down and after the new one is in sync.
    let mut flows: Vec<_> = (0..8).map(|_| t.udp_hold("cl", "198.18.1.1", 30007)).collect();
    let mut ask_all = |when: &str| -> Vec<String> {
        flows
            .iter_mut()
            .map(|h| {
                let a = h.ask();
                assert!(a.starts_with('b'), "an established UDP flow got no answer {when}: {a:?}");
                a.split_whitespace().next().unwrap_or_default().to_string()
            })
            .collect()
    };
    let established = ask_all("before the restart");
    // The client runs on its own while the daemon is stopped and started again.
    let probe = t
        .cmd("cl", "python3")
        .args([topo::here().join("probe.py").to_string_lossy().as_ref(), "tcp", "198.18.1.1", "30080", "300", "1.0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    t.terminate(daemon, Duration::from_secs(5));
    assert_eq!(ask_all("while the daemon is down"), established, "an established flow moved while the daemon was down");
    let restarted = t.spawn("rt", bin, &args).id();
    let out = probe.wait_with_output().unwrap();
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    let failed: Vec<&String> = lines.iter().filter(|l| l.starts_with("ERR")).collect();
    assert!(lines.len() == 300 && failed.is_empty(), "connections failed across a restart: {failed:?}");
    wait_for(&t, "rt", "the restarted daemon in sync", &in_sync, Duration::from_secs(10));
    let status = t.sh("rt", &format!("{bin} ctl --socket {socket} status -o json")).replace([' ', '\n'], "");
    assert!(status.contains("\"fullSyncs\":0"), "the restart replaced the table: {status}");
    eprintln!("ok: 300 connections across a daemon restart, none failed; the table was compared, not replaced");
    assert_eq!(ask_all("after the restart"), established, "an established flow moved across the restart");
    eprintln!("ok: 8 established UDP flows kept their endpoints ({established:?}) while the daemon was down and after its restart");
    // Checked in the kernel first (a new request would re-add the client), then with traffic.
    let kept = affinity_holds(&t, "sticky", backend_ip(&stuck), "198.18.1.2");
    let after = t.probe("cl", "tcp", "198.18.1.1", 30030, 5, 2.0);
    assert!(
        kept && after.iter().all(|l| l.starts_with(&stuck)),
        "the client's affinity to {stuck} did not survive the restart (client in the kernel's set: {kept}): {after:#?}\n{}",
        t.debug()
    );
    eprintln!(
        "ok: the client's affinity to {stuck} survived the daemon restart (in the kernel's set and with traffic)"
    );

    // SIGTERM stops the daemon but leaves the rules: traffic keeps flowing.
    t.terminate(restarted, Duration::from_secs(5));
    scenarios::nodeport_works(&t);
    eprintln!("ok: rules stay and carry traffic after the daemon stopped");
}

/// Whether a NodePort on the router answers the client (one try, short timeout).
#[cfg(feature = "cluster")]
fn answers(t: &Topo, port: u16) -> bool {
    t.probe("cl", "tcp", "198.18.1.1", port, 1, 0.3).first().is_some_and(|l| l.starts_with('b'))
}

/// Cluster mode end to end: Services and EndpointSlices created on a stand-in API server
/// (TLS, in the router's namespace) carry real traffic through the daemon's table, and
/// stop answering once deleted there. Needs `--features cluster`; tests/netns/run.sh runs it.
#[cfg(feature = "cluster")]
#[test]
#[ignore = "run by tests/netns/run.sh"]
fn cluster_mode_carries_traffic() {
    use apiserver::{service, slice, ApiServer, Res};
    use std::os::unix::fs::PermissionsExt;
    if !topo::available() {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_nodeportd");
    let mut t = Topo::new("k");
    t.start_backends(&["8080"]);
    let api = ApiServer::start_in(Some(&std::path::Path::new("/var/run/netns").join(t.ns("rt"))), Some("tok"));
    api.put(Res::Services, service("default", "web", "198.19.0.10", 80, Some(30080)));
    api.put(Res::Slices, slice("default", "web", &["198.18.2.11", "198.18.2.12"], true));

    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "tok").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = dir.path().join("nodeportd.toml");
    std::fs::write(
        &config,
        format!(
            "node_name = \"{NODE_NAME}\"\nservice_cluster_ip_ranges = [\"198.19.0.0/16\"]\nubus = \"off\"\n\n\
             [cluster]\nserver = \"{}\"\nca_file = \"{}\"\ntoken_file = \"{}\"\n",
            api.url(),
            apiserver::fixture("ca.crt").display(),
            token.display()
        ),
    )
    .unwrap();
    let (socket, state) =
        (dir.path().join("sock").display().to_string(), dir.path().join("state").display().to_string());
    let config = config.display().to_string();
    t.spawn("rt", bin, &["--config", &config, "--socket", &socket, "--state-dir", &state, "--log", "stderr"]);
    wait_for(&t, "rt", "the daemon's socket", &format!("test -S {socket}"), Duration::from_secs(10));

    let deadline = |what: &str, limit: Duration, cond: &dyn Fn() -> bool| -> Duration {
        let start = Instant::now();
        while !cond() {
            assert!(start.elapsed() < limit, "{what}: not within {limit:?}\n{}", t.debug());
            std::thread::sleep(Duration::from_millis(10));
        }
        start.elapsed()
    };
    let took = deadline("the listed Service answering", Duration::from_secs(10), &|| answers(&t, 30080));
    eprintln!("ok: the Service listed from the API server answers on NodePort 30080 ({took:?} after the socket)");
    let backends: std::collections::BTreeSet<String> = t
        .probe("cl", "tcp", "198.18.1.1", 30080, 12, 1.0)
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
        .collect();
    assert_eq!(backends, ["b1".to_string(), "b2".to_string()].into(), "both endpoints of the slice serve");

    // Created in the cluster while watching: traffic within a second is the goal; checked
    // at 10 s to stay robust on a loaded machine (each probe starts a python client in a
    // namespace, which alone can take most of a second there). The time is printed.
    api.put(Res::Services, service("default", "api", "198.19.0.11", 80, Some(30081)));
    api.put(Res::Slices, slice("default", "api", &["198.18.2.12"], true));
    let took = deadline("a Service created in the cluster answering", Duration::from_secs(10), &|| answers(&t, 30081));
    eprintln!("ok: a Service created on the API server carries traffic {took:?} later");

    // Scaled in the cluster: the slice loses an endpoint, the kernel follows.
    api.put(Res::Slices, slice("default", "web", &["198.18.2.11"], true));
    deadline("web scaled to one endpoint", Duration::from_secs(10), &|| {
        t.probe("cl", "tcp", "198.18.1.1", 30080, 6, 1.0).iter().all(|l| l.starts_with("b1"))
    });
    eprintln!("ok: an endpoint removed in the cluster stops getting traffic");

    // Deleted in the cluster: stops answering.
    api.delete(Res::Services, "default", "api");
    api.delete(Res::Slices, "default", "api-abcde");
    let took = deadline("a deleted Service going quiet", Duration::from_secs(10), &|| !answers(&t, 30081));
    eprintln!("ok: a Service deleted on the API server stops answering {took:?} later");
    assert!(answers(&t, 30080), "the other Service still answers");

    // The API server goes away: what is mirrored keeps carrying traffic.
    api.with(|w| w.down = true);
    std::thread::sleep(Duration::from_millis(500));
    assert!(answers(&t, 30080), "traffic stopped while the API server was down");
    eprintln!("ok: traffic continues while the API server is unreachable");
}
