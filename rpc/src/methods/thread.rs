//! `thread_get_stats`, `thread_get_pollers`, `thread_get_io_channels` and
//! `framework_get_scheduler`: SPDK's views of lightweight threads, over rtgt's reactors.
//!
//! Each reactor runs one poll group on a fixed core, shown as one lightweight thread named
//! `nvmf_tgt_poll_group_NNN` with id = reactor index + 1 (the numbering of
//! `framework_get_reactors` and of `bdev_get_iostat per_channel`). Times and periods are in
//! nanoseconds (`tick_rate` 10^9).

use serde_json::{Value, json};
use target_core::reactor::{ReactorInfo, format_cpumask};

use super::{TargetContext, add_sync};
use crate::params::no_params;
use crate::{Methods, Params, RegisterError, StateMask};

/// rtgt's tick: a nanosecond.
const TICK_RATE: u64 = 1_000_000_000;

pub(crate) fn register(m: &mut Methods<TargetContext>) -> Result<(), RegisterError> {
    add_sync(
        m,
        "thread_get_stats",
        StateMask::RUNTIME,
        |p: Params<'_>, ctx: &TargetContext| {
            no_params(&p, "'thread_get_stats' requires no arguments")?;
            Ok(threads(ctx, thread_stats))
        },
    )?;
    add_sync(
        m,
        "thread_get_pollers",
        StateMask::RUNTIME,
        |p: Params<'_>, ctx: &TargetContext| {
            no_params(&p, "'thread_get_pollers' requires no arguments")?;
            Ok(threads(ctx, thread_pollers))
        },
    )?;
    add_sync(
        m,
        "thread_get_io_channels",
        StateMask::RUNTIME,
        |p: Params<'_>, ctx: &TargetContext| {
            no_params(&p, "'thread_get_io_channels' requires no arguments")?;
            Ok(io_channels(ctx))
        },
    )?;
    add_sync(
        m,
        "framework_get_scheduler",
        StateMask::STARTUP | StateMask::RUNTIME,
        |p: Params<'_>, ctx: &TargetContext| {
            no_params(&p, "'rpc_get_scheduler' requires no arguments")?;
            Ok(scheduler(ctx))
        },
    )?;
    Ok(())
}

/// The lightweight thread name of reactor `index`.
pub(crate) fn thread_name(index: usize) -> String {
    format!("nvmf_tgt_poll_group_{index:03}")
}

fn threads(ctx: &TargetContext, f: fn(&ReactorInfo) -> Value) -> Value {
    let list: Vec<Value> = ctx.target().reactors().info().iter().map(f).collect();
    json!({"tick_rate": TICK_RATE, "threads": list})
}

fn thread_stats(r: &ReactorInfo) -> Value {
    let timed = r.pollers.iter().filter(|p| p.period_ns.is_some()).count();
    json!({
        "name": thread_name(r.index),
        "id": r.index + 1,
        "cpumask": format_cpumask(&[r.core.unwrap_or(r.index)]),
        "busy": r.busy_ns,
        "idle": r.idle_ns,
        "in_interrupt": r.in_interrupt,
        "active_pollers_count": r.pollers.len() - timed,
        "timed_pollers_count": timed,
        "paused_pollers_count": 0,
    })
}

fn thread_pollers(r: &ReactorInfo) -> Value {
    let poller = |p: &target_core::reactor::PollerInfo| {
        json!({
            "name": p.name,
            "id": p.id,
            // Read from outside the reactor: no poller is running at that moment.
            "state": "waiting",
            "run_count": p.run_count,
            "busy_count": p.busy_count,
            "period_ticks": p.period_ns.unwrap_or(0),
        })
    };
    let active: Vec<Value> = r
        .pollers
        .iter()
        .filter(|p| p.period_ns.is_none())
        .map(poller)
        .collect();
    let timed: Vec<Value> = r
        .pollers
        .iter()
        .filter(|p| p.period_ns.is_some())
        .map(poller)
        .collect();
    json!({
        "name": thread_name(r.index),
        "id": r.index + 1,
        "active_pollers": active,
        "timed_pollers": timed,
        "paused_pollers": [],
    })
}

/// Each thread's bdev channels: one entry per bdev with the number of its channels open on
/// the thread (SPDK's `ref`).
fn io_channels(ctx: &TargetContext) -> Value {
    let open = ctx.target().bdevs().open_channels();
    let list: Vec<Value> = ctx
        .target()
        .reactors()
        .info()
        .iter()
        .map(|r| {
            let id = r.index as u64 + 1;
            let mut chans: Vec<(String, usize)> = Vec::new();
            for (_, name) in open.iter().filter(|(t, _)| *t == id) {
                match chans.iter_mut().find(|(n, _)| n == name) {
                    Some((_, count)) => *count += 1,
                    None => chans.push((name.clone(), 1)),
                }
            }
            let chans: Vec<Value> = chans
                .into_iter()
                .map(|(name, count)| json!({"name": name, "ref": count}))
                .collect();
            json!({"name": thread_name(r.index), "io_channels": chans})
        })
        .collect();
    json!({"tick_rate": TICK_RATE, "threads": list})
}

/// rtgt's reactors never move threads: SPDK's `static` scheduler, without a period (rtgt
/// runs no scheduling pass; `framework_set_scheduler` accepts `static` only) and without a
/// governor (no frequency scaling).
fn scheduler(ctx: &TargetContext) -> Value {
    let first = ctx
        .target()
        .reactors()
        .info()
        .first()
        .map_or(0, |r| r.core.unwrap_or(r.index));
    json!({
        "scheduler_name": "static",
        "scheduler_period": 0,
        "isolated_core_mask": "",
        "scheduling_core": first,
    })
}
