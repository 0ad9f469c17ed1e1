//! SRP: the target with the SRP transport and the Rust SRP initiator.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use rtgt_tests::srp_initiator::{Data, Layout, LoginParams, SrpInitiator};
use rtgt_tests::{HOST_IP, TARGET_IP};
use target_core::reactor::PollStatus;
use transport_srp::proto::PortId;

use crate::nvme::target;
use crate::{Args, HostResult, Pattern, WindowResult, cpu, phase};

const NQN: &str = "nqn.2016-06.io.rtgt:bench";
const PORT: u16 = 5555;
const TAGS: usize = 4096;

/// What a run hands back: each initiator's result, the measured window, and the channels.
type RunEnd = (
    Vec<Result<HostResult, String>>,
    WindowResult,
    Vec<SrpInitiator>,
);

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
    let phase = Arc::new(AtomicU8::new(phase::WARMUP));
    let reactors = t.target.reactors().clone();
    let (results, window, back) = if a.inline_initiator {
        inline(a, chans, dev_blocks, &phase, reactors)?
    } else {
        threaded(a, chans, dev_blocks, &phase, reactors)
    };
    let mut chans = back;
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

/// Initiator threads, each driving its share of the channels.
fn threaded(
    a: &Args,
    mut chans: Vec<SrpInitiator>,
    dev_blocks: u64,
    phase: &AtomicU8,
    reactors: target_core::reactor::Reactors,
) -> RunEnd {
    let threads = a.initiator_threads.clamp(1, chans.len());
    let per = chans.len().div_ceil(threads);
    let mut shares = Vec::new();
    while !chans.is_empty() {
        let rest = chans.split_off(per.min(chans.len()));
        shares.push(std::mem::replace(&mut chans, rest));
    }
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (ti, share) in shares.into_iter().enumerate() {
            handles.push(
                std::thread::Builder::new()
                    .name(format!("initiator_{ti}"))
                    .spawn_scoped(s, move || {
                        let mut d = match Driver::new(a, share, dev_blocks, ti) {
                            Ok(d) => d,
                            Err((e, back)) => return (Err(e), back),
                        };
                        loop {
                            if let Some(r) = d.step(phase.load(Ordering::Acquire)) {
                                return (r, d.chans);
                            }
                        }
                    })
                    .expect("spawn"),
            );
        }
        let w = crate::drive_phases(a, phase, "reactor_", Some(reactors));
        let mut results = Vec::new();
        let mut back = Vec::new();
        for h in handles {
            match h.join() {
                Ok((r, c)) => {
                    results.push(r);
                    back.extend(c);
                }
                Err(_) => results.push(Err("initiator panicked".into())),
            }
        }
        (results, w, back)
    })
}

/// The initiator as a poller on reactor 0, sharing its thread with the target: every loop
/// iteration does work, so instruction counts per I/O (callgrind) are repeatable.
fn inline(
    a: &Args,
    chans: Vec<SrpInitiator>,
    dev_blocks: u64,
    phase: &Arc<AtomicU8>,
    reactors: target_core::reactor::Reactors,
) -> Result<RunEnd, String> {
    let mut d = Some(Driver::new(a, chans, dev_blocks, 0).map_err(|(e, _)| e)?);
    let (tx, rx) = std::sync::mpsc::channel();
    let ph = Arc::clone(phase);
    reactors
        .send_ctrl(0, move |ctx| {
            let me = std::rc::Rc::new(std::cell::Cell::new(None));
            let me2 = std::rc::Rc::clone(&me);
            let id = ctx.poller("bench_initiator").register(move |ctx| {
                let Some(drv) = d.as_mut() else {
                    return PollStatus::Idle;
                };
                if let Some(r) = drv.step(ph.load(Ordering::Acquire)) {
                    let drv = d.take().expect("present");
                    let _ = tx.send((r, drv.chans));
                    if let Some(id) = me2.get() {
                        ctx.unregister_poller(id);
                    }
                }
                PollStatus::Busy
            });
            me.set(Some(id));
        })
        .map_err(|e| e.to_string())?;
    let w = crate::drive_phases(a, phase, "reactor_", Some(reactors));
    let (r, c) = rx
        .recv_timeout(Duration::from_secs(30))
        .map_err(|_| "the inline initiator did not finish".to_string())?;
    Ok((vec![r], w, c))
}

/// One initiator's channels and their workload; [`Driver::step`] runs one polling round.
struct Driver {
    chans: Vec<SrpInitiator>,
    states: Vec<CState>,
    bs: usize,
    res: HostResult,
    measuring: bool,
    cpu0: u64,
    stop_at: Option<Instant>,
}

impl Driver {
    /// Fills every channel to `--qd`; on failure the channels come back with the error.
    fn new(
        a: &Args,
        mut chans: Vec<SrpInitiator>,
        dev_blocks: u64,
        ti: usize,
    ) -> Result<Self, (String, Vec<SrpInitiator>)> {
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
                if let Err(e) = submit(c, st, a.bs, now) {
                    return Err((e, chans));
                }
            }
        }
        Ok(Self {
            chans,
            states,
            bs: a.bs,
            res: HostResult::default(),
            measuring: false,
            cpu0: 0,
            stop_at: None,
        })
    }

    /// One round over every channel. `Some` when finished (stopped and drained, or failed).
    fn step(&mut self, ph: u8) -> Option<Result<HostResult, String>> {
        match self.round(ph) {
            Ok(true) => Some(Ok(std::mem::take(&mut self.res))),
            Ok(false) => None,
            Err(e) => Some(Err(e)),
        }
    }

    fn round(&mut self, ph: u8) -> Result<bool, String> {
        let now = Instant::now();
        if ph == phase::MEASURE && !self.measuring && self.stop_at.is_none() {
            self.measuring = true;
            self.cpu0 = cpu::this_thread_ns();
        }
        if ph == phase::STOP && self.stop_at.is_none() {
            self.stop_at = Some(now);
            if self.measuring {
                self.res.cpu_ns = cpu::this_thread_ns() - self.cpu0;
            }
            self.measuring = false;
        }
        let res = &mut self.res;
        let mut outstanding = 0;
        for (c, st) in self.chans.iter_mut().zip(self.states.iter_mut()) {
            c.poll_nowait().map_err(|e| format!("poll: {e}"))?;
            while let Some(r) = c.take_response() {
                let i = r.tag as usize % TAGS;
                if r.status != 0 {
                    res.errors += 1;
                }
                st.free.push(st.slot_of[i]);
                if self.measuring {
                    res.ops += 1;
                    res.reads += u64::from(st.read[i]);
                    res.hist
                        .record(now.saturating_duration_since(st.start[i]).as_nanos() as u64);
                }
                if self.stop_at.is_none() {
                    submit(c, st, self.bs, now)?;
                }
            }
            if c.disconnected {
                return Err("the target disconnected a channel".into());
            }
            outstanding += c.outstanding();
        }
        match self.stop_at {
            Some(_) if outstanding == 0 => Ok(true),
            Some(t) if now.duration_since(t) > Duration::from_secs(10) => {
                Err(format!("{outstanding} commands never completed"))
            }
            _ => Ok(false),
        }
    }
}
