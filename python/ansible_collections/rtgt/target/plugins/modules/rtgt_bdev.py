#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, rtgt developers
# Apache License 2.0 (see LICENSE at the top of the rtgt repository)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rtgt_bdev
short_description: Create or delete block devices (malloc, null, aio) on an rtgt target
version_added: "0.1.0"
description:
  - Makes sure a block device (bdev) with the given name exists with the declared type and
    geometry, or does not exist.
  - A bdev that exists with a different type, size, block size, UUID or file is not changed
    unless O(recreate=true), because re-creating it discards its contents (malloc) and fails
    while a subsystem namespace uses it.
options:
  name:
    description: Name of the bdev.
    type: str
    required: true
  state:
    description: Whether the bdev should exist.
    type: str
    choices: [present, absent]
    default: present
  type:
    description:
      - Backend of the bdev. V(malloc) is RAM, V(null) discards writes and reads zeroes,
        V(aio) is a file or block device (O(filename)), V(rbd) a Ceph RBD image (O(pool_name),
        O(rbd_name)) through a registered cluster connection (O(cluster_name), see
        M(rtgt.target.rtgt_rbd_cluster)).
      - With O(state=absent) the type of the existing bdev is used.
    type: str
    choices: [malloc, "null", aio, rbd]
    default: malloc
  size_mb:
    description:
      - Size in MiB (as C(rpc.py bdev_malloc_create SIZE_MB BLOCK_SIZE)). Converted to whole
        blocks of O(block_size).
      - For malloc and null one of O(size_mb) or O(num_blocks) is required. Not used for aio.
    type: float
  num_blocks:
    description: Size in blocks of O(block_size). Mutually exclusive with O(size_mb).
    type: int
  block_size:
    description:
      - Block size in bytes (a multiple of 512).
      - Defaults to 512 for malloc and null; for aio the target detects it when not given;
        required for rbd.
    type: int
  uuid:
    description: UUID of the bdev. The target picks a random one when not given.
    type: str
  filename:
    description: File or block device behind an aio bdev (required for O(type=aio)).
    type: path
  pool_name:
    description: Ceph pool of the RBD image (required for O(type=rbd)).
    type: str
  rbd_name:
    description: The RBD image (required for O(type=rbd)).
    type: str
  cluster_name:
    description: The registered cluster connection the RBD bdev uses (required for O(type=rbd)).
    type: str
  readonly:
    description: Open an aio bdev read-only.
    type: bool
    default: false
  recreate:
    description:
      - Delete and re-create a bdev whose type or geometry differs from the declaration.
        Without it such a difference fails the task.
    type: bool
    default: false
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
- name: A 64 MiB RAM disk with 512-byte blocks
  rtgt.target.rtgt_bdev:
    name: Malloc0
    size_mb: 64
    block_size: 512

- name: A file-backed disk
  rtgt.target.rtgt_bdev:
    name: aio0
    type: aio
    filename: /var/lib/rtgt/disk0.img
    block_size: 4096

- name: Remove a disk
  rtgt.target.rtgt_bdev:
    name: Null0
    state: absent
    socket: /run/rtgt.sock
"""

RETURN = r"""
bdev:
  description: The bdev as C(bdev_get_bdevs) reports it (empty when absent, and in check mode
    when it would be created).
  returned: always
  type: dict
  sample: {"name": "Malloc0", "product_name": "Malloc disk", "block_size": 512, "num_blocks": 131072}
