//! NVMe fused Compare + Write (docs/reservations.md, Compare-and-write): the pair's statuses
//! over NVMe/RDMA and NVMe/TCP, and its atomicity against a write from another queue on
//! another reactor (the volume's range lock, the one SCSI COMPARE AND WRITE takes), shown
//! with a gated bdev that keeps I/O in flight at the bdev (`Gate::held`).

use std::time::Duration;

use rtgt_tests::nvme_cmds::NvmeQueue;
use rtgt_tests::nvme_host::{
    ConnectOpts, HostCtrl, HostQueue, NvmfEnv, read_sqe, rw_sqe, write_sqe,
};
use rtgt_tests::srp_initiator::{BS as SRP_BS, Data, Layout, SrpFixture, SrpInitiator, rw10};
use rtgt_tests::tcp_host::{TcpConnectOpts, TcpEnv};
use serde_json::json;
use target_core::nvme::spec::io_opc;
use target_core::nvme::{Sqe, Status};
use transport_rdma::RdmaPg;

const NQN: &str = "nqn.2016-06.io.spdk:fused";
const BS: usize = 512;

fn fused(mut s: Sqe, fuse: u8) -> Sqe {
    s.set_flags(s.flags() & !3 | fuse);
    s
}

fn compare_sqe(lba: u64) -> Sqe {
    rw_sqe(io_opc::COMPARE, 1, lba, 1)
}

/// Sends a fused Compare (`expect`) + Write (`data`) of one block at `lba`; returns the CIDs.
fn send_pair(q: &mut impl NvmeQueue, lba: u64, expect: u8, data: u8) -> (u16, u16) {
    let c = q
        .submit_cmd(fused(compare_sqe(lba), 1), Some(&[expect; BS]), 0)
        .expect("compare");
    let w = q
        .submit_cmd(fused(write_sqe(1, lba, 1), 2), Some(&[data; BS]), 0)
        .expect("write");
    (c, w)
}

fn status(q: &mut impl NvmeQueue, cid: u16) -> Status {
    q.wait_cmd(cid).expect("completion").cqe.status
}

fn pair(q: &mut impl NvmeQueue, lba: u64, expect: u8, data: u8) -> (Status, Status) {
    let (c, w) = send_pair(q, lba, expect, data);
    (status(q, c), status(q, w))
}

fn block(q: &mut impl NvmeQueue, lba: u64) -> Vec<u8> {
    let c = q.exec(read_sqe(1, lba, 1), None, BS as u32).expect("read");
    assert_eq!(c.cqe.status, Status::SUCCESS);
    c.data
}

fn put(q: &mut impl NvmeQueue, lba: u64, v: u8) {
    let c = q
        .exec(write_sqe(1, lba, 1), Some(&[v; BS]), 0)
        .expect("write");
    assert_eq!(c.cqe.status, Status::SUCCESS);
}

