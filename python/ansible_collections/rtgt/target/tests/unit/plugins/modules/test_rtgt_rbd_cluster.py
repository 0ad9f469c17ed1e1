# -*- coding: utf-8 -*-
# Copyright: (c) 2026, rtgt developers
# Apache License 2.0 (see LICENSE at the top of the rtgt repository)

"""How rtgt_rbd_cluster compares a declaration with bdev_rbd_get_clusters_info, without a target."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.rtgt.target.plugins.modules.rtgt_rbd_cluster import differences, wanted

INFO = {"cluster_name": "ceph0", "config_file": "/etc/ceph/ceph.conf",
        "config_param": {"rados_osd_op_timeout": "5"}, "nonce": "10.0.0.3:0/2281316485"}


def params(**kw):
    p = dict(user_id=None, config_file=None, key_file=None, config_param=None)
    p.update(kw)
    return p


def test_the_same_registration_differs_in_nothing():
    # config_param values are strings on the target; a YAML integer declares the same value
    want = wanted(params(config_file="/etc/ceph/ceph.conf", config_param={"rados_osd_op_timeout": 5}))
    assert differences(INFO, want) == []


def test_other_settings_are_named():
    want = wanted(params(config_file="/etc/ceph/other.conf", user_id="nvmeof",
                         config_param={"rados_osd_op_timeout": "5"}))
    assert differences(INFO, want) == ["config_file", "user_id"]
    # a setting the registration has and the declaration leaves out differs too
    assert differences(INFO, wanted(params(config_file="/etc/ceph/ceph.conf"))) == ["config_param"]
