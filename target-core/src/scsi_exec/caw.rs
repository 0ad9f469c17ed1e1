//! COMPARE AND WRITE (SBC-3 5.2) in the SCSI exec layer: the verify and write data are
//! fetched into the request's parameter buffer; the command takes the volume's range lock
//! ([`crate::target::CawLock`]: no write from any nexus, NVMe host, queue or reactor runs
//! on the blocks while it is held), reads the blocks, compares them with the verify data,
//! writes the write data if they are equal, and releases the lock. A miscompare is
//! MISCOMPARE / MISCOMPARE DURING VERIFY OPERATION with INFORMATION = the offset of the first
//! differing byte; nothing is written.

use super::engine::ScsiEngine;
use super::request::{Phase, ScsiAction, ScsiReq};
use crate::bdev::{BdevIo, BdevOp, IoStatus};
use crate::compare_write::{LbaRange, first_mismatch};
use crate::scsi::caw::{COMPARE_AND_WRITE, decode_compare_and_write, miscompare_sense};
use crate::scsi::{LogicalUnit, ScsiStatus, Sense, Verdict};
use crate::target::{CawRequest, PgCore, owner_of};

/// Where a COMPARE AND WRITE is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CawStep {
    /// Acquiring the range lock.
    Lock,
    /// Reading the blocks.
    Read,
    /// Writing the write data.
    Write,
}

/// Whether a CDB is COMPARE AND WRITE.
pub(super) fn is_caw(cdb: &[u8]) -> bool {
    cdb.first() == Some(&COMPARE_AND_WRITE)
}

/// Checks the CDB: `Some(verdict)` ends the command; `None`: the data-out is to be fetched
/// (the request is set up for it).
pub(super) fn decode(req: &mut ScsiReq, lu: &LogicalUnit) -> Option<Verdict> {
    let cdb = req.cdb;
    match decode_compare_and_write(
        &cdb[..usize::from(req.cdb_len)],
        lu,
        lu.max_compare_write_blocks,
        req.out_len,
    ) {
        Err(s) => Some(Verdict::CheckCondition(s)),
        Ok(None) => Some(Verdict::Good),
        Ok(Some(c)) => {
            req.caw = Some(c);
            req.caw_step = CawStep::Lock;
            req.wanted_out = c.data_out_len(lu.block_size);
            req.phase = Phase::DataOut;
            None
        }
    }
}

/// Gives up the lock of a COMPARE AND WRITE that ends without finishing (aborted, or its
/// session gone): held or being acquired, it is released; queued, it is dropped.
pub(super) fn cancel(core: &mut PgCore, req: &mut ScsiReq) {
    let Some(owner) = req.caw_owner.take() else {
        return;
    };
    req.caw_lock = None;
    let nsid = req.lun.map_or(0, |l| u32::from(l) + 1);
    if let Some(lock) = core.caw_lock(req.sub, nsid).cloned() {
        lock.cancel(core.target(), owner);
    }
}

