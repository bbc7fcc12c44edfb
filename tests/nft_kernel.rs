//! nf_tables over netlink against the real kernel, each test in its own
//! network namespace: what we program is read back with `nft list`.

mod nft_common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use nft_common::Netns;
use nodeportd::nft::ir::*;
use nodeportd::nft::repair::{repair, Repair};
use nodeportd::nft::{self, list, render, synthetic, NftSocket, TableEvent};

const T: &str = "nodeportd";

fn v4(a: u8, b: u8, c: u8, d: u8) -> Value {
    Value::Addr(IpAddr::V4(Ipv4Addr::new(a, b, c, d)))
}

fn chain(name: &str) -> Chain {
    Chain { name: name.into(), base: None, comment: None }
}

fn rule(stmts: Vec<Stmt>) -> Rule {
    Rule { stmts, comment: None }
}

fn cmp(field: Field, value: Value) -> Stmt {
    Stmt::Cmp { field, op: CmpOp::Eq, value: CmpValue::Value(value) }
}

fn set(name: &str, key: Vec<DataType>, data: Option<DataType>) -> Set {
    Set {
        name: name.into(),
        key,
        data: data.into_iter().collect(),
        typeof_key: None,
        typeof_data: None,
        flags: SetFlags::default(),
        timeout: None,
        comment: None,
    }
}

fn elem(key: Vec<Value>, data: Option<ElementData>) -> Element {
    Element { key, data, timeout: None }
}

fn goto(c: &str) -> Option<ElementData> {
    Some(ElementData::Verdict(Verdict::Goto(c.into())))
}

