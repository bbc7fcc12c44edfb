//! OpenWrt UCI syntax for the same keys as the TOML config.

use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UciError(pub String);

impl std::fmt::Display for UciError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

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

/// Placeholder until the UCI parser lands: refuses everything with a clear message.
pub fn uci_to_toml(_text: &str) -> Result<toml::Table, UciError> {
    Err(UciError("UCI configuration is not supported by this build".into()))
}
