//! A poll group: the per-reactor state of the target. It holds one transport poll group per
//! transport, the reactor's view of every subsystem (state, namespace I/O channels, outstanding
//! counters, requests queued while paused), and implements admission: SPDK's
//! `nvmf_check_subsystem_active`, without locks, on the reactor that owns the connection.

use std::any::Any;
use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::Target;
use super::ana::PgAna;
use super::caw_lock::CawLock;
use super::error::CoreError;
use super::state::PauseScope;
use super::subsystem::{ListenAddr, Namespace, Subsystem};
use super::volume_resv::VolumeReservation;
use crate::ana::{AnaState, TpgEntry};
use crate::bdev::{BdevIo, BdevOp, IoChannel, IoType};
use crate::compare_write::{Admit, LbaRange, LockId, Owner, RangeGate};
use crate::reactor::{ReactorCtx, Step};
use crate::registry::TransportPollGroup;
use crate::reservation::{AccessView, CommandClass, Initiator};

/// Bits of a bdev I/O tag that belong to the transport; the top 16 name the transport.
pub const TAG_MASK: u64 = (1 << 48) - 1;

/// A per-poll-group action of the subsystem state machine.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PgAction {
    Activate,
    Deactivate,
    Pause(PauseScope),
    Resume,
}

/// What a namespace looks like to the data path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsInfo {
    /// Namespace id.
    pub nsid: u32,
    /// The bdev name.
    pub bdev_name: String,
    /// Logical block size.
    pub block_size: u32,
    /// Number of blocks.
    pub num_blocks: u64,
    /// UUID.
    pub uuid: uuid::Uuid,
    /// NGUID.
    pub nguid: [u8; 16],
    /// EUI-64, if any.
    pub eui64: Option<[u8; 8]>,
    /// Volatile write cache present.
    pub write_cache: bool,
    /// Unmap supported.
    pub unmap: bool,
    /// Write zeroes supported.
    pub write_zeroes: bool,
    /// Compare supported (natively or by reading).
    pub compare: bool,
    /// Writes supported (false for a read-only bdev).
    pub writable: bool,
    /// The hosts that see the namespace (`no_auto_visible` plus `nvmf_ns_add_host`); `None`:
    /// every host does.
    pub visible_hosts: Option<Arc<[String]>>,
    /// The ANA group (meaningful with ANA reporting).
    pub anagrpid: u32,
    /// The volume's reservation state can persist through power loss (a `ptpl_file`).
    pub ptpl_capable: bool,
    /// The SCSI logical unit's mode parameters (MODE SELECT), shared by every nexus.
    pub modes: super::SharedModes,
}

impl NsInfo {
    fn of(ns: &Namespace) -> Self {
        let b = &ns.bdev;
        Self {
            nsid: ns.nsid,
            bdev_name: ns.bdev_name.clone(),
            block_size: b.block_size(),
            num_blocks: b.num_blocks(),
            uuid: ns.uuid,
            nguid: ns.nguid,
            eui64: ns.eui64,
            write_cache: b.write_cache(),
            unmap: b.supports(IoType::Unmap),
            write_zeroes: b.supports(IoType::WriteZeroes),
            compare: b.can_compare(),
            writable: b.supports(IoType::Write),
            visible_hosts: ns.visibility(),
            anagrpid: ns.anagrpid,
            ptpl_capable: ns.ptpl_file.is_some(),
            modes: ns.modes.clone(),
        }
    }

    /// Whether the host named `host` (a host NQN) sees this namespace. No allocation, no lock:
    /// I/O commands ask it for hidden namespaces.
    pub fn visible_to(&self, host: &str) -> bool {
        self.visible_hosts
            .as_ref()
            .is_none_or(|hosts| hosts.iter().any(|h| h == host))
    }

    /// `now` is this namespace with another size and at most another visibility or ANA group:
    /// its bdev was resized.
    fn resized_to(&self, now: &NsInfo) -> bool {
        let mut mine = self.clone();
        mine.num_blocks = now.num_blocks;
        self.num_blocks != now.num_blocks && mine.same_but_visibility(now)
    }

    /// Everything but who sees it and its ANA group is the same: the namespace's channel can
    /// stay open when a host is added or removed or the namespace moves to another ANA group
    /// (control path).
    fn same_but_visibility(&self, other: &NsInfo) -> bool {
        let mut mine = self.clone();
        mine.visible_hosts.clone_from(&other.visible_hosts);
        mine.anagrpid = other.anagrpid;
        mine == *other
    }
}

/// What a poll group found when it re-read a subsystem's namespaces.
#[derive(Debug, Default)]
struct NsChanges {
    /// Added, removed, replaced, or seen by other hosts.
    changed: Vec<u32>,
    /// Same bdev, new size.
    resized: Vec<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    Active,
    Pausing,
    Paused,
}

/// One namespace on one poll group.
pub struct NsGroup {
    info: NsInfo,
    bdev: Arc<dyn crate::bdev::Bdev>,
    channel: IoChannel,
    gate: Gate,
    io_outstanding: u32,
    /// The volume's reservation state, and this poll group's copy of its published view
    /// (refreshed when the state's epoch moves).
    resv: Arc<VolumeReservation>,
    view: Arc<AccessView>,
    /// Compare-and-write: this poll group's gate of the volume's range locks, the write-class
    /// operations it has submitted and not seen complete, and the volume's lock.
    caw_gate: RangeGate,
    writes_inflight: u32,
    caw: Arc<CawLock>,
}

