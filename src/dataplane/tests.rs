//! Golden tests: representative services built into a ruleset and rendered as nft text,
//! compared with `src/dataplane/testdata/*.nft`. After an intended change, regenerate
//! with `UPDATE_GOLDEN=1 cargo test dataplane::` and review the diff.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::model::{Backend, Service};
use crate::nft::ir::*;
use crate::nft::render::render;

use super::names;

#[path = "../../tests/nft_common/listing.rs"]
mod listing;
use super::*;

include!("cases.rs");

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/dataplane/testdata").join(format!("{name}.nft"))
}

fn check_golden(name: &str, got: &str) {
    let path = testdata(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1 to create it)", path.display()));
    if want != got {
        panic!("{} differs from the builder's output:\n--- want\n{want}\n--- got\n{got}", path.display());
    }
}

/// Only the service's own objects, rendered into an otherwise empty table so the golden
/// file shows exactly what one service adds.
fn render_pieces(p: &ServicePieces) -> String {
    let mut rs = Ruleset { family: Some(Family::Inet), table: "nodeportd".into(), ..Ruleset::default() };
    p.clone().merge_into(&mut rs);
    render(&rs)
}

fn services() -> Vec<Service> {
    CASES.iter().map(|c| svc(c.service)).collect()
}

fn full_input(svcs: &[Service]) -> Input<'_> {
    input(svcs.iter().zip(CASES).map(|(s, c)| ServiceInput { service: s, backends: ports(c.backends) }).collect())
}

#[test]
fn golden_per_service() {
    for c in CASES {
        let s = svc(c.service);
        let inp = input(vec![]);
        let pieces = build_service(&inp, &ServiceInput { service: &s, backends: ports(c.backends) });
        check_golden(c.name, &render_pieces(&pieces));
    }
}

#[test]
fn golden_skeleton_and_full_table() {
    check_golden("skeleton", &render(&build(&input(vec![]))));
    let svcs = services();
    check_golden("full", &render(&build(&full_input(&svcs))));
}

#[test]
fn build_is_deterministic_and_order_independent() {
    let svcs = services();
    let a = build(&full_input(&svcs));
    let mut inp = full_input(&svcs);
    inp.services.reverse();
    for s in &mut inp.services {
        for bs in s.backends.values_mut() {
            bs.reverse();
        }
    }
    assert_eq!(a, build(&inp));
}

