# -*- coding: utf-8 -*-
# Copyright: (c) 2026, rtgt developers
# Apache License 2.0 (see LICENSE at the top of the rtgt repository)

"""Listen addresses of NVMe-oF subsystems: how SPDK compares them, and the RPC form
(shared by rtgt_subsystem and rtgt_listener)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress


def _addr(value):
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return value.lower()


def listener_key(l):
    """What makes two listen addresses the same (as SPDK compares trids)."""
    adrfam = (l.get("adrfam") or "ipv4").lower()
    return (
        l["trtype"].upper(),
        adrfam,
        _addr(l["traddr"]),
        (l.get("trsvcid") or "").lower(),
    )


def listener_params(l):
    out = {"trtype": l["trtype"], "traddr": l["traddr"], "adrfam": l.get("adrfam") or "ipv4"}
    if l.get("trsvcid"):
        out["trsvcid"] = l["trsvcid"]
    return out
