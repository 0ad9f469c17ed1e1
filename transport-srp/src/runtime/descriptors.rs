//! The initiator's side of an SRP data transfer: its buffer descriptors (direct, or an
//! indirect table carried whole in the IU) read as remote segments, and handed to the RDMA
//! planner both RDMA transports share ([`rdma_plumbing::transfer`]), which builds the RDMA READ
//! / WRITE work requests against the target's data buffers. No allocation: the work requests
//! go into a scratch vector the poll group keeps.

use fabric::SendWr;
use iobuf::IoBuf;
use rdma_plumbing::transfer::{self, PlanError, RdmaOp, RemoteSegment};

use crate::proto::{DataDesc, DirectDesc};

/// Why a transfer cannot be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum XferError {
    /// An indirect descriptor whose table is not all in the IU (ib_srp only sends those with
    /// `allow_ext_sg=1`).
    ExternalTable,
    /// The command's IU is gone or no longer decodes (no descriptors to read).
    NoDescriptors,
    /// The planner's refusal: descriptors or buffers shorter than the transfer.
    Plan(PlanError),
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
    /// Data buffers, each used over its window, in order.
    pub bufs: &'a [IoBuf],
    /// Their registration's local key.
    pub lkey: u32,
    /// Most scatter/gather entries per work request.
    pub max_sge: usize,
}

/// Appends to `wrs` the unsignaled RDMA READs (`op` = read: data-out) or WRITEs (data-in) that
/// move `total` bytes between the initiator's descriptors `desc` and the `local` buffers.
/// Returns how many were added; on an error nothing is left behind in `wrs`.
pub(crate) fn build(
    wrs: &mut Vec<SendWr>,
    op: RdmaOp,
    wr_id: u64,
    local: Local<'_>,
    desc: &DataDesc<'_>,
    total: u32,
) -> Result<usize, XferError> {
    let remote = segments(desc)?.map(|d| RemoteSegment {
        addr: d.va,
        len: d.len,
        rkey: d.rkey,
    });
    let lkey = local.lkey;
    transfer::build(
        wrs,
        op,
        wr_id,
        remote,
        local.bufs,
        total,
        local.max_sge,
        |_| Some(lkey),
    )
    .map_err(XferError::Plan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::IndirectDesc;

    fn d(va: u64, len: u32) -> DirectDesc {
        DirectDesc { va, rkey: 7, len }
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

    /// The planner's tests (rdma_plumbing::transfer) cover the sizing; these check what SRP
    /// hands it: an indirect table's segments in order with their remote keys, the data
    /// buffers with the registration's key, and its refusals.
    #[test]
    fn descriptors_become_the_planner_s_remote_segments() {
        let local = iobuf::DmaRegion::new(4 * 4096)
            .unwrap()
            .split(4096)
            .unwrap();
        let loc = Local {
            bufs: &local,
            lkey: 5,
            max_sge: 16,
        };
        let list: Vec<u8> = [d(0x10_0000, 6000), d(0x20_0000, 3000)]
            .iter()
            .flat_map(|x| x.encode())
            .collect();
        let table = DataDesc::Indirect(IndirectDesc::new(d(0, 32), 9000, &list));
        let mut wrs = Vec::new();
        assert_eq!(build(&mut wrs, RdmaOp::Write, 1, loc, &table, 9000), Ok(2));
        assert_eq!(
            wrs[1].op,
            fabric::WrOp::RdmaWrite {
                remote_addr: 0x20_0000,
                rkey: 7
            }
        );
        assert_eq!(wrs[1].sges.as_slice()[0].addr, local[1].addr() + 1904);
        assert!(
            wrs.iter()
                .flat_map(|w| w.sges.as_slice())
                .all(|s| s.lkey == 5)
        );
        wrs.clear();
        assert_eq!(
            build(
                &mut wrs,
                RdmaOp::Read,
                1,
                loc,
                &DataDesc::Direct(d(0, 100)),
                200
            ),
            Err(XferError::Plan(PlanError::ShortSegments))
        );
        assert_eq!(
            build(
                &mut wrs,
                RdmaOp::Read,
                1,
                loc,
                &DataDesc::Direct(d(0, 1 << 20)),
                1 << 20
            ),
            Err(XferError::Plan(PlanError::ShortBuffers))
        );
        let partial = DataDesc::Indirect(IndirectDesc::new(d(0, 48), 6, &list));
        assert_eq!(
            build(&mut wrs, RdmaOp::Read, 1, loc, &partial, 10),
            Err(XferError::ExternalTable)
        );
        assert!(wrs.is_empty());
    }
}
