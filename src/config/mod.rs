//! The daemon's configuration: read in one place, validated, handed down as plain structs.
//!
//! TOML is the format (`configs/`); on OpenWrt the same keys come from UCI
//! (`/etc/config/nodeportd`, see `uci`). Every key is optional; unknown keys and bad
//! values are errors that name the key and the value.

mod toml_out;
pub mod uci;

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde::Deserialize;
#[cfg(test)]
use serde::Serialize;

pub const DEFAULT_CONFIG: &str = "/etc/nodeportd/nodeportd.toml";
pub const DEFAULT_SOCKET: &str = "/var/run/nodeportd/nodeportd.sock";
pub const DEFAULT_STATE_DIR: &str = "/etc/nodeportd";
/// Room for 100 persistent clients, a few short-lived ones and root's reserved slot.
pub const DEFAULT_MAX_CONNECTIONS: i64 = 128;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

fn bad(key: &str, value: impl fmt::Display, why: impl fmt::Display) -> ConfigError {
    ConfigError(format!("{key}: invalid value {value}: {why}"))
}

/// The file as written: every key optional, unknown keys refused.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(test, derive(Serialize))]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub node_name: Option<String>,
    pub node_ip: Option<OneOrMany>,
    pub socket: Option<String>,
    pub socket_group: Option<String>,
    pub state_dir: Option<String>,
    pub service_node_port_range: Option<String>,
    pub service_cluster_ip_ranges: Option<Vec<String>>,
    pub nodeport_addresses: Option<Vec<String>>,
    pub table: Option<String>,
    pub masquerade_bit: Option<i64>,
    pub ct_mark_bit: Option<i64>,
    pub status_led: Option<String>,
    pub log_level: Option<String>,
    pub max_request_bytes: Option<i64>,
    pub max_connections: Option<i64>,
    pub idle_timeout_seconds: Option<i64>,
    pub resync_interval_seconds: Option<i64>,
    pub ubus: Option<String>,
    pub pod_routes: Option<bool>,
    /// Cluster mode (a TOML table: keep it the last field, tables follow plain keys).
    pub cluster: Option<RawCluster>,
}

/// A `[cluster]` table in a build without cluster mode: noticed (and refused by
/// [`Config::from_raw`]), not read, so the base build carries no decoder for it.
#[cfg(not(feature = "cluster"))]
#[derive(Debug, Clone, Default)]
pub struct RawCluster;

#[cfg(not(feature = "cluster"))]
impl<'de> Deserialize<'de> for RawCluster {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| RawCluster)
    }
}

#[cfg(all(test, not(feature = "cluster")))]
impl Serialize for RawCluster {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        s.serialize_map(Some(0))?.end()
    }
}

/// What a build without the `pod-routes` feature says about `pod_routes = true`.
#[cfg(not(feature = "pod-routes"))]
pub const NO_POD_ROUTES: &str =
    "pod_routes: Invalid value: true: this build has no pod routes (install the nodeportd-cluster package, or build with --features pod-routes)";

/// What a base build says about a `[cluster]` table.
#[cfg(not(feature = "cluster"))]
pub const NO_CLUSTER_MODE: &str =
    "cluster: this build has no cluster mode (install the nodeportd-cluster package, or build with --features cluster)";

/// `[cluster]`: the API server to mirror (docs/cluster.md).
#[cfg(feature = "cluster")]
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(test, derive(Serialize))]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    pub server: Option<String>,
    pub ca_file: Option<String>,
    pub token_file: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    pub namespaces: Option<Vec<String>>,
    pub label_selector: Option<String>,
    pub watch_timeout_seconds: Option<i64>,
    pub request_timeout_seconds: Option<i64>,
}

/// How the daemon proves who it is to the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterAuth {
    /// A bearer token (a ServiceAccount token), re-read for every request (rotation).
    Token(PathBuf),
    /// A client certificate and its key.
    Cert { cert: PathBuf, key: PathBuf },
}

/// The effective `[cluster]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    pub server: String,
    pub ca_file: PathBuf,
    pub auth: ClusterAuth,
    /// Empty: every namespace.
    pub namespaces: Vec<String>,
    /// Added to kube-proxy's selector for Services.
    pub label_selector: Option<String>,
    /// How long one watch request runs before it is renewed.
    pub watch_timeout_seconds: u32,
    /// Connect, list and silence limit of a request.
    pub request_timeout_seconds: u32,
}

