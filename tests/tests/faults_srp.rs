//! Fault injection on the SRP path over the simulated fabric: an initiator that disappears at
//! every step of logging in, completions delayed or lost, a queue pair failing in the middle
//! of I/O, memory registrations failing, the data buffers running dry, and an initiator that
//! overruns its credits.
//!
//! Every case checks that a witness initiator on another target port keeps reading back what
//! it wrote, that no tag is answered more often than it was sent, and that the transport's
//! channels, sessions, data buffers and posted receives and the poll groups' connection and
//! bdev I/O counters come back to their values from before the fault.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fabric::CompletionMatch;
use rtgt_tests::faults::*;
use rtgt_tests::srp_initiator::{
    BS, Data, Layout, SrpFixture, SrpInitiator, cdb, pattern, rw10, split,
};
use rtgt_tests::{HOST_IP, TARGET_IP};
use serde_json::json;

const INI: u64 = 0x5254_0012_3456_7890;
const WAIT: Duration = Duration::from_secs(15);

/// A fixture with two reactors, its witness, and every poll group warmed up (a poll group
/// sets up its device's buffers on its first channel and keeps them).
fn setup(opts: serde_json::Value) -> (SrpFixture, SrpWitness) {
    let fx = SrpFixture::new(2, opts, 1, 8192);
    let w = SrpWitness::new(&fx);
    for n in 0..2 {
        let mut i = fx.login(0x100 + n);
        assert_eq!(i.read(0, 0, BS, 1, 0, Layout::Direct).unwrap().0.status, 0);
    }
    fx.wait_until("warm-up channels gone", |f| f.qpairs().is_empty());
    (fx, w)
}

/// The target's queue pair number of the channel of initiator `ini`.
fn channel_qpn(fx: &SrpFixture, ini: u64) -> u32 {
    let suffix = format!("{ini:016x}");
    fx.qpairs()
        .iter()
        .find(|c| {
            c["initiator_port_id"]
                .as_str()
                .unwrap_or("")
                .ends_with(&suffix)
        })
        .and_then(|c| c["qp_num"].as_u64())
        .expect("the initiator's channel") as u32
}

/// An RDMA CM connect request carrying an ib_srp login whose sender vanishes at once.
fn login_request_then_vanish(fx: &SrpFixture, ini: u64) {
    let p = fx.params(ini);
    let req = transport_srp::proto::LoginReq {
        tag: transport_srp::proto::Tag([0; 8]),
        req_it_iu_len: p.it_iu_len,
        req_buf_fmt: transport_srp::proto::BufFormats::BOTH,
        req_flags: 0,
        imm_data_offset: 0,
        initiator_port_id: p.initiator,
        target_port_id: p.target,
    };
    let src = Some(SocketAddr::new(HOST_IP.parse().expect("ip"), 0));
    cm_request_then_vanish(&fx.t.fabric, src, fx.addr, &req.encode_rdma_cm(), 4);
}

/// Counts responses per tag and checks none was answered more often than sent.
#[derive(Default)]
struct Tags {
    sent: HashMap<u64, u32>,
    answered: HashMap<u64, u32>,
}

impl Tags {
    fn sent(&mut self, tag: u64) {
        *self.sent.entry(tag).or_default() += 1;
    }

    fn collect(&mut self, i: &mut SrpInitiator) {
        while let Ok(Some(r)) = i.next_response(Duration::ZERO) {
            *self.answered.entry(r.tag).or_default() += 1;
        }
        for (t, n) in &self.answered {
            let s = self.sent.get(t).copied().unwrap_or(0);
            assert!(*n <= s, "tag {t:#x} answered {n} times, sent {s} times");
        }
    }
}

fn write_cmd(i: &mut SrpInitiator, lun: u16, lba: u32, seed: u64, layout: Layout) -> u64 {
    let off = (lba as usize % 256) * 4096;
    let d = pattern(seed, 4096);
    i.mem()[off..off + 4096].copy_from_slice(&d);
    i.command(
        lun,
        &rw10(0x2a, lba, 8),
        &Data::Out(split(off, 4096, layout)),
        layout,
        false,
    )
    .expect("write")
}

