//! clap commands built from the method table, and the request a command line produces.
//!
//! [`method_command`] turns a [`MethodSpec`] into a clap command (used to parse, for `help`,
//! and as a subcommand of `rtgt rpc` in the completion scripts). [`invocation`] parses a
//! method's arguments and builds its parameters as rpc.py does: unset options are dropped,
//! `store_true` flags are always sent, grouped keys are nested, sizes in MiB become
//! `num_blocks`, and an empty parameter object is omitted from the request.

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Arg, ArgAction, ArgGroup, ArgMatches, Command};
use serde_json::{Map, Number, Value};

use crate::methods::{self, Action, ArgSpec, At, DISCOVERY_NQN, MethodSpec, ValueKind};

fn value_name(a: &ArgSpec) -> String {
    match a.kind {
        ValueKind::SizeMib { .. } => "SIZE_MIB".into(),
        _ => match a.at {
            At::Pos(_) | At::Key => a.key.to_uppercase(),
            At::Opt(_, long) => long.replace('-', "_").to_uppercase(),
        },
    }
}

/// Parses an integer as argparse's `int()` does (decimal, optional sign, surrounding blanks).
fn parse_int(s: &str) -> Result<Value, String> {
    let t = s.trim().replace('_', "");
    if let Ok(n) = t.parse::<i64>() {
        return Ok(Value::from(n));
    }
    t.strip_prefix('+')
        .unwrap_or(&t)
        .parse::<u64>()
        .map(Value::from)
        .map_err(|_| format!("invalid int value: '{s}'"))
}

fn split_list(s: &str) -> Vec<String> {
    s.split(',').map(str::to_string).collect()
}

/// `a,b` or `all` over `allowed`; unknown names are an error.
fn parse_names(s: &str, allowed: &'static [&'static str]) -> Result<Vec<String>, String> {
    let names = split_list(s);
    if names.iter().any(|n| n == "all") {
        return Ok(allowed.iter().map(|s| s.to_string()).collect());
    }
    let bad: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| !allowed.contains(n))
        .collect();
    if !bad.is_empty() {
        return Err(format!(
            "invalid '{}'; available: all, {}",
            bad.join(", "),
            allowed.join(", ")
        ));
    }
    Ok(names)
}

fn value_arg(a: &ArgSpec, arg: Arg) -> Arg {
    let arg = arg.value_name(value_name(a)).action(ArgAction::Set);
    match a.kind {
        ValueKind::Str => arg.value_parser(|s: &str| Ok::<_, String>(Value::from(s))),
        ValueKind::Int => arg.value_parser(parse_int).allow_negative_numbers(true),
        ValueKind::Choice(c) => arg.value_parser(PossibleValuesParser::new(c).map(Value::from)),
        ValueKind::IntIn(lo, hi) => {
            arg.value_parser(clap::value_parser!(i64).range(lo..=hi).map(Value::from))
        }
        ValueKind::List => arg.value_parser(|s: &str| Ok::<_, String>(Value::from(split_list(s)))),
        ValueKind::IntList => arg.value_parser(|s: &str| {
            split_list(s)
                .iter()
                .map(|n| {
                    n.parse::<u64>()
                        .map_err(|_| format!("'{n}' is not a non-negative integer"))
                })
                .collect::<Result<Vec<u64>, String>>()
                .map(Value::from)
        }),
        ValueKind::ListOf(allowed) => {
            arg.value_parser(move |s: &str| parse_names(s, allowed).map(Value::from))
        }
        ValueKind::FlagSet(allowed) => arg.value_parser(move |s: &str| {
            parse_names(s, allowed).map(|names| {
                Value::Object(names.into_iter().map(|n| (n, Value::Bool(true))).collect())
            })
        }),
        ValueKind::SizeMib { float, .. } => arg
            .value_parser(move |s: &str| {
                let v: f64 = s
                    .trim()
                    .parse()
                    .map_err(|_| format!("invalid size: '{s}'"))?;
                if !float && v.fract() != 0.0 {
                    return Err(format!("invalid int value: '{s}'"));
                }
                if !(v.is_finite() && v > 0.0) {
                    return Err(format!("the size must be greater than 0, not {s}"));
                }
                Number::from_f64(v)
                    .map(Value::Number)
                    .ok_or_else(|| format!("invalid size: '{s}'"))
            })
            .allow_negative_numbers(true),
        ValueKind::KeyValue => arg.action(ArgAction::Append).value_parser(parse_key_value),
        ValueKind::Flag | ValueKind::FlagOff | ValueKind::FlagIfGiven | ValueKind::Toggle(_) => arg,
    }
}