#[cfg(feature = "cluster")]
impl ClusterConfig {
    pub fn from_raw(raw: RawCluster) -> Result<ClusterConfig, ConfigError> {
        let server = raw.server.ok_or_else(|| ConfigError("cluster.server: Required value".into()))?;
        crate::cluster::http::ServerUrl::parse(&server)
            .map_err(|e| bad("cluster.server", format_args!("{server:?}"), e))?;
        let file = |key: &str, v: Option<String>| -> Result<Option<PathBuf>, ConfigError> {
            match v {
                None => Ok(None),
                Some(p) if p.starts_with('/') => Ok(Some(PathBuf::from(p))),
                Some(p) => Err(bad(key, format_args!("{p:?}"), "must be an absolute path")),
            }
        };
        let ca_file = file("cluster.ca_file", raw.ca_file)?
            .ok_or_else(|| ConfigError("cluster.ca_file: Required value (the API server's CA, PEM)".into()))?;
        let token = file("cluster.token_file", raw.token_file)?;
        let cert = file("cluster.cert_file", raw.cert_file)?;
        let key = file("cluster.key_file", raw.key_file)?;
        let auth = match (token, cert, key) {
            (Some(t), None, None) => ClusterAuth::Token(t),
            (None, Some(cert), Some(key)) => ClusterAuth::Cert { cert, key },
            (None, None, None) => {
                return Err(ConfigError(
                    "cluster: token_file or cert_file + key_file: Required value (how to log in to the API server)"
                        .into(),
                ))
            }
            (Some(_), _, _) => {
                return Err(ConfigError("cluster.token_file: give either token_file or cert_file + key_file".into()))
            }
            (None, Some(_), None) => return Err(ConfigError("cluster.key_file: Required value with cert_file".into())),
            (None, None, Some(_)) => return Err(ConfigError("cluster.cert_file: Required value with key_file".into())),
        };
        let namespaces = raw.namespaces.unwrap_or_default();
        for ns in &namespaces {
            let ok = !ns.is_empty()
                && ns.len() <= 63
                && ns.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !ns.starts_with('-')
                && !ns.ends_with('-');
            if !ok {
                return Err(bad("cluster.namespaces", format_args!("{ns:?}"), "not a namespace name (RFC 1123 label)"));
            }
        }
        let mut uniq = namespaces.clone();
        uniq.sort();
        uniq.dedup();
        let label_selector = raw.label_selector.filter(|s| !s.trim().is_empty());
        if let Some(s) = &label_selector {
            if s.chars().any(char::is_control) {
                return Err(bad("cluster.label_selector", format_args!("{s:?}"), "control characters"));
            }
        }
        Ok(ClusterConfig {
            server,
            ca_file,
            auth,
            namespaces: uniq,
            label_selector,
            watch_timeout_seconds: int_as("cluster.watch_timeout_seconds", raw.watch_timeout_seconds, 300, 1, 3600)?,
            request_timeout_seconds: int_as(
                "cluster.request_timeout_seconds",
                raw.request_timeout_seconds,
                30,
                1,
                600,
            )?,
        })
    }

    pub fn to_raw(&self) -> RawCluster {
        let path = |p: &Path| Some(p.display().to_string());
        let (token_file, cert_file, key_file) = match &self.auth {
            ClusterAuth::Token(t) => (path(t), None, None),
            ClusterAuth::Cert { cert, key } => (None, path(cert), path(key)),
        };
        RawCluster {
            server: Some(self.server.clone()),
            ca_file: path(&self.ca_file),
            token_file,
            cert_file,
            key_file,
            namespaces: (!self.namespaces.is_empty()).then(|| self.namespaces.clone()),
            label_selector: self.label_selector.clone(),
            watch_timeout_seconds: Some(self.watch_timeout_seconds.into()),
            request_timeout_seconds: Some(self.request_timeout_seconds.into()),
        }
    }
}

