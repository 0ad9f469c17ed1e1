//! The uring bdev module's methods, SPDK's names for rtgt's io_uring backend:
//! `bdev_uring_create`, `bdev_uring_delete`. The bdev is the aio bdev with io_uring required
//! (no fall-back to threads), shown and saved as a uring bdev.

use rpc_spec::ValueKind::*;
use rpc_spec::{Complete, Prints, m, o, pos, pos_opt, prints};
use serde::Deserialize;
use serde_json::Value;

use super::malloc::Name;
use super::{
    BdevMethod, BdevModuleOps, BoxFuture, MethodCtx, MethodResult, decode, delete_bdev, uuid_param,
};
use crate::bdev::{AioParams, URING_PRODUCT};

crate::register_bdev_module!(
    URING_MODULE =
        BdevModuleOps {
            name: "uring",
            methods: &[
                BdevMethod {
                    spec: prints(
                        m(
                            "bdev_uring_create",
                            "Create a bdev on a file or block device with io_uring",
                            &[
                                pos(0, "filename", Str, "Path to the device or file")
                                    .comp(Complete::File),
                                pos(1, "name", Str, "Block device name"),
                                pos_opt(2, "block_size", Int, "Block size (default: detected)"),
                                o('u', "uuid", "uuid", Str, "UUID of the bdev"),
                            ]
                        ),
                        Prints::Json
                    ),
                    run: create,
                    fields: rpc_spec::struct_fields::<Create>,
                },
                BdevMethod {
                    spec: m(
                        "bdev_uring_delete",
                        "Delete a uring bdev",
                        &[pos(0, "name", Str, "Uring bdev name")
                            .comp(Complete::BdevOf(URING_PRODUCT)),]
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

#[derive(Deserialize)]
struct Create {
    name: String,
    filename: String,
    block_size: Option<u32>,
    uuid: Option<String>,
}

fn create(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    Box::pin(async move {
        let a: Create = decode(p)?;
        let params = AioParams {
            name: a.name,
            filename: a.filename,
            block_size: a.block_size,
            readonly: false,
            fallocate: false,
            uuid: uuid_param(&a.uuid)?,
            engine: None,
            uring_module: true,
        };
        super::aio::create_aio(&ctx, params).await
    })
}

fn delete(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    Box::pin(async move {
        let a: Name = decode(p)?;
        delete_bdev(&ctx.target, &a.name, URING_PRODUCT).await
    })
}
