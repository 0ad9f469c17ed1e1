//! Running an [`Invocation`]: one call, or one of rpc.py's client-side configuration commands,
//! with the result printed as JSON and failures turned into one line that names what failed.

use std::io::{Read, Write};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::args::Invocation;
use crate::client::{Client, ClientError, Endpoint, request};
use crate::methods::Action;

/// How to reach the server.
#[derive(Debug, Clone)]
pub struct Conn {
    /// The server.
    pub endpoint: Endpoint,
    /// Deadline of each call.
    pub timeout: Duration,
    /// Extra connection attempts, 0.2 s apart.
    pub retries: u32,
}

impl Conn {
    /// A new connection.
    pub fn connect(&self) -> Result<Client, ClientError> {
        Client::connect(&self.endpoint, self.timeout, self.retries)
    }
}

/// A failed command.
#[derive(Debug)]
pub enum ExecError {
    /// A call failed (or the server could not be reached).
    Call {
        /// The method that failed.
        method: String,
        /// Why.
        error: ClientError,
    },
    /// Anything else (a configuration file that cannot be read, ...).
    Other(String),
}

impl ExecError {
    fn call(method: &str, error: ClientError) -> Self {
        ExecError::Call {
            method: method.to_string(),
            error,
        }
    }
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // One line: server messages may carry newlines.
        let text = match self {
            ExecError::Call {
                method,
                error: ClientError::Rpc { code, message },
            } => format!("{method} failed with code {code}: {message}"),
            ExecError::Call { method, error } => format!("{method}: {error}"),
            ExecError::Other(m) => m.clone(),
        };
        f.write_str(&text.split_whitespace().collect::<Vec<_>>().join(" "))
    }
}

impl std::error::Error for ExecError {}

/// Python's `json.dumps` without indent: one line, `", "` and `": "` between items.
struct PyCompact;

impl serde_json::ser::Formatter for PyCompact {
    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

/// JSON as rpc.py's `json.dump` writes it: with `indent` spaces, or on one line (Python's
/// separators) when `None`. ASCII output is byte-identical to rpc.py's.
pub fn to_json(v: &Value, indent: Option<usize>) -> String {
    match indent {
        None => {
            let mut out = Vec::new();
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PyCompact);
            match v.serialize(&mut ser) {
                Ok(()) => String::from_utf8(out).unwrap_or_default(),
                Err(_) => v.to_string(),
            }
        }
        Some(n) => {
            let pad = vec![b' '; n];
            let mut out = Vec::new();
            let fmt = serde_json::ser::PrettyFormatter::with_indent(&pad);
            let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
            match v.serialize(&mut ser) {
                Ok(()) => String::from_utf8(out).unwrap_or_default(),
                Err(_) => v.to_string(),
            }
        }
    }
}

/// What `--dry-run` prints: the request exactly as it would be sent (pretty-printed).
pub fn dry_run(inv: &Invocation) -> String {
    match inv {
        Invocation::Call { method, params } => {
            to_json(&request(1, method, params.as_ref()), Some(2))
        }
        Invocation::Client { action, opts } => {
            let first = match action {
                Action::SaveConfig => request(1, "framework_get_subsystems", None),
                Action::SaveSubsystemConfig => {
                    let mut p = Map::new();
                    p.insert("name".into(), opts.get("name").cloned().unwrap_or_default());
                    p.insert(
                        "with_batches".into(),
                        opts.get("with_batches")
                            .cloned()
                            .unwrap_or(Value::Bool(false)),
                    );
                    request(1, "framework_get_config", Some(&Value::Object(p)))
                }
                Action::LoadConfig | Action::LoadSubsystemConfig | Action::Call => {
                    let mut p = Map::new();
                    p.insert(
                        "include_aliases".into(),
                        opts.get("include_aliases")
                            .cloned()
                            .unwrap_or(Value::Bool(false)),
                    );
                    request(1, "rpc_get_methods", Some(&Value::Object(p)))
                }
            };
            format!(
                "{}\n(first request of a client-side command; later ones depend on the answers)",
                to_json(&first, Some(2))
            )
        }
    }
}

