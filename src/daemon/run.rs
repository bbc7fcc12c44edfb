//! Start-up and the event loop. Everything runs on one thread (tokio current-thread
//! runtime + LocalSet); state is shared through `Rc<RefCell<State>>` and never held
//! across an await.

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;

use crate::model::Key;
use std::time::{Duration, Instant};

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{watch, Notify};

use super::node::NodeState;
use super::sync::DataplaneStatus;
use super::Args;
use crate::api::{self, server};
use crate::config::Config;
use crate::model::{EndpointSlice, Endpoints, EndpointsObject, Node, Service};
use crate::registry::{Registry, Squeezed};
use crate::store::{Kind, Store, StoreError, StoredText};

/// Everything the daemon knows.
pub struct State {
    pub cfg: Config,
    pub registry: Registry,
    /// The store, on its own thread.
    pub store: crate::store::Writer,
    /// Objects with a write in flight.
    pub writing: Rc<super::handlers::WriteLocks>,
    pub node: NodeState,
    pub dataplane: DataplaneStatus,
    /// The `healthCheckNodePort` listeners.
    pub health: super::health::HealthChecks,
    pub dry_run: bool,
    pub started: Instant,
    /// Services whose data plane pieces must be rebuilt at the next sync.
    pub dirty: BTreeSet<Key>,
    /// Set when the node addresses changed (only the nodeport-ips sets follow).
    pub node_changed: bool,
    /// Set when the next sync must rebuild every service's objects (start, reload, after
    /// a failure); the worker then compares the whole table with the kernel's.
    pub full_resync: bool,
    /// Set when the next sync must compare the kernel's table with the desired one
    /// (the resync timer): it repairs drift by difference.
    pub check_kernel: bool,
    pub wake: Rc<Notify>,
    /// Events for the native ubus object (`super::ubus`).
    pub ubus: crate::ubus::Events,
    /// Cluster mode's connection (None: not configured).
    pub cluster: Option<super::cluster::ClusterStatus>,
    /// Routes to the Nodes' pod CIDRs (`pod_routes`).
    pub pod_routes: super::pod_routes::PodRoutes,
}

impl State {
    pub fn service_changed(&mut self, ns: &str, name: &str) {
        self.dirty.insert(Key::new(ns, name));
        self.health.service_changed(Key::new(ns, name));
        self.wake.notify_one();
    }
    pub fn endpoints_changed(&mut self, obj: &EndpointsObject) {
        for key in super::handlers::services_of(obj) {
            self.health.service_changed(key.clone());
            self.dirty.insert(key);
        }
        self.wake.notify_one();
    }
    /// A Node was applied or deleted: the pod routes follow.
    pub fn nodes_changed(&mut self) {
        self.pod_routes.wake();
    }
    /// The resync timer: look for drift nobody told us about.
    pub fn request_check(&mut self) {
        self.check_kernel = true;
        self.health.recheck_all();
        self.wake.notify_one();
    }
    pub fn request_full_resync(&mut self) {
        self.full_resync = true;
        self.health.recheck_all();
        self.wake.notify_one();
    }
}

/// The typed objects the store read back, with their texts where known.
type Decoded = (Vec<(Service, Option<Squeezed>)>, Vec<(EndpointsObject, Option<Squeezed>)>, Vec<Node>);

/// Decodes one file the store read back, as soon as it is read, straight from its text
/// (only one file's bytes exist at a time); a file that no longer decodes stops the
/// daemon with its name (it is never overwritten).
fn decode_stored(o: StoredText<'_>, into: &mut Decoded) -> Result<(), StoreError> {
    let (services, endpoints, nodes) = into;
    // The registry keeps the text (squeezed at once: a start holds every object typed
    // besides) once the first sync has the typed objects ([`Registry::pack`]).
    let text = || o.object_text().map(Squeezed::new);
    match o.kind {
        Kind::Service => services.push((o.decode::<Service>()?.compacted(), text())),
        Kind::Endpoints => endpoints.push((EndpointsObject::Endpoints(o.decode::<Endpoints>()?.compacted()), None)),
        Kind::EndpointSlice => {
            endpoints.push((EndpointsObject::Slice(o.decode::<EndpointSlice>()?.compacted()), text()))
        }
        Kind::Node => nodes.push(o.decode::<Node>()?),
    }
    Ok(())
}

