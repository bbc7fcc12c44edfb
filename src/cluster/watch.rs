//! What list and watch mean for the mirror, without I/O: the request paths, the watch
//! event lines, which objects kube-proxy would skip, the relist difference, and the
//! reconnect backoff.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;

use super::http::encode_query_value;

/// The label kube-proxy skips Services (and their slices) by: another proxy serves them.
pub const PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// The label the EndpointSlice controller puts on a headless Service's slices.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// Objects per list page.
pub const PAGE: u32 = 500;

/// A kind the mirror follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    Services,
    EndpointSlices,
    /// Cluster-scoped: one stream whatever the namespaces (pod routes follow them).
    Nodes,
}

impl Resource {
    pub const ALL: [Resource; 3] = [Resource::Services, Resource::EndpointSlices, Resource::Nodes];

    pub fn name(self) -> &'static str {
        match self {
            Resource::Services => "services",
            Resource::EndpointSlices => "endpointslices",
            Resource::Nodes => "nodes",
        }
    }

    pub fn namespaced(self) -> bool {
        self != Resource::Nodes
    }

    /// The collection's path, cluster-wide or in one namespace.
    pub fn path(self, namespace: Option<&str>) -> String {
        let (group, plural) = match self {
            Resource::Services => ("/api/v1", "services"),
            Resource::EndpointSlices => ("/apis/discovery.k8s.io/v1", "endpointslices"),
            Resource::Nodes => ("/api/v1", "nodes"),
        };
        match namespace.filter(|_| self.namespaced()) {
            Some(ns) => format!("{group}/namespaces/{}/{plural}", encode_query_value(ns)),
            None => format!("{group}/{plural}"),
        }
    }

    /// The server-side label selector: kube-proxy's (no other proxy's objects, no
    /// headless slices) plus the operator's for Services.
    pub fn selector(self, user: Option<&str>) -> String {
        if self == Resource::Nodes {
            return String::new();
        }
        let mut s = format!("!{PROXY_NAME_LABEL},!{HEADLESS_LABEL}");
        if let (Resource::Services, Some(u)) = (self, user.map(str::trim).filter(|u| !u.is_empty())) {
            s.push(',');
            s.push_str(u);
        }
        s
    }
}

/// One list/watch stream: a kind, cluster-wide or in one namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stream {
    pub resource: Resource,
    pub namespace: Option<String>,
}

impl Stream {
    /// The streams a config asks for: every kind, per namespace (or cluster-wide).
    pub fn all(namespaces: &[String]) -> Vec<Stream> {
        let mut out = Vec::new();
        for r in Resource::ALL {
            if namespaces.is_empty() || !r.namespaced() {
                out.push(Stream { resource: r, namespace: None });
            }
            for ns in namespaces.iter().filter(|_| r.namespaced()) {
                out.push(Stream { resource: r, namespace: Some(ns.clone()) });
            }
        }
        out
    }

    /// Whether a mirrored object in `ns` belongs to this stream.
    pub fn covers(&self, ns: &str) -> bool {
        !self.resource.namespaced() || self.namespace.as_deref().is_none_or(|n| n == ns)
    }

    /// A page of the list (`cont` is the previous page's `metadata.continue`).
    pub fn list_path(&self, selector: Option<&str>, cont: Option<&str>) -> String {
        let mut p = format!("{}?limit={PAGE}", self.resource.path(self.namespace.as_deref()));
        let sel = self.resource.selector(selector);
        if !sel.is_empty() {
            p.push_str("&labelSelector=");
            p.push_str(&encode_query_value(&sel));
        }
        if let Some(c) = cont.filter(|c| !c.is_empty()) {
            p.push_str("&continue=");
            p.push_str(&encode_query_value(c));
        }
        p
    }

    /// A watch from `rv`, with bookmarks, ended by the server after `timeout_seconds`.
    pub fn watch_path(&self, selector: Option<&str>, rv: &str, timeout_seconds: u32) -> String {
        let mut p = format!(
            "{}?watch=1&allowWatchBookmarks=true&resourceVersion={}&timeoutSeconds={timeout_seconds}",
            self.resource.path(self.namespace.as_deref()),
            encode_query_value(rv)
        );
        let sel = self.resource.selector(selector);
        if !sel.is_empty() {
            p.push_str("&labelSelector=");
            p.push_str(&encode_query_value(&sel));
        }
        p
    }

