//! `bdev_*`: malloc, null and aio create/delete, the delay virtual bdev (create, delete,
//! `bdev_delay_update_latency`), `bdev_get_bdevs`, `bdev_get_iostat`, `bdev_wait_for_examine`.
//!
//! As in SPDK, a parameter decoding failure is `-32603 spdk_json_decode_object failed`, and
//! storage failures are negative errno values (`-17` exists, `-19` no such device, `-22`
//! invalid) with a message naming the bdev. Deleting a bdev that backs namespaces first removes
//! those namespaces (pausing their I/O), as SPDK's hot-remove does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};
use target_core::bdev::{
    AioBdev, AioParams, Bdev, BdevError, DELAY_PRODUCT_NAME, DelayBdev, DelayLatency, DelayParams,
    IoType, MallocBdev, MallocParams, NullBdev, NullParams,
};

use super::{Rtgt, add, not_supported, parse_uuid};
use crate::params::Decode;
use crate::{Methods, RegisterError, RpcError, RpcResult, StateMask};

fn bdev_err(e: BdevError) -> RpcError {
    RpcError::errno(e.errno(), e.to_string())
}

fn einval(msg: impl Into<String>) -> RpcError {
    RpcError::errno(libc::EINVAL, msg)
}

fn uuid_arg(u: &Option<String>) -> RpcResult<Option<uuid::Uuid>> {
    match u {
        None => Ok(None),
        Some(s) => parse_uuid(s).map(Some).ok_or_else(|| {
            tracing::warn!("invalid UUID '{s}'");
            RpcError::internal("spdk_json_decode_object failed")
        }),
    }
}

/// Metadata and protection information: rtgt's bdevs have neither, so every metadata option
/// other than its default is refused (`dif_is_head_of_md` and `md_interleave` only describe a
/// layout that does not exist).
fn no_metadata(
    md_size: u32,
    dif_type: i32,
    dif_pi_format: u32,
    dif_is_head_of_md: bool,
    md_interleave: bool,
) -> RpcResult<()> {
    let why = "rtgt's bdevs have no metadata or protection information";
    for (name, v) in [
        ("md_size", u64::from(md_size)),
        ("dif_type", dif_type.unsigned_abs().into()),
        ("dif_pi_format", dif_pi_format.into()),
    ] {
        if v != 0 {
            return Err(not_supported(format_args!("{name} {v}"), why));
        }
    }
    for (name, on) in [
        ("dif_is_head_of_md", dif_is_head_of_md),
        ("md_interleave", md_interleave),
    ] {
        if on {
            return Err(not_supported(format_args!("{name} true"), why));
        }
    }
    Ok(())
}

#[derive(Deserialize)]
struct MallocCreate {
    num_blocks: u64,
    block_size: u32,
    name: Option<String>,
    uuid: Option<String>,
    #[serde(default)]
    physical_block_size: u32,
    #[serde(default)]
    optimal_io_boundary: u32,
    #[serde(default)]
    md_size: u32,
    #[serde(default)]
    md_interleave: bool,
    #[serde(default)]
    dif_type: i32,
    #[serde(default)]
    dif_is_head_of_md: bool,
    #[serde(default)]
    dif_pi_format: u32,
    #[serde(default = "no_numa")]
    numa_id: i32,
}

fn no_numa() -> i32 {
    -1
}

#[derive(Deserialize)]
struct NullCreate {
    name: String,
    num_blocks: u64,
    block_size: u32,
    uuid: Option<String>,
    #[serde(default)]
    physical_block_size: u32,
    #[serde(default)]
    md_size: u32,
    #[serde(default)]
    dif_type: i32,
    #[serde(default)]
    dif_is_head_of_md: bool,
    #[serde(default)]
    dif_pi_format: u32,
    #[serde(default)]
    preferred_write_granularity: u32,
    #[serde(default)]
    preferred_write_alignment: u32,
    #[serde(default)]
    optimal_write_size: u32,
    #[serde(default)]
    preferred_unmap_granularity: u32,
    #[serde(default)]
    preferred_unmap_alignment: u32,
}

