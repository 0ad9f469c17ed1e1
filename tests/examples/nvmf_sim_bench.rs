//! A benchmark, not a test: NVMe/RDMA I/O through the whole target on the simulated fabric —
//! the Rust test host on one thread, one reactor running the RDMA poll group, a null bdev —
//! reporting IOPS, heap allocations per I/O (counted by a global allocator over the measured
//! window; the host loop itself allocates nothing) and the reactor's busy CPU time per I/O
//! (the target's cost; the IOPS also include the test host, which shares the machine).
//!
//! ```text
//! cargo run --release -p rtgt-tests --example nvmf_sim_bench -- [SECONDS] [QD] [BS] [KIND]
//! ```
//!
//! The simulated fabric copies bytes at post time on the posting thread, so the figures are an
//! upper bound for the software path (no NIC, no wire), useful to compare changes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rtgt_tests::nvme_host::*;
use serde_json::json;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const NQN: &str = "nqn.2016-06.io.rtgt:bench";

#[derive(Clone, Copy, Debug)]
enum Kind {
    Read,
    WriteInCapsule,
    WriteKeyed,
}

/// IOPS, allocations per I/O, and the reactor's busy CPU time per I/O in ns.
fn run(
    q: &mut HostQueue,
    reactor: &target_core::reactor::ReactorStats,
    kind: Kind,
    qd: usize,
    bs: usize,
    secs: f64,
) -> (f64, f64, f64) {
    let data = vec![0x5Au8; bs];
    let blocks = (bs / 4096).max(1) as u32;
    let mut cids = vec![0u16; qd];
    let mut lba = 0u64;
    let submit = |q: &mut HostQueue, lba: u64| -> u16 {
        let r = match kind {
            Kind::Read => q.submit(
                read_sqe(1, lba, blocks),
                Data::KeyedRead {
                    len: bs as u32,
                    invalidate: true,
                },
            ),
            Kind::WriteInCapsule => q.submit(write_sqe(1, lba, blocks), Data::InCapsule(&data)),
            Kind::WriteKeyed => q.submit(
                write_sqe(1, lba, blocks),
                Data::KeyedWrite {
                    bytes: &data,
                    invalidate: true,
                },
            ),
        };
        r.expect("submit")
    };
    for c in cids.iter_mut() {
        *c = submit(q, lba);
        lba = (lba + u64::from(blocks)) % 1_000_000;
    }
    let mut ops = 0u64;
    let warm = Instant::now() + Duration::from_millis(500);
    let mut start: Option<(Instant, u64, u64, u64)> = None;
    let busy = || reactor_cpu_ns().unwrap_or_else(|| reactor.busy_ns.load(Ordering::Relaxed));
    loop {
        let now = Instant::now();
        if start.is_none() && now >= warm {
            start = Some((now, ops, ALLOCS.load(Ordering::Relaxed), busy()));
        }
        if let Some((t0, o0, a0, b0)) = start
            && now.duration_since(t0).as_secs_f64() >= secs
        {
            let n = (ops - o0) as f64;
            let allocs = (ALLOCS.load(Ordering::Relaxed) - a0) as f64;
            let cpu = (busy() - b0) as f64;
            let dt = now.duration_since(t0).as_secs_f64();
            // Drain what is outstanding.
            for c in &cids {
                while q.take_cqe(*c).is_none() {
                    q.poll().expect("poll");
                }
            }
            return (n / dt, allocs / n, cpu / n);
        }
        if q.poll().expect("poll") == 0 {
            std::hint::spin_loop();
            continue;
        }
        for c in cids.iter_mut() {
            if let Some(cqe) = q.take_cqe(*c) {
                assert!(cqe.status.is_success(), "{cqe:?}");
                ops += 1;
                *c = submit(q, lba);
                lba = (lba + u64::from(blocks)) % 1_000_000;
            }
        }
    }
}

/// CPU time the reactor thread has run, in ns (from /proc schedstat), if readable.
fn reactor_cpu_ns() -> Option<u64> {
    for t in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
        if comm.trim() == "reactor_0" {
            let st = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
            return st.split_whitespace().next()?.parse().ok();
        }
    }
    None
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let qd: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(128);
    let bs: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(4096);
    let only: Option<&str> = args.get(4).map(String::as_str);
    let e = NvmfEnv::new(1, json!({}));
    e.t.null("null0", 1 << 21, 4096);
    e.t.subsystem(NQN, true);
    e.t.add_ns(NQN, "null0");
    e.t.listen(NQN, "RDMA", 4420);
    let mut o = e.opts(NQN);
    o.io_queues = 1;
    o.io_depth = qd.max(2) as u16;
    o.max_io = bs;
    let mut c = e.connect(o).expect("connect");
    println!("one reactor, null bdev (4 KiB blocks), one queue, QD {qd}, {bs} B");
    for kind in [Kind::Read, Kind::WriteInCapsule, Kind::WriteKeyed] {
        if matches!(kind, Kind::WriteInCapsule) && bs > c.in_capsule {
            continue;
        }
        if only.is_some_and(|o| !format!("{kind:?}").eq_ignore_ascii_case(o)) {
            continue;
        }
        let stats = e.t.target.reactors().stats(0).expect("reactor 0");
        let (iops, allocs, ns) = run(&mut c.io[0], stats, kind, qd, bs, secs);
        println!(
            "{:<16} {iops:>9.0} IOPS  {allocs:.3} allocations/I/O  {ns:>6.0} ns reactor CPU/I/O",
            format!("{kind:?}")
        );
    }
    c.shutdown().expect("shutdown");
}