    pub fn describe(&self) -> String {
        match self.namespace.as_ref().filter(|_| self.resource.namespaced()) {
            Some(ns) => format!("{} in {ns}", self.resource.name()),
            None => self.resource.name().to_string(),
        }
    }
}

/// One line of a watch stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// ADDED or MODIFIED: the object as it is now.
    Put(Value),
    Deleted(Value),
    /// Nothing changed up to this resourceVersion.
    Bookmark(String),
    /// The server ended the watch with a Status (code 410: relist).
    Error {
        code: i64,
        message: String,
    },
}

/// Decodes a watch event line (`{"type": ..., "object": ...}`).
pub fn decode_event(line: &[u8]) -> Result<Event, String> {
    let v: Value = serde_json::from_slice(line).map_err(|e| format!("watch event is not JSON: {e}"))?;
    let kind = v.get("type").and_then(Value::as_str).ok_or("watch event without a type")?.to_string();
    let Some(obj) = v.get("object").filter(|o| o.is_object()) else {
        return Err(format!("{kind} watch event without an object"));
    };
    Ok(match kind.as_str() {
        "ADDED" | "MODIFIED" => Event::Put(obj.clone()),
        "DELETED" => Event::Deleted(obj.clone()),
        "BOOKMARK" => Event::Bookmark(resource_version(obj).ok_or("BOOKMARK without a resourceVersion")?),
        "ERROR" => Event::Error {
            code: obj.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: obj.get("message").and_then(Value::as_str).unwrap_or("").to_string(),
        },
        other => return Err(format!("unknown watch event type {other:?}")),
    })
}

/// `metadata.resourceVersion`.
pub fn resource_version(obj: &Value) -> Option<String> {
    obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_string)
}

/// (namespace, name) of an object ("" for a cluster-scoped kind, "default" when a
/// namespaced object has none).
pub fn key_of(resource: Resource, obj: &Value) -> Option<(String, String)> {
    let name = obj.pointer("/metadata/name").and_then(Value::as_str).filter(|n| !n.is_empty())?;
    if !resource.namespaced() {
        return Some((String::new(), name.to_string()));
    }
    let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str).filter(|n| !n.is_empty()).unwrap_or("default");
    Some((ns.to_string(), name.to_string()))
}

/// Why kube-proxy would not program this object (None: mirror it).
pub fn skip_reason(resource: Resource, obj: &Value) -> Option<&'static str> {
    let labels = obj.pointer("/metadata/labels");
    let has = |l: &str| labels.and_then(|m| m.get(l)).is_some();
    if has(PROXY_NAME_LABEL) {
        return Some("labelled service.kubernetes.io/service-proxy-name (served by another proxy)");
    }
    match resource {
        Resource::Services => {
            if obj.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName") {
                return Some("type ExternalName");
            }
            if obj.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None") {
                return Some("headless (clusterIP None)");
            }
            None
        }
        Resource::EndpointSlices => {
            if has(HEADLESS_LABEL) {
                return Some("the slice of a headless Service");
            }
            if obj.get("addressType").and_then(Value::as_str) == Some("FQDN") {
                return Some("addressType FQDN");
            }
            None
        }
        Resource::Nodes => None,
    }
}

/// A change the mirror asks of the registry.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Apply(Value),
    Delete(String, String),
}

/// What a relist changes: every listed object that is not skipped is applied (the
/// registry reports the unchanged ones as such), every mirrored object of the stream
/// the list no longer holds (or now skips) is deleted.
pub fn relist(stream: &Stream, mirrored: &BTreeSet<crate::model::Key>, listed: Vec<Value>) -> Vec<Change> {
    let mut keep = BTreeSet::new();
    let mut out = Vec::new();
    for obj in listed {
        let Some(key) = key_of(stream.resource, &obj) else { continue };
        if skip_reason(stream.resource, &obj).is_some() || !stream.covers(&key.0) {
            continue;
        }
        keep.insert(key);
        out.push(Change::Apply(obj));
    }
    for crate::model::Key(ns, name) in mirrored {
        if stream.covers(ns) && !keep.contains(&(ns.clone(), name.clone())) {
            out.push(Change::Delete(ns.clone(), name.clone()));
        }
    }
    out
}

