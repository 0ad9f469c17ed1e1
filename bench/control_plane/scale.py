#!/usr/bin/env python3
"""Control plane at scale: N subsystems, each with a null-bdev namespace and a listener,
created over one RPC connection to a fresh `rtgt serve`; then nvmf_get_subsystems timed.

    bench/control_plane/scale.py [--rtgt PATH] [-n 1000] [--reactors 2] [--json FILE]

The daemon runs on the simulated fabric (`--fabric sim`), so the listeners need no RDMA
device. Every call is sent and answered in turn (one request in flight, as rpc.py does), or,
with --batch K, K calls per JSON-RPC batch. Prints each figure and writes them as JSON.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python", "src"))

from rtgt.client import Client  # noqa: E402


def default_rtgt():
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(HERE, "..", "..", "target"))
    return os.path.join(target, "release", "rtgt")


def start_daemon(rtgt, sock, reactors, log):
    args = [rtgt, "serve", "--fabric", "sim", "-r", sock, "--cores", str(reactors),
            "--log-level", "warning"]
    p = subprocess.Popen(args, stdout=log, stderr=log)
    c = Client(sock, conn_retries=200, retry_interval=0.05, timeout=120)
    c.connect()
    return p, c


def stop_daemon(p, c):
    try:
        c.call("spdk_kill_instance", {"sig_name": "SIGTERM"})
    except Exception:
        p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def calls_for(i, traddr, port):
    nqn = f"nqn.2016-06.io.rtgt:scale{i:05d}"
    bdev = f"null{i}"
    return [
        ("bdev_null_create", {"name": bdev, "num_blocks": 262144, "block_size": 4096}),
        ("nvmf_create_subsystem", {"nqn": nqn, "allow_any_host": True,
                                   "serial_number": f"RTGT{i:016d}"}),
        ("nvmf_subsystem_add_ns", {"nqn": nqn, "namespace": {"bdev_name": bdev}}),
        ("nvmf_subsystem_add_listener", {"nqn": nqn, "listen_address": {
            "trtype": "RDMA", "adrfam": "IPv4", "traddr": traddr, "trsvcid": str(port)}}),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rtgt", default=default_rtgt())
    ap.add_argument("-n", type=int, default=1000, help="subsystems")
    ap.add_argument("--reactors", type=int, default=2)
    ap.add_argument("--batch", type=int, default=0,
                    help="send calls in JSON-RPC batches of this many (0: one at a time)")
    ap.add_argument("--get-reps", type=int, default=10, help="nvmf_get_subsystems repetitions")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    if not os.path.exists(a.rtgt):
        sys.exit(f"no rtgt binary at {a.rtgt} (cargo build --release -p rtgt, or --rtgt)")

    tmp = tempfile.mkdtemp(prefix="rtgt-scale-")
    sock = os.path.join(tmp, "rtgt.sock")
    log = open(os.path.join(tmp, "rtgt.log"), "w")
    p, c = start_daemon(a.rtgt, sock, a.reactors, log)
    try:
        c.call("nvmf_create_transport", {"trtype": "RDMA"})
        calls = [x for i in range(a.n) for x in calls_for(i, "10.0.0.1", 4420)]
        per_method = {}
        t0 = time.perf_counter()
        if a.batch > 0:
            for k in range(0, len(calls), a.batch):
                chunk = calls[k:k + a.batch]
                for (m, _), r in zip(chunk, c.batch(chunk)):
                    if isinstance(r, Exception):
                        raise r
        else:
            for m, params in calls:
                s = time.perf_counter()
                c.call(m, params)
                per_method.setdefault(m, []).append(time.perf_counter() - s)
        create_s = time.perf_counter() - t0

        gets = []
        for _ in range(a.get_reps):
            s = time.perf_counter()
            subs = c.call("nvmf_get_subsystems")
            gets.append(time.perf_counter() - s)
        # The discovery subsystem is listed too.
        assert len(subs) == a.n + 1, f"{len(subs)} subsystems listed"
        assert all(len(x["namespaces"]) == 1 and len(x["listen_addresses"]) == 1
                   for x in subs if x["subtype"] == "NVMe")
        size = len(json.dumps(subs))
        out = {
            "subsystems": a.n,
            "reactors": a.reactors,
            "rpc_calls": len(calls),
            "batch": a.batch,
            "create_s": create_s,
            "create_per_subsystem_ms": create_s * 1000 / a.n,
            "per_call_ms": {m: {"mean": statistics.mean(v) * 1000,
                                "p50": statistics.median(v) * 1000,
                                "max": max(v) * 1000} for m, v in per_method.items()},
            "get_subsystems_ms": {"min": min(gets) * 1000,
                                  "median": statistics.median(gets) * 1000,
                                  "max": max(gets) * 1000},
            "get_subsystems_bytes": size,
            "loadavg": open("/proc/loadavg").read().split()[:3],
        }
    finally:
        stop_daemon(p, c)
        log.close()
    print(f"created {a.n} subsystems (null bdev + namespace + listener each, {len(calls)} calls"
          f"{', batches of %d' % a.batch if a.batch else ', one at a time'}) in "
          f"{out['create_s']:.3f} s ({out['create_per_subsystem_ms']:.2f} ms each)")
    for m, v in out["per_call_ms"].items():
        print(f"  {m:<30} mean {v['mean']:.3f} ms  p50 {v['p50']:.3f} ms  max {v['max']:.1f} ms")
    g = out["get_subsystems_ms"]
    print(f"nvmf_get_subsystems over {a.n + 1} subsystems ({out['get_subsystems_bytes']} bytes): "
          f"min {g['min']:.1f} ms, median {g['median']:.1f} ms, max {g['max']:.1f} ms")
    print(f"load average {out['loadavg']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
