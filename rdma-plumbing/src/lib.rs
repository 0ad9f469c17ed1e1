//! The RDMA plumbing both RDMA transports share: what NVMe/RDMA (`transport-rdma`) and SRP
//! (`transport-srp`) do the same way with verbs and RDMA CM, written once and tested once.
//!
//! - [`transfer`]: the RDMA READ / WRITE work requests that move one transfer between the
//!   peer's memory segments and the windows of local buffers.
//! - [`wr_id`]: the one layout of a work-request id (kind, key, generation).
//! - [`qpn`]: maps keyed by queue pair number, with a hasher fit for the data path.
//! - [`completions`]: a device's completion channel and completion queues on one poll group:
//!   reserving room, arming, polling in batches, the poll counters.
//! - [`srq`]: a shared receive queue with its batch of receives to post.
//! - [`drain`]: draining a queue pair before anything it used is freed (error state,
//!   zero-length RDMA WRITE marker, receive flushes, a watchdog), sans-I/O.
//! - [`cm`]: the connection-manager event poller's classification of events, the table of
//!   which poll group owns a connection, and the message that takes work to that poll group.
//! - [`orders`]: every order of a set of events, for the permutation tests of teardown.
//! - [`env`](mod@env): the fabric provider a transport finds in its [`target_core::registry::TransportEnv`].
//!
//! Layering: transports → `rdma-plumbing` → `fabric` (verbs, RDMA CM) → `iobuf`. The plumbing
//! uses `target-core` only for the seams a transport plugs into (the transport environment, its
//! error type, reactor messages to a poll group); nothing here knows NVMe or SCSI.

pub mod cm;
pub mod completions;
pub mod drain;
pub mod env;
pub mod orders;
pub mod qpn;
pub mod srq;
pub mod transfer;
pub mod wr_id;

pub use completions::{CompletionQueues, PollCounters};
pub use drain::Drain;
pub use qpn::QpnMap;
pub use srq::SharedRecvQueue;
pub use transfer::{PlanError, RemoteSegment};
pub use wr_id::WrId;