/// Runs `inv`, writing its output to `out`.
pub fn run(conn: &Conn, inv: &Invocation, out: &mut dyn Write) -> Result<(), ExecError> {
    let write = |out: &mut dyn Write, text: &str| -> Result<(), ExecError> {
        match writeln!(out, "{text}") {
            // A reader that stopped reading (`| head`) is not a failure of the call.
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(ExecError::Other(format!("cannot write output: {e}")))
            }
            _ => Ok(()),
        }
    };
    match inv {
        Invocation::Call { method, params } => {
            let mut c = conn.connect().map_err(|e| ExecError::call(method, e))?;
            let result = c
                .call(method, params.as_ref())
                .map_err(|e| ExecError::call(method, e))?;
            write(out, &to_json(&result, Some(2)))
        }
        Invocation::Client { action, opts } => {
            let mut c = conn
                .connect()
                .map_err(|e| ExecError::call(action_name(*action), e))?;
            match action {
                Action::SaveConfig => {
                    let cfg = save_config(
                        &mut c,
                        opts.get("subsystems").and_then(Value::as_str),
                        flag(opts, "with_batches"),
                    )?;
                    write(out, &to_json(&cfg, indent(opts)))
                }
                Action::SaveSubsystemConfig => {
                    let name = opts.get("name").and_then(Value::as_str).unwrap_or_default();
                    let cfg = subsystem_config(&mut c, name, flag(opts, "with_batches"))?;
                    write(out, &to_json(&cfg, indent(opts)))
                }
                Action::LoadConfig => {
                    let cfg = read_json(opts.get("json_conf").and_then(Value::as_str))?;
                    let skipped = load_config(&mut c, &cfg, flag(opts, "include_aliases"))?;
                    if skipped {
                        eprintln!(
                            "Some configs were skipped because the RPC state that can call them passed over."
                        );
                    }
                    Ok(())
                }
                Action::LoadSubsystemConfig => {
                    let cfg = read_json(opts.get("json_conf").and_then(Value::as_str))?;
                    if load_subsystem_config(&mut c, &cfg)? {
                        eprintln!(
                            "Some configs were skipped because they cannot be called in the current RPC state."
                        );
                    }
                    Ok(())
                }
                Action::Call => Ok(()),
            }
        }
    }
}

fn action_name(a: Action) -> &'static str {
    match a {
        Action::SaveConfig => "save_config",
        Action::LoadConfig => "load_config",
        Action::SaveSubsystemConfig => "save_subsystem_config",
        Action::LoadSubsystemConfig => "load_subsystem_config",
        Action::Call => "call",
    }
}

