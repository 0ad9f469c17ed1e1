//! Posting: the work requests a poll collects (receives given back, RDMA READs, WRITEs and
//! SENDs) go to the adapter together at its end, one doorbell per queue (on soft-RoCE a
//! doorbell is a system call), unless `no_wr_batching`. What the adapter refuses completes as
//! flushed, like a queue pair in the error state.

use fabric::{PostError, WcStatus, WorkCompletion};
use rdma_plumbing::WrId;
use target_core::target::PgCore;

use crate::poll_group::RdmaPg;
use crate::qpair::lifecycle::Event as QpEvent;

impl RdmaPg {
    /// Queue pair `qk` has work requests batched: post them at the end of the poll (at once
    /// with `no_wr_batching`).
    pub(crate) fn mark_dirty(&mut self, core: &mut PgCore, qk: u32) {
        let qp = &mut self.qpairs[qk as usize];
        if self.sh.opts.no_wr_batching {
            self.flush_qp(core, qk);
        } else if !qp.dirty {
            qp.dirty = true;
            self.dirty.push(qk);
        }
    }

    /// Posts what is batched for one queue pair.
    pub(crate) fn flush_qp(&mut self, core: &mut PgCore, qk: u32) {
        let Some(qp) = self.qpairs.get_mut(qk as usize) else {
            return;
        };
        qp.dirty = false;
        let Some(dp) = self.devs[qp.dev].as_mut() else {
            return;
        };
        let mut unposted = 0;
        if !qp.recv_batch.is_empty() {
            // Never post receives to a queue pair in the error state.
            let posted = if qp.life.is_closing() {
                Ok(0)
            } else if let Some(q) = qp.qp.as_ref() {
                let n = qp.recv_batch.len();
                let res = q.post_recv(qp.recv_batch.iter());
                dp.stats.recv_doorbell_updates += 1;
                let posted = res.as_ref().map_or_else(|e| e.posted, |_| n);
                dp.stats.total_recv_wrs += posted as u64;
                match res {
                    Ok(()) => Ok(n),
                    Err(e) => {
                        tracing::error!("posting receives: {e}");
                        Err(posted)
                    }
                }
            } else {
                Ok(0)
            };
            let from = match posted {
                Ok(n) | Err(n) => n,
            };
            // What was not posted is the resource set's again; the queue pair stops counting it.
            for wr in &qp.recv_batch[from..] {
                if let Some(r) = self.recvs.get_mut(WrId::unpack(wr.wr_id).key as usize) {
                    r.posted = false;
                }
            }
            unposted = qp.recv_batch.len() - from;
            qp.recv_batch.clear();
        }
        if !qp.send_batch.is_empty() {
            let n = qp.send_batch.len();
            let res: Result<(), PostError> = match qp.qp.as_ref() {
                Some(q) => q.post_send(qp.send_batch.iter()),
                None => Err(PostError {
                    posted: 0,
                    kind: fabric::PostErrorKind::InvalidState,
                }),
            };
            dp.stats.send_doorbell_updates += 1;
            let posted = res.as_ref().map_or_else(|e| e.posted, |_| n);
            dp.stats.total_send_wrs += posted as u64;
            if let Err(e) = res {
                if !qp.life.is_closing() {
                    tracing::error!("posting send work requests: {e}");
                }
                // What was not posted completes as flushed, like a queue pair in error.
                for wr in &qp.send_batch[posted..] {
                    self.synth.push(WorkCompletion {
                        wr_id: wr.wr_id,
                        status: WcStatus::WrFlushErr,
                        qp_num: qp.qp_num,
                        ..WorkCompletion::default()
                    });
                }
            }
            qp.send_batch.clear();
        }
        for _ in 0..unposted {
            self.qpair_event(core, qk, QpEvent::ReceiveDone);
        }
    }

    /// Posts every batch of the poll: the shared receive queues' first (a receive goes back
    /// before the response that lets the host use it), then each dirty queue pair's.
    pub(crate) fn flush(&mut self, core: &mut PgCore) {
        for d in 0..self.devs.len() {
            let Some(dp) = self.devs[d].as_mut() else {
                continue;
            };
            let Some(srq) = dp.srq.as_mut() else {
                continue;
            };
            let recvs = &mut self.recvs;
            let Some(f) = srq.flush(|wr| {
                if let Some(r) = recvs.get_mut(WrId::unpack(wr.wr_id).key as usize) {
                    r.posted = false;
                }
            }) else {
                continue;
            };
            dp.stats.recv_doorbell_updates += 1;
            dp.stats.total_recv_wrs += f.posted as u64;
            if let Some(e) = f.error {
                tracing::error!("posting shared receives: {e}");
            }
        }
        while let Some(qk) = self.dirty.pop() {
            self.flush_qp(core, qk);
        }
    }
}
