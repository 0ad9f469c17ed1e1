//! Ceph RBD block devices for rtgt: SPDK's `bdev_rbd` as a crate of its own.
//!
//! - [`ffi`]: hand-written declarations of the librados/librbd calls used (no -sys crate: the
//!   RBD crates on crates.io are unmaintained or need a newer Rust and librbd than Debian
//!   bookworm's Ceph 16; the handful of calls is stable C API).
//! - [`rados`], [`image`]: safe wrappers. Connecting, opening, resizing and waiting for OSD
//!   maps run on threads of their own with time limits; closing runs on a thread of its own.
//! - The data path: each reactor's channel owns a completion ring; librbd's callback stores
//!   the result, pushes the slot onto a lock-free queue and wakes the reactor through an
//!   eventfd only when it sleeps. No lock and no allocation per I/O on the reactor's side.
//! - [`RbdBdev`]: target-core's `Bdev`, its size kept current by the image's update watch.
//! - [`RbdModule`]: registered clusters (shared handles) and the logic of SPDK's RPCs
//!   (`bdev_rbd_register_cluster`, `…_unregister_cluster`, `…_get_clusters_info`,
//!   `bdev_rbd_create`, `…_delete`, `…_resize`, and ceph-nvmeof's
//!   `bdev_rbd_wait_for_latest_osdmap`), with [`params`] as their parameter structs.
//!
//! - [`module`](crate): the bdev module registration (`register_bdev_module!`): the methods in
//!   the target's RPC table, save_config's cluster registrations. A binary links this crate
//!   (`use bdev_rbd as _;`) and has them.
//!
//! See docs/ceph.md for deployment, keys and behaviour when the cluster is degraded.

mod bdev;
mod channel;
mod conf;
mod error;
pub mod ffi;
pub mod image;
mod module;
pub mod params;
pub mod rados;
mod registry;
mod ring;

pub use bdev::{RBD_PRODUCT_NAME, RbdBdev, ResizeListener};
pub use channel::CHANNEL_DEPTH;
pub use conf::ConfMap;
pub use error::{RbdError, strerror};
pub use rados::Timeouts;
pub use registry::{RbdModule, RbdOptions, Registered};
