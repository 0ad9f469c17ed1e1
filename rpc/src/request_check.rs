//! Every request is checked against its method's spec ([`rpc_spec::MethodSpec`]) before it is
//! decoded: the keys a method takes, their JSON types and which are required come from the spec
//! that also builds the command lines, so the server and its clients cannot disagree on them.
//! (The specs themselves are in [`crate::methods::specs`].)

use parking_lot::Mutex;
use rpc_spec::{MethodSpec, Param, check_params};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::Params;
use crate::error::RpcError;
use crate::params::{Decode, DecodeError, DecodeFlavor, UnknownKeys, decode_with};

/// The parameter table of `spec`'s request: one entry per top-level key (a group of rpc.py's
/// `group_as` is one object), and the table of the group's keys.
pub fn request_params(spec: &MethodSpec) -> (Vec<Param>, Vec<Param>) {
    let grouped = |key: &str| spec.group.is_some_and(|(_, keys)| keys.contains(&key));
    let mut top: Vec<Param> = spec
        .args
        .iter()
        .filter(|a| !grouped(a.key))
        .map(|a| a.param())
        .collect();
    let inner: Vec<Param> = spec
        .args
        .iter()
        .filter(|a| grouped(a.key))
        .map(|a| a.param())
        .collect();
    if let Some((name, _)) = spec.group {
        top.push(Param {
            name,
            kind: rpc_spec::JsonType::Object,
            required: inner.iter().any(|p| p.required),
        });
    }
    (top, inner)
}

/// Decodes `p` as an object and checks it strictly against `spec` (unknown keys at any depth,
/// JSON types, required keys). A failure is the canned error of `flavor`; the reason is logged.
pub fn checked_params(
    p: &Params<'_>,
    spec: &MethodSpec,
    flavor: DecodeFlavor,
) -> Result<Map<String, Value>, RpcError> {
    checked(p, spec, flavor, false)
}

/// Checks `p` against `spec` with decode rule `decode` ([`Decode::Relaxed`]: unknown top-level
/// keys are ignored, as SPDK's relaxed decoder does) and returns it as an object.
pub fn check_request(
    p: &Params<'_>,
    spec: &MethodSpec,
    decode: Decode,
) -> Result<Map<String, Value>, RpcError> {
    match decode {
        Decode::Strict => checked(p, spec, DecodeFlavor::InvalidParams, false),
        Decode::Relaxed => checked(p, spec, DecodeFlavor::InvalidParams, true),
        Decode::Bdev => checked(p, spec, DecodeFlavor::Internal, false),
    }
}

fn checked(
    p: &Params<'_>,
    spec: &MethodSpec,
    flavor: DecodeFlavor,
    relaxed: bool,
) -> Result<Map<String, Value>, RpcError> {
    let params: Map<String, Value> = decode_with(p, UnknownKeys::IgnoreAll, flavor)?;
    let (top, inner) = request_params(spec);
    let mut check = check_params(&without_nulls(&params), &top, relaxed);
    if check.is_ok()
        && let Some((name, _)) = spec.group
        && let Some(Value::Object(group)) = params.get(name)
    {
        check = check_params(&without_nulls(group), &inner, false)
            .map_err(|why| format!("{name}: {why}"));
    }
    check.map_err(|detail| {
        tracing::warn!(method = spec.name, %detail, "rejected RPC parameters");
        RpcError::from(DecodeError { flavor, detail })
    })?;
    Ok(params)
}

/// `params` without its `null` members: a handler's struct reads them as absent, so the spec
/// check does too (a required key that is `null` is then missing).
fn without_nulls(params: &Map<String, Value>) -> Map<String, Value> {
    params
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The parameter struct fields of every method registered with a typed handler, recorded at
/// registration, for the test that compares them with the methods' specs.
static FIELDS: Mutex<Vec<MethodFields>> = Mutex::new(Vec::new());

/// A method and the keys of its parameter struct (`None`: not a struct).
pub type MethodFields = (&'static str, Option<Vec<&'static str>>);

/// Records the fields of `P`, the parameter struct of method `name` (`None` when `P` is not a
/// struct, e.g. a map checked against a table).
pub(crate) fn record_fields<P: DeserializeOwned>(name: &'static str) {
    let fields = struct_fields::<P>();
    let mut all = FIELDS.lock();
    if !all.iter().any(|(n, _)| *n == name) {
        all.push((name, fields));
    }
}

/// The parameter struct fields of every method registered so far, recorded as each typed
/// method registers (`None`: its parameters are not a struct).
pub fn recorded_fields() -> Vec<MethodFields> {
    FIELDS.lock().clone()
}

pub use rpc_spec::struct_fields;

#[cfg(test)]
mod tests {
    use super::*;
    use rpc_spec::ValueKind::*;
    use rpc_spec::{grouped, m, o, pos};

    const SPEC: MethodSpec = grouped(
        m(
            "x_add",
            "test",
            &[
                pos(0, "nqn", Str, "nqn"),
                o('n', "nsid", "nsid", Int, "nsid"),
                pos(1, "bdev_name", Str, "bdev"),
            ],
        ),
        "namespace",
        &["nsid", "bdev_name"],
    );

    fn check(text: &str) -> Result<Map<String, Value>, RpcError> {
        checked_params(&Params::new(Some(text)), &SPEC, DecodeFlavor::Internal)
    }

    #[test]
    fn relaxed_requests_ignore_unknown_top_level_keys_only() {
        let p = Params::new(Some(r#"{"nqn":"a","x":1,"namespace":{"bdev_name":"b"}}"#));
        assert!(check_request(&p, &SPEC, Decode::Relaxed).is_ok());
        assert_eq!(
            check_request(&p, &SPEC, Decode::Strict).unwrap_err(),
            RpcError::invalid_params_default()
        );
        let p = Params::new(Some(r#"{"nqn":"a","namespace":{"bdev_name":"b","x":1}}"#));
        assert!(check_request(&p, &SPEC, Decode::Relaxed).is_err());
    }

    #[test]
    fn requests_are_checked_against_the_spec() {
        assert!(check(r#"{"nqn":"a","namespace":{"bdev_name":"b","nsid":1}}"#).is_ok());
        // `null` reads as absent, as the handlers' structs read it.
        assert!(check(r#"{"nqn":"a","namespace":{"bdev_name":"b","nsid":null}}"#).is_ok());
        let canned = RpcError::internal("spdk_json_decode_object failed");
        for bad in [
            r#"{"nqn":"a"}"#,
            r#"{"nqn":null,"namespace":{"bdev_name":"b"}}"#,
            r#"{"nqn":"a","namespace":{"nsid":1}}"#,
            r#"{"nqn":"a","namespace":{"bdev_name":"b","zz":1}}"#,
            r#"{"nqn":"a","namespace":{"bdev_name":"b"},"zz":1}"#,
            r#"{"nqn":1,"namespace":{"bdev_name":"b"}}"#,
            r#"{"nqn":"a","namespace":{"bdev_name":"b","nsid":"1"}}"#,
        ] {
            assert_eq!(check(bad).unwrap_err(), canned, "{bad}");
        }
    }
}
