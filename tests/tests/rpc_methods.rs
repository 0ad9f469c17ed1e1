//! The storage methods of the `rpc` crate, called in-process over a target on the simulated
//! fabric: result shapes, SPDK's error codes, and the save_config → load → save_config round
//! trip.

use rpc::RpcState;
use rpc::methods::load;
use rtgt_tests::rpc_rig::{Rig, assert_code, saved_section};
use serde_json::{Value, json};

const NQN: &str = "nqn.2016-06.io.spdk:cnode1";
const NQN2: &str = "nqn.2016-06.io.spdk:cnode2";
const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";

#[test]
fn rpc_get_methods_lists_every_method() {
    let r = Rig::runtime();
    let all = r.ok("rpc_get_methods", Value::Null);
    let names: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for m in [
        "rpc_get_methods",
        "spdk_get_version",
        "framework_start_init",
        "framework_wait_init",
        "framework_get_config",
        "framework_get_subsystems",
        "framework_get_reactors",
        "bdev_malloc_create",
        "bdev_malloc_delete",
        "bdev_null_create",
        "bdev_null_delete",
        "bdev_null_resize",
        "bdev_aio_create",
        "bdev_aio_delete",
        "bdev_uring_create",
        "bdev_uring_delete",
        "bdev_delay_create",
        "bdev_delay_delete",
        "bdev_delay_update_latency",
        "bdev_get_bdevs",
        "bdev_get_iostat",
        "bdev_reset_iostat",
        "bdev_get_latency_histogram",
        "bdev_wait_for_examine",
        "nvmf_create_transport",
        "nvmf_get_transports",
        "nvmf_create_subsystem",
        "nvmf_delete_subsystem",
        "nvmf_get_subsystems",
        "nvmf_subsystem_add_listener",
        "nvmf_subsystem_remove_listener",
        "nvmf_subsystem_get_listeners",
        "nvmf_subsystem_add_ns",
        "nvmf_subsystem_remove_ns",
        "nvmf_subsystem_add_host",
        "nvmf_subsystem_remove_host",
        "nvmf_ns_add_host",
        "nvmf_ns_remove_host",
        "nvmf_subsystem_allow_any_host",
        "nvmf_subsystem_get_controllers",
        "nvmf_subsystem_get_qpairs",
        "nvmf_get_stats",
        "nvmf_set_config",
        "nvmf_set_max_subsystems",
        "nvmf_set_crdt",
        "nvmf_subsystem_pause",
        "nvmf_subsystem_resume",
        "iobuf_set_options",
        "sock_set_default_impl",
        "sock_impl_set_options",
        "accel_set_options",
        "bdev_set_options",
        "bdev_nvme_set_options",
        "bdev_raid_set_options",
        "bdev_iscsi_set_options",
        "bdev_nvme_set_hotplug",
        "vmd_enable",
        "framework_set_scheduler",
        "keyring_file_add_key",
        "keyring_get_keys",
    ] {
        assert!(names.contains(&m), "{m} is not listed");
    }
    // In RUNTIME, `current` leaves out the STARTUP-only setters.
    let now = r.ok("rpc_get_methods", json!({"current": true}));
    let now: Vec<&str> = now
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(!now.contains(&"nvmf_set_config"));
    assert!(!now.contains(&"iobuf_set_options"));
    assert!(now.contains(&"bdev_nvme_set_options"), "STARTUP|RUNTIME");
}

#[test]
fn framework_methods() {
    let r = Rig::runtime();
    let subs = r.ok("framework_get_subsystems", Value::Null);
    let names: Vec<&str> = subs
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["subsystem"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "keyring",
            "iobuf",
            "sock",
            "vmd",
            "accel",
            "bdev",
            "scheduler",
            "nvmf"
        ]
    );
    // Dependencies come first.
    for (i, s) in subs.as_array().unwrap().iter().enumerate() {
        for d in s["depends_on"].as_array().unwrap() {
            let pos = names
                .iter()
                .position(|n| *n == d.as_str().unwrap())
                .unwrap();
            assert!(pos < i, "{} depends on later {d}", names[i]);
        }
    }
    assert_code(
        &r.err("framework_get_subsystems", json!({})),
        -32602,
        "requires no arguments",
    );
    assert_eq!(
        r.ok("framework_get_config", json!({"name": "bdev"})),
        json!([{"method": "bdev_wait_for_examine"}])
    );
    assert_eq!(
        r.ok("framework_get_config", json!({"name": "iobuf"})),
        json!([])
    );
    assert_code(
        &r.err("framework_get_config", json!({"name": "nope"})),
        -32602,
        "Subsystem 'nope' not found",
    );
    assert_code(
        &r.err("framework_get_config", json!({})),
        -32602,
        "Invalid parameters",
    );
    let reactors = r.ok("framework_get_reactors", Value::Null);
    assert_eq!(reactors["reactors"].as_array().unwrap().len(), 2);
    assert_eq!(reactors["tick_rate"], 1_000_000_000u64);
    assert!(
        reactors["reactors"][0]["lw_threads"][0]["name"]
            .as_str()
            .unwrap()
            .starts_with("nvmf_tgt_poll_group_")
    );
    assert_code(
        &r.err("spdk_get_version", json!({})),
        -32602,
        "requires no parameters",
    );
    assert_code(
        &r.err("no_such_method", Value::Null),
        -32601,
        "Method not found",
    );
}

