//! Logging through `log`: stderr (default) or syslog (`/dev/log`, ident `nodeportd`).

use std::io::Write;

use log::{LevelFilter, Log, Metadata, Record};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Stderr,
    Syslog,
}

impl Target {
    pub fn parse(s: &str) -> Option<Target> {
        match s {
            "stderr" => Some(Target::Stderr),
            "syslog" => Some(Target::Syslog),
            _ => None,
        }
    }
}

struct StderrLogger;

impl Log for StderrLogger {
    fn enabled(&self, _: &Metadata) -> bool {
        true
    }
    fn log(&self, record: &Record) {
        if self.enabled(record.metadata()) {
            // procd/logd adds its own timestamps; keep lines short and greppable.
            let _ = writeln!(
                std::io::stderr().lock(),
                "nodeportd[{}]: {}: {}",
                std::process::id(),
                record.level(),
                record.args()
            );
        }
    }
    fn flush(&self) {}
}

/// Install the logger. Syslog falls back to stderr (with a warning) when `/dev/log` is absent.
pub fn init(target: Target, level: LevelFilter) {
    let installed = match target {
        Target::Syslog => {
            let fmt = syslog::Formatter3164 {
                facility: syslog::Facility::LOG_DAEMON,
                hostname: None,
                process: "nodeportd".into(),
                pid: std::process::id(),
            };
            match syslog::unix(fmt) {
                Ok(logger) => log::set_boxed_logger(Box::new(syslog::BasicLogger::new(logger))).is_ok(),
                Err(e) => {
                    let _ = log::set_logger(&StderrLogger);
                    log::set_max_level(level);
                    log::warn!("syslog unavailable ({e}); logging to stderr");
                    return;
                }
            }
        }
        Target::Stderr => log::set_logger(&StderrLogger).is_ok(),
    };
    if installed {
        log::set_max_level(level);
    }
}

/// Change the level at run time (SIGHUP with a new `log_level`).
pub fn set_level(level: LevelFilter) {
    log::set_max_level(level);
}
