//! The native ubus object against a ubusd stand-in: this test listens on a Unix socket
//! and speaks ubusd's side of the protocol (HELLO, ADD_OBJECT, INVOKE, the event object,
//! subscriptions) to the real daemon binary (in --dry-run). It checks the object's
//! signature, every method's replies, the events for Service changes and syncs, the
//! message-size limit, and that the daemon registers again after "ubusd" restarts.
//! Checked by hand against the real ubusd and ubus CLI: docs/openwrt.md.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nodeportd::ubus::blob::{self, ty, BlobBuf};
use nodeportd::ubus::msg::{self, attr, kind, status};
use serde_json::{json, Map, Value};

const BIN: &str = env!("CARGO_BIN_EXE_nodeportd");
const CLIENT_ID: u32 = 0x0d00_0001;
const CALLER_ID: u32 = 0x0c00_0042;
const OBJ_ID: u32 = 0x5a5a_0001;

struct Daemon {
    child: Child,
    socket: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn start(dir: &Path, ubus: &str) -> Daemon {
        let socket = dir.join("np.sock");
        let cfg = dir.join("nodeportd.toml");
        std::fs::write(
            &cfg,
            format!(
                "nodeport_addresses = [\"127.0.0.0/8\"]\nubus = \"{ubus}\"\nlog_level = \"debug\"\nmax_request_bytes = 2097152\n"
            ),
        )
        .unwrap();
        let child = Command::new(BIN)
            .args(["--dry-run", "--config"])
            .arg(&cfg)
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

    fn ctl(&self, args: &[&str], stdin: &str) -> String {
        let mut child = Command::new(BIN)
            .arg("ctl")
            .args(args)
            .env("NODEPORTD_SOCKET", &self.socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "nodeportctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }
}

/// One message as the stand-in reads it.
#[derive(Debug, Clone)]
struct Msg {
    kind: u8,
    seq: u16,
    peer: u32,
    objid: Option<u32>,
    status: Option<u32>,
    method: Option<String>,
    path: Option<String>,
    no_reply: Option<u8>,
    data: Option<Map<String, Value>>,
    signature: Option<Vec<u8>>,
}

/// ubusd's side of one client connection.
struct Conn {
    s: UnixStream,
    seq: u16,
    /// Events the daemon sent (`send` to the event object) while we waited for something else.
    events: Vec<(String, Value)>,
    /// NOTIFYs the daemon sent to its subscribers.
    notifies: Vec<(String, Value)>,
}

impl Conn {
    fn read_msg(&mut self, timeout: Duration) -> Option<Msg> {
        self.s.set_read_timeout(Some(timeout)).unwrap();
        let mut head = [0u8; 12];
        if self.s.read_exact(&mut head).is_err() {
            return None;
        }
        let n = msg::frame_len(&head).expect("a valid header from the daemon").expect("12 bytes are enough");
        let mut frame = head.to_vec();
        frame.resize(n, 0);
        self.s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        self.s.read_exact(&mut frame[12..]).expect("the rest of the message");
        let m = msg::decode(&frame).expect("a well-formed message from the daemon");
        Some(Msg {
            kind: m.hdr.kind,
            seq: m.hdr.seq,
            peer: m.hdr.peer,
            objid: m.u32(attr::OBJID),
            status: m.u32(attr::STATUS),
            method: m.string(attr::METHOD).map(str::to_string),
            path: m.string(attr::OBJPATH).map(str::to_string),
            no_reply: m.u8(attr::NO_REPLY),
            data: m.data_json().map(|d| d.expect("DATA decodes")),
            signature: m.raw(attr::SIGNATURE).map(<[u8]>::to_vec),
        })
    }

    fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    /// The next message that is not an event; events are answered as ubusd does and kept.
    fn next(&mut self, timeout: Duration) -> Option<Msg> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            let m = self.read_msg(left.max(Duration::from_millis(1)))?;
            if m.kind == kind::INVOKE && m.objid == Some(msg::EVENT_OBJECT) {
                assert_eq!(m.method.as_deref(), Some("send"));
                assert_eq!(m.peer, msg::EVENT_OBJECT, "libubus addresses events to the event object");
                let d = m.data.clone().expect("an event has DATA");
                self.events.push((d["id"].as_str().unwrap().to_string(), d["data"].clone()));
                let st = msg::encode(kind::STATUS, m.seq, m.peer, |b| b.put_u32(attr::STATUS, 0)).unwrap();
                self.send(&st);
                continue;
            }
            if m.kind == kind::NOTIFY {
                assert_eq!(m.objid, Some(OBJ_ID));
                assert_eq!(m.no_reply, Some(1));
                self.notifies.push((m.method.clone().unwrap(), Value::Object(m.data.clone().unwrap())));
                continue;
            }
            return Some(m);
        }
    }

    /// Call a method as ubusd forwards a caller's INVOKE: (DATA, STATUS).
    fn invoke_raw(&mut self, method: &str, args: impl FnOnce(&mut BlobBuf)) -> (Option<Map<String, Value>>, u32) {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let m = msg::encode(kind::INVOKE, seq, CALLER_ID, |b| {
            b.put_u32(attr::OBJID, OBJ_ID);
            b.put_string(attr::METHOD, method);
            b.put_string(attr::USER, "root");
            b.put_string(attr::GROUP, "root");
            let d = b.nest_start(attr::DATA);
            args(b);
            b.nest_end(d);
        })
        .unwrap();
        self.send(&m);
        let mut data = None;
        loop {
            let r = self.next(Duration::from_secs(10)).unwrap_or_else(|| panic!("no answer to {method}"));
            assert_eq!((r.seq, r.peer), (seq, CALLER_ID), "the reply goes back to the caller: {r:?}");
            assert_eq!(r.objid, Some(OBJ_ID));
            match r.kind {
                kind::DATA => data = Some(r.data.expect("DATA carries DATA")),
                kind::STATUS => return (data, r.status.expect("STATUS carries a status")),
                other => panic!("unexpected message type {other} in a reply"),
            }
        }
    }

    fn invoke(&mut self, method: &str, args: Value) -> Value {
        let (data, st) = self.invoke_raw(method, |b| b.table_members(args.as_object().unwrap()));
        assert_eq!(st, status::OK, "{method}");
        Value::Object(data.unwrap_or_else(|| panic!("{method}: no DATA")))
    }

    fn wait_event(&mut self, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(i) = self.events.iter().position(|(e, d)| e == id && pred(d)) {
                return self.events.remove(i).1;
            }
            assert!(Instant::now() < deadline, "no {id} event; got {:?}", self.events);
            if let Some(m) = self.next(Duration::from_millis(200)) {
                panic!("unexpected message while waiting for an event: {m:?}");
            }
        }
    }
}

