//! Fault injection on the NVMe/RDMA path over the simulated fabric: a host that disappears at
//! every step of connecting, completions delayed or lost (a drain marker's too), queue pairs
//! failing in the middle of I/O, memory registrations failing, buffer pools running dry, and a
//! host that stops sending Keep Alive with I/O in flight.
//!
//! Every case checks the same things: a witness host on another subsystem keeps doing verified
//! I/O (the target keeps serving other hosts and nothing touched their data), no completion
//! arrives for a command that was not outstanding (nothing completed twice), and the target's
//! resources — queue pairs, request and receive slots, buffer pools, the poll groups'
//! connection and bdev I/O counters — come back to their values from before the fault.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::CompletionMatch;
use rtgt_tests::faults::*;
use rtgt_tests::gate::Gate;
use rtgt_tests::nvme_host::*;
use rtgt_tests::{HOST_IP, TARGET_IP};
use serde_json::json;
use target_core::nvme::fabrics::build;
use target_core::nvme::spec::{CNTLID_DYNAMIC, admin_opc, prop};
use target_core::nvme::{SglDescriptor, Sqe};
use transport_rdma::cm_data::ConnectRequestData;

const NQN: &str = "nqn.2016-06.io.rtgt:faults";
const WAIT: Duration = Duration::from_secs(15);

fn src() -> Option<SocketAddr> {
    Some(SocketAddr::new(HOST_IP.parse().expect("ip"), 0))
}

fn admin_queue(e: &NvmfEnv) -> HostQueue {
    HostQueue::connect(
        &e.t.fabric,
        src(),
        e.to,
        QueueOpts {
            qid: 0,
            depth: 32,
            max_io: 128 * 1024,
            max_in_capsule: 8192,
            cntlid: 0,
        },
        &CmOverride::default(),
    )
    .expect("admin queue")
}

/// Connects the way Linux does, but stops (the host vanishes) after step `cut`:
/// 0 CM request (admin), 1 established, 2 Connect sent, 3 Connect answered, 4 CAP read,
/// 5 CC.EN=1, 6 Identify, 7 Set Features (queues), 8 I/O queue CM request, 9 I/O queue
/// established, 10 I/O Connect sent, 11 I/O Connect answered with writes in flight.
fn connect_until(e: &NvmfEnv, cut: usize) {
    let admin_pd = ConnectRequestData {
        recfmt: 0,
        qid: 0,
        hrqsize: 32,
        hsqsize: 31,
        cntlid: 0,
    }
    .encode();
    if cut == 0 {
        cm_request_then_vanish(&e.t.fabric, src(), e.to, &admin_pd, 16);
        return;
    }
    let o = e.opts(NQN);
    let mut admin = admin_queue(e);
    if cut == 1 {
        return;
    }
    let data = build::connect_data(o.hostid, CNTLID_DYNAMIC, &o.subnqn, &o.hostnqn);
    let cid = admin
        .submit(
            build::connect_sqe(0, 0, 31, 0, SglDescriptor::null_keyed()),
            Data::KeyedWrite {
                bytes: &data,
                invalidate: true,
            },
        )
        .expect("Connect");
    if cut == 2 {
        return;
    }
    let c = admin.wait(cid).expect("Connect answered").ok().expect("ok");
    let cntlid = c.cqe.dw0 as u16;
    if cut == 3 {
        return;
    }
    admin
        .cmd(build::property_get(0, prop::CAP, true), Data::None)
        .expect("CAP");
    if cut == 4 {
        return;
    }
    for cc in [0x0046_0000, 0x0046_0001] {
        admin
            .cmd(build::property_set(0, prop::CC, cc), Data::None)
            .expect("CC");
    }
    if cut == 5 {
        return;
    }
    let mut s = Sqe::new(admin_opc::IDENTIFY, 0);
    s.set_cdw(10, 1);
    admin
        .cmd(
            s,
            Data::KeyedRead {
                len: 4096,
                invalidate: true,
            },
        )
        .expect("Identify");
    if cut == 6 {
        return;
    }
    let mut s = Sqe::new(admin_opc::SET_FEATURES, 0);
    s.set_cdw(10, 0x07).set_cdw(11, 0);
    admin.cmd(s, Data::None).expect("Set Features");
    if cut == 7 {
        return;
    }
    let io_pd = ConnectRequestData {
        recfmt: 0,
        qid: 1,
        hrqsize: 32,
        hsqsize: 31,
        cntlid,
    }
    .encode();
    if cut == 8 {
        cm_request_then_vanish(&e.t.fabric, src(), e.to, &io_pd, 16);
        // The admin queue stays until the I/O queue's attempt is over on the target.
        std::thread::sleep(Duration::from_millis(50));
        return;
    }
    let mut io = HostQueue::connect(
        &e.t.fabric,
        src(),
        e.to,
        QueueOpts {
            qid: 1,
            depth: 32,
            max_io: 128 * 1024,
            max_in_capsule: 8192,
            cntlid,
        },
        &CmOverride::default(),
    )
    .expect("I/O queue");
    if cut == 9 {
        return;
    }
    let data = build::connect_data(o.hostid, cntlid, &o.subnqn, &o.hostnqn);
    let cid = io
        .submit(
            build::connect_sqe(0, 1, 31, 0, SglDescriptor::null_keyed()),
            Data::InCapsule(&data),
        )
        .expect("I/O Connect");
    if cut == 10 {
        return;
    }
    io.wait(cid)
        .expect("I/O Connect answered")
        .ok()
        .expect("ok");
    let bytes = pattern(cut as u32, 0, 8, 512);
    for i in 0..16u64 {
        io.submit(
            write_sqe(1, i * 8, 8),
            Data::KeyedWrite {
                bytes: &bytes,
                invalidate: true,
            },
        )
        .expect("write");
    }
    // Dropped with the writes in flight.
}

