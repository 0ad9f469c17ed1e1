//! `rtgt-bench`: the data path of rtgt measured in one process. A target (reactors, a
//! transport, a null or malloc bdev) runs on a simulated fabric; Rust initiators on their own
//! threads keep a fixed number of commands outstanding on every queue pair. It reports IOPS,
//! MiB/s, latency percentiles, the reactors' CPU time per I/O and the heap allocations per I/O
//! made on reactor threads during the measured window (a counting global allocator), and writes
//! the figures as JSON.
//!
//! ```text
//! rtgt-bench --transport rdma --reactors 1 --qpairs 1 --qd 128 --bs 4096 --rw randread \
//!            --duration 5 --bdev null --json out.json
//! rtgt-bench --transport fabric      # the bare simulated fabric: the floor of the software path
//! rtgt-bench --transport tcp         # NVMe/TCP over loopback sockets (real sockets, no simulation)
//! ```
//!
//! It is a benchmark, not a test. The simulated fabric copies data on the posting thread, so the
//! figures measure software cost (target + fabric simulation), not a wire.

mod alloc;
mod cpu;
mod fabric_only;
mod hist;
mod nvme;
mod srp;
mod tcp;

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use serde_json::{Value, json};

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// Which wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportKind {
    /// NVMe over RDMA.
    Rdma,
    /// SRP (SCSI RDMA Protocol).
    Srp,
    /// NVMe over TCP on loopback sockets.
    Tcp,
    /// The bare simulated fabric with an NVMe-like exchange and no target (the floor).
    Fabric,
}

/// The access pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Rw {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random reads.
    Randread,
    /// Random writes.
    Randwrite,
    /// Sequential mix (`--rwmixread`).
    Rw,
    /// Random mix (`--rwmixread`).
    Randrw,
}

/// The backing device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BdevKind {
    /// Discards writes, leaves read buffers as they are.
    Null,
    /// RAM.
    Malloc,
    /// An existing RBD image (`--rbd-conf`, `--rbd-image`; its size, not `--size-mib`).
    Rbd,
}

/// Command line.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "rtgt-bench",
    version,
    about = "rtgt data-path benchmark on the simulated fabric"
)]
pub struct Args {
    /// Transport.
    #[arg(long, value_enum, default_value = "rdma")]
    pub transport: TransportKind,
    /// Reactors (one thread each).
    #[arg(long, default_value_t = 1)]
    pub reactors: usize,
    /// I/O queue pairs (NVMe) or channels (SRP).
    #[arg(long, default_value_t = 1)]
    pub qpairs: usize,
    /// Commands outstanding per queue pair.
    #[arg(long, default_value_t = 128)]
    pub qd: usize,
    /// Bytes per command (a multiple of the block size).
    #[arg(long, default_value_t = 4096)]
    pub bs: usize,
    /// Access pattern.
    #[arg(long, value_enum, default_value = "randread")]
    pub rw: Rw,
    /// Percentage of reads for `rw` / `randrw`.
    #[arg(long, default_value_t = 50)]
    pub rwmixread: u32,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Seconds of load before measuring.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Backing device.
    #[arg(long, value_enum, default_value = "null")]
    pub bdev: BdevKind,
    /// Device size in MiB.
    #[arg(long, default_value_t = 1024)]
    pub size_mib: u64,
    /// `--bdev rbd`: the cluster's ceph.conf (registered as one cluster, as
    /// `bdev_rbd_register_cluster` does).
    #[arg(long)]
    pub rbd_conf: Option<std::path::PathBuf>,
    /// `--bdev rbd`: the image in pool `rbd`.
    #[arg(long, default_value = "bench")]
    pub rbd_image: String,
    /// A QoS limit on the device in I/Os per second (`bdev_set_qos_limit --rw_ios_per_sec`, a
    /// multiple of 1000): the report then shows how close the measured rate comes to it.
    #[arg(long, default_value_t = 0)]
    pub qos_iops: u64,
    /// A QoS limit on the device in MiB per second (`bdev_set_qos_limit --rw_mbytes_per_sec`).
    #[arg(long, default_value_t = 0)]
    pub qos_mbps: u64,
    /// Logical block size of the device.
    #[arg(long, default_value_t = 4096)]
    pub block_size: u32,
    /// Initiator threads (queue pairs are shared out among them).
    #[arg(long, default_value_t = 1)]
    pub initiator_threads: usize,
    /// Run the initiator (NVMe or SRP) as a poller on reactor 0 instead of on its own thread:
    /// one thread does everything, so `valgrind --tool=callgrind` instruction counts per I/O
    /// are repeatable. The target's CPU figures then include the initiator.
    #[arg(long)]
    pub inline_initiator: bool,
    /// Connect the queue pairs and send nothing: measures what idle connected reactors cost
    /// (`target.cpu_utilization`; NVMe/RDMA only).
    #[arg(long)]
    pub idle: bool,
    /// Reactors spin instead of sleeping when idle (no adaptive polling).
    #[arg(long)]
    pub no_idle_sleep: bool,
    /// How long a reactor finds no work before it sleeps on its fds, in µs (`rtgt serve
    /// --idle-sleep-us`).
    #[arg(long, default_value_t = 200)]
    pub idle_sleep_us: u64,
    /// NVMe/RDMA initiator: how long a thread finds no completion before it sleeps on its
    /// queues' completion channels (as a kernel host waits for its interrupt), in µs; 0: it
    /// never sleeps (spins). Default 200; refused with other transports and with
    /// `--inline-initiator` (whose initiator shares the reactor's thread).
    #[arg(long)]
    pub initiator_idle_us: Option<u64>,
    /// Transport options as a JSON object (as `nvmf_create_transport` takes them).
    #[arg(long, default_value = "{}")]
    pub transport_opts: String,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Print only the JSON (to stdout when `--json` is absent).
    #[arg(long)]
    pub quiet: bool,
}