/// The fused pair on one queue: match, miscompare, lone halves, mismatched halves, the
/// reserved FUSE value, and a plain Compare; the same on every transport.
fn statuses(q: &mut impl NvmeQueue) {
    const OK: Status = Status::SUCCESS;
    put(q, 5, 0x11);
    // Match: both succeed, the block holds the Write's data.
    assert_eq!(pair(q, 5, 0x11, 0x22), (OK, OK));
    assert_eq!(block(q, 5), vec![0x22; BS]);
    // Miscompare: Compare Failure (SCT 2h, SC 85h) and Failed Fused (09h); nothing written.
    let (c, w) = pair(q, 5, 0x11, 0x33);
    assert_eq!(c, Status::COMPARE_FAILURE);
    assert_eq!((c.sct(), c.sc()), (2, 0x85));
    assert_eq!(w, Status::ABORTED_FAILED_FUSED);
    assert_eq!(w.sc(), 0x09);
    assert_eq!(block(q, 5), vec![0x22; BS]);
    // A first half followed by a plain command: Missing Fused (0Ah); the other runs.
    let c = q
        .submit_cmd(fused(compare_sqe(5), 1), Some(&[0x22; BS]), 0)
        .expect("compare");
    let r = q
        .submit_cmd(read_sqe(1, 5, 1), None, BS as u32)
        .expect("read");
    assert_eq!(status(q, c), Status::ABORTED_MISSING_FUSED);
    assert_eq!(status(q, r), OK);
    // A second half that follows no first half: Missing Fused; nothing written.
    let w = q
        .submit_cmd(fused(write_sqe(1, 5, 1), 2), Some(&[0x44; BS]), 0)
        .expect("write");
    assert_eq!(status(q, w), Status::ABORTED_MISSING_FUSED);
    assert_eq!(block(q, 5), vec![0x22; BS]);
    // Halves on different blocks: both Invalid Field; nothing written.
    let c = q
        .submit_cmd(fused(compare_sqe(5), 1), Some(&[0x22; BS]), 0)
        .expect("compare");
    let w = q
        .submit_cmd(fused(write_sqe(1, 6, 1), 2), Some(&[0x55; BS]), 0)
        .expect("write");
    assert_eq!(status(q, c), Status::INVALID_FIELD);
    assert_eq!(status(q, w), Status::INVALID_FIELD);
    assert_eq!(block(q, 6), vec![0; BS]);
    // FUSE 11b is reserved; a first half that is not a Compare is Invalid Field.
    let s = q
        .exec(fused(write_sqe(1, 5, 1), 3), Some(&[0x66; BS]), 0)
        .expect("fuse 11b")
        .cqe
        .status;
    assert_eq!(s, Status::INVALID_FIELD);
    let s = q
        .exec(fused(write_sqe(1, 5, 1), 1), Some(&[0x66; BS]), 0)
        .expect("fused write first")
        .cqe
        .status;
    assert_eq!(s, Status::INVALID_FIELD);
    // The pair still works after all that (the queue's table is clean).
    assert_eq!(pair(q, 5, 0x22, 0x77), (OK, OK));
    assert_eq!(block(q, 5), vec![0x77; BS]);
    // A plain Compare (ONCS bit 0).
    let s = |q: &mut _, v: u8| -> Status {
        NvmeQueue::exec(q, compare_sqe(5), Some(&[v; BS]), 0)
            .expect("compare")
            .cqe
            .status
    };
    assert_eq!(s(q, 0x77), OK);
    assert_eq!(s(q, 0x78), Status::COMPARE_FAILURE);
}

#[test]
fn fused_compare_and_write_over_rdma() {
    let e = NvmfEnv::new(1, json!({}));
    e.subsystem(NQN, true, 64, BS as u32);
    let mut c = e.connect(e.opts(NQN)).expect("connect");
    // Identify Controller: FUSES bit 0 (Compare + Write), ONCS bit 0 (Compare).
    assert_eq!(u16::from_le_bytes([c.id_ctrl[522], c.id_ctrl[523]]) & 1, 1);
    assert_eq!(c.id_ctrl[520] & 1, 1);
    statuses(&mut c.io[0]);
}

#[test]
fn fused_compare_and_write_over_tcp() {
    let e = TcpEnv::new(1, json!({}));
    e.subsystem(NQN, true, 64, BS as u32);
    let mut o = TcpConnectOpts::new(NQN);
    o.io_queues = 1;
    let mut c = e.connect(&o).expect("connect");
    let id = c.identify(1, 0).expect("identify");
    assert_eq!(u16::from_le_bytes([id[522], id[523]]) & 1, 1);
    let q = &mut c.io[0];
    statuses(q);
    // Halves whose data comes after an R2T (beyond the 4 KiB in-capsule size) are refused:
    // they reach the exec layer when their data is in, not in arrival order.
    let big = 16;
    let c1 = q
        .submit_cmd(
            fused(rw_sqe(io_opc::COMPARE, 1, 8, big), 1),
            Some(&[0; 16 * BS]),
            0,
        )
        .expect("compare");
    let w1 = q
        .submit_cmd(fused(write_sqe(1, 8, big), 2), Some(&[0x99; 16 * BS]), 0)
        .expect("write");
    assert_eq!(status(q, c1), Status::INVALID_FIELD);
    assert_eq!(status(q, w1), Status::INVALID_FIELD);
    assert_eq!(block(q, 8), vec![0; BS]);
    // For the same reason such a command does not break a pair: a large write sent before
    // a pair's Compare reaches the exec layer after it (it completes before the Write is
    // even sent), and the pair still runs.
    let w = q
        .submit_cmd(write_sqe(1, 30, big), Some(&[0x12; 16 * BS]), 0)
        .expect("big write");
    let cc = q
        .submit_cmd(fused(compare_sqe(5), 1), Some(&[0x77; BS]), 0)
        .expect("compare");
    assert_eq!(status(q, w), Status::SUCCESS);
    let cw = q
        .submit_cmd(fused(write_sqe(1, 5, 1), 2), Some(&[0x88; BS]), 0)
        .expect("write");
    assert_eq!(
        (status(q, cc), status(q, cw)),
        (Status::SUCCESS, Status::SUCCESS)
    );
    assert_eq!(block(q, 5), vec![0x88; BS]);
}

