//! From request JSON to typed objects: kind/apiVersion checks, `List` unwrapping, and
//! type errors that name the field path (`spec.ports[0].port: invalid type: ...`).

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::validate::{q, validate_endpoint_slice, validate_endpoints, validate_service_create};
use super::{validate_node, ApiError, EndpointSlice, Endpoints, EndpointsObject, Node, Reason, Service};

/// Any object nodeportd stores.
// Short-lived (one request's objects), so the size of the Service variant costs nothing
// worth a Box at every use.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnyObject {
    Service(Service),
    Endpoints(Endpoints),
    EndpointSlice(EndpointSlice),
    Node(Node),
}

impl AnyObject {
    pub fn kind(&self) -> &'static str {
        match self {
            AnyObject::Service(_) => "Service",
            AnyObject::Endpoints(_) => "Endpoints",
            AnyObject::EndpointSlice(_) => "EndpointSlice",
            AnyObject::Node(_) => "Node",
        }
    }
    /// The resource name kubectl prints in `service/NS/NAME created`.
    pub fn resource(&self) -> &'static str {
        match self {
            AnyObject::Service(_) => "service",
            AnyObject::Endpoints(_) => "endpoints",
            AnyObject::EndpointSlice(_) => "endpointslice",
            AnyObject::Node(_) => "node",
        }
    }
    pub fn meta(&self) -> &super::ObjectMeta {
        match self {
            AnyObject::Service(o) => &o.metadata,
            AnyObject::Endpoints(o) => &o.metadata,
            AnyObject::EndpointSlice(o) => &o.metadata,
            AnyObject::Node(o) => &o.metadata,
        }
    }
    /// `kind` and `apiVersion` as decoded.
    fn type_meta(&self) -> (Option<&str>, Option<&str>) {
        let (k, a) = match self {
            AnyObject::Service(o) => (&o.kind, &o.api_version),
            AnyObject::Endpoints(o) => (&o.kind, &o.api_version),
            AnyObject::EndpointSlice(o) => (&o.kind, &o.api_version),
            AnyObject::Node(o) => (&o.kind, &o.api_version),
        };
        (k.as_deref(), a.as_deref())
    }
    pub fn meta_mut(&mut self) -> &mut super::ObjectMeta {
        match self {
            AnyObject::Service(o) => &mut o.metadata,
            AnyObject::Endpoints(o) => &mut o.metadata,
            AnyObject::EndpointSlice(o) => &mut o.metadata,
            AnyObject::Node(o) => &mut o.metadata,
        }
    }
    /// `KIND/NAMESPACE/NAME` as `nodeportctl apply` prints it; `node/NAME` for a Node.
    pub fn path(&self) -> String {
        match self {
            AnyObject::Node(n) => format!("node/{}", n.metadata.name),
            _ => format!("{}/{}/{}", self.resource(), self.meta().ns(), self.meta().name),
        }
    }
    /// Validates an Endpoints or EndpointSlice. A Service passes here: like the API
    /// server, the registry validates it after defaulting it and dropping what an
    /// update makes obsolete, which needs the stored object
    /// ([`crate::model::strategy::prepare_service`]).
    pub fn validate(&self) -> Result<(), ApiError> {
        match self {
            AnyObject::Service(_) => Ok(()),
            AnyObject::Endpoints(o) => validate_endpoints(o),
            AnyObject::EndpointSlice(o) => validate_endpoint_slice(o),
            AnyObject::Node(o) => validate_node(o),
        }
    }
    /// The endpoints form `endpoints.apply` takes; `None` for a Service.
    pub fn into_endpoints(self) -> Option<EndpointsObject> {
        match self {
            AnyObject::Service(_) | AnyObject::Node(_) => None,
            AnyObject::Endpoints(e) => Some(EndpointsObject::Endpoints(e)),
            AnyObject::EndpointSlice(e) => Some(EndpointsObject::Slice(e)),
        }
    }
    /// The object's JSON text, as the store keeps it and the API sends it (keys sorted,
    /// no whitespace: [`super`]'s types declare their fields in that order).
    pub fn to_text(&self) -> String {
        let t = match self {
            AnyObject::Service(o) => serde_json::to_string(o),
            AnyObject::Endpoints(o) => serde_json::to_string(o),
            AnyObject::EndpointSlice(o) => serde_json::to_string(o),
            AnyObject::Node(o) => serde_json::to_string(o),
        };
        t.unwrap_or_default()
    }
    /// The object as a tree, read back from [`Self::to_text`]: one printer for the
    /// model's types in the binary.
    pub fn to_json(&self) -> Value {
        serde_json::from_str(&self.to_text()).unwrap_or(Value::Null)
    }
}

