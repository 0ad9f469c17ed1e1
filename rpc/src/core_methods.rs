//! Generic methods that need no storage state: `rpc_get_methods`, `spdk_get_version`,
//! `framework_start_init`, `framework_wait_init`, the `log_*` family and `spdk_kill_instance`.
//!
//! The daemon supplies what only it can do through [`CoreHooks`]: run subsystem
//! initialisation, change the log level, stop the process.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::Params;
use crate::error::{MSG_ALREADY_INITIALIZED, RpcError};
use crate::params::{bdev, no_params, strict};
use crate::state::{RpcState, StateMask};
use crate::table::{Methods, RegisterError};

/// A boxed `Send` future, as returned by hooks.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// `framework_start_init` hook: initialise the subsystems; `Err(reason)` makes the RPC fail
/// with `-32603 framework_initialization failed` (the daemon should then exit, as SPDK does).
pub type StartInitHook = Arc<dyn Fn() -> BoxFuture<Result<(), String>> + Send + Sync>;

/// `spdk_kill_instance` hook: called with the requested signal after the RPC was validated.
pub type KillHook = Arc<dyn Fn(KillSignal) + Send + Sync>;

/// SPDK's log levels, as the `log_*` RPCs name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `ERROR`
    Error,
    /// `WARNING`
    Warning,
    /// `NOTICE` (maps to tracing's INFO)
    Notice,
    /// `INFO`
    Info,
    /// `DEBUG`
    Debug,
}

impl LogLevel {
    /// SPDK's name: `ERROR`, `WARNING`, `NOTICE`, `INFO`, `DEBUG`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "ERROR",
            LogLevel::Warning => "WARNING",
            LogLevel::Notice => "NOTICE",
            LogLevel::Info => "INFO",
            LogLevel::Debug => "DEBUG",
        }
    }

    /// Parse SPDK's names, case-insensitively as SPDK v24.09 does.
    pub fn parse(s: &str) -> Option<LogLevel> {
        [
            LogLevel::Error,
            LogLevel::Warning,
            LogLevel::Notice,
            LogLevel::Info,
            LogLevel::Debug,
        ]
        .into_iter()
        .find(|l| l.as_str().eq_ignore_ascii_case(s))
    }

    /// The closest tracing level (NOTICE has none and becomes INFO).
    pub fn to_tracing(self) -> tracing::Level {
        match self {
            LogLevel::Error => tracing::Level::ERROR,
            LogLevel::Warning => tracing::Level::WARN,
            LogLevel::Notice | LogLevel::Info => tracing::Level::INFO,
            LogLevel::Debug => tracing::Level::DEBUG,
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the `log_*` RPCs control. The daemon implements it, e.g. over a
/// `tracing_subscriber::reload::Handle`.
pub trait LogControl: Send + Sync + 'static {
    /// `log_set_level`.
    fn set_level(&self, level: LogLevel) -> Result<(), String>;
    /// `log_get_level`.
    fn level(&self) -> LogLevel;
    /// `log_set_print_level` (SPDK: the level also printed to the console). Defaults to
    /// [`LogControl::set_level`].
    fn set_print_level(&self, level: LogLevel) -> Result<(), String> {
        self.set_level(level)
    }
    /// `log_get_print_level`. Defaults to [`LogControl::level`].
    fn print_level(&self) -> LogLevel {
        self.level()
    }
    /// `log_get_flags`: per-component debug flags and whether each is on.
    fn flags(&self) -> Vec<(String, bool)> {
        Vec::new()
    }
    /// `log_set_flag` / `log_clear_flag`; `Err` for an unknown flag (`-32602 invalid log flag`).
    fn set_flag(&self, flag: &str, enabled: bool) -> Result<(), String> {
        let _ = enabled;
        Err(format!("unknown log flag '{flag}'"))
    }
}

/// The signals `spdk_kill_instance` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum KillSignal {
    /// `SIGINT`
    #[serde(rename = "SIGINT")]
    Int,
    /// `SIGTERM`
    #[serde(rename = "SIGTERM")]
    Term,
    /// `SIGQUIT`
    #[serde(rename = "SIGQUIT")]
    Quit,
    /// `SIGHUP`
    #[serde(rename = "SIGHUP")]
    Hup,
    /// `SIGKILL`
    #[serde(rename = "SIGKILL")]
    Kill,
    /// `SIGUSR1`
    #[serde(rename = "SIGUSR1")]
    Usr1,
}

/// What `spdk_get_version` reports. SPDK's shape is kept (`version` string plus `fields`) so
/// that tools parsing it keep working; the SPDK version is the RPC compatibility level, and
/// rtgt's own version is added as `rtgt_version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionInfo {
    /// SPDK major version emulated (e.g. 26).
    pub major: u32,
    /// SPDK minor version emulated (e.g. 5 for 26.05).
    pub minor: u32,
    /// SPDK patch level.
    pub patch: u32,
    /// Version suffix such as `-pre` (empty for releases).
    pub suffix: String,
    /// Source commit, reported as `git sha1 …` when known.
    pub commit: Option<String>,
    /// rtgt's own version.
    pub rtgt_version: String,
}

