//! NVMe reservations (sans-I/O): Reservation Register (0Dh), Report (0Eh), Acquire (11h) and
//! Release (15h) decoded and run against the volume's shared
//! [`Reservation`](crate::reservation::Reservation); the Reservation Status data structures,
//! RESCAP, the Reservation Notification Mask (82h) and Reservation Persistence (83h)
//! features, and the command classes of the conflict check.
//!
//! A command is handled in two steps, like the other I/O commands: [`decode`] checks CDW10/11
//! and the SGL length and says how many bytes of host data to fetch; then [`execute`] (the
//! three changing commands, on the state's owner) or [`report`] runs with those bytes.
//!
//! Behaviour chosen where implementations differ (SPDK and nvmet as references):
//! - IEKEY in Acquire and Release: Invalid Field (NVMe 1.3 and later; RESCAP bit 7 says so).
//! - Register with a new key of 0 (Register, Replace): Invalid Field (SPDK).
//! - Release of the holder's reservation with another type: Invalid Field (SPDK; nvmet
//!   answers Reservation Conflict).
//! - Preempt with PRKEY 0 and no All Registrants reservation: Invalid Field.
//! - Reservation Conflict carries DNR (nvmet): retrying cannot succeed.
//! - Report with EDS 0: only when every registrant's identifier fits in 64 bits (never on
//!   fabrics, whose Host Identifiers are 128-bit): otherwise Host Identifier Inconsistent
//!   Format, as nvmet.
//! - A SCSI registrant appears in the report with CNTLID FFFFh and its 16-byte initiator
//!   port identifier as HOSTID.

use crate::reservation::{
    CommandClass, Effects, HostId, Initiator, KeyCheck, NoticeKind, PrError, PtplChange,
    RegisterAction, Reservation, ResvType,
};

use super::spec::{Status, io_opc, le};
use super::sqe::Sqe;

/// Reservation I/O command opcodes.
pub mod opc {
    /// Reservation Register.
    pub const REGISTER: u8 = 0x0D;
    /// Reservation Report.
    pub const REPORT: u8 = 0x0E;
    /// Reservation Acquire.
    pub const ACQUIRE: u8 = 0x11;
    /// Reservation Release.
    pub const RELEASE: u8 = 0x15;
}

/// Reservation Conflict (SCT 0, SC 83h), with DNR.
pub const RESERVATION_CONFLICT: Status = Status::generic(0x83).dnr();

/// Identify Controller ONCS bit 5: reservations supported.
pub const ONCS_RESERVATIONS: u16 = 1 << 5;

/// Identify Controller CTRATT bit 0: 128-bit Host Identifiers (Linux then asks for the
/// extended report).
pub const CTRATT_HOST_ID_128: u32 = 1 << 0;

/// Feature identifier: Reservation Notification Mask.
pub const FID_RESV_NOTIFICATION_MASK: u8 = 0x82;
/// Feature identifier: Reservation Persistence.
pub const FID_RESV_PERSISTENCE: u8 = 0x83;

/// Reservation Status data structure header length.
pub const REPORT_HEADER_LEN: usize = 24;
/// Reservation Status Extended data structure header length.
pub const REPORT_EXT_HEADER_LEN: usize = 64;
/// Registered Controller data structure length.
pub const REPORT_ENTRY_LEN: usize = 24;
/// Registered Controller Extended data structure length.
pub const REPORT_EXT_ENTRY_LEN: usize = 64;

/// CNTLID reported for registrants (dynamic controller model: the registration belongs to
/// the host, not to one controller).
pub const REPORT_CNTLID: u16 = 0xFFFF;

/// RESCAP (Identify Namespace byte 31): bit 0 persist through power loss (only with a
/// `ptpl_file`), bits 1–6 the six types, bit 7 IEKEY semantics of NVMe 1.3 and later.
pub const fn rescap(ptpl_capable: bool) -> u8 {
    0xFE | ptpl_capable as u8
}

/// Reservation Register Action (RREGA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rrega {
    /// 000b: register a key.
    Register,
    /// 001b: unregister.
    Unregister,
    /// 010b: replace the key.
    Replace,
}

