//! Fused Compare + Write (NVMe base specification, "Fused Operations"): a Compare with FUSE
//! 01b followed, next in the same submission queue, by a Write with FUSE 10b on the same
//! namespace and blocks. The pair is atomic against every other write to the blocks, from
//! any queue, poll group or protocol: it runs under the volume's compare-and-write range
//! lock ([`crate::target::CawLock`], the one SCSI COMPARE AND WRITE takes).
//!
//! Pairing is decided when a command reaches [`super::begin`], in a small per-queue table
//! ([`FusedTable`]). That is arrival order on RDMA (a receive meets a request in order) and,
//! on TCP, for commands without data or with in-capsule data (the connection reads its next
//! PDU only once such a command is handed over). A TCP command whose data comes after an R2T
//! reaches `begin` only when the data is in, so it is left out of the pairing: it does not
//! break a pair, and as a fused half it is refused with Invalid Field (a fused pair on TCP
//! must fit the in-capsule data size, 4 KiB by default).
//!
//! - a Compare with FUSE 01b opens a pair and waits (its request answers
//!   [`NvmeAction::Queued`]);
//! - the next command is its Write with FUSE 10b: the pair is complete; anything else
//!   leaves the Compare lone: it completes with Command Aborted due to Missing Fused
//!   Command. A FUSE 10b command that follows no first half gets the same status; FUSE 11b
//!   is Invalid Field, and so is a first half that is not a Compare or a second half that
//!   is not a Write (FUSES advertises only Compare + Write; nvmet answers Invalid Field to
//!   any FUSE, SPDK Invalid Opcode to these).
//!
//! Then the Write drives: it checks that both halves name the same namespace, SLBA and NLB
//! (else both complete with Invalid Field), the Write's reservation check (the pair is a
//! write), admission, and takes the range lock with itself as owner (so its own write passes
//! the gates). Once the lock is held the Compare runs (a bdev Compare of its data, under the
//! Write's admission, so a namespace pause waits for the whole pair); its
//! result goes to the Write, which writes on a match, or completes with Command Aborted due
//! to Failed Fused Command (the Compare: Compare Failure, or its own error). The Write
//! releases the lock when it completes. A request the transport drops (its queue is torn
//! down) cancels its lock in [`super::abandon`]; a half dropped while its queue lives
//! disconnects the queue ([`dropped`]).
//!
//! The halves wake each other by a control message to their own reactor (the way the lock
//! resumes its owner): nothing else is allocated, and the table is fixed-size
//! ([`MAX_PAIRS`]); a first half beyond it is refused with Command Interrupted (retryable),
//! and its second half with it.

use arrayvec::ArrayVec;

use super::DisconnectFn;
use super::io_cmd_bdev::{Followup, bdev_status, io_error, submit};
use super::queue::Queue;
use super::request::{NvmeAction, NvmeCtx, NvmeReq, admit, complete, release};
use super::resv_cmd;
use crate::bdev::BdevOp;
use crate::compare_write::LbaRange;
use crate::nvme::sgl::DataSgl;
use crate::nvme::spec::io_opc;
use crate::nvme::{Direction, IoCmd, Sqe, Status, ana, io};
use crate::target::{Admission, AdmitKind, CawRequest, PgCore, owner_of};

/// FUSE 01b: first command of a fused operation.
pub const FUSE_FIRST: u8 = 1;
/// FUSE 10b: second command of a fused operation.
pub const FUSE_SECOND: u8 = 2;

/// Fused pairs in progress on one queue at once.
pub const MAX_PAIRS: usize = 4;

/// Which half of a fused operation a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FusedRole {
    /// Not fused.
    None,
    /// The Compare (FUSE 01b).
    First,
    /// The Write (FUSE 10b) of the pair opened by the Compare with this token.
    Second { first: u64 },
}

/// Where the Write of a pair is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SecondStep {
    /// Checks, admission, the lock request.
    Start,
    /// Waiting for the lock.
    Lock,
    /// Holding the lock, waiting for the Compare's result.
    AwaitCompare,
    /// Writing.
    Write,
}

/// Where a pair is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PairState {
    /// The Compare arrived; the next command has not.
    AwaitSecond,
    /// The Write arrived; it has not taken the lock yet.
    Paired,
    /// The next command was not the Write: the Compare completes with this status.
    Lone(Status),
    /// The Write failed before the compare: the Compare completes with this status.
    Failed(Status),
    /// The Write holds the lock: the Compare runs.
    Compare,
    /// The Compare completed with this status: the Write writes (success) or aborts.
    Compared(Status),
}

