//! `framework_get_subsystems`, `framework_get_config` and `framework_get_reactors`.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};
use target_core::reactor::format_cpumask;

use super::{TargetContext, add, add_sync, config};
use crate::params::{Decode, no_params};
use crate::{Methods, Params, RegisterError, RpcError, StateMask};

/// The subsystems rtgt reports, in SPDK's initialisation order (dependencies first), with
/// their dependencies. These are the subsystems a stock SPDK `nvmf_tgt` has that matter to
/// its configuration files; `save_config` dumps them in this order.
pub const SUBSYSTEMS: &[(&str, &[&str])] = &[
    ("keyring", &[]),
    ("iobuf", &[]),
    ("sock", &[]),
    ("vmd", &[]),
    ("accel", &["iobuf"]),
    ("bdev", &["accel", "keyring", "vmd", "sock", "iobuf"]),
    ("scheduler", &[]),
    ("nvmf", &["bdev", "keyring", "sock", "accel", "iobuf"]),
];

/// Whether `name` is one of [`SUBSYSTEMS`].
pub fn is_subsystem(name: &str) -> bool {
    SUBSYSTEMS.iter().any(|(n, _)| *n == name)
}

#[derive(Deserialize)]
struct GetConfig {
    name: String,
    #[serde(default)]
    with_batches: bool,
}

pub(crate) fn register(m: &mut Methods<TargetContext>) -> Result<(), RegisterError> {
    add_sync(
        m,
        "framework_get_subsystems",
        StateMask::RUNTIME,
        |p: Params<'_>, _: &TargetContext| {
            no_params(&p, "'framework_get_subsystems' requires no arguments")?;
            Ok(SUBSYSTEMS
                .iter()
                .map(|(name, deps)| json!({"subsystem": name, "depends_on": deps}))
                .collect::<Vec<_>>())
        },
    )?;

    add(
        m,
        "framework_get_config",
        StateMask::RUNTIME,
        Decode::Strict,
        |a: GetConfig, ctx: Arc<TargetContext>| async move {
            if !is_subsystem(&a.name) {
                return Err(RpcError::invalid_params(format!(
                    "Subsystem '{}' not found",
                    a.name
                )));
            }
            Ok(config::subsystem_config(&ctx, &a.name, a.with_batches))
        },
    )?;

    add_sync(
        m,
        "framework_get_reactors",
        StateMask::RUNTIME,
        |p: Params<'_>, ctx: &TargetContext| {
            no_params(&p, "`framework_get_reactors` requires no arguments")?;
            Ok(reactors(ctx))
        },
    )?;
    Ok(())
}

/// SPDK's `framework_get_reactors` shape over [`target_core::reactor::Reactors::info`]. Times
/// are in nanoseconds (`tick_rate` 10^9). Each reactor hosts one poll group, shown as its one
/// lightweight thread; rtgt adds `sleeps`, `messages` and `pollers`.
fn reactors(ctx: &TargetContext) -> Value {
    let list: Vec<Value> = ctx
        .target()
        .reactors()
        .info()
        .into_iter()
        .map(|r| {
            let lcore = r.core.unwrap_or(r.index);
            json!({
                "lcore": lcore,
                "busy": r.busy_ns,
                "idle": r.idle_ns,
                "in_interrupt": r.in_interrupt,
                "lw_threads": [{
                    "name": super::thread::thread_name(r.index),
                    "id": r.index + 1,
                    "cpumask": format_cpumask(&[lcore]),
                }],
                "sleeps": r.sleeps,
                "messages": r.messages,
                "pollers": r.pollers.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "tick_rate": 1_000_000_000u64,
        "pid": std::process::id(),
        "reactors": list,
    })
}
