//! Keeps the kernel in step with the stored objects, off the event loop.
//!
//! A data plane worker thread owns everything that talks to the kernel: the
//! nf_tables socket, the nf_tables event socket, conntrack, and the planner
//! (`dataplane::plan`). The event loop only collects which services changed, hands the
//! worker owned copies of them ([`SyncRequest`]) and reads [`SyncOutcome`]s back: the
//! API, the health-check listeners and netwatch answer while any sync runs.
//!
//! The worker sends only differences: a change is the diff of the changed services'
//! pieces; a start, the resync timer and a foreign change to our table compare the
//! kernel's listing with the desired table (`nft::repair`). The table is replaced only
//! when it is gone or something in it cannot be changed in place.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::State;
use crate::config::Config;
use crate::conntrack;
use crate::dataplane::builder::Input;
use crate::dataplane::plan::{Change, Key, OwnedService, Planner};
use crate::led::LedState;
use crate::nft::repair::{repair, Repair};
use crate::nft::sync::{partial_sync_ops, Part, Plan};
use crate::nft::{self, EventStream, Family, NftSocket, TableEvent};

/// `status.dataplane`.
#[derive(Debug, Clone, Default)]
pub struct DataplaneStatus {
    pub in_sync: bool,
    pub generation: u64,
    pub last_sync_millis: Option<u64>,
    /// When the last sync that worked ended (`status`: `lastSyncSecondsAgo`).
    pub last_sync_at: Option<Instant>,
    pub last_error: Option<String>,
    pub transactions: u64,
    pub full_syncs: u64,
    /// Netlink messages the last transaction sent.
    pub last_messages: u64,
    /// Elements left out because another service holds their key (`SERVICE: KEY in MAP
    /// is held by OTHER`).
    pub conflicts: Vec<String>,
    /// Batches sent to the worker and not answered yet.
    pub pending: u64,
}

impl DataplaneStatus {
    pub fn new() -> Self {
        Self::default()
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

/// One batch for the worker. Owned: the worker never touches the daemon's state.
#[derive(Debug)]
pub struct SyncRequest {
    /// The node's part of the input (services empty).
    pub node: Input<'static>,
    /// Services to rebuild; `None`: gone.
    pub changed: Vec<(Key, Option<OwnedService>)>,
    /// Rebuild everything (`changed` holds every service), and compare with the kernel.
    pub rebuild: bool,
    /// Compare the kernel's table with the desired one (resync timer), unless nobody
    /// committed since our last transaction.
    pub check: bool,
}

/// What the worker did with a batch.
#[derive(Debug)]
pub struct SyncOutcome {
    pub result: Result<Applied, String>,
    pub elapsed: Duration,
    pub conflicts: Vec<String>,
    /// Services to send again (they waited for a key this batch released).
    pub waiters: Vec<Key>,
    /// Batches this outcome answers.
    pub batches: u64,
}

/// A successful sync.
#[derive(Debug, Clone, Copy, Default)]
pub struct Applied {
    pub messages: u64,
    /// The table was created or replaced.
    pub replaced: bool,
    /// A transaction was sent (a check that found the table as desired sends none).
    pub committed: bool,
}

/// The event loop's end of the worker.
pub struct Worker {
    tx: mpsc::UnboundedSender<SyncRequest>,
}

impl Worker {
    /// Starts the worker thread. In a dry run it prints the table instead.
    pub async fn start(cfg: &Config, dry_run: bool) -> Result<(Worker, mpsc::UnboundedReceiver<SyncOutcome>), String> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let table = cfg.table.clone();
        // The sockets belong to the worker's own event loop, so they are opened there;
        // a missing nf_tables still fails the start.
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("dataplane".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("data plane worker: cannot start its event loop: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    let kernel = if dry_run {
                        None
                    } else {
                        match Kernel::open(&table) {
                            Ok(k) => Some(k),
                            Err(e) => {
                                let _ = ready_tx.send(Err(e));
                                return;
                            }
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    worker(rx, out_tx, kernel).await
                });
            })
            .map_err(|e| format!("cannot start the data plane worker: {e}"))?;
        ready_rx.await.map_err(|_| "the data plane worker stopped at start".to_string())??;
        Ok((Worker { tx }, out_rx))
    }
}

/// The kernel side of the worker.
struct Kernel {
    sock: NftSocket,
    events: Option<EventStream>,
    /// The ruleset generation our last transaction produced: an unchanged generation
    /// proves nobody else committed since.
    our_gen: Option<u32>,
}

const NFPROTO_INET: u8 = 1;

