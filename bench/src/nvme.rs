//! NVMe/RDMA: the target with the RDMA transport and the Rust NVMe host.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use rtgt_tests::nvme_host::{Data, HOSTNQN, HostCtrl, HostQueue, read_sqe, write_sqe};
use rtgt_tests::{HOST_IP, TARGET_IP, TestTarget};
use target_core::reactor::{PollStatus, ReactorConfig};

use crate::{Args, BdevKind, HostResult, Pattern, WindowResult, cpu, phase};

/// The subsystem the benchmarks export.
pub const NQN: &str = "nqn.2016-06.io.rtgt:bench";

/// Starts the target with the options of `a` (shared with the SRP run); `defaults` are
/// transport options used where `--transport-opts` does not set them.
pub fn target(
    a: &Args,
    transport: &str,
    defaults: serde_json::Value,
) -> Result<(TestTarget, u64), String> {
    let mut cfg = ReactorConfig::with_count(a.reactors);
    cfg.idle_sleep_after = if a.no_idle_sleep {
        None
    } else {
        Some(Duration::from_micros(a.idle_sleep_us))
    };
    let t = TestTarget::start_with(cfg);
    let mut opts: serde_json::Value =
        serde_json::from_str(&a.transport_opts).map_err(|e| format!("--transport-opts: {e}"))?;
    if let (Some(o), serde_json::Value::Object(d)) = (opts.as_object_mut(), defaults) {
        for (k, v) in d {
            o.entry(k).or_insert(v);
        }
    }
    t.transport(transport, opts);
    let mut blocks = (a.size_mib << 20) / u64::from(a.block_size);
    match a.bdev {
        BdevKind::Null => drop(t.null("bench0", blocks, a.block_size)),
        BdevKind::Malloc => drop(t.malloc("bench0", blocks, a.block_size)),
        BdevKind::Rbd => blocks = rbd_bdev(&t, a)?,
    };
    if a.qos_iops > 0 || a.qos_mbps > 0 {
        let limits = target_core::bdev::QosLimits {
            rw_ios_per_sec: a.qos_iops,
            rw_mbytes_per_sec: a.qos_mbps,
            ..Default::default()
        };
        t.target
            .bdevs()
            .set_qos("bench0", limits)
            .map_err(|e| format!("--qos-iops/--qos-mbps: {e}"))?;
    }
    t.subsystem(NQN, true);
    t.add_ns(NQN, "bench0");
    Ok((t, blocks))
}

/// The RBD module and the bdevs of a `--bdev rbd` run, closed by [`close_rbd`].
type RbdRun = (
    Arc<bdev_rbd::RbdModule>,
    Arc<target_core::bdev::BdevRegistry>,
);
static RBD: std::sync::Mutex<Option<RbdRun>> = std::sync::Mutex::new(None);

/// After the target stopped: closes the RBD image and cluster connection of a `--bdev rbd` run
/// (the module's exit path in rtgt).
pub fn close_rbd() {
    if let Some((m, bdevs)) = RBD.lock().unwrap_or_else(|e| e.into_inner()).take() {
        m.close_all(&bdevs);
    }
}

/// `--bdev rbd`: registers the cluster of `--rbd-conf` and opens `rbd/<--rbd-image>` as bdev
/// `bench0` (what `bdev_rbd_register_cluster` and `bdev_rbd_create` do); returns its blocks.
fn rbd_bdev(t: &TestTarget, a: &Args) -> Result<u64, String> {
    let conf = a
        .rbd_conf
        .as_ref()
        .ok_or("--bdev rbd needs --rbd-conf (a ceph.conf)")?;
    let m = bdev_rbd::RbdModule::new(bdev_rbd::RbdOptions::default());
    m.register_cluster(bdev_rbd::params::RegisterCluster {
        name: "bench".into(),
        config_file: Some(conf.display().to_string()),
        ..Default::default()
    })
    .map_err(|e| format!("bdev_rbd_register_cluster: {e}"))?;
    m.create_bdev(
        t.target.bdevs(),
        bdev_rbd::params::Create {
            name: Some("bench0".into()),
            pool_name: "rbd".into(),
            rbd_name: a.rbd_image.clone(),
            block_size: a.block_size,
            cluster_name: Some("bench".into()),
            ..Default::default()
        },
    )
    .map_err(|e| format!("bdev_rbd_create: {e}"))?;
    *RBD.lock().unwrap_or_else(|e| e.into_inner()) = Some((m, Arc::clone(t.target.bdevs())));
    let b = t.target.bdevs().get("bench0").ok_or("bench0 is missing")?;
    Ok(b.num_blocks())
}

