//! OpenWrt UCI syntax for the same keys as the TOML config.
//!
//! On a router the operator edits `/etc/config/nodeportd` with `uci` or LuCI; the daemon
//! reads that file itself, so there is one parser, tested here, instead of an init script
//! rendering TOML. The parser is strict: anything it does not understand is an error that
//! names the line and its text, because a silently skipped line on a router means a
//! NodePort open where the operator did not expect it.
//!
//! Mapping: the one section of type `nodeportd` (or `main`) becomes the TOML table.
//! `option KEY 'VALUE'` is a string, `list KEY 'VALUE'` an array of strings, and the keys
//! the TOML config holds as integers are converted. Sections of type `init` hold options
//! for the init script only (interface triggers) and are not part of the daemon's config.

use std::fmt;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UciError(pub String);

impl fmt::Display for UciError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UciError {}

/// Section types whose options become the daemon's configuration.
const DAEMON_SECTION_TYPES: [&str; 2] = ["nodeportd", "main"];
/// Section type of cluster mode's options: they become the `[cluster]` table.
const CLUSTER_SECTION_TYPE: &str = "cluster";
/// Section type read by `/etc/init.d/nodeportd` alone.
const INIT_SECTION_TYPE: &str = "init";

/// Keys the TOML config holds as integers; every other option is a string.
const INTEGER_KEYS: [&str; 8] = [
    "watch_timeout_seconds",
    "request_timeout_seconds",
    "masquerade_bit",
    "ct_mark_bit",
    "max_request_bytes",
    "max_connections",
    "idle_timeout_seconds",
    "resync_interval_seconds",
];
/// Keys the TOML config holds as booleans (UCI spells them 1/0, on/off, ...).
const BOOL_KEYS: [&str; 1] = ["pod_routes"];
/// Keys the TOML config holds as arrays: a single `option` becomes a one-element array,
/// which is what `uci set nodeportd.main.KEY=VALUE` produces.
const LIST_KEYS: [&str; 3] = ["service_cluster_ip_ranges", "nodeport_addresses", "namespaces"];
/// Keys that take one value or several (`node_ip`: one address per family).
const ONE_OR_MANY_KEYS: [&str; 1] = ["node_ip"];

/// Whether a config file is UCI rather than TOML.
pub fn looks_like_uci(path: &Path, text: &str) -> bool {
    if path.starts_with("/etc/config") {
        return true;
    }
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .is_some_and(|l| l == "config" || l.starts_with("config ") || l.starts_with("config\t"))
}

/// A value as UCI stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UciValue {
    Option(String),
    List(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UciEntry {
    pub key: String,
    pub value: UciValue,
    /// 1-based line of the first `option`/`list` statement for this key.
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UciSection {
    pub kind: String,
    pub name: Option<String>,
    pub line: usize,
    pub entries: Vec<UciEntry>,
}

fn line_error(line: usize, text: &str, why: impl fmt::Display) -> UciError {
    UciError(format!("line {line}: {why}: {:?}", text.trim()))
}

/// Split one line into words the way libuci does: whitespace separates, `'...'` is literal,
/// `"..."` allows backslash escapes, a backslash outside quotes escapes the next character,
/// and adjacent quoted and bare parts form one word. `#` at the start of a word begins a
/// comment.
fn split_words(line_no: usize, line: &str) -> Result<Vec<String>, UciError> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.peek() {
            None | Some('#') => return Ok(words),
            Some(_) => {}
        }
        let mut word = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() {
                break;
            }
            chars.next();
            match c {
                '\'' => loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => word.push(ch),
                        None => return Err(line_error(line_no, line, "unterminated ' quote")),
                    }
                },
                '"' => loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch) => word.push(ch),
                            None => return Err(line_error(line_no, line, "unterminated \" quote")),
                        },
                        Some(ch) => word.push(ch),
                        None => return Err(line_error(line_no, line, "unterminated \" quote")),
                    }
                },
                '\\' => match chars.next() {
                    Some(ch) => word.push(ch),
                    None => return Err(line_error(line_no, line, "a backslash at the end of the line")),
                },
                _ => word.push(c),
            }
        }
        words.push(word);
    }
}

