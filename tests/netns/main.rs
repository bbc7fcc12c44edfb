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
    scenarios::run_all(&t);
}