impl ScsiEngine {
    /// Moves a COMPARE AND WRITE whose data-out is in on: the lock, then the read.
    pub(super) fn run_caw(&mut self, core: &mut PgCore, req: &mut ScsiReq) -> ScsiAction {
        let (Some(c), Some(lun)) = (req.caw, req.lun) else {
            req.check(Sense::internal_target_failure());
            return Self::respond(core, req);
        };
        let nsid = u32::from(lun) + 1;
        let Some(ns) = core.namespace(req.sub, nsid) else {
            req.caw = None;
            req.check(Sense::lun_not_supported());
            return Self::respond(core, req);
        };
        let bs = u64::from(ns.block_size);
        let write_through = ns.write_cache && !ns.modes.load().wce;
        let range = LbaRange::new(c.lba, u64::from(c.blocks));
        match req.caw_step {
            CawStep::Lock => {
                let Some(lock) = core.caw_lock(req.sub, nsid).cloned() else {
                    req.caw = None;
                    req.check(Sense::lun_not_supported());
                    return Self::respond(core, req);
                };
                let owner = owner_of(core.index(), self.transport, req.token);
                if req.caw_owner.is_none() {
                    req.caw_owner = Some(owner);
                    if lock.request(core.target(), range, owner) == CawRequest::Busy {
                        req.caw_owner = None;
                        req.caw = None;
                        req.status = ScsiStatus::Busy;
                        return Self::respond(core, req);
                    }
                }
                let Some(id) = lock.held_by(owner) else {
                    // Resumed (TransportPollGroup::resume_request) once the range is ours.
                    return ScsiAction::Queued;
                };
                req.caw_lock = Some(id);
                req.caw_step = CawStep::Read;
                self.run_caw(core, req)
            }
            CawStep::Read => {
                let need = self.limits.units(range.blocks * bs);
                if req.io.as_ref().is_some_and(|io| io.bufs.len() < need) {
                    return ScsiAction::NeedBuffers(need);
                }
                let op = BdevOp::Read {
                    offset_blocks: c.lba,
                    num_blocks: range.blocks,
                };
                self.submit_op(core, req, lun, op)
            }
            CawStep::Write => {
                let op = BdevOp::Write {
                    offset_blocks: c.lba,
                    num_blocks: range.blocks,
                    fua: c.fua || write_through,
                };
                self.submit_op(core, req, lun, op)
            }
        }
    }

    /// A bdev operation of a COMPARE AND WRITE completed.
    pub(super) fn caw_done(
        &mut self,
        core: &mut PgCore,
        req: &mut ScsiReq,
        io: Box<BdevIo>,
    ) -> ScsiAction {
        let status = io.status;
        req.io = Some(io);
        let Some(c) = req.caw else {
            return finish(core, req, Some(Sense::internal_target_failure()));
        };
        match (req.caw_step, status) {
            (CawStep::Read, IoStatus::Success) => {}
            (CawStep::Read, _) => return finish(core, req, Some(Sense::read_error(c.lba))),
            (_, IoStatus::Success) => return finish(core, req, None),
            _ => return finish(core, req, Some(Sense::write_error(c.lba))),
        }
        let bs = core
            .namespace(req.sub, req.lun.map_or(0, |l| u32::from(l) + 1))
            .map_or(0, |n| n.block_size as usize);
        let n = usize::from(c.blocks) * bs;
        let (Some(param), Some(io)) = (req.param.as_ref(), req.io.as_mut()) else {
            return finish(core, req, Some(Sense::internal_target_failure()));
        };
        let (Some(data), Some(buf)) = (param.as_slice().get(..2 * n), io.bufs.first_mut()) else {
            return finish(core, req, Some(Sense::internal_target_failure()));
        };
        let Some(read) = buf.as_slice().get(..n) else {
            return finish(core, req, Some(Sense::internal_target_failure()));
        };
        if let Some(off) = first_mismatch(&data[..n], read) {
            return finish(core, req, Some(miscompare_sense(off as u64)));
        }
        buf.reset();
        buf.as_mut_slice()[..n].copy_from_slice(&data[n..]);
        req.caw_step = CawStep::Write;
        req.phase = Phase::Submit;
        self.run_caw(core, req)
    }
}

/// Releases the lock and ends the command: GOOD, or CHECK CONDITION with `sense`.
fn finish(core: &mut PgCore, req: &mut ScsiReq, sense: Option<Sense>) -> ScsiAction {
    if let (Some(id), Some(lun)) = (req.caw_lock.take(), req.lun) {
        if let Some(lock) = core.caw_lock(req.sub, u32::from(lun) + 1).cloned() {
            lock.release(core.target(), id);
        }
    }
    req.caw_owner = None;
    req.caw = None;
    match sense {
        Some(s) => req.check(s),
        None => req.status = ScsiStatus::Good,
    }
    ScsiEngine::respond(core, req)
}
