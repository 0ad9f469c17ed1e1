"""Shared test helpers: finding the rtgt binary, running `rtgt serve`, running rtgt-rpc,
and small fake servers for framing tests."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional

import rtgt

REPO = Path(__file__).resolve().parents[2]
NQN = "nqn.2016-06.io.spdk:cnode1"
HOSTNQN = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
HOSTNQN2 = "nqn.2014-08.org.nvmexpress:uuid:66666666-7777-8888-9999-000000000000"
SIM_ADDR = "10.0.0.1"  # the target device of `rtgt serve --fabric sim`
READY = "rtgt ready: JSON-RPC on"  # logged by rtgt serve once every endpoint serves


def find_binary() -> Optional[Path]:
    """$RTGT_BIN, else rtgt under $CARGO_TARGET_DIR or target/ (debug or release, newest)."""
    explicit = os.environ.get("RTGT_BIN")
    if explicit:
        return Path(explicit) if Path(explicit).is_file() else None
    base = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    found = [base / kind / "rtgt" for kind in ("debug", "release")]
    found = [p for p in found if p.is_file() and os.access(p, os.X_OK)]
    if not found:
        return None
    return max(found, key=lambda p: p.stat().st_mtime)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """One `rtgt serve --fabric sim` process on a temporary socket (and a TCP port)."""

    def __init__(self, binary: Path, workdir: Path, tcp: bool = True, args: Optional[List[str]] = None):
        self.binary = binary
        self.workdir = workdir
        self.sock = str(workdir / "rtgt.sock")
        self.port = free_port() if tcp else None
        self.args = list(args or [])
        self.log_path = workdir / "rtgt.log"
        self.proc: Optional[subprocess.Popen] = None
        self.returncode: Optional[int] = None

    def command(self) -> List[str]:
        cmd = [str(self.binary), "serve", "-r", self.sock, "--fabric", "sim", "--log-level", "info"]
        if self.port:
            cmd += ["--rpc-listen", f"127.0.0.1:{self.port}"]
        return cmd + self.args

    def start(self, timeout: float = 20.0) -> "Daemon":
        self.log = open(self.log_path, "ab")
        offset = self.log.tell()
        self.proc = subprocess.Popen(self.command(), stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"rtgt serve exited with {self.proc.returncode} before its socket appeared:\n"
                    + self.read_log()
                )
            # Not the socket file: rtgt serve briefly serves it once to probe the lock before
            # applying its configuration, and a client connecting then is reset.
            if READY in self.read_log(offset) and os.path.exists(self.sock):
                return self
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"rtgt serve did not open {self.sock} within {timeout} s:\n" + self.read_log())

    def client(self, **kw) -> rtgt.Client:
        return rtgt.Client(self.sock, **kw)

    def stop(self, timeout: float = 15.0) -> Optional[int]:
        if self.proc is None:
            return self.returncode
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.returncode = self.proc.returncode
        self.proc = None
        self.log.close()
        return self.returncode

    def read_log(self, offset: Optional[int] = None) -> str:
        """The log from byte ``offset`` on, or its last 8000 characters."""
        try:
            data = self.log_path.read_bytes()
            if offset is not None:
                return data[offset:].decode(errors="replace")
            return data.decode(errors="replace")[-8000:]
        except OSError:
            return ""


def rpc_cmd() -> List[str]:
    """How to run rtgt-rpc: the installed console script, else `python -m rtgt`."""
    script = shutil.which("rtgt-rpc")
    if script and Path(script).resolve().parent == Path(sys.executable).resolve().parent:
        return [script]
    return [sys.executable, "-m", "rtgt"]


def run_rpc(*args: str, sock: Optional[str] = None, stdin: Optional[str] = None,
            timeout: float = 60.0) -> subprocess.CompletedProcess:
    cmd = rpc_cmd()
    if sock is not None:
        cmd += ["-s", sock]
    return subprocess.run(cmd + list(args), input=stdin, capture_output=True, text=True,
                          timeout=timeout)


class FakeServer:
    """A Unix-socket server that hands each accepted connection to ``handler(conn)`` on a
    thread. For framing tests that need exact control over what the client reads."""

    def __init__(self, path: str, handler: Callable[[socket.socket], None]):
        self.path = path
        self.handler = handler
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(8)
        self.received: List[bytes] = []
        self.conns: List[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(conn)
            threading.Thread(target=self._run, args=(conn,), daemon=True).start()

    def _run(self, conn: socket.socket) -> None:
        try:
            self.handler(conn)
        except OSError:
            pass

    def close(self) -> None:
        self.listener.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
        try:
            os.unlink(self.path)
        except OSError:
            pass


def read_request(conn: socket.socket, buf: bytearray) -> Optional[dict]:
    """Reads one JSON request from ``conn`` with a raw decoder (``buf`` keeps leftovers)."""
    dec = json.JSONDecoder()
    while True:
        text = buf.decode("utf-8", errors="strict").lstrip() if buf else ""
        if text:
            try:
                value, end = dec.raw_decode(text)
                rest = text[end:].encode()
                buf[:] = rest
                return value
            except ValueError:
                pass
        chunk = conn.recv(65536)
        if not chunk:
            return None
        buf += chunk
