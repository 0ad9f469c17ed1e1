//! The TCP poll group: the connections of one reactor, their sockets in one epoll instance
//! (level-triggered, registered as the reactor's wake-up fd, so a reactor whose connections
//! are idle sleeps), and the poll:
//!
//! 1. hands completed bdev I/O back to their commands;
//! 2. retries commands whose bdev was busy and commands waiting for data buffers;
//! 3. per ready socket: receive into the connection's buffer, feed the machine, carry out its
//!    actions (buffers from the shared pool through this group's cache, the exec layer), and
//!    send what it produced in one `sendmsg`; EPOLLOUT only while a send is blocked;
//! 4. the same for connections that got work outside their socket (completions, replays).
//!
//! A timer poller (1 s) closes connections whose keep-alive expired, or that sent no ICReq
//! within 10 s; it runs only while the group has connections.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use arrayvec::ArrayVec;
use iobuf::BufCache;
use serde_json::{Value, json};
use slab::Slab;
use socket2::Socket;
use target_core::bdev::BdevIo;
use target_core::nvme_exec::{self, AerDone};
use target_core::reactor::{PollStatus, PollerId, ReactorCtx};
use target_core::registry::{TransportError, TransportPollGroup};
use target_core::target::{AbortFence, ListenAddr, PgCore, PreemptAbort, with_transport_pg};

use crate::conn::{ConnState, ConnStats, Connection};
use crate::qpair::{ReqState, RxResult, SockCounters, TcpQpair};
use crate::socket::{Epoll, Ready};
use crate::transport::TcpShared;

/// Period of the keep-alive timer poller.
const TIMER_PERIOD: Duration = Duration::from_secs(1);
/// A connection that sends no ICReq within this time is closed (the Linux host's own wait).
pub(crate) const ICREQ_TIMEOUT: Duration = Duration::from_secs(10);
/// Ready sockets handled per poll.
const EVENT_BATCH: usize = 64;
/// Socket reads per connection per poll (fairness between connections).
const READS_PER_POLL: usize = 4;

/// A connection handed over by the listener.
pub(crate) struct NewConn {
    pub sock: Socket,
    pub listen: ListenAddr,
    pub local: SocketAddr,
    pub peer: SocketAddr,
    pub now: Instant,
}

/// Counters of a poll group, for `nvmf_get_stats`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PgStats {
    pub accepted: u64,
    pub closed: u64,
    pub pending_data_buffer: u64,
    pub bdev_busy: u64,
    /// Calls of the poll group's poll.
    pub polls: u64,
    /// Protocol counters of closed connections (live ones are added when shown).
    pub closed_conns: ConnStats,
    /// Socket system calls of closed connections (live ones are added when shown).
    pub closed_sock: SockCounters,
}

/// The TCP transport's state on one reactor.
pub struct TcpPg {
    pub(crate) sh: Arc<TcpShared>,
    pub(crate) reactor: usize,
    pub(crate) epoll: Epoll,
    pub(crate) conns: Slab<TcpQpair>,
    pub(crate) cache: BufCache,
    /// Connections with work to do outside their socket's readiness.
    pub(crate) dirty: Vec<u32>,
    /// Connections with slots waiting for data buffers.
    pub(crate) waiting: usize,
    /// Connections with commands whose bdev was busy.
    pub(crate) busy: usize,
    pub(crate) timer: Option<PollerId>,
    pub(crate) now: Instant,
    pub(crate) now_ns: u64,
    pub(crate) epoch: u16,
    pub(crate) generation: u32,
    pub(crate) stats: PgStats,
}

impl std::fmt::Debug for TcpPg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpPg")
            .field("reactor", &self.reactor)
            .field("conns", &self.conns.len())
            .finish()
    }
}

/// Adds two sets of protocol counters.
fn add_stats(a: &mut ConnStats, b: &ConnStats) {
    a.capsules += b.capsules;
    a.r2ts += b.r2ts;
    a.h2c_pdus += b.h2c_pdus;
    a.c2h_pdus += b.c2h_pdus;
    a.responses += b.responses;
    a.data_digest_errors += b.data_digest_errors;
}

