//! The state machine against the spec's tables: every type × action × requester role.
//!
//! The expectations are written out from SPC-4 5.12 / the NVMe base specification's
//! reservation section (and checked against LIO and nvmet where the specs leave room),
//! not derived from the implementation.

use super::*;

const KH: u64 = 0xA0A0; // holder's key
const KR: u64 = 0xB0B0; // other registrant's key
const KN: u64 = 0xC0C0; // what the non-registrant claims

fn nvme(b: u8) -> Initiator {
    Initiator::Nvme(HostId([b; 16]))
}

fn scsi(b: u8, port: u16) -> Initiator {
    Initiator::Scsi(Nexus {
        initiator: InitiatorPort::srp([b; 16]),
        relative_target_port: port,
    })
}

const H: u8 = 1;
const R: u8 = 2;
const N: u8 = 3;

/// Holder H (NVMe host) holding `t`, registrant R (SRP nexus), non-registrant N (NVMe host).
struct World {
    res: Reservation,
}

impl World {
    fn who(&self, w: u8) -> Initiator {
        match w {
            H => nvme(1),
            R => scsi(2, 1),
            _ => nvme(3),
        }
    }

    fn key(w: u8) -> u64 {
        match w {
            H => KH,
            R => KR,
            _ => KN,
        }
    }

    fn new(t: Option<ResvType>) -> World {
        let mut res = Reservation::new(true);
        for (w, k) in [(nvme(1), KH), (scsi(2, 1), KR)] {
            res.register(w, RegisterAction::Register { new_key: k }, PtplChange::Keep)
                .unwrap();
        }
        if let Some(t) = t {
            res.reserve(nvme(1), KH, t).unwrap();
        }
        World { res }
    }
}

fn kinds(fx: &Effects) -> Vec<(Initiator, NoticeKind)> {
    let mut v: Vec<_> = fx.notices.iter().map(|n| (n.to, n.kind)).collect();
    v.sort();
    v
}

fn other_type(t: ResvType) -> ResvType {
    if t == ResvType::WriteExclusive {
        ResvType::ExclusiveAccess
    } else {
        ResvType::WriteExclusive
    }
}

// ------------------------------------------------------------------------------ access

/// (type, registrant read, registrant write, non-registrant read, non-registrant write),
/// the non-holder columns of the NVMe "Command Behavior in the Presence of a Reservation"
/// table and SPC-4's READ/WRITE rows. (For All Registrants types the registrant *is* a
/// holder.)
const ACCESS: [(ResvType, bool, bool, bool, bool); 6] = [
    (ResvType::WriteExclusive, true, false, true, false),
    (ResvType::ExclusiveAccess, false, false, false, false),
    (
        ResvType::WriteExclusiveRegistrantsOnly,
        true,
        true,
        true,
        false,
    ),
    (
        ResvType::ExclusiveAccessRegistrantsOnly,
        true,
        true,
        false,
        false,
    ),
    (
        ResvType::WriteExclusiveAllRegistrants,
        true,
        true,
        true,
        false,
    ),
    (
        ResvType::ExclusiveAccessAllRegistrants,
        true,
        true,
        false,
        false,
    ),
];

#[test]
fn access_table_every_type_and_role() {
    for (t, rr, rw, nr, nw) in ACCESS {
        let w = World::new(Some(t));
        let view = AccessView::of(&w.res);
        let cases = [
            (H, CommandClass::Read, true),
            (H, CommandClass::Write, true),
            (R, CommandClass::Read, rr),
            (R, CommandClass::Write, rw),
            (N, CommandClass::Read, nr),
            (N, CommandClass::Write, nw),
        ];
        for (who, class, want) in cases {
            let i = w.who(who);
            assert_eq!(w.res.permits(i, class), want, "{t:?} {who} {class:?}");
            assert_eq!(view.standing(i).permits(class), want, "view {t:?} {who}");
        }
        for who in [H, R, N] {
            for class in [
                CommandClass::Query,
                CommandClass::Always,
                CommandClass::Reservation,
            ] {
                assert!(w.res.permits(w.who(who), class), "{t:?} {who} {class:?}");
            }
        }
        let role_r = w.res.standing(w.who(R)).role;
        assert_eq!(
            role_r,
            if t.all_registrants() {
                Role::Holder
            } else {
                Role::Registrant
            }
        );
        assert_eq!(w.res.standing(w.who(N)).role, Role::NonRegistrant);
    }
}

#[test]
fn no_reservation_allows_everything() {
    let w = World::new(None);
    for who in [H, R, N] {
        for class in [CommandClass::Read, CommandClass::Write, CommandClass::Query] {
            assert!(w.res.permits(w.who(who), class));
        }
    }
}

