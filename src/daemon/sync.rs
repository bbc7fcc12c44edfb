//! Keeps the kernel in step with the stored objects.
//!
//! The desired ruleset is a pure function of the objects and the node addresses
//! (`dataplane::builder`). Per-service pieces are cached and only services marked
//! dirty are rebuilt; the nft sync engine then sends only the difference, in one
//! atomic transaction. A full sync runs at start, after a failed transaction, when
//! someone else touched our table, and on the slow resync timer.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::State;
use crate::config::Config;
use crate::conntrack::{self, UdpFlowFilter};
use crate::dataplane::builder::{build_service, build_skeleton, Input, ServiceInput, ServicePieces};
use crate::dataplane::claims::{self, Claims};
use crate::led::LedState;
use crate::model::{Protocol, Service, ServiceType};
use crate::nft::sync::{partial_sync_ops, Part, Plan};
use crate::nft::{self, EventStream, Family, NftSocket, Ruleset, TableEvent};

/// `status.dataplane`.
#[derive(Debug, Clone, Default)]
pub struct DataplaneStatus {
    pub in_sync: bool,
    pub generation: u64,
    pub last_sync_millis: Option<u64>,
    pub last_error: Option<String>,
    pub transactions: u64,
    pub full_syncs: u64,
    /// Netlink messages the last transaction sent.
    pub last_messages: u64,
    /// Elements left out because another service holds their key (`SERVICE: KEY in MAP
    /// is held by OTHER`).
    pub conflicts: Vec<String>,
}

impl DataplaneStatus {
    pub fn new() -> Self {
        Self::default()
    }
}

/// Where the ruleset goes.
pub enum Engine {
    /// `--dry-run`: print it.
    DryRun,
    Kernel {
        sock: Box<NftSocket>,
        events: Option<EventStream>,
        /// The ruleset generation our last transaction produced: when events are lost,
        /// an unchanged generation proves nobody else committed since.
        our_gen: Option<u32>,
    },
}

const NFPROTO_INET: u8 = 1;

impl Engine {
    pub async fn new(cfg: &Config, dry_run: bool) -> Result<Engine, String> {
        if dry_run {
            return Ok(Engine::DryRun);
        }
        let sock = NftSocket::new().map_err(|e| format!("cannot open the nf_tables netlink socket: {e}"))?;
        let events = match EventStream::new(NFPROTO_INET, &cfg.table) {
            Ok(mut ev) => {
                ev.ignore_socket(&sock);
                Some(ev)
            }
            Err(e) => {
                log::warn!("cannot listen to nf_tables events ({e}); drift is repaired by the resync timer only");
                None
            }
        };
        Ok(Engine::Kernel { sock: Box::new(sock), events, our_gen: None })
    }
}

/// `nodeportd --cleanup`: remove our table.
pub fn cleanup(cfg: &Config) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the event loop: {e}"))?;
    rt.block_on(async {
        let mut sock = NftSocket::new().map_err(|e| e.to_string())?;
        nft::delete_table(&mut sock, Family::Inet, &cfg.table).await.map_err(|e| e.to_string())?;
        Ok(())
    })
}

type Key = (String, String);

/// A UDP service port as the kernel sees it, to find conntrack entries that
/// outlive an endpoint or a service.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct UdpPort {
    fronts: Vec<IpAddr>,
    port: u16,
    node_port: Option<u16>,
    endpoints: BTreeSet<(IpAddr, u16)>,
}

#[derive(Default)]
struct Cache {
    pieces: BTreeMap<Key, ServicePieces>,
    /// Who holds each map key (`pieces` are what remains after the claims).
    claims: Claims<Key>,
    udp: BTreeMap<Key, BTreeMap<String, UdpPort>>,
    /// The fixed part of the table as last built (node addresses live here).
    skeleton: Option<Ruleset>,
    /// What `--dry-run` printed last.
    printed: Option<String>,
}

fn input_for(st: &State) -> Input<'static> {
    let cfg = &st.cfg;
    Input {
        table: cfg.table.clone(),
        node_name: cfg.node_name.clone(),
        masquerade_mark: cfg.masquerade_mark(),
        ct_mark: cfg.ct_mark(),
        nodeport_ips_v4: st.node.current.v4.clone(),
        nodeport_ips_v6: st.node.current.v6.clone(),
        services: Vec::new(),
    }
}

