//! Fixed-input vectors checked against `vectors.py`, an independent Python implementation
//! (hashlib, hmac, base64, zlib, pow) run by these tests: `python3` must be on the PATH (it is on
//! every CI machine); without it the tests fail, they do not skip.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::chap::{ResponseInput, Role, augmented_challenge, response};
use super::dh::DhKey;
use super::*;

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100";
const SUBNQN: &str = "nqn.2016-06.io.spdk:cnode1";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn bytes(rng: &mut SeededRandom, n: usize) -> Vec<u8> {
    let mut v = vec![0; n];
    rng.fill(&mut v).unwrap();
    v
}

/// Runs `vectors.py` on `cases`; one result per case.
fn python(cases: &[Value]) -> Vec<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/src/nvme/auth/vectors.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 must be installed to check the DH-HMAC-CHAP vectors");
    let input = serde_json::to_vec(cases).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "vectors.py failed: {:?}", out.status);
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(results.len(), cases.len());
    results
}

fn secret(hash_id: u8, key: &[u8]) -> DhchapSecret {
    DhchapSecret::from_key(Digest::from_id(hash_id), key).unwrap()
}

#[test]
fn secrets_and_transformed_keys_match_python() {
    let mut rng = SeededRandom::new(0x5EC);
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for hash_id in 0..=3u8 {
        for len in [32, 48, 64] {
            let key = bytes(&mut rng, len);
            let s = secret(hash_id, &key);
            cases.push(json!({"kind": "dhhc1", "hash_id": hash_id, "key": hex(&key)}));
            ours.push(json!({"text": s.to_dhhc1().as_str()}));
            for nqn in [HOSTNQN, SUBNQN, "nqn.2014-08.org.nvmexpress:uuid:"] {
                cases.push(
                    json!({"kind": "transform", "hash_id": hash_id, "key": hex(&key),
                    "nqn": nqn}),
                );
                ours.push(json!({"hex": hex(s.transform(nqn).as_bytes())}));
            }
        }
    }
    let theirs = python(&cases);
    for ((c, a), b) in cases.iter().zip(&ours).zip(&theirs) {
        assert_eq!(a, b, "{c}");
    }
    // And Python's DHHC-1 text parses back to the same secret.
    for (c, t) in cases.iter().zip(&theirs) {
        if c["kind"] == "dhhc1" {
            let parsed = DhchapSecret::parse(t["text"].as_str().unwrap()).unwrap();
            assert_eq!(hex(parsed.key_bytes()), c["key"].as_str().unwrap());
            assert_eq!(u64::from(parsed.hash_id()), c["hash_id"].as_u64().unwrap());
        }
    }
}

#[test]
fn augmented_challenges_and_responses_match_python() {
    let mut rng = SeededRandom::new(0xC4A9);
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for d in Digest::ALL {
        let challenge = bytes(&mut rng, d.hash_len());
        for shared_len in [256, 512, 1024] {
            let shared = bytes(&mut rng, shared_len);
            cases.push(
                json!({"kind": "augmented", "digest": d.id(), "shared": hex(&shared),
                "challenge": hex(&challenge)}),
            );
            ours.push(json!({"hex": hex(augmented_challenge(d, &shared, &challenge).as_bytes())}));
        }
        for hash_id in 0..=3u8 {
            let key = bytes(&mut rng, [32, 48, 64][usize::from(hash_id) % 3]);
            let s = secret(hash_id, &key);
            for role in [Role::Host, Role::Controller] {
                for shared in [None, Some(bytes(&mut rng, 384))] {
                    let (seqnum, tid) = (rng.u32().unwrap(), rng.u32().unwrap() as u16);
                    let input = ResponseInput {
                        digest: d,
                        role,
                        challenge: &challenge,
                        shared: shared.as_deref(),
                        seqnum,
                        tid,
                        hostnqn: HOSTNQN,
                        subnqn: SUBNQN,
                    };
                    cases.push(
                        json!({"kind": "response", "digest": d.id(), "hash_id": hash_id,
                        "key": hex(&key),
                        "role": if role == Role::Host { "host" } else { "ctrl" },
                        "challenge": hex(&challenge), "shared": shared.as_deref().map(hex),
                        "seqnum": seqnum, "tid": tid, "hostnqn": HOSTNQN, "subnqn": SUBNQN}),
                    );
                    ours.push(json!({"hex": hex(response(&s, &input).as_bytes())}));
                }
            }
        }
    }
    let theirs = python(&cases);
    for ((c, a), b) in cases.iter().zip(&ours).zip(&theirs) {
        assert_eq!(a, b, "{c}");
    }
}

