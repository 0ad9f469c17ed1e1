//! Accepting a connection on the poll group the listener chose: queue depths from the host's
//! request and the device, the queue pair on the device's completion queue (and shared
//! receive queue), its own receives posted without one, the exec layer's queue, and the CM
//! accept with the NVMe/RDMA private data.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;

use fabric::{CmId, ConnParam, QpCap, QpInit, RecvWr};
use target_core::nvme_exec::{Queue, QueueRef};
use target_core::target::{ListenAddr, PgCore};

use crate::cm_data::{ConnectRequestData, RejectStatus, accept_record};
use crate::poll_group::RdmaPg;
use crate::qpair::Qpair;
use crate::qpair::lifecycle::{Event as QpEvent, Lifecycle};
use crate::resources::{Owner, ResSet};

/// A connection handed over by the listener.
pub(crate) struct NewConn {
    pub id: CmId,
    pub data: ConnectRequestData,
    pub listen: ListenAddr,
    pub local: SocketAddr,
    pub peer: SocketAddr,
    pub initiator_depth: u8,
}

impl RdmaPg {
    /// Takes a connection handed over by the listener: creates its queue pair on this poll
    /// group's completion queue, posts receives, and accepts.
    pub(crate) fn add_connection(&mut self, core: &mut PgCore, c: NewConn) {
        let reject = |id: &CmId, why: &str| {
            tracing::warn!(peer = %c.peer, "RDMA connection refused: {why}");
            let _ = id.reject(&RejectStatus::NoResources.encode());
        };
        let Some(d) = c.id.device().and_then(|dev| self.sh.device_index(&dev)) else {
            return reject(&c.id, "unknown RDMA device");
        };
        if let Err(e) = self.device_poller(core, d) {
            return reject(&c.id, &e);
        }
        let sh = Arc::clone(&self.sh);
        let dev = &sh.devices[d];
        let o = &sh.opts;
        let limit = if c.data.qid == 0 {
            o.max_aq_depth
        } else {
            u32::from(o.max_queue_depth)
        };
        let qd = limit
            .min(dev.attr.max_qp_wr.max(2))
            .min(u32::from(c.data.hrqsize))
            .min(u32::from(c.data.hsqsize) + 1)
            .max(1);
        let read_depth = u32::from(o.max_queue_depth)
            .min(dev.attr.max_qp_init_rd_atom.max(1))
            .min(u32::from(c.initiator_depth))
            .max(1);
        let send_wr = (2 * qd + 1).min(dev.attr.max_qp_wr.max(2));
        let dp = self.devs[d].as_mut().expect("created above");
        let use_srq = dp.srq.is_some();
        let cq_cost = send_wr + if use_srq { 0 } else { qd + 1 };
        let cq = match dp.cqs.reserve(cq_cost) {
            Ok(cq) => cq,
            Err(e) => return reject(&c.id, &e.to_string()),
        };
        let unreserve = |pg: &mut RdmaPg| {
            if let Some(dp) = pg.devs[d].as_mut() {
                dp.cqs.release(cq, cq_cost);
            }
        };
        let qk = self.qpairs.vacant_key() as u32;
        let res = if use_srq {
            None
        } else {
            match ResSet::new(
                dev,
                qd as usize,
                o.in_capsule_data_size as usize,
                Owner::Qp(qk),
                &mut self.reqs,
                &mut self.recvs,
                &mut self.epoch,
            ) {
                Ok(r) => Some(r),
                Err(e) => {
                    unreserve(self);
                    return reject(&c.id, &e);
                }
            }
        };
        let dp = self.devs[d].as_mut().expect("created above");
        let init = QpInit {
            pd: &dev.pd,
            send_cq: dp.cqs.cq(cq),
            recv_cq: dp.cqs.cq(cq),
            srq: dp.srq.as_ref().map(|s| s.srq()),
            cap: QpCap {
                max_send_wr: send_wr,
                max_recv_wr: if use_srq { 1 } else { qd + 1 },
                max_send_sge: dev.attr.max_sge.clamp(1, fabric::MAX_SGE as u32),
                max_recv_sge: 2,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        };
        let qp = match c.id.create_qp(&init) {
            Ok(qp) => qp,
            Err(e) => {
                if let Some(r) = res {
                    r.release(&mut self.reqs, &mut self.recvs);
                }
                unreserve(self);
                return reject(&c.id, &format!("cannot create a queue pair: {e}"));
            }
        };
        let cap = qp.cap();
        let sq_cap = cap.max_send_wr.min(send_wr).saturating_sub(1).max(1);
        let qp_num = qp.qp_num();
        self.epoch = self.epoch.wrapping_add(1);
        let epoch = self.epoch;
        let mut life = Lifecycle::new(!use_srq);
        if let Some(r) = &res {
            let wrs: Vec<RecvWr> = r
                .recvs
                .iter()
                .filter_map(|&k| self.recvs[k as usize].wr(k, epoch))
                .collect();
            if let Err(e) = qp.post_recv(wrs.iter()) {
                drop(qp);
                if let Some(r) = res {
                    r.release(&mut self.reqs, &mut self.recvs);
                }
                unreserve(self);
                return reject(&c.id, &format!("cannot post receives: {e}"));
            }
            for &k in &r.recvs {
                self.recvs[k as usize].posted = true;
            }
            let n = r.recvs.len() as u32;
            life.on(QpEvent::ReceivesPosted(n));
            if let Some(dp) = self.devs[d].as_mut() {
                dp.stats.total_recv_wrs += u64::from(n);
                dp.stats.recv_doorbell_updates += 1;
            }
        }
        let me = QueueRef {
            reactor: self.reactor,
            transport: sh.index,
            key: u64::from(qk) | u64::from(epoch) << 32,
        };
        let q = Queue::new(core, me, c.data.qid, c.listen.clone(), c.local, c.peer);
        let private = accept_record(qd as u16);
        let param = ConnParam {
            private_data: &private,
            responder_resources: 0,
            initiator_depth: read_depth.min(255) as u8,
            retry_count: 7,
            rnr_retry_count: fabric::RNR_RETRY_INFINITE,
        };
        let cm_handle = c.id.handle();
        let mut qpair = Qpair {
            epoch,
            dev: d,
            id: c.id,
            qp: Some(qp),
            qp_num,
            cm_handle,
            q,
            life,
            deadline: None,
            read_depth,
            sq_cap,
            sq_used: 0,
            max_sge: (cap.max_send_sge as usize).clamp(1, fabric::MAX_SGE),
            reads_out: 0,
            res,
            pending_send: VecDeque::with_capacity(qd as usize),
            pending_read: VecDeque::with_capacity(qd as usize),
            pending_write: VecDeque::with_capacity(qd as usize),
            parked: Vec::with_capacity(8),
            send_batch: Vec::with_capacity(sq_cap as usize + 1),
            recv_batch: Vec::with_capacity(qd as usize + 1),
            dirty: false,
            cq,
            cq_cost,
        };
        if let Err(e) = qpair.id.accept(&param) {
            tracing::warn!(peer = %c.peer, "RDMA accept failed: {e}");
            qpair.q.finish(core);
            qpair.qp = None;
            if let Some(r) = qpair.res.take() {
                r.release(&mut self.reqs, &mut self.recvs);
            }
            unreserve(self);
            self.sh.routes.lock().remove(&cm_handle);
            return;
        }
        tracing::debug!(
            reactor = self.reactor,
            qid = c.data.qid,
            qd,
            read_depth,
            sq_cap,
            peer = %c.peer,
            "RDMA queue pair accepted"
        );
        if let Some(dp) = self.devs[d].as_mut() {
            dp.qpairs += 1;
        }
        let k = self.qpairs.insert(qpair) as u32;
        debug_assert_eq!(k, qk);
        self.by_qpn.insert(qp_num, qk);
        self.by_cm.insert(cm_handle, qk);
        self.sh.qp_routes.lock().insert((d, qp_num), self.reactor);
    }
}
