//! The delay virtual bdev module's methods: `bdev_delay_create`, `bdev_delay_delete`,
//! `bdev_delay_update_latency`.

use rpc_spec::ValueKind::*;
use rpc_spec::{Complete, Prints, m, o, pos, prints};
use serde::Deserialize;
use serde_json::Value;

use super::malloc::Name;
use super::{
    BdevMethod, BdevModuleOps, BoxFuture, MethodCtx, MethodError, MethodResult, decode,
    delete_bdev, uuid_param,
};
use crate::bdev::{DELAY_PRODUCT_NAME, DelayBdev, DelayLatency, DelayParams};

crate::register_bdev_module!(
    DELAY_MODULE = BdevModuleOps {
        name: "delay",
        methods: &[
            BdevMethod {
                spec: prints(
                    m(
                        "bdev_delay_create",
                        "Add a delay bdev on an existing bdev",
                        &[
                            o(
                                'b',
                                "base-bdev-name",
                                "base_bdev_name",
                                Str,
                                "Name of the existing bdev"
                            )
                            .req()
                            .comp(Complete::FreeBdev),
                            o('d', "name", "name", Str, "Name of the delay bdev").req(),
                            o('u', "uuid", "uuid", Str, "UUID of the bdev"),
                            o(
                                'r',
                                "avg-read-latency",
                                "avg_read_latency",
                                Int,
                                "Average latency of reads, in microseconds"
                            )
                            .req(),
                            o(
                                't',
                                "nine-nine-read-latency",
                                "p99_read_latency",
                                Int,
                                "Latency of 1 read in 100, in microseconds"
                            )
                            .req(),
                            o(
                                'w',
                                "avg-write-latency",
                                "avg_write_latency",
                                Int,
                                "Average latency of writes, in microseconds"
                            )
                            .req(),
                            o(
                                'n',
                                "nine-nine-write-latency",
                                "p99_write_latency",
                                Int,
                                "Latency of 1 write in 100, in microseconds"
                            )
                            .req(),
                        ]
                    ),
                    Prints::Json
                ),
                run: create,
                fields: rpc_spec::struct_fields::<Create>,
            },
            BdevMethod {
                spec: m(
                    "bdev_delay_delete",
                    "Delete a delay bdev",
                    &[pos(0, "name", Str, "Delay bdev name")
                        .comp(Complete::BdevOf(DELAY_PRODUCT_NAME)),]
                ),
                run: delete,
                fields: rpc_spec::struct_fields::<Name>,
            },
            BdevMethod {
                spec: prints(
                    m(
                        "bdev_delay_update_latency",
                        "Update one of the latencies of a delay bdev",
                        &[
                            pos(0, "delay_bdev_name", Str, "Name of the delay bdev")
                                .comp(Complete::BdevOf(DELAY_PRODUCT_NAME)),
                            pos(
                                1,
                                "latency_type",
                                Choice(&["avg_read", "avg_write", "p99_read", "p99_write"]),
                                "Latency to update"
                            ),
                            pos(2, "latency_us", Int, "New latency in microseconds"),
                        ]
                    ),
                    Prints::Json
                ),
                run: update_latency,
                fields: rpc_spec::struct_fields::<UpdateLatency>,
            },
        ],
        state: None,
        config: None,
        fini: None,
    }
);

#[derive(Deserialize)]
struct Create {
    base_bdev_name: String,
    name: String,
    avg_read_latency: u64,
    p99_read_latency: u64,
    avg_write_latency: u64,
    p99_write_latency: u64,
    uuid: Option<String>,
}

#[derive(Deserialize)]
struct UpdateLatency {
    delay_bdev_name: String,
    latency_type: String,
    latency_us: u64,
}

fn create(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    Box::pin(async move {
        let a: Create = decode(p)?;
        let uuid = uuid_param(&a.uuid)?;
        DelayBdev::create(
            ctx.target.bdevs(),
            DelayParams {
                name: a.name.clone(),
                base_bdev_name: a.base_bdev_name,
                uuid,
                avg_read_latency: a.avg_read_latency,
                p99_read_latency: a.p99_read_latency,
                avg_write_latency: a.avg_write_latency,
                p99_write_latency: a.p99_write_latency,
            },
        )?;
        Ok(Value::String(a.name))
    })
}

fn delete(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    Box::pin(async move {
        let a: Name = decode(p)?;
        delete_bdev(&ctx.target, &a.name, DELAY_PRODUCT_NAME).await
    })
}

/// SPDK decodes `latency_type` as an enum (a bad one fails the decoding: `-32603
/// spdk_json_decode_object failed`) and answers an unknown delay bdev with `-32602`.
fn update_latency(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    Box::pin(async move {
        let a: UpdateLatency = decode(p)?;
        let Some(which) = DelayLatency::parse(&a.latency_type) else {
            return Err(MethodError::decode_failed(format!(
                "invalid latency_type '{}' (avg_read, p99_read, avg_write or p99_write)",
                a.latency_type
            )));
        };
        let bdev = DelayBdev::lookup(ctx.target.bdevs(), &a.delay_bdev_name).ok_or_else(|| {
            MethodError::invalid_params(format!(
                "The requested bdev does not exist: no delay bdev '{}'",
                a.delay_bdev_name
            ))
        })?;
        bdev.set_latency(which, a.latency_us);
        Ok(Value::Bool(true))
    })
}
