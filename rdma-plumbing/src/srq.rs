//! A shared receive queue on one poll group and device, with the receives waiting to be
//! posted.
//!
//! Receives a poll group hands back while it works are collected and posted together at the
//! end of the poll ([`SharedRecvQueue::flush`]): one doorbell for the batch (on soft-RoCE a
//! doorbell is a system call). The poll group posts them before the responses it sends in the
//! same poll, so the receive is there before the credit that lets the peer use it.

use fabric::{FabricError, Pd, PostError, RecvWr, Srq};

/// A shared receive queue with its batch.
pub struct SharedRecvQueue {
    srq: Srq,
    batch: Vec<RecvWr>,
    posted: u32,
}

impl std::fmt::Debug for SharedRecvQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRecvQueue")
            .field("posted", &self.posted)
            .field("batched", &self.batch.len())
            .finish()
    }
}

/// What one [`SharedRecvQueue::flush`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flushed {
    /// Receives posted.
    pub posted: usize,
    /// The adapter's refusal, if it refused some (the rest were handed to `unposted`).
    pub error: Option<PostError>,
}

impl SharedRecvQueue {
    /// A shared receive queue of `depth` receives of up to `max_sge` entries on `pd`.
    pub fn new(pd: &Pd, depth: u32, max_sge: u32) -> Result<Self, FabricError> {
        Ok(SharedRecvQueue {
            srq: pd.create_srq(depth, max_sge)?,
            batch: Vec::with_capacity(depth as usize),
            posted: 0,
        })
    }

    /// The queue, to create queue pairs on.
    pub fn srq(&self) -> &Srq {
        &self.srq
    }

    /// Queues a receive for the next [`SharedRecvQueue::flush`].
    pub fn push(&mut self, wr: RecvWr) {
        self.batch.push(wr);
    }

    /// Receives posted and not completed yet.
    pub fn posted(&self) -> u32 {
        self.posted
    }

    /// A receive of this queue completed.
    pub fn completed(&mut self) {
        self.posted = self.posted.saturating_sub(1);
    }

    /// Posts the batch (one doorbell). Receives the adapter refused are handed to
    /// `unposted` (their buffers are the caller's again). `None` if there was nothing to post.
    pub fn flush(&mut self, mut unposted: impl FnMut(&RecvWr)) -> Option<Flushed> {
        if self.batch.is_empty() {
            return None;
        }
        let n = self.batch.len();
        let res = self.srq.post_recv(self.batch.iter());
        let posted = res.as_ref().map_or_else(|e| e.posted.min(n), |_| n);
        for wr in &self.batch[posted..] {
            unposted(wr);
        }
        self.batch.clear();
        self.posted += posted as u32;
        Some(Flushed {
            posted,
            error: res.err(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::{Access, Fabric, SgeList, SimNetwork};
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn batches_post_in_one_flush_and_refusals_come_back() {
        let net = SimNetwork::new();
        net.add_device("srq0", IpAddr::V4(Ipv4Addr::new(10, 9, 1, 1)))
            .unwrap();
        let dev = Fabric::sim(&net).devices().unwrap().remove(0);
        let pd = dev.alloc_pd().unwrap();
        let region = iobuf::DmaRegion::new(8 * 64).unwrap();
        let mr = pd.register(&region, Access::LOCAL_WRITE).unwrap();
        let mut q = SharedRecvQueue::new(&pd, 4, 1).unwrap();
        let wr = |i: u64| RecvWr::new(i, SgeList::one(mr.sge(region.addr() + i * 64, 64)));
        assert_eq!(q.flush(|_| panic!("nothing to refuse")), None);
        for i in 0..3 {
            q.push(wr(i));
        }
        let f = q.flush(|_| panic!("all fit")).unwrap();
        assert_eq!(
            f,
            Flushed {
                posted: 3,
                error: None
            }
        );
        assert_eq!(q.posted(), 3);
        // One slot left: the rest of a batch of three comes back to the caller.
        for i in 3..6 {
            q.push(wr(i));
        }
        let mut back = Vec::new();
        let f = q.flush(|w| back.push(w.wr_id)).unwrap();
        assert_eq!(f.posted, 1);
        assert!(f.error.is_some());
        assert_eq!(back, [4, 5]);
        assert_eq!(q.posted(), 4);
        q.completed();
        assert_eq!(q.posted(), 3);
    }
}