#[test]
fn cached_standing_follows_the_epoch() {
    let mut w = World::new(None);
    let n = w.who(N);
    let view = AccessView::of(&w.res);
    let mut cache = CachedStanding::new(&view, n);
    assert!(cache.get(&view, n).permits(CommandClass::Write));
    w.res
        .reserve(w.who(H), KH, ResvType::WriteExclusive)
        .unwrap();
    let view2 = AccessView::of(&w.res);
    assert_ne!(view.epoch(), view2.epoch());
    assert!(!cache.get(&view2, n).permits(CommandClass::Write));
    // A stale view keeps giving the cached answer only until the newer one is seen.
    assert!(cache.get(&view, n).permits(CommandClass::Write));
}

// ------------------------------------------------------------------------------ reserve

#[test]
fn reserve_every_type_and_role() {
    for t in ResvType::ALL {
        // Same type again: the holder (any registrant for All Registrants) succeeds without
        // a change; everyone else conflicts.
        for who in [H, R, N] {
            let mut w = World::new(Some(t));
            let before = w.res.clone();
            let r = w.res.reserve(w.who(who), World::key(who), t);
            let holder = who == H || (who == R && t.all_registrants());
            if holder {
                assert_eq!(r, Ok(Effects::default()), "{t:?} {who}");
            } else {
                assert_eq!(r, Err(PrError::Conflict), "{t:?} {who}");
            }
            assert_eq!(w.res, before, "no change {t:?} {who}");
            // Another type: always a conflict, holder included.
            assert_eq!(
                w.res.reserve(w.who(who), World::key(who), other_type(t)),
                Err(PrError::Conflict)
            );
            assert_eq!(w.res, before);
        }
        // With no reservation, a registrant takes it; a non-registrant and a wrong key
        // conflict. Reserve does not bump the generation.
        let mut w = World::new(None);
        let g = w.res.generation();
        assert_eq!(
            w.res.reserve(w.who(N), KN, t),
            Err(PrError::Conflict),
            "non-registrant"
        );
        assert_eq!(
            w.res.reserve(w.who(R), KH, t),
            Err(PrError::Conflict),
            "wrong key"
        );
        let fx = w.res.reserve(w.who(R), KR, t).unwrap();
        assert!(fx.changed && fx.notices.is_empty());
        assert_eq!(w.res.generation(), g);
        let holder = w.res.reserved().unwrap().holder;
        assert_eq!(holder, (!t.all_registrants()).then(|| w.who(R)));
        assert!(w.res.is_holder(w.who(R)));
        assert_eq!(w.res.is_holder(w.who(H)), t.all_registrants());
        assert_eq!(
            w.res.reservation_key(),
            Some(if t.all_registrants() { 0 } else { KR })
        );
    }
}

// ------------------------------------------------------------------------------ release

#[test]
fn release_every_type_and_role() {
    for t in ResvType::ALL {
        let notify = t.registrants_only() || t.all_registrants();
        // Holder, right type: released; Registrants Only / All Registrants notify the
        // other registrants (Reservation Released); WE/EA notify nobody.
        let mut w = World::new(Some(t));
        let g = w.res.generation();
        let fx = w.res.release(w.who(H), KH, t).unwrap();
        assert!(fx.changed);
        assert_eq!(w.res.reserved(), None);
        assert_eq!(
            w.res.generation(),
            g,
            "release does not bump the generation"
        );
        let want = if notify {
            vec![(w.who(R), NoticeKind::ReservationReleased)]
        } else {
            vec![]
        };
        assert_eq!(kinds(&fx), want, "{t:?}");
        assert_eq!(w.res.registrants().len(), 2, "registrations stay");

        // Holder, wrong type.
        let mut w = World::new(Some(t));
        let before = w.res.clone();
        assert_eq!(
            w.res.release(w.who(H), KH, other_type(t)),
            Err(PrError::InvalidReleaseType)
        );
        assert_eq!(w.res, before);

        // Registrant: not the holder → success without effect (SPC-4, NVMe); for All
        // Registrants it is a holder and releases it for everyone.
        let mut w = World::new(Some(t));
        let fx = w.res.release(w.who(R), KR, t).unwrap();
        if t.all_registrants() {
            assert_eq!(w.res.reserved(), None);
            assert_eq!(
                kinds(&fx),
                vec![(w.who(H), NoticeKind::ReservationReleased)]
            );
        } else {
            assert_eq!(fx, Effects::default());
            assert_eq!(w.res.reserved().unwrap().rtype, t);
        }

        // Non-registrant, and a registrant with a wrong key: conflict.
        let mut w = World::new(Some(t));
        let before = w.res.clone();
        assert_eq!(w.res.release(w.who(N), KN, t), Err(PrError::Conflict));
        assert_eq!(w.res.release(w.who(H), KR, t), Err(PrError::Conflict));
        assert_eq!(w.res, before);
    }
    // No reservation: a registrant's release is GOOD and changes nothing.
    let mut w = World::new(None);
    assert_eq!(
        w.res.release(w.who(R), KR, ResvType::WriteExclusive),
        Ok(Effects::default())
    );
}

