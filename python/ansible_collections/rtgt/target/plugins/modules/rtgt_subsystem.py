#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, rtgt developers
# Apache License 2.0 (see LICENSE at the top of the rtgt repository)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rtgt_subsystem
short_description: Declare an NVMe-oF subsystem on an rtgt target, with its namespaces, hosts and listeners
version_added: "0.1.0"
description:
  - Makes sure the subsystem O(nqn) exists with the declared serial number, model number and
    O(allow_any_host), or does not exist.
  - O(namespaces), O(hosts) and O(listeners) are reconciled to exactly what is declared;
    what is missing is added, what is not declared is removed. An option that is left out
    is not managed (its current entries stay); an empty list removes every entry.
  - Changes are made in an order that never exposes a half-built subsystem. Listeners that
    go away are removed first, then hosts, C(allow_any_host), namespaces, and new listeners
    last.
options:
  nqn:
    description: NQN of the subsystem.
    type: str
    required: true
  state:
    description: Whether the subsystem should exist.
    type: str
    choices: [present, absent]
    default: present
  serial_number:
    description:
      - Serial number reported to hosts (up to 20 printable ASCII characters).
      - It is fixed at creation; a different value on an existing subsystem fails the task.
    type: str
  model_number:
    description:
      - Model number reported to hosts (up to 40 printable ASCII characters).
      - It is fixed at creation; a different value on an existing subsystem fails the task.
    type: str
  allow_any_host:
    description:
      - Let any host connect (V(true)) or only the hosts in O(hosts) (V(false)).
      - Left as it is on an existing subsystem when not given; V(false) for a new one.
    type: bool
  max_namespaces:
    description: Maximum number of namespaces, fixed at creation (the target's default when not given).
    type: int
  ana_reporting:
    description:
      - Report Asymmetric Namespace Access (ANA) states, fixed at creation. Every gateway of a
        gateway group needs it; set the listeners' states with M(rtgt.target.rtgt_listener).
      - On an existing subsystem with namespaces a different value fails the task (the target
        shows the namespaces' ANA groups only with ANA reporting).
    type: bool
  min_cntlid:
    description:
      - Lowest controller ID the subsystem assigns, fixed at creation (1 when not given).
      - The gateways of a gateway group need disjoint ranges (docs/ha.md).
    type: int
  max_cntlid:
    description: Highest controller ID the subsystem assigns, fixed at creation (65519 when not given).
    type: int
  namespaces:
    description:
      - The namespaces the subsystem should have. A namespace is the same as an existing one
        when its bdev is the same and every identifier given here (nsid, uuid, nguid, eui64)
        matches; otherwise the old one is removed and the new one added.
    type: list
    elements: dict
    suboptions:
      bdev_name:
        description: Block device behind the namespace (see M(rtgt.target.rtgt_bdev)).
        type: str
        required: true
      nsid:
        description: Namespace ID; the lowest free one when not given.
        type: int
      uuid:
        description: Namespace UUID; the bdev's UUID when not given.
        type: str
      nguid:
        description: Namespace globally unique identifier, 32 hex digits.
        type: str
      eui64:
        description: IEEE extended unique identifier, 16 hex digits.
        type: str
      anagrpid:
        description:
          - ANA group of the namespace (subsystems with O(ana_reporting)); the group numbered
            like its NSID when not given (as SPDK).
          - A namespace already there in another group is moved
            (C(nvmf_subsystem_set_ns_ana_group)), not removed and added again; this is how
            load-balancing groups are rebalanced between the gateways of a group (docs/ha.md).
        type: int
  hosts:
    description: NQNs of the hosts allowed to connect (when O(allow_any_host) is false).
    type: list
    elements: str
  listeners:
    description: The addresses the subsystem should listen on.
    type: list
    elements: dict
    suboptions:
      trtype:
        description: Transport type, V(RDMA) or V(SRP) (case-insensitive). The transport must exist
          (see M(rtgt.target.rtgt_transport)).
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
- name: One subsystem, exactly as declared
  rtgt.target.rtgt_subsystem:
    nqn: nqn.2016-06.io.spdk:cnode1
    serial_number: SPDK00000000000001
    model_number: SPDK_Controller1
    allow_any_host: false
    namespaces:
      - bdev_name: Malloc0
        nsid: 1
      - bdev_name: Malloc1
    hosts:
      - nqn.2014-08.org.nvmexpress:uuid:2b0f5c9e-4b7a-4a8e-9d64-0d6f1c1e2a10
    listeners:
      - trtype: RDMA
        traddr: 192.168.100.8
        trsvcid: "4420"

- name: Remove it
  rtgt.target.rtgt_subsystem:
    nqn: nqn.2016-06.io.spdk:cnode1
    state: absent
"""

RETURN = r"""
subsystem:
  description: The subsystem as C(nvmf_get_subsystems) reports it after the task (empty when
    absent; in check mode, the state before the task).
  returned: always
  type: dict
  sample: {"nqn": "nqn.2016-06.io.spdk:cnode1", "allow_any_host": false, "namespaces": [{"nsid": 1, "bdev_name": "Malloc0"}]}
actions:
  description: The RPC calls made (or, in check mode, that would be made), in order.
  returned: always
  type: list
  elements: dict
  sample:
    - method: nvmf_subsystem_add_host
      params:
        nqn: nqn.2016-06.io.spdk:cnode1
        host: nqn.2014-08.org.nvmexpress:uuid:2b0f5c9e-4b7a-4a8e-9d64-0d6f1c1e2a10
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rtgt.target.plugins.module_utils.rtgt_listen import (
    listener_key,
    listener_params,
)
from ansible_collections.rtgt.target.plugins.module_utils.rtgt_rpc import (
    DISCOVERY_NQN,
    RpcError,
    client_from_module,
    fail_rpc,
    rpc_argument_spec,
)


def get_subsystem(client, nqn):
    # Listing all and filtering avoids depending on the error a missing NQN gets (SPDK
    # versions differ: -19 or -32602).
    for s in client.call("nvmf_get_subsystems") or []:
        if s.get("nqn") == nqn:
            return s
    return None


def _hex(value):
    return value.replace("-", "").upper() if value else value


def ns_matches(want, have):
    if want["bdev_name"] != have.get("bdev_name"):
        return False
    if want.get("nsid") is not None and want["nsid"] != have.get("nsid"):
        return False
    if want.get("uuid") and want["uuid"].lower() != (have.get("uuid") or "").lower():
        return False
    for key in ("nguid", "eui64"):
        if want.get(key) and _hex(want[key]) != _hex(have.get(key)):
            return False
    return True


def ns_params(want):
    ns = {"bdev_name": want["bdev_name"]}
    for key in ("nsid", "uuid", "nguid", "eui64", "anagrpid"):
        if want.get(key) is not None:
            ns[key] = want[key]
    return ns


NS_VIEW = ("nsid", "bdev_name", "uuid", "nguid", "eui64", "anagrpid")


def view(sub):
    """The comparable, diff-friendly view of a subsystem."""
    if not sub:
        return {}
    return {
        "nqn": sub["nqn"],
        "serial_number": sub.get("serial_number"),
        "model_number": sub.get("model_number"),
        "allow_any_host": sub.get("allow_any_host"),
        "namespaces": sorted(
            ({k: n[k] for k in NS_VIEW if k in n}
             for n in sub.get("namespaces", [])),
            key=lambda n: n.get("nsid", 0)),
        "hosts": sorted(h["nqn"] for h in sub.get("hosts", [])),
        "listeners": sorted(
            (listener_params(l) for l in sub.get("listen_addresses", [])),
            key=listener_key),
    }


def plan(p, current):
    """The calls that turn ``current`` (a nvmf_get_subsystems entry or None) into the
    declaration, and the predicted view after them."""
    nqn = p["nqn"]
    calls = []
    if p["state"] == "absent":
        if current is not None:
            calls.append(("nvmf_delete_subsystem", {"nqn": nqn}))
        return calls, {}

    after = view(current) if current else {
        "nqn": nqn, "serial_number": p["serial_number"], "model_number": p["model_number"],
        "allow_any_host": False, "namespaces": [], "hosts": [], "listeners": [],
    }
    if current is None:
        create = {"nqn": nqn, "allow_any_host": bool(p["allow_any_host"])}
        for key in ("serial_number", "model_number", "max_namespaces", "ana_reporting",
                    "min_cntlid", "max_cntlid"):
            if p.get(key) is not None:
                create[key] = p[key]
        calls.append(("nvmf_create_subsystem", create))
        after["allow_any_host"] = bool(p["allow_any_host"])
        current = {"nqn": nqn, "allow_any_host": create["allow_any_host"],
                   "namespaces": [], "hosts": [], "listen_addresses": []}

    # 1. listeners that are no longer declared go first, so nothing new connects meanwhile
    have_l = {listener_key(l): l for l in current.get("listen_addresses", [])}
    want_l = None
    if p["listeners"] is not None:
        want_l = {}
        for l in p["listeners"]:
            want_l.setdefault(listener_key(l), l)
        for key, l in have_l.items():
            if key not in want_l:
                calls.append(("nvmf_subsystem_remove_listener",
                              {"nqn": nqn, "listen_address": listener_params(l)}))
    # 2. hosts
    if p["hosts"] is not None:
        have_h = [h["nqn"] for h in current.get("hosts", [])]
        want_h = []
        for h in p["hosts"]:
            if h not in want_h:
                want_h.append(h)
        for h in want_h:
            if h not in have_h:
                calls.append(("nvmf_subsystem_add_host", {"nqn": nqn, "host": h}))
        for h in have_h:
            if h not in want_h:
                calls.append(("nvmf_subsystem_remove_host", {"nqn": nqn, "host": h}))
        after["hosts"] = sorted(want_h)
    # 3. allow_any_host
    if p["allow_any_host"] is not None and bool(current.get("allow_any_host")) != p["allow_any_host"]:
        calls.append(("nvmf_subsystem_allow_any_host",
                      {"nqn": nqn, "allow_any_host": p["allow_any_host"]}))
        after["allow_any_host"] = p["allow_any_host"]
    # 4. namespaces: removals first (frees NSIDs and bdevs), then additions
    if p["namespaces"] is not None:
        have_n = list(current.get("namespaces", []))
        keep = []
        missing = []
        for want in p["namespaces"]:
            match = next((h for h in have_n if h not in keep and ns_matches(want, h)), None)
            if match is None:
                missing.append(want)
            else:
                keep.append(match)
        for h in have_n:
            if h not in keep:
                calls.append(("nvmf_subsystem_remove_ns", {"nqn": nqn, "nsid": h["nsid"]}))
        for want in missing:
            calls.append(("nvmf_subsystem_add_ns", {"nqn": nqn, "namespace": ns_params(want)}))
        kept = []
        for want in p["namespaces"]:
            h = next((h for h in keep if ns_matches(want, h)), None)
            if h is None:
                continue
            h = dict((k, h[k]) for k in NS_VIEW if k in h)
            if want.get("anagrpid") is not None and h.get("anagrpid") != want["anagrpid"]:
                calls.append(("nvmf_subsystem_set_ns_ana_group",
                              {"nqn": nqn, "nsid": h["nsid"], "anagrpid": want["anagrpid"]}))
                h["anagrpid"] = want["anagrpid"]
            kept.append(h)
        after["namespaces"] = sorted(
            kept + [ns_params(w) for w in missing],
            key=lambda n: (n.get("nsid") is None, n.get("nsid") or 0, n["bdev_name"]))
    # 5. new listeners last
    if want_l is not None:
        for key, l in want_l.items():
            if key not in have_l:
                calls.append(("nvmf_subsystem_add_listener",
                              {"nqn": nqn, "listen_address": listener_params(l)}))
        after["listeners"] = sorted((listener_params(l) for l in want_l.values()),
                                    key=listener_key)
    return calls, after


def ana_reporting(sub):
    """Whether an existing subsystem reports ANA: its namespaces carry an ANA group id only
    then. None when it has no namespace to tell."""
    ns = sub.get("namespaces") or []
    if not ns:
        return None
    return "anagrpid" in ns[0]


def check_fixed(module, current):
    """Serial and model numbers, the controller ID range and ANA reporting cannot change
    after creation."""
    p = module.params
    wrong = []
    for key in ("serial_number", "model_number", "min_cntlid", "max_cntlid"):
        if p[key] is not None and current.get(key) is not None and p[key] != current[key]:
            wrong.append("%s is '%s', declared '%s'" % (key, current[key], p[key]))
    ana = ana_reporting(current)
    if p["ana_reporting"] is not None and ana is not None and ana != p["ana_reporting"]:
        wrong.append("ana_reporting is %s, declared %s" % (ana, p["ana_reporting"]))
    if wrong:
        module.fail_json(
            msg="subsystem %s: %s; these are fixed at creation (delete the subsystem with "
                "state=absent and create it again to change them)" % (p["nqn"], "; ".join(wrong)),
            subsystem=current)


def main():
    spec = rpc_argument_spec()
    spec.update(
        nqn=dict(type="str", required=True),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        serial_number=dict(type="str"),
        model_number=dict(type="str"),
        allow_any_host=dict(type="bool"),
        max_namespaces=dict(type="int"),
        ana_reporting=dict(type="bool"),
        min_cntlid=dict(type="int"),
        max_cntlid=dict(type="int"),
        namespaces=dict(
            type="list", elements="dict",
            options=dict(
                bdev_name=dict(type="str", required=True),
                nsid=dict(type="int"),
                uuid=dict(type="str"),
                nguid=dict(type="str"),
                eui64=dict(type="str"),
                anagrpid=dict(type="int"),
            ),
        ),
        hosts=dict(type="list", elements="str"),
        listeners=dict(
            type="list", elements="dict",
            options=dict(
                trtype=dict(type="str", required=True),
                traddr=dict(type="str", required=True),
                trsvcid=dict(type="str"),
                adrfam=dict(type="str", default="ipv4", choices=["ipv4", "ipv6", "ib", "fc"]),
            ),
        ),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    p = module.params
    if p["nqn"] == DISCOVERY_NQN:
        module.fail_json(msg="the discovery subsystem is managed by the target itself")

    client = client_from_module(module)
    actions = []
    try:
        current = get_subsystem(client, p["nqn"])
        if current is not None and p["state"] == "present":
            check_fixed(module, current)
        calls, predicted = plan(p, current)
        for method, params in calls:
            actions.append({"method": method, "params": params})
            if not module.check_mode:
                client.call(method, params)
        final = current
        if calls and not module.check_mode:
            final = get_subsystem(client, p["nqn"])
        result = dict(changed=bool(calls), actions=actions, subsystem=final or {})
        if module._diff:
            after = view(final) if (calls and not module.check_mode) else (
                predicted if calls else view(current))
            result["diff"] = dict(before=view(current), after=after)
        module.exit_json(**result)
    except RpcError as e:
        fail_rpc(module, e, actions=actions)
    finally:
        client.close()


if __name__ == "__main__":
    main()
