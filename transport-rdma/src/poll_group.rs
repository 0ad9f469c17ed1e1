//! The RDMA poll group: everything of the transport that lives on one reactor, and its poll.
//!
//! Per device in use it keeps a device poller ([`crate::device`]): completion queue, shared
//! receive queue (unless `no_srq`). Queue pairs ([`crate::qpair`]), requests
//! ([`crate::request`]) and receives live in slabs owned by the poll group. Each poll:
//!
//! 1. hands completed bdev I/O back to their requests;
//! 2. polls every device's completion queue in batches of 32 and advances the requests and
//!    queue pairs they concern;
//! 3. retries requests whose bdev was busy;
//! 4. replays waiting requests per queue pair in SPDK's fixed order: responses waiting for
//!    send-queue slots, RDMA READs waiting for slots or READ credits, RDMA WRITEs (+ response)
//!    waiting for slots, requests waiting for data buffers, then received commands waiting for
//!    a free request;
//! 5. checks the drain watchdogs of closing queue pairs;
//! 6. posts the receives and the send work requests collected during the poll, one doorbell
//!    per queue (unless `no_wr_batching`; [`crate::post`]).

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::WorkCompletion;
use iobuf::BufCache;
use rdma_plumbing::{QpnMap, WrId};
use serde_json::Value;
use slab::Slab;
use target_core::bdev::BdevIo;
use target_core::nvme_exec::{self, AerDone};
use target_core::reactor::{PollStatus, PollerId, ReactorCtx};
use target_core::registry::TransportPollGroup;
use target_core::target::{AbortFence, PgCore, PreemptAbort, with_transport_pg};

use crate::device::DevPoller;
use crate::opts::RdmaOpts;
use crate::qpair::Qpair;
use crate::request::lifecycle::{Event as ReqEvent, State as ReqState};
use crate::resources::{Recv, Req, kind};
use crate::transport::RdmaShared;

/// Completions taken per completion-queue poll.
pub(crate) const WC_BATCH: usize = rdma_plumbing::completions::BATCH;
/// Most completions handled per device per poll (fairness with other pollers).
const WC_PER_POLL: usize = 256;
/// Period of the keep-alive timer poller: an expired KATO is noticed within this much (the
/// smallest KATO is `min_kato`, 10 s by default). It is also how often an idle reactor with
/// connected controllers wakes up, so it stays coarse: at 200 ms the wake-ups of 16 idle
/// queue pairs cost 0.8 % of a vCPU in the soft-RoCE guest.
const TIMER_PERIOD: Duration = Duration::from_secs(1);

