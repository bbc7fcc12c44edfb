//! A throw-away network: client → router → two backends, each in its own network
//! namespace, removed again on drop (also when a test panics).
//!
//! ```text
//!  client (cl)            router (rt)                      backends (b1, b2)
//!  eth0 198.18.1.2  ---  c0 198.18.1.1                      eth0 198.18.2.11 / .12
//!       2001:db8:1::2       2001:db8:1::1                        2001:db8:2::11 / ::12
//!  default via router    br0 198.18.2.1, 2001:db8:2::1 ---  no route beyond 198.18.2.0/24:
//!                        (ports b1, b2)                     a reply reaches the client only
//!                                                           if the router masqueraded it
//! ```
//! Service addresses: ClusterIPs in 198.19.0.0/16 and 2001:db8:96::/112, external and
//! LoadBalancer IPs in 198.18.3.0/24; the router routes them towards br0 (it needs some
//! route to originate or forward them at all, like a router's default route).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

pub const ROLES: [&str; 4] = ["cl", "rt", "b1", "b2"];

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A client socket kept open across changes (see `Topo::udp_hold`).
pub struct Held {
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    child: Child,
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Held {
    pub fn ask(&mut self) -> String {
        use std::io::Write;
        self.stdin.write_all(b"\n").and_then(|_| self.stdin.flush()).expect("write to probe.py");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read from probe.py");
        line.trim().to_string()
    }
}

/// A helper process started by `Topo::background`, killed on drop.
pub struct Background(Child);

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub struct Topo {
    pub prefix: String,
    children: Vec<Child>,
}

pub fn here() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/netns")
}

