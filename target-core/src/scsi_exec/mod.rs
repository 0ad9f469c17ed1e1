//! The SCSI execution layer shared by SCSI transports (SRP now): SCSI commands on the target
//! model and its bdevs, as [`crate::nvme_exec`] does for NVMe. The sans-I/O [`crate::scsi`] module
//! decides what a CDB means; this layer binds it to the poll group (admission, the
//! namespace's I/O channel) without knowing how bytes move.
//!
//! - [`ScsiEngine`]: one per transport per poll group. It keeps the [`LuMap`] of every
//!   subsystem the transport serves there (built from the poll group's namespaces on first
//!   use, dropped by [`ScsiEngine::invalidate`] when they change) and the device server's
//!   parameter-data workspace, and drives requests;
//! - [`ScsiReq`]: a command's exec-layer state, embedded in the transport's preallocated
//!   request (with its preallocated bdev I/O, whose buffers hold the data);
//! - [`ItNexus`]: the I_T nexus a command came through (initiator port, target port);
//! - `io_bdev`: media commands as bdev operations, and bdev completions as sense.
//!
//! # The request path
//!
//! ```text
//! IU ─▶ (transport decodes it) ─▶ ScsiEngine::start ─▶ drive() ─▶ ScsiAction
//!   Queued          ─▶ (subsystem resumes) TransportPollGroup::resume_request ─▶ drive()
//!   NeedBuffers(n)  ─▶ (transport fills req.io.bufs, maybe after waiting) ─▶ drive()
//!   FetchDataOut    ─▶ (transport moves data-out) ─▶ ScsiReq::data_out_received ─▶ drive()
//!   Submitted       ─▶ bdev completion ─▶ io_done() ─▶ ScsiAction
//!   Busy            ─▶ (bdev backend full; later) ─▶ drive()
//!   Respond         ─▶ (transport sends data_in_len bytes, then status and sense)
//! ```
//!
//! Admission, the device server, data-in copies, multi-operation commands (UNMAP ranges,
//! WRITE SAME) and bdev status → sense all happen here; the transport moves IUs and data,
//! owns its buffers, and handles task management and aborts (calling
//! [`ScsiEngine::abandon`] for a request that ends without a response). Nothing on the I/O
//! path allocates or takes a lock: the request, its bdev I/O and the LU map are prepared
//! ahead.
//!
//! # What a transport provides
//!
//! Its index in the target and [`LuLimits`] (largest transfer, data buffer size), a 48-bit
//! generation-tagged token per request (admission replays and bdev I/O tags carry it), data
//! buffers of `io_unit_size` bytes on demand, an [`ItNexus`] per session, and the wire.
//!
//! # Per-volume and per-nexus state (where reservations, unit attentions and ALUA go)
//!
//! A bdev is claimed by exactly one namespace, and a subsystem's namespace is at once an NVMe
//! namespace (NSID *n*, for NVMe transports) and a SCSI logical unit (LUN *n* − 1, here). Both
//! exec layers reach the volume through the same poll-group namespace entry
//! (`PgCore::namespace(subsystem, nsid)`, [`crate::target::AdmitKind::Io`] with the NSID, the
//! namespace's bdev channel), so state kept per namespace is shared by both protocols by
//! construction:
//!
//! - per volume: the namespace's [`crate::target::VolumeReservation`] (see
//!   `reservation.rs` here) and the namespace's ANA group in the subsystem's
//!   [`crate::ana::AnaModel`];
//! - per volume per poll group: the published [`crate::reservation::AccessView`] beside the
//!   namespace's admission gate, read by `nvme_exec` for an NVMe command and by [`ScsiEngine`] for
//!   a SCSI command before the bdev is touched;
//! - per LU per poll group: [`MappedLu`] (the SCSI description of the namespace), rebuilt
//!   when namespaces change;
//! - per I_T nexus: [`ItNexus`] — its reservation identity ([`ItNexus::identity`]) — and
//!   [`NexusUnitAttentions`], its unit attention queue per LU, shared by the nexus's channels
//!   and known to the subsystem (`Subsystem::scsi_unit_attention`) (the NVMe counterpart is
//!   the controller: host identifier, AEN and log pages);
//! - per target port (an SRP listener): the ANA state of each group is the ALUA state of
//!   the port; the nexus names its listener ([`ItNexus::listener`]) and, with ANA reporting,
//!   its target port group ([`ItNexus::tpg_id`]); the state is read per command from the
//!   poll group's ANA snapshot (`PgCore::ana_state`, the index cached in
//!   [`ItNexus::ana_cache`]), REPORT TARGET PORT GROUPS from the same snapshot
//!   (`PgCore::alua_tpgs`).
//!
//! The checks slot into [`ScsiEngine::drive`] between admission and the device server
//! (unit attention, then ALUA state — wired —, then reservation conflict), each a branch when
//! nothing is pending.

mod caw;
mod engine;
mod io_bdev;
mod lu_map;
mod mode_select;
mod nexus;
mod nexus_ua;
mod request;
mod reservation;
mod task_set;
#[cfg(test)]
mod tests;

pub use engine::{HostMatcher, ScsiEngine};
pub use io_bdev::bdev_sense;
pub use lu_map::{LuLimits, LuMap, MappedLu, logical_unit};
pub use nexus::ItNexus;
pub use nexus_ua::NexusUnitAttentions;
pub use request::{ScsiAction, ScsiCommand, ScsiReq};
pub use task_set::logical_unit_reset;