impl Default for VersionInfo {
    fn default() -> Self {
        Self {
            major: 26,
            minor: 5,
            patch: 0,
            suffix: String::new(),
            commit: None,
            rtgt_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }
}

impl VersionInfo {
    /// SPDK's version string: `SPDK v26.05`, `SPDK v24.09.1-pre git sha1 abc…`.
    pub fn version_string(&self) -> String {
        let mut s = format!("SPDK v{}.{:02}", self.major, self.minor);
        if self.patch != 0 {
            s.push_str(&format!(".{}", self.patch));
        }
        s.push_str(&self.suffix);
        if let Some(c) = &self.commit {
            s.push_str(&format!(" git sha1 {c}"));
        }
        s
    }
}

#[derive(Serialize)]
struct VersionFields {
    major: u32,
    minor: u32,
    patch: u32,
    suffix: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    commit: Option<String>,
}

#[derive(Serialize)]
struct VersionReply {
    version: String,
    fields: VersionFields,
    rtgt_version: String,
}

/// What the daemon plugs into the generic methods. Every hook is optional.
#[derive(Clone, Default)]
pub struct CoreHooks {
    /// Reported by `spdk_get_version`.
    pub version: VersionInfo,
    /// Run by `framework_start_init` before the state becomes RUNTIME. Without it the RPC only
    /// switches the state.
    pub start_init: Option<StartInitHook>,
    /// Backs the `log_*` RPCs; they are not registered without it.
    pub log: Option<Arc<dyn LogControl>>,
    /// Backs `spdk_kill_instance`; not registered without it.
    pub kill: Option<KillHook>,
}

impl fmt::Debug for CoreHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoreHooks")
            .field("version", &self.version)
            .field("start_init", &self.start_init.is_some())
            .field("log", &self.log.is_some())
            .field("kill", &self.kill.is_some())
            .finish()
    }
}

impl CoreHooks {
    /// No hooks, default version.
    pub fn new() -> Self {
        Self::default()
    }

    /// Set the version reported by `spdk_get_version`.
    pub fn version(mut self, version: VersionInfo) -> Self {
        self.version = version;
        self
    }

