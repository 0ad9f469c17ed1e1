//! `rtgt serve`: the target daemon, SPDK's `nvmf_tgt` for rtgt.
//!
//! Start-up: logging; reactors (one per core of `-m`, or `--cores N` unpinned); the target on
//! the chosen fabric (`rdma`, or the in-process `sim`); the method table. The RPC servers run
//! on a thread of their own with a current-thread tokio runtime. With `--json`, the
//! configuration is applied before the socket appears (STARTUP calls, initialisation, RUNTIME
//! calls, in file order; the first error stops the daemon), so a client that sees the socket
//! sees the configured target. With `--wait-for-rpc` the RPC state stays STARTUP until
//! `framework_start_init`, and the RUNTIME part of `--json` is applied right after it.
//!
//! SIGINT or SIGTERM (or `spdk_kill_instance`) shut down cleanly: the RPC servers stop (socket
//! and lock file removed), every subsystem is stopped (connections disconnected), listeners
//! closed and transports destroyed, the reactors stop, and the process exits 0.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::config_store::ConfigStore;
use fabric::{Provider, SimNetwork};
use rpc::methods::TargetContext;
use rpc::methods::load::{self, ConfigFile};
use rpc::{
    CoreHooks, HttpOptions, KillSignal, Limits, MethodTable, Methods, RpcState, ServerHandle,
    StateHandle, TcpOptions, UnixOptions,
};
use target_core::bdev::BdevRegistry;
use target_core::reactor::{ReactorConfig, Reactors};
use target_core::registry::TransportEnv;
use target_core::target::Target;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

/// Which fabric provider the RDMA transports use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FabricKind {
    /// Real RDMA devices (NICs, soft-RoCE) through libibverbs and librdmacm.
    Rdma,
    /// The in-process simulated fabric (device sim0 at 10.0.0.1), for tests.
    Sim,
}

/// Options of `rtgt serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Unix socket of the JSON-RPC server (guarded by PATH.lock, as SPDK does).
    #[arg(short = 'r', long = "rpc-socket", default_value = "/var/tmp/spdk.sock")]
    rpc_socket: PathBuf,

    /// Permission bits of the RPC socket, in octal.
    #[arg(long = "rpc-socket-mode", default_value = "0600", value_parser = parse_mode)]
    rpc_socket_mode: u32,

    /// Apply this saved configuration (save_config output) at start.
    #[arg(long = "json", value_name = "FILE", conflicts_with = "config")]
    json: Option<PathBuf>,

    /// Keep the configuration in FILE: load it at start if it exists, and rewrite it
    /// (atomically, previous version in FILE.bak) after every RPC that changes the
    /// configuration, before that RPC is answered.
    #[arg(long = "config", value_name = "FILE")]
    config: Option<PathBuf>,

    /// Stay in the STARTUP RPC state until framework_start_init.
    #[arg(long = "wait-for-rpc")]
    wait_for_rpc: bool,

    /// Core mask: one pinned reactor per core (`0x3`, `[0-1]`). Default 0x1.
    #[arg(short = 'm', long = "cpumask", conflicts_with = "cores")]
    cpumask: Option<String>,

    /// Run N reactors without pinning them to cores.
    #[arg(long = "cores", value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    cores: Option<u16>,

    /// Microseconds a reactor polls without finding work before it sleeps on its fds
    /// (adaptive polling); 0 sleeps at once, `none` never sleeps. Default 200.
    #[arg(long = "idle-sleep-us", value_name = "US|none")]
    idle_sleep_us: Option<String>,

    /// Log level: error, warning, notice, info, debug or trace. Sets both the print level
    /// (standard error) and the log level (syslog).
    #[arg(long = "log-level", default_value = "notice")]
    log_level: String,

    /// Set a log flag at start, as `log_set_flag` (repeatable; `all` for every component).
    #[arg(short = 'L', long = "log-flag", value_name = "FLAG")]
    log_flags: Vec<String>,

    /// Standard error's format: text, or one JSON object per line for log shippers.
    #[arg(long = "log-format", value_enum, default_value = "text")]
    log_format: crate::log::LogFormat,

    /// Send the log-level output to this syslog socket (default: /dev/log when it exists).
    #[arg(
        long = "syslog-socket",
        value_name = "PATH",
        conflicts_with = "no_syslog"
    )]
    syslog_socket: Option<PathBuf>,

    /// No syslog output (log_set_level is then refused: only the print level applies).
    #[arg(long = "no-syslog")]
    no_syslog: bool,

    /// Fabric provider for the RDMA and SRP transports.
    #[arg(long = "fabric", value_enum, default_value = "rdma")]
    fabric: FabricKind,

    /// Serve Prometheus metrics on http://ADDR:PORT/metrics (and /healthz); a bare PORT
    /// listens on loopback.
    #[arg(long = "metrics", value_name = "[ADDR:]PORT", value_parser = crate::metrics::parse_addr)]
    metrics: Option<SocketAddr>,

    /// Also serve JSON-RPC with SPDK framing on TCP (rpc.py -s ADDR -p PORT).
    #[arg(long = "rpc-listen", value_name = "ADDR:PORT")]
    rpc_listen: Option<SocketAddr>,

    /// Also serve JSON-RPC over HTTP (POST).
    #[arg(long = "http-listen", value_name = "ADDR:PORT")]
    http_listen: Option<SocketAddr>,

    /// Require `Authorization: Bearer TOKEN` on the HTTP endpoint.
    #[arg(long = "http-token", value_name = "TOKEN", requires = "http_listen")]
    http_token: Option<String>,

    /// Like --http-token, with the token read from a file (so it does not show in `ps`).
    #[arg(
        long = "http-token-file",
        value_name = "FILE",
        requires = "http_listen",
        conflicts_with = "http_token"
    )]
    http_token_file: Option<PathBuf>,

    /// Allow --rpc-listen / --http-listen on non-loopback addresses.
    #[arg(long = "rpc-allow-remote")]
    rpc_allow_remote: bool,

    /// Close an RPC connection (Unix, TCP or HTTP) that has no request in progress for SECS
    /// seconds, counted from its opening or its last answer; 0 never closes one. A call in
    /// progress is never cut.
    #[arg(long = "rpc-idle-timeout", value_name = "SECS", default_value_t = 60)]
    rpc_idle_timeout: u64,
}