/// What one watch event changes: a skipped object is removed if it was mirrored.
pub fn event_change(stream: &Stream, mirrored: bool, ev: &Event) -> Option<Change> {
    match ev {
        Event::Put(obj) => {
            let key = key_of(stream.resource, obj)?;
            if skip_reason(stream.resource, obj).is_none() {
                Some(Change::Apply(obj.clone()))
            } else if mirrored {
                Some(Change::Delete(key.0, key.1))
            } else {
                None
            }
        }
        Event::Deleted(obj) => {
            let key = key_of(stream.resource, obj)?;
            mirrored.then_some(Change::Delete(key.0, key.1))
        }
        Event::Bookmark(_) | Event::Error { .. } => None,
    }
}

/// The wait before reconnection attempt `attempt` (0 = the first retry): 0.5 s doubling
/// to at most 4 s, the upper half randomised by `jitter` (0..=u64::MAX), so a fleet of
/// routers does not reconnect in step. The cap is low on purpose: a router must be back
/// in step within 5 s of the API server's return (issue 16); one list per stream every
/// 2-4 s from a router is no load for an API server.
pub fn backoff(attempt: u32, jitter: u64) -> Duration {
    let base_ms: u64 = 500u64.saturating_mul(1u64 << attempt.min(16)).min(4_000);
    let half = base_ms / 2;
    Duration::from_millis(half + jitter % (half + 1))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn svc(ns: &str, name: &str) -> Value {
        json!({"kind": "Service", "metadata": {"namespace": ns, "name": name, "resourceVersion": "7"},
               "spec": {"ports": [{"port": 80}]}})
    }

    #[test]
    fn paths_and_queries() {
        let all = Stream { resource: Resource::Services, namespace: None };
        assert_eq!(
            all.list_path(Some("app=web"), None),
            "/api/v1/services?limit=500&labelSelector=%21service.kubernetes.io%2Fservice-proxy-name%2C%21service.kubernetes.io%2Fheadless%2Capp%3Dweb"
        );
        let ns = Stream { resource: Resource::EndpointSlices, namespace: Some("shop".into()) };
        let p = ns.list_path(Some("app=web"), Some("tok=="));
        assert!(p.starts_with("/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices?limit=500&"), "{p}");
        assert!(p.ends_with("&continue=tok%3D%3D") && !p.contains("app%3Dweb"), "slices ignore the user selector: {p}");
        let w = ns.watch_path(None, "123", 290);
        assert!(w.contains("?watch=1&allowWatchBookmarks=true&resourceVersion=123&timeoutSeconds=290&"), "{w}");
    }

    #[test]
    fn streams_per_namespace() {
        assert_eq!(Stream::all(&[]).len(), 3);
        let s = Stream::all(&["a".into(), "b".into()]);
        assert_eq!(s.len(), 5, "Nodes are cluster-scoped: one stream");
        assert_eq!(s[4], Stream { resource: Resource::Nodes, namespace: None });
        assert!(s[4].covers(""));
        let nodes = Stream { resource: Resource::Nodes, namespace: Some("a".into()) };
        assert_eq!(nodes.list_path(Some("x=y"), None), "/api/v1/nodes?limit=500");
        assert_eq!(
            nodes.watch_path(None, "5", 60),
            "/api/v1/nodes?watch=1&allowWatchBookmarks=true&resourceVersion=5&timeoutSeconds=60"
        );
        let node = serde_json::json!({"metadata": {"name": "n1"}});
        assert_eq!(key_of(Resource::Nodes, &node), Some((String::new(), "n1".into())));
        assert_eq!(key_of(Resource::Services, &node), Some(("default".into(), "n1".into())));
        let mirrored: BTreeSet<crate::model::Key> =
            [crate::model::Key::new("", "n1"), crate::model::Key::new("", "gone")].into();
        assert_eq!(
            relist(&nodes, &mirrored, vec![node.clone()]),
            vec![Change::Apply(node), Change::Delete(String::new(), "gone".into())]
        );
        assert!(s[0].covers("a") && !s[0].covers("b"));
        assert!(Stream::all(&[])[0].covers("anything"));
    }

    #[test]
    fn events_decode() {
        let put = decode_event(br#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#).unwrap();
        assert!(matches!(put, Event::Put(_)));
        assert!(matches!(decode_event(br#"{"type":"MODIFIED","object":{}}"#).unwrap(), Event::Put(_)));
        assert!(matches!(decode_event(br#"{"type":"DELETED","object":{}}"#).unwrap(), Event::Deleted(_)));
        assert_eq!(
            decode_event(br#"{"type":"BOOKMARK","object":{"kind":"Service","metadata":{"resourceVersion":"42"}}}"#)
                .unwrap(),
            Event::Bookmark("42".into())
        );
        assert_eq!(
            decode_event(br#"{"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old resource version: 1 (5)"}}"#)
                .unwrap(),
            Event::Error { code: 410, message: "too old resource version: 1 (5)".into() }
        );
        for bad in [
            &b"{"[..],
            br#"{"object":{}}"#,
            br#"{"type":"ADDED"}"#,
            br#"{"type":"ADDED","object":3}"#,
            br#"{"type":"BOOKMARK","object":{}}"#,
            br#"{"type":"SYNC","object":{}}"#,
        ] {
            assert!(decode_event(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn kube_proxy_skips() {
        let r = Resource::Services;
        assert_eq!(skip_reason(r, &svc("a", "b")), None);
        let mut s = svc("a", "b");
        s["metadata"]["labels"] = json!({PROXY_NAME_LABEL: "other"});
        assert!(skip_reason(r, &s).is_some());
        let mut s = svc("a", "b");
        s["spec"]["clusterIP"] = json!("None");
        assert!(skip_reason(r, &s).unwrap().contains("headless"));
        let mut s = svc("a", "b");
        s["spec"]["type"] = json!("ExternalName");
        assert!(skip_reason(r, &s).unwrap().contains("ExternalName"));
        let slice = json!({"metadata": {"name": "x", "labels": {HEADLESS_LABEL: ""}}, "addressType": "IPv4"});
        assert!(skip_reason(Resource::EndpointSlices, &slice).is_some());
        let fqdn = json!({"metadata": {"name": "x"}, "addressType": "FQDN"});
        assert!(skip_reason(Resource::EndpointSlices, &fqdn).is_some());
    }

    #[test]
    fn relist_replaces_the_stream_and_only_it() {
        let stream = Stream { resource: Resource::Services, namespace: Some("a".into()) };
        let mirrored: BTreeSet<crate::model::Key> =
            [("a", "keep"), ("a", "gone"), ("a", "now-headless"), ("b", "other-ns")]
                .iter()
                .map(|(n, m)| crate::model::Key::new(n, m))
                .collect();
        let mut headless = svc("a", "now-headless");
        headless["spec"]["clusterIP"] = json!("None");
        let changes = relist(&stream, &mirrored, vec![svc("a", "keep"), svc("a", "new"), headless]);
        assert_eq!(
            changes,
            vec![
                Change::Apply(svc("a", "keep")),
                Change::Apply(svc("a", "new")),
                Change::Delete("a".into(), "gone".into()),
                Change::Delete("a".into(), "now-headless".into()),
            ]
        );
    }

    #[test]
    fn event_changes() {
        let s = Stream { resource: Resource::Services, namespace: None };
        assert_eq!(event_change(&s, false, &Event::Put(svc("a", "b"))), Some(Change::Apply(svc("a", "b"))));
        let mut ext = svc("a", "b");
        ext["spec"]["type"] = json!("ExternalName");
        assert_eq!(event_change(&s, true, &Event::Put(ext.clone())), Some(Change::Delete("a".into(), "b".into())));
        assert_eq!(event_change(&s, false, &Event::Put(ext)), None);
        assert_eq!(event_change(&s, false, &Event::Deleted(svc("a", "b"))), None);
        assert_eq!(
            event_change(&s, true, &Event::Deleted(svc("a", "b"))),
            Some(Change::Delete("a".into(), "b".into()))
        );
        assert_eq!(event_change(&s, true, &Event::Bookmark("1".into())), None);
    }

    #[test]
    fn backoff_doubles_to_a_cap_with_jitter_in_the_upper_half() {
        assert_eq!(backoff(0, 0), Duration::from_millis(250));
        assert_eq!(backoff(0, 250), Duration::from_millis(500));
        assert_eq!(backoff(1, 0), Duration::from_millis(500));
        assert_eq!(backoff(3, u64::MAX), Duration::from_millis(2000 + u64::MAX % 2001));
        for a in [4, 7, 20, u32::MAX] {
            assert!(backoff(a, 0) == Duration::from_millis(2_000) && backoff(a, u64::MAX) <= Duration::from_secs(4));
        }
        let spread: BTreeSet<Duration> =
            (0..100u64).map(|j| backoff(4, j.wrapping_mul(0x9E37_79B9_7F4A_7C15))).collect();
        assert!(spread.len() > 50, "jitter spreads the retries: {}", spread.len());
    }
}
