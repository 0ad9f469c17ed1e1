//! The controller state machine against the host side: whole transactions, byte for byte.

use std::time::{Duration, Instant};

use super::messages::{Challenge, DHCHAP_HEADER_LEN, Negotiate, Reply};
use super::*;
use crate::nvme::spec;

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0035-4b10-8044-b3c04f4e4433";
const SUBNQN: &str = "nqn.2016-06.io.spdk:cnode1";
const AL: u32 = 4096;

fn key(fill: u8, hash: Option<Digest>) -> DhchapSecret {
    DhchapSecret::from_key(hash, &[fill; 32]).unwrap()
}

fn host_key() -> DhchapSecret {
    key(0x11, Some(Digest::Sha256))
}

fn ctrl_key() -> DhchapSecret {
    key(0x22, None)
}

fn params(ctrl: Option<DhchapSecret>, policy: AuthPolicy) -> CtrlAuthParams {
    CtrlAuthParams {
        hostnqn: HOSTNQN.into(),
        subnqn: SUBNQN.into(),
        qid: 0,
        keys: HostKeys {
            host: host_key(),
            ctrl,
        },
        policy,
        step_timeout: Duration::from_secs(10),
    }
}

fn host(host_key: DhchapSecret, ctrl_key: Option<DhchapSecret>, tid: u16) -> HostAuth {
    HostAuth::new(
        HostAuthParams::linux(HOSTNQN, SUBNQN, host_key, ctrl_key),
        tid,
    )
}

/// The end of a transaction, both sides.
#[derive(Debug, PartialEq, Eq)]
struct End {
    ctrl: AuthEvent,
    host: Result<(), FailureReason>,
}

/// Runs a transaction the way a host issues the commands, with `tamper` applied to every
/// message the host sends after the Negotiate (message index from 1).
fn run_with(
    ctrl: &mut CtrlAuth,
    host: &mut HostAuth,
    now: Instant,
    rng: &mut SeededRandom,
    mut tamper: impl FnMut(usize, &mut Vec<u8>),
) -> End {
    let out = ctrl.send(&host.start(), now);
    assert_eq!(out.status, spec::Status::SUCCESS);
    if let AuthEvent::Failed(_) = out.event {
        return End {
            ctrl: out.event,
            host: Err(FailureReason::Failed),
        };
    }
    let mut sent = 0;
    loop {
        let r = ctrl.receive(AL, now, rng);
        assert_eq!(r.status, spec::Status::SUCCESS, "{r:?}");
        assert!(r.data.len() <= AL as usize);
        let ctrl_event = r.event;
        match host.receive(&r.data, rng) {
            HostAction::SendThenReceive(mut d) => {
                sent += 1;
                tamper(sent, &mut d);
                let s = ctrl.send(&d, now);
                assert_eq!(s.status, spec::Status::SUCCESS);
                if let AuthEvent::Failed(_) = s.event {
                    return End {
                        ctrl: s.event,
                        host: Ok(()),
                    };
                }
            }
            HostAction::SendThenDone(mut d) => {
                sent += 1;
                tamper(sent, &mut d);
                let s = ctrl.send(&d, now);
                return End {
                    ctrl: s.event,
                    host: Ok(()),
                };
            }
            HostAction::Done => {
                return End {
                    ctrl: ctrl_event,
                    host: Ok(()),
                };
            }
            HostAction::Failed { reason, failure2 } => {
                let ctrl = match failure2 {
                    Some(f) => ctrl.send(&f, now).event,
                    None => ctrl_event,
                };
                return End {
                    ctrl,
                    host: Err(reason),
                };
            }
        }
    }
}

fn run(ctrl: &mut CtrlAuth, host: &mut HostAuth, now: Instant, rng: &mut SeededRandom) -> End {
    run_with(ctrl, host, now, rng, |_, _| {})
}

fn ok() -> End {
    End {
        ctrl: AuthEvent::Authenticated,
        host: Ok(()),
    }
}

fn failed(reason: FailureReason) -> End {
    End {
        ctrl: AuthEvent::Failed(reason),
        host: Err(reason),
    }
}

