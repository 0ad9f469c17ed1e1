//! A Rust NVMe/RDMA test host: it speaks the NVMe over Fabrics RDMA binding over the fabric's
//! active side (RDMA CM connect with private data, command capsules, keyed SGLs over its own
//! registered memory and memory windows, in-capsule data), so that tests can drive a target
//! on the simulated fabric the way the Linux host would, and also break the rules on purpose.
//!
//! - [`HostQueue`]: one queue: connect, submit, poll, wait; pipelined up to its depth.
//! - [`authenticate`]: DH-HMAC-CHAP on a queue whose Connect asked for it.
//! - [`HostCtrl`]: a controller: admin queue bring-up (Connect, CC.EN, Identify, Number of
//!   Queues) and I/O queues, with helpers for properties, Identify, logs and Keep Alive.

mod auth;
mod ctrl;
mod env;
mod io;
mod queue;

pub use auth::{AUTH_AL, DhchapOpts, authenticate, authenticate_if_asked_on, refused_reason};
pub use ctrl::{
    ConnectOpts, HostCtrl, authenticate_if_asked, fabrics_connect, fabrics_sqe, nsid_list, pattern,
    pattern_block, read_sqe, rw_sqe, write_sqe,
};
pub use env::{HOSTNQN, NvmfEnv};
pub use io::{Mode, Workload, read_verify, write_all, write_read_verify};
pub use queue::{CmOverride, Completion, Data, HostError, HostQueue, QueueOpts, TIMEOUT};
