//! The reservation state of one volume (a namespace's bdev), shared by every protocol that
//! exports it, and its publication to the data path.
//!
//! A bdev is claimed by exactly one namespace, and that namespace is at once an NVMe
//! namespace and a SCSI logical unit, so one [`VolumeReservation`] per namespace is the
//! per-bdev state `docs/reservations.md` describes.
//!
//! - *Reservation commands* (SCSI PERSISTENT RESERVE IN/OUT, RESERVE/RELEASE; rare: cluster
//!   membership changes) run [`VolumeReservation::update`] / [`VolumeReservation::read`] on
//!   the reactor that received them. The authoritative [`Reservation`] sits behind a mutex
//!   that only these commands and view refreshes take, never a read or write.
//! - *The data path* (every poll group, per command) loads [`VolumeReservation::epoch`] — one
//!   atomic load — and compares it with the epoch of the [`AccessView`] the poll group
//!   holds; only when they differ (after a reservation change) does it take the mutex once to
//!   fetch the new view. The check itself ([`AccessView`] standing and `permits`) is a few
//!   branches while nothing is reserved, and a walk over at most 128 registrants while
//!   something is. No allocation, and no lock while the state does not change.
//! - *Ordering*: `update` publishes the new view and bumps the epoch before it returns, so
//!   once a reservation command completes, every command checked afterwards on any reactor
//!   sees the new state.
//! - *Persistence*: with a `ptpl_file`, the state is loaded at creation and rewritten
//!   atomically (`ptpl_file::store`) inside `update`, before the command completes, when the
//!   persisted contents changed. The write blocks the calling reactor (fsync); reservation
//!   commands are rare, and moving it to a blocking thread is listed as remaining work.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::reservation::{AccessView, Initiator, Notice, Reservation, ptpl_file};

/// At most this many undelivered notices are kept per volume; older ones are dropped (a
/// recipient that never comes back must not grow the list forever).
const MAX_PENDING_NOTICES: usize = 256;

struct Inner {
    state: Reservation,
    view: Arc<AccessView>,
    /// Notices (unit attentions) for SCSI nexuses, taken by each nexus's next command to
    /// the volume.
    notices: Vec<Notice>,
}

/// The reservation state of one volume.
pub struct VolumeReservation {
    inner: Mutex<Inner>,
    epoch: AtomicU64,
    pending_notices: AtomicU64,
    ptpl_file: Option<PathBuf>,
    bdev_uuid: uuid::Uuid,
}

impl std::fmt::Debug for VolumeReservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeReservation")
            .field("epoch", &self.epoch())
            .field("ptpl_file", &self.ptpl_file)
            .finish()
    }
}

impl VolumeReservation {
    /// The state of the bdev `bdev_uuid`: empty, or loaded from `ptpl_file` (a missing file
    /// is an empty state; contents for another bdev or not in SPDK's format are an error).
    pub fn load(
        ptpl_file: Option<&Path>,
        bdev_uuid: uuid::Uuid,
    ) -> Result<VolumeReservation, ptpl_file::LoadError> {
        let state = match ptpl_file {
            Some(p) => ptpl_file::load_state(p, &bdev_uuid)?,
            None => Reservation::new(false),
        };
        Ok(Self::with_state(
            state,
            ptpl_file.map(Path::to_owned),
            bdev_uuid,
        ))
    }

    fn with_state(
        state: Reservation,
        ptpl_file: Option<PathBuf>,
        bdev_uuid: uuid::Uuid,
    ) -> VolumeReservation {
        let view = Arc::new(AccessView::of(&state));
        VolumeReservation {
            epoch: AtomicU64::new(view.epoch()),
            inner: Mutex::new(Inner {
                state,
                view,
                notices: Vec::new(),
            }),
            pending_notices: AtomicU64::new(0),
            ptpl_file,
            bdev_uuid,
        }
    }

    /// A volume without a `ptpl_file` (tests, and namespaces added without one).
    pub fn volatile() -> VolumeReservation {
        Self::with_state(Reservation::new(false), None, uuid::Uuid::nil())
    }

    /// The epoch of the published view: the data path refreshes its copy when it moved.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// The published view (takes the mutex: call it when [`VolumeReservation::epoch`]
    /// moved, not per command).
    pub fn view(&self) -> Arc<AccessView> {
        Arc::clone(&self.inner.lock().view)
    }

    /// Reads the state (PERSISTENT RESERVE IN, NVMe Reservation Report).
    pub fn read<R>(&self, f: impl FnOnce(&Reservation) -> R) -> R {
        f(&self.inner.lock().state)
    }

