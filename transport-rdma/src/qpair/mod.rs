//! Queue pairs on a poll group: what each holds, and [`RdmaPg::run_qpair`], the driver of
//! their [`lifecycle`] — closing for whatever reason, draining, destroying. Connection events
//! (CM notices, the device's fatal errors, the exec layer's disconnects) arrive here.

pub(crate) mod lifecycle;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use fabric::{CmId, Qp, RecvWr, SendWr};
use rdma_plumbing::WrId;
use rdma_plumbing::cm::CmNotice;
use rdma_plumbing::drain;
use target_core::nvme_exec::Queue;
use target_core::target::PgCore;

use crate::poll_group::RdmaPg;
use crate::request::lifecycle::Event as ReqEvent;
use crate::resources::{ResSet, kind};
use lifecycle::{Action, Actions, Event, Lifecycle};

/// How long a closing queue pair waits for its drain (the marker's completion, its receives'
/// flushes) before it is destroyed anyway. SRP's default `disconnect_timeout_ms`.
pub(crate) const DRAIN_TIMEOUT: Duration = Duration::from_secs(3);

/// One queue pair.
pub(crate) struct Qpair {
    /// Generation of the queue pair's slot (exec-layer key, marker and receive work requests).
    pub epoch: u16,
    /// Device poller index.
    pub dev: usize,
    pub id: CmId,
    pub qp: Option<Qp>,
    pub qp_num: u32,
    pub cm_handle: u64,
    /// The exec layer's queue.
    pub q: Queue,
    pub life: Lifecycle,
    /// The drain watchdog, while closing.
    pub deadline: Option<Instant>,
    pub read_depth: u32,
    pub sq_cap: u32,
    pub sq_used: u32,
    pub max_sge: usize,
    pub reads_out: u32,
    /// Without a shared receive queue: the queue pair's own receives and requests.
    pub res: Option<ResSet>,
    pub pending_send: VecDeque<u32>,
    pub pending_read: VecDeque<u32>,
    pub pending_write: VecDeque<u32>,
    pub parked: Vec<u32>,
    pub send_batch: Vec<SendWr>,
    pub recv_batch: Vec<RecvWr>,
    pub dirty: bool,
    /// Completion-queue room reserved for it, and on which queue.
    pub cq: usize,
    pub cq_cost: u32,
}

impl Qpair {
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending_send.is_empty()
            || !self.pending_read.is_empty()
            || !self.pending_write.is_empty()
            || self.res.as_ref().is_some_and(|r| !r.incoming.is_empty())
    }
}

impl RdmaPg {
    /// `(queue id, queue pair number)` of every live queue pair (tests and debugging).
    pub fn queue_pairs(&self) -> Vec<(u16, u32)> {
        self.qpairs
            .iter()
            .filter(|(_, q)| !q.life.is_closing())
            .map(|(_, q)| (q.q.qid(), q.qp_num))
            .collect()
    }

    /// Feeds `event` to queue pair `qk`'s lifecycle and carries out what it asks.
    #[inline]
    pub(crate) fn qpair_event(&mut self, core: &mut PgCore, qk: u32, event: Event) {
        let Some(qp) = self.qpairs.get_mut(qk as usize) else {
            return;
        };
        let out = qp.life.on(event);
        if !out.is_empty() {
            self.run_qpair(core, qk, out);
        }
    }

    /// Closes queue pair `qk` (whatever the reason; once).
    pub(crate) fn close(&mut self, core: &mut PgCore, qk: u32) {
        self.qpair_event(core, qk, Event::Close);
    }

