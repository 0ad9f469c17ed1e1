//! Requests on a poll group: a received command meets a free request slot, and
//! [`RdmaPg::drive`] moves it through its [`lifecycle`] — the one place a request's state
//! changes — carrying out what each transition asks: running the exec layer, taking data
//! buffers, queueing it for send-queue room, planning and posting its RDMA READs, its
//! RDMA WRITEs and its response SEND, freeing it. Completions (receives, SENDs, READs, the
//! bdev) come here as events.

pub(crate) mod lifecycle;

use fabric::{SendWr, Sge, SgeList, WcStatus, WorkCompletion};
use rdma_plumbing::WrId;
use rdma_plumbing::transfer::{self, RemoteSegment};
use target_core::bdev::BdevIo;
use target_core::nvme::sgl::DataSgl;
use target_core::nvme::spec::{CQE_SIZE, SQE_SIZE};
use target_core::nvme::{Direction, KeyedSgl, Sqe, Status};
use target_core::nvme_exec::{self, AerDone, NvmeAction, NvmeCtx};
use target_core::target::PgCore;

use crate::opts::{LARGE_BUF_SIZE, SMALL_BUF_SIZE};
use crate::poll_group::RdmaPg;
use crate::qpair::lifecycle::Event as QpEvent;
use crate::resources::{Data, NONE, Owner, Recv, Req, kind};
use lifecycle::{Act, Event, Exec, Fetch, Start, State, WaitQueue};

/// The keyed segments of a decoded SGL (empty for other kinds), as the planner takes them.
fn remote(sgl: &DataSgl) -> impl Iterator<Item = RemoteSegment> + Clone + '_ {
    let keyed: &[KeyedSgl] = match sgl {
        DataSgl::Keyed(k) => std::slice::from_ref(k),
        DataSgl::KeyedList(l) => l.as_slice(),
        _ => &[],
    };
    keyed.iter().map(|k| RemoteSegment {
        addr: k.addr,
        len: k.len,
        rkey: k.key,
    })
}

/// How many RDMA READs or WRITEs move `total` bytes of a request (`None`: they cannot be
/// planned, or too many). Inlined: the usual case is a comparison.
#[inline]
fn count(r: &Req, total: u32, max_sge: usize) -> Option<u16> {
    let bufs = r.ex.io.as_ref()?.bufs.as_slice();
    transfer::count(remote(&r.ex.sgl), bufs, total, max_sge)
        .ok()
        .and_then(|n| u16::try_from(n).ok())
}

/// Keeps receive `rv`'s work request in its shared receive queue slot again (its in-capsule
/// buffer changed), or in a new slot if it had none.
#[cold]
fn rekeep(srq: &mut rdma_plumbing::SharedRecvQueue, rv: u32, recv: &mut Recv) {
    let Some(wr) = recv.wr(rv, 0) else {
        return;
    };
    if !srq.set_slot(recv.srq_slot, wr) {
        recv.srq_slot = srq.add_slot(wr);
    }
}

/// Logs an event a request's lifecycle refused (a bug, or a stale completion).
#[cold]
fn refused(rk: u32, e: lifecycle::Invalid) {
    tracing::error!(rk, state = ?e.state, event = ?e.event, "request event refused");
}

impl RdmaPg {
    /// Moves request `rk` on with `event` until it waits for something: the one place a
    /// request's state changes (SPDK's `nvmf_rdma_request_process`). Inlined: callers pass a
    /// known event, so the transition folds to a check of the state; only what is more than
    /// a wait goes to [`Self::carry_out`].
    #[inline(always)]
    pub(crate) fn drive(&mut self, core: &mut PgCore, rk: u32, event: Event) {
        let Some(r) = self.reqs.get_mut(rk as usize) else {
            return;
        };
        match r.life.on(event) {
            Ok(Act::Wait) => {}
            // A SEND completion's usual answer: no loop to enter.
            Ok(Act::Free) => self.free_request(core, rk),
            Ok(act) => self.carry_out(core, rk, act),
            Err(e) => refused(rk, e),
        }
    }