#[test]
fn every_hash_and_group_authenticates_both_ways() {
    let now = Instant::now();
    let mut rng = SeededRandom::new(1);
    for d in Digest::ALL {
        for g in DhGroup::ALL {
            // Each pair once, alternating one-way and bidirectional (both for every hash and
            // every group); a 8192-bit exchange is the slow part.
            let bidi = (d.id() + g.id()) % 2 == 0;
            let policy = AuthPolicy {
                digests: DigestSet::of(&[d]),
                dhgroups: DhGroupSet::of(&[g]),
            };
            let mut c = CtrlAuth::new(params(Some(ctrl_key()), policy), now);
            let mut h = host(host_key(), bidi.then(ctrl_key), 7);
            assert!(!c.is_authenticated());
            assert_eq!(run(&mut c, &mut h, now, &mut rng), ok(), "{d} {g} {bidi}");
            assert!(c.is_authenticated() && h.is_done());
            assert_eq!(c.negotiated(), Some((d, g)));
            assert_eq!(h.negotiated(), Some((d, g)));
            assert_eq!(c.deadline(), None);
            assert_eq!(c.state_name(), "completed");
        }
    }
}

#[test]
fn picks_the_strongest_allowed_pair() {
    let now = Instant::now();
    let mut rng = SeededRandom::new(2);
    let mut c = CtrlAuth::new(params(None, AuthPolicy::default()), now);
    assert_eq!(
        run(&mut c, &mut host(host_key(), None, 1), now, &mut rng),
        ok()
    );
    assert_eq!(c.negotiated(), Some((Digest::Sha512, DhGroup::Ffdhe8192)));
    let policy = AuthPolicy {
        digests: DigestSet::of(&[Digest::Sha256, Digest::Sha384]),
        dhgroups: DhGroupSet::of(&[DhGroup::Null, DhGroup::Ffdhe2048]),
    };
    let mut c = CtrlAuth::new(params(None, policy), now);
    assert_eq!(
        run(&mut c, &mut host(host_key(), None, 1), now, &mut rng),
        ok()
    );
    assert_eq!(c.negotiated(), Some((Digest::Sha384, DhGroup::Ffdhe2048)));
}

fn null_sha256() -> AuthPolicy {
    AuthPolicy {
        digests: DigestSet::of(&[Digest::Sha256]),
        dhgroups: DhGroupSet::of(&[DhGroup::Null]),
    }
}

fn ffdhe2048() -> AuthPolicy {
    AuthPolicy {
        digests: DigestSet::of(&[Digest::Sha256]),
        dhgroups: DhGroupSet::of(&[DhGroup::Ffdhe2048]),
    }
}

#[test]
fn wrong_host_key_is_refused_with_failure1() {
    let now = Instant::now();
    let mut rng = SeededRandom::new(3);
    for policy in [null_sha256(), ffdhe2048()] {
        let mut c = CtrlAuth::new(params(None, policy), now);
        let wrong = key(0x12, Some(Digest::Sha256));
        let end = run(&mut c, &mut host(wrong, None, 1), now, &mut rng);
        assert_eq!(end, failed(FailureReason::Failed));
        assert!(!c.is_authenticated() && c.is_failed());
        assert_eq!(
            c.last_failure(),
            Some((FailureReason::Failed, "host response mismatch"))
        );
        // Same key bytes, other transformation hash: also refused.
        let mut c = CtrlAuth::new(params(None, policy), now);
        let other = DhchapSecret::from_key(None, host_key().key_bytes()).unwrap();
        assert_eq!(
            run(&mut c, &mut host(other, None, 1), now, &mut rng),
            failed(FailureReason::Failed)
        );
    }
}

#[test]
fn the_failure_is_delivered_then_everything_is_refused() {
    let now = Instant::now();
    let mut rng = SeededRandom::new(4);
    let mut c = CtrlAuth::new(params(None, null_sha256()), now);
    let mut h = host(key(9, None), None, 0x0A0B);
    c.send(&h.start(), now);
    let chal = c.receive(AL, now, &mut rng);
    let HostAction::SendThenReceive(reply) = h.receive(&chal.data, &mut rng) else {
        panic!()
    };
    let s = c.send(&reply, now);
    assert_eq!(
        (s.status, s.event),
        (spec::Status::SUCCESS, AuthEvent::Continue)
    );
    assert_eq!(c.state_name(), "failure1");
    let f = c.receive(AL, now, &mut rng);
    assert_eq!(f.event, AuthEvent::Failed(FailureReason::Failed));
    assert_eq!(f.data, [0, 0xF1, 0, 0, 0x0B, 0x0A, 1, 1]);
    assert_eq!(
        h.receive(&f.data, &mut rng),
        HostAction::Failed {
            reason: FailureReason::Failed,
            failure2: None
        }
    );
    for out in [c.send(&h.start(), now), c.receive(AL, now, &mut rng)] {
        assert_eq!(out.status, spec::Status::COMMAND_SEQUENCE_ERROR);
        assert_eq!(out.event, AuthEvent::Failed(FailureReason::Failed));
    }
    assert_eq!(c.state_name(), "error");
    assert_eq!(c.deadline(), None);
}

