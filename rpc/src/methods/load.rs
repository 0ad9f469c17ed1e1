//! Applying a saved configuration inside the target (`rtgt serve --json FILE`), as SPDK's
//! startup loader (lib/init/json_config.c) does.
//!
//! The file is `{"subsystems": [{"subsystem": NAME, "config": [CALL | [CALL, ...], ...] | null},
//! ...]}` where CALL is `{"method": M, "params": {...}}` (`params` optional); other top-level
//! keys are ignored and `//` and `/* */` comments are accepted. The caller runs [`apply`] twice:
//! once in the STARTUP state (methods allowed in STARTUP, in file order), then, after
//! initialisation, once in RUNTIME (RUNTIME-only methods in file order; methods allowed in both
//! states already ran). A method rtgt does not know stops the load unless its subsystem is one
//! rtgt does not have (an `nvmf_tgt` file may carry e.g. `nbd` entries), which is skipped with
//! a notice. The first failing call stops the load; the error names the subsystem, the method
//! and the reason.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::framework::is_subsystem;
use crate::{MethodTable, RpcError, RpcState, StateMask};

/// One configuration call.
#[derive(Debug, Clone)]
pub struct Call {
    /// The method.
    pub method: String,
    /// Its params, as JSON text (`None` when absent or null).
    pub params: Option<Box<RawValue>>,
}

/// An entry of a subsystem's `config` list.
#[derive(Debug, Clone)]
pub enum Entry {
    /// One call.
    Call(Call),
    /// A batch of calls, applied together (SPDK HEAD's `with_batches` form).
    Batch(Vec<Call>),
}

/// One subsystem's section.
#[derive(Debug, Clone)]
pub struct Section {
    /// The subsystem name.
    pub subsystem: String,
    /// Its calls, in file order.
    pub entries: Vec<Entry>,
}

/// A parsed configuration file.
#[derive(Debug, Clone, Default)]
pub struct ConfigFile {
    /// The sections, in file order.
    pub sections: Vec<Section>,
}

/// Why a configuration could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file is not a valid configuration.
    #[error("invalid configuration: {0}")]
    Syntax(String),
    /// A method rtgt does not have, in a subsystem it has.
    #[error("subsystem '{subsystem}': method '{method}' was not found")]
    UnknownMethod {
        /// The subsystem section.
        subsystem: String,
        /// The method.
        method: String,
    },
    /// A call failed.
    #[error("subsystem '{subsystem}': {method} failed: {} (code {})", error.message, error.code)]
    Call {
        /// The subsystem section.
        subsystem: String,
        /// The method.
        method: String,
        /// The error it returned.
        error: RpcError,
    },
}

#[derive(Deserialize)]
struct RawFile<'a> {
    #[serde(borrow)]
    subsystems: Vec<RawSection<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSection<'a> {
    subsystem: String,
    #[serde(borrow)]
    config: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCall<'a> {
    method: String,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

fn parse_call(raw: &RawValue) -> Result<Call, String> {
    let c: RawCall<'_> = serde_json::from_str(raw.get())
        .map_err(|e| format!("bad config entry {}: {e}", raw.get()))?;
    let params = c.params.filter(|p| p.get() != "null").map(|p| p.to_owned());
    Ok(Call {
        method: c.method,
        params,
    })
}

