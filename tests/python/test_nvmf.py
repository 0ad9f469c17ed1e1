"""nvmf methods through spdk-rpc: subsystems, namespaces, hosts, introspection, pause/resume,
and the error codes SPDK uses for each."""

import pytest

from conftest import rdma_transport

NQN = "nqn.2016-06.io.spdk:cnode1"
NQN2 = "nqn.2016-06.io.spdk:cnode2"
HOST = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
DISCOVERY = "nqn.2014-08.org.nvmexpress.discovery"


def test_subsystem_lifecycle_and_shape(target):
    target.rpc("nvmf_create_subsystem", NQN, "-a", "-s", "SPDK00000000000001",
               "-d", "SPDK_Controller1", "-m", "16")
    subs = target.rpc("nvmf_get_subsystems")
    assert [s["nqn"] for s in subs] == [DISCOVERY, NQN]
    d, s = subs
    assert d["subtype"] == "Discovery" and d["allow_any_host"] is True
    assert set(d) >= {"nqn", "subtype", "listen_addresses", "allow_any_host", "hosts"}
    assert s["subtype"] == "NVMe"
    assert s["state"] == "active"
    assert s["serial_number"] == "SPDK00000000000001"
    assert s["model_number"] == "SPDK_Controller1"
    assert s["max_namespaces"] == 16
    assert (s["min_cntlid"], s["max_cntlid"]) == (1, 65519)
    assert s["listen_addresses"] == [] and s["hosts"] == [] and s["namespaces"] == []
    assert target.rpc("nvmf_get_subsystems", NQN) == [s]
    target.rpc("nvmf_delete_subsystem", NQN)
    assert [x["nqn"] for x in target.rpc("nvmf_get_subsystems")] == [DISCOVERY]


def test_duplicate_nqn(target):
    target.rpc("nvmf_create_subsystem", NQN)
    err = target.rpc_fail("nvmf_create_subsystem", NQN)
    assert err.code == -32603 and NQN in err.message


@pytest.mark.parametrize("bad", [
    "nqn.2016-06.io.spdk",  # fine by the rules: control
    "nqn.16-06.io.spdk:cnode1",
    "iqn.2016-06.io.spdk:cnode1",
    "nqn.2016-06.io_spdk:cnode1",
    "nqn.2014-08.org.nvmexpress:uuid:not-a-uuid",
])
def test_invalid_nqn(target, bad):
    if bad == "nqn.2016-06.io.spdk":
        target.rpc("nvmf_create_subsystem", bad)
        return
    err = target.rpc_fail("nvmf_create_subsystem", bad)
    assert err.code == -32603 and bad in err.message
    assert [s["nqn"] for s in target.rpc("nvmf_get_subsystems")] == [DISCOVERY]


def test_invalid_serial_model_and_cntlid(target):
    err = target.rpc_fail("nvmf_create_subsystem", NQN, "-s", "S" * 21)
    assert err.code == -32602
    err = target.rpc_fail("nvmf_create_subsystem", NQN, "-d", "M" * 41)
    assert err.code == -32602
    err = target.rpc_fail("nvmf_create_subsystem", NQN, "-i", "0")
    assert err.code == -32602 and "Invalid cntlid range" in err.message
    err = target.rpc_fail("nvmf_create_subsystem", NQN, "-i", "10", "-I", "5")
    assert err.code == -32602 and "[10-5]" in err.message
    err = target.rpc_fail("nvmf_create_subsystem", NQN, "-I", "65520")
    assert err.code == -32602
    err = target.rpc_fail("nvmf_create_subsystem", NQN, "-t", "othertgt")
    assert err.code == -32603 and "othertgt" in err.message
    assert [s["nqn"] for s in target.rpc("nvmf_get_subsystems")] == [DISCOVERY]


def test_missing_subsystem(target):
    for args in (["nvmf_delete_subsystem", NQN], ["nvmf_get_subsystems", NQN],
                 ["nvmf_subsystem_add_ns", NQN, "Malloc0"],
                 ["nvmf_subsystem_get_controllers", NQN], ["nvmf_subsystem_get_qpairs", NQN],
                 ["nvmf_subsystem_get_listeners", NQN], ["nvmf_subsystem_add_host", NQN, HOST]):
        err = target.rpc_fail(*args)
        assert err.code == -32602, args
        assert NQN in err.message, args


