//! NVMe reservations over NVMe-oF/RDMA (docs/reservations.md): two hosts with distinct Host
//! Identifiers on one subsystem register, acquire, preempt, release and clear, and see
//! Reservation Conflict (83h) where the reservation forbids their commands. The state is the
//! volume's, shared with SCSI: an NVMe host's reservation blocks an SRP initiator's write to
//! the same bdev, and an SRP initiator's blocks the NVMe host's.

use rtgt_tests::TestTarget;
use rtgt_tests::nvme_cmds::resv::{
    EA, WE, acquire, assert_registration_preempted, notification, preempt_and_abort_aborts,
    register, release, report, submit_preempt_and_abort,
};
use rtgt_tests::nvme_cmds::{NvmeQueue, features, read_status, write_status};
use rtgt_tests::nvme_host::{ConnectOpts, HostCtrl, HostQueue, NvmfEnv, read_sqe, write_sqe};
use rtgt_tests::srp_initiator::{SrpFixture, pr};
use serde_json::json;
use target_core::nvme::Status;
use target_core::nvme::resv::{ONCS_RESERVATIONS, RESERVATION_CONFLICT};

const NQN: &str = "nqn.2016-06.io.spdk:resv";
const HOST_A: &str = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-0000-0000-00000000000a";
const HOST_B: &str = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-0000-0000-00000000000b";
fn host(
    fabric: &fabric::Fabric,
    to: std::net::SocketAddr,
    subnqn: &str,
    hostnqn: &str,
    id: u8,
) -> HostCtrl {
    let mut o = ConnectOpts::new(subnqn, hostnqn);
    o.src = Some(rtgt_tests::HOST_IP.parse().unwrap());
    o.hostid = [id; 16];
    o.io_queues = 1;
    HostCtrl::connect(fabric, to, o).expect("connect")
}

fn write(q: &mut HostQueue) -> Status {
    write_status(q, 1)
}

fn read(q: &mut HostQueue) -> Status {
    read_status(q, 1)
}

const OK: Status = Status::SUCCESS;

/// Subsystem NQN with one malloc namespace on the RDMA listener, and hosts A and B on it.
fn two_hosts(e: &NvmfEnv) -> (HostCtrl, HostCtrl) {
    e.t.subsystem(NQN, true);
    e.t.malloc("m", 2048, 512);
    e.t.add_ns(NQN, "m");
    e.t.listen(NQN, "RDMA", 4420);
    (
        host(&e.t.fabric, e.to, NQN, HOST_A, 0xA1),
        host(&e.t.fabric, e.to, NQN, HOST_B, 0xB2),
    )
}

#[test]
fn two_nvme_hosts_register_acquire_preempt_release_and_clear() {
    let e = NvmfEnv::new(2, json!({}));
    let (mut a, mut b) = two_hosts(&e);

    // What the host is told: ONCS Reservations, RESCAP (all six types, IEKEY semantics).
    let id = a.identify(1, 0).unwrap();
    assert_ne!(
        u16::from_le_bytes([id[520], id[521]]) & ONCS_RESERVATIONS,
        0,
        "ONCS bit 5"
    );
    let ns = a.identify(0, 1).unwrap();
    assert_eq!(ns[31], 0xFE, "RESCAP: no PTPL without a ptpl_file");

    let (qa, qb) = (&mut a.io[0], &mut b.io[0]);
    assert_eq!(register(qa, 0, 0, 0xAA), OK);
    assert_eq!(register(qb, 0, 0, 0xBB), OK);
    assert_eq!(
        register(qb, 0, 0, 0xBC),
        RESERVATION_CONFLICT,
        "another key"
    );
    let (generation, rtype, regs) = report(qb);
    assert_eq!((generation, rtype), (2, 0));
    assert_eq!(
        regs,
        vec![(0xAA, false, [0xA1; 16]), (0xBB, false, [0xB2; 16])]
    );

    // A takes Write Exclusive: B's writes conflict, its reads pass.
    assert_eq!(acquire(qa, 0, WE, 0xAA, 0), OK);
    assert_eq!(write(qb), RESERVATION_CONFLICT, "registrant's write");
    assert_eq!(read(qb), OK, "registrant's read");
    assert_eq!(write(qa), OK, "holder's write");
    assert_eq!(acquire(qb, 0, WE, 0xBB, 0), RESERVATION_CONFLICT);
    assert_eq!(
        acquire(qa, 0, WE, 0xAB, 0),
        RESERVATION_CONFLICT,
        "wrong key"
    );
    let (_, rtype, regs) = report(qb);
    assert_eq!((rtype, regs[0].1, regs[1].1), (1, true, false));

    // B preempts A: A's registration goes, B holds Exclusive Access.
    assert_eq!(acquire(qb, 1, EA, 0xBB, 0xAA), OK);
    assert_eq!(write(qa), RESERVATION_CONFLICT);
    assert_eq!(
        read(qa),
        RESERVATION_CONFLICT,
        "Exclusive Access: reads too"
    );
    assert_eq!(write(qb), OK);
    let (_, rtype, regs) = report(qa);
    assert_eq!((rtype, regs), (2, vec![(0xBB, true, [0xB2; 16])]));

    // Release with the wrong type is refused; with the right one everyone writes again.
    assert_eq!(release(qb, 0, WE, 0xBB), Status::INVALID_FIELD);
    assert_eq!(release(qb, 0, EA, 0xBB), OK);
    assert_eq!(write(qa), OK);

    // Clear removes every registration.
    assert_eq!(register(qa, 0, 0, 0xA2), OK);
    assert_eq!(acquire(qa, 0, WE, 0xA2, 0), OK);
    assert_eq!(release(qb, 1, 0, 0xBB), OK);
    let (_, rtype, regs) = report(qa);
    assert_eq!((rtype, regs.len()), (0, 0));
    assert_eq!(write(qb), OK);
}

