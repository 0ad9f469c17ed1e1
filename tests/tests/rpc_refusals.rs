//! Issue 13, "options accepted and ignored": every RPC parameter either works or is refused
//! with `-32602` and a message saying it is not supported, except the values SPDK's own
//! `save_config` and `rpc.py` send by default, which are accepted without effect (and listed
//! in docs/rpc.md). Each refusal below used to be accepted, stored and in most cases saved by
//! `save_config` with no effect on the target. SPDK's own default configuration (HEAD's
//! format here; v24.09's in tests/python/test_config.py) still loads.

use rpc::RpcState;
use rpc::methods::load;
use rtgt_tests::rpc_rig::{Rig, assert_code, saved_section};
use serde_json::{Value, json};

const NQN: &str = "nqn.2016-06.io.spdk:cnode1";

/// Asserts that `method(params)` is refused as not supported, naming `what`.
fn refused(r: &Rig, method: &str, params: Value, what: &str) {
    let e = r.err(method, params.clone());
    assert_code(&e, -32602, what);
    assert!(
        e.message.contains("not supported"),
        "{method} {params}: '{}' does not say it is not supported",
        e.message
    );
}

/// The `nvmf_subsystem_add_ns` entry `save_config` writes.
fn saved_add_ns(r: &Rig) -> Value {
    let saved = r.ok("framework_get_config", json!({"name": "nvmf"}));
    saved
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["method"] == "nvmf_subsystem_add_ns")
        .cloned()
        .unwrap()
}

#[test]
fn namespace_options_without_effect_are_refused() {
    let r = Rig::runtime();
    r.malloc("Malloc0");
    r.subsystem(NQN);
    let ns = |extra: Value| {
        let mut n = json!({"bdev_name": "Malloc0", "nsid": 1});
        n.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"nqn": NQN, "namespace": n})
    };
    refused(
        &r,
        "nvmf_subsystem_add_ns",
        ns(json!({"anagrpid": 5})),
        "anagrpid 5",
    );
    // rpc.py sends these on every call: accepted.
    assert_eq!(
        r.ok(
            "nvmf_subsystem_add_ns",
            ns(json!({"no_auto_visible": false, "hide_metadata": false, "anagrpid": 1}))
        ),
        json!(1)
    );
    let add_ns = saved_add_ns(&r);
    assert_eq!(add_ns["params"]["namespace"]["no_auto_visible"], false);
    assert!(add_ns["params"]["namespace"].get("ptpl_file").is_none());
}

