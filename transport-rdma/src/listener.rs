//! The listener: one RDMA CM event channel for the transport, its listening identifiers, and
//! a poller on reactor 0 (SPDK's acceptor) that validates connect requests and hands
//! connections to poll groups; beside it, one poller per device reads the device's
//! asynchronous events. Both are timed pollers at `acceptor_poll_rate` driven by their fds:
//! they run as soon as an event is ready, and an idle reactor sleeps through their period
//! (see [`target_core::reactor`]).
//!
//! Events about a connection's identifier arrive on this channel too (RDMA CM reports a
//! passive connection on its listener's channel); they are forwarded by message to the poll
//! group that owns the connection ([`rdma_plumbing::cm`]).

use std::sync::Arc;
use std::time::Duration;

use fabric::{AsyncElement, AsyncEventKind, CmId, ConnectRequest, EventChannel};
use parking_lot::Mutex;
use rdma_plumbing::cm::{self, CmInput, CmNotice, to_poll_group};
use target_core::reactor::{PollStatus, PollerId};
use target_core::registry::{PollGroupLoad, TransportError};
use target_core::target::{ListenAddr, with_transport_pg};

use crate::accept::NewConn;
use crate::cm_data::{ConnectRequestData, RejectStatus};
use crate::poll_group::RdmaPg;
use crate::transport::{RdmaShared, socket_addr};

/// Events handled per acceptor poll.
const EVENT_BATCH: usize = 32;

struct State {
    listeners: Vec<(ListenAddr, CmId)>,
    poller: Option<PollerId>,
    async_pollers: Vec<PollerId>,
    stopped: bool,
    next_admin: usize,
    next_io: usize,
}

pub(crate) struct Listener {
    sh: Arc<RdmaShared>,
    channel: EventChannel,
    st: Mutex<State>,
}

