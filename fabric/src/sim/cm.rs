//! Simulated RDMA connection manager: listeners by IP:port on a [`super::SimNetwork`], connect
//! requests with private data, accept/reject, disconnect and the events both sides see.
//!
//! Locking: an identifier's state lock may be held while taking the network registry lock or
//! the timer's lock (a leaf: tasks run and are dropped without it), never the other way round,
//! and two identifiers' locks are never held together.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::{EventQueue, NetInner, SDevice, SQp, SimNetwork, TimerKey};

/// How long a disconnect request waits for the peer's answer before giving up (IB CM retries
/// its DREQ for a few seconds).
const DREQ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
use crate::cm::{CmId, CmIdImpl};
use crate::error::{FabricError, Result};
use crate::types::*;

/// Bound addresses and live identifiers of a network.
#[derive(Default)]
pub(crate) struct CmRegistry {
    bound: HashMap<SocketAddr, Weak<SCmId>>,
    ids: HashMap<u64, Weak<SCmId>>,
    next_port: u16,
}

impl CmRegistry {
    fn conflicts(&self, addr: &SocketAddr) -> bool {
        self.bound.iter().any(|(k, w)| {
            w.strong_count() > 0
                && k.port() == addr.port()
                && (k.ip() == addr.ip() || k.ip().is_unspecified() || addr.ip().is_unspecified())
        })
    }

    /// Reserves `addr` (port 0: an ephemeral port) for `id`.
    fn reserve(&mut self, addr: SocketAddr, id: &Arc<SCmId>) -> Result<SocketAddr> {
        self.bound.retain(|_, w| w.strong_count() > 0);
        let mut a = addr;
        if a.port() == 0 {
            let mut found = false;
            for _ in 0..u16::MAX {
                self.next_port = if self.next_port < 32768 {
                    32768
                } else {
                    self.next_port.wrapping_add(1).max(32768)
                };
                a.set_port(self.next_port);
                if !self.conflicts(&a) {
                    found = true;
                    break;
                }
            }
            if !found {
                return Err(FabricError::AddrInUse);
            }
        } else if self.conflicts(&a) {
            return Err(FabricError::AddrInUse);
        }
        self.bound.insert(a, Arc::downgrade(id));
        Ok(a)
    }

    fn listener(&self, dst: &SocketAddr) -> Option<Arc<SCmId>> {
        let exact = self.bound.get(dst).and_then(Weak::upgrade);
        let any = || {
            self.bound
                .iter()
                .find(|(k, _)| k.port() == dst.port() && k.ip().is_unspecified())
                .and_then(|(_, w)| w.upgrade())
        };
        exact.or_else(any)
    }
}

/// A simulated event channel.
pub(crate) struct SEventChannel {
    net: Arc<NetInner>,
    q: EventQueue<CmEvent>,
}

impl SEventChannel {
    pub(crate) fn new(net: &SimNetwork) -> Result<Arc<Self>> {
        Ok(Arc::new(SEventChannel {
            net: Arc::clone(&net.inner),
            q: EventQueue::new()?,
        }))
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.q.fd()
    }

    pub(crate) fn get_event(&self) -> Option<CmEvent> {
        self.q.pop()
    }
}

#[derive(Clone, Copy)]
struct Saved {
    rnr_retry: u8,
}

enum Conn {
    Idle,
    AddrResolved,
    RouteResolved,
    /// Active side waiting for an answer.
    Connecting {
        passive: Weak<SCmId>,
    },
    /// Passive side holding an unanswered request.
    Requested {
        active: Weak<SCmId>,
        param: Saved,
    },
    Connected {
        peer: Weak<SCmId>,
    },
    /// We disconnected and wait for the peer's answer; `timeout` gives up waiting (cancelled
    /// when the answer comes or the identifier goes, so that nothing of a closed connection
    /// stays on the timer for [`DREQ_TIMEOUT`]).
    DisconnectSent {
        timeout: Option<TimerKey>,
    },
    /// The peer disconnected; we have not yet.
    DisconnectRcvd {
        peer: Weak<SCmId>,
    },
    Disconnected,
}

struct IdState {
    device: Option<Arc<SDevice>>,
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
    bound: Option<SocketAddr>,
    listening: bool,
    conn: Conn,
    qp: Weak<SQp>,
}

/// A simulated connection identifier.
pub(crate) struct SCmId {
    handle: u64,
    net: Arc<NetInner>,
    ch: Weak<SEventChannel>,
    st: Mutex<IdState>,
}

