//! Shared by the RBD test binaries: one real Ceph cluster per test binary, started on first
//! use with scripts/ceph-cluster.sh and stopped (its data under /tmp removed) when the binary
//! exits; I/O helpers.
//!
//! A missing Ceph installation is a failure, not a skip: run scripts/install-deps.sh.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bdev_rbd::params::{Create, RegisterCluster};
use bdev_rbd::{RbdModule, RbdOptions, Timeouts};
use iobuf::IoBuf;
use target_core::bdev::{Bdev, BdevIo, BdevOp, BdevRegistry, IoBufs, IoChannel, IoStatus};

/// A running cluster.
pub struct TestCluster {
    /// Its directory (under /tmp).
    pub dir: String,
    /// Its ceph.conf.
    pub conf: String,
}

static CLUSTER: OnceLock<TestCluster> = OnceLock::new();
static DIR: OnceLock<String> = OnceLock::new();

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/ceph-cluster.sh")
}

extern "C" fn stop_at_exit() {
    if let Some(dir) = DIR.get() {
        let _ = Command::new(script()).arg("stop").arg(dir).status();
    }
}

/// The cluster of this test binary, started on first use (`extra`: `--cephx`, taken from the
/// first caller).
pub fn cluster_with(tag: &str, extra: &[&str]) -> &'static TestCluster {
    CLUSTER.get_or_init(|| {
        let dir = format!("/tmp/rtgt-rbd-{tag}-{}", std::process::id());
        // A second caller after a failed start tries again (and fails with the same message).
        if DIR.set(dir.clone()).is_ok() {
            // SAFETY: registers a plain extern "C" function with no arguments.
            unsafe { libc::atexit(stop_at_exit) };
        }
        let start = Instant::now();
        let out = Command::new(script())
            .arg("start")
            .arg(&dir)
            .args(extra)
            .arg("--owner-pid")
            .arg(std::process::id().to_string())
            .output()
            .expect("running scripts/ceph-cluster.sh");
        assert!(
            out.status.success(),
            "the test cluster did not start (install the packages with scripts/install-deps.sh):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let conf = String::from_utf8_lossy(&out.stdout).trim().to_string();
        eprintln!(
            "test cluster {dir} up in {:.1} s",
            start.elapsed().as_secs_f64()
        );
        TestCluster { dir, conf }
    })
}

/// The cluster of this test binary (auth off).
pub fn cluster(tag: &str) -> &'static TestCluster {
    cluster_with(tag, &[])
}

impl TestCluster {
    /// Runs `rbd` against the cluster (as client.admin) and returns its stdout.
    pub fn rbd(&self, args: &[&str]) -> String {
        self.tool("rbd", args)
    }

    /// Runs `ceph` against the cluster (as client.admin) and returns its stdout.
    pub fn ceph(&self, args: &[&str]) -> String {
        self.tool("ceph", args)
    }