// ------------------------------------------------------------------------------ clear

#[test]
fn clear_every_type_and_role() {
    for t in ResvType::ALL.map(Some).into_iter().chain([None]) {
        for who in [H, R] {
            let mut w = World::new(t);
            let g = w.res.generation();
            let fx = w.res.clear(w.who(who), World::key(who)).unwrap();
            let other = if who == H { R } else { H };
            assert_eq!(
                kinds(&fx),
                vec![(w.who(other), NoticeKind::ReservationPreempted)],
                "{t:?} {who}"
            );
            assert!(w.res.registrants().is_empty());
            assert_eq!(w.res.reserved(), None);
            assert_eq!(w.res.generation(), g.wrapping_add(1));
        }
        let mut w = World::new(t);
        let before = w.res.clone();
        assert_eq!(w.res.clear(w.who(N), KN), Err(PrError::Conflict));
        assert_eq!(
            w.res.clear(w.who(R), KH),
            Err(PrError::Conflict),
            "wrong key"
        );
        assert_eq!(w.res, before);
    }
}

// ------------------------------------------------------------------------------ preempt

#[test]
fn preempt_the_single_holder() {
    for t in ResvType::ALL.into_iter().filter(|t| !t.all_registrants()) {
        for new in ResvType::ALL {
            for abort in [false, true] {
                // R preempts H: H's registration goes, R holds `new`.
                let mut w = World::new(Some(t));
                let g = w.res.generation();
                let fx = w.res.preempt(w.who(R), KR, KH, new, abort).unwrap();
                assert_eq!(
                    kinds(&fx),
                    vec![(w.who(H), NoticeKind::RegistrationPreempted)],
                    "{t:?}->{new:?}: no one else is left to be told of the type change"
                );
                assert_eq!(fx.aborted, if abort { vec![w.who(H)] } else { vec![] });
                assert_eq!(w.res.key_of(w.who(H)), None);
                let r = w.res.reserved().unwrap();
                assert_eq!(r.rtype, new);
                assert_eq!(r.holder, (!new.all_registrants()).then(|| w.who(R)));
                assert_eq!(w.res.generation(), g.wrapping_add(1));

                // The holder preempting itself: same registrations, new type; the other
                // registrant hears Reservation Released only if the type changed.
                let mut w = World::new(Some(t));
                let fx = w.res.preempt(w.who(H), KH, KH, new, abort).unwrap();
                let want = if new != t {
                    vec![(w.who(R), NoticeKind::ReservationReleased)]
                } else {
                    vec![]
                };
                assert_eq!(kinds(&fx), want, "self {t:?}->{new:?}");
                assert!(fx.aborted.is_empty());
                assert_eq!(w.res.registrants().len(), 2);
                assert_eq!(w.res.reserved().unwrap().rtype, new);
            }
        }
    }
}

#[test]
fn preempt_a_registrant_that_is_not_the_holder() {
    for t in ResvType::ALL.map(Some).into_iter().chain([None]) {
        // H removes R by key: the reservation is untouched (type argument ignored).
        let mut w = World::new(t);
        let fx = w
            .res
            .preempt(w.who(H), KH, KR, ResvType::ExclusiveAccess, true)
            .unwrap();
        assert_eq!(
            kinds(&fx),
            vec![(w.who(R), NoticeKind::RegistrationPreempted)],
            "{t:?}"
        );
        assert_eq!(fx.aborted, vec![w.who(R)]);
        assert_eq!(w.res.reserved().map(|r| r.rtype), t);
        assert_eq!(w.res.registrants().len(), 1);
    }
}

#[test]
fn preempt_all_registrants() {
    for t in ResvType::ALL.into_iter().filter(|t| t.all_registrants()) {
        for new in ResvType::ALL {
            // Zero key: R takes a new reservation, every other registration goes.
            let mut w = World::new(Some(t));
            let fx = w.res.preempt(w.who(R), KR, 0, new, true).unwrap();
            assert_eq!(
                kinds(&fx),
                vec![(w.who(H), NoticeKind::RegistrationPreempted)]
            );
            assert_eq!(fx.aborted, vec![w.who(H)]);
            assert_eq!(w.res.registrants().len(), 1);
            let r = w.res.reserved().unwrap();
            assert_eq!(
                (r.rtype, r.holder),
                (new, (!new.all_registrants()).then(|| w.who(R)))
            );
        }
        // Non-zero key: only that registration goes; the All Registrants reservation stays.
        let mut w = World::new(Some(t));
        let fx = w.res.preempt(w.who(R), KR, KH, t, false).unwrap();
        assert_eq!(
            kinds(&fx),
            vec![(w.who(H), NoticeKind::RegistrationPreempted)]
        );
        assert_eq!(w.res.reserved().unwrap().rtype, t);
        // Removing the last registrant (itself) releases an All Registrants reservation.
        let fx = w.res.preempt(w.who(R), KR, KR, t, false).unwrap();
        assert!(fx.notices.is_empty(), "no notice to oneself");
        assert!(w.res.registrants().is_empty());
        assert_eq!(w.res.reserved(), None);
    }
}

