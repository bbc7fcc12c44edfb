//! Cluster mode on the event loop: the stream threads' updates become registry writes
//! through the same batch path as `objects.apply` (one store batch, shared fsyncs), as
//! the cluster's source. `status.cluster` and the `nodeportd.cluster` ubus event.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::cluster::watch::{Resource, Stream};
use crate::registry::{ObjKind, Registry};

pub const CLUSTER_EVENT: &str = "nodeportd.cluster";

/// One list/watch stream's state.
#[derive(Debug, Clone)]
pub struct StreamState {
    pub stream: Stream,
    pub watching: bool,
    pub resource_version: Option<String>,
    pub last_error: Option<String>,
}

/// `status.cluster`.
#[derive(Debug, Clone)]
pub struct ClusterStatus {
    pub server: String,
    pub streams: Vec<StreamState>,
    pub last_error: Option<String>,
    /// The last resourceVersion seen on any stream.
    pub resource_version: Option<String>,
    /// Cluster objects that could not be mirrored, by "Kind ns/name".
    pub conflicts: BTreeMap<String, String>,
    pub relists: u64,
    pub events: u64,
    pub was_connected: bool,
}

impl ClusterStatus {
    pub fn new(server: &str, streams: &[Stream]) -> ClusterStatus {
        ClusterStatus {
            server: server.to_string(),
            streams: streams
                .iter()
                .map(|s| StreamState { stream: s.clone(), watching: false, resource_version: None, last_error: None })
                .collect(),
            last_error: None,
            resource_version: None,
            conflicts: BTreeMap::new(),
            relists: 0,
            events: 0,
            was_connected: false,
        }
    }

    /// Connected: every stream has a watch open.
    pub fn connected(&self) -> bool {
        !self.streams.is_empty() && self.streams.iter().all(|s| s.watching)
    }

    pub fn json(&self, reg: &Registry) -> Value {
        let services = reg.keys_where(ObjKind::Service, crate::cluster::cluster_owned).len();
        let slices = reg.keys_where(ObjKind::EndpointSlice, crate::cluster::cluster_owned).len();
        let nodes = reg.keys_where(ObjKind::Node, crate::cluster::cluster_owned).len();
        let streams: Vec<Value> = self
            .streams
            .iter()
            .map(|s| {
                json!({
                    "resource": s.stream.resource.name(),
                    "namespace": s.stream.namespace,
                    "watching": s.watching,
                    "resourceVersion": s.resource_version,
                    "lastError": s.last_error,
                })
            })
            .collect();
        let conflicts: Vec<Value> = self.conflicts.iter().map(|(k, m)| json!({ "object": k, "message": m })).collect();
        json!({
            "server": self.server,
            "connected": self.connected(),
            "resourceVersion": self.resource_version,
            "lastError": self.last_error,
            "objects": services + slices + nodes,
            "mirrored": { "services": services, "endpointSlices": slices, "nodes": nodes },
            "conflicts": conflicts,
            "relists": self.relists,
            "events": self.events,
            "streams": streams,
        })
    }

    /// The ubus event for a connect or a loss.
    pub fn event(&self) -> crate::ubus::Event {
        let mut data = Map::new();
        data.insert("connected".into(), json!(self.connected()));
        data.insert("server".into(), json!(self.server));
        data.insert("lastError".into(), json!(self.last_error));
        crate::ubus::Event { id: CLUSTER_EVENT, data }
    }
}

/// Which registry kind a stream's objects are.
pub fn kind_of(r: Resource) -> ObjKind {
    match r {
        Resource::Services => ObjKind::Service,
        Resource::EndpointSlices => ObjKind::EndpointSlice,
        Resource::Nodes => ObjKind::Node,
    }
}

#[cfg(feature = "cluster")]
pub use live::{run, start};

#[cfg(feature = "cluster")]
mod live {
    use std::cell::RefCell;
    use std::rc::Rc;

    use serde_json::{json, Value};
    use tokio::sync::mpsc::UnboundedReceiver;

