//! Soaks, bounded in count (and so in time), on the simulated fabric: 1,000 NVMe/RDMA
//! controller connect/disconnect cycles, 1,000 SRP login/logout cycles, 1,000 subsystem
//! create/delete cycles through the RPC methods, and 100 pause/resume cycles while an NVMe host
//! and an SRP initiator do verified I/O on the paused subsystem.
//!
//! Stability: after a warm-up (the first 100 cycles, in which allocator arenas, slab and map
//! capacities and the poll groups' device resources settle), the process's open file
//! descriptors must be exactly back at their post-warm-up count whenever the target is
//! quiescent, and the resident set (VmRSS, sampled after `malloc_trim`) may not grow by more
//! than 16 MiB (it moves by whole buffers: each test host maps 4 MiB per queue). The live heap
//! (glibc `mallinfo2`: bytes allocated and not freed) may not rise more than 32 KiB above its
//! value at cycle 500 up to cycle 1,000: a leak of 64 bytes or more per cycle fails (glibc
//! rounds an allocation of 64 bytes up to an 80-byte chunk: 39 KiB over 500 cycles). Without a
//! leak the live heap of every soak stays within 2 KiB from cycle 100 on, because each
//! connect/disconnect, login/logout and create/delete soak runs in a process of its own with
//! glibc's per-thread caches off ([`rtgt_tests::faults::soak_process`]; with them, freed
//! chunks a thread keeps count as in use and the figure drifts by tens of KiB). Each soak
//! prints its figures.
//!
//! The soaks measure the whole process, so they run one at a time (a lock), in this binary of
//! their own. They take about 20 s in a debug build, so plain `cargo test` skips them (they
//! are `#[ignore]`d); `scripts/test.sh soak` runs them:
//! `cargo test -p rtgt-tests --test soak -- --ignored --nocapture`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rpc::methods::TargetContext;
use rpc::{CoreHooks, Methods, RpcState, StateHandle};
use rtgt_tests::faults::{Soak, Stability, soak_process};
use rtgt_tests::nvme_host::*;
use rtgt_tests::srp_initiator::{BS, Layout, SrpFixture, pattern};
use serde_json::{Value, json};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const CYCLES: usize = 1000;
/// Open fds and VmRSS from cycle 100, the live heap from cycle 500 (module docs).
const STABLE: Stability = Stability {
    warmup: 100,
    heap_from: 500,
    heap_slack_kib: 32,
    rss_slack_kib: 16384,
};
const WAIT: Duration = Duration::from_secs(15);