#[derive(Debug, Clone, Copy)]
struct Pair {
    /// The Compare's token.
    first: u64,
    /// The Write's token, once it arrived.
    second: Option<u64>,
    /// The Compare's command (NSID, SLBA, NLB to match).
    first_sqe: Sqe,
    state: PairState,
    /// The Compare answered Queued and waits to be woken.
    first_waits: bool,
}

/// The fused pairs of one queue.
#[derive(Debug, Default)]
pub(crate) struct FusedTable {
    pairs: ArrayVec<Pair, MAX_PAIRS>,
    /// The last command to arrive was this first half.
    open: Option<u64>,
    /// The last command to arrive was a first half refused for room: refuse its second too.
    refused: bool,
}

impl FusedTable {
    fn get(&mut self, first: u64) -> Option<&mut Pair> {
        self.pairs.iter_mut().find(|p| p.first == first)
    }

    fn remove(&mut self, first: u64) {
        self.pairs.retain(|p| p.first != first);
    }
}

/// Resumes request `token` of this queue's transport on its reactor (by control message).
fn wake(q: &Queue, token: u64) {
    let me = q.me;
    let Some(target) = q.target.as_ref() else {
        return;
    };
    let sent = target.reactors().send_ctrl(me.reactor, move |ctx| {
        crate::target::resume_transport_request(ctx, me.transport, token);
    });
    if let Err(e) = sent {
        tracing::warn!("fused command: cannot wake its companion: {e}");
    }
}

/// Sets the state of the pair opened by `first` and wakes the Compare if it waits.
fn set_state(q: &mut Queue, first: u64, state: PairState) {
    let Some(p) = q.fused.get(first) else {
        return;
    };
    p.state = state;
    let waits = std::mem::take(&mut p.first_waits);
    if waits {
        wake(q, first);
    }
}

/// A command reached `begin` on an I/O queue: pairs fused halves in arrival order.
/// `Err(status)` completes the command at once.
/// Inlined: the usual command (not fused, no half open) is three stores.
#[inline]
pub(super) fn arrived(
    q: &mut Queue,
    req: &mut NvmeReq,
    disconnect: DisconnectFn,
) -> Result<(), Status> {
    if req.sqe.fuse() == 0 && q.fused.open.is_none() && !q.fused.refused {
        // Not fused, and no half open before it: nothing to pair or break (what
        // `pair_up` does for it, without its checks).
        req.fused = FusedRole::None;
        req.fused_queue = None;
        req.second_step = SecondStep::Start;
        return Ok(());
    }
    arrived_paired(q, req, disconnect)
}

/// [`arrived`] for a fused half, or any command after one.
fn arrived_paired(
    q: &mut Queue,
    req: &mut NvmeReq,
    disconnect: DisconnectFn,
) -> Result<(), Status> {
    let r = pair_up(q, req);
    if req.fused != FusedRole::None {
        req.fused_queue = Some((q.me, disconnect));
    }
    r
}

fn pair_up(q: &mut Queue, req: &mut NvmeReq) -> Result<(), Status> {
    req.fused = FusedRole::None;
    req.fused_queue = None;
    req.second_step = SecondStep::Start;
    let fuse = req.sqe.fuse();
    if matches!(req.sgl, DataSgl::Transport { .. })
        && req.sqe.direction() == Direction::HostToController
    {
        // NVMe/TCP data sent after an R2T: such a command reaches `begin` once its data is
        // in, possibly after commands that arrived later, so its place says nothing about
        // adjacency. It neither breaks a pair nor may be a half of one.
        return if fuse == 0 {
            Ok(())
        } else {
            Err(Status::INVALID_FIELD)
        };
    }
    let refused = std::mem::take(&mut q.fused.refused);
    if let Some(first) = q.fused.open.take() {
        if fuse == FUSE_SECOND {
            if req.sqe.opcode() != io_opc::WRITE {
                set_state(q, first, PairState::Lone(Status::ABORTED_MISSING_FUSED));
                return Err(Status::INVALID_FIELD);
            }
            if let Some(p) = q.fused.get(first) {
                p.state = PairState::Paired;
                p.second = Some(req.token);
            }
            req.fused = FusedRole::Second { first };
            return Ok(());
        }
        set_state(q, first, PairState::Lone(Status::ABORTED_MISSING_FUSED));
    }
    match fuse {
        0 => Ok(()),
        FUSE_FIRST => {
            if req.sqe.opcode() != io_opc::COMPARE {
                return Err(Status::INVALID_FIELD);
            }
            let pair = Pair {
                first: req.token,
                second: None,
                first_sqe: req.sqe,
                state: PairState::AwaitSecond,
                first_waits: false,
            };
            if q.fused.pairs.try_push(pair).is_err() {
                q.fused.refused = true;
                return Err(Status::COMMAND_INTERRUPTED);
            }
            q.fused.open = Some(req.token);
            req.fused = FusedRole::First;
            Ok(())
        }
        FUSE_SECOND if refused => Err(Status::COMMAND_INTERRUPTED),
        FUSE_SECOND => Err(Status::ABORTED_MISSING_FUSED),
        _ => Err(Status::INVALID_FIELD),
    }
}

