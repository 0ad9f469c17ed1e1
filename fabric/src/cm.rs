//! The RDMA connection manager behind one API: event channels and connection identifiers.
//!
//! Passive side: [`EventChannel::create_id`] → [`CmId::bind`] → [`CmId::listen`] →
//! [`CmEventKind::ConnectRequest`] (carrying a new [`CmId`]) → [`CmId::create_qp`] on it →
//! [`CmId::accept`] or [`CmId::reject`] → [`CmEventKind::Established`] → … →
//! [`CmEventKind::Disconnected`] → [`CmId::disconnect`] → [`CmEventKind::TimewaitExit`].
//!
//! Active side: [`CmId::resolve_addr`] → [`CmEventKind::AddrResolved`] → [`CmId::create_qp`] →
//! [`CmId::resolve_route`] → [`CmEventKind::RouteResolved`] → [`CmId::connect`] →
//! [`CmEventKind::Established`] (with the accept's private data) or
//! [`CmEventKind::Rejected`] (with the reject's private data).
//!
//! An identifier and its queue pair are destroyed when both the [`CmId`] and the [`Qp`] are
//! dropped; destroying a connected identifier disconnects it, destroying an unanswered
//! connection request rejects it.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::Arc;

use crate::error::{FabricError, Result};
use crate::types::*;
use crate::verbs::{Device, DeviceImpl, Qp, QpInit};
use crate::{rdma, sim};

/// A connection-manager event channel: a non-blocking fd plus [`EventChannel::get_event`].
/// Identifiers created from it (and the connection requests they receive) report here.
pub struct EventChannel(pub(crate) EcImpl);

pub(crate) enum EcImpl {
    Rdma(Arc<rdma::REventChannel>),
    Sim(Arc<sim::SEventChannel>),
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel")
            .field("fd", &self.fd())
            .finish()
    }
}

impl EventChannel {
    /// The fd to wait on (readable when an event is queued).
    pub fn fd(&self) -> RawFd {
        match &self.0 {
            EcImpl::Rdma(c) => c.fd(),
            EcImpl::Sim(c) => c.fd(),
        }
    }

    /// The next event, or `None` when there is none. Never blocks. Events are acknowledged
    /// internally once their contents are copied out.
    pub fn get_event(&self) -> Result<Option<CmEvent>> {
        match &self.0 {
            EcImpl::Rdma(c) => c.get_event(),
            EcImpl::Sim(c) => Ok(c.get_event()),
        }
    }

    /// Creates a connection identifier (TCP port space, reliable connected) reporting here.
    pub fn create_id(&self) -> Result<CmId> {
        match &self.0 {
            EcImpl::Rdma(c) => Ok(CmId(CmIdImpl::Rdma(rdma::RCmId::create(c)?))),
            EcImpl::Sim(c) => Ok(CmId(CmIdImpl::Sim(sim::SCmId::create(c)))),
        }
    }
}

/// A connection identifier (`struct rdma_cm_id`).
pub struct CmId(pub(crate) CmIdImpl);

pub(crate) enum CmIdImpl {
    Rdma(Arc<rdma::RCmId>),
    Sim(Arc<sim::SCmId>),
}

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmId")
            .field("handle", &self.handle())
            .field("local", &self.local_addr())
            .field("peer", &self.peer_addr())
            .finish()
    }
}

impl CmId {
    /// A process-unique handle; events about this identifier carry it in [`CmEvent::id`].
    pub fn handle(&self) -> u64 {
        match &self.0 {
            CmIdImpl::Rdma(i) => i.handle(),
            CmIdImpl::Sim(i) => i.handle(),
        }
    }

    /// Binds to a local address (port 0 picks one). Binding to a device's address ties the
    /// identifier to that device; the unspecified address listens on every device.
    pub fn bind(&self, addr: SocketAddr) -> Result<()> {
        match &self.0 {
            CmIdImpl::Rdma(i) => i.bind(addr),
            CmIdImpl::Sim(i) => i.bind(addr),
        }
    }

    /// Starts listening for connection requests.
    pub fn listen(&self, backlog: i32) -> Result<()> {
        match &self.0 {
            CmIdImpl::Rdma(i) => i.listen(backlog),
            CmIdImpl::Sim(i) => i.listen(backlog),
        }
    }

