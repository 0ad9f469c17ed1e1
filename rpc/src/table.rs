//! The method table: every RPC method, its state mask and deprecated aliases, held in one
//! jsonrpsee [`RpcModule`].
//!
//! Build it with [`Methods`], then [`Methods::build`] a cheap-to-clone [`MethodTable`] that the
//! servers share (together with the RPC state).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use jsonrpsee::types::{ErrorObjectOwned, Id};
use jsonrpsee::{ConnectionId, Extensions, MethodCallback, RpcModule};
use parking_lot::RwLock;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tracing::Instrument;

use crate::Params;
use crate::error::{RpcError, RpcResult};
use crate::params::{self, Decode};
use crate::state::{RpcState, StateHandle, StateMask};

/// SPDK's maximum response size (`SPDK_JSONRPC_SEND_BUF_SIZE_MAX`, 32 MiB).
pub const MAX_RESPONSE_SIZE: usize = 32 * 1024 * 1024;

/// Why a method could not be registered. These are programming errors, found at startup.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// A method or alias with this name exists already.
    #[error("RPC method '{0}' is already registered")]
    AlreadyRegistered(&'static str),
    /// An alias names a method that is not registered.
    #[error("RPC alias target '{0}' is not registered")]
    UnknownTarget(&'static str),
}

/// What `rpc_get_methods` knows about one registered name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodInfo {
    /// The method (or alias) name.
    pub name: &'static str,
    /// States in which it may be called.
    pub mask: StateMask,
    /// For a deprecated alias: the method it stands for.
    pub alias_of: Option<&'static str>,
}

/// Registration-ordered list of names, shared with `rpc_get_methods`.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    list: RwLock<Vec<MethodInfo>>,
}

impl Registry {
    pub(crate) fn snapshot(&self) -> Vec<MethodInfo> {
        self.list.read().clone()
    }

    fn get(&self, name: &str) -> Option<MethodInfo> {
        self.list.read().iter().find(|m| m.name == name).copied()
    }
}

/// Builder of the method table over a context type `Ctx` (the daemon's handle to the target).
///
/// Every handler is wrapped so that, on every transport, the RPC state is checked first (SPDK's
/// `-1` errors) and its result is serialised; handlers return [`RpcResult`].
pub struct Methods<Ctx> {
    module: RpcModule<Ctx>,
    registry: Arc<Registry>,
    state: StateHandle,
    hook: Arc<OnceLock<SuccessHook>>,
}

