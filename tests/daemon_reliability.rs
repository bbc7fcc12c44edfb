//! What a real router's clients do to the daemon, with the real daemon (in --dry-run, so
//! no privileges are needed): idle and leaky clients cannot lock the others out, one
//! daemon per state directory, and a dry run leaves the default state directory alone.

use std::io::{Read, Write};
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

/// Root (mount), or skip; under NODEPORTD_REQUIRE_ROOT (CI) not being root fails.
fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        assert!(std::env::var_os("NODEPORTD_REQUIRE_ROOT").is_none(), "NODEPORTD_REQUIRE_ROOT is set but not root");
        eprintln!("skipped: mounting a tmpfs needs root");
    }
    root
}

/// Unmounts (lazily, so a still-open file cannot keep it) on drop, also on panic.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn must(cmd: &mut Command) {
    let st = cmd.status().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(st.success(), "{cmd:?} failed");
}

fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(".tmp") {
                out.push(p);
            }
        }
    }
    out
}

/// Issue 12 on a real file system: a full tmpfs (ENOSPC) and a read-only mount (EROFS)
/// under the daemon's state. The failed update or delete is refused with the errno, the
/// served object stays byte-identical (resourceVersion included) and no temp file is left.
#[test]
fn a_full_or_read_only_state_fs_changes_nothing() {
    if !root() {
        return;
    }
    let dir = setup();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    must(Command::new("mount").args(["-t", "tmpfs", "-o", "size=256k", "nptest", state.to_str().unwrap()]));
    let _tmpfs = Mount(state.clone());
    let d = Daemon::start(dir.path());
    let svc = |note: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "annotations": {"note": note}},
            "spec": {"type": "NodePort", "ports": [{"port": 80}]}})
        .to_string()
    };
    let apply = |text: String| {
        let file = dir.path().join("obj.json");
        std::fs::write(&file, text).unwrap();
        d.ctl(&["apply", "-f", file.to_str().unwrap()])
    };
    let out = apply(svc("v1"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let get = || {
        let out = d.ctl(&["get", "svc", "web", "-o", "json"]);
        assert!(out.status.success());
        out.stdout
    };
    let before = get();
    let file = state.join("objects/services/default/web.json");
    let on_disk = std::fs::read(&file).unwrap();

    // ENOSPC: fill the tmpfs.
    {
        let mut f = std::fs::File::create(state.join("filler")).unwrap();
        let block = vec![0u8; 4096];
        while f.write_all(&block).and_then(|()| f.sync_all()).is_ok() {}
    }
    let out = apply(svc(&"x".repeat(8192)));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an update on a full file system succeeded");
    assert!(err.contains("No space left on device"), "{err}");
    assert_eq!(get(), before, "ENOSPC changed the served object");
    assert_eq!(std::fs::read(&file).unwrap(), on_disk);
    assert_eq!(temp_files(&state), Vec::<PathBuf>::new());
    std::fs::remove_file(state.join("filler")).unwrap();

    // EROFS: the objects directory read-only (a read-only bind mount over itself; the
    // lock file, open for writing, stays on the writable mount).
    let objects = state.join("objects");
    must(Command::new("mount").arg("--bind").arg(&objects).arg(&objects));
    let _bind = Mount(objects.clone());
    must(Command::new("mount").args(["-o", "remount,bind,ro"]).arg(&objects));
    let out = apply(svc("v2"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("Read-only file system"), "{err}");
    let out = d.ctl(&["delete", "svc", "web"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a delete on a read-only file system succeeded");
    assert!(err.contains("Read-only file system"), "{err}");
    assert_eq!(get(), before, "EROFS changed the served object");
    assert_eq!(std::fs::read(&file).unwrap(), on_disk);
    assert_eq!(temp_files(&state), Vec::<PathBuf>::new());
    // Writable again: the update goes through with the next resourceVersion.
    drop(_bind);
    let out = apply(svc("v3"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&get()).unwrap();
    let old: serde_json::Value = serde_json::from_slice(&before).unwrap();
    let rv = |v: &serde_json::Value| v["metadata"]["resourceVersion"].as_str().unwrap().parse::<u64>().unwrap();
    assert!(rv(&v) > rv(&old));
    assert_eq!(v["spec"]["ports"][0]["nodePort"], old["spec"]["ports"][0]["nodePort"]);
}

/// A NodePort Service named `name` with one port.
fn nodeport_svc(name: &str, port: i64) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"type": "NodePort", "ports": [{"port": port}]}})
}

/// One raw `objects.apply` call over the socket; the whole JSON-RPC answer.
fn objects_apply(socket: &Path, params: serde_json::Value) -> serde_json::Value {
    let mut s = UnixStream::connect(socket).unwrap();
    let req = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "objects.apply", "params": params});
    s.write_all(format!("{req}\n").as_bytes()).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    serde_json::from_str(text.trim()).unwrap()
}