    use super::kind_of;
    use crate::api::rpc::RpcError;
    use crate::cluster::client::{Client, Update};
    use crate::cluster::watch::{self, Change, Event, Resource, Stream};
    use crate::cluster::{OWNER_ANNOTATION, OWNER_CLUSTER};
    use crate::config::ClusterConfig;
    use crate::daemon::handlers::{self, Intent, Source};
    use crate::daemon::State;
    use crate::model::parse_object;
    use crate::registry::EndpointsKind;

    /// Loads the credentials and starts the stream threads; the returned receiver goes
    /// to [`run`]. An error (bad CA, key readable by others, ...) stops the daemon's start.
    pub fn start(cfg: &ClusterConfig) -> Result<(Vec<Stream>, UnboundedReceiver<Update>), String> {
        let client = Client::new(cfg)?;
        let streams = Stream::all(&cfg.namespaces);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        client.spawn(streams.clone(), tx)?;
        Ok((streams, rx))
    }

    /// Applies the streams' updates, in order, batching what arrived together.
    pub async fn run(st: Rc<RefCell<State>>, streams: Vec<Stream>, mut rx: UnboundedReceiver<Update>) {
        while let Some(first) = rx.recv().await {
            let mut ups = vec![first];
            while ups.len() < 4096 {
                match rx.try_recv() {
                    Ok(u) => ups.push(u),
                    Err(_) => break,
                }
            }
            let mut pending: Vec<(Resource, Change)> = Vec::new();
            for u in ups {
                match u {
                    Update::Listed { stream, items, resource_version } => {
                        flush(&st, std::mem::take(&mut pending)).await;
                        let Some(s) = streams.get(stream) else { continue };
                        let mirrored =
                            st.borrow().registry.keys_where(kind_of(s.resource), crate::cluster::cluster_owned);
                        let changes = watch::relist(s, &mirrored, items);
                        log::info!(
                            "cluster: {} listed at resourceVersion {resource_version}: {} objects, {} to remove",
                            s.describe(),
                            changes.iter().filter(|c| matches!(c, Change::Apply(_))).count(),
                            changes.iter().filter(|c| matches!(c, Change::Delete(..))).count()
                        );
                        flush(&st, changes.into_iter().map(|c| (s.resource, c)).collect()).await;
                        let mut b = st.borrow_mut();
                        if let Some(c) = b.cluster.as_mut() {
                            c.relists += 1;
                            c.resource_version = Some(resource_version.clone());
                            if let Some(ss) = c.streams.get_mut(stream) {
                                ss.resource_version = Some(resource_version);
                            }
                        }
                    }
                    Update::Watching { stream } => {
                        let mut b = st.borrow_mut();
                        if let Some(ss) = b.cluster.as_mut().and_then(|c| c.streams.get_mut(stream)) {
                            ss.watching = true;
                            ss.last_error = None;
                        }
                        transition(&mut b);
                    }
                    Update::Event { stream, event, resource_version } => {
                        let Some(s) = streams.get(stream) else { continue };
                        // Deletes are sent even when the object may not be mirrored: an
                        // add earlier in this batch is not applied yet, and the ownership
                        // check keeps local objects safe.
                        if let Some(ch) = watch::event_change(s, true, &event) {
                            pending.push((s.resource, ch));
                        }
                        let mut b = st.borrow_mut();
                        if let Some(c) = b.cluster.as_mut() {
                            if !matches!(event, Event::Bookmark(_)) {
                                c.events += 1;
                            }
                            if let Some(v) = resource_version {
                                c.resource_version = Some(v.clone());
                                if let Some(ss) = c.streams.get_mut(stream) {
                                    ss.resource_version = Some(v);
                                }
                            }
                        }
                    }
                    Update::Lost { stream, error } => {
                        log::warn!("cluster: {error}");
                        let mut b = st.borrow_mut();
                        if let Some(c) = b.cluster.as_mut() {
                            c.last_error = Some(error.clone());
                            if let Some(ss) = c.streams.get_mut(stream) {
                                ss.watching = false;
                                ss.last_error = Some(error);
                            }
                        }
                        transition(&mut b);
                    }
                }
            }
            flush(&st, pending).await;
        }
    }

