//! The request path: from a received command to a completion. A transport calls these entry
//! points (re-exported at the module root); the commands themselves run by concern, as in
//! Linux nvmet: Connect in `fabrics_cmd`, admin commands in `admin_cmd`, I/O commands on bdevs
//! in `io_cmd_bdev` (which also holds `io_done` and `resubmit`).
//!
//! ```text
//! capsule ─▶ begin() ─▶ (transport moves host data into req.io.bufs) ─▶ execute()
//!   execute() ─▶ Complete ─▶ (transport sends req.data_len bytes, then req.cqe)
//!             ─▶ Submitted ─▶ bdev completion ─▶ io_done() ─▶ Complete | Submitted | Busy
//!             ─▶ Queued    ─▶ (subsystem resumes) TransportPollGroup::resume_request ─▶ execute()
//!             ─▶ Parked    ─▶ (AER) completed later through an [`AerDone`]
//!             ─▶ Busy      ─▶ (bdev backend full) resubmit()
//! ```
//!
//! Everything on the I/O path works on the request's preallocated state: no allocation, no
//! lock. Admin commands and Connect build views and take locks; they are rare.

use std::sync::Arc;
use std::time::Instant;

use arrayvec::ArrayVec;

use super::TransportInfo;
use super::fused::{self, FusedRole, SecondStep};
use super::io_cmd_bdev::Followup;
use super::queue::{Queue, QueueRole};
use super::{admin_cmd, auth_cmd, fabrics_cmd, io_cmd_bdev};
use crate::bdev::{BdevIo, BdevOp};
use crate::compare_write::Owner;
use crate::nvme::sgl::{self, DataSgl};
use crate::nvme::spec::{fctype, io_opc};
use crate::nvme::{Cqe, Direction, Sqe, Status};
use crate::target::{AbortFence, Admission, AdmitKind, PgCore, PreemptAbort};

/// A parked AER to complete on an admin queue: find the request with `cid` and send `cqe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AerDone {
    /// CID of the parked AER.
    pub cid: u16,
    /// Its completion.
    pub cqe: Cqe,
}

/// What to do next with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvmeAction {
    /// Finished: send the first `req.data_len` bytes of the request's buffers to the host (when
    /// non-zero; only for controller-to-host commands), then `req.cqe`.
    Complete,
    /// A bdev I/O is in flight: call [`io_done`] with it when it comes back.
    Submitted,
    /// The subsystem or namespace is paused: the token waits in the poll group, and
    /// [`crate::registry::TransportPollGroup::resume_request`] should call [`execute`] again.
    Queued,
    /// An Asynchronous Event Request is held without a response; an [`AerDone`] completes it.
    Parked,
    /// The bdev backend is full: call [`resubmit`] later (the request keeps its admission).
    Busy,
}

/// The per-call context: the poll group, the transport, the time, and side effects for the
/// transport to apply afterwards.
pub struct NvmeCtx<'a> {
    /// The poll group's core state.
    pub core: &'a mut PgCore,
    /// The transport.
    pub transport: &'a TransportInfo,
    /// Now (the keep-alive timer and latency use it).
    pub now: Instant,
    /// Parked AERs of this queue to complete now (an Abort cancelled them).
    pub aer_done: ArrayVec<AerDone, 4>,
}

impl<'a> NvmeCtx<'a> {
    /// A context for one or more calls.
    pub fn new(core: &'a mut PgCore, transport: &'a TransportInfo, now: Instant) -> Self {
        Self {
            core,
            transport,
            now,
            aer_done: ArrayVec::new(),
        }
    }
}

/// A request's exec-layer state, embedded in the transport's preallocated request.
#[derive(Debug)]
pub struct NvmeReq {
    /// The command.
    pub sqe: Sqe,
    /// Its decoded SGL1 (from [`begin`]).
    pub sgl: DataSgl,
    /// The bdev I/O with the request's data buffers; `None` while a bdev owns it.
    pub io: Option<Box<BdevIo>>,
    /// The transport's generation-tagged token (48 bits): admission replays and bdev tags.
    pub token: u64,
    /// The completion to send.
    pub cqe: Cqe,
    /// Bytes of data to send to the host before the completion.
    pub data_len: u32,
    /// Disconnect the queue once the completion is sent (Fabrics Disconnect).
    pub disconnect_after: bool,
    pub(super) admitted: Option<(u32, AdmitKind)>,
    pub(super) followup: Followup,
    pub(super) nsid: u32,
    /// Which half of a fused Compare + Write this is, if any.
    pub(super) fused: FusedRole,
    /// Where a fused Write is.
    pub(super) second_step: SecondStep,
    /// The range lock a fused Write holds or waits for: (subsystem, owner tag).
    pub(super) caw: Option<(u32, Owner)>,
    /// A fused half not finished yet: its queue, and how to disconnect it should the
    /// request be dropped first.
    pub(super) fused_queue: Option<(super::QueueRef, super::DisconnectFn)>,
    /// A preempt-and-abort aborted the command ([`preempt_abort_mark`]): it ends with
    /// Command Aborted due to Preempt and Abort, and releases the fence when it is gone.
    pub(super) aborted: Option<Arc<AbortFence>>,
}