/// One ruleset using every statement and set kind the IR has.
fn every_statement() -> Ruleset {
    let mut allowed = set("allowed-v4", vec![DataType::Ipv4Addr], None);
    allowed.flags.interval = true;
    let mut affinity = set("affinity", vec![DataType::Ipv4Addr], None);
    affinity.flags.dynamic = true;
    affinity.flags.timeout = true;
    affinity.timeout = Some(10800);
    let mut nodeport_ips = set("nodeport-ips-v4", vec![DataType::Ipv4Addr], None);
    nodeport_ips.comment = Some("local addresses for NodePorts".into());
    let v6 = Value::Addr(IpAddr::V6("2001:db8::10".parse::<Ipv6Addr>().unwrap()));
    let filter = Chain {
        name: "filter-input".into(),
        base: Some(BaseChain { kind: ChainType::Filter, hook: Hook::Input, priority: 0, policy: None }),
        comment: Some("rejects traffic to services without endpoints".into()),
    };
    let prerouting = Chain {
        name: "nat-prerouting".into(),
        base: Some(BaseChain { kind: ChainType::Nat, hook: Hook::Prerouting, priority: -100, policy: None }),
        comment: None,
    };
    Ruleset {
        family: Some(Family::Inet),
        table: T.into(),
        sets: vec![
            nodeport_ips,
            allowed,
            affinity,
            set("service-nodeports", vec![DataType::InetProto, DataType::InetService], Some(DataType::Verdict)),
            set(
                "service-ips-v6",
                vec![DataType::Ipv6Addr, DataType::InetProto, DataType::InetService],
                Some(DataType::Verdict),
            ),
            set("port-addr", vec![DataType::InetService], Some(DataType::Ipv4Addr)),
        ],
        elements: vec![
            ("nodeport-ips-v4".into(), vec![elem(vec![v4(198, 18, 0, 1)], None), elem(vec![v4(198, 18, 0, 2)], None)]),
            (
                "allowed-v4".into(),
                vec![
                    elem(vec![Value::Prefix("198.18.0.0/16".parse().unwrap())], None),
                    elem(vec![Value::Prefix("198.19.1.0/24".parse().unwrap())], None),
                ],
            ),
            ("service-nodeports".into(), vec![elem(vec![Value::Proto(6), Value::Port(30080)], goto("svc-a"))]),
            ("service-ips-v6".into(), vec![elem(vec![v6, Value::Proto(17), Value::Port(53)], goto("ep-6"))]),
            ("port-addr".into(), vec![elem(vec![Value::Port(80)], Some(ElementData::Values(vec![v4(198, 19, 0, 9)])))]),
        ],
        chains: vec![
            (
                chain("ep-a"),
                vec![
                    rule(vec![Stmt::MarkOr { field: Field::CtMark, bits: 0x8000 }]),
                    rule(vec![
                        cmp(Field::L4Proto, Value::Proto(6)),
                        Stmt::Dnat { addr: IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1)), port: Some(8080) },
                    ]),
                ],
            ),
            (
                chain("ep-6"),
                vec![
                    rule(vec![
                        cmp(Field::L4Proto, Value::Proto(17)),
                        Stmt::Dnat { addr: "2001:db8::2".parse().unwrap(), port: Some(5353) },
                    ]),
                    rule(vec![Stmt::Dnat { addr: IpAddr::V4(Ipv4Addr::new(198, 19, 0, 5)), port: None }]),
                ],
            ),
            (
                chain("svc-a"),
                vec![
                    rule(vec![Stmt::SetUpdate { set: "affinity".into(), key: Field::IpSaddr }]),
                    rule(vec![
                        Stmt::InSet { field: Field::IpSaddr, set: "affinity".into(), negate: false },
                        Stmt::Verdict(Verdict::Goto("ep-a".into())),
                    ]),
                    rule(vec![Stmt::VmapInline {
                        key: Field::NumgenRandom(2),
                        entries: vec![
                            (Value::Mark(0), Verdict::Goto("ep-a".into())),
                            (Value::Mark(1), Verdict::Goto("ep-6".into())),
                        ],
                    }]),
                ],
            ),
            (
                chain("services"),
                vec![
                    rule(vec![Stmt::VmapNamed {
                        key: Field::Concat(vec![Field::Ip6Daddr, Field::L4Proto, Field::ThDport]),
                        map: "service-ips-v6".into(),
                    }]),
                    rule(vec![
                        Stmt::Bits { field: Field::FibDaddrType, mask: u32::MAX, value: 2, negate: false },
                        Stmt::InSet { field: Field::IpDaddr, set: "nodeport-ips-v4".into(), negate: false },
                        Stmt::VmapNamed {
                            key: Field::Concat(vec![Field::L4Proto, Field::ThDport]),
                            map: "service-nodeports".into(),
                        },
                    ]),
                ],
            ),
            (
                chain("masquerading"),
                vec![
                    rule(vec![
                        Stmt::Bits { field: Field::MetaMark, mask: 0x4000, value: 0, negate: false },
                        Stmt::Verdict(Verdict::Return),
                    ]),
                    rule(vec![Stmt::MarkAndNot { field: Field::MetaMark, bits: 0x4000 }]),
                    rule(vec![Stmt::Masquerade { fully_random: true }]),
                    rule(vec![Stmt::Masquerade { fully_random: false }]),
                ],
            ),
            (
                filter,
                vec![
                    Rule {
                        stmts: vec![
                            Stmt::Bits { field: Field::CtState, mask: 8, value: 8, negate: false },
                            Stmt::Counter,
                        ],
                        comment: Some("new connections".into()),
                    },
                    rule(vec![
                        Stmt::Bits { field: Field::CtStatus, mask: 0x20, value: 0x20, negate: false },
                        Stmt::Verdict(Verdict::Accept),
                    ]),
                    rule(vec![
                        Stmt::Cmp { field: Field::IifName, op: CmpOp::Eq, value: CmpValue::IfName("lo".into()) },
                        Stmt::Verdict(Verdict::Continue),
                    ]),
                    rule(vec![
                        Stmt::Cmp { field: Field::IifName, op: CmpOp::Ne, value: CmpValue::IfNamePrefix("wg".into()) },
                        cmp(Field::MetaMark, Value::Mark(1)),
                        cmp(Field::CtMark, Value::Mark(0x8000)),
                        Stmt::Verdict(Verdict::Drop),
                    ]),
                    rule(vec![
                        Stmt::InPrefix { field: Field::IpSaddr, net: "198.18.0.0/15".parse().unwrap(), negate: false },
                        Stmt::InSet { field: Field::IpSaddr, set: "allowed-v4".into(), negate: true },
                        Stmt::Reject(RejectKind::IcmpxAdminProhibited),
                    ]),
                    rule(vec![
                        cmp(Field::NfProto, Value::Proto(10)),
                        cmp(Field::Ip6Saddr, Value::Addr("2001:db8::1".parse().unwrap())),
                        Stmt::Reject(RejectKind::TcpReset),
                    ]),
                    rule(vec![cmp(Field::ThDport, Value::Port(30080)), Stmt::Reject(RejectKind::Default)]),
                ],
            ),
            (prerouting, vec![rule(vec![Stmt::Verdict(Verdict::Jump("services".into()))])]),
        ],
    }
}

