//! The daemon's side of the native ubus object: requests from both the socket and ubus
//! go through `call`, which announces Service changes; `notify_sync` announces the data
//! plane's state; `spawn` starts the connection.

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::{json, Map, Value};
use tokio::sync::watch;

use super::sync::DataplaneStatus;
use super::State;
use crate::api::rpc::RpcError;
use crate::ubus::{self, Event, SERVICE_EVENT, SYNC_EVENT};

/// One request, from the socket API or ubus: the handler, then the event it causes.
pub async fn call(st: Rc<RefCell<State>>, method: String, params: Value) -> Result<Value, RpcError> {
    let brief = method == "objects.apply" && super::handlers::brief_param(&params).unwrap_or(false);
    let mut result = super::handlers::call(st.clone(), &method, params).await;
    match &result {
        Ok(r) if st.borrow().ubus.enabled() => {
            for ev in events(&method, r) {
                st.borrow().ubus.send(ev);
            }
        }
        _ => {}
    }
    if brief {
        // The events above had the objects; the caller asked for the actions only.
        if let Ok(Value::Object(r)) = &mut result {
            for item in r.get_mut("results").and_then(Value::as_array_mut).into_iter().flatten() {
                if let Value::Object(m) = item {
                    m.remove("object");
                }
            }
        }
    }
    result
}

/// The events of one answered request: one per object of an `objects.apply` (a List).
fn events(method: &str, result: &Value) -> Vec<Event> {
    let pruned = method == "objects.prune";
    if method != "objects.apply" && !pruned {
        return service_event(method, result).into_iter().collect();
    }
    let items = result.get("results").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    items
        .iter()
        .filter_map(|r| {
            let kind = r.pointer("/object/kind").and_then(Value::as_str)?;
            let method = match (kind, pruned) {
                ("Node", _) => return None,
                ("Service", false) => "service.apply",
                ("Service", true) => "service.delete",
                (_, false) => "endpoints.apply",
                (_, true) => "endpoints.delete",
            };
            service_event(method, r)
        })
        .collect()
}

/// `nodeportd.service` for an applied (created or changed) or deleted Service:
/// `{"action", "namespace", "name", "clusterIP", "nodePorts"}`; for a change of the
/// Endpoints or EndpointSlice that feeds one: `{"action": "endpoints", "namespace",
/// "name", "endpoints": "KIND/NAME"}`.
pub fn service_event(method: &str, result: &Value) -> Option<Event> {
    if method == "endpoints.apply" || method == "endpoints.delete" {
        return endpoints_event(method, result);
    }
    let action = match method {
        "service.apply" => match result.get("action").and_then(Value::as_str) {
            Some(a @ ("created" | "configured")) => a,
            _ => return None,
        },
        "service.delete" => "deleted",
        _ => return None,
    };
    let obj = result.get("object")?;
    let meta = obj.get("metadata")?;
    let spec = obj.get("spec");
    let node_ports: Vec<Value> = spec
        .and_then(|s| s.get("ports"))
        .and_then(Value::as_array)
        .map(|ports| ports.iter().filter_map(|p| p.get("nodePort").cloned()).collect())
        .unwrap_or_default();
    let mut data = Map::new();
    data.insert("action".into(), json!(action));
    data.insert("namespace".into(), meta.get("namespace").cloned().unwrap_or(json!("default")));
    data.insert("name".into(), meta.get("name").cloned().unwrap_or(Value::Null));
    if let Some(ip) = spec.and_then(|s| s.get("clusterIP")) {
        data.insert("clusterIP".into(), ip.clone());
    }
    data.insert("nodePorts".into(), Value::Array(node_ports));
    Some(Event { id: SERVICE_EVENT, data })
}

fn endpoints_event(method: &str, result: &Value) -> Option<Event> {
    if method == "endpoints.apply"
        && !matches!(result.get("action").and_then(Value::as_str), Some("created" | "configured"))
    {
        return None;
    }
    let obj = result.get("object")?;
    let meta = obj.get("metadata")?;
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("Endpoints");
    let own = meta.get("name").and_then(Value::as_str)?;
    // An Endpoints object feeds the Service of its name; a slice the one its label names.
    let service = if kind == "EndpointSlice" {
        meta.pointer("/labels/kubernetes.io~1service-name").and_then(Value::as_str)?
    } else {
        own
    };
    let mut data = Map::new();
    data.insert("action".into(), json!("endpoints"));
    data.insert("namespace".into(), meta.get("namespace").cloned().unwrap_or(json!("default")));
    data.insert("name".into(), json!(service));
    data.insert("endpoints".into(), json!(format!("{kind}/{own}")));
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
    let handler: ubus::Call =
        Rc::new(move |method, params| Box::pin(call(handler_state.clone(), method.to_string(), params)));
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

    #[test]
    fn service_events_for_changes_only() {
        let svc = json!({"metadata": {"name": "web", "namespace": "shop"},
                         "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80, "nodePort": 30080}, {"port": 81}]}});
        let ev = service_event("service.apply", &json!({"action": "created", "object": svc})).unwrap();
        assert_eq!(ev.id, "nodeportd.service");
        assert_eq!(
            Value::Object(ev.data),
            json!({"action": "created", "namespace": "shop", "name": "web", "clusterIP": "10.96.0.10", "nodePorts": [30080]})
        );
        let ev = service_event("service.delete", &json!({"object": svc})).unwrap();
        assert_eq!(ev.data["action"], "deleted");
        assert!(service_event("service.apply", &json!({"action": "unchanged", "object": svc})).is_none());
        assert!(service_event("service.get", &json!({"object": svc})).is_none());
        assert!(service_event("endpoints.list", &json!({"items": []})).is_none());
    }

    #[test]
    fn endpoints_events_name_the_service_they_feed() {
        let ep = json!({"kind": "Endpoints", "metadata": {"name": "web", "namespace": "shop"}});
        let ev = service_event("endpoints.apply", &json!({"action": "configured", "object": ep})).unwrap();
        assert_eq!(
            Value::Object(ev.data),
            json!({"action": "endpoints", "namespace": "shop", "name": "web", "endpoints": "Endpoints/web"})
        );
        let slice = json!({"kind": "EndpointSlice",
            "metadata": {"name": "web-abc", "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}}});
        let ev = service_event("endpoints.delete", &json!({"object": slice})).unwrap();
        assert_eq!(
            (ev.data["name"].as_str(), ev.data["endpoints"].as_str()),
            (Some("web"), Some("EndpointSlice/web-abc"))
        );
        assert!(service_event("endpoints.apply", &json!({"action": "unchanged", "object": ep})).is_none());
        let orphan = json!({"kind": "EndpointSlice", "metadata": {"name": "x", "namespace": "shop"}});
        assert!(service_event("endpoints.apply", &json!({"action": "created", "object": orphan})).is_none());
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
