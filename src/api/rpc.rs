//! JSON-RPC 2.0 framing: parse one request line, format one response line. Pure.

use serde_json::{json, Value};

use crate::model::{ApiError, Reason};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;

/// An error response: `{"code", "message", "data": {"reason"}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub reason: Option<&'static str>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError { code, message: message.into(), reason: None }
    }
    pub fn invalid_params(message: impl Into<String>) -> Self {
        RpcError { code: INVALID_PARAMS, message: message.into(), reason: Some(Reason::Invalid.as_str()) }
    }
    pub fn to_json(&self) -> Value {
        match self.reason {
            Some(r) => json!({"code": self.code, "message": self.message, "data": {"reason": r}}),
            None => json!({"code": self.code, "message": self.message}),
        }
    }
}

impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> Self {
        RpcError { code: e.reason.code(), message: e.message, reason: Some(e.reason.as_str()) }
    }
}

/// A well-formed request.
#[derive(Debug)]
pub struct Request {
    /// `None` for a notification (no `id`): no response is sent.
    pub id: Option<Value>,
    pub method: String,
    pub params: Params,
}

/// A request's params: an object. An `objects.apply`'s `params.objects` may be taken
/// out of it as each item's JSON text, so that the objects are decoded straight from
/// their text, never built as a tree ([`parse_request`]).
#[derive(Debug, Default)]
pub struct Params {
    pub value: Value,
    pub objects: Option<Vec<Box<str>>>,
}

impl From<Value> for Params {
    fn from(value: Value) -> Self {
        Params { value, objects: None }
    }
}

impl Params {
    /// The params as one object again, `objects` in it.
    pub fn into_value(self) -> Value {
        let mut value = self.value;
        if let (Some(objects), Value::Object(map)) = (self.objects, &mut value) {
            let items = objects.iter().map(|o| serde_json::from_str(o).unwrap_or(Value::Null)).collect();
            map.insert("objects".into(), Value::Array(items));
        }
        value
    }
}

/// An `objects.apply` request as it usually comes, read with its objects left as text:
/// `id` a string or number, `jsonrpc` "2.0", `params.objects` an array. Anything else
/// is `None` and goes the tree's way, which has every error message.
fn objects_apply(text: &str) -> Option<Request> {
    use crate::jsontext::{elements, get, members, plain_str, valid};
    if !valid(text) {
        return None;
    }
    let r = members(text)?;
    if plain_str(get(&r, "jsonrpc")?)? != "2.0" || plain_str(get(&r, "method")?)? != "objects.apply" {
        return None;
    }
    let id: Value = serde_json::from_str(get(&r, "id")?).ok()?;
    if !(id.is_string() || id.is_number()) {
        return None;
    }
    let p = members(get(&r, "params")?)?;
    let objects = elements(get(&p, "objects")?)?;
    // The other params (`brief`) as a tree.
    let mut value = serde_json::Map::new();
    for (k, v) in p.into_iter().filter(|(k, _)| *k != "objects") {
        value.insert(k.into(), serde_json::from_str(v).ok()?);
    }
    let params = Params { value: Value::Object(value), objects: Some(objects.into_iter().map(Box::from).collect()) };
    Some(Request { id: Some(id), method: "objects.apply".into(), params })
}

/// Parse one line. On failure, the error response to send (with `id` when known).
pub fn parse_request(line: &[u8]) -> Result<Request, (Value, RpcError)> {
    // One UTF-8 check of the line, then a parse that need not check every string again.
    let text = std::str::from_utf8(line)
        .map_err(|e| (Value::Null, RpcError::new(PARSE_ERROR, format!("parse error: not UTF-8: {e}"))))?;
    if text.contains("\"objects.apply\"") {
        if let Some(r) = objects_apply(text) {
            return Ok(r);
        }
    }
    parse_tree(text)
}