/// Methods and their argument types, as ubusd keeps them from ADD_OBJECT.
type Signature = Vec<(String, Vec<(String, u8)>)>;

/// The stand-in for ubusd: a listening socket.
struct StandIn {
    path: PathBuf,
    listener: UnixListener,
}

impl StandIn {
    fn listen(path: &Path) -> StandIn {
        let _ = std::fs::remove_file(path);
        StandIn { path: path.to_path_buf(), listener: UnixListener::bind(path).unwrap() }
    }

    /// Accept the daemon, say HELLO, take its ADD_OBJECT and register it.
    fn accept(&self) -> (Conn, Signature) {
        self.listener.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        let s = loop {
            match self.listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "the daemon did not connect to {}", self.path.display());
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        s.set_nonblocking(false).unwrap();
        let mut c = Conn { s, seq: 0, events: Vec::new(), notifies: Vec::new() };
        c.send(&msg::encode(kind::HELLO, 0, CLIENT_ID, |_| {}).unwrap());
        let add = c.next(Duration::from_secs(10)).expect("ADD_OBJECT after HELLO");
        assert_eq!(add.kind, kind::ADD_OBJECT);
        assert_eq!(add.path.as_deref(), Some("nodeportd"));
        let sig = signature(&add.signature.expect("a signature"));
        let reply = msg::encode(kind::DATA, add.seq, add.peer, |b| {
            b.put_u32(attr::OBJID, OBJ_ID);
            b.put_u32(attr::OBJTYPE, 0x7777);
        })
        .unwrap();
        c.send(&reply);
        c.send(&msg::encode(kind::STATUS, add.seq, add.peer, |b| b.put_u32(attr::STATUS, 0)).unwrap());
        (c, sig)
    }
}

fn signature(sig: &[u8]) -> Signature {
    let mut out = Vec::new();
    for (i, a) in blob::attrs(sig, 0).unwrap().iter().enumerate() {
        let f = blob::field(a, i).unwrap();
        assert_eq!(f.ty, ty::TABLE);
        let mut args = Vec::new();
        for (j, p) in blob::attrs(f.value, 0).unwrap().iter().enumerate() {
            let pf = blob::field(p, j).unwrap();
            assert_eq!(pf.ty, ty::INT32);
            args.push((pf.name.to_string(), pf.value[3]));
        }
        out.push((f.name.to_string(), args));
    }
    out
}