#[test]
fn preempt_errors_leave_the_state_alone() {
    for t in ResvType::ALL.map(Some).into_iter().chain([None]) {
        let mut w = World::new(t);
        let before = w.res.clone();
        let all_reg = t.is_some_and(|t| t.all_registrants());
        // Unknown key: conflict.
        assert_eq!(
            w.res
                .preempt(w.who(R), KR, 0xDEAD, ResvType::WriteExclusive, false),
            Err(PrError::Conflict),
            "{t:?}"
        );
        // A non-registrant, or a wrong own key: conflict.
        assert_eq!(
            w.res
                .preempt(w.who(N), KN, KH, ResvType::WriteExclusive, false),
            Err(PrError::Conflict)
        );
        assert_eq!(
            w.res
                .preempt(w.who(R), KH, KH, ResvType::WriteExclusive, false),
            Err(PrError::Conflict)
        );
        // Zero key outside All Registrants: invalid (SPC-4 INVALID FIELD IN PARAMETER
        // LIST, NVMe Invalid Field).
        if !all_reg {
            assert_eq!(
                w.res
                    .preempt(w.who(R), KR, 0, ResvType::WriteExclusive, false),
                Err(PrError::ZeroPreemptKey)
            );
        }
        assert_eq!(w.res, before);
    }
}

#[test]
fn preempt_removes_every_registration_with_the_key() {
    // Two registrants share a key (SCSI: two nexuses of one cluster node). Preempting the
    // holder's key removes both the holder and its sibling.
    let mut res = Reservation::new(false);
    let (a1, a2, b) = (scsi(1, 1), scsi(1, 2), nvme(9));
    for (w, k) in [(a1, 7), (a2, 7), (b, 8)] {
        res.register(w, RegisterAction::Register { new_key: k }, PtplChange::Keep)
            .unwrap();
    }
    res.reserve(a1, 7, ResvType::WriteExclusiveRegistrantsOnly)
        .unwrap();
    let fx = res
        .preempt(b, 8, 7, ResvType::WriteExclusiveRegistrantsOnly, true)
        .unwrap();
    assert_eq!(fx.aborted, vec![a1, a2]);
    assert_eq!(res.registrants(), &[Registrant { who: b, key: 8 }]);
    assert_eq!(res.reserved().unwrap().holder, Some(b));
}

// ------------------------------------------------------------------------------ register

#[test]
fn register_actions() {
    let mut res = Reservation::new(true);
    let a = nvme(1);
    // Register, again with the same key (success, generation bumps), then with another
    // key (conflict).
    res.register(a, RegisterAction::Register { new_key: 5 }, PtplChange::Keep)
        .unwrap();
    let g = res.generation();
    let fx = res
        .register(a, RegisterAction::Register { new_key: 5 }, PtplChange::Keep)
        .unwrap();
    assert!(!fx.changed);
    assert_eq!(res.generation(), g.wrapping_add(1));
    assert_eq!(
        res.register(a, RegisterAction::Register { new_key: 6 }, PtplChange::Keep),
        Err(PrError::Conflict)
    );
    // Key 0 is never registered.
    for action in [
        RegisterAction::Register { new_key: 0 },
        RegisterAction::Replace {
            current: KeyCheck::Ignore,
            new_key: 0,
        },
    ] {
        assert_eq!(
            res.register(nvme(2), action, PtplChange::Keep),
            Err(PrError::ZeroNewKey)
        );
    }
    // Replace checks the current key unless told to ignore it.
    assert_eq!(
        res.register(
            a,
            RegisterAction::Replace {
                current: KeyCheck::Match(4),
                new_key: 9
            },
            PtplChange::Keep
        ),
        Err(PrError::Conflict)
    );
    res.register(
        a,
        RegisterAction::Replace {
            current: KeyCheck::Match(5),
            new_key: 9,
        },
        PtplChange::Keep,
    )
    .unwrap();
    assert_eq!(res.key_of(a), Some(9));
    // Replace with Ignore registers an unregistered requester; with Match it conflicts.
    assert_eq!(
        res.register(
            nvme(2),
            RegisterAction::Replace {
                current: KeyCheck::Match(0),
                new_key: 3
            },
            PtplChange::Keep
        ),
        Err(PrError::Conflict)
    );
    res.register(
        nvme(2),
        RegisterAction::Replace {
            current: KeyCheck::Ignore,
            new_key: 3,
        },
        PtplChange::Keep,
    )
    .unwrap();
    assert_eq!(res.key_of(nvme(2)), Some(3));
    // Unregister: unregistered or wrong key conflicts.
    assert_eq!(
        res.register(
            nvme(7),
            RegisterAction::Unregister {
                current: KeyCheck::Ignore
            },
            PtplChange::Keep
        ),
        Err(PrError::Conflict)
    );
    assert_eq!(
        res.register(
            a,
            RegisterAction::Unregister {
                current: KeyCheck::Match(5)
            },
            PtplChange::Keep
        ),
        Err(PrError::Conflict)
    );
    res.register(
        a,
        RegisterAction::Unregister {
            current: KeyCheck::Match(9),
        },
        PtplChange::Keep,
    )
    .unwrap();
    assert_eq!(res.key_of(a), None);
}

