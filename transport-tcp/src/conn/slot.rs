//! Command slots: one per command the host may have outstanding, preallocated with the
//! connection, and how a capsule's SGL decides where its data comes from.

use arrayvec::ArrayVec;
use target_core::nvme::spec::admin_opc;
use target_core::nvme::{Cqe, Direction, Sqe};

use super::config::{Config, MAX_R2T_PER_COMMAND};
use crate::pdu::{ADMIN_IN_CAPSULE_DATA, Fatal, Fes, field};

/// Index of a command slot; also the TTAG of the command's R2Ts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotId(pub u16);

impl SlotId {
    /// The slot index.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// How a command's data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Xfer {
    /// No data moves (none described, or a transfer the transport does not move: a keyed or
    /// unknown SGL, or a transfer data block above `max_io_size`; the core answers those).
    None,
    /// In-capsule data of this length followed the SQE.
    InCapsule(u32),
    /// Host-to-controller data pulled with R2Ts.
    ToController(u32),
    /// Controller-to-host data sent as C2HData.
    ToHost(u32),
}

impl Xfer {
    /// Bytes of data (the buffer size the command needs).
    pub fn len(self) -> u32 {
        match self {
            Xfer::None => 0,
            Xfer::InCapsule(n) | Xfer::ToController(n) | Xfer::ToHost(n) => n,
        }
    }

    /// `true` without data.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// SGL descriptor identifiers the transport moves data for.
const SGL_ID_IN_CAPSULE: u8 = 0x01;
const SGL_ID_TRANSPORT: u8 = 0x5A;

/// Decides how the data of `sqe` moves, given `icd_len` bytes of in-capsule data in its PDU.
///
/// Errors are fatal (the capsule is malformed for NVMe/TCP):
/// - in-capsule descriptor with a non-zero offset: Unsupported Parameter at SGL1 address (the
///   transport has no ICDOFF);
/// - in-capsule descriptor length different from the PDU's data: Invalid Header Field at PLEN;
/// - in-capsule data above the limit (8 KiB on the admin queue and for fabrics commands,
///   `in_capsule_data_size` on I/O queues): Data Transfer Limit Exceeded;
/// - in-capsule data with any other descriptor: Unsupported Parameter at the SGL identifier.
pub(crate) fn classify(sqe: &Sqe, icd_len: u32, cfg: &Config, admin: bool) -> Result<Xfer, Fatal> {
    let id = sqe.u8_at(39);
    let len = sqe.u32_at(32);
    match id {
        SGL_ID_IN_CAPSULE => {
            if sqe.u64_at(24) != 0 {
                return Err(Fatal::new(
                    Fes::UnsupportedParameter,
                    field::CMD_SGL1_ADDRESS,
                ));
            }
            if len != icd_len {
                return Err(Fatal::field(field::PLEN));
            }
            let limit = if admin || sqe.opcode() == admin_opc::FABRICS {
                ADMIN_IN_CAPSULE_DATA.max(cfg.in_capsule_data_size)
            } else {
                cfg.in_capsule_data_size
            };
            if icd_len > limit {
                return Err(Fatal::new(Fes::DataTransferLimitExceeded, 0));
            }
            Ok(if len == 0 {
                Xfer::None
            } else {
                Xfer::InCapsule(len)
            })
        }
        _ if icd_len != 0 => Err(Fatal::new(Fes::UnsupportedParameter, field::CMD_SGL1_ID)),
        SGL_ID_TRANSPORT if len > 0 && len <= cfg.max_io_size => Ok(match sqe.direction() {
            Direction::HostToController => Xfer::ToController(len),
            Direction::ControllerToHost => Xfer::ToHost(len),
            Direction::None | Direction::Bidirectional => Xfer::None,
        }),
        _ => Ok(Xfer::None),
    }
}

/// Where a command is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SlotState {
    /// Not in use.
    Free,
    /// `NeedBuffer` was asked; waiting for `buffer_ready` (or an early completion).
    AwaitBuffer,
    /// In-capsule data is arriving into the buffer.
    InCapsule,
    /// Host data is being pulled with R2Ts.
    ToController,
    /// The data was given up (early completion while in-capsule data was still arriving).
    Discarding,
    /// `Execute` or `Fail` was asked; waiting for `complete`.
    Executing,
    /// Completed: C2HData PDUs (if any) then the response go out.
    Responding,
}

/// One outstanding (or about to be sent) R2T.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Window {
    /// R2TO.
    pub start: u32,
    /// Offset the next H2CData PDU of this R2T must carry.
    pub next: u32,
    /// R2TO + R2TL.
    pub end: u32,
    /// The R2T PDU was handed out.
    pub sent: bool,
}

/// A command slot.
#[derive(Clone, Debug)]
pub(crate) struct Slot {
    pub state: SlotState,
    pub sqe: Sqe,
    pub xfer: Xfer,
    pub has_buffer: bool,
    /// Bytes of host data asked for by R2Ts so far.
    pub requested: u32,
    /// Bytes of host data received (in-capsule or H2CData).
    pub received: u32,
    pub windows: ArrayVec<Window, { MAX_R2T_PER_COMMAND as usize }>,
    /// A data digest failed: the command completes with Transient Transport Error.
    pub digest_error: bool,
    pub cqe: Option<Cqe>,
    pub c2h_len: u32,
    pub c2h_sent: u32,
    pub success_flag: bool,
    pub in_sendq: bool,
}

impl Slot {
    pub fn new() -> Slot {
        Slot {
            state: SlotState::Free,
            sqe: Sqe::default(),
            xfer: Xfer::None,
            has_buffer: false,
            requested: 0,
            received: 0,
            windows: ArrayVec::new(),
            digest_error: false,
            cqe: None,
            c2h_len: 0,
            c2h_sent: 0,
            success_flag: false,
            in_sendq: false,
        }
    }

    /// Takes the slot for a new command.
    pub fn start(&mut self, sqe: Sqe, xfer: Xfer) {
        *self = Slot::new();
        self.sqe = sqe;
        self.xfer = xfer;
        self.state = SlotState::AwaitBuffer;
    }
}