/// A command that reached `begin` was refused there: a first half before it is lone.
pub(super) fn not_arrived(q: &mut Queue) {
    q.fused.refused = false;
    if let Some(first) = q.fused.open.take() {
        set_state(q, first, PairState::Lone(Status::ABORTED_MISSING_FUSED));
    }
}

/// Runs (or re-runs, when woken) a fused half.
pub(super) fn execute(cx: &mut NvmeCtx<'_>, q: &mut Queue, req: &mut NvmeReq) -> NvmeAction {
    match req.fused {
        FusedRole::First => first(cx, q, req),
        FusedRole::Second { first } => second(cx, q, req, first),
        FusedRole::None => complete(q, req, Status::INTERNAL_ERROR),
    }
}

/// The command with its FUSE bits cleared, for the plain decoder.
fn unfused(sqe: &Sqe) -> Sqe {
    let mut s = *sqe;
    s.set_flags(sqe.flags() & !3);
    s
}

fn first(cx: &mut NvmeCtx<'_>, q: &mut Queue, req: &mut NvmeReq) -> NvmeAction {
    let token = req.token;
    let Some(p) = q.fused.get(token) else {
        req.fused_queue = None;
        return complete(q, req, Status::ABORTED_MISSING_FUSED);
    };
    match p.state {
        PairState::AwaitSecond | PairState::Paired => {
            p.first_waits = true;
            NvmeAction::Queued
        }
        PairState::Lone(s) | PairState::Failed(s) => {
            q.fused.remove(token);
            req.fused_queue = None;
            io_error(q, req, s)
        }
        // Woken twice: the compare already ran.
        PairState::Compared(_) => NvmeAction::Queued,
        PairState::Compare => {
            let sub = q.subsystem.unwrap_or(u32::MAX);
            let nsid = req.sqe.nsid();
            let ns = cx
                .core
                .namespace(sub, nsid)
                .map(super::admin_cmd::namespace_view);
            let sqe = unfused(&req.sqe);
            let op = match io::decode(
                &sqe,
                ns.as_ref(),
                Ok(req.sgl.len()),
                cx.transport.limits.max_io_size,
            ) {
                Ok(IoCmd::Compare { slba, blocks }) => BdevOp::Compare {
                    offset_blocks: slba,
                    num_blocks: u64::from(blocks),
                },
                Ok(_) => return compared(cx, q, req, Status::INVALID_OPCODE),
                Err(s) => return compared(cx, q, req, s),
            };
            // No admission of its own: the Write was admitted before it took the lock and
            // completes after this compare, so a pause of the namespace waits for both (an
            // admission of the Compare could queue behind that pause, which would wait for
            // the Write, which waits for the Compare).
            req.nsid = nsid;
            req.followup = Followup::FusedCompare;
            submit(cx, q, req, op)
        }
    }
}

/// The Compare is done with `status`: the Write learns it, the Compare completes.
fn compared(cx: &mut NvmeCtx<'_>, q: &mut Queue, req: &mut NvmeReq, status: Status) -> NvmeAction {
    release(cx.core, req);
    req.followup = Followup::Single;
    req.fused_queue = None;
    let token = req.token;
    let second = q.fused.get(token).and_then(|p| {
        p.state = PairState::Compared(status);
        p.first_waits = false;
        p.second
    });
    if let Some(second) = second {
        wake(q, second);
    }
    if status.is_success() {
        complete(q, req, status)
    } else {
        io_error(q, req, status)
    }
}

