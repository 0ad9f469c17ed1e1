//! Logging: `tracing` to standard error at the *print level* and to syslog at the *log level*
//! (as SPDK), both filtered by the log flags; the `log_*` RPCs change all three at run time.

mod flags;
mod syslog;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use rpc::{LogControl, LogLevel};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::prelude::*;
use tracing_subscriber::{Layer, Registry, reload};

use flags::FlagSet;
use syslog::SyslogLayer;

/// Where syslog listens on Linux.
pub const DEFAULT_SYSLOG_SOCKET: &str = "/dev/log";

/// Parses `--log-level`: SPDK's names (`ERROR`, `WARNING`, `NOTICE`, `INFO`, `DEBUG`, any
/// case), plus `warn` and `trace`.
pub fn parse_level(s: &str) -> Result<(LogLevel, LevelFilter), String> {
    if s.eq_ignore_ascii_case("trace") {
        return Ok((LogLevel::Debug, LevelFilter::TRACE));
    }
    let name = if s.eq_ignore_ascii_case("warn") {
        "WARNING"
    } else {
        s
    };
    let level = LogLevel::parse(name).ok_or_else(|| {
        format!("unknown log level '{s}' (error, warning, notice, info, debug, trace)")
    })?;
    Ok((level, LevelFilter::from_level(level.to_tracing())))
}

/// How standard error's lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (colour on a terminal).
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Where the syslog output goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyslogTarget {
    /// `/dev/log`, whenever it exists (lines are dropped while it does not).
    Default,
    /// This socket, or fail.
    Socket(PathBuf),
    /// No syslog output.
    Off,
}

/// How `rtgt serve` starts logging.
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// `--log-level`: the print level and the log level.
    pub level: LogLevel,
    /// Its filter (`trace` is DEBUG for the RPCs, TRACE here).
    pub filter: LevelFilter,
    /// `--log-format`.
    pub format: LogFormat,
    /// `--syslog-socket` / `--no-syslog`.
    pub syslog: SyslogTarget,
    /// `--log-flag`, repeated.
    pub flags: Vec<String>,
}

/// One output's level, as the RPCs name it and as the filter applies it.
#[derive(Debug, Clone, Copy)]
struct Level {
    name: LogLevel,
    filter: LevelFilter,
}

impl Level {
    fn of(name: LogLevel) -> Level {
        Level {
            name,
            filter: LevelFilter::from_level(name.to_tracing()),
        }
    }
}

struct State {
    print: Level,
    log: Level,
    flags: FlagSet,
}

type Handle = reload::Handle<Targets, Registry>;

/// The `log_*` RPCs' backend: a reloadable filter per output.
pub struct ReloadLog {
    stderr: Handle,
    /// The syslog output's filter, socket, and whether the socket was there at start.
    syslog: Option<(Handle, PathBuf, bool)>,
    state: Mutex<State>,
}

impl ReloadLog {
    /// Rebuilds both outputs' filters from the state.
    fn apply(&self, s: &State) -> Result<(), String> {
        self.stderr
            .reload(s.flags.filter(s.print.filter))
            .map_err(|e| e.to_string())?;
        if let Some((h, _, _)) = &self.syslog {
            h.reload(s.flags.filter(s.log.filter))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// The syslog socket in use, if any, and whether it is there now.
    pub fn syslog_socket(&self) -> Option<(&Path, bool)> {
        self.syslog
            .as_ref()
            .map(|(_, p, reachable)| (p.as_path(), *reachable))
    }
}

impl LogControl for ReloadLog {
    fn set_level(&self, level: LogLevel) -> Result<(), String> {
        if self.syslog.is_none() {
            return Err("the log level is syslog's and rtgt runs with --no-syslog; \
                        log_set_print_level sets standard error's level"
                .to_owned());
        }
        let mut s = self.state.lock();
        let before = s.log;
        s.log = Level::of(level);
        if let Err(e) = self.apply(&s) {
            s.log = before;
            return Err(e);
        }
        drop(s);
        tracing::info!("log level (syslog) set to {level}");
        Ok(())
    }

    fn level(&self) -> LogLevel {
        self.state.lock().log.name
    }

    fn set_print_level(&self, level: LogLevel) -> Result<(), String> {
        let mut s = self.state.lock();
        let before = s.print;
        s.print = Level::of(level);
        if let Err(e) = self.apply(&s) {
            s.print = before;
            return Err(e);
        }
        drop(s);
        tracing::info!("print level (standard error) set to {level}");
        Ok(())
    }

    fn print_level(&self) -> LogLevel {
        self.state.lock().print.name
    }

    fn flags(&self) -> Vec<(String, bool)> {
        self.state.lock().flags.listing()
    }

    fn set_flag(&self, flag: &str, enabled: bool) -> Result<(), String> {
        let mut s = self.state.lock();
        let before = s.flags.clone();
        s.flags.apply(flag, enabled)?;
        if let Err(e) = self.apply(&s) {
            s.flags = before;
            return Err(e);
        }
        drop(s);
        tracing::info!(
            "log flag {flag} {}",
            if enabled { "set" } else { "cleared" }
        );
        Ok(())
    }
}

type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// Installs the global subscriber and returns its control; `Err` for an unknown flag or a
/// syslog socket that was asked for and cannot be reached.
pub fn init(opts: &LogOptions) -> Result<Arc<ReloadLog>, String> {
    let mut flags = FlagSet::default();
    for f in &opts.flags {
        flags.apply(f, true)?;
    }
    let print = Level {
        name: opts.level,
        filter: opts.filter,
    };
    let state = State {
        print,
        log: print,
        flags,
    };
    let syslog = match &opts.syslog {
        SyslogTarget::Off => None,
        SyslogTarget::Default => Some(
            SyslogLayer::new(Path::new(DEFAULT_SYSLOG_SOCKET))
                .map_err(|e| format!("syslog output: {e}"))?,
        ),
        SyslogTarget::Socket(p) => Some(
            SyslogLayer::connect(p).map_err(|e| format!("--syslog-socket {}: {e}", p.display()))?,
        ),
    };

    let (stderr_filter, stderr) = reload::Layer::new(state.flags.filter(print.filter));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_thread_names(true);
    let fmt: BoxedLayer = match opts.format {
        LogFormat::Text => fmt
            .with_ansi(std::io::stderr().is_terminal())
            .with_filter(stderr_filter)
            .boxed(),
        LogFormat::Json => fmt
            .json()
            .with_current_span(false)
            .with_filter(stderr_filter)
            .boxed(),
    };
    let mut layers: Vec<BoxedLayer> = vec![fmt];
    let syslog = syslog.map(|layer| {
        let path = layer.path().to_owned();
        let reachable = layer.reachable();
        let (filter, handle) = reload::Layer::new(state.flags.filter(state.log.filter));
        layers.push(layer.with_filter(filter).boxed());
        (handle, path, reachable)
    });
    // A second init (never in the binary) leaves the first subscriber in place.
    let _ = tracing_subscriber::registry().with(layers).try_init();
    Ok(Arc::new(ReloadLog {
        stderr,
        syslog,
        state: Mutex::new(state),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse() {
        assert_eq!(parse_level("notice").unwrap().1, LevelFilter::INFO);
        assert_eq!(parse_level("WARN").unwrap().0, LogLevel::Warning);
        assert_eq!(parse_level("trace").unwrap().1, LevelFilter::TRACE);
        assert!(parse_level("loud").is_err());
    }
}