impl Kernel {
    fn open(table: &str) -> Result<Kernel, String> {
        let sock = NftSocket::new().map_err(|e| format!("cannot open the nf_tables netlink socket: {e}"))?;
        let events = match EventStream::new(NFPROTO_INET, table) {
            Ok(mut ev) => {
                ev.ignore_socket(&sock);
                Some(ev)
            }
            Err(e) => {
                log::warn!("cannot listen to nf_tables events ({e}); drift is repaired by the resync timer only");
                None
            }
        };
        Ok(Kernel { sock, events, our_gen: None })
    }

    async fn next_event(&mut self) -> Option<Result<TableEvent, nft::NftError>> {
        match &mut self.events {
            Some(ev) => Some(ev.next_event().await),
            None => std::future::pending().await,
        }
    }

    fn drop_events(&mut self, e: impl std::fmt::Display) {
        log::warn!("nf_tables event socket: {e}; relying on the resync timer");
        self.events = None;
    }

    /// Runs one of our transactions with the event group muted (the kernel then builds
    /// no notifications for it), and tells whether someone else committed meanwhile.
    async fn commit(&mut self, planner: &Planner, change: Option<Change>, table: &str) -> Result<Applied, String> {
        let muted = match self.events.as_mut().map(EventStream::mute) {
            Some(Ok(())) => true,
            Some(Err(e)) => {
                self.drop_events(e);
                false
            }
            None => false,
        };
        let before = self.sock.generation().await.ok();
        let r = apply(&mut self.sock, planner, change, table).await;
        if muted {
            if let Some(Err(e)) = self.events.as_mut().map(EventStream::unmute) {
                self.drop_events(e);
            }
        }
        let now = self.sock.generation().await.ok();
        match &r {
            Ok(a) if a.committed => {
                self.our_gen = now;
                // Our commit is exactly one generation; more means someone else committed
                // while we were not listening (maybe to another table: we cannot tell).
                if muted && before.map(|g| g.wrapping_add(1)) != now {
                    self.our_gen = None;
                }
            }
            Ok(_) => self.our_gen = now,
            Err(_) => self.our_gen = None,
        }
        r
    }

    /// Whether someone may have committed since our last transaction.
    async fn foreign_commit(&mut self) -> bool {
        match (self.sock.generation().await, self.our_gen) {
            (Ok(now), Some(ours)) => now != ours,
            _ => true,
        }
    }
}

/// Sends one change: the diff of a partial change; otherwise the difference between
/// the kernel's listing and the desired table, or the whole table when ours is gone.
async fn apply(
    sock: &mut NftSocket,
    planner: &Planner,
    change: Option<Change>,
    table: &str,
) -> Result<Applied, String> {
    if let Some(Change::Partial { before, after }) = &change {
        match partial_sync_ops(before, after).map_err(|e| e.to_string())? {
            Plan::Partial(ops) if ops.is_empty() => return Ok(Applied::default()),
            Plan::Partial(ops) => {
                let stats = sock.transact(&ops, None).await.map_err(|e| e.to_string())?;
                return Ok(Applied { messages: stats.messages as u64, replaced: false, committed: true });
            }
            Plan::Full(why) => log::debug!("comparing with the kernel: {why}"),
        }
    }
    let skeleton = planner.skeleton().ok_or("nothing planned yet")?;
    let (mut parts, shared) = planner.parts();
    parts.push(Part { sets: &[], chains: &[], elements: &shared });
    let kernel = nft::list::list_table(sock, NFPROTO_INET, table).await.map_err(|e| e.to_string())?;
    if let Some(k) = kernel {
        match repair(skeleton, &parts, &k).map_err(|e| e.to_string())? {
            Repair::Ops(ops) if ops.is_empty() => return Ok(Applied::default()),
            Repair::Ops(ops) => {
                let stats = sock.transact(&ops, None).await.map_err(|e| e.to_string())?;
                return Ok(Applied { messages: stats.messages as u64, replaced: false, committed: true });
            }
            Repair::Full(why) => log::info!("replacing table inet {table}: {why}"),
        }
    }
    // Lowered straight from the planner, one message at a time: neither an assembled
    // copy of the table nor all its messages exist at once.
    let rep = nft::sync::full_sync_parts(sock, skeleton, &parts).await.map_err(|e| e.to_string())?;
    Ok(Applied { messages: rep.stats.messages as u64, replaced: true, committed: true })
}

