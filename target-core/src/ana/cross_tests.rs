//! One failover driven through the model and read back through both translations: the NVMe
//! ANA log page and I/O status, and the SCSI REPORT TARGET PORT GROUPS data, state check and
//! unit attentions. Both protocols must tell the same story at every step.

use std::time::{Duration, Instant};

use super::*;
use crate::nvme::ana::{self as nvme_ana, ANA_CHANGE_DW0};
use crate::nvme::ana_log;
use crate::scsi::alua::{self, AluaState};
use crate::scsi::ua::{UaCheck, UaQueue};
use crate::scsi::{SenseKey, Verdict};

/// NVMe listeners of "gateway A" and "gateway B", and their SRP target ports.
const NA: ListenerId = ListenerId(10);
const NB: ListenerId = ListenerId(20);
const SA: ListenerId = ListenerId(11);
const SB: ListenerId = ListenerId(21);

const READ_10: [u8; 10] = [0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0];
const RTPG_EXT: [u8; 12] = [0xA3, 0x20 | 0x0A, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0];

/// The ANA state byte of the first descriptor of `id`'s log page, and its NSIDs.
fn nvme_view(m: &AnaModel, id: ListenerId) -> (u8, Vec<u32>) {
    let log = m.log_for(id, |_| true).unwrap();
    let mut b = vec![0u8; ana_log::log_size(&log, false) as usize];
    ana_log::read(&log, false, 0, &mut b).unwrap();
    assert_eq!(
        u64::from_le_bytes(b[0..8].try_into().unwrap()),
        m.change_count()
    );
    let n = u32::from_le_bytes(b[20..24].try_into().unwrap()) as usize;
    let nsids = (0..n)
        .map(|i| u32::from_le_bytes(b[48 + 4 * i..52 + 4 * i].try_into().unwrap()))
        .collect();
    (b[32], nsids)
}

/// The ALUA state RTPG reports for target port group `tpg` of LU 1.
fn rtpg_state(m: &AnaModel, tpg: u16) -> u8 {
    let mut b = [0u8; 256];
    let Verdict::DataIn { len } = alua::report_target_port_groups(
        &RTPG_EXT,
        &m.tpgs_for(1).unwrap(),
        m.config().anatt_secs,
        &mut b,
    ) else {
        panic!("RTPG failed")
    };
    assert_eq!(
        b[5],
        m.config().anatt_secs,
        "implicit transition time = ANATT"
    );
    let mut k = 8;
    while k < len as usize {
        if u16::from_be_bytes([b[k + 2], b[k + 3]]) == tpg {
            return b[k] & 0x0F;
        }
        k += 12;
    }
    panic!("no group {tpg}")
}

/// NVMe I/O admission and SCSI state check agree with the reported state.
fn assert_consistent(m: &AnaModel, nvme: ListenerId, srp: ListenerId, tpg: u16, want: AnaState) {
    assert_eq!(m.reported(nvme, 1), Some(want));
    assert_eq!(m.reported(srp, 1), Some(want));
    assert_eq!(nvme_view(m, nvme).0, want.code());
    let st = m.path_view(nvme).unwrap().state(1).unwrap();
    assert_eq!(nvme_ana::check_io(st), nvme_ana::check_io(want));
    assert_eq!(rtpg_state(m, tpg), AluaState::from_ana(want).code());
    let scsi = alua::check(AluaState::from_ana(want), &READ_10);
    assert_eq!(scsi.is_ok(), want.is_accessible());
    assert_eq!(nvme_ana::check_io(want).is_ok(), want.is_accessible());
}

/// Delivers events the way the wiring will: AEN DW0 per listener, UA per nexus of each LU.
fn deliver(ev: &AnaEvents, nexuses: &mut [UaQueue]) -> Vec<(ListenerId, u32)> {
    if ev.alua_changed.contains(&1) {
        alua::establish_state_changed(nexuses.iter_mut());
    }
    ev.ana_changed
        .iter()
        .map(|&l| (l, ANA_CHANGE_DW0))
        .collect()
}