impl NsGroup {
    /// What the data path needs to know about the namespace.
    pub fn info(&self) -> &NsInfo {
        &self.info
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SgState {
    Active,
    Pausing,
    Paused,
    Inactive,
}

struct Queued {
    transport: usize,
    token: u64,
}

/// One subsystem on one poll group.
struct SubsystemGroup {
    sub: Arc<Subsystem>,
    state: SgState,
    mgmt_outstanding: u32,
    queued: VecDeque<Queued>,
    ns: Vec<Option<NsGroup>>,
    pausing_ns: u32,
    waiter: Option<Step<CoreError>>,
    qpairs: u32,
    inflight: u32,
    generation: u64,
    /// The ANA paths (with ANA reporting), rebuilt on every resume; `ana_epoch` counts the
    /// rebuilds, so a queue can cache the index of its path.
    ana: Option<PgAna>,
    ana_epoch: u64,
}

/// Which counter an admitted request holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmitKind {
    /// Admin / fabrics / management command.
    Mgmt,
    /// I/O to a namespace.
    Io(u32),
}

/// The answer of [`PgCore::admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Execute it; call [`PgCore::release`] when it has completed.
    Go,
    /// The subsystem or namespace is paused: the request waits in the poll group and
    /// [`TransportPollGroup::resume_request`] replays it on resume.
    Queued,
    /// No such namespace.
    InvalidNamespace,
    /// The subsystem is not active on this poll group.
    Inactive,
}

/// Counters of a poll group for `nvmf_get_stats`.
#[derive(Debug, Default, Clone)]
pub struct PgStats {
    /// Admin queues ever connected.
    pub admin_qpairs: u64,
    /// I/O queues ever connected.
    pub io_qpairs: u64,
    /// Admin queues now.
    pub current_admin_qpairs: u64,
    /// I/O queues now.
    pub current_io_qpairs: u64,
    /// Connections not yet associated with a subsystem.
    pub current_unassociated_qpairs: u64,
    /// Bdev I/O in flight.
    pub pending_bdev_io: u64,
    /// Commands completed.
    pub completed_nvme_io: u64,
}

enum FdOp {
    Watch(RawFd),
    Unwatch(RawFd),
}

/// The target's state on one reactor that transports may use while they poll.
pub struct PgCore {
    index: usize,
    target: Arc<Target>,
    sgroups: Vec<Option<SubsystemGroup>>,
    fd_ops: Vec<FdOp>,
    inflight: usize,
    stats: PgStats,
    listener_io: super::listener_io::ListenerIoTable,
    now: Instant,
    now_ns: u64,
}

impl std::fmt::Debug for PgCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgCore")
            .field("index", &self.index)
            .finish()
    }
}

impl PgCore {
    /// The poll group's index (= its reactor's index).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The time at the start of the current poll (the reactor's loop time): transports use it
    /// instead of reading the clock per request.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// [`PgCore::now`] in [`crate::reactor::instant_ns`] form.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// The target.
    pub fn target(&self) -> &Arc<Target> {
        &self.target
    }

    /// The subsystem with this id, if it is known on this poll group.
    pub fn subsystem(&self, id: u32) -> Option<&Arc<Subsystem>> {
        self.sg(id).map(|sg| &sg.sub)
    }

    /// Statistics, for transports to update.
    pub fn stats_mut(&mut self) -> &mut PgStats {
        &mut self.stats
    }

    /// Statistics.
    pub fn stats(&self) -> &PgStats {
        &self.stats
    }

    fn sg(&self, id: u32) -> Option<&SubsystemGroup> {
        self.sgroups.get(id as usize).and_then(Option::as_ref)
    }

    fn sg_mut(&mut self, id: u32) -> Option<&mut SubsystemGroup> {
        self.sgroups.get_mut(id as usize).and_then(Option::as_mut)
    }

    /// Decides whether a request may run now. `Go` takes a reference that
    /// [`PgCore::release`] gives back when the request has completed; `Queued` parks
    /// `(transport, token)` until the subsystem or namespace resumes.
    /// Inlined: it runs for every I/O command.
    #[inline]
    pub fn admit(
        &mut self,
        subsystem: u32,
        kind: AdmitKind,
        transport: usize,
        token: u64,
    ) -> Admission {
        let Some(sg) = self.sg_mut(subsystem) else {
            return Admission::Inactive;
        };
        if sg.state == SgState::Inactive {
            return Admission::Inactive;
        }
        let go = match kind {
            AdmitKind::Mgmt => {
                if sg.state == SgState::Active {
                    sg.mgmt_outstanding += 1;
                    true
                } else {
                    false
                }
            }
            AdmitKind::Io(nsid) => {
                let Some(ns) = nsid
                    .checked_sub(1)
                    .and_then(|i| sg.ns.get_mut(i as usize))
                    .and_then(Option::as_mut)
                else {
                    return Admission::InvalidNamespace;
                };
                if ns.gate == Gate::Active {
                    ns.io_outstanding += 1;
                    true
                } else {
                    false
                }
            }
        };
        if go {
            Admission::Go
        } else {
            sg.queued.push_back(Queued { transport, token });
            Admission::Queued
        }
    }

