//! The human form of the `status` result. Tolerant of missing fields (an older or newer
//! daemon), and every top-level field it does not know is still printed, so nothing the
//! daemon reports (allocation conflicts after a range change, say) is hidden.

use serde_json::Value;

const KNOWN: &[&str] =
    &["version", "node", "nodePorts", "serviceCIDRs", "dataplane", "healthChecks", "podRoutes", "cluster"];

fn text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "-".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// `30000-30085  used 1  free 85` from `{first, last, used, free}`.
fn band(v: Option<&Value>) -> String {
    let Some(b) = v.filter(|b| b.is_object()) else {
        return "-".into();
    };
    format!(
        "{}-{}  used {}  free {}",
        text(b.get("first")),
        text(b.get("last")),
        text(b.get("used")),
        text(b.get("free"))
    )
}

fn line(out: &mut String, label: &str, value: impl AsRef<str>) {
    out.push_str(&format!("{:<16}{}\n", format!("{label}:"), value.as_ref()));
}

/// `Pod routes  on, 2 installed (proto 158)`, one line per route and per skipped node.
fn pod_routes(out: &mut String, pr: Option<&Value>) {
    let Some(pr) = pr else { return };
    let routes = pr.get("routes").and_then(Value::as_array).cloned().unwrap_or_default();
    let skipped = pr.get("skipped").and_then(Value::as_array).cloned().unwrap_or_default();
    let on = pr.get("enabled").and_then(Value::as_bool) == Some(true);
    if !on && routes.is_empty() && skipped.is_empty() {
        return;
    }
    let state = if on { "on" } else { "off" };
    line(out, "Pod routes", format!("{state}, {} installed (proto {})", routes.len(), text(pr.get("protocol"))));
    for r in &routes {
        let f = |k: &str| text(r.get(k));
        line(out, "  route", format!("{} via {} dev {} (node {})", f("cidr"), f("via"), f("dev"), f("node")));
    }
    for r in &skipped {
        let cidr = r.get("cidr").map(|c| format!(" {}", text(Some(c)))).unwrap_or_default();
        line(out, "  skipped", format!("node {}{cidr}: {}", text(r.get("node")), text(r.get("reason"))));
    }
    if let Some(e) = pr.get("lastError").filter(|e| !e.is_null()) {
        line(out, "  last error", text(Some(e)));
    }
}

pub fn status_text(s: &Value) -> String {
    let mut out = String::new();
    line(&mut out, "Version", text(s.get("version")));
    let node = s.get("node");
    line(&mut out, "Node", text(node.and_then(|n| n.get("name"))));
    let addrs: Vec<String> = node
        .and_then(|n| n.get("addresses"))
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|x| text(Some(x))).collect())
        .unwrap_or_default();
    line(&mut out, "Addresses", if addrs.is_empty() { "<none>".to_string() } else { addrs.join(", ") });

    let np = s.get("nodePorts");
    line(&mut out, "NodePorts", text(np.and_then(|n| n.get("range"))));
    line(&mut out, "  static", band(np.and_then(|n| n.get("static"))));
    line(&mut out, "  dynamic", band(np.and_then(|n| n.get("dynamic"))));

    for cidr in s.get("serviceCIDRs").and_then(Value::as_array).into_iter().flatten() {
        let name = ["cidr", "range", "prefix"].iter().find_map(|k| cidr.get(*k)).map(|v| text(Some(v)));
        line(&mut out, "ServiceCIDR", name.unwrap_or_else(|| "-".into()));
        line(&mut out, "  static", band(cidr.get("static")));
        line(&mut out, "  dynamic", band(cidr.get("dynamic")));
    }

    if let Some(dp) = s.get("dataplane") {
        let sync = match dp.get("inSync").and_then(Value::as_bool) {
            Some(true) => "in sync",
            Some(false) => "NOT in sync",
            None => "sync state unknown",
        };
        line(
            &mut out,
            "Dataplane",
            format!(
                "table {}, {sync}, generation {}, last sync {} ms",
                text(dp.get("table")),
                text(dp.get("generation")),
                text(dp.get("lastSyncMillis"))
            ),
        );
        if let Some(e) = dp.get("lastError").filter(|e| !e.is_null()) {
            line(&mut out, "  last error", text(Some(e)));
        }
        for c in dp.get("conflicts").and_then(Value::as_array).into_iter().flatten() {
            line(&mut out, "  conflict", text(Some(c)));
        }
    }

    health_checks(&mut out, s.get("healthChecks"));
    cluster(&mut out, s.get("cluster"));
    pod_routes(&mut out, s.get("podRoutes"));

    if let Some(map) = s.as_object() {
        for (k, v) in map.iter().filter(|(k, _)| !KNOWN.contains(&k.as_str())) {
            let value = match v {
                Value::Object(o) => {
                    o.iter().map(|(k, v)| format!("{k}={}", text(Some(v)))).collect::<Vec<_>>().join(" ")
                }
                other => text(Some(other)),
            };
            line(&mut out, k, value);
        }
    }
    out
}

