//! Connections going away: keep-alive expiry, hosts vanishing in the middle of I/O, pause and
//! resume under I/O, Fabrics Disconnect, controller reset, subsystem deletion and host
//! removal — and after each, no queue pair, request or buffer left behind.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rtgt_tests::nvme_host::*;
use serde_json::json;
use target_core::nvme::Sqe;
use target_core::nvme::spec::{admin_opc, fctype, prop};

const NQN: &str = "nqn.2016-06.io.rtgt:td";

fn env(opts: serde_json::Value) -> NvmfEnv {
    let e = NvmfEnv::new(2, opts);
    e.subsystem(NQN, true, 65536, 512);
    e
}

#[test]
fn keep_alive_expiry_ends_the_association() {
    let e = env(json!({"kas": 10, "min_kato": 1000}));
    let mut o = e.opts(NQN);
    o.kato_ms = 1000;
    let mut idle = e.connect(o.clone()).unwrap();
    let kas = u16::from_le_bytes([idle.id_ctrl[320], idle.id_ctrl[321]]);
    assert_eq!(kas, 10);
    let mut o2 = o.clone();
    o2.hostnqn = "nqn.2014-08.org.nvmexpress:uuid:33333333-2222-3333-4444-555555555555".into();
    let mut alive = e.connect(o2).unwrap();
    assert_eq!(e.controllers(NQN).len(), 2);
    let t0 = Instant::now();
    // The idle controller's queues are disconnected by the target within about KATO.
    while !(idle.admin.is_disconnected() && idle.io.iter().all(HostQueue::is_disconnected)) {
        let _ = idle.admin.poll();
        for q in &mut idle.io {
            let _ = q.poll();
        }
        // The other one sends Keep Alive every 300 ms and stays.
        if t0.elapsed().as_millis() % 300 < 20 {
            alive
                .keep_alive()
                .unwrap()
                .status
                .is_success()
                .then_some(())
                .unwrap();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "keep-alive never expired"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "expired too early: {:?}",
        t0.elapsed()
    );
    // Keep the survivor alive a while longer, doing I/O.
    let until = Instant::now() + Duration::from_millis(1500);
    let mut seed = 1;
    while Instant::now() < until {
        alive.keep_alive().unwrap();
        let w = Workload {
            nsid: 1,
            bs: 512,
            lba0: 0,
            blocks: 8,
            count: 8,
            qd: 4,
            seed,
        };
        write_read_verify(&mut alive.io[0], &w, Mode::KeyedInvalidate).unwrap();
        seed += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(e.controllers(NQN).len(), 1);
    alive.shutdown().unwrap();
    drop(idle);
    e.assert_quiescent(Duration::from_secs(10));
}

/// Issue 13 item 7: Keep Alive queued behind a subsystem pause while the keep-alive timer kept
/// running, so a pause longer than KATO tore down every healthy association of the subsystem.
#[test]
fn a_pause_longer_than_kato_keeps_healthy_associations() {
    let e = env(json!({"kas": 10, "min_kato": 1000}));
    let mut o = e.opts(NQN);
    o.kato_ms = 1000;
    let mut c = e.connect(o).unwrap();
    e.t.rt.block_on(e.t.target.pause(NQN, None)).unwrap();
    // The host sends Keep Alive every KATO/3, as Linux does every KATO/2, for 2.5 × KATO.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(2500) {
        let sent = t0.elapsed();
        let cid = c
            .admin
            .submit(Sqe::new(admin_opc::KEEP_ALIVE, 0), Data::None)
            .unwrap();
        let r = c
            .admin
            .wait_for(cid, Duration::from_millis(1000))
            .unwrap_or_else(|err| {
                panic!(
                    "Keep Alive sent {sent:?} into the pause: {err} (controllers {})",
                    e.controllers(NQN).len()
                )
            });
        assert!(r.cqe.status.is_success(), "{:?}", r.cqe.status);
        std::thread::sleep(Duration::from_millis(330));
    }
    assert_eq!(e.controllers(NQN).len(), 1, "the association was torn down");
    e.t.rt.block_on(e.t.target.resume(NQN)).unwrap();
    let w = Workload {
        nsid: 1,
        bs: 512,
        lba0: 0,
        blocks: 8,
        count: 8,
        qd: 4,
        seed: 9,
    };
    write_read_verify(&mut c.io[0], &w, Mode::Keyed).unwrap();
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn hosts_vanishing_in_the_middle_of_io() {
    let e = env(json!({"max_io_size": 1048576}));
    for round in 0..4u32 {
        let mut o = e.opts(NQN);
        o.io_queues = 2;
        o.io_depth = 128;
        o.max_io = 64 * 1024;
        let mut c = e.connect(o).unwrap();
        let data = pattern(round, 0, 128, 512);
        for (qi, q) in c.io.iter_mut().enumerate() {
            for i in 0..128u64 {
                let lba = (qi as u64 * 128 + i) * 128;
                let d = match i % 3 {
                    0 => Data::InCapsule(&data[..4096]),
                    1 => Data::KeyedWrite {
                        bytes: &data,
                        invalidate: true,
                    },
                    _ => Data::KeyedRead {
                        len: 65536,
                        invalidate: false,
                    },
                };
                let blocks = match i % 3 {
                    0 => 8,
                    _ => 128,
                };
                let s = if i % 3 == 2 {
                    read_sqe(1, lba, blocks)
                } else {
                    write_sqe(1, lba, blocks)
                };
                q.submit(s, d).unwrap();
            }
        }
        match round {
            // Every queue at once, I/O queues first.
            0 => {
                for q in &mut c.io {
                    q.disconnect();
                }
                c.admin.disconnect();
            }
            // The admin queue only: the association ends and the target drops the I/O queues.
            1 => {
                c.admin.disconnect();
                for q in &mut c.io {
                    assert!(q.wait_disconnected(Duration::from_secs(10)));
                }
            }
            // One I/O queue; the controller survives and keeps serving.
            2 => {
                c.io[0].disconnect();
                let q = &mut c.io[1];
                while q.outstanding() > 0 {
                    q.poll().unwrap();
                    let done: Vec<u16> = (0..0x10000u32)
                        .map(|x| x as u16)
                        .filter(|&cid| q.is_done(cid))
                        .collect();
                    for cid in done {
                        q.take(cid).unwrap().ok().unwrap();
                    }
                }
                let w = Workload {
                    nsid: 1,
                    bs: 512,
                    lba0: 0,
                    blocks: 8,
                    count: 16,
                    qd: 8,
                    seed: 3,
                };
                write_read_verify(q, &w, Mode::Keyed).unwrap();
                c.admin.disconnect();
            }
            // Dropped without any ceremony.
            _ => {}
        }
        drop(c);
        e.assert_quiescent(Duration::from_secs(10));
        assert!(e.controllers(NQN).is_empty(), "round {round}");
    }
}

#[test]
fn pause_and_resume_under_io_lose_nothing() {
    let e = env(json!({}));
    let mut o = e.opts(NQN);
    o.io_depth = 64;
    let mut c = e.connect(o).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (qi, q) in c.io.iter_mut().enumerate() {
            let stop = &stop;
            handles.push(s.spawn(move || {
                let mut rounds = 0u32;
                while !stop.load(Ordering::Relaxed) || rounds < 3 {
                    let mode =
                        [Mode::InCapsule, Mode::Keyed, Mode::KeyedInvalidate][rounds as usize % 3];
                    let w = Workload {
                        nsid: 1,
                        bs: 512,
                        lba0: qi as u64 * 20000,
                        blocks: if mode == Mode::InCapsule { 8 } else { 32 },
                        count: 256,
                        qd: 64,
                        seed: rounds * 2 + qi as u32,
                    };
                    write_read_verify(q, &w, mode)
                        .unwrap_or_else(|err| panic!("queue {qi} round {rounds}: {err}"));
                    rounds += 1;
                }
                rounds
            }));
        }
        for i in 0..10 {
            std::thread::sleep(Duration::from_millis(30));
            let nsid = (i % 2 == 1).then_some(1);
            e.t.rt.block_on(e.t.target.pause(NQN, nsid)).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            e.t.rt.block_on(e.t.target.resume(NQN)).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            assert!(h.join().unwrap() >= 3);
        }
    });
    // Admin commands that read the subsystem queue while paused and complete on resume.
    e.t.rt.block_on(e.t.target.pause(NQN, None)).unwrap();
    let mut id = Sqe::new(admin_opc::IDENTIFY, 0);
    id.set_cdw(10, 1);
    let cid = c
        .admin
        .submit(
            id,
            Data::KeyedRead {
                len: 4096,
                invalidate: false,
            },
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    c.admin.poll().unwrap();
    assert!(!c.admin.is_done(cid), "Identify ran while paused");
    e.t.rt.block_on(e.t.target.resume(NQN)).unwrap();
    c.admin.wait(cid).unwrap();
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn fabrics_disconnect_and_controller_reset() {
    let e = env(json!({}));
    let mut c = e.connect(e.opts(NQN)).unwrap();
    let ofcs = u16::from_le_bytes([c.id_ctrl[1804], c.id_ctrl[1805]]);
    assert_eq!(ofcs & 1, 1);
    // Fabrics Disconnect on I/O queue 2: answered, then the queue is gone.
    let r = c.io[1]
        .cmd(Sqe::fabrics(fctype::DISCONNECT, 0), Data::None)
        .unwrap();
    assert!(r.cqe.status.is_success());
    assert!(c.io[1].wait_disconnected(Duration::from_secs(10)));
    let deadline = Instant::now() + Duration::from_secs(5);
    while e.controllers(NQN)[0].num_io_qpairs != 1 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    c.io.pop();
    // The queue id can be connected again.
    c.add_io_queue(2, 32).unwrap();
    let w = Workload {
        nsid: 1,
        bs: 512,
        lba0: 0,
        blocks: 8,
        count: 32,
        qd: 16,
        seed: 1,
    };
    write_read_verify(&mut c.io[1], &w, Mode::InCapsule).unwrap();
    // Controller reset (CC.EN 1 -> 0): the target drops the I/O queues, keeps the admin queue.
    c.prop_set(prop::CC, 0x0046_0000).unwrap();
    for q in &mut c.io {
        assert!(q.wait_disconnected(Duration::from_secs(10)));
    }
    assert_eq!(c.prop_get(prop::CSTS, false).unwrap() & 1, 0);
    c.prop_set(prop::CC, 0x0046_0001).unwrap();
    assert_eq!(c.prop_get(prop::CSTS, false).unwrap() & 1, 1);
    c.io.clear();
    c.add_io_queue(1, 32).unwrap();
    read_verify(&mut c.io[0], &w, false).unwrap();
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

/// Issue 13 item 8: a controller reset cleared the queue-id bitmap at once. An I/O queue of
/// the old generation that went away later (here: held by a write at the bdev) cleared the bit
/// of the reconnected queue with the same id, and a duplicate Connect for that id was accepted.
#[test]
fn controller_reset_keeps_queue_ids_until_the_old_queues_are_gone() {
    let e = NvmfEnv::new(2, json!({}));
    let inner = e.t.malloc("reset_base", 4096, 512);
    let (bdev, gate) = rtgt_tests::gate::GateBdev::new("reset_gate", inner);
    e.t.target.bdevs().register(bdev).unwrap();
    e.t.subsystem(NQN, true);
    e.t.add_ns(NQN, "reset_gate");
    e.t.listen(NQN, "RDMA", 4420);
    let mut o = e.opts(NQN);
    o.io_queues = 1;
    let mut c = e.connect(o).unwrap();
    // A write of the old queue 1 stays at the bdev: that queue cannot go away yet.
    gate.close();
    let data = pattern(5, 0, 8, 512);
    c.io[0]
        .submit(
            write_sqe(1, 0, 8),
            Data::KeyedWrite {
                bytes: &data,
                invalidate: false,
            },
        )
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while gate.held() == 0 {
        c.io[0].poll().unwrap();
        assert!(
            Instant::now() < deadline,
            "the write never reached the bdev"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Reset; a host that does not wait for CSTS.RDY = 0 enables again and reconnects queue 1.
    c.prop_set(prop::CC, 0x0046_0000).unwrap();
    let mut ready_dropped_early = false;
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        ready_dropped_early |= c.prop_get(prop::CSTS, false).unwrap() & 1 == 0;
        std::thread::sleep(Duration::from_millis(10));
    }
    c.prop_set(prop::CC, 0x0046_0001).unwrap();
    assert_eq!(c.prop_get(prop::CSTS, false).unwrap() & 1, 1);
    let b = c.add_io_queue(1, 32);
    // The old queue goes away.
    gate.open();
    let want = usize::from(b.is_ok());
    let deadline = Instant::now() + Duration::from_secs(10);
    while e.controllers(NQN)[0].num_io_qpairs as usize != want
        || e.target_queue_pairs()
            .iter()
            .filter(|(q, _)| *q == 1)
            .count()
            != want
    {
        assert!(Instant::now() < deadline, "the old queue 1 never went away");
        std::thread::sleep(Duration::from_millis(5));
    }
    let c2 = c.add_io_queue(1, 32);
    let d = c.add_io_queue(1, 32);
    let accepted = [&b, &c2, &d].iter().filter(|r| r.is_ok()).count();
    assert_eq!(
        accepted, 1,
        "queue id 1 connected {accepted} times: during the reset {b:?}, after it {c2:?}, again {d:?}"
    );
    assert!(
        b.is_err(),
        "queue 1 reconnected while the old queue 1 was there"
    );
    assert!(
        !ready_dropped_early,
        "CSTS.RDY went to 0 while an I/O queue of the old generation was still there"
    );
    let w = Workload {
        nsid: 1,
        bs: 512,
        lba0: 64,
        blocks: 8,
        count: 8,
        qd: 4,
        seed: 6,
    };
    let q = c.io.last_mut().unwrap();
    write_read_verify(q, &w, Mode::Keyed).unwrap();
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn subsystem_deletion_and_host_removal_disconnect_hosts() {
    let e = env(json!({}));
    e.t.subsystem("nqn.2016-06.io.rtgt:gone", false);
    e.t.malloc("g0", 1024, 512);
    e.t.add_ns("nqn.2016-06.io.rtgt:gone", "g0");
    e.t.listen("nqn.2016-06.io.rtgt:gone", "RDMA", 4420);
    e.t.target
        .add_host("nqn.2016-06.io.rtgt:gone", HOSTNQN)
        .unwrap();
    // Host removal.
    let mut c = e.connect(e.opts("nqn.2016-06.io.rtgt:gone")).unwrap();
    e.t.rt
        .block_on(e.t.target.remove_host("nqn.2016-06.io.rtgt:gone", HOSTNQN))
        .unwrap();
    assert!(c.admin.wait_disconnected(Duration::from_secs(10)));
    for q in &mut c.io {
        assert!(q.wait_disconnected(Duration::from_secs(10)));
    }
    drop(c);
    assert!(matches!(
        e.connect(e.opts("nqn.2016-06.io.rtgt:gone")),
        Err(HostError::Nvme(_))
    ));
    // Subsystem deletion with a host connected and I/O in flight.
    e.t.target
        .add_host("nqn.2016-06.io.rtgt:gone", HOSTNQN)
        .unwrap();
    let mut c = e.connect(e.opts("nqn.2016-06.io.rtgt:gone")).unwrap();
    let data = pattern(1, 0, 8, 512);
    for i in 0..16 {
        c.io[0]
            .submit(
                write_sqe(1, i * 8, 8),
                Data::KeyedWrite {
                    bytes: &data,
                    invalidate: true,
                },
            )
            .unwrap();
    }
    e.t.rt
        .block_on(e.t.target.delete_subsystem("nqn.2016-06.io.rtgt:gone"))
        .unwrap();
    assert!(c.admin.wait_disconnected(Duration::from_secs(10)));
    drop(c);
    // The other subsystem still works.
    let mut c = e.connect(e.opts(NQN)).unwrap();
    let w = Workload {
        nsid: 1,
        bs: 512,
        lba0: 0,
        blocks: 8,
        count: 8,
        qd: 8,
        seed: 2,
    };
    write_read_verify(&mut c.io[0], &w, Mode::KeyedInvalidate).unwrap();
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn connect_disconnect_cycles_leak_nothing() {
    let e = env(json!({"no_srq": true}));
    let before = e.pools();
    for i in 0..20u32 {
        let mut o = e.opts(NQN);
        o.io_queues = 1 + (i % 3) as u16;
        o.io_depth = 16;
        let mut c = e.connect(o).unwrap();
        let w = Workload {
            nsid: 1,
            bs: 512,
            lba0: 0,
            blocks: 16,
            count: 4,
            qd: 4,
            seed: i,
        };
        write_read_verify(&mut c.io[0], &w, Mode::KeyedInvalidate).unwrap();
        if i % 2 == 0 {
            c.shutdown().unwrap();
        }
    }
    e.assert_quiescent(Duration::from_secs(10));
    assert_eq!(e.pools().small_total, before.small_total);
    let r = e.pg_resources();
    assert!(
        r.iter().all(|p| p.requests == 0 && p.receives == 0),
        "{r:?}"
    );
}

#[test]
fn a_fatal_queue_pair_error_closes_that_queue_only() {
    let e = env(json!({}));
    let mut c = e.connect(e.opts(NQN)).unwrap();
    let qps = e.target_queue_pairs();
    let (_, qpn) = *qps.iter().find(|(qid, _)| *qid == 2).expect("I/O queue 2");
    // The adapter moves the queue pair to the error state and raises QP_FATAL.
    assert!(e.t.net.force_qp_error(qpn));
    assert!(c.io[1].wait_disconnected(Duration::from_secs(10)));
    let deadline = Instant::now() + Duration::from_secs(5);
    while e.target_queue_pairs().iter().any(|(_, n)| *n == qpn) {
        assert!(
            Instant::now() < deadline,
            "the failed queue pair was not closed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let w = Workload {
        nsid: 1,
        bs: 512,
        lba0: 0,
        blocks: 8,
        count: 16,
        qd: 8,
        seed: 4,
    };
    write_read_verify(&mut c.io[0], &w, Mode::Keyed).unwrap();
    c.io.pop();
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}
