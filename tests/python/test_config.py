"""save_config / load_config with spdk-rpc, and `rtgt serve --json`."""

import json

NQN = "nqn.2016-06.io.spdk:cnode1"
NQN2 = "nqn.2016-06.io.spdk:cnode2"
HOST = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"

# What a stock SPDK nvmf_tgt (v24.09) prints for save_config after the usual setup, without
# the transport and listener (the RDMA transport is tested where it exists).
STOCK_SPDK_CONFIG = {
    "subsystems": [
        {"subsystem": "keyring", "config": []},
        {"subsystem": "iobuf", "config": [
            {"method": "iobuf_set_options", "params": {
                "small_pool_count": 8192, "large_pool_count": 1024,
                "small_bufsize": 8192, "large_bufsize": 135168}}]},
        {"subsystem": "sock", "config": [
            {"method": "sock_set_default_impl", "params": {"impl_name": "posix"}},
            {"method": "sock_impl_set_options", "params": {
                "impl_name": "ssl", "recv_buf_size": 4096, "send_buf_size": 4096,
                "enable_recv_pipe": True, "enable_quickack": False, "enable_placement_id": 0,
                "enable_zerocopy_send_server": True, "enable_zerocopy_send_client": False,
                "zerocopy_threshold": 0, "tls_version": 0, "enable_ktls": False}},
            {"method": "sock_impl_set_options", "params": {
                "impl_name": "posix", "recv_buf_size": 2097152, "send_buf_size": 2097152,
                "enable_recv_pipe": True, "enable_quickack": False, "enable_placement_id": 0,
                "enable_zerocopy_send_server": True, "enable_zerocopy_send_client": False,
                "zerocopy_threshold": 0, "tls_version": 0, "enable_ktls": False}}]},
        {"subsystem": "vmd", "config": []},
        {"subsystem": "accel", "config": [
            {"method": "accel_set_options", "params": {
                "small_cache_size": 128, "large_cache_size": 16, "task_count": 2048,
                "sequence_count": 2048, "buf_count": 2048}}]},
        {"subsystem": "bdev", "config": [
            {"method": "bdev_set_options", "params": {
                "bdev_io_pool_size": 65535, "bdev_io_cache_size": 256,
                "bdev_auto_examine": True, "iobuf_small_cache_size": 128,
                "iobuf_large_cache_size": 16}},
            {"method": "bdev_raid_set_options", "params": {
                "process_window_size_kb": 1024, "process_max_bandwidth_mb_sec": 0}},
            {"method": "bdev_iscsi_set_options", "params": {"timeout_sec": 30}},
            {"method": "bdev_nvme_set_options", "params": {
                "action_on_timeout": "none", "timeout_us": 0, "timeout_admin_us": 0,
                "keep_alive_timeout_ms": 10000, "arbitration_burst": 0,
                "low_priority_weight": 0, "medium_priority_weight": 0,
                "high_priority_weight": 0, "nvme_adminq_poll_period_us": 10000,
                "nvme_ioq_poll_period_us": 0, "io_queue_requests": 0,
                "delay_cmd_submit": True, "transport_retry_count": 4, "bdev_retry_count": 3,
                "transport_ack_timeout": 0, "ctrlr_loss_timeout_sec": 0,
                "reconnect_delay_sec": 0, "fast_io_fail_timeout_sec": 0,
                "disable_auto_failback": False, "generate_uuids": False, "transport_tos": 0,
                "nvme_error_stat": False, "rdma_srq_size": 0, "io_path_stat": False,
                "allow_accel_sequence": False, "rdma_max_cq_size": 0,
                "rdma_cm_event_timeout_ms": 0,
                "dhchap_digests": ["sha256", "sha384", "sha512"],
                "dhchap_dhgroups": ["null", "ffdhe2048", "ffdhe3072", "ffdhe4096",
                                    "ffdhe6144", "ffdhe8192"]}},
            {"method": "bdev_nvme_set_hotplug", "params": {
                "period_us": 100000, "enable": False}},
            {"method": "bdev_malloc_create", "params": {
                "name": "Malloc0", "num_blocks": 131072, "block_size": 512,
                "physical_block_size": 512, "uuid": "5f1c7bd2-7c2f-4ad5-8c2d-3b1e8f3c9a10",
                "optimal_io_boundary": 0, "md_size": 0, "dif_type": 0,
                "dif_is_head_of_md": False, "dif_pi_format": 0}},
            {"method": "bdev_wait_for_examine"}]},
        {"subsystem": "nbd", "config": []},
        {"subsystem": "scheduler", "config": [
            {"method": "framework_set_scheduler", "params": {"name": "static"}}]},
        {"subsystem": "nvmf", "config": [
            {"method": "nvmf_set_config", "params": {
                "discovery_filter": "match_any",
                "admin_cmd_passthru": {"identify_ctrlr": False},
                "dhchap_digests": ["sha256", "sha384", "sha512"],
                "dhchap_dhgroups": ["null", "ffdhe2048", "ffdhe3072", "ffdhe4096",
                                    "ffdhe6144", "ffdhe8192"]}},
            {"method": "nvmf_set_max_subsystems", "params": {"max_subsystems": 1024}},
            {"method": "nvmf_set_crdt", "params": {"crdt1": 0, "crdt2": 0, "crdt3": 0}},
            {"method": "nvmf_create_subsystem", "params": {
                "nqn": NQN, "allow_any_host": True, "serial_number": "SPDK00000000000001",
                "model_number": "SPDK_Controller1", "max_namespaces": 32, "min_cntlid": 1,
                "max_cntlid": 65519, "ana_reporting": False}},
            {"method": "nvmf_subsystem_add_ns", "params": {
                "nqn": NQN, "namespace": {
                    "nsid": 1, "bdev_name": "Malloc0",
                    "nguid": "5F1C7BD27C2F4AD58C2D3B1E8F3C9A10",
                    "uuid": "5f1c7bd2-7c2f-4ad5-8c2d-3b1e8f3c9a10",
                    "no_auto_visible": False}}}]},
    ]
}


