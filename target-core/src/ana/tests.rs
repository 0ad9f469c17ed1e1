//! Model tests: validation, transactional refusals, events, change counts, transitions and
//! what the model hands out.

use std::time::{Duration, Instant};

use super::*;

const A: ListenerId = ListenerId(1);
const B: ListenerId = ListenerId(2);
const S: ListenerId = ListenerId(3);
const T: ListenerId = ListenerId(4);

fn srp(rel: u16, tpg: u16) -> Option<ScsiPort> {
    Some(ScsiPort {
        relative_port: rel,
        tpg_id: tpg,
    })
}

/// 4 groups; ns 1 and 3 in group 1, ns 2 in group 2 (all safe); NVMe listeners A (optimized)
/// and B (inaccessible); SRP listener S (port 1, group 11, optimized).
fn model() -> AnaModel {
    let mut m = AnaModel::new(AnaConfig::new(4)).unwrap();
    m.add_namespace(1, None, ActiveActive::Safe).unwrap();
    m.add_namespace(2, None, ActiveActive::Safe).unwrap();
    m.add_namespace(3, Some(1), ActiveActive::Safe).unwrap();
    m.add_listener(A, AnaState::Optimized, None).unwrap();
    m.add_listener(B, AnaState::Inaccessible, None).unwrap();
    m.add_listener(S, AnaState::Optimized, srp(1, 11)).unwrap();
    m
}

fn set(
    m: &mut AnaModel,
    id: ListenerId,
    g: Option<u32>,
    s: AnaState,
) -> Result<AnaEvents, AnaError> {
    m.set_state(id, g, s, Duration::ZERO, Instant::now())
}

#[test]
fn config_limits() {
    assert_eq!(
        AnaModel::new(AnaConfig::new(0)),
        Err(AnaError::GroupLimit(0))
    );
    assert_eq!(
        AnaModel::new(AnaConfig::new(65536)),
        Err(AnaError::GroupLimit(65536))
    );
    assert!(AnaModel::new(AnaConfig::new(65535)).is_ok());
    let cfg = AnaConfig {
        anagrpmax: 1,
        anatt_secs: 0,
    };
    assert_eq!(AnaModel::new(cfg), Err(AnaError::ZeroAnatt));
    assert_eq!(AnaConfig::new(8).anatt(), Duration::from_secs(10));
}

#[test]
fn namespace_groups_default_to_the_nsid_and_are_validated() {
    let mut m = model();
    assert_eq!(m.ns_group(1), Some(1));
    assert_eq!(m.ns_group(2), Some(2));
    assert_eq!(m.ns_group(3), Some(1));
    let before = m.clone();
    // NSID 5 > ANAGRPMAX 4: its default group does not exist.
    assert_eq!(
        m.add_namespace(5, None, ActiveActive::Safe),
        Err(AnaError::InvalidGroup { group: 5, max: 4 })
    );
    assert_eq!(
        m.add_namespace(6, Some(0), ActiveActive::Safe),
        Err(AnaError::InvalidGroup { group: 0, max: 4 })
    );
    assert_eq!(
        m.add_namespace(0, Some(1), ActiveActive::Safe),
        Err(AnaError::InvalidNsid(0))
    );
    assert_eq!(
        m.add_namespace(u32::MAX, Some(1), ActiveActive::Safe),
        Err(AnaError::InvalidNsid(u32::MAX))
    );
    assert_eq!(
        m.add_namespace(2, Some(3), ActiveActive::Safe),
        Err(AnaError::DuplicateNamespace(2))
    );
    assert_eq!(m.set_ns_group(9, 1), Err(AnaError::UnknownNamespace(9)));
    assert_eq!(
        m.set_ns_group(1, 5),
        Err(AnaError::InvalidGroup { group: 5, max: 4 })
    );
    assert_eq!(m.remove_namespace(9), Err(AnaError::UnknownNamespace(9)));
    assert_eq!(m, before, "refusals change nothing");
    // A namespace with a high NSID in an explicit group.
    m.add_namespace(100, Some(4), ActiveActive::Safe).unwrap();
    assert_eq!(m.ns_group(100), Some(4));
}