#[test]
fn holder_key_replacement_changes_the_reservation_key() {
    let mut w = World::new(Some(ResvType::WriteExclusive));
    w.res
        .register(
            w.who(H),
            RegisterAction::Replace {
                current: KeyCheck::Match(KH),
                new_key: 0x77,
            },
            PtplChange::Keep,
        )
        .unwrap();
    assert_eq!(w.res.reservation_key(), Some(0x77));
    assert!(w.res.is_holder(w.who(H)));
}

#[test]
fn unregistering_the_holder_every_type() {
    for t in ResvType::ALL {
        let mut w = World::new(Some(t));
        let fx = w
            .res
            .register(
                w.who(H),
                RegisterAction::Unregister {
                    current: KeyCheck::Match(KH),
                },
                PtplChange::Keep,
            )
            .unwrap();
        if t.all_registrants() {
            // R is still a registrant, hence still a holder.
            assert_eq!(w.res.reserved().unwrap().rtype, t);
            assert!(fx.notices.is_empty());
            // The last one out releases it.
            w.res
                .register(
                    w.who(R),
                    RegisterAction::Unregister {
                        current: KeyCheck::Ignore,
                    },
                    PtplChange::Keep,
                )
                .unwrap();
            assert_eq!(w.res.reserved(), None);
        } else {
            assert_eq!(w.res.reserved(), None, "{t:?}");
            let want = if t.registrants_only() {
                vec![(w.who(R), NoticeKind::ReservationReleased)]
            } else {
                vec![]
            };
            assert_eq!(kinds(&fx), want, "{t:?}");
        }
    }
}

#[test]
fn registrant_limit() {
    let mut res = Reservation::new(false).with_max_registrants(2);
    for i in 0..2 {
        res.register(
            nvme(i),
            RegisterAction::Register { new_key: 1 },
            PtplChange::Keep,
        )
        .unwrap();
    }
    assert_eq!(
        res.register(
            nvme(9),
            RegisterAction::Register { new_key: 1 },
            PtplChange::Keep
        ),
        Err(PrError::NoResources)
    );
    // Re-registering an existing one is not a new registrant.
    res.register(
        nvme(1),
        RegisterAction::Register { new_key: 1 },
        PtplChange::Keep,
    )
    .unwrap();
}

// ------------------------------------------------------------------------------ PTPL

#[test]
fn ptpl_changes_only_when_capable_and_only_on_success() {
    let mut res = Reservation::new(false);
    assert_eq!(
        res.register(
            nvme(1),
            RegisterAction::Register { new_key: 1 },
            PtplChange::Set(true)
        ),
        Err(PrError::PtplNotCapable)
    );
    assert!(res.registrants().is_empty(), "nothing registered");
    assert_eq!(res.set_ptpl(true), Err(PrError::PtplNotCapable));
    assert_eq!(res.set_ptpl(false), Ok(Effects::default()));

    let mut res = Reservation::new(true);
    let fx = res
        .register(
            nvme(1),
            RegisterAction::Register { new_key: 1 },
            PtplChange::Set(true),
        )
        .unwrap();
    assert!(res.ptpl() && fx.persist);
    // A failed registration does not change PTPL.
    assert_eq!(
        res.register(
            nvme(1),
            RegisterAction::Register { new_key: 2 },
            PtplChange::Set(false)
        ),
        Err(PrError::Conflict)
    );
    assert!(res.ptpl());
    // Every change persists while PTPL is on; reserve too.
    assert!(
        res.reserve(nvme(1), 1, ResvType::WriteExclusive)
            .unwrap()
            .persist
    );
    // A no-op reserve writes nothing.
    assert!(
        !res.reserve(nvme(1), 1, ResvType::WriteExclusive)
            .unwrap()
            .persist
    );
    // Turning it off writes (the empty file), and then changes no longer persist.
    assert!(res.set_ptpl(false).unwrap().persist);
    assert!(
        !res.release(nvme(1), 1, ResvType::WriteExclusive)
            .unwrap()
            .persist
    );
}

