//! Benchmark: time from an address change (the rtnetlink request that makes the kernel
//! emit the event) to the new NodePort address set being published by `NetWatch`.
//!
//! Runs in a network namespace of its own (root needed):
//!   cargo run --release --example netwatch_latency -- [ROUNDS]
//! Prints the distribution for three kinds of change: an address added, an address
//! removed, and a DHCP-style renew (new address added, old one removed right after).

#[path = "../tests/addr/mod.rs"]
mod addr;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use futures::stream::TryStreamExt;
use nodeportd::config::AddrSelector;
use nodeportd::netwatch::{NetWatch, NodeAddresses, MAX_DELAY, QUIET};
use tokio::sync::watch;

type Res<T> = Result<T, String>;

fn e(what: &'static str) -> impl Fn(rtnetlink::Error) -> String {
    move |err| format!("{what}: {err}")
}

async fn until(rx: &mut watch::Receiver<NodeAddresses>, pred: impl Fn(&NodeAddresses) -> bool) -> Res<Duration> {
    let t = Instant::now();
    loop {
        if pred(&rx.borrow_and_update()) {
            return Ok(t.elapsed());
        }
        match tokio::time::timeout(Duration::from_secs(5), rx.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err("the watcher stopped".into()),
            Err(_) => return Err(format!("no publication within 5 s; set is {}", rx.borrow().clone())),
        }
    }
}

fn report(name: &str, mut v: Vec<Duration>) {
    v.sort();
    // The quantile (in per mille) by nearest rank, in integer arithmetic.
    let p = |permille: usize| v[((v.len() - 1) * permille + 500) / 1000].as_secs_f64() * 1000.0;
    let mean = v.iter().map(|d| d.as_secs_f64()).sum::<f64>() / v.len() as f64 * 1000.0;
    println!(
        "| {name} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
        v.len(),
        p(0),
        p(500),
        p(900),
        p(990),
        p(1000),
        mean
    );
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(200);
    let ns = addr::Netns::new("bench");
    ns.add_iface("eth0");
    ns.ip("link set eth0 up");
    ns.ip("addr add 198.18.4.1/24 dev eth0");
    // As OpenWrt sets it: removing a subnet's first address keeps the others (the
    // renew below replaces the first address).
    ns.exec(&["sysctl", "-q", "-w", "net.ipv4.conf.eth0.promote_secondaries=1"]);
    // The release profile aborts on panic, which would leave the namespace behind:
    // errors come back as values and the namespace is dropped normally.
    let out = std::sync::Arc::new(std::sync::Mutex::new(None));
    let out2 = out.clone();
    addr::in_netns(&ns, move || async move {
        let r = run(rounds).await;
        if let Ok(mut g) = out2.lock() {
            *g = Some(r);
        }
    });
    let result = out.lock().ok().and_then(|mut g| g.take());
    drop(ns);
    match result {
        Some(Ok((add, del, renew))) => {
            println!(
                "debounce: quiet {QUIET:?}, cap {MAX_DELAY:?}; milliseconds from the netlink request to publication"
            );
            println!("| change | runs | min | p50 | p90 | p99 | max | mean |");
            println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
            report("address added", add);
            report("address removed", del);
            report("DHCP renew (add new + remove old)", renew);
        }
        Some(Err(err)) => {
            eprintln!("netwatch_latency: {err}");
            std::process::exit(1);
        }
        None => {
            eprintln!("netwatch_latency: the benchmark thread died");
            std::process::exit(1);
        }
    }
}

type Samples = (Vec<Duration>, Vec<Duration>, Vec<Duration>);

async fn run(rounds: usize) -> Res<Samples> {
    let sel = vec![AddrSelector::parse("198.18.0.0/15")?];
    let (_, _h, mut rx) = NetWatch::start(sel, vec![]).await.map_err(|err| format!("start netwatch: {err}"))?;
    let (conn, handle, _) = rtnetlink::new_connection().map_err(|err| format!("rtnetlink: {err}"))?;
    tokio::spawn(conn);
    let link =
        handle.link().get().match_name("eth0").execute().try_next().await.map_err(e("link get"))?.ok_or("no eth0")?;
    let idx = link.header.index;
    let ip = |i: usize| IpAddr::V4(Ipv4Addr::new(198, 18, 5, u8::try_from(i % 250 + 1).unwrap_or(1)));
    let has = |a: IpAddr| move |s: &NodeAddresses| s.all().any(|x| x == a);

    let (mut add, mut del, mut renew) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        let a = ip(i);
        let t = Instant::now();
        handle.address().add(idx, a, 24).execute().await.map_err(e("add"))?;
        until(&mut rx, has(a)).await?;
        add.push(t.elapsed());

        let t = Instant::now();
        let mut req = handle.address().get().set_address_filter(a).execute();
        let msg = req.try_next().await.map_err(e("get"))?.ok_or("address gone")?;
        handle.address().del(msg).execute().await.map_err(e("del"))?;
        until(&mut rx, |s| !has(a)(s)).await?;
        del.push(t.elapsed());
    }
    // Renew: 198.18.6.x replaces 198.18.6.y in two back-to-back requests.
    let mut old = IpAddr::V4(Ipv4Addr::new(198, 18, 6, 250));
    handle.address().add(idx, old, 24).execute().await.map_err(e("add"))?;
    until(&mut rx, has(old)).await?;
    for i in 0..rounds {
        let new = IpAddr::V4(Ipv4Addr::new(198, 18, 6, u8::try_from(i % 200 + 1).unwrap_or(1)));
        let t = Instant::now();
        handle.address().add(idx, new, 24).execute().await.map_err(e("add"))?;
        let mut req = handle.address().get().set_address_filter(old).execute();
        let msg = req.try_next().await.map_err(e("get"))?.ok_or("old address gone")?;
        handle.address().del(msg).execute().await.map_err(e("del"))?;
        until(&mut rx, |s| has(new)(s) && !has(old)(s)).await?;
        renew.push(t.elapsed());
        old = new;
    }
    Ok((add, del, renew))
}
