//! NVMe reservation commands on the volume's shared
//! [`VolumeReservation`](crate::target::VolumeReservation) (the same state SCSI PERSISTENT
//! RESERVE uses for the LU on the bdev), and the conflict check of the other I/O commands.
//!
//! Reservation Register (0Dh), Acquire (11h) and Release (15h) decode with
//! `nvme::resv::decode`, take the host's data from the request's buffer and run
//! `nvme::resv::execute` under the volume's lock; Report (0Eh) writes the Reservation Status
//! data structure into the request's buffers. The requester is the controller's host,
//! identified by the 128-bit Host Identifier of its Connect ([`super::Association::host_id`]).
//!
//! Notices for NVMe hosts ([`notify_hosts`]) reach every controller of the host as a
//! Reservation Notification log page and AEN; Reservation Persistence (feature 83h) is the
//! volume's ([`persistence_feature`]).
//!
//! Preempt and Abort aborts the preempted hosts' (and SCSI nexuses') commands to the
//! namespace and completes once they are gone ([`park_until_aborted`]).

use super::queue::Queue;
use super::request::{AerDone, NvmeAction, NvmeCtx, NvmeReq, admit, complete, release};
use crate::nvme::resv::{self, ResvCommand, opc};
use crate::nvme::spec::admin_opc;
use crate::nvme::{Completion, NamespaceView, Sqe, Status};
use crate::reservation::{CommandClass, HostId, Initiator, MAX_REGISTRANTS, Notice, NoticeKind};
use crate::target::{Admission, AdmitKind, PgCore, PreemptAbort, with_poll_group};

/// The largest Reservation Status data structure: the extended one with every registrant.
const REPORT_MAX_LEN: usize =
    resv::REPORT_EXT_HEADER_LEN + MAX_REGISTRANTS * resv::REPORT_EXT_ENTRY_LEN;

/// Whether `opcode` is one of the four reservation I/O commands.
pub(super) fn is_reservation(opcode: u8) -> bool {
    matches!(
        opcode,
        opc::REGISTER | opc::REPORT | opc::ACQUIRE | opc::RELEASE
    )
}

/// The controller's host as a reservation requester.
fn requester(q: &Queue) -> Option<Initiator> {
    q.association().map(|c| Initiator::Nvme(c.host_id()))
}

/// The conflict check of an I/O command to namespace `nsid` of subsystem `sub`: one atomic
/// load and a few branches while nothing is reserved. `false` is Reservation Conflict.
#[inline]
pub(super) fn check(cx: &mut NvmeCtx<'_>, q: &Queue, sub: u32, nsid: u32, opcode: u8) -> bool {
    let Some(who) = requester(q) else {
        return true;
    };
    let class = resv::command_class(opcode);
    class == CommandClass::Reservation || cx.core.resv_permits(sub, nsid, who, class)
}

/// Runs a reservation command on namespace `nsid` (which exists and the host sees).
pub(super) fn execute(
    cx: &mut NvmeCtx<'_>,
    q: &mut Queue,
    req: &mut NvmeReq,
    sub: u32,
    nsid: u32,
) -> NvmeAction {
    let Some(who) = requester(q) else {
        return complete(q, req, Status::INTERNAL_ERROR);
    };
    let cmd = match resv::decode(&req.sqe, Ok(req.sgl.len())) {
        Ok(c) => c,
        Err(s) => return complete(q, req, s),
    };
    // Another nexus's SPC-2 reservation refuses even these (the operations check keys).
    if !cx
        .core
        .resv_permits(sub, nsid, who, resv::command_class(req.sqe.opcode()))
    {
        return complete(q, req, resv::RESERVATION_CONFLICT);
    }
    match admit(cx, req, sub, AdmitKind::Io(nsid)) {
        Admission::Go => {}
        Admission::Queued => return NvmeAction::Queued,
        Admission::InvalidNamespace => return complete(q, req, Status::INVALID_NAMESPACE),
        Admission::Inactive => return complete(q, req, Status::ABORTED_SQ_DELETION),
    }
    let (status, aborted) = run(cx, req, sub, nsid, who, &cmd);
    release(cx.core, req);
    let data_len = req.data_len;
    req.cqe = q.cqe(&req.sqe, status);
    req.data_len = if status.is_success() { data_len } else { 0 };
    match aborted {
        Some(pa) => park_until_aborted(cx, q, req, pa),
        None => NvmeAction::Complete,
    }
}

/// Preempt and Abort: the preempted initiators' commands to the namespace that are already
/// past the reservation check are aborted on every poll group
/// ([`crate::target::Target::preempt_abort`]: NVMe hosts' commands end with Command Aborted
/// due to Preempt and Abort, SCSI nexuses' tasks with TASK ABORTED); the Acquire (its
/// completion is ready in `req.cqe`) completes once they are gone. Other initiators' commands
/// are not waited for.
fn park_until_aborted(
    cx: &mut NvmeCtx<'_>,
    q: &Queue,
    req: &NvmeReq,
    pa: PreemptAbort,
) -> NvmeAction {
    let target = std::sync::Arc::clone(cx.core.target());
    let me = q.me;
    let done = AerDone {
        cid: req.sqe.cid(),
        cqe: req.cqe,
    };
    let t = std::sync::Arc::clone(&target);
    target.preempt_abort(pa, move || {
        let sent = t.reactors().send_ctrl(me.reactor, move |ctx| {
            with_poll_group(ctx, |pg| pg.parked_done(me.transport, me.key, done));
        });
        if let Err(e) = sent {
            tracing::warn!("Reservation Acquire (preempt and abort): cannot complete: {e}");
        }
    });
    NvmeAction::Parked
}