fn udp_ports(svc: &Service, st: &State) -> BTreeMap<String, UdpPort> {
    let mut fronts: Vec<IpAddr> = svc.spec.cluster_ips.iter().filter_map(|s| s.parse().ok()).collect();
    fronts.extend(svc.spec.external_ips.iter().filter_map(|s| s.parse::<IpAddr>().ok()));
    if let Some(st) = &svc.status {
        fronts.extend(st.load_balancer.ingress.iter().filter_map(|i| i.ip.as_deref()?.parse::<IpAddr>().ok()));
    }
    st.registry
        .backends(svc)
        .into_iter()
        .filter(|p| p.protocol == Protocol::Udp)
        .map(|p| {
            let endpoints = p.backends.iter().filter(|b| b.ready || b.serving).map(|b| (b.ip, b.port)).collect();
            let key = p.name.clone().unwrap_or_default();
            (key, UdpPort { fronts: fronts.clone(), port: p.port, node_port: p.node_port, endpoints })
        })
        .collect()
}

/// Filters for the UDP flows that a change leaves pointing nowhere (as kube-proxy
/// clears them): a removed service port loses every flow to it; a removed endpoint
/// loses the flows DNAT'd to it.
fn stale_udp(old: &BTreeMap<String, UdpPort>, new: &BTreeMap<String, UdpPort>) -> Vec<UdpFlowFilter> {
    let mut out = Vec::new();
    for (name, o) in old {
        match new.get(name) {
            Some(n) if n.port == o.port && n.fronts == o.fronts && n.node_port == o.node_port => {
                for (ip, port) in o.endpoints.difference(&n.endpoints) {
                    for f in &o.fronts {
                        out.push(UdpFlowFilter::endpoint_of_service(*f, o.port, *ip, Some(*port)));
                    }
                    if let Some(np) = o.node_port {
                        out.push(UdpFlowFilter::endpoint_of_node_port(np, *ip, Some(*port)));
                    }
                }
            }
            _ => {
                for f in &o.fronts {
                    out.push(UdpFlowFilter::service(*f, o.port));
                }
                if let Some(np) = o.node_port {
                    out.push(UdpFlowFilter::node_port(np));
                }
            }
        }
    }
    out
}

/// What one sync sends to the kernel.
enum Change {
    /// Replace the whole table (start, after a failure, drift, config changes) with
    /// the cached skeleton and pieces.
    Full,
    /// Only the changed services and the fixed part, before and after: the diff of
    /// these small rulesets is the transaction, so an update costs O(changed objects)
    /// however many services exist.
    Partial { before: Box<Ruleset>, after: Box<Ruleset> },
}

/// The whole desired table, as one value (for `--dry-run`; a sync streams the pieces).
fn assemble(skeleton: &Ruleset, cache: &Cache) -> Ruleset {
    let mut rs = skeleton.clone();
    for p in cache.pieces.values() {
        p.clone().merge_into(&mut rs);
    }
    rs
}

/// Rebuild the pieces of dirty services (all of them for a full sync) and say what
/// changed. Also returns the conntrack filters the change makes necessary.
fn plan(st: &mut State, cache: &mut Cache, full: bool) -> (Change, Vec<UdpFlowFilter>) {
    let input = input_for(st);
    let skeleton = build_skeleton(&input);
    let full = full || cache.skeleton.is_none();
    let mut keys: BTreeSet<Key> = if full {
        let mut all: BTreeSet<Key> = cache.pieces.keys().cloned().collect();
        all.extend(st.registry.list_services(None).iter().map(|s| (s.namespace().to_string(), s.name().to_string())));
        st.dirty.clear();
        cache.claims.clear();
        all
    } else {
        std::mem::take(&mut st.dirty)
    };
    if !full {
        // What the changed services held is free again; services that waited for it
        // (rare: contested externalIPs / LoadBalancer IPs) are rebuilt with them.
        let mut release: Vec<Key> = keys.iter().cloned().collect();
        while let Some(key) = release.pop() {
            if let Some(old) = cache.pieces.get(&key) {
                for waiter in cache.claims.release(&key, old) {
                    if keys.insert(waiter.clone()) {
                        release.push(waiter);
                    }
                }
            }
        }
    }
    // Gone services first, then the oldest: a contested key goes to the oldest claimant.
    let mut keys: Vec<(Option<Service>, Key)> =
        keys.into_iter().map(|k| (st.registry.get_service(&k.0, &k.1).ok(), k)).collect();
    keys.sort_by(|(a, ka), (b, kb)| {
        a.as_ref().map(claims::precedence).cmp(&b.as_ref().map(claims::precedence)).then_with(|| ka.cmp(kb))
    });
    let mut before = cache.skeleton.take().unwrap_or_default();
    let mut after = skeleton.clone();
    let mut stale = Vec::new();
    for (svc, key) in keys {
        let new_udp = match &svc {
            Some(s) if s.service_type() != ServiceType::ExternalName => udp_ports(s, st),
            _ => BTreeMap::new(),
        };
        if let Some(old_udp) = cache.udp.get(&key) {
            stale.extend(stale_udp(old_udp, &new_udp));
        }
        let old = cache.pieces.remove(&key);
        match svc {
            Some(svc) => {
                let backends =
                    st.registry.backends(&svc).into_iter().map(|p| (p.name.unwrap_or_default(), p.backends)).collect();
                let mut pieces = build_service(&input, &ServiceInput { service: &svc, backends });
                for c in cache.claims.claim(&key, &mut pieces) {
                    log::warn!(
                        "service {}/{}: not programmed: {}",
                        key.0,
                        key.1,
                        c.describe(&format!("{}/{}", c.holder.0, c.holder.1))
                    );
                }
                if !full {
                    pieces.clone().merge_into(&mut after);
                }
                cache.pieces.insert(key.clone(), pieces);
                cache.udp.insert(key, new_udp);
            }
            None => {
                cache.udp.remove(&key);
            }
        }
        if let (false, Some(old)) = (full, old) {
            old.merge_into(&mut before);
        }
    }
    st.dataplane.conflicts = cache
        .claims
        .conflicts()
        .flat_map(|(k, cs)| {
            cs.iter()
                .map(move |c| format!("{}/{}: {}", k.0, k.1, c.describe(&format!("{}/{}", c.holder.0, c.holder.1))))
        })
        .collect();
    cache.skeleton = Some(skeleton);
    let change = if full { Change::Full } else { Change::Partial { before: Box::new(before), after: Box::new(after) } };
    (change, stale)
}

