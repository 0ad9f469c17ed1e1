"""pytest fixtures: a live `rtgt serve --fabric sim` per test, on a temporary socket.

The binary comes from $RTGT_BIN, else $CARGO_TARGET_DIR (or target/) debug|release; the
caller builds it (`cargo build -p rtgt`). Without it the session stops with an error.
"""

import os

import pytest

from helpers import Daemon, find_binary



def pytest_sessionstart(session):
    binary = find_binary()
    if binary is None:
        raise pytest.UsageError(
            "rtgt binary not found: build it first (cargo build -p rtgt) or set RTGT_BIN; "
            "looked in $CARGO_TARGET_DIR (or target/) under debug/ and release/"
        )
    session.config.rtgt_bin = binary


def pytest_report_header(config):
    return f"rtgt binary: {find_binary()}"


@pytest.fixture
def rtgt_bin(request):
    return request.config.rtgt_bin


@pytest.fixture
def start_daemon(rtgt_bin, tmp_path_factory, request):
    """Starts daemons on demand (`start_daemon(args=[...], tcp=True)`); stops them after the
    test and checks that each one shut down cleanly."""
    started = []

    def start(args=None, tcp=True):
        d = Daemon(rtgt_bin, tmp_path_factory.mktemp("rtgt"), tcp=tcp, args=args)
        started.append(d)
        return d.start()

    yield start
    for d in started:
        code = d.stop()
        if code not in (0, None) and not getattr(d, "expect_unclean", False):
            pytest.fail(f"rtgt serve exited with {code}:\n{d.read_log()}", pytrace=False)


@pytest.fixture
def daemon(start_daemon):
    return start_daemon()


@pytest.fixture
def client(daemon):
    with daemon.client(timeout=30) as c:
        yield c


@pytest.fixture
def rdma(client):
    """Creates the RDMA transport on the test's daemon (every rtgt build links it)."""
    client.call("nvmf_create_transport", {"trtype": "RDMA"})
    return "RDMA"
