//! Plain data types shared by both providers: access flags, scatter/gather lists, work requests,
//! work completions, queue capacities, device attributes and connection-manager events.

use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::ops::{BitOr, BitOrAssign};

use crate::cm::CmId;

/// Most scatter/gather entries one work request can carry.
pub const MAX_SGE: usize = 16;

/// Bytes of private data an active side can put in a connect request over RDMA CM (the IB CM
/// REQ carries 92 bytes, of which RDMA CM keeps 36 for its IP header).
pub const CM_REQ_PRIVATE_DATA: usize = 56;
/// Bytes of private data an accept (IB CM REP) carries.
pub const CM_REP_PRIVATE_DATA: usize = 196;
/// Bytes of private data a reject (IB CM REJ) carries.
pub const CM_REJ_PRIVATE_DATA: usize = 148;
/// The reject reason RDMA CM reports when the passive side's consumer rejected (IB CM
/// "consumer defined", 28).
pub const CM_REJ_CONSUMER_DEFINED: i32 = 28;
/// The reject reason reported when nobody listens on the service (IB CM "invalid service ID", 8).
pub const CM_REJ_INVALID_SERVICE_ID: i32 = 8;
/// `rnr_retry_count` value meaning "retry forever on receiver-not-ready".
pub const RNR_RETRY_INFINITE: u8 = 7;

/// Memory access rights of a registration or a memory window (the `IBV_ACCESS_*` bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u32);

impl Access {
    /// No remote access; the local adapter may only read (SEND sources, RDMA WRITE sources).
    pub const NONE: Access = Access(0);
    /// The local adapter may write (receive buffers, RDMA READ destinations).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Peers may RDMA WRITE into the memory.
    pub const REMOTE_WRITE: Access = Access(1 << 1);
    /// Peers may RDMA READ the memory.
    pub const REMOTE_READ: Access = Access(1 << 2);
    /// Peers may perform atomic operations (unused by rtgt; accepted for completeness).
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);
    /// Memory windows may be bound to this registration.
    pub const MW_BIND: Access = Access(1 << 4);
    /// Everything an rtgt target or test initiator usually wants.
    pub const ALL: Access = Access(1 | (1 << 1) | (1 << 2));

    /// The raw `IBV_ACCESS_*` bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Builds flags from raw `IBV_ACCESS_*` bits (unknown bits are kept).
    pub fn from_bits(bits: u32) -> Self {
        Access(bits)
    }

    /// Whether every bit of `other` is set in `self`.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        self.0 |= rhs.0;
    }
}

/// One scatter/gather entry: `length` bytes at I/O virtual address `addr` inside the local
/// registration whose key is `lkey`. Layout-compatible with `struct ibv_sge`.
///
/// An entry that names memory outside its registration, or a wrong key, does not corrupt
/// memory: the work request completes with [`WcStatus::LocProtErr`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the memory registration that covers the range.
    pub lkey: u32,
}

/// Up to [`MAX_SGE`] scatter/gather entries stored inline (no heap). Entries past the length
/// are never initialised: building a list writes only the entries it uses (the data path
/// builds several per I/O, each with room for 16).
#[derive(Clone, Copy)]
pub struct SgeList {
    len: u8,
    sges: [MaybeUninit<Sge>; MAX_SGE],
}

impl Default for SgeList {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for SgeList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl PartialEq for SgeList {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for SgeList {}

impl SgeList {
    /// An empty list (a zero-length work request).
    #[inline]
    pub const fn new() -> Self {
        SgeList {
            len: 0,
            sges: [const { MaybeUninit::uninit() }; MAX_SGE],
        }
    }

    /// A list of one entry.
    #[inline]
    pub fn one(sge: Sge) -> Self {
        let mut l = Self::new();
        l.sges[0].write(sge);
        l.len = 1;
        l
    }

    /// A list copied from a slice, or `None` if it has more than [`MAX_SGE`] entries.
    pub fn from_slice(sges: &[Sge]) -> Option<Self> {
        if sges.len() > MAX_SGE {
            return None;
        }
        let mut l = Self::new();
        for (d, s) in l.sges.iter_mut().zip(sges) {
            d.write(*s);
        }
        l.len = sges.len() as u8;
        Some(l)
    }

