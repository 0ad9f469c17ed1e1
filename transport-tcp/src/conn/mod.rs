//! The controller side of one NVMe/TCP connection (one queue), sans-I/O.
//!
//! ```text
//!  AwaitIcReq ──ICReq ok──▶ Live ──fatal error──▶ Terminating ──C2HTermReq sent──▶ Closed
//!       │                    │  ╲──H2CTermReq / peer closed / close()───────────────▲
//!       └──bad ICReq─────────┴──────────────────────────────────────────────────────┘
//! ```
//!
//! The runtime feeds received bytes to [`Connection::recv`] and events to
//! [`Connection::buffer_ready`] and [`Connection::complete`]; it drains what to do from
//! [`Connection::poll_action`] (need a buffer, execute, fail, close) and what to send from
//! [`Connection::poll_send`]. Command data lives in the runtime's buffers: the machine writes
//! received data and reads data to digest through [`DataBuffers`], and a [`Transmit`] names the
//! data to send by slot, offset and length, so the runtime can send it from where it is.
//!
//! A command, per slot:
//!
//! ```text
//!  capsule ─▶ no data ───────────────────────────────────────────▶ Execute
//!          ─▶ in-capsule data ─▶ NeedBuffer ─▶ (data arrives) ─────▶ Execute
//!          ─▶ host data ───────▶ NeedBuffer ─▶ R2T… ─▶ H2CData… ───▶ Execute
//!          ─▶ controller data ─▶ NeedBuffer ─────────────────────────▶ Execute
//!  Execute ─▶ complete(cqe, n) ─▶ C2HData… (n bytes) ─▶ CapsuleResp (unless SUCCESS was set)
//! ```
//!
//! A data digest error does not end the connection: the command is not executed and completes
//! with Transient Transport Error ([`Action::Fail`]), as SPDK does.
//!
//! Everything is allocated in [`Connection::new`]: slots for the queue depth, the free list,
//! the action and send queues (each bounded: a slot is in each at most once). Nothing is
//! allocated per PDU or per command.

mod config;
mod queue;
mod slot;

#[cfg(test)]
mod tests;

use target_core::nvme::{Cqe, Sqe, Status};

pub use config::{Config, ConfigError, MAX_R2T_PER_COMMAND};
pub use slot::{SlotId, SlotState, Xfer};

use crate::pdu::{
    C2hData, CapsuleResp, DataDigest, Digests, Fatal, Fes, Framing, H2cData, IcReq, IcResp,
    MAX_ENCODED_HEADER, MAX_PDA, PFV_1_0, Pdu, PduReader, PduType, R2t, ReadEvent, Role,
    TERM_MAX_ERROR_DATA, TermReq, field,
};
use queue::Bounded;
use slot::{Slot, Window, classify};

/// Access to the runtime's data buffers, one per command that asked for one.
///
/// The machine only touches `[0, len)` of a slot's buffer, `len` being what
/// [`Action::NeedBuffer`] asked for, and only between [`Connection::buffer_ready`] and the
/// [`Transmit`] that releases the slot.
pub trait DataBuffers {
    /// Copies `data` into the buffer of `slot` at `offset`.
    fn write(&mut self, slot: SlotId, offset: u32, data: &[u8]);
    /// Calls `f` with the bytes `[offset, offset + len)` of the buffer of `slot`, in order, in
    /// one or more pieces.
    fn read(&self, slot: SlotId, offset: u32, len: u32, f: &mut dyn FnMut(&[u8]));
}

/// Something for the runtime to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Attach a data buffer of `len` bytes to `slot`, then call [`Connection::buffer_ready`]
    /// (or [`Connection::complete`] to fail the command without moving data). For in-capsule
    /// data, [`Connection::recv`] consumes nothing more until then.
    NeedBuffer {
        /// The command.
        slot: SlotId,
        /// Buffer size.
        len: u32,
    },
    /// The command and its host data are here: execute it, then [`Connection::complete`].
    Execute {
        /// The command.
        slot: SlotId,
    },
    /// Do not execute the command: complete it with this status (the core builds the CQE).
    Fail {
        /// The command.
        slot: SlotId,
        /// Status for its completion.
        status: Status,
    },
    /// Close the socket once everything handed out by [`Connection::poll_send`] is written.
    /// Outstanding commands are abandoned: release their buffers when they finish.
    Close,
}