impl ServeArgs {
    /// The RPC servers' limits: SPDK's, with the idle timeout asked for.
    fn rpc_limits(&self) -> Limits {
        Limits {
            idle_timeout: (self.rpc_idle_timeout > 0)
                .then(|| Duration::from_secs(self.rpc_idle_timeout)),
            ..Limits::default()
        }
    }
}

fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    match u32::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err(format!("'{s}' is not an octal permission mode (e.g. 0600)")),
    }
}

/// Runs the daemon until it is told to stop; the process exit code.
pub fn run(args: ServeArgs) -> ExitCode {
    let (level, filter) = match crate::log::parse_level(&args.log_level) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rtgt serve: {e}");
            return ExitCode::from(2);
        }
    };
    let syslog = match (&args.syslog_socket, args.no_syslog) {
        (_, true) => crate::log::SyslogTarget::Off,
        (Some(p), false) => crate::log::SyslogTarget::Socket(p.clone()),
        (None, false) => crate::log::SyslogTarget::Default,
    };
    let log = match crate::log::init(&crate::log::LogOptions {
        level,
        filter,
        format: args.log_format,
        syslog,
        flags: args.log_flags.clone(),
    }) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rtgt serve: {e}");
            return ExitCode::from(2);
        }
    };
    match log.syslog_socket() {
        Some((p, true)) => tracing::info!("logging to standard error and syslog ({})", p.display()),
        Some((p, false)) => tracing::info!(
            "logging to standard error, and to syslog at {} once it exists (not there now)",
            p.display()
        ),
        None => tracing::info!("logging to standard error (no syslog)"),
    }
    match start(args, log) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("rtgt serve: {e}");
            ExitCode::FAILURE
        }
    }
}

