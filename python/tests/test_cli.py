"""rtgt-rpc: rpc.py's command line, its output, exit codes and one-line errors."""

import json
import socket
import subprocess
import threading

import pytest

from helpers import HOSTNQN, HOSTNQN2, NQN, SIM_ADDR, run_rpc


def ok(daemon, *args, stdin=None):
    r = run_rpc(*args, sock=daemon.sock, stdin=stdin)
    assert r.returncode == 0, f"rtgt-rpc {' '.join(args)} failed: {r.stderr}"
    assert r.stderr == ""
    return r.stdout


def fails(daemon, *args, sock=None, stdin=None):
    r = run_rpc(*args, sock=sock if sock is not None else daemon.sock, stdin=stdin)
    assert r.returncode == 1, f"expected exit 1, got {r.returncode}: {r.stdout} {r.stderr}"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {r.stderr!r}"
    assert lines[0].startswith("rtgt-rpc: ")
    return lines[0]


def subsystem(daemon, nqn=NQN):
    subs = json.loads(ok(daemon, "nvmf_get_subsystems"))
    return next(s for s in subs if s["nqn"] == nqn)


def test_seed_example_without_transport(daemon):
    assert ok(daemon, "bdev_malloc_create", "64", "512", "-b", "Malloc0") == "Malloc0\n"
    (bdev,) = json.loads(ok(daemon, "bdev_get_bdevs", "-b", "Malloc0"))
    assert (bdev["num_blocks"], bdev["block_size"]) == (131072, 512), "64 MiB in 512-byte blocks"
    assert ok(daemon, "nvmf_create_subsystem", NQN, "-a", "-s", "SPDK00000000000001", "-d", "SPDK_Controller1") == ""
    assert ok(daemon, "nvmf_subsystem_add_ns", NQN, "Malloc0") == "1\n"
    s = subsystem(daemon)
    assert s["serial_number"] == "SPDK00000000000001"
    assert s["model_number"] == "SPDK_Controller1"
    assert s["allow_any_host"] is True
    assert [(n["nsid"], n["bdev_name"]) for n in s["namespaces"]] == [(1, "Malloc0")]


def test_seed_example_with_rdma(daemon, rdma):
    ok(daemon, "bdev_malloc_create", "64", "512", "-b", "Malloc0")
    ok(daemon, "nvmf_create_subsystem", NQN, "-a", "-s", "SPDK00000000000001", "-d", "SPDK_Controller1")
    ok(daemon, "nvmf_subsystem_add_ns", NQN, "Malloc0")
    ok(daemon, "nvmf_subsystem_add_listener", NQN, "-t", "rdma", "-a", SIM_ADDR, "-s", "4420")
    s = subsystem(daemon)
    (la,) = s["listen_addresses"]
    assert (la["trtype"], la["adrfam"], la["traddr"], la["trsvcid"]) == ("RDMA", "IPv4", SIM_ADDR, "4420")
    (listener,) = json.loads(ok(daemon, "nvmf_subsystem_get_listeners", NQN))
    assert listener["address"]["traddr"] == SIM_ADDR
    line = fails(daemon, "nvmf_subsystem_add_listener", NQN, "-t", "rdma", "-a", SIM_ADDR, "-s", "4420")
    assert "nvmf_subsystem_add_listener" in line and "code -32602" in line
    ok(daemon, "nvmf_subsystem_remove_listener", NQN, "-t", "rdma", "-a", SIM_ADDR, "-s", "4420")
    assert subsystem(daemon)["listen_addresses"] == []
    ok(daemon, "nvmf_subsystem_add_listener", "discovery", "-t", "rdma", "-a", SIM_ADDR, "-s", "4420")
    assert subsystem(daemon, "nqn.2014-08.org.nvmexpress.discovery")["listen_addresses"]


def test_create_transport_rdma_with_seed_options(daemon):
    r = run_rpc("nvmf_create_transport", "-t", "RDMA", "-u", "8192", "-i", "131072", "-c", "8192", sock=daemon.sock)
    assert r.returncode == 0, r.stderr
    (t,) = json.loads(ok(daemon, "nvmf_get_transports", "--trtype", "RDMA"))
    assert (t["trtype"], t["max_io_size"], t["in_capsule_data_size"]) == ("RDMA", 131072, 8192)
    line = fails(daemon, "nvmf_create_transport", "-t", "RDMA")
    assert "already exists" in line and "code -32603" in line


