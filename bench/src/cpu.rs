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
