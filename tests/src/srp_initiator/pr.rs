//! SCSI reservation commands from a simulated SRP initiator (LUN 0): PERSISTENT RESERVE
//! IN/OUT, RESERVE(6)/RELEASE(6), and one-block reads and writes to see what a reservation
//! lets through.

use super::{BS, Data, Layout, Response, SrpInitiator, rw10};

/// GOOD.
pub const GOOD: u8 = 0x00;
/// CHECK CONDITION.
pub const CHECK_CONDITION: u8 = 0x02;
/// RESERVATION CONFLICT.
pub const CONFLICT: u8 = 0x18;

/// PERSISTENT RESERVE OUT service action REGISTER.
pub const REGISTER: u8 = 0x00;
/// … RESERVE.
pub const RESERVE: u8 = 0x01;
/// … RELEASE.
pub const RELEASE: u8 = 0x02;
/// … CLEAR.
pub const CLEAR: u8 = 0x03;
/// … PREEMPT.
pub const PREEMPT: u8 = 0x04;
/// … PREEMPT AND ABORT.
pub const PREEMPT_AND_ABORT: u8 = 0x05;
/// SCSI type Write Exclusive.
pub const WRITE_EXCLUSIVE: u8 = 0x01;
/// SCSI type Exclusive Access.
pub const EXCLUSIVE_ACCESS: u8 = 0x03;

/// PERSISTENT RESERVE OUT with a 24-byte basic parameter list, to LUN 0.
pub fn pr_out(i: &mut SrpInitiator, sa: u8, rtype: u8, key: u64, sa_key: u64) -> Response {
    pr_out_on(i, 0, sa, rtype, key, sa_key)
}

/// PERSISTENT RESERVE OUT with a 24-byte basic parameter list, to `lun`.
pub fn pr_out_on(
    i: &mut SrpInitiator,
    lun: u16,
    sa: u8,
    rtype: u8,
    key: u64,
    sa_key: u64,
) -> Response {
    let tag = pr_out_start(i, lun, sa, rtype, key, sa_key);
    i.wait(tag).unwrap()
}

/// Sends PERSISTENT RESERVE OUT to `lun` without waiting; returns its tag.
pub fn pr_out_start(
    i: &mut SrpInitiator,
    lun: u16,
    sa: u8,
    rtype: u8,
    key: u64,
    sa_key: u64,
) -> u64 {
    let mut p = [0u8; 24];
    p[..8].copy_from_slice(&key.to_be_bytes());
    p[8..16].copy_from_slice(&sa_key.to_be_bytes());
    // Parameter lists from the end of the initiator's memory, away from test data.
    let off = i.mem_len() - 4096;
    i.mem()[off..off + 24].copy_from_slice(&p);
    let c = [0x5F, sa, rtype, 0, 0, 0, 0, 0, 24, 0];
    i.command(lun, &c, &Data::Out(vec![(off, 24)]), Layout::Direct, false)
        .unwrap()
}

/// PERSISTENT RESERVE IN; the response and the first 256 bytes of data.
pub fn pr_in(i: &mut SrpInitiator, sa: u8) -> (Response, Vec<u8>) {
    let c = [0x5E, sa, 0, 0, 0, 0, 0, 0x01, 0x00, 0];
    let r = i
        .run(0, &c, &Data::In(vec![(0, 256)]), Layout::Direct)
        .unwrap();
    (r, i.mem()[..256].to_vec())
}

/// READ KEYS: the generation and the keys.
pub fn read_keys(i: &mut SrpInitiator) -> (u32, Vec<u64>) {
    let (r, d) = pr_in(i, 0x00);
    assert_eq!(r.status, GOOD, "READ KEYS");
    let generation = u32::from_be_bytes(d[..4].try_into().unwrap());
    let len = u32::from_be_bytes(d[4..8].try_into().unwrap()) as usize;
    let keys = (0..len / 8)
        .map(|k| u64::from_be_bytes(d[8 + k * 8..16 + k * 8].try_into().unwrap()))
        .collect();
    (generation, keys)
}

/// READ RESERVATION: the holder's key and the SCSI type, if something is reserved.
pub fn read_reservation(i: &mut SrpInitiator) -> Option<(u64, u8)> {
    let (r, d) = pr_in(i, 0x01);
    assert_eq!(r.status, GOOD, "READ RESERVATION");
    let len = u32::from_be_bytes(d[4..8].try_into().unwrap());
    (len == 16).then(|| {
        (
            u64::from_be_bytes(d[8..16].try_into().unwrap()),
            d[21] & 0x0F,
        )
    })
}

/// WRITE(10) of block 0.
pub fn write(i: &mut SrpInitiator) -> Response {
    i.run(
        0,
        &rw10(0x2a, 0, 1),
        &Data::Out(vec![(0, BS)]),
        Layout::Direct,
    )
    .unwrap()
}

/// READ(10) of block 0.
pub fn read(i: &mut SrpInitiator) -> Response {
    i.run(
        0,
        &rw10(0x28, 0, 1),
        &Data::In(vec![(0, BS)]),
        Layout::Direct,
    )
    .unwrap()
}

/// A 6-byte CDB without data (RESERVE(6) 16h, RELEASE(6) 17h).
pub fn six(i: &mut SrpInitiator, opcode: u8) -> Response {
    i.run(0, &[opcode, 0, 0, 0, 0, 0], &Data::None, Layout::Direct)
        .unwrap()
}
