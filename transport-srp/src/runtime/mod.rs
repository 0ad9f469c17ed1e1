//! The SRP data path on one poll group (one reactor): channels, their requests, and the
//! completion queues, buffers and shared receive queues they use.
//!
//! - `channel_driver`: channel setup from a login, IU dispatch, carrying out the actions of
//!   the channel state machine ([`crate::channel`]: disconnect, drain, release), queries.
//! - `req`: the request engine — SRP_CMD to target-core's SCSI engine
//!   ([`target_core::scsi_exec`], which runs it on the bdev) and the data and response back,
//!   task management, aborts.
//! - `descriptors`: the initiator's data descriptors as the remote segments of a transfer,
//!   planned into RDMA READ / WRITE work requests by [`rdma_plumbing::transfer`].
//!
//! Per device the poll group has a protection domain, a completion channel, completion queues
//! (shared by its channels; a new one is created when the reserved capacity runs out), a pool
//! of registered data buffers and, with `use_srq`, a shared receive queue. Per channel it has a
//! receive ring (without SRQ), a ring of response buffers and a fixed array of request slots;
//! nothing is allocated per I/O.
//!
//! Work-request ids carry `kind | channel key | slot | serial` (the layout of
//! [`rdma_plumbing::WrId`]); bdev I/O tags and admission tokens carry `channel key | slot |
//! serial` (48 bits), the serial changing every time a slot is reused, so that a stale replay
//! finds nothing.

mod channel_driver;
mod descriptors;
mod req;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use fabric::{Access, Device, Mr, Pd, RecvWr, SgeList, WorkCompletion};
use iobuf::{DmaRegion, IoBuf};
use rdma_plumbing::srq::Flushed;
use rdma_plumbing::{CompletionQueues, QpnMap, SharedRecvQueue, WrId};
use serde_json::{Value, json};
use slab::Slab;
use target_core::bdev::BdevIo;
use target_core::reactor::Step;
use target_core::registry::TransportPollGroup;
use target_core::scsi::task_order::TaskOrder;
use target_core::scsi::ua::UnitAttention;
use target_core::scsi_exec::{LuLimits, ScsiEngine};
use target_core::target::PgCore;

use crate::transport::Shared;

use channel_driver::Chan;
pub(crate) use channel_driver::NewChannel;

/// Work-request kinds (top byte of a `wr_id`).
mod kind {
    /// A receive of a channel's own receive queue (slot = ring index).
    pub const RECV: u8 = 1;
    /// A receive of the device's shared receive queue (slot = SRQ buffer index).
    pub const SRQ: u8 = 2;
    /// A request's RDMA READs / WRITEs / response SEND (slot = request index).
    pub const REQ: u8 = 3;
    /// A target-initiated SEND from a spare slot (T_LOGOUT, CRED_REQ, overrun answers).
    pub const SPARE: u8 = 4;
    /// The zero-length RDMA WRITE drain marker.
    pub const MARKER: u8 = 5;
}

/// The `wr_id` of a work request of `kind` for `slot` of channel `key`: the shared layout
/// ([`WrId`]) with the channel and slot as the two halves of its key and the slot's serial (or
/// the channel's generation) as its generation.
fn pack(kind: u8, key: u16, slot: u16, serial: u16) -> u64 {
    WrId::new(kind, WrId::pair(key, slot), serial).pack()
}

/// The fields of a `wr_id` made by [`pack`]: `(kind, key, slot, serial)`.
fn unpack(wr_id: u64) -> (u8, u16, u16, u16) {
    let id = WrId::unpack(wr_id);
    let (key, slot) = id.halves();
    (id.kind, key, slot, id.generation)
}

/// A 48-bit token naming a request: bdev I/O tag and admission token.
fn token(key: u16, slot: u16, serial: u16) -> u64 {
    u64::from(key) << 32 | u64::from(slot) << 16 | u64::from(serial)
}

fn untoken(t: u64) -> (u16, u16, u16) {
    ((t >> 32) as u16, (t >> 16) as u16, t as u16)
}

/// Where a received IU sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecvRef {
    /// Slot of the channel's receive ring.
    Ring(u16),
    /// Buffer of the device's shared receive queue.
    Srq(u16),
}

/// A device's shared receive queue on the poll group, with its receive buffers (slot = index).
struct SrqCtx {
    srq: SharedRecvQueue,
    mr: Mr,
    bufs: Vec<Option<IoBuf>>,
    len: u32,
}

