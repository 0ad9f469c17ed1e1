//! I/O commands on bdevs (nvmet's `io-cmd-bdev.c`): decoding against the namespace,
//! admission, bdev submission, the multi-operation commands (Write Zeroes with FUA on a
//! volatile cache, Dataset Management ranges), and completions to NVMe status.

use super::admin_cmd::namespace_view;
use super::fused::{self, FusedRole};
use super::queue::Queue;
use super::request::{NvmeAction, NvmeCtx, NvmeReq, admit, complete, release};
use super::resv_cmd;
use crate::bdev::{BdevIo, BdevOp, IoStatus};
use crate::nvme::{IoCmd, NamespaceView, Status, ana, io};
use crate::target::{Admission, AdmitKind};

/// What follows the bdev operation in flight, for commands that take more than one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Followup {
    /// Nothing: one bdev operation.
    Single,
    /// Write Zeroes with FUA on a volatile cache: a Flush follows.
    FlushAfter,
    /// Dataset Management: deallocate range `next` onward, of `total`.
    Deallocate { next: u16, total: u16 },
    /// The Compare of a fused Compare + Write ([`super::fused`]).
    FusedCompare,
    /// The Write of a fused Compare + Write.
    FusedWrite,
}

/// Runs an I/O command on an I/O queue.
pub(super) fn execute(cx: &mut NvmeCtx<'_>, q: &mut Queue, req: &mut NvmeReq) -> NvmeAction {
    if req.fused != FusedRole::None {
        return fused::execute(cx, q, req);
    }
    let Some(sub) = q.subsystem else {
        return complete(q, req, Status::INTERNAL_ERROR);
    };
    let nsid = req.sqe.nsid();
    // A namespace the controller's host does not see is not active for it: Invalid
    // Namespace or Format, as for an NSID nothing is behind.
    // One lookup: the view and the ANA group of the namespace, if the host sees it.
    let (ns, group) = match cx.core.namespace(sub, nsid).filter(|n| {
        n.visible_hosts.is_none() || q.association().is_some_and(|c| n.visible_to(c.hostnqn()))
    }) {
        Some(n) => (Some(namespace_view(n)), Some(n.anagrpid)),
        None => (None, None),
    };
    // The path's ANA state for the namespace's group, before any other check of the command
    // (after the namespace lookup), as nvmet and SPDK: no DNR, the host retries elsewhere.
    if let Some(group) = group
        && let Some(state) = cx.core.ana_state(sub, &q.listen, &mut q.ana_path, group)
        && let Err(s) = ana::check_io(state)
    {
        return complete(q, req, s);
    }
    if resv_cmd::is_reservation(req.sqe.opcode()) {
        if ns.is_none() {
            return io_error(q, req, Status::INVALID_NAMESPACE);
        }
        return resv_cmd::execute(cx, q, req, sub, nsid);
    }
    let cmd = match io::decode(
        &req.sqe,
        ns.as_ref(),
        Ok(req.sgl.len()),
        cx.transport.limits.max_io_size,
    ) {
        Ok(c) => c,
        Err(s) => return io_error(q, req, s),
    };
    let op = match cmd {
        IoCmd::Disconnect => {
            req.disconnect_after = true;
            return complete(q, req, Status::SUCCESS);
        }
        IoCmd::Nop => return complete(q, req, Status::SUCCESS),
        IoCmd::Read { slba, blocks, .. } => BdevOp::Read {
            offset_blocks: slba,
            num_blocks: u64::from(blocks),
        },
        IoCmd::Write { slba, blocks, fua } => BdevOp::Write {
            offset_blocks: slba,
            num_blocks: u64::from(blocks),
            fua,
        },
        IoCmd::Compare { slba, blocks } => BdevOp::Compare {
            offset_blocks: slba,
            num_blocks: u64::from(blocks),
        },
        IoCmd::WriteZeroes {
            slba, blocks, fua, ..
        } => {
            if fua && ns.is_some_and(|n| n.volatile_write_cache) {
                req.followup = Followup::FlushAfter;
            }
            BdevOp::WriteZeroes {
                offset_blocks: slba,
                num_blocks: u64::from(blocks),
            }
        }
        IoCmd::Flush => BdevOp::Flush,
        IoCmd::Deallocate { ranges } => {
            // Ranges are validated up front, so a bad one fails the command before any
            // deallocation.
            let Some(view) = ns.as_ref() else {
                return io_error(q, req, Status::INVALID_NAMESPACE);
            };
            let first = match dsm_range(req, view, 0, ranges) {
                Ok(Some(r)) => r,
                Ok(None) => return complete(q, req, Status::SUCCESS),
                Err(s) => return io_error(q, req, s),
            };
            req.followup = Followup::Deallocate {
                next: first.0 + 1,
                total: ranges,
            };
            first.1
        }
    };
    // The volume's reservation, before the bdev is touched.
    if !resv_cmd::check(cx, q, sub, nsid, req.sqe.opcode()) {
        req.followup = Followup::Single;
        return io_error(q, req, crate::nvme::resv::RESERVATION_CONFLICT);
    }
    match admit(cx, req, sub, AdmitKind::Io(nsid)) {
        Admission::Go => {}
        Admission::Queued => {
            req.followup = Followup::Single;
            return NvmeAction::Queued;
        }
        Admission::InvalidNamespace => return io_error(q, req, Status::INVALID_NAMESPACE),
        Admission::Inactive => return complete(q, req, Status::ABORTED_SQ_DELETION),
    }
    req.nsid = nsid;
    submit(cx, q, req, op)
}