fn padded(data: &[u8], size: usize) -> Vec<u8> {
    let mut v = data.to_vec();
    v.resize(size.max(data.len()), 0);
    v
}

impl SCmId {
    fn new_arc(net: &Arc<NetInner>, ch: Weak<SEventChannel>, st: IdState) -> Arc<Self> {
        let id = Arc::new(SCmId {
            handle: crate::next_handle(),
            net: Arc::clone(net),
            ch,
            st: Mutex::new(st),
        });
        net.cm.lock().ids.insert(id.handle, Arc::downgrade(&id));
        id
    }

    pub(crate) fn create(ch: &Arc<SEventChannel>) -> Arc<Self> {
        Self::new_arc(
            &ch.net,
            Arc::downgrade(ch),
            IdState {
                device: None,
                local: None,
                peer: None,
                bound: None,
                listening: false,
                conn: Conn::Idle,
                qp: Weak::new(),
            },
        )
    }

    pub(crate) fn handle(&self) -> u64 {
        self.handle
    }

    fn event(&self, kind: CmEventKind, status: i32) {
        if let Some(ch) = self.ch.upgrade() {
            ch.q.push(CmEvent {
                id: self.handle,
                kind,
                status,
            });
        }
    }

    pub(crate) fn bind(self: &Arc<Self>, addr: SocketAddr) -> Result<()> {
        let dev = if addr.ip().is_unspecified() {
            None
        } else {
            Some(
                self.net
                    .device_by_ip(addr.ip())
                    .ok_or(FabricError::AddrNotAvailable)?,
            )
        };
        let mut st = self.st.lock();
        if st.bound.is_some() {
            return Err(FabricError::InvalidState("cm id already bound"));
        }
        let a = self.net.cm.lock().reserve(addr, self)?;
        st.bound = Some(a);
        st.local = Some(a);
        st.device = dev;
        Ok(())
    }

    pub(crate) fn listen(&self, _backlog: i32) -> Result<()> {
        let mut st = self.st.lock();
        if st.bound.is_none() {
            return Err(FabricError::InvalidState("bind before listen"));
        }
        st.listening = true;
        Ok(())
    }

    pub(crate) fn resolve_addr(
        self: &Arc<Self>,
        src: Option<SocketAddr>,
        dst: SocketAddr,
    ) -> Result<()> {
        let dst_dev = self.net.device_by_ip(dst.ip());
        let src_dev = match src {
            Some(s) if !s.ip().is_unspecified() => Some(
                self.net
                    .device_by_ip(s.ip())
                    .ok_or(FabricError::AddrNotAvailable)?,
            ),
            // Routing: the destination's own device (loopback), else the first device.
            _ => dst_dev.clone().or_else(|| self.net.first_device()),
        };
        let mut st = self.st.lock();
        if !matches!(st.conn, Conn::Idle) {
            return Err(FabricError::InvalidState(
                "cm id already resolved or connected",
            ));
        }
        let (Some(sdev), Some(_)) = (src_dev, dst_dev) else {
            drop(st);
            self.event(CmEventKind::AddrError, -libc::EHOSTUNREACH);
            return Ok(());
        };
        if st.bound.is_none() {
            let want = SocketAddr::new(sdev.ip(), src.map_or(0, |s| s.port()));
            let a = self.net.cm.lock().reserve(want, self)?;
            st.bound = Some(a);
            st.local = Some(a);
        }
        st.device = Some(sdev);
        st.peer = Some(dst);
        st.conn = Conn::AddrResolved;
        drop(st);
        self.event(CmEventKind::AddrResolved, 0);
        Ok(())
    }

    pub(crate) fn resolve_route(&self) -> Result<()> {
        let mut st = self.st.lock();
        if !matches!(st.conn, Conn::AddrResolved) {
            return Err(FabricError::InvalidState("resolve the address first"));
        }
        st.conn = Conn::RouteResolved;
        drop(st);
        self.event(CmEventKind::RouteResolved, 0);
        Ok(())
    }

