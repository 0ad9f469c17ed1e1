//! The NVMe request execution layer shared by NVMe transports (RDMA now, TCP later).
//!
//! The sans-I/O [`crate::nvme`] module knows the protocol; this layer binds it to the target
//! model and to a transport's queues, without knowing how bytes move:
//!
//! - [`NvmfCtrlr`]: one controller (association), shared by its admin queue (whose poll group
//!   owns it: keep-alive, AER parking, teardown) and its I/O queues (which attach and detach
//!   under its lock, on the control path only);
//! - [`Queue`]: the NVMe state of one transport connection (unconnected, admin or I/O queue),
//!   created by the transport when it accepts a connection;
//! - [`exec`]: the request path. A transport receives a capsule, calls [`exec::begin`] (SGL
//!   decoding), moves the host's data into the request's buffers, calls [`exec::execute`]
//!   (admission, then the command by concern), and later [`exec::io_done`] with the bdev
//!   completion. The outcome tells it what to send.
//! - by concern, as Linux nvmet splits them: `fabrics_cmd` (Connect: the association and its
//!   I/O queues), `admin_cmd` (admin commands, Keep Alive, the views the controller logic
//!   reads), `io_cmd_bdev` (I/O commands on bdevs, multi-operation commands, bdev status to
//!   NVMe status), `discovery` (the discovery log a host sees).
//!
//! # What a transport provides
//!
//! A [`TransportInfo`] (limits, minimum KATO, how to disconnect one of its queues from any
//! reactor), a 48-bit generation-tagged token per request (used for admission replay and as
//! the bdev I/O tag), a preallocated `Box<BdevIo>` per request whose `bufs` hold the data, and
//! the wire: moving data and sending [`crate::nvme::Cqe`]s.
//!
//! # Teardown
//!
//! When a connection goes away the transport calls [`Queue::begin_close`] as soon as it knows
//! (for an admin queue this ends the association: every I/O queue gets a disconnect message and
//! the controller id is freed) and [`Queue::finish`] once nothing of the connection is left.

mod admin_cmd;
mod ctrlr;
mod discovery;
pub mod exec;
mod fabrics_cmd;
mod io_cmd_bdev;
mod queue;

pub use ctrlr::{NvmfCtrlr, QueueRef};
pub use exec::{AerDone, ExecCtx, ExecReq, Outcome};
pub use queue::{Queue, QueueRole};

use crate::nvme::TransportLimits;
use crate::reactor::ReactorCtx;

/// Disconnects one queue of a transport, on the reactor that owns it: `(ctx, transport index,
/// queue key)`. A transport implements it by finding its poll group with
/// [`crate::target::with_transport_pg`] and starting the queue's teardown; a key that no longer
/// names a live queue is ignored.
pub type DisconnectFn = fn(&mut ReactorCtx, usize, u64);

/// What the exec layer needs to know about a transport.
#[derive(Debug, Clone)]
pub struct TransportInfo {
    /// The transport's registered name (`RDMA`), for management views.
    pub name: &'static str,
    /// The transport's index in the target (admission tokens and bdev tags carry it).
    pub index: usize,
    /// What controllers created through this transport advertise.
    pub limits: TransportLimits,
    /// Shortest keep-alive timeout in ms; a host asking for less (but not 0) gets this.
    pub min_kato_ms: u32,
    /// Largest admin-command data transfer the transport hands over in one buffer.
    pub admin_max_len: u32,
    /// How to disconnect one of this transport's queues.
    pub disconnect: DisconnectFn,
}

/// Firmware revision reported in Identify Controller and the firmware slot log.
pub const FIRMWARE_REVISION: &str = env!("CARGO_PKG_VERSION");
