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
//! reads reach the OSD) when missing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::process::Command;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bdev_rbd::params::{Create, RegisterCluster};
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
                     medians)] [--config key=value (a librados option of the bdev's cluster)]..."
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
    if !rbd(&conf, &["ls", &a.pool]).lines().any(|l| l == a.image) {
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
        ..RegisterCluster::default()
    })
    .expect("register");
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
    .expect("create");
    let mut cfg = ReactorConfig::with_count(1);
    cfg.idle_sleep_after = a.idle_us.map(Duration::from_micros);
    let reactors = Reactors::start(cfg).expect("reactor");
    let shared = Arc::new(Shared {
        ios: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        lat_ns: AtomicU64::new(0),
        run: AtomicBool::new(false),
        idle: AtomicBool::new(true),
    });
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
                        if io.status != IoStatus::Success {
                            sh.errors.fetch_add(1, Ordering::Relaxed);
                        }
                        sh.ios.fetch_add(1, Ordering::Relaxed);
                        sh.lat_ns
                            .fetch_add(now_ns.saturating_sub(io.submitted_ns), Ordering::Relaxed);
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
        std::thread::sleep(Duration::from_secs(a.seconds));
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
    reactors.stop();
    if a.start_cluster {
        let _ = Command::new(script()).args(["stop", &dir]).status();
    }
}