    /// Gives back what a `Go` admission took. When a pause was waiting for this, it completes.
    /// Inlined: it runs for every I/O command.
    #[inline]
    pub fn release(&mut self, subsystem: u32, kind: AdmitKind) {
        let Some(sg) = self.sg_mut(subsystem) else {
            return;
        };
        match kind {
            AdmitKind::Mgmt => sg.mgmt_outstanding = sg.mgmt_outstanding.saturating_sub(1),
            AdmitKind::Io(nsid) => {
                if let Some(ns) = nsid
                    .checked_sub(1)
                    .and_then(|i| sg.ns.get_mut(i as usize))
                    .and_then(Option::as_mut)
                {
                    ns.io_outstanding = ns.io_outstanding.saturating_sub(1);
                }
            }
        }
        if sg.state == SgState::Pausing || sg.pausing_ns > 0 {
            sg.try_finish_pause();
        }
    }

    /// What the listener `addr` reports for ANA group `group` of a subsystem: `None` without
    /// ANA reporting (every path is optimized). `cache` is the caller's (a queue's) memo of
    /// its path's index; no lock, no allocation. Inlined into the I/O path: without ANA
    /// reporting it is one check.
    #[inline]
    pub fn ana_state(
        &self,
        subsystem: u32,
        addr: &ListenAddr,
        cache: &mut Option<(u64, usize)>,
        group: u32,
    ) -> Option<AnaState> {
        let sg = self.sg(subsystem)?;
        let ana = sg.ana.as_ref()?;
        Self::path_ana_state(sg, ana, addr, cache, group)
    }

    /// [`PgCore::ana_state`] of a subsystem with ANA reporting.
    fn path_ana_state(
        sg: &SubsystemGroup,
        ana: &PgAna,
        addr: &ListenAddr,
        cache: &mut Option<(u64, usize)>,
        group: u32,
    ) -> Option<AnaState> {
        let i = match *cache {
            Some((epoch, i)) if epoch == sg.ana_epoch => i,
            _ => {
                let i = ana.find(addr)?;
                *cache = Some((sg.ana_epoch, i));
                i
            }
        };
        ana.paths.get(i)?.view.state(group)
    }

    /// The ANA log generation of listener `addr` of a subsystem (see `target::ana`): `None`
    /// without ANA reporting.
    pub fn ana_generation(&self, subsystem: u32, addr: &ListenAddr) -> Option<u64> {
        let ana = self.sg(subsystem)?.ana.as_ref()?;
        Some(ana.paths.get(ana.find(addr)?)?.generation)
    }

    /// The target port groups of an LU of a subsystem whose namespace is in ANA `group`, into
    /// `out` (see `PgAna::tpgs`), and the implicit transition time; `None` without ANA
    /// reporting. No lock; no allocation once `out` has grown.
    pub fn alua_tpgs(&self, subsystem: u32, group: u32, out: &mut Vec<TpgEntry>) -> Option<u8> {
        let ana = self.sg(subsystem)?.ana.as_ref()?;
        ana.tpgs(group, out);
        Some(ana.anatt_secs)
    }

    /// Rebuilds the ANA snapshot of a subsystem: whether a listener's log generation moved,
    /// and the namespaces whose SCSI target port group states changed.
    fn sync_ana(&mut self, id: u32) -> (bool, Vec<u32>) {
        let Some(sg) = self.sg_mut(id) else {
            return (false, Vec::new());
        };
        let now = sg.sub.with_config(|c| c.ana.as_ref().map(|a| a.snapshot()));
        let moved = now
            .as_ref()
            .is_some_and(|n| n.generations_moved(sg.ana.as_ref()));
        let alua = now
            .as_ref()
            .map(|n| n.alua_moved(sg.ana.as_ref()))
            .unwrap_or_default();
        if now != sg.ana {
            sg.ana = now;
            sg.ana_epoch += 1;
        }
        (moved, alua)
    }

    /// The namespace `nsid` of a subsystem on this poll group.
    pub fn namespace(&self, subsystem: u32, nsid: u32) -> Option<&NsInfo> {
        let sg = self.sg(subsystem)?;
        sg.ns
            .get(nsid.checked_sub(1)? as usize)?
            .as_ref()
            .map(|n| &n.info)
    }

    /// The reservation state of namespace `nsid` of a subsystem (for reservation commands;
    /// the conflict check is [`PgCore::resv_permits`]).
    pub fn reservation(&self, subsystem: u32, nsid: u32) -> Option<&Arc<VolumeReservation>> {
        let sg = self.sg(subsystem)?;
        sg.ns
            .get(nsid.checked_sub(1)? as usize)?
            .as_ref()
            .map(|n| &n.resv)
    }

