//! Receive queues (a queue pair's own, or a shared one): posted receives stored compactly.
//!
//! A [`RecvWr`] is ≈ 270 bytes (room for [`crate::types::MAX_SGE`] entries); receives use one
//! or two. The queue keeps each posted receive as its `wr_id` and entry count in a ring, and
//! its entries in a parallel array with room for the queue's `max_sge` per slot, so a post
//! copies only the entries in use and a SEND reads them in place.

use super::KeyCache;
use crate::types::{RecvWr, Sge};

/// A posted receive, borrowed from its queue.
#[derive(Clone, Copy)]
pub(crate) struct Posted<'a> {
    pub(crate) wr_id: u64,
    pub(crate) sges: &'a [Sge],
}

/// The posted receives of one queue, oldest first.
pub(crate) struct RecvRing {
    /// `wr_id` and entry count of each slot.
    slots: Box<[(u64, u32)]>,
    /// `stride` entries per slot.
    sges: Box<[Sge]>,
    stride: usize,
    head: usize,
    len: usize,
}

impl RecvRing {
    /// Room for `max_wr` receives of at most `max_sge` entries each.
    fn new(max_wr: usize, max_sge: usize) -> Self {
        RecvRing {
            slots: vec![(0, 0); max_wr].into_boxed_slice(),
            sges: vec![Sge::default(); max_wr * max_sge].into_boxed_slice(),
            stride: max_sge,
            head: 0,
            len: 0,
        }
    }

    /// Receives posted and not consumed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn wrap(&self, i: usize) -> usize {
        if i >= self.slots.len() {
            i - self.slots.len()
        } else {
            i
        }
    }

    /// Appends a receive; gives it back when the queue is full or the receive has more
    /// entries than a slot holds (the caller refuses the post before).
    #[inline]
    pub(crate) fn push_back<'a>(&mut self, wr: &'a RecvWr) -> Result<(), &'a RecvWr> {
        let n = wr.sges.len();
        if self.len == self.slots.len() || n > self.stride {
            return Err(wr);
        }
        let i = self.wrap(self.head + self.len);
        self.slots[i] = (wr.wr_id, n as u32);
        self.sges[i * self.stride..i * self.stride + n].copy_from_slice(wr.sges.as_slice());
        self.len += 1;
        Ok(())
    }

    /// The oldest receive.
    #[inline]
    pub(crate) fn front(&self) -> Option<Posted<'_>> {
        if self.len == 0 {
            return None;
        }
        let (wr_id, n) = self.slots[self.head];
        let at = self.head * self.stride;
        Some(Posted {
            wr_id,
            sges: &self.sges[at..at + n as usize],
        })
    }

    /// Drops the oldest receive.
    #[inline]
    pub(crate) fn pop_front(&mut self) {
        if self.len > 0 {
            self.head = self.wrap(self.head + 1);
            self.len -= 1;
        }
    }

    /// Drops every receive.
    pub(crate) fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// Takes every receive, oldest first: their `wr_id`s.
    pub(crate) fn drain_ids(&mut self) -> impl Iterator<Item = u64> + '_ {
        let (head, len) = (self.head, self.len);
        self.head = 0;
        self.len = 0;
        (0..len).map(move |k| self.slots[self.wrap(head + k)].0)
    }
}

/// A receive queue with the key cache of the receives' local keys.
pub(crate) struct RecvQ {
    pub(crate) q: RecvRing,
    pub(crate) cache: KeyCache,
}

impl RecvQ {
    /// Room for `max_wr` receives of at most `max_sge` entries each.
    pub(crate) fn new(max_wr: usize, max_sge: usize) -> Self {
        RecvQ {
            q: RecvRing::new(max_wr, max_sge),
            cache: KeyCache::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::SgeList;

    fn wr(id: u64, n: usize) -> RecvWr {
        let sges: Vec<Sge> = (0..n as u64)
            .map(|k| Sge {
                addr: id * 100 + k,
                length: k as u32 + 1,
                lkey: id as u32,
            })
            .collect();
        RecvWr::new(id, SgeList::from_slice(&sges).unwrap())
    }

    #[test]
    fn keeps_order_and_entries_across_wraps_and_refuses_beyond_its_room() {
        let mut r = RecvRing::new(3, 2);
        assert!(r.front().is_none());
        let mut next_in = 0;
        let mut next_out = 0;
        for round in 0..10 {
            while r.push_back(&wr(next_in, (next_in % 3) as usize)).is_ok() {
                next_in += 1;
            }
            assert_eq!(r.len(), 3, "round {round}: full");
            assert!(r.push_back(&wr(77, 3)).is_err(), "3 entries > stride 2");
            for _ in 0..(round % 3) + 1 {
                let Some(p) = r.front() else { break };
                assert_eq!(p.wr_id, next_out);
                assert_eq!(
                    p.sges,
                    wr(next_out, (next_out % 3) as usize).sges.as_slice()
                );
                r.pop_front();
                next_out += 1;
            }
        }
        let left: Vec<u64> = r.drain_ids().collect();
        assert_eq!(left, (next_out..next_in).collect::<Vec<_>>());
        assert_eq!(r.len(), 0);
        assert!(r.front().is_none());
        assert!(r.push_back(&wr(5, 1)).is_ok(), "empty after the drain");
    }

    #[test]
    fn a_queue_without_entries_takes_empty_receives() {
        let mut r = RecvRing::new(2, 0);
        assert!(r.push_back(&wr(1, 0)).is_ok());
        assert!(r.push_back(&wr(2, 1)).is_err());
        assert_eq!(r.front().map(|p| (p.wr_id, p.sges.len())), Some((1, 0)));
    }
}