def test_create_transport_unknown_type(daemon):
    line = fails(daemon, "nvmf_create_transport", "-t", "FOO")
    assert line == "rtgt-rpc: nvmf_create_transport: Invalid transport type 'FOO' (code -32602)"


def test_bdev_commands(daemon, tmp_path):
    assert ok(daemon, "bdev_null_create", "Null0", "100", "4096") == "Null0\n"
    (b,) = json.loads(ok(daemon, "bdev_get_bdevs", "-b", "Null0"))
    assert (b["num_blocks"], b["block_size"], b["product_name"]) == (25600, 4096, "Null disk")
    image = tmp_path / "disk.img"
    image.write_bytes(b"\0" * (4 << 20))
    assert ok(daemon, "bdev_aio_create", str(image), "aio0", "512") == "aio0\n"
    (a,) = json.loads(ok(daemon, "bdev_get_bdevs", "-b", "aio0"))
    assert (a["num_blocks"], a["product_name"]) == (8192, "AIO disk")
    assert ok(daemon, "bdev_malloc_create", "1.5", "4096") .strip().startswith("Malloc")
    names = {b["name"] for b in json.loads(ok(daemon, "bdev_get_bdevs"))}
    assert {"Null0", "aio0"} <= names and len(names) == 3
    json.loads(ok(daemon, "bdev_get_iostat"))
    ok(daemon, "bdev_wait_for_examine")
    # A delay bdev over Null0: created (name printed), latency updated (true), deleted (silent).
    assert ok(daemon, "bdev_delay_create", "-b", "Null0", "-d", "Delay0", "-r", "10", "-t", "20", "-w", "30", "-n", "40") == "Delay0\n"
    (d,) = json.loads(ok(daemon, "bdev_get_bdevs", "-b", "Delay0"))
    assert (d["product_name"], d["num_blocks"]) == ("delay", 25600)
    assert ok(daemon, "bdev_delay_update_latency", "Delay0", "p99_write", "50") == "true\n"
    (d,) = json.loads(ok(daemon, "bdev_get_bdevs", "-b", "Delay0"))
    assert d["driver_specific"]["delay"]["p99_write_latency"] == 50
    line = fails(daemon, "bdev_delay_update_latency", "Nope", "avg_read", "1")
    assert "Nope" in line and "(code -32602)" in line
    assert ok(daemon, "bdev_delay_delete", "Delay0") == ""
    for kind, name in (("null", "Null0"), ("aio", "aio0")):
        assert ok(daemon, f"bdev_{kind}_delete", name) == ""
    line = fails(daemon, "bdev_null_delete", "Null0")
    assert line.startswith("rtgt-rpc: bdev_null_delete: ") and "Null0" in line and "(code -19)" in line