/// `key=value` as rpc.py's `--config-param` takes it: split at the first `=`.
fn parse_key_value(s: &str) -> Result<Value, String> {
    match s.split_once('=') {
        Some((k, v)) => Ok(Value::Array(vec![Value::from(k), Value::from(v)])),
        None => Err(format!("'{s}' is not in key=value form")),
    }
}

fn no_id(key: &str) -> String {
    format!("no_{key}")
}

/// The clap command of one method (without a binary name: the caller decides).
pub fn method_command(spec: &MethodSpec) -> Command {
    let mut cmd = Command::new(spec.name)
        .about(spec.about)
        .disable_version_flag(true);
    for a in spec.args.iter().filter(|a| a.on_command_line()) {
        let mut arg = Arg::new(a.key).help(a.help);
        match a.at {
            At::Key => continue,
            At::Pos(i) => arg = arg.index(i + 1).required(a.required),
            At::Opt(short, long) => {
                if let Some(c) = short {
                    arg = arg.short(c);
                }
                arg = arg.long(long);
                if a.required && !matches!(a.kind, ValueKind::Toggle(_)) {
                    arg = arg.required(true);
                }
            }
        }
        if let Some(other) = a.conflicts {
            arg = arg.conflicts_with(other);
        }
        match a.kind {
            ValueKind::Flag | ValueKind::FlagOff | ValueKind::FlagIfGiven => {
                cmd = cmd.arg(arg.action(ArgAction::SetTrue));
            }
            ValueKind::Toggle(_) => {
                let long = a.long().unwrap_or(a.key);
                let no = Arg::new(no_id(a.key))
                    .long(format!("no-{long}"))
                    .action(ArgAction::SetTrue)
                    .help(format!("Opposite of --{long}"))
                    .overrides_with(a.key);
                cmd = cmd
                    .arg(arg.action(ArgAction::SetTrue).overrides_with(no_id(a.key)))
                    .arg(no);
                if a.required {
                    cmd = cmd.group(
                        ArgGroup::new(format!("{}_choice", a.key))
                            .args([a.key.to_string(), no_id(a.key)])
                            .required(true),
                    );
                }
            }
            _ => cmd = cmd.arg(value_arg(a, arg)),
        }
    }
    cmd
}

/// The parameters `m` holds for `spec`, in rpc.py's key order; `None` when there are none.
pub fn params_from_matches(spec: &MethodSpec, m: &ArgMatches) -> Result<Option<Value>, String> {
    let mut out = Map::new();
    let mut group = Map::new();
    for a in spec.args.iter().filter(|a| a.on_command_line()) {
        let v = match a.kind {
            ValueKind::Flag => Some(Value::Bool(m.get_flag(a.key))),
            ValueKind::FlagIfGiven => m.get_flag(a.key).then_some(Value::Bool(true)),
            ValueKind::FlagOff => Some(Value::Bool(!m.get_flag(a.key))),
            ValueKind::Toggle(default) => {
                if m.get_flag(a.key) {
                    Some(Value::Bool(true))
                } else if m.get_flag(&no_id(a.key)) {
                    Some(Value::Bool(false))
                } else {
                    default.map(Value::Bool)
                }
            }
            ValueKind::SizeMib { block_size, float } => match m.get_one::<Value>(a.key) {
                Some(size) => {
                    let bs = m
                        .get_one::<Value>(block_size)
                        .and_then(Value::as_u64)
                        .filter(|&b| b > 0)
                        .ok_or_else(|| format!("{block_size} must be greater than 0"))?;
                    Some(Value::from(mib_to_blocks(size, bs, float)?))
                }
                None => None,
            },
            ValueKind::KeyValue => m.get_many::<Value>(a.key).map(|pairs| {
                let mut o = Map::new();
                for p in pairs {
                    if let [k, v] = p.as_array().map(Vec::as_slice).unwrap_or_default() {
                        o.insert(k.as_str().unwrap_or_default().into(), v.clone());
                    }
                }
                Value::Object(o)
            }),
            _ => m.get_one::<Value>(a.key).cloned(),
        };
        let Some(mut v) = v else { continue };
        if spec.discovery_alias && a.key == "nqn" && v == "discovery" {
            v = Value::from(DISCOVERY_NQN);
        }
        match spec.group {
            Some((_, keys)) if keys.contains(&a.key) => group.insert(a.key.into(), v),
            _ => out.insert(a.key.into(), v),
        };
    }
    if let Some((name, _)) = spec.group
        && !group.is_empty()
    {
        out.insert(name.into(), Value::Object(group));
    }
    Ok((!out.is_empty()).then_some(Value::Object(out)))
}

