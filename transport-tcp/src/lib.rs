//! NVMe/TCP transport for rtgt: the protocol core, sans-I/O.
//!
//! - [`pdu`]: every NVMe/TCP PDU, encoded into caller buffers and decoded from a byte stream
//!   that arrives in pieces ([`pdu::PduReader`]), with digests and data alignment.
//!
//! The I/O part (sockets on reactors, the registry entry `TCP`, listeners) is planned in
//! `docs/tcp.md` and not built yet.

pub mod pdu;