/// A dry run's private state directory, removed when the daemon stops.
struct DryRunDir(std::path::PathBuf);

impl Drop for DryRunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The rule for `--dry-run` (docs/extensions.md): it uses a state_dir given explicitly
/// (`--state-dir`, or a config `state_dir` other than the built-in default); otherwise it
/// keeps its state in a private temporary directory, so trying the daemon out never
/// touches the router's real state.
fn dry_run_state_dir(args: &Args, cfg: &Config) -> Option<std::path::PathBuf> {
    let default = std::path::Path::new(crate::config::DEFAULT_STATE_DIR);
    (args.dry_run && args.state_dir.is_none() && cfg.state_dir == default)
        .then(|| std::env::temp_dir().join(format!("nodeportd-dry-run-{}", std::process::id())))
}

pub fn run(args: Args, mut cfg: Config, started: Instant) -> Result<(), String> {
    let _dry_dir = match dry_run_state_dir(&args, &cfg) {
        Some(dir) => {
            log::info!("--dry-run without an explicit state_dir: state kept in {} until exit", dir.display());
            cfg.state_dir = dir.clone();
            Some(DryRunDir(dir))
        }
        None => None,
    };
    // First the lock: nothing (not even removing leftover temp files) may touch a state
    // directory another daemon is using.
    let _lock = crate::store::lock_state_dir(&cfg.state_dir).map_err(|e| e.to_string())?;
    let mut decoded: Decoded = Default::default();
    let store = Store::open_each(&cfg.state_dir, |o| decode_stored(o, &mut decoded)).map_err(|e| e.to_string())?;
    let (services, endpoints, nodes) = decoded;
    let n_services = services.len();
    let (mut registry, problems) =
        Registry::restore_stored(cfg.node_port_range, &cfg.service_cidrs, services, endpoints);
    registry.restore_nodes(nodes);
    for p in &problems {
        log::warn!("state: {p}");
    }
    let group = match &cfg.socket_group {
        Some(g) => Some(api::peer::lookup_group(g).ok_or_else(|| format!("socket_group: unknown group {g:?}"))?),
        None => None,
    };
    // Credentials are checked before anything starts: a bad CA or a key others can read stops here.
    #[cfg(feature = "cluster")]
    let cluster = match &cfg.cluster {
        Some(c) => Some(super::cluster::start(c)?),
        None => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the event loop: {e}"))?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        // The data plane worker thread owns the kernel; starting it fails without nf_tables.
        let (worker, outcomes) = super::sync::Worker::start(&cfg, args.dry_run).await?;
        let wake = Rc::new(Notify::new());
        let (mut ubus_events, ubus_rx) = crate::ubus::Events::channel();
        if cfg.ubus == crate::ubus::Setting::Off {
            ubus_events = crate::ubus::Events::off();
        }
        let node = NodeState::start(&cfg, args.dry_run, wake.clone()).await;
        let store = crate::store::Writer::spawn(store).map_err(|e| format!("cannot start the store thread: {e}"))?;
        let st = Rc::new(RefCell::new(State {
            registry,
            store,
            writing: Rc::default(),
            node,
            dataplane: DataplaneStatus::new(),
            health: super::health::HealthChecks::new(),
            dry_run: args.dry_run,
            started,
            dirty: BTreeSet::new(),
            full_resync: true,
            check_kernel: false,
            node_changed: false,
            wake: wake.clone(),
            ubus: ubus_events,
            cluster: None,
            pod_routes: Default::default(),
            cfg: cfg.clone(),
        }));
        #[cfg(feature = "cluster")]
        if let (Some((streams, rx)), Some(c)) = (cluster, &cfg.cluster) {
            st.borrow_mut().cluster = Some(super::cluster::ClusterStatus::new(&c.server, &streams));
            log::info!("cluster mode: following {} ({} streams)", c.server, streams.len());
            tokio::task::spawn_local(super::cluster::run(st.clone(), streams, rx));
        }

        let listener = server::bind(&cfg.socket, group).map_err(|e| format!("{}: {e}", cfg.socket.display()))?;
        let limits = server::Limits {
            max_request_bytes: cfg.max_request_bytes,
            max_connections: cfg.max_connections,
            idle_timeout: Duration::from_secs(cfg.idle_timeout_seconds),
            first_request_timeout: server::FIRST_REQUEST_TIMEOUT,
        };
        let handler_state = st.clone();
        let handler: server::Handler = Rc::new(move |method, params, _cred| {
            Box::pin(super::handlers::call(handler_state.clone(), method.to_string(), params))
        });
        tokio::task::spawn_local(server::serve(listener, handler, limits, group));

        // Status LED: on = in sync, blinking = out of sync, off = stopped.
        let (led_tx, led_rx) = watch::channel(crate::led::LedState::OutOfSync);
        if let Some(name) = cfg.status_led.clone() {
            if let Some(pin) = crate::led::SysfsLed::open_or_warn(std::path::Path::new(crate::led::SYSFS_LEDS), &name) {
                tokio::task::spawn_local(crate::led::run(pin, led_rx));
            }
        }

        super::ubus::spawn(&st, ubus_rx, led_tx.subscribe());
        tokio::task::spawn_local(super::sync::sync_loop(st.clone(), worker, outcomes, led_tx.clone()));
        // The restored objects must reach the kernel now, not at the first API call or
        // resync tick: `full_resync` is already set, the loop only needs waking.
        wake.notify_one();
        super::node::spawn_watchers(st.clone());
        #[cfg(feature = "pod-routes")]
        super::pod_routes::spawn(st.clone());
        tokio::task::spawn_local(super::health::run(st.clone()));

        log::info!(
            "nodeportd {} started in {} ms: {} services restored, socket {}, table inet {}{}",
            crate::VERSION,
            started.elapsed().as_millis(),
            n_services,
            cfg.socket.display(),
            cfg.table,
            if args.dry_run { " (dry run)" } else { "" }
        );

        let mut hup = signal(SignalKind::hangup()).map_err(|e| format!("SIGHUP handler: {e}"))?;
        let mut term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM handler: {e}"))?;
        let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT handler: {e}"))?;
        let mut resync = tokio::time::interval(Duration::from_secs(cfg.resync_interval_seconds));
        resync.tick().await;
        loop {
            tokio::select! {
                _ = hup.recv() => reload(&st, &args).await,
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = resync.tick() => {
                    // The slow timer repairs drift nobody told us about, by difference.
                    st.borrow_mut().request_check();
                }
            }
        }
        let _ = led_tx.send(crate::led::LedState::Off);
        tokio::task::yield_now().await;
        let path = st.borrow().cfg.socket.clone();
        let _ = std::fs::remove_file(path);
        log::info!("stopping; the programmed rules stay in place (nodeportd --cleanup removes them)");
        Ok::<(), String>(())
    })
}