#[test]
fn a_host_vanishing_at_every_step_of_connecting_leaves_nothing_behind() {
    let e = NvmfEnv::new(2, json!({}));
    e.subsystem(NQN, true, 4096, 512);
    let mut witness = NvmfWitness::new(&e);
    let base = nvmf_snapshot(&e);
    for round in 0..2 {
        for cut in 0..=11 {
            connect_until(&e, cut);
            let what = format!("vanished after step {cut} (round {round})");
            nvmf_wait_back(&e, &base, WAIT, &what);
            assert!(
                e.controllers(NQN).is_empty(),
                "{what}: a controller is left"
            );
            witness.verify();
        }
    }
    // A complete, well-behaved host still gets in.
    let c = e.connect(e.opts(NQN)).expect("connect");
    c.shutdown().expect("shutdown");
    nvmf_wait_back(&e, &base, WAIT, "after a clean connect");
}

/// The target's queue pair number of queue `qid` of the (only) controller connected.
fn target_qpn(e: &NvmfEnv, qid: u16, not: &[u32]) -> u32 {
    e.target_queue_pairs()
        .into_iter()
        .find(|(q, n)| *q == qid && !not.contains(n))
        .map(|(_, n)| n)
        .expect("target queue pair")
}

/// 4 KiB commands: within the in-capsule data size, so every data path can carry them.
fn workload(seed: u32, lba0: u64) -> Workload {
    Workload {
        nsid: 1,
        bs: 512,
        lba0,
        blocks: 8,
        count: 24,
        qd: 8,
        seed,
    }
}

