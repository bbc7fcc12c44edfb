//! `nodeportctl` end to end against a scripted JSON-RPC peer on a real Unix socket:
//! what it sends (methods, params, one request per line, one connection), what it prints,
//! and its exit status. The daemon itself is tested elsewhere; this pins the client.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

type Log = Arc<Mutex<Vec<(usize, String, Value)>>>;

/// Answers like the daemon would for the requests the tests make; logs every request
/// with the number of the connection it came on.
fn answer(method: &str, params: &Value) -> Value {
    let ok = |r: Value| json!({"result": r});
    match method {
        "service.apply" => {
            let mut obj = params["object"].clone();
            obj["spec"]["clusterIP"] = json!("10.96.0.77");
            obj["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
            if obj["metadata"]["name"] == "broken" {
                return json!({"error": {"code": -32001, "message": "Service \"broken\" is invalid: spec.ports[0].nodePort: Invalid value: 30009: provided port is already allocated", "data": {"reason": "Invalid"}}});
            }
            ok(json!({"action": "created", "object": obj}))
        }
        "endpoints.apply" => ok(json!({"action": "unchanged", "object": params["object"]})),
        "service.list" => ok(json!({"items": [{
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"type": "NodePort", "clusterIP": "10.96.0.77", "ports": [{"port": 80, "nodePort": 30086, "protocol": "TCP"}]}
        }]})),
        "service.get" => {
            json!({"error": {"code": -32004, "message": format!("services \"{}\" not found", params["name"].as_str().unwrap_or("")), "data": {"reason": "NotFound"}}})
        }
        "service.delete" => ok(json!({"object": {}})),
        "status" => ok(json!({"version": "0.1.0", "node": {"name": "edge-1", "addresses": ["198.18.0.1"]}})),
        // Only the "batch" socket (see `serve_batch`) knows objects.apply.
        "objects.apply" if params["batch_peer"] == true => {
            let results: Vec<Value> = params["objects"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| {
                    let m = if o["kind"] == "Service" { "service.apply" } else { "endpoints.apply" };
                    let r = answer(m, &json!({"object": o}));
                    r.get("result").cloned().unwrap_or_else(|| json!({"error": r["error"]}))
                })
                .collect();
            ok(json!({ "results": results }))
        }
        _ => json!({"error": {"code": -32601, "message": "Method not found"}}),
    }
}

fn serve(path: &Path) -> Log {
    serve_with(path, false)
}

/// A peer that also answers `objects.apply`, one result per object.
fn serve_batch(path: &Path) -> Log {
    serve_with(path, true)
}

fn serve_with(path: &Path, batch_peer: bool) -> Log {
    let listener = UnixListener::bind(path).expect("bind test socket");
    let log: Log = Arc::default();
    let l2 = log.clone();
    std::thread::spawn(move || {
        for (conn, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            let log = l2.clone();
            std::thread::spawn(move || {
                let mut w = stream.try_clone().expect("clone");
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { return };
                    let req: Value = serde_json::from_str(&line).expect("client sends JSON lines");
                    assert_eq!(req["jsonrpc"], "2.0");
                    let method = req["method"].as_str().unwrap_or("").to_string();
                    log.lock().unwrap().push((conn, method.clone(), req["params"].clone()));
                    let mut params = req["params"].clone();
                    if batch_peer {
                        params["batch_peer"] = json!(true);
                    }
                    let mut resp = answer(&method, &params);
                    resp["jsonrpc"] = json!("2.0");
                    resp["id"] = req["id"].clone();
                    if writeln!(w, "{resp}").is_err() {
                        return;
                    }
                }
            });
        }
    });
    log
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn ctl(socket: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodeportd"))
        .arg("ctl")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .env_remove("NODEPORTD_SOCKET")
        .output()
        .expect("run nodeportctl")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn apply_list_sends_each_object_on_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let log = serve(&sock);
    let out = ctl(&sock, &["apply", "-f", fixture("list-server.json").to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "service/default/web created\nendpoints/default/web unchanged\nendpointslice/default/web-x7k2p unchanged\n"
    );
    let log = log.lock().unwrap();
    let methods: Vec<&str> = log.iter().map(|(_, m, _)| m.as_str()).collect();
    // The batch call first; this peer does not know it, so one call per object follows.
    assert_eq!(methods, ["objects.apply", "service.apply", "endpoints.apply", "endpoints.apply"]);
    assert!(log.iter().all(|(c, _, _)| *c == 0), "one connection for the whole file");
    assert_eq!(log[3].2["object"]["kind"], "EndpointSlice");
    assert_eq!(log[1].2["object"]["spec"]["ports"][0]["nodePort"], 30086);
}

/// Issue 11 item 4: a List is one request (`objects.apply`), and what is printed, per
/// object, is what one call per object prints, refusals included.
#[test]
fn apply_list_is_one_request_with_per_object_results() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let log = serve_batch(&sock);
    let out = ctl(&sock, &["apply", "-f", fixture("list-server.json").to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "service/default/web created\nendpoints/default/web unchanged\nendpointslice/default/web-x7k2p unchanged\n"
    );
    {
        let log = log.lock().unwrap();
        let methods: Vec<&str> = log.iter().map(|(_, m, _)| m.as_str()).collect();
        assert_eq!(methods, ["objects.apply"]);
        let objs = log[0].2["objects"].as_array().unwrap();
        assert_eq!(objs.len(), 3);
        assert_eq!(objs[2]["kind"], "EndpointSlice");
        assert_eq!(objs[0]["spec"]["ports"][0]["nodePort"], 30086);
    }
    // A refused object in the batch: printed like a refused single call, exit 1.
    let file = dir.path().join("two.json");
    let svc = |name: &str| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}});
    std::fs::write(
        &file,
        json!({"apiVersion": "v1", "kind": "List", "items": [svc("broken"), svc("fine")]}).to_string(),
    )
    .unwrap();
    let out = ctl(&sock, &["apply", "-f", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "service/default/fine created\n");
    let err = text(&out.stderr);
    assert!(err.contains("Error from server (Invalid): Service \"broken\" is invalid"), "{err}");
    assert!(err.contains("1 object(s)"), "{err}");
}