// ------------------------------------------------------------------------------ SPC-2

fn nexus(b: u8) -> Nexus {
    Nexus {
        initiator: InitiatorPort::srp([b; 16]),
        relative_target_port: 1,
    }
}

#[test]
fn legacy_reserve_without_registrations_is_spc2() {
    let mut res = Reservation::new(false);
    let (a, b) = (nexus(1), nexus(2));
    assert_eq!(res.legacy_reserve(a), Ok(LegacyOutcome::Changed));
    assert_eq!(res.legacy_reserve(a), Ok(LegacyOutcome::NoChange));
    assert_eq!(res.legacy_reserve(b), Err(PrError::Conflict));
    // Everything but the Always class conflicts for everyone else, NVMe hosts included.
    for who in [Initiator::Scsi(b), nvme(1)] {
        assert!(!res.permits(who, CommandClass::Read));
        assert!(!res.permits(who, CommandClass::Query));
        assert!(!res.permits(who, CommandClass::Reservation));
        assert!(res.permits(who, CommandClass::Always));
    }
    assert!(res.permits(Initiator::Scsi(a), CommandClass::Write));
    // PR commands from others conflict too.
    assert_eq!(
        res.register(
            nvme(1),
            RegisterAction::Register { new_key: 1 },
            PtplChange::Keep
        ),
        Err(PrError::Conflict)
    );
    // RELEASE by a non-holder: GOOD, nothing happens.
    assert_eq!(res.legacy_release(b), Ok(LegacyOutcome::NoChange));
    assert_eq!(res.legacy_holder(), Some(a));
    assert_eq!(res.legacy_release(a), Ok(LegacyOutcome::Changed));
    assert_eq!(res.legacy_holder(), None);
}

#[test]
fn legacy_reservation_goes_with_its_nexus_and_on_reset() {
    let mut res = Reservation::new(false);
    res.legacy_reserve(nexus(1)).unwrap();
    assert!(!res.nexus_lost(nexus(2)));
    assert!(res.nexus_lost(nexus(1)));
    assert_eq!(res.legacy_holder(), None);
    res.legacy_reserve(nexus(1)).unwrap();
    let e = res.epoch();
    assert!(res.lu_reset());
    assert!(res.epoch() > e);
    assert!(!res.lu_reset());
}

#[test]
fn legacy_commands_with_persistent_registrations() {
    // SPC-4 5.13.3 (CRH = 1).
    for t in ResvType::ALL {
        let mut res = Reservation::new(false);
        let (holder, reg, stranger) = (nexus(1), nexus(2), nexus(3));
        res.register(
            Initiator::Scsi(holder),
            RegisterAction::Register { new_key: 1 },
            PtplChange::Keep,
        )
        .unwrap();
        res.register(
            Initiator::Scsi(reg),
            RegisterAction::Register { new_key: 2 },
            PtplChange::Keep,
        )
        .unwrap();
        res.reserve(Initiator::Scsi(holder), 1, t).unwrap();
        let before = res.clone();
        // The holder: GOOD, nothing happens.
        assert_eq!(res.legacy_reserve(holder), Ok(LegacyOutcome::NoChange));
        assert_eq!(res.legacy_release(holder), Ok(LegacyOutcome::NoChange));
        // A registrant: GOOD with Registrants Only / All Registrants types, else conflict.
        let shared = t.registrants_only() || t.all_registrants();
        let want = if shared {
            Ok(LegacyOutcome::NoChange)
        } else {
            Err(PrError::Conflict)
        };
        assert_eq!(res.legacy_reserve(reg), want, "{t:?}");
        assert_eq!(res.legacy_release(reg), want, "{t:?}");
        // Not registered while registrations exist: conflict.
        assert_eq!(res.legacy_reserve(stranger), Err(PrError::Conflict));
        assert_eq!(res.legacy_release(stranger), Err(PrError::Conflict));
        assert_eq!(res, before);
    }
    // Registrations without a reservation: any RESERVE/RELEASE conflicts (SPC-2 5.5.1) but
    // those of... a registered nexus with no reservation conflicts too.
    let mut res = Reservation::new(false);
    res.register(
        Initiator::Scsi(nexus(1)),
        RegisterAction::Register { new_key: 1 },
        PtplChange::Keep,
    )
    .unwrap();
    assert_eq!(res.legacy_reserve(nexus(1)), Err(PrError::Conflict));
    assert_eq!(res.legacy_reserve(nexus(2)), Err(PrError::Conflict));
}

// ------------------------------------------------------------------------------ ptpl file

