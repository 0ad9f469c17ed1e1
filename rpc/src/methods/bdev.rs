//! `bdev_*`: the bdev layer's methods (`bdev_get_bdevs`, `bdev_get_iostat`,
//! `bdev_wait_for_examine`), and every method of every registered bdev module (malloc, null,
//! aio, delay, rbd, ...: [`target_core::bdev::module`]), collected into the table.
//!
//! As in SPDK, a parameter decoding failure is `-32603 spdk_json_decode_object failed`, and
//! storage failures are negative errno values (`-17` exists, `-19` no such device, `-22`
//! invalid) with a message naming the bdev. Deleting a bdev that backs namespaces first removes
//! those namespaces (pausing their I/O), as SPDK's hot-remove does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use target_core::bdev::module::{self as bdev_module, BdevMethod, BdevModuleOps, MethodCtx};
use target_core::bdev::{
    Bdev, BdevError, HIST_BUCKETS, HistKind, IoStatSnapshot, IoType, QosLimits, ResetMode,
    hist_bound_secs, spdk_hist,
};

use super::{TargetContext, add};
use crate::params::{Decode, DecodeFlavor};
use crate::{Methods, RegisterError, RpcError, RpcResult, StateMask};

#[derive(Deserialize)]
struct GetBdevs {
    name: Option<String>,
    #[serde(default)]
    timeout: u64,
}

#[derive(Deserialize)]
struct GetIostat {
    /// Older clients send one name.
    name: Option<String>,
    names: Option<Vec<String>>,
    #[serde(default)]
    per_channel: bool,
    reset_mode: Option<String>,
}

pub(crate) fn register(m: &mut Methods<TargetContext>) -> Result<(), RegisterError> {
    for (module, method) in bdev_module::methods() {
        register_module_method(m, module, method)?;
    }
    add(
        m,
        "bdev_get_bdevs",
        StateMask::RUNTIME,
        Decode::Bdev,
        get_bdevs,
    )?;
    add(
        m,
        "bdev_get_iostat",
        StateMask::RUNTIME,
        Decode::Bdev,
        get_iostat,
    )?;
    add(
        m,
        "bdev_set_qos_limit",
        StateMask::RUNTIME,
        Decode::Bdev,
        set_qos_limit,
    )?;
    add(
        m,
        "bdev_reset_iostat",
        StateMask::RUNTIME,
        Decode::Bdev,
        reset_iostat,
    )?;
    add(
        m,
        "bdev_get_latency_histogram",
        StateMask::RUNTIME,
        Decode::Bdev,
        get_latency_histogram,
    )?;
    add(
        m,
        "bdev_enable_histogram",
        StateMask::RUNTIME,
        Decode::Bdev,
        enable_histogram,
    )?;
    add(
        m,
        "bdev_get_histogram",
        StateMask::RUNTIME,
        Decode::Bdev,
        get_histogram,
    )?;
    add(
        m,
        "bdev_get_histogram_borders",
        StateMask::RUNTIME,
        Decode::Bdev,
        get_histogram_borders,
    )?;
    // rtgt's bdevs need no examination: creation completes before the RPC answers.
    super::add_sync(
        m,
        "bdev_wait_for_examine",
        StateMask::RUNTIME,
        |p: crate::Params<'_>, _: &TargetContext| {
            crate::params::no_params(&p, "bdev_wait_for_examine requires no parameters")?;
            Ok(true)
        },
    )?;
    Ok(())
}

/// Registers one method of a bdev module: its parameters are checked against its spec
/// (unknown keys, JSON types, required keys: `-32603 spdk_json_decode_object failed` as in
/// SPDK's bdev RPCs), then its handler runs.
fn register_module_method(
    m: &mut Methods<TargetContext>,
    module: &'static BdevModuleOps,
    method: &'static BdevMethod,
) -> Result<(), RegisterError> {
    let name = method.spec.name;
    m.register_async(
        name,
        StateMask::RUNTIME,
        move |p, ctx: Arc<TargetContext>| async move {
            let r = async {
                let params =
                    crate::request_check::checked_params(&p, &method.spec, DecodeFlavor::Internal)?;
                let call = MethodCtx::new(Arc::clone(ctx.target()), module);
                (method.run)(call, Value::Object(params))
                    .await
                    .map_err(|e| RpcError::new(e.code, e.message))
            };
            r.await.inspect_err(|e| super::log_failure(name, e))
        },
    )?;
    Ok(())
}