actions:
  description: The RPC calls made (or, in check mode, that would be made), in order.
  returned: always
  type: list
  elements: dict
  sample: [{"method": "bdev_malloc_create", "params": {"name": "Malloc0", "num_blocks": 131072, "block_size": 512}}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rtgt.target.plugins.module_utils.rtgt_rpc import (
    RpcError,
    client_from_module,
    fail_rpc,
    is_not_found,
    rpc_argument_spec,
)

PRODUCTS = {"Malloc disk": "malloc", "Null disk": "null", "AIO disk": "aio", "Ceph Rbd Disk": "rbd"}
MANAGED = ("malloc", "null", "aio", "rbd")
RBD_KEYS = ("pool_name", "rbd_name", "cluster_name")


def get_bdev(client, name):
    try:
        found = client.call("bdev_get_bdevs", {"name": name})
    except RpcError as e:
        if is_not_found(e):
            return None
        raise
    return found[0] if found else None


def summary(bdev):
    """The comparable view of a bdev (also the diff)."""
    if bdev is None:
        return {}
    out = {
        "name": bdev["name"],
        "type": PRODUCTS.get(bdev.get("product_name"), bdev.get("product_name")),
        "block_size": bdev.get("block_size"),
        "num_blocks": bdev.get("num_blocks"),
        "uuid": bdev.get("uuid"),
    }
    aio = (bdev.get("driver_specific") or {}).get("aio")
    if aio:
        out["filename"] = aio.get("filename")
        out["readonly"] = aio.get("readonly", False)
    rbd = (bdev.get("driver_specific") or {}).get("rbd")
    if rbd:
        for k in RBD_KEYS:
            out[k] = rbd.get(k)
    return out


def desired(module):
    """The declaration as create parameters, and its comparable view."""
    p = module.params
    kind = p["type"]
    block_size = p["block_size"]
    if kind == "aio":
        if not p["filename"]:
            module.fail_json(msg="filename is required for type=aio")
        params = {"name": p["name"], "filename": p["filename"], "readonly": p["readonly"]}
        if block_size:
            params["block_size"] = block_size
        if p["uuid"]:
            params["uuid"] = p["uuid"]
        want = {"name": p["name"], "type": "aio", "filename": p["filename"], "readonly": p["readonly"]}
        if block_size:
            want["block_size"] = block_size
        if p["uuid"]:
            want["uuid"] = p["uuid"]
        return params, want
    if kind == "rbd":
        missing = [k for k in RBD_KEYS + ("block_size",) if not p[k]]
        if missing:
            module.fail_json(msg="%s required for type=rbd" % ", ".join(missing))
        params = dict((k, p[k]) for k in RBD_KEYS)
        params.update(name=p["name"], block_size=block_size)
        want = dict(params, type="rbd")
        if p["uuid"]:
            params["uuid"] = p["uuid"]
            want["uuid"] = p["uuid"]
        return params, want
    block_size = block_size or 512
    if p["num_blocks"] is not None:
        num_blocks = p["num_blocks"]
    elif p["size_mb"] is not None:
        num_blocks = int(p["size_mb"] * 1024 * 1024) // block_size
    else:
        module.fail_json(msg="size_mb or num_blocks is required for type=%s" % kind)
    if num_blocks <= 0:
        module.fail_json(msg="the bdev would have no blocks (size_mb=%s, block_size=%s)"
                         % (p["size_mb"], block_size))
    params = {"name": p["name"], "num_blocks": num_blocks, "block_size": block_size}
    want = {"name": p["name"], "type": kind, "block_size": block_size, "num_blocks": num_blocks}
    if p["uuid"]:
        params["uuid"] = p["uuid"]
        want["uuid"] = p["uuid"]
    return params, want


def mismatches(have, want):
    out = []
    for key, value in want.items():
        got = have.get(key)
        if key == "uuid" and got and value:
            same = got.lower() == value.lower()
        else:
            same = got == value
        if not same:
            out.append("%s is %s, declared %s" % (key, got, value))
    return out


def main():
    spec = rpc_argument_spec()
    spec.update(
        name=dict(type="str", required=True),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        type=dict(type="str", default="malloc", choices=list(MANAGED)),
        size_mb=dict(type="float"),
        num_blocks=dict(type="int"),
        block_size=dict(type="int"),
        uuid=dict(type="str"),
        filename=dict(type="path"),
        pool_name=dict(type="str"),
        rbd_name=dict(type="str"),
        cluster_name=dict(type="str"),
        readonly=dict(type="bool", default=False),
        recreate=dict(type="bool", default=False),
    )
    module = AnsibleModule(
        argument_spec=spec,
        supports_check_mode=True,
        mutually_exclusive=[("size_mb", "num_blocks")],
    )
    p = module.params
    client = client_from_module(module)
    actions = []

    def run(method, params):
        actions.append({"method": method, "params": params})
        if not module.check_mode:
            return client.call(method, params)
        return None

    try:
        current = get_bdev(client, p["name"])
        before = summary(current)
        after = before
        if p["state"] == "absent":
            if current is not None:
                kind = before["type"]
                if kind not in MANAGED:
                    module.fail_json(msg="bdev %s is a %s, which this module does not manage"
                                     % (p["name"], current.get("product_name")))
                run("bdev_%s_delete" % kind, {"name": p["name"]})
                after = {}
        else:
            params, want = desired(module)
            if current is not None:
                diffs = mismatches(before, want)
                if diffs and not p["recreate"]:
                    module.fail_json(
                        msg="bdev %s exists but differs: %s; set recreate=true to delete and "
                            "re-create it" % (p["name"], "; ".join(diffs)),
                        bdev=current)
                if diffs:
                    run("bdev_%s_delete" % before["type"], {"name": p["name"]})
                    current = None
            if current is None:
                run("bdev_%s_create" % p["type"], params)
                after = dict(before, **want) if before else dict(want)
        if actions and not module.check_mode:
            current = get_bdev(client, p["name"])
            after = summary(current)
        result = dict(changed=bool(actions), actions=actions,
                      bdev=current if not (module.check_mode and actions) else {})
        if module._diff:
            result["diff"] = dict(before=before, after=after)
        module.exit_json(**result)
    except RpcError as e:
        fail_rpc(module, e, actions=actions)
    finally:
        client.close()


if __name__ == "__main__":
    main()