/// Runs after every successful call, before its answer is sent, with the method's name (e.g.
/// to persist the configuration: `rtgt serve --config`). Set with
/// [`MethodTable::after_success`].
pub type SuccessHook = Arc<dyn Fn(&'static str) + Send + Sync>;

fn succeeded(hook: &OnceLock<SuccessHook>, name: &'static str) {
    if let Some(h) = hook.get() {
        h(name);
    }
}

impl<Ctx: Send + Sync + 'static> Methods<Ctx> {
    /// An empty table over `ctx`, sharing `state` with whoever switches it.
    pub fn new(ctx: Ctx, state: StateHandle) -> Self {
        Self::from_arc(Arc::new(ctx), state)
    }

    /// Like [`Methods::new`] for a context that is already shared.
    pub fn from_arc(ctx: Arc<Ctx>, state: StateHandle) -> Self {
        Self {
            module: RpcModule::from_arc(ctx),
            registry: Arc::new(Registry::default()),
            state,
            hook: Arc::new(OnceLock::new()),
        }
    }

    /// The RPC state this table checks against.
    pub fn state(&self) -> &StateHandle {
        &self.state
    }

    /// Whether `name` is registered (as a method or alias).
    pub fn contains(&self, name: &str) -> bool {
        self.registry.get(name).is_some()
    }

    /// Register a synchronous method. It runs inline on the connection's task, so it must not
    /// block; use [`Methods::register_async`] for anything that waits (reactor messages).
    ///
    /// ```
    /// # use rpc::{Methods, StateHandle, RpcState, StateMask, RpcResult, Params, params};
    /// # #[derive(serde::Deserialize)] struct Args { name: String }
    /// let mut m = Methods::new((), StateHandle::new(RpcState::Runtime));
    /// m.register("hello", StateMask::ANY, |p: Params<'_>, _ctx: &()| -> RpcResult<String> {
    ///     let a: Args = params::strict(&p)?;
    ///     Ok(format!("hello {}", a.name))
    /// })
    /// .unwrap();
    /// ```
    pub fn register<R, F>(
        &mut self,
        name: &'static str,
        mask: StateMask,
        handler: F,
    ) -> Result<&mut Self, RegisterError>
    where
        R: Serialize + 'static,
        F: Fn(Params<'_>, &Ctx) -> RpcResult<R> + Send + Sync + 'static,
    {
        self.check_free(name)?;
        let state = self.state.clone();
        let hook = self.hook.clone();
        self.module
            .register_method(
                name,
                move |params, ctx, _ext| -> Result<Box<RawValue>, RpcError> {
                    mask.check(state.get())?;
                    let raw = to_raw(handler(params, ctx)?)?;
                    succeeded(&hook, name);
                    Ok(raw)
                },
            )
            .map_err(|_| RegisterError::AlreadyRegistered(name))?;
        self.add_info(name, mask, None);
        Ok(self)
    }

    /// Register an asynchronous method. The future must be `Send`: send a message to the
    /// reactor that owns the state and await its reply rather than holding `Rc`s.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use rpc::{Methods, StateHandle, RpcState, StateMask, RpcResult, RpcError, Params, params};
    /// # #[derive(serde::Deserialize)] struct Args { nqn: String }
    /// # struct Target; impl Target { async fn delete(&self, _n: &str) -> bool { true } }
    /// let mut m = Methods::new(Target, StateHandle::new(RpcState::Runtime));
    /// m.register_async("nvmf_delete_subsystem", StateMask::RUNTIME, |p: Params<'static>, t: Arc<Target>| async move {
    ///     let a: Args = params::strict(&p)?;
    ///     if !t.delete(&a.nqn).await {
    ///         return Err(RpcError::invalid_params(format!("Subsystem with NQN '{}' not found", a.nqn)));
    ///     }
    ///     Ok(true)
    /// })
    /// .unwrap();
    /// ```
    pub fn register_async<R, F, Fut>(
        &mut self,
        name: &'static str,
        mask: StateMask,
        handler: F,
    ) -> Result<&mut Self, RegisterError>
    where
        R: Serialize + 'static,
        F: Fn(Params<'static>, Arc<Ctx>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = RpcResult<R>> + Send + 'static,
    {
        self.check_free(name)?;
        let state = self.state.clone();
        let hook = self.hook.clone();
        self.module
            .register_async_method(name, move |params, ctx, _ext| {
                let handler = handler.clone();
                let allowed = mask.check(state.get());
                let hook = hook.clone();
                async move {
                    allowed?;
                    let raw = to_raw(handler(params, ctx).await?)?;
                    succeeded(&hook, name);
                    Ok::<_, RpcError>(raw)
                }
            })
            .map_err(|_| RegisterError::AlreadyRegistered(name))?;
        self.add_info(name, mask, None);
        Ok(self)
    }

    /// Register a synchronous method whose params decode into `P` with rule `decode`; the
    /// handler gets the decoded value. Most SPDK methods fit this shape.
    ///
    /// ```
    /// # use rpc::{Methods, StateHandle, RpcState, StateMask, RpcError, params::Decode};
    /// #[derive(serde::Deserialize)]
    /// struct BdevName { name: String }
    /// # struct Target; impl Target { fn delete(&self, _n: &str) -> bool { false } }
    /// let mut m = Methods::new(Target, StateHandle::new(RpcState::Runtime));
    /// m.register_typed("bdev_malloc_delete", StateMask::RUNTIME, Decode::Bdev, |a: BdevName, t: &Target| {
    ///     if !t.delete(&a.name) {
    ///         return Err(RpcError::no_such_device());
    ///     }
    ///     Ok(true)
    /// })
    /// .unwrap();
    /// ```
    pub fn register_typed<P, R, F>(
        &mut self,
        name: &'static str,
        mask: StateMask,
        decode: Decode,
        handler: F,
    ) -> Result<&mut Self, RegisterError>
    where
        P: DeserializeOwned,
        R: Serialize + 'static,
        F: Fn(P, &Ctx) -> RpcResult<R> + Send + Sync + 'static,
    {
        self.register(name, mask, move |params: Params<'_>, ctx: &Ctx| {
            let args: P = params::decode(&params, decode)?;
            handler(args, ctx)
        })
    }

    /// Register an asynchronous method whose params decode into `P` with rule `decode`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use rpc::{Methods, StateHandle, RpcState, StateMask, RpcError, params::Decode};
    /// #[derive(serde::Deserialize)]
    /// struct AddHost { nqn: String, host: String }
    /// # struct Target; impl Target { async fn add_host(&self, _n: &str, _h: &str) -> Result<(), RpcError> { Ok(()) } }
    /// let mut m = Methods::new(Target, StateHandle::new(RpcState::Runtime));
    /// m.register_typed_async("nvmf_subsystem_add_host", StateMask::RUNTIME, Decode::Relaxed, |a: AddHost, t: Arc<Target>| async move {
    ///     t.add_host(&a.nqn, &a.host).await?;
    ///     Ok(true)
    /// })
    /// .unwrap();
    /// ```
    pub fn register_typed_async<P, R, F, Fut>(
        &mut self,
        name: &'static str,
        mask: StateMask,
        decode: Decode,
        handler: F,
    ) -> Result<&mut Self, RegisterError>
    where
        P: DeserializeOwned + Send + 'static,
        R: Serialize + 'static,
        F: Fn(P, Arc<Ctx>) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = RpcResult<R>> + Send + 'static,
    {
        self.register_async(name, mask, move |params: Params<'static>, ctx: Arc<Ctx>| {
            let decoded: Result<P, _> = params::decode(&params, decode);
            let handler = handler.clone();
            async move { handler(decoded?, ctx).await }
        })
    }

    /// Register `alias` as a deprecated name of `target` (SPDK's
    /// `SPDK_RPC_REGISTER_ALIAS_DEPRECATED`): it dispatches to the same handler with the same
    /// state mask, logs a warning on first use, and is listed by `rpc_get_methods` only with
    /// `include_aliases`.
    pub fn alias_deprecated(
        &mut self,
        alias: &'static str,
        target: &'static str,
    ) -> Result<&mut Self, RegisterError> {
        self.check_free(alias)?;
        let info = self
            .registry
            .get(target)
            .ok_or(RegisterError::UnknownTarget(target))?;
        let base = self
            .module
            .method(target)
            .cloned()
            .ok_or(RegisterError::UnknownTarget(target))?;
        let warned = Arc::new(AtomicBool::new(false));
        let warn_once = move || {
            if !warned.swap(true, Ordering::Relaxed) {
                tracing::warn!("RPC method {alias} is deprecated.  Use {target} instead.");
            }
        };
        let callback = match base {
            MethodCallback::Sync(f) => {
                MethodCallback::Sync(Arc::new(move |id, params, max, ext| {
                    warn_once();
                    f(id, params, max, ext)
                }))
            }
            MethodCallback::Async(f) => {
                MethodCallback::Async(Arc::new(move |id, params, conn, max, ext| {
                    warn_once();
                    f(id, params, conn, max, ext)
                }))
            }
            _ => return Err(RegisterError::UnknownTarget(target)),
        };
        // `merge` adds the wrapped callback under the alias name.
        let mut extra = jsonrpsee::Methods::new();
        extra
            .verify_and_insert(alias, callback)
            .map_err(|_| RegisterError::AlreadyRegistered(alias))?;
        self.module
            .merge(extra)
            .map_err(|_| RegisterError::AlreadyRegistered(alias))?;
        self.add_info(alias, info.mask, Some(info.alias_of.unwrap_or(target)));
        Ok(self)
    }

    /// Finish building: the table the servers share.
    pub fn build(self) -> MethodTable {
        MethodTable {
            inner: Arc::new(TableInner {
                methods: self.module.into(),
                registry: self.registry,
                state: self.state,
                hook: self.hook,
            }),
        }
    }

    pub(crate) fn registry(&self) -> Arc<Registry> {
        self.registry.clone()
    }

    fn check_free(&self, name: &'static str) -> Result<(), RegisterError> {
        if self.registry.get(name).is_some() || self.module.method(name).is_some() {
            return Err(RegisterError::AlreadyRegistered(name));
        }
        Ok(())
    }

    fn add_info(&self, name: &'static str, mask: StateMask, alias_of: Option<&'static str>) {
        self.registry.list.write().push(MethodInfo {
            name,
            mask,
            alias_of,
        });
    }
}