#[test]
fn externalname_and_headless_produce_nothing() {
    let ext = svc(r#"{"metadata":{"name":"ext"},"spec":{"type":"ExternalName","externalName":"example.org"}}"#);
    let headless = svc(r#"{"metadata":{"name":"db"},"spec":{"clusterIP":"None","ports":[{"port":5432}]}}"#);
    let unallocated = svc(r#"{"metadata":{"name":"new"},"spec":{"ports":[{"port":80}]}}"#);
    let inp = input(vec![]);
    for s in [&ext, &headless, &unallocated] {
        let backends = ports(&[("", &["198.18.2.11:5432 ready"])]);
        assert_eq!(build_service(&inp, &ServiceInput { service: s, backends }), ServicePieces::default());
    }
}

#[test]
fn every_service_object_name_is_derived_and_within_limits() {
    let svcs = services();
    let rs = build(&full_input(&svcs));
    let skeleton = build(&input(vec![]));
    let fixed: Vec<&str> = skeleton
        .chains
        .iter()
        .map(|(c, _)| c.name.as_str())
        .chain(skeleton.sets.iter().map(|s| s.name.as_str()))
        .collect();
    let all = rs.chains.iter().map(|(c, _)| c.name.as_str()).chain(rs.sets.iter().map(|s| s.name.as_str()));
    let mut seen = std::collections::BTreeSet::new();
    for n in all {
        assert!(n.len() <= names::NAME_MAX, "{n}");
        assert!(seen.insert(n), "duplicate name {n}");
        let per_count = names::parse_endpoint_count_set(n).is_some();
        assert!(
            fixed.contains(&n) || per_count || names::is_service_object(n),
            "{n} is neither fixed, nor per endpoint count, nor a service object"
        );
    }
}

#[test]
fn jump_targets_exist_and_come_first() {
    let svcs = services();
    let rs = build(&full_input(&svcs));
    let mut created: Vec<&str> = Vec::new();
    let check = |v: &Verdict, created: &Vec<&str>, at: &str| {
        if let Verdict::Jump(t) | Verdict::Goto(t) = v {
            assert!(created.contains(&t.as_str()), "{at} refers to {t} before it exists");
        }
    };
    for (c, rules) in &rs.chains {
        for r in rules {
            for s in &r.stmts {
                match s {
                    Stmt::Verdict(v) => check(v, &created, &c.name),
                    Stmt::VmapInline { entries, .. } => entries.iter().for_each(|(_, v)| check(v, &created, &c.name)),
                    _ => {}
                }
            }
        }
        created.push(&c.name);
    }
    for (set, els) in &rs.elements {
        for e in els {
            if let Some(ElementData::Verdict(v)) = &e.data {
                check(v, &created, set);
            }
        }
    }
}

#[test]
fn one_service_change_touches_only_its_own_objects() {
    // The sync engine relies on this: rebuilding one service yields the same objects
    // for every other service, so a diff stays small. An endpoint change is data only.
    let svcs = services();
    let before = build(&full_input(&svcs));
    let mut inp = full_input(&svcs);
    inp.services[0].backends.insert("".into(), vec![be("198.18.2.13:8080 ready")]);
    let after = build(&inp);
    assert_eq!(
        before.chains.iter().filter(|(c, _)| c.name != names::SERVICES).collect::<Vec<_>>(),
        after.chains.iter().filter(|(c, _)| c.name != names::SERVICES).collect::<Vec<_>>(),
        "no chain but the dispatch rules per count changes"
    );
    let elements = |rs: &Ruleset| -> std::collections::BTreeSet<String> {
        rs.elements.iter().flat_map(|(set, els)| els.iter().map(move |e| format!("{set}: {e:?}"))).collect()
    };
    let (b, a) = (elements(&before), elements(&after));
    let changed: Vec<&String> = b.symmetric_difference(&a).collect();
    assert!(!changed.is_empty());
    for e in &changed {
        // web's ClusterIP, its NodePort, its old endpoints and the new one.
        let web = ["198.19.0.10", "Port(30080)", "198.18.2.11", "198.18.2.12", "198.18.2.13"];
        assert!(web.iter().any(|w| e.contains(w)), "unrelated element {e} changed");
    }
}

/// Loads the full rendered table into a fresh network namespace with `nft -f` and
/// compares `nft list table` with our text. Needs root and the nft binary; without
/// them the test says so and passes, unless NODEPORTD_REQUIRE_NFT is set (CI sets it).
#[test]
fn nft_loads_the_rendering_and_lists_it_back() {
    let required = std::env::var_os("NODEPORTD_REQUIRE_NFT").is_some();
    let usable = std::process::Command::new("unshare")
        .args(["--net", "nft", "list", "ruleset"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !usable {
        assert!(!required, "NODEPORTD_REQUIRE_NFT is set but `unshare --net nft` does not work here");
        eprintln!("skipped: needs root, unshare and nft");
        return;
    }
    let svcs = services();
    let text = render(&build(&full_input(&svcs)));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("full.nft");
    std::fs::write(&file, &text).unwrap();
    let script = format!("nft -f {} && nft list table inet nodeportd", file.display());
    let out = std::process::Command::new("unshare").args(["--net", "sh", "-c", &script]).output().unwrap();
    assert!(out.status.success(), "nft refused the rendering:\n{}", String::from_utf8_lossy(&out.stderr));
    let listed = String::from_utf8_lossy(&out.stdout);
    let (want, got) = (listing::normalize(&text), listing::normalize(&listed));
    let missing: Vec<&String> = want.iter().filter(|l| !got.contains(l)).collect();
    let extra: Vec<&String> = got.iter().filter(|l| !want.contains(l)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "listing differs:\nonly ours: {missing:#?}\nonly nft's: {extra:#?}"
    );
}

#[test]
fn input_comes_from_the_config_and_registry_shaped_ports() {
    let config =
        crate::config::Config { table: "npd".into(), node_name: "edge-1".into(), ..crate::config::Config::default() };
    let inp = Input::from_config(&config);
    assert_eq!((inp.table.as_str(), inp.node_name.as_str()), ("npd", "edge-1"));
    assert_eq!((inp.masquerade_mark, inp.ct_mark), (0x4000, 0x8000));
    let s = svc(CASES[0].service);
    let si = ServiceInput::from_ports(&s, vec![(None, vec![be("198.18.2.11:8080 ready")])]);
    assert_eq!(si.backends[""].len(), 1);
}

/// A ClusterIP service with externalIP 198.18.3.20 port 80, created at `created`.
fn with_contested_ip(name: &str, cip: &str, created: &str) -> Service {
    svc(&format!(
        r#"{{"metadata":{{"name":"{name}","namespace":"default","creationTimestamp":"{created}"}},
        "spec":{{"type":"ClusterIP","clusterIP":"{cip}","clusterIPs":["{cip}"],"externalIPs":["198.18.3.20"],
        "ports":[{{"port":80,"targetPort":8080,"protocol":"TCP"}}]}}}}"#
    ))
}

/// Two services with the same externalIP and port: one map element, for the older one,
/// whatever order they come in (the kernel would refuse two).
#[test]
fn a_contested_external_ip_goes_to_the_oldest_service() {
    let older = with_contested_ip("zz-older", "198.19.0.31", "2026-01-01T00:00:00Z");
    let newer = with_contested_ip("aa-newer", "198.19.0.32", "2026-02-01T00:00:00Z");
    for order in [[&older, &newer], [&newer, &older]] {
        let backends = |s: &Service| {
            let ep = if s.name() == "zz-older" { "198.18.2.11:8080 ready" } else { "198.18.2.12:8080 ready" };
            ports(&[("", &[ep])])
        };
        let rs = build(&input(order.iter().map(|s| ServiceInput { service: s, backends: backends(s) }).collect()));
        let contested: Vec<(String, Option<ElementData>)> = rs
            .elements
            .iter()
            .flat_map(|(map, els)| els.iter().map(move |e| (map, e)))
            .filter(|(_, e)| e.key.first() == Some(&Value::Addr("198.18.3.20".parse().unwrap())))
            .map(|(map, e)| (map.clone(), e.data.clone()))
            .collect();
        // One element in each set the destination is in, all the older one's.
        let sets: Vec<&str> = contested.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(sets, vec!["service-ips-v4-k1", "service-backends-v4", "masquerade-ips-v4"], "{contested:#?}");
        let older_ep = ElementData::Values(vec![Value::Addr("198.18.2.11".parse().unwrap()), Value::Port(8080)]);
        assert_eq!(contested[1].1, Some(older_ep), "{contested:#?}");
        // Each keeps its own ClusterIP.
        let text = render(&rs);
        assert!(text.contains("198.19.0.31 . tcp . 80") && text.contains("198.19.0.32 . tcp . 80"), "{text}");
    }
}

/// A packed Service comes to the planner as its text: every case, and a contested key,
/// plan the same table as typed copies (the text's `creationTimestamp` orders claimants).
#[test]
fn services_as_text_plan_the_same_table_as_typed_ones() {
    let mut all: Vec<(Service, BTreeMap<String, Vec<Backend>>)> =
        CASES.iter().map(|c| (svc(c.service), ports(c.backends))).collect();
    all.push((
        with_contested_ip("zz-older", "198.19.0.31", "2026-01-01T00:00:00Z"),
        ports(&[("", &["198.18.2.11:8080 ready"])]),
    ));
    all.push((
        with_contested_ip("aa-newer", "198.19.0.32", "2026-02-01T00:00:00Z"),
        ports(&[("", &["198.18.2.12:8080 ready"])]),
    ));
    let typed = build(&input(all.iter().map(|(s, b)| ServiceInput { service: s, backends: b.clone() }).collect()));
    // Every other one as text: typed and text copies claim in one order.
    for parity in [0, 1] {
        let changed = all
            .iter()
            .enumerate()
            .map(|(i, (s, b))| {
                let key = crate::model::Key::new(s.namespace(), s.name());
                let service = if i % 2 == parity {
                    let text = serde_json::to_string(&serde_json::to_value(s).unwrap()).unwrap();
                    let created = s.metadata.creation_timestamp.as_deref().map(Box::from);
                    plan::ServiceCopy::Text { text: crate::registry::Squeezed::new(&text), created }
                } else {
                    std::sync::Arc::new(s.clone()).into()
                };
                (key, Some(plan::OwnedService { service, backends: b.clone() }))
            })
            .collect();
        let mut p = plan::Planner::new();
        p.plan(&input(vec![]), changed, true);
        assert_eq!(render(&p.assemble()), render(&typed), "parity {parity}");
    }
    let older = typed.elements.iter().flat_map(|(_, els)| els).any(|e| {
        e.data == Some(ElementData::Values(vec![Value::Addr("198.18.2.11".parse().unwrap()), Value::Port(8080)]))
            && e.key.first() == Some(&Value::Addr("198.18.3.20".parse().unwrap()))
    });
    assert!(older, "the older service holds the contested key");
}

mod planner {
    use super::*;
    use crate::dataplane::plan::{Change, Key, OwnedService, Planner};
    use std::collections::{BTreeMap as Map, BTreeSet};

    /// The kernel as the IR sees it: what a sync leaves there.
    #[derive(Debug, Default, PartialEq)]
    struct Model {
        sets: Map<String, Set>,
        chains: Map<String, (Chain, Vec<Rule>)>,
        elements: Map<(String, Vec<Value>), Option<ElementData>>,
    }

    impl Model {
        fn of(rs: &Ruleset) -> Model {
            let mut m = Model::default();
            m.apply(&Ruleset::default(), rs);
            m
        }
        /// What `partial_sync_ops` does with a (before, after) pair.
        fn apply(&mut self, before: &Ruleset, after: &Ruleset) {
            let names = |rs: &Ruleset| -> BTreeSet<String> { rs.sets.iter().map(|s| s.name.clone()).collect() };
            for gone in names(before).difference(&names(after)) {
                self.sets.remove(gone);
                self.elements.retain(|(s, _), _| s != gone);
            }
            for s in &after.sets {
                self.sets.insert(s.name.clone(), s.clone());
            }
            for (c, _) in &before.chains {
                if !after.chains.iter().any(|(a, _)| a.name == c.name) {
                    self.chains.remove(&c.name);
                }
            }
            for c in &after.chains {
                self.chains.insert(c.0.name.clone(), c.clone());
            }
            let after_els: Map<(String, Vec<Value>), &Option<ElementData>> = after
                .elements
                .iter()
                .flat_map(|(s, els)| els.iter().map(move |e| ((s.clone(), e.key.clone()), &e.data)))
                .collect();
            for (s, els) in &before.elements {
                for e in els {
                    let k = (s.clone(), e.key.clone());
                    if after_els.get(&k) != Some(&&e.data) {
                        self.elements.remove(&k);
                    }
                }
            }
            for (k, d) in after_els {
                self.elements.insert(k, d.clone());
            }
        }
    }

    fn key(s: &Service) -> Key {
        Key::new(s.namespace(), s.name())
    }

    /// Plans a batch, then the waiters it names, as the daemon does; applies each
    /// change to the model.
    fn sync(p: &mut Planner, m: &mut Model, node: &Input, live: &Map<Key, OwnedService>, changed: Vec<Key>) {
        let mut batch: Vec<Key> = changed;
        let mut full = false;
        loop {
            let req = batch.iter().map(|k| (k.clone(), live.get(k).cloned())).collect();
            let planned = p.plan(node, req, full);
            match planned.change {
                Change::Full => *m = Model::of(&p.assemble()),
                Change::Partial { before, after } => m.apply(&before, &after),
            }
            if planned.waiters.is_empty() {
                return;
            }
            batch = planned.waiters;
            full = false;
        }
    }

    fn owned(s: &Service, eps: &[&str]) -> OwnedService {
        OwnedService { service: std::sync::Arc::new(s.clone()).into(), backends: ports(&[("", eps)]) }
    }

    #[test]
    fn a_released_key_goes_to_the_waiter_in_the_next_batch() {
        let mk = |name: &str, cip: &str, created: &str| {
            svc(&format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"default","creationTimestamp":"{created}"}},
                "spec":{{"type":"ClusterIP","clusterIP":"{cip}","clusterIPs":["{cip}"],"externalIPs":["198.18.3.20"],
                "ports":[{{"port":80,"targetPort":8080,"protocol":"TCP"}}]}}}}"#
            ))
        };
        let a = mk("a", "198.19.0.31", "2026-01-01T00:00:00Z");
        let b = mk("b", "198.19.0.32", "2026-02-01T00:00:00Z");
        let node = input(vec![]);
        let mut live = Map::new();
        live.insert(key(&a), owned(&a, &["198.18.2.11:8080 ready"]));
        live.insert(key(&b), owned(&b, &["198.18.2.12:8080 ready"]));
        let (mut p, mut m) = (Planner::new(), Model::default());
        sync(&mut p, &mut m, &node, &live, vec![key(&a), key(&b)]);
        assert_eq!(p.conflicts(), vec!["default/b: 198.18.3.20 . tcp . 80 in service-ips-v4 is held by default/a"]);
        live.remove(&key(&a));
        let planned = p.plan(&node, vec![(key(&a), None)], false);
        assert_eq!(planned.waiters, vec![key(&b)]);
        if let Change::Partial { before, after } = planned.change {
            m.apply(&before, &after);
        }
        sync(&mut p, &mut m, &node, &live, planned.waiters);
        assert!(p.conflicts().is_empty());
        let svcs = [b.clone()];
        let want = build(&input(vec![ServiceInput { service: &svcs[0], backends: live[&key(&b)].backends.clone() }]));
        assert_eq!(m, Model::of(&want));
    }

    use proptest::prelude::*;

    /// Endpoints a step can give a service: some shared between services (hairpin
    /// elements several services add), some on this node, one per family.
    const POOL: &[&str] = &[
        "198.18.2.11:8080 ready node=router-1",
        "198.18.2.12:8080 ready",
        "198.18.2.13:53 ready node=router-1",
        "198.18.2.14:8080 serving terminating",
        "[2001:db8:2::11]:8080 ready node=router-1",
        "[2001:db8:2::12]:8080 ready",
    ];

    fn backends_of(s: &Service, mask: u8) -> OwnedService {
        let eps: Vec<&str> = POOL.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, e)| *e).collect();
        // Every port of the service gets the same endpoints (by port name).
        let mut b = BTreeMap::new();
        for p in &s.spec.ports {
            b.insert(p.name.clone().unwrap_or_default(), eps.iter().map(|e| be(e)).collect());
        }
        OwnedService { service: std::sync::Arc::new(s.clone()).into(), backends: b }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        /// Any sequence of batches applied incrementally leaves the table a full build
        /// of the same services gives.
        #[test]
        fn incremental_batches_end_where_a_full_build_does(
            steps in proptest::collection::vec(
                proptest::collection::vec((0..CASES.len(), proptest::option::of(0u8..64)), 1..4),
                1..12,
            )
        ) {
            let svcs = services();
            let node = input(vec![]);
            let (mut p, mut m) = (Planner::new(), Model::default());
            let mut live: Map<Key, OwnedService> = Map::new();
            for batch in steps {
                let mut keys = Vec::new();
                for (i, mask) in batch {
                    let k = key(&svcs[i]);
                    match mask {
                        Some(mask) => { live.insert(k.clone(), backends_of(&svcs[i], mask)); }
                        None => { live.remove(&k); }
                    }
                    keys.push(k);
                }
                sync(&mut p, &mut m, &node, &live, keys);
            }
            let typed: Vec<_> = live.values().map(|o| (o.service.get(), o.backends.clone())).collect();
            let inputs: Vec<ServiceInput> =
                typed.iter().map(|(s, b)| ServiceInput { service: s, backends: b.clone() }).collect();
            let want = build(&input(inputs));
            prop_assert_eq!(Model::of(&want), m);
        }
    }
}