fn bdev() -> uuid::Uuid {
    uuid::Uuid::parse_str("b0e0f6a2-6d1c-4a5e-9d3b-2f8e1c7a9b01").unwrap()
}

#[test]
fn ptpl_round_trip_with_both_protocols() {
    for t in ResvType::ALL {
        for holder_is_scsi in [false, true] {
            let mut res = Reservation::new(true);
            let (h, s) = (nvme(0x4c), scsi(0x5a, 3));
            res.register(
                h,
                RegisterAction::Register { new_key: 11 },
                PtplChange::Set(true),
            )
            .unwrap();
            res.register(
                s,
                RegisterAction::Register { new_key: u64::MAX },
                PtplChange::Keep,
            )
            .unwrap();
            let (who, key) = if holder_is_scsi {
                (s, u64::MAX)
            } else {
                (h, 11)
            };
            res.reserve(who, key, t).unwrap();
            let text = ptpl::encode(&res, &bdev());
            let back = ptpl::decode(&text, &bdev(), true).unwrap();
            assert_eq!(back.registrants(), res.registrants(), "{t:?}");
            assert_eq!(back.reserved(), res.reserved(), "{t:?} {text}");
            assert!(back.ptpl());
            assert_eq!(
                back.generation(),
                0,
                "the generation restarts after power on"
            );
        }
    }
}

#[test]
fn ptpl_nvme_only_state_is_byte_identical_to_spdk() {
    // What SPDK's nvmf_ns_reservation_store_json writes (compact, keys in its order) for a
    // Write Exclusive reservation held by one of two hosts.
    let h1 = HostId([
        0x4c, 0x4c, 0x45, 0x44, 0x00, 0x35, 0x4b, 0x10, 0x80, 0x44, 0xb3, 0xc0, 0x4f, 0x4e, 0x44,
        0x33,
    ]);
    let h2 = HostId([0x11; 16]);
    let spdk = concat!(
        r#"{"ptpl":true,"rtype":1,"crkey":4660,"#,
        r#""bdev_uuid":"b0e0f6a2-6d1c-4a5e-9d3b-2f8e1c7a9b01","#,
        r#""holder_uuid":"4c4c4544-0035-4b10-8044-b3c04f4e4433","#,
        r#""registrants":[{"rkey":4660,"host_uuid":"4c4c4544-0035-4b10-8044-b3c04f4e4433"},"#,
        r#"{"rkey":18446744073709551615,"host_uuid":"11111111-1111-1111-1111-111111111111"}]}"#
    );
    let res = ptpl::decode(spdk, &bdev(), true).unwrap();
    assert_eq!(
        res.registrants(),
        &[
            Registrant {
                who: Initiator::Nvme(h1),
                key: 0x1234
            },
            Registrant {
                who: Initiator::Nvme(h2),
                key: u64::MAX
            }
        ]
    );
    assert_eq!(
        res.reserved(),
        Some(Reserved {
            rtype: ResvType::WriteExclusive,
            holder: Some(Initiator::Nvme(h1))
        })
    );
    assert_eq!(ptpl::encode(&res, &bdev()), spdk);
}

#[test]
fn ptpl_spdk_files_of_other_shapes() {
    // All Registrants: SPDK writes an empty holder_uuid and the acquiring key as crkey.
    let ar = concat!(
        r#"{"ptpl":true,"rtype":6,"crkey":2,"bdev_uuid":"B0E0F6A2-6D1C-4A5E-9D3B-2F8E1C7A9B01","#,
        r#""holder_uuid":"","registrants":[{"rkey":1,"host_uuid":"00000000-0000-0000-0000-000000000001"},"#,
        r#"{"rkey":2,"host_uuid":"00000000-0000-0000-0000-000000000002"}]}"#
    );
    let res = ptpl::decode(ar, &bdev(), true).unwrap();
    assert_eq!(
        res.reserved(),
        Some(Reserved {
            rtype: ResvType::ExclusiveAccessAllRegistrants,
            holder: None
        })
    );
    // Registrations only, fields SPDK treats as optional left out.
    let regs = concat!(
        r#"{"ptpl":true,"bdev_uuid":"b0e0f6a2-6d1c-4a5e-9d3b-2f8e1c7a9b01","#,
        r#""registrants":[{"rkey":9,"host_uuid":"00000000-0000-0000-0000-000000000009"}]}"#
    );
    let res = ptpl::decode(regs, &bdev(), true).unwrap();
    assert_eq!(res.registrants().len(), 1);
    assert_eq!(res.reserved(), None);
    // ptpl false (or SPDK's truncated file): nothing restored, persistence off.
    for off in [
        "",
        " \n",
        r#"{"ptpl":false,"bdev_uuid":"b0e0f6a2-6d1c-4a5e-9d3b-2f8e1c7a9b01","registrants":[{"rkey":9,"host_uuid":"00000000-0000-0000-0000-000000000009"}]}"#,
    ] {
        let res = ptpl::decode(off, &bdev(), true).unwrap();
        assert!(res.registrants().is_empty() && !res.ptpl(), "{off:?}");
    }
}

