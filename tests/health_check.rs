//! `spec.healthCheckNodePort` served by the real daemon on the real kernel: a client
//! namespace probes the router namespace with curl, as a load balancer would.
//!
//! ```text
//!  client (cl)                 router (rt): nodeportd
//!  eth0 198.18.1.2      ---    c0 198.18.1.1, 2001:db8:1::1   (nodeport_addresses)
//!       2001:db8:1::2             198.18.1.9                  (not selected)
//! ```
//! Needs root, iproute2, nft, curl and python3; without root (or network namespaces)
//! the test says so and passes, unless NODEPORTD_REQUIRE_NETNS or NODEPORTD_REQUIRE_ROOT is set. Namespaces are named `nphc<pid>…`
//! and removed on drop, also when the test fails.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_nodeportd");
const NODE: &str = "nphc-router";
const PREFIX: &str = "nphc";

/// Root with network namespaces and nft, or the test skips (unless
/// NODEPORTD_REQUIRE_NETNS or NODEPORTD_REQUIRE_ROOT is set). Where it can run, a missing curl, ss or python3 is a
/// failure, not a silent skip.
fn available() -> bool {
    let ok =
        |cmd: &str, args: &[&str]| Command::new(cmd).args(args).output().map(|o| o.status.success()).unwrap_or(false);
    let usable = ok("unshare", &["--net", "true"]) && ok("ip", &["-V"]) && ok("nft", &["--version"]);
    if !usable {
        assert!(
            std::env::var_os("NODEPORTD_REQUIRE_NETNS").is_none()
                && std::env::var_os("NODEPORTD_REQUIRE_ROOT").is_none(),
            "NODEPORTD_REQUIRE_NETNS or NODEPORTD_REQUIRE_ROOT is set but root, ip or nft is missing"
        );
        eprintln!("skipped: needs root, iproute2 and nft");
        return false;
    }
    for (tool, args) in [("curl", "--version"), ("ss", "-V"), ("python3", "--version")] {
        assert!(ok(tool, &[args]), "{tool} is needed for this test (apt-get install curl iproute2 python3)");
    }
    true
}

fn must(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two namespaces and the processes started in them; all removed on drop.
struct Net {
    prefix: String,
    children: std::cell::RefCell<Vec<std::process::Child>>,
}

impl Net {
    fn remove_leftovers() {
        // Namespaces of a killed earlier run: `nphc<PID>-…` of a process that is gone.
        let Ok(dir) = std::fs::read_dir("/run/netns") else { return };
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(PREFIX) else { continue };
            let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if !pid.is_empty() && !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = Command::new("ip").args(["netns", "del", &name]).output();
            }
        }
    }

    fn new() -> Net {
        Net::remove_leftovers();
        let net = Net { prefix: format!("{PREFIX}{}", std::process::id()), children: Default::default() };
        for r in ["rt", "cl"] {
            must(Command::new("ip").args(["netns", "add", &net.ns(r)]));
        }
        let (rt, cl) = (net.ns("rt"), net.ns("cl"));
        must(
            Command::new("ip")
                .args(["-n", &rt, "link", "add", "c0", "type", "veth", "peer", "name", "eth0", "netns", &cl]),
        );
        net.sh(
            "rt",
            "ip link set lo up && ip link set c0 up && \
             ip addr add 198.18.1.1/24 dev c0 && ip addr add 198.18.1.9/24 dev c0 && \
             ip addr add 2001:db8:1::1/64 dev c0 nodad",
        );
        net.sh(
            "cl",
            "ip link set lo up && ip link set eth0 up && ip addr add 198.18.1.2/24 dev eth0 && \
             ip addr add 2001:db8:1::2/64 dev eth0 nodad",
        );
        net
    }

    fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }

    fn cmd(&self, role: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(role), program]);
        c
    }

    fn sh(&self, role: &str, line: &str) -> String {
        must(self.cmd(role, "sh").args(["-c", line]))
    }

    fn try_sh(&self, role: &str, line: &str) -> Output {
        self.cmd(role, "sh").args(["-c", line]).output().expect("sh")
    }

    fn spawn(&self, role: &str, program: &str, args: &[&str], stderr: Stdio) -> u32 {
        let child = self
            .cmd(role, program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let pid = child.id();
        self.children.borrow_mut().push(child);
        pid
    }

    fn kill(&self, pid: u32) {
        let mut children = self.children.borrow_mut();
        if let Some(i) = children.iter().position(|c| c.id() == pid) {
            let mut c = children.remove(i);
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `curl` from a namespace: (exit code, response head and body).
    fn curl(&self, role: &str, args: &str) -> (i32, String) {
        let out = self.try_sh(role, &format!("curl -sS -i --max-time 3 {args}"));
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n"))
    }

    fn wait_for(&self, what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn listening(&self, port: u16) -> bool {
        !self.sh("rt", &format!("ss -Hltn 'sport = :{port}'")).trim().is_empty()
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for c in self.children.get_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for r in ["rt", "cl"] {
            let _ = Command::new("ip").args(["netns", "del", &self.ns(r)]).output();
        }
    }
}

/// A LoadBalancer + Local service; each gets an ingress IP of its own (two services on
/// one IP and port would be a conflict for the data plane).
fn service(name: &str, ingress: &str, health_check_port: Option<u16>) -> Value {
    let mut spec = json!({
        "type": "LoadBalancer", "externalTrafficPolicy": "Local", "selector": {"app": name},
        "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
    });
    if let Some(p) = health_check_port {
        spec["healthCheckNodePort"] = json!(p);
    }
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "default"}, "spec": spec,
        "status": {"loadBalancer": {"ingress": [{"ip": ingress}]}}})
}