/// Folds queued batches into one (in one pass: thousands may queue while a long sync
/// runs): later objects replace earlier ones.
fn merge(mut first: SyncRequest, rest: Vec<SyncRequest>) -> SyncRequest {
    if rest.is_empty() {
        return first;
    }
    let mut changed: BTreeMap<Key, Option<OwnedService>> = std::mem::take(&mut first.changed).into_iter().collect();
    for next in rest {
        if next.rebuild {
            changed = next.changed.into_iter().collect();
            first.rebuild = true;
        } else {
            changed.extend(next.changed);
        }
        first.check |= next.check;
        first.node = next.node;
    }
    first.changed = changed.into_iter().collect();
    first
}

async fn worker(
    mut rx: mpsc::UnboundedReceiver<SyncRequest>,
    tx: mpsc::UnboundedSender<SyncOutcome>,
    mut kernel: Option<Kernel>,
) {
    let mut planner = Planner::new();
    let mut printed: Option<String> = None;
    let mut table = String::new();
    let mut node: Option<Input<'static>> = None;
    // A dry run prints the whole table at each sync, O(table): after printing it waits
    // as long as that took, and what comes meanwhile is merged into one sync, so
    // printing takes at most half a core however fast changes come.
    let mut pause = Duration::ZERO;
    loop {
        let event = async {
            match kernel.as_mut() {
                Some(k) => k.next_event().await,
                None => std::future::pending().await,
            }
        };
        // A request, or drift found by the event socket (a check of the kernel).
        let (req, sent) = tokio::select! {
            r = rx.recv() => match r {
                Some(r) => (r, 1),
                None => return,
            },
            ev = event => {
                let Some(k) = kernel.as_mut() else { continue };
                let check = match ev {
                    Some(Ok(TableEvent::Changed { deleted, by_pid, by_name, .. })) => {
                        log::warn!(
                            "table inet {table} was {} by pid {by_pid} ({}); repairing it",
                            if deleted { "deleted" } else { "changed" },
                            by_name.as_deref().unwrap_or("?")
                        );
                        true
                    }
                    // Usually our own big commit overflowed the event socket; ask the kernel.
                    Some(Ok(TableEvent::Overrun)) => k.foreign_commit().await,
                    Some(Err(e)) => {
                        k.drop_events(e);
                        false
                    }
                    None => false,
                };
                let Some(n) = node.clone() else { continue };
                if !check {
                    continue;
                }
                (SyncRequest { node: n, changed: Vec::new(), rebuild: false, check: true }, 0)
            }
        };
        if !pause.is_zero() {
            tokio::time::sleep(std::mem::take(&mut pause)).await;
        }
        let mut queued = Vec::new();
        while let Ok(next) = rx.try_recv() {
            queued.push(next);
        }
        // Batches the event loop sent (a check the event socket asked for is not one).
        let batches = sent + queued.len() as u64;
        let mut req = merge(req, queued);
        let started = Instant::now();
        table = req.node.table.clone();
        let planned = (!req.changed.is_empty()
            || req.rebuild
            || planner.skeleton().is_none()
            || node.as_ref().is_some_and(|n| !same_node(n, &req.node)))
        .then(|| planner.plan(&req.node, std::mem::take(&mut req.changed), req.rebuild));
        node = Some(req.node.clone());
        let (change, stale, waiters) = match planned {
            Some(p) => (Some(p.change), p.stale_udp, p.waiters),
            None => (None, Vec::new(), Vec::new()),
        };
        let full = matches!(change, Some(Change::Full));
        let result = match kernel.as_mut() {
            None => {
                // A dry run prints the whole table each time something changed in it.
                let t = Instant::now();
                let text = nft::render::render(&planner.assemble());
                if printed.as_deref() != Some(text.as_str()) {
                    use std::io::Write;
                    let mut out = std::io::stdout().lock();
                    let now = super::clock::rfc3339(std::time::SystemTime::now());
                    let _ = writeln!(out, "# nodeportd --dry-run: ruleset at {now}");
                    let _ = out.write_all(text.as_bytes());
                    let _ = out.flush();
                    printed = Some(text);
                }
                pause = t.elapsed();
                Ok(Applied { messages: 0, replaced: full, committed: true })
            }
            Some(k) => {
                let skip = change.is_none() && req.check && !k.foreign_commit().await;
                if skip || (change.is_none() && !req.check) {
                    Ok(Applied::default())
                } else {
                    k.commit(&planner, change, &table).await
                }
            }
        };
        if result.is_ok() && kernel.is_some() && !stale.is_empty() {
            // The conntrack module logs how many it deleted.
            if let Err(e) = conntrack::delete_udp_flows(&stale) {
                log::warn!("cannot delete stale UDP conntrack entries: {e}");
            }
        }
        if result.is_err() {
            // The next batch compares the whole table with the kernel.
            planner = Planner::new();
        }
        let outcome =
            SyncOutcome { result, elapsed: started.elapsed(), conflicts: planner.conflicts(), waiters, batches };
        if tx.send(outcome).is_err() {
            return;
        }
    }
}

