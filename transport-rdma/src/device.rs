//! A device's poller on one poll group: its completion queue (behind a completion channel the
//! reactor watches) and, unless `no_srq` or the device has none, a shared receive queue with
//! its resource set (receives and the requests that pair with them), all receives posted
//! before the first connection is accepted. Created when the first connection on the device
//! arrives on this poll group.

use rdma_plumbing::{CompletionQueues, SharedRecvQueue};
use target_core::target::PgCore;

use crate::poll_group::RdmaPg;
use crate::resources::{Owner, ResSet};
use crate::stats::DevStats;

/// Smallest completion queue.
const MIN_CQE: u32 = 16384;

/// What a poll group keeps per device.
pub(crate) struct DevPoller {
    pub cqs: CompletionQueues,
    pub srq: Option<SharedRecvQueue>,
    /// The shared receive queue's receives and requests.
    pub res: Option<ResSet>,
    pub stats: DevStats,
    /// Queue pairs on this device.
    pub qpairs: u32,
}

impl RdmaPg {
    /// The poller of device `d`, created on first use.
    pub(crate) fn device_poller(&mut self, core: &mut PgCore, d: usize) -> Result<(), String> {
        if self.devs[d].is_some() {
            return Ok(());
        }
        let dev = &self.sh.devices[d];
        let o = &self.sh.opts;
        let use_srq = !o.no_srq && dev.attr.max_srq > 0 && dev.attr.max_srq_wr > 1;
        let srq_depth = o.max_srq_depth.min(dev.attr.max_srq_wr.max(1));
        let want = if use_srq {
            3 * srq_depth
        } else {
            o.num_cqe.max(1) as u32
        };
        let cq_size = want.max(MIN_CQE).min(dev.attr.max_cqe.max(1));
        let mut cqs = CompletionQueues::fixed(&dev.device, cq_size)
            .map_err(|e| format!("completion queue of {cq_size} on {}: {e}", dev.name))?;
        let mut stats = DevStats::default();
        let (srq, res) = if use_srq {
            let mut srq = SharedRecvQueue::new(&dev.pd, srq_depth, 2)
                .map_err(|e| format!("shared receive queue on {}: {e}", dev.name))?;
            let res = ResSet::new(
                dev,
                srq_depth as usize,
                o.in_capsule_data_size as usize,
                Owner::Dev(d),
                &mut self.reqs,
                &mut self.recvs,
                &mut self.epoch,
            )?;
            // Every receive is posted before the first connection is accepted; the shared
            // queue's receives reserve completion-queue room of their own.
            // Each receive's work request is kept in a slot of the queue: a repost queues
            // the slot, nothing is built or copied.
            for &k in &res.recvs {
                let recv = &mut self.recvs[k as usize];
                if let Some(wr) = recv.wr(k, 0) {
                    let slot = srq.add_slot(wr);
                    recv.srq_slot = slot;
                    srq.push_slot(slot);
                }
            }
            let flushed = srq.flush(|_| {});
            if let Some(e) = flushed.and_then(|f| f.error) {
                res.release(&mut self.reqs, &mut self.recvs);
                return Err(format!("posting receives on {}: {e}", dev.name));
            }
            for &k in &res.recvs {
                self.recvs[k as usize].posted = true;
            }
            stats.total_recv_wrs += res.recvs.len() as u64;
            stats.recv_doorbell_updates += 1;
            if cqs.reserve(srq_depth).is_err() {
                res.release(&mut self.reqs, &mut self.recvs);
                return Err(format!(
                    "completion queue of {cq_size} on {} cannot take {srq_depth} receives",
                    dev.name
                ));
            }
            (Some(srq), Some(res))
        } else {
            (None, None)
        };
        core.watch_fd(cqs.fd());
        tracing::debug!(
            reactor = self.reactor,
            device = dev.name,
            cq_size,
            srq = use_srq,
            srq_depth,
            "RDMA device poller created"
        );
        self.devs[d] = Some(DevPoller {
            cqs,
            srq,
            res,
            stats,
            qpairs: 0,
        });
        Ok(())
    }
}
