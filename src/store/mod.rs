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

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const SCHEMA: u32 = 1;

/// The kinds of stored objects, one directory each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Service,
    Endpoints,
    EndpointSlice,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Service, Kind::Endpoints, Kind::EndpointSlice];
    fn dir(self) -> &'static str {
        match self {
            Kind::Service => "services",
            Kind::Endpoints => "endpoints",
            Kind::EndpointSlice => "endpointslices",
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

#[derive(Serialize, Deserialize)]
struct Envelope {
    schema: u32,
    object: Value,
}

/// An object read back at start.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    pub object: Value,
}

#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    /// Number of files written since start (status, tests: "no rewrite when nothing changed").
    pub writes: u64,
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
        let root = state_dir.join("objects");
        fs::create_dir_all(&root).map_err(|e| io_err(&root, "cannot create state directory", e))?;
        let mut objects = Vec::new();
        for kind in Kind::ALL {
            let kdir = root.join(kind.dir());
            fs::create_dir_all(&kdir).map_err(|e| io_err(&kdir, "cannot create directory", e))?;
            let mut namespaces: Vec<PathBuf> = read_dir_sorted(&kdir)?;
            namespaces.retain(|p| p.is_dir());
            for nsdir in namespaces {
                let namespace = file_name(&nsdir);
                for file in read_dir_sorted(&nsdir)? {
                    let fname = file_name(&file);
                    if fname.starts_with('.') && fname.ends_with(".tmp") {
                        // A write that never reached its rename: the old file (if any) is intact.
                        let _ = fs::remove_file(&file);
                        continue;
                    }
                    let Some(name) = fname.strip_suffix(".json") else { continue };
                    let object = read_object(&file)?;
                    objects.push(Stored { kind, namespace: namespace.clone(), name: name.to_string(), object });
                }
            }
        }
        Ok((Store { root, writes: 0 }, objects))
    }

    fn path(&self, kind: Kind, namespace: &str, name: &str) -> Result<(PathBuf, PathBuf), StoreError> {
        if !safe_component(namespace) || !safe_component(name) {
            return Err(StoreError(format!("refusing to store {namespace:?}/{name:?}: not a valid object name")));
        }
        let dir = self.root.join(kind.dir()).join(namespace);
        let file = dir.join(format!("{name}.json"));
        Ok((dir, file))
    }

    /// Write one object durably.
    pub fn put(&mut self, kind: Kind, namespace: &str, name: &str, object: &Value) -> Result<(), StoreError> {
        let (dir, file) = self.path(kind, namespace, name)?;
        if !dir.is_dir() {
            fs::create_dir_all(&dir).map_err(|e| io_err(&dir, "cannot create directory", e))?;
            if let Some(parent) = dir.parent() {
                fsync_dir(parent)?;
            }
        }
        let env = Envelope { schema: SCHEMA, object: object.clone() };
        let bytes =
            serde_json::to_vec(&env).map_err(|e| StoreError(format!("cannot encode {namespace}/{name}: {e}")))?;
        let tmp = dir.join(format!(".{name}.json.tmp"));
        {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&tmp)
                .map_err(|e| io_err(&tmp, "cannot create", e))?;
            f.write_all(&bytes).map_err(|e| io_err(&tmp, "cannot write", e))?;
            f.sync_all().map_err(|e| io_err(&tmp, "cannot fsync", e))?;
        }
        fs::rename(&tmp, &file).map_err(|e| io_err(&file, "cannot rename into place", e))?;
        fsync_dir(&dir)?;
        self.writes += 1;
        Ok(())
    }

    /// Remove one object durably; absent is fine.
    pub fn delete(&mut self, kind: Kind, namespace: &str, name: &str) -> Result<(), StoreError> {
        let (dir, file) = self.path(kind, namespace, name)?;
        match fs::remove_file(&file) {
            Ok(()) => {
                fsync_dir(&dir)?;
                self.writes += 1;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&file, "cannot remove", e)),
        }
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let mut v = Vec::new();
    for ent in fs::read_dir(dir).map_err(|e| io_err(dir, "cannot read directory", e))? {
        v.push(ent.map_err(|e| io_err(dir, "cannot read directory", e))?.path());
    }
    v.sort();
    Ok(v)
}

fn read_object(file: &Path) -> Result<Value, StoreError> {
    let bytes = fs::read(file).map_err(|e| io_err(file, "cannot read state file", e))?;
    let env: Envelope = serde_json::from_slice(&bytes)
        .map_err(|e| StoreError(format!("{}: corrupt state file: {e}; fix or remove it", file.display())))?;
    if env.schema != SCHEMA {
        return Err(StoreError(format!(
            "{}: state schema {} is not supported by this version (expects {SCHEMA})",
            file.display(),
            env.schema
        )));
    }
    Ok(env.object)
}

fn fsync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_err(dir, "cannot fsync directory", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn corrupt_file_is_named_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Store::open(dir.path()).unwrap();
        s.put(Kind::Service, "default", "web", &json!({})).unwrap();
        let f = dir.path().join("objects/services/default/web.json");
        fs::write(&f, b"{not json").unwrap();
        let e = Store::open(dir.path()).unwrap_err();
        assert!(e.0.contains("objects/services/default/web.json") && e.0.contains("corrupt"), "{e}");
        assert_eq!(fs::read(&f).unwrap(), b"{not json");
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
    fn path_escapes_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _) = Store::open(dir.path()).unwrap();
        for (ns, name) in [("..", "x"), ("default", "../x"), ("default", "a/b"), ("", "x")] {
            assert!(s.put(Kind::Service, ns, name, &json!({})).is_err(), "{ns}/{name}");
        }
    }
}