#[test]
fn fused_compare_and_write_is_atomic_against_a_write_from_another_reactor() {
    let e = NvmfEnv::new(2, json!({}));
    let (gate, _c, mut a, mut b) = two_queues_on_a_gated_bdev(&e, "FusedGate");
    // 1. B's write of 0xAA is in flight (held at the bdev) when A's pair arrives: the
    //    compare waits for it (the lock drains B's reactor) and then sees 0xAA.
    let (w, cc, cw) = pair_behind_a_held_write(&gate, &mut a, &mut b);
    std::thread::sleep(Duration::from_millis(200));
    let held = gate.held();
    gate.open();
    assert_eq!(
        held, 1,
        "the compare does not run before B's write completed"
    );
    assert_eq!(status(&mut b, w), Status::SUCCESS);
    assert_eq!(status(&mut a, cc), Status::SUCCESS);
    assert_eq!(status(&mut a, cw), Status::SUCCESS);
    assert_eq!(block(&mut b, 5), vec![0xBB; BS]);

    // 2. A's pair holds block 5 (its compare is held at the bdev): B's write to block 5
    //    waits in the target, B's write to block 6 goes on.
    gate.close();
    let (cc, cw) = send_pair(&mut a, 5, 0xBB, 0xCC);
    wait_held(&gate, 1);
    let on = b
        .submit_cmd(write_sqe(1, 5, 1), Some(&[0xDD; BS]), 0)
        .expect("write");
    let next = b
        .submit_cmd(write_sqe(1, 6, 1), Some(&[0xEE; BS]), 0)
        .expect("write");
    wait_held(&gate, 2);
    std::thread::sleep(Duration::from_millis(200));
    let held = gate.held();
    gate.open();
    assert_eq!(held, 2, "B's write to block 5 waits for the lock");
    assert_eq!(status(&mut a, cc), Status::SUCCESS);
    assert_eq!(status(&mut a, cw), Status::SUCCESS);
    assert_eq!(status(&mut b, on), Status::SUCCESS);
    assert_eq!(status(&mut b, next), Status::SUCCESS);
    assert_eq!(
        block(&mut a, 5),
        vec![0xDD; BS],
        "B's write, which waited, is last"
    );
    assert_eq!(block(&mut a, 6), vec![0xEE; BS]);

    // 3. A miscompare releases the lock: B's write to the block goes on.
    assert_eq!(
        pair(&mut a, 5, 0x00, 0x11),
        (Status::COMPARE_FAILURE, Status::ABORTED_FAILED_FUSED)
    );
    put(&mut b, 5, 0x66);
    assert_eq!(block(&mut a, 5), vec![0x66; BS]);
}