#[test]
fn one_reservation_state_for_nvme_and_srp_on_one_bdev() {
    let t = TestTarget::start(2);
    t.transport("RDMA", json!({}));
    let fx = SrpFixture::on(t, json!({}), 1, 2048);
    fx.t.listen(&fx.nqn, "RDMA", 4420);
    let to = format!("{}:4420", rtgt_tests::TARGET_IP).parse().unwrap();
    let mut n = host(&fx.t.fabric, to, &fx.nqn, HOST_A, 0xA1);
    let mut s = fx.login(0x5254_0012_3456_0001);
    let q = &mut n.io[0];

    // The NVMe host's Write Exclusive blocks the SRP initiator's writes, not its reads.
    assert_eq!(register(q, 0, 0, 0xAA), OK);
    assert_eq!(acquire(q, 0, WE, 0xAA, 0), OK);
    assert_eq!(pr::write(&mut s).status, pr::CONFLICT, "SRP write");
    assert_eq!(pr::read(&mut s).status, pr::GOOD, "SRP read");
    assert_eq!(
        pr::read_keys(&mut s).1,
        vec![0xAA],
        "SCSI sees the NVMe key"
    );
    assert_eq!(
        pr::read_reservation(&mut s),
        Some((0xAA, pr::WRITE_EXCLUSIVE))
    );
    assert_eq!(write(q), OK);

    // The SRP initiator preempts the NVMe host with Exclusive Access: NVMe reads and writes
    // conflict.
    assert_eq!(
        pr::pr_out(&mut s, pr::REGISTER, 0, 0, 0x55).status,
        pr::GOOD
    );
    assert_eq!(
        pr::pr_out(&mut s, pr::PREEMPT, pr::EXCLUSIVE_ACCESS, 0x55, 0xAA).status,
        pr::GOOD
    );
    assert_eq!(write(q), RESERVATION_CONFLICT, "NVMe write");
    assert_eq!(read(q), RESERVATION_CONFLICT, "NVMe read");
    assert_eq!(pr::write(&mut s).status, pr::GOOD);
    let (_, rtype, regs) = report(q);
    assert_eq!(rtype, 2, "Exclusive Access in NVMe's code");
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].0, 0x55);
    assert!(regs[0].1, "the SCSI holder");
    assert_eq!(
        regs[0].2,
        [
            0, 0, 0, 0, 0, 0, 0, 0, 0x52, 0x54, 0, 0x12, 0x34, 0x56, 0, 1
        ]
    );

    // An SPC-2 RESERVE(6) from the SRP initiator refuses NVMe reads too.
    assert_eq!(pr::pr_out(&mut s, pr::CLEAR, 0, 0x55, 0).status, pr::GOOD);
    assert_eq!(read(q), OK);
    assert_eq!(pr::six(&mut s, 0x16).status, pr::GOOD);
    assert_eq!(read(q), RESERVATION_CONFLICT, "RESERVE(6) vs NVMe read");
    assert_eq!(pr::six(&mut s, 0x17).status, pr::GOOD);
    assert_eq!(read(q), OK);
}