    /// Set the `framework_start_init` hook.
    pub fn on_start_init<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        self.start_init = Some(Arc::new(move || Box::pin(f())));
        self
    }

    /// Set the log control behind the `log_*` RPCs.
    pub fn log_control(mut self, log: Arc<dyn LogControl>) -> Self {
        self.log = Some(log);
        self
    }

    /// Set the `spdk_kill_instance` hook.
    pub fn on_kill(mut self, f: impl Fn(KillSignal) + Send + Sync + 'static) -> Self {
        self.kill = Some(Arc::new(f));
        self
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct GetMethodsParams {
    current: bool,
    include_aliases: bool,
}

#[derive(Deserialize)]
struct LevelParams {
    level: String,
}

#[derive(Deserialize)]
struct FlagParams {
    flag: String,
}

#[derive(Deserialize)]
struct KillParams {
    sig_name: KillSignal,
}

impl<Ctx: Send + Sync + 'static> Methods<Ctx> {
    /// Register the generic methods: `rpc_get_methods`, `spdk_get_version`,
    /// `framework_start_init`, `framework_wait_init`, and, when their hooks are set, the `log_*`
    /// methods and `spdk_kill_instance`.
    pub fn register_core(&mut self, hooks: CoreHooks) -> Result<&mut Self, RegisterError> {
        let registry = self.registry();
        let state = self.state().clone();
        self.register(
            "rpc_get_methods",
            StateMask::ANY,
            move |p: Params<'_>, _: &Ctx| {
                let req: GetMethodsParams = strict(&p)?;
                let now = state.get();
                // SPDK lists in reverse registration order.
                let names: Vec<&'static str> = registry
                    .snapshot()
                    .into_iter()
                    .rev()
                    .filter(|m| req.include_aliases || m.alias_of.is_none())
                    .filter(|m| !req.current || m.mask.allows(now))
                    .map(|m| m.name)
                    .collect();
                Ok(names)
            },
        )?;

        let version = hooks.version.clone();
        self.register(
            "spdk_get_version",
            StateMask::ANY,
            move |p: Params<'_>, _: &Ctx| {
                no_params(&p, "spdk_get_version method requires no parameters")?;
                Ok(VersionReply {
                    version: version.version_string(),
                    fields: VersionFields {
                        major: version.major,
                        minor: version.minor,
                        patch: version.patch,
                        suffix: version.suffix.clone(),
                        commit: version.commit.clone(),
                    },
                    rtgt_version: version.rtgt_version.clone(),
                })
            },
        )?;

        let state = self.state().clone();
        let start_init = hooks.start_init.clone();
        let init_lock = Arc::new(tokio::sync::Mutex::new(()));
        self.register_async(
            "framework_start_init",
            StateMask::STARTUP,
            move |p: Params<'static>, _: Arc<Ctx>| {
                let state = state.clone();
                let start_init = start_init.clone();
                let init_lock = init_lock.clone();
                async move {
                    no_params(&p, "framework_start_init requires no parameters")?;
                    // Concurrent callers queue here; the loser then sees RUNTIME.
                    let _guard = init_lock.lock().await;
                    if state.get() != RpcState::Startup {
                        return Err(RpcError::invalid_state(MSG_ALREADY_INITIALIZED));
                    }
                    if let Some(hook) = start_init {
                        if let Err(reason) = hook().await {
                            tracing::error!(%reason, "framework initialization failed");
                            return Err(RpcError::internal("framework_initialization failed"));
                        }
                    }
                    state.set(RpcState::Runtime);
                    tracing::info!("framework initialized; RPC state is RUNTIME");
                    Ok(true)
                }
            },
        )?;

        let state = self.state().clone();
        self.register_async(
            "framework_wait_init",
            StateMask::ANY,
            move |p: Params<'static>, _: Arc<Ctx>| {
                let state = state.clone();
                async move {
                    // SPDK ignores parameters here; rtgt refuses them, as it does for every
                    // other method that takes none.
                    no_params(&p, "framework_wait_init requires no parameters")?;
                    state.wait_for(RpcState::Runtime).await;
                    Ok(true)
                }
            },
        )?;

        if let Some(log) = hooks.log {
            self.register_log_methods(log)?;
        }

        if let Some(kill) = hooks.kill {
            self.register(
                "spdk_kill_instance",
                StateMask::RUNTIME,
                move |p: Params<'_>, _: &Ctx| {
                    let req: KillParams = strict(&p)?;
                    tracing::info!(signal = ?req.sig_name, "spdk_kill_instance");
                    kill(req.sig_name);
                    Ok(true)
                },
            )?;
        }
        Ok(self)
    }

    fn register_log_methods(&mut self, log: Arc<dyn LogControl>) -> Result<(), RegisterError> {
        fn decode_level(p: &Params<'_>) -> Result<LogLevel, RpcError> {
            let req: LevelParams = bdev(p)?;
            LogLevel::parse(&req.level).ok_or_else(|| {
                tracing::warn!(level = req.level, "unknown log level");
                RpcError::internal("spdk_json_decode_object failed")
            })
        }
        let apply = |r: Result<(), String>| {
            r.map_err(|reason| {
                tracing::error!(%reason, "changing the log level failed");
                RpcError::internal(reason)
            })
        };

        let l = log.clone();
        self.register(
            "log_set_level",
            StateMask::ANY,
            move |p: Params<'_>, _: &Ctx| {
                let level = decode_level(&p)?;
                apply(l.set_level(level))?;
                Ok(true)
            },
        )?;
        let l = log.clone();
        self.register(
            "log_get_level",
            StateMask::ANY,
            move |p: Params<'_>, _: &Ctx| {
                no_params(&p, "log_get_level requires no parameters")?;
                Ok(l.level().as_str())
            },
        )?;
        let l = log.clone();
        self.register(
            "log_set_print_level",
            StateMask::ANY,
            move |p: Params<'_>, _: &Ctx| {
                let level = decode_level(&p)?;
                apply(l.set_print_level(level))?;
                Ok(true)
            },
        )?;
        let l = log.clone();
        self.register(
            "log_get_print_level",
            StateMask::ANY,
            move |p: Params<'_>, _: &Ctx| {
                no_params(&p, "log_get_print_level requires no parameters")?;
                Ok(l.print_level().as_str())
            },
        )?;
        for (name, enabled) in [("log_set_flag", true), ("log_clear_flag", false)] {
            let l = log.clone();
            self.register(name, StateMask::ANY, move |p: Params<'_>, _: &Ctx| {
                let req: FlagParams = bdev(&p)?;
                l.set_flag(&req.flag, enabled).map_err(|reason| {
                    tracing::warn!(%reason, "log flag rejected");
                    RpcError::invalid_params("invalid log flag")
                })?;
                Ok(true)
            })?;
        }
        let l = log;
        self.register(
            "log_get_flags",
            StateMask::ANY,
            move |p: Params<'_>, _: &Ctx| {
                no_params(&p, "log_get_flags requires no parameters")?;
                let map: serde_json::Map<String, serde_json::Value> = l
                    .flags()
                    .into_iter()
                    .map(|(k, v)| (k, serde_json::Value::Bool(v)))
                    .collect();
                Ok(map)
            },
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_string_matches_spdk_format() {
        let mut v = VersionInfo::default();
        assert_eq!(v.version_string(), "SPDK v26.05");
        v.major = 24;
        v.minor = 9;
        v.patch = 1;
        v.suffix = "-pre".into();
        v.commit = Some("abc123".into());
        assert_eq!(v.version_string(), "SPDK v24.09.1-pre git sha1 abc123");
    }

    #[test]
    fn log_levels_parse_case_insensitively() {
        assert_eq!(LogLevel::parse("warning"), Some(LogLevel::Warning));
        assert_eq!(LogLevel::parse("DEBUG"), Some(LogLevel::Debug));
        assert_eq!(LogLevel::parse("WARN"), None);
        assert_eq!(LogLevel::Notice.to_tracing(), tracing::Level::INFO);
    }
}