/// The first non-empty Dataset Management range at or after `from`, as `(index, op)`.
fn dsm_range(
    req: &NvmeReq,
    ns: &NamespaceView,
    from: u16,
    total: u16,
) -> Result<Option<(u16, BdevOp)>, Status> {
    let Some(io) = req.io.as_ref() else {
        return Err(Status::INTERNAL_ERROR);
    };
    let data: &[u8] = match io.bufs.first() {
        Some(b) => b.as_slice(),
        None => &[],
    };
    if from == 0 {
        // Every range is checked before the first deallocation.
        let _checked = io::dsm_ranges(data, total, ns)?;
    }
    let mut i = from;
    while i < total {
        let off = usize::from(i) * 16;
        let Some(r) = data.get(off..off + 16) else {
            return Err(Status::DATA_SGL_LENGTH_INVALID);
        };
        let blocks = u32::from_le_bytes([r[4], r[5], r[6], r[7]]);
        let mut s = [0u8; 8];
        s.copy_from_slice(&r[8..16]);
        let slba = u64::from_le_bytes(s);
        if blocks != 0 {
            return Ok(Some((
                i,
                BdevOp::Unmap {
                    offset_blocks: slba,
                    num_blocks: u64::from(blocks),
                },
            )));
        }
        i += 1;
    }
    Ok(None)
}

pub(super) fn io_error(q: &Queue, req: &mut NvmeReq, status: Status) -> NvmeAction {
    if let Some(c) = q.association() {
        let lba = u64::from(req.sqe.cdw10()) | u64::from(req.sqe.cdw11()) << 32;
        let (qid, cid, nsid) = (q.qid, req.sqe.cid(), req.sqe.nsid());
        c.with(|c| c.record_error(qid, cid, status, nsid, lba));
    }
    complete(q, req, status)
}

