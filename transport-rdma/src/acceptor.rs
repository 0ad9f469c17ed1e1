//! The acceptor: one RDMA CM event channel for the transport, its listeners, and a poller on
//! reactor 0 that validates connect requests and hands connections to poll groups.
//!
//! Events about a connection's identifier arrive on this channel too (RDMA CM reports a
//! passive connection on its listener's channel); the acceptor forwards them by message to
//! the poll group that owns the connection.

use std::sync::Arc;
use std::time::Duration;

use fabric::{CmEvent, CmEventKind, CmId, ConnectRequest, EventChannel};
use parking_lot::Mutex;
use target_core::reactor::{PollStatus, PollerId};
use target_core::registry::{PollGroupLoad, TransportError};
use target_core::target::{ListenAddr, with_transport_pg};

use crate::cm_data::{ConnectRequestData, RejectStatus};
use crate::pg::{CmNotice, NewConn, RdmaPg};
use crate::transport::{Shared, socket_addr};

/// Events handled per acceptor poll.
const EVENT_BATCH: usize = 32;

struct State {
    listeners: Vec<(ListenAddr, CmId)>,
    poller: Option<PollerId>,
    stopped: bool,
    next_admin: usize,
    next_io: usize,
}

pub(crate) struct Acceptor {
    sh: Arc<Shared>,
    channel: EventChannel,
    st: Mutex<State>,
}

impl Acceptor {
    /// Creates the event channel and registers the acceptor poller on reactor 0.
    pub fn start(sh: Arc<Shared>) -> Result<Arc<Acceptor>, TransportError> {
        let channel = sh.fabric.create_event_channel().map_err(|e| {
            TransportError::Fabric(format!("cannot create an RDMA CM event channel: {e}"))
        })?;
        let acc = Arc::new(Acceptor {
            sh: Arc::clone(&sh),
            channel,
            st: Mutex::new(State {
                listeners: Vec::new(),
                poller: None,
                stopped: false,
                next_admin: 0,
                next_io: 0,
            }),
        });
        let a = Arc::clone(&acc);
        let period = Duration::from_micros(u64::from(sh.opts.acceptor_poll_rate));
        let fd = acc.channel.fd();
        sh.reactors
            .send_ctrl(0, move |rctx| {
                if a.st.lock().stopped {
                    return;
                }
                let me = Arc::clone(&a);
                let id = rctx
                    .poller("nvmf_rdma_acceptor")
                    .period(period)
                    .wake_fd(fd)
                    .register(move |_| PollStatus::from_count(me.poll()));
                a.st.lock().poller = Some(id);
            })
            .map_err(|e| TransportError::Other(format!("cannot start the RDMA acceptor: {e}")))?;
        Ok(acc)
    }

    /// Starts listening on `addr`.
    pub fn listen(&self, addr: &ListenAddr) -> Result<(), TransportError> {
        let sa = socket_addr(addr)?;
        let id = self
            .channel
            .create_id()
            .map_err(|e| TransportError::Fabric(format!("cannot create a CM id: {e}")))?;
        id.bind(sa)
            .map_err(|e| TransportError::Fabric(format!("cannot bind {sa}: {e}")))?;
        id.listen(self.sh.opts.acceptor_backlog)
            .map_err(|e| TransportError::Fabric(format!("cannot listen on {sa}: {e}")))?;
        let mut st = self.st.lock();
        st.listeners.retain(|(a, _)| a != addr);
        st.listeners.push((addr.clone(), id));
        tracing::info!("NVMe/RDMA target listening on {sa}");
        Ok(())
    }

    /// Stops listening on `addr` (connections made through it stay).
    pub fn stop_listen(&self, addr: &ListenAddr) -> Result<(), TransportError> {
        let mut st = self.st.lock();
        let before = st.listeners.len();
        st.listeners.retain(|(a, _)| a != addr);
        if st.listeners.len() == before {
            return Err(TransportError::Invalid(format!("not listening on {addr}")));
        }
        Ok(())
    }

    /// Stops the acceptor: no more listeners, the poller goes away.
    pub fn stop(&self) {
        let mut st = self.st.lock();
        st.stopped = true;
        st.listeners.clear();
        if let Some(id) = st.poller.take() {
            let _ = self
                .sh
                .reactors
                .send_ctrl(0, move |rctx| rctx.unregister_poller(id));
        }
    }