impl RawConfig {
    /// The keys that are set, in the order of the fields, as `toml::to_string` wrote them.
    fn to_toml(&self) -> String {
        let mut d = toml_out::Doc::default();
        d.str("node_name", self.node_name.as_deref());
        match &self.node_ip {
            Some(OneOrMany::One(s)) => d.str("node_ip", Some(s)),
            Some(OneOrMany::Many(v)) => d.strs("node_ip", Some(v)),
            None => {}
        }
        d.str("socket", self.socket.as_deref());
        d.str("socket_group", self.socket_group.as_deref());
        d.str("state_dir", self.state_dir.as_deref());
        d.str("service_node_port_range", self.service_node_port_range.as_deref());
        d.strs("service_cluster_ip_ranges", self.service_cluster_ip_ranges.as_deref());
        d.strs("nodeport_addresses", self.nodeport_addresses.as_deref());
        d.str("table", self.table.as_deref());
        d.int("masquerade_bit", self.masquerade_bit);
        d.int("ct_mark_bit", self.ct_mark_bit);
        d.str("status_led", self.status_led.as_deref());
        d.str("log_level", self.log_level.as_deref());
        d.int("max_request_bytes", self.max_request_bytes);
        d.int("max_connections", self.max_connections);
        d.int("idle_timeout_seconds", self.idle_timeout_seconds);
        d.int("resync_interval_seconds", self.resync_interval_seconds);
        d.str("ubus", self.ubus.as_deref());
        d.bool("pod_routes", self.pod_routes);
        #[cfg(feature = "cluster")]
        if let Some(c) = &self.cluster {
            d.table("cluster");
            d.str("server", c.server.as_deref());
            d.str("ca_file", c.ca_file.as_deref());
            d.str("token_file", c.token_file.as_deref());
            d.str("cert_file", c.cert_file.as_deref());
            d.str("key_file", c.key_file.as_deref());
            d.strs("namespaces", c.namespaces.as_deref());
            d.str("label_selector", c.label_selector.as_deref());
            d.int("watch_timeout_seconds", c.watch_timeout_seconds);
            d.int("request_timeout_seconds", c.request_timeout_seconds);
        }
        d.finish()
    }
}

/// `node_ip = "198.18.0.1"` or `node_ip = ["198.18.0.1", "2001:db8::1"]`.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(test, derive(Serialize))]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

/// One entry of `nodeport_addresses` (the nodeport-addresses proposal, plus interfaces).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddrSelector {
    /// Local addresses inside this prefix.
    Cidr(IpNet),
    /// Addresses of the interface(s) holding the default route, per family.
    DefaultRoute,
    /// The node's primary address per family.
    Primary,
    /// 127.0.0.0/8 and ::1.
    Localhost,
    /// Addresses of an interface; a trailing `*` matches a name prefix.
    Iface(String),
}

impl AddrSelector {
    pub fn parse(s: &str) -> Result<AddrSelector, String> {
        let t = s.trim();
        if t.is_empty() {
            return Err("an empty entry is not allowed".into());
        }
        match t {
            "default-route" => return Ok(AddrSelector::DefaultRoute),
            "primary" => return Ok(AddrSelector::Primary),
            "localhost" => return Ok(AddrSelector::Localhost),
            _ => {}
        }
        if let Some(name) = t.strip_prefix("iface:") {
            let stem = name.strip_suffix('*').unwrap_or(name);
            if name.is_empty() || stem.len() > 15 || stem.contains(['*', '/', ' ', ':']) {
                return Err(format!("bad interface name {name:?} (at most 15 characters, an optional trailing *)"));
            }
            return Ok(AddrSelector::Iface(name.to_string()));
        }
        match t.parse::<IpNet>() {
            Ok(net) if net.trunc() == net => Ok(AddrSelector::Cidr(net)),
            Ok(net) => Err(format!("{t} has host bits set (did you mean {}?)", net.trunc())),
            Err(_) => Err("not a CIDR nor one of \"default-route\", \"primary\", \"localhost\", \"iface:NAME\"".into()),
        }
    }
}

impl fmt::Display for AddrSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddrSelector::Cidr(n) => write!(f, "{n}"),
            AddrSelector::DefaultRoute => f.write_str("default-route"),
            AddrSelector::Primary => f.write_str("primary"),
            AddrSelector::Localhost => f.write_str("localhost"),
            AddrSelector::Iface(n) => write!(f, "iface:{n}"),
        }
    }
}

