//! The control plane as a user drives it: the real daemon (in --dry-run, so no
//! privileges are needed) on a temporary socket and state directory, driven by
//! `nodeportctl` with objects printed by `kubectl`, restarted (also after kill -9).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_nodeportd");

struct Daemon {
    child: Child,
    socket: PathBuf,
}

impl Daemon {
    fn start(dir: &Path) -> Daemon {
        let socket = dir.join("sock");
        let child = Command::new(BIN)
            .args(["--dry-run", "--config"])
            .arg(dir.join("nodeportd.toml"))
            .arg("--socket")
            .arg(&socket)
            .arg("--state-dir")
            .arg(dir.join("state"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nodeportd");
        let deadline = Instant::now() + Duration::from_secs(10);
        while UnixStream::connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "daemon did not open {}", socket.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon { child, socket }
    }

    fn ctl(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = Command::new(BIN);
        cmd.arg("ctl").args(args).env("NODEPORTD_SOCKET", &self.socket);
        cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("nodeportctl");
        if let Some(input) = stdin {
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.ctl(args, stdin);
        assert!(out.status.success(), "nodeportctl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    fn fails(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.ctl(args, stdin);
        assert!(!out.status.success(), "nodeportctl {args:?} should have failed");
        String::from_utf8(out.stderr).unwrap()
    }

    fn json(&self, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(args, None)).unwrap()
    }

    fn stop(mut self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe { libc::kill(self.child.id() as i32, signal) };
        self.child.wait().unwrap();
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Service as `kubectl create service ... --dry-run=client -o json` prints it; the
/// checked-in fixture when kubectl is not installed (it was printed by kubectl too).
fn kubectl_service(kind: &str, name: &str, tcp: &str) -> Value {
    let out = Command::new("kubectl")
        .args(["create", "service", kind, name, &format!("--tcp={tcp}"), "--dry-run=client", "-o", "json"])
        .output();
    match out {
        Ok(o) if o.status.success() => serde_json::from_slice(&o.stdout).unwrap(),
        _ => {
            let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/svc-nodeport-web.json");
            let mut v: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
            v["metadata"]["name"] = json!(name);
            v["spec"]["type"] = json!(if kind == "nodeport" { "NodePort" } else { "ClusterIP" });
            v
        }
    }
}

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("nodeportd.toml"),
        "node_name = \"edge-1\"\nnodeport_addresses = [\"127.0.0.0/8\"]\n",
    )
    .unwrap();
    dir
}

fn rpc(socket: &Path, raw: &[u8]) -> Vec<Value> {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(raw).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn kubectl_objects_allocate_persist_and_survive_restarts() {
    let dir = setup();
    let d = Daemon::start(dir.path());

    let web = kubectl_service("nodeport", "web", "80:8080").to_string();
    assert_eq!(d.ok(&["apply", "-f", "-"], Some(&web)).trim(), "service/default/web created");
    assert_eq!(d.ok(&["apply", "-f", "-"], Some(&web)).trim(), "service/default/web unchanged");

    // Seed 000: the static request for 30009 in the lower band is honoured...
    let minio = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "minio"},
        "spec": {"type": "NodePort", "selector": {"app": "minio"},
                 "ports": [{"name": "api", "nodePort": 30009, "port": 9000, "protocol": "TCP", "targetPort": 9000}]}});
    assert_eq!(d.ok(&["apply", "-f", "-"], Some(&minio.to_string())).trim(), "service/default/minio created");
    // ...and a second claim on it is refused in the API server's words, changing nothing.
    let mut thief = minio.clone();
    thief["metadata"]["name"] = json!("thief");
    let err = d.fails(&["apply", "-f", "-"], Some(&thief.to_string()));
    assert!(
        err.contains("Service \"thief\" is invalid: spec.ports[0].nodePort: Invalid value: 30009: provided port is already allocated"),
        "{err}"
    );
    assert!(d.fails(&["get", "svc", "thief"], None).contains("not found"));

    // Seed 002: kube-dns at 10.96.0.10.
    let dns = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kube-dns", "namespace": "kube-system"},
        "spec": {"clusterIP": "10.96.0.10", "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53}]}});
    d.ok(&["apply", "-f", "-"], Some(&dns.to_string()));
    let mut dns2 = dns.clone();
    dns2["metadata"]["name"] = json!("dns-copy");
    let err = d.fails(&["apply", "-f", "-"], Some(&dns2.to_string()));
    assert!(
        err.contains("Service \"dns-copy\" is invalid: spec.clusterIPs: Invalid value: [\"10.96.0.10\"]: failed to allocate IP 10.96.0.10: provided IP is already allocated"),
        "{err}"
    );

    let table = d.ok(&["get", "svc", "-A"], None);
    assert!(table.starts_with("NAMESPACE"), "{table}");
    assert!(table.contains("30009/TCP") && table.contains("10.96.0.10"), "{table}");

    let before = d.json(&["get", "svc", "-A", "-o", "json"]);
    let web_port = before["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metadata"]["name"] == "web")
        .map(|s| s["spec"]["ports"][0]["nodePort"].as_u64().unwrap())
        .unwrap();
    // Dynamic allocations come from the upper band (seed 000: 30086-32767).
    assert!((30086..=32767).contains(&web_port), "{web_port}");

    // A clean stop, then kill -9: nothing is lost, nothing moves.
    d.stop(libc::SIGTERM);
    let d = Daemon::start(dir.path());
    assert_eq!(d.json(&["get", "svc", "-A", "-o", "json"])["items"], before["items"]);
    d.stop(libc::SIGKILL);
    let d = Daemon::start(dir.path());
    assert_eq!(d.json(&["get", "svc", "-A", "-o", "json"])["items"], before["items"]);
    // Once the data plane is quiet the restored objects are packed into text; they
    // read back the same, and re-applying one is still unchanged.
    let deadline = Instant::now() + Duration::from_secs(10);
    while d.json(&["status", "-o", "json"])["objects"]["typed"] != 0 {
        assert!(Instant::now() < deadline, "{}", d.json(&["status", "-o", "json"]));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(d.json(&["get", "svc", "-A", "-o", "json"])["items"], before["items"]);
    assert_eq!(d.ok(&["apply", "-f", "-"], Some(&web)).trim(), "service/default/web unchanged");
    // A Service written now is packed from the text its write persisted, and reads back
    // as it was served.
    let api = kubectl_service("clusterip", "api", "81:8081").to_string();
    assert_eq!(d.ok(&["apply", "-f", "-"], Some(&api)).trim(), "service/default/api created");
    let served = d.json(&["get", "svc", "api", "-o", "json"]);
    while d.json(&["status", "-o", "json"])["objects"]["typed"] != 0 {
        assert!(Instant::now() < deadline + Duration::from_secs(10), "not packed");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(d.json(&["get", "svc", "api", "-o", "json"]), served);
    d.ok(&["delete", "svc", "api"], None);
    while d.json(&["status", "-o", "json"])["dataplane"]["inSync"] != true {
        assert!(Instant::now() < deadline + Duration::from_secs(20), "not in sync after the delete");
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = d.json(&["status", "-o", "json"]);
    // The restored objects were synced at start, before any API call changed anything.
    assert!(st["dataplane"]["generation"].as_u64().unwrap() >= 1, "{st}");
    assert_eq!(st["dataplane"]["inSync"], true, "{st}");
    // The daemon timed its own start until that first sync.
    let start_ms = st["dataplane"]["startToInSyncMillis"].as_u64().unwrap_or_else(|| panic!("{st}"));
    assert!(start_ms <= st["uptimeSeconds"].as_u64().unwrap() * 1000 + 1000, "{st}");
    assert_eq!(st["nodePorts"]["static"]["used"], 1, "{st}");
    assert_eq!(st["objects"]["services"], 3, "{st}");
    // Re-applying the same object writes nothing to flash.
    let writes = st["store"]["writes"].as_u64().unwrap();
    d.ok(&["apply", "-f", "-"], Some(&web));
    assert_eq!(d.json(&["status", "-o", "json"])["store"]["writes"].as_u64().unwrap(), writes);

    d.ok(&["delete", "svc", "minio"], None);
    assert_eq!(d.json(&["status", "-o", "json"])["nodePorts"]["static"]["used"], 0);
}

/// Sends `raw` (no newline) without closing the write side, and reads the answer and
/// then whether the connection ends (EOF or reset) within 5 s. Writes that fail because
/// the daemon already closed are expected.
fn oversized(socket: &Path, raw: &[u8]) -> (Value, bool) {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut w = s.try_clone().unwrap();
    w.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    let raw = raw.to_vec();
    let writer = std::thread::spawn(move || w.write_all(&raw).is_ok());
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    let eof = loop {
        match s.read(&mut b) {
            Ok(0) => break true,
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => break false, // timed out: still open
        }
    };
    writer.join().unwrap();
    let line = got.split(|&c| c == b'\n').next().unwrap_or_default();
    (serde_json::from_slice(line).unwrap_or(Value::Null), eof)
}

#[test]
fn bad_input_is_answered_and_the_daemon_lives() {
    let dir = setup();
    let mut d = Daemon::start(dir.path());
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"status\",\"params\":{{\"x\":\"{}\"}}}}\n",
        "a".repeat(2 << 20)
    );
    let mut raw = Vec::new();
    raw.extend_from_slice(b"{not json\n");
    raw.extend_from_slice(b"[]\n");
    raw.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"nope\"}\n");
    raw.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"service.apply\",\"params\":{\"object\":42}}\n");
    raw.extend_from_slice(
        b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"service.apply\",\"params\":{\"object\":{\"kind\":\"Service\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"Bad_Name\"},\"spec\":{\"ports\":[{\"port\":80}]}}}}\n",
    );
    raw.extend_from_slice(
        b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"service.apply\",\"params\":{\"object\":{\"kind\":\"Service\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"p\"},\"spec\":{\"type\":\"NodePort\",\"ports\":[{\"port\":80,\"nodePort\":40000}]}}}}\n",
    );
    raw.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"status\"}\n");
    let r = rpc(&d.socket, &raw);
    assert_eq!(r.len(), 7, "{r:?}");
    assert_eq!(r[0]["error"]["code"], -32700);
    assert_eq!(r[1]["error"]["code"], -32600);
    assert_eq!(r[2]["error"]["code"], -32601);
    assert_eq!(r[3]["error"]["code"], -32602);
    assert_eq!(r[4]["error"]["data"]["reason"], "Invalid");
    let m = r[4]["error"]["message"].as_str().unwrap();
    assert!(m.contains("metadata.name") && m.contains("Bad_Name"), "{m}");
    let m = r[5]["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("spec.ports[0].nodePort: Invalid value: 40000: provided port is not in the valid range. The range of valid ports is 30000-32767"),
        "{m}"
    );
    assert_eq!(r[6]["id"], 5);
    assert_eq!(r[6]["result"]["objects"]["services"], 0, "nothing was stored: {}", r[6]);
    // Over max_request_bytes (1 MiB): answered as soon as the limit is passed, without
    // waiting for the newline (the client sends no more and waits), then closed.
    let (answer, eof) = oversized(&d.socket, &big.as_bytes()[..big.len() - 1]);
    assert_eq!(answer["error"]["data"]["reason"], "TooLarge", "{answer}");
    let m = answer["error"]["message"].as_str().unwrap();
    assert!(m.contains("max_request_bytes (1048576)"), "{m}");
    assert!(eof, "the connection was not closed after the TooLarge answer");
    assert!(d.alive());
    assert_eq!(d.json(&["status", "-o", "json"])["nodePorts"]["dynamic"]["used"], 0);
}