#[test]
fn an_initiator_vanishing_at_every_step_of_logging_in_leaves_nothing_behind() {
    let (fx, mut witness) = setup(json!({}));
    let (nsid, gate) = fx.gated("Gate0", 4096);
    let base = srp_snapshot(&fx);
    for round in 0..2u64 {
        for step in 0..6 {
            let ini = INI + round * 16 + step;
            match step {
                // The login request (CM REQ with SRP_LOGIN_REQ), then nothing.
                0 => login_request_then_vanish(&fx, ini),
                // Logged in (REP, RTU: established), no IU yet.
                1 => drop(fx.login(ini)),
                // The first IU (INQUIRY) sent, its response not awaited.
                2 => {
                    let mut i = fx.login(ini);
                    i.command(
                        0,
                        &cdb::inquiry(None, 96),
                        &Data::In(vec![(0, 96)]),
                        Layout::Direct,
                        false,
                    )
                    .expect("INQUIRY");
                }
                // Writes in flight, some held at the bdev, some fetching their data.
                3 => {
                    let mut i = fx.login(ini);
                    gate.close();
                    for k in 0..8 {
                        write_cmd(&mut i, (nsid - 1) as u16, k * 8, k as u64, Layout::Direct);
                        write_cmd(&mut i, 0, k * 8, k as u64, Layout::Indirect);
                    }
                    fx.wait_until("writes held", |_| gate.held() == 8);
                    drop(i);
                    std::thread::sleep(Duration::from_millis(20));
                    gate.open();
                }
                // SRP_I_LOGOUT sent, the initiator gone right after.
                4 => {
                    let mut i = fx.login(ini);
                    i.logout().expect("logout");
                }
                // A DREQ with reads in flight.
                _ => {
                    let mut i = fx.login(ini);
                    for k in 0..8u32 {
                        i.command(
                            0,
                            &rw10(0x28, k * 8, 8),
                            &Data::In(vec![(k as usize * 4096, 4096)]),
                            Layout::Direct,
                            false,
                        )
                        .expect("read");
                    }
                    i.disconnect().expect("DREQ");
                }
            }
            let what = format!("vanished at step {step} (round {round})");
            srp_wait_back(&fx, &base, WAIT, &what);
            witness.verify();
        }
    }
    println!("SRP login steps interrupted: 12");
}

/// Logs in `INI` and sends its first command to LU 0 (POWER ON, absorbed), before any fault
/// meant for the test's own commands is set.
fn login_ready(fx: &SrpFixture) -> SrpInitiator {
    let mut i = fx.login(INI);
    i.run(0, &[0; 6], &Data::None, Layout::Direct)
        .expect("TEST UNIT READY");
    i
}

#[test]
fn delayed_and_lost_completions() {
    let (fx, mut witness) = setup(json!({}));
    let base = srp_snapshot(&fx);
    let faults = fx.t.net.faults();
    let mut ledger = FaultLedger::new(&fx.t.net);

    // Delays on the target's side during verified I/O with every descriptor kind.
    let mut i = login_ready(&fx);
    let tq = channel_qpn(&fx, INI);
    let mut tags = Tags::default();
    for (n, m) in [
        CompletionMatch::qp(tq).recv(),
        CompletionMatch::qp(tq).send(),
        CompletionMatch::qp(tq),
    ]
    .into_iter()
    .enumerate()
    {
        for k in 0..3 {
            faults.delay_completion(m, Duration::from_millis(30 + 20 * k));
        }
        let layout = [Layout::Direct, Layout::Indirect, Layout::Immediate][n];
        for k in 0..6u32 {
            let t = write_cmd(&mut i, 0, k * 8, u64::from(k) + 10 * n as u64, layout);
            tags.sent(t);
            assert_eq!(i.wait(t).expect("write").status, 0);
            *tags.answered.entry(t).or_default() += 1;
            let (r, d) = i
                .read(0, k * 8, BS, 8, 4 << 20, Layout::Direct)
                .expect("read");
            assert_eq!(r.status, 0);
            assert!(
                d == pattern(u64::from(k) + 10 * n as u64, 4096),
                "delays on {m:?}"
            );
        }
        tags.collect(&mut i);
        ledger.expect(delayed(3), &format!("delays on {m:?}"));
        witness.verify();
    }
    drop(i);
    srp_wait_back(&fx, &base, WAIT, "delayed target completions");

    // The initiator loses a response: it gives up and disconnects.
    let mut i = login_ready(&fx);
    faults.drop_completion(CompletionMatch::qp(i.qp_num()).recv());
    let t = write_cmd(&mut i, 0, 0, 1, Layout::Direct);
    assert!(
        i.next_response(Duration::from_millis(300))
            .unwrap()
            .is_none()
    );
    let _ = t;
    drop(i);
    srp_wait_back(&fx, &base, WAIT, "a response lost at the initiator");
    ledger.expect(dropped(1), "a response lost at the initiator");
    witness.verify();

    // The target loses the completion of a response SEND (immediate-data writes and reads:
    // the response SENDs are the only signaled send work requests... besides RDMA READs,
    // which immediate data does not need).
    let mut i = login_ready(&fx);
    let tq = channel_qpn(&fx, INI);
    faults.drop_completion(CompletionMatch::qp(tq).send());
    let t = write_cmd(&mut i, 0, 0, 2, Layout::Immediate);
    assert_eq!(i.wait(t).expect("answered").status, 0);
    let t = write_cmd(&mut i, 0, 8, 3, Layout::Immediate);
    assert_eq!(i.wait(t).expect("answered").status, 0);
    i.logout().expect("logout");
    assert!(i.wait_disconnected(WAIT));
    drop(i);
    srp_wait_back(&fx, &base, WAIT, "a SEND completion lost on the target");
    ledger.expect(dropped(1), "a SEND completion lost on the target");
    witness.verify();

    // The target loses the completion of the RDMA READ fetching a write's data: the command
    // never completes; the initiator gives up and disconnects.
    let mut i = login_ready(&fx);
    let tq = channel_qpn(&fx, INI);
    faults.drop_completion(CompletionMatch::qp(tq).send());
    let _ = write_cmd(&mut i, 0, 0, 4, Layout::Direct);
    assert!(
        i.next_response(Duration::from_millis(300))
            .unwrap()
            .is_none()
    );
    drop(i);
    srp_wait_back(
        &fx,
        &base,
        WAIT,
        "an RDMA READ completion lost on the target",
    );
    ledger.expect(dropped(1), "an RDMA READ completion lost on the target");
    witness.verify();
    println!("SRP completion faults applied: {:?}", ledger.total());
}