/// An inclusive port range `first-last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    pub fn parse(s: &str) -> Result<PortRange, String> {
        let (a, b) = match s.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (s.trim(), s.trim()),
        };
        let first: u16 = a.parse().map_err(|_| format!("{a:?} is not a port number"))?;
        let last: u16 = b.parse().map_err(|_| format!("{b:?} is not a port number"))?;
        if first == 0 || first > last {
            return Err("expected FIRST-LAST with 1 <= FIRST <= LAST <= 65535".into());
        }
        Ok(PortRange { first, last })
    }
    pub fn size(&self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }
    pub fn contains(&self, p: u16) -> bool {
        (self.first..=self.last).contains(&p)
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// The effective configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub node_name: String,
    pub node_ips: Vec<IpAddr>,
    pub socket: PathBuf,
    pub socket_group: Option<String>,
    pub state_dir: PathBuf,
    pub node_port_range: PortRange,
    /// At most one IPv4 and one IPv6 prefix, IPv4 first when both.
    pub service_cidrs: Vec<IpNet>,
    pub nodeport_addresses: Vec<AddrSelector>,
    /// Whether `nodeport_addresses` was given (the default is "every local address but loopback").
    pub nodeport_addresses_default: bool,
    pub table: String,
    pub masquerade_bit: u8,
    pub ct_mark_bit: u8,
    pub status_led: Option<String>,
    pub log_level: log::LevelFilter,
    pub max_request_bytes: usize,
    pub max_connections: usize,
    pub idle_timeout_seconds: u64,
    pub resync_interval_seconds: u64,
    /// The native ubus object: `auto`, `off` or ubusd's socket.
    pub ubus: crate::ubus::Setting,
    /// Cluster mode: mirror an API server (needs a build with the `cluster` feature).
    pub cluster: Option<ClusterConfig>,
    /// Route the Nodes' pod CIDRs via their InternalIPs (`crate::podroutes`).
    pub pod_routes: bool,
}

