//! Implicit ALUA (SPC-4 §5.15): the SCSI view of the shared [`crate::ana`] states.
//!
//! Every SRP listener is a target port in a target port group of its own; the state of that
//! group for an LU is the state the listener reports for the ANA group of the LU's namespace:
//!
//! | ANA state | ALUA state | why |
//! |---|---|---|
//! | optimized | active/optimized (0h) | |
//! | non-optimized | active/non-optimized (1h) | |
//! | inaccessible | **standby** (2h) | the path is healthy but not the owner: standby keeps the commands a multipath host needs on every path — READ CAPACITY (the Linux sd driver sizes each path's disk at scan; a path sized 0 is refused by dm-multipath), PERSISTENT RESERVE IN/OUT (mpathpersist registers keys through every path), MODE SENSE — while I/O is refused; NVMe's inaccessible likewise still answers Identify with the size. The Linux `tur` path checker reports a standby path as a ghost, not as failed. |
//! | persistent loss | **unavailable** (3h) | the path will not serve the LU again: only INQUIRY, REPORT LUNS, REPORT TARGET PORT GROUPS and REQUEST SENSE remain |
//! | change | transitioning (Fh) | the host retries until the implicit transition time passes |
//!
//! Commands allowed per state (SPC-4 §5.15.2.4.4, .4.5, .5; READ CAPACITY in standby as
//! LIO): see [`check`]. Everything else is terminated with CHECK CONDITION, NOT READY,
//! LOGICAL UNIT NOT ACCESSIBLE and the state's qualifier: 0Bh target port in standby state,
//! 0Ch target port in unavailable state, 0Ah asymmetric access state transition. The check
//! runs after the unit attention check ([`super::ua`]) and before the reservation check, as in
//! LIO.
//!
//! rtgt supports implicit ALUA only (INQUIRY TPGS = 01b): states change by RPC, never by SET
//! TARGET PORT GROUPS. After any change of the states an LU reports, every I_T nexus of the LU
//! gets ASYMMETRIC ACCESS STATE CHANGED ([`establish_state_changed`]); which LUs is decided
//! by the model ([`crate::ana::AnaEvents::alua_changed`]).

use crate::ana::{AnaState, TpgEntry};

use super::Verdict;
use super::cdb::{Cdb, op};
use super::data_in::DataIn;
use super::sense::Sense;
use super::ua::{UaQueue, UnitAttention};

/// The primary target port asymmetric access states rtgt reports (SPC-4 table 184).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AluaState {
    /// Active/optimized.
    ActiveOptimized = 0x0,
    /// Active/non-optimized.
    ActiveNonOptimized = 0x1,
    /// Standby.
    Standby = 0x2,
    /// Unavailable.
    Unavailable = 0x3,
    /// Transitioning between states.
    Transitioning = 0xF,
}

impl AluaState {
    /// The ALUA state of a target port whose listener reports `s` (see the module table).
    pub const fn from_ana(s: AnaState) -> AluaState {
        match s {
            AnaState::Optimized => AluaState::ActiveOptimized,
            AnaState::NonOptimized => AluaState::ActiveNonOptimized,
            AnaState::Inaccessible => AluaState::Standby,
            AnaState::PersistentLoss => AluaState::Unavailable,
            AnaState::Change => AluaState::Transitioning,
        }
    }

    /// The ASYMMETRIC ACCESS STATE code.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The NOT READY sense for commands this state does not allow; `None` for the active
    /// states.
    pub const fn not_ready(self) -> Option<Sense> {
        match self {
            AluaState::ActiveOptimized | AluaState::ActiveNonOptimized => None,
            AluaState::Standby => Some(Sense::not_ready(ascq::STANDBY)),
            AluaState::Unavailable => Some(Sense::not_ready(ascq::UNAVAILABLE)),
            AluaState::Transitioning => Some(Sense::not_ready(ascq::TRANSITIONING)),
        }
    }
}

/// Qualifiers of ASC 04h (LOGICAL UNIT NOT ACCESSIBLE) for the ALUA states.
pub mod ascq {
    /// ASYMMETRIC ACCESS STATE TRANSITION.
    pub const TRANSITIONING: u8 = 0x0A;
    /// TARGET PORT IN STANDBY STATE.
    pub const STANDBY: u8 = 0x0B;
    /// TARGET PORT IN UNAVAILABLE STATE.
    pub const UNAVAILABLE: u8 = 0x0C;
}

