//! Cluster mode against a stand-in API server (tests/standin/apiserver.rs): the real
//! daemon (in --dry-run, no privileges) lists and watches Services and EndpointSlices
//! over TLS with the test CA, through 410 Gone, bookmarks, dropped connections, a slow
//! server, token rotation and bad credentials.

#![cfg(feature = "cluster")]

#[path = "standin/apiserver.rs"]
mod apiserver;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use apiserver::{fixture, node, service, slice, ApiServer, Res};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_nodeportd");

struct Daemon {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn token_file(dir: &Path, token: &str) -> PathBuf {
    let p = dir.join("token");
    std::fs::write(&p, token).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

fn config(dir: &Path, cluster: &str) {
    std::fs::write(
        dir.join("nodeportd.toml"),
        format!(
            "node_name = \"edge-1\"\nnodeport_addresses = [\"127.0.0.0/8\"]\nubus = \"off\"\n\n[cluster]\n{cluster}watch_timeout_seconds = 5\nrequest_timeout_seconds = 5\n"
        ),
    )
    .unwrap();
}

fn cluster_token(api: &ApiServer, token: &Path) -> String {
    format!(
        "server = \"{}\"\nca_file = \"{}\"\ntoken_file = \"{}\"\n",
        api.url(),
        fixture("ca.crt").display(),
        token.display()
    )
}

fn start(dir: tempfile::TempDir) -> Daemon {
    let socket = dir.path().join("sock");
    let child = Command::new(BIN)
        .args(["--dry-run", "--config"])
        .arg(dir.path().join("nodeportd.toml"))
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nodeportd");
    let deadline = Instant::now() + Duration::from_secs(10);
    while UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "daemon did not open {}", socket.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    Daemon { child, socket, _dir: dir }
}

impl Daemon {
    fn call(&self, method: &str, params: Value) -> Value {
        let mut s = UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let req = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        s.write_all(format!("{req}\n").as_bytes()).unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        serde_json::from_str(out.lines().next().unwrap()).unwrap()
    }

    fn status(&self) -> Value {
        self.call("status", json!({}))["result"]["cluster"].clone()
    }

    fn services(&self) -> Vec<String> {
        let r = self.call("service.list", json!({}));
        r["result"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                format!("{}/{}", s["metadata"]["namespace"].as_str().unwrap(), s["metadata"]["name"].as_str().unwrap())
            })
            .collect()
    }

    fn service(&self, ns: &str, name: &str) -> Value {
        self.call("service.get", json!({"namespace": ns, "name": name}))
    }

