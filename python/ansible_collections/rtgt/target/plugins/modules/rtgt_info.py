#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, rtgt developers
# Apache License 2.0 (see LICENSE at the top of the rtgt repository)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rtgt_info
short_description: Gather what an rtgt target is configured with (bdevs, transports, subsystems)
version_added: "0.1.0"
description:
  - Reads the target's block devices, transports and NVMe-oF subsystems, as
    C(bdev_get_bdevs), C(nvmf_get_transports) and C(nvmf_get_subsystems) report them,
    and its version. Changes nothing.
options:
  gather:
    description: What to read.
    type: list
    elements: str
    choices: [all, bdevs, transports, subsystems]
    default: [all]
extends_documentation_fragment:
  - rtgt.target.rpc
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
author:
  - rtgt developers (@rtgt)
"""

EXAMPLES = r"""
- name: Read the target
  rtgt.target.rtgt_info:
  register: target

- name: Show the NQNs
  ansible.builtin.debug:
    msg: "{{ target.subsystems | map(attribute='nqn') | list }}"

- name: Only the block devices, over TCP
  rtgt.target.rtgt_info:
    gather: [bdevs]
    rpc_host: 127.0.0.1
    rpc_port: 5260
"""

RETURN = r"""
version:
  description: The target's C(spdk_get_version) answer.
  returned: always
  type: dict
  sample: {"version": "SPDK v26.05", "fields": {"major": 26, "minor": 5, "patch": 0, "suffix": ""}}
bdevs:
  description: The block devices (C(bdev_get_bdevs)).
  returned: when gathered
  type: list
  elements: dict
  sample: [{"name": "Malloc0", "product_name": "Malloc disk", "block_size": 512, "num_blocks": 131072}]
transports:
  description: The transports and their options (C(nvmf_get_transports)).
  returned: when gathered
  type: list
  elements: dict
  sample: [{"trtype": "RDMA", "max_queue_depth": 128}]
subsystems:
  description: The NVMe-oF subsystems, including the discovery subsystem (C(nvmf_get_subsystems)).
  returned: when gathered
  type: list
  elements: dict
  sample: [{"nqn": "nqn.2016-06.io.spdk:cnode1", "subtype": "NVMe", "namespaces": [], "hosts": [], "listen_addresses": []}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rtgt.target.plugins.module_utils.rtgt_rpc import (
    RpcError,
    client_from_module,
    fail_rpc,
    rpc_argument_spec,
)

METHODS = {
    "bdevs": "bdev_get_bdevs",
    "transports": "nvmf_get_transports",
    "subsystems": "nvmf_get_subsystems",
}


def main():
    spec = rpc_argument_spec()
    spec.update(
        gather=dict(type="list", elements="str", default=["all"],
                    choices=["all", "bdevs", "transports", "subsystems"]),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    wanted = set(module.params["gather"])
    if "all" in wanted:
        wanted = set(METHODS)
    client = client_from_module(module)
    try:
        result = dict(changed=False, version=client.call("spdk_get_version"))
        for key in sorted(wanted):
            result[key] = client.call(METHODS[key]) or []
        module.exit_json(**result)
    except RpcError as e:
        fail_rpc(module, e)
    finally:
        client.close()


if __name__ == "__main__":
    main()