    /// Carries out `act` for request `rk`, and what the transitions its answers make ask
    /// for, until the request waits.
    fn carry_out(&mut self, core: &mut PgCore, rk: u32, act: Act) {
        let mut act = act;
        loop {
            let event = match act {
                Act::Wait => return,
                Act::Execute => self.execute(core, rk),
                Act::FinishIo => self.finish_io(core, rk),
                Act::Resubmit => self.resubmit(core, rk),
                Act::TakeBuffers => {
                    if !self.pending_buf.is_empty() {
                        // Others wait already: in order.
                        self.pending_buf.push_back(rk);
                        return;
                    }
                    match self.take_buffers(rk) {
                        Some(f) => Event::Buffers(f),
                        None => {
                            self.pending_buf.push_back(rk);
                            self.pending_data_buffer += 1;
                            return;
                        }
                    }
                }
                Act::PlanResponse => Event::Planned {
                    writes: self.plan_response(rk),
                },
                Act::Enqueue(q) => {
                    // A response nothing waits ahead of, with send-queue room, is posted now
                    // (as the queue's replay would post it at the end of the poll).
                    if !self.post_now(core, rk, q) {
                        self.enqueue(rk, q);
                    }
                    return;
                }
                Act::Leave { queue, free } => {
                    self.leave(rk, queue);
                    if free {
                        self.free_request(core, rk);
                    }
                    return;
                }
                Act::Free => {
                    self.free_request(core, rk);
                    return;
                }
            };
            let Some(r) = self.reqs.get_mut(rk as usize) else {
                return;
            };
            act = match r.life.on(event) {
                Ok(a) => a,
                Err(e) => return refused(rk, e),
            };
        }
    }

    /// Posts the response of `rk`, which is to wait in `q`, at once if `q` is a response
    /// queue with nobody in it (nor RDMA READs waiting, for data to the host) and the send
    /// queue has room for the chain; returns whether it did (SPDK posts a completing request
    /// at once when it heads its queue).
    #[inline]
    fn post_now(&mut self, core: &mut PgCore, rk: u32, q: WaitQueue) -> bool {
        let r = &self.reqs[rk as usize];
        let qk = r.qp;
        let need = u32::from(r.writes) + 1;
        let Some(qp) = self.qpairs.get(qk as usize) else {
            return false;
        };
        let idle = match q {
            WaitQueue::Sends => qp.pending_send.is_empty(),
            // The replay serves RDMA READs before data to the host: none may wait.
            WaitQueue::Writes => qp.pending_write.is_empty() && qp.pending_read.is_empty(),
            _ => false,
        };
        idle && qp.sq_cap.saturating_sub(qp.sq_used) >= need && self.post_response(core, qk, rk)
    }

    fn enqueue(&mut self, rk: u32, q: WaitQueue) {
        let qk = self.reqs[rk as usize].qp;
        match q {
            WaitQueue::Buffers => self.pending_buf.push_back(rk),
            WaitQueue::BdevRetry => self.bdev_retry.push_back(rk),
            WaitQueue::Reads | WaitQueue::Writes | WaitQueue::Sends | WaitQueue::Parked => {
                let Some(qp) = self.qpairs.get_mut(qk as usize) else {
                    return;
                };
                match q {
                    WaitQueue::Reads => qp.pending_read.push_back(rk),
                    WaitQueue::Writes => qp.pending_write.push_back(rk),
                    WaitQueue::Sends => qp.pending_send.push_back(rk),
                    _ => qp.parked.push(rk),
                }
            }
        }
    }