/// rpc.py: `num_blocks = (size * 1024 * 1024) // block_size`.
fn mib_to_blocks(size: &Value, block_size: u64, float: bool) -> Result<u64, String> {
    let f = size.as_f64().unwrap_or(0.0);
    if f.fract() == 0.0 && f < 9.0e15 {
        let bytes = (f as u128) << 20;
        return u64::try_from(bytes / u128::from(block_size))
            .map_err(|_| "the size is too large".to_string());
    }
    debug_assert!(float);
    Ok((f * 1_048_576.0 / block_size as f64).floor() as u64)
}

/// rpc.py's multi-letter single-dash options (`-t1`) rewritten to their long names.
fn rewrite_aliases(spec: &MethodSpec, args: &[String]) -> Vec<String> {
    args.iter()
        .map(|a| {
            spec.aliases
                .iter()
                .find(|(from, _)| a == from)
                .map(|(_, to)| to.to_string())
                .unwrap_or_else(|| a.clone())
        })
        .collect()
}

/// Parses `args` (the words after the method name) against `spec`. `bin` names the command
/// in usage messages.
pub fn parse_method_args(
    spec: &MethodSpec,
    args: &[String],
    bin: &str,
) -> Result<ArgMatches, clap::Error> {
    method_command(spec)
        .no_binary_name(true)
        .bin_name(format!("{bin} {}", spec.name))
        .try_get_matches_from(rewrite_aliases(spec, args))
}

/// What a command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Invocation {
    /// One JSON-RPC call.
    Call {
        /// The method.
        method: String,
        /// Its parameters (`None`: no `params` member).
        params: Option<Value>,
    },
    /// A client-side command (`save_config`, `load_config`, ...) with its options.
    Client {
        /// Which command.
        action: Action,
        /// Its options, by key.
        opts: Map<String, Value>,
    },
}

/// Why a command line does not make an invocation.
#[derive(Debug)]
pub enum InvocationError {
    /// The method's arguments do not parse (this includes `--help`).
    Args(clap::Error),
    /// Anything else, said in one line.
    Usage(String),
}

impl std::fmt::Display for InvocationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InvocationError::Args(e) => write!(f, "{}", e.to_string().trim_end()),
            InvocationError::Usage(m) => f.write_str(m),
        }
    }
}

