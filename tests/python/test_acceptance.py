"""The acceptance sequence of issue 3, with its exact spdk-rpc commands.

These need the NVMe/RDMA transport in the binary (on the simulated fabric its device is
sim0 at 10.0.0.1).
"""

import json

from conftest import rdma_transport

NQN = "nqn.2016-06.io.spdk:cnode1"


def acceptance_sequence(t):
    rdma_transport(t, "-i", "131072", "-c", "8192")
    assert t.rpc("bdev_malloc_create", "64", "512", "-b", "Malloc0") == "Malloc0"
    t.rpc("nvmf_create_subsystem", NQN, "-a", "-s", "SPDK00000000000001", "-d", "SPDK_Controller1")
    t.rpc("nvmf_subsystem_add_ns", NQN, "Malloc0")
    t.rpc("nvmf_subsystem_add_listener", NQN, "-t", "rdma", "-a", "10.0.0.1", "-s", "4420")


def test_acceptance_commands(target):
    acceptance_sequence(target)
    subs = target.rpc("nvmf_get_subsystems")
    assert [s["nqn"] for s in subs] == ["nqn.2014-08.org.nvmexpress.discovery", NQN]
    s = subs[1]
    assert s["subtype"] == "NVMe"
    assert s["listen_addresses"] == [
        {"trtype": "RDMA", "adrfam": "IPv4", "traddr": "10.0.0.1", "trsvcid": "4420"}]
    assert s["allow_any_host"] is True
    assert s["hosts"] == []
    assert s["serial_number"] == "SPDK00000000000001"
    assert s["model_number"] == "SPDK_Controller1"
    assert s["namespaces"][0]["nsid"] == 1
    assert s["namespaces"][0]["bdev_name"] == "Malloc0"
    assert s["namespaces"][0]["name"] == "Malloc0"
    assert s["state"] == "active"
    tr = target.rpc("nvmf_get_transports")
    assert len(tr) == 1 and tr[0]["trtype"] == "RDMA"
    assert tr[0]["max_io_size"] == 131072 and tr[0]["in_capsule_data_size"] == 8192


def test_older_clients_io_unit_size_is_accepted(target):
    """The seed example `rpc.py nvmf_create_transport -t RDMA -u 8192 -i 131072 -c 8192`: the
    26.9 client dropped -u, older ones send io_unit_size, which must be accepted."""
    with target.client() as c:
        try:
            c.call("nvmf_create_transport", {
                "trtype": "RDMA", "io_unit_size": 8192, "max_io_size": 131072,
                "in_capsule_data_size": 8192, "no_srq": False, "c2h_success": True,
                "zcopy": False, "dif_insert_or_strip": False, "no_wr_batching": False,
                "disable_mappable_bar0": False, "disable_adaptive_irq": False,
                "disable_shadow_doorbells": False, "disable_command_passthru": False})
        except Exception as e:  # noqa: BLE001 - report the server's answer
            raise AssertionError(f"nvmf_create_transport failed: {e}") from e
    assert target.rpc("nvmf_get_transports")[0]["trtype"] == "RDMA"


def test_acceptance_save_config_round_trip(make_target):
    t = make_target()
    acceptance_sequence(t)
    first = t.cli("save_config").stdout
    path = t.dir / "c.json"
    path.write_text(first)
    t.restart(["--json", str(path)])
    again = t.cli("save_config").stdout
    assert again == first
    cfg = json.loads(again)
    nvmf = next(s for s in cfg["subsystems"] if s["subsystem"] == "nvmf")["config"]
    assert [c["method"] for c in nvmf][-1] == "nvmf_subsystem_add_listener"