#[inline]
pub(super) fn submit(
    cx: &mut NvmeCtx<'_>,
    q: &mut Queue,
    req: &mut NvmeReq,
    op: BdevOp,
) -> NvmeAction {
    let Some(mut io) = req.io.take() else {
        release(cx.core, req);
        return complete(q, req, Status::INTERNAL_ERROR);
    };
    io.op = op;
    io.tag = req.token;
    io.status = IoStatus::Pending;
    let sub = q.subsystem.unwrap_or(u32::MAX);
    match cx.core.submit_io(sub, req.nsid, cx.transport.index, io) {
        Ok(()) => NvmeAction::Submitted,
        Err(io) => {
            req.io = Some(io);
            if cx.core.namespace(sub, req.nsid).is_none() {
                release(cx.core, req);
                io_error(q, req, Status::INVALID_NAMESPACE)
            } else {
                NvmeAction::Busy
            }
        }
    }
}

/// Submits again a request that got [`NvmeAction::Busy`].
pub fn resubmit(cx: &mut NvmeCtx<'_>, q: &mut Queue, req: &mut NvmeReq) -> NvmeAction {
    let Some(op) = req.io.as_ref().map(|io| io.op) else {
        release(cx.core, req);
        return complete(q, req, Status::INTERNAL_ERROR);
    };
    if q.is_closing() {
        release(cx.core, req);
        return complete(q, req, Status::ABORTED_SQ_DELETION);
    }
    if req.aborted.is_some() {
        release(cx.core, req);
        return io_error(q, req, Status::ABORTED_PREEMPT_ABORT);
    }
    submit(cx, q, req, op)
}

/// The NVMe status for a bdev status.
pub fn bdev_status(op: &BdevOp, s: IoStatus) -> Status {
    match s {
        IoStatus::Success => Status::SUCCESS,
        IoStatus::Miscompare => Status::COMPARE_FAILURE,
        IoStatus::OutOfRange => Status::LBA_OUT_OF_RANGE,
        IoStatus::BufferTooSmall => Status::DATA_SGL_LENGTH_INVALID,
        IoStatus::Unsupported => Status::INVALID_OPCODE,
        IoStatus::Error(e) if e == libc::EIO => match op {
            BdevOp::Read { .. } | BdevOp::Compare { .. } => Status::UNRECOVERED_READ_ERROR,
            BdevOp::Write { .. } | BdevOp::WriteZeroes { .. } => Status::WRITE_FAULT,
            _ => Status::INTERNAL_ERROR,
        },
        IoStatus::Error(e) if e == libc::ENOMEM || e == libc::EAGAIN => {
            Status::INTERNAL_ERROR.retryable()
        }
        IoStatus::Error(_) | IoStatus::Pending => Status::INTERNAL_ERROR,
    }
}

/// A bdev I/O of this request came back.
#[inline]
pub fn io_done(
    cx: &mut NvmeCtx<'_>,
    q: &mut Queue,
    req: &mut NvmeReq,
    io: Box<BdevIo>,
) -> NvmeAction {
    let status = bdev_status(&io.op, io.status);
    let op = io.op;
    let bdev = io.status;
    req.io = Some(io);
    if matches!(req.followup, Followup::FusedCompare | Followup::FusedWrite) {
        // A fused pair finishes under its range lock even when a preempt-and-abort marked it
        // (the pair owns the lock; its fence is released when the request is freed).
        return fused::io_done(cx, q, req, &op, bdev);
    }
    if req.aborted.is_some() {
        // A preempt-and-abort aborted it while at the bdev: whatever the bdev did, the host
        // hears the abort, and nothing more of the command runs.
        req.followup = Followup::Single;
        release(cx.core, req);
        cx.core.stats_mut().completed_nvme_io += 1;
        return io_error(q, req, Status::ABORTED_PREEMPT_ABORT);
    }
    if status.is_success() && !q.is_closing() {
        match req.followup {
            Followup::Single | Followup::FusedCompare | Followup::FusedWrite => {}
            Followup::FlushAfter => {
                req.followup = Followup::Single;
                return submit(cx, q, req, BdevOp::Flush);
            }
            Followup::Deallocate { next, total } => {
                let ns = cx.core.namespace(q.subsystem.unwrap_or(u32::MAX), req.nsid);
                let Some(view) = ns.map(namespace_view) else {
                    release(cx.core, req);
                    return io_error(q, req, Status::INVALID_NAMESPACE);
                };
                match dsm_range(req, &view, next, total) {
                    Ok(Some((i, op))) => {
                        req.followup = Followup::Deallocate { next: i + 1, total };
                        return submit(cx, q, req, op);
                    }
                    Ok(None) => {}
                    Err(s) => {
                        release(cx.core, req);
                        return io_error(q, req, s);
                    }
                }
            }
        }
    }
    release(cx.core, req);
    cx.core.stats_mut().completed_nvme_io += 1;
    if !status.is_success() {
        return io_error(q, req, status);
    }
    req.cqe = q.cqe(&req.sqe, Status::SUCCESS);
    req.data_len = match op {
        BdevOp::Read { .. } => req.sgl.len(),
        _ => 0,
    };
    NvmeAction::Complete
}