#[test]
fn bidirectional_failures() {
    let now = Instant::now();
    let mut rng = SeededRandom::new(5);
    // The host asks the controller to authenticate, but the controller has no key.
    let mut c = CtrlAuth::new(params(None, ffdhe2048()), now);
    let end = run(
        &mut c,
        &mut host(host_key(), Some(ctrl_key()), 1),
        now,
        &mut rng,
    );
    assert_eq!(end, failed(FailureReason::Failed));
    assert_eq!(
        c.last_failure().unwrap().1,
        "the host asked to authenticate the controller, which has no key"
    );
    // The controller proves another key: the host refuses it with AUTH_Failure2.
    let mut c = CtrlAuth::new(params(Some(key(0x23, None)), ffdhe2048()), now);
    let end = run(
        &mut c,
        &mut host(host_key(), Some(ctrl_key()), 1),
        now,
        &mut rng,
    );
    assert_eq!(end, failed(FailureReason::Failed));
    assert_eq!(
        c.last_failure().unwrap().1,
        "the host refused the controller (AUTH_Failure2)"
    );
    assert!(!c.is_authenticated());
}

#[test]
fn transaction_id_is_checked() {
    let now = Instant::now();
    let mut rng = SeededRandom::new(6);
    // The Reply with another transaction id.
    let mut c = CtrlAuth::new(params(None, null_sha256()), now);
    let end = run_with(
        &mut c,
        &mut host(host_key(), None, 5),
        now,
        &mut rng,
        |_, m| {
            m[4] ^= 1;
        },
    );
    assert_eq!(end, failed(FailureReason::IncorrectPayload));
    assert_eq!(c.last_failure().unwrap().1, "transaction id mismatch");
    // Success2 with another one: no Receive follows, so it fails at once.
    let mut c = CtrlAuth::new(params(Some(ctrl_key()), null_sha256()), now);
    let end = run_with(
        &mut c,
        &mut host(host_key(), Some(ctrl_key()), 5),
        now,
        &mut rng,
        |i, m| {
            if i == 2 {
                m[5] ^= 0x80;
            }
        },
    );
    assert_eq!(end.ctrl, AuthEvent::Failed(FailureReason::IncorrectPayload));
    assert!(c.is_failed() && !c.is_authenticated());
}

#[test]
fn bad_lengths_are_incorrect_payload() {
    let now = Instant::now();
    let mut rng = SeededRandom::new(7);
    type Tamper = fn(&mut Vec<u8>);
    let cases: [(Tamper, &str); 5] = [
        (|m| m.truncate(m.len() - 1), "undecodable message"),
        (
            |m| m.push(0),
            "message length differs from the transfer length",
        ),
        // HL 31 with the bytes of one fewer: R1 of the wrong length.
        (
            |m| {
                m[6] = 31;
                m.truncate(DHCHAP_HEADER_LEN + 62 + 256);
            },
            "hash length mismatch",
        ),
        // DHVLEN 0 although a DH group was negotiated.
        (
            |m| {
                m[10] = 0;
                m[11] = 0;
                m.truncate(DHCHAP_HEADER_LEN + 64);
            },
            "no DH value",
        ),
        // CVALID with sequence number 0.
        (
            |m| {
                m[8] = 1;
                m[12..16].fill(0);
            },
            "controller challenge with sequence number 0",
        ),
    ];
    for (tamper, what) in cases {
        let mut c = CtrlAuth::new(params(None, ffdhe2048()), now);
        let end = run_with(
            &mut c,
            &mut host(host_key(), None, 1),
            now,
            &mut rng,
            |_, m| tamper(m),
        );
        assert_eq!(end, failed(FailureReason::IncorrectPayload), "{what}");
        assert_eq!(c.last_failure().unwrap().1, what);
    }
    // A DH value although the null group was negotiated.
    let mut c = CtrlAuth::new(params(None, null_sha256()), now);
    let end = run_with(
        &mut c,
        &mut host(host_key(), None, 1),
        now,
        &mut rng,
        |_, m| {
            m[10] = 4;
            m.extend_from_slice(&[1, 2, 3, 4]);
        },
    );
    assert_eq!(end, failed(FailureReason::IncorrectPayload));
    // A DH value out of range (p - 1 is all FF... E): refused as a failed authentication.
    let mut c = CtrlAuth::new(params(None, ffdhe2048()), now);
    let end = run_with(
        &mut c,
        &mut host(host_key(), None, 1),
        now,
        &mut rng,
        |_, m| {
            let n = m.len();
            m[n - 256..].fill(0);
            m[n - 1] = 1;
        },
    );
    assert_eq!(end, failed(FailureReason::Failed));
    assert_eq!(c.last_failure().unwrap().1, "invalid DH value");
}