/// SIGHUP: re-read the config. What cannot change live is refused with a logged reason
/// and the old config stays.
async fn reload(st: &Rc<RefCell<State>>, args: &Args) {
    let mut new = match args.effective_config() {
        Ok(c) => c,
        Err(e) => {
            log::error!("reload refused, keeping the old config: {e}");
            return;
        }
    };
    if let Some(dir) = dry_run_state_dir(args, &new) {
        new.state_dir = dir;
    }
    // A new registry must not see changes prepared in the old one: wait for writes in
    // flight (then nothing awaits until the swap).
    let writing = st.borrow().writing.clone();
    writing.wait_idle().await;
    let mut s = st.borrow_mut();
    let old = s.cfg.clone();
    for (what, changed) in [
        ("socket", new.socket != old.socket),
        ("socket_group", new.socket_group != old.socket_group),
        ("state_dir", new.state_dir != old.state_dir),
        ("table", new.table != old.table),
        ("ubus", new.ubus != old.ubus),
        ("cluster", new.cluster != old.cluster),
    ] {
        if changed {
            log::error!(
                "reload refused, keeping the old config: {what} cannot change while running (restart the daemon)"
            );
            return;
        }
    }
    if new.node_port_range != old.node_port_range || new.service_cidrs != old.service_cidrs {
        match s.registry.reconfigure(new.node_port_range, &new.service_cidrs) {
            Ok(r) => s.registry = r,
            Err(e) => {
                log::error!("reload refused, keeping the old config: {e}");
                return;
            }
        }
    }
    crate::logging::set_level(new.log_level);
    let node_changed = new.nodeport_addresses != old.nodeport_addresses || new.node_ips != old.node_ips;
    s.cfg = new;
    if node_changed {
        let cfg = s.cfg.clone();
        s.node.reconfigure(&cfg);
    }
    s.request_full_resync();
    s.pod_routes.wake();
    log::info!("configuration reloaded");
}