def test_namespaces(target):
    target.rpc("bdev_malloc_create", "16", "512", "-b", "Malloc0")
    target.rpc("bdev_malloc_create", "16", "512", "-b", "Malloc1")
    target.rpc("bdev_malloc_create", "16", "512", "-b", "Malloc2")
    target.rpc("nvmf_create_subsystem", NQN, "-a")
    target.rpc("nvmf_create_subsystem", NQN2, "-a")
    # The result is the NSID (spdk-rpc does not print it; the client returns it).
    assert target.call("nvmf_subsystem_add_ns", {"nqn": NQN,
                                                 "namespace": {"bdev_name": "Malloc0"}}) == 1
    target.rpc("nvmf_subsystem_add_ns", NQN, "Malloc1", "-n", "5",
               "-g", "00112233445566778899AABBCCDDEEFF", "-e", "0123456789abcdef",
               "-u", "ceccf520-691e-4b46-9546-34af789907c5")
    ns = target.rpc("nvmf_get_subsystems", NQN)[0]["namespaces"]
    assert [n["nsid"] for n in ns] == [1, 5]
    assert ns[0]["bdev_name"] == ns[0]["name"] == "Malloc0"
    assert ns[0]["uuid"] == target.rpc("bdev_get_bdevs", "-b", "Malloc0")[0]["uuid"]
    assert ns[1]["nguid"] == "00112233445566778899AABBCCDDEEFF"
    assert ns[1]["eui64"] == "0123456789ABCDEF"
    assert ns[1]["uuid"] == "ceccf520-691e-4b46-9546-34af789907c5"

    # A bdev backs one namespace in the whole target (SPDK's claim).
    err = target.rpc_fail("nvmf_subsystem_add_ns", NQN2, "Malloc0")
    assert err.code == -32602 and "Malloc0" in err.message
    # NSID in use.
    err = target.rpc_fail("nvmf_subsystem_add_ns", NQN, "Malloc2", "-n", "5")
    assert err.code == -32602 and "5" in err.message
    # Unknown bdev.
    err = target.rpc_fail("nvmf_subsystem_add_ns", NQN, "Nope")
    assert err.code == -32602 and "Nope" in err.message
    # Bad identifiers.
    err = target.rpc_fail("nvmf_subsystem_add_ns", NQN, "Malloc2", "-g", "1234")
    assert err.code == -32602 and "nguid" in err.message
    err = target.rpc_fail("nvmf_subsystem_add_ns", NQN, "Malloc2", "-e", "12")
    assert err.code == -32602 and "eui64" in err.message

    err = target.rpc_fail("nvmf_subsystem_remove_ns", NQN, "7")
    assert err.code == -32602
    target.rpc("nvmf_subsystem_remove_ns", NQN, "1")
    assert target.rpc("bdev_get_bdevs", "-b", "Malloc0")[0]["claimed"] is False
    target.rpc("nvmf_subsystem_add_ns", NQN2, "Malloc0")
    assert target.rpc("nvmf_get_subsystems", NQN2)[0]["namespaces"][0]["nsid"] == 1


def test_hosts(target):
    target.rpc("nvmf_create_subsystem", NQN)
    target.rpc("nvmf_subsystem_add_host", NQN, HOST)
    s = target.rpc("nvmf_get_subsystems", NQN)[0]
    assert s["hosts"] == [{"nqn": HOST}] and s["allow_any_host"] is False
    err = target.rpc_fail("nvmf_subsystem_add_host", NQN, HOST)
    assert err.code == -32603 and HOST in err.message
    target.rpc("nvmf_subsystem_allow_any_host", NQN, "--allow-any-host")
    assert target.rpc("nvmf_get_subsystems", NQN)[0]["allow_any_host"] is True
    target.rpc("nvmf_subsystem_allow_any_host", NQN, "--allow-any-host")  # no-op
    target.rpc("nvmf_subsystem_allow_any_host", NQN, "--no-allow-any-host")
    assert target.rpc("nvmf_get_subsystems", NQN)[0]["allow_any_host"] is False
    target.rpc("nvmf_subsystem_remove_host", NQN, HOST)
    err = target.rpc_fail("nvmf_subsystem_remove_host", NQN, HOST)
    assert err.code == -32603 and HOST in err.message
    err = target.rpc_fail("nvmf_subsystem_add_host", NQN, HOST, "--dhchap-key", "key0")
    assert err.code == -32602 and "key0" in err.message


def test_introspection(target):
    target.rpc("nvmf_create_subsystem", NQN, "-a")
    assert target.rpc("nvmf_subsystem_get_controllers", NQN) == []
    assert target.rpc("nvmf_subsystem_get_qpairs", NQN) == []
    assert target.rpc("nvmf_subsystem_get_listeners", NQN) == []
    stats = target.rpc("nvmf_get_stats")
    assert stats["tick_rate"] > 0
    groups = stats["poll_groups"]
    assert [g["name"] for g in groups] == ["nvmf_tgt_poll_group_000", "nvmf_tgt_poll_group_001"]
    assert {"admin_qpairs", "io_qpairs", "current_admin_qpairs", "current_io_qpairs",
            "current_unassociated_qpairs", "pending_bdev_io", "completed_nvme_io",
            "transports"} <= set(groups[0])
    assert target.rpc("nvmf_get_transports") == []
    err = target.rpc_fail("nvmf_get_transports", "--trtype", "RDMA")
    assert err.code == -19


def test_transport_errors(target):
    err = target.rpc_fail("nvmf_create_transport", "-t", "CARRIER_PIGEON")
    assert err.code == -32602 and "Invalid transport type 'CARRIER_PIGEON'" in err.message
    err = target.call_fail("nvmf_create_transport", {"trtype": "RDMA", "max_queue_depth": "deep"})
    assert err.code == -32602
    err = target.call_fail("nvmf_create_transport", {"max_queue_depth": 128})
    assert err.code == -32602