fn to_raw<R: Serialize>(value: R) -> Result<Box<RawValue>, RpcError> {
    serde_json::value::to_raw_value(&value).map_err(|e| {
        tracing::error!(error = %e, "RPC result could not be serialised");
        RpcError::internal_default()
    })
}

struct TableInner {
    methods: jsonrpsee::Methods,
    registry: Arc<Registry>,
    state: StateHandle,
    hook: Arc<OnceLock<SuccessHook>>,
}

/// The built method table: cheap to clone, shared by every server and in-process caller.
#[derive(Clone)]
pub struct MethodTable {
    inner: Arc<TableInner>,
}

impl std::fmt::Debug for MethodTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MethodTable")
            .field("methods", &self.inner.registry.snapshot().len())
            .field("state", &self.inner.state.get())
            .finish()
    }
}

/// The `{"result"|"error"}` part of a jsonrpsee response.
#[derive(Deserialize)]
struct CallOutcome<'a> {
    #[serde(borrow, default, deserialize_with = "some_raw")]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<ErrorObjectOwned>,
}

fn some_raw<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

impl MethodTable {
    /// Installs the hook every successful call runs before its answer is sent (aliases too);
    /// `false` if one is already installed.
    pub fn after_success(&self, hook: SuccessHook) -> bool {
        self.inner.hook.set(hook).is_ok()
    }

    /// The RPC state shared by every server using this table.
    pub fn state(&self) -> &StateHandle {
        &self.inner.state
    }