/// [`parse_request`] through a tree of the whole request.
fn parse_tree(text: &str) -> Result<Request, (Value, RpcError)> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| (Value::Null, RpcError::new(PARSE_ERROR, format!("parse error: {e}"))))?;
    let Value::Object(mut obj) = v else {
        return Err((Value::Null, RpcError::new(INVALID_REQUEST, "invalid request: expected a JSON object")));
    };
    let id = obj.remove("id");
    let id_for_err = id.clone().unwrap_or(Value::Null);
    if let Some(bad) = id.as_ref().filter(|i| !(i.is_string() || i.is_number() || i.is_null())) {
        return Err((
            Value::Null,
            RpcError::new(INVALID_REQUEST, format!("invalid request: id: Invalid value: {bad}")),
        ));
    }
    match obj.get("jsonrpc") {
        Some(Value::String(s)) if s == "2.0" => {}
        other => {
            let shown = other.map(|v| v.to_string()).unwrap_or_else(|| "missing".into());
            return Err((
                id_for_err,
                RpcError::new(INVALID_REQUEST, format!("invalid request: jsonrpc must be \"2.0\", got {shown}")),
            ));
        }
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        other => {
            let shown = other.map(|v| v.to_string()).unwrap_or_else(|| "missing".into());
            return Err((
                id_for_err,
                RpcError::new(INVALID_REQUEST, format!("invalid request: method must be a string, got {shown}")),
            ));
        }
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(p @ Value::Object(_)) => p,
        Some(other) => {
            return Err((id_for_err, RpcError::new(INVALID_PARAMS, format!("params must be an object, got {other}"))));
        }
    };
    Ok(Request { id, method, params: params.into() })
}

/// A JSON object of these members, moved in. (`json!` would copy every member value
/// through `to_value`: for the objects of a large reply that doubled the work.)
pub fn object(members: Vec<(&str, Value)>) -> Value {
    let mut map = serde_json::Map::new();
    for (k, v) in members {
        map.insert(k.to_string(), v);
    }
    Value::Object(map)
}

pub fn response_ok(id: Value, result: Value) -> Value {
    object(vec![("jsonrpc", "2.0".into()), ("id", id), ("result", result)])
}

pub fn response_err(id: Value, err: &RpcError) -> Value {
    object(vec![("jsonrpc", "2.0".into()), ("id", id), ("error", err.to_json())])
}

/// A string parameter, required.
pub fn str_param<'a>(params: &'a Value, key: &str) -> Result<&'a str, RpcError> {
    match params.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(RpcError::invalid_params(format!("params.{key}: Invalid value: {other}: must be a string"))),
        None => Err(RpcError::invalid_params(format!("params.{key}: Required value"))),
    }
}