fn invalid(msg: String) -> ApiError {
    ApiError::new(Reason::Invalid, msg)
}

/// The apiVersion each kind is served in.
fn api_version_of(kind: &str) -> Option<&'static str> {
    match kind {
        "Service" | "Endpoints" | "Node" => Some("v1"),
        "EndpointSlice" => Some("discovery.k8s.io/v1"),
        _ => None,
    }
}

/// Parses one request body: a single object, or a `List` (also `ServiceList`,
/// `EndpointsList`, `EndpointSliceList`) of them, as `kubectl get -o json` prints.
/// Objects are parsed, not validated (see [`parse_and_validate`]).
pub fn parse_object(value: Value) -> Result<Vec<AnyObject>, ApiError> {
    let kind = kind_of(&value)?;
    let item_kind = match kind.as_str() {
        "List" => None,
        "ServiceList" => Some("Service"),
        "EndpointsList" => Some("Endpoints"),
        "EndpointSliceList" => Some("EndpointSlice"),
        "NodeList" => Some("Node"),
        _ => return Ok(vec![parse_single(value, None)?]),
    };
    let Value::Object(mut map) = value else {
        return Err(invalid("the request must be a JSON object".into()));
    };
    let items = match map.remove("items") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items,
        Some(other) => return Err(invalid(format!("{kind}: items: Invalid value: {other}: must be an array"))),
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            parse_single(item, item_kind)
                .map_err(|e| ApiError::new(e.reason, format!("{kind} items[{i}]: {}", e.message)))
        })
        .collect()
}

/// [`parse_object`] of a document's JSON text, without building a tree of it when it
/// is one object or a `List` of objects whose `kind` and `apiVersion` are what
/// nodeportd serves: each object is decoded straight from its text. Anything else
/// (other kinds, a repeated key, a type error) goes the tree's way, so results and
/// error messages are those of [`parse_object`].
pub fn parse_object_text(text: &str) -> Result<Vec<AnyObject>, ApiError> {
    if let Some(objs) = objects_of_text(text) {
        return Ok(objs);
    }
    let value: Value = serde_json::from_str(text).map_err(|e| invalid(format!("error parsing JSON: {e}")))?;
    parse_object(value)
}

/// The fast way of [`parse_object_text`]: `None` where the tree's way must be taken.
/// `text` must be valid JSON ([`crate::jsontext::valid`]).
pub fn objects_of_text(text: &str) -> Option<Vec<AnyObject>> {
    use crate::jsontext::{elements, get, members, plain_str};
    let head = members(text)?;
    if plain_str(get(&head, "kind")?)? != "List" {
        return Some(vec![fast_single(text)?]);
    }
    elements(get(&head, "items")?)?.into_iter().map(fast_single).collect()
}

/// One object whose kind and apiVersion need nothing done to them, decoded from its text.
/// Only the members up to `kind` and `apiVersion` are looked at first; the typed decode
/// refuses a repeated key, and must give back the same kind and apiVersion.
fn fast_single(text: &str) -> Option<AnyObject> {
    use crate::jsontext::{plain_str, two_members};
    let (kind, api) = two_members(text, "kind", "apiVersion")?;
    let kind = plain_str(kind)?;
    let api = plain_str(api)?;
    if api != api_version_of(kind)? {
        return None;
    }
    let obj = typed_text(kind, text).ok()?;
    let (k, a) = obj.type_meta();
    (k == Some(kind) && a == Some(api)).then_some(obj)
}

/// [`parse_object`] followed by validation of every object (a Service as a create
/// would validate it); fails on the first object with errors.
pub fn parse_and_validate(value: Value) -> Result<Vec<AnyObject>, ApiError> {
    let objs = parse_object(value)?;
    for o in &objs {
        match o {
            AnyObject::Service(s) => validate_service_create(s)?,
            _ => o.validate()?,
        }
    }
    Ok(objs)
}