#[test]
fn apply_from_stdin_with_json_output_prints_a_list() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    serve(&sock);
    let out = Command::new(env!("CARGO_BIN_EXE_nodeportd"))
        .args(["ctl", "apply", "-f", "-", "-o", "json"])
        .env("NODEPORTD_SOCKET", &sock)
        .stdin(std::fs::File::open(fixture("svc-nodeport-web.json")).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["kind"], "List");
    assert_eq!(v["items"][0]["spec"]["clusterIP"], "10.96.0.77");
}

#[test]
fn server_refusal_goes_to_stderr_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    serve(&sock);
    let file = dir.path().join("two.json");
    let mut bad: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("svc-nodeport-web.json")).unwrap()).unwrap();
    bad["metadata"]["name"] = json!("broken");
    let good: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("svc-clusterip-db.json")).unwrap()).unwrap();
    std::fs::write(&file, json!({"apiVersion": "v1", "kind": "List", "items": [bad, good]}).to_string()).unwrap();
    let out = ctl(&sock, &["apply", "-f", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("Error from server (Invalid): Service \"broken\" is invalid: spec.ports[0].nodePort: Invalid value: 30009: provided port is already allocated"), "{err}");
    // Like kubectl, the other object is still applied.
    assert_eq!(text(&out.stdout), "service/default/db created\n");
}

#[test]
fn invalid_input_is_refused_before_sending() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let log = serve(&sock);
    let file = dir.path().join("pod.json");
    std::fs::write(&file, r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}"#).unwrap();
    let out = ctl(&sock, &["apply", "-f", file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("kind \"Pod\" is not supported"));
    assert!(log.lock().unwrap().is_empty());
}

#[cfg(not(feature = "yaml"))]
#[test]
fn yaml_without_the_feature_asks_for_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = ctl(&dir.path().join("none.sock"), &["apply", "-f", fixture("svc-nodeport-web.yaml").to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("-o json"), "{}", text(&out.stderr));
}

#[test]
fn get_prints_the_table_and_not_found_fails() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let log = serve(&sock);
    let out = ctl(&sock, &["get", "svc", "-A"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["NAMESPACE", "NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    );
    let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(&row[..6], ["default", "web", "NodePort", "10.96.0.77", "<none>", "80:30086/TCP"]);
    assert_eq!(log.lock().unwrap()[0].2, json!({}), "-A lists without a namespace");

    let out = ctl(&sock, &["get", "service", "nope", "-n", "shop"]);
    assert!(!out.status.success());
    assert_eq!(text(&out.stderr).trim(), "Error from server (NotFound): services \"nope\" not found");
    assert_eq!(log.lock().unwrap()[1].2, json!({"namespace": "shop", "name": "nope"}));
}

#[test]
fn delete_status_and_rpc() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("s.sock");
    let log = serve(&sock);
    let out = ctl(&sock, &["delete", "svc", "web"]);
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), "service/default/web deleted\n");
    let out = ctl(&sock, &["status"]);
    assert!(text(&out.stdout).contains("Node:           edge-1"));
    let out = ctl(&sock, &["rpc", "status"]);
    assert_eq!(serde_json::from_slice::<Value>(&out.stdout).unwrap()["version"], "0.1.0");
    let out = ctl(&sock, &["rpc", "no.such"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("Method not found"));
    let out = ctl(&sock, &["delete", "endpointslice", "web-x7k2p", "-n", "shop"]);
    assert!(!out.status.success(), "the peer does not know endpoints.delete");
    let log = log.lock().unwrap();
    assert_eq!(log[0].2, json!({"namespace": "default", "name": "web"}));
    assert_eq!(log.last().unwrap().2, json!({"namespace": "shop", "name": "web-x7k2p", "kind": "EndpointSlice"}));
}

#[test]
fn no_daemon_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = ctl(&dir.path().join("absent.sock"), &["status"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("cannot connect to nodeportd at") && err.contains("absent.sock"), "{err}");
}

/// Odd arguments get a usage error (exit 2), never a panic: multi-byte characters right
/// after a dash, and arguments that are not UTF-8 at all.
#[test]
fn odd_arguments_are_errors_not_panics() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("none.sock");
    let cases: Vec<Vec<&OsStr>> = vec![
        vec![OsStr::new("-é")],
        vec![OsStr::new("-😀")],
        vec![OsStr::new("status"), OsStr::new("-é")],
        vec![OsStr::new("get"), OsStr::from_bytes(b"\xff\xfe")],
        vec![OsStr::from_bytes(b"-\xc3")],
    ];
    for args in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_nodeportd"))
            .arg("ctl")
            .arg("--socket")
            .arg(&sock)
            .args(&args)
            .output()
            .expect("run nodeportctl");
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(err.contains("error:"), "{args:?}: {err}");
    }
    // The daemon's own command line too.
    let out = Command::new(env!("CARGO_BIN_EXE_nodeportd")).arg(OsStr::from_bytes(b"--config=\xff")).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("panicked"));
}