#[test]
fn a_preempted_host_is_notified_unless_it_masked_the_notice() {
    let e = NvmfEnv::new(1, json!({}));
    let (mut a, mut b) = two_hosts(&e);
    // The log page is listed as supported, and empty to begin with.
    let sup = a.get_log(0x00, 0, 0, 1024, false).unwrap();
    assert_eq!(sup[0x80 * 4], 1, "LID 80h supported");
    assert_eq!(notification(&mut a.admin), (0, 0, 0), "empty page");

    // An AER parked by A (no Async Event Configuration bit needed) completes with
    // Reservation Log Page Available when B preempts it.
    let aer = a.park_aer(0);
    assert_eq!(register(&mut a.io[0], 0, 0, 0xAA), OK);
    assert_eq!(register(&mut b.io[0], 0, 0, 0xBB), OK);
    assert_eq!(acquire(&mut a.io[0], 0, WE, 0xAA, 0), OK);
    assert_eq!(acquire(&mut b.io[0], 1, WE, 0xBB, 0xAA), OK);
    let c = a.admin.wait(aer).unwrap();
    assert_registration_preempted(c.cqe.dw0, &mut a.admin, &mut b.admin);
    assert_eq!(notification(&mut a.admin).1, 0, "read once");

    // Masked (feature 82h, REGPRE): no page.
    assert_eq!(features(&mut a.admin, true, 0x82, 1, 1 << 1), (OK, 0));
    assert_eq!(features(&mut a.admin, false, 0x82, 1, 0), (OK, 1 << 1));
    assert_eq!(
        features(&mut a.admin, true, 0x82, 1, 1 << 0).0,
        Status::INVALID_FIELD
    );
    assert_eq!(register(&mut a.io[0], 0, 0, 0xA2), OK);
    assert_eq!(acquire(&mut b.io[0], 1, WE, 0xBB, 0xA2), OK);
    assert_eq!(notification(&mut a.admin).1, 0, "masked");

    // Reservation Persistence (83h): off, and cannot be turned on without a ptpl_file.
    assert_eq!(features(&mut a.admin, false, 0x83, 1, 0), (OK, 0));
    assert_eq!(
        features(&mut a.admin, true, 0x83, 1, 1).0,
        Status::INVALID_FIELD
    );
}