/// nodeportctl against a daemon with a small max_request_bytes: a batch over it is
/// refused (and its connection closed), so nodeportctl reconnects and applies one object
/// per call; an object alone over the limit is refused by name and the rest still apply.
#[test]
fn apply_reconnects_after_an_oversized_request_is_refused() {
    let dir = setup();
    std::fs::write(
        dir.path().join("nodeportd.toml"),
        "node_name = \"edge-1\"\nnodeport_addresses = [\"127.0.0.0/8\"]\nmax_request_bytes = 4096\n",
    )
    .unwrap();
    let d = Daemon::start(dir.path());
    let svc = |name: String, note: usize| {
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "annotations": {"note": "x".repeat(note)}},
            "spec": {"type": "NodePort", "ports": [{"port": 80}]}})
    };
    let mut items: Vec<Value> = (0..30).map(|i| svc(format!("s{i}"), 10)).collect();
    items.insert(12, svc("huge".into(), 8192));
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    assert!(list.len() > 4096 * 3);
    let out = d.ctl(&["apply", "-f", "-"], Some(&list));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().count(), 30, "{stdout}\n{stderr}");
    assert!(stdout.contains("service/default/s29 created"), "{stdout}");
    assert!(stderr.contains("TooLarge") && stderr.contains("max_request_bytes (4096)"), "{stderr}");
    assert!(stderr.contains("1 object(s)"), "{stderr}");
    assert_eq!(d.json(&["status", "-o", "json"])["objects"]["services"], 30);
}