/// Reservation Acquire Action (RACQA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Racqa {
    /// 000b: acquire.
    Acquire,
    /// 001b: preempt.
    Preempt,
    /// 010b: preempt and abort.
    PreemptAndAbort,
}

/// Reservation Release Action (RRELA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rrela {
    /// 000b: release, of this type.
    Release(ResvType),
    /// 001b: clear.
    Clear,
}

/// A decoded reservation command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResvCommand {
    /// Reservation Register; 16 bytes of data (CRKEY, NRKEY).
    Register {
        /// The action.
        action: Rrega,
        /// Ignore Existing Key.
        iekey: bool,
        /// Change Persist Through Power Loss State (CPTPL).
        ptpl: PtplChange,
    },
    /// Reservation Acquire; 16 bytes of data (CRKEY, PRKEY).
    Acquire {
        /// The action.
        action: Racqa,
        /// The type to acquire or to preempt with.
        rtype: ResvType,
    },
    /// Reservation Release; 8 bytes of data (CRKEY).
    Release {
        /// The action.
        action: Rrela,
    },
    /// Reservation Report: return `len` bytes.
    Report {
        /// Bytes to return: (NUMD + 1) · 4.
        len: u32,
        /// Extended data structure (128-bit Host Identifiers).
        eds: bool,
    },
}

impl ResvCommand {
    /// Bytes of host data to fetch before [`execute`] (0 for Report).
    pub fn data_out_len(&self) -> u32 {
        match self {
            ResvCommand::Register { .. } | ResvCommand::Acquire { .. } => 16,
            ResvCommand::Release { .. } => 8,
            ResvCommand::Report { .. } => 0,
        }
    }
}

/// Decodes CDW10/11 of a reservation command. `sgl_len` is the SGL1 length (or its error):
/// it must cover the command's data.
pub fn decode(sqe: &Sqe, sgl_len: Result<u32, Status>) -> Result<ResvCommand, Status> {
    let cdw10 = sqe.cdw10();
    let iekey = cdw10 & 1 << 3 != 0;
    let action = cdw10 & 7;
    let rtype = || ResvType::from_nvme((cdw10 >> 8) as u8).ok_or(Status::INVALID_FIELD);
    let cmd = match sqe.opcode() {
        opc::REGISTER => ResvCommand::Register {
            action: match action {
                0 => Rrega::Register,
                1 => Rrega::Unregister,
                2 => Rrega::Replace,
                _ => return Err(Status::INVALID_FIELD),
            },
            iekey,
            ptpl: match cdw10 >> 30 {
                0 => PtplChange::Keep,
                2 => PtplChange::Set(false),
                3 => PtplChange::Set(true),
                _ => return Err(Status::INVALID_FIELD),
            },
        },
        opc::ACQUIRE => {
            if iekey {
                return Err(Status::INVALID_FIELD);
            }
            ResvCommand::Acquire {
                action: match action {
                    0 => Racqa::Acquire,
                    1 => Racqa::Preempt,
                    2 => Racqa::PreemptAndAbort,
                    _ => return Err(Status::INVALID_FIELD),
                },
                rtype: rtype()?,
            }
        }
        opc::RELEASE => {
            if iekey {
                return Err(Status::INVALID_FIELD);
            }
            ResvCommand::Release {
                action: match action {
                    0 => Rrela::Release(rtype()?),
                    1 => Rrela::Clear,
                    _ => return Err(Status::INVALID_FIELD),
                },
            }
        }
        opc::REPORT => ResvCommand::Report {
            len: cdw10.saturating_add(1).saturating_mul(4),
            eds: sqe.cdw11() & 1 != 0,
        },
        _ => return Err(Status::INVALID_OPCODE),
    };
    let need = match cmd {
        ResvCommand::Report { len, .. } => len,
        c => c.data_out_len(),
    };
    if sgl_len? < need {
        return Err(Status::DATA_SGL_LENGTH_INVALID);
    }
    Ok(cmd)
}

/// The status for a failed operation.
pub fn status_of(e: PrError) -> Status {
    match e {
        PrError::Conflict => RESERVATION_CONFLICT,
        PrError::InvalidReleaseType
        | PrError::ZeroPreemptKey
        | PrError::ZeroNewKey
        | PrError::PtplNotCapable => Status::INVALID_FIELD,
        PrError::NoResources => Status::INTERNAL_ERROR,
    }
}