    /// Appends an entry; gives it back if the list is full.
    #[inline]
    pub fn push(&mut self, sge: Sge) -> Result<(), Sge> {
        if self.len as usize >= MAX_SGE {
            return Err(sge);
        }
        self.sges[self.len as usize].write(sge);
        self.len += 1;
        Ok(())
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// The entries.
    #[inline]
    pub fn as_slice(&self) -> &[Sge] {
        // SAFETY: the first `len` entries (`len` <= MAX_SGE) were written by `one`,
        // `from_slice` or `push`; `MaybeUninit<Sge>` has `Sge`'s layout.
        unsafe { std::slice::from_raw_parts(self.sges.as_ptr().cast::<Sge>(), self.len as usize) }
    }

    /// The entries, writable (to adjust addresses or lengths in place).
    pub fn as_mut_slice(&mut self) -> &mut [Sge] {
        // SAFETY: as in `as_slice`; `&mut self` makes the borrow unique.
        unsafe {
            std::slice::from_raw_parts_mut(self.sges.as_mut_ptr().cast::<Sge>(), self.len as usize)
        }
    }

    /// Number of entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the list has no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sum of the entries' lengths.
    #[inline]
    pub fn total_len(&self) -> u64 {
        self.as_slice().iter().map(|s| s.length as u64).sum()
    }

    pub(crate) fn as_ptr(&self) -> *const Sge {
        self.sges.as_ptr().cast::<Sge>()
    }
}

/// What a send-queue work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrOp {
    /// SEND: the gathered bytes land in the peer's next posted receive.
    Send,
    /// SEND with invalidate: as SEND, and the peer's adapter invalidates `invalidate_rkey`
    /// (a memory window bound on the receiving queue pair) before completing the receive.
    SendWithInv {
        /// The remote key the receiver loses.
        invalidate_rkey: u32,
    },
    /// RDMA WRITE of the gathered bytes to `remote_addr` in the peer's memory named by `rkey`.
    RdmaWrite {
        /// Remote start address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA READ from `remote_addr` in the peer's memory into the scatter list.
    RdmaRead {
        /// Remote start address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
}

/// A send-queue work request. `Copy`, fixed-size, no heap: transports keep them preallocated
/// in their request objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// The operation.
    pub op: WrOp,
    /// Gather list (SEND, RDMA WRITE) or scatter list (RDMA READ).
    pub sges: SgeList,
    /// Generate a completion on success (errors always complete).
    pub signaled: bool,
    /// Wait for earlier RDMA READs of this queue pair to finish before starting.
    pub fence: bool,
    /// Set the solicited-event bit (wakes a receiver that armed its CQ for solicited events).
    pub solicited: bool,
}

impl SendWr {
    /// A signaled work request.
    pub fn new(wr_id: u64, op: WrOp, sges: SgeList) -> Self {
        SendWr {
            wr_id,
            op,
            sges,
            signaled: true,
            fence: false,
            solicited: false,
        }
    }

    /// A signaled SEND.
    pub fn send(wr_id: u64, sges: SgeList) -> Self {
        Self::new(wr_id, WrOp::Send, sges)
    }

    /// A signaled SEND with invalidate.
    pub fn send_with_inv(wr_id: u64, sges: SgeList, invalidate_rkey: u32) -> Self {
        Self::new(wr_id, WrOp::SendWithInv { invalidate_rkey }, sges)
    }

    /// A signaled RDMA WRITE.
    pub fn rdma_write(wr_id: u64, sges: SgeList, remote_addr: u64, rkey: u32) -> Self {
        Self::new(wr_id, WrOp::RdmaWrite { remote_addr, rkey }, sges)
    }

    /// A signaled RDMA READ.
    pub fn rdma_read(wr_id: u64, sges: SgeList, remote_addr: u64, rkey: u32) -> Self {
        Self::new(wr_id, WrOp::RdmaRead { remote_addr, rkey }, sges)
    }