/// Removes `//` line comments and `/* */` block comments outside JSON strings.
pub fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let (mut i, mut in_str) = (0, false);
    while i < b.len() {
        let c = b[i];
        if in_str {
            out.push(c);
            if c == b'\\' && i + 1 < b.len() {
                out.push(b[i + 1]);
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        match (c, b.get(i + 1)) {
            (b'"', _) => {
                in_str = true;
                out.push(c);
                i += 1;
            }
            (b'/', Some(b'/')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
                out.push(b' ');
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    // Only ASCII bytes were removed, so the rest is still valid UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// Parses a configuration file (comments allowed, unknown top-level keys ignored).
pub fn parse(text: &str) -> Result<ConfigFile, LoadError> {
    let clean = strip_comments(text);
    let raw: RawFile<'_> =
        serde_json::from_str(&clean).map_err(|e| LoadError::Syntax(e.to_string()))?;
    let mut sections = Vec::with_capacity(raw.subsystems.len());
    for s in raw.subsystems {
        let mut entries = Vec::new();
        for e in s.config.unwrap_or_default() {
            let entry = if e.get().trim_start().starts_with('[') {
                let items: Vec<&RawValue> = serde_json::from_str(e.get())
                    .map_err(|err| LoadError::Syntax(err.to_string()))?;
                Entry::Batch(
                    items
                        .into_iter()
                        .map(parse_call)
                        .collect::<Result<_, _>>()
                        .map_err(LoadError::Syntax)?,
                )
            } else {
                Entry::Call(parse_call(e).map_err(LoadError::Syntax)?)
            };
            entries.push(entry);
        }
        sections.push(Section {
            subsystem: s.subsystem,
            entries,
        });
    }
    Ok(ConfigFile { sections })
}

/// What to do with a call in the current state.
enum Plan {
    Run,
    Skip,
}

fn plan(table: &MethodTable, section: &str, call: &Call, now: RpcState) -> Result<Plan, LoadError> {
    let Some(info) = table.methods().into_iter().find(|m| m.name == call.method) else {
        if is_subsystem(section) {
            return Err(LoadError::UnknownMethod {
                subsystem: section.to_string(),
                method: call.method.clone(),
            });
        }
        if now == RpcState::Startup {
            tracing::info!(
                "skipping method '{}': subsystem '{section}' does not exist in rtgt",
                call.method
            );
        }
        return Ok(Plan::Skip);
    };
    if !info.mask.allows(now) {
        return Ok(Plan::Skip);
    }
    // Methods allowed in both states ran in the STARTUP pass.
    if info.mask == StateMask::ANY && now == RpcState::Runtime {
        return Ok(Plan::Skip);
    }
    Ok(Plan::Run)
}

async fn run(table: &MethodTable, section: &str, call: &Call) -> Result<(), LoadError> {
    tracing::debug!(
        method = call.method,
        params = call.params.as_ref().map(|p| p.get()),
        "config"
    );
    table
        .call(&call.method, call.params.as_ref().map(|p| p.get()))
        .await
        .map(drop)
        .map_err(|error| LoadError::Call {
            subsystem: section.to_string(),
            method: call.method.clone(),
            error,
        })
}

/// Runs the calls of `cfg` that belong to the table's current state (see the module docs);
/// returns how many ran.
pub async fn apply(table: &MethodTable, cfg: &ConfigFile) -> Result<usize, LoadError> {
    let now = table.state().get();
    let mut ran = 0;
    for s in &cfg.sections {
        for e in &s.entries {
            match e {
                Entry::Call(c) => {
                    if let Plan::Run = plan(table, &s.subsystem, c, now)? {
                        run(table, &s.subsystem, c).await?;
                        ran += 1;
                    }
                }
                Entry::Batch(calls) => {
                    let mut all = true;
                    for c in calls {
                        all &= matches!(plan(table, &s.subsystem, c, now)?, Plan::Run);
                    }
                    if all {
                        for c in calls {
                            run(table, &s.subsystem, c).await?;
                            ran += 1;
                        }
                    }
                }
            }
        }
    }
    Ok(ran)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_are_stripped_outside_strings() {
        let t = "{ // line\n \"a\": \"x//y/*z*/\", /* block\n */ \"b\": \"q\\\"//\" }";
        let v: serde_json::Value = serde_json::from_str(&strip_comments(t)).unwrap();
        assert_eq!(v["a"], "x//y/*z*/");
        assert_eq!(v["b"], "q\"//");
    }

    #[test]
    fn parses_sections_batches_and_ignores_extra_keys() {
        let t = r#"{"extra": 1, "subsystems": [
            {"subsystem": "bdev", "config": [{"method": "bdev_wait_for_examine"}]},
            {"subsystem": "vmd", "config": null},
            {"subsystem": "nvmf", "config": [[{"method": "a", "params": {"x": 1}}], {"method": "b", "params": null}]}
        ]}"#;
        let c = parse(t).unwrap();
        assert_eq!(c.sections.len(), 3);
        assert!(c.sections[1].entries.is_empty());
        match &c.sections[2].entries[0] {
            Entry::Batch(v) => assert_eq!(v[0].params.as_ref().unwrap().get(), r#"{"x": 1}"#),
            Entry::Call(_) => panic!("expected a batch"),
        }
        match &c.sections[2].entries[1] {
            Entry::Call(c) => assert!(c.params.is_none()),
            Entry::Batch(_) => panic!("expected a call"),
        }
        assert!(
            parse(
                r#"{"subsystems": [{"subsystem": "x", "config": [{"method": "m", "bogus": 1}]}]}"#
            )
            .is_err()
        );
        assert!(parse("{").is_err());
        assert!(parse(r#"{"nosubsystems": []}"#).is_err());
    }
}