#[test]
fn a_new_listener_applies_its_state_to_every_group() {
    let m = model();
    for g in 1..=4 {
        assert_eq!(m.reported(A, g), Some(AnaState::Optimized));
        assert_eq!(m.reported(B, g), Some(AnaState::Inaccessible));
    }
    assert_eq!(m.reported(A, 0), None);
    assert_eq!(m.reported(A, 5), None);
    assert_eq!(m.reported(T, 1), None);
    assert_eq!(m.listeners().collect::<Vec<_>>(), vec![A, B, S]);
    let mut m = m;
    assert_eq!(
        m.add_listener(A, AnaState::Optimized, None),
        Err(AnaError::DuplicateListener(A))
    );
    assert_eq!(
        m.add_listener(T, AnaState::Change, None),
        Err(AnaError::ChangeNotSettable)
    );
}

#[test]
fn set_state_refusals_change_nothing() {
    let mut m = model();
    let before = m.clone();
    let now = Instant::now();
    assert_eq!(
        set(&mut m, T, None, AnaState::Optimized),
        Err(AnaError::UnknownListener(T))
    );
    assert_eq!(
        set(&mut m, A, Some(0), AnaState::Inaccessible),
        Err(AnaError::InvalidGroup { group: 0, max: 4 })
    );
    assert_eq!(
        set(&mut m, A, Some(5), AnaState::Inaccessible),
        Err(AnaError::InvalidGroup { group: 5, max: 4 })
    );
    assert_eq!(
        set(&mut m, A, None, AnaState::Change),
        Err(AnaError::ChangeNotSettable)
    );
    assert_eq!(
        m.set_state(
            A,
            None,
            AnaState::Inaccessible,
            Duration::from_millis(10_001),
            now
        ),
        Err(AnaError::TransitionTooLong {
            ms: 10_001,
            anatt_secs: 10
        })
    );
    assert_eq!(
        m.finish_transition(T, None),
        Err(AnaError::UnknownListener(T))
    );
    assert_eq!(m.remove_listener(T), Err(AnaError::UnknownListener(T)));
    assert_eq!(m, before);
    // Exactly ANATT is allowed.
    m.set_state(
        A,
        None,
        AnaState::Inaccessible,
        Duration::from_secs(10),
        now,
    )
    .unwrap();
}

#[test]
fn nvme_listener_change_notifies_its_controllers_only() {
    let mut m = model();
    let c0 = m.change_count();
    let ev = set(&mut m, B, Some(1), AnaState::Optimized).unwrap();
    assert_eq!(ev.ana_changed, vec![B]);
    assert!(ev.alua_changed.is_empty(), "B is not a SCSI port");
    assert!(ev.ns_attr_changed.is_empty());
    assert_eq!(ev.change_count, c0 + 1);
    assert_eq!(m.change_count(), c0 + 1);
    assert_eq!(m.reported(B, 1), Some(AnaState::Optimized));
    assert_eq!(m.reported(B, 2), Some(AnaState::Inaccessible));
    // Only the changed descriptor carries the new count.
    let log = m.log_for(B, |_| true).unwrap();
    assert_eq!(log.change_count, c0 + 1);
    assert_eq!(log.groups[0].change_count, c0 + 1);
    assert_ne!(log.groups[1].change_count, c0 + 1);
}

#[test]
fn srp_listener_change_raises_the_ua_on_the_group_s_lus() {
    let mut m = model();
    let ev = set(&mut m, S, Some(1), AnaState::NonOptimized).unwrap();
    assert_eq!(ev.ana_changed, vec![S]);
    assert_eq!(ev.alua_changed, vec![1, 3], "LUs of group 1, not LU 2");
    let ev = set(&mut m, S, None, AnaState::Inaccessible).unwrap();
    assert_eq!(ev.alua_changed, vec![1, 2, 3]);
}

#[test]
fn setting_the_same_state_again_is_silent() {
    let mut m = model();
    let c0 = m.change_count();
    let ev = set(&mut m, A, None, AnaState::Optimized).unwrap();
    assert!(ev.is_empty());
    assert_eq!(ev.change_count, c0);
    assert_eq!(m.change_count(), c0);
}

