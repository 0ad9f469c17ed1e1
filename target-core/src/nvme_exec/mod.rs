//! The NVMe execution layer shared by NVMe transports (RDMA now, TCP later): NVMe commands
//! on the target model and its bdevs. The sans-I/O [`crate::nvme`] module knows the protocol;
//! this layer binds it to the subsystems, the poll group (admission, the namespaces' I/O
//! channels) and a transport's queues, without knowing how bytes move. Its SCSI counterpart
//! is [`crate::scsi_exec`].
//!
//! - [`Association`]: one controller, shared by its admin queue (whose poll group owns it:
//!   keep-alive, AER parking, teardown) and its I/O queues (which attach and detach under its
//!   lock, on the control path only);
//! - [`Queue`] (`queue`): the NVMe state of one transport connection (unconnected, admin or
//!   I/O queue), created by the transport when it accepts a connection;
//! - the request path (`request`): a transport receives a capsule, calls [`begin`] (SGL
//!   decoding), moves the host's data into the request's buffers, calls [`execute`]
//!   (admission, then the command by concern), and later [`io_done`] with the bdev completion.
//!   The [`NvmeAction`] tells it what to do next;
//! - the commands by concern, as Linux nvmet splits them: `fabrics_cmd` (Connect: the
//!   association and its I/O queues), `auth_cmd` (DH-HMAC-CHAP: AUTHREQ, the gate before
//!   authentication, Authentication Send/Receive), `admin_cmd` (admin commands, Keep Alive, the views the
//!   controller logic reads), `io_cmd_bdev` (I/O commands on bdevs, multi-operation commands,
//!   bdev status to NVMe status), `discovery_log` (the discovery log a host sees).
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
//!
//! # Per-volume state
//!
//! A namespace is the same poll-group entry (admission counter, bdev channel) that
//! [`crate::scsi_exec`] serves as a logical unit; state kept per namespace (reservations, ANA
//! group) is seen by both protocols. See the [`crate::scsi_exec`] documentation.

mod admin_cmd;
mod association;
mod auth_cmd;
mod discovery_log;
mod fabrics_cmd;
mod fused;
mod io_cmd_bdev;
mod queue;
mod request;
mod resv_cmd;

pub use admin_cmd::namespace_view;
pub use association::Association;
pub use io_cmd_bdev::{bdev_status, io_done, resubmit};
pub use queue::{Queue, QueueRef, QueueRole};
pub use request::{
    AerDone, NvmeAction, NvmeCtx, NvmeReq, abandon, begin, execute, is_connect, is_read,
    preempt_abort_mark,
};
pub(crate) use resv_cmd::notify_hosts;

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
