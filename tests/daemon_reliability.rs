//! What a real router's clients do to the daemon, with the real daemon (in --dry-run, so
//! no privileges are needed): idle and leaky clients cannot lock the others out, one
//! daemon per state directory, and a dry run leaves the default state directory alone.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_nodeportd");

struct Daemon {
    child: Child,
    socket: PathBuf,
}

fn daemon_cmd(dir: &Path, state: &Path, socket: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args(["--dry-run", "--config"])
        .arg(dir.join("nodeportd.toml"))
        .arg("--socket")
        .arg(socket)
        .arg("--state-dir")
        .arg(state);
    c
}

impl Daemon {
    fn start(dir: &Path) -> Daemon {
        Daemon::start_with(daemon_cmd(dir, &dir.join("state"), &dir.join("sock")), dir.join("sock"))
    }

    fn start_with(mut cmd: Command, socket: PathBuf) -> Daemon {
        let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start nodeportd");
        let deadline = Instant::now() + Duration::from_secs(10);
        while UnixStream::connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "daemon did not open {}", socket.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon { child, socket }
    }

    fn ctl(&self, args: &[&str]) -> Output {
        Command::new(BIN).arg("ctl").args(args).env("NODEPORTD_SOCKET", &self.socket).output().expect("nodeportctl")
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

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("nodeportd.toml"),
        "node_name = \"edge-1\"\nnodeport_addresses = [\"127.0.0.0/8\"]\n",
    )
    .unwrap();
    dir
}

/// Room for a few thousand descriptors in this process (the daemon needs no more than
/// its max_connections).
fn raise_fd_limit() {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid, writable rlimit struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        r.rlim_cur = r.rlim_max.min(8192);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
    }
    assert!(r.rlim_cur >= 4096, "need 4096 file descriptors, the hard limit is {}", r.rlim_max);
}

/// Issue 12: 1 000 connections that never send a byte, plus a client that keeps leaking
/// new ones, must not keep `status` from answering within 1 s with the default config.
#[test]
fn idle_and_leaky_connections_cannot_lock_out_status() {
    raise_fd_limit();
    let dir = setup();
    let d = Daemon::start(dir.path());
    let mut idle = Vec::new();
    for _ in 0..1000 {
        idle.push(UnixStream::connect(&d.socket).expect("connect"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let leaky = {
        let stop = stop.clone();
        let socket = d.socket.clone();
        std::thread::spawn(move || {
            let mut leaked = Vec::new();
            while !stop.load(Ordering::Relaxed) && leaked.len() < 2000 {
                if let Ok(s) = UnixStream::connect(&socket) {
                    leaked.push(s);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            leaked.len()
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let mut worst = Duration::ZERO;
    for _ in 0..10 {
        let t = Instant::now();
        let out = d.ctl(&["status", "-o", "json"]);
        let took = t.elapsed();
        assert!(out.status.success(), "status failed: {}", String::from_utf8_lossy(&out.stderr));
        worst = worst.max(took);
    }
    stop.store(true, Ordering::Relaxed);
    let leaked = leaky.join().unwrap();
    assert!(leaked > 50, "the leaky client only opened {leaked} connections");
    assert!(worst < Duration::from_secs(1), "status took {worst:?} with idle and leaky clients");
    // The idle connections first in line were closed by the daemon to make room.
    let mut b = [0u8; 64];
    idle[0].set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(idle[0].read(&mut b).unwrap(), 0, "the longest-idle connection was not closed");
}

/// Issue 12: a second daemon on the same state directory is refused at once, naming the
/// holder's pid, while the first keeps running; it touches nothing (a write in progress
/// of the live daemon, a temp file, stays).
#[test]
fn a_second_daemon_on_the_same_state_dir_is_refused_naming_the_holder() {
    let dir = setup();
    let mut first = Daemon::start(dir.path());
    let tmp = dir.path().join("state/objects/services/default/.web.json.tmp");
    std::fs::create_dir_all(tmp.parent().unwrap()).unwrap();
    std::fs::write(&tmp, b"{\"schema\":1,").unwrap();
    for socket in [dir.path().join("other.sock"), dir.path().join("sock")] {
        let t = Instant::now();
        let mut cmd = daemon_cmd(dir.path(), &dir.path().join("state"), &socket);
        let out = cmd.stdin(Stdio::null()).output().unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "the second daemon did not fail at once");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("nodeportd pid {}", first.child.id())), "{err}");
        assert!(err.contains("nodeportd.lock"), "{err}");
        assert!(tmp.exists(), "the second daemon removed the live daemon's temp file");
    }
    assert!(!dir.path().join("other.sock").exists());
    assert!(first.alive());
    assert!(first.ctl(&["status"]).status.success());
    // Once the first is gone (even killed), the directory is free again.
    let _ = first.child.kill();
    let _ = first.child.wait();
    let mut second = Daemon::start(dir.path());
    assert!(second.alive());
}

/// docs/extensions.md: `--dry-run` without an explicit state_dir (no `--state-dir`, no
/// `state_dir` key, or the built-in default) keeps its state in a private temporary
/// directory removed at exit.
#[test]
fn a_dry_run_without_an_explicit_state_dir_uses_a_private_one() {
    let dir = setup();
    let socket = dir.path().join("sock");
    let default_existed = Path::new("/etc/nodeportd").exists();
    let mut cmd = Command::new(BIN);
    cmd.args(["--dry-run", "--config"]).arg(dir.path().join("nodeportd.toml")).arg("--socket").arg(&socket);
    let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "daemon did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let private = std::env::temp_dir().join(format!("nodeportd-dry-run-{}", child.id()));
    assert!(private.join("nodeportd.lock").exists(), "{} not used", private.display());
    let out = Command::new(BIN)
        .args(["ctl", "apply", "-f"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/svc-nodeport-web.json"))
        .env("NODEPORTD_SOCKET", &socket)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(private.join("objects/services/default/web.json").exists());
    if !default_existed {
        assert!(!Path::new("/etc/nodeportd").exists(), "the dry run created /etc/nodeportd");
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    child.wait().unwrap();
    assert!(err.contains(&private.display().to_string()), "the log does not name the directory: {err}");
    assert!(!private.exists(), "{} left behind", private.display());
}
