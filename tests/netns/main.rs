//! End-to-end traffic through the real kernel, in network namespaces these tests make
//! and remove (198.18.0.0/15 and 2001:db8::/32 only). Run them with
//! `tests/netns/run.sh` (as root); plain `cargo test` skips them when it is not root.
//!
//! The same scenarios run twice: against the rendered ruleset loaded with `nft -f` into
//! the router (that proves the ruleset on its own), and against the daemon programming
//! the router over netlink from objects applied with `nodeportctl apply -f`.

mod objects;
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
    let input = Input {
        table: "nodeportd".into(),
        node_name: NODE_NAME.into(),
        masquerade_mark: 0x4000,
        ct_mark: 0x8000,
        nodeport_ips_v4: vec!["198.18.1.1".parse().unwrap(), "198.18.2.1".parse().unwrap()],
        nodeport_ips_v6: vec!["2001:db8:1::1".parse().unwrap(), "2001:db8:2::1".parse().unwrap()],
        services: objs.services.iter().map(|s| ServiceInput { service: s, backends: objs.backends(s) }).collect(),
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ruleset.nft");
    std::fs::write(&file, render(&build(&input))).unwrap();
    t.sh("rt", &format!("nft -f {}", file.display()));
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
    let programmed = "nft list table inet nodeportd | grep -q 'tcp . 30080 : goto ext4-' && \
                      nft list table inet nodeportd | grep -q 'tcp . 30090 : goto ext4-'";
    let took = wait_for(&t, "rt", "the applied services in the kernel", programmed, Duration::from_secs(5));
    eprintln!("ok: applied objects programmed {took:?} after nodeportctl returned");

    // An API server does not take status from a client; the daemon may not either.
    let with_lb_status = ctl("get svc lb-deny -n default -o json").contains("198.18.3.50");
    scenarios::run_all(&t, with_lb_status);

    // Self-heal: the table deleted under the daemon's feet comes back by itself.
    t.sh("rt", "nft delete table inet nodeportd");
    let took = wait_for(&t, "rt", "the table back after nft delete table", programmed, Duration::from_secs(5));
    eprintln!("ok: table restored {took:?} after nft delete table inet nodeportd");
    scenarios::nodeport_works(&t);

    // The foreign table is exactly as it was.
    assert_eq!(t.sh("rt", "nft list table inet npd-foreign"), foreign_before, "the daemon changed a foreign table");
    eprintln!("ok: the foreign table is untouched");

    // SIGTERM stops the daemon but leaves the rules: traffic keeps flowing.
    t.terminate(daemon, Duration::from_secs(5));
    scenarios::nodeport_works(&t);
    eprintln!("ok: rules stay and carry traffic after the daemon stopped");
}
