//! NVMe reservations as a host drives them: Register, Acquire, Release, Report and the
//! Reservation Notification log page (docs/reservations.md), on namespace 1.

use target_core::nvme::resv::opc;
use target_core::nvme::{Sqe, Status};

use super::{NvmeQueue, get_log};

/// Reservation type Write Exclusive.
pub const WE: u32 = 1;
/// Reservation type Exclusive Access.
pub const EA: u32 = 2;

/// Two 8-byte keys as a reservation command's data.
pub fn keys(a: u64, b: u64) -> [u8; 16] {
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&a.to_le_bytes());
    d[8..].copy_from_slice(&b.to_le_bytes());
    d
}

/// The Sqe of reservation command `opcode` on namespace 1.
pub fn resv_sqe(opcode: u8, cdw10: u32) -> Sqe {
    let mut s = Sqe::new(opcode, 0);
    s.set_nsid(1).set_cdw(10, cdw10);
    s
}

fn resv_cmd(q: &mut impl NvmeQueue, opcode: u8, cdw10: u32, data: &[u8]) -> Status {
    q.exec(resv_sqe(opcode, cdw10), Some(data), 0)
        .expect("reservation command")
        .cqe
        .status
}

/// Reservation Register: RREGA 0 register, 1 unregister, 2 replace (bits 31:30: CPTPL).
pub fn register(q: &mut impl NvmeQueue, rrega: u32, crkey: u64, nrkey: u64) -> Status {
    resv_cmd(q, opc::REGISTER, rrega, &keys(crkey, nrkey))
}

/// Reservation Acquire: RACQA 0 acquire, 1 preempt, 2 preempt and abort.
pub fn acquire(q: &mut impl NvmeQueue, racqa: u32, rtype: u32, crkey: u64, prkey: u64) -> Status {
    resv_cmd(q, opc::ACQUIRE, racqa | rtype << 8, &keys(crkey, prkey))
}

/// Reservation Release: RRELA 0 release, 1 clear.
pub fn release(q: &mut impl NvmeQueue, rrela: u32, rtype: u32, crkey: u64) -> Status {
    resv_cmd(q, opc::RELEASE, rrela | rtype << 8, &keys(crkey, 0)[..8])
}

/// A decoded Reservation Status Extended structure: generation, type, and (key, holder,
/// host id) per registrant.
pub type Report = (u32, u8, Vec<(u64, bool, [u8; 16])>);

/// Reservation Report (extended).
pub fn report(q: &mut impl NvmeQueue) -> Report {
    let mut s = resv_sqe(opc::REPORT, 4096 / 4 - 1);
    s.set_cdw(11, 1);
    let d = q
        .exec(s, None, 4096)
        .and_then(|c| c.ok())
        .expect("report")
        .data;
    let generation = u32::from_le_bytes(d[..4].try_into().expect("4 bytes"));
    let regctl = u16::from_le_bytes([d[5], d[6]]) as usize;
    let regs = (0..regctl)
        .map(|i| {
            let e = &d[64 + i * 64..128 + i * 64];
            let mut id = [0u8; 16];
            id.copy_from_slice(&e[16..32]);
            (
                u64::from_le_bytes(e[8..16].try_into().expect("8 bytes")),
                e[2] & 1 != 0,
                id,
            )
        })
        .collect();
    (generation, d[4], regs)
}

/// The next Reservation Notification log page (RAE 0) through `admin`: (log page count,
/// type, NSID).
pub fn notification(admin: &mut impl NvmeQueue) -> (u64, u8, u32) {
    let d = get_log(admin, 0x80, 0xFFFF_FFFF, 0, 64, false).expect("notification log");
    (
        u64::from_le_bytes(d[..8].try_into().expect("8 bytes")),
        d[8],
        u32::from_le_bytes(d[12..16].try_into().expect("4 bytes")),
    )
}

/// What host A, preempted by host B on namespace 1, sees: its parked AER completed with
/// `aen_dw0` (notice type 6h, log page 80h), and the notification log names Registration
/// Preempted on namespace 1; B, the requester, has nothing in its log.
pub fn assert_registration_preempted(
    aen_dw0: u32,
    a_admin: &mut impl NvmeQueue,
    b_admin: &mut impl NvmeQueue,
) {
    assert_eq!(
        aen_dw0,
        target_core::nvme::resv_log::AEN_DW0,
        "AEN type 6h, log page 80h"
    );
    let (count, kind, nsid) = notification(a_admin);
    assert_eq!(
        (kind, nsid),
        (1, 1),
        "Registration Preempted on namespace 1"
    );
    assert_ne!(count, 0);
    assert_eq!(notification(b_admin).1, 0, "the requester is not notified");
}

/// Submits a one-block write of `lba` on `q` and waits until `gate` holds `held` I/Os (the
/// write among them). Returns its CID.
pub fn write_held(q: &mut impl NvmeQueue, gate: &crate::gate::Gate, lba: u64, held: usize) -> u16 {
    use std::time::{Duration, Instant};
    let cid = q
        .submit_cmd(
            crate::nvme_host::write_sqe(1, lba, 1),
            Some(&[0x11; 512]),
            0,
        )
        .expect("submit the write");
    let deadline = Instant::now() + Duration::from_secs(5);
    while gate.held() < held {
        assert!(
            Instant::now() < deadline,
            "the write never reached the bdev"
        );
        q.poll_once().expect("poll");
        std::thread::sleep(Duration::from_millis(1));
    }
    cid
}

/// Submits `b`'s Preempt and Abort (key `b_key`, preempting `a_key`, taking Write Exclusive)
/// and returns its CID.
pub fn submit_preempt_and_abort(b: &mut impl NvmeQueue, b_key: u64, a_key: u64) -> u16 {
    b.submit_cmd(
        resv_sqe(opc::ACQUIRE, 2 | WE << 8),
        Some(&keys(b_key, a_key)),
        0,
    )
    .expect("submit Preempt and Abort")
}

/// Preempt and Abort aborts the preempted host's commands: `a` (holding a reservation with
/// key `a_key`) has a write held in the bdev behind `gate`; `b`'s Preempt and Abort (key
/// `b_key`, taking Write Exclusive) cannot recall it, so it does not complete while the write
/// is held; once the gate opens it completes, the held write ends with Command Aborted due
/// to Preempt and Abort (never success), and `a`'s next write conflicts while `b`'s passes.
pub fn preempt_and_abort_aborts(
    a: &mut impl NvmeQueue,
    b: &mut impl NvmeQueue,
    gate: &crate::gate::Gate,
    a_key: u64,
    b_key: u64,
) {
    use std::time::Duration;
    gate.close();
    let held = write_held(a, gate, 0, 1);
    let preempt = submit_preempt_and_abort(b, b_key, a_key);
    b.assert_none_complete_for(&[preempt], Duration::from_millis(300));
    gate.open();
    let done = b.wait_cmd(preempt).expect("completion");
    assert_eq!(done.cqe.status, Status::SUCCESS, "preempt and abort");
    let done = a.wait_cmd(held).expect("completion");
    assert_eq!(
        done.cqe.status,
        Status::ABORTED_PREEMPT_ABORT,
        "the write at the bdev when the preempt came"
    );
    assert_eq!(
        super::write_status(a, 1),
        target_core::nvme::resv::RESERVATION_CONFLICT,
        "A's next write"
    );
    assert_eq!(super::write_status(b, 1), Status::SUCCESS, "B's write");
}
