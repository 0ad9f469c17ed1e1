"""bdev methods through spdk-rpc: shapes (SPDK's bdev_get_bdevs object) and errno errors."""

import os

BDEV_KEYS = {
    "name", "aliases", "product_name", "block_size", "num_blocks", "uuid",
    "preferred_write_alignment", "preferred_write_granularity", "optimal_write_size",
    "preferred_unmap_alignment", "preferred_unmap_granularity", "assigned_rate_limits",
    "claimed", "zoned", "supported_io_types", "driver_specific",
}
IO_TYPES = {
    "read", "write", "unmap", "flush", "reset", "nvme_admin", "nvme_io", "nvme_io_md",
    "write_zeroes", "zcopy", "get_zone_info", "zone_management", "zone_append", "compare",
    "compare_and_write", "abort", "seek_hole", "seek_data", "copy", "nvme_iov_md", "nvme_nssr",
    "write_uncorrectable",
}


def test_malloc_create_get_delete(target):
    assert target.rpc("bdev_malloc_create", "64", "512", "-b", "Malloc0") == "Malloc0"
    # No name: SPDK's MallocN.
    assert target.rpc("bdev_malloc_create", "8", "4096") == "Malloc1"
    b = target.rpc("bdev_get_bdevs", "-b", "Malloc0")
    assert len(b) == 1
    b = b[0]
    assert BDEV_KEYS <= set(b)
    assert IO_TYPES <= set(b["supported_io_types"])
    assert b["product_name"] == "Malloc disk"
    assert (b["block_size"], b["num_blocks"]) == (512, 131072)
    assert b["claimed"] is False
    assert len(target.rpc("bdev_get_bdevs")) == 2
    target.rpc("bdev_malloc_delete", "Malloc0")
    assert [x["name"] for x in target.rpc("bdev_get_bdevs")] == ["Malloc1"]


def test_malloc_with_uuid(target):
    u = "3f9c4a9b-1f0e-4a63-9d7e-2a4c5e6f7a8b"
    target.rpc("bdev_malloc_create", "-u", u, "16", "512", "-b", "M")
    assert target.rpc("bdev_get_bdevs", "-b", "M")[0]["uuid"] == u


def test_duplicate_bdev_is_eexist(target):
    target.rpc("bdev_malloc_create", "16", "512", "-b", "Malloc0")
    err = target.rpc_fail("bdev_malloc_create", "16", "512", "-b", "Malloc0")
    assert err.code == -17 and "Malloc0" in err.message


def test_unknown_bdev_is_enodev(target):
    err = target.rpc_fail("bdev_get_bdevs", "-b", "Nope")
    assert err.code == -19 and "Nope" in err.message
    err = target.rpc_fail("bdev_malloc_delete", "Nope")
    assert err.code == -19
    err = target.rpc_fail("bdev_null_delete", "Nope")
    assert err.code == -19


def test_invalid_block_size_is_einval(target):
    err = target.rpc_fail("bdev_malloc_create", "16", "520", "-b", "Bad")
    assert err.code == -22


def test_null_create_delete(target):
    assert target.rpc("bdev_null_create", "Null0", "100", "4096") == "Null0"
    b = target.rpc("bdev_get_bdevs", "-b", "Null0")[0]
    assert b["product_name"] == "Null disk"
    assert (b["block_size"], b["num_blocks"]) == (4096, 25600)
    target.rpc("bdev_null_delete", "Null0")
    assert target.rpc("bdev_get_bdevs") == []


def test_aio_create_delete(target, tmp_path):
    img = tmp_path / "disk.img"
    img.write_bytes(b"\0" * (4 << 20))
    assert target.rpc("bdev_aio_create", str(img), "aio0", "512") == "aio0"
    b = target.rpc("bdev_get_bdevs", "-b", "aio0")[0]
    assert b["product_name"] == "AIO disk"
    assert b["num_blocks"] == 8192
    assert b["driver_specific"]["aio"]["filename"] == str(img)
    assert target.rpc("bdev_aio_create", str(img), "aio_ro", "-r") == "aio_ro"
    assert target.rpc("bdev_get_bdevs", "-b", "aio_ro")[0]["supported_io_types"]["write"] is False
    target.rpc("bdev_aio_delete", "aio0")
    target.rpc("bdev_aio_delete", "aio_ro")
    err = target.rpc_fail("bdev_aio_create", "/nonexistent/disk.img", "aio1")
    assert err.code == -2 and "/nonexistent/disk.img" in err.message


def test_get_iostat(target):
    target.rpc("bdev_malloc_create", "16", "512", "-b", "Malloc0")
    target.rpc("bdev_null_create", "Null0", "16", "512")
    s = target.rpc("bdev_get_iostat")
    assert {"tick_rate", "ticks", "bdevs"} <= set(s)
    assert [b["name"] for b in s["bdevs"]] == ["Malloc0", "Null0"]
    assert {"bytes_read", "num_read_ops", "bytes_written", "num_write_ops",
            "read_latency_ticks", "write_latency_ticks"} <= set(s["bdevs"][0])
    s = target.rpc("bdev_get_iostat", "--names", "Null0")
    assert [b["name"] for b in s["bdevs"]] == ["Null0"]
    err = target.rpc_fail("bdev_get_iostat", "--names", "Nope")
    assert err.code == -19


