//! Helpers of the fault-injection and soak tests: resource baselines that must come back after
//! a fault, witness hosts that keep doing verified I/O on another subsystem while a fault
//! hits someone else, a ledger proving that each armed fault fired, and the process's
//! resident memory and open file descriptors.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabric::{FaultCounts, SimNetwork};
use target_core::bdev::{Bdev, MallocBdev, MallocParams};
use transport_rdma::PgResources;

use crate::gate::{Gate, GateBdev};
use crate::nvme_host::{HostCtrl, HostQueue, Mode, NvmfEnv, Workload, write_read_verify};
use crate::srp_initiator::{self, SrpFixture, SrpInitiator};

/// Proves that the faults a test arms on a simulated network fire: after each step,
/// [`FaultLedger::expect`] checks what the network applied since the previous check and that
/// no armed fault is left waiting. (A fault test whose fault never fires passes for the wrong
/// reason: the "lost completion" it exercises was never lost.)
pub struct FaultLedger {
    net: SimNetwork,
    start: FaultCounts,
    last: FaultCounts,
}

impl FaultLedger {
    /// Starts counting on `net` (faults applied before are not this ledger's).
    pub fn new(net: &SimNetwork) -> Self {
        let now = net.faults().fired();
        Self {
            net: net.clone(),
            start: now,
            last: now,
        }
    }

