//! Reservations in the SCSI exec layer: the volume's shared
//! [`VolumeReservation`](crate::target::VolumeReservation) (one per namespace, so an NVMe
//! host and an SRP initiator on one bdev see one state) bound to SCSI commands.
//!
//! Per command to a logical unit, after the unit attention check and before the device
//! server ([`super::ScsiEngine::drive`]):
//!
//! 1. notices (RESERVATIONS PREEMPTED / RELEASED, REGISTRATIONS PREEMPTED) waiting in the
//!    volume for this nexus become unit attentions in its queue — one atomic load when none
//!    wait;
//! 2. the conflict check: `scsi::pr_access::command_class` and the poll group's view
//!    ([`PgCore::resv_permits`]); a refused command ends with RESERVATION CONFLICT without
//!    touching the bdev;
//! 3. PERSISTENT RESERVE IN, RESERVE(6/10) and RELEASE(6/10) run on the volume's state;
//!    PERSISTENT RESERVE OUT first fetches its parameter list, then runs
//!    ([`run_pr_out`]).
//!
//! PREEMPT AND ABORT ends with [`ScsiAction::AbortPreempted`]: the transport aborts the
//! preempted nexuses' tasks on the LU and the preempted NVMe hosts' commands to the
//! namespace, and responds once they are gone. Notices become unit
//! attentions in the nexus's queue of the LU.

use super::nexus::ItNexus;
use super::nexus_ua::NexusUnitAttentions;
use super::request::{Phase, ScsiAction, ScsiReq};
use crate::reservation::{Initiator, Notice};
use crate::scsi::pr_in::{PERSISTENT_RESERVE_IN, decode_pr_in, execute_pr_in};
use crate::scsi::pr_out::{PERSISTENT_RESERVE_OUT, PrStatus, decode_pr_out, execute_pr_out};
use crate::scsi::reserve::{RELEASE_6, RELEASE_10, RESERVE_6, RESERVE_10, execute_reserve_release};
use crate::scsi::sense::SenseKey;
use crate::scsi::ua::UnitAttention;
use crate::scsi::{ScsiStatus, Sense, Verdict, pr_access};
use crate::target::{PgCore, PreemptAbort};

/// What the reservation step decided for a command.
pub(super) enum ResvStep {
    /// Run the device server.
    Proceed,
    /// The command is answered: GOOD, CHECK CONDITION or parameter data.
    Verdict(Verdict),
    /// RESERVATION CONFLICT.
    Conflict,
    /// PERSISTENT RESERVE OUT: fetch the parameter list, then [`run_pr_out`].
    FetchParams,
}

/// HARDWARE ERROR, INTERNAL TARGET FAILURE: the `ptpl_file` could not be written.
const fn persist_failed() -> Sense {
    Sense::new(SenseKey::HardwareError, 0x44, 0x00)
}

/// Moves the notices the volume holds for `nexus` into its unit attention queue (step 1).
/// Inlined: every command asks, and there is seldom anything to take.
#[inline]
pub(super) fn take_notices(
    core: &PgCore,
    sub: u32,
    nsid: u32,
    lun: u16,
    nexus: &ItNexus,
    ua: &NexusUnitAttentions,
) {
    let Some(vol) = core.reservation(sub, nsid) else {
        return;
    };
    if vol.has_notices() {
        vol.take_notices(Initiator::Scsi(nexus.identity()), |n: Notice| {
            ua.establish(lun, UnitAttention::for_notice(n.kind));
        });
    }
}

fn status(s: PrStatus) -> ResvStep {
    match s {
        PrStatus::Good => ResvStep::Verdict(Verdict::Good),
        PrStatus::ReservationConflict => ResvStep::Conflict,
        PrStatus::CheckCondition(sense) => ResvStep::Verdict(Verdict::CheckCondition(sense)),
    }
}

/// Step 2 alone: whether the volume's reservation lets `nexus` run `cdb` on namespace `nsid`.
pub(super) fn permits(core: &mut PgCore, sub: u32, nsid: u32, nexus: &ItNexus, cdb: &[u8]) -> bool {
    permits_class(core, sub, nsid, nexus, pr_access::command_class(cdb))
}

/// [`permits`] for a command whose class the caller knows (READ/WRITE).
#[inline]
pub(super) fn permits_class(
    core: &mut PgCore,
    sub: u32,
    nsid: u32,
    nexus: &ItNexus,
    class: crate::reservation::CommandClass,
) -> bool {
    core.resv_permits(sub, nsid, Initiator::Scsi(nexus.identity()), class)
}

