//! NVMe fused Compare + Write (docs/reservations.md, Compare-and-write): the pair's statuses
//! over NVMe/RDMA and NVMe/TCP, and its atomicity against a write from another queue on
//! another reactor (the volume's range lock, the one SCSI COMPARE AND WRITE takes), shown
//! with a gated bdev that keeps I/O in flight at the bdev (`Gate::held`).

use std::time::Duration;

use rtgt_tests::nvme_cmds::NvmeQueue;
use rtgt_tests::nvme_host::{NvmfEnv, read_sqe, rw_sqe, write_sqe};
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
    // FUSE 11b is reserved; a first half that is not a Compare is Invalid Opcode.
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
    assert_eq!(s, Status::INVALID_OPCODE);
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
    statuses(&mut c.io[0]);
}

#[test]
fn fused_compare_and_write_is_atomic_against_a_write_from_another_reactor() {
    let e = NvmfEnv::new(2, json!({}));
    e.t.subsystem(NQN, true);
    let gate = e.t.gated("FusedGate", 64, BS as u32);
    e.t.add_ns(NQN, "FusedGate");
    e.t.listen(NQN, "RDMA", 4420);
    let mut o = e.opts(NQN);
    o.io_queues = 2;
    let mut c = e.connect(o).expect("connect");
    // Queues 1 and 2 live on different reactors.
    let (idx, _) = e.transport();
    let per_pg: Vec<Vec<u16>> = e.t.rt.block_on(e.t.target.gather(move |pg| {
        pg.transport_mut::<RdmaPg>(idx)
            .map(|(p, _)| p.queue_pairs().into_iter().map(|(q, _)| q).collect())
            .unwrap_or_default()
    }));
    let pg_of = |qid: u16| per_pg.iter().position(|v| v.contains(&qid));
    assert_ne!(pg_of(1), pg_of(2), "queues per poll group: {per_pg:?}");
    let (mut a, mut b) = {
        let mut it = c.io.drain(..);
        (it.next().expect("q1"), it.next().expect("q2"))
    };

    // 1. B's write of 0xAA is in flight (held at the bdev) when A's pair arrives: the
    //    compare waits for it (the lock drains B's reactor) and then sees 0xAA.
    gate.close();
    let w = b
        .submit_cmd(write_sqe(1, 5, 1), Some(&[0xAA; BS]), 0)
        .expect("write");
    wait_held(&gate, 1);
    let (cc, cw) = send_pair(&mut a, 5, 0xAA, 0xBB);
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

fn wait_held(gate: &rtgt_tests::gate::Gate, n: usize) {
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while gate.held() < n {
        assert!(
            std::time::Instant::now() < until,
            "{n} I/O held at the bdev (held {})",
            gate.held()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