#[derive(Deserialize)]
struct AioCreate {
    name: String,
    filename: String,
    block_size: Option<u32>,
    #[serde(default)]
    readonly: bool,
    #[serde(default)]
    fallocate: bool,
    uuid: Option<String>,
    #[serde(default)]
    nowait: bool,
}

#[derive(Deserialize)]
struct DelayCreate {
    base_bdev_name: String,
    name: String,
    avg_read_latency: u64,
    p99_read_latency: u64,
    avg_write_latency: u64,
    p99_write_latency: u64,
    uuid: Option<String>,
}

#[derive(Deserialize)]
struct DelayUpdateLatency {
    delay_bdev_name: String,
    latency_type: String,
    latency_us: u64,
}

#[derive(Deserialize)]
struct Name {
    name: String,
}

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

pub(crate) fn register(m: &mut Methods<Rtgt>) -> Result<(), RegisterError> {
    add(
        m,
        "bdev_malloc_create",
        StateMask::RUNTIME,
        Decode::Bdev,
        malloc_create,
    )?;
    add(
        m,
        "bdev_malloc_delete",
        StateMask::RUNTIME,
        Decode::Bdev,
        |a: Name, ctx| delete(ctx, a.name, "Malloc disk"),
    )?;
    add(
        m,
        "bdev_null_create",
        StateMask::RUNTIME,
        Decode::Bdev,
        null_create,
    )?;
    add(
        m,
        "bdev_null_delete",
        StateMask::RUNTIME,
        Decode::Bdev,
        |a: Name, ctx| delete(ctx, a.name, "Null disk"),
    )?;
    add(
        m,
        "bdev_aio_create",
        StateMask::RUNTIME,
        Decode::Bdev,
        aio_create,
    )?;
    add(
        m,
        "bdev_aio_delete",
        StateMask::RUNTIME,
        Decode::Bdev,
        |a: Name, ctx| delete(ctx, a.name, "AIO disk"),
    )?;
    add(
        m,
        "bdev_delay_create",
        StateMask::RUNTIME,
        Decode::Bdev,
        delay_create,
    )?;
    add(
        m,
        "bdev_delay_delete",
        StateMask::RUNTIME,
        Decode::Bdev,
        |a: Name, ctx| delete(ctx, a.name, DELAY_PRODUCT_NAME),
    )?;
    add(
        m,
        "bdev_delay_update_latency",
        StateMask::RUNTIME,
        Decode::Bdev,
        delay_update_latency,
    )?;
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
    // rtgt's bdevs need no examination: creation completes before the RPC answers.
    super::add_sync(
        m,
        "bdev_wait_for_examine",
        StateMask::RUNTIME,
        |p: crate::Params<'_>, _: &Rtgt| {
            crate::params::no_params(&p, "bdev_wait_for_examine requires no parameters")?;
            Ok(true)
        },
    )?;
    Ok(())
}

async fn malloc_create(a: MallocCreate, ctx: Arc<Rtgt>) -> RpcResult<String> {
    no_metadata(
        a.md_size,
        a.dif_type,
        a.dif_pi_format,
        a.dif_is_head_of_md,
        a.md_interleave,
    )?;
    if a.numa_id != -1 {
        return Err(not_supported(
            format_args!("numa_id {}", a.numa_id),
            "rtgt does not place malloc memory on a NUMA node; only -1 (any) is accepted",
        ));
    }
    if a.optimal_io_boundary != 0 {
        return Err(not_supported(
            format_args!("optimal_io_boundary {}", a.optimal_io_boundary),
            "rtgt neither splits I/O at a boundary nor reports one (NOIOB); only 0 is accepted",
        ));
    }
    if a.block_size == 0 || !a.block_size.is_multiple_of(512) {
        return Err(einval(format!(
            "block_size {} is not a multiple of 512",
            a.block_size
        )));
    }
    let uuid = uuid_arg(&a.uuid)?;
    let bdevs = ctx.target().bdevs();
    let name = a.name.unwrap_or_else(|| bdevs.next_malloc_name());
    if bdevs.get(&name).is_some() {
        return Err(bdev_err(BdevError::Exists(name)));
    }
    let bdev = MallocBdev::create(MallocParams {
        name: name.clone(),
        num_blocks: a.num_blocks,
        block_size: a.block_size,
        physical_block_size: a.physical_block_size,
        uuid,
        optimal_io_boundary: a.optimal_io_boundary,
    })
    .map_err(bdev_err)?;
    bdevs.register(bdev).map_err(bdev_err)?;
    Ok(name)
}