/// The SPDK I/O types and whether `bdev` supports each, in SPDK's order.
fn supported_io_types(bdev: &dyn Bdev) -> Value {
    let s = |t| Value::Bool(bdev.supports(t));
    json!({
        "read": s(IoType::Read),
        "write": s(IoType::Write),
        "unmap": s(IoType::Unmap),
        "flush": s(IoType::Flush),
        "reset": true,
        "nvme_admin": false,
        "nvme_io": false,
        "nvme_io_md": false,
        "write_zeroes": s(IoType::WriteZeroes),
        "zcopy": false,
        "get_zone_info": false,
        "zone_management": false,
        "zone_append": false,
        "compare": s(IoType::Compare),
        "compare_and_write": false,
        "abort": false,
        "seek_hole": false,
        "seek_data": false,
        "copy": false,
        "nvme_iov_md": false,
        "nvme_nssr": false,
        "write_uncorrectable": false,
    })
}

/// One `bdev_get_bdevs` entry in SPDK's shape.
pub(crate) fn bdev_info(ctx: &TargetContext, bdev: &Arc<dyn Bdev>) -> Value {
    let mut v = json!({
        "name": bdev.name(),
        "aliases": [],
        "product_name": bdev.product_name(),
        "block_size": bdev.block_size(),
        "num_blocks": bdev.num_blocks(),
        "preferred_write_alignment": 0,
        "preferred_write_granularity": 0,
        "optimal_write_size": 0,
        "preferred_unmap_alignment": 0,
        "preferred_unmap_granularity": 0,
        "uuid": bdev.uuid().to_string(),
        "assigned_rate_limits": qos_json(&ctx.target().bdevs().qos(bdev.name()).unwrap_or_default()),
        "claimed": false,
    });
    let claim = ctx.target().bdevs().claim_of(bdev.name());
    if let Some(obj) = v.as_object_mut() {
        if let Some(c) = &claim {
            obj.insert("claimed".into(), Value::Bool(true));
            obj.insert("claim_type".into(), json!("exclusive_write"));
            obj.insert(
                "claimed_by".into(),
                json!({"module": c.module, "holder": c.holder}),
            );
        }
        obj.insert("zoned".into(), Value::Bool(false));
        obj.insert(
            "supported_io_types".into(),
            supported_io_types(bdev.as_ref()),
        );
        obj.insert(
            "physical_block_size".into(),
            json!(bdev.physical_block_size()),
        );
        obj.insert("write_cache".into(), Value::Bool(bdev.write_cache()));
        obj.insert("driver_specific".into(), bdev.driver_specific());
    }
    v
}