#[test]
fn delayed_and_lost_completions() {
    let e = NvmfEnv::new(1, json!({}));
    e.subsystem(NQN, true, 8192, 512);
    let mut witness = NvmfWitness::new(&e);
    let wq: Vec<u32> = e.target_queue_pairs().into_iter().map(|(_, n)| n).collect();
    let base = nvmf_snapshot(&e);
    let faults = e.t.net.faults();
    let mut ledger = FaultLedger::new(&e.t.net);

    // Delays on the target's side, in the middle of verified I/O on every data path: the
    // command arrives late (receive), its RDMA READ or its response SEND completes late.
    let mut c = e.connect(e.opts(NQN)).expect("connect");
    let tq = target_qpn(&e, 1, &wq);
    for (i, m) in [
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
        let mode = [Mode::InCapsule, Mode::Keyed, Mode::KeyedInvalidate][i];
        write_read_verify(&mut c.io[0], &workload(i as u32, 0), mode)
            .unwrap_or_else(|err| panic!("delays on {m:?}: {err}"));
        assert_no_stray(&c, "delayed target completions");
        ledger.expect(delayed(3), &format!("delays on {m:?}"));
        witness.verify();
    }

    // A response SEND that completes late while the host disconnects: the teardown waits for
    // it (nothing is freed while the adapter may still read it).
    faults.delay_completion(CompletionMatch::qp(tq).send(), Duration::from_millis(300));
    let cid = c.io[0]
        .submit(
            read_sqe(1, 0, 8),
            Data::KeyedRead {
                len: 4096,
                invalidate: true,
            },
        )
        .expect("read");
    drain(&mut c.io[0], &[cid], WAIT);
    c.shutdown().expect("shutdown");
    nvmf_wait_back(&e, &base, WAIT, "a late SEND completion during teardown");
    ledger.expect(delayed(1), "a late SEND completion during teardown");
    witness.verify();

    // The host loses the response to a command: it gives up on the command and disconnects;
    // the target has nothing left over.
    let mut c = e.connect(e.opts(NQN)).expect("connect");
    faults.drop_completion(CompletionMatch::qp(c.io[0].qp_num()).recv());
    let data = pattern(9, 0, 8, 512);
    let cid = c.io[0]
        .submit(write_sqe(1, 0, 8), Data::InCapsule(&data))
        .expect("write");
    assert!(matches!(
        c.io[0].wait_for(cid, Duration::from_millis(300)),
        Err(HostError::Timeout(_))
    ));
    drop(c);
    nvmf_wait_back(&e, &base, WAIT, "a response lost at the host");
    ledger.expect(dropped(1), "a response lost at the host");
    witness.verify();

    // The target loses the completion of a response it sent (the host has the response): the
    // request is released when the queue pair is torn down (the send-queue marker completes
    // after everything posted before it), not leaked.
    let mut c = e.connect(e.opts(NQN)).expect("connect");
    let tq = target_qpn(&e, 1, &wq);
    faults.drop_completion(CompletionMatch::qp(tq).send());
    // In-capsule writes and keyed reads: the only signaled send-queue work requests are the
    // response SENDs (RDMA WRITEs are unsignaled), so the lost completion is a SEND's.
    write_read_verify(&mut c.io[0], &workload(11, 512), Mode::InCapsule).expect("I/O");
    assert_no_stray(&c, "a lost SEND completion");
    c.shutdown().expect("shutdown");
    nvmf_wait_back(&e, &base, WAIT, "a SEND completion lost on the target");
    ledger.expect(dropped(1), "a SEND completion lost on the target");
    witness.verify();

    // The same for an RDMA READ completion (a keyed write's data fetch): the command never
    // completes; the host gives up and disconnects.
    let mut c = e.connect(e.opts(NQN)).expect("connect");
    let tq = target_qpn(&e, 1, &wq);
    faults.drop_completion(CompletionMatch::qp(tq).send());
    let cid = c.io[0]
        .submit(
            write_sqe(1, 0, 8),
            Data::KeyedWrite {
                bytes: &data,
                invalidate: false,
            },
        )
        .expect("write");
    assert!(matches!(
        c.io[0].wait_for(cid, Duration::from_millis(300)),
        Err(HostError::Timeout(_))
    ));
    drop(c);
    nvmf_wait_back(
        &e,
        &base,
        WAIT,
        "an RDMA READ completion lost on the target",
    );
    ledger.expect(dropped(1), "an RDMA READ completion lost on the target");
    witness.verify();
    println!("completion faults applied: {:?}", ledger.total());
}

/// The drain timeouts counted by the RDMA transport on every poll group.
fn drain_timeouts(e: &NvmfEnv) -> u64 {
    let stats = e.t.rt.block_on(e.t.target.stats());
    stats["poll_groups"]
        .as_array()
        .expect("poll groups")
        .iter()
        .flat_map(|g| g["transports"].as_array().cloned().unwrap_or_default())
        .filter(|t| t["trtype"] == "RDMA")
        .map(|t| t["drain_timeouts"].as_u64().expect("drain_timeouts"))
        .sum()
}

