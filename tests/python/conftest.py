"""Fixtures for the rtgt JSON-RPC compatibility suite.

Each test gets a fresh `rtgt serve --fabric sim` on a private Unix socket and talks to it with
SPDK's own client: the `spdk-rpc` console script (`pip install -r requirements.txt`) and, where
a test needs raw requests, `spdk.rpc.client.JSONRPCClient`. Nothing is installed here.

The rtgt binary is `$RTGT_BIN` if set, else the newest of `$CARGO_TARGET_DIR/{debug,release}/rtgt`
and `<repo>/target/{debug,release}/rtgt` (build it with `cargo build -p rtgt`).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from spdk.rpc.client import JSONRPCClient, JSONRPCException

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 20.0


def find_rtgt():
    if os.environ.get("RTGT_BIN"):
        return os.environ["RTGT_BIN"]
    roots = []
    if os.environ.get("CARGO_TARGET_DIR"):
        roots.append(Path(os.environ["CARGO_TARGET_DIR"]))
    roots.append(REPO / "target")
    found = [r / p / "rtgt" for r in roots for p in ("debug", "release")]
    found = [p for p in found if p.is_file() and os.access(p, os.X_OK)]
    if not found:
        pytest.exit("no rtgt binary: run `cargo build -p rtgt` (or set RTGT_BIN)", returncode=2)
    return str(max(found, key=lambda p: p.stat().st_mtime))


def find_spdk_rpc():
    exe = shutil.which("spdk-rpc")
    if exe is None:
        pytest.exit("spdk-rpc not found: pip install -r tests/python/requirements.txt", returncode=2)
    return exe


class RpcFailed(Exception):
    """A JSON-RPC error answer: `code` and `message`."""

    def __init__(self, code, message, output=""):
        super().__init__(f"{code} {message}")
        self.code = code
        self.message = message
        self.output = output


def parse_error(text):
    """The error object that spdk-rpc / JSONRPCClient print after 'response:'."""
    m = re.search(r"response:\s*(\{.*?\n\})", text, re.S)
    if m:
        err = json.loads(m.group(1))
        return err["code"], err["message"]
    m = re.search(r'"code":\s*(-?\d+),\s*"message":\s*"([^"]*)"', text)
    if m:
        return int(m.group(1)), m.group(2)
    raise AssertionError(f"no JSON-RPC error in output:\n{text}")


class Rtgt:
    """A running `rtgt serve --fabric sim` and ways to talk to it."""

    def __init__(self, binary, spdk_rpc, extra=()):
        self.binary = binary
        self.spdk_rpc = spdk_rpc
        # Unix socket paths are limited to 108 bytes: keep them short.
        self.dir = Path(tempfile.mkdtemp(prefix="rtgt-py-", dir="/tmp"))
        self.sock = str(self.dir / "spdk.sock")
        self.extra = list(extra)
        self.proc = None
        self.log_path = self.dir / "rtgt.log"
        self.start()

    def start(self, extra=None):
        if extra is not None:
            self.extra = list(extra)
        self.log = open(self.log_path, "a")
        cmd = [self.binary, "serve", "--fabric", "sim", "--cores", "2", "-r", self.sock,
               *self.extra]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"rtgt exited with {self.proc.returncode}:\n{self.logs()}")
            if os.path.exists(self.sock):
                try:
                    with JSONRPCClient(self.sock, timeout=5) as c:
                        c.call("rpc_get_methods")
                    return
                except (JSONRPCException, OSError):
                    pass
            if time.monotonic() > deadline:
                raise AssertionError(f"rtgt did not answer within {START_TIMEOUT} s:\n{self.logs()}")
            time.sleep(0.02)

    def logs(self):
        try:
            return self.log_path.read_text()
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=20):
        """Signals the daemon and returns its exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        finally:
            self.log.close()
        return rc

    def restart(self, extra=None):
        assert self.stop() == 0, self.logs()
        self.start(extra)

    # ----- spdk-rpc, the official CLI -----

    def cli(self, *args, stdin=None):
        """Runs `spdk-rpc -s SOCK args...`; returns the CompletedProcess."""
        return subprocess.run([self.spdk_rpc, "-s", self.sock, *map(str, args)], input=stdin,
                              capture_output=True, text=True, timeout=120)

    def rpc(self, *args, stdin=None):
        """`spdk-rpc` that must succeed; returns its output as JSON when it is JSON."""
        r = self.cli(*args, stdin=stdin)
        if r.returncode != 0:
            raise AssertionError(f"spdk-rpc {' '.join(map(str, args))} failed:\n{r.stdout}\n{r.stderr}")
        out = r.stdout.strip()
        try:
            return json.loads(out) if out else None
        except json.JSONDecodeError:
            return out

    def rpc_fail(self, *args):
        """`spdk-rpc` that must fail with a JSON-RPC error; returns RpcFailed."""
        r = self.cli(*args)
        assert r.returncode != 0, f"spdk-rpc {' '.join(map(str, args))} succeeded:\n{r.stdout}"
        code, message = parse_error(r.stdout + r.stderr)
        return RpcFailed(code, message, r.stdout + r.stderr)

    # ----- spdk.rpc.client, for requests the CLI cannot make -----

    def client(self, **kw):
        return JSONRPCClient(self.sock, timeout=60, **kw)

    def call(self, method, params=None):
        with self.client() as c:
            return c.call(method, params)

    def call_fail(self, method, params=None):
        with self.client() as c:
            try:
                result = c.call(method, params)
            except JSONRPCException as e:
                code, message = parse_error(e.message)
                return RpcFailed(code, message, e.message)
        raise AssertionError(f"{method} {params} succeeded: {result}")


@pytest.fixture(scope="session")
def rtgt_bin():
    return find_rtgt()


@pytest.fixture(scope="session")
def spdk_rpc_exe():
    return find_spdk_rpc()


@pytest.fixture
def make_target(rtgt_bin, spdk_rpc_exe):
    """Factory: `make_target(extra_args)` starts another daemon; all are stopped at the end."""
    started = []

    def make(extra=()):
        t = Rtgt(rtgt_bin, spdk_rpc_exe, extra)
        started.append(t)
        return t

    yield make
    for t in started:
        if t.proc and t.proc.poll() is None:
            rc = t.stop()
            assert rc == 0, f"rtgt exited with {rc} on SIGTERM:\n{t.logs()}"
        shutil.rmtree(t.dir, ignore_errors=True)


@pytest.fixture
def target(make_target):
    """A fresh daemon in the RUNTIME state."""
    return make_target()


@pytest.fixture
def startup_target(make_target):
    """A fresh daemon started with --wait-for-rpc (STARTUP state)."""
    return make_target(["--wait-for-rpc"])


def rdma_transport(t, *args):
    """Creates the RDMA transport with spdk-rpc; every rtgt build links it, so failure fails."""
    r = t.cli("nvmf_create_transport", "-t", "RDMA", *args)
    if r.returncode != 0:
        code, message = parse_error(r.stdout + r.stderr)
        raise AssertionError(f"nvmf_create_transport failed: {code} {message}")
    return r
