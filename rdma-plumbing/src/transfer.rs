//! Planning the RDMA READs and WRITEs of one data transfer: the peer's memory segments (NVMe
//! keyed SGL descriptors, SRP direct descriptors) on one side, the local data buffers on the
//! other.
//!
//! Each work request covers a contiguous piece of one remote segment and at most `max_sge`
//! local scatter/gather entries. Nothing is allocated: work requests are handed one at a time
//! to the caller's closure ([`plan`]) or appended to the caller's vector ([`build`]).
//!
//! The local side of a buffer is its *window* ([`IoBuf::addr`], [`IoBuf::len`]): the bytes a
//! block device reads into or writes from (`bdev` I/O walks `as_slice()` of each buffer). A
//! transfer must move exactly those bytes, so a buffer whose window is shorter than its
//! capacity, or starts past its first byte, is planned by its window, never by its capacity.

use fabric::{MAX_SGE, SendWr, Sge, SgeList, WrOp};
use iobuf::IoBuf;

/// One segment of the peer's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteSegment {
    /// Start address in the peer's memory.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// The peer's remote key for it.
    pub rkey: u32,
}

/// Why a transfer cannot be planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// The remote segments cover fewer bytes than the transfer.
    ShortSegments,
    /// The local buffers hold fewer bytes than the transfer.
    ShortBuffers,
    /// A local buffer lies in no registered region (a bug in the caller).
    Unregistered,
}

/// The direction of a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmaOp {
    /// RDMA READ: from the peer's segments into the local buffers.
    Read,
    /// RDMA WRITE: from the local buffers to the peer's segments.
    Write,
}

/// Walks the first `total` bytes of `remote` against the windows of `local`, calling
/// `f(remote_addr, rkey, sges)` for each work request, in order. `lkey` gives the local key of
/// the registration holding an address. Returns the number of work requests. Inlined: the
/// usual case is built here, the walk is a call of its own.
#[inline]
pub fn plan(
    remote: impl IntoIterator<Item = RemoteSegment>,
    local: &[IoBuf],
    total: u32,
    max_sge: usize,
    lkey: impl Fn(u64) -> Option<u32>,
    mut f: impl FnMut(u64, u32, SgeList),
) -> Result<u32, PlanError> {
    let mut remote = remote.into_iter();
    let Some(first) = remote.next() else {
        return if total > 0 {
            Err(PlanError::ShortSegments)
        } else {
            Ok(0)
        };
    };
    // The usual case (one remote segment, one buffer holding the whole transfer) is one work
    // request of one entry: built directly, as the walk below would.
    if let [b] = local
        && total > 0
        && total <= first.len
        && total as usize <= b.len()
    {
        let sge = Sge {
            addr: b.addr(),
            length: total,
            lkey: lkey(b.addr()).ok_or(PlanError::Unregistered)?,
        };
        f(first.addr, first.rkey, SgeList::one(sge));
        return Ok(1);
    }
    walk(first, remote, local, total, max_sge, lkey, f)
}

/// [`plan`]'s walk of the segments against the buffers, `first` the first segment.
fn walk(
    first: RemoteSegment,
    remote: impl Iterator<Item = RemoteSegment>,
    local: &[IoBuf],
    total: u32,
    max_sge: usize,
    lkey: impl Fn(u64) -> Option<u32>,
    mut f: impl FnMut(u64, u32, SgeList),
) -> Result<u32, PlanError> {
    let max_sge = max_sge.clamp(1, MAX_SGE);
    let mut left = total;
    let (mut bi, mut bo) = (0usize, 0usize);
    let mut count = 0u32;
    for seg in std::iter::once(first).chain(remote) {
        if left == 0 {
            break;
        }
        let seg_len = seg.len.min(left);
        let mut done = 0u32;
        while done < seg_len {
            let mut sges = SgeList::new();
            let mut wlen = 0u32;
            while done + wlen < seg_len && sges.len() < max_sge {
                let b = local.get(bi).ok_or(PlanError::ShortBuffers)?;
                let room = b.len() - bo;
                if room == 0 {
                    bi += 1;
                    bo = 0;
                    continue;
                }
                let take = (room as u64).min(u64::from(seg_len - done - wlen)) as u32;
                let addr = b.addr() + bo as u64;
                let _ = sges.push(Sge {
                    addr,
                    length: take,
                    lkey: lkey(addr).ok_or(PlanError::Unregistered)?,
                });
                bo += take as usize;
                wlen += take;
                if bo == b.len() {
                    bi += 1;
                    bo = 0;
                }
            }
            f(seg.addr.wrapping_add(u64::from(done)), seg.rkey, sges);
            count += 1;
            done += wlen;
        }
        left -= seg_len;
    }
    if left > 0 {
        return Err(PlanError::ShortSegments);
    }
    Ok(count)
}

