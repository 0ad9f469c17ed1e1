# -*- coding: utf-8 -*-
# Copyright: (c) 2026, rtgt developers
# Apache License 2.0 (see LICENSE at the top of the rtgt repository)

"""The plan of rtgt_listener (add/remove a listener, set its ANA state), without a target."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.rtgt.target.plugins.modules.rtgt_listener import (
    PlanError,
    find_listener,
    plan,
)

NQN = "nqn.2016-06.io.spdk:cnode1"
ADDR = {"trtype": "rdma", "traddr": "10.0.0.1", "adrfam": "ipv4", "trsvcid": "4420"}


def params(**kw):
    p = dict(nqn=NQN, state="present", trtype="rdma", traddr="10.0.0.1", trsvcid="4420",
             adrfam="ipv4", ana_state=None, anagrpid=None)
    p.update(kw)
    return p


def listener(*group_states, **kw):
    """A nvmf_subsystem_get_listeners entry; group_states are the states of groups 1, 2, ..."""
    l = {"address": {"trtype": "RDMA", "adrfam": "IPv4", "traddr": "10.0.0.1", "trsvcid": "4420"}}
    l.update(kw)
    if group_states:
        l["ana_states"] = [{"ana_group": i + 1, "ana_state": s} for i, s in enumerate(group_states)]
    return l


def test_find_listener_compares_addresses_as_spdk():
    other = {"address": {"trtype": "RDMA", "adrfam": "IPv4", "traddr": "10.0.0.1", "trsvcid": "4421"}}
    mine = listener("optimized")
    assert find_listener([other, mine], params()) is mine
    assert find_listener([other], params()) is None
    assert find_listener(None, params()) is None


def test_new_listener_comes_up_in_the_state_for_every_group_atomically():
    calls, after = plan(params(ana_state="inaccessible"), None)
    assert calls == [("nvmf_subsystem_add_listener",
                      {"nqn": NQN, "listen_address": ADDR, "ana_state": "inaccessible"})]
    assert after is None


def test_new_listener_with_a_group_is_added_then_set():
    calls, dummy = plan(params(ana_state="inaccessible", anagrpid=2), None)
    assert calls == [
        ("nvmf_subsystem_add_listener", {"nqn": NQN, "listen_address": ADDR}),
        ("nvmf_subsystem_listener_set_ana_state",
         {"nqn": NQN, "listen_address": ADDR, "ana_state": "inaccessible", "anagrpid": 2}),
    ]


def test_new_listener_without_state():
    calls, dummy = plan(params(), None)
    assert calls == [("nvmf_subsystem_add_listener", {"nqn": NQN, "listen_address": ADDR})]


def test_existing_listener_in_the_state_changes_nothing():
    assert plan(params(ana_state="optimized"), listener("optimized", "optimized"))[0] == []
    assert plan(params(ana_state="inaccessible", anagrpid=2),
                listener("optimized", "inaccessible"))[0] == []
    assert plan(params(), listener("optimized"))[0] == []


def test_all_groups_are_set_when_one_differs():
    calls, after = plan(params(ana_state="inaccessible"), listener("inaccessible", "optimized"))
    assert calls == [("nvmf_subsystem_listener_set_ana_state",
                      {"nqn": NQN, "listen_address": ADDR, "ana_state": "inaccessible"})]
    assert after == {1: "inaccessible", 2: "inaccessible"}


def test_one_group_is_set_alone():
    calls, after = plan(params(ana_state="non_optimized", anagrpid=1), listener("optimized", "optimized"))
    assert calls == [("nvmf_subsystem_listener_set_ana_state",
                      {"nqn": NQN, "listen_address": ADDR, "ana_state": "non_optimized", "anagrpid": 1})]
    assert after == {1: "non_optimized", 2: "optimized"}


def test_unknown_group_and_no_ana_reporting_are_refused():
    with pytest.raises(PlanError, match="no ANA group 3"):
        plan(params(ana_state="optimized", anagrpid=3), listener("optimized", "optimized"))
    with pytest.raises(PlanError, match="ana_reporting"):
        plan(params(ana_state="optimized"), listener())


def test_absent():
    assert plan(params(state="absent"), None) == ([], None)
    assert plan(params(state="absent"), listener("optimized")) == (
        [("nvmf_subsystem_remove_listener", {"nqn": NQN, "listen_address": ADDR})], None)
