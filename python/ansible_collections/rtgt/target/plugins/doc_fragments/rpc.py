# -*- coding: utf-8 -*-
# Copyright: (c) 2026, rtgt developers
# Apache License 2.0 (see LICENSE at the top of the rtgt repository)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The connection options of every rtgt.target module.
    DOCUMENTATION = r"""
options:
  socket:
    description:
      - Path of rtgt's JSON-RPC Unix socket (C(rtgt serve -r PATH)).
      - Ignored when O(rpc_host) is set.
    type: path
    default: /var/tmp/spdk.sock
  rpc_host:
    description:
      - Talk to rtgt's JSON-RPC TCP endpoint (C(rtgt serve --rpc-listen ADDR:PORT)) on this
        address instead of the Unix socket.
    type: str
  rpc_port:
    description:
      - TCP port of the JSON-RPC endpoint, used with O(rpc_host).
    type: int
    default: 5260
  timeout:
    description:
      - Seconds to wait for each RPC response.
    type: float
    default: 60.0
requirements:
  - A running rtgt target (C(rtgt serve)) on the managed host. The modules need nothing but
    Python on the managed host.
notes:
  - RPC errors fail the task with the server's message; the JSON-RPC error code is returned
    as C(rpc_code) and the method as C(rpc_method).
"""
