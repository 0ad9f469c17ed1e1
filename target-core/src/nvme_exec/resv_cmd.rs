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
//! Not done here yet (docs/reservations.md, Status): Preempt and Abort does not abort the
//! preempted hosts' outstanding commands; notices to NVMe hosts (log page 80h, AEN) are not
//! delivered.

use super::queue::Queue;
use super::request::{NvmeAction, NvmeCtx, NvmeReq, admit, complete, release};
use crate::nvme::Status;
use crate::nvme::resv::{self, ResvCommand, opc};
use crate::reservation::{CommandClass, Initiator, MAX_REGISTRANTS};
use crate::target::{Admission, AdmitKind};

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
    let status = run(cx, req, sub, nsid, who, &cmd);
    release(cx.core, req);
    let data_len = req.data_len;
    req.cqe = q.cqe(&req.sqe, status);
    req.data_len = if status.is_success() { data_len } else { 0 };
    NvmeAction::Complete
}

fn run(
    cx: &mut NvmeCtx<'_>,
    req: &mut NvmeReq,
    sub: u32,
    nsid: u32,
    who: Initiator,
    cmd: &ResvCommand,
) -> Status {
    let Some(vol) = cx.core.reservation(sub, nsid).cloned() else {
        return Status::INVALID_NAMESPACE;
    };
    let Initiator::Nvme(host) = who else {
        return Status::INTERNAL_ERROR;
    };
    let Some(io) = req.io.as_mut() else {
        return Status::INTERNAL_ERROR;
    };
    if let ResvCommand::Report { len, eds } = *cmd {
        // The largest structure (extended, 128 registrants) fits on the stack: no allocation.
        let mut out = [0u8; REPORT_MAX_LEN];
        let want = (len as usize).min(req.sgl.len() as usize).min(out.len());
        let n = match vol.read(|s| resv::report(s, eds, &mut out[..want])) {
            Ok(n) => n,
            Err(s) => return s,
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
        return Status::SUCCESS;
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
        return Status::DATA_SGL_LENGTH_INVALID;
    }
    let r = vol.update(
        |s| resv::execute(cmd, s, host, &data[..need]),
        |r| r.as_ref().ok().map(|fx| &fx.notices[..]),
    );
    match r {
        Ok(Ok(fx)) => {
            if !fx.aborted.is_empty() {
                tracing::info!(
                    "Reservation Acquire (preempt and abort): {} registrant(s) preempted; \
                     their outstanding commands are not aborted (not wired yet)",
                    fx.aborted.len()
                );
            }
            Status::SUCCESS
        }
        Ok(Err(s)) => s,
        Err(e) => {
            tracing::error!("reservation: writing the ptpl_file failed: {e}");
            Status::INTERNAL_ERROR
        }
    }
}