#[test]
fn ptpl_bad_files_are_refused() {
    let u = "b0e0f6a2-6d1c-4a5e-9d3b-2f8e1c7a9b01";
    let h = "00000000-0000-0000-0000-000000000001";
    let cases = [
        // Not SPDK's object.
        "{".to_string(),
        "[]".to_string(),
        format!(r#"{{"ptpl":true,"bdev_uuid":"{u}"}}"#),
        format!(r#"{{"ptpl":true,"bdev_uuid":"{u}","registrants":[],"extra":1}}"#),
        format!(r#"{{"ptpl":true,"bdev_uuid":"{u}","registrants":[{{"rkey":1}}]}}"#),
        format!(
            r#"{{"ptpl":true,"bdev_uuid":"{u}","registrants":[{{"rkey":-1,"host_uuid":"{h}"}}]}}"#
        ),
        format!(
            r#"{{"ptpl":true,"bdev_uuid":"{u}","registrants":[{{"rkey":1,"host_uuid":"nope"}}]}}"#
        ),
        // Inconsistent.
        format!(
            r#"{{"ptpl":true,"bdev_uuid":"{u}","registrants":[{{"rkey":0,"host_uuid":"{h}"}}]}}"#
        ),
        format!(
            r#"{{"ptpl":true,"bdev_uuid":"{u}","registrants":[{{"rkey":1,"host_uuid":"{h}"}},{{"rkey":2,"host_uuid":"{h}"}}]}}"#
        ),
        format!(
            r#"{{"ptpl":true,"rtype":7,"crkey":1,"bdev_uuid":"{u}","holder_uuid":"{h}","registrants":[{{"rkey":1,"host_uuid":"{h}"}}]}}"#
        ),
        format!(
            r#"{{"ptpl":true,"rtype":1,"crkey":2,"bdev_uuid":"{u}","holder_uuid":"{h}","registrants":[{{"rkey":1,"host_uuid":"{h}"}}]}}"#
        ),
        format!(
            r#"{{"ptpl":true,"rtype":1,"crkey":1,"bdev_uuid":"{u}","holder_uuid":"","registrants":[{{"rkey":1,"host_uuid":"{h}"}}]}}"#
        ),
        format!(
            r#"{{"ptpl":true,"rtype":1,"crkey":1,"bdev_uuid":"{u}","holder_uuid":"00000000-0000-0000-0000-000000000002","registrants":[{{"rkey":1,"host_uuid":"{h}"}}]}}"#
        ),
    ];
    for c in &cases {
        assert!(ptpl::decode(c, &bdev(), true).is_err(), "accepted {c}");
    }
    // Another bdev's file.
    let other = format!(r#"{{"ptpl":true,"bdev_uuid":"{h}","registrants":[]}}"#);
    assert!(matches!(
        ptpl::decode(&other, &bdev(), true),
        Err(PtplError::BdevMismatch { .. })
    ));
    // Persisted state on a volume that lost its ptpl_file capability.
    let ok = format!(
        r#"{{"ptpl":true,"bdev_uuid":"{u}","registrants":[{{"rkey":1,"host_uuid":"{h}"}}]}}"#
    );
    assert!(ptpl::decode(&ok, &bdev(), true).is_ok());
    assert!(ptpl::decode(&ok, &bdev(), false).is_err());
}

#[test]
fn ptpl_off_encodes_the_empty_file() {
    let mut res = Reservation::new(true);
    res.register(
        nvme(1),
        RegisterAction::Register { new_key: 1 },
        PtplChange::Keep,
    )
    .unwrap();
    assert_eq!(ptpl::encode(&res, &bdev()), "");
}

#[test]
fn ptpl_file_round_trip_on_disk() {
    let dir = std::env::temp_dir().join(format!("rtgt-ptpl-model-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ns1.json");
    let mut w = World::new(None);
    w.res.set_ptpl(true).unwrap();
    w.res
        .reserve(w.who(R), KR, ResvType::ExclusiveAccessRegistrantsOnly)
        .unwrap();
    ptpl_file::store(&path, &ptpl::encode(&w.res, &bdev())).unwrap();
    let text = ptpl_file::load(&path).unwrap().unwrap();
    let back = ptpl::decode(&text, &bdev(), true).unwrap();
    assert_eq!(back.registrants(), w.res.registrants());
    assert_eq!(back.reserved(), w.res.reserved());
    std::fs::remove_dir_all(&dir).unwrap();
}
