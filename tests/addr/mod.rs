//! Network-namespace helpers for the node-address tests and the latency benchmark.
//! Every namespace is named with the `nwt-` prefix, the process id and a counter, so
//! parallel runs (other test binaries, other workers) never collide, and is deleted on
//! drop, also when the test panics.

#![allow(dead_code)]

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nodeportd::netwatch::NodeAddresses;
use tokio::sync::watch;

static COUNTER: AtomicU32 = AtomicU32::new(0);

pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        let name = format!("nwt-{tag}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst));
        run(&["ip", "netns", "add", &name]);
        let ns = Netns { name };
        ns.ip("link set lo up");
        ns
    }

    /// `ip -n NS ARGS...` (space-separated), panicking with the command on failure.
    pub fn ip(&self, args: &str) {
        let mut v = vec!["ip", "-n", &self.name];
        v.extend(args.split_whitespace());
        run(&v);
    }

    /// An Ethernet-like interface: one end of a veth pair whose peer `p-NAME` stays in
    /// the namespace without addresses (CI kernels may lack the dummy module).
    pub fn add_iface(&self, name: &str) {
        self.ip(&format!("link add {name} type veth peer name p-{name}"));
        self.ip(&format!("link set p-{name} up"));
    }

    /// Run a program inside the namespace and return its stdout.
    pub fn exec(&self, args: &[&str]) -> String {
        let mut v = vec!["ip", "netns", "exec", &self.name];
        v.extend_from_slice(args);
        run(&v)
    }

    /// Move the calling thread into the namespace; sockets it opens afterwards live there.
    pub fn enter(&self) {
        let f = File::open(format!("/var/run/netns/{}", self.name))
            .unwrap_or_else(|e| panic!("open netns {}: {e}", self.name));
        // SAFETY: setns only reads the fd, which stays open for the call; it changes
        // the network namespace of this thread alone (CLONE_NEWNET is allowed in a
        // multi-threaded process).
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {}: {}", self.name, std::io::Error::last_os_error());
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

pub fn run(args: &[&str]) -> String {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The published set as strings, IPv4 then IPv6, each sorted.
pub fn ips(n: &NodeAddresses) -> Vec<String> {
    n.all().map(|i| i.to_string()).collect()
}

/// Wait until the published set satisfies `pred`; panics with the last set after `limit`.
pub async fn wait_for(
    rx: &mut watch::Receiver<NodeAddresses>,
    limit: Duration,
    what: &str,
    pred: impl Fn(&NodeAddresses) -> bool,
) -> (NodeAddresses, Duration) {
    let start = Instant::now();
    loop {
        {
            let cur = rx.borrow_and_update();
            if pred(&cur) {
                return (cur.clone(), start.elapsed());
            }
        }
        let left = limit.saturating_sub(start.elapsed());
        match tokio::time::timeout(left, rx.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => panic!("{what}: the watcher stopped"),
            Err(_) => panic!("{what}: not reached within {limit:?}; last set: {}", rx.borrow().clone()),
        }
    }
}

/// Run `f` on a fresh thread inside `ns` with a current-thread tokio runtime (as the
/// daemon has), so the netns switch never leaks into other tests' threads.
pub fn in_netns<F, Fut>(ns: &Netns, f: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let name = ns.name.clone();
    let path = format!("/var/run/netns/{name}");
    let h = std::thread::spawn(move || {
        let f2 = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        // SAFETY: as in `Netns::enter`: a valid fd, and only this thread moves.
        let rc = unsafe { libc::setns(f2.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {name}: {}", std::io::Error::last_os_error());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
        rt.block_on(f());
    });
    if let Err(p) = h.join() {
        std::panic::resume_unwind(p);
    }
}