def test_deleting_an_exported_bdev_removes_the_namespace(target):
    nqn = "nqn.2016-06.io.spdk:cnode1"
    target.rpc("bdev_malloc_create", "16", "512", "-b", "Malloc0")
    target.rpc("nvmf_create_subsystem", nqn, "-a")
    target.rpc("nvmf_subsystem_add_ns", nqn, "Malloc0")
    b = target.rpc("bdev_get_bdevs", "-b", "Malloc0")[0]
    assert b["claimed"] is True and b["claim_type"] == "exclusive_write"
    target.rpc("bdev_malloc_delete", "Malloc0")
    assert target.rpc("nvmf_get_subsystems", nqn)[0]["namespaces"] == []
    assert os.path.exists(target.sock)


def test_delay_create_update_delete(target):
    target.rpc("bdev_malloc_create", "16", "512", "-b", "Malloc0")
    assert target.rpc("bdev_delay_create", "-b", "Malloc0", "-d", "Delay0",
                      "-r", "10", "-t", "20", "-w", "30", "-n", "40") == "Delay0"
    d = target.rpc("bdev_get_bdevs", "-b", "Delay0")[0]
    assert BDEV_KEYS <= set(d)
    assert d["product_name"] == "delay"
    assert (d["block_size"], d["num_blocks"], d["claimed"]) == (512, 32768, False)
    assert d["driver_specific"] == {"delay": {
        "name": "Delay0", "base_bdev_name": "Malloc0", "uuid": d["uuid"],
        "avg_read_latency": 10, "p99_read_latency": 20,
        "avg_write_latency": 30, "p99_write_latency": 40,
    }}
    m = target.rpc("bdev_get_bdevs", "-b", "Malloc0")[0]
    assert m["claimed"] is True and m["claim_type"] == "exclusive_write"

    # rpc.py prints update_latency's result and nothing for delete.
    assert target.rpc("bdev_delay_update_latency", "Delay0", "avg_read", "200000") is True
    assert target.rpc("bdev_delay_update_latency", "Delay0", "p99_read", "200000") is True
    lat = target.rpc("bdev_get_bdevs", "-b", "Delay0")[0]["driver_specific"]["delay"]
    assert (lat["avg_read_latency"], lat["p99_read_latency"]) == (200000, 200000)
    err = target.rpc_fail("bdev_delay_update_latency", "Nope", "avg_read", "1")
    assert err.code == -32602 and "Nope" in err.message

    err = target.rpc_fail("bdev_delay_create", "-b", "Malloc0", "-d", "Delay1",
                          "-r", "0", "-t", "0", "-w", "0", "-n", "0")
    assert err.code == -1 and "Malloc0" in err.message  # EPERM: the base is claimed
    err = target.rpc_fail("bdev_delay_create", "-b", "Nope", "-d", "Delay1",
                          "-r", "0", "-t", "0", "-w", "0", "-n", "0")
    assert err.code == -19 and "Nope" in err.message
    target.rpc("bdev_malloc_create", "16", "512", "-b", "Malloc1")
    err = target.rpc_fail("bdev_delay_create", "-b", "Malloc1", "-d", "Delay1",
                          "-r", "5", "-t", "4", "-w", "0", "-n", "0")
    assert err.code == -22 and "Delay1" in err.message
    err = target.rpc_fail("bdev_malloc_delete", "Malloc0")
    assert err.code == -1 and "Delay0" in err.message

    assert target.rpc("bdev_delay_delete", "Delay0") is None
    err = target.rpc_fail("bdev_delay_delete", "Delay0")
    assert err.code == -19
    assert target.rpc("bdev_get_bdevs", "-b", "Malloc0")[0]["claimed"] is False
    target.rpc("bdev_malloc_delete", "Malloc0")


def test_histogram_through_spdk_rpc(target):
    import base64
    target.rpc("bdev_malloc_create", "16", "512", "-b", "H")
    err = target.rpc_fail("bdev_get_histogram", "H")
    assert "not enabled" in err.message
    # spdk-rpc prints nothing for it.
    target.rpc("bdev_enable_histogram", "--histogram", "-o", "read", "--granularity", "5", "H")
    h = target.rpc("bdev_get_histogram", "H")
    assert h["granularity"] == 5 and h["tsc_rate"] == 10**9
    raw = base64.b64decode(h["histogram"])
    ranges = h["max_range"] - h["min_range"] + 1
    assert len(raw) == 8 * ranges * 2**5 and not any(raw)
    b = target.rpc("bdev_get_histogram_borders", "H", "--borders", "1000,2000")
    assert b == {"borders_count": [0, 0, 0]}
    err = target.rpc_fail("bdev_enable_histogram", "--histogram", "-o", "nvme_io", "H")
    assert err.code == -32602 and "nvme_io" in err.message
    target.rpc("bdev_enable_histogram", "--no-histogram", "H")
    target.rpc_fail("bdev_get_histogram", "H")