    /// Whether `who` may run a command of `class` on namespace `nsid` of a subsystem, as the
    /// volume's reservation says: one atomic load and a few branches while nothing is
    /// reserved; the poll group's view is refreshed (one lock) only after a reservation
    /// change. An unknown namespace permits (admission refuses it).
    /// Inlined: it runs for every I/O command.
    #[inline]
    pub fn resv_permits(
        &mut self,
        subsystem: u32,
        nsid: u32,
        who: Initiator,
        class: CommandClass,
    ) -> bool {
        let Some(ns) = self
            .sg_mut(subsystem)
            .and_then(|sg| sg.ns.get_mut(nsid.checked_sub(1)? as usize))
            .and_then(Option::as_mut)
        else {
            return true;
        };
        if ns.view.epoch() != ns.resv.epoch() {
            ns.view = ns.resv.view();
        }
        ns.view.permits(who, class)
    }

    /// The active namespaces of a subsystem on this poll group, in NSID order.
    pub fn namespaces(&self, subsystem: u32) -> impl Iterator<Item = &NsInfo> {
        self.sg(subsystem)
            .into_iter()
            .flat_map(|sg| sg.ns.iter().flatten().map(|n| &n.info))
    }

    /// Submits a bdev I/O for an admitted request. The transport's 48-bit tag comes back with
    /// the completion, through [`TransportPollGroup::poll`]. `Err` hands the I/O back when the
    /// namespace is gone or its backend is busy (retry later).
    pub fn submit_io(
        &mut self,
        subsystem: u32,
        nsid: u32,
        transport: usize,
        mut io: Box<BdevIo>,
    ) -> Result<(), Box<BdevIo>> {
        let Some(sg) = self
            .sgroups
            .get_mut(subsystem as usize)
            .and_then(Option::as_mut)
        else {
            return Err(io);
        };
        let Some(ns) = nsid
            .checked_sub(1)
            .and_then(|i| sg.ns.get_mut(i as usize))
            .and_then(Option::as_mut)
        else {
            return Err(io);
        };
        io.tag = (io.tag & TAG_MASK) | ((transport as u64) << 48);
        let write = write_range(&io.op);
        if let Some(range) = write
            && !ns.caw_gate.is_idle()
        {
            // A compare-and-write holds or is acquiring a lock: the write waits (the
            // transport retries it, as for a busy backend) unless it is the owner's own.
            let owner = super::owner_of(self.index, transport, io.tag);
            if let Admit::Wait(_) = ns.caw_gate.admit(range, Some(owner)) {
                return Err(io);
            }
        }
        ns.channel.submit_at(io, self.now_ns)?;
        if write.is_some() {
            ns.writes_inflight += 1;
        }
        sg.inflight += 1;
        self.inflight += 1;
        self.stats.pending_bdev_io += 1;
        Ok(())
    }

    /// The I/O counters of listener `addr` on this poll group (a queue takes them when it is
    /// created).
    pub fn listener_io(&mut self, addr: &ListenAddr) -> Arc<super::listener_io::ListenerIo> {
        self.listener_io.get(addr)
    }

    /// Every listener's I/O counters on this poll group.
    pub fn listener_io_snapshot(
        &self,
    ) -> Vec<(ListenAddr, super::listener_io::ListenerIoSnapshot)> {
        self.listener_io.snapshot()
    }

    fn ns_group_mut(&mut self, subsystem: u32, nsid: u32) -> Option<&mut NsGroup> {
        self.sg_mut(subsystem)?
            .ns
            .get_mut(nsid.checked_sub(1)? as usize)?
            .as_mut()
    }

    /// The compare-and-write lock of namespace `nsid`.
    pub fn caw_lock(&self, subsystem: u32, nsid: u32) -> Option<&Arc<CawLock>> {
        self.sg(subsystem)?
            .ns
            .get(nsid.checked_sub(1)? as usize)?
            .as_ref()
            .map(|n| &n.caw)
    }

    /// A compare-and-write lock reached this poll group: installed in the namespace's gate.
    /// `true` when nothing this poll group submitted is in flight, so it acknowledges now;
    /// otherwise the completions acknowledge.
    pub(crate) fn caw_install(
        &mut self,
        subsystem: u32,
        nsid: u32,
        id: LockId,
        range: LbaRange,
        owner: Owner,
    ) -> bool {
        let Some(ns) = self.ns_group_mut(subsystem, nsid) else {
            return true;
        };
        if ns.caw_gate.has(id) {
            // Installed when the namespace was opened here: nothing of this poll group was
            // in flight then.
            return true;
        }
        let inflight = ns.writes_inflight;
        match ns.caw_gate.lock(id, range, owner, inflight) {
            Ok(now) => now,
            Err(e) => {
                tracing::error!("compare-and-write: {e}");
                true
            }
        }
    }

    /// A compare-and-write lock was released: writes waiting on it go on when retried.
    pub(crate) fn caw_unlock(&mut self, subsystem: u32, nsid: u32, id: LockId) {
        if let Some(ns) = self.ns_group_mut(subsystem, nsid) {
            ns.caw_gate.unlock(id);
        }
    }

    /// Records a new connection not yet bound to a subsystem.
    pub fn qpair_created(&mut self) {
        self.stats.current_unassociated_qpairs += 1;
    }