    pub(crate) fn connect(self: &Arc<Self>, p: &ConnParam<'_>) -> Result<()> {
        let (local, dst) = {
            let st = self.st.lock();
            if !matches!(st.conn, Conn::RouteResolved) {
                return Err(FabricError::InvalidState("resolve the route first"));
            }
            if st.qp.strong_count() == 0 {
                return Err(FabricError::InvalidState(
                    "create the queue pair before connect",
                ));
            }
            match (st.local, st.peer) {
                (Some(l), Some(d)) => (l, d),
                _ => return Err(FabricError::InvalidState("cm id has no addresses")),
            }
        };
        let param = Saved {
            rnr_retry: p.rnr_retry_count,
        };
        if let Some(pdata) = self.net.faults.take_refusal() {
            self.st.lock().conn = Conn::Idle;
            self.event(
                CmEventKind::Rejected {
                    private_data: padded(&pdata, CM_REJ_PRIVATE_DATA),
                },
                CM_REJ_CONSUMER_DEFINED,
            );
            return Ok(());
        }
        let listener = self.net.cm.lock().listener(&dst);
        let listener = listener.filter(|l| l.st.lock().listening && l.ch.strong_count() > 0);
        let dst_dev = self.net.device_by_ip(dst.ip());
        let (Some(l), Some(dst_dev)) = (listener, dst_dev) else {
            self.st.lock().conn = Conn::Idle;
            self.event(
                CmEventKind::Rejected {
                    private_data: Vec::new(),
                },
                CM_REJ_INVALID_SERVICE_ID,
            );
            return Ok(());
        };
        let passive = Self::new_arc(
            &self.net,
            l.ch.clone(),
            IdState {
                device: Some(dst_dev),
                local: Some(dst),
                peer: Some(local),
                bound: None,
                listening: false,
                conn: Conn::Requested {
                    active: Arc::downgrade(self),
                    param,
                },
                qp: Weak::new(),
            },
        );
        self.st.lock().conn = Conn::Connecting {
            passive: Arc::downgrade(&passive),
        };
        let req = ConnectRequest {
            id: CmId(CmIdImpl::Sim(passive)),
            private_data: padded(p.private_data, CM_REQ_PRIVATE_DATA),
            // As IB CM reports them: from the passive side's point of view.
            responder_resources: p.initiator_depth,
            initiator_depth: p.responder_resources,
            local_addr: dst,
            peer_addr: local,
        };
        l.event(CmEventKind::ConnectRequest(Box::new(req)), 0);
        Ok(())
    }

    pub(crate) fn accept(self: &Arc<Self>, p: &ConnParam<'_>) -> Result<()> {
        let (active_w, aparam, my_qp, dev) = {
            let st = self.st.lock();
            let Conn::Requested { active, param } = &st.conn else {
                return Err(FabricError::InvalidState("no connection request to accept"));
            };
            let qp = st.qp.upgrade().ok_or(FabricError::InvalidState(
                "create the queue pair before accept",
            ))?;
            let dev = st
                .device
                .clone()
                .ok_or(FabricError::InvalidState("cm id has no device"))?;
            (active.clone(), *param, qp, dev)
        };
        if p.responder_resources as u32 > dev.attr().max_qp_rd_atom
            || p.initiator_depth as u32 > dev.attr().max_qp_init_rd_atom
        {
            return Err(FabricError::InvalidArgument(
                "responder_resources/initiator_depth above the device limit",
            ));
        }
        let gone = || FabricError::Os {
            op: "rdma_accept",
            errno: libc::ECONNREFUSED,
        };
        let Some(active) = active_w.upgrade() else {
            self.st.lock().conn = Conn::Idle;
            return Err(gone());
        };
        let active_qp = {
            let ast = active.st.lock();
            match &ast.conn {
                Conn::Connecting { passive }
                    if std::ptr::eq(passive.as_ptr(), Arc::as_ptr(self)) =>
                {
                    ast.qp.upgrade()
                }
                _ => None,
            }
        };
        let Some(active_qp) = active_qp else {
            self.st.lock().conn = Conn::Idle;
            return Err(gone());
        };
        // As IB CM programs the queue pairs: each side's rnr_retry_count is how often the
        // *other* side retries, and the active side accepts as many incoming RDMA READs as the
        // passive side's initiator depth.
        SQp::connect_pair(
            &active_qp,
            p.rnr_retry_count,
            p.initiator_depth,
            &my_qp,
            aparam.rnr_retry,
            p.responder_resources,
        )?;
        self.st.lock().conn = Conn::Connected {
            peer: Arc::downgrade(&active),
        };
        active.st.lock().conn = Conn::Connected {
            peer: Arc::downgrade(self),
        };
        active.event(
            CmEventKind::Established {
                private_data: padded(p.private_data, CM_REP_PRIVATE_DATA),
                responder_resources: p.initiator_depth,
                initiator_depth: p.responder_resources,
            },
            0,
        );
        self.event(
            CmEventKind::Established {
                private_data: Vec::new(),
                responder_resources: p.responder_resources,
                initiator_depth: p.initiator_depth,
            },
            0,
        );
        Ok(())
    }

