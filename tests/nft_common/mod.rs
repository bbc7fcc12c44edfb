//! Shared helpers of the nf_tables integration tests: a network namespace per
//! test (removed on drop, also when the test panics), code run inside it on a
//! thread that `setns`'d into it, and the `nft` CLI to read back what we wrote.

#![allow(dead_code)]

use std::future::Future;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct Netns {
    pub name: String,
}

impl Netns {
    /// A fresh namespace, or `None` (test skipped) when not root. When CI runs the
    /// tests (NODEPORTD_REQUIRE_ROOT, tests/run.sh sets it) not being root is a failure.
    pub fn new() -> Option<Netns> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(
                std::env::var_os("NODEPORTD_REQUIRE_ROOT").is_none(),
                "NODEPORTD_REQUIRE_ROOT is set but the nf_tables tests are not running as root"
            );
            eprintln!("skipping: nf_tables tests need root");
            return None;
        }
        let name = format!("nftt-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst));
        let st = Command::new("ip").args(["netns", "add", &name]).status().expect("run ip netns add");
        assert!(st.success(), "ip netns add {name} failed");
        Some(Netns { name })
    }

    /// Runs `f` on a current-thread runtime inside the namespace.
    pub fn run<F, Fut, T>(&self, f: F) -> T
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T>,
        T: Send + 'static,
    {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("open netns");
            // SAFETY: `file` is an open namespace file descriptor; setns only
            // changes this (fresh) thread's network namespace.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(f())
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    }

    /// Runs `nft args...` inside the namespace; returns stdout, panics on failure.
    pub fn nft(&self, args: &[&str]) -> String {
        nft_in(&self.name, args)
    }

    pub fn nft_status(&self, args: &[&str]) -> (bool, String, String) {
        let o = Command::new("ip").args(["netns", "exec", &self.name, "nft"]).args(args).output().expect("run nft");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }

    /// `nft -f -` with `text` on stdin.
    pub fn nft_stdin(&self, text: &str) {
        use std::io::Write;
        let mut c = Command::new("ip")
            .args(["netns", "exec", &self.name, "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("run nft -f");
        c.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write");
        assert!(c.wait().expect("wait").success(), "nft -f failed for:\n{text}");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).status();
    }
}

/// `nft ARGS` in namespace `netns` (for code that runs where `&Netns` is not at hand);
/// panics when it fails.
pub fn nft_in(netns: &str, args: &[&str]) -> String {
    let o = Command::new("ip").args(["netns", "exec", netns, "nft"]).args(args).output().expect("run nft");
    assert!(o.status.success(), "nft {args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}
