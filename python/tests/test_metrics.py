"""`rtgt serve --metrics`: the exposition parses with the Prometheus client library, has the
families docs/operations.md lists, and /healthz follows the RPC state."""

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from helpers import NQN, free_port


def get(port, path, method="GET"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def configure(d):
    """A malloc bdev as namespace 1 of NQN, with the RDMA transport."""
    with d.client(timeout=30) as c:
        c.call("bdev_malloc_create", {"name": "Malloc0", "num_blocks": 2048, "block_size": 512})
        c.call("nvmf_create_transport", {"trtype": "RDMA"})
        c.call("nvmf_create_subsystem", {"nqn": NQN, "allow_any_host": True})
        c.call("nvmf_subsystem_add_ns", {"nqn": NQN, "namespace": {"bdev_name": "Malloc0"}})


def test_metrics_parse_and_follow_the_configuration(start_daemon):
    port = free_port()
    d = start_daemon(args=["--metrics", str(port)])
    configure(d)

    status, ctype, text = get(port, "/metrics")
    assert status == 200
    assert ctype.startswith("text/plain; version=0.0.4")
    fams = families(text)
    assert fams["rtgt_up"].samples[0].value == 1
    # The client library strips a counter's _total from the family name.
    ops = fams["rtgt_bdev_ops"]
    assert ops.type == "counter"
    assert {s.labels["op"] for s in ops.samples if s.labels["bdev"] == "Malloc0"} >= {"read", "write", "flush"}
    lat = fams["rtgt_bdev_latency_seconds"]
    assert lat.type == "histogram"
    buckets = [s for s in lat.samples if s.name.endswith("_bucket") and s.labels["op"] == "read"]
    assert buckets[-1].labels["le"] == "+Inf" and len(buckets) == 24
    assert [float(b.labels["le"]) for b in buckets[:3]] == [1e-06, 2e-06, 4e-06]
    (ns,) = fams["rtgt_nvmf_namespace_info"].samples
    assert ns.labels == {"subsystem": NQN, "nsid": "1", "bdev": "Malloc0"}
    (ctrls,) = [s for s in fams["rtgt_nvmf_subsystem_controllers"].samples if s.labels["subsystem"] == NQN]
    assert ctrls.value == 0
    busy = fams["rtgt_reactor_busy_seconds"]
    assert busy.type == "counter" and busy.samples[0].labels["reactor"] == "0"
    assert "rtgt_poll_group_current_qpairs" in fams

    assert get(port, "/healthz")[:1] == (200,)
    assert get(port, "/nope")[0] == 404
    assert get(port, "/metrics", method="POST")[0] == 405


def test_healthz_says_starting_until_framework_start_init(start_daemon):
    port = free_port()
    d = start_daemon(args=["--metrics", f"127.0.0.1:{port}", "--wait-for-rpc"])
    status, _, body = get(port, "/healthz")
    assert (status, body) == (503, "starting: waiting for framework_start_init\n")
    fams = families(get(port, "/metrics")[2])
    assert "rtgt_up" in fams and "rtgt_bdev_ops" not in fams
    with d.client(timeout=30) as c:
        c.call("framework_start_init")
    assert get(port, "/healthz")[0] == 200


def test_the_grafana_dashboard_uses_only_metrics_rtgt_exports(start_daemon):
    import json
    import pathlib
    import re

    dash = json.loads((pathlib.Path(__file__).parents[2] / "docs/grafana/rtgt-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for e in exprs for m in re.findall(r"\brtgt_[a-z_]+", e)}
    assert len(used) >= 10

    port = free_port()
    d = start_daemon(args=["--metrics", str(port)])
    configure(d)
    text = get(port, "/metrics")[2]
    exported = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    assert used <= exported, f"the dashboard uses metrics rtgt does not export: {sorted(used - exported)}"
