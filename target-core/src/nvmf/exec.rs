//! The request path: from a received command to a completion.
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

use super::ctrlr::NvmfCtrlr;
use super::queue::{Queue, QueueRole};
use super::{FIRMWARE_REVISION, TransportInfo, discovery};
use crate::bdev::{BdevIo, BdevOp, IoStatus};
use crate::nvme::fabrics::check_admin_connect;
use crate::nvme::sgl::{self, DataSgl};
use crate::nvme::spec::{admin_opc, fctype, io_opc};
use crate::nvme::{
    AdminOutcome, Completion, ConnectReject, Controller, Cqe, Direction, IoCmd, NamespaceView, Sqe,
    Status, SubsystemKind, SubsystemView, io, parse_connect,
};
use crate::target::{Admission, AdmitKind, NsInfo, PgCore, SubsystemType};

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
pub enum Outcome {
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
pub struct ExecCtx<'a> {
    /// The poll group's core state.
    pub core: &'a mut PgCore,
    /// The transport.
    pub transport: &'a TransportInfo,
    /// Now (the keep-alive timer and latency use it).
    pub now: Instant,
    /// Parked AERs of this queue to complete now (an Abort cancelled them).
    pub aer_done: ArrayVec<AerDone, 4>,
}

impl<'a> ExecCtx<'a> {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// One bdev operation.
    Single,
    /// Write Zeroes with FUA on a volatile cache: a Flush follows.
    FlushAfter,
    /// Dataset Management: deallocate range `next` onward, of `total`.
    Deallocate { next: u16, total: u16 },
}

/// A request's exec-layer state, embedded in the transport's preallocated request.
#[derive(Debug)]
pub struct ExecReq {
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
    admitted: Option<(u32, AdmitKind)>,
    step: Step,
    nsid: u32,
}

