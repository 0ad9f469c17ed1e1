//! RESERVE(6/10) and RELEASE(6/10) (SPC-2 reservations), with the SPC-4 5.13.3
//! exceptions for a logical unit that also has persistent reservations (CRH = 1; REPORT
//! CAPABILITIES says so). The reservation itself is kept in the volume's shared
//! [`Reservation`](crate::reservation::Reservation), so it also keeps NVMe hosts out.
//!
//! Third-party reservations (3RDPTY, LONGID) and extents are refused with INVALID FIELD IN
//! CDB.

use crate::reservation::{Nexus, Reservation};

use super::cdb::Cdb;
use super::pr_out::{PrStatus, status_of};
use super::sense::Sense;

/// RESERVE(6).
pub const RESERVE_6: u8 = 0x16;
/// RELEASE(6).
pub const RELEASE_6: u8 = 0x17;
/// RESERVE(10).
pub const RESERVE_10: u8 = 0x56;
/// RELEASE(10).
pub const RELEASE_10: u8 = 0x57;

/// Runs RESERVE(6/10) or RELEASE(6/10) from `nexus`.
pub fn execute_reserve_release(res: &mut Reservation, nexus: Nexus, cdb: &[u8]) -> PrStatus {
    let Some((c, _)) = Cdb::new(cdb) else {
        return PrStatus::CheckCondition(Sense::invalid_field_in_cdb(0, None));
    };
    // (6): 3RDPTY(4), THIRD-PARTY DEVICE ID(3:1), EXTENT(0). (10): 3RDPTY(4), LONGID(1),
    // EXTENT(0).
    let unsupported = match c.opcode() {
        RESERVE_6 | RELEASE_6 => 0x1F,
        RESERVE_10 | RELEASE_10 => 0x13,
        _ => return PrStatus::CheckCondition(Sense::invalid_field_in_cdb(0, None)),
    };
    if c.u8(1) & unsupported != 0 {
        return PrStatus::CheckCondition(Sense::invalid_field_in_cdb(1, None));
    }
    let r = match c.opcode() {
        RESERVE_6 | RESERVE_10 => res.legacy_reserve(nexus),
        _ => res.legacy_release(nexus),
    };
    match r {
        Ok(_) => PrStatus::Good,
        Err(e) => status_of(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::{
        CommandClass, Initiator, InitiatorPort, PtplChange, RegisterAction, ResvType,
    };

    fn nexus(b: u8) -> Nexus {
        Nexus {
            initiator: InitiatorPort::srp([b; 16]),
            relative_target_port: 1,
        }
    }

    #[test]
    fn reserve_release_six_and_ten() {
        let mut res = Reservation::new(false);
        let (a, b) = (nexus(1), nexus(2));
        let cdb = |op: u8, len: usize| {
            let mut c = vec![0u8; len];
            c[0] = op;
            c
        };
        for (rsv, rel) in [
            (cdb(RESERVE_6, 6), cdb(RELEASE_6, 6)),
            (cdb(RESERVE_10, 10), cdb(RELEASE_10, 10)),
        ] {
            assert_eq!(execute_reserve_release(&mut res, a, &rsv), PrStatus::Good);
            assert_eq!(
                execute_reserve_release(&mut res, b, &rsv),
                PrStatus::ReservationConflict
            );
            assert!(!res.permits(Initiator::Scsi(b), CommandClass::Read));
            // RELEASE from the other nexus: GOOD, the reservation stays.
            assert_eq!(execute_reserve_release(&mut res, b, &rel), PrStatus::Good);
            assert_eq!(res.legacy_holder(), Some(a));
            assert_eq!(execute_reserve_release(&mut res, a, &rel), PrStatus::Good);
            assert_eq!(res.legacy_holder(), None);
        }
    }

    #[test]
    fn third_party_and_extents_refused() {
        let mut res = Reservation::new(false);
        for c in [
            [RESERVE_6, 0x10, 0, 0, 0, 0],
            [RESERVE_6, 0x01, 0, 0, 0, 0],
            [RELEASE_6, 0x02, 0, 0, 0, 0],
        ] {
            assert_eq!(
                execute_reserve_release(&mut res, nexus(1), &c),
                PrStatus::CheckCondition(Sense::invalid_field_in_cdb(1, None))
            );
        }
        let mut c = [0u8; 10];
        c[0] = RESERVE_10;
        c[1] = 0x02; // LONGID
        assert!(matches!(
            execute_reserve_release(&mut res, nexus(1), &c),
            PrStatus::CheckCondition(_)
        ));
        // Obsolete LUN bits of the 6-byte form are ignored.
        assert_eq!(
            execute_reserve_release(&mut res, nexus(1), &[RESERVE_6, 0xE0, 0, 0, 0, 0]),
            PrStatus::Good
        );
        assert!(res.legacy_holder().is_some());
        // Not a RESERVE/RELEASE CDB at all.
        assert!(matches!(
            execute_reserve_release(&mut res, nexus(1), &[0x00, 0, 0, 0, 0, 0]),
            PrStatus::CheckCondition(_)
        ));
    }

    #[test]
    fn interplay_with_persistent_registrations() {
        let mut res = Reservation::new(false);
        let (a, b) = (nexus(1), nexus(2));
        res.register(
            Initiator::Scsi(a),
            RegisterAction::Register { new_key: 1 },
            PtplChange::Keep,
        )
        .unwrap();
        let rsv = [RESERVE_6, 0, 0, 0, 0, 0];
        // Registrations exist: RESERVE from anyone conflicts (a is registered but holds
        // nothing).
        assert_eq!(
            execute_reserve_release(&mut res, a, &rsv),
            PrStatus::ReservationConflict
        );
        assert_eq!(
            execute_reserve_release(&mut res, b, &rsv),
            PrStatus::ReservationConflict
        );
        // The PR holder: GOOD, and nothing changes.
        res.reserve(Initiator::Scsi(a), 1, ResvType::WriteExclusive)
            .unwrap();
        assert_eq!(execute_reserve_release(&mut res, a, &rsv), PrStatus::Good);
        assert_eq!(res.legacy_holder(), None);
    }
}
