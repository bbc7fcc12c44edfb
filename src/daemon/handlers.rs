//! The JSON-RPC methods: request → validate → allocate → persist. The data plane
//! follows from the stored state (the sync task is woken after every change).

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::clock;
use super::State;
use crate::api::rpc::{opt_str_param, str_param, RpcError};
use crate::api::server::method_not_found;
use crate::model::{parse_object, AnyObject, ApiError, EndpointsObject, Service, SERVICE_NAME_LABEL};
use crate::registry::{Action, EndpointsKind, Stamp};
use crate::store::Kind;

/// Dispatch one method call against the daemon state.
pub fn call(st: &mut State, method: &str, params: Value) -> Result<Value, RpcError> {
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
            let (ns, name) = (ns.to_string(), name.to_string());
            let svc = st.registry.delete_service(&ns, &name)?;
            if let Err(e) = st.store.delete(Kind::Service, &ns, &name) {
                // Put it back exactly as it was: a failed request changes nothing.
                let stamp = st.stamp();
                let _ = st.registry.apply_service(svc, &stamp);
                return Err(ApiError::internal(format!("cannot persist the deletion: {e}")).into());
            }
            st.service_changed(&ns, &name);
            Ok(json!({ "object": svc }))
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
            let obj = st.registry.delete_endpoints(kind, &ns, &name)?;
            let store_kind = store_kind(&obj);
            if let Err(e) = st.store.delete(store_kind, &ns, &name) {
                let stamp = st.stamp();
                let _ = st.registry.apply_endpoints(obj, &stamp);
                return Err(ApiError::internal(format!("cannot persist the deletion: {e}")).into());
            }
            st.endpoints_changed(&obj);
            Ok(json!({ "object": endpoints_json(&obj) }))
        }
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
    let ns = svc.namespace().to_string();
    let name = svc.name().to_string();
    let previous = st.registry.get_service(&ns, &name).ok();
    let stamp = st.stamp();
    let (action, stored) = st.registry.apply_service(svc, &stamp)?;
    if action != Action::Unchanged {
        let value = serde_json::to_value(&stored).map_err(|e| ApiError::internal(e.to_string()))?;
        if let Err(e) = st.store.put(Kind::Service, &ns, &name, &value) {
            // Undo in memory so the allocation is not lost or leaked.
            match previous {
                Some(p) => {
                    let _ = st.registry.apply_service(p, &stamp);
                }
                None => {
                    let _ = st.registry.delete_service(&ns, &name);
                }
            }
            return Err(ApiError::internal(format!("cannot persist Service {ns}/{name}: {e}")).into());
        }
        st.service_changed(&ns, &name);
        log::info!("service/{ns}/{name} {action}");
    }
    Ok(json!({ "action": action.to_string(), "object": stored }))
}

fn endpoints_apply(st: &mut State, params: &Value) -> Result<Value, RpcError> {
    let obj = parse_one(object_param(params)?, None, "Endpoints or EndpointSlice")?;
    let kind = obj.kind();
    let Some(obj) = obj.into_endpoints() else {
        return Err(RpcError::invalid_params("params.object: Invalid value: a Service: use service.apply"));
    };
    let (k, ns, name) = match &obj {
        EndpointsObject::Endpoints(e) => {
            (EndpointsKind::Endpoints, e.metadata.ns().to_string(), e.metadata.name.clone())
        }
        EndpointsObject::Slice(s) => {
            (EndpointsKind::EndpointSlice, s.metadata.ns().to_string(), s.metadata.name.clone())
        }
    };
    let previous = st.registry.get_endpoints(k, &ns, &name).ok();
    let stamp = st.stamp();
    let (action, stored) = st.registry.apply_endpoints(obj, &stamp)?;
    if action != Action::Unchanged {
        if let Err(e) = st.store.put(store_kind(&stored), &ns, &name, &endpoints_json(&stored)) {
            match previous {
                Some(p) => {
                    let _ = st.registry.apply_endpoints(p, &stamp);
                }
                None => {
                    let _ = st.registry.delete_endpoints(k, &ns, &name);
                }
            }
            return Err(ApiError::internal(format!("cannot persist {kind} {ns}/{name}: {e}")).into());
        }
        if let Some(p) = &previous {
            st.endpoints_changed(p);
        }
        st.endpoints_changed(&stored);
        log::info!("{}/{ns}/{name} {action}", kind.to_lowercase());
    }
    Ok(json!({ "action": action.to_string(), "object": endpoints_json(&stored) }))
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
