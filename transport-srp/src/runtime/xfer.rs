//! Building the RDMA READ / WRITE work requests of one data transfer: the initiator's buffer
//! descriptors on one side, the target's registered data buffers on the other. No allocation:
//! the work requests go into a scratch vector the poll group keeps.

use fabric::{MAX_SGE, SendWr, Sge, SgeList, WrOp};
use iobuf::IoBuf;

use crate::proto::{DataDesc, DirectDesc};

/// Why a transfer cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum XferError {
    /// An indirect descriptor whose table is not all in the IU (ib_srp only sends those with
    /// `allow_ext_sg=1`).
    ExternalTable,
    /// The descriptors cover fewer bytes than the transfer.
    ShortDescriptors,
    /// The local buffers hold fewer bytes than the transfer.
    ShortBuffers,
}

/// The initiator's segments of a data descriptor, in order (no allocation: an indirect list
/// is read from the IU bytes as it goes).
pub(crate) enum Segments<'a> {
    One(Option<DirectDesc>),
    Many(&'a [u8]),
}

impl Iterator for Segments<'_> {
    type Item = DirectDesc;
    fn next(&mut self) -> Option<DirectDesc> {
        match self {
            Segments::One(d) => d.take(),
            Segments::Many(raw) => {
                let b = raw.get(..16)?;
                let be = |r: std::ops::Range<usize>| {
                    b.get(r).map_or(0u64, |x| {
                        x.iter().fold(0u64, |acc, &v| acc << 8 | u64::from(v))
                    })
                };
                let d = DirectDesc {
                    va: be(0..8),
                    rkey: be(8..12) as u32,
                    len: be(12..16) as u32,
                };
                *raw = raw.get(16..).unwrap_or(&[]);
                Some(d)
            }
        }
    }
}

/// The segments of `desc` (direct, or an indirect list carried whole in the IU).
pub(crate) fn segments<'a>(desc: &DataDesc<'a>) -> Result<Segments<'a>, XferError> {
    match desc {
        DataDesc::Direct(d) => Ok(Segments::One(Some(*d))),
        DataDesc::Indirect(i) => {
            if i.is_partial() {
                return Err(XferError::ExternalTable);
            }
            Ok(Segments::Many(i.raw()))
        }
        DataDesc::None | DataDesc::Immediate(_) => Ok(Segments::One(None)),
    }
}

/// The target's side of a transfer.
#[derive(Clone, Copy)]
pub(crate) struct Local<'a> {
    /// Buffers, each used from its start, in order, up to its capacity.
    pub bufs: &'a [IoBuf],
    /// Their registration's local key.
    pub lkey: u32,
    /// Most scatter/gather entries per work request.
    pub max_sge: usize,
}

