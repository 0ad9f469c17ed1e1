//! The range lock of one volume for compare-and-write ([`crate::compare_write`]), bound to
//! the reactors: the volume's [`LockCoordinator`] and the messages that install and remove
//! locks in every poll group's [`RangeGate`](crate::compare_write::RangeGate) (one per
//! namespace per poll group, see `PgCore::submit_io`).
//!
//! The coordinator sits behind a mutex that only compare-and-writes and their
//! acknowledgements take — never another I/O — instead of living on a home reactor: the
//! requests, acknowledgements and releases then need no message of their own; the lock and
//! unlock broadcasts and the grant to the owner are control messages (unbounded queue, so
//! none is lost).

use std::sync::Arc;

use parking_lot::Mutex;

use super::Target;
use super::poll_group::{TAG_MASK, resume_transport_request, with_poll_group};
use crate::compare_write::{LbaRange, LockCoordinator, LockId, Owner, Request};

/// The owner tag of a request: its reactor, transport and 48-bit token. The bdev I/O of the
/// request carries the same (reactor of the poll group, transport bits and token of its tag),
/// so its write passes the gates.
pub(crate) fn owner_of(reactor: usize, transport: usize, token: u64) -> Owner {
    Owner((reactor as u64) << 56 | (transport as u64 & 0xFF) << 48 | (token & TAG_MASK))
}

fn split(o: Owner) -> (usize, usize, u64) {
    (
        (o.0 >> 56) as usize,
        ((o.0 >> 48) & 0xFF) as usize,
        o.0 & TAG_MASK,
    )
}

/// What became of a lock request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CawRequest {
    /// Waiting: the request is resumed (`TransportPollGroup::resume_request`) once the
    /// range is its own ([`CawLock::held_by`]).
    Waiting,
    /// Too many compare-and-writes waiting: a retryable status.
    Busy,
}

/// The compare-and-write lock of one volume (namespace), shared by every poll group.
pub struct CawLock {
    coord: Mutex<LockCoordinator>,
    sub: u32,
    nsid: u32,
}

impl std::fmt::Debug for CawLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CawLock").field("nsid", &self.nsid).finish()
    }
}

impl CawLock {
    /// The lock of namespace `nsid` of subsystem `sub`, on a target of `reactors` reactors
    /// (each acknowledges every lock).
    pub fn new(sub: u32, nsid: u32, reactors: usize) -> CawLock {
        CawLock {
            coord: Mutex::new(LockCoordinator::new(reactors as u32)),
            sub,
            nsid,
        }
    }

    /// Asks for `range` for `owner`.
    pub fn request(
        self: &Arc<Self>,
        target: &Arc<Target>,
        range: LbaRange,
        owner: Owner,
    ) -> CawRequest {
        let r = self.coord.lock().request(range, owner);
        match r {
            Request::Broadcast(id) => {
                self.broadcast_lock(target, id, range, owner);
                CawRequest::Waiting
            }
            Request::Queued => CawRequest::Waiting,
            Request::Busy => CawRequest::Busy,
        }
    }

    /// Installs every lock being acquired or held in `gate`, the new gate of a poll group
    /// that starts serving the namespace (nothing of it is in flight there). The poll group
    /// acknowledged those locks already (a lock message that finds no namespace
    /// acknowledges at once); one whose message is still on its way is then found installed
    /// and acknowledged at once (`PgCore::caw_install`).
    pub(crate) fn install_held(&self, gate: &mut crate::compare_write::RangeGate) {
        for (id, range, owner) in self.coord.lock().locks() {
            if let Err(e) = gate.lock(id, range, owner, 0) {
                tracing::error!("compare-and-write: {e}");
            }
        }
    }

    /// The lock `owner` holds, if every reactor has acknowledged it.
    pub fn held_by(&self, owner: Owner) -> Option<LockId> {
        self.coord.lock().held_by(owner)
    }

    /// A reactor acknowledged lock `id`; the last one hands the range to its owner.
    pub fn ack(&self, target: &Arc<Target>, id: LockId) {
        let owner = self.coord.lock().ack(id);
        if let Some(o) = owner {
            let (reactor, transport, token) = split(o);
            let sent = target.reactors().send_ctrl(reactor, move |ctx| {
                resume_transport_request(ctx, transport, token);
            });
            if let Err(e) = sent {
                tracing::warn!("compare-and-write: cannot resume the lock owner: {e}");
            }
        }
    }

    /// The owner is done with lock `id`: every gate drops it, and queued requests it
    /// blocked start.
    pub fn release(self: &Arc<Self>, target: &Arc<Target>, id: LockId) {
        let mut started = arrayvec::ArrayVec::<(LockId, LbaRange, Owner), 16>::new();
        self.coord.lock().release(id, |id, range, owner| {
            let _ = started.try_push((id, range, owner));
        });
        let (sub, nsid) = (self.sub, self.nsid);
        for r in 0..target.reactors().len() {
            let sent = target.reactors().send_ctrl(r, move |ctx| {
                with_poll_group(ctx, |pg| pg.core().caw_unlock(sub, nsid, id));
            });
            if let Err(e) = sent {
                tracing::warn!("compare-and-write: cannot release a lock on reactor {r}: {e}");
            }
        }
        for (id, range, owner) in started {
            self.broadcast_lock(target, id, range, owner);
        }
    }

    /// The owner's command ended without finishing (aborted): its lock, held or being
    /// acquired, is released; a queued request is dropped.
    pub fn cancel(self: &Arc<Self>, target: &Arc<Target>, owner: Owner) {
        let id = self.coord.lock().cancel(owner);
        if let Some(id) = id {
            self.release(target, id);
        }
    }

    fn broadcast_lock(
        self: &Arc<Self>,
        target: &Arc<Target>,
        id: LockId,
        range: LbaRange,
        owner: Owner,
    ) {
        let (sub, nsid) = (self.sub, self.nsid);
        for r in 0..target.reactors().len() {
            let me = Arc::clone(self);
            let t = Arc::clone(target);
            let sent = target.reactors().send_ctrl(r, move |ctx| {
                let drained =
                    with_poll_group(ctx, |pg| pg.core().caw_install(sub, nsid, id, range, owner))
                        .unwrap_or(true);
                if drained {
                    me.ack(&t, id);
                }
            });
            if let Err(e) = sent {
                tracing::warn!("compare-and-write: cannot send a lock to reactor {r}: {e}");
                self.ack(target, id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_tags_round_trip() {
        let o = owner_of(3, 2, 0xABCD_EF01_2345);
        assert_eq!(split(o), (3, 2, 0xABCD_EF01_2345));
        assert_ne!(owner_of(0, 0, 1), owner_of(1, 0, 1));
    }
}
