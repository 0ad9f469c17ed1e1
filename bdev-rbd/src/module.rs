//! The RBD bdev module as the target registers it: SPDK's `bdev_rbd_*` methods (with rpc.py's
//! command lines), one [`RbdModule`] per target, and its cluster registrations in save_config
//! before the bdevs. Linking this crate is all a binary does to offer them.
//!
//! Every call that talks to the cluster (connecting, opening, resizing, waiting for an OSD
//! map, disconnecting) runs on a blocking thread, never on the RPC thread or a reactor; errors
//! keep their errno as SPDK's negative codes, and a malformed parameter is `-32603
//! spdk_json_decode_object failed`. `bdev_rbd_delete` goes through the generic bdev delete,
//! so the namespaces that export the bdev are removed first.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;
use target_core::bdev::module::{
    self, BdevMethod, BdevModuleOps, BoxFuture, MethodCtx, MethodError, MethodResult, ModuleState,
};
use target_core::rpc_spec::ValueKind::*;
use target_core::rpc_spec::{Complete, Prints, l, m, o, pos, prints};

use crate::bdev::RBD_PRODUCT_NAME;
use crate::error::RbdError;
use crate::params::{ClusterName, Create, Delete, GetClustersInfo, RegisterCluster, Resize};
use crate::registry::{RbdModule, RbdOptions};

target_core::register_bdev_module!(
    RBD_MODULE = BdevModuleOps {
        name: "rbd",
        methods: &[
            BdevMethod {
                spec: prints(
                    m(
                        "bdev_rbd_register_cluster",
                        "Add a Rados cluster with ceph rbd backend",
                        &[
                            pos(
                                0,
                                "name",
                                Str,
                                "Name of the Rados cluster only known to rbd bdev"
                            ),
                            l(
                                "user",
                                "user_id",
                                Str,
                                "Ceph user name (i.e. admin, not client.admin)"
                            ),
                            l(
                                "config-param",
                                "config_param",
                                KeyValue,
                                "A key=value option for rados_conf_set (repeatable)"
                            ),
                            l(
                                "config-file",
                                "config_file",
                                Str,
                                "The Rados configuration file"
                            )
                            .comp(Complete::File),
                            l("key-file", "key_file", Str, "The Rados keyring file")
                                .comp(Complete::File),
                            l(
                                "core-mask",
                                "core_mask",
                                Str,
                                "Core mask for the cluster's librados/librbd threads"
                            ),
                        ]
                    ),
                    Prints::Json
                ),
                run: register_cluster,
                fields: target_core::rpc_spec::struct_fields::<RegisterCluster>,
            },
            BdevMethod {
                spec: m(
                    "bdev_rbd_unregister_cluster",
                    "Unregister a Rados cluster object",
                    &[pos(0, "name", Str, "Name of the Rados cluster"),]
                ),
                run: unregister_cluster,
                fields: target_core::rpc_spec::struct_fields::<ClusterName>,
            },
            BdevMethod {
                spec: prints(
                    m(
                        "bdev_rbd_get_clusters_info",
                        "Display registered Rados clusters and related info",
                        &[o(
                            'b',
                            "name",
                            "name",
                            Str,
                            "Name of one registered Rados cluster"
                        ),]
                    ),
                    Prints::Dict
                ),
                run: clusters_info,
                fields: target_core::rpc_spec::struct_fields::<GetClustersInfo>,
            },
            BdevMethod {
                spec: prints(
                    m(
                        "bdev_rbd_create",
                        "Add a bdev with ceph rbd backend",
                        &[
                            o('b', "name", "name", Str, "Name of the bdev"),
                            l(
                                "user",
                                "user_id",
                                Str,
                                "Ceph user name (i.e. admin, not client.admin)"
                            ),
                            l(
                                "config",
                                "config",
                                KeyValue,
                                "A key=value option for rados_conf_set (repeatable)"
                            ),
                            pos(0, "pool_name", Str, "rbd pool name"),
                            pos(1, "rbd_name", Str, "rbd image name"),
                            pos(2, "block_size", Int, "rbd block size"),
                            o(
                                'c',
                                "cluster-name",
                                "cluster_name",
                                Str,
                                "Registered Rados cluster to use"
                            ),
                            o('u', "uuid", "uuid", Str, "UUID of the bdev"),
                            o(
                                'r',
                                "readonly",
                                "read_only",
                                Flag,
                                "Open the image read-only"
                            ),
                            l(
                                "namespace-name",
                                "namespace_name",
                                Str,
                                "RADOS namespace of the image (rtgt)"
                            ),
                        ]
                    ),
                    Prints::Json
                ),
                run: create,
                fields: target_core::rpc_spec::struct_fields::<Create>,
            },
            BdevMethod {
                spec: m(
                    "bdev_rbd_delete",
                    "Delete a rbd bdev",
                    &[pos(0, "name", Str, "rbd bdev name")
                        .comp(Complete::BdevOf(RBD_PRODUCT_NAME)),]
                ),
                run: delete,
                fields: target_core::rpc_spec::struct_fields::<Delete>,
            },
            BdevMethod {
                spec: prints(
                    m(
                        "bdev_rbd_resize",
                        "Resize a rbd bdev",
                        &[
                            pos(0, "name", Str, "rbd bdev name")
                                .comp(Complete::BdevOf(RBD_PRODUCT_NAME)),
                            pos(1, "new_size", Int, "New size in MiB (it only grows)"),
                        ]
                    ),
                    Prints::Json
                ),
                run: resize,
                fields: target_core::rpc_spec::struct_fields::<Resize>,
            },
            BdevMethod {
                spec: prints(
                    m(
                        "bdev_rbd_wait_for_latest_osdmap",
                        "Wait until a registered cluster has the latest OSD map",
                        &[pos(0, "name", Str, "Name of the Rados cluster"),]
                    ),
                    Prints::Json
                ),
                run: wait_for_latest_osdmap,
                fields: target_core::rpc_spec::struct_fields::<ClusterName>,
            },
        ],
        state: Some(new_state),
        config: Some(config),
        fini: Some(fini),
    }
);

