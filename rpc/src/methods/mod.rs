//! The storage methods: SPDK's `framework_*`, `bdev_*` and `nvmf_*` RPCs over a
//! [`target_core::target::Target`], plus the option setters that stock SPDK configurations
//! contain, and the `save_config` / `--json` machinery.
//!
//! One file per area: [`framework`] (subsystem list, config dump, reactors), [`setters`] (the
//! setters of SPDK subsystems rtgt does not have, accepted only with SPDK's defaults),
//! [`keyring`], [`bdev`], [`nvmf`], [`config`]
//! (what `framework_get_config` prints for each subsystem) and [`load`] (applying a saved
//! configuration, as `rtgt serve --json` does).
//!
//! ```no_run
//! # async fn demo(target: std::sync::Arc<target_core::target::Target>) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use rpc::methods::TargetContext;
//! use rpc::{CoreHooks, Methods, RpcState, StateHandle};
//!
//! let mut m = Methods::from_arc(Arc::new(TargetContext::new(target)), StateHandle::new(RpcState::Runtime));
//! m.register_core(CoreHooks::new())?;
//! rpc::methods::register(&mut m)?;
//! let table = m.build();
//! let server = rpc::serve_unix(table, "/var/tmp/spdk.sock", rpc::UnixOptions::default()).await?;
//! # Ok(()) }
//! ```

pub mod bdev;
pub mod config;
pub mod framework;
pub mod keyring;
pub mod load;
pub mod nvmf;
pub mod setters;
pub mod specs;
pub mod thread;

use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use target_core::target::{CoreError, Target};

use crate::params::Decode;
use crate::{Methods, RegisterError, RpcError, RpcResult, StateMask};

/// The name of the one NVMe-oF target rtgt runs (SPDK's default target, `tgt_name`).
pub const DEFAULT_TGT_NAME: &str = "nvmf_tgt";

/// SPDK's default Dataset Management range size limit of a subsystem (`dmrsl`, blocks): the
/// only value rtgt accepts, and the one `nvmf_get_subsystems` and `save_config` show.
pub const DEFAULT_DMRSL: u32 = 2_097_152;
/// SPDK's default Write Zeroes size limit (`wzsl`, 2^n × MPSMIN), likewise.
pub const DEFAULT_WZSL: u8 = 12;

/// The context every storage method runs with: the target, plus what the RPC layer records
/// on its behalf (keyring entries).
pub struct TargetContext {
    target: Arc<Target>,
    pub(crate) keys: Mutex<Vec<keyring::KeyEntry>>,
}

impl std::fmt::Debug for TargetContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TargetContext").finish_non_exhaustive()
    }
}

impl TargetContext {
    /// A context over a started target.
    pub fn new(target: Arc<Target>) -> Self {
        Self {
            target,
            keys: Mutex::new(Vec::new()),
        }
    }

    /// The target.
    pub fn target(&self) -> &Arc<Target> {
        &self.target
    }
}

/// Registers every storage and framework method (everything but the core methods of
/// [`Methods::register_core`], which the daemon registers with its hooks).
pub fn register(m: &mut Methods<TargetContext>) -> Result<(), RegisterError> {
    framework::register(m)?;
    thread::register(m)?;
    setters::register(m)?;
    keyring::register(m)?;
    bdev::register(m)?;
    nvmf::register(m)?;
    Ok(())
}

/// Registers a typed asynchronous method whose errors are logged with the method name. Every
/// storage method goes through here, so handlers stay small and uniform.
pub(crate) fn add<P, R, F, Fut>(
    m: &mut Methods<TargetContext>,
    name: &'static str,
    mask: StateMask,
    decode: Decode,
    f: F,
) -> Result<(), RegisterError>
where
    P: DeserializeOwned + Send + 'static,
    R: Serialize + 'static,
    F: Fn(P, Arc<TargetContext>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = RpcResult<R>> + Send + 'static,
{
    crate::request_check::record_fields::<P>(name);
    m.register_async(
        name,
        mask,
        move |p: crate::Params<'static>, ctx: Arc<TargetContext>| {
            let decoded =
                check_spec(name, decode, &p).and_then(|()| Ok(crate::params::decode(&p, decode)?));
            let f = f.clone();
            async move {
                let r = match decoded {
                    Ok(a) => f(a, ctx).await,
                    Err(e) => Err(e),
                };
                r.inspect_err(|e| log_failure(name, e))
            }
        },
    )?;
    Ok(())
}

/// Checks `p` against the spec of method `name` ([`specs`]) with decode rule `decode`:
/// unknown keys (top-level ones ignored when relaxed), JSON types, required keys. A failure is
/// the canned error of the rule.
pub(crate) fn check_spec(name: &str, decode: Decode, p: &crate::Params<'_>) -> RpcResult<()> {
    match specs::find(name) {
        Some(spec) => crate::request_check::check_request(p, spec, decode).map(|_| ()),
        None => Ok(()),
    }
}

