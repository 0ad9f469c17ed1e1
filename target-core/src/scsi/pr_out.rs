//! PERSISTENT RESERVE OUT (SPC-4 6.16) over the volume's shared
//! [`Reservation`](crate::reservation::Reservation).
//!
//! Two steps: [`decode_pr_out`] checks the CDB and says how many bytes of parameter data to
//! fetch; [`execute_pr_out`] parses the basic parameter list (24 bytes) and runs the service
//! action for the I_T nexus. The mapping to the neutral operations is the NVM Express SCSI
//! Translation Reference's:
//!
//! | service action | operation |
//! |---|---|
//! | REGISTER, nexus not registered | key ≠ 0: conflict; SA key 0: GOOD, nothing; else register SA key |
//! | REGISTER, registered | SA key 0: unregister (key checked); else replace (key checked) |
//! | REGISTER AND IGNORE EXISTING KEY | the same without the key checks |
//! | RESERVE | reserve (acquire) TYPE |
//! | RELEASE | release TYPE |
//! | CLEAR | clear |
//! | PREEMPT / PREEMPT AND ABORT | preempt SA key with TYPE (and abort) |
//!
//! Supported: APTPL (with a `ptpl_file`; else INVALID FIELD IN PARAMETER LIST).
//! Refused with INVALID FIELD IN PARAMETER LIST (REPORT CAPABILITIES says SIP_C = 0 and
//! ATP_C = 0): SPEC_I_PT = 1, and ALL_TG_PT = 1 with REGISTER / REGISTER AND IGNORE
//! EXISTING KEY. Refused with INVALID FIELD IN CDB: REGISTER AND MOVE, REPLACE LOST
//! RESERVATION, and a SCOPE other than LU_SCOPE.

use crate::reservation::{
    CommandClass, Effects, Initiator, KeyCheck, Nexus, PrError, PtplChange, RegisterAction,
    Reservation, ResvType,
};

use super::cdb::{Cdb, read_be};
use super::sense::{Sense, SenseKey};

/// PERSISTENT RESERVE OUT operation code.
pub const PERSISTENT_RESERVE_OUT: u8 = 0x5F;

/// Length of the basic parameter list.
pub const BASIC_PARAM_LEN: u32 = 24;

/// A PERSISTENT RESERVE OUT service action with its TYPE where it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrOutAction {
    /// 00h REGISTER.
    Register,
    /// 01h RESERVE.
    Reserve(ResvType),
    /// 02h RELEASE.
    Release(ResvType),
    /// 03h CLEAR.
    Clear,
    /// 04h PREEMPT.
    Preempt(ResvType),
    /// 05h PREEMPT AND ABORT.
    PreemptAndAbort(ResvType),
    /// 06h REGISTER AND IGNORE EXISTING KEY.
    RegisterAndIgnoreExistingKey,
}

/// A checked PERSISTENT RESERVE OUT CDB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrOutCdb {
    /// The service action.
    pub action: PrOutAction,
    /// Bytes of parameter data to fetch: the PARAMETER LIST LENGTH, capped by what the
    /// initiator declared.
    pub fetch_len: u32,
    /// The PARAMETER LIST LENGTH field.
    pub param_list_len: u32,
}

/// The status of a reservation command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrStatus {
    /// GOOD.
    Good,
    /// RESERVATION CONFLICT (18h).
    ReservationConflict,
    /// CHECK CONDITION with this sense.
    CheckCondition(Sense),
}

/// A PERSISTENT RESERVE OUT outcome: the status and, when it succeeded, what the exec layer
/// must do (unit attentions and NVMe notifications, aborts, view publication, the
/// `ptpl_file`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrOutResult {
    /// The status to return.
    pub status: PrStatus,
    /// The effects (empty unless GOOD).
    pub effects: Effects,
}

impl PrOutResult {
    fn status(status: PrStatus) -> PrOutResult {
        PrOutResult {
            status,
            effects: Effects::default(),
        }
    }

    fn sense(s: Sense) -> PrOutResult {
        Self::status(PrStatus::CheckCondition(s))
    }
}

