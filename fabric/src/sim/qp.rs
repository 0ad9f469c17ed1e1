//! Simulated reliable-connected queue pairs: work requests execute at post time (or when a
//! receiver-not-ready wait ends), copying bytes between registered regions.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use super::{
    KeyCache, KeyEntry, MwBinding, RecvQ, Resolve, SCmId, SCq, SDevice, SMr, SMw, SPd, SSrq, Seg,
    Segs, copy_segs, local_segs, remote_seg,
};
use crate::error::{FabricError, PostError, PostErrorKind, Result};
use crate::types::*;
use crate::verbs::{CqImpl, PdImpl, Qp, QpImpl, QpInit, SrqImpl};

const ST_RESET: u8 = 0;
const ST_INIT: u8 = 1;
const ST_RTR: u8 = 2;
const ST_RTS: u8 = 3;
const ST_ERROR: u8 = 6;

/// Time one receiver-not-ready retry takes (a real responder's minimal RNR timer is of the
/// order of a millisecond).
const RNR_STEP: Duration = Duration::from_millis(2);

/// The connection of a queue pair, set once when it is established.
struct Link {
    peer: Weak<SQp>,
    /// The peer's "blocked on receiver-not-ready" flag, checked without upgrading `peer`.
    peer_blocked: Arc<AtomicBool>,
    rnr_retry: u8,
    /// RDMA READs the peer may have outstanding against us (0: reads are refused).
    max_dest_rd_atomic: u8,
}

#[derive(Clone, Copy)]
struct BindReq {
    wr_id: u64,
    signaled: bool,
    mw_idx: usize,
    new_key: u32,
    mr_key: u32,
    addr: u64,
    len: u64,
    access: Access,
}

// A send work request is ~300 bytes; boxing it would allocate per work request.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy)]
enum Op {
    Wr(SendWr),
    Bind(BindReq),
}

impl Op {
    fn wr_id(&self) -> u64 {
        match self {
            Op::Wr(w) => w.wr_id,
            Op::Bind(b) => b.wr_id,
        }
    }

    fn signaled(&self) -> bool {
        match self {
            Op::Wr(w) => w.signaled,
            Op::Bind(b) => b.signaled,
        }
    }

    fn opcode(&self) -> WcOpcode {
        match self {
            Op::Wr(w) => wr_opcode(w),
            Op::Bind(_) => WcOpcode::BindMw,
        }
    }
}

fn wr_opcode(w: &SendWr) -> WcOpcode {
    match w.op {
        WrOp::Send | WrOp::SendWithInv { .. } => WcOpcode::Send,
        WrOp::RdmaWrite { .. } => WcOpcode::RdmaWrite,
        WrOp::RdmaRead { .. } => WcOpcode::RdmaRead,
    }
}

#[derive(Clone, Copy)]
struct Pending {
    op: Op,
    seq: u64,
}

struct SendQ {
    /// Work requests not executed yet (the head waits for a receive on the peer).
    pending: VecDeque<Pending>,
    /// Work requests posted whose slot is not free yet (freed by the next completion).
    outstanding: u32,
    /// Unsignaled successes since the last completion.
    unsignaled: u32,
    seq: u64,
    /// Our lkeys and the peer's rkeys, resolved.
    cache: KeyCache,
    /// The connected peer, held strongly for the data path (no reference-count traffic per
    /// work request); cleared on destruction to break the cycle.
    peer: Option<Arc<SQp>>,
}

enum Exec {
    /// Success, with the byte count for the completion.
    Done(u32),
    /// The peer has no receive posted.
    Rnr,
    /// Failed with this status; the queue pair goes to the error state.
    Fail(WcStatus),
}

/// A simulated queue pair.
pub(crate) struct SQp {
    pub(crate) qpn: u32,
    dev: Arc<SDevice>,
    pd: Arc<SPd>,
    scq: Arc<SCq>,
    rcq: Arc<SCq>,
    srq: Option<Arc<SSrq>>,
    cap: QpCap,
    sig_all: bool,
    state: AtomicU8,
    sq: Mutex<SendQ>,
    rq: Mutex<RecvQ>,
    rnr_blocked: Arc<AtomicBool>,
    link: OnceLock<Link>,
    last_wqe: AtomicBool,
}

impl SQp {
    pub(crate) fn device(&self) -> &Arc<SDevice> {
        &self.dev
    }

    pub(crate) fn state(&self) -> QpState {
        QpState::from_u8(self.st())
    }