    fn leave(&mut self, rk: u32, q: WaitQueue) {
        let qk = self.reqs[rk as usize].qp;
        match q {
            WaitQueue::Buffers => self.pending_buf.retain(|&k| k != rk),
            WaitQueue::BdevRetry => self.bdev_retry.retain(|&k| k != rk),
            WaitQueue::Reads | WaitQueue::Writes | WaitQueue::Sends | WaitQueue::Parked => {
                let Some(qp) = self.qpairs.get_mut(qk as usize) else {
                    return;
                };
                match q {
                    WaitQueue::Reads => qp.pending_read.retain(|&k| k != rk),
                    WaitQueue::Writes => qp.pending_write.retain(|&k| k != rk),
                    WaitQueue::Sends => qp.pending_send.retain(|&k| k != rk),
                    _ => qp.parked.retain(|&k| k != rk),
                }
            }
        }
    }

    /// Runs the command through the exec layer.
    fn execute(&mut self, core: &mut PgCore, rk: u32) -> Event {
        let Self {
            reqs, qpairs, sh, ..
        } = self;
        let r = &mut reqs[rk as usize];
        let qk = r.qp;
        let qp = &mut qpairs[qk as usize];
        let mut cx = NvmeCtx::new(core, &sh.info, self.now);
        let out = nvme_exec::execute(&mut cx, &mut qp.q, &mut r.ex);
        if !cx.aer_done.is_empty() {
            let aers = std::mem::take(&mut cx.aer_done);
            for a in aers {
                self.complete_parked(core, qk, a);
            }
        }
        self.answer(rk, out)
    }

    /// The exec layer's answer as the request's next event; a finished command has its
    /// response planned here, so it goes straight to the queue it posts from.
    fn answer(&mut self, rk: u32, out: NvmeAction) -> Event {
        Event::Exec(match out {
            NvmeAction::Complete => Exec::Complete {
                writes: self.plan_response(rk),
            },
            NvmeAction::Submitted => Exec::Submitted,
            NvmeAction::Queued => Exec::Queued,
            NvmeAction::Parked => Exec::Parked,
            NvmeAction::Busy => Exec::Busy,
        })
    }

    /// Finishes the bdev I/O that came back (it waits in the request's exec state).
    fn finish_io(&mut self, core: &mut PgCore, rk: u32) -> Event {
        let Self {
            reqs, qpairs, sh, ..
        } = self;
        let r = &mut reqs[rk as usize];
        let qp = &mut qpairs[r.qp as usize];
        let Some(io) = r.ex.io.take() else {
            return self.answer(rk, NvmeAction::Complete);
        };
        let mut cx = NvmeCtx::new(core, &sh.info, self.now);
        let out = nvme_exec::io_done(&mut cx, &mut qp.q, &mut r.ex, io);
        self.answer(rk, out)
    }

    fn resubmit(&mut self, core: &mut PgCore, rk: u32) -> Event {
        let Self {
            reqs, qpairs, sh, ..
        } = self;
        let r = &mut reqs[rk as usize];
        let qp = &mut qpairs[r.qp as usize];
        let mut cx = NvmeCtx::new(core, &sh.info, self.now);
        let out = nvme_exec::resubmit(&mut cx, &mut qp.q, &mut r.ex);
        self.answer(rk, out)
    }

