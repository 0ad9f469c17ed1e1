//! A small JSON-RPC server with the generic methods and a toy bdev list, for trying the
//! servers with SPDK's own client:
//!
//! ```text
//! cargo run -p rpc --example demo_server -- /tmp/demo.sock [--tcp 127.0.0.1:5260] \
//!     [--http 127.0.0.1:5261 [--token T]] [--wait-for-rpc]
//! spdk-rpc -s /tmp/demo.sock rpc_get_methods
//! spdk-rpc -s /tmp/demo.sock spdk_get_version
//! ```

use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use rpc::{
    CoreHooks, LogControl, LogLevel, Methods, Params, RpcError, RpcState, StateHandle, StateMask,
    TcpOptions, UnixOptions, params,
};
use serde::{Deserialize, Serialize};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::prelude::*;
use tracing_subscriber::{Registry, reload};

/// `log_set_level` & co. over a tracing-subscriber reload handle.
struct ReloadLog {
    handle: reload::Handle<LevelFilter, Registry>,
    level: Mutex<LogLevel>,
    print_level: Mutex<LogLevel>,
}

impl LogControl for ReloadLog {
    fn set_level(&self, level: LogLevel) -> Result<(), String> {
        *self.level.lock() = level;
        Ok(())
    }
    fn level(&self) -> LogLevel {
        *self.level.lock()
    }
    fn set_print_level(&self, level: LogLevel) -> Result<(), String> {
        self.handle
            .modify(|f| *f = LevelFilter::from_level(level.to_tracing()))
            .map_err(|e| e.to_string())?;
        *self.print_level.lock() = level;
        Ok(())
    }
    fn print_level(&self) -> LogLevel {
        *self.print_level.lock()
    }
}

#[derive(Default)]
struct Toy {
    bdevs: Mutex<Vec<Bdev>>,
}

#[derive(Clone, Serialize)]
struct Bdev {
    name: String,
    block_size: u32,
    num_blocks: u64,
    product_name: &'static str,
}

#[derive(Deserialize)]
struct MallocCreate {
    num_blocks: u64,
    block_size: u32,
    name: Option<String>,
    #[allow(dead_code)]
    md_interleave: Option<bool>,
    #[allow(dead_code)]
    dif_is_head_of_md: Option<bool>,
}

#[derive(Deserialize)]
struct Name {
    name: Option<String>,
}

struct Args {
    socket: String,
    tcp: Option<SocketAddr>,
    http: Option<SocketAddr>,
    token: Option<String>,
    wait_for_rpc: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut args = Args {
        socket: "/var/tmp/spdk.sock".into(),
        tcp: None,
        http: None,
        token: None,
        wait_for_rpc: false,
    };
    let addr = |v: Option<String>| -> Result<SocketAddr, String> {
        v.ok_or("missing address")?
            .parse()
            .map_err(|e| format!("bad address: {e}"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--tcp" => args.tcp = Some(addr(it.next())?),
            "--http" => args.http = Some(addr(it.next())?),
            "--token" => args.token = Some(it.next().ok_or("missing token")?),
            "--wait-for-rpc" => args.wait_for_rpc = true,
            s if !s.starts_with('-') => args.socket = s.to_string(),
            s => return Err(format!("unknown option {s}")),
        }
    }
    Ok(args)
}

fn build_methods(
    state: StateHandle,
    log: Arc<ReloadLog>,
    stop: Arc<tokio::sync::Notify>,
) -> rpc::MethodTable {
    let mut m = Methods::new(Toy::default(), state);
    m.register_core(
        CoreHooks::new()
            .on_start_init(|| async {
                tracing::info!("initialising subsystems (demo: nothing to do)");
                Ok(())
            })
            .log_control(log)
            .on_kill(move |sig| {
                tracing::info!(?sig, "kill requested");
                stop.notify_one();
            }),
    )
    .expect("core methods");
    m.register(
        "bdev_malloc_create",
        StateMask::RUNTIME,
        |p: Params<'_>, t: &Toy| {
            let a: MallocCreate = params::bdev(&p)?;
            if a.num_blocks == 0 || !a.block_size.is_multiple_of(512) {
                return Err(RpcError::einval());
            }
            let mut bdevs = t.bdevs.lock();
            let name = a.name.unwrap_or_else(|| format!("Malloc{}", bdevs.len()));
            if bdevs.iter().any(|b| b.name == name) {
                return Err(RpcError::exists());
            }
            bdevs.push(Bdev {
                name: name.clone(),
                block_size: a.block_size,
                num_blocks: a.num_blocks,
                product_name: "Malloc disk",
            });
            Ok(name)
        },
    )
    .and_then(|m| {
        m.register(
            "bdev_get_bdevs",
            StateMask::RUNTIME,
            |p: Params<'_>, t: &Toy| {
                let a: Name = params::bdev(&p)?;
                let bdevs = t.bdevs.lock();
                match a.name {
                    None => Ok(bdevs.clone()),
                    Some(n) => match bdevs.iter().find(|b| b.name == n) {
                        Some(b) => Ok(vec![b.clone()]),
                        None => Err(RpcError::no_such_device()),
                    },
                }
            },
        )
    })
    .and_then(|m| {
        m.register(
            "bdev_set_options",
            StateMask::STARTUP,
            |_p: Params<'_>, _t: &Toy| Ok(true),
        )
    })
    .expect("demo methods");
    m.build()
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("demo_server: {e}");
            std::process::exit(2);
        }
    };
    let (filter, handle) = reload::Layer::new(LevelFilter::INFO);
    tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .init();
    let log = Arc::new(ReloadLog {
        handle,
        level: Mutex::new(LogLevel::Notice),
        print_level: Mutex::new(LogLevel::Info),
    });

    // The daemon will run its RPC servers on one current-thread runtime like this.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let initial = if args.wait_for_rpc {
            RpcState::Startup
        } else {
            RpcState::Runtime
        };
        let stop = Arc::new(tokio::sync::Notify::new());
        let table = build_methods(StateHandle::new(initial), log, stop.clone());
        let mut servers = Vec::new();
        match rpc::serve_unix(table.clone(), &args.socket, UnixOptions::default()).await {
            Ok(s) => servers.push(s),
            Err(e) => {
                eprintln!("demo_server: {e}");
                std::process::exit(1);
            }
        }
        if let Some(addr) = args.tcp {
            servers.push(
                rpc::serve_tcp(table.clone(), addr, TcpOptions::default())
                    .await
                    .expect("tcp"),
            );
        }
        if let Some(addr) = args.http {
            let opts = rpc::HttpOptions {
                token: args.token.clone(),
                ..Default::default()
            };
            servers.push(
                rpc::serve_http(table.clone(), addr, opts)
                    .await
                    .expect("http"),
            );
        }
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("signal");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
            _ = stop.notified() => {}
        }
        tracing::info!("shutting down");
        for s in servers {
            s.shutdown().await;
        }
    });
}