/// Section and option names: what `uci` itself accepts.
fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn valid_type(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Parse UCI text into its sections. Pure; strict.
pub fn parse(text: &str) -> Result<Vec<UciSection>, UciError> {
    let mut sections: Vec<UciSection> = Vec::new();
    for (idx, raw) in text.lines().enumerate() {
        let line_no = idx + 1;
        let words = split_words(line_no, raw)?;
        let Some(keyword) = words.first() else {
            continue;
        };
        match keyword.as_str() {
            "package" => {
                if words.len() != 2 || !valid_name(&words[1]) {
                    return Err(line_error(line_no, raw, "expected `package NAME`"));
                }
            }
            "config" => {
                if words.len() < 2 || words.len() > 3 {
                    return Err(line_error(line_no, raw, "expected `config TYPE ['NAME']`"));
                }
                if !valid_type(&words[1]) {
                    return Err(line_error(line_no, raw, "bad section type (letters, digits, '_' and '-')"));
                }
                let name = match words.get(2) {
                    Some(n) if !valid_name(n) => {
                        return Err(line_error(line_no, raw, "bad section name (letters, digits and '_')"))
                    }
                    Some(n) => Some(n.clone()),
                    None => None,
                };
                if let Some(n) = &name {
                    if let Some(other) = sections.iter().find(|s| s.name.as_ref() == Some(n)) {
                        return Err(line_error(
                            line_no,
                            raw,
                            format_args!("section '{n}' is already defined on line {}", other.line),
                        ));
                    }
                }
                sections.push(UciSection { kind: words[1].clone(), name, line: line_no, entries: Vec::new() });
            }
            "option" | "list" => {
                let is_list = keyword == "list";
                if words.len() != 3 {
                    let shape = if is_list { "`list KEY 'VALUE'`" } else { "`option KEY 'VALUE'`" };
                    return Err(line_error(line_no, raw, format_args!("expected {shape}")));
                }
                let Some(section) = sections.last_mut() else {
                    return Err(line_error(line_no, raw, "an option before any `config` section"));
                };
                let key = &words[1];
                if !valid_name(key) {
                    return Err(line_error(line_no, raw, "bad option name (letters, digits and '_')"));
                }
                let value = words[2].clone();
                match section.entries.iter_mut().find(|e| &e.key == key) {
                    None => section.entries.push(UciEntry {
                        key: key.clone(),
                        value: if is_list { UciValue::List(vec![value]) } else { UciValue::Option(value) },
                        line: line_no,
                    }),
                    Some(UciEntry { value: UciValue::List(items), .. }) if is_list => items.push(value),
                    Some(e) => {
                        let why = match (&e.value, is_list) {
                            (UciValue::Option(_), false) => {
                                format!("option '{key}' is already set on line {}", e.line)
                            }
                            _ => format!("'{key}' is given both as option and as list (line {})", e.line),
                        };
                        return Err(line_error(line_no, raw, why));
                    }
                }
            }
            other => {
                return Err(line_error(
                    line_no,
                    raw,
                    format_args!("unknown statement '{other}' (expected config, option, list or package)"),
                ))
            }
        }
    }
    Ok(sections)
}

fn parse_integer(s: &str) -> Option<i64> {
    let t = s.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return i64::from_str_radix(hex, 16).ok();
    }
    t.parse().ok()
}

/// UCI's booleans, as `uci` and `/lib/functions.sh` (`get_bool`) read them.
fn parse_bool(s: &str) -> Option<bool> {
    match s.trim() {
        "1" | "on" | "true" | "yes" | "enabled" => Some(true),
        "0" | "off" | "false" | "no" | "disabled" => Some(false),
        _ => None,
    }
}

fn entry_text(e: &UciEntry) -> String {
    match &e.value {
        UciValue::Option(v) => format!("option {} '{v}'", e.key),
        UciValue::List(items) => format!("list {} '{}'", e.key, items.first().map(String::as_str).unwrap_or("")),
    }
}

