//! The malloc bdev module's methods: `bdev_malloc_create`, `bdev_malloc_delete`.

use rpc_spec::ValueKind::*;
use rpc_spec::{Complete, Prints, m, o, pos, prints};
use serde::Deserialize;
use serde_json::Value;

use super::{
    BdevMethod, BdevModuleOps, BoxFuture, MethodCtx, MethodError, MethodResult, decode,
    delete_bdev, uuid_param,
};
use crate::bdev::{BdevError, MallocBdev, MallocParams};

crate::register_bdev_module!(
    MALLOC_MODULE = BdevModuleOps {
        name: "malloc",
        methods: &[
            BdevMethod {
                spec: prints(
                    m(
                        "bdev_malloc_create",
                        "Create a bdev with malloc backend",
                        &[
                            pos(
                                0,
                                "num_blocks",
                                SizeMib {
                                    block_size: "block_size",
                                    float: true
                                },
                                "Size of the bdev in MiB (float > 0)"
                            ),
                            pos(1, "block_size", Int, "Data block size for this bdev"),
                            o(
                                'p',
                                "physical-block-size",
                                "physical_block_size",
                                Int,
                                "Physical block size for this bdev"
                            ),
                            o('b', "name", "name", Str, "Name of the bdev"),
                            o('u', "uuid", "uuid", Str, "UUID of the bdev"),
                            o(
                                'o',
                                "optimal-io-boundary",
                                "optimal_io_boundary",
                                Int,
                                "Split on optimal IO boundary, in blocks (0: off)"
                            ),
                            o(
                                'm',
                                "md-size",
                                "md_size",
                                Int,
                                "Metadata size (rtgt: 0 only)"
                            ),
                            o(
                                'i',
                                "md-interleave",
                                "md_interleave",
                                Flag,
                                "Interleaved metadata"
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
                                'n',
                                "numa-id",
                                "numa_id",
                                Int,
                                "NUMA node of the memory (-1: any)"
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
                    "bdev_malloc_delete",
                    "Delete a malloc bdev",
                    &[pos(0, "name", Str, "Malloc bdev name").comp(Complete::BdevOf(PRODUCT)),]
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

const PRODUCT: &str = "Malloc disk";

#[derive(Deserialize)]
struct Create {
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

/// Metadata and protection information: rtgt's bdevs have neither, so every metadata option
/// other than its default is refused (`dif_is_head_of_md` and `md_interleave` only describe a
/// layout that does not exist).
pub(super) fn no_metadata(
    md_size: u32,
    dif_type: i32,
    dif_pi_format: u32,
    dif_is_head_of_md: bool,
    md_interleave: bool,
) -> Result<(), MethodError> {
    let why = "rtgt's bdevs have no metadata or protection information";
    for (name, v) in [
        ("md_size", u64::from(md_size)),
        ("dif_type", dif_type.unsigned_abs().into()),
        ("dif_pi_format", dif_pi_format.into()),
    ] {
        if v != 0 {
            return Err(MethodError::not_supported(format_args!("{name} {v}"), why));
        }
    }
    for (name, on) in [
        ("dif_is_head_of_md", dif_is_head_of_md),
        ("md_interleave", md_interleave),
    ] {
        if on {
            return Err(MethodError::not_supported(format_args!("{name} true"), why));
        }
    }
    Ok(())
}

fn create(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    Box::pin(async move {
        let a: Create = decode(p)?;
        no_metadata(
            a.md_size,
            a.dif_type,
            a.dif_pi_format,
            a.dif_is_head_of_md,
            a.md_interleave,
        )?;
        if a.numa_id != -1 {
            return Err(MethodError::not_supported(
                format_args!("numa_id {}", a.numa_id),
                "rtgt does not place malloc memory on a NUMA node; only -1 (any) is accepted",
            ));
        }
        if a.optimal_io_boundary != 0 {
            return Err(MethodError::not_supported(
                format_args!("optimal_io_boundary {}", a.optimal_io_boundary),
                "rtgt neither splits I/O at a boundary nor reports one (NOIOB); only 0 is accepted",
            ));
        }
        if a.block_size == 0 || !a.block_size.is_multiple_of(512) {
            return Err(MethodError::errno(
                libc::EINVAL,
                format!("block_size {} is not a multiple of 512", a.block_size),
            ));
        }
        let uuid = uuid_param(&a.uuid)?;
        let bdevs = ctx.target.bdevs();
        let name = a.name.unwrap_or_else(|| bdevs.next_malloc_name());
        if bdevs.get(&name).is_some() {
            return Err(BdevError::Exists(name).into());
        }
        let bdev = MallocBdev::create(MallocParams {
            name: name.clone(),
            num_blocks: a.num_blocks,
            block_size: a.block_size,
            physical_block_size: a.physical_block_size,
            uuid,
            optimal_io_boundary: a.optimal_io_boundary,
        })?;
        bdevs.register(bdev)?;
        Ok(Value::String(name))
    })
}

#[derive(Deserialize)]
pub(super) struct Name {
    pub(super) name: String,
}

fn delete(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    Box::pin(async move {
        let a: Name = decode(p)?;
        delete_bdev(&ctx.target, &a.name, PRODUCT).await
    })
}