/// Runs Register, Acquire or Release for `host` with the host's `data` (at least
/// [`ResvCommand::data_out_len`] bytes). Report goes to [`report`] instead.
pub fn execute(
    cmd: &ResvCommand,
    res: &mut Reservation,
    host: HostId,
    data: &[u8],
) -> Result<Effects, Status> {
    let need = cmd.data_out_len() as usize;
    let data = data.get(..need).ok_or(Status::DATA_SGL_LENGTH_INVALID)?;
    let crkey = le::u64_at(data, 0);
    let key2 = le::u64_at(data, 8);
    let who = Initiator::Nvme(host);
    let r = match *cmd {
        ResvCommand::Register {
            action,
            iekey,
            ptpl,
        } => {
            let current = if iekey {
                KeyCheck::Ignore
            } else {
                KeyCheck::Match(crkey)
            };
            let action = match action {
                Rrega::Register => RegisterAction::Register { new_key: key2 },
                Rrega::Unregister => RegisterAction::Unregister { current },
                Rrega::Replace => RegisterAction::Replace {
                    current,
                    new_key: key2,
                },
            };
            res.register(who, action, ptpl)
        }
        ResvCommand::Acquire { action, rtype } => match action {
            Racqa::Acquire => res.reserve(who, crkey, rtype),
            Racqa::Preempt => res.preempt(who, crkey, key2, rtype, false),
            Racqa::PreemptAndAbort => res.preempt(who, crkey, key2, rtype, true),
        },
        ResvCommand::Release { action } => match action {
            Rrela::Release(rtype) => res.release(who, crkey, rtype),
            Rrela::Clear => res.clear(who, crkey),
        },
        ResvCommand::Report { .. } => return Err(Status::INVALID_OPCODE),
    };
    r.map_err(|e| {
        tracing::debug!(?host, ?cmd, "reservation command refused: {e}");
        status_of(e)
    })
}

/// The registrant identifier as the report carries it.
fn report_host_id(who: Initiator) -> [u8; 16] {
    match who {
        Initiator::Nvme(h) => h.0,
        Initiator::Scsi(n) => n.initiator.id,
    }
}

/// Reservation Report: writes the Reservation Status (Extended, with `eds`) data structure
/// into `out` (truncated to its length; REGCTL always counts every registrant) and returns
/// the bytes written.
pub fn report(res: &Reservation, eds: bool, out: &mut [u8]) -> Result<usize, Status> {
    let regs = res.registrants();
    if !eds
        && regs
            .iter()
            .any(|r| report_host_id(r.who)[8..].iter().any(|&b| b != 0))
    {
        return Err(Status::HOST_ID_INCONSISTENT);
    }
    let (hdr, entry) = if eds {
        (REPORT_EXT_HEADER_LEN, REPORT_EXT_ENTRY_LEN)
    } else {
        (REPORT_HEADER_LEN, REPORT_ENTRY_LEN)
    };
    let mut h = [0u8; REPORT_EXT_HEADER_LEN];
    le::put_u32(&mut h, 0, res.generation());
    h[4] = res.reserved().map_or(0, |r| r.rtype.nvme());
    le::put_u16(&mut h, 5, u16::try_from(regs.len()).unwrap_or(u16::MAX));
    h[9] = u8::from(res.ptpl());
    let mut w = Out { out, pos: 0 };
    w.put(&h[..hdr]);
    for r in regs {
        let mut e = [0u8; REPORT_EXT_ENTRY_LEN];
        le::put_u16(&mut e, 0, REPORT_CNTLID);
        e[2] = u8::from(res.is_holder(r.who));
        let id = report_host_id(r.who);
        if eds {
            le::put_u64(&mut e, 8, r.key);
            e[16..32].copy_from_slice(&id);
        } else {
            e[8..16].copy_from_slice(&id[..8]);
            le::put_u64(&mut e, 16, r.key);
        }
        w.put(&e[..entry]);
    }
    Ok(w.pos)
}