/// Registers a synchronous method (one that never waits) whose errors are logged with the
/// method name.
pub(crate) fn add_sync<R, F>(
    m: &mut Methods<TargetContext>,
    name: &'static str,
    mask: StateMask,
    f: F,
) -> Result<(), RegisterError>
where
    R: Serialize + 'static,
    F: Fn(crate::Params<'_>, &TargetContext) -> RpcResult<R> + Send + Sync + 'static,
{
    m.register(
        name,
        mask,
        move |p: crate::Params<'_>, ctx: &TargetContext| {
            check_spec(name, Decode::Strict, &p)
                .and_then(|()| f(p, ctx))
                .inspect_err(|e| log_failure(name, e))
        },
    )?;
    Ok(())
}

/// Logs a failed call: `warn` for what the caller got wrong, `error` for internal failures.
pub(crate) fn log_failure(method: &str, e: &RpcError) {
    if e.code == crate::codes::INTERNAL_ERROR {
        tracing::error!(method, code = e.code, "{}", e.message);
    } else {
        tracing::warn!(method, code = e.code, "{}", e.message);
    }
}

/// `tgt_name` must name the one target rtgt runs, if given: `-32602 NVMf target '<n>' not found`.
pub(crate) fn check_tgt(tgt_name: &Option<String>) -> RpcResult<()> {
    match tgt_name {
        Some(n) if n != DEFAULT_TGT_NAME => Err(RpcError::invalid_params(format!(
            "NVMf target '{n}' not found"
        ))),
        _ => Ok(()),
    }
}

/// The usual nvmf mapping: a missing object or a bad parameter is `-32602`, anything else
/// `-32603`; the message is the core's, which names the object.
pub(crate) fn nvmf_err(e: CoreError) -> RpcError {
    match e {
        CoreError::NotFound(m) | CoreError::Invalid(m) => RpcError::invalid_params(m),
        CoreError::Bdev(_, m) => RpcError::invalid_params(m),
        other => RpcError::internal(other.to_string()),
    }
}

/// Every failure as `-32602` with the core's message (add_ns, add_listener, remove_ns).
pub(crate) fn invalid(e: CoreError) -> RpcError {
    RpcError::invalid_params(e.to_string())
}

/// `-32602 <what> is not supported: <why>`: the refusal of a parameter value rtgt would
/// otherwise accept and ignore.
pub(crate) fn not_supported(what: impl std::fmt::Display, why: &str) -> RpcError {
    let e = RpcError::invalid_params(format!("{what} is not supported: {why}"));
    tracing::warn!("{}", e.message);
    e
}

/// Every failure as `-32603` with the core's message (add_host, remove_host).
pub(crate) fn internal(e: CoreError) -> RpcError {
    RpcError::internal(e.to_string())
}

/// Parses a canonical 36-character UUID.
pub(crate) fn parse_uuid(s: &str) -> Option<uuid::Uuid> {
    if s.len() != 36 {
        return None;
    }
    uuid::Uuid::parse_str(s).ok()
}

/// Upper-case hex of a byte string (SPDK's NGUID/EUI-64 format).
pub(crate) fn hex_upper(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02X}");
        s
    })
}

/// Decodes exactly `N` bytes of hex (dashes ignored, as SPDK's decoder does).
pub(crate) fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    let digits: Vec<u8> = s.bytes().filter(|&b| b != b'-').collect();
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in digits.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(text, 16).ok()?;
    }
    Some(out)
}

/// The JSON types and parameter tables of the methods whose parameters are checked against a
/// table rather than a struct (the option setters, the transport options): the method spec's.
pub use rpc_spec::{JsonType, Param};
pub(crate) use rpc_spec::{check_params, opt};

/// Decodes `params` as a JSON object (absent = `{}`), with the decode error of `flavor`.
pub(crate) fn params_object(
    p: &crate::Params<'_>,
    flavor: crate::params::DecodeFlavor,
) -> Result<Map<String, Value>, RpcError> {
    crate::params::decode_with::<Map<String, Value>>(
        p,
        crate::params::UnknownKeys::IgnoreAll,
        flavor,
    )
    .map_err(RpcError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let b: [u8; 8] = parse_hex("0123456789abcdef").unwrap();
        assert_eq!(hex_upper(&b), "0123456789ABCDEF");
        assert!(parse_hex::<8>("0123").is_none());
        assert!(parse_hex::<2>("zz00").is_none());
        let g: [u8; 16] = parse_hex("11111111-2222-3333-4444-555555555555").unwrap();
        assert_eq!(hex_upper(&g), "11111111222233334444555555555555");
    }

    #[test]
    fn tgt_names_and_uuids() {
        assert!(check_tgt(&Some("nvmf_tgt".into())).is_ok());
        assert_eq!(check_tgt(&Some("x".into())).unwrap_err().code, -32602);
        assert!(parse_uuid("11111111-2222-3333-4444-555555555555").is_some());
        assert!(parse_uuid("111111112222333344445555555555556666").is_none());
    }
}