    /// Sets whether a successful completion is generated.
    pub fn with_signaled(mut self, signaled: bool) -> Self {
        self.signaled = signaled;
        self
    }
}

/// A receive work request (for a queue pair's receive queue or a shared receive queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecvWr {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// Where incoming SEND data is scattered.
    pub sges: SgeList,
}

impl RecvWr {
    /// A receive into the given scatter list.
    pub fn new(wr_id: u64, sges: SgeList) -> Self {
        RecvWr { wr_id, sges }
    }
}

/// A type-2 memory-window bind, posted on the send queue of the queue pair through which the
/// window will be used (see [`crate::Qp::post_bind_mw`]).
#[derive(Debug, Clone, Copy)]
pub struct BindMw<'a> {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// Generate a completion on success.
    pub signaled: bool,
    /// The window to bind (must be unbound: freshly allocated or invalidated).
    pub mw: &'a crate::Mw,
    /// The registration the window exposes (registered with [`Access::MW_BIND`]).
    pub mr: &'a crate::Mr,
    /// Start address of the window inside the registration.
    pub addr: u64,
    /// Length of the window.
    pub length: u64,
    /// Remote rights granted through the window.
    pub access: Access,
}

/// Status of a work completion (values are those of `enum ibv_wc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WcStatus {
    /// The work request completed.
    #[default]
    Success,
    /// Local length error: a receive buffer was too small for the incoming SEND.
    LocLenErr,
    /// Local queue-pair operation error (malformed work request).
    LocQpOpErr,
    /// Local protection error: an SGE had a bad lkey, lacked access rights or was out of bounds.
    LocProtErr,
    /// Flushed: the queue pair was in (or moved to) the error state.
    WrFlushErr,
    /// A memory-window bind failed.
    MwBindErr,
    /// Unexpected response from the peer.
    BadRespErr,
    /// Local access error.
    LocAccessErr,
    /// The peer found the request invalid (e.g. a SEND longer than its receive buffer, an
    /// invalidation of a key it cannot invalidate).
    RemInvReqErr,
    /// The peer refused the access: bad rkey, missing rights or out of bounds.
    RemAccessErr,
    /// The peer could not complete the operation (e.g. a protection error on its receive).
    RemOpErr,
    /// Transport retries exhausted: the peer does not answer.
    RetryExcErr,
    /// Receiver-not-ready retries exhausted: the peer had no receive posted.
    RnrRetryExcErr,
    /// Remote aborted.
    RemAbortErr,
    /// Fatal adapter error.
    FatalErr,
    /// Response timeout.
    RespTimeoutErr,
    /// General error.
    GeneralErr,
    /// Any other status value.
    Other(u32),
}

impl WcStatus {
    /// Maps an `ibv_wc_status` value.
    pub fn from_raw(v: u32) -> Self {
        match v {
            0 => WcStatus::Success,
            1 => WcStatus::LocLenErr,
            2 => WcStatus::LocQpOpErr,
            4 => WcStatus::LocProtErr,
            5 => WcStatus::WrFlushErr,
            6 => WcStatus::MwBindErr,
            7 => WcStatus::BadRespErr,
            8 => WcStatus::LocAccessErr,
            9 => WcStatus::RemInvReqErr,
            10 => WcStatus::RemAccessErr,
            11 => WcStatus::RemOpErr,
            12 => WcStatus::RetryExcErr,
            13 => WcStatus::RnrRetryExcErr,
            16 => WcStatus::RemAbortErr,
            19 => WcStatus::FatalErr,
            20 => WcStatus::RespTimeoutErr,
            21 => WcStatus::GeneralErr,
            v => WcStatus::Other(v),
        }
    }