/// SUPPORTED STATES byte of a target port group descriptor: T_SUP, U_SUP, S_SUP, AN_SUP,
/// AO_SUP (no offline, no LBA dependent).
pub const SUPPORTED_STATES: u8 = 0x80 | 0x08 | 0x04 | 0x02 | 0x01;

/// TPGS field of standard INQUIRY byte 5 (bits 5:4): implicit asymmetric access only.
pub const TPGS_IMPLICIT: u8 = 0b01 << 4;

/// Standard INQUIRY byte 5 with TPGS set to implicit ALUA.
pub const fn inquiry_byte5(byte5: u8) -> u8 {
    (byte5 & !0x30) | TPGS_IMPLICIT
}

/// MAINTENANCE IN service action REPORT TARGET PORT GROUPS.
pub const SA_REPORT_TARGET_PORT_GROUPS: u8 = 0x0A;
/// MAINTENANCE OUT service action SET TARGET PORT GROUPS (not supported: implicit ALUA; the
/// state check still lets it through where SPC-4 allows it, to be refused as unsupported).
pub const SA_SET_TARGET_PORT_GROUPS: u8 = 0x0A;

/// Operation codes the state check names that the device server does not otherwise know.
pub mod opc {
    /// SEND DIAGNOSTIC.
    pub const SEND_DIAGNOSTIC: u8 = 0x1D;
    /// RECEIVE DIAGNOSTIC RESULTS.
    pub const RECEIVE_DIAGNOSTIC_RESULTS: u8 = 0x1C;
    /// WRITE BUFFER.
    pub const WRITE_BUFFER: u8 = 0x3B;
    /// READ BUFFER(10).
    pub const READ_BUFFER: u8 = 0x3C;
    /// LOG SELECT.
    pub const LOG_SELECT: u8 = 0x4C;
    /// LOG SENSE.
    pub const LOG_SENSE: u8 = 0x4D;
    /// PERSISTENT RESERVE IN.
    pub const PERSISTENT_RESERVE_IN: u8 = 0x5E;
    /// PERSISTENT RESERVE OUT.
    pub const PERSISTENT_RESERVE_OUT: u8 = 0x5F;
    /// MAINTENANCE OUT (SET TARGET PORT GROUPS is service action 0Ah).
    pub const MAINTENANCE_OUT: u8 = 0xA4;
}

/// Designator type of a relative target port identifier.
pub const DESIGNATOR_RELATIVE_PORT: u8 = 0x4;
/// Designator type of a target port group.
pub const DESIGNATOR_TARGET_PORT_GROUP: u8 = 0x5;

/// A VPD 83h designator of a target port (PIV = 1, association = target port, binary) with a
/// 16-bit identifier in bytes 2-3 of its 4-byte body.
const fn port_designator(protocol_id: u8, kind: u8, id: u16) -> [u8; 8] {
    let id = id.to_be_bytes();
    [
        (protocol_id & 0x0F) << 4 | 0x01,
        0x80 | 0x10 | kind,
        0,
        4,
        0,
        0,
        id[0],
        id[1],
    ]
}

/// VPD 83h RELATIVE TARGET PORT designator (type 4).
pub const fn relative_port_designator(protocol_id: u8, relative_port: u16) -> [u8; 8] {
    port_designator(protocol_id, DESIGNATOR_RELATIVE_PORT, relative_port)
}

/// VPD 83h TARGET PORT GROUP designator (type 5).
pub const fn target_port_group_designator(protocol_id: u8, tpg_id: u16) -> [u8; 8] {
    port_designator(protocol_id, DESIGNATOR_TARGET_PORT_GROUP, tpg_id)
}