    #[inline]
    fn st(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// Sets the error state without flushing (the flush follows through [`SQp::enter_error`]
    /// once the caller's locks are released).
    fn mark_error(&self) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s != ST_RESET).then_some(ST_ERROR)
            });
    }

    /// Moves to the error state and flushes both queues.
    pub(crate) fn enter_error(&self) {
        let mut sq = self.sq.lock();
        self.enter_error_locked(&mut sq);
    }

    fn enter_error_locked(&self, sq: &mut SendQ) {
        if self.st() == ST_RESET {
            return; // destroyed
        }
        self.state.store(ST_ERROR, Ordering::Release);
        self.rnr_blocked.store(false, Ordering::Release);
        self.flush_sq(sq);
        self.flush_rq(&mut self.rq.lock());
        if self.srq.is_some() && !self.last_wqe.swap(true, Ordering::AcqRel) {
            // Receives are taken from the SRQ and completed atomically, so by now every
            // receive this queue pair consumed has completed.
            self.dev.push_async(AsyncEvent {
                kind: AsyncEventKind::QpLastWqeReached,
                element: AsyncElement::Qp(self.qpn),
            });
        }
    }

    fn flush_sq(&self, sq: &mut SendQ) {
        while let Some(p) = sq.pending.pop_front() {
            self.complete(sq, &p.op, WcStatus::WrFlushErr, 0);
        }
    }

    fn flush_rq(&self, rq: &mut RecvQ) {
        for wr_id in rq.q.drain_ids() {
            self.rcq.push(
                WorkCompletion {
                    wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: WcOpcode::Recv,
                    byte_len: 0,
                    qp_num: self.qpn,
                    invalidated_rkey: None,
                    vendor_err: 0,
                },
                false,
            );
        }
    }

    /// Generates (or, for an unsignaled success, skips) the completion of a send-queue work
    /// request and frees send-queue slots as a real adapter does.
    #[inline]
    fn complete(&self, sq: &mut SendQ, op: &Op, status: WcStatus, byte_len: u32) {
        self.complete_raw(
            sq,
            (op.wr_id(), op.signaled(), op.opcode()),
            status,
            byte_len,
        );
    }

    /// [`SQp::complete`] for `(wr_id, signaled, opcode)`.
    #[inline(always)]
    fn complete_raw(
        &self,
        sq: &mut SendQ,
        (wr_id, signaled, opcode): (u64, bool, WcOpcode),
        status: WcStatus,
        byte_len: u32,
    ) {
        if status.is_success() && !signaled && !self.sig_all {
            sq.unsignaled += 1;
            return;
        }
        sq.outstanding = sq.outstanding.saturating_sub(sq.unsignaled + 1);
        sq.unsignaled = 0;
        self.scq.push(
            WorkCompletion {
                wr_id,
                status,
                opcode,
                byte_len,
                qp_num: self.qpn,
                invalidated_rkey: None,
                vendor_err: 0,
            },
            false,
        );
    }

    #[inline(always)]
    fn admit_send(&self, sq: &SendQ, nsge: usize) -> std::result::Result<(), PostErrorKind> {
        if nsge > self.cap.max_send_sge as usize {
            return Err(PostErrorKind::InvalidWr);
        }
        if matches!(self.st(), ST_RESET | ST_INIT | ST_RTR) {
            return Err(PostErrorKind::InvalidState);
        }
        if sq.outstanding >= self.cap.max_send_wr {
            return Err(PostErrorKind::QueueFull);
        }
        Ok(())
    }

    #[inline]
    fn enqueue(self: &Arc<Self>, sq: &mut SendQ, op: Op, deferred: &mut Option<Arc<SQp>>) {
        sq.outstanding += 1;
        sq.seq += 1;
        let p = Pending { op, seq: sq.seq };
        if self.st() == ST_ERROR {
            self.flush_sq(sq);
            self.complete(sq, &p.op, WcStatus::WrFlushErr, 0);
            return;
        }
        if !sq.pending.is_empty() {
            // Behind a work request waiting for the peer: RC keeps order.
            sq.pending.push_back(p);
            return;
        }
        match self.exec(sq, &p.op, deferred) {
            Exec::Rnr => {
                sq.pending.push_back(p);
                self.start_rnr_wait(sq, p.seq, deferred);
            }
            r => self.finish(sq, &p, r),
        }
    }

    /// [`SQp::enqueue`] for a send work request, executing it in place when nothing waits
    /// ahead of it (the common case): no copy of the ~300-byte request unless it must wait.
    #[inline]
    fn enqueue_wr(self: &Arc<Self>, sq: &mut SendQ, wr: &SendWr, deferred: &mut Option<Arc<SQp>>) {
        if self.st() == ST_ERROR || !sq.pending.is_empty() {
            return self.enqueue(sq, Op::Wr(*wr), deferred);
        }
        sq.outstanding += 1;
        sq.seq += 1;
        match self.exec_wr(sq, wr, deferred) {
            Exec::Done(n) => self.complete_raw(
                sq,
                (wr.wr_id, wr.signaled, wr_opcode(wr)),
                WcStatus::Success,
                n,
            ),
            r => self.enqueue_wr_not_done(sq, wr, r, deferred),
        }
    }

    /// [`SQp::enqueue_wr`] for a work request that failed or waits for a receive.
    #[inline(never)]
    fn enqueue_wr_not_done(
        self: &Arc<Self>,
        sq: &mut SendQ,
        wr: &SendWr,
        r: Exec,
        deferred: &mut Option<Arc<SQp>>,
    ) {
        match r {
            Exec::Done(_) => unreachable!("a success completes in enqueue_wr"),
            Exec::Fail(status) => {
                self.complete_raw(sq, (wr.wr_id, wr.signaled, wr_opcode(wr)), status, 0);
                self.enter_error_locked(sq);
            }
            Exec::Rnr => {
                let seq = sq.seq;
                sq.pending.push_back(Pending {
                    op: Op::Wr(*wr),
                    seq,
                });
                self.start_rnr_wait(sq, seq, deferred);
            }
        }
    }

    fn finish(&self, sq: &mut SendQ, p: &Pending, r: Exec) {
        match r {
            Exec::Done(n) => self.complete(sq, &p.op, WcStatus::Success, n),
            Exec::Fail(status) => {
                self.complete(sq, &p.op, status, 0);
                self.enter_error_locked(sq);
            }
            Exec::Rnr => unreachable!("receiver-not-ready handled by the caller"),
        }
    }

    /// Runs pending work requests from the head until one waits or none is left.
    fn progress(self: &Arc<Self>, sq: &mut SendQ, deferred: &mut Option<Arc<SQp>>) {
        while let Some(p) = sq.pending.front().copied() {
            if self.st() == ST_ERROR {
                self.flush_sq(sq);
                return;
            }
            match self.exec(sq, &p.op, deferred) {
                Exec::Rnr => {
                    self.start_rnr_wait(sq, p.seq, deferred);
                    return;
                }
                r => {
                    sq.pending.pop_front();
                    self.finish(sq, &p, r);
                }
            }
        }
    }

    fn start_rnr_wait(self: &Arc<Self>, sq: &mut SendQ, seq: u64, deferred: &mut Option<Arc<SQp>>) {
        let retry = self.link.get().map_or(0, |l| l.rnr_retry);
        if retry >= RNR_RETRY_INFINITE {
            return; // wait for a receive as long as it takes, as hardware retries forever
        }
        if retry == 0 {
            self.rnr_blocked.store(false, Ordering::Release);
            if let Some(p) = sq.pending.pop_front() {
                self.finish(sq, &p, Exec::Fail(WcStatus::RnrRetryExcErr));
            }
            let _ = deferred;
            return;
        }
        let me: Weak<SQp> = Arc::downgrade(self);
        self.dev.timer().schedule(
            RNR_STEP * retry as u32,
            Box::new(move || {
                if let Some(q) = me.upgrade() {
                    q.rnr_expired(seq);
                }
            }),
        );
    }

    fn rnr_expired(self: &Arc<Self>, seq: u64) {
        let mut deferred = None;
        {
            let mut sq = self.sq.lock();
            let Some(p) = sq.pending.front().copied() else {
                return;
            };
            if p.seq != seq || self.st() != ST_RTS {
                return;
            }
            match self.exec(&mut sq, &p.op, &mut deferred) {
                Exec::Rnr => {
                    self.rnr_blocked.store(false, Ordering::Release);
                    sq.pending.pop_front();
                    self.finish(&mut sq, &p, Exec::Fail(WcStatus::RnrRetryExcErr));
                }
                r => {
                    sq.pending.pop_front();
                    self.finish(&mut sq, &p, r);
                    self.progress(&mut sq, &mut deferred);
                }
            }
        }
        if let Some(p) = deferred {
            p.enter_error();
        }
    }

    /// Retries work requests that waited for a receive (called after the peer posted one).
    pub(crate) fn pump(self: &Arc<Self>) {
        if !self.rnr_blocked.load(Ordering::Acquire) {
            return;
        }
        let mut deferred = None;
        {
            let mut sq = self.sq.lock();
            self.rnr_blocked.store(false, Ordering::Release);
            self.progress(&mut sq, &mut deferred);
        }
        if let Some(p) = deferred {
            p.enter_error();
        }
    }

    /// Wakes our peer if it waits for one of our receives.
    pub(crate) fn wake_peer(&self) {
        if let Some(l) = self.link.get()
            && l.peer_blocked.load(Ordering::Acquire)
            && let Some(p) = l.peer.upgrade()
        {
            p.pump();
        }
    }

    #[inline]
    fn exec(self: &Arc<Self>, sq: &mut SendQ, op: &Op, deferred: &mut Option<Arc<SQp>>) -> Exec {
        match op {
            Op::Bind(b) => self.exec_bind(b),
            Op::Wr(wr) => self.exec_wr(sq, wr, deferred),
        }
    }

    #[inline(always)]
    fn exec_wr(
        self: &Arc<Self>,
        sq: &mut SendQ,
        wr: &SendWr,
        deferred: &mut Option<Arc<SQp>>,
    ) -> Exec {
        // Borrow the peer and the key cache apart: no reference-count traffic per request.
        let SendQ { cache, peer, .. } = sq;
        let Some(peer) = peer.as_ref() else {
            return Exec::Fail(WcStatus::RetryExcErr);
        };
        match wr.op {
            WrOp::Send => self.exec_send(cache, peer, wr, None, deferred),
            WrOp::SendWithInv { invalidate_rkey } => {
                self.exec_send(cache, peer, wr, Some(invalidate_rkey), deferred)
            }
            WrOp::RdmaWrite { remote_addr, rkey } => {
                self.exec_write(cache, peer, wr, remote_addr, rkey, deferred)
            }
            WrOp::RdmaRead { remote_addr, rkey } => {
                self.exec_read(cache, peer, wr, remote_addr, rkey, deferred)
            }
        }
    }

    fn peer_failed(peer: &Arc<SQp>, deferred: &mut Option<Arc<SQp>>) {
        peer.mark_error();
        *deferred = Some(Arc::clone(peer));
    }

    fn recv_wc(peer: &SQp, wr_id: u64, status: WcStatus, byte_len: u32) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len,
            qp_num: peer.qpn,
            invalidated_rkey: None,
            vendor_err: 0,
        }
    }

    #[inline(always)]
    fn exec_send(
        self: &Arc<Self>,
        cache: &mut KeyCache,
        peer: &Arc<SQp>,
        wr: &SendWr,
        inv: Option<u32>,
        deferred: &mut Option<Arc<SQp>>,
    ) -> Exec {
        // The receive comes from the peer's SRQ or its own receive queue; holding that lock
        // while copying keeps the peer's receive completions ordered with its flushes.
        let mut rq = match &peer.srq {
            Some(s) => s.q.lock(),
            None => peer.rq.lock(),
        };
        if !matches!(peer.st(), ST_RTR | ST_RTS) {
            return Exec::Fail(WcStatus::RetryExcErr);
        }
        if inv.is_none()
            && let Some((recv_wr_id, n)) = self.send_one(cache, peer, wr, &rq)
        {
            rq.q.pop_front();
            peer.rcq.push(
                Self::recv_wc(peer, recv_wr_id, WcStatus::Success, n),
                wr.solicited,
            );
            return Exec::Done(n);
        }
        self.exec_send_locked(cache, peer, wr, inv, deferred, &mut rq)
    }

    /// A SEND of one entry into a receive of one entry, both keys cached and valid and the
    /// receive long enough (every SEND of the data path to a host): copies the bytes and
    /// gives the receive's `wr_id` and the length. `None` when anything is otherwise (no
    /// receive, more entries, a key to look up or refuse, too long): nothing was changed, and
    /// [`SQp::exec_send_locked`] decides the outcome.
    #[inline(always)]
    fn send_one(
        &self,
        cache: &KeyCache,
        peer: &SQp,
        wr: &SendWr,
        rq: &RecvQ,
    ) -> Option<(u64, u32)> {
        let [s] = wr.sges.as_slice() else {
            return None;
        };
        let recv = rq.q.front()?;
        let [d] = recv.sges else {
            return None;
        };
        if s.length > d.length {
            return None;
        }
        let src = cache.local_one(&self.dev, self.pd.id(), s, false)?;
        let dst = rq.cache.local_one(&peer.dev, peer.pd.id(), d, true)?;
        // SAFETY: both ranges lie inside live registered regions (the cache entries, which
        // hold the regions, stay in their slots while the send-queue and receive-queue locks
        // are held); `copy` tolerates overlap (loopback).
        unsafe { std::ptr::copy(src, dst, s.length as usize) };
        Some((recv.wr_id, s.length))
    }

    /// [`SQp::send_one`] into a receive of several entries whose first holds the SEND (a
    /// command capsule into the NVMe target's command + in-capsule-data receive): every
    /// entry's key cached and valid, checked as the general path checks them though no byte
    /// reaches the others; the bytes go to the first entry.
    #[inline(always)]
    fn send_one_into_first(
        &self,
        cache: &KeyCache,
        peer: &SQp,
        wr: &SendWr,
        rq: &RecvQ,
    ) -> Option<(u64, u32)> {
        let [s] = wr.sges.as_slice() else {
            return None;
        };
        let recv = rq.q.front()?;
        let [d, rest @ ..] = recv.sges else {
            return None;
        };
        if rest.is_empty() || s.length > d.length {
            return None;
        }
        let src = cache.local_one(&self.dev, self.pd.id(), s, false)?;
        let dst = rq.cache.local_one(&peer.dev, peer.pd.id(), d, true)?;
        for e in rest {
            rq.cache.local_one(&peer.dev, peer.pd.id(), e, true)?;
        }
        // SAFETY: as in `send_one`.
        unsafe { std::ptr::copy(src, dst, s.length as usize) };
        Some((recv.wr_id, s.length))
    }

    /// [`SQp::exec_send`] once the receive queue is locked and the peer ready: every case
    /// [`SQp::send_one`] does not take: a receive of several entries
    /// ([`SQp::send_one_into_first`] first), then the general path (several source entries,
    /// a key to look up, no receive, an error, a SEND with invalidate).
    #[inline(never)]
    fn exec_send_locked(
        self: &Arc<Self>,
        cache: &mut KeyCache,
        peer: &Arc<SQp>,
        wr: &SendWr,
        inv: Option<u32>,
        deferred: &mut Option<Arc<SQp>>,
        rq: &mut RecvQ,
    ) -> Exec {
        if inv.is_none()
            && let Some((recv_wr_id, n)) = self.send_one_into_first(cache, peer, wr, rq)
        {
            rq.q.pop_front();
            peer.rcq.push(
                Self::recv_wc(peer, recv_wr_id, WcStatus::Success, n),
                wr.solicited,
            );
            return Exec::Done(n);
        }
        // Borrow the receive in place.
        let RecvQ {
            q: rq_q,
            cache: rq_cache,
            ..
        } = rq;
        let Some(recv) = rq_q.front() else {
            // Flags are set under the receive lock so that a receive posted right after
            // cannot miss us.
            self.rnr_blocked.store(true, Ordering::Release);
            if let Some(s) = &peer.srq {
                s.waiters.store(true, Ordering::Release);
            }
            return Exec::Rnr;
        };
        let total = wr.sges.total_len();
        enum Outcome {
            Ok,
            Prot,
            Len,
        }
        fn place(src: &[Seg], dst: &[Seg], total: u64) -> Outcome {
            let room: u64 = dst.iter().map(|s| s.len as u64).sum();
            if total > room {
                Outcome::Len
            } else {
                copy_segs(src, dst);
                Outcome::Ok
            }
        }
        let mut src = Segs::new();
        let mut dst = Segs::new();
        let (mut t1, mut t2) = (0, 0);
        let fast = {
            let rs = cache.local(
                &mut t1,
                &self.dev,
                self.pd.id(),
                wr.sges.as_slice(),
                false,
                &mut src,
            );
            let rd = rq_cache.local(&mut t2, &peer.dev, peer.pd.id(), recv.sges, true, &mut dst);
            match (rs, rd) {
                (Resolve::Bad, _) => return Exec::Fail(WcStatus::LocProtErr),
                (Resolve::Ok, Resolve::Ok) => Some(place(src.as_slice(), dst.as_slice(), total)),
                (Resolve::Ok, Resolve::Bad) => Some(Outcome::Prot),
                _ => None,
            }
        };
        let recv_wr_id = recv.wr_id;
        let outcome = match fast {
            Some(o) => o,
            None => {
                let mine = self.dev.keys.read_recursive();
                let theirs = peer.dev.keys.read_recursive();
                if local_segs(&mine, self.pd.id(), wr.sges.as_slice(), false, &mut src).is_err() {
                    return Exec::Fail(WcStatus::LocProtErr);
                }
                match local_segs(&theirs, peer.pd.id(), recv.sges, true, &mut dst) {
                    Err(()) => Outcome::Prot,
                    Ok(_) => place(src.as_slice(), dst.as_slice(), total),
                }
            }
        };
        rq.q.pop_front();
        match outcome {
            Outcome::Ok => {}
            Outcome::Prot => {
                peer.rcq.push(
                    Self::recv_wc(peer, recv_wr_id, WcStatus::LocProtErr, 0),
                    false,
                );
                Self::peer_failed(peer, deferred);
                return Exec::Fail(WcStatus::RemOpErr);
            }
            Outcome::Len => {
                peer.rcq.push(
                    Self::recv_wc(peer, recv_wr_id, WcStatus::LocLenErr, 0),
                    false,
                );
                Self::peer_failed(peer, deferred);
                return Exec::Fail(WcStatus::RemOpErr);
            }
        }
        let mut wc = Self::recv_wc(peer, recv_wr_id, WcStatus::Success, total as u32);
        if let Some(rkey) = inv {
            if peer.invalidate(rkey) {
                wc.invalidated_rkey = Some(rkey);
            } else {
                wc.status = WcStatus::RemInvReqErr;
                wc.byte_len = 0;
                peer.rcq.push(wc, false);
                Self::peer_failed(peer, deferred);
                return Exec::Fail(WcStatus::RemInvReqErr);
            }
        }
        peer.rcq.push(wc, wr.solicited);
        Exec::Done(total as u32)
    }

    /// Remote invalidation of a memory window bound through this queue pair.
    fn invalidate(&self, rkey: u32) -> bool {
        let mut tab = self.dev.keys.write();
        match tab.get_mut((rkey >> 8) as usize) {
            Some(KeyEntry::Mw { pd, key, bound })
                if *key == rkey
                    && *pd == self.pd.id()
                    && bound.as_ref().is_some_and(|b| b.qp_num == self.qpn) =>
            {
                *bound = None;
                self.dev.key_gen.fetch_add(1, Ordering::AcqRel);
                true
            }
            _ => false,
        }
    }

    #[inline(always)]
    fn exec_write(
        &self,
        cache: &mut KeyCache,
        peer: &Arc<SQp>,
        wr: &SendWr,
        remote_addr: u64,
        rkey: u32,
        deferred: &mut Option<Arc<SQp>>,
    ) -> Exec {
        if !matches!(peer.st(), ST_RTR | ST_RTS) {
            return Exec::Fail(WcStatus::RetryExcErr);
        }
        // One entry, both keys cached and valid (every RDMA WRITE of the data path).
        if let [s] = wr.sges.as_slice()
            && let Some(src) = cache.local_one(&self.dev, self.pd.id(), s, false)
            && let Some(dst) = cache.remote_one(
                &peer.dev,
                peer.pd.id(),
                peer.qpn,
                rkey,
                remote_addr,
                s.length as usize,
                Access::REMOTE_WRITE,
            )
        {
            // SAFETY: both ranges lie inside live registered regions (held by the cache
            // entries, which stay while the send-queue lock is held); `copy` tolerates
            // overlap (loopback).
            unsafe { std::ptr::copy(src, dst, s.length as usize) };
            return Exec::Done(s.length);
        }
        self.exec_write_general(cache, peer, wr, remote_addr, rkey, deferred)
    }

    /// [`SQp::exec_write`] for every case its one-entry path does not take.
    #[inline(never)]
    fn exec_write_general(
        &self,
        cache: &mut KeyCache,
        peer: &Arc<SQp>,
        wr: &SendWr,
        remote_addr: u64,
        rkey: u32,
        deferred: &mut Option<Arc<SQp>>,
    ) -> Exec {
        let total = wr.sges.total_len() as usize;
        let mut src = Segs::new();
        let mut t = 0;
        let rs = cache.local(
            &mut t,
            &self.dev,
            self.pd.id(),
            wr.sges.as_slice(),
            false,
            &mut src,
        );
        let rd = cache.remote(
            &mut t,
            &peer.dev,
            peer.pd.id(),
            peer.qpn,
            rkey,
            remote_addr,
            total,
            Access::REMOTE_WRITE,
        );
        match (rs, rd) {
            (Resolve::Bad, _) => return Exec::Fail(WcStatus::LocProtErr),
            (Resolve::Ok, Ok(dst)) => {
                copy_segs(src.as_slice(), &[dst]);
                return Exec::Done(total as u32);
            }
            (Resolve::Ok, Err(Resolve::Bad)) => {
                Self::peer_failed(peer, deferred);
                return Exec::Fail(WcStatus::RemAccessErr);
            }
            _ => {}
        }
        let mine = self.dev.keys.read_recursive();
        let theirs = peer.dev.keys.read_recursive();
        if local_segs(&mine, self.pd.id(), wr.sges.as_slice(), false, &mut src).is_err() {
            return Exec::Fail(WcStatus::LocProtErr);
        }
        let Ok(dst) = remote_seg(
            &theirs,
            peer.pd.id(),
            peer.qpn,
            rkey,
            remote_addr,
            total,
            Access::REMOTE_WRITE,
        ) else {
            drop((mine, theirs));
            Self::peer_failed(peer, deferred);
            return Exec::Fail(WcStatus::RemAccessErr);
        };
        copy_segs(src.as_slice(), &[dst]);
        Exec::Done(total as u32)
    }

    #[inline(always)]
    fn exec_read(
        &self,
        cache: &mut KeyCache,
        peer: &Arc<SQp>,
        wr: &SendWr,
        remote_addr: u64,
        rkey: u32,
        deferred: &mut Option<Arc<SQp>>,
    ) -> Exec {
        if !matches!(peer.st(), ST_RTR | ST_RTS) {
            return Exec::Fail(WcStatus::RetryExcErr);
        }
        if peer.link.get().is_none_or(|l| l.max_dest_rd_atomic == 0) {
            // The responder accepted no RDMA READs (responder_resources 0).
            Self::peer_failed(peer, deferred);
            return Exec::Fail(WcStatus::RemInvReqErr);
        }
        // One entry, both keys cached and valid (every RDMA READ of the data path).
        if let [d] = wr.sges.as_slice()
            && let Some(src) = cache.remote_one(
                &peer.dev,
                peer.pd.id(),
                peer.qpn,
                rkey,
                remote_addr,
                d.length as usize,
                Access::REMOTE_READ,
            )
            && let Some(dst) = cache.local_one(&self.dev, self.pd.id(), d, true)
        {
            // SAFETY: as in `exec_write`.
            unsafe { std::ptr::copy(src, dst, d.length as usize) };
            return Exec::Done(d.length);
        }
        self.exec_read_general(cache, peer, wr, remote_addr, rkey, deferred)
    }

    /// [`SQp::exec_read`] for every case its one-entry path does not take.
    #[inline(never)]
    fn exec_read_general(
        &self,
        cache: &mut KeyCache,
        peer: &Arc<SQp>,
        wr: &SendWr,
        remote_addr: u64,
        rkey: u32,
        deferred: &mut Option<Arc<SQp>>,
    ) -> Exec {
        let total = wr.sges.total_len() as usize;
        let mut dst = Segs::new();
        let mut t = 0;
        let rs = cache.remote(
            &mut t,
            &peer.dev,
            peer.pd.id(),
            peer.qpn,
            rkey,
            remote_addr,
            total,
            Access::REMOTE_READ,
        );
        let rd = cache.local(
            &mut t,
            &self.dev,
            self.pd.id(),
            wr.sges.as_slice(),
            true,
            &mut dst,
        );
        match (rs, rd) {
            (Err(Resolve::Bad), _) => {
                Self::peer_failed(peer, deferred);
                return Exec::Fail(WcStatus::RemAccessErr);
            }
            (Ok(_), Resolve::Bad) => return Exec::Fail(WcStatus::LocProtErr),
            (Ok(src), Resolve::Ok) => {
                copy_segs(&[src], dst.as_slice());
                return Exec::Done(total as u32);
            }
            _ => {}
        }
        let mine = self.dev.keys.read_recursive();
        let theirs = peer.dev.keys.read_recursive();
        let Ok(src) = remote_seg(
            &theirs,
            peer.pd.id(),
            peer.qpn,
            rkey,
            remote_addr,
            total,
            Access::REMOTE_READ,
        ) else {
            drop((mine, theirs));
            Self::peer_failed(peer, deferred);
            return Exec::Fail(WcStatus::RemAccessErr);
        };
        if local_segs(&mine, self.pd.id(), wr.sges.as_slice(), true, &mut dst).is_err() {
            return Exec::Fail(WcStatus::LocProtErr);
        }
        copy_segs(&[src], dst.as_slice());
        Exec::Done(total as u32)
    }

    fn exec_bind(&self, b: &BindReq) -> Exec {
        let mut tab = self.dev.keys.write();
        let region = match tab.get((b.mr_key >> 8) as usize) {
            Some(KeyEntry::Mr {
                pd,
                key,
                region,
                access,
            }) if *key == b.mr_key
                && *pd == self.pd.id()
                && access.contains(Access::MW_BIND)
                && usize::try_from(b.len).is_ok_and(|l| region.contains(b.addr, l))
                && (!b.access.contains(Access::REMOTE_WRITE)
                    || access.contains(Access::LOCAL_WRITE)) =>
            {
                Arc::clone(region)
            }
            _ => return Exec::Fail(WcStatus::MwBindErr),
        };
        match tab.get_mut(b.mw_idx) {
            Some(KeyEntry::Mw { pd, key, bound })
                if *pd == self.pd.id()
                    && bound.is_none()
                    && (*key >> 8) == (b.new_key >> 8)
                    && (*key & 0xff) != (b.new_key & 0xff) =>
            {
                *key = b.new_key;
                *bound = Some(MwBinding {
                    qp_num: self.qpn,
                    region,
                    addr: b.addr,
                    len: b.len,
                    access: b.access,
                });
                self.dev.key_gen.fetch_add(1, Ordering::AcqRel);
                Exec::Done(0)
            }
            _ => Exec::Fail(WcStatus::MwBindErr),
        }
    }

    #[inline]
    pub(crate) fn post_send<'a, I>(self: &Arc<Self>, wrs: I) -> std::result::Result<(), PostError>
    where
        I: IntoIterator<Item = &'a SendWr>,
    {
        let mut deferred = None;
        let mut res = Ok(());
        {
            let mut sq = self.sq.lock();
            for (i, wr) in wrs.into_iter().enumerate() {
                if let Err(kind) = self.admit_send(&sq, wr.sges.len()) {
                    res = Err(PostError { posted: i, kind });
                    break;
                }
                self.enqueue_wr(&mut sq, wr, &mut deferred);
            }
        }
        if let Some(p) = deferred {
            p.enter_error();
        }
        res
    }

    #[inline]
    pub(crate) fn post_recv<'a, I>(self: &Arc<Self>, wrs: I) -> std::result::Result<(), PostError>
    where
        I: IntoIterator<Item = &'a RecvWr>,
    {
        if self.srq.is_some() {
            return Err(PostError {
                posted: 0,
                kind: PostErrorKind::InvalidWr,
            });
        }
        let mut res = Ok(());
        {
            let mut rq = self.rq.lock();
            for (i, wr) in wrs.into_iter().enumerate() {
                let kind = if wr.sges.len() > self.cap.max_recv_sge as usize {
                    Some(PostErrorKind::InvalidWr)
                } else if self.st() == ST_RESET {
                    Some(PostErrorKind::InvalidState)
                } else if rq.q.push_back(wr).is_err() {
                    Some(PostErrorKind::QueueFull)
                } else {
                    None
                };
                if let Some(kind) = kind {
                    res = Err(PostError { posted: i, kind });
                    break;
                }
            }
            if self.st() == ST_ERROR {
                self.flush_rq(&mut rq);
            }
        }
        self.wake_peer();
        res
    }

    fn post_bind(self: &Arc<Self>, b: BindReq) -> std::result::Result<(), PostError> {
        let mut deferred = None;
        let res = {
            let mut sq = self.sq.lock();
            match self.admit_send(&sq, 0) {
                Err(kind) => Err(PostError { posted: 0, kind }),
                Ok(()) => {
                    self.enqueue(&mut sq, Op::Bind(b), &mut deferred);
                    Ok(())
                }
            }
        };
        if let Some(p) = deferred {
            p.enter_error();
        }
        res
    }

    /// Connects two queue pairs (called by the connection manager on accept).
    pub(crate) fn connect_pair(
        a: &Arc<SQp>,
        a_rnr_retry: u8,
        a_resp_res: u8,
        b: &Arc<SQp>,
        b_rnr_retry: u8,
        b_resp_res: u8,
    ) -> Result<()> {
        let la = Link {
            peer: Arc::downgrade(b),
            peer_blocked: Arc::clone(&b.rnr_blocked),
            rnr_retry: a_rnr_retry.min(RNR_RETRY_INFINITE),
            max_dest_rd_atomic: a_resp_res,
        };
        let lb = Link {
            peer: Arc::downgrade(a),
            peer_blocked: Arc::clone(&a.rnr_blocked),
            rnr_retry: b_rnr_retry.min(RNR_RETRY_INFINITE),
            max_dest_rd_atomic: b_resp_res,
        };
        if a.link.set(la).is_err() || b.link.set(lb).is_err() {
            return Err(FabricError::InvalidState("queue pair already connected"));
        }
        a.sq.lock().peer = Some(Arc::clone(b));
        b.sq.lock().peer = Some(Arc::clone(a));
        for q in [a, b] {
            let _ = q
                .state
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                    matches!(s, ST_INIT | ST_RTR).then_some(ST_RTS)
                });
        }
        Ok(())
    }

    /// Destruction: the queue pair disappears (peers' requests fail with retry exceeded).
    fn destroy(self: &Arc<Self>) {
        self.state.store(ST_RESET, Ordering::Release);
        let peer = {
            let mut sq = self.sq.lock();
            sq.pending.clear();
            sq.cache = KeyCache::default();
            let mut rq = self.rq.lock();
            rq.q.clear();
            rq.cache = KeyCache::default();
            sq.peer.take()
        };
        // Break the reference cycle from the peer's side too (one send-queue lock at a time).
        if let Some(p) = peer {
            let mut psq = p.sq.lock();
            if psq.peer.as_ref().is_some_and(|q| Arc::ptr_eq(q, self)) {
                psq.peer = None;
            }
        }
    }
}

