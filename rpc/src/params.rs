//! Parameter decoding with SPDK's rules (lib/json/json_util.c).
//!
//! Write one plain `#[derive(Deserialize)]` struct per method (no `deny_unknown_fields`
//! needed: strictness is chosen at the call site) and decode it with:
//!
//! * [`strict`]: unknown keys anywhere → `-32602 Invalid parameters` (`spdk_json_decode_object`);
//! * [`relaxed`]: unknown *top-level* keys ignored, nested objects still strict
//!   (`spdk_json_decode_object_relaxed`; SPDK uses it for `nvmf_create_transport`,
//!   `nvmf_subsystem_add_listener`, `nvmf_subsystem_add_ns`, `nvmf_subsystem_add_host`);
//! * [`bdev`]: strict, but a failure is `-32603 spdk_json_decode_object failed` as in the bdev
//!   and log RPCs;
//! * [`no_params`]: methods that take nothing (`spdk_get_version`, …) reject any `params`,
//!   even `{}`.
//!
//! Missing `params` (rpc.py omits the member when there is nothing to send) decodes as `{}`, so
//! all-optional structs just work and missing required fields fail as they should. Arrays are
//! rejected: SPDK decodes objects only. Duplicate keys, wrong types, negative or fractional
//! values for unsigned fields and out-of-range integers fail, as serde already does.
//!
//! The serde message ("unknown field `bogus`", "missing field `nqn`") is logged at `warn`; the
//! client gets SPDK's canned message unless [`DecodeError::detailed`] is used.

use serde::de::DeserializeOwned;

use crate::Params;
use crate::error::RpcError;

/// What to do with object keys the target type does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownKeys {
    /// Any unknown key, at any depth, is an error.
    Reject,
    /// Unknown keys of the top-level object are ignored; nested objects stay strict.
    IgnoreTopLevel,
    /// Unknown keys are ignored everywhere.
    IgnoreAll,
}

/// Which error a decode failure becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeFlavor {
    /// `-32602 Invalid parameters` (nvmf and most other RPCs).
    InvalidParams,
    /// `-32603 spdk_json_decode_object failed` (bdev create/delete/get, log RPCs).
    Internal,
}

/// A parameter decoding failure. Converts into the SPDK error of its flavour with `?`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Which canned error this becomes.
    pub flavor: DecodeFlavor,
    /// What exactly was wrong (serde's message or an unknown key), for logs or
    /// [`DecodeError::detailed`].
    pub detail: String,
}

impl DecodeError {
    fn canned(&self) -> RpcError {
        match self.flavor {
            DecodeFlavor::InvalidParams => RpcError::invalid_params_default(),
            DecodeFlavor::Internal => RpcError::internal("spdk_json_decode_object failed"),
        }
    }

    /// The SPDK error with the precise reason appended: `Invalid parameters: missing field
    /// `nqn``. Use where a clearer message helps more than byte-exact SPDK text.
    pub fn detailed(self) -> RpcError {
        let mut e = self.canned();
        e.message = format!("{}: {}", e.message, self.detail);
        e
    }
}