    pub(crate) fn reject(&self, pdata: &[u8]) -> Result<()> {
        let active = {
            let mut st = self.st.lock();
            let Conn::Requested { active, .. } = &st.conn else {
                return Err(FabricError::InvalidState("no connection request to reject"));
            };
            let a = active.clone();
            st.conn = Conn::Idle;
            a
        };
        if let Some(a) = active.upgrade() {
            a.rejected(self, padded(pdata, CM_REJ_PRIVATE_DATA));
        }
        Ok(())
    }

    /// The passive side `by` rejected us.
    fn rejected(&self, by: &SCmId, private_data: Vec<u8>) {
        {
            let mut st = self.st.lock();
            match &st.conn {
                Conn::Connecting { passive } if std::ptr::eq(passive.as_ptr(), by) => {
                    st.conn = Conn::Idle;
                }
                _ => return,
            }
        }
        self.event(
            CmEventKind::Rejected { private_data },
            CM_REJ_CONSUMER_DEFINED,
        );
    }

    /// Disconnect, as RDMA CM over IB CM does it: the local queue pair moves to the error state
    /// and a DREQ goes to the peer, which reports DISCONNECTED; when the peer disconnects too
    /// (its DREP), we report DISCONNECTED and both sides TIMEWAIT_EXIT. A peer that never
    /// answers is given up after [`DREQ_TIMEOUT`].
    pub(crate) fn disconnect(self: &Arc<Self>) {
        enum Next {
            SendDreq(Weak<SCmId>),
            SendDrep(Weak<SCmId>),
            Nothing,
        }
        let (next, qp) = {
            let mut st = self.st.lock();
            let qp = st.qp.upgrade();
            let next = match std::mem::replace(&mut st.conn, Conn::Idle) {
                Conn::Connected { peer } => {
                    st.conn = Conn::DisconnectSent { timeout: None };
                    Next::SendDreq(peer)
                }
                Conn::DisconnectRcvd { peer } => {
                    st.conn = Conn::Disconnected;
                    Next::SendDrep(peer)
                }
                other => {
                    st.conn = other;
                    Next::Nothing
                }
            };
            (next, qp)
        };
        if let Some(q) = qp {
            q.enter_error();
        }
        match next {
            Next::SendDreq(peer) => {
                if let Some(p) = peer.upgrade() {
                    p.on_dreq(self);
                }
                // Still unanswered (a crossed DREQ answers at once): wait for the DREP at most
                // DREQ_TIMEOUT. The timer's lock is a leaf, so taking it under ours is fine.
                let mut st = self.st.lock();
                if let Conn::DisconnectSent { timeout } = &mut st.conn {
                    let me = Arc::downgrade(self);
                    *timeout = Some(self.net.timer.schedule(
                        DREQ_TIMEOUT,
                        Box::new(move || {
                            if let Some(me) = me.upgrade() {
                                me.on_drep();
                            }
                        }),
                    ));
                }
            }
            Next::SendDrep(peer) => {
                self.event(CmEventKind::TimewaitExit, 0);
                if let Some(p) = peer.upgrade() {
                    p.on_drep();
                }
            }
            Next::Nothing => {}
        }
    }

    /// The peer sent a disconnect request.
    fn on_dreq(&self, from: &Arc<SCmId>) {
        let crossed = {
            let mut st = self.st.lock();
            match &st.conn {
                Conn::Connected { .. } => {
                    st.conn = Conn::DisconnectRcvd {
                        peer: Arc::downgrade(from),
                    };
                    false
                }
                // Both sides disconnected at once: each request answers the other.
                Conn::DisconnectSent { timeout } => {
                    if let Some(k) = *timeout {
                        self.net.timer.cancel(k);
                    }
                    st.conn = Conn::Disconnected;
                    true
                }
                _ => return,
            }
        };
        self.event(CmEventKind::Disconnected, 0);
        if crossed {
            self.event(CmEventKind::TimewaitExit, 0);
            from.on_drep();
        }
    }

