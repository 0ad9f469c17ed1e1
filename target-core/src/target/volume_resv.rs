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
//!   atomically (`ptpl_file::store`) before the command that changed the persisted contents
//!   completes. [`VolumeReservation::update_deferred`] changes the state and queues the new
//!   contents under a sequence number (a *ticket*) without writing;
//!   [`VolumeReservation::persist_later`] writes them on the `rtgt-ptpl` thread (the two
//!   fsyncs off the reactor) and then calls back, and [`VolumeReservation::is_durable`] says
//!   whether a ticket's contents (or newer ones) are on disk. Writes are serialized by a
//!   writer lock that only the writing thread takes, and each writes the newest queued
//!   contents: the file never goes back to an older state, whatever order the writes run in.
//!   [`VolumeReservation::update`] does both on the calling thread (NVMe commands, which
//!   still write on their reactor, and changes that never alter the file).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::reservation::{AccessView, Initiator, Notice, Reservation, ptpl, ptpl_file};

/// At most this many undelivered notices are kept per volume; older ones are dropped (a
/// recipient that never comes back must not grow the list forever).
const MAX_PENDING_NOTICES: usize = 256;

struct Inner {
    state: Reservation,
    view: Arc<AccessView>,
    /// Notices (unit attentions) for SCSI nexuses, taken by each nexus's next command to
    /// the volume.
    notices: Vec<Notice>,
    /// The newest `ptpl_file` contents queued and their ticket (0: nothing queued yet).
    queued: (u64, Option<Arc<str>>),
}

/// The reservation state of one volume.
pub struct VolumeReservation {
    inner: Mutex<Inner>,
    epoch: AtomicU64,
    pending_notices: AtomicU64,
    ptpl_file: Option<PathBuf>,
    bdev_uuid: uuid::Uuid,
    /// The newest ticket whose contents are on disk.
    durable: AtomicU64,
    /// Held while the file is written (only off the reactors, or by [`Self::update`]).
    writer: Mutex<()>,
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
        // What the file holds now, as far as a change goes (SPDK's own file may be spelled
        // differently: the first change rewrites it).
        let on_disk = ptpl_file
            .as_ref()
            .map(|_| Arc::from(ptpl::encode(&state, &bdev_uuid)));
        VolumeReservation {
            epoch: AtomicU64::new(view.epoch()),
            inner: Mutex::new(Inner {
                state,
                view,
                notices: Vec::new(),
                queued: (0, on_disk),
            }),
            pending_notices: AtomicU64::new(0),
            ptpl_file,
            bdev_uuid,
            durable: AtomicU64::new(0),
            writer: Mutex::new(()),
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
        let (r, ticket) = self.update_deferred(f, notices);
        if let Some(t) = ticket {
            self.persist(t)?;
        }
        Ok(r)
    }

    /// [`VolumeReservation::update`] without the write: the new `ptpl_file` contents, if they
    /// changed, are queued under the returned ticket. The command completes once
    /// [`VolumeReservation::is_durable`] says the ticket is on disk (after
    /// [`VolumeReservation::persist_later`] called back), and fails if it is not then.
    pub fn update_deferred<R>(
        &self,
        f: impl FnOnce(&mut Reservation) -> R,
        notices: impl FnOnce(&R) -> Option<&[Notice]>,
    ) -> (R, Option<u64>) {
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
        let mut ticket = None;
        if self.ptpl_file.is_some() && (ptpl_changed || (changed && g.state.ptpl())) {
            let contents = ptpl::encode(&g.state, &self.bdev_uuid);
            // The same contents as queued last (an SPC-2 reservation, a generation): no write,
            // and nothing to wait for.
            if g.queued.1.as_deref() != Some(contents.as_str()) {
                let t = g.queued.0 + 1;
                g.queued = (t, Some(contents.into()));
                ticket = Some(t);
            }
        }
        (r, ticket)
    }

    /// Whether the contents of `ticket` (or newer ones) are on disk.
    #[inline]
    pub fn is_durable(&self, ticket: u64) -> bool {
        self.durable.load(Ordering::Acquire) >= ticket
    }