def test_subsystem_lifecycle(daemon):
    ok(daemon, "bdev_malloc_create", "8", "512", "-b", "M0")
    ok(daemon, "bdev_malloc_create", "8", "512", "-b", "M1")
    ok(daemon, "nvmf_create_subsystem", NQN, "-s", "SN1", "-d", "Model 1", "-m", "8")
    assert ok(daemon, "nvmf_subsystem_add_ns", NQN, "M0", "-n", "5", "-u", "6f1b7a32-2a3e-4f5b-9a53-2d0b7c51f4a1") == "5\n"
    assert ok(daemon, "nvmf_subsystem_add_ns", NQN, "M1", "-g", "00112233445566778899AABBCCDDEEFF", "-e", "0011223344556677") == "1\n"
    s = subsystem(daemon)
    ns = {n["nsid"]: n for n in s["namespaces"]}
    assert ns[5]["uuid"] == "6f1b7a32-2a3e-4f5b-9a53-2d0b7c51f4a1"
    assert (ns[1]["nguid"], ns[1]["eui64"]) == ("00112233445566778899AABBCCDDEEFF", "0011223344556677")
    line = fails(daemon, "nvmf_subsystem_add_ns", NQN, "M0")
    assert "nvmf_subsystem_add_ns" in line and "code -32602" in line

    ok(daemon, "nvmf_subsystem_add_host", NQN, HOSTNQN)
    ok(daemon, "nvmf_subsystem_add_host", NQN, HOSTNQN2)
    assert [h["nqn"] for h in subsystem(daemon)["hosts"]] == [HOSTNQN, HOSTNQN2]
    ok(daemon, "nvmf_subsystem_remove_host", NQN, HOSTNQN)
    assert [h["nqn"] for h in subsystem(daemon)["hosts"]] == [HOSTNQN2]
    line = fails(daemon, "nvmf_subsystem_remove_host", NQN, HOSTNQN)
    assert "code -32603" in line

    assert subsystem(daemon)["allow_any_host"] is False
    ok(daemon, "nvmf_subsystem_allow_any_host", NQN, "--allow-any-host")
    assert subsystem(daemon)["allow_any_host"] is True
    ok(daemon, "nvmf_subsystem_allow_any_host", NQN, "--no-allow-any-host")
    assert subsystem(daemon)["allow_any_host"] is False

    assert json.loads(ok(daemon, "nvmf_subsystem_get_controllers", NQN)) == []
    assert json.loads(ok(daemon, "nvmf_subsystem_get_qpairs", NQN)) == []
    assert json.loads(ok(daemon, "nvmf_subsystem_get_listeners", NQN)) == []
    assert "poll_groups" in json.loads(ok(daemon, "nvmf_get_stats"))
    (only,) = json.loads(ok(daemon, "nvmf_get_subsystems", NQN))
    assert only["nqn"] == NQN

    ok(daemon, "nvmf_subsystem_remove_ns", NQN, "5")
    assert [n["nsid"] for n in subsystem(daemon)["namespaces"]] == [1]
    ok(daemon, "nvmf_delete_subsystem", NQN)
    line = fails(daemon, "nvmf_delete_subsystem", NQN)
    assert NQN in line and "code -32602" in line


def test_pause_and_resume(daemon):
    ok(daemon, "nvmf_create_subsystem", NQN, "-a")
    assert subsystem(daemon)["state"] == "active"
    ok(daemon, "nvmf_subsystem_pause", NQN)
    assert subsystem(daemon)["state"] == "paused"
    ok(daemon, "nvmf_subsystem_resume", NQN)
    assert subsystem(daemon)["state"] == "active"
    line = fails(daemon, "nvmf_subsystem_pause", "nqn.2016-06.io.spdk:missing")
    assert "nvmf_subsystem_pause" in line and "missing" in line


def test_framework_and_log_commands(daemon):
    methods = json.loads(ok(daemon, "rpc_get_methods"))
    assert {"nvmf_subsystem_pause", "nvmf_subsystem_resume", "bdev_malloc_create"} <= set(methods)
    assert set(json.loads(ok(daemon, "rpc_get_methods", "-c"))) <= set(methods)
    assert json.loads(ok(daemon, "spdk_get_version"))["version"].startswith("SPDK v")
    subs = [s["subsystem"] for s in json.loads(ok(daemon, "framework_get_subsystems"))]
    assert subs.index("bdev") < subs.index("nvmf")
    assert isinstance(json.loads(ok(daemon, "framework_get_config", "bdev")), list)
    assert json.loads(ok(daemon, "framework_get_reactors"))
    ok(daemon, "framework_wait_init")
    ok(daemon, "log_set_print_level", "WARNING")
    assert json.loads(ok(daemon, "log_get_print_level")) == "WARNING"
    ok(daemon, "log_set_flag", "nvmf_rdma")
    assert json.loads(ok(daemon, "log_get_flags"))["nvmf_rdma"] is True
    assert "invalid log flag" in fails(daemon, "log_set_flag", "nvmf_fc")
    line = fails(daemon, "framework_start_init")
    assert "code -1" in line