fn entry_to_toml(e: &UciEntry) -> Result<toml::Value, UciError> {
    let key = e.key.as_str();
    let err = |why: String| UciError(format!("line {}: {why}: {:?}", e.line, entry_text(e)));
    if INTEGER_KEYS.contains(&key) {
        return match &e.value {
            UciValue::Option(v) => parse_integer(v)
                .map(toml::Value::Integer)
                .ok_or_else(|| err(format!("{key}: invalid value {v:?}: not an integer"))),
            UciValue::List(_) => Err(err(format!("{key} takes one value: use `option`, not `list`"))),
        };
    }
    if BOOL_KEYS.contains(&key) {
        return match &e.value {
            UciValue::Option(v) => parse_bool(v)
                .map(toml::Value::Boolean)
                .ok_or_else(|| err(format!("{key}: invalid value {v:?}: one of 1/0, on/off, true/false, yes/no"))),
            UciValue::List(_) => Err(err(format!("{key} takes one value: use `option`, not `list`"))),
        };
    }
    let strings = |items: &[String]| toml::Value::Array(items.iter().cloned().map(toml::Value::String).collect());
    Ok(match &e.value {
        UciValue::List(items) if LIST_KEYS.contains(&key) || ONE_OR_MANY_KEYS.contains(&key) => strings(items),
        UciValue::Option(v) if LIST_KEYS.contains(&key) => strings(std::slice::from_ref(v)),
        UciValue::Option(v) => toml::Value::String(v.clone()),
        // Unknown keys pass through so the config's own check names them.
        UciValue::List(items) if !is_known_scalar(key) => strings(items),
        UciValue::List(_) => return Err(err(format!("{key} takes one value: use `option`, not `list`"))),
    })
}

/// Scalar string keys of the TOML config (a `list` for them is a mistake worth naming).
fn is_known_scalar(key: &str) -> bool {
    matches!(key, "node_name" | "socket" | "socket_group" | "state_dir" | "service_node_port_range" | "table")
        || matches!(key, "status_led" | "log_level" | "ubus")
}