/// Runs the benchmark.
pub fn run(a: &Args) -> Result<(HostResult, WindowResult), String> {
    let (t, dev_blocks) = target(a, "RDMA", serde_json::json!({}))?;
    t.listen(NQN, "RDMA", 4420);
    let mut o = rtgt_tests::nvme_host::ConnectOpts::new(NQN, HOSTNQN);
    o.src = Some(HOST_IP.parse().expect("ip"));
    o.io_queues = a.qpairs as u16;
    o.io_depth = a.qd.clamp(2, 4096) as u16;
    o.max_io = a.bs;
    let to = format!("{TARGET_IP}:4420").parse().expect("addr");
    let mut ctrl = HostCtrl::connect(&t.fabric, to, o).map_err(|e| format!("connect: {e}"))?;
    if ctrl.io.len() < a.qpairs {
        return Err(format!(
            "the target granted {} I/O queues of the {} asked",
            ctrl.io.len(),
            a.qpairs
        ));
    }
    let in_capsule = ctrl.in_capsule;
    let mut queues = std::mem::take(&mut ctrl.io);
    for q in &mut queues {
        q.set_bench_mode(true);
    }
    let phase = Arc::new(AtomicU8::new(phase::WARMUP));
    let reactors = t.target.reactors().clone();
    if a.idle {
        // Connected and silent: what do the reactors cost when there is nothing to do?
        let w = crate::drive_phases(a, &phase, "reactor_", Some(reactors));
        ctrl.io = queues;
        if let Err(e) = ctrl.shutdown() {
            eprintln!("rtgt-bench: controller shutdown: {e}");
        }
        return Ok((HostResult::default(), w));
    }
    let (results, window, queues) = if a.inline_initiator {
        inline(a, queues, dev_blocks, in_capsule, &phase, &t)?
    } else {
        threaded(a, queues, dev_blocks, in_capsule, &phase, reactors)
    };
    let mut total = HostResult::default();
    for r in results {
        total.merge(&r?);
    }
    ctrl.io = queues;
    if let Err(e) = ctrl.shutdown() {
        eprintln!("rtgt-bench: controller shutdown: {e}");
    }
    drop(t);
    Ok((total, window))
}

/// What a run hands back: each initiator's result, the measured window, and the queues.
type RunEnd = (
    Vec<Result<HostResult, String>>,
    WindowResult,
    Vec<HostQueue>,
);

