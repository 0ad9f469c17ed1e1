//! The per-reactor side of a range lock: the gate every write-class command to one bdev
//! passes on one reactor.

use arrayvec::ArrayVec;

use super::{LbaRange, LockId, Owner};

/// Locks one gate holds at once (locks of non-overlapping compare-and-writes in flight on
/// the bdev).
pub const GATE_CAPACITY: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct GateLock {
    id: LockId,
    range: LbaRange,
    owner: Owner,
    /// Writes admitted before the lock arrived and not yet completed.
    draining: u32,
}

/// May a write-class command run now?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Run it.
    Go,
    /// Park it until this lock is released ([`RangeGate::unlock`]), then ask again.
    Wait(LockId),
}

/// The gate is full: the lock cannot be installed (the coordinator never sends more than
/// its own capacity, which is not larger than the gate's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("range lock gate full")]
pub struct GateFull;

/// One reactor's view of the locked ranges of one bdev. Owned by the reactor; no lock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeGate {
    locks: ArrayVec<GateLock, GATE_CAPACITY>,
}

impl RangeGate {
    /// A gate with nothing locked.
    pub fn new() -> RangeGate {
        RangeGate::default()
    }

    /// Nothing locked: the fast path of every write.
    pub fn is_idle(&self) -> bool {
        self.locks.is_empty()
    }

    /// Per write-class command (Write, Write Zeroes, DSM/UNMAP, WRITE SAME, …): `owner` is
    /// the compare-and-write the command belongs to, if it is one's own write. Constant time
    /// when nothing is locked.
    ///
    /// While a lock is still draining, every other write waits, overlapping or not: a reactor
    /// that counts all its writes in flight (rather than the overlapping ones, which needs
    /// their ranges) then knows that every write completing meanwhile is one it counted.
    pub fn admit(&self, range: LbaRange, owner: Option<Owner>) -> Admit {
        for l in &self.locks {
            if (l.draining > 0 || l.range.overlaps(range)) && Some(l.owner) != owner {
                return Admit::Wait(l.id);
            }
        }
        Admit::Go
    }

    /// A lock request arrived (by message from the coordinator). `inflight_overlapping` is
    /// the number of write-class commands this reactor admitted earlier that overlap
    /// `range` and have not completed (the reactor counts its outstanding requests: this
    /// path is rare). Returns `true` if the reactor is already drained for it and should
    /// acknowledge at once; otherwise [`RangeGate::completed`] reports when.
    pub fn lock(
        &mut self,
        id: LockId,
        range: LbaRange,
        owner: Owner,
        inflight_overlapping: u32,
    ) -> Result<bool, GateFull> {
        self.locks
            .try_push(GateLock {
                id,
                range,
                owner,
                draining: inflight_overlapping,
            })
            .map_err(|_| GateFull)?;
        Ok(inflight_overlapping == 0)
    }

    /// Whether lock `id` is installed.
    pub fn has(&self, id: LockId) -> bool {
        self.locks.iter().any(|l| l.id == id)
    }

    /// A write-class command admitted on this reactor completed: `ack` is called for every
    /// lock it finished draining (acknowledge those to the coordinator). Constant time when
    /// nothing is locked.
    pub fn completed(&mut self, range: LbaRange, mut ack: impl FnMut(LockId)) {
        for l in self.locks.iter_mut() {
            if l.draining > 0 && l.range.overlaps(range) {
                l.draining -= 1;
                if l.draining == 0 {
                    ack(l.id);
                }
            }
        }
    }

    /// The lock was released (by message): commands parked on it may be admitted again.
    pub fn unlock(&mut self, id: LockId) {
        self.locks.retain(|l| l.id != id);
    }
}
