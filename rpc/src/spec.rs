//! The request decoder derived from a method's spec ([`rpc_spec::MethodSpec`]): the keys a
//! method takes, their JSON types and which are required come from the spec that also builds
//! the command lines, so the server and its clients cannot disagree on them.

use rpc_spec::{MethodSpec, Param, check_params};
use serde_json::{Map, Value};

use crate::Params;
use crate::error::RpcError;
use crate::params::{DecodeError, DecodeFlavor, UnknownKeys, decode_with};

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
            kind: rpc_spec::Kind::Object,
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
    let params: Map<String, Value> = decode_with(p, UnknownKeys::IgnoreAll, flavor)?;
    let (top, inner) = request_params(spec);
    let mut check = check_params(&params, &top, false);
    if check.is_ok()
        && let Some((name, _)) = spec.group
        && let Some(Value::Object(group)) = params.get(name)
    {
        check = check_params(group, &inner, false).map_err(|why| format!("{name}: {why}"));
    }
    check.map_err(|detail| {
        tracing::warn!(method = spec.name, %detail, "rejected RPC parameters");
        RpcError::from(DecodeError { flavor, detail })
    })?;
    Ok(params)
}

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
    fn requests_are_checked_against_the_spec() {
        assert!(check(r#"{"nqn":"a","namespace":{"bdev_name":"b","nsid":1}}"#).is_ok());
        let canned = RpcError::internal("spdk_json_decode_object failed");
        for bad in [
            r#"{"nqn":"a"}"#,
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
