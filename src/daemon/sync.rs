//! Keeps the kernel in step with the stored objects, off the event loop.
//!
//! A data plane worker thread owns everything that talks to the kernel: the
//! nf_tables socket, the nf_tables event socket, conntrack, and the planner. The event
//! loop only collects which services changed, hands the worker owned copies of them
//! ([`SyncRequest`]) and reads [`SyncOutcome`]s back: the API, the health-check
//! listeners and netwatch answer while any sync runs. What the worker does with a
//! batch is pure logic over a kernel interface: `dataplane::syncer` (planning and
//! claims: `dataplane::plan`, `dataplane::claims`). This file is the daemon's side:
//! turning its state into batches and the outcomes back into status.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::State;
use crate::config::Config;
use crate::conntrack;
use crate::dataplane::builder::Input;
use crate::dataplane::kernel::Netlink;
use crate::dataplane::plan::{Key, OwnedService, ServiceCopy};
use crate::dataplane::syncer::{merge, SyncOutcome, SyncRequest, Syncer};
use crate::led::LedState;
use crate::nft::{self, Family, NftSocket};
use crate::registry::Squeezed;

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
    /// From the daemon's start until the data plane was first in sync (`status`:
    /// `startToInSyncMillis`); `None` until then.
    pub start_to_in_sync_millis: Option<u64>,
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
                        match Netlink::open(&table) {
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

async fn worker(
    mut rx: mpsc::UnboundedReceiver<SyncRequest>,
    tx: mpsc::UnboundedSender<SyncOutcome>,
    kernel: Option<Netlink>,
) {
    let dry_run = kernel.is_none();
    let mut syncer = Syncer::new(kernel);
    let mut printed: Option<String> = None;
    // A dry run prints the whole table at each sync, O(table): after printing it waits
    // as long as that took, and what comes meanwhile is merged into one sync, so
    // printing takes at most half a core however fast changes come.
    let mut pause = Duration::ZERO;
    loop {
        // A request, or drift found by the event socket (a check of the kernel).
        let (req, sent) = tokio::select! {
            r = rx.recv() => match r {
                Some(r) => (r, 1),
                None => return,
            },
            ev = syncer.next_event() => match syncer.event(ev).await {
                Some(r) => (r, 0),
                None => continue,
            },
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
        let started = Instant::now();
        let rebuild = req.rebuild || queued.iter().any(|q| q.rebuild);
        let (mut outcome, stale) = syncer.sync(merge(req, queued), batches).await;
        if rebuild {
            // The copies of every service and the batch are gone: give their pages back.
            super::memory::release_free();
        }
        if dry_run {
            // A dry run prints the whole table each time something changed in it.
            let t = Instant::now();
            let text = nft::render::render(&syncer.planner().assemble());
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
            outcome.elapsed = started.elapsed();
        }
        if !stale.is_empty() {
            // The conntrack module logs how many it deleted.
            if let Err(e) = conntrack::delete_udp_flows(&stale) {
                log::warn!("cannot delete stale UDP conntrack entries: {e}");
            }
        }
        if tx.send(outcome).is_err() {
            return;
        }
    }
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

/// The worker's copy of one stored service. In a rebuild a packed one goes as its text
/// (`text`; the worker decodes it), so that the request does not hold every Service
/// typed at once; a change sends the copy decoded here for its backends.
fn owned(st: &State, service: std::sync::Arc<crate::model::Service>, text: Option<Squeezed>) -> OwnedService {
    let mut backends: BTreeMap<String, Vec<crate::model::Backend>> = BTreeMap::new();
    for p in st.registry.backends(&service) {
        backends.entry(p.name.unwrap_or_default()).or_default().extend(p.backends);
    }
    let service = match text {
        Some(text) => {
            ServiceCopy::Text { text, created: service.metadata.creation_timestamp.as_deref().map(Box::from) }
        }
        None => ServiceCopy::Typed(service),
    };
    OwnedService { service, backends }
}

fn owned_by_key(st: &State, key: &Key) -> Option<OwnedService> {
    st.registry.service(&key.0, &key.1).map(|s| owned(st, s, None))
}

/// The batch the state asks for now, if any, with the services to read into it
/// ([`read_services`]): O(changed services), except a rebuild.
fn next_request(s: &mut State) -> Option<(SyncRequest, Vec<Key>)> {
    let rebuild = std::mem::take(&mut s.full_resync);
    let check = std::mem::take(&mut s.check_kernel);
    let node_changed = std::mem::take(&mut s.node_changed);
    let dirty = std::mem::take(&mut s.dirty);
    if !rebuild && !check && !node_changed && dirty.is_empty() {
        return None;
    }
    // A rebuild reads every service (`read_services`), whatever is dirty.
    let keys: Vec<Key> = if rebuild { Vec::new() } else { dirty.into_iter().collect() };
    let changed = Vec::with_capacity(if rebuild { s.registry.service_count() } else { keys.len() });
    Some((SyncRequest { node: node_input(s), changed, rebuild, check }, keys))
}

/// Reads a batch's services from the registry in steps, letting the loop answer between
/// them: a rebuild reads every service, and a packed one is decoded from its text.
/// A rebuild walks the services in order, each step from where the last one ended. What
/// changes meanwhile is marked dirty again and goes in the next batch.
async fn read_services(st: &Rc<RefCell<State>>, req: &mut SyncRequest, keys: Vec<Key>) {
    const STEP: usize = 256;
    if req.rebuild {
        loop {
            let read = req.changed.len();
            {
                let s = st.borrow();
                let after = req.changed.last().map(|(k, _)| k);
                let step = s.registry.services_after(after, STEP);
                if step.is_empty() {
                    return;
                }
                for (k, svc, text) in step {
                    let o = owned(&s, svc, text);
                    req.changed.push((k, Some(o)));
                }
            }
            {
                // Read: the worker's copies are all the rebuild needs of them.
                let mut s = st.borrow_mut();
                for (k, _) in &req.changed[read..] {
                    s.registry.pack_read(k);
                }
            }
            tokio::task::yield_now().await;
        }
    }
    let mut keys = keys.into_iter().peekable();
    loop {
        {
            let s = st.borrow();
            for k in keys.by_ref().take(STEP) {
                let o = owned_by_key(&s, &k);
                req.changed.push((k, o));
            }
        }
        if keys.peek().is_none() {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// How long the data plane stays quiet before the objects stored since are packed into
/// text ([`crate::registry::Registry::pack`]): a burst of writes, such as a List applied
/// in batches, is packed once at its end, not batch by batch.
const PACK_QUIET: Duration = Duration::from_secs(1);
/// More than this many waiting are packed without waiting for quiet.
const PACK_MOST_WAITING: usize = 512;

/// Packs what waits, in steps, so that the loop keeps answering (after a start, that is
/// every object). A sync request in flight keeps what it shares typed.
async fn pack_registry(st: &Rc<RefCell<State>>) {
    const STEP: usize = 256;
    let many = st.borrow().registry.unpacked() > STEP;
    while st.borrow_mut().registry.pack(STEP) {
        tokio::task::yield_now().await;
    }
    if many {
        super::memory::release_free();
    }
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
        // Objects wait to be packed: the next quiet second packs them.
        let mut pack_due = false;
        loop {
            let o = if pack_due {
                match tokio::time::timeout(PACK_QUIET, outcomes.recv()).await {
                    Ok(o) => o,
                    Err(_) => {
                        pack_due = false;
                        if outcome_state.borrow().dataplane.pending == 0 {
                            pack_registry(&outcome_state).await;
                        }
                        continue;
                    }
                }
            } else {
                outcomes.recv().await
            };
            let Some(o) = o else { break };
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
                        if dp.in_sync && dp.start_to_in_sync_millis.is_none() {
                            // Measured by the daemon's own clock, so that nothing has to
                            // poll the socket to time a start (on a one-CPU router the
                            // polling would take its CPU from the start it times).
                            let ms = u64::try_from(s.started.elapsed().as_millis()).unwrap_or(u64::MAX);
                            let dp = &mut s.dataplane;
                            dp.start_to_in_sync_millis = Some(ms);
                            log::info!(
                                "in sync {ms} ms after start ({} messages, the last sync {} ms)",
                                dp.last_messages,
                                dp.last_sync_millis.unwrap_or(0)
                            );
                        }
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
            let (idle, waiting) = {
                let s = outcome_state.borrow();
                (s.dataplane.pending == 0, s.registry.unpacked())
            };
            pack_due = waiting > 0;
            if idle && waiting > PACK_MOST_WAITING {
                pack_registry(&outcome_state).await;
            }
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
        if let Some((mut req, keys)) = req {
            read_services(&st, &mut req, keys).await;
            let rebuild = req.rebuild;
            if worker.tx.send(req).is_err() {
                log::error!("the data plane worker stopped; the kernel is no longer kept in sync");
                return;
            }
            if rebuild {
                // The worker has its copies of every service with its backends: objects
                // whose text is known (restored, just written) become that text now, so
                // that the typed Services live only as long as the worker needs them and
                // the typed EndpointSlices not at all.
                pack_registry(&st).await;
            }
        }
    }
}
