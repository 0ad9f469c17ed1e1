//! A shared receive queue on one poll group and device, with the receives waiting to be
//! posted.
//!
//! Receives a poll group hands back while it works are collected and posted together at the
//! end of the poll ([`SharedRecvQueue::flush`]): one doorbell for the batch (on soft-RoCE a
//! doorbell is a system call). The poll group posts them before the responses it sends in the
//! same poll, so the receive is there before the credit that lets the peer use it.
//!
//! A receive that is always posted the same way (the same buffers, the same id) can be kept
//! as a *slot* ([`SharedRecvQueue::add_slot`]): reposting it queues its index
//! ([`SharedRecvQueue::push_slot`]) and the flush posts the work request kept in the slot,
//! so nothing of the ≈ 270-byte work request is built or copied per repost.

use fabric::{FabricError, Pd, PostError, RecvWr, Srq};

/// A shared receive queue with its batch.
pub struct SharedRecvQueue {
    srq: Srq,
    batch: Vec<RecvWr>,
    /// Receives kept for reposting by index.
    slots: Vec<RecvWr>,
    /// Slots queued for the next flush (posted after `batch`).
    queued: Vec<u32>,
    posted: u32,
}

impl std::fmt::Debug for SharedRecvQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRecvQueue")
            .field("posted", &self.posted)
            .field("batched", &(self.batch.len() + self.queued.len()))
            .field("slots", &self.slots.len())
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
            slots: Vec::new(),
            queued: Vec::with_capacity(depth as usize),
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

    /// Keeps `wr` as a slot, to be queued by [`SharedRecvQueue::push_slot`] (as often as it
    /// is reposted); returns the slot's index.
    pub fn add_slot(&mut self, wr: RecvWr) -> u32 {
        self.slots.push(wr);
        (self.slots.len() - 1) as u32
    }

    /// The work request kept in `slot`.
    pub fn slot(&self, slot: u32) -> Option<&RecvWr> {
        self.slots.get(slot as usize)
    }

    /// Replaces the work request kept in `slot` (its buffers changed); `false` if there is no
    /// such slot.
    pub fn set_slot(&mut self, slot: u32, wr: RecvWr) -> bool {
        match self.slots.get_mut(slot as usize) {
            Some(s) => {
                *s = wr;
                true
            }
            None => false,
        }
    }

    /// Queues the receive kept in `slot` for the next [`SharedRecvQueue::flush`] (a slot that
    /// does not exist is ignored).
    #[inline]
    pub fn push_slot(&mut self, slot: u32) {
        if (slot as usize) < self.slots.len() {
            self.queued.push(slot);
        }
    }

    /// Receives posted and not completed yet.
    pub fn posted(&self) -> u32 {
        self.posted
    }

    /// A receive of this queue completed.
    pub fn completed(&mut self) {
        self.posted = self.posted.saturating_sub(1);
    }

    /// Posts the batch, then the queued slots (one doorbell each). Receives the adapter
    /// refused, and those after them, are handed to
    /// `unposted` (their buffers are the caller's again). `None` if there was nothing to post.
    pub fn flush(&mut self, mut unposted: impl FnMut(&RecvWr)) -> Option<Flushed> {
        if self.batch.is_empty() && self.queued.is_empty() {
            return None;
        }
        let mut posted = 0;
        let mut error = None;
        // Two posts (two doorbells) only when both kinds were queued: a user queues one kind.
        if !self.batch.is_empty() {
            let n = self.batch.len();
            let res = self.srq.post_recv(self.batch.iter());
            let done = res.as_ref().map_or_else(|e| e.posted.min(n), |_| n);
            for wr in &self.batch[done..] {
                unposted(wr);
            }
            posted += done;
            error = res.err();
        }
        if !self.queued.is_empty() {
            let slots = self.slots.as_slice();
            let n = self.queued.len();
            let done = if error.is_some() {
                0
            } else {
                let res = self.srq.post_recv(kept(slots, &self.queued));
                let done = res.as_ref().map_or_else(|e| e.posted.min(n), |_| n);
                error = res.err();
                done
            };
            for wr in kept(slots, &self.queued[done..]) {
                unposted(wr);
            }
            posted += done;
        }
        self.batch.clear();
        self.queued.clear();
        self.posted += posted as u32;
        Some(Flushed { posted, error })
    }
}

/// The work requests kept in `slots` for the queued slot indices `q`.
fn kept<'a>(slots: &'a [RecvWr], q: &'a [u32]) -> impl Iterator<Item = &'a RecvWr> + Clone + 'a {
    q.iter().map(|&s| &slots[s as usize])
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::{Access, Fabric, SgeList, SimNetwork};
    use std::net::{IpAddr, Ipv4Addr};

    /// A shared receive queue of depth 4 on a simulated device `name` (10.9.1.`host`), and
    /// the 64-byte receive `i` of a registered region.
    fn rig(name: &str, host: u8) -> (SimNetwork, SharedRecvQueue, impl Fn(u64) -> RecvWr) {
        let net = SimNetwork::new();
        net.add_device(name, IpAddr::V4(Ipv4Addr::new(10, 9, 1, host)))
            .unwrap();
        let dev = Fabric::sim(&net).devices().unwrap().remove(0);
        let pd = dev.alloc_pd().unwrap();
        let region = iobuf::DmaRegion::new(8 * 64).unwrap();
        let mr = pd.register(&region, Access::LOCAL_WRITE).unwrap();
        let q = SharedRecvQueue::new(&pd, 4, 1).unwrap();
        let wr = move |i: u64| RecvWr::new(i, SgeList::one(mr.sge(region.addr() + i * 64, 64)));
        (net, q, wr)
    }

    #[test]
    fn batches_post_in_one_flush_and_refusals_come_back() {
        let (_net, mut q, wr) = rig("srq0", 1);
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

    #[test]
    fn slots_post_the_kept_work_request_after_the_batch() {
        let (_net, mut q, wr) = rig("srq1", 2);
        let a = q.add_slot(wr(10));
        let b = q.add_slot(wr(11));
        assert_eq!(q.slot(b).map(|w| w.wr_id), Some(11));
        assert!(q.set_slot(b, wr(12)));
        assert!(!q.set_slot(7, wr(13)), "no slot 7");
        q.push_slot(7);
        assert_eq!(q.flush(|_| panic!("nothing queued")), None);
        q.push_slot(b);
        q.push(wr(1));
        q.push_slot(a);
        // Three fit of four; the batch goes first, then the slots in the order queued.
        q.push(wr(2));
        q.push_slot(a);
        let mut back = Vec::new();
        let f = q.flush(|w| back.push(w.wr_id)).unwrap();
        assert_eq!(f.posted, 4);
        assert!(f.error.is_some());
        assert_eq!(back, [10]);
        assert_eq!(q.posted(), 4);
        // The slots stay for the next repost; the queue is empty again.
        assert_eq!(q.slot(a).map(|w| w.wr_id), Some(10));
        assert_eq!(q.flush(|_| panic!("nothing queued")), None);
    }
}