/// Map the `config nodeportd` section of a UCI file to a TOML table with the same keys
/// as the TOML config. Pure: no I/O.
pub fn uci_to_toml(text: &str) -> Result<toml::Table, UciError> {
    let sections = parse(text)?;
    let mut main: Option<&UciSection> = None;
    let mut cluster: Option<&UciSection> = None;
    for s in &sections {
        if s.kind == CLUSTER_SECTION_TYPE {
            if let Some(first) = cluster {
                return Err(UciError(format!(
                    "line {}: a second `config cluster` section (the first is on line {}); nodeportd follows one cluster",
                    s.line, first.line
                )));
            }
            cluster = Some(s);
        } else if DAEMON_SECTION_TYPES.contains(&s.kind.as_str()) {
            if let Some(first) = main {
                return Err(UciError(format!(
                    "line {}: a second `config {}` section (the first is on line {}); nodeportd reads exactly one",
                    s.line, s.kind, first.line
                )));
            }
            main = Some(s);
        } else if s.kind != INIT_SECTION_TYPE {
            return Err(UciError(format!(
                "line {}: unknown section type '{}' (expected `config nodeportd 'main'`, `config cluster 'cluster'` or `config init 'init'`)",
                s.line, s.kind
            )));
        }
    }
    let mut table = toml::Table::new();
    if let Some(s) = main {
        for e in &s.entries {
            table.insert(e.key.clone(), entry_to_toml(e)?);
        }
    }
    if let Some(s) = cluster {
        let mut sub = toml::Table::new();
        for e in &s.entries {
            sub.insert(e.key.clone(), entry_to_toml(e)?);
        }
        table.insert(CLUSTER_SECTION_TYPE.into(), toml::Value::Table(sub));
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, RawConfig};

    fn table(text: &str) -> toml::Table {
        uci_to_toml(text).unwrap_or_else(|e| panic!("{text}\n-> {e}"))
    }

    fn config(text: &str) -> Config {
        let raw: RawConfig = table(text).try_into().unwrap_or_else(|e| panic!("{text}\n-> {e}"));
        Config::from_raw(raw).unwrap_or_else(|e| panic!("{text}\n-> {e}"))
    }

    /// The packaged default: every key the daemon knows, in the form an operator writes it.
    const EVERY_KEY: &str = r#"
# nodeportd: the comment style of /etc/config files
package nodeportd

config nodeportd 'main'
	option node_name 'edge-1'
	list node_ip '198.18.0.1'
	list node_ip "2001:db8::1"
	option socket '/var/run/nodeportd/nodeportd.sock'
	option socket_group 'nodeport'
	option state_dir '/etc/nodeportd'
	option service_node_port_range '30000-32767'
	list service_cluster_ip_ranges '10.96.0.0/16'
	list service_cluster_ip_ranges 'fd00:96::/108'
	list nodeport_addresses 'iface:br-lan'
	list nodeport_addresses 'iface:wg*'
	list nodeport_addresses 'default-route'
	option table 'nodeportd'
	option masquerade_bit '14'
	option ct_mark_bit '0xf'
	option status_led 'green:status'
	option log_level 'debug'
	option max_request_bytes '2097152'
	option max_connections '32'
	option idle_timeout_seconds '120'
	option resync_interval_seconds '600'
	option ubus '/var/run/ubus/ubus.sock'
	option pod_routes '1'

config init 'init'
	list reload_interface 'lan'
"#;

    #[test]
    fn every_key_maps_to_the_toml_type_the_config_expects() {
        let t = table(EVERY_KEY);
        assert_eq!(t["node_name"].as_str(), Some("edge-1"));
        assert_eq!(t["socket"].as_str(), Some("/var/run/nodeportd/nodeportd.sock"));
        assert_eq!(t["socket_group"].as_str(), Some("nodeport"));
        assert_eq!(t["state_dir"].as_str(), Some("/etc/nodeportd"));
        assert_eq!(t["service_node_port_range"].as_str(), Some("30000-32767"));
        assert_eq!(t["table"].as_str(), Some("nodeportd"));
        assert_eq!(t["status_led"].as_str(), Some("green:status"));
        assert_eq!(t["log_level"].as_str(), Some("debug"));
        let strs = |k: &str| -> Vec<&str> { t[k].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect() };
        assert_eq!(strs("node_ip"), ["198.18.0.1", "2001:db8::1"]);
        assert_eq!(strs("service_cluster_ip_ranges"), ["10.96.0.0/16", "fd00:96::/108"]);
        assert_eq!(strs("nodeport_addresses"), ["iface:br-lan", "iface:wg*", "default-route"]);
        assert_eq!(t["masquerade_bit"].as_integer(), Some(14));
        assert_eq!(t["ct_mark_bit"].as_integer(), Some(15));
        assert_eq!(t["max_request_bytes"].as_integer(), Some(2_097_152));
        assert_eq!(t["max_connections"].as_integer(), Some(32));
        assert_eq!(t["idle_timeout_seconds"].as_integer(), Some(120));
        assert_eq!(t["resync_interval_seconds"].as_integer(), Some(600));
        assert_eq!(t["ubus"].as_str(), Some("/var/run/ubus/ubus.sock"));
        assert_eq!(t["pod_routes"].as_bool(), Some(true));
        assert!(!t.contains_key("reload_interface"), "init-script options stay out of the daemon's config");
    }

    #[test]
    fn every_key_is_accepted_by_the_config() {
        let c = config(EVERY_KEY);
        assert_eq!(c.node_name, "edge-1");
        assert_eq!(c.node_ips.len(), 2);
        assert_eq!(c.socket_group.as_deref(), Some("nodeport"));
        assert_eq!(c.node_port_range.to_string(), "30000-32767");
        assert_eq!(c.service_cidrs.len(), 2);
        assert_eq!(c.nodeport_addresses.len(), 3);
        assert_eq!(c.ct_mark_bit, 15);
        assert_eq!(c.masquerade_bit, 14);
        assert_eq!(c.status_led.as_deref(), Some("green:status"));
        assert_eq!(c.log_level, log::LevelFilter::Debug);
        assert_eq!(c.max_request_bytes, 2_097_152);
        assert_eq!(c.max_connections, 32);
        assert_eq!(c.idle_timeout_seconds, 120);
        assert_eq!(c.resync_interval_seconds, 600);
        assert_eq!(c.ubus, crate::ubus::Setting::Path("/var/run/ubus/ubus.sock".into()));
        assert!(c.pod_routes);
    }

    /// Every key the config can print (`--check-config`) can be written in UCI and reads
    /// back to the same configuration: a key added to the config without a UCI mapping
    /// of the right type fails here.
    #[test]
    fn every_effective_config_key_round_trips_through_uci() {
        let c = config(EVERY_KEY);
        let printed: toml::Table = toml::from_str(&c.to_toml()).unwrap();
        let mut uci = String::from("config nodeportd 'main'\n");
        for (k, v) in &printed {
            match v {
                toml::Value::Array(items) => {
                    for i in items {
                        uci.push_str(&format!("\tlist {k} '{}'\n", i.as_str().unwrap()));
                    }
                }
                toml::Value::String(s) => uci.push_str(&format!("\toption {k} '{s}'\n")),
                toml::Value::Integer(i) => uci.push_str(&format!("\toption {k} '{i}'\n")),
                toml::Value::Boolean(b) => {
                    assert!(BOOL_KEYS.contains(&k.as_str()), "{k} is a boolean: add it to BOOL_KEYS");
                    uci.push_str(&format!("\toption {k} '{}'\n", u8::from(*b)))
                }
                other => panic!("{k} = {other}: no UCI mapping for this TOML type"),
            }
        }
        assert_eq!(config(&uci), c, "{uci}");
    }

    #[test]
    fn the_packaged_default_config_is_valid_and_lan_only() {
        let text = include_str!("../../openwrt-package/nodeportd/files/nodeportd.config");
        let c = config(text);
        assert_eq!(c.nodeport_addresses.iter().map(|s| s.to_string()).collect::<Vec<_>>(), ["iface:br-lan"]);
        assert!(!c.nodeport_addresses_default);
    }

    #[test]
    fn single_option_for_a_list_key_is_a_one_element_list() {
        let t = table(
            "config nodeportd 'main'\n\toption nodeport_addresses 'iface:br-lan'\n\toption node_ip '198.18.0.1'\n",
        );
        assert_eq!(t["nodeport_addresses"].as_array().unwrap().len(), 1);
        assert_eq!(t["node_ip"].as_str(), Some("198.18.0.1"));
        let c = config("config nodeportd 'main'\n\toption node_ip '198.18.0.1'\n");
        assert_eq!(c.node_ips.len(), 1);
    }

    #[test]
    fn anonymous_and_main_sections_and_quoting() {
        let t = table("config main\n\toption node_name edge\\ 2\n\toption log_level \"in\"'fo'\n");
        assert_eq!(t["node_name"].as_str(), Some("edge 2"));
        assert_eq!(t["log_level"].as_str(), Some("info"));
        let t = table("config nodeportd\n\toption node_name \"a \\\"b\\\" #c\" # trailing comment\n");
        assert_eq!(t["node_name"].as_str(), Some("a \"b\" #c"));
        let t = table("config nodeportd 'x'\n\toption node_name 'it''s'\n");
        assert_eq!(t["node_name"].as_str(), Some("its"));
    }

    #[test]
    fn empty_file_and_init_only_file_mean_defaults() {
        assert!(table("").is_empty());
        assert!(table("# nothing\n\n").is_empty());
        assert!(table("config init 'init'\n\tlist reload_interface 'wan'\n").is_empty());
    }

    #[test]
    fn errors_name_the_line_and_the_text() {
        for (text, line, needle) in [
            ("option node_name 'x'\n", 1, "before any `config`"),
            ("config nodeportd 'main'\n\toption node_name 'x\n", 2, "unterminated ' quote"),
            ("config nodeportd 'main'\n\toption node_name \"x\n", 2, "unterminated \" quote"),
            ("config nodeportd 'main'\n\toption node_name\n", 2, "option KEY 'VALUE'"),
            ("config nodeportd 'main'\n\toption node_name 'a' 'b'\n", 2, "option KEY 'VALUE'"),
            ("config nodeportd 'main'\n\tlist nodeport_addresses\n", 2, "list KEY 'VALUE'"),
            ("config nodeportd 'main'\n\n\toptoin node_name 'x'\n", 3, "unknown statement 'optoin'"),
            ("config\n", 1, "config TYPE"),
            ("config nodeportd 'ma-in'\n", 1, "bad section name"),
            ("config node$portd\n", 1, "bad section type"),
            ("config nodeportd 'main'\n\toption node-name 'x'\n", 2, "bad option name"),
            ("config nodeportd 'main'\n\toption node_name 'a'\n\toption node_name 'b'\n", 3, "already set on line 2"),
            ("config nodeportd 'main'\n\tlist nodeport_addresses 'a'\n\toption nodeport_addresses 'b'\n", 3, "both"),
            ("config nodeportd 'main'\nconfig nodeportd 'main'\n", 2, "already defined on line 1"),
            ("config nodeportd 'a'\nconfig nodeportd 'b'\n", 2, "second `config nodeportd`"),
            ("config nodeportd 'main'\nconfig firewall 'x'\n", 2, "unknown section type 'firewall'"),
            ("config nodeportd 'main'\n\toption ct_mark_bit 'fifteen'\n", 2, "not an integer"),
            ("config nodeportd 'main'\n\tlist max_connections '3'\n", 2, "takes one value"),
            ("config nodeportd 'main'\n\tlist node_name 'a'\n", 2, "takes one value"),
            ("config nodeportd 'main'\n\toption node_name x\\\n", 2, "backslash"),
        ] {
            let e = uci_to_toml(text).expect_err(text).to_string();
            assert!(e.starts_with(&format!("line {line}: ")), "{text:?} -> {e}");
            assert!(e.contains(needle), "{text:?} -> {e}");
        }
        let e = uci_to_toml("config nodeportd 'main'\n\toption ct_mark_bit 'fifteen'\n").unwrap_err().to_string();
        assert!(e.contains("ct_mark_bit") && e.contains("fifteen"), "{e}");
    }

    #[test]
    fn unknown_keys_reach_the_configs_own_check() {
        let t = table("config nodeportd 'main'\n\toption nodeport_adresses 'iface:br-lan'\n");
        let e = t.try_into::<RawConfig>().unwrap_err().to_string();
        assert!(e.contains("nodeport_adresses"), "{e}");
    }

    #[test]
    fn booleans_read_as_uci_writes_them() {
        for (text, want) in [("1", true), ("on", true), ("yes", true), ("true", true), ("enabled", true)] {
            assert_eq!(parse_bool(text), Some(want), "{text}");
        }
        for (text, want) in [("0", false), ("off", false), ("no", false), ("false", false), ("disabled", false)] {
            assert_eq!(parse_bool(text), Some(want), "{text}");
        }
        assert_eq!(parse_bool("2"), None);
        assert_eq!(parse_bool(""), None);
    }

    #[test]
    fn detection() {
        assert!(looks_like_uci(Path::new("/etc/config/nodeportd"), ""));
        assert!(looks_like_uci(Path::new("/tmp/x"), "# c\n\nconfig nodeportd 'main'\n"));
        assert!(looks_like_uci(Path::new("/tmp/x"), "config\tmain\n"));
        assert!(!looks_like_uci(Path::new("/tmp/x"), "# config nodeportd\nnode_name = \"x\"\n"));
        assert!(!looks_like_uci(Path::new("/tmp/x"), "configuration = 1\n"));
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn the_cluster_section_becomes_the_cluster_table() {
        let c = config(
            "config nodeportd 'main'\n\toption node_ip '198.18.0.1'\n\nconfig cluster 'cluster'\n\toption server 'https://198.18.0.1:6443'\n\toption ca_file '/etc/nodeportd/cluster-ca.crt'\n\toption token_file '/etc/nodeportd/cluster-token'\n\tlist namespaces 'shop'\n\tlist namespaces 'web'\n\toption label_selector 'tier=edge'\n\toption watch_timeout_seconds '60'\n",
        );
        let k = c.cluster.expect("cluster");
        assert_eq!(k.server, "https://198.18.0.1:6443");
        assert_eq!(k.namespaces, vec!["shop", "web"]);
        assert_eq!(k.label_selector.as_deref(), Some("tier=edge"));
        assert_eq!(k.watch_timeout_seconds, 60);
        let one = config("config cluster\n\toption server 'https://k8s'\n\toption ca_file '/ca'\n\toption cert_file '/c'\n\toption key_file '/k'\n\toption namespaces 'shop'\n");
        assert_eq!(one.cluster.unwrap().namespaces, vec!["shop"]);
        let e = uci_to_toml("config cluster\n\toption server 'https://k8s'\nconfig cluster\n").unwrap_err();
        assert!(e.0.contains("second `config cluster`"), "{e}");
    }
}