#[test]
fn groups_without_namespaces_change_silently() {
    let mut m = model();
    let c0 = m.change_count();
    // Groups 3 and 4 hold no namespace: no descriptor, nothing for hosts to see.
    let ev = set(&mut m, S, Some(3), AnaState::Inaccessible).unwrap();
    assert!(ev.is_empty());
    assert_eq!(m.change_count(), c0);
    assert_eq!(m.reported(S, 3), Some(AnaState::Inaccessible));
    // Moving a namespace there makes it visible.
    let ev = m.set_ns_group(2, 3).unwrap();
    assert_eq!(ev.ns_attr_changed, vec![2]);
    assert_eq!(
        ev.ana_changed,
        vec![A, B, S],
        "NSID lists changed on every listener"
    );
    assert_eq!(
        ev.alua_changed,
        vec![2],
        "S reports inaccessible for group 3"
    );
    assert_eq!(m.change_count(), c0 + 1);
}

#[test]
fn moving_a_namespace_between_groups_in_the_same_state_raises_no_ua() {
    let mut m = model();
    let ev = m.set_ns_group(2, 1).unwrap();
    assert_eq!(ev.ns_attr_changed, vec![2]);
    assert!(ev.alua_changed.is_empty());
    assert_eq!(ev.ana_changed, vec![A, B, S]);
    let log = m.log_for(A, |_| true).unwrap();
    assert_eq!(log.groups.len(), 1);
    assert_eq!(log.groups[0].nsids, vec![1, 2, 3]);
}

#[test]
fn namespace_add_and_remove_change_the_nsid_lists() {
    let mut m = model();
    let ev = m.add_namespace(4, None, ActiveActive::Safe).unwrap();
    assert_eq!(ev.ana_changed, vec![A, B, S]);
    assert!(ev.alua_changed.is_empty() && ev.ns_attr_changed.is_empty());
    let ev = m.remove_namespace(3).unwrap();
    assert_eq!(ev.ana_changed, vec![A, B, S]);
    assert!(ev.alua_changed.is_empty());
}

#[test]
fn listener_add_and_remove_notify_nobody_else() {
    let mut m = model();
    let c0 = m.change_count();
    let ev = m.add_listener(T, AnaState::Optimized, srp(2, 12)).unwrap();
    assert!(ev.is_empty());
    assert_eq!(m.change_count(), c0);
    let ev = m.remove_listener(A).unwrap();
    assert!(ev.is_empty());
    assert_eq!(m.reported(A, 1), None);
}

#[test]
fn change_count_wraps_to_zero() {
    let mut m = model();
    m.chgcnt = u64::MAX;
    let ev = set(&mut m, A, Some(1), AnaState::NonOptimized).unwrap();
    assert_eq!(ev.change_count, 0);
    assert_eq!(m.log_for(A, |_| true).unwrap().groups[0].change_count, 0);
}

#[test]
fn transition_reports_change_until_its_deadline() {
    let mut m = model();
    let t0 = Instant::now();
    let c0 = m.change_count();
    let ev = m
        .set_state(B, Some(1), AnaState::Optimized, Duration::from_secs(2), t0)
        .unwrap();
    assert_eq!(ev.ana_changed, vec![B], "entering change is a change");
    assert_eq!(m.reported(B, 1), Some(AnaState::Change));
    assert_eq!(m.target(B, 1), Some(AnaState::Optimized));
    assert_eq!(
        m.reported(B, 2),
        Some(AnaState::Inaccessible),
        "other groups untouched"
    );
    let t = m.transition(B, 1).unwrap();
    assert_eq!(t.reported_at(t0), AnaState::Change);
    assert_eq!(m.next_deadline(), Some(t0 + Duration::from_secs(2)));
    // Before the deadline nothing happens.
    assert!(m.poll(t0 + Duration::from_millis(1999)).is_empty());
    assert_eq!(m.reported(B, 1), Some(AnaState::Change));
    // At the deadline the target applies and hosts are told again.
    let ev = m.poll(t0 + Duration::from_secs(2));
    assert_eq!(ev.ana_changed, vec![B]);
    assert_eq!(ev.change_count, c0 + 2);
    assert_eq!(m.reported(B, 1), Some(AnaState::Optimized));
    assert_eq!(m.next_deadline(), None);
    assert!(m.poll(t0 + Duration::from_secs(60)).is_empty());
}