/// Cluster mode: the server, connected or not, what is mirrored, the last error and
/// every object that could not be mirrored.
fn cluster(out: &mut String, v: Option<&Value>) {
    let Some(c) = v.filter(|c| c.is_object()) else {
        return;
    };
    let state = match c.get("connected").and_then(Value::as_bool) {
        Some(true) => "connected",
        Some(false) => "NOT connected",
        None => "state unknown",
    };
    line(
        out,
        "Cluster",
        format!(
            "{} {state}, resourceVersion {}, {} objects mirrored",
            text(c.get("server")),
            text(c.get("resourceVersion")),
            text(c.get("objects"))
        ),
    );
    if let Some(e) = c.get("lastError").filter(|e| !e.is_null()) {
        line(out, "  last error", text(Some(e)));
    }
    for k in c.get("conflicts").and_then(Value::as_array).into_iter().flatten() {
        line(out, "  not mirrored", format!("{}: {}", text(k.get("object")), text(k.get("message"))));
    }
}

/// One line per `healthCheckNodePort`: whom it answers for, and whether it listens.
fn health_checks(out: &mut String, v: Option<&Value>) {
    let Some(list) = v.and_then(Value::as_array).filter(|l| !l.is_empty()) else {
        return;
    };
    let listening = list.iter().filter(|h| h.get("listening").and_then(Value::as_bool) == Some(true)).count();
    line(out, "HealthChecks", format!("{} ports, {listening} listening", list.len()));
    for h in list {
        let state = match (h.get("listening").and_then(Value::as_bool), h.get("error").filter(|e| !e.is_null())) {
            (_, Some(e)) => format!("NOT listening: {}", text(Some(e))),
            (Some(true), None) => "listening".to_string(),
            _ => "not listening".to_string(),
        };
        line(
            out,
            &format!("  {}", text(h.get("port"))),
            format!(
                "{}/{}, local endpoints {}, {state}",
                text(h.get("namespace")),
                text(h.get("name")),
                text(h.get("localEndpoints"))
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn full_status_reads_as_a_summary() {
        let s = json!({
            "version": "0.1.0",
            "node": {"name": "edge-1", "addresses": ["198.18.0.1", "2001:db8::1"]},
            "nodePorts": {"range": "30000-32767",
                "static": {"first": 30000, "last": 30085, "used": 1, "free": 85},
                "dynamic": {"first": 30086, "last": 32767, "used": 3, "free": 2679}},
            "serviceCIDRs": [{"cidr": "10.96.0.0/16",
                "static": {"first": "10.96.0.1", "last": "10.96.1.0", "used": 1, "free": 255},
                "dynamic": {"first": "10.96.1.1", "last": "10.96.255.254", "used": 2, "free": 65276}}],
            "dataplane": {"table": "inet nodeportd", "inSync": false, "generation": 7, "lastSyncMillis": 3,
                "lastError": "netlink: EPERM"},
            "healthChecks": [
                {"port": 32000, "namespace": "edge", "name": "ingress", "localEndpoints": 1,
                    "listening": true, "error": null},
                {"port": 32001, "namespace": "default", "name": "web", "localEndpoints": 0,
                    "listening": false, "error": "Address in use (os error 98)"}],
            "objects": {"services": 3, "endpoints": 2}
        });
        let t = status_text(&s);
        let want = "\
Version:        0.1.0
Node:           edge-1
Addresses:      198.18.0.1, 2001:db8::1
NodePorts:      30000-32767
  static:       30000-30085  used 1  free 85
  dynamic:      30086-32767  used 3  free 2679
ServiceCIDR:    10.96.0.0/16
  static:       10.96.0.1-10.96.1.0  used 1  free 255
  dynamic:      10.96.1.1-10.96.255.254  used 2  free 65276
Dataplane:      table inet nodeportd, NOT in sync, generation 7, last sync 3 ms
  last error:   netlink: EPERM
HealthChecks:   2 ports, 1 listening
  32000:        edge/ingress, local endpoints 1, listening
  32001:        default/web, local endpoints 0, NOT listening: Address in use (os error 98)
objects:        endpoints=2 services=3
";
        assert_eq!(t, want);
    }

    #[test]
    fn sparse_status_does_not_fail() {
        let t = status_text(&json!({"version": "0.1.0"}));
        assert!(t.contains("Node:           -"));
        assert!(t.contains("Addresses:      <none>"));
    }

    #[test]
    fn cluster_mode_is_summarised() {
        let s = json!({"cluster": {"server": "https://198.18.0.1:6443", "connected": false, "resourceVersion": "812",
            "objects": 6, "lastError": "services: HTTP 401 Unauthorized",
            "conflicts": [{"object": "Service default/mine", "message": "exists as a local object"}]}});
        let t = status_text(&s);
        assert!(
            t.contains(
                "Cluster:        https://198.18.0.1:6443 NOT connected, resourceVersion 812, 6 objects mirrored"
            ),
            "{t}"
        );
        assert!(t.contains("  last error:   services: HTTP 401 Unauthorized"), "{t}");
        assert!(t.contains("  not mirrored: Service default/mine: exists as a local object"), "{t}");
        assert!(!status_text(&json!({"cluster": null})).contains("Cluster"));
    }
}
