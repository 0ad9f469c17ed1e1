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
//! follows the data's RDMA WRITEs) has completed. Nothing is freed while a work request or a
//! bdev I/O still refers to it.

use arrayvec::ArrayVec;
use fabric::{SendWr, SgeList, WcStatus, WorkCompletion};
use iobuf::IoBuf;
use target_core::bdev::{BdevIo, BdevOp, IoStatus};
use target_core::reactor::Step;
use target_core::scsi::{self, Verdict, ScsiIo, ScsiStatus, Sense};
use target_core::target::{Admission, AdmitKind, PgCore, with_transport_pg};

use super::chan::{iu_bytes, srq_bufs};
use super::lus::{LuLimits, SubLus};
use super::xfer::{self, XferError};
use super::{RecvRef, SrpPg, Waiter, kind, pack, token, untoken};
use crate::channel::Event;
use crate::nexus::NexusKey;
use crate::proto::{DataDesc, Residual, SrpCmd, SrpRsp, Tag, TmResponse, TskMgmt};
use crate::tm::{self, AbortScope, TmPlan};

/// Where a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// The slot is free.
    Free,
    /// Waiting in the poll group's admission queue (subsystem or namespace paused).
    Admit,
    /// Ready to run the SCSI logic (or waiting for a buffer for its parameter data).
    Exec,
    /// Ready to fetch data-out (or waiting for buffers / send slots).
    Fetch,
    /// RDMA READs in flight.
    Reading,
    /// A round of data-in RDMA WRITEs in flight, before the round that carries the response
    /// (a transfer larger than the send-queue budget).
    Writing,
    /// Ready to submit the next bdev operation (or waiting for buffers / a busy backend).
    Submit,
    /// A bdev operation in flight.
    Bdev,
    /// Ready to post the response (or waiting for send slots).
    Respond,
    /// Response posted; waiting for its SEND completion.
    Sending,
    /// Task management waiting for aborted tasks to be gone.
    TmWait,
}

/// One request slot.
pub(super) struct Req {
    pub stage: Stage,
    pub serial: u16,
    tm: bool,
    recv: Option<RecvRef>,
    iu_len: u32,
    tag: Tag,
    sol_not: u8,
    lun: Option<u16>,
    no_lu: bool,
    admit_kind: AdmitKind,
    admit: Option<AdmitKind>,
    out_len: u32,
    in_len: u32,
    imm: bool,
    op: Option<ScsiIo>,
    status: u8,
    sense: Option<Sense>,
    tm_code: TmResponse,
    send_in: u32,
    wanted_in: u64,
    wanted_out: u64,
    moved_out: u64,
    io: Option<Box<BdevIo>>,
    param: Option<IoBuf>,
    cursor: u64,
    ws_mode: u8,
    pub sq_wrs: u32,
    /// The transfer's next work request to post, when it goes in rounds (0: from the start).
    xfer_next: u32,
    recv_lent: bool,
    aborted: bool,
    waiting_buf: bool,
    buf_woken: bool,
    need_units: usize,
    waiters: ArrayVec<u32, 4>,
}

impl Req {
    /// A free slot with its preallocated bdev I/O.
    pub fn new() -> Self {
        let mut r = Req::blank();
        r.io = Some(Box::new(BdevIo::new(BdevOp::Flush, 0)));
        r
    }

    fn blank() -> Self {
        Req {
            stage: Stage::Free,
            serial: 0,
            tm: false,
            recv: None,
            iu_len: 0,
            tag: Tag::default(),
            sol_not: 0,
            lun: None,
            no_lu: false,
            admit_kind: AdmitKind::Mgmt,
            admit: None,
            out_len: 0,
            in_len: 0,
            imm: false,
            op: None,
            status: 0,
            sense: None,
            tm_code: TmResponse::Complete,
            send_in: 0,
            wanted_in: 0,
            wanted_out: 0,
            moved_out: 0,
            io: None,
            param: None,
            cursor: 0,
            ws_mode: 0,
            sq_wrs: 0,
            xfer_next: 0,
            recv_lent: false,
            aborted: false,
            waiting_buf: false,
            buf_woken: false,
            need_units: 0,
            waiters: ArrayVec::new(),
        }
    }

    /// Starts a new request in this slot, keeping the preallocated bdev I/O.
    fn reset(&mut self, serial: u16, recv: RecvRef, len: u32, tm: bool) {
        let io = self.io.take();
        *self = Req::blank();
        self.io = io;
        self.serial = serial;
        self.recv = Some(recv);
        self.iu_len = len;
        self.tm = tm;
        self.stage = Stage::Exec;
    }