impl TcpPg {
    pub(crate) fn new(sh: Arc<TcpShared>, core: &mut PgCore) -> Result<TcpPg, TransportError> {
        let epoll = Epoll::new(EVENT_BATCH)
            .map_err(|e| TransportError::Other(format!("cannot create an epoll instance: {e}")))?;
        core.watch_fd(epoll.fd());
        let cache = BufCache::new(Arc::clone(&sh.pool), sh.opts.cache_size(sh.reactors.len()));
        Ok(TcpPg {
            reactor: core.index(),
            epoll,
            conns: Slab::new(),
            cache,
            dirty: Vec::with_capacity(64),
            waiting: 0,
            busy: 0,
            timer: None,
            now: Instant::now(),
            now_ns: 0,
            epoch: (core.index() as u16).wrapping_mul(0x3d),
            generation: 0,
            stats: PgStats::default(),
            sh,
        })
    }

    /// Registers the timer poller on this reactor if it is not running.
    pub(crate) fn ensure_timer(rctx: &mut ReactorCtx, index: usize) {
        let need = with_transport_pg::<TcpPg, _>(rctx, index, |pg, _| pg.timer.is_none());
        if need != Some(true) {
            return;
        }
        let me: Rc<Cell<Option<PollerId>>> = Rc::new(Cell::new(None));
        let me2 = Rc::clone(&me);
        let id = rctx
            .poller("nvmf_tcp_timer")
            .period(TIMER_PERIOD)
            .register(move |ctx| {
                let now = ctx.now();
                let r = with_transport_pg::<TcpPg, _>(ctx, index, |pg, core| pg.tick(core, now));
                if r != Some(true)
                    && let Some(id) = me2.get()
                {
                    ctx.unregister_poller(id);
                }
                PollStatus::Idle
            });
        me.set(Some(id));
        with_transport_pg::<TcpPg, _>(rctx, index, |pg, _| pg.timer = Some(id));
    }

