//! The RDMA transport as management sees it: registration, options, listeners, stats.

use rtgt_tests::{TARGET_IP, TestTarget};
use serde_json::json;
use target_core::registry;
use target_core::target::{AdrFam, ListenAddr};

#[test]
fn rdma_is_registered_with_spdks_defaults() {
    let ops = registry::find("rdma").expect("RDMA registered");
    assert_eq!(ops.name, "RDMA");
    let d = (ops.defaults)();
    assert_eq!(d["trtype"], "RDMA");
    assert_eq!(d["max_queue_depth"], 128);
    assert_eq!(d["max_io_qpairs_per_ctrlr"], 127);
    assert_eq!(d["in_capsule_data_size"], 4096);
    assert_eq!(d["max_io_size"], 131072);
    assert_eq!(d["max_srq_depth"], 4096);
    assert_eq!(d["no_srq"], false);
}

#[test]
fn create_dump_listen_and_stop_listening() {
    let t = TestTarget::start(2);
    t.transport(
        "RDMA",
        json!({"max_queue_depth": 64, "io_unit_size": 8192, "num_shared_buffers": 511,
               "c2h_success": true, "no_srq": true}),
    );
    let (_, tr) = t.target.transport("rdma").expect("created");
    let d = tr.dump_opts();
    assert_eq!(d["trtype"], "RDMA");
    assert_eq!(d["max_queue_depth"], 64);
    assert_eq!(d["num_cqe"], 4096);
    assert!(d.get("c2h_success").is_none());
    // A second RDMA transport is refused.
    let e =
        t.rt.block_on(t.target.create_transport("RDMA", &Default::default()))
            .unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");

    let nqn = "nqn.2016-06.io.rtgt:listen";
    t.subsystem(nqn, true);
    let a = t.listen(nqn, "rdma", 4420);
    // The port is taken: a listener of another process (an id of our own here) cannot bind.
    let ch = t.fabric.create_event_channel().unwrap();
    let id = ch.create_id().unwrap();
    assert!(
        id.bind(format!("{TARGET_IP}:4420").parse().unwrap())
            .is_err()
    );
    t.rt.block_on(t.target.remove_listener(nqn, a.clone()))
        .expect("remove listener");
    id.bind(format!("{TARGET_IP}:4420").parse().unwrap())
        .expect("the port is free again");
    drop(id);
    // Bad addresses are refused with a message.
    let bad = ListenAddr::new("RDMA", AdrFam::Ipv4, "10.9.9.9", "4420");
    let e = t.rt.block_on(t.target.add_listener(nqn, bad)).unwrap_err();
    assert!(e.to_string().contains("10.9.9.9"), "{e}");
    let v6 = ListenAddr::new("RDMA", AdrFam::Ipv6, TARGET_IP, "4420");
    assert!(t.rt.block_on(t.target.add_listener(nqn, v6)).is_err());
}

#[test]
fn invalid_options_fail_creation() {
    let t = TestTarget::start(1);
    let e =
        t.rt.block_on(
            t.target
                .create_transport("RDMA", json!({"max_io_size": 12345}).as_object().unwrap()),
        )
        .unwrap_err();
    assert!(e.to_string().contains("power of 2"), "{e}");
    assert!(t.target.transport("RDMA").is_none());
}

#[test]
fn stats_show_the_rdma_devices() {
    let t = TestTarget::start(2);
    t.transport("RDMA", json!({}));
    let s = t.rt.block_on(t.target.stats());
    let groups = s["poll_groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    for g in groups {
        let tr = &g["transports"][0];
        assert_eq!(tr["trtype"], "RDMA");
        let devs = tr["devices"].as_array().unwrap();
        assert!(!devs.is_empty());
        assert!(devs.iter().any(|d| d["name"] == "sim_tgt"));
        for k in [
            "polls",
            "completions",
            "requests",
            "request_latency",
            "total_send_wrs",
        ] {
            assert!(devs[0][k].is_u64(), "{k}");
        }
    }
}
