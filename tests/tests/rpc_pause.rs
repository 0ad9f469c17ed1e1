//! `nvmf_subsystem_pause` / `nvmf_subsystem_resume` with I/O in flight, through the RPC
//! methods, the RDMA transport on the simulated fabric, and the Rust NVMe/RDMA test host.
//!
//! The namespace's bdev is a malloc disk behind a *gate*: while the gate is closed, I/O that
//! reaches the bdev stays outstanding. So the test controls exactly what is in flight:
//!
//! 1. writes are held at the bdev (the shared test gate, `rtgt_tests::gate`); `nvmf_subsystem_pause` must not answer (state `pausing`);
//! 2. the gate opens: the writes complete, and only then does the pause answer (`paused`);
//! 3. new reads and writes submitted while paused complete only after `nvmf_subsystem_resume`,
//!    never reach the bdev before it, and none is lost (every command succeeds, the data reads
//!    back, the bdev counted each operation once).

use std::sync::Arc;
use std::time::{Duration, Instant};

use rpc::methods::TargetContext;
use rpc::{CoreHooks, MethodTable, Methods, RpcState, StateHandle};
use rtgt_tests::TARGET_IP;
use rtgt_tests::gate::GateBdev;
use rtgt_tests::nvme_host::*;
use serde_json::{Value, json};
use target_core::bdev::{Bdev, MallocBdev, MallocParams};

const NQN: &str = "nqn.2016-06.io.spdk:cnode1";
const BS: usize = 512;
const BLOCKS: u32 = 8;

fn call(table: &MethodTable, rt: &tokio::runtime::Runtime, method: &str, params: Value) -> Value {
    let text = params.to_string();
    let raw = rt
        .block_on(table.call(method, Some(&text)))
        .unwrap_or_else(|e| panic!("{method}: {e}"));
    serde_json::from_str(raw.get()).unwrap()
}