    /// A received command meets a free request.
    pub(crate) fn start(&mut self, core: &mut PgCore, rv: u32, rk: u32) {
        let (qk, len) = {
            let recv = &self.recvs[rv as usize];
            (recv.qp, recv.len)
        };
        let sqe = Sqe::from_bytes(self.recvs[rv as usize].cmd.as_slice());
        let live = self
            .qpairs
            .get(qk as usize)
            .is_some_and(|q| !q.life.is_closing());
        let (Some(sqe), true) = (sqe, live) else {
            // The queue pair is going away: give both back.
            self.unclaim(rk);
            self.repost(rv);
            return;
        };
        let icd_cap = self.sh.opts.in_capsule_data_size;
        let start = {
            let qp = &mut self.qpairs[qk as usize];
            qp.life.on(QpEvent::RequestStarted);
            if let Some(dp) = self.devs[qp.dev].as_mut() {
                dp.stats.requests += 1;
            }
            let r = &mut self.reqs[rk as usize];
            let token = Req::token(rk, r.epoch);
            r.ex.reset(token, sqe);
            r.qp = qk;
            r.recv = rv;
            r.data = Data::None;
            r.dir = Direction::None;
            r.writes = 0;
            r.send_slots = 0;
            r.started = self.now_ns;
            let recv = &mut self.recvs[rv as usize];
            let icd_len = (len as usize).saturating_sub(SQE_SIZE);
            let in_capsule: &[u8] = match recv.icd.as_ref() {
                Some(b) => &b.as_slice()[..icd_len.min(b.capacity())],
                None => &[],
            };
            match nvme_exec::begin(&self.sh.info, &mut qp.q, &mut r.ex, in_capsule, icd_cap) {
                Err(s) => {
                    r.ex.cqe = qp.q.cqe(&sqe, s);
                    r.ex.data_len = 0;
                    Start::Respond
                }
                Ok(dir) => {
                    r.dir = dir;
                    match &r.ex.sgl {
                        DataSgl::None => Start::Execute,
                        DataSgl::InCapsule { offset, len } => {
                            let (offset, len) = (*offset as usize, *len as usize);
                            match (recv.icd.take(), r.ex.io.as_mut()) {
                                (Some(mut b), Some(io)) if offset + len <= b.capacity() => {
                                    b.set_window(offset, len);
                                    io.bufs.push(b);
                                    r.data = Data::InCapsule;
                                    Start::Execute
                                }
                                (b, _) => {
                                    recv.icd = b;
                                    r.ex.cqe = qp.q.cqe(&sqe, Status::INTERNAL_ERROR);
                                    Start::Respond
                                }
                            }
                        }
                        DataSgl::Keyed(_) | DataSgl::KeyedList(_) => {
                            if dir == Direction::None {
                                Start::Execute
                            } else {
                                Start::NeedData
                            }
                        }
                        DataSgl::Transport { .. } => {
                            r.ex.cqe = qp.q.cqe(&sqe, Status::SGL_TYPE_INVALID);
                            Start::Respond
                        }
                    }
                }
            }
        };
        // Buffers taken here when nobody waits for them: the request starts with them.
        let start = match start {
            Start::NeedData if self.pending_buf.is_empty() => match self.take_buffers(rk) {
                Some(f) => Start::Fetched(f),
                None => Start::NeedData,
            },
            s => s,
        };
        self.drive(core, rk, Event::Start(start));
    }

    /// Takes data buffers for a request; `None` if the pools are dry. Plans its RDMA READs
    /// when the data comes from the host.
    pub(crate) fn take_buffers(&mut self, rk: u32) -> Option<Fetch> {
        if !self.alloc_buffers(rk) {
            return None;
        }
        let r = &mut self.reqs[rk as usize];
        if r.dir != Direction::HostToController {
            return Some(Fetch::Execute);
        }
        let qp = &self.qpairs[r.qp as usize];
        match count(r, r.ex.sgl.len(), qp.max_sge) {
            Some(n) => Some(Fetch::Reads(n)),
            None => {
                tracing::error!("cannot plan the RDMA READs of a request");
                r.ex.cqe = qp.q.cqe(&r.ex.sqe, Status::INTERNAL_ERROR);
                Some(Fetch::Unplannable)
            }
        }
    }

    fn alloc_buffers(&mut self, rk: u32) -> bool {
        let r = &mut self.reqs[rk as usize];
        let len = r.ex.sgl.len() as usize;
        let Some(io) = r.ex.io.as_mut() else {
            return false;
        };
        if len <= SMALL_BUF_SIZE {
            let Some(mut b) = self.small.get() else {
                return false;
            };
            b.set_len(len);
            io.bufs.push(b);
        } else {
            let n = len.div_ceil(LARGE_BUF_SIZE);
            for i in 0..n {
                match self.large.get() {
                    Some(mut b) if !io.bufs.is_full() => {
                        b.set_len((len - i * LARGE_BUF_SIZE).min(LARGE_BUF_SIZE));
                        io.bufs.push(b);
                    }
                    other => {
                        if let Some(b) = other {
                            self.large.put(b);
                        }
                        for b in io.bufs.drain(..) {
                            self.large.put(b);
                        }
                        return false;
                    }
                }
            }
        }
        r.data = Data::Pool;
        true
    }