impl Default for Config {
    fn default() -> Self {
        // The defaults cannot fail validation; a test checks that.
        Config::from_raw(RawConfig::default()).unwrap_or_else(|e| panic!("built-in defaults are invalid: {e}"))
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// [`int_in`], converted to the type the config holds (the bounds make it fit).
fn int_as<T: TryFrom<i64>>(key: &str, v: Option<i64>, default: i64, lo: i64, hi: i64) -> Result<T, ConfigError> {
    let v = int_in(key, v, default, lo, hi)?;
    T::try_from(v).map_err(|_| bad(key, v, format_args!("must be between {lo} and {hi}")))
}

fn int_in(key: &str, v: Option<i64>, default: i64, lo: i64, hi: i64) -> Result<i64, ConfigError> {
    let v = v.unwrap_or(default);
    if v < lo || v > hi {
        return Err(bad(key, v, format_args!("must be between {lo} and {hi}")));
    }
    Ok(v)
}

impl Config {
    pub fn from_raw(raw: RawConfig) -> Result<Config, ConfigError> {
        let node_name = match raw.node_name {
            Some(n) if n.trim().is_empty() => return Err(bad("node_name", "\"\"", "must not be empty")),
            Some(n) => n,
            None => hostname(),
        };
        let node_ip_strs = match raw.node_ip {
            None => vec![],
            Some(OneOrMany::One(s)) => vec![s],
            Some(OneOrMany::Many(v)) => v,
        };
        let mut node_ips = Vec::new();
        for s in &node_ip_strs {
            let ip: IpAddr =
                s.trim().parse().map_err(|_| bad("node_ip", format_args!("{s:?}"), "not an IP address"))?;
            if node_ips.iter().any(|o: &IpAddr| o.is_ipv4() == ip.is_ipv4()) {
                return Err(bad("node_ip", format_args!("{s:?}"), "at most one address per family"));
            }
            node_ips.push(ip);
        }
        let socket = raw.socket.unwrap_or_else(|| DEFAULT_SOCKET.into());
        if socket.is_empty() {
            return Err(bad("socket", "\"\"", "must not be empty"));
        }
        let state_dir = raw.state_dir.unwrap_or_else(|| DEFAULT_STATE_DIR.into());
        if state_dir.is_empty() {
            return Err(bad("state_dir", "\"\"", "must not be empty"));
        }
        let range_s = raw.service_node_port_range.unwrap_or_else(|| "30000-32767".into());
        let node_port_range =
            PortRange::parse(&range_s).map_err(|e| bad("service_node_port_range", format_args!("{range_s:?}"), e))?;

        let cidr_strs = raw.service_cluster_ip_ranges.unwrap_or_else(|| vec!["10.96.0.0/16".into()]);
        if cidr_strs.is_empty() {
            return Err(bad("service_cluster_ip_ranges", "[]", "at least one range is needed"));
        }
        let mut service_cidrs: Vec<IpNet> = Vec::new();
        for s in &cidr_strs {
            let key = "service_cluster_ip_ranges";
            let net: IpNet = s.trim().parse().map_err(|_| bad(key, format_args!("{s:?}"), "not a CIDR"))?;
            if net.trunc() != net {
                return Err(bad(
                    key,
                    format_args!("{s:?}"),
                    format_args!("host bits set (did you mean {}?)", net.trunc()),
                ));
            }
            let host_bits = net.max_prefix_len() - net.prefix_len();
            if host_bits < 2 {
                return Err(bad(key, format_args!("{s:?}"), "the range is too small (at least a /30 or /126)"));
            }
            if net.max_prefix_len() == 128 && host_bits > 64 {
                return Err(bad(key, format_args!("{s:?}"), "an IPv6 range may be at most a /64"));
            }
            if service_cidrs.iter().any(|o| o.max_prefix_len() == net.max_prefix_len()) {
                return Err(bad(key, format_args!("{s:?}"), "at most one IPv4 and one IPv6 range"));
            }
            service_cidrs.push(net);
        }
        service_cidrs.sort_by_key(|n| n.max_prefix_len());

        let nodeport_addresses_default = raw.nodeport_addresses.is_none();
        let sel_strs = raw.nodeport_addresses.unwrap_or_else(|| vec!["0.0.0.0/0".into(), "::/0".into()]);
        if sel_strs.is_empty() {
            return Err(bad("nodeport_addresses", "[]", "an empty list is invalid"));
        }
        let mut nodeport_addresses = Vec::new();
        for s in &sel_strs {
            let sel = AddrSelector::parse(s).map_err(|e| bad("nodeport_addresses", format_args!("{s:?}"), e))?;
            if !nodeport_addresses.contains(&sel) {
                nodeport_addresses.push(sel);
            }
        }

        let table = raw.table.unwrap_or_else(|| "nodeportd".into());
        if table.is_empty()
            || table.len() > 64
            || !table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            || !table.starts_with(|c: char| c.is_ascii_alphabetic())
        {
            return Err(bad(
                "table",
                format_args!("{table:?}"),
                "letters, digits, '-' and '_', starting with a letter",
            ));
        }
        let masquerade_bit = int_as("masquerade_bit", raw.masquerade_bit, 14, 0, 31)?;
        let ct_mark_bit = int_as("ct_mark_bit", raw.ct_mark_bit, 15, 0, 31)?;
        let log_level_s = raw.log_level.unwrap_or_else(|| "info".into());
        let log_level = parse_level(&log_level_s).ok_or_else(|| {
            bad("log_level", format_args!("{log_level_s:?}"), "one of error, warn, info, debug, trace, off")
        })?;
        let status_led = match raw.status_led {
            Some(s) if s.is_empty() => None,
            Some(s) if s.contains('/') || s == "." || s == ".." => {
                return Err(bad("status_led", format_args!("{s:?}"), "an LED name under /sys/class/leds"))
            }
            other => other,
        };
        let socket_group = raw.socket_group.filter(|s| !s.is_empty());
        let ubus_s = raw.ubus.unwrap_or_else(|| "auto".into());
        let ubus = crate::ubus::Setting::parse(&ubus_s).map_err(|e| bad("ubus", format_args!("{ubus_s:?}"), e))?;
        Ok(Config {
            node_name,
            node_ips,
            socket: PathBuf::from(socket),
            socket_group,
            state_dir: PathBuf::from(state_dir),
            node_port_range,
            service_cidrs,
            nodeport_addresses,
            nodeport_addresses_default,
            table,
            masquerade_bit,
            ct_mark_bit,
            status_led,
            log_level,
            max_request_bytes: int_as("max_request_bytes", raw.max_request_bytes, 1 << 20, 1024, 64 << 20)?,
            max_connections: int_as("max_connections", raw.max_connections, DEFAULT_MAX_CONNECTIONS, 1, 4096)?,
            idle_timeout_seconds: int_as("idle_timeout_seconds", raw.idle_timeout_seconds, 300, 1, 86400)?,
            resync_interval_seconds: int_as("resync_interval_seconds", raw.resync_interval_seconds, 300, 5, 86400)?,
            ubus,
            #[cfg(feature = "cluster")]
            cluster: raw.cluster.map(ClusterConfig::from_raw).transpose()?,
            #[cfg(not(feature = "cluster"))]
            cluster: match raw.cluster {
                Some(RawCluster) => return Err(ConfigError(NO_CLUSTER_MODE.into())),
                None => None,
            },
            pod_routes: match raw.pod_routes {
                #[cfg(not(feature = "pod-routes"))]
                Some(true) => return Err(ConfigError(NO_POD_ROUTES.into())),
                v => v.unwrap_or(false),
            },
        })
    }

    /// Parse TOML text.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        // Text to a table, then the table to the config: the same decoder as UCI's
        // (one instance of RawConfig's decoder in the binary, not two).
        let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError(toml_error(&e)))?;
        Config::from_table(table)
    }

