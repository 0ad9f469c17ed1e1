//! The null bdev module's methods: `bdev_null_create`, `bdev_null_delete`, `bdev_null_resize`.

use rpc_spec::ValueKind::*;
use rpc_spec::{Complete, Prints, m, o, pos, prints};
use serde::Deserialize;
use serde_json::Value;

use super::malloc::{Name, no_metadata};
use super::{
    BdevMethod, BdevModuleOps, BoxFuture, MethodCtx, MethodError, MethodResult, decode,
    delete_bdev, uuid_param,
};
use crate::bdev::{BdevError, NullBdev, NullParams};

crate::register_bdev_module!(
    NULL_MODULE = BdevModuleOps {
        name: "null",
        methods: &[
            BdevMethod {
                spec: prints(
                    m(
                        "bdev_null_create",
                        "Create a bdev with null backend",
                        &[
                            pos(
                                1,
                                "num_blocks",
                                SizeMib {
                                    block_size: "block_size",
                                    float: false
                                },
                                "Size of the bdev in MiB (int > 0)"
                            ),
                            pos(2, "block_size", Int, "Data block size for this bdev"),
                            o(
                                'p',
                                "physical-block-size",
                                "physical_block_size",
                                Int,
                                "Physical block size for this bdev"
                            ),
                            pos(0, "name", Str, "Block device name"),
                            o('u', "uuid", "uuid", Str, "UUID of the bdev"),
                            o(
                                'm',
                                "md-size",
                                "md_size",
                                Int,
                                "Metadata size (rtgt: 0 only)"
                            ),
                            o(
                                't',
                                "dif-type",
                                "dif_type",
                                IntIn(0, 3),
                                "Protection information type (rtgt: 0 only)"
                            ),
                            o(
                                'd',
                                "dif-is-head-of-md",
                                "dif_is_head_of_md",
                                Flag,
                                "Protection information in the first 8 bytes of metadata"
                            ),
                            o(
                                'f',
                                "dif-pi-format",
                                "dif_pi_format",
                                IntIn(0, 2),
                                "Protection information format"
                            ),
                            o(
                                'a',
                                "preferred-write-alignment",
                                "preferred_write_alignment",
                                Int,
                                "Preferred write alignment in blocks"
                            ),
                            o(
                                'g',
                                "preferred-write-granularity",
                                "preferred_write_granularity",
                                Int,
                                "Preferred write granularity in blocks"
                            ),
                            o(
                                's',
                                "optimal-write-size",
                                "optimal_write_size",
                                Int,
                                "Optimal write size in blocks"
                            ),
                            o(
                                'c',
                                "preferred-unmap-alignment",
                                "preferred_unmap_alignment",
                                Int,
                                "Preferred unmap alignment in blocks"
                            ),
                            o(
                                'r',
                                "preferred-unmap-granularity",
                                "preferred_unmap_granularity",
                                Int,
                                "Preferred unmap granularity in blocks"
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
                    "bdev_null_delete",
                    "Delete a null bdev",
                    &[pos(0, "name", Str, "Null bdev name").comp(Complete::BdevOf(PRODUCT)),]
                ),
                run: delete,
                fields: rpc_spec::struct_fields::<Name>,
            },
            BdevMethod {
                spec: prints(
                    m(
                        "bdev_null_resize",
                        "Resize a null bdev",
                        &[
                            pos(0, "name", Str, "Name of null bdev")
                                .comp(Complete::BdevOf(PRODUCT)),
                            pos(1, "new_size", Int, "New size of null bdev in MiB"),
                        ]
                    ),
                    Prints::Json
                ),
                run: resize,
                fields: rpc_spec::struct_fields::<Resize>,
            },
        ],
        state: None,
        config: None,
        fini: None,
    }
);

const PRODUCT: &str = "Null disk";

#[derive(Deserialize)]
struct Create {
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

fn create(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    Box::pin(async move {
        let a: Create = decode(p)?;
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
            return Err(MethodError::not_supported(
                format_args!("{k} {v}"),
                "rtgt's null bdevs report no write or unmap hints; only 0 is accepted",
            ));
        }
        let uuid = uuid_param(&a.uuid)?;
        let bdevs = ctx.target.bdevs();
        if bdevs.get(&a.name).is_some() {
            return Err(BdevError::Exists(a.name).into());
        }
        let bdev = NullBdev::create(NullParams {
            name: a.name.clone(),
            num_blocks: a.num_blocks,
            block_size: a.block_size,
            physical_block_size: a.physical_block_size,
            uuid,
        })?;
        bdevs.register(bdev)?;
        Ok(Value::String(a.name))
    })
}

fn delete(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    Box::pin(async move {
        let a: Name = decode(p)?;
        delete_bdev(&ctx.target, &a.name, PRODUCT).await
    })
}

#[derive(Deserialize)]
struct Resize {
    name: String,
    new_size: u64,
}

/// `bdev_null_resize`: grows the bdev; every namespace on it then reports the new size (see
/// [`crate::bdev::BdevRegistry::change_blockcnt`]).
fn resize(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    Box::pin(async move {
        let a: Resize = decode(p)?;
        let bdevs = ctx.target.bdevs();
        let bdev = NullBdev::lookup(bdevs, &a.name).ok_or_else(|| {
            MethodError::errno(-libc::ENODEV, format!("null bdev '{}' not found", a.name))
        })?;
        bdev.resize(bdevs, a.new_size)?;
        Ok(Value::Bool(true))
    })
}
