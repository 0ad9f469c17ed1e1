//! rtgt NVMe-oF RDMA transport, registered as `RDMA`.
//!
//! - [`opts`]: SPDK's RDMA option set and defaults, decoded relaxed, dumped in SPDK's order.
//! - [`cm_data`]: the NVMe/RDMA private data of connect requests, accepts and rejects.
//! - `transport`: the transport object — the fabric's devices with their protection domains
//!   and the registered shared buffer pools.
//! - `listener`: the RDMA CM event channel, listeners, and a poller on reactor 0 that checks
//!   each connect request's private data and hands the connection to a poll group (admin
//!   queues round-robin, I/O queues to the least loaded group).
//! - `poll_group` ([`RdmaPg`]): per reactor, the poll: completions, replays in SPDK's fixed
//!   order, drain watchdogs, one doorbell per queue (`post`).
//! - `device`: a poll group's poller of one device — completion queue (watched through a
//!   completion channel) and shared receive queue (or per-queue-pair receive queues with
//!   `no_srq`).
//! - `accept`: a connection's queue pair created and accepted on its poll group.
//! - `qpair`: queue pairs and their lifecycle (`qpair::lifecycle`, sans-I/O): LIVE → CLOSING
//!   (disconnect, drain with a marker and a watchdog, requests closed) → DESTROYED.
//! - `request`: requests and their lifecycle (`request::lifecycle`, sans-I/O, SPDK's request
//!   states): need buffer → RDMA READ from host → execute (the exec layer,
//!   [`target_core::nvme_exec`]) → RDMA WRITE to host → SEND, driven by one function.
//! - `resources`: preallocated receives (64-byte command buffer + separate aligned in-capsule
//!   buffer) and requests (response buffer, bdev I/O), and the work-request kinds.
//! - `stats`: `nvmf_get_stats` counters and resource counts.
//!
//! What both RDMA transports share (the transfer planner, work-request ids, completion
//! queues, shared receive queues, the drain, CM event routing) is [`rdma_plumbing`].
//!
//! Data buffers come from two shared pools registered with every device (8 KiB and 128 KiB
//! buffers), cached per poll group. The data path allocates nothing and takes no lock: the
//! request slots, their `Box<BdevIo>` and their scatter lists are preallocated, work requests
//! are built in place, and completions are polled 32 at a time.

pub mod cm_data;
pub mod opts;

mod accept;
mod device;
mod listener;
mod poll_group;
mod post;
mod qpair;
mod request;
mod resources;
mod stats;
mod transport;

pub use poll_group::RdmaPg;
pub use stats::{DevStats, PgResources};
pub use transport::{PoolCounts, RdmaTransport};

use target_core::registry::{JsonType, TransportAttr, TransportOps};

target_core::register_transport!(
    RDMA_OPS = TransportOps {
        name: "RDMA",
        description: "NVMe over Fabrics on RDMA (RoCE, InfiniBand, iWARP)",
        defaults: opts::defaults,
        create: transport::create,
        options: &[
            TransportAttr::plain(
                "max_srq_depth",
                JsonType::Uint(32),
                "max-srq-depth",
                "Per-poll-group shared receive queue size"
            ),
            TransportAttr::plain(
                "no_srq",
                JsonType::Bool,
                "no-srq",
                "Disable the shared receive queue"
            ),
            TransportAttr::plain(
                "num_cqe",
                JsonType::I32,
                "num-cqe",
                "Number of CQ entries without SRQ"
            ),
            TransportAttr::plain(
                "acceptor_backlog",
                JsonType::I32,
                "acceptor-backlog",
                "Pending connections allowed in the backlog"
            ),
            TransportAttr::plain(
                "no_wr_batching",
                JsonType::Bool,
                "no-wr-batching",
                "Disable work request batching"
            ),
            TransportAttr::plain(
                "ack_timeout",
                JsonType::Uint(32),
                "ack-timeout",
                "ACK timeout in milliseconds"
            ),
            TransportAttr::plain(
                "data_wr_pool_size",
                JsonType::Uint(32),
                "data-wr-pool-size",
                "RDMA data WR pool size"
            ),
        ],
        subsystem_attrs: &[],
        listener_attrs: &[],
    }
);