async fn get_bdevs(a: GetBdevs, ctx: Arc<TargetContext>) -> RpcResult<Vec<Value>> {
    let bdevs = ctx.target().bdevs();
    let Some(name) = a.name else {
        return Ok(bdevs.list().iter().map(|b| bdev_info(&ctx, b)).collect());
    };
    let deadline = Instant::now() + Duration::from_millis(a.timeout);
    loop {
        if let Some(b) = bdevs.get(&name) {
            return Ok(vec![bdev_info(&ctx, &b)]);
        }
        if a.timeout == 0 {
            return Err(RpcError::errno(
                libc::ENODEV,
                format!("bdev '{name}' does not exist"),
            ));
        }
        if Instant::now() >= deadline {
            return Err(RpcError::errno(
                libc::ETIMEDOUT,
                format!("bdev '{name}' did not appear within {} ms", a.timeout),
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// SPDK's `reset_mode` / `mode` values; `none` is no reset.
fn reset_mode(mode: Option<&str>, none_ok: bool) -> RpcResult<Option<ResetMode>> {
    match mode {
        None => Ok(None),
        Some("none") if none_ok => Ok(None),
        Some("all") => Ok(Some(ResetMode::All)),
        Some("maxmin") => Ok(Some(ResetMode::MaxMin)),
        Some(other) => Err(RpcError::invalid_params(format!(
            "Invalid reset mode '{}' (all, maxmin{})",
            other.escape_default(),
            if none_ok { ", none" } else { "" }
        ))),
    }
}

/// One bdev's (or one channel's) statistics in SPDK's field names; ticks are nanoseconds.
fn iostat_json(s: &IoStatSnapshot) -> serde_json::Map<String, Value> {
    let v = json!({
        "bytes_read": s.bytes_read,
        "num_read_ops": s.num_read_ops,
        "bytes_written": s.bytes_written,
        "num_write_ops": s.num_write_ops,
        "bytes_unmapped": s.bytes_unmapped,
        "num_unmap_ops": s.num_unmap_ops,
        "bytes_copied": 0,
        "num_copy_ops": 0,
        "read_latency_ticks": s.read_latency_ns,
        "max_read_latency_ticks": s.max_read_latency_ns,
        "min_read_latency_ticks": s.min_read_latency_ns,
        "write_latency_ticks": s.write_latency_ns,
        "max_write_latency_ticks": s.max_write_latency_ns,
        "min_write_latency_ticks": s.min_write_latency_ns,
        "unmap_latency_ticks": s.unmap_latency_ns,
        "max_unmap_latency_ticks": s.max_unmap_latency_ns,
        "min_unmap_latency_ticks": s.min_unmap_latency_ns,
        "copy_latency_ticks": 0,
        "max_copy_latency_ticks": 0,
        "min_copy_latency_ticks": 0,
        "num_flush_ops": s.num_flush_ops,
        "num_write_zeroes_ops": s.num_write_zeroes_ops,
        "num_compare_ops": s.num_compare_ops,
        "num_errors": s.num_errors,
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("a JSON object literal"),
    }
}

fn no_bdev(name: &str) -> RpcError {
    RpcError::errno(libc::ENODEV, format!("bdev '{name}' does not exist"))
}

async fn get_iostat(a: GetIostat, ctx: Arc<TargetContext>) -> RpcResult<Value> {
    let reset = reset_mode(a.reset_mode.as_deref(), true)?;
    let bdevs = ctx.target().bdevs();
    let head = || {
        let mut m = serde_json::Map::new();
        m.insert("tick_rate".into(), json!(1_000_000_000u64));
        m.insert("ticks".into(), json!(monotonic_ns()));
        m
    };
    if a.per_channel {
        let name = match (a.names, a.name) {
            (Some(n), _) if n.len() == 1 => n.into_iter().next(),
            (None, Some(n)) => Some(n),
            _ => None,
        }
        .ok_or_else(|| {
            RpcError::invalid_params("Bdev name is required for per channel IO statistics")
        })?;
        let chans = bdevs
            .iostat_per_channel(&name)
            .ok_or_else(|| no_bdev(&name))?;
        let channels: Vec<Value> = chans
            .iter()
            .map(|(thread, s)| {
                let mut m = serde_json::Map::new();
                m.insert("thread_id".into(), json!(thread));
                m.extend(iostat_json(s));
                Value::Object(m)
            })
            .collect();
        if let Some(mode) = reset {
            bdevs
                .reset_iostat(Some(&name), mode)
                .map_err(|_| no_bdev(&name))?;
        }
        let mut out = head();
        out.insert("name".into(), json!(name));
        out.insert("channels".into(), Value::Array(channels));
        return Ok(Value::Object(out));
    }
    let names: Vec<String> = match (a.names, a.name) {
        (Some(n), _) => n,
        (None, Some(n)) => vec![n],
        (None, None) => bdevs.names(),
    };
    let mut list = Vec::with_capacity(names.len());
    for name in &names {
        let s = bdevs.iostat(name).ok_or_else(|| no_bdev(name))?;
        let mut m = serde_json::Map::new();
        m.insert("name".into(), json!(name));
        m.extend(iostat_json(&s));
        list.push(Value::Object(m));
    }
    if let Some(mode) = reset {
        for name in &names {
            bdevs
                .reset_iostat(Some(name), mode)
                .map_err(|_| no_bdev(name))?;
        }
    }
    let mut out = head();
    out.insert("bdevs".into(), Value::Array(list));
    Ok(Value::Object(out))
}

/// `assigned_rate_limits` of `bdev_get_bdevs`.
fn qos_json(l: &QosLimits) -> Value {
    json!({
        "rw_ios_per_sec": l.rw_ios_per_sec,
        "rw_mbytes_per_sec": l.rw_mbytes_per_sec,
        "r_mbytes_per_sec": l.r_mbytes_per_sec,
        "w_mbytes_per_sec": l.w_mbytes_per_sec,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetQos {
    name: String,
    rw_ios_per_sec: Option<u64>,
    rw_mbytes_per_sec: Option<u64>,
    r_mbytes_per_sec: Option<u64>,
    w_mbytes_per_sec: Option<u64>,
}

/// `bdev_set_qos_limit`: each limit given replaces the current one (0 removes it); the others
/// stay. At least one must be given (SPDK's rule).
async fn set_qos_limit(a: SetQos, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    let bdevs = ctx.target().bdevs();
    let cur = bdevs.qos(&a.name).ok_or_else(|| no_bdev(&a.name))?;
    if a.rw_ios_per_sec.is_none()
        && a.rw_mbytes_per_sec.is_none()
        && a.r_mbytes_per_sec.is_none()
        && a.w_mbytes_per_sec.is_none()
    {
        return Err(RpcError::invalid_params(
            "Must specify at least one rate limit (rw_ios_per_sec, rw_mbytes_per_sec, r_mbytes_per_sec, w_mbytes_per_sec)",
        ));
    }
    let limits = QosLimits {
        rw_ios_per_sec: a.rw_ios_per_sec.unwrap_or(cur.rw_ios_per_sec),
        rw_mbytes_per_sec: a.rw_mbytes_per_sec.unwrap_or(cur.rw_mbytes_per_sec),
        r_mbytes_per_sec: a.r_mbytes_per_sec.unwrap_or(cur.r_mbytes_per_sec),
        w_mbytes_per_sec: a.w_mbytes_per_sec.unwrap_or(cur.w_mbytes_per_sec),
    };
    bdevs.set_qos(&a.name, limits).map_err(|e| match e {
        target_core::bdev::BdevError::NotFound(n) => no_bdev(&n),
        other => RpcError::errno(libc::EINVAL, other.to_string()),
    })?;
    Ok(true)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResetIostat {
    name: Option<String>,
    mode: Option<String>,
}

async fn reset_iostat(a: ResetIostat, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    let mode = reset_mode(a.mode.as_deref(), false)?.unwrap_or(ResetMode::All);
    ctx.target()
        .bdevs()
        .reset_iostat(a.name.as_deref(), mode)
        .map_err(|_| no_bdev(a.name.as_deref().unwrap_or("")))?;
    Ok(true)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GetLatencyHistogram {
    name: Option<String>,
}

/// rtgt's `bdev_get_latency_histogram`: the latency histograms the metrics endpoint exports
/// (read, write, flush; non-cumulative counts in powers-of-two microsecond buckets, never
/// reset), so that a client such as `rtgt top` can compute percentiles over an interval from
/// two answers.
async fn get_latency_histogram(
    a: GetLatencyHistogram,
    ctx: Arc<TargetContext>,
) -> RpcResult<Value> {
    let bdevs = ctx.target().bdevs();
    let names = match a.name {
        Some(n) => vec![n],
        None => bdevs.names(),
    };
    let mut list = Vec::with_capacity(names.len());
    for name in &names {
        let mut m = serde_json::Map::new();
        m.insert("name".into(), json!(name));
        for kind in HistKind::ALL {
            let h = bdevs.histogram(name, kind).ok_or_else(|| no_bdev(name))?;
            m.insert(
                kind.name().into(),
                json!({"buckets": h.buckets, "sum_ns": h.sum_ns}),
            );
        }
        list.push(Value::Object(m));
    }
    let bounds: Vec<u64> = (0..HIST_BUCKETS)
        .filter_map(hist_bound_secs)
        .map(|s| (s * 1e6).round() as u64)
        .collect();
    Ok(json!({"bucket_upper_bounds_us": bounds, "bdevs": list}))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnableHistogram {
    name: String,
    enable: bool,
    opc: Option<String>,
    granularity: Option<u32>,
    min_nsec: Option<u64>,
    max_nsec: Option<u64>,
}

/// `bdev_enable_histogram`: SPDK's per-bdev latency histogram, on (counts restart) or off.
async fn enable_histogram(a: EnableHistogram, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    let bdevs = ctx.target().bdevs();
    bdevs
        .histogram_config(&a.name)
        .ok_or_else(|| no_bdev(&a.name))?;
    let config = if a.enable {
        let io_type = match a.opc.as_deref() {
            None => None,
            Some(o) => Some(spdk_hist::io_type_by_name(o).ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "Invalid Io type '{o}': rtgt's bdevs have read, write, flush, unmap, write_zeroes and compare"
                ))
            })?),
        };
        let d = spdk_hist::HistogramConfig::default();
        Some(spdk_hist::HistogramConfig {
            granularity: a.granularity.unwrap_or(d.granularity),
            min_ns: a.min_nsec.unwrap_or(d.min_ns),
            max_ns: a.max_nsec.unwrap_or(d.max_ns),
            io_type,
        })
    } else {
        None
    };
    bdevs.set_histogram(&a.name, config).map_err(|e| match e {
        BdevError::NotFound(n) => no_bdev(&n),
        other => RpcError::invalid_params(other.to_string()),
    })?;
    Ok(true)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GetHistogram {
    name: String,
}

fn spdk_histogram(
    ctx: &TargetContext,
    name: &str,
) -> RpcResult<(spdk_hist::HistogramConfig, Vec<u64>)> {
    ctx.target()
        .bdevs()
        .spdk_histogram(name)
        .map_err(|e| match e {
            BdevError::NotFound(n) => no_bdev(&n),
            // SPDK: -EFAULT from a channel without a histogram.
            other => RpcError::errno(libc::EFAULT, other.to_string()),
        })
}

/// `bdev_get_histogram`: the buckets in SPDK's layout, base64; rtgt's tick is a nanosecond.
async fn get_histogram(a: GetHistogram, ctx: Arc<TargetContext>) -> RpcResult<Value> {
    let (cfg, buckets) = spdk_histogram(&ctx, &a.name)?;
    Ok(json!({
        "histogram": spdk_hist::encode(&buckets),
        "granularity": cfg.granularity,
        "min_range": cfg.min_range(),
        "max_range": cfg.max_range(),
        "tsc_rate": 1_000_000_000u64,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GetHistogramBorders {
    name: String,
    borders: Vec<u64>,
}

/// `bdev_get_histogram_borders`: the count up to each border (nanoseconds), then the total.
async fn get_histogram_borders(
    a: GetHistogramBorders,
    ctx: Arc<TargetContext>,
) -> RpcResult<Value> {
    if a.borders.is_empty() || a.borders.windows(2).any(|w| w[0] >= w[1]) {
        return Err(RpcError::invalid_params(
            "borders must be a non-empty, strictly ascending array",
        ));
    }
    let (cfg, buckets) = spdk_histogram(&ctx, &a.name)?;
    Ok(json!({"borders_count": spdk_hist::borders_count(&cfg, &buckets, &a.borders)}))
}

/// `bdev_enable_histogram` as save_config writes it (SPDK writes `name`, `enable`, `opc`;
/// rtgt adds the range and granularity when they differ from the defaults, so that a restore
/// gives the same histogram).
fn histogram_config_entry(name: &str, c: &spdk_hist::HistogramConfig) -> Value {
    let d = spdk_hist::HistogramConfig::default();
    let mut p = serde_json::Map::new();
    p.insert("name".into(), json!(name));
    p.insert("enable".into(), json!(true));
    if let Some(t) = c.io_type {
        p.insert("opc".into(), json!(spdk_hist::io_type_name(t)));
    }
    if c.granularity != d.granularity {
        p.insert("granularity".into(), json!(c.granularity));
    }
    if c.min_ns != d.min_ns {
        p.insert("min_nsec".into(), json!(c.min_ns));
    }
    if c.max_ns != d.max_ns {
        p.insert("max_nsec".into(), json!(c.max_ns));
    }
    json!({"method": "bdev_enable_histogram", "params": p})
}

/// Nanoseconds since the first call (the `ticks` of `bdev_get_iostat`).
fn monotonic_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The `bdev` subsystem's configuration: what each bdev module writes for itself (the RBD
/// module's cluster registrations), one create call per bdev in creation order, and
/// `bdev_wait_for_examine` last.
pub(crate) fn bdev_config(ctx: &TargetContext) -> Vec<Value> {
    let mut out = bdev_module::config_entries(ctx.target());
    let bdevs = ctx.target().bdevs();
    for b in bdevs.list() {
        out.push(b.config());
        if let Some(l) = bdevs.qos(b.name()).filter(QosLimits::any) {
            let mut params = serde_json::Map::new();
            params.insert("name".into(), json!(b.name()));
            if let Value::Object(m) = qos_json(&l) {
                params.extend(m.into_iter().filter(|(_, v)| *v != json!(0)));
            }
            out.push(json!({"method": "bdev_set_qos_limit", "params": params}));
        }
        if let Some(Some(c)) = bdevs.histogram_config(b.name()) {
            out.push(histogram_config_entry(b.name(), &c));
        }
    }
    out.push(json!({"method": "bdev_wait_for_examine"}));
    out
}
