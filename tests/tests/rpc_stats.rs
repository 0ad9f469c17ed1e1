//! SPDK's statistics RPCs over a target doing real I/O: `thread_get_stats`,
//! `thread_get_pollers`, `thread_get_io_channels`, `framework_get_scheduler`,
//! `bdev_enable_histogram` / `bdev_get_histogram` / `bdev_get_histogram_borders` (decoded the
//! way SPDK's histogram tooling decodes them) and their save_config entry; the per-listener
//! I/O counters of `nvmf_get_stats`.

use base64::Engine as _;
use rpc::RpcState;
use rtgt_tests::nvme_host::*;
use rtgt_tests::rpc_rig::Rig;
use rtgt_tests::{HOST_IP, TARGET_IP, TestTarget};
use serde_json::{Value, json};

const NQN: &str = "nqn.2016-06.io.rtgt:stats";

/// A two-reactor target exporting malloc `m0` over RDMA, and a host with one I/O queue.
fn setup() -> (Rig, HostCtrl) {
    let r = Rig::on(TestTarget::start(2), RpcState::Runtime);
    r.ok("nvmf_create_transport", json!({"trtype": "RDMA"}));
    r.ok(
        "bdev_malloc_create",
        json!({"name": "m0", "num_blocks": 2048, "block_size": 512}),
    );
    r.ok(
        "nvmf_create_subsystem",
        json!({"nqn": NQN, "allow_any_host": true}),
    );
    r.ok(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "m0"}}),
    );
    r.ok(
        "nvmf_subsystem_add_listener",
        json!({"nqn": NQN, "listen_address": {"trtype": "RDMA", "adrfam": "IPv4",
               "traddr": TARGET_IP, "trsvcid": "4420"}}),
    );
    let mut o = ConnectOpts::new(NQN, HOSTNQN);
    o.src = Some(HOST_IP.parse().unwrap());
    let to = format!("{TARGET_IP}:4420").parse().unwrap();
    let c = HostCtrl::connect(&r.tt.fabric, to, o).expect("connect");
    (r, c)
}

fn reads(c: &mut HostCtrl, n: usize) {
    for _ in 0..n {
        assert_eq!(c.read_status(1), target_core::nvme::Status::SUCCESS);
    }
}