#[test]
fn a_draining_queue_pair_whose_marker_never_completes_is_destroyed_by_the_watchdog() {
    // The zero-length RDMA WRITE marker's completion is the last of a closing queue pair's
    // send queue. If the adapter never delivers it, nothing else ends the drain: the
    // watchdog must (the queue pair destroyed, its requests and receives released).
    let e = NvmfEnv::new(1, json!({}));
    e.subsystem(NQN, true, 8192, 512);
    let mut witness = NvmfWitness::new(&e);
    let wq: Vec<u32> = e.target_queue_pairs().into_iter().map(|(_, n)| n).collect();
    let base = nvmf_snapshot(&e);
    let mut ledger = FaultLedger::new(&e.t.net);
    let mut c = e.connect(e.opts(NQN)).expect("connect");
    let tq = target_qpn(&e, 1, &wq);
    write_read_verify(&mut c.io[0], &workload(31, 0), Mode::Keyed).expect("I/O");
    assert_no_stray(&c, "before the teardown");
    // Nothing is outstanding on the I/O queue pair: its next send completion is the drain
    // marker's flush, and it is lost.
    e.t.net
        .faults()
        .drop_completion(CompletionMatch::qp(tq).send());
    let t0 = Instant::now();
    c.shutdown().expect("shutdown");
    nvmf_wait_back(&e, &base, WAIT, "a drain marker lost on the target");
    assert!(
        t0.elapsed() >= Duration::from_secs(2),
        "destroyed after {:?}: before the watchdog could have fired",
        t0.elapsed()
    );
    ledger.expect(dropped(1), "the drain marker's completion lost");
    assert_eq!(drain_timeouts(&e), 1);
    witness.verify();
    // The poll group serves the next host.
    let mut c = e.connect(e.opts(NQN)).expect("connect again");
    write_read_verify(&mut c.io[0], &workload(32, 0), Mode::Keyed).expect("I/O again");
    c.shutdown().expect("shutdown");
    nvmf_wait_back(&e, &base, WAIT, "the next host");
    assert_eq!(
        drain_timeouts(&e),
        1,
        "a drain that completes needs no watchdog"
    );
}

/// A subsystem exporting a gated bdev (I/O parks while the gate is closed).
fn gated_subsystem(e: &NvmfEnv, nqn: &str) -> Arc<Gate> {
    e.t.subsystem(nqn, true);
    let gate = gated_bdev(e, "Gated0", 8192, 512);
    e.t.add_ns(nqn, "Gated0");
    e.t.listen(nqn, "RDMA", 4420);
    gate
}

/// Submits `n` keyed writes and `n` keyed reads on `q` without waiting; returns the CIDs.
fn io_in_flight(q: &mut HostQueue, n: u64, seed: u32) -> Vec<u16> {
    let data = pattern(seed, 0, 16, 512);
    let mut cids = Vec::new();
    for i in 0..n {
        cids.push(
            q.submit(
                write_sqe(1, i * 16, 16),
                Data::KeyedWrite {
                    bytes: &data,
                    invalidate: true,
                },
            )
            .expect("write"),
        );
        cids.push(
            q.submit(
                read_sqe(1, 4096 + i * 16, 16),
                Data::KeyedRead {
                    len: 8192,
                    invalidate: true,
                },
            )
            .expect("read"),
        );
    }
    cids
}

