#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, rtgt developers
# Apache License 2.0 (see LICENSE at the top of the rtgt repository)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rtgt_listener
short_description: One listener of an NVMe-oF subsystem on an rtgt target, and its ANA state
version_added: "0.1.0"
description:
  - Makes sure the subsystem O(nqn) listens on one address (or does not), and, with
    O(ana_state), that the listener reports that Asymmetric Namespace Access state for the
    ANA group O(anagrpid), or for every group when O(anagrpid) is left out.
  - Idempotent. The state is compared with C(nvmf_subsystem_get_listeners); nothing is called
    when it already holds, so the task reports no change.
  - This is the module a failover playbook runs on each gateway of a gateway group
    (docs/ha.md). Demote the old owner before promoting the new one.
  - A new listener with O(ana_state) and no O(anagrpid) comes up in that state for every group
    at once (C(nvmf_subsystem_add_listener) with C(ana_state)); with O(anagrpid) it is added
    with the target's default state and then set for that group.
  - Do not also declare this subsystem's listeners with M(rtgt.target.rtgt_subsystem)'s
    O(rtgt.target.rtgt_subsystem#module:listeners) option, which would remove the ones it does
    not list.
options:
  nqn:
    description: NQN of the subsystem (it must exist, see M(rtgt.target.rtgt_subsystem)).
    type: str
    required: true
  state:
    description: Whether the listener should exist.
    type: str
    choices: [present, absent]
    default: present
  trtype:
    description: Transport type, V(RDMA) or V(SRP) (case-insensitive).
    type: str
    required: true
  traddr:
    description: Transport address, for example an IP address of an RDMA device.
    type: str
    required: true
  trsvcid:
    description: Transport service ID (the port, for example V(4420)).
    type: str
  adrfam:
    description: Address family.
    type: str
    choices: [ipv4, ipv6, ib, fc]
    default: ipv4
  ana_state:
    description:
      - The ANA state the listener reports. The subsystem must have been created with
        C(ana_reporting).
      - Left as it is when not given.
    type: str
    choices: [optimized, non_optimized, inaccessible]
  anagrpid:
    description:
      - The ANA group O(ana_state) applies to; every group of the listener when not given.
    type: int
extends_documentation_fragment:
  - rtgt.target.rpc
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  platform:
    platforms: posix
author:
  - rtgt developers (@rtgt)
"""

EXAMPLES = r"""
- name: A new listener that comes up inaccessible for every group
  rtgt.target.rtgt_listener:
    nqn: nqn.2016-06.io.spdk:cnode1
    trtype: RDMA
    traddr: 192.168.100.8
    trsvcid: "4420"
    ana_state: inaccessible

- name: Promote it for ANA group 1
  rtgt.target.rtgt_listener:
    nqn: nqn.2016-06.io.spdk:cnode1
    trtype: RDMA
    traddr: 192.168.100.8
    trsvcid: "4420"
    ana_state: optimized
    anagrpid: 1

- name: Stop listening there
  rtgt.target.rtgt_listener:
    nqn: nqn.2016-06.io.spdk:cnode1
    trtype: RDMA
    traddr: 192.168.100.8
    trsvcid: "4420"
    state: absent
"""

RETURN = r"""
listener:
  description: The listener as C(nvmf_subsystem_get_listeners) reports it after the task (empty
    when absent; in check mode, the state before the task).
  returned: always
  type: dict
  sample: {"address": {"trtype": "RDMA", "adrfam": "IPv4", "traddr": "192.168.100.8", "trsvcid": "4420"},
           "ana_states": [{"ana_group": 1, "ana_state": "optimized"}]}
actions:
  description: The RPC calls made (or, in check mode, that would be made), in order.
  returned: always
  type: list
  elements: dict
  sample:
    - method: nvmf_subsystem_listener_set_ana_state
      params:
        nqn: nqn.2016-06.io.spdk:cnode1
        listen_address: {"trtype": "RDMA", "traddr": "192.168.100.8", "adrfam": "ipv4", "trsvcid": "4420"}
        ana_state: inaccessible
        anagrpid: 1
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rtgt.target.plugins.module_utils.rtgt_rpc import (
    DISCOVERY_NQN,
    RpcError,
    client_from_module,
    fail_rpc,
    rpc_argument_spec,
)
from ansible_collections.rtgt.target.plugins.module_utils.rtgt_listen import (
    listener_key,
    listener_params,
)


class PlanError(Exception):
    """The declaration cannot be applied to this listener (the message says why)."""


def find_listener(listeners, want):
    key = listener_key(want)
    for l in listeners or []:
        if listener_key(l["address"]) == key:
            return l
    return None


def states(listener):
    """{group: state} of a listener, or None when the subsystem does not report ANA."""
    if listener is None or "ana_states" not in listener:
        return None
    return dict((s["ana_group"], s["ana_state"]) for s in listener["ana_states"])


def plan(p, current):
    """The calls that turn ``current`` (a nvmf_subsystem_get_listeners entry or None) into the
    declaration, and the predicted {group: state} (None when not reported) after them."""
    nqn = p["nqn"]
    addr = listener_params(p)
    group = p["anagrpid"]
    if p["state"] == "absent":
        if current is None:
            return [], None
        return [("nvmf_subsystem_remove_listener", {"nqn": nqn, "listen_address": addr})], None

    calls = []
    want = p["ana_state"]
    have = states(current)
    if current is None:
        add = {"nqn": nqn, "listen_address": addr}
        if want is not None and group is None:
            add["ana_state"] = want
        calls.append(("nvmf_subsystem_add_listener", add))
        if want is None or group is None:
            return calls, None
        have = None  # unknown until it exists: set the group's state after adding it
    elif want is not None:
        if have is None:
            raise PlanError("subsystem %s does not report ANA states (create it with "
                            "ana_reporting to set ana_state)" % nqn)
        if group is not None and group not in have:
            raise PlanError("listener %s of %s has no ANA group %d (groups 1-%d)"
                            % (addr["traddr"], nqn, group, max(have) if have else 0))
        groups = [group] if group is not None else sorted(have)
        if all(have[g] == want for g in groups):
            return [], have
    else:
        return [], have

    setp = {"nqn": nqn, "listen_address": addr, "ana_state": want}
    if group is not None:
        setp["anagrpid"] = group
    calls.append(("nvmf_subsystem_listener_set_ana_state", setp))
    if have is None:
        return calls, None
    after = dict(have)
    for g in ([group] if group is not None else have):
        after[g] = want
    return calls, after


def view(listener):
    if listener is None:
        return {}
    out = {"address": listener_params(listener["address"])}
    if "ana_states" in listener:
        out["ana_states"] = states(listener)
    return out


def main():
    spec = rpc_argument_spec()
    spec.update(
        nqn=dict(type="str", required=True),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        trtype=dict(type="str", required=True),
        traddr=dict(type="str", required=True),
        trsvcid=dict(type="str"),
        adrfam=dict(type="str", default="ipv4", choices=["ipv4", "ipv6", "ib", "fc"]),
        ana_state=dict(type="str", choices=["optimized", "non_optimized", "inaccessible"]),
        anagrpid=dict(type="int"),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    p = module.params
    if p["nqn"] == DISCOVERY_NQN:
        module.fail_json(msg="the discovery subsystem's listeners are managed with nvmf_subsystem_add_listener")
    if p["anagrpid"] is not None and p["ana_state"] is None:
        module.fail_json(msg="anagrpid is only used with ana_state")

    client = client_from_module(module)
    actions = []
    try:
        listeners = client.call("nvmf_subsystem_get_listeners", {"nqn": p["nqn"]})
        current = find_listener(listeners, p)
        try:
            calls, predicted = plan(p, current)
        except PlanError as e:
            module.fail_json(msg=str(e), listener=current or {})
        for method, params in calls:
            actions.append({"method": method, "params": params})
            if not module.check_mode:
                client.call(method, params)
        final = current
        if calls and not module.check_mode:
            final = find_listener(client.call("nvmf_subsystem_get_listeners", {"nqn": p["nqn"]}), p)
        result = dict(changed=bool(calls), actions=actions, listener=final or {})
        if module._diff:
            if calls and not module.check_mode:
                after = view(final)
            elif not calls:
                after = view(current)
            elif p["state"] == "absent":
                after = {}
            else:
                after = {"address": listener_params(p)}
                if predicted is not None:
                    after["ana_states"] = predicted
            result["diff"] = dict(before=view(current), after=after)
        module.exit_json(**result)
    except RpcError as e:
        fail_rpc(module, e, actions=actions)
    finally:
        client.close()


if __name__ == "__main__":
    main()