    /// Writes the newest queued contents if `ticket` is not on disk yet (blocking: two
    /// fsyncs). Writers take turns; each writes the newest contents, so the file only moves
    /// forward.
    fn persist(&self, ticket: u64) -> std::io::Result<()> {
        let Some(path) = &self.ptpl_file else {
            return Ok(());
        };
        let _w = self.writer.lock();
        if self.is_durable(ticket) {
            return Ok(());
        }
        let (t, contents) = {
            let g = self.inner.lock();
            (g.queued.0, g.queued.1.clone())
        };
        let Some(contents) = contents else {
            return Ok(());
        };
        ptpl_file::store(path, &contents)?;
        self.durable.fetch_max(t, Ordering::AcqRel);
        Ok(())
    }

    /// Writes `ticket`'s contents on the `rtgt-ptpl` thread, off the reactor, then calls
    /// `done` there with the outcome (which [`VolumeReservation::is_durable`] also tells).
    pub fn persist_later(
        self: &Arc<Self>,
        ticket: u64,
        done: impl FnOnce(std::io::Result<()>) + Send + 'static,
    ) {
        let vol = Arc::clone(self);
        run_on_ptpl_thread(Box::new(move || {
            let r = vol.persist(ticket);
            if let Err(e) = &r {
                tracing::error!("reservation: writing the ptpl_file failed: {e}");
            }
            done(r);
        }));
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

type Job = Box<dyn FnOnce() + Send>;

/// Runs `job` on the `rtgt-ptpl` thread (started on first use): one thread, so the writes
/// of every volume queue behind each other, never on a reactor.
fn run_on_ptpl_thread(job: Job) {
    static TX: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    let tx = TX.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("rtgt-ptpl".into())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                }
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start the ptpl_file writer thread: {e}");
        }
        Mutex::new(tx)
    });
    if let Err(e) = tx.lock().send(job) {
        // No thread: write here rather than leave the command waiting forever.
        tracing::error!("the ptpl_file writer thread is gone; writing on the reactor");
        (e.0)();
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
        // A change that leaves the file's contents as they are writes nothing.
        let (_, ticket) = v.update_deferred(|s| s.lu_reset(), |_| None);
        assert_eq!(ticket, None);
        // Another bdev's file is refused.
        assert!(VolumeReservation::load(Some(&path), uuid::Uuid::from_bytes([4; 16])).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn deferred_writes_never_take_the_file_back_to_an_older_state() {
        let dir = std::env::temp_dir().join(format!("rtgt-volresv-order-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ns1.json");
        let uuid = uuid::Uuid::from_bytes([5; 16]);
        let v = Arc::new(VolumeReservation::load(Some(&path), uuid).unwrap());
        let (a, b) = (nexus(1), nexus(2));
        let reg = |w, k, ptpl| {
            move |s: &mut Reservation| {
                s.register(w, RegisterAction::Register { new_key: k }, ptpl)
                    .unwrap();
            }
        };
        let (_, t1) = v.update_deferred(reg(a, 9, PtplChange::Set(true)), |_| None);
        let (_, t2) = v.update_deferred(reg(b, 10, PtplChange::Keep), |_| None);
        let (t1, t2) = (t1.unwrap(), t2.unwrap());
        assert!(t2 > t1);
        assert!(!v.is_durable(t1), "nothing written yet");
        assert!(!path.exists());
        // The second command's write runs first: it writes the newest state, which covers
        // the first command's too; the first's write then has nothing to do.
        v.persist(t2).unwrap();
        assert!(v.is_durable(t1) && v.is_durable(t2));
        let both = std::fs::read_to_string(&path).unwrap();
        v.persist(t1).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            both,
            "not rewritten"
        );
        let again = VolumeReservation::load(Some(&path), uuid).unwrap();
        again.read(|s| {
            assert_eq!(s.key_of(a), Some(9));
            assert_eq!(s.key_of(b), Some(10));
        });

        // Off the caller's thread, on the ptpl_file thread, then the callback.
        let (_, t3) = v.update_deferred(reg(nexus(3), 11, PtplChange::Keep), |_| None);
        let t3 = t3.unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        v.persist_later(t3, move |r| {
            let name = std::thread::current().name().map(str::to_owned);
            let _ = tx.send((r.is_ok(), name));
        });
        let (ok, name) = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        assert!(ok);
        assert_eq!(name.as_deref(), Some("rtgt-ptpl"));
        assert!(v.is_durable(t3));
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("\"rkey\":11")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