/// `ptpl_file` now works (docs/reservations.md): a file that is not a reservation state in
/// SPDK's format is refused with -32602 naming the file; a missing file is an empty state,
/// and the parameter is saved.
#[test]
fn ptpl_file_is_loaded_and_a_bad_one_refused() {
    let r = Rig::runtime();
    r.malloc("Malloc0");
    r.subsystem(NQN);
    let dir = std::env::temp_dir().join(format!("rtgt-ptpl-rpc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{not json").unwrap();
    let e = r.err(
        "nvmf_subsystem_add_ns",
        json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0", "nsid": 1,
                                          "ptpl_file": bad.to_str().unwrap()}}),
    );
    assert_code(&e, -32602, "bad.json");
    // The refused namespace let go of its bdev: a good file works.
    let good = dir.join("ns1.json");
    assert_eq!(
        r.ok(
            "nvmf_subsystem_add_ns",
            json!({"nqn": NQN, "namespace": {"bdev_name": "Malloc0", "nsid": 1,
                                              "ptpl_file": good.to_str().unwrap()}}),
        ),
        json!(1)
    );
    let add_ns = saved_add_ns(&r);
    assert_eq!(
        add_ns["params"]["namespace"]["ptpl_file"],
        json!(good.to_str().unwrap())
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn subsystem_and_listener_options_without_effect_are_refused() {
    let r = Rig::runtime();
    let sub = |extra: Value| {
        let mut p = json!({"nqn": NQN});
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    };
    refused(
        &r,
        "nvmf_create_subsystem",
        sub(json!({"dmrsl": 1000})),
        "dmrsl 1000",
    );
    refused(
        &r,
        "nvmf_create_subsystem",
        sub(json!({"wzsl": 3})),
        "wzsl 3",
    );
    refused(
        &r,
        "nvmf_create_subsystem",
        sub(json!({"enable_nssr": true})),
        "enable_nssr",
    );
    assert!(
        r.ok("nvmf_get_subsystems", Value::Null)
            .as_array()
            .unwrap()
            .len()
            == 1
    );
    // What rpc.py and SPDK HEAD's save_config send is accepted.
    r.ok(
        "nvmf_create_subsystem",
        sub(
            json!({"allow_any_host": true, "ana_reporting": false, "passthrough": false,
                   "enable_nssr": false, "dmrsl": 2097152, "wzsl": 12}),
        ),
    );
    r.ok("nvmf_create_transport", json!({"trtype": "RDMA"}));
    let listener = |extra: Value| {
        let mut p = json!({"nqn": NQN, "listen_address": {"trtype": "RDMA", "adrfam": "IPv4",
                           "traddr": "10.0.0.1", "trsvcid": "4420"}});
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    };
    refused(
        &r,
        "nvmf_subsystem_add_listener",
        listener(json!({"sock_impl": "posix"})),
        "sock_impl",
    );
    refused(
        &r,
        "nvmf_subsystem_add_listener",
        listener(json!({"numa_id": 0})),
        "numa_id 0",
    );
    // Without ana_reporting every listener is optimized: another state has no effect.
    refused(
        &r,
        "nvmf_subsystem_add_listener",
        listener(json!({"ana_state": "inaccessible"})),
        "ana_state inaccessible",
    );
    r.ok(
        "nvmf_subsystem_add_listener",
        listener(json!({"secure_channel": false, "numa_id": -1, "ana_state": "optimized"})),
    );
}

#[test]
fn target_settings_without_effect_are_refused() {
    let r = Rig::new(RpcState::Startup);
    refused(&r, "nvmf_set_crdt", json!({"crdt1": 5}), "crdt1 5");
    refused(&r, "nvmf_set_crdt", json!({"crdt3": 1}), "crdt3 1");
    r.ok("nvmf_set_crdt", json!({"crdt1": 0, "crdt2": 0, "crdt3": 0}));
    for (params, what) in [
        (
            json!({"admin_cmd_passthru": {"identify_ctrlr": true}}),
            "identify_ctrlr",
        ),
        (json!({"discovery_filter": "transport"}), "transport"),
        (json!({"discovery_filters": ["address"]}), "address"),
        (
            json!({"dup_host_policy": "restrict_per_listener"}),
            "restrict_per_listener",
        ),
    ] {
        refused(&r, "nvmf_set_config", params, what);
    }
    // The rig runs two reactors: a mask naming one of them is refused, both is how it runs.
    let cores: Vec<usize> =
        r.tt.target
            .reactors()
            .info()
            .iter()
            .map(|i| i.core.unwrap_or(i.index))
            .collect();
    let one = target_core::reactor::format_cpumask(&cores[..1]);
    let all = target_core::reactor::format_cpumask(&cores);
    refused(
        &r,
        "nvmf_set_config",
        json!({"poll_groups_mask": one}),
        "poll_groups_mask",
    );
    r.ok(
        "nvmf_set_config",
        json!({"poll_groups_mask": all, "discovery_filter": "match_any",
               "admin_cmd_passthru": {"identify_ctrlr": false},
               "dhchap_digests": ["sha512", "sha384", "sha256"], "dup_host_policy": "allow"}),
    );
}

#[test]
fn setters_of_subsystems_rtgt_lacks_take_only_spdk_defaults() {
    let r = Rig::new(RpcState::Startup);
    for (method, params, what) in [
        (
            "iobuf_set_options",
            json!({"small_pool_count": 4096}),
            "small_pool_count 4096",
        ),
        (
            "iobuf_set_options",
            json!({"enable_numa": true}),
            "enable_numa",
        ),
        (
            "sock_set_default_impl",
            json!({"impl_name": "ssl"}),
            "impl_name",
        ),
        (
            "sock_impl_set_options",
            json!({"impl_name": "posix", "recv_buf_size": 4096}),
            "recv_buf_size 4096",
        ),
        (
            "sock_impl_set_options",
            json!({"impl_name": "posix", "enable_ktls": true}),
            "enable_ktls",
        ),
        ("vmd_enable", Value::Null, "vmd_enable"),
        (
            "accel_set_options",
            json!({"task_count": 1}),
            "task_count 1",
        ),
        (
            "accel_assign_opc",
            json!({"opname": "copy", "module": "software"}),
            "accel_assign_opc",
        ),
        (
            "bdev_set_options",
            json!({"bdev_io_pool_size": 1023}),
            "bdev_io_pool_size",
        ),
        (
            "bdev_set_options",
            json!({"bdev_auto_examine": false}),
            "bdev_auto_examine",
        ),
        (
            "bdev_raid_set_options",
            json!({"process_window_size_kb": 2048}),
            "process_window",
        ),
        (
            "bdev_iscsi_set_options",
            json!({"timeout_sec": 5}),
            "timeout_sec 5",
        ),
        (
            "bdev_nvme_set_options",
            json!({"timeout_us": 5}),
            "timeout_us 5",
        ),
        (
            "bdev_nvme_set_options",
            json!({"multipath_opts": {"policy": "active_active"}}),
            "multipath_opts",
        ),
        (
            "framework_set_scheduler",
            json!({"name": "static", "period": 5}),
            "period 5",
        ),
        (
            "framework_set_scheduler",
            json!({"name": "static", "core_limit": 50}),
            "core_limit",
        ),
        (
            "keyring_linux_set_options",
            json!({"enable": true}),
            "enable true",
        ),
    ] {
        refused(&r, method, params, what);
    }
    r.ok("framework_start_init", Value::Null);
    refused(
        &r,
        "bdev_nvme_set_hotplug",
        json!({"enable": true}),
        "enable true",
    );
    r.ok(
        "bdev_nvme_set_hotplug",
        json!({"enable": false, "period_us": 100000}),
    );
    // Nothing was recorded, so nothing is saved.
    for name in ["iobuf", "sock", "vmd", "accel", "scheduler", "keyring"] {
        assert_eq!(
            r.ok("framework_get_config", json!({"name": name})),
            json!([]),
            "{name}"
        );
    }
}

#[test]
fn bdev_and_framework_options_without_effect_are_refused() {
    let r = Rig::runtime();
    let malloc = |extra: Value| {
        let mut p = json!({"num_blocks": 64, "block_size": 512, "name": "M"});
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    };
    for (extra, what) in [
        (json!({"numa_id": 0}), "numa_id 0"),
        (json!({"optimal_io_boundary": 8}), "optimal_io_boundary 8"),
        (json!({"md_interleave": true}), "md_interleave"),
        (json!({"dif_is_head_of_md": true}), "dif_is_head_of_md"),
    ] {
        refused(&r, "bdev_malloc_create", malloc(extra), what);
    }
    r.ok(
        "bdev_malloc_create",
        malloc(
            json!({"numa_id": -1, "optimal_io_boundary": 0, "md_interleave": false,
                      "dif_is_head_of_md": false, "md_size": 0, "dif_type": 0}),
        ),
    );
    refused(
        &r,
        "bdev_null_create",
        json!({"name": "N", "num_blocks": 64, "block_size": 512, "dif_is_head_of_md": true}),
        "dif_is_head_of_md",
    );
    let e = r.err("framework_wait_init", json!({"anything": 1}));
    assert_code(&e, -32602, "requires no parameters");
}

#[test]
fn transport_options_without_effect_are_refused() {
    let r = Rig::runtime();
    refused(
        &r,
        "nvmf_create_transport",
        json!({"trtype": "RDMA", "sock_priority": 3}),
        "sock_priority",
    );
    refused(
        &r,
        "nvmf_create_transport",
        json!({"trtype": "RDMA", "dif_insert_or_strip": true}),
        "dif_insert_or_strip",
    );
    refused(
        &r,
        "nvmf_create_transport",
        json!({"trtype": "RDMA", "masked_oncs": ["nvmcmps"]}),
        "masked_oncs",
    );
    refused(
        &r,
        "nvmf_create_transport",
        json!({"trtype": "SRP", "in_capsule_data_size": 4096}),
        "in_capsule_data_size",
    );
    // A refused transport is not left half-created.
    assert_eq!(r.ok("nvmf_get_transports", Value::Null), json!([]));
    // rpc.py's defaults for every transport pass.
    let defaults = json!({"zcopy": false, "no_srq": false, "c2h_success": true,
        "dif_insert_or_strip": false, "no_wr_batching": false, "disable_mappable_bar0": false,
        "disable_adaptive_irq": false, "disable_shadow_doorbells": false,
        "disable_command_passthru": false});
    for trtype in ["RDMA", "SRP"] {
        let mut p = defaults.clone();
        p["trtype"] = json!(trtype);
        r.ok("nvmf_create_transport", p);
    }
}

/// What SPDK HEAD's `save_config` writes for an nvmf_tgt with an RDMA transport, a malloc
/// bdev and one subsystem (the writers' field order; only the UUID is ours).
const SPDK_HEAD_CONFIG: &str = r#"{"subsystems": [
  {"subsystem": "keyring", "config": [
    {"method": "keyring_linux_set_options", "params": {"enable": false}}]},
  {"subsystem": "iobuf", "config": [
    {"method": "iobuf_set_options", "params": {"small_pool_count": 8192,
      "large_pool_count": 1024, "small_bufsize": 8192, "large_bufsize": 135168,
      "enable_numa": false}}]},
  {"subsystem": "sock", "config": [
    {"method": "sock_set_default_impl", "params": {"impl_name": "posix"}},
    {"method": "sock_impl_set_options", "params": {"impl_name": "ssl", "recv_buf_size": 4096,
      "send_buf_size": 4096, "enable_recv_pipe": true, "enable_quickack": false,
      "enable_placement_id": 0, "enable_zerocopy_send_server": true,
      "enable_zerocopy_send_client": false, "zerocopy_threshold": 0, "tls_version": 0,
      "enable_ktls": false}},
    {"method": "sock_impl_set_options", "params": {"impl_name": "posix",
      "recv_buf_size": 2097152, "send_buf_size": 2097152, "enable_recv_pipe": true,
      "enable_quickack": false, "enable_placement_id": 0, "enable_zerocopy_send_server": true,
      "enable_zerocopy_send_client": false, "zerocopy_threshold": 0, "tls_version": 0,
      "enable_ktls": false}}]},
  {"subsystem": "vmd", "config": []},
  {"subsystem": "accel", "config": [
    {"method": "accel_set_options", "params": {"small_cache_size": 128, "large_cache_size": 16,
      "task_count": 2048, "sequence_count": 2048, "buf_count": 2048}}]},
  {"subsystem": "bdev", "config": [
    {"method": "bdev_set_options", "params": {"bdev_io_pool_size": 65535,
      "bdev_io_cache_size": 256, "bdev_auto_examine": true, "iobuf_small_cache_size": 128,
      "iobuf_large_cache_size": 16}},
    {"method": "bdev_raid_set_options", "params": {"process_window_size_kb": 1024,
      "process_max_bandwidth_mb_sec": 0}},
    {"method": "bdev_iscsi_set_options", "params": {"timeout_sec": 30}},
    {"method": "bdev_nvme_set_options", "params": {"action_on_timeout": "none",
      "timeout_us": 0, "timeout_admin_us": 0, "keep_alive_timeout_ms": 10000,
      "arbitration_burst": 0, "low_priority_weight": 0, "medium_priority_weight": 0,
      "high_priority_weight": 0, "nvme_adminq_poll_period_us": 10000,
      "nvme_ioq_poll_period_us": 0, "io_queue_requests": 0, "delay_cmd_submit": true,
      "transport_retry_count": 4, "bdev_retry_count": 3, "transport_ack_timeout": 0,
      "ctrlr_loss_timeout_sec": 0, "reconnect_delay_sec": 0, "fast_io_fail_timeout_sec": 0,
      "disable_auto_failback": false, "generate_uuids": false, "transport_tos": 0,
      "nvme_error_stat": false, "rdma_srq_size": 0, "io_path_stat": false,
      "allow_accel_sequence": false, "rdma_max_cq_size": 0, "rdma_cm_event_timeout_ms": 0,
      "dhchap_digests": ["sha256", "sha384", "sha512"],
      "dhchap_dhgroups": ["null", "ffdhe2048", "ffdhe3072", "ffdhe4096", "ffdhe6144",
                          "ffdhe8192"],
      "rdma_umr_per_io": false, "tcp_connect_timeout_ms": 0, "enable_flush": false,
      "multipath_opts": {"policy": "active_passive"}}},
    {"method": "bdev_nvme_set_hotplug", "params": {"period_us": 100000, "enable": false}},
    {"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": 131072,
      "block_size": 512, "physical_block_size": 512,
      "uuid": "5f1c7bd2-7c2f-4ad5-8c2d-3b1e8f3c9a10", "optimal_io_boundary": 0,
      "md_size": 0, "dif_type": 0, "dif_is_head_of_md": false, "dif_pi_format": 0}},
    {"method": "bdev_wait_for_examine"}]},
  {"subsystem": "scheduler", "config": [
    {"method": "framework_set_scheduler", "params": {"name": "static"}}]},
  {"subsystem": "nvmf", "config": [
    {"method": "nvmf_set_config", "params": {"discovery_filters": [],
      "admin_cmd_passthru": {"identify_ctrlr": false, "identify_uuid_list": false,
        "get_log_page": false, "get_set_features": false, "sanitize": false,
        "security_send_recv": false, "fw_update": false, "nvme_mi": false,
        "vendor_specific": false},
      "dhchap_digests": ["sha256", "sha384", "sha512"],
      "dhchap_dhgroups": ["null", "ffdhe2048", "ffdhe3072", "ffdhe4096", "ffdhe6144",
                          "ffdhe8192"],
      "dup_host_policy": "allow"}},
    {"method": "nvmf_set_max_subsystems", "params": {"max_subsystems": 1024}},
    {"method": "nvmf_set_crdt", "params": {"crdt1": 0, "crdt2": 0, "crdt3": 0}},
    {"method": "nvmf_create_transport", "params": {"trtype": "RDMA", "max_queue_depth": 128,
      "max_io_qpairs_per_ctrlr": 127, "in_capsule_data_size": 4096, "max_io_size": 131072,
      "max_aq_depth": 128, "iobuf_small_cache_size": 4294967295,
      "iobuf_large_cache_size": 4294967295, "dif_insert_or_strip": false, "zcopy": false,
      "max_srq_depth": 4096, "no_srq": false, "acceptor_backlog": 100,
      "no_wr_batching": false, "abort_timeout_sec": 1, "ack_timeout": 0,
      "data_wr_pool_size": 4095, "disable_command_passthru": false, "kas": 100,
      "min_kato": 10000}},
    {"method": "nvmf_create_subsystem", "params": {"nqn": "nqn.2016-06.io.spdk:cnode1",
      "allow_any_host": true, "serial_number": "SPDK00000000000001",
      "model_number": "SPDK_Controller1", "max_namespaces": 32, "min_cntlid": 1,
      "max_cntlid": 65519, "ana_reporting": false, "dmrsl": 2097152, "wzsl": 12,
      "passthrough": false, "enable_nssr": false}},
    {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "nqn.2016-06.io.spdk:cnode1",
      "namespace": {"nsid": 1, "bdev_name": "Malloc0",
        "nguid": "5F1C7BD27C2F4AD58C2D3B1E8F3C9A10",
        "uuid": "5f1c7bd2-7c2f-4ad5-8c2d-3b1e8f3c9a10", "no_auto_visible": false}}},
    {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "nqn.2016-06.io.spdk:cnode1",
      "listen_address": {"trtype": "RDMA", "adrfam": "IPv4", "traddr": "10.0.0.1",
        "trsvcid": "4420"}, "secure_channel": false}}]}
]}"#;