def build(t):
    t.rpc("bdev_malloc_create", "64", "512", "-b", "Malloc0")
    t.rpc("bdev_malloc_create", "32", "4096", "-b", "Malloc1")
    t.rpc("bdev_null_create", "Null0", "100", "4096")
    t.rpc("nvmf_create_subsystem", NQN, "-a", "-s", "SPDK00000000000001", "-d", "SPDK_Controller1")
    t.rpc("nvmf_create_subsystem", NQN2, "-m", "8", "-i", "5", "-I", "50")
    t.rpc("nvmf_subsystem_add_ns", NQN, "Malloc0")
    t.rpc("nvmf_subsystem_add_ns", NQN2, "Malloc1", "-n", "3", "-e", "0011223344556677")
    t.rpc("nvmf_subsystem_add_ns", NQN, "Null0")
    t.rpc("nvmf_subsystem_add_host", NQN2, HOST)


def save_text(t):
    r = t.cli("save_config")
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_save_restart_with_json_save_is_identical(make_target):
    t = make_target()
    build(t)
    first = save_text(t)
    path = t.dir / "c.json"
    path.write_text(first)
    t.restart(["--json", str(path)])
    assert save_text(t) == first


def test_save_load_config_save_is_identical(make_target):
    a = make_target()
    build(a)
    saved = save_text(a)
    # load_config into a --wait-for-rpc target: rpc.py runs the STARTUP part, then
    # framework_start_init, then the RUNTIME part.
    b = make_target(["--wait-for-rpc"])
    r = b.cli("load_config", stdin=saved)
    assert r.returncode == 0, r.stdout + r.stderr
    assert save_text(b) == saved
    # Into a RUNTIME target, STARTUP-only entries are skipped (not an error).
    c = make_target()
    r = c.cli("load_config", stdin=saved)
    assert r.returncode == 0, r.stdout + r.stderr
    assert save_text(c) == saved


def nvmf_methods(cfg):
    sec = next(s for s in cfg["subsystems"] if s["subsystem"] == "nvmf")
    return [c["method"] for c in sec["config"]]


def test_saved_order_is_spdk_heads(target):
    build(target)
    cfg = json.loads(save_text(target))
    assert [s["subsystem"] for s in cfg["subsystems"]][-1] == "nvmf"
    assert nvmf_methods(cfg) == [
        "nvmf_set_config", "nvmf_set_max_subsystems", "nvmf_set_crdt",
        "nvmf_create_subsystem", "nvmf_create_subsystem",
        "nvmf_subsystem_add_host",
        "nvmf_subsystem_add_ns", "nvmf_subsystem_add_ns", "nvmf_subsystem_add_ns",
    ]
    bdev = next(s for s in cfg["subsystems"] if s["subsystem"] == "bdev")["config"]
    assert [c["method"] for c in bdev] == [
        "bdev_malloc_create", "bdev_malloc_create", "bdev_null_create", "bdev_wait_for_examine"]