fn new_state() -> ModuleState {
    RbdModule::new(RbdOptions::default())
}

fn rbd(ctx: &MethodCtx) -> Result<Arc<RbdModule>, MethodError> {
    ctx.state::<RbdModule>()
        .ok_or_else(|| MethodError::internal("the RBD module has no state"))
}

impl From<RbdError> for MethodError {
    fn from(e: RbdError) -> Self {
        match e {
            RbdError::Errno { errno, message } => MethodError::errno(errno, message),
            RbdError::Decode(detail) => MethodError::decode_failed(detail),
        }
    }
}

/// Decodes `P` and runs `f` with the module on a blocking thread (it may wait on the cluster).
fn blocking<P, R>(
    ctx: MethodCtx,
    p: Value,
    f: impl FnOnce(&RbdModule, &MethodCtx, P) -> Result<R, RbdError> + Send + 'static,
) -> BoxFuture<MethodResult>
where
    P: DeserializeOwned + Send + 'static,
    R: Into<Value> + Send + 'static,
{
    Box::pin(async move {
        let a: P = module::decode(p)?;
        let rbd = rbd(&ctx)?;
        let r = tokio::task::spawn_blocking(move || f(&rbd, &ctx, a))
            .await
            .map_err(|e| MethodError::internal(format!("RBD task failed: {e}")))??;
        Ok(r.into())
    })
}

fn register_cluster(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    blocking(ctx, p, |rbd, _, a: RegisterCluster| rbd.register_cluster(a))
}

fn unregister_cluster(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    blocking(ctx, p, |rbd, _, a: ClusterName| rbd.unregister_cluster(a))
}

fn clusters_info(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    Box::pin(async move {
        let a: GetClustersInfo = module::decode(p)?;
        Ok(rbd(&ctx)?.clusters_info(a)?)
    })
}

fn create(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    blocking(ctx, p, |rbd, ctx, a: Create| {
        rbd.create_bdev(ctx.target.bdevs(), a)
    })
}

fn delete(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    Box::pin(async move {
        let a: Delete = module::decode(p)?;
        module::delete_bdev(&ctx.target, &a.name, RBD_PRODUCT_NAME).await
    })
}

fn resize(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    blocking(ctx, p, |rbd, ctx, a: Resize| {
        rbd.resize_bdev(ctx.target.bdevs(), a)
    })
}

fn wait_for_latest_osdmap(ctx: MethodCtx, p: Value) -> BoxFuture<MethodResult> {
    blocking(ctx, p, |rbd, _, a: ClusterName| {
        rbd.wait_for_latest_osdmap(a)
    })
}

/// save_config: every cluster registration, before the bdevs that name them.
fn config(ctx: &MethodCtx) -> Vec<Value> {
    ctx.state::<RbdModule>()
        .map(|rbd| rbd.config_entries())
        .unwrap_or_default()
}

/// At exit: closes the images (their watches go at once) and the cluster connections.
fn fini(state: &ModuleState, bdevs: &target_core::bdev::BdevRegistry) {
    if let Ok(rbd) = Arc::clone(state).downcast::<RbdModule>() {
        rbd.close_all(bdevs);
    }
}
