//! The JSON-RPC methods: request → validate → allocate → persist. The data plane
//! follows from the stored state (the sync task is woken after every change).

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::clock;
use super::State;
use crate::api::rpc::{opt_str_param, str_param, RpcError};
use crate::api::server::method_not_found;
use crate::model::{parse_object, AnyObject, ApiError, EndpointsObject, Service, SERVICE_NAME_LABEL};
use crate::registry::{Action, EndpointsKind, Object, Prepared, Registry, Stamp};
use crate::store::{Kind, Op, Outcome, Store};

/// Dispatch one method call against the daemon state.
pub fn call(st: &mut State, method: &str, params: Value) -> Result<Value, RpcError> {
    // Reservations of changes abandoned by an earlier request go back first.
    st.registry.settle();
    match method {
        "service.apply" => service_apply(st, &params),
        "service.get" => {
            let (ns, name) = ns_name(&params)?;
            let svc = st.registry.get_service(ns, name)?;
            Ok(json!({ "object": svc }))
        }
        "service.list" => {
            let ns = opt_str_param(&params, "namespace")?;
            let items: Vec<Service> = st.registry.list_services(ns);
            Ok(json!({ "apiVersion": "v1", "kind": "ServiceList", "items": items }))
        }
        "service.delete" => {
            let (ns, name) = ns_name(&params)?;
            let p = st.registry.prepare_delete_service(ns, name)?;
            let (_, obj) = write_one(st, p)?;
            Ok(json!({ "object": object_json(&obj) }))
        }
        "endpoints.apply" => endpoints_apply(st, &params),
        "endpoints.get" => {
            let (ns, name) = ns_name(&params)?;
            let kind = endpoints_kind(&params)?;
            let obj = find_endpoints(st, kind, ns, name)?;
            Ok(json!({ "object": endpoints_json(&obj) }))
        }
        "endpoints.list" => {
            let ns = opt_str_param(&params, "namespace")?;
            let kind = endpoints_kind(&params)?;
            let items: Vec<Value> = st.registry.list_endpoints(kind, ns).iter().map(endpoints_json).collect();
            Ok(json!({ "apiVersion": "v1", "kind": "List", "items": items }))
        }
        "endpoints.delete" => {
            let (ns, name) = ns_name(&params)?;
            let (ns, name) = (ns.to_string(), name.to_string());
            let kind = endpoints_kind(&params)?;
            let kind = match kind {
                Some(k) => k,
                None => endpoints_kind_of(&find_endpoints(st, None, &ns, &name)?),
            };
            let p = st.registry.prepare_delete_endpoints(kind, &ns, &name)?;
            let (_, obj) = write_one(st, p)?;
            Ok(json!({ "object": object_json(&obj) }))
        }
        "objects.apply" => objects_apply(st, &params),
        "status" => Ok(super::status::status(st)),
        _ => Err(method_not_found(method)),
    }
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
    match obj {
        EndpointsObject::Endpoints(e) => serde_json::to_value(e).unwrap_or(Value::Null),
        EndpointsObject::Slice(s) => serde_json::to_value(s).unwrap_or(Value::Null),
    }
}