fn flag(opts: &Map<String, Value>, key: &str) -> bool {
    opts.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// rpc.py: indent 2 by default, compact below 0.
fn indent(opts: &Map<String, Value>) -> Option<usize> {
    match opts.get("indent").and_then(Value::as_i64) {
        None => Some(2),
        Some(n) if n < 0 => None,
        Some(n) => Some(usize::try_from(n).unwrap_or(2).min(64)),
    }
}

fn call(c: &mut Client, method: &str, params: Option<Value>) -> Result<Value, ExecError> {
    c.call(method, params.as_ref())
        .map_err(|e| ExecError::call(method, e))
}

fn subsystem_config(c: &mut Client, name: &str, with_batches: bool) -> Result<Value, ExecError> {
    let mut p = Map::new();
    p.insert("name".into(), Value::from(name));
    p.insert("with_batches".into(), Value::Bool(with_batches));
    let config = call(c, "framework_get_config", Some(Value::Object(p)))?;
    let mut o = Map::new();
    o.insert("subsystem".into(), Value::from(name));
    o.insert("config".into(), config);
    Ok(Value::Object(o))
}

/// rpc.py's `save_config`: every subsystem (or those named, with their dependencies) in the
/// order `framework_get_subsystems` lists them.
pub fn save_config(
    c: &mut Client,
    only: Option<&str>,
    with_batches: bool,
) -> Result<Value, ExecError> {
    let subs = call(c, "framework_get_subsystems", None)?;
    let list = subs.as_array().cloned().unwrap_or_default();
    let name = |e: &Value| e["subsystem"].as_str().unwrap_or_default().to_string();
    // Each subsystem with its transitive dependencies (dependencies are listed first).
    let mut deps: Vec<(String, Vec<String>)> = Vec::new();
    for e in &list {
        let mut set = vec![name(e)];
        for d in e["depends_on"].as_array().into_iter().flatten() {
            let d = d.as_str().unwrap_or_default();
            if let Some((_, dd)) = deps.iter().find(|(n, _)| n == d) {
                for x in dd {
                    if !set.contains(x) {
                        set.push(x.clone());
                    }
                }
            }
        }
        deps.push((name(e), set));
    }
    let wanted: Option<Vec<String>> = match only {
        None => None,
        Some(names) => {
            let mut w = Vec::new();
            for n in names.split(',') {
                let (_, d) = deps.iter().find(|(x, _)| x == n).ok_or_else(|| {
                    ExecError::Other(format!("save_config: no subsystem named '{n}'"))
                })?;
                w.extend(d.iter().cloned());
            }
            Some(w)
        }
    };
    let mut out = Vec::new();
    for e in &list {
        let n = name(e);
        if wanted.as_ref().is_none_or(|w| w.contains(&n)) {
            out.push(subsystem_config(c, &n, with_batches)?);
        }
    }
    let mut o = Map::new();
    o.insert("subsystems".into(), Value::Array(out));
    Ok(Value::Object(o))
}

/// Reads a configuration: a file, stdin (`None` or `-`), or JSON text (as rpc.py's
/// `json_load` does when the argument is not an existing path). `//` and `/* */` comments are
/// accepted, as `rtgt serve --json` accepts them.
fn read_json(source: Option<&str>) -> Result<Value, ExecError> {
    let text = match source {
        None | Some("-") => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| ExecError::Other(format!("cannot read stdin: {e}")))?;
            s
        }
        Some(p) if std::path::Path::new(p).exists() => std::fs::read_to_string(p)
            .map_err(|e| ExecError::Other(format!("cannot read {p}: {e}")))?,
        Some(text) => text.to_string(),
    };
    let clean = rpc::methods::load::strip_comments(&text);
    serde_json::from_str(&clean)
        .map_err(|e| ExecError::Other(format!("the configuration is not valid JSON: {e}")))
}

fn method_names(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m.as_str().map(str::to_string))
        .collect()
}

fn get_methods(c: &mut Client, current: bool, aliases: bool) -> Result<Vec<String>, ExecError> {
    let mut p = Map::new();
    if current {
        p.insert("current".into(), Value::Bool(true));
    }
    p.insert("include_aliases".into(), Value::Bool(aliases));
    Ok(method_names(&call(
        c,
        "rpc_get_methods",
        Some(Value::Object(p)),
    )?))
}

fn entry_method(e: &Value) -> Option<&str> {
    e.get("method").and_then(Value::as_str)
}

/// Checks that every call of an entry (a call or a batch) is known.
fn check_known(e: &Value, known: &[String]) -> Result<(), ExecError> {
    let calls: Vec<&Value> = match e {
        Value::Array(a) => a.iter().collect(),
        one => vec![one],
    };
    for c in calls {
        match entry_method(c) {
            Some(m) if known.iter().any(|k| k == m) => {}
            other => {
                return Err(ExecError::Other(format!(
                    "load_config: unknown method {} was included in the config file",
                    other.unwrap_or("(none)")
                )));
            }
        }
    }
    Ok(())
}

/// Calls an entry if every method in it is allowed now; whether it did.
fn apply_entry(c: &mut Client, e: &Value, allowed: &[String]) -> Result<bool, ExecError> {
    let allowed_now = |x: &Value| entry_method(x).is_some_and(|m| allowed.iter().any(|a| a == m));
    let params = |x: &Value| x.get("params").filter(|p| !p.is_null()).cloned();
    match e {
        Value::Array(batch) => {
            if !batch.iter().all(allowed_now) {
                return Ok(false);
            }
            let calls: Vec<(String, Option<Value>)> = batch
                .iter()
                .map(|x| (entry_method(x).unwrap_or_default().to_string(), params(x)))
                .collect();
            let results = c
                .call_batch(&calls)
                .map_err(|e| ExecError::call("batch", e))?;
            for ((method, _), r) in calls.iter().zip(results) {
                if let Err((code, message)) = r {
                    return Err(ExecError::call(method, ClientError::Rpc { code, message }));
                }
            }
            Ok(true)
        }
        one => {
            if !allowed_now(one) {
                return Ok(false);
            }
            let m = entry_method(one).unwrap_or_default();
            call(c, m, params(one))?;
            Ok(true)
        }
    }
}