    /// The timer: keep-alive expiry and the ICReq deadline. Returns whether it should keep
    /// running (there are connections).
    fn tick(&mut self, core: &mut PgCore, now: Instant) -> bool {
        self.now = now;
        let expired: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                !c.closing
                    && (c.q.as_ref().is_some_and(|q| q.keep_alive_expired(now))
                        || (c.conn.state() == ConnState::AwaitIcReq
                            && now.duration_since(c.created) >= ICREQ_TIMEOUT))
            })
            .map(|(k, _)| k as u32)
            .collect();
        for ck in expired {
            tracing::warn!(
                peer = %self.conns[ck as usize].peer,
                "keep-alive, authentication or ICReq timeout: disconnecting"
            );
            self.teardown(core, ck);
        }
        if self.conns.is_empty() {
            self.timer = None;
            false
        } else {
            true
        }
    }

    /// Takes a connection handed over by the listener.
    pub(crate) fn add_connection(&mut self, core: &mut PgCore, c: NewConn) {
        let cfg = self.sh.opts.conn_config();
        let icd =
            (cfg.in_capsule_data_size as usize).max(crate::pdu::ADMIN_IN_CAPSULE_DATA as usize);
        let conn = match Connection::new(cfg) {
            Ok(conn) => conn,
            Err(e) => {
                tracing::error!("NVMe/TCP connection refused: {e}");
                self.sh.conns[self.reactor].fetch_sub(1, Ordering::Relaxed);
                return;
            }
        };
        self.generation = self.generation.wrapping_add(1);
        let qp = match TcpQpair::new(self.generation, c, conn, icd) {
            Ok(qp) => qp,
            Err(e) => {
                tracing::error!("NVMe/TCP connection refused: {e}");
                self.sh.conns[self.reactor].fetch_sub(1, Ordering::Relaxed);
                return;
            }
        };
        let fd = qp.fd;
        let ck = self.conns.insert(qp) as u32;
        if let Err(e) = self.epoll.add(fd, u64::from(ck), false) {
            tracing::error!("cannot watch an NVMe/TCP socket: {e}");
            self.conns.remove(ck as usize);
            self.sh.conns[self.reactor].fetch_sub(1, Ordering::Relaxed);
            return;
        }
        if self.dirty.capacity() < self.conns.len() {
            self.dirty.reserve(self.conns.len());
        }
        self.stats.accepted += 1;
        // Bytes may be there already.
        self.service(core, ck, true);
    }

    /// Marks a connection as having work outside its socket's readiness.
    pub(crate) fn mark(&mut self, ck: u32) {
        if let Some(c) = self.conns.get_mut(ck as usize)
            && !c.dirty
        {
            c.dirty = true;
            self.dirty.push(ck);
        }
    }

    /// Moves one connection on: reads (when `readable`), feeds the machine, carries out its
    /// actions, sends; closes it when the machine says so. Returns the work done.
    pub(crate) fn service(&mut self, core: &mut PgCore, ck: u32, readable: bool) -> usize {
        let mut work = 0;
        let mut reads = if readable { READS_PER_POLL } else { 0 };
        loop {
            let Some(c) = self.conns.get_mut(ck as usize) else {
                return work;
            };
            if c.closing {
                return work;
            }
            let fed = c.feed();
            let acted = self.actions(core, ck);
            let Some(c) = self.conns.get_mut(ck as usize) else {
                return work;
            };
            let mut got = 0;
            if fed == 0 && acted == 0 && reads > 0 {
                reads -= 1;
                match c.read() {
                    RxResult::Data(n) => got = n,
                    RxResult::Nothing => reads = 0,
                    RxResult::Gone => {
                        c.conn.close();
                        reads = 0;
                        got = 1;
                    }
                }
            }
            work += fed + acted + got;
            if fed == 0 && acted == 0 && got == 0 {
                break;
            }
        }
        self.send(core, ck);
        work
    }

    /// Sends what the connection has queued; closes it after its last PDU when asked.
    pub(crate) fn send(&mut self, core: &mut PgCore, ck: u32) {
        let Self {
            conns,
            cache,
            epoll,
            ..
        } = self;
        let Some(c) = conns.get_mut(ck as usize) else {
            return;
        };
        if c.closing {
            return;
        }
        let r = c.flush(cache);
        if c.conn.state() == ConnState::Closed {
            // The machine has nothing more to send (its last PDU may have been a C2HTermReq
            // just queued): close once that is written.
            c.close_when_flushed = true;
        }
        match r {
            Ok(_) => {
                let blocked = !c.tx.is_empty();
                if blocked != c.want_write {
                    c.want_write = blocked;
                    if let Err(e) = epoll.modify(c.fd, u64::from(ck), blocked) {
                        tracing::warn!("epoll modify: {e}");
                    }
                }
                if !blocked && c.close_when_flushed {
                    self.teardown(core, ck);
                }
            }
            Err(e) => {
                tracing::debug!(peer = %c.peer, "nvme/tcp send: {e}");
                self.teardown(core, ck);
            }
        }
    }

    /// Replays commands waiting for buffers or for a busy bdev.
    fn retry(&mut self, core: &mut PgCore) -> usize {
        let mut n = 0;
        let keys: ArrayVec<u32, 64> = self
            .conns
            .iter()
            .filter(|(_, c)| !c.closing && (!c.wait_buf.is_empty() || !c.busy.is_empty()))
            .map(|(k, _)| k as u32)
            .take(64)
            .collect();
        for ck in keys {
            n += self.retry_conn(core, ck);
            self.mark(ck);
        }
        n
    }

    fn has_pending(&self) -> bool {
        !self.dirty.is_empty()
            || (self.waiting > 0 && (self.cache.cached() > 0 || self.sh.pool.free() > 0))
            || self.busy > 0
    }

    /// Disconnects the connection a [`target_core::nvme_exec::QueueRef`] key names.
    pub(crate) fn disconnect_key(&mut self, core: &mut PgCore, key: u64) {
        let ck = (key & 0xFFFF_FFFF) as u32;
        let generation = (key >> 32) as u32;
        if self
            .conns
            .get(ck as usize)
            .is_some_and(|c| c.generation == generation && !c.closing)
        {
            self.teardown(core, ck);
        }
    }

    /// Completes parked AERs of a connection.
    pub(crate) fn complete_parked(&mut self, core: &mut PgCore, ck: u32, a: AerDone) {
        let Some(c) = self.conns.get_mut(ck as usize) else {
            return;
        };
        let slot = c
            .reqs
            .iter()
            .position(|r| r.state == ReqState::Parked && r.ex.sqe.cid() == a.cid);
        if let Some(s) = slot {
            let r = &mut c.reqs[s];
            r.ex.cqe = a.cqe;
            r.ex.data_len = 0;
            self.finish(core, ck, crate::conn::SlotId(s as u16));
            self.mark(ck);
        }
    }

    fn run_dirty(&mut self, core: &mut PgCore) -> usize {
        let mut n = 0;
        while let Some(ck) = self.dirty.pop() {
            if let Some(c) = self.conns.get_mut(ck as usize) {
                c.dirty = false;
                n += self.service(core, ck, false);
            }
        }
        n
    }

    /// Protocol counters and socket system calls of live and closed connections.
    fn conn_stats(&self) -> (ConnStats, SockCounters) {
        let mut s = self.stats.closed_conns;
        let mut k = self.stats.closed_sock;
        for (_, c) in &self.conns {
            add_stats(&mut s, &c.conn.stats());
            k.add(&c.sock_counters);
        }
        (s, k)
    }

    pub(crate) fn close_stats(&mut self, s: &ConnStats, k: &SockCounters) {
        add_stats(&mut self.stats.closed_conns, s);
        self.stats.closed_sock.add(k);
        self.stats.closed += 1;
    }
}

