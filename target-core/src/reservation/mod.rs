//! Reservations of one logical volume, shared by NVMe and SCSI (sans-I/O).
//!
//! One [`Reservation`] per bdev holds the registrants (NVMe hosts by Host Identifier, SCSI
//! I_T nexuses by initiator port and target port), the persistent reservation (type and
//! holder), the generation, the persist-through-power-loss flag and the SPC-2
//! (RESERVE(6/10)) reservation. Its operations take protocol-neutral inputs
//! ([`RegisterAction`], keys, [`ResvType`]) and return [`Effects`]: who to notify
//! ([`Notice`]), whose commands to abort, whether to republish the data path's view and
//! whether to rewrite the `ptpl_file`. The protocol translations live beside their
//! protocols: `nvme::resv` (Reservation Register/Report/Acquire/Release, RESCAP, the
//! notification log page) and `scsi::pr_in` / `scsi::pr_out` / `scsi::reserve`
//! (PERSISTENT RESERVE IN/OUT, RESERVE/RELEASE). Both call the same operations on the same
//! state, so an NVMe host and an SRP initiator on one bdev see one reservation.
//!
//! - [`types`]: reservation types (and their NVMe/SCSI codes), identities, the access table.
//! - [`state`]: the state and its operations.
//! - [`view`]: the immutable snapshot the data path checks commands against.
//! - [`ptpl`] / [`ptpl_file`]: SPDK's `ptpl_file` JSON, and its atomic write.
//!
//! # How it runs
//!
//! The wiring lives outside this module (docs/reservations.md, "How it runs"):
//! `target::VolumeReservation` holds one [`Reservation`] per namespace (a bdev is claimed by
//! one namespace, which is at once an NVMe namespace and a SCSI LU) behind a mutex that only
//! reservation commands and view refreshes take, publishes an [`AccessView`] and moves an
//! atomic epoch after every change, and rewrites the `ptpl_file` ([`ptpl_file::save_state`])
//! before the changing command completes. The data path loads the epoch per command and
//! refreshes its poll group's copy of the view only when it moved, then asks
//! [`AccessView::permits`]: no lock and no allocation while the state does not change.
//! `scsi_exec::reservation` and `nvme_exec::resv_cmd` run the protocol translations on it and
//! deliver the [`Notice`]s (unit attentions; log page 80h and AEN).
//!
//! [`Effects::aborted`] (Preempt and Abort) is not acted on yet: the preempted requesters'
//! outstanding commands are neither aborted nor waited for.

pub mod ptpl;
pub mod ptpl_file;
pub mod state;
pub mod types;
pub mod view;

#[cfg(test)]
mod cross_tests;
#[cfg(test)]
mod tests;

pub use ptpl::PtplError;
pub use state::{
    Effects, KeyCheck, LegacyOutcome, MAX_REGISTRANTS, Notice, NoticeKind, PrError, PtplChange,
    RegisterAction, Registrant, Reservation, Reserved,
};
pub use types::{
    CommandClass, HostId, Initiator, InitiatorPort, Nexus, PROTOCOL_ID_NONE, ResvType, Role,
    Standing, TRANSPORT_ID_LEN, pr_permits,
};
pub use view::{AccessView, CachedStanding};