    fn check(&mut self, sense: Sense) {
        self.status = ScsiStatus::CheckCondition as u8;
        self.sense = Some(sense);
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

/// Puts the receive-ring buffer a request lent to its I/O (immediate data: the last buffer
/// of the I/O) back into its ring slot, so that it is reposted with the request's receive.
fn return_lent_recv(ring: &mut [Option<IoBuf>], r: &mut Req) {
    if !r.recv_lent {
        return;
    }
    r.recv_lent = false;
    if let (Some(RecvRef::Ring(s)), Some(io)) = (r.recv, r.io.as_mut())
        && let Some(mut b) = io.bufs.pop()
    {
        b.reset();
        if let Some(x) = ring.get_mut(s as usize) {
            *x = Some(b);
        }
    }
}

/// Which tasks a task management request aborts, on any poll group.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AbortSpec {
    sub: u32,
    lun: u16,
    scope: SpecScope,
}

#[derive(Clone, Copy, Debug)]
enum SpecScope {
    /// The task with this tag on any channel of the nexus (SRP r16a §4.1.3: an ABORT TASK
    /// may arrive on another channel than its task).
    Task {
        nexus: NexusKey,
        tag: Tag,
    },
    Nexus(NexusKey),
    All,
}

fn units(bytes: u64, unit: u32) -> usize {
    bytes.div_ceil(u64::from(unit.max(1))) as usize
}

fn io_sense(status: IoStatus, op: &ScsiIo) -> Sense {
    match status {
        IoStatus::OutOfRange => Sense::lba_out_of_range(),
        IoStatus::Unsupported => Sense::invalid_opcode(),
        IoStatus::Miscompare => Sense::new(scsi::SenseKey::Miscompare, 0x1D, 0x00),
        IoStatus::Error(_) => match op {
            ScsiIo::Read { lba, .. } => Sense::read_error(*lba),
            ScsiIo::Write { lba, .. } => Sense::write_error(*lba),
            _ => Sense::internal_target_failure(),
        },
        _ => Sense::internal_target_failure(),
    }
}

impl SrpPg {
    fn limits(&self) -> LuLimits {
        LuLimits {
            max_io_size: self.shared.opts.max_io_size,
            io_unit_size: self.shared.opts.io_unit_size,
        }
    }

    /// The SCSI view of the channel's subsystem, built on first use.
    fn ensure_lus(&mut self, core: &PgCore, key: u16) -> Option<u32> {
        let c = self.chans.get(key as usize)?;
        let sub = c.sub_id;
        let port = c.nexus.target;
        let i = sub as usize;
        if self.lus.len() <= i {
            self.lus.resize_with(i + 1, || None);
        }
        if self.lus[i].is_none() {
            let limits = self.limits();
            self.lus[i] = Some(SubLus::build(core, sub, port, limits));
        }
        Some(sub)
    }

    fn sublus(&self, sub: u32) -> Option<&SubLus> {
        self.lus.get(sub as usize).and_then(Option::as_ref)
    }

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
        let Some(sub) = self.ensure_lus(core, key) else {
            return;
        };
        let c = &mut self.chans[key as usize];
        c.reqs[slot as usize].reset(serial, r, len, tm);
        if tm {
            c.stats.task_mgmt += 1;
        } else {
            c.stats.commands += 1;
        }
        let bytes = iu_bytes(&c.recv, c.rpad, srq_bufs(&self.devs, c.dev), r, len);
        let imm_off = c.imm_off;
        if tm {
            return self.start_tm(core, key, slot, sub);
        }
        let req = &mut c.reqs[slot as usize];
        match SrpCmd::decode(bytes, imm_off) {
            Err(e) => {
                let Some(t) = bytes.get(8..16) else {
                    tracing::warn!("SRP channel {}: runt SRP_CMD ({len} bytes) dropped", c.gid);
                    return self.finish(core, key, slot, false);
                };
                tracing::warn!("SRP channel {}: bad SRP_CMD: {e}", c.gid);
                let mut tag = [0u8; 8];
                tag.copy_from_slice(t);
                req.tag = Tag(tag);
                req.sol_not = bytes.get(1).copied().unwrap_or(0);
                req.check(Sense::invalid_field_in_command_iu());
                req.stage = Stage::Respond;
            }
            Ok(cmd) => {
                req.tag = cmd.tag;
                req.sol_not = cmd.sol_not;
                req.in_len = cmd.data_in.len();
                req.out_len = cmd.data_out.len();
                req.imm = matches!(cmd.data_out, DataDesc::Immediate(_));
                req.lun = scsi::lun::decode(cmd.lun).ok();
                let has_lu = req.lun.is_some_and(|l| {
                    self.lus[sub as usize]
                        .as_ref()
                        .is_some_and(|s| s.lu(l).is_some())
                });
                req.admit_kind = match req.lun {
                    Some(l) if has_lu => AdmitKind::Io(u32::from(l) + 1),
                    _ => AdmitKind::Mgmt,
                };
                if cmd.direction() == crate::proto::Direction::Bidirectional {
                    req.check(Sense::invalid_field_in_command_iu());
                    req.stage = Stage::Respond;
                } else {
                    return self.admit(core, key, slot);
                }
            }
        }
        self.drive(core, key, slot);
    }

