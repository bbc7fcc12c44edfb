//! Real traffic through what the sync engine programs: connections to a
//! ClusterIP are DNAT'ed by `numgen` over two endpoints, and after a partial
//! sync that moves one endpoint, new connections reach the new address.

mod nft_common;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::time::Duration;

use nft_common::Netns;
use nodeportd::nft::{self, synthetic, NftSocket, Stmt};
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

fn ip(ns: &Netns, args: &[&str]) {
    let st = Command::new("ip").args(["-n", &ns.name]).args(args).status().expect("run ip");
    assert!(st.success(), "ip {args:?}");
}

fn endpoints(r: &nft::Ruleset) -> Vec<IpAddr> {
    r.chains
        .iter()
        .filter(|(c, _)| c.name.starts_with("ep-"))
        .filter_map(|(_, rules)| match rules.get(1)?.stmts.get(1)? {
            Stmt::Dnat { addr, .. } => Some(*addr),
            _ => None,
        })
        .collect()
}

/// Serves "who am I" on every endpoint address, port 8080.
async fn serve(addrs: &[IpAddr]) {
    for a in addrs {
        let l = TcpListener::bind(SocketAddr::new(*a, 8080)).await.unwrap();
        let me = a.to_string();
        tokio::spawn(async move {
            loop {
                let Ok((mut c, _)) = l.accept().await else { return };
                let _ = c.write_all(me.as_bytes()).await;
            }
        });
    }
}

async fn ask(n: usize) -> HashMap<String, usize> {
    let svc = SocketAddr::new(IpAddr::V4(synthetic::service_ip(0)), 80);
    let mut seen = HashMap::new();
    for _ in 0..n {
        let mut c = tokio::time::timeout(Duration::from_secs(3), TcpStream::connect(svc))
            .await
            .expect("connect timed out")
            .expect("connect");
        let mut who = String::new();
        c.read_to_string(&mut who).await.unwrap();
        *seen.entry(who).or_insert(0) += 1;
    }
    seen
}

#[test]
fn clusterip_spreads_over_endpoints_and_follows_a_partial_sync() {
    let Some(ns) = Netns::new() else { return };
    let before = synthetic::ruleset(1, 2);
    let mut after = before.clone();
    synthetic::change_endpoint(&mut after, 0);
    ip(&ns, &["link", "set", "lo", "up"]);
    let mut all = endpoints(&before);
    all.extend(endpoints(&after));
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 3);
    for a in &all {
        ip(&ns, &["addr", "add", &format!("{a}/32"), "dev", "lo"]);
    }
    // Packets to the ClusterIP need a route before DNAT rewrites them.
    ip(&ns, &["route", "add", "198.18.128.0/17", "dev", "lo"]);
    let (first, second) = ns.run(move || async move {
        serve(&all).await;
        let mut s = NftSocket::new().unwrap();
        nft::full_sync(&mut s, &before).await.unwrap();
        let first = ask(40).await;
        let r = nft::partial_sync(&mut s, &before, &after).await.unwrap();
        assert!(!r.full);
        let second = ask(40).await;
        (first, second)
    });
    let b = endpoints(&synthetic::ruleset(1, 2));
    let mut a = synthetic::ruleset(1, 2);
    synthetic::change_endpoint(&mut a, 0);
    let a = endpoints(&a);
    let names = |v: &[IpAddr]| {
        let mut v: Vec<String> = v.iter().map(|x| x.to_string()).collect();
        v.sort();
        v
    };
    let keys = |m: &HashMap<String, usize>| {
        let mut k: Vec<String> = m.keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&first), names(&b), "before: {first:?}");
    assert_eq!(keys(&second), names(&a), "after: {second:?}");
}