#[test]
fn bdev_create_get_delete_and_errors() {
    let r = Rig::runtime();
    assert_eq!(
        r.ok(
            "bdev_malloc_create",
            json!({"num_blocks": 2048, "block_size": 512})
        ),
        json!("Malloc0")
    );
    assert_eq!(
        r.ok(
            "bdev_malloc_create",
            json!({"num_blocks": 2048, "block_size": 4096, "md_interleave": false,
                   "dif_is_head_of_md": false})
        ),
        json!("Malloc1")
    );
    assert_code(
        &r.err(
            "bdev_malloc_create",
            json!({"num_blocks": 8, "block_size": 512, "name": "Malloc0"}),
        ),
        -17,
        "Malloc0",
    );
    assert_code(
        &r.err(
            "bdev_malloc_create",
            json!({"num_blocks": 8, "block_size": 1000}),
        ),
        -22,
        "1000",
    );
    assert_code(
        &r.err(
            "bdev_malloc_create",
            json!({"num_blocks": 8, "block_size": 512, "md_size": 8}),
        ),
        -32602,
        "metadata",
    );
    assert_code(
        &r.err("bdev_malloc_create", json!({"block_size": 512})),
        -32603,
        "spdk_json_decode_object failed",
    );
    assert_code(
        &r.err(
            "bdev_malloc_create",
            json!({"num_blocks": 8, "block_size": 512, "bogus": 1}),
        ),
        -32603,
        "spdk_json_decode_object failed",
    );
    assert_eq!(
        r.ok(
            "bdev_null_create",
            json!({"name": "Null0", "num_blocks": 100, "block_size": 4096})
        ),
        json!("Null0")
    );
    // bdev_null_resize (MiB, as SPDK): grows, never shrinks, only null bdevs.
    assert_eq!(
        r.ok("bdev_null_resize", json!({"name": "Null0", "new_size": 1})),
        true
    );
    assert_eq!(
        r.ok("bdev_get_bdevs", json!({"name": "Null0"}))[0]["num_blocks"],
        256
    );
    assert_code(
        &r.err("bdev_null_resize", json!({"name": "Null0", "new_size": 0})),
        -22,
        "must not be smaller",
    );
    assert_code(
        &r.err(
            "bdev_null_resize",
            json!({"name": "Malloc0", "new_size": 8}),
        ),
        -19,
        "null bdev 'Malloc0' not found",
    );

    let all = r.ok("bdev_get_bdevs", Value::Null);
    assert_eq!(all.as_array().unwrap().len(), 3);
    let m0 = &r.ok("bdev_get_bdevs", json!({"name": "Malloc0"}))[0];
    for key in [
        "name",
        "aliases",
        "product_name",
        "block_size",
        "num_blocks",
        "uuid",
        "assigned_rate_limits",
        "claimed",
        "zoned",
        "supported_io_types",
        "driver_specific",
    ] {
        assert!(m0.get(key).is_some(), "bdev_get_bdevs lacks {key}: {m0}");
    }
    assert_eq!(m0["product_name"], "Malloc disk");
    assert_eq!(m0["num_blocks"], 2048);
    assert_eq!(m0["claimed"], false);
    assert_eq!(m0["supported_io_types"]["read"], true);
    assert_eq!(m0["supported_io_types"]["nvme_admin"], false);
    assert_code(
        &r.err("bdev_get_bdevs", json!({"name": "nope"})),
        -19,
        "nope",
    );
    assert_code(
        &r.err("bdev_get_bdevs", json!({"name": "nope", "timeout": 30})),
        -110,
        "nope",
    );

    let io = r.ok("bdev_get_iostat", json!({"names": ["Malloc0", "Null0"]}));
    assert_eq!(io["bdevs"].as_array().unwrap().len(), 2);
    assert_eq!(io["bdevs"][0]["num_read_ops"], 0);
    assert_code(
        &r.err("bdev_get_iostat", json!({"names": ["nope"]})),
        -19,
        "nope",
    );
    assert_code(
        &r.err("bdev_get_iostat", json!({"per_channel": true})),
        -32602,
        "Bdev name is required",
    );
    let pc = r.ok(
        "bdev_get_iostat",
        json!({"name": "Malloc0", "per_channel": true}),
    );
    assert_eq!(pc["name"], "Malloc0");
    assert!(pc["channels"].is_array(), "{pc}");
    assert_eq!(
        r.ok(
            "bdev_get_iostat",
            json!({"names": ["Malloc0"], "reset_mode": "all"})
        )["bdevs"][0]["min_read_latency_ticks"],
        0
    );
    let h = r.ok("bdev_get_latency_histogram", json!({}));
    let bounds = h["bucket_upper_bounds_us"].as_array().unwrap();
    assert_eq!((bounds[0].as_u64(), bounds[3].as_u64()), (Some(1), Some(8)));
    let names: Vec<&str> = h["bdevs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"Malloc0") && names.contains(&"Null0"),
        "{h}"
    );
    assert_eq!(
        h["bdevs"][0]["read"]["buckets"].as_array().unwrap().len(),
        bounds.len() + 1,
        "one more bucket than bounds (the unbounded one): {h}"
    );
    assert_code(
        &r.err("bdev_get_latency_histogram", json!({"name": "nope"})),
        -19,
        "nope",
    );
    assert_code(
        &r.err("bdev_get_latency_histogram", json!({"bogus": 1})),
        -32603,
        "",
    );
    assert_eq!(r.ok("bdev_reset_iostat", json!({})), json!(true));
    assert_eq!(
        r.ok(
            "bdev_reset_iostat",
            json!({"name": "Null0", "mode": "maxmin"})
        ),
        json!(true)
    );
    assert_code(
        &r.err("bdev_reset_iostat", json!({"name": "nope"})),
        -19,
        "nope",
    );

    // Deleting with the wrong kind's method finds nothing.
    assert_code(
        &r.err("bdev_null_delete", json!({"name": "Malloc0"})),
        -19,
        "Malloc0",
    );
    assert_eq!(
        r.ok("bdev_malloc_delete", json!({"name": "Malloc0"})),
        json!(true)
    );
    assert_code(
        &r.err("bdev_malloc_delete", json!({"name": "Malloc0"})),
        -19,
        "Malloc0",
    );
    assert_eq!(
        r.ok("bdev_null_delete", json!({"name": "Null0"})),
        json!(true)
    );
    assert_eq!(r.ok("bdev_wait_for_examine", Value::Null), json!(true));
}

