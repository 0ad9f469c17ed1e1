"""The rtgt.Client: framing, ids, errors with codes, timeouts, retries, TCP, batches."""

import json
import socket
import threading
import time

import pytest

import rtgt
from helpers import HOSTNQN, NQN, Daemon, FakeServer, read_request


# ----- against a live rtgt serve -----


def test_call_returns_results(client):
    assert "nvmf_create_subsystem" in client.call("rpc_get_methods")
    version = client.call("spdk_get_version")
    assert version["version"].startswith("SPDK v")
    assert client.call("bdev_malloc_create", {"num_blocks": 2048, "block_size": 512, "name": "Malloc0"}) == "Malloc0"
    (bdev,) = client.call("bdev_get_bdevs", {"name": "Malloc0"})
    assert (bdev["num_blocks"], bdev["block_size"], bdev["product_name"]) == (2048, 512, "Malloc disk")


def test_attribute_calls_drop_none_arguments(client):
    assert client.bdev_null_create(name="Null0", num_blocks=100, block_size=4096, uuid=None) == "Null0"
    assert [b["name"] for b in client.bdev_get_bdevs()] == ["Null0"]
    assert client.nvmf_create_subsystem(nqn=NQN, allow_any_host=True, serial_number=None) is True


def test_ids_count_up_per_connection(daemon):
    c = daemon.client()
    ids = [c.send("spdk_get_version") for _ in range(3)]
    responses = [c.recv() for _ in range(3)]
    assert ids == [1, 2, 3]
    assert [r["id"] for r in responses] == [1, 2, 3]
    c.close()
    assert c.send("spdk_get_version") == 1, "a new connection starts again at 1"
    assert c.recv()["id"] == 1
    c.close()


def test_pipelined_requests_are_answered_in_order(client):
    for i in range(20):
        client.send("bdev_null_create", {"name": f"N{i}", "num_blocks": 8, "block_size": 512})
    assert [client.recv()["result"] for _ in range(20)] == [f"N{i}" for i in range(20)]


def test_large_response_spans_many_reads(client):
    results = client.batch(
        [("bdev_null_create", {"name": f"Null{i:03}", "num_blocks": 8, "block_size": 512}) for i in range(300)]
    )
    assert results == [f"Null{i:03}" for i in range(300)]
    bdevs = client.call("bdev_get_bdevs")
    assert len(bdevs) == 300
    assert len(json.dumps(bdevs)) > 200_000


@pytest.mark.parametrize(
    "method,params,code,words",
    [
        ("no_such_method", None, -32601, ["Method not found"]),
        ("bdev_get_bdevs", {"name": "Nope"}, -19, ["Nope"]),
        ("bdev_malloc_delete", {"name": "Nope"}, -19, ["Nope"]),
        ("nvmf_create_subsystem", {"nqn": "not-an-nqn"}, -32603, ["not-an-nqn"]),
        ("nvmf_subsystem_add_host", {"nqn": NQN, "host": HOSTNQN}, -32602, [NQN]),
        ("nvmf_get_subsystems", {"bogus": 1}, -32602, []),
        ("nvmf_create_transport", {"trtype": "FOO"}, -32602, ["FOO"]),
        ("framework_start_init", None, -1, []),
    ],
)
def test_errors_carry_code_and_message(client, method, params, code, words):
    with pytest.raises(rtgt.RpcError) as ei:
        client.call(method, params)
    e = ei.value
    assert e.code == code, e
    assert e.method == method and e.params == params
    for w in words:
        assert w in e.message, e.message
    assert f"(code {code})" in str(e) and method in str(e)
    # the connection stays usable after an error
    assert client.call("spdk_get_version")


def test_duplicate_objects_report_spdk_codes(client):
    client.call("bdev_malloc_create", {"num_blocks": 64, "block_size": 512, "name": "M"})
    with pytest.raises(rtgt.RpcError) as ei:
        client.call("bdev_malloc_create", {"num_blocks": 64, "block_size": 512, "name": "M"})
    assert ei.value.code == -17 and "M" in ei.value.message
    client.call("nvmf_create_subsystem", {"nqn": NQN})
    with pytest.raises(rtgt.RpcError) as ei:
        client.call("nvmf_create_subsystem", {"nqn": NQN})
    assert ei.value.code == -32603 and NQN in ei.value.message