/// A bdev operation of a fused half came back (`Followup::FusedCompare` / `FusedWrite`).
pub(super) fn io_done(
    cx: &mut NvmeCtx<'_>,
    q: &mut Queue,
    req: &mut NvmeReq,
    op: &BdevOp,
    status: crate::bdev::IoStatus,
) -> NvmeAction {
    let status = bdev_status(op, status);
    cx.core.stats_mut().completed_nvme_io += 1;
    match req.followup {
        Followup::FusedCompare => compared(cx, q, req, status),
        _ => finish_second(cx, q, req, status),
    }
}

/// The Write of a pair ends with `status`: the lock is released, the pair forgotten.
fn finish_second(
    cx: &mut NvmeCtx<'_>,
    q: &mut Queue,
    req: &mut NvmeReq,
    status: Status,
) -> NvmeAction {
    release(cx.core, req);
    drop_lock(cx.core, req);
    req.followup = Followup::Single;
    req.fused_queue = None;
    if let FusedRole::Second { first } = req.fused {
        // The Compare completes on its own unless it is still waiting for the lock.
        let waiting = q
            .fused
            .get(first)
            .is_some_and(|p| matches!(p.state, PairState::AwaitSecond | PairState::Paired));
        if waiting {
            let s = if status.is_success() {
                Status::ABORTED_FAILED_FUSED
            } else {
                status_for_first(status)
            };
            set_state(q, first, PairState::Failed(s));
        } else {
            q.fused.remove(first);
        }
    }
    if status.is_success() {
        complete(q, req, status)
    } else {
        io_error(q, req, status)
    }
}

/// What the Compare gets when its Write failed before the compare: Invalid Field for a
/// mismatched pair (both halves), else the Write's failure aborts it.
fn status_for_first(write: Status) -> Status {
    if write == Status::INVALID_FIELD {
        Status::INVALID_FIELD
    } else {
        Status::ABORTED_FAILED_FUSED
    }
}

/// Does the Write name the same namespace and blocks as its Compare?
fn same_blocks(a: &Sqe, b: &Sqe) -> bool {
    a.nsid() == b.nsid()
        && a.cdw10() == b.cdw10()
        && a.cdw11() == b.cdw11()
        && a.cdw12() & 0xFFFF == b.cdw12() & 0xFFFF
}

