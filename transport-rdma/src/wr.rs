//! Planning RDMA READ/WRITE work requests: the host's keyed SGL segments on one side, the
//! request's local data buffers on the other. Each work request covers a contiguous piece of
//! one remote segment and at most `max_sge` local entries. Nothing is allocated: work requests
//! are produced one at a time into the caller's closure.

use fabric::{Sge, SgeList};
use iobuf::IoBuf;
use target_core::nvme::KeyedSgl;
use target_core::nvme::sgl::DataSgl;

/// The keyed segments of a decoded SGL (empty for other kinds).
pub(crate) fn remote(sgl: &DataSgl) -> &[KeyedSgl] {
    match sgl {
        DataSgl::Keyed(k) => std::slice::from_ref(k),
        DataSgl::KeyedList(l) => l.as_slice(),
        _ => &[],
    }
}

/// How many work requests [`plan`] would produce (`None` where it would fail on lengths),
/// without building them: one keyed segment into one buffer, the usual case, costs nothing.
pub(crate) fn count(
    remote: &[KeyedSgl],
    local: &[IoBuf],
    limit: u32,
    max_sge: usize,
) -> Option<u16> {
    if let ([r], [b]) = (remote, local)
        && limit <= r.len
        && limit as usize <= b.len()
    {
        return Some(u16::from(limit > 0));
    }
    plan(remote, local, limit, max_sge, |_| Some(0), |_, _, _| {})
}

/// Walks the first `limit` bytes of `remote` against `local`, calling `f(remote_addr, rkey,
/// sges)` for each work request. `lkey` maps a local buffer address to its key. Returns the
/// number of work requests, or `None` if the local buffers are too short or a buffer has no
/// key (a bug in the caller).
pub(crate) fn plan(
    remote: &[KeyedSgl],
    local: &[IoBuf],
    limit: u32,
    max_sge: usize,
    lkey: impl Fn(u64) -> Option<u32>,
    mut f: impl FnMut(u64, u32, SgeList),
) -> Option<u16> {
    let max_sge = max_sge.clamp(1, fabric::MAX_SGE);
    let mut left = u64::from(limit);
    let (mut bi, mut bo) = (0usize, 0usize);
    let mut count: u16 = 0;
    for r in remote {
        if left == 0 {
            break;
        }
        let mut rlen = u64::from(r.len).min(left);
        let mut raddr = r.addr;
        while rlen > 0 {
            let mut sges = SgeList::new();
            let mut wlen = 0u64;
            while wlen < rlen && sges.len() < max_sge {
                let b = local.get(bi)?;
                let avail = b.len() - bo;
                if avail == 0 {
                    bi += 1;
                    bo = 0;
                    continue;
                }
                let take = (avail as u64).min(rlen - wlen);
                let addr = b.addr() + bo as u64;
                let _ = sges.push(Sge {
                    addr,
                    length: take as u32,
                    lkey: lkey(addr)?,
                });
                bo += take as usize;
                wlen += take;
                if bo == b.len() {
                    bi += 1;
                    bo = 0;
                }
            }
            if wlen == 0 {
                return None;
            }
            f(raddr, r.key, sges);
            count = count.checked_add(1)?;
            raddr = raddr.wrapping_add(wlen);
            rlen -= wlen;
            left -= wlen;
        }
    }
    (left == 0).then_some(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bufs(sizes: &[usize]) -> Vec<IoBuf> {
        sizes
            .iter()
            .map(|&s| {
                let mut b = IoBuf::alloc(s.next_multiple_of(4096)).unwrap();
                b.set_len(s);
                b
            })
            .collect()
    }

    fn k(addr: u64, len: u32) -> KeyedSgl {
        KeyedSgl {
            addr,
            len,
            key: 7,
            invalidate: false,
        }
    }

    fn run(
        remote: &[KeyedSgl],
        local: &[IoBuf],
        limit: u32,
        max_sge: usize,
    ) -> Option<Vec<(u64, Vec<u32>)>> {
        let mut out = Vec::new();
        let n = plan(
            remote,
            local,
            limit,
            max_sge,
            |_| Some(1),
            |a, key, s| {
                assert_eq!(key, 7);
                out.push((a, s.as_slice().iter().map(|g| g.length).collect()));
            },
        )?;
        assert_eq!(n as usize, out.len());
        Some(out)
    }

    #[test]
    fn one_segment_one_buffer() {
        let l = bufs(&[4096]);
        assert_eq!(
            run(&[k(0x1000, 4096)], &l, 4096, 16),
            Some(vec![(0x1000, vec![4096])])
        );
    }

    #[test]
    fn one_segment_many_buffers_split_by_sge_limit() {
        let l = bufs(&[100, 100, 100, 100, 50]);
        let w = run(&[k(0, 450)], &l, 450, 2).unwrap();
        assert_eq!(
            w,
            vec![(0, vec![100, 100]), (200, vec![100, 100]), (400, vec![50])]
        );
    }

    #[test]
    fn many_segments_cross_buffers() {
        let l = bufs(&[300, 300]);
        let w = run(&[k(0x10, 200), k(0x9000, 400)], &l, 600, 16).unwrap();
        assert_eq!(w, vec![(0x10, vec![200]), (0x9000, vec![100, 300])]);
    }

    #[test]
    fn limit_trims_the_transfer() {
        let l = bufs(&[4096]);
        assert_eq!(run(&[k(0, 4096)], &l, 20, 16), Some(vec![(0, vec![20])]));
        assert_eq!(run(&[k(0, 4096)], &l, 0, 16), Some(vec![]));
    }

    #[test]
    fn count_agrees_with_plan() {
        let cases: &[(&[KeyedSgl], &[usize], u32, usize)] = &[
            (&[k(0, 4096)], &[4096], 4096, 16),
            (&[k(0, 4096)], &[4096], 20, 16),
            (&[k(0, 4096)], &[4096], 0, 16),
            (&[k(0, 100)], &[100], 200, 16),
            (&[k(0, 200)], &[100], 200, 16),
            (&[k(0, 450)], &[100, 100, 100, 100, 50], 450, 2),
            (&[k(0x10, 200), k(0x9000, 400)], &[300, 300], 600, 16),
        ];
        for &(remote, sizes, limit, max_sge) in cases {
            let l = bufs(sizes);
            let planned = plan(remote, &l, limit, max_sge, |_| Some(1), |_, _, _| {});
            assert_eq!(
                count(remote, &l, limit, max_sge),
                planned,
                "{sizes:?} {limit}"
            );
        }
    }

    #[test]
    fn short_local_buffers_fail() {
        let l = bufs(&[100]);
        assert_eq!(run(&[k(0, 200)], &l, 200, 16), None);
        assert_eq!(
            run(&[k(0, 100)], &l, 200, 16),
            None,
            "remote shorter than limit"
        );
        let none = plan(&[k(0, 10)], &l, 10, 4, |_| None, |_, _, _| {});
        assert_eq!(none, None, "missing lkey");
    }
}