/// Steps 2 and 3 for a command to the logical unit of namespace `nsid`.
pub(super) fn check(
    core: &mut PgCore,
    nsid: u32,
    nexus: &ItNexus,
    req: &mut ScsiReq,
    scratch: &mut [u8],
) -> ResvStep {
    let cdb_copy = req.cdb;
    let cdb = &cdb_copy[..usize::from(req.cdb_len)];
    if !permits(core, req.sub, nsid, nexus, cdb) {
        return ResvStep::Conflict;
    }
    let opcode = cdb.first().copied().unwrap_or(0);
    if !matches!(
        opcode,
        PERSISTENT_RESERVE_IN
            | PERSISTENT_RESERVE_OUT
            | RESERVE_6
            | RESERVE_10
            | RELEASE_6
            | RELEASE_10
    ) {
        return ResvStep::Proceed;
    }
    let Some(vol) = core.reservation(req.sub, nsid) else {
        return ResvStep::Proceed;
    };
    match opcode {
        PERSISTENT_RESERVE_IN => match decode_pr_in(cdb) {
            Ok(c) => {
                let len = vol.read(|s| execute_pr_in(s, &c, scratch));
                ResvStep::Verdict(Verdict::DataIn { len })
            }
            Err(s) => ResvStep::Verdict(Verdict::CheckCondition(s)),
        },
        PERSISTENT_RESERVE_OUT => match decode_pr_out(cdb, req.out_len) {
            Ok(c) => {
                req.pr_out = Some(c);
                req.wanted_out = u64::from(c.fetch_len);
                ResvStep::FetchParams
            }
            Err(s) => ResvStep::Verdict(Verdict::CheckCondition(s)),
        },
        _ => {
            let nexus = nexus.identity();
            match vol.update(|s| execute_reserve_release(s, nexus, cdb), |_| None) {
                Ok(s) => status(s),
                Err(e) => {
                    tracing::error!("reservation: writing the ptpl_file failed: {e}");
                    ResvStep::Verdict(Verdict::CheckCondition(persist_failed()))
                }
            }
        }
    }
}

/// Runs a PERSISTENT RESERVE OUT whose parameter list has been fetched, and ends it — after
/// the `ptpl_file` write when the change persists: the write runs off the reactor, the
/// request waits ([`ScsiAction::Queued`]) and is resumed on this reactor for `transport`
/// when the write is done ([`persisted`]).
pub(super) fn run_pr_out(
    core: &mut PgCore,
    nexus: &ItNexus,
    transport: usize,
    req: &mut ScsiReq,
) -> ScsiAction {
    let Some(c) = req.pr_out.take() else {
        req.check(Sense::internal_target_failure());
        return super::ScsiEngine::respond(core, req);
    };
    let nsid = req.lun.map_or(0, |l| u32::from(l) + 1);
    let Some(vol) = core.reservation(req.sub, nsid).cloned() else {
        req.check(Sense::lun_not_supported());
        return super::ScsiEngine::respond(core, req);
    };
    let params = req.param.as_ref().map_or(&[][..], |p| {
        let s = p.as_slice();
        &s[..s.len().min(c.fetch_len as usize)]
    });
    let who = nexus.identity();
    let (r, ticket) = vol.update_deferred(
        |s| execute_pr_out(s, who, &c, params),
        |r| (r.status == PrStatus::Good).then_some(&r.effects.notices[..]),
    );
    crate::nvme_exec::notify_hosts(core, req.sub, nsid, &r.effects.notices);
    // PREEMPT AND ABORT: the preempted SCSI nexuses' tasks on the LU and NVMe hosts'
    // commands to the namespace are aborted before the command completes (the transport
    // does it).
    if !r.effects.aborted.is_empty() {
        req.preempted = Some(PreemptAbort::new(req.sub, nsid, &r.effects.aborted));
    }
    match r.status {
        PrStatus::Good => req.status = ScsiStatus::Good,
        PrStatus::ReservationConflict => req.status = ScsiStatus::ReservationConflict,
        PrStatus::CheckCondition(s) => req.check(s),
    }
    if let Some(t) = ticket {
        // The reply waits until the state is on disk (SPC-4 APTPL): the write, two fsyncs,
        // runs on the ptpl_file thread; this reactor goes on serving the other queues.
        let target = std::sync::Arc::clone(core.target());
        let (reactor, token) = (core.index(), req.token);
        req.persist = Some((std::sync::Arc::clone(&vol), t));
        vol.persist_later(t, move |_| {
            let sent = target.reactors().send_ctrl(reactor, move |ctx| {
                crate::target::resume_transport_request(ctx, transport, token);
            });
            if let Err(e) = sent {
                tracing::warn!("PERSISTENT RESERVE OUT: cannot resume the command: {e}");
            }
        });
        return ScsiAction::Queued;
    }
    finish_pr_out(core, req)
}

/// A PERSISTENT RESERVE OUT's `ptpl_file` write is done: it ends, with HARDWARE ERROR if the
/// state did not reach the disk (the change stays, as in SPDK).
pub(super) fn persisted(core: &mut PgCore, req: &mut ScsiReq) -> ScsiAction {
    if let Some((vol, t)) = req.persist.take()
        && !vol.is_durable(t)
    {
        req.check(persist_failed());
    }
    finish_pr_out(core, req)
}

fn finish_pr_out(core: &mut PgCore, req: &mut ScsiReq) -> ScsiAction {
    req.phase = Phase::Done;
    let action = super::ScsiEngine::respond(core, req);
    if req.preempted.is_some() {
        return ScsiAction::AbortPreempted;
    }
    action
}
