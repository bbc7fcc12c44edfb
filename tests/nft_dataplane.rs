//! The data plane's real rulesets (the builder's golden cases) programmed into
//! the kernel over netlink: `nft list` must print exactly what `render` prints
//! for the same description, and listing must find no drift.

mod nft_common;

use std::collections::BTreeMap;

use nft_common::Netns;
use nodeportd::dataplane::{build, Input, ServiceInput};
use nodeportd::model::{Backend, Service};
use nodeportd::nft::render::render;
use nodeportd::nft::{self, list, NftSocket};

include!("../src/dataplane/cases.rs");

/// What the kernel adds on its own (dynamic sets' default size, counter
/// values), and element lists on one line, sorted (nft wraps them by width and
/// prints hash sets in hash order).
fn without_kernel_additions(text: &str) -> String {
    text.replace(",\n\t\t\t     ", ", ")
        .lines()
        .filter(|l| !l.trim_start().starts_with("size "))
        .map(sort_elements)
        .map(|l| match l.find(" packets ") {
            Some(i) => {
                let rest = &l[i + " packets ".len()..];
                let after = rest.splitn(4, ' ').nth(3).map(|r| format!(" {r}")).unwrap_or_default();
                format!("{}{after}", &l[..i])
            }
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn sort_elements(l: &str) -> String {
    let t = l.trim_start();
    match t.strip_prefix("elements = { ").and_then(|r| r.strip_suffix(" }")) {
        Some(inner) => {
            let mut v: Vec<&str> = inner.split(", ").collect();
            v.sort();
            format!("{}elements = {{ {} }}", &l[..l.len() - t.len()], v.join(", "))
        }
        None => l.to_string(),
    }
}

#[test]
fn dataplane_rulesets_list_as_rendered() {
    let Some(ns) = Netns::new() else { return };
    let svcs: Vec<Service> = CASES.iter().map(|c| svc(c.service)).collect();
    // Every case alone, then all together.
    let mut inputs: Vec<Vec<usize>> = (0..CASES.len()).map(|i| vec![i]).collect();
    inputs.push((0..CASES.len()).collect());
    for idx in inputs {
        let inp = input(
            idx.iter().map(|&i| ServiceInput { service: &svcs[i], backends: ports(CASES[i].backends) }).collect(),
        );
        let rs = build(&inp);
        let want = render(&rs);
        let rs2 = rs.clone();
        let drift = ns.run(move || async move {
            let mut s = NftSocket::new().unwrap();
            nft::full_sync(&mut s, &rs2).await.unwrap_or_else(|e| panic!("{e}"));
            list::verify(&mut s, &rs2).await.unwrap()
        });
        let names: Vec<&str> = idx.iter().map(|&i| CASES[i].name).collect();
        assert!(drift.is_empty(), "{names:?}: {drift:?}");
        let got = ns.nft(&["list", "table", "inet", "nodeportd"]);
        let (got, want) = (without_kernel_additions(&got), without_kernel_additions(&want));
        let diff: Vec<String> = got
            .lines()
            .zip(want.lines())
            .filter(|(g, w)| g != w)
            .map(|(g, w)| format!("kernel: {g}\nrender: {w}"))
            .collect();
        assert!(got == want, "{names:?}: nft list differs from render:\n{}\n--- kernel\n{got}", diff.join("\n"));
    }
}