    /// A TOML table (from TOML text or from UCI) to the config.
    fn from_table(table: toml::Table) -> Result<Config, ConfigError> {
        let raw: RawConfig = table.try_into().map_err(|e: toml::de::Error| ConfigError(toml_error(&e)))?;
        Config::from_raw(raw)
    }

    /// Read a config file: TOML, or UCI when the file is in UCI syntax.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        let in_context = |e: ConfigError| ConfigError(format!("{}: {e}", path.display()));
        if uci::looks_like_uci(path, &text) {
            let table = uci::uci_to_toml(&text).map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
            Config::from_table(table).map_err(in_context)
        } else {
            Config::from_toml(&text).map_err(in_context)
        }
    }

    /// The config to run with: `path`, or the built-in defaults when `path` is the
    /// default location and no file is there.
    pub fn load_or_default(path: Option<&Path>) -> Result<Config, ConfigError> {
        match path {
            Some(p) => Config::load(p),
            None => {
                let p = Path::new(DEFAULT_CONFIG);
                if p.exists() {
                    Config::load(p)
                } else {
                    Config::from_raw(RawConfig::default())
                }
            }
        }
    }

    /// The effective configuration as TOML (what `--check-config` prints).
    pub fn to_toml(&self) -> String {
        self.effective().to_toml()
    }

    /// The effective configuration, every key set.
    fn effective(&self) -> RawConfig {
        RawConfig {
            node_name: Some(self.node_name.clone()),
            node_ip: if self.node_ips.is_empty() {
                None
            } else {
                Some(OneOrMany::Many(self.node_ips.iter().map(|i| i.to_string()).collect()))
            },
            socket: Some(self.socket.display().to_string()),
            socket_group: self.socket_group.clone(),
            state_dir: Some(self.state_dir.display().to_string()),
            service_node_port_range: Some(self.node_port_range.to_string()),
            service_cluster_ip_ranges: Some(self.service_cidrs.iter().map(|n| n.to_string()).collect()),
            nodeport_addresses: Some(self.nodeport_addresses.iter().map(|s| s.to_string()).collect()),
            table: Some(self.table.clone()),
            masquerade_bit: Some(self.masquerade_bit.into()),
            ct_mark_bit: Some(self.ct_mark_bit.into()),
            status_led: self.status_led.clone(),
            log_level: Some(self.log_level.to_string().to_lowercase()),
            max_request_bytes: i64::try_from(self.max_request_bytes).ok(),
            max_connections: i64::try_from(self.max_connections).ok(),
            idle_timeout_seconds: i64::try_from(self.idle_timeout_seconds).ok(),
            resync_interval_seconds: i64::try_from(self.resync_interval_seconds).ok(),
            ubus: Some(self.ubus.to_string()),
            #[cfg(feature = "cluster")]
            cluster: self.cluster.as_ref().map(ClusterConfig::to_raw),
            #[cfg(not(feature = "cluster"))]
            cluster: None,
            pod_routes: Some(self.pod_routes),
        }
    }

    pub fn masquerade_mark(&self) -> u32 {
        1u32 << self.masquerade_bit
    }
    pub fn ct_mark(&self) -> u32 {
        1u32 << self.ct_mark_bit
    }
}

pub fn parse_level(s: &str) -> Option<log::LevelFilter> {
    match s.to_ascii_lowercase().as_str() {
        "off" => Some(log::LevelFilter::Off),
        "error" => Some(log::LevelFilter::Error),
        "warn" | "warning" => Some(log::LevelFilter::Warn),
        "info" => Some(log::LevelFilter::Info),
        "debug" => Some(log::LevelFilter::Debug),
        "trace" => Some(log::LevelFilter::Trace),
        _ => None,
    }
}

