"""save_config / load_config: SPDK's client-side algorithms, through the API and rtgt-rpc."""

import json

import pytest

import rtgt
from helpers import HOSTNQN, NQN, run_rpc


def configure(c):
    c.call("bdev_malloc_create", {"num_blocks": 2048, "block_size": 512, "name": "Malloc0",
                                  "uuid": "6f1b7a32-2a3e-4f5b-9a53-2d0b7c51f4a1"})
    c.call("bdev_null_create", {"num_blocks": 4096, "block_size": 4096, "name": "Null0"})
    c.call("nvmf_create_subsystem", {"nqn": NQN, "serial_number": "SPDK00000000000001",
                                     "model_number": "SPDK_Controller1"})
    c.call("nvmf_subsystem_add_host", {"nqn": NQN, "host": HOSTNQN})
    c.call("nvmf_subsystem_add_ns", {"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}})
    c.call("nvmf_subsystem_add_ns", {"nqn": NQN, "namespace": {"bdev_name": "Null0", "nsid": 7}})


def methods(config, name):
    sub = next(s for s in config["subsystems"] if s["subsystem"] == name)
    return [e["method"] for e in sub["config"] or []]


def test_save_config_shape(client):
    configure(client)
    config = rtgt.save_config(client)
    names = [s["subsystem"] for s in config["subsystems"]]
    listing = [s["subsystem"] for s in client.call("framework_get_subsystems")]
    assert names == listing, "subsystems in initialisation order"
    assert methods(config, "bdev")[-1] == "bdev_wait_for_examine"
    assert {"bdev_malloc_create", "bdev_null_create"} <= set(methods(config, "bdev"))
    nvmf = methods(config, "nvmf")
    assert nvmf.index("nvmf_create_subsystem") < nvmf.index("nvmf_subsystem_add_host") < nvmf.index("nvmf_subsystem_add_ns")


def test_save_config_subset_includes_dependencies(client):
    listing = {s["subsystem"]: s["depends_on"] for s in client.call("framework_get_subsystems")}
    config = rtgt.save_config(client, ["bdev"])
    got = {s["subsystem"] for s in config["subsystems"]}
    want = {"bdev"}
    todo = ["bdev"]
    while todo:
        for d in listing[todo.pop()]:
            if d not in want:
                want.add(d)
                todo.append(d)
    assert got == want and "nvmf" not in got
    with pytest.raises(rtgt.ConfigError, match="unknown subsystem 'nope'"):
        rtgt.save_config(client, ["nope"])


def test_save_load_save_round_trip(client, start_daemon):
    configure(client)
    first = rtgt.save_config(client)
    fresh = start_daemon(tcp=False)
    with fresh.client() as c:
        rtgt.load_config(c, first)
        second = rtgt.save_config(c)
    assert second == first


def test_load_config_skips_startup_methods_on_a_running_target(client):
    config = {"subsystems": [{"subsystem": "nvmf", "config": [
        {"method": "nvmf_set_max_subsystems", "params": {"max_subsystems": 10}},
        {"method": "nvmf_create_subsystem", "params": {"nqn": NQN}},
    ]}, {"subsystem": "empty", "config": None}]}
    skipped = rtgt.load_config(client, json.dumps(config))
    assert [e["method"] for e in skipped] == ["nvmf_set_max_subsystems"]
    assert NQN in [s["nqn"] for s in client.call("nvmf_get_subsystems")]


def test_load_config_on_wait_for_rpc_target(start_daemon):
    d = start_daemon(args=["--wait-for-rpc"], tcp=False)
    config = {"subsystems": [{"subsystem": "nvmf", "config": [
        {"method": "nvmf_set_max_subsystems", "params": {"max_subsystems": 10}},
        {"method": "nvmf_create_subsystem", "params": {"nqn": NQN}},
    ]}]}
    with d.client() as c:
        assert "framework_start_init" in c.call("rpc_get_methods", {"current": True})
        assert rtgt.load_config(c, config) == []
        assert "framework_start_init" not in c.call("rpc_get_methods", {"current": True})
        saved = rtgt.save_config(c)
    nvmf = next(s for s in saved["subsystems"] if s["subsystem"] == "nvmf")["config"]
    assert {"method": "nvmf_set_max_subsystems", "params": {"max_subsystems": 10}} in nvmf
    assert "nvmf_create_subsystem" in [e["method"] for e in nvmf]


def test_load_config_rejects_unknown_methods_before_calling_anything(client):
    config = {"subsystems": [{"subsystem": "bdev", "config": [
        {"method": "bdev_malloc_create", "params": {"num_blocks": 8, "block_size": 512, "name": "X"}},
        {"method": "bdev_frobnicate", "params": {}},
    ]}]}
    with pytest.raises(rtgt.ConfigError, match="bdev_frobnicate"):
        rtgt.load_config(client, config)
    assert client.call("bdev_get_bdevs") == []


def test_load_config_stops_at_the_first_error(client):
    config = {"subsystems": [{"subsystem": "bdev", "config": [
        {"method": "bdev_malloc_create", "params": {"num_blocks": 8, "block_size": 512, "name": "A"}},
        {"method": "bdev_malloc_create", "params": {"num_blocks": 8, "block_size": 512, "name": "A"}},
        {"method": "bdev_malloc_create", "params": {"num_blocks": 8, "block_size": 512, "name": "B"}},
    ]}]}
    with pytest.raises(rtgt.RpcError) as ei:
        rtgt.load_config(client, config)
    assert ei.value.code == -17 and ei.value.method == "bdev_malloc_create"
    assert [b["name"] for b in client.call("bdev_get_bdevs")] == ["A"]


@pytest.mark.parametrize("bad,words", [
    ("not json", "not valid JSON"),
    ({"nope": []}, "'subsystems' list"),
    ({"subsystems": [{"config": []}]}, "'subsystem' name"),
    ({"subsystems": [{"subsystem": "x", "config": [{"params": {}}]}]}, "'method' string"),
])
def test_malformed_configs(client, bad, words):
    with pytest.raises(rtgt.ConfigError, match=words):
        rtgt.load_config(client, bad)


def test_cli_save_load_and_serve_json(daemon, start_daemon, tmp_path):
    with daemon.client() as c:
        configure(c)
    r = run_rpc("save_config", sock=daemon.sock)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith('{\n  "subsystems": [') and r.stdout.endswith("}\n"), "indent 2 plus newline"
    saved = tmp_path / "saved.json"
    saved.write_text(r.stdout)
    compact = run_rpc("save_config", "-i", "-1", sock=daemon.sock).stdout
    assert "\n" not in compact.rstrip("\n") and json.loads(compact) == json.loads(r.stdout)

    # load_config -j FILE into a fresh target, then save again: identical
    fresh = start_daemon(tcp=False)
    r2 = run_rpc("load_config", "-j", str(saved), sock=fresh.sock)
    assert r2.returncode == 0, r2.stderr
    assert run_rpc("save_config", sock=fresh.sock).stdout == r.stdout

    # load_config from stdin; loading again fails on the first duplicate, one line, exit 1
    fresh2 = start_daemon(tcp=False)
    assert run_rpc("load_config", sock=fresh2.sock, stdin=r.stdout).returncode == 0
    again = run_rpc("load_config", sock=fresh2.sock, stdin=r.stdout)
    assert again.returncode == 1 and len(again.stderr.strip().splitlines()) == 1
    assert "already exists" in again.stderr or "exists" in again.stderr

    # rtgt serve --json rebuilds what save_config printed
    served = start_daemon(args=["--json", str(saved)], tcp=False)
    assert run_rpc("save_config", sock=served.sock).stdout == r.stdout


def test_cli_subsystem_config(daemon):
    with daemon.client() as c:
        configure(c)
    r = run_rpc("save_subsystem_config", "-n", "bdev", sock=daemon.sock)
    assert r.returncode == 0, r.stderr
    one = json.loads(r.stdout)
    assert one["subsystem"] == "bdev" and one["config"][-1]["method"] == "bdev_wait_for_examine"
    with daemon.client() as c:
        for b in ("Null0",):
            c.call("nvmf_subsystem_remove_ns", {"nqn": NQN, "nsid": 7})
            c.call("bdev_null_delete", {"name": b})
    partial = {"subsystem": "bdev", "config": [e for e in one["config"] if e["method"] == "bdev_null_create"]}
    r2 = run_rpc("load_subsystem_config", sock=daemon.sock, stdin=json.dumps(partial))
    assert r2.returncode == 0, r2.stderr
    with daemon.client() as c:
        assert "Null0" in [b["name"] for b in c.call("bdev_get_bdevs")]


def test_cli_load_config_reports_skipped_and_unknown(daemon, tmp_path):
    cfg = {"subsystems": [{"subsystem": "nvmf", "config": [
        {"method": "nvmf_set_max_subsystems", "params": {"max_subsystems": 10}}]}]}
    r = run_rpc("load_config", sock=daemon.sock, stdin=json.dumps(cfg))
    assert r.returncode == 0
    assert r.stdout.strip() == "Some configs were skipped because the RPC state that can call them passed over."
    bad = {"subsystems": [{"subsystem": "x", "config": [{"method": "nope_method"}]}]}
    r = run_rpc("load_config", "-j", json.dumps(bad), sock=daemon.sock)
    assert r.returncode == 1
    assert r.stderr.strip() == "rtgt-rpc: load_config: Unknown method was included in the config file: nope_method"
    r = run_rpc("load_config", "-j", str(tmp_path / "missing.json"), sock=daemon.sock)
    assert r.returncode == 1 and "no such file" in r.stderr


def test_cli_dry_run_load_config_lists_the_calls(tmp_path):
    cfg = {"subsystems": [{"subsystem": "bdev", "config": [
        {"method": "bdev_malloc_create", "params": {"num_blocks": 8, "block_size": 512, "name": "A"}},
        {"method": "bdev_wait_for_examine"}]}]}
    r = run_rpc("--dry-run", "load_config", stdin=json.dumps(cfg), sock="/nonexistent")
    assert r.returncode == 0, r.stderr
    dec = json.JSONDecoder()
    text, reqs = r.stdout, []
    while text.strip():
        v, end = dec.raw_decode(text.lstrip())
        reqs.append(v)
        text = text.lstrip()[end:]
    assert [q["method"] for q in reqs] == ["bdev_malloc_create", "bdev_wait_for_examine"]
    assert "params" not in reqs[1]