/// Waits until `n` I/Os are held at the bdev; on a timeout the gate opens (so the target
/// can stop) and the test fails.
fn wait_held(gate: &rtgt_tests::gate::Gate, n: usize) {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while gate.held() < n {
        if std::time::Instant::now() > until {
            let held = gate.held();
            gate.open();
            panic!("{n} I/Os held at the bdev: only {held}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sends SCSI COMPARE AND WRITE of one block at `lba` (`verify`, then `write`).
fn srp_caw(i: &mut SrpInitiator, lba: u64, verify: u8, write: u8) -> u64 {
    let mut c = [0u8; 16];
    c[0] = 0x89;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[13] = 1;
    i.mem()[..BS].fill(verify);
    i.mem()[BS..2 * BS].fill(write);
    let out = Data::Out(vec![(0, 2 * SRP_BS)]);
    i.command(0, &c, &out, Layout::Direct, false)
        .expect("COMPARE AND WRITE")
}

/// Sends SCSI WRITE(10) of one block of `v` at `lba`.
fn srp_write(i: &mut SrpInitiator, lba: u32, v: u8) -> u64 {
    let off = 64 << 10;
    i.mem()[off..off + BS].fill(v);
    let out = Data::Out(vec![(off, SRP_BS)]);
    i.command(0, &rw10(0x2a, lba, 1), &out, Layout::Direct, false)
        .expect("WRITE")
}

#[test]
fn fused_compare_and_write_and_srp_share_the_range_lock() {
    let t = rtgt_tests::TestTarget::start(2);
    t.transport("RDMA", json!({}));
    let fx = SrpFixture::on(t, json!({}), 0, 64);
    let (nsid, gate) = fx.gated("SharedGate", 64);
    assert_eq!(nsid, 1);
    fx.t.listen(&fx.nqn, "RDMA", 4420);
    let to = format!("{}:4420", rtgt_tests::TARGET_IP)
        .parse()
        .expect("addr");
    let mut o = ConnectOpts::new(&fx.nqn, rtgt_tests::nvme_host::HOSTNQN);
    o.src = Some(rtgt_tests::HOST_IP.parse().expect("ip"));
    o.io_queues = 1;
    let mut n = HostCtrl::connect(&fx.t.fabric, to, o).expect("connect");
    let q = &mut n.io[0];
    let mut s = fx.login(0x5254_0012_3456_00C3);

    // 1. The SRP COMPARE AND WRITE holds block 5 (its read is held at the bdev): the NVMe
    //    pair waits for the lock, and its compare then sees the SRP write's data.
    gate.close();
    let c = srp_caw(&mut s, 5, 0, 0x11);
    wait_held(&gate, 1);
    let (cc, cw) = send_pair(q, 5, 0x11, 0x22);
    q.assert_none_complete_for(&[cc, cw], Duration::from_millis(200));
    let held = gate.held();
    gate.open();
    assert_eq!(held, 1, "the NVMe compare waits for the SCSI lock");
    let r = s.wait(c).expect("caw");
    assert_eq!(r.status, 0, "{:?}", r.sense_key());
    assert_eq!(status(q, cc), Status::SUCCESS);
    assert_eq!(status(q, cw), Status::SUCCESS);
    assert_eq!(block(q, 5), vec![0x22; BS]);

    // 2. The NVMe pair holds block 6 (its compare is held at the bdev): the SRP write to
    //    block 6 waits in the target and lands after the pair's write.
    gate.close();
    let (cc, cw) = send_pair(q, 6, 0, 0x33);
    wait_held(&gate, 1);
    let w = srp_write(&mut s, 6, 0x44);
    std::thread::sleep(Duration::from_millis(200));
    let held = gate.held();
    gate.open();
    assert_eq!(held, 1, "the SRP write waits for the NVMe pair's lock");
    assert_eq!(status(q, cc), Status::SUCCESS);
    assert_eq!(status(q, cw), Status::SUCCESS);
    assert_eq!(s.wait(w).expect("write").status, 0);
    assert_eq!(
        block(q, 6),
        vec![0x44; BS],
        "the SRP write, which waited, is last"
    );
}

#[test]
fn a_queue_torn_down_mid_pair_releases_the_lock() {
    let e = NvmfEnv::new(2, json!({}));
    e.t.subsystem(NQN, true);
    let gate = e.t.gated("TeardownGate", 64, BS as u32);
    e.t.add_ns(NQN, "TeardownGate");
    e.t.listen(NQN, "RDMA", 4420);
    let mut other = e.connect(e.opts(NQN)).expect("connect");

    // A first half waits for its second; its queue goes away.
    let mut c = e.connect(e.opts(NQN)).expect("connect");
    let cc = c.io[0]
        .submit_cmd(fused(compare_sqe(5), 1), Some(&[0; BS]), 0)
        .expect("compare");
    c.io[0].assert_none_complete_for(&[cc], Duration::from_millis(200));
    c.io[0].disconnect();
    drop(c);
    put(&mut other.io[0], 5, 0x55);

    // The pair holds block 6 (its compare is held at the bdev) when its queue goes away:
    // the lock is released, another queue's write to block 6 reaches the bdev.
    let mut c = e.connect(e.opts(NQN)).expect("connect");
    gate.close();
    send_pair(&mut c.io[0], 6, 0, 0x66);
    wait_held(&gate, 1);
    c.io[0].disconnect();
    let w = other.io[0]
        .submit_cmd(write_sqe(1, 6, 1), Some(&[0x77; BS]), 0)
        .expect("write");
    wait_held(&gate, 2);
    gate.open();
    assert_eq!(status(&mut other.io[0], w), Status::SUCCESS);
    drop(c);
    assert_eq!(block(&mut other.io[0], 6), vec![0x77; BS]);
    other.shutdown().expect("shutdown");
    e.assert_quiescent(Duration::from_secs(10));
}

/// A subsystem pause that starts while the pair's Write waits for the lock completes once
/// the pair has run: the Compare runs under the Write's admission (its own admission would
/// queue behind the pause, which waits for the Write, which waits for the Compare).
#[test]
fn a_pause_during_a_pair_waits_for_it_without_deadlock() {
    let e = NvmfEnv::new(2, json!({}));
    let (gate, _c, mut a, mut b) = two_queues_on_a_gated_bdev(&e, "PauseGate");
    // B's write is held at the bdev: A's Write takes the lock only once it completes.
    let (w, cc, cw) = pair_behind_a_held_write(&gate, &mut a, &mut b);
    a.assert_none_complete_for(&[cc, cw], Duration::from_millis(100));
    let target = std::sync::Arc::clone(&e.t.target);
    let pause = e.t.rt.spawn(async move { target.pause(NQN, None).await });
    std::thread::sleep(Duration::from_millis(100));
    gate.open();
    let paused =
        e.t.rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(10), pause).await });
    assert!(
        matches!(paused, Ok(Ok(Ok(())))),
        "the pause completes: {paused:?}"
    );
    assert_eq!(status(&mut b, w), Status::SUCCESS);
    assert_eq!(status(&mut a, cc), Status::SUCCESS);
    assert_eq!(status(&mut a, cw), Status::SUCCESS);
    e.t.rt.block_on(e.t.target.resume(NQN)).expect("resume");
    assert_eq!(block(&mut a, 5), vec![0xBB; BS]);
}

/// A subsystem with one namespace on a gated bdev, and a controller with two I/O queues on
/// different reactors: `(gate, controller, queue 1, queue 2)`.
fn two_queues_on_a_gated_bdev(
    e: &NvmfEnv,
    bdev: &str,
) -> (
    std::sync::Arc<rtgt_tests::gate::Gate>,
    HostCtrl,
    HostQueue,
    HostQueue,
) {
    e.t.subsystem(NQN, true);
    let gate = e.t.gated(bdev, 64, BS as u32);
    e.t.add_ns(NQN, bdev);
    e.t.listen(NQN, "RDMA", 4420);
    let mut o = e.opts(NQN);
    o.io_queues = 2;
    let mut c = e.connect(o).expect("connect");
    let (idx, _) = e.transport();
    let per_pg: Vec<Vec<u16>> = e.t.rt.block_on(e.t.target.gather(move |pg| {
        pg.transport_mut::<RdmaPg>(idx)
            .map(|(p, _)| p.queue_pairs().into_iter().map(|(q, _)| q).collect())
            .unwrap_or_default()
    }));
    let pg_of = |qid: u16| per_pg.iter().position(|v| v.contains(&qid));
    assert_ne!(pg_of(1), pg_of(2), "queues per poll group: {per_pg:?}");
    let mut it = c.io.drain(..);
    let (a, b) = (it.next().expect("q1"), it.next().expect("q2"));
    drop(it);
    (gate, c, a, b)
}

/// Closes the gate, has `b` write 0xAA to block 5 (held at the bdev), then sends `a`'s pair
/// (compare 0xAA, write 0xBB) on block 5: `(b's write, compare, write)` CIDs.
fn pair_behind_a_held_write(
    gate: &rtgt_tests::gate::Gate,
    a: &mut HostQueue,
    b: &mut HostQueue,
) -> (u16, u16, u16) {
    gate.close();
    let w = b
        .submit_cmd(write_sqe(1, 5, 1), Some(&[0xAA; BS]), 0)
        .expect("write");
    wait_held(gate, 1);
    let (cc, cw) = send_pair(a, 5, 0xAA, 0xBB);
    (w, cc, cw)
}
