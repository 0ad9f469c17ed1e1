//! rtgt JSON-RPC control plane, compatible with SPDK's `rpc.py`.
//!
//! One method table ([`Methods`] → [`MethodTable`], a jsonrpsee `RpcModule` underneath) holds
//! every method with its RPC state mask. It is served
//!
//! * on a Unix stream socket with SPDK's framing ([`serve_unix`]): concatenated JSON values,
//!   one compact answer plus `\n` each, batches, notifications, a 256 KiB request cap, 64
//!   connections, a `<socket>.lock` single-instance guard and mode 0600;
//! * on TCP with the same framing ([`serve_tcp`]), loopback unless allowed otherwise;
//! * on HTTP ([`serve_http`], feature `http`), loopback by default, with an optional bearer
//!   token.
//!
//! Every transport goes through one dispatcher with SPDK's envelope rules and error codes
//! ([`RpcError`], [`codes`]); handlers decode their parameters with [`params::strict`],
//! [`params::relaxed`] or [`params::bdev`]. The generic methods (`rpc_get_methods`,
//! `spdk_get_version`, `framework_start_init`, `framework_wait_init`, `log_*`,
//! `spdk_kill_instance`) come from [`Methods::register_core`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use rpc::{CoreHooks, Methods, RpcState, StateHandle, StateMask, UnixOptions, params};
//!
//! struct Target;
//! let state = StateHandle::new(RpcState::Runtime);
//! let mut methods = Methods::new(Target, state);
//! methods.register_core(CoreHooks::new())?;
//! methods.register("bdev_get_bdevs", StateMask::RUNTIME, |p, _t: &Target| {
//!     #[derive(serde::Deserialize)]
//!     struct Args { name: Option<String> }
//!     let _args: Args = params::bdev(&p)?;
//!     Ok(Vec::<String>::new())
//! })?;
//! let table = methods.build();
//! let server = rpc::serve_unix(table, "/var/tmp/spdk.sock", UnixOptions::default()).await?;
//! // ... later
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod core_methods;
mod dispatch;
mod error;
pub mod framing;
pub mod methods;
pub mod params;
pub mod request_check;
mod server;
mod state;
mod table;

pub use core_methods::{
    BoxFuture, CoreHooks, KillHook, KillSignal, LogControl, LogLevel, StartInitHook, VersionInfo,
};
pub use error::{
    MSG_ALREADY_INITIALIZED, MSG_NOT_YET_INITIALIZED, RpcError, RpcResult, codes, strerror,
};
pub use jsonrpsee::types::Params;
pub use server::{
    DEFAULT_BACKLOG, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_REQUEST_SIZE, DEFAULT_TCP_ADDR, Limits,
    ServeAddr, ServeError, ServerHandle, ServerStats, SocketLock, TcpOptions, UnixOptions,
    serve_tcp, serve_unix, serve_unix_locked,
};
#[cfg(feature = "http")]
pub use server::{HttpOptions, serve_http};
pub use state::{RpcState, StateHandle, StateMask};
pub use table::{MAX_RESPONSE_SIZE, MethodInfo, MethodTable, Methods, RegisterError, SuccessHook};
