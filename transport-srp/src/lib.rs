//! rtgt SRP (SCSI RDMA Protocol) target transport.
//!
//! The protocol logic is sans-I/O and lives in small modules that the runtime drives:
//!
//! - [`proto`]: byte-exact codecs for every SRP information unit.
//! - [`login`]: the login decision (accept parameters or a reject reason).
//! - [`nexus`]: channel grouping per (initiator port, target port) and the multi-channel rules.
//! - [`channel`]: the per-channel state machine (CONNECTING → LIVE → DISCONNECTING → DRAINING →
//!   DISCONNECTED) and credit accounting.
//! - [`tm`]: task management planning.

pub mod channel;
pub mod login;
pub mod nexus;
pub mod proto;
pub mod tm;