impl Args {
    /// The share of reads in percent.
    pub fn read_pct(&self) -> u32 {
        match self.rw {
            Rw::Read | Rw::Randread => 100,
            Rw::Write | Rw::Randwrite => 0,
            Rw::Rw | Rw::Randrw => self.rwmixread.min(100),
        }
    }

    /// `--initiator-idle-us`: when a threaded NVMe/RDMA initiator sleeps (`None`: never).
    pub fn initiator_idle(&self) -> Option<Duration> {
        if self.transport != TransportKind::Rdma || self.inline_initiator {
            return None;
        }
        match self.initiator_idle_us.unwrap_or(200) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Whether offsets are random.
    pub fn random(&self) -> bool {
        matches!(self.rw, Rw::Randread | Rw::Randwrite | Rw::Randrw)
    }
}

/// Phases the main thread announces to initiator threads.
pub mod phase {
    /// Load, not measured.
    pub const WARMUP: u8 = 0;
    /// Load, measured.
    pub const MEASURE: u8 = 1;
    /// Finish what is outstanding and return.
    pub const STOP: u8 = 2;
}

/// What one initiator thread measured (during [`phase::MEASURE`] only).
#[derive(Default, Clone)]
pub struct HostResult {
    /// Commands completed.
    pub ops: u64,
    /// Reads completed.
    pub reads: u64,
    /// Commands that completed with an error.
    pub errors: u64,
    /// Latencies (submission to completion seen by the initiator).
    pub hist: hist::Histogram,
    /// CPU time of the thread.
    pub cpu_ns: u64,
}

impl HostResult {
    /// Adds another thread's result.
    pub fn merge(&mut self, o: &HostResult) {
        self.ops += o.ops;
        self.reads += o.reads;
        self.errors += o.errors;
        self.hist.merge(&o.hist);
        self.cpu_ns += o.cpu_ns;
    }
}

/// A cheap random number generator for offsets and the read/write mix (no allocation).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next value.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// Offsets and directions of a workload for one queue.
#[derive(Debug, Clone)]
pub struct Pattern {
    rng: Rng,
    cursor: u64,
    /// Blocks per command.
    pub blocks: u64,
    slots: u64,
    random: bool,
    read_pct: u32,
}

impl Pattern {
    /// For a device of `dev_blocks` blocks, `blocks` per command, starting at slot `start`.
    pub fn new(a: &Args, dev_blocks: u64, seed: u64) -> Self {
        let blocks = (a.bs as u64 / u64::from(a.block_size)).max(1);
        let slots = (dev_blocks / blocks).max(1);
        Self {
            rng: Rng::new(seed),
            cursor: (seed * 7919) % slots,
            blocks,
            slots,
            random: a.random(),
            read_pct: a.read_pct(),
        }
    }