#[test]
fn ffdhe_primes_and_exponentiation_match_python() {
    let mut rng = SeededRandom::new(0xD4);
    let mut cases = Vec::new();
    let mut ours = Vec::new();
    for g in DhGroup::ALL.into_iter().skip(1) {
        cases.push(json!({"kind": "prime", "bits": g.bits()}));
        ours.push(json!({"hex": g.prime_hex().unwrap()}));
        let n = g.exponent_bits() as usize / 8;
        for (x, y) in [
            (vec![1], vec![2]),
            (vec![0xFF; n], vec![0x80; n]),
            (bytes(&mut rng, n), bytes(&mut rng, n / 2)),
        ] {
            let kx = DhKey::from_exponent(g, &x).unwrap();
            let ky = DhKey::from_exponent(g, &y).unwrap();
            let shared = kx.shared_secret(ky.public_value()).unwrap();
            cases.push(json!({"kind": "dh", "bits": g.bits(), "x": hex(&x), "y": hex(&y)}));
            ours.push(json!({"pub": hex(kx.public_value()), "shared": hex(shared.as_bytes())}));
        }
    }
    let theirs = python(&cases);
    for ((c, a), b) in cases.iter().zip(&ours).zip(&theirs) {
        assert_eq!(a, b, "{c}");
    }
}

/// Whole exchanges between [`CtrlAuth`] and [`HostAuth`], re-verified by Python from the bytes.
#[test]
fn whole_exchanges_verify_in_python() {
    let now = Instant::now();
    let mut rng = SeededRandom::new(0x7A);
    let mut cases = Vec::new();
    for (d, g, bidi) in [
        (Digest::Sha256, DhGroup::Null, false),
        (Digest::Sha256, DhGroup::Ffdhe2048, true),
        (Digest::Sha384, DhGroup::Ffdhe3072, false),
        (Digest::Sha512, DhGroup::Ffdhe4096, true),
        (Digest::Sha512, DhGroup::Null, true),
    ] {
        let host_key = secret(d.id(), &bytes(&mut rng, d.hash_len()));
        let ctrl_key = secret(0, &bytes(&mut rng, 48));
        let mut c = CtrlAuth::new(
            CtrlAuthParams {
                hostnqn: HOSTNQN.into(),
                subnqn: SUBNQN.into(),
                qid: 1,
                keys: HostKeys {
                    host: host_key.clone(),
                    ctrl: Some(ctrl_key.clone()),
                },
                policy: AuthPolicy {
                    digests: DigestSet::of(&[d]),
                    dhgroups: DhGroupSet::of(&[g]),
                },
                step_timeout: Duration::from_secs(5),
            },
            now,
        );
        let mut h = HostAuth::new(
            HostAuthParams::linux(
                HOSTNQN,
                SUBNQN,
                host_key.clone(),
                bidi.then(|| ctrl_key.clone()),
            ),
            0x4321,
        );
        c.send(&h.start(), now);
        let challenge = c.receive(4096, now, &mut rng).data;
        let exponent = c.dh_exponent();
        let HostAction::SendThenReceive(reply) = h.receive(&challenge, &mut rng) else {
            panic!("host refused the challenge")
        };
        assert_eq!(c.send(&reply, now).event, AuthEvent::Continue);
        let success1 = c.receive(4096, now, &mut rng);
        let expect = if bidi {
            AuthEvent::Continue
        } else {
            AuthEvent::Authenticated
        };
        assert_eq!(success1.event, expect);
        cases.push(
            json!({"kind": "transcript", "digest": d.id(), "hostnqn": HOSTNQN,
            "subnqn": SUBNQN, "host_key": host_key.to_dhhc1().as_str(),
            "ctrl_key": bidi.then(|| ctrl_key.to_dhhc1().as_str().to_string()),
            "challenge_msg": hex(&challenge), "reply_msg": hex(&reply),
            "success1_msg": hex(&success1.data), "ctrl_exponent": exponent.as_deref().map(hex)}),
        );
    }
    for (c, r) in cases.iter().zip(python(&cases)) {
        let checks = r["checks"].as_object().unwrap();
        assert!(checks.len() >= 8, "{r}");
        for (name, ok) in checks {
            assert_eq!(ok, &Value::Bool(true), "check {name} of {c}");
        }
    }
}