    /// The request has its completion: encode it, and count the RDMA WRITEs of its data
    /// (returned).
    fn plan_response(&mut self, rk: u32) -> u16 {
        let r = &mut self.reqs[rk as usize];
        let cqe = r.ex.cqe.encode();
        r.rsp.as_mut_slice()[..CQE_SIZE].copy_from_slice(&cqe);
        let max_sge = self.qpairs[r.qp as usize].max_sge;
        if r.ex.data_len > 0 && r.dir == Direction::ControllerToHost && r.data == Data::Pool {
            if let Some(n) = count(r, r.ex.data_len, max_sge) {
                r.writes = n;
                return n;
            }
            tracing::error!("cannot plan the data transfer of a response");
            r.ex.cqe.status = Status::INTERNAL_ERROR;
            r.rsp.as_mut_slice()[..CQE_SIZE].copy_from_slice(&r.ex.cqe.encode());
        }
        r.writes = 0;
        0
    }

    /// Completes the parked AER named by `a` on queue pair `qk`.
    pub(crate) fn complete_parked(&mut self, core: &mut PgCore, qk: u32, a: AerDone) {
        let Some(qp) = self.qpairs.get_mut(qk as usize) else {
            return;
        };
        let Some(pos) = qp
            .parked
            .iter()
            .position(|&rk| self.reqs[rk as usize].ex.sqe.cid() == a.cid)
        else {
            return;
        };
        let rk = qp.parked.remove(pos);
        let r = &mut self.reqs[rk as usize];
        r.ex.cqe = a.cqe;
        r.ex.data_len = 0;
        self.drive(core, rk, Event::AerDone);
    }

    /// Posts the RDMA READs it can for the head of the read queue; returns whether any.
    pub(crate) fn pump_reads(&mut self, core: &mut PgCore, qk: u32) -> bool {
        let mut progress = false;
        loop {
            let qp = &mut self.qpairs[qk as usize];
            let Some(&rk) = qp.pending_read.front() else {
                break;
            };
            let r = &self.reqs[rk as usize];
            let left = u32::from(r.life.reads_left());
            let credits = qp.read_depth.saturating_sub(qp.reads_out);
            let slots = qp.sq_cap.saturating_sub(qp.sq_used);
            let n = left.min(credits).min(slots);
            if n == 0 {
                if let Some(dp) = self.devs[qp.dev].as_mut() {
                    dp.stats.pending_rdma_read += 1;
                }
                break;
            }
            let dev = &self.sh.devices[qp.dev];
            let from = u32::from(r.life.reads_posted());
            let to = from + n;
            let mut i = 0u32;
            let id = Req::wr_id(rk, r.epoch, kind::READ);
            if let Some(io) = r.ex.io.as_ref() {
                let batch = &mut qp.send_batch;
                let _ = transfer::plan(
                    remote(&r.ex.sgl),
                    &io.bufs,
                    r.ex.sgl.len(),
                    qp.max_sge,
                    |a| dev.pool_lkey(a),
                    |raddr, rkey, sges| {
                        if i >= from && i < to {
                            batch.push(SendWr::rdma_read(id, sges, raddr, rkey));
                        }
                        i += 1;
                    },
                );
            }
            qp.reads_out += n;
            qp.sq_used += n;
            progress = true;
            let all = n == left;
            if all {
                qp.pending_read.pop_front();
            }
            self.mark_dirty(core, qk);
            self.drive(core, rk, Event::ReadsPosted(n as u16));
            if !all {
                break;
            }
        }
        progress
    }

