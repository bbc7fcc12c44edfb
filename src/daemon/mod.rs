//! The daemon: command line, start-up, the event loop.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::Config;
use crate::logging;

pub mod clock;
pub mod cluster;
pub mod handlers;
pub mod health;
pub mod memory;
pub mod node;
pub mod pod_routes;
pub mod run;
pub mod status;
pub mod sync;
pub mod ubus;

pub use run::State;

/// Parsed `nodeportd` command line (CONTRACT.md, Programs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Args {
    pub config: Option<PathBuf>,
    pub socket: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub log: Option<String>,
    pub log_level: Option<String>,
    pub dry_run: bool,
    pub check_config: bool,
    pub version: bool,
    pub cleanup: bool,
    pub help: bool,
}

pub const USAGE: &str = "usage: nodeportd [--config FILE] [--socket PATH] [--state-dir DIR] [--log stderr|syslog] [--log-level LEVEL] [--dry-run]
       nodeportd --check-config [--config FILE]
       nodeportd --cleanup [--config FILE]
       nodeportd --version
       nodeportd ctl ARGS...   (same as nodeportctl ARGS...)";

impl Args {
    pub fn parse(args: &[String]) -> Result<Args, String> {
        let mut a = Args::default();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
                _ => (arg.as_str(), None),
            };
            let mut value = |name: &str| -> Result<String, String> {
                match inline.clone() {
                    Some(v) => Ok(v),
                    None => it.next().cloned().ok_or_else(|| format!("{name} needs a value")),
                }
            };
            match flag {
                "--config" | "-c" => a.config = Some(value(flag)?.into()),
                "--socket" => a.socket = Some(value(flag)?.into()),
                "--state-dir" => a.state_dir = Some(value(flag)?.into()),
                "--log" => {
                    let v = value(flag)?;
                    if logging::Target::parse(&v).is_none() {
                        return Err(format!("--log: invalid value {v:?}: one of stderr, syslog"));
                    }
                    a.log = Some(v)
                }
                "--log-level" => {
                    let v = value(flag)?;
                    if crate::config::parse_level(&v).is_none() {
                        return Err(format!(
                            "--log-level: invalid value {v:?}: one of error, warn, info, debug, trace, off"
                        ));
                    }
                    a.log_level = Some(v)
                }
                "--dry-run" => a.dry_run = true,
                "--check-config" => a.check_config = true,
                "--cleanup" => a.cleanup = true,
                "--version" | "-V" => a.version = true,
                "--help" | "-h" => a.help = true,
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(a)
    }

    /// The configuration with command-line overrides applied.
    pub fn effective_config(&self) -> Result<Config, String> {
        let mut cfg = Config::load_or_default(self.config.as_deref()).map_err(|e| e.to_string())?;
        if let Some(s) = &self.socket {
            cfg.socket = s.clone();
        }
        if let Some(d) = &self.state_dir {
            cfg.state_dir = d.clone();
        }
        if let Some(l) = self.log_level.as_deref().and_then(crate::config::parse_level) {
            cfg.log_level = l;
        }
        Ok(cfg)
    }
}

pub fn main(args: Vec<String>) -> ExitCode {
    // The start is timed from here (`started in`, `startToInSyncMillis`): the config is read first.
    let started = std::time::Instant::now();
    let args = match Args::parse(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("nodeportd: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if args.help {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if args.version {
        println!("nodeportd {}", crate::VERSION);
        return ExitCode::SUCCESS;
    }
    let cfg = match args.effective_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nodeportd: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.check_config {
        print!("{}", cfg.to_toml());
        return ExitCode::SUCCESS;
    }
    let target = args.log.as_deref().and_then(logging::Target::parse).unwrap_or(logging::Target::Stderr);
    logging::init(target, cfg.log_level);
    if args.cleanup {
        return match sync::cleanup(&cfg) {
            Ok(()) => {
                log::info!("removed table inet {}", cfg.table);
                ExitCode::SUCCESS
            }
            Err(e) => {
                log::error!("cleanup failed: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match run::run(args, cfg, started) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