impl NvmeReq {
    /// A request slot with its preallocated bdev I/O.
    pub fn new(token: u64) -> Self {
        Self {
            sqe: Sqe::default(),
            sgl: DataSgl::None,
            io: Some(Box::new(BdevIo::new(BdevOp::Flush, token))),
            token,
            cqe: Cqe::for_command(&Sqe::default(), 0, 0, Status::SUCCESS),
            data_len: 0,
            disconnect_after: false,
            admitted: None,
            followup: Followup::Single,
            nsid: 0,
            fused: FusedRole::None,
            second_step: SecondStep::Start,
            caw: None,
            fused_queue: None,
            aborted: None,
        }
    }

    /// Resets for a new command (the bdev I/O and its buffers stay with the request).
    #[inline]
    pub fn reset(&mut self, token: u64, sqe: Sqe) {
        self.sqe = sqe;
        self.sgl = DataSgl::None;
        self.token = token;
        self.data_len = 0;
        self.disconnect_after = false;
        self.admitted = None;
        self.followup = Followup::Single;
        self.nsid = 0;
        self.fused = FusedRole::None;
        self.second_step = SecondStep::Start;
        self.caw = None;
        self.fused_queue = None;
        if let Some(f) = self.aborted.take() {
            // Not released through `release` (the command was dropped): it is gone.
            f.release();
        }
    }

    /// Whether the request holds an admission reference.
    pub fn is_admitted(&self) -> bool {
        self.admitted.is_some()
    }
}

/// Starts a command that arrived on `q`: advances the SQ head and decodes SGL1 against the
/// queue's policy. `in_capsule` is the data that followed the SQE in the capsule, and
/// `in_capsule_capacity` what the receive buffers can hold. Returns the data direction to
/// prepare for (`None` when there is no data); on `Err` complete at once with
/// [`Queue::cqe`] and that status. Inlined into the transport: it runs per command.
#[inline]
pub fn begin(
    t: &TransportInfo,
    q: &mut Queue,
    req: &mut NvmeReq,
    in_capsule: &[u8],
    in_capsule_capacity: u32,
) -> Result<Direction, Status> {
    q.consume_sqe();
    let r = decode_sgl(t, q, req, in_capsule, in_capsule_capacity);
    if !matches!(q.role, QueueRole::Io(_)) {
        return r;
    }
    // Fused halves are paired in the order commands arrive here.
    match r {
        Ok(dir) => fused::arrived(q, req, t.disconnect)
            .map(|()| dir)
            .inspect_err(|_| {
                req.sgl = DataSgl::None;
            }),
        Err(s) => {
            fused::not_arrived(q);
            Err(s)
        }
    }
}

#[inline]
fn decode_sgl(
    t: &TransportInfo,
    q: &mut Queue,
    req: &mut NvmeReq,
    in_capsule: &[u8],
    in_capsule_capacity: u32,
) -> Result<Direction, Status> {
    let policy = q.sgl_policy(t, in_capsule_capacity);
    if let Err(s) = sgl::parse_into(&req.sqe, in_capsule, &policy, &mut req.sgl) {
        req.sgl = DataSgl::None;
        return Err(s);
    }
    let dir = req.sqe.direction();
    let dir = match (dir, req.sgl.is_empty()) {
        (_, true) => Direction::None,
        (Direction::Bidirectional, false) => {
            req.sgl = DataSgl::None;
            return Err(Status::INVALID_OPCODE);
        }
        // Data on a command that moves none: the command decides (usually a length error).
        (Direction::None, false) => Direction::None,
        (d, false) => d,
    };
    Ok(dir)
}

pub(super) fn complete(q: &Queue, req: &mut NvmeReq, status: Status) -> NvmeAction {
    req.cqe = q.cqe(&req.sqe, status);
    req.data_len = 0;
    NvmeAction::Complete
}