    /// Posts the response chain (RDMA WRITEs if any, then the SEND) for the head of a queue.
    pub(crate) fn post_response(&mut self, core: &mut PgCore, qk: u32, rk: u32) -> bool {
        let need = u32::from(self.reqs[rk as usize].writes) + 1;
        {
            let qp = &self.qpairs[qk as usize];
            if qp.sq_cap.saturating_sub(qp.sq_used) < need {
                if let Some(dp) = self.devs[qp.dev].as_mut() {
                    if need > 1 {
                        dp.stats.pending_rdma_write += 1;
                    } else {
                        dp.stats.pending_rdma_send += 1;
                    }
                }
                return false;
            }
        }
        // The receive goes back before the response, so the host's next command finds it.
        self.return_recv(rk);
        let qp = &mut self.qpairs[qk as usize];
        let r = &mut self.reqs[rk as usize];
        if r.writes > 0 {
            let dev = &self.sh.devices[qp.dev];
            let id = Req::wr_id(rk, r.epoch, kind::WRITE);
            if let Some(io) = r.ex.io.as_ref() {
                let batch = &mut qp.send_batch;
                let _ = transfer::plan(
                    remote(&r.ex.sgl),
                    &io.bufs,
                    r.ex.data_len,
                    qp.max_sge,
                    |a| dev.pool_lkey(a),
                    |raddr, rkey, sges| {
                        batch.push(SendWr::rdma_write(id, sges, raddr, rkey).with_signaled(false));
                    },
                );
            }
        }
        let sge = Sge {
            addr: r.rsp.base_addr(),
            length: CQE_SIZE as u32,
            lkey: r.rsp_lkey,
        };
        let id = Req::wr_id(rk, r.epoch, kind::SEND);
        let wr = match r.ex.sgl.invalidate_key() {
            Some(k) => SendWr::send_with_inv(id, SgeList::one(sge), k),
            None => SendWr::send(id, SgeList::one(sge)),
        };
        qp.send_batch.push(wr);
        qp.sq_used += need;
        r.send_slots = need as u16;
        self.mark_dirty(core, qk);
        self.drive(core, rk, Event::Posted);
        true
    }

    /// Reposts a receive slot (its in-capsule buffer must be home).
    pub(crate) fn repost(&mut self, rv: u32) {
        let Some(recv) = self.recvs.get_mut(rv as usize) else {
            return;
        };
        if recv.posted {
            return;
        }
        match recv.owner {
            Owner::Dev(d) => {
                let Some(icd) = recv.icd.as_ref() else {
                    tracing::error!(rv, "receive reposted without its in-capsule buffer");
                    return;
                };
                if let Some(srq) = self.devs[d].as_mut().and_then(|p| p.srq.as_mut()) {
                    // The slot's work request names the in-capsule buffer the receive had
                    // when it was kept; one that came home different is kept anew.
                    let kept = srq
                        .slot(recv.srq_slot)
                        .and_then(|w| w.sges.as_slice().get(1))
                        .map(|s| s.addr);
                    if kept != Some(icd.base_addr()) {
                        rekeep(srq, rv, recv);
                    }
                    recv.posted = true;
                    srq.push_slot(recv.srq_slot);
                }
            }
            Owner::Qp(qk) => {
                let Some(qp) = self.qpairs.get_mut(qk as usize) else {
                    return;
                };
                if qp.life.is_closing() {
                    return;
                }
                let Some(wr) = recv.wr(rv, qp.epoch) else {
                    tracing::error!(rv, "receive reposted without its in-capsule buffer");
                    return;
                };
                recv.posted = true;
                qp.recv_batch.push(wr);
                qp.life.on(QpEvent::ReceivesPosted(1));
                if !qp.dirty {
                    qp.dirty = true;
                    self.dirty.push(qk);
                }
            }
        }
    }

    /// Gives a request's receive back (with its in-capsule buffer).
    fn return_recv(&mut self, rk: u32) {
        let r = &mut self.reqs[rk as usize];
        let rv = r.recv;
        if rv == NONE {
            return;
        }
        r.recv = NONE;
        if r.data == Data::InCapsule {
            if let Some(mut b) = r.ex.io.as_mut().and_then(|io| io.bufs.pop()) {
                b.reset();
                if let Some(recv) = self.recvs.get_mut(rv as usize) {
                    recv.icd = Some(b);
                }
            }
            r.data = Data::None;
        }
        self.repost(rv);
    }