    /// `(is_read, first block)` of the next command.
    #[inline]
    pub fn next_io(&mut self) -> (bool, u64) {
        let read = match self.read_pct {
            100 => true,
            0 => false,
            p => (self.rng.next_u64() % 100) < u64::from(p),
        };
        let slot = if self.random {
            self.rng.next_u64() % self.slots
        } else {
            let s = self.cursor;
            self.cursor = (self.cursor + 1) % self.slots;
            s
        };
        (read, slot * self.blocks)
    }
}

/// Target-side figures around the measured window.
pub struct Window {
    start: Instant,
    reactor_cpu0: u64,
    process_cpu0: u64,
    allocs0: (u64, u64),
    reactors: cpu::Threads,
    busy0: u64,
    idle0: u64,
    groups0: std::collections::BTreeMap<String, u64>,
    switches0: std::collections::BTreeMap<String, (u64, u64)>,
    sleeps0: u64,
    stats: Option<target_core::reactor::Reactors>,
}

/// What the window saw.
pub struct WindowResult {
    /// Wall time.
    pub seconds: f64,
    /// Reactor threads' CPU time.
    pub reactor_cpu_ns: u64,
    /// Whole process CPU time.
    pub process_cpu_ns: u64,
    /// Allocations on reactor threads.
    pub target_allocs: u64,
    /// Allocations elsewhere.
    pub other_allocs: u64,
    /// Reactor busy / idle time by the reactors' own accounting.
    pub busy_ns: u64,
    /// See `busy_ns`.
    pub idle_ns: u64,
    /// Reactor threads found.
    pub reactor_threads: usize,
    /// Times the reactors went to sleep.
    pub sleeps: u64,
    /// CPU time of the process's threads by name group ([`cpu::by_thread_group`]).
    pub cpu_by_thread: std::collections::BTreeMap<String, u64>,
    /// Their (voluntary, involuntary) context switches ([`cpu::switches_by_thread_group`]).
    pub switches_by_thread: std::collections::BTreeMap<String, (u64, u64)>,
}

impl Window {
    /// Opens the window: call right before announcing [`phase::MEASURE`].
    pub fn open(thread_prefix: &str, reactors: Option<target_core::reactor::Reactors>) -> Self {
        let threads = cpu::Threads::named(thread_prefix);
        let (busy0, idle0) = reactors.as_ref().map_or((0, 0), busy_idle);
        let sleeps0 = reactors.as_ref().map_or(0, sleeps);
        Self {
            groups0: cpu::by_thread_group(),
            switches0: cpu::switches_by_thread_group(),
            sleeps0,
            reactor_cpu0: threads.cpu_ns(),
            process_cpu0: cpu::process_ns(),
            allocs0: alloc::counts(),
            reactors: threads,
            busy0,
            idle0,
            stats: reactors,
            start: Instant::now(),
        }
    }

