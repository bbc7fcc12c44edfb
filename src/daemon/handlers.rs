//! The JSON-RPC methods: request → validate → allocate → persist. The data plane
//! follows from the stored state (the sync task is woken after every change).

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;

use serde_json::{json, Value};

use super::clock;
use super::State;
use crate::api::rpc::{object, opt_str_param, str_param, Params, RpcError};
use crate::api::server::method_not_found;
use crate::model::{parse_object, parse_object_text, AnyObject, ApiError, EndpointsObject, SERVICE_NAME_LABEL};
use crate::registry::{Action, EndpointsKind, Object, ObjectRef, Prepared, Registry, Stamp};
use crate::store::{Kind, Op, Outcome, OwnedOp, Store};

/// Dispatch one method call. Reads answer at once from memory; writes prepare under a
/// short borrow, wait for the store thread (other requests are served meanwhile), then
/// commit. The state is never borrowed across an await.
pub async fn call(st: Rc<RefCell<State>>, method: String, params: Params) -> Result<Value, RpcError> {
    let method = method.as_str();
    let Params { value: mut params, objects } = params;
    let locks = st.borrow().writing.clone();
    // A write waits for its turn before any work on it (a read never does).
    let _turn = match method {
        "service.apply" | "endpoints.apply" | "service.delete" | "endpoints.delete" | "objects.apply"
        | "objects.prune" | "node.apply" | "node.delete" => Some(locks.turn().await),
        _ => None,
    };
    // An objects.apply's items, taken OBJECTS_STEP at a time.
    let mut items = Vec::new().into_iter().enumerate().peekable();
    let mut intents = match method {
        "service.apply" => {
            let AnyObject::Service(svc) = parse_one(object_param(&mut params)?, Some(("Service", "v1")), "Service")?
            else {
                return Err(RpcError::invalid_params(
                    "params.object: Invalid value: not a Service: use endpoints.apply",
                ));
            };
            vec![Ok(Intent::Apply(AnyObject::Service(svc)))]
        }
        "endpoints.apply" => {
            let obj = parse_one(object_param(&mut params)?, None, "Endpoints or EndpointSlice")?;
            if obj.kind() == "Service" {
                return Err(RpcError::invalid_params("params.object: Invalid value: a Service: use service.apply"));
            }
            if obj.kind() == "Node" {
                return Err(RpcError::invalid_params("params.object: Invalid value: a Node: use node.apply"));
            }
            vec![Ok(Intent::Apply(obj))]
        }
        "service.delete" => {
            let (ns, name) = ns_name(&params)?;
            vec![Ok(Intent::DeleteService(ns.to_string(), name.to_string()))]
        }
        "endpoints.delete" => {
            let (ns, name) = ns_name(&params)?;
            let kind = match endpoints_kind(&params)? {
                Some(k) => k,
                None => endpoints_kind_of(&find_endpoints(&st.borrow(), None, ns, name)?),
            };
            vec![Ok(Intent::DeleteEndpoints(kind, ns.to_string(), name.to_string()))]
        }
        "node.apply" => {
            let obj = parse_one(object_param(&mut params)?, Some(("Node", "v1")), "Node")?;
            if obj.kind() != "Node" {
                return Err(RpcError::invalid_params(format!(
                    "params.object: Invalid value: a {}: use objects.apply",
                    obj.kind()
                )));
            }
            vec![Ok(Intent::Apply(obj))]
        }
        "node.delete" => vec![Ok(Intent::DeleteNode(str_param(&params, "name")?.to_string()))],
        "objects.apply" => {
            items = objects_param(&mut params, objects)?.into_iter().enumerate().peekable();
            Vec::new()
        }
        "objects.prune" => {
            let (applier, keep) = prune_param(&params)?;
            let refs = st.borrow().registry.prune_selection(&applier, &keep);
            refs.into_iter().map(|r| Ok(Intent::delete(r))).collect()
        }
        _ => return read(&mut st.borrow_mut(), method, &params),
    };
    // What each result is announced as on ubus.
    let deleting = matches!(method, "service.delete" | "endpoints.delete" | "node.delete");
    if method == "objects.prune" {
        let results: Vec<Value> = write(&st, intents, Source::Local)
            .await
            .into_iter()
            .map(|r| match r {
                Ok((action, obj)) => {
                    announce(&st, true, action, &obj);
                    json!({ "action": "pruned", "object": object_json(&obj) })
                }
                Err(e) => json!({ "error": e.to_json() }),
            })
            .collect();
        return Ok(json!({ "results": results }));
    }
    let batch = method == "objects.apply";
    // `brief` results leave the object out (checked with the other params above).
    let brief = batch && brief_param(&params).unwrap_or(false);
    // An objects.apply's results, one per object.
    let mut done = Vec::new();
    loop {
        if batch {
            intents = parse_items(items.by_ref().take(OBJECTS_STEP));
        }
        let results = write(&st, std::mem::take(&mut intents), Source::Local).await;
        if !batch {
            let (action, obj) =
                results.into_iter().next().unwrap_or_else(|| Err(ApiError::internal("no result").into()))?;
            announce(&st, deleting, action, &obj);
            return Ok(match method {
                "service.delete" | "endpoints.delete" | "node.delete" => object(vec![("object", object_json(&obj))]),
                _ => object(vec![("action", action.to_string().into()), ("object", object_json(&obj))]),
            });
        }
        done.extend(results.into_iter().map(|r| match r {
            Ok((action, obj)) => {
                announce(&st, false, action, &obj);
                let mut fields = vec![("action", action.to_string().into())];
                if !brief {
                    fields.push(("object", object_json(&obj)));
                }
                object(fields)
            }
            Err(e) => object(vec![("error", e.to_json())]),
        }));
        if items.peek().is_none() {
            return Ok(object(vec![("results", Value::Array(done))]));
        }
        // Unchanged objects write nothing, so nothing else would let others in.
        tokio::task::yield_now().await;
    }
}

