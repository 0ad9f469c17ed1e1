# -*- coding: utf-8 -*-
# Copyright: (c) 2026, rtgt developers
# Apache License 2.0 (see LICENSE at the top of the rtgt repository)

"""The reconciliation plan of rtgt_subsystem, without a target."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.rtgt.target.plugins.modules.rtgt_subsystem import ana_reporting, listener_key, plan

NQN = "nqn.2016-06.io.spdk:cnode1"
H1 = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
H2 = "nqn.2014-08.org.nvmexpress:uuid:66666666-7777-8888-9999-000000000000"


def params(**kw):
    p = dict(nqn=NQN, state="present", serial_number=None, model_number=None,
             allow_any_host=None, max_namespaces=None, namespaces=None, hosts=None,
             listeners=None)
    p.update(kw)
    return p


def existing(**kw):
    s = {"nqn": NQN, "subtype": "NVMe", "allow_any_host": False, "serial_number": "SN",
         "model_number": "MN", "namespaces": [], "hosts": [], "listen_addresses": []}
    s.update(kw)
    return s


def methods(calls):
    return [c[0] for c in calls]


def test_create_orders_listeners_last():
    calls, after = plan(params(serial_number="SN", allow_any_host=False,
                               namespaces=[{"bdev_name": "M0", "nsid": 1}],
                               hosts=[H1],
                               listeners=[{"trtype": "RDMA", "traddr": "10.0.0.1", "trsvcid": "4420", "adrfam": "ipv4"}]),
                        None)
    assert methods(calls) == ["nvmf_create_subsystem", "nvmf_subsystem_add_host",
                              "nvmf_subsystem_add_ns", "nvmf_subsystem_add_listener"]
    assert calls[0][1] == {"nqn": NQN, "allow_any_host": False, "serial_number": "SN"}
    assert after["hosts"] == [H1]


def test_nothing_to_do_when_matching():
    cur = existing(namespaces=[{"nsid": 1, "bdev_name": "M0", "uuid": "AA-bb"}],
                   hosts=[{"nqn": H1}],
                   listen_addresses=[{"trtype": "RDMA", "adrfam": "IPv4", "traddr": "10.0.0.1", "trsvcid": "4420"}])
    calls, dummy = plan(params(allow_any_host=False, hosts=[H1],
                               namespaces=[{"bdev_name": "M0", "nsid": None, "uuid": "aa-BB", "nguid": None, "eui64": None}],
                               listeners=[{"trtype": "rdma", "traddr": "10.0.0.1", "trsvcid": "4420", "adrfam": "ipv4"}]),
                        cur)
    assert calls == []


def test_reconciles_to_exactly_the_declaration():
    cur = existing(namespaces=[{"nsid": 1, "bdev_name": "M0"}, {"nsid": 2, "bdev_name": "M1"}],
                   hosts=[{"nqn": H1}],
                   listen_addresses=[{"trtype": "RDMA", "adrfam": "IPv4", "traddr": "10.0.0.1", "trsvcid": "4420"}])
    calls, after = plan(params(allow_any_host=True, hosts=[H2],
                               namespaces=[{"bdev_name": "M1", "nsid": 5}],
                               listeners=[{"trtype": "RDMA", "traddr": "10.0.0.1", "trsvcid": "4421", "adrfam": "ipv4"}]),
                        cur)
    assert methods(calls) == [
        "nvmf_subsystem_remove_listener",
        "nvmf_subsystem_add_host", "nvmf_subsystem_remove_host",
        "nvmf_subsystem_allow_any_host",
        "nvmf_subsystem_remove_ns", "nvmf_subsystem_remove_ns", "nvmf_subsystem_add_ns",
        "nvmf_subsystem_add_listener",
    ]
    assert calls[5][1] == {"nqn": NQN, "nsid": 2}, "a bdev moving to another nsid is removed and re-added"
    assert after["namespaces"] == [{"bdev_name": "M1", "nsid": 5}]
    assert after["allow_any_host"] is True


def test_unmanaged_lists_are_left_alone():
    cur = existing(namespaces=[{"nsid": 1, "bdev_name": "M0"}], hosts=[{"nqn": H1}])
    assert plan(params(), cur)[0] == []
    calls, dummy = plan(params(hosts=[], namespaces=[]), cur)
    assert methods(calls) == ["nvmf_subsystem_remove_host", "nvmf_subsystem_remove_ns"]


def test_absent():
    assert plan(params(state="absent"), None) == ([], {})
    assert methods(plan(params(state="absent"), existing())[0]) == ["nvmf_delete_subsystem"]


def test_listener_identity_follows_spdk():
    a = {"trtype": "rdma", "traddr": "10.0.0.1", "trsvcid": "4420"}
    b = {"trtype": "RDMA", "adrfam": "IPv4", "traddr": "10.0.0.1", "trsvcid": "4420"}
    assert listener_key(a) == listener_key(b)
    assert listener_key({"trtype": "RDMA", "adrfam": "ipv6", "traddr": "FE80::1", "trsvcid": "1"}) == \
        listener_key({"trtype": "RDMA", "adrfam": "IPv6", "traddr": "fe80:0:0::1", "trsvcid": "1"})


def test_gateway_identity_is_passed_at_creation():
    calls, dummy = plan(params(serial_number="SN", ana_reporting=True, min_cntlid=1001,
                               max_cntlid=2000), None)
    assert calls[0] == ("nvmf_create_subsystem",
                        {"nqn": NQN, "allow_any_host": False, "serial_number": "SN",
                         "ana_reporting": True, "min_cntlid": 1001, "max_cntlid": 2000})
    calls, dummy = plan(params(ana_reporting=False), None)
    assert calls[0][1]["ana_reporting"] is False


def test_ana_reporting_is_read_from_the_namespaces():
    assert ana_reporting(existing()) is None
    assert ana_reporting(existing(namespaces=[{"nsid": 1, "bdev_name": "M0", "anagrpid": 1}])) is True
    assert ana_reporting(existing(namespaces=[{"nsid": 1, "bdev_name": "M0"}])) is False


def test_a_namespace_changing_group_is_moved_in_place():
    cur = existing(namespaces=[{"nsid": 1, "bdev_name": "Rbd1", "anagrpid": 1},
                               {"nsid": 2, "bdev_name": "Rbd2", "anagrpid": 2}])
    calls, after = plan(params(namespaces=[{"bdev_name": "Rbd1", "nsid": 1, "anagrpid": 1},
                                           {"bdev_name": "Rbd2", "nsid": 2, "anagrpid": 1}]), cur)
    assert calls == [("nvmf_subsystem_set_ns_ana_group", {"nqn": NQN, "nsid": 2, "anagrpid": 1})]
    assert [n["anagrpid"] for n in after["namespaces"]] == [1, 1]
    # no anagrpid declared: the group is left as it is
    calls, dummy = plan(params(namespaces=[{"bdev_name": "Rbd2", "nsid": 2}]),
                        existing(namespaces=[{"nsid": 2, "bdev_name": "Rbd2", "anagrpid": 2}]))
    assert calls == []


def test_a_new_namespace_is_added_in_its_group():
    calls, dummy = plan(params(namespaces=[{"bdev_name": "Rbd2", "nsid": 2, "anagrpid": 1}]), existing())
    assert calls == [("nvmf_subsystem_add_ns",
                      {"nqn": NQN, "namespace": {"bdev_name": "Rbd2", "nsid": 2, "anagrpid": 1}})]