/// SPDK's default-valued configuration loads as `rtgt serve --json` applies it (STARTUP
/// part, initialisation, RUNTIME part), and the setters it carries leave nothing behind.
#[test]
fn spdk_default_save_config_still_loads() {
    let r = Rig::new(RpcState::Startup);
    let cfg = load::parse(SPDK_HEAD_CONFIG).unwrap();
    r.tt.rt.block_on(load::apply(&r.table, &cfg)).unwrap();
    r.ok("framework_start_init", Value::Null);
    r.tt.rt.block_on(load::apply(&r.table, &cfg)).unwrap();
    let s = &r.ok("nvmf_get_subsystems", json!({"nqn": NQN}))[0];
    assert_eq!(s["namespaces"][0]["bdev_name"], "Malloc0");
    assert_eq!(s["listen_addresses"][0]["trsvcid"], "4420");
    let saved = r.save();
    for name in ["keyring", "iobuf", "sock", "vmd", "accel", "scheduler"] {
        assert_eq!(saved_section(&saved, name), Vec::<Value>::new(), "{name}");
    }
    let bdev: Vec<Value> = saved_section(&saved, "bdev")
        .iter()
        .map(|c| c["method"].clone())
        .collect();
    assert_eq!(
        bdev,
        [json!("bdev_malloc_create"), json!("bdev_wait_for_examine")]
    );

    // A non-default value in such a file stops the load and names the call.
    let tuned = SPDK_HEAD_CONFIG.replace(
        r#""small_pool_count": 8192"#,
        r#""small_pool_count": 16384"#,
    );
    let r = Rig::new(RpcState::Startup);
    let e =
        r.tt.rt
            .block_on(load::apply(&r.table, &load::parse(&tuned).unwrap()))
            .unwrap_err()
            .to_string();
    assert!(
        e.contains("iobuf_set_options") && e.contains("small_pool_count 16384 is not supported"),
        "{e}"
    );
}