/// Queue the ubus event of one written object (nothing when ubus is off).
fn announce(st: &Rc<RefCell<State>>, deleted: bool, action: Action, obj: &Object) {
    let s = st.borrow();
    if s.ubus.enabled() {
        if let Some(ev) = super::ubus::object_event(deleted, action, obj) {
            s.ubus.send(ev);
        }
    }
}

/// The methods that change nothing.
fn read(st: &mut State, method: &str, params: &Value) -> Result<Value, RpcError> {
    // Reservations of changes abandoned by an earlier request go back first.
    st.registry.settle();
    match method {
        "service.get" => {
            let (ns, name) = ns_name(params)?;
            let svc = st.registry.get_service(ns, name)?;
            Ok(object(vec![("object", printed(&svc))]))
        }
        "service.list" => {
            let ns = opt_str_param(params, "namespace")?;
            let items: Vec<Value> = st.registry.list_services(ns).iter().map(printed).collect();
            Ok(object(vec![
                ("apiVersion", "v1".into()),
                ("kind", "ServiceList".into()),
                ("items", Value::Array(items)),
            ]))
        }
        "endpoints.get" => {
            let (ns, name) = ns_name(params)?;
            let kind = endpoints_kind(params)?;
            let obj = find_endpoints(st, kind, ns, name)?;
            Ok(object(vec![("object", endpoints_json(&obj))]))
        }
        "endpoints.list" => {
            let ns = opt_str_param(params, "namespace")?;
            let kind = endpoints_kind(params)?;
            let items: Vec<Value> = st.registry.list_endpoints(kind, ns).iter().map(endpoints_json).collect();
            Ok(object(vec![("apiVersion", "v1".into()), ("kind", "List".into()), ("items", Value::Array(items))]))
        }
        "node.get" => Ok(object(vec![("object", printed(&st.registry.get_node(str_param(params, "name")?)?))])),
        "node.list" => {
            let items: Vec<Value> = st.registry.nodes().map(printed).collect();
            Ok(object(vec![("apiVersion", "v1".into()), ("kind", "NodeList".into()), ("items", Value::Array(items))]))
        }
        "status" => Ok(super::status::status(st)),
        _ => Err(method_not_found(method)),
    }
}

/// Who asks for a change: a local client (socket, ubus) or cluster mode. Objects the
/// cluster owns change only through cluster mode; cluster mode never changes a local one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Local,
    Cluster,
}

/// One change a request asks for.
#[allow(clippy::large_enum_variant)] // a few per request, moved once: not worth a box
pub enum Intent {
    Apply(AnyObject),
    DeleteService(String, String),
    DeleteEndpoints(EndpointsKind, String, String),
    DeleteNode(String),
}

impl Intent {
    fn delete(r: ObjectRef) -> Intent {
        match r.kind {
            "Service" => Intent::DeleteService(r.namespace, r.name),
            "Endpoints" => Intent::DeleteEndpoints(EndpointsKind::Endpoints, r.namespace, r.name),
            "EndpointSlice" => Intent::DeleteEndpoints(EndpointsKind::EndpointSlice, r.namespace, r.name),
            _ => Intent::DeleteNode(r.name),
        }
    }

    /// The object it names: writes to one object are serialised.
    fn key(&self) -> WriteKey {
        match self {
            Intent::Apply(o) => {
                let class = match o.kind() {
                    "Service" => 0,
                    "Endpoints" => 1,
                    "Node" => return (3, String::new(), o.meta().name.clone()),
                    _ => 2,
                };
                (class, o.meta().ns().to_string(), o.meta().name.clone())
            }
            Intent::DeleteNode(n) => (3, String::new(), n.clone()),
            Intent::DeleteService(ns, n) => (0, ns.clone(), n.clone()),
            Intent::DeleteEndpoints(EndpointsKind::Endpoints, ns, n) => (1, ns.clone(), n.clone()),
            Intent::DeleteEndpoints(EndpointsKind::EndpointSlice, ns, n) => (2, ns.clone(), n.clone()),
        }
    }
}

/// (kind class, namespace, name)
pub type WriteKey = (u8, String, String);

/// Writes being worked on at once, at most. The others wait for their turn (in order)
/// without any work done on them, so the event loop's queue never holds more than these:
/// a read waits behind at most this many writes, however many clients write.
pub const WRITERS: usize = 16;

