//! Durable state on flash: one small JSON file per object, so an update writes
//! O(changed objects) bytes and flash wears slowly.
//!
//! Layout: `<state_dir>/objects/<kind>/<namespace>/<name>.json`, each file
//! `{"schema": 1, "object": {...}}`. A write is durable before it returns: temp
//! file, fsync, rename, fsync the directory. A corrupt or unreadable file stops the
//! daemon with a message naming it; nothing is overwritten.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const SCHEMA: u32 = 1;

/// The kinds of stored objects, one directory each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Service,
    Endpoints,
    EndpointSlice,
    /// Cluster-scoped: stored under `nodes/cluster/`, read back with namespace "".
    Node,
}

/// The directory that stands for the namespace of cluster-scoped objects.
const CLUSTER_SCOPED: &str = "cluster";

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Service, Kind::Endpoints, Kind::EndpointSlice, Kind::Node];
    pub fn dir(self) -> &'static str {
        match self {
            Kind::Service => "services",
            Kind::Endpoints => "endpoints",
            Kind::EndpointSlice => "endpointslices",
            Kind::Node => "nodes",
        }
    }
    /// The directory of a namespace (of [`CLUSTER_SCOPED`] for a Node).
    pub fn ns_dir(self, namespace: &str) -> &str {
        if self == Kind::Node {
            CLUSTER_SCOPED
        } else {
            namespace
        }
    }
}

#[derive(Debug)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

fn io_err(path: &Path, what: &str, e: io::Error) -> StoreError {
    StoreError(format!("{}: {what}: {e}", path.display()))
}

/// How this version's state files start, as `Envelope` prints them: the object's text
/// follows, then `}`.
const ENVELOPE_HEAD: &str = "{\"schema\":1,\"object\":";
const _: () = assert!(SCHEMA == 1, "ENVELOPE_HEAD names the schema");

/// A state file: the object with the schema it was written in (`Envelope<&Value>` to write
/// without a copy, `Envelope<Value>` to read).
#[derive(Serialize, Deserialize)]
struct Envelope<T> {
    schema: u32,
    object: T,
}

/// An object read back at start.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub object: Value,
}

/// One file-system step of a write, as a fault hook sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoStep {
    CreateDir,
    CreateTemp,
    WriteTemp,
    FsyncTemp,
    Rename,
    Remove,
    FsyncDir,
}

/// Called before every step of a write; an error makes the step fail with it (tests
/// inject ENOSPC, EROFS, EIO at the store's I/O boundary this way).
pub type FaultHook = Box<dyn FnMut(IoStep, &Path) -> io::Result<()> + Send>;

/// One change of a batch: write `object` (its compact JSON text, as `Value` prints it),
/// or remove the file when it is `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct Op<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub name: &'a str,
    pub object: Option<&'a str>,
}

/// An [`Op`] that owns its data, to hand to the [`Writer`] thread.
#[derive(Debug, Clone, PartialEq)]
pub struct OwnedOp {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub object: Option<Box<str>>,
}

impl OwnedOp {
    fn borrowed(&self) -> Op<'_> {
        Op { kind: self.kind, namespace: &self.namespace, name: &self.name, object: self.object.as_deref() }
    }
}

struct Job {
    ops: Vec<OwnedOp>,
    reply: tokio::sync::oneshot::Sender<Vec<Outcome>>,
}