fn reactor_config(args: &ServeArgs) -> Result<ReactorConfig, String> {
    let mut cfg = match (args.cores, &args.cpumask) {
        (Some(n), _) => ReactorConfig::with_count(usize::from(n)),
        (None, Some(mask)) => ReactorConfig::from_cpumask(mask)?,
        (None, None) => ReactorConfig::from_cpumask("0x1")?,
    };
    match args.idle_sleep_us.as_deref() {
        None => {}
        Some("none") => cfg.idle_sleep_after = None,
        Some(us) => {
            let us: u64 = us.parse().map_err(|_| {
                format!("--idle-sleep-us: '{us}' is not a number of microseconds or 'none'")
            })?;
            cfg.idle_sleep_after = Some(std::time::Duration::from_micros(us));
        }
    }
    Ok(cfg)
}

fn provider(kind: FabricKind) -> Provider {
    match kind {
        FabricKind::Sim => {
            tracing::info!(
                "fabric: simulated (device sim0 at {})",
                fabric::sim::GLOBAL_SIM_ADDR
            );
            Provider::Sim(SimNetwork::global())
        }
        FabricKind::Rdma => {
            match fabric::Fabric::rdma().and_then(|f| f.devices()) {
                Ok(devs) => tracing::info!(
                    "fabric: rdma, devices: {}",
                    devs.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
                ),
                Err(e) => tracing::warn!(
                    "fabric: rdma, but {e}; the daemon runs, and creating an RDMA or SRP transport will fail until a device exists"
                ),
            }
            Provider::Rdma
        }
    }
}

fn start(args: ServeArgs, log: Arc<crate::log::ReloadLog>) -> Result<ExitCode, String> {
    let mut store = None;
    let config = match (&args.json, &args.config) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            Some(load::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?)
        }
        (None, Some(path)) => {
            let (s, cfg) = ConfigStore::open(path)?;
            store = Some(Arc::new(s));
            cfg
        }
        (None, None) => None,
    };
    let rcfg = reactor_config(&args)?;
    let reactors = Reactors::start(rcfg).map_err(|e| format!("cannot start the reactors: {e}"))?;
    let env = TransportEnv::new().with(provider(args.fabric));
    let target = match Target::start(reactors.clone(), BdevRegistry::new(), env) {
        Ok(t) => t,
        Err(e) => {
            reactors.stop();
            return Err(format!("cannot start the target: {e}"));
        }
    };

    let rpc_target = Arc::clone(&target);
    let thread = std::thread::Builder::new()
        .name("rpc".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the RPC runtime: {e}"))?;
            rt.block_on(rpc_main(args, config, store, rpc_target, log))
        })
        .map_err(|e| format!("cannot start the RPC thread: {e}"))?;
    let result = thread
        .join()
        .unwrap_or_else(|_| Err("the RPC thread panicked".into()));
    drop(target);
    reactors.stop();
    tracing::info!("rtgt stopped");
    result
}