impl From<DecodeError> for RpcError {
    fn from(e: DecodeError) -> RpcError {
        e.canned()
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for DecodeError {}

/// The decoding rule of a typed method (see [`crate::Methods::register_typed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decode {
    /// [`strict`]: unknown keys fail with `-32602 Invalid parameters`.
    Strict,
    /// [`relaxed`]: unknown top-level keys are ignored.
    Relaxed,
    /// [`bdev`]: strict, failures are `-32603 spdk_json_decode_object failed`.
    Bdev,
}

/// Decode `params` with rule `how`.
pub fn decode<T: DeserializeOwned>(params: &Params<'_>, how: Decode) -> Result<T, DecodeError> {
    match how {
        Decode::Strict => strict(params),
        Decode::Relaxed => relaxed(params),
        Decode::Bdev => bdev(params),
    }
}

/// Decode `params` into `T`; unknown keys anywhere fail with `-32602 Invalid parameters`.
pub fn strict<T: DeserializeOwned>(params: &Params<'_>) -> Result<T, DecodeError> {
    decode_with(params, UnknownKeys::Reject, DecodeFlavor::InvalidParams)
}

/// Decode `params` into `T`, ignoring unknown top-level keys (SPDK's relaxed decoder).
pub fn relaxed<T: DeserializeOwned>(params: &Params<'_>) -> Result<T, DecodeError> {
    decode_with(
        params,
        UnknownKeys::IgnoreTopLevel,
        DecodeFlavor::InvalidParams,
    )
}

/// Decode `params` strictly; failures are `-32603 spdk_json_decode_object failed` (bdev RPCs).
pub fn bdev<T: DeserializeOwned>(params: &Params<'_>) -> Result<T, DecodeError> {
    decode_with(params, UnknownKeys::Reject, DecodeFlavor::Internal)
}

/// Reject any `params` member (`null` counts as absent): `Err(-32602 <message>)`. SPDK's
/// messages differ per method, e.g. `spdk_get_version method requires no parameters`,
/// `framework_start_init requires no parameters`, `'framework_get_subsystems' requires no
/// arguments`.
pub fn no_params(params: &Params<'_>, message: &str) -> Result<(), RpcError> {
    match params.as_str() {
        None => Ok(()),
        Some(_) => Err(RpcError::invalid_params(message)),
    }
}

/// The general decoder behind [`strict`], [`relaxed`] and [`bdev`].
pub fn decode_with<T: DeserializeOwned>(
    params: &Params<'_>,
    unknown: UnknownKeys,
    flavor: DecodeFlavor,
) -> Result<T, DecodeError> {
    let fail = |detail: String| {
        tracing::warn!(%detail, "rejected RPC parameters");
        DecodeError { flavor, detail }
    };
    let text = params.as_str().unwrap_or("{}");
    if !text.trim_start().starts_with('{') {
        return Err(fail("params must be a JSON object".to_string()));
    }
    let mut unknown_key: Option<String> = None;
    let mut de = serde_json::Deserializer::from_str(text);
    let value: T = serde_ignored::deserialize(&mut de, |path| {
        let top_level = matches!(
            path,
            serde_ignored::Path::Map {
                parent: serde_ignored::Path::Root,
                ..
            }
        );
        let ignore = match unknown {
            UnknownKeys::Reject => false,
            UnknownKeys::IgnoreTopLevel => top_level,
            UnknownKeys::IgnoreAll => true,
        };
        if !ignore && unknown_key.is_none() {
            unknown_key = Some(path.to_string());
        }
    })
    .map_err(|e| fail(e.to_string()))?;
    de.end().map_err(|e| fail(e.to_string()))?;
    match unknown_key {
        Some(key) => Err(fail(format!("unknown key '{key}'"))),
        None => Ok(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Addr {
        trtype: String,
        traddr: Option<String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Listener {
        nqn: String,
        listen_address: Addr,
    }

    #[derive(Debug, Deserialize, PartialEq, Default)]
    #[serde(default)]
    struct GetMethods {
        current: bool,
        include_aliases: bool,
    }

    #[derive(Debug, Deserialize)]
    struct Malloc {
        #[allow(dead_code)]
        num_blocks: u64,
        #[allow(dead_code)]
        block_size: u32,
    }

    fn p(s: &str) -> Params<'_> {
        Params::new(Some(s))
    }

    #[test]
    fn strict_rejects_unknown_keys_at_any_depth() {
        let ok: Listener = strict(&p(r#"{"nqn":"a","listen_address":{"trtype":"rdma"}}"#)).unwrap();
        assert_eq!(ok.listen_address.trtype, "rdma");
        let e = strict::<Listener>(&p(
            r#"{"nqn":"a","bogus":1,"listen_address":{"trtype":"rdma"}}"#,
        ))
        .unwrap_err();
        assert_eq!(e.detail, "unknown key 'bogus'");
        assert_eq!(
            RpcError::from(e),
            RpcError::invalid_params("Invalid parameters")
        );
        let e = strict::<Listener>(&p(
            r#"{"nqn":"a","listen_address":{"trtype":"rdma","x":1}}"#,
        ))
        .unwrap_err();
        assert_eq!(e.detail, "unknown key 'listen_address.x'");
    }

    #[test]
    fn relaxed_ignores_top_level_only() {
        let v: Listener = relaxed(&p(
            r#"{"nqn":"a","secure_channel":false,"listen_address":{"trtype":"rdma"}}"#,
        ))
        .unwrap();
        assert_eq!(v.nqn, "a");
        assert!(
            relaxed::<Listener>(&p(
                r#"{"nqn":"a","listen_address":{"trtype":"rdma","x":1}}"#
            ))
            .is_err()
        );
        let v: Listener = decode_with(
            &p(r#"{"nqn":"a","listen_address":{"trtype":"rdma","x":1}}"#),
            UnknownKeys::IgnoreAll,
            DecodeFlavor::InvalidParams,
        )
        .unwrap();
        assert_eq!(v.listen_address.traddr, None);
    }

    #[test]
    fn missing_params_is_empty_object() {
        let v: GetMethods = strict(&Params::new(None)).unwrap();
        assert_eq!(v, GetMethods::default());
        let e = strict::<Listener>(&Params::new(None)).unwrap_err();
        assert!(e.detail.contains("missing field `nqn`"), "{}", e.detail);
        assert_eq!(
            e.clone().detailed().message,
            format!("Invalid parameters: {}", e.detail)
        );
    }

    #[test]
    fn arrays_duplicates_and_bad_numbers_fail() {
        assert!(strict::<GetMethods>(&p("[true, false]")).is_err());
        assert!(strict::<GetMethods>(&p(r#"{"current":true,"current":false}"#)).is_err());
        assert!(strict::<GetMethods>(&p(r#"{"current":1}"#)).is_err());
        assert!(strict::<Malloc>(&p(r#"{"num_blocks":-1,"block_size":512}"#)).is_err());
        assert!(strict::<Malloc>(&p(r#"{"num_blocks":1.5,"block_size":512}"#)).is_err());
        assert!(strict::<Malloc>(&p(r#"{"num_blocks":1,"block_size":4294967296}"#)).is_err());
        assert!(strict::<Malloc>(&p(r#"{"num_blocks":1,"block_size":512}"#)).is_ok());
    }

    #[test]
    fn bdev_flavor_is_internal_error() {
        let e: RpcError = bdev::<Malloc>(&p(r#"{"num_blocks":1}"#))
            .unwrap_err()
            .into();
        assert_eq!(e, RpcError::internal("spdk_json_decode_object failed"));
    }

    #[test]
    fn no_params_accepts_only_absent() {
        assert!(no_params(&Params::new(None), "x requires no parameters").is_ok());
        let e = no_params(&p("{}"), "x requires no parameters").unwrap_err();
        assert_eq!(e, RpcError::invalid_params("x requires no parameters"));
        assert!(no_params(&p("[]"), "m").is_err());
    }
}