def test_log_level_goes_to_syslog_and_is_refused_without_it(start_daemon, tmp_path):
    # The log level is syslog's (SPDK): with a syslog socket it takes effect there.
    log = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    log.bind(str(tmp_path / "log"))
    log.settimeout(10)
    d = start_daemon(args=["--syslog-socket", str(tmp_path / "log")])
    ok(d, "log_set_level", "DEBUG")
    assert json.loads(ok(d, "log_get_level")) == "DEBUG"
    while b"log level (syslog) set to DEBUG" not in log.recv(65536):
        pass
    # With --no-syslog, a level for no output is refused, not accepted and ignored.
    quiet = start_daemon(args=["--no-syslog"])
    assert "--no-syslog" in fails(quiet, "log_set_level", "DEBUG")


def test_dry_run_prints_rpc_py_requests():
    def dry(*args):
        r = run_rpc("--dry-run", *args, sock="/nonexistent/sock")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    assert dry("bdev_malloc_create", "64", "512", "-b", "Malloc0") == {
        "jsonrpc": "2.0", "method": "bdev_malloc_create", "id": 1,
        "params": {"num_blocks": 131072, "block_size": 512, "name": "Malloc0",
                   "md_interleave": False, "dif_is_head_of_md": False},
    }
    # rpc.py (26.09) sends every boolean flag of nvmf_create_transport, given or not.
    rpc_py_flags = {
        "no_srq": False, "c2h_success": True, "zcopy": False, "dif_insert_or_strip": False,
        "no_wr_batching": False, "disable_mappable_bar0": False, "disable_adaptive_irq": False,
        "disable_shadow_doorbells": False, "disable_command_passthru": False,
    }
    assert dry("nvmf_create_transport", "-t", "RDMA", "-u", "8192", "-i", "131072", "-c", "8192")["params"] == {
        "trtype": "RDMA", "io_unit_size": 8192, "max_io_size": 131072, "in_capsule_data_size": 8192,
        **rpc_py_flags,
    }
    assert dry("nvmf_create_subsystem", NQN, "-a", "-s", "SPDK00000000000001", "-d", "SPDK_Controller1")["params"] == {
        "nqn": NQN, "serial_number": "SPDK00000000000001", "model_number": "SPDK_Controller1",
        "allow_any_host": True, "ana_reporting": False, "passthrough": False, "enable_nssr": False,
    }
    assert dry("nvmf_subsystem_add_listener", NQN, "-t", "rdma", "-a", "192.168.100.8", "-s", "4420")["params"] == {
        "nqn": NQN, "secure_channel": False,
        "listen_address": {"trtype": "rdma", "traddr": "192.168.100.8", "trsvcid": "4420"},
    }
    assert dry("nvmf_subsystem_add_ns", NQN, "Malloc0", "-n", "5")["params"] == {
        "nqn": NQN, "namespace": {"bdev_name": "Malloc0", "nsid": 5, "no_auto_visible": False},
    }
    assert dry("bdev_null_create", "Null0", "100", "4096")["params"] == {
        "num_blocks": 25600, "block_size": 4096, "name": "Null0", "dif_is_head_of_md": False,
    }
    assert dry("bdev_aio_create", "/dev/sdb", "aio0", "4096")["params"] == {
        "filename": "/dev/sdb", "name": "aio0", "block_size": 4096, "readonly": False,
        "fallocate": False, "nowait": False,
    }
    assert dry("bdev_delay_create", "-b", "Malloc0", "-d", "Delay0", "-r", "1", "-t", "2", "-w", "3", "-n", "4")["params"] == {
        "base_bdev_name": "Malloc0", "name": "Delay0", "avg_read_latency": 1, "p99_read_latency": 2,
        "avg_write_latency": 3, "p99_write_latency": 4,
    }
    assert dry("bdev_delay_update_latency", "Delay0", "avg_write", "200000")["params"] == {
        "delay_bdev_name": "Delay0", "latency_type": "avg_write", "latency_us": 200000,
    }
    assert dry("bdev_delay_delete", "Delay0")["params"] == {"name": "Delay0"}
    assert dry("nvmf_subsystem_allow_any_host", NQN, "--allow-any-host")["params"] == {"nqn": NQN, "allow_any_host": True}
    assert dry("nvmf_subsystem_remove_ns", NQN, "1")["params"] == {"nqn": NQN, "nsid": 1}
    assert dry("rpc_get_methods")["params"] == {"current": False, "include_aliases": False}
    for no_params in ("nvmf_get_stats", "nvmf_get_transports", "nvmf_get_subsystems", "bdev_get_bdevs", "spdk_get_version"):
        assert "params" not in dry(no_params), no_params
    assert dry("nvmf_create_transport", "-t", "SRP", "--opt", "max_req_size=4096", "--opt", "immediate_data=true")["params"] == {
        "trtype": "SRP", "max_req_size": 4096, "immediate_data": True, **rpc_py_flags,
    }
    # The SRP transport's own options, declared by the transport, are options here too.
    assert dry("nvmf_create_transport", "-t", "SRP", "--max-req-size", "4096", "--no-immediate-data")["params"] == {
        "trtype": "SRP", "max_req_size": 4096, "immediate_data": False, **rpc_py_flags,
    }
    # And a backend linked into the binary brings its commands (SPDK's bdev_rbd_* spellings).
    assert dry("bdev_rbd_create", "rbd", "img1", "4096", "-b", "rbd0", "-c", "ceph1",
               "--config", "rbd_cache=false")["params"] == {
        "name": "rbd0", "config": {"rbd_cache": "false"}, "pool_name": "rbd", "rbd_name": "img1",
        "block_size": 4096, "cluster_name": "ceph1", "read_only": False,
    }
    assert dry("nvmf_subsystem_pause", NQN, "-n", "2")["params"] == {"nqn": NQN, "nsid": 2}
    assert dry("call", "nvmf_get_subsystems", '{"nqn": "x"}')["params"] == {"nqn": "x"}