#[test]
fn unusable_offers() {
    let now = Instant::now();
    let mut rng = SeededRandom::new(8);
    let only = |d: Digest, g: DhGroup| AuthPolicy {
        digests: DigestSet::of(&[d]),
        dhgroups: DhGroupSet::of(&[g]),
    };
    let offer = |hash_ids: &[u8], dh_ids: &[u8]| {
        let mut p = HostAuthParams::linux(HOSTNQN, SUBNQN, host_key(), None);
        p.hash_ids = hash_ids.to_vec();
        p.dh_ids = dh_ids.to_vec();
        HostAuth::new(p, 3)
    };
    for (policy, mut h, reason) in [
        (
            only(Digest::Sha512, DhGroup::Null),
            offer(&[1, 2], &[0]),
            FailureReason::HashUnusable,
        ),
        (
            only(Digest::Sha256, DhGroup::Ffdhe8192),
            offer(&[1], &[0, 1, 2, 3, 4]),
            FailureReason::DhGroupUnusable,
        ),
        (
            AuthPolicy::default(),
            offer(&[0, 4, 0xFF], &[0]),
            FailureReason::HashUnusable,
        ),
        (
            AuthPolicy::default(),
            offer(&[1], &[6, 0xFF]),
            FailureReason::DhGroupUnusable,
        ),
    ] {
        let mut c = CtrlAuth::new(params(None, policy), now);
        assert_eq!(run(&mut c, &mut h, now, &mut rng), failed(reason));
    }
    // Secure channel concatenation, and no DH-HMAC-CHAP descriptor.
    for (tamper, reason) in [
        (
            (|n: &mut Negotiate| n.sc_c = 1) as fn(&mut Negotiate),
            FailureReason::ConcatMismatch,
        ),
        (
            |n| n.protocols[0].auth_id = 2,
            FailureReason::ProtocolUnusable,
        ),
        (|n| n.protocols.clear(), FailureReason::ProtocolUnusable),
    ] {
        let mut c = CtrlAuth::new(params(None, AuthPolicy::default()), now);
        let Message::Negotiate(mut n) =
            Message::decode(&host(host_key(), None, 1).start()).unwrap()
        else {
            panic!()
        };
        tamper(&mut n);
        assert_eq!(
            c.send(&Message::Negotiate(n).encode(), now).event,
            AuthEvent::Continue
        );
        let f = c.receive(AL, now, &mut rng);
        assert_eq!(f.event, AuthEvent::Failed(reason));
        assert_eq!(Message::decode(&f.data).unwrap().tid(), 1);
    }
}

