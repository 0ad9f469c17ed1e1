//! CPU time of threads of this process, from `/proc/self/task/<tid>/schedstat` (nanoseconds
//! on a CPU), found by thread name.

use std::path::PathBuf;

/// The threads whose name starts with a prefix, found once.
pub struct Threads(Vec<PathBuf>);

impl Threads {
    /// Every thread of this process whose name starts with `prefix`.
    pub fn named(prefix: &str) -> Self {
        let mut v = Vec::new();
        if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
            for t in dir.flatten() {
                let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                if comm.trim().starts_with(prefix) {
                    v.push(t.path().join("schedstat"));
                }
            }
        }
        v.sort();
        Self(v)
    }

    /// How many threads.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Their summed CPU time in ns.
    pub fn cpu_ns(&self) -> u64 {
        self.0
            .iter()
            .filter_map(|p| {
                std::fs::read_to_string(p)
                    .ok()?
                    .split_whitespace()
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum()
    }
}

/// CPU time of every thread of this process, summed by thread name with trailing digits,
/// `_` and `-` trimmed (`reactor_0` → `reactor`, `msgr-worker-1` → `msgr-worker`): which
/// threads (the reactors, the initiator, the fabric simulation, librbd's and librados' threads)
/// took the process's CPU.
pub fn by_thread_group() -> std::collections::BTreeMap<String, u64> {
    let mut m = std::collections::BTreeMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for t in dir.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            let group = group_of(&comm);
            let ns = std::fs::read_to_string(t.path().join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0);
            *m.entry(group).or_insert(0) += ns;
        }
    }
    m
}

/// Context switches of every thread of this process, summed by thread name group as in
/// [`by_thread_group`]: (voluntary, involuntary) from `/proc/self/task/*/status`. A thread that
/// sleeps and is woken once per I/O has one voluntary switch per I/O; involuntary ones are
/// preemptions (another thread on its CPU woke up or its time slice ended).
pub fn switches_by_thread_group() -> std::collections::BTreeMap<String, (u64, u64)> {
    let mut m = std::collections::BTreeMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for t in dir.flatten() {
            let Ok(status) = std::fs::read_to_string(t.path().join("status")) else {
                continue;
            };
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            let e = m.entry(group_of(&comm)).or_insert((0, 0));
            e.0 += field("voluntary_ctxt_switches:");
            e.1 += field("nonvoluntary_ctxt_switches:");
        }
    }
    m
}

/// A thread's name group: trailing digits, `_` and `-` trimmed.
fn group_of(comm: &str) -> String {
    comm.trim()
        .trim_end_matches(|c: char| c.is_ascii_digit() || c == '_' || c == '-')
        .to_string()
}

/// CPU time of the calling thread in ns.
pub fn this_thread_ns() -> u64 {
    target_core::reactor::sys::thread_cpu_time().as_nanos() as u64
}

/// CPU time of the whole process (all threads) in ns.
pub fn process_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec for the kernel to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
