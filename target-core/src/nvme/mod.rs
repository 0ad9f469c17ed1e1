//! NVMe controller logic (sans-I/O): fabrics, admin and I/O command handling and discovery.
//!
//! Nothing here does I/O, spawns threads, takes locks or keeps references into the target model:
//! commands come in as bytes and plain views, and what to do comes back as values (data to send,
//! a status, a bdev operation to run). The exec layer (`nvme_exec`) and the transports drive it.
//!
//! # How the pieces are called
//!
//! Per received capsule, the transport:
//! 1. copies the SQE with [`Sqe::from_bytes`] and decodes SGL1 with [`sgl::parse`] against the
//!    queue's [`SglPolicy`] (from [`TransportLimits::io_sgl_policy`] /
//!    [`TransportLimits::admin_sgl_policy`]), fetching host data for write-direction commands;
//! 2. on an unconnected queue, only a Connect is valid (others: [`Status::INVALID_OPCODE`]):
//!    [`parse_connect`], then the exec layer looks up the subsystem, checks [`host_allowed`],
//!    and either creates a [`Controller`] ([`check_admin_connect`], [`CntlidAllocator`],
//!    [`Controller::new`]) or attaches an I/O queue ([`Controller::accept_io_queue`]);
//! 3. on the admin queue: [`Controller::admin`] → [`AdminOutcome`];
//! 4. on an I/O queue: [`io::decode`] → [`IoCmd`] for the bdev (with [`io::dsm_ranges`] for
//!    Dataset Management), completing with a [`Cqe`].
//!
//! Events: [`Controller::ns_changed`] and [`Controller::discovery_log_changed`] may return an
//! [`AerCompletion`] to send; [`Controller::keep_alive_expired`] tells when to tear the
//! association down.
//!
//! Reservations: [`resv`] decodes Reservation Register/Report/Acquire/Release and runs them
//! on the volume's shared [`crate::reservation::Reservation`]; [`resv_log`] keeps a
//! controller's Reservation Notification log page (not wired into [`Controller`] yet).
//!
//! Asymmetric Namespace Access over the shared [`crate::ana::AnaModel`]: [`ana`] (Identify
//! fields, path-related status per state, the ANA change notice) and [`ana_log`] (the ANA log
//! page, LID 0Ch) — not wired into [`Controller`] yet.

pub mod aer;
pub mod ana;
pub mod ana_log;
pub mod auth;
pub mod cntlid;
pub mod controller;
pub mod cqe;
pub mod discovery;
pub mod fabrics;
pub mod features;
pub mod identify;
pub mod io;
pub mod log_page;
pub mod nqn;
pub mod regs;
pub mod resv;
pub mod resv_log;
pub mod sgl;
pub mod spec;
pub mod sqe;
pub mod view;

#[cfg(test)]
mod tests;

pub use aer::{AerCompletion, AsyncEvent};
pub use cntlid::CntlidAllocator;
pub use controller::{AdminOutcome, Completion, Controller};
pub use cqe::Cqe;
pub use discovery::{DiscoveryEntry, DiscoveryLog, Tsas};
pub use fabrics::{Connect, ConnectReject, check_admin_connect, host_allowed, parse_connect};
pub use io::{DsmRange, IoCmd};
pub use nqn::Nqn;
pub use regs::CcChange;
pub use sgl::{DataSgl, KeyedSgl, SglDescriptor, SglPolicy};
pub use spec::{DISCOVERY_NQN, Status};
pub use sqe::{Direction, Sqe};
pub use view::{AnaView, NamespaceView, SubsystemKind, SubsystemView, TransportLimits};