/// Data bytes of a PDU to send, in the buffer of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DataRef {
    /// The command whose buffer holds the data.
    pub slot: SlotId,
    /// Offset in the buffer.
    pub offset: u32,
    /// Bytes.
    pub len: u32,
}

/// One PDU to send: the header bytes the machine wrote into the caller's buffer, then data from
/// a command buffer, then the data digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Transmit {
    /// Bytes of the caller's header buffer to send first.
    pub header_len: usize,
    /// Data to send after the header.
    pub data: Option<DataRef>,
    /// Data digest to send after the data (little-endian).
    pub ddgst: Option<[u8; 4]>,
    /// This is the command's last PDU: the slot is free again (the next capsule may take it),
    /// so move the buffer into the pending write and release it once written.
    pub release: Option<SlotId>,
}

/// Connection states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnState {
    /// Waiting for ICReq.
    AwaitIcReq,
    /// Capsules flow.
    Live,
    /// A fatal error: the C2HTermReq is the next and last PDU to send.
    Terminating,
    /// Nothing more is received or sent.
    Closed,
}

/// Why a [`Connection`] call was refused: the runtime asked something the state does not allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UsageError {
    /// The slot holds no command.
    NotOutstanding,
    /// The slot is not waiting for this call.
    WrongState(SlotState),
}

/// Where the data of the PDU being received goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum RxData {
    /// No data expected (or the PDU's data is dropped).
    Discard,
    /// In-capsule data of a slot.
    InCapsule(SlotId),
    /// H2CData of a slot, for its window `window`, at this buffer offset.
    H2c {
        slot: SlotId,
        window: usize,
        offset: u32,
        len: u32,
    },
}

#[derive(Clone, Copy, Debug)]
struct TermPending {
    fatal: Fatal,
    header: [u8; TERM_MAX_ERROR_DATA],
    header_len: usize,
}

/// Counters, for statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ConnStats {
    /// Command capsules received.
    pub capsules: u64,
    /// R2Ts handed out.
    pub r2ts: u64,
    /// H2CData PDUs received.
    pub h2c_pdus: u64,
    /// C2HData PDUs handed out.
    pub c2h_pdus: u64,
    /// Responses handed out (capsules and SUCCESS C2HData).
    pub responses: u64,
    /// Data digest errors.
    pub data_digest_errors: u64,
}

/// One controller-side NVMe/TCP connection.
pub struct Connection {
    cfg: Config,
    state: ConnState,
    reader: PduReader,
    /// Framing of what we send: negotiated digests and the host's HPDA.
    tx: Framing,
    /// R2Ts the host accepts outstanding per command (MAXR2T + 1).
    host_r2t_limit: u32,
    /// The queue is an admin queue (after [`Connection::connected`]).
    admin: bool,
    sq_flow_control_disabled: bool,
    slots: Box<[Slot]>,
    free: Vec<u16>,
    actions: Bounded<Action>,
    sendq: Bounded<u16>,
    icresp_pending: bool,
    term: Option<TermPending>,
    rx: RxData,
    /// The current PDU's data waits for this slot's buffer.
    stalled: Option<SlotId>,
    stats: ConnStats,
}

