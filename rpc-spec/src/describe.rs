//! The method specs as JSON: what `python/src/rtgt/methods.json` holds, so that the Python
//! package (which has no dependencies, by design) builds `rtgt-rpc`'s command lines from the
//! same declaration as the server and `rtgt rpc`.

use serde_json::{Map, Value, json};

use crate::method::{Action, ArgSpec, At, MethodSpec, Prints, ValueKind};

/// The JSON description of `specs`, in order.
pub fn describe(specs: &[&MethodSpec]) -> Value {
    json!({
        "comment": "Generated from the Rust method specs (rpc-spec); do not edit. \
                    Regenerate: RTGT_UPDATE_METHODS_JSON=1 cargo test -p rtgt methods_json",
        "methods": specs.iter().map(|s| method(s)).collect::<Vec<_>>(),
    })
}

fn method(s: &MethodSpec) -> Value {
    let mut m = Map::new();
    m.insert("name".into(), json!(s.name));
    m.insert("help".into(), json!(s.about));
    m.insert(
        "action".into(),
        json!(match s.action {
            Action::Call => "call",
            Action::SaveConfig => "save_config",
            Action::LoadConfig => "load_config",
            Action::SaveSubsystemConfig => "save_subsystem_config",
            Action::LoadSubsystemConfig => "load_subsystem_config",
        }),
    );
    m.insert(
        "prints".into(),
        json!(match s.prints {
            Prints::Nothing => "none",
            Prints::Json => "json",
            Prints::Dict => "dict",
        }),
    );
    if let Some((name, keys)) = s.group {
        m.insert("group".into(), json!({"name": name, "keys": keys}));
    }
    if !s.aliases.is_empty() {
        m.insert("aliases".into(), json!(s.aliases));
    }
    if s.discovery_alias {
        m.insert("discovery_alias".into(), json!(true));
    }
    m.insert(
        "args".into(),
        Value::Array(s.args.iter().map(arg).collect()),
    );
    Value::Object(m)
}

fn arg(a: &ArgSpec) -> Value {
    let mut m = Map::new();
    m.insert("key".into(), json!(a.key));
    match a.at {
        At::Pos(i) => {
            m.insert("pos".into(), json!(i));
        }
        At::Opt(short, long) => {
            if let Some(c) = short {
                m.insert("short".into(), json!(c.to_string()));
            }
            m.insert("long".into(), json!(long));
        }
        At::Key => {
            m.insert("json_only".into(), json!(true));
        }
    }
    let kind = match a.kind {
        ValueKind::Str => "str",
        ValueKind::Int => "int",
        ValueKind::Choice(c) => {
            m.insert("choices".into(), json!(c));
            "choice"
        }
        ValueKind::IntIn(lo, hi) => {
            m.insert("range".into(), json!([lo, hi]));
            "int_in"
        }
        ValueKind::Flag => "flag",
        ValueKind::FlagOff => "flag_off",
        ValueKind::FlagIfGiven => "flag_if_given",
        ValueKind::Toggle(d) => {
            m.insert("default".into(), json!(d));
            "toggle"
        }
        ValueKind::List => "list",
        ValueKind::IntList => "int_list",
        ValueKind::ListOf(c) => {
            m.insert("choices".into(), json!(c));
            "list_of"
        }
        ValueKind::FlagSet(c) => {
            m.insert("choices".into(), json!(c));
            "flag_set"
        }
        ValueKind::KeyValue => "key_value",
        ValueKind::SizeMib { block_size, float } => {
            m.insert("block_size".into(), json!(block_size));
            m.insert("float".into(), json!(float));
            "size_mib"
        }
    };
    m.insert("kind".into(), json!(kind));
    m.insert("json".into(), json!(a.json_kind().name()));
    if a.required {
        m.insert("required".into(), json!(true));
    }
    if let Some(c) = a.conflicts {
        m.insert("conflicts".into(), json!(c));
    }
    m.insert("help".into(), json!(a.help));
    Value::Object(m)
}