    /// Binds a connection to a subsystem (an admin or an I/O queue).
    pub fn qpair_associate(&mut self, subsystem: u32, admin: bool) {
        self.stats.current_unassociated_qpairs =
            self.stats.current_unassociated_qpairs.saturating_sub(1);
        if admin {
            self.stats.admin_qpairs += 1;
            self.stats.current_admin_qpairs += 1;
        } else {
            self.stats.io_qpairs += 1;
            self.stats.current_io_qpairs += 1;
        }
        if let Some(sg) = self.sg_mut(subsystem) {
            sg.qpairs += 1;
        }
        self.publish_load();
    }

    /// Records that a connection is gone; `subsystem` is what it was bound to, if anything.
    /// A subsystem being stopped finishes stopping when its last connection goes.
    pub fn qpair_removed(&mut self, subsystem: Option<u32>, admin: bool) {
        match subsystem {
            None => {
                self.stats.current_unassociated_qpairs =
                    self.stats.current_unassociated_qpairs.saturating_sub(1)
            }
            Some(id) => {
                if admin {
                    self.stats.current_admin_qpairs =
                        self.stats.current_admin_qpairs.saturating_sub(1);
                } else {
                    self.stats.current_io_qpairs = self.stats.current_io_qpairs.saturating_sub(1);
                }
                let finish = match self.sg_mut(id) {
                    Some(sg) => {
                        sg.qpairs = sg.qpairs.saturating_sub(1);
                        sg.state == SgState::Inactive && sg.qpairs == 0
                    }
                    None => false,
                };
                if finish {
                    self.finish_deactivate(id);
                }
            }
        }
        self.publish_load();
    }

    fn publish_load(&self) {
        if let Some(l) = self.target.loads.get(self.index) {
            l.admin
                .store(self.stats.current_admin_qpairs as usize, Ordering::Relaxed);
            l.io.store(self.stats.current_io_qpairs as usize, Ordering::Relaxed);
        }
    }

    /// Adds an fd to the set the reactor wakes on (a transport's completion channel).
    pub fn watch_fd(&mut self, fd: RawFd) {
        self.fd_ops.push(FdOp::Watch(fd));
    }

    /// Removes an fd added by [`PgCore::watch_fd`].
    pub fn unwatch_fd(&mut self, fd: RawFd) {
        self.fd_ops.push(FdOp::Unwatch(fd));
    }

    fn poll_channels(&mut self, completions: &mut [Vec<Box<BdevIo>>]) -> usize {
        if self.inflight == 0 {
            return 0;
        }
        let mut total = 0;
        let now = self.now_ns;
        for sg in self.sgroups.iter_mut().flatten() {
            if sg.inflight == 0 {
                continue;
            }
            let mut n = 0;
            for ns in sg.ns.iter_mut().flatten() {
                let (gate, writes, caw) = (&mut ns.caw_gate, &mut ns.writes_inflight, &ns.caw);
                let target = &self.target;
                n += ns.channel.poll_at(now, &mut |mut io| {
                    if write_range(&io.op).is_some() {
                        *writes = writes.saturating_sub(1);
                        if !gate.is_idle() {
                            gate.completed(LbaRange::new(0, u64::MAX), |id| caw.ack(target, id));
                        }
                    }
                    let t = (io.tag >> 48) as usize;
                    io.tag &= TAG_MASK;
                    match completions.get_mut(t) {
                        Some(v) => v.push(io),
                        None => tracing::error!("bdev completion for unknown transport {t}"),
                    }
                });
            }
            sg.inflight = sg.inflight.saturating_sub(n as u32);
            total += n;
        }
        self.inflight = self.inflight.saturating_sub(total);
        self.stats.pending_bdev_io = self.stats.pending_bdev_io.saturating_sub(total as u64);
        total
    }

    fn arm_channels(&mut self) -> bool {
        // Armed even with nothing in flight: arming is what clears a channel's wake fd, and a
        // completion that wrote it while the reactor was busy (after the last arming) would
        // otherwise leave it readable, and every sleep would return at once until I/O is in
        // flight again (an RBD namespace between the host's bursts: 5-30 wake-ups per I/O).
        let mut pending = false;
        for sg in self.sgroups.iter_mut().flatten() {
            for ns in sg.ns.iter_mut().flatten() {
                pending |= ns.channel.arm();
            }
        }
        pending
    }

    fn open_ns(&mut self, ns: &Namespace) -> Result<NsGroup, CoreError> {
        let channel = self.target.bdevs().open_channel(&ns.bdev)?;
        if let Some(fd) = channel.wake_fd() {
            self.watch_fd(fd);
        }
        // Locks already out on the namespace hold here too from the start.
        let mut caw_gate = RangeGate::new();
        ns.caw.install_held(&mut caw_gate);
        Ok(NsGroup {
            info: NsInfo::of(ns),
            bdev: Arc::clone(&ns.bdev),
            channel,
            gate: Gate::Active,
            io_outstanding: 0,
            view: ns.reservation.view(),
            resv: Arc::clone(&ns.reservation),
            caw_gate,
            writes_inflight: 0,
            caw: Arc::clone(&ns.caw),
        })
    }

