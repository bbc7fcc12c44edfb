//! The node's NodePort addresses, followed live through `netwatch`.

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::{json, Value};
use tokio::sync::{watch, Notify};

use super::State;
use crate::config::Config;
use crate::netwatch::{NetWatch, NetWatchHandle, NodeAddresses};

pub struct NodeState {
    pub current: NodeAddresses,
    /// False until the first rtnetlink dump succeeded.
    pub known: bool,
    pub error: Option<String>,
    handle: Option<NetWatchHandle>,
    rx: Option<watch::Receiver<NodeAddresses>>,
}

impl NodeState {
    pub async fn start(cfg: &Config, _dry_run: bool, _wake: Rc<Notify>) -> NodeState {
        match NetWatch::start(cfg.nodeport_addresses.clone(), cfg.node_ips.clone()).await {
            Ok((initial, handle, rx)) => {
                NodeState { current: initial, known: true, error: None, handle: Some(handle), rx: Some(rx) }
            }
            Err(e) => {
                log::error!(
                    "cannot read the node's addresses over rtnetlink: {e}; NodePorts answer nowhere until it works"
                );
                NodeState {
                    current: NodeAddresses::default(),
                    known: false,
                    error: Some(e.to_string()),
                    handle: None,
                    rx: None,
                }
            }
        }
    }

    pub fn reconfigure(&mut self, cfg: &Config) {
        if let Some(h) = &self.handle {
            if let Err(e) = h.reconfigure(cfg.nodeport_addresses.clone(), cfg.node_ips.clone()) {
                log::error!("cannot apply the new nodeport_addresses: {e}");
            }
        }
    }

    pub fn addresses(&self) -> Vec<String> {
        self.current.all().map(|a| a.to_string()).collect()
    }

    pub fn selectors_json(&self) -> Value {
        Value::Array(
            self.current
                .picked_by
                .iter()
                .map(|p| json!({"address": p.ip.to_string(), "interfaces": p.ifaces, "selectors": p.selectors}))
                .collect(),
        )
    }

    pub fn unmatched(&self) -> &[String] {
        &self.current.unmatched
    }

    pub fn primary_json(&self) -> Value {
        json!({
            "ipv4": self.current.primary_v4.map(|a| a.to_string()),
            "ipv6": self.current.primary_v6.map(|a| a.to_string()),
        })
    }
}

/// Follow address changes: each one only changes the `nodeport-ips` sets, so the sync
/// that follows touches just those elements.
pub fn spawn_watchers(st: Rc<RefCell<State>>) {
    let rx = st.borrow_mut().node.rx.take();
    if let Some(mut rx) = rx {
        tokio::task::spawn_local(async move {
            while rx.changed().await.is_ok() {
                let new = rx.borrow_and_update().clone();
                let mut s = st.borrow_mut();
                s.node.current = new;
                s.node.known = true;
                s.node_changed = true;
                s.wake.notify_one();
            }
        });
    }
}