impl Listener {
    /// Creates the event channel and registers the acceptor poller on reactor 0.
    pub fn start(sh: Arc<RdmaShared>) -> Result<Arc<Listener>, TransportError> {
        let channel = sh.fabric.create_event_channel().map_err(|e| {
            TransportError::Fabric(format!("cannot create an RDMA CM event channel: {e}"))
        })?;
        let acc = Arc::new(Listener {
            sh: Arc::clone(&sh),
            channel,
            st: Mutex::new(State {
                listeners: Vec::new(),
                poller: None,
                async_pollers: Vec::new(),
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
                let mut ids = Vec::new();
                for (d, dev) in a.sh.devices.iter().enumerate() {
                    let me = Arc::clone(&a);
                    ids.push(
                        rctx.poller(format!("nvmf_rdma_async_{}", dev.name))
                            .period(period)
                            .wake_fd(dev.device.async_fd())
                            .register(move |_| PollStatus::from_count(me.async_events(d))),
                    );
                }
                let mut st = a.st.lock();
                st.poller = Some(id);
                st.async_pollers = ids;
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
        let ids: Vec<PollerId> = st
            .poller
            .take()
            .into_iter()
            .chain(st.async_pollers.drain(..))
            .collect();
        if !ids.is_empty() {
            let _ = self.sh.reactors.send_ctrl(0, move |rctx| {
                for id in ids {
                    rctx.unregister_poller(id);
                }
            });
        }
    }

    /// SPDK's policy: admin queues round-robin, I/O queues to the group with the fewest I/O
    /// queues, scanning from a cursor that moves past each choice.
    pub fn choose(&self, admin: bool, loads: &[PollGroupLoad]) -> usize {
        let mut st = self.st.lock();
        let State {
            next_admin,
            next_io,
            ..
        } = &mut *st;
        choose(next_admin, next_io, admin, loads)
    }

    /// One acceptor poll: up to [`EVENT_BATCH`] connection-manager events.
    pub fn poll(&self) -> usize {
        cm::poll_events(&self.channel, EVENT_BATCH, |input| match input {
            CmInput::Connect { listener, req } => self.connect_request(listener, *req),
            CmInput::Notice { id, notice } => self.notice(id, notice),
        })
    }

    /// Reads every device's asynchronous events: a queue pair that hit a fatal error is closed
    /// by its poll group (its completions fail too; this only makes it prompt), the rest is
    /// logged. Reading them also keeps the kernel's event queue from growing.
    fn async_events(&self, d: usize) -> usize {
        let mut n = 0;
        if let Some(dev) = self.sh.devices.get(d) {
            for _ in 0..EVENT_BATCH {
                let ev = match dev.device.get_async_event() {
                    Ok(Some(ev)) => ev,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::debug!(device = dev.name, "async event: {e}");
                        break;
                    }
                };
                n += 1;
                match (ev.kind, ev.element) {
                    (
                        AsyncEventKind::QpFatal
                        | AsyncEventKind::QpReqErr
                        | AsyncEventKind::QpAccessErr,
                        AsyncElement::Qp(qpn),
                    ) => {
                        tracing::warn!(device = dev.name, qpn, "queue pair error: {:?}", ev.kind);
                        let Some(pg) = self.sh.qp_routes.lock().get(&(d, qpn)).copied() else {
                            continue;
                        };
                        to_poll_group::<RdmaPg>(
                            &self.sh.reactors,
                            self.sh.index,
                            pg,
                            move |pg, core| pg.qp_fatal(core, d, qpn),
                        );
                    }
                    (AsyncEventKind::QpLastWqeReached | AsyncEventKind::CommEstablished, _) => {
                        tracing::trace!(device = dev.name, "async event {:?}", ev.kind);
                    }
                    (AsyncEventKind::DeviceFatal, _) => {
                        tracing::error!(device = dev.name, "RDMA device failed");
                    }
                    (kind, el) => {
                        tracing::debug!(device = dev.name, "async event {kind:?} on {el:?}")
                    }
                }
            }
        }
        n
    }

    /// A connection event: to the poll group that owns the connection.
    fn notice(&self, id: u64, notice: CmNotice) {
        // TimeWait exit, rejects and connect errors concern nothing a poll group still holds
        // (the queue pair closes on the disconnect before them).
        if matches!(
            notice,
            CmNotice::TimewaitExit | CmNotice::Rejected | CmNotice::ConnectError
        ) {
            return;
        }
        let Some(pg) = self.sh.routes.lock().get(&id).copied() else {
            if !matches!(notice, CmNotice::Established | CmNotice::Disconnected) {
                tracing::warn!(id, "RDMA CM {notice:?} on a listener or unknown id");
            }
            return;
        };
        to_poll_group::<RdmaPg>(&self.sh.reactors, self.sh.index, pg, move |pg, core| {
            pg.cm_notice(core, id, notice)
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

/// The poll-group choice with its cursors (see [`Listener::choose`]).
fn choose(
    next_admin: &mut usize,
    next_io: &mut usize,
    admin: bool,
    loads: &[PollGroupLoad],
) -> usize {
    let n = loads.len();
    if n == 0 {
        return 0;
    }
    if admin {
        let i = *next_admin % n;
        *next_admin = (i + 1) % n;
        return loads[i].index;
    }
    let start = *next_io % n;
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
    *next_io = (best + 1) % n;
    loads[best].index
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loads(io: &[usize]) -> Vec<PollGroupLoad> {
        io.iter()
            .enumerate()
            .map(|(index, &io_qpairs)| PollGroupLoad {
                index,
                admin_qpairs: 0,
                io_qpairs,
            })
            .collect()
    }

    #[test]
    fn admin_round_robin_and_io_least_loaded() {
        let (mut a, mut i) = (0, 0);
        let l = loads(&[5, 5, 5]);
        let admins: Vec<usize> = (0..4).map(|_| choose(&mut a, &mut i, true, &l)).collect();
        assert_eq!(admins, [0, 1, 2, 0]);
        assert_eq!(choose(&mut a, &mut i, false, &loads(&[3, 1, 2])), 1);
        assert_eq!(i, 2, "the cursor moves past the choice");
        // Ties go to the first group from the cursor; an empty group stops the scan.
        assert_eq!(choose(&mut a, &mut i, false, &loads(&[1, 1, 1])), 2);
        assert_eq!(choose(&mut a, &mut i, false, &loads(&[4, 0, 0])), 1);
        assert_eq!(choose(&mut a, &mut i, false, &[]), 0);
    }
}
