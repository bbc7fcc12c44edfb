//! The daemon's side of the native ubus object: requests from both the socket and ubus
//! go through `handlers::call`, which announces Service changes with [`object_event`];
//! `notify_sync` announces the data plane's state; `spawn` starts the connection.

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::{json, Map, Value};
use tokio::sync::watch;

use super::sync::DataplaneStatus;
use super::State;
use crate::model::{EndpointsObject, SERVICE_NAME_LABEL};
use crate::registry::{Action, Object};
use crate::ubus::{self, Event, SERVICE_EVENT, SYNC_EVENT};

/// `nodeportd.service` for a Service created, changed (`action` Created or Configured) or
/// deleted: `{"action", "namespace", "name", "clusterIP", "nodePorts"}`; for a change of the
/// Endpoints or EndpointSlice that feeds one: `{"action": "endpoints", "namespace",
/// "name", "endpoints": "KIND/NAME"}`. Nothing for an unchanged object or a Node.
pub fn object_event(deleted: bool, action: Action, obj: &Object) -> Option<Event> {
    if !deleted && action == Action::Unchanged {
        return None;
    }
    let mut data = Map::new();
    match obj {
        Object::Service(s) => {
            data.insert("action".into(), json!(if deleted { "deleted".to_string() } else { action.to_string() }));
            data.insert("namespace".into(), json!(s.metadata.ns()));
            data.insert("name".into(), json!(s.metadata.name));
            if let Some(ip) = &s.spec.cluster_ip {
                data.insert("clusterIP".into(), json!(ip));
            }
            let node_ports = s.spec.ports.iter().filter_map(|p| p.node_port).map(Value::from).collect();
            data.insert("nodePorts".into(), Value::Array(node_ports));
        }
        Object::Endpoints(e) => {
            let (kind, meta) = match e {
                EndpointsObject::Endpoints(o) => ("Endpoints", &o.metadata),
                EndpointsObject::Slice(o) => ("EndpointSlice", &o.metadata),
            };
            // An Endpoints object feeds the Service of its name; a slice the one its label names.
            let service = match e {
                EndpointsObject::Endpoints(_) => meta.name.as_str(),
                EndpointsObject::Slice(_) => meta.labels.get(SERVICE_NAME_LABEL)?,
            };
            data.insert("action".into(), json!("endpoints"));
            data.insert("namespace".into(), json!(meta.ns()));
            data.insert("name".into(), json!(service));
            data.insert("endpoints".into(), json!(format!("{kind}/{}", meta.name)));
        }
        Object::Node(_) => return None,
    }
    Some(Event { id: SERVICE_EVENT, data })
}

/// `nodeportd.sync` after a sync: `{"inSync", "generation", "lastSyncMillis", "lastError"}`
/// (`lastError` null after a sync that worked).
pub fn sync_event(dp: &DataplaneStatus) -> Event {
    let mut data = Map::new();
    data.insert("inSync".into(), json!(dp.in_sync));
    data.insert("generation".into(), json!(dp.generation));
    if let Some(ms) = dp.last_sync_millis {
        data.insert("lastSyncMillis".into(), json!(ms));
    }
    data.insert("lastError".into(), json!(dp.last_error));
    Event { id: SYNC_EVENT, data }
}

/// The hook for the sync path: call it when the data plane's status changed.
pub fn notify_sync(st: &State) {
    st.ubus.send(sync_event(&st.dataplane));
}

