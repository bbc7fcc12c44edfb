//! The data plane worker's logic: keeps the kernel's table equal to the planned one.
//!
//! The event loop hands [`SyncRequest`]s (owned copies of the services that changed)
//! to the worker thread, which runs them through a [`Syncer`] and sends back
//! [`SyncOutcome`]s. Nothing here reads the daemon's state: data flows one way.
//!
//! A change is the diff of the changed services' pieces (`Planner`); a start, the resync
//! timer and a foreign change to our table compare the kernel's listing with the
//! desired table (`nft::repair`) and send only the difference. The table is replaced
//! only when it is gone or something in it cannot be changed in place.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::builder::Input;
use super::kernel::Kernel;
use super::plan::{Change, Key, OwnedService, Planner};
use crate::conntrack::UdpFlowFilter;
use crate::nft::repair::{repair, Repair};
use crate::nft::sync::{full_sync_each, partial_sync_ops, Part, Plan};
use crate::nft::TableEvent;

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

/// Folds queued batches into one (in one pass: thousands may queue while a long sync
/// runs): later objects replace earlier ones.
pub fn merge(mut first: SyncRequest, rest: Vec<SyncRequest>) -> SyncRequest {
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

fn same_node(a: &Input, b: &Input) -> bool {
    a.table == b.table
        && a.node_name == b.node_name
        && a.masquerade_mark == b.masquerade_mark
        && a.ct_mark == b.ct_mark
        && a.nodeport_ips_v4 == b.nodeport_ips_v4
        && a.nodeport_ips_v6 == b.nodeport_ips_v6
}

/// The planner and the kernel it keeps in step (none in a dry run).
pub struct Syncer<K> {
    kernel: Option<K>,
    planner: Planner,
    /// The node's input of the last batch.
    node: Option<Input<'static>>,
    /// The ruleset generation our last transaction produced: an unchanged generation
    /// proves nobody else committed since.
    our_gen: Option<u32>,
}

impl<K: Kernel> Syncer<K> {
    pub fn new(kernel: Option<K>) -> Self {
        Syncer { kernel, planner: Planner::new(), node: None, our_gen: None }
    }

    /// The planner (the desired table: `planner().assemble()`).
    pub fn planner(&self) -> &Planner {
        &self.planner
    }

    /// The kernel (tests: the fake, to change it behind the syncer's back).
    #[cfg(test)]
    pub fn kernel_mut(&mut self) -> &mut K {
        self.kernel.as_mut().expect("a syncer with a kernel")
    }

    /// The next foreign change the kernel reports (never, in a dry run).
    pub async fn next_event(&mut self) -> TableEvent {
        match self.kernel.as_mut() {
            Some(k) => k.next_event().await,
            None => std::future::pending().await,
        }
    }

    /// What an event asks for: a check of the kernel's table, if anything.
    pub async fn event(&mut self, ev: TableEvent) -> Option<SyncRequest> {
        let check = match ev {
            TableEvent::Changed { deleted, by_pid, by_name, .. } => {
                log::warn!(
                    "table inet {} was {} by pid {by_pid} ({}); repairing it",
                    self.node.as_ref().map_or("", |n| n.table.as_str()),
                    if deleted { "deleted" } else { "changed" },
                    by_name.as_deref().unwrap_or("?")
                );
                true
            }
            // Usually our own big commit overflowed the event socket; ask the kernel.
            TableEvent::Overrun => self.foreign_commit().await,
        };
        let node = self.node.clone()?;
        check.then_some(SyncRequest { node, changed: Vec::new(), rebuild: false, check: true })
    }

    /// Runs one (merged) batch. `batches`: how many of the event loop's batches it
    /// answers. Also returns the UDP conntrack entries the change left pointing nowhere
    /// (for the caller to delete: only after a commit that worked).
    pub async fn sync(&mut self, mut req: SyncRequest, batches: u64) -> (SyncOutcome, Vec<UdpFlowFilter>) {
        let started = Instant::now();
        let table = req.node.table.clone();
        let planned = (!req.changed.is_empty()
            || req.rebuild
            || self.planner.skeleton().is_none()
            || self.node.as_ref().is_some_and(|n| !same_node(n, &req.node)))
        .then(|| self.planner.plan(&req.node, std::mem::take(&mut req.changed), req.rebuild));
        self.node = Some(req.node);
        let (change, stale, waiters) = match planned {
            Some(p) => (Some(p.change), p.stale_udp, p.waiters),
            None => (None, Vec::new(), Vec::new()),
        };
        let full = matches!(change, Some(Change::Full));
        let dry = self.kernel.is_none();
        let result = if dry {
            Ok(Applied { messages: 0, replaced: full, committed: true })
        } else {
            let skip = change.is_none() && req.check && !self.foreign_commit().await;
            if skip || (change.is_none() && !req.check) {
                Ok(Applied::default())
            } else {
                self.commit(change, &table).await
            }
        };
        let stale = if result.is_ok() && !dry { stale } else { Vec::new() };
        if result.is_err() {
            // The next batch compares the whole table with the kernel.
            self.planner = Planner::new();
        }
        let outcome =
            SyncOutcome { result, elapsed: started.elapsed(), conflicts: self.planner.conflicts(), waiters, batches };
        (outcome, stale)
    }

    /// Runs one of our transactions with the event group muted (the kernel then builds
    /// no notifications for it), and tells whether someone else committed meanwhile.
    async fn commit(&mut self, change: Option<Change>, table: &str) -> Result<Applied, String> {
        let Some(k) = self.kernel.as_mut() else { return Ok(Applied::default()) };
        let muted = k.mute();
        let before = k.generation().await.ok();
        let r = apply(k, &self.planner, change, table).await;
        if muted {
            k.unmute();
        }
        let now = k.generation().await.ok();
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
        let Some(k) = self.kernel.as_mut() else { return false };
        match (k.generation().await, self.our_gen) {
            (Ok(now), Some(ours)) => now != ours,
            _ => true,
        }
    }
}

/// Sends one change: the diff of a partial change; otherwise the difference between
/// the kernel's listing and the desired table, or the whole table when ours is gone.
async fn apply<K: Kernel>(
    k: &mut K,
    planner: &Planner,
    change: Option<Change>,
    table: &str,
) -> Result<Applied, String> {
    if let Some(Change::Partial { before, after }) = &change {
        match partial_sync_ops(before, after).map_err(|e| e.to_string())? {
            Plan::Partial(ops) if ops.is_empty() => return Ok(Applied::default()),
            Plan::Partial(ops) => {
                let stats = k.transact(&ops).await.map_err(|e| e.to_string())?;
                return Ok(Applied { messages: stats.messages as u64, replaced: false, committed: true });
            }
            Plan::Full(why) => log::debug!("comparing with the kernel: {why}"),
        }
    }
    let skeleton = planner.skeleton().ok_or("nothing planned yet")?;
    let (mut parts, shared) = planner.parts();
    parts.push(Part { packed: &shared, ..Part::default() });
    let kernel = k.list_table(table).await.map_err(|e| e.to_string())?;
    if let Some(kt) = kernel {
        match repair(skeleton, &parts, &kt).map_err(|e| e.to_string())? {
            Repair::Ops(ops) if ops.is_empty() => return Ok(Applied::default()),
            Repair::Ops(ops) => {
                let stats = k.transact(&ops).await.map_err(|e| e.to_string())?;
                return Ok(Applied { messages: stats.messages as u64, replaced: false, committed: true });
            }
            Repair::Full(why) => log::info!("replacing table inet {table}: {why}"),
        }
    }
    // Lowered straight from the planner, one message at a time: neither an assembled
    // copy of the table nor all its messages exist at once.
    let stats = k.transact_with(|sink| full_sync_each(skeleton, &parts, sink)).await.map_err(|e| e.to_string())?;
    Ok(Applied { messages: stats.messages as u64, replaced: true, committed: true })
}