    fn admit(&mut self, core: &mut PgCore, key: u16, slot: u16) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        let sub = c.sub_id;
        let r = &mut c.reqs[slot as usize];
        let t = token(key, slot, r.serial);
        match core.admit(sub, r.admit_kind, self.shared.index, t) {
            Admission::Go => {
                r.admit = Some(r.admit_kind);
                r.stage = Stage::Exec;
            }
            Admission::Queued => {
                r.stage = Stage::Admit;
                return;
            }
            Admission::InvalidNamespace => {
                // Our view is older than the poll group's: the namespace went away.
                r.no_lu = true;
                r.stage = Stage::Exec;
                if let Some(l) = self.lus.get_mut(sub as usize) {
                    *l = None;
                }
            }
            Admission::Inactive => {
                r.check(Sense::not_ready(0x00));
                r.stage = Stage::Respond;
            }
        }
        self.drive(core, key, slot);
    }

    /// A request queued by admission is replayed.
    pub(super) fn resume(&mut self, core: &mut PgCore, t: u64) {
        let (key, slot, serial) = untoken(t);
        let ok = self
            .chans
            .get(key as usize)
            .and_then(|c| c.reqs.get(slot as usize))
            .is_some_and(|r| r.serial == serial && r.stage == Stage::Admit);
        if ok {
            self.admit(core, key, slot);
        }
    }

    fn release_admit(&mut self, core: &mut PgCore, key: u16, slot: u16) {
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        if let Some(k) = c.reqs[slot as usize].admit.take() {
            core.release(c.sub_id, k);
        }
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
            if r.aborted
                && matches!(
                    stage,
                    Stage::Exec | Stage::Fetch | Stage::Submit | Stage::Respond
                )
            {
                return self.finish(core, key, slot, false);
            }
            let moved = match stage {
                Stage::Exec => self.exec(core, key, slot),
                Stage::Fetch => self.fetch(core, key, slot),
                Stage::Submit => self.submit(core, key, slot),
                Stage::Respond => self.respond(core, key, slot),
                _ => false,
            };
            if !moved {
                return;
            }
        }
    }

    /// Takes `n` data buffers into the request's I/O, or queues it for buffers.
    fn take_bufs(&mut self, key: u16, slot: u16, n: usize) -> bool {
        let c = &mut self.chans[key as usize];
        let dev = c.dev;
        let r = &mut c.reqs[slot as usize];
        let have = r.io.as_ref().map_or(0, |io| io.bufs.len());
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
        if let Some(io) = r.io.as_mut() {
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
                .is_some_and(|r| r.serial == serial && r.stage == Stage::Submit);
            if ok {
                n += 1;
                self.drive(core, key, slot);
            }
        }
        n
    }

    /// Runs the SCSI device server.
    fn exec(&mut self, core: &mut PgCore, key: u16, slot: u16) -> bool {
        let c = &self.chans[key as usize];
        let sub = c.sub_id;
        if self.sublus(sub).is_none() {
            self.ensure_lus(core, key);
        }
        let c = &mut self.chans[key as usize];
        let r = &c.reqs[slot as usize];
        let Some(rref) = r.recv else {
            return false;
        };
        let Some(lus) = self.lus.get(sub as usize).and_then(Option::as_ref) else {
            return false;
        };
        let bytes = iu_bytes(&c.recv, c.rpad, srq_bufs(&self.devs, c.dev), rref, r.iu_len);
        let Ok(cmd) = SrpCmd::decode(bytes, c.imm_off) else {
            return false;
        };
        let lu = if r.no_lu {
            None
        } else {
            r.lun.and_then(|l| lus.lu(l))
        };
        let ctx = scsi::TargetContext {
            port: &lus.port,
            luns: &lus.luns,
        };
        let cmd = scsi::Command {
            cdb: cmd.cdb,
            data_out_len: r.out_len,
        };
        let outcome = scsi::execute(lu, &ctx, &cmd, &mut self.scratch);
        let bs = lu.map_or(512, |l| l.block_size);
        let r = &mut c.reqs[slot as usize];
        match outcome {
            Verdict::Good => {
                r.status = ScsiStatus::Good as u8;
                r.stage = Stage::Respond;
            }
            Verdict::CheckCondition(s) => {
                r.check(s);
                r.stage = Stage::Respond;
            }
            Verdict::DataIn { len } => {
                let n = len.min(r.in_len);
                r.wanted_in = u64::from(len);
                r.status = ScsiStatus::Good as u8;
                if n > 0 {
                    let unit = self.shared.opts.io_unit_size;
                    if !self.take_bufs(key, slot, units(u64::from(n), unit)) {
                        return false;
                    }
                    let r = &mut self.chans[key as usize].reqs[slot as usize];
                    let mut done = 0usize;
                    if let Some(io) = r.io.as_mut() {
                        for b in io.bufs.iter_mut() {
                            let k = (n as usize - done).min(b.capacity());
                            b.reset();
                            b.as_mut_slice()[..k].copy_from_slice(&self.scratch[done..done + k]);
                            done += k;
                        }
                    }
                    r.send_in = n;
                }
                let r = &mut self.chans[key as usize].reqs[slot as usize];
                r.stage = Stage::Respond;
            }
            Verdict::Io(op) => {
                r.op = Some(op);
                r.wanted_in = op.data_in_len(bs);
                r.wanted_out = op.data_out_len(bs);
                r.stage = if r.wanted_out > 0 {
                    Stage::Fetch
                } else {
                    Stage::Submit
                };
                return true;
            }
        }
        self.release_admit(core, key, slot);
        true
    }

    /// Brings data-out in: from the IU (immediate data) or by RDMA READ.
    fn fetch(&mut self, core: &mut PgCore, key: u16, slot: u16) -> bool {
        let unit = self.shared.opts.io_unit_size;
        let c = &mut self.chans[key as usize];
        let r = &mut c.reqs[slot as usize];
        let (Some(op), Some(rref)) = (r.op, r.recv) else {
            return false;
        };
        let is_write = matches!(op, ScsiIo::Write { .. });
        // Parameter data (UNMAP list, WRITE SAME pattern) goes to one buffer.
        let bytes = if is_write {
            r.wanted_out
        } else {
            r.wanted_out.min(u64::from(unit))
        };
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
                if let Some(io) = r.io.as_mut() {
                    let _ = io.bufs.try_push(b);
                }
                r.recv_lent = true;
                r.moved_out = bytes;
                r.stage = Stage::Submit;
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
            if let Some(mut b) = r.io.as_mut().and_then(|io| io.bufs.pop()) {
                b.reset();
                let n = (bytes as usize).min(data.len().saturating_sub(off));
                b.as_mut_slice()[..n].copy_from_slice(&data[off..off + n]);
                r.param = Some(b);
            }
            r.moved_out = bytes;
            r.stage = Stage::Submit;
            return true;
        }
        if !self.take_bufs(key, slot, units(bytes, unit)) {
            return false;
        }
        let c = &mut self.chans[key as usize];
        let lkey = self.devs[c.dev].data_mr.lkey();
        let r = &c.reqs[slot as usize];
        let data = iu_bytes(&c.recv, c.rpad, srq_bufs(&self.devs, c.dev), rref, r.iu_len);
        let Ok(cmd) = SrpCmd::decode(data, c.imm_off) else {
            return false;
        };
        self.wrs.clear();
        let local = r.io.as_ref().map_or(&[][..], |io| io.bufs.as_slice());
        let built = xfer::segments(&cmd.data_out).and_then(|segs| {
            xfer::build(
                &mut self.wrs,
                true,
                pack(kind::REQ, key, slot, r.serial),
                xfer::Local {
                    bufs: local,
                    lkey,
                    max_sge: c.max_sge,
                },
                segs,
                bytes as u32,
            )
        });
        match built {
            Err(e) => {
                let r = &mut c.reqs[slot as usize];
                tracing::warn!("SRP channel {}: data-out descriptors refused: {e:?}", c.gid);
                r.check(Sense::invalid_field_in_command_iu());
                r.stage = Stage::Respond;
                self.release_admit(core, key, slot);
                true
            }
            Ok(n) => {
                let start = c.reqs[slot as usize].xfer_next as usize;
                let Some((k, _)) = round(c.sq_used, c.sq_budget(), n - start, false) else {
                    let serial = c.reqs[slot as usize].serial;
                    c.sq_wait.push_back((slot, serial));
                    return false;
                };
                self.wrs.truncate(start + k);
                self.wrs.drain(..start);
                if let Some(w) = self.wrs.last_mut() {
                    w.signaled = true;
                }
                let r = &mut c.reqs[slot as usize];
                r.stage = Stage::Reading;
                if start == 0 {
                    r.moved_out = bytes;
                    c.stats.write_bytes += bytes;
                }
                r.xfer_next = if start + k < n { (start + k) as u32 } else { 0 };
                self.post(core, key, slot, k as u32);
                false
            }
        }
    }

    /// Queues `self.wrs` for a request (`n` work requests) on its channel's batch, accounting
    /// send slots; [`SrpPg::flush_sends`] posts the batch at the end of the poll.
    fn post(&mut self, core: &mut PgCore, key: u16, slot: u16, n: u32) {
        let c = &mut self.chans[key as usize];
        if c.qp.is_none() {
            tracing::warn!("SRP channel {}: no queue pair to post on", c.gid);
            let r = &mut c.reqs[slot as usize];
            r.aborted = true;
            let out = c.sm.handle(Event::CompletionError);
            self.run(core, key, out);
            self.maybe_finish_aborted(core, key, slot);
            return;
        }
        c.send_batch.extend_from_slice(&self.wrs);
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

    /// Starts the next bdev operation.
    fn submit(&mut self, core: &mut PgCore, key: u16, slot: u16) -> bool {
        let opts_unit = self.shared.opts.io_unit_size;
        let max_io = u64::from(self.shared.opts.max_io_size);
        let c = &self.chans[key as usize];
        let sub = c.sub_id;
        let r = &c.reqs[slot as usize];
        let (Some(op), Some(lun)) = (r.op, r.lun) else {
            return false;
        };
        let Some(info) = facts(self.sublus(sub).and_then(|l| l.info(lun))) else {
            let r = &mut self.chans[key as usize].reqs[slot as usize];
            r.check(Sense::lun_not_supported());
            r.stage = Stage::Respond;
            self.release_admit(core, key, slot);
            return true;
        };
        let bs = u64::from(info.block_size);
        let bdev_op = match op {
            ScsiIo::Read { lba, blocks, .. } => {
                if !self.take_bufs(key, slot, units(u64::from(blocks) * bs, opts_unit)) {
                    return false;
                }
                BdevOp::Read {
                    offset_blocks: lba,
                    num_blocks: u64::from(blocks),
                }
            }
            ScsiIo::Write { lba, blocks, fua } => BdevOp::Write {
                offset_blocks: lba,
                num_blocks: u64::from(blocks),
                fua,
            },
            ScsiIo::Flush { .. } => {
                if !info.write_cache {
                    return self.good(core, key, slot);
                }
                BdevOp::Flush
            }
            ScsiIo::Unmap { param_len } => {
                let r = &self.chans[key as usize].reqs[slot as usize];
                let Some(lu) = self.sublus(sub).and_then(|l| l.lu(lun)) else {
                    return false;
                };
                let params = r.param.as_ref().map_or(&[][..], |b| {
                    let n = (param_len as usize).min(b.capacity());
                    &b.as_slice()[..n]
                });
                match scsi::parse_unmap(lu, params) {
                    Err(s) => {
                        let r = &mut self.chans[key as usize].reqs[slot as usize];
                        r.check(s);
                        r.stage = Stage::Respond;
                        self.release_admit(core, key, slot);
                        return true;
                    }
                    Ok(mut ranges) => match ranges.nth(r.cursor as usize) {
                        None => return self.good(core, key, slot),
                        Some(range) => BdevOp::Unmap {
                            offset_blocks: range.lba,
                            num_blocks: u64::from(range.blocks),
                        },
                    },
                }
            }
            ScsiIo::WriteSame {
                lba,
                blocks,
                unmap,
                ndob,
            } => {
                let r = &mut self.chans[key as usize].reqs[slot as usize];
                if r.ws_mode == 0 {
                    let zero = ndob
                        || r.param.as_ref().is_none_or(|b| {
                            b.as_slice()[..(bs as usize).min(b.capacity())]
                                .iter()
                                .all(|&x| x == 0)
                        });
                    r.ws_mode = if zero && unmap && info.unmap {
                        1
                    } else if zero && info.write_zeroes {
                        2
                    } else {
                        3
                    };
                }
                match r.ws_mode {
                    1 => BdevOp::Unmap {
                        offset_blocks: lba,
                        num_blocks: u64::from(blocks),
                    },
                    2 => BdevOp::WriteZeroes {
                        offset_blocks: lba,
                        num_blocks: u64::from(blocks),
                    },
                    _ => {
                        let left = u64::from(blocks) - r.cursor;
                        let chunk = left.min(max_io / bs).max(1);
                        let need = units(chunk * bs, opts_unit);
                        let first = r.io.as_ref().is_some_and(|io| io.bufs.is_empty());
                        if !self.take_bufs(key, slot, need) {
                            return false;
                        }
                        let r = &mut self.chans[key as usize].reqs[slot as usize];
                        if first {
                            let pat: &[u8] = r
                                .param
                                .as_ref()
                                .map_or(&[], |b| &b.as_slice()[..(bs as usize).min(b.capacity())]);
                            if let Some(io) = r.io.as_mut() {
                                for b in io.bufs.iter_mut() {
                                    b.reset();
                                    for blk in b.as_mut_slice().chunks_mut(bs as usize) {
                                        if pat.len() == blk.len() {
                                            blk.copy_from_slice(pat);
                                        } else {
                                            blk.fill(0);
                                        }
                                    }
                                }
                            }
                        }
                        BdevOp::Write {
                            offset_blocks: lba + r.cursor,
                            num_blocks: chunk,
                            fua: false,
                        }
                    }
                }
            }
        };
        let c = &mut self.chans[key as usize];
        let r = &mut c.reqs[slot as usize];
        let Some(mut io) = r.io.take() else {
            return false;
        };
        io.op = bdev_op;
        io.tag = token(key, slot, r.serial);
        io.status = IoStatus::Pending;
        let nsid = u32::from(lun) + 1;
        match core.submit_io(sub, nsid, self.shared.index, io) {
            Ok(()) => {
                r.stage = Stage::Bdev;
                false
            }
            Err(io) => {
                r.io = Some(io);
                if core.namespace(sub, nsid).is_none() {
                    r.check(Sense::lun_not_supported());
                    r.stage = Stage::Respond;
                    self.release_admit(core, key, slot);
                    return true;
                }
                let t = token(key, slot, r.serial);
                self.bdev_retry.push_back(t);
                false
            }
        }
    }

    fn good(&mut self, core: &mut PgCore, key: u16, slot: u16) -> bool {
        let r = &mut self.chans[key as usize].reqs[slot as usize];
        r.status = ScsiStatus::Good as u8;
        r.stage = Stage::Respond;
        self.release_admit(core, key, slot);
        true
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
        let status = io.status;
        let done_op = io.op;
        r.io = Some(io);
        // Immediate data: the receive buffer comes home.
        return_lent_recv(&mut c.recv, r);
        let Some(op) = r.op else {
            return;
        };
        if r.aborted {
            r.stage = Stage::Submit;
            self.release_admit(core, key, slot);
            return self.finish(core, key, slot, false);
        }
        if status != IoStatus::Success {
            tracing::warn!(
                "SRP channel {}: bdev {:?} failed: {status:?}",
                c.gid,
                done_op
            );
            r.check(io_sense(status, &op));
            r.stage = Stage::Respond;
            self.release_admit(core, key, slot);
            return self.drive(core, key, slot);
        }
        match op {
            ScsiIo::Read { .. } => {
                r.send_in = (r.wanted_in.min(u64::from(r.in_len))) as u32;
                r.status = ScsiStatus::Good as u8;
                r.stage = Stage::Respond;
                c.stats.read_bytes += u64::from(r.send_in);
                self.release_admit(core, key, slot);
            }
            ScsiIo::Unmap { .. } => {
                r.cursor += 1;
                r.stage = Stage::Submit;
            }
            ScsiIo::WriteSame { blocks, .. } => {
                if r.ws_mode == 3 {
                    if let BdevOp::Write { num_blocks, .. } = done_op {
                        r.cursor += num_blocks;
                    }
                    if r.cursor < u64::from(blocks) {
                        r.stage = Stage::Submit;
                        return self.drive(core, key, slot);
                    }
                }
                r.status = ScsiStatus::Good as u8;
                r.stage = Stage::Respond;
                self.release_admit(core, key, slot);
            }
            ScsiIo::Write { .. } | ScsiIo::Flush { .. } => {
                r.status = ScsiStatus::Good as u8;
                r.stage = Stage::Respond;
                self.release_admit(core, key, slot);
            }
        }
        self.drive(core, key, slot);
    }

    /// Posts the data-in RDMA WRITEs (if any) and the SRP_RSP.
    fn respond(&mut self, core: &mut PgCore, key: u16, slot: u16) -> bool {
        let c = &mut self.chans[key as usize];
        let lkey = self.devs[c.dev].data_mr.lkey();
        let serial = c.reqs[slot as usize].serial;
        let wr_id = pack(kind::REQ, key, slot, serial);
        self.wrs.clear();
        let r = &c.reqs[slot as usize];
        if r.send_in > 0 {
            let built = match r.recv {
                Some(rref) => {
                    let data =
                        iu_bytes(&c.recv, c.rpad, srq_bufs(&self.devs, c.dev), rref, r.iu_len);
                    match SrpCmd::decode(data, c.imm_off) {
                        Ok(cmd) => xfer::segments(&cmd.data_in).and_then(|segs| {
                            xfer::build(
                                &mut self.wrs,
                                false,
                                wr_id,
                                xfer::Local {
                                    bufs: r.io.as_ref().map_or(&[][..], |io| io.bufs.as_slice()),
                                    lkey,
                                    max_sge: c.max_sge,
                                },
                                segs,
                                r.send_in,
                            )
                        }),
                        Err(_) => Err(XferError::ShortDescriptors),
                    }
                }
                None => Err(XferError::ShortDescriptors),
            };
            if let Err(e) = built {
                tracing::warn!("SRP channel {}: data-in descriptors refused: {e:?}", c.gid);
                let r = &mut c.reqs[slot as usize];
                r.send_in = 0;
                r.check(Sense::invalid_field_in_command_iu());
            }
        }
        // Data-in already written in earlier rounds, and what this round may post.
        let start = (c.reqs[slot as usize].xfer_next as usize).min(self.wrs.len());
        let left = self.wrs.len() - start;
        let Some((k, last)) = round(c.sq_used, c.sq_budget(), left, true) else {
            c.sq_wait.push_back((slot, serial));
            return false;
        };
        self.wrs.truncate(start + k);
        self.wrs.drain(..start);
        if !last {
            // A round of data-in only; the response follows with the last one.
            if let Some(w) = self.wrs.last_mut() {
                w.signaled = true;
            }
            let r = &mut c.reqs[slot as usize];
            r.stage = Stage::Writing;
            r.xfer_next = (start + k) as u32;
            self.post(core, key, slot, k as u32);
            return false;
        }
        c.reqs[slot as usize].xfer_next = 0;
        let n = k as u32 + 1;
        // The response.
        let r = &c.reqs[slot as usize];
        let delta = c.sm.credits_mut().response_delta();
        let tm_data = SrpRsp::tm_response_data(r.tm_code);
        let sense = r.sense.map(|s| s.to_fixed());
        let rsp = if r.tm {
            SrpRsp::task_mgmt(r.tag, delta, &tm_data)
        } else {
            let ok = r.status == ScsiStatus::Good as u8;
            let din = if ok {
                Residual::compute(r.in_len, r.wanted_in)
            } else {
                Residual::compute(r.in_len, u64::from(r.send_in))
            };
            let dout = if ok {
                Residual::compute(r.out_len, r.wanted_out)
            } else {
                Residual::compute(r.out_len, r.moved_out)
            };
            SrpRsp {
                solnt: crate::proto::rsp::solicited(r.sol_not, ok),
                data_out: dout,
                data_in: din,
                ..SrpRsp::scsi(
                    r.tag,
                    delta,
                    r.status,
                    sense.as_ref().map_or(&[], |s| &s[..]),
                )
            }
        };
        let solicited = rsp.solnt;
        let buf = &mut c.send_bufs[slot as usize];
        let len = match rsp.encode(buf.as_mut_slice(), c.max_ti) {
            Ok(n) => n,
            Err(e) => {
                tracing::error!("SRP channel {}: cannot encode SRP_RSP: {e}", c.gid);
                0
            }
        };
        let mut send = SendWr::send(
            wr_id,
            SgeList::one(c.send_mr.sge(buf.base_addr(), len as u32)),
        );
        send.solicited = solicited;
        self.wrs.push(send);
        c.reqs[slot as usize].stage = Stage::Sending;
        // Repost the receive buffer before the response hands the credit back (a write
        // answered before its immediate data reached the bdev still holds it in its I/O).
        return_lent_recv(&mut c.recv, &mut c.reqs[slot as usize]);
        if let Some(rref) = c.reqs[slot as usize].recv.take() {
            self.recycle_recv(key, rref);
        }
        self.post(core, key, slot, n);
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
                    if !matches!(r.op, Some(ScsiIo::Write { .. })) {
                        r.param = r.io.as_mut().and_then(|io| io.bufs.pop());
                    }
                    r.stage = Stage::Submit;
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
        if let Some(r) = self
            .chans
            .get_mut(key as usize)
            .and_then(|c| c.reqs.get_mut(slot as usize))
            && responded
            && r.sq_wrs == 0
        {
            // The response was posted (its credit is spent) but never arrived.
            r.stage = Stage::Submit;
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
                Stage::Reading | Stage::Writing | Stage::Submit | Stage::Sending
            )
        {
            let responded = r.stage == Stage::Sending;
            self.finish(core, key, slot, responded);
        }
    }

    /// Frees a request slot and everything it holds.
    pub(super) fn finish(&mut self, core: &mut PgCore, key: u16, slot: u16, responded: bool) {
        self.release_admit(core, key, slot);
        let Some(c) = self.chans.get_mut(key as usize) else {
            return;
        };
        let dev = c.dev;
        let r = &mut c.reqs[slot as usize];
        if r.stage == Stage::Free {
            return;
        }
        debug_assert!(r.stage != Stage::Bdev && r.sq_wrs == 0);
        if r.aborted && !responded {
            c.stats.aborted += 1;
        }
        // A ring buffer lent for immediate data goes back to its ring, never to the pool.
        return_lent_recv(&mut c.recv, r);
        let d = &mut self.devs[dev];
        if let Some(io) = r.io.as_mut() {
            for mut b in io.bufs.drain(..) {
                b.reset();
                d.data_free.push(b);
            }
        }
        if let Some(mut b) = r.param.take() {
            b.reset();
            d.data_free.push(b);
        }
        r.stage = Stage::Free;
        r.waiting_buf = false;
        let rref = r.recv.take();
        let waiters: ArrayVec<u32, 4> = r.waiters.drain(..).collect();
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
        self.slot_freed(core, key);
        self.run(core, key, out);
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
        let exists = lun.is_some_and(|l| self.sublus(sub).is_some_and(|s| s.lu(l).is_some()));
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
            TmPlan::Abort { scope, .. } => {
                let spec = AbortSpec {
                    sub,
                    lun: lun.unwrap_or(0),
                    scope: match scope {
                        AbortScope::Task(tag) => SpecScope::Task { nexus, tag },
                        AbortScope::NexusOnLun => SpecScope::Nexus(nexus),
                        AbortScope::AllOnLun => SpecScope::All,
                    },
                };
                r.stage = Stage::TmWait;
                r.tm_code = TmResponse::Complete;
                let serial = r.serial;
                self.abort_everywhere(spec, key, slot, serial);
            }
        }
    }

    /// Aborts matching tasks on every poll group, then answers the task management request
    /// `(key, slot, serial)` on this one. Two rounds over the poll groups: the first marks the
    /// tasks aborted everywhere (so none of them answers any more), the second waits on each
    /// poll group until its aborted tasks are gone.
    fn abort_everywhere(&mut self, spec: AbortSpec, key: u16, slot: u16, serial: u16) {
        let index = self.shared.index;
        self.abort_seq += 1;
        let id = (self.index as u64) << 48 | self.abort_seq;
        let reactors = self.shared.reactors.clone();
        let sent = self.shared.reactors.for_each_reactor_async::<()>(
            move |rctx, step| {
                with_transport_pg::<SrpPg, _>(rctx, index, |pg, core| {
                    pg.abort_mark(core, spec, id)
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

    /// First round of a cross-poll-group abort: mark the tasks here.
    fn abort_mark(&mut self, core: &mut PgCore, spec: AbortSpec, id: u64) {
        let w = self.waiters.insert(Waiter {
            remaining: 0,
            armed: false,
            done: None,
            abort_id: id,
        }) as u32;
        self.aborts.insert(id, w);
        self.abort_matching(core, spec, w);
        self.waiter_arm(w);
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
    }

    fn tm_finished(&mut self, core: &mut PgCore, key: u16, slot: u16, serial: u16) {
        let ok = self
            .chans
            .get_mut(key as usize)
            .and_then(|c| c.reqs.get_mut(slot as usize))
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
        let mut todo: Vec<(u16, u16)> = Vec::new();
        for (k, c) in self.chans.iter() {
            if c.sub_id != spec.sub {
                continue;
            }
            let chan_ok = match spec.scope {
                SpecScope::Task { nexus, .. } | SpecScope::Nexus(nexus) => c.nexus == nexus,
                SpecScope::All => true,
            };
            if !chan_ok {
                continue;
            }
            for (i, r) in c.reqs.iter().enumerate() {
                if r.stage == Stage::Free || r.tm || r.lun != Some(spec.lun) {
                    continue;
                }
                if let SpecScope::Task { tag, .. } = spec.scope
                    && r.tag != tag
                {
                    continue;
                }
                todo.push((k as u16, i as u16));
            }
        }
        let mut in_flight = 0;
        for &(k, i) in &todo {
            if self.abort_req(core, k, i, Some(w)) {
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

    /// Aborts one request: no more data transfer, no response. Returns whether it is still in
    /// flight (a waiter given is then told when it is gone).
    fn abort_req(&mut self, core: &mut PgCore, key: u16, slot: u16, w: Option<u32>) -> bool {
        let Some(r) = self
            .chans
            .get_mut(key as usize)
            .and_then(|c| c.reqs.get_mut(slot as usize))
        else {
            return false;
        };
        r.aborted = true;
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
            Stage::Admit | Stage::Exec | Stage::Fetch | Stage::Submit | Stage::Respond => {
                if r.sq_wrs > 0 {
                    // Posted work (a failed response) still out: wait for it.
                    if let Some(w) = w
                        && r.waiters.try_push(w).is_ok()
                        && let Some(x) = self.waiters.get_mut(w as usize)
                    {
                        x.remaining += 1;
                    }
                    return true;
                }
                self.finish(core, key, slot, false);
                false
            }
            Stage::TmWait => {
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
                self.abort_req(core, key, slot, None);
            }
        }
    }
}

/// The namespace facts `submit` needs, copied out of the cache (no allocation).
#[derive(Clone, Copy)]
struct Facts {
    block_size: u32,
    write_cache: bool,
    unmap: bool,
    write_zeroes: bool,
}

fn facts(n: Option<&target_core::target::NsInfo>) -> Option<Facts> {
    n.map(|n| Facts {
        block_size: n.block_size,
        write_cache: n.write_cache,
        unmap: n.unmap,
        write_zeroes: n.write_zeroes,
    })
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
