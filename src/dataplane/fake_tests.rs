//! The fake against the real kernel: the same batches, in order, to both; each must
//! be taken or refused alike (same errno), and leave the same listing.

use std::collections::BTreeMap;

use super::*;
use crate::dataplane::plan::{Change, OwnedService, Planner};
use crate::dataplane::{build, Input, ServiceInput};
use crate::model::{Backend, Service};
use crate::nft::ir::{self, ElementData, Value, Verdict};
use crate::nft::lower::Lowerer;
use crate::nft::sync::{full_sync_ops, partial_sync_ops, Plan};
use crate::nft::NftSocket;

include!("cases.rs");

#[path = "../../tests/nft_common/mod.rs"]
mod netns;

const T: &str = "nodeportd";

fn el(key: Vec<Value>, data: Option<ElementData>) -> ir::Element {
    ir::Element { key, data, timeout: None }
}

/// Batches that exercise what the fake claims to model, each with what the kernel
/// answers (`None`: taken).
fn batches() -> Vec<(&'static str, Vec<Op>, Option<i32>)> {
    let svcs: Vec<Service> = CASES.iter().map(|c| svc(c.service)).collect();
    let inputs = || svcs.iter().zip(CASES).map(|(s, c)| ServiceInput { service: s, backends: ports(c.backends) });
    let want = build(&input(inputs().collect()));
    let l = Lowerer::new(want.family, T);
    let set = |name: &str| want.sets.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("set {name}")).clone();
    let chain = |prefix: &str| {
        want.chains.iter().find(|c| c.0.name.starts_with(prefix)).unwrap_or_else(|| panic!("chain {prefix}")).0.clone()
    };

    // The incremental path: web gets another endpoint.
    let mut p = Planner::new();
    let all = inputs()
        .map(|i| {
            let key = crate::model::Key::new(i.service.namespace(), i.service.name());
            (key, Some(OwnedService { service: std::sync::Arc::new(i.service.clone()).into(), backends: i.backends }))
        })
        .collect();
    p.plan(&input(vec![]), all, true);
    let web = svc(CASES.iter().find(|c| c.name == "nodeport").expect("the nodeport case").service);
    let key = crate::model::Key::new(web.namespace(), web.name());
    let backends = ports(&[("", &["198.18.2.99:8080 ready"])]);
    let planned = p.plan(
        &input(vec![]),
        vec![(key, Some(OwnedService { service: std::sync::Arc::new(web).into(), backends }))],
        false,
    );
    let Change::Partial { before, after } = planned.change else { panic!("a partial change") };
    let Plan::Partial(incremental) = partial_sync_ops(&before, &after).unwrap() else { panic!("partial ops") };

    let mut no_hairpin = want.clone();
    no_hairpin.sets.retain(|s| s.name != "hairpin-v4");
    no_hairpin.elements.retain(|(s, _)| s != "hairpin-v4");
    let nope = ir::Set { name: "nope".into(), ..set("nodeport-ips-v4") };
    let a = |ip: &str| Value::Addr(ip.parse().unwrap());
    let backends_el = want.elements.iter().find(|(s, _)| s == "service-backends-v4").expect("backends").1[0].clone();
    let other_data = el(backends_el.key.clone(), Some(ElementData::Values(vec![a("198.18.2.250"), Value::Port(1)])));
    let svc_chain = chain("svc4-");
    let mut moved = chain("nat-prerouting");
    if let Some(b) = moved.base.as_mut() {
        b.priority += 7;
    }
    let fresh_key = vec![a("198.19.9.9"), Value::Proto(6), Value::Port(80)];
    let reject = el(fresh_key.clone(), None);
    vec![
        ("the full table", full_sync_ops(&want).unwrap(), None),
        ("a rule looking up a missing set", full_sync_ops(&no_hairpin).unwrap(), Some(libc::ENOENT)),
        (
            "elements of a missing set",
            l.elements(&nope, [&el(vec![a("198.18.7.7")], None)], true).unwrap(),
            Some(libc::ENOENT),
        ),
        ("deleting a missing chain", vec![l.del_chain("nope")], Some(libc::ENOENT)),
        ("deleting a missing set", vec![l.del_set("nope")], Some(libc::ENOENT)),
        (
            "deleting a missing element",
            l.elements(&set("nodeport-ips-v4"), [&el(vec![a("198.18.7.7")], None)], false).unwrap(),
            Some(libc::ENOENT),
        ),
        ("deleting a chain a map element jumps to", vec![l.del_chain(&svc_chain.name)], Some(libc::EBUSY)),
        ("deleting a set a rule looks up", vec![l.del_set("hairpin-v4")], Some(libc::EBUSY)),
        (
            "deleting a chain a rule jumps to",
            vec![l.flush_chain("services"), l.del_chain("services")],
            Some(libc::EBUSY),
        ),
        (
            "an element that exists with other data",
            l.elements(&set("service-backends-v4"), [&other_data], true).unwrap(),
            Some(libc::EEXIST),
        ),
        (
            "a verdict element jumping to a missing chain",
            l.elements(
                &set("affinity-ips-v4"),
                [&el(fresh_key, Some(ElementData::Verdict(Verdict::Goto("nope".into()))))],
                true,
            )
            .unwrap(),
            Some(libc::ENOENT),
        ),
        ("a base chain with another priority", vec![l.new_chain(&moved)], Some(libc::EOPNOTSUPP)),
        (
            "a batch whose last message fails",
            [l.elements(&set("reject-ips-v4"), [&reject], true).unwrap(), vec![l.del_chain("nope")]].concat(),
            Some(libc::ENOENT),
        ),
        ("the incremental path", incremental, None),
        ("an element added again (no NLM_F_EXCL)", l.elements(&set("reject-ips-v4"), [&reject], true).unwrap(), None),
        ("deleting the table", vec![l.del_table()], None),
        ("deleting it again", vec![l.del_table()], Some(libc::ENOENT)),
    ]
}

type Step = (Result<(), Vec<i32>>, Option<KernelTable>);

fn errnos(r: Result<TxStats, NftError>) -> Result<(), Vec<i32>> {
    r.map(|_| ()).map_err(|e| e.errnos())
}

#[test]
fn the_fake_takes_and_refuses_batches_as_the_kernel_does() {
    let fake: Vec<Step> = {
        let mut f = Fake::new();
        batches().into_iter().map(|(_, ops, _)| (errnos(f.our_batch(&ops)), f.canonical(T))).collect()
    };
    for ((what, _, want), (got, _)) in batches().iter().zip(&fake) {
        match want {
            None => assert!(got.is_ok(), "{what}: the fake refused it: {got:?}"),
            Some(errno) => assert_eq!(got.as_ref().err().and_then(|e| e.first()), Some(errno), "{what}"),
        }
    }
    let Some(ns) = netns::Netns::new() else { return };
    let kernel: Vec<Step> = ns.run(|| async {
        let mut sock = NftSocket::new().expect("nf_tables socket");
        let mut out = Vec::new();
        for (_, ops, _) in batches() {
            let r = errnos(sock.transact(&ops, None).await);
            let t = list::list_table(&mut sock, NFPROTO_INET, T).await.expect("list");
            out.push((r, t.map(canonical)));
        }
        out
    });
    for (((what, _, _), k), f) in batches().iter().zip(&kernel).zip(&fake) {
        assert_eq!(k.0.as_ref().map_err(|e| e.first()), f.0.as_ref().map_err(|e| e.first()), "{what}: kernel vs fake");
        assert!(k.1 == f.1, "{what}: the listings differ:\nkernel: {:#?}\nfake: {:#?}", k.1, f.1);
    }
}