    /// The `ibv_wc_status` value.
    pub fn to_raw(self) -> u32 {
        match self {
            WcStatus::Success => 0,
            WcStatus::LocLenErr => 1,
            WcStatus::LocQpOpErr => 2,
            WcStatus::LocProtErr => 4,
            WcStatus::WrFlushErr => 5,
            WcStatus::MwBindErr => 6,
            WcStatus::BadRespErr => 7,
            WcStatus::LocAccessErr => 8,
            WcStatus::RemInvReqErr => 9,
            WcStatus::RemAccessErr => 10,
            WcStatus::RemOpErr => 11,
            WcStatus::RetryExcErr => 12,
            WcStatus::RnrRetryExcErr => 13,
            WcStatus::RemAbortErr => 16,
            WcStatus::FatalErr => 19,
            WcStatus::RespTimeoutErr => 20,
            WcStatus::GeneralErr => 21,
            WcStatus::Other(v) => v,
        }
    }

    /// Whether the work request succeeded.
    pub fn is_success(self) -> bool {
        self == WcStatus::Success
    }
}

/// Which operation a completion reports. Only meaningful when the status is
/// [`WcStatus::Success`]: verbs leave it undefined for error completions, so callers must know
/// the operation from the `wr_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WcOpcode {
    /// A SEND or SEND with invalidate finished.
    #[default]
    Send,
    /// An RDMA WRITE finished.
    RdmaWrite,
    /// An RDMA READ finished.
    RdmaRead,
    /// A memory-window bind finished.
    BindMw,
    /// A local invalidate finished.
    LocalInv,
    /// A receive consumed an incoming SEND.
    Recv,
    /// A receive consumed an RDMA WRITE with immediate.
    RecvRdmaWithImm,
    /// Any other opcode value.
    Other(u32),
}

impl WcOpcode {
    /// Maps an `ibv_wc_opcode` value.
    pub fn from_raw(v: u32) -> Self {
        match v {
            0 => WcOpcode::Send,
            1 => WcOpcode::RdmaWrite,
            2 => WcOpcode::RdmaRead,
            5 => WcOpcode::BindMw,
            6 => WcOpcode::LocalInv,
            128 => WcOpcode::Recv,
            129 => WcOpcode::RecvRdmaWithImm,
            v => WcOpcode::Other(v),
        }
    }

    /// Whether this is a receive-side completion.
    pub fn is_recv(self) -> bool {
        matches!(self, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
    }
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkCompletion {
    /// The `wr_id` of the work request.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// Operation (valid on success only; see [`WcOpcode`]).
    pub opcode: WcOpcode,
    /// Bytes received (receives) or transferred (RDMA READ).
    pub byte_len: u32,
    /// The local queue pair the work request belonged to.
    pub qp_num: u32,
    /// For a receive that consumed a SEND with invalidate: the remote key that was invalidated.
    pub invalidated_rkey: Option<u32>,
    /// Vendor-specific error detail (0 when unknown).
    pub vendor_err: u32,
}

/// Queue-pair states (`enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Reset.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error: every work request completes with a flush error.
    Error,
    /// Unknown value.
    Unknown,
}

impl QpState {
    pub(crate) fn from_u8(v: u8) -> Self {
        match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Error,
            _ => QpState::Unknown,
        }
    }
}

/// Capacities of a queue pair: requested at creation, actual ones from [`crate::Qp::cap`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    /// Send-queue depth.
    pub max_send_wr: u32,
    /// Receive-queue depth (ignored with a shared receive queue).
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive work request.
    pub max_recv_sge: u32,
    /// Inline data bytes (rtgt does not post inline data; 0 is fine).
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 0,
        }
    }
}

/// Device limits (a subset of `struct ibv_device_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID (host byte order).
    pub node_guid: u64,
    /// Vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Largest registration.
    pub max_mr_size: u64,
    /// Number of queue pairs.
    pub max_qp: u32,
    /// Work requests per queue.
    pub max_qp_wr: u32,
    /// Scatter/gather entries per work request.
    pub max_sge: u32,
    /// Number of completion queues.
    pub max_cq: u32,
    /// Entries per completion queue.
    pub max_cqe: u32,
    /// Number of registrations.
    pub max_mr: u32,
    /// Number of protection domains.
    pub max_pd: u32,
    /// Incoming RDMA READs in flight per queue pair (the most `responder_resources`).
    pub max_qp_rd_atom: u32,
    /// Outgoing RDMA READs in flight per queue pair (the most `initiator_depth`).
    pub max_qp_init_rd_atom: u32,
    /// Number of shared receive queues.
    pub max_srq: u32,
    /// Work requests per shared receive queue.
    pub max_srq_wr: u32,
    /// Scatter/gather entries per shared-receive work request.
    pub max_srq_sge: u32,
    /// Number of memory windows (0: no memory windows).
    pub max_mw: u32,
}