/// Appends to `wrs` the unsignaled RDMA READs (`read`) or WRITEs that move `total` bytes
/// between the initiator's `remote` segments and the `local` buffers. One work request per
/// remote segment, split when it needs more local entries than allowed. Returns how many
/// were added.
pub(crate) fn build(
    wrs: &mut Vec<SendWr>,
    read: bool,
    wr_id: u64,
    local: Local<'_>,
    remote: impl Iterator<Item = DirectDesc>,
    total: u32,
) -> Result<usize, XferError> {
    let Local {
        bufs: local,
        lkey,
        max_sge,
    } = local;
    let max_sge = max_sge.clamp(1, MAX_SGE);
    let start = wrs.len();
    let mut left = total;
    let (mut bi, mut boff) = (0usize, 0usize);
    for seg in remote {
        if left == 0 {
            break;
        }
        let seg_len = seg.len.min(left);
        let mut done = 0u32;
        while done < seg_len {
            let mut sges = SgeList::new();
            let remote_addr = seg.va.wrapping_add(u64::from(done));
            while done < seg_len && sges.len() < max_sge {
                let Some(b) = local.get(bi) else {
                    wrs.truncate(start);
                    return Err(XferError::ShortBuffers);
                };
                let room = b.capacity() - boff;
                if room == 0 {
                    bi += 1;
                    boff = 0;
                    continue;
                }
                let take = (room as u64).min(u64::from(seg_len - done)) as u32;
                let _ = sges.push(Sge {
                    addr: b.base_addr() + boff as u64,
                    length: take,
                    lkey,
                });
                boff += take as usize;
                done += take;
                if boff == b.capacity() {
                    bi += 1;
                    boff = 0;
                }
            }
            let op = if read {
                WrOp::RdmaRead {
                    remote_addr,
                    rkey: seg.rkey,
                }
            } else {
                WrOp::RdmaWrite {
                    remote_addr,
                    rkey: seg.rkey,
                }
            };
            wrs.push(SendWr::new(wr_id, op, sges).with_signaled(false));
        }
        left -= seg_len;
    }
    if left > 0 {
        wrs.truncate(start);
        return Err(XferError::ShortDescriptors);
    }
    Ok(wrs.len() - start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::IndirectDesc;

    fn bufs(n: usize, size: usize) -> Vec<IoBuf> {
        iobuf::DmaRegion::new(n * size)
            .unwrap()
            .split(size)
            .unwrap()
    }

    fn loc(bufs: &[IoBuf], max_sge: usize) -> Local<'_> {
        Local {
            bufs,
            lkey: 5,
            max_sge,
        }
    }

    fn d(va: u64, len: u32) -> DirectDesc {
        DirectDesc { va, rkey: 7, len }
    }

    #[test]
    fn one_segment_over_several_buffers() {
        let local = bufs(3, 4096);
        let mut wrs = Vec::new();
        let n = build(
            &mut wrs,
            true,
            9,
            loc(&local, 16),
            [d(0x1000, 10000)].into_iter(),
            10000,
        )
        .unwrap();
        assert_eq!(n, 1);
        let w = &wrs[0];
        assert_eq!(
            w.op,
            WrOp::RdmaRead {
                remote_addr: 0x1000,
                rkey: 7
            }
        );
        let l: Vec<u32> = w.sges.as_slice().iter().map(|s| s.length).collect();
        assert_eq!(l, [4096, 4096, 1808]);
        assert_eq!(w.sges.as_slice()[1].addr, local[1].base_addr());
        assert!(!w.signaled);
    }

    #[test]
    fn many_segments_and_sge_limit() {
        let local = bufs(4, 4096);
        let mut wrs = Vec::new();
        // Two remote segments; the first crosses a buffer boundary.
        let n = build(
            &mut wrs,
            false,
            1,
            loc(&local, 16),
            [d(0x10_0000, 6000), d(0x20_0000, 3000)].into_iter(),
            9000,
        )
        .unwrap();
        assert_eq!(n, 2);
        assert_eq!(wrs[0].sges.total_len(), 6000);
        assert_eq!(wrs[1].sges.total_len(), 3000);
        assert_eq!(wrs[1].sges.as_slice()[0].addr, local[1].base_addr() + 1904);
        // max_sge 1 splits a segment per local buffer, advancing the remote address.
        wrs.clear();
        let n = build(
            &mut wrs,
            false,
            1,
            loc(&local, 1),
            [d(0x1000, 8192)].into_iter(),
            8192,
        )
        .unwrap();
        assert_eq!(n, 2);
        assert_eq!(
            wrs[1].op,
            WrOp::RdmaWrite {
                remote_addr: 0x1000 + 4096,
                rkey: 7
            }
        );
        // The transfer may be shorter than the descriptors (a short read).
        wrs.clear();
        assert_eq!(
            build(
                &mut wrs,
                false,
                1,
                loc(&local, 16),
                [d(0, 8192), d(0, 8192)].into_iter(),
                100
            ),
            Ok(1)
        );
    }

    #[test]
    fn shortfalls_are_errors_and_leave_nothing_behind() {
        let local = bufs(1, 4096);
        let mut wrs = Vec::new();
        assert_eq!(
            build(
                &mut wrs,
                true,
                1,
                loc(&local, 16),
                [d(0, 100)].into_iter(),
                200
            ),
            Err(XferError::ShortDescriptors)
        );
        assert_eq!(
            build(
                &mut wrs,
                true,
                1,
                loc(&local, 16),
                [d(0, 8192)].into_iter(),
                8192
            ),
            Err(XferError::ShortBuffers)
        );
        assert!(wrs.is_empty());
    }

    #[test]
    fn descriptor_kinds() {
        let list: Vec<u8> = [d(1, 2), d(3, 4)].iter().flat_map(|x| x.encode()).collect();
        let full = IndirectDesc::new(d(0, 32), 6, &list);
        let segs: Vec<_> = segments(&DataDesc::Indirect(full)).unwrap().collect();
        assert_eq!(segs, [d(1, 2), d(3, 4)]);
        let partial = IndirectDesc::new(d(0, 48), 6, &list);
        assert!(matches!(
            segments(&DataDesc::Indirect(partial)),
            Err(XferError::ExternalTable)
        ));
        assert_eq!(segments(&DataDesc::Direct(d(1, 2))).unwrap().count(), 1);
        assert_eq!(segments(&DataDesc::None).unwrap().count(), 0);
    }
}