#[test]
fn aio_bdev_over_a_file() {
    let r = Rig::runtime();
    let path = std::env::temp_dir().join(format!("rtgt-aio-{}.img", std::process::id()));
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let file = path.to_str().unwrap();
    assert_eq!(
        r.ok(
            "bdev_aio_create",
            json!({"filename": file, "name": "aio0", "block_size": 512,
                                       "readonly": false, "fallocate": false, "nowait": false})
        ),
        json!("aio0")
    );
    let b = &r.ok("bdev_get_bdevs", json!({"name": "aio0"}))[0];
    assert_eq!(b["product_name"], "AIO disk");
    assert_eq!(b["num_blocks"], 2048);
    assert_eq!(b["driver_specific"]["aio"]["filename"], file);
    assert_code(
        &r.err(
            "bdev_aio_create",
            json!({"filename": "/nonexistent/x", "name": "aio1"}),
        ),
        -2,
        "/nonexistent/x",
    );
    assert_eq!(
        r.ok("bdev_aio_delete", json!({"name": "aio0"})),
        json!(true)
    );

    // SPDK's uring bdev: the same file through io_uring only, shown and saved as uring.
    assert_eq!(
        r.ok(
            "bdev_uring_create",
            json!({"filename": file, "name": "uring0", "block_size": 512})
        ),
        json!("uring0")
    );
    let b = &r.ok("bdev_get_bdevs", json!({"name": "uring0"}))[0];
    assert_eq!(b["product_name"], "URING bdev");
    assert_eq!(b["driver_specific"], json!({"uring": {"filename": file}}));
    let cfg = r.ok("framework_get_config", json!({"name": "bdev"}));
    let entry = cfg
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["params"]["name"] == "uring0")
        .unwrap();
    assert_eq!(entry["method"], "bdev_uring_create");
    assert_eq!(entry["params"]["filename"], file);
    assert_code(
        &r.err("bdev_aio_delete", json!({"name": "uring0"})),
        -19,
        "uring0",
    );
    assert_eq!(
        r.ok("bdev_uring_delete", json!({"name": "uring0"})),
        json!(true)
    );
    let _ = std::fs::remove_file(&path);
}

/// The delay bdev: SPDK's parameters, results and error codes, the claim on its base, latency
/// updates, and deletion (its namespaces first, then the claim on the base is released).
#[test]
fn delay_bdev_create_update_delete_and_errors() {
    let r = Rig::runtime();
    r.malloc("Malloc0");
    r.malloc("Malloc1");
    let create = |name: &str, base: &str, lat: [u64; 4]| {
        json!({"base_bdev_name": base, "name": name, "avg_read_latency": lat[0],
               "p99_read_latency": lat[1], "avg_write_latency": lat[2],
               "p99_write_latency": lat[3]})
    };
    assert_eq!(
        r.ok(
            "bdev_delay_create",
            create("Delay0", "Malloc0", [10, 20, 30, 40])
        ),
        json!("Delay0")
    );
    let d = &r.ok("bdev_get_bdevs", json!({"name": "Delay0"}))[0];
    assert_eq!(d["product_name"], "delay");
    assert_eq!(
        (&d["block_size"], &d["num_blocks"]),
        (&json!(512), &json!(2048))
    );
    assert_eq!(d["claimed"], false);
    assert_eq!(d["supported_io_types"]["unmap"], true);
    let uuid = d["uuid"].as_str().unwrap().to_string();
    assert_eq!(
        d["driver_specific"],
        json!({"delay": {"name": "Delay0", "base_bdev_name": "Malloc0", "uuid": uuid,
                         "avg_read_latency": 10, "p99_read_latency": 20,
                         "avg_write_latency": 30, "p99_write_latency": 40}})
    );
    let m = &r.ok("bdev_get_bdevs", json!({"name": "Malloc0"}))[0];
    assert_eq!(m["claimed"], true);
    assert_eq!(
        m["claimed_by"],
        json!({"module": "bdev_delay", "holder": "Delay0"})
    );

    // Creation errors: SPDK's errno codes, messages naming the bdev.
    assert_code(
        &r.err("bdev_delay_create", create("Delay0", "Malloc1", [0; 4])),
        -17,
        "Delay0",
    );
    assert_code(
        &r.err("bdev_delay_create", create("Delay1", "Nope", [0; 4])),
        -19,
        "Nope",
    );
    assert_code(
        &r.err("bdev_delay_create", create("Delay1", "Malloc0", [0; 4])),
        -1,
        "Malloc0",
    );
    assert_code(
        &r.err(
            "bdev_delay_create",
            create("Delay1", "Malloc1", [5, 4, 0, 0]),
        ),
        -22,
        "Delay1",
    );
    assert_code(
        &r.err(
            "bdev_delay_create",
            create("Delay1", "Malloc1", [0, 0, 5, 4]),
        ),
        -22,
        "p99 write latency",
    );
    for bad in [
        json!({"base_bdev_name": "Malloc1", "name": "Delay1"}),
        json!({"base_bdev_name": "Malloc1", "name": "Delay1", "avg_read_latency": -1,
               "p99_read_latency": 0, "avg_write_latency": 0, "p99_write_latency": 0}),
        {
            let mut c = create("Delay1", "Malloc1", [0; 4]);
            c["uuid"] = json!("not-a-uuid");
            c
        },
    ] {
        assert_code(
            &r.err("bdev_delay_create", bad),
            -32603,
            "spdk_json_decode_object failed",
        );
    }
    assert_eq!(
        r.ok("bdev_get_bdevs", json!({"name": "Malloc1"}))[0]["claimed"],
        false,
        "failed creations leave the base free"
    );
    let u = "3f9c4a9b-1f0e-4a63-9d7e-2a4c5e6f7a8b";
    let mut c = create("Delay1", "Malloc1", [0; 4]);
    c["uuid"] = json!(u);
    assert_eq!(r.ok("bdev_delay_create", c), json!("Delay1"));
    assert_eq!(
        r.ok("bdev_get_bdevs", json!({"name": "Delay1"}))[0]["uuid"],
        u
    );

    // Latency updates.
    let update = |name: &str, ty: &str, us: i64| json!({"delay_bdev_name": name, "latency_type": ty, "latency_us": us});
    for (ty, us) in [
        ("avg_read", 200_000),
        ("p99_read", 1),
        ("avg_write", 3),
        ("p99_write", 4),
    ] {
        assert_eq!(
            r.ok("bdev_delay_update_latency", update("Delay0", ty, us)),
            json!(true)
        );
    }
    assert_eq!(
        r.ok("bdev_get_bdevs", json!({"name": "Delay0"}))[0]["driver_specific"]["delay"]["avg_read_latency"],
        200_000,
        "no p99 >= avg check on update (SPDK has none)"
    );
    assert_code(
        &r.err("bdev_delay_update_latency", update("Delay0", "max_read", 1)),
        -32603,
        "spdk_json_decode_object failed",
    );
    assert_code(
        &r.err(
            "bdev_delay_update_latency",
            update("Delay0", "avg_read", -1),
        ),
        -32603,
        "spdk_json_decode_object failed",
    );
    assert_code(
        &r.err("bdev_delay_update_latency", update("Nope", "avg_read", 1)),
        -32602,
        "Nope",
    );
    assert_code(
        &r.err(
            "bdev_delay_update_latency",
            update("Malloc1", "avg_read", 1),
        ),
        -32602,
        "The requested bdev does not exist",
    );

    // The claimed base cannot be deleted; deleting the delay bdev removes its namespace and
    // releases the base.
    assert_code(
        &r.err("bdev_malloc_delete", json!({"name": "Malloc0"})),
        -1,
        "Delay0",
    );
    r.subsystem(NQN);
    r.ok(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Delay0"}}),
    );
    assert_eq!(
        r.ok("bdev_delay_delete", json!({"name": "Delay0"})),
        json!(true)
    );
    let s = &r.ok("nvmf_get_subsystems", json!({"nqn": NQN}))[0];
    assert_eq!(s["namespaces"], json!([]));
    assert_eq!(
        r.ok("bdev_get_bdevs", json!({"name": "Malloc0"}))[0]["claimed"],
        false
    );
    assert_code(
        &r.err("bdev_delay_delete", json!({"name": "Delay0"})),
        -19,
        "Delay0",
    );
    assert_code(
        &r.err("bdev_delay_delete", json!({"name": "Malloc1"})),
        -19,
        "Malloc1",
    );
    assert_code(
        &r.err("bdev_delay_delete", json!({})),
        -32603,
        "spdk_json_decode_object failed",
    );
    assert_eq!(
        r.ok("bdev_malloc_delete", json!({"name": "Malloc0"})),
        json!(true)
    );
}

