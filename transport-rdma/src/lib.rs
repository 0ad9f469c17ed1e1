//! rtgt NVMe-oF RDMA transport, registered as `RDMA`.
//!
//! - [`opts`]: SPDK's RDMA option set and defaults, decoded relaxed, dumped in SPDK's order.
//! - `acceptor`: the RDMA CM event channel, listeners, and a poller on reactor 0 that checks
//!   each connect request's NVMe/RDMA private data ([`cm_data`]) and hands the connection to a
//!   poll group (admin queues round-robin, I/O queues to the least loaded group).
//! - `pg` ([`RdmaPg`]): per reactor, a completion queue per device (watched through a completion
//!   channel) with a shared receive queue (or per-queue-pair receive queues with `no_srq`),
//!   queue pairs, and the request state machine: need buffer → RDMA READ from host → execute
//!   (the exec layer, [`target_core::nvme_exec`]) → RDMA WRITE to host → SEND, with requests waiting
//!   for buffers or send-queue space replayed in SPDK's fixed order, work requests batched per
//!   poll, and teardown that drains before freeing anything.
//! - `res` / `wr`: preallocated receives (64-byte command buffer + separate aligned in-capsule
//!   buffer), requests (response buffer, bdev I/O), and RDMA READ/WRITE planning over keyed
//!   SGLs.
//!
//! Data buffers come from two shared pools registered with every device (8 KiB and 128 KiB
//! buffers), cached per poll group. The data path allocates nothing and takes no lock: the
//! request slots, their `Box<BdevIo>` and their scatter lists are preallocated, work requests
//! are built in place, and completions are polled 32 at a time.

pub mod cm_data;
pub mod opts;

mod acceptor;
mod pg;
mod res;
mod transport;
mod wr;

pub use pg::{DevStats, PgResources, RdmaPg};
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