/// Why the daemon stops.
#[derive(Debug)]
enum Stop {
    Signal(&'static str),
    Failed(String),
}

async fn rpc_main(
    args: ServeArgs,
    config: Option<ConfigFile>,
    store: Option<Arc<ConfigStore>>,
    target: Arc<Target>,
    log: Arc<crate::log::ReloadLog>,
) -> Result<ExitCode, String> {
    let mut sigterm = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let (stop_tx, mut stop_rx) = mpsc::unbounded_channel::<Stop>();

    let state = StateHandle::new(RpcState::Startup);
    let kill_tx = stop_tx.clone();
    let hooks = CoreHooks::new()
        .log_control(log)
        .on_kill(move |sig| match sig {
            KillSignal::Kill => {
                tracing::warn!("spdk_kill_instance SIGKILL: exiting at once");
                std::process::exit(137);
            }
            KillSignal::Usr1 => tracing::info!("spdk_kill_instance SIGUSR1: nothing to do"),
            other => {
                let _ = kill_tx.send(Stop::Signal(match other {
                    KillSignal::Int => "SIGINT",
                    KillSignal::Quit => "SIGQUIT",
                    KillSignal::Hup => "SIGHUP",
                    _ => "SIGTERM",
                }));
            }
        });
    let ctx = Arc::new(TargetContext::new(Arc::clone(&target)));
    let mut methods = Methods::from_arc(Arc::clone(&ctx), state.clone());
    methods
        .register_core(hooks)
        .and_then(|m| rpc::methods::register(m).map(|()| m))
        .map_err(|e| format!("method table: {e}"))?;
    let table = methods.build();

    // Fail fast if another instance owns the socket, before touching any configuration; keep
    // the lock so nobody takes the socket while the configuration is applied. The socket itself
    // appears only once the target is configured, so a client that sees it meets a ready target.
    let unix_opts = UnixOptions {
        mode: args.rpc_socket_mode,
        limits: args.rpc_limits(),
        ..UnixOptions::default()
    };
    let lock = rpc::SocketLock::acquire(&args.rpc_socket).map_err(|e| e.to_string())?;

    let outcome = tokio::select! {
        r = configure(&table, &state, config, args.wait_for_rpc, stop_tx.clone()) => r,
        _ = sigterm.recv() => Err(Stop::Signal("SIGTERM")),
        _ = sigint.recv() => Err(Stop::Signal("SIGINT")),
    };
    let outcome = outcome.and_then(|()| match store {
        Some(store) => persist(&table, store, Arc::clone(&ctx)),
        None => Ok(()),
    });
    let mut servers = Vec::new();
    let mut metrics = None;
    let stop = match outcome {
        Err(stop) => stop,
        Ok(()) => match serve(&table, &args, lock, unix_opts).await {
            Err(e) => Stop::Failed(e),
            Ok(s) => {
                servers = s;
                let started = match args.metrics {
                    Some(addr) => crate::metrics::serve(addr, table.clone(), Arc::clone(&ctx))
                        .await
                        .map(|(_, task)| metrics = Some(task)),
                    None => Ok(()),
                };
                match started {
                    Err(e) => Stop::Failed(e),
                    Ok(()) => {
                        tracing::info!(
                            "rtgt ready: JSON-RPC on {} ({} reactor(s))",
                            args.rpc_socket.display(),
                            target.reactors().len()
                        );
                        crate::sd_notify::notify_or_log(&format!(
                            "READY=1\nMAINPID={}\nSTATUS=serving JSON-RPC on {}",
                            std::process::id(),
                            args.rpc_socket.display()
                        ));
                        tokio::select! {
                            _ = sigterm.recv() => Stop::Signal("SIGTERM"),
                            _ = sigint.recv() => Stop::Signal("SIGINT"),
                            s = stop_rx.recv() => s.unwrap_or(Stop::Signal("RPC")),
                        }
                    }
                }
            }
        },
    };
    match &stop {
        Stop::Signal(s) => tracing::info!("{s}: shutting down"),
        Stop::Failed(e) => tracing::error!("{e}; shutting down"),
    }
    crate::sd_notify::notify_or_log("STOPPING=1");
    if let Some(task) = metrics {
        task.abort();
    }
    for s in servers {
        s.shutdown().await;
    }
    if tokio::time::timeout(Duration::from_secs(30), target.shutdown())
        .await
        .is_err()
    {
        tracing::error!("target shutdown did not finish within 30 s");
    }
    // Bdev modules release what outlives the process otherwise (an RBD image's watch stays on
    // the cluster until it times the client out).
    let t = Arc::clone(&target);
    let fini = tokio::task::spawn_blocking(move || t.fini_bdev_modules());
    if tokio::time::timeout(Duration::from_secs(60), fini)
        .await
        .is_err()
    {
        tracing::error!("bdev modules did not finish closing within 60 s");
    }
    match stop {
        Stop::Signal(_) => Ok(ExitCode::SUCCESS),
        Stop::Failed(e) => Err(e),
    }
}

/// `--config`: writes the configuration once the start-up configuration is applied, then after
/// every successful call that changed it (queries are skipped: they change nothing).
fn persist(
    table: &MethodTable,
    store: Arc<ConfigStore>,
    ctx: Arc<TargetContext>,
) -> Result<(), Stop> {
    let write = move |why: &str| match store.store(&rpc::methods::config::save_config(&ctx)) {
        Ok(true) => tracing::debug!(
            "configuration written to {} ({why})",
            store.path().display()
        ),
        Ok(false) => {}
        Err(e) => tracing::error!(
            "cannot write the configuration to {} after {why}: {e}; it is not persisted",
            store.path().display()
        ),
    };
    write("start");
    let installed = table.after_success(Arc::new(move |method: &'static str| {
        if !is_query(method) {
            write(method);
        }
    }));
    if !installed {
        return Err(Stop::Failed(
            "--config: a call hook is already installed".into(),
        ));
    }
    Ok(())
}