    /// The underlying jsonrpsee methods, e.g. to merge into another jsonrpsee server. Note that
    /// such a server applies jsonrpsee's envelope rules, not SPDK's.
    pub fn rpc_methods(&self) -> jsonrpsee::Methods {
        self.inner.methods.clone()
    }

    /// Every registered name with its mask, in registration order.
    pub fn methods(&self) -> Vec<MethodInfo> {
        self.inner.registry.snapshot()
    }

    /// Names callable in `state` (what `rpc_get_methods {"current": true}` lists, minus aliases).
    pub fn callable_in(&self, state: RpcState) -> Vec<&'static str> {
        self.methods()
            .into_iter()
            .filter(|m| m.alias_of.is_none() && m.mask.allows(state))
            .map(|m| m.name)
            .collect()
    }

    /// Call a method in-process (e.g. while loading a `--json` config), with the same state
    /// checks and errors as over the socket. `params` is the JSON text of the params object,
    /// `None` when absent.
    pub async fn call(&self, method: &str, params: Option<&str>) -> RpcResult<Box<RawValue>> {
        self.invoke(method, params, ConnectionId(0)).await
    }

    /// Like [`MethodTable::call`], with typed params and result.
    pub async fn call_typed<P: Serialize, R: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        params: Option<&P>,
    ) -> RpcResult<R> {
        let text = match params {
            Some(p) => {
                Some(serde_json::to_string(p).map_err(|e| RpcError::internal(e.to_string()))?)
            }
            None => None,
        };
        let raw = self.call(method, text.as_deref()).await?;
        serde_json::from_str(raw.get()).map_err(|e| RpcError::internal(e.to_string()))
    }

    /// Run `method` through the jsonrpsee callback and return its result or error.
    pub(crate) async fn invoke(
        &self,
        method: &str,
        params: Option<&str>,
        conn: ConnectionId,
    ) -> RpcResult<Box<RawValue>> {
        let Some(callback) = self.inner.methods.method(method) else {
            return Err(RpcError::method_not_found());
        };
        let params = Params::new(params);
        let mut ext = Extensions::new();
        ext.insert(conn);
        // The real id is echoed by the dispatcher; jsonrpsee only needs a placeholder.
        let id = Id::Number(0);
        let span = tracing::debug_span!("rpc", method);
        let response = match callback {
            MethodCallback::Sync(f) => span.in_scope(|| f(id, params, MAX_RESPONSE_SIZE, ext)),
            MethodCallback::Async(f) => {
                f(id, params.into_owned(), conn, MAX_RESPONSE_SIZE, ext)
                    .instrument(span)
                    .await
            }
            MethodCallback::Subscription(_) | MethodCallback::Unsubscription(_) => {
                return Err(RpcError::method_not_found());
            }
        };
        let json = response.into_json();
        match serde_json::from_str::<CallOutcome<'_>>(json.get()) {
            Ok(CallOutcome { error: Some(e), .. }) => Err(RpcError::from(&e)),
            Ok(CallOutcome {
                result: Some(r), ..
            }) => Ok(r.to_owned()),
            _ => {
                tracing::error!(
                    response = json.get(),
                    "unexpected response from method callback"
                );
                Err(RpcError::internal_default())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RpcState, StateMask};
    use parking_lot::Mutex;

    #[tokio::test]
    async fn the_success_hook_sees_successful_calls_only_and_is_set_once() {
        let mut m = Methods::new((), StateHandle::new(RpcState::Runtime));
        m.register("ok_sync", StateMask::ANY, |_p: Params<'_>, _c: &()| Ok(1))
            .unwrap();
        m.register(
            "fails",
            StateMask::ANY,
            |_p: Params<'_>, _c: &()| -> RpcResult<u8> { Err(RpcError::invalid_params("no")) },
        )
        .unwrap();
        m.register(
            "startup_only",
            StateMask::STARTUP,
            |_p: Params<'_>, _c: &()| Ok(1),
        )
        .unwrap();
        m.register_async(
            "ok_async",
            StateMask::ANY,
            |_p: Params<'static>, _c: Arc<()>| async { Ok(2) },
        )
        .unwrap();
        m.alias_deprecated("old_ok_sync", "ok_sync").unwrap();
        let t = m.build();
        t.call("ok_sync", None).await.unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        assert!(t.after_success(Arc::new(move |name| s.lock().push(name))));
        assert!(!t.after_success(Arc::new(|_| {})));
        t.call("ok_sync", None).await.unwrap();
        t.call("fails", None).await.unwrap_err();
        t.call("startup_only", None).await.unwrap_err();
        t.call("ok_async", None).await.unwrap();
        t.call("old_ok_sync", None).await.unwrap();
        assert_eq!(*seen.lock(), vec!["ok_sync", "ok_async", "ok_sync"]);
    }
}