    /// Log and send an event when the connection state changed.
    fn transition(st: &mut State) {
        let Some(c) = st.cluster.as_mut() else { return };
        let now = c.connected();
        if now == c.was_connected {
            return;
        }
        c.was_connected = now;
        if now {
            log::info!("cluster: connected to {} (every stream watching)", c.server);
        } else {
            log::warn!("cluster: connection to {} lost: {}", c.server, c.last_error.as_deref().unwrap_or("?"));
        }
        let ev = c.event();
        st.ubus.send(ev);
    }

    fn word(r: Resource) -> &'static str {
        match r {
            Resource::Services => "Service",
            Resource::EndpointSlices => "EndpointSlice",
            Resource::Nodes => "Node",
        }
    }

    /// A change as a registry intent; the cluster's ownership mark added.
    fn intent(r: Resource, change: Change) -> Result<Intent, RpcError> {
        match change {
            Change::Delete(ns, name) => Ok(match r {
                Resource::Services => Intent::DeleteService(ns, name),
                Resource::EndpointSlices => Intent::DeleteEndpoints(EndpointsKind::EndpointSlice, ns, name),
                Resource::Nodes => Intent::DeleteNode(name),
            }),
            Change::Apply(mut v) => {
                let (kind, api) = match r {
                    Resource::Services => ("Service", "v1"),
                    Resource::EndpointSlices => ("EndpointSlice", "discovery.k8s.io/v1"),
                    Resource::Nodes => ("Node", "v1"),
                };
                if let Value::Object(m) = &mut v {
                    m.insert("kind".into(), json!(kind));
                    m.insert("apiVersion".into(), json!(api));
                }
                if let Some(Value::Object(meta)) = v.get_mut("metadata") {
                    meta.remove("managedFields");
                    let ann = meta.entry("annotations").or_insert_with(|| json!({}));
                    if !ann.is_object() {
                        *ann = json!({});
                    }
                    ann[OWNER_ANNOTATION] = json!(OWNER_CLUSTER);
                }
                let mut objs = parse_object(v)?;
                if objs.len() != 1 {
                    return Err(RpcError::invalid_params("not one object"));
                }
                let o = objs.remove(0);
                o.validate()?;
                Ok(Intent::Apply(o))
            }
        }
    }

    fn label(r: Resource, change: &Change) -> String {
        let (ns, n) = match change {
            Change::Delete(ns, n) => (ns.clone(), n.clone()),
            Change::Apply(v) => watch::key_of(r, v).unwrap_or_default(),
        };
        if r.namespaced() {
            format!("{} {ns}/{n}", word(r))
        } else {
            format!("{} {n}", word(r))
        }
    }

    /// Writes the changes as one batch and records what could not be mirrored.
    async fn flush(st: &Rc<RefCell<State>>, changes: Vec<(Resource, Change)>) {
        if changes.is_empty() {
            return;
        }
        let mut labels = Vec::with_capacity(changes.len());
        let mut deletes = Vec::with_capacity(changes.len());
        let mut intents = Vec::with_capacity(changes.len());
        for (r, c) in changes {
            labels.push(label(r, &c));
            deletes.push(matches!(c, Change::Delete(..)));
            intents.push(intent(r, c));
        }
        let results = handlers::write(st, intents, Source::Cluster).await;
        let mut b = st.borrow_mut();
        let Some(c) = b.cluster.as_mut() else { return };
        for ((label, delete), r) in labels.into_iter().zip(deletes).zip(results) {
            match r {
                Ok(_) => {
                    c.conflicts.remove(&label);
                }
                Err(e) if delete => {
                    // Nothing mirrored (not found) or a local object (kept): nothing to do.
                    c.conflicts.remove(&label);
                    log::debug!("cluster: {label}: delete skipped: {}", e.message);
                }
                Err(e) => {
                    log::warn!("cluster: {label} not mirrored: {}", e.message);
                    c.conflicts.insert(label, e.message);
                }
            }
        }
    }
}
