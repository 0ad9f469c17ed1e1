//! A SCSI command's exec-layer state, embedded in the transport's preallocated request, and
//! what the transport does next with it.

use iobuf::IoBuf;

use crate::bdev::{BdevIo, BdevOp};
use crate::scsi::{ScsiIo, ScsiStatus, Sense};
use crate::target::AdmitKind;

/// What the transport does next with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScsiAction {
    /// The subsystem or namespace is paused: the token waits in the poll group, and
    /// [`crate::registry::TransportPollGroup::resume_request`] drives the request again.
    Queued,
    /// Put this many data buffers (of [`super::LuLimits::io_unit_size`] bytes each) in
    /// `req.io.bufs` (it may already hold some), waiting for them if need be, then drive
    /// again.
    NeedBuffers(usize),
    /// Move `len` bytes of data-out from the initiator into `req.io.bufs`: for a write, the
    /// data; with `param`, the parameter list (UNMAP) or block pattern (WRITE SAME), into one
    /// buffer. Then call [`ScsiReq::data_out_received`] and drive again.
    FetchDataOut {
        /// Bytes to move.
        len: u64,
        /// Parameter data (one buffer) rather than write data.
        param: bool,
    },
    /// A bdev operation is in flight: hand its completion to
    /// [`super::ScsiEngine::io_done`].
    Submitted,
    /// The bdev backend is full: drive again later (the request keeps its admission).
    Busy,
    /// Finished: send the first [`ScsiReq::data_in_len`] bytes of `req.io.bufs` to the
    /// initiator, then the status ([`ScsiReq::status`], [`ScsiReq::sense`]). Admission has
    /// been given back.
    Respond,
    /// PERSISTENT RESERVE OUT with PREEMPT AND ABORT preempted these I_T nexuses and NVMe
    /// hosts ([`ScsiReq::take_preempted`]): abort the nexuses' tasks on the command's LU, on
    /// every channel (answering them TASK ABORTED, TAS = 1), and the hosts' commands to the
    /// namespace ([`crate::target::Target::preempt_abort`]), wait until they are gone, then
    /// respond as [`ScsiAction::Respond`] does. Admission has been given back.
    AbortPreempted,
}

/// One command as the transport received it.
#[derive(Clone, Copy, Debug)]
pub struct ScsiCommand<'a> {
    /// The transport's generation-tagged token (48 bits): admission replays and bdev tags.
    pub token: u64,
    /// The subsystem (the SCSI target) the session belongs to.
    pub subsystem: u32,
    /// The LUN, if the transport could decode one.
    pub lun: Option<u16>,
    /// The CDB (bytes past the 16th are not looked at: no command this device server knows
    /// has a longer one).
    pub cdb: &'a [u8],
    /// Bytes the initiator's data-in buffer holds.
    pub data_in_len: u32,
    /// Bytes of data-out the initiator declared.
    pub data_out_len: u32,
}

/// Where a request is in the exec layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Waiting for admission (first try, or replayed after a pause).
    Admit,
    /// Admitted: run the device server (again, after waiting for data-in buffers).
    Exec,
    /// The transport moves the data-out.
    DataOut,
    /// Submit the next bdev operation.
    Submit,
    /// A bdev operation is in flight.
    Bdev,
    /// Status decided.
    Done,
}

/// How a WRITE SAME runs, decided once its pattern is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WriteSameMode {
    /// Not decided yet.
    Undecided,
    /// A zero pattern with UNMAP on a thin LU: deallocate the blocks.
    Unmap,
    /// A zero pattern: the bdev writes zeroes.
    Zeroes,
    /// Write the pattern, in chunks of at most the transfer limit.
    Pattern,
}