#[test]
fn out_of_sequence_and_short_buffers() {
    let now = Instant::now();
    let mut rng = SeededRandom::new(9);
    // A Receive before any Negotiate.
    let mut c = CtrlAuth::new(params(None, null_sha256()), now);
    let f = c.receive(AL, now, &mut rng);
    assert_eq!(
        f.event,
        AuthEvent::Failed(FailureReason::IncorrectProtocolMessage)
    );
    assert_eq!(f.data.len(), 8);
    // A Reply before the Challenge was read.
    let mut c = CtrlAuth::new(params(None, null_sha256()), now);
    let mut h = host(host_key(), None, 1);
    c.send(&h.start(), now);
    let reply = Message::Reply(Reply {
        tid: 1,
        response: vec![0; 32],
        challenge: None,
        seqnum: 0,
        dh_value: vec![],
    });
    assert_eq!(c.send(&reply.encode(), now).event, AuthEvent::Continue);
    let f = c.receive(AL, now, &mut rng);
    assert_eq!(
        f.event,
        AuthEvent::Failed(FailureReason::IncorrectProtocolMessage)
    );
    // A controller-to-host message sent by the host.
    let mut c = CtrlAuth::new(params(None, null_sha256()), now);
    let chal = Message::Challenge(Challenge {
        tid: 1,
        hash_id: 1,
        dh_id: 0,
        seqnum: 1,
        challenge: vec![0; 32],
        dh_value: vec![],
    });
    c.send(&chal.encode(), now);
    assert_eq!(
        c.receive(AL, now, &mut rng).event,
        AuthEvent::Failed(FailureReason::IncorrectProtocolMessage)
    );
    // An AL too short for the Challenge: AUTH_Failure1 instead; shorter than that: Invalid Field.
    for (al, status, len) in [
        (DHCHAP_HEADER_LEN as u32 + 31, spec::Status::SUCCESS, 8),
        (7, spec::Status::INVALID_FIELD, 0),
    ] {
        let mut c = CtrlAuth::new(params(None, null_sha256()), now);
        c.send(&host(host_key(), None, 1).start(), now);
        let f = c.receive(al, now, &mut rng);
        assert_eq!(
            (f.status, f.data.len(), f.event),
            (
                status,
                len,
                AuthEvent::Failed(FailureReason::IncorrectPayload)
            )
        );
    }
    // Exactly long enough works.
    let mut c = CtrlAuth::new(params(None, null_sha256()), now);
    c.send(&host(host_key(), None, 1).start(), now);
    let r = c.receive(DHCHAP_HEADER_LEN as u32 + 32, now, &mut rng);
    assert_eq!((r.data.len(), r.event), (48, AuthEvent::Continue));
}

#[test]
fn failure2_from_the_host_fails_the_queue() {
    let now = Instant::now();
    let mut rng = SeededRandom::new(10);
    let mut c = CtrlAuth::new(params(None, null_sha256()), now);
    let mut h = host(host_key(), None, 1);
    c.send(&h.start(), now);
    let mut chal = c.receive(AL, now, &mut rng).data;
    chal[8] = 9; // a hash id the host does not know
    let HostAction::Failed {
        reason,
        failure2: Some(f2),
    } = h.receive(&chal, &mut rng)
    else {
        panic!()
    };
    assert_eq!(reason, FailureReason::HashUnusable);
    let out = c.send(&f2, now);
    assert_eq!(
        (out.status, out.event),
        (
            spec::Status::SUCCESS,
            AuthEvent::Failed(FailureReason::HashUnusable)
        )
    );
    assert!(c.is_failed());
}

#[test]
fn timeouts() {
    let t0 = Instant::now();
    let step = Duration::from_secs(10);
    let mut rng = SeededRandom::new(11);
    // No Negotiate in time.
    let mut c = CtrlAuth::new(params(None, null_sha256()), t0);
    assert_eq!(c.deadline(), Some(t0 + step));
    assert_eq!(c.poll_timeout(t0 + step - Duration::from_millis(1)), None);
    assert_eq!(c.poll_timeout(t0 + step), Some(FailureReason::Failed));
    assert!(c.is_failed() && c.deadline().is_none());
    assert_eq!(c.poll_timeout(t0 + step * 2), None);
    // Each step re-arms it; the host stalls after the Challenge.
    let mut c = CtrlAuth::new(params(None, null_sha256()), t0);
    let t1 = t0 + Duration::from_secs(8);
    c.send(&host(host_key(), None, 1).start(), t1);
    assert_eq!(c.deadline(), Some(t1 + step));
    assert_eq!(c.poll_timeout(t0 + step), None);
    c.receive(AL, t1, &mut rng);
    assert_eq!(c.poll_timeout(t1 + step), Some(FailureReason::Failed));
    assert_eq!(c.last_failure().unwrap().1, "timed out");
    // Authenticated: no deadline; a re-authentication that stalls fails the queue.
    let mut c = CtrlAuth::new(params(None, null_sha256()), t0);
    run(&mut c, &mut host(host_key(), None, 1), t0, &mut rng);
    assert_eq!(c.deadline(), None);
    assert_eq!(c.poll_timeout(t0 + step * 100), None);
    c.send(&host(host_key(), None, 2).start(), t1);
    assert!(c.is_authenticated());
    assert_eq!(c.poll_timeout(t1 + step), Some(FailureReason::Failed));
    assert!(!c.is_authenticated());
}