#[test]
fn corrupt_state_stops_the_daemon_naming_the_file() {
    let dir = setup();
    let d = Daemon::start(dir.path());
    d.ok(&["apply", "-f", "-"], Some(&kubectl_service("nodeport", "web", "80:8080").to_string()));
    d.stop(libc::SIGTERM);
    let file = dir.path().join("state/objects/services/default/web.json");
    std::fs::write(&file, b"{\"schema\":1,\"object\":{\"spec\":{\"ports\":7}}}").unwrap();
    let out = Command::new(BIN)
        .args(["--dry-run", "--socket"])
        .arg(dir.path().join("sock"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("objects/services/default/web.json") && err.contains("spec.ports"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"{\"schema\":1,\"object\":{\"spec\":{\"ports\":7}}}");
}

#[test]
fn sighup_applies_a_valid_config_and_refuses_one_that_strands_a_port() {
    let dir = setup();
    let cfg = dir.path().join("nodeportd.toml");
    let d = Daemon::start(dir.path());
    let minio = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "minio"},
        "spec": {"type": "NodePort", "ports": [{"name": "api", "nodePort": 30009, "port": 9000}]}});
    d.ok(&["apply", "-f", "-"], Some(&minio.to_string()));
    let hup_and_range = |text: &str| {
        std::fs::write(&cfg, text).unwrap();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(d.child.id() as i32, libc::SIGHUP) };
        std::thread::sleep(Duration::from_millis(300));
        d.json(&["status", "-o", "json"])["nodePorts"]["range"].as_str().unwrap().to_string()
    };
    // 30009 would fall outside: refused, the old range stays.
    assert_eq!(hup_and_range("service_node_port_range = \"31000-32767\"\n"), "30000-32767");
    // A typo is refused too.
    assert_eq!(hup_and_range("service_node_port_rang = \"30000-40000\"\n"), "30000-32767");
    assert_eq!(hup_and_range("service_node_port_range = \"30000-40000\"\n"), "30000-40000");
    let svc = d.json(&["get", "svc", "minio", "-o", "json"]);
    assert_eq!(svc["spec"]["ports"][0]["nodePort"], 30009, "{svc}");
}