#[test]
fn every_statement_reads_back_with_nft_list() {
    let Some(ns) = Netns::new() else { return };
    let drift = ns.run(|| async {
        let mut s = NftSocket::new().unwrap();
        let rs = every_statement();
        nft::full_sync(&mut s, &rs).await.unwrap();
        list::verify(&mut s, &rs).await.unwrap()
    });
    assert!(drift.is_empty(), "listing differs from what we sent: {drift:?}");
    let got = ns.nft(&["list", "table", "inet", T]);
    assert_eq!(got, EVERY_STATEMENT_NFT, "nft list output:\n{got}");
}

/// What `nft list table inet nodeportd` (nftables 1.0.6) prints for
/// [`every_statement`]: each statement as nft spells it.
const EVERY_STATEMENT_NFT: &str = r#"table inet nodeportd {
	set nodeport-ips-v4 {
		type ipv4_addr
		comment "local addresses for NodePorts"
		elements = { 198.18.0.1, 198.18.0.2 }
	}

	set allowed-v4 {
		type ipv4_addr
		flags interval
		elements = { 198.18.0.0/16, 198.19.1.0/24 }
	}

	set affinity {
		type ipv4_addr
		size 65535
		flags dynamic,timeout
		timeout 3h
	}

	map service-nodeports {
		type inet_proto . inet_service : verdict
		elements = { tcp . 30080 : goto svc-a }
	}

	map service-ips-v6 {
		type ipv6_addr . inet_proto . inet_service : verdict
		elements = { 2001:db8::10 . udp . 53 : goto ep-6 }
	}

	map port-addr {
		type inet_service : ipv4_addr
		elements = { 80 : 198.19.0.9 }
	}

	chain ep-a {
		ct mark set ct mark | 0x00008000
		meta l4proto tcp dnat ip to 198.19.0.1:8080
	}

	chain ep-6 {
		meta l4proto udp dnat ip6 to [2001:db8::2]:5353
		dnat ip to 198.19.0.5
	}

	chain svc-a {
		update @affinity { ip saddr }
		ip saddr @affinity goto ep-a
		numgen random mod 2 vmap { 0 : goto ep-a, 1 : goto ep-6 }
	}

	chain services {
		ip6 daddr . meta l4proto . th dport vmap @service-ips-v6
		fib daddr type local ip daddr @nodeport-ips-v4 meta l4proto . th dport vmap @service-nodeports
	}

	chain masquerading {
		meta mark & 0x00004000 == 0x00000000 return
		meta mark set meta mark & 0xffffbfff
		masquerade fully-random
		masquerade
	}

	chain filter-input {
		comment "rejects traffic to services without endpoints"
		type filter hook input priority filter; policy accept;
		ct state new counter packets 0 bytes 0 comment "new connections"
		ct status dnat accept
		iifname "lo" continue
		iifname != "wg*" meta mark 0x00000001 ct mark 0x00008000 drop
		ip saddr 198.18.0.0/15 ip saddr != @allowed-v4 reject with icmpx admin-prohibited
		ip6 saddr 2001:db8::1 meta l4proto tcp reject with tcp reset
		th dport 30080 reject
	}

	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}
}
"#;

fn list_all(ns: &Netns) -> String {
    ns.nft(&["list", "ruleset"])
}

/// `nft list` output with chain/set blocks sorted: a partial sync appends new
/// chains at the end of the table while a fresh sync creates them in order.
fn canonical(text: &str) -> Vec<String> {
    let mut blocks: Vec<String> = text
        .split("\n\n")
        .map(|b| b.trim_start_matches("table inet nodeportd {\n").trim_end_matches("\n}\n").to_string())
        .collect();
    blocks.sort();
    blocks
}

