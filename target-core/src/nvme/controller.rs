//! The controller: state of one association (admin queue + I/O queues) and the admin command
//! dispatcher.
//!
//! A [`Controller`] is created by an admin-queue Connect and lives until the admin queue goes
//! away (disconnect, keep-alive expiry, fatal error). It is owned by whoever runs the admin queue;
//! it holds no references into the target model and does no I/O. Time is always passed in.

use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::aer::{AerCompletion, AerState, AerSubmit, AsyncEvent};
use super::fabrics::{
    Connect, ConnectReject, PropertyCmd, PropertySize, connect_data_off, connect_off,
};
use super::features::Features;
use super::log_page::{ChangedNsList, ErrorLog};
use super::nqn::Nqn;
use super::regs::{CcChange, Registers, csts};
use super::resv::NotifyMask;
use super::resv_log::ResvLog;
use super::spec::{DISCOVERY_DEFAULT_KATO_MS, Status, admin_opc, fctype, prop};
use super::sqe::Sqe;
use super::view::{SubsystemKind, SubsystemView, TransportLimits};
use super::{features, identify, log_page};

/// Result of one admin command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminOutcome {
    /// Send `data_out[..data_len]` to the host (if non-empty and successful), then the completion.
    Complete(Completion),
    /// An Asynchronous Event Request was parked: keep the request (by CID) without responding
    /// until [`Controller::ns_changed`] / [`Controller::discovery_log_changed`] returns an
    /// [`AerCompletion`] for it. On controller reset or teardown, drop it silently.
    Parked,
    /// Abort: the exec layer may try to abort command `cid` on queue `sqid`, then completes this
    /// command with [`Completion::abort_result`]. A parked AER is removed with
    /// [`Controller::cancel_aer`] (then complete the AER with [`Status::ABORTED_BY_REQUEST`]).
    Abort {
        /// Queue of the command to abort.
        sqid: u16,
        /// CID of the command to abort.
        cid: u16,
    },
}

/// A completed admin command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Status.
    pub status: Status,
    /// DW0.
    pub dw0: u32,
    /// DW1.
    pub dw1: u32,
    /// Bytes of `data_out` to transfer to the host before the completion (0 on error).
    pub data_len: usize,
    /// What a CC write did (Property Set only); [`CcChange::None`] otherwise.
    pub effect: CcChange,
}

impl Completion {
    /// Success with DW0 and no data.
    pub fn ok(dw0: u32) -> Completion {
        Completion {
            status: Status::SUCCESS,
            dw0,
            dw1: 0,
            data_len: 0,
            effect: CcChange::None,
        }
    }

    /// Failure with the given status.
    pub fn err(status: Status) -> Completion {
        Completion {
            status,
            dw0: 0,
            dw1: 0,
            data_len: 0,
            effect: CcChange::None,
        }
    }

    /// Success with `data_len` bytes of data.
    pub fn data(data_len: usize) -> Completion {
        Completion {
            data_len,
            ..Completion::ok(0)
        }
    }

    /// The completion of an Abort command: DW0 bit 0 = 1 means "not aborted".
    pub fn abort_result(aborted: bool) -> Completion {
        Completion::ok(u32::from(!aborted))
    }

    /// The CQE for `sqe` on the admin queue.
    pub fn cqe(&self, sqe: &Sqe, sqhd: u16) -> super::cqe::Cqe {
        super::cqe::Cqe {
            dw0: self.dw0,
            dw1: self.dw1,
            sqhd,
            sqid: 0,
            cid: sqe.cid(),
            status: self.status,
        }
    }
}

impl From<Result<Completion, Status>> for AdminOutcome {
    fn from(r: Result<Completion, Status>) -> Self {
        AdminOutcome::Complete(r.unwrap_or_else(Completion::err))
    }
}

