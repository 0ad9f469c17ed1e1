"""Framework methods, RPC states, and protocol-level errors, through spdk-rpc."""

import json
import os
import socket

import pytest

EXPECTED_METHODS = """
rpc_get_methods spdk_get_version framework_start_init framework_wait_init framework_get_config
framework_get_subsystems framework_get_reactors log_set_level log_get_level spdk_kill_instance
iobuf_set_options sock_set_default_impl sock_impl_set_options accel_set_options accel_assign_opc
bdev_set_options bdev_nvme_set_options bdev_raid_set_options bdev_iscsi_set_options
bdev_nvme_set_hotplug bdev_wait_for_examine vmd_enable framework_set_scheduler
keyring_file_add_key keyring_file_remove_key keyring_get_keys
bdev_malloc_create bdev_malloc_delete bdev_null_create bdev_null_delete bdev_aio_create
bdev_aio_delete bdev_delay_create bdev_delay_delete bdev_delay_update_latency bdev_get_bdevs
bdev_get_iostat
nvmf_create_transport nvmf_get_transports nvmf_create_subsystem nvmf_delete_subsystem
nvmf_get_subsystems nvmf_subsystem_add_listener nvmf_subsystem_remove_listener
nvmf_subsystem_get_listeners nvmf_subsystem_add_ns nvmf_subsystem_remove_ns
nvmf_subsystem_add_host nvmf_subsystem_remove_host nvmf_subsystem_allow_any_host
nvmf_subsystem_get_controllers nvmf_subsystem_get_qpairs nvmf_get_stats nvmf_set_config
nvmf_set_max_subsystems nvmf_set_crdt nvmf_subsystem_pause nvmf_subsystem_resume
""".split()


def test_rpc_get_methods_lists_every_method(target):
    methods = target.rpc("rpc_get_methods")
    missing = [m for m in EXPECTED_METHODS if m not in methods]
    assert not missing
    assert len(methods) == len(set(methods))
    current = target.rpc("rpc_get_methods", "--current")
    assert "nvmf_set_config" not in current  # STARTUP only
    assert "bdev_get_bdevs" in current


def test_spdk_get_version(target):
    v = target.rpc("spdk_get_version")
    assert v["version"].startswith("SPDK v")
    assert set(v["fields"]) >= {"major", "minor", "patch", "suffix"}


def test_framework_get_subsystems_in_dependency_order(target):
    subs = target.rpc("framework_get_subsystems")
    names = [s["subsystem"] for s in subs]
    assert {"bdev", "nvmf", "iobuf", "sock", "accel", "keyring", "vmd", "scheduler"} <= set(names)
    for i, s in enumerate(subs):
        for dep in s["depends_on"]:
            assert names.index(dep) < i, f"{s['subsystem']} before its dependency {dep}"


def test_framework_get_config(target):
    assert target.rpc("framework_get_config", "bdev") == [{"method": "bdev_wait_for_examine"}]
    nvmf = target.rpc("framework_get_config", "nvmf")
    assert [c["method"] for c in nvmf] == [
        "nvmf_set_config", "nvmf_set_max_subsystems", "nvmf_set_crdt"]
    assert nvmf[1]["params"] == {"max_subsystems": 1024}
    err = target.rpc_fail("framework_get_config", "nosuch")
    assert err.code == -32602 and "nosuch" in err.message


def test_framework_get_reactors(target):
    r = target.rpc("framework_get_reactors")
    assert len(r["reactors"]) == 2
    assert {"lcore", "busy", "idle", "in_interrupt", "lw_threads"} <= set(r["reactors"][0])


def test_log_levels(target):
    target.rpc("log_set_level", "DEBUG")
    assert target.rpc("log_get_level") == "DEBUG"
    target.rpc("log_set_level", "NOTICE")
    assert target.rpc("log_get_level") == "NOTICE"
    err = target.call_fail("log_set_level", {"level": "LOUD"})
    assert err.code == -32603


def test_framework_wait_init(target):
    assert target.call("framework_wait_init") is True


def test_wait_for_rpc_states(startup_target):
    t = startup_target
    err = t.rpc_fail("bdev_get_bdevs")
    assert err.code == -1 and "framework_start_init" in err.message
    assert "bdev_get_bdevs" not in t.rpc("rpc_get_methods", "--current")
    t.rpc("nvmf_set_max_subsystems", "-x", "32")
    err = t.rpc_fail("nvmf_set_max_subsystems", "-x", "64")
    assert err.code == -32603 and "more than once" in err.message
    t.rpc("nvmf_set_config", "--discovery-filters", "match_any")
    t.rpc("iobuf_set_options", "--small-pool-count", "8192")
    t.rpc("framework_start_init")
    assert t.call("framework_wait_init") is True
    err = t.rpc_fail("nvmf_set_config")
    assert err.code == -1 and "--wait-for-rpc" in err.message
    nvmf = t.rpc("framework_get_config", "nvmf")
    assert nvmf[0]["params"]["discovery_filters"] == []
    assert nvmf[1]["params"] == {"max_subsystems": 32}
    # SPDK's default is accepted without effect, and not saved.
    assert t.rpc("framework_get_config", "iobuf") == []


def test_unknown_method(target):
    err = target.call_fail("no_such_method")
    assert err.code == -32601 and err.message == "Method not found"


