//! rtgt core: everything that is not a wire.
//!
//! - [`registry`]: the `Transport` trait and the `register_transport!` registry.
//! - [`reactor`]: one thread per core with a message queue, pollers and idle sleep.
//! - [`target`]: subsystems, namespaces, hosts, listeners and their state machine.
//! - [`nvme`]: NVMe controller logic (fabrics, admin, I/O commands, discovery), no I/O inside.
//! - [`nvme_exec`]: the NVMe execution layer NVMe transports share (associations, queues,
//!   Connect, admin and I/O commands on bdevs).
//! - [`scsi`]: SCSI logical-unit logic, no I/O inside.
//! - [`scsi_exec`]: the SCSI execution layer SCSI transports share (LU maps, admission, the
//!   device server, bdev I/O, sense).
//! - [`reservation`]: reservations of a volume shared by NVMe and SCSI (sans-I/O).
//! - [`ana`]: asymmetric access (NVMe ANA, SCSI ALUA) of a subsystem's paths (sans-I/O).
//! - [`bdev`]: block devices, and the bdev module registry (`register_bdev_module!`,
//!   [`bdev::module`]) through which malloc, null, aio, delay and crates of their own (RBD)
//!   add their RPC methods.
//! - [`compare_write`]: per-bdev range locks for atomic compare-and-write.
//! - [`hex`]: trace-level wire dumps of what hosts send.

pub mod ana;
pub mod bdev;
pub mod compare_write;
pub mod hex;
pub mod nvme;
pub mod nvme_exec;
pub mod reactor;
pub mod registry;
pub mod reservation;
pub mod scsi;
pub mod scsi_exec;
pub mod target;

/// The method-spec vocabulary (JSON types, command lines) transports and bdev modules declare
/// their options, attributes and methods with.
pub use rpc_spec;
