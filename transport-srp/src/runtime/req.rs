//! The request engine: an SRP_CMD goes admission → SCSI logic → (data-out fetch) → bdev →
//! (data-in) → SRP_RSP; an SRP_TSK_MGMT plans its aborts, waits for the aborted tasks to be
//! gone on every poll group concerned, and answers.
//!
//! A transfer that needs more RDMA work requests than the channel's send-queue budget (a small
//! `sq_size`, a command with many descriptors) goes out in rounds: each round posts what the
//! send queue has room for, its last work request signaled, and the next round starts when it
//! completes. The response SEND goes with the last round of data-in.
//!
//! A request owns its receive buffer (the IU, and immediate data, stay where they landed)
//! until its response is posted; the buffer is reposted just before the SEND that returns the
//! credit. Data buffers come from the device pool and go back once the response's SEND (which
//! follows the data's RDMA WRITEs) has completed; a READ takes its own as it arrives when they
//! are free and no request waits for buffers (given back if admission queues it). Nothing is
//! freed while a work request or a bdev I/O still refers to it.
//!
//! The SCSI side of a command — admission, the device server, the bdev operations, status and
//! sense — runs in target-core's [`ScsiEngine`]; this engine moves IUs and data and answers
//! what the SCSI engine asks for ([`ScsiAction`]): buffers, data-out, a retry.

use arrayvec::ArrayVec;
use fabric::{SendWr, SgeList, WcStatus, WorkCompletion};
use iobuf::IoBuf;
use target_core::bdev::{BdevIo, IoStatus};
use target_core::reactor::Step;
use target_core::reservation::InitiatorPort;
use target_core::scsi::task_order::{TaskAttribute, TaskOrder};
use target_core::scsi::{self, PROTOCOL_ID_SRP, ScsiIo, Sense, SenseKey, TargetPort};
use target_core::scsi_exec::{ItNexus, ScsiAction, ScsiCommand, ScsiEngine, ScsiReq};
use target_core::target::{
    AbortFence, ListenAddr, PgCore, PreemptAbort, Subsystem, scsi_port, with_transport_pg,
};

use super::channel_driver::{iu_bytes, srq_bufs};
use super::descriptors::{self, XferError};
use rdma_plumbing::transfer::RdmaOp;

use super::{RecvRef, SrpPg, Waiter, kind, pack, token, untoken};
use crate::channel::Event;
use crate::nexus::NexusKey;
use crate::proto::{
    DataDesc, DirectDesc, Residual, SrpCmd, SrpRsp, Tag, TaskAttr, TmResponse, TskMgmt,
};
use crate::task_management::{self as tm, AbortScope, TmPlan};

/// Where a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// The slot is free.
    Free,
    /// Waiting in the poll group's admission queue (subsystem or namespace paused).
    Admit,
    /// The SCSI engine drives it: admission, the device server, the next bdev operation (or
    /// it waits for buffers / a busy backend).
    Core,
    /// Ready to fetch data-out (or waiting for buffers / send slots).
    Fetch,
    /// RDMA READs in flight.
    Reading,
    /// A round of data-in RDMA WRITEs in flight, before the round that carries the response
    /// (a transfer larger than the send-queue budget).
    Writing,
    /// A bdev operation in flight.
    Bdev,
    /// Ready to post the response (or waiting for send slots).
    Respond,
    /// Response posted; waiting for its SEND completion.
    Sending,
    /// Task management waiting for aborted tasks to be gone.
    TmWait,
    /// Dormant in its logical unit's task set (an older ORDERED or HEAD OF QUEUE task has
    /// not ended, or it is ORDERED and older tasks have not): started when the task set
    /// enables it (`SrpPg::wake_dormant`).
    Dormant,
}

/// One request slot.
pub(super) struct Req {
    pub stage: Stage,
    pub serial: u16,
    tm: bool,
    /// When it arrived on this poll group (see `SrpPg::arrivals`).
    arrival: u64,
    recv: Option<RecvRef>,
    iu_len: u32,
    tag: Tag,
    sol_not: u8,
    lun: Option<u16>,
    imm: bool,
    /// The SRP_CMD's data-in descriptor when it is direct (the usual read), kept when the
    /// command starts so that the response does not decode the command again.
    data_in: Option<DirectDesc>,
    /// The data-out the SCSI engine asked for: bytes, and whether it is parameter data.
    fetch: (u64, bool),
    /// The SCSI command's state in target-core (with the preallocated bdev I/O).
    exec: ScsiReq,
    tm_code: TmResponse,
    moved_out: u64,
    pub sq_wrs: u32,
    /// The transfer's next work request to post, when it goes in rounds (0: from the start).
    xfer_next: u32,
    recv_lent: bool,
    aborted: bool,
    /// Aborted by another I_T nexus's task management or PREEMPT AND ABORT: answered with
    /// TASK ABORTED once nothing of it is in flight (TAS = 1), instead of not at all.
    answer_aborted: bool,
    waiting_buf: bool,
    buf_woken: bool,
    need_units: usize,
    waiters: ArrayVec<u32, 4>,
    /// Its attribute in its logical unit's task set, while it is in one (dormant, or enabled
    /// and counted until it ends), and the set's index in `SrpPg::task_sets`.
    order: Option<(TaskAttribute, u32)>,
}

impl Req {
    /// A free slot with its preallocated bdev I/O.
    pub fn new() -> Self {
        Req {
            stage: Stage::Free,
            serial: 0,
            tm: false,
            arrival: 0,
            recv: None,
            iu_len: 0,
            tag: Tag::default(),
            sol_not: 0,
            lun: None,
            imm: false,
            data_in: None,
            fetch: (0, false),
            exec: ScsiReq::new(),
            tm_code: TmResponse::Complete,
            moved_out: 0,
            sq_wrs: 0,
            xfer_next: 0,
            recv_lent: false,
            aborted: false,
            answer_aborted: false,
            waiting_buf: false,
            buf_woken: false,
            need_units: 0,
            waiters: ArrayVec::new(),
            order: None,
        }
    }

    /// Starts a new request in this slot, keeping the preallocated bdev I/O. Its SCSI state
    /// is reset by whoever starts it: `ScsiEngine::start` for a command, `ScsiReq::reset`
    /// otherwise (task management, an IU that does not decode).
    fn reset(&mut self, serial: u16, arrival: u64, recv: RecvRef, len: u32, tm: bool) {
        // Field by field: the request is large, and its SCSI state keeps its bdev I/O.
        self.arrival = arrival;
        self.stage = Stage::Core;
        self.serial = serial;
        self.tm = tm;
        self.recv = Some(recv);
        self.iu_len = len;
        self.tag = Tag::default();
        self.sol_not = 0;
        self.lun = None;
        self.imm = false;
        self.data_in = None;
        self.fetch = (0, false);
        self.tm_code = TmResponse::Complete;
        self.moved_out = 0;
        self.sq_wrs = 0;
        self.xfer_next = 0;
        self.recv_lent = false;
        self.aborted = false;
        self.answer_aborted = false;
        self.waiting_buf = false;
        self.buf_woken = false;
        self.need_units = 0;
        self.waiters.clear();
        self.order = None;
    }
}

/// The SCSI engine's view of a channel's I_T nexus, logged in through `listen` of `sub`: the
/// listener's relative target port id and, when the subsystem reports asymmetric access, its
/// target port group (implicit ALUA).
pub(crate) fn scsi_nexus(nexus: &NexusKey, sub: &Subsystem, listen: &ListenAddr) -> ItNexus {
    let (port, ana) = sub.with_config(|c| {
        let port = c
            .listeners
            .iter()
            .find(|l| *l == listen)
            .and_then(scsi_port::scsi_port);
        (port, c.ana.is_some())
    });
    ItNexus {
        initiator: InitiatorPort::srp(nexus.initiator.0),
        port: TargetPort {
            protocol_id: PROTOCOL_ID_SRP,
            relative_port: port.map_or(1, |p| p.relative_port),
            port_id: Some(nexus.target.0),
        },
        listener: Some(listen.clone()),
        tpg_id: port.filter(|_| ana).map(|p| p.tpg_id),
        ana_cache: std::cell::Cell::new(None),
    }
}

