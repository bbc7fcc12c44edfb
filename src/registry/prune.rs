//! `apply --prune` (kubectl's meaning): which stored objects an applier created earlier
//! that its newest input no longer holds. Pure selection; the caller deletes them.
//!
//! The applier is recorded on each object by the annotation [`APPLIED_BY`] (set by
//! `nodeportctl apply`, as `kubectl apply` sets `last-applied-configuration`). Only
//! objects carrying it with the same value, of a kind present in the input, are pruned.

use std::collections::BTreeSet;

use super::Registry;
use crate::model::ObjectMeta;

pub use crate::model::APPLIED_BY;

/// An object by kind (`Service`, `Endpoints`, `EndpointSlice`, `Node`), namespace ("" for
/// a Node) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectRef {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

impl Registry {
    /// The objects applied by `applier` that `keep` (the input) does not hold, for each
    /// kind present in `keep`, in kind, namespace, name order. An empty input prunes
    /// nothing.
    pub fn prune_selection(&self, applier: &str, keep: &BTreeSet<ObjectRef>) -> Vec<ObjectRef> {
        let kinds: BTreeSet<&str> = keep.iter().map(|r| r.kind).collect();
        let mine = |m: &ObjectMeta| m.annotations.get(APPLIED_BY).is_some_and(|a| a == applier);
        let mut out = Vec::new();
        let mut consider = |kind: &'static str, m: &ObjectMeta, namespace: &str| {
            if !kinds.contains(kind) || !mine(m) {
                return;
            }
            let r = ObjectRef { kind, namespace: namespace.to_string(), name: m.name.clone() };
            if !keep.contains(&r) {
                out.push(r);
            }
        };
        for s in self.services.values() {
            // Only objects the applier annotated are read whole.
            if s.slot.annotations().get(APPLIED_BY) == Some(applier) {
                let s = s.slot.get();
                consider("Service", &s.metadata, s.namespace());
            }
        }
        for e in self.endpoints.values() {
            consider("Endpoints", &e.metadata, e.metadata.ns());
        }
        for e in self.slices.values() {
            if e.annotations().get(APPLIED_BY) == Some(applier) {
                let e = e.get();
                consider("EndpointSlice", &e.metadata, e.metadata.ns());
            }
        }
        for n in self.nodes.values() {
            consider("Node", &n.metadata, "");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PortRange;
    use crate::model::{parse_object, AnyObject};
    use crate::registry::Stamp;
    use serde_json::json;

    fn stamp() -> Stamp {
        Stamp { now: "2026-01-01T00:00:00Z".into(), uid: "00000000-0000-4000-8000-000000000001".into() }
    }

    fn meta(name: &str, ns: Option<&str>, by: Option<&str>) -> serde_json::Value {
        let mut m = json!({"name": name});
        if let Some(ns) = ns {
            m["namespace"] = json!(ns);
        }
        if let Some(by) = by {
            m["annotations"] = json!({APPLIED_BY: by});
        }
        m
    }

    fn reg_with(objs: Vec<serde_json::Value>) -> Registry {
        let cidrs: Vec<ipnet::IpNet> = vec!["10.96.0.0/24".parse().unwrap()];
        let mut r = Registry::with_seed(PortRange { first: 30000, last: 30099 }, &cidrs, 1);
        for v in objs {
            match parse_object(v).unwrap().remove(0) {
                AnyObject::Service(s) => drop(r.apply_service(s, &stamp()).unwrap()),
                AnyObject::Node(n) => drop(r.apply_node(n, &stamp()).unwrap()),
                o => drop(r.apply_endpoints(o.into_endpoints().unwrap(), &stamp()).unwrap()),
            }
        }
        r
    }

    fn svc(name: &str, ns: Option<&str>, by: Option<&str>) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": meta(name, ns, by), "spec": {"ports": [{"port": 80}]}})
    }

    fn slice(name: &str, by: Option<&str>) -> serde_json::Value {
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta(name, None, by),
            "addressType": "IPv4", "endpoints": [], "ports": []})
    }

    fn node(name: &str, by: Option<&str>) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": meta(name, None, by)})
    }

    fn r(kind: &'static str, ns: &str, name: &str) -> ObjectRef {
        ObjectRef { kind, namespace: ns.into(), name: name.into() }
    }

    #[test]
    fn prunes_only_this_appliers_objects_missing_from_the_input() {
        let reg = reg_with(vec![
            svc("web", None, Some("nodeportctl")),
            svc("gone", None, Some("nodeportctl")),
            svc("gone", Some("other"), Some("nodeportctl")),
            svc("by-hand", None, None),
            svc("by-cron", None, Some("cron")),
            slice("gone-1", Some("nodeportctl")),
            node("n1", Some("nodeportctl")),
            node("n2", Some("nodeportctl")),
        ]);
        let keep: BTreeSet<ObjectRef> =
            [r("Service", "default", "web"), r("EndpointSlice", "default", "web-1"), r("Node", "", "n1")].into();
        assert_eq!(
            reg.prune_selection("nodeportctl", &keep),
            [
                r("Service", "default", "gone"),
                r("Service", "other", "gone"),
                r("EndpointSlice", "default", "gone-1"),
                r("Node", "", "n2")
            ]
        );
        assert_eq!(reg.prune_selection("cron", &keep), [r("Service", "default", "by-cron")]);
    }

    #[test]
    fn kinds_absent_from_the_input_are_left_alone() {
        let reg = reg_with(vec![
            svc("gone", None, Some("nodeportctl")),
            slice("gone-1", Some("nodeportctl")),
            node("n2", Some("nodeportctl")),
        ]);
        let keep: BTreeSet<ObjectRef> = [r("Service", "default", "web")].into();
        assert_eq!(reg.prune_selection("nodeportctl", &keep), [r("Service", "default", "gone")]);
        let keep: BTreeSet<ObjectRef> = [r("Node", "", "n1")].into();
        assert_eq!(reg.prune_selection("nodeportctl", &keep), [r("Node", "", "n2")]);
        assert!(reg.prune_selection("nodeportctl", &BTreeSet::new()).is_empty());
    }
}