/// Connection parameters for [`CmId::connect`] and [`CmId::accept`].
#[derive(Debug, Clone, Copy)]
pub struct ConnParam<'a> {
    /// Private data (at most [`CM_REQ_PRIVATE_DATA`] bytes for connect, [`CM_REP_PRIVATE_DATA`]
    /// for accept).
    pub private_data: &'a [u8],
    /// RDMA READs the peer may have outstanding against us.
    pub responder_resources: u8,
    /// RDMA READs we may have outstanding against the peer.
    pub initiator_depth: u8,
    /// Transport retries before a retry-exceeded error (0..=7).
    pub retry_count: u8,
    /// How often the *peer* retries a SEND when we have no receive posted, before it fails
    /// with [`WcStatus::RnrRetryExcErr`]; [`RNR_RETRY_INFINITE`] (7) retries forever. (IB CM
    /// carries each side's value to the other side's queue pair.)
    pub rnr_retry_count: u8,
}

impl Default for ConnParam<'_> {
    fn default() -> Self {
        ConnParam {
            private_data: &[],
            responder_resources: 16,
            initiator_depth: 16,
            retry_count: 7,
            rnr_retry_count: RNR_RETRY_INFINITE,
        }
    }
}

/// A connection request delivered to a listener.
#[derive(Debug)]
pub struct ConnectRequest {
    /// The new identifier for this connection: create a queue pair on it and accept, or reject.
    /// Dropping it without either rejects the request.
    pub id: CmId,
    /// The initiator's private data. Over RDMA CM on IB/RoCE it is always
    /// [`CM_REQ_PRIVATE_DATA`] bytes long (zero-padded after what the initiator sent).
    pub private_data: Vec<u8>,
    /// RDMA READs the initiator wants to have outstanding against us (its initiator depth):
    /// the value to pass as our `responder_resources` (clamped to the device limit).
    pub responder_resources: u8,
    /// RDMA READs the initiator accepts from us (its responder resources): the value to pass as
    /// our `initiator_depth`.
    pub initiator_depth: u8,
    /// Our address the request arrived at.
    pub local_addr: SocketAddr,
    /// The initiator's address.
    pub peer_addr: SocketAddr,
}

/// What a connection-manager event says.
#[derive(Debug)]
pub enum CmEventKind {
    /// `resolve_addr` finished; the identifier is now bound to a device.
    AddrResolved,
    /// `resolve_addr` failed.
    AddrError,
    /// `resolve_route` finished.
    RouteResolved,
    /// `resolve_route` failed.
    RouteError,
    /// A connection request arrived on a listener (the event's `id` is the listener).
    ConnectRequest(Box<ConnectRequest>),
    /// A connection attempt failed.
    ConnectError,
    /// The peer is unreachable (or did not answer).
    Unreachable,
    /// The peer rejected the connection; `status` holds the reason
    /// ([`CM_REJ_CONSUMER_DEFINED`] when its consumer rejected).
    Rejected {
        /// The reject's private data ([`CM_REJ_PRIVATE_DATA`] bytes over IB/RoCE; may be empty
        /// when the connection manager itself rejected).
        private_data: Vec<u8>,
    },
    /// The connection is established.
    Established {
        /// On the active side: the accept's private data ([`CM_REP_PRIVATE_DATA`] bytes over
        /// IB/RoCE). Empty on the passive side.
        private_data: Vec<u8>,
        /// Negotiated responder resources (active side).
        responder_resources: u8,
        /// Negotiated initiator depth (active side).
        initiator_depth: u8,
    },
    /// The connection is gone (the peer or we disconnected). Call [`CmId::disconnect`] to move
    /// the local queue pair to the error state if it is not there yet.
    Disconnected,
    /// The device under the identifier is being removed: destroy everything on it.
    DeviceRemoval,
    /// The local address changed (e.g. a bonding fail-over).
    AddrChange,
    /// The connection left its time-wait state; its queue pair number may be reused.
    TimewaitExit,
    /// Another event type (the raw `rdma_cm_event_type`).
    Other(u32),
}