/// What a poll group keeps per RDMA device.
struct DevCtx {
    device: Device,
    pd: Pd,
    /// The completion channel and completion queues (a new queue when the reserved room runs
    /// out).
    cqs: CompletionQueues,
    data_mr: Mr,
    data_free: Vec<IoBuf>,
    data_total: usize,
    srq: Option<SrqCtx>,
    max_qp_wr: u32,
    max_sge: u32,
    max_rd_atom: u8,
    max_init_rd_atom: u8,
}

impl DevCtx {
    /// Queues shared receive buffer `slot` for the next [`DevCtx::flush_srq`].
    fn post_srq(&mut self, slot: u16) {
        let Some(s) = self.srq.as_mut() else {
            return;
        };
        let Some(Some(b)) = s.bufs.get(slot as usize) else {
            return;
        };
        let wr = RecvWr::new(
            pack(kind::SRQ, 0, slot, 0),
            SgeList::one(s.mr.sge(b.base_addr(), s.len)),
        );
        s.srq.push(wr);
    }

    /// Posts the shared receives queued since the last flush (one doorbell). A refused one
    /// keeps its buffer in its slot, unposted, as a refused single post did.
    fn flush_srq(&mut self) {
        let Some(s) = self.srq.as_mut() else {
            return;
        };
        if let Some(Flushed {
            error: Some(e),
            posted,
        }) = s.srq.flush(|_| {})
        {
            tracing::error!("SRP: posting shared receives failed after {posted}: {e}");
        }
    }
}

/// One poll group's part of a task management abort: its aborted tasks still in flight.
struct Waiter {
    /// Aborted tasks still in flight.
    remaining: u32,
    /// Every task has been counted (fire when `remaining` reaches 0).
    armed: bool,
    /// The abort's second round on this poll group, told when the tasks are gone (it
    /// arrives after the first round counted them).
    done: Option<Step<()>>,
    /// The cross-poll-group abort this waiter belongs to.
    abort_id: u64,
    /// A preempt-and-abort from another protocol: released when the tasks are gone.
    fence: Option<Arc<target_core::target::AbortFence>>,
}

/// The SRP transport's state on one poll group.
pub struct SrpPg {
    shared: Arc<Shared>,
    index: usize,
    devs: Vec<DevCtx>,
    chans: Slab<Chan>,
    by_gid: HashMap<u64, usize>,
    by_qpn: QpnMap<usize>,
    /// The SCSI execution of this poll group's commands (LU maps, device server).
    scsi: ScsiEngine,
    buf_wait: VecDeque<u64>,
    bdev_retry: VecDeque<u64>,
    /// The task set of each logical unit (subsystem, LUN) this poll group's channels address,
    /// made on first use: task attributes order tasks arriving on this poll group. Never
    /// removed, so a request and a channel keep a set's index (no lookup per command).
    task_sets: Vec<TaskOrder<u64>>,
    /// The index in `task_sets` of each logical unit's set.
    task_set_ix: HashMap<(u32, u16), u32>,
    /// Dormant tasks their task set enabled, to start at the next poll.
    task_ready: VecDeque<u64>,
    waiters: Slab<Waiter>,
    aborts: HashMap<u64, u32>,
    abort_seq: u64,
    /// Requests started on this poll group, in order of arrival (task management aborts only
    /// what arrived before it).
    arrivals: u64,
    wcs: Vec<WorkCompletion>,
    /// Channels with work requests batched for the next doorbell ([`SrpPg::flush_sends`]).
    dirty: Vec<u16>,
    serial: u16,
    closing: usize,
    polls: u64,
    /// Channels whose drain did not finish in time (their queue pair was destroyed anyway).
    drain_timeouts: u64,
}

impl std::fmt::Debug for SrpPg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrpPg")
            .field("index", &self.index)
            .field("channels", &self.chans.len())
            .finish()
    }
}