/// Whether this machine can run the tests (root, ip, nft, python3). When it cannot, the
/// tests skip, unless NODEPORTD_REQUIRE_NETNS or NODEPORTD_REQUIRE_ROOT is set (tests/netns/run.sh sets it).
pub fn available() -> bool {
    let ok =
        |cmd: &str, args: &[&str]| Command::new(cmd).args(args).output().map(|o| o.status.success()).unwrap_or(false);
    let usable = ok("unshare", &["--net", "true"])
        && ok("ip", &["-V"])
        && ok("nft", &["--version"])
        && ok("python3", &["--version"]);
    if !usable {
        assert!(
            std::env::var_os("NODEPORTD_REQUIRE_NETNS").is_none()
                && std::env::var_os("NODEPORTD_REQUIRE_ROOT").is_none(),
            "NODEPORTD_REQUIRE_NETNS or NODEPORTD_REQUIRE_ROOT is set but root, ip, nft or python3 is missing"
        );
        eprintln!("skipped: needs root, iproute2, nft and python3");
    }
    usable
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn must(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Topo {
    /// Removes namespaces an earlier run of these tests left behind when it was killed
    /// (no Drop ran): named `npdp<PID>…` after a process that no longer exists, and empty.
    fn remove_leftovers() {
        let Ok(dir) = std::fs::read_dir("/run/netns") else { return };
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix("npdp") else { continue };
            let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if pid.is_empty() || std::path::Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            let busy = Command::new("ip").args(["netns", "pids", &name]).output().map(|o| !o.stdout.is_empty());
            if matches!(busy, Ok(false)) {
                let _ = Command::new("ip").args(["netns", "del", &name]).output();
            }
        }
    }

    pub fn new(tag: &str) -> Topo {
        Topo::remove_leftovers();
        // Unique per process and test, short enough for namespace names, and with a
        // prefix of our own so parallel runs of other test suites never collide.
        // run.sh passes its own prefix so that its trap can remove what a killed test left.
        let base = std::env::var("NODEPORTD_NETNS_PREFIX").unwrap_or_else(|_| format!("npdp{}", std::process::id()));
        let prefix = format!("{base}{tag}{}", COUNTER.fetch_add(1, Ordering::SeqCst));
        let topo = Topo { prefix, children: Vec::new() };
        for r in ROLES {
            must(Command::new("ip").args(["netns", "add", &topo.ns(r)]));
        }
        topo.build();
        topo
    }

    pub fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }

    /// `ip netns exec <role> ...`
    pub fn cmd(&self, role: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(role), program]);
        c
    }

    /// Runs a shell command line in a namespace; panics with its output if it fails.
    pub fn sh(&self, role: &str, line: &str) -> String {
        must(self.cmd(role, "sh").args(["-c", line]))
    }

    /// Like `sh` but returns the raw result.
    pub fn try_sh(&self, role: &str, line: &str) -> Output {
        run(self.cmd(role, "sh").args(["-c", line]))
    }

    fn build(&self) {
        let (cl, rt, b1, b2) = (self.ns("cl"), self.ns("rt"), self.ns("b1"), self.ns("b2"));
        let host = |line: String| must(Command::new("sh").args(["-c", &line]));
        // Both ends are created straight inside the namespaces: no name ever exists in
        // the host namespace, so nothing can clash with the host's own interfaces.
        host(format!("ip -n {rt} link add c0 type veth peer name eth0 netns {cl}"));
        host(format!("ip -n {rt} link add br0 type bridge"));
        host(format!("ip -n {rt} link add b1 type veth peer name eth0 netns {b1}"));
        host(format!("ip -n {rt} link add b2 type veth peer name eth0 netns {b2}"));
        for r in ROLES {
            self.sh(r, "ip link set lo up");
        }
        self.sh(
            "rt",
            "sysctl -qw net.ipv4.ip_forward=1 net.ipv6.conf.all.forwarding=1 && \
             ip link set b1 master br0 && ip link set b2 master br0 && \
             ip link set c0 up && ip link set b1 up && ip link set b2 up && ip link set br0 up && \
             ip addr add 198.18.1.1/24 dev c0 && ip addr add 2001:db8:1::1/64 dev c0 nodad && \
             ip addr add 198.18.2.1/24 dev br0 && ip addr add 2001:db8:2::1/64 dev br0 nodad && \
             ip route add 198.19.0.0/16 dev br0 && ip route add 198.18.3.0/24 dev br0 && \
             ip -6 route add 2001:db8:96::/112 dev br0",
        );
        self.sh(
            "cl",
            "ip link set eth0 up && ip addr add 198.18.1.2/24 dev eth0 && \
             ip addr add 2001:db8:1::2/64 dev eth0 nodad && \
             ip route add default via 198.18.1.1 && ip -6 route add default via 2001:db8:1::1",
        );
        for (r, n) in [("b1", 11), ("b2", 12)] {
            self.sh(
                r,
                &format!(
                    "ip link set eth0 up && ip addr add 198.18.2.{n}/24 dev eth0 && \
                     ip addr add 2001:db8:2::{n}/64 dev eth0 nodad"
                ),
            );
        }
    }

    /// Starts a long-running process in a namespace; it is killed on drop.
    pub fn spawn(&mut self, role: &str, program: &str, args: &[&str]) -> &mut Child {
        let child = self
            .cmd(role, program)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        self.children.push(child);
        let last = self.children.len() - 1;
        &mut self.children[last]
    }

    /// Starts `probe.py udp-hold` in a namespace: each `ask` sends one datagram on the
    /// same socket (the same conntrack entry) and returns the answer.
    pub fn udp_hold(&self, role: &str, host: &str, port: u16) -> Held {
        let script = here().join("probe.py");
        let mut child = self
            .cmd(role, "python3")
            .args([script.to_string_lossy().as_ref(), "udp-hold", host, &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start probe.py udp-hold");
        Held {
            stdin: child.stdin.take().expect("piped stdin"),
            stdout: BufReader::new(child.stdout.take().expect("piped stdout")),
            child,
        }
    }

    /// Starts the test backends (HTTP on TCP and an echo on UDP, on every given port)
    /// and waits until they listen.
    pub fn start_backends(&mut self, ports: &[&str]) {
        let script = here().join("backend.py");
        let script = script.to_string_lossy().into_owned();
        for r in ["b1", "b2"] {
            let mut args = vec![script.as_str(), r];
            args.extend(ports);
            let child = self.spawn(r, "python3", &args);
            let stdout = child.stdout.take().expect("piped stdout");
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).expect("backend output");
            assert_eq!(line.trim(), "ready", "backend {r} did not start");
        }
    }

    /// Starts a helper process in a namespace, waits for its "ready" line and returns a
    /// guard that kills it when dropped (also when a check panics).
    pub fn background(&self, role: &str, program: &str, args: &[&str]) -> Background {
        let mut child = self
            .cmd(role, program)
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout")).read_line(&mut line).expect("helper output");
        let guard = Background(child);
        assert_eq!(line.trim(), "ready", "{program} {args:?} in {role} did not start");
        guard
    }

    /// `count` requests from a namespace; one answer ("NAME CLIENT_IP") or "ERR ..." each.
    pub fn probe(&self, role: &str, proto: &str, host: &str, port: u16, count: u32, timeout: f32) -> Vec<String> {
        let script = here().join("probe.py");
        let out = must(self.cmd(role, "python3").args([
            script.to_string_lossy().as_ref(),
            proto,
            host,
            &port.to_string(),
            &count.to_string(),
            &timeout.to_string(),
        ]));
        out.lines().map(str::to_string).collect()
    }
}

impl Topo {
    /// Sends SIGTERM to a process `spawn` started and waits for it to exit.
    pub fn terminate(&mut self, pid: u32, limit: std::time::Duration) {
        let child = self.children.iter_mut().find(|c| c.id() == pid).expect("a child of this topology");
        must(Command::new("kill").args(["-TERM", &pid.to_string()]));
        let start = std::time::Instant::now();
        while child.try_wait().expect("wait for a child").is_none() {
            assert!(start.elapsed() < limit, "process {pid} still runs {limit:?} after SIGTERM");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// What the router holds, for failure messages.
    pub fn debug(&self) -> String {
        let out = self.try_sh("rt", "nft list ruleset; ip route; ip -6 route");
        format!("--- router state\n{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for r in ROLES {
            // Deleting a namespace kills nothing by itself; the children went above.
            let _ = Command::new("ip").args(["netns", "del", &self.ns(r)]).output();
        }
    }
}
