//! Bdev modules register like transports:
//! [`register_bdev_module!`](crate::register_bdev_module) puts a module's ops into
//! [`BDEV_MODULES`] at link time, with its RPC methods (each with its [`MethodSpec`]: name,
//! parameters, command line) and what it adds to save_config. The rpc crate collects every
//! registered method into its table; the command lines (`rtgt rpc`, `rtgt shell`, the Python
//! `rtgt-rpc`) offer them from their specs. A new backend is a crate of its own that the binary
//! links (`use bdev_rbd as _;`), touching no core file.
//!
//! Handlers are core-level (the core cannot depend on the rpc crate): they take the request's
//! parameters as a JSON object, already checked against the method's spec (keys, JSON types,
//! required ones; a failure is SPDK's `-32603 spdk_json_decode_object failed`), and answer a
//! JSON value or a [`MethodError`] carrying SPDK's code.
//!
//! ```ignore
//! target_core::register_bdev_module!(NULL_MODULE = BdevModuleOps {
//!     name: "null",
//!     methods: &[BdevMethod {
//!         spec: NULL_CREATE_SPEC,
//!         run: null_create,
//!         fields: rpc_spec::struct_fields::<NullCreate>,
//!     }],
//!     state: None,
//!     config: None,
//!     fini: None,
//! });
//! ```

mod aio;
mod delay;
mod malloc;
mod null;
mod uring;

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rpc_spec::MethodSpec;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::BdevError;
use crate::target::Target;

#[doc(hidden)]
pub use linkme;

/// A boxed, sendable future (what a method handler returns).
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The per-target state of a module (the RBD module's registered clusters), created once per
/// target by [`BdevModuleOps::state`].
pub type ModuleState = Arc<dyn Any + Send + Sync>;

/// What a method handler runs with.
#[derive(Clone)]
pub struct MethodCtx {
    /// The target (its bdevs, its namespaces).
    pub target: Arc<Target>,
    state: Option<ModuleState>,
}

impl std::fmt::Debug for MethodCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MethodCtx").finish_non_exhaustive()
    }
}

impl MethodCtx {
    /// The context of module `module` on `target`.
    pub fn new(target: Arc<Target>, module: &BdevModuleOps) -> Self {
        let state = target.bdev_module_state(module);
        Self { target, state }
    }

    /// The module's state, if it has one of type `T`.
    pub fn state<T: Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.state.clone()?.downcast().ok()
    }
}

/// A failed method: SPDK's JSON-RPC error code and a message naming what failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} {message}")]
pub struct MethodError {
    /// The JSON-RPC error code (`-32602`, `-32603`, or a negative errno).
    pub code: i32,
    /// The message.
    pub message: String,
}

impl MethodError {
    /// `-errno` with a message (SPDK's bdev RPCs answer storage failures this way).
    pub fn errno(errno: i32, message: impl Into<String>) -> Self {
        Self {
            code: -errno.checked_abs().unwrap_or(i32::MAX),
            message: message.into(),
        }
    }

    /// `-32602` with a message.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self {
            code: -32602,
            message: message.into(),
        }
    }

    /// `-32603` with a message.
    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            code: -32603,
            message: message.into(),
        }
    }

    /// SPDK's answer to parameters that do not decode: `-32603 spdk_json_decode_object failed`
    /// (the reason is logged, not sent).
    pub fn decode_failed(detail: impl std::fmt::Display) -> Self {
        tracing::warn!(%detail, "rejected RPC parameters");
        Self::internal("spdk_json_decode_object failed")
    }

    /// `-32602 <what> is not supported: <why>`: the refusal of a parameter value rtgt would
    /// otherwise accept and ignore.
    pub fn not_supported(what: impl std::fmt::Display, why: &str) -> Self {
        let e = Self::invalid_params(format!("{what} is not supported: {why}"));
        tracing::warn!("{}", e.message);
        e
    }
}

impl From<BdevError> for MethodError {
    fn from(e: BdevError) -> Self {
        Self::errno(e.errno(), e.to_string())
    }
}

/// A method's result.
pub type MethodResult = Result<Value, MethodError>;

/// Runs a method: its context and its (spec-checked) parameters object.
pub type MethodFn = fn(MethodCtx, Value) -> BoxFuture<MethodResult>;

/// One RPC method of a bdev module.
#[derive(Debug)]
pub struct BdevMethod {
    /// Its name, parameters and command line.
    pub spec: MethodSpec,
    /// Its handler.
    pub run: MethodFn,
    /// The keys its parameter struct declares (`rpc_spec::struct_fields::<Params>`), which a
    /// test compares with the spec's.
    pub fields: fn() -> Option<Vec<&'static str>>,
}

