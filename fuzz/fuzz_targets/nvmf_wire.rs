//! NVMe/RDMA command capsules sent by a host over the simulated fabric to a live target: the
//! whole request path (receive, SGL decoding, RDMA READ/WRITE planning, the exec layer's
//! Connect/admin/I/O handling, bdev I/O, responses, teardown when a capsule kills the queue).
//!
//! Input: records `[flags][in-capsule length u16][64-byte SQE][in-capsule bytes]`; flags bit 0
//! sends on the I/O queue (else the admin queue), bit 1 points a keyed SGL1 into the host's
//! registered memory with its real key (else the SGL is sent as fuzzed), bit 2 does not wait
//! for the completion, bit 3 sends the bytes as a raw capsule (no command slot: the SQE's own
//! CID, any length).
//! Properties, after every input: the target answered every command it was sent (or closed
//! the connection), never sent a completion for a command that was not outstanding, an
//! independent host on another subsystem still reads its data back intact, and every 64
//! inputs a fresh host on the fuzzed subsystem does verified I/O.
#![no_main]
use std::sync::Mutex;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use rtgt_fuzz::Bytes;
use rtgt_fuzz::live::{NvmfRig, RAW_CID, connection_lost};
use rtgt_tests::nvme_host::{Data, HostError};
use target_core::nvme::{SglDescriptor, Sqe};

static RIG: Mutex<Option<NvmfRig>> = Mutex::new(None);

fn queue(
    c: &mut rtgt_tests::nvme_host::HostCtrl,
    io: bool,
) -> &mut rtgt_tests::nvme_host::HostQueue {
    if io && !c.io.is_empty() {
        &mut c.io[0]
    } else {
        &mut c.admin
    }
}

fuzz_target!(|data: &[u8]| {
    let mut guard = RIG.lock().unwrap_or_else(|p| p.into_inner());
    let rig = guard.get_or_insert_with(NvmfRig::new);
    let mut b = Bytes::new(data);
    let mut pending: Vec<(bool, u16)> = Vec::new();
    let mut steps = 0;
    while !b.is_empty() && steps < 16 {
        steps += 1;
        let flags = b.u8();
        let dlen = usize::from(b.u16() % 8192);
        let mut sqe = Sqe(b.array::<64>());
        let capsule = b.take(dlen);
        let io = flags & 1 != 0;
        let q = queue(rig.fuzzed(), io);
        if flags & 8 != 0 {
            // A raw capsule: its CID is not tracked, so its completion shows as a stray one
            // (`NvmfRig::check` accounts for it).
            let cid = sqe.cid() | RAW_CID;
            sqe.set_cid(cid);
            let mut raw = sqe.0.to_vec();
            raw.extend_from_slice(capsule);
            let sent = q.send_raw_capsule(&raw).is_ok();
            let _ = q.poll();
            if !sent || q.is_disconnected() {
                rig.fuzzed = None;
                pending.clear();
            } else {
                rig.raw_sent.push(cid);
            }
            continue;
        }
        let mut sgl = sqe.sgl1();
        if flags & 2 != 0 && sgl.sgl_type() == 4 {
            let (base, rkey) = q.raw_data_region();
            let len = sgl.keyed_length().min(128 * 1024);
            let off = sgl.address() % u64::from(128 * 1024 - len + 1);
            sgl = SglDescriptor::keyed(base + off, len, rkey, false);
        }
        sqe.set_sgl1(sgl);
        let aer = q.qid() == 0 && sqe.opcode() == 0x0C;
        let cid = match q.submit(sqe, Data::Raw { sgl, capsule }) {
            Ok(cid) => cid,
            Err(HostError::Full) => continue,
            Err(_) => {
                rig.fuzzed = None;
                pending.clear();
                continue;
            }
        };
        if aer {
            continue;
        }
        if flags & 4 != 0 {
            pending.push((q.qid() != 0, cid));
            continue;
        }
        match q.wait_for(cid, Duration::from_secs(10)) {
            Ok(_) => {}
            Err(HostError::Timeout(what)) => {
                panic!(
                    "the target never answered CID {cid:#x} ({what}): {:02x?}",
                    &sqe.0
                )
            }
            Err(e) if connection_lost(&e) => {
                rig.fuzzed = None;
                pending.clear();
            }
            Err(_) => {}
        }
    }
    // Everything sent without waiting completes too (or the connection went away).
    for (io, cid) in pending {
        let Some(c) = rig.fuzzed.as_mut() else { break };
        match queue(c, io).wait_for(cid, Duration::from_secs(10)) {
            Ok(_) => {}
            Err(HostError::Timeout(what)) => {
                panic!("the target never answered CID {cid:#x} ({what})")
            }
            Err(e) if connection_lost(&e) => rig.fuzzed = None,
            Err(_) => {}
        }
    }
    // Parked AERs hold admin slots: start afresh before they fill the queue.
    if rig
        .fuzzed
        .as_ref()
        .is_some_and(|c| c.admin.outstanding() > 8)
    {
        rig.fuzzed = None;
    }
    rig.check();
});