/// Initiator threads, each driving its share of the queues.
fn threaded(
    a: &Args,
    mut queues: Vec<HostQueue>,
    dev_blocks: u64,
    in_capsule: usize,
    phase: &AtomicU8,
    reactors: target_core::reactor::Reactors,
) -> RunEnd {
    let threads = a.initiator_threads.clamp(1, queues.len());
    let per = queues.len().div_ceil(threads);
    let mut shares = Vec::new();
    while !queues.is_empty() {
        let rest = queues.split_off(per.min(queues.len()));
        shares.push(std::mem::replace(&mut queues, rest));
    }
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (ti, share) in shares.into_iter().enumerate() {
            handles.push(
                std::thread::Builder::new()
                    .name(format!("initiator_{ti}"))
                    .spawn_scoped(s, move || {
                        let mut d = match Driver::new(a, share, dev_blocks, in_capsule, ti) {
                            Ok(d) => d,
                            Err(e) => return (Err(e), Vec::new()),
                        };
                        loop {
                            if let Some(r) = d.step(phase.load(Ordering::Acquire)) {
                                return (r, d.queues);
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
                Ok((r, q)) => {
                    results.push(r);
                    back.extend(q);
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
    queues: Vec<HostQueue>,
    dev_blocks: u64,
    in_capsule: usize,
    phase: &Arc<AtomicU8>,
    t: &TestTarget,
) -> Result<RunEnd, String> {
    let mut d = Some(Driver::new(a, queues, dev_blocks, in_capsule, 0)?);
    let (tx, rx) = std::sync::mpsc::channel();
    let ph = Arc::clone(phase);
    let reactors = t.target.reactors().clone();
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
                    let _ = tx.send((r, drv.queues));
                    if let Some(id) = me2.get() {
                        ctx.unregister_poller(id);
                    }
                    return PollStatus::Busy;
                }
                // Idle when nothing completed, so that the reactor can sleep (after
                // --idle-sleep-us) while the commands wait on a slow bdev (RBD): a poller
                // that always claims work keeps its reactor spinning at 100 % of a core.
                if drv.completed > 0 {
                    PollStatus::Busy
                } else {
                    PollStatus::Idle
                }
            });
            me.set(Some(id));
        })
        .map_err(|e| e.to_string())?;
    let w = crate::drive_phases(a, phase, "reactor_", Some(reactors));
    let (r, q) = rx
        .recv_timeout(Duration::from_secs(30))
        .map_err(|_| "the inline initiator did not finish".to_string())?;
    Ok((vec![r], w, q))
}

struct QState {
    pat: Pattern,
    start: Vec<Instant>,
    read: Vec<bool>,
}

fn submit(
    q: &mut HostQueue,
    st: &mut QState,
    bs: usize,
    in_capsule: usize,
    wbuf: &[u8],
    now: Instant,
) -> Result<(), String> {
    let (read, lba) = st.pat.next_io();
    let nlb = st.pat.blocks as u32;
    let r = if read {
        q.submit(
            read_sqe(1, lba, nlb),
            Data::KeyedRead {
                len: bs as u32,
                invalidate: false,
            },
        )
    } else if bs <= in_capsule {
        q.submit(write_sqe(1, lba, nlb), Data::InCapsule(&wbuf[..bs]))
    } else {
        q.submit(
            write_sqe(1, lba, nlb),
            Data::KeyedWriteInPlace { len: bs as u32 },
        )
    };
    let cid = r.map_err(|e| format!("submit: {e}"))?;
    let i = usize::from(cid & 0x0FFF);
    st.start[i] = now;
    st.read[i] = read;
    Ok(())
}

/// One initiator's queues and their workload; [`Driver::step`] runs one polling round.
pub struct Driver {
    queues: Vec<HostQueue>,
    states: Vec<QState>,
    wbuf: Vec<u8>,
    bs: usize,
    in_capsule: usize,
    res: HostResult,
    measuring: bool,
    cpu0: u64,
    stop_at: Option<Instant>,
    /// `--initiator-idle-us`, and when a completion last arrived.
    idle_after: Option<Duration>,
    last_busy: Instant,
    pollfds: Vec<libc::pollfd>,
    /// Completions the last round reaped.
    completed: usize,
}

impl Driver {
    fn new(
        a: &Args,
        mut queues: Vec<HostQueue>,
        dev_blocks: u64,
        in_capsule: usize,
        ti: usize,
    ) -> Result<Self, String> {
        let states: Vec<QState> = queues
            .iter()
            .enumerate()
            .map(|(i, q)| QState {
                pat: Pattern::new(a, dev_blocks, (ti * 1000 + i + 1) as u64),
                start: vec![Instant::now(); usize::from(q.depth()).max(4096)],
                read: vec![false; usize::from(q.depth()).max(4096)],
            })
            .collect();
        let wbuf = vec![0x5Au8; a.bs];
        let now = Instant::now();
        let n_queues = queues.len();
        let mut states = states;
        for (q, st) in queues.iter_mut().zip(states.iter_mut()) {
            for _ in 0..a.qd.min(usize::from(q.depth())) {
                submit(q, st, a.bs, in_capsule, &wbuf, now)?;
            }
            q.flush().map_err(|e| format!("post: {e}"))?;
        }
        Ok(Self {
            queues,
            states,
            wbuf,
            bs: a.bs,
            in_capsule,
            res: HostResult::default(),
            measuring: false,
            cpu0: 0,
            stop_at: None,
            idle_after: a.initiator_idle(),
            last_busy: now,
            pollfds: Vec::with_capacity(n_queues),
            completed: 0,
        })
    }

    /// One round over every queue. `Some` when finished (stopped and drained, or failed).
    fn step(&mut self, ph: u8) -> Option<Result<HostResult, String>> {
        match self.round(ph) {
            Ok(true) => Some(Ok(std::mem::take(&mut self.res))),
            Ok(false) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// Nothing completed for `--initiator-idle-us`: sleeps until a queue has a completion
    /// (or 10 ms pass, so that phase changes are seen), as a kernel host waits for its
    /// interrupt rather than taking a core from the target and the backend.
    fn sleep(&mut self) -> Result<(), String> {
        self.pollfds.clear();
        for q in &mut self.queues {
            if q.arm_completion().map_err(|e| format!("poll: {e}"))? > 0 {
                // Arrived while arming: the next round handles it.
                return Ok(());
            }
            self.pollfds.push(libc::pollfd {
                fd: q.completion_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // SAFETY: `pollfds` is a live array of `len` pollfds for the duration of the call.
        unsafe { libc::poll(self.pollfds.as_mut_ptr(), self.pollfds.len() as _, 10) };
        for q in &mut self.queues {
            q.ack_completion_events();
        }
        Ok(())
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
        let mut completed = 0;
        for (q, st) in self.queues.iter_mut().zip(self.states.iter_mut()) {
            q.poll().map_err(|e| format!("poll: {e}"))?;
            while let Some((cid, cqe)) = q.pop_done() {
                completed += 1;
                let i = usize::from(cid & 0x0FFF);
                if !cqe.status.is_success() {
                    res.errors += 1;
                }
                if self.measuring {
                    res.ops += 1;
                    res.reads += u64::from(st.read[i]);
                    res.hist
                        .record(now.saturating_duration_since(st.start[i]).as_nanos() as u64);
                }
                if self.stop_at.is_none() {
                    submit(q, st, self.bs, self.in_capsule, &self.wbuf, now)?;
                }
            }
            q.flush().map_err(|e| format!("post: {e}"))?;
            if q.is_disconnected() {
                return Err("the target disconnected a queue".into());
            }
            outstanding += q.outstanding();
        }
        self.completed = completed;
        if completed > 0 {
            self.last_busy = now;
        } else if let Some(after) = self.idle_after
            && outstanding > 0
            && now.saturating_duration_since(self.last_busy) >= after
        {
            self.sleep()?;
        }
        if let Some(t) = self.stop_at {
            if outstanding == 0 {
                return Ok(true);
            }
            if now.duration_since(t) > Duration::from_secs(10) {
                return Err(format!("{outstanding} commands never completed"));
            }
        }
        Ok(false)
    }
}