#[test]
fn get_edit_apply_round_trip_and_several_errors_like_the_api_server() {
    let dir = setup();
    let d = Daemon::start(dir.path());
    let web = kubectl_service("nodeport", "web", "80:8080").to_string();
    d.ok(&["apply", "-f", "-"], Some(&web));
    assert_eq!(d.json(&["status", "-o", "json"])["nodePorts"]["dynamic"]["used"], 1);
    // `get -o json | edit type | apply`: the nodePort it still carries is dropped and freed.
    let mut got = d.json(&["get", "svc", "web", "-o", "json"]);
    if got["kind"] == "List" {
        got = got["items"][0].clone();
    }
    assert!(got["spec"]["ports"][0]["nodePort"].as_u64().is_some(), "{got}");
    got["spec"]["type"] = json!("ClusterIP");
    assert_eq!(d.ok(&["apply", "-f", "-"], Some(&got.to_string())).trim(), "service/default/web configured");
    let stored = d.json(&["get", "svc", "web", "-o", "json"]);
    assert!(!stored.to_string().contains("nodePort\""), "{stored}");
    assert_eq!(d.json(&["status", "-o", "json"])["nodePorts"]["dynamic"]["used"], 0);

    // Several errors in one object come back as one list, nothing stored.
    let raw = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"service.apply\",\"params\":{\"object\":{\"kind\":\"Service\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"two\"},\"spec\":{\"clusterIPs\":[\"10.96.0.50\"],\"ports\":[{\"port\":80,\"protocol\":\"ICMP\"}]}}}}\n";
    let r = rpc(&d.socket, raw);
    assert_eq!(r[0]["error"]["data"]["reason"], "Invalid", "{r:?}");
    assert_eq!(
        r[0]["error"]["message"],
        "Service \"two\" is invalid: [spec.ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\", spec.clusterIPs: Invalid value: [\"10.96.0.50\"]: must be empty when `clusterIP` is not specified]"
    );
    assert!(d.fails(&["get", "svc", "two"], None).contains("not found"));
}

