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
//!
//! The runtime drives them on the target's reactors:
//!
//! - [`transport`]: registration as `SRP`, options ([`opts`]), RDMA CM listeners, and the
//!   acceptor that decides logins and hands channels to poll groups.
//! - `runtime`: the per-poll-group data path (channels, requests, buffers, completions).
//! - [`sessions`]: the transport-wide nexus table and the sessions shown as controllers.
//! - [`port_id`]: target port ids of subsystems and the initiator names allowed hosts take.

pub mod channel;
pub mod login;
pub mod nexus;
pub mod opts;
pub mod port_id;
pub mod proto;
mod runtime;
pub mod sessions;
pub mod tm;
pub mod transport;

pub use opts::SrpOpts;
pub use runtime::SrpPg;
pub use transport::SrpTransport;