/// Runs the command; with a preempt and abort that removed registrants, also what to abort
/// before completing.
fn run(
    cx: &mut NvmeCtx<'_>,
    req: &mut NvmeReq,
    sub: u32,
    nsid: u32,
    who: Initiator,
    cmd: &ResvCommand,
) -> (Status, Option<PreemptAbort>) {
    let Some(vol) = cx.core.reservation(sub, nsid).cloned() else {
        return (Status::INVALID_NAMESPACE, None);
    };
    let Initiator::Nvme(host) = who else {
        return (Status::INTERNAL_ERROR, None);
    };
    let Some(io) = req.io.as_mut() else {
        return (Status::INTERNAL_ERROR, None);
    };
    if let ResvCommand::Report { len, eds } = *cmd {
        // The largest structure (extended, 128 registrants) fits on the stack: no allocation.
        let mut out = [0u8; REPORT_MAX_LEN];
        let want = (len as usize).min(req.sgl.len() as usize).min(out.len());
        let n = match vol.read(|s| resv::report(s, eds, &mut out[..want])) {
            Ok(n) => n,
            Err(s) => return (s, None),
        };
        let mut done = 0;
        for b in io.bufs.iter_mut() {
            if done == n {
                break;
            }
            b.reset();
            let k = (n - done).min(b.len());
            b.as_mut_slice()[..k].copy_from_slice(&out[done..done + k]);
            done += k;
        }
        req.data_len = done as u32;
        return (Status::SUCCESS, None);
    }
    let mut data = [0u8; 16];
    let need = cmd.data_out_len() as usize;
    let mut got = 0;
    for b in io.bufs.iter() {
        let s = b.as_slice();
        let k = (need - got).min(s.len());
        data[got..got + k].copy_from_slice(&s[..k]);
        got += k;
        if got == need {
            break;
        }
    }
    if got < need {
        return (Status::DATA_SGL_LENGTH_INVALID, None);
    }
    let r = vol.update(
        |s| resv::execute(cmd, s, host, &data[..need]),
        |r| r.as_ref().ok().map(|fx| &fx.notices[..]),
    );
    match r {
        Ok(Ok(fx)) => {
            notify_hosts(cx.core, sub, nsid, &fx.notices);
            let abort = (!fx.aborted.is_empty()).then(|| PreemptAbort::new(sub, nsid, &fx.aborted));
            (Status::SUCCESS, abort)
        }
        Ok(Err(s)) => (s, None),
        Err(e) => {
            tracing::error!("reservation: writing the ptpl_file failed: {e}");
            (Status::INTERNAL_ERROR, None)
        }
    }
}

/// Get / Set Features Reservation Persistence (83h) of namespace `sqe.nsid()`, which live in
/// the volume's state rather than the controller: `None` for any other command.
pub(super) fn persistence_feature(
    core: &PgCore,
    sub: u32,
    sqe: &Sqe,
    active: &[NamespaceView],
) -> Option<Completion> {
    let get = match sqe.opcode() {
        admin_opc::GET_FEATURES => true,
        admin_opc::SET_FEATURES => false,
        _ => return None,
    };
    if sqe.is_fabrics() || sqe.cdw10() as u8 != resv::FID_RESV_PERSISTENCE {
        return None;
    }
    let nsid = sqe.nsid();
    let vol = active
        .iter()
        .any(|n| n.nsid == nsid)
        .then(|| core.reservation(sub, nsid))
        .flatten();
    let Some(vol) = vol else {
        return Some(Completion::err(Status::INVALID_FIELD));
    };
    if get {
        return Some(match (sqe.cdw10() >> 8) & 7 {
            0 => Completion::ok(vol.read(resv::persistence_dw0)),
            1 | 2 => Completion::ok(0),
            // Capabilities: namespace specific, changeable.
            3 => Completion::ok(1 << 1 | 1 << 2),
            _ => Completion::err(Status::INVALID_FIELD),
        });
    }
    if sqe.cdw10() & 1 << 31 != 0 {
        return Some(Completion::err(Status::FEATURE_NOT_SAVEABLE));
    }
    let on = resv::persistence_from_cdw11(sqe.cdw11());
    Some(match vol.update(|s| s.set_ptpl(on), |_| None) {
        Ok(Ok(_)) => Completion::ok(0),
        Ok(Err(e)) => Completion::err(resv::status_of(e)),
        Err(e) => {
            tracing::error!("reservation: writing the ptpl_file failed: {e}");
            Completion::err(Status::INTERNAL_ERROR)
        }
    })
}

/// Delivers the NVMe hosts' reservation notices of namespace `nsid` of subsystem `sub`: every
/// controller of the recipient host, on whichever reactor its admin queue lives, queues a
/// Reservation Notification log page and, unless masked, raises the AEN. The notices travel
/// by message; the command that caused them does not wait for them.
pub(crate) fn notify_hosts(core: &PgCore, sub: u32, nsid: u32, notices: &[Notice]) {
    let list: Vec<(HostId, NoticeKind)> = notices
        .iter()
        .filter_map(|n| match n.to {
            Initiator::Nvme(h) => Some((h, n.kind)),
            Initiator::Scsi(_) => None,
        })
        .collect();
    if list.is_empty() {
        return;
    }
    let sent = core.target().reactors().for_each_reactor(
        move |ctx| {
            with_poll_group(ctx, |pg| pg.reservation_notices(sub, nsid, &list));
        },
        |_| {},
    );
    if let Err(e) = sent {
        tracing::warn!("cannot deliver reservation notices: {e}");
    }
}
