//! RBD bdev benchmark: random 4K reads or writes at a fixed queue depth from one target-core
//! reactor, against `rbd bench` with the same parameters on the same image. Not a test: it
//! prints figures (docs/performance.md).
//!
//! ```text
//! cargo run --release -p bdev-rbd --example rbd_bench -- --start-cluster --rw randread
//! cargo run --release -p bdev-rbd --example rbd_bench -- --conf /tmp/c/ceph.conf --image bench --rw randwrite --qd 32
//! ```
//!
//! `--start-cluster` starts a throw-away cluster with scripts/ceph-cluster.sh (and stops it at
//! the end); otherwise `--conf` names a running one. The image is created (and filled, so that
//! reads reach the OSD) when missing, with the `rbd` tool; `--no-create` uses an existing image
//! and never runs `rbd` (the e2e guest has librbd but no Ceph tools).
//!
//! For the e2e scenarios (tests/e2e/scenarios/07-ceph-reach.sh, 08-ceph-cephx.sh) it is also a
//! small librbd client with a clear outcome: it prints `client_addr ADDR` (what `ceph osd
//! blocklist add` takes) first; `--verify-mib N` writes the first N MiB with a pattern unique to
//! the run, reads them back and compares; `--progress` prints a line a second; `--exit-on-error`
//! stops at the first failed I/O and says which errno and when. `--id` and `--key-file` are
//! `bdev_rbd_register_cluster`'s `user_id` and `key_file`. Exit status: 0 all I/O succeeded, 1
//! the cluster or image could not be used, an I/O failed or data did not verify, 3 stopped by
//! `--exit-on-error`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::process::Command;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bdev_rbd::params::{ClusterName, Create, Delete, RegisterCluster};
use bdev_rbd::{RbdModule, RbdOptions};
use iobuf::IoBuf;
use target_core::bdev::{BdevIo, BdevOp, BdevRegistry, IoStatus};
use target_core::reactor::{PollStatus, ReactorConfig, Reactors};