/// The static entry a bdev module registers.
#[derive(Debug)]
pub struct BdevModuleOps {
    /// The module's name (`malloc`, `rbd`).
    pub name: &'static str,
    /// Its RPC methods.
    pub methods: &'static [BdevMethod],
    /// Creates its per-target state, if it has one.
    pub state: Option<fn() -> ModuleState>,
    /// The calls save_config writes for the module itself, before any bdev (the RBD module's
    /// cluster registrations). Each bdev's own create call comes from [`super::Bdev::config`].
    pub config: Option<fn(&MethodCtx) -> Vec<Value>>,
    /// At exit, after the target stopped (no host connected, no I/O channel open): releases
    /// what the module holds outside the process (the RBD module closes its images, so their
    /// watches go at once, and its cluster connections). Blocking, bounded by the module.
    pub fini: Option<fn(&ModuleState, &super::BdevRegistry)>,
}

/// Every registered bdev module (filled at link time).
#[linkme::distributed_slice]
pub static BDEV_MODULES: [BdevModuleOps];

/// Registers a bdev module: `register_bdev_module!(STATIC_NAME = BdevModuleOps { .. });`
#[macro_export]
macro_rules! register_bdev_module {
    ($ident:ident = $ops:expr) => {
        #[$crate::bdev::module::linkme::distributed_slice($crate::bdev::module::BDEV_MODULES)]
        #[linkme(crate = $crate::bdev::module::linkme)]
        static $ident: $crate::bdev::module::BdevModuleOps = $ops;
    };
}

/// Every registered bdev module, sorted by name (the order of their save_config entries).
pub fn modules() -> Vec<&'static BdevModuleOps> {
    let mut v: Vec<_> = BDEV_MODULES.iter().collect();
    v.sort_by_key(|m| m.name);
    v
}

/// Every method of every registered bdev module, with its module.
pub fn methods() -> impl Iterator<Item = (&'static BdevModuleOps, &'static BdevMethod)> {
    modules()
        .into_iter()
        .flat_map(|m| m.methods.iter().map(move |f| (m, f)))
}

/// The method `name` of a registered bdev module.
pub fn find_method(name: &str) -> Option<(&'static BdevModuleOps, &'static BdevMethod)> {
    methods().find(|(_, f)| f.spec.name == name)
}

/// Decodes a handler's parameters object into `T` (already checked against the method's spec,
/// so a failure is a value out of range or a malformed nested value): `-32603
/// spdk_json_decode_object failed`.
pub fn decode<T: DeserializeOwned>(params: Value) -> Result<T, MethodError> {
    serde_json::from_value(params).map_err(MethodError::decode_failed)
}

/// Deletes the bdev `name` if it is of product `product`: the namespaces that export it go
/// first (their I/O paused and drained), then the bdev. What every `bdev_*_delete` runs.
pub async fn delete_bdev(target: &Arc<Target>, name: &str, product: &str) -> MethodResult {
    let found = target
        .bdevs()
        .get(name)
        .filter(|b| b.product_name() == product);
    if found.is_none() {
        return Err(MethodError::errno(
            libc::ENODEV,
            format!("{product} bdev '{name}' does not exist"),
        ));
    }
    drop(found);
    target.remove_bdev_namespaces(name).await.map_err(|e| {
        MethodError::internal(format!("removing the namespaces of bdev {name}: {e}"))
    })?;
    target.bdevs().unregister(name)?;
    Ok(Value::Bool(true))
}

/// Parses an optional UUID parameter; a malformed one fails the decoding, as in SPDK.
pub fn uuid_param(u: &Option<String>) -> Result<Option<uuid::Uuid>, MethodError> {
    match u {
        None => Ok(None),
        Some(s) if s.len() == 36 => uuid::Uuid::parse_str(s)
            .map(Some)
            .map_err(|_| MethodError::decode_failed(format!("invalid UUID '{s}'"))),
        Some(s) => Err(MethodError::decode_failed(format!("invalid UUID '{s}'"))),
    }
}

/// The save_config entries of every module (before the bdevs), in module order.
pub fn config_entries(target: &Arc<Target>) -> Vec<Value> {
    modules()
        .into_iter()
        .filter_map(|m| m.config.map(|f| f(&MethodCtx::new(Arc::clone(target), m))))
        .flatten()
        .collect()
}

/// The per-target states of the bdev modules, created on first use.
#[derive(Default)]
pub(crate) struct ModuleStates {
    states: parking_lot::Mutex<Vec<(&'static str, ModuleState)>>,
}

impl ModuleStates {
    /// The state of `module` if it was created.
    pub(crate) fn existing(&self, module: &BdevModuleOps) -> Option<ModuleState> {
        let states = self.states.lock();
        states
            .iter()
            .find(|(n, _)| *n == module.name)
            .map(|(_, s)| Arc::clone(s))
    }

    pub(crate) fn get(&self, module: &BdevModuleOps) -> Option<ModuleState> {
        let make = module.state?;
        let mut states = self.states.lock();
        if let Some((_, s)) = states.iter().find(|(n, _)| *n == module.name) {
            return Some(Arc::clone(s));
        }
        let s = make();
        states.push((module.name, Arc::clone(&s)));
        Some(s)
    }
}