/// How many of a transfer's `left` work requests to post now, with `used` of the channel's
/// `budget` send slots taken, and whether this is the last round; `None` to wait for slots.
/// `respond`: the response SEND follows the last round (it is counted, not included). A
/// transfer that fits the budget goes whole (waiting until it fits); one that never can goes
/// in rounds of what is free, the response in a round of its own if need be.
fn round(used: u32, budget: u32, left: usize, respond: bool) -> Option<(usize, bool)> {
    let room = budget.saturating_sub(used) as usize;
    let whole = left + usize::from(respond);
    if whole <= budget as usize {
        return (whole <= room).then_some((left, true));
    }
    let k = left.min(room);
    (room > 0).then_some((k, !respond && k == left))
}

/// Whether a CDB is READ(10/16), whose buffers the transport takes as it arrives.
fn is_read(cdb: &[u8]) -> bool {
    use target_core::scsi::cdb::op;
    matches!(cdb.first(), Some(&(op::READ_10 | op::READ_16)))
}

/// Keeps, of the work requests a transfer appended to `batch` from `base`, the `k` of this
/// round, from its `start`th (earlier rounds' are gone, later ones are built again).
#[inline]
fn keep_round(batch: &mut Vec<SendWr>, base: usize, start: usize, k: usize) {
    batch.truncate(base + start + k);
    if start > 0 {
        batch.drain(base..base + start);
    }
}

/// Puts the receive-ring buffer a request lent to its I/O (immediate data: the last buffer
/// of the I/O) back into its ring slot, so that it is reposted with the request's receive.
#[inline]
fn return_lent_recv(ring: &mut [Option<IoBuf>], r: &mut Req) {
    if r.recv_lent {
        give_back_lent_recv(ring, r);
    }
}

/// [`return_lent_recv`] when the request did lend it.
#[cold]
fn give_back_lent_recv(ring: &mut [Option<IoBuf>], r: &mut Req) {
    r.recv_lent = false;
    if let (Some(RecvRef::Ring(s)), Some(io)) = (r.recv, r.exec.io.as_mut())
        && let Some(mut b) = io.bufs.pop()
    {
        b.reset();
        if let Some(x) = ring.get_mut(s as usize) {
            *x = Some(b);
        }
    }
}

/// Which tasks a task management request (or PREEMPT AND ABORT) aborts, on any poll group.
#[derive(Clone, Debug)]
pub(crate) struct AbortSpec {
    sub: u32,
    lun: u16,
    scope: SpecScope,
    /// The nexus that asked (none: an NVMe host): its own aborted tasks are not answered;
    /// another nexus's are, with TASK ABORTED (TAS = 1), when `answer_others`.
    requester: Option<NexusKey>,
    answer_others: bool,
    /// The poll group the task management request arrived on and its arrival there: tasks
    /// that arrived after it on that poll group are not its business (SAM: a reset aborts the
    /// tasks received before it). Other poll groups' tasks have no order against it.
    arrived: (usize, u64),
}

#[derive(Clone, Debug)]
enum SpecScope {
    /// The task with this tag on any channel of the nexus (SRP r16a §4.1.3: an ABORT TASK
    /// may arrive on another channel than its task).
    Task {
        nexus: NexusKey,
        tag: Tag,
    },
    Nexus(NexusKey),
    All,
    /// The tasks of these I_T nexuses (the registrants PREEMPT AND ABORT removed).
    Preempted(std::sync::Arc<[target_core::reservation::Nexus]>),
}

impl SrpPg {
    /// Starts a request in `slot` for the IU at `r`.
    pub(super) fn start_req(
        &mut self,
        core: &mut PgCore,
        key: u16,
        slot: u16,
        r: RecvRef,
        len: u32,
        tm: bool,
    ) {
        let serial = self.next_serial();
        self.arrivals += 1;
        let arrival = self.arrivals;
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        let sub = c.sub_id;
        c.reqs[slot as usize].reset(serial, arrival, r, len, tm);
        if tm {
            c.stats.task_mgmt += 1;
        } else {
            c.stats.commands += 1;
        }
        let bytes = iu_bytes(&c.recv, c.rpad, srq_bufs(&self.devs, c.dev), r, len);
        let imm_off = c.imm_off;
        let req = &mut c.reqs[slot as usize];
        if tm {
            req.exec.reset();
            return self.start_tm(core, key, slot, sub);
        }
        match SrpCmd::decode(bytes, imm_off) {
            Err(e) => {
                req.exec.reset();
                let Some(t) = bytes.get(8..16) else {
                    tracing::warn!("SRP channel {}: runt SRP_CMD ({len} bytes) dropped", c.gid);
                    return self.finish(core, key, slot, false);
                };
                tracing::warn!("SRP channel {}: bad SRP_CMD: {e}", c.gid);
                let mut tag = [0u8; 8];
                tag.copy_from_slice(t);
                req.tag = Tag(tag);
                req.sol_not = bytes.get(1).copied().unwrap_or(0);
                ScsiEngine::fail(core, &mut req.exec, Sense::invalid_field_in_command_iu());
                req.stage = Stage::Respond;
            }
            Ok(cmd) => {
                req.tag = cmd.tag;
                req.sol_not = cmd.sol_not;
                req.imm = matches!(cmd.data_out, DataDesc::Immediate(_));
                req.data_in = match cmd.data_in {
                    DataDesc::Direct(d) => Some(d),
                    _ => None,
                };
                req.lun = scsi::lun::decode(cmd.lun).ok();
                let scsi_cmd = ScsiCommand {
                    token: token(key, slot, serial),
                    subsystem: sub,
                    lun: req.lun,
                    cdb: cmd.cdb,
                    data_in_len: cmd.data_in.len(),
                    data_out_len: cmd.data_out.len(),
                };
                self.scsi.start(core, &mut req.exec, &scsi_cmd);
                if cmd.direction() == crate::proto::Direction::Bidirectional {
                    ScsiEngine::fail(core, &mut req.exec, Sense::invalid_field_in_command_iu());
                    req.stage = Stage::Respond;
                } else if cmd.task_attr == TaskAttr::Aca {
                    // No auto contingent allegiance (NACA = 0): refused as LIO refuses it,
                    // before it joins the task set.
                    let sense = Sense::new(SenseKey::IllegalRequest, 0x24, 0x00);
                    ScsiEngine::fail(core, &mut req.exec, sense);
                    req.stage = Stage::Respond;
                } else if let Some(lun) = req.lun
                    && req.exec.addresses_lu()
                {
                    let attr = match cmd.task_attr {
                        TaskAttr::HeadOfQueue => TaskAttribute::HeadOfQueue,
                        TaskAttr::Ordered => TaskAttribute::Ordered,
                        _ => TaskAttribute::Simple,
                    };
                    let ix = match c.last_task_set {
                        Some((l, ix)) if l == lun => ix,
                        _ => {
                            let sets = &mut self.task_sets;
                            let ix = *self.task_set_ix.entry((sub, lun)).or_insert_with(|| {
                                sets.push(TaskOrder::default());
                                (sets.len() - 1) as u32
                            });
                            c.last_task_set = Some((lun, ix));
                            ix
                        }
                    };
                    req.order = Some((attr, ix));
                    let set = &mut self.task_sets[ix as usize];
                    if !set.arrive(scsi_cmd.token, attr) {
                        req.stage = Stage::Dormant;
                        return;
                    }
                }
                if is_read(cmd.cdb) && req.stage == Stage::Core {
                    let bytes = scsi_cmd.data_in_len;
                    self.take_read_bufs(key, slot, bytes);
                }
            }
        }
        self.drive(core, key, slot);
    }