/// The store on its own thread, so fsyncs never block the event loop. Jobs that arrive
/// while a batch is being written are written together as the next batch (group
/// commit): concurrent writes share their directory fsyncs. Jobs must not name an
/// object another job in flight names (the caller serialises writes per object).
#[derive(Clone)]
pub struct Writer {
    tx: std::sync::mpsc::Sender<Job>,
    writes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    batches: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Writer {
    pub fn spawn(mut store: Store) -> io::Result<Writer> {
        use std::sync::atomic::Ordering;
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let writes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(
            usize::try_from(store.writes).unwrap_or(usize::MAX),
        ));
        let batches = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (w, b) = (writes.clone(), batches.clone());
        std::thread::Builder::new().name("nodeportd-store".into()).spawn(move || {
            while let Ok(first) = rx.recv() {
                let mut jobs = vec![first];
                while let Ok(more) = rx.try_recv() {
                    jobs.push(more);
                }
                let ops: Vec<Op<'_>> = jobs.iter().flat_map(|j| j.ops.iter().map(OwnedOp::borrowed)).collect();
                let mut outcomes = store.apply(&ops).into_iter();
                w.store(usize::try_from(store.writes).unwrap_or(usize::MAX), Ordering::Relaxed);
                b.fetch_add(1, Ordering::Relaxed);
                for job in jobs {
                    let mine: Vec<Outcome> = outcomes.by_ref().take(job.ops.len()).collect();
                    let _ = job.reply.send(mine);
                }
            }
        })?;
        Ok(Writer { tx, writes, batches })
    }

    /// Write a batch durably on the store thread; one outcome per op, in order.
    pub async fn write(&self, ops: Vec<OwnedOp>) -> Vec<Outcome> {
        let n = ops.len();
        let (reply, rx) = tokio::sync::oneshot::channel();
        let gone = || (0..n).map(|_| Outcome::NotWritten(StoreError("the store thread is gone".into()))).collect();
        if self.tx.send(Job { ops, reply }).is_err() {
            return gone();
        }
        rx.await.unwrap_or_else(|_| gone())
    }

    /// Files written since start.
    pub fn writes(&self) -> u64 {
        self.writes.load(std::sync::atomic::Ordering::Relaxed) as u64
    }

    /// Batches written since start (each with its shared fsyncs).
    pub fn batches(&self) -> u64 {
        self.batches.load(std::sync::atomic::Ordering::Relaxed) as u64
    }
}

/// What became of one change of a batch.
#[derive(Debug)]
pub enum Outcome {
    /// Durable.
    Done,
    /// Nothing changed on disk (no temp file is left either).
    NotWritten(StoreError),
    /// The file was renamed into place (or removed), so a restart reads the new state,
    /// but the directory fsync failed: durability across a power cut is not confirmed.
    Unconfirmed(StoreError),
}

pub struct Store {
    root: PathBuf,
    /// Number of files written since start (status, tests: "no rewrite when nothing changed").
    pub writes: u64,
    /// Directory fsyncs since start (a batch shares one per directory).
    pub dir_syncs: u64,
    fault: Option<FaultHook>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("root", &self.root).field("writes", &self.writes).finish()
    }
}