    fn return_buffers(&mut self, rk: u32) {
        let r = &mut self.reqs[rk as usize];
        if r.data != Data::Pool {
            return;
        }
        r.data = Data::None;
        if let Some(io) = r.ex.io.as_mut() {
            for b in io.bufs.drain(..) {
                if b.capacity() == SMALL_BUF_SIZE {
                    self.small.put(b);
                } else {
                    self.large.put(b);
                }
            }
        }
    }

    /// Frees a request (its lifecycle is `Free` already): gives back its admission, receive,
    /// buffers and slot; its queue pair counts it.
    fn free_request(&mut self, core: &mut PgCore, rk: u32) {
        nvme_exec::abandon(core, &mut self.reqs[rk as usize].ex);
        self.return_recv(rk);
        self.return_buffers(rk);
        let r = &mut self.reqs[rk as usize];
        debug_assert!(r.ex.io.is_some(), "request freed while its bdev I/O is out");
        debug_assert!(r.life.is_free());
        let qk = r.qp;
        r.epoch = r.epoch.wrapping_add(1);
        r.qp = NONE;
        let owner = r.owner;
        match owner {
            Owner::Dev(d) => {
                if let Some(res) = self.devs[d].as_mut().and_then(|p| p.res.as_mut()) {
                    res.free_reqs.push(rk);
                }
            }
            Owner::Qp(o) => {
                if let Some(res) = self.qpairs.get_mut(o as usize).and_then(|q| q.res.as_mut()) {
                    res.free_reqs.push(rk);
                }
            }
        }
        self.qpair_event(core, qk, QpEvent::RequestFreed);
    }

    /// Puts a request slot back on its owner's free list (it was never started).
    fn unclaim(&mut self, rk: u32) {
        let owner = self.reqs[rk as usize].owner;
        let res = match owner {
            Owner::Dev(d) => self.devs[d].as_mut().and_then(|p| p.res.as_mut()),
            Owner::Qp(o) => self.qpairs.get_mut(o as usize).and_then(|q| q.res.as_mut()),
        };
        if let Some(res) = res {
            res.free_reqs.push(rk);
        }
    }

    // ------------------------------------------------------------------ completions

    /// A bdev I/O came back.
    pub(crate) fn io_done(&mut self, core: &mut PgCore, io: Box<BdevIo>) {
        let (rk, epoch) = Req::split(io.tag);
        let ok = self.reqs.get(rk as usize).is_some_and(|r| {
            r.epoch == epoch && r.life.state() == State::Executing && r.ex.io.is_none()
        });
        if !ok {
            tracing::error!(tag = io.tag, "bdev completion for an unknown request");
            let mut io = io;
            for b in io.bufs.drain(..) {
                if b.capacity() == SMALL_BUF_SIZE {
                    self.small.put(b);
                } else if b.capacity() == LARGE_BUF_SIZE {
                    self.large.put(b);
                }
            }
            return;
        }
        self.reqs[rk as usize].ex.io = Some(io);
        self.drive(core, rk, Event::IoBack);
    }