    /// Waits (at most 5 s, as faults may fire asynchronously) until exactly `want` faults
    /// were applied since the previous check and none is left armed; panics naming `what`
    /// otherwise.
    pub fn expect(&mut self, want: FaultCounts, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let now = self.net.faults().fired();
            let got = now.since(&self.last);
            let pending = self.net.faults().pending();
            if got == want && pending == 0 {
                self.last = now;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: faults applied {got:?}, expected {want:?}; {pending} armed fault(s) never fired"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Everything applied since the ledger started.
    pub fn total(&self) -> FaultCounts {
        self.net.faults().fired().since(&self.start)
    }
}

/// `n` completions lost.
pub fn dropped(n: u64) -> FaultCounts {
    FaultCounts {
        completions_dropped: n,
        ..FaultCounts::default()
    }
}

/// `n` completions delayed.
pub fn delayed(n: u64) -> FaultCounts {
    FaultCounts {
        completions_delayed: n,
        ..FaultCounts::default()
    }
}

/// `n` memory registrations failed.
pub fn registrations_failed(n: u64) -> FaultCounts {
    FaultCounts {
        registrations_failed: n,
        ..FaultCounts::default()
    }
}

/// `n` queue pairs forced into the error state.
pub fn qp_errors(n: u64) -> FaultCounts {
    FaultCounts {
        qp_errors_forced: n,
        ..FaultCounts::default()
    }
}

/// What must be back after a fault: per poll group the RDMA transport's resources and the
/// core's connection and I/O counters, and the buffer pools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmfSnapshot {
    /// Per poll group: queue pairs, busy requests, receive slots not posted to the adapter.
    /// (Slot totals are left out: a poll group sets up a device's shared receive queue and
    /// its requests on its first connection and keeps them; the buffer caches too: buffers
    /// move between pool and cache.)
    pub pgs: Vec<(usize, usize, usize)>,
    /// Small and large buffers: free + cached, and the totals.
    pub bufs: (usize, usize, usize, usize),
    /// Per poll group: current admin, I/O and unassociated queue pairs, pending bdev I/O.
    pub counters: Vec<(u64, u64, u64, u64)>,
}

/// Takes an [`NvmfSnapshot`].
pub fn nvmf_snapshot(e: &NvmfEnv) -> NvmfSnapshot {
    let pgs: Vec<PgResources> = e.pg_resources();
    let p = e.pools();
    let cached_small: usize = pgs.iter().map(|r| r.cached_small).sum();
    let cached_large: usize = pgs.iter().map(|r| r.cached_large).sum();
    let stats = e.t.rt.block_on(e.t.target.stats());
    let counters = stats["poll_groups"]
        .as_array()
        .expect("poll groups")
        .iter()
        .map(|g| {
            let n = |k: &str| g[k].as_u64().unwrap_or(u64::MAX);
            (
                n("current_admin_qpairs"),
                n("current_io_qpairs"),
                n("current_unassociated_qpairs"),
                n("pending_bdev_io"),
            )
        })
        .collect();
    NvmfSnapshot {
        pgs: pgs
            .iter()
            .map(|r| (r.qpairs, r.requests_busy, r.receives - r.receives_posted))
            .collect(),
        bufs: (
            p.small_free + cached_small,
            p.small_total,
            p.large_free + cached_large,
            p.large_total,
        ),
        counters,
    }
}

/// Waits until the target's resources are back at `base` (or fails the test with both).
pub fn nvmf_wait_back(e: &NvmfEnv, base: &NvmfSnapshot, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    loop {
        let now = nvmf_snapshot(e);
        if now == *base {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: resources not back at their start values\n start {base:?}\n   now {now:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// No completion arrived for a command that was not outstanding (a request completed twice,
/// or with a wrong CID), on any queue of `c`.
pub fn assert_no_stray(c: &HostCtrl, what: &str) {
    for q in std::iter::once(&c.admin).chain(c.io.iter()) {
        assert!(
            q.stray.is_empty(),
            "{what}: completions for no outstanding command on queue {}: {:?}",
            q.qid(),
            q.stray
        );
    }
}

/// A host on its own subsystem that writes a fresh pattern and reads it back on every
/// [`NvmfWitness::verify`]: the target keeps serving other hosts, and nothing a fault did
/// elsewhere touched this host's data.
pub struct NvmfWitness {
    /// The witness's controller.
    pub ctrl: HostCtrl,
    round: u32,
}

/// The witness's subsystem.
pub const WITNESS_NQN: &str = "nqn.2016-06.io.rtgt:witness";
/// The witness's host NQN.
pub const WITNESS_HOSTNQN: &str =
    "nqn.2014-08.org.nvmexpress:uuid:99999999-8888-7777-6666-555555555555";

impl NvmfWitness {
    /// Creates the witness's subsystem (a 1 MiB malloc namespace) and connects it.
    pub fn new(e: &NvmfEnv) -> Self {
        e.subsystem(WITNESS_NQN, true, 2048, 512);
        let mut o = e.opts(WITNESS_NQN);
        o.hostnqn = WITNESS_HOSTNQN.into();
        o.io_queues = 1;
        o.io_depth = 16;
        let ctrl = e.connect(o).expect("the witness connects");
        let mut w = Self { ctrl, round: 0 };
        w.verify();
        w
    }

    /// Writes a new pattern over its namespace and reads it back (all three data paths in
    /// turn); fails the test on any error or mismatch.
    pub fn verify(&mut self) {
        self.round += 1;
        let mode = [Mode::InCapsule, Mode::Keyed, Mode::KeyedInvalidate][self.round as usize % 3];
        let w = Workload {
            nsid: 1,
            bs: 512,
            lba0: 0,
            blocks: 8,
            count: 32,
            qd: 8,
            seed: 0x5000 + self.round,
        };
        write_read_verify(&mut self.ctrl.io[0], &w, mode)
            .unwrap_or_else(|e| panic!("witness round {}: {e}", self.round));
        assert_no_stray(&self.ctrl, "witness");
    }
}

/// A malloc bdev behind a gate, registered on `e`'s target as `name`.
pub fn gated_bdev(e: &NvmfEnv, name: &str, blocks: u64, bs: u32) -> Arc<Gate> {
    let inner: Arc<dyn Bdev> = MallocBdev::create(MallocParams {
        name: format!("{name}_inner"),
        num_blocks: blocks,
        block_size: bs,
        physical_block_size: 0,
        uuid: None,
        optimal_io_boundary: 0,
    })
    .expect("malloc");
    let (b, gate) = GateBdev::new(name, inner);
    e.t.target.bdevs().register(b).expect("register");
    gate
}

/// Polls `q` until every CID in `cids` completed (any status) or the queue is gone.
pub fn drain(q: &mut HostQueue, cids: &[u16], within: Duration) {
    let deadline = Instant::now() + within;
    for &cid in cids {
        while !q.is_done(cid) && !q.is_disconnected() {
            if q.poll().is_err() {
                return;
            }
            assert!(Instant::now() < deadline, "CID {cid:#x} never completed");
            std::thread::sleep(Duration::from_micros(200));
        }
        let _ = q.take(cid);
    }
}

// ---------------------------------------------------------------------------------------- SRP

/// The SRP counters that must come back: channels and sessions on the transport, and per poll
/// group connections, bdev I/O, waiting requests, free data buffers and posted SRQ receives.
pub fn srp_snapshot(fx: &SrpFixture) -> serde_json::Value {
    let s = fx.stats();
    let pgs: Vec<serde_json::Value> = s["poll_groups"]
        .as_array()
        .expect("poll groups")
        .iter()
        .map(|pg| {
            let srp: Vec<serde_json::Value> = pg["transports"]
                .as_array()
                .expect("transports")
                .iter()
                .filter(|t| t["trtype"] == "SRP")
                .map(|t| {
                    serde_json::json!({
                        "channels": t["channels"],
                        "waiting_for_buffers": t["waiting_for_buffers"],
                        "devices": t["devices"].as_array().map(|ds| ds.iter().map(|d| serde_json::json!({
                            "free_data_buffers": d["free_data_buffers"],
                            "srq_posted": d["srq_posted"],
                        })).collect::<Vec<_>>()),
                    })
                })
                .collect();
            serde_json::json!({
                "current_io_qpairs": pg["current_io_qpairs"],
                "current_unassociated_qpairs": pg["current_unassociated_qpairs"],
                "pending_bdev_io": pg["pending_bdev_io"],
                "srp": srp,
            })
        })
        .collect();
    let t = fx.t.target.transport("SRP").expect("SRP").1.stats();
    serde_json::json!({
        "channels": t["channels"],
        "sessions": t["sessions"],
        "poll_groups": pgs,
    })
}

/// Waits until the SRP counters are back at `base`.
pub fn srp_wait_back(fx: &SrpFixture, base: &serde_json::Value, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    loop {
        let now = srp_snapshot(fx);
        if now == *base {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: SRP resources not back at their start values\n start {base}\n   now {now}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An SRP initiator logged in to a second subsystem (another target port) of `fx`'s target,
/// verifying its own data on every [`SrpWitness::verify`].
pub struct SrpWitness {
    /// The witness initiator.
    pub ini: SrpInitiator,
    round: u64,
}

/// The witness's SRP subsystem.
pub const SRP_WITNESS_NQN: &str = "nqn.2016-06.io.rtgt:srpwitness";
const SRP_WITNESS_GUID: u64 = 0x0002_c903_00ff_0001;

impl SrpWitness {
    /// Creates the witness's subsystem on the fixture's listener address and logs in.
    pub fn new(fx: &SrpFixture) -> Self {
        let mut p = target_core::target::SubsystemParams::new(SRP_WITNESS_NQN);
        p.allow_any_host = true;
        transport_srp::port_id::set_target_port_id(
            &mut p.transport_attrs,
            (SRP_WITNESS_GUID, SRP_WITNESS_GUID),
        );
        fx.t.rt
            .block_on(fx.t.target.create_subsystem(p))
            .expect("witness subsystem");
        fx.t.malloc("SrpWitness0", 2048, srp_initiator::BS);
        fx.t.add_ns(SRP_WITNESS_NQN, "SrpWitness0");
        let addr = target_core::target::ListenAddr::new(
            "SRP",
            target_core::target::AdrFam::Ipv4,
            crate::TARGET_IP,
            &fx.addr.port().to_string(),
        );
        fx.t.rt
            .block_on(fx.t.target.add_listener(SRP_WITNESS_NQN, addr))
            .expect("witness listener");
        let mut lp = fx.params(0x7777);
        lp.target = transport_srp::proto::PortId::from_halves(SRP_WITNESS_GUID, SRP_WITNESS_GUID);
        let ini = fx.login_with(&lp).expect("the witness logs in");
        let mut w = Self { ini, round: 0 };
        w.verify();
        w
    }

    /// Writes a fresh pattern (direct, indirect and immediate descriptors in turn) and reads it
    /// back into poisoned memory.
    pub fn verify(&mut self) {
        use srp_initiator::{BS, Layout};
        self.round += 1;
        let mut layout =
            [Layout::Direct, Layout::Indirect, Layout::Immediate][self.round as usize % 3];
        if layout == Layout::Immediate && !self.ini.immediate() {
            // Declined at login (a shared receive queue): direct descriptors instead.
            layout = Layout::Direct;
        }
        for k in 0..4u32 {
            let d = srp_initiator::pattern(self.round * 16 + u64::from(k), 4096);
            let r = self
                .ini
                .write(0, k * 8, BS, 0, &d, layout)
                .unwrap_or_else(|e| panic!("witness write: {e}"));
            assert_eq!(r.status, 0, "witness write: {r:?}");
            self.ini.mem()[1 << 20..(1 << 20) + 4096].fill(0xE5);
            let (r, back) = self
                .ini
                .read(0, k * 8, BS, 8, 1 << 20, Layout::Direct)
                .unwrap_or_else(|e| panic!("witness read: {e}"));
            assert_eq!(r.status, 0, "witness read: {r:?}");
            assert!(back == d, "witness round {}: data mismatch", self.round);
        }
        assert_eq!(self.ini.outstanding(), 0, "witness: responses missing");
    }
}

// ------------------------------------------------------------------------------- the process

/// Resident set size of this process in KiB (`VmRSS` of /proc/self/status).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Open file descriptors of this process (entries of /proc/self/fd).
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Bytes the allocator has handed out and not got back (glibc `mallinfo2`: in-use heap
/// chunks of every arena plus mmapped chunks), in KiB: the live heap, free of the allocator's
/// caching that RSS also shows. Chunks freed into a thread's cache (tcache) count as in use:
/// run under [`NO_TCACHE`] ([`soak_process`]) for the exact figure.
pub fn heap_in_use_kib() -> u64 {
    // SAFETY: mallinfo2 only reads the allocator's statistics into the returned struct.
    let m = unsafe { libc::mallinfo2() };
    ((m.uordblks + m.hblkhd) / 1024) as u64
}

/// The glibc tunable the soaks run under: no per-thread caches of freed chunks. Each thread's
/// cache keeps up to 7 freed chunks of every size class up to 1 KiB, which `mallinfo2` counts
/// as in use; as the threads meet more size classes the caches fill, and the live heap of a
/// soak rose by 35-65 KiB over 1,000 cycles without anything live behind it, as much as a
/// 60-byte-per-cycle leak. Without them the live heap of a soak without leaks stays within
/// 2 KiB.
pub const NO_TCACHE: &str = "glibc.malloc.tcache_count=0";

/// Set in the child process [`soak_process`] starts.
const SOAK_CHILD: &str = "RTGT_SOAK_CHILD";

/// Runs a soak in a process of its own with glibc's per-thread caches off ([`NO_TCACHE`]: the
/// tunables are read at startup, so it takes a new process). In the test process, runs this
/// test binary again for the `#[test]` `name` alone with the tunable set, prints the child's
/// output, fails if the child failed, and returns `false` (the soak has run); in the child,
/// returns `true` (run the soak here). A soak process also starts from a fresh heap rather than
/// the previous soak's leftovers.
pub fn soak_process(name: &str) -> bool {
    if std::env::var_os(SOAK_CHILD).is_some() {
        return true;
    }
    let tunables = match std::env::var("GLIBC_TUNABLES") {
        Ok(t) if !t.is_empty() => format!("{t}:{NO_TCACHE}"),
        _ => NO_TCACHE.to_string(),
    };
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GLIBC_TUNABLES", tunables)
        .env(SOAK_CHILD, "1")
        .output()
        .expect("start the soak process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ok = out.status.success() && stdout.contains("test result: ok. 1 passed");
    if ok {
        // The soak's own lines, without the child's test-harness lines.
        let prefix = format!("test {name} ... ");
        for line in stdout.lines() {
            let line = line.strip_prefix(prefix.as_str()).unwrap_or(line);
            let harness = line.is_empty()
                || line == "ok"
                || line.starts_with("running ")
                || line.starts_with("test result: ");
            if !harness {
                println!("{line}");
            }
        }
    } else {
        print!("{stdout}");
    }
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        ok,
        "soak process for {name}: {} (its output is above)",
        out.status
    );
    false
}

/// One sample: cycle, VmRSS (KiB), open fds, live heap (KiB).
type Sample = (usize, u64, usize, u64);

/// What a soak must keep stable, and from when ([`Soak::assert_stable`]). Cycles count from 1:
/// "cycle 500" is the sample taken when 500 cycles are done.
#[derive(Debug, Clone, Copy)]
pub struct Stability {
    /// Cycles before open fds and VmRSS are compared (allocator arenas, slab and map
    /// capacities, the poll groups' device resources settle).
    pub warmup: usize,
    /// The cycle from which the live heap is compared.
    pub heap_from: usize,
    /// How far the live heap may rise above its value at `heap_from`, in KiB.
    pub heap_slack_kib: u64,
    /// How far VmRSS may rise above its value after the warm-up, in KiB.
    pub rss_slack_kib: u64,
}

/// Samples of RSS, open fds and the live heap over a soak, and the stability verdict.
#[derive(Debug, Default)]
pub struct Soak {
    name: &'static str,
    samples: Vec<Sample>,
}

impl Soak {
    /// A soak named `name` (for the printed report).
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            samples: Vec::new(),
        }
    }

    /// Records RSS, fds and the live heap after the cycle of index `i` (`i + 1` cycles done).
    /// Memory the program freed is first handed back to the system (glibc keeps freed heap
    /// pages, per thread arena, and moves its mmap threshold up after large frees, so without
    /// this RSS follows the allocator's history rather than what is live).
    pub fn sample(&mut self, i: usize) {
        // SAFETY: malloc_trim only releases free memory of the allocator's own heaps; it
        // touches no memory the program holds and is safe to call from any thread.
        unsafe {
            libc::malloc_trim(0);
        }
        self.samples
            .push((i, rss_kib(), open_fds(), heap_in_use_kib()));
    }

    /// Checks stability (see [`Stability`]) and prints the figures: open fds exactly back at
    /// their post-warm-up count in every later sample; the live heap at most `heap_slack_kib`
    /// above its value at cycle `heap_from` in every later sample; VmRSS at most
    /// `rss_slack_kib` above its post-warm-up value (RSS moves by whole buffers the test hosts
    /// map and unmap, so it is the coarse check).
    pub fn assert_stable(&self, lim: Stability) {
        let from =
            |n: usize| -> Vec<&Sample> { self.samples.iter().filter(|s| s.0 + 1 >= n).collect() };
        let after = from(lim.warmup);
        let heap = from(lim.heap_from);
        let (first, last) = (
            after.first().expect("samples after the warm-up"),
            after.last().expect("samples"),
        );
        let heap0 = heap.first().expect("samples after heap_from");
        let max_rss = after.iter().map(|s| s.1).max().unwrap_or(0);
        let max_fds = after.iter().map(|s| s.2).max().unwrap_or(0);
        let max_heap = heap.iter().map(|s| s.3).max().unwrap_or(0);
        println!(
            "soak {}: live heap per 100 cycles (KiB): {:?}",
            self.name,
            self.samples.iter().map(|s| s.3).collect::<Vec<_>>()
        );
        println!(
            "soak {}: {} cycles; open fds {} -> {} (cycle {} -> {}, max {}); live heap {} -> {} KiB (cycle {} -> {}, max {}, slack {}); VmRSS {} -> {} KiB (max {}, slack {})",
            self.name,
            last.0 + 1,
            first.2,
            last.2,
            first.0 + 1,
            last.0 + 1,
            max_fds,
            heap0.3,
            last.3,
            heap0.0 + 1,
            last.0 + 1,
            max_heap,
            lim.heap_slack_kib,
            first.1,
            last.1,
            max_rss,
            lim.rss_slack_kib,
        );
        assert_eq!(
            (last.2, max_fds),
            (first.2, first.2),
            "{}: open fds moved: {:?}",
            self.name,
            self.samples
        );
        assert!(
            max_heap <= heap0.3 + lim.heap_slack_kib,
            "{}: the live heap grew from {} KiB (cycle {}) to {} KiB: {:?}",
            self.name,
            heap0.3,
            heap0.0 + 1,
            max_heap,
            self.samples
        );
        assert!(
            max_rss <= first.1 + lim.rss_slack_kib,
            "{}: RSS grew from {} KiB to {} KiB: {:?}",
            self.name,
            first.1,
            max_rss,
            self.samples
        );
    }
}

/// Sends an RDMA CM connect request carrying `private_data` from `src` to `to` the way an
/// initiator does (address and route resolved, a queue pair created), then vanishes: the
/// identifier and queue pair are dropped before any answer arrives.
pub fn cm_request_then_vanish(
    fabric: &fabric::Fabric,
    src: Option<SocketAddr>,
    to: SocketAddr,
    private_data: &[u8],
    responder_resources: u8,
) {
    use fabric::{CmEventKind, ConnParam, QpCap, QpInit};
    let ch = fabric.create_event_channel().expect("channel");
    let id = ch.create_id().expect("id");
    id.resolve_addr(src, to, 1000).expect("resolve");
    let wait = |ch: &fabric::EventChannel| loop {
        if let Some(ev) = ch.get_event().expect("event") {
            return ev;
        }
        fabric::wait_readable(ch.fd(), Duration::from_secs(5)).expect("wait");
    };
    assert!(matches!(wait(&ch).kind, CmEventKind::AddrResolved));
    let dev = id.device().expect("device");
    let pd = dev.alloc_pd().expect("pd");
    let cq = dev.create_cq(64, None).expect("cq");
    let _qp = id
        .create_qp(&QpInit {
            pd: &pd,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        })
        .expect("qp");
    id.resolve_route(1000).expect("route");
    assert!(matches!(wait(&ch).kind, CmEventKind::RouteResolved));
    id.connect(&ConnParam {
        private_data,
        responder_resources,
        initiator_depth: 0,
        retry_count: 7,
        rnr_retry_count: 7,
    })
    .expect("connect");
    // Everything is dropped here, before any answer.
}