/// Names become file names: refuse anything that could escape the directory.
/// Validation already restricts names to DNS labels/subdomains; this is defence in depth.
fn safe_component(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s != "."
        && s != ".."
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

impl Store {
    /// Open (creating if needed) the state directory and read every stored object.
    pub fn open(state_dir: &Path) -> Result<(Store, Vec<Stored>), StoreError> {
        let mut objects = Vec::new();
        let store = Store::open_each(state_dir, |o| {
            let object = o.decode::<Value>()?;
            objects.push(Stored { kind: o.kind, namespace: o.namespace.into(), name: o.name.into(), object });
            Ok(())
        })?;
        Ok((store, objects))
    }

    /// Like [`Store::open`], handing each file to `each` as soon as it is read (in the
    /// same order), so that only one file's bytes exist at a time and `each` decodes them
    /// straight into its own type ([`StoredText::decode`]). An error from `each` stops the
    /// read and is returned as it is.
    pub fn open_each(
        state_dir: &Path,
        mut each: impl FnMut(StoredText<'_>) -> Result<(), StoreError>,
    ) -> Result<Store, StoreError> {
        let root = state_dir.join("objects");
        fs::create_dir_all(&root).map_err(|e| io_err(&root, "cannot create state directory", e))?;
        let mut buf = Vec::new();
        for kind in Kind::ALL {
            let kdir = root.join(kind.dir());
            fs::create_dir_all(&kdir).map_err(|e| io_err(&kdir, "cannot create directory", e))?;
            for ns_name in read_dir_sorted(&kdir)? {
                // One path a directory, each file's name pushed onto it and popped again.
                let mut file = kdir.join(&ns_name);
                if !file.is_dir() {
                    continue;
                }
                let namespace = if kind == Kind::Node { String::new() } else { ns_name.to_string_lossy().into_owned() };
                for fname in read_dir_sorted(&file)? {
                    file.push(&fname);
                    let fname = fname.to_string_lossy();
                    if fname.starts_with('.') && fname.ends_with(".tmp") {
                        // A write that never reached its rename: the old file (if any) is intact.
                        let _ = fs::remove_file(&file);
                    } else if let Some(name) = fname.strip_suffix(".json") {
                        let text = read_text(&file, &mut buf)?;
                        each(StoredText { kind, namespace: &namespace, name, file: &file, text })?;
                    }
                    file.pop();
                }
            }
        }
        Ok(Store { root, writes: 0, dir_syncs: 0, fault: None })
    }

    fn path(&self, kind: Kind, namespace: &str, name: &str) -> Result<(PathBuf, PathBuf), StoreError> {
        if !safe_component(kind.ns_dir(namespace)) || !safe_component(name) {
            return Err(StoreError(format!("refusing to store {namespace:?}/{name:?}: not a valid object name")));
        }
        let dir = self.root.join(kind.dir()).join(kind.ns_dir(namespace));
        let file = dir.join(format!("{name}.json"));
        Ok((dir, file))
    }

    /// Make every later write step pass through `hook` first (tests).
    pub fn set_fault_hook(&mut self, hook: Option<FaultHook>) {
        self.fault = hook;
    }

    fn step(&mut self, step: IoStep, path: &Path) -> io::Result<()> {
        match &mut self.fault {
            Some(hook) => hook(step, path),
            None => Ok(()),
        }
    }

    /// Write one object durably.
    pub fn put(&mut self, kind: Kind, namespace: &str, name: &str, object: &Value) -> Result<(), StoreError> {
        let text = object.to_string();
        single(self.apply(&[Op { kind, namespace, name, object: Some(&text) }]))
    }

    /// Remove one object durably; absent is fine.
    pub fn delete(&mut self, kind: Kind, namespace: &str, name: &str) -> Result<(), StoreError> {
        single(self.apply(&[Op { kind, namespace, name, object: None }]))
    }

    /// Apply a batch of changes with shared fsyncs (group commit): every temp file is
    /// written and fsynced, then all are renamed into place (removals done), then each
    /// directory touched is fsynced once. One outcome per change, in order; a change
    /// that fails before its rename leaves nothing behind, its temp file included.
    /// A batch must not name one object twice.
    pub fn apply(&mut self, ops: &[Op<'_>]) -> Vec<Outcome> {
        let mut out: Vec<Option<Outcome>> = ops.iter().map(|_| None).collect();
        // Phase 1: temp files, each written and fsynced.
        let mut staged: Vec<(usize, PathBuf, PathBuf, PathBuf)> = Vec::new(); // (op, dir, tmp, file)
        let mut removals: Vec<(usize, PathBuf, PathBuf)> = Vec::new(); // (op, dir, file)
        for (i, op) in ops.iter().enumerate() {
            let (dir, file) = match self.path(op.kind, op.namespace, op.name) {
                Ok(x) => x,
                Err(e) => {
                    out[i] = Some(Outcome::NotWritten(e));
                    continue;
                }
            };
            match op.object {
                None => removals.push((i, dir, file)),
                Some(object) => match self.stage(&dir, op.name, object) {
                    Ok(tmp) => staged.push((i, dir, tmp, file)),
                    Err(e) => out[i] = Some(Outcome::NotWritten(e)),
                },
            }
        }
        // Phase 2: into place. From here a restart reads the new state.
        let mut touched: Vec<(PathBuf, Vec<usize>)> = Vec::new();
        let mut touch = |dir: PathBuf, i: usize| match touched.iter_mut().find(|(d, _)| *d == dir) {
            Some((_, v)) => v.push(i),
            None => touched.push((dir, vec![i])),
        };
        for (i, dir, tmp, file) in staged {
            match self.step(IoStep::Rename, &file).and_then(|()| fs::rename(&tmp, &file)) {
                Ok(()) => {
                    self.writes += 1;
                    touch(dir, i);
                }
                Err(e) => {
                    let _ = fs::remove_file(&tmp);
                    out[i] = Some(Outcome::NotWritten(io_err(&file, "cannot rename into place", e)));
                }
            }
        }
        for (i, dir, file) in removals {
            match self.step(IoStep::Remove, &file).and_then(|()| fs::remove_file(&file)) {
                Ok(()) => {
                    self.writes += 1;
                    touch(dir, i);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => out[i] = Some(Outcome::Done),
                Err(e) => out[i] = Some(Outcome::NotWritten(io_err(&file, "cannot remove", e))),
            }
        }
        // Phase 3: one fsync per directory.
        for (dir, members) in touched {
            let r = self.fsync_dir(&dir);
            for i in members {
                out[i] = Some(match &r {
                    Ok(()) => Outcome::Done,
                    Err(e) => Outcome::Unconfirmed(StoreError(e.0.clone())),
                });
            }
        }
        out.into_iter().map(|o| o.unwrap_or_else(|| Outcome::NotWritten(StoreError("not attempted".into())))).collect()
    }

    /// Write and fsync the temp file of one object; on failure nothing is left.
    fn stage(&mut self, dir: &Path, name: &str, object: &str) -> Result<PathBuf, StoreError> {
        if !dir.is_dir() {
            self.step(IoStep::CreateDir, dir)
                .and_then(|()| fs::create_dir_all(dir))
                .map_err(|e| io_err(dir, "cannot create directory", e))?;
            if let Some(parent) = dir.parent() {
                self.fsync_dir(parent)?;
            }
        }
        // What `Envelope` prints, around the object's text.
        let mut bytes = Vec::with_capacity(ENVELOPE_HEAD.len() + object.len() + 1);
        bytes.extend_from_slice(ENVELOPE_HEAD.as_bytes());
        bytes.extend_from_slice(object.as_bytes());
        bytes.push(b'}');
        let tmp = dir.join(format!(".{name}.json.tmp"));
        let r = self.write_temp(&tmp, &bytes);
        if r.is_err() {
            // ENOSPC, EROFS, EIO...: the old file (if any) is intact; leave no temp file.
            let _ = fs::remove_file(&tmp);
        }
        r.map(|()| tmp)
    }

    fn write_temp(&mut self, tmp: &Path, bytes: &[u8]) -> Result<(), StoreError> {
        self.step(IoStep::CreateTemp, tmp).map_err(|e| io_err(tmp, "cannot create", e))?;
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(tmp)
            .map_err(|e| io_err(tmp, "cannot create", e))?;
        self.step(IoStep::WriteTemp, tmp)
            .and_then(|()| f.write_all(bytes))
            .map_err(|e| io_err(tmp, "cannot write", e))?;
        self.step(IoStep::FsyncTemp, tmp).and_then(|()| f.sync_all()).map_err(|e| io_err(tmp, "cannot fsync", e))
    }

    fn fsync_dir(&mut self, dir: &Path) -> Result<(), StoreError> {
        self.dir_syncs += 1;
        self.step(IoStep::FsyncDir, dir)
            .and_then(|()| File::open(dir))
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err(dir, "cannot fsync directory", e))
    }
}

/// The outcome of a one-change batch as a plain result.
fn single(mut v: Vec<Outcome>) -> Result<(), StoreError> {
    match v.pop() {
        Some(Outcome::Done) => Ok(()),
        Some(Outcome::NotWritten(e) | Outcome::Unconfirmed(e)) => Err(e),
        None => Err(StoreError("empty batch".into())),
    }
}

/// The name of the lock file in `state_dir`.
pub const LOCK_FILE: &str = "nodeportd.lock";

/// An exclusive `flock` on `<state_dir>/nodeportd.lock`, held for the daemon's life (the
/// kernel drops it when the process ends, however it ends). The file holds the pid.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
}

/// Take the state directory for this process, or fail at once naming the process that
/// holds it. Must come before anything else touches the directory (`Store::open`
/// removes leftover temp files, which would be the live daemon's writes in progress).
pub fn lock_state_dir(state_dir: &Path) -> Result<StateLock, StoreError> {
    use std::io::{Read, Seek};
    use std::os::fd::AsRawFd;
    fs::create_dir_all(state_dir).map_err(|e| io_err(state_dir, "cannot create state directory", e))?;
    let path = state_dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| io_err(&path, "cannot open lock file", e))?;
    // SAFETY: flock only takes an fd, which `file` keeps open for the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let holder = match text.trim().parse::<u32>() {
                Ok(pid) => format!("nodeportd pid {pid}"),
                Err(_) => "another process".to_string(),
            };
            return Err(StoreError(format!(
                "{}: state directory is in use by {holder} (lock file {}); one daemon per state_dir",
                state_dir.display(),
                path.display()
            )));
        }
        return Err(io_err(&path, "cannot lock", e));
    }
    file.set_len(0).map_err(|e| io_err(&path, "cannot write lock file", e))?;
    file.rewind().map_err(|e| io_err(&path, "cannot write lock file", e))?;
    file.write_all(format!("{}\n", std::process::id()).as_bytes())
        .map_err(|e| io_err(&path, "cannot write lock file", e))?;
    Ok(StateLock { _file: file })
}