/// toml's messages carry a multi-line source excerpt; keep the first line plus the key.
fn toml_error(e: &toml::de::Error) -> String {
    e.message().trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--check-config` prints what `toml::to_string` printed before it was replaced.
    #[test]
    fn the_printed_config_is_what_the_toml_crate_prints() {
        let texts = [
            "",
            "node_ip = \"198.18.0.1\"\nsocket_group = \"np\\\"x\"\nstatus_led = \"green:wan\"",
            "node_ip = [\"198.18.0.1\", \"2001:db8::1\"]\nnodeport_addresses = [\"198.18.0.0/15\", \"iface:wan\"]",
        ];
        for t in texts {
            let raw = Config::from_toml(t).unwrap().effective();
            let (mine, theirs) = (raw.to_toml(), toml::to_string(&raw).unwrap());
            // A string with a quote in it: the toml crate writes it as a literal string.
            if t.contains("\\\"") {
                assert_eq!(
                    toml::from_str::<toml::Table>(&mine).unwrap(),
                    toml::from_str::<toml::Table>(&theirs).unwrap()
                );
                assert!(mine.contains(r#"socket_group = "np\"x""#), "{mine}");
            } else {
                assert_eq!(mine, theirs, "{t}");
            }
        }
        let mut raw = Config::from_toml("").unwrap().effective();
        raw.node_ip = Some(OneOrMany::One("198.18.0.1".into()));
        assert_eq!(raw.to_toml(), toml::to_string(&raw).unwrap());
    }

    #[test]
    fn defaults_are_valid_and_match_the_contract() {
        let c = Config::from_raw(RawConfig::default()).expect("defaults");
        assert_eq!(c.socket, PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(c.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
        assert_eq!(c.node_port_range, PortRange { first: 30000, last: 32767 });
        assert_eq!(c.service_cidrs, vec!["10.96.0.0/16".parse::<IpNet>().unwrap()]);
        assert_eq!(c.table, "nodeportd");
        assert!(c.nodeport_addresses_default);
        assert_eq!(c.ubus, crate::ubus::Setting::Auto);
    }

    #[test]
    fn ubus_takes_auto_off_or_a_path() {
        assert_eq!(Config::from_toml("ubus = \"off\"").unwrap().ubus, crate::ubus::Setting::Off);
        let c = Config::from_toml("ubus = \"/tmp/ubus.sock\"").unwrap();
        assert_eq!(c.ubus, crate::ubus::Setting::Path("/tmp/ubus.sock".into()));
        assert_eq!(Config::from_toml(&c.to_toml()).unwrap().ubus, c.ubus);
    }

    #[test]
    fn unknown_key_is_named() {
        let e = Config::from_toml("nodeport_adresses = [\"0.0.0.0/0\"]\n").unwrap_err();
        assert!(e.0.contains("nodeport_adresses"), "{e}");
    }

    #[test]
    fn bad_values_name_key_and_value() {
        for (text, key, val) in [
            ("service_node_port_range = \"32767-30000\"", "service_node_port_range", "32767-30000"),
            ("service_node_port_range = \"abc\"", "service_node_port_range", "abc"),
            ("service_cluster_ip_ranges = [\"10.96.0.1/16\"]", "service_cluster_ip_ranges", "10.96.0.1/16"),
            (
                "service_cluster_ip_ranges = [\"10.96.0.0/16\", \"10.97.0.0/16\"]",
                "service_cluster_ip_ranges",
                "10.97.0.0/16",
            ),
            ("nodeport_addresses = [\"\"]", "nodeport_addresses", "\"\""),
            ("nodeport_addresses = [\"default-rout\"]", "nodeport_addresses", "default-rout"),
            ("nodeport_addresses = [\"198.18.0.0/33\"]", "nodeport_addresses", "198.18.0.0/33"),
            ("masquerade_bit = 32", "masquerade_bit", "32"),
            ("log_level = \"loud\"", "log_level", "loud"),
            ("node_ip = \"1.2.3\"", "node_ip", "1.2.3"),
            ("ubus = \"on\"", "ubus", "on"),
            ("ubus = \"var/run/ubus.sock\"", "ubus", "var/run/ubus.sock"),
        ] {
            let e = Config::from_toml(text).unwrap_err();
            assert!(e.0.contains(key) && e.0.contains(val), "{text} -> {e}");
        }
        let e = Config::from_toml("nodeport_addresses = []").unwrap_err();
        assert!(e.0.contains("nodeport_addresses") && e.0.contains("empty"), "{e}");
    }

    #[test]
    fn seed_selector_examples_parse() {
        for list in [
            vec!["0.0.0.0/0"],
            vec!["127.0.0.0/8"],
            vec!["default-route"],
            vec!["127.0.0.1/32", "default-route"],
            vec!["127.0.0.0/8", "198.18.0.0/15"],
            vec!["iface:br-lan", "iface:wg*", "primary", "localhost", "2001:db8::/64"],
        ] {
            let text = format!("nodeport_addresses = {list:?}");
            let c = Config::from_toml(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(c.nodeport_addresses.len(), list.len());
            assert!(!c.nodeport_addresses_default);
        }
    }

    #[test]
    fn effective_config_round_trips() {
        let c = Config::from_toml(
            "node_name = \"edge-1\"\nservice_cluster_ip_ranges = [\"fd00:96::/108\", \"10.96.0.0/16\"]\nnodeport_addresses = [\"iface:br-lan\"]\n",
        )
        .unwrap();
        let again = Config::from_toml(&c.to_toml()).unwrap();
        assert_eq!(again.node_name, "edge-1");
        assert_eq!(again.service_cidrs, c.service_cidrs);
        assert_eq!(again.service_cidrs[0].to_string(), "10.96.0.0/16");
        assert_eq!(again.nodeport_addresses, c.nodeport_addresses);
    }

    #[cfg(not(feature = "cluster"))]
    #[test]
    fn a_base_build_refuses_a_cluster_table_by_name() {
        let e = Config::from_toml("node_name = \"edge-1\"\n[cluster]\nserver = \"https://k8s\"\n").unwrap_err();
        assert_eq!(e.0, NO_CLUSTER_MODE);
        assert_eq!(Config::from_toml("node_name = \"edge-1\"\n").unwrap().cluster, None);
    }

    #[cfg(not(feature = "pod-routes"))]
    #[test]
    fn a_build_without_pod_routes_refuses_them_by_name() {
        assert_eq!(Config::from_toml("pod_routes = true\n").unwrap_err().0, NO_POD_ROUTES);
        assert!(!Config::from_toml("pod_routes = false\n").unwrap().pod_routes);
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn cluster_table_is_validated_and_round_trips() {
        let c = Config::from_toml(
            "[cluster]\nserver = \"https://198.18.0.1:6443\"\nca_file = \"/etc/nodeportd/ca.crt\"\ntoken_file = \"/etc/nodeportd/token\"\nnamespaces = [\"shop\", \"web\"]\nlabel_selector = \"tier=edge\"\n",
        )
        .unwrap();
        let k = c.cluster.clone().unwrap();
        assert_eq!(k.auth, ClusterAuth::Token("/etc/nodeportd/token".into()));
        assert_eq!(k.namespaces, vec!["shop", "web"]);
        assert_eq!((k.watch_timeout_seconds, k.request_timeout_seconds), (300, 30));
        assert_eq!(Config::from_toml(&c.to_toml()).unwrap().cluster, c.cluster);
        assert_eq!(c.to_toml(), toml::to_string(&c.effective()).unwrap());
        let cert = Config::from_toml(
            "[cluster]\nserver = \"https://k8s\"\nca_file = \"/ca\"\ncert_file = \"/c\"\nkey_file = \"/k\"\n",
        )
        .unwrap();
        assert_eq!(cert.cluster.unwrap().auth, ClusterAuth::Cert { cert: "/c".into(), key: "/k".into() });
        assert_eq!(Config::default().cluster, None);
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn bad_cluster_tables_name_the_key() {
        let base = "server = \"https://k8s\"\nca_file = \"/ca\"\n";
        for (body, key) in [
            ("ca_file = \"/ca\"\ntoken_file = \"/t\"\n", "cluster.server"),
            ("server = \"http://k8s\"\nca_file = \"/ca\"\ntoken_file = \"/t\"\n", "cluster.server"),
            ("server = \"https://k8s\"\ntoken_file = \"/t\"\n", "cluster.ca_file"),
            (base, "token_file or cert_file"),
            (&format!("{base}token_file = \"t\"\n"), "cluster.token_file"),
            (&format!("{base}token_file = \"/t\"\ncert_file = \"/c\"\nkey_file = \"/k\"\n"), "cluster.token_file"),
            (&format!("{base}cert_file = \"/c\"\n"), "cluster.key_file"),
            (&format!("{base}key_file = \"/k\"\n"), "cluster.cert_file"),
            (&format!("{base}token_file = \"/t\"\nnamespaces = [\"Bad_NS\"]\n"), "Bad_NS"),
            (&format!("{base}token_file = \"/t\"\nwatch_timeout_seconds = 0\n"), "cluster.watch_timeout_seconds"),
            (&format!("{base}token_file = \"/t\"\nsever = \"x\"\n"), "sever"),
        ] {
            let e = Config::from_toml(&format!("[cluster]\n{body}")).unwrap_err();
            assert!(e.0.contains(key), "{body} -> {e}");
        }
    }
}
