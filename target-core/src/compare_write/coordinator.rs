//! The per-bdev side of a range lock: grants locks in order and counts acknowledgements.

use arrayvec::ArrayVec;

use super::gate::GATE_CAPACITY;
use super::{LbaRange, LockId, Owner};

/// Compare-and-writes waiting behind an overlapping one, per bdev.
pub const QUEUE_CAPACITY: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Active {
    id: LockId,
    range: LbaRange,
    owner: Owner,
    acks_left: u32,
}

/// What became of a lock request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Send `lock(id, range, owner)` to every reactor; the lock is held once
    /// [`LockCoordinator::ack`] returns the owner.
    Broadcast(LockId),
    /// Waiting behind an overlapping lock; [`LockCoordinator::release`] starts it later.
    Queued,
    /// Too many compare-and-writes waiting: complete the command with a retryable status
    /// (SCSI BUSY, NVMe Command Interrupted).
    Busy,
}

/// Grants the range locks of one bdev. Owned by the bdev's home reactor; requests, acks
/// and releases reach it by message. Fixed size, no heap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockCoordinator {
    reactors: u32,
    next: u64,
    active: ArrayVec<Active, GATE_CAPACITY>,
    queued: ArrayVec<(LbaRange, Owner), QUEUE_CAPACITY>,
}

impl LockCoordinator {
    /// A coordinator for a bdev served by `reactors` reactors (each has a
    /// [`RangeGate`](super::RangeGate) and must acknowledge every lock).
    pub fn new(reactors: u32) -> LockCoordinator {
        LockCoordinator {
            reactors: reactors.max(1),
            next: 1,
            active: ArrayVec::new(),
            queued: ArrayVec::new(),
        }
    }

    /// Locks being acquired or held.
    pub fn active(&self) -> usize {
        self.active.len()
    }

    /// Requests waiting.
    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    /// A compare-and-write asks for `range`. Overlapping requests are served in arrival
    /// order; non-overlapping ones run in parallel.
    pub fn request(&mut self, range: LbaRange, owner: Owner) -> Request {
        let blocked = self.active.iter().any(|a| a.range.overlaps(range))
            || self.queued.iter().any(|(r, _)| r.overlaps(range))
            || self.active.is_full();
        if blocked {
            return match self.queued.try_push((range, owner)) {
                Ok(()) => Request::Queued,
                Err(_) => Request::Busy,
            };
        }
        Request::Broadcast(self.install(range, owner))
    }

    fn install(&mut self, range: LbaRange, owner: Owner) -> LockId {
        let id = LockId(self.next);
        self.next += 1;
        self.active.push(Active {
            id,
            range,
            owner,
            acks_left: self.reactors,
        });
        id
    }

    /// A reactor acknowledged lock `id` (its gate holds it and is drained). Returns the
    /// owner once every reactor has: tell it the range is its own.
    pub fn ack(&mut self, id: LockId) -> Option<Owner> {
        let a = self.active.iter_mut().find(|a| a.id == id)?;
        if a.acks_left == 0 {
            return None;
        }
        a.acks_left -= 1;
        (a.acks_left == 0).then_some(a.owner)
    }

    /// Every lock being acquired or held: `(id, range, owner)`. A reactor that starts
    /// serving the bdev while locks are out installs them in its new gate (it acknowledged
    /// them already, as a reactor without the bdev does).
    pub fn locks(&self) -> impl Iterator<Item = (LockId, LbaRange, Owner)> + '_ {
        self.active.iter().map(|a| (a.id, a.range, a.owner))
    }

    /// The lock `owner` holds, once every reactor has acknowledged it.
    pub fn held_by(&self, owner: Owner) -> Option<LockId> {
        self.active
            .iter()
            .find(|a| a.owner == owner && a.acks_left == 0)
            .map(|a| a.id)
    }

    /// The owner went away (its command was aborted): a queued request is dropped (`None`);
    /// the id of a lock it was acquiring or holding is returned, to be released as usual.
    pub fn cancel(&mut self, owner: Owner) -> Option<LockId> {
        self.queued.retain(|(_, o)| *o != owner);
        self.active.iter().find(|a| a.owner == owner).map(|a| a.id)
    }

    /// The owner is done with lock `id`: send `unlock(id)` to every reactor. `start` is
    /// called for every queued request that can now go (broadcast those as in
    /// [`Request::Broadcast`]).
    pub fn release(&mut self, id: LockId, mut start: impl FnMut(LockId, LbaRange, Owner)) {
        self.active.retain(|a| a.id != id);
        let mut i = 0;
        while i < self.queued.len() {
            let (range, owner) = self.queued[i];
            let free = !self.active.is_full()
                && !self.active.iter().any(|a| a.range.overlaps(range))
                && !self.queued[..i].iter().any(|(r, _)| r.overlaps(range));
            if free {
                self.queued.remove(i);
                let id = self.install(range, owner);
                start(id, range, owner);
            } else {
                i += 1;
            }
        }
    }
}
