//! The `nodeportd` ubus object: its methods, their signatures, and how a call becomes a
//! socket-API request and its result a ubus reply. Pure, given the request handler.
//!
//! The names, arguments and replies are those of the rpcd exec plugin this object
//! replaced: `service_apply` is the socket API's `service.apply`, a result object is the
//! reply as it is, and a failed request answers (with ubus status 0, as rpcd did) with
//! `{"error": {"code", "reason", "message"}}`, the message worded as `nodeportctl`
//! prints it.

use serde_json::{json, Map, Value};

use super::blob::{ty, BlobError};
use super::msg::{self, status, Method};
use crate::api::rpc::RpcError;
use crate::model::Reason;

pub const OBJECT: &str = "nodeportd";

/// A ubus method and the socket-API method it calls.
pub struct Spec {
    pub ubus: &'static str,
    pub rpc: &'static str,
    pub args: &'static [(&'static str, u8)],
}

const NS_NAME: &[(&str, u8)] = &[("namespace", ty::STRING), ("name", ty::STRING)];
const NS_NAME_KIND: &[(&str, u8)] = &[("namespace", ty::STRING), ("name", ty::STRING), ("kind", ty::STRING)];
const NAME: &[(&str, u8)] = &[("name", ty::STRING)];
const OBJ: &[(&str, u8)] = &[("object", ty::TABLE)];

pub const METHODS: &[Spec] = &[
    Spec { ubus: "status", rpc: "status", args: &[] },
    Spec { ubus: "service_apply", rpc: "service.apply", args: OBJ },
    Spec { ubus: "service_get", rpc: "service.get", args: NS_NAME },
    Spec { ubus: "service_list", rpc: "service.list", args: &[("namespace", ty::STRING)] },
    Spec { ubus: "service_delete", rpc: "service.delete", args: NS_NAME },
    Spec { ubus: "endpoints_apply", rpc: "endpoints.apply", args: OBJ },
    Spec { ubus: "endpoints_get", rpc: "endpoints.get", args: NS_NAME_KIND },
    Spec { ubus: "endpoints_list", rpc: "endpoints.list", args: &[("namespace", ty::STRING), ("kind", ty::STRING)] },
    Spec { ubus: "endpoints_delete", rpc: "endpoints.delete", args: NS_NAME_KIND },
    Spec { ubus: "node_apply", rpc: "node.apply", args: OBJ },
    Spec { ubus: "node_get", rpc: "node.get", args: NAME },
    Spec { ubus: "node_list", rpc: "node.list", args: &[] },
    Spec { ubus: "node_delete", rpc: "node.delete", args: NAME },
];

/// The signature ADD_OBJECT carries (what `ubus -v list nodeportd` shows).
pub fn signature() -> Vec<Method<'static>> {
    METHODS.iter().map(|m| Method { name: m.ubus, args: m.args }).collect()
}

/// uhttpd and rpcd add the caller's session to every call's arguments.
pub const SESSION_ARG: &str = "ubus_rpc_session";

/// What a call answers: a DATA reply (if any) and the STATUS code.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub data: Option<Map<String, Value>>,
    pub status: u32,
}

/// The socket API method and parameters one INVOKE of `method` with the arguments
/// `args` (the DATA attribute) asks for, or the answer when it asks for nothing valid.
pub fn request(
    method: Option<&str>,
    args: Option<Result<Map<String, Value>, BlobError>>,
) -> Result<(&'static str, Value), Answer> {
    let no_data = |status| Answer { data: None, status };
    let Some(spec) = method.and_then(|m| METHODS.iter().find(|s| s.ubus == m)) else {
        return Err(no_data(status::METHOD_NOT_FOUND));
    };
    let mut params = match args {
        Some(Ok(map)) => map,
        // libubus answers a call without arguments, or with malformed ones, this way.
        None | Some(Err(_)) => return Err(no_data(status::INVALID_ARGUMENT)),
    };
    params.remove(SESSION_ARG);
    Ok((spec.rpc, Value::Object(params)))
}

/// The answer to a call from the handler's result.
pub fn answer(result: Result<Value, RpcError>) -> Answer {
    let data = match result {
        Ok(Value::Object(m)) => m,
        Ok(other) => {
            let mut m = Map::new();
            m.insert("result".into(), other);
            m
        }
        Err(e) => error_reply(&e),
    };
    Answer { data: Some(data), status: status::OK }
}

/// Answer one INVOKE with a handler that answers at once ([`request`] then [`answer`]).
pub fn invoke(
    call: &dyn Fn(&str, Value) -> Result<Value, RpcError>,
    method: Option<&str>,
    args: Option<Result<Map<String, Value>, BlobError>>,
) -> Answer {
    match request(method, args) {
        Ok((rpc, params)) => answer(call(rpc, params)),
        Err(a) => a,
    }
}