/// The names in one directory, sorted: read once and compared as they are (sorting the
/// paths split both into components for every comparison: ~2 % of a start's instructions
/// on a router). A name is one allocation, and no path: the caller joins the one it opens.
fn read_dir_sorted(dir: &Path) -> Result<Vec<std::ffi::OsString>, StoreError> {
    let mut v = Vec::new();
    for ent in fs::read_dir(dir).map_err(|e| io_err(dir, "cannot read directory", e))? {
        let ent = ent.map_err(|e| io_err(dir, "cannot read directory", e))?;
        v.push(ent.file_name());
    }
    v.sort();
    Ok(v)
}

/// Reads one state file as text; `buf` is reused from file to file.
fn read_text<'b>(file: &Path, buf: &'b mut Vec<u8>) -> Result<&'b str, StoreError> {
    let len = read_all(file, buf).map_err(|e| io_err(file, "cannot read state file", e))?;
    // One UTF-8 check of the file, then a parse that need not check every string again.
    std::str::from_utf8(&buf[..len]).map_err(|e| corrupt(file, &format_args!("not UTF-8: {e}")))
}

/// Reads a whole file into `buf` with plain reads, and gives its length: the file is
/// `buf[..len]`. `read_to_end` first asks the file's size and position (two more system
/// calls a file, at start one per stored object). `buf` is never shortened, so its bytes
/// are zeroed once, when it grows, not for every file.
fn read_all(file: &Path, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    use std::io::{ErrorKind, Read};
    const STEP: usize = 4096;
    let mut f = File::open(file)?;
    let mut len = 0;
    loop {
        if buf.len() < len + STEP {
            buf.resize(len + STEP, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => return Ok(len),
            Ok(n) => len += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn corrupt(file: &Path, e: &dyn std::fmt::Display) -> StoreError {
    StoreError(format!("{}: corrupt state file: {e}; fix or remove it", file.display()))
}

/// A state file as read at start, before it is decoded.
#[derive(Debug, Clone, Copy)]
pub struct StoredText<'a> {
    pub kind: Kind,
    pub namespace: &'a str,
    pub name: &'a str,
    pub file: &'a Path,
    /// The whole file (`{"schema": 1, "object": {...}}`), checked as UTF-8.
    pub text: &'a str,
}

impl<'a> StoredText<'a> {
    /// The object's own text, as this version writes state files
    /// (`{"schema":1,"object":...}`, compact); `None` for a file in another layout (edited
    /// by hand, say): its object is still read by [`StoredText::decode`].
    pub fn object_text(&self) -> Option<&'a str> {
        let t = self.text.strip_prefix(ENVELOPE_HEAD)?.strip_suffix('}')?;
        (t.starts_with('{') && t.ends_with('}')).then_some(t)
    }

    /// The object, parsed from the text straight into `T` (no JSON tree in between), or
    /// an error naming the file and, for a type error, the field's path.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, StoreError> {
        let schema_err = |schema: u32| {
            StoreError(format!(
                "{}: state schema {schema} is not supported by this version (expects {SCHEMA})",
                self.file.display()
            ))
        };
        match crate::model::parse::decode_str::<Envelope<T>>(self.text) {
            Ok(env) if env.schema == SCHEMA => Ok(env.object),
            Ok(env) => Err(schema_err(env.schema)),
            Err(e) => {
                // Another schema's object need not decode as this one: name the schema.
                match serde_json::from_str::<Envelope<serde::de::IgnoredAny>>(self.text) {
                    Ok(env) if env.schema != SCHEMA => Err(schema_err(env.schema)),
                    // The path is the object's, as in the file's `object`.
                    _ => Err(corrupt(self.file, &e.strip_prefix("object.").unwrap_or(&e))),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_written_file_gives_its_objects_text() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Store::open(dir.path()).unwrap();
        let obj = json!({"metadata": {"name": "web", "labels": {"a": "}"}}, "spec": {"ports": [{"port": 80}]}});
        s.put(Kind::Service, "default", "web", &obj).unwrap();
        let f = dir.path().join("objects/services/default/web.json");
        // The layout `Envelope` prints.
        let env = serde_json::to_string(&Envelope { schema: SCHEMA, object: &obj }).unwrap();
        assert_eq!(fs::read_to_string(&f).unwrap(), env);
        let texts = |dir: &Path| {
            let mut texts = Vec::new();
            Store::open_each(dir, |o| {
                texts.push(o.object_text().map(str::to_string));
                Ok(())
            })
            .unwrap();
            texts
        };
        assert_eq!(texts(dir.path()), [Some(obj.to_string())]);
        // Another layout (spaces, another key order) has no object text, only an object.
        fs::write(&f, br#"{"schema": 1, "object": {"metadata": {"name": "web"}}}"#).unwrap();
        fs::write(dir.path().join("objects/services/default/b.json"), br#"{"object":{},"schema":1}"#).unwrap();
        assert_eq!(texts(dir.path()), [None, None]);
    }

    #[test]
    fn put_read_delete_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, objs) = Store::open(dir.path()).unwrap();
        assert!(objs.is_empty());
        s.put(Kind::Service, "default", "web", &json!({"metadata": {"name": "web"}})).unwrap();
        s.put(Kind::EndpointSlice, "kube-system", "dns-abc.x", &json!({"a": 1})).unwrap();
        let (mut s2, objs) = Store::open(dir.path()).unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[0].kind, Kind::Service);
        assert_eq!(objs[0].name, "web");
        assert_eq!(objs[1].namespace, "kube-system");
        assert_eq!(objs[1].name, "dns-abc.x");
        s2.delete(Kind::Service, "default", "web").unwrap();
        s2.delete(Kind::Service, "default", "web").unwrap();
        let (_, objs) = Store::open(dir.path()).unwrap();
        assert_eq!(objs.len(), 1);
    }

    #[test]
    fn read_all_reads_whole_files_of_any_length_into_one_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let mut buf = b"left over".to_vec();
        // Longer, shorter, then longer again than the buffer already is.
        for len in [0usize, 1, 4095, 70_001, 4096, 4097, 100, 80_000] {
            let f = dir.path().join(format!("{len}"));
            let data: Vec<u8> = (0..len).map(|i| u8::try_from((i + len) % 251).unwrap()).collect();
            fs::write(&f, &data).unwrap();
            let n = read_all(&f, &mut buf).unwrap();
            assert_eq!(&buf[..n], &data[..], "{len} bytes");
        }
        let e = read_all(&dir.path().join("absent"), &mut buf).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn open_each_hands_objects_over_in_order_and_stops_at_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Store::open(dir.path()).unwrap();
        for name in ["b", "a", "c"] {
            s.put(Kind::Service, "default", name, &json!({"n": name})).unwrap();
        }
        let mut seen = Vec::new();
        Store::open_each(dir.path(), |o| {
            seen.push(o.name.to_string());
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, ["a", "b", "c"]);
        seen.clear();
        let e = Store::open_each(dir.path(), |o| {
            seen.push(o.name.to_string());
            if o.name == "b" {
                return Err(StoreError(format!("{}: refused", o.name)));
            }
            Ok(())
        })
        .unwrap_err();
        assert_eq!(e.0, "b: refused");
        assert_eq!(seen, ["a", "b"], "nothing is read after the error");
    }

    #[test]
    fn open_each_walks_namespaces_in_order_and_names_each_file() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Store::open(dir.path()).unwrap();
        for (ns, name) in [("zeta", "a"), ("alpha", "b"), ("alpha", "a"), ("mid", "x")] {
            s.put(Kind::Service, ns, name, &json!({"n": name})).unwrap();
        }
        s.put(Kind::Node, "", "n1", &json!({})).unwrap();
        let services = dir.path().join("objects/services");
        // A stray file where namespaces are, a write cut short, a name that is not UTF-8.
        fs::write(services.join("stray.json"), b"{}").unwrap();
        fs::write(services.join("mid/.x.json.tmp"), b"{partial").unwrap();
        let odd = services.join("mid").join(std::ffi::OsStr::from_bytes(b"\xffodd.json"));
        fs::copy(services.join("mid/x.json"), &odd).unwrap();
        let mut seen = Vec::new();
        Store::open_each(dir.path(), |o| {
            // The path is the file the text was read from.
            assert_eq!(fs::read_to_string(o.file).unwrap(), o.text, "{}", o.file.display());
            seen.push(format!("{:?} {}/{}", o.kind, o.namespace, o.name));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            [
                "Service alpha/a",
                "Service alpha/b",
                "Service mid/x",
                "Service mid/\u{FFFD}odd",
                "Service zeta/a",
                "Node /n1"
            ]
        );
        assert!(!services.join("mid/.x.json.tmp").exists(), "the leftover is removed");
        assert!(odd.exists() && services.join("stray.json").exists(), "the rest is left alone");
    }

    #[test]
    fn corrupt_file_is_named_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Store::open(dir.path()).unwrap();
        s.put(Kind::Service, "default", "web", &json!({})).unwrap();
        let f = dir.path().join("objects/services/default/web.json");
        fs::write(&f, b"{not json").unwrap();
        let e = Store::open(dir.path()).unwrap_err();
        assert!(e.0.contains("objects/services/default/web.json") && e.0.contains("corrupt"), "{e}");
        assert_eq!(fs::read(&f).unwrap(), b"{not json");
        // Not UTF-8: the same, and the error says so.
        fs::write(&f, b"{\"schema\":1,\"object\":{\"kind\":\"\xc3\"}}").unwrap();
        let e = Store::open(dir.path()).unwrap_err();
        assert!(e.0.contains("objects/services/default/web.json: corrupt state file: not UTF-8"), "{e}");
        assert_eq!(fs::read(&f).unwrap(), b"{\"schema\":1,\"object\":{\"kind\":\"\xc3\"}}");
    }

    #[test]
    fn future_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Store::open(dir.path()).unwrap();
        s.put(Kind::Service, "default", "web", &json!({})).unwrap();
        let f = dir.path().join("objects/services/default/web.json");
        fs::write(&f, br#"{"schema": 99, "object": {}}"#).unwrap();
        let e = Store::open(dir.path()).unwrap_err();
        assert!(e.0.contains("schema 99"), "{e}");
    }

    #[test]
    fn leftover_temp_files_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Store::open(dir.path()).unwrap();
        s.put(Kind::Service, "default", "web", &json!({"v": 1})).unwrap();
        fs::write(dir.path().join("objects/services/default/.web.json.tmp"), b"{partial").unwrap();
        let (_, objs) = Store::open(dir.path()).unwrap();
        assert_eq!(objs.len(), 1);
        assert_eq!(objs[0].object, json!({"v": 1}));
    }

    #[test]
    fn the_state_lock_is_exclusive_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let lock = lock_state_dir(dir.path()).unwrap();
        let text = fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
        // flock locks belong to the open file description: a second open in this
        // process conflicts just like another process would.
        let e = lock_state_dir(dir.path()).unwrap_err();
        assert!(e.0.contains(&format!("nodeportd pid {}", std::process::id())), "{e}");
        drop(lock);
        lock_state_dir(dir.path()).unwrap();
    }

    /// Group commit: jobs that arrive while a batch is being written go together in the
    /// next batch; the caller's thread never waits for the disk but in `write().await`.
    #[test]
    fn the_writer_thread_batches_concurrent_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = Store::open(dir.path()).unwrap();
        let gate = std::sync::Arc::new(std::sync::Mutex::new(()));
        let held = gate.lock().unwrap();
        let g = gate.clone();
        // The first directory fsync waits for the test to open the gate.
        store.set_fault_hook(Some(Box::new(move |step: IoStep, _p: &Path| {
            if step == IoStep::FsyncDir {
                drop(g.lock().unwrap());
            }
            Ok(())
        })));
        let w = Writer::spawn(store).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let op = |name: &str| OwnedOp {
            kind: Kind::Service,
            namespace: "default".into(),
            name: name.into(),
            object: Some(json!({"n": name}).to_string().into()),
        };
        let outcomes = rt.block_on(async {
            let first = tokio::spawn({
                let w = w.clone();
                let o = op("a");
                async move { w.write(vec![o]).await }
            });
            // Let the first job reach the blocked fsync, then queue ten more.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let rest: Vec<_> = (0..10)
                .map(|i| {
                    let w = w.clone();
                    let o = op(&format!("b{i}"));
                    tokio::spawn(async move { w.write(vec![o]).await })
                })
                .collect();
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            assert_eq!(w.batches(), 0, "the first batch is still waiting on its fsync");
            drop(held);
            let mut all = vec![first.await.unwrap()];
            for r in rest {
                all.push(r.await.unwrap());
            }
            all
        });
        assert!(outcomes.iter().flatten().all(|o| matches!(o, Outcome::Done)));
        assert_eq!(w.writes(), 11);
        assert_eq!(w.batches(), 2, "the ten jobs queued behind the first must share one batch");
        let (_, objs) = Store::open(dir.path()).unwrap();
        assert_eq!(objs.len(), 11);
    }

    #[test]
    fn path_escapes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Store::open(dir.path()).unwrap();
        for (ns, name) in [("..", "x"), ("default", "../x"), ("default", "a/b"), ("", "x")] {
            assert!(s.put(Kind::Service, ns, name, &json!({})).is_err(), "{ns}/{name}");
        }
    }
}