fn object_param(params: &Value) -> Result<&Value, RpcError> {
    match params.get("object") {
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
fn parse_one(v: &Value, default_kind: Option<(&str, &str)>, wanted: &str) -> Result<AnyObject, RpcError> {
    let mut v = v.clone();
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

fn service_apply(st: &mut State, params: &Value) -> Result<Value, RpcError> {
    let AnyObject::Service(svc) = parse_one(object_param(params)?, Some(("Service", "v1")), "Service")? else {
        return Err(RpcError::invalid_params("params.object: Invalid value: not a Service: use endpoints.apply"));
    };
    let stamp = st.stamp();
    let p = st.registry.prepare_service(svc, &stamp)?;
    let (action, obj) = write_one(st, p)?;
    Ok(json!({ "action": action.to_string(), "object": object_json(&obj) }))
}

fn endpoints_apply(st: &mut State, params: &Value) -> Result<Value, RpcError> {
    let obj = parse_one(object_param(params)?, None, "Endpoints or EndpointSlice")?;
    let Some(obj) = obj.into_endpoints() else {
        return Err(RpcError::invalid_params("params.object: Invalid value: a Service: use service.apply"));
    };
    let stamp = st.stamp();
    let p = st.registry.prepare_endpoints(obj, &stamp)?;
    let (action, obj) = write_one(st, p)?;
    Ok(json!({ "action": action.to_string(), "object": object_json(&obj) }))
}

/// `objects.apply` (docs/extensions.md): `{"objects": [...]}`, each a Service, Endpoints
/// or EndpointSlice (a `List` is unwrapped). The objects are applied in order as
/// `service.apply`/`endpoints.apply` would, persisted together with shared fsyncs, and
/// the data plane syncs them as one batch. One result per object, in order:
/// `{"action", "object"}` or `{"error": {"code", "message", "data"}}`.
fn objects_apply(st: &mut State, params: &Value) -> Result<Value, RpcError> {
    let items = match params.get("objects") {
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(RpcError::invalid_params(format!(
                "params.objects: Invalid value: {}: must be an array of objects",
                truncate(&other.to_string())
            )))
        }
        None => return Err(RpcError::invalid_params("params.objects: Required value")),
    };
    let mut parsed: Vec<Result<AnyObject, RpcError>> = Vec::new();
    for (i, v) in items.iter().enumerate() {
        let at = |e: RpcError| RpcError { message: format!("params.objects[{i}]: {}", e.message), ..e };
        match v {
            Value::Object(_) => match parse_object(v.clone()) {
                Ok(objs) => parsed.extend(objs.into_iter().map(|o| o.validate().map(|()| o).map_err(RpcError::from))),
                Err(e) => parsed.push(Err(RpcError::from(e))),
            },
            other => parsed.push(Err(at(RpcError::invalid_params(format!(
                "Invalid value: {}: must be a Kubernetes object",
                truncate(&other.to_string())
            ))))),
        }
    }
    let stamp = st.stamp();
    let mut results: Vec<Value> = Vec::with_capacity(parsed.len());
    // Prepared changes of the current group: persisted together. An object named twice
    // starts a new group, so that the second sees the first committed.
    let mut group: Vec<(usize, Prepared)> = Vec::new();
    let mut keys: std::collections::BTreeSet<(bool, String, String)> = Default::default();
    let mut slots: Vec<Option<Value>> = Vec::new();
    for obj in parsed {
        let i = slots.len();
        slots.push(None);
        let obj = match obj {
            Ok(o) => o,
            Err(e) => {
                slots[i] = Some(json!({ "error": e.to_json() }));
                continue;
            }
        };
        let key = (obj.kind() == "Service", obj.meta().ns().to_string(), obj.meta().name.clone());
        if keys.contains(&key) {
            flush(st, std::mem::take(&mut group), &mut slots);
            keys.clear();
        }
        keys.insert(key);
        let prepared = match obj {
            AnyObject::Service(svc) => st.registry.prepare_service(svc, &stamp),
            other => match other.into_endpoints() {
                Some(e) => st.registry.prepare_endpoints(e, &stamp),
                None => Err(ApiError::internal("not a Service, Endpoints or EndpointSlice")),
            },
        };
        match prepared {
            Ok(p) => group.push((i, p)),
            Err(e) => slots[i] = Some(json!({ "error": RpcError::from(e).to_json() })),
        }
    }
    flush(st, group, &mut slots);
    results.extend(slots.into_iter().map(|v| v.unwrap_or(Value::Null)));
    Ok(json!({ "results": results }))
}

/// Persist and commit one group of `objects.apply`, filling in its results.
fn flush(st: &mut State, group: Vec<(usize, Prepared)>, slots: &mut [Option<Value>]) {
    let (idx, prepared): (Vec<usize>, Vec<Prepared>) = group.into_iter().unzip();
    for (i, r) in idx.into_iter().zip(write_batch(st, prepared)) {
        slots[i] = Some(match r {
            Ok((action, obj)) => json!({ "action": action.to_string(), "object": object_json(&obj) }),
            Err(e) => json!({ "error": e.to_json() }),
        });
    }
}

fn write_one(st: &mut State, p: Prepared) -> Result<(Action, Object), RpcError> {
    write_batch(st, vec![p]).pop().unwrap_or_else(|| Err(ApiError::internal("no result").into()))
}

/// Persist prepared changes (shared fsyncs), commit those that are on disk, and tell
/// the data plane what changed.
fn write_batch(st: &mut State, prepared: Vec<Prepared>) -> Vec<Result<(Action, Object), RpcError>> {
    let done = persist_and_commit(&mut st.registry, &mut st.store, prepared);
    let mut out = Vec::with_capacity(done.len());
    for r in done {
        match r {
            Ok(c) => {
                if c.action != Action::Unchanged {
                    match (&c.object, &c.previous) {
                        (Object::Service(s), _) => st.service_changed(s.namespace(), s.name()),
                        (Object::Endpoints(e), prev) => {
                            if let Some(p) = prev {
                                st.endpoints_changed(p);
                            }
                            st.endpoints_changed(e);
                        }
                    }
                    let (ns, name) = c.object.key();
                    log::info!(
                        "{}/{ns}/{name} {}",
                        kind_word(&c.object),
                        if c.deleted { "deleted".to_string() } else { c.action.to_string() }
                    );
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

/// The write path of every method: the prepared changes are written with shared fsyncs
/// (`Store::apply`); each one that reached the disk is committed, each one that did not
/// is dropped, which gives back its reservations, so the registry serves exactly what it
/// served before. No undo.
pub fn persist_and_commit(
    registry: &mut Registry,
    store: &mut Store,
    prepared: Vec<Prepared>,
) -> Vec<Result<Committed, RpcError>> {
    let values: Vec<Option<Value>> =
        prepared.iter().map(|p| (p.changes_anything() && !p.is_delete()).then(|| object_json(p.object()))).collect();
    let mut ops: Vec<Op<'_>> = Vec::new();
    let mut op_of: Vec<Option<usize>> = Vec::with_capacity(prepared.len());
    for (p, v) in prepared.iter().zip(&values) {
        if !p.changes_anything() {
            op_of.push(None);
            continue;
        }
        let (namespace, name) = p.object().key();
        op_of.push(Some(ops.len()));
        ops.push(Op { kind: store_kind_of(p.object()), namespace, name, object: v.as_ref() });
    }
    let mut outcomes: Vec<Option<Outcome>> = store.apply(&ops).into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(prepared.len());
    for (p, op) in prepared.into_iter().zip(op_of) {
        let outcome = op.and_then(|i| outcomes[i].take());
        let what = describe(&p);
        let error = match outcome {
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
    };
    if p.is_delete() {
        format!("the deletion of {kind} {ns}/{name}")
    } else {
        format!("{kind} {ns}/{name}")
    }
}

fn store_kind_of(obj: &Object) -> Kind {
    match obj {
        Object::Service(_) => Kind::Service,
        Object::Endpoints(e) => store_kind(e),
    }
}

pub fn object_json(obj: &Object) -> Value {
    match obj {
        Object::Service(s) => serde_json::to_value(s).unwrap_or(Value::Null),
        Object::Endpoints(e) => endpoints_json(e),
    }
}

/// The services an endpoints object feeds.
pub fn services_of(obj: &EndpointsObject) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    match obj {
        EndpointsObject::Endpoints(e) => {
            out.insert((e.metadata.ns().to_string(), e.metadata.name.clone()));
        }
        EndpointsObject::Slice(s) => {
            if let Some(svc) = s.metadata.labels.get(SERVICE_NAME_LABEL) {
                out.insert((s.metadata.ns().to_string(), svc.clone()));
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
    use std::cell::Cell;
    use std::io;
    use std::path::Path;
    use std::rc::Rc;

    use super::*;
    use crate::config::PortRange;
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
                let reached = Rc::new(Cell::new(0u32));
                let r2 = reached.clone();
                store.set_fault_hook(Some(Box::new(move |s: IoStep, _p: &Path| {
                    if s == step {
                        r2.set(r2.get() + 1);
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
                assert_eq!(reached.get(), 2, "{what}: the step was not reached for both objects");
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
        assert_eq!(served.metadata.annotations.get("note").map(String::as_str), Some("v2"));
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