impl SrpPg {
    pub(crate) fn new(shared: Arc<Shared>, core: &mut PgCore) -> Self {
        let limits = LuLimits {
            max_io_size: shared.opts.max_io_size,
            io_unit_size: shared.opts.io_unit_size,
        };
        SrpPg {
            scsi: ScsiEngine::new(shared.index, limits)
                .with_host_matcher(crate::port_id::host_names_nexus),
            index: core.index(),
            shared,
            devs: Vec::new(),
            chans: Slab::new(),
            by_gid: HashMap::new(),
            by_qpn: QpnMap::default(),
            buf_wait: VecDeque::with_capacity(1024),
            bdev_retry: VecDeque::with_capacity(256),
            task_sets: Vec::new(),
            task_set_ix: HashMap::new(),
            task_ready: VecDeque::with_capacity(256),
            waiters: Slab::new(),
            aborts: HashMap::new(),
            abort_seq: 0,
            arrivals: 0,
            wcs: vec![WorkCompletion::default(); 64],
            dirty: Vec::with_capacity(64),
            serial: 0,
            closing: 0,
            polls: 0,
            drain_timeouts: 0,
        }
    }

    fn next_serial(&mut self) -> u16 {
        self.serial = self.serial.wrapping_add(1);
        self.serial
    }

    /// The device context for `device`, created (with its buffers) on first use.
    fn dev_for(&mut self, core: &mut PgCore, device: Device) -> Result<usize, String> {
        if let Some(i) = self.devs.iter().position(|d| d.device == device) {
            return Ok(i);
        }
        let o = &self.shared.opts;
        let name = device.name();
        let err = |what: &str, e: &dyn std::fmt::Display| format!("device {name}: {what}: {e}");
        let attr = device.query().map_err(|e| err("query", &e))?;
        let pd = device
            .alloc_pd()
            .map_err(|e| err("protection domain", &e))?;
        let cqs = CompletionQueues::growing(&device, attr.max_cqe.clamp(64, 16384))
            .map_err(|e| err("completion channel", &e))?;
        let unit = o.io_unit_size as usize;
        let count = o.num_shared_buffers as usize;
        let region = DmaRegion::new(unit * count).map_err(|e| err("data buffers", &e))?;
        let data_mr = pd
            .register(&region, Access::LOCAL_WRITE)
            .map_err(|e| err("register data buffers", &e))?;
        let data_free = region.split(unit).map_err(|e| err("data buffers", &e))?;
        let srq = if o.use_srq {
            let n = o
                .srq_size
                .min(attr.max_srq_wr.max(1))
                .min(u32::from(u16::MAX));
            let len = o.max_req_size;
            let slot = (len as usize).next_multiple_of(64);
            let srq =
                SharedRecvQueue::new(&pd, n, 1).map_err(|e| err("shared receive queue", &e))?;
            let region = DmaRegion::new(slot * n as usize).map_err(|e| err("SRQ buffers", &e))?;
            let mr = pd
                .register(&region, Access::LOCAL_WRITE)
                .map_err(|e| err("register SRQ buffers", &e))?;
            let bufs = region
                .split(slot)
                .map_err(|e| err("SRQ buffers", &e))?
                .into_iter()
                .map(Some)
                .collect();
            Some(SrqCtx { srq, mr, bufs, len })
        } else {
            None
        };
        core.watch_fd(cqs.fd());
        let mut d = DevCtx {
            max_qp_wr: attr.max_qp_wr,
            max_sge: attr.max_sge,
            max_rd_atom: attr.max_qp_rd_atom.min(255) as u8,
            max_init_rd_atom: attr.max_qp_init_rd_atom.min(255) as u8,
            device,
            pd,
            cqs,
            data_mr,
            data_total: data_free.len(),
            data_free,
            srq,
        };
        if let Some(n) = d.srq.as_ref().map(|s| s.bufs.len()) {
            for slot in 0..n {
                d.post_srq(slot as u16);
            }
            d.flush_srq();
        }
        tracing::info!(
            "SRP poll group {}: device {name} ready ({} data buffers of {} KiB{})",
            self.index,
            d.data_total,
            unit >> 10,
            if d.srq.is_some() { ", SRQ" } else { "" }
        );
        self.devs.push(d);
        Ok(self.devs.len() - 1)
    }

    /// Polls every completion queue once (until empty), handling what it finds.
    fn poll_cqs(&mut self, core: &mut PgCore) -> usize {
        let mut total = 0;
        let mut wcs = std::mem::take(&mut self.wcs);
        for d in 0..self.devs.len() {
            loop {
                let n = self.devs[d].cqs.poll(&mut wcs);
                for wc in &wcs[..n] {
                    self.on_wc(core, d, *wc);
                }
                total += n;
                if n < wcs.len() {
                    break;
                }
            }
        }
        self.wcs = wcs;
        total
    }