/// A connection-manager event.
#[derive(Debug)]
pub struct CmEvent {
    /// Handle of the identifier the event is about ([`CmId::handle`]); for a connect request,
    /// the listener.
    pub id: u64,
    /// The event.
    pub kind: CmEventKind,
    /// The event status (0, a negative errno, or a reject reason for [`CmEventKind::Rejected`]).
    pub status: i32,
}

/// Kinds of asynchronous (unaffiliated or affiliated) device events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEventKind {
    /// A queue pair hit a fatal error and moved to the error state.
    QpFatal,
    /// Invalid request on a queue pair.
    QpReqErr,
    /// Access violation on a queue pair.
    QpAccessErr,
    /// First packet arrived on a queue pair in RTR.
    CommEstablished,
    /// Send queue drained.
    SqDrained,
    /// A queue pair attached to a shared receive queue in the error state will take no more
    /// receives from it: every receive it consumed has completed.
    QpLastWqeReached,
    /// Completion queue error (overrun).
    CqErr,
    /// Shared receive queue error.
    SrqErr,
    /// Shared receive queue fell below its limit.
    SrqLimitReached,
    /// A port became active.
    PortActive,
    /// A port went down.
    PortErr,
    /// The whole device failed.
    DeviceFatal,
    /// Another event type (the raw `ibv_event_type`).
    Other(u32),
}

/// What an asynchronous event concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncElement {
    /// A queue pair (its number).
    Qp(u32),
    /// A completion queue (its handle).
    Cq(u64),
    /// A shared receive queue (its handle).
    Srq(u64),
    /// A port number.
    Port(u8),
    /// The device.
    Device,
}

/// An asynchronous device event (from the device's async fd).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// The event.
    pub kind: AsyncEventKind,
    /// What it concerns.
    pub element: AsyncElement,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sge_list_capacity_and_totals() {
        let mut l = SgeList::new();
        assert!(l.is_empty());
        for i in 0..MAX_SGE as u64 {
            l.push(Sge {
                addr: i,
                length: 10,
                lkey: 1,
            })
            .unwrap();
        }
        let extra = Sge::default();
        assert_eq!(l.push(extra), Err(extra));
        assert_eq!(l.len(), MAX_SGE);
        assert_eq!(l.total_len(), 10 * MAX_SGE as u64);
        assert!(SgeList::from_slice(&[Sge::default(); MAX_SGE + 1]).is_none());
        l.clear();
        assert_eq!(l, SgeList::new());
        assert_eq!(std::mem::size_of::<Sge>(), 16, "layout of struct ibv_sge");
    }

    #[test]
    fn access_flags_combine() {
        let a = Access::LOCAL_WRITE | Access::REMOTE_READ;
        assert!(a.contains(Access::LOCAL_WRITE));
        assert!(!a.contains(Access::REMOTE_WRITE));
        assert!(Access::ALL.contains(a));
        assert_eq!(Access::from_bits(a.bits()), a);
    }

    #[test]
    fn status_and_opcode_values_round_trip() {
        for v in 0..32 {
            assert_eq!(WcStatus::from_raw(v).to_raw(), v);
        }
        assert!(WcStatus::Success.is_success());
        assert!(WcOpcode::from_raw(128).is_recv());
        assert!(!WcOpcode::from_raw(0).is_recv());
        assert_eq!(WcOpcode::from_raw(77), WcOpcode::Other(77));
    }
}