fn wait_held(gate: &Gate, n: usize) {
    let deadline = Instant::now() + WAIT;
    while gate.held() < n {
        assert!(Instant::now() < deadline, "only {} I/O held", gate.held());
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn queue_pair_errors_in_the_middle_of_io() {
    let e = NvmfEnv::new(2, json!({}));
    let gate = gated_subsystem(&e, NQN);
    let mut witness = NvmfWitness::new(&e);
    let wq: Vec<u32> = e.target_queue_pairs().into_iter().map(|(_, n)| n).collect();
    let base = nvmf_snapshot(&e);
    let mut ledger = FaultLedger::new(&e.t.net);

    // An I/O queue pair fails with commands held at the bdev and others in flight: that
    // queue goes, the controller and its other queue stay and work.
    let mut c = e.connect(e.opts(NQN)).expect("connect");
    gate.close();
    let cids = io_in_flight(&mut c.io[0], 8, 1);
    wait_held(&gate, 16);
    let tq = target_qpn(&e, 1, &wq);
    assert!(e.t.net.force_qp_error(tq));
    ledger.expect(qp_errors(1), "an I/O queue pair failed");
    assert!(c.io[0].wait_disconnected(WAIT));
    witness.verify();
    gate.open();
    // (Away from the LBAs of the held writes: those reached the bdev and still land.)
    let w = workload(3, 6000);
    write_read_verify(&mut c.io[1], &w, Mode::KeyedInvalidate).expect("the other queue");
    assert_eq!(e.controllers(NQN).len(), 1);
    assert_no_stray(&c, "after the I/O queue failed");
    drop(cids);
    c.shutdown().expect("shutdown");
    nvmf_wait_back(&e, &base, WAIT, "an I/O queue pair failed under I/O");

    // The admin queue pair fails with I/O in flight: the association ends, every queue of the
    // controller goes, held I/O completes into the void.
    let mut c = e.connect(e.opts(NQN)).expect("connect");
    gate.close();
    let _ = io_in_flight(&mut c.io[0], 4, 2);
    let _ = io_in_flight(&mut c.io[1], 4, 3);
    wait_held(&gate, 16);
    let ta = target_qpn(&e, 0, &wq);
    assert!(e.t.net.force_qp_error(ta));
    ledger.expect(qp_errors(1), "the admin queue pair failed");
    for q in c.io.iter_mut().chain(std::iter::once(&mut c.admin)) {
        assert!(q.wait_disconnected(WAIT), "queue {} stays", q.qid());
    }
    witness.verify();
    gate.open();
    drop(c);
    nvmf_wait_back(&e, &base, WAIT, "the admin queue pair failed under I/O");
    assert!(e.controllers(NQN).is_empty());
    witness.verify();
}

#[test]
fn memory_registration_failures_refuse_the_connection_only() {
    let target_ip = TARGET_IP.parse().expect("ip");
    // Per-queue-pair receive queues: every connection registers three regions (commands,
    // in-capsule data, responses); each one failing refuses that connection only.
    let e = NvmfEnv::new(1, json!({"no_srq": true}));
    e.subsystem(NQN, true, 4096, 512);
    let mut witness = NvmfWitness::new(&e);
    let base = nvmf_snapshot(&e);
    let mut ledger = FaultLedger::new(&e.t.net);
    for skip in 0..3 {
        e.t.net.faults().fail_registration_on(target_ip, skip);
        let r = e.connect(e.opts(NQN));
        ledger.expect(registrations_failed(1), &format!("registration {skip}"));
        assert!(
            matches!(r, Err(HostError::Rejected(_)) | Err(HostError::Cm(_))),
            "registration {skip} failed, yet: {:?}",
            r.as_ref().map(|_| ())
        );
        drop(r);
        nvmf_wait_back(&e, &base, WAIT, &format!("registration {skip} failed"));
        witness.verify();
    }
    let c = e.connect(e.opts(NQN)).expect("connect after the faults");
    c.shutdown().expect("shutdown");
    nvmf_wait_back(&e, &base, WAIT, "after the registration faults");
    drop(witness);

    // Shared receive queues: the first connection on a poll group registers the device's
    // resources; a failure there refuses that connection, and the next one sets them up.
    let e = NvmfEnv::new(1, json!({}));
    e.subsystem(NQN, true, 4096, 512);
    let mut ledger = FaultLedger::new(&e.t.net);
    for skip in 0..3 {
        e.t.net.faults().fail_registration_on(target_ip, skip);
        assert!(e.connect(e.opts(NQN)).is_err(), "registration {skip}");
        ledger.expect(
            registrations_failed(1),
            &format!("shared receive queue, registration {skip}"),
        );
        e.assert_quiescent(WAIT);
    }
    let mut c = e.connect(e.opts(NQN)).expect("connect");
    write_read_verify(&mut c.io[0], &workload(5, 0), Mode::Keyed).expect("I/O");
    c.shutdown().expect("shutdown");
    e.assert_quiescent(WAIT);
}

#[test]
fn an_exhausted_buffer_pool_delays_other_hosts_and_loses_nothing() {
    // 64 small buffers in all; the first host's writes, held at its bdev, take all of them.
    let e = NvmfEnv::new(
        1,
        json!({"num_shared_buffers": 64, "buf_cache_size": 0, "in_capsule_data_size": 4096}),
    );
    let gate = gated_subsystem(&e, NQN);
    let mut witness = NvmfWitness::new(&e);
    let base = nvmf_snapshot(&e);
    let p = e.pools();
    let mut o = e.opts(NQN);
    o.io_depth = 128;
    o.io_queues = 1;
    let mut hog = e.connect(o).expect("connect");
    gate.close();
    let data = pattern(7, 0, 8, 512);
    let mut cids = Vec::new();
    for i in 0..(p.small_total as u64 + 16) {
        cids.push(
            hog.io[0]
                .submit(
                    write_sqe(1, i * 8, 8),
                    Data::KeyedWrite {
                        bytes: &data,
                        invalidate: false,
                    },
                )
                .expect("write"),
        );
    }
    let deadline = Instant::now() + WAIT;
    while e.pools().small_free > 0 {
        assert!(
            Instant::now() < deadline,
            "the pool never ran dry: {:?}",
            e.pools()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    // The witness's in-capsule writes need no pool buffer and go through; its reads wait.
    let wdata = pattern(8, 0, 8, 512);
    let q = &mut witness.ctrl.io[0];
    q.cmd(write_sqe(1, 0, 8), Data::InCapsule(&wdata))
        .expect("in-capsule write")
        .ok()
        .expect("ok");
    let rd = q
        .submit(
            read_sqe(1, 0, 8),
            Data::KeyedRead {
                len: 4096,
                invalidate: true,
            },
        )
        .expect("read");
    std::thread::sleep(Duration::from_millis(100));
    q.poll().expect("poll");
    assert!(!q.is_done(rd), "a read got a buffer from an empty pool");
    gate.open();
    let r = q
        .wait(rd)
        .expect("read after the pool refilled")
        .ok()
        .expect("ok");
    assert_eq!(r.data, wdata);
    drain(&mut hog.io[0], &cids, WAIT);
    let w = workload(9, 0);
    read_verify(&mut hog.io[0], &Workload { count: 1, ..w }, false).ok();
    assert_no_stray(&hog, "the hog");
    hog.shutdown().expect("shutdown");
    witness.verify();
    nvmf_wait_back(&e, &base, WAIT, "after the pool ran dry");
}

#[test]
fn a_host_that_stops_sending_keep_alive_with_io_held_is_cleaned_up() {
    let e = NvmfEnv::new(2, json!({"kas": 10, "min_kato": 1000}));
    let gate = gated_subsystem(&e, NQN);
    let mut witness = NvmfWitness::new(&e);
    let base = nvmf_snapshot(&e);
    let mut o = e.opts(NQN);
    o.kato_ms = 1000;
    let mut c = e.connect(o).expect("connect");
    gate.close();
    let _ = io_in_flight(&mut c.io[0], 4, 1);
    wait_held(&gate, 8);
    // No Keep Alive from now on: the target ends the association within about KATO.
    let t0 = Instant::now();
    assert!(c.admin.wait_disconnected(Duration::from_secs(5)));
    assert!(
        t0.elapsed() >= Duration::from_millis(700),
        "{:?}",
        t0.elapsed()
    );
    for q in &mut c.io {
        assert!(q.wait_disconnected(WAIT));
    }
    witness.verify();
    // The held I/O still belongs to the bdev: nothing is freed under it. Once it returns,
    // everything is back.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(gate.held(), 8);
    gate.open();
    drop(c);
    nvmf_wait_back(&e, &base, WAIT, "keep-alive expiry with I/O held");
    assert!(e.controllers(NQN).is_empty());
    witness.verify();
}