/// The objects with a write in flight. A write waits until none of its objects has
/// one, so two writes to one object are prepared and committed one after the other.
pub struct WriteLocks {
    busy: RefCell<BTreeSet<WriteKey>>,
    done: tokio::sync::Notify,
    turns: tokio::sync::Semaphore,
}

impl Default for WriteLocks {
    fn default() -> Self {
        WriteLocks {
            busy: RefCell::default(),
            done: tokio::sync::Notify::new(),
            turns: tokio::sync::Semaphore::new(WRITERS),
        }
    }
}

impl WriteLocks {
    /// One of the [`WRITERS`] turns, first come first served; held until dropped.
    async fn turn(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        // Never closed: `None` cannot happen.
        self.turns.acquire().await.ok()
    }

    /// Whether any write is in flight.
    pub fn idle(&self) -> bool {
        self.busy.borrow().is_empty()
    }

    /// Waits until no write is in flight (a config reload swaps the registry then).
    pub async fn wait_idle(&self) {
        loop {
            let done = self.done.notified();
            if self.idle() {
                return;
            }
            done.await;
        }
    }

    async fn lock(self: &Rc<Self>, keys: BTreeSet<WriteKey>) -> KeyGuard {
        loop {
            let done = self.done.notified();
            {
                let mut busy = self.busy.borrow_mut();
                if keys.iter().all(|k| !busy.contains(k)) {
                    busy.extend(keys.iter().cloned());
                    return KeyGuard { locks: self.clone(), keys };
                }
            }
            done.await;
        }
    }
}

struct KeyGuard {
    locks: Rc<WriteLocks>,
    keys: BTreeSet<WriteKey>,
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        let mut busy = self.locks.busy.borrow_mut();
        for k in &self.keys {
            busy.remove(k);
        }
        self.locks.done.notify_waiters();
    }
}

/// An `objects.apply` handles this many objects at a time (parse, validate, prepare,
/// write, commit): the event loop serves other requests between two such steps, so a
/// List of thousands never holds it for long, and its order is kept.
const OBJECTS_STEP: usize = 64;

/// `objects.apply`'s `params.objects`: an array, each item as its JSON text (items that
/// came as a tree, over ubus, are printed, as decoding them would).
fn objects_param(params: &mut Value, text: Option<Vec<Box<str>>>) -> Result<Vec<Box<str>>, RpcError> {
    brief_param(params)?;
    if let Some(items) = text {
        return Ok(items);
    }
    match params.get_mut("objects").map(Value::take) {
        Some(Value::Array(a)) => Ok(a.iter().map(|v| serde_json::to_string(v).unwrap_or_default().into()).collect()),
        Some(other) => Err(RpcError::invalid_params(format!(
            "params.objects: Invalid value: {}: must be an array of objects",
            truncate(&other.to_string())
        ))),
        None => Err(RpcError::invalid_params("params.objects: Required value")),
    }
}

/// `objects.apply`'s optional `params.brief`: `true` leaves each result's `object` out
/// (docs/extensions.md; `nodeportctl apply` without `-o json` asks for it).
pub fn brief_param(params: &Value) -> Result<bool, RpcError> {
    match params.get("brief") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(RpcError::invalid_params(format!(
            "params.brief: Invalid value: {}: must be true or false",
            truncate(&other.to_string())
        ))),
    }
}

/// Items of `params.objects` (with their index), parsed and validated one by one.
fn parse_items(items: impl Iterator<Item = (usize, Box<str>)>) -> Vec<Result<Intent, RpcError>> {
    let mut out = Vec::new();
    for (i, v) in items {
        if !v.trim_start().starts_with('{') {
            let shown = serde_json::from_str::<Value>(&v).map_or_else(|_| v.to_string(), |v| v.to_string());
            out.push(Err(RpcError::invalid_params(format!(
                "params.objects[{i}]: Invalid value: {}: must be a Kubernetes object",
                truncate(&shown)
            ))));
            continue;
        }
        match parse_object_text(&v) {
            Ok(objs) => out.extend(objs.into_iter().map(|o| match o.validate() {
                Ok(()) => Ok(Intent::Apply(o)),
                Err(e) => Err(RpcError::from(e)),
            })),
            Err(e) => out.push(Err(RpcError::from(e))),
        }
    }
    out
}