def test_missing_required_parameter(target):
    err = target.call_fail("nvmf_create_subsystem", {})
    assert err.code == -32602
    # bdev methods answer decode failures as SPDK does: -32603.
    err = target.call_fail("bdev_malloc_delete", {})
    assert err.code == -32603 and err.message == "spdk_json_decode_object failed"


def test_unknown_parameter(target):
    target.rpc("nvmf_create_subsystem", "nqn.2016-06.io.spdk:cnode1")
    err = target.call_fail("nvmf_delete_subsystem",
                           {"nqn": "nqn.2016-06.io.spdk:cnode1", "bogus": 1})
    assert err.code == -32602
    err = target.call_fail("bdev_malloc_create", {"num_blocks": 8, "block_size": 512, "bogus": 1})
    assert err.code == -32603
    err = target.call_fail("spdk_get_version", {"x": 1})
    assert err.code == -32602 and "requires no parameters" in err.message


def recv_line(s):
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf


def test_malformed_json_gets_parse_error_and_close(target):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(target.sock)
        s.sendall(b'{"jsonrpc": "2.0", "method": "spdk_get_version", "id": 1, ]')
        answer = json.loads(recv_line(s))
        assert answer["error"]["code"] == -32700
        assert answer["id"] is None
        assert s.recv(100) == b""  # the server closed the connection


def test_requests_split_and_pipelined_on_one_connection(target):
    reqs = (json.dumps({"jsonrpc": "2.0", "method": "spdk_get_version", "id": 1}, indent=2)
            + json.dumps({"jsonrpc": "2.0", "method": "rpc_get_methods", "id": 2}))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(target.sock)
        data = reqs.encode()
        s.sendall(data[:7])
        s.sendall(data[7:])
        answers = s.makefile("rb")
        first = json.loads(answers.readline())
        assert first["id"] == 1 and "version" in first["result"]
        second = json.loads(answers.readline())
        assert second["id"] == 2 and "nvmf_get_subsystems" in second["result"]


def test_invalid_envelope(target):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(target.sock)
        s.sendall(b'{"jsonrpc": "2.0", "method": 5, "id": 3}')
        assert json.loads(recv_line(s))["error"]["code"] == -32600


def test_batch_requests(target):
    """rpc_batch_delete.sh: a batch of deletes of one subsystem gives one success."""
    target.rpc("nvmf_create_subsystem", "nqn.2016-06.io.spdk:cnode1")
    with target.client(batch_mode=True) as c:
        results, errors = c.call_batch(
            [{"method": "nvmf_delete_subsystem",
              "params": {"nqn": "nqn.2016-06.io.spdk:cnode1"}}] * 5)
    assert results == [True]
    assert len(errors) == 4 and all(e["code"] == -32602 for e in errors)


def test_spdk_kill_instance(make_target):
    t = make_target()
    t.rpc("spdk_kill_instance", "SIGTERM")
    assert t.proc.wait(20) == 0
    assert not os.path.exists(t.sock)
    assert not os.path.exists(t.sock + ".lock")


@pytest.mark.parametrize("setter,args", [
    ("iobuf_set_options", ["--small-pool-count", "8192", "--large-pool-count", "1024"]),
    ("sock_set_default_impl", ["-i", "posix"]),
    ("sock_impl_set_options", ["-i", "posix", "--recv-buf-size", "2097152"]),
    ("accel_set_options", ["--small-cache-size", "128"]),
    ("bdev_set_options", ["-p", "65535", "-c", "256"]),
    ("framework_set_scheduler", ["static"]),
])
def test_startup_option_setters_take_spdk_defaults(startup_target, setter, args):
    startup_target.rpc(setter, *args)


@pytest.mark.parametrize("setter,args,words", [
    ("iobuf_set_options", ["--small-pool-count", "4096"], "small_pool_count 4096"),
    ("sock_set_default_impl", ["-i", "ssl"], "impl_name"),
    ("sock_impl_set_options", ["-i", "posix", "--recv-buf-size", "4096"], "recv_buf_size 4096"),
    ("accel_set_options", ["--small-cache-size", "64"], "small_cache_size 64"),
    ("bdev_set_options", ["-p", "1023"], "bdev_io_pool_size 1023"),
    ("vmd_enable", [], "vmd_enable"),
    ("framework_set_scheduler", ["static", "-p", "5"], "period 5"),
])
def test_startup_option_setters_refuse_other_values(startup_target, setter, args, words):
    # They used to be recorded and saved, with no effect on rtgt.
    err = startup_target.rpc_fail(setter, *args)
    assert err.code == -32602 and words in err.message and "not supported" in err.message


def test_thread_views_and_scheduler_through_spdk_rpc(target):
    stats = target.rpc("thread_get_stats")
    assert stats["tick_rate"] == 10**9 and stats["threads"]
    for t in stats["threads"]:
        assert {"name", "id", "cpumask", "busy", "idle", "in_interrupt", "active_pollers_count",
                "timed_pollers_count", "paused_pollers_count"} <= set(t)
    pollers = target.rpc("thread_get_pollers")
    assert [t["id"] for t in pollers["threads"]] == [t["id"] for t in stats["threads"]]
    for t in pollers["threads"]:
        for p in t["active_pollers"] + t["timed_pollers"]:
            assert p["run_count"] >= p["busy_count"] >= 0
    chans = target.rpc("thread_get_io_channels")
    assert [t["name"] for t in chans["threads"]] == [t["name"] for t in stats["threads"]]
    sched = target.rpc("framework_get_scheduler")
    assert sched["scheduler_name"] == "static"