def test_batch_mixes_results_and_errors(client):
    out = client.batch(
        [
            ("bdev_null_create", {"name": "B0", "num_blocks": 8, "block_size": 512}),
            ("bdev_null_create", {"name": "B0", "num_blocks": 8, "block_size": 512}),
            ("spdk_get_version",),
        ]
    )
    assert out[0] == "B0"
    assert isinstance(out[1], rtgt.RpcError) and out[1].code == -17
    assert out[2]["version"].startswith("SPDK")


def test_tcp_endpoint(daemon):
    with rtgt.Client("127.0.0.1", port=daemon.port, timeout=10) as c:
        assert c.describe() == f"127.0.0.1:{daemon.port}"
        assert c.call("bdev_malloc_create", {"num_blocks": 64, "block_size": 512, "name": "T0"}) == "T0"
    with daemon.client() as c:
        assert [b["name"] for b in c.call("bdev_get_bdevs")] == ["T0"], "same target on both endpoints"


def test_a_connection_closed_while_idle_is_replaced(start_daemon):
    d = start_daemon(args=["--rpc-idle-timeout", "1"])
    with d.client(timeout=10) as c:
        assert c.call("spdk_get_version")["version"].startswith("SPDK")
        first = c._sock
        time.sleep(1.5)  # the server closes the idle connection after 1 s
        assert c.call("spdk_get_version")["version"].startswith("SPDK")
        assert c._sock is not first


def test_malformed_json_closes_the_connection(daemon):
    c = daemon.client(timeout=5)
    c.connect()
    c._sock.sendall(b'{"jsonrpc": "2.0", "method": ]')
    # SPDK closes the connection; rtgt first answers -32700 (id null), then closes it.
    try:
        response = c.recv()
    except rtgt.ConnectionClosed:
        response = None
    if response is not None:
        assert response["id"] is None and response["error"]["code"] == -32700, response
        with pytest.raises(rtgt.ConnectionClosed):
            c.recv()
    assert not c.connected
    assert c.call("spdk_get_version"), "the next call connects again"


def test_missing_socket_is_a_connect_error(tmp_path):
    c = rtgt.Client(str(tmp_path / "none.sock"))
    with pytest.raises(rtgt.ConnectError, match="none.sock"):
        c.call("spdk_get_version")


def test_connection_retries_wait_for_the_daemon(rtgt_bin, tmp_path):
    d = Daemon(rtgt_bin, tmp_path, tcp=False)
    with pytest.raises(rtgt.ConnectError, match="after 3 attempts"):
        rtgt.Client(d.sock, conn_retries=2, retry_interval=0.05).call("spdk_get_version")
    # The daemon starts 0.4 s after the first attempt; retries 0.2 s apart wait for it.
    timer = threading.Timer(0.4, d.start)
    t0 = time.monotonic()
    timer.start()
    try:
        with rtgt.Client(d.sock, conn_retries=50, retry_interval=0.2) as c:
            assert c.call("spdk_get_version")
        assert time.monotonic() - t0 >= 0.4
    finally:
        timer.join()
        assert d.stop() == 0


# ----- framing details, against fake servers -----


@pytest.fixture
def fake(tmp_path):
    servers = []

    def make(handler):
        s = FakeServer(str(tmp_path / f"fake{len(servers)}.sock"), handler)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()