fn kind_of(value: &Value) -> Result<String, ApiError> {
    let Value::Object(map) = value else {
        return Err(invalid(format!("Object 'Kind' is missing in '{}'", short(value))));
    };
    match map.get("kind") {
        Some(Value::String(k)) if !k.is_empty() => Ok(k.clone()),
        None | Some(Value::Null) => Err(invalid(format!("Object 'Kind' is missing in '{}'", short(value)))),
        Some(Value::String(_)) => Err(invalid(format!("Object 'Kind' is missing in '{}'", short(value)))),
        Some(other) => Err(invalid(format!("kind: Invalid value: {other}: must be a string"))),
    }
}

/// The object as kubectl quotes it in errors, cut so a huge request cannot make a huge message.
fn short(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

/// One object. Items of a typed list (`ServiceList`) may omit kind and apiVersion, as the
/// API server prints them.
fn parse_single(mut value: Value, list_item_kind: Option<&'static str>) -> Result<AnyObject, ApiError> {
    let kind = match (list_item_kind, &value) {
        (Some(k), Value::Object(m)) if m.get("kind").is_none_or(Value::is_null) => k.to_string(),
        _ => kind_of(&value)?,
    };
    if let Some(want) = list_item_kind {
        if kind != want {
            return Err(invalid(format!("kind: Invalid value: {}: must be {}", q(&kind), q(want))));
        }
    }
    let Some(version) = api_version_of(&kind) else {
        if kind.ends_with("List") {
            return Err(invalid(format!("kind: Invalid value: {}: a List may not hold another list", q(&kind))));
        }
        return Err(invalid(format!(
            "kind {} is not supported: nodeportd accepts Service (v1), Endpoints (v1), EndpointSlice (discovery.k8s.io/v1) and Node (v1)",
            q(&kind)
        )));
    };
    let map = value.as_object_mut().ok_or_else(|| invalid("the object must be a JSON object".into()))?;
    match map.get("apiVersion") {
        Some(Value::String(v)) if v == version => {}
        None | Some(Value::Null) if list_item_kind.is_some() => {
            map.insert("apiVersion".into(), Value::String(version.into()));
        }
        None | Some(Value::Null) => {
            return Err(invalid(format!("Object 'apiVersion' is missing in '{}'", short(&value))));
        }
        Some(Value::String(v)) => {
            return Err(invalid(format!("no matches for kind {} in version {}", q(&kind), q(v))));
        }
        Some(other) => return Err(invalid(format!("apiVersion: Invalid value: {other}: must be a string"))),
    }
    if let Some(m) = value.as_object_mut() {
        m.insert("kind".into(), Value::String(kind.clone()));
    }
    // Deserialized with the failing field's path in the message, as the API server's
    // `json: cannot unmarshal ... into Go struct field ...` does.
    let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let text = serde_json::to_string(&value).map_err(|e| invalid(e.to_string()))?;
    typed_text(&kind, &text).map_err(|e| invalid(format!("{kind} {} is invalid: {e}", q(name))))
}

/// The object of a kind nodeportd serves, decoded from its text.
fn typed_text(kind: &str, text: &str) -> Result<AnyObject, String> {
    Ok(match kind {
        "Service" => AnyObject::Service(decode_str::<Service>(text)?.compacted()),
        "Endpoints" => AnyObject::Endpoints(decode_str::<Endpoints>(text)?.compacted()),
        "Node" => AnyObject::Node(decode_str(text)?),
        _ => AnyObject::EndpointSlice(decode_str::<EndpointSlice>(text)?.compacted()),
    })
}

/// Every typed decode of an object (requests, state files, replies in nodeportctl) goes
/// through [`decode_str`], so each model type's Deserialize code is in the binary once.
/// A tree is printed and parsed again for it (into a `Vec`: cheaper than `Display`).
pub fn decode<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    decode_str(&serde_json::to_string(&value).map_err(|e| e.to_string())?)
}

/// Parses JSON text straight into `T`. A type error names the failing field's path, as
/// the API server's `json: cannot unmarshal ... into Go struct field ...` does:
/// `spec.ports[0].port: invalid type: ...` (serde_json's `at line L column C` becomes
/// the path, [`super::jsonpath`]).
pub fn decode_str<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_str(text).map_err(|e| type_error(text, &e))
}