/// Start the connection to ubusd (nothing for `ubus = "off"`). `synced` fires after each
/// sync (the status LED's channel); each firing becomes a `nodeportd.sync` event.
pub fn spawn<T: Send + Sync + 'static>(
    st: &Rc<RefCell<State>>,
    queue: Rc<ubus::Queue>,
    mut synced: watch::Receiver<T>,
) {
    let setting = st.borrow().cfg.ubus.clone();
    if setting == ubus::Setting::Off {
        return;
    }
    let handler_state = st.clone();
    let handler: ubus::Call = Rc::new(move |method, params| {
        Box::pin(super::handlers::call(handler_state.clone(), method.to_string(), params.into()))
    });
    tokio::task::spawn_local(ubus::conn::run(setting, handler, queue));
    let st = st.clone();
    tokio::task::spawn_local(async move {
        let mut last = None;
        while synced.changed().await.is_ok() {
            let s = st.borrow();
            let now = (s.dataplane.generation, s.dataplane.in_sync, s.dataplane.last_error.clone());
            if last.as_ref() != Some(&now) {
                notify_sync(&s);
                last = Some(now);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(v: Value) -> Object {
        Object::Service(serde_json::from_value(v).unwrap())
    }

    fn endpoints(v: Value) -> Object {
        let o = if v["kind"] == "EndpointSlice" {
            EndpointsObject::Slice(serde_json::from_value(v).unwrap())
        } else {
            EndpointsObject::Endpoints(serde_json::from_value(v).unwrap())
        };
        Object::Endpoints(o)
    }

    #[test]
    fn service_events_for_changes_only() {
        let svc = service(json!({"metadata": {"name": "web", "namespace": "shop"},
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80, "nodePort": 30080}, {"port": 81}]}}));
        let ev = object_event(false, Action::Created, &svc).unwrap();
        assert_eq!(ev.id, "nodeportd.service");
        assert_eq!(
            Value::Object(ev.data),
            json!({"action": "created", "namespace": "shop", "name": "web", "clusterIP": "10.96.0.10", "nodePorts": [30080]})
        );
        assert_eq!(object_event(false, Action::Configured, &svc).unwrap().data["action"], "configured");
        assert_eq!(object_event(true, Action::Unchanged, &svc).unwrap().data["action"], "deleted");
        assert!(object_event(false, Action::Unchanged, &svc).is_none());
        // No namespace is the default one, no clusterIP no key.
        let bare = service(json!({"metadata": {"name": "db"}, "spec": {"ports": [{"port": 5432}]}}));
        assert_eq!(
            Value::Object(object_event(false, Action::Created, &bare).unwrap().data),
            json!({"action": "created", "namespace": "default", "name": "db", "nodePorts": []})
        );
        let node = Object::Node(serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap());
        assert!(object_event(false, Action::Created, &node).is_none());
    }

    #[test]
    fn endpoints_events_name_the_service_they_feed() {
        let ep = endpoints(json!({"kind": "Endpoints", "metadata": {"name": "web", "namespace": "shop"}}));
        let ev = object_event(false, Action::Configured, &ep).unwrap();
        assert_eq!(
            Value::Object(ev.data),
            json!({"action": "endpoints", "namespace": "shop", "name": "web", "endpoints": "Endpoints/web"})
        );
        let slice = endpoints(json!({"kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": "web-abc", "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}}}));
        let ev = object_event(true, Action::Unchanged, &slice).unwrap();
        assert_eq!(
            (ev.data["name"].as_str(), ev.data["endpoints"].as_str()),
            (Some("web"), Some("EndpointSlice/web-abc"))
        );
        assert!(object_event(false, Action::Unchanged, &ep).is_none());
        let orphan = endpoints(json!({"kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": "x", "namespace": "shop"}}));
        assert!(object_event(false, Action::Created, &orphan).is_none());
    }

    #[test]
    fn sync_event_carries_the_state() {
        let mut dp = DataplaneStatus::new();
        dp.generation = 3;
        dp.last_error = Some("nf_tables: EPERM".into());
        let ev = sync_event(&dp);
        assert_eq!(ev.id, "nodeportd.sync");
        assert_eq!(Value::Object(ev.data), json!({"inSync": false, "generation": 3, "lastError": "nf_tables: EPERM"}));
        dp.last_error = None;
        assert_eq!(sync_event(&dp).data["lastError"], Value::Null);
    }
}
