//! SCSI media commands on bdevs: a decoded [`ScsiIo`] becomes one bdev operation or a
//! sequence of them (UNMAP ranges, WRITE SAME as unmap / write zeroes / pattern writes in
//! chunks), and bdev completions become status and sense.

use super::engine::{ScsiEngine, map_of};
use super::request::{Phase, ScsiAction, ScsiReq, WriteSameMode};
use crate::bdev::{BdevIo, BdevOp, IoStatus};
use crate::scsi::{self, ScsiIo, ScsiStatus, Sense};
use crate::target::PgCore;

/// The sense data for a failed bdev operation of `op`.
pub fn bdev_sense(status: IoStatus, op: &ScsiIo) -> Sense {
    match status {
        IoStatus::OutOfRange => Sense::lba_out_of_range(),
        IoStatus::Unsupported => Sense::invalid_opcode(),
        IoStatus::Miscompare => Sense::new(scsi::SenseKey::Miscompare, 0x1D, 0x00),
        IoStatus::Error(_) => match op {
            ScsiIo::Read { lba, .. } => Sense::read_error(*lba),
            ScsiIo::Write { lba, .. } => Sense::write_error(*lba),
            _ => Sense::internal_target_failure(),
        },
        _ => Sense::internal_target_failure(),
    }
}

/// The namespace facts submission needs, copied out of the LU map (no allocation).
#[derive(Clone, Copy)]
struct Facts {
    block_size: u32,
    write_cache: bool,
    /// The cache is on but MODE SELECT turned WCE off: every write is written through.
    write_through: bool,
    unmap: bool,
    write_zeroes: bool,
}

impl ScsiEngine {
    /// Starts the request's next bdev operation.
    pub(super) fn submit(&mut self, core: &mut PgCore, req: &mut ScsiReq) -> ScsiAction {
        let limits = self.limits;
        let (Some(op), Some(lun)) = (req.op, req.lun) else {
            req.check(Sense::internal_target_failure());
            return Self::respond(core, req);
        };
        let map = map_of(&mut self.maps, core, req.sub, limits);
        let Some(mapped) = map.get(lun) else {
            req.check(Sense::lun_not_supported());
            return Self::respond(core, req);
        };
        let info = Facts {
            block_size: mapped.ns.block_size,
            write_cache: mapped.ns.write_cache,
            write_through: mapped.ns.write_cache && !mapped.ns.modes.load().wce,
            unmap: mapped.ns.unmap,
            write_zeroes: mapped.ns.write_zeroes,
        };
        let bs = u64::from(info.block_size);
        if req.flushing {
            return self.submit_op(core, req, lun, BdevOp::Flush);
        }
        let bdev_op = match op {
            ScsiIo::Read { lba, blocks, .. } => {
                let need = limits.units(u64::from(blocks) * bs);
                if req.io.as_ref().is_some_and(|io| io.bufs.len() < need) {
                    return ScsiAction::NeedBuffers(need);
                }
                BdevOp::Read {
                    offset_blocks: lba,
                    num_blocks: u64::from(blocks),
                }
            }
            ScsiIo::Write { lba, blocks, fua } => BdevOp::Write {
                offset_blocks: lba,
                num_blocks: u64::from(blocks),
                fua: fua || info.write_through,
            },
            ScsiIo::Flush { .. } => {
                if !info.write_cache {
                    return good(core, req);
                }
                BdevOp::Flush
            }
            ScsiIo::Unmap { param_len } => {
                let params = req.param.as_ref().map_or(&[][..], |b| {
                    let n = (param_len as usize).min(b.capacity());
                    &b.as_slice()[..n]
                });
                match scsi::parse_unmap(&mapped.unit, params) {
                    Err(s) => {
                        req.check(s);
                        return Self::respond(core, req);
                    }
                    Ok(mut ranges) => match ranges.nth(req.cursor as usize) {
                        None => return good(core, req),
                        Some(range) => BdevOp::Unmap {
                            offset_blocks: range.lba,
                            num_blocks: u64::from(range.blocks),
                        },
                    },
                }
            }
            ScsiIo::WriteSame {
                lba,
                blocks,
                unmap,
                ndob,
            } => {
                if req.write_same == WriteSameMode::Undecided {
                    let zero = ndob
                        || req.param.as_ref().is_none_or(|b| {
                            b.as_slice()[..(bs as usize).min(b.capacity())]
                                .iter()
                                .all(|&x| x == 0)
                        });
                    req.write_same = if zero && unmap && info.unmap {
                        WriteSameMode::Unmap
                    } else if zero && info.write_zeroes {
                        WriteSameMode::Zeroes
                    } else {
                        WriteSameMode::Pattern
                    };
                }
                // Write zeroes and unmap have no FUA: with the cache off a Flush follows.
                req.flush_after = info.write_through && req.write_same != WriteSameMode::Pattern;
                match req.write_same {
                    WriteSameMode::Unmap => BdevOp::Unmap {
                        offset_blocks: lba,
                        num_blocks: u64::from(blocks),
                    },
                    WriteSameMode::Zeroes => BdevOp::WriteZeroes {
                        offset_blocks: lba,
                        num_blocks: u64::from(blocks),
                    },
                    WriteSameMode::Pattern | WriteSameMode::Undecided => {
                        let left = u64::from(blocks) - req.cursor;
                        let chunk = left.min(u64::from(limits.max_io_size) / bs).max(1);
                        let need = limits.units(chunk * bs);
                        let Some(io) = req.io.as_mut() else {
                            req.check(Sense::internal_target_failure());
                            return Self::respond(core, req);
                        };
                        if io.bufs.len() < need {
                            return ScsiAction::NeedBuffers(need);
                        }
                        if !req.pattern_ready {
                            // The first chunk is the largest: its buffers serve every chunk.
                            req.pattern_ready = true;
                            let pat: &[u8] = req
                                .param
                                .as_ref()
                                .map_or(&[], |b| &b.as_slice()[..(bs as usize).min(b.capacity())]);
                            for b in io.bufs.iter_mut() {
                                b.reset();
                                for blk in b.as_mut_slice().chunks_mut(bs as usize) {
                                    if pat.len() == blk.len() {
                                        blk.copy_from_slice(pat);
                                    } else {
                                        blk.fill(0);
                                    }
                                }
                            }
                        }
                        BdevOp::Write {
                            offset_blocks: lba + req.cursor,
                            num_blocks: chunk,
                            fua: info.write_through,
                        }
                    }
                }
            }
        };
        self.submit_op(core, req, lun, bdev_op)
    }