/// One NVMe-oF controller (an association).
#[derive(Debug)]
pub struct Controller {
    pub(super) cntlid: u16,
    pub(super) kind: SubsystemKind,
    pub(super) subnqn: Nqn,
    pub(super) hostnqn: Nqn,
    pub(super) hostid: [u8; 16],
    pub(super) limits: TransportLimits,
    pub(super) regs: Registers,
    pub(super) aer: AerState,
    pub(super) features: Features,
    pub(super) changed_ns: ChangedNsList,
    pub(super) errors: ErrorLog,
    kato_ms: u32,
    ka_deadline: Option<Instant>,
    /// Connected I/O queue ids, as a bitmap indexed by QID. A bit is cleared only when its
    /// queue is gone ([`Controller::io_queue_closed`]), never by a reset.
    io_queues: Vec<u64>,
    /// A controller reset (CC.EN 1→0) waits for the I/O queues it disconnected: CSTS.RDY reads
    /// 1 until the last one is gone.
    reset_pending: bool,
    /// Discovery controllers: the generation of the log this host last read (or was notified
    /// of); until its first read, the one of its first command. 0 = none yet.
    pub(super) disc_genctr: u64,
    /// ANA reporting: the log generation of this controller's path the host last read (or
    /// was notified of); until its first admin command, unknown.
    pub(super) ana_gen: Option<u64>,
    /// Reservation Notification log pages (LID 80h) waiting for the host.
    pub(super) resv_log: ResvLog,
    /// Reservation Notification Mask (feature 82h): the value set for every namespace
    /// (NSID FFFFFFFFh), then per-namespace values set since.
    pub(super) resv_mask_all: NotifyMask,
    pub(super) resv_masks: Vec<(u32, NotifyMask)>,
}

impl Controller {
    /// Creates the controller for an admin Connect that passed
    /// [`super::fabrics::check_admin_connect`], with a CNTLID from the subsystem's
    /// [`super::CntlidAllocator`]. The keep-alive timer starts now.
    ///
    /// KATO comes from the Connect, rounded up to the KAS granularity; a discovery controller
    /// connected with KATO 0 gets 120 s (as nvmet and SPDK), an I/O controller with KATO 0 has no
    /// keep-alive timer. Reply to the Connect with [`Connect::success_cqe`] and
    /// [`Controller::connect_dw0`].
    pub fn new(
        cntlid: u16,
        connect: &Connect,
        kind: SubsystemKind,
        limits: TransportLimits,
        now: Instant,
    ) -> Controller {
        let mut kato = connect.cmd.kato_ms;
        if kato == 0 && kind == SubsystemKind::Discovery {
            kato = DISCOVERY_DEFAULT_KATO_MS;
        }
        let words = (usize::from(limits.max_io_queues) + 1).div_ceil(64);
        let mut c = Controller {
            cntlid,
            kind,
            subnqn: connect.data.subnqn.clone(),
            hostnqn: connect.data.hostnqn.clone(),
            hostid: connect.data.hostid,
            regs: Registers::new(&limits, kind),
            limits,
            aer: AerState::default(),
            features: Features::default(),
            changed_ns: ChangedNsList::default(),
            errors: ErrorLog::default(),
            kato_ms: 0,
            ka_deadline: None,
            io_queues: vec![0; words],
            reset_pending: false,
            disc_genctr: 0,
            ana_gen: None,
            resv_log: ResvLog::new(),
            resv_mask_all: NotifyMask::default(),
            resv_masks: Vec::new(),
        };
        c.set_kato(kato, now);
        debug!(
            cntlid,
            subnqn = %c.subnqn,
            hostnqn = %c.hostnqn,
            kato_ms = c.kato_ms,
            "nvme controller created"
        );
        c
    }

