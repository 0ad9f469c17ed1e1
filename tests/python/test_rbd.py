"""The Ceph RBD bdev methods through spdk-rpc, as SPDK documents them, against a real cluster
that the test starts itself (scripts/ceph-cluster.sh; a missing Ceph installation fails)."""

import os
import subprocess

import pytest

from conftest import REPO

SCRIPT = REPO / "scripts" / "ceph-cluster.sh"


@pytest.fixture(scope="module")
def ceph():
    """A throw-away cluster (one monitor, one OSD, pool rbd) with image rbd/img1 of 8 MiB;
    yields its ceph.conf."""
    d = f"/tmp/rtgt-py-rbd-{os.getpid()}"
    r = subprocess.run([str(SCRIPT), "start", d, "--owner-pid", str(os.getpid())],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"the test cluster did not start:\n{r.stderr}"
    conf = r.stdout.strip()
    try:
        subprocess.run(["rbd", "--conf", conf, "create", "rbd/img1", "--size", "8M"],
                       check=True, capture_output=True, timeout=60)
        yield conf
    finally:
        subprocess.run([str(SCRIPT), "stop", d], capture_output=True, timeout=120)


def test_rbd_cluster_bdev_lifecycle(target, ceph):
    assert target.rpc("bdev_rbd_register_cluster", "ceph1", "--config-file", ceph) == "ceph1"
    info = target.rpc("bdev_rbd_get_clusters_info", "-b", "ceph1")
    assert info["cluster_name"] == "ceph1"
    assert info["config_file"] == ceph

    assert target.rpc("bdev_rbd_create", "rbd", "img1", "4096", "-b", "rbd0", "-c", "ceph1") == "rbd0"
    b = target.rpc("bdev_get_bdevs", "-b", "rbd0")[0]
    assert (b["product_name"], b["block_size"], b["num_blocks"]) == ("Ceph Rbd Disk", 4096, 2048)

    e = target.rpc_fail("bdev_rbd_create", "rbd", "missing", "4096", "-c", "ceph1")
    assert e.code == -2, e.output
    e = target.rpc_fail("bdev_rbd_unregister_cluster", "ceph1")
    assert e.code == -16 and "rbd0" in e.message, e.output

    target.rpc("bdev_rbd_resize", "rbd0", "16")
    assert target.rpc("bdev_get_bdevs", "-b", "rbd0")[0]["num_blocks"] == 4096

    # save_config: the registration before the bdev that names it.
    saved = target.rpc("save_config")
    bdev = next(s for s in saved["subsystems"] if s["subsystem"] == "bdev")["config"]
    methods = [c["method"] for c in bdev]
    assert methods == ["bdev_rbd_register_cluster", "bdev_rbd_create", "bdev_wait_for_examine"]

    target.rpc("bdev_rbd_delete", "rbd0")
    assert target.rpc("bdev_get_bdevs") == []
    target.rpc("bdev_rbd_unregister_cluster", "ceph1")
    assert target.rpc("bdev_rbd_get_clusters_info") == []
