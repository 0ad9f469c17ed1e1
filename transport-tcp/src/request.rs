//! Commands on a poll group: the machine's actions carried out — data buffers attached (the
//! slot's in-capsule buffer, or buffers from the shared pool), the command run through the
//! exec layer ([`nvme_exec`]), its completion handed back to the machine — and a
//! connection's teardown.
//!
//! A request's token (48 bits, the bdev I/O tag and the admission replay key) is connection
//! key (16 bits) · slot (16 bits) · a poll-group epoch (16 bits).

use std::net::Shutdown;
use std::sync::atomic::Ordering;

use target_core::bdev::BdevIo;
use target_core::nvme::fabrics::ConnectCmd;
use target_core::nvme::sgl::DataSgl;
use target_core::nvme::{Direction, Status};
use target_core::nvme_exec::{self, NvmeAction, NvmeCtx, Queue, QueueRef};
use target_core::target::PgCore;

use crate::conn::{Action, SlotId, Xfer};
use crate::poll_group::TcpPg;
use crate::qpair::{DataKind, ReqState, TcpQpair};

fn token(ck: u32, slot: SlotId, epoch: u16) -> u64 {
    (u64::from(ck & 0xFFFF) << 32) | (u64::from(slot.0) << 16) | u64::from(epoch)
}

fn split(token: u64) -> (u32, SlotId) {
    (
        ((token >> 32) & 0xFFFF) as u32,
        SlotId(((token >> 16) & 0xFFFF) as u16),
    )
}

impl TcpPg {
    /// Carries out the machine's actions; returns how many.
    pub(crate) fn actions(&mut self, core: &mut PgCore, ck: u32) -> usize {
        let mut n = 0;
        loop {
            let Some(c) = self.conns.get_mut(ck as usize) else {
                return n;
            };
            if c.closing {
                return n;
            }
            let Some(a) = c.conn.poll_action() else {
                return n;
            };
            n += 1;
            match a {
                Action::NeedBuffer { slot, len } => self.attach(ck, slot, len),
                Action::Execute { slot } => self.start(core, ck, slot),
                Action::Fail { slot, status } => {
                    let c = &mut self.conns[ck as usize];
                    let sqe = c.conn.sqe(slot).copied().unwrap_or_default();
                    let (q, Some(r)) = Self::parts(core, &self.sh.index, ck, c, Some(slot)) else {
                        continue;
                    };
                    r.ex.cqe = q.cqe(&sqe, status);
                    r.ex.data_len = 0;
                    self.finish(core, ck, slot);
                }
                Action::Close => c.close_when_flushed = true,
            }
        }
    }