    fn close_ns(&mut self, ns: NsGroup) {
        if let Some(fd) = ns.channel.wake_fd() {
            self.unwatch_fd(fd);
        }
        if ns.channel.outstanding() > 0 {
            tracing::error!(
                "poll group {}: closing namespace {} with {} I/O outstanding",
                self.index,
                ns.info.nsid,
                ns.channel.outstanding()
            );
        }
    }

    /// Brings the namespace channels in line with the subsystem's configuration.
    fn sync_namespaces(&mut self, id: u32) -> Result<NsChanges, CoreError> {
        let Some(sg) = self.sg(id) else {
            return Ok(NsChanges::default());
        };
        let sub = Arc::clone(&sg.sub);
        let generation = sub.ns_generation.load(Ordering::Acquire);
        if generation == sg.generation && !sg.ns.is_empty() {
            return Ok(NsChanges::default());
        }
        let (limit, config_ns): (u32, Vec<Namespace>) =
            sub.with_config(|c| (c.ns_limit(), c.namespaces.values().cloned().collect()));
        let mut changed = Vec::new();
        let mut resized = Vec::new();
        let mut slots: Vec<Option<NsGroup>> =
            std::mem::take(&mut self.sg_mut(id).expect("checked").ns);
        slots.resize_with(limit as usize, || None);
        // Drop namespaces that are gone or whose bdev was replaced; a namespace whose hosts
        // changed stays open with its new visibility, and is reported as changed.
        for (i, slot) in slots.iter_mut().enumerate() {
            let nsid = i as u32 + 1;
            let keep = match (slot.as_mut(), config_ns.iter().find(|n| n.nsid == nsid)) {
                (Some(g), Some(c))
                    if Arc::ptr_eq(&g.bdev, &c.bdev) && Arc::ptr_eq(&g.resv, &c.reservation) =>
                {
                    let now = NsInfo::of(c);
                    if g.info.resized_to(&now) {
                        // The bdev changed size: the channel stays open and checks I/O
                        // against the new size from now on.
                        g.info.num_blocks = now.num_blocks;
                        g.channel.set_num_blocks(now.num_blocks);
                        resized.push(nsid);
                    }
                    if g.info != now && g.info.same_but_visibility(&now) {
                        g.info = now;
                        changed.push(nsid);
                        true
                    } else {
                        g.info == now
                    }
                }
                (Some(_), _) => false,
                (None, _) => true,
            };
            if !keep && let Some(g) = slot.take() {
                self.close_ns(g);
                changed.push(nsid);
            }
        }
        let mut result = Ok(());
        for c in &config_ns {
            let i = (c.nsid - 1) as usize;
            if i < slots.len() && slots[i].is_none() {
                match self.open_ns(c) {
                    Ok(g) => {
                        slots[i] = Some(g);
                        if !changed.contains(&c.nsid) {
                            changed.push(c.nsid);
                        }
                    }
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
        }
        let sg = self.sg_mut(id).expect("checked");
        sg.ns = slots;
        if result.is_ok() {
            sg.generation = generation;
        }
        result.map(|()| {
            changed.sort_unstable();
            NsChanges { changed, resized }
        })
    }

    fn finish_deactivate(&mut self, id: u32) {
        let Some(mut sg) = self.sgroups.get_mut(id as usize).and_then(Option::take) else {
            return;
        };
        for g in sg.ns.drain(..).flatten() {
            self.close_ns(g);
        }
        if let Some(w) = sg.waiter.take() {
            w.next(Ok(()));
        }
    }
}

impl SubsystemGroup {
    fn drained(&self) -> bool {
        (self.state != SgState::Pausing || self.mgmt_outstanding == 0)
            && self
                .ns
                .iter()
                .flatten()
                .all(|n| n.gate != Gate::Pausing || n.io_outstanding == 0)
    }

    fn try_finish_pause(&mut self) {
        if !self.drained() {
            return;
        }
        for n in self.ns.iter_mut().flatten() {
            if n.gate == Gate::Pausing {
                n.gate = Gate::Paused;
            }
        }
        self.pausing_ns = 0;
        if self.state == SgState::Pausing {
            self.state = SgState::Paused;
        }
        if let Some(w) = self.waiter.take() {
            w.next(Ok(()));
        }
    }
}

/// The target's state on one reactor.
pub struct PollGroup {
    core: PgCore,
    transports: Vec<Option<Box<dyn TransportPollGroup>>>,
    completions: Vec<Vec<Box<BdevIo>>>,
}

impl std::fmt::Debug for PollGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollGroup")
            .field("index", &self.core.index)
            .finish()
    }
}

impl PollGroup {
    pub(crate) fn new(index: usize, target: Arc<Target>) -> Self {
        Self {
            core: PgCore {
                index,
                target,
                sgroups: Vec::new(),
                fd_ops: Vec::new(),
                inflight: 0,
                stats: PgStats::default(),
                listener_io: Default::default(),
                now: Instant::now(),
                now_ns: crate::reactor::instant_ns(Instant::now()),
            },
            transports: Vec::new(),
            completions: Vec::new(),
        }
    }

    /// The core state.
    pub fn core(&mut self) -> &mut PgCore {
        &mut self.core
    }