impl ExecReq {
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
            step: Step::Single,
            nsid: 0,
        }
    }

    /// Resets for a new command (the bdev I/O and its buffers stay with the request).
    pub fn reset(&mut self, token: u64, sqe: Sqe) {
        self.sqe = sqe;
        self.sgl = DataSgl::None;
        self.token = token;
        self.data_len = 0;
        self.disconnect_after = false;
        self.admitted = None;
        self.step = Step::Single;
        self.nsid = 0;
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
/// [`Queue::cqe`] and that status.
pub fn begin(
    t: &TransportInfo,
    q: &mut Queue,
    req: &mut ExecReq,
    in_capsule: &[u8],
    in_capsule_capacity: u32,
) -> Result<Direction, Status> {
    q.consume_sqe();
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

fn complete(q: &Queue, req: &mut ExecReq, status: Status) -> Outcome {
    req.cqe = q.cqe(&req.sqe, status);
    req.data_len = 0;
    Outcome::Complete
}

fn release(core: &mut PgCore, req: &mut ExecReq) {
    if let Some((sub, kind)) = req.admitted.take() {
        core.release(sub, kind);
    }
}

/// Gives back what a request holds in the poll group (its admission), for a request dropped
/// without completing (teardown).
pub fn abandon(core: &mut PgCore, req: &mut ExecReq) {
    release(core, req);
}

/// Executes a command whose host data (if any) is in `req.io.bufs`.
pub fn execute(cx: &mut ExecCtx<'_>, q: &mut Queue, req: &mut ExecReq) -> Outcome {
    if q.is_closing() {
        return complete(q, req, Status::ABORTED_SQ_DELETION);
    }
    // No Arc clone on the I/O path: the controller's reference count is shared by reactors.
    let admin_ctrl = match &q.role {
        QueueRole::Unconnected => return connect(cx, q, req),
        QueueRole::Io(_) => return io_cmd(cx, q, req),
        QueueRole::Admin(c) => Arc::clone(c),
    };
    admin(cx, q, req, &admin_ctrl)
}

/// The data buffer of an admin command or a Connect, as one slice.
fn data_slice(req: &mut ExecReq) -> Result<&mut [u8], Status> {
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

fn admit(cx: &mut ExecCtx<'_>, req: &mut ExecReq, sub: u32, kind: AdmitKind) -> Admission {
    let a = cx.core.admit(sub, kind, cx.transport.index, req.token);
    if a == Admission::Go {
        req.admitted = Some((sub, kind));
    }
    a
}

fn connect(cx: &mut ExecCtx<'_>, q: &mut Queue, req: &mut ExecReq) -> Outcome {
    let sqe = req.sqe;
    if !sqe.is_fabrics() || sqe.fctype() != fctype::CONNECT {
        return complete(q, req, Status::INVALID_OPCODE);
    }
    let mut c = match data_slice(req).map(|d| parse_connect(&sqe, d)) {
        Err(s) => return complete(q, req, s),
        Ok(Err(r)) => return reject(q, req, r),
        Ok(Ok(c)) => c,
    };
    if c.cmd.qid != q.qid {
        return reject(
            q,
            req,
            ConnectReject::invalid_sqe_field(crate::nvme::fabrics::connect_off::QID),
        );
    }
    let target = Arc::clone(cx.core.target());
    let Some(sub) = target.subsystem(c.data.subnqn.as_str()) else {
        tracing::warn!(subnqn = %c.data.subnqn, "Connect to an unknown subsystem");
        return reject(q, req, ConnectReject::unknown_subsystem());
    };
    let exported = sub.kind() == SubsystemType::Discovery
        || sub.with_config(|cfg| cfg.listeners.contains(&q.listen));
    if !exported {
        tracing::warn!(subnqn = %c.data.subnqn, listener = %q.listen,
                       "Connect to a subsystem not exported on this listener");
        return reject(q, req, ConnectReject::unknown_subsystem());
    }
    if !sub.access_allowed(c.data.hostnqn.as_str(), &q.listen) {
        tracing::warn!(subnqn = %c.data.subnqn, hostnqn = %c.data.hostnqn,
                       "Connect from a host that is not allowed");
        return reject(q, req, ConnectReject::invalid_host());
    }
    match admit(cx, req, sub.id(), AdmitKind::Mgmt) {
        Admission::Go => {}
        Admission::Queued => return Outcome::Queued,
        Admission::InvalidNamespace | Admission::Inactive => {
            return reject(q, req, ConnectReject::controller_busy());
        }
    }
    let limits = cx.transport.limits;
    let out = if c.is_admin() {
        if let Err(r) = check_admin_connect(&c, &limits) {
            release(cx.core, req);
            return reject(q, req, r);
        }
        if c.cmd.kato_ms != 0 && c.cmd.kato_ms < cx.transport.min_kato_ms {
            c.cmd.kato_ms = cx.transport.min_kato_ms;
        }
        let kind = match sub.kind() {
            SubsystemType::Discovery => SubsystemKind::Discovery,
            SubsystemType::Nvme => SubsystemKind::Nvm,
        };
        let now = cx.now;
        let me = q.me;
        let disconnect = cx.transport.disconnect;
        let tname = cx.transport.name;
        let mut made: Option<Arc<NvmfCtrlr>> = None;
        let sub2 = Arc::clone(&sub);
        let cntlid = sub.add_controller(|cntlid| {
            let ctrl = Controller::new(cntlid, &c, kind, limits, now);
            let info = crate::target::ControllerInfo {
                cntlid,
                cntrltype: match kind {
                    SubsystemKind::Nvm => "io",
                    SubsystemKind::Discovery => "discovery",
                },
                hostnqn: c.data.hostnqn.as_str().to_string(),
                hostid: uuid::Uuid::from_bytes(c.data.hostid).to_string(),
                num_io_qpairs: 0,
                transport: tname,
            };
            let n = Arc::new(NvmfCtrlr::new(ctrl, sub2, me, disconnect));
            made = Some(Arc::clone(&n));
            (info, n)
        });
        match (cntlid, made) {
            (Some(_), Some(ctrl)) => {
                let dw0 = ctrl.with(|c| c.connect_dw0());
                tracing::debug!(
                    cntlid = ctrl.cntlid(),
                    subnqn = sub.nqn(),
                    hostnqn = ctrl.hostnqn(),
                    "admin queue connected"
                );
                q.role = QueueRole::Admin(ctrl);
                Ok(c.success_cqe(&sqe, dw0))
            }
            _ => {
                tracing::warn!(subnqn = sub.nqn(), "no controller id left");
                Err(ConnectReject::controller_busy())
            }
        }
    } else {
        match sub.controller::<NvmfCtrlr>(c.data.cntlid) {
            None => Err(ConnectReject::unknown_controller()),
            Some(ctrl) => match ctrl.attach_io_queue(&c, q.me) {
                Ok(dw0) => {
                    tracing::debug!(
                        cntlid = ctrl.cntlid(),
                        qid = c.cmd.qid,
                        "I/O queue connected"
                    );
                    q.role = QueueRole::Io(ctrl);
                    Ok(c.success_cqe(&sqe, dw0))
                }
                Err(r) => Err(r),
            },
        }
    };
    release(cx.core, req);
    match out {
        Ok(cqe) => {
            q.subsystem = Some(sub.id());
            q.sqsize = c.cmd.sqsize;
            q.sqhd = 1;
            q.sq_flow_control_disabled = c.cmd.sq_flow_control_disabled();
            cx.core.qpair_associate(sub.id(), c.is_admin());
            req.cqe = cqe;
            req.data_len = 0;
            Outcome::Complete
        }
        Err(r) => reject(q, req, r),
    }
}

fn reject(q: &Queue, req: &mut ExecReq, r: ConnectReject) -> Outcome {
    tracing::debug!(status = %r.status, dw0 = r.dw0, "Connect refused");
    req.cqe = r.cqe(&req.sqe, q.qid, q.sqhd());
    req.data_len = 0;
    Outcome::Complete
}

/// A namespace as the controller logic sees it.
pub fn namespace_view(n: &NsInfo) -> NamespaceView {
    NamespaceView {
        nsid: n.nsid,
        block_size: n.block_size,
        num_blocks: n.num_blocks,
        uuid: *n.uuid.as_bytes(),
        nguid: n.nguid,
        eui64: n.eui64.unwrap_or([0; 8]),
        volatile_write_cache: n.write_cache,
        supports_unmap: n.unmap,
        supports_write_zeroes: n.write_zeroes,
        read_only: !n.writable,
        ready: true,
    }
}

fn admin(cx: &mut ExecCtx<'_>, q: &mut Queue, req: &mut ExecReq, ctrl: &Arc<NvmfCtrlr>) -> Outcome {
    let Some(sub_id) = q.subsystem else {
        return complete(q, req, Status::INTERNAL_ERROR);
    };
    if is_keep_alive(&req.sqe) {
        return keep_alive(cx, q, req, ctrl);
    }
    match admit(cx, req, sub_id, AdmitKind::Mgmt) {
        Admission::Go => {}
        Admission::Queued => return Outcome::Queued,
        Admission::InvalidNamespace | Admission::Inactive => {
            return complete(q, req, Status::ABORTED_SQ_DELETION);
        }
    }
    let sub = Arc::clone(ctrl.subsystem());
    let namespaces: Vec<NamespaceView> = cx.core.namespaces(sub_id).map(namespace_view).collect();
    let (serial, model, max_namespaces) =
        sub.with_config(|c| (c.serial.clone(), c.model.clone(), c.ns_limit()));
    let disc = sub.kind() == SubsystemType::Discovery;
    let log = if disc {
        Some(discovery::build(cx.core.target(), ctrl.hostnqn(), q))
    } else {
        None
    };
    let entries = log.as_ref().map(|l| l.entries());
    let view = SubsystemView {
        kind: if disc {
            SubsystemKind::Discovery
        } else {
            SubsystemKind::Nvm
        },
        serial: &serial,
        model: &model,
        firmware: FIRMWARE_REVISION,
        max_namespaces,
        namespaces: &namespaces,
        discovery_log: match (&log, &entries) {
            (Some(l), Some(e)) => Some(crate::nvme::DiscoveryLog {
                genctr: l.genctr,
                entries: e,
            }),
            _ => None,
        },
    };
    let sqe = req.sqe;
    let now = cx.now;
    let out = match data_slice(req) {
        Ok(data) => ctrl.with(|c| c.admin(&view, &sqe, data, now)),
        Err(s) => AdminOutcome::Complete(Completion::err(s)),
    };
    release(cx.core, req);
    match out {
        AdminOutcome::Complete(c) => {
            if c.effect == crate::nvme::CcChange::Disabled {
                ctrl.disconnect_io_queues(cx.core.target().reactors());
            }
            req.cqe = c.cqe(&sqe, q.sqhd());
            req.data_len = if c.status.is_success() {
                (c.data_len as u32).min(req.sgl.len())
            } else {
                0
            };
            Outcome::Complete
        }
        AdminOutcome::Parked => Outcome::Parked,
        AdminOutcome::Abort { sqid, cid } => {
            let aborted = sqid == 0 && ctrl.with(|c| c.cancel_aer(cid));
            if aborted {
                let mut aer = sqe;
                aer.set_cid(cid);
                let _ = cx.aer_done.try_push(AerDone {
                    cid,
                    cqe: q.cqe(&aer, Status::ABORTED_BY_REQUEST),
                });
            }
            req.cqe = Completion::abort_result(aborted).cqe(&sqe, q.sqhd());
            req.data_len = 0;
            Outcome::Complete
        }
    }
}

/// Whether `sqe` is a Keep Alive.
fn is_keep_alive(sqe: &Sqe) -> bool {
    !sqe.is_fabrics() && sqe.opcode() == admin_opc::KEEP_ALIVE
}

/// Keep Alive reads nothing of the subsystem and only refreshes the controller's timer, so it
/// runs without admission: it is never queued behind a pause. The keep-alive timer runs while a
/// subsystem is paused, and a queued Keep Alive would let a pause longer than KATO end every
/// healthy association of the subsystem.
fn keep_alive(
    cx: &mut ExecCtx<'_>,
    q: &mut Queue,
    req: &mut ExecReq,
    ctrl: &Arc<NvmfCtrlr>,
) -> Outcome {
    let view = SubsystemView::bare(match ctrl.subsystem().kind() {
        SubsystemType::Discovery => SubsystemKind::Discovery,
        SubsystemType::Nvme => SubsystemKind::Nvm,
    });
    let (sqe, now) = (req.sqe, cx.now);
    let c = match ctrl.with(|c| c.admin(&view, &sqe, &mut [], now)) {
        AdminOutcome::Complete(c) => c,
        // Keep Alive never parks nor aborts.
        _ => Completion::err(Status::INTERNAL_ERROR),
    };
    req.cqe = c.cqe(&sqe, q.sqhd());
    req.data_len = 0;
    Outcome::Complete
}

fn io_cmd(cx: &mut ExecCtx<'_>, q: &mut Queue, req: &mut ExecReq) -> Outcome {
    let Some(sub) = q.subsystem else {
        return complete(q, req, Status::INTERNAL_ERROR);
    };
    let nsid = req.sqe.nsid();
    let ns = cx.core.namespace(sub, nsid).map(namespace_view);
    let cmd = match io::decode(
        &req.sqe,
        ns.as_ref(),
        Ok(req.sgl.len()),
        cx.transport.limits.max_io_size,
    ) {
        Ok(c) => c,
        Err(s) => return io_error(q, req, s),
    };
    let op = match cmd {
        IoCmd::Disconnect => {
            req.disconnect_after = true;
            return complete(q, req, Status::SUCCESS);
        }
        IoCmd::Nop => return complete(q, req, Status::SUCCESS),
        IoCmd::Read { slba, blocks, .. } => BdevOp::Read {
            offset_blocks: slba,
            num_blocks: u64::from(blocks),
        },
        IoCmd::Write { slba, blocks, fua } => BdevOp::Write {
            offset_blocks: slba,
            num_blocks: u64::from(blocks),
            fua,
        },
        IoCmd::Compare { slba, blocks } => BdevOp::Compare {
            offset_blocks: slba,
            num_blocks: u64::from(blocks),
        },
        IoCmd::WriteZeroes {
            slba, blocks, fua, ..
        } => {
            if fua && ns.is_some_and(|n| n.volatile_write_cache) {
                req.step = Step::FlushAfter;
            }
            BdevOp::WriteZeroes {
                offset_blocks: slba,
                num_blocks: u64::from(blocks),
            }
        }
        IoCmd::Flush => BdevOp::Flush,
        IoCmd::Deallocate { ranges } => {
            // Ranges are validated up front, so a bad one fails the command before any
            // deallocation.
            let Some(view) = ns.as_ref() else {
                return io_error(q, req, Status::INVALID_NAMESPACE);
            };
            let first = match dsm_range(req, view, 0, ranges) {
                Ok(Some(r)) => r,
                Ok(None) => return complete(q, req, Status::SUCCESS),
                Err(s) => return io_error(q, req, s),
            };
            req.step = Step::Deallocate {
                next: first.0 + 1,
                total: ranges,
            };
            first.1
        }
    };
    match admit(cx, req, sub, AdmitKind::Io(nsid)) {
        Admission::Go => {}
        Admission::Queued => {
            req.step = Step::Single;
            return Outcome::Queued;
        }
        Admission::InvalidNamespace => return io_error(q, req, Status::INVALID_NAMESPACE),
        Admission::Inactive => return complete(q, req, Status::ABORTED_SQ_DELETION),
    }
    req.nsid = nsid;
    submit(cx, q, req, op)
}

/// The first non-empty Dataset Management range at or after `from`, as `(index, op)`.
fn dsm_range(
    req: &ExecReq,
    ns: &NamespaceView,
    from: u16,
    total: u16,
) -> Result<Option<(u16, BdevOp)>, Status> {
    let Some(io) = req.io.as_ref() else {
        return Err(Status::INTERNAL_ERROR);
    };
    let data: &[u8] = match io.bufs.first() {
        Some(b) => b.as_slice(),
        None => &[],
    };
    if from == 0 {
        // Every range is checked before the first deallocation.
        let _checked = io::dsm_ranges(data, total, ns)?;
    }
    let mut i = from;
    while i < total {
        let off = usize::from(i) * 16;
        let Some(r) = data.get(off..off + 16) else {
            return Err(Status::DATA_SGL_LENGTH_INVALID);
        };
        let blocks = u32::from_le_bytes([r[4], r[5], r[6], r[7]]);
        let mut s = [0u8; 8];
        s.copy_from_slice(&r[8..16]);
        let slba = u64::from_le_bytes(s);
        if blocks != 0 {
            return Ok(Some((
                i,
                BdevOp::Unmap {
                    offset_blocks: slba,
                    num_blocks: u64::from(blocks),
                },
            )));
        }
        i += 1;
    }
    Ok(None)
}

fn io_error(q: &Queue, req: &mut ExecReq, status: Status) -> Outcome {
    if let Some(c) = q.controller() {
        let lba = u64::from(req.sqe.cdw10()) | u64::from(req.sqe.cdw11()) << 32;
        let (qid, cid, nsid) = (q.qid, req.sqe.cid(), req.sqe.nsid());
        c.with(|c| c.record_error(qid, cid, status, nsid, lba));
    }
    complete(q, req, status)
}

fn submit(cx: &mut ExecCtx<'_>, q: &mut Queue, req: &mut ExecReq, op: BdevOp) -> Outcome {
    let Some(mut io) = req.io.take() else {
        release(cx.core, req);
        return complete(q, req, Status::INTERNAL_ERROR);
    };
    io.op = op;
    io.tag = req.token;
    io.status = IoStatus::Pending;
    let sub = q.subsystem.unwrap_or(u32::MAX);
    match cx.core.submit_io(sub, req.nsid, cx.transport.index, io) {
        Ok(()) => Outcome::Submitted,
        Err(io) => {
            req.io = Some(io);
            if cx.core.namespace(sub, req.nsid).is_none() {
                release(cx.core, req);
                io_error(q, req, Status::INVALID_NAMESPACE)
            } else {
                Outcome::Busy
            }
        }
    }
}

/// Submits again a request that got [`Outcome::Busy`].
pub fn resubmit(cx: &mut ExecCtx<'_>, q: &mut Queue, req: &mut ExecReq) -> Outcome {
    let Some(op) = req.io.as_ref().map(|io| io.op) else {
        release(cx.core, req);
        return complete(q, req, Status::INTERNAL_ERROR);
    };
    if q.is_closing() {
        release(cx.core, req);
        return complete(q, req, Status::ABORTED_SQ_DELETION);
    }
    submit(cx, q, req, op)
}

/// The NVMe status for a bdev status.
pub fn bdev_status(op: &BdevOp, s: IoStatus) -> Status {
    match s {
        IoStatus::Success => Status::SUCCESS,
        IoStatus::Miscompare => Status::COMPARE_FAILURE,
        IoStatus::OutOfRange => Status::LBA_OUT_OF_RANGE,
        IoStatus::BufferTooSmall => Status::DATA_SGL_LENGTH_INVALID,
        IoStatus::Unsupported => Status::INVALID_OPCODE,
        IoStatus::Error(e) if e == libc::EIO => match op {
            BdevOp::Read { .. } | BdevOp::Compare { .. } => Status::UNRECOVERED_READ_ERROR,
            BdevOp::Write { .. } | BdevOp::WriteZeroes { .. } => Status::WRITE_FAULT,
            _ => Status::INTERNAL_ERROR,
        },
        IoStatus::Error(e) if e == libc::ENOMEM || e == libc::EAGAIN => {
            Status::INTERNAL_ERROR.retryable()
        }
        IoStatus::Error(_) | IoStatus::Pending => Status::INTERNAL_ERROR,
    }
}

/// A bdev I/O of this request came back.
pub fn io_done(cx: &mut ExecCtx<'_>, q: &mut Queue, req: &mut ExecReq, io: Box<BdevIo>) -> Outcome {
    let status = bdev_status(&io.op, io.status);
    let op = io.op;
    req.io = Some(io);
    if status.is_success() && !q.is_closing() {
        match req.step {
            Step::Single => {}
            Step::FlushAfter => {
                req.step = Step::Single;
                return submit(cx, q, req, BdevOp::Flush);
            }
            Step::Deallocate { next, total } => {
                let ns = cx.core.namespace(q.subsystem.unwrap_or(u32::MAX), req.nsid);
                let Some(view) = ns.map(namespace_view) else {
                    release(cx.core, req);
                    return io_error(q, req, Status::INVALID_NAMESPACE);
                };
                match dsm_range(req, &view, next, total) {
                    Ok(Some((i, op))) => {
                        req.step = Step::Deallocate { next: i + 1, total };
                        return submit(cx, q, req, op);
                    }
                    Ok(None) => {}
                    Err(s) => {
                        release(cx.core, req);
                        return io_error(q, req, s);
                    }
                }
            }
        }
    }
    release(cx.core, req);
    cx.core.stats_mut().completed_nvme_io += 1;
    if !status.is_success() {
        return io_error(q, req, status);
    }
    req.cqe = q.cqe(&req.sqe, Status::SUCCESS);
    req.data_len = match op {
        BdevOp::Read { .. } => req.sgl.len(),
        _ => 0,
    };
    Outcome::Complete
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
    use crate::reactor::ReactorCtx;
    use iobuf::IoBuf;

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
    fn bdev_statuses() {
        let r = BdevOp::Read {
            offset_blocks: 0,
            num_blocks: 1,
        };
        let w = BdevOp::Write {
            offset_blocks: 0,
            num_blocks: 1,
            fua: false,
        };
        assert_eq!(bdev_status(&r, IoStatus::Success), Status::SUCCESS);
        assert_eq!(
            bdev_status(&r, IoStatus::Miscompare),
            Status::COMPARE_FAILURE
        );
        assert_eq!(
            bdev_status(&r, IoStatus::OutOfRange),
            Status::LBA_OUT_OF_RANGE
        );
        assert_eq!(
            bdev_status(&r, IoStatus::Unsupported),
            Status::INVALID_OPCODE
        );
        assert_eq!(
            bdev_status(&r, IoStatus::Error(libc::EIO)),
            Status::UNRECOVERED_READ_ERROR
        );
        assert_eq!(
            bdev_status(&w, IoStatus::Error(libc::EIO)),
            Status::WRITE_FAULT
        );
        assert_eq!(
            bdev_status(&BdevOp::Flush, IoStatus::Error(libc::EIO)),
            Status::INTERNAL_ERROR
        );
        let busy = bdev_status(&w, IoStatus::Error(libc::ENOMEM));
        assert!(!busy.is_dnr(), "resource shortage is retryable");
        assert_eq!(bdev_status(&w, IoStatus::Pending), Status::INTERNAL_ERROR);
    }

    #[test]
    fn begin_decodes_the_sgl_and_direction() {
        let t = info();
        let mut q = Queue::detached(1);
        let mut req = ExecReq::new(7);
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
        let mut req = ExecReq::new(1);
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

    #[test]
    fn dataset_management_ranges_are_walked_in_order() {
        let ns = NamespaceView::new(1, 512, 1000);
        let mut req = ExecReq::new(1);
        let mut b = IoBuf::alloc(4096).unwrap();
        let buf = b.as_mut_slice();
        for (i, (blocks, slba)) in [(8u32, 0u64), (0, 900), (2, 998)].iter().enumerate() {
            buf[i * 16 + 4..i * 16 + 8].copy_from_slice(&blocks.to_le_bytes());
            buf[i * 16 + 8..i * 16 + 16].copy_from_slice(&slba.to_le_bytes());
        }
        req.io.as_mut().unwrap().bufs.push(b);
        let first = dsm_range(&req, &ns, 0, 3).unwrap().unwrap();
        assert_eq!(
            first,
            (
                0,
                BdevOp::Unmap {
                    offset_blocks: 0,
                    num_blocks: 8
                }
            )
        );
        let second = dsm_range(&req, &ns, 1, 3).unwrap().unwrap();
        assert_eq!(second.0, 2, "the empty range is skipped");
        assert_eq!(dsm_range(&req, &ns, 3, 3).unwrap(), None);
        // A range past the end fails the command before anything is deallocated.
        let small = NamespaceView::new(1, 512, 999);
        assert_eq!(
            dsm_range(&req, &small, 0, 3).unwrap_err(),
            Status::LBA_OUT_OF_RANGE
        );
    }

    #[test]
    fn namespace_views_follow_the_bdev() {
        let n = NsInfo {
            nsid: 3,
            bdev_name: "m".into(),
            block_size: 4096,
            num_blocks: 10,
            uuid: uuid::Uuid::from_bytes([1; 16]),
            nguid: [2; 16],
            eui64: None,
            write_cache: true,
            unmap: true,
            write_zeroes: false,
            compare: true,
            writable: false,
        };
        let v = namespace_view(&n);
        assert_eq!((v.nsid, v.block_size, v.num_blocks), (3, 4096, 10));
        assert_eq!(v.uuid, [1; 16]);
        assert_eq!(v.eui64, [0; 8]);
        assert!(v.volatile_write_cache && v.supports_unmap && !v.supports_write_zeroes);
        assert!(v.read_only && v.ready);
    }
}