/// The ownership rule (docs/cluster.md): a local client cannot change or mark an object
/// the cluster owns; cluster mode cannot replace or remove a local one.
fn check_owner(reg: &Registry, it: &Intent, source: Source) -> Result<(), ApiError> {
    use crate::cluster::{cluster_owned, OWNER_ANNOTATION};
    use crate::model::Reason;
    use crate::registry::ObjKind;
    let (kind, ns, name, incoming) = match it {
        Intent::Apply(o) => {
            let kind = match o.kind() {
                "Service" => ObjKind::Service,
                "Endpoints" => ObjKind::Endpoints,
                "Node" => ObjKind::Node,
                _ => ObjKind::EndpointSlice,
            };
            (kind, o.meta().ns(), o.meta().name.as_str(), Some(o.meta()))
        }
        Intent::DeleteService(ns, n) => (ObjKind::Service, ns.as_str(), n.as_str(), None),
        Intent::DeleteEndpoints(EndpointsKind::Endpoints, ns, n) => (ObjKind::Endpoints, ns.as_str(), n.as_str(), None),
        Intent::DeleteEndpoints(EndpointsKind::EndpointSlice, ns, n) => {
            (ObjKind::EndpointSlice, ns.as_str(), n.as_str(), None)
        }
        Intent::DeleteNode(n) => (ObjKind::Node, "", n.as_str(), None),
    };
    let (word, shown) = match kind {
        ObjKind::Service => ("Service", format!("{ns}/{name}")),
        ObjKind::Endpoints => ("Endpoints", format!("{ns}/{name}")),
        ObjKind::EndpointSlice => ("EndpointSlice", format!("{ns}/{name}")),
        ObjKind::Node => ("Node", name.to_string()),
    };
    let stored = reg.stored_annotations(kind, ns, name);
    match source {
        Source::Local => {
            if stored.is_some_and(cluster_owned) {
                return Err(ApiError::new(
                    Reason::Conflict,
                    format!(
                        "{word} {shown} is owned by the cluster (mirrored by cluster mode): change it in the cluster"
                    ),
                ));
            }
            if incoming.is_some_and(|m| m.annotations.contains_key(OWNER_ANNOTATION)) {
                return Err(ApiError::new(
                    Reason::Invalid,
                    format!("{word} {shown}: metadata.annotations[{OWNER_ANNOTATION}]: reserved for cluster mode"),
                ));
            }
        }
        Source::Cluster => {
            if stored.is_some_and(|a| !cluster_owned(a)) {
                return Err(ApiError::new(
                    Reason::Conflict,
                    format!("{word} {shown} exists as a local object: the cluster's is not mirrored until the local one is deleted"),
                ));
            }
        }
    }
    Ok(())
}

/// Apply intents in order: groups without a repeated object are prepared together,
/// written as one batch (shared fsyncs) and committed; one result per intent.
pub async fn write(
    st: &Rc<RefCell<State>>,
    intents: Vec<Result<Intent, RpcError>>,
    source: Source,
) -> Vec<Result<(Action, Object), RpcError>> {
    let mut results: Vec<Option<Result<(Action, Object), RpcError>>> = Vec::with_capacity(intents.len());
    let mut group: Vec<(usize, Intent)> = Vec::new();
    let mut keys: BTreeSet<WriteKey> = BTreeSet::new();
    let mut groups: Vec<Vec<(usize, Intent)>> = Vec::new();
    for (i, it) in intents.into_iter().enumerate() {
        results.push(None);
        match it {
            Err(e) => results[i] = Some(Err(e)),
            Ok(it) => {
                if !keys.insert(it.key()) {
                    groups.push(std::mem::take(&mut group));
                    keys.clear();
                    keys.insert(it.key());
                }
                group.push((i, it));
            }
        }
    }
    groups.push(group);
    for group in groups.into_iter().filter(|g| !g.is_empty()) {
        for (i, r) in write_group(st, group, source).await {
            results[i] = Some(r);
        }
    }
    results.into_iter().map(|r| r.unwrap_or_else(|| Err(ApiError::internal("no result").into()))).collect()
}

async fn write_group(
    st: &Rc<RefCell<State>>,
    group: Vec<(usize, Intent)>,
    source: Source,
) -> Vec<(usize, Result<(Action, Object), RpcError>)> {
    let locks = st.borrow().writing.clone();
    let _guard = locks.lock(group.iter().map(|(_, it)| it.key()).collect()).await;
    let mut out = Vec::new();
    // Prepare (reserves values; changes nothing served).
    let (prepared, writer) = {
        let mut s = st.borrow_mut();
        let stamp = s.stamp();
        let mut prepared: Vec<(usize, Prepared)> = Vec::new();
        for (i, it) in group {
            if let Err(e) = check_owner(&s.registry, &it, source) {
                out.push((i, Err(e.into())));
                continue;
            }
            let p = match it {
                Intent::Apply(AnyObject::Service(svc)) => s.registry.prepare_service(svc, &stamp),
                Intent::Apply(AnyObject::Node(n)) => s.registry.prepare_node(n, &stamp),
                Intent::DeleteNode(n) => s.registry.prepare_delete_node(&n),
                Intent::Apply(other) => match other.into_endpoints() {
                    Some(e) => s.registry.prepare_endpoints(e, &stamp),
                    None => Err(ApiError::internal("not a Service, Endpoints or EndpointSlice")),
                },
                Intent::DeleteService(ns, n) => s.registry.prepare_delete_service(&ns, &n),
                Intent::DeleteEndpoints(k, ns, n) => s.registry.prepare_delete_endpoints(k, &ns, &n),
            };
            match p {
                Ok(p) => prepared.push((i, p)),
                Err(e) => out.push((i, Err(e.into()))),
            }
        }
        (prepared, s.store.clone())
    };
    let (idx, prepared): (Vec<usize>, Vec<Prepared>) = prepared.into_iter().unzip();
    // Persist, off the event loop.
    let mut prepared = prepared;
    let (ops, op_of) = store_ops(&mut prepared);
    let outcomes = if ops.is_empty() { Vec::new() } else { writer.write(ops).await };
    // Commit what is on disk.
    let mut s = st.borrow_mut();
    let committed = commit_outcomes(&mut s.registry, prepared, &op_of, outcomes);
    for (i, r) in idx.into_iter().zip(mark_changed(&mut s, committed)) {
        out.push((i, r));
    }
    out
}

