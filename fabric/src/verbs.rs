//! Verbs objects behind one API: devices, protection domains, memory registrations and windows,
//! completion channels and queues, shared receive queues and queue pairs.
//!
//! Every type here is a thin enum over the two providers (`rdma` and `sim`), so a call costs one
//! `match` and no virtual dispatch. Objects of different providers (or of different devices)
//! cannot be combined; trying returns [`FabricError::Mismatch`].

use std::os::fd::RawFd;
use std::sync::Arc;

use crate::error::{FabricError, PostError, Result};
use crate::mem::{DmaRegion, IoBuf};
use crate::types::*;
use crate::{rdma, sim};

/// An RDMA device (an adapter port's verbs context, or a simulated device).
///
/// Cheap to clone; two clones compare equal.
#[derive(Clone)]
pub struct Device(pub(crate) DeviceImpl);

#[derive(Clone)]
pub(crate) enum DeviceImpl {
    Rdma(Arc<rdma::RDevice>),
    Sim(Arc<sim::SDevice>),
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name())
            .finish()
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (DeviceImpl::Rdma(a), DeviceImpl::Rdma(b)) => a.ctx_addr() == b.ctx_addr(),
            (DeviceImpl::Sim(a), DeviceImpl::Sim(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for Device {}

impl Device {
    /// The device name (`rxe0`, `mlx5_0`, or the name a simulated device was given).
    pub fn name(&self) -> String {
        match &self.0 {
            DeviceImpl::Rdma(d) => d.name(),
            DeviceImpl::Sim(d) => d.name().to_string(),
        }
    }

    /// The device limits.
    pub fn query(&self) -> Result<DeviceAttr> {
        match &self.0 {
            DeviceImpl::Rdma(d) => d.query(),
            DeviceImpl::Sim(d) => Ok(d.attr().clone()),
        }
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        match &self.0 {
            DeviceImpl::Rdma(d) => Ok(Pd(PdImpl::Rdma(Arc::new(rdma::RPd::new(d)?)))),
            DeviceImpl::Sim(d) => Ok(Pd(PdImpl::Sim(Arc::new(sim::SPd::new(d))))),
        }
    }

    /// Creates a completion channel: an fd that becomes readable when an armed completion queue
    /// gets a completion.
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        match &self.0 {
            DeviceImpl::Rdma(d) => Ok(CompChannel(ChannelImpl::Rdma(Arc::new(
                rdma::RChannel::new(d)?,
            )))),
            DeviceImpl::Sim(d) => Ok(CompChannel(ChannelImpl::Sim(Arc::new(sim::SChannel::new(
                d,
            )?)))),
        }
    }

    /// Creates a completion queue with room for at least `cqe` completions, optionally tied to a
    /// completion channel of this device.
    pub fn create_cq(&self, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        if cqe == 0 {
            return Err(FabricError::InvalidArgument("cqe must be > 0"));
        }
        match &self.0 {
            DeviceImpl::Rdma(d) => {
                let ch = match channel {
                    None => None,
                    Some(CompChannel(ChannelImpl::Rdma(c))) => Some(Arc::clone(c)),
                    Some(_) => return Err(FabricError::Mismatch("completion channel")),
                };
                Ok(Cq(CqImpl::Rdma(Arc::new(rdma::RCq::new(d, cqe, ch)?))))
            }
            DeviceImpl::Sim(d) => {
                let ch = match channel {
                    None => None,
                    Some(CompChannel(ChannelImpl::Sim(c))) => Some(Arc::clone(c)),
                    Some(_) => return Err(FabricError::Mismatch("completion channel")),
                };
                Ok(Cq(CqImpl::Sim(sim::SCq::new(d, cqe, ch)?)))
            }
        }
    }

    /// The device's asynchronous-event fd (non-blocking): readable when
    /// [`Device::get_async_event`] has something. One owner per device should read it.
    pub fn async_fd(&self) -> RawFd {
        match &self.0 {
            DeviceImpl::Rdma(d) => d.async_fd(),
            DeviceImpl::Sim(d) => d.async_fd(),
        }
    }

    /// The next asynchronous event (queue-pair fatal, last WQE reached, CQ error, port events…),
    /// or `None` when there is none. Never blocks.
    pub fn get_async_event(&self) -> Result<Option<AsyncEvent>> {
        match &self.0 {
            DeviceImpl::Rdma(d) => d.get_async_event(),
            DeviceImpl::Sim(d) => Ok(d.get_async_event()),
        }
    }
}

/// A protection domain: registrations, windows, shared receive queues and queue pairs of one
/// domain can be used together. Cheap to clone.
#[derive(Clone)]
pub struct Pd(pub(crate) PdImpl);

#[derive(Clone)]
pub(crate) enum PdImpl {
    Rdma(Arc<rdma::RPd>),
    Sim(Arc<sim::SPd>),
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd")
            .field("device", &self.device().name())
            .finish()
    }
}