    /// Controller id.
    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }
    /// I/O or discovery controller.
    pub fn kind(&self) -> SubsystemKind {
        self.kind
    }
    /// The subsystem NQN the host connected to.
    pub fn subnqn(&self) -> &Nqn {
        &self.subnqn
    }
    /// The host NQN.
    pub fn hostnqn(&self) -> &Nqn {
        &self.hostnqn
    }
    /// The 128-bit host identifier.
    pub fn hostid(&self) -> &[u8; 16] {
        &self.hostid
    }
    /// The limits this controller advertises.
    pub fn limits(&self) -> &TransportLimits {
        &self.limits
    }
    /// The register file (CSTS.RDY, shutdown state, CFS).
    pub fn registers(&self) -> &Registers {
        &self.regs
    }
    /// Marks the controller failed (CSTS.CFS = 1), e.g. on a fatal transport error.
    pub fn set_fatal(&mut self) {
        self.regs.set_fatal();
    }
    /// DW0 of the admin Connect response: CNTLID, AUTHREQ 0 (the exec layer sets AUTHREQ.ATR
    /// for a host that must authenticate).
    pub fn connect_dw0(&self) -> u32 {
        u32::from(self.cntlid)
    }
    /// Current keep-alive timeout in ms (0 = disabled).
    pub fn kato_ms(&self) -> u32 {
        self.kato_ms
    }

    /// When the keep-alive timer expires, if it runs. Re-read after every admin command.
    pub fn keep_alive_deadline(&self) -> Option<Instant> {
        self.ka_deadline
    }

    /// True (once) when the keep-alive timer has expired at `now`: CSTS.CFS is set and the
    /// exec layer must tear the association down (disconnect every queue, free the CNTLID).
    pub fn keep_alive_expired(&mut self, now: Instant) -> bool {
        match self.ka_deadline {
            Some(d) if now >= d => {
                warn!(cntlid = self.cntlid, hostnqn = %self.hostnqn, kato_ms = self.kato_ms,
                      "keep-alive timeout expired");
                self.ka_deadline = None;
                self.regs.set_fatal();
                true
            }
            _ => false,
        }
    }

    pub(super) fn set_kato(&mut self, kato_ms: u32, now: Instant) {
        let gran = u32::from(self.limits.kas.max(1)) * 100;
        self.kato_ms = kato_ms.div_ceil(gran).saturating_mul(gran);
        self.ka_deadline = self.kato_deadline(now);
    }

    fn kato_deadline(&self, now: Instant) -> Option<Instant> {
        if self.kato_ms == 0 {
            return None;
        }
        // At most 49 days ahead; a clock that cannot represent that never expires.
        now.checked_add(Duration::from_millis(u64::from(self.kato_ms)))
    }

    /// Number of I/O queues granted: the Number of Queues answer + 1, or the maximum if the
    /// host never asked.
    pub fn granted_io_queues(&self) -> u16 {
        match self.kind {
            SubsystemKind::Discovery => 0,
            SubsystemKind::Nvm => self.features.granted_io_queues(&self.limits),
        }
    }

    /// Validates an I/O-queue Connect for this controller (found by the exec layer from
    /// SUBNQN, HOSTNQN and CNTLID) and records the queue as connected. Returns the Connect
    /// response DW0 (CNTLID, AUTHREQ 0); reply with [`Connect::success_cqe`].
    ///
    /// Refusals: a discovery controller or QID 0 or QID above the granted count (IPO 42);
    /// HOSTID/HOSTNQN differing from the admin Connect (IATTR 1, IPO 0 / 512); controller not
    /// enabled (Command Sequence Error); SQSIZE 0 or above CAP.MQES (IPO 44); QID already
    /// connected (Command Sequence Error).
    pub fn accept_io_queue(&mut self, c: &Connect) -> Result<u32, ConnectReject> {
        let qid = c.cmd.qid;
        if self.kind == SubsystemKind::Discovery || qid == 0 {
            return Err(ConnectReject::invalid_sqe_field(connect_off::QID));
        }
        if c.data.hostid != self.hostid {
            return Err(ConnectReject::invalid_data_field(connect_data_off::HOSTID));
        }
        if c.data.hostnqn != self.hostnqn {
            return Err(ConnectReject::invalid_data_field(connect_data_off::HOSTNQN));
        }
        if c.data.cntlid != self.cntlid {
            return Err(ConnectReject::unknown_controller());
        }
        if !self.regs.is_ready() || self.regs.is_shut_down() {
            return Err(ConnectReject::status(Status::COMMAND_SEQUENCE_ERROR));
        }
        if qid > self.granted_io_queues() {
            return Err(ConnectReject::invalid_sqe_field(connect_off::QID));
        }
        if c.cmd.sqsize == 0 || c.cmd.sqsize > self.limits.mqes() {
            return Err(ConnectReject::invalid_sqe_field(connect_off::SQSIZE));
        }
        let (w, b) = (usize::from(qid) / 64, qid % 64);
        let Some(word) = self.io_queues.get_mut(w) else {
            return Err(ConnectReject::invalid_sqe_field(connect_off::QID));
        };
        if *word & 1 << b != 0 {
            return Err(ConnectReject::status(Status::COMMAND_SEQUENCE_ERROR));
        }
        *word |= 1 << b;
        debug!(
            cntlid = self.cntlid,
            qid,
            sqsize = c.cmd.sqsize,
            "I/O queue connected"
        );
        Ok(u32::from(self.cntlid))
    }

    /// An I/O queue went away (transport disconnect or Fabrics Disconnect). Only the queue
    /// that was accepted for `qid` may call this: its id becomes free again, and a reset that
    /// waited for it completes when it was the last.
    pub fn io_queue_closed(&mut self, qid: u16) {
        if let Some(word) = self.io_queues.get_mut(usize::from(qid) / 64) {
            *word &= !(1 << (qid % 64));
        }
        if self.reset_pending && self.num_io_queues() == 0 {
            debug!(cntlid = self.cntlid, "controller reset complete");
            self.reset_pending = false;
        }
    }

    /// Whether a controller reset is waiting for I/O queues of the old generation to go.
    pub fn reset_pending(&self) -> bool {
        self.reset_pending
    }

    /// True if I/O queue `qid` is connected.
    pub fn io_queue_connected(&self, qid: u16) -> bool {
        self.io_queues
            .get(usize::from(qid) / 64)
            .is_some_and(|w| w & 1 << (qid % 64) != 0)
    }

    /// Number of connected I/O queues.
    pub fn num_io_queues(&self) -> usize {
        self.io_queues.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Namespaces were added, removed or changed (resized, identifiers). Records them in the
    /// Changed Namespace List and, if the host enabled namespace notices and none is
    /// outstanding, returns the parked AER to complete now (DW0 0x00040002). I/O controllers only.
    pub fn ns_changed(&mut self, nsids: &[u32]) -> Option<AerCompletion> {
        if self.kind != SubsystemKind::Nvm {
            return None;
        }
        for &n in nsids {
            self.changed_ns.add(n);
        }
        self.aer.post(AsyncEvent::NamespaceAttributeChanged)
    }

    /// The discovery log for this host changed. Discovery controllers only; returns the parked
    /// AER to complete now (DW0 0x0070F002), if enabled and not masked.
    pub fn discovery_log_changed(&mut self) -> Option<AerCompletion> {
        if self.kind != SubsystemKind::Discovery {
            return None;
        }
        self.aer.post(AsyncEvent::DiscoveryLogChanged)
    }

    /// The discovery log this host may see now has generation `genctr` (the exec layer asks
    /// after every change of subsystems, listeners or hosts). When it differs from the log the
    /// host last read, the change is reported like [`Controller::discovery_log_changed`]; a
    /// change this host cannot see reports nothing.
    pub fn discovery_log_generation(&mut self, genctr: u64) -> Option<AerCompletion> {
        if self.kind != SubsystemKind::Discovery || genctr == self.disc_genctr {
            return None;
        }
        self.disc_genctr = genctr;
        debug!(cntlid = self.cntlid, hostnqn = %self.hostnqn, genctr, "discovery log changed");
        self.discovery_log_changed()
    }

    /// The ANA log page of this controller's path now has generation `generation` (the exec
    /// layer asks after every ANA change). When it differs from the one the host last read,
    /// records an ANA change notice and returns the parked AER to complete now (DW0
    /// 0x000C0302), if enabled and not masked. I/O controllers only.
    pub fn ana_log_generation(&mut self, generation: u64) -> Option<AerCompletion> {
        if self.kind != SubsystemKind::Nvm || self.ana_gen == Some(generation) {
            return None;
        }
        let known = self.ana_gen.replace(generation).is_some();
        if !known {
            // No command yet: the host reads the log when it initializes.
            return None;
        }
        debug!(cntlid = self.cntlid, hostnqn = %self.hostnqn, generation, "ANA log changed");
        self.aer.post(AsyncEvent::AnaChange)
    }

    /// The Reservation Notification Mask of namespace `nsid` (feature 82h).
    pub(super) fn resv_mask(&self, nsid: u32) -> NotifyMask {
        self.resv_masks
            .iter()
            .find(|(n, _)| *n == nsid)
            .map_or(self.resv_mask_all, |(_, m)| *m)
    }

    /// A reservation notice for this controller's host on namespace `nsid`: queues a
    /// Reservation Notification log page unless the namespace's mask suppresses it, and
    /// returns the parked AER to complete now (Reservation Log Page Available), if any.
    pub fn resv_notify(
        &mut self,
        nsid: u32,
        kind: crate::reservation::NoticeKind,
    ) -> Option<AerCompletion> {
        let mask = self.resv_mask(nsid);
        if self.resv_log.notify(nsid, kind, mask) {
            self.aer.post(AsyncEvent::ReservationLog)
        } else {
            None
        }
    }

    /// Removes a parked AER (for Abort). True if it was parked.
    pub fn cancel_aer(&mut self, cid: u16) -> bool {
        self.aer.cancel(cid)
    }

    /// CIDs of the parked AERs.
    pub fn parked_aers(&self) -> &[u16] {
        self.aer.parked()
    }

    /// Records a failed command in the Error Information log (the exec layer calls this for
    /// I/O errors; admin errors are recorded automatically).
    pub fn record_error(&mut self, sqid: u16, cid: u16, status: Status, nsid: u32, lba: u64) {
        self.errors.record(sqid, cid, status, nsid, lba);
    }

    /// Executes one admin-queue command (everything but the first Connect).
    ///
    /// `data_out` is the host's buffer as described by SGL1 (its length is the SGL length); the
    /// command writes at most that much and reports how much to send in
    /// [`Completion::data_len`]. A buffer shorter than the command's transfer length gets Data SGL
    /// Length Invalid. Any admin command refreshes the keep-alive timer.
    pub fn admin(
        &mut self,
        view: &SubsystemView<'_>,
        sqe: &Sqe,
        data_out: &mut [u8],
        now: Instant,
    ) -> AdminOutcome {
        if self.ka_deadline.is_some() {
            self.ka_deadline = self.kato_deadline(now);
        }
        if let Some(log) = &view.discovery_log
            && self.disc_genctr == 0
        {
            self.disc_genctr = log.genctr;
        }
        if let Some(a) = &view.ana
            && self.ana_gen.is_none()
        {
            self.ana_gen = Some(a.generation);
        }
        let out = self.dispatch(view, sqe, data_out, now);
        if let AdminOutcome::Complete(c) = &out {
            if c.status.is_success() {
                debug!(
                    cntlid = self.cntlid,
                    opc = sqe.opcode(),
                    cid = sqe.cid(),
                    "admin ok"
                );
            } else {
                debug!(cntlid = self.cntlid, opc = sqe.opcode(), cid = sqe.cid(),
                       status = %c.status, "admin command failed");
                self.errors.record(0, sqe.cid(), c.status, sqe.nsid(), 0);
            }
        }
        out
    }

    fn dispatch(
        &mut self,
        view: &SubsystemView<'_>,
        sqe: &Sqe,
        data_out: &mut [u8],
        now: Instant,
    ) -> AdminOutcome {
        if sqe.fuse() != 0 {
            return AdminOutcome::Complete(Completion::err(Status::INVALID_FIELD));
        }
        if sqe.is_fabrics() {
            return self.fabrics(sqe).into();
        }
        if !self.regs.is_ready() {
            return AdminOutcome::Complete(Completion::err(Status::COMMAND_SEQUENCE_ERROR));
        }
        let disc = self.kind == SubsystemKind::Discovery;
        match sqe.opcode() {
            admin_opc::IDENTIFY => identify::execute(self, view, sqe, data_out)
                .map(Completion::data)
                .into(),
            admin_opc::GET_LOG_PAGE => log_page::execute(self, view, sqe, data_out)
                .map(Completion::data)
                .into(),
            admin_opc::SET_FEATURES => features::set(self, view, sqe, now).into(),
            admin_opc::GET_FEATURES => features::get(self, view, sqe, data_out).into(),
            admin_opc::ASYNC_EVENT_REQUEST => match self.aer.submit(sqe.cid()) {
                Ok(AerSubmit::Parked) => AdminOutcome::Parked,
                Ok(AerSubmit::Complete(dw0)) => AdminOutcome::Complete(Completion::ok(dw0)),
                Err(s) => AdminOutcome::Complete(Completion::err(s)),
            },
            admin_opc::KEEP_ALIVE => AdminOutcome::Complete(if self.kato_ms == 0 {
                Completion::err(Status::KEEP_ALIVE_TIMEOUT_INVALID)
            } else {
                Completion::ok(0)
            }),
            admin_opc::ABORT if !disc => {
                let cdw10 = sqe.cdw10();
                AdminOutcome::Abort {
                    sqid: cdw10 as u16,
                    cid: (cdw10 >> 16) as u16,
                }
            }
            _ => AdminOutcome::Complete(Completion::err(Status::INVALID_OPCODE)),
        }
    }

    fn fabrics(&mut self, sqe: &Sqe) -> Result<Completion, Status> {
        match sqe.fctype() {
            fctype::PROPERTY_GET => {
                let p = PropertyCmd::from_sqe(sqe);
                let mut v = self.regs.get(&p)?;
                if self.reset_pending && p.offset == prop::CSTS {
                    // The reset is not done while old I/O queues remain (as SPDK): a host
                    // waiting for RDY = 0 cannot reconnect an I/O queue id still in use.
                    v |= u64::from(csts::RDY);
                }
                Ok(Completion {
                    dw1: if p.size == Some(PropertySize::Eight) {
                        (v >> 32) as u32
                    } else {
                        0
                    },
                    ..Completion::ok(v as u32)
                })
            }
            fctype::PROPERTY_SET => {
                let p = PropertyCmd::from_sqe(sqe);
                let effect = self.regs.set(&p)?;
                match effect {
                    CcChange::Disabled => self.reset(),
                    // Enabled again (too early or not): RDY is real now; the ids of old
                    // queues still there stay taken.
                    CcChange::Enabled => self.reset_pending = false,
                    CcChange::EnableFailed => {
                        warn!(
                            cntlid = self.cntlid,
                            cc = p.value as u32,
                            "unsupported CC at enable"
                        )
                    }
                    _ => {}
                }
                Ok(Completion {
                    effect,
                    ..Completion::ok(0)
                })
            }
            // The admin queue is connected already.
            fctype::CONNECT => Err(Status::COMMAND_SEQUENCE_ERROR),
            // Disconnect deletes I/O queues only.
            fctype::DISCONNECT => Err(Status::INVALID_FIELD),
            _ => Err(Status::INVALID_OPCODE),
        }
    }

    /// Controller reset (CC.EN 1→0): parked AERs are gone, the async event configuration
    /// returns to its default, and the exec layer disconnects the I/O queues. Their ids stay
    /// taken until each queue is gone ([`Controller::io_queue_closed`]), and CSTS.RDY reads 1
    /// until then: an old queue going away late must not free the id of a reconnected one.
    /// KATO and the granted queue count persist.
    fn reset(&mut self) {
        debug!(
            cntlid = self.cntlid,
            io_queues = self.num_io_queues(),
            "controller reset"
        );
        self.aer.reset();
        self.reset_pending = self.num_io_queues() > 0;
    }
}