#[test]
fn subsystems_namespaces_hosts_and_errors() {
    let r = Rig::runtime();
    r.malloc("Malloc0");
    r.malloc("Malloc1");
    r.subsystem(NQN);
    assert_code(
        &r.err("nvmf_create_subsystem", json!({"nqn": NQN})),
        -32603,
        NQN,
    );
    assert_code(
        &r.err(
            "nvmf_create_subsystem",
            json!({"nqn": "nqn.16-06.io.spdk:x"}),
        ),
        -32603,
        "Unable to create subsystem nqn.16-06.io.spdk:x",
    );
    assert_code(
        &r.err(
            "nvmf_create_subsystem",
            json!({"nqn": NQN2, "serial_number": "x".repeat(21)}),
        ),
        -32602,
        "SN",
    );
    assert_code(
        &r.err(
            "nvmf_create_subsystem",
            json!({"nqn": NQN2, "min_cntlid": 5, "max_cntlid": 4}),
        ),
        -32602,
        "Invalid cntlid range [5-4]",
    );
    assert_code(
        &r.err(
            "nvmf_create_subsystem",
            json!({"nqn": NQN2, "tgt_name": "other"}),
        ),
        -32603,
        "Unable to find target other",
    );
    assert_code(
        &r.err("nvmf_create_subsystem", json!({})),
        -32602,
        "Invalid parameters",
    );
    assert_code(
        &r.err(
            "nvmf_create_subsystem",
            json!({"nqn": NQN2, "unknown_key": 1}),
        ),
        -32602,
        "Invalid parameters",
    );

    // Namespaces.
    assert_eq!(
        r.ok(
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0", "no_auto_visible": false,
                                               "hide_metadata": false}})
        ),
        json!(1)
    );
    r.subsystem(NQN2);
    assert_code(
        &r.err(
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN2, "namespace": {"bdev_name": "Malloc0"}}),
        ),
        -32602,
        "Malloc0",
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": "Nope"}}),
        ),
        -32602,
        "Nope",
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc1", "nsid": 1}}),
        ),
        -32602,
        "NSID 1",
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc1", "nguid": "12"}}),
        ),
        -32602,
        "Invalid nguid",
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_add_ns",
            json!({"nqn": "nqn.2016-06.io.spdk:none", "namespace": {"bdev_name": "Malloc1"}}),
        ),
        -32602,
        "Subsystem with NQN 'nqn.2016-06.io.spdk:none' not found",
    );
    assert_eq!(
        r.ok(
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc1", "nsid": 5,
                                               "eui64": "0123456789abcdef"}})
        ),
        json!(5)
    );
    let claimed = &r.ok("bdev_get_bdevs", json!({"name": "Malloc0"}))[0];
    assert_eq!(claimed["claimed"], true);
    assert_eq!(claimed["claim_type"], "exclusive_write");

    // Hosts.
    assert_eq!(
        r.ok("nvmf_subsystem_add_host", json!({"nqn": NQN, "host": HOST})),
        json!(true)
    );
    assert_code(
        &r.err("nvmf_subsystem_add_host", json!({"nqn": NQN, "host": HOST})),
        -32603,
        HOST,
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_add_host",
            json!({"nqn": NQN, "host": HOST, "dhchap_key": "k0"}),
        ),
        -32602,
        "Key 'k0' does not exist",
    );
    assert_eq!(
        r.ok(
            "nvmf_subsystem_allow_any_host",
            json!({"nqn": NQN, "allow_any_host": false})
        ),
        json!(true)
    );

    let s = &r.ok("nvmf_get_subsystems", json!({"nqn": NQN}))[0];
    assert_eq!(s["subtype"], "NVMe");
    assert_eq!(s["state"], "active");
    assert_eq!(s["allow_any_host"], false);
    assert_eq!(s["hosts"], json!([{"nqn": HOST}]));
    assert_eq!(s["serial_number"], "SPDK00000000000001");
    assert_eq!(s["model_number"], "SPDK_Controller1");
    assert_eq!(s["namespaces"][0]["nsid"], 1);
    assert_eq!(s["namespaces"][0]["bdev_name"], "Malloc0");
    assert_eq!(s["namespaces"][0]["name"], "Malloc0");
    assert_eq!(s["namespaces"][1]["eui64"], "0123456789ABCDEF");
    assert_eq!(
        s["namespaces"][0]["uuid"],
        r.ok("bdev_get_bdevs", json!({"name": "Malloc0"}))[0]["uuid"]
    );
    let all = r.ok("nvmf_get_subsystems", Value::Null);
    assert_eq!(all[0]["nqn"], "nqn.2014-08.org.nvmexpress.discovery");
    assert_eq!(all[0]["subtype"], "Discovery");
    assert_eq!(all.as_array().unwrap().len(), 3);
    assert_code(
        &r.err(
            "nvmf_get_subsystems",
            json!({"nqn": "nqn.2016-06.io.spdk:none"}),
        ),
        -32602,
        "not found",
    );

    assert_eq!(
        r.ok("nvmf_subsystem_get_controllers", json!({"nqn": NQN})),
        json!([])
    );
    assert_eq!(
        r.ok("nvmf_subsystem_get_qpairs", json!({"nqn": NQN})),
        json!([])
    );
    assert_eq!(
        r.ok("nvmf_subsystem_get_listeners", json!({"nqn": NQN})),
        json!([])
    );
    let stats = r.ok("nvmf_get_stats", Value::Null);
    assert_eq!(stats["poll_groups"].as_array().unwrap().len(), 2);

    // Removal.
    assert_code(
        &r.err("nvmf_subsystem_remove_ns", json!({"nqn": NQN, "nsid": 9})),
        -32602,
        "9",
    );
    assert_eq!(
        r.ok("nvmf_subsystem_remove_ns", json!({"nqn": NQN, "nsid": 5})),
        json!(true)
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_remove_host",
            json!({"nqn": NQN, "host": "nqn.2016-06.io.spdk:h"}),
        ),
        -32603,
        "nqn.2016-06.io.spdk:h",
    );
    assert_eq!(
        r.ok(
            "nvmf_subsystem_remove_host",
            json!({"nqn": NQN, "host": HOST})
        ),
        json!(true)
    );
    assert_eq!(
        r.ok("nvmf_delete_subsystem", json!({"nqn": NQN})),
        json!(true)
    );
    assert_code(
        &r.err("nvmf_delete_subsystem", json!({"nqn": NQN})),
        -32602,
        NQN,
    );
    // The namespace's bdev was released with the subsystem.
    assert_eq!(
        r.ok("bdev_get_bdevs", json!({"name": "Malloc0"}))[0]["claimed"],
        false
    );
}