/// ILLEGAL REQUEST, INVALID RELEASE OF PERSISTENT RESERVATION (26h/04h).
pub const fn invalid_release() -> Sense {
    Sense::new(SenseKey::IllegalRequest, 0x26, 0x04)
}

/// ILLEGAL REQUEST, INSUFFICIENT REGISTRATION RESOURCES (55h/04h).
pub const fn insufficient_registration_resources() -> Sense {
    Sense::new(SenseKey::IllegalRequest, 0x55, 0x04)
}

/// Checks a PERSISTENT RESERVE OUT CDB; `data_out_len` is what the initiator declared.
pub fn decode_pr_out(cdb: &[u8], data_out_len: u32) -> Result<PrOutCdb, Sense> {
    let Some((c, _)) = Cdb::new(cdb).filter(|(c, _)| c.opcode() == PERSISTENT_RESERVE_OUT) else {
        return Err(Sense::invalid_field_in_cdb(0, None));
    };
    let typed = |f: fn(ResvType) -> PrOutAction| {
        if c.u8(2) >> 4 != 0 {
            return Err(Sense::invalid_field_in_cdb(2, Some(7)));
        }
        ResvType::from_scsi(c.u8(2) & 0x0F)
            .map(f)
            .ok_or(Sense::invalid_field_in_cdb(2, Some(3)))
    };
    let action = match c.u8(1) & 0x1F {
        0x00 => PrOutAction::Register,
        0x01 => typed(PrOutAction::Reserve)?,
        0x02 => typed(PrOutAction::Release)?,
        0x03 => PrOutAction::Clear,
        0x04 => typed(PrOutAction::Preempt)?,
        0x05 => typed(PrOutAction::PreemptAndAbort)?,
        0x06 => PrOutAction::RegisterAndIgnoreExistingKey,
        _ => return Err(Sense::invalid_field_in_cdb(1, Some(4))),
    };
    let param_list_len = c.be32(5);
    let fetch_len = param_list_len.min(data_out_len);
    if fetch_len < BASIC_PARAM_LEN {
        return Err(Sense::param_list_length_error());
    }
    Ok(PrOutCdb {
        action,
        fetch_len,
        param_list_len,
    })
}

/// The basic parameter list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Params {
    key: u64,
    sa_key: u64,
    all_tg_pt: bool,
    aptpl: bool,
}

fn parse(action: PrOutAction, p: &[u8]) -> Result<Params, Sense> {
    let flags = p.get(20).copied().unwrap_or(0);
    if flags & 0x08 != 0 {
        return Err(Sense::invalid_field_in_param(20, Some(3)));
    }
    if p.len() != BASIC_PARAM_LEN as usize {
        return Err(Sense::param_list_length_error());
    }
    let register = matches!(
        action,
        PrOutAction::Register | PrOutAction::RegisterAndIgnoreExistingKey
    );
    let all_tg_pt = flags & 0x04 != 0;
    if register && all_tg_pt {
        return Err(Sense::invalid_field_in_param(20, Some(2)));
    }
    Ok(Params {
        key: read_be::<8>(p, 0).unwrap_or(0),
        sa_key: read_be::<8>(p, 8).unwrap_or(0),
        all_tg_pt,
        aptpl: register && flags & 0x01 != 0,
    })
}

/// The SCSI status for a failed operation.
pub fn status_of(e: PrError) -> PrStatus {
    match e {
        PrError::Conflict => PrStatus::ReservationConflict,
        PrError::InvalidReleaseType => PrStatus::CheckCondition(invalid_release()),
        PrError::ZeroPreemptKey | PrError::ZeroNewKey => {
            PrStatus::CheckCondition(Sense::invalid_field_in_param(8, None))
        }
        PrError::PtplNotCapable => {
            PrStatus::CheckCondition(Sense::invalid_field_in_param(20, Some(0)))
        }
        PrError::NoResources => PrStatus::CheckCondition(insufficient_registration_resources()),
    }
}