/// Adds `extra` over `base`; objects on both sides are merged key by key.
fn merge(base: &mut Map<String, Value>, extra: Map<String, Value>) {
    for (k, v) in extra {
        match (base.get_mut(&k), v) {
            (Some(Value::Object(b)), Value::Object(e)) => merge(b, e),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Builds the invocation of `method` with `args` (the words after it) and an optional
/// `--params` JSON text.
///
/// * A method with a table entry parses its arguments; `--params` then adds to (and
///   overrides) the keys they produced, merging nested objects. With `--params` and no
///   arguments, the raw parameters are sent as they are, so required arguments may be left
///   out.
/// * Any other method is sent with `--params` as given, or without parameters.
pub fn invocation(
    method: &str,
    args: &[String],
    raw: Option<&str>,
    bin: &str,
) -> Result<Invocation, InvocationError> {
    let raw = raw
        .map(|t| {
            serde_json::from_str::<Value>(t)
                .map_err(|e| InvocationError::Usage(format!("--params is not valid JSON: {e}")))
        })
        .transpose()?;
    let Some(spec) = methods::find(method) else {
        if !args.is_empty() {
            return Err(InvocationError::Usage(format!(
                "'{method}' has no options here; pass its parameters with --params JSON"
            )));
        }
        return Ok(Invocation::Call {
            method: method.to_string(),
            params: raw,
        });
    };
    if spec.action != Action::Call {
        if raw.is_some() {
            return Err(InvocationError::Usage(format!(
                "{method} runs on the client; --params does not apply"
            )));
        }
        let m = parse_method_args(spec, args, bin).map_err(InvocationError::Args)?;
        let opts = match params_from_matches(spec, &m).map_err(InvocationError::Usage)? {
            Some(Value::Object(o)) => o,
            _ => Map::new(),
        };
        return Ok(Invocation::Client {
            action: spec.action,
            opts,
        });
    }
    let params = match raw {
        Some(raw) if args.is_empty() => Some(raw),
        raw => {
            let m = parse_method_args(spec, args, bin).map_err(InvocationError::Args)?;
            let built = params_from_matches(spec, &m).map_err(InvocationError::Usage)?;
            match (built, raw) {
                (built, None) => built,
                (built, Some(Value::Object(extra))) => {
                    let mut o = match built {
                        Some(Value::Object(o)) => o,
                        _ => Map::new(),
                    };
                    merge(&mut o, extra);
                    Some(Value::Object(o))
                }
                (_, Some(_)) => {
                    return Err(InvocationError::Usage(
                        "--params must be a JSON object when combined with the method's arguments"
                            .into(),
                    ));
                }
            }
        }
    };
    Ok(Invocation::Call {
        method: method.to_string(),
        params,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The params `rtgt rpc <line>` sends, as compact JSON text (key order included).
    fn req(line: &str) -> String {
        let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        match invocation(&words[0], &words[1..], None, "rtgt rpc") {
            Ok(Invocation::Call { params, .. }) => params
                .map(|p| serde_json::to_string(&p).unwrap())
                .unwrap_or_else(|| "<none>".into()),
            Ok(other) => panic!("{other:?}"),
            Err(e) => panic!("{line}: {e}"),
        }
    }

    fn err(line: &str) -> String {
        let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        match invocation(&words[0], &words[1..], None, "rtgt rpc") {
            Ok(i) => panic!("{line}: parsed as {i:?}"),
            Err(e) => e.to_string(),
        }
    }

    // The requests of spdk-reference §2.15 (rpc.py --dry-run, SPDK HEAD), byte for byte.

    #[test]
    fn create_transport_matches_rpc_py() {
        assert_eq!(
            req("nvmf_create_transport -t RDMA -u 8192 -n 4096 -b 32"),
            r#"{"no_srq":false,"c2h_success":true,"trtype":"RDMA","io_unit_size":8192,"num_shared_buffers":4096,"buf_cache_size":32,"zcopy":false,"dif_insert_or_strip":false,"no_wr_batching":false,"disable_mappable_bar0":false,"disable_adaptive_irq":false,"disable_shadow_doorbells":false,"disable_command_passthru":false}"#
        );
        // The brief's example, and flags of the other direction.
        let v: Value =
            serde_json::from_str(&req("nvmf_create_transport -t RDMA -u 8192 -r -o -z")).unwrap();
        assert_eq!(v["io_unit_size"], 8192);
        assert_eq!(v["no_srq"], true);
        assert_eq!(v["c2h_success"], false);
        assert_eq!(v["zcopy"], true);
        // Masks: names checked, `all` expanded.
        let v: Value = serde_json::from_str(&req(
            "nvmf_create_transport -t RDMA --masked-oncs all --masked-fuses fcws",
        ))
        .unwrap();
        assert_eq!(v["masked_oncs"].as_array().unwrap().len(), 5);
        assert_eq!(v["masked_fuses"], json!(["fcws"]));
        assert!(err("nvmf_create_transport -t RDMA --masked-oncs bogus").contains("bogus"));
        // -b and --iobuf-small-cache-size exclude each other, as in rpc.py.
        assert!(
            err("nvmf_create_transport -t RDMA -b 1 --iobuf-small-cache-size 2")
                .contains("cannot be used with")
        );
        // SRP's own options.
        let v: Value = serde_json::from_str(&req(
            "nvmf_create_transport -t SRP --max-req-size 8276 --no-immediate-data --use-srq",
        ))
        .unwrap();
        assert_eq!(v["max_req_size"], 8276);
        assert_eq!(v["immediate_data"], false);
        assert_eq!(v["use_srq"], true);
        assert!(err("nvmf_create_transport -u 8192").contains("--trtype"));
    }

    #[test]
    fn create_subsystem_matches_rpc_py() {
        assert_eq!(
            req(
                "nvmf_create_subsystem nqn.2016-06.io.spdk:cnode1 -a -s SPDK00000000000001 -d SPDK_Controller1"
            ),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","serial_number":"SPDK00000000000001","model_number":"SPDK_Controller1","allow_any_host":true,"ana_reporting":false,"passthrough":false,"enable_nssr":false}"#
        );
        let v: Value = serde_json::from_str(&req(
            "nvmf_create_subsystem nqn.2016-06.io.spdk:c2 -m 8 -i 5 -I 10 -r --admin-label abcd",
        ))
        .unwrap();
        assert_eq!(v["max_namespaces"], 8);
        assert_eq!(v["min_cntlid"], 5);
        assert_eq!(v["max_cntlid"], 10);
        assert_eq!(v["ana_reporting"], true);
        assert_eq!(v["admin_label"], "abcd");
        assert!(err("nvmf_create_subsystem").contains("<NQN>"));
    }

    #[test]
    fn listeners_match_rpc_py() {
        assert_eq!(
            req(
                "nvmf_subsystem_add_listener nqn.2016-06.io.spdk:cnode1 -t rdma -a 192.168.100.8 -s 4420"
            ),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","secure_channel":false,"listen_address":{"trtype":"rdma","traddr":"192.168.100.8","trsvcid":"4420"}}"#
        );
        assert_eq!(
            req(
                "nvmf_subsystem_add_listener nqn.2016-06.io.spdk:cnode1 -t rdma -a 192.168.100.8 -s 4420 -f ipv4 -n inaccessible"
            ),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","secure_channel":false,"ana_state":"inaccessible","listen_address":{"trtype":"rdma","traddr":"192.168.100.8","adrfam":"ipv4","trsvcid":"4420"}}"#
        );
        assert_eq!(
            req("nvmf_subsystem_remove_listener discovery -t rdma -a 10.0.0.1 -s 4420"),
            r#"{"nqn":"nqn.2014-08.org.nvmexpress.discovery","listen_address":{"trtype":"rdma","traddr":"10.0.0.1","trsvcid":"4420"}}"#
        );
        assert!(err("nvmf_subsystem_add_listener nqn.x -t rdma").contains("--traddr"));
        assert!(
            err("nvmf_subsystem_add_listener nqn.x -t rdma -a 1.2.3.4 -n shiny").contains("shiny")
        );
    }

    #[test]
    fn namespaces_and_hosts_match_rpc_py() {
        // rpc.py (SPDK 26.09, what the SPDK-client suite pins) has no --hide-metadata: like the
        // Python rtgt-rpc built from the same spec, it is sent only when given.
        assert_eq!(
            req("nvmf_subsystem_add_ns nqn.2016-06.io.spdk:cnode1 Malloc0"),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","namespace":{"bdev_name":"Malloc0","no_auto_visible":false}}"#
        );
        assert_eq!(
            req("nvmf_subsystem_add_ns nqn.2016-06.io.spdk:cnode1 Malloc0 -N"),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","namespace":{"bdev_name":"Malloc0","no_auto_visible":false,"hide_metadata":true}}"#
        );
        assert_eq!(
            req(
                "nvmf_subsystem_add_ns nqn.2016-06.io.spdk:cnode1 Malloc0 -n 5 -g 000102030405060708090A0B0C0D0E0F -e 0001020304050607 -u ceccf520-691e-4b46-9546-34af789907c5"
            ),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","namespace":{"bdev_name":"Malloc0","nsid":5,"nguid":"000102030405060708090A0B0C0D0E0F","eui64":"0001020304050607","uuid":"ceccf520-691e-4b46-9546-34af789907c5","no_auto_visible":false}}"#
        );
        assert_eq!(
            req(
                "nvmf_subsystem_add_host nqn.2016-06.io.spdk:cnode1 nqn.2014-08.org.nvmexpress:uuid:h1"
            ),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","host":"nqn.2014-08.org.nvmexpress:uuid:h1"}"#
        );
        assert_eq!(
            req("nvmf_subsystem_allow_any_host nqn.2016-06.io.spdk:cnode1 --allow-any-host"),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","allow_any_host":true}"#
        );
        assert_eq!(
            req("nvmf_subsystem_allow_any_host nqn.2016-06.io.spdk:cnode1 --no-allow-any-host"),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","allow_any_host":false}"#
        );
        assert!(
            err("nvmf_subsystem_allow_any_host nqn.2016-06.io.spdk:cnode1")
                .contains("--allow-any-host")
        );
        assert_eq!(
            req("nvmf_subsystem_remove_ns nqn.2016-06.io.spdk:cnode1 1"),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","nsid":1}"#
        );
        assert_eq!(
            req("nvmf_delete_subsystem nqn.2016-06.io.spdk:cnode1"),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1"}"#
        );
        assert_eq!(
            req("nvmf_subsystem_remove_host nqn.2016-06.io.spdk:cnode1 nqn.h -T 500"),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","host":"nqn.h","timeout_ms":500}"#
        );
        assert!(err("nvmf_subsystem_remove_ns nqn.x one").contains("invalid int"));
    }

    #[test]
    fn bdevs_match_rpc_py() {
        assert_eq!(
            req("bdev_malloc_create 64 512 -b Malloc0"),
            r#"{"num_blocks":131072,"block_size":512,"name":"Malloc0","md_interleave":false,"dif_is_head_of_md":false}"#
        );
        assert_eq!(
            req("bdev_null_create Null0 100 4096"),
            r#"{"num_blocks":25600,"block_size":4096,"name":"Null0","dif_is_head_of_md":false}"#
        );
        assert_eq!(
            req("bdev_aio_create /dev/sdb aio0 4096"),
            r#"{"filename":"/dev/sdb","name":"aio0","block_size":4096,"readonly":false,"fallocate":false,"nowait":false}"#
        );
        assert_eq!(
            req("bdev_aio_create /tmp/f aio1"),
            r#"{"filename":"/tmp/f","name":"aio1","readonly":false,"fallocate":false,"nowait":false}"#
        );
        // Fractions of a MiB for malloc (rpc.py: float), not for null (int).
        assert_eq!(
            req("bdev_malloc_create 0.5 4096"),
            r#"{"num_blocks":128,"block_size":4096,"md_interleave":false,"dif_is_head_of_md":false}"#
        );
        assert!(err("bdev_null_create N 0.5 512").contains("invalid int"));
        assert!(err("bdev_malloc_create 64 0").contains("block_size"));
        assert!(err("bdev_malloc_create -1 512").contains("greater than 0"));
        assert!(err("bdev_malloc_create 64 512 -t 7").contains("7"));
        assert_eq!(req("bdev_get_bdevs"), "<none>");
        assert_eq!(
            req("bdev_get_bdevs -b Malloc0 -t 100"),
            r#"{"name":"Malloc0","timeout":100}"#
        );
        assert_eq!(
            req("bdev_get_iostat --names a,b"),
            r#"{"per_channel":false,"names":["a","b"]}"#
        );
        assert_eq!(req("bdev_malloc_delete Malloc0"), r#"{"name":"Malloc0"}"#);
        // rpc.py's keyword order: base, name, uuid, then the four latencies.
        assert_eq!(
            req(
                "bdev_delay_create -b Malloc0 -d Delay0 -r 10 -t 20 -w 30 -n 40 -u 3f9c4a9b-1f0e-4a63-9d7e-2a4c5e6f7a8b"
            ),
            r#"{"base_bdev_name":"Malloc0","name":"Delay0","uuid":"3f9c4a9b-1f0e-4a63-9d7e-2a4c5e6f7a8b","avg_read_latency":10,"p99_read_latency":20,"avg_write_latency":30,"p99_write_latency":40}"#
        );
        assert_eq!(
            req(
                "bdev_delay_create --base-bdev-name M --name D --avg-read-latency 1 --nine-nine-read-latency 2 --avg-write-latency 3 --nine-nine-write-latency 4"
            ),
            r#"{"base_bdev_name":"M","name":"D","avg_read_latency":1,"p99_read_latency":2,"avg_write_latency":3,"p99_write_latency":4}"#
        );
        assert!(
            err("bdev_delay_create -b M -d D -r 1 -t 2 -w 3").contains("--nine-nine-write-latency")
        );
        assert_eq!(req("bdev_delay_delete Delay0"), r#"{"name":"Delay0"}"#);
        assert_eq!(
            req("bdev_delay_update_latency Delay0 p99_write 200000"),
            r#"{"delay_bdev_name":"Delay0","latency_type":"p99_write","latency_us":200000}"#
        );
        assert!(err("bdev_delay_update_latency Delay0 max_read 1").contains("max_read"));
    }

    #[test]
    fn parameterless_methods_send_no_params() {
        for m in [
            "nvmf_get_stats",
            "nvmf_get_transports",
            "nvmf_get_subsystems",
            "bdev_get_bdevs",
            "spdk_get_version",
            "framework_wait_init",
        ] {
            assert_eq!(req(m), "<none>", "{m}");
        }
        assert_eq!(
            req("rpc_get_methods"),
            r#"{"current":false,"include_aliases":false}"#
        );
        assert_eq!(
            req("framework_get_config nvmf"),
            r#"{"name":"nvmf","with_batches":false}"#
        );
        assert_eq!(
            req("nvmf_get_transports --trtype RDMA"),
            r#"{"trtype":"RDMA"}"#
        );
    }

    #[test]
    fn target_settings_and_rtgt_methods() {
        assert_eq!(
            req("nvmf_set_crdt -t1 1 -t2 2 --crdt3 3"),
            r#"{"crdt1":1,"crdt2":2,"crdt3":3}"#
        );
        assert_eq!(
            req("nvmf_set_max_subsystems -x 16"),
            r#"{"max_subsystems":16}"#
        );
        let v: Value = serde_json::from_str(&req(
            "nvmf_set_config -p identify_ctrlr --discovery-filters transport,address",
        ))
        .unwrap();
        assert_eq!(v["admin_cmd_passthru"], json!({"identify_ctrlr": true}));
        assert_eq!(v["discovery_filters"], json!(["transport", "address"]));
        assert!(
            err("nvmf_set_config -d match_any --discovery-filters transport")
                .contains("cannot be used with")
        );
        assert_eq!(
            req("nvmf_subsystem_pause nqn.2016-06.io.spdk:cnode1 -n 2"),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1","nsid":2}"#
        );
        assert_eq!(
            req("nvmf_subsystem_resume nqn.2016-06.io.spdk:cnode1"),
            r#"{"nqn":"nqn.2016-06.io.spdk:cnode1"}"#
        );
        assert_eq!(
            req("spdk_kill_instance SIGTERM"),
            r#"{"sig_name":"SIGTERM"}"#
        );
        assert_eq!(req("log_set_level DEBUG"), r#"{"level":"DEBUG"}"#);
        assert_eq!(
            req("bdev_nvme_set_options --policy active_active -t 5"),
            r#"{"timeout_us":5,"delay_cmd_submit":true,"disable_auto_failback":false,"generate_uuids":false,"nvme_error_stat":false,"io_path_stat":false,"allow_accel_sequence":false,"enable_flush":false,"multipath_opts":{"policy":"active_active"}}"#
        );
        assert_eq!(
            req("sock_impl_set_options -i posix --no-quickack -r 4096"),
            r#"{"impl_name":"posix","recv_buf_size":4096,"enable_quickack":false}"#
        );
        assert_eq!(
            req("bdev_nvme_set_hotplug --hotplug -r 1000"),
            r#"{"enable":true,"period_us":1000}"#
        );
        assert_eq!(req("keyring_linux_set_options"), r#"{"enable":false}"#);
    }

    #[test]
    fn raw_params_replace_or_extend() {
        let words = |s: &str| -> Vec<String> { s.split_whitespace().map(str::to_string).collect() };
        // Raw params alone: sent as they are, required arguments not needed.
        let i = invocation(
            "nvmf_create_subsystem",
            &[],
            Some(r#"{"nqn":"nqn.x","x":1}"#),
            "rtgt rpc",
        )
        .unwrap();
        assert_eq!(
            i,
            Invocation::Call {
                method: "nvmf_create_subsystem".into(),
                params: Some(json!({"nqn":"nqn.x","x":1}))
            }
        );
        // With arguments: merged over the built params.
        let i = invocation(
            "nvmf_create_subsystem",
            &words("nqn.2016-06.io.spdk:a -a"),
            Some(r#"{"max_namespaces":4,"allow_any_host":false}"#),
            "rtgt rpc",
        )
        .unwrap();
        let Invocation::Call {
            params: Some(p), ..
        } = i
        else {
            panic!()
        };
        assert_eq!(p["max_namespaces"], 4);
        assert_eq!(p["allow_any_host"], false);
        // Nested objects merge.
        let i = invocation(
            "nvmf_subsystem_add_ns",
            &words("nqn.x M0 -n 3"),
            Some(r#"{"namespace":{"uuid":"u"}}"#),
            "rtgt rpc",
        )
        .unwrap();
        let Invocation::Call {
            params: Some(p), ..
        } = i
        else {
            panic!()
        };
        assert_eq!(p["namespace"]["nsid"], 3);
        assert_eq!(p["namespace"]["uuid"], "u");
        assert_eq!(p["namespace"]["bdev_name"], "M0");
        // Unknown methods: raw params or none.
        let i = invocation("future_method", &[], Some("[1,2]"), "rtgt rpc").unwrap();
        assert_eq!(
            i,
            Invocation::Call {
                method: "future_method".into(),
                params: Some(json!([1, 2]))
            }
        );
        assert!(invocation("future_method", &words("-x 1"), None, "rtgt rpc").is_err());
        assert!(
            invocation("bdev_get_bdevs", &[], Some("{oops"), "rtgt rpc")
                .unwrap_err()
                .to_string()
                .contains("--params")
        );
        // Client-side commands take options, not --params.
        let i = invocation(
            "save_config",
            &words("-i 4 --with-batches"),
            None,
            "rtgt rpc",
        )
        .unwrap();
        assert_eq!(
            i,
            Invocation::Client {
                action: Action::SaveConfig,
                opts: json!({"indent": 4, "with_batches": true})
                    .as_object()
                    .unwrap()
                    .clone()
            }
        );
        assert!(invocation("save_config", &[], Some("{}"), "rtgt rpc").is_err());
    }

    #[test]
    fn every_method_builds_a_command_and_help() {
        for s in methods::all() {
            let mut c = method_command(s).no_binary_name(true);
            c.build();
            let help = c.render_long_help().to_string();
            for a in s.args {
                if let Some(l) = a.long() {
                    assert!(help.contains(&format!("--{l}")), "{}: --{l}", s.name);
                }
            }
        }
    }
}