#[test]
fn deleting_an_exported_bdev_removes_its_namespace() {
    let r = Rig::runtime();
    r.malloc("Malloc0");
    r.subsystem(NQN);
    r.ok(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}}),
    );
    assert_eq!(
        r.ok("bdev_malloc_delete", json!({"name": "Malloc0"})),
        json!(true)
    );
    let s = &r.ok("nvmf_get_subsystems", json!({"nqn": NQN}))[0];
    assert_eq!(s["namespaces"], json!([]));
    assert_eq!(s["state"], "active");
}

#[test]
fn transports_and_listeners_report_clear_errors() {
    let r = Rig::runtime();
    r.subsystem(NQN);
    assert_code(
        &r.err("nvmf_create_transport", json!({"trtype": "FOO"})),
        -32602,
        "Invalid transport type 'FOO'",
    );
    assert_code(
        &r.err(
            "nvmf_create_transport",
            json!({"trtype": "RDMA", "max_queue_depth": -1}),
        ),
        -32602,
        "max_queue_depth",
    );
    assert_code(&r.err("nvmf_create_transport", json!({})), -32602, "trtype");
    assert_code(
        &r.err(
            "nvmf_create_transport",
            json!({"trtype": "RDMA", "tgt_name": "x"}),
        ),
        -32603,
        "Unable to find a target.",
    );
    assert_eq!(r.ok("nvmf_get_transports", Value::Null), json!([]));
    assert_code(
        &r.err("nvmf_get_transports", json!({"trtype": "RDMA"})),
        -19,
        "RDMA",
    );
    let addr = json!({"trtype": "rdma", "traddr": "10.0.0.1", "trsvcid": "4420"});
    assert_code(
        &r.err(
            "nvmf_subsystem_add_listener",
            json!({"nqn": NQN, "listen_address": addr}),
        ),
        -32602,
        "transport",
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_add_listener",
            json!({"nqn": NQN, "listen_address": addr, "secure_channel": true}),
        ),
        -32603,
        "Cannot establish secure channel",
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_add_listener",
            json!({"nqn": NQN, "listen_address": {"trtype": "rdma", "traddr": "x", "bogus": 1}}),
        ),
        -32602,
        "Invalid parameters",
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_remove_listener",
            json!({"nqn": NQN, "listen_address": addr}),
        ),
        -32602,
        "not found",
    );
}

#[test]
fn pause_and_resume_show_in_the_state() {
    let r = Rig::runtime();
    r.malloc("Malloc0");
    r.subsystem(NQN);
    r.ok(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}}),
    );
    assert_eq!(
        r.ok("nvmf_subsystem_pause", json!({"nqn": NQN})),
        json!(true)
    );
    assert_eq!(
        r.ok("nvmf_get_subsystems", json!({"nqn": NQN}))[0]["state"],
        "paused"
    );
    // Configuration changes are still accepted while paused; the subsystem stays paused.
    r.malloc("Malloc1");
    assert_eq!(
        r.ok(
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc1"}})
        ),
        json!(2)
    );
    assert_eq!(
        r.ok("nvmf_get_subsystems", json!({"nqn": NQN}))[0]["state"],
        "paused"
    );
    assert_eq!(
        r.ok("nvmf_subsystem_resume", json!({"nqn": NQN})),
        json!(true)
    );
    assert_eq!(
        r.ok("nvmf_get_subsystems", json!({"nqn": NQN}))[0]["state"],
        "active"
    );
    assert_eq!(
        r.ok("nvmf_subsystem_pause", json!({"nqn": NQN, "nsid": 1})),
        json!(true)
    );
    assert_eq!(
        r.ok("nvmf_subsystem_resume", json!({"nqn": NQN})),
        json!(true)
    );
    assert_code(
        &r.err("nvmf_subsystem_pause", json!({"nqn": NQN, "nsid": 7})),
        -32602,
        "7",
    );
    assert_code(
        &r.err("nvmf_subsystem_pause", json!({"nqn": NQN, "nsid": 0})),
        -32602,
        "nsid 0",
    );
    assert_code(
        &r.err("nvmf_subsystem_pause", json!({"nqn": NQN2})),
        -32602,
        NQN2,
    );
    assert_code(
        &r.err("nvmf_subsystem_resume", json!({})),
        -32602,
        "Invalid parameters",
    );
}