async fn null_create(a: NullCreate, ctx: Arc<Rtgt>) -> RpcResult<String> {
    no_metadata(
        a.md_size,
        a.dif_type,
        a.dif_pi_format,
        a.dif_is_head_of_md,
        false,
    )?;
    let hints = [
        ("preferred_write_granularity", a.preferred_write_granularity),
        ("preferred_write_alignment", a.preferred_write_alignment),
        ("optimal_write_size", a.optimal_write_size),
        ("preferred_unmap_granularity", a.preferred_unmap_granularity),
        ("preferred_unmap_alignment", a.preferred_unmap_alignment),
    ];
    if let Some((k, v)) = hints.iter().find(|(_, v)| *v != 0) {
        return Err(not_supported(
            format_args!("{k} {v}"),
            "rtgt's null bdevs report no write or unmap hints; only 0 is accepted",
        ));
    }
    let uuid = uuid_arg(&a.uuid)?;
    let bdevs = ctx.target().bdevs();
    if bdevs.get(&a.name).is_some() {
        return Err(bdev_err(BdevError::Exists(a.name)));
    }
    let bdev = NullBdev::create(NullParams {
        name: a.name.clone(),
        num_blocks: a.num_blocks,
        block_size: a.block_size,
        physical_block_size: a.physical_block_size,
        uuid,
    })
    .map_err(bdev_err)?;
    bdevs.register(bdev).map_err(bdev_err)?;
    Ok(a.name)
}

async fn aio_create(a: AioCreate, ctx: Arc<Rtgt>) -> RpcResult<String> {
    if a.nowait {
        return Err(not_supported(
            "nowait true",
            "rtgt's aio bdev does not submit with RWF_NOWAIT",
        ));
    }
    let uuid = uuid_arg(&a.uuid)?;
    let bdevs = ctx.target().bdevs();
    if bdevs.get(&a.name).is_some() {
        return Err(bdev_err(BdevError::Exists(a.name)));
    }
    let params = AioParams {
        name: a.name.clone(),
        filename: a.filename,
        block_size: a.block_size,
        readonly: a.readonly,
        fallocate: a.fallocate,
        uuid,
        engine: None,
    };
    // Opening a file and probing io_uring may block: keep it off the RPC thread's loop.
    let bdev = tokio::task::spawn_blocking(move || AioBdev::create(params))
        .await
        .map_err(|e| RpcError::internal(format!("bdev creation task failed: {e}")))?
        .map_err(bdev_err)?;
    bdevs.register(bdev).map_err(bdev_err)?;
    Ok(a.name)
}

async fn delay_create(a: DelayCreate, ctx: Arc<Rtgt>) -> RpcResult<String> {
    let uuid = uuid_arg(&a.uuid)?;
    let bdevs = ctx.target().bdevs();
    DelayBdev::create(
        bdevs,
        DelayParams {
            name: a.name.clone(),
            base_bdev_name: a.base_bdev_name,
            uuid,
            avg_read_latency: a.avg_read_latency,
            p99_read_latency: a.p99_read_latency,
            avg_write_latency: a.avg_write_latency,
            p99_write_latency: a.p99_write_latency,
        },
    )
    .map_err(bdev_err)?;
    Ok(a.name)
}

/// SPDK decodes `latency_type` as an enum (a bad one fails the decoding: `-32603
/// spdk_json_decode_object failed`) and answers an unknown delay bdev with `-32602`.
async fn delay_update_latency(a: DelayUpdateLatency, ctx: Arc<Rtgt>) -> RpcResult<bool> {
    let Some(which) = DelayLatency::parse(&a.latency_type) else {
        tracing::warn!(
            "invalid latency_type '{}' (avg_read, p99_read, avg_write or p99_write)",
            a.latency_type
        );
        return Err(RpcError::internal("spdk_json_decode_object failed"));
    };
    let bdev = DelayBdev::lookup(ctx.target().bdevs(), &a.delay_bdev_name).ok_or_else(|| {
        RpcError::invalid_params(format!(
            "The requested bdev does not exist: no delay bdev '{}'",
            a.delay_bdev_name
        ))
    })?;
    bdev.set_latency(which, a.latency_us);
    Ok(true)
}