    /// Closes it: call right after announcing [`phase::STOP`].
    pub fn close(self) -> WindowResult {
        let seconds = self.start.elapsed().as_secs_f64();
        let allocs = alloc::counts();
        let cpu = self.reactors.cpu_ns();
        let (busy, idle) = self.stats.as_ref().map_or((0, 0), busy_idle);
        let mut cpu_by_thread = cpu::by_thread_group();
        for (k, v) in cpu_by_thread.iter_mut() {
            *v = v.saturating_sub(self.groups0.get(k).copied().unwrap_or(0));
        }
        let mut switches_by_thread = cpu::switches_by_thread_group();
        for (k, (vol, invol)) in switches_by_thread.iter_mut() {
            let (v0, i0) = self.switches0.get(k).copied().unwrap_or((0, 0));
            *vol = vol.saturating_sub(v0);
            *invol = invol.saturating_sub(i0);
        }
        WindowResult {
            cpu_by_thread,
            switches_by_thread,
            seconds,
            reactor_cpu_ns: cpu.saturating_sub(self.reactor_cpu0),
            process_cpu_ns: cpu::process_ns().saturating_sub(self.process_cpu0),
            target_allocs: allocs.0 - self.allocs0.0,
            other_allocs: allocs.1 - self.allocs0.1,
            busy_ns: busy.saturating_sub(self.busy0),
            idle_ns: idle.saturating_sub(self.idle0),
            reactor_threads: self.reactors.len(),
            sleeps: self
                .stats
                .as_ref()
                .map_or(0, sleeps)
                .saturating_sub(self.sleeps0),
        }
    }
}

fn sleeps(r: &target_core::reactor::Reactors) -> u64 {
    (0..r.len())
        .filter_map(|i| r.stats(i))
        .map(|s| s.sleeps.load(Ordering::Relaxed))
        .sum()
}

fn busy_idle(r: &target_core::reactor::Reactors) -> (u64, u64) {
    (0..r.len())
        .filter_map(|i| r.stats(i))
        .fold((0, 0), |(b, i), s| {
            (
                b + s.busy_ns.load(Ordering::Relaxed),
                i + s.idle_ns.load(Ordering::Relaxed),
            )
        })
}

/// Runs the phases: warm-up, measure, stop. `phase` is shared with the initiator threads.
pub fn drive_phases(
    a: &Args,
    phase: &AtomicU8,
    thread_prefix: &str,
    reactors: Option<target_core::reactor::Reactors>,
) -> WindowResult {
    std::thread::sleep(Duration::from_secs_f64(a.warmup));
    let w = Window::open(thread_prefix, reactors);
    phase.store(phase::MEASURE, Ordering::Release);
    std::thread::sleep(Duration::from_secs_f64(a.duration));
    phase.store(phase::STOP, Ordering::Release);
    w.close()
}

fn loadavg() -> Value {
    let s = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let v: Vec<f64> = s
        .split_whitespace()
        .take(3)
        .filter_map(|x| x.parse().ok())
        .collect();
    json!(v)
}

/// CPU per I/O by thread group. The initiator threads' own figure is what they measured inside
/// the window: they may have exited before the window closed, and with them their
/// `/proc/self/task` entries.
fn by_thread(
    a: &Args,
    h: &HostResult,
    w: &WindowResult,
    ops: f64,
) -> serde_json::Map<String, Value> {
    let mut m: serde_json::Map<String, Value> = w
        .cpu_by_thread
        .iter()
        .filter(|(_, ns)| **ns > 0)
        .map(|(k, ns)| (k.clone(), json!((*ns as f64 / ops).round())))
        .collect();
    if !a.inline_initiator && h.cpu_ns > 0 {
        m.insert("initiator".into(), json!((h.cpu_ns as f64 / ops).round()));
    }
    m
}

/// Voluntary and involuntary context switches per I/O by thread group, for the groups with at
/// least one per thousand I/Os.
fn switches_by_thread(w: &WindowResult, ops: f64) -> serde_json::Map<String, Value> {
    let per_io = |n: u64| (n as f64 / ops * 1000.0).round() / 1000.0;
    w.switches_by_thread
        .iter()
        .filter(|(_, (v, i))| (v + i) as f64 / ops >= 0.001)
        .map(|(k, (v, i))| {
            let e = json!({ "voluntary": per_io(*v), "involuntary": per_io(*i) });
            (k.clone(), e)
        })
        .collect()
}

/// Builds the report.
pub fn report(a: &Args, h: &HostResult, w: &WindowResult, load_before: Value) -> Value {
    let ops = h.ops.max(1) as f64;
    let iops = h.ops as f64 / w.seconds;
    let mib_s = iops * a.bs as f64 / (1024.0 * 1024.0);
    let qos = json!({
        "rw_ios_per_sec": a.qos_iops,
        "rw_mbytes_per_sec": a.qos_mbps,
        "iops_of_limit": if a.qos_iops > 0 { iops / a.qos_iops as f64 } else { 0.0 },
        "mib_s_of_limit": if a.qos_mbps > 0 { mib_s / a.qos_mbps as f64 } else { 0.0 },
    });
    let us = |ns: u64| ns as f64 / 1000.0;
    json!({
        "config": {
            "transport": format!("{:?}", a.transport).to_lowercase(),
            "reactors": a.reactors,
            "qpairs": a.qpairs,
            "qd": a.qd,
            "bs": a.bs,
            "rw": format!("{:?}", a.rw).to_lowercase(),
            "rwmixread": a.read_pct(),
            "duration_s": a.duration,
            "warmup_s": a.warmup,
            "bdev": format!("{:?}", a.bdev).to_lowercase(),
            "block_size": a.block_size,
            "initiator_threads": a.initiator_threads,
            "inline_initiator": a.inline_initiator,
            "idle": a.idle,
            "idle_sleep": !a.no_idle_sleep,
            "idle_sleep_us": a.idle_sleep_us,
            "initiator_idle_us": a.initiator_idle().map(|d| d.as_micros() as u64),
            "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
        },
        "ops": h.ops,
        "reads": h.reads,
        "errors": h.errors,
        "seconds": w.seconds,
        "iops": iops,
        "mib_s": mib_s,
        "qos": qos,
        "latency_us": {
            "mean": h.hist.mean() / 1000.0,
            "p50": us(h.hist.percentile(50.0)),
            "p99": us(h.hist.percentile(99.0)),
            "p99.9": us(h.hist.percentile(99.9)),
            "max": us(h.hist.max()),
        },
        "target": {
            "cpu_ns_per_io": w.reactor_cpu_ns as f64 / ops,
            "cpu_utilization": w.reactor_cpu_ns as f64 / (w.seconds * 1e9),
            "busy_ns_per_io": w.busy_ns as f64 / ops,
            "busy_fraction": if w.busy_ns + w.idle_ns > 0 {
                w.busy_ns as f64 / (w.busy_ns + w.idle_ns) as f64
            } else { 0.0 },
            "allocs": w.target_allocs,
            "allocs_per_io": w.target_allocs as f64 / ops,
            "threads": w.reactor_threads,
        },
        "initiator": {
            "cpu_ns_per_io": h.cpu_ns as f64 / ops,
            "allocs_per_io": w.other_allocs as f64 / ops,
        },
        "process_cpu_ns_per_io": w.process_cpu_ns as f64 / ops,
        "process_cpu_utilization": w.process_cpu_ns as f64 / (w.seconds * 1e9),
        "cpu_ns_per_io_by_thread": by_thread(a, h, w, ops),
        "ctx_switches_per_io_by_thread": switches_by_thread(w, ops),
        "reactor_sleeps_per_s": w.sleeps as f64 / w.seconds,
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
    })
}

fn print_human(r: &Value) {
    let c = &r["config"];
    if c["idle"] == true {
        let f = |v: &Value| v.as_f64().unwrap_or(0.0);
        println!(
            "idle: {} qpairs on {} reactor(s) for {:.1} s: reactors {:.3}% CPU ({} thread(s)), process {:.3}% CPU, {:.0} sleeps/s",
            c["qpairs"],
            c["reactors"],
            f(&r["seconds"]),
            f(&r["target"]["cpu_utilization"]) * 100.0,
            r["target"]["threads"],
            f(&r["process_cpu_utilization"]) * 100.0,
            f(&r["reactor_sleeps_per_s"]),
        );
        return;
    }
    println!(
        "{} {} bs={} qd={} qpairs={} reactors={} bdev={} ({} s)",
        c["transport"].as_str().unwrap_or(""),
        c["rw"].as_str().unwrap_or(""),
        c["bs"],
        c["qd"],
        c["qpairs"],
        c["reactors"],
        c["bdev"].as_str().unwrap_or(""),
        r["seconds"]
            .as_f64()
            .map_or(0.0, |s| (s * 100.0).round() / 100.0),
    );
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    println!(
        "  {:>10.0} IOPS  {:>9.1} MiB/s  errors {}",
        f(&r["iops"]),
        f(&r["mib_s"]),
        r["errors"]
    );
    let q = &r["qos"];
    if f(&q["iops_of_limit"]) > 0.0 || f(&q["mib_s_of_limit"]) > 0.0 {
        println!(
            "  QoS: limit {} IOPS / {} MiB/s (0: none); measured {:.3} of the IOPS limit, {:.3} of the MiB/s limit",
            q["rw_ios_per_sec"],
            q["rw_mbytes_per_sec"],
            f(&q["iops_of_limit"]),
            f(&q["mib_s_of_limit"]),
        );
    }
    let l = &r["latency_us"];
    println!(
        "  latency us: mean {:.1}  p50 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
        f(&l["mean"]),
        f(&l["p50"]),
        f(&l["p99"]),
        f(&l["p99.9"]),
        f(&l["max"])
    );
    let t = &r["target"];
    println!(
        "  target: {:.0} ns CPU/I/O ({:.0}% of {} reactor thread(s), busy {:.0}%), {:.4} allocations/I/O",
        f(&t["cpu_ns_per_io"]),
        f(&t["cpu_utilization"]) * 100.0,
        t["threads"],
        f(&t["busy_fraction"]) * 100.0,
        f(&t["allocs_per_io"])
    );
    let i = &r["initiator"];
    println!(
        "  initiator: {:.0} ns CPU/I/O, {:.4} allocations/I/O; load average {} -> {}",
        f(&i["cpu_ns_per_io"]),
        f(&i["allocs_per_io"]),
        r["loadavg_before"],
        r["loadavg_after"]
    );
}

fn main() {
    let a = Args::parse();
    if a.bs == 0 || a.bs % a.block_size as usize != 0 {
        eprintln!("--bs must be a non-zero multiple of --block-size");
        std::process::exit(2);
    }
    if a.qd == 0 || a.qpairs == 0 || a.reactors == 0 {
        eprintln!("--qd, --qpairs and --reactors must be at least 1");
        std::process::exit(2);
    }
    if a.initiator_idle_us.is_some() && (a.transport != TransportKind::Rdma || a.inline_initiator) {
        eprintln!(
            "--initiator-idle-us applies to the NVMe/RDMA initiator on its own threads only \
             (not with --transport {:?} or --inline-initiator)",
            a.transport
        );
        std::process::exit(2);
    }
    if a.transport == TransportKind::Fabric && (a.no_idle_sleep || a.idle_sleep_us != 200) {
        eprintln!("--idle-sleep-us and --no-idle-sleep need a target (not --transport fabric)");
        std::process::exit(2);
    }
    if a.transport == TransportKind::Fabric && (a.qos_iops > 0 || a.qos_mbps > 0) {
        eprintln!("--qos-iops and --qos-mbps limit the target's bdev (not --transport fabric)");
        std::process::exit(2);
    }
    let load = loadavg();
    let out = match a.transport {
        TransportKind::Rdma => nvme::run(&a),
        TransportKind::Srp => srp::run(&a),
        TransportKind::Tcp => tcp::run(&a),
        TransportKind::Fabric => fabric_only::run(&a),
    };
    // The target has stopped: close the RBD image, as rtgt does at exit, so that its watch and
    // exclusive lock do not outlive the process (the next run would wait for them).
    nvme::close_rbd();
    let (h, w) = match out {
        Ok(x) => x,
        Err(e) => {
            eprintln!("rtgt-bench: {e}");
            std::process::exit(1);
        }
    };
    let r = report(&a, &h, &w, load);
    let text = serde_json::to_string_pretty(&r).unwrap_or_default();
    if let Some(p) = &a.json
        && let Err(e) = std::fs::write(p, &text)
    {
        eprintln!("rtgt-bench: writing {}: {e}", p.display());
        std::process::exit(1);
    }
    if a.quiet {
        if a.json.is_none() {
            println!("{text}");
        }
    } else {
        print_human(&r);
    }
    if h.errors > 0 {
        std::process::exit(1);
    }
}