    fn tool(&self, tool: &str, args: &[&str]) -> String {
        let out = Command::new(tool)
            .arg("--conf")
            .arg(&self.conf)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("running {tool}: {e}"));
        assert!(
            out.status.success(),
            "{tool} {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates image `rbd/<name>` of `mib` MiB.
    pub fn create_image(&self, name: &str, mib: u64) {
        self.rbd(&[
            "create",
            &format!("rbd/{name}"),
            "--size",
            &format!("{mib}M"),
        ]);
    }

    /// Runs scripts/ceph-cluster.sh `cmd` on this cluster.
    pub fn ctl(&self, cmd: &str) {
        let out = Command::new(script())
            .arg(cmd)
            .arg(&self.dir)
            .output()
            .expect("running scripts/ceph-cluster.sh");
        assert!(
            out.status.success(),
            "ceph-cluster.sh {cmd} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Short time limits for tests.
pub fn test_options() -> RbdOptions {
    RbdOptions {
        timeouts: Timeouts {
            connect: Duration::from_secs(5),
            osd_op: Duration::from_secs(5),
        },
    }
}

/// A module with this cluster registered as `name` (through its ceph.conf).
pub fn module_with(c: &TestCluster, name: &str) -> Arc<RbdModule> {
    module_with_osd_timeout(c, name, test_options().timeouts.osd_op)
}

/// [`module_with`], I/O failing after `osd_op` without an answer from its OSD.
pub fn module_with_osd_timeout(c: &TestCluster, name: &str, osd_op: Duration) -> Arc<RbdModule> {
    let m = RbdModule::new(RbdOptions {
        timeouts: Timeouts {
            osd_op,
            ..test_options().timeouts
        },
    });
    m.register_cluster(RegisterCluster {
        name: name.into(),
        config_file: Some(c.conf.clone()),
        ..RegisterCluster::default()
    })
    .expect("registering the test cluster");
    m
}

/// `bdev_rbd_create` parameters for `rbd/<image>` on registered cluster `cluster`.
pub fn create_params(name: &str, image: &str, cluster: &str, block_size: u32) -> Create {
    Create {
        name: Some(name.into()),
        pool_name: "rbd".into(),
        rbd_name: image.into(),
        block_size,
        cluster_name: Some(cluster.into()),
        ..Create::default()
    }
}

/// Submits `io` and polls until it completes (10 s at most per attempt... the deadline is
/// `limit`).
pub fn run_within(ch: &mut IoChannel, io: BdevIo, limit: Duration) -> Box<BdevIo> {
    let mut io = Some(Box::new(io));
    let deadline = Instant::now() + limit;
    let mut out = None;
    while out.is_none() {
        if let Some(x) = io.take()
            && let Err(back) = ch.submit(x)
        {
            io = Some(back);
        }
        ch.poll(&mut |done| out = Some(done));
        assert!(
            Instant::now() < deadline,
            "I/O did not complete in {limit:?}"
        );
        if out.is_none() {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    out.expect("completed")
}

/// [`run_within`] with 30 s.
pub fn run(ch: &mut IoChannel, io: BdevIo) -> Box<BdevIo> {
    run_within(ch, io, Duration::from_secs(30))
}

/// Buffers of these sizes.
pub fn bufs(sizes: &[usize]) -> IoBufs {
    sizes.iter().map(|&s| IoBuf::alloc(s).unwrap()).collect()
}

/// Fills buffers with a pseudo-random pattern from `seed`.
pub fn pattern(seed: u32, bufs: &mut IoBufs) {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    for b in bufs.iter_mut() {
        for byte in b.as_mut_slice() {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            *byte = (x >> 16) as u8;
        }
    }
}

/// The buffers' bytes, concatenated.
pub fn concat(bufs: &IoBufs) -> Vec<u8> {
    bufs.iter().flat_map(|b| b.as_slice().to_vec()).collect()
}

/// A write of `n` blocks at `off` from `data`.
pub fn write_io(off: u64, n: u64, data: IoBufs, fua: bool) -> BdevIo {
    let mut io = BdevIo::new(
        BdevOp::Write {
            offset_blocks: off,
            num_blocks: n,
            fua,
        },
        1,
    );
    io.bufs = data;
    io
}

/// A read of `n` blocks at `off` into buffers of `sizes`.
pub fn read_io(off: u64, n: u64, sizes: &[usize]) -> BdevIo {
    let mut io = BdevIo::new(
        BdevOp::Read {
            offset_blocks: off,
            num_blocks: n,
        },
        2,
    );
    io.bufs = bufs(sizes);
    io
}

/// Writes a pattern to `n` blocks at `off` and returns the bytes written.
pub fn write_pattern(ch: &mut IoChannel, bs: usize, off: u64, n: u64, seed: u32) -> Vec<u8> {
    let mut data = bufs(&[bs * n as usize]);
    pattern(seed, &mut data);
    let expect = concat(&data);
    let w = run(ch, write_io(off, n, data, false));
    assert_eq!(w.status, IoStatus::Success, "write at block {off}");
    expect
}

/// Reads `n` blocks at `off`.
pub fn read_bytes(ch: &mut IoChannel, bs: usize, off: u64, n: u64) -> Vec<u8> {
    let r = run(ch, read_io(off, n, &[bs * n as usize]));
    assert_eq!(r.status, IoStatus::Success, "read at block {off}");
    concat(&r.bufs)
}

/// Opens a channel on `bdev`.
pub fn channel(bdevs: &BdevRegistry, name: &str) -> IoChannel {
    let b: Arc<dyn Bdev> = bdevs.get(name).expect("bdev exists");
    bdevs.open_channel(&b).expect("channel")
}

/// Waits until `f` holds, polling every 50 ms, at most `limit`.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}