/// A request's exec-layer state, embedded in the transport's preallocated request. Nothing
/// here allocates per command: the bdev I/O (with its buffer list) is preallocated and reused.
#[derive(Debug)]
pub struct ScsiReq {
    /// The bdev I/O with the request's data buffers; `None` while a bdev owns it.
    pub io: Option<Box<BdevIo>>,
    pub(super) token: u64,
    pub(super) sub: u32,
    pub(super) lun: Option<u16>,
    pub(super) cdb: [u8; 16],
    pub(super) cdb_len: u8,
    pub(super) in_len: u32,
    pub(super) out_len: u32,
    pub(super) phase: Phase,
    pub(super) admit_kind: AdmitKind,
    pub(super) admitted: Option<AdmitKind>,
    /// The namespace went away under the LU map: run as if no LU were mapped.
    pub(super) no_lu: bool,
    /// A unit attention REQUEST SENSE took off the queue, kept in case the device server runs
    /// again (it waits for data-in buffers) so that the condition is not lost.
    pub(super) delivering: Option<Sense>,
    pub(super) op: Option<ScsiIo>,
    pub(super) status: ScsiStatus,
    pub(super) sense: Option<Sense>,
    pub(super) wanted_in: u64,
    pub(super) wanted_out: u64,
    pub(super) data_in: u32,
    /// Parameter data (UNMAP list, WRITE SAME pattern), once fetched.
    pub(super) param: Option<IoBuf>,
    /// Progress of a multi-operation command (UNMAP ranges done, WRITE SAME blocks written).
    pub(super) cursor: u64,
    pub(super) write_same: WriteSameMode,
    /// The WRITE SAME pattern fills the data buffers.
    pub(super) pattern_ready: bool,
    /// A PERSISTENT RESERVE OUT waiting for its parameter list.
    pub(super) pr_out: Option<crate::scsi::pr_out::PrOutCdb>,
    /// A MODE SELECT waiting for its parameter list.
    pub(super) mode_select: Option<crate::scsi::mode_select::ModeSelectCdb>,
    /// WRITE SAME by write zeroes / unmap with the write cache off (WCE = 0): a Flush
    /// follows, so the blocks are durable before GOOD.
    pub(super) flush_after: bool,
    /// That Flush is the operation to submit.
    pub(super) flushing: bool,
    /// A PERSISTENT RESERVE OUT waiting for its `ptpl_file` write: the volume and the ticket.
    pub(super) persist: Option<(std::sync::Arc<crate::target::VolumeReservation>, u64)>,
    /// A COMPARE AND WRITE, its step, its lock owner tag (while it waits for or holds the
    /// volume's range lock) and the lock once held.
    pub(super) caw: Option<crate::scsi::caw::CompareAndWrite>,
    pub(super) caw_step: super::caw::CawStep,
    pub(super) caw_owner: Option<crate::compare_write::Owner>,
    pub(super) caw_lock: Option<crate::compare_write::LockId>,
    /// What a PREEMPT AND ABORT preempted ([`ScsiAction::AbortPreempted`]).
    pub(super) preempted: Option<crate::target::PreemptAbort>,
}

impl Default for ScsiReq {
    fn default() -> Self {
        Self::new()
    }
}

impl ScsiReq {
    /// A request slot with its preallocated bdev I/O.
    pub fn new() -> Self {
        ScsiReq {
            io: Some(Box::new(BdevIo::new(BdevOp::Flush, 0))),
            token: 0,
            sub: 0,
            lun: None,
            cdb: [0; 16],
            cdb_len: 0,
            in_len: 0,
            out_len: 0,
            phase: Phase::Done,
            admit_kind: AdmitKind::Mgmt,
            admitted: None,
            no_lu: false,
            delivering: None,
            op: None,
            status: ScsiStatus::Good,
            sense: None,
            wanted_in: 0,
            wanted_out: 0,
            data_in: 0,
            param: None,
            cursor: 0,
            write_same: WriteSameMode::Undecided,
            pattern_ready: false,
            pr_out: None,
            mode_select: None,
            flush_after: false,
            flushing: false,
            caw: None,
            caw_step: super::caw::CawStep::Lock,
            caw_owner: None,
            caw_lock: None,
            preempted: None,
            persist: None,
        }
    }

    /// Forgets the previous command (the bdev I/O and its buffer list stay; the transport has
    /// taken the buffers back, see [`ScsiReq::take_param`]).
    #[inline]
    pub fn reset(&mut self) {
        // Field by field: no drop glue, no copy of the whole request.
        self.token = 0;
        self.delivering = None;
        self.sub = 0;
        self.lun = None;
        self.cdb_len = 0;
        self.in_len = 0;
        self.out_len = 0;
        self.phase = Phase::Done;
        self.admit_kind = AdmitKind::Mgmt;
        self.admitted = None;
        self.no_lu = false;
        self.op = None;
        self.status = ScsiStatus::Good;
        self.sense = None;
        self.wanted_in = 0;
        self.wanted_out = 0;
        self.data_in = 0;
        self.cursor = 0;
        self.write_same = WriteSameMode::Undecided;
        self.pattern_ready = false;
        self.pr_out = None;
        self.mode_select = None;
        self.flush_after = false;
        self.flushing = false;
        self.caw = None;
        self.caw_step = super::caw::CawStep::Lock;
        self.caw_owner = None;
        self.caw_lock = None;
        self.preempted = None;
        self.persist = None;
    }