    /// SPDK's policy: admin queues round-robin, I/O queues to the group with the fewest I/O
    /// queues, scanning from a cursor that moves past each choice.
    pub fn choose(&self, admin: bool, loads: &[PollGroupLoad]) -> usize {
        let n = loads.len().max(1);
        let mut st = self.st.lock();
        if admin {
            let i = st.next_admin % n;
            st.next_admin = (i + 1) % n;
            return loads.get(i).map_or(0, |l| l.index);
        }
        let start = st.next_io % n;
        let mut best = start;
        for k in 0..n {
            let i = (start + k) % n;
            if loads[i].io_qpairs < loads[best].io_qpairs {
                best = i;
            }
            if loads[best].io_qpairs == 0 {
                break;
            }
        }
        st.next_io = (best + 1) % n;
        loads.get(best).map_or(0, |l| l.index)
    }

    /// One acceptor poll: up to [`EVENT_BATCH`] events.
    pub fn poll(&self) -> usize {
        let mut n = 0;
        while n < EVENT_BATCH {
            match self.channel.get_event() {
                Ok(Some(ev)) => {
                    self.event(ev);
                    n += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::error!("RDMA CM event channel: {e}");
                    break;
                }
            }
        }
        n
    }

    fn event(&self, ev: CmEvent) {
        let notice = match ev.kind {
            CmEventKind::ConnectRequest(req) => return self.connect_request(ev.id, *req),
            CmEventKind::Disconnected => CmNotice::Disconnected,
            CmEventKind::DeviceRemoval => CmNotice::DeviceRemoval,
            CmEventKind::AddrChange => CmNotice::AddrChange,
            CmEventKind::Established { .. } => CmNotice::Established,
            CmEventKind::TimewaitExit => return,
            other => {
                tracing::debug!(id = ev.id, "RDMA CM event ignored: {other:?}");
                return;
            }
        };
        let Some(pg) = self.sh.routes.lock().get(&ev.id).copied() else {
            if !matches!(notice, CmNotice::Established | CmNotice::Disconnected) {
                tracing::warn!(id = ev.id, "RDMA CM {notice:?} on a listener or unknown id");
            }
            return;
        };
        let index = self.sh.index;
        let handle = ev.id;
        let _ = self.sh.reactors.send_ctrl(pg, move |rctx| {
            with_transport_pg::<RdmaPg, _>(rctx, index, |pg, core| {
                pg.cm_notice(core, handle, notice)
            });
        });
    }

    fn connect_request(&self, listener: u64, req: ConnectRequest) {
        let listen = {
            let st = self.st.lock();
            st.listeners
                .iter()
                .find(|(_, id)| id.handle() == listener)
                .map(|(a, _)| a.clone())
        };
        let peer = req.peer_addr;
        let Some(listen) = listen else {
            tracing::warn!(%peer, "connect request on a listener that is gone");
            return; // Dropping the request rejects it.
        };
        let reject = |id: &CmId, s: RejectStatus| {
            tracing::warn!(%peer, listener = %listen, "RDMA connect rejected: {s:?}");
            if let Err(e) = id.reject(&s.encode()) {
                tracing::debug!("reject: {e}");
            }
        };
        let data = match ConnectRequestData::decode(&req.private_data) {
            Ok(d) => d,
            Err(s) => return reject(&req.id, s),
        };
        let o = &self.sh.opts;
        if let Err(s) = data.check_sizes(
            o.max_aq_depth,
            u32::from(o.max_queue_depth),
            o.max_io_qpairs_per_ctrlr,
        ) {
            return reject(&req.id, s);
        }
        if req.initiator_depth == 0 {
            return reject(&req.id, RejectStatus::InvalidIrd);
        }
        let Some(target) = self.sh.target.upgrade() else {
            return reject(&req.id, RejectStatus::NoResources);
        };
        let pg = self.choose(data.qid == 0, &target.loads());
        let handle = req.id.handle();
        let local = req.local_addr;
        let conn = NewConn {
            id: req.id,
            data,
            listen,
            local,
            peer,
            initiator_depth: req.initiator_depth,
        };
        self.sh.routes.lock().insert(handle, pg);
        let index = self.sh.index;
        let sent = self.sh.reactors.send_ctrl(pg, move |rctx| {
            RdmaPg::ensure_timer(rctx, index);
            let mut conn = Some(conn);
            with_transport_pg::<RdmaPg, _>(rctx, index, |pg, core| {
                if let Some(c) = conn.take() {
                    pg.add_connection(core, c);
                }
            });
            if let Some(c) = conn {
                // The poll group is gone (the transport is being destroyed).
                let _ = c.id.reject(&RejectStatus::NoResources.encode());
            }
        });
        if sent.is_err() {
            self.sh.routes.lock().remove(&handle);
        }
    }
}