impl Pd {
    /// The device the domain belongs to.
    pub fn device(&self) -> Device {
        match &self.0 {
            PdImpl::Rdma(p) => Device(DeviceImpl::Rdma(Arc::clone(p.device()))),
            PdImpl::Sim(p) => Device(DeviceImpl::Sim(Arc::clone(p.device()))),
        }
    }

    /// Registers a whole region. The registration keeps the region alive (it holds the `Arc`),
    /// so the adapter can never reach freed memory.
    pub fn register(&self, region: &Arc<DmaRegion>, access: Access) -> Result<Mr> {
        let inner = match &self.0 {
            PdImpl::Rdma(p) => MrImpl::Rdma(rdma::RMr::new(p, region, access)?),
            PdImpl::Sim(p) => MrImpl::Sim(sim::SMr::new(p, region, access)?),
        };
        let (lkey, rkey) = match &inner {
            MrImpl::Rdma(m) => (m.lkey(), m.rkey()),
            MrImpl::Sim(m) => (m.key(), m.key()),
        };
        Ok(Mr {
            inner,
            lkey,
            rkey,
            region: Arc::clone(region),
            access,
        })
    }

    /// Allocates a type-2 memory window: a remote key for part of a registration that a peer
    /// can invalidate with SEND with invalidate. Bind it with [`Qp::post_bind_mw`].
    pub fn alloc_mw(&self) -> Result<Mw> {
        match &self.0 {
            PdImpl::Rdma(p) => Ok(Mw(MwImpl::Rdma(rdma::RMw::new(p)?))),
            PdImpl::Sim(p) => Ok(Mw(MwImpl::Sim(sim::SMw::new(p)?))),
        }
    }

    /// Creates a shared receive queue of `max_wr` receives with up to `max_sge` entries each.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq> {
        if max_wr == 0 || max_sge == 0 || max_sge as usize > MAX_SGE {
            return Err(FabricError::InvalidArgument("srq max_wr/max_sge"));
        }
        match &self.0 {
            PdImpl::Rdma(p) => Ok(Srq(SrqImpl::Rdma(Arc::new(rdma::RSrq::new(
                p, max_wr, max_sge,
            )?)))),
            PdImpl::Sim(p) => Ok(Srq(SrqImpl::Sim(sim::SSrq::new(p, max_wr, max_sge)?))),
        }
    }
}

/// A memory registration of a whole [`DmaRegion`]. Dropping it deregisters.
pub struct Mr {
    inner: MrImpl,
    lkey: u32,
    rkey: u32,
    region: Arc<DmaRegion>,
    access: Access,
}

pub(crate) enum MrImpl {
    Rdma(rdma::RMr),
    Sim(sim::SMr),
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &format_args!("{:#x}", self.region.addr()))
            .field("len", &self.region.len())
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("access", &self.access)
            .finish()
    }
}

impl Mr {
    /// Local key (for scatter/gather entries).
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key (for peers' RDMA READ/WRITE, if registered with remote access).
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The registered region.
    pub fn region(&self) -> &Arc<DmaRegion> {
        &self.region
    }

    /// Start address of the registration.
    pub fn addr(&self) -> u64 {
        self.region.addr()
    }

    /// Length of the registration.
    pub fn len(&self) -> usize {
        self.region.len()
    }

    /// Always false: a registration covers at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Access rights it was registered with.
    pub fn access(&self) -> Access {
        self.access
    }

    /// A scatter/gather entry for `[addr, addr + length)` with this registration's lkey. Not
    /// checked: a range outside the registration fails the work request, never memory.
    pub fn sge(&self, addr: u64, length: u32) -> Sge {
        Sge {
            addr,
            length,
            lkey: self.lkey,
        }
    }

    /// A scatter/gather entry for the bytes in use of `buf`, or `None` when `buf` does not live
    /// in this registration's region.
    pub fn sge_for(&self, buf: &IoBuf) -> Option<Sge> {
        if !Arc::ptr_eq(buf.region(), &self.region) || buf.len() > u32::MAX as usize {
            return None;
        }
        Some(self.sge(buf.addr(), buf.len() as u32))
    }

    pub(crate) fn inner(&self) -> &MrImpl {
        &self.inner
    }
}

/// A type-2 memory window. Dropping it deallocates the window.
pub struct Mw(pub(crate) MwImpl);

pub(crate) enum MwImpl {
    Rdma(rdma::RMw),
    Sim(sim::SMw),
}

impl std::fmt::Debug for Mw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mw")
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}