/// Transport options with small preallocated pools: buffer pools and shared receive queues
/// are allocated whole but their pages are touched as they come into use, so with SPDK's
/// defaults (tens of MiB) the resident set keeps growing for hundreds of cycles without any
/// leak. Small pools are all in use within the warm-up, so what remains is what a leak would
/// add.
fn small_rdma() -> Value {
    json!({"num_shared_buffers": 256, "max_srq_depth": 256})
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
#[ignore = "a soak: scripts/test.sh soak runs it (cargo test --test soak -- --ignored)"]
fn nvme_connect_disconnect_1000_cycles() {
    let _one = lock();
    if !soak_process("nvme_connect_disconnect_1000_cycles") {
        return;
    }
    let e = NvmfEnv::new(2, small_rdma());
    let nqn = "nqn.2016-06.io.rtgt:soak";
    e.subsystem(nqn, true, 2048, 512);
    let mut soak = Soak::new("nvme connect/disconnect");
    let t0 = Instant::now();
    let mut ios = 0u64;
    for i in 0..CYCLES {
        let mut o = e.opts(nqn);
        o.io_queues = 1 + (i % 2) as u16;
        o.io_depth = 16;
        let mut c = e
            .connect(o)
            .unwrap_or_else(|err| panic!("cycle {i}: {err}"));
        // A verified write and read on every tenth cycle; the others only connect.
        if i % 10 == 0 {
            let w = Workload {
                nsid: 1,
                bs: 512,
                lba0: (i as u64 % 200) * 8,
                blocks: 8,
                count: 2,
                qd: 2,
                seed: i as u32,
            };
            write_read_verify(&mut c.io[0], &w, Mode::KeyedInvalidate)
                .unwrap_or_else(|err| panic!("cycle {i}: {err}"));
            ios += 4;
        }
        // Half shut down cleanly (CC.SHN), half just disconnect.
        if i % 2 == 0 {
            c.shutdown()
                .unwrap_or_else(|err| panic!("cycle {i}: {err}"));
        } else {
            drop(c);
        }
        if (i + 1) % 100 == 0 {
            e.assert_quiescent(WAIT);
            soak.sample(i);
        }
    }
    println!(
        "soak nvme connect/disconnect: {CYCLES} controllers connected and disconnected, {ios} verified I/Os, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(e.controllers(nqn).is_empty());
    soak.assert_stable(STABLE);
}

#[test]
#[ignore = "a soak: scripts/test.sh soak runs it (cargo test --test soak -- --ignored)"]
fn srp_login_logout_1000_cycles() {
    let _one = lock();
    if !soak_process("srp_login_logout_1000_cycles") {
        return;
    }
    let fx = SrpFixture::new(2, json!({"num_shared_buffers": 32}), 1, 2048);
    // Both poll groups set up their device (shared receive queue, buffers, an eventfd) before
    // the cycles: two initiators at once, one per poll group. Otherwise the second does it when
    // a login first finds the first one busy (its last channel still being released), which
    // may be at any cycle: 3 MiB and an fd more from then on.
    let both = [fx.login(0x2000), fx.login(0x2001)];
    let per_pg: Vec<u64> = fx.stats()["poll_groups"]
        .as_array()
        .expect("poll groups")
        .iter()
        .flat_map(|pg| pg["transports"].as_array().cloned().unwrap_or_default())
        .filter(|t| t["trtype"] == "SRP")
        .map(|t| t["channels"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(per_pg, [1, 1], "one channel per poll group");
    for mut ini in both {
        ini.logout().unwrap();
        assert!(ini.wait_disconnected(WAIT));
    }
    fx.wait_until("channels released", |f| f.qpairs().is_empty());
    let mut soak = Soak::new("srp login/logout");
    let t0 = Instant::now();
    for i in 0..CYCLES {
        let mut ini = fx.login(0x1000 + (i as u64 % 7));
        if i % 10 == 0 {
            let d = pattern(i as u64, 4096);
            let lba = (i as u32 % 200) * 8;
            assert_eq!(
                ini.write(0, lba, BS, 0, &d, Layout::Immediate)
                    .unwrap()
                    .status,
                0
            );
            let (r, back) = ini.read(0, lba, BS, 8, 8192, Layout::Direct).unwrap();
            assert_eq!(r.status, 0);
            assert!(back == d, "cycle {i}: data mismatch");
        }
        // Half log out (SRP_I_LOGOUT), half disconnect (DREQ).
        if i % 2 == 0 {
            ini.logout().unwrap();
        } else {
            ini.disconnect().unwrap();
        }
        assert!(ini.wait_disconnected(WAIT), "cycle {i}");
        drop(ini);
        if (i + 1) % 100 == 0 {
            fx.wait_until("channels released", |f| f.qpairs().is_empty());
            let t = fx.t.target.transport("SRP").unwrap().1.stats();
            assert_eq!(
                (t["channels"].as_u64(), t["sessions"].as_u64()),
                (Some(0), Some(0))
            );
            soak.sample(i);
        }
    }
    let t = fx.t.target.transport("SRP").unwrap().1.stats();
    println!(
        "soak srp login/logout: {CYCLES} logins and logouts (+2 to set up both poll groups: {} accepted), {:.1} s",
        t["logins_accepted"],
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(t["logins_accepted"], CYCLES as u64 + 2);
    soak.assert_stable(STABLE);
}

#[test]
#[ignore = "a soak: scripts/test.sh soak runs it (cargo test --test soak -- --ignored)"]
fn subsystem_create_delete_1000_cycles() {
    let _one = lock();
    if !soak_process("subsystem_create_delete_1000_cycles") {
        return;
    }
    let e = NvmfEnv::new(2, small_rdma());
    e.t.transport("SRP", json!({"num_shared_buffers": 32}));
    let state = StateHandle::new(RpcState::Runtime);
    let ctx = std::sync::Arc::new(TargetContext::new(std::sync::Arc::clone(&e.t.target)));
    let mut m = Methods::from_arc(ctx, state);
    m.register_core(CoreHooks::new()).expect("core methods");
    rpc::methods::register(&mut m).expect("storage methods");
    let table = m.build();
    let call = |method: &str, params: Value| -> Value {
        let text = params.to_string();
        let raw =
            e.t.rt
                .block_on(table.call(method, Some(&text)))
                .unwrap_or_else(|err| panic!("{method} {params}: {err}"));
        serde_json::from_str(raw.get()).expect("JSON")
    };
    let mut soak = Soak::new("subsystem create/delete");
    let t0 = Instant::now();
    for i in 0..CYCLES {
        let nqn = format!("nqn.2016-06.io.rtgt:soak{}", i % 3);
        let bdev = format!("SoakMalloc{}", i % 3);
        call(
            "bdev_malloc_create",
            json!({"name": bdev, "num_blocks": 256, "block_size": 512}),
        );
        call(
            "nvmf_create_subsystem",
            json!({"nqn": nqn, "allow_any_host": i % 2 == 0, "serial_number": "SOAK0001"}),
        );
        call(
            "nvmf_subsystem_add_ns",
            json!({"nqn": nqn, "namespace": {"bdev_name": bdev}}),
        );
        call(
            "nvmf_subsystem_add_host",
            json!({"nqn": nqn, "host": HOSTNQN}),
        );
        let (trtype, port) = if i % 2 == 0 {
            ("RDMA", "4420")
        } else {
            ("SRP", "4999")
        };
        call(
            "nvmf_subsystem_add_listener",
            json!({"nqn": nqn, "listen_address":
                {"trtype": trtype, "adrfam": "IPv4", "traddr": rtgt_tests::TARGET_IP, "trsvcid": port}}),
        );
        // Now and then a host connects to it before it goes.
        if i % 50 == 0 && trtype == "RDMA" {
            let mut c = e
                .connect(e.opts(&nqn))
                .unwrap_or_else(|err| panic!("cycle {i}: {err}"));
            let w = Workload {
                nsid: 1,
                bs: 512,
                lba0: 0,
                blocks: 8,
                count: 2,
                qd: 2,
                seed: i as u32,
            };
            write_read_verify(&mut c.io[0], &w, Mode::InCapsule).expect("I/O");
        }
        call("nvmf_delete_subsystem", json!({"nqn": nqn}));
        call("bdev_malloc_delete", json!({"name": bdev}));
        if (i + 1) % 100 == 0 {
            e.assert_quiescent(WAIT);
            assert_eq!(
                call("nvmf_get_subsystems", json!({}))
                    .as_array()
                    .map(Vec::len),
                Some(1),
                "only the discovery subsystem is left"
            );
            assert_eq!(call("bdev_get_bdevs", json!({})), json!([]));
            soak.sample(i);
        }
    }
    println!(
        "soak subsystem create/delete: {CYCLES} subsystems (bdev, namespace, host, listener) created and deleted, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    soak.assert_stable(STABLE);
}

#[test]
#[ignore = "a soak: scripts/test.sh soak runs it (cargo test --test soak -- --ignored)"]
fn pause_resume_100_cycles_under_verified_io() {
    let _one = lock();
    let e = NvmfEnv::new(2, json!({}));
    e.t.transport("SRP", json!({}));
    let nqn = "nqn.2016-06.io.rtgt:pausesoak";
    e.subsystem(nqn, true, 65536, 512);
    e.t.listen(nqn, "SRP", 5000);
    let srp_port = transport_srp::port_id::derived_target_port_id(nqn);
    let mut o = e.opts(nqn);
    o.io_queues = 2;
    o.io_depth = 32;
    let mut c = e.connect(o).expect("connect");
    let mut lp = rtgt_tests::srp_initiator::LoginParams::linux(
        transport_srp::proto::PortId::from_halves(0, 0x77),
        srp_port,
    );
    lp.src = Some(std::net::SocketAddr::new(
        rtgt_tests::HOST_IP.parse().unwrap(),
        0,
    ));
    let to = std::net::SocketAddr::new(rtgt_tests::TARGET_IP.parse().unwrap(), 5000);
    let mut ini =
        rtgt_tests::srp_initiator::SrpInitiator::login(&e.t.fabric, to, &lp).expect("SRP login");
    let stop = AtomicBool::new(false);
    let verified = AtomicU64::new(0);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let (stop, verified) = (&stop, &verified);
        let mut workers = Vec::new();
        for (qi, q) in c.io.iter_mut().enumerate() {
            workers.push(s.spawn(move || {
                let mut round = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let mode =
                        [Mode::InCapsule, Mode::Keyed, Mode::KeyedInvalidate][round as usize % 3];
                    let w = Workload {
                        nsid: 1,
                        bs: 512,
                        lba0: qi as u64 * 16384,
                        blocks: 8,
                        count: 64,
                        qd: 16,
                        seed: round * 4 + qi as u32,
                    };
                    write_read_verify(q, &w, mode)
                        .unwrap_or_else(|err| panic!("NVMe queue {qi} round {round}: {err}"));
                    verified.fetch_add(64, Ordering::Relaxed);
                    round += 1;
                }
            }));
        }
        let ini = &mut ini;
        workers.push(s.spawn(move || {
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let layout =
                    [Layout::Direct, Layout::Indirect, Layout::Immediate][round as usize % 3];
                for k in 0..8u32 {
                    let lba = 40000 + k * 8;
                    let d = pattern(round * 8 + u64::from(k), 4096);
                    let r = ini.write(0, lba, BS, 0, &d, layout).expect("SRP write");
                    assert_eq!(r.status, 0, "SRP write status");
                    let (r, back) = ini
                        .read(0, lba, BS, 8, 65536, Layout::Direct)
                        .expect("SRP read");
                    assert_eq!(r.status, 0, "SRP read status");
                    assert!(back == d, "SRP round {round}: data mismatch at LBA {lba}");
                    verified.fetch_add(1, Ordering::Relaxed);
                }
                round += 1;
            }
        }));
        for i in 0..100 {
            std::thread::sleep(Duration::from_millis(5));
            let nsid = (i % 2 == 1).then_some(1);
            e.t.rt
                .block_on(e.t.target.pause(nqn, nsid))
                .unwrap_or_else(|err| panic!("pause {i}: {err}"));
            std::thread::sleep(Duration::from_millis(2));
            e.t.rt
                .block_on(e.t.target.resume(nqn))
                .unwrap_or_else(|err| panic!("resume {i}: {err}"));
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().expect("a worker failed");
        }
    });
    println!(
        "soak pause/resume: 100 pause/resume cycles (50 whole subsystem, 50 namespace), {} verified commands (NVMe + SRP), 0 mismatches, {:.1} s",
        verified.load(Ordering::Relaxed),
        t0.elapsed().as_secs_f64()
    );
    assert_no_stray(&c);
    c.shutdown().expect("shutdown");
    ini.logout().expect("logout");
    e.assert_quiescent(WAIT);
}

fn assert_no_stray(c: &HostCtrl) {
    rtgt_tests::faults::assert_no_stray(c, "pause/resume soak");
}
