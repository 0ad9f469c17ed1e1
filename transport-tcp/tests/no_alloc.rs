//! The data path allocates nothing: a counting global allocator watches a connection carry
//! writes (R2T + H2CData, and in-capsule) and reads (C2HData), with digests, after warm-up.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use target_core::nvme::spec::io_opc;
use target_core::nvme::{Cqe, SglDescriptor, Sqe, Status};
use transport_tcp::conn::{Action, Config, Connection, DataBuffers, SlotId};
use transport_tcp::pdu::{
    CapsuleCmd, DataDigest, Digests, Framing, H2cData, IcReq, MAX_ENCODED_HEADER,
};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One preallocated buffer per slot.
struct Bufs(Vec<Vec<u8>>);

impl DataBuffers for Bufs {
    fn write(&mut self, slot: SlotId, offset: u32, data: &[u8]) {
        let at = offset as usize;
        self.0[slot.index()][at..at + data.len()].copy_from_slice(data);
    }
    fn read(&self, slot: SlotId, offset: u32, len: u32, f: &mut dyn FnMut(&[u8])) {
        f(&self.0[slot.index()][offset as usize..(offset + len) as usize]);
    }
}

fn pdu(f: &Framing, hdr: impl FnOnce(&mut [u8]) -> usize, data: &[u8]) -> Vec<u8> {
    let mut b = [0u8; MAX_ENCODED_HEADER];
    let n = hdr(&mut b);
    let mut v = b[..n].to_vec();
    v.extend_from_slice(data);
    if f.digests.data && !data.is_empty() {
        let mut d = DataDigest::new();
        d.update(data);
        v.extend_from_slice(&d.value().to_le_bytes());
    }
    v
}

#[test]
fn steady_state_io_allocates_nothing() {
    let digests = Digests {
        header: true,
        data: true,
    };
    let f = Framing { digests, pda: 0 };
    let cfg = Config {
        queue_depth: 4,
        ..Config::default()
    };
    let mut conn = Connection::new(cfg).unwrap();
    let mut bufs = Bufs((0..4).map(|_| vec![0u8; 8192]).collect());
    let mut hdr = [0u8; MAX_ENCODED_HEADER];
    let mut ic = [0u8; 128];
    IcReq::linux(digests).encode(&mut ic).unwrap();
    assert_eq!(conn.recv(&ic, &mut bufs), 128);
    assert!(conn.poll_send(&mut hdr, &bufs).is_some());
    conn.connected(1, true);

    // The host's PDUs, built up front: one command at a time always takes slot 0 (TTAG 0).
    let data = vec![0x5Au8; 8192];
    let mut w = Sqe::new(io_opc::WRITE, 7);
    w.set_sgl1(SglDescriptor::transport(8192));
    let write = pdu(&f, |b| CapsuleCmd { sqe: w }.encode(&f, 0, b).unwrap(), &[]);
    let h2c = pdu(
        &f,
        |b| {
            H2cData {
                cccid: 7,
                ttag: 0,
                datao: 0,
                datal: 8192,
                last: true,
            }
            .encode(&f, b)
            .unwrap()
        },
        &data,
    );
    let mut icw = Sqe::new(io_opc::WRITE, 8);
    icw.set_sgl1(SglDescriptor::unkeyed(0, 1, 0, 4096));
    let icd_write = pdu(
        &f,
        |b| CapsuleCmd { sqe: icw }.encode(&f, 4096, b).unwrap(),
        &data[..4096],
    );
    let mut r = Sqe::new(io_opc::READ, 9);
    r.set_sgl1(SglDescriptor::transport(8192));
    let read = pdu(&f, |b| CapsuleCmd { sqe: r }.encode(&f, 0, b).unwrap(), &[]);

    let mut sent = 0u64;
    let mut run = |conn: &mut Connection, bufs: &mut Bufs, bytes: &[u8]| {
        let mut at = 0;
        while at < bytes.len() {
            at += conn.recv(&bytes[at..], bufs);
            while let Some(a) = conn.poll_action() {
                match a {
                    Action::NeedBuffer { slot, .. } => conn.buffer_ready(slot).unwrap(),
                    Action::Execute { slot } => {
                        let sqe = *conn.sqe(slot).unwrap();
                        let c2h = if sqe.opcode() == io_opc::READ {
                            8192
                        } else {
                            0
                        };
                        let cqe = Cqe::for_command(&sqe, 1, 0xFFFF, Status::SUCCESS);
                        conn.complete(slot, cqe, c2h).unwrap();
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        while let Some(t) = conn.poll_send(&mut hdr, bufs) {
            sent += t.header_len as u64 + t.data.map_or(0, |d| u64::from(d.len));
        }
    };
    // Warm-up, then measure.
    for round in 0..2 {
        let before = ALLOCS.load(Ordering::Relaxed);
        for _ in 0..200 {
            run(&mut conn, &mut bufs, &write);
            run(&mut conn, &mut bufs, &h2c);
            run(&mut conn, &mut bufs, &icd_write);
            run(&mut conn, &mut bufs, &read);
        }
        let allocs = ALLOCS.load(Ordering::Relaxed) - before;
        if round == 1 {
            assert_eq!(allocs, 0, "allocations on the data path");
        }
    }
    assert_eq!(conn.outstanding(), 0);
    assert_eq!(conn.stats().capsules, 1200);
    assert_eq!(conn.stats().r2ts, 400);
    assert!(sent > 400 * 8192, "the reads' data went out");
}
