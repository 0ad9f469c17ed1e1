//! The aio bdev module's methods (files and block devices through io_uring):
//! `bdev_aio_create`, `bdev_aio_delete`.

use rpc_spec::ValueKind::*;
use rpc_spec::{Complete, Prints, l, m, o, pos, pos_opt, prints};
use serde::Deserialize;
use serde_json::Value;

use super::malloc::Name;
use super::{
    BdevMethod, BdevModuleOps, BoxFuture, MethodCtx, MethodError, MethodResult, decode,
    delete_bdev, uuid_param,
};
use crate::bdev::{AioBdev, AioParams, BdevError};

crate::register_bdev_module!(
    AIO_MODULE = BdevModuleOps {
        name: "aio",
        methods: &[
            BdevMethod {
                spec: prints(
                    m(
                        "bdev_aio_create",
                        "Create a bdev on a file or block device (io_uring)",
                        &[
                            pos(0, "filename", Str, "Path to the device or file")
                                .comp(Complete::File),
                            pos(1, "name", Str, "Block device name"),
                            pos_opt(2, "block_size", Int, "Block size (default: detected)"),
                            o('r', "readonly", "readonly", Flag, "Read-only bdev"),
                            l(
                                "fallocate",
                                "fallocate",
                                Flag,
                                "Support unmap/write zeroes with fallocate"
                            ),
                            o('u', "uuid", "uuid", Str, "UUID of the bdev"),
                            l(
                                "no-wait",
                                "nowait",
                                Flag,
                                "RWF_NOWAIT (rtgt: not supported)"
                            ),
                        ]
                    ),
                    Prints::Json
                ),
                run: create,
                fields: rpc_spec::struct_fields::<Create>,
            },
            BdevMethod {
                spec: m(
                    "bdev_aio_delete",
                    "Delete an aio bdev",
                    &[pos(0, "name", Str, "Aio bdev name").comp(Complete::BdevOf(PRODUCT)),]
                ),
                run: delete,
                fields: rpc_spec::struct_fields::<Name>,
            },
        ],
        state: None,
        config: None,
        fini: None,
    }
);

const PRODUCT: &str = crate::bdev::AIO_PRODUCT;

#[derive(Deserialize)]
struct Create {
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

fn create(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    Box::pin(async move {
        let a: Create = decode(p)?;
        if a.nowait {
            return Err(MethodError::not_supported(
                "nowait true",
                "rtgt's aio bdev does not submit with RWF_NOWAIT",
            ));
        }
        let params = AioParams {
            name: a.name,
            filename: a.filename,
            block_size: a.block_size,
            readonly: a.readonly,
            fallocate: a.fallocate,
            uuid: uuid_param(&a.uuid)?,
            engine: None,
            uring_module: false,
        };
        create_aio(&ctx, params).await
    })
}

/// Creates and registers an aio bdev (also SPDK's uring bdev, `params.uring_module`); the
/// result is its name.
pub(super) async fn create_aio(ctx: &MethodCtx, params: AioParams) -> MethodResult {
    let bdevs = ctx.target.bdevs();
    if bdevs.get(&params.name).is_some() {
        return Err(BdevError::Exists(params.name).into());
    }
    let name = params.name.clone();
    // Opening a file and probing io_uring may block: keep it off the RPC thread's loop.
    let bdev = tokio::task::spawn_blocking(move || AioBdev::create(params))
        .await
        .map_err(|e| MethodError::internal(format!("bdev creation task failed: {e}")))??;
    bdevs.register(bdev)?;
    Ok(Value::String(name))
}

fn delete(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    Box::pin(async move {
        let a: Name = decode(p)?;
        delete_bdev(&ctx.target, &a.name, PRODUCT).await
    })
}