/// `kubectl get svc,endpointslices,nodes -A -o json | nodeportctl apply --prune -f -`
/// mirrors what the cluster lists: new objects are created, objects an earlier
/// `nodeportctl apply` created that the list lacks are pruned (kubectl's words), objects
/// applied some other way and kinds the list does not hold are left alone, and nothing is
/// pruned when an object of the list was refused.
/// The names of the items `nodeportctl get ... -o json` lists.
fn names_of(d: &Daemon, args: &[&str]) -> Vec<String> {
    let v = d.json(args);
    v["items"].as_array().unwrap().iter().map(|o| o["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn apply_prune_mirrors_what_kubectl_lists() {
    let dir = setup();
    let d = Daemon::start(dir.path());
    let by_hand = kubectl_service("nodeport", "by-hand", "81:8081");
    d.ok(&["rpc", "service.apply", &json!({"object": by_hand}).to_string()], None);
    let slice = |name: &str, svc: &str| {
        json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "default", "labels": {"kubernetes.io/service-name": svc}},
            "addressType": "IPv4", "ports": [{"port": 8080}], "endpoints": [{"addresses": ["198.18.5.10"]}]})
    };
    let node = |name: &str, ip: &str| {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/os": "linux"}},
            "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}]}})
    };
    // The shape `kubectl get svc,endpointslices,nodes -A -o json` prints.
    let list = |items: Vec<Value>| {
        json!({"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}).to_string()
    };
    let first = list(vec![
        kubectl_service("nodeport", "web", "80:8080"),
        kubectl_service("clusterip", "api", "80:8080"),
        slice("web-abc", "web"),
        node("n1", "198.18.5.1"),
        node("n2", "198.18.5.2"),
    ]);
    let out = d.ok(&["apply", "--prune", "-f", "-"], Some(&first));
    assert_eq!(
        out,
        "service/default/web created\nservice/default/api created\nendpointslice/default/web-abc created\nnode/n1 created\nnode/n2 created\n"
    );
    let second =
        list(vec![kubectl_service("nodeport", "web", "80:8080"), slice("web-def", "web"), node("n1", "198.18.5.1")]);
    let out = d.ok(&["apply", "--prune", "-f", "-"], Some(&second));
    assert_eq!(
        out,
        "service/default/web unchanged\nendpointslice/default/web-def created\nnode/n1 unchanged\n\
         service/default/api pruned\nendpointslice/default/web-abc pruned\nnode/n2 pruned\n"
    );
    assert_eq!(names_of(&d, &["get", "svc", "-A", "-o", "json"]), ["by-hand", "web"]);
    assert_eq!(names_of(&d, &["get", "endpointslices", "-A", "-o", "json"]), ["web-def"]);
    assert_eq!(names_of(&d, &["get", "nodes", "-o", "json"]), ["n1"]);
    // Only Services in the input: the Node and the slice stay.
    let out = d.ok(&["apply", "--prune", "-f", "-"], Some(&list(vec![kubectl_service("nodeport", "web", "80:8080")])));
    assert_eq!(out, "service/default/web unchanged\n");
    assert_eq!(names_of(&d, &["get", "nodes", "-o", "json"]), ["n1"]);
    // A refused object: the others are applied, nothing is pruned.
    let mut bad = node("n3", "198.18.5.3");
    bad["spec"]["podCIDRs"] = json!(["10.244.3.0/24", "10.244.4.0/24"]);
    let err = d.fails(&["apply", "--prune", "-f", "-"], Some(&list(vec![bad, node("n4", "198.18.5.4")])));
    assert!(err.contains("spec.podCIDRs") && err.contains("nothing pruned"), "{err}");
    assert_eq!(names_of(&d, &["get", "nodes", "-o", "json"]), ["n1", "n4"]);
    // A Node table, and the Nodes survive a restart.
    let table = d.ok(&["get", "nodes"], None);
    assert!(
        table.starts_with("NAME   INTERNAL-IP   POD-CIDRS       AGE\nn1     198.18.5.1    10.244.1.0/24"),
        "{table}"
    );
    d.stop(libc::SIGTERM);
    let d = Daemon::start(dir.path());
    assert_eq!(names_of(&d, &["get", "nodes", "-o", "json"]), ["n1", "n4"]);
    assert_eq!(
        d.json(&["get", "node", "n1", "-o", "json"])["metadata"]["annotations"]["nodeportd.io/applied-by"],
        "nodeportctl"
    );
}