#[test]
fn a_bad_rule_changes_nothing_and_the_error_names_it() {
    let Some(ns) = Netns::new() else { return };
    ns.run(|| async {
        let mut s = NftSocket::new().unwrap();
        nft::full_sync(&mut s, &synthetic::ruleset(3, 2)).await.unwrap();
    });
    let before = list_all(&ns);
    let (chain_err, set_err) = ns.run(|| async {
        let mut s = NftSocket::new().unwrap();
        let mut bad = synthetic::ruleset(5, 2);
        bad.chains[0].1.push(rule(vec![Stmt::Verdict(Verdict::Jump("no-such-chain".into()))]));
        let chain_err = nft::full_sync(&mut s, &bad).await.unwrap_err();
        let mut bad = synthetic::ruleset(5, 2);
        bad.chains[1].1.push(rule(vec![Stmt::VmapNamed { key: Field::IpDaddr, map: "no-such-map".into() }]));
        let set_err = nft::full_sync(&mut s, &bad).await.unwrap_err();
        (chain_err.to_string(), set_err.to_string())
    });
    assert!(
        chain_err.contains("rule #1 of chain mark-for-masquerade")
            && chain_err.contains("\"no-such-chain\" does not exist"),
        "{chain_err}"
    );
    assert!(
        set_err.contains("rule #3 of chain masquerading") && set_err.contains("\"no-such-map\" does not exist"),
        "{set_err}"
    );
    assert_eq!(list_all(&ns), before, "a refused batch changed the kernel");
}

#[test]
fn partial_sync_equals_a_fresh_full_sync() {
    let (Some(a), Some(b)) = (Netns::new(), Netns::new()) else {
        return;
    };
    let step0 = synthetic::ruleset(20, 3);
    let mut step1 = synthetic::ruleset(23, 3);
    synthetic::change_endpoint(&mut step1, 3);
    synthetic::change_endpoint(&mut step1, 21);
    let mut step2 = synthetic::ruleset(12, 3);
    synthetic::change_endpoint(&mut step2, 3);
    synthetic::change_endpoint(&mut step2, 4);
    let steps = [step0, step1, step2];
    for i in 1..steps.len() {
        let (prev, next) = (steps[i - 1].clone(), steps[i].clone());
        let (report, drift) = a.run(move || async move {
            let mut s = NftSocket::new().unwrap();
            if i == 1 {
                nft::full_sync(&mut s, &prev).await.unwrap();
            }
            let r = nft::partial_sync(&mut s, &prev, &next).await.unwrap();
            (r, list::verify(&mut s, &next).await.unwrap())
        });
        assert!(!report.full, "step {i} fell back to a full sync");
        assert!(drift.is_empty(), "step {i}: {drift:?}");
        let next = steps[i].clone();
        b.run(move || async move {
            let mut s = NftSocket::new().unwrap();
            nft::full_sync(&mut s, &next).await.unwrap();
        });
        assert_eq!(canonical(&list_all(&a)), canonical(&list_all(&b)), "step {i}");
    }
}

#[test]
fn foreign_tables_are_untouched() {
    let Some(ns) = Netns::new() else { return };
    ns.nft_stdin(
        "table inet foreign {\n chain c {\n type filter hook input priority 0;\n ip saddr 198.18.0.9 drop\n }\n}\n\
         table ip nodeportd {\n chain x {\n ip daddr 198.18.0.10 accept\n }\n}\n",
    );
    let foreign = ns.nft(&["list", "table", "inet", "foreign"]);
    let same_name = ns.nft(&["list", "table", "ip", T]);
    let existed = ns.run(|| async {
        let mut s = NftSocket::new().unwrap();
        let a = synthetic::ruleset(4, 2);
        let mut b = synthetic::ruleset(5, 2);
        synthetic::change_endpoint(&mut b, 1);
        nft::full_sync(&mut s, &a).await.unwrap();
        nft::partial_sync(&mut s, &a, &b).await.unwrap();
        nft::full_sync(&mut s, &b).await.unwrap();
        let first = nft::delete_table(&mut s, Family::Inet, T).await.unwrap();
        let second = nft::delete_table(&mut s, Family::Inet, T).await.unwrap();
        (first, second)
    });
    assert_eq!(existed, (true, false), "delete_table: present, then absent");
    assert_eq!(ns.nft(&["list", "table", "inet", "foreign"]), foreign);
    assert_eq!(ns.nft(&["list", "table", "ip", T]), same_name);
    let (ok, _, _) = ns.nft_status(&["list", "table", "inet", T]);
    assert!(!ok, "our table should be gone");
}