/// How many work requests [`plan`] would produce, without building them: one remote segment
/// into one buffer, the usual case, costs nothing (inlined).
#[inline]
pub fn count<I>(remote: I, local: &[IoBuf], total: u32, max_sge: usize) -> Result<u32, PlanError>
where
    I: IntoIterator<Item = RemoteSegment>,
    I::IntoIter: Clone,
{
    let remote = remote.into_iter();
    let mut probe = remote.clone();
    if let (Some(r), None, [b]) = (probe.next(), probe.next(), local)
        && total <= r.len
        && total as usize <= b.len()
    {
        return Ok(u32::from(total > 0));
    }
    plan(remote, local, total, max_sge, |_| Some(0), |_, _, _| {})
}

/// Appends to `wrs` the unsignaled RDMA READs or WRITEs, all with `wr_id`, that move `total`
/// bytes between `remote` and `local` (see [`plan`]). Returns how many were added; on an
/// error nothing is left behind in `wrs`.
#[allow(clippy::too_many_arguments)]
pub fn build(
    wrs: &mut Vec<SendWr>,
    op: RdmaOp,
    wr_id: u64,
    remote: impl IntoIterator<Item = RemoteSegment>,
    local: &[IoBuf],
    total: u32,
    max_sge: usize,
    lkey: impl Fn(u64) -> Option<u32>,
) -> Result<usize, PlanError> {
    let start = wrs.len();
    let r = plan(
        remote,
        local,
        total,
        max_sge,
        lkey,
        |remote_addr, rkey, sges| {
            let op = match op {
                RdmaOp::Read => WrOp::RdmaRead { remote_addr, rkey },
                RdmaOp::Write => WrOp::RdmaWrite { remote_addr, rkey },
            };
            wrs.push(SendWr::new(wr_id, op, sges).with_signaled(false));
        },
    );
    match r {
        Ok(n) => Ok(n as usize),
        Err(e) => {
            wrs.truncate(start);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buffers with windows of these lengths, each in a region of its own (capacity rounded up
    /// to a page).
    fn bufs(sizes: &[usize]) -> Vec<IoBuf> {
        sizes
            .iter()
            .map(|&s| {
                let mut b = IoBuf::alloc(s.next_multiple_of(4096).max(4096)).unwrap();
                b.set_len(s);
                b
            })
            .collect()
    }

    /// `n` full buffers of `size` carved from one region (consecutive addresses).
    fn carved(n: usize, size: usize) -> Vec<IoBuf> {
        iobuf::DmaRegion::new(n * size)
            .unwrap()
            .split(size)
            .unwrap()
    }

    fn seg(addr: u64, len: u32) -> RemoteSegment {
        RemoteSegment { addr, len, rkey: 7 }
    }

    /// `(remote address, sge lengths)` of each work request.
    fn run(
        remote: &[RemoteSegment],
        local: &[IoBuf],
        total: u32,
        max_sge: usize,
    ) -> Result<Vec<(u64, Vec<u32>)>, PlanError> {
        let mut out = Vec::new();
        let n = plan(
            remote.iter().copied(),
            local,
            total,
            max_sge,
            |_| Some(1),
            |a, key, s| {
                assert_eq!(key, 7);
                out.push((a, s.as_slice().iter().map(|g| g.length).collect()));
            },
        )?;
        assert_eq!(n as usize, out.len());
        Ok(out)
    }

    #[test]
    fn one_segment_one_buffer() {
        let l = bufs(&[4096]);
        assert_eq!(
            run(&[seg(0x1000, 4096)], &l, 4096, 16),
            Ok(vec![(0x1000, vec![4096])])
        );
    }

    #[test]
    fn the_one_buffer_shortcut_plans_as_the_walk_does() {
        // A window starting inside its buffer, a longer remote segment, a segment not needed.
        let mut l = bufs(&[8192]);
        l[0].set_window(100, 5000);
        let mut got = Vec::new();
        let n = plan(
            [seg(0x1000, 6000), seg(0x9000, 10)],
            &l,
            5000,
            16,
            |a| Some(a as u32 ^ 0x55),
            |a, key, s| got.push((a, key, s.as_slice().to_vec())),
        );
        let sge = Sge {
            addr: l[0].addr(),
            length: 5000,
            lkey: l[0].addr() as u32 ^ 0x55,
        };
        assert_eq!((n, got), (Ok(1), vec![(0x1000, 7, vec![sge])]));
        let none = |_| -> Option<u32> { None };
        assert_eq!(
            plan([seg(0, 8192)], &l, 4096, 16, none, |_, _, _| {}),
            Err(PlanError::Unregistered)
        );
        let no_segs = std::iter::empty::<RemoteSegment>;
        assert_eq!(
            plan(no_segs(), &l, 1, 16, |_| Some(1), |_, _, _| {}),
            Err(PlanError::ShortSegments)
        );
        assert_eq!(plan(no_segs(), &l, 0, 16, |_| Some(1), |_, _, _| {}), Ok(0));
    }

    #[test]
    fn one_segment_many_buffers_split_by_sge_limit() {
        let l = bufs(&[100, 100, 100, 100, 50]);
        let w = run(&[seg(0, 450)], &l, 450, 2).unwrap();
        assert_eq!(
            w,
            vec![(0, vec![100, 100]), (200, vec![100, 100]), (400, vec![50])]
        );
    }

    #[test]
    fn one_segment_over_several_buffers() {
        let l = carved(3, 4096);
        let w = run(&[seg(0x1000, 10000)], &l, 10000, 16).unwrap();
        assert_eq!(w, vec![(0x1000, vec![4096, 4096, 1808])]);
    }

    #[test]
    fn many_segments_cross_buffers() {
        let l = bufs(&[300, 300]);
        let w = run(&[seg(0x10, 200), seg(0x9000, 400)], &l, 600, 16).unwrap();
        assert_eq!(w, vec![(0x10, vec![200]), (0x9000, vec![100, 300])]);
        // Addresses: the second work request starts 200 bytes into the first buffer.
        let mut addrs = Vec::new();
        plan(
            [seg(0x10, 200), seg(0x9000, 400)],
            &l,
            600,
            16,
            |_| Some(1),
            |_, _, s| addrs.push(s.as_slice()[0].addr),
        )
        .unwrap();
        assert_eq!(addrs, [l[0].addr(), l[0].addr() + 200]);
    }

    #[test]
    fn max_sge_one_advances_the_remote_address_per_buffer() {
        let l = carved(4, 4096);
        let w = run(&[seg(0x1000, 8192)], &l, 8192, 1).unwrap();
        assert_eq!(w, vec![(0x1000, vec![4096]), (0x2000, vec![4096])]);
    }

    #[test]
    fn the_total_trims_the_transfer() {
        let l = bufs(&[4096]);
        assert_eq!(run(&[seg(0, 4096)], &l, 20, 16), Ok(vec![(0, vec![20])]));
        assert_eq!(run(&[seg(0, 4096)], &l, 0, 16), Ok(vec![]));
        // A short read: fewer bytes than the segments describe.
        let l = carved(4, 4096);
        assert_eq!(
            run(&[seg(0, 8192), seg(0, 8192)], &l, 100, 16),
            Ok(vec![(0, vec![100])])
        );
    }

    #[test]
    fn zero_length_segments_are_skipped() {
        let l = bufs(&[100]);
        assert_eq!(
            run(&[seg(0, 0), seg(0x40, 100)], &l, 100, 16),
            Ok(vec![(0x40, vec![100])])
        );
    }

    #[test]
    fn the_local_side_is_each_buffer_s_window_not_its_capacity() {
        // A data buffer holds a 4 KiB capacity but only its window is data: a buffer trimmed
        // to the end of the transfer (len < capacity), and one whose window starts past its
        // first byte (in-capsule data after a command). Sized by capacity, the first work
        // request would take 4096 bytes of the first buffer and write past its window, and
        // the second would start at the buffer's base instead of its window.
        let mut a = IoBuf::alloc(4096).unwrap();
        a.set_len(1000);
        let mut b = IoBuf::alloc(4096).unwrap();
        b.set_window(512, 2000);
        let local = [a, b];
        let mut sges = Vec::new();
        let n = plan(
            [seg(0x8000, 3000)],
            &local,
            3000,
            16,
            |_| Some(1),
            |raddr, _, s| {
                assert_eq!(raddr, 0x8000);
                sges.extend(s.as_slice().iter().map(|g| (g.addr, g.length)));
            },
        )
        .unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            sges,
            [(local[0].addr(), 1000), (local[1].addr(), 2000)],
            "the work request covers exactly the two windows"
        );
        assert_eq!(local[1].addr(), local[1].base_addr() + 512);
        // More than the windows hold is a shortfall, whatever the capacity.
        assert_eq!(
            plan([seg(0, 3001)], &local, 3001, 16, |_| Some(1), |_, _, _| {}),
            Err(PlanError::ShortBuffers)
        );
    }

    #[test]
    fn count_agrees_with_plan() {
        let cases: &[(&[RemoteSegment], &[usize], u32, usize)] = &[
            (&[seg(0, 4096)], &[4096], 4096, 16),
            (&[seg(0, 4096)], &[4096], 20, 16),
            (&[seg(0, 4096)], &[4096], 0, 16),
            (&[seg(0, 100)], &[100], 200, 16),
            (&[seg(0, 200)], &[100], 200, 16),
            (&[seg(0, 450)], &[100, 100, 100, 100, 50], 450, 2),
            (&[seg(0x10, 200), seg(0x9000, 400)], &[300, 300], 600, 16),
            (&[seg(0, 100), seg(0, 100)], &[4096], 100, 16),
        ];
        for &(remote, sizes, total, max_sge) in cases {
            let l = bufs(sizes);
            let planned = plan(
                remote.iter().copied(),
                &l,
                total,
                max_sge,
                |_| Some(1),
                |_, _, _| {},
            );
            assert_eq!(
                count(remote.iter().copied(), &l, total, max_sge),
                planned,
                "{sizes:?} {total}"
            );
        }
    }

    #[test]
    fn shortfalls_are_errors() {
        let l = bufs(&[100]);
        assert_eq!(
            run(&[seg(0, 200)], &l, 200, 16),
            Err(PlanError::ShortBuffers)
        );
        assert_eq!(
            run(&[seg(0, 100)], &l, 200, 16),
            Err(PlanError::ShortSegments),
            "remote shorter than the total"
        );
        let none = plan([seg(0, 10)], &l, 10, 4, |_| None, |_, _, _| {});
        assert_eq!(none, Err(PlanError::Unregistered), "missing lkey");
    }

    #[test]
    fn build_appends_unsignaled_reads_or_writes_and_leaves_nothing_on_error() {
        let local = carved(4, 4096);
        let mut wrs = vec![SendWr::send(1, SgeList::new())];
        let n = build(
            &mut wrs,
            RdmaOp::Write,
            9,
            [seg(0x10_0000, 6000), seg(0x20_0000, 3000)],
            &local,
            9000,
            16,
            |_| Some(5),
        )
        .unwrap();
        assert_eq!(n, 2);
        assert_eq!(wrs.len(), 3);
        assert_eq!(
            wrs[1].op,
            WrOp::RdmaWrite {
                remote_addr: 0x10_0000,
                rkey: 7
            }
        );
        assert_eq!(wrs[1].sges.total_len(), 6000);
        assert_eq!(wrs[2].sges.total_len(), 3000);
        assert_eq!(wrs[2].sges.as_slice()[0].addr, local[1].addr() + 1904);
        assert!(wrs[1..].iter().all(|w| !w.signaled && w.wr_id == 9));
        assert!(wrs[1].sges.as_slice().iter().all(|s| s.lkey == 5));
        let n = build(
            &mut wrs,
            RdmaOp::Read,
            9,
            [seg(0x1000, 100)],
            &local,
            100,
            16,
            |_| Some(5),
        )
        .unwrap();
        assert_eq!(n, 1);
        assert_eq!(
            wrs[3].op,
            WrOp::RdmaRead {
                remote_addr: 0x1000,
                rkey: 7
            }
        );
        let one = carved(1, 4096);
        for (segs, total, e) in [
            (&[seg(0, 100)][..], 200, PlanError::ShortSegments),
            (
                &[seg(0, 4096), seg(0, 4096)][..],
                8192,
                PlanError::ShortBuffers,
            ),
        ] {
            assert_eq!(
                build(
                    &mut wrs,
                    RdmaOp::Read,
                    1,
                    segs.iter().copied(),
                    &one,
                    total,
                    1,
                    |_| Some(5)
                ),
                Err(e)
            );
            assert_eq!(wrs.len(), 4, "nothing left behind");
        }
    }
}