    fn on_wc(&mut self, core: &mut PgCore, dev: usize, wc: WorkCompletion) {
        let (k, key, slot, serial) = unpack(wc.wr_id);
        if matches!(k, kind::RECV | kind::SPARE | kind::MARKER)
            && self
                .chans
                .get(key as usize)
                .is_some_and(|c| c.generation() != serial)
        {
            tracing::debug!(
                "SRP: completion {:#x} of an earlier channel in slot {key} ignored",
                wc.wr_id
            );
            return;
        }
        match k {
            kind::RECV => self.on_recv(core, key, slot, wc),
            kind::SRQ => self.on_srq_recv(core, dev, slot, wc),
            kind::REQ => self.on_req_wc(core, key, slot, serial, wc),
            kind::SPARE => self.on_spare_wc(core, key, slot, wc),
            kind::MARKER => self.on_marker(core, key, wc),
            _ => tracing::error!("SRP: completion with unknown wr_id {:#x}", wc.wr_id),
        }
    }

    /// Rings the doorbells of what the poll batched: shared receives first, so that a receive
    /// is posted before the response whose credit lets the initiator use it, then each
    /// channel's sends.
    fn doorbells(&mut self, core: &mut PgCore) {
        for d in &mut self.devs {
            d.flush_srq();
        }
        self.flush_sends(core);
    }

    /// Data buffers of device `dev` free.
    fn free_bufs(&self, dev: usize) -> usize {
        self.devs.get(dev).map_or(0, |d| d.data_free.len())
    }

    /// Counters for `nvmf_get_stats` and tests.
    pub(crate) fn counters(&self) -> Value {
        let devs: Vec<Value> = self
            .devs
            .iter()
            .map(|d| {
                json!({
                    "name": d.device.name(),
                    "completion_queues": d.cqs.queues(),
                    "completions": d.cqs.counters().completions,
                    "free_data_buffers": d.data_free.len(),
                    "total_data_buffers": d.data_total,
                    "srq_posted": d.srq.as_ref().map_or(0, |s| s.srq.posted()),
                    "srq_size": d.srq.as_ref().map_or(0, |s| s.bufs.len()),
                })
            })
            .collect();
        json!({
            "trtype": "SRP",
            "channels": self.chans.len(),
            "waiting_for_buffers": self.buf_wait.len(),
            "polls": self.polls,
            "drain_timeouts": self.drain_timeouts,
            "devices": devs,
        })
    }

    /// The LUs of namespaces `nsids` of `subsystem` changed capacity: CAPACITY DATA HAS
    /// CHANGED (2Ah/09h) for every nexus here that sees one of them. The one place a resize
    /// raises its unit attention (today into the nexus' queue).
    fn raise_capacity_changed(&mut self, core: &mut PgCore, subsystem: u32, nsids: &[u32]) {
        self.establish_where_seen(core, subsystem, nsids, UnitAttention::CapacityDataChanged);
    }

    /// Establishes `ua` on each LU of namespaces `nsids` for every nexus of `subsystem` here
    /// that sees it (the nexus's queues are shared by its channels: queued once per LU).
    fn establish_where_seen(
        &mut self,
        core: &mut PgCore,
        subsystem: u32,
        nsids: &[u32],
        ua: UnitAttention,
    ) {
        for (_, c) in self.chans.iter().filter(|(_, c)| c.sub_id == subsystem) {
            for &n in nsids {
                if let Ok(lun) = u16::try_from(n.saturating_sub(1))
                    && self.scsi.lu_visible(core, subsystem, lun, &c.scsi)
                {
                    c.ua.establish(lun, ua);
                }
            }
        }
    }
}

impl TransportPollGroup for SrpPg {
    fn poll(&mut self, core: &mut PgCore, completions: &mut Vec<Box<BdevIo>>) -> usize {
        self.polls += 1;
        let mut n = completions.len();
        for io in completions.drain(..) {
            self.bdev_done(core, io);
        }
        n += self.poll_cqs(core);
        if !self.buf_wait.is_empty() {
            n += self.wake_buf_waiters(core);
        }
        if !self.bdev_retry.is_empty() {
            n += self.retry_bdev(core);
        }
        if !self.task_ready.is_empty() {
            n += self.wake_dormant(core);
        }
        if self.closing > 0 {
            self.check_deadlines(core);
        }
        self.doorbells(core);
        n
    }

