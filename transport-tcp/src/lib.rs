//! NVMe/TCP transport for rtgt, registered as `TCP`.
//!
//! The protocol core, sans-I/O:
//! - [`pdu`]: every NVMe/TCP PDU, encoded into caller buffers and decoded from a byte stream
//!   that arrives in pieces ([`pdu::PduReader`]), with digests and data alignment.
//! - [`conn`]: the controller side of one connection: ICReq/ICResp negotiation, command
//!   capsules, in-capsule data, R2T/H2CData flow control, C2HData (with the SUCCESS
//!   optimisation), responses, and termination requests on protocol errors.
//! - [`host`]: the host side, for tests and the Rust NVMe/TCP test host.
//!
//! The runtime:
//! - [`opts`]: SPDK's TCP option set and defaults.
//! - `transport`: the transport object, the shared data buffer pool, discovery entries.
//! - `listener`: listening sockets (IPv4, IPv6) and the acceptor poller on reactor 0.
//! - `poll_group` ([`TcpPg`]): per reactor, the connections' sockets in one epoll instance
//!   (the reactor's wake-up fd), the poll, the keep-alive timer.
//! - `qpair`: one connection: socket, machine, exec-layer queue, receive buffer, per-slot
//!   requests and the batched send queue.
//! - `request`: the machine's actions carried out through the exec layer; teardown.
//! - `socket`: socket setup and the epoll wrapper.
//!
//! The data path allocates nothing and takes no lock: slots, their in-capsule buffers, the
//! receive buffer and the send queue are allocated with the connection; data buffers come from
//! the shared pool through the poll group's cache.

pub mod conn;
pub mod host;
pub mod opts;
pub mod pdu;

mod listener;
mod poll_group;
mod qpair;
mod request;
mod socket;
mod transport;

pub use poll_group::TcpPg;
pub use transport::TcpTransport;

use target_core::registry::{JsonType, TransportAttr, TransportOps};

target_core::register_transport!(
    TCP_OPS = TransportOps {
        name: "TCP",
        description: "NVMe over Fabrics on TCP",
        defaults: opts::defaults,
        create: transport::create,
        options: &[
            TransportAttr::plain(
                "c2h_success",
                JsonType::Bool,
                "c2h-success",
                "SUCCESS in the last C2HData PDU instead of a response (when the host allows)"
            ),
            TransportAttr::plain(
                "sock_priority",
                JsonType::Uint(32),
                "sock-priority",
                "SO_PRIORITY of accepted sockets (0-16)"
            ),
        ],
        subsystem_attrs: &[],
        listener_attrs: &[],
    }
);

#[cfg(test)]
mod testing;