/// The sim side of a public [`Qp`]: the queue pair plus its identifier (kept alive as with
/// librdmacm, where the QP belongs to the id).
pub(crate) struct SQpHandle {
    qp: Arc<SQp>,
    id: Arc<SCmId>,
}

impl SQpHandle {
    pub(crate) fn create(id: &Arc<SCmId>, init: &QpInit<'_>) -> Result<Qp> {
        let PdImpl::Sim(pd) = &init.pd.0 else {
            return Err(FabricError::Mismatch("protection domain"));
        };
        let CqImpl::Sim(scq) = &init.send_cq.0 else {
            return Err(FabricError::Mismatch("send completion queue"));
        };
        let CqImpl::Sim(rcq) = &init.recv_cq.0 else {
            return Err(FabricError::Mismatch("receive completion queue"));
        };
        let srq = match init.srq {
            None => None,
            Some(s) => match &s.0 {
                SrqImpl::Sim(s) => Some(Arc::clone(s)),
                SrqImpl::Rdma(_) => return Err(FabricError::Mismatch("shared receive queue")),
            },
        };
        let dev = id.device().ok_or(FabricError::InvalidState(
            "cm id is not bound to a device (resolve or accept first)",
        ))?;
        if dev.is_removed() {
            return Err(FabricError::NoDevice(format!(
                "sim device {} was removed",
                dev.name()
            )));
        }
        if !Arc::ptr_eq(&dev, pd.device()) {
            return Err(FabricError::Mismatch(
                "protection domain is on another device",
            ));
        }
        if !Arc::ptr_eq(&dev, scq.device()) || !Arc::ptr_eq(&dev, rcq.device()) {
            return Err(FabricError::Mismatch(
                "completion queue is on another device",
            ));
        }
        if let Some(s) = &srq
            && !Arc::ptr_eq(&dev, s.pd().device())
        {
            return Err(FabricError::Mismatch(
                "shared receive queue is on another device",
            ));
        }
        let a = dev.attr();
        let c = init.cap;
        let max_sge = a.max_sge.min(MAX_SGE as u32);
        if c.max_send_wr == 0
            || c.max_send_wr > a.max_qp_wr
            || (srq.is_none() && (c.max_recv_wr == 0 || c.max_recv_wr > a.max_qp_wr))
            || c.max_send_sge > max_sge
            || (srq.is_none() && c.max_recv_sge > max_sge)
        {
            return Err(FabricError::InvalidArgument("queue pair capacities"));
        }
        let net = dev
            .net()
            .ok_or(FabricError::InvalidState("simulated network is gone"))?;
        let qpn = net
            .next_qpn
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            & 0x00ff_ffff;
        let cap = QpCap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: if srq.is_some() { 0 } else { c.max_recv_wr },
            max_send_sge: c.max_send_sge,
            max_recv_sge: if srq.is_some() { 0 } else { c.max_recv_sge },
            max_inline_data: 0,
        };
        let qp = Arc::new(SQp {
            qpn,
            dev: Arc::clone(&dev),
            pd: Arc::clone(pd),
            scq: Arc::clone(scq),
            rcq: Arc::clone(rcq),
            srq: srq.clone(),
            cap,
            sig_all: init.sq_sig_all,
            state: AtomicU8::new(ST_INIT),
            sq: Mutex::new(SendQ {
                pending: VecDeque::with_capacity(cap.max_send_wr as usize),
                outstanding: 0,
                unsignaled: 0,
                seq: 0,
                cache: KeyCache::default(),
                peer: None,
            }),
            rq: Mutex::new(RecvQ::new(
                cap.max_recv_wr as usize,
                cap.max_recv_sge as usize,
            )),
            rnr_blocked: Arc::new(AtomicBool::new(false)),
            link: OnceLock::new(),
            last_wqe: AtomicBool::new(false),
        });
        id.set_qp(&qp)?;
        net.register_qp(&qp);
        if let Some(s) = &srq {
            s.attach(&qp);
        }
        Ok(Qp(QpImpl::Sim(SQpHandle {
            qp,
            id: Arc::clone(id),
        })))
    }

    pub(crate) fn qp_num(&self) -> u32 {
        self.qp.qpn
    }

    pub(crate) fn cap(&self) -> QpCap {
        self.qp.cap
    }

    #[inline]
    pub(crate) fn post_send<'a, I>(&self, wrs: I) -> std::result::Result<(), PostError>
    where
        I: IntoIterator<Item = &'a SendWr>,
    {
        self.qp.post_send(wrs)
    }

    #[inline]
    pub(crate) fn post_recv<'a, I>(&self, wrs: I) -> std::result::Result<(), PostError>
    where
        I: IntoIterator<Item = &'a RecvWr>,
    {
        self.qp.post_recv(wrs)
    }

    pub(crate) fn post_bind_mw(
        &self,
        bind: &BindMw<'_>,
        mw: &SMw,
        mr: &SMr,
    ) -> std::result::Result<u32, PostError> {
        if !Arc::ptr_eq(mw.device(), &self.qp.dev) {
            return Err(PostError {
                posted: 0,
                kind: PostErrorKind::InvalidWr,
            });
        }
        let old = mw.rkey();
        let new = (old & !0xff) | (old.wrapping_add(1) & 0xff);
        self.qp.post_bind(BindReq {
            wr_id: bind.wr_id,
            signaled: bind.signaled,
            mw_idx: mw.index(),
            new_key: new,
            mr_key: mr.key(),
            addr: bind.addr,
            len: bind.length,
            access: bind.access,
        })?;
        mw.set_rkey(new);
        Ok(new)
    }

    pub(crate) fn modify_to_error(&self) {
        self.qp.enter_error();
    }

    pub(crate) fn state(&self) -> QpState {
        self.qp.state()
    }
}

impl Drop for SQpHandle {
    fn drop(&mut self) {
        self.qp.destroy();
        self.id.clear_qp(&self.qp);
        if let Some(net) = self.qp.dev.net() {
            net.unregister_qp(self.qp.qpn);
        }
    }
}
