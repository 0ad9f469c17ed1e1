//! NVMe/TCP transport for rtgt: the protocol core, sans-I/O.
//!
//! - [`pdu`]: every NVMe/TCP PDU, encoded into caller buffers and decoded from a byte stream
//!   that arrives in pieces ([`pdu::PduReader`]), with digests and data alignment.
//! - [`conn`]: the controller side of one connection: ICReq/ICResp negotiation, command
//!   capsules, in-capsule data, R2T/H2CData flow control, C2HData (with the SUCCESS
//!   optimisation), responses, and termination requests on protocol errors.
//! - [`host`]: the host side, for tests and the Rust NVMe/TCP test host.
//!
//! The I/O part (sockets on reactors, the registry entry `TCP`, listeners) is planned in
//! `docs/tcp.md` and not built yet.

pub mod conn;
pub mod host;
pub mod pdu;

#[cfg(test)]
mod testing;