#[test]
fn a_queue_pair_error_in_the_middle_of_io() {
    // With a receive ring per channel (whose receives flush) and with a shared receive queue
    // (nothing of the channel's own is posted: only the adapter's QP_FATAL event tells).
    for opts in [json!({}), json!({"use_srq": true})] {
        qp_error_rounds(opts);
    }
}

fn qp_error_rounds(opts: serde_json::Value) {
    let (fx, mut witness) = setup(opts.clone());
    let (nsid, gate) = fx.gated("Gate0", 4096);
    let base = srp_snapshot(&fx);
    let mut ledger = FaultLedger::new(&fx.t.net);
    for round in 0..3u64 {
        let ini = INI + round;
        let mut i = fx.login(ini);
        gate.close();
        for k in 0..8 {
            write_cmd(&mut i, (nsid - 1) as u16, k * 8, k as u64, Layout::Direct);
            i.command(
                0,
                &rw10(0x28, k * 8, 8),
                &Data::In(split(k as usize * 4096, 4096, Layout::Indirect)),
                Layout::Indirect,
                false,
            )
            .expect("read");
        }
        fx.wait_until("writes held", |_| gate.held() == 8);
        assert!(fx.t.net.force_qp_error(channel_qpn(&fx, ini)));
        ledger.expect(qp_errors(1), &format!("{opts} round {round}"));
        witness.verify();
        // The held writes complete at the bdev; their responses cannot be sent. With a
        // receive ring the channel already closed on the flushed receives; with a shared
        // receive queue it closes on the first response that flushes.
        gate.open();
        assert!(
            i.wait_disconnected(WAIT),
            "{opts} round {round}: the channel stays"
        );
        drop(i);
        srp_wait_back(&fx, &base, WAIT, &format!("QP error round {round}"));
        // The initiator logs in again and its data path works.
        let mut i = fx.login(ini);
        let d = pattern(round, 4096);
        assert_eq!(
            i.write(0, 100, BS, 0, &d, Layout::Direct).unwrap().status,
            0
        );
        assert_eq!(i.read(0, 100, BS, 8, 8192, Layout::Direct).unwrap().1, d);
        drop(i);
        srp_wait_back(&fx, &base, WAIT, "after the relogin");
    }
}