/// `objects.prune`'s params: `applier` (the value of the applier annotation) and
/// `keep`, the objects of the input (`[{kind, namespace, name}]`); the kinds to prune are
/// the kinds in `keep`.
fn prune_param(params: &Value) -> Result<(String, BTreeSet<ObjectRef>), RpcError> {
    let applier = str_param(params, "applier")?.to_string();
    let Some(Value::Array(items)) = params.get("keep") else {
        return Err(RpcError::invalid_params("params.keep: Required value: an array of {kind, namespace, name}"));
    };
    let mut keep = BTreeSet::new();
    for (i, it) in items.iter().enumerate() {
        let field = |f: &str| it.get(f).and_then(Value::as_str);
        let kind = match field("kind") {
            Some("Service") => "Service",
            Some("Endpoints") => "Endpoints",
            Some("EndpointSlice") => "EndpointSlice",
            Some("Node") => "Node",
            other => {
                return Err(RpcError::invalid_params(format!(
                    "params.keep[{i}].kind: Unsupported value: {}: supported values: \"Service\", \"Endpoints\", \"EndpointSlice\", \"Node\"",
                    other.map_or("null".to_string(), crate::model::validate::q)
                )))
            }
        };
        let Some(name) = field("name") else {
            return Err(RpcError::invalid_params(format!("params.keep[{i}].name: Required value")));
        };
        let namespace = match kind {
            "Node" => "",
            _ => field("namespace").filter(|n| !n.is_empty()).unwrap_or("default"),
        };
        keep.insert(ObjectRef { kind, namespace: namespace.to_string(), name: name.to_string() });
    }
    Ok((applier, keep))
}

fn ns_name(params: &Value) -> Result<(&str, &str), RpcError> {
    let ns = opt_str_param(params, "namespace")?.unwrap_or("default");
    Ok((ns, str_param(params, "name")?))
}

/// With no `kind`, Endpoints first, then an EndpointSlice of that name.
fn find_endpoints(st: &State, kind: Option<EndpointsKind>, ns: &str, name: &str) -> Result<EndpointsObject, ApiError> {
    match kind {
        Some(k) => st.registry.get_endpoints(k, ns, name),
        None => st
            .registry
            .get_endpoints(EndpointsKind::Endpoints, ns, name)
            .or_else(|_| st.registry.get_endpoints(EndpointsKind::EndpointSlice, ns, name)),
    }
}

fn endpoints_kind_of(obj: &EndpointsObject) -> EndpointsKind {
    match obj {
        EndpointsObject::Endpoints(_) => EndpointsKind::Endpoints,
        EndpointsObject::Slice(_) => EndpointsKind::EndpointSlice,
    }
}

fn endpoints_kind(params: &Value) -> Result<Option<EndpointsKind>, RpcError> {
    match opt_str_param(params, "kind")? {
        None => Ok(None),
        Some("Endpoints" | "endpoints" | "ep") => Ok(Some(EndpointsKind::Endpoints)),
        Some("EndpointSlice" | "endpointslice" | "endpointslices") => Ok(Some(EndpointsKind::EndpointSlice)),
        Some(other) => Err(RpcError::invalid_params(format!(
            "params.kind: Unsupported value: {other:?}: supported values: \"Endpoints\", \"EndpointSlice\""
        ))),
    }
}

fn store_kind(obj: &EndpointsObject) -> Kind {
    match obj {
        EndpointsObject::Endpoints(_) => Kind::Endpoints,
        EndpointsObject::Slice(_) => Kind::EndpointSlice,
    }
}

pub fn endpoints_json(obj: &EndpointsObject) -> Value {
    tree(&endpoints_text(obj))
}

fn endpoints_text(obj: &EndpointsObject) -> String {
    match obj {
        EndpointsObject::Endpoints(e) => serde_json::to_string(e),
        EndpointsObject::Slice(s) => serde_json::to_string(s),
    }
    .unwrap_or_default()
}