#[cfg(test)]
mod tests {
    use super::*;
    use iobuf::IoBuf;

    #[test]
    fn bdev_statuses() {
        let r = BdevOp::Read {
            offset_blocks: 0,
            num_blocks: 1,
        };
        let w = BdevOp::Write {
            offset_blocks: 0,
            num_blocks: 1,
            fua: false,
        };
        assert_eq!(bdev_status(&r, IoStatus::Success), Status::SUCCESS);
        assert_eq!(
            bdev_status(&r, IoStatus::Miscompare),
            Status::COMPARE_FAILURE
        );
        assert_eq!(
            bdev_status(&r, IoStatus::OutOfRange),
            Status::LBA_OUT_OF_RANGE
        );
        assert_eq!(
            bdev_status(&r, IoStatus::Unsupported),
            Status::INVALID_OPCODE
        );
        assert_eq!(
            bdev_status(&r, IoStatus::Error(libc::EIO)),
            Status::UNRECOVERED_READ_ERROR
        );
        assert_eq!(
            bdev_status(&w, IoStatus::Error(libc::EIO)),
            Status::WRITE_FAULT
        );
        assert_eq!(
            bdev_status(&BdevOp::Flush, IoStatus::Error(libc::EIO)),
            Status::INTERNAL_ERROR
        );
        let busy = bdev_status(&w, IoStatus::Error(libc::ENOMEM));
        assert!(!busy.is_dnr(), "resource shortage is retryable");
        assert_eq!(bdev_status(&w, IoStatus::Pending), Status::INTERNAL_ERROR);
    }

    #[test]
    fn dataset_management_ranges_are_walked_in_order() {
        let ns = NamespaceView::new(1, 512, 1000);
        let mut req = NvmeReq::new(1);
        let mut b = IoBuf::alloc(4096).unwrap();
        let buf = b.as_mut_slice();
        for (i, (blocks, slba)) in [(8u32, 0u64), (0, 900), (2, 998)].iter().enumerate() {
            buf[i * 16 + 4..i * 16 + 8].copy_from_slice(&blocks.to_le_bytes());
            buf[i * 16 + 8..i * 16 + 16].copy_from_slice(&slba.to_le_bytes());
        }
        req.io.as_mut().unwrap().bufs.push(b);
        let first = dsm_range(&req, &ns, 0, 3).unwrap().unwrap();
        assert_eq!(
            first,
            (
                0,
                BdevOp::Unmap {
                    offset_blocks: 0,
                    num_blocks: 8
                }
            )
        );
        let second = dsm_range(&req, &ns, 1, 3).unwrap().unwrap();
        assert_eq!(second.0, 2, "the empty range is skipped");
        assert_eq!(dsm_range(&req, &ns, 3, 3).unwrap(), None);
        // A range past the end fails the command before anything is deallocated.
        let small = NamespaceView::new(1, 512, 999);
        assert_eq!(
            dsm_range(&req, &small, 0, 3).unwrap_err(),
            Status::LBA_OUT_OF_RANGE
        );
    }
}