    /// The peer was destroyed while connected: its DREQ arrives, and its DREP right after.
    fn on_dreq_from_destroyed(&self) {
        let was = {
            let mut st = self.st.lock();
            let was = match st.conn {
                Conn::Connected { .. } => true,
                Conn::DisconnectSent { timeout } => {
                    if let Some(k) = timeout {
                        self.net.timer.cancel(k);
                    }
                    true
                }
                _ => false,
            };
            if was {
                st.conn = Conn::Disconnected;
            }
            was
        };
        if was {
            self.event(CmEventKind::Disconnected, 0);
            self.event(CmEventKind::TimewaitExit, 0);
        }
    }

    /// The peer answered our disconnect request (or it timed out).
    fn on_drep(&self) {
        {
            let mut st = self.st.lock();
            let Conn::DisconnectSent { timeout } = st.conn else {
                return;
            };
            // Answered: the timeout goes now (when it is the timeout running, it is gone
            // already).
            if let Some(k) = timeout {
                self.net.timer.cancel(k);
            }
            st.conn = Conn::Disconnected;
        }
        self.event(CmEventKind::Disconnected, 0);
        self.event(CmEventKind::TimewaitExit, 0);
    }

    pub(crate) fn set_qp(&self, qp: &Arc<SQp>) -> Result<()> {
        let mut st = self.st.lock();
        if st.qp.strong_count() > 0 {
            return Err(FabricError::InvalidState("cm id already has a queue pair"));
        }
        st.qp = Arc::downgrade(qp);
        Ok(())
    }

    pub(crate) fn clear_qp(&self, qp: &Arc<SQp>) {
        let mut st = self.st.lock();
        if std::ptr::eq(st.qp.as_ptr(), Arc::as_ptr(qp)) {
            st.qp = Weak::new();
        }
    }

    pub(crate) fn device(&self) -> Option<Arc<SDevice>> {
        self.st.lock().device.clone()
    }

    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        self.st.lock().local
    }

    pub(crate) fn peer_addr(&self) -> Option<SocketAddr> {
        self.st.lock().peer
    }
}

impl Drop for SCmId {
    fn drop(&mut self) {
        let st = self.st.get_mut();
        {
            let mut reg = self.net.cm.lock();
            reg.ids.remove(&self.handle);
            if let Some(b) = st.bound {
                reg.bound.remove(&b);
            }
        }
        match std::mem::replace(&mut st.conn, Conn::Idle) {
            // Destroying a connected identifier sends a DREQ; destroying one that received a
            // DREQ answers it.
            Conn::Connected { peer } => {
                if let Some(p) = peer.upgrade() {
                    p.on_dreq_from_destroyed();
                }
            }
            Conn::DisconnectRcvd { peer } => {
                if let Some(p) = peer.upgrade() {
                    p.on_drep();
                }
            }
            Conn::Requested { active, .. } => {
                // Destroying an unanswered request rejects it.
                if let Some(a) = active.upgrade() {
                    a.rejected(self, Vec::new());
                }
            }
            Conn::Connecting { passive } => {
                if let Some(p) = passive.upgrade() {
                    let mut ps = p.st.lock();
                    if matches!(ps.conn, Conn::Requested { .. }) {
                        ps.conn = Conn::Idle;
                    }
                }
            }
            // Nobody is left to hear the peer's answer or its absence.
            Conn::DisconnectSent { timeout: Some(k) } => {
                self.net.timer.cancel(k);
            }
            _ => {}
        }
    }
}