impl core::fmt::Debug for Connection {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Connection")
            .field("state", &self.state)
            .field("outstanding", &self.outstanding())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Connection {
    /// A new connection with `cfg` (checked by [`Config::validate`]); allocates everything it
    /// will use.
    pub fn new(cfg: Config) -> Result<Connection, ConfigError> {
        cfg.validate()?;
        let depth = usize::from(cfg.queue_depth);
        Ok(Connection {
            cfg,
            state: ConnState::AwaitIcReq,
            reader: PduReader::new(Role::Controller),
            tx: Framing::default(),
            host_r2t_limit: 1,
            admin: false,
            sq_flow_control_disabled: false,
            slots: (0..depth).map(|_| Slot::new()).collect(),
            free: (0..cfg.queue_depth).rev().collect(),
            actions: Bounded::new(depth + 1),
            sendq: Bounded::new(depth),
            icresp_pending: false,
            term: None,
            rx: RxData::Discard,
            stalled: None,
            stats: ConnStats::default(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The state.
    pub fn state(&self) -> ConnState {
        self.state
    }

    /// Negotiated digests (all off before ICReq).
    pub fn digests(&self) -> Digests {
        self.tx.digests
    }

    /// Framing of the PDUs this controller sends: negotiated digests and the host's HPDA.
    pub fn tx_framing(&self) -> Framing {
        self.tx
    }

    /// Counters.
    pub fn stats(&self) -> ConnStats {
        self.stats
    }

    /// Commands holding a slot.
    pub fn outstanding(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// The state of `slot` (`None` out of range).
    pub fn slot_state(&self, slot: SlotId) -> Option<SlotState> {
        self.slots.get(slot.index()).map(|s| s.state)
    }

    /// The length of the controller-to-host transfer of the command in `slot` (its SGL's
    /// length), once its buffer is there; `None` for other commands.
    pub fn to_host_len(&self, slot: SlotId) -> Option<u32> {
        let s = self.slots.get(slot.index())?;
        match s.xfer {
            Xfer::ToHost(n) if s.has_buffer && s.state != SlotState::Free => Some(n),
            _ => None,
        }
    }

    /// The command in `slot`, while it holds one.
    pub fn sqe(&self, slot: SlotId) -> Option<&Sqe> {
        self.slots
            .get(slot.index())
            .filter(|s| s.state != SlotState::Free)
            .map(|s| &s.sqe)
    }

    /// How the data of the command in `slot` moves.
    pub fn xfer(&self, slot: SlotId) -> Option<Xfer> {
        self.slots
            .get(slot.index())
            .filter(|s| s.state != SlotState::Free)
            .map(|s| s.xfer)
    }

    /// The core accepted the Connect of this queue: `qid` 0 is the admin queue (8 KiB of
    /// in-capsule data for every command), and whether the host disabled SQ flow control
    /// (Connect CATTR bit 2), which the SUCCESS optimisation requires.
    pub fn connected(&mut self, qid: u16, sq_flow_control_disabled: bool) {
        self.admin = qid == 0;
        self.sq_flow_control_disabled = sq_flow_control_disabled;
    }

    /// The next action, if any.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop()
    }

    /// Closes locally (an operator or the core ends the connection; the peer closed): nothing
    /// more is sent, [`Action::Close`] follows.
    pub fn close(&mut self) {
        if self.state != ConnState::Closed {
            self.state = ConnState::Closed;
            self.term = None;
            self.push_action(Action::Close);
        }
    }

    /// Feeds received bytes; returns how many were consumed. Fewer than given only while
    /// in-capsule data waits for a buffer ([`Action::NeedBuffer`]): give the rest again after
    /// [`Connection::buffer_ready`]. Once terminating or closed, everything is consumed and
    /// dropped.
    pub fn recv(&mut self, input: &[u8], bufs: &mut dyn DataBuffers) -> usize {
        let mut used = 0;
        loop {
            if matches!(self.state, ConnState::Terminating | ConnState::Closed) {
                return input.len();
            }
            if self.stalled.is_some() {
                return used;
            }
            let (n, ev) = self.reader.read(&input[used..]);
            used += n;
            match ev {
                ReadEvent::NeedMore => return used,
                ReadEvent::Header { pdu, data_len } => self.on_header(pdu, data_len),
                ReadEvent::Data(piece) => self.on_data(piece, bufs),
                ReadEvent::End { data_digest_ok } => self.on_end(data_digest_ok),
                ReadEvent::Fatal(f) => self.fatal(f),
                ReadEvent::Abort => {
                    tracing::warn!("nvme/tcp: termination request with an invalid length");
                    self.close();
                }
            }
        }
    }

    /// The buffer asked for by [`Action::NeedBuffer`] is attached to `slot`. Once the connection
    /// is terminating or closed the command is dropped instead (release the buffer).
    pub fn buffer_ready(&mut self, slot: SlotId) -> Result<(), UsageError> {
        let dead = matches!(self.state, ConnState::Terminating | ConnState::Closed);
        let s = self.slot_mut(slot)?;
        if s.state != SlotState::AwaitBuffer {
            return Err(UsageError::WrongState(s.state));
        }
        if dead {
            // Nothing more happens on this connection: the command is abandoned (release the
            // buffer).
            self.free_slot(slot);
            return Ok(());
        }
        s.has_buffer = true;
        match s.xfer {
            Xfer::InCapsule(_) => {
                s.state = SlotState::InCapsule;
                if self.stalled == Some(slot) {
                    self.stalled = None;
                }
            }
            Xfer::ToController(_) => {
                s.state = SlotState::ToController;
                self.fill_windows(slot);
            }
            Xfer::ToHost(_) | Xfer::None => {
                s.state = SlotState::Executing;
                self.push_action(Action::Execute { slot });
            }
        }
        Ok(())
    }

    /// The command in `slot` finished with `cqe`; `c2h_len` bytes of its buffer go to the host
    /// first (controller-to-host commands; capped to the buffer). Valid after
    /// [`Action::Execute`] or [`Action::Fail`], or instead of [`Connection::buffer_ready`] to
    /// fail a command before its data moves.
    pub fn complete(&mut self, slot: SlotId, cqe: Cqe, c2h_len: u32) -> Result<(), UsageError> {
        let state = self.slot_mut(slot)?.state;
        if matches!(self.state, ConnState::Terminating | ConnState::Closed) {
            // Abandoned: nothing more is sent; the runtime releases the buffer.
            self.free_slot(slot);
            return Ok(());
        }
        match state {
            SlotState::Executing => {}
            SlotState::AwaitBuffer if self.stalled == Some(slot) => {
                // In-capsule data is on its way: drop it, answer once it has passed.
                let s = &mut self.slots[slot.index()];
                s.state = SlotState::Discarding;
                s.cqe = Some(cqe);
                self.stalled = None;
                return Ok(());
            }
            SlotState::AwaitBuffer => {}
            other => return Err(UsageError::WrongState(other)),
        }
        let c2h_success = self.cfg.c2h_success && self.sq_flow_control_disabled;
        let s = &mut self.slots[slot.index()];
        let len = match s.xfer {
            Xfer::ToHost(n) if s.has_buffer => c2h_len.min(n),
            _ => 0,
        };
        s.c2h_len = len;
        s.c2h_sent = 0;
        s.success_flag = c2h_success
            && len > 0
            && len == s.xfer.len()
            && cqe.status == Status::SUCCESS
            && cqe.dw0 == 0
            && cqe.dw1 == 0;
        s.cqe = Some(cqe);
        s.state = SlotState::Responding;
        self.enqueue_send(slot);
        Ok(())
    }

    /// Writes the next PDU to send into `header` and says what follows it; `None` when there
    /// is nothing to send (or `header` is shorter than [`MAX_ENCODED_HEADER`]).
    pub fn poll_send(&mut self, header: &mut [u8], bufs: &dyn DataBuffers) -> Option<Transmit> {
        if header.len() < MAX_ENCODED_HEADER {
            // Every encoder below fits in it; refusing here means no PDU is lost half-built.
            tracing::error!(len = header.len(), "nvme/tcp: header buffer too small");
            return None;
        }
        if let Some(t) = self.term.take() {
            self.state = ConnState::Closed;
            self.push_action(Action::Close);
            let pdu = TermReq::new(t.fatal.fes, t.fatal.fei);
            let n = pdu
                .encode(PduType::C2hTermReq, &t.header[..t.header_len], header)
                .ok()?;
            return Some(Transmit::header(n));
        }
        if self.state != ConnState::Live {
            return None;
        }
        if self.icresp_pending {
            self.icresp_pending = false;
            let r = IcResp {
                pfv: PFV_1_0,
                cpda: self.cfg.cpda,
                digests: self.tx.digests,
                maxh2cdata: self.cfg.maxh2cdata,
            };
            return r.encode(header).ok().map(Transmit::header);
        }
        while let Some(&idx) = self.sendq.front() {
            let slot = SlotId(idx);
            if let Some(t) = self.send_for(slot, header, bufs) {
                if t.release.is_some() {
                    // The slot is free (and may be taken again): leave the queue now.
                    self.sendq.pop();
                }
                return Some(t);
            }
            // Nothing (more) to send for this slot.
            self.sendq.pop();
            self.slots[slot.index()].in_sendq = false;
        }
        None
    }

    // ------------------------------------------------------------------------ receiving

    fn on_header(&mut self, pdu: Pdu, data_len: u32) {
        self.rx = RxData::Discard;
        match pdu {
            Pdu::IcReq(r) => self.on_icreq(r),
            Pdu::H2cTermReq(t) => {
                tracing::warn!(
                    fes = t.fes,
                    fei = t.fei,
                    status = t.status().map_or("unknown", Fes::name),
                    "nvme/tcp: host terminated the connection"
                );
                self.close();
            }
            Pdu::CapsuleCmd(c) => self.on_capsule(c.sqe, data_len),
            Pdu::H2cData(d) => self.on_h2c_data(d),
            // The reader lets only host-to-controller types through.
            Pdu::IcResp(_)
            | Pdu::C2hTermReq(_)
            | Pdu::CapsuleResp(_)
            | Pdu::C2hData(_)
            | Pdu::R2t(_) => self.fatal(Fatal::field(field::TYPE)),
        }
    }

    fn on_icreq(&mut self, r: IcReq) {
        if r.pfv != PFV_1_0 {
            tracing::warn!(pfv = r.pfv, "nvme/tcp: ICReq with an unsupported PFV");
            return self.fatal(Fatal::field(field::ICREQ_PFV));
        }
        if r.hpda > MAX_PDA {
            tracing::warn!(hpda = r.hpda, "nvme/tcp: ICReq HPDA out of range");
            return self.fatal(Fatal::field(field::ICREQ_HPDA));
        }
        self.tx = Framing {
            digests: r.digests,
            pda: r.hpda,
        };
        self.reader.set_framing(Framing {
            digests: r.digests,
            pda: self.cfg.cpda,
        });
        self.host_r2t_limit = r.maxr2t.saturating_add(1);
        self.state = ConnState::Live;
        self.icresp_pending = true;
        tracing::debug!(
            hdgst = r.digests.header,
            ddgst = r.digests.data,
            hpda = r.hpda,
            maxr2t = r.maxr2t,
            "nvme/tcp: connection initialized"
        );
    }

    fn on_capsule(&mut self, sqe: Sqe, icd_len: u32) {
        self.stats.capsules += 1;
        let xfer = match classify(&sqe, icd_len, &self.cfg, self.admin) {
            Ok(x) => x,
            Err(f) => {
                tracing::warn!(cid = sqe.cid(), opc = sqe.opcode(), error = %f,
                               "nvme/tcp: malformed command capsule");
                return self.fatal(f);
            }
        };
        let Some(idx) = self.free.pop() else {
            tracing::warn!(
                depth = self.cfg.queue_depth,
                "nvme/tcp: host exceeded the queue depth"
            );
            return self.fatal(Fatal::new(Fes::PduSequenceError, 0));
        };
        let slot = SlotId(idx);
        self.slots[slot.index()].start(sqe, xfer);
        match xfer {
            Xfer::None => {
                self.slots[slot.index()].state = SlotState::Executing;
                self.push_action(Action::Execute { slot });
            }
            Xfer::InCapsule(len) => {
                self.rx = RxData::InCapsule(slot);
                self.stalled = Some(slot);
                self.push_action(Action::NeedBuffer { slot, len });
            }
            Xfer::ToController(len) | Xfer::ToHost(len) => {
                self.push_action(Action::NeedBuffer { slot, len });
            }
        }
    }

    fn on_h2c_data(&mut self, d: H2cData) {
        self.stats.h2c_pdus += 1;
        let maxh2cdata = self.cfg.maxh2cdata;
        let Some(s) = self.slots.get_mut(usize::from(d.ttag)) else {
            return self.fatal(Fatal::field(field::H2C_TTAG));
        };
        if s.state == SlotState::Free {
            return self.fatal(Fatal::field(field::H2C_TTAG));
        }
        if s.state != SlotState::ToController || !s.windows.iter().any(|w| w.sent) {
            // Data for a command that asked for none (now).
            return self.fatal(Fatal::new(Fes::PduSequenceError, 0));
        }
        if d.cccid != s.sqe.cid() {
            return self.fatal(Fatal::field(field::H2C_CCCID));
        }
        if d.datal == 0 {
            return self.fatal(Fatal::field(field::H2C_DATAL));
        }
        if d.datal > maxh2cdata {
            return self.fatal(Fatal::new(Fes::DataTransferLimitExceeded, 0));
        }
        let Some(w) = s.windows.iter().position(|w| w.sent && w.next == d.datao) else {
            return self.fatal(Fatal::new(Fes::DataTransferOutOfRange, 0));
        };
        let win = s.windows[w];
        let end = u64::from(d.datao) + u64::from(d.datal);
        if end > u64::from(win.end) {
            return self.fatal(Fatal::new(Fes::DataTransferOutOfRange, 0));
        }
        if d.last != (end == u64::from(win.end)) {
            return self.fatal(Fatal::field(field::FLAGS));
        }
        self.rx = RxData::H2c {
            slot: SlotId(d.ttag),
            window: w,
            offset: d.datao,
            len: d.datal,
        };
    }

    fn on_data(&mut self, piece: &[u8], bufs: &mut dyn DataBuffers) {
        match self.rx {
            RxData::Discard => {}
            RxData::InCapsule(slot) => {
                let s = &mut self.slots[slot.index()];
                if s.state == SlotState::InCapsule && s.has_buffer {
                    bufs.write(slot, s.received, piece);
                }
                s.received += piece.len() as u32;
            }
            RxData::H2c {
                slot,
                ref mut offset,
                ..
            } => {
                bufs.write(slot, *offset, piece);
                *offset += piece.len() as u32;
            }
        }
    }

    fn on_end(&mut self, digest_ok: bool) {
        let rx = core::mem::replace(&mut self.rx, RxData::Discard);
        if !digest_ok {
            self.stats.data_digest_errors += 1;
            tracing::warn!("nvme/tcp: data digest error");
        }
        match rx {
            RxData::Discard => {}
            RxData::InCapsule(slot) => {
                let s = &mut self.slots[slot.index()];
                s.digest_error |= !digest_ok;
                match s.state {
                    SlotState::InCapsule => self.data_complete(slot),
                    SlotState::Discarding => {
                        s.state = SlotState::Responding;
                        self.enqueue_send(slot);
                    }
                    _ => {}
                }
            }
            RxData::H2c {
                slot, window, len, ..
            } => {
                let s = &mut self.slots[slot.index()];
                s.digest_error |= !digest_ok;
                s.received += len;
                let w = &mut s.windows[window];
                w.next += len;
                if w.next == w.end {
                    s.windows.remove(window);
                }
                if s.received == s.xfer.len() {
                    self.data_complete(slot);
                } else {
                    self.fill_windows(slot);
                }
            }
        }
    }

    /// All host data of `slot` is in: execute, or fail after a digest error.
    fn data_complete(&mut self, slot: SlotId) {
        let s = &mut self.slots[slot.index()];
        s.state = SlotState::Executing;
        if s.digest_error {
            self.push_action(Action::Fail {
                slot,
                status: Status::TRANSIENT_TRANSPORT_ERROR,
            });
        } else {
            self.push_action(Action::Execute { slot });
        }
    }

    /// Opens R2T windows for `slot` up to the outstanding limit, and queues them.
    fn fill_windows(&mut self, slot: SlotId) {
        let limit = u32::from(self.cfg.max_r2t_per_command).min(self.host_r2t_limit) as usize;
        let r2t_size = self.cfg.r2t_size;
        let s = &mut self.slots[slot.index()];
        if s.digest_error {
            // Ask for nothing more; what is outstanding finishes, then the command fails.
            if s.windows.is_empty() {
                self.data_complete(slot);
            }
            return;
        }
        let total = s.xfer.len();
        let mut added = false;
        while s.windows.len() < limit && s.requested < total {
            let len = (total - s.requested).min(r2t_size);
            let w = Window {
                start: s.requested,
                next: s.requested,
                end: s.requested + len,
                sent: false,
            };
            if s.windows.try_push(w).is_err() {
                break;
            }
            s.requested += len;
            added = true;
        }
        if added {
            self.enqueue_send(slot);
        }
    }

    // -------------------------------------------------------------------------- sending

    /// The next PDU of `slot`, if it has one.
    fn send_for(
        &mut self,
        slot: SlotId,
        header: &mut [u8],
        bufs: &dyn DataBuffers,
    ) -> Option<Transmit> {
        let tx = self.tx;
        let c2h_chunk = self.cfg.c2h_chunk;
        let s = &mut self.slots[slot.index()];
        match s.state {
            SlotState::ToController => {
                let w = s.windows.iter_mut().find(|w| !w.sent)?;
                w.sent = true;
                let r = R2t {
                    cccid: s.sqe.cid(),
                    ttag: slot.0,
                    r2to: w.start,
                    r2tl: w.end - w.start,
                };
                let n = r.encode(&tx, header).ok()?;
                self.stats.r2ts += 1;
                Some(Transmit::header(n))
            }
            SlotState::Responding => {
                let cqe = s.cqe?;
                if s.c2h_sent < s.c2h_len {
                    let offset = s.c2h_sent;
                    let len = (s.c2h_len - offset).min(c2h_chunk);
                    let last = offset + len == s.c2h_len;
                    let success = last && s.success_flag;
                    let d = C2hData {
                        cccid: s.sqe.cid(),
                        datao: offset,
                        datal: len,
                        last,
                        success,
                    };
                    let n = d.encode(&tx, header).ok()?;
                    s.c2h_sent += len;
                    let ddgst = tx.digests.data.then(|| {
                        let mut dg = DataDigest::new();
                        bufs.read(slot, offset, len, &mut |p| dg.update(p));
                        dg.value().to_le_bytes()
                    });
                    self.stats.c2h_pdus += 1;
                    let release = if success {
                        self.stats.responses += 1;
                        self.free_slot(slot);
                        Some(slot)
                    } else {
                        None
                    };
                    return Some(Transmit {
                        header_len: n,
                        data: Some(DataRef { slot, offset, len }),
                        ddgst,
                        release,
                    });
                }
                let n = CapsuleResp { cqe }.encode(&tx, header).ok()?;
                self.stats.responses += 1;
                self.free_slot(slot);
                Some(Transmit {
                    header_len: n,
                    data: None,
                    ddgst: None,
                    release: Some(slot),
                })
            }
            _ => None,
        }
    }

    // ---------------------------------------------------------------------- bookkeeping

    fn fatal(&mut self, f: Fatal) {
        if matches!(self.state, ConnState::Terminating | ConnState::Closed) {
            return;
        }
        tracing::warn!(error = %f, "nvme/tcp: fatal protocol error, terminating the connection");
        let src = self.reader.header_bytes();
        let mut header = [0u8; TERM_MAX_ERROR_DATA];
        header[..src.len()].copy_from_slice(src);
        self.term = Some(TermPending {
            fatal: f,
            header,
            header_len: src.len(),
        });
        self.state = ConnState::Terminating;
        self.stalled = None;
    }

    fn slot_mut(&mut self, slot: SlotId) -> Result<&mut Slot, UsageError> {
        match self.slots.get_mut(slot.index()) {
            Some(s) if s.state != SlotState::Free => Ok(s),
            _ => Err(UsageError::NotOutstanding),
        }
    }

    fn free_slot(&mut self, slot: SlotId) {
        let s = &mut self.slots[slot.index()];
        if s.state != SlotState::Free {
            s.state = SlotState::Free;
            s.has_buffer = false;
            s.in_sendq = false;
            self.free.push(slot.0);
        }
    }

    fn enqueue_send(&mut self, slot: SlotId) {
        let s = &mut self.slots[slot.index()];
        if !s.in_sendq {
            s.in_sendq = true;
            if self.sendq.push(slot.0).is_err() {
                // A slot is queued at most once and the queue holds every slot.
                tracing::error!("nvme/tcp: send queue overflow");
                self.close();
            }
        }
    }

    fn push_action(&mut self, a: Action) {
        if a != Action::Close && matches!(self.state, ConnState::Terminating | ConnState::Closed) {
            // A dead connection executes nothing more.
            return;
        }
        if self.actions.push(a).is_err() {
            // Each slot has at most one action waiting, plus Close.
            tracing::error!("nvme/tcp: action queue overflow");
            self.state = ConnState::Closed;
        }
    }
}

impl Transmit {
    fn header(n: usize) -> Transmit {
        Transmit {
            header_len: n,
            data: None,
            ddgst: None,
            release: None,
        }
    }
}