#[inline]
pub(super) fn release(core: &mut PgCore, req: &mut NvmeReq) {
    if let Some((sub, kind)) = req.admitted.take() {
        core.release(sub, kind);
    }
    if let Some(f) = req.aborted.take() {
        f.release();
    }
}

/// A preempt-and-abort reached this poll group ([`crate::target::Target::preempt_abort`]):
/// marks `req`, a request of queue `q`, aborted when it is a command of one of the preempted
/// hosts admitted to the namespace (at the bdev, or waiting to be submitted again), and
/// holds the fence until it is gone. Returns whether it did. Commands not admitted yet are
/// not marked: they are checked against the new reservation state when they execute.
pub fn preempt_abort_mark(
    q: &Queue,
    req: &mut NvmeReq,
    pa: &PreemptAbort,
    fence: &Arc<AbortFence>,
) -> bool {
    if req.aborted.is_some()
        || req.admitted != Some((pa.sub, AdmitKind::Io(pa.nsid)))
        || q.subsystem != Some(pa.sub)
    {
        return false;
    }
    let Some(host) = q.association().map(|c| c.host_id()) else {
        return false;
    };
    if !pa.hosts.contains(&host) {
        return false;
    }
    fence.hold();
    req.aborted = Some(Arc::clone(fence));
    true
}

/// Gives back what a request holds in the poll group (its admission), for a request dropped
/// without completing (teardown). Transports call it for every request they free: inlined,
/// it is one check when the request holds nothing (a completed command gave its admission
/// back already).
#[inline]
pub fn abandon(core: &mut PgCore, req: &mut NvmeReq) {
    if req.admitted.is_some()
        || req.aborted.is_some()
        || req.caw.is_some()
        || req.fused_queue.is_some()
    {
        give_back(core, req);
    }
}

/// What [`abandon`] does when the request holds something.
fn give_back(core: &mut PgCore, req: &mut NvmeReq) {
    release(core, req);
    fused::drop_lock(core, req);
    fused::dropped(core, req);
}

/// Executes a command whose host data (if any) is in `req.io.bufs`. Inlined into the
/// transport: it dispatches by the queue's role.
#[inline]
pub fn execute(cx: &mut NvmeCtx<'_>, q: &mut Queue, req: &mut NvmeReq) -> NvmeAction {
    if q.is_closing() {
        return complete(q, req, Status::ABORTED_SQ_DELETION);
    }
    if q.auth.is_some() && !matches!(q.role, QueueRole::Unconnected) {
        if let Some(s) = auth_cmd::gate(q, &req.sqe) {
            return complete(q, req, s);
        }
        if auth_cmd::is_auth(&req.sqe) {
            return auth_cmd::execute(cx, q, req);
        }
    }
    // No Arc clone on the I/O path: the controller's reference count is shared by reactors.
    let admin_ctrl = match &q.role {
        QueueRole::Unconnected => return fabrics_cmd::connect(cx, q, req),
        QueueRole::Io(_) => return io_cmd_bdev::execute(cx, q, req),
        QueueRole::Admin(c) => Arc::clone(c),
    };
    admin_cmd::execute(cx, q, req, &admin_ctrl)
}

/// The data buffer of an admin command or a Connect, as one slice.
pub(super) fn data_slice(req: &mut NvmeReq) -> Result<&mut [u8], Status> {
    let len = req.sgl.len() as usize;
    let Some(io) = req.io.as_mut() else {
        return Err(Status::INTERNAL_ERROR);
    };
    match io.bufs.len() {
        0 => Ok(&mut []),
        1 => {
            let b = io.bufs[0].as_mut_slice();
            let n = len.min(b.len());
            Ok(&mut b[..n])
        }
        _ => Err(Status::INTERNAL_ERROR),
    }
}

#[inline]
pub(super) fn admit(
    cx: &mut NvmeCtx<'_>,
    req: &mut NvmeReq,
    sub: u32,
    kind: AdmitKind,
) -> Admission {
    let a = cx.core.admit(sub, kind, cx.transport.index, req.token);
    if a == Admission::Go {
        req.admitted = Some((sub, kind));
    }
    a
}

/// Whether `sqe` is a Fabrics Connect (a transport may want to know before the data arrives).
pub fn is_connect(sqe: &Sqe) -> bool {
    sqe.is_fabrics() && sqe.fctype() == fctype::CONNECT
}