#[test]
fn failover_and_failback_read_the_same_through_nvme_and_scsi() {
    let mut m = AnaModel::new(AnaConfig::new(8)).unwrap();
    m.add_namespace(1, None, ActiveActive::Unsafe).unwrap();
    let port = |rel, tpg| {
        Some(ScsiPort {
            relative_port: rel,
            tpg_id: tpg,
        })
    };
    // Gateway A owns group 1 over NVMe and SRP; gateway B's paths are inaccessible.
    m.add_listener(NA, AnaState::Optimized, None).unwrap();
    m.add_listener(SA, AnaState::Optimized, port(1, 1)).unwrap();
    m.add_listener(NB, AnaState::Inaccessible, None).unwrap();
    m.add_listener(SB, AnaState::Inaccessible, port(2, 2))
        .unwrap();
    assert_eq!(nvme_view(&m, NA), (AnaState::Optimized.code(), vec![1]));
    assert_consistent(&m, NA, SA, 1, AnaState::Optimized);
    assert_consistent(&m, NB, SB, 2, AnaState::Inaccessible);
    // Promoting B before A gave the group up is refused, in both domains.
    let t0 = Instant::now();
    assert!(
        m.set_state(NB, Some(1), AnaState::Optimized, Duration::ZERO, t0)
            .is_err()
    );
    assert!(
        m.set_state(SB, Some(1), AnaState::Optimized, Duration::ZERO, t0)
            .is_err()
    );
    // Two SRP nexuses on LU 1 (one through each port).
    let mut nexuses = [UaQueue::empty(), UaQueue::empty()];

    // Gateway A gives up the group, draining for up to 3 s.
    let ev = m
        .set_state(
            NA,
            Some(1),
            AnaState::Inaccessible,
            Duration::from_secs(3),
            t0,
        )
        .unwrap();
    assert_eq!(deliver(&ev, &mut nexuses), vec![(NA, 0x000C_0302)]);
    assert!(nexuses[0].pending().is_empty(), "no SRP port changed yet");
    let ev = m
        .set_state(
            SA,
            Some(1),
            AnaState::Inaccessible,
            Duration::from_secs(3),
            t0,
        )
        .unwrap();
    assert_eq!(deliver(&ev, &mut nexuses), vec![(SA, 0x000C_0302)]);
    assert_consistent(&m, NA, SA, 1, AnaState::Change);
    assert_eq!(
        nvme_ana::check_io(AnaState::Change),
        Err(nvme_ana::ANA_TRANSITION)
    );
    for n in &mut nexuses {
        let UaCheck::Report(s) = n.check(&READ_10) else {
            panic!("no unit attention")
        };
        assert_eq!(
            (s.key, s.asc, s.ascq),
            (SenseKey::UnitAttention, 0x2A, 0x06)
        );
    }

    // Gateway B takes it over at once, NVMe and SRP.
    set_now(&mut m, NB, AnaState::Optimized, t0);
    let ev = set_now(&mut m, SB, AnaState::Optimized, t0);
    assert_eq!(deliver(&ev, &mut nexuses), vec![(SB, 0x000C_0302)]);
    assert_consistent(&m, NB, SB, 2, AnaState::Optimized);
    assert!(nexuses.iter().all(|n| n.pending().len() == 1));

    // A's drain ends early; it is inaccessible: NVMe 302h, SCSI standby.
    let ev = m.finish_transition(NA, Some(1)).unwrap();
    assert_eq!(ev.ana_changed, vec![NA]);
    m.finish_transition(SA, None).unwrap();
    assert_consistent(&m, NA, SA, 1, AnaState::Inaccessible);
    assert_eq!(
        nvme_ana::check_io(AnaState::Inaccessible),
        Err(nvme_ana::ANA_INACCESSIBLE)
    );
    let s = alua::check(AluaState::Standby, &READ_10).unwrap_err();
    assert_eq!((s.key, s.asc, s.ascq), (SenseKey::NotReady, 0x04, 0x0B));

    // Failback: demote B with a transition that runs to its deadline, then promote A.
    let t1 = t0 + Duration::from_secs(60);
    m.set_state(
        NB,
        Some(1),
        AnaState::Inaccessible,
        Duration::from_secs(2),
        t1,
    )
    .unwrap();
    m.set_state(
        SB,
        Some(1),
        AnaState::Inaccessible,
        Duration::from_secs(2),
        t1,
    )
    .unwrap();
    assert_eq!(rtpg_state(&m, 2), AluaState::Transitioning.code());
    assert_eq!(
        alua::check(AluaState::Transitioning, &READ_10)
            .unwrap_err()
            .ascq,
        0x0A
    );
    set_now(&mut m, NA, AnaState::Optimized, t1);
    set_now(&mut m, SA, AnaState::Optimized, t1);
    assert_consistent(&m, NA, SA, 1, AnaState::Optimized);
    assert!(m.poll(t1 + Duration::from_millis(1999)).is_empty());
    let ev = m.poll(t1 + Duration::from_secs(2));
    assert_eq!(ev.ana_changed, vec![NB, SB]);
    assert_eq!(ev.alua_changed, vec![1]);
    assert_consistent(&m, NB, SB, 2, AnaState::Inaccessible);
}

fn set_now(m: &mut AnaModel, id: ListenerId, s: AnaState, now: Instant) -> AnaEvents {
    m.set_state(id, Some(1), s, Duration::ZERO, now).unwrap()
}
