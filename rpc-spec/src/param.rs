//! JSON parameter types and tables of parameters, checked generically.

use serde_json::{Map, Value};

/// The JSON type a parameter must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonType {
    /// `true` / `false`.
    Bool,
    /// Unsigned integer that fits in the given number of bits.
    Uint(u32),
    /// Signed 32-bit integer.
    I32,
    /// Any integer (signed 64-bit or unsigned 64-bit).
    Int,
    /// Any number (integer or fraction).
    Number,
    /// String.
    Str,
    /// Array of strings.
    StrList,
    /// Array of unsigned 64-bit integers.
    UintList,
    /// Any JSON object.
    Object,
    /// An object of strings (e.g. librados options).
    StrMap,
    /// An object of booleans with these names.
    Flags(&'static [&'static str]),
}

impl JsonType {
    /// The type's name in messages and in `methods.json`.
    pub fn name(self) -> &'static str {
        match self {
            JsonType::Bool => "bool",
            JsonType::Uint(8) => "u8",
            JsonType::Uint(16) => "u16",
            JsonType::Uint(32) => "u32",
            JsonType::Uint(_) => "u64",
            JsonType::I32 => "i32",
            JsonType::Int => "int",
            JsonType::Number => "number",
            JsonType::Str => "string",
            JsonType::StrList => "string list",
            JsonType::UintList => "integer list",
            JsonType::Object => "object",
            JsonType::StrMap => "object of strings",
            JsonType::Flags(_) => "object of booleans",
        }
    }
}

/// One parameter of a method: its JSON key, type and whether it must be present.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    /// Its name (the JSON key).
    pub name: &'static str,
    /// Its type.
    pub kind: JsonType,
    /// Whether it must be present.
    pub required: bool,
}

/// An optional parameter.
pub const fn opt(name: &'static str, kind: JsonType) -> Param {
    Param {
        name,
        kind,
        required: false,
    }
}

/// A required parameter.
pub const fn req(name: &'static str, kind: JsonType) -> Param {
    Param {
        name,
        kind,
        required: true,
    }
}

/// Whether `v` has type `kind`.
pub fn kind_ok(kind: JsonType, v: &Value) -> bool {
    match kind {
        JsonType::Bool => v.is_boolean(),
        JsonType::Uint(bits) => v.as_u64().is_some_and(|n| bits >= 64 || n < (1u64 << bits)),
        JsonType::I32 => v.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
        JsonType::Int => v.is_i64() || v.is_u64(),
        JsonType::Number => v.is_number(),
        JsonType::Str => v.is_string(),
        JsonType::StrList => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        JsonType::UintList => v.as_array().is_some_and(|a| a.iter().all(Value::is_u64)),
        JsonType::Object => v.is_object(),
        JsonType::StrMap => v
            .as_object()
            .is_some_and(|o| o.values().all(Value::is_string)),
        JsonType::Flags(names) => v.as_object().is_some_and(|o| {
            o.iter()
                .all(|(k, b)| names.contains(&k.as_str()) && b.is_boolean())
        }),
    }
}

/// Checks a params object against a table. Unknown keys are an error unless `relaxed`.
/// Returns the reason; callers turn it into their method's error.
pub fn check_params(
    params: &Map<String, Value>,
    table: &[Param],
    relaxed: bool,
) -> Result<(), String> {
    for (k, v) in params {
        match table.iter().find(|p| p.name == k) {
            Some(p) if !kind_ok(p.kind, v) => {
                return Err(format!("parameter '{k}' must be {:?}, not {v}", p.kind));
            }
            Some(_) => {}
            None if relaxed => {}
            None => return Err(format!("unknown parameter '{k}'")),
        }
    }
    if let Some(p) = table
        .iter()
        .find(|p| p.required && !params.contains_key(p.name))
    {
        return Err(format!("missing parameter '{}'", p.name));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table_checks() {
        let t = [
            req("name", JsonType::Str),
            opt("n", JsonType::Uint(16)),
            opt("f", JsonType::Flags(&["a"])),
            opt("c", JsonType::StrMap),
        ];
        let m = |v: Value| v.as_object().unwrap().clone();
        assert!(check_params(&m(json!({"name":"x","n":65535})), &t, false).is_ok());
        assert!(check_params(&m(json!({"name":"x","n":65536})), &t, false).is_err());
        assert!(check_params(&m(json!({"name":"x","n":-1})), &t, false).is_err());
        assert!(check_params(&m(json!({"n":1})), &t, false).is_err());
        assert!(check_params(&m(json!({"name":"x","zz":1})), &t, false).is_err());
        assert!(check_params(&m(json!({"name":"x","zz":1})), &t, true).is_ok());
        assert!(check_params(&m(json!({"name":"x","f":{"a":true}})), &t, false).is_ok());
        assert!(check_params(&m(json!({"name":"x","f":{"b":true}})), &t, false).is_err());
        assert!(check_params(&m(json!({"name":"x","c":{"k":"v"}})), &t, false).is_ok());
        assert!(check_params(&m(json!({"name":"x","c":{"k":1}})), &t, false).is_err());
        assert!(kind_ok(JsonType::Int, &json!(-5)) && kind_ok(JsonType::Int, &json!(u64::MAX)));
        assert!(!kind_ok(JsonType::Int, &json!(1.5)) && kind_ok(JsonType::Number, &json!(1.5)));
    }
}