/// Whether `sqe` is an I/O read (used by transports for statistics).
pub fn is_read(sqe: &Sqe) -> bool {
    sqe.opcode() == io_opc::READ
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::sgl::SglDescriptor;
    use crate::nvme::spec::admin_opc;
    use crate::reactor::ReactorCtx;

    fn info() -> TransportInfo {
        fn nop(_: &mut ReactorCtx, _: usize, _: u64) {}
        TransportInfo {
            name: "TEST",
            index: 0,
            limits: crate::nvme::TransportLimits::default(),
            min_kato_ms: 1000,
            admin_max_len: 128 * 1024,
            disconnect: nop,
        }
    }

    #[test]
    fn begin_decodes_the_sgl_and_direction() {
        let t = info();
        let mut q = Queue::detached(1);
        let mut req = NvmeReq::new(7);
        // Keyed read.
        let mut s = Sqe::new(io_opc::READ, 3);
        s.set_sgl1(SglDescriptor::keyed(0x1000, 4096, 9, true));
        req.reset(7, s);
        assert_eq!(
            begin(&t, &mut q, &mut req, &[], 4096),
            Ok(Direction::ControllerToHost)
        );
        assert_eq!(req.sgl.invalidate_key(), Some(9));
        // In-capsule write.
        let mut s = Sqe::new(io_opc::WRITE, 4);
        s.set_sgl1(SglDescriptor::in_capsule(0, 512));
        req.reset(8, s);
        assert_eq!(
            begin(&t, &mut q, &mut req, &[0; 512], 4096),
            Ok(Direction::HostToController)
        );
        // In-capsule data on a read: Invalid Field.
        let mut s = Sqe::new(io_opc::READ, 5);
        s.set_sgl1(SglDescriptor::in_capsule(0, 512));
        req.reset(9, s);
        assert_eq!(
            begin(&t, &mut q, &mut req, &[0; 512], 4096),
            Err(Status::INVALID_FIELD)
        );
        // Bidirectional opcode with data.
        let mut s = Sqe::new(0x03, 6);
        s.set_sgl1(SglDescriptor::keyed(0x1000, 512, 9, false));
        req.reset(10, s);
        assert_eq!(
            begin(&t, &mut q, &mut req, &[], 4096),
            Err(Status::INVALID_OPCODE)
        );
        // No data: the null descriptor.
        let mut s = Sqe::new(admin_opc::KEEP_ALIVE, 1);
        s.set_sgl1(SglDescriptor::null_keyed());
        req.reset(11, s);
        assert_eq!(begin(&t, &mut q, &mut req, &[], 4096), Ok(Direction::None));
        assert!(!req.is_admitted());
    }

    /// Issue 13 item 12: a transfer above MDTS got Data SGL Length Invalid; the base
    /// specification (MDTS) wants Invalid Field in Command.
    #[test]
    fn a_transfer_above_mdts_is_invalid_field() {
        let t = info();
        let max = t.limits.max_io_size;
        let mut q = Queue::detached(1);
        let mut req = NvmeReq::new(1);
        // A read of twice MDTS: one keyed descriptor, then the same as a keyed list.
        let mut s = Sqe::new(io_opc::READ, 1);
        s.set_nsid(1).set_cdw(12, 2 * max / 512 - 1);
        s.set_sgl1(SglDescriptor::keyed(0x1000, 2 * max, 9, false));
        req.reset(1, s);
        assert_eq!(
            begin(&t, &mut q, &mut req, &[], 4096),
            Err(Status::INVALID_FIELD)
        );
        let mut list = [0u8; 32];
        list[..16].copy_from_slice(&SglDescriptor::keyed(0x1000, max, 9, false).0);
        list[16..].copy_from_slice(&SglDescriptor::keyed(0x9000, 512, 9, false).0);
        let mut s = Sqe::new(io_opc::WRITE, 2);
        s.set_sgl1(SglDescriptor::last_segment_in_capsule(0, 32));
        req.reset(2, s);
        let mut t16 = info();
        t16.limits.msdbd = 16;
        assert_eq!(
            begin(&t16, &mut q, &mut req, &list, 4096),
            Err(Status::INVALID_FIELD)
        );
        // Exactly MDTS is fine.
        let mut s = Sqe::new(io_opc::READ, 3);
        s.set_sgl1(SglDescriptor::keyed(0x1000, max, 9, false));
        req.reset(3, s);
        assert_eq!(
            begin(&t, &mut q, &mut req, &[], 4096),
            Ok(Direction::ControllerToHost)
        );
    }
}
