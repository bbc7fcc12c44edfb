//! `pod_routes`: the daemon's side. A task on the event loop recomputes the routes to
//! the Nodes' pod CIDRs when a Node changes, when the router's addresses or routes change,
//! and at start, and programs the difference over rtnetlink (`crate::podroutes`).

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::podroutes::Plan;

/// What `status.podRoutes` shows, and the wake-up for the task.
#[derive(Default)]
pub struct PodRoutes {
    wake: Rc<Notify>,
    /// The last plan and what programming it gave.
    pub plan: Plan,
    pub last_error: Option<String>,
}

impl PodRoutes {
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    pub fn status_json(&self, enabled: bool) -> Value {
        json!({
            "enabled": enabled,
            "protocol": crate::podroutes::RTPROT_NODEPORTD,
            "routes": self.plan.routes,
            "skipped": self.plan.skipped,
            "lastError": self.last_error,
        })
    }
}

pub type Shared = Rc<RefCell<super::State>>;