/// Deletes a bdev of one kind: its namespaces go first, then the bdev.
async fn delete(ctx: Arc<Rtgt>, name: String, product: &'static str) -> RpcResult<bool> {
    let target = ctx.target();
    let bdev = target
        .bdevs()
        .get(&name)
        .filter(|b| b.product_name() == product)
        .ok_or_else(|| {
            RpcError::errno(
                libc::ENODEV,
                format!("{product} bdev '{name}' does not exist"),
            )
        })?;
    drop(bdev);
    target
        .remove_bdev_namespaces(&name)
        .await
        .map_err(|e| RpcError::internal(format!("removing the namespaces of bdev {name}: {e}")))?;
    target.bdevs().unregister(&name).map_err(bdev_err)?;
    Ok(true)
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
pub(crate) fn bdev_info(ctx: &Rtgt, bdev: &Arc<dyn Bdev>) -> Value {
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
        "assigned_rate_limits": {
            "rw_ios_per_sec": 0,
            "rw_mbytes_per_sec": 0,
            "r_mbytes_per_sec": 0,
            "w_mbytes_per_sec": 0,
        },
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

async fn get_bdevs(a: GetBdevs, ctx: Arc<Rtgt>) -> RpcResult<Vec<Value>> {
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

async fn get_iostat(a: GetIostat, ctx: Arc<Rtgt>) -> RpcResult<Value> {
    if a.per_channel {
        return Err(not_supported(
            "per_channel true",
            "rtgt keeps one set of I/O statistics per bdev",
        ));
    }
    match a.reset_mode.as_deref() {
        None | Some("none") => {}
        Some(mode) => {
            return Err(not_supported(
                format_args!("reset_mode '{}'", mode.escape_default()),
                "rtgt's I/O statistics are not reset; only 'none' is accepted",
            ));
        }
    }
    let bdevs = ctx.target().bdevs();
    let names: Vec<String> = match (a.names, a.name) {
        (Some(n), _) => n,
        (None, Some(n)) => vec![n],
        (None, None) => bdevs.names(),
    };
    let mut list = Vec::with_capacity(names.len());
    for name in names {
        let s = bdevs.iostat(&name).ok_or_else(|| {
            RpcError::errno(libc::ENODEV, format!("bdev '{name}' does not exist"))
        })?;
        list.push(json!({
            "name": name,
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
            "min_read_latency_ticks": 0,
            "write_latency_ticks": s.write_latency_ns,
            "max_write_latency_ticks": s.max_write_latency_ns,
            "min_write_latency_ticks": 0,
            "unmap_latency_ticks": s.unmap_latency_ns,
            "max_unmap_latency_ticks": 0,
            "min_unmap_latency_ticks": 0,
            "copy_latency_ticks": 0,
            "max_copy_latency_ticks": 0,
            "min_copy_latency_ticks": 0,
            "num_flush_ops": s.num_flush_ops,
            "num_write_zeroes_ops": s.num_write_zeroes_ops,
            "num_compare_ops": s.num_compare_ops,
            "num_errors": s.num_errors,
        }));
    }
    Ok(json!({
        "tick_rate": 1_000_000_000u64,
        "ticks": monotonic_ns(),
        "bdevs": list,
    }))
}

/// Nanoseconds since the first call (the `ticks` of `bdev_get_iostat`).
fn monotonic_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The `bdev` subsystem's configuration: one create call per bdev in creation order, and
/// `bdev_wait_for_examine` last.
pub(crate) fn bdev_config(ctx: &Rtgt) -> Vec<Value> {
    let mut out: Vec<Value> = ctx
        .target()
        .bdevs()
        .list()
        .iter()
        .map(|b| b.config())
        .collect();
    out.push(json!({"method": "bdev_wait_for_examine"}));
    out
}