const SERVICE: &str = r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"default"},"spec":{"type":"NodePort","selector":{"app":"web"},"ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":8080}]}}"#;
const ENDPOINTS: &str = r#"{"apiVersion":"v1","kind":"Endpoints","metadata":{"name":"web","namespace":"default"},"subsets":[{"addresses":[{"ip":"198.18.78.2"}],"ports":[{"name":"http","port":8080,"protocol":"TCP"}]}]}"#;

#[test]
fn the_object_answers_sends_events_and_comes_back_after_ubusd_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let ubus_path = dir.path().join("ubus.sock");
    let ubusd = StandIn::listen(&ubus_path);
    let daemon = Daemon::start(dir.path(), ubus_path.to_str().unwrap());
    let (mut c, sig) = ubusd.accept();

    // The signature `ubus -v list nodeportd` shows: the rpcd plugin's methods and arguments.
    let names: Vec<&str> = sig.iter().map(|(n, _)| n.as_str()).collect();
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
    let args = |m: &str| sig.iter().find(|(n, _)| n == m).unwrap().1.clone();
    assert_eq!(args("service_apply"), [("object".to_string(), ty::TABLE)]);
    assert_eq!(
        args("endpoints_get").iter().map(|(n, t)| (n.as_str(), *t)).collect::<Vec<_>>(),
        [("namespace", ty::STRING), ("name", ty::STRING), ("kind", ty::STRING)]
    );

    // status, with the session argument uhttpd adds.
    let session = "0123456789abcdef0123456789abcdef";
    let st = c.invoke("status", json!({ "ubus_rpc_session": session }));
    assert_eq!(st["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(st["dataplane"]["dryRun"], true);

    // service_apply: the reply, then the event (`ubus listen nodeportd.service`).
    let svc: Value = serde_json::from_str(SERVICE).unwrap();
    let applied = c.invoke("service_apply", json!({ "object": svc, "ubus_rpc_session": session }));
    assert_eq!(applied["action"], "created");
    let node_port = applied["object"]["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=32767).contains(&node_port));
    let ev = c.wait_event("nodeportd.service", |_| true);
    assert_eq!(ev["action"], "created");
    assert_eq!((ev["namespace"].as_str(), ev["name"].as_str()), (Some("default"), Some("web")));
    assert_eq!(ev["nodePorts"], json!([node_port]));
    assert_eq!(ev["clusterIP"], applied["object"]["spec"]["clusterIP"]);
    // The sync that follows is announced too.
    let sync = c.wait_event("nodeportd.sync", |d| d["inSync"] == true);
    assert!(sync["generation"].as_u64().unwrap() >= 1);

    // The same object again changes nothing and announces nothing.
    assert_eq!(c.invoke("service_apply", json!({ "object": svc }))["action"], "unchanged");

    // A subscriber (`ubus subscribe nodeportd`) gets NOTIFYs from now on.
    let n = msg::encode(kind::NOTIFY, 0, 0, |b| {
        b.put_u32(attr::OBJID, OBJ_ID);
        b.put_u8(attr::ACTIVE, 1);
    })
    .unwrap();
    c.send(&n);

    // A change through the socket API announces itself on ubus as well.
    let ep = c.invoke("endpoints_apply", json!({ "object": serde_json::from_str::<Value>(ENDPOINTS).unwrap() }));
    assert_eq!(ep["action"], "created");
    let ev = c.wait_event("nodeportd.service", |d| d["action"] == "endpoints");
    assert_eq!((ev["name"].as_str(), ev["endpoints"].as_str()), (Some("web"), Some("Endpoints/web")));
    let got = c.invoke("endpoints_get", json!({"namespace": "default", "name": "web", "kind": "Endpoints"}));
    assert_eq!(got["object"]["subsets"][0]["addresses"][0]["ip"], "198.18.78.2");
    let listed = c.invoke("service_list", json!({}));
    assert_eq!(listed["kind"], "ServiceList");
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    assert_eq!(c.invoke("endpoints_list", json!({"namespace": "default"}))["items"].as_array().unwrap().len(), 1);
    assert_eq!(c.invoke("service_get", json!({"name": "web"}))["object"]["spec"]["ports"][0]["nodePort"], node_port);
    daemon.ctl(
        &["apply", "-f", "-"],
        &SERVICE.replace("\"web\"", "\"api\"").replace("\"name\":\"http\",", "\"name\":\"http\",\"nodePort\":30444,"),
    );
    let ev = c.wait_event("nodeportd.service", |d| d["name"] == "api");
    assert_eq!((ev["action"].as_str(), ev["nodePorts"].clone()), (Some("created"), json!([30444])));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c.notifies.iter().any(|(k, d)| k == "service" && d["name"] == "api") {
        assert!(Instant::now() < deadline, "no NOTIFY to the subscriber: {:?}", c.notifies);
        let _ = c.next(Duration::from_millis(100));
    }

    // Errors: the plugin's error object, ubus status 0.
    let absent = c.invoke("service_get", json!({"namespace": "default", "name": "nope"}));
    assert_eq!(absent["error"]["reason"], "NotFound");
    assert!(absent["error"]["message"].as_str().unwrap().contains("nope"));
    let bad = c.invoke("service_apply", json!({"object": {"kind": "Service", "metadata": {"name": "Bad_Name"}}}));
    assert_eq!(bad["error"]["reason"], "Invalid");
    assert!(bad["error"]["message"].as_str().unwrap().contains("Bad_Name"));
    let bad_kind = c.invoke("endpoints_list", json!({"kind": "bogus"}));
    assert!(bad_kind["error"]["message"].as_str().unwrap().contains("params.kind"), "{bad_kind}");
    // Unknown methods and malformed arguments: ubus statuses, no data, the connection stays.
    assert_eq!(c.invoke_raw("no_such_method", |_| {}), (None, status::METHOD_NOT_FOUND));
    let (d, st) = c.invoke_raw("status", |b| {
        b.put(ty::STRING, b"no NUL and no name");
    });
    assert_eq!((d, st), (None, status::INVALID_ARGUMENT));

    // service_delete: the reply and the event.
    let deleted = c.invoke("service_delete", json!({"namespace": "default", "name": "web"}));
    assert_eq!(deleted["object"]["metadata"]["name"], "web");
    assert_eq!(c.wait_event("nodeportd.service", |d| d["action"] == "deleted")["name"], "web");

    // A list over ubus' 1 MiB message limit: a clear error, and the connection survives.
    for i in 0..5 {
        let big = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("big-{i}"), "namespace": "big", "annotations": {"note": "x".repeat(250_000)}},
            "spec": {"selector": {"app": "big"}, "ports": [{"port": 80}]}});
        daemon.ctl(&["apply", "-f", "-"], &big.to_string());
    }
    let too_big = c.invoke("service_list", json!({"namespace": "big"}));
    assert_eq!(
        too_big["error"]["reason"],
        "TooLarge",
        "{}",
        &too_big.to_string()[..200.min(too_big.to_string().len())]
    );
    let m = too_big["error"]["message"].as_str().unwrap();
    assert!(m.contains("1048576") && m.contains("service_list"), "{m}");
    assert_eq!(
        c.invoke("service_get", json!({"namespace": "big", "name": "big-0"}))["object"]["metadata"]["name"],
        "big-0"
    );

    // ubusd restarts: the daemon connects again and registers the object again.
    drop(c);
    drop(ubusd);
    let ubusd = StandIn::listen(&ubus_path);
    let (mut c, sig2) = ubusd.accept();
    assert_eq!(sig2, sig);
    assert_eq!(c.invoke("service_get", json!({"name": "api"}))["object"]["spec"]["ports"][0]["nodePort"], 30444);
    daemon.ctl(&["delete", "svc", "api"], "");
    assert_eq!(c.wait_event("nodeportd.service", |d| d["name"] == "api")["action"], "deleted");
}

#[test]
fn without_ubusd_the_daemon_runs_as_before_and_registers_when_it_appears() {
    let dir = tempfile::tempdir().unwrap();
    let ubus_path = dir.path().join("ubus.sock");
    let daemon = Daemon::start(dir.path(), ubus_path.to_str().unwrap());
    // The socket API works with no ubusd at all.
    let out = daemon.ctl(&["apply", "-f", "-"], SERVICE);
    assert!(out.contains("created"), "{out}");
    std::thread::sleep(Duration::from_millis(600));
    let ubusd = StandIn::listen(&ubus_path);
    let (mut c, _) = ubusd.accept();
    assert_eq!(c.invoke("service_get", json!({"name": "web"}))["object"]["metadata"]["name"], "web");
}

#[test]
fn ubus_off_is_accepted_and_the_socket_api_serves_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(dir.path(), "off");
    let out = daemon.ctl(&["apply", "-f", "-"], SERVICE);
    assert!(out.contains("created"), "{out}");
    let check =
        Command::new(BIN).args(["--check-config", "--config"]).arg(dir.path().join("nodeportd.toml")).output().unwrap();
    assert!(String::from_utf8_lossy(&check.stdout).contains("ubus = \"off\""));
}