    /// A READ's data buffers for its data-in descriptor, taken as it arrives when they are
    /// free and no request waits for buffers (never ahead of one): the SCSI engine then
    /// submits the read within its first run instead of asking for them. Given back if
    /// admission queues the command (`apply`), so a paused namespace holds none.
    #[inline]
    fn take_read_bufs(&mut self, key: u16, slot: u16, bytes: u32) {
        let n = self.scsi.limits().units(u64::from(bytes));
        let c = &mut self.chans[key as usize];
        let d = &mut self.devs[c.dev];
        if n == 0 || !self.buf_wait.is_empty() || d.data_free.len() < n {
            return;
        }
        let Some(io) = c.reqs[slot as usize].exec.io.as_mut() else {
            return;
        };
        if io.bufs.remaining_capacity() < n {
            return;
        }
        for _ in 0..n {
            if let Some(b) = d.data_free.pop() {
                io.bufs.push(b);
            }
        }
    }

    /// Gives a request's data buffers back to the pool (it holds nothing else in them yet).
    fn give_back_bufs(&mut self, key: u16, slot: u16) {
        let c = &mut self.chans[key as usize];
        let d = &mut self.devs[c.dev];
        if let Some(io) = c.reqs[slot as usize].exec.io.as_mut() {
            for mut b in io.bufs.drain(..) {
                b.reset();
                d.data_free.push(b);
            }
        }
    }

    /// The request in `slot` of channel `key`, if both exist.
    fn req_mut(&mut self, key: u16, slot: u16) -> Option<&mut Req> {
        self.chans
            .get_mut(key as usize)
            .and_then(|c| c.reqs.get_mut(slot as usize))
    }

    /// The request a token names, if it is still that request (same serial) and at `stage`.
    fn token_req_mut(&mut self, t: u64, stage: Stage) -> Option<(u16, u16, &mut Req)> {
        let (key, slot, serial) = untoken(t);
        self.req_mut(key, slot)
            .filter(|r| r.serial == serial && r.stage == stage)
            .map(|r| (key, slot, r))
    }

    /// A request queued by admission is replayed.
    pub(super) fn resume(&mut self, core: &mut PgCore, t: u64) {
        let Some((key, slot, r)) = self.token_req_mut(t, Stage::Admit) else {
            return;
        };
        r.stage = Stage::Core;
        self.drive(core, key, slot);
    }

    /// Moves a request on until it waits for something.
    pub(super) fn drive(&mut self, core: &mut PgCore, key: u16, slot: u16) {
        loop {
            let Some(r) = self
                .chans
                .get(key as usize)
                .and_then(|c| c.reqs.get(slot as usize))
            else {
                return;
            };
            let stage = r.stage;
            if r.aborted && matches!(stage, Stage::Core | Stage::Fetch | Stage::Respond) {
                if r.answer_aborted {
                    self.answer_task_aborted(core, key, slot);
                    continue;
                }
                return self.finish(core, key, slot, false);
            }
            let moved = match stage {
                Stage::Core => self.run_core(core, key, slot),
                Stage::Fetch => self.fetch(core, key, slot),
                Stage::Respond => self.respond(core, key, slot),
                _ => false,
            };
            if !moved {
                return;
            }
        }
    }

    /// Lets the SCSI engine move the request on. A read's data buffers, when there are
    /// enough free, go to the engine at once, within the same turn (not through the driver's
    /// loop again).
    fn run_core(&mut self, core: &mut PgCore, key: u16, slot: u16) -> bool {
        loop {
            let c = &mut self.chans[key as usize];
            let nexus = &c.scsi;
            let r = &mut c.reqs[slot as usize];
            let action = self.scsi.drive(core, nexus, &c.ua, &mut r.exec);
            match action {
                ScsiAction::NeedBuffers(n) => {
                    if !self.take_bufs(key, slot, n) {
                        return false;
                    }
                }
                // A read or write went to the bdev (the usual answer): no `apply`.
                ScsiAction::Submitted => {
                    self.chans[key as usize].reqs[slot as usize].stage = Stage::Bdev;
                    return false;
                }
                _ => return self.apply(key, slot, action),
            }
        }
    }

    /// Does what the SCSI engine asked; returns whether the request can move on at once.
    fn apply(&mut self, key: u16, slot: u16, action: ScsiAction) -> bool {
        let r = &mut self.chans[key as usize].reqs[slot as usize];
        match action {
            ScsiAction::Queued => {
                r.stage = Stage::Admit;
                // Admission runs first: what the request holds are a READ's buffers taken
                // as it arrived (`take_read_bufs`).
                if r.exec.io.as_ref().is_some_and(|io| !io.bufs.is_empty()) {
                    self.give_back_bufs(key, slot);
                }
                false
            }
            ScsiAction::NeedBuffers(n) => self.take_bufs(key, slot, n),
            ScsiAction::FetchDataOut { len, param } => {
                r.fetch = (len, param);
                r.stage = Stage::Fetch;
                true
            }
            ScsiAction::Submitted => {
                r.stage = Stage::Bdev;
                false
            }
            ScsiAction::Busy => {
                let t = token(key, slot, r.serial);
                self.bdev_retry.push_back(t);
                false
            }
            ScsiAction::Respond => {
                r.stage = Stage::Respond;
                true
            }
            ScsiAction::AbortPreempted => {
                let Some(pa) = r.exec.take_preempted() else {
                    r.stage = Stage::Respond;
                    return true;
                };
                let who = std::sync::Arc::clone(&pa.nexuses);
                // NVMe hosts it preempted: their commands are aborted after the nexuses'.
                let then = (!pa.no_hosts()).then(|| PreemptAbort {
                    nexuses: std::sync::Arc::new([]),
                    ..pa
                });
                let c = &self.chans[key as usize];
                let r = &c.reqs[slot as usize];
                let spec = AbortSpec {
                    sub: c.sub_id,
                    lun: r.lun.unwrap_or(0),
                    scope: SpecScope::Preempted(who),
                    requester: Some(c.nexus),
                    answer_others: true,
                    arrived: (self.index, r.arrival),
                };
                tracing::info!(
                    "SRP channel {}: PREEMPT AND ABORT: aborting the preempted nexuses' tasks",
                    c.gid
                );
                let serial = r.serial;
                self.chans[key as usize].reqs[slot as usize].stage = Stage::TmWait;
                self.abort_everywhere(spec, key, slot, serial, then);
                false
            }
        }
    }

    /// Takes `n` data buffers into the request's I/O, or queues it for buffers.
    fn take_bufs(&mut self, key: u16, slot: u16, n: usize) -> bool {
        let c = &mut self.chans[key as usize];
        let dev = c.dev;
        let r = &mut c.reqs[slot as usize];
        let have = r.exec.io.as_ref().map_or(0, |io| io.bufs.len());
        if have >= n {
            return true;
        }
        let want = n - have;
        let d = &mut self.devs[dev];
        if d.data_free.len() < want || (!r.buf_woken && !self.buf_wait.is_empty()) {
            r.need_units = want;
            r.buf_woken = false;
            if !r.waiting_buf {
                r.waiting_buf = true;
                self.buf_wait.push_back(token(key, slot, r.serial));
            }
            return false;
        }
        r.buf_woken = false;
        if let Some(io) = r.exec.io.as_mut() {
            for _ in 0..want {
                if let Some(b) = d.data_free.pop() {
                    let _ = io.bufs.try_push(b);
                }
            }
        }
        true
    }