#[test]
fn startup_methods_and_state_errors() {
    let r = Rig::new(RpcState::Startup);
    // RUNTIME-only methods are refused in STARTUP with SPDK's -1.
    assert_code(
        &r.err("bdev_get_bdevs", Value::Null),
        -1,
        "framework_start_init",
    );
    assert_eq!(
        r.ok("nvmf_set_max_subsystems", json!({"max_subsystems": 64})),
        json!(true)
    );
    assert_code(
        &r.err("nvmf_set_max_subsystems", json!({"max_subsystems": 65})),
        -32603,
        "Must not call more than once",
    );
    assert_eq!(
        r.ok(
            "nvmf_set_config",
            json!({"discovery_filter": "match_any",
                   "admin_cmd_passthru": {"identify_ctrlr": false}})
        ),
        json!(true)
    );
    assert_code(
        &r.err("nvmf_set_config", json!({"bogus": 1})),
        -32602,
        "bogus",
    );
    assert_code(
        &r.err(
            "nvmf_set_config",
            json!({"admin_cmd_passthru": {"bogus": true}}),
        ),
        -32602,
        "admin_cmd_passthru",
    );
    assert_code(
        &r.err("nvmf_set_config", json!({"dhchap_digests": ["md5"]})),
        -32602,
        "md5",
    );
    assert_eq!(r.ok("nvmf_set_crdt", json!({"crdt1": 0})), json!(true));
    assert_eq!(
        r.ok(
            "iobuf_set_options",
            json!({"small_pool_count": 8192, "large_pool_count": 1024})
        ),
        json!(true)
    );
    assert_code(
        &r.err("iobuf_set_options", json!({"small_pool_count": "many"})),
        -32602,
        "small_pool_count",
    );
    assert_code(
        &r.err("sock_impl_set_options", json!({"recv_buf_size": 1})),
        -32602,
        "impl_name",
    );
    assert_code(
        &r.err("framework_set_scheduler", json!({"name": "dynamic"})),
        -32602,
        "static",
    );
    assert_eq!(
        r.ok("framework_set_scheduler", json!({"name": "static"})),
        json!(true)
    );
    assert_eq!(r.ok("framework_start_init", Value::Null), json!(true));
    assert_eq!(r.state.get(), RpcState::Runtime);
    // And STARTUP-only methods are refused afterwards.
    assert_code(&r.err("nvmf_set_config", json!({})), -1, "--wait-for-rpc");
    assert_code(
        &r.err("framework_start_init", Value::Null),
        -1,
        "before framework",
    );
    let nvmf = r.ok("framework_get_config", json!({"name": "nvmf"}));
    assert_eq!(nvmf[0]["method"], "nvmf_set_config");
    assert_eq!(
        nvmf[0]["params"]["admin_cmd_passthru"]["identify_ctrlr"],
        false
    );
    assert_eq!(nvmf[0]["params"]["discovery_filters"], json!([]));
    assert_eq!(nvmf[1]["params"]["max_subsystems"], 64);
    assert_eq!(
        nvmf[2]["params"],
        json!({"crdt1": 0, "crdt2": 0, "crdt3": 0})
    );
    // SPDK's defaults were accepted without effect and are not saved.
    assert_eq!(
        r.ok("framework_get_config", json!({"name": "iobuf"})),
        json!([])
    );
}

/// `nvmf_ns_add_host` / `nvmf_ns_remove_host` with SPDK's parameters and errors; the per-host
/// visibility itself is tested with initiators in nvmf_masking.rs and srp_masking.rs.
#[test]
fn namespace_hosts() {
    let r = Rig::runtime();
    r.malloc("Malloc0");
    r.malloc("Malloc1");
    r.subsystem(NQN);
    let add_ns = |bdev: &str, hidden: bool| {
        r.ok(
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": bdev, "no_auto_visible": hidden}}),
        )
    };
    assert_eq!(add_ns("Malloc0", false), json!(1));
    assert_eq!(add_ns("Malloc1", true), json!(2));
    let call =
        |method: &str, nsid: u32| r.call(method, json!({"nqn": NQN, "nsid": nsid, "host": HOST}));
    assert_eq!(call("nvmf_ns_add_host", 2).unwrap(), json!(true));
    assert_eq!(
        call("nvmf_ns_add_host", 2).unwrap(),
        json!(true),
        "twice: no-op"
    );
    // The namespace and its hosts are saved; the first namespace has none.
    let saved = r.ok("framework_get_config", json!({"name": "nvmf"}));
    let ns_hosts: Vec<&Value> = saved
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["method"] == "nvmf_ns_add_host")
        .collect();
    assert_eq!(ns_hosts.len(), 1, "{saved}");
    assert_eq!(
        ns_hosts[0]["params"],
        json!({"nqn": NQN, "nsid": 2, "host": HOST})
    );
    assert_eq!(call("nvmf_ns_remove_host", 2).unwrap(), json!(true));
    assert_eq!(
        call("nvmf_ns_remove_host", 2).unwrap(),
        json!(true),
        "not there: no-op"
    );
    let saved = r.ok("framework_get_config", json!({"name": "nvmf"}));
    assert!(!saved.to_string().contains("nvmf_ns_add_host"), "{saved}");
    // SPDK refuses per-host visibility of an auto-visible namespace, and unknown namespaces.
    assert_code(
        &call("nvmf_ns_add_host", 1).unwrap_err(),
        -32602,
        "no_auto_visible",
    );
    assert_code(
        &call("nvmf_ns_remove_host", 1).unwrap_err(),
        -32602,
        "no_auto_visible",
    );
    assert_code(
        &call("nvmf_ns_add_host", 9).unwrap_err(),
        -32602,
        "Namespace 9 not found",
    );
    assert_code(
        &r.err("nvmf_ns_add_host", json!({"nqn": NQN, "nsid": 2})),
        -32602,
        "",
    );
}