fn state(table: &MethodTable, rt: &tokio::runtime::Runtime) -> String {
    call(table, rt, "nvmf_get_subsystems", json!({"nqn": NQN}))[0]["state"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Polls `q` until `f` holds, or fails after 20 s.
fn poll_until(q: &mut HostQueue, what: &str, mut f: impl FnMut(&HostQueue) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f(q) {
        q.poll().expect("host poll");
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Runs an RPC on a thread of its own (so the test can keep polling the host) and returns a
/// handle yielding the result and when it arrived.
fn call_in_background(
    table: &MethodTable,
    method: &'static str,
    params: Value,
) -> std::thread::JoinHandle<(Result<Value, rpc::RpcError>, Instant)> {
    let table = table.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let text = params.to_string();
        let r = rt
            .block_on(table.call(method, Some(&text)))
            .map(|raw| serde_json::from_str(raw.get()).unwrap());
        (r, Instant::now())
    })
}

fn pause_with_io_in_flight(pause_params: Value) {
    let env = NvmfEnv::new(2, json!({}));
    let rt = &env.t.rt;
    let state_handle = StateHandle::new(RpcState::Runtime);
    let mut m = Methods::from_arc(
        Arc::new(TargetContext::new(Arc::clone(&env.t.target))),
        state_handle,
    );
    m.register_core(CoreHooks::new()).unwrap();
    rpc::methods::register(&mut m).unwrap();
    let table = m.build();

    let inner: Arc<dyn Bdev> = MallocBdev::create(MallocParams {
        name: "Gate0".into(),
        num_blocks: 4096,
        block_size: BS as u32,
        physical_block_size: 0,
        uuid: None,
        optimal_io_boundary: 0,
    })
    .unwrap();
    let (bdev, gate) = GateBdev::new("Gate0", inner);
    env.t.target.bdevs().register(bdev).unwrap();

    // The subsystem is built through the RPC methods.
    call(
        &table,
        rt,
        "nvmf_create_subsystem",
        json!({"nqn": NQN, "allow_any_host": true}),
    );
    assert_eq!(
        call(
            &table,
            rt,
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": "Gate0"}})
        ),
        json!(1)
    );
    call(
        &table,
        rt,
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address":
               {"trtype": "rdma", "traddr": TARGET_IP, "trsvcid": "4420"}}),
    );
    let mut o = env.opts(NQN);
    o.io_queues = 1;
    let mut ctrl = env.connect(o).expect("connect");
    let q = &mut ctrl.io[0];

    // 1. Eight writes held at the bdev.
    gate.close();
    let writes: Vec<u16> = (0..8u64)
        .map(|i| {
            let lba = i * u64::from(BLOCKS);
            let data = pattern(7, lba, BLOCKS, BS);
            q.submit(
                write_sqe(1, lba, BLOCKS),
                Data::KeyedWrite {
                    bytes: &data,
                    invalidate: false,
                },
            )
            .expect("submit write")
        })
        .collect();
    poll_until(q, "8 writes at the bdev", |_| gate.held() == 8);

    let pause = call_in_background(&table, "nvmf_subsystem_pause", pause_params);
    q.assert_none_complete_for(&writes, Duration::from_millis(300));
    assert!(!pause.is_finished(), "pause answered with I/O outstanding");
    assert_eq!(state(&table, rt), "pausing");

    // 2. Release the writes: they complete, and the pause answers after them.
    let released = Instant::now();
    gate.open();
    for &c in &writes {
        q.wait(c).expect("write").ok().expect("write status");
    }
    let (r, answered) = pause.join().unwrap();
    assert_eq!(r.expect("pause"), json!(true));
    assert!(
        answered >= released,
        "pause answered before the I/O drained"
    );
    assert_eq!(state(&table, rt), "paused");
    assert_eq!(gate.held(), 0);

    // 3. I/O submitted while paused waits until resume. The gate closes again, so anything
    // that reached the bdev before the resume would be counted as held.
    gate.close();
    let mut queued = Vec::new();
    for i in 8..12u64 {
        let lba = i * u64::from(BLOCKS);
        let data = pattern(7, lba, BLOCKS, BS);
        queued.push(
            q.submit(
                write_sqe(1, lba, BLOCKS),
                Data::KeyedWrite {
                    bytes: &data,
                    invalidate: false,
                },
            )
            .expect("submit write"),
        );
    }
    let reads: Vec<u16> = (0..4u64)
        .map(|i| {
            q.submit(
                read_sqe(1, i * u64::from(BLOCKS), BLOCKS),
                Data::KeyedRead {
                    len: BLOCKS * BS as u32,
                    invalidate: false,
                },
            )
            .expect("submit read")
        })
        .collect();
    queued.extend(&reads);
    q.assert_none_complete_for(&queued, Duration::from_millis(300));
    assert_eq!(
        gate.held(),
        0,
        "I/O reached the bdev while the subsystem was paused"
    );
    assert_eq!(state(&table, rt), "paused");
    gate.open();

    assert_eq!(
        call(&table, rt, "nvmf_subsystem_resume", json!({"nqn": NQN})),
        json!(true)
    );
    assert_eq!(state(&table, rt), "active");
    for (i, &c) in reads.iter().enumerate() {
        let done = q.wait(c).expect("read").ok().expect("read status");
        assert_eq!(
            done.data,
            pattern(7, i as u64 * u64::from(BLOCKS), BLOCKS, BS),
            "read {i} after resume"
        );
    }
    for &c in &queued[..4] {
        q.wait(c).expect("write").ok().expect("write status");
    }

    // Nothing lost: all twelve writes are on the disk, each operation counted once.
    let w = Workload {
        nsid: 1,
        bs: BS,
        lba0: 0,
        blocks: BLOCKS,
        count: 12,
        qd: 4,
        seed: 7,
    };
    read_verify(q, &w, false).expect("data after resume");
    let io = call(&table, rt, "bdev_get_iostat", json!({"names": ["Gate0"]}));
    assert_eq!(io["bdevs"][0]["num_write_ops"], 12);
    assert_eq!(io["bdevs"][0]["num_read_ops"], 4 + 12);
    // The latency histograms count the same operations.
    let h = call(
        &table,
        rt,
        "bdev_get_latency_histogram",
        json!({"name": "Gate0"}),
    );
    let count = |kind: &str| -> u64 {
        h["bdevs"][0][kind]["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .sum()
    };
    assert_eq!((count("read"), count("write")), (4 + 12, 12), "{h}");
    assert!(h["bdevs"][0]["read"]["sum_ns"].as_u64().unwrap() > 0, "{h}");
    assert_eq!(io["bdevs"][0]["num_errors"], 0);
    ctrl.shutdown().expect("shutdown");
    env.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn pausing_the_whole_subsystem_waits_for_in_flight_io_and_queues_new_io() {
    pause_with_io_in_flight(json!({"nqn": NQN}));
}

#[test]
fn pausing_one_namespace_waits_for_its_in_flight_io_and_queues_new_io() {
    pause_with_io_in_flight(json!({"nqn": NQN, "nsid": 1}));
}