struct Out<'a> {
    out: &'a mut [u8],
    pos: usize,
}

impl Out<'_> {
    fn put(&mut self, b: &[u8]) {
        let room = self.out.len().saturating_sub(self.pos);
        let n = b.len().min(room);
        if let (Some(d), Some(s)) = (self.out.get_mut(self.pos..self.pos + n), b.get(..n)) {
            d.copy_from_slice(s);
        }
        self.pos += n;
    }
}

/// The Reservation Notification Mask of one namespace on one controller (feature 82h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NotifyMask(u32);

impl NotifyMask {
    /// Bit 1: mask Registration Preempted.
    pub const REGPRE: u32 = 1 << 1;
    /// Bit 2: mask Reservation Released.
    pub const RESREL: u32 = 1 << 2;
    /// Bit 3: mask Reservation Preempted.
    pub const RESPRE: u32 = 1 << 3;

    /// Set Features CDW11; any other bit set is Invalid Field (nvmet).
    pub fn from_cdw11(cdw11: u32) -> Result<NotifyMask, Status> {
        if cdw11 & !(Self::REGPRE | Self::RESREL | Self::RESPRE) != 0 {
            return Err(Status::INVALID_FIELD);
        }
        Ok(NotifyMask(cdw11))
    }

    /// Get Features completion DW0.
    pub fn dw0(self) -> u32 {
        self.0
    }

    /// Is a notice of this kind suppressed?
    pub fn masks(self, kind: NoticeKind) -> bool {
        let bit = match kind {
            NoticeKind::RegistrationPreempted => Self::REGPRE,
            NoticeKind::ReservationReleased => Self::RESREL,
            NoticeKind::ReservationPreempted => Self::RESPRE,
        };
        self.0 & bit != 0
    }
}

/// Set Features Reservation Persistence (83h): CDW11 bit 0 PTPL. Apply it with
/// [`Reservation::set_ptpl`] (Invalid Field via [`status_of`] without a `ptpl_file`).
pub fn persistence_from_cdw11(cdw11: u32) -> bool {
    cdw11 & 1 != 0
}

/// Get Features Reservation Persistence completion DW0.
pub fn persistence_dw0(res: &Reservation) -> u32 {
    u32::from(res.ptpl())
}