fn second(cx: &mut NvmeCtx<'_>, q: &mut Queue, req: &mut NvmeReq, first: u64) -> NvmeAction {
    let Some(p) = q.fused.get(first).copied() else {
        return finish_second(cx, q, req, Status::ABORTED_MISSING_FUSED);
    };
    let sub = q.subsystem.unwrap_or(u32::MAX);
    let nsid = req.sqe.nsid();
    match req.second_step {
        SecondStep::Start => {
            if !same_blocks(&p.first_sqe, &req.sqe) {
                return finish_second(cx, q, req, Status::INVALID_FIELD);
            }
            let ns = cx
                .core
                .namespace(sub, nsid)
                .filter(|n| {
                    n.visible_hosts.is_none()
                        || q.association().is_some_and(|c| n.visible_to(c.hostnqn()))
                })
                .map(super::admin_cmd::namespace_view);
            if ns.is_some()
                && let Some(group) = cx.core.namespace(sub, nsid).map(|n| n.anagrpid)
                && let Some(state) = cx.core.ana_state(sub, &q.listen, &mut q.ana_path, group)
                && let Err(s) = ana::check_io(state)
            {
                return finish_second(cx, q, req, s);
            }
            let sqe = unfused(&req.sqe);
            let range = match io::decode(
                &sqe,
                ns.as_ref(),
                Ok(req.sgl.len()),
                cx.transport.limits.max_io_size,
            ) {
                Ok(IoCmd::Write { slba, blocks, .. }) => LbaRange::new(slba, u64::from(blocks)),
                Ok(_) => return finish_second(cx, q, req, Status::INVALID_OPCODE),
                Err(s) => return finish_second(cx, q, req, s),
            };
            // The pair is a write for the reservation.
            if !resv_cmd::check(cx, q, sub, nsid, io_opc::WRITE) {
                return finish_second(cx, q, req, crate::nvme::resv::RESERVATION_CONFLICT);
            }
            if !req.is_admitted() {
                match admit(cx, req, sub, AdmitKind::Io(nsid)) {
                    Admission::Go => {}
                    Admission::Queued => return NvmeAction::Queued,
                    Admission::InvalidNamespace => {
                        return finish_second(cx, q, req, Status::INVALID_NAMESPACE);
                    }
                    Admission::Inactive => {
                        return finish_second(cx, q, req, Status::ABORTED_SQ_DELETION);
                    }
                }
            }
            req.nsid = nsid;
            let Some(lock) = cx.core.caw_lock(sub, nsid).cloned() else {
                return finish_second(cx, q, req, Status::INVALID_NAMESPACE);
            };
            let owner = owner_of(cx.core.index(), cx.transport.index, req.token);
            req.caw = Some((sub, owner));
            req.second_step = SecondStep::Lock;
            if lock.request(cx.core.target(), range, owner) == CawRequest::Busy {
                req.caw = None;
                return finish_second(cx, q, req, Status::COMMAND_INTERRUPTED);
            }
            second(cx, q, req, first)
        }
        SecondStep::Lock => {
            let held = req.caw.is_some_and(|(_, o)| {
                cx.core
                    .caw_lock(sub, req.nsid)
                    .is_some_and(|l| l.held_by(o).is_some())
            });
            if !held {
                // Resumed (TransportPollGroup::resume_request) once the range is ours.
                return NvmeAction::Queued;
            }
            req.second_step = SecondStep::AwaitCompare;
            set_state(q, first, PairState::Compare);
            NvmeAction::Queued
        }
        SecondStep::AwaitCompare => match p.state {
            PairState::Compared(s) if s.is_success() => {
                let fua = req.sqe.cdw12() & 1 << 30 != 0;
                let write_through = cx
                    .core
                    .namespace(sub, req.nsid)
                    .is_some_and(|n| n.write_cache && !n.modes.load().wce);
                req.second_step = SecondStep::Write;
                req.followup = Followup::FusedWrite;
                let op = BdevOp::Write {
                    offset_blocks: u64::from(req.sqe.cdw10()) | u64::from(req.sqe.cdw11()) << 32,
                    num_blocks: u64::from(req.sqe.cdw12() & 0xFFFF) + 1,
                    fua: fua || write_through,
                };
                submit(cx, q, req, op)
            }
            PairState::Compared(_) => finish_second(cx, q, req, Status::ABORTED_FAILED_FUSED),
            _ => NvmeAction::Queued,
        },
        // Not woken while its write is out (the transport resumes only waiting requests).
        SecondStep::Write => NvmeAction::Submitted,
    }
}

/// A fused half is dropped without having finished through this module (its request ended
/// elsewhere: a data transfer that could not be planned, its queue torn down): its
/// companion would wait for it, the Write holding the range lock, so the queue is
/// disconnected — its teardown drops the other half and cancels the lock. A queue already
/// going away ignores the request.
pub(super) fn dropped(core: &PgCore, req: &mut NvmeReq) {
    if let Some((me, disconnect)) = req.fused_queue.take() {
        tracing::debug!(
            cid = req.sqe.cid(),
            "fused command dropped: disconnecting its queue"
        );
        me.disconnect(core.target().reactors(), disconnect);
    }
}

