//! COMPARE AND WRITE over SRP between two initiators on two reactors (docs/reservations.md,
//! Compare-and-write): the lock reaches the other reactor's poll group, which drains its
//! writes in flight before the compare and holds back writes to the range until the
//! COMPARE AND WRITE has written. A gated bdev keeps I/O in flight at the bdev, so what
//! reached the bdev when is visible (`Gate::held`).

use std::time::Duration;

use rtgt_tests::srp_initiator::{BS, Data, Layout, SrpFixture, SrpInitiator, rw10};
use serde_json::json;

const A: u64 = 0x5254_0012_3456_00A1;
const B: u64 = 0x5254_0012_3456_00B2;

/// Sends COMPARE AND WRITE of one block at `lba`: `verify` then `write`, from memory 0.
fn caw(i: &mut SrpInitiator, lun: u16, lba: u64, verify: u8, write: u8) -> u64 {
    let mut c = [0u8; 16];
    c[0] = 0x89;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[13] = 1;
    let n = BS as usize;
    i.mem()[..n].fill(verify);
    i.mem()[n..2 * n].fill(write);
    i.command(
        lun,
        &c,
        &Data::Out(vec![(0, 2 * BS)]),
        Layout::Direct,
        false,
    )
    .expect("COMPARE AND WRITE")
}

/// Sends WRITE(10) of one block of `v` at `lba`, from a memory offset of its own (commands
/// in flight together must not share their data-out memory).
fn write(i: &mut SrpInitiator, lun: u16, lba: u32, v: u8) -> u64 {
    let off = (64 << 10) + lba as usize * BS as usize;
    i.mem()[off..off + BS as usize].fill(v);
    i.command(
        lun,
        &rw10(0x2a, lba, 1),
        &Data::Out(vec![(off, BS)]),
        Layout::Direct,
        false,
    )
    .expect("WRITE")
}

fn read(i: &mut SrpInitiator, lun: u16, lba: u32) -> Vec<u8> {
    let (r, d) = i
        .read(lun, lba, BS, 1, 128 << 10, Layout::Direct)
        .expect("READ");
    assert_eq!(r.status, 0);
    d
}

#[test]
fn compare_and_write_is_atomic_against_writes_from_another_reactor() {
    let fx = SrpFixture::new(2, json!({}), 1, 2048);
    let (nsid, gate) = fx.gated("CawGate", 2048);
    let lun = (nsid - 1) as u16;
    let mut a = fx.login(A);
    let mut b = fx.login(B);
    let pgs: Vec<u64> = [0, 1]
        .iter()
        .map(|&pg| fx.srp_stats(pg)["channels"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(
        pgs,
        [1, 1],
        "one channel per reactor: {:?}",
        fx.srp_stats(0)
    );

    // 1. B's write of 0xAA is in flight (held at the bdev) when A's COMPARE AND WRITE
    //    arrives: the compare waits for it and sees 0xAA.
    gate.close();
    let w = write(&mut b, lun, 5, 0xAA);
    fx.wait_until("B's write held", |_| gate.held() == 1);
    let c = caw(&mut a, lun, 5, 0xAA, 0xBB);
    std::thread::sleep(Duration::from_millis(200));
    let held = gate.held();
    gate.open();
    assert_eq!(
        held, 1,
        "the COMPARE AND WRITE does not read before B's write has completed"
    );
    assert_eq!(b.wait(w).expect("write").status, 0);
    let r = a.wait(c).expect("caw");
    assert_eq!(r.status, 0, "{:?}", r.sense_key());
    assert_eq!(read(&mut a, lun, 5), vec![0xBB; BS as usize]);

    // 2. A's COMPARE AND WRITE holds block 6 (its read is held at the bdev): B's write to
    //    block 6 waits in the target, B's write to block 7 goes on.
    gate.close();
    let c = caw(&mut a, lun, 6, 0, 0xCC);
    fx.wait_until("the compare's read held", |_| gate.held() == 1);
    let on = write(&mut b, lun, 6, 0xDD);
    let next = write(&mut b, lun, 7, 0xEE);
    fx.wait_until("B's write to block 7 held", |_| gate.held() >= 2);
    std::thread::sleep(Duration::from_millis(200));
    let held = gate.held();
    gate.open();
    assert_eq!(held, 2, "B's write to block 6 waits for the lock");
    let r = a.wait(c).expect("caw");
    assert_eq!(r.status, 0, "{:?}", r.sense_key());
    assert_eq!(b.wait(on).expect("write").status, 0);
    assert_eq!(b.wait(next).expect("write").status, 0);
    assert_eq!(
        read(&mut a, lun, 6),
        vec![0xDD; BS as usize],
        "B's write, which waited, is the last"
    );
    assert_eq!(read(&mut a, lun, 7), vec![0xEE; BS as usize]);

    // 3. A miscompare from B: MISCOMPARE with the offset, nothing written, the lock
    //    released (A's write goes on).
    let n = BS as usize;
    b.mem()[..n].fill(0xDD);
    b.mem()[37] = 0;
    b.mem()[n..2 * n].fill(0x11);
    let mut cdb = [0u8; 16];
    cdb[0] = 0x89;
    cdb[9] = 6;
    cdb[13] = 1;
    let r = b
        .run(lun, &cdb, &Data::Out(vec![(0, 2 * BS)]), Layout::Direct)
        .expect("caw");
    assert_eq!(r.sense_key(), Some((0x0E, 0x1D, 0x00)), "MISCOMPARE");
    assert_eq!(r.sense[0], 0xF0, "VALID: INFORMATION holds the offset");
    assert_eq!(&r.sense[3..7], &37u32.to_be_bytes());
    assert_eq!(read(&mut b, lun, 6), vec![0xDD; BS as usize]);
    let w = write(&mut a, lun, 6, 0x66);
    assert_eq!(a.wait(w).expect("write").status, 0);
    assert_eq!(read(&mut b, lun, 6), vec![0x66; BS as usize]);
}