    /// The transport poll group at `index`, downcast to its concrete type, with the core.
    pub fn transport_mut<T: TransportPollGroup>(
        &mut self,
        index: usize,
    ) -> Option<(&mut T, &mut PgCore)> {
        let t = self.transports.get_mut(index)?.as_mut()?;
        let any: &mut dyn Any = t.as_mut();
        Some((any.downcast_mut::<T>()?, &mut self.core))
    }

    /// Every transport poll group, for queries.
    pub fn transports(&self) -> impl Iterator<Item = &dyn TransportPollGroup> {
        self.transports.iter().flatten().map(|b| b.as_ref())
    }

    pub(crate) fn add_transport(&mut self, index: usize, tpg: Box<dyn TransportPollGroup>) {
        if self.transports.len() <= index {
            self.transports.resize_with(index + 1, || None);
            self.completions.resize_with(index + 1, Vec::new);
        }
        self.completions[index].reserve(256);
        self.transports[index] = Some(tpg);
    }

    pub(crate) fn remove_transport(&mut self, index: usize) {
        if let Some(mut t) = self.transports.get_mut(index).and_then(Option::take) {
            t.shutdown(&mut self.core);
        }
    }

    /// Disconnects every connection on every transport (target shutdown).
    pub(crate) fn shutdown_transports(&mut self) {
        for t in self.transports.iter_mut().flatten() {
            t.shutdown(&mut self.core);
        }
    }

    /// One poll at `now` (the reactor's loop time): bdev completions, then every transport.
    pub(crate) fn poll(&mut self, now: Instant) -> usize {
        self.core.now = now;
        self.core.now_ns = crate::reactor::instant_ns(now);
        let mut n = self.core.poll_channels(&mut self.completions);
        for (i, t) in self.transports.iter_mut().enumerate() {
            if let Some(t) = t {
                n += t.poll(&mut self.core, &mut self.completions[i]);
            }
        }
        n
    }

    /// Before the reactor sleeps: `true` when work is already waiting.
    pub(crate) fn arm(&mut self) -> bool {
        let mut pending = self.core.arm_channels();
        for t in self.transports.iter_mut().flatten() {
            pending |= t.arm(&mut self.core);
        }
        pending
    }

    pub(crate) fn discovery_changed(&mut self) {
        for t in self.transports.iter_mut().flatten() {
            t.discovery_changed(&mut self.core);
        }
    }

    /// Reservation notices for NVMe hosts on namespace `nsid` of a subsystem (see
    /// `nvme_exec::resv_cmd::notify_hosts`).
    pub(crate) fn reservation_notices(
        &mut self,
        subsystem: u32,
        nsid: u32,
        notices: &[(crate::reservation::HostId, crate::reservation::NoticeKind)],
    ) {
        for t in self.transports.iter_mut().flatten() {
            t.reservation_notices(&mut self.core, subsystem, nsid, notices);
        }
    }

    /// Hands a preempt-and-abort to every transport of this poll group (see
    /// [`Target::preempt_abort`](super::Target::preempt_abort)).
    pub(crate) fn preempt_abort(
        &mut self,
        pa: &super::PreemptAbort,
        fence: &Arc<super::AbortFence>,
    ) {
        let mut n = 0;
        for t in self.transports.iter_mut().flatten() {
            n += t.preempt_abort(&mut self.core, pa, fence);
        }
        tracing::info!(
            "poll group {}: preempt and abort on namespace {}: {n} aborted command(s) in flight",
            self.core.index(),
            pa.nsid
        );
    }

    /// Completes a parked command of transport `transport`'s connection `queue` (see
    /// `TransportPollGroup::parked_done`).
    pub(crate) fn parked_done(
        &mut self,
        transport: usize,
        queue: u64,
        done: crate::nvme_exec::AerDone,
    ) {
        if let Some(t) = self.transports.get_mut(transport).and_then(Option::as_mut) {
            t.parked_done(&mut self.core, queue, done);
        }
    }

    pub(crate) fn disconnect_host(&mut self, subsystem: u32, host: &str) {
        for t in self.transports.iter_mut().flatten() {
            t.disconnect_host(&mut self.core, subsystem, host);
        }
    }