/// Runs a PERSISTENT RESERVE OUT for `nexus` with the fetched parameter data `params`
/// ([`PrOutCdb::fetch_len`] bytes).
pub fn execute_pr_out(
    res: &mut Reservation,
    nexus: Nexus,
    cdb: &PrOutCdb,
    params: &[u8],
) -> PrOutResult {
    let who = Initiator::Scsi(nexus);
    if !res.permits(who, CommandClass::Reservation) {
        return PrOutResult::status(PrStatus::ReservationConflict);
    }
    let p = match parse(cdb.action, params) {
        Ok(p) => p,
        Err(s) => return PrOutResult::sense(s),
    };
    let r = match cdb.action {
        PrOutAction::Register | PrOutAction::RegisterAndIgnoreExistingKey => {
            let ignore = cdb.action == PrOutAction::RegisterAndIgnoreExistingKey;
            let current = if ignore {
                KeyCheck::Ignore
            } else {
                KeyCheck::Match(p.key)
            };
            let ptpl = PtplChange::Set(p.aptpl);
            match (res.key_of(who), p.sa_key) {
                (None, _) if !ignore && p.key != 0 => Err(PrError::Conflict),
                // SPC-4 5.12.7: an unregistered nexus registering key 0: GOOD, no action.
                (None, 0) => Ok(Effects::default()),
                (None, k) => res.register(who, RegisterAction::Register { new_key: k }, ptpl),
                (Some(_), 0) => res.register(who, RegisterAction::Unregister { current }, ptpl),
                (Some(_), k) => res.register(
                    who,
                    RegisterAction::Replace {
                        current,
                        new_key: k,
                    },
                    ptpl,
                ),
            }
        }
        PrOutAction::Reserve(t) => res.reserve(who, p.key, t),
        PrOutAction::Release(t) => res.release(who, p.key, t),
        PrOutAction::Clear => res.clear(who, p.key),
        PrOutAction::Preempt(t) => res.preempt(who, p.key, p.sa_key, t, false),
        PrOutAction::PreemptAndAbort(t) => res.preempt(who, p.key, p.sa_key, t, true),
    };
    match r {
        Ok(effects) => PrOutResult {
            status: PrStatus::Good,
            effects,
        },
        Err(e) => {
            tracing::debug!(?nexus, action = ?cdb.action, all_tg_pt = p.all_tg_pt,
                "PERSISTENT RESERVE OUT refused: {e}");
            PrOutResult::status(status_of(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::{InitiatorPort, NoticeKind};

    fn cdb(sa: u8, scope_type: u8, len: u32) -> [u8; 10] {
        let mut c = [0u8; 10];
        c[0] = PERSISTENT_RESERVE_OUT;
        c[1] = sa;
        c[2] = scope_type;
        c[5..9].copy_from_slice(&len.to_be_bytes());
        c
    }

    fn params(key: u64, sa_key: u64, flags: u8) -> [u8; 24] {
        let mut p = [0u8; 24];
        p[..8].copy_from_slice(&key.to_be_bytes());
        p[8..16].copy_from_slice(&sa_key.to_be_bytes());
        p[20] = flags;
        p
    }

    fn nexus(b: u8) -> Nexus {
        Nexus {
            initiator: InitiatorPort::srp([b; 16]),
            relative_target_port: 1,
        }
    }

    /// sg_persist-style: decode, then run with the parameter list.
    fn run(
        res: &mut Reservation,
        n: Nexus,
        sa: u8,
        t: u8,
        key: u64,
        sak: u64,
        f: u8,
    ) -> PrOutResult {
        let c = decode_pr_out(&cdb(sa, t, 24), 24).unwrap();
        execute_pr_out(res, n, &c, &params(key, sak, f))
    }

    fn good(r: &PrOutResult) {
        assert_eq!(r.status, PrStatus::Good, "{r:?}");
    }

    #[test]
    fn decode_checks() {
        assert_eq!(
            decode_pr_out(&cdb(0x01, 0x01, 24), 24).unwrap().action,
            PrOutAction::Reserve(ResvType::WriteExclusive)
        );
        assert_eq!(
            decode_pr_out(&cdb(0x05, 0x08, 24), 100).unwrap().action,
            PrOutAction::PreemptAndAbort(ResvType::ExclusiveAccessAllRegistrants)
        );
        // REGISTER ignores SCOPE and TYPE.
        assert_eq!(
            decode_pr_out(&cdb(0x00, 0xFF, 24), 24).unwrap().action,
            PrOutAction::Register
        );
        let bad = [
            (cdb(0x07, 0, 24), Sense::invalid_field_in_cdb(1, Some(4))), // REGISTER AND MOVE
            (cdb(0x08, 0, 24), Sense::invalid_field_in_cdb(1, Some(4))), // REPLACE LOST
            (cdb(0x01, 0x11, 24), Sense::invalid_field_in_cdb(2, Some(7))), // scope
            (cdb(0x01, 0x02, 24), Sense::invalid_field_in_cdb(2, Some(3))), // obsolete type
            (cdb(0x04, 0x00, 24), Sense::invalid_field_in_cdb(2, Some(3))),
            (cdb(0x00, 0, 23), Sense::param_list_length_error()),
            (cdb(0x00, 0, 0), Sense::param_list_length_error()),
        ];
        for (c, want) in bad {
            assert_eq!(decode_pr_out(&c, 24), Err(want), "{c:?}");
        }
        // The initiator's data-out buffer caps what is fetched.
        assert_eq!(
            decode_pr_out(&cdb(0, 0, 24), 10),
            Err(Sense::param_list_length_error())
        );
        assert_eq!(decode_pr_out(&cdb(0, 0, 40), 100).unwrap().fetch_len, 40);
        assert!(decode_pr_out(&[0x5F, 0, 0], 24).is_err(), "short CDB");
        assert!(decode_pr_out(&cdb(0, 0, 24)[..9], 24).is_err());
    }

    #[test]
    fn parameter_list_checks() {
        let mut res = Reservation::new(false);
        let n = nexus(1);
        // SPEC_I_PT: refused whatever the action.
        for sa in 0..=6u8 {
            let c = decode_pr_out(&cdb(sa, 1, 24), 24).unwrap();
            let r = execute_pr_out(&mut res, n, &c, &params(0, 1, 0x08));
            assert_eq!(
                r.status,
                PrStatus::CheckCondition(Sense::invalid_field_in_param(20, Some(3)))
            );
        }
        // ALL_TG_PT: refused with REGISTER*, ignored by the others.
        assert_eq!(
            run(&mut res, n, 0x00, 0, 0, 1, 0x04).status,
            PrStatus::CheckCondition(Sense::invalid_field_in_param(20, Some(2)))
        );
        assert_eq!(
            run(&mut res, n, 0x06, 0, 0, 1, 0x04).status,
            PrStatus::CheckCondition(Sense::invalid_field_in_param(20, Some(2)))
        );
        good(&run(&mut res, n, 0x00, 0, 0, 1, 0));
        good(&run(&mut res, n, 0x01, 1, 1, 0, 0x04));
        // APTPL without a ptpl_file.
        assert_eq!(
            run(&mut res, n, 0x00, 0, 1, 2, 0x01).status,
            PrStatus::CheckCondition(Sense::invalid_field_in_param(20, Some(0)))
        );
        // More than 24 bytes without SPEC_I_PT: length error.
        let c = decode_pr_out(&cdb(0, 0, 28), 28).unwrap();
        let mut p = [0u8; 28];
        p[..24].copy_from_slice(&params(1, 3, 0));
        assert_eq!(
            execute_pr_out(&mut res, n, &c, &p).status,
            PrStatus::CheckCondition(Sense::param_list_length_error())
        );
    }

    #[test]
    fn register_rules() {
        let mut res = Reservation::new(true);
        let n = nexus(1);
        // Unregistered: RESERVATION KEY must be 0.
        assert_eq!(
            run(&mut res, n, 0x00, 0, 5, 6, 0).status,
            PrStatus::ReservationConflict
        );
        // SA key 0 from an unregistered nexus: GOOD, nothing (no generation bump).
        let g = res.generation();
        let r = run(&mut res, n, 0x00, 0, 0, 0, 0x01);
        good(&r);
        assert_eq!(r.effects, Effects::default());
        assert_eq!(res.generation(), g);
        assert!(!res.ptpl(), "APTPL ignored when nothing is registered");
        // Register with APTPL.
        let r = run(&mut res, n, 0x00, 0, 0, 6, 0x01);
        good(&r);
        assert!(res.ptpl() && r.effects.persist);
        assert_eq!(res.generation(), g + 1);
        // Registered: key must match; replace; APTPL 0 turns persistence off.
        assert_eq!(
            run(&mut res, n, 0x00, 0, 5, 7, 0).status,
            PrStatus::ReservationConflict
        );
        good(&run(&mut res, n, 0x00, 0, 6, 7, 0));
        assert_eq!(res.key_of(Initiator::Scsi(n)), Some(7));
        assert!(!res.ptpl());
        // REGISTER AND IGNORE EXISTING KEY: no key checks.
        good(&run(&mut res, n, 0x06, 0, 0xBAD, 8, 0));
        assert_eq!(res.key_of(Initiator::Scsi(n)), Some(8));
        good(&run(&mut res, n, 0x06, 0, 0xBAD, 0, 0));
        assert_eq!(res.key_of(Initiator::Scsi(n)), None);
        good(&run(&mut res, n, 0x06, 0, 0xBAD, 9, 0));
        assert_eq!(res.key_of(Initiator::Scsi(n)), Some(9));
        // Unregister with REGISTER, key checked.
        assert_eq!(
            run(&mut res, n, 0x00, 0, 1, 0, 0).status,
            PrStatus::ReservationConflict
        );
        good(&run(&mut res, n, 0x00, 0, 9, 0, 0));
        assert!(res.registrants().is_empty());
    }

    #[test]
    fn fence_scsi_sequence() {
        // Two nodes register, node A reserves WE-RO; node B preempts and aborts A.
        let mut res = Reservation::new(false);
        let (a, b) = (nexus(0xA), nexus(0xB));
        good(&run(&mut res, a, 0x00, 0, 0, 0xA, 0));
        good(&run(&mut res, b, 0x00, 0, 0, 0xB, 0));
        good(&run(&mut res, a, 0x01, 0x05, 0xA, 0, 0));
        assert!(res.permits(Initiator::Scsi(b), CommandClass::Write));
        let r = run(&mut res, b, 0x05, 0x05, 0xB, 0xA, 0);
        good(&r);
        assert_eq!(r.effects.aborted, vec![Initiator::Scsi(a)]);
        assert_eq!(r.effects.notices.len(), 1);
        assert_eq!(r.effects.notices[0].kind, NoticeKind::RegistrationPreempted);
        assert!(!res.permits(Initiator::Scsi(a), CommandClass::Write));
        // A's later PR OUT with its old key conflicts.
        assert_eq!(
            run(&mut res, a, 0x01, 0x05, 0xA, 0, 0).status,
            PrStatus::ReservationConflict
        );
        // RELEASE with the wrong type: INVALID RELEASE OF PERSISTENT RESERVATION.
        assert_eq!(
            run(&mut res, b, 0x02, 0x01, 0xB, 0, 0).status,
            PrStatus::CheckCondition(invalid_release())
        );
        // PREEMPT with a zero SA key (not All Registrants): invalid field.
        assert_eq!(
            run(&mut res, b, 0x04, 0x05, 0xB, 0, 0).status,
            PrStatus::CheckCondition(Sense::invalid_field_in_param(8, None))
        );
        good(&run(&mut res, b, 0x03, 0, 0xB, 0, 0));
        assert!(res.registrants().is_empty());
    }

    #[test]
    fn out_of_registrations() {
        let mut res = Reservation::new(false).with_max_registrants(1);
        good(&run(&mut res, nexus(1), 0x00, 0, 0, 1, 0));
        assert_eq!(
            run(&mut res, nexus(2), 0x00, 0, 0, 1, 0).status,
            PrStatus::CheckCondition(insufficient_registration_resources())
        );
    }

    #[test]
    fn spc2_reservation_of_another_nexus_conflicts() {
        let mut res = Reservation::new(false);
        res.legacy_reserve(nexus(1)).unwrap();
        assert_eq!(
            run(&mut res, nexus(2), 0x00, 0, 0, 0, 0).status,
            PrStatus::ReservationConflict,
            "even the no-op REGISTER"
        );
        good(&run(&mut res, nexus(1), 0x00, 0, 0, 1, 0));
    }
}