impl Mw {
    /// The window's current remote key: the key of the last successful
    /// [`Qp::post_bind_mw`] (each bind changes the low 8 bits).
    pub fn rkey(&self) -> u32 {
        match &self.0 {
            MwImpl::Rdma(m) => m.rkey(),
            MwImpl::Sim(m) => m.rkey(),
        }
    }
}

/// A completion channel: a non-blocking fd for a reactor's epoll set. Arm a completion queue
/// with [`Cq::req_notify`]; its next completion makes the fd readable; then call
/// [`CompChannel::get_event`] until it returns `None`, re-arm, and poll the queue again.
/// Cheap to clone.
#[derive(Clone)]
pub struct CompChannel(pub(crate) ChannelImpl);

#[derive(Clone)]
pub(crate) enum ChannelImpl {
    Rdma(Arc<rdma::RChannel>),
    Sim(Arc<sim::SChannel>),
}

impl std::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompChannel")
            .field("fd", &self.fd())
            .finish()
    }
}

impl CompChannel {
    /// The fd to wait on.
    pub fn fd(&self) -> RawFd {
        match &self.0 {
            ChannelImpl::Rdma(c) => c.fd(),
            ChannelImpl::Sim(c) => c.fd(),
        }
    }

    /// Takes one completion event: the handle ([`Cq::handle`]) of the queue that fired, or
    /// `None` when there is none. Events are acknowledged internally. Never blocks.
    pub fn get_event(&self) -> Result<Option<u64>> {
        match &self.0 {
            ChannelImpl::Rdma(c) => c.get_event(),
            ChannelImpl::Sim(c) => Ok(c.get_event()),
        }
    }
}

/// A completion queue. Cheap to clone (queue pairs keep a clone).
#[derive(Clone)]
pub struct Cq(pub(crate) CqImpl);

#[derive(Clone)]
pub(crate) enum CqImpl {
    Rdma(Arc<rdma::RCq>),
    Sim(Arc<sim::SCq>),
}

impl std::fmt::Debug for Cq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cq")
            .field("handle", &self.handle())
            .field("cqe", &self.cqe())
            .finish()
    }
}

impl Cq {
    /// A process-unique handle, reported by [`CompChannel::get_event`].
    pub fn handle(&self) -> u64 {
        match &self.0 {
            CqImpl::Rdma(c) => c.handle(),
            CqImpl::Sim(c) => c.handle(),
        }
    }

    /// Capacity.
    pub fn cqe(&self) -> u32 {
        match &self.0 {
            CqImpl::Rdma(c) => c.cqe(),
            CqImpl::Sim(c) => c.cqe(),
        }
    }

    /// Moves up to `wc.len()` completions into `wc` and returns how many. Never allocates.
    #[inline]
    pub fn poll(&self, wc: &mut [WorkCompletion]) -> usize {
        match &self.0 {
            CqImpl::Rdma(c) => c.poll(wc),
            CqImpl::Sim(c) => c.poll(wc),
        }
    }

    /// Arms the queue: its next completion (or next solicited/error completion when
    /// `solicited_only`) raises one event on the completion channel. Completions already queued
    /// raise none, so poll again after arming.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        match &self.0 {
            CqImpl::Rdma(c) => c.req_notify(solicited_only),
            CqImpl::Sim(c) => {
                c.req_notify(solicited_only);
                Ok(())
            }
        }
    }
}

/// A shared receive queue. Cheap to clone.
#[derive(Clone)]
pub struct Srq(pub(crate) SrqImpl);

#[derive(Clone)]
pub(crate) enum SrqImpl {
    Rdma(Arc<rdma::RSrq>),
    Sim(Arc<sim::SSrq>),
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srq")
            .field("handle", &self.handle())
            .finish()
    }
}

impl Srq {
    /// A process-unique handle (reported in SRQ async events).
    pub fn handle(&self) -> u64 {
        match &self.0 {
            SrqImpl::Rdma(s) => s.handle(),
            SrqImpl::Sim(s) => s.handle(),
        }
    }

    /// Posts receives, in order. Never allocates.
    #[inline]
    pub fn post_recv<'a, I>(&self, wrs: I) -> std::result::Result<(), PostError>
    where
        I: IntoIterator<Item = &'a RecvWr>,
    {
        match &self.0 {
            SrqImpl::Rdma(s) => s.post_recv(wrs),
            SrqImpl::Sim(s) => s.post_recv(wrs),
        }
    }
}

