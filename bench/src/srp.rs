//! SRP: the target with the SRP transport and the Rust SRP initiator.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use rtgt_tests::srp_initiator::{Data, Layout, LoginParams, SrpInitiator};
use rtgt_tests::{HOST_IP, TARGET_IP};
use transport_srp::proto::PortId;

use crate::nvme::target;
use crate::{Args, HostResult, Pattern, WindowResult, cpu, phase};

const NQN: &str = "nqn.2016-06.io.rtgt:bench";
const PORT: u16 = 5555;
const TAGS: usize = 4096;

/// Runs the benchmark.
pub fn run(a: &Args) -> Result<(HostResult, WindowResult), String> {
    // The initiator keeps a credit in reserve: the channel needs one more than --qd.
    let depth = (a.qd as u64 + 1).clamp(128, 4096);
    let (t, dev_blocks) = target(a, "SRP", serde_json::json!({ "max_queue_depth": depth }))?;
    t.listen(NQN, "SRP", PORT);
    let addr = SocketAddr::new(TARGET_IP.parse().expect("ip"), PORT);
    let port = transport_srp::port_id::derived_target_port_id(NQN);
    let mut chans = Vec::new();
    for i in 0..a.qpairs {
        let mut p = LoginParams::linux(PortId::from_halves(0, 1), port);
        p.src = Some(SocketAddr::new(HOST_IP.parse().expect("ip"), 0));
        p.multi_channel = i > 0;
        p.data_size = (a.qd * a.bs).max(4096);
        p.send_slots = a.qd + 16;
        let c = SrpInitiator::login(&t.fabric, addr, &p).map_err(|e| format!("login: {e:?}"))?;
        if (c.req_lim as usize) < a.qd + 1 {
            return Err(format!(
                "the target granted {} credits; --qd {} needs {}",
                c.req_lim,
                a.qd,
                a.qd + 1
            ));
        }
        chans.push(c);
    }
    let threads = a.initiator_threads.clamp(1, chans.len());
    let per = chans.len().div_ceil(threads);
    let phase = AtomicU8::new(phase::WARMUP);
    let reactors = t.target.reactors().clone();
    let (results, window) = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (ti, chunk) in chans.chunks_mut(per).enumerate() {
            let phase = &phase;
            handles.push(
                std::thread::Builder::new()
                    .name(format!("initiator_{ti}"))
                    .spawn_scoped(s, move || drive(a, chunk, dev_blocks, phase, ti))
                    .expect("spawn"),
            );
        }
        let w = crate::drive_phases(a, &phase, "reactor_", Some(reactors));
        let r: Vec<Result<HostResult, String>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("initiator panicked".into()))
            })
            .collect();
        (r, w)
    });
    let mut total = HostResult::default();
    for r in results {
        total.merge(&r?);
    }
    for c in &mut chans {
        let _ = c.logout();
    }
    drop(chans);
    drop(t);
    Ok((total, window))
}

struct CState {
    pat: Pattern,
    start: Vec<Instant>,
    read: Vec<bool>,
    /// Free data slots (offsets into the initiator's memory, `bs` apart).
    free: Vec<usize>,
    slot_of: Vec<usize>,
}

fn cdb16(read: bool, lba: u64, blocks: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = if read { 0x88 } else { 0x8a };
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

fn submit(c: &mut SrpInitiator, st: &mut CState, bs: usize, now: Instant) -> Result<(), String> {
    let (read, lba) = st.pat.next_io();
    let slot = st.free.pop().ok_or("no free data slot")?;
    let seg = vec![(slot * bs, bs as u32)];
    let (data, layout) = if read {
        (Data::In(seg), Layout::Direct)
    } else if c.immediate() && bs <= 8192 {
        (Data::Out(seg), Layout::Immediate)
    } else {
        (Data::Out(seg), Layout::Direct)
    };
    let tag = c
        .command(
            0,
            &cdb16(read, lba, st.pat.blocks as u32),
            &data,
            layout,
            false,
        )
        .map_err(|e| format!("command: {e}"))?;
    let i = tag as usize % TAGS;
    st.start[i] = now;
    st.read[i] = read;
    st.slot_of[i] = slot;
    Ok(())
}

fn drive(
    a: &Args,
    chans: &mut [SrpInitiator],
    dev_blocks: u64,
    phase: &AtomicU8,
    ti: usize,
) -> Result<HostResult, String> {
    let mut states: Vec<CState> = (0..chans.len())
        .map(|i| CState {
            pat: Pattern::new(a, dev_blocks, (ti * 1000 + i + 1) as u64),
            start: vec![Instant::now(); TAGS],
            read: vec![false; TAGS],
            free: (0..a.qd).collect(),
            slot_of: vec![0; TAGS],
        })
        .collect();
    let now = Instant::now();
    for (c, st) in chans.iter_mut().zip(states.iter_mut()) {
        for _ in 0..a.qd {
            submit(c, st, a.bs, now)?;
        }
    }
    let mut res = HostResult::default();
    let mut measuring = false;
    let mut cpu0 = 0;
    let mut stop_at: Option<Instant> = None;
    loop {
        let ph = phase.load(Ordering::Acquire);
        let now = Instant::now();
        if ph == phase::MEASURE && !measuring {
            measuring = true;
            cpu0 = cpu::this_thread_ns();
        }
        if ph == phase::STOP && stop_at.is_none() {
            stop_at = Some(now);
            if measuring {
                res.cpu_ns = cpu::this_thread_ns() - cpu0;
            }
            measuring = false;
        }
        let mut outstanding = 0;
        for (c, st) in chans.iter_mut().zip(states.iter_mut()) {
            c.poll_nowait().map_err(|e| format!("poll: {e}"))?;
            while let Some(r) = c.take_response() {
                let i = r.tag as usize % TAGS;
                if r.status != 0 {
                    res.errors += 1;
                }
                st.free.push(st.slot_of[i]);
                if measuring {
                    res.ops += 1;
                    res.reads += u64::from(st.read[i]);
                    res.hist
                        .record(now.saturating_duration_since(st.start[i]).as_nanos() as u64);
                }
                if stop_at.is_none() {
                    submit(c, st, a.bs, now)?;
                }
            }
            if c.disconnected {
                return Err("the target disconnected a channel".into());
            }
            outstanding += c.outstanding();
        }
        if let Some(t) = stop_at {
            if outstanding == 0 {
                return Ok(res);
            }
            if now.duration_since(t) > Duration::from_secs(10) {
                return Err(format!("{outstanding} commands never completed"));
            }
        }
    }
}