/// An object's text read back as a tree: the model's types are printed one way only,
/// to text (keys sorted, as a tree prints them), and trees come from that text.
fn tree(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

fn printed<T: serde::Serialize>(obj: &T) -> Value {
    tree(&serde_json::to_string(obj).unwrap_or_default())
}

/// `params.object`, taken out of the params.
fn object_param(params: &mut Value) -> Result<Value, RpcError> {
    match params.get_mut("object").map(Value::take) {
        Some(v @ Value::Object(_)) => Ok(v),
        Some(other) => Err(RpcError::invalid_params(format!(
            "params.object: Invalid value: {}: must be a Kubernetes object",
            truncate(&other.to_string())
        ))),
        None => Err(RpcError::invalid_params("params.object: Required value")),
    }
}

fn truncate(s: &str) -> String {
    if s.len() > 80 {
        let mut end = 80;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    } else {
        s.to_string()
    }
}

/// Parse one object of the kinds a method takes, with the field path in type errors
/// and kubectl's wording for a wrong kind; then validate it as the API server does.
fn parse_one(mut v: Value, default_kind: Option<(&str, &str)>, wanted: &str) -> Result<AnyObject, RpcError> {
    if let (Some((kind, api)), Value::Object(map)) = (default_kind, &mut v) {
        map.entry("kind").or_insert_with(|| json!(kind));
        map.entry("apiVersion").or_insert_with(|| json!(api));
    }
    let mut objs = parse_object(v)?;
    if objs.len() != 1 {
        return Err(RpcError::invalid_params(format!(
            "params.object: Invalid value: a list of {} objects: send one {wanted} per request",
            objs.len()
        )));
    }
    let obj = objs.remove(0);
    obj.validate()?;
    Ok(obj)
}

/// Tell the data plane and the log what the committed changes changed.
fn mark_changed(st: &mut State, done: Vec<Result<Committed, RpcError>>) -> Vec<Result<(Action, Object), RpcError>> {
    let mut out = Vec::with_capacity(done.len());
    for r in done {
        match r {
            Ok(c) => {
                if c.action != Action::Unchanged {
                    match (&c.object, &c.previous) {
                        (Object::Service(s), _) => st.service_changed(s.namespace(), s.name()),
                        (Object::Node(_), _) => st.nodes_changed(),
                        (Object::Endpoints(e), prev) => {
                            if let Some(p) = prev {
                                st.endpoints_changed(p);
                            }
                            st.endpoints_changed(e);
                        }
                    }
                    let (ns, name) = c.object.key();
                    let what = if c.deleted { "deleted".to_string() } else { c.action.to_string() };
                    let ns = if ns.is_empty() { String::new() } else { format!("{ns}/") };
                    log::info!("{}/{ns}{name} {what}", kind_word(&c.object));
                }
                out.push(c.error.map_or(Ok((c.action, c.object)), Err));
            }
            Err(e) => out.push(Err(e)),
        }
    }
    out
}

fn kind_word(obj: &Object) -> &'static str {
    match obj {
        Object::Service(_) => "service",
        Object::Endpoints(EndpointsObject::Endpoints(_)) => "endpoints",
        Object::Endpoints(EndpointsObject::Slice(_)) => "endpointslice",
        Object::Node(_) => "node",
    }
}

/// A change that reached the disk and the registry.
pub struct Committed {
    pub action: Action,
    pub object: Object,
    /// The endpoints object it replaced (its services need a sync too).
    pub previous: Option<EndpointsObject>,
    pub deleted: bool,
    /// Set when the change is on disk and served but its directory fsync failed.
    pub error: Option<RpcError>,
}

/// The write path, in one step (tests; the daemon splits it around the store thread):
/// the prepared changes are written with shared fsyncs (`Store::apply`); each one that
/// reached the disk is committed, each one that did not is dropped, which gives back
/// its reservations, so the registry serves exactly what it served before. No undo.
pub fn persist_and_commit(
    registry: &mut Registry,
    store: &mut Store,
    prepared: Vec<Prepared>,
) -> Vec<Result<Committed, RpcError>> {
    let mut prepared = prepared;
    let (ops, op_of) = store_ops(&mut prepared);
    let borrowed: Vec<Op<'_>> = ops
        .iter()
        .map(|o| Op { kind: o.kind, namespace: &o.namespace, name: &o.name, object: o.object.as_deref() })
        .collect();
    let outcomes = store.apply(&borrowed);
    commit_outcomes(registry, prepared, &op_of, outcomes)
}

/// The store changes of prepared changes, and which op each one has (none when it
/// changes nothing). Each object's text is printed once, for the store and for the
/// registry, which keeps it once the object is packed.
fn store_ops(prepared: &mut [Prepared]) -> (Vec<OwnedOp>, Vec<Option<usize>>) {
    let mut ops = Vec::new();
    let mut op_of = Vec::with_capacity(prepared.len());
    for p in prepared {
        if !p.changes_anything() {
            op_of.push(None);
            continue;
        }
        let text: Option<Box<str>> = (!p.is_delete()).then(|| object_text(p.object()).into_boxed_str());
        if let Some(t) = &text {
            p.set_text(t);
        }
        let (namespace, name) = p.object().key();
        op_of.push(Some(ops.len()));
        ops.push(OwnedOp {
            kind: store_kind_of(p.object()),
            namespace: namespace.to_string(),
            name: name.to_string(),
            object: text,
        });
    }
    (ops, op_of)
}