    /// Whether the command started ([`super::ScsiEngine::start`]) addresses a logical unit
    /// mapped in its subsystem (whether its nexus sees it is decided when it runs).
    pub fn addresses_lu(&self) -> bool {
        matches!(self.admit_kind, AdmitKind::Io(_))
    }

    /// Ends the command with CHECK CONDITION and `sense` and no data-in (see
    /// [`super::ScsiEngine::fail`], which also gives back the admission).
    pub(super) fn fail(&mut self, sense: Sense) {
        self.check(sense);
        self.data_in = 0;
        self.phase = Phase::Done;
    }

    /// The I_T nexuses and NVMe hosts whose commands to the LU must be aborted before the
    /// response ([`ScsiAction::AbortPreempted`]).
    pub fn take_preempted(&mut self) -> Option<crate::target::PreemptAbort> {
        self.preempted.take()
    }

    /// Ends the command with TASK ABORTED, no data-in, no sense.
    pub(super) fn task_aborted(&mut self) {
        self.status = ScsiStatus::TaskAborted;
        self.sense = None;
        self.data_in = 0;
        self.phase = Phase::Done;
    }

    pub(super) fn check(&mut self, sense: Sense) {
        self.status = ScsiStatus::CheckCondition;
        self.sense = Some(sense);
    }

    /// The data-out has been moved as [`ScsiAction::FetchDataOut`] asked: parameter data
    /// becomes the request's parameter buffer, and the next drive submits.
    pub fn data_out_received(&mut self) {
        if self.phase != Phase::DataOut {
            return;
        }
        if !matches!(self.op, Some(ScsiIo::Write { .. })) {
            self.param = self.io.as_mut().and_then(|io| io.bufs.pop());
        }
        self.phase = Phase::Submit;
    }

    /// The parameter buffer, for the transport to give back to its pool.
    pub fn take_param(&mut self) -> Option<IoBuf> {
        self.param.take()
    }

    /// The token given to [`super::ScsiEngine::start`].
    #[inline]
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The LUN the command addressed, if it decoded.
    #[inline]
    pub fn lun(&self) -> Option<u16> {
        self.lun
    }

    /// The block-device operation the command decoded to, if any.
    #[inline]
    pub fn op(&self) -> Option<ScsiIo> {
        self.op
    }

    /// The status to send.
    #[inline]
    pub fn status(&self) -> ScsiStatus {
        self.status
    }

    /// Whether the status is GOOD.
    #[inline]
    pub fn is_good(&self) -> bool {
        self.status == ScsiStatus::Good
    }

    /// The sense data to send with CHECK CONDITION.
    #[inline]
    pub fn sense(&self) -> Option<&Sense> {
        self.sense.as_ref()
    }

    /// Bytes of data-in to send (at most the initiator's buffer).
    #[inline]
    pub fn data_in_len(&self) -> u32 {
        self.data_in
    }

    /// Bytes of data-in the command produces in full (the initiator's buffer may be smaller:
    /// an overflow residual).
    #[inline]
    pub fn wanted_in(&self) -> u64 {
        self.wanted_in
    }

    /// Bytes of data-out the command consumes.
    #[inline]
    pub fn wanted_out(&self) -> u64 {
        self.wanted_out
    }

    /// Bytes the initiator's data-in buffer holds.
    #[inline]
    pub fn in_len(&self) -> u32 {
        self.in_len
    }

    /// Bytes of data-out the initiator declared.
    #[inline]
    pub fn out_len(&self) -> u32 {
        self.out_len
    }

    /// Whether the request holds an admission reference.
    #[inline]
    pub fn is_admitted(&self) -> bool {
        self.admitted.is_some()
    }
}