/// The conflict-check class of an I/O command (NVMe base spec, "Command Behavior in the
/// Presence of a Reservation": read group Compare, Read, Verify; write group Dataset
/// Management, Flush, Write, Write Uncorrectable, Write Zeroes, Copy).
pub fn command_class(opcode: u8) -> CommandClass {
    const VERIFY: u8 = 0x0C;
    const COPY: u8 = 0x19;
    match opcode {
        io_opc::READ | io_opc::COMPARE | VERIFY => CommandClass::Read,
        io_opc::WRITE
        | io_opc::WRITE_UNCORRECTABLE
        | io_opc::WRITE_ZEROES
        | io_opc::DATASET_MANAGEMENT
        | io_opc::FLUSH
        | COPY => CommandClass::Write,
        opc::REGISTER | opc::ACQUIRE | opc::RELEASE => CommandClass::Reservation,
        _ => CommandClass::Query,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::{InitiatorPort, Nexus};

    fn sqe(opcode: u8, cdw10: u32, cdw11: u32) -> Sqe {
        let mut s = Sqe::new(opcode, 7);
        s.set_nsid(1).set_cdw(10, cdw10).set_cdw(11, cdw11);
        s
    }

    fn keys(a: u64, b: u64) -> [u8; 16] {
        let mut d = [0u8; 16];
        d[..8].copy_from_slice(&a.to_le_bytes());
        d[8..].copy_from_slice(&b.to_le_bytes());
        d
    }

    const A: HostId = HostId([0xA1; 16]);
    const B: HostId = HostId([0xB2; 16]);

    fn run(res: &mut Reservation, host: HostId, s: &Sqe, data: &[u8]) -> Result<Effects, Status> {
        let cmd = decode(s, Ok(data.len() as u32))?;
        execute(&cmd, res, host, data)
    }

    #[test]
    fn status_and_capability_values() {
        assert_eq!(RESERVATION_CONFLICT.linux(), 0x4083);
        assert_eq!(rescap(true), 0xFF);
        assert_eq!(rescap(false), 0xFE);
        assert_eq!(ONCS_RESERVATIONS, 0x20);
    }

    #[test]
    fn decode_fields() {
        // Register: RREGA 2, IEKEY, CPTPL 11b.
        let c = decode(&sqe(opc::REGISTER, 2 | 1 << 3 | 3 << 30, 0), Ok(16)).unwrap();
        assert_eq!(
            c,
            ResvCommand::Register {
                action: Rrega::Replace,
                iekey: true,
                ptpl: PtplChange::Set(true)
            }
        );
        assert_eq!(c.data_out_len(), 16);
        // Acquire: RACQA 2, RTYPE 6.
        assert_eq!(
            decode(&sqe(opc::ACQUIRE, 2 | 6 << 8, 0), Ok(16)),
            Ok(ResvCommand::Acquire {
                action: Racqa::PreemptAndAbort,
                rtype: ResvType::ExclusiveAccessAllRegistrants
            })
        );
        // Release: clear ignores RTYPE; release needs a valid one.
        assert_eq!(
            decode(&sqe(opc::RELEASE, 1 | 0xFF << 8, 0), Ok(8)),
            Ok(ResvCommand::Release {
                action: Rrela::Clear
            })
        );
        // Report: NUMD 0's based dwords, EDS.
        assert_eq!(
            decode(&sqe(opc::REPORT, 1023, 1), Ok(4096)),
            Ok(ResvCommand::Report {
                len: 4096,
                eds: true
            })
        );
    }

    #[test]
    fn decode_refusals() {
        let bad = [
            sqe(opc::REGISTER, 3, 0),              // RREGA reserved
            sqe(opc::REGISTER, 1 << 30, 0),        // CPTPL 01b reserved
            sqe(opc::ACQUIRE, 1 << 8 | 1 << 3, 0), // IEKEY
            sqe(opc::ACQUIRE, 3 | 1 << 8, 0),      // RACQA reserved
            sqe(opc::ACQUIRE, 0, 0),               // RTYPE 0
            sqe(opc::ACQUIRE, 7 << 8, 0),          // RTYPE 7
            sqe(opc::RELEASE, 1 << 8 | 1 << 3, 0), // IEKEY
            sqe(opc::RELEASE, 2 | 1 << 8, 0),      // RRELA reserved
            sqe(opc::RELEASE, 9 << 8, 0),          // release with RTYPE 9
        ];
        for s in &bad {
            assert_eq!(decode(s, Ok(64)), Err(Status::INVALID_FIELD), "{s:?}");
        }
        assert_eq!(
            decode(&sqe(opc::REGISTER, 0, 0), Ok(15)),
            Err(Status::DATA_SGL_LENGTH_INVALID)
        );
        assert_eq!(
            decode(&sqe(opc::REPORT, 15, 1), Ok(63)),
            Err(Status::DATA_SGL_LENGTH_INVALID)
        );
        assert_eq!(
            decode(&sqe(opc::REPORT, u32::MAX, 1), Ok(u32::MAX)),
            Ok(ResvCommand::Report {
                len: u32::MAX,
                eds: true
            }),
            "no overflow"
        );
        assert_eq!(
            decode(&sqe(opc::REGISTER, 0, 0), Err(Status::SGL_TYPE_INVALID)),
            Err(Status::SGL_TYPE_INVALID)
        );
        assert_eq!(
            decode(&sqe(io_opc::READ, 0, 0), Ok(16)),
            Err(Status::INVALID_OPCODE)
        );
    }

    #[test]
    fn nvme_cli_sequence() {
        // nvme resv-register -k 0 -c 0 --nrkey 0xaaa; resv-acquire -c 0xaaa -t 1;
        // the other host's acquire conflicts; report; release; unregister.
        let mut res = Reservation::new(false);
        run(&mut res, A, &sqe(opc::REGISTER, 0, 0), &keys(0, 0xAAA)).unwrap();
        run(&mut res, B, &sqe(opc::REGISTER, 0, 0), &keys(0, 0xBBB)).unwrap();
        run(&mut res, A, &sqe(opc::ACQUIRE, 1 << 8, 0), &keys(0xAAA, 0)).unwrap();
        assert_eq!(
            run(&mut res, B, &sqe(opc::ACQUIRE, 1 << 8, 0), &keys(0xBBB, 0)),
            Err(RESERVATION_CONFLICT)
        );
        assert!(!res.permits(Initiator::Nvme(B), command_class(io_opc::WRITE)));
        assert!(res.permits(Initiator::Nvme(B), command_class(io_opc::READ)));
        // Register with a wrong CRKEY is fine for RREGA 000b (CRKEY ignored) when the key
        // is the same; a different key conflicts.
        assert_eq!(
            run(&mut res, A, &sqe(opc::REGISTER, 0, 0), &keys(0x123, 0xAAA)).map(|_| ()),
            Ok(())
        );
        assert_eq!(
            run(&mut res, A, &sqe(opc::REGISTER, 0, 0), &keys(0xAAA, 0xCCC)),
            Err(RESERVATION_CONFLICT)
        );
        // Release with the wrong type: Invalid Field; with the right one: done.
        assert_eq!(
            run(
                &mut res,
                A,
                &sqe(opc::RELEASE, 2 << 8, 0),
                &keys(0xAAA, 0)[..8]
            ),
            Err(Status::INVALID_FIELD)
        );
        run(
            &mut res,
            A,
            &sqe(opc::RELEASE, 1 << 8, 0),
            &keys(0xAAA, 0)[..8],
        )
        .unwrap();
        assert_eq!(res.reserved(), None);
        // Unregister with IEKEY.
        run(&mut res, A, &sqe(opc::REGISTER, 1 | 1 << 3, 0), &keys(0, 0)).unwrap();
        assert_eq!(res.key_of(Initiator::Nvme(A)), None);
        // Zero new key, PTPL without a ptpl_file, zero preempt key: Invalid Field.
        assert_eq!(
            run(&mut res, A, &sqe(opc::REGISTER, 0, 0), &keys(0, 0)),
            Err(Status::INVALID_FIELD)
        );
        assert_eq!(
            run(&mut res, A, &sqe(opc::REGISTER, 3 << 30, 0), &keys(0, 1)),
            Err(Status::INVALID_FIELD)
        );
        assert_eq!(
            run(
                &mut res,
                B,
                &sqe(opc::ACQUIRE, 1 | 1 << 8, 0),
                &keys(0xBBB, 0)
            ),
            Err(Status::INVALID_FIELD)
        );
    }

    #[test]
    fn preempt_and_abort_reports_the_victim() {
        let mut res = Reservation::new(false);
        run(&mut res, A, &sqe(opc::REGISTER, 0, 0), &keys(0, 1)).unwrap();
        run(&mut res, B, &sqe(opc::REGISTER, 0, 0), &keys(0, 2)).unwrap();
        run(&mut res, A, &sqe(opc::ACQUIRE, 2 << 8, 0), &keys(1, 0)).unwrap();
        let fx = run(&mut res, B, &sqe(opc::ACQUIRE, 2 | 2 << 8, 0), &keys(2, 1)).unwrap();
        assert_eq!(fx.aborted, vec![Initiator::Nvme(A)]);
        assert_eq!(fx.notices.len(), 1);
        assert_eq!(fx.notices[0].kind, NoticeKind::RegistrationPreempted);
        assert!(res.is_holder(Initiator::Nvme(B)));
    }

    #[test]
    fn report_layouts() {
        let mut res = Reservation::new(true);
        run(
            &mut res,
            A,
            &sqe(opc::REGISTER, 3 << 30, 0),
            &keys(0, 0x1111),
        )
        .unwrap();
        let srp = Initiator::Scsi(Nexus {
            initiator: InitiatorPort::srp([0x5C; 16]),
            relative_target_port: 2,
        });
        res.register(
            srp,
            RegisterAction::Register { new_key: 0x2222 },
            PtplChange::Keep,
        )
        .unwrap();
        res.reserve(srp, 0x2222, ResvType::WriteExclusiveRegistrantsOnly)
            .unwrap();
        let mut out = [0xEEu8; 64 + 2 * 64 + 8];
        let n = report(&res, true, &mut out).unwrap();
        assert_eq!(n, 192);
        assert_eq!(le::u32_at(&out, 0), res.generation());
        assert_eq!(out[4], 3, "RTYPE");
        assert_eq!(le::u16_at(&out, 5), 2, "REGCTL");
        assert_eq!(out[9], 1, "PTPLS");
        assert_eq!(&out[10..64], &[0; 54]);
        let e0 = &out[64..128];
        assert_eq!(le::u16_at(e0, 0), 0xFFFF);
        assert_eq!(e0[2], 0, "A does not hold it");
        assert_eq!(le::u64_at(e0, 8), 0x1111);
        assert_eq!(&e0[16..32], &[0xA1; 16]);
        let e1 = &out[128..192];
        assert_eq!(e1[2], 1, "the SRP nexus holds it");
        assert_eq!(le::u64_at(e1, 8), 0x2222);
        assert_eq!(&e1[16..32], &[0x5C; 16]);
        assert_eq!(&out[192..], &[0xEE; 8], "nothing past the data");
        // Truncated: REGCTL still counts both.
        let mut small = [0u8; 70];
        assert_eq!(report(&res, true, &mut small), Ok(70));
        assert_eq!(le::u16_at(&small, 5), 2);
        // 128-bit identifiers cannot go in the 24-byte form.
        assert_eq!(
            report(&res, false, &mut out),
            Err(Status::HOST_ID_INCONSISTENT)
        );
        // 64-bit identifiers can.
        let mut res = Reservation::new(false);
        let short = HostId::from_u64_bytes([1, 2, 3, 4, 5, 6, 7, 8]);
        run(&mut res, short, &sqe(opc::REGISTER, 0, 0), &keys(0, 9)).unwrap();
        run(&mut res, short, &sqe(opc::ACQUIRE, 1 << 8, 0), &keys(9, 0)).unwrap();
        let mut out = [0u8; 48];
        assert_eq!(report(&res, false, &mut out), Ok(48));
        assert_eq!(out[4], 1);
        assert_eq!(le::u16_at(&out, 5), 1);
        assert_eq!(le::u16_at(&out, 24), 0xFFFF);
        assert_eq!(out[26], 1);
        assert_eq!(&out[32..40], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(le::u64_at(&out, 40), 9);
    }

    #[test]
    fn features() {
        let m = NotifyMask::from_cdw11(0b1010).unwrap();
        assert!(m.masks(NoticeKind::RegistrationPreempted));
        assert!(!m.masks(NoticeKind::ReservationReleased));
        assert!(m.masks(NoticeKind::ReservationPreempted));
        assert_eq!(m.dw0(), 0b1010);
        assert_eq!(NotifyMask::from_cdw11(1), Err(Status::INVALID_FIELD));
        assert_eq!(NotifyMask::from_cdw11(1 << 4), Err(Status::INVALID_FIELD));
        let mut res = Reservation::new(false);
        assert!(!persistence_from_cdw11(2));
        assert_eq!(
            res.set_ptpl(persistence_from_cdw11(1)).map_err(status_of),
            Err(Status::INVALID_FIELD)
        );
        let mut res2 = Reservation::new(true);
        res2.set_ptpl(true).unwrap();
        assert_eq!(persistence_dw0(&res2), 1);
        assert_eq!(persistence_dw0(&res), 0);
    }

    #[test]
    fn command_classes() {
        assert_eq!(command_class(io_opc::READ), CommandClass::Read);
        assert_eq!(command_class(io_opc::COMPARE), CommandClass::Read);
        for o in [
            io_opc::WRITE,
            io_opc::WRITE_ZEROES,
            io_opc::DATASET_MANAGEMENT,
            io_opc::FLUSH,
            io_opc::WRITE_UNCORRECTABLE,
        ] {
            assert_eq!(command_class(o), CommandClass::Write, "{o:#x}");
        }
        assert_eq!(command_class(opc::REPORT), CommandClass::Query);
        for o in [opc::REGISTER, opc::ACQUIRE, opc::RELEASE] {
            assert_eq!(command_class(o), CommandClass::Reservation);
        }
    }
}
