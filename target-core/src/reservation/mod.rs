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
//! # How it runs (design for the wiring)
//!
//! *Ownership.* The authoritative state of a bdev is owned by one reactor (the bdev's home:
//! the reactor that owns the namespace/LU object on the control path). Every
//! reservation-changing command — NVMe Register/Acquire/Release, SCSI PERSISTENT RESERVE
//! OUT, RESERVE/RELEASE — is sent there by message from whichever reactor received it, runs
//! there, and its completion is sent back. These commands are rare (cluster membership
//! changes), so a message round trip is cheap, and no lock is needed because one thread
//! owns the state.
//!
//! *Publication.* When [`Effects::changed`] is set, the owner builds an [`AccessView`] and
//! sends it to every reactor (`for_each_reactor`); each reactor replaces its copy and
//! acknowledges. The command completes only after every acknowledgement (and, with
//! [`Effects::persist`], after the `ptpl_file` write on a blocking thread): once a host sees
//! its Acquire complete, no reactor admits a conflicting command any more. This is SPDK's
//! `ns_reservation_pg_update` sequence without its global state.
//!
//! *Per command.* A session (NVMe controller queue pair, SRP channel) caches its
//! [`Standing`] with the view's epoch ([`view::CachedStanding`]); per command it checks
//! `standing.permits(class)`: a few branches, no lock, no allocation. A conflicting
//! command completes with Reservation Conflict without touching the bdev.
//!
//! *Preempt and Abort.* [`Effects::aborted`] lists the preempted requesters. The owner
//! includes it in the view update; each reactor aborts (or waits for) its outstanding
//! commands from those requesters to this bdev before acknowledging, so the Acquire /
//! PERSISTENT RESERVE OUT completes only when none of them can still write.
//!
//! *Notifications.* Each [`Notice`] goes to its recipient: for an NVMe host, a
//! Reservation Notification log page (`nvme::resv_log`) on each of the host's controllers
//! that has the namespace, masked by its Reservation Notification Mask, with an AEN; for an
//! I_T nexus, a unit attention in its queue for the LU (`scsi::ua`).
//!
//! *Persistence.* At namespace creation the state comes from the `ptpl_file`
//! ([`ptpl_file::load_state`]: read, then [`ptpl::decode`]; the bdev UUID must match).
//! After a change with [`Effects::persist`], [`ptpl_file::save_state`] ([`ptpl::encode`],
//! then temp file, fsync, rename, fsync of the directory) runs on a blocking thread before
//! the command completes; a failed write fails the command (NVMe Internal Error, SCSI
//! HARDWARE ERROR) — the state change stays, as in SPDK.

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