/// `spdk_histogram_data_iterate` over a decoded `bdev_get_histogram` answer: the total.
fn decoded_total(h: &Value) -> u64 {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(h["histogram"].as_str().unwrap())
        .unwrap();
    let g = h["granularity"].as_u64().unwrap();
    let ranges = h["max_range"].as_u64().unwrap() - h["min_range"].as_u64().unwrap() + 1;
    assert_eq!(raw.len() as u64, 8 * (ranges << g), "{h}");
    raw.chunks(8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        .sum()
}

#[test]
fn threads_pollers_and_channels_show_the_reactors_at_work() {
    let (r, mut c) = setup();
    let before = r.ok("thread_get_pollers", Value::Null);
    reads(&mut c, 20);
    let stats = r.ok("thread_get_stats", Value::Null);
    assert_eq!(stats["tick_rate"], 1_000_000_000u64);
    let threads = stats["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2, "{stats}");
    for (i, t) in threads.iter().enumerate() {
        assert_eq!(t["name"], format!("nvmf_tgt_poll_group_{i:03}"));
        assert_eq!(t["id"], i + 1);
        assert!(
            t["busy"].as_u64().unwrap() + t["idle"].as_u64().unwrap() > 0,
            "{t}"
        );
        assert_eq!(t["paused_pollers_count"], 0);
    }
    let pollers_total: u64 = threads
        .iter()
        .map(|t| {
            t["active_pollers_count"].as_u64().unwrap() + t["timed_pollers_count"].as_u64().unwrap()
        })
        .sum();
    assert!(pollers_total >= 2, "each poll group polls: {stats}");

    // The poll group that serves the queue ran its pollers more since the first look.
    let after = r.ok("thread_get_pollers", Value::Null);
    let runs = |v: &Value| -> Vec<u64> {
        v["threads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                ["active_pollers", "timed_pollers"]
                    .iter()
                    .flat_map(|k| t[*k].as_array().unwrap().clone())
                    .map(|p| p["busy_count"].as_u64().unwrap())
                    .sum()
            })
            .collect()
    };
    let (b, a) = (runs(&before), runs(&after));
    assert!(
        a.iter().zip(&b).any(|(a, b)| a >= &(b + 20)),
        "20 reads made some poller busy 20 times: {b:?} → {a:?}"
    );
    for t in after["threads"].as_array().unwrap() {
        for p in t["timed_pollers"].as_array().unwrap() {
            assert!(p["period_ticks"].as_u64().unwrap() > 0, "{p}");
            assert_eq!(p["state"], "waiting");
            assert!(p["run_count"].as_u64().unwrap() >= p["busy_count"].as_u64().unwrap());
        }
    }

    // The namespace's bdev has a channel on the poll group serving the host.
    let ch = r.ok("thread_get_io_channels", Value::Null);
    let m0: Vec<&Value> = ch["threads"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["io_channels"].as_array().unwrap())
        .filter(|c| c["name"] == "m0")
        .collect();
    assert!(!m0.is_empty(), "{ch}");
    assert!(m0.iter().all(|c| c["ref"].as_u64().unwrap() >= 1), "{ch}");

    let s = r.ok("framework_get_scheduler", Value::Null);
    assert_eq!(s["scheduler_name"], "static", "{s}");
    assert!(s.get("governor_name").is_none(), "{s}");
    assert_eq!(
        r.err("framework_get_scheduler", json!({"x": 1})).code,
        -32602
    );
    assert_eq!(r.err("thread_get_stats", json!({"x": 1})).code, -32602);
    c.shutdown().unwrap();
}

#[test]
fn the_spdk_histogram_counts_reads_by_type_and_round_trips_through_save_config() {
    let (r, mut c) = setup();
    // Off: SPDK's error for a channel without a histogram.
    let e = r.err("bdev_get_histogram", json!({"name": "m0"}));
    assert!(e.message.contains("not enabled"), "{e:?}");
    assert_eq!(
        r.err("bdev_get_histogram", json!({"name": "nope"})).code,
        -19
    );

    assert_eq!(
        r.ok(
            "bdev_enable_histogram",
            json!({"name": "m0", "enable": true})
        ),
        true
    );
    reads(&mut c, 25);
    let h = r.ok("bdev_get_histogram", json!({"name": "m0"}));
    assert_eq!(h["tsc_rate"], 1_000_000_000u64);
    assert_eq!(h["granularity"], 7);
    assert_eq!(
        (h["min_range"].clone(), h["max_range"].clone()),
        (json!(3), json!(30))
    );
    assert_eq!(decoded_total(&h), 25, "{h}");
    let b = r.ok(
        "bdev_get_histogram_borders",
        json!({"name": "m0", "borders": [1, 60_000_000_000u64]}),
    );
    assert_eq!(b["borders_count"], json!([0, 25, 25]), "{b}");
    assert!(
        r.err(
            "bdev_get_histogram_borders",
            json!({"name": "m0", "borders": [5, 5]})
        )
        .message
        .contains("ascending")
    );

    // Writes only: the reads no longer count, and counts restarted.
    r.ok(
        "bdev_enable_histogram",
        json!({"name": "m0", "enable": true, "opc": "write", "granularity": 4,
               "min_nsec": 100, "max_nsec": 1_000_000_000u64}),
    );
    reads(&mut c, 5);
    let h = r.ok("bdev_get_histogram", json!({"name": "m0"}));
    assert_eq!(h["granularity"], 4);
    assert_eq!(decoded_total(&h), 0, "reads are not writes: {h}");

    // save_config keeps what makes the same histogram.
    let saved = r.save();
    let bdev_cfg = saved["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subsystem"] == "bdev")
        .unwrap()["config"]
        .clone();
    let entry = bdev_cfg
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["method"] == "bdev_enable_histogram")
        .unwrap_or_else(|| panic!("{bdev_cfg}"));
    assert_eq!(
        entry["params"],
        json!({"name": "m0", "enable": true, "opc": "write", "granularity": 4,
               "min_nsec": 100, "max_nsec": 1_000_000_000u64}),
    );
    // Replaying it gives the same histogram.
    r.ok("bdev_enable_histogram", entry["params"].clone());
    assert_eq!(
        r.ok("bdev_get_histogram", json!({"name": "m0"}))["granularity"],
        4
    );

    // Refusals: an I/O type rtgt has not, a granularity out of range, min ≥ max.
    for bad in [
        json!({"name": "m0", "enable": true, "opc": "nvme_io"}),
        json!({"name": "m0", "enable": true, "granularity": 13}),
        json!({"name": "m0", "enable": true, "min_nsec": 10, "max_nsec": 10}),
    ] {
        assert_eq!(
            r.err("bdev_enable_histogram", bad.clone()).code,
            -32602,
            "{bad}"
        );
    }
    assert_eq!(
        r.err(
            "bdev_enable_histogram",
            json!({"name": "nope", "enable": true})
        )
        .code,
        -19
    );

    r.ok(
        "bdev_enable_histogram",
        json!({"name": "m0", "enable": false}),
    );
    assert!(r.call("bdev_get_histogram", json!({"name": "m0"})).is_err());
    assert!(!r.save().to_string().contains("bdev_enable_histogram"));
    c.shutdown().unwrap();
}

#[test]
fn nvmf_get_stats_counts_io_per_listener() {
    let (r, mut c) = setup();
    reads(&mut c, 7);
    // One read past the end: a generic error, no bytes.
    let bad = c.io[0]
        .cmd(
            read_sqe(1, 4096, 1),
            Data::KeyedRead {
                len: 512,
                invalidate: true,
            },
        )
        .expect("completes");
    assert!(!bad.cqe.status.is_success());
    let stats = r.ok("nvmf_get_stats", Value::Null);
    let mut reads_seen = 0;
    let mut bytes = 0;
    let mut generic = 0;
    for pg in stats["poll_groups"].as_array().unwrap() {
        for l in pg["listeners"].as_array().unwrap() {
            assert_eq!(
                (
                    l["trtype"].as_str(),
                    l["traddr"].as_str(),
                    l["trsvcid"].as_str()
                ),
                (Some("RDMA"), Some(TARGET_IP), Some("4420")),
                "{l}"
            );
            reads_seen += l["reads"].as_u64().unwrap();
            bytes += l["bytes_read"].as_u64().unwrap();
            generic += l["errors"]["generic"].as_u64().unwrap();
            assert_eq!(l["errors"]["path"], 0, "{l}");
        }
    }
    // Admin and fabrics commands are not counted.
    assert_eq!((reads_seen, bytes, generic), (8, 7 * 512, 1), "{stats}");
    c.shutdown().unwrap();
}