#[test]
fn reauthentication_with_rotated_keys() {
    let now = Instant::now();
    let mut rng = SeededRandom::new(12);
    let mut c = CtrlAuth::new(params(Some(ctrl_key()), ffdhe2048()), now);
    assert_eq!(
        run(&mut c, &mut host(host_key(), None, 1), now, &mut rng),
        ok()
    );
    // Again with the same keys, bidirectional this time; authenticated all along.
    let mut h = host(host_key(), Some(ctrl_key()), 2);
    assert_eq!(c.send(&h.start(), now).event, AuthEvent::Continue);
    assert!(c.is_authenticated());
    c.receive(AL, now, &mut rng);
    assert!(c.is_authenticated());
    // Restart in the middle (the kernel allows it) and finish.
    assert_eq!(run(&mut c, &mut h, now, &mut rng), ok());
    // Rotate: the old key fails the next re-authentication, the new one works.
    let new_host = key(0x33, Some(Digest::Sha512));
    c.set_keys(HostKeys {
        host: new_host.clone(),
        ctrl: None,
    });
    let mut c2 = CtrlAuth::new(params(None, ffdhe2048()), now);
    c2.set_keys(HostKeys {
        host: new_host.clone(),
        ctrl: None,
    });
    assert_eq!(
        run(&mut c2, &mut host(new_host, None, 4), now, &mut rng),
        ok()
    );
    assert_eq!(
        run(&mut c, &mut host(host_key(), None, 3), now, &mut rng),
        failed(FailureReason::Failed)
    );
    assert!(!c.is_authenticated());
}

#[test]
fn a_replayed_reply_is_refused() {
    let now = Instant::now();
    let mut rng = SeededRandom::new(13);
    let mut captured = Vec::new();
    let mut c = CtrlAuth::new(params(None, null_sha256()), now);
    let end = run_with(
        &mut c,
        &mut host(host_key(), None, 1),
        now,
        &mut rng,
        |_, m| captured = m.clone(),
    );
    assert_eq!(end, ok());
    // Same transaction id, new challenge: the old response no longer fits.
    let mut c = CtrlAuth::new(params(None, null_sha256()), now);
    c.send(&host(host_key(), None, 1).start(), now);
    c.receive(AL, now, &mut rng);
    c.send(&captured, now);
    assert_eq!(
        c.receive(AL, now, &mut rng).event,
        AuthEvent::Failed(FailureReason::Failed)
    );
}

#[test]
fn sequence_numbers_advance_and_challenges_differ() {
    let now = Instant::now();
    let mut rng = SeededRandom::new(14);
    let mut c = CtrlAuth::new(params(None, null_sha256()), now);
    let mut seen = Vec::new();
    for tid in 0..3 {
        c.send(&host(host_key(), None, tid).start(), now);
        let Message::Challenge(ch) = Message::decode(&c.receive(AL, now, &mut rng).data).unwrap()
        else {
            panic!()
        };
        assert_eq!(ch.tid, tid);
        seen.push((ch.seqnum, ch.challenge));
    }
    assert_eq!(seen[1].0, seen[0].0.wrapping_add(1).max(1));
    assert_eq!(seen[2].0, seen[1].0.wrapping_add(1).max(1));
    assert_ne!(seen[0].1, seen[1].1);
}

#[test]
fn debug_output_has_no_key_material() {
    let c = CtrlAuth::new(params(Some(ctrl_key()), null_sha256()), Instant::now());
    let d = format!("{c:?}");
    assert!(d.contains(HOSTNQN) && d.contains("negotiate"));
    let p = format!("{:?}", params(Some(ctrl_key()), null_sha256()));
    assert!(!p.contains("17, 17") && !p.contains("34, 34"), "{p}");
}