    /// Resolves `dst` (and binds to `src`, or a source address chosen by routing) to a device.
    /// Completes with [`CmEventKind::AddrResolved`] or [`CmEventKind::AddrError`].
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: i32,
    ) -> Result<()> {
        match &self.0 {
            CmIdImpl::Rdma(i) => i.resolve_addr(src, dst, timeout_ms),
            CmIdImpl::Sim(i) => i.resolve_addr(src, dst),
        }
    }

    /// Resolves the route to the peer. Completes with [`CmEventKind::RouteResolved`] or
    /// [`CmEventKind::RouteError`].
    pub fn resolve_route(&self, timeout_ms: i32) -> Result<()> {
        match &self.0 {
            CmIdImpl::Rdma(i) => i.resolve_route(timeout_ms),
            CmIdImpl::Sim(i) => i.resolve_route(),
        }
    }

    /// Sends a connection request (create the queue pair first). Completes with
    /// [`CmEventKind::Established`], [`CmEventKind::Rejected`], [`CmEventKind::Unreachable`] or
    /// [`CmEventKind::ConnectError`].
    pub fn connect(&self, param: &ConnParam<'_>) -> Result<()> {
        if param.private_data.len() > CM_REQ_PRIVATE_DATA {
            return Err(FabricError::InvalidArgument(
                "connect private data > 56 bytes",
            ));
        }
        match &self.0 {
            CmIdImpl::Rdma(i) => i.connect(param),
            CmIdImpl::Sim(i) => i.connect(param),
        }
    }

    /// Accepts a connection request received as [`CmEventKind::ConnectRequest`] (create the
    /// queue pair first). The queue pair is ready to send when this returns.
    pub fn accept(&self, param: &ConnParam<'_>) -> Result<()> {
        if param.private_data.len() > CM_REP_PRIVATE_DATA {
            return Err(FabricError::InvalidArgument(
                "accept private data > 196 bytes",
            ));
        }
        match &self.0 {
            CmIdImpl::Rdma(i) => i.accept(param),
            CmIdImpl::Sim(i) => i.accept(param),
        }
    }

    /// Rejects a connection request with private data (at most [`CM_REJ_PRIVATE_DATA`] bytes).
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        if private_data.len() > CM_REJ_PRIVATE_DATA {
            return Err(FabricError::InvalidArgument(
                "reject private data > 148 bytes",
            ));
        }
        match &self.0 {
            CmIdImpl::Rdma(i) => i.reject(private_data),
            CmIdImpl::Sim(i) => i.reject(private_data),
        }
    }

    /// Disconnects: moves the local queue pair to the error state (flushing everything
    /// outstanding) and tells the peer. Both sides get [`CmEventKind::Disconnected`], then
    /// [`CmEventKind::TimewaitExit`]. Calling it again, or after the peer disconnected, only
    /// makes sure the queue pair is in the error state.
    pub fn disconnect(&self) -> Result<()> {
        match &self.0 {
            CmIdImpl::Rdma(i) => i.disconnect(),
            CmIdImpl::Sim(i) => {
                i.disconnect();
                Ok(())
            }
        }
    }

    /// Creates the identifier's reliable-connected queue pair. The identifier must be bound to
    /// a device (resolved, or received in a connection request) and `init.pd` must belong to
    /// that device.
    pub fn create_qp(&self, init: &QpInit<'_>) -> Result<Qp> {
        match &self.0 {
            CmIdImpl::Rdma(i) => rdma::RQp::create(i, init),
            CmIdImpl::Sim(i) => sim::SQpHandle::create(i, init),
        }
    }

    /// The device the identifier is bound to, if any yet.
    pub fn device(&self) -> Option<Device> {
        match &self.0 {
            CmIdImpl::Rdma(i) => i.device().map(|d| Device(DeviceImpl::Rdma(d))),
            CmIdImpl::Sim(i) => i.device().map(|d| Device(DeviceImpl::Sim(d))),
        }
    }

    /// The local address, once bound or resolved.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.0 {
            CmIdImpl::Rdma(i) => i.local_addr(),
            CmIdImpl::Sim(i) => i.local_addr(),
        }
    }

    /// The peer's address, once resolved or connected.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        match &self.0 {
            CmIdImpl::Rdma(i) => i.peer_addr(),
            CmIdImpl::Sim(i) => i.peer_addr(),
        }
    }
}