    /// Runs a reservation operation. When it changed the state, the new view is published
    /// (and the epoch moved) before this returns; when the persisted contents changed, the
    /// `ptpl_file` is rewritten first. `Err` is a failed write: the change stays (as in
    /// SPDK) and the command fails (SCSI HARDWARE ERROR, NVMe Internal Error).
    pub fn update<R>(
        &self,
        f: impl FnOnce(&mut Reservation) -> R,
        notices: impl FnOnce(&R) -> Option<&[Notice]>,
    ) -> Result<R, std::io::Error> {
        let mut g = self.inner.lock();
        let before_epoch = g.state.epoch();
        let before_ptpl = g.state.ptpl();
        let r = f(&mut g.state);
        if let Some(n) = notices(&r) {
            for &notice in n {
                if matches!(notice.to, Initiator::Scsi(_)) && !g.notices.contains(&notice) {
                    if g.notices.len() == MAX_PENDING_NOTICES {
                        g.notices.remove(0);
                    }
                    g.notices.push(notice);
                }
            }
            self.pending_notices
                .store(g.notices.len() as u64, Ordering::Release);
        }
        let changed = g.state.epoch() != before_epoch;
        if changed {
            g.view = Arc::new(AccessView::of(&g.state));
            self.epoch.store(g.view.epoch(), Ordering::Release);
        }
        let ptpl_changed = g.state.ptpl() != before_ptpl;
        if let Some(path) = &self.ptpl_file
            && (ptpl_changed || (changed && g.state.ptpl()))
        {
            ptpl_file::save_state(path, &g.state, &self.bdev_uuid)?;
        }
        Ok(r)
    }

    /// Whether notices wait for some nexus (one atomic load; the data path asks per
    /// command before [`VolumeReservation::take_notices`]).
    #[inline]
    pub fn has_notices(&self) -> bool {
        self.pending_notices.load(Ordering::Acquire) != 0
    }

    /// Takes the notices addressed to `who`, calling `f` for each.
    pub fn take_notices(&self, who: Initiator, mut f: impl FnMut(Notice)) {
        let mut g = self.inner.lock();
        g.notices.retain(|n| {
            if n.to == who {
                f(*n);
                false
            } else {
                true
            }
        });
        self.pending_notices
            .store(g.notices.len() as u64, Ordering::Release);
    }

    /// The SCSI nexus is gone: its SPC-2 reservation goes with it, and its notices.
    pub fn nexus_lost(&self, nexus: crate::reservation::Nexus) {
        let who = Initiator::Scsi(nexus);
        // Cannot fail: a lost nexus changes nothing that persists.
        let _ = self.update(|s| s.nexus_lost(nexus), |_| None);
        self.take_notices(who, |_| {});
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::{
        CommandClass, InitiatorPort, Nexus, PtplChange, RegisterAction, ResvType,
    };

    fn nexus(b: u8) -> Initiator {
        Initiator::Scsi(Nexus {
            initiator: InitiatorPort::srp([b; 16]),
            relative_target_port: 1,
        })
    }

    #[test]
    fn a_change_moves_the_epoch_and_publishes_the_view() {
        let v = VolumeReservation::volatile();
        let e0 = v.epoch();
        let (a, b) = (nexus(1), nexus(2));
        v.update(
            |s| s.register(a, RegisterAction::Register { new_key: 7 }, PtplChange::Keep),
            |_| None,
        )
        .unwrap()
        .unwrap();
        v.update(|s| s.reserve(a, 7, ResvType::WriteExclusive), |_| None)
            .unwrap()
            .unwrap();
        assert_ne!(v.epoch(), e0);
        let view = v.view();
        assert_eq!(view.epoch(), v.epoch());
        assert!(!view.standing(b).permits(CommandClass::Write));
        assert!(view.standing(b).permits(CommandClass::Read));
        assert!(view.standing(a).permits(CommandClass::Write));
    }

    #[test]
    fn notices_wait_for_their_nexus() {
        let v = VolumeReservation::volatile();
        let (a, b) = (nexus(1), nexus(2));
        for (w, k) in [(a, 1), (b, 2)] {
            v.update(
                |s| s.register(w, RegisterAction::Register { new_key: k }, PtplChange::Keep),
                |_| None,
            )
            .unwrap()
            .unwrap();
        }
        let fx = v
            .update(
                |s| s.preempt(a, 1, 2, ResvType::WriteExclusive, false),
                |r| r.as_ref().ok().map(|fx| &fx.notices[..]),
            )
            .unwrap()
            .unwrap();
        assert!(!fx.notices.is_empty());
        assert!(v.has_notices());
        let mut got = Vec::new();
        v.take_notices(a, |n| got.push(n));
        assert!(got.is_empty(), "the requester gets nothing");
        v.take_notices(b, |n| got.push(n));
        assert_eq!(got.len(), 1);
        assert!(!v.has_notices());
    }

    #[test]
    fn the_ptpl_file_follows_the_state_and_loads_back() {
        let dir = std::env::temp_dir().join(format!("rtgt-volresv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ns1.json");
        let uuid = uuid::Uuid::from_bytes([3; 16]);
        let v = VolumeReservation::load(Some(&path), uuid).unwrap();
        let a = nexus(1);
        v.update(
            |s| {
                s.register(
                    a,
                    RegisterAction::Register { new_key: 9 },
                    PtplChange::Set(true),
                )
            },
            |_| None,
        )
        .unwrap()
        .unwrap();
        v.update(|s| s.reserve(a, 9, ResvType::ExclusiveAccess), |_| None)
            .unwrap()
            .unwrap();
        let again = VolumeReservation::load(Some(&path), uuid).unwrap();
        again.read(|s| {
            assert!(s.ptpl());
            assert_eq!(s.key_of(a), Some(9));
            assert_eq!(
                s.reserved().map(|r| r.rtype),
                Some(ResvType::ExclusiveAccess)
            );
        });
        // Another bdev's file is refused.
        assert!(VolumeReservation::load(Some(&path), uuid::Uuid::from_bytes([4; 16])).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