    pub(crate) fn on_recv(&mut self, core: &mut PgCore, id: WrId, wc: &WorkCompletion) {
        let rv = id.key;
        let Some(owner) = self.recvs.get(rv as usize).map(|r| r.owner) else {
            return;
        };
        if let Owner::Qp(q) = owner
            && self
                .qpairs
                .get(q as usize)
                .is_none_or(|qp| qp.epoch != id.generation)
        {
            tracing::debug!(wr_id = wc.wr_id, "receive completion of a gone queue pair");
            return;
        }
        self.recvs[rv as usize].posted = false;
        let qk = match owner {
            Owner::Qp(q) => {
                self.qpair_event(core, q, QpEvent::ReceiveDone);
                Some(q)
            }
            Owner::Dev(d) => {
                if let Some(srq) = self.devs[d].as_mut().and_then(|p| p.srq.as_mut()) {
                    srq.completed();
                }
                self.by_qpn.get(&wc.qp_num).copied()
            }
        };
        let shared = matches!(owner, Owner::Dev(_));
        if !wc.status.is_success() {
            if let Some(q) = qk
                && wc.status != WcStatus::WrFlushErr
            {
                tracing::warn!(status = ?wc.status, "receive failed");
                self.close(core, q);
            }
            if shared {
                self.repost(rv);
            }
            return;
        }
        let live = qk.filter(|&q| {
            self.qpairs
                .get(q as usize)
                .is_some_and(|qp| !qp.life.is_closing())
        });
        let Some(q) = live else {
            if shared {
                self.repost(rv);
            }
            return;
        };
        if (wc.byte_len as usize) < SQE_SIZE {
            tracing::warn!(len = wc.byte_len, "received capsule shorter than a command");
            if shared {
                self.repost(rv);
            }
            self.close(core, q);
            return;
        }
        let recv = &mut self.recvs[rv as usize];
        recv.qp = q;
        recv.len = wc.byte_len;
        let d = self.qpairs[q as usize].dev;
        let res = match owner {
            Owner::Dev(_) => self.devs[d].as_mut().and_then(|p| p.res.as_mut()),
            Owner::Qp(_) => self.qpairs[q as usize].res.as_mut(),
        };
        let Some(res) = res else {
            return;
        };
        if res.incoming.is_empty()
            && let Some(rk) = res.free_reqs.pop()
        {
            self.start(core, rv, rk);
        } else {
            res.incoming.push_back(rv);
            if let Some(dp) = self.devs[d].as_mut() {
                dp.stats.pending_free_request += 1;
            }
        }
    }

    /// The response SEND of request `rk` on queue pair `qk` (both checked by the caller)
    /// completed.
    pub(crate) fn on_send(&mut self, core: &mut PgCore, rk: u32, qk: u32, wc: &WorkCompletion) {
        let Self {
            reqs, qpairs, devs, ..
        } = self;
        let r = &reqs[rk as usize];
        if r.life.state() != State::Completing {
            tracing::error!(rk, state = ?r.life.state(), "SEND completion for a request not completing");
            return;
        }
        let disconnect = r.ex.disconnect_after;
        let qp = &mut qpairs[qk as usize];
        qp.sq_used = qp.sq_used.saturating_sub(u32::from(r.send_slots));
        if let Some(dp) = devs[qp.dev].as_mut() {
            dp.stats.request_latency += self.now_ns.saturating_sub(r.started);
        }
        if !wc.status.is_success() && wc.status != WcStatus::WrFlushErr {
            tracing::warn!(status = ?wc.status, "response SEND failed");
            self.close(core, qk);
        }
        if disconnect {
            self.close(core, qk);
        }
        self.drive(core, rk, Event::SendDone);
    }

    /// An RDMA READ of request `rk` on queue pair `qk` (both checked by the caller)
    /// completed.
    pub(crate) fn on_read(&mut self, core: &mut PgCore, rk: u32, qk: u32, wc: &WorkCompletion) {
        let qp = &mut self.qpairs[qk as usize];
        qp.sq_used = qp.sq_used.saturating_sub(1);
        qp.reads_out = qp.reads_out.saturating_sub(1);
        if !wc.status.is_success() && wc.status != WcStatus::WrFlushErr {
            tracing::warn!(status = ?wc.status, "RDMA READ failed");
            self.close(core, qk);
        }
        self.drive(
            core,
            rk,
            Event::ReadDone {
                ok: wc.status.is_success(),
            },
        );
    }

    /// RDMA WRITEs are unsignaled: only errors arrive (the SEND after them reports too).
    pub(crate) fn on_write(&mut self, core: &mut PgCore, qk: u32, wc: &WorkCompletion) {
        if wc.status != WcStatus::WrFlushErr {
            tracing::warn!(status = ?wc.status, "RDMA WRITE failed");
            self.close(core, qk);
        }
    }
}