def test_usage_errors(daemon):
    r = run_rpc("bdev_malloc_create", "64", sock=daemon.sock)
    assert r.returncode == 2 and "block_size" in r.stderr
    assert fails(daemon, "bdev_malloc_create", "0", "512") == "rtgt-rpc: bdev_malloc_create: total_size must be > 0"
    assert "invalid oncs" in fails(daemon, "nvmf_create_transport", "-t", "RDMA", "--masked-oncs", "bogus")
    assert "PARAMS is not valid JSON" in fails(daemon, "call", "spdk_get_version", "{nope")


def test_unreachable_socket_is_one_line(tmp_path, daemon):
    line = fails(daemon, "spdk_get_version", sock=str(tmp_path / "missing.sock"))
    assert line.startswith("rtgt-rpc: spdk_get_version: cannot connect to ") and "missing.sock" in line


def test_timeout_option(tmp_path, daemon):
    path = str(tmp_path / "silent.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(1)
    held = []
    t = threading.Thread(target=lambda: held.append(srv.accept()), daemon=True)
    t.start()
    r = run_rpc("-t", "0.5", "spdk_get_version", sock=path)
    srv.close()
    assert r.returncode == 1
    assert "timeout after 0.5 s" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_retries_option(tmp_path, daemon):
    line = fails(daemon, "-r", "2", "spdk_get_version", sock=str(tmp_path / "none.sock"))
    assert "after 3 attempts" in line


def test_tcp_endpoint(daemon):
    r = run_rpc("-s", "127.0.0.1", "-p", str(daemon.port), "bdev_malloc_create", "1", "512", "-b", "Tcp0")
    assert r.returncode == 0 and r.stdout == "Tcp0\n", r.stderr
    assert [b["name"] for b in json.loads(ok(daemon, "bdev_get_bdevs"))] == ["Tcp0"]


def test_script_mode_reads_commands_from_stdin(daemon):
    script = f"""
    # comments and blank lines are skipped
    bdev_malloc_create 8 512 -b S0

    nvmf_create_subsystem {NQN} -a -s SCRIPT01
    nvmf_subsystem_add_ns {NQN} S0
    """
    out = ok(daemon, stdin=script)
    assert out.split() == ["S0", "1"]
    assert subsystem(daemon)["serial_number"] == "SCRIPT01"
    line = fails(daemon, stdin=f"bdev_malloc_create 8 512 -b S1\nnvmf_subsystem_add_ns {NQN} Nope\nbdev_malloc_create 8 512 -b S2\n")
    assert line.endswith("(line 2)") and "nvmf_subsystem_add_ns" in line
    names = {b["name"] for b in json.loads(ok(daemon, "bdev_get_bdevs"))}
    assert "S1" in names and "S2" not in names, "the script stops at the first failure"


def test_raw_call(daemon):
    assert json.loads(ok(daemon, "call", "bdev_null_create", '{"name": "R0", "num_blocks": 8, "block_size": 512}')) == "R0"
    line = fails(daemon, "call", "no_such_method")
    assert line == "rtgt-rpc: no_such_method: Method not found (code -32601)"


def test_srp_transport_with_its_own_options(daemon):
    r = run_rpc("nvmf_create_transport", "-t", "SRP", "--opt", "max_req_size=4096", "--opt", "immediate_data=false",
                sock=daemon.sock)
    assert r.returncode == 0, r.stderr
    (t,) = json.loads(ok(daemon, "nvmf_get_transports", "--trtype", "SRP"))
    assert (t["trtype"], t["max_req_size"], t["immediate_data"]) == ("SRP", 4096, False)
    ok(daemon, "nvmf_create_subsystem", NQN, "-a")
    ok(daemon, "nvmf_subsystem_add_listener", NQN, "-t", "srp", "-a", SIM_ADDR, "-s", "5555")
    (la,) = subsystem(daemon)["listen_addresses"]
    assert (la["trtype"], la["traddr"], la["trsvcid"]) == ("SRP", SIM_ADDR, "5555")


def _sample_command_lines(method):
    """Two command lines of `method` from its spec: the required arguments only, and every
    argument (the second of two exclusive ones left out)."""
    cli_args = [a for a in method["args"] if not a.get("json_only")]
    skipped = {a["conflicts"] for a in cli_args if a.get("conflicts")}

    def words(arg):
        kind = arg["kind"]
        value = {
            "str": "x1", "int": "7", "list": "a,b", "int_list": "1,2", "key_value": "k=v",
            "size_mib": "2",
        }.get(kind)
        if kind in ("choice", "list_of", "flag_set"):
            value = arg["choices"][0]
        if kind == "int_in":
            value = str(arg["range"][0])
        if kind == "int" and arg["key"] == "block_size":
            value = "512"
        if "pos" in arg:
            return [value]
        flag = f"--{arg['long']}"
        return [flag] if value is None else [flag, value]

    def line(chosen):
        pos = sorted((a for a in chosen if "pos" in a), key=lambda a: a["pos"])
        opts = [a for a in chosen if "pos" not in a]
        return [w for a in pos + opts for w in words(a)]

    required = [a for a in cli_args if a.get("required") or "pos" in a and a.get("required")]
    every = [a for a in cli_args if a["key"] not in skipped]
    # A size needs its block size.
    for chosen in (required, every):
        for a in list(chosen):
            if a["kind"] == "size_mib" and not any(b["key"] == a["block_size"] for b in chosen):
                chosen.append(next(b for b in cli_args if b["key"] == a["block_size"]))
    return [line(required), line(every)]


def test_rust_and_python_command_lines_build_the_same_requests(rtgt_bin):
    """rtgt-rpc (from methods.json) and `rtgt rpc` (from the Rust specs) send the same request,
    keys in the same order, for every method's command lines."""
    from rtgt import cli

    specs = [m for m in cli.load_specs() if m["action"] == "call"]
    assert len(specs) > 60
    parser = cli.build_parser()
    compared = 0
    for method in specs:
        for words in _sample_command_lines(method):
            argv = [method["name"], *words]
            a = parser.parse_args(argv)
            ours = a.build(a)
            r = subprocess.run([str(rtgt_bin), "rpc", "--dry-run", *argv], capture_output=True,
                               text=True, timeout=30)
            assert r.returncode == 0, f"rtgt rpc {' '.join(argv)}: {r.stderr}"
            theirs = json.loads(r.stdout).get("params")
            assert json.dumps(ours) == json.dumps(theirs), f"{' '.join(argv)}:\n{ours}\n{theirs}"
            compared += 1
    assert compared == 2 * len(specs)