/// [`decode_str`]'s message (not generic: once in the binary).
fn type_error(text: &str, e: &serde_json::Error) -> String {
    let msg = e.to_string();
    if e.line() == 0 {
        return msg;
    }
    let at = format!(" at line {} column {}", e.line(), e.column());
    let msg = msg.strip_suffix(&at).unwrap_or(&msg);
    let path = super::jsonpath::path_at(text, super::jsonpath::offset_of(text, e.line(), e.column()));
    format!("{path}: {msg}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fixture(name: &str) -> Value {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn fixture_text(name: &str) -> String {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The tree's way, as before the text's way existed.
    fn by_tree(text: &str) -> Result<Vec<AnyObject>, ApiError> {
        parse_object(serde_json::from_str(text).unwrap())
    }

    /// Every field of every type set, so that each one's place in the text is checked.
    fn every_field() -> Vec<Value> {
        let meta = json!({"name": "a", "namespace": "n", "uid": "u", "resourceVersion": "1", "generation": 2,
            "creationTimestamp": "2026-11-20T08:15:02Z", "labels": {"b": "1", "a": "2"}, "annotations": {"z": "", "y": "x"}});
        let port = json!({"name": "p", "protocol": "TCP", "appProtocol": "http", "port": 8080});
        vec![
            json!({"apiVersion": "v1", "kind": "Service", "metadata": meta,
                "spec": {"ports": [{"name": "h", "protocol": "TCP", "port": 80, "targetPort": "web", "nodePort": 30080, "appProtocol": "http"},
                                   {"port": 81, "targetPort": 8081}],
                    "selector": {"app": "a"}, "type": "LoadBalancer", "clusterIP": "198.19.0.1", "clusterIPs": ["198.19.0.1"],
                    "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "externalIPs": ["198.18.0.9"], "externalName": "x",
                    "externalTrafficPolicy": "Local", "internalTrafficPolicy": "Local", "healthCheckNodePort": 30999,
                    "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 60}},
                    "loadBalancerIP": "198.18.0.8", "loadBalancerSourceRanges": ["198.18.0.0/24"], "loadBalancerClass": "c",
                    "allocateLoadBalancerNodePorts": true, "publishNotReadyAddresses": false, "trafficDistribution": "PreferClose"},
                "status": {"loadBalancer": {"ingress": [{"ip": "198.18.0.7", "hostname": "h"}]}}}),
            json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": meta, "subsets": [{
                "addresses": [{"ip": "198.18.0.1", "hostname": "h", "nodeName": "n"}],
                "notReadyAddresses": [{"ip": "198.18.0.2"}], "ports": [port]}]}),
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta, "addressType": "IPv4",
                "endpoints": [{"addresses": ["198.18.0.1"], "conditions": {"ready": true, "serving": true, "terminating": false},
                    "hostname": "h", "nodeName": "n", "zone": "z"}], "ports": [port]}),
            json!({"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": {"podCIDR": "fd00::/64", "podCIDRs": ["fd00::/64"]},
                "status": {"addresses": [{"type": "InternalIP", "address": "198.18.0.1"}]}}),
        ]
    }

    /// The model's types print straight to text, in the order of their fields: that
    /// text must be the one a tree prints (keys sorted), which the store has always kept.
    #[test]
    fn objects_print_as_their_trees_print() {
        let mut docs = every_field();
        for f in ["list-server.json", "svc-loadbalancer.json", "svc-externalname.json", "endpointslice-web.json"] {
            docs.push(fixture(f));
        }
        for doc in docs {
            for obj in parse_object(doc.clone()).unwrap() {
                let text = obj.to_text();
                let tree = match &obj {
                    AnyObject::Service(o) => serde_json::to_value(o),
                    AnyObject::Endpoints(o) => serde_json::to_value(o),
                    AnyObject::EndpointSlice(o) => serde_json::to_value(o),
                    AnyObject::Node(o) => serde_json::to_value(o),
                }
                .unwrap();
                assert_eq!(text, tree.to_string(), "{doc}");
                assert_eq!(obj.to_json(), tree);
            }
        }
        // Every field is set above: nothing printed is left out of the check.
        let printed: Vec<String> = every_field().into_iter().map(|d| parse_object(d).unwrap()[0].to_text()).collect();
        for (doc, text) in every_field().iter().zip(&printed) {
            assert_eq!(&serde_json::from_str::<Value>(text).unwrap(), doc, "a field of {text} is not printed");
        }
    }

    /// kubectl's output for each kind of Service.
    const SERVICE_FIXTURES: [&str; 5] = [
        "svc-nodeport-web.json",
        "svc-clusterip-db.json",
        "svc-headless.json",
        "svc-loadbalancer.json",
        "svc-externalname.json",
    ];

    #[test]
    fn kubectl_output_is_decoded_from_its_text_as_from_a_tree() {
        let others = ["endpoints-web.json", "endpointslice-web.json", "list-server.json"];
        for f in SERVICE_FIXTURES.into_iter().chain(others) {
            let text = fixture_text(f);
            let fast = objects_of_text(&text).unwrap_or_else(|| panic!("{f}: not decoded from its text"));
            assert_eq!(fast, by_tree(&text).unwrap(), "{f}");
            // Compact, as nodeportctl sends objects.
            let compact = serde_json::from_str::<Value>(&text).unwrap().to_string();
            assert_eq!(objects_of_text(&compact).unwrap(), fast, "{f}");
        }
    }

    #[test]
    fn what_the_text_cannot_say_goes_the_trees_way_with_the_same_outcome() {
        let svc = r#""metadata":{"name":"a"},"spec":{"ports":[{"port":80}]}"#;
        let cases = [
            // The last of a repeated key wins in a tree; a typed decode refuses it.
            format!(r#"{{"apiVersion":"v1","kind":"Node","kind":"Service",{svc}}}"#),
            format!(r#"{{"apiVersion":"v1","kind":"Service",{svc},"spec":{{"ports":[{{"port":81}}]}}}}"#),
            format!(r#"{{"apiVersion":"v1","kind":"Service","apiVersion":"v2",{svc}}}"#),
            // Escapes, which only a full parse reads.
            format!(r#"{{"apiVersion":"v1","kind":"Serv\u0069ce",{svc}}}"#),
            format!(r#"{{"apiVersion":"v1","k\u0069nd":"Service",{svc}}}"#),
            // Typed lists, kind or apiVersion missing, wrong, or not strings.
            format!(r#"{{"apiVersion":"v1","kind":"ServiceList","items":[{{{svc}}}]}}"#),
            format!(r#"{{"apiVersion":"v1",{svc}}}"#),
            format!(r#"{{"kind":"Service",{svc}}}"#),
            format!(r#"{{"apiVersion":"v2","kind":"Service",{svc}}}"#),
            format!(r#"{{"apiVersion":"v1","kind":7,{svc}}}"#),
            format!(r#"{{"apiVersion":"v1","kind":"List","items":[{{"kind":"Service",{svc}}}]}}"#),
            r#"{"apiVersion":"v1","kind":"List","items":null}"#.to_string(),
            // Type errors: the tree's way names the field.
            r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":"80"}]}}"#
                .to_string(),
            r#"[1]"#.to_string(),
        ];
        for text in &cases {
            assert!(objects_of_text(text).is_none(), "{text}: decoded from its text");
            assert_eq!(parse_object_text(text), by_tree(text), "{text}");
        }
        // The same objects without the repeat are decoded from their text.
        let text =
            format!(r#"{{"apiVersion":"v1","kind":"List","items":[{{"apiVersion":"v1","kind":"Service",{svc}}}]}}"#);
        assert_eq!(objects_of_text(&text).unwrap(), by_tree(&text).unwrap());
    }

    proptest::proptest! {
        /// Any Service or EndpointSlice, with fields of any type (values valid or not),
        /// comes out of its text as out of a tree, or as the same error.
        #[test]
        fn any_object_text_parses_as_its_tree(
            kind in proptest::sample::select(vec!["Service", "EndpointSlice", "Endpoints", "Node"]),
            name in proptest::prop_oneof![proptest::strategy::Just(json!("a")), proptest::strategy::Just(json!(5)), proptest::strategy::Just(json!("B_"))],
            port in proptest::prop_oneof![proptest::strategy::Just(json!(80)), proptest::strategy::Just(json!("80")), proptest::strategy::Just(json!(70000)), proptest::strategy::Just(json!(null))],
            labels in proptest::collection::btree_map("[a-c]{1,2}", "[a-c]{0,2}", 0..3),
            list in proptest::bool::ANY,
            pretty in proptest::bool::ANY,
        ) {
            let api = api_version_of(kind).unwrap();
            let obj = json!({"apiVersion": api, "kind": kind,
                "metadata": {"name": name, "namespace": "n", "labels": labels},
                "spec": {"ports": [{"port": port}], "type": "NodePort"},
                "ports": [{"port": port}], "addressType": "IPv4",
                "endpoints": [{"addresses": ["198.18.0.1"]}],
                "subsets": [{"addresses": [{"ip": "198.18.0.1"}], "ports": [{"port": port}]}]});
            let doc = if list { json!({"apiVersion": "v1", "kind": "List", "items": [obj.clone(), obj]}) } else { obj };
            let text = if pretty { serde_json::to_string_pretty(&doc).unwrap() } else { doc.to_string() };
            // Whatever the tree's way decodes, the text's way decodes the same; what it
            // refuses, the text's way leaves to it.
            let tree = parse_object(doc);
            proptest::prop_assert_eq!(objects_of_text(&text), tree.clone().ok());
            proptest::prop_assert_eq!(parse_object_text(&text), tree);
        }
    }

    #[test]
    fn kubectl_printed_services_parse_and_validate() {
        for f in SERVICE_FIXTURES {
            let objs = parse_and_validate(fixture(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
            assert_eq!(objs.len(), 1, "{f}");
            assert_eq!(objs[0].kind(), "Service");
        }
    }

    #[test]
    fn api_server_shaped_objects_parse_and_validate() {
        let objs = parse_and_validate(fixture("list-server.json")).unwrap();
        let kinds: Vec<&str> = objs.iter().map(AnyObject::kind).collect();
        assert_eq!(kinds, ["Service", "Endpoints", "EndpointSlice"]);
        let AnyObject::Service(s) = &objs[0] else { panic!() };
        assert_eq!(s.spec.ports[0].node_port, Some(30086));
        assert_eq!(s.metadata.resource_version.as_deref(), Some("4711"));
        let AnyObject::EndpointSlice(es) = &objs[2] else { panic!() };
        assert_eq!(es.endpoints.len(), 2);
        assert_eq!(es.endpoints[1].conditions.ready, Some(false));
        parse_and_validate(fixture("endpointslice-web.json")).unwrap();
        parse_and_validate(fixture("endpoints-web.json")).unwrap();
    }

    #[test]
    fn typed_service_list_items_may_omit_kind() {
        let v = json!({"kind": "ServiceList", "apiVersion": "v1", "items": [
            {"metadata": {"name": "a"}, "spec": {"ports": [{"port": 80}]}}
        ]});
        let objs = parse_and_validate(v).unwrap();
        assert_eq!(objs[0].kind(), "Service");
    }

    #[test]
    fn unknown_kind_is_refused_by_name() {
        let e = parse_object(json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p"}})).unwrap_err();
        assert!(e.message.contains("kind \"Pod\" is not supported"), "{e}");
        let e = parse_object(json!({"kind": "List", "items": [{"kind": "Deployment", "apiVersion": "apps/v1"}]}))
            .unwrap_err();
        assert!(e.message.contains("List items[0]: kind \"Deployment\" is not supported"), "{e}");
    }

    #[test]
    fn wrong_api_version_is_refused() {
        let e = parse_object(json!({"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1beta1"})).unwrap_err();
        assert_eq!(e.message, "no matches for kind \"EndpointSlice\" in version \"discovery.k8s.io/v1beta1\"");
        let e = parse_object(json!({"kind": "Service"})).unwrap_err();
        assert!(e.message.starts_with("Object 'apiVersion' is missing"), "{e}");
    }

    #[test]
    fn missing_kind_and_non_objects() {
        assert!(parse_object(json!({"apiVersion": "v1"})).unwrap_err().message.contains("Object 'Kind' is missing"));
        assert!(parse_object(json!([1, 2])).unwrap_err().message.contains("Object 'Kind' is missing"));
        assert!(parse_object(json!({"kind": 7})).unwrap_err().message.contains("kind: Invalid value: 7"));
        let e = parse_object(json!({"kind": "List", "items": {"a": 1}})).unwrap_err();
        assert!(e.message.contains("items: Invalid value"), "{e}");
        let e = parse_object(json!({"kind": "List", "items": [{"kind": "List", "items": []}]})).unwrap_err();
        assert!(e.message.contains("may not hold another list"), "{e}");
    }

    #[test]
    fn type_errors_name_the_field_path() {
        let e = parse_object(json!({"kind": "Service", "apiVersion": "v1", "metadata": {"name": "web"},
            "spec": {"ports": [{"port": "eighty"}]}}))
        .unwrap_err();
        assert!(
            e.message.starts_with("Service \"web\" is invalid: spec.ports[0].port: invalid type: string \"eighty\""),
            "{e}"
        );
    }

    #[test]
    fn validation_runs_on_every_list_item() {
        let e = parse_and_validate(json!({"kind": "List", "apiVersion": "v1", "items": [
            {"kind": "Service", "apiVersion": "v1", "metadata": {"name": "ok"}, "spec": {"ports": [{"port": 80}]}},
            {"kind": "Service", "apiVersion": "v1", "metadata": {"name": "bad"}, "spec": {"ports": [{"port": 0}]}}
        ]}))
        .unwrap_err();
        assert!(e.message.contains("Service \"bad\" is invalid: [spec.ports[0].port: Invalid value: 0"), "{e}");
    }

    /// Every way to put a value of the wrong type (or drop a field) in the kubectl and
    /// API-server fixtures: the error that `decode_str` finds from the error's position in
    /// the text, compact and pretty-printed, reads as the one `serde_path_to_error` tracks
    /// while decoding.
    #[test]
    fn error_paths_found_from_the_text_match_the_tracked_ones() {
        fn spots(v: &Value, out: &mut Vec<Vec<String>>, here: &mut Vec<String>) {
            out.push(here.clone());
            match v {
                Value::Object(m) => m.iter().for_each(|(k, v)| {
                    here.push(k.clone());
                    spots(v, out, here);
                    here.pop();
                }),
                Value::Array(a) => a.iter().enumerate().for_each(|(i, v)| {
                    here.push(i.to_string());
                    spots(v, out, here);
                    here.pop();
                }),
                _ => {}
            }
        }
        fn at<'v>(mut v: &'v mut Value, path: &[String]) -> &'v mut Value {
            for s in path {
                v = if v.is_array() { &mut v[s.parse::<usize>().unwrap()] } else { &mut v[s.as_str()] };
            }
            v
        }
        fn check<T: DeserializeOwned + std::fmt::Debug>(v: &Value) -> usize {
            let tracked = serde_path_to_error::deserialize::<_, T>(v.clone())
                .map(|_| ())
                .map_err(|e| format!("{}: {}", e.path(), e.inner()));
            let Err(want) = tracked else { return 0 };
            for text in [v.to_string(), serde_json::to_string_pretty(v).unwrap()] {
                let got = decode_str::<T>(&text).unwrap_err();
                assert_eq!(got, want, "{text}");
            }
            1
        }
        let mut objects: Vec<Value> = [
            "svc-nodeport-web.json",
            "svc-clusterip-db.json",
            "svc-headless.json",
            "svc-loadbalancer.json",
            "svc-externalname.json",
            "endpointslice-web.json",
            "endpoints-web.json",
        ]
        .iter()
        .map(|f| fixture(f))
        .collect();
        let Value::Array(items) = fixture("list-server.json")["items"].take() else { panic!() };
        objects.extend(items);
        let mut errors = 0;
        for o in &objects {
            let mut paths = Vec::new();
            spots(o, &mut paths, &mut Vec::new());
            for path in &paths {
                let wrong = [
                    json!("x"),
                    json!(7),
                    json!(-1),
                    json!(70000),
                    json!(1.5),
                    json!(true),
                    json!(null),
                    json!({"a": 1}),
                    json!([1, "b"]),
                    json!([]),
                    json!({}),
                ];
                let mut variants: Vec<Value> = wrong
                    .iter()
                    .map(|w| {
                        let mut v = o.clone();
                        *at(&mut v, path) = w.clone();
                        v
                    })
                    .collect();
                if let Some((last, parent)) = path.split_last() {
                    let mut v = o.clone();
                    if let Value::Object(m) = at(&mut v, parent) {
                        m.remove(last);
                        variants.push(v);
                    }
                }
                for v in &variants {
                    errors += match o["kind"].as_str() {
                        Some("Service") => check::<Service>(v),
                        Some("Endpoints") => check::<Endpoints>(v),
                        _ => check::<EndpointSlice>(v),
                    };
                }
            }
        }
        // The comparison covered many failing decodes, not only passing ones.
        assert!(errors > 300, "{errors}");
    }

    #[test]
    fn empty_list_is_empty() {
        assert!(parse_object(json!({"kind": "List", "apiVersion": "v1", "items": []})).unwrap().is_empty());
    }
}
