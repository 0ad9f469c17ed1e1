//! NVMe reservations over NVMe-oF/RDMA (docs/reservations.md): two hosts with distinct Host
//! Identifiers on one subsystem register, acquire, preempt, release and clear, and see
//! Reservation Conflict (83h) where the reservation forbids their commands. The state is the
//! volume's, shared with SCSI: an NVMe host's reservation blocks an SRP initiator's write to
//! the same bdev, and an SRP initiator's blocks the NVMe host's.

use rtgt_tests::TestTarget;
use rtgt_tests::nvme_cmds::resv::{
    EA, WE, acquire, assert_registration_preempted, notification, preempt_and_abort_waits,
    register, release, report,
};
use rtgt_tests::nvme_cmds::{features, read_status, write_status};
use rtgt_tests::nvme_host::{ConnectOpts, HostCtrl, HostQueue, NvmfEnv};
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

/// Preempt and Abort waits for the commands the preempted host has in flight: host A's write
/// is held in the bdev when B preempts it; B's Acquire does not complete until that write
/// has, and A's next write conflicts.
#[test]
fn preempt_and_abort_waits_for_the_preempted_hosts_commands() {
    let e = NvmfEnv::new(2, json!({}));
    e.t.subsystem(NQN, true);
    let gate = e.t.gated("g", 2048, 512);
    e.t.add_ns(NQN, "g");
    e.t.listen(NQN, "RDMA", 4420);
    let mut a = host(&e.t.fabric, e.to, NQN, HOST_A, 0xA1);
    let mut b = host(&e.t.fabric, e.to, NQN, HOST_B, 0xB2);
    assert_eq!(register(&mut a.io[0], 0, 0, 0xAA), OK);
    assert_eq!(register(&mut b.io[0], 0, 0, 0xBB), OK);
    assert_eq!(acquire(&mut a.io[0], 0, WE, 0xAA, 0), OK);

    preempt_and_abort_waits(&mut a.io[0], &mut b.io[0], &gate, 0xAA, 0xBB);
}