/// Issue 11 item 4 with the real daemon: a List goes in one `objects.apply` call; an
/// object named twice is applied twice in order (the second sees the first), a refused
/// one does not stop the others, and the output is one line per object as before.
#[test]
fn a_list_is_applied_in_one_call_with_per_object_results() {
    let dir = setup();
    let d = Daemon::start(dir.path());
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
        nodeport_svc("a", 80), nodeport_svc("b", 80), nodeport_svc("a", 81), nodeport_svc("bad", 0), nodeport_svc("c", 80)]});
    let file = dir.path().join("list.json");
    std::fs::write(&file, list.to_string()).unwrap();
    let out = d.ctl(&["apply", "-f", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "service/default/a created\nservice/default/b created\nservice/default/a configured\nservice/default/c created\n"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec.ports[0].port"), "{err}");
    let out = d.ctl(&["get", "svc", "a", "-o", "json"]);
    let a: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(a["spec"]["ports"][0]["port"], 81);
    assert_eq!(a["metadata"]["generation"], 2);
    // Raw: one call, one result per object, in order. `a` as nodeportctl sent it (with
    // its applier annotation, for `apply --prune`) is unchanged.
    let mut same_a = nodeport_svc("a", 81);
    same_a["metadata"]["annotations"] = serde_json::json!({"nodeportd.io/applied-by": "nodeportctl"});
    let r = objects_apply(&d.socket, serde_json::json!({"objects": [same_a, 7, nodeport_svc("d", 80)]}));
    let results = r["result"]["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{r}");
    assert_eq!(results[0]["action"], "unchanged");
    assert!(results[1]["error"]["message"].as_str().unwrap().contains("params.objects[1]"), "{r}");
    assert_eq!(results[2]["action"], "created");
}

/// `objects.apply` with `params.brief`: the results carry the action (or the error)
/// without the object, which is what `nodeportctl apply` asks for; anything but a boolean
/// is refused by name and value and applies nothing.
#[test]
fn a_brief_objects_apply_answers_actions_only() {
    let dir = setup();
    let d = Daemon::start(dir.path());
    let call = |params: serde_json::Value| objects_apply(&d.socket, params);
    let r = call(serde_json::json!({"brief": "yes", "objects": [nodeport_svc("a", 80)]}));
    let msg = r["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("params.brief") && msg.contains("\"yes\""), "{r}");
    let out = d.ctl(&["get", "svc", "-A", "-o", "json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["items"].as_array().map(Vec::len), Some(0), "a refused call applied something: {list}");

    let r = call(
        serde_json::json!({"brief": true, "objects": [nodeport_svc("a", 80), nodeport_svc("bad", 0), nodeport_svc("a", 80)]}),
    );
    let results = r["result"]["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{r}");
    assert_eq!(results[0], serde_json::json!({"action": "created"}), "{r}");
    assert!(results[1]["error"]["message"].as_str().unwrap().contains("spec.ports[0].port"), "{r}");
    assert_eq!(results[2], serde_json::json!({"action": "unchanged"}), "{r}");
    // Not brief (or brief false): each result has its stored object, as before.
    let r = call(serde_json::json!({"brief": false, "objects": [nodeport_svc("b", 80)]}));
    let results = r["result"]["results"].as_array().unwrap();
    assert_eq!(results[0]["action"], "created");
    assert_eq!(results[0]["object"]["metadata"]["name"], "b", "{r}");
    assert!(results[0]["object"]["spec"]["ports"][0]["nodePort"].is_i64(), "{r}");
}

/// Issue 12: 100 persistent clients applying at once with the default config: none is
/// refused or closed, every call on every connection is answered, and `status` still
/// gets in from a 101st connection.
#[test]
fn a_hundred_persistent_clients_are_all_served_with_the_default_config() {
    let dir = setup();
    let d = Daemon::start(dir.path());
    let clients: Vec<UnixStream> = (0..100).map(|_| UnixStream::connect(&d.socket).expect("connect")).collect();
    let start = Arc::new(std::sync::Barrier::new(100));
    let threads: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let start = start.clone();
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let mut w = s.try_clone().unwrap();
                let mut r = std::io::BufReader::new(s);
                start.wait();
                let mut answers = Vec::new();
                for round in 0..3 {
                    let req = serde_json::json!({"jsonrpc": "2.0", "id": round, "method": "service.apply",
                        "params": {"object": {"apiVersion": "v1", "kind": "Service",
                            "metadata": {"name": format!("c{i}"), "annotations": {"round": round.to_string()}},
                            "spec": {"type": "NodePort", "ports": [{"port": 80}]}}}});
                    w.write_all(format!("{req}\n").as_bytes()).unwrap();
                    let mut line = String::new();
                    std::io::BufRead::read_line(&mut r, &mut line).unwrap();
                    answers.push(line);
                }
                answers
            })
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        for (round, line) in t.join().unwrap().iter().enumerate() {
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|_| panic!("client {i} round {round}: {line:?}"));
            assert_eq!(v["id"], round, "client {i}: {v}");
            assert!(v["result"]["object"].is_object(), "client {i} round {round}: {v}");
        }
    }
    let out = d.ctl(&["status", "-o", "json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["objects"]["services"], 100, "{st}");
}

/// Issue 11/12: a large `objects.apply` is worked through 64 objects at a time, each step
/// written (and awaited) on its own, so the event loop answers others between steps: 200
/// objects are 4 store batches, not one; the results still come back in order.
#[test]
fn a_large_list_is_applied_in_steps_that_let_others_in() {
    let dir = setup();
    let d = Daemon::start(dir.path());
    let batches = || {
        let out = d.ctl(&["status", "-o", "json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        st["store"]["batches"].as_u64().unwrap()
    };
    let before = batches();
    let objects: Vec<serde_json::Value> = (0..200)
        .map(|i| {
            serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("s{i}")},
                "spec": {"ports": [{"port": 80}]}})
        })
        .collect();
    let mut s = UnixStream::connect(&d.socket).unwrap();
    let req = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "objects.apply",
        "params": {"objects": objects}});
    s.write_all(format!("{req}\n").as_bytes()).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let r: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let results = r["result"]["results"].as_array().unwrap();
    assert_eq!(results.len(), 200);
    for (i, res) in results.iter().enumerate() {
        assert_eq!(res["action"], "created", "{res}");
        assert_eq!(res["object"]["metadata"]["name"], format!("s{i}"));
    }
    assert_eq!(batches() - before, 4, "200 objects should be written in 4 steps of at most 64");
}
