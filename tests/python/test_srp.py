"""The SRP transport through the same methods: `nvmf_create_transport -t SRP` with its own
options, SRP listeners next to NVMe/RDMA ones, and the save_config round trip."""

import pytest

from conftest import parse_error

NQN = "nqn.2016-06.io.spdk:srp1"


def srp_transport(t, params):
    with t.client() as c:
        return c.call("nvmf_create_transport", params)


def test_srp_transport_takes_its_own_options(target):
    srp_transport(target, {"trtype": "SRP", "max_queue_depth": 64,
                                   "max_req_size": 8276, "use_srq": True, "srq_size": 1023,
                                   # rpc.py sends other transports' options too: ignored.
                                   "c2h_success": True, "zcopy": False})
    tr = target.rpc("nvmf_get_transports", "--trtype", "srp")
    assert len(tr) == 1
    assert tr[0]["trtype"] == "SRP"
    assert tr[0]["max_queue_depth"] == 64
    assert tr[0]["use_srq"] is True and tr[0]["srq_size"] == 1023
    assert "c2h_success" not in tr[0]
    err = target.call_fail("nvmf_create_transport", {"trtype": "srp"})
    assert err.code == -32603 and "already exists" in err.message


def test_invalid_srp_option_fails_creation(target):
    with target.client() as c:
        try:
            c.call("nvmf_create_transport", {"trtype": "SRP", "max_req_size": 10})
        except Exception as e:  # noqa: BLE001
            code, message = parse_error(e.message)
            assert code == -32603 and "max_req_size" in message
            return
    raise AssertionError("an SRP transport with max_req_size 10 was created")


def test_srp_and_rdma_listeners_round_trip(make_target):
    t = make_target()
    srp_transport(t, {"trtype": "SRP"})
    r = t.cli("nvmf_create_transport", "-t", "RDMA")
    assert r.returncode == 0, r.stdout + r.stderr
    t.rpc("bdev_malloc_create", "16", "512", "-b", "M0")
    t.rpc("nvmf_create_subsystem", NQN, "-a")
    t.rpc("nvmf_subsystem_add_ns", NQN, "M0")
    t.rpc("nvmf_subsystem_add_listener", NQN, "-t", "srp", "-a", "10.0.0.1", "-s", "5555")
    t.rpc("nvmf_subsystem_add_listener", NQN, "-t", "rdma", "-a", "10.0.0.1", "-s", "4420")
    listeners = [l["address"]["trtype"] for l in t.rpc("nvmf_subsystem_get_listeners", NQN)]
    assert listeners == ["SRP", "RDMA"]
    first = t.cli("save_config").stdout
    path = t.dir / "srp.json"
    path.write_text(first)
    t.restart(["--json", str(path)])
    assert t.cli("save_config").stdout == first