/// A string parameter, optional.
pub fn opt_str_param<'a>(params: &'a Value, key: &str) -> Result<Option<&'a str>, RpcError> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => str_param(params, key).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_request() {
        let r = parse_request(br#"{"jsonrpc":"2.0","id":7,"method":"status","params":{}}"#).unwrap();
        assert_eq!(r.id, Some(json!(7)));
        assert_eq!(r.method, "status");
    }

    #[test]
    fn missing_params_mean_empty_object() {
        let r = parse_request(br#"{"jsonrpc":"2.0","id":"a","method":"status"}"#).unwrap();
        assert_eq!(r.params.value, json!({}));
    }

    #[test]
    fn errors_use_standard_codes() {
        assert_eq!(parse_request(b"{nope").unwrap_err().1.code, PARSE_ERROR);
        let (id, e) = parse_request(b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\"}").unwrap_err();
        assert_eq!((id, e.code), (Value::Null, PARSE_ERROR));
        assert!(e.message.starts_with("parse error: not UTF-8: invalid utf-8 sequence"), "{}", e.message);
        assert_eq!(parse_request(b"[1,2]").unwrap_err().1.code, INVALID_REQUEST);
        assert_eq!(parse_request(br#"{"jsonrpc":"1.0","id":1,"method":"x"}"#).unwrap_err().1.code, INVALID_REQUEST);
        assert_eq!(parse_request(br#"{"jsonrpc":"2.0","id":1,"method":5}"#).unwrap_err().1.code, INVALID_REQUEST);
        let (id, e) = parse_request(br#"{"jsonrpc":"2.0","id":3,"method":"x","params":[1]}"#).unwrap_err();
        assert_eq!((id, e.code), (json!(3), INVALID_PARAMS));
    }

    /// A request as the tree's way reads it, objects included.
    fn by_tree(line: &str) -> Result<(Option<Value>, String, Value), (Value, RpcError)> {
        parse_tree(line).map(|r| (r.id, r.method, r.params.into_value()))
    }

    #[test]
    fn an_objects_apply_keeps_its_objects_as_text_and_means_what_its_tree_means() {
        let svc = r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"}}"#;
        let fast = [
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"objects.apply","params":{{"objects":[{svc}, 5 ,{svc}]}}}}"#),
            r#" { "params" : { "brief" : true , "objects" : [ ] , "x": {"y":[1]} }, "method":"objects.apply","id":"q","jsonrpc":"2.0"} "#.to_string(),
            format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"objects.apply","params":{{"objects":[{svc}],"brief":"no"}},"extra":[{{}}]}}"#
            ),
            // Repeated keys: the last wins, as in a tree.
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"status","method":"objects.apply","params":{{"objects":[1],"objects":[{svc}]}}}}"#
            ),
        ];
        for line in &fast {
            let r = objects_apply(line).unwrap_or_else(|| panic!("{line}: not read as text"));
            assert!(r.params.objects.is_some());
            let got = parse_request(line.as_bytes()).map(|r| (r.id, r.method, r.params.into_value()));
            assert_eq!(got, by_tree(line), "{line}");
        }
        let tree = [
            // A notification, a null or odd id, another method last, escapes, bad params.
            format!(r#"{{"jsonrpc":"2.0","method":"objects.apply","params":{{"objects":[{svc}]}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":null,"method":"objects.apply","params":{{"objects":[{svc}]}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":[1],"method":"objects.apply","params":{{"objects":[{svc}]}}}}"#),
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"objects.apply","method":"status","params":{{"objects":[{svc}]}}}}"#
            ),
            r#"{"jsonrpc":"2.0","id":1,"method":"objects.apply","metho\u0064":"status","params":{"objects":[]}}"#
                .to_string(),
            r#"{"jsonrpc":"2.0","id":1,"method":"objects.\u0061pply","params":{"objects":[]}}"#.to_string(),
            r#"{"jsonrpc":"1.0","id":1,"method":"objects.apply","params":{"objects":[]}}"#.to_string(),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"objects.apply","params":{{"objects":{svc}}}}}"#),
            r#"{"jsonrpc":"2.0","id":1,"method":"objects.apply","params":{"brief":true}}"#.to_string(),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"objects.apply","params":[{svc}]}}"#),
            r#"{"jsonrpc":"2.0","id":1,"method":"objects.apply","params":null}"#.to_string(),
            // Not JSON, in a member the fast way would not read.
            r#"{"jsonrpc":"2.0","id":1,"method":"objects.apply","params":{"objects":[]},"x":tru}"#.to_string(),
            r#"{"jsonrpc":"2.0","id":1,"method":"objects.apply","params":{"objects":[{"a":}]}}"#.to_string(),
        ];
        for line in &tree {
            assert!(objects_apply(line).is_none(), "{line}: read as text");
            let got = parse_request(line.as_bytes()).map(|r| (r.id, r.method, r.params.into_value()));
            assert_eq!(got, by_tree(line), "{line}");
        }
    }

    #[test]
    fn api_errors_carry_reason() {
        let e: RpcError = ApiError::new(Reason::AlreadyAllocated, "taken").into();
        let j = e.to_json();
        assert_eq!(j["data"]["reason"], "AlreadyAllocated");
        assert!((-32099..=-32000).contains(&j["code"].as_i64().unwrap()));
    }
}
