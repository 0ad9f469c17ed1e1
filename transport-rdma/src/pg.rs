//! The RDMA poll group: everything of the transport that lives on one reactor.
//!
//! Per device in use it keeps a completion queue with a completion channel (watched by the
//! reactor) and, unless `no_srq`, a shared receive queue with its resource set. Queue pairs,
//! requests and receives live in slabs owned by the poll group. Each poll:
//!
//! 1. hands completed bdev I/O back to their requests;
//! 2. polls every completion queue in batches of 32 and advances the requests they concern;
//! 3. retries requests whose bdev was busy;
//! 4. replays waiting requests per queue pair in SPDK's fixed order: responses waiting for
//!    send-queue slots, RDMA READs waiting for slots or READ credits, RDMA WRITEs (+ response)
//!    waiting for slots, requests waiting for data buffers, then received commands waiting for
//!    a free request;
//! 5. posts the receives and the send work requests collected during the poll, one doorbell
//!    per queue (unless `no_wr_batching`).
//!
//! Teardown of a queue pair moves it to the error state, posts a zero-length signaled RDMA
//! WRITE as a marker, frees what waits, and destroys the queue pair only when the marker has
//! completed, every request is free (bdev I/O included) and, without a shared receive queue,
//! every receive has flushed. Nothing is freed while the adapter or a bdev may still use it.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::{
    CmId, CompChannel, ConnParam, Cq, PostError, Qp, QpCap, QpInit, RecvWr, SendWr, Sge, SgeList,
    Srq, WcStatus, WorkCompletion,
};
use iobuf::BufCache;
use serde_json::{Value, json};
use slab::Slab;
use target_core::bdev::BdevIo;
use target_core::nvme::Direction;
use target_core::nvme::sgl::DataSgl;
use target_core::nvme::spec::{CQE_SIZE, SQE_SIZE};
use target_core::nvme::{Sqe, Status};
use target_core::nvme_exec::{self, AerDone, NvmeAction, NvmeCtx, Queue, QueueRef};
use target_core::reactor::{PollStatus, PollerId, ReactorCtx};
use target_core::registry::TransportPollGroup;
use target_core::target::{ListenAddr, PgCore, with_transport_pg};

use crate::cm_data::{ConnectRequestData, RejectStatus, accept_record};
use crate::opts::{LARGE_BUF_SIZE, RdmaOpts, SMALL_BUF_SIZE};
use crate::res::*;
use crate::transport::{DevCtx, Shared};
use crate::wr;

/// Completions taken per `poll_cq` call.
const WC_BATCH: usize = 32;
/// Most completions handled per device per poll (fairness with other pollers).
const WC_PER_POLL: usize = 256;
/// Period of the keep-alive timer poller: an expired KATO is noticed within this much (the
/// smallest KATO is `min_kato`, 10 s by default). It is also how often an idle reactor with
/// connected controllers wakes up, so it stays coarse: at 200 ms the wake-ups of 16 idle
/// queue pairs cost 0.8 % of a vCPU in the soft-RoCE guest.
const TIMER_PERIOD: Duration = Duration::from_secs(1);
/// Smallest completion queue.
const MIN_CQE: u32 = 16384;

/// Hashes queue pair numbers (looked up per received command with a shared receive queue):
/// one multiplication instead of SipHash.
#[derive(Default)]
struct QpnHasher(u64);

impl Hasher for QpnHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A connection handed over by the acceptor.
pub(crate) struct NewConn {
    pub id: CmId,
    pub data: ConnectRequestData,
    pub listen: ListenAddr,
    pub local: SocketAddr,
    pub peer: SocketAddr,
    pub initiator_depth: u8,
}

/// A connection-manager event forwarded by the acceptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmNotice {
    Established,
    Disconnected,
    DeviceRemoval,
    AddrChange,
}

/// Counters of one device poller (SPDK's RDMA `nvmf_get_stats` fields).
#[derive(Debug, Default, Clone)]
pub struct DevStats {
    /// Completion-queue polls.
    pub polls: u64,
    /// Polls that found nothing.
    pub idle_polls: u64,
    /// Work completions handled.
    pub completions: u64,
    /// Commands received.
    pub requests: u64,
    /// Sum of command latencies (receive to response completion), in ns.
    pub request_latency: u64,
    /// Times a received command waited for a free request.
    pub pending_free_request: u64,
    /// Times an RDMA READ waited for slots or credits.
    pub pending_rdma_read: u64,
    /// Times an RDMA WRITE waited for slots.
    pub pending_rdma_write: u64,
    /// Times a response waited for a slot.
    pub pending_rdma_send: u64,
    /// Send work requests posted.
    pub total_send_wrs: u64,
    /// Send-queue doorbells.
    pub send_doorbell_updates: u64,
    /// Receive work requests posted.
    pub total_recv_wrs: u64,
    /// Receive-queue doorbells.
    pub recv_doorbell_updates: u64,
}

struct DevPoller {
    chan: CompChannel,
    cq: Cq,
    srq: Option<Srq>,
    res: Option<ResSet>,
    srq_batch: Vec<RecvWr>,
    cq_size: u32,
    cq_used: u32,
    stash: [WorkCompletion; WC_BATCH],
    stash_len: usize,
    stats: DevStats,
    qpairs: u32,
}

struct Qpair {
    epoch: u16,
    dev: usize,
    id: CmId,
    qp: Option<Qp>,
    qp_num: u32,
    cm_handle: u64,
    q: Queue,
    read_depth: u32,
    sq_cap: u32,
    sq_used: u32,
    max_sge: usize,
    reads_out: u32,
    closing: bool,
    marker_done: bool,
    reqs_out: u32,
    recvs_posted: u32,
    res: Option<ResSet>,
    pending_send: VecDeque<u32>,
    pending_read: VecDeque<u32>,
    pending_write: VecDeque<u32>,
    parked: Vec<u32>,
    send_batch: Vec<SendWr>,
    recv_batch: Vec<RecvWr>,
    dirty: bool,
    cq_cost: u32,
}

impl Qpair {
    fn has_pending(&self) -> bool {
        !self.pending_send.is_empty()
            || !self.pending_read.is_empty()
            || !self.pending_write.is_empty()
            || self.res.as_ref().is_some_and(|r| !r.incoming.is_empty())
    }
}

/// Resource counts of a poll group, for leak checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PgResources {
    /// Queue pairs alive (including closing ones).
    pub qpairs: usize,
    /// Request slots.
    pub requests: usize,
    /// Request slots in use.
    pub requests_busy: usize,
    /// Receive slots.
    pub receives: usize,
    /// Receive slots posted to the adapter.
    pub receives_posted: usize,
    /// Small data buffers cached by the poll group.
    pub cached_small: usize,
    /// Large data buffers cached by the poll group.
    pub cached_large: usize,
}