    fn slice_ips(&self, ns: &str, name: &str) -> Vec<String> {
        let r = self.call("endpoints.get", json!({"namespace": ns, "name": name, "kind": "EndpointSlice"}));
        r["result"]["object"]["endpoints"]
            .as_array()
            .map(|a| a.iter().map(|e| e["addresses"][0].as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    }

    /// Waits until `cond` holds on the daemon, or fails naming `what` with the last status.
    fn wait(&self, what: &str, secs: u64, cond: impl Fn(&Daemon) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !cond(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}; cluster status: {}", self.status());
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A world with what kube-proxy programs and what it skips.
fn populate(api: &ApiServer) {
    api.put(Res::Services, service("default", "web", "10.96.0.10", 80, Some(30080)));
    api.put(Res::Slices, slice("default", "web", &["198.18.1.1", "198.18.1.2"], true));
    api.put(Res::Services, service("shop", "db", "10.96.0.20", 5432, None));
    api.put(Res::Slices, slice("shop", "db", &["198.18.1.3"], true));
    let mut headless = service("default", "headless", "None", 80, None);
    headless["spec"]["clusterIPs"] = json!(["None"]);
    api.put(Res::Services, headless);
    let mut hs = slice("default", "headless", &["198.18.1.9"], true);
    hs["metadata"]["labels"]["service.kubernetes.io/headless"] = json!("");
    api.put(Res::Slices, hs);
    let mut ext = service("default", "ext", "", 80, None);
    ext["spec"] = json!({"type": "ExternalName", "externalName": "example.com"});
    api.put(Res::Services, ext);
    let mut other = service("default", "other-proxy", "10.96.0.30", 80, None);
    other["metadata"]["labels"] = json!({"service.kubernetes.io/service-proxy-name": "cilium"});
    api.put(Res::Services, other);
    api.put(Res::Nodes, node("node-1", "198.18.0.11", "10.244.1.0/24"));
    api.put(Res::Nodes, node("node-2", "198.18.0.12", "10.244.2.0/24"));
}

#[test]
fn mirrors_services_and_slices_and_follows_changes() {
    let api = ApiServer::start(Some("secret-1"));
    populate(&api);
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "secret-1\n");
    config(dir.path(), &cluster_token(&api, &token));
    let d = start(dir);
    d.wait("connected with 2 services, 2 slices and 2 nodes", 10, |d| {
        let s = d.status();
        s["connected"] == json!(true) && s["mirrored"] == json!({"services": 2, "endpointSlices": 2, "nodes": 2})
    });
    assert_eq!(d.services(), names(&["default/web", "shop/db"]), "headless, ExternalName and other-proxy skipped");
    let web = &d.service("default", "web")["result"]["object"];
    assert_eq!(web["spec"]["ports"][0]["nodePort"], json!(30080), "the cluster's nodePort is kept: {web}");
    assert_eq!(web["spec"]["clusterIP"], json!("10.96.0.10"));
    assert_eq!(web["metadata"]["annotations"]["nodeportd.io/owner"], json!("cluster"));
    assert_eq!(d.status()["objects"], json!(6));
    let n1 = &d.call("node.get", json!({"name": "node-1"}))["result"]["object"];
    assert_eq!(n1["spec"]["podCIDR"], json!("10.244.1.0/24"), "{n1}");
    assert_eq!(n1["metadata"]["annotations"]["nodeportd.io/owner"], json!("cluster"));
    api.delete(Res::Nodes, "default", "node-2");
    api.put(Res::Nodes, node("node-1", "198.18.0.11", "10.244.7.0/24"));
    d.wait("node-2 gone, node-1 moved", 5, |d| {
        d.call("node.get", json!({"name": "node-2"}))["error"].is_object()
            && d.call("node.get", json!({"name": "node-1"}))["result"]["object"]["spec"]["podCIDR"]
                == json!("10.244.7.0/24")
    });
    let r = d.call("node.delete", json!({"name": "node-1"}));
    assert!(r["error"]["message"].as_str().unwrap_or_default().contains("Node node-1 is owned by the cluster"), "{r}");
    let reqs = api.requests();
    assert!(reqs.iter().all(|r| r.contains("auth=secret-1")), "{reqs:?}");
    assert!(
        reqs.iter().any(|r| r.contains("watch=1&allowWatchBookmarks=true&resourceVersion=")),
        "watches with bookmarks: {reqs:?}"
    );

    // Watch: create, change, delete.
    api.put(Res::Services, service("default", "api", "10.96.0.40", 8443, None));
    api.put(Res::Slices, slice("default", "web", &["198.18.1.5"], true));
    api.delete(Res::Services, "shop", "db");
    d.wait("api added, db deleted, web's slice changed", 5, |d| {
        d.services() == names(&["default/api", "default/web"]) && d.slice_ips("default", "web-abcde") == ["198.18.1.5"]
    });
    // A Service turning headless leaves the mirror.
    let mut h = service("default", "api", "None", 8443, None);
    h["spec"]["clusterIPs"] = json!(["None"]);
    api.put(Res::Services, h);
    d.wait("api gone once headless", 5, |d| d.services() == names(&["default/web"]));

    // Ownership: a local client cannot change or delete the cluster's objects.
    let mut local_web = service("default", "web", "10.96.0.10", 80, Some(30080));
    local_web["kind"] = json!("Service");
    local_web["apiVersion"] = json!("v1");
    local_web["metadata"] = json!({"name": "web", "namespace": "default"});
    let r = d.call("service.apply", json!({"object": local_web}));
    let msg = r["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(msg.contains("default/web") && msg.contains("owned by the cluster"), "{r}");
    let r = d.call("service.delete", json!({"namespace": "default", "name": "web"}));
    assert!(r["error"]["message"].as_str().unwrap_or_default().contains("owned by the cluster"), "{r}");
    let mut forged = service("default", "forged", "", 80, None);
    forged["kind"] = json!("Service");
    forged["apiVersion"] = json!("v1");
    forged["metadata"] = json!({"name": "forged", "annotations": {"nodeportd.io/owner": "cluster"}});
    forged["spec"] = json!({"ports": [{"port": 80}]});
    let r = d.call("service.apply", json!({"object": forged}));
    assert!(r["error"]["message"].as_str().unwrap_or_default().contains("reserved for cluster mode"), "{r}");

    // A local object stays; the cluster's namesake is a conflict shown in status.
    let local = json!({"kind": "Service", "apiVersion": "v1", "metadata": {"name": "mine", "namespace": "default"},
                       "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 30090}]}});
    assert!(d.call("service.apply", json!({"object": local}))["result"].is_object());
    api.put(Res::Services, service("default", "mine", "10.96.0.50", 80, None));
    // The nodePort a local object holds, asked for by the cluster.
    api.put(Res::Services, service("default", "clash", "10.96.0.60", 80, Some(30090)));
    d.wait("two conflicts", 5, |d| d.status()["conflicts"].as_array().is_some_and(|c| c.len() == 2));
    let conflicts = d.status()["conflicts"].to_string();
    assert!(conflicts.contains("Service default/mine") && conflicts.contains("local object"), "{conflicts}");
    assert!(conflicts.contains("Service default/clash") && conflicts.contains("30090"), "{conflicts}");
    let mine = &d.service("default", "mine")["result"]["object"];
    assert!(mine["metadata"].get("annotations").is_none(), "the local object is untouched: {mine}");
    assert_eq!(mine["spec"]["ports"][0]["nodePort"], json!(30090));
    // The cluster deleting its namesake leaves the local object alone.
    api.delete(Res::Services, "default", "mine");
    api.delete(Res::Services, "default", "clash");
    d.wait("conflicts cleared", 5, |d| d.status()["conflicts"] == json!([]));
    assert!(d.service("default", "mine")["result"].is_object(), "local object kept");
}

fn relist_after_gone(as_event: bool) {
    let api = ApiServer::start(Some("t"));
    api.with(|w| w.gone_as_event = as_event);
    populate(&api);
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "t");
    config(dir.path(), &cluster_token(&api, &token));
    let d = start(dir);
    d.wait("connected", 10, |d| d.status()["connected"] == json!(true) && d.services().len() == 2);
    let web_rv = d.service("default", "web")["result"]["object"]["metadata"]["resourceVersion"].clone();
    let relists = d.status()["relists"].as_u64().unwrap();

    // The server goes away; meanwhile db is deleted and a Service added, and the history
    // is compacted: the delete is never seen as an event.
    api.with(|w| w.down = true);
    d.wait("the loss seen", 10, |d| d.status()["connected"] == json!(false));
    assert!(d.status()["lastError"].is_string());
    api.delete(Res::Services, "shop", "db");
    api.delete(Res::Slices, "shop", "db-abcde");
    api.put(Res::Services, service("default", "new", "10.96.0.70", 80, None));
    api.compact();
    api.with(|w| w.down = false);
    // The two streams relist independently: wait for both (the Services and the slice).
    d.wait("relisted and pruned", 15, |d| {
        d.status()["connected"] == json!(true)
            && d.services() == names(&["default/new", "default/web"])
            && d.slice_ips("shop", "db-abcde").is_empty()
    });
    assert!(d.status()["relists"].as_u64().unwrap() >= relists + 2, "both streams relisted: {}", d.status());
    assert_eq!(d.slice_ips("shop", "db-abcde"), Vec::<String>::new(), "db's slice pruned");
    let reqs = api.requests();
    if as_event {
        assert!(reqs.iter().any(|r| r.contains("watch=1") && r.ends_with("-> 200")), "{reqs:?}");
    } else {
        assert!(reqs.iter().any(|r| r.contains("watch=1") && r.ends_with("-> 410")), "{reqs:?}");
    }
    // Unchanged objects are not rewritten by the relist (no churn, no traffic break).
    assert_eq!(d.service("default", "web")["result"]["object"]["metadata"]["resourceVersion"], web_rv);
}

#[test]
fn relists_on_410_gone_and_prunes_what_is_gone() {
    relist_after_gone(false);
}

#[test]
fn relists_on_an_error_event_with_code_410() {
    relist_after_gone(true);
}

#[test]
fn bookmarks_move_the_resume_point_and_dropped_watches_resume() {
    let api = ApiServer::start(Some("t"));
    api.with(|w| w.bookmark_every = Some(Duration::from_millis(100)));
    populate(&api);
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "t");
    config(dir.path(), &cluster_token(&api, &token));
    let d = start(dir);
    d.wait("connected", 10, |d| d.status()["connected"] == json!(true));
    // Only slices change: the Services watch learns the new resourceVersion from bookmarks.
    let rv = api.put(Res::Slices, slice("default", "web", &["198.18.1.7"], true));
    d.wait("bookmark past the slice change", 5, |d| {
        d.status()["streams"][0]["resourceVersion"].as_str().and_then(|v| v.parse::<u64>().ok()) >= Some(rv)
    });
    api.drop_watches();
    let want = format!("/api/v1/services?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !api.requests().iter().any(|r| r.contains(&want)) {
        assert!(Instant::now() < deadline, "no Services watch resumed from {rv}: {:?}", api.requests());
        std::thread::sleep(Duration::from_millis(25));
    }
    // Resumed, not relisted; and changes after the drop arrive.
    let lists = api.requests().iter().filter(|r| r.starts_with("GET /api/v1/services?limit=")).count();
    assert_eq!(lists, 1, "{:?}", api.requests());
    api.put(Res::Services, service("default", "after", "10.96.0.80", 80, None));
    d.wait("the Service created after the drop", 5, |d| d.services().contains(&"default/after".to_string()));
}

#[test]
fn a_slow_server_with_paged_lists_and_repeated_drops_converges() {
    let api = ApiServer::start(Some("t"));
    for i in 0..(apiserver_page() + 20) {
        api.put(
            Res::Services,
            service("bulk", &format!("s{i:03}"), &format!("10.96.{}.{}", 10 + i / 250, i % 250 + 1), 80, None),
        );
    }
    api.with(|w| w.slow = Duration::from_millis(3));
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "t");
    config(dir.path(), &cluster_token(&api, &token));
    let d = start(dir);
    let n = apiserver_page() + 20;
    d.wait("every Service of a two-page list", 30, |d| d.status()["mirrored"]["services"] == json!(n));
    let reqs = api.requests();
    assert!(reqs.iter().any(|r| r.contains("&continue=500")), "the second page was asked for: {reqs:?}");
    for round in 0..3 {
        api.drop_watches();
        api.put(Res::Services, service("bulk", &format!("late{round}"), &format!("10.96.2.{}", round + 1), 80, None));
    }
    d.wait("changes made across drops", 15, |d| {
        let s = d.services();
        (0..3).all(|r| s.contains(&format!("bulk/late{r}")))
    });
}

fn apiserver_page() -> usize {
    500
}

#[test]
fn token_rotation_client_certificates_and_an_untrusted_server() {
    let api = ApiServer::start(Some("old"));
    populate(&api);
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "old");
    config(dir.path(), &cluster_token(&api, &token));
    let d = start(dir);
    d.wait("connected", 10, |d| d.status()["connected"] == json!(true));
    // The server rotates; until the file has the new token, requests are refused.
    api.with(|w| w.token = Some("new".into()));
    api.drop_watches();
    d.wait("401 reported", 10, |d| d.status()["lastError"].as_str().is_some_and(|e| e.contains("401")));
    std::fs::write(&token, "new").unwrap();
    d.wait("reconnected with the rotated token", 15, |d| d.status()["connected"] == json!(true));
    assert!(api.requests().iter().any(|r| r.contains("auth=new -> 200")));

    // A client certificate instead of a token.
    let api2 = ApiServer::start(None);
    populate(&api2);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("client.key");
    std::fs::copy(fixture("client.key"), &key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    config(
        dir.path(),
        &format!(
            "server = \"{}\"\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            api2.url(),
            fixture("ca.crt").display(),
            fixture("client.crt").display(),
            key.display()
        ),
    );
    let d2 = start(dir);
    d2.wait("connected with a client certificate", 10, |d| d.services().len() == 2);
    assert!(api2.requests().iter().all(|r| r.contains("auth=cert")), "{:?}", api2.requests());

    // A server whose certificate the configured CA did not sign is never trusted.
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "t");
    config(
        dir.path(),
        &format!(
            "server = \"{}\"\nca_file = \"{}\"\ntoken_file = \"{}\"\n",
            api2.url(),
            fixture("other-ca.crt").display(),
            token.display()
        ),
    );
    let d3 = start(dir);
    d3.wait("a certificate error", 10, |d| {
        d.status()["lastError"].as_str().is_some_and(|e| e.to_lowercase().contains("certificate"))
    });
    assert_eq!(d3.status()["connected"], json!(false));
    assert!(d3.services().is_empty());
}

#[test]
fn a_token_or_key_readable_by_others_stops_the_start_naming_file_and_mode() {
    let api = ApiServer::start(Some("t"));
    let dir = tempfile::tempdir().unwrap();
    let token = token_file(dir.path(), "t");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    config(dir.path(), &cluster_token(&api, &token));
    let out = Command::new(BIN)
        .args(["--dry-run", "--config"])
        .arg(dir.path().join("nodeportd.toml"))
        .arg("--socket")
        .arg(dir.path().join("sock"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&token.display().to_string()) && err.contains("0644"), "{err}");

    let key = dir.path().join("client.key");
    std::fs::copy(fixture("client.key"), &key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    config(
        dir.path(),
        &format!(
            "server = \"{}\"\nca_file = \"{}\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            api.url(),
            fixture("ca.crt").display(),
            fixture("client.crt").display(),
            key.display()
        ),
    );
    let out = Command::new(BIN)
        .args(["--dry-run", "--config"])
        .arg(dir.path().join("nodeportd.toml"))
        .arg("--socket")
        .arg(dir.path().join("sock"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cluster.key_file") && err.contains("client.key") && err.contains("0640"), "{err}");
    assert!(api.requests().is_empty(), "nothing was sent with a refused credential");
}