def test_request_shape_omits_empty_params(fake):
    seen = []

    def handler(conn):
        buf = bytearray()
        while True:
            req = read_request(conn, buf)
            if req is None:
                return
            seen.append(req)
            conn.sendall(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": True}).encode() + b"\n")

    s = fake(handler)
    with rtgt.Client(s.path) as c:
        c.call("a")
        c.call("b", {})
        c.call("c", {"x": 1})
    assert seen == [
        {"jsonrpc": "2.0", "method": "a", "id": 1},
        {"jsonrpc": "2.0", "method": "b", "id": 2},
        {"jsonrpc": "2.0", "method": "c", "id": 3, "params": {"x": 1}},
    ]


def test_responses_split_and_coalesced(fake):
    """One response split byte by byte (with a multi-byte character cut in half), then two
    responses in one write, without newlines."""

    def handler(conn):
        buf = bytearray()
        r1 = read_request(conn, buf)
        body = json.dumps({"jsonrpc": "2.0", "id": r1["id"], "result": "naïve ✓"}, ensure_ascii=False).encode()
        for i in range(len(body)):
            conn.sendall(body[i : i + 1])
            time.sleep(0.001)
        r2 = read_request(conn, buf)
        r3 = read_request(conn, buf)
        both = json.dumps({"id": r2["id"], "result": 2}) + json.dumps({"id": r3["id"], "result": 3})
        conn.sendall(both.encode())
        read_request(conn, buf)

    s = fake(handler)
    with rtgt.Client(s.path, timeout=10) as c:
        assert c.call("one") == "naïve ✓"
        c.send("two")
        c.send("three")
        assert c.recv()["result"] == 2
        assert c.recv()["result"] == 3


def test_timeout_drops_the_connection(fake):
    def silent(conn):
        buf = bytearray()
        while read_request(conn, buf) is not None:
            pass

    s = fake(silent)
    c = rtgt.Client(s.path, timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(rtgt.RpcTimeout, match="timeout after 0.3 s"):
        c.call("spdk_get_version")
    assert 0.25 <= time.monotonic() - t0 < 2
    assert not c.connected, "a late answer must not be taken for the next call's"
    assert isinstance(rtgt.RpcTimeout("x"), TimeoutError)


def test_partial_response_then_close(fake):
    def half(conn):
        buf = bytearray()
        read_request(conn, buf)
        conn.sendall(b'{"jsonrpc": "2.0", "id": 1, "res')
        conn.close()

    s = fake(half)
    with pytest.raises(rtgt.ConnectionClosed, match="partial response"):
        rtgt.Client(s.path, timeout=5).call("x")


def test_mismatched_id_is_a_protocol_error(fake):
    def wrong(conn):
        buf = bytearray()
        read_request(conn, buf)
        conn.sendall(b'{"jsonrpc": "2.0", "id": 42, "result": true}\n')

    s = fake(wrong)
    with pytest.raises(rtgt.ProtocolError, match="42"):
        rtgt.Client(s.path, timeout=5).call("x")


def test_error_with_data_member(fake):
    def err(conn):
        buf = bytearray()
        r = read_request(conn, buf)
        conn.sendall(json.dumps({"id": r["id"], "error": {"code": -22, "message": "Invalid argument", "data": [1]}}).encode())

    s = fake(err)
    with pytest.raises(rtgt.RpcError) as ei:
        rtgt.Client(s.path, timeout=5).call("m", {"a": 1})
    assert (ei.value.code, ei.value.message, ei.value.data, ei.value.request_id) == (-22, "Invalid argument", [1], 1)


def test_argument_validation():
    with pytest.raises(ValueError):
        rtgt.Client("/x", timeout=0)
    with pytest.raises(ValueError):
        rtgt.Client("/x", conn_retries=-1)
    assert rtgt.Client("::1").describe() == "[::1]:5260"
    with pytest.raises(ValueError):
        rtgt.Client("/x").batch([])


def test_ipv6_loopback_tcp(tmp_path):
    # A bare TCP echo of one response, to check the address parsing path for IPv6 literals.
    try:
        srv = socket.socket(socket.AF_INET6)
        srv.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    srv.listen(1)
    port = srv.getsockname()[1]

    def serve():
        conn, _ = srv.accept()
        buf = bytearray()
        r = read_request(conn, buf)
        conn.sendall(json.dumps({"id": r["id"], "result": "v6"}).encode())
        conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    with rtgt.Client("::1", port=port, timeout=5) as c:
        assert c.call("x") == "v6"
    srv.close()