/// May a command (its CDB) run through a target port in `state`?
pub fn check(state: AluaState, cdb: &[u8]) -> Result<(), Sense> {
    let Some(sense) = state.not_ready() else {
        return Ok(());
    };
    let opcode = cdb.first().copied().unwrap_or(0);
    let sa = cdb.get(1).copied().unwrap_or(0) & 0x1F;
    // Everywhere: INQUIRY, REPORT LUNS, REPORT TARGET PORT GROUPS, REQUEST SENSE, and the echo
    // buffer modes of READ BUFFER and WRITE BUFFER.
    let everywhere = match opcode {
        op::INQUIRY | op::REPORT_LUNS | op::REQUEST_SENSE => true,
        op::MAINTENANCE_IN => sa == SA_REPORT_TARGET_PORT_GROUPS,
        opc::READ_BUFFER => matches!(sa, 0x0A | 0x0B),
        opc::WRITE_BUFFER => sa == 0x0A,
        _ => false,
    };
    let allowed = everywhere
        || match state {
            AluaState::Standby => match opcode {
                opc::LOG_SELECT
                | opc::LOG_SENSE
                | op::MODE_SELECT_6
                | op::MODE_SELECT_10
                | op::MODE_SENSE_6
                | op::MODE_SENSE_10
                | opc::RECEIVE_DIAGNOSTIC_RESULTS
                | opc::SEND_DIAGNOSTIC
                | opc::PERSISTENT_RESERVE_IN
                | opc::PERSISTENT_RESERVE_OUT
                | op::READ_CAPACITY_10 => true,
                op::SERVICE_ACTION_IN_16 => sa == op::SA_READ_CAPACITY_16,
                opc::MAINTENANCE_OUT => sa == SA_SET_TARGET_PORT_GROUPS,
                _ => false,
            },
            AluaState::Unavailable => {
                opcode == opc::MAINTENANCE_OUT && sa == SA_SET_TARGET_PORT_GROUPS
            }
            _ => false,
        };
    if allowed { Ok(()) } else { Err(sense) }
}

/// REPORT TARGET PORT GROUPS (MAINTENANCE IN, service action 0Ah; SPC-4 §6.36) for an LU whose
/// target port groups are `tpgs` (from [`crate::ana::AnaModel::tpgs_for`]), with the implicit
/// transition time (ANATT) in seconds for the extended header.
pub fn report_target_port_groups(
    cdb: &[u8],
    tpgs: &[TpgEntry],
    implicit_transition_secs: u8,
    data_in: &mut [u8],
) -> Verdict {
    let Some((c, _)) = Cdb::new(cdb) else {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(0, None));
    };
    if c.opcode() != op::MAINTENANCE_IN || c.u8(1) & 0x1F != SA_REPORT_TARGET_PORT_GROUPS {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(4)));
    }
    let extended = match c.u8(1) >> 5 {
        0 => false,
        1 => true,
        _ => return Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(7))),
    };
    let mut w = DataIn::new(data_in, c.be32(6));
    let desc_len: usize = tpgs.len() * 12;
    let header_extra = if extended { 4 } else { 0 };
    // RETURN DATA LENGTH: everything after itself (n - 3).
    let rdl = u32::try_from(header_extra + desc_len).unwrap_or(u32::MAX);
    w.be32(rdl);
    if extended {
        w.u8(0x10); // FORMAT TYPE 001b
        w.u8(implicit_transition_secs);
        w.zeros(2);
    }
    for t in tpgs {
        w.u8(AluaState::from_ana(t.state).code()); // PREF 0
        w.u8(SUPPORTED_STATES);
        w.be16(t.tpg_id);
        w.u8(0);
        w.u8(if t.altered { 0x02 } else { 0x00 }); // STATUS CODE: altered by implicit ALUA
        w.u8(0); // vendor specific
        w.u8(1); // TARGET PORT COUNT
        w.zeros(2); // obsolete
        w.be16(t.relative_port);
    }
    Verdict::DataIn { len: w.finish() }
}