/// The worker's sync and self-heal logic (`Syncer`) against the in-memory kernel
/// (`dataplane::fake`): what the table holds after each path, and how much was sent.
mod against_the_fake {
    use super::*;
    use crate::dataplane::fake::{Fake, Notify};
    use crate::dataplane::plan::{Key, OwnedService};
    use crate::dataplane::syncer::{Applied, SyncOutcome, SyncRequest, Syncer};
    use crate::nft::list::diff;
    use crate::nft::lower::Lowerer;
    use std::collections::BTreeMap as Map;

    const T: &str = "nodeportd";

    fn block<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
    }

    fn key(s: &Service) -> Key {
        Key::new(s.namespace(), s.name())
    }

    /// Every golden case, as the event loop would hand it over.
    fn live() -> Map<Key, OwnedService> {
        CASES
            .iter()
            .map(|c| {
                let s = svc(c.service);
                (key(&s), OwnedService { service: std::sync::Arc::new(s).into(), backends: ports(c.backends) })
            })
            .collect()
    }

    fn desired(live: &Map<Key, OwnedService>) -> Ruleset {
        let typed: Vec<_> = live.values().map(|o| (o.service.get(), o.backends.clone())).collect();
        build(&input(typed.iter().map(|(s, b)| ServiceInput { service: s, backends: b.clone() }).collect()))
    }

    fn request(live: &Map<Key, OwnedService>, keys: &[Key], rebuild: bool, check: bool) -> SyncRequest {
        let changed = if rebuild {
            live.iter().map(|(k, o)| (k.clone(), Some(o.clone()))).collect()
        } else {
            keys.iter().map(|k| (k.clone(), live.get(k).cloned())).collect()
        };
        SyncRequest { node: input(vec![]), changed, rebuild, check }
    }

    /// One batch as the event loop sends it, then the waiters it names.
    fn sync(s: &mut Syncer<Fake>, live: &Map<Key, OwnedService>, keys: &[Key], rebuild: bool) -> Applied {
        let (mut o, _) = block(s.sync(request(live, keys, rebuild, false), 1));
        let mut applied = o.result.clone().unwrap_or_else(|e| panic!("sync failed: {e}"));
        while !o.waiters.is_empty() {
            let w = std::mem::take(&mut o.waiters);
            o = block(s.sync(request(live, &w, false, false), 1)).0;
            let a = o.result.clone().unwrap_or_else(|e| panic!("sync of waiters failed: {e}"));
            applied.messages += a.messages;
        }
        applied
    }

    /// What the event socket reports, turned into a check as the worker does.
    fn on_event(s: &mut Syncer<Fake>) -> Option<SyncOutcome> {
        assert!(s.kernel_mut().pending_events() > 0, "the fake reported nothing");
        let req = block(async {
            let ev = s.next_event().await;
            s.event(ev).await
        })?;
        Some(block(s.sync(req, 0)).0)
    }

    fn assert_in_sync(s: &mut Syncer<Fake>, live: &Map<Key, OwnedService>) {
        let kt = s.kernel_mut().listing(T).expect("the table exists");
        let d = diff(&desired(live), &kt).unwrap();
        assert!(d.is_empty(), "the fake's table differs from a full build: {d:#?}");
    }

    fn started(live: &Map<Key, OwnedService>) -> Syncer<Fake> {
        let mut s = Syncer::new(Some(Fake::new()));
        let a = sync(&mut s, live, &[], true);
        assert!(a.replaced && a.committed, "{a:?}");
        s
    }

    fn web(live: &Map<Key, OwnedService>) -> Key {
        live.keys().find(|k| k.1 == "web").expect("the nodeport case is named web").clone()
    }

    #[test]
    fn a_full_sync_creates_the_table_and_a_check_without_foreign_commits_sends_nothing() {
        let live = live();
        let mut s = started(&live);
        assert_in_sync(&mut s, &live);
        let (commits, listings) = (s.kernel_mut().commits, s.kernel_mut().listings);
        assert_eq!((commits, listings), (1, 1), "one listing (no table), one transaction");

        // The resync timer: nobody committed since, so neither a listing nor a batch.
        let (o, _) = block(s.sync(request(&live, &[], false, true), 1));
        let a = o.result.unwrap();
        assert!(!a.committed && !a.replaced, "{a:?}");
        assert_eq!((s.kernel_mut().commits, s.kernel_mut().listings), (1, 1));
        // A restart on the same table (a new planner): compared, found equal, nothing sent.
        let mut fresh = Syncer::new(Some(std::mem::take(s.kernel_mut())));
        fresh.kernel_mut().has_events = true;
        let a = sync(&mut fresh, &live, &[], true);
        assert!(!a.committed && !a.replaced, "a restart on an intact table sends nothing: {a:?}");
        assert_in_sync(&mut fresh, &live);
    }

    #[test]
    fn an_incremental_change_sends_only_its_difference_and_lists_nothing() {
        let mut live = live();
        let mut s = started(&live);
        let full_messages = s.kernel_mut().messages;
        let listings = s.kernel_mut().listings;
        let k = web(&live);
        live.get_mut(&k).unwrap().backends.insert(String::new(), vec![be("198.18.2.99:8080 ready")]);
        let a = sync(&mut s, &live, std::slice::from_ref(&k), false);
        assert!(a.committed && !a.replaced, "{a:?}");
        assert!(a.messages > 0 && a.messages < 16, "an endpoint change is a few messages: {a:?}");
        assert!(a.messages < full_messages / 4);
        assert_in_sync(&mut s, &live);

        // Gone, then back.
        live.remove(&k);
        let a = sync(&mut s, &live, std::slice::from_ref(&k), false);
        assert!(a.committed && !a.replaced);
        assert_in_sync(&mut s, &live);
        let back = self::live();
        live.insert(k.clone(), back[&k].clone());
        sync(&mut s, &live, std::slice::from_ref(&k), false);
        assert_in_sync(&mut s, &live);
        assert_eq!(s.kernel_mut().listings, listings, "the incremental path never lists the table");
    }

    #[test]
    fn a_table_changed_behind_our_back_is_repaired_by_difference() {
        let live = live();
        let mut s = started(&live);
        let full_messages = s.kernel_mut().messages;
        s.kernel_mut().tamper(T, Notify::Event, |t| {
            assert!(t.remove_element("service-backends-v4", |_| true), "an element to remove");
            t.add_element("reject-ips-v4", vec![198, 18, 9, 9, 0, 0, 0, 6, 0, 80, 0, 0]);
            t.add_chain("intruder");
            t.flush_chain("nat-prerouting");
        });
        let o = on_event(&mut s).expect("a foreign change asks for a check");
        let a = o.result.unwrap();
        assert!(a.committed && !a.replaced, "{a:?}");
        assert!(a.messages < 10 && a.messages < full_messages / 4, "{a:?} vs {full_messages}");
        assert_in_sync(&mut s, &live);
        assert_eq!(o.batches, 0, "a check the event socket asked for answers no batch of the loop");
    }

    #[test]
    fn the_table_is_replaced_only_when_gone_or_foreign() {
        let live = live();
        let mut s = started(&live);
        s.kernel_mut().delete_table(T, Notify::Event);
        let a = on_event(&mut s).unwrap().result.unwrap();
        assert!(a.committed && a.replaced, "a deleted table is created again: {a:?}");
        assert_in_sync(&mut s, &live);

        // A base chain with another priority cannot be changed in place.
        s.kernel_mut().tamper(T, Notify::Event, |t| t.set_priority("nat-prerouting", 50));
        let a = on_event(&mut s).unwrap().result.unwrap();
        assert!(a.committed && a.replaced, "{a:?}");
        assert_in_sync(&mut s, &live);
    }

    #[test]
    fn a_refused_batch_changes_nothing_and_the_retry_repairs_by_difference() {
        for errno in [libc::EBUSY, libc::ENOENT] {
            let mut live = live();
            let mut s = started(&live);
            let before = s.kernel_mut().canonical(T);
            let k = web(&live);
            live.remove(&k);
            s.kernel_mut().fail_next(errno);
            let (o, stale) = block(s.sync(request(&live, std::slice::from_ref(&k), false, false), 1));
            let e = o.result.expect_err("the injected fault fails the batch");
            assert!(e.contains(&std::io::Error::from_raw_os_error(errno).to_string()), "{e}");
            assert!(stale.is_empty(), "no conntrack cleanup for a change that did not land");
            assert_eq!(s.kernel_mut().canonical(T), before, "nothing of a refused batch is applied");
            // The daemon answers an error with a rebuild (after a backoff).
            let a = sync(&mut s, &live, &[], true);
            assert!(a.committed && !a.replaced, "the retry compares and sends the difference: {a:?}");
            assert!(a.messages < 10, "{a:?}");
            assert_in_sync(&mut s, &live);
        }
    }

    #[test]
    fn lost_events_are_recovered_by_the_generation_and_a_comparison() {
        let live = live();
        let mut s = started(&live);
        // Our own big commit overflowed the event socket: the generation is ours, no check.
        s.kernel_mut().overrun();
        assert!(on_event(&mut s).is_none(), "an overrun with nobody else committing asks for nothing");
        let listings = s.kernel_mut().listings;

        // Someone changed the table and the event was lost in an overrun.
        s.kernel_mut().tamper(T, Notify::Overrun, |t| {
            t.remove_element("nodeport-ips-v4", |_| true);
        });
        let a = on_event(&mut s).expect("the generation moved: check").result.unwrap();
        assert!(a.committed && !a.replaced, "{a:?}");
        assert_eq!(s.kernel_mut().listings, listings + 1, "compared once");
        assert_in_sync(&mut s, &live);

        // Someone committed while our own transaction ran with the events muted: the
        // generation moved by two, so the next overrun (or timer) compares.
        let mut live2 = live.clone();
        let k = web(&live2);
        live2.remove(&k);
        let l = Lowerer::new(Some(Family::Inet), T);
        let intruder = Chain { name: "intruder".into(), base: None, comment: None };
        s.kernel_mut().foreign_during_next(vec![l.new_chain(&intruder)]);
        sync(&mut s, &live2, std::slice::from_ref(&k), false);
        assert_eq!(s.kernel_mut().pending_events(), 0, "muted: the foreign commit's event is lost");
        s.kernel_mut().overrun();
        let a = on_event(&mut s).expect("our generation is unknown: check").result.unwrap();
        assert!(a.committed && !a.replaced, "{a:?}");
        assert_in_sync(&mut s, &live2);
        // The resync timer does the same without events.
        s.kernel_mut().tamper(T, Notify::Silent, |t| t.add_chain("intruder"));
        let (o, _) = block(s.sync(request(&live2, &[], false, true), 1));
        assert!(o.result.unwrap().committed);
        assert_in_sync(&mut s, &live2);
    }

    /// The clients an affinity set remembers are added by the packet path, not by us: a
    /// repair, the resync timer and a restart keep them (a client stays on its endpoint),
    /// while a real drift next to them is still repaired.
    #[test]
    fn the_packet_paths_affinity_entries_survive_a_repair_and_a_restart() {
        let live = live();
        let mut s = started(&live);
        let client = vec![198, 18, 1, 2];
        let mut aff = String::new();
        // The packet path's `update @aff4-… { ip saddr }` bumps no generation.
        s.kernel_mut().tamper(T, Notify::Silent, |t| {
            aff = t.set_names().into_iter().find(|n| n.starts_with("aff4-")).expect("the affinity case has a set");
            t.add_element(&aff, client.clone());
        });
        let remembered = |s: &mut Syncer<Fake>| {
            let mut found = false;
            s.kernel_mut().tamper(T, Notify::Silent, |t| found = t.elements(&aff).iter().any(|e| e.key == client));
            found
        };
        assert_in_sync(&mut s, &live);

        // A foreign change next to it: repaired by difference, the client kept.
        s.kernel_mut().tamper(T, Notify::Event, |t| {
            assert!(t.remove_element("service-backends-v4", |_| true));
        });
        let a = on_event(&mut s).expect("a foreign change asks for a check").result.unwrap();
        assert!(a.committed && !a.replaced, "{a:?}");
        assert_in_sync(&mut s, &live);
        assert!(remembered(&mut s), "the repair deleted the packet path's affinity entry");

        // The resync timer with a foreign commit since: compared, nothing of ours to send.
        s.kernel_mut().tamper(T, Notify::Silent, |t| t.add_chain("intruder"));
        let (o, _) = block(s.sync(request(&live, &[], false, true), 1));
        assert!(o.result.unwrap().committed);
        assert!(remembered(&mut s), "the resync deleted the packet path's affinity entry");

        // A restart on the same table: compared, nothing sent, the client still remembered.
        let mut fresh = Syncer::new(Some(std::mem::take(s.kernel_mut())));
        fresh.kernel_mut().has_events = true;
        let a = sync(&mut fresh, &live, &[], true);
        assert!(!a.committed && !a.replaced, "a restart on an intact table sends nothing: {a:?}");
        assert!(remembered(&mut fresh), "the restart deleted the packet path's affinity entry");
    }

    use proptest::prelude::*;

    /// Endpoints a step can give a service (as in the planner's property test).
    const POOL: &[&str] = &[
        "198.18.2.11:8080 ready node=router-1",
        "198.18.2.12:8080 ready",
        "198.18.2.13:53 ready node=router-1",
        "198.18.2.14:8080 serving terminating",
        "[2001:db8:2::11]:8080 ready node=router-1",
        "[2001:db8:2::12]:8080 ready",
    ];

    fn with_endpoints(s: &Service, mask: u8) -> OwnedService {
        let eps: Vec<Backend> =
            POOL.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, e)| be(e)).collect();
        let backends = s.spec.ports.iter().map(|p| (p.name.clone().unwrap_or_default(), eps.clone())).collect();
        OwnedService { service: std::sync::Arc::new(s.clone()).into(), backends }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
        /// Any sequence of updates through the incremental path leaves the kernel (the
        /// fake, which refuses any batch the kernel would refuse) holding the table a
        /// full build of the final state gives.
        #[test]
        fn incremental_updates_leave_the_kernel_where_a_full_build_does(
            steps in proptest::collection::vec(
                proptest::collection::vec((0..CASES.len(), proptest::option::of(0u8..64)), 1..4),
                1..10,
            )
        ) {
            let svcs = services();
            let mut live: Map<Key, OwnedService> = Map::new();
            let mut s = Syncer::new(Some(Fake::new()));
            sync(&mut s, &live, &[], true);
            for batch in steps {
                let mut keys = Vec::new();
                for (i, mask) in batch {
                    let k = key(&svcs[i]);
                    match mask {
                        Some(m) => { live.insert(k.clone(), with_endpoints(&svcs[i], m)); }
                        None => { live.remove(&k); }
                    }
                    keys.push(k);
                }
                let a = sync(&mut s, &live, &keys, false);
                prop_assert!(!a.replaced, "an update replaced the table");
            }
            let mut full = Syncer::new(Some(Fake::new()));
            sync(&mut full, &live, &[], true);
            prop_assert_eq!(s.kernel_mut().canonical(T), full.kernel_mut().canonical(T));
            let d = diff(&desired(&live), &s.kernel_mut().listing(T).unwrap()).unwrap();
            prop_assert!(d.is_empty(), "{:#?}", d);
        }
    }
}