    /// Wakes requests waiting for data buffers, in order, while there are enough.
    pub(super) fn wake_buf_waiters(&mut self, core: &mut PgCore) -> usize {
        let mut n = 0;
        while let Some(&t) = self.buf_wait.front() {
            let (key, slot, serial) = untoken(t);
            let live = self
                .chans
                .get(key as usize)
                .and_then(|c| c.reqs.get(slot as usize).map(|r| (c.dev, r)))
                .filter(|(_, r)| r.serial == serial && r.waiting_buf && r.stage != Stage::Free);
            let Some((dev, r)) = live else {
                self.buf_wait.pop_front();
                continue;
            };
            if self.free_bufs(dev) < r.need_units {
                break;
            }
            self.buf_wait.pop_front();
            let r = &mut self.chans[key as usize].reqs[slot as usize];
            r.waiting_buf = false;
            r.buf_woken = true;
            self.drive(core, key, slot);
            n += 1;
        }
        n
    }

    pub(super) fn retry_bdev(&mut self, core: &mut PgCore) -> usize {
        let mut n = 0;
        for _ in 0..self.bdev_retry.len() {
            let Some(t) = self.bdev_retry.pop_front() else {
                break;
            };
            let (key, slot, serial) = untoken(t);
            let ok = self
                .chans
                .get(key as usize)
                .and_then(|c| c.reqs.get(slot as usize))
                .is_some_and(|r| r.serial == serial && r.stage == Stage::Core);
            if ok {
                n += 1;
                self.drive(core, key, slot);
            }
        }
        n
    }

    /// Brings data-out in: from the IU (immediate data) or by RDMA READ.
    fn fetch(&mut self, core: &mut PgCore, key: u16, slot: u16) -> bool {
        let limits = self.scsi.limits();
        let c = &mut self.chans[key as usize];
        let r = &mut c.reqs[slot as usize];
        let Some(rref) = r.recv else {
            return false;
        };
        // Parameter data (UNMAP list, WRITE SAME pattern) goes to one buffer.
        let (bytes, param) = r.fetch;
        let is_write = !param;
        if r.imm {
            let Some(off) = c.imm_off else {
                return false;
            };
            let start = c.rpad + usize::from(off);
            if is_write {
                let RecvRef::Ring(s) = rref else {
                    return false;
                };
                let Some(mut b) = c.recv.get_mut(s as usize).and_then(Option::take) else {
                    return false;
                };
                b.set_window(start, bytes as usize);
                let r = &mut c.reqs[slot as usize];
                if let Some(io) = r.exec.io.as_mut() {
                    let _ = io.bufs.try_push(b);
                }
                r.recv_lent = true;
                r.moved_out = bytes;
                r.exec.data_out_received();
                r.stage = Stage::Core;
                c.stats.write_bytes += bytes;
                return true;
            }
            if !self.take_bufs(key, slot, 1) {
                return false;
            }
            let c = &mut self.chans[key as usize];
            let iu_len = c.reqs[slot as usize].iu_len;
            let data = iu_bytes(&c.recv, c.rpad, srq_bufs(&self.devs, c.dev), rref, iu_len);
            let off = usize::from(off);
            let r = &mut c.reqs[slot as usize];
            if let Some(b) = r.exec.io.as_mut().and_then(|io| io.bufs.last_mut()) {
                b.reset();
                let n = (bytes as usize).min(data.len().saturating_sub(off));
                b.as_mut_slice()[..n].copy_from_slice(&data[off..off + n]);
            }
            r.moved_out = bytes;
            r.exec.data_out_received();
            r.stage = Stage::Core;
            return true;
        }
        if !self.take_bufs(key, slot, limits.units(bytes)) {
            return false;
        }
        let c = &mut self.chans[key as usize];
        let lkey = self.devs[c.dev].data_mr.lkey();
        let base = c.send_batch.len();
        let r = &c.reqs[slot as usize];
        let data = iu_bytes(&c.recv, c.rpad, srq_bufs(&self.devs, c.dev), rref, r.iu_len);
        let Ok(cmd) = SrpCmd::decode(data, c.imm_off) else {
            return false;
        };
        let local = r.exec.io.as_ref().map_or(&[][..], |io| io.bufs.as_slice());
        let built = descriptors::build(
            &mut c.send_batch,
            RdmaOp::Read,
            pack(kind::REQ, key, slot, r.serial),
            descriptors::Local {
                bufs: local,
                lkey,
                max_sge: c.max_sge,
            },
            &cmd.data_out,
            bytes as u32,
        );
        match built {
            Err(e) => {
                let r = &mut c.reqs[slot as usize];
                tracing::warn!("SRP channel {}: data-out descriptors refused: {e:?}", c.gid);
                ScsiEngine::fail(core, &mut r.exec, Sense::invalid_field_in_command_iu());
                r.stage = Stage::Respond;
                true
            }
            Ok(n) => {
                let start = c.reqs[slot as usize].xfer_next as usize;
                let Some((k, _)) = round(c.sq_used, c.sq_budget(), n - start, false) else {
                    c.send_batch.truncate(base);
                    let serial = c.reqs[slot as usize].serial;
                    c.sq_wait.push_back((slot, serial));
                    return false;
                };
                keep_round(&mut c.send_batch, base, start, k);
                if let Some(w) = c.send_batch.last_mut() {
                    w.signaled = true;
                }
                let r = &mut c.reqs[slot as usize];
                r.stage = Stage::Reading;
                if start == 0 {
                    r.moved_out = bytes;
                    c.stats.write_bytes += bytes;
                }
                r.xfer_next = if start + k < n { (start + k) as u32 } else { 0 };
                self.post(core, key, slot, base, k as u32);
                false
            }
        }
    }

    /// Accounts the `n` work requests a request appended to its channel's batch from `base`
    /// (send slots); [`SrpPg::flush_sends`] posts the batch at the end of the poll.
    fn post(&mut self, core: &mut PgCore, key: u16, slot: u16, base: usize, n: u32) {
        let c = &mut self.chans[key as usize];
        if c.qp.is_none() {
            c.send_batch.truncate(base);
            tracing::warn!("SRP channel {}: no queue pair to post on", c.gid);
            let r = &mut c.reqs[slot as usize];
            r.aborted = true;
            let out = c.sm.handle(Event::CompletionError);
            self.run(core, key, out);
            self.maybe_finish_aborted(core, key, slot);
            return;
        }
        c.sq_used += n;
        c.reqs[slot as usize].sq_wrs += n;
        if !c.batched {
            c.batched = true;
            self.dirty.push(key);
        }
    }

    /// Posts every channel's batched send work requests.
    pub(super) fn flush_sends(&mut self, core: &mut PgCore) {
        while let Some(key) = self.dirty.pop() {
            self.flush_chan(core, key);
        }
    }