/// rpc.py's `load_config`: check every method is known, then call what the current RPC state
/// allows, in file order, and `framework_start_init` when it is callable, until nothing is
/// left or nothing could be called. Returns whether entries were skipped.
pub fn load_config(c: &mut Client, cfg: &Value, aliases: bool) -> Result<bool, ExecError> {
    let mut sections: Vec<Vec<Value>> = cfg
        .get("subsystems")
        .and_then(Value::as_array)
        .ok_or_else(|| ExecError::Other("load_config: no 'subsystems' list".into()))?
        .iter()
        .filter_map(|s| s.get("config").and_then(Value::as_array).cloned())
        .filter(|c| !c.is_empty())
        .collect();
    let known = get_methods(c, false, aliases)?;
    if sections.is_empty() {
        if known.iter().any(|m| m == "framework_start_init")
            && get_methods(c, true, aliases)?
                .iter()
                .any(|m| m == "framework_start_init")
        {
            call(c, "framework_start_init", None)?;
        }
        return Ok(false);
    }
    for e in sections.iter().flatten() {
        check_known(e, &known)?;
    }
    while !sections.is_empty() {
        let allowed = get_methods(c, true, aliases)?;
        let mut progress = false;
        for section in &mut sections {
            let mut left = Vec::new();
            for e in section.drain(..) {
                if apply_entry(c, &e, &allowed)? {
                    progress = true;
                } else {
                    left.push(e);
                }
            }
            *section = left;
        }
        sections.retain(|s| !s.is_empty());
        if allowed.iter().any(|m| m == "framework_start_init") {
            call(c, "framework_start_init", None)?;
            progress = true;
        }
        if !progress {
            break;
        }
    }
    Ok(!sections.is_empty())
}

/// rpc.py's `load_subsystem_config`: one `{"subsystem", "config"}` object, one pass in the
/// current state. Returns whether entries were skipped.
pub fn load_subsystem_config(c: &mut Client, cfg: &Value) -> Result<bool, ExecError> {
    let entries = match cfg.get("config") {
        Some(Value::Array(a)) if !a.is_empty() => a.clone(),
        _ => return Ok(false),
    };
    let known = get_methods(c, false, false)?;
    for e in &entries {
        check_known(e, &known)?;
    }
    let allowed = get_methods(c, true, false)?;
    let mut skipped = false;
    for e in &entries {
        if !apply_entry(c, e, &allowed)? {
            skipped = true;
        }
    }
    Ok(skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_are_one_line_and_name_the_method() {
        let e = ExecError::call(
            "nvmf_create_subsystem",
            ClientError::Rpc {
                code: -32603,
                message: "Unable to create\nsubsystem x".into(),
            },
        );
        assert_eq!(
            e.to_string(),
            "nvmf_create_subsystem failed with code -32603: Unable to create subsystem x"
        );
        let e = ExecError::call("bdev_get_bdevs", ClientError::Timeout);
        assert_eq!(
            e.to_string(),
            "bdev_get_bdevs: timeout while waiting for the response"
        );
    }

    #[test]
    fn json_output_is_indented_like_rpc_py() {
        let v = json!({"a": [1, {"b": true}], "c": {}});
        assert_eq!(
            to_json(&v, Some(2)),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": true\n    }\n  ],\n  \"c\": {}\n}"
        );
        assert_eq!(to_json(&v, None), r#"{"a": [1, {"b": true}], "c": {}}"#);
        assert!(to_json(&v, Some(4)).contains("\n    \"a\""));
    }

    #[test]
    fn dry_run_shows_the_wire_request() {
        let inv = Invocation::Call {
            method: "bdev_get_bdevs".into(),
            params: None,
        };
        assert_eq!(
            dry_run(&inv),
            "{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"bdev_get_bdevs\",\n  \"id\": 1\n}"
        );
    }

    #[test]
    fn indent_follows_rpc_py() {
        let o = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(indent(&o(json!({}))), Some(2));
        assert_eq!(indent(&o(json!({"indent": -1}))), None);
        assert_eq!(indent(&o(json!({"indent": 0}))), Some(0));
    }
}