    /// Carries out a queue pair lifecycle's actions, in order: the one place a queue pair's
    /// teardown happens.
    pub(crate) fn run_qpair(&mut self, core: &mut PgCore, qk: u32, out: Actions) {
        for a in out {
            let Some(qp) = self.qpairs.get_mut(qk as usize) else {
                return;
            };
            match a {
                Action::BeginClose => qp.q.begin_close(core),
                // Whatever was batched goes out first, so that it completes (with a flush
                // error) like everything else outstanding.
                Action::FlushBatches => self.flush_qp(core, qk),
                Action::Disconnect => {
                    if let Err(e) = qp.id.disconnect() {
                        tracing::debug!("rdma_disconnect: {e}");
                    }
                }
                Action::ToError => {
                    // Even if the connection manager refused: the marker must flush, never
                    // execute.
                    if let Some(q) = qp.qp.as_ref()
                        && let Err(e) = q.modify_to_error()
                    {
                        tracing::debug!("modify to error: {e}");
                    }
                }
                Action::PostMarker => {
                    let id = WrId::new(kind::MARKER, qk, qp.epoch).pack();
                    if !drain::post_marker(qp.qp.as_ref(), id) {
                        self.qpair_event(core, qk, Event::MarkerNotPosted);
                    }
                }
                Action::CloseRequests => self.close_requests(core, qk),
                Action::ArmWatchdog => {
                    if qp.deadline.is_none() {
                        self.draining += 1;
                    }
                    qp.deadline = Some(self.now + DRAIN_TIMEOUT);
                }
                Action::ReleaseLostSends => self.release_lost_sends(core, qk),
                Action::DestroyQp => {
                    self.drain_timeouts += 1;
                    tracing::warn!(
                        reactor = self.reactor,
                        qid = qp.q.qid(),
                        "RDMA queue pair not drained after {} ms; destroying it",
                        DRAIN_TIMEOUT.as_millis()
                    );
                    qp.qp = None;
                    // Its receives will not complete: they are the resource set's again.
                    if let Some(res) = qp.res.as_ref() {
                        for &rv in &res.recvs {
                            if let Some(r) = self.recvs.get_mut(rv as usize) {
                                r.posted = false;
                            }
                        }
                    }
                }
                Action::Destroy => self.destroy(core, qk),
            }
        }
    }

    /// Closes every request of a closing queue pair, and gives back the received commands
    /// that wait for a request.
    fn close_requests(&mut self, core: &mut PgCore, qk: u32) {
        let mine: Vec<u32> = self
            .reqs
            .iter()
            .filter(|(_, r)| r.qp == qk && !r.life.is_free())
            .map(|(k, _)| k as u32)
            .collect();
        for rk in mine {
            if self.reqs.get(rk as usize).is_some_and(|r| r.qp == qk) {
                self.drive(core, rk, ReqEvent::Close);
            }
        }
        let Some(qp) = self.qpairs.get_mut(qk as usize) else {
            return;
        };
        qp.parked.clear();
        let d = qp.dev;
        let waiting: Vec<u32> = match &mut qp.res {
            Some(r) => r.incoming.drain(..).collect(),
            None => match self.devs[d].as_mut().and_then(|p| p.res.as_mut()) {
                Some(r) => {
                    let (mine, rest): (Vec<u32>, Vec<u32>) = r
                        .incoming
                        .drain(..)
                        .partition(|&k| self.recvs[k as usize].qp == qk);
                    r.incoming.extend(rest);
                    mine
                }
                None => Vec::new(),
            },
        };
        for rv in waiting {
            self.repost(rv);
        }
    }

    /// The drain marker of closing queue pair `qk` completed (or the watchdog ended the
    /// drain): every send-queue work request posted before it is over (a send queue
    /// completes in order), so a request still waiting for a SEND or RDMA READ completion
    /// lost it. Free those requests rather than keep the queue pair (and the target's
    /// shutdown) waiting forever.
    fn release_lost_sends(&mut self, core: &mut PgCore, qk: u32) {
        let mine: Vec<u32> = self
            .reqs
            .iter()
            .filter(|(_, r)| r.qp == qk && !r.life.is_free())
            .map(|(k, _)| k as u32)
            .collect();
        for rk in mine {
            if self.reqs.get(rk as usize).is_some_and(|r| r.qp == qk) {
                let before = self.reqs[rk as usize].life.state();
                self.drive(core, rk, ReqEvent::SendsOver);
                if self.reqs[rk as usize].life.is_free() {
                    tracing::warn!(
                        rk,
                        ?before,
                        "a work completion never arrived; request released"
                    );
                }
            }
        }
    }

    /// The drain marker's completion.
    pub(crate) fn on_marker(&mut self, core: &mut PgCore, id: WrId, wc: &fabric::WorkCompletion) {
        let qk = id.key;
        let ours = self.qpairs.get(qk as usize).is_some_and(|qp| {
            qp.epoch == id.generation && qp.qp_num == wc.qp_num && qp.life.is_closing()
        });
        if ours {
            self.qpair_event(core, qk, Event::MarkerDone);
        }
    }