/// Send one change: the diff of a partial change, or the whole table. Returns the
/// number of netlink messages and whether the table was replaced.
async fn apply(sock: &mut NftSocket, change: Change, cache: &Cache) -> Result<(u64, bool), String> {
    if let Change::Partial { before, after } = change {
        match partial_sync_ops(&before, &after).map_err(|e| e.to_string())? {
            Plan::Partial(ops) => {
                let stats = sock.transact(&ops, None).await.map_err(|e| e.to_string())?;
                return Ok((stats.messages as u64, false));
            }
            Plan::Full(why) => log::debug!("replacing the table: {why}"),
        }
    }
    // Lowered straight from the cache, one message at a time: neither an assembled
    // copy of the table nor all its messages exist at once.
    let skeleton = cache.skeleton.as_ref().expect("planned");
    let parts: Vec<Part> =
        cache.pieces.values().map(|p| Part { sets: &p.sets, chains: &p.chains, elements: &p.elements }).collect();
    let rep = nft::sync::full_sync_parts(sock, skeleton, &parts).await.map_err(|e| e.to_string())?;
    Ok((rep.stats.messages as u64, true))
}

/// The sync task: wait for a change, coalesce a burst, apply, report.
pub async fn sync_loop(st: Rc<RefCell<State>>, mut engine: Engine, led: watch::Sender<LedState>) {
    let wake = st.borrow().wake.clone();
    let mut cache = Cache::default();
    let mut backoff = Duration::from_millis(200);
    loop {
        let event = async {
            match &mut engine {
                Engine::Kernel { events: Some(ev), .. } => Some(ev.next_event().await),
                _ => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = wake.notified() => {}
            ev = event => match ev {
                Some(Ok(TableEvent::Changed { deleted, by_pid, by_name, .. })) => {
                    log::warn!(
                        "table inet {} was {} by pid {by_pid} ({}); restoring it",
                        st.borrow().cfg.table,
                        if deleted { "deleted" } else { "changed" },
                        by_name.as_deref().unwrap_or("?")
                    );
                    st.borrow_mut().full_resync = true;
                }
                Some(Ok(TableEvent::Overrun)) => {
                    // Usually our own big commit overflowed the event socket; resyncing
                    // then would only overflow it again. Ask the kernel instead.
                    let foreign = match &mut engine {
                        Engine::Kernel { sock, our_gen, .. } => match (sock.generation().await, *our_gen) {
                            (Ok(now), Some(ours)) => now != ours,
                            _ => true,
                        },
                        Engine::DryRun => false,
                    };
                    if !foreign {
                        continue;
                    }
                    log::warn!("nf_tables events were lost and someone else committed; resyncing");
                    st.borrow_mut().full_resync = true;
                }
                Some(Err(e)) => {
                    log::warn!("nf_tables event socket: {e}; relying on the resync timer");
                    if let Engine::Kernel { events, .. } = &mut engine {
                        *events = None;
                    }
                    continue;
                }
                None => {}
            },
        }
        // Let a burst of requests already queued on the loop land in this sync.
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;

        {
            // Wakes can outnumber changes (an endpoints update marks the old and the new
            // object's service); nothing to do is nothing to send.
            let s = st.borrow();
            if s.dirty.is_empty() && !s.full_resync && !s.node_changed {
                continue;
            }
        }
        let started = Instant::now();
        let (change, stale) = {
            let mut s = st.borrow_mut();
            let full = s.full_resync;
            s.full_resync = false;
            s.node_changed = false;
            plan(&mut s, &mut cache, full)
        };
        let result: Result<(u64, bool), String> = match &mut engine {
            Engine::DryRun => {
                // A dry run prints the whole table each time something changed in it.
                let text = nft::render::render(&assemble(cache.skeleton.as_ref().expect("planned"), &cache));
                if cache.printed.as_deref() != Some(text.as_str()) {
                    use std::io::Write;
                    let mut out = std::io::stdout().lock();
                    let now = super::clock::rfc3339(std::time::SystemTime::now());
                    let _ = writeln!(out, "# nodeportd --dry-run: ruleset at {now}");
                    let _ = out.write_all(text.as_bytes());
                    let _ = out.flush();
                    cache.printed = Some(text);
                }
                Ok((0, matches!(change, Change::Full)))
            }
            Engine::Kernel { sock, events, our_gen } => {
                let muted = match events.as_mut().map(EventStream::mute) {
                    Some(Ok(())) => true,
                    Some(Err(e)) => {
                        log::warn!("nf_tables event socket: {e}; relying on the resync timer");
                        *events = None;
                        false
                    }
                    None => false,
                };
                // Asked once muted: commits before this were seen as events.
                let before = sock.generation().await.ok();
                let r = apply(sock, change, &cache).await;
                if muted {
                    if let Some(Err(e)) = events.as_mut().map(EventStream::unmute) {
                        log::warn!("nf_tables event socket: {e}; relying on the resync timer");
                        *events = None;
                    }
                }
                let now = sock.generation().await.ok();
                *our_gen = if r.is_ok() { now } else { None };
                // Our commit is exactly one generation; more means someone else committed
                // while we were not listening (maybe to another table: we cannot tell).
                if r.is_ok() && muted && before.map(|g| g.wrapping_add(1)) != now {
                    log::info!("another nf_tables commit happened during ours; checking our table with a full sync");
                    st.borrow_mut().full_resync = true;
                    wake.notify_one();
                }
                r
            }
        };
        let elapsed = started.elapsed();
        let ok = match result {
            Ok((messages, was_full)) => {
                backoff = Duration::from_millis(200);
                let mut s = st.borrow_mut();
                let dp = &mut s.dataplane;
                dp.generation += 1;
                dp.in_sync = true;
                dp.last_error = None;
                dp.last_sync_millis = Some(elapsed.as_millis() as u64);
                dp.transactions += 1;
                dp.last_messages = messages;
                if was_full {
                    dp.full_syncs += 1;
                }
                log::debug!("sync {}: {} messages in {:?}", dp.generation, messages, elapsed);
                true
            }
            Err(e) => {
                log::error!("sync failed (next: a full sync in {backoff:?}): {e}");
                let mut s = st.borrow_mut();
                s.dataplane.in_sync = false;
                s.dataplane.last_error = Some(e);
                // The next sync rebuilds and replaces everything.
                s.full_resync = true;
                false
            }
        };
        let _ = led.send(LedState::for_dataplane(ok, !ok));
        if ok {
            if !stale.is_empty() && matches!(engine, Engine::Kernel { .. }) {
                // The conntrack module logs how many it deleted.
                if let Err(e) = conntrack::delete_udp_flows(&stale) {
                    log::warn!("cannot delete stale UDP conntrack entries: {e}");
                }
            }
        } else {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(30));
            wake.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(eps: &[(&str, u16)]) -> UdpPort {
        UdpPort {
            fronts: vec!["10.96.0.10".parse().unwrap()],
            port: 53,
            node_port: Some(30053),
            endpoints: eps.iter().map(|(i, p)| (i.parse().unwrap(), *p)).collect(),
        }
    }

    #[test]
    fn removed_endpoint_yields_endpoint_filters() {
        let old = BTreeMap::from([("dns".to_string(), port(&[("198.18.1.2", 53), ("198.18.1.3", 53)]))]);
        let new = BTreeMap::from([("dns".to_string(), port(&[("198.18.1.2", 53)]))]);
        let f = stale_udp(&old, &new);
        let ep: IpAddr = "198.18.1.3".parse().unwrap();
        assert_eq!(
            f,
            vec![
                UdpFlowFilter::endpoint_of_service("10.96.0.10".parse().unwrap(), 53, ep, Some(53)),
                UdpFlowFilter::endpoint_of_node_port(30053, ep, Some(53)),
            ]
        );
        assert!(stale_udp(&new, &new).is_empty());
    }

    #[test]
    fn removed_service_yields_service_filters() {
        let old = BTreeMap::from([("dns".to_string(), port(&[("198.18.1.2", 53)]))]);
        let f = stale_udp(&old, &BTreeMap::new());
        assert_eq!(f, vec![UdpFlowFilter::service("10.96.0.10".parse().unwrap(), 53), UdpFlowFilter::node_port(30053)]);
    }
}