    /// The exec layer's queue of a connection (created with its first command: its queue id
    /// is the Connect's, TCP announces it nowhere else) and a slot's request.
    fn parts<'a>(
        core: &mut PgCore,
        index: &usize,
        ck: u32,
        c: &'a mut TcpQpair,
        slot: Option<SlotId>,
    ) -> (&'a mut Queue, Option<&'a mut crate::qpair::Req>) {
        if c.q.is_none() {
            // The first command: a Connect names the queue; anything else is refused by
            // the exec layer on an unconnected queue.
            let qid = slot
                .and_then(|s| c.conn.sqe(s))
                .filter(|s| nvme_exec::is_connect(s))
                .map_or(0, |s| ConnectCmd::from_sqe(s).qid);
            let me = QueueRef {
                reactor: core.index(),
                transport: *index,
                key: u64::from(ck) | (u64::from(c.generation) << 32),
            };
            c.q = Some(Queue::new(core, me, qid, c.listen.clone(), c.local, c.peer));
        }
        let TcpQpair { q, reqs, .. } = c;
        (
            q.as_mut().expect("created above"),
            slot.and_then(|s| reqs.get_mut(s.index())),
        )
    }

    /// Attaches a data buffer to a slot, or queues it until the pool has one.
    fn attach(&mut self, ck: u32, slot: SlotId, len: u32) {
        let c = &mut self.conns[ck as usize];
        if let Some(Xfer::InCapsule(_)) = c.conn.xfer(slot) {
            let r = &mut c.reqs[slot.index()];
            if let (Some(mut b), Some(io)) = (r.icd.take(), r.ex.io.as_mut()) {
                b.set_len(len as usize);
                io.bufs.push(b);
                r.data = DataKind::InCapsule;
            }
            if let Err(e) = c.conn.buffer_ready(slot) {
                tracing::error!(?e, "nvme/tcp: buffer_ready refused");
            }
            return;
        }
        if !c.wait_buf.is_empty() {
            c.wait_buf.push_back((slot, len));
            c.reqs[slot.index()].state = ReqState::WaitBuffer;
            return;
        }
        if !self.take_buffers(ck, slot, len) {
            let c = &mut self.conns[ck as usize];
            if c.wait_buf.is_empty() {
                self.waiting += 1;
            }
            c.wait_buf.push_back((slot, len));
            c.reqs[slot.index()].state = ReqState::WaitBuffer;
            self.stats.pending_data_buffer += 1;
        }
    }

    /// Takes the pool buffers for `len` bytes (all or none) and tells the machine.
    fn take_buffers(&mut self, ck: u32, slot: SlotId, len: u32) -> bool {
        let unit = self.sh.opts.io_unit_size as usize;
        let c = &mut self.conns[ck as usize];
        let r = &mut c.reqs[slot.index()];
        let Some(io) = r.ex.io.as_mut() else {
            return false;
        };
        let len = len as usize;
        let n = len.div_ceil(unit).max(1);
        for i in 0..n {
            match self.cache.get() {
                Some(mut b) if !io.bufs.is_full() => {
                    b.set_len((len - i * unit).min(unit));
                    io.bufs.push(b);
                }
                other => {
                    if let Some(b) = other {
                        self.cache.put(b);
                    }
                    for b in io.bufs.drain(..) {
                        self.cache.put(b);
                    }
                    return false;
                }
            }
        }
        r.data = DataKind::Pool;
        r.state = ReqState::Idle;
        if let Err(e) = c.conn.buffer_ready(slot) {
            tracing::error!(?e, "nvme/tcp: buffer_ready refused");
        }
        true
    }

    /// Retries a connection's commands waiting for buffers or for a busy bdev.
    pub(crate) fn retry_conn(&mut self, core: &mut PgCore, ck: u32) -> usize {
        let mut n = 0;
        while let Some(&(slot, len)) = self.conns[ck as usize].wait_buf.front() {
            if !self.take_buffers(ck, slot, len) {
                break;
            }
            let c = &mut self.conns[ck as usize];
            c.wait_buf.pop_front();
            if c.wait_buf.is_empty() {
                self.waiting -= 1;
            }
            n += 1;
        }
        let c = &mut self.conns[ck as usize];
        let busy = c.busy.len();
        if busy > 0 {
            self.busy -= 1;
        }
        for _ in 0..busy {
            let Some(slot) = self.conns[ck as usize].busy.pop_front() else {
                break;
            };
            let c = &mut self.conns[ck as usize];
            let (q, Some(r)) = Self::parts(core, &self.sh.index, ck, c, Some(slot)) else {
                continue;
            };
            let mut cx = NvmeCtx::new(core, &self.sh.info, self.now);
            let out = nvme_exec::resubmit(&mut cx, q, &mut r.ex);
            let aers = std::mem::take(&mut cx.aer_done);
            self.after(core, ck, slot, out);
            for a in aers {
                self.complete_parked(core, ck, a);
            }
            n += 1;
        }
        n
    }

    /// A command and its host data are here: decode its SGL and run it.
    fn start(&mut self, core: &mut PgCore, ck: u32, slot: SlotId) {
        self.epoch = self.epoch.wrapping_add(1);
        let epoch = self.epoch;
        let now_ns = self.now_ns;
        let c = &mut self.conns[ck as usize];
        let Some(sqe) = c.conn.sqe(slot).copied() else {
            return;
        };
        let (q, Some(r)) = Self::parts(core, &self.sh.index, ck, c, Some(slot)) else {
            return;
        };
        r.ex.reset(token(ck, slot, epoch), sqe);
        r.started_ns = now_ns;
        let icd_cap = r
            .icd
            .as_ref()
            .map_or(self.sh.opts.in_capsule_data_size, |b| b.capacity() as u32)
            .max(crate::pdu::ADMIN_IN_CAPSULE_DATA);
        // The in-capsule data (if any) is the first buffer: lend it to the SGL decoder.
        let icd = if r.data == DataKind::InCapsule {
            r.ex.io.as_mut().and_then(|io| io.bufs.pop())
        } else {
            None
        };
        let empty = [0u8; 0];
        let data: &[u8] = icd.as_ref().map_or(&empty[..], |b| b.as_slice());
        let begun = nvme_exec::begin(&self.sh.info, q, &mut r.ex, data, icd_cap);
        if let (Some(b), Some(io)) = (icd, r.ex.io.as_mut()) {
            io.bufs.push(b);
        }
        match begun {
            Err(s) => {
                r.ex.cqe = q.cqe(&sqe, s);
                r.ex.data_len = 0;
                self.finish(core, ck, slot);
            }
            Ok(dir) => {
                // The machine and the decoder agree on where the data is; anything else is a
                // bug to report, not to run.
                let ok = match (&r.ex.sgl, dir) {
                    (DataSgl::None, _) | (_, Direction::None) => true,
                    (DataSgl::InCapsule { .. }, _) => r.data == DataKind::InCapsule,
                    (DataSgl::Transport { .. }, _) => r.data == DataKind::Pool,
                    _ => false,
                };
                if !ok {
                    tracing::error!(sgl = ?r.ex.sgl, "nvme/tcp: data not where the SGL says");
                    r.ex.cqe = q.cqe(&sqe, Status::INTERNAL_ERROR);
                    r.ex.data_len = 0;
                    self.finish(core, ck, slot);
                    return;
                }
                self.exec(core, ck, slot);
            }
        }
    }

    /// Runs (or re-runs, after admission replay) a command through the exec layer.
    fn exec(&mut self, core: &mut PgCore, ck: u32, slot: SlotId) {
        let c = &mut self.conns[ck as usize];
        let (q, Some(r)) = Self::parts(core, &self.sh.index, ck, c, Some(slot)) else {
            return;
        };
        let mut cx = NvmeCtx::new(core, &self.sh.info, self.now);
        let out = nvme_exec::execute(&mut cx, q, &mut r.ex);
        let aers = std::mem::take(&mut cx.aer_done);
        self.after(core, ck, slot, out);
        for a in aers {
            self.complete_parked(core, ck, a);
        }
    }

    /// What the exec layer said.
    fn after(&mut self, core: &mut PgCore, ck: u32, slot: SlotId, out: NvmeAction) {
        let c = &mut self.conns[ck as usize];
        let r = &mut c.reqs[slot.index()];
        match out {
            NvmeAction::Complete => self.finish(core, ck, slot),
            NvmeAction::Submitted => {
                r.state = ReqState::Submitted;
                c.io_out += 1;
            }
            NvmeAction::Queued => r.state = ReqState::Queued,
            NvmeAction::Parked => r.state = ReqState::Parked,
            NvmeAction::Busy => {
                r.state = ReqState::Busy;
                if c.busy.is_empty() {
                    self.busy += 1;
                }
                c.busy.push_back(slot);
                self.stats.bdev_busy += 1;
            }
        }
    }

    /// The command finished: its completion (and data) go to the machine.
    pub(crate) fn finish(&mut self, _core: &mut PgCore, ck: u32, slot: SlotId) {
        let c = &mut self.conns[ck as usize];
        let r = &mut c.reqs[slot.index()];
        r.state = ReqState::Responding;
        let (cqe, mut len, sqe) = (r.ex.cqe, r.ex.data_len, r.ex.sqe);
        // A successful controller-to-host command returns its whole transfer, zero-filled past
        // what the core produced (an Authentication Receive or Reservation Report shorter than
        // the host's buffer), as SPDK and nvmet do: a host may expect every byte it asked for,
        // and the pool buffer's earlier contents never reach it.
        if cqe.status == Status::SUCCESS
            && let Some(n) = c.conn.to_host_len(slot)
            && len < n
        {
            crate::qpair::zero_fill(r, len, n);
            len = n;
        }
        if r.ex.disconnect_after {
            c.close_when_flushed = true;
        }
        if nvme_exec::is_connect(&sqe)
            && cqe.status == Status::SUCCESS
            && let Some(q) = c.q.as_ref()
        {
            let cc = ConnectCmd::from_sqe(&sqe);
            c.conn.connected(q.qid(), cc.sq_flow_control_disabled());
        }
        if let Err(e) = c.conn.complete(slot, cqe, len) {
            tracing::error!(?e, "nvme/tcp: completion refused");
        }
        if c.conn.slot_state(slot) == Some(crate::conn::SlotState::Free) {
            // Abandoned by a closing machine: nothing goes out.
            TcpQpair::release_buffers(r, &mut self.cache, None);
            r.state = ReqState::Idle;
        }
        self.mark(ck);
    }

    /// A bdev I/O came back.
    pub(crate) fn io_done(&mut self, core: &mut PgCore, io: Box<BdevIo>) {
        let (ck, slot) = split(io.tag);
        let ok = self.conns.get(ck as usize).is_some_and(|c| {
            c.reqs.get(slot.index()).is_some_and(|r| {
                r.state == ReqState::Submitted && r.ex.io.is_none() && r.ex.token == io.tag
            })
        });
        if !ok {
            tracing::error!(tag = io.tag, "bdev completion for an unknown command");
            let mut io = io;
            for b in io.bufs.drain(..) {
                if b.capacity() == self.sh.opts.io_unit_size as usize {
                    self.cache.put(b);
                }
            }
            return;
        }
        let c = &mut self.conns[ck as usize];
        c.io_out -= 1;
        let r = &mut c.reqs[slot.index()];
        if c.closing {
            r.ex.io = Some(io);
            nvme_exec::abandon(core, &mut r.ex);
            TcpQpair::release_buffers(r, &mut self.cache, None);
            r.state = ReqState::Idle;
            if c.io_out == 0 {
                self.remove(core, ck);
            }
            return;
        }
        let Some(q) = c.q.as_mut() else {
            return;
        };
        let mut cx = NvmeCtx::new(core, &self.sh.info, self.now);
        let out = nvme_exec::io_done(&mut cx, q, &mut r.ex, io);
        self.after(core, ck, slot, out);
        self.mark(ck);
    }

    /// Replays a command its paused subsystem held.
    pub(crate) fn resume(&mut self, core: &mut PgCore, token: u64) {
        let (ck, slot) = split(token);
        let ok = self.conns.get(ck as usize).is_some_and(|c| {
            !c.closing
                && c.reqs
                    .get(slot.index())
                    .is_some_and(|r| r.state == ReqState::Queued && r.ex.token == token)
        });
        if ok {
            self.exec(core, ck, slot);
            self.mark(ck);
        }
    }

    /// Closes a connection: the socket goes, the queue starts its teardown, every command that
    /// is not in the bdev layer is dropped with its buffers. The connection is removed when its
    /// last bdev I/O is back.
    pub(crate) fn teardown(&mut self, core: &mut PgCore, ck: u32) {
        let Some(c) = self.conns.get_mut(ck as usize) else {
            return;
        };
        if c.closing {
            return;
        }
        c.closing = true;
        c.conn.close();
        self.epoll.remove(c.fd);
        let _ = c.sock.shutdown(Shutdown::Both);
        if let Some(q) = c.q.as_mut() {
            q.begin_close(core);
        }
        if !c.wait_buf.is_empty() {
            self.waiting -= 1;
            c.wait_buf.clear();
        }
        if !c.busy.is_empty() {
            self.busy -= 1;
            c.busy.clear();
        }
        c.drop_tx(&mut self.cache);
        for r in c.reqs.iter_mut() {
            if r.state == ReqState::Submitted {
                continue;
            }
            nvme_exec::abandon(core, &mut r.ex);
            TcpQpair::release_buffers(r, &mut self.cache, None);
            r.state = ReqState::Idle;
        }
        tracing::debug!(peer = %c.peer, io_out = c.io_out, "NVMe/TCP connection closing");
        if c.io_out == 0 {
            self.remove(core, ck);
        }
    }

    /// Removes a closed connection: the queue is finished, the counters updated.
    pub(crate) fn remove(&mut self, core: &mut PgCore, ck: u32) {
        if !self.conns.contains(ck as usize) {
            return;
        }
        let mut c = self.conns.remove(ck as usize);
        if !c.closing {
            self.epoll.remove(c.fd);
        }
        if let Some(q) = c.q.as_mut() {
            q.finish(core);
        }
        for r in c.reqs.iter_mut() {
            TcpQpair::release_buffers(r, &mut self.cache, None);
        }
        c.drop_tx(&mut self.cache);
        self.close_stats(&c.conn.stats(), &c.sock_counters);
        self.sh.conns[self.reactor].fetch_sub(1, Ordering::Relaxed);
        self.dirty.retain(|&k| k != ck);
    }
}
