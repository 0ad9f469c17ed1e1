//! DH-HMAC-CHAP: the message decoder, the Authentication Send/Receive command parser, and the
//! controller state machine driven by raw messages interleaved with an honest host.
//!
//! Input: `[seed][policy][flags]` then records, each an op byte (`% 8`) and its operands:
//!
//! | op | operands | does |
//! |---|---|---|
//! | 0 | `[len u16][bytes]` | raw Authentication Send data to the controller |
//! | 1 | `[al u16]` | Authentication Receive; the data goes to the honest host's inbox |
//! | 2 | `[xor u8][pos u16]` | the honest host handles its inbox; what it sends (byte `pos` xor `xor`) goes to the controller |
//! | 3 | `[tid u16][xor u8][pos u16]` | a new honest host transaction: its AUTH_Negotiate (likewise mutated) |
//! | 4 | `[secs u8]` | time passes; the timeout hook runs |
//! | 5 | `[len u16][bytes]` | raw bytes to the honest host |
//! | 6 | `[64 bytes]` | an SQE for `AuthCmd::parse` |
//! | 7 | `[sel u8]` | rotate the keys / change the policy |
//!
//! Policy: bits 0-2 the allowed hashes (none = all), bit 3 also ffdhe2048, bit 4 only
//! ffdhe2048 (the larger groups take the same code path, only slower). Flags: bit 0 the
//! controller has a controller key, bit 1 the host asks for it, bit 2 the host's key is wrong,
//! bits 4-7 the step timeout in seconds - 1.
//!
//! Properties: nothing panics; every accepted message re-encodes to a message that decodes the
//! same; everything the controller returns is one canonical message within AL; a failed
//! command status comes only with a failure event, after which the queue is failed and not
//! authenticated; the queue becomes authenticated only through an `Authenticated` event, and
//! only when the honest host, holding the right key, answered the controller's latest challenge.
#![no_main]
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use rtgt_fuzz::Bytes;
use target_core::nvme::Sqe;
use target_core::nvme::auth::{
    AuthCmd, AuthDirection, AuthEvent, AuthOutcome, AuthPolicy, CtrlAuth, CtrlAuthParams, DhGroup,
    DhGroupSet, DhchapSecret, Digest, DigestSet, HostAction, HostAuth, HostAuthParams, HostKeys,
    Message, SeededRandom,
};

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0035-4b10-8044-b3c04f4e4433";
const SUBNQN: &str = "nqn.2016-06.io.spdk:cnode1";

fn key(fill: u8, hash: u8) -> DhchapSecret {
    DhchapSecret::from_key(Digest::from_id(hash), &[fill; 32]).expect("32-byte key")
}

fn policy(sel: u8) -> AuthPolicy {
    let digests: Vec<Digest> = Digest::ALL
        .into_iter()
        .filter(|d| sel & (1 << (d.id() - 1)) != 0)
        .collect();
    let dhgroups = if sel & 0x10 != 0 {
        DhGroupSet::of(&[DhGroup::Ffdhe2048])
    } else if sel & 0x08 != 0 {
        DhGroupSet::of(&[DhGroup::Null, DhGroup::Ffdhe2048])
    } else {
        DhGroupSet::of(&[DhGroup::Null])
    };
    AuthPolicy {
        digests: if digests.is_empty() {
            DigestSet::all()
        } else {
            DigestSet::of(&digests)
        },
        dhgroups,
    }
}

/// Decoder properties of any bytes.
fn check_decode(b: &[u8]) {
    if let Ok(m) = Message::decode(b) {
        let e = m.encode();
        assert_eq!(e.len(), m.encoded_len());
        assert!(m.encoded_len() <= b.len());
        assert_eq!(Message::decode(&e).as_ref(), Ok(&m), "re-encoded {m:?}");
    }
}

fn mutate(mut d: Vec<u8>, xor: u8, pos: u16) -> Vec<u8> {
    if xor != 0 && !d.is_empty() {
        let i = usize::from(pos) % d.len();
        d[i] ^= xor;
    }
    d
}

struct Rig {
    ctrl: CtrlAuth,
    host: Option<HostAuth>,
    inbox: Vec<u8>,
    ctrl_rng: SeededRandom,
    host_rng: SeededRandom,
    now: Instant,
    host_params: HostAuthParams,
    host_key_right: bool,
    /// The controller's latest challenge, and whether the honest host answered it.
    challenge: Option<Vec<u8>>,
    honest_answer: bool,
}

impl Rig {
    /// Checks an outcome against the properties, given AL for a Receive.
    fn check(&mut self, out: &AuthOutcome, al: Option<u32>, was_authenticated: bool) {
        if let Some(al) = al {
            assert!(out.data.len() <= al as usize);
        } else {
            assert!(out.data.is_empty());
        }
        if !out.data.is_empty() {
            let m = Message::decode(&out.data).expect("the controller sends messages");
            assert_eq!(m.encode(), out.data, "canonical");
            if let Message::Challenge(_) = m {
                self.challenge = Some(out.data.clone());
                self.honest_answer = false;
            }
        }
        if !out.status.is_success() {
            assert!(matches!(out.event, AuthEvent::Failed(_)), "{out:?}");
        }
        match out.event {
            AuthEvent::Failed(_) => {
                assert!(self.ctrl.is_failed() && !self.ctrl.is_authenticated());
                assert!(self.ctrl.deadline().is_none());
            }
            AuthEvent::Authenticated => {
                assert!(self.ctrl.is_authenticated() && self.ctrl.deadline().is_none());
                assert!(self.host_key_right, "authenticated with the wrong key");
                assert!(
                    self.honest_answer,
                    "authenticated without the honest host answering the latest challenge"
                );
            }
            AuthEvent::Continue => {
                assert_eq!(self.ctrl.is_authenticated(), was_authenticated);
            }
        }
    }

