//! Logging: a `tracing` subscriber on stderr whose level the `log_*` RPCs change at run time.

use std::io::IsTerminal;
use std::sync::Arc;

use parking_lot::Mutex;
use rpc::{LogControl, LogLevel};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::prelude::*;
use tracing_subscriber::{Registry, reload};

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

/// The `log_set_level` / `log_get_level` backend: one stderr output whose level filter is
/// swapped through a reload handle. SPDK's "print level" and "log level" are the same thing
/// here.
pub struct ReloadLog {
    handle: reload::Handle<LevelFilter, Registry>,
    level: Mutex<LogLevel>,
}

impl LogControl for ReloadLog {
    fn set_level(&self, level: LogLevel) -> Result<(), String> {
        self.handle
            .modify(|f| *f = LevelFilter::from_level(level.to_tracing()))
            .map_err(|e| e.to_string())?;
        *self.level.lock() = level;
        tracing::info!("log level set to {level}");
        Ok(())
    }

    fn level(&self) -> LogLevel {
        *self.level.lock()
    }
}

/// Installs the global subscriber at `level` and returns its control.
pub fn init(level: LogLevel, filter: LevelFilter) -> Arc<ReloadLog> {
    let (layer, handle) = reload::Layer::new(filter);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_thread_names(true);
    // A second init (never in the binary) leaves the first subscriber in place.
    let _ = tracing_subscriber::registry()
        .with(layer)
        .with(fmt)
        .try_init();
    Arc::new(ReloadLog {
        handle,
        level: Mutex::new(level),
    })
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
