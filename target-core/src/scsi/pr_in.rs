//! PERSISTENT RESERVE IN (SPC-4 6.15): READ KEYS, READ RESERVATION, REPORT CAPABILITIES
//! and READ FULL STATUS from the volume's shared
//! [`Reservation`](crate::reservation::Reservation).
//!
//! NVMe hosts registered on the same bdev are listed like any registrant. READ FULL STATUS
//! describes them with ALL_TG_PT = 1 (an NVMe registration is per host, whatever port it
//! comes through), RELATIVE TARGET PORT IDENTIFIER 0 and a 24-byte TransportID with
//! PROTOCOL IDENTIFIER Fh ("no specific protocol") carrying the 16-byte Host Identifier in
//! bytes 8–23 — SPC has no TransportID for NVMe.

use crate::reservation::{Initiator, PROTOCOL_ID_NONE, Reservation, TRANSPORT_ID_LEN};

use super::cdb::Cdb;
use super::data_in::DataIn;
use super::sense::Sense;

/// PERSISTENT RESERVE IN operation code.
pub const PERSISTENT_RESERVE_IN: u8 = 0x5E;

/// A PERSISTENT RESERVE IN service action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrInAction {
    /// 00h READ KEYS.
    ReadKeys,
    /// 01h READ RESERVATION.
    ReadReservation,
    /// 02h REPORT CAPABILITIES.
    ReportCapabilities,
    /// 03h READ FULL STATUS.
    ReadFullStatus,
}

/// A checked PERSISTENT RESERVE IN CDB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrInCdb {
    /// The service action.
    pub action: PrInAction,
    /// ALLOCATION LENGTH.
    pub alloc_len: u16,
}

/// Checks a PERSISTENT RESERVE IN CDB.
pub fn decode_pr_in(cdb: &[u8]) -> Result<PrInCdb, Sense> {
    let Some((c, _)) = Cdb::new(cdb).filter(|(c, _)| c.opcode() == PERSISTENT_RESERVE_IN) else {
        return Err(Sense::invalid_field_in_cdb(0, None));
    };
    let action = match c.u8(1) & 0x1F {
        0 => PrInAction::ReadKeys,
        1 => PrInAction::ReadReservation,
        2 => PrInAction::ReportCapabilities,
        3 => PrInAction::ReadFullStatus,
        _ => return Err(Sense::invalid_field_in_cdb(1, Some(4))),
    };
    Ok(PrInCdb {
        action,
        alloc_len: c.be16(7),
    })
}

/// REPORT CAPABILITIES byte 2: CRH (RESERVE/RELEASE handled as SPC-4 5.13.3 says).
const CRH: u8 = 1 << 4;
/// REPORT CAPABILITIES byte 2: PTPL_C.
const PTPL_C: u8 = 1 << 0;
/// REPORT CAPABILITIES byte 3: TMV (the type mask is valid).
const TMV: u8 = 1 << 7;
/// REPORT CAPABILITIES byte 3: ALLOW COMMANDS 001b (TEST UNIT READY is allowed through
/// Write Exclusive and Exclusive Access reservations).
const ALLOW_COMMANDS_TUR: u8 = 0b001 << 4;
/// REPORT CAPABILITIES byte 3: PTPL_A.
const PTPL_A: u8 = 1 << 0;
/// PERSISTENT RESERVATION TYPE MASK, all six types: byte 4 WR_EX_AR(7) EX_AC_RO(6)
/// WR_EX_RO(5) EX_AC(3) WR_EX(1), byte 5 EX_AC_AR(0).
const TYPE_MASK: [u8; 2] = [0xEA, 0x01];