    /// Fires the drain watchdogs that are due.
    pub(crate) fn check_drain_deadlines(&mut self, core: &mut PgCore) {
        let now = self.now;
        let due: Vec<u32> = self
            .qpairs
            .iter()
            .filter(|(_, q)| q.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| k as u32)
            .collect();
        for qk in due {
            if let Some(qp) = self.qpairs.get_mut(qk as usize)
                && qp.deadline.take().is_some()
            {
                self.draining = self.draining.saturating_sub(1);
                self.qpair_event(core, qk, Event::DrainTimeout);
            }
        }
    }

    /// Removes a drained queue pair with no request left: queue pair first, then its CM
    /// identifier and its buffers.
    fn destroy(&mut self, core: &mut PgCore, qk: u32) {
        let Some(qp) = self.qpairs.get(qk as usize) else {
            return;
        };
        debug_assert!(qp.send_batch.is_empty() && qp.recv_batch.is_empty());
        let mut qp = self.qpairs.remove(qk as usize);
        if qp.deadline.take().is_some() {
            self.draining = self.draining.saturating_sub(1);
        }
        self.forget(&qp);
        if let Some(dp) = self.devs[qp.dev].as_mut() {
            dp.cqs.release(qp.cq, qp.cq_cost);
            dp.qpairs = dp.qpairs.saturating_sub(1);
        }
        qp.q.finish(core);
        tracing::debug!(
            reactor = self.reactor,
            qid = qp.q.qid(),
            "RDMA queue pair destroyed"
        );
        qp.qp = None;
        if let Some(r) = qp.res.take() {
            r.release(&mut self.reqs, &mut self.recvs);
        }
    }

    /// Removes queue pair `qp`'s entries from the lookup tables (this poll group's and the
    /// transport's).
    fn forget(&mut self, qp: &Qpair) {
        self.by_qpn.remove(&qp.qp_num);
        self.by_cm.remove(&qp.cm_handle);
        self.sh.routes.lock().remove(&qp.cm_handle);
        self.sh.qp_routes.lock().remove(&(qp.dev, qp.qp_num));
    }

    /// At shutdown, after the drains had their chance: destroys what is left.
    pub(crate) fn destroy_all(&mut self, core: &mut PgCore) {
        let left: Vec<u32> = self.qpairs.iter().map(|(k, _)| k as u32).collect();
        for qk in left {
            let mut qp = self.qpairs.remove(qk as usize);
            tracing::debug!(qid = qp.q.qid(), "RDMA queue pair destroyed at shutdown");
            self.forget(&qp);
            qp.q.finish(core);
            qp.qp = None;
        }
    }

    /// The device reported a fatal error on a queue pair of this group.
    pub(crate) fn qp_fatal(&mut self, core: &mut PgCore, dev: usize, qpn: u32) {
        let Some(&qk) = self.by_qpn.get(&qpn) else {
            return;
        };
        if self.qpairs[qk as usize].dev == dev {
            self.close(core, qk);
            self.flush(core);
        }
    }

    /// A connection-manager event for one of this group's connections.
    pub(crate) fn cm_notice(&mut self, core: &mut PgCore, handle: u64, notice: CmNotice) {
        let Some(&qk) = self.by_cm.get(&handle) else {
            return;
        };
        match notice {
            CmNotice::Established
            | CmNotice::TimewaitExit
            | CmNotice::Rejected
            | CmNotice::ConnectError => {}
            CmNotice::Disconnected | CmNotice::DeviceRemoval | CmNotice::AddrChange => {
                tracing::debug!(qk, ?notice, "RDMA connection event: closing");
                self.close(core, qk);
                self.flush(core);
            }
        }
    }

    /// Disconnects the queue pair named by a [`target_core::nvme_exec::QueueRef`] key (from the
    /// exec layer).
    pub(crate) fn disconnect_key(&mut self, core: &mut PgCore, key: u64) {
        if let Some(qk) = self.live_key(key) {
            self.close(core, qk);
            self.flush(core);
        }
    }

    /// The queue pair a generation-tagged connection key (`QueueRef::key`) names, if it is
    /// still that connection and not closing.
    pub(crate) fn live_key(&self, key: u64) -> Option<u32> {
        let qk = key as u32;
        let epoch = (key >> 32) as u16;
        self.qpairs
            .get(qk as usize)
            .is_some_and(|q| q.epoch == epoch && !q.life.is_closing())
            .then_some(qk)
    }
}
