#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, rtgt developers
# Apache License 2.0 (see LICENSE at the top of the rtgt repository)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rtgt_rbd_cluster
short_description: Register a Ceph cluster connection on rtgt, report its client address, wait for the newest OSD map
version_added: "0.2.0"
description:
  - Makes sure a Ceph cluster connection named O(name) is registered
    (C(bdev_rbd_register_cluster)) with the declared C(user_id), C(config_file), C(key_file)
    and C(config_param), or is not (C(bdev_rbd_unregister_cluster)).
  - A registration that exists with other settings is not changed (its RBD bdevs use it);
    the task fails and says what differs.
  - Returns the registration as C(bdev_rbd_get_clusters_info) reports it, including C(nonce),
    the connection's client address, which C(ceph osd blocklist add) takes to fence the gateway.
  - With O(wait_for_latest_osdmap=true), waits until the connection has the newest OSD map
    (C(bdev_rbd_wait_for_latest_osdmap)), as a gateway taking over does after the failed one
    was fenced. This changes nothing on the target.
options:
  name:
    description: Name of the registration (C(cluster_name) of RBD bdevs).
    type: str
    required: true
  state:
    description: Whether the registration should exist.
    type: str
    choices: [present, absent]
    default: present
  query:
    description:
      - Only read the registration (the task fails when it is not registered) and change
        nothing; the other settings are not compared. For example the client address of a
        gateway about to be fenced, or the survivor's wait for the OSD map.
    type: bool
    default: false
  user_id:
    description: Ceph user (without C(client.)).
    type: str
  config_file:
    description: The ceph.conf of the cluster.
    type: path
  key_file:
    description: The keyring file of O(user_id).
    type: path
  config_param:
    description: Ceph options set on the connection (over the file), as strings.
    type: dict
  wait_for_latest_osdmap:
    description: After making sure it is registered, wait for the newest OSD map.
    type: bool
    default: false
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
- name: The cluster connection of the gateway
  rtgt.target.rtgt_rbd_cluster:
    name: ceph0
    config_file: /etc/ceph/ceph.conf
    user_id: nvmeof
    config_param:
      rados_osd_op_timeout: "5"
  register: ceph0

- name: Fence another gateway's client, then catch up with the OSD map on this one
  ansible.builtin.command: ceph osd blocklist add {{ failed_client_addr }}
- name: Wait for the map with the entry
  rtgt.target.rtgt_rbd_cluster:
    name: ceph0
    query: true
    wait_for_latest_osdmap: true
"""

RETURN = r"""
cluster:
  description: The registration (C(bdev_rbd_get_clusters_info)); empty when absent.
  returned: always
  type: dict
  sample: {"cluster_name": "ceph0", "config_file": "/etc/ceph/ceph.conf", "nonce": "10.0.0.3:0/2281316485"}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rtgt.target.plugins.module_utils.rtgt_rpc import (
    RpcError,
    client_from_module,
    fail_rpc,
    rpc_argument_spec,
)

SETTINGS = ("user_id", "config_file", "key_file", "config_param")


def current(client, name):
    """The registration's info, or None."""
    for c in client.call("bdev_rbd_get_clusters_info") or []:
        if c.get("cluster_name") == name:
            return c
    return None


def wanted(p):
    want = {}
    for k in SETTINGS:
        if p[k] is not None:
            want[k] = dict((a, str(b)) for a, b in p[k].items()) if k == "config_param" else p[k]
    return want


def differences(have, want):
    return sorted(k for k in SETTINGS if have.get(k) != want.get(k))


def main():
    spec = rpc_argument_spec()
    spec.update(
        name=dict(type="str", required=True),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        query=dict(type="bool", default=False),
        user_id=dict(type="str"),
        config_file=dict(type="path"),
        key_file=dict(type="path", no_log=False),
        config_param=dict(type="dict"),
        wait_for_latest_osdmap=dict(type="bool", default=False),
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    p = module.params
    client = client_from_module(module)
    result = dict(changed=False, cluster={})
    try:
        have = current(client, p["name"])
        if p["state"] == "absent" and not p["query"]:
            if have is not None:
                result["changed"] = True
                if not module.check_mode:
                    client.call("bdev_rbd_unregister_cluster", {"name": p["name"]})
            module.exit_json(**result)
        if p["query"] and have is None:
            module.fail_json(msg="cluster %s is not registered" % p["name"], **result)
        want = wanted(p)
        if have is None:
            result["changed"] = True
            if module.check_mode:
                module.exit_json(**result)
            params = dict(want, name=p["name"])
            client.call("bdev_rbd_register_cluster", params)
            have = current(client, p["name"])
        elif not p["query"]:
            diff = differences(have, want)
            if diff:
                module.fail_json(
                    msg="cluster %s is registered with other %s; unregister it first (its RBD bdevs use it)"
                    % (p["name"], ", ".join(diff)),
                    cluster=have,
                )
        if p["wait_for_latest_osdmap"]:
            client.call("bdev_rbd_wait_for_latest_osdmap", {"name": p["name"]})
        result["cluster"] = have or {}
        module.exit_json(**result)
    except RpcError as e:
        fail_rpc(module, e, **result)
    finally:
        client.close()


if __name__ == "__main__":
    main()