/// Sends `kind` to every identifier bound to `dev`; returns how many got it.
pub(crate) fn device_event(net: &Arc<NetInner>, dev: &Arc<SDevice>, kind: CmEventKind) -> usize {
    let ids: Vec<Arc<SCmId>> = net
        .cm
        .lock()
        .ids
        .values()
        .filter_map(Weak::upgrade)
        .collect();
    let mut n = 0;
    for id in ids {
        let on_dev = id
            .st
            .lock()
            .device
            .as_ref()
            .is_some_and(|d| Arc::ptr_eq(d, dev));
        if on_dev {
            let k = match kind {
                CmEventKind::DeviceRemoval => CmEventKind::DeviceRemoval,
                CmEventKind::AddrChange => CmEventKind::AddrChange,
                _ => CmEventKind::Other(0),
            };
            id.event(k, 0);
            n += 1;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::time::Duration;

    use crate::{CmEvent, CmEventKind, CmId, ConnParam, Cq, EventChannel, Fabric, Pd, Qp, QpInit};

    use super::SimNetwork;

    const IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1));

    fn next(ch: &EventChannel) -> CmEvent {
        loop {
            if let Some(e) = ch.get_event().expect("event") {
                return e;
            }
            assert!(
                crate::wait_readable(ch.fd(), Duration::from_secs(5)).expect("poll"),
                "no event"
            );
        }
    }

    /// One side of a connection: its identifier and what its queue pair needs.
    struct Side {
        id: CmId,
        _qp: Qp,
        _cq: Cq,
        _pd: Pd,
    }

    fn side(id: CmId) -> Side {
        let dev = id.device().expect("device");
        let pd = dev.alloc_pd().expect("pd");
        let cq = dev.create_cq(16, None).expect("cq");
        let qp = id
            .create_qp(&QpInit {
                pd: &pd,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: Default::default(),
                sq_sig_all: false,
            })
            .expect("qp");
        Side {
            id,
            _qp: qp,
            _cq: cq,
            _pd: pd,
        }
    }

    /// A listener on `port` and a connected (client, server) pair.
    fn connected(lch: &EventChannel, cch: &EventChannel, port: u16) -> (Side, Side) {
        let to = SocketAddr::new(IP, port);
        let id = cch.create_id().expect("id");
        id.resolve_addr(None, to, 1000).expect("resolve");
        assert!(matches!(next(cch).kind, CmEventKind::AddrResolved));
        let client = side(id);
        client.id.resolve_route(1000).expect("route");
        assert!(matches!(next(cch).kind, CmEventKind::RouteResolved));
        client.id.connect(&ConnParam::default()).expect("connect");
        let req = match next(lch).kind {
            CmEventKind::ConnectRequest(r) => *r,
            other => panic!("{other:?}"),
        };
        let server = side(req.id);
        server.id.accept(&ConnParam::default()).expect("accept");
        assert!(matches!(next(cch).kind, CmEventKind::Established { .. }));
        assert!(matches!(next(lch).kind, CmEventKind::Established { .. }));
        (client, server)
    }

    fn drain_disconnect(ch: &EventChannel) {
        assert!(matches!(next(ch).kind, CmEventKind::Disconnected));
        assert!(matches!(next(ch).kind, CmEventKind::TimewaitExit));
    }

    /// A DREQ answered by the peer's DREP takes its timeout off the timer at once: nothing of
    /// a closed connection (the identifier's allocation, which the timeout's task pins) stays
    /// there for DREQ_TIMEOUT. Each side disconnecting first, and the identifier destroyed
    /// while still waiting for the answer.
    #[test]
    fn answered_disconnects_leave_nothing_on_the_timer() {
        let net = SimNetwork::new();
        net.add_device("sim0", IP).expect("device");
        let f = Fabric::sim(&net);
        let timer = &net.inner.timer;
        let lch = f.create_event_channel().expect("channel");
        let l = lch.create_id().expect("id");
        l.bind(SocketAddr::new(IP, 4420)).expect("bind");
        l.listen(16).expect("listen");
        let cch = f.create_event_channel().expect("channel");
        for i in 0..50 {
            let (client, server) = connected(&lch, &cch, 4420);
            let (first, first_ch, second, second_ch) = if i % 2 == 0 {
                (&client, &cch, &server, &lch)
            } else {
                (&server, &lch, &client, &cch)
            };
            first.id.disconnect().expect("disconnect");
            assert_eq!(timer.pending(), 1, "the DREQ waits for its answer");
            assert!(matches!(next(second_ch).kind, CmEventKind::Disconnected));
            second.id.disconnect().expect("disconnect");
            assert!(matches!(next(second_ch).kind, CmEventKind::TimewaitExit));
            drain_disconnect(first_ch);
            assert_eq!(
                timer.pending(),
                0,
                "cycle {i}: the answered DREQ's timeout is gone"
            );
        }
        // Destroyed while waiting for the answer: the timeout goes with it.
        let (client, server) = connected(&lch, &cch, 4420);
        client.id.disconnect().expect("disconnect");
        assert_eq!(timer.pending(), 1);
        drop(client);
        assert_eq!(timer.pending(), 0);
        // The peer then destroyed without answering: nothing is scheduled either.
        assert!(matches!(next(&lch).kind, CmEventKind::Disconnected));
        drop(server);
        assert_eq!(timer.pending(), 0);
    }
}