/// Runs a PERSISTENT RESERVE IN into `data_in` (at most the allocation length; length
/// fields describe the full data) and returns the bytes stored.
pub fn execute_pr_in(res: &Reservation, cdb: &PrInCdb, data_in: &mut [u8]) -> u32 {
    let mut w = DataIn::new(data_in, u32::from(cdb.alloc_len));
    let regs = res.registrants();
    match cdb.action {
        PrInAction::ReadKeys => {
            w.be32(res.generation());
            w.be32(u32::try_from(regs.len() * 8).unwrap_or(u32::MAX));
            for r in regs {
                w.be64(r.key);
            }
        }
        PrInAction::ReadReservation => {
            w.be32(res.generation());
            match res.reserved() {
                None => w.be32(0),
                Some(r) => {
                    w.be32(16);
                    w.be64(res.reservation_key().unwrap_or(0));
                    w.zeros(4); // obsolete
                    w.u8(0);
                    w.u8(r.rtype.scsi()); // SCOPE 0 (LU_SCOPE), TYPE
                    w.zeros(2); // obsolete
                }
            }
        }
        PrInAction::ReportCapabilities => {
            w.be16(8);
            w.u8(CRH | if res.ptpl_capable() { PTPL_C } else { 0 });
            w.u8(TMV | ALLOW_COMMANDS_TUR | if res.ptpl() { PTPL_A } else { 0 });
            w.put(&TYPE_MASK);
            w.zeros(2);
        }
        PrInAction::ReadFullStatus => {
            const DESC_LEN: usize = 24 + TRANSPORT_ID_LEN;
            w.be32(res.generation());
            w.be32(u32::try_from(regs.len() * DESC_LEN).unwrap_or(u32::MAX));
            let reserved = res.reserved();
            for r in regs {
                let holder = res.is_holder(r.who);
                let (all_tg_pt, port, tid) = match r.who {
                    Initiator::Scsi(n) => {
                        (false, n.relative_target_port, n.initiator.transport_id())
                    }
                    Initiator::Nvme(h) => {
                        let mut t = [0u8; TRANSPORT_ID_LEN];
                        t[0] = PROTOCOL_ID_NONE;
                        t[8..].copy_from_slice(&h.0);
                        (true, 0, t)
                    }
                };
                w.be64(r.key);
                w.zeros(4);
                w.u8(u8::from(all_tg_pt) << 1 | u8::from(holder));
                w.u8(match reserved {
                    Some(x) if holder => x.rtype.scsi(),
                    _ => 0,
                });
                w.zeros(4);
                w.be16(port);
                w.be32(TRANSPORT_ID_LEN as u32);
                w.put(&tid);
            }
        }
    }
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::{HostId, InitiatorPort, Nexus, PtplChange, RegisterAction, ResvType};

    fn cdb(sa: u8, alloc: u16) -> [u8; 10] {
        let mut c = [0u8; 10];
        c[0] = PERSISTENT_RESERVE_IN;
        c[1] = sa;
        c[7..9].copy_from_slice(&alloc.to_be_bytes());
        c
    }

    fn run(res: &Reservation, sa: u8, alloc: u16) -> Vec<u8> {
        let mut out = vec![0u8; 512];
        let n = execute_pr_in(res, &decode_pr_in(&cdb(sa, alloc)).unwrap(), &mut out);
        out.truncate(n as usize);
        out
    }

    fn srp(b: u8, port: u16) -> Initiator {
        Initiator::Scsi(Nexus {
            initiator: InitiatorPort::srp([b; 16]),
            relative_target_port: port,
        })
    }

    fn two(rtype: Option<ResvType>) -> Reservation {
        let mut res = Reservation::new(true);
        res.register(
            srp(0x11, 1),
            RegisterAction::Register { new_key: 0x1111 },
            PtplChange::Set(true),
        )
        .unwrap();
        res.register(
            Initiator::Nvme(HostId([0x22; 16])),
            RegisterAction::Register { new_key: 0x2222 },
            PtplChange::Keep,
        )
        .unwrap();
        if let Some(t) = rtype {
            res.reserve(srp(0x11, 1), 0x1111, t).unwrap();
        }
        res
    }

    #[test]
    fn decode() {
        assert_eq!(
            decode_pr_in(&cdb(3, 0x1234)),
            Ok(PrInCdb {
                action: PrInAction::ReadFullStatus,
                alloc_len: 0x1234
            })
        );
        assert_eq!(
            decode_pr_in(&cdb(4, 8)),
            Err(Sense::invalid_field_in_cdb(1, Some(4)))
        );
        assert!(decode_pr_in(&cdb(0, 8)[..9]).is_err());
    }

    #[test]
    fn read_keys() {
        let res = two(None);
        let g = res.generation().to_be_bytes();
        let out = run(&res, 0, 100);
        let mut want = g.to_vec();
        want.extend([0, 0, 0, 16]);
        want.extend(0x1111u64.to_be_bytes());
        want.extend(0x2222u64.to_be_bytes());
        assert_eq!(out, want);
        // Truncated to the allocation length, the length field still covers both keys.
        assert_eq!(run(&res, 0, 12), want[..12]);
        assert_eq!(run(&res, 0, 0), Vec::<u8>::new());
    }

    #[test]
    fn read_reservation() {
        let out = run(&two(None), 1, 100);
        assert_eq!(&out[4..], &[0, 0, 0, 0]);
        let out = run(&two(Some(ResvType::ExclusiveAccessRegistrantsOnly)), 1, 100);
        assert_eq!(out.len(), 24);
        assert_eq!(&out[4..8], &[0, 0, 0, 16]);
        assert_eq!(&out[8..16], &0x1111u64.to_be_bytes());
        assert_eq!(out[21], 0x06);
        // All Registrants: key 0.
        let out = run(&two(Some(ResvType::WriteExclusiveAllRegistrants)), 1, 100);
        assert_eq!(&out[8..16], &[0; 8]);
        assert_eq!(out[21], 0x07);
    }

    #[test]
    fn report_capabilities() {
        let out = run(&two(None), 2, 100);
        assert_eq!(out, vec![0, 8, 0x11, 0x91, 0xEA, 0x01, 0, 0]);
        let out = run(&Reservation::new(false), 2, 100);
        assert_eq!(out, vec![0, 8, 0x10, 0x90, 0xEA, 0x01, 0, 0]);
    }

    #[test]
    fn read_full_status() {
        let res = two(Some(ResvType::WriteExclusive));
        let out = run(&res, 3, 512);
        assert_eq!(&out[4..8], &(2u32 * 48).to_be_bytes());
        assert_eq!(out.len(), 8 + 96);
        let d = &out[8..56];
        assert_eq!(&d[..8], &0x1111u64.to_be_bytes());
        assert_eq!(d[12], 0x01, "R_HOLDER, ALL_TG_PT 0");
        assert_eq!(d[13], 0x01, "WE");
        assert_eq!(&d[18..20], &[0, 1]);
        assert_eq!(&d[20..24], &[0, 0, 0, 24]);
        assert_eq!(d[24], 4, "SRP TransportID");
        assert_eq!(&d[32..48], &[0x11; 16]);
        let d = &out[56..104];
        assert_eq!(&d[..8], &0x2222u64.to_be_bytes());
        assert_eq!(d[12], 0x02, "ALL_TG_PT 1, not the holder");
        assert_eq!(d[13], 0);
        assert_eq!(d[24], 0x0F);
        assert_eq!(&d[32..48], &[0x22; 16]);
        // All Registrants: everyone is a holder with the type.
        let out = run(&two(Some(ResvType::ExclusiveAccessAllRegistrants)), 3, 512);
        assert_eq!((out[8 + 12], out[8 + 13]), (0x01, 0x08));
        assert_eq!((out[56 + 12], out[56 + 13]), (0x03, 0x08));
    }
}