def test_listener_needs_its_transport(target):
    target.rpc("nvmf_create_subsystem", NQN, "-a")
    err = target.rpc_fail("nvmf_subsystem_add_listener", NQN, "-t", "rdma", "-a", "10.0.0.1",
                          "-s", "4420")
    assert err.code == -32602 and "transport" in err.message
    err = target.rpc_fail("nvmf_subsystem_remove_listener", NQN, "-t", "rdma", "-a", "10.0.0.1",
                          "-s", "4420")
    assert err.code == -32602


def test_listeners(target):
    rdma_transport(target)
    target.rpc("nvmf_create_subsystem", NQN, "-a")
    target.rpc("nvmf_subsystem_add_listener", NQN, "-t", "rdma", "-a", "10.0.0.1", "-s", "4420")
    addr = {"trtype": "RDMA", "adrfam": "IPv4", "traddr": "10.0.0.1", "trsvcid": "4420"}
    assert target.rpc("nvmf_get_subsystems", NQN)[0]["listen_addresses"] == [addr]
    assert target.rpc("nvmf_subsystem_get_listeners", NQN) == [{"address": addr}]
    err = target.rpc_fail("nvmf_subsystem_add_listener", NQN, "-t", "rdma", "-a", "10.0.0.1",
                          "-s", "4420")
    assert err.code == -32602
    target.rpc("nvmf_subsystem_add_listener", "discovery", "-t", "rdma", "-a", "10.0.0.1",
               "-s", "4420")
    target.rpc("nvmf_subsystem_remove_listener", NQN, "-t", "rdma", "-a", "10.0.0.1", "-s", "4420")
    assert target.rpc("nvmf_subsystem_get_listeners", NQN) == []


def test_pause_and_resume(target):
    target.rpc("bdev_malloc_create", "16", "512", "-b", "Malloc0")
    target.rpc("nvmf_create_subsystem", NQN, "-a")
    target.rpc("nvmf_subsystem_add_ns", NQN, "Malloc0")
    assert target.call("nvmf_subsystem_pause", {"nqn": NQN}) is True
    assert target.rpc("nvmf_get_subsystems", NQN)[0]["state"] == "paused"
    assert target.call("nvmf_subsystem_resume", {"nqn": NQN}) is True
    assert target.rpc("nvmf_get_subsystems", NQN)[0]["state"] == "active"
    assert target.call("nvmf_subsystem_pause", {"nqn": NQN, "nsid": 1}) is True
    assert target.rpc("nvmf_get_subsystems", NQN)[0]["state"] == "paused"
    assert target.call("nvmf_subsystem_resume", {"nqn": NQN}) is True
    err = target.call_fail("nvmf_subsystem_pause", {"nqn": NQN, "nsid": 9})
    assert err.code == -32602 and "9" in err.message
    err = target.call_fail("nvmf_subsystem_pause", {"nqn": NQN2})
    assert err.code == -32602 and NQN2 in err.message
    err = target.call_fail("nvmf_subsystem_resume", {"nqn": NQN, "nsid": 1})
    assert err.code == -32602  # resume takes no nsid


def test_startup_settings(startup_target):
    t = startup_target
    # Settings that would have no effect in rtgt are refused (they used to be saved).
    for args, words in [
        (["-p", "identify_ctrlr"], "identify_ctrlr"),
        (["--dup-host-policy", "restrict_per_listener"], "restrict_per_listener"),
        (["--discovery-filters", "transport"], "transport"),
    ]:
        err = t.rpc_fail("nvmf_set_config", *args)
        assert err.code == -32602 and words in err.message and "not supported" in err.message
    err = t.rpc_fail("nvmf_set_crdt", "-t1", "1", "-t2", "2", "-t3", "3")
    assert err.code == -32602 and "crdt1 1" in err.message
    err = t.call_fail("nvmf_set_config", {"dhchap_dhgroups": ["ffdhe1"]})
    assert err.code == -32602
    err = t.call_fail("nvmf_set_config", {"poll_groups_mask": "0x4"})
    assert err.code == -32602
    # The DH-HMAC-CHAP lists restrict what is negotiated (docs/security.md).
    t.rpc("nvmf_set_config", "--dup-host-policy", "allow", "--dhchap-digests",
          "sha384,sha512")
    t.rpc("nvmf_set_crdt", "-t1", "0")
    t.rpc("framework_start_init")
    cfg = t.rpc("framework_get_config", "nvmf")
    p = cfg[0]["params"]
    assert p["admin_cmd_passthru"]["identify_ctrlr"] is False
    assert p["dhchap_digests"] == ["sha384", "sha512"]
    assert p["dup_host_policy"] == "allow"
    assert cfg[2] == {"method": "nvmf_set_crdt", "params": {"crdt1": 0, "crdt2": 0, "crdt3": 0}}