#[test]
fn registrations_persist_in_the_ptpl_file() {
    let e = NvmfEnv::new(1, json!({}));
    e.t.subsystem(NQN, true);
    e.t.malloc("m", 2048, 512);
    let dir = std::env::temp_dir().join(format!("rtgt-nvmf-ptpl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ns1.json");
    let add = || {
        e.t.rt
            .block_on(e.t.target.add_namespace(
                NQN,
                target_core::target::NsParams {
                    bdev_name: "m".into(),
                    nsid: 1,
                    ptpl_file: Some(file.to_str().unwrap().into()),
                    ..Default::default()
                },
            ))
            .unwrap()
    };
    add();
    e.t.listen(NQN, "RDMA", 4420);
    let mut a = host(&e.t.fabric, e.to, NQN, HOST_A, 0xA1);
    let ns = a.identify(0, 1).unwrap();
    assert_eq!(ns[31], 0xFF, "RESCAP with PTPL");
    // CPTPL 11b: persist through power loss.
    assert_eq!(register(&mut a.io[0], 3 << 30, 0, 0xAA), OK);
    assert_eq!(acquire(&mut a.io[0], 0, EA, 0xAA, 0), OK);
    assert_eq!(features(&mut a.admin, false, 0x83, 1, 0), (OK, 1));
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(saved.contains("\"ptpl\":true"), "{saved}");
    assert!(saved.contains("\"rtype\":2"), "{saved}");

    // The namespace goes and comes back (as after a restart): the state is the file's.
    drop(a);
    e.t.rt
        .block_on(e.t.target.remove_namespace(NQN, 1))
        .unwrap();
    add();
    let mut a = host(&e.t.fabric, e.to, NQN, HOST_A, 0xA1);
    let (generation, rtype, regs) = report(&mut a.io[0]);
    assert_eq!(generation, 0, "the generation restarts");
    assert_eq!((rtype, regs), (2, vec![(0xAA, true, [0xA1; 16])]));
    let mut b = host(&e.t.fabric, e.to, NQN, HOST_B, 0xB2);
    assert_eq!(read(&mut b.io[0]), RESERVATION_CONFLICT);

    // Persistence off (Set Features 83h): the file is emptied.
    assert_eq!(features(&mut a.admin, true, 0x83, 1, 0), (OK, 0));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Gated namespace on subsystem NQN (RDMA), hosts A and B registered (0xAA, 0xBB), A holding
/// Write Exclusive.
fn gated_pair(e: &NvmfEnv) -> (std::sync::Arc<rtgt_tests::gate::Gate>, HostCtrl, HostCtrl) {
    e.t.subsystem(NQN, true);
    let gate = e.t.gated("g", 2048, 512);
    e.t.add_ns(NQN, "g");
    e.t.listen(NQN, "RDMA", 4420);
    let mut a = host(&e.t.fabric, e.to, NQN, HOST_A, 0xA1);
    let mut b = host(&e.t.fabric, e.to, NQN, HOST_B, 0xB2);
    assert_eq!(register(&mut a.io[0], 0, 0, 0xAA), OK);
    assert_eq!(register(&mut b.io[0], 0, 0, 0xBB), OK);
    assert_eq!(acquire(&mut a.io[0], 0, WE, 0xAA, 0), OK);
    (gate, a, b)
}

/// Preempt and Abort aborts the preempted host's command at the bdev: host A's write is
/// held in the bdev when B preempts it; B's Acquire completes only once that write has come
/// back, the write ends with Command Aborted due to Preempt and Abort (not success), and A's
/// next write conflicts.
#[test]
fn preempt_and_abort_aborts_the_preempted_hosts_write_at_the_bdev() {
    let e = NvmfEnv::new(2, json!({}));
    let (gate, mut a, mut b) = gated_pair(&e);
    preempt_and_abort_aborts(&mut a.io[0], &mut b.io[0], &gate, 0xAA, 0xBB);
}

/// Preempt and Abort neither waits for nor disturbs other hosts' commands, and aborts the
/// preempted host's commands not yet submitted to the bdev without waiting for the bdev:
/// while the backend refuses submissions (commands wait in the target to be retried), A's
/// write and a third host C's read are pending; B's Acquire completes while they still are,
/// A's write ends with Command Aborted due to Preempt and Abort, and C's read succeeds once
/// the backend takes it.
#[test]
fn preempt_and_abort_does_not_wait_for_other_hosts_commands() {
    use std::time::Duration;
    let e = NvmfEnv::new(2, json!({}));
    let (gate, mut a, mut b) = gated_pair(&e);
    const HOST_C: &str = "nqn.2014-08.org.nvmexpress:uuid:cccccccc-0000-0000-0000-00000000000c";
    let mut c = host(&e.t.fabric, e.to, NQN, HOST_C, 0xC3);
    gate.refuse(true);
    let w = a.io[0]
        .submit_cmd(write_sqe(1, 0, 1), Some(&[0x11; 512]), 0)
        .expect("A's write");
    let r = c.io[0]
        .submit_cmd(read_sqe(1, 4, 1), None, 512)
        .expect("C's read");
    // Both are retried by the target (each refusal is one submission attempt).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while gate.refused() < 4 {
        assert!(std::time::Instant::now() < deadline, "no retries");
        a.io[0].poll_once().expect("poll");
        c.io[0].poll_once().expect("poll");
        std::thread::sleep(Duration::from_millis(1));
    }
    let pa = submit_preempt_and_abort(&mut b.io[0], 0xBB, 0xAA);
    let done = b.io[0].wait_cmd(pa).expect("the Acquire");
    assert_eq!(done.cqe.status, OK, "Preempt and Abort");
    assert_eq!(
        a.io[0].wait_cmd(w).expect("A's write").cqe.status,
        Status::ABORTED_PREEMPT_ABORT,
        "A's write not yet at the bdev"
    );
    c.io[0].assert_none_complete_for(&[r], Duration::from_millis(100));
    gate.refuse(false);
    assert_eq!(
        c.io[0].wait_cmd(r).expect("C's read").cqe.status,
        OK,
        "C's read is not disturbed"
    );
    assert_eq!(write(&mut a.io[0]), RESERVATION_CONFLICT, "A's next write");
    assert_eq!(write(&mut b.io[0]), OK, "the new holder writes");
    let (_, rtype, regs) = report(&mut c.io[0]);
    assert_eq!((rtype, regs), (1, vec![(0xBB, true, [0xB2; 16])]));
}

/// An SRP initiator's PREEMPT AND ABORT that preempts an NVMe host aborts that host's
/// command at the bdev (Command Aborted due to Preempt and Abort) and answers only once it is
/// gone; an NVMe host's Preempt and Abort that preempts an SRP nexus aborts its task (TASK
/// ABORTED) and completes only once it is gone; each preempted initiator's next write
/// conflicts.
#[test]
fn preempt_and_abort_aborts_across_protocols() {
    use rtgt_tests::srp_initiator::{Data, Layout, rw10};
    use std::time::Duration;
    let t = TestTarget::start(2);
    t.transport("RDMA", json!({}));
    let fx = SrpFixture::on(t, json!({}), 0, 2048);
    let (nsid, gate) = fx.gated("Gate0", 2048);
    assert_eq!(nsid, 1, "the only namespace");
    let lun = 0;
    fx.t.listen(&fx.nqn, "RDMA", 4420);
    let to = format!("{}:4420", rtgt_tests::TARGET_IP).parse().unwrap();
    let mut n = host(&fx.t.fabric, to, &fx.nqn, HOST_A, 0xA1);
    let mut s = fx.login(0x5254_0012_3456_0001);
    let q = &mut n.io[0];
    let nv = |q: &mut HostQueue| write(q);
    assert_eq!(register(q, 0, 0, 0xAA), OK);
    assert_eq!(acquire(q, 0, WE, 0xAA, 0), OK);
    assert_eq!(
        pr::pr_out_on(&mut s, lun, pr::REGISTER, 0, 0, 0x55).status,
        pr::GOOD
    );

    // SCSI preempts NVMe: the NVMe write held in the bdev ends aborted.
    gate.close();
    let w = q
        .submit_cmd(write_sqe(nsid, 0, 1), Some(&[0x11; 512]), 0)
        .expect("NVMe write");
    fx.wait_until("the NVMe write at the bdev", |_| gate.held() == 1);
    let pa = pr::pr_out_start(
        &mut s,
        lun,
        pr::PREEMPT_AND_ABORT,
        pr::WRITE_EXCLUSIVE,
        0x55,
        0xAA,
    );
    assert!(
        s.next_response(Duration::from_millis(300))
            .unwrap()
            .is_none(),
        "PREEMPT AND ABORT waits for the NVMe write"
    );
    gate.open();
    assert_eq!(s.wait(pa).unwrap().status, pr::GOOD, "PREEMPT AND ABORT");
    assert_eq!(
        q.wait_cmd(w).expect("NVMe write").cqe.status,
        Status::ABORTED_PREEMPT_ABORT,
        "the NVMe write"
    );
    assert_eq!(nv(q), RESERVATION_CONFLICT, "the NVMe host's next write");

    // NVMe preempts SCSI: the SRP write held in the bdev ends TASK ABORTED.
    assert_eq!(register(q, 0, 0, 0xAB), OK);
    gate.close();
    let t = s
        .command(
            lun,
            &rw10(0x2a, 0, 1),
            &Data::Out(vec![(0, 512)]),
            Layout::Direct,
            false,
        )
        .unwrap();
    fx.wait_until("the SRP write at the bdev", |_| gate.held() == 1);
    let pa = submit_preempt_and_abort(q, 0xAB, 0x55);
    q.assert_none_complete_for(&[pa], Duration::from_millis(300));
    gate.open();
    assert_eq!(q.wait_cmd(pa).expect("Acquire").cqe.status, OK);
    let r = s.wait(t).unwrap();
    assert_eq!(r.status, 0x40, "the SRP write: TASK ABORTED, {r:?}");
    let w = |s: &mut rtgt_tests::srp_initiator::SrpInitiator| {
        s.run(
            lun,
            &rw10(0x2a, 20, 1),
            &Data::Out(vec![(0, 512)]),
            Layout::Direct,
        )
        .unwrap()
    };
    let r = w(&mut s);
    assert_eq!(
        (r.status, r.sense_key()),
        (pr::CHECK_CONDITION, Some((0x6, 0x2A, 0x05))),
        "REGISTRATIONS PREEMPTED"
    );
    assert_eq!(w(&mut s).status, pr::CONFLICT, "the SRP nexus's next write");
    assert_eq!(nv(q), OK, "the new NVMe holder writes");
}