/// The RDMA transport's state on one reactor.
pub struct RdmaPg {
    pub(crate) sh: Arc<RdmaShared>,
    pub(crate) reactor: usize,
    pub(crate) devs: Vec<Option<DevPoller>>,
    pub(crate) qpairs: Slab<Qpair>,
    /// Queue pairs by queue pair number (receives on a shared receive queue name only that).
    pub(crate) by_qpn: QpnMap<u32>,
    /// Queue pairs by CM identifier handle (connection events).
    pub(crate) by_cm: HashMap<u64, u32>,
    pub(crate) reqs: Slab<Req>,
    pub(crate) recvs: Slab<Recv>,
    pub(crate) small: BufCache,
    pub(crate) large: BufCache,
    /// Requests waiting for data buffers, in arrival order.
    pub(crate) pending_buf: VecDeque<u32>,
    /// Requests whose bdev backend was busy.
    pub(crate) bdev_retry: VecDeque<u32>,
    /// Completions made up for work requests that could not be posted.
    pub(crate) synth: Vec<WorkCompletion>,
    /// Queue pairs with work requests batched for the end of the poll.
    pub(crate) dirty: Vec<u32>,
    /// The completions of one poll of the queues (taken out of the poll group while they are
    /// handled, so each is handled by reference).
    pub(crate) wcs: Box<[WorkCompletion]>,
    pub(crate) timer: Option<PollerId>,
    pub(crate) now: Instant,
    pub(crate) now_ns: u64,
    pub(crate) epoch: u16,
    pub(crate) pending_data_buffer: u64,
    /// Closing queue pairs whose drain watchdog is armed.
    pub(crate) draining: u32,
    /// Queue pairs whose drain did not finish in time (destroyed anyway).
    pub(crate) drain_timeouts: u64,
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
    pub(crate) fn new(sh: Arc<RdmaShared>, core: &mut PgCore) -> Self {
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
            by_qpn: QpnMap::default(),
            by_cm: HashMap::new(),
            reqs: Slab::new(),
            recvs: Slab::new(),
            small,
            large,
            pending_buf: VecDeque::with_capacity(256),
            bdev_retry: VecDeque::with_capacity(256),
            synth: Vec::with_capacity(256),
            dirty: Vec::with_capacity(64),
            wcs: vec![WorkCompletion::default(); WC_BATCH].into_boxed_slice(),
            timer: None,
            now: Instant::now(),
            now_ns: 0,
            epoch: (core.index() as u16).wrapping_mul(0x3d),
            pending_data_buffer: 0,
            draining: 0,
            drain_timeouts: 0,
            sh,
        }
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
            self.close(core, qk);
        }
        if self.draining > 0 {
            self.now = now;
            self.check_drain_deadlines(core);
        }
        self.flush(core);
        if self.qpairs.is_empty() {
            self.timer = None;
            false
        } else {
            true
        }
    }

    /// A work completion: dispatched by the kind in its id.
    pub(crate) fn on_wc(&mut self, core: &mut PgCore, wc: &WorkCompletion) {
        let id = WrId::unpack(wc.wr_id);
        match id.kind {
            kind::RECV => self.on_recv(core, id, wc),
            kind::SEND | kind::READ | kind::WRITE => {
                let Some(qk) = self.owner_of_wc(id, wc) else {
                    tracing::debug!(wr_id = wc.wr_id, "completion for a released request");
                    return;
                };
                match id.kind {
                    kind::SEND => self.on_send(core, id.key, qk, wc),
                    kind::READ => self.on_read(core, id.key, qk, wc),
                    _ => self.on_write(core, qk, wc),
                }
            }
            kind::MARKER => self.on_marker(core, id, wc),
            _ => tracing::error!(
                wr_id = wc.wr_id,
                "completion with an unknown work request id"
            ),
        }
    }

    /// The queue pair of request `id.key` if a send-queue completion belongs to it as it is
    /// now: the same incarnation (epoch), on a queue pair, the one the completion names. A
    /// request released when its queue pair's drain marker completed may still see a
    /// completion the adapter (or a fault) delivered out of order: it is ignored. The one
    /// lookup of the request and its queue pair per completion: the handlers index them by
    /// the keys it checked.
    #[inline]
    fn owner_of_wc(&self, id: WrId, wc: &WorkCompletion) -> Option<u32> {
        let r = self.reqs.get(id.key as usize)?;
        if r.epoch != id.generation {
            return None;
        }
        let qp = self.qpairs.get(r.qp as usize)?;
        (qp.qp_num == wc.qp_num).then_some(r.qp)
    }

    fn poll_cq(&mut self, core: &mut PgCore, d: usize) -> usize {
        let mut total = 0;
        // Out of the poll group while its completions are handled (nothing they do polls).
        let mut wcs = std::mem::take(&mut self.wcs);
        while let Some(dp) = self.devs[d].as_mut() {
            let n = dp.cqs.poll(&mut wcs);
            for wc in &wcs[..n] {
                self.on_wc(core, wc);
            }
            total += n;
            if n < WC_BATCH || total >= WC_PER_POLL {
                break;
            }
        }
        self.wcs = wcs;
        total
    }

    /// Replays waiting requests in SPDK's order; returns how many moved.
    fn process_pending(&mut self, core: &mut PgCore) -> usize {
        let mut n = 0;
        let keys = smallvec_keys::Keys::of(&self.qpairs, |q| q.has_pending());
        for &qk in keys.as_slice() {
            // 1. Responses waiting for a send slot.
            while let Some(&rk) = self
                .qpairs
                .get(qk as usize)
                .and_then(|q| q.pending_send.front())
            {
                if !self.post_response(core, qk, rk) {
                    break;
                }
                self.qpairs[qk as usize].pending_send.pop_front();
                n += 1;
            }
            // 2. RDMA READs.
            if self.pump_reads(core, qk) {
                n += 1;
            }
            // 3. RDMA WRITEs with their responses.
            while let Some(&rk) = self
                .qpairs
                .get(qk as usize)
                .and_then(|q| q.pending_write.front())
            {
                if !self.post_response(core, qk, rk) {
                    break;
                }
                self.qpairs[qk as usize].pending_write.pop_front();
                n += 1;
            }
        }
        // 4. Requests waiting for data buffers, in arrival order.
        while let Some(&rk) = self.pending_buf.front() {
            match self.take_buffers(rk) {
                Some(fetch) => {
                    self.pending_buf.pop_front();
                    self.drive(core, rk, ReqEvent::Buffers(fetch));
                    n += 1;
                }
                None => {
                    self.pending_data_buffer += 1;
                    break;
                }
            }
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
            self.drive(core, rk, ReqEvent::Retry);
        }
        n
    }

    fn has_pending(&self) -> bool {
        !self.pending_buf.is_empty()
            || !self.bdev_retry.is_empty()
            || !self.synth.is_empty()
            || self.qpairs.iter().any(|(_, q)| q.has_pending())
            || self.devs.iter().flatten().any(|d| {
                d.cqs.has_stashed()
                    || d.res
                        .as_ref()
                        .is_some_and(|r| !r.incoming.is_empty() && !r.free_reqs.is_empty())
            })
    }
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
            self.on_wc(core, &wc);
            work += 1;
        }
        if !self.bdev_retry.is_empty() {
            work += self.retry_bdev(core);
        }
        work += self.process_pending(core);
        if self.draining > 0 {
            self.check_drain_deadlines(core);
        }
        self.flush(core);
        // Posting may have failed: finish those requests now.
        while let Some(wc) = self.synth.pop() {
            self.on_wc(core, &wc);
        }
        work
    }

    fn arm(&mut self, _core: &mut PgCore) -> bool {
        let mut pending = false;
        for dp in self.devs.iter_mut().flatten() {
            match dp.cqs.arm() {
                Ok(found) => pending |= found,
                Err(e) => {
                    tracing::error!("arming a completion queue: {e}");
                    pending = true;
                }
            }
        }
        pending || self.has_pending()
    }

    fn resume_request(&mut self, core: &mut PgCore, token: u64) {
        let (rk, epoch) = Req::split(token);
        let ok = self
            .reqs
            .get(rk as usize)
            .is_some_and(|r| r.epoch == epoch && r.life.state() == ReqState::Queued);
        if ok {
            self.drive(core, rk, ReqEvent::Resumed);
        }
    }

    fn disconnect_subsystem(&mut self, core: &mut PgCore, subsystem: u32) {
        let keys: Vec<u32> = self
            .qpairs
            .iter()
            .filter(|(_, q)| q.q.subsystem() == Some(subsystem))
            .map(|(k, _)| k as u32)
            .collect();
        for qk in keys {
            self.close(core, qk);
        }
        // Connects queued for the subsystem get their answer (it is inactive now).
        let queued: Vec<u32> = self
            .reqs
            .iter()
            .filter(|(_, r)| {
                r.life.state() == ReqState::Queued
                    && self
                        .qpairs
                        .get(r.qp as usize)
                        .is_some_and(|q| q.q.subsystem().is_none() && !q.life.is_closing())
            })
            .map(|(k, _)| k as u32)
            .collect();
        for rk in queued {
            self.drive(core, rk, ReqEvent::Resumed);
        }
        self.flush(core);
    }

    fn namespaces_changed(&mut self, core: &mut PgCore, subsystem: u32, nsids: &[u32]) {
        let done: Vec<(u32, AerDone)> = self
            .qpairs
            .iter()
            .flat_map(|(k, q)| {
                q.q.namespaces_changed(core, subsystem, nsids)
                    .into_iter()
                    .map(move |a| (k as u32, a))
            })
            .collect();
        for (qk, a) in done {
            self.complete_parked(core, qk, a);
        }
    }

    fn reservation_notices(
        &mut self,
        core: &mut PgCore,
        subsystem: u32,
        nsid: u32,
        notices: &[(
            target_core::reservation::HostId,
            target_core::reservation::NoticeKind,
        )],
    ) {
        let done: Vec<(u32, AerDone)> = self
            .qpairs
            .iter()
            .filter_map(|(k, q)| {
                q.q.reservation_notices(subsystem, nsid, notices)
                    .map(|a| (k as u32, a))
            })
            .collect();
        for (qk, a) in done {
            self.complete_parked(core, qk, a);
        }
        self.flush(core);
    }

    fn preempt_abort(
        &mut self,
        _core: &mut PgCore,
        pa: &PreemptAbort,
        fence: &Arc<AbortFence>,
    ) -> u32 {
        let mut n = 0;
        for (_, r) in self.reqs.iter_mut() {
            if let Some(qp) = self.qpairs.get(r.qp as usize)
                && nvme_exec::preempt_abort_mark(&qp.q, &mut r.ex, pa, fence)
            {
                n += 1;
            }
        }
        n
    }

    fn parked_done(&mut self, core: &mut PgCore, queue: u64, done: AerDone) {
        if let Some(qk) = self.live_key(queue) {
            self.complete_parked(core, qk, done);
            self.flush(core);
        }
    }

    fn discovery_changed(&mut self, core: &mut PgCore) {
        let target = core.target();
        let done: Vec<(u32, AerDone)> = self
            .qpairs
            .iter()
            .filter_map(|(k, q)| q.q.discovery_changed(target).map(|a| (k as u32, a)))
            .collect();
        for (qk, a) in done {
            self.complete_parked(core, qk, a);
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
            self.close(core, qk);
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
            self.close(core, qk);
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
        self.destroy_all(core);
        for dp in self.devs.iter_mut() {
            if let Some(p) = dp.take() {
                core.unwatch_fd(p.cqs.fd());
            }
        }
    }
}