/// Counts Rust allocations made on reactor threads (librbd's own, in C++, are not counted).
struct Counting;
static REACTOR_ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to `System` unchanged; counting does not touch the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if Reactors::current().is_some() {
            REACTOR_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if Reactors::current().is_some() {
            REACTOR_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

struct Args {
    conf: Option<String>,
    start_cluster: bool,
    pool: String,
    image: String,
    size_mib: u64,
    rw: String,
    qd: usize,
    bs: usize,
    seconds: u64,
    idle_us: Option<u64>,
    skip_rbd_bench: bool,
    rounds: usize,
    config: Vec<(String, String)>,
    no_create: bool,
    id: Option<String>,
    key_file: Option<String>,
    verify_mib: u64,
    progress: bool,
    exit_on_error: bool,
}

fn parse() -> Args {
    let mut a = Args {
        conf: None,
        start_cluster: false,
        pool: "rbd".into(),
        image: "rtgt-bench".into(),
        size_mib: 1024,
        rw: "randread".into(),
        qd: 32,
        bs: 4096,
        seconds: 10,
        idle_us: Some(200),
        skip_rbd_bench: false,
        rounds: 3,
        config: Vec::new(),
        no_create: false,
        id: None,
        key_file: None,
        verify_mib: 0,
        progress: false,
        exit_on_error: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--conf" => a.conf = Some(v()),
            "--start-cluster" => a.start_cluster = true,
            "--pool" => a.pool = v(),
            "--image" => a.image = v(),
            "--size-mib" => a.size_mib = v().parse().expect("--size-mib"),
            "--rw" => a.rw = v(),
            "--qd" => a.qd = v().parse().expect("--qd"),
            "--bs" => a.bs = v().parse().expect("--bs"),
            "--seconds" => a.seconds = v().parse().expect("--seconds"),
            "--idle-us" => {
                let us: u64 = v().parse().expect("--idle-us");
                a.idle_us = (us > 0).then_some(us);
            }
            "--skip-rbd-bench" => a.skip_rbd_bench = true,
            "--rounds" => a.rounds = v().parse().expect("--rounds"),
            "--no-create" => a.no_create = true,
            "--id" => a.id = Some(v()),
            "--key-file" => a.key_file = Some(v()),
            "--verify-mib" => a.verify_mib = v().parse().expect("--verify-mib"),
            "--progress" => a.progress = true,
            "--exit-on-error" => a.exit_on_error = true,
            "--config" => {
                let kv = v();
                let (k, val) = kv.split_once('=').expect("--config key=value");
                a.config.push((k.into(), val.into()));
            }
            "-h" | "--help" => {
                println!(
                    "rbd_bench [--conf F | --start-cluster] [--pool P] [--image I] [--size-mib N] \
                     [--rw randread|randwrite] [--qd N] [--bs N] [--seconds N] [--idle-us N (0: \
                     never sleep)] [--skip-rbd-bench] [--rounds N (alternating with rbd bench; \
                     medians; 0: none)] [--config key=value (a librados option of the bdev's \
                     cluster)]... [--id USER (without client.)] [--key-file KEYRING (the \
                     cluster's key_file)] [--no-create (never run rbd)] [--verify-mib N \
                     (write, read back and compare the first N MiB first)] \
                     [--progress (a line a second)] [--exit-on-error (exit 3 at the first \
                     failed I/O)]"
                );
                std::process::exit(0);
            }
            _ => panic!("unknown argument {k}"),
        }
    }
    assert!(
        a.rw == "randread" || a.rw == "randwrite",
        "--rw randread|randwrite"
    );
    a
}

fn script() -> String {
    format!("{}/../scripts/ceph-cluster.sh", env!("CARGO_MANIFEST_DIR"))
}

fn rbd(conf: &str, args: &[&str]) -> String {
    let out = Command::new("rbd")
        .arg("--conf")
        .arg(conf)
        .args(args)
        .output()
        .expect("rbd");
    assert!(
        out.status.success(),
        "rbd {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// CPU nanoseconds of this process's threads whose name starts with `prefix`.
fn threads_cpu_ns(prefix: &str) -> u64 {
    let mut sum = 0;
    for t in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !comm.trim().starts_with(prefix) {
            continue;
        }
        let s = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
        sum += s
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
    }
    sum
}

fn process_cpu_ns() -> u64 {
    // SAFETY: getrusage writes one rusage into a live local.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

struct Shared {
    ios: AtomicU64,
    errors: AtomicU64,
    lat_ns: AtomicU64,
    /// Submit new I/Os (false: let the queue drain).
    run: AtomicBool,
    /// The queue is empty while paused.
    idle: AtomicBool,
    /// The errno of the first failed I/O (0: none yet) and when it completed
    /// (`target_core::reactor::instant_ns`).
    first_errno: AtomicI32,
    first_error_ns: AtomicU64,
}

impl Shared {
    /// Counts a completion; remembers the first failure.
    fn completed(&self, status: IoStatus, now_ns: u64, submitted_ns: u64) {
        if status != IoStatus::Success {
            self.errors.fetch_add(1, Ordering::Relaxed);
            self.first_error(status, now_ns);
        }
        self.ios.fetch_add(1, Ordering::Relaxed);
        self.lat_ns
            .fetch_add(now_ns.saturating_sub(submitted_ns), Ordering::Relaxed);
    }

    fn first_error(&self, status: IoStatus, now_ns: u64) {
        let e = match status {
            IoStatus::Error(e) => e,
            _ => libc::EIO,
        };
        if self
            .first_errno
            .compare_exchange(0, e, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            self.first_error_ns.store(now_ns, Ordering::Release);
        }
    }
}

/// Seconds since boot (/proc/uptime), the clock the e2e scenarios log with.
fn uptime() -> f64 {
    std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// The guest's uptime when the first error happened, and its errno, if one did.
fn first_error(sh: &Shared) -> Option<(i32, f64)> {
    let e = sh.first_errno.load(Ordering::Acquire);
    if e == 0 {
        return None;
    }
    let at = sh.first_error_ns.load(Ordering::Acquire);
    let ago = target_core::reactor::instant_ns(Instant::now()).saturating_sub(at);
    Some((e, uptime() - ago as f64 / 1e9))
}

/// The 8-byte word `word` of block `block` in the verify pattern of run `seed`.
fn pattern_word(seed: u64, block: u64, word: u64) -> u64 {
    (block.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed).rotate_left((word % 64) as u32) ^ word
}

fn fill_pattern(buf: &mut [u8], seed: u64, block: u64) {
    for (w, chunk) in buf.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&pattern_word(seed, block, w as u64).to_le_bytes());
    }
}

fn matches_pattern(buf: &[u8], seed: u64, block: u64) -> bool {
    buf.chunks_exact(8)
        .enumerate()
        .all(|(w, c)| c == pattern_word(seed, block, w as u64).to_le_bytes())
}

/// The verify pass: shared between its poller and main.
struct Verify {
    /// 0 writing, 1 reading, 2 done.
    phase: AtomicU8,
    mismatches: AtomicU64,
    first_mismatch: AtomicU64,
    results: Shared,
}

/// Writes blocks `0..blocks` with a pattern unique to this run, reads them back and compares,
/// `qd` at a time, on reactor 0. Returns the number of mismatched blocks, or the first I/O
/// error, or a timeout.
fn verify(
    reactors: &Reactors,
    bdevs: &Arc<BdevRegistry>,
    name: &str,
    blocks: u64,
    bs: usize,
    qd: usize,
) -> Result<u64, String> {
    let seed = (std::process::id() as u64) << 32 ^ uptime().to_bits();
    let v = Arc::new(Verify {
        phase: AtomicU8::new(0),
        mismatches: AtomicU64::new(0),
        first_mismatch: AtomicU64::new(u64::MAX),
        results: Shared {
            ios: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            lat_ns: AtomicU64::new(0),
            run: AtomicBool::new(true),
            idle: AtomicBool::new(false),
            first_errno: AtomicI32::new(0),
            first_error_ns: AtomicU64::new(0),
        },
    });
    let bdev = bdevs.get(name).ok_or("no bdev")?;
    let (reg, vv) = (Arc::clone(bdevs), Arc::clone(&v));
    reactors
        .send_ctrl(0, move |ctx| {
            let ch = Rc::new(RefCell::new(reg.open_channel(&bdev).unwrap()));
            let fd = ch.borrow().wake_fd().unwrap();
            let mut free: Vec<Box<BdevIo>> = (0..qd)
                .map(|i| {
                    let mut io = Box::new(BdevIo::new(BdevOp::Flush, i as u64));
                    io.bufs.push(IoBuf::alloc(bs).unwrap());
                    io
                })
                .collect();
            let (mut next, mut done) = (0u64, 0u64);
            let arm_ch = Rc::clone(&ch);
            ctx.poller("rbd-verify")
                .wake_fd(fd)
                .arm(move |_| arm_ch.borrow_mut().arm())
                .register(move |ctx| {
                    let now_ns = target_core::reactor::instant_ns(ctx.now());
                    let reading = vv.phase.load(Ordering::Relaxed) == 1;
                    let mut c = ch.borrow_mut();
                    let n = c.poll_at(now_ns, &mut |io| {
                        if io.status == IoStatus::Success
                            && reading
                            && !matches_pattern(io.bufs[0].as_slice(), seed, io.tag)
                        {
                            vv.mismatches.fetch_add(1, Ordering::Relaxed);
                            vv.first_mismatch.fetch_min(io.tag, Ordering::Relaxed);
                        }
                        vv.results.completed(io.status, now_ns, io.submitted_ns);
                        done += 1;
                        free.push(io);
                    });
                    if vv.phase.load(Ordering::Relaxed) == 2 {
                        return PollStatus::from_count(n);
                    }
                    while next < blocks {
                        let Some(mut io) = free.pop() else { break };
                        io.tag = next;
                        io.op = if reading {
                            BdevOp::Read {
                                offset_blocks: next,
                                num_blocks: 1,
                            }
                        } else {
                            fill_pattern(io.bufs[0].as_mut_slice(), seed, next);
                            BdevOp::Write {
                                offset_blocks: next,
                                num_blocks: 1,
                                fua: false,
                            }
                        };
                        io.status = IoStatus::Pending;
                        if let Err(back) = c.submit_at(io, now_ns) {
                            free.push(back);
                            break;
                        }
                        next += 1;
                    }
                    if done == blocks {
                        (next, done) = (0, 0);
                        vv.phase
                            .store(if reading { 2 } else { 1 }, Ordering::Release);
                    }
                    PollStatus::from_count(n)
                });
        })
        .map_err(|e| format!("reactor: {e:?}"))?;
    // librados fails an I/O after its OSD timeout (20 s by default): allow a few of them.
    let deadline = Instant::now() + Duration::from_secs(60) + Duration::from_millis(blocks);
    while v.phase.load(Ordering::Acquire) != 2 {
        if Instant::now() > deadline {
            return Err(format!(
                "the verify pass did not finish in time (phase {}, {} I/Os done)",
                v.phase.load(Ordering::Acquire),
                v.results.ios.load(Ordering::Relaxed)
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if let Some((e, at)) = first_error(&v.results) {
        return Err(format!(
            "{} of {} I/Os failed, the first with errno {e} ({}) at uptime {at:.2}",
            v.results.errors.load(Ordering::Relaxed),
            2 * blocks,
            bdev_rbd::strerror(e)
        ));
    }
    if v.mismatches.load(Ordering::Relaxed) > 0 {
        eprintln!(
            "verify: first mismatched block {}",
            v.first_mismatch.load(Ordering::Relaxed)
        );
    }
    Ok(v.mismatches.load(Ordering::Relaxed))
}

/// `rbd bench` with the benchmark's parameters; its IOPS.
fn rbd_bench(a: &Args, conf: &str, spec: &str) -> f64 {
    let io_type = if a.rw == "randread" { "read" } else { "write" };
    let total = format!("{}M", 256.min(a.size_mib));
    let out = rbd(
        conf,
        &[
            "bench",
            "--io-type",
            io_type,
            "--io-pattern",
            "rand",
            "--io-size",
            &a.bs.to_string(),
            "--io-threads",
            &a.qd.to_string(),
            "--io-total",
            &total,
            spec,
        ],
    );
    out.lines()
        .rev()
        .find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let i = w.iter().position(|x| *x == "ops/sec:")?;
            w.get(i + 1)?.parse::<f64>().ok()
        })
        .expect("rbd bench output")
}

/// Deletes the bdev, unregisters the cluster and waits (up to 10 s) until the image is closed
/// and the handle is the last reference, then disconnects: an image left open keeps its
/// exclusive lock and header watch, and the next client's first write waits ~30 s for the
/// watch to time out.
fn close_all(m: &RbdModule, bdevs: &BdevRegistry, cluster: Arc<bdev_rbd::rados::Cluster>) {
    if let Err(e) = m.delete_bdev(
        bdevs,
        Delete {
            name: "bench0".into(),
        },
    ) {
        eprintln!("deleting the bdev: {e}");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut registered = true;
    while Instant::now() < deadline {
        if registered {
            registered = m
                .unregister_cluster(ClusterName {
                    name: "bench".into(),
                })
                .is_err();
        }
        if !registered && Arc::strong_count(&cluster) == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(cluster);
}

/// Exits with status 1 and a message (the cluster could not be used).
fn die(msg: &str) -> ! {
    println!("{msg}");
    std::process::exit(1);
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let a = parse();
    let dir = format!("/tmp/rtgt-rbd-bench-{}", std::process::id());
    let conf = if a.start_cluster {
        let out = Command::new(script())
            .args([
                "start",
                &dir,
                "--owner-pid",
                &std::process::id().to_string(),
            ])
            .output()
            .expect("ceph-cluster.sh");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    } else {
        a.conf.clone().expect("--conf or --start-cluster")
    };
    let spec = format!("{}/{}", a.pool, a.image);
    if !a.no_create && !rbd(&conf, &["ls", &a.pool]).lines().any(|l| l == a.image) {
        rbd(
            &conf,
            &["create", &spec, "--size", &format!("{}M", a.size_mib)],
        );
        eprintln!("filling {spec} ({} MiB)", a.size_mib);
        rbd(
            &conf,
            &[
                "bench",
                "--io-type",
                "write",
                "--io-pattern",
                "seq",
                "--io-size",
                "4M",
                "--io-threads",
                "4",
                "--io-total",
                &format!("{}M", a.size_mib),
                &spec,
            ],
        );
    }

    // The bdev, driven from one reactor.
    let m = RbdModule::new(RbdOptions::default());
    m.register_cluster(RegisterCluster {
        name: "bench".into(),
        config_file: Some(conf.clone()),
        config_param: (!a.config.is_empty()).then(|| bdev_rbd::ConfMap(a.config.clone())),
        user_id: a.id.clone(),
        key_file: a.key_file.clone(),
        ..RegisterCluster::default()
    })
    .unwrap_or_else(|e| die(&format!("bdev_rbd_register_cluster: {e}")));
    let cluster = Arc::clone(m.cluster("bench").expect("registered").cluster());
    println!(
        "client_addr {} instance {}",
        cluster.addrs().unwrap_or_else(|e| format!("? ({e})")),
        cluster.instance_id()
    );
    let bdevs = BdevRegistry::new();
    m.create_bdev(
        &bdevs,
        Create {
            name: Some("bench0".into()),
            pool_name: a.pool.clone(),
            rbd_name: a.image.clone(),
            block_size: a.bs as u32,
            cluster_name: Some("bench".into()),
            ..Create::default()
        },
    )
    .unwrap_or_else(|e| die(&format!("bdev_rbd_create: {e}")));
    let mut cfg = ReactorConfig::with_count(1);
    cfg.idle_sleep_after = a.idle_us.map(Duration::from_micros);
    let reactors = Reactors::start(cfg).expect("reactor");
    let shared = Arc::new(Shared {
        ios: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        lat_ns: AtomicU64::new(0),
        run: AtomicBool::new(false),
        idle: AtomicBool::new(true),
        first_errno: AtomicI32::new(0),
        first_error_ns: AtomicU64::new(0),
    });
    if a.verify_mib > 0 {
        let blocks = a.verify_mib * (1 << 20) / a.bs as u64;
        match verify(&reactors, &bdevs, "bench0", blocks, a.bs, a.qd) {
            Ok(0) => println!(
                "verify: {blocks} blocks of {} bytes written, read back and compared: ok",
                a.bs
            ),
            Ok(bad) => {
                println!("verify: {bad} of {blocks} blocks read back differ");
                std::process::exit(1);
            }
            Err(e) => {
                println!("verify: {e}");
                std::process::exit(1);
            }
        }
    }
    let bdev = bdevs.get("bench0").unwrap();
    let blocks = bdev.num_blocks();
    let (reg, sh, qd, bs, write) = (
        Arc::clone(&bdevs),
        Arc::clone(&shared),
        a.qd,
        a.bs,
        a.rw == "randwrite",
    );
    reactors
        .send_ctrl(0, move |ctx| {
            let ch = Rc::new(RefCell::new(reg.open_channel(&bdev).unwrap()));
            let fd = ch.borrow().wake_fd().unwrap();
            // Preallocated I/Os, reused: the reactor allocates nothing per I/O.
            let free: Rc<RefCell<Vec<Box<BdevIo>>>> = Rc::new(RefCell::new(
                (0..qd)
                    .map(|i| {
                        let mut io = Box::new(BdevIo::new(BdevOp::Flush, i as u64));
                        io.bufs.push(IoBuf::alloc(bs).unwrap());
                        io
                    })
                    .collect(),
            ));
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            let arm_ch = Rc::clone(&ch);
            ctx.poller("rbd-bench")
                .wake_fd(fd)
                .arm(move |_| arm_ch.borrow_mut().arm())
                .register(move |ctx| {
                    let now_ns = target_core::reactor::instant_ns(ctx.now());
                    let mut c = ch.borrow_mut();
                    let n = c.poll_at(now_ns, &mut |io| {
                        sh.completed(io.status, now_ns, io.submitted_ns);
                        free.borrow_mut().push(io);
                    });
                    if !sh.run.load(Ordering::Relaxed) {
                        sh.idle.store(c.outstanding() == 0, Ordering::Relaxed);
                        return PollStatus::from_count(n);
                    }
                    sh.idle.store(false, Ordering::Relaxed);
                    while let Some(mut io) = free.borrow_mut().pop() {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let off = x % blocks;
                        io.op = if write {
                            BdevOp::Write {
                                offset_blocks: off,
                                num_blocks: 1,
                                fua: false,
                            }
                        } else {
                            BdevOp::Read {
                                offset_blocks: off,
                                num_blocks: 1,
                            }
                        };
                        io.status = IoStatus::Pending;
                        if let Err(back) = c.submit_at(io, now_ns) {
                            free.borrow_mut().push(back);
                            break;
                        }
                    }
                    PollStatus::from_count(n)
                });
        })
        .unwrap();
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for round in 0..a.rounds {
        // rbd bench alone...
        shared.run.store(false, Ordering::Relaxed);
        while !shared.idle.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if !a.skip_rbd_bench {
            let r = rbd_bench(&a, &conf, &spec);
            println!(
                "round {round}: rbd bench  {} bs={} qd={}: {r:.0} IOPS",
                a.rw, a.bs, a.qd
            );
            theirs.push(r);
        }
        // ...then the bdev alone: warm up, measure.
        shared.run.store(true, Ordering::Relaxed);
        // A message wakes the reactor if it sleeps with nothing in flight.
        reactors.send_ctrl(0, |_| {}).unwrap();
        std::thread::sleep(Duration::from_secs(1));
        let (ios0, lat0, err0) = (
            shared.ios.load(Ordering::Relaxed),
            shared.lat_ns.load(Ordering::Relaxed),
            shared.errors.load(Ordering::Relaxed),
        );
        let (allocs0, reactor0, proc0, msgr0) = (
            REACTOR_ALLOCS.load(Ordering::Relaxed),
            threads_cpu_ns("reactor"),
            process_cpu_ns(),
            threads_cpu_ns("msgr-worker"),
        );
        let t0 = Instant::now();
        let mut tick = t0;
        while t0.elapsed() < Duration::from_secs(a.seconds) {
            std::thread::sleep(Duration::from_millis(20));
            if a.exit_on_error
                && let Some((e, at)) = first_error(&shared)
            {
                println!(
                    "first I/O error: errno {e} ({}) at uptime {at:.2}, after {} I/Os",
                    bdev_rbd::strerror(e),
                    shared.ios.load(Ordering::Relaxed)
                );
                std::process::exit(3);
            }
            if a.progress && tick.elapsed() >= Duration::from_secs(1) {
                tick += Duration::from_secs(1);
                println!(
                    "progress uptime {:.2} ios {} errors {} first_errno {}",
                    uptime(),
                    shared.ios.load(Ordering::Relaxed),
                    shared.errors.load(Ordering::Relaxed),
                    shared.first_errno.load(Ordering::Relaxed)
                );
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let ios = shared.ios.load(Ordering::Relaxed) - ios0;
        let lat = shared.lat_ns.load(Ordering::Relaxed) - lat0;
        let errors = shared.errors.load(Ordering::Relaxed) - err0;
        let allocs = REACTOR_ALLOCS.load(Ordering::Relaxed) - allocs0;
        let reactor_ns = threads_cpu_ns("reactor") - reactor0;
        let proc_ns = process_cpu_ns() - proc0;
        let msgr_ns = threads_cpu_ns("msgr-worker") - msgr0;
        let iops = ios as f64 / secs;
        let per = |ns: u64| ns as f64 / ios.max(1) as f64 / 1000.0;
        println!(
            "round {round}: rtgt bdev  {} bs={} qd={}: {iops:.0} IOPS, mean latency {:.0} us, \
             errors {errors}, reactor CPU {:.1} us/IO ({:.0}% of a core), process CPU {:.1} us/IO \
             (librados messengers {:.1}), reactor allocations {:.2}/IO",
            a.rw,
            a.bs,
            a.qd,
            lat as f64 / ios.max(1) as f64 / 1000.0,
            per(reactor_ns),
            reactor_ns as f64 / secs / 1e7,
            per(proc_ns),
            per(msgr_ns),
            allocs as f64 / ios.max(1) as f64,
        );
        ours.push(iops);
    }
    shared.run.store(false, Ordering::Relaxed);
    while !shared.idle.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
    if !ours.is_empty() {
        let mo = median(ours);
        print!(
            "median of {} rounds: rtgt bdev {mo:.0} IOPS (reactor idle sleep after {:?} us)",
            a.rounds, a.idle_us
        );
        if !theirs.is_empty() {
            let mt = median(theirs);
            print!(", rbd bench {mt:.0} IOPS, ratio {:.2}", mo / mt);
        }
        println!();
    }
    reactors.stop();
    close_all(&m, &bdevs, cluster);
    if a.start_cluster {
        let _ = Command::new(script()).args(["stop", &dir]).status();
    }
    let errors = shared.errors.load(Ordering::Relaxed);
    if let Some((e, at)) = first_error(&shared) {
        println!(
            "{errors} I/Os failed, the first with errno {e} ({}) at uptime {at:.2}",
            bdev_rbd::strerror(e)
        );
        std::process::exit(1);
    }
}