#[test]
fn srp_transition_raises_the_ua_at_both_ends() {
    let mut m = model();
    let t0 = Instant::now();
    let ev = m
        .set_state(
            S,
            Some(2),
            AnaState::Inaccessible,
            Duration::from_secs(1),
            t0,
        )
        .unwrap();
    assert_eq!(ev.alua_changed, vec![2]);
    let tpg = m.tpgs_for(2).unwrap();
    assert_eq!(tpg[0].state, AnaState::Change);
    assert!(tpg[0].altered);
    let ev = m.poll(t0 + Duration::from_secs(1));
    assert_eq!(ev.alua_changed, vec![2]);
    assert_eq!(m.tpgs_for(2).unwrap()[0].state, AnaState::Inaccessible);
}

#[test]
fn finish_transition_ends_it_early() {
    let mut m = model();
    let t0 = Instant::now();
    m.set_state(A, None, AnaState::Inaccessible, Duration::from_secs(5), t0)
        .unwrap();
    m.set_state(B, Some(2), AnaState::Optimized, Duration::from_secs(3), t0)
        .unwrap();
    assert_eq!(m.next_deadline(), Some(t0 + Duration::from_secs(3)));
    let ev = m.finish_transition(A, Some(1)).unwrap();
    assert_eq!(ev.ana_changed, vec![A]);
    assert_eq!(m.reported(A, 1), Some(AnaState::Inaccessible));
    assert_eq!(m.reported(A, 2), Some(AnaState::Change));
    m.finish_transition(A, None).unwrap();
    assert_eq!(m.reported(A, 2), Some(AnaState::Inaccessible));
    // B's transition is still running and still due at its own deadline.
    assert_eq!(m.next_deadline(), Some(t0 + Duration::from_secs(3)));
    // Finishing a path without a transition is silent.
    assert!(m.finish_transition(A, None).unwrap().is_empty());
}

#[test]
fn a_new_target_replaces_a_running_transition() {
    let mut m = model();
    let t0 = Instant::now();
    m.set_state(
        A,
        Some(1),
        AnaState::Inaccessible,
        Duration::from_secs(5),
        t0,
    )
    .unwrap();
    // Same target again: the transition keeps running (idempotent).
    let ev = m
        .set_state(A, Some(1), AnaState::Inaccessible, Duration::ZERO, t0)
        .unwrap();
    assert!(ev.is_empty());
    assert_eq!(m.reported(A, 1), Some(AnaState::Change));
    // Back to optimized at once.
    let ev = set(&mut m, A, Some(1), AnaState::Optimized).unwrap();
    assert_eq!(ev.ana_changed, vec![A]);
    assert_eq!(m.reported(A, 1), Some(AnaState::Optimized));
    assert_eq!(m.next_deadline(), None);
}

fn unsafe_model() -> AnaModel {
    // ns 1 (unsafe) in group 1, ns 2 (safe) in group 2. A optimized, B inaccessible.
    let mut m = AnaModel::new(AnaConfig::new(4)).unwrap();
    m.add_namespace(1, None, ActiveActive::Unsafe).unwrap();
    m.add_namespace(2, None, ActiveActive::Safe).unwrap();
    m.add_listener(A, AnaState::Optimized, None).unwrap();
    m.add_listener(B, AnaState::Inaccessible, None).unwrap();
    m
}