def test_load_config_of_a_stock_spdk_nvmf_config(startup_target):
    t = startup_target
    r = t.cli("load_config", stdin=json.dumps(STOCK_SPDK_CONFIG, indent=2))
    assert r.returncode == 0, r.stdout + r.stderr
    s = t.rpc("nvmf_get_subsystems", NQN)[0]
    assert s["namespaces"][0]["bdev_name"] == "Malloc0"
    assert s["namespaces"][0]["uuid"] == "5f1c7bd2-7c2f-4ad5-8c2d-3b1e8f3c9a10"
    cfg = json.loads(save_text(t))
    by_name = {s["subsystem"]: s["config"] for s in cfg["subsystems"]}
    # The setters of subsystems rtgt does not have carry SPDK's defaults: accepted without
    # effect, and not saved (SPDK restores the same defaults without them).
    for name in ("iobuf", "sock", "accel", "scheduler"):
        assert by_name[name] == [], name
    methods = [c["method"] for c in by_name["bdev"]]
    assert methods == ["bdev_malloc_create", "bdev_wait_for_examine"]
    # And the saved file loads into rtgt again, unchanged.
    path = t.dir / "stock-resaved.json"
    text = save_text(t)
    path.write_text(text)
    t.restart(["--json", str(path)])
    assert save_text(t) == text


def test_load_config_refuses_a_tuned_setter_rtgt_would_ignore(startup_target):
    cfg = json.loads(json.dumps(STOCK_SPDK_CONFIG))
    cfg["subsystems"][1]["config"][0]["params"]["small_pool_count"] = 16384
    r = startup_target.cli("load_config", stdin=json.dumps(cfg))
    assert r.returncode != 0
    assert "small_pool_count 16384 is not supported" in r.stdout + r.stderr


def test_json_with_comments_and_extra_keys(make_target):
    t = make_target()
    path = t.dir / "commented.json"
    path.write_text("""
    // rtgt accepts JSON comments in --json files, as SPDK's loader does
    {
      "version": "ignored extra key",
      "subsystems": [
        /* bdevs first */
        {"subsystem": "bdev", "config": [
          {"method": "bdev_malloc_create",
           "params": {"name": "M0", "num_blocks": 64, "block_size": 512}},
          {"method": "bdev_wait_for_examine"}
        ]},
        {"subsystem": "nbd", "config": [{"method": "nbd_start_disk", "params": {}}]},
        {"subsystem": "nvmf", "config": [
          [{"method": "nvmf_create_subsystem", "params": {"nqn": "%s"}}],
          [{"method": "nvmf_subsystem_add_ns",
            "params": {"nqn": "%s", "namespace": {"bdev_name": "M0"}}}]
        ]}
      ]
    }
    """ % (NQN, NQN))
    t.restart(["--json", str(path)])
    assert t.rpc("nvmf_get_subsystems", NQN)[0]["namespaces"][0]["bdev_name"] == "M0"


def test_failing_json_stops_the_daemon_with_a_message(make_target):
    t = make_target()
    path = t.dir / "bad.json"
    path.write_text(json.dumps({"subsystems": [{"subsystem": "bdev", "config": [
        {"method": "bdev_malloc_create", "params": {"num_blocks": 8, "block_size": 1000}}]}]}))
    assert t.stop() == 0
    t.extra = ["--json", str(path)]
    import subprocess
    r = subprocess.run([t.binary, "serve", "--fabric", "sim", "-r", t.sock, *t.extra],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "bdev_malloc_create failed" in r.stderr and "-22" in r.stderr, r.stderr


def test_unknown_method_in_a_config_fails_load_config(target):
    cfg = {"subsystems": [{"subsystem": "bdev", "config": [
        {"method": "bdev_lvol_create_lvstore", "params": {"bdev_name": "x", "lvs_name": "y"}}]}]}
    r = target.cli("load_config", stdin=json.dumps(cfg))
    assert r.returncode != 0
    assert "Unknown method" in r.stdout + r.stderr