    /// Submits one bdev operation of the request to the LU's namespace.
    pub(super) fn submit_op(
        &mut self,
        core: &mut PgCore,
        req: &mut ScsiReq,
        lun: u16,
        bdev_op: BdevOp,
    ) -> ScsiAction {
        let Some(mut io) = req.io.take() else {
            req.check(Sense::internal_target_failure());
            return Self::respond(core, req);
        };
        io.op = bdev_op;
        io.tag = req.token;
        io.status = IoStatus::Pending;
        let nsid = u32::from(lun) + 1;
        match core.submit_io(req.sub, nsid, self.transport, io) {
            Ok(()) => {
                req.phase = Phase::Bdev;
                ScsiAction::Submitted
            }
            Err(io) => {
                req.io = Some(io);
                if core.namespace(req.sub, nsid).is_none() {
                    req.check(Sense::lun_not_supported());
                    return Self::respond(core, req);
                }
                ScsiAction::Busy
            }
        }
    }

    /// A bdev operation of the request completed.
    pub(super) fn completed(
        &mut self,
        core: &mut PgCore,
        req: &mut ScsiReq,
        io: Box<BdevIo>,
    ) -> ScsiAction {
        if req.caw.is_some() {
            return self.caw_done(core, req, io);
        }
        let status = io.status;
        let done_op = io.op;
        req.io = Some(io);
        let Some(op) = req.op else {
            req.check(Sense::internal_target_failure());
            return Self::respond(core, req);
        };
        if status != IoStatus::Success {
            req.check(bdev_sense(status, &op));
            return Self::respond(core, req);
        }
        match op {
            ScsiIo::Read { .. } => {
                req.data_in = (req.wanted_in.min(u64::from(req.in_len))) as u32;
                good(core, req)
            }
            ScsiIo::Unmap { .. } => {
                req.cursor += 1;
                req.phase = Phase::Submit;
                self.submit(core, req)
            }
            ScsiIo::WriteSame { blocks, .. } => {
                if req.flush_after {
                    req.flush_after = false;
                    req.flushing = true;
                    req.phase = Phase::Submit;
                    return self.submit(core, req);
                }
                if req.write_same == WriteSameMode::Pattern {
                    if let BdevOp::Write { num_blocks, .. } = done_op {
                        req.cursor += num_blocks;
                    }
                    if req.cursor < u64::from(blocks) {
                        req.phase = Phase::Submit;
                        return self.submit(core, req);
                    }
                }
                good(core, req)
            }
            ScsiIo::Write { .. } | ScsiIo::Flush { .. } => good(core, req),
        }
    }
}

/// GOOD status.
fn good(core: &mut PgCore, req: &mut ScsiReq) -> ScsiAction {
    req.status = ScsiStatus::Good;
    ScsiEngine::respond(core, req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdev_failures_become_sense() {
        let read = ScsiIo::Read {
            lba: 7,
            blocks: 1,
            fua: false,
        };
        let write = ScsiIo::Write {
            lba: 9,
            blocks: 1,
            fua: false,
        };
        let flush = ScsiIo::Flush { lba: 0, blocks: 0 };
        assert_eq!(
            bdev_sense(IoStatus::OutOfRange, &read),
            Sense::lba_out_of_range()
        );
        assert_eq!(
            bdev_sense(IoStatus::Unsupported, &read),
            Sense::invalid_opcode()
        );
        let m = bdev_sense(IoStatus::Miscompare, &read);
        assert_eq!(
            (m.key, m.asc, m.ascq),
            (scsi::SenseKey::Miscompare, 0x1D, 0)
        );
        assert_eq!(
            bdev_sense(IoStatus::Error(libc::EIO), &read),
            Sense::read_error(7)
        );
        assert_eq!(
            bdev_sense(IoStatus::Error(libc::EIO), &write),
            Sense::write_error(9)
        );
        assert_eq!(
            bdev_sense(IoStatus::Error(libc::EIO), &flush),
            Sense::internal_target_failure()
        );
        assert_eq!(
            bdev_sense(IoStatus::Pending, &write),
            Sense::internal_target_failure()
        );
    }
}