#[test]
fn an_unsafe_backend_has_one_optimized_listener() {
    let mut m = unsafe_model();
    let before = m.clone();
    let err = set(&mut m, B, None, AnaState::Optimized).unwrap_err();
    assert_eq!(
        err,
        AnaError::SecondOptimized {
            group: 1,
            listeners: vec![A, B],
            nsid: 1,
            scsi: false
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("ANA group 1")
            && msg.contains("NVMe listeners (#1, #2)")
            && msg.contains("namespace 1"),
        "{msg}"
    );
    assert_eq!(m, before, "the whole request is refused, group 2 included");
    // The safe group may have two.
    set(&mut m, B, Some(2), AnaState::Optimized).unwrap();
    // Non-optimized is not optimized.
    set(&mut m, B, Some(1), AnaState::NonOptimized).unwrap();
    // A new listener cannot come up optimized for the owned group either.
    assert!(matches!(
        m.add_listener(T, AnaState::Optimized, None),
        Err(AnaError::SecondOptimized { group: 1, .. })
    ));
    m.add_listener(T, AnaState::Inaccessible, None).unwrap();
}

#[test]
fn nvme_and_scsi_are_separate_multipath_domains() {
    let mut m = unsafe_model();
    // A is the optimized NVMe path of group 1; an SRP port of the same gateway may be the
    // optimized SCSI path of the same group.
    m.add_listener(S, AnaState::Optimized, srp(1, 1)).unwrap();
    // A second optimized SRP port is refused, naming the SCSI domain.
    let err = m
        .add_listener(T, AnaState::Optimized, srp(2, 2))
        .unwrap_err();
    assert_eq!(
        err,
        AnaError::SecondOptimized {
            group: 1,
            listeners: vec![S, T],
            nsid: 1,
            scsi: true
        }
    );
    assert!(
        err.to_string().contains("SRP target ports (#3, #4)"),
        "{err}"
    );
    m.add_listener(T, AnaState::NonOptimized, srp(2, 2))
        .unwrap();
}

#[test]
fn failover_is_demote_then_promote() {
    let mut m = unsafe_model();
    let t0 = Instant::now();
    // Promote first: refused.
    assert!(set(&mut m, B, Some(1), AnaState::Optimized).is_err());
    // Demote the owner through a transition: its target is no longer optimized, so the new
    // owner may be promoted while the old one still reports change.
    m.set_state(
        A,
        Some(1),
        AnaState::Inaccessible,
        Duration::from_secs(2),
        t0,
    )
    .unwrap();
    set(&mut m, B, Some(1), AnaState::Optimized).unwrap();
    assert_eq!(m.reported(A, 1), Some(AnaState::Change));
    assert_eq!(m.reported(B, 1), Some(AnaState::Optimized));
    // A transition towards optimized counts as optimized.
    let mut m = unsafe_model();
    m.set_state(A, Some(1), AnaState::Inaccessible, Duration::ZERO, t0)
        .unwrap();
    m.set_state(B, Some(1), AnaState::Optimized, Duration::from_secs(1), t0)
        .unwrap();
    assert!(matches!(
        m.set_state(A, Some(1), AnaState::Optimized, Duration::ZERO, t0),
        Err(AnaError::SecondOptimized { .. })
    ));
}

#[test]
fn unsafe_namespaces_cannot_join_a_group_with_two_owners() {
    let mut m = unsafe_model();
    set(&mut m, B, Some(2), AnaState::Optimized).unwrap();
    let before = m.clone();
    // Group 2 has two optimized listeners: an unsafe namespace may not go there...
    assert!(matches!(
        m.add_namespace(3, Some(2), ActiveActive::Unsafe),
        Err(AnaError::SecondOptimized {
            group: 2,
            nsid: 3,
            ..
        })
    ));
    assert!(matches!(
        m.set_ns_group(1, 2),
        Err(AnaError::SecondOptimized {
            group: 2,
            nsid: 1,
            ..
        })
    ));
    // ...nor may its safe namespace become unsafe.
    assert!(matches!(
        m.set_ns_active_active(2, ActiveActive::Unsafe),
        Err(AnaError::SecondOptimized {
            group: 2,
            nsid: 2,
            ..
        })
    ));
    assert_eq!(m, before);
    m.add_namespace(3, Some(2), ActiveActive::Safe).unwrap();
    assert_eq!(
        m.set_ns_active_active(9, ActiveActive::Safe),
        Err(AnaError::UnknownNamespace(9))
    );
}

#[test]
fn scsi_port_ids_are_unique_and_non_zero() {
    let mut m = model();
    assert_eq!(
        m.add_listener(T, AnaState::Optimized, srp(1, 12)),
        Err(AnaError::RelativePort(1))
    );
    assert_eq!(
        m.add_listener(T, AnaState::Optimized, srp(2, 11)),
        Err(AnaError::TargetPortGroup(11))
    );
    assert_eq!(
        m.add_listener(T, AnaState::Optimized, srp(0, 12)),
        Err(AnaError::RelativePort(0))
    );
    assert_eq!(
        m.add_listener(T, AnaState::Optimized, srp(2, 0)),
        Err(AnaError::TargetPortGroup(0))
    );
    m.add_listener(T, AnaState::Optimized, srp(2, 12)).unwrap();
}

#[test]
fn log_content_is_sorted_and_filtered() {
    let mut m = model();
    m.add_namespace(4, Some(4), ActiveActive::Safe).unwrap();
    set(&mut m, A, Some(4), AnaState::NonOptimized).unwrap();
    let log = m.log_for(A, |_| true).unwrap();
    let groups: Vec<(u32, AnaState, Vec<u32>)> = log
        .groups
        .iter()
        .map(|g| (g.grpid, g.state, g.nsids.clone()))
        .collect();
    assert_eq!(
        groups,
        vec![
            (1, AnaState::Optimized, vec![1, 3]),
            (2, AnaState::Optimized, vec![2]),
            (4, AnaState::NonOptimized, vec![4]),
        ]
    );
    assert_eq!(log.change_count, m.change_count());
    // A controller that sees only NSIDs 3 and 4 (namespace masking).
    let log = m.log_for(A, |n| n == 3 || n == 4).unwrap();
    let ids: Vec<(u32, Vec<u32>)> = log
        .groups
        .iter()
        .map(|g| (g.grpid, g.nsids.clone()))
        .collect();
    assert_eq!(ids, vec![(1, vec![3]), (4, vec![4])]);
    assert_eq!(m.log_for(T, |_| true), None);
}

#[test]
fn target_port_groups_are_the_srp_listeners() {
    let mut m = model();
    m.add_listener(T, AnaState::Inaccessible, srp(2, 5))
        .unwrap();
    let tpgs = m.tpgs_for(1).unwrap();
    assert_eq!(
        tpgs,
        vec![
            TpgEntry {
                tpg_id: 5,
                relative_port: 2,
                state: AnaState::Inaccessible,
                altered: false
            },
            TpgEntry {
                tpg_id: 11,
                relative_port: 1,
                state: AnaState::Optimized,
                altered: false
            },
        ]
    );
    set(&mut m, T, Some(1), AnaState::Optimized).unwrap();
    let tpgs = m.tpgs_for(1).unwrap();
    assert!(tpgs[0].altered && tpgs[0].state == AnaState::Optimized);
    assert!(
        !m.tpgs_for(2).unwrap()[0].altered,
        "group 2 was not changed"
    );
    assert_eq!(m.tpgs_for(9), None);
}

#[test]
fn path_view_and_get_listeners_states() {
    let mut m = model();
    let t0 = Instant::now();
    m.set_state(
        A,
        Some(2),
        AnaState::Inaccessible,
        Duration::from_secs(1),
        t0,
    )
    .unwrap();
    set(&mut m, A, Some(3), AnaState::PersistentLoss).unwrap();
    let v = m.path_view(A).unwrap();
    assert_eq!(v.state(1), Some(AnaState::Optimized));
    assert_eq!(v.state(2), Some(AnaState::Change));
    assert_eq!(v.state(3), Some(AnaState::PersistentLoss));
    assert_eq!(v.state(0), None);
    assert_eq!(v.state(5), None);
    assert_eq!(
        m.ana_states(A).unwrap(),
        vec![
            (1, AnaState::Optimized),
            (2, AnaState::Change),
            (3, AnaState::PersistentLoss),
            (4, AnaState::Optimized)
        ]
    );
    assert_eq!(m.path_view(T), None);
}

#[test]
fn saved_states_are_targets_with_the_common_state_as_base() {
    let mut m = model();
    let t0 = Instant::now();
    assert_eq!(
        m.saved(B).unwrap(),
        SavedAna {
            base: AnaState::Inaccessible,
            exceptions: vec![]
        }
    );
    m.set_state(B, Some(2), AnaState::Optimized, Duration::from_secs(1), t0)
        .unwrap();
    assert_eq!(
        m.saved(B).unwrap(),
        SavedAna {
            base: AnaState::Inaccessible,
            exceptions: vec![(2, AnaState::Optimized)]
        },
        "a running transition is saved as its target"
    );
    // 2 optimized, 2 inaccessible: the tie goes to the lower code.
    set(&mut m, B, Some(3), AnaState::Optimized).unwrap();
    assert_eq!(
        m.saved(B).unwrap(),
        SavedAna {
            base: AnaState::Optimized,
            exceptions: vec![(1, AnaState::Inaccessible), (4, AnaState::Inaccessible)]
        }
    );
    // Replaying the saved form on a fresh listener gives the same targets.
    let saved = m.saved(B).unwrap();
    m.add_listener(T, saved.base, None).unwrap();
    for (g, s) in saved.exceptions {
        set(&mut m, T, Some(g), s).unwrap();
    }
    for g in 1..=4 {
        assert_eq!(m.target(T, g), m.target(B, g));
    }
}
