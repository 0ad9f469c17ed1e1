//! What task management does to a logical unit beyond aborting tasks (SAM-5 7, SPC-4 5.13):
//! the transport aborts the tasks; this is the rest.
//!
//! - LOGICAL UNIT RESET ([`logical_unit_reset`]): the SPC-2 reservation (RESERVE(6/10)) is
//!   cleared — persistent reservations survive resets — and BUS DEVICE RESET FUNCTION
//!   OCCURRED (29h/03h) is established for every other I_T nexus on the LU.
//! - Tasks of other nexuses that a LOGICAL UNIT RESET, CLEAR TASK SET or PREEMPT AND ABORT
//!   aborts end with TASK ABORTED status ([`super::ScsiEngine::task_aborted`]): the control
//!   page reports TAS = 1, as LIO answers by default (`emulate_tas`). With TAS = 1, SAM-5
//!   establishes no COMMANDS CLEARED BY ANOTHER INITIATOR unit attention for them; the
//!   requesting nexus's own tasks end without a response (it knows).

use super::nexus::ItNexus;
use crate::scsi::ua::UnitAttention;
use crate::target::PgCore;

/// The logical-unit part of a LOGICAL UNIT RESET of `lun` of subsystem `sub`, asked by
/// `requester`.
pub fn logical_unit_reset(core: &PgCore, sub: u32, lun: u16, requester: &ItNexus) {
    let nsid = u32::from(lun) + 1;
    if let Some(vol) = core.reservation(sub, nsid)
        && let Err(e) = vol.update(|s| s.lu_reset(), |_| None)
    {
        // Cannot happen: an SPC-2 reservation does not persist.
        tracing::error!("LOGICAL UNIT RESET: writing the ptpl_file failed: {e}");
    }
    if let Some(s) = core.subsystem(sub) {
        s.scsi_unit_attention(
            lun,
            UnitAttention::LogicalUnitReset,
            Some(requester.identity()),
        );
    }
}