/// The RDMA transport's state on one reactor.
pub struct RdmaPg {
    sh: Arc<Shared>,
    reactor: usize,
    devs: Vec<Option<DevPoller>>,
    qpairs: Slab<Qpair>,
    by_qpn: HashMap<u32, u32, BuildHasherDefault<QpnHasher>>,
    by_cm: HashMap<u64, u32>,
    reqs: Slab<Req>,
    recvs: Slab<Recv>,
    small: BufCache,
    large: BufCache,
    pending_buf: VecDeque<u32>,
    bdev_retry: VecDeque<u32>,
    synth: Vec<WorkCompletion>,
    dirty: Vec<u32>,
    wcs: [WorkCompletion; WC_BATCH],
    timer: Option<PollerId>,
    now: Instant,
    now_ns: u64,
    epoch: u16,
    pending_data_buffer: u64,
}

impl std::fmt::Debug for RdmaPg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaPg")
            .field("reactor", &self.reactor)
            .field("qpairs", &self.qpairs.len())
            .finish()
    }
}

impl RdmaPg {
    pub(crate) fn new(sh: Arc<Shared>, core: &mut PgCore) -> Self {
        let groups = sh.reactors.len();
        let small = BufCache::new(
            Arc::clone(&sh.small),
            RdmaOpts::cache_size(sh.opts.iobuf_small_cache_size, sh.small.total(), groups),
        );
        let large = BufCache::new(
            Arc::clone(&sh.large),
            RdmaOpts::cache_size(sh.opts.iobuf_large_cache_size, sh.large.total(), groups),
        );
        let ndev = sh.devices.len();
        Self {
            reactor: core.index(),
            devs: (0..ndev).map(|_| None).collect(),
            qpairs: Slab::new(),
            by_qpn: HashMap::default(),
            by_cm: HashMap::new(),
            reqs: Slab::new(),
            recvs: Slab::new(),
            small,
            large,
            pending_buf: VecDeque::with_capacity(256),
            bdev_retry: VecDeque::with_capacity(256),
            synth: Vec::with_capacity(256),
            dirty: Vec::with_capacity(64),
            wcs: [WorkCompletion::default(); WC_BATCH],
            timer: None,
            now: Instant::now(),
            now_ns: 0,
            epoch: (core.index() as u16).wrapping_mul(0x3d),
            pending_data_buffer: 0,
            sh,
        }
    }

    /// Resource counts, for leak checks in tests.
    pub fn resources(&self) -> PgResources {
        PgResources {
            qpairs: self.qpairs.len(),
            requests: self.reqs.len(),
            requests_busy: self
                .reqs
                .iter()
                .filter(|(_, r)| r.state != RState::Free)
                .count(),
            receives: self.recvs.len(),
            receives_posted: self.recvs.iter().filter(|(_, r)| r.posted).count(),
            cached_small: self.small.cached(),
            cached_large: self.large.cached(),
        }
    }

    /// `(queue id, queue pair number)` of every live queue pair (tests and debugging).
    pub fn queue_pairs(&self) -> Vec<(u16, u32)> {
        self.qpairs
            .iter()
            .filter(|(_, q)| !q.closing)
            .map(|(_, q)| (q.q.qid(), q.qp_num))
            .collect()
    }

    /// Registers the keep-alive timer poller on this reactor if it is not running.
    pub(crate) fn ensure_timer(rctx: &mut ReactorCtx, index: usize) {
        let need = with_transport_pg::<RdmaPg, _>(rctx, index, |pg, _| pg.timer.is_none());
        if need != Some(true) {
            return;
        }
        let me: Rc<Cell<Option<PollerId>>> = Rc::new(Cell::new(None));
        let me2 = Rc::clone(&me);
        let id = rctx
            .poller("nvmf_rdma_timer")
            .period(TIMER_PERIOD)
            .register(move |ctx| {
                let now = ctx.now();
                let r = with_transport_pg::<RdmaPg, _>(ctx, index, |pg, core| pg.tick(core, now));
                let stop = match r {
                    None => true,
                    Some(keep) => !keep,
                };
                if stop && let Some(id) = me2.get() {
                    ctx.unregister_poller(id);
                }
                PollStatus::Idle
            });
        me.set(Some(id));
        with_transport_pg::<RdmaPg, _>(rctx, index, |pg, _| pg.timer = Some(id));
    }

    /// The timer: keep-alive expiry of admin queues. Returns whether the timer should keep
    /// running (there are queue pairs).
    fn tick(&mut self, core: &mut PgCore, now: Instant) -> bool {
        let expired: Vec<u32> = self
            .qpairs
            .iter()
            .filter(|(_, qp)| qp.q.keep_alive_expired(now))
            .map(|(k, _)| k as u32)
            .collect();
        for qk in expired {
            tracing::warn!(
                peer = %self.qpairs[qk as usize].q.describe("RDMA")["peer_address"]["traddr"],
                "keep-alive or authentication timeout: disconnecting"
            );
            self.start_close(core, qk);
        }
        self.flush(core);
        if self.qpairs.is_empty() {
            self.timer = None;
            false
        } else {
            true
        }
    }

    // ------------------------------------------------------------------ connections

    fn device_poller(&mut self, core: &mut PgCore, d: usize) -> Result<(), String> {
        if self.devs[d].is_some() {
            return Ok(());
        }
        let dev = &self.sh.devices[d];
        let o = &self.sh.opts;
        let chan = dev
            .device
            .create_comp_channel()
            .map_err(|e| format!("completion channel on {}: {e}", dev.name))?;
        let use_srq = !o.no_srq && dev.attr.max_srq > 0 && dev.attr.max_srq_wr > 1;
        let srq_depth = o.max_srq_depth.min(dev.attr.max_srq_wr.max(1));
        let want = if use_srq {
            3 * srq_depth
        } else {
            o.num_cqe.max(1) as u32
        };
        let cq_size = want.max(MIN_CQE).min(dev.attr.max_cqe.max(1));
        let cq = dev
            .device
            .create_cq(cq_size, Some(&chan))
            .map_err(|e| format!("completion queue of {cq_size} on {}: {e}", dev.name))?;
        let (srq, res, cq_used) = if use_srq {
            let srq = dev
                .pd
                .create_srq(srq_depth, 2)
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
            // Every receive is posted before the first connection is accepted.
            let wrs: Vec<RecvWr> = res
                .recvs
                .iter()
                .filter_map(|&k| self.recvs[k as usize].wr(k))
                .collect();
            srq.post_recv(wrs.iter())
                .map_err(|e| format!("posting receives on {}: {e}", dev.name))?;
            for &k in &res.recvs {
                self.recvs[k as usize].posted = true;
            }
            (Some(srq), Some(res), srq_depth)
        } else {
            (None, None, 0)
        };
        cq.req_notify(false)
            .map_err(|e| format!("arming the completion queue on {}: {e}", dev.name))?;
        core.watch_fd(chan.fd());
        tracing::debug!(
            reactor = self.reactor,
            device = dev.name,
            cq_size,
            srq = use_srq,
            srq_depth,
            "RDMA device poller created"
        );
        let mut stats = DevStats::default();
        if let Some(r) = &res {
            stats.total_recv_wrs += r.recvs.len() as u64;
            stats.recv_doorbell_updates += 1;
        }
        self.devs[d] = Some(DevPoller {
            chan,
            cq,
            srq,
            res,
            srq_batch: Vec::with_capacity(srq_depth as usize),
            cq_size,
            cq_used,
            stash: [WorkCompletion::default(); WC_BATCH],
            stash_len: 0,
            stats,
            qpairs: 0,
        });
        Ok(())
    }

