//! `pod_routes`: the daemon's side. A task on the event loop recomputes the routes to
//! the Nodes' pod CIDRs when a Node changes, when the router's links, addresses or routes
//! change, on a config reload, and at start (which also removes stale routes of ours),
//! and programs the difference over rtnetlink (`crate::podroutes`). Nothing here blocks:
//! the netlink calls are awaited, the state is borrowed only between them.

use std::rc::Rc;

use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::podroutes::{self, Plan};

/// What `status.podRoutes` shows, and the wake-up for the task.
#[derive(Default)]
pub struct PodRoutes {
    wake: Rc<Notify>,
    /// The routes in place and the skipped nodes, after the last pass.
    pub plan: Plan,
    pub last_error: Option<String>,
    /// Passes made (each one a dump and a difference).
    pub passes: u64,
}

impl PodRoutes {
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    pub fn status_json(&self, enabled: bool) -> Value {
        json!({
            "enabled": enabled,
            "protocol": podroutes::RTPROT_NODEPORTD,
            "routes": self.plan.routes,
            "skipped": self.plan.skipped,
            "lastError": self.last_error,
        })
    }
}

#[cfg(feature = "pod-routes")]
pub use task::spawn;

/// The task that programs the routes (feature `pod-routes`; a build without it refuses
/// `pod_routes = true` when reading the config).
#[cfg(feature = "pod-routes")]
mod task {
    use std::cell::RefCell;
    use std::collections::BTreeSet;
    use std::rc::Rc;
    use std::time::Duration;

    use futures::StreamExt;
    use tokio::sync::Notify;

    use super::super::State;
    use crate::model::Node;
    use crate::podroutes::{self, kernel, Decision, Plan, Skipped};

    /// Wait this long for a burst of route/address events to end before acting on it.
    const QUIET: Duration = Duration::from_millis(100);
    /// After a failed dump, try again this much later.
    const RETRY: Duration = Duration::from_secs(2);

    /// Start the task (it removes stale routes of ours even when `pod_routes` is off).
    pub fn spawn(st: Rc<RefCell<State>>) {
        tokio::task::spawn_local(run(st));
    }

    // The same change groups netwatch follows: links, addresses and routes.
    use crate::netwatch::GROUPS;

    async fn run(st: Rc<RefCell<State>>) {
        let wake = st.borrow().pod_routes.wake.clone();
        let (conn, handle, mut events) = match rtnetlink::new_multicast_connection(&GROUPS) {
            Ok(c) => c,
            Err(e) => {
                let msg = format!("pod routes: cannot open rtnetlink: {e}");
                log::error!("{msg}");
                st.borrow_mut().pod_routes.last_error = Some(msg);
                return;
            }
        };
        tokio::spawn(conn);
        let (mut need, mut ok) = (true, true);
        loop {
            if need {
                ok = pass(&st, &handle).await;
                need = false;
            }
            let enabled = st.borrow().cfg.pod_routes;
            tokio::select! {
                // A Node changed or the config was reloaded: act at once.
                _ = wake.notified() => need = true,
                // Kernel events are always read (the channel is unbounded), acted on only
                // when enabled, after the burst (our own changes come back as events too:
                // the pass after them finds nothing to do).
                ev = events.next() => match ev {
                    None => {
                        log::error!("pod routes: the rtnetlink event socket closed; following Node changes only");
                        return follow_nodes_only(&st, &handle, &wake).await;
                    }
                    Some(_) if enabled => {
                        loop {
                            tokio::select! {
                                _ = tokio::time::sleep(QUIET) => break,
                                ev = events.next() => if ev.is_none() { break },
                            }
                        }
                        need = true;
                    }
                    Some(_) => {}
                },
                _ = tokio::time::sleep(RETRY), if !ok => need = true,
            }
        }
    }

    async fn follow_nodes_only(st: &Rc<RefCell<State>>, handle: &rtnetlink::Handle, wake: &Notify) {
        loop {
            wake.notified().await;
            pass(st, handle).await;
        }
    }

    /// One pass: plan from the Nodes and the router's addresses, read the kernel, program
    /// the difference, publish the outcome. False when the kernel could not be read.
    async fn pass(st: &Rc<RefCell<State>>, handle: &rtnetlink::Handle) -> bool {
        let (enabled, dry_run, nodes): (bool, bool, Vec<Node>) = {
            let s = st.borrow();
            (
                s.cfg.pod_routes,
                s.dry_run,
                if s.cfg.pod_routes { s.registry.nodes().cloned().collect() } else { Vec::new() },
            )
        };
        let snap = match crate::netwatch::dump(handle).await {
            Ok(s) => s,
            Err(e) => return fail(st, format!("pod routes: {e}")),
        };
        let (connected, own) = podroutes::connected(&snap);
        let mut plan = Plan::default();
        let mut wanted = Vec::new();
        for d in podroutes::plan(&nodes, &connected, &own) {
            match d {
                Decision::Route(w) => wanted.push(w),
                Decision::Skip(s) => plan.skipped.push(s),
            }
        }
        let cidrs: BTreeSet<_> = wanted.iter().map(|w| w.route.cidr).collect();
        let found = match kernel::dump(handle, &cidrs).await {
            Ok(f) => f,
            Err(e) => return fail(st, format!("pod routes: {e}")),
        };
        let changes = podroutes::diff(&wanted, &found);
        for (w, other) in &changes.blocked {
            plan.skipped.push(Skipped {
                node: w.route.node.clone(),
                cidr: Some(w.route.cidr),
                reason: format!(
                    "a route to {} of protocol {} is in the main table (not ours; left alone)",
                    other.cidr, other.protocol
                ),
            });
        }
        let mut errors = Vec::new();
        let mut refused = Vec::new();
        if !dry_run && (!changes.add.is_empty() || !changes.replace.is_empty() || !changes.delete.is_empty()) {
            (refused, errors) = kernel::apply(handle, &changes).await;
        }
        for (w, e) in &refused {
            plan.skipped.push(Skipped {
                node: w.route.node.clone(),
                cidr: Some(w.route.cidr),
                reason: format!("the kernel refused the route via {}: {e}", w.route.via),
            });
        }
        let blocked: BTreeSet<_> = changes.blocked.iter().map(|(w, _)| w.route.cidr).collect();
        plan.routes = wanted
            .into_iter()
            .filter(|w| !blocked.contains(&w.route.cidr) && !refused.iter().any(|(r, _)| r.route.cidr == w.route.cidr))
            .collect();
        for e in &errors {
            log::warn!("pod routes: {e}");
        }
        for s in plan.skipped.iter().filter(|s| enabled && !st.borrow().pod_routes.plan.skipped.contains(s)) {
            log::info!(
                "pod routes: node {}{}: {}",
                s.node,
                s.cidr.map(|c| format!(" {c}")).unwrap_or_default(),
                s.reason
            );
        }
        let mut s = st.borrow_mut();
        s.pod_routes.plan = plan;
        s.pod_routes.last_error = errors.pop();
        s.pod_routes.passes += 1;
        true
    }

    fn fail(st: &Rc<RefCell<State>>, msg: String) -> bool {
        log::warn!("{msg}");
        st.borrow_mut().pod_routes.last_error = Some(msg);
        false
    }
}