/// What [`crate::CmId::create_qp`] needs to build a reliable-connected queue pair.
#[derive(Debug, Clone, Copy)]
pub struct QpInit<'a> {
    /// Protection domain (of the identifier's device).
    pub pd: &'a Pd,
    /// Completion queue for send-queue completions.
    pub send_cq: &'a Cq,
    /// Completion queue for receive completions.
    pub recv_cq: &'a Cq,
    /// Shared receive queue, if receives come from one.
    pub srq: Option<&'a Srq>,
    /// Requested capacities.
    pub cap: QpCap,
    /// Generate a completion for every send work request regardless of its `signaled` flag.
    pub sq_sig_all: bool,
}

/// A reliable-connected queue pair, created on a connection identifier. Dropping it destroys
/// the queue pair (the identifier lives on until it is dropped too).
pub struct Qp(pub(crate) QpImpl);

pub(crate) enum QpImpl {
    Rdma(rdma::RQp),
    Sim(sim::SQpHandle),
}

impl std::fmt::Debug for Qp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Qp")
            .field("qp_num", &self.qp_num())
            .finish()
    }
}

impl Qp {
    /// The queue pair number (reported in completions).
    pub fn qp_num(&self) -> u32 {
        match &self.0 {
            QpImpl::Rdma(q) => q.qp_num(),
            QpImpl::Sim(q) => q.qp_num(),
        }
    }

    /// Actual capacities (the provider may round requests up).
    pub fn cap(&self) -> QpCap {
        match &self.0 {
            QpImpl::Rdma(q) => q.cap(),
            QpImpl::Sim(q) => q.cap(),
        }
    }

    /// Posts a linked list of send work requests, in order. On error the first
    /// [`PostError::posted`] were posted and will complete; the rest were not. In the error state
    /// posting succeeds and every work request completes with [`WcStatus::WrFlushErr`] (post a
    /// zero-length RDMA WRITE after [`Qp::modify_to_error`] to get a "last completion" marker).
    /// Does not allocate. The work requests are copied before it returns, so the `SendWr`
    /// values may be reused at once; the memory they name may not, until the completion
    /// arrives.
    #[inline]
    pub fn post_send<'a, I>(&self, wrs: I) -> std::result::Result<(), PostError>
    where
        I: IntoIterator<Item = &'a SendWr>,
    {
        match &self.0 {
            QpImpl::Rdma(q) => q.post_send(wrs),
            QpImpl::Sim(q) => q.post_send(wrs),
        }
    }

    /// Posts receives to the queue pair's own receive queue, in order. Never allocates.
    #[inline]
    pub fn post_recv<'a, I>(&self, wrs: I) -> std::result::Result<(), PostError>
    where
        I: IntoIterator<Item = &'a RecvWr>,
    {
        match &self.0 {
            QpImpl::Rdma(q) => q.post_recv(wrs),
            QpImpl::Sim(q) => q.post_recv(wrs),
        }
    }

    /// Binds a type-2 memory window through this queue pair (the window is then usable only by
    /// this queue pair's peer). Returns the window's new remote key; the bind completes on the
    /// send completion queue with [`WcOpcode::BindMw`] (if signaled).
    pub fn post_bind_mw(&self, bind: &BindMw<'_>) -> std::result::Result<u32, PostError> {
        match (&self.0, &bind.mw.0, bind.mr.inner()) {
            (QpImpl::Rdma(q), MwImpl::Rdma(mw), MrImpl::Rdma(mr)) => q.post_bind_mw(bind, mw, mr),
            (QpImpl::Sim(q), MwImpl::Sim(mw), MrImpl::Sim(mr)) => q.post_bind_mw(bind, mw, mr),
            _ => Err(PostError {
                posted: 0,
                kind: crate::error::PostErrorKind::InvalidWr,
            }),
        }
    }

    /// Moves the queue pair to the error state: every outstanding and future work request
    /// completes with a flush error.
    pub fn modify_to_error(&self) -> Result<()> {
        match &self.0 {
            QpImpl::Rdma(q) => q.modify_to_error(),
            QpImpl::Sim(q) => {
                q.modify_to_error();
                Ok(())
            }
        }
    }

    /// The current state.
    pub fn state(&self) -> Result<QpState> {
        match &self.0 {
            QpImpl::Rdma(q) => q.state(),
            QpImpl::Sim(q) => Ok(q.state()),
        }
    }
}