/// Establishes ASYMMETRIC ACCESS STATE CHANGED (2Ah/06h) on the given unit attention queues
/// (every I_T nexus of an LU whose states changed).
pub fn establish_state_changed<'a, const N: usize>(
    queues: impl IntoIterator<Item = &'a mut UaQueue<N>>,
) {
    for q in queues {
        q.establish(UnitAttention::AsymmetricAccessStateChanged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scsi::ua::UaCheck;
    use crate::scsi::{PROTOCOL_ID_SRP, SenseKey};

    fn rtpg_cdb(format: u8, alloc: u32) -> [u8; 12] {
        let a = alloc.to_be_bytes();
        [
            0xA3,
            format << 5 | 0x0A,
            0,
            0,
            0,
            0,
            a[0],
            a[1],
            a[2],
            a[3],
            0,
            0,
        ]
    }

    fn tpgs() -> Vec<TpgEntry> {
        vec![
            TpgEntry {
                tpg_id: 0x0011,
                relative_port: 1,
                state: AnaState::Optimized,
                altered: false,
            },
            TpgEntry {
                tpg_id: 0x0102,
                relative_port: 0x0203,
                state: AnaState::Inaccessible,
                altered: true,
            },
        ]
    }

    const DESC_A: [u8; 12] = [0x00, 0x8F, 0x00, 0x11, 0, 0x00, 0, 1, 0, 0, 0x00, 0x01];
    const DESC_B: [u8; 12] = [0x02, 0x8F, 0x01, 0x02, 0, 0x02, 0, 1, 0, 0, 0x02, 0x03];

    #[test]
    fn state_mapping() {
        let m: Vec<u8> = crate::ana::ALL_STATES
            .iter()
            .map(|s| AluaState::from_ana(*s).code())
            .collect();
        assert_eq!(m, [0x0, 0x1, 0x2, 0x3, 0xF]);
    }

    #[test]
    fn rtpg_length_only_format() {
        let mut b = [0xEEu8; 64];
        let out = report_target_port_groups(&rtpg_cdb(0, 64), &tpgs(), 10, &mut b);
        assert_eq!(out, Verdict::DataIn { len: 28 });
        let mut want = vec![0, 0, 0, 24];
        want.extend(DESC_A);
        want.extend(DESC_B);
        assert_eq!(&b[..28], &want[..]);
    }

    #[test]
    fn rtpg_extended_format() {
        let mut b = [0xEEu8; 64];
        let out = report_target_port_groups(&rtpg_cdb(1, 64), &tpgs(), 10, &mut b);
        assert_eq!(out, Verdict::DataIn { len: 32 });
        let mut want = vec![0, 0, 0, 28, 0x10, 10, 0, 0];
        want.extend(DESC_A);
        want.extend(DESC_B);
        assert_eq!(&b[..32], &want[..]);
    }

    /// The parse scsi_dh_alua does: total = RETURN DATA LENGTH + 4; descriptors from byte 8
    /// with the extended header, else 4; each 8 + 4 × TARGET PORT COUNT bytes.
    fn linux_parse(b: &[u8]) -> (Option<u8>, Vec<(u16, u8, u8)>) {
        let len = u32::from_be_bytes(b[0..4].try_into().unwrap()) as usize + 4;
        let ext = b[4] & 0x70 == 0x10;
        let tmo = (ext && b[5] != 0).then_some(b[5]);
        let mut k = if ext { 8 } else { 4 };
        let mut v = Vec::new();
        while k < len {
            let d = &b[k..];
            v.push((u16::from_be_bytes([d[2], d[3]]), d[0] & 0x0F, d[1]));
            k += 8 + usize::from(d[7]) * 4;
        }
        assert_eq!(k, len, "descriptors end exactly at the returned length");
        (tmo, v)
    }

    #[test]
    fn rtpg_as_the_linux_host_reads_it() {
        for fmt in [0, 1] {
            let mut b = [0u8; 64];
            report_target_port_groups(&rtpg_cdb(fmt, 64), &tpgs(), 10, &mut b);
            let (tmo, groups) = linux_parse(&b);
            assert_eq!(tmo, (fmt == 1).then_some(10));
            assert_eq!(groups, vec![(0x11, 0x0, 0x8F), (0x102, 0x2, 0x8F)]);
        }
    }

    #[test]
    fn rtpg_truncates_to_the_allocation_length_but_reports_the_full_length() {
        let mut b = [0xEEu8; 64];
        let out = report_target_port_groups(&rtpg_cdb(1, 10), &tpgs(), 10, &mut b);
        assert_eq!(out, Verdict::DataIn { len: 10 });
        assert_eq!(&b[..10], &[0, 0, 0, 28, 0x10, 10, 0, 0, 0x00, 0x8F]);
        assert_eq!(b[10], 0xEE, "nothing written past the allocation length");
        let out = report_target_port_groups(&rtpg_cdb(0, 0), &tpgs(), 10, &mut b);
        assert_eq!(out, Verdict::DataIn { len: 0 });
        // No target port groups at all.
        let out = report_target_port_groups(&rtpg_cdb(0, 64), &[], 10, &mut b);
        assert_eq!(out, Verdict::DataIn { len: 4 });
        assert_eq!(&b[..4], &[0, 0, 0, 0]);
    }

    #[test]
    fn rtpg_refuses_other_formats_and_short_cdbs() {
        let mut b = [0u8; 64];
        for fmt in 2..8 {
            assert_eq!(
                report_target_port_groups(&rtpg_cdb(fmt, 64), &tpgs(), 10, &mut b),
                Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(7)))
            );
        }
        let cdb = rtpg_cdb(0, 64);
        assert_eq!(
            report_target_port_groups(&cdb[..11], &tpgs(), 10, &mut b),
            Verdict::CheckCondition(Sense::invalid_field_in_cdb(0, None))
        );
        let mut other_sa = cdb;
        other_sa[1] = 0x0C;
        assert_eq!(
            report_target_port_groups(&other_sa, &tpgs(), 10, &mut b),
            Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(4)))
        );
    }

    #[test]
    fn inquiry_tpgs_field() {
        assert_eq!(inquiry_byte5(0x00), 0x10);
        // Keeps the other bits (PROTECT, 3PC, ACC, SCCS), replaces an old TPGS.
        assert_eq!(inquiry_byte5(0xC9), 0xD9);
        assert_eq!(inquiry_byte5(0x30), 0x10);
        assert_eq!(inquiry_byte5(0x10) >> 4 & 3, 1, "TPGS = 01b: implicit");
    }

    #[test]
    fn vpd_83h_designators() {
        assert_eq!(
            relative_port_designator(PROTOCOL_ID_SRP, 0x0102),
            [0x41, 0x94, 0, 4, 0, 0, 0x01, 0x02]
        );
        assert_eq!(
            target_port_group_designator(PROTOCOL_ID_SRP, 0x0A0B),
            [0x41, 0x95, 0, 4, 0, 0, 0x0A, 0x0B]
        );
        // What scsi_vpd_tpg_id looks for: association target port (byte 1 bits 5:4 = 01b),
        // type 5, group id in bytes 6-7.
        let d = target_port_group_designator(PROTOCOL_ID_SRP, 7);
        assert_eq!(d[1] & 0x30, 0x10);
        assert_eq!(d[1] & 0x0F, 5);
        assert_eq!(u16::from_be_bytes([d[6], d[7]]), 7);
        assert_eq!(d[0] & 0x0F, 1, "binary code set");
        assert_eq!(usize::from(d[3]) + 4, d.len());
    }

    #[test]
    fn not_ready_sense_bytes() {
        let b = AluaState::Standby.not_ready().unwrap().to_fixed();
        assert_eq!(
            b,
            [
                0x70, 0, 0x02, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x04, 0x0B, 0, 0, 0, 0
            ]
        );
        let b = AluaState::Unavailable.not_ready().unwrap().to_fixed();
        assert_eq!((b[2], b[12], b[13]), (0x02, 0x04, 0x0C));
        let b = AluaState::Transitioning.not_ready().unwrap().to_fixed();
        assert_eq!((b[2], b[12], b[13]), (0x02, 0x04, 0x0A));
        assert_eq!(AluaState::ActiveOptimized.not_ready(), None);
        assert_eq!(AluaState::ActiveNonOptimized.not_ready(), None);
    }

    const READ_10: [u8; 10] = [0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0];
    const WRITE_16: [u8; 16] = [0x8A, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0];
    const TUR: [u8; 6] = [0; 6];
    const INQUIRY: [u8; 6] = [0x12, 0, 0, 0, 96, 0];
    const REPORT_LUNS: [u8; 12] = [0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0];
    const REQUEST_SENSE: [u8; 6] = [0x03, 0, 0, 0, 18, 0];
    const RTPG: [u8; 12] = [0xA3, 0x0A, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0];
    const RSOC: [u8; 12] = [0xA3, 0x0C, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0];
    const RC10: [u8; 10] = [0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    const RC16: [u8; 16] = [0x9E, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0];
    const MODE_SENSE_6: [u8; 6] = [0x1A, 0, 0x3F, 0, 192, 0];
    const PR_IN: [u8; 10] = [0x5E, 0, 0, 0, 0, 0, 0, 0, 8, 0];
    const PR_OUT: [u8; 10] = [0x5F, 0, 0, 0, 0, 0, 0, 0, 24, 0];
    const SYNC_CACHE: [u8; 10] = [0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    const READ_BUFFER_ECHO: [u8; 10] = [0x3C, 0x0A, 0, 0, 0, 0, 0, 0, 4, 0];
    const READ_BUFFER_DATA: [u8; 10] = [0x3C, 0x02, 0, 0, 0, 0, 0, 0, 4, 0];
    const SA_IN_OTHER: [u8; 16] = [0x9E, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0];

    #[test]
    fn commands_allowed_per_state() {
        let everywhere: [&[u8]; 5] = [
            &INQUIRY,
            &REPORT_LUNS,
            &REQUEST_SENSE,
            &RTPG,
            &READ_BUFFER_ECHO,
        ];
        let standby_only: [&[u8]; 5] = [&RC10, &RC16, &MODE_SENSE_6, &PR_IN, &PR_OUT];
        let never: [&[u8]; 7] = [
            &READ_10,
            &WRITE_16,
            &TUR,
            &SYNC_CACHE,
            &RSOC,
            &READ_BUFFER_DATA,
            &SA_IN_OTHER,
        ];
        for st in [AluaState::ActiveOptimized, AluaState::ActiveNonOptimized] {
            for c in everywhere.iter().chain(&standby_only).chain(&never) {
                assert_eq!(check(st, c), Ok(()), "{st:?} {:#04x}", c[0]);
            }
        }
        for (st, q) in [
            (AluaState::Standby, 0x0B),
            (AluaState::Unavailable, 0x0C),
            (AluaState::Transitioning, 0x0A),
        ] {
            for c in everywhere {
                assert_eq!(check(st, c), Ok(()), "{st:?} {:#04x}", c[0]);
            }
            for c in never {
                let s = check(st, c).unwrap_err();
                assert_eq!(
                    (s.key, s.asc, s.ascq),
                    (SenseKey::NotReady, 0x04, q),
                    "{st:?} {:#04x}",
                    c[0]
                );
            }
            for c in standby_only {
                assert_eq!(
                    check(st, c).is_ok(),
                    st == AluaState::Standby,
                    "{st:?} {:#04x}",
                    c[0]
                );
            }
        }
        assert_eq!(check(AluaState::Standby, &[]), Err(Sense::not_ready(0x0B)));
        // SET TARGET PORT GROUPS passes the state check in standby and unavailable (to be
        // refused later as unsupported), not while transitioning.
        let stpg = [0xA4u8, 0x0A, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0];
        assert_eq!(check(AluaState::Standby, &stpg), Ok(()));
        assert_eq!(check(AluaState::Unavailable, &stpg), Ok(()));
        assert_eq!(
            check(AluaState::Transitioning, &stpg),
            Err(Sense::not_ready(0x0A))
        );
    }

    #[test]
    fn state_change_unit_attention_on_every_nexus() {
        let mut q: Vec<UaQueue> = (0..3).map(|_| UaQueue::empty()).collect();
        establish_state_changed(q.iter_mut());
        for n in &mut q {
            // INQUIRY does not report it; RTPG does (then the host re-reads the states).
            assert_eq!(n.check(&INQUIRY), UaCheck::Proceed);
            let UaCheck::Report(s) = n.check(&RTPG) else {
                panic!("no unit attention")
            };
            assert_eq!(s.to_fixed()[2], 0x06);
            assert_eq!((s.asc, s.ascq), (0x2A, 0x06));
            assert_eq!(n.check(&RTPG), UaCheck::Proceed, "reported once");
        }
    }
}