    /// Runs one step of a subsystem state change on this poll group.
    pub(crate) fn apply(&mut self, sub: &Arc<Subsystem>, action: PgAction, step: Step<CoreError>) {
        let id = sub.id();
        match action {
            PgAction::Activate => {
                let idx = id as usize;
                if self.core.sgroups.len() <= idx {
                    self.core.sgroups.resize_with(idx + 1, || None);
                }
                self.core.sgroups[idx] = Some(SubsystemGroup {
                    sub: Arc::clone(sub),
                    state: SgState::Active,
                    mgmt_outstanding: 0,
                    queued: VecDeque::with_capacity(128),
                    ns: Vec::new(),
                    pausing_ns: 0,
                    waiter: None,
                    qpairs: 0,
                    inflight: 0,
                    generation: u64::MAX,
                    ana: None,
                    ana_epoch: 0,
                });
                self.core.sync_ana(id);
                match self.core.sync_namespaces(id) {
                    Ok(_) => step.next(Ok(())),
                    Err(e) => step.next(Err(e)),
                }
            }
            PgAction::Pause(scope) => {
                let Some(sg) = self.core.sg_mut(id) else {
                    return step.next(Ok(()));
                };
                if sg.state == SgState::Active {
                    sg.state = SgState::Pausing;
                }
                for (i, n) in sg.ns.iter_mut().enumerate() {
                    let hit = match scope {
                        PauseScope::Admin => false,
                        PauseScope::All => true,
                        PauseScope::Namespace(nsid) => nsid as usize == i + 1,
                    };
                    if let Some(n) = n
                        && hit
                        && n.gate == Gate::Active
                    {
                        n.gate = Gate::Pausing;
                        sg.pausing_ns += 1;
                    }
                }
                sg.waiter = Some(step);
                sg.try_finish_pause();
            }
            PgAction::Resume => {
                if self.core.sg(id).is_none() {
                    return step.next(Ok(()));
                }
                let NsChanges { changed, resized } = match self.core.sync_namespaces(id) {
                    Ok(c) => c,
                    Err(e) => return step.next(Err(e)),
                };
                let (ana_moved, alua_changed) = self.core.sync_ana(id);
                let sg = self.core.sg_mut(id).expect("checked");
                sg.state = SgState::Active;
                sg.pausing_ns = 0;
                for n in sg.ns.iter_mut().flatten() {
                    n.gate = Gate::Active;
                }
                let queued: Vec<Queued> = sg.queued.drain(..).collect();
                // Transports tell their admin queues; each finds out whether its namespaces or
                // its path's ANA log changed.
                if !changed.is_empty() || ana_moved {
                    for t in self.transports.iter_mut().flatten() {
                        t.namespaces_changed(&mut self.core, id, &changed);
                    }
                }
                if !resized.is_empty() {
                    for t in self.transports.iter_mut().flatten() {
                        t.namespaces_resized(&mut self.core, id, &resized);
                    }
                }
                if !alua_changed.is_empty() {
                    for t in self.transports.iter_mut().flatten() {
                        t.alua_changed(&mut self.core, id, &alua_changed);
                    }
                }
                for q in queued {
                    match self
                        .transports
                        .get_mut(q.transport)
                        .and_then(Option::as_mut)
                    {
                        Some(t) => t.resume_request(&mut self.core, q.token),
                        None => tracing::warn!("queued request for a removed transport dropped"),
                    }
                }
                step.next(Ok(()));
            }
            PgAction::Deactivate => {
                let Some(sg) = self.core.sg_mut(id) else {
                    return step.next(Ok(()));
                };
                sg.state = SgState::Inactive;
                sg.queued.clear();
                sg.waiter = Some(step);
                for t in self.transports.iter_mut().flatten() {
                    t.disconnect_subsystem(&mut self.core, id);
                }
                if self.core.sg(id).is_some_and(|sg| sg.qpairs == 0) {
                    self.core.finish_deactivate(id);
                }
            }
        }
    }
}

/// The blocks a write-class operation changes (what compare-and-write locks hold off).
fn write_range(op: &BdevOp) -> Option<LbaRange> {
    match op {
        BdevOp::Write { .. } | BdevOp::WriteZeroes { .. } | BdevOp::Unmap { .. } => {
            op.range().map(|(lba, blocks)| LbaRange::new(lba, blocks))
        }
        _ => None,
    }
}

/// Runs `f` on the reactor's poll group, then applies the fd changes it asked for. `None` when
/// the reactor has no poll group (before the target started, or after it stopped).
pub fn with_poll_group<R>(ctx: &mut ReactorCtx, f: impl FnOnce(&mut PollGroup) -> R) -> Option<R> {
    let pg = ctx.local::<PollGroup>()?;
    let r = f(pg);
    let ops = std::mem::take(&mut pg.core.fd_ops);
    for op in ops {
        match op {
            FdOp::Watch(fd) => ctx.watch_fd(fd),
            FdOp::Unwatch(fd) => ctx.unwatch_fd(fd),
        }
    }
    Some(r)
}

/// Replays request `token` of transport `transport` on this reactor's poll group through
/// [`TransportPollGroup::resume_request`]: work done off the reactor for a request that
/// answered [`crate::nvme_exec::NvmeAction::Queued`] is ready. A token that no longer names a
/// waiting request is ignored by the transport.
pub fn resume_transport_request(ctx: &mut ReactorCtx, transport: usize, token: u64) {
    with_poll_group(ctx, |pg| {
        if let Some(t) = pg.transports.get_mut(transport).and_then(Option::as_mut) {
            t.resume_request(&mut pg.core, token);
        }
    });
}

/// Runs `f` on one transport's poll group on this reactor (e.g. to hand it a new connection).
pub fn with_transport_pg<T: TransportPollGroup, R>(
    ctx: &mut ReactorCtx,
    transport: usize,
    f: impl FnOnce(&mut T, &mut PgCore) -> R,
) -> Option<R> {
    with_poll_group(ctx, |pg| {
        pg.transport_mut::<T>(transport).map(|(t, core)| f(t, core))
    })
    .flatten()
}