#[test]
fn events_report_other_processes_changes_only() {
    let Some(ns) = Netns::new() else { return };
    let name = ns.name.clone();
    ns.run(move || async move {
        use std::time::Duration;
        use tokio::time::timeout;
        let nft_cli = |args: &[&str]| {
            nft_common::nft_in(&name, args);
        };
        let mut ev = nft::EventStream::new(nodeportd::nft::wire::NFPROTO_INET, T).unwrap();
        let mut s = NftSocket::new().unwrap();
        let rs = synthetic::ruleset(3, 2);
        nft::full_sync(&mut s, &rs).await.unwrap();
        let quiet = timeout(Duration::from_millis(300), ev.next_event()).await;
        assert!(quiet.is_err(), "our own sync was reported: {quiet:?}");

        nft_cli(&["delete", "table", "inet", T]);
        let e = timeout(Duration::from_secs(5), ev.next_event()).await.unwrap().unwrap();
        assert!(matches!(e, TableEvent::Changed { deleted: true, .. }), "{e:?}");

        nft::full_sync(&mut s, &rs).await.unwrap();
        nft_cli(&["add", "table", "inet", "someone-else"]);
        nft_cli(&["add", "rule", "inet", T, "services", "counter"]);
        let e = timeout(Duration::from_secs(5), ev.next_event()).await.unwrap().unwrap();
        assert!(matches!(e, TableEvent::Changed { deleted: false, .. }), "{e:?}");

        nft_cli(&["flush", "ruleset"]);
        let e = timeout(Duration::from_secs(5), ev.next_event()).await.unwrap().unwrap();
        assert!(matches!(e, TableEvent::Changed { deleted: true, .. }), "{e:?}");
    });
}

/// While muted (the daemon's own commits) the socket is out of the multicast group: the
/// kernel builds no notifications, so changes go unseen, and only the generation tells.
#[test]
fn muted_events_see_nothing_and_the_generation_tells() {
    let Some(ns) = Netns::new() else { return };
    let name = ns.name.clone();
    ns.run(move || async move {
        use std::time::Duration;
        use tokio::time::timeout;
        let nft_cli = |args: &[&str]| {
            nft_common::nft_in(&name, args);
        };
        let mut ev = nft::EventStream::new(nodeportd::nft::wire::NFPROTO_INET, T).unwrap();
        let mut s = NftSocket::new().unwrap();
        nft::full_sync(&mut s, &synthetic::ruleset(3, 2)).await.unwrap();

        ev.mute().unwrap();
        let g0 = s.generation().await.unwrap();
        nft_cli(&["add", "rule", "inet", T, "services", "counter"]);
        let g1 = s.generation().await.unwrap();
        ev.unmute().unwrap();
        let missed = timeout(Duration::from_millis(300), ev.next_event()).await;
        assert!(missed.is_err(), "a change made while muted was reported: {missed:?}");
        assert_eq!(g1, g0.wrapping_add(1), "the generation did not count the unseen commit");

        nft_cli(&["delete", "table", "inet", T]);
        let e = timeout(Duration::from_secs(5), ev.next_event()).await.unwrap().unwrap();
        assert!(matches!(e, TableEvent::Changed { deleted: true, .. }), "after unmute: {e:?}");
    });
}

#[test]
fn a_stale_generation_refuses_the_batch() {
    let Some(ns) = Netns::new() else { return };
    let (g0, g1, errnos) = ns.run(|| async {
        let mut s = NftSocket::new().unwrap();
        let g0 = s.generation().await.unwrap();
        let rs = synthetic::ruleset(2, 2);
        nft::full_sync(&mut s, &rs).await.unwrap();
        let g1 = s.generation().await.unwrap();
        let ops = nft::sync::full_sync_ops(&rs).unwrap();
        let err = s.transact(&ops, Some(g0)).await.unwrap_err();
        (g0, g1, err.errnos())
    });
    assert!(g1 > g0, "generation did not move: {g0} -> {g1}");
    assert_eq!(errnos, vec![libc::ERESTART]);
}