    /// Takes a connection handed over by the acceptor: creates its queue pair on this poll
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
        if dp.cq_used + cq_cost > dp.cq_size {
            return reject(&c.id, "completion queue full");
        }
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
                Err(e) => return reject(&c.id, &e),
            }
        };
        let dp = self.devs[d].as_mut().expect("created above");
        let init = QpInit {
            pd: &dev.pd,
            send_cq: &dp.cq,
            recv_cq: &dp.cq,
            srq: dp.srq.as_ref(),
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
                return reject(&c.id, &format!("cannot create a queue pair: {e}"));
            }
        };
        let cap = qp.cap();
        let sq_cap = cap.max_send_wr.min(send_wr).saturating_sub(1).max(1);
        let qp_num = qp.qp_num();
        let mut recvs_posted = 0;
        if let Some(r) = &res {
            let wrs: Vec<RecvWr> = r
                .recvs
                .iter()
                .filter_map(|&k| self.recvs[k as usize].wr(k))
                .collect();
            if let Err(e) = qp.post_recv(wrs.iter()) {
                drop(qp);
                if let Some(r) = res {
                    r.release(&mut self.reqs, &mut self.recvs);
                }
                return reject(&c.id, &format!("cannot post receives: {e}"));
            }
            for &k in &r.recvs {
                self.recvs[k as usize].posted = true;
            }
            recvs_posted = r.recvs.len() as u32;
            dp.stats.total_recv_wrs += u64::from(recvs_posted);
            dp.stats.recv_doorbell_updates += 1;
        }
        self.epoch = self.epoch.wrapping_add(1);
        let epoch = self.epoch;
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
            read_depth,
            sq_cap,
            sq_used: 0,
            max_sge: (cap.max_send_sge as usize).clamp(1, fabric::MAX_SGE),
            reads_out: 0,
            closing: false,
            marker_done: false,
            reqs_out: 0,
            recvs_posted,
            res,
            pending_send: VecDeque::with_capacity(qd as usize),
            pending_read: VecDeque::with_capacity(qd as usize),
            pending_write: VecDeque::with_capacity(qd as usize),
            parked: Vec::with_capacity(8),
            send_batch: Vec::with_capacity(sq_cap as usize + 1),
            recv_batch: Vec::with_capacity(qd as usize + 1),
            dirty: false,
            cq_cost,
        };
        if let Err(e) = qpair.id.accept(&param) {
            tracing::warn!(peer = %c.peer, "RDMA accept failed: {e}");
            qpair.q.finish(core);
            qpair.qp = None;
            if let Some(r) = qpair.res.take() {
                r.release(&mut self.reqs, &mut self.recvs);
            }
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
        dp.cq_used += cq_cost;
        dp.qpairs += 1;
        let k = self.qpairs.insert(qpair) as u32;
        debug_assert_eq!(k, qk);
        self.by_qpn.insert(qp_num, qk);
        self.by_cm.insert(cm_handle, qk);
        self.sh.qp_routes.lock().insert((d, qp_num), self.reactor);
    }

    /// The device reported a fatal error on a queue pair of this group.
    pub(crate) fn qp_fatal(&mut self, core: &mut PgCore, dev: usize, qpn: u32) {
        let Some(&qk) = self.by_qpn.get(&qpn) else {
            return;
        };
        if self.qpairs[qk as usize].dev == dev {
            self.start_close(core, qk);
            self.flush(core);
        }
    }

    /// A connection-manager event for one of this group's connections.
    pub(crate) fn cm_notice(&mut self, core: &mut PgCore, handle: u64, notice: CmNotice) {
        let Some(&qk) = self.by_cm.get(&handle) else {
            return;
        };
        match notice {
            CmNotice::Established => {}
            CmNotice::Disconnected | CmNotice::DeviceRemoval | CmNotice::AddrChange => {
                tracing::debug!(qk, ?notice, "RDMA connection event: closing");
                self.start_close(core, qk);
                self.flush(core);
            }
        }
    }

    /// Disconnects the queue pair named by a [`QueueRef`] key (from the exec layer).
    pub(crate) fn disconnect_key(&mut self, core: &mut PgCore, key: u64) {
        let qk = (key & KEY_MASK) as u32;
        let epoch = (key >> 32) as u16;
        if self
            .qpairs
            .get(qk as usize)
            .is_some_and(|q| q.epoch == epoch && !q.closing)
        {
            self.start_close(core, qk);
            self.flush(core);
        }
    }

    // ------------------------------------------------------------------ teardown

    fn start_close(&mut self, core: &mut PgCore, qk: u32) {
        let Some(qp) = self.qpairs.get_mut(qk as usize) else {
            return;
        };
        if qp.closing {
            return;
        }
        qp.closing = true;
        qp.q.begin_close(core);
        // Whatever was batched for this queue pair goes out first, so that it completes (with
        // a flush error) like everything else outstanding.
        self.flush_qp(qk);
        let qp = &mut self.qpairs[qk as usize];
        if let Err(e) = qp.id.disconnect() {
            tracing::debug!("rdma_disconnect: {e}");
        }
        // Make sure of the error state even if the connection manager refused (the marker
        // below must flush, never execute).
        if let Some(q) = qp.qp.as_ref()
            && let Err(e) = q.modify_to_error()
        {
            tracing::debug!("modify to error: {e}");
        }
        let marker = SendWr::rdma_write(K_MARKER | u64::from(qk), SgeList::new(), 0, 0);
        let posted = qp
            .qp
            .as_ref()
            .is_some_and(|q| q.post_send([&marker]).is_ok());
        if !posted {
            qp.marker_done = true;
        }
        // Free what waits; what the adapter or a bdev holds is freed when it comes back.
        let mine: Vec<u32> = self
            .reqs
            .iter()
            .filter(|(_, r)| r.qp == qk && r.state != RState::Free)
            .map(|(k, _)| k as u32)
            .collect();
        for rk in mine {
            match self.reqs[rk as usize].state {
                RState::NeedBuffer => {
                    self.pending_buf.retain(|&k| k != rk);
                    self.free_request(core, rk);
                }
                RState::H2cPending => {
                    self.qpairs[qk as usize].pending_read.retain(|&k| k != rk);
                    let r = &mut self.reqs[rk as usize];
                    r.state = RState::H2c;
                    r.wrs = r.posted;
                    r.failed = true;
                    if r.done == r.posted {
                        self.free_request(core, rk);
                    }
                }
                RState::C2hPending => {
                    self.qpairs[qk as usize].pending_write.retain(|&k| k != rk);
                    self.free_request(core, rk);
                }
                RState::SendPending => {
                    self.qpairs[qk as usize].pending_send.retain(|&k| k != rk);
                    self.free_request(core, rk);
                }
                RState::Busy => {
                    self.bdev_retry.retain(|&k| k != rk);
                    self.free_request(core, rk);
                }
                RState::Queued | RState::Parked => self.free_request(core, rk),
                RState::H2c | RState::Executing | RState::Completing | RState::Free => {}
            }
        }
        self.qpairs[qk as usize].parked.clear();
        // Received commands that never got a request.
        let d = self.qpairs[qk as usize].dev;
        let waiting: Vec<u32> = match &mut self.qpairs[qk as usize].res {
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
        self.try_destroy(core, qk);
    }

    fn try_destroy(&mut self, core: &mut PgCore, qk: u32) {
        let Some(qp) = self.qpairs.get(qk as usize) else {
            return;
        };
        if !(qp.closing && qp.marker_done && qp.reqs_out == 0 && qp.recvs_posted == 0) {
            return;
        }
        if !qp.recv_batch.is_empty() || !qp.send_batch.is_empty() {
            return;
        }
        let mut qp = self.qpairs.remove(qk as usize);
        self.by_qpn.remove(&qp.qp_num);
        self.by_cm.remove(&qp.cm_handle);
        self.sh.routes.lock().remove(&qp.cm_handle);
        self.sh.qp_routes.lock().remove(&(qp.dev, qp.qp_num));
        if let Some(dp) = self.devs[qp.dev].as_mut() {
            dp.cq_used = dp.cq_used.saturating_sub(qp.cq_cost);
            dp.qpairs = dp.qpairs.saturating_sub(1);
        }
        qp.q.finish(core);
        tracing::debug!(
            reactor = self.reactor,
            qid = qp.q.qid(),
            "RDMA queue pair destroyed"
        );
        // The queue pair goes before its identifier and its buffers.
        qp.qp = None;
        if let Some(r) = qp.res.take() {
            r.release(&mut self.reqs, &mut self.recvs);
        }
    }

    // ------------------------------------------------------------------ requests

    /// Reposts a receive slot (its in-capsule buffer must be home).
    fn repost(&mut self, rv: u32) {
        let Some(recv) = self.recvs.get_mut(rv as usize) else {
            return;
        };
        if recv.posted {
            return;
        }
        let Some(wr) = recv.wr(rv) else {
            tracing::error!(rv, "receive reposted without its in-capsule buffer");
            return;
        };
        match recv.owner {
            Owner::Dev(d) => {
                if let Some(dp) = self.devs[d].as_mut() {
                    recv.posted = true;
                    dp.srq_batch.push(wr);
                }
            }
            Owner::Qp(qk) => {
                let Some(qp) = self.qpairs.get_mut(qk as usize) else {
                    return;
                };
                if qp.closing {
                    return;
                }
                recv.posted = true;
                qp.recv_batch.push(wr);
                qp.recvs_posted += 1;
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

    /// Frees a request that holds no adapter or bdev resource.
    fn free_request(&mut self, core: &mut PgCore, rk: u32) {
        nvme_exec::abandon(core, &mut self.reqs[rk as usize].ex);
        self.return_recv(rk);
        self.return_buffers(rk);
        let r = &mut self.reqs[rk as usize];
        debug_assert!(r.ex.io.is_some(), "request freed while its bdev I/O is out");
        let qk = r.qp;
        r.state = RState::Free;
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
        if let Some(qp) = self.qpairs.get_mut(qk as usize) {
            qp.reqs_out = qp.reqs_out.saturating_sub(1);
        }
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

    /// A received command meets a free request.
    fn start(&mut self, core: &mut PgCore, rv: u32, rk: u32) {
        enum Next {
            Ready,
            Buffer,
            Respond,
        }
        let (qk, len) = {
            let recv = &self.recvs[rv as usize];
            (recv.qp, recv.len)
        };
        let sqe = Sqe::from_bytes(self.recvs[rv as usize].cmd.as_slice());
        let live = self.qpairs.get(qk as usize).is_some_and(|q| !q.closing);
        let (Some(sqe), true) = (sqe, live) else {
            // The queue pair is going away: give both back.
            self.unclaim(rk);
            self.repost(rv);
            return;
        };
        let icd_cap = self.sh.opts.in_capsule_data_size;
        let next = {
            let qp = &mut self.qpairs[qk as usize];
            qp.reqs_out += 1;
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
            r.wrs = 0;
            r.posted = 0;
            r.done = 0;
            r.failed = false;
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
                    Next::Respond
                }
                Ok(dir) => {
                    r.dir = dir;
                    match &r.ex.sgl {
                        DataSgl::None => Next::Ready,
                        DataSgl::InCapsule { offset, len } => {
                            let (offset, len) = (*offset as usize, *len as usize);
                            match (recv.icd.take(), r.ex.io.as_mut()) {
                                (Some(mut b), Some(io)) if offset + len <= b.capacity() => {
                                    b.set_window(offset, len);
                                    io.bufs.push(b);
                                    r.data = Data::InCapsule;
                                    Next::Ready
                                }
                                (b, _) => {
                                    recv.icd = b;
                                    r.ex.cqe = qp.q.cqe(&sqe, Status::INTERNAL_ERROR);
                                    Next::Respond
                                }
                            }
                        }
                        DataSgl::Keyed(_) | DataSgl::KeyedList(_) => {
                            if dir == Direction::None {
                                Next::Ready
                            } else {
                                r.state = RState::NeedBuffer;
                                Next::Buffer
                            }
                        }
                        DataSgl::Transport { .. } => {
                            r.ex.cqe = qp.q.cqe(&sqe, Status::SGL_TYPE_INVALID);
                            Next::Respond
                        }
                    }
                }
            }
        };
        match next {
            Next::Ready => self.ready(core, rk),
            Next::Buffer => {
                self.need_buffer(core, rk, false);
            }
            Next::Respond => self.respond(rk),
        }
    }

    /// Takes data buffers for a request; `from_queue` when replaying the pending queue.
    /// Returns whether it got them.
    fn need_buffer(&mut self, core: &mut PgCore, rk: u32, from_queue: bool) -> bool {
        if !from_queue && !self.pending_buf.is_empty() {
            self.pending_buf.push_back(rk);
            return false;
        }
        if !self.alloc_buffers(rk) {
            if !from_queue {
                self.pending_buf.push_back(rk);
            }
            self.pending_data_buffer += 1;
            return false;
        }
        if self.reqs[rk as usize].dir != Direction::HostToController {
            self.ready(core, rk);
            return true;
        }
        let planned = {
            let r = &mut self.reqs[rk as usize];
            let qp = &mut self.qpairs[r.qp as usize];
            let n = r.ex.io.as_ref().and_then(|io| {
                wr::count(wr::remote(&r.ex.sgl), &io.bufs, r.ex.sgl.len(), qp.max_sge)
            });
            match n {
                Some(n) => {
                    r.wrs = n;
                    r.posted = 0;
                    r.done = 0;
                    r.state = RState::H2cPending;
                    qp.pending_read.push_back(rk);
                    true
                }
                None => {
                    r.ex.cqe = qp.q.cqe(&r.ex.sqe, Status::INTERNAL_ERROR);
                    false
                }
            }
        };
        if !planned {
            tracing::error!("cannot plan the RDMA READs of a request");
            self.respond(rk);
        }
        true
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

    fn ready(&mut self, core: &mut PgCore, rk: u32) {
        let Self {
            reqs, qpairs, sh, ..
        } = self;
        let r = &mut reqs[rk as usize];
        let qk = r.qp;
        let qp = &mut qpairs[qk as usize];
        let mut cx = NvmeCtx::new(core, &sh.info, self.now);
        let out = nvme_exec::execute(&mut cx, &mut qp.q, &mut r.ex);
        let aers = std::mem::take(&mut cx.aer_done);
        self.after_exec(rk, out);
        for a in aers {
            self.complete_parked(qk, a);
        }
    }

    fn after_exec(&mut self, rk: u32, out: NvmeAction) {
        let r = &mut self.reqs[rk as usize];
        match out {
            NvmeAction::Complete => self.respond(rk),
            NvmeAction::Submitted => r.state = RState::Executing,
            NvmeAction::Queued => r.state = RState::Queued,
            NvmeAction::Parked => {
                r.state = RState::Parked;
                self.qpairs[r.qp as usize].parked.push(rk);
            }
            NvmeAction::Busy => {
                r.state = RState::Busy;
                self.bdev_retry.push_back(rk);
            }
        }
    }

    fn complete_parked(&mut self, qk: u32, a: AerDone) {
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
        self.respond(rk);
    }

    /// The request has its completion: queue the data transfer and the response.
    fn respond(&mut self, rk: u32) {
        let r = &mut self.reqs[rk as usize];
        let cqe = r.ex.cqe.encode();
        r.rsp.as_mut_slice()[..CQE_SIZE].copy_from_slice(&cqe);
        let qp = &mut self.qpairs[r.qp as usize];
        if r.ex.data_len > 0 && r.dir == Direction::ControllerToHost && r.data == Data::Pool {
            let n = r.ex.io.as_ref().and_then(|io| {
                wr::count(wr::remote(&r.ex.sgl), &io.bufs, r.ex.data_len, qp.max_sge)
            });
            if let Some(n) = n {
                r.wrs = n;
                r.state = RState::C2hPending;
                qp.pending_write.push_back(rk);
                return;
            }
            tracing::error!("cannot plan the data transfer of a response");
            r.ex.cqe.status = Status::INTERNAL_ERROR;
            r.rsp.as_mut_slice()[..CQE_SIZE].copy_from_slice(&r.ex.cqe.encode());
        }
        r.wrs = 0;
        r.state = RState::SendPending;
        qp.pending_send.push_back(rk);
    }

    // ------------------------------------------------------------------ posting

    fn mark_dirty(&mut self, qk: u32) {
        let qp = &mut self.qpairs[qk as usize];
        if self.sh.opts.no_wr_batching {
            self.flush_qp(qk);
        } else if !qp.dirty {
            qp.dirty = true;
            self.dirty.push(qk);
        }
    }

    /// Posts the RDMA READs it can for the head of the read queue; returns whether any.
    fn pump_reads(&mut self, qk: u32) -> bool {
        let mut progress = false;
        loop {
            let qp = &mut self.qpairs[qk as usize];
            let Some(&rk) = qp.pending_read.front() else {
                break;
            };
            let r = &mut self.reqs[rk as usize];
            let left = u32::from(r.wrs - r.posted);
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
            let (from, to) = (u32::from(r.posted), u32::from(r.posted) + n);
            let mut i = 0u32;
            let id = K_READ | u64::from(rk);
            if let Some(io) = r.ex.io.as_ref() {
                let batch = &mut qp.send_batch;
                wr::plan(
                    wr::remote(&r.ex.sgl),
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
            r.posted += n as u16;
            qp.reads_out += n;
            qp.sq_used += n;
            progress = true;
            let all = r.posted == r.wrs;
            if all {
                qp.pending_read.pop_front();
                r.state = RState::H2c;
            }
            self.mark_dirty(qk);
            if !all {
                break;
            }
        }
        progress
    }

    /// Posts the response chain (RDMA WRITEs if any, then the SEND) for the head of a queue.
    fn post_response(&mut self, qk: u32, rk: u32) -> bool {
        let need = u32::from(self.reqs[rk as usize].wrs) + 1;
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
        if r.wrs > 0 {
            let dev = &self.sh.devices[qp.dev];
            let id = K_WRITE | u64::from(rk);
            if let Some(io) = r.ex.io.as_ref() {
                let batch = &mut qp.send_batch;
                wr::plan(
                    wr::remote(&r.ex.sgl),
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
        let id = K_SEND | u64::from(rk);
        let wr = match r.ex.sgl.invalidate_key() {
            Some(k) => SendWr::send_with_inv(id, SgeList::one(sge), k),
            None => SendWr::send(id, SgeList::one(sge)),
        };
        qp.send_batch.push(wr);
        qp.sq_used += need;
        r.send_slots = need as u16;
        r.state = RState::Completing;
        self.mark_dirty(qk);
        true
    }

    /// Posts what is batched for one queue pair.
    fn flush_qp(&mut self, qk: u32) {
        let Some(qp) = self.qpairs.get_mut(qk as usize) else {
            return;
        };
        qp.dirty = false;
        let Some(dp) = self.devs[qp.dev].as_mut() else {
            return;
        };
        if !qp.recv_batch.is_empty() {
            if qp.closing {
                // Never post receives to a queue pair in the error state.
                for wr in qp.recv_batch.drain(..) {
                    if let Some(r) = self.recvs.get_mut((wr.wr_id & KEY_MASK) as usize) {
                        r.posted = false;
                    }
                    qp.recvs_posted = qp.recvs_posted.saturating_sub(1);
                }
            } else if let Some(q) = qp.qp.as_ref() {
                let n = qp.recv_batch.len();
                let res = q.post_recv(qp.recv_batch.iter());
                dp.stats.recv_doorbell_updates += 1;
                let posted = res.as_ref().map_or_else(|e| e.posted, |_| n);
                dp.stats.total_recv_wrs += posted as u64;
                if let Err(e) = res {
                    tracing::error!("posting receives: {e}");
                    for wr in &qp.recv_batch[posted..] {
                        if let Some(r) = self.recvs.get_mut((wr.wr_id & KEY_MASK) as usize) {
                            r.posted = false;
                        }
                        qp.recvs_posted = qp.recvs_posted.saturating_sub(1);
                    }
                }
                qp.recv_batch.clear();
            }
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
                if !qp.closing {
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
    }

    fn flush(&mut self, _core: &mut PgCore) {
        for d in 0..self.devs.len() {
            let Some(dp) = self.devs[d].as_mut() else {
                continue;
            };
            if dp.srq_batch.is_empty() {
                continue;
            }
            let n = dp.srq_batch.len();
            let res = match dp.srq.as_ref() {
                Some(s) => s.post_recv(dp.srq_batch.iter()),
                None => Ok(()),
            };
            dp.stats.recv_doorbell_updates += 1;
            let posted = res.as_ref().map_or_else(|e| e.posted, |_| n);
            dp.stats.total_recv_wrs += posted as u64;
            if let Err(e) = res {
                tracing::error!("posting shared receives: {e}");
                for wr in &dp.srq_batch[posted..] {
                    if let Some(r) = self.recvs.get_mut((wr.wr_id & KEY_MASK) as usize) {
                        r.posted = false;
                    }
                }
            }
            dp.srq_batch.clear();
        }
        while let Some(qk) = self.dirty.pop() {
            self.flush_qp(qk);
        }
    }

    // ------------------------------------------------------------------ completions

    /// Whether a send-queue completion for request `rk` belongs to the request as it is now
    /// (it is on a queue pair, and that queue pair is the one the completion names). A request
    /// released when its queue pair's drain marker completed may still see a completion the
    /// adapter (or a fault) delivered out of order: it is ignored.
    fn owns_wc(&self, rk: u32, wc: &WorkCompletion) -> bool {
        self.reqs
            .get(rk as usize)
            .and_then(|r| self.qpairs.get(r.qp as usize))
            .is_some_and(|q| q.qp_num == wc.qp_num)
    }

    /// The drain marker of closing queue pair `qk` completed: every send-queue work request
    /// posted before it has completed too (a send queue completes in order), so a request
    /// still waiting for a SEND or RDMA READ completion lost it. Release those requests rather
    /// than keep the queue pair (and the target's shutdown) waiting forever.
    fn release_lost_sends(&mut self, core: &mut PgCore, qk: u32) {
        let lost: Vec<u32> = self
            .reqs
            .iter()
            .filter(|(_, r)| {
                r.qp == qk
                    && (r.state == RState::Completing
                        || (r.state == RState::H2c && r.done < r.posted))
            })
            .map(|(k, _)| k as u32)
            .collect();
        for rk in lost {
            tracing::warn!(rk, "a work completion never arrived; releasing its request");
            self.free_request(core, rk);
        }
    }

    fn on_wc(&mut self, core: &mut PgCore, wc: WorkCompletion) {
        let key = (wc.wr_id & KEY_MASK) as u32;
        let kind = wc.wr_id & KIND_MASK;
        if matches!(kind, K_SEND | K_READ | K_WRITE) && !self.owns_wc(key, &wc) {
            tracing::debug!(wr_id = wc.wr_id, "completion for a released request");
            return;
        }
        match kind {
            K_RECV => self.on_recv(core, key, wc),
            K_SEND => self.on_send(core, key, wc),
            K_READ => self.on_read(core, key, wc),
            K_WRITE => {
                // WRITEs are unsignaled: only errors arrive; the SEND after them reports too.
                if wc.status != WcStatus::WrFlushErr
                    && let Some(r) = self.reqs.get(key as usize)
                {
                    tracing::warn!(status = ?wc.status, "RDMA WRITE failed");
                    let qk = r.qp;
                    self.start_close(core, qk);
                }
            }
            K_MARKER => {
                if let Some(qp) = self.qpairs.get_mut(key as usize)
                    && qp.qp_num == wc.qp_num
                    && qp.closing
                {
                    qp.marker_done = true;
                    self.release_lost_sends(core, key);
                    self.try_destroy(core, key);
                }
            }
            _ => tracing::error!(
                wr_id = wc.wr_id,
                "completion with an unknown work request id"
            ),
        }
    }

    fn on_recv(&mut self, core: &mut PgCore, rv: u32, wc: WorkCompletion) {
        let Some(recv) = self.recvs.get_mut(rv as usize) else {
            return;
        };
        recv.posted = false;
        let owner = recv.owner;
        let qk = match owner {
            Owner::Qp(q) => {
                if let Some(qp) = self.qpairs.get_mut(q as usize) {
                    qp.recvs_posted = qp.recvs_posted.saturating_sub(1);
                }
                Some(q)
            }
            Owner::Dev(_) => self.by_qpn.get(&wc.qp_num).copied(),
        };
        let shared = matches!(owner, Owner::Dev(_));
        if !wc.status.is_success() {
            if let Some(q) = qk {
                if wc.status != WcStatus::WrFlushErr {
                    tracing::warn!(status = ?wc.status, "receive failed");
                    self.start_close(core, q);
                }
                self.try_destroy(core, q);
            }
            if shared {
                self.repost(rv);
            }
            return;
        }
        let live = qk.filter(|&q| self.qpairs.get(q as usize).is_some_and(|qp| !qp.closing));
        let Some(q) = live else {
            if shared {
                self.repost(rv);
            }
            if let Some(q) = qk {
                self.try_destroy(core, q);
            }
            return;
        };
        if (wc.byte_len as usize) < SQE_SIZE {
            tracing::warn!(len = wc.byte_len, "received capsule shorter than a command");
            if shared {
                self.repost(rv);
            }
            self.start_close(core, q);
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

    fn on_send(&mut self, core: &mut PgCore, rk: u32, wc: WorkCompletion) {
        let Some(r) = self.reqs.get(rk as usize) else {
            return;
        };
        if r.state != RState::Completing {
            tracing::error!(rk, state = ?r.state, "SEND completion for a request not completing");
            return;
        }
        let qk = r.qp;
        let slots = u32::from(r.send_slots);
        let latency = self.now_ns.saturating_sub(r.started);
        let disconnect = r.ex.disconnect_after;
        if let Some(qp) = self.qpairs.get_mut(qk as usize) {
            qp.sq_used = qp.sq_used.saturating_sub(slots);
            if let Some(dp) = self.devs[qp.dev].as_mut() {
                dp.stats.request_latency += latency;
            }
        }
        if !wc.status.is_success() && wc.status != WcStatus::WrFlushErr {
            tracing::warn!(status = ?wc.status, "response SEND failed");
            self.start_close(core, qk);
        }
        self.free_request(core, rk);
        if disconnect {
            self.start_close(core, qk);
        }
        self.try_destroy(core, qk);
    }

    fn on_read(&mut self, core: &mut PgCore, rk: u32, wc: WorkCompletion) {
        let Some(r) = self.reqs.get_mut(rk as usize) else {
            return;
        };
        let qk = r.qp;
        r.done += 1;
        if !wc.status.is_success() {
            r.failed = true;
        }
        let finished = r.state == RState::H2c && r.done >= r.posted;
        let failed = r.failed;
        let closing = match self.qpairs.get_mut(qk as usize) {
            Some(qp) => {
                qp.sq_used = qp.sq_used.saturating_sub(1);
                qp.reads_out = qp.reads_out.saturating_sub(1);
                qp.closing
            }
            None => true,
        };
        if !wc.status.is_success() && wc.status != WcStatus::WrFlushErr {
            tracing::warn!(status = ?wc.status, "RDMA READ failed");
            self.start_close(core, qk);
        }
        if finished {
            if failed || closing {
                self.free_request(core, rk);
                self.try_destroy(core, qk);
            } else {
                self.ready(core, rk);
            }
        }
    }

    fn io_done(&mut self, core: &mut PgCore, io: Box<BdevIo>) {
        let (rk, epoch) = Req::split(io.tag);
        let ok = self
            .reqs
            .get(rk as usize)
            .is_some_and(|r| r.epoch == epoch && r.state == RState::Executing && r.ex.io.is_none());
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
        let qk = self.reqs[rk as usize].qp;
        if self.qpairs.get(qk as usize).is_none_or(|q| q.closing) {
            let r = &mut self.reqs[rk as usize];
            r.ex.io = Some(io);
            self.free_request(core, rk);
            self.try_destroy(core, qk);
            return;
        }
        let Self {
            reqs, qpairs, sh, ..
        } = self;
        let r = &mut reqs[rk as usize];
        let qp = &mut qpairs[qk as usize];
        let mut cx = NvmeCtx::new(core, &sh.info, self.now);
        let out = nvme_exec::io_done(&mut cx, &mut qp.q, &mut r.ex, io);
        self.after_exec(rk, out);
    }

    fn poll_cq(&mut self, core: &mut PgCore, d: usize) -> usize {
        let mut total = 0;
        // Completions found while arming come first.
        let stashed = match self.devs[d].as_mut() {
            Some(dp) => {
                let n = dp.stash_len;
                dp.stash_len = 0;
                self.wcs[..n].copy_from_slice(&dp.stash[..n]);
                n
            }
            None => return 0,
        };
        for i in 0..stashed {
            let wc = self.wcs[i];
            self.on_wc(core, wc);
        }
        total += stashed;
        while let Some(dp) = self.devs[d].as_mut() {
            let n = dp.cq.poll(&mut self.wcs);
            dp.stats.polls += 1;
            if n == 0 && total == 0 {
                dp.stats.idle_polls += 1;
            }
            dp.stats.completions += n as u64;
            for i in 0..n {
                let wc = self.wcs[i];
                self.on_wc(core, wc);
            }
            total += n;
            if n < WC_BATCH || total >= WC_PER_POLL {
                break;
            }
        }
        total
    }

    /// Replays waiting requests in SPDK's order; returns how many moved.
    fn process_pending(&mut self, core: &mut PgCore) -> usize {
        let mut n = 0;
        let keys: smallvec_keys::Keys = smallvec_keys::Keys::of(&self.qpairs, |q| q.has_pending());
        for &qk in keys.as_slice() {
            // 1. Responses waiting for a send slot.
            while let Some(&rk) = self
                .qpairs
                .get(qk as usize)
                .and_then(|q| q.pending_send.front())
            {
                if !self.post_response(qk, rk) {
                    break;
                }
                self.qpairs[qk as usize].pending_send.pop_front();
                n += 1;
            }
            // 2. RDMA READs.
            if self.pump_reads(qk) {
                n += 1;
            }
            // 3. RDMA WRITEs with their responses.
            while let Some(&rk) = self
                .qpairs
                .get(qk as usize)
                .and_then(|q| q.pending_write.front())
            {
                if !self.post_response(qk, rk) {
                    break;
                }
                self.qpairs[qk as usize].pending_write.pop_front();
                n += 1;
            }
        }
        // 4. Requests waiting for data buffers, in arrival order.
        while let Some(&rk) = self.pending_buf.front() {
            if !self.need_buffer(core, rk, true) {
                break;
            }
            self.pending_buf.pop_front();
            n += 1;
        }
        // 5. Received commands waiting for a free request.
        for d in 0..self.devs.len() {
            while let Some(res) = self.devs[d].as_mut().and_then(|p| p.res.as_mut()) {
                if res.incoming.is_empty() || res.free_reqs.is_empty() {
                    break;
                }
                let (Some(rv), Some(rk)) = (res.incoming.pop_front(), res.free_reqs.pop()) else {
                    break;
                };
                self.start(core, rv, rk);
                n += 1;
            }
        }
        for &qk in keys.as_slice() {
            while let Some(res) = self
                .qpairs
                .get_mut(qk as usize)
                .and_then(|q| q.res.as_mut())
            {
                if res.incoming.is_empty() || res.free_reqs.is_empty() {
                    break;
                }
                let (Some(rv), Some(rk)) = (res.incoming.pop_front(), res.free_reqs.pop()) else {
                    break;
                };
                self.start(core, rv, rk);
                n += 1;
            }
        }
        n
    }

    fn retry_bdev(&mut self, core: &mut PgCore) -> usize {
        let n = self.bdev_retry.len();
        for _ in 0..n {
            let Some(rk) = self.bdev_retry.pop_front() else {
                break;
            };
            let qk = self.reqs[rk as usize].qp;
            let Self {
                reqs, qpairs, sh, ..
            } = self;
            let r = &mut reqs[rk as usize];
            let Some(qp) = qpairs.get_mut(qk as usize) else {
                continue;
            };
            let mut cx = NvmeCtx::new(core, &sh.info, self.now);
            let out = nvme_exec::resubmit(&mut cx, &mut qp.q, &mut r.ex);
            self.after_exec(rk, out);
        }
        n
    }

    fn has_pending(&self) -> bool {
        !self.pending_buf.is_empty()
            || !self.bdev_retry.is_empty()
            || !self.synth.is_empty()
            || self.qpairs.iter().any(|(_, q)| q.has_pending())
            || self.devs.iter().flatten().any(|d| {
                d.stash_len > 0
                    || d.res
                        .as_ref()
                        .is_some_and(|r| !r.incoming.is_empty() && !r.free_reqs.is_empty())
            })
    }

    fn stats_json(&self) -> Value {
        let devices: Vec<Value> = self
            .sh
            .devices
            .iter()
            .enumerate()
            .map(|(i, dev)| {
                let s = self.devs[i]
                    .as_ref()
                    .map(|d| d.stats.clone())
                    .unwrap_or_default();
                dev_stats_json(dev, &s)
            })
            .collect();
        json!({
            "trtype": "RDMA",
            "pending_data_buffer": self.pending_data_buffer,
            "devices": devices,
        })
    }
}

fn dev_stats_json(dev: &DevCtx, s: &DevStats) -> Value {
    json!({
        "name": dev.name,
        "polls": s.polls,
        "idle_polls": s.idle_polls,
        "completions": s.completions,
        "requests": s.requests,
        "request_latency": s.request_latency,
        "pending_free_request": s.pending_free_request,
        "pending_rdma_read": s.pending_rdma_read,
        "pending_rdma_write": s.pending_rdma_write,
        "pending_rdma_send": s.pending_rdma_send,
        "total_send_wrs": s.total_send_wrs,
        "send_doorbell_updates": s.send_doorbell_updates,
        "total_recv_wrs": s.total_recv_wrs,
        "recv_doorbell_updates": s.recv_doorbell_updates,
    })
}

/// Queue-pair keys collected without allocating for the usual few queue pairs.
mod smallvec_keys {
    use arrayvec::ArrayVec;
    use slab::Slab;

    const INLINE: usize = 64;

    // Lives on the stack for one poll; the inline variant is the point.
    #[allow(clippy::large_enum_variant)]
    pub(super) enum Keys {
        Inline(ArrayVec<u32, INLINE>),
        Heap(Vec<u32>),
    }

    impl Keys {
        pub fn of<T>(slab: &Slab<T>, pred: impl Fn(&T) -> bool) -> Keys {
            let mut v = ArrayVec::new();
            for (k, t) in slab.iter() {
                if pred(t) && v.try_push(k as u32).is_err() {
                    return Keys::Heap(
                        slab.iter()
                            .filter(|(_, t)| pred(t))
                            .map(|(k, _)| k as u32)
                            .collect(),
                    );
                }
            }
            Keys::Inline(v)
        }

        pub fn as_slice(&self) -> &[u32] {
            match self {
                Keys::Inline(v) => v,
                Keys::Heap(v) => v,
            }
        }
    }
}

impl TransportPollGroup for RdmaPg {
    fn poll(&mut self, core: &mut PgCore, completions: &mut Vec<Box<BdevIo>>) -> usize {
        self.now = core.now();
        self.now_ns = core.now_ns();
        let mut work = 0;
        for io in completions.drain(..) {
            self.io_done(core, io);
            work += 1;
        }
        for d in 0..self.devs.len() {
            if self.devs[d].is_some() {
                work += self.poll_cq(core, d);
            }
        }
        while let Some(wc) = self.synth.pop() {
            self.on_wc(core, wc);
            work += 1;
        }
        if !self.bdev_retry.is_empty() {
            work += self.retry_bdev(core);
        }
        work += self.process_pending(core);
        self.flush(core);
        // Posting may have failed: finish those requests now.
        while let Some(wc) = self.synth.pop() {
            self.on_wc(core, wc);
        }
        work
    }

    fn arm(&mut self, _core: &mut PgCore) -> bool {
        let mut pending = false;
        for dp in self.devs.iter_mut().flatten() {
            while let Ok(Some(_)) = dp.chan.get_event() {}
            if let Err(e) = dp.cq.req_notify(false) {
                tracing::error!("arming a completion queue: {e}");
                pending = true;
                continue;
            }
            if dp.stash_len == 0 {
                dp.stash_len = dp.cq.poll(&mut dp.stash);
                dp.stats.completions += dp.stash_len as u64;
            }
            pending |= dp.stash_len > 0;
        }
        pending || self.has_pending()
    }

    fn resume_request(&mut self, core: &mut PgCore, token: u64) {
        let (rk, epoch) = Req::split(token);
        let ok = self
            .reqs
            .get(rk as usize)
            .is_some_and(|r| r.epoch == epoch && r.state == RState::Queued);
        if !ok {
            return;
        }
        let qk = self.reqs[rk as usize].qp;
        if self.qpairs.get(qk as usize).is_none_or(|q| q.closing) {
            self.free_request(core, rk);
            self.try_destroy(core, qk);
            return;
        }
        self.ready(core, rk);
    }

    fn disconnect_subsystem(&mut self, core: &mut PgCore, subsystem: u32) {
        let keys: Vec<u32> = self
            .qpairs
            .iter()
            .filter(|(_, q)| q.q.subsystem() == Some(subsystem))
            .map(|(k, _)| k as u32)
            .collect();
        for qk in keys {
            self.start_close(core, qk);
        }
        // Connects queued for the subsystem get their answer (it is inactive now).
        let queued: Vec<u32> = self
            .reqs
            .iter()
            .filter(|(_, r)| {
                r.state == RState::Queued
                    && self
                        .qpairs
                        .get(r.qp as usize)
                        .is_some_and(|q| q.q.subsystem().is_none() && !q.closing)
            })
            .map(|(k, _)| k as u32)
            .collect();
        for rk in queued {
            self.ready(core, rk);
        }
        self.flush(core);
    }

    fn namespaces_changed(&mut self, core: &mut PgCore, subsystem: u32, nsids: &[u32]) {
        let done: Vec<(u32, AerDone)> = self
            .qpairs
            .iter()
            .filter_map(|(k, q)| {
                q.q.namespaces_changed(subsystem, nsids)
                    .map(|a| (k as u32, a))
            })
            .collect();
        for (qk, a) in done {
            self.complete_parked(qk, a);
        }
        let _ = core;
    }

    fn discovery_changed(&mut self, core: &mut PgCore) {
        let target = core.target();
        let done: Vec<(u32, AerDone)> = self
            .qpairs
            .iter()
            .filter_map(|(k, q)| q.q.discovery_changed(target).map(|a| (k as u32, a)))
            .collect();
        for (qk, a) in done {
            self.complete_parked(qk, a);
        }
        self.flush(core);
    }

    fn disconnect_host(&mut self, core: &mut PgCore, subsystem: u32, host: &str) {
        let keys: Vec<u32> = self
            .qpairs
            .iter()
            .filter(|(_, q)| q.q.subsystem() == Some(subsystem) && q.q.host_matches(host))
            .map(|(k, _)| k as u32)
            .collect();
        for qk in keys {
            self.start_close(core, qk);
        }
        self.flush(core);
    }

    fn qpairs(&self, subsystem: Option<u32>) -> Vec<Value> {
        self.qpairs
            .iter()
            .filter(|(_, q)| subsystem.is_none() || q.q.subsystem() == subsystem)
            .map(|(_, q)| q.q.describe("RDMA"))
            .collect()
    }

    fn stats(&self) -> Value {
        self.stats_json()
    }

    fn shutdown(&mut self, core: &mut PgCore) {
        let keys: Vec<u32> = self.qpairs.iter().map(|(k, _)| k as u32).collect();
        for qk in keys {
            self.start_close(core, qk);
        }
        self.flush(core);
        // Flushes come back at once; give them a moment, then destroy what is left.
        let deadline = Instant::now() + Duration::from_secs(2);
        while !self.qpairs.is_empty() && Instant::now() < deadline {
            let mut none = Vec::new();
            if self.poll(core, &mut none) == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let left: Vec<u32> = self.qpairs.iter().map(|(k, _)| k as u32).collect();
        for qk in left {
            let mut qp = self.qpairs.remove(qk as usize);
            tracing::debug!(qid = qp.q.qid(), "RDMA queue pair destroyed at shutdown");
            self.by_qpn.remove(&qp.qp_num);
            self.by_cm.remove(&qp.cm_handle);
            self.sh.routes.lock().remove(&qp.cm_handle);
            self.sh.qp_routes.lock().remove(&(qp.dev, qp.qp_num));
            qp.q.finish(core);
            qp.qp = None;
        }
        for dp in self.devs.iter_mut() {
            if let Some(p) = dp.take() {
                core.unwatch_fd(p.chan.fd());
            }
        }
    }
}