#[test]
fn memory_registration_failures_reject_the_login_only() {
    let target_ip = TARGET_IP.parse().expect("ip");
    for opts in [json!({}), json!({"use_srq": true})] {
        let (fx, mut witness) = setup(opts.clone());
        let base = srp_snapshot(&fx);
        let mut ledger = FaultLedger::new(&fx.t.net);
        // A channel registers its receive ring (without a shared receive queue) and its
        // response buffers; each failing rejects that login with "insufficient resources".
        let n = if opts["use_srq"] == true { 1 } else { 2 };
        for skip in 0..n {
            fx.t.net.faults().fail_registration_on(target_ip, skip);
            let r = fx.login_with(&fx.params(INI));
            ledger.expect(
                registrations_failed(1),
                &format!("{opts}: registration {skip}"),
            );
            assert_eq!(
                r.as_ref().err().and_then(|e| e.reason()),
                Some(0x10001),
                "{opts}: registration {skip}"
            );
            drop(r);
            srp_wait_back(
                &fx,
                &base,
                WAIT,
                &format!("{opts}: registration {skip} failed"),
            );
            witness.verify();
        }
        let mut i = fx.login(INI);
        assert_eq!(i.read(0, 0, BS, 1, 0, Layout::Direct).unwrap().0.status, 0);
        drop(i);
        srp_wait_back(&fx, &base, WAIT, "after the registration faults");
    }
}

#[test]
fn exhausted_data_buffers_delay_other_initiators_and_lose_nothing() {
    // 16 data buffers of 64 KiB; the hog's writes, held at its bdev, take every one.
    let (fx, mut witness) = setup(json!({"num_shared_buffers": 16}));
    let (nsid, gate) = fx.gated("Gate0", 4096);
    let base = srp_snapshot(&fx);
    let mut hog = fx.login(INI);
    gate.close();
    let mut tags = Tags::default();
    for k in 0..24 {
        tags.sent(write_cmd(
            &mut hog,
            (nsid - 1) as u16,
            k * 8,
            k as u64,
            Layout::Direct,
        ));
    }
    fx.wait_until("the pool ran dry", |f| {
        f.stats()["poll_groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|pg| {
                pg["transports"].as_array().unwrap().iter().any(|t| {
                    t["trtype"] == "SRP" && t["waiting_for_buffers"].as_u64().unwrap_or(0) > 0
                })
            })
    });
    // The witness (another poll group may still have buffers; either way it completes once
    // the hog's I/O is let through).
    let t0 = Instant::now();
    let handle = std::thread::spawn(move || {
        witness.verify();
        witness
    });
    std::thread::sleep(Duration::from_millis(100));
    gate.open();
    let mut witness = handle.join().expect("witness");
    for t in tags.sent.keys().copied().collect::<Vec<_>>() {
        let r = hog.wait(t).expect("hog write");
        assert_eq!(r.status, 0);
        *tags.answered.entry(t).or_default() += 1;
    }
    tags.collect(&mut hog);
    for k in 0..24u32 {
        let (r, d) = hog
            .read((nsid - 1) as u16, k * 8, BS, 8, 2 << 20, Layout::Direct)
            .expect("read");
        assert_eq!(r.status, 0);
        assert!(d == pattern(u64::from(k), 4096), "block {k}");
    }
    println!("witness waited {:?} for buffers", t0.elapsed());
    drop(hog);
    witness.verify();
    srp_wait_back(&fx, &base, WAIT, "after the buffers ran dry");
}

#[test]
fn a_credit_overrun_is_answered_and_leaves_nothing_behind() {
    let (fx, mut witness) = setup(json!({"max_queue_depth": 16}));
    let (nsid, gate) = fx.gated("Gate0", 4096);
    let base = srp_snapshot(&fx);
    let mut bad = fx.login(INI);
    gate.close();
    let mut tags = Tags::default();
    for n in 0..40u32 {
        bad.mem()[n as usize * 512..(n as usize + 1) * 512].fill(n as u8);
        tags.sent(
            bad.command(
                (nsid - 1) as u16,
                &rw10(0x2a, n, 1),
                &Data::Out(vec![(n as usize * 512, 512)]),
                Layout::Direct,
                true,
            )
            .expect("write"),
        );
    }
    fx.wait_until("16 writes held", |_| gate.held() == 16);
    witness.verify();
    gate.open();
    let mut busy = 0;
    for t in tags.sent.keys().copied().collect::<Vec<_>>() {
        let r = bad.wait(t).expect("answered");
        *tags.answered.entry(t).or_default() += 1;
        match r.status {
            0 => {}
            8 => busy += 1,
            s => panic!("status {s:#x}"),
        }
    }
    tags.collect(&mut bad);
    assert_eq!(
        busy, 24,
        "every request beyond the 16 credits is answered BUSY"
    );
    bad.logout().expect("logout");
    assert!(bad.wait_disconnected(WAIT));
    drop(bad);
    srp_wait_back(&fx, &base, WAIT, "after the credit overrun");
    witness.verify();
}