fn slice(service: &str, nodes: [&str; 2]) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
    "metadata": {"name": format!("{service}-x1"), "namespace": "default",
        "labels": {"kubernetes.io/service-name": service}},
    "addressType": "IPv4",
    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    "endpoints": [
        {"addresses": ["198.18.2.11"], "conditions": {"ready": true}, "nodeName": nodes[0]},
        {"addresses": ["198.18.2.12"], "conditions": {"ready": true}, "nodeName": nodes[1]}
    ]})
}

fn header<'a>(response: &'a str, name: &str) -> Option<&'a str> {
    let head = response.split("\n\n").next()?;
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

fn body(response: &str) -> Value {
    let b = response.split_once("\n\n").map(|(_, b)| b).unwrap_or_default();
    serde_json::from_str(b).unwrap_or_else(|e| panic!("body is not JSON ({e}): {response}"))
}

#[test]
fn health_check_node_port_answers_like_kube_proxy() {
    if !available() {
        return;
    }
    let net = Net::new();
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).display().to_string();
    std::fs::write(
        p("nodeportd.toml"),
        format!(
            "node_name = \"{NODE}\"\n\
             nodeport_addresses = [\"198.18.1.1/32\", \"2001:db8:1::1/128\"]\n\
             service_cluster_ip_ranges = [\"198.19.0.0/16\"]\n"
        ),
    )
    .unwrap();
    let (socket, log) = (p("sock"), p("daemon.log"));
    let log_file = std::fs::File::create(&log).unwrap();
    let args = ["--config", &p("nodeportd.toml"), "--socket", &socket, "--state-dir", &p("state"), "--log", "stderr"];
    net.spawn("rt", BIN, &args, Stdio::from(log_file));
    net.wait_for("the daemon's socket", Duration::from_secs(10), || Path::new(&socket).exists());
    let ctl = |args: &str, object: Option<&Value>| {
        if let Some(o) = object {
            std::fs::write(p("o.json"), o.to_string()).unwrap();
        }
        net.sh("rt", &format!("{BIN} ctl --socket {socket} {args}"))
    };
    let daemon_log = || std::fs::read_to_string(&log).unwrap_or_default();

    ctl(&format!("apply -f {}", p("o.json")), Some(&service("web", "198.18.3.50", None)));
    ctl(&format!("apply -f {}", p("o.json")), Some(&slice("web", [NODE, "other-node"])));
    let stored: Value = serde_json::from_str(&ctl("get svc web -n default -o json", None)).unwrap();
    let port = u16::try_from(stored["spec"]["healthCheckNodePort"].as_u64().expect("an allocated healthCheckNodePort"))
        .expect("a port number");
    net.wait_for("the health check listener", Duration::from_secs(5), || net.listening(port));

    // One local endpoint of two: 200, weight 1, kube-proxy's body.
    let (rc, r) = net.curl("cl", &format!("http://198.18.1.1:{port}/healthz"));
    assert_eq!(rc, 0, "curl failed: {r}\n{}", daemon_log());
    assert!(r.starts_with("HTTP/1.1 200 OK\n"), "{r}");
    assert_eq!(header(&r, "Content-Type"), Some("application/json"), "{r}");
    assert_eq!(header(&r, "X-Content-Type-Options"), Some("nosniff"), "{r}");
    assert_eq!(header(&r, "X-Load-Balancing-Endpoint-Weight"), Some("1"), "{r}");
    assert_eq!(
        body(&r),
        json!({"service": {"namespace": "default", "name": "web"}, "localEndpoints": 1, "serviceProxyHealthy": true})
    );
    assert!(r.contains(r#"{"service":{"namespace":"default","name":"web"},"localEndpoints":1"#), "{r}");
    eprintln!("ok: GET on 198.18.1.1:{port} is 200 with one local endpoint");

    // The same over IPv6 (one dual-stack socket), HEAD without a body, POST refused.
    let (rc, r6) = net.curl("cl", &format!("-g http://[2001:db8:1::1]:{port}/"));
    assert!(rc == 0 && r6.starts_with("HTTP/1.1 200 OK\n") && r6.contains("\"localEndpoints\":1"), "{rc} {r6}");
    let (rc, head) = net.curl("cl", &format!("-I http://198.18.1.1:{port}/"));
    assert!(rc == 0 && head.starts_with("HTTP/1.1 200 OK\n"), "{rc} {head}");
    let get_body_len = r.split_once("\n\n").unwrap().1.len().to_string();
    assert_eq!(header(&head, "Content-Length"), Some(get_body_len.as_str()), "{head}");
    assert_eq!(header(&head, "X-Load-Balancing-Endpoint-Weight"), Some("1"), "{head}");
    assert!(head.split_once("\n\n").is_some_and(|(_, b)| b.is_empty()), "HEAD with a body: {head}");
    let (rc, post) = net.curl("cl", &format!("-X POST http://198.18.1.1:{port}/"));
    assert!(rc == 0 && post.starts_with("HTTP/1.1 405 Method Not Allowed\n"), "{rc} {post}");
    assert_eq!(header(&post, "Allow"), Some("GET, HEAD"));
    // A request body is never read; the client still gets its answer.
    let big = net.try_sh(
        "cl",
        &format!("head -c 200000 /dev/zero | curl -sS -i --max-time 3 --data-binary @- http://198.18.1.1:{port}/"),
    );
    let big = String::from_utf8_lossy(&big.stdout).replace("\r\n", "\n");
    assert!(big.starts_with("HTTP/1.1 405 "), "POST with a 200 kB body: {big}");
    eprintln!("ok: IPv6 GET 200, HEAD 200 without a body, POST 405");

    // Not a NodePort address: the connection is closed without an answer.
    for (role, url) in [("cl", format!("http://198.18.1.9:{port}/")), ("rt", format!("http://127.0.0.1:{port}/"))] {
        let (rc, r) = net.curl(role, &url);
        assert!(rc != 0 && !r.contains("HTTP/"), "{url} from {role} answered (curl exit {rc}): {r}");
    }
    eprintln!("ok: 198.18.1.9 and 127.0.0.1 (not selected) get no answer");

    // The data plane marks new connections to the port on node addresses.
    let set = net.sh("rt", "nft list set inet nodeportd health-check-ports");
    assert!(set.contains(&format!("tcp . {port}")), "{set}");

    // A firewall like fw4's WAN input (reject TCP) with the package's input include:
    // the health check still answers on the node address, nothing else gets through.
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("openwrt-package/nodeportd/files/nodeportd-input.nft");
    std::fs::write(
        p("fw.nft"),
        format!(
            "table inet nphc-fw {{\n\tchain input {{\n\t\ttype filter hook input priority filter; policy accept;\n\
             \t\tct state established,related accept\n\t\tinclude \"{}\"\n\
             \t\tmeta l4proto tcp reject with tcp reset\n\t}}\n}}\n",
            include.display()
        ),
    )
    .unwrap();
    net.sh("rt", &format!("nft -f {}", p("fw.nft")));
    let (rc, r) = net.curl("cl", &format!("http://198.18.1.1:{port}/"));
    assert!(rc == 0 && r.starts_with("HTTP/1.1 200 OK\n"), "behind the firewall: curl exit {rc}: {r}");
    let (rc, r) = net.curl("cl", &format!("http://198.18.1.9:{port}/"));
    assert_eq!(rc, 7, "the firewall should refuse the unmarked connection to 198.18.1.9: {r}");
    eprintln!("ok: the fw4 input include accepts the health check, and only it");
    net.sh("rt", "nft delete table inet nphc-fw");

    // status shows the listener.
    let st: Value = serde_json::from_str(&ctl("status -o json", None)).unwrap();
    let hc = st["healthChecks"].as_array().expect("status.healthChecks");
    assert!(
        hc.iter()
            .any(|h| h["port"] == port && h["listening"] == true && h["localEndpoints"] == 1 && h["name"] == "web"),
        "{st}"
    );
    assert!(ctl("status", None).contains(&format!("  {port}:")), "no health check line in nodeportctl status");

    // No local endpoint any more: 503 with 0.
    ctl(&format!("apply -f {}", p("o.json")), Some(&slice("web", ["other-node", "third-node"])));
    net.wait_for("503 after the local endpoint left", Duration::from_secs(5), || {
        net.curl("cl", &format!("http://198.18.1.1:{port}/")).1.starts_with("HTTP/1.1 503")
    });
    let (_, r) = net.curl("cl", &format!("http://198.18.1.1:{port}/"));
    assert!(r.starts_with("HTTP/1.1 503 Service Unavailable\n"), "{r}");
    assert_eq!(header(&r, "X-Load-Balancing-Endpoint-Weight"), Some("0"), "{r}");
    assert_eq!(body(&r)["localEndpoints"], 0, "{r}");
    eprintln!("ok: 503 with localEndpoints 0 once no endpoint is on this node");

    // A port somebody else holds: a warning naming port and service, shown in status,
    // bound once it is free again; the daemon carries on meanwhile.
    let used: Vec<u64> =
        stored["spec"]["ports"].as_array().unwrap().iter().filter_map(|p| p["nodePort"].as_u64()).collect();
    let busy_port = (30_500..30_510).find(|c| *c != port && !used.contains(&u64::from(*c))).unwrap();
    let squatter = net.spawn(
        "rt",
        "python3",
        &[
            "-c",
            &format!(
                "import socket,time\ns=socket.socket()\ns.bind(('0.0.0.0',{busy_port}))\ns.listen()\nprint('up',flush=True)\ntime.sleep(120)"
            ),
        ],
        Stdio::null(),
    );
    net.wait_for("the squatter", Duration::from_secs(5), || net.listening(busy_port));
    ctl(&format!("apply -f {}", p("o.json")), Some(&service("busy", "198.18.3.51", Some(busy_port))));
    net.wait_for("the bind warning", Duration::from_secs(5), || {
        daemon_log().contains(&format!("cannot listen on health check port {busy_port} of service default/busy"))
    });
    let st: Value = serde_json::from_str(&ctl("status -o json", None)).unwrap();
    assert!(
        st["healthChecks"].as_array().unwrap().iter().any(|h| h["port"] == busy_port
            && h["listening"] == false
            && h["error"].as_str().is_some_and(|e| e.contains("in use"))),
        "{st}"
    );
    let (rc, r) = net.curl("cl", &format!("http://198.18.1.1:{port}/"));
    assert!(rc == 0 && r.starts_with("HTTP/1.1 503"), "the other port stopped answering: {rc} {r}");
    net.kill(squatter);
    net.wait_for("the retried bind", Duration::from_secs(15), || {
        net.curl("cl", &format!("http://198.18.1.1:{busy_port}/")).1.starts_with("HTTP/1.1 503")
    });
    eprintln!("ok: a busy port is reported, retried and served once free");

    // The service gone: the port refuses connections (no listener left).
    ctl("delete svc web -n default", None);
    net.wait_for("the listener closed", Duration::from_secs(5), || !net.listening(port));
    let (rc, r) = net.curl("cl", &format!("http://198.18.1.1:{port}/"));
    assert_eq!(rc, 7, "connection refused expected after the delete: {r}");
    let elements = |set: &str| {
        format!(
            "web {port}: {}, busy {busy_port}: {}",
            set.contains(&format!("tcp . {port}")),
            set.contains(&format!("tcp . {busy_port}"))
        )
    };
    let want = elements(&format!("tcp . {busy_port}"));
    net.wait_for("the set without the deleted port", Duration::from_secs(5), || {
        let set = net.sh("rt", "nft list set inet nodeportd health-check-ports");
        elements(&set) == want
    });
    eprintln!("ok: deleting the service closes its port");
    let log = daemon_log();
    assert!(!log.contains("panicked") && !log.contains("sync failed"), "{log}");
}
