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
            // procd/logd adds its own timestamps; keep lines short and greppable. Stderr is
            // unbuffered: format the line first and write it with one syscall, not one per
            // piece (13 per line; each costs a lot on a router's CPU).
            let line = format!("nodeportd[{}]: {}: {}\n", std::process::id(), record.level(), record.args());
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
    }
    fn flush(&self) {}
}

/// RFC 3164 framing without the timestamp: `<PRI>nodeportd[PID]: message`. The local syslogd
/// (OpenWrt's logd, busybox syslogd, rsyslog) stamps a message that carries none with its own
/// clock. syslog's `Formatter3164` formats the time through the `time` crate (~40 KB on mipsel)
/// and in UTC, which is not what the router's log shows anyway.
#[derive(Clone)]
struct Plain3164 {
    pid: u32,
}

impl<T: std::fmt::Display> syslog::LogFormat<T> for Plain3164 {
    fn format<W: Write>(&self, w: &mut W, severity: syslog::Severity, message: T) -> syslog::Result<()> {
        let priority = syslog::Facility::LOG_DAEMON as u8 | severity as u8;
        write!(w, "<{priority}>nodeportd[{}]: {message}", self.pid).map_err(syslog::Error::Write)
    }
}

struct SyslogLogger(std::sync::Mutex<syslog::Logger<syslog::LoggerBackend, Plain3164>>);

impl Log for SyslogLogger {
    fn enabled(&self, _: &Metadata) -> bool {
        true
    }
    fn log(&self, record: &Record) {
        let Ok(mut logger) = self.0.lock() else { return };
        let message = record.args();
        let _ = match record.level() {
            log::Level::Error => logger.err(message),
            log::Level::Warn => logger.warning(message),
            log::Level::Info => logger.info(message),
            log::Level::Debug | log::Level::Trace => logger.debug(message),
        };
    }
    fn flush(&self) {
        if let Ok(mut logger) = self.0.lock() {
            let _ = logger.backend.flush();
        }
    }
}

/// Install the logger. Syslog falls back to stderr (with a warning) when `/dev/log` is absent.
pub fn init(target: Target, level: LevelFilter) {
    let installed = match target {
        Target::Syslog => match syslog::unix(Plain3164 { pid: std::process::id() }) {
            Ok(logger) => log::set_boxed_logger(Box::new(SyslogLogger(std::sync::Mutex::new(logger)))).is_ok(),
            Err(e) => {
                let _ = log::set_logger(&StderrLogger);
                log::set_max_level(level);
                log::warn!("syslog unavailable ({e}); logging to stderr");
                return;
            }
        },
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

#[cfg(test)]
mod tests {
    use super::*;
    use syslog::LogFormat;

    #[test]
    fn syslog_lines_carry_daemon_priority_ident_and_pid_but_no_timestamp() {
        let f = Plain3164 { pid: 4242 };
        let mut out = Vec::new();
        f.format(&mut out, syslog::Severity::LOG_WARNING, "nodePort 30080 released").unwrap();
        // LOG_DAEMON (3 << 3) | LOG_WARNING (4) = 28; syslogd stamps the time itself.
        assert_eq!(String::from_utf8(out).unwrap(), "<28>nodeportd[4242]: nodePort 30080 released");
        let mut out = Vec::new();
        f.format(&mut out, syslog::Severity::LOG_DEBUG, 7).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "<31>nodeportd[4242]: 7");
    }
}