/// Methods that only read: `*_get_*`, `get_*`, `rpc_get_methods`, `framework_wait_init`.
fn is_query(method: &str) -> bool {
    method.contains("_get_") || method.starts_with("get_") || method == "framework_wait_init"
}

/// Applies `--json` and initialises (unless `--wait-for-rpc`).
async fn configure(
    table: &MethodTable,
    state: &StateHandle,
    config: Option<ConfigFile>,
    wait_for_rpc: bool,
    stop: mpsc::UnboundedSender<Stop>,
) -> Result<(), Stop> {
    let fail = |e: load::LoadError| Stop::Failed(format!("--json: {e}"));
    if let Some(cfg) = &config {
        let n = load::apply(table, cfg).await.map_err(fail)?;
        tracing::info!("--json: {n} STARTUP call(s) applied");
    }
    if wait_for_rpc {
        tracing::info!("waiting for framework_start_init");
        if let Some(cfg) = config {
            // The RUNTIME part runs once framework_start_init has switched the state.
            let (table, state) = (table.clone(), state.clone());
            tokio::spawn(async move {
                state.wait_for(RpcState::Runtime).await;
                match load::apply(&table, &cfg).await {
                    Ok(n) => tracing::info!("--json: {n} RUNTIME call(s) applied"),
                    Err(e) => {
                        let _ = stop.send(Stop::Failed(format!("--json: {e}")));
                    }
                }
            });
        }
        return Ok(());
    }
    state.set(RpcState::Runtime);
    if let Some(cfg) = &config {
        let n = load::apply(table, cfg).await.map_err(fail)?;
        tracing::info!("--json: {n} RUNTIME call(s) applied");
    }
    Ok(())
}

/// Starts the Unix socket server and the optional TCP and HTTP endpoints.
async fn serve(
    table: &MethodTable,
    args: &ServeArgs,
    lock: rpc::SocketLock,
    unix_opts: UnixOptions,
) -> Result<Vec<ServerHandle>, String> {
    let token = match &args.http_token_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--http-token-file {}: {e}", path.display()))?;
            let t = text.lines().next().unwrap_or_default().trim().to_string();
            if t.is_empty() {
                return Err(format!(
                    "--http-token-file {}: the file is empty",
                    path.display()
                ));
            }
            Some(t)
        }
        None => match &args.http_token {
            Some(t) if t.trim().is_empty() => {
                // "Bearer " with nothing after it would then be the password.
                return Err("--http-token: the token is empty".into());
            }
            t => t.clone(),
        },
    };
    let mut servers = vec![
        rpc::serve_unix_locked(table.clone(), lock, unix_opts)
            .await
            .map_err(|e| e.to_string())?,
    ];
    if let Some(addr) = args.rpc_listen {
        let opts = TcpOptions {
            allow_non_loopback: args.rpc_allow_remote,
            limits: args.rpc_limits(),
            ..TcpOptions::default()
        };
        match rpc::serve_tcp(table.clone(), addr, opts).await {
            Ok(s) => servers.push(s),
            Err(e) => {
                for s in servers {
                    s.shutdown().await;
                }
                return Err(format!("--rpc-listen {addr}: {e}"));
            }
        }
    }
    if let Some(addr) = args.http_listen {
        let opts = HttpOptions {
            token,
            allow_non_loopback: args.rpc_allow_remote,
            limits: args.rpc_limits(),
        };
        match rpc::serve_http(table.clone(), addr, opts).await {
            Ok(s) => servers.push(s),
            Err(e) => {
                for s in servers {
                    s.shutdown().await;
                }
                return Err(format!("--http-listen {addr}: {e}"));
            }
        }
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_octal() {
        assert_eq!(parse_mode("0600").unwrap(), 0o600);
        assert_eq!(parse_mode("0o660").unwrap(), 0o660);
        assert!(parse_mode("0800").is_err());
        assert!(parse_mode("1777").is_err());
    }
}
