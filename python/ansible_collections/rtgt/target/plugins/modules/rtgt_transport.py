#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, rtgt developers
# Apache License 2.0 (see LICENSE at the top of the rtgt repository)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rtgt_transport
short_description: Create an NVMe-oF (RDMA) or SRP transport on an rtgt target
version_added: "0.1.0"
description:
  - Makes sure a transport of type O(trtype) exists, creating it with the given options
    (C(nvmf_create_transport)) when it does not.
  - A transport's options cannot change while the target runs (there is no RPC for it, as in
    SPDK). When the transport exists with different options the task does not change it,
    warns, and lists the differences in RV(differences).
options:
  trtype:
    description: Transport type, V(RDMA) or V(SRP) (case-insensitive).
    type: str
    required: true
  state:
    description:
      - Only V(present) is supported; transports live as long as the target.
    type: str
    choices: [present]
    default: present
  max_queue_depth:
    description: Maximum outstanding commands per I/O queue.
    type: int
  max_io_qpairs_per_ctrlr:
    description: Maximum I/O queue pairs per controller.
    type: int
  in_capsule_data_size:
    description: In-capsule data size in bytes.
    type: int
  max_io_size:
    description: Maximum I/O size in bytes (a power of two).
    type: int
  io_unit_size:
    description: I/O unit size in bytes (deprecated by SPDK; accepted for older configurations).
    type: int
  max_aq_depth:
    description: Maximum admin queue depth.
    type: int
  num_shared_buffers:
    description: Number of shared data buffers (deprecated by SPDK).
    type: int
  buf_cache_size:
    description: Buffers cached per poll group (deprecated by SPDK).
    type: int
  max_srq_depth:
    description: Shared receive queue depth per poll group (RDMA).
    type: int
  no_srq:
    description: Use per-queue receive queues instead of a shared one (RDMA).
    type: bool
  acceptor_backlog:
    description: Listen backlog (RDMA).
    type: int
  abort_timeout_sec:
    description: Abort command execution timeout in seconds.
    type: int
  options:
    description:
      - Further options passed to C(nvmf_create_transport) as they are, for example SRP's own
        options. Keys given here override the options above.
    type: dict
    default: {}
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
- name: RDMA transport as in rpc.py nvmf_create_transport -t RDMA -u 8192 -i 131072 -c 8192
  rtgt.target.rtgt_transport:
    trtype: RDMA
    io_unit_size: 8192
    max_io_size: 131072
    in_capsule_data_size: 8192

- name: SRP transport with an option of its own
  rtgt.target.rtgt_transport:
    trtype: SRP
    options:
      max_queue_depth: 64
"""

RETURN = r"""
transport:
  description: The transport as C(nvmf_get_transports) reports it (empty in check mode when
    it would be created).
  returned: always
  type: dict
  sample: {"trtype": "RDMA", "max_queue_depth": 128, "max_io_size": 131072}
differences:
  description: Declared options that differ from the existing transport's, as
    C(option is X, declared Y) strings. Options the target does not report are not compared.
  returned: always
  type: list
  elements: str
actions:
  description: The RPC calls made (or, in check mode, that would be made).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rtgt.target.plugins.module_utils.rtgt_rpc import (
    RpcError,
    client_from_module,
    fail_rpc,
    is_not_found,
    rpc_argument_spec,
)

NAMED = [
    ("max_queue_depth", "int"),
    ("max_io_qpairs_per_ctrlr", "int"),
    ("in_capsule_data_size", "int"),
    ("max_io_size", "int"),
    ("io_unit_size", "int"),
    ("max_aq_depth", "int"),
    ("num_shared_buffers", "int"),
    ("buf_cache_size", "int"),
    ("max_srq_depth", "int"),
    ("no_srq", "bool"),
    ("acceptor_backlog", "int"),
    ("abort_timeout_sec", "int"),
]


def get_transport(client, trtype):
    try:
        found = client.call("nvmf_get_transports", {"trtype": trtype})
    except RpcError as e:
        if is_not_found(e):
            return None
        raise
    return found[0] if found else None


def main():
    spec = rpc_argument_spec()
    spec.update(
        trtype=dict(type="str", required=True),
        state=dict(type="str", default="present", choices=["present"]),
        options=dict(type="dict", default={}),
    )
    for name, kind in NAMED:
        spec[name] = dict(type=kind)
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    p = module.params
    trtype = p["trtype"].upper()
    declared = {"trtype": trtype}
    for name, dummy in NAMED:
        if p[name] is not None:
            declared[name] = p[name]
    declared.update(p["options"] or {})

    client = client_from_module(module)
    actions = []
    try:
        current = get_transport(client, trtype)
        differences = []
        if current is None:
            actions.append({"method": "nvmf_create_transport", "params": declared})
            if not module.check_mode:
                client.call("nvmf_create_transport", declared)
                current = get_transport(client, trtype) or {}
        else:
            for key, value in sorted(declared.items()):
                if key == "trtype" or key not in current:
                    continue
                if current[key] != value:
                    differences.append("%s is %s, declared %s" % (key, current[key], value))
            if differences:
                module.warn("transport %s exists with other options, which cannot change while "
                            "the target runs: %s" % (trtype, "; ".join(differences)))
        result = dict(changed=bool(actions), actions=actions, differences=differences,
                      transport=current or {})
        if module._diff:
            before = get_view(current if not actions else None)
            after = dict(declared) if actions else before
            result["diff"] = dict(before=before, after=after)
        module.exit_json(**result)
    except RpcError as e:
        fail_rpc(module, e, actions=actions)
    finally:
        client.close()


def get_view(transport):
    return dict(transport) if transport else {}


if __name__ == "__main__":
    main()