#[test]
fn large_batches_use_errors_only_and_still_name_the_failure() {
    let Some(ns) = Netns::new() else { return };
    let (stats, err, drift) = ns.run(|| async {
        let mut s = NftSocket::new().unwrap();
        let good = synthetic::ruleset(800, 3);
        let r = nft::full_sync(&mut s, &good).await.unwrap();
        let mut bad = synthetic::ruleset(900, 3);
        let last = bad.chains.len() - 1;
        bad.chains[last].1.push(rule(vec![Stmt::Verdict(Verdict::Goto("missing-chain".into()))]));
        let err = nft::full_sync(&mut s, &bad).await.unwrap_err().to_string();
        (r.stats, err, list::verify(&mut s, &good).await.unwrap())
    });
    assert!(stats.messages > nft::socket::ACK_EACH_LIMIT && !stats.acked_each, "{stats:?}");
    assert!(err.contains("\"missing-chain\" does not exist"), "{err}");
    assert!(drift.is_empty(), "the failed batch changed the kernel: {drift:?}");
}

#[test]
fn repair_sends_only_the_drift_and_leaves_the_table_as_desired() {
    let Some(ns) = Netns::new() else { return };
    let name = ns.name.clone();
    ns.run(move || async move {
        let mut s = NftSocket::new().unwrap();
        let want = synthetic::ruleset(200, 2);
        nft::full_sync(&mut s, &want).await.unwrap();
        let kernel = list::list_table(&mut s, 1, T).await.unwrap().expect("the table");
        match repair(&want, &[], &kernel).unwrap() {
            Repair::Ops(ops) => assert!(ops.is_empty(), "an intact table needs nothing: {ops:?}"),
            Repair::Full(why) => panic!("{why}"),
        }
        // Someone deletes an element, adds a rule and a chain of their own to our table.
        let nft = |cmd: &str| {
            let st = std::process::Command::new("ip")
                .args(["netns", "exec", &name, "sh", "-c", &format!("nft '{cmd}'")])
                .status()
                .unwrap();
            assert!(st.success(), "{cmd}");
        };
        let first = render::value(&want.elements[0].1[0].key[0]);
        nft(&format!("delete element inet {T} service-ips {{ {first} . tcp . 80 }}"));
        nft(&format!("add rule inet {T} services counter"));
        nft(&format!("add chain inet {T} intruder"));
        let kernel = list::list_table(&mut s, 1, T).await.unwrap().expect("the table");
        let ops = match repair(&want, &[], &kernel).unwrap() {
            Repair::Ops(ops) => ops,
            Repair::Full(why) => panic!("{why}"),
        };
        // One element back, one chain rewritten, one chain gone: a handful of messages,
        // not the 200-service table.
        assert!(!ops.is_empty() && ops.len() < 10, "{} messages: {ops:?}", ops.len());
        s.transact(&ops, None).await.unwrap();
        assert!(list::verify(&mut s, &want).await.unwrap().is_empty());
    });
}

/// A ruleset cut the way the daemon keeps it: a base (the sets and the first
/// chains, no elements) and parts of a few chains and elements each, the last
/// part adding a set of its own. `assembled` is the same as one value.
#[derive(Clone)]
struct Split {
    base: Ruleset,
    sets: Vec<Vec<Set>>,
    chains: Vec<Vec<(Chain, Vec<Rule>)>>,
    elements: Vec<Vec<(SetName, Element)>>,
    assembled: Ruleset,
}