/// Commit each prepared change whose write reached the disk; drop the others.
fn commit_outcomes(
    registry: &mut Registry,
    prepared: Vec<Prepared>,
    op_of: &[Option<usize>],
    outcomes: Vec<Outcome>,
) -> Vec<Result<Committed, RpcError>> {
    let mut outcomes: Vec<Option<Outcome>> = outcomes.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(prepared.len());
    for (p, op) in prepared.into_iter().zip(op_of) {
        let outcome = op.and_then(|i| outcomes.get_mut(i).and_then(Option::take));
        let what = describe(&p);
        let error = match outcome {
            None if op.is_some() => {
                drop(p);
                registry.settle();
                out.push(Err(ApiError::internal(format!("cannot persist {what}: no answer from the store")).into()));
                continue;
            }
            None | Some(Outcome::Done) => None,
            Some(Outcome::NotWritten(e)) => {
                // Dropping `p` releases what it reserved: nothing changed.
                drop(p);
                registry.settle();
                out.push(Err(ApiError::internal(format!("cannot persist {what}: {e}")).into()));
                continue;
            }
            Some(Outcome::Unconfirmed(e)) => Some(
                ApiError::internal(format!(
                    "{what} was written and is served, but its directory fsync failed (not confirmed durable): {e}"
                ))
                .into(),
            ),
        };
        let previous = match p.object() {
            Object::Endpoints(e) if p.changes_anything() && !p.is_delete() => {
                let (ns, name) = p.object().key();
                registry.get_endpoints(endpoints_kind_of(e), ns, name).ok()
            }
            _ => None,
        };
        let action = p.action();
        let deleted = p.is_delete();
        let object = registry.commit(p);
        out.push(Ok(Committed { action, object, previous, deleted, error }));
    }
    out
}

fn describe(p: &Prepared) -> String {
    let (ns, name) = p.object().key();
    let kind = match p.object() {
        Object::Service(_) => "Service",
        Object::Endpoints(EndpointsObject::Endpoints(_)) => "Endpoints",
        Object::Endpoints(EndpointsObject::Slice(_)) => "EndpointSlice",
        Object::Node(_) => "Node",
    };
    let path = if ns.is_empty() { name.to_string() } else { format!("{ns}/{name}") };
    if p.is_delete() {
        format!("the deletion of {kind} {path}")
    } else {
        format!("{kind} {path}")
    }
}

fn store_kind_of(obj: &Object) -> Kind {
    match obj {
        Object::Service(_) => Kind::Service,
        Object::Endpoints(e) => store_kind(e),
        Object::Node(_) => Kind::Node,
    }
}

pub fn object_json(obj: &Object) -> Value {
    tree(&object_text(obj))
}

/// An object's JSON text, as the store keeps it.
pub fn object_text(obj: &Object) -> String {
    match obj {
        Object::Service(s) => serde_json::to_string(s).unwrap_or_default(),
        Object::Endpoints(e) => endpoints_text(e),
        Object::Node(n) => serde_json::to_string(n).unwrap_or_default(),
    }
}

/// The services an endpoints object feeds.
pub fn services_of(obj: &EndpointsObject) -> BTreeSet<crate::model::Key> {
    let mut out = BTreeSet::new();
    match obj {
        EndpointsObject::Endpoints(e) => {
            out.insert(crate::model::Key(e.metadata.ns().to_string(), e.metadata.name.clone()));
        }
        EndpointsObject::Slice(s) => {
            if let Some(svc) = s.metadata.labels.get(SERVICE_NAME_LABEL) {
                out.insert(crate::model::Key(s.metadata.ns().to_string(), svc.to_string()));
            }
        }
    }
    out
}