    /// Posts one channel's batch. Work requests the adapter refused are taken back from
    /// their requests' accounts, and those requests fail as a refused post did before.
    pub(super) fn flush_chan(&mut self, core: &mut PgCore, key: u16) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        c.batched = false;
        if c.send_batch.is_empty() {
            return;
        }
        let res = match c.qp.as_ref() {
            Some(qp) => qp.post_send(c.send_batch.iter()),
            None => Err(fabric::PostError {
                posted: 0,
                kind: fabric::PostErrorKind::InvalidState,
            }),
        };
        let Err(e) = res else {
            c.send_batch.clear();
            return;
        };
        tracing::warn!("SRP channel {}: {e}", c.gid);
        // A failure is rare: collecting the failed requests may allocate.
        let mut failed: Vec<u16> = Vec::new();
        for wr in &c.send_batch[e.posted.min(c.send_batch.len())..] {
            let (k, _, slot, serial) = super::unpack(wr.wr_id);
            c.sq_used = c.sq_used.saturating_sub(1);
            if k == super::kind::REQ
                && let Some(r) = c.reqs.get_mut(slot as usize)
                && r.serial == serial
            {
                r.sq_wrs = r.sq_wrs.saturating_sub(1);
                if !failed.contains(&slot) {
                    failed.push(slot);
                }
            }
        }
        c.send_batch.clear();
        for slot in failed {
            let Some(c) = self.chans.get_mut(key as usize) else {
                return;
            };
            c.reqs[slot as usize].aborted = true;
            let out = c.sm.handle(Event::CompletionError);
            self.run(core, key, out);
            self.maybe_finish_aborted(core, key, slot);
        }
    }

    /// A bdev I/O came back.
    pub(super) fn bdev_done(&mut self, core: &mut PgCore, io: Box<BdevIo>) {
        let (key, slot, serial) = untoken(io.tag);
        let Some(c) = self.chans.get_mut(key as usize) else {
            tracing::error!(
                "SRP: bdev completion for a gone channel (tag {:#x})",
                io.tag
            );
            return;
        };
        let Some(r) = c.reqs.get_mut(slot as usize) else {
            return;
        };
        if r.serial != serial || r.stage != Stage::Bdev {
            tracing::error!("SRP: stale bdev completion (tag {:#x})", io.tag);
            return;
        }
        if r.aborted {
            r.exec.io = Some(io);
            // Immediate data: the receive buffer comes home.
            return_lent_recv(&mut c.recv, r);
            r.stage = Stage::Core;
            ScsiEngine::abandon(core, &mut r.exec);
            if r.answer_aborted {
                // Its outcome is dropped: whatever the bdev did, the answer is TASK ABORTED.
                return self.drive(core, key, slot);
            }
            return self.finish(core, key, slot, false);
        }
        if io.status != IoStatus::Success {
            tracing::warn!(
                "SRP channel {}: bdev {:?} failed: {:?}",
                c.gid,
                io.op,
                io.status
            );
        }
        let action = self.scsi.io_done(core, &mut r.exec, io);
        // Immediate data: the receive buffer comes home (a write is one bdev operation).
        return_lent_recv(&mut c.recv, r);
        if action == ScsiAction::Respond
            && r.exec.is_good()
            && matches!(r.exec.op(), Some(ScsiIo::Read { .. }))
        {
            c.stats.read_bytes += u64::from(r.exec.data_in_len());
        }
        if action == ScsiAction::Respond {
            // The usual answer: the response goes now, without `apply`.
            r.stage = Stage::Respond;
            return self.drive(core, key, slot);
        }
        if self.apply(key, slot, action) {
            self.drive(core, key, slot);
        }
    }

    /// Posts the data-in RDMA WRITEs (if any) and the SRP_RSP. The work requests are built
    /// in place at the end of the channel's send batch (no copy from a scratch list).
    fn respond(&mut self, core: &mut PgCore, key: u16, slot: u16) -> bool {
        let c = &mut self.chans[key as usize];
        let lkey = self.devs[c.dev].data_mr.lkey();
        let (used, budget) = (c.sq_used, c.sq_budget());
        let base = c.send_batch.len();
        let r = &mut c.reqs[slot as usize];
        let serial = r.serial;
        let wr_id = pack(kind::REQ, key, slot, serial);
        let data_in = r.exec.data_in_len();
        if data_in > 0 {
            let local = descriptors::Local {
                bufs: r.exec.io.as_ref().map_or(&[][..], |io| io.bufs.as_slice()),
                lkey,
                max_sge: c.max_sge,
            };
            let built = match (r.recv, r.data_in) {
                (Some(_), Some(d)) => descriptors::build(
                    &mut c.send_batch,
                    RdmaOp::Write,
                    wr_id,
                    local,
                    &DataDesc::Direct(d),
                    data_in,
                ),
                (Some(rref), None) => {
                    let data =
                        iu_bytes(&c.recv, c.rpad, srq_bufs(&self.devs, c.dev), rref, r.iu_len);
                    match SrpCmd::decode(data, c.imm_off) {
                        Ok(cmd) => descriptors::build(
                            &mut c.send_batch,
                            RdmaOp::Write,
                            wr_id,
                            local,
                            &cmd.data_in,
                            data_in,
                        ),
                        Err(_) => Err(XferError::NoDescriptors),
                    }
                }
                (None, _) => Err(XferError::NoDescriptors),
            };
            if let Err(e) = built {
                tracing::warn!("SRP channel {}: data-in descriptors refused: {e:?}", c.gid);
                ScsiEngine::fail(core, &mut r.exec, Sense::invalid_field_in_command_iu());
            }
        }
        // Data-in already written in earlier rounds, and what this round may post.
        let built = c.send_batch.len() - base;
        let start = (r.xfer_next as usize).min(built);
        let Some((k, last)) = round(used, budget, built - start, true) else {
            c.send_batch.truncate(base);
            c.sq_wait.push_back((slot, serial));
            return false;
        };
        keep_round(&mut c.send_batch, base, start, k);
        if !last {
            // A round of data-in only; the response follows with the last one.
            if let Some(w) = c.send_batch.last_mut() {
                w.signaled = true;
            }
            r.stage = Stage::Writing;
            r.xfer_next = (start + k) as u32;
            self.post(core, key, slot, base, k as u32);
            return false;
        }
        r.xfer_next = 0;
        let n = k as u32 + 1;
        // The response.
        let delta = c.sm.credits_mut().response_delta();
        let tm_data = SrpRsp::tm_response_data(r.tm_code);
        let x = &r.exec;
        let sense = x.sense().map(|s| s.to_fixed());
        let rsp = if r.tm {
            SrpRsp::task_mgmt(r.tag, delta, &tm_data)
        } else {
            let ok = x.is_good();
            let din = if ok {
                Residual::compute(x.in_len(), x.wanted_in())
            } else {
                Residual::compute(x.in_len(), u64::from(x.data_in_len()))
            };
            let dout = if ok {
                Residual::compute(x.out_len(), x.wanted_out())
            } else {
                Residual::compute(x.out_len(), r.moved_out)
            };
            let moved = if x.data_in_len() > 0 {
                u64::from(x.data_in_len())
            } else {
                r.moved_out
            };
            c.io_stats.count_scsi(x.op(), moved, x.status(), x.sense());
            SrpRsp {
                solnt: crate::proto::rsp::solicited(r.sol_not, ok),
                data_out: dout,
                data_in: din,
                ..SrpRsp::scsi(
                    r.tag,
                    delta,
                    x.status() as u8,
                    sense.as_ref().map_or(&[], |s| &s[..]),
                )
            }
        };
        let solicited = rsp.solnt;
        let len = match rsp.encode(c.send_bufs[slot as usize].as_mut_slice(), c.max_ti) {
            Ok(n) => n,
            Err(e) => {
                tracing::error!("SRP channel {}: cannot encode SRP_RSP: {e}", c.gid);
                0
            }
        };
        let buf = &c.send_bufs[slot as usize];
        let mut send = SendWr::send(
            wr_id,
            SgeList::one(c.send_mr.sge(buf.base_addr(), len as u32)),
        );
        send.solicited = solicited;
        c.send_batch.push(send);
        r.stage = Stage::Sending;
        // Repost the receive buffer before the response hands the credit back (a write
        // answered before its immediate data reached the bdev still holds it in its I/O).
        return_lent_recv(&mut c.recv, r);
        if let Some(rref) = r.recv.take() {
            self.recycle_recv(key, rref);
        }
        self.post(core, key, slot, base, n);
        false
    }

    /// Completions of a request's work requests.
    pub(super) fn on_req_wc(
        &mut self,
        core: &mut PgCore,
        key: u16,
        slot: u16,
        serial: u16,
        wc: WorkCompletion,
    ) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            tracing::error!("SRP: send completion for a gone channel");
            return;
        };
        let Some(r) = c.reqs.get_mut(slot as usize) else {
            return;
        };
        if r.serial != serial {
            tracing::error!("SRP channel {}: stale send completion", c.gid);
            return;
        }
        if wc.status.is_success() {
            c.sq_used = c.sq_used.saturating_sub(r.sq_wrs);
            r.sq_wrs = 0;
            match r.stage {
                Stage::Reading | Stage::Writing if r.aborted => {
                    return self.maybe_finish_aborted(core, key, slot);
                }
                Stage::Reading if r.xfer_next > 0 => {
                    // The next round of the data-out.
                    r.stage = Stage::Fetch;
                    self.drive(core, key, slot);
                }
                Stage::Writing => {
                    // The next round of the data-in (and the response with the last).
                    r.stage = Stage::Respond;
                    self.drive(core, key, slot);
                }
                Stage::Reading => {
                    r.exec.data_out_received();
                    r.stage = Stage::Core;
                    self.drive(core, key, slot);
                }
                Stage::Sending => self.finish(core, key, slot, true),
                _ => {}
            }
            self.wake_sq(core, key);
            return;
        }
        c.sq_used = c.sq_used.saturating_sub(1);
        r.sq_wrs = r.sq_wrs.saturating_sub(1);
        let responded = r.stage == Stage::Sending;
        r.aborted = true;
        if wc.status != WcStatus::WrFlushErr {
            tracing::warn!(
                "SRP channel {}: work request failed: {:?} (vendor error {:#x})",
                c.gid,
                wc.status,
                wc.vendor_err
            );
        }
        let out = c.sm.handle(Event::CompletionError);
        self.run(core, key, out);
        if let Some(r) = self.req_mut(key, slot)
            && responded
            && r.sq_wrs == 0
        {
            // The response was posted (its credit is spent) but never arrived.
            r.stage = Stage::Core;
        }
        self.maybe_finish_aborted(core, key, slot);
    }

    /// Send slots were freed: requests that waited for them go on.
    pub(super) fn wake_sq(&mut self, core: &mut PgCore, key: u16) {
        loop {
            let Some(c) = self.chans.get_mut(key as usize) else {
                return;
            };
            let Some(&(slot, serial)) = c.sq_wait.front() else {
                return;
            };
            let r = &c.reqs[slot as usize];
            if r.serial != serial || !matches!(r.stage, Stage::Fetch | Stage::Respond) {
                c.sq_wait.pop_front();
                continue;
            }
            let used = c.sq_used;
            c.sq_wait.pop_front();
            self.drive(core, key, slot);
            let Some(c) = self.chans.get(key as usize) else {
                return;
            };
            if c.sq_used == used {
                // It could not go (it re-queued itself); keep the order.
                return;
            }
        }
    }

    /// Finishes an aborted request if nothing refers to it any more.
    pub(super) fn maybe_finish_aborted(&mut self, core: &mut PgCore, key: u16, slot: u16) {
        let Some(r) = self
            .chans
            .get(key as usize)
            .and_then(|c| c.reqs.get(slot as usize))
        else {
            return;
        };
        if r.aborted
            && r.sq_wrs == 0
            && matches!(
                r.stage,
                Stage::Reading | Stage::Writing | Stage::Core | Stage::Sending
            )
        {
            let responded = r.stage == Stage::Sending;
            if r.answer_aborted && !responded {
                return self.answer_task_aborted_now(core, key, slot);
            }
            self.finish(core, key, slot, responded);
        }
    }

    /// An aborted request to be answered (another nexus aborted it) whose work is over: it
    /// now ends with TASK ABORTED (the next drive responds).
    fn answer_task_aborted(&mut self, core: &mut PgCore, key: u16, slot: u16) {
        let Some(r) = self.req_mut(key, slot) else {
            return;
        };
        r.aborted = false;
        r.answer_aborted = false;
        ScsiEngine::task_aborted(core, &mut r.exec);
        r.stage = Stage::Respond;
    }

    /// [`SrpPg::answer_task_aborted`], and the response goes.
    fn answer_task_aborted_now(&mut self, core: &mut PgCore, key: u16, slot: u16) {
        self.answer_task_aborted(core, key, slot);
        self.drive(core, key, slot);
    }

    /// Frees a request slot and everything it holds.
    pub(super) fn finish(&mut self, core: &mut PgCore, key: u16, slot: u16, responded: bool) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        let dev = c.dev;
        let r = &mut c.reqs[slot as usize];
        ScsiEngine::abandon(core, &mut r.exec);
        if r.stage == Stage::Free {
            return;
        }
        self.leave_task_set(key, slot);
        let c = &mut self.chans[key as usize];
        let r = &mut c.reqs[slot as usize];
        debug_assert!(r.stage != Stage::Bdev && r.sq_wrs == 0);
        if r.aborted && !responded {
            c.stats.aborted += 1;
        }
        // A ring buffer lent for immediate data goes back to its ring, never to the pool.
        return_lent_recv(&mut c.recv, r);
        let d = &mut self.devs[dev];
        if let Some(io) = r.exec.io.as_mut() {
            for mut b in io.bufs.drain(..) {
                b.reset();
                d.data_free.push(b);
            }
        }
        if let Some(mut b) = r.exec.take_param() {
            b.reset();
            d.data_free.push(b);
        }
        r.stage = Stage::Free;
        r.waiting_buf = false;
        let rref = r.recv.take();
        // Task management waiting for it (it was aborted): seldom any.
        let waiters: ArrayVec<u32, 4> = if r.waiters.is_empty() {
            ArrayVec::new()
        } else {
            r.waiters.drain(..).collect()
        };
        c.req_free.push(slot);
        let out = c.sm.command_finished(responded);
        if let Some(rref) = rref {
            self.recycle_recv(key, rref);
        }
        for w in waiters {
            self.waiter_dec(w);
        }
        if !responded {
            self.maybe_cred_req(key);
        }
        // An IU waiting for a request slot, the channel's state machine's actions: seldom.
        if self
            .chans
            .get(key as usize)
            .is_some_and(|c| c.slot_waiters())
        {
            self.slot_freed(core, key);
        }
        if !out.actions.is_empty() {
            self.run(core, key, out);
        }
    }

    // ----- task attributes -----

    /// The request leaves its logical unit's task set (it ended, or was aborted while
    /// dormant); the tasks this lets into the enabled state start at the next poll.
    #[inline]
    fn leave_task_set(&mut self, key: u16, slot: u16) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        let r = &mut c.reqs[slot as usize];
        let Some((attr, ix)) = r.order.take() else {
            return;
        };
        let Some(set) = self.task_sets.get_mut(ix as usize) else {
            return;
        };
        if r.stage == Stage::Dormant {
            set.remove(token(key, slot, r.serial));
        } else {
            set.ended(attr);
        }
        while let Some(t) = set.next_enabled() {
            self.task_ready.push_back(t);
        }
    }

    /// Starts the dormant tasks their task sets enabled, in order.
    pub(super) fn wake_dormant(&mut self, core: &mut PgCore) -> usize {
        let mut n = 0;
        while let Some(t) = self.task_ready.pop_front() {
            let Some((key, slot, r)) = self.token_req_mut(t, Stage::Dormant) else {
                continue;
            };
            r.stage = Stage::Core;
            self.drive(core, key, slot);
            n += 1;
        }
        n
    }

    // ----- task management and aborts -----

    fn start_tm(&mut self, core: &mut PgCore, key: u16, slot: u16, sub: u32) {
        let c = &mut self.chans[key as usize];
        let r = &c.reqs[slot as usize];
        let Some(rref) = r.recv else {
            return;
        };
        let bytes = iu_bytes(&c.recv, c.rpad, srq_bufs(&self.devs, c.dev), rref, r.iu_len);
        let tmr = match TskMgmt::decode(bytes) {
            Ok(t) => t,
            Err(e) => {
                let Some(t) = bytes.get(8..16) else {
                    tracing::warn!("SRP channel {}: runt SRP_TSK_MGMT dropped", c.gid);
                    return self.finish(core, key, slot, false);
                };
                tracing::warn!("SRP channel {}: bad SRP_TSK_MGMT: {e}", c.gid);
                let mut tag = [0u8; 8];
                tag.copy_from_slice(t);
                let r = &mut c.reqs[slot as usize];
                r.tag = Tag(tag);
                r.tm_code = TmResponse::Failed;
                r.stage = Stage::Respond;
                return self.drive(core, key, slot);
            }
        };
        let gid = c.gid;
        let nexus = c.nexus;
        let lun = scsi::lun::decode(tmr.lun).ok();
        // A LUN this nexus does not see (masking) is not there for its task management.
        let scsi_nexus = c.scsi.clone();
        let exists = lun.is_some_and(|l| self.scsi.lu_visible(core, sub, l, &scsi_nexus));
        let c = &mut self.chans[key as usize];
        let r = &mut c.reqs[slot as usize];
        r.tag = tmr.tag;
        r.sol_not = tmr.sol_not;
        r.lun = lun;
        tracing::info!(
            "SRP channel {gid}: task management {:?} on LUN {lun:?}",
            tmr.action
        );
        match tm::plan(tmr.action, exists) {
            TmPlan::Respond(code) => {
                r.tm_code = code;
                r.stage = Stage::Respond;
                self.drive(core, key, slot);
            }
            TmPlan::Abort { scope, reset_lun } => {
                let lun = lun.unwrap_or(0);
                let spec = AbortSpec {
                    arrived: (self.index, r.arrival),
                    sub,
                    lun,
                    scope: match scope {
                        AbortScope::Task(tag) => SpecScope::Task { nexus, tag },
                        AbortScope::NexusOnLun => SpecScope::Nexus(nexus),
                        AbortScope::AllOnLun => SpecScope::All,
                    },
                    requester: Some(nexus),
                    answer_others: true,
                };
                if reset_lun {
                    // SPC-2 reservation cleared, BUS DEVICE RESET FUNCTION OCCURRED on every
                    // other nexus; the tasks go below.
                    target_core::scsi_exec::logical_unit_reset(core, sub, lun, &scsi_nexus);
                }
                r.stage = Stage::TmWait;
                r.tm_code = TmResponse::Complete;
                let serial = r.serial;
                self.abort_everywhere(spec, key, slot, serial, None);
            }
        }
    }

    /// Aborts matching tasks on every poll group, then answers the task management request
    /// `(key, slot, serial)` on this one. Two rounds over the poll groups: the first marks the
    /// tasks aborted everywhere (so none of them answers any more), the second waits on each
    /// poll group until its aborted tasks are gone. `then`: NVMe hosts a PREEMPT AND ABORT
    /// preempted, whose commands are aborted afterwards, before the answer.
    fn abort_everywhere(
        &mut self,
        spec: AbortSpec,
        key: u16,
        slot: u16,
        serial: u16,
        then: Option<PreemptAbort>,
    ) {
        let index = self.shared.index;
        self.abort_seq += 1;
        let id = (self.index as u64) << 48 | self.abort_seq;
        let reactors = self.shared.reactors.clone();
        let sent = self.shared.reactors.for_each_reactor_async::<()>(
            move |rctx, step| {
                with_transport_pg::<SrpPg, _>(rctx, index, |pg, core| {
                    pg.abort_mark(core, spec.clone(), id)
                });
                step.next(Ok(()));
            },
            move |_, _| {
                let sent = reactors.for_each_reactor_async::<()>(
                    move |rctx, step| {
                        let mut step = Some(step);
                        with_transport_pg::<SrpPg, _>(rctx, index, |pg, _| {
                            if let Some(s) = step.take() {
                                pg.abort_wait(id, s);
                            }
                        });
                        if let Some(s) = step {
                            s.next(Ok(()));
                        }
                    },
                    move |rctx, _| {
                        if let Some(pa) = then {
                            let reactor = rctx.index();
                            let target = with_transport_pg::<SrpPg, _>(rctx, index, |_, core| {
                                std::sync::Arc::clone(core.target())
                            });
                            if let Some(target) = target {
                                let t = std::sync::Arc::clone(&target);
                                target.preempt_abort(pa, move || {
                                    let sent = t.reactors().send_ctrl(reactor, move |rctx| {
                                        with_transport_pg::<SrpPg, _>(rctx, index, |pg, core| {
                                            pg.tm_finished(core, key, slot, serial)
                                        });
                                    });
                                    if sent.is_err() {
                                        tracing::warn!("SRP: PREEMPT AND ABORT cannot complete");
                                    }
                                });
                                return;
                            }
                        }
                        with_transport_pg::<SrpPg, _>(rctx, index, |pg, core| {
                            pg.tm_finished(core, key, slot, serial)
                        });
                    },
                );
                if sent.is_err() {
                    tracing::warn!("SRP: task management could not reach every poll group");
                }
            },
        );
        if sent.is_err() {
            tracing::warn!("SRP: task management could not reach every poll group");
        }
    }

    /// A preempt-and-abort from an NVMe host (or the NVMe part of one): aborts the
    /// preempted nexuses' tasks on the LU here (TASK ABORTED) and holds `fence` until those
    /// still in flight are gone. Returns how many are.
    pub(super) fn preempt_abort_tasks(
        &mut self,
        core: &mut PgCore,
        pa: &PreemptAbort,
        fence: &std::sync::Arc<AbortFence>,
    ) -> u32 {
        if pa.nexuses.is_empty() || pa.nsid == 0 || pa.nsid > u32::from(u16::MAX) + 1 {
            return 0;
        }
        self.abort_seq += 1;
        let id = (self.index as u64) << 48 | self.abort_seq;
        let spec = AbortSpec {
            sub: pa.sub,
            lun: (pa.nsid - 1) as u16,
            scope: SpecScope::Preempted(std::sync::Arc::clone(&pa.nexuses)),
            requester: None,
            answer_others: true,
            // No order against tasks here: every one that passed the check is aborted.
            arrived: (usize::MAX, 0),
        };
        let w = self.abort_matching_counted(core, spec, id);
        let n = self.waiters.get(w as usize).map_or(0, |x| x.remaining);
        if n > 0
            && let Some(x) = self.waiters.get_mut(w as usize)
        {
            fence.hold();
            x.fence = Some(std::sync::Arc::clone(fence));
        }
        self.waiter_arm(w);
        n
    }

    /// First round of a cross-poll-group abort: mark the tasks here.
    fn abort_mark(&mut self, core: &mut PgCore, spec: AbortSpec, id: u64) {
        let w = self.abort_matching_counted(core, spec, id);
        self.waiter_arm(w);
    }

    /// Aborts the tasks `spec` selects here, counted on a new waiter of abort `id` (not
    /// armed yet), which it returns.
    fn abort_matching_counted(&mut self, core: &mut PgCore, spec: AbortSpec, id: u64) -> u32 {
        let w = self.waiters.insert(Waiter {
            remaining: 0,
            armed: false,
            done: None,
            abort_id: id,
            fence: None,
        }) as u32;
        self.aborts.insert(id, w);
        self.abort_matching(core, spec, w);
        w
    }

    /// Second round: answer when the tasks marked here are gone.
    fn abort_wait(&mut self, id: u64, step: Step<()>) {
        match self
            .aborts
            .get(&id)
            .and_then(|w| self.waiters.get_mut(*w as usize))
        {
            Some(w) => w.done = Some(step),
            None => step.next(Ok(())),
        }
    }

    /// Every task of waiter `w` has been counted: fire it if they are all gone already.
    fn waiter_arm(&mut self, w: u32) {
        let Some(x) = self.waiters.get_mut(w as usize) else {
            return;
        };
        x.armed = true;
        if x.remaining == 0 {
            self.waiter_complete(w);
        }
    }

    fn waiter_dec(&mut self, w: u32) {
        let Some(x) = self.waiters.get_mut(w as usize) else {
            return;
        };
        x.remaining = x.remaining.saturating_sub(1);
        if x.remaining == 0 && x.armed {
            self.waiter_complete(w);
        }
    }

    fn waiter_complete(&mut self, w: u32) {
        let waiter = self.waiters.remove(w as usize);
        self.aborts.remove(&waiter.abort_id);
        if let Some(s) = waiter.done {
            s.next(Ok(()));
        }
        if let Some(f) = waiter.fence {
            f.release();
        }
    }

    fn tm_finished(&mut self, core: &mut PgCore, key: u16, slot: u16, serial: u16) {
        let ok = self
            .req_mut(key, slot)
            .filter(|r| r.serial == serial && r.stage == Stage::TmWait)
            .map(|r| r.stage = Stage::Respond)
            .is_some();
        if ok {
            let gid = self.chans.get(key as usize).map_or(0, |c| c.gid);
            tracing::info!("SRP channel {gid}: task management done, its aborted tasks are gone");
            self.drive(core, key, slot);
        }
    }

    /// Aborts the tasks `spec` selects on this poll group; those still in flight count on
    /// waiter `w` and tell it when they are gone.
    fn abort_matching(&mut self, core: &mut PgCore, spec: AbortSpec, w: u32) {
        let mut todo: Vec<(u16, u16, bool)> = Vec::new();
        for (k, c) in self.chans.iter() {
            if c.sub_id != spec.sub {
                continue;
            }
            let chan_ok = match &spec.scope {
                SpecScope::Task { nexus, .. } | SpecScope::Nexus(nexus) => c.nexus == *nexus,
                SpecScope::All => true,
                SpecScope::Preempted(who) => who.contains(&c.scsi.identity()),
            };
            if !chan_ok {
                continue;
            }
            let answer = spec.answer_others && Some(c.nexus) != spec.requester;
            for (i, r) in c.reqs.iter().enumerate() {
                if r.stage == Stage::Free || r.tm || r.lun != Some(spec.lun) {
                    continue;
                }
                if spec.arrived.0 == self.index && r.arrival > spec.arrived.1 {
                    continue;
                }
                if let SpecScope::Task { tag, .. } = &spec.scope
                    && r.tag != *tag
                {
                    continue;
                }
                todo.push((k as u16, i as u16, answer));
            }
        }
        let mut in_flight = 0;
        for &(k, i, answer) in &todo {
            if self.abort_req(core, k, i, Some(w), answer) {
                in_flight += 1;
            }
        }
        tracing::info!(
            "SRP poll group {}: aborting {} task(s) on LUN {} ({in_flight} still in flight, waited for)",
            self.index,
            todo.len(),
            spec.lun
        );
    }

    /// Aborts one request: no more data transfer, and no response — or, with `answer`, TASK
    /// ABORTED once nothing of it is in flight. Returns whether it is still in flight (a
    /// waiter given is then told when it is gone, answered or not).
    fn abort_req(
        &mut self,
        core: &mut PgCore,
        key: u16,
        slot: u16,
        w: Option<u32>,
        answer: bool,
    ) -> bool {
        let Some(r) = self.req_mut(key, slot) else {
            return false;
        };
        // A task already aborted silently (its own nexus's abort, a failed transfer, its
        // channel closing) stays unanswered.
        r.answer_aborted = answer && (!r.aborted || r.answer_aborted);
        r.aborted = true;
        let answer = r.answer_aborted;
        if r.stage == Stage::Dormant {
            // It never ran: out of the task set (the tasks behind it may go), then ended
            // as a request that has not started its work.
            self.leave_task_set(key, slot);
            let Some(r) = self.req_mut(key, slot) else {
                return false;
            };
            r.stage = Stage::Core;
        }
        // Borrows the channels only: the waiters are counted while `r` is held.
        let Some(r) = self
            .chans
            .get_mut(key as usize)
            .and_then(|c| c.reqs.get_mut(slot as usize))
        else {
            return false;
        };
        match r.stage {
            Stage::Free => false,
            Stage::Reading | Stage::Writing | Stage::Bdev | Stage::Sending => {
                if let Some(w) = w
                    && r.waiters.try_push(w).is_ok()
                    && let Some(x) = self.waiters.get_mut(w as usize)
                {
                    x.remaining += 1;
                }
                true
            }
            Stage::Admit | Stage::Core | Stage::Fetch | Stage::Respond => {
                if r.sq_wrs > 0 || answer {
                    // Posted work (a failed response) still out, or TASK ABORTED to send:
                    // wait for it.
                    if let Some(w) = w
                        && r.waiters.try_push(w).is_ok()
                        && let Some(x) = self.waiters.get_mut(w as usize)
                    {
                        x.remaining += 1;
                    }
                    if r.sq_wrs == 0 {
                        self.answer_task_aborted_now(core, key, slot);
                    }
                    return true;
                }
                self.finish(core, key, slot, false);
                false
            }
            Stage::TmWait | Stage::Dormant => {
                self.finish(core, key, slot, false);
                false
            }
        }
    }

    /// The channel is closing: abort everything it has outstanding.
    pub(super) fn abort_channel(&mut self, core: &mut PgCore, key: u16) {
        self.drop_slot_waiters(key);
        let n = self.chans.get(key as usize).map_or(0, |c| c.reqs.len());
        for slot in 0..n as u16 {
            let busy = self
                .chans
                .get(key as usize)
                .and_then(|c| c.reqs.get(slot as usize))
                .is_some_and(|r| r.stage != Stage::Free);
            if busy {
                self.abort_req(core, key, slot, None, false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::round;

    #[test]
    fn transfers_go_whole_when_they_fit_and_in_rounds_when_they_never_can() {
        // Fits the budget of 12: all or nothing (8 READs; 8 WRITEs and the response).
        assert_eq!(round(0, 12, 8, false), Some((8, true)));
        assert_eq!(round(5, 12, 8, false), None);
        assert_eq!(round(4, 12, 8, false), Some((8, true)));
        assert_eq!(round(3, 12, 8, true), Some((8, true)));
        assert_eq!(round(4, 12, 8, true), None);
        // Exactly the budget with the response.
        assert_eq!(round(0, 12, 11, true), Some((11, true)));
        // Never fits: what is free now, at least one slot; the response in a later round.
        assert_eq!(round(0, 12, 12, true), Some((12, false)));
        assert_eq!(round(0, 12, 12, false), Some((12, true)));
        assert_eq!(round(0, 12, 13, false), Some((12, false)));
        assert_eq!(round(0, 12, 100, false), Some((12, false)));
        assert_eq!(round(9, 12, 100, true), Some((3, false)));
        assert_eq!(round(12, 12, 100, true), None);
        assert_eq!(round(13, 12, 100, false), None);
        // The last round of data-in with its response fits again: it goes whole.
        assert_eq!(round(0, 12, 4, true), Some((4, true)));
        // Nothing left to write: the response alone.
        assert_eq!(round(11, 12, 0, true), Some((0, true)));
        assert_eq!(round(12, 12, 0, true), None);
    }
}