impl Split {
    fn new(rs: &Ruleset) -> Split {
        let base = Ruleset { elements: vec![], chains: rs.chains[..3].to_vec(), ..rs.clone() };
        let chains: Vec<Vec<_>> = rs.chains[3..].chunks(7).map(<[_]>::to_vec).collect();
        let flat: Vec<(SetName, Element)> =
            rs.elements.iter().flat_map(|(s, els)| els.iter().map(move |e| (s.clone().into(), e.clone()))).collect();
        let mut elements: Vec<Vec<_>> = flat.chunks(5).map(<[_]>::to_vec).collect();
        let n = chains.len().max(elements.len());
        let mut chains = chains;
        chains.resize(n, vec![]);
        elements.resize(n, vec![]);
        let mut sets = vec![vec![]; n];
        let extra = set("extra-v4", vec![DataType::Ipv4Addr], None);
        let extra_elems = vec![elem(vec![v4(198, 18, 0, 7)], None), elem(vec![v4(198, 18, 0, 8)], None)];
        sets[n - 1].push(extra.clone());
        elements[n - 1].extend(extra_elems.iter().map(|e| ("extra-v4".into(), e.clone())));
        let mut assembled = rs.clone();
        assembled.sets.push(extra);
        assembled.elements.push(("extra-v4".into(), extra_elems));
        Split { base, sets, chains, elements, assembled }
    }

    fn parts(&self) -> Vec<nft::sync::Part<'_>> {
        (0..self.chains.len())
            .map(|i| nft::sync::Part {
                sets: &self.sets[i],
                chains: &self.chains[i],
                elements: &self.elements[i],
                packed: &[],
            })
            .collect()
    }
}

/// The daemon's streamed full sync (base plus borrowed parts, each message
/// serialized as it is lowered) programs exactly what the collected
/// `full_sync_ops` of the assembled ruleset does, with acks per message (a
/// small batch) and errors only (a large one); a refused message of a streamed
/// batch is named as precisely as in a collected one, and changes nothing.
#[test]
fn streamed_full_sync_equals_the_collected_one_and_names_failures() {
    let Some(ns) = Netns::new() else { return };
    for n in [40, 800] {
        let split = Split::new(&synthetic::ruleset(n, 3));
        let whole = split.assembled.clone();
        let collected = ns.run(move || async move {
            let mut s = NftSocket::new().unwrap();
            s.transact(&nft::sync::full_sync_ops(&whole).unwrap(), None).await.unwrap()
        });
        let collected_list = ns.nft(&["list", "table", "inet", T]);
        ns.nft(&["delete", "table", "inet", T]);
        let sp = split.clone();
        let (streamed, drift) = ns.run(move || async move {
            let mut s = NftSocket::new().unwrap();
            let r = nft::sync::full_sync_parts(&mut s, &sp.base, &sp.parts()).await.unwrap_or_else(|e| panic!("{e}"));
            (r.stats, list::verify(&mut s, &sp.assembled).await.unwrap())
        });
        let streamed_list = ns.nft(&["list", "table", "inet", T]);
        assert_eq!(collected_list, streamed_list, "n={n}: the streamed table differs");
        assert!(collected_list.contains("198.18.0.8"), "n={n}: the part's own set is missing:\n{collected_list}");
        assert!(drift.is_empty(), "n={n}: {drift:?}");
        assert_eq!(collected, streamed, "n={n}: same messages, same bytes, same ack mode");
        assert_eq!(streamed.acked_each, n == 40, "n={n}: the two sizes must straddle the limit: {streamed:?}");

        // A rule jumping nowhere, in the last part: the kernel refuses the batch.
        let mut bad = split;
        let good = bad.assembled.clone();
        let last = bad.chains.len() - 1;
        bad.chains[last]
            .push((chain("bad-chain"), vec![rule(vec![Stmt::Verdict(Verdict::Goto("missing-chain".into()))])]));
        let (err, drift) = ns.run(move || async move {
            let mut s = NftSocket::new().unwrap();
            let err = nft::sync::full_sync_parts(&mut s, &bad.base, &bad.parts()).await.unwrap_err().to_string();
            (err, list::verify(&mut s, &good).await.unwrap())
        });
        assert!(err.contains("rule #0 of chain bad-chain"), "n={n}: {err}");
        assert!(err.contains("\"missing-chain\" does not exist"), "n={n}: {err}");
        assert!(drift.is_empty(), "n={n}: the failed batch changed the kernel: {drift:?}");
        ns.nft(&["delete", "table", "inet", T]);
    }
}