/// Gives up the range lock a fused Write holds or waits for (its command ended, or its
/// request is dropped with its queue).
pub(super) fn drop_lock(core: &mut PgCore, req: &mut NvmeReq) {
    let Some((sub, owner)) = req.caw.take() else {
        return;
    };
    if let Some(lock) = core.caw_lock(sub, req.nsid).cloned() {
        lock.cancel(core.target(), owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(q: &mut Queue, token: u64, opc: u8, fuse: u8) -> (NvmeReq, Result<(), Status>) {
        let mut s = Sqe::new(opc, token as u16);
        s.set_nsid(1).set_flags(fuse);
        fn nop(_: &mut crate::reactor::ReactorCtx, _: usize, _: u64) {}
        let mut req = NvmeReq::new(token);
        req.reset(token, s);
        let r = arrived(q, &mut req, nop);
        assert_eq!(req.fused_queue.is_some(), req.fused != FusedRole::None);
        (req, r)
    }

    fn state(q: &mut Queue, first: u64) -> Option<PairState> {
        q.fused.get(first).map(|p| p.state)
    }

    #[test]
    fn halves_pair_in_arrival_order() {
        let mut q = Queue::detached(1);
        let (c, r) = cmd(&mut q, 1, io_opc::COMPARE, FUSE_FIRST);
        assert_eq!((c.fused, r), (FusedRole::First, Ok(())));
        assert_eq!(state(&mut q, 1), Some(PairState::AwaitSecond));
        let (w, r) = cmd(&mut q, 2, io_opc::WRITE, FUSE_SECOND);
        assert_eq!((w.fused, r), (FusedRole::Second { first: 1 }, Ok(())));
        assert_eq!(state(&mut q, 1), Some(PairState::Paired));
        // A plain command after a complete pair changes nothing.
        let (p, r) = cmd(&mut q, 3, io_opc::READ, 0);
        assert_eq!((p.fused, r), (FusedRole::None, Ok(())));
        assert_eq!(state(&mut q, 1), Some(PairState::Paired));
    }

    #[test]
    fn lone_and_malformed_halves() {
        let mut q = Queue::detached(1);
        // A first half followed by a plain command is lone.
        assert_eq!(cmd(&mut q, 1, io_opc::COMPARE, FUSE_FIRST).1, Ok(()));
        let (_, r) = cmd(&mut q, 2, io_opc::READ, 0);
        assert_eq!(r, Ok(()));
        assert_eq!(
            state(&mut q, 1),
            Some(PairState::Lone(Status::ABORTED_MISSING_FUSED))
        );
        // A second half with no first half before it.
        let (_, r) = cmd(&mut q, 3, io_opc::WRITE, FUSE_SECOND);
        assert_eq!(r, Err(Status::ABORTED_MISSING_FUSED));
        // A first half followed by a refused command is lone too.
        assert_eq!(cmd(&mut q, 4, io_opc::COMPARE, FUSE_FIRST).1, Ok(()));
        not_arrived(&mut q);
        assert_eq!(
            state(&mut q, 4),
            Some(PairState::Lone(Status::ABORTED_MISSING_FUSED))
        );
        // Halves of other opcodes, FUSE 11b.
        assert_eq!(
            cmd(&mut q, 5, io_opc::WRITE, FUSE_FIRST).1,
            Err(Status::INVALID_FIELD)
        );
        assert_eq!(cmd(&mut q, 6, io_opc::COMPARE, FUSE_FIRST).1, Ok(()));
        assert_eq!(
            cmd(&mut q, 7, io_opc::READ, FUSE_SECOND).1,
            Err(Status::INVALID_FIELD)
        );
        assert_eq!(
            state(&mut q, 6),
            Some(PairState::Lone(Status::ABORTED_MISSING_FUSED))
        );
        assert_eq!(
            cmd(&mut q, 8, io_opc::COMPARE, 3).1,
            Err(Status::INVALID_FIELD)
        );
    }

    #[test]
    fn a_full_table_refuses_both_halves_retryably() {
        let mut q = Queue::detached(1);
        for i in 0..MAX_PAIRS as u64 {
            assert_eq!(
                cmd(&mut q, 10 + 2 * i, io_opc::COMPARE, FUSE_FIRST).1,
                Ok(())
            );
            assert_eq!(
                cmd(&mut q, 11 + 2 * i, io_opc::WRITE, FUSE_SECOND).1,
                Ok(())
            );
        }
        let (_, r) = cmd(&mut q, 100, io_opc::COMPARE, FUSE_FIRST);
        assert_eq!(r, Err(Status::COMMAND_INTERRUPTED));
        assert!(!Status::COMMAND_INTERRUPTED.is_dnr());
        let (_, r) = cmd(&mut q, 101, io_opc::WRITE, FUSE_SECOND);
        assert_eq!(r, Err(Status::COMMAND_INTERRUPTED));
        // Once a pair is gone there is room again.
        q.fused.remove(10);
        let (_, r) = cmd(&mut q, 102, io_opc::COMPARE, FUSE_FIRST);
        assert_eq!(r, Ok(()));
    }

    #[test]
    fn only_the_pair_s_own_blocks_match() {
        let mut a = Sqe::new(io_opc::COMPARE, 1);
        a.set_nsid(1).set_cdw(10, 5).set_cdw(12, 1 << 30);
        let mut b = Sqe::new(io_opc::WRITE, 2);
        b.set_nsid(1).set_cdw(10, 5);
        assert!(
            same_blocks(&a, &b),
            "FUA and other CDW12 bits do not matter"
        );
        b.set_cdw(12, 1);
        assert!(!same_blocks(&a, &b), "NLB differs");
        b.set_cdw(12, 0).set_cdw(11, 1);
        assert!(!same_blocks(&a, &b), "SLBA differs");
        b.set_cdw(11, 0).set_nsid(2);
        assert!(!same_blocks(&a, &b), "NSID differs");
    }
}