fn same_node(a: &Input, b: &Input) -> bool {
    a.table == b.table
        && a.node_name == b.node_name
        && a.masquerade_mark == b.masquerade_mark
        && a.ct_mark == b.ct_mark
        && a.nodeport_ips_v4 == b.nodeport_ips_v4
        && a.nodeport_ips_v6 == b.nodeport_ips_v6
}

fn node_input(st: &State) -> Input<'static> {
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

/// The worker's copy of one stored service.
fn owned(st: &State, service: &crate::model::Service) -> OwnedService {
    let mut backends: BTreeMap<String, Vec<crate::model::Backend>> = BTreeMap::new();
    for p in st.registry.backends(service) {
        backends.entry(p.name.unwrap_or_default()).or_default().extend(p.backends);
    }
    OwnedService { service: service.clone(), backends }
}

fn owned_by_key(st: &State, key: &Key) -> Option<OwnedService> {
    st.registry.get_service(&key.0, &key.1).ok().map(|s| owned(st, &s))
}

/// The batch the state asks for now, if any: O(changed services), except a rebuild.
fn next_request(s: &mut State) -> Option<SyncRequest> {
    let rebuild = std::mem::take(&mut s.full_resync);
    let check = std::mem::take(&mut s.check_kernel);
    let node_changed = std::mem::take(&mut s.node_changed);
    let dirty = std::mem::take(&mut s.dirty);
    if !rebuild && !check && !node_changed && dirty.is_empty() {
        return None;
    }
    let changed = if rebuild {
        s.registry
            .services()
            .map(|svc| ((svc.namespace().to_string(), svc.name().to_string()), Some(owned(s, svc))))
            .collect()
    } else {
        dirty.into_iter().map(|k| (k.clone(), owned_by_key(s, &k))).collect()
    };
    Some(SyncRequest { node: node_input(s), changed, rebuild, check })
}

/// The event loop's side: send batches when woken, read outcomes back.
pub async fn sync_loop(
    st: Rc<RefCell<State>>,
    worker: Worker,
    mut outcomes: mpsc::UnboundedReceiver<SyncOutcome>,
    led: watch::Sender<LedState>,
) {
    let wake = st.borrow().wake.clone();
    let outcome_state = st.clone();
    let outcome_wake = wake.clone();
    tokio::task::spawn_local(async move {
        let mut backoff = Duration::from_millis(200);
        while let Some(o) = outcomes.recv().await {
            let ok = o.result.is_ok();
            {
                let mut s = outcome_state.borrow_mut();
                let dp = &mut s.dataplane;
                dp.pending = dp.pending.saturating_sub(o.batches);
                dp.conflicts = o.conflicts;
                match o.result {
                    Ok(a) => {
                        backoff = Duration::from_millis(200);
                        dp.generation += 1;
                        dp.in_sync = dp.pending == 0;
                        dp.last_error = None;
                        dp.last_sync_millis = Some(u64::try_from(o.elapsed.as_millis()).unwrap_or(u64::MAX));
                        dp.last_sync_at = Some(Instant::now());
                        if a.committed {
                            dp.transactions += 1;
                            dp.last_messages = a.messages;
                        }
                        if a.replaced {
                            dp.full_syncs += 1;
                        }
                        log::debug!("sync {}: {} messages in {:?}", dp.generation, a.messages, o.elapsed);
                    }
                    Err(e) => {
                        log::error!("sync failed (next: a full comparison in {backoff:?}): {e}");
                        dp.in_sync = false;
                        dp.last_error = Some(e);
                        // The worker forgot its plan: the next batch rebuilds everything.
                        s.full_resync = true;
                    }
                }
                for w in o.waiters {
                    s.dirty.insert(w);
                }
            }
            let _ = led.send(LedState::for_dataplane(ok, !ok));
            if !ok {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
            outcome_wake.notify_one();
        }
    });
    loop {
        wake.notified().await;
        // Let requests already queued on the loop land in this batch; a burst that keeps
        // coming while the worker is busy is merged there.
        tokio::task::yield_now().await;
        let req = {
            let mut s = st.borrow_mut();
            let req = next_request(&mut s);
            if req.is_some() {
                s.dataplane.pending += 1;
                s.dataplane.in_sync = false;
            }
            req
        };
        if let Some(req) = req {
            if worker.tx.send(req).is_err() {
                log::error!("the data plane worker stopped; the kernel is no longer kept in sync");
                return;
            }
        }
    }
}