    fn send(&mut self, d: &[u8]) {
        check_decode(d);
        let was = self.ctrl.is_authenticated();
        let out = self.ctrl.send(d, self.now);
        self.check(&out, None, was);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes::new(data);
    let seed = b.u8();
    let pol = policy(b.u8());
    let flags = b.u8();
    let ctrl_key = key(0x22, 0);
    let now = Instant::now();
    let params = CtrlAuthParams {
        hostnqn: HOSTNQN.into(),
        subnqn: SUBNQN.into(),
        qid: u16::from(seed),
        keys: HostKeys {
            host: key(0x11, 1),
            ctrl: (flags & 1 != 0).then(|| ctrl_key.clone()),
        },
        policy: pol,
        step_timeout: Duration::from_secs(u64::from(flags >> 4) + 1),
    };
    let host_key_right = flags & 4 == 0;
    let host_key = if host_key_right {
        key(0x11, 1)
    } else {
        key(0x12, 1)
    };
    let mut rig = Rig {
        ctrl: CtrlAuth::new(params, now),
        host: None,
        inbox: Vec::new(),
        ctrl_rng: SeededRandom::new(u64::from(seed)),
        host_rng: SeededRandom::new(u64::from(seed) << 8 | 1),
        now,
        host_params: HostAuthParams::linux(
            HOSTNQN,
            SUBNQN,
            host_key,
            (flags & 2 != 0).then_some(ctrl_key),
        ),
        host_key_right,
        challenge: None,
        honest_answer: false,
    };
    while !b.is_empty() {
        match b.u8() % 8 {
            0 => {
                let len = usize::from(b.u16() % 1300);
                let d = b.take(len);
                rig.send(d);
            }
            1 => {
                let al = u32::from(b.u16());
                let was = rig.ctrl.is_authenticated();
                let out = rig.ctrl.receive(al, rig.now, &mut rig.ctrl_rng);
                rig.check(&out, Some(al), was);
                rig.inbox = out.data;
            }
            2 => {
                let (xor, pos) = (b.u8(), b.u16());
                let Some(host) = rig.host.as_mut() else {
                    continue;
                };
                let answering = rig.challenge.as_deref() == Some(&rig.inbox[..]);
                match host.receive(&rig.inbox, &mut rig.host_rng) {
                    HostAction::SendThenReceive(d) => {
                        if answering {
                            rig.honest_answer = true;
                        }
                        rig.send(&mutate(d, xor, pos));
                    }
                    HostAction::SendThenDone(d) => rig.send(&mutate(d, xor, pos)),
                    HostAction::Failed {
                        failure2: Some(d), ..
                    } => rig.send(&mutate(d, xor, pos)),
                    HostAction::Failed { failure2: None, .. } | HostAction::Done => {}
                }
            }
            3 => {
                let (tid, xor, pos) = (b.u16(), b.u8(), b.u16());
                let mut host = HostAuth::new(rig.host_params.clone(), tid);
                let neg = host.start();
                rig.host = Some(host);
                rig.send(&mutate(neg, xor, pos));
            }
            4 => {
                rig.now += Duration::from_secs(u64::from(b.u8()));
                let was_failed = rig.ctrl.is_failed();
                let deadline = rig.ctrl.deadline();
                match rig.ctrl.poll_timeout(rig.now) {
                    Some(_) => {
                        assert!(deadline.is_some_and(|d| d <= rig.now) && !was_failed);
                        assert!(rig.ctrl.is_failed() && !rig.ctrl.is_authenticated());
                    }
                    None => assert!(deadline.is_none_or(|d| d > rig.now)),
                }
            }
            5 => {
                let len = usize::from(b.u16() % 1300);
                let d = b.take(len);
                check_decode(d);
                if let Some(host) = rig.host.as_mut() {
                    let _ = host.receive(d, &mut rig.host_rng);
                }
            }
            6 => {
                let sqe = Sqe(b.array::<64>());
                if let Some(Ok(cmd)) = AuthCmd::parse(&sqe) {
                    assert!(cmd.len > 0);
                    assert_eq!(sqe.as_bytes()[43], 0xE9);
                    assert_eq!(&sqe.as_bytes()[41..43], &[1, 1]);
                    let rebuilt = AuthCmd::sqe(cmd.direction, sqe.cid(), cmd.len);
                    assert_eq!(AuthCmd::parse(&rebuilt), Some(Ok(cmd)));
                    assert!(cmd.direction == AuthDirection::Receive || cmd.len <= 4096);
                }
            }
            _ => {
                let sel = b.u8();
                rig.ctrl.set_policy(policy(sel));
                rig.ctrl.set_keys(HostKeys {
                    host: key(0x11, 1),
                    ctrl: (sel & 0x80 != 0).then(|| key(0x22, 0)),
                });
            }
        }
    }
});