impl TransportPollGroup for TcpPg {
    fn poll(&mut self, core: &mut PgCore, completions: &mut Vec<Box<BdevIo>>) -> usize {
        self.now = core.now();
        self.now_ns = core.now_ns();
        self.stats.polls += 1;
        let mut work = 0;
        for io in completions.drain(..) {
            self.io_done(core, io);
            work += 1;
        }
        if self.waiting > 0 || self.busy > 0 {
            work += self.retry(core);
        }
        let mut ready: ArrayVec<Ready, EVENT_BATCH> = ArrayVec::new();
        self.epoll.poll(|r| {
            let _ = ready.try_push(r);
        });
        for r in ready {
            let ck = r.token as u32;
            if r.writable && !r.readable {
                self.send(core, ck);
                work += 1;
                continue;
            }
            work += self.service(core, ck, r.readable || r.hup);
            if r.writable {
                self.send(core, ck);
            }
        }
        work += self.run_dirty(core);
        work
    }

    fn arm(&mut self, _core: &mut PgCore) -> bool {
        self.has_pending()
    }

    fn resume_request(&mut self, core: &mut PgCore, token: u64) {
        self.resume(core, token);
        self.run_dirty(core);
    }

    fn disconnect_subsystem(&mut self, core: &mut PgCore, subsystem: u32) {
        let keys: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                !c.closing && c.q.as_ref().and_then(|q| q.subsystem()) == Some(subsystem)
            })
            .map(|(k, _)| k as u32)
            .collect();
        for ck in keys {
            self.teardown(core, ck);
        }
        // Connects queued for the subsystem get their answer (it is inactive now).
        let queued: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| !c.closing && c.q.as_ref().is_none_or(|q| q.subsystem().is_none()))
            .flat_map(|(_, c)| {
                c.reqs
                    .iter()
                    .filter(|r| r.state == ReqState::Queued)
                    .map(|r| r.ex.token)
            })
            .collect();
        for t in queued {
            self.resume(core, t);
        }
        self.run_dirty(core);
    }

    fn namespaces_changed(&mut self, core: &mut PgCore, subsystem: u32, nsids: &[u32]) {
        let done: Vec<(u32, AerDone)> = self
            .conns
            .iter()
            .filter(|(_, c)| !c.closing)
            .flat_map(|(k, c)| {
                c.q.as_ref()
                    .map(|q| q.namespaces_changed(core, subsystem, nsids))
                    .into_iter()
                    .flatten()
                    .map(move |a| (k as u32, a))
            })
            .collect();
        for (ck, a) in done {
            self.complete_parked(core, ck, a);
        }
        self.run_dirty(core);
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
            .conns
            .iter()
            .filter(|(_, c)| !c.closing)
            .filter_map(|(k, c)| {
                c.q.as_ref()
                    .and_then(|q| q.reservation_notices(subsystem, nsid, notices))
                    .map(|a| (k as u32, a))
            })
            .collect();
        for (ck, a) in done {
            self.complete_parked(core, ck, a);
        }
        self.run_dirty(core);
    }

    fn preempt_abort(
        &mut self,
        _core: &mut PgCore,
        pa: &PreemptAbort,
        fence: &Arc<AbortFence>,
    ) -> u32 {
        let mut n = 0;
        for (_, c) in self.conns.iter_mut() {
            let Some(q) = c.q.as_ref() else {
                continue;
            };
            for r in c.reqs.iter_mut() {
                if nvme_exec::preempt_abort_mark(q, &mut r.ex, pa, fence) {
                    n += 1;
                }
            }
        }
        n
    }

    fn parked_done(&mut self, core: &mut PgCore, queue: u64, done: AerDone) {
        let ck = (queue & 0xFFFF_FFFF) as u32;
        let generation = (queue >> 32) as u32;
        if self
            .conns
            .get(ck as usize)
            .is_some_and(|c| c.generation == generation && !c.closing)
        {
            self.complete_parked(core, ck, done);
            self.run_dirty(core);
        }
    }

    fn discovery_changed(&mut self, core: &mut PgCore) {
        let target = core.target();
        let done: Vec<(u32, AerDone)> = self
            .conns
            .iter()
            .filter(|(_, c)| !c.closing)
            .filter_map(|(k, c)| {
                c.q.as_ref()
                    .and_then(|q| q.discovery_changed(target))
                    .map(|a| (k as u32, a))
            })
            .collect();
        for (ck, a) in done {
            self.complete_parked(core, ck, a);
        }
        self.run_dirty(core);
    }

    fn disconnect_host(&mut self, core: &mut PgCore, subsystem: u32, host: &str) {
        let keys: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                !c.closing
                    && c.q
                        .as_ref()
                        .is_some_and(|q| q.subsystem() == Some(subsystem) && q.host_matches(host))
            })
            .map(|(k, _)| k as u32)
            .collect();
        for ck in keys {
            self.teardown(core, ck);
        }
    }

    fn qpairs(&self, subsystem: Option<u32>) -> Vec<Value> {
        self.conns
            .iter()
            .filter_map(|(_, c)| c.q.as_ref())
            .filter(|q| subsystem.is_none() || q.subsystem() == subsystem)
            .map(|q| q.describe("TCP"))
            .collect()
    }

    fn stats(&self) -> Value {
        let (s, k) = self.conn_stats();
        json!({
            "trtype": "TCP",
            "connections": self.conns.len(),
            "accepted": self.stats.accepted,
            "closed": self.stats.closed,
            "capsules": s.capsules,
            "r2ts": s.r2ts,
            "h2c_data_pdus": s.h2c_pdus,
            "c2h_data_pdus": s.c2h_pdus,
            "responses": s.responses,
            "data_digest_errors": s.data_digest_errors,
            "pending_data_buffer": self.stats.pending_data_buffer,
            "bdev_busy": self.stats.bdev_busy,
            "buffers_cached": self.cache.cached(),
            "polls": self.stats.polls,
            "socket_reads": k.reads,
            "socket_sends": k.sends,
            "socket_sends_blocked": k.sends_blocked,
        })
    }

    fn shutdown(&mut self, core: &mut PgCore) {
        let keys: Vec<u32> = self.conns.iter().map(|(k, _)| k as u32).collect();
        for ck in keys {
            self.teardown(core, ck);
        }
        // Connections still waiting for bdev I/O go now: their I/O is abandoned.
        let keys: Vec<u32> = self.conns.iter().map(|(k, _)| k as u32).collect();
        for ck in keys {
            self.remove(core, ck);
        }
        core.unwatch_fd(self.epoll.fd());
    }
}