/// Builds a configuration through the methods, saves it, loads the saved file into a fresh
/// target the way `rtgt serve --json` does, and saves again: the two must be identical.
#[test]
fn save_load_save_round_trip() {
    let a = Rig::new(RpcState::Startup);
    a.ok("nvmf_set_max_subsystems", json!({"max_subsystems": 100}));
    a.ok("framework_start_init", Value::Null);
    a.malloc("Malloc0");
    a.malloc("Malloc1");
    a.ok(
        "bdev_null_create",
        json!({"name": "Null0", "num_blocks": 64, "block_size": 4096}),
    );
    a.malloc("Malloc2");
    a.ok(
        "bdev_delay_create",
        json!({"base_bdev_name": "Malloc2", "name": "Delay0", "avg_read_latency": 0,
               "p99_read_latency": 0, "avg_write_latency": 10, "p99_write_latency": 20}),
    );
    a.ok(
        "bdev_delay_update_latency",
        json!({"delay_bdev_name": "Delay0", "latency_type": "avg_read", "latency_us": 5}),
    );
    a.subsystem(NQN);
    a.ok(
        "nvmf_create_subsystem",
        json!({"nqn": NQN2, "max_namespaces": 8, "min_cntlid": 3,
               "max_cntlid": 9, "admin_label": "rack-1"}),
    );
    a.ok(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}}),
    );
    a.ok(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN2, "namespace": {"bdev_name": "Malloc1", "nsid": 4,
                                           "eui64": "0011223344556677",
                                           "no_auto_visible": true}}),
    );
    a.ok(
        "nvmf_ns_add_host",
        json!({"nqn": NQN2, "nsid": 4, "host": HOST}),
    );
    a.ok(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Null0"}}),
    );
    a.ok(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Delay0"}}),
    );
    a.ok(
        "nvmf_subsystem_add_host",
        json!({"nqn": NQN2, "host": HOST}),
    );
    let saved = a.save();

    // The nvmf section follows SPDK HEAD's order.
    let nvmf = saved_section(&saved, "nvmf")
        .iter()
        .map(|c| c["method"].as_str().unwrap().to_string())
        .collect::<Vec<_>>();
    assert_eq!(
        nvmf,
        [
            "nvmf_set_config",
            "nvmf_set_max_subsystems",
            "nvmf_set_crdt",
            "nvmf_create_subsystem",
            "nvmf_create_subsystem",
            "nvmf_subsystem_add_host",
            "nvmf_subsystem_add_ns",
            "nvmf_subsystem_add_ns",
            "nvmf_subsystem_add_ns",
            "nvmf_subsystem_add_ns",
            "nvmf_ns_add_host",
        ]
    );
    // The bdev section creates each delay bdev after its base, with the latencies in force.
    let bdev = saved_section(&saved, "bdev");
    let creates: Vec<&str> = bdev
        .iter()
        .filter_map(|c| c["params"]["name"].as_str())
        .collect();
    assert_eq!(
        creates,
        ["Malloc0", "Malloc1", "Null0", "Malloc2", "Delay0"],
        "{bdev:?}"
    );
    let delay = bdev
        .iter()
        .find(|c| c["method"] == "bdev_delay_create")
        .unwrap();
    assert_eq!(delay["params"]["base_bdev_name"], "Malloc2");
    assert_eq!(delay["params"]["avg_read_latency"], 5);
    assert_eq!(
        delay["params"]["p99_read_latency"], 5,
        "a p99 left below its average is saved as the average (bdev_delay_create refuses less)"
    );
    assert_eq!(delay["params"]["p99_write_latency"], 20);

    let text = serde_json::to_string_pretty(&saved).unwrap();
    let cfg = load::parse(&text).unwrap();
    let b = Rig::new(RpcState::Startup);
    let startup = b.tt.rt.block_on(load::apply(&b.table, &cfg)).unwrap();
    assert_eq!(startup, 3, "the nvmf globals");
    b.state.set(RpcState::Runtime);
    let runtime = b.tt.rt.block_on(load::apply(&b.table, &cfg)).unwrap();
    assert_eq!(runtime, 14);
    assert_eq!(b.save(), saved);
    let again = serde_json::to_string_pretty(&b.save()).unwrap();
    assert_eq!(again, text, "save → load → save is byte-identical");
}

#[test]
fn loading_stops_at_the_first_error_and_names_it() {
    let r = Rig::runtime();
    let cfg = load::parse(
        r#"{"subsystems": [
            {"subsystem": "nbd", "config": [{"method": "nbd_start_disk", "params": {}}]},
            {"subsystem": "bdev", "config": [
                {"method": "bdev_malloc_create", "params": {"name": "M", "num_blocks": 8, "block_size": 512}},
                /* a duplicate */
                {"method": "bdev_malloc_create", "params": {"name": "M", "num_blocks": 8, "block_size": 512}},
                {"method": "bdev_wait_for_examine"}
            ]}
        ]}"#,
    )
    .unwrap();
    let e = r.tt.rt.block_on(load::apply(&r.table, &cfg)).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("bdev_malloc_create") && text.contains("-17"),
        "{text}"
    );
    let unknown = load::parse(
        r#"{"subsystems": [{"subsystem": "bdev", "config": [{"method": "bdev_lvol_create"}]}]}"#,
    )
    .unwrap();
    let e =
        r.tt.rt
            .block_on(load::apply(&r.table, &unknown))
            .unwrap_err();
    assert!(
        e.to_string().contains("'bdev_lvol_create' was not found"),
        "{e}"
    );
}