impl State {
    pub fn stamp(&self) -> Stamp {
        Stamp { now: clock::rfc3339(std::time::SystemTime::now()), uid: clock::uuid4() }
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::path::Path;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::config::PortRange;
    use crate::model::Service;
    use crate::store::IoStep;

    fn stamp(n: u32) -> Stamp {
        Stamp { now: format!("2026-01-01T00:00:{n:02}Z"), uid: format!("00000000-0000-4000-8000-{n:012}") }
    }

    fn registry() -> Registry {
        let cidrs: Vec<ipnet::IpNet> = vec!["10.96.0.0/24".parse().unwrap()];
        Registry::with_seed(PortRange { first: 30000, last: 30099 }, &cidrs, 3)
    }

    fn service(port: i64, note: &str) -> Service {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "annotations": {"note": note}},
            "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": port}]}}))
        .unwrap()
    }

    fn slice(ip: &str) -> EndpointsObject {
        let v = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "endpoints": [{"addresses": [ip]}], "ports": [{"port": 8080}]});
        parse_object(v).unwrap().remove(0).into_endpoints().unwrap()
    }

    fn temp_files(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.to_string_lossy().ends_with(".tmp") {
                    out.push(p.display().to_string());
                }
            }
        }
        out
    }

    /// What a client sees of the service and the slice, as bytes, and the allocators.
    fn served(reg: &mut Registry) -> (Vec<u8>, Vec<u8>, String) {
        reg.settle();
        let svc = serde_json::to_vec(&reg.get_service("default", "web").unwrap()).unwrap();
        let sl = reg.get_endpoints(EndpointsKind::EndpointSlice, "default", "web-1").unwrap();
        (svc, serde_json::to_vec(&endpoints_json(&sl)).unwrap(), format!("{:?}", reg.usage()))
    }

    /// Issue 12: ENOSPC and EROFS at every step of a write, on update and delete, leave
    /// the served objects byte-identical (resourceVersion included), the allocators and
    /// the files on disk as they were, and no temp file.
    #[test]
    fn a_failed_write_changes_nothing_and_leaves_no_temp_file() {
        let update_steps = [IoStep::CreateTemp, IoStep::WriteTemp, IoStep::FsyncTemp, IoStep::Rename];
        let cases = update_steps.iter().map(|s| (*s, false)).chain([(IoStep::Remove, true)]);
        for (step, delete) in cases {
            for errno in [libc::ENOSPC, libc::EROFS] {
                let dir = tempfile::tempdir().unwrap();
                let (mut store, _) = Store::open(dir.path()).unwrap();
                let mut reg = registry();
                let p = vec![
                    reg.prepare_service(service(30010, "v1"), &stamp(1)).unwrap(),
                    reg.prepare_endpoints(slice("198.18.0.10"), &stamp(1)).unwrap(),
                ];
                for r in persist_and_commit(&mut reg, &mut store, p) {
                    assert!(r.unwrap().error.is_none());
                }
                let before = served(&mut reg);
                let files = |d: &Path| {
                    [("services", "web"), ("endpointslices", "web-1")]
                        .map(|(k, n)| std::fs::read(d.join(format!("objects/{k}/default/{n}.json"))).unwrap())
                };
                let disk = files(dir.path());
                let reached = Arc::new(AtomicU32::new(0));
                let r2 = reached.clone();
                store.set_fault_hook(Some(Box::new(move |s: IoStep, _p: &Path| {
                    if s == step {
                        r2.fetch_add(1, Ordering::Relaxed);
                        return Err(io::Error::from_raw_os_error(errno));
                    }
                    Ok(())
                })));
                let batch = if delete {
                    vec![
                        reg.prepare_delete_service("default", "web").unwrap(),
                        reg.prepare_delete_endpoints(EndpointsKind::EndpointSlice, "default", "web-1").unwrap(),
                    ]
                } else {
                    // The update moves the nodePort: the new one is reserved meanwhile.
                    vec![
                        reg.prepare_service(service(30020, "v2"), &stamp(2)).unwrap(),
                        reg.prepare_endpoints(slice("198.18.0.20"), &stamp(2)).unwrap(),
                    ]
                };
                let results = persist_and_commit(&mut reg, &mut store, batch);
                let what = format!("{step:?} errno {errno} delete={delete}");
                assert_eq!(reached.load(Ordering::Relaxed), 2, "{what}: the step was not reached for both objects");
                for r in &results {
                    let e = r.as_ref().err().unwrap_or_else(|| panic!("{what}: the write must fail"));
                    assert!(e.message.contains("cannot persist"), "{}", e.message);
                    let os = io::Error::from_raw_os_error(errno).to_string();
                    assert!(e.message.contains(&os), "{what}: {}", e.message);
                }
                assert_eq!(served(&mut reg), before, "{what}: the served objects changed");
                assert_eq!(files(dir.path()), disk, "{what}: the files changed");
                assert_eq!(temp_files(dir.path()), Vec::<String>::new(), "{what}: temp files left");
                // The nodePort the failed update reserved is free again.
                store.set_fault_hook(None);
                let other: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "other"}, "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 30020}]}}))
                .unwrap();
                let p = reg.prepare_service(other, &stamp(3)).unwrap();
                assert!(persist_and_commit(&mut reg, &mut store, vec![p]).pop().unwrap().is_ok(), "{what}");
            }
        }
    }

    /// A failed directory fsync after the rename: the new file is what a restart reads,
    /// so the registry follows the disk and the caller is told durability is unconfirmed.
    #[test]
    fn a_failed_directory_fsync_after_the_rename_is_reported_and_served() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = Store::open(dir.path()).unwrap();
        let mut reg = registry();
        let p = reg.prepare_service(service(30010, "v1"), &stamp(1)).unwrap();
        persist_and_commit(&mut reg, &mut store, vec![p]);
        store.set_fault_hook(Some(Box::new(|s: IoStep, _p: &Path| {
            if s == IoStep::FsyncDir {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            Ok(())
        })));
        let p = reg.prepare_service(service(30010, "v2"), &stamp(2)).unwrap();
        let r = persist_and_commit(&mut reg, &mut store, vec![p]).pop().unwrap().unwrap();
        assert!(r.error.unwrap().message.contains("not confirmed durable"));
        let served = reg.get_service("default", "web").unwrap();
        assert_eq!(served.metadata.annotations.get("note"), Some("v2"));
        store.set_fault_hook(None);
        let (_, objs) = Store::open(dir.path()).unwrap();
        assert_eq!(objs[0].object["metadata"]["annotations"]["note"], "v2");
    }

    /// Group commit: a batch of many objects shares one fsync per directory.
    #[test]
    fn a_batch_shares_directory_fsyncs() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = Store::open(dir.path()).unwrap();
        let mut reg = registry();
        let mut batch = Vec::new();
        for i in 0..50 {
            let svc: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": format!("s{i}")}, "spec": {"ports": [{"port": 80}]}}))
            .unwrap();
            batch.push(reg.prepare_service(svc, &stamp(1)).unwrap());
        }
        let before = store.dir_syncs;
        let results = persist_and_commit(&mut reg, &mut store, batch);
        assert!(results.iter().all(|r| r.as_ref().is_ok_and(|c| c.error.is_none())));
        // services/default is new: its parent once when created, then the directory once.
        assert_eq!(store.dir_syncs - before, 2);
        assert_eq!(reg.service_count(), 50);
        assert_eq!(store.writes, 50);
    }
}
