//! The parameters of SPDK's `bdev_rbd_*` RPCs, as plain serde structs. The rpc crate decodes
//! them with its SPDK rules (strict keys; a failure is `-32603 spdk_json_decode_object
//! failed`) and passes them to [`crate::RbdModule`].

use serde::Deserialize;

use crate::conf::ConfMap;

/// The RPC methods this crate implements, in SPDK's names.
pub const METHODS: &[&str] = &[
    "bdev_rbd_register_cluster",
    "bdev_rbd_unregister_cluster",
    "bdev_rbd_get_clusters_info",
    "bdev_rbd_create",
    "bdev_rbd_delete",
    "bdev_rbd_resize",
    "bdev_rbd_wait_for_latest_osdmap",
];

/// `bdev_rbd_register_cluster`: a cluster handle shared by the bdevs that name it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct RegisterCluster {
    /// The registration's name (`cluster_name` of `bdev_rbd_create`).
    pub name: String,
    /// Ceph user id without `client.` (default: admin).
    pub user_id: Option<String>,
    /// Options for `rados_conf_set`, applied after the file.
    pub config_param: Option<ConfMap>,
    /// A ceph.conf to read (default: librados' search, missing files allowed).
    pub config_file: Option<String>,
    /// A keyring file with the user's key.
    pub key_file: Option<String>,
    /// CPUs for the cluster's librados and librbd threads (an SPDK core mask).
    pub core_mask: Option<String>,
}

/// `bdev_rbd_unregister_cluster` and `bdev_rbd_wait_for_latest_osdmap`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ClusterName {
    /// The registration's name.
    pub name: String,
}

/// `bdev_rbd_get_clusters_info`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct GetClustersInfo {
    /// One registration (an object), or all of them (an array).
    pub name: Option<String>,
}

/// `bdev_rbd_create`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Create {
    /// Bdev name (default `Ceph<N>`).
    pub name: Option<String>,
    /// Ceph user id for a handle of the bdev's own (not with `cluster_name`).
    pub user_id: Option<String>,
    /// Pool.
    pub pool_name: String,
    /// Image.
    pub rbd_name: String,
    /// RADOS namespace in the pool.
    pub namespace_name: Option<String>,
    /// Logical block size (512, 1024, 2048 or 4096).
    pub block_size: u32,
    /// librados options for a handle of the bdev's own; when given, no ceph.conf is read.
    pub config: Option<ConfMap>,
    /// A registered cluster to use.
    pub cluster_name: Option<String>,
    /// Bdev UUID (default random).
    pub uuid: Option<String>,
    /// Open the image read-only.
    #[serde(default)]
    pub read_only: bool,
}

/// `bdev_rbd_delete`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Delete {
    /// Bdev name.
    pub name: String,
}

/// `bdev_rbd_resize`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Resize {
    /// Bdev name.
    pub name: String,
    /// New size in MiB; must not be smaller than the current size.
    pub new_size: u64,
}