/// `{"error": {...}}` for a failed request.
pub fn error_reply(e: &RpcError) -> Map<String, Value> {
    let tag = match e.reason {
        Some(r) => r.to_string(),
        None => e.code.to_string(),
    };
    let mut err = Map::new();
    err.insert("code".into(), json!(e.code));
    if let Some(r) = e.reason {
        err.insert("reason".into(), json!(r));
    }
    err.insert("message".into(), json!(format!("Error from server ({tag}): {}", e.message)));
    let mut m = Map::new();
    m.insert("error".into(), Value::Object(err));
    m
}

/// The reply sent instead of one that would exceed ubus' message limit.
pub fn too_large_reply(method: &str, bytes: usize) -> Map<String, Value> {
    error_reply(&RpcError {
        code: Reason::TooLarge.code(),
        message: format!(
            "the reply of {method} is {bytes} bytes, over ubus' limit of {} bytes per message: \
             ask for one namespace at a time, or use the socket API (nodeportctl)",
            msg::MAX_MSGLEN
        ),
        reason: Some(Reason::TooLarge.as_str()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    type Seen = RefCell<Vec<(String, Value)>>;

    /// A handler that records its calls.
    fn handler(m: &str, p: Value, seen: &Seen) -> Result<Value, RpcError> {
        seen.borrow_mut().push((m.to_string(), p.clone()));
        match m {
            "status" => Ok(json!({"version": "x"})),
            "service.list" => Ok(json!([1])),
            _ => Err(RpcError {
                code: Reason::NotFound.code(),
                message: "services \"nope\" not found".into(),
                reason: Some("NotFound"),
            }),
        }
    }

    fn args(v: Value) -> Option<Result<Map<String, Value>, BlobError>> {
        Some(Ok(v.as_object().unwrap().clone()))
    }

    #[test]
    fn methods_map_to_the_socket_api_and_drop_the_session() {
        let seen = Seen::default();
        let call = |m: &str, p: Value| handler(m, p, &seen);
        let a = invoke(&call, Some("status"), args(json!({"ubus_rpc_session": "0123"})));
        assert_eq!(a, Answer { data: Some(json!({"version": "x"}).as_object().unwrap().clone()), status: 0 });
        assert_eq!(seen.borrow()[0], ("status".to_string(), json!({})));

        let a = invoke(&call, Some("service_get"), args(json!({"namespace": "default", "name": "nope"})));
        assert_eq!(
            Value::Object(a.data.unwrap()),
            json!({"error": {"code": -32004, "reason": "NotFound",
                   "message": "Error from server (NotFound): services \"nope\" not found"}})
        );
        assert_eq!(seen.borrow()[1], ("service.get".to_string(), json!({"namespace": "default", "name": "nope"})));

        // A result that is not an object is wrapped, as the plugin did.
        let a = invoke(&call, Some("service_list"), args(json!({})));
        assert_eq!(Value::Object(a.data.unwrap()), json!({"result": [1]}));
    }

    #[test]
    fn unknown_methods_and_bad_arguments_get_ubus_statuses() {
        let seen = Seen::default();
        let call = |m: &str, p: Value| handler(m, p, &seen);
        assert_eq!(invoke(&call, Some("nope"), args(json!({}))).status, status::METHOD_NOT_FOUND);
        assert_eq!(invoke(&call, None, args(json!({}))).status, status::METHOD_NOT_FOUND);
        assert_eq!(invoke(&call, Some("status"), None).status, status::INVALID_ARGUMENT);
        assert_eq!(invoke(&call, Some("status"), Some(Err(BlobError::TooDeep))).status, status::INVALID_ARGUMENT);
        assert!(seen.borrow().is_empty(), "nothing reached the handler");
    }

    #[test]
    fn every_method_of_the_rpcd_plugin_is_there_with_its_arguments() {
        let names: Vec<&str> = METHODS.iter().map(|m| m.ubus).collect();
        assert_eq!(
            names,
            [
                "status",
                "service_apply",
                "service_get",
                "service_list",
                "service_delete",
                "endpoints_apply",
                "endpoints_get",
                "endpoints_list",
                "endpoints_delete",
                "node_apply",
                "node_get",
                "node_list",
                "node_delete"
            ]
        );
        for m in METHODS {
            assert_eq!(m.rpc.replace('.', "_"), m.ubus);
        }
        // The ACL file names exactly these methods.
        let acl: Value =
            serde_json::from_str(include_str!("../../openwrt-package/nodeportd/files/nodeportd.acl.json")).unwrap();
        let mut in_acl: Vec<String> = ["nodeportd-read", "nodeportd-write"]
            .iter()
            .flat_map(|g| {
                let access = if *g == "nodeportd-read" { "read" } else { "write" };
                acl[g][access]["ubus"]["nodeportd"].as_array().unwrap().clone()
            })
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        in_acl.sort();
        let mut ours: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        ours.sort();
        assert_eq!(in_acl, ours);
    }

    #[test]
    fn too_large_names_the_limit_and_the_way_out() {
        let m = too_large_reply("service_list", 2_000_000);
        let msg = m["error"]["message"].as_str().unwrap();
        assert!(msg.contains("2000000") && msg.contains("1048576") && msg.contains("namespace"), "{msg}");
        assert_eq!(m["error"]["reason"], "TooLarge");
    }
}
