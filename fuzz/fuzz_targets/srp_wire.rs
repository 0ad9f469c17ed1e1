//! SRP IUs sent by an initiator over the simulated fabric to a live target: the SRP runtime's
//! whole receive path (IU decoding, credits, descriptors and RDMA transfers, the SCSI device
//! server, bdev I/O, task management, logout, responses, channel teardown).
//!
//! Input: records `[flags][length u16][IU]`; flags bit 0 points the IU's direct and indirect
//! data descriptors into the initiator's registered memory with its real key (else they go as
//! fuzzed), bit 1 does not wait for the response.
//! Properties, after every input: every SRP_CMD the initiator waited for was answered (or the
//! channel closed), no tag was answered more often than it was sent, an independent initiator
//! on another target port reads its data back intact, and every 64 inputs a fresh login on the
//! fuzzed port does verified I/O.
#![no_main]
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use rtgt_fuzz::Bytes;
use rtgt_fuzz::live::SrpRig;
use rtgt_tests::srp_initiator::SrpInitiator;

/// The rig, and per channel how often each tag was sent and answered (responses to commands
/// not waited for may arrive during a later input).
struct State {
    rig: SrpRig,
    sent: HashMap<u64, u32>,
    answered: HashMap<u64, u32>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn fix_desc(i: &SrpInitiator, d: &mut [u8]) -> u32 {
    let len = u32::from_be_bytes([d[12], d[13], d[14], d[15]]).min(1 << 20);
    let va = u64::from_be_bytes(d[..8].try_into().expect("8 bytes"));
    let room = i.mem_len() - len as usize;
    let real = i.desc((va % (room as u64 + 1)) as usize, len);
    d.copy_from_slice(&real.encode());
    len
}

/// Points the SRP_CMD's descriptors at the initiator's memory.
fn fix_cmd(i: &SrpInitiator, iu: &mut [u8]) {
    if iu.len() < 48 || iu[0] != 0x02 {
        return;
    }
    let mut pos = 48 + usize::from(iu[31] & 0xFC);
    for (fmt, count) in [(iu[5] >> 4, iu[6]), (iu[5] & 0x0F, iu[7])] {
        match fmt {
            1 => {
                let Some(d) = iu.get_mut(pos..pos + 16) else {
                    return;
                };
                fix_desc(i, d);
                pos += 16;
            }
            2 => {
                let list = pos + 20;
                let n = usize::from(count);
                let Some(_) = iu.get(pos..list + n * 16) else {
                    return;
                };
                let mut total = 0u32;
                for k in 0..n {
                    total =
                        total.wrapping_add(fix_desc(i, &mut iu[list + k * 16..list + k * 16 + 16]));
                }
                iu[pos + 12..pos + 16].copy_from_slice(&((n * 16) as u32).to_be_bytes());
                iu[pos + 16..pos + 20].copy_from_slice(&total.to_be_bytes());
                pos = list + n * 16;
            }
            _ => {}
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut guard = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let st = guard.get_or_insert_with(|| State {
        rig: SrpRig::new(),
        sent: HashMap::new(),
        answered: HashMap::new(),
    });
    let State {
        rig,
        sent,
        answered,
    } = st;
    let mut b = Bytes::new(data);
    let mut steps = 0;
    while !b.is_empty() && steps < 16 {
        steps += 1;
        let flags = b.u8();
        let len = usize::from(b.u16() % 8300);
        let mut iu = b.take(len).to_vec();
        if rig.fuzzed.is_none() {
            sent.clear();
            answered.clear();
        }
        let i = rig.fuzzed();
        if flags & 1 != 0 {
            fix_cmd(i, &mut iu);
        }
        let tagged = iu.len() >= 16 && matches!(iu[0], 0x01 | 0x02);
        let tag = u64::from_le_bytes(
            iu.get(8..16)
                .unwrap_or(&[0; 8])
                .try_into()
                .unwrap_or([0; 8]),
        );
        if i.send_raw(&iu).is_err() {
            rig.fuzzed = None;
            continue;
        }
        if tagged {
            *sent.entry(tag).or_default() += 1;
        }
        // SRP_CMDs the initiator waits for must be answered, unless the channel goes away.
        let wait = tagged && iu[0] == 0x02 && iu.len() >= 48 && flags & 2 == 0;
        let deadline = Instant::now() + Duration::from_secs(if wait { 10 } else { 0 });
        loop {
            let i = rig.fuzzed.as_mut().expect("logged in");
            while let Ok(Some(r)) = i.next_response(Duration::ZERO) {
                *answered.entry(r.tag).or_default() += 1;
            }
            if !wait || answered.get(&tag).copied().unwrap_or(0) >= sent[&tag] || i.disconnected {
                break;
            }
            if Instant::now() > deadline {
                panic!(
                    "no response to SRP_CMD tag {tag:#x} and the channel is still up: {:02x?}",
                    &iu[..iu.len().min(64)]
                );
            }
            if i.poll_once().is_err() {
                break;
            }
        }
        if rig.fuzzed.as_ref().is_some_and(|i| i.disconnected) {
            rig.fuzzed = None;
        }
    }
    // Let late responses arrive, then count.
    if let Some(i) = rig.fuzzed.as_mut() {
        let until = Instant::now() + Duration::from_millis(20);
        while Instant::now() < until {
            while let Ok(Some(r)) = i.next_response(Duration::ZERO) {
                *answered.entry(r.tag).or_default() += 1;
            }
            if i.poll_once().is_err() {
                break;
            }
        }
        if i.disconnected {
            rig.fuzzed = None;
        }
    }
    for (tag, n) in answered.iter() {
        let s = sent.get(tag).copied().unwrap_or(0);
        assert!(*n <= s, "tag {tag:#x} answered {n} times, sent {s} times");
    }
    rig.check();
});