#[test]
fn keyring_keys_are_checked_listed_and_saved() {
    use std::os::unix::fs::PermissionsExt;
    let r = Rig::runtime();
    let path = std::env::temp_dir().join(format!("rtgt-psk-{}", std::process::id()));
    std::fs::write(
        &path,
        "NVMeTLSkey-1:01:MDAxMTIyMzM0NDU1NjY3Nzg4OTlhYWJiY2NkZGVlZmZwJEiQ:",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let p = path.to_str().unwrap();
    assert_eq!(
        r.ok("keyring_file_add_key", json!({"name": "key0", "path": p})),
        json!(true)
    );
    assert_code(
        &r.err("keyring_file_add_key", json!({"name": "key0", "path": p})),
        -17,
        "key0",
    );
    assert_eq!(r.ok("keyring_get_keys", Value::Null)[0]["name"], "key0");
    assert_eq!(
        r.ok("framework_get_config", json!({"name": "keyring"})),
        json!([{"method": "keyring_file_add_key", "params": {"name": "key0", "path": p}}])
    );
    r.subsystem(NQN);
    assert_code(
        &r.err(
            "nvmf_subsystem_add_host",
            json!({"nqn": NQN, "host": HOST, "dhchap_key": "key0"}),
        ),
        -32602,
        "DH-HMAC-CHAP",
    );
    assert_eq!(
        r.ok("keyring_file_remove_key", json!({"name": "key0"})),
        json!(true)
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn rdma_transport_listeners_through_the_methods() {
    let r = Rig::runtime();
    assert_eq!(
        r.ok(
            "nvmf_create_transport",
            json!({"trtype": "RDMA", "max_io_size": 131072, "in_capsule_data_size": 8192,
                    "io_unit_size": 8192, "c2h_success": true, "zcopy": false})
        ),
        json!(true)
    );
    assert_code(
        &r.err("nvmf_create_transport", json!({"trtype": "rdma"})),
        -32603,
        "already exists",
    );
    let tr = r.ok("nvmf_get_transports", json!({"trtype": "rdma"}));
    assert_eq!(tr[0]["trtype"], "RDMA");
    assert_eq!(tr[0]["max_io_size"], 131072);
    r.malloc("Malloc0");
    r.subsystem(NQN);
    r.ok(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}}),
    );
    let addr = json!({"trtype": "rdma", "traddr": rtgt_tests::TARGET_IP, "trsvcid": "4420"});
    assert_eq!(
        r.ok(
            "nvmf_subsystem_add_listener",
            json!({"nqn": NQN, "listen_address": addr, "secure_channel": false})
        ),
        json!(true)
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_add_listener",
            json!({"nqn": NQN, "listen_address": addr}),
        ),
        -32602,
        "already exists",
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_add_listener",
            json!({"nqn": NQN, "listen_address":
                      {"trtype": "rdma", "traddr": "10.9.9.9", "trsvcid": "4420"}}),
        ),
        -32602,
        "10.9.9.9",
    );
    let want = json!({"trtype": "RDMA", "adrfam": "IPv4", "traddr": rtgt_tests::TARGET_IP,
                      "trsvcid": "4420"});
    assert_eq!(
        r.ok("nvmf_subsystem_get_listeners", json!({"nqn": NQN})),
        json!([{"address": want}])
    );
    assert_eq!(
        r.ok("nvmf_get_subsystems", json!({"nqn": NQN}))[0]["listen_addresses"],
        json!([want])
    );
    r.ok(
        "nvmf_subsystem_add_listener",
        json!({"nqn": "nqn.2014-08.org.nvmexpress.discovery", "listen_address": addr}),
    );
    let stats = r.ok("nvmf_get_stats", Value::Null);
    assert_eq!(stats["poll_groups"][0]["transports"][0]["trtype"], "RDMA");

    // Transport, namespaces and both listeners survive save → load → save.
    let saved = r.save();
    let text = serde_json::to_string_pretty(&saved).unwrap();
    drop(r);
    let b = Rig::new(RpcState::Startup);
    let cfg = load::parse(&text).unwrap();
    b.tt.rt.block_on(load::apply(&b.table, &cfg)).unwrap();
    b.state.set(RpcState::Runtime);
    b.tt.rt.block_on(load::apply(&b.table, &cfg)).unwrap();
    assert_eq!(serde_json::to_string_pretty(&b.save()).unwrap(), text);

    assert_eq!(
        b.ok(
            "nvmf_subsystem_remove_listener",
            json!({"nqn": NQN, "listen_address": addr})
        ),
        json!(true)
    );
    assert_eq!(
        b.ok("nvmf_subsystem_get_listeners", json!({"nqn": NQN})),
        json!([])
    );
}

#[test]
fn srp_port_ids_are_shown_set_and_saved() {
    let r = Rig::runtime();
    // Derived from the NQN when not given (the SRP transport's rule, declared by transport-srp).
    r.ok("nvmf_create_subsystem", json!({"nqn": NQN}));
    let g = transport_srp::port_id::derived_guid(NQN);
    let subs = r.ok("nvmf_get_subsystems", json!({"nqn": NQN}));
    assert_eq!(subs[0]["srp_port_id"], format!("0x{g:016x}{g:016x}"));
    // Set explicitly, in either form.
    r.ok(
        "nvmf_create_subsystem",
        json!({"nqn": NQN2, "srp_port_id": "0002c903000e8acd:0002c903000e8acd"}),
    );
    let subs = r.ok("nvmf_get_subsystems", json!({"nqn": NQN2}));
    assert_eq!(subs[0]["srp_port_id"], "0x0002c903000e8acd0002c903000e8acd");
    let e = r.err(
        "nvmf_create_subsystem",
        json!({"nqn": "nqn.2016-06.io.spdk:cnode3", "srp_port_id": "not-hex"}),
    );
    assert_code(&e, -32602, "srp_port_id");
    // save_config keeps the explicit one only.
    let saved = r.save().to_string();
    assert!(
        saved.contains("\"srp_port_id\":\"0x0002c903000e8acd0002c903000e8acd\""),
        "{saved}"
    );
    assert_eq!(saved.matches("srp_port_id").count(), 1, "{saved}");
}