    fn arm(&mut self, core: &mut PgCore) -> bool {
        self.doorbells(core);
        let mut pending = false;
        for d in &mut self.devs {
            match d.cqs.arm() {
                Ok(found) => pending |= found,
                Err(e) => tracing::error!("SRP: arming a completion queue failed: {e}"),
            }
        }
        pending || !self.bdev_retry.is_empty() || !self.task_ready.is_empty() || self.closing > 0
    }

    fn resume_request(&mut self, core: &mut PgCore, token: u64) {
        self.resume(core, token);
        self.doorbells(core);
    }

    fn disconnect_subsystem(&mut self, core: &mut PgCore, subsystem: u32) {
        self.scsi.invalidate(subsystem);
        self.close_where(core, crate::channel::CloseReason::SubsystemDeleted, |c| {
            c.sub_id == subsystem
        });
    }

    fn namespaces_changed(&mut self, _core: &mut PgCore, subsystem: u32, nsids: &[u32]) {
        self.scsi.invalidate(subsystem);
        // Only an ANA log changed (NVMe listeners): nothing SCSI hosts see.
        if nsids.is_empty() {
            return;
        }
        // The LUN inventory (or what a nexus may see of it) changed: SPC-4's REPORTED LUNS
        // DATA HAS CHANGED on every nexus of the subsystem, so the initiator scans again.
        // Every channel of a nexus shares its queues: the condition is queued once per LU.
        for (_, c) in self.chans.iter().filter(|(_, c)| c.sub_id == subsystem) {
            c.ua.establish_everywhere(UnitAttention::ReportedLunsDataChanged);
        }
    }

    fn namespaces_resized(&mut self, core: &mut PgCore, subsystem: u32, nsids: &[u32]) {
        // READ CAPACITY answers from the LU map: rebuild it with the new sizes.
        self.scsi.invalidate(subsystem);
        self.raise_capacity_changed(core, subsystem, nsids);
    }

    fn preempt_abort(
        &mut self,
        core: &mut PgCore,
        pa: &target_core::target::PreemptAbort,
        fence: &Arc<target_core::target::AbortFence>,
    ) -> u32 {
        self.preempt_abort_tasks(core, pa, fence)
    }

    fn alua_changed(&mut self, core: &mut PgCore, subsystem: u32, nsids: &[u32]) {
        // ASYMMETRIC ACCESS STATE CHANGED on every nexus (through every port) that sees one of
        // the LUs, as SPC-4 requires after an implicit change.
        self.establish_where_seen(
            core,
            subsystem,
            nsids,
            UnitAttention::AsymmetricAccessStateChanged,
        );
    }

    fn disconnect_host(&mut self, core: &mut PgCore, subsystem: u32, host: &str) {
        let host = host.to_string();
        self.close_where(core, crate::channel::CloseReason::Admin, move |c| {
            c.sub_id == subsystem
                && crate::port_id::host_matches(&host, &c.nexus.initiator, Some(c.peer.ip()))
                && !c.sub.with_config(|cfg| {
                    cfg.allow_any_host
                        || cfg.hosts.iter().any(|h| {
                            crate::port_id::host_matches(h, &c.nexus.initiator, Some(c.peer.ip()))
                        })
                })
        });
    }

    fn qpairs(&self, subsystem: Option<u32>) -> Vec<Value> {
        self.chans
            .iter()
            .filter(|(_, c)| subsystem.is_none_or(|s| s == c.sub_id))
            .map(|(_, c)| c.describe(self.index))
            .collect()
    }

    fn stats(&self) -> Value {
        self.counters()
    }

    fn shutdown(&mut self, core: &mut PgCore) {
        self.close_where(core, crate::channel::CloseReason::PortDisabled, |_| true);
        // Give the drain a moment to finish on its own; what remains is torn down with the
        // poll group (its registrations keep their memory alive until then).
        for _ in 0..100 {
            if self.chans.is_empty() {
                break;
            }
            let mut v = Vec::new();
            self.poll(core, &mut v);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if !self.chans.is_empty() {
            tracing::warn!(
                "SRP poll group {}: {} channel(s) still draining at shutdown",
                self.index,
                self.chans.len()
            );
        }
    }
}
